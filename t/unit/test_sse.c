/*
 * Unit tests of src/core/tb_sse.c: the SSE stream parser, whatever the
 * line endings, the chunking and the size of what it is fed.
 */

#include <stdlib.h>

#include "tb_test.h"
#include "tb_json.h"
#include "tb_sse.h"


#define S(s)  (const unsigned char *) (s), strlen(s)


static const char  *stream =
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\","
    "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
    "\"model\":\"claude-x\",\"stop_reason\":null,\"stop_sequence\":null,"
    "\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":0,"
    "\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n"
    "\n"
    "event: content_block_start\n"
    "data: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n"
    "\n"
    "event: ping\n"
    "data: {\"type\": \"ping\"}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n"
    "\n"
    "event: content_block_stop\n"
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n"
    "\n"
    "event: message_delta\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\","
    "\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n"
    "\n"
    "event: message_stop\n"
    "data: {\"type\":\"message_stop\"}\n"
    "\n";


typedef struct {
    tb_sse_t        s;
    unsigned char   line[TB_SSE_LINE_MAX];
    unsigned char   data[TB_SSE_LINE_MAX];
    unsigned        rc;
    long            delta_at;     /* end offset of the call with DELTA */
    unsigned        ndelta;
} sse_run_t;


static sse_run_t  run_a, run_b;


static void
sse_start(sse_run_t *r)
{
    tb_sse_init(&r->s, r->line, r->data);
    r->rc = 0;
    r->delta_at = -1;
    r->ndelta = 0;
}


static void
sse_feed(sse_run_t *r, const char *p, size_t n, size_t off)
{
    unsigned  rc;

    rc = tb_sse_feed(&r->s, (const unsigned char *) p, n);

    if (rc & TB_SSE_DELTA) {
        r->delta_at = (long) (off + n);
        r->ndelta++;
    }

    r->rc |= rc;
}


/* feeds s split at the given points (sorted, 0 terminates) */

static void
sse_feed_split(sse_run_t *r, const char *s, size_t n, size_t a, size_t b)
{
    sse_start(r);

    if (a > n) {
        a = n;
    }

    if (b < a) {
        b = a;
    }

    if (b > n) {
        b = n;
    }

    sse_feed(r, s, a, 0);
    sse_feed(r, s + a, b - a, a);
    sse_feed(r, s + b, n - b, b);
}


static void
sse_feed_bytes(sse_run_t *r, const char *s, size_t n)
{
    size_t  i;

    sse_start(r);

    for (i = 0; i < n; i++) {
        sse_feed(r, s + i, 1, i);
    }
}


static int
sse_same(sse_run_t *a, sse_run_t *b)
{
    return a->s.delta == b->s.delta
           && a->s.error == b->s.error
           && a->s.stop == b->s.stop
           && memcmp(&a->s.usage, &b->s.usage, sizeof(tb_usage_t)) == 0
           && strcmp(a->s.error_type, b->s.error_type) == 0
           && strcmp(a->s.error_message, b->s.error_message) == 0
           && a->s.events == b->s.events
           && a->s.bytes == b->s.bytes
           && a->rc == b->rc
           && a->ndelta == b->ndelta;
}


/* the whole stream at once, then byte by byte and at every split point */

static void
sse_check_splits(const char *s, size_t n)
{
    size_t  i;

    sse_feed_split(&run_a, s, n, n, n);

    sse_feed_bytes(&run_b, s, n);
    if (!sse_same(&run_a, &run_b)) {
        TB_FAIL_AT("byte by byte differs");
    }

    for (i = 0; i <= n; i++) {
        sse_feed_split(&run_b, s, n, i, i);

        if (!sse_same(&run_a, &run_b)) {
            TB_FAIL_AT("split at %zu differs", i);
            return;
        }
    }

    for (i = 0; i + 7 <= n; i += 3) {
        sse_feed_split(&run_b, s, n, i, i + 7);

        if (!sse_same(&run_a, &run_b)) {
            TB_FAIL_AT("split at %zu and %zu differs", i, i + 7);
            return;
        }
    }
}


TB_TEST(sse_full_stream)
{
    size_t  n;

    n = strlen(stream);

    sse_feed_split(&run_a, stream, n, n, n);

    TB_CHECK(run_a.s.delta);
    TB_CHECK(run_a.s.stop);
    TB_CHECK(!run_a.s.error);
    TB_CHECK_INT(run_a.s.usage.input_tokens, 25);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    TB_CHECK_INT(run_a.s.usage.cache_creation_input_tokens, 0);
    TB_CHECK_INT(run_a.s.usage.cache_read_input_tokens, 0);
    TB_CHECK_INT(run_a.s.events, 7);
    TB_CHECK_INT(run_a.s.bytes, n);
    TB_CHECK_INT(run_a.rc, TB_SSE_DELTA | TB_SSE_STOP | TB_SSE_USAGE);
    TB_CHECK_STR(run_a.s.error_type, "");

    sse_check_splits(stream, n);
}


TB_TEST(sse_commit_at_event_line)
{
    const char  *at;
    size_t       n, i;

    n = strlen(stream);
    at = strstr(stream, "event: content_block_delta\n");
    i = (size_t) (at - stream) + strlen("event: content_block_delta\n");

    /* byte by byte: the call that completes the event line commits */
    sse_feed_bytes(&run_a, stream, n);
    TB_CHECK_INT(run_a.delta_at, i);
    TB_CHECK_INT(run_a.ndelta, 1);

    /* a chunk ending one byte short of the line does not */
    sse_start(&run_a);
    sse_feed(&run_a, stream, i - 1, 0);
    TB_CHECK(!(run_a.rc & TB_SSE_DELTA));
    TB_CHECK(!run_a.s.delta);
    sse_feed(&run_a, stream + i - 1, 1, i - 1);
    TB_CHECK(run_a.rc & TB_SSE_DELTA);
    TB_CHECK(run_a.s.delta);

    /* a second delta event does not report again */
    sse_feed(&run_a, "event: content_block_delta\ndata: {}\n\n", 37, 0);
    TB_CHECK_INT(run_a.ndelta, 1);
}


TB_TEST(sse_error_before_delta)
{
    const char  *s =
        "event: message_start\n"
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":"
        "{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"
        "event: error\n"
        "data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
        "\"message\":\"Overloaded\"}}\n\n";
    unsigned     rc;

    sse_start(&run_a);
    rc = tb_sse_feed(&run_a.s, S(s));
    TB_CHECK_INT(rc, TB_SSE_ERROR | TB_SSE_USAGE);
    TB_CHECK(run_a.s.error);
    TB_CHECK(!run_a.s.delta);
    TB_CHECK_STR(run_a.s.error_type, "overloaded_error");
    TB_CHECK_STR(run_a.s.error_message, "Overloaded");
    TB_CHECK_INT(run_a.s.usage.input_tokens, 10);

    sse_check_splits(s, strlen(s));
}


/* rewrites the "\n" of the sample stream */

static char *
sse_convert(const char *s, const char *eol)
{
    char    *out, *p;
    size_t   n;

    n = strlen(s);
    out = malloc(n * 2 + 1);
    p = out;

    for ( ; *s; s++) {
        if (*s == '\n') {
            p += sprintf(p, "%s", eol);
        } else {
            *p++ = *s;
        }
    }

    *p = '\0';

    return out;
}


TB_TEST(sse_line_endings)
{
    char    *crlf, *cr;

    crlf = sse_convert(stream, "\r\n");
    cr = sse_convert(stream, "\r");

    sse_feed_split(&run_a, crlf, strlen(crlf), 0, 0);
    TB_CHECK(run_a.s.delta);
    TB_CHECK(run_a.s.stop);
    TB_CHECK_INT(run_a.s.usage.input_tokens, 25);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    TB_CHECK_INT(run_a.s.events, 7);
    sse_check_splits(crlf, strlen(crlf));

    sse_feed_split(&run_a, cr, strlen(cr), 0, 0);
    TB_CHECK(run_a.s.delta);
    TB_CHECK(run_a.s.stop);
    TB_CHECK_INT(run_a.s.usage.input_tokens, 25);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    TB_CHECK_INT(run_a.s.events, 7);
    sse_check_splits(cr, strlen(cr));

    /* the commit point with "\r\n" is the "\r" */
    sse_feed_bytes(&run_a, crlf, strlen(crlf));
    TB_CHECK_INT(run_a.delta_at, strstr(crlf, "content_block_delta\r") - crlf
                                 + 20);

    free(crlf);
    free(cr);
}


TB_TEST(sse_mixed_endings)
{
    /* "\r" then "\n" as separate line ends is one line end; "\n\r" two */
    const char  *s =
        "event: message_delta\r\n"
        "data: {\"usage\":{\"output_tokens\":3}}\n\r"
        ": comment\r"
        "event: message_stop\r\n"
        "data: {}\r\r";

    sse_feed_split(&run_a, s, strlen(s), 0, 0);
    TB_CHECK_INT(run_a.s.events, 2);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 3);
    TB_CHECK(run_a.s.stop);
    sse_check_splits(s, strlen(s));
}


TB_TEST(sse_comments_and_fields)
{
    const char  *s =
        ": this is a comment\n"
        ":event: error\n"
        "id: 7\n"
        "retry: 1000\n"
        "events: error\n"
        "Event: error\n"
        "event : error\n"
        "datum: x\n"
        "event: message_delta\n"
        "id\n"
        "data:{\"usage\":{\"output_tokens\":9}}\n"
        "\n"
        "\n\n"
        "event: message_stop\n"
        "\n"
        ": only comments here\n"
        "\n";

    sse_feed_split(&run_a, s, strlen(s), 0, 0);
    TB_CHECK(!run_a.s.error);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 9);
    TB_CHECK_INT(run_a.s.events, 1);

    /* message_stop without a data line is not dispatched (SSE rules) */
    TB_CHECK(!run_a.s.stop);

    sse_check_splits(s, strlen(s));
}


TB_TEST(sse_space_after_colon)
{
    /* only one space is stripped; the second is JSON whitespace */
    const char  *s =
        "event:message_start\n"
        "data:  {\"message\":{\"usage\":{\"input_tokens\":4}}}\n\n"
        "event:  message_stop\n"
        "data: {}\n\n"
        "event:error\n"
        "data:\n\n";

    sse_feed_split(&run_a, s, strlen(s), 0, 0);
    TB_CHECK_INT(run_a.s.usage.input_tokens, 4);
    TB_CHECK(!run_a.s.stop);
    TB_CHECK(run_a.s.error);
    TB_CHECK_STR(run_a.s.error_type, "");
    TB_CHECK_INT(run_a.s.events, 3);
}


TB_TEST(sse_data_multiline)
{
    const char  *s =
        "event: error\n"
        "data: {\"type\":\"error\",\n"
        "data: \"error\":{\"type\":\"rate_limit_error\",\n"
        "data:\n"
        "data: \"message\":\"slow\\ndown\"}}\n"
        "\n"
        "event: message_delta\n"
        "data: {\"usage\":\n"
        "data: {\"output_tokens\":\n"
        "data: 15}}\n"
        "\n";

    sse_feed_split(&run_a, s, strlen(s), 0, 0);
    TB_CHECK(run_a.s.error);
    TB_CHECK_STR(run_a.s.error_type, "rate_limit_error");
    TB_CHECK_STR(run_a.s.error_message, "slow\ndown");
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    sse_check_splits(s, strlen(s));

    /* the lines are joined with "\n": "1" "2" is "1\n2", not 12 */
    s = "event: message_delta\n"
        "data: {\"usage\":{\"output_tokens\":1\n"
        "data: 2}}\n\n";
    sse_feed_split(&run_a, s, strlen(s), 0, 0);
    TB_CHECK_INT(run_a.s.usage.output_tokens, -1);
}


static char *
sse_big_stream(size_t big, const char *event, size_t *n)
{
    char    *s, *p;
    size_t   i;

    s = malloc(big + 4096);
    p = s;

    p += sprintf(p, "event: message_start\n"
                 "data: {\"message\":{\"usage\":{\"input_tokens\":25}}}\n\n");

    if (event) {
        p += sprintf(p, "event: %s\n", event);
    }

    p += sprintf(p, "data: {\"type\":\"%s\",\"delta\":{\"type\":\"text_delta\","
                 "\"text\":\"", event ? event : "content_block_delta");

    for (i = 0; i < big; i++) {
        *p++ = (char) ('a' + i % 26);
    }

    p += sprintf(p, "\"}}\n\n"
                 "event: message_delta\n"
                 "data: {\"usage\":{\"output_tokens\":15}}\n\n"
                 "event: message_stop\n"
                 "data: {\"type\":\"message_stop\"}\n\n");

    *n = (size_t) (p - s);

    return s;
}


TB_TEST(sse_oversized_delta)
{
    char    *s;
    size_t   n, i, max;

    s = sse_big_stream(1024 * 1024, "content_block_delta", &n);

    sse_start(&run_a);

    /* in network-sized pieces, watching the data buffer */
    max = 0;
    for (i = 0; i < n; i += 4096) {
        sse_feed(&run_a, s + i, n - i < 4096 ? n - i : 4096, i);
        if (run_a.s.data_len > max) {
            max = run_a.s.data_len;
        }
    }

    TB_CHECK(max < 100);
    TB_CHECK(run_a.s.delta);
    TB_CHECK(run_a.s.stop);
    TB_CHECK_INT(run_a.s.usage.input_tokens, 25);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    TB_CHECK_INT(run_a.s.events, 4);
    TB_CHECK_INT(run_a.ndelta, 1);

    sse_feed_bytes(&run_b, s, n);
    TB_CHECK(sse_same(&run_a, &run_b));

    free(s);
}


TB_TEST(sse_oversized_wanted)
{
    char    *s;
    size_t   n;

    /* a message_start of 100 KB overflows: dropped, the rest still works */
    s = sse_big_stream(100 * 1024, "message_start", &n);

    sse_feed_split(&run_a, s, n, 0, 0);
    TB_CHECK(!run_a.s.delta);
    TB_CHECK(run_a.s.stop);
    TB_CHECK_INT(run_a.s.usage.input_tokens, 25);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    TB_CHECK_INT(run_a.s.events, 4);
    TB_CHECK(!run_a.s.overflow);

    sse_feed_bytes(&run_b, s, n);
    TB_CHECK(sse_same(&run_a, &run_b));
    free(s);

    /* an oversized error is still an error, without details */
    s = sse_big_stream(100 * 1024, "error", &n);
    sse_feed_split(&run_a, s, n, 0, 0);
    TB_CHECK(run_a.s.error);
    TB_CHECK_STR(run_a.s.error_type, "");
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    free(s);

    /* an unnamed huge delta still commits (its "type" leads the JSON) */
    s = sse_big_stream(100 * 1024, NULL, &n);
    sse_feed_split(&run_a, s, n, 0, 0);
    TB_CHECK(run_a.s.delta);
    TB_CHECK(run_a.s.stop);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    sse_feed_bytes(&run_b, s, n);
    TB_CHECK(sse_same(&run_a, &run_b));
    free(s);
}


TB_TEST(sse_long_event_name)
{
    const char  *s =
        "event: content_block_delta_but_a_much_longer_name\n"
        "data: {\"type\":\"content_block_delta\"}\n\n"
        "event: message_delta_padding_padding_padding_padding_xx\n"
        "data: {\"usage\":{\"output_tokens\":99}}\n\n"
        "event: 0123456789012345678901234567890\n"
        "data: {}\n\n"
        "event: 01234567890123456789012345678901\n"
        "data: {}\n\n"
        "event: message_delta\n"
        "data: {\"usage\":{\"output_tokens\":15}}\n\n"
        "event: content_block_delta\n\n";

    sse_feed_split(&run_a, s, strlen(s), 0, 0);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    TB_CHECK_INT(run_a.s.events, 5);
    TB_CHECK(run_a.s.delta);
    TB_CHECK_INT(run_a.ndelta, 1);
    sse_check_splits(s, strlen(s));

    /* the long name alone never commits */
    sse_start(&run_a);
    sse_feed(&run_a, s, 90, 0);
    TB_CHECK(!run_a.s.delta);
}


TB_TEST(sse_message_delta_overwrites)
{
    const char  *s =
        "event: message_start\n"
        "data: {\"message\":{\"usage\":{\"input_tokens\":25,"
        "\"output_tokens\":1}}}\n\n"
        "event: message_delta\n"
        "data: {\"usage\":{\"output_tokens\":10}}\n\n"
        "event: message_delta\n"
        "data: {\"usage\":{\"output_tokens\":15,"
        "\"cache_read_input_tokens\":100}}\n\n";
    unsigned     rc;

    sse_start(&run_a);
    rc = tb_sse_feed(&run_a.s, S(s));
    TB_CHECK_INT(rc, TB_SSE_USAGE);
    TB_CHECK_INT(run_a.s.usage.input_tokens, 25);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    TB_CHECK_INT(run_a.s.usage.cache_read_input_tokens, 100);
    TB_CHECK_INT(run_a.s.usage.cache_creation_input_tokens, -1);

    /* the same counters again: no change, no TB_SSE_USAGE */
    rc = tb_sse_feed(&run_a.s, S("event: message_delta\n"
                                 "data: {\"usage\":{\"output_tokens\":15}}"
                                 "\n\n"));
    TB_CHECK_INT(rc, 0);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
}


TB_TEST(sse_no_event_lines)
{
    const char  *s =
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":"
        "{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"
        "data: {\"type\":\"content_block_start\",\"index\":0}\n\n"
        "data: {\"type\":\"ping\"}\n\n"
        "data: {\"index\":0,\"type\":\"content_block_delta\","
        "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"
        "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}"
        "\n\n"
        "data: {\"type\":\"message_stop\"}\n\n";
    const char  *at;

    sse_feed_split(&run_a, s, strlen(s), 0, 0);
    TB_CHECK(run_a.s.delta);
    TB_CHECK(run_a.s.stop);
    TB_CHECK_INT(run_a.s.usage.input_tokens, 25);
    TB_CHECK_INT(run_a.s.usage.output_tokens, 15);
    TB_CHECK_INT(run_a.s.events, 6);
    sse_check_splits(s, strlen(s));

    /* here the commit point is the blank line that dispatches it */
    at = strstr(s, "\"Hi\"}}\n\n");
    sse_feed_bytes(&run_a, s, strlen(s));
    TB_CHECK_INT(run_a.delta_at, at - s + 8);

    /* an unnamed error */
    sse_start(&run_a);
    tb_sse_feed(&run_a.s, S("data: {\"type\":\"error\",\"error\":"
                            "{\"type\":\"api_error\",\"message\":\"x\"}}\n\n"
                            "data: not json\n\n"));
    TB_CHECK(run_a.s.error);
    TB_CHECK_STR(run_a.s.error_type, "api_error");
    TB_CHECK_INT(run_a.s.events, 2);
}


TB_TEST(sse_error_truncation)
{
    char         s[2048], *p;
    size_t       i;

    p = s;
    p += sprintf(p, "event: error\ndata: {\"error\":{\"type\":\"");
    for (i = 0; i < 70; i++) {
        *p++ = 't';
    }
    p += sprintf(p, "\",\"message\":\"");
    for (i = 0; i < 127; i++) {
        p += sprintf(p, "\xc3\xa9");      /* 254 bytes */
    }
    p += sprintf(p, "\xe2\x82\xac tail\"}}\n\n");

    sse_start(&run_a);
    TB_CHECK_INT(tb_sse_feed(&run_a.s, S(s)), TB_SSE_ERROR);
    TB_CHECK_INT(strlen(run_a.s.error_type), 63);

    /* 254 bytes fit, the euro sign would be cut: left out */
    TB_CHECK_INT(strlen(run_a.s.error_message), 254);
    TB_CHECK(memcmp(run_a.s.error_message + 252, "\xc3\xa9", 2) == 0);
}


TB_TEST(sse_garbage)
{
    const char  *s = "\0\0\xff\xfe:\n\n\ndata\n\nevent\n\n"
                     "event: error\ndata: {\"error\":5}\n\n"
                     "event: message_start\ndata: [}\n\n"
                     "event: message_delta\ndata: {\"usage\":{\"output_tokens\""
                     ":-3}}\n\n";

    sse_start(&run_a);
    tb_sse_feed(&run_a.s, (const unsigned char *) s, 120);
    TB_CHECK(run_a.s.error);
    TB_CHECK_STR(run_a.s.error_type, "");
    TB_CHECK_INT(run_a.s.usage.input_tokens, -1);
    TB_CHECK_INT(run_a.s.usage.output_tokens, -1);
    TB_CHECK_INT(tb_sse_feed(&run_a.s, NULL, 0), 0);
    sse_check_splits(s, 120);
}


/* throughput of tb_scan_body: printed, never asserted */


int
main(void)
{
    TB_RUN(sse_full_stream);
    TB_RUN(sse_commit_at_event_line);
    TB_RUN(sse_error_before_delta);
    TB_RUN(sse_line_endings);
    TB_RUN(sse_mixed_endings);
    TB_RUN(sse_comments_and_fields);
    TB_RUN(sse_space_after_colon);
    TB_RUN(sse_data_multiline);
    TB_RUN(sse_oversized_delta);
    TB_RUN(sse_oversized_wanted);
    TB_RUN(sse_long_event_name);
    TB_RUN(sse_message_delta_overwrites);
    TB_RUN(sse_no_event_lines);
    TB_RUN(sse_error_truncation);
    TB_RUN(sse_garbage);

    return tb_test_done();
}
