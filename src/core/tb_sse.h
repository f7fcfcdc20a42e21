/*
 * An incremental Server-Sent Events parser for Messages API streams: it
 * finds the commit point (the first content_block_delta), error events
 * and the usage counters, over any split of the bytes.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_SSE_H
#define TB_SSE_H

#include <stddef.h>
#include <stdint.h>

#include "tb_body.h"


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


#endif /* TB_SSE_H */
