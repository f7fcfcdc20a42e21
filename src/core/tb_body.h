/*
 * The Messages API's request body and usage objects.
 *
 *  - tb_scan_body(): one pass over a request body.  Validates the whole
 *    document (strict RFC 8259) and picks out what routing needs: model,
 *    stream, max_tokens, where system/tools/messages/metadata sit in
 *    the body, and whether it asks for a prompt-cache breakpoint (a
 *    "cache_control" member anywhere: on a system block, a tool, a
 *    message's block, or the top-level form; a tool's schema with a
 *    property of that name counts too).
 *  - tb_body_edit(): the body with the gateway's own edits, copied.
 *  - tb_usage_*: the usage counters of a Message or a stream's events.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_BODY_H
#define TB_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "tb_json.h"


#define TB_MODEL_MAX          256     /* longest model id accepted */

/* the smallest prefix the prompt cache takes (current models: 1,024 to
 * 4,096 tokens), and a stable prefix's size (system and tools) in
 * tokens, at 3.5 bytes a token */
#define TB_BODY_CACHEABLE_TOKENS  1024
#define tb_body_prefix_tokens(b)                                              \
    ((int64_t) (((b)->system.len + (b)->tools.len) * 2 / 7))


typedef struct {
    char                      model[TB_MODEL_MAX + 1];  /* unescaped, NUL */
    uint32_t                  model_off;        /* its string, quoted, */
    size_t                    model_len;
    unsigned                  has_model:1;
    unsigned                  has_stream:1;
    unsigned                  stream:1;
    unsigned                  breakpoint:1;     /* a "cache_control" in it,
                                                   at any depth */
    uint32_t                  model_vlen;       /* ... in the body: 0 none
                                                   (in what was padding) */
    int64_t                   max_tokens;       /* -1: absent */

    /* top-level values, as spans of the body (whole value, brackets
     * or quotes included) */
    tb_span_t                 system;
    tb_span_t                 tools;
    tb_span_t                 messages;
    tb_span_t                 metadata;
} tb_body_t;


/*
 * Returns 0, or -1 with a message for the client in err, e.g.
 * "request body is not valid JSON: expected ',' or '}' at byte 1234",
 * "request body must be a JSON object", "model: expected a string",
 * "stream: expected true or false",
 * "max_tokens: expected a non-negative integer".
 * Byte offsets count from 0.  Strings must be valid UTF-8 (RFC 3629).
 * On error body is left with its defaults (nothing found, max_tokens -1).
 * Duplicate top-level keys: the last one wins (as in most JSON parsers).
 */
int tb_scan_body(const unsigned char *p, size_t len, tb_body_t *body,
    char *err, size_t errlen);


/*
 * The gateway's own edits of a scanned body, made by copying it once with
 * the values changed at their spans (never re-serialised):
 *  - breakpoint: a prompt-cache breakpoint where the stable prefix ends:
 *    on the last block of system (a string system is made the one text
 *    block that carries it, its string unchanged), else on the last tool;
 *    nothing when neither has a place for one;
 *  - model: the model's value replaced by this one (as tb_body_model_ok()
 *    says it may be).
 * out has room for tb_body_edit_max(); returns the length written, with
 * body's spans moved to where their values are in out.
 */
#define TB_BODY_EDIT_ROOM   96      /* what a breakpoint adds, at most */

static inline size_t
tb_body_edit_max(size_t len, size_t model_len)
{
    return len + TB_BODY_EDIT_ROOM + model_len + 2;
}

size_t tb_body_edit(const unsigned char *p, size_t len, tb_body_t *body,
    int breakpoint, const char *model, size_t model_len, unsigned char *out);

/* 1 if s can be a model written by tb_body_edit(): printable ASCII, no
 * '"' or '\\' */
int tb_body_model_ok(const char *s, size_t len);


typedef struct {
    int64_t                   input_tokens;                 /* -1 unknown */
    int64_t                   output_tokens;
    int64_t                   cache_creation_input_tokens;
    int64_t                   cache_read_input_tokens;
    int64_t                   cache_creation_1h_input_tokens;   /* of the
                                    writes, for one hour (cache_creation.
                                    ephemeral_1h_input_tokens); -1 */
} tb_usage_t;


/* every prompt token the answer counted, cache reads and writes too; -1 */
static inline int64_t
tb_usage_prompt(const tb_usage_t *u)
{
    if (u->input_tokens < 0) {
        return -1;
    }

    return u->input_tokens
           + (u->cache_read_input_tokens > 0 ? u->cache_read_input_tokens : 0)
           + (u->cache_creation_input_tokens > 0
              ? u->cache_creation_input_tokens : 0);
}

void tb_usage_init(tb_usage_t *u);

/*
 * Reads the usage object found at path ("usage" for a Message body or a
 * message_delta event, "message.usage" for message_start) and overwrites
 * the fields it carries.  Returns 0 if a usage object was found.
 */
int tb_usage_merge(tb_usage_t *u, const unsigned char *p, size_t len,
    const char *path);

/*
 * A whole Message: validates the document (strict RFC 8259) and reads its
 * root's usage in the same pass.  0, or -1 with u untouched when it is not
 * one valid JSON document.
 */
int tb_usage_message(tb_usage_t *u, const unsigned char *p, size_t len);


#endif /* TB_BODY_H */
