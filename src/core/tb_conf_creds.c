/*
 * The credentials of Bedrock and Vertex accounts, found at load as the
 * platforms' own SDKs find them: the file's options, the environment, AWS's
 * shared credentials file, a Google service account's key file.  Part of
 * the configuration loader (tb_config.c), which calls it once an account
 * is read.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_conf_int.h"
#include "tb_awscred.h"
#include "tb_gauth.h"
#include "tb_oauth.h"


/* a value of the environment, copied; NULL when it has none */
static int
tb_conf_env_dup(tb_conf_ctx_t *ctx, const char *name, char **to)
{
    const char  *v;

    v = ctx->getenv_fn ? ctx->getenv_fn(name) : NULL;

    if (v == NULL || v[0] == '\0') {
        return TB_CONF_OK;
    }

    *to = strdup(v);

    return *to ? TB_CONF_OK : tb_conf_nomem(ctx);
}


/* the credentials of a profile of AWS's shared credentials file */
static int
tb_conf_aws_profile(tb_conf_ctx_t *ctx, tb_account_options_t *o,
    const char *profile)
{
    int            rc;
    char           path[TB_CONF_PATHLEN];
    const char    *file, *home;
    tb_awscred_t   c;

    file = ctx->getenv_fn ? ctx->getenv_fn("AWS_SHARED_CREDENTIALS_FILE")
                          : NULL;

    if (file == NULL || file[0] == '\0') {
        home = ctx->getenv_fn ? ctx->getenv_fn("HOME") : NULL;

        if (home == NULL || home[0] == '\0') {
            return 0;
        }

        (void) snprintf(path, sizeof(path), "%s/.aws/credentials", home);
        file = path;
    }

    rc = tb_awscred_file(file, profile, &c);

    if (rc < 0) {
        return tb_conf_nomem(ctx);
    }

    if (rc == 1) {
        o->access_key_id = c.access_key_id;
        o->secret_access_key = c.secret_access_key;
        o->session_token = c.session_token;
    }

    return rc;
}


/*
 * A Bedrock account signs with an access key or sends a Bedrock API key,
 * found as the AWS SDKs find them: the file's options (access_key_id
 * and secret_access_key, or api_key), options.profile in the shared
 * credentials file, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with
 * AWS_SESSION_TOKEN), the profile AWS_PROFILE or "default", then
 * AWS_BEARER_TOKEN_BEDROCK.  One source wins whole: a key id of one is
 * never paired with a secret of another.  An account none of them gives
 * credentials loads (a file written for the reference implementation
 * still does) and takes no request, saying why.
 */
int
tb_conf_bedrock_credentials(tb_conf_ctx_t *ctx, tb_account_conf_t *a)
{
    int                    rc;
    const char            *profile;
    tb_account_options_t  *o;

    o = &a->options;

    if ((o->access_key_id == NULL) != (o->secret_access_key == NULL)) {
        return tb_conf_error(ctx, a->line, "account %s: options.%s needs "
                             "options.%s", a->id,
                             o->access_key_id ? "access_key_id"
                                              : "secret_access_key",
                             o->access_key_id ? "secret_access_key"
                                              : "access_key_id");
    }

    if (o->session_token && o->access_key_id == NULL) {
        return tb_conf_error(ctx, a->line, "account %s: options."
                             "session_token needs options.access_key_id "
                             "and options.secret_access_key", a->id);
    }

    if (a->api_key || o->access_key_id) {
        return TB_CONF_OK;
    }

    if (o->profile) {
        rc = tb_conf_aws_profile(ctx, o, o->profile);

        if (rc < 0) {
            return TB_CONF_ERROR;
        }

        if (rc == 0) {
            a->unusable = "its options.profile has no credentials in the "
                          "shared credentials file";
            return tb_conf_notice(ctx, a->line, "account %s: profile \"%s\" "
                                  "has no aws_access_key_id and "
                                  "aws_secret_access_key in the shared "
                                  "credentials file: it takes no request",
                                  a->id, o->profile);
        }

        return TB_CONF_OK;
    }

    if (tb_conf_env_dup(ctx, "AWS_ACCESS_KEY_ID", &o->access_key_id)
        != TB_CONF_OK
        || tb_conf_env_dup(ctx, "AWS_SECRET_ACCESS_KEY",
                           &o->secret_access_key) != TB_CONF_OK
        || tb_conf_env_dup(ctx, "AWS_SESSION_TOKEN", &o->session_token)
           != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (o->access_key_id && o->secret_access_key) {
        return TB_CONF_OK;
    }

    free(o->access_key_id);
    free(o->secret_access_key);
    free(o->session_token);
    o->access_key_id = NULL;
    o->secret_access_key = NULL;
    o->session_token = NULL;

    profile = ctx->getenv_fn ? ctx->getenv_fn("AWS_PROFILE") : NULL;

    rc = tb_conf_aws_profile(ctx, o,
                             profile && profile[0] ? profile : "default");

    if (rc != 0) {
        return rc < 0 ? TB_CONF_ERROR : TB_CONF_OK;
    }

    if (tb_conf_env_dup(ctx, "AWS_BEARER_TOKEN_BEDROCK", &a->api_key)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (a->api_key) {
        return TB_CONF_OK;
    }

    a->unusable = "no AWS credentials: give options.access_key_id and "
                  "secret_access_key, api_key, or AWS_* in nginx's "
                  "environment";

    return tb_conf_notice(ctx, a->line, "account %s: type bedrock has no "
                          "credentials: options.access_key_id and "
                          "options.secret_access_key, api_key (a Bedrock API "
                          "key), options.profile, AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY or AWS_BEARER_TOKEN_BEDROCK "
                          "in nginx's environment, or the shared credentials "
                          "file: it takes no request", a->id);
}


/*
 * A Vertex account needs its project, and a token: one of the operator's
 * (options.access_token, or the variable options.token_env names, read
 * at load), or a service account's key file (options.credentials_path,
 * else GOOGLE_APPLICATION_CREDENTIALS) that tokens are made for by the
 * hour.  A key file that cannot serve stops the load, naming why; an
 * account with no project or no credential at all loads, and takes no
 * request.
 */
int
tb_conf_vertex_credentials(tb_conf_ctx_t *ctx, tb_account_conf_t *a)
{
    char                   why[512];
    const char            *file, *v;
    tb_account_options_t  *o;

    o = &a->options;

    if (o->project == NULL || o->project[0] == '\0') {
        a->unusable = "options.project is not set";
        return tb_conf_notice(ctx, a->line, "account %s: type vertex needs "
                              "options.project: it takes no request", a->id);
    }

    if (o->token_env && o->access_token == NULL) {
        v = ctx->getenv_fn ? ctx->getenv_fn(o->token_env) : NULL;

        if (v && v[0]) {
            o->access_token = strdup(v);
            if (o->access_token == NULL) {
                return tb_conf_nomem(ctx);
            }
        }
    }

    if (o->access_token) {
        if (strpbrk(o->access_token, "\r\n") != NULL) {
            return tb_conf_error(ctx, a->line, "account %s: options."
                                 "access_token has a line break", a->id);
        }

        return TB_CONF_OK;
    }

    file = o->credentials_path;

    if (file == NULL) {
        file = ctx->getenv_fn
               ? ctx->getenv_fn("GOOGLE_APPLICATION_CREDENTIALS") : NULL;
    }

    if (file == NULL || file[0] == '\0') {
        a->unusable = "no Google credentials: give options.credentials_path "
                      "(a service account's key file) or access_token";
        return tb_conf_notice(ctx, a->line, "account %s: type vertex has no "
                              "credentials: options.credentials_path, "
                              "GOOGLE_APPLICATION_CREDENTIALS, options."
                              "access_token or options.token_env: it takes "
                              "no request", a->id);
    }

    a->gsa = tb_gsa_load(file, why, sizeof(why));

    if (a->gsa == NULL) {
        return tb_conf_error(ctx, a->line, "account %s: the service "
                             "account's key file %s", a->id, why);
    }

    return TB_CONF_OK;
}


/*
 * An oauth account's token: one source of api_key (a long-lived token of
 * `claude setup-token`), options.access_token, options.token_env or
 * options.credentials_path (this machine's Claude Code login file, read
 * now and again by the workers when it changes), into api_key.  A token
 * that could not be a header's is an error that never shows it.
 */
int
tb_conf_oauth_credentials(tb_conf_ctx_t *ctx, tb_account_conf_t *a)
{
    int                    n;
    char                   why[256], *token;
    const char            *v;
    tb_account_options_t  *o;

    o = &a->options;

    n = (a->api_key != NULL) + (o->access_token != NULL)
        + (o->token_env != NULL) + (o->credentials_path != NULL);

    if (n != 1) {
        return tb_conf_error(ctx, a->line, "account %s: type oauth needs "
                             "one token source: api_key (a token of `claude "
                             "setup-token`), options.access_token, "
                             "options.token_env or options.credentials_path"
                             "%s", a->id, n ? " - not more than one" : "");
    }

    if (a->api_key) {
        a->token_source = "api_key";

    } else if (o->access_token) {
        a->token_source = "options.access_token";
        a->api_key = strdup(o->access_token);

    } else if (o->token_env) {
        a->token_source = "options.token_env";
        v = ctx->getenv_fn ? ctx->getenv_fn(o->token_env) : NULL;

        if (v == NULL || v[0] == '\0') {
            return tb_conf_error(ctx, a->line, "account %s: options."
                                 "token_env names %s, which is not set",
                                 a->id, o->token_env);
        }

        a->api_key = strdup(v);

    } else {
        a->token_source = "options.credentials_path";

        if (tb_oauth_creds_file(o->credentials_path, &token,
                                &a->token_expires_ms, why, sizeof(why))
            != 0)
        {
            return tb_conf_error(ctx, a->line, "account %s: options."
                                 "credentials_path %s %s", a->id,
                                 o->credentials_path, why);
        }

        a->api_key = token;
    }

    if (a->api_key == NULL) {
        return tb_conf_nomem(ctx);
    }

    if (o->beta_header
        && !tb_oauth_token_ok(o->beta_header, strlen(o->beta_header)))
    {
        return tb_conf_error(ctx, a->line, "account %s: options.beta_header "
                             "must be a beta's name (letters, digits, '-', "
                             "'.', '_')", a->id);
    }

    if (!tb_oauth_token_ok(a->api_key, strlen(a->api_key))) {
        return tb_conf_error(ctx, a->line, "account %s: the token of %s is "
                             "not a token (a character a header cannot "
                             "carry, or longer than %d bytes)", a->id,
                             a->token_source, TB_OAUTH_TOKEN_MAX);
    }

    return TB_CONF_OK;
}
