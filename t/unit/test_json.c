/*
 * Unit tests of src/core/tb_json.c: request body scanning, path lookups,
 * escaping and usage merging (the SSE stream parser: test_sse.c).
 */

#include <stdlib.h>
#include <time.h>

#include "tb_test.h"
#include "tb_json.h"
#include "tb_body.h"
#include "tb_sse.h"


#define S(s)  (const unsigned char *) (s), strlen(s)


static tb_body_t  body;
static char       err[256];


static int
scan(const char *s)
{
    return tb_scan_body((const unsigned char *) s, strlen(s), &body, err,
                        sizeof(err));
}


/* the text of a span of s */

static const char *
span(const char *s, tb_span_t sp)
{
    static char  buf[4096];
    size_t       n;

    n = sp.len < sizeof(buf) - 1 ? sp.len : sizeof(buf) - 1;
    memcpy(buf, s + sp.off, n);
    buf[n] = '\0';

    return buf;
}


/* tb_scan_body: valid bodies */


TB_TEST(body_typical)
{
    const char  *b =
        "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":1024,"
        "\"stream\":true,"
        "\"system\":\"You are helpful.\","
        "\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],"
        "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":"
        "{\"type\":\"object\",\"properties\":{}}}],"
        "\"metadata\":{\"user_id\":\"u-1\"},"
        "\"temperature\":0.7,\"top_k\":5,\"stop_sequences\":[\"x\"]}";

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK_STR(err, "");
    TB_CHECK(body.has_model);
    TB_CHECK_STR(body.model, "claude-sonnet-4-5");
    TB_CHECK_INT(body.model_len, 17);
    TB_CHECK(body.has_stream);
    TB_CHECK(body.stream);
    TB_CHECK_INT(body.max_tokens, 1024);
    TB_CHECK_STR(span(b, body.system), "\"You are helpful.\"");
    TB_CHECK_STR(span(b, body.messages),
                 "[{\"role\":\"user\",\"content\":\"Hello\"}]");
    TB_CHECK_STR(span(b, body.tools),
                 "[{\"name\":\"get_weather\",\"input_schema\":"
                 "{\"type\":\"object\",\"properties\":{}}}]");
    TB_CHECK_STR(span(b, body.metadata), "{\"user_id\":\"u-1\"}");
}


TB_TEST(body_system_blocks)
{
    const char  *b =
        "{\n  \"model\": \"claude-x\",\n  \"system\": [\n"
        "    {\"type\": \"text\", \"text\": \"a\","
        " \"cache_control\": {\"type\": \"ephemeral\"}},\n"
        "    {\"type\": \"text\", \"text\": \"b\"}\n  ],\n"
        "  \"messages\": []\n}\n";

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK_STR(span(b, body.system),
                 "[\n    {\"type\": \"text\", \"text\": \"a\","
                 " \"cache_control\": {\"type\": \"ephemeral\"}},\n"
                 "    {\"type\": \"text\", \"text\": \"b\"}\n  ]");
    TB_CHECK_STR(span(b, body.messages), "[]");
    TB_CHECK_INT(body.tools.len, 0);
    TB_CHECK_INT(body.metadata.len, 0);
    TB_CHECK(!body.has_stream);
    TB_CHECK_INT(body.max_tokens, -1);
}


TB_TEST(body_spans_exact)
{
    const char  *b = " { \"system\" :\t\"s\\\"x\" , \"tools\" : null ,"
                     "\"metadata\":  {}  ,\"messages\" :[ 1 , {\"a\":[]} ] }";

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK_INT(body.system.off, (size_t) (strchr(b, '\t') - b + 1));
    TB_CHECK_STR(span(b, body.system), "\"s\\\"x\"");
    TB_CHECK_STR(span(b, body.tools), "null");
    TB_CHECK_STR(span(b, body.metadata), "{}");
    TB_CHECK_STR(span(b, body.messages), "[ 1 , {\"a\":[]} ]");
}


TB_TEST(body_unicode_and_escapes)
{
    const char  *b =
        "{\"model\":\"cl\\u0061ude-\\/x\",\"messages\":[{\"role\":\"user\","
        "\"content\":\"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 "
        "\\ud83d\\ude00 \\b\\f\\n\\r\\t\\\\ \\\" \\u00e9 \x7f\"}]}";

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK_STR(body.model, "claude-/x");
    TB_CHECK_INT(body.model_len, 9);
    TB_CHECK(body.messages.len > 0);
}


TB_TEST(body_breakpoints)
{
    /* none */
    TB_CHECK_INT(scan("{\"model\":\"m\",\"system\":\"be brief\","
                      "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}"),
                 0);
    TB_CHECK(!body.breakpoint);

    /* a system block's, a tool's, a message block's, the top level's */
    TB_CHECK_INT(scan("{\"system\":[{\"type\":\"text\",\"text\":\"s\","
                      "\"cache_control\":{\"type\":\"ephemeral\"}}]}"), 0);
    TB_CHECK(body.breakpoint);
    TB_CHECK_INT(scan("{\"tools\":[{\"name\":\"t\",\"cache_control\":"
                      "{\"type\":\"ephemeral\"}}]}"), 0);
    TB_CHECK(body.breakpoint);
    TB_CHECK_INT(scan("{\"messages\":[{\"role\":\"user\",\"content\":[{"
                      "\"type\":\"text\",\"text\":\"x\",\"cache_control\":"
                      "{\"type\":\"ephemeral\",\"ttl\":\"1h\"}}]}]}"), 0);
    TB_CHECK(body.breakpoint);
    TB_CHECK_INT(scan("{\"model\":\"m\",\"cache_control\":{\"type\":"
                      "\"ephemeral\"}}"), 0);
    TB_CHECK(body.breakpoint);

    /* spelt with an escape, it is the same key to the API */
    TB_CHECK_INT(scan("{\"system\":[{\"cache\\u005fcontrol\":{}}]}"), 0);
    TB_CHECK(body.breakpoint);

    /* in a string, or a key that only starts so: none */
    TB_CHECK_INT(scan("{\"system\":\"\\\"cache_control\\\": 1\","
                      "\"x\":{\"cache_control_x\":1,\"cache_contro\":2}}"), 0);
    TB_CHECK(!body.breakpoint);

    /* a body refused says nothing of it */
    TB_CHECK_INT(scan("{\"cache_control\":{},\"model\":1}"), -1);
    TB_CHECK(!body.breakpoint);
}


TB_TEST(body_nested_model_ignored)
{
    const char  *b =
        "{\"messages\":[{\"role\":\"user\",\"model\":\"evil\","
        "\"content\":[{\"model\":\"evil2\"}]}],"
        "\"metadata\":{\"model\":\"evil3\",\"stream\":true,"
        "\"max_tokens\":5},\"tools\":[{\"model\":1}]}";

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK(!body.has_model);
    TB_CHECK_STR(body.model, "");
    TB_CHECK(!body.has_stream);
    TB_CHECK_INT(body.max_tokens, -1);

    /* the root key wins even when nested ones come after it */
    b = "{\"model\":\"good\",\"messages\":[{\"model\":\"evil\"}],"
        "\"x\":{\"model\":\"evil\"}}";

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK_STR(body.model, "good");
}


TB_TEST(body_model_escaped_key)
{
    TB_CHECK_INT(scan("{\"mod\\u0065l\":\"claude-x\","
                      "\"\\u0073tream\":true,\"max\\u005ftokens\":7}"), 0);
    TB_CHECK(body.has_model);
    TB_CHECK_STR(body.model, "claude-x");
    TB_CHECK(body.stream);
    TB_CHECK_INT(body.max_tokens, 7);

    /* not the same key: "model " and "Model" */
    TB_CHECK_INT(scan("{\"model \":\"a\",\"Model\":\"b\","
                      "\"mod\\u0065\":\"c\"}"), 0);
    TB_CHECK(!body.has_model);
}


TB_TEST(body_max_tokens)
{
    TB_CHECK_INT(scan("{\"max_tokens\":0}"), 0);
    TB_CHECK_INT(body.max_tokens, 0);

    TB_CHECK_INT(scan("{\"max_tokens\":128000}"), 0);
    TB_CHECK_INT(body.max_tokens, 128000);

    TB_CHECK_INT(scan("{\"max_tokens\":9223372036854775807}"), 0);
    TB_CHECK_INT(body.max_tokens, INT64_MAX);

    TB_CHECK_INT(scan("{\"max_tokens\":9223372036854775808}"), -1);
    TB_CHECK_STR(err, "max_tokens: expected a non-negative integer");

    TB_CHECK_INT(scan("{\"max_tokens\":99999999999999999999}"), -1);
    TB_CHECK_STR(err, "max_tokens: expected a non-negative integer");

    TB_CHECK_INT(scan("{\"max_tokens\":-1}"), -1);
    TB_CHECK_INT(scan("{\"max_tokens\":1.0}"), -1);
    TB_CHECK_INT(scan("{\"max_tokens\":1e3}"), -1);
    TB_CHECK_INT(scan("{\"max_tokens\":\"100\"}"), -1);
    TB_CHECK_INT(scan("{\"max_tokens\":null}"), -1);
    TB_CHECK_STR(err, "max_tokens: expected a non-negative integer");
}


TB_TEST(body_stream)
{
    TB_CHECK_INT(scan("{\"stream\":false}"), 0);
    TB_CHECK(body.has_stream);
    TB_CHECK(!body.stream);

    TB_CHECK_INT(scan("{\"stream\":true}"), 0);
    TB_CHECK(body.has_stream);
    TB_CHECK(body.stream);

    TB_CHECK_INT(scan("{}"), 0);
    TB_CHECK(!body.has_stream);
    TB_CHECK(!body.stream);

    TB_CHECK_INT(scan("{\"stream\":\"true\"}"), -1);
    TB_CHECK_STR(err, "stream: expected true or false");
    TB_CHECK_INT(scan("{\"stream\":1}"), -1);
    TB_CHECK_INT(scan("{\"stream\":null}"), -1);
    TB_CHECK_STR(err, "stream: expected true or false");
}


TB_TEST(body_model_type)
{
    TB_CHECK_INT(scan("{\"model\":5}"), -1);
    TB_CHECK_STR(err, "model: expected a string");
    TB_CHECK_INT(scan("{\"model\":null}"), -1);
    TB_CHECK_STR(err, "model: expected a string");
    TB_CHECK_INT(scan("{\"model\":[\"a\"]}"), -1);
    TB_CHECK_STR(err, "model: expected a string");
    TB_CHECK_INT(scan("{\"model\":\"a\\nb\"}"), -1);
    TB_CHECK_STR(err, "model: contains control characters");
    TB_CHECK_INT(scan("{\"model\":\"a\\u0000b\"}"), -1);

    /* a syntax error is reported before a type error */
    TB_CHECK_INT(scan("{\"model\":5,}"), -1);
    TB_CHECK_CONTAINS(err, "not valid JSON");
}


TB_TEST(body_model_length)
{
    char    b[2048], *p;
    size_t  i;

    p = b;
    p += sprintf(p, "{\"model\":\"");
    for (i = 0; i < 256; i++) {
        *p++ = 'm';
    }
    sprintf(p, "\"}");

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK_INT(body.model_len, 256);
    TB_CHECK_INT(strlen(body.model), 256);

    p = b;
    p += sprintf(p, "{\"model\":\"");
    for (i = 0; i < 257; i++) {
        *p++ = 'm';
    }
    sprintf(p, "\"}");

    TB_CHECK_INT(scan(b), -1);
    TB_CHECK_STR(err, "model: longer than 256 bytes");
    TB_CHECK(!body.has_model);

    /* the limit applies after unescaping: 256 escapes are 256 bytes */
    p = b;
    p += sprintf(p, "{\"model\":\"");
    for (i = 0; i < 256; i++) {
        p += sprintf(p, "\\u0061");
    }
    sprintf(p, "\"}");

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK_INT(body.model_len, 256);

    /* and a multibyte character can push it over */
    p = b;
    p += sprintf(p, "{\"model\":\"");
    for (i = 0; i < 255; i++) {
        *p++ = 'm';
    }
    sprintf(p, "\\u00e9\"}");

    TB_CHECK_INT(scan(b), -1);
    TB_CHECK_STR(err, "model: longer than 256 bytes");
}


TB_TEST(body_duplicate_keys)
{
    /*
     * A member the gateway acts on, given twice, is refused: the scope
     * checked here and the one the upstream reads could differ
     */

    TB_CHECK_INT(scan("{\"model\":\"a\",\"max_tokens\":1,\"model\":\"b\"}"), -1);
    TB_CHECK_STR(err, "model: given more than once in the request body");
    TB_CHECK_INT(scan("{\"stream\":true,\"stream\":false}"), -1);
    TB_CHECK_STR(err, "stream: given more than once in the request body");
    TB_CHECK_INT(scan("{\"max_tokens\":1,\"max_tokens\":2}"), -1);
    TB_CHECK_INT(scan("{\"system\":\"x\",\"system\":[]}"), -1);
    TB_CHECK_INT(scan("{\"messages\":[],\"messages\":[]}"), -1);
    TB_CHECK_INT(scan("{\"metadata\":{},\"metadata\":{}}"), -1);
    TB_CHECK_INT(scan("{\"tools\":[],\"tools\":[]}"), -1);

    /* escaped, it is the same member */
    TB_CHECK_INT(scan("{\"model\":\"a\",\"mod\\u0065l\":\"b\"}"), -1);
    TB_CHECK_STR(err, "model: given more than once in the request body");

    /* nested, or a member the gateway does not act on: not its business */
    TB_CHECK_INT(scan("{\"model\":\"a\",\"tools\":[{\"model\":1},"
                      "{\"model\":2}],\"x\":1,\"x\":2}"), 0);
    TB_CHECK_STR(body.model, "a");
}


TB_TEST(body_not_object)
{
    static const char  *docs[] = {
        "\"x\"", "[]", "[{\"model\":\"a\"}]", "1", "null", "true", " 0 "
    };
    size_t  i;

    for (i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        TB_CHECK_INT(scan(docs[i]), -1);
        TB_CHECK_STR(err, "request body must be a JSON object");
    }
}


/* tb_body_edit: the gateway's own edits, the rest byte for byte */

static const char *
edit(const char *b, int bp, const char *model)
{
    static unsigned char  out[4096];
    size_t                n;

    if (scan(b) != 0) {
        return "(scan failed)";
    }

    n = tb_body_edit((const unsigned char *) b, strlen(b), &body, bp, model,
                     model ? strlen(model) : 0, out);

    if (n >= sizeof(out)
        || n > tb_body_edit_max(strlen(b), model ? strlen(model) : 0))
    {
        return "(too long)";
    }

    out[n] = '\0';

    return (const char *) out;
}


static tb_span_t
mspan(void)
{
    tb_span_t  s;

    s.off = body.model_off;
    s.len = body.model_vlen;

    return s;
}


TB_TEST(body_edit)
{
    const char  *b, *o;
    static char  kept[4096];

    /* a string system: made the one text block that carries it */
    b = " {\"model\":\"claude-opus-4\",\"system\":\"S \\\" x\","
        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"tools\":[],\"metadata\":{\"user_id\":\"u\"}}\n";

    o = edit(b, 1, NULL);
    TB_CHECK_STR(o, " {\"model\":\"claude-opus-4\",\"system\":[{\"type\":"
                 "\"text\",\"text\":\"S \\\" x\",\"cache_control\":"
                 "{\"type\":\"ephemeral\"}}],"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"tools\":[],\"metadata\":{\"user_id\":\"u\"}}\n");
    snprintf(kept, sizeof(kept), "%s", o);
    TB_CHECK_STR(span(kept, body.system), "[{\"type\":\"text\",\"text\":"
                 "\"S \\\" x\",\"cache_control\":{\"type\":\"ephemeral\"}}]");
    TB_CHECK_STR(span(kept, mspan()), "\"claude-opus-4\"");
    TB_CHECK_STR(span(kept, body.metadata), "{\"user_id\":\"u\"}");
    TB_CHECK_STR(span(kept, body.tools), "[]");

    /* the result scans again, and now asks for a breakpoint */
    TB_CHECK_INT(scan(kept), 0);
    TB_CHECK(body.breakpoint);

    o = edit(b, 0, "claude-haiku-4");
    TB_CHECK_STR(o, " {\"model\":\"claude-haiku-4\",\"system\":\"S \\\" x\","
                 "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"tools\":[],\"metadata\":{\"user_id\":\"u\"}}\n");
    snprintf(kept, sizeof(kept), "%s", o);
    TB_CHECK_STR(span(kept, body.messages),
                 "[{\"role\":\"user\",\"content\":\"hi\"}]");
    TB_CHECK_STR(span(kept, mspan()), "\"claude-haiku-4\"");

    /* system blocks: the last one carries it; the model after them */
    b = "{\"system\":[{\"type\":\"text\",\"text\":\"a\"} , "
        "{\"type\":\"text\",\"text\":\"b\"}\n],\"tools\":[1],"
        "\"model\":\"m\\u0031\",\"messages\":[]}";
    o = edit(b, 1, "claude-sonnet-4-5");
    TB_CHECK_STR(o, "{\"system\":[{\"type\":\"text\",\"text\":\"a\"} , "
                 "{\"type\":\"text\",\"text\":\"b\",\"cache_control\":"
                 "{\"type\":\"ephemeral\"}}\n],\"tools\":[1],"
                 "\"model\":\"claude-sonnet-4-5\",\"messages\":[]}");
    snprintf(kept, sizeof(kept), "%s", o);
    TB_CHECK_STR(span(kept, body.tools), "[1]");
    TB_CHECK_STR(span(kept, body.messages), "[]");
    TB_CHECK_STR(span(kept, mspan()), "\"claude-sonnet-4-5\"");

    /* no system: the last tool; an empty object gets no comma */
    TB_CHECK_STR(edit("{\"tools\":[{\"name\":\"t\"},{ }],\"messages\":[]}",
                      1, NULL),
                 "{\"tools\":[{\"name\":\"t\"},{ \"cache_control\":"
                 "{\"type\":\"ephemeral\"}}],\"messages\":[]}");
    TB_CHECK_STR(span(edit("{\"system\":[],\"tools\":[{\"a\":1}]}", 1, NULL),
                      body.tools),
                 "[{\"a\":1,\"cache_control\":{\"type\":\"ephemeral\"}}]");

    /* no place for one: the body as it was */
    TB_CHECK_STR(edit("{\"system\":[\"x\"],\"messages\":[]}", 1, NULL),
                 "{\"system\":[\"x\"],\"messages\":[]}");
    TB_CHECK_STR(edit("{\"system\":7,\"tools\":[[]]}", 1, NULL),
                 "{\"system\":7,\"tools\":[[]]}");
    TB_CHECK_STR(edit("{\"messages\":[]}", 1, NULL), "{\"messages\":[]}");

    TB_CHECK(tb_body_model_ok("claude-haiku-4-5", 16));
    TB_CHECK(!tb_body_model_ok("a\"b", 3));
    TB_CHECK(!tb_body_model_ok("a\\b", 3));
    TB_CHECK(!tb_body_model_ok("a\nb", 3));
    TB_CHECK(!tb_body_model_ok("", 0));
}


/* tb_scan_body: invalid documents */


static void
check_invalid(const char *doc, const char *what, long at)
{
    char  want[128];

    if (scan(doc) != -1) {
        TB_FAIL_AT("accepted: %s", doc);
        return;
    }

    TB_CHECK_CONTAINS(err, "request body is not valid JSON: ");

    if (what != NULL) {
        TB_CHECK_CONTAINS(err, what);
    }

    if (at >= 0) {
        snprintf(want, sizeof(want), " at byte %ld", at);
        TB_CHECK_CONTAINS(err, want);
    }

    if (tb_json_validate((const unsigned char *) doc, strlen(doc)) != -1) {
        TB_FAIL_AT("validate accepted: %s", doc);
    }
}


TB_TEST(invalid_trailing_comma)
{
    check_invalid("{\"a\":1,}", "trailing comma", 7);
    check_invalid("{\"a\":[1,2,]}", "trailing comma", 10);
    check_invalid("{\"a\":[1,2 , ]}", "trailing comma", 12);
    check_invalid("{,}", "expected a string key", 1);
    check_invalid("{\"a\":[,]}", "expected a value", 6);
    check_invalid("{\"a\":1,,\"b\":2}", "expected a string key", 7);
}


TB_TEST(invalid_numbers)
{
    check_invalid("{\"a\":01}", "leading zeros", 5);
    check_invalid("{\"a\":-01}", "leading zeros", 5);
    check_invalid("{\"a\":00}", "leading zeros", 5);
    check_invalid("{\"a\":1.}", "invalid number", 5);
    check_invalid("{\"a\":.5}", "expected a value", 5);
    check_invalid("{\"a\":1e}", "invalid number", 5);
    check_invalid("{\"a\":1e+}", "invalid number", 5);
    check_invalid("{\"a\":+1}", "expected a value", 5);
    check_invalid("{\"a\":-}", "invalid number", 5);
    check_invalid("{\"a\":-a}", "invalid number", 5);
    check_invalid("{\"a\":0x10}", "expected ',' or '}'", 6);
    check_invalid("{\"a\":NaN}", "expected a value", 5);
    check_invalid("{\"a\":Infinity}", "expected a value", 5);
    check_invalid("{\"a\":1", "unexpected end of input", 6);

    TB_CHECK_INT(scan("{\"a\":[0,-0,1.5,-0.0e0,1E+2,2e-3,10,123456789012345"
                      "678901234567890,1.7976931348623157e309]}"), 0);
}


TB_TEST(invalid_escapes)
{
    check_invalid("{\"a\":\"\\x\"}", "invalid escape sequence", 6);
    check_invalid("{\"a\":\"\\'\"}", "invalid escape sequence", 6);
    check_invalid("{\"a\":\"\\u12G4\"}", "invalid \\u escape", 6);
    check_invalid("{\"a\":\"\\u12\"}", "invalid \\u escape", 6);
    check_invalid("{\"a\":\"\\U0041\"}", "invalid escape sequence", 6);
    check_invalid("{\"a\":\"\\u", "invalid \\u escape", 6);
    check_invalid("{\"a\":\"\\", "unterminated string", 5);

    /* surrogates are checked for hex digits only */
    TB_CHECK_INT(scan("{\"a\":\"\\ud800 \\udfff \\uDBFF\\uDFFF\"}"), 0);
    check_invalid("{\"a\":\"\\ud83d\\udzzz\"}", "invalid \\u escape", 12);
}


TB_TEST(invalid_control_chars)
{
    check_invalid("{\"a\":\"x\ny\"}", "control character in string", 7);
    check_invalid("{\"a\":\"\t\"}", "control character in string", 6);
    check_invalid("{\"a\":\"\x01\"}", "control character in string", 6);
    check_invalid("{\"a\x1f\":1}", "control character in string", 3);

    /* DEL is not a control character for JSON */
    TB_CHECK_INT(scan("{\"a\":\"\x7f\"}"), 0);
}


TB_TEST(invalid_unterminated)
{
    check_invalid("{\"a\":\"xyz", "unterminated string", 5);
    check_invalid("{\"a\":\"xyz\\\"}", "unterminated string", 5);
    check_invalid("{\"a\":{\"b\":1}", "unexpected end of input", 12);
    check_invalid("{\"a\":[1,2", "unexpected end of input", 9);
    check_invalid("{\"a\":[1,2,", "unexpected end of input", 10);
    check_invalid("{\"a\"", "unexpected end of input", 4);
    check_invalid("{\"a\":", "unexpected end of input", 5);
    check_invalid("{", "unexpected end of input", 1);
    check_invalid("{\"abc", "unterminated string", 1);
}


TB_TEST(invalid_trailing_garbage)
{
    check_invalid("{} x", "unexpected data after the document", 3);
    check_invalid("{}{}", "unexpected data after the document", 2);
    TB_CHECK_INT(tb_scan_body((const unsigned char *) "{}\n\0", 4, &body,
                              err, sizeof(err)), -1);
    TB_CHECK_CONTAINS(err, "unexpected data after the document at byte 3");
    check_invalid("{\"a\":1}]", "unexpected data after the document", 7);

    /* but whitespace is fine */
    TB_CHECK_INT(scan(" \t\r\n{}\r\n \t"), 0);
}


TB_TEST(invalid_empty)
{
    check_invalid("", "unexpected end of input", 0);
    check_invalid("  \n ", "unexpected end of input", 4);
    TB_CHECK_INT(tb_scan_body(NULL, 0, &body, err, sizeof(err)), -1);
    TB_CHECK_CONTAINS(err, "unexpected end of input at byte 0");
}


TB_TEST(invalid_literals_and_syntax)
{
    check_invalid("{\"a\":tru}", "invalid literal", 5);
    check_invalid("{\"a\":nul", "invalid literal", 5);
    check_invalid("{\"a\":True}", "expected a value", 5);
    check_invalid("{\"a\":truex}", "expected ',' or '}'", 9);
    check_invalid("{\"a\" 1}", "expected ':'", 5);
    check_invalid("{\"a\":1 \"b\":2}", "expected ',' or '}'", 7);
    check_invalid("{\"a\":[1 2]}", "expected ',' or ']'", 8);
    check_invalid("{1:2}", "expected a string key", 1);
    check_invalid("{'a':1}", "expected a string key", 1);
    check_invalid("{\"a\":1}// c", "unexpected data", 7);
    check_invalid("{/* c */\"a\":1}", "expected a string key", 1);
    check_invalid("{\"a\":[}", "expected a value", 6);
    check_invalid("{\"a\":{]}", "expected a string key", 6);
    check_invalid("\xef\xbb\xbf{}", "expected a value", 0);
}


TB_TEST(invalid_utf8)
{
    static const char  *bad[] = {
        "\xff", "\x80", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80",
        "\xed\xa0\x80", "\xf0\x80\x80\x80", "\xf4\x90\x80\x80", "\xf5\x80",
        "\xe2\x82", "\xc3", "\xc3x", "\xe2\x82x", "\xf0\x9f\x98x"
    };
    static const char  *good[] = {
        "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf",
        "\xee\x80\x80", "\xef\xbf\xbf", "\xf0\x90\x80\x80",
        "\xf4\x8f\xbf\xbf"
    };
    char    doc[64];
    size_t  i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(doc, sizeof(doc), "{\"a\":\"xy%s\"}", bad[i]);
        check_invalid(doc, "invalid UTF-8", 8);
    }

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(doc, sizeof(doc), "{\"a\":\"xy%s\"}", good[i]);
        TB_CHECK_INT(scan(doc), 0);
    }

    /* bytes >= 0x80 outside strings */
    check_invalid("{\"a\":\xc3\xa9}", "expected a value", 5);
}


TB_TEST(invalid_depth)
{
    char    *b;
    size_t   i, n;

    /* 600 nested arrays inside the root object */
    b = malloc(2000);
    n = 0;
    n += sprintf(b, "{\"a\":");
    for (i = 0; i < 600; i++) {
        b[n++] = '[';
    }
    for (i = 0; i < 600; i++) {
        b[n++] = ']';
    }
    b[n++] = '}';
    b[n] = '\0';

    check_invalid(b, "nesting is too deep", 5 + 511);

    /* exactly TB_JSON_MAX_DEPTH levels are fine: root + 511 */
    n = sprintf(b, "{\"a\":");
    for (i = 0; i < TB_JSON_MAX_DEPTH - 1; i++) {
        b[n++] = '[';
    }
    for (i = 0; i < TB_JSON_MAX_DEPTH - 1; i++) {
        b[n++] = ']';
    }
    b[n++] = '}';
    b[n] = '\0';

    TB_CHECK_INT(scan(b), 0);
    TB_CHECK_INT(body.messages.len, 0);

    /* one more object level is too many */
    n = sprintf(b, "{\"a\":");
    for (i = 0; i < TB_JSON_MAX_DEPTH - 1; i++) {
        b[n++] = '[';
    }
    n += sprintf(b + n, "{}");
    for (i = 0; i < TB_JSON_MAX_DEPTH - 1; i++) {
        b[n++] = ']';
    }
    b[n++] = '}';
    b[n] = '\0';

    check_invalid(b, "nesting is too deep", 5 + TB_JSON_MAX_DEPTH - 1);

    free(b);
}


/*
 * The word-at-a-time string scanner: put each kind of special byte at
 * every position of strings of every length around the word size.
 */

TB_TEST(string_scan_positions)
{
    char    doc[512];
    size_t  len, pos, i, n;

    /* past two 32-byte runs and their tails: every scanner's edges */

    for (len = 1; len < 140; len++) {
        for (pos = 0; pos < len; pos++) {

            /* a control byte: the error points at it */
            n = (size_t) sprintf(doc, "{\"a\":\"");
            for (i = 0; i < len; i++) {
                doc[n++] = i == pos ? '\x1f' : 'a';
            }
            n += (size_t) sprintf(doc + n, "\"}");

            if (tb_scan_body((unsigned char *) doc, n, &body, err,
                             sizeof(err)) == 0)
            {
                TB_FAIL_AT("control byte accepted: len %zu pos %zu",
                           len, pos);
                return;
            }

            snprintf(doc, sizeof(doc), "at byte %zu", 6 + pos);
            TB_CHECK_CONTAINS(err, doc);

            /* an escaped quote, a UTF-8 sequence, an early end quote */
            n = (size_t) sprintf(doc, "{\"a\":\"");
            for (i = 0; i < len; i++) {
                if (i == pos) {
                    doc[n++] = '\\';
                    doc[n++] = '"';
                    doc[n++] = '\xc3';
                    doc[n++] = '\xa9';
                } else {
                    doc[n++] = 'b';
                }
            }
            n += (size_t) sprintf(doc + n, "\",\"system\":\"q\"}");

            TB_CHECK_INT(tb_scan_body((unsigned char *) doc, n, &body, err,
                                      sizeof(err)), 0);
            TB_CHECK_INT(body.system.off, n - 4);
        }
    }
}


TB_TEST(error_offsets)
{
    const char  *b = "{\n  \"model\": \"claude-x\",\n  \"messages\": [\n"
                     "    {\"role\": \"user\", \"content\": \"hi\"}\n"
                     "    {\"role\": \"assistant\"}\n  ]\n}";
    char         want[64];

    TB_CHECK_INT(scan(b), -1);
    snprintf(want, sizeof(want), "expected ',' or ']' at byte %ld",
             (long) (strstr(b, "}\n    {") - b + 6));
    TB_CHECK_CONTAINS(err, want);

    TB_CHECK_INT(scan("{\"a\":1 \"b\":2}"), -1);
    TB_CHECK_STR(err,
        "request body is not valid JSON: expected ',' or '}' at byte 7");

    /* a short error buffer is truncated, never overrun */
    memset(err, 'Z', sizeof(err));
    TB_CHECK_INT(tb_scan_body(S("{\"a\":1 \"b\":2}"), &body, err, 12), -1);
    TB_CHECK_STR(err, "request bod");
    TB_CHECK(err[12] == 'Z');
    TB_CHECK_INT(tb_scan_body(S("[]"), &body, err, 0), -1);
}


/* tb_json_validate and the lookups */


TB_TEST(validate_roots)
{
    TB_CHECK_INT(tb_json_validate(S("1")), 0);
    TB_CHECK_INT(tb_json_validate(S(" \"x\" ")), 0);
    TB_CHECK_INT(tb_json_validate(S("[]")), 0);
    TB_CHECK_INT(tb_json_validate(S("null")), 0);
    TB_CHECK_INT(tb_json_validate(S("{\"a\":{\"b\":[true,false,null]}}")), 0);
    TB_CHECK_INT(tb_json_validate(S("")), -1);
    TB_CHECK_INT(tb_json_validate(S("1 2")), -1);
    TB_CHECK_INT(tb_json_validate(S("[1,]")), -1);
    TB_CHECK_INT(tb_json_validate(NULL, 0), -1);

    /* a length that cuts a document short is honoured */
    TB_CHECK_INT(tb_json_validate((const unsigned char *) "{\"a\":1}", 6),
                 -1);
    TB_CHECK_INT(tb_json_validate((const unsigned char *) "truex", 4), 0);
}


TB_TEST(get_int)
{
    const char  *d = "{\"a\":1,\"message\":{\"usage\":{\"input_tokens\":25,"
                     "\"neg\":-7,\"f\":1.0,\"e\":1e3,\"s\":\"5\",\"t\":true,"
                     "\"max\":9223372036854775807,"
                     "\"min\":-9223372036854775808,"
                     "\"over\":9223372036854775808,"
                     "\"under\":-9223372036854775809,"
                     "\"big\":99999999999999999999}},\"arr\":[{\"x\":1}]}";
    int64_t      v;

    TB_CHECK_INT(tb_json_get_int(S(d), "a", &v), 0);
    TB_CHECK_INT(v, 1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.input_tokens", &v), 0);
    TB_CHECK_INT(v, 25);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.neg", &v), 0);
    TB_CHECK_INT(v, -7);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.max", &v), 0);
    TB_CHECK_INT(v, INT64_MAX);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.min", &v), 0);
    TB_CHECK(v == INT64_MIN);

    v = 42;
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.over", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.under", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.big", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.f", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.e", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.s", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.t", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.usage.absent", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "absent.x", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "a.b", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "arr.x", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "arr.0.x", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(d), "message.", &v), -1);
    TB_CHECK_INT(v, 42);
}


TB_TEST(get_paths_edge)
{
    int64_t  v;

    /* root must be an object; invalid documents find nothing */
    TB_CHECK_INT(tb_json_get_int(S("[{\"a\":1}]"), "a", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S("{\"a\":1,}"), "a", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S("{\"a\":1} x"), "a", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S(""), "a", &v), -1);

    /* duplicates: the last one wins, at every level */
    TB_CHECK_INT(tb_json_get_int(S("{\"a\":1,\"a\":2}"), "a", &v), 0);
    TB_CHECK_INT(v, 2);
    TB_CHECK_INT(tb_json_get_int(S("{\"a\":{\"b\":1},\"a\":{\"c\":2}}"),
                                 "a.b", &v), -1);

    /* escaped keys, whitespace everywhere, nested lookalikes */
    TB_CHECK_INT(tb_json_get_int(S(" { \"x\" : { \"a\" : 9 } ,"
                                   " \"\\u0061\" : 3 } "), "a", &v), 0);
    TB_CHECK_INT(v, 3);
    TB_CHECK_INT(tb_json_get_int(S("{\"x\":{\"a\":9},\"y\":[\"a\",{\"a\":8}]"
                                   ",\"z\":\"a\"}"), "a", &v), -1);
    TB_CHECK_INT(tb_json_get_int(S("{\"s\":\"}\\\"{\",\"a\":4}"), "a", &v),
                 0);
    TB_CHECK_INT(v, 4);
    TB_CHECK_INT(tb_json_get_int(S("{\"\":5}"), "", &v), 0);
    TB_CHECK_INT(v, 5);
}


TB_TEST(get_str)
{
    const char  *d = "{\"error\":{\"type\":\"overloaded_error\","
                     "\"message\":\"a\\\"b\\\\c\\/d\\n\\u00e9\\u20ac\","
                     "\"pair\":\"\\ud83d\\ude00\",\"hi\":\"x\\ud800y\","
                     "\"lo\":\"\\udc00\",\"hihi\":\"\\ud800\\ud800\","
                     "\"nul\":\"a\\u0000b\",\"n\":1,\"raw\":\"\xe6\x97\xa5\"}}";
    char         buf[64];
    size_t       len;

    TB_CHECK_INT(tb_json_get_str(S(d), "error.type", buf, sizeof(buf), &len),
                 0);
    TB_CHECK_STR(buf, "overloaded_error");
    TB_CHECK_INT(len, 16);

    TB_CHECK_INT(tb_json_get_str(S(d), "error.message", buf, sizeof(buf),
                                 &len), 0);
    TB_CHECK_STR(buf, "a\"b\\c/d\n\xc3\xa9\xe2\x82\xac");

    TB_CHECK_INT(tb_json_get_str(S(d), "error.pair", buf, sizeof(buf), &len),
                 0);
    TB_CHECK_STR(buf, "\xf0\x9f\x98\x80");
    TB_CHECK_INT(len, 4);

    TB_CHECK_INT(tb_json_get_str(S(d), "error.hi", buf, sizeof(buf), &len),
                 0);
    TB_CHECK_STR(buf, "x\xef\xbf\xbdy");

    TB_CHECK_INT(tb_json_get_str(S(d), "error.lo", buf, sizeof(buf), &len),
                 0);
    TB_CHECK_STR(buf, "\xef\xbf\xbd");

    TB_CHECK_INT(tb_json_get_str(S(d), "error.hihi", buf, sizeof(buf), &len),
                 0);
    TB_CHECK_STR(buf, "\xef\xbf\xbd\xef\xbf\xbd");

    TB_CHECK_INT(tb_json_get_str(S(d), "error.nul", buf, sizeof(buf), &len),
                 0);
    TB_CHECK_INT(len, 3);
    TB_CHECK(memcmp(buf, "a\0b", 4) == 0);

    TB_CHECK_INT(tb_json_get_str(S(d), "error.raw", buf, sizeof(buf), NULL),
                 0);
    TB_CHECK_STR(buf, "\xe6\x97\xa5");

    TB_CHECK_INT(tb_json_get_str(S(d), "error.n", buf, sizeof(buf), &len),
                 -1);
    TB_CHECK_INT(tb_json_get_str(S(d), "error", buf, sizeof(buf), &len), -1);
    TB_CHECK_INT(tb_json_get_str(S(d), "error.none", buf, sizeof(buf), &len),
                 -1);
}


TB_TEST(get_str_truncation)
{
    const char  *d = "{\"s\":\"abc\\u00e9def\"}";
    char         buf[8];
    size_t       len;

    memset(buf, 'Z', sizeof(buf));
    TB_CHECK_INT(tb_json_get_str(S(d), "s", buf, 5, &len), 0);
    TB_CHECK_INT(len, 8);
    TB_CHECK_STR(buf, "abc\xc3");
    TB_CHECK(buf[5] == 'Z');

    TB_CHECK_INT(tb_json_get_str(S(d), "s", buf, 1, &len), 0);
    TB_CHECK_STR(buf, "");
    TB_CHECK_INT(len, 8);

    TB_CHECK_INT(tb_json_get_str(S(d), "s", NULL, 0, &len), 0);
    TB_CHECK_INT(len, 8);

    TB_CHECK_INT(tb_json_get_str(S(d), "s", buf, sizeof(buf), &len), 0);
    TB_CHECK_STR(buf, "abc\xc3\xa9" "de");
}


TB_TEST(get_bool)
{
    const char  *d = "{\"a\":true,\"b\":{\"c\":false},\"n\":null,"
                     "\"s\":\"true\",\"i\":1}";
    int          v;

    TB_CHECK_INT(tb_json_get_bool(S(d), "a", &v), 0);
    TB_CHECK_INT(v, 1);
    TB_CHECK_INT(tb_json_get_bool(S(d), "b.c", &v), 0);
    TB_CHECK_INT(v, 0);

    v = 7;
    TB_CHECK_INT(tb_json_get_bool(S(d), "n", &v), -1);
    TB_CHECK_INT(tb_json_get_bool(S(d), "s", &v), -1);
    TB_CHECK_INT(tb_json_get_bool(S(d), "i", &v), -1);
    TB_CHECK_INT(tb_json_get_bool(S(d), "b", &v), -1);
    TB_CHECK_INT(tb_json_get_bool(S(d), "x", &v), -1);
    TB_CHECK_INT(v, 7);
}


/* tb_json_escape */


TB_TEST(escape_basic)
{
    char    buf[64];
    size_t  n;

    n = tb_json_escape(buf, sizeof(buf),
                       "a\"b\\c\nd\re\tf\x01g\x1f\x7f\xc3\xa9", 17);
    TB_CHECK_STR(buf, "a\\\"b\\\\c\\nd\\re\\tf\\u0001g\\u001f\x7f\xc3\xa9");
    TB_CHECK_INT(n, strlen(buf));

    n = tb_json_escape(buf, sizeof(buf), "a\0b", 3);
    TB_CHECK_STR(buf, "a\\u0000b");
    TB_CHECK_INT(n, 8);

    n = tb_json_escape(buf, sizeof(buf), "", 0);
    TB_CHECK_STR(buf, "");
    TB_CHECK_INT(n, 0);
}


TB_TEST(escape_truncation)
{
    char    buf[8];
    size_t  n;

    /* like snprintf: the needed length comes back, output is cut */
    memset(buf, 'Z', sizeof(buf));
    n = tb_json_escape(buf, 6, "abcdefgh", 8);
    TB_CHECK_INT(n, 8);
    TB_CHECK_STR(buf, "abcde");
    TB_CHECK(buf[6] == 'Z');

    /* an escape that does not fit is left out whole */
    n = tb_json_escape(buf, 6, "abc\x01", 4);
    TB_CHECK_INT(n, 9);
    TB_CHECK_STR(buf, "abc");
    n = tb_json_escape(buf, 5, "abc\"", 4);
    TB_CHECK_STR(buf, "abc");
    n = tb_json_escape(buf, 6, "abc\"", 4);
    TB_CHECK_STR(buf, "abc\\\"");

    memset(buf, 'Z', sizeof(buf));
    n = tb_json_escape(buf, 0, "abc", 3);
    TB_CHECK_INT(n, 3);
    TB_CHECK(buf[0] == 'Z');
    n = tb_json_escape(NULL, 0, "a\n", 2);
    TB_CHECK_INT(n, 3);
}


TB_TEST(escape_round_trip)
{
    char           s[256], esc[2048], doc[2100], back[256];
    size_t         i, n, len;

    for (i = 0; i < 255; i++) {
        s[i] = (char) (i + 1);   /* every byte but NUL, then UTF-8 */
    }

    /* 0x80..0xff alone are not UTF-8: keep the ASCII part, add some text */
    n = 127;
    memcpy(s + n, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    n += 9;

    len = tb_json_escape(esc, sizeof(esc), s, n);
    TB_CHECK(len < sizeof(esc));

    snprintf(doc, sizeof(doc), "{\"k\":\"%s\"}", esc);
    TB_CHECK_INT(tb_json_validate(S(doc)), 0);
    TB_CHECK_INT(tb_json_get_str(S(doc), "k", back, sizeof(back), &len), 0);
    TB_CHECK_INT(len, n);
    TB_CHECK(memcmp(back, s, n) == 0);
}


/* tb_usage_* */


TB_TEST(usage_cache_creation_split)
{
    tb_usage_t  u;

    tb_usage_init(&u);
    TB_CHECK_INT(u.cache_creation_1h_input_tokens, -1);

    /* the 1-hour part of the writes, as the API reports it */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"input_tokens\":5,"
        "\"cache_creation_input_tokens\":1000,"
        "\"cache_creation\":{\"ephemeral_5m_input_tokens\":600,"
        "\"ephemeral_1h_input_tokens\":400},\"output_tokens\":7}}"),
        "usage"), 0);
    TB_CHECK_INT(u.cache_creation_input_tokens, 1000);
    TB_CHECK_INT(u.cache_creation_1h_input_tokens, 400);
    TB_CHECK_INT(u.output_tokens, 7);

    /* an escaped key, whitespace; a later answer without it keeps it */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"cache_creation\" : "
        "{ \"ephemeral_1h_input_tok\\u0065ns\" : 30 } }}"), "usage"), 0);
    TB_CHECK_INT(u.cache_creation_1h_input_tokens, 30);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":8}}"),
                                "usage"), 0);
    TB_CHECK_INT(u.cache_creation_1h_input_tokens, 30);

    /* what is not a count leaves it; a cut object is refused whole */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"cache_creation\":"
        "{\"ephemeral_1h_input_tokens\":\"9\",\"x\":[1,{}]}}}"), "usage"),
        0);
    TB_CHECK_INT(u.cache_creation_1h_input_tokens, 30);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"cache_creation\":"
        "{\"ephemeral_1h_input_tokens\":9"), "usage"), -1);
    TB_CHECK_INT(u.cache_creation_1h_input_tokens, 30);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"cache_creation\":7}}"),
                                "usage"), 0);
    TB_CHECK_INT(u.cache_creation_1h_input_tokens, 30);
}


TB_TEST(usage_merge)
{
    tb_usage_t  u;

    tb_usage_init(&u);
    TB_CHECK_INT(u.input_tokens, -1);
    TB_CHECK_INT(u.output_tokens, -1);
    TB_CHECK_INT(u.cache_creation_input_tokens, -1);
    TB_CHECK_INT(u.cache_read_input_tokens, -1);

    TB_CHECK_INT(tb_usage_merge(&u, S("{\"message\":{\"usage\":{"
        "\"input_tokens\":25,\"cache_creation_input_tokens\":3,"
        "\"cache_read_input_tokens\":4,\"output_tokens\":1}}}"),
        "message.usage"), 0);
    TB_CHECK_INT(u.input_tokens, 25);
    TB_CHECK_INT(u.output_tokens, 1);
    TB_CHECK_INT(u.cache_creation_input_tokens, 3);
    TB_CHECK_INT(u.cache_read_input_tokens, 4);

    /* only what is present and an integer is overwritten */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":15,"
        "\"input_tokens\":null,\"cache_read_input_tokens\":1.5,"
        "\"server_tool_use\":{\"input_tokens\":99},"
        "\"cache_creation_input_tokens\":\"7\"}}"), "usage"), 0);
    TB_CHECK_INT(u.input_tokens, 25);
    TB_CHECK_INT(u.output_tokens, 15);
    TB_CHECK_INT(u.cache_creation_input_tokens, 3);
    TB_CHECK_INT(u.cache_read_input_tokens, 4);

    /* a string whose closing quote follows whole 8-byte words with fewer
     * than 8 bytes left: the quote is read, not stepped over */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":3,"
        "\"x\":\"abcdefgh\"}}"), "usage"), 0);
    TB_CHECK_INT(u.output_tokens, 3);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"abcdefghijklmnop\":6,"
        "\"output_tokens\":4}}"), "usage"), 0);
    TB_CHECK_INT(u.output_tokens, 4);

    /* keys with escapes: decoded, or ended by a quote no backslash escapes */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tok\\u0065ns\":9,"
        "\"a\\\"b\":1}}"), "usage"), 0);
    TB_CHECK_INT(u.output_tokens, 9);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"a\\\"\":1,"
        "\"output_tokens\":10}}"), "usage"), 0);
    TB_CHECK_INT(u.output_tokens, 10);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":2e1}}"),
                                "usage"), 0);
    TB_CHECK_INT(u.output_tokens, 10);

    /* 18 digits read as they are scanned, more checked for overflow: a
     * value past int64 is no counter, the object still is one */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":"
        "123456789012345678}}"), "usage"), 0);
    TB_CHECK(u.output_tokens == 123456789012345678LL);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":"
        "9444444444444444444444444444}}"), "usage"), 0);
    TB_CHECK(u.output_tokens == 123456789012345678LL);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":"
        "1234567890123456789}}"), "usage"), 0);
    TB_CHECK(u.output_tokens == 1234567890123456789LL);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":10}}"),
                                "usage"), 0);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":15,"
        "\"input_tokens\":25}}"), "usage"), 0);

    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{}}"), "usage"), 0);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":null}"), "usage"), -1);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":[1]}"), "usage"), -1);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"x\":{}}"), "usage"), -1);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":1"),
                                "usage"), -1);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":"
                                      "99999999999999999999,"
                                      "\"output_tokens\":16}}"), "usage"), 0);
    TB_CHECK_INT(u.output_tokens, 16);
    TB_CHECK_INT(u.input_tokens, 25);

    /* negative counts are not counts */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"input_tokens\":-1,"
                                      "\"output_tokens\":-0}}"), "usage"), 0);
    TB_CHECK_INT(u.input_tokens, 25);
    TB_CHECK_INT(u.output_tokens, 16);

    /* an object that is not whole changes nothing, wherever it breaks */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":7,"
                                      "\"cache_creation\":{\"a\":1}"),
                                "usage"), -1);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":7,}}"),
                                "usage"), -1);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\":7 "
                                      "\"input_tokens\":8}}"), "usage"), -1);
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output_tokens\" 7}}"),
                                "usage"), -1);
    TB_CHECK_INT(u.output_tokens, 16);

    /* nested objects and strings are skipped, braces in them too */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"service_tier\":\"{\","
                                      "\"cache_creation\":{\"ephemeral_5m"
                                      "_input_tokens\":3},\"output_tokens\""
                                      " : 17 }}"), "usage"), 0);
    TB_CHECK_INT(u.output_tokens, 17);

    /* an escaped key is read decoded */
    TB_CHECK_INT(tb_usage_merge(&u, S("{\"usage\":{\"output\\u005ftokens\""
                                      ":18}}"), "usage"), 0);
    TB_CHECK_INT(u.output_tokens, 18);
}


TB_TEST(usage_of_a_message)
{
    tb_usage_t  u;

    /* only the root's usage counts, not one a tool's input carries */
    tb_usage_init(&u);
    TB_CHECK_INT(tb_usage_message(&u, S("{\"type\":\"message\",\"content\":"
        "[{\"type\":\"tool_use\",\"input\":{\"usage\":{\"input_tokens\""
        ":1,\"output_tokens\":1}}}],\"usage\":{\"input_tokens\":250,"
        "\"output_tokens\":30}}")), 0);
    TB_CHECK_INT(u.input_tokens, 250);
    TB_CHECK_INT(u.output_tokens, 30);
    TB_CHECK_INT(u.cache_read_input_tokens, -1);

    /* a document that is not JSON reports nothing, and says so */
    tb_usage_init(&u);
    TB_CHECK_INT(tb_usage_message(&u, S("{\"usage\":{\"input_tokens\":5}"
                                        "not json")), -1);
    TB_CHECK_INT(u.input_tokens, -1);
    TB_CHECK_INT(tb_usage_message(&u, S("{\"usage\":{\"input_tokens\":5")),
                 -1);
    TB_CHECK_INT(u.input_tokens, -1);

    /* no usage: valid, nothing read */
    TB_CHECK_INT(tb_usage_message(&u, S("{\"type\":\"message\"}")), 0);
    TB_CHECK_INT(u.input_tokens, -1);
}


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}


static void
throughput(const char *what, const char *text, size_t size)
{
    char    *b, *p;
    size_t   n, tl, i;
    double   t0, t, best;

    b = malloc(size + 65536);
    p = b;
    tl = strlen(text);

    p += sprintf(p, "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":8192,"
                 "\"stream\":true,\"system\":\"You are a coding agent.\","
                 "\"messages\":[");

    for (n = 0; (size_t) (p - b) < size - 40000; n++) {
        p += sprintf(p, "%s{\"role\":\"%s\",\"content\":[{\"type\":\"text\","
                     "\"text\":\"", n ? "," : "", n % 2 ? "assistant" : "user");

        for (i = 0; i < 32 * 1024 / tl; i++) {
            memcpy(p, text, tl);
            p += tl;
        }

        p += sprintf(p, "\"}]}");
    }

    p += sprintf(p, "]}");
    n = (size_t) (p - b);

    best = 1e9;

    for (i = 0; i < 10; i++) {
        t0 = now();

        if (tb_scan_body((unsigned char *) b, n, &body, err, sizeof(err))
            != 0)
        {
            TB_FAIL_AT("scan failed: %s", err);
            break;
        }

        t = now() - t0;
        best = t < best ? t : best;
    }

    printf("# tb_scan_body throughput (%s): %.0f MB/s on a %.1f MB body\n",
           what, (double) n / best / 1e6, (double) n / 1e6);

    free(b);
}


TB_TEST(scan_throughput)
{
    throughput("ASCII text, an escape every ~100 bytes",
               "The quick brown fox jumps over the lazy dog; "
               "def main(argv):\\n    return run(argv[1:])\\n  "
               "# \\\"quoted\\\"\\t", 8 * 1024 * 1024);

    throughput("mixed UTF-8 text",
               "Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e text "
               "\xf0\x9f\x98\x80 and ASCII padding to be realistic. ",
               8 * 1024 * 1024);
}


int
main(void)
{
    TB_RUN(body_typical);
    TB_RUN(body_edit);
    TB_RUN(body_system_blocks);
    TB_RUN(body_spans_exact);
    TB_RUN(body_unicode_and_escapes);
    TB_RUN(body_breakpoints);
    TB_RUN(body_nested_model_ignored);
    TB_RUN(body_model_escaped_key);
    TB_RUN(body_max_tokens);
    TB_RUN(body_stream);
    TB_RUN(body_model_type);
    TB_RUN(body_model_length);
    TB_RUN(body_duplicate_keys);
    TB_RUN(body_not_object);

    TB_RUN(invalid_trailing_comma);
    TB_RUN(invalid_numbers);
    TB_RUN(invalid_escapes);
    TB_RUN(invalid_control_chars);
    TB_RUN(invalid_unterminated);
    TB_RUN(invalid_trailing_garbage);
    TB_RUN(invalid_empty);
    TB_RUN(invalid_literals_and_syntax);
    TB_RUN(invalid_utf8);
    TB_RUN(invalid_depth);
    TB_RUN(string_scan_positions);
    TB_RUN(error_offsets);

    TB_RUN(validate_roots);
    TB_RUN(get_int);
    TB_RUN(get_paths_edge);
    TB_RUN(get_str);
    TB_RUN(get_str_truncation);
    TB_RUN(get_bool);

    TB_RUN(escape_basic);
    TB_RUN(escape_truncation);
    TB_RUN(escape_round_trip);

    TB_RUN(usage_merge);
    TB_RUN(usage_cache_creation_split);
    TB_RUN(usage_of_a_message);


    TB_RUN(scan_throughput);

    return tb_test_done();
}
