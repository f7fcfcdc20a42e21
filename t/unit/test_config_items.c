/*
 * Unit tests of the YAML configuration loader (src/core/tb_config.c): the
 * accounts (types, URLs, credentials, headers, replenishment), the keys,
 * and an account's spec as the admin API sends it.
 */

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "tb_config.h"
#include "tb_router.h"
#include "tb_ratelimit.h"
#include "tb_test.h"
#include "tb_config_test.h"


TB_TEST(test_replenishment)
{
    tb_config_t  *cf;

    cf = load("accounts:\n"
              "  - {id: a, api_key: x}\n"
              "  - {id: b, api_key: y, replenishment: token_bucket}\n"
              "  - {id: c, api_key: z, replenishment: fixed_window}\n"
              "  - {id: d, api_key: w, replenishment: auto}\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->accounts[0].replenishment, TB_REFILL_AUTO);
        TB_CHECK_INT(cf->accounts[1].replenishment, TB_REFILL_BUCKET);
        TB_CHECK_INT(cf->accounts[2].replenishment, TB_REFILL_FIXED);
        TB_CHECK_INT(cf->accounts[3].replenishment, TB_REFILL_AUTO);
    }

    tb_config_free(cf);

    EXPECT_ERROR("accounts:\n  - {id: a, api_key: x, replenishment: daily}\n",
                 "replenishment");
}


TB_TEST(test_duplicate_account_id)
{
    EXPECT_ERROR("accounts:\n"
                 "  - id: a1\n    api_key: x\n"
                 "  - id: b2\n    api_key: y\n"
                 "  - id: a1\n    api_key: z\n",
                 "test.yaml:6: account id \"a1\" is used twice "
                 "(lines 2 and 6)");
}


TB_TEST(test_account_id_rules)
{
    EXPECT_ERROR("accounts:\n  - api_key: x\n",
                 "test.yaml:2: accounts[0]: id is required");
    EXPECT_ERROR("accounts:\n  - id: -bad\n    api_key: x\n",
                 "id \"-bad\" is not valid");
    EXPECT_ERROR("accounts:\n  - id: has space\n    api_key: x\n",
                 "is not valid");
    EXPECT_ERROR("accounts:\n  - id: a0123456789012345678901234567890123456789"
                 "0123456789012345678901234\n    api_key: x\n",
                 "is not valid");
    EXPECT_ERROR("accounts:\n  - just-a-string\n",
                 "accounts[0]: expected a mapping with at least an id, "
                 "got a string");
}


TB_TEST(test_anthropic_api_needs_api_key)
{
    EXPECT_ERROR("accounts:\n  - id: main\n    type: anthropic_api\n",
                 "test.yaml:2: account main: type anthropic_api needs "
                 "api_key");

    /* the default type is anthropic_api too, and "" is not a key */
    EXPECT_ERROR("accounts:\n  - id: main\n    api_key: ${EMPTY}\n",
                 "account main: type anthropic_api needs api_key");
}


TB_TEST(test_pool_names_unknown_account)
{
    EXPECT_ERROR("keys:\n"
                 "  - key: k0\n    name: ops\n"
                 "  - key: k1\n    name: tenant\n    pool: [a1, acct-9]\n"
                 ACCOUNT_OK,
                 "test.yaml:4: keys[1] (name tenant): pool names unknown "
                 "account acct-9");

    EXPECT_ERROR("keys:\n  - key: k1\n    pool: [x]\n",
                 "keys[0] (name default): pool names unknown account x");
}


TB_TEST(test_keys_rules)
{
    tb_config_t  *cf;

    EXPECT_ERROR("keys:\n  - name: nokey\n",
                 "test.yaml:2: keys[0] (name nokey): key is required");
    EXPECT_ERROR("keys:\n  - key: ''\n", "key is required");
    EXPECT_ERROR("keys:\n  - key: k1\n  - key: k2\n",
                 "test.yaml:3: keys[1]: name \"default\" is already used by "
                 "keys[0] at line 2");
    EXPECT_ERROR("keys:\n  - key: k1\n    priority: urgent\n",
                 "keys[0].priority: expected one of interactive, batch");

    cf = load("keys:\n  - key: k1\n    priority: background\n    name: a\n"
              "  - key: k2\n    priority: batch\n    name: b\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        /* as the admin API reads it */
        TB_CHECK_INT(cf->keys[0].priority, TB_PRIORITY_BATCH);
        TB_CHECK_INT(cf->keys[1].priority, TB_PRIORITY_BATCH);
        TB_CHECK_INT(cf->keys[1].line, 5);
    }

    tb_config_free(cf);
}


TB_TEST(test_credentials_never_in_messages)
{
    static const char  *secret = "bir_super_secret_value_42";

    EXPECT_ERROR("keys:\n"
                 "  - key: bir_super_secret_value_42\n    name: first\n"
                 "  - key: bir_super_secret_value_42\n    name: second\n",
                 "test.yaml:4: keys[1] (name second) repeats the key of "
                 "keys[0] (name first) at line 2");
    TB_CHECK(strstr(err, secret) == NULL);

    /* a name given twice: the later one named, at its line */
    EXPECT_ERROR("keys:\n"
                 "  - key: bir_a\n    name: same\n"
                 "  - key: bir_b\n    name: other\n"
                 "  - key: bir_c\n    name: same\n",
                 "test.yaml:6: keys[2]: name \"same\" is already used by "
                 "keys[0] at line 2: names must be unique");

    /* nor an api_key, whatever goes wrong next to it */
    EXPECT_ERROR("accounts:\n  - id: a1\n    api_key: sk-very-secret\n"
                 "    base_url: ftp://sk-very-secret@host\n",
                 "accounts[0].base_url");
    TB_CHECK(strstr(err, "sk-very-secret") == NULL);

    EXPECT_ERROR("accounts:\n  - id: a1\n    api_key: sk-very-secret\n"
                 "    base_url: https://u:sk-very-secret@host/\n",
                 "credentials in the URL");
    TB_CHECK(strstr(err, "sk-very-secret") == NULL);

    EXPECT_ERROR("accounts:\n  - id: a1\n    api_key: sk-very-secret\n"
                 "    headers: {X-Token: \"sk-very-secret\\r\\nX-Evil: 1\"}\n",
                 "control character");
    TB_CHECK(strstr(err, "sk-very-secret") == NULL);
}


TB_TEST(test_base_url_parsing)
{
    tb_config_t              *cf;
    const tb_account_conf_t  *a;

    cf = load("accounts:\n"
              "  - id: plain\n    api_key: k\n"
              "    base_url: http://mock.local:8080\n"
              "  - id: tls\n    api_key: k\n"
              "    base_url: HTTPS://proxy.example.com\n"
              "  - id: v6\n    api_key: k\n"
              "    base_url: http://[::1]:9000/\n"
              "  - id: prefix\n    api_key: k\n"
              "    base_url: https://gw.example.com:8443/anthropic/v1/\n"
              "  - id: bare6\n    api_key: k\n"
              "    base_url: https://[2001:db8::1]\n");
    TB_CHECK(cf != NULL);
    TB_CHECK_STR(err, "");

    if (cf == NULL) {
        return;
    }

    a = tb_config_account(cf, "plain");
    TB_CHECK(a != NULL);

    if (a) {
        TB_CHECK_STR(a->base_url, "http://mock.local:8080");
        TB_CHECK_INT(a->tls, 0);
        TB_CHECK_STR(a->host, "mock.local");
        TB_CHECK_INT(a->port, 8080);
        TB_CHECK_STR(a->path_prefix, "");
    }

    a = tb_config_account(cf, "tls");

    if (a) {
        TB_CHECK_INT(a->tls, 1);
        TB_CHECK_STR(a->host, "proxy.example.com");
        TB_CHECK_INT(a->port, 443);
    }

    a = tb_config_account(cf, "v6");

    if (a) {
        TB_CHECK_INT(a->tls, 0);
        TB_CHECK_STR(a->host, "::1");
        TB_CHECK_INT(a->port, 9000);
        TB_CHECK_STR(a->path_prefix, "");
    }

    a = tb_config_account(cf, "prefix");

    if (a) {
        TB_CHECK_STR(a->host, "gw.example.com");
        TB_CHECK_INT(a->port, 8443);
        TB_CHECK_STR(a->path_prefix, "/anthropic/v1");
    }

    a = tb_config_account(cf, "bare6");

    if (a) {
        TB_CHECK_STR(a->host, "2001:db8::1");
        TB_CHECK_INT(a->port, 443);
    }

    tb_config_free(cf);
}


TB_TEST(test_base_url_errors)
{
#define URL_ACCOUNT  "accounts:\n  - id: a1\n    api_key: k\n    base_url: "

    EXPECT_ERROR(URL_ACCOUNT "ftp://host\n",
                 "test.yaml:4: accounts[0].base_url: the URL must start with "
                 "http:// or https://");
    EXPECT_ERROR(URL_ACCOUNT "api.anthropic.com\n", "must start with http");
    EXPECT_ERROR(URL_ACCOUNT "https://host/v1?beta=true\n",
                 "query string or fragment");
    EXPECT_ERROR(URL_ACCOUNT "https://host/#frag\n",
                 "query string or fragment");
    EXPECT_ERROR(URL_ACCOUNT "https://host:0\n", "invalid port");
    EXPECT_ERROR(URL_ACCOUNT "https://host:65536\n", "invalid port");
    EXPECT_ERROR(URL_ACCOUNT "'https://host:'\n", "invalid port");
    EXPECT_ERROR(URL_ACCOUNT "https://host:80a\n", "invalid port");
    EXPECT_ERROR(URL_ACCOUNT "https://\n", "no host");
    EXPECT_ERROR(URL_ACCOUNT "https://::1/\n", "in brackets");
    EXPECT_ERROR(URL_ACCOUNT "https://[::1/\n", "closing");
    EXPECT_ERROR(URL_ACCOUNT "https://[zz::1]/\n", "invalid IPv6");
    EXPECT_ERROR(URL_ACCOUNT "https://[::1]x/\n", "after the IPv6");
    EXPECT_ERROR(URL_ACCOUNT "\"https://ho st/\"\n", "space");
    EXPECT_ERROR(URL_ACCOUNT "https://ho%st/\n", "host name");

#undef URL_ACCOUNT
}


/* an environment with AWS's variables and a shared credentials file */
static const char  *aws_env[16];

static const char *
aws_getenv(const char *name)
{
    size_t  i, n;

    n = strlen(name);

    for (i = 0; aws_env[i]; i++) {
        if (strncmp(aws_env[i], name, n) == 0 && aws_env[i][n] == '=') {
            return aws_env[i] + n + 1;
        }
    }

    return NULL;
}


static tb_config_t *
aws_load(const char *yaml)
{
    err[0] = '\0';

    return tb_config_load_buffer("test.yaml", yaml, strlen(yaml),
                                 aws_getenv, err, sizeof(err));
}


TB_TEST(test_bedrock_credentials)
{
    FILE                     *f;
    char                      path[64], var[96];
    tb_config_t              *cf;
    const tb_account_conf_t  *a;

    static const char  yaml[] = "accounts:\n  - id: br\n    type: bedrock\n";

    /* the file's own win, whole */
    aws_env[0] = "AWS_ACCESS_KEY_ID=AKIDENV";
    aws_env[1] = "AWS_SECRET_ACCESS_KEY=env-secret";
    aws_env[2] = NULL;

    cf = aws_load("accounts:\n  - id: br\n    type: bedrock\n"
                  "    options: {access_key_id: AKIDFILE, "
                  "secret_access_key: file-secret}\n");
    TB_CHECK(cf != NULL);
    a = cf ? tb_config_account(cf, "br") : NULL;
    TB_CHECK(a && strcmp(a->options.access_key_id, "AKIDFILE") == 0
             && strcmp(a->options.secret_access_key, "file-secret") == 0
             && a->options.session_token == NULL && a->unusable == NULL);
    tb_config_free(cf);

    /* then the environment, with its session token */
    aws_env[2] = "AWS_SESSION_TOKEN=env-token";
    aws_env[3] = NULL;
    cf = aws_load(yaml);
    a = cf ? tb_config_account(cf, "br") : NULL;
    TB_CHECK(a && strcmp(a->options.access_key_id, "AKIDENV") == 0
             && strcmp(a->options.session_token, "env-token") == 0);
    TB_CHECK(a && a->api_key == NULL);
    tb_config_free(cf);

    /* a key id without its secret in the environment is none */
    aws_env[1] = "AWS_BEARER_TOKEN_BEDROCK=bedrock-api-key";
    aws_env[2] = NULL;
    cf = aws_load(yaml);
    a = cf ? tb_config_account(cf, "br") : NULL;
    TB_CHECK(a && a->options.access_key_id == NULL
             && strcmp(a->api_key, "bedrock-api-key") == 0);
    tb_config_free(cf);

    /* the shared credentials file: AWS_PROFILE, or options.profile */
    snprintf(path, sizeof(path), "/tmp/tb-awscred-%d", (int) getpid());
    f = fopen(path, "w");
    TB_CHECK(f != NULL);
    if (f == NULL) {
        return;
    }
    fputs("# a comment\n[default]\naws_access_key_id = AKIDDEF\n"
          "aws_secret_access_key=def-secret\n\n[work]\n"
          "  AWS_ACCESS_KEY_ID = AKIDWORK  \r\n; another\n"
          "aws_secret_access_key = work-secret\naws_session_token = wt\n"
          "[half]\naws_access_key_id = AKIDHALF\n", f);
    fclose(f);

    snprintf(var, sizeof(var), "AWS_SHARED_CREDENTIALS_FILE=%s", path);
    aws_env[0] = var;
    aws_env[1] = NULL;
    cf = aws_load(yaml);
    a = cf ? tb_config_account(cf, "br") : NULL;
    TB_CHECK(a && strcmp(a->options.access_key_id, "AKIDDEF") == 0
             && strcmp(a->options.secret_access_key, "def-secret") == 0);
    tb_config_free(cf);

    aws_env[1] = "AWS_PROFILE=work";
    aws_env[2] = NULL;
    cf = aws_load(yaml);
    a = cf ? tb_config_account(cf, "br") : NULL;
    TB_CHECK(a && strcmp(a->options.access_key_id, "AKIDWORK") == 0
             && strcmp(a->options.session_token, "wt") == 0);
    tb_config_free(cf);

    cf = aws_load("accounts:\n  - id: br\n    type: bedrock\n"
                  "    options: {profile: half}\n");
    a = cf ? tb_config_account(cf, "br") : NULL;
    TB_CHECK(a && a->options.access_key_id == NULL && a->unusable != NULL);
    TB_CHECK(cf && cf->warnings.n == 1);
    if (cf && cf->warnings.n == 1) {
        TB_CHECK_CONTAINS(cf->warnings.items[0], "profile \"half\" has no "
                          "aws_access_key_id and aws_secret_access_key");
    }
    tb_config_free(cf);

    unlink(path);

    /* nothing anywhere: it loads, and takes no request */
    aws_env[0] = NULL;
    cf = aws_load(yaml);
    a = cf ? tb_config_account(cf, "br") : NULL;
    TB_CHECK(a && a->unusable != NULL);
    tb_config_free(cf);

    /* what is a mistake stops the load */
    EXPECT_ERROR("accounts:\n  - id: b\n    type: bedrock\n"
                 "    options: {access_key_id: AK}\n",
                 "account b: options.access_key_id needs "
                 "options.secret_access_key");
    EXPECT_ERROR("accounts:\n  - id: b\n    type: bedrock\n"
                 "    options: {session_token: t, api_key: x}\n",
                 "unknown key");
    EXPECT_ERROR("accounts:\n  - id: b\n    type: bedrock\n"
                 "    api_key: k\n    options: {session_token: t}\n",
                 "account b: options.session_token needs "
                 "options.access_key_id");
}


TB_TEST(test_default_base_urls)
{
    tb_config_t              *cf;
    const tb_account_conf_t  *a;

    cf = load("accounts:\n"
              "  - id: br\n    type: bedrock\n"
              "  - id: br-eu\n    type: bedrock\n"
              "    options: {region: '${REGION}'}\n"
              "  - id: vx\n    type: vertex\n"
              "  - id: vx-global\n    type: vertex\n"
              "    options: {region: global}\n"
              "  - id: oa\n    type: oauth\n    api_key: sk-ant-oat01-x\n");
    TB_CHECK(cf != NULL);
    TB_CHECK_STR(err, "");

    if (cf == NULL) {
        return;
    }

    a = tb_config_account(cf, "br");
    TB_CHECK(a != NULL && strcmp(a->host,
                                 "bedrock-runtime.us-east-1.amazonaws.com")
                          == 0);

    a = tb_config_account(cf, "br-eu");
    TB_CHECK(a != NULL && strcmp(a->host,
                                 "bedrock-runtime.eu-west-1.amazonaws.com")
                          == 0);

    a = tb_config_account(cf, "vx");
    TB_CHECK(a != NULL && strcmp(a->host,
                                 "us-central1-aiplatform.googleapis.com")
                          == 0);

    a = tb_config_account(cf, "vx-global");
    TB_CHECK(a != NULL && strcmp(a->host, "aiplatform.googleapis.com") == 0);

    a = tb_config_account(cf, "oa");
    TB_CHECK(a != NULL);

    if (a) {
        TB_CHECK_STR(a->host, "api.anthropic.com");
        TB_CHECK_INT(a->tls, 1);
        TB_CHECK_INT(a->port, 443);
        TB_CHECK_STR(a->base_url, "");
    }

    tb_config_free(cf);

    EXPECT_ERROR("accounts:\n  - id: b\n    type: bedrock\n"
                 "    options: {region: \"evil.com/x\"}\n",
                 "options.region \"evil.com/x\" is not a valid region");
}


TB_TEST(test_account_type_alias_and_names)
{
    tb_config_t  *cf;

    cf = load("accounts:\n  - id: a\n    type: anthropic\n    api_key: k\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->accounts[0].type, TB_ACCOUNT_ANTHROPIC_API);
        TB_CHECK_STR(tb_account_type_name(cf->accounts[0].type),
                     "anthropic_api");
    }

    tb_config_free(cf);

    TB_CHECK_STR(tb_account_type_name(TB_ACCOUNT_BEDROCK), "bedrock");
    TB_CHECK_STR(tb_account_type_name(TB_ACCOUNT_VERTEX), "vertex");
    TB_CHECK_STR(tb_account_type_name(TB_ACCOUNT_OAUTH), "oauth");

    EXPECT_ERROR("accounts:\n  - id: a\n    type: openai\n",
                 "accounts[0].type: expected one of anthropic_api, bedrock, "
                 "vertex, oauth");
}


TB_TEST(test_oauth_forces_unobservable)
{
    tb_config_t  *cf;

    cf = load("accounts:\n  - id: sub\n    type: oauth\n"
              "    api_key: sk-ant-oat01-x\n    observable_limits: true\n"
              "  - id: api\n    api_key: k\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->accounts[0].type, TB_ACCOUNT_OAUTH);
        TB_CHECK_INT(cf->accounts[0].observable_limits, 0);
        TB_CHECK_INT(cf->accounts[1].observable_limits, 1);
    }

    tb_config_free(cf);
}


TB_TEST(test_oauth_token_sources)
{
    FILE         *f;
    char          path[64];
    tb_config_t  *cf;

    cf = load("accounts:\n  - id: sub\n    type: oauth\n"
              "    options: {token_env: CLAUDE_TOKEN}\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_STR(cf->accounts[0].api_key, "sk-ant-oat01-from-env");
        TB_CHECK_STR(cf->accounts[0].token_source, "options.token_env");
        TB_CHECK_STR(cf->accounts[0].host, "api.anthropic.com");
    }

    tb_config_free(cf);

    /* this machine's Claude Code login file */
    snprintf(path, sizeof(path), "/tmp/tb-test-creds-%d.json", (int) getpid());
    f = fopen(path, "w");
    TB_CHECK(f != NULL);

    if (f) {
        fputs("{\"claudeAiOauth\": {\"accessToken\": \"sk-ant-oat01-file\","
              " \"refreshToken\": \"r\", \"expiresAt\": 1785518400000,"
              " \"scopes\": [\"user:inference\"]}}", f);
        fclose(f);
    }

    {
    char  yaml[256];

    snprintf(yaml, sizeof(yaml), "accounts:\n  - id: sub\n    type: oauth\n"
             "    options: {credentials_path: '%s'}\n", path);
    cf = load(yaml);
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_STR(cf->accounts[0].api_key, "sk-ant-oat01-file");
        TB_CHECK_INT(cf->accounts[0].token_expires_ms, 1785518400000LL);
        TB_CHECK_STR(cf->accounts[0].token_source,
                     "options.credentials_path");
    }

    tb_config_free(cf);

    /* a token a header cannot carry: never shown */
    f = fopen(path, "w");

    if (f) {
        fputs("{\"claudeAiOauth\": {\"accessToken\": \"tok\\r\\nx-evil: "
              "1\"}}", f);
        fclose(f);
    }

    EXPECT_ERROR(yaml, "credentials_path");
    TB_CHECK(strstr(err, "is not a token") != NULL);
    TB_CHECK(strstr(err, "evil") == NULL);

    f = fopen(path, "w");

    if (f) {
        fputs("{\"claudeAiOauth\": {}}", f);
        fclose(f);
    }

    EXPECT_ERROR(yaml, "has no claudeAiOauth.accessToken");
    unlink(path);
    EXPECT_ERROR(yaml, "cannot be opened: No such file or directory");
    }

    EXPECT_ERROR("accounts:\n  - id: sub\n    type: oauth\n",
                 "account sub: type oauth needs one token source");
    EXPECT_ERROR("accounts:\n  - id: sub\n    type: oauth\n    api_key: a\n"
                 "    options: {access_token: b}\n",
                 "not more than one");
    EXPECT_ERROR("accounts:\n  - id: sub\n    type: oauth\n"
                 "    options: {token_env: NOPE}\n",
                 "options.token_env names NOPE, which is not set");
    EXPECT_ERROR("accounts:\n  - id: sub\n    type: oauth\n"
                 "    options: {token_env: BAD_TOKEN}\n",
                 "the token of options.token_env is not a token");
    EXPECT_ERROR("accounts:\n  - id: s1\n    type: oauth\n    api_key: a\n"
                 "  - id: s2\n    type: oauth\n    api_key: b\n",
                 "test.yaml:5: account s2: a second account of type oauth: "
                 "Anthropic's terms do not permit using a Claude "
                 "subscription's tokens in other tools or pooling them");
}


TB_TEST(test_headers)
{
    tb_config_t  *cf;

#define HDR_ACCOUNT  "accounts:\n  - id: a1\n    api_key: k\n    headers:\n"

    cf = load(HDR_ACCOUNT "      anthropic-beta: x\n"
              "      X-Trace: \"a\\tb\"\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->accounts[0].headers.n, 2);
    }

    tb_config_free(cf);

    EXPECT_ERROR(HDR_ACCOUNT "      Authorization: Bearer x\n",
                 "test.yaml:5: accounts[0].headers: header \"Authorization\" "
                 "cannot be set here: it carries the account's credential");
    EXPECT_ERROR(HDR_ACCOUNT "      x-api-key: x\n", "use api_key");
    EXPECT_ERROR(HDR_ACCOUNT "      Host: x\n", "header \"Host\" cannot be "
                 "set here");
    EXPECT_ERROR(HDR_ACCOUNT "      Content-Length: 5\n", "cannot be set");
    EXPECT_ERROR(HDR_ACCOUNT "      Transfer-Encoding: chunked\n",
                 "cannot be set");
    EXPECT_ERROR(HDR_ACCOUNT "      Connection: close\n", "cannot be set");
    EXPECT_ERROR(HDR_ACCOUNT "      \"Bad Name\": x\n",
                 "\"Bad Name\" is not a valid header name");
    EXPECT_ERROR(HDR_ACCOUNT "      X-A: 1\n      x-a: 2\n", "given twice");
    EXPECT_ERROR(HDR_ACCOUNT "      X-A: [1]\n",
                 "accounts[0].headers.X-A: expected a string, got a list");
    EXPECT_ERROR("accounts:\n  - id: a1\n    api_key: k\n    headers: [a]\n",
                 "accounts[0].headers: expected a mapping of names to "
                 "strings, got a list");

#undef HDR_ACCOUNT
}


TB_TEST(test_account_spec)
{
    size_t        i;
    const char   *j;
    tb_config_t  *cf;
    char          e[TB_CONFIG_ERRLEN];

    static const struct {
        const char  *json;
        const char  *says;
    } bad[] = {
        { "[1]", "must be a JSON object" },
        { "", "must be a JSON object" },
        { "{\"id\": \"a b\", \"api_key\": \"k\"}", "is not valid" },
        { "{\"id\": \"a\", \"api_key\": \"k\", \"colour\": 1}",
          "unknown key \"colour\"" },
        { "{\"id\": \"a\"}", "needs api_key" },
        { "{\"id\": \"a\", \"api_key\": \"k\\r\\nX-Evil: 1\"}",
          "api_key has a line break" },
        { "{\"id\": \"a\", \"api_key\": \"k\", \"headers\": "
          "{\"x-a\": \"1\\n2\"}}", "control character" },
        { "{\"id\": \"a\", \"api_key\": \"${HOME}\"}",
          "environment variable HOME is not set" },
        { "{\"id\": \"a\", \"api_key\": \"k\", \"max_concurrency\": \"lots\"}",
          "max_concurrency" },
        { "{\"id\": \"a\", \"api_key\": \"k\"}, {\"id\": \"b\"}", "" },
    };

    j = "{\"id\": \"acct-9\", \"api_key\": \"sk-ant-xyz\", \"base_url\": "
        "\"http://127.0.0.1:9999\", \"priority\": 2, \"models\": "
        "[\"claude-*\"]}";
    cf = tb_config_account_spec(j, strlen(j), e, sizeof(e));
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->naccounts, 1);
        TB_CHECK_STR(cf->accounts[0].id, "acct-9");
        TB_CHECK_STR(cf->accounts[0].api_key, "sk-ant-xyz");
        TB_CHECK_INT(cf->accounts[0].port, 9999);
        TB_CHECK_DBL(cf->accounts[0].priority, 2, 1e-9);
        tb_config_free(cf);
    }

    /* a default is taken, the environment never read */
    j = "{\"id\": \"a\", \"api_key\": \"${HOME:-fallback}\"}";
    cf = tb_config_account_spec(j, strlen(j), e, sizeof(e));
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_STR(cf->accounts[0].api_key, "fallback");
        tb_config_free(cf);
    }

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e[0] = '\0';
        cf = tb_config_account_spec(bad[i].json, strlen(bad[i].json), e,
                                    sizeof(e));
        TB_CHECK(cf == NULL);

        if (cf) {
            tb_config_free(cf);
        }

        TB_CHECK_CONTAINS(e, bad[i].says);
    }
}


int
main(void)
{
    TB_RUN(test_replenishment);
    TB_RUN(test_duplicate_account_id);
    TB_RUN(test_account_id_rules);
    TB_RUN(test_anthropic_api_needs_api_key);
    TB_RUN(test_pool_names_unknown_account);
    TB_RUN(test_keys_rules);
    TB_RUN(test_credentials_never_in_messages);
    TB_RUN(test_base_url_parsing);
    TB_RUN(test_base_url_errors);
    TB_RUN(test_bedrock_credentials);
    TB_RUN(test_default_base_urls);
    TB_RUN(test_account_type_alias_and_names);
    TB_RUN(test_oauth_forces_unobservable);
    TB_RUN(test_oauth_token_sources);
    TB_RUN(test_headers);
    TB_RUN(test_account_spec);

    return tb_test_done();
}
