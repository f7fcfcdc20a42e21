/*
 * JSON and SSE scanning without building a tree.
 *
 *  - tb_scan_body(): one pass over a Messages API request body.  Validates
 *    the whole document (strict RFC 8259) and picks out what routing needs:
 *    model, stream, max_tokens and where system/tools/messages/metadata
 *    sit in the body.  The body itself is never modified.
 *  - tb_json_get_*(): look up one value by a dotted path of object keys
 *    ("error.type", "message.usage.input_tokens") in a JSON document.
 *  - tb_sse_*: an incremental Server-Sent Events parser for Messages API
 *    streams: finds the commit point (the first content_block_delta),
 *    error events and the usage counters.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_JSON_H
#define TB_JSON_H

#include <stddef.h>
#include <stdint.h>


#define TB_MODEL_MAX          256     /* longest model id accepted */
#define TB_JSON_MAX_DEPTH     512     /* deeper documents are rejected */


typedef struct {
    size_t                    off;    /* offset of the value's first byte */
    size_t                    len;    /* 0: absent */
} tb_span_t;


typedef struct {
    char                      model[TB_MODEL_MAX + 1];  /* unescaped, NUL */
    size_t                    model_len;
    unsigned                  has_model:1;
    unsigned                  has_stream:1;
    unsigned                  stream:1;
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


typedef struct {
    int64_t                   input_tokens;                 /* -1 unknown */
    int64_t                   output_tokens;
    int64_t                   cache_creation_input_tokens;
    int64_t                   cache_read_input_tokens;
} tb_usage_t;

void tb_usage_init(tb_usage_t *u);

/*
 * Reads the usage object found at path ("usage" for a Message body or a
 * message_delta event, "message.usage" for message_start) and overwrites
 * the fields it carries.  Returns 0 if a usage object was found.
 */
int tb_usage_merge(tb_usage_t *u, const unsigned char *p, size_t len,
    const char *path);


#define TB_SSE_LINE_MAX       (16 * 1024)  /* longest buffered data */

/* what tb_sse_feed() saw during one call (bitmask) */
#define TB_SSE_DELTA          0x01   /* first content_block_delta began */
#define TB_SSE_ERROR          0x02   /* an error event was dispatched */
#define TB_SSE_STOP           0x04   /* message_stop was dispatched */
#define TB_SSE_USAGE          0x08   /* usage changed */


typedef struct {
    /* results */
    unsigned                  delta:1;        /* commit point reached */
    unsigned                  error:1;        /* an error event was seen */
    unsigned                  stop:1;         /* message_stop seen */
    tb_usage_t                usage;          /* message_start, then the
                                                 last message_delta's
                                                 cumulative counters */
    char                      error_type[64];     /* error.error.type */
    char                      error_message[256]; /* error.error.message */
    uint64_t                  events;         /* events dispatched */
    uint64_t                  bytes;          /* bytes fed */

    /* parser state, private */
    unsigned                  state;
    unsigned                  want_data:1;
    unsigned                  skip_line:1;
    unsigned                  overflow:1;
    unsigned                  saw_cr:1;
    unsigned                  saw_data:1;     /* a data line this event */
    unsigned                  event_long:1;   /* name did not fit event */
    unsigned                  field:2;        /* field the line sets */
    char                      event[32];
    size_t                    event_len;
    unsigned char            *line;           /* TB_SSE_LINE_MAX bytes */
    size_t                    line_len;
    unsigned char            *data;           /* TB_SSE_LINE_MAX bytes */
    size_t                    data_len;
} tb_sse_t;


/*
 * line and data must each point at TB_SSE_LINE_MAX bytes of storage the
 * caller owns (a request pool in nginx); the parser never allocates.
 */
void tb_sse_init(tb_sse_t *s, unsigned char *line, unsigned char *data);

/* feeds decoded (de-chunked) stream bytes, any split; returns TB_SSE_* */
unsigned tb_sse_feed(tb_sse_t *s, const unsigned char *p, size_t n);

#endif /* TB_JSON_H */
