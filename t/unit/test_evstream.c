/*
 * Unit tests: AWS event-stream decoding and Bedrock's frames as SSE.  A
 * stream of frames decodes the same split at every byte boundary; a
 * corrupt CRC, a length no frame can have, a malformed header break it
 * for good; exception frames become Anthropic error events; a payload
 * that is not what Bedrock sends is never passed on.  The CRC is checked
 * against the known check value of CRC-32/ISO-HDLC.
 */

#include <stdlib.h>

#include "tb_test.h"
#include "tb_evstream.h"
#include "tb_provider.h"


typedef struct {
    char             sse[65536];
    size_t           len;
    unsigned         frames;
    unsigned         exceptions;
    unsigned         bad;
} sink_t;


static int
sink(void *data, const tb_evs_frame_t *f)
{
    size_t          n;
    sink_t         *s = data;
    tb_evs_kind_e   kind;
    unsigned char   out[16384];

    s->frames++;

    n = tb_evs_bedrock_sse(f, out, sizeof(out), &kind);

    if (kind == TB_EVS_BAD) {
        s->bad++;
        return 0;
    }

    if (kind == TB_EVS_EXCEPTION) {
        s->exceptions++;
    }

    if (s->len + n < sizeof(s->sse)) {
        memcpy(s->sse + s->len, out, n);
        s->len += n;
        s->sse[s->len] = '\0';
    }

    return 0;
}


static size_t
b64(const char *in, char *out)
{
    size_t               i, n, w;
    uint32_t             v;
    static const char    t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                               "0123456789+/";

    n = strlen(in);

    for (i = 0, w = 0; i < n; i += 3) {
        v = (uint32_t) (unsigned char) in[i] << 16;
        if (i + 1 < n) v |= (uint32_t) (unsigned char) in[i + 1] << 8;
        if (i + 2 < n) v |= (uint32_t) (unsigned char) in[i + 2];

        out[w++] = t[v >> 18 & 63];
        out[w++] = t[v >> 12 & 63];
        out[w++] = (i + 1 < n) ? t[v >> 6 & 63] : '=';
        out[w++] = (i + 2 < n) ? t[v & 63] : '=';
    }

    out[w] = '\0';

    return w;
}


/* a chunk frame carrying one Anthropic event */
static size_t
chunk(unsigned char *out, size_t size, const char *event)
{
    char  payload[4200], enc[4096];

    b64(event, enc);
    snprintf(payload, sizeof(payload), "{\"bytes\":\"%s\",\"p\":\"abcd\"}",
             enc);

    return tb_evs_encode(out, size, "event", "chunk", NULL,
                         (const unsigned char *) payload, strlen(payload));
}


static const char  *events[] = {
    "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":"
    "\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\","
    "\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}",
    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
    "{\"type\":\"text\",\"text\":\"\"}}",
    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
    "\"text_delta\",\"text\":\"Hello \\u00e9\\n\"}}",
    "{\"type\":\"content_block_stop\",\"index\":0}",
    "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
    "\"usage\":{\"output_tokens\":15}}",
    "{\"type\":\"message_stop\",\"amazon-bedrock-invocationMetrics\":"
    "{\"inputTokenCount\":25,\"outputTokenCount\":15}}"
};


static size_t
stream(unsigned char *out, size_t size, char *want, size_t wsize)
{
    size_t  i, n, w;

    n = 0;
    w = 0;
    want[0] = '\0';

    for (i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        n += chunk(out + n, size - n, events[i]);
        w += (size_t) snprintf(want + w, wsize - w, "event: %.*s\ndata: %s\n\n",
                               (int) (strchr(events[i] + 9, '"') - events[i]
                                      - 9), events[i] + 9, events[i]);
    }

    return n;
}


TB_TEST(crc32_check_value)
{
    TB_CHECK_INT(tb_crc32(0, (const unsigned char *) "123456789", 9),
                 0xcbf43926);
    TB_CHECK_INT(tb_crc32(tb_crc32(0, (const unsigned char *) "1234", 4),
                          (const unsigned char *) "56789", 5), 0xcbf43926);
}


TB_TEST(every_split_decodes_the_same)
{
    size_t          n, cut, cut2;
    sink_t         *s;
    tb_evs_t        d;
    unsigned char   buf[8192];
    char            want[8192];

    s = malloc(sizeof(sink_t));
    n = stream(buf, sizeof(buf), want, sizeof(want));

    for (cut = 0; cut <= n; cut++) {
        memset(s, 0, sizeof(sink_t));
        tb_evs_init(&d, 0);

        TB_CHECK_INT(tb_evs_feed(&d, buf, cut, sink, s), 0);
        TB_CHECK_INT(tb_evs_feed(&d, buf + cut, n - cut, sink, s), 0);

        if (s->len != strlen(want) || strcmp(s->sse, want) != 0) {
            TB_FAIL_AT("split at %zu: got\n%s\nwant\n%s", cut, s->sse, want);
            break;
        }

        TB_CHECK(tb_evs_idle(&d));
        TB_CHECK_INT(d.frames, 6);
        tb_evs_free(&d);
    }

    /* and one byte at a time, and in three pieces */

    memset(s, 0, sizeof(sink_t));
    tb_evs_init(&d, 0);

    for (cut = 0; cut < n; cut++) {
        TB_CHECK_INT(tb_evs_feed(&d, buf + cut, 1, sink, s), 0);
        if (cut + 1 < n) {
            TB_CHECK(d.len > 0 || d.frames > 0);
        }
    }

    TB_CHECK_STR(s->sse, want);
    tb_evs_free(&d);

    for (cut = 1; cut < n; cut += 37) {
        for (cut2 = cut; cut2 <= n; cut2 += 53) {
            memset(s, 0, sizeof(sink_t));
            tb_evs_init(&d, 0);
            (void) tb_evs_feed(&d, buf, cut, sink, s);
            (void) tb_evs_feed(&d, buf + cut, cut2 - cut, sink, s);
            (void) tb_evs_feed(&d, buf + cut2, n - cut2, sink, s);
            if (strcmp(s->sse, want) != 0) {
                TB_FAIL_AT("split at %zu and %zu", cut, cut2);
            }
            tb_evs_free(&d);
        }
    }

    free(s);
}


TB_TEST(a_corrupt_crc_breaks_the_stream)
{
    size_t          n, i, first;
    sink_t         *s;
    tb_evs_t        d;
    unsigned char   buf[8192], bad[8192];
    char            want[8192];

    s = malloc(sizeof(sink_t));
    n = stream(buf, sizeof(buf), want, sizeof(want));
    first = chunk(bad, sizeof(bad), events[0]);

    /* every byte of the first frame, flipped: nothing passed on, ever */

    for (i = 0; i < first; i++) {
        memcpy(bad, buf, n);
        bad[i] ^= 0x20;

        memset(s, 0, sizeof(sink_t));
        tb_evs_init(&d, 0);

        if (tb_evs_feed(&d, bad, n, sink, s) != -1 || s->frames != 0) {
            TB_FAIL_AT("byte %zu flipped: %u frames passed on", i, s->frames);
        }

        TB_CHECK(d.why != NULL);

        /* broken for good */
        TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, s), -1);
        TB_CHECK_INT(s->frames, 0);
        tb_evs_free(&d);
    }

    /* the message CRC alone */
    memcpy(bad, buf, n);
    bad[first - 1] ^= 1;
    tb_evs_init(&d, 0);
    memset(s, 0, sizeof(sink_t));
    TB_CHECK_INT(tb_evs_feed(&d, bad, n, sink, s), -1);
    TB_CHECK_INT(s->frames, 0);
    TB_CHECK_STR(d.why, "a frame's message CRC does not match");
    tb_evs_free(&d);

    /* a prelude CRC that does not match: known before the frame is read */
    memcpy(bad, buf, n);
    bad[9] ^= 1;
    tb_evs_init(&d, 0);
    TB_CHECK_INT(tb_evs_feed(&d, bad, 12, sink, s), -1);
    TB_CHECK_STR(d.why, "a frame's prelude CRC does not match");
    tb_evs_free(&d);

    free(s);
}


TB_TEST(lengths_no_frame_can_have)
{
    sink_t          s;
    tb_evs_t        d;
    uint32_t        crc;
    unsigned char   p[16];

    /* total 15: less than a frame's overhead; with a good prelude CRC */
    memset(p, 0, sizeof(p));
    p[3] = 15;
    crc = tb_crc32(0, p, 8);
    p[8] = crc >> 24; p[9] = crc >> 16; p[10] = crc >> 8; p[11] = crc;

    memset(&s, 0, sizeof(sink_t));
    tb_evs_init(&d, 0);
    TB_CHECK_INT(tb_evs_feed(&d, p, 12, sink, &s), -1);
    TB_CHECK_STR(d.why, "a frame's length is not one a frame can have");
    tb_evs_free(&d);

    /* larger than the decoder takes */
    memset(p, 0, sizeof(p));
    p[0] = 0x7f;
    crc = tb_crc32(0, p, 8);
    p[8] = crc >> 24; p[9] = crc >> 16; p[10] = crc >> 8; p[11] = crc;
    tb_evs_init(&d, 1024);
    TB_CHECK_INT(tb_evs_feed(&d, p, 12, sink, &s), -1);
    tb_evs_free(&d);

    /* headers longer than the frame */
    memset(p, 0, sizeof(p));
    p[3] = 16;
    p[7] = 1;
    crc = tb_crc32(0, p, 8);
    p[8] = crc >> 24; p[9] = crc >> 16; p[10] = crc >> 8; p[11] = crc;
    tb_evs_init(&d, 0);
    TB_CHECK_INT(tb_evs_feed(&d, p, 12, sink, &s), -1);
    tb_evs_free(&d);
}


TB_TEST(exceptions_are_anthropic_errors)
{
    size_t          n;
    sink_t          s;
    tb_evs_t        d;
    unsigned char   buf[4096];

    static const char  msg[] = "{\"message\":\"Too many requests, please "
                               "wait before trying again.\"}";
    static const char  val[] = "{\"message\":\"messages.0.content: Field "
                               "required\"}";

    memset(&s, 0, sizeof(sink_t));
    tb_evs_init(&d, 0);

    n = tb_evs_encode(buf, sizeof(buf), "exception", NULL,
                      "throttlingException", (const unsigned char *) msg,
                      sizeof(msg) - 1);
    TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
    TB_CHECK_INT(s.exceptions, 1);
    TB_CHECK_STR(s.sse, "event: error\ndata: {\"type\":\"error\",\"error\":"
                 "{\"type\":\"rate_limit_error\",\"message\":\"the Bedrock "
                 "account refused the request (throttlingException)\"}}\n\n");

    s.len = 0;
    n = tb_evs_encode(buf, sizeof(buf), "exception", NULL,
                      "modelNotReadyException", (const unsigned char *) "{}",
                      2);
    TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
    TB_CHECK_CONTAINS(s.sse, "\"type\":\"overloaded_error\"");

    s.len = 0;
    n = tb_evs_encode(buf, sizeof(buf), "exception", NULL,
                      "validationException", (const unsigned char *) val,
                      sizeof(val) - 1);
    TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
    TB_CHECK_CONTAINS(s.sse, "{\"type\":\"invalid_request_error\",\"message\":"
                      "\"messages.0.content: Field required\"}");

    s.len = 0;
    n = tb_evs_encode(buf, sizeof(buf), "exception", NULL,
                      "internalServerException", NULL, 0);
    TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
    TB_CHECK_CONTAINS(s.sse, "\"type\":\"api_error\"");

    s.len = 0;
    n = tb_evs_encode(buf, sizeof(buf), "exception", NULL,
                      "serviceUnavailableException", NULL, 0);
    TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
    TB_CHECK_CONTAINS(s.sse, "\"type\":\"overloaded_error\"");

    TB_CHECK_INT(s.exceptions, 5);
    tb_evs_free(&d);
}


TB_TEST(payloads_bedrock_does_not_send)
{
    size_t          n, i;
    sink_t          s;
    tb_evs_t        d;
    unsigned char   buf[4096];
    char            enc[256], p[600];

    static const char  *bad[] = {
        "{\"bytes\":\"not base64!\"}",
        "{\"bytes\":\"e30\"}",               /* unpadded */
        "{\"bytes\":42}",
        "{\"nobytes\":\"e30=\"}",
        "not json",
        NULL
    };

    static const char  *bad_events[] = {
        "{\"type\":\"content_block_delta\",",        /* not JSON */
        "{\"notype\":1}",
        "{\"type\":\"a b\"}",                        /* not a name */
        "{\"type\":\"x\\ny\"}",                      /* ... nor this */
        "[1,2]",
        NULL
    };

    tb_evs_init(&d, 0);

    for (i = 0; bad[i]; i++) {
        memset(&s, 0, sizeof(sink_t));
        n = tb_evs_encode(buf, sizeof(buf), "event", "chunk", NULL,
                          (const unsigned char *) bad[i], strlen(bad[i]));
        TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
        TB_CHECK_INT(s.bad, 1);
        TB_CHECK_INT(s.len, 0);
    }

    for (i = 0; bad_events[i]; i++) {
        memset(&s, 0, sizeof(sink_t));
        b64(bad_events[i], enc);
        snprintf(p, sizeof(p), "{\"bytes\":\"%s\"}", enc);
        n = tb_evs_encode(buf, sizeof(buf), "event", "chunk", NULL,
                          (const unsigned char *) p, strlen(p));
        TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
        TB_CHECK_INT(s.bad, 1);
    }

    /* a frame of another event type carries nothing: skipped */
    memset(&s, 0, sizeof(sink_t));
    n = tb_evs_encode(buf, sizeof(buf), "event", "initial-response", NULL,
                      (const unsigned char *) "{}", 2);
    TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
    TB_CHECK_INT(s.bad, 0);
    TB_CHECK_INT(s.len, 0);

    /* a "bytes" escaped as JSON allows is still base64 */
    memset(&s, 0, sizeof(sink_t));
    b64("{\"type\":\"ping\"}", enc);
    snprintf(p, sizeof(p), "{\"bytes\":\"%.*s\\u00%02x%s\"}", 2, enc,
             enc[2], enc + 3);
    n = tb_evs_encode(buf, sizeof(buf), "event", "chunk", NULL,
                      (const unsigned char *) p, strlen(p));
    TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
    TB_CHECK_STR(s.sse, "event: ping\ndata: {\"type\":\"ping\"}\n\n");

    /* an event with line breaks as whitespace: one data line still */
    memset(&s, 0, sizeof(sink_t));
    b64("{\n\"type\":\r\n\"ping\"}", enc);
    snprintf(p, sizeof(p), "{\"bytes\":\"%s\"}", enc);
    n = tb_evs_encode(buf, sizeof(buf), "event", "chunk", NULL,
                      (const unsigned char *) p, strlen(p));
    TB_CHECK_INT(tb_evs_feed(&d, buf, n, sink, &s), 0);
    TB_CHECK_STR(s.sse, "event: ping\ndata: { \"type\":  \"ping\"}\n\n");

    tb_evs_free(&d);
}


TB_TEST(headers_of_every_type)
{
    size_t          n;
    sink_t          s;
    tb_evs_t        d;
    uint32_t        crc;
    unsigned char   f[512], *p;
    char            enc[128], pay[300];

    /* a frame with headers of each fixed-size type before the strings */

    b64("{\"type\":\"ping\"}", enc);
    n = (size_t) snprintf(pay, sizeof(pay), "{\"bytes\":\"%s\"}", enc);

    p = f + 12;
    *p++ = 1; *p++ = 'a'; *p++ = 0;                          /* true */
    *p++ = 1; *p++ = 'b'; *p++ = 1;                          /* false */
    *p++ = 1; *p++ = 'c'; *p++ = 2; *p++ = 9;                /* byte */
    *p++ = 1; *p++ = 'd'; *p++ = 3; *p++ = 0; *p++ = 9;      /* short */
    *p++ = 1; *p++ = 'e'; *p++ = 4; memset(p, 1, 4); p += 4;  /* int */
    *p++ = 1; *p++ = 'f'; *p++ = 5; memset(p, 1, 8); p += 8;  /* long */
    *p++ = 1; *p++ = 'g'; *p++ = 6; *p++ = 0; *p++ = 2; *p++ = 0; *p++ = 1;
    *p++ = 1; *p++ = 'h'; *p++ = 8; memset(p, 1, 8); p += 8;  /* time */
    *p++ = 1; *p++ = 'i'; *p++ = 9; memset(p, 1, 16); p += 16; /* uuid */
    *p++ = 13; memcpy(p, ":message-type", 13); p += 13;
    *p++ = 7; *p++ = 0; *p++ = 5; memcpy(p, "event", 5); p += 5;
    *p++ = 11; memcpy(p, ":event-type", 11); p += 11;
    *p++ = 7; *p++ = 0; *p++ = 5; memcpy(p, "chunk", 5); p += 5;

    f[4] = 0; f[5] = 0; f[6] = 0; f[7] = (unsigned char) (p - f - 12);
    memcpy(p, pay, n);
    p += n;
    n = (size_t) (p - f) + 4;
    f[0] = 0; f[1] = 0; f[2] = (unsigned char) (n >> 8);
    f[3] = (unsigned char) n;
    crc = tb_crc32(0, f, 8);
    f[8] = crc >> 24; f[9] = crc >> 16; f[10] = crc >> 8; f[11] = crc;
    crc = tb_crc32(0, f, n - 4);
    p[0] = crc >> 24; p[1] = crc >> 16; p[2] = crc >> 8; p[3] = crc;

    memset(&s, 0, sizeof(sink_t));
    tb_evs_init(&d, 0);
    TB_CHECK_INT(tb_evs_feed(&d, f, n, sink, &s), 0);
    TB_CHECK_STR(s.sse, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
    tb_evs_free(&d);

    /* a header type that does not exist */
    f[12 + 2] = 10;
    crc = tb_crc32(0, f, n - 4);
    p[0] = crc >> 24; p[1] = crc >> 16; p[2] = crc >> 8; p[3] = crc;
    tb_evs_init(&d, 0);
    TB_CHECK_INT(tb_evs_feed(&d, f, n, sink, &s), -1);
    TB_CHECK_STR(d.why, "a frame has a malformed header");
    tb_evs_free(&d);
}


int
main(void)
{
    TB_RUN(crc32_check_value);
    TB_RUN(every_split_decodes_the_same);
    TB_RUN(a_corrupt_crc_breaks_the_stream);
    TB_RUN(lengths_no_frame_can_have);
    TB_RUN(exceptions_are_anthropic_errors);
    TB_RUN(payloads_bedrock_does_not_send);
    TB_RUN(headers_of_every_type);

    return tb_test_done();
}
