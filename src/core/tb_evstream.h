/*
 * AWS event-stream (application/vnd.amazon.eventstream), the framing of
 * Bedrock's invoke-with-response-stream, decoded incrementally over any
 * split of the bytes; and each frame re-encoded as the Server-Sent Event
 * an Anthropic client expects.
 *
 * A frame:
 *
 *   total length u32 | headers length u32 | prelude CRC32 u32 |
 *   headers | payload | message CRC32 u32            (big endian)
 *
 * the prelude CRC over the first 8 bytes, the message CRC over everything
 * before it (CRC-32 of ISO-HDLC, as gzip's).  A header is
 * name length u8 | name | type u8 | value; strings (type 7) and byte
 * arrays (6) carry a u16 length.  A Bedrock event's payload is
 * {"bytes":"<base64 of one Anthropic event's JSON>"}.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_EVSTREAM_H
#define TB_EVSTREAM_H

#include <stddef.h>
#include <stdint.h>


#define TB_EVS_FRAME_MAX      (4 * 1024 * 1024)  /* a larger one: broken */


typedef struct {
    const unsigned char      *message_type;     /* ":message-type": event, */
    size_t                    message_type_len; /* exception or error */
    const unsigned char      *event_type;       /* ":event-type": chunk */
    size_t                    event_type_len;
    const unsigned char      *exception_type;   /* ":exception-type" */
    size_t                    exception_type_len;
    const unsigned char      *error_code;       /* ":error-code" */
    size_t                    error_code_len;
    const unsigned char      *payload;
    size_t                    payload_len;
} tb_evs_frame_t;


/* a whole frame; non-zero stops the feed (returned by tb_evs_feed) */
typedef int (*tb_evs_frame_pt)(void *data, const tb_evs_frame_t *f);


typedef struct {
    unsigned char            *buf;      /* a frame begun in an earlier */
    size_t                    len;      /* feed, its bytes so far */
    size_t                    cap;
    size_t                    max;      /* the largest frame accepted */
    uint64_t                  frames;   /* decoded */
    uint64_t                  bytes;    /* fed */
    const char               *why;      /* what broke it: NULL while ok */
} tb_evs_t;


void tb_evs_init(tb_evs_t *d, size_t max);
void tb_evs_free(tb_evs_t *d);

/*
 * Feeds stream bytes.  0 when every whole frame was handed to cb (a part
 * of the next one kept), -1 when the stream is broken (d->why says how:
 * a CRC that does not match, a length no frame can have, a malformed
 * header; no memory), or what cb returned when it stopped the feed.  A
 * broken decoder stays broken.
 */
int tb_evs_feed(tb_evs_t *d, const unsigned char *p, size_t n,
    tb_evs_frame_pt cb, void *data);

/* whether the stream ended between frames (nothing kept) */
int tb_evs_idle(const tb_evs_t *d);

/* CRC-32 (ISO-HDLC: gzip's, zlib's crc32()), continued from crc */
uint32_t tb_crc32(uint32_t crc, const unsigned char *p, size_t n);


/* what a frame is to the client */
typedef enum {
    TB_EVS_EVENT = 0,       /* an Anthropic event: written as SSE */
    TB_EVS_EXCEPTION,       /* an exception or error frame: written as
                               an SSE error event */
    TB_EVS_SKIP,            /* nothing for the client (no payload) */
    TB_EVS_BAD              /* a payload that is not what Bedrock sends */
} tb_evs_kind_e;


/*
 * A Bedrock frame as SSE: "event: <type>\ndata: <json>\n\n" for an event
 * chunk (the base64 decoded, its JSON validated and its line breaks,
 * whitespace there, made spaces); an exception or error frame as an
 * Anthropic error event, of the type tb_provider_error() gives its name.
 * Bytes written, never more than tb_evs_sse_max() of its payload's
 * length (0 when out is smaller than that), *kind what it was.
 */
size_t tb_evs_bedrock_sse(const tb_evs_frame_t *f, unsigned char *out,
    size_t size, tb_evs_kind_e *kind);

static inline size_t
tb_evs_sse_max(size_t payload_len)
{
    /*
     * The SSE is written where its base64 was decoded, in front of the
     * string unescaped at the end: twice the payload, an event line; or
     * an error's message escaped.
     */
    return 2 * payload_len + 64 + 6 * 384 + 128;
}


/* the writer's side, for the mock's twin and the tests: one frame */
size_t tb_evs_encode(unsigned char *out, size_t size,
    const char *message_type, const char *event_type,
    const char *exception_type, const unsigned char *payload, size_t plen);


#endif /* TB_EVSTREAM_H */
