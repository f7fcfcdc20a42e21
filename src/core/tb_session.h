/*
 * What a request tells the router before it is sent: its conversation
 * (the affinity key) and its size (the input estimate).
 *
 * The affinity key is the X-TokenBiryani-Session header when the client
 * sends one, otherwise a fingerprint of what stays the same for a whole
 * conversation from its first turn on: the model, the system prompt, the
 * sorted tool names and the first user message.  cache_control markers
 * are ignored wherever they are (clients move them every turn).  Either
 * way the key is scoped by the virtual key's name, so two tenants never
 * share a session.
 *
 * Plain C, no nginx headers.  The body must have passed tb_scan_body().
 */

#ifndef TB_SESSION_H
#define TB_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "tb_body.h"


#define TB_SESSION_HEADER_MAX   128    /* bytes of the header used */
#define TB_IMAGE_TOKENS         1600   /* an image, at most */


typedef enum {
    TB_SESSION_NONE = 0,
    TB_SESSION_HEADER,
    TB_SESSION_FINGERPRINT
} tb_session_source_e;


/*
 * The session key: from the header when hlen > 0, else the fingerprint.
 * scope is the key name ("" in open mode).  Never 0.
 */
uint64_t tb_session_key(const unsigned char *body, size_t len,
    const tb_body_t *b, const char *header, size_t hlen, const char *scope,
    size_t slen, tb_session_source_e *source);

/*
 * Input tokens before the safety margin: the body's bytes / 3.5, except
 * that base64 images count as TB_IMAGE_TOKENS each and base64 documents
 * as their decoded size / 32, so that pictures do not read as megatokens.
 */
int64_t tb_estimate_input(const unsigned char *body, size_t len,
    const tb_body_t *b);

/*
 * The same in its two parts: the bytes that are text (the whole body but
 * its base64 payloads), whose tokens per byte a model's estimator learns,
 * and the tokens of the base64 payloads, estimated as above.
 */
void tb_estimate_input_parts(const unsigned char *body, size_t len,
    const tb_body_t *b, int64_t *text_bytes, int64_t *fixed_tokens);

#endif /* TB_SESSION_H */
