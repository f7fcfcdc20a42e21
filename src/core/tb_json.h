/*
 * JSON without building a tree: validation (strict RFC 8259), lookups of
 * one value by a dotted path of object keys ("error.type",
 * "message.usage.input_tokens"), and escaping.  The scanners of the
 * Messages API's bodies (tb_body.h) and streams (tb_sse.h) are built on
 * the same walker.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_JSON_H
#define TB_JSON_H

#include <stddef.h>
#include <stdint.h>


#define TB_JSON_MAX_DEPTH     512     /* deeper documents are rejected */


typedef struct {
    size_t                    off;    /* offset of the value's first byte */
    size_t                    len;    /* 0: absent */
} tb_span_t;


/* 0 when p..p+len is one valid JSON document (whitespace around allowed) */
int tb_json_validate(const unsigned char *p, size_t len);

/*
 * Dotted-path lookups in a JSON document whose root is an object.  Return 0
 * when found with the right type, -1 otherwise (absent, wrong type, invalid
 * document).  Only object keys are followed, never array indexes.
 *
 * tb_json_get_str() unescapes into buf (NUL-terminated, truncated to
 * size - 1 bytes; *len gets the untruncated unescaped length).
 */
int tb_json_get_int(const unsigned char *p, size_t len, const char *path,
    int64_t *value);
int tb_json_get_str(const unsigned char *p, size_t len, const char *path,
    char *buf, size_t size, size_t *outlen);
int tb_json_get_bool(const unsigned char *p, size_t len, const char *path,
    int *value);

/* writes s as a JSON string body (no quotes) into buf; returns bytes
 * needed (like snprintf), escaping '"', '\\' and control bytes */
size_t tb_json_escape(char *buf, size_t size, const char *s, size_t n);


#endif /* TB_JSON_H */
