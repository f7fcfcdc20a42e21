/*
 * libFuzzer: bytes fed to the event-stream decoder, whole and split where
 * the first byte of the input says, then one at a time; every frame it
 * gives re-encoded as Bedrock's SSE.  The splits must agree (frames,
 * bytes of SSE, whether the stream broke), a frame's SSE must stay
 * within its bound and an event's be exactly "event: <name>\ndata: <one
 * line of JSON>\n\n".  Then the input taken as a payload: framed by the
 * encoder, it decodes to itself.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_evstream.h"
#include "tb_json.h"


typedef struct {
    uint64_t         frames;
    uint64_t         sse;
    uint64_t         sum;
    const uint8_t   *want;
    size_t           want_len;
    unsigned         matched;
} seen_t;


static int
frame(void *data, const tb_evs_frame_t *f)
{
    size_t          n, i, max;
    seen_t         *s = data;
    tb_evs_kind_e   kind;
    unsigned char  *out;

    s->frames++;

    if (s->want) {
        if (f->payload_len == s->want_len
            && (s->want_len == 0
                || memcmp(f->payload, s->want, s->want_len) == 0)
            && f->message_type_len == 5
            && memcmp(f->message_type, "event", 5) == 0)
        {
            s->matched++;
        }

        return 0;
    }

    max = tb_evs_sse_max(f->payload_len);
    out = malloc(max);
    if (out == NULL) {
        return 0;
    }

    n = tb_evs_bedrock_sse(f, out, max, &kind);

    if (n > max) {
        abort();
    }

    if (kind == TB_EVS_EVENT) {
        const unsigned char  *nl, *data;

        if (n < 18 || memcmp(out, "event: ", 7) != 0
            || out[n - 1] != '\n' || out[n - 2] != '\n')
        {
            abort();
        }

        nl = memchr(out, '\n', n);
        data = nl + 1;

        if (memcmp(data, "data: ", 6) != 0
            || memchr(data, '\n', (size_t) (out + n - 2 - data)) != NULL
            || memchr(data, '\r', (size_t) (out + n - 2 - data)) != NULL
            || tb_json_validate(data + 6, (size_t) (out + n - 2 - data - 6))
               != 0)
        {
            abort();
        }
    }

    if (kind == TB_EVS_EXCEPTION
        && (n < 20 || memcmp(out, "event: error\ndata: {", 20) != 0))
    {
        abort();
    }

    s->sse += n;

    for (i = 0; i < n; i++) {
        s->sum = s->sum * 31 + out[i];
    }

    free(out);

    return 0;
}


static int
run(const uint8_t *p, size_t size, size_t cut, int bytewise, seen_t *s)
{
    int       rc;
    size_t    i;
    tb_evs_t  d;

    memset(s, 0, sizeof(seen_t));
    tb_evs_init(&d, 65536);

    if (bytewise) {
        rc = 0;

        for (i = 0; i < size && rc == 0; i++) {
            rc = tb_evs_feed(&d, p + i, 1, frame, s);
        }

    } else {
        rc = tb_evs_feed(&d, p, cut, frame, s);

        if (rc == 0) {
            rc = tb_evs_feed(&d, p + cut, size - cut, frame, s);
        }
    }

    tb_evs_free(&d);

    return rc;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int             a, b, c;
    size_t          cut, n;
    seen_t          s1, s2, s3, s4;
    tb_evs_t        d;
    unsigned char  *buf;

    if (size == 0) {
        return 0;
    }

    cut = data[0] % size;
    data++;
    size--;

    if (cut > size) {
        cut = size;
    }

    a = run(data, size, size, 0, &s1);
    b = run(data, size, cut, 0, &s2);
    c = run(data, size, 0, 1, &s3);

    if (a != b || a != c || s1.frames != s2.frames || s1.frames != s3.frames
        || s1.sse != s2.sse || s1.sse != s3.sse || s1.sum != s2.sum
        || s1.sum != s3.sum)
    {
        abort();
    }

    /* the input as a payload: framed, it comes back as it was */

    n = tb_evs_encode(NULL, 0, "event", "chunk", NULL, data, size);
    buf = malloc(n);
    if (buf == NULL) {
        return 0;
    }

    if (tb_evs_encode(buf, n, "event", "chunk", NULL, data, size) != n) {
        abort();
    }

    memset(&s4, 0, sizeof(seen_t));
    s4.want = data;
    s4.want_len = size;

    tb_evs_init(&d, n);

    if (tb_evs_feed(&d, buf, cut < n ? cut : n, frame, &s4) != 0
        || (cut < n && tb_evs_feed(&d, buf + cut, n - cut, frame, &s4) != 0)
        || s4.matched != 1 || !tb_evs_idle(&d))
    {
        abort();
    }

    tb_evs_free(&d);
    free(buf);

    return 0;
}
