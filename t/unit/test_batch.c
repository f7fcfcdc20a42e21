/*
 * Unit tests: the Message Batches API's documents (tb_batch.c) - a create
 * body checked as far as the gateway acts on it and each request's params
 * handed over whole, a message_batch object read, a results line read.
 */

#include <stdlib.h>
#include <string.h>

#include "tb_test.h"
#include "tb_batch.h"


#define S(s)  (const unsigned char *) (s), sizeof(s) - 1


typedef struct {
    size_t    n;
    char      ids[8][TB_BATCH_CUSTOM_ID_MAX + 1];
    char      params[8][128];
    int       stop_at;               /* -1: never */
} seen_t;


static int
each(void *data, size_t i, const char *custom_id, const unsigned char *p,
    size_t len, char *err, size_t errlen)
{
    seen_t  *s = data;

    if ((int) i == s->stop_at) {
        snprintf(err, errlen, "requests.%zu.params.model: not allowed", i);
        return -1;
    }

    if (s->n < 8) {
        snprintf(s->ids[s->n], sizeof(s->ids[0]), "%s", custom_id);
        snprintf(s->params[s->n], sizeof(s->params[0]), "%.*s", (int) len,
                 (const char *) p);
    }

    s->n++;

    return 0;
}


static int
scan(const char *body, size_t max, seen_t *s, size_t *n, char *err)
{
    memset(s, 0, sizeof(seen_t));
    s->stop_at = -1;

    return tb_batch_scan((const unsigned char *) body, strlen(body), max,
                         each, s, n, err, 256);
}


TB_TEST(scan_hands_over_each_request)
{
    size_t  n;
    seen_t  s;
    char    err[256];

    TB_CHECK_INT(scan("{\"requests\": [ {\"custom_id\": \"a-1\", \"params\": "
                      "{\"model\": \"m\", \"max_tokens\": 5}},"
                      "{\"params\": {\"model\":\"x\"}, \"custom_id\":"
                      "\"b\\u005f2\"} ] }", 10, &s, &n, err), 0);
    TB_CHECK_INT(n, 2);
    TB_CHECK_INT(s.n, 2);
    TB_CHECK(strcmp(s.ids[0], "a-1") == 0);
    TB_CHECK(strcmp(s.ids[1], "b_2") == 0);
    TB_CHECK(strcmp(s.params[0], "{\"model\": \"m\", \"max_tokens\": 5}")
             == 0);
    TB_CHECK(strcmp(s.params[1], "{\"model\":\"x\"}") == 0);

    /* other members of a request or the body are the upstream's to judge */
    TB_CHECK_INT(scan("{\"requests\":[{\"custom_id\":\"a\",\"params\":{},"
                      "\"x\":1}],\"y\":[]}", 10, &s, &n, err), 0);
    TB_CHECK_INT(n, 1);
}


TB_TEST(scan_refuses)
{
    size_t       n;
    seen_t       s;
    char         err[256];
    unsigned     i;

    static const struct {
        const char  *body;
        const char  *err;
    } bad[] = {
        { "", "request body is not valid JSON" },
        { "{\"requests\":[}", "request body is not valid JSON" },
        { "[]", "request body must be a JSON object" },
        { "{}", "requests: Field required" },
        { "{\"requests\":{}}", "requests: expected a list" },
        { "{\"requests\":[]}", "requests: at least one request" },
        { "{\"requests\":[1]}", "requests.0: expected an object" },
        { "{\"requests\":[{\"params\":{}}]}",
          "requests.0.custom_id: Field required" },
        { "{\"requests\":[{\"custom_id\":1,\"params\":{}}]}",
          "requests.0.custom_id: expected a string" },
        { "{\"requests\":[{\"custom_id\":\"a b\",\"params\":{}}]}",
          "requests.0.custom_id: 1 to 64" },
        { "{\"requests\":[{\"custom_id\":\"\",\"params\":{}}]}",
          "requests.0.custom_id: 1 to 64" },
        { "{\"requests\":[{\"custom_id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"params\":{}}]}",
          "requests.0.custom_id: 1 to 64" },
        { "{\"requests\":[{\"custom_id\":\"a\\u0000\",\"params\":{}}]}",
          "requests.0.custom_id: 1 to 64" },
        { "{\"requests\":[{\"custom_id\":\"a\"}]}",
          "requests.0.params: Field required" },
        { "{\"requests\":[{\"custom_id\":\"a\",\"params\":[]}]}",
          "requests.0.params: expected an object" },
        { "{\"requests\":[{\"custom_id\":\"a\",\"params\":{},"
          "\"params\":{}}]}", "requests.0.params: given more than once" },
        { "{\"requests\":[{\"custom_id\":\"a\",\"p\\u0061rams\":{},"
          "\"params\":{}}]}", "requests.0.params: given more than once" },
        { "{\"requests\":[],\"requests\":[{\"custom_id\":\"a\","
          "\"params\":{}}]}", "requests: given more than once" },
        { "{\"requests\":[{\"custom_id\":\"a\",\"params\":{}},"
          "{\"custom_id\":\"b\",\"params\":{}},"
          "{\"custom_id\":\"c\",\"params\":{}}]}",
          "requests: at most 2 requests" }
    };

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (scan(bad[i].body, 2, &s, &n, err) != -1
            || strncmp(err, bad[i].err, strlen(bad[i].err)) != 0)
        {
            TB_FAIL_AT("%s: got \"%s\"", bad[i].body, err);
        }

        TB_CHECK_INT(n, 0);
    }

    /* the callee's refusal stops the scan with its words */
    memset(&s, 0, sizeof(s));
    s.stop_at = 1;
    TB_CHECK_INT(tb_batch_scan(S("{\"requests\":[{\"custom_id\":\"a\","
                                 "\"params\":{}},{\"custom_id\":\"b\","
                                 "\"params\":{}},{\"custom_id\":\"c\","
                                 "\"params\":{}}]}"), 10, each, &s, &n, err,
                               sizeof(err)), -1);
    TB_CHECK(strcmp(err, "requests.1.params.model: not allowed") == 0);
    TB_CHECK_INT(s.n, 1);
    TB_CHECK_INT(n, 0);

    /* nothing is handed over from a document broken after its list */
    memset(&s, 0, sizeof(s));
    s.stop_at = -1;
    TB_CHECK_INT(tb_batch_scan(S("{\"requests\":[{\"custom_id\":\"a\","
                                 "\"params\":{}}], \"x\": tru}"), 10, each,
                               &s, &n, err, sizeof(err)), -1);
    TB_CHECK_INT(s.n, 0);
}


TB_TEST(scan_many)
{
    size_t   i, n, len;
    seen_t   s;
    char    *body, *p, err[256];

    body = malloc(64 * 1001 + 64);
    TB_CHECK(body != NULL);
    if (body == NULL) {
        return;
    }

    p = body + sprintf(body, "{\"requests\":[");

    for (i = 0; i < 1000; i++) {
        p += sprintf(p, "%s{\"custom_id\":\"r%zu\",\"params\":{}}",
                     i ? "," : "", i);
    }

    p += sprintf(p, "]}");
    len = (size_t) (p - body);

    memset(&s, 0, sizeof(s));
    s.stop_at = -1;
    TB_CHECK_INT(tb_batch_scan((unsigned char *) body, len, 1000, each, &s,
                               &n, err, sizeof(err)), 0);
    TB_CHECK_INT(n, 1000);
    TB_CHECK_INT(s.n, 1000);
    TB_CHECK_INT(tb_batch_scan((unsigned char *) body, len, 999, each, &s,
                               &n, err, sizeof(err)), -1);

    free(body);
}


TB_TEST(object_read)
{
    tb_batch_obj_t  o;

    static const char  doc[] =
        "{\"id\":\"msgbatch_013Zva2CMHLNnXjNJJKqJ2EF\","
        "\"type\":\"message_batch\",\"processing_status\":\"ended\","
        "\"request_counts\":{\"processing\":0,\"succeeded\":50,"
        "\"errored\":30,\"canceled\":10,\"expired\":10},"
        "\"results_url\":\"https://api.anthropic.com/v1/messages/batches/"
        "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF/results\","
        "\"created_at\":\"2024-08-20T18:37:24.100435Z\"}";

    TB_CHECK_INT(tb_batch_object(S(doc), &o), 0);
    TB_CHECK(strcmp(o.id, "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF") == 0);
    TB_CHECK_INT(o.id_len, 33);
    TB_CHECK_INT(o.status, TB_BATCH_ENDED);
    TB_CHECK_INT(o.counts[TB_BATCH_PROCESSING], 0);
    TB_CHECK_INT(o.counts[TB_BATCH_SUCCEEDED], 50);
    TB_CHECK_INT(o.counts[TB_BATCH_EXPIRED], 10);
    TB_CHECK(o.results_url.len > 0
             && memcmp(doc + o.results_url.off, "\"https://", 9) == 0
             && doc[o.results_url.off + o.results_url.len - 1] == '"');

    TB_CHECK_INT(tb_batch_object(S("{\"id\":\"b\",\"type\":\"message_batch\","
                                   "\"processing_status\":\"in_progress\","
                                   "\"results_url\":null}"), &o), 0);
    TB_CHECK_INT(o.status, TB_BATCH_IN_PROGRESS);
    TB_CHECK_INT(o.results_url.len, 0);
    TB_CHECK_INT(o.counts[TB_BATCH_SUCCEEDED], -1);

    TB_CHECK_INT(tb_batch_object(S("{\"id\":\"b\",\"type\":\"message_batch\","
                                   "\"processing_status\":\"new\"}"), &o),
                 0);
    TB_CHECK_INT(o.status, TB_BATCH_UNKNOWN);

    /* not one: another type, an id a path could not carry, twice, broken */
    TB_CHECK_INT(tb_batch_object(S("{\"id\":\"b\",\"type\":\"message\"}"),
                                 &o), -1);
    TB_CHECK_INT(tb_batch_object(S("{\"id\":\"../b\","
                                   "\"type\":\"message_batch\"}"), &o), -1);
    TB_CHECK_INT(tb_batch_object(S("{\"id\":\"b%2f\","
                                   "\"type\":\"message_batch\"}"), &o), -1);
    TB_CHECK_INT(tb_batch_object(S("{\"id\":\"\","
                                   "\"type\":\"message_batch\"}"), &o), -1);
    TB_CHECK_INT(tb_batch_object(S("{\"id\":\"a\",\"id\":\"b\","
                                   "\"type\":\"message_batch\"}"), &o), -1);
    TB_CHECK_INT(tb_batch_object(S("{\"id\":\"b\","
                                   "\"type\":\"message_batch\""), &o), -1);
    TB_CHECK_INT(tb_batch_object(S("{\"type\":\"message_batch\"}"), &o), -1);
    TB_CHECK_INT(tb_batch_object(NULL, 0, &o), -1);
    TB_CHECK(o.id[0] == '\0');
}


TB_TEST(result_read)
{
    tb_batch_result_t  r;

    TB_CHECK_INT(tb_batch_result(S(
        "{\"custom_id\":\"a\",\"result\":{\"type\":\"succeeded\","
        "\"message\":{\"id\":\"msg_1\",\"type\":\"message\","
        "\"model\":\"claude-sonnet-4-6\",\"content\":[{\"type\":\"text\","
        "\"text\":\"hi\"}],\"usage\":{\"input_tokens\":10,"
        "\"cache_read_input_tokens\":3,\"output_tokens\":7}}}}"), &r), 0);
    TB_CHECK_INT(r.type, TB_RESULT_SUCCEEDED);
    TB_CHECK(strcmp(r.model, "claude-sonnet-4-6") == 0);
    TB_CHECK_INT(r.usage.input_tokens, 10);
    TB_CHECK_INT(r.usage.cache_read_input_tokens, 3);
    TB_CHECK_INT(r.usage.output_tokens, 7);
    /* the message itself, brace to brace */
    TB_CHECK_INT((int) r.message.off, 56);
    TB_CHECK_INT((int) r.message.len, 231 - 56 - 2);

    TB_CHECK_INT(tb_batch_result(S(
        "{\"custom_id\":\"a\",\"result\":{\"type\":\"errored\",\"error\":"
        "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
        "\"message\":\"x\"}}}}"), &r), 0);
    TB_CHECK_INT(r.type, TB_RESULT_ERRORED);
    TB_CHECK_INT(r.usage.input_tokens, -1);
    TB_CHECK_INT(tb_batch_result(S("{\"custom_id\":\"a\",\"result\":"
                                   "{\"type\":\"canceled\"}}"), &r), 0);
    TB_CHECK_INT(r.type, TB_RESULT_CANCELED);
    TB_CHECK_INT(tb_batch_result(S("{\"custom_id\":\"a\",\"result\":"
                                   "{\"type\":\"expired\"}}"), &r), 0);
    TB_CHECK_INT(r.type, TB_RESULT_EXPIRED);

    /* not one: a succeeded one without its usage, an unknown type, broken */
    TB_CHECK_INT(tb_batch_result(S("{\"custom_id\":\"a\",\"result\":"
                                   "{\"type\":\"succeeded\",\"message\":"
                                   "{\"model\":\"m\"}}}"), &r), -1);
    TB_CHECK_INT(r.type, TB_RESULT_UNKNOWN);
    TB_CHECK_INT(tb_batch_result(S("{\"custom_id\":\"a\",\"result\":"
                                   "{\"type\":\"exploded\"}}"), &r), -1);
    TB_CHECK_INT(tb_batch_result(S("{\"custom_id\":\"a\",\"result\":"
                                   "{\"type\":\"canceled\"}"), &r), -1);
    TB_CHECK_INT(tb_batch_result(S("[]"), &r), -1);
    TB_CHECK_INT(tb_batch_result(NULL, 0, &r), -1);
}


TB_TEST(object_record)
{
    size_t           i, n;
    tb_object_rec_t  o, back;
    char             buf[TB_OBJECT_REC_MAX + 1], t[TB_OBJECT_REC_MAX + 8];

    static const char  *bad[] = {
        "",
        "o1",
        "o2 1 1 0 0 1 2 3 4 5 6 7 8 9 2:a1 0:",
        "o1 3 1 0 0 1 2 3 4 5 6 7 8 9 2:a1 0:",          /* kind */
        "o1 1 4 0 0 1 2 3 4 5 6 7 8 9 2:a1 0:",          /* status */
        "o1 1 1 2 0 1 2 3 4 5 6 7 8 9 2:a1 0:",          /* over */
        "o1 1 1 0 0 -1 2 3 4 5 6 7 8 9 2:a1 0:",         /* created */
        "o1 1 1 0 0 1 2 -3 4 5 6 7 8 9 2:a1 0:",         /* reserved */
        "o1 1 1 0 0 1 2 3 4 -2 6 7 8 9 2:a1 0:",         /* a count */
        "o1 1 1 0 0 01 2 3 4 5 6 7 8 9 2:a1 0:",         /* leading 0 */
        "o1 1 1 0 0 1  2 3 4 5 6 7 8 9 2:a1 0:",         /* two spaces */
        "o1 1 1 0 0 1 2 3 4 5 6 7 8 9 0: 0:",            /* no account */
        "o1 1 1 0 0 1 2 3 4 5 6 7 8 9 3:a1 0:",          /* too long */
        "o1 1 1 0 0 1 2 3 4 5 6 7 8 9 1:a1 0:",          /* too short */
        "o1 1 1 0 0 1 2 3 4 5 6 7 8 9 2:a1 0: ",         /* after */
        "o1 1 1 0 0 1 2 3 4 5 6 7 8 9 2:a1",             /* no key */
        "o1 1 1 0 0 1 2 3 4 5 6 7 8 9 65:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 0:",
        "o1 1 1 0 0 99999999999999999999 2 3 4 5 6 7 8 9 2:a1 0:",
        "o1 1 1 0 0 9223372036854775808 2 3 4 5 6 7 8 9 2:a1 0:",
    };

    memset(&o, 0, sizeof(o));
    o.kind = TB_OBJECT_BATCH;
    o.status = TB_BATCH_IN_PROGRESS;
    o.created_ms = 1764460000123LL;
    o.seen_ms = INT64_MAX;
    o.reserved = 1500000000LL;
    o.counts[0] = 3;
    o.counts[1] = -1;
    o.counts[4] = 0;
    strcpy(o.account, "acct one:x");   /* a space and a colon */
    strcpy(o.key, "tenant-1");
    o.size = -1;                        /* what a batch reads back */

    n = tb_object_rec_encode(&o, buf, sizeof(buf));
    TB_CHECK(n > 0 && n == strlen(buf));
    memset(&back, 0, sizeof(back));
    TB_CHECK_INT(tb_object_rec_decode(buf, n, &back), 0);
    TB_CHECK(memcmp(&o, &back, sizeof(o)) == 0);

    /* every shorter text is refused, and a cut one never read past */
    for (i = 0; i < n; i++) {
        memcpy(t, buf, i);
        TB_CHECK_INT(tb_object_rec_decode(t, i, &back), -1);
    }

    /* open mode: no key */
    o.key[0] = '\0';
    n = tb_object_rec_encode(&o, buf, sizeof(buf));
    TB_CHECK(n > 0);
    TB_CHECK_INT(tb_object_rec_decode(buf, n, &back), 0);
    TB_CHECK_STR(back.key, "");

    /* too small a buffer, an object out of range: nothing */
    TB_CHECK_INT(tb_object_rec_encode(&o, buf, 10), 0);
    o.status = 9;
    TB_CHECK_INT(tb_object_rec_encode(&o, buf, sizeof(buf)), 0);

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (tb_object_rec_decode(bad[i], strlen(bad[i]), &back) != -1) {
            TB_FAIL_AT("decoded: \"%s\"", bad[i]);
        }
    }

    n = strlen("o1 1 1 0 0 1 2 3 4 5 6 7 8 9 2:a1 0:");
    TB_CHECK_INT(tb_object_rec_decode("o1 1 1 0 0 1 2 3 4 5 6 7 8 9 2:a1 0:",
                                      n, &back), 0);
    TB_CHECK_INT(back.counts[4], 9);
    TB_CHECK_STR(back.account, "a1");
}


TB_TEST(file_object_and_record)
{
    size_t           n;
    tb_file_obj_t    f;
    tb_object_rec_t  o, back;
    char             buf[TB_OBJECT_REC_MAX + 1], name[600];

    static const char  doc[] =
        "{\"id\":\"file_011CNha8iCJcU1wXNR6q4V8w\",\"type\":\"file\","
        "\"filename\":\"r\\u00e9sum\\u00e9 1.pdf\",\"mime_type\":"
        "\"application/pdf\",\"size_bytes\":1024,\"created_at\":"
        "\"2025-01-01T00:00:00Z\",\"downloadable\":false}";

    TB_CHECK_INT(tb_file_object((const unsigned char *) doc, strlen(doc), &f),
                 0);
    TB_CHECK_STR(f.id, "file_011CNha8iCJcU1wXNR6q4V8w");
    TB_CHECK_STR(f.filename, "r\xc3\xa9sum\xc3\xa9 1.pdf");
    TB_CHECK_STR(f.mime, "application/pdf");
    TB_CHECK_INT(f.size, 1024);
    TB_CHECK_INT(f.downloadable, 0);

#define DOC(s)  tb_file_object((const unsigned char *) (s), strlen(s), &f)
    TB_CHECK_INT(DOC("{\"id\":\"file_1\",\"type\":\"file_deleted\"}"), 0);
    TB_CHECK_INT(f.size, -1);
    TB_CHECK_INT(DOC("{\"id\":\"file_1\",\"type\":\"message_batch\"}"), -1);
    TB_CHECK_INT(DOC("{\"id\":\"file 1\",\"type\":\"file\"}"), -1);
    TB_CHECK_INT(DOC("{\"id\":\"file_1\",\"id\":\"file_2\",\"type\":\"file\"}"),
                 -1);
    TB_CHECK_INT(DOC("{\"id\":\"file_1\",\"type\":\"file\""), -1);
    TB_CHECK_INT(DOC("{\"type\":\"file\"}"), -1);
    TB_CHECK_INT(DOC("{\"id\":\"file_1\",\"type\":\"file\",\"size_bytes\":-4,"
                     "\"downloadable\":true}"), 0);
    TB_CHECK_INT(f.size, -1);
    TB_CHECK_INT(f.downloadable, 1);

    /* a name longer than kept: cut whole, never in a UTF-8 sequence */
    memset(name, 0, sizeof(name));
    strcpy(name, "{\"id\":\"file_1\",\"type\":\"file\",\"filename\":\"ab");
    for (n = 0; n < 200; n++) {
        strcat(name, "\xc3\xa9");
    }
    strcat(name, "\"}");
    TB_CHECK_INT(DOC(name), 0);
    TB_CHECK_INT((int) strlen(f.filename), 254);
#undef DOC

    /* its record: the file's fields after the key's, read back the same */
    memset(&o, 0, sizeof(o));
    o.kind = TB_OBJECT_FILE;
    o.created_ms = 1;
    o.seen_ms = 2;
    o.counts[0] = -1;
    strcpy(o.account, "a1");
    strcpy(o.key, "one");
    o.size = 1024;
    o.downloadable = 1;
    strcpy(o.filename, "two words: x.pdf");
    strcpy(o.mime, "application/pdf");

    n = tb_object_rec_encode(&o, buf, sizeof(buf));
    TB_CHECK(n > 0);
    TB_CHECK_STR(buf + n - strlen(" 1024 1 16:two words: x.pdf "
                                  "15:application/pdf"),
                 " 1024 1 16:two words: x.pdf 15:application/pdf");
    memset(&back, 0, sizeof(back));
    TB_CHECK_INT(tb_object_rec_decode(buf, n, &back), 0);
    TB_CHECK(memcmp(&o, &back, sizeof(o)) == 0);

    /* a batch's record with a file's fields after it, or a file's without */
#define DEC(s)  tb_object_rec_decode((s), strlen(s), &back)
    TB_CHECK_INT(DEC("o1 1 1 0 0 1 2 3 4 5 6 7 8 9 2:a1 0: 1 0 0: 0:"), -1);
    TB_CHECK_INT(DEC("o1 2 0 0 0 1 2 3 4 5 6 7 8 9 2:a1 0:"), -1);
    TB_CHECK_INT(DEC("o1 2 0 0 0 1 2 3 4 5 6 7 8 9 2:a1 0: 5 2 0: 0:"), -1);
    TB_CHECK_INT(DEC("o1 2 0 0 0 1 2 3 4 5 6 7 8 9 2:a1 0: 5 1 0: 0:"), 0);
    TB_CHECK_INT(DEC("o1 2 0 0 0 1 2 3 4 5 6 7 8 9 2:a1 0: 5 1 1:x 0:"), 0);
    TB_CHECK_STR(back.filename, "x");
    TB_CHECK_INT(DEC("o1 2 0 0 0 1 2 3 4 5 6 7 8 9 2:a1 0: 5 1 2:x 0:"), -1);
#undef DEC
}


TB_TEST(file_refs)
{
    size_t         n;
    tb_file_ref_t  r[4];

#define REFS(s)  tb_file_refs((const unsigned char *) (s), strlen(s), r, 4, &n)
    TB_CHECK_INT(REFS("{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                      "\"content\":[{\"type\":\"document\",\"source\":"
                      "{\"type\":\"file\",\"file_id\":\"file_A1\"}},"
                      "{\"type\":\"text\",\"text\":\"file_id\"}]}],"
                      "\"system\":[{\"type\":\"container_upload\","
                      "\"file\\u005fid\":\"file_B2\"}]}"), 0);
    TB_CHECK_INT((int) n, 2);
    TB_CHECK_STR(r[0].id, "file_A1");
    TB_CHECK_STR(r[1].id, "file_B2");

    /* not a file: another prefix, not a string, a schema */
    TB_CHECK_INT(REFS("{\"tools\":[{\"input_schema\":{\"properties\":"
                      "{\"file_id\":{\"type\":\"string\"}}}}],"
                      "\"x\":{\"file_id\":\"doc-7\"},\"y\":{\"file_id\":3}}"),
                 0);
    TB_CHECK_INT((int) n, 0);

    /* one the API never gives: named, without an id */
    TB_CHECK_INT(REFS("{\"a\":{\"file_id\":\"file_x y\"}}"), 0);
    TB_CHECK_INT((int) n, 1);
    TB_CHECK_INT((int) r[0].id_len, 0);

    /* more than max: counted */
    TB_CHECK_INT(REFS("[{\"file_id\":\"file_1\"},{\"file_id\":\"file_2\"},"
                      "{\"file_id\":\"file_3\"},{\"file_id\":\"file_4\"},"
                      "{\"file_id\":\"file_5\"}]"), 0);
    TB_CHECK_INT((int) n, 5);
    TB_CHECK_STR(r[3].id, "file_4");

    TB_CHECK_INT(REFS("{\"file_id\":\"file_1\""), -1);
#undef REFS
}


int
main(void)
{
    TB_RUN(scan_hands_over_each_request);
    TB_RUN(scan_refuses);
    TB_RUN(scan_many);
    TB_RUN(object_read);
    TB_RUN(result_read);
    TB_RUN(object_record);
    TB_RUN(file_object_and_record);
    TB_RUN(file_refs);

    return tb_test_done();
}
