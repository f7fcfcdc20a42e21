/*
 * Unit tests: the two translations for Bedrock and Vertex accounts.  The
 * body loses exactly model (and Bedrock's stream) and gains
 * anthropic_version (and Bedrock's anthropic_beta); every other member,
 * unknown ones included, comes out byte for byte.  model_map: exact, then
 * the first prefix entry, else not servable.  The platforms' errors in
 * Anthropic's words, the operator's details never in them.
 */

#include <stdlib.h>
#include <string.h>

#include "tb_test.h"
#include "tb_provider.h"
#include "tb_json.h"


static char *
translate_v(tb_account_type_e type, const char *version, const char *body,
    const char *betas)
{
    size_t   n, m, blen;
    char    *out;

    blen = betas ? strlen(betas) : 0;

    n = tb_provider_body(type, version, (const unsigned char *) body,
                         strlen(body), betas, blen, NULL, 0);
    if (n == (size_t) -1) {
        return NULL;
    }

    if (n > tb_provider_body_max(strlen(body), blen)) {
        TB_FAIL_AT("%zu bytes: more than the bound", n);
    }

    out = malloc(n + 1);
    m = tb_provider_body(type, version, (const unsigned char *) body,
                         strlen(body), betas, blen, (unsigned char *) out, n);
    TB_CHECK_INT(m, n);
    out[n] = '\0';

    if (tb_json_validate((const unsigned char *) out, n) != 0) {
        TB_FAIL_AT("not JSON: %s", out);
    }

    return out;
}


static char *
translate(tb_account_type_e type, const char *body, const char *betas)
{
    return translate_v(type, NULL, body, betas);
}


TB_TEST(bedrock_body)
{
    char  *out;

    out = translate(TB_ACCOUNT_BEDROCK,
                    "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":64,"
                    "\"stream\":true,\"messages\":[{\"role\":\"user\","
                    "\"content\":\"hi\"}],\"x_unknown\":{\"a\": [1, 2.50]},"
                    "\"system\":[{\"type\":\"text\",\"text\":\"s\","
                    "\"cache_control\":{\"type\":\"ephemeral\"}}]}", NULL);
    TB_CHECK_STR(out, "{\"anthropic_version\":\"bedrock-2023-05-31\","
                 "\"max_tokens\":64,\"messages\":[{\"role\":\"user\","
                 "\"content\":\"hi\"}],\"x_unknown\":{\"a\": [1, 2.50]},"
                 "\"system\":[{\"type\":\"text\",\"text\":\"s\","
                 "\"cache_control\":{\"type\":\"ephemeral\"}}]}");
    free(out);

    /* betas into the body; the caller's version replaced; spacing kept
     * inside members, a key escaped still known */
    out = translate(TB_ACCOUNT_BEDROCK,
                    " { \"mod\\u0065l\" : \"m\" ,\n \"anthropic_version\":"
                    "\"x\", \"max_tokens\" :\t1 } ",
                    "prompt-caching-2024-07-31, token-efficient-tools,,  "
                    "a\"b , caf\xc3\xa9,x\\y, ok ");
    TB_CHECK_STR(out, "{\"anthropic_version\":\"bedrock-2023-05-31\","
                 "\"max_tokens\" :\t1,\"anthropic_beta\":["
                 "\"prompt-caching-2024-07-31\",\"token-efficient-tools\","
                 "\"ok\"]}");
    free(out);

    /* the caller's own anthropic_beta wins over the header */
    out = translate(TB_ACCOUNT_BEDROCK,
                    "{\"anthropic_beta\":[\"x\"],\"model\":\"m\"}", "y");
    TB_CHECK_STR(out, "{\"anthropic_version\":\"bedrock-2023-05-31\","
                 "\"anthropic_beta\":[\"x\"]}");
    free(out);

    /* duplicates of model and stream all go; nothing else left */
    out = translate(TB_ACCOUNT_BEDROCK,
                    "{\"model\":\"a\",\"stream\":false,\"model\":\"b\"}", "");
    TB_CHECK_STR(out, "{\"anthropic_version\":\"bedrock-2023-05-31\"}");
    free(out);

    /* not one JSON object */
    TB_CHECK(translate(TB_ACCOUNT_BEDROCK, "[1]", NULL) == NULL);
    TB_CHECK(translate(TB_ACCOUNT_BEDROCK, "{\"a\":1", NULL) == NULL);
    TB_CHECK(translate(TB_ACCOUNT_BEDROCK, "{\"a\":1}x", NULL) == NULL);
    TB_CHECK(translate(TB_ACCOUNT_BEDROCK, "", NULL) == NULL);
}


TB_TEST(vertex_body)
{
    char  *out;

    /* stream stays (streamRawPredict reads it), betas stay headers */
    out = translate(TB_ACCOUNT_VERTEX,
                    "{\"model\":\"claude\",\"stream\":true,\"max_tokens\":9,"
                    "\"metadata\":{\"user_id\":\"u\"}}", "b1");
    TB_CHECK_STR(out, "{\"anthropic_version\":\"vertex-2023-10-16\","
                 "\"stream\":true,\"max_tokens\":9,"
                 "\"metadata\":{\"user_id\":\"u\"}}");
    free(out);

    out = translate(TB_ACCOUNT_VERTEX, "{}", NULL);
    TB_CHECK_STR(out, "{\"anthropic_version\":\"vertex-2023-10-16\"}");
    free(out);
}


TB_TEST(model_map)
{
    tb_kv_t            items[3];
    tb_account_conf_t  ac;

    memset(&ac, 0, sizeof(tb_account_conf_t));

    items[0].key = "claude-sonnet-4*";
    items[0].value = "us.anthropic.claude-sonnet-4-20250514-v1:0";
    items[1].key = "claude-sonnet-4-5";
    items[1].value = "global.anthropic.claude-sonnet-4-5-20250929-v1:0";
    items[2].key = "claude-*";
    items[2].value = "anthropic.claude-3-haiku-20240307-v1:0";
    ac.options.model_map.items = items;
    ac.options.model_map.n = 3;

    /* exact first, whatever the order */
    TB_CHECK_STR(tb_model_map(&ac, "claude-sonnet-4-5", 17),
                 "global.anthropic.claude-sonnet-4-5-20250929-v1:0");
    /* then the first prefix in file order */
    TB_CHECK_STR(tb_model_map(&ac, "claude-sonnet-4-20250514", 24),
                 "us.anthropic.claude-sonnet-4-20250514-v1:0");
    TB_CHECK_STR(tb_model_map(&ac, "claude-opus-4-1", 15),
                 "anthropic.claude-3-haiku-20240307-v1:0");
    /* no entry: not servable there */
    TB_CHECK(tb_model_map(&ac, "gpt-4o", 6) == NULL);
    TB_CHECK(tb_model_map(&ac, "claude", 6) == NULL);

    ac.options.model_map.n = 0;
    TB_CHECK(tb_model_map(&ac, "claude-sonnet-4-5", 17) == NULL);
}


TB_TEST(path_segment)
{
    char  buf[128];

    TB_CHECK_INT(tb_provider_path_segment(
                     "anthropic.claude-3-5-sonnet-20240620-v1:0", buf,
                     sizeof(buf)), 43);
    TB_CHECK_STR(buf, "anthropic.claude-3-5-sonnet-20240620-v1%3A0");

    tb_provider_path_segment("arn:aws:bedrock:us-east-1:1:inference-profile/"
                             "us.x", buf, sizeof(buf));
    TB_CHECK_STR(buf, "arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-"
                      "profile%2Fus.x");

    tb_provider_path_segment("claude-sonnet-4-5@20250929", buf, sizeof(buf));
    TB_CHECK_STR(buf, "claude-sonnet-4-5%4020250929");

    /* measuring */
    TB_CHECK_INT(tb_provider_path_segment("a b", NULL, 0), 5);
}


static void
check_error(tb_account_type_e type, int status, const char *name,
    const char *body, int want_status, const char *want_type,
    const char *want_message)
{
    char         out[1024];
    tb_perror_t  e;

    tb_provider_error(type, status, (const unsigned char *) name,
                      name ? strlen(name) : 0, (const unsigned char *) body,
                      body ? strlen(body) : 0, &e);

    TB_CHECK_INT(e.status, want_status);
    TB_CHECK_STR(e.type, want_type);

    if (want_message) {
        TB_CHECK_STR(e.message, want_message);
    }

    tb_provider_error_body(&e, out, sizeof(out));

    if (tb_json_validate((const unsigned char *) out, strlen(out)) != 0) {
        TB_FAIL_AT("not JSON: %s", out);
    }

    /* the operator's cloud account never reaches the client */
    if (strstr(out, "123456789012") || strstr(out, "arn:")) {
        TB_FAIL_AT("an account's details in %s", out);
    }
}


TB_TEST(platform_errors)
{
    /* Bedrock, by x-amzn-ErrorType (its URL after ':' dropped) */
    check_error(TB_ACCOUNT_BEDROCK, 429,
                "ThrottlingException:http://internal.amazon.com/coral/"
                "com.amazon.bedrock/", "{\"message\":\"Too many tokens\"}",
                429, "rate_limit_error",
                "the Bedrock account refused the request "
                "(ThrottlingException)");
    check_error(TB_ACCOUNT_BEDROCK, 429, "ModelNotReadyException", NULL,
                529, "overloaded_error", NULL);
    check_error(TB_ACCOUNT_BEDROCK, 503, "ServiceUnavailableException",
                "{\"message\":\"x\"}", 529, "overloaded_error", NULL);
    check_error(TB_ACCOUNT_BEDROCK, 400, "ValidationException",
                "{\"message\":\"max_tokens: Input should be a valid "
                "integer\"}", 400, "invalid_request_error",
                "max_tokens: Input should be a valid integer");
    check_error(TB_ACCOUNT_BEDROCK, 403, "AccessDeniedException",
                "{\"message\":\"User: arn:aws:iam::123456789012:user/x is "
                "not authorized\"}", 403, "permission_error",
                "the Bedrock account refused the request "
                "(AccessDeniedException)");
    check_error(TB_ACCOUNT_BEDROCK, 403, "UnrecognizedClientException",
                "{\"message\":\"The security token included in the request "
                "is invalid.\"}", 401, "authentication_error", NULL);
    check_error(TB_ACCOUNT_BEDROCK, 404, "ResourceNotFoundException", NULL,
                403, "permission_error", NULL);

    /* by the body's __type when the header is not there */
    check_error(TB_ACCOUNT_BEDROCK, 400, NULL,
                "{\"__type\":\"com.amazon.coral.validate#"
                "ValidationException\",\"message\":\"bad\"}", 400,
                "invalid_request_error", "bad");

    /* a name it does not know: its status says */
    check_error(TB_ACCOUNT_BEDROCK, 500, "SomethingNewException", NULL, 500,
                "api_error", "the Bedrock account refused the request "
                "(SomethingNewException)");
    check_error(TB_ACCOUNT_BEDROCK, 429, NULL, "garbage", 429,
                "rate_limit_error", NULL);

    /* a name that could inject: cut at its first odd byte */
    check_error(TB_ACCOUNT_BEDROCK, 500, "Bad\"Name\\x", NULL, 500,
                "api_error", "the Bedrock account refused the request "
                "(Bad)");

    /* Google's envelope */
    check_error(TB_ACCOUNT_VERTEX, 429, NULL,
                "{\"error\":{\"code\":429,\"message\":\"Quota exceeded for "
                "aiplatform.googleapis.com/online_prediction_requests_per_"
                "base_model with base model: anthropic-claude. project "
                "123456789012\",\"status\":\"RESOURCE_EXHAUSTED\"}}",
                429, "rate_limit_error",
                "the Vertex account refused the request "
                "(RESOURCE_EXHAUSTED)");
    check_error(TB_ACCOUNT_VERTEX, 404, NULL,
                "{\"error\":{\"code\":404,\"message\":\"Publisher model not "
                "found\",\"status\":\"NOT_FOUND\"}}", 403,
                "permission_error", NULL);
    check_error(TB_ACCOUNT_VERTEX, 400, NULL,
                "{\"error\":{\"code\":400,\"message\":\"bad body\","
                "\"status\":\"INVALID_ARGUMENT\"}}", 400,
                "invalid_request_error", "bad body");
    check_error(TB_ACCOUNT_VERTEX, 401, NULL,
                "{\"error\":{\"code\":401,\"status\":\"UNAUTHENTICATED\"}}",
                401, "authentication_error", NULL);
    check_error(TB_ACCOUNT_VERTEX, 503, NULL,
                "{\"error\":{\"code\":503,\"status\":\"UNAVAILABLE\"}}",
                529, "overloaded_error", NULL);

    /* Anthropic's own error, passed on by Vertex from the model: kept */
    check_error(TB_ACCOUNT_VERTEX, 529, NULL,
                "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
                "\"message\":\"Overloaded\"}}", 529, "overloaded_error",
                "Overloaded");
    check_error(TB_ACCOUNT_VERTEX, 400, NULL,
                "{\"type\":\"error\",\"error\":{\"type\":"
                "\"invalid_request_error\",\"message\":\"max_tokens: "
                "required\"}}", 400, "invalid_request_error",
                "max_tokens: required");
}


TB_TEST(error_body)
{
    char         out[2048];
    tb_perror_t  e;

    static const char  body[] = "{\"message\":\"a \\\"quoted\\\"\\nline\"}";

    tb_provider_error(TB_ACCOUNT_BEDROCK, 400,
                      (const unsigned char *) "ValidationException", 19,
                      (const unsigned char *) body, sizeof(body) - 1, &e);
    tb_provider_error_body(&e, out, sizeof(out));
    TB_CHECK_STR(out, "{\"type\":\"error\",\"error\":{\"type\":"
                 "\"invalid_request_error\",\"message\":\"a \\\"quoted\\\""
                 "\\nline\"}}");
}


/* options.anthropic_version: the account's value in place of the type's */
TB_TEST(version_option)
{
    char  *out, v64[65], v65[66];

    out = translate_v(TB_ACCOUNT_BEDROCK, "bedrock-2026-10-21",
                      "{\"model\":\"m\",\"max_tokens\":1}", NULL);
    TB_CHECK_STR(out, "{\"anthropic_version\":\"bedrock-2026-10-21\","
                 "\"max_tokens\":1}");
    free(out);

    out = translate_v(TB_ACCOUNT_VERTEX, "vertex-2026-10-21",
                      "{\"anthropic_version\":\"x\",\"max_tokens\":1}", NULL);
    TB_CHECK_STR(out, "{\"anthropic_version\":\"vertex-2026-10-21\","
                 "\"max_tokens\":1}");
    free(out);

    /* the longest value within the bound; one the loader would refuse is
     * never written into a body */
    memset(v64, 'a', 64);
    v64[64] = '\0';
    TB_CHECK(tb_provider_version_valid(v64));
    out = translate_v(TB_ACCOUNT_BEDROCK, v64, "{}", "b1,b2");
    TB_CHECK(out != NULL && strstr(out, v64) != NULL);
    free(out);

    TB_CHECK(!tb_provider_version_valid(""));
    TB_CHECK(!tb_provider_version_valid("a\"b"));
    TB_CHECK(!tb_provider_version_valid("a b"));
    TB_CHECK(!tb_provider_version_valid("a\\b"));

    memset(v65, 'a', 65);
    v65[65] = '\0';
    TB_CHECK(!tb_provider_version_valid(v65));

    out = translate_v(TB_ACCOUNT_BEDROCK, "a\"}", "{}", NULL);
    TB_CHECK_STR(out, "{\"anthropic_version\":\"bedrock-2023-05-31\"}");
    free(out);
}


int
main(void)
{
    TB_RUN(bedrock_body);
    TB_RUN(vertex_body);
    TB_RUN(version_option);
    TB_RUN(model_map);
    TB_RUN(path_segment);
    TB_RUN(platform_errors);
    TB_RUN(error_body);

    return tb_test_done();
}
