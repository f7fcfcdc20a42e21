/*
 * tokenbiryani: the $tokenbiryani_* variables.
 *
 * Each is what the gateway knows of the request when it is read - in the
 * log phase, everything: the account that answered, the attempts, the
 * usage and its cost.  What is not known (no answer, a model with no
 * price, a request the gateway did not handle) is not found, which
 * log_format writes as "-".  Nothing a variable gives is a prompt, a
 * credential or an upstream's header.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_variables.h"
#include "ngx_http_tokenbiryani_record.h"
#include "tb_ledger.h"


#define NGX_HTTP_TB_VAR_REQUEST_ID     0
#define NGX_HTTP_TB_VAR_ACCOUNT        1
#define NGX_HTTP_TB_VAR_KEY            2
#define NGX_HTTP_TB_VAR_SESSION        3
#define NGX_HTTP_TB_VAR_ATTEMPTS       4
#define NGX_HTTP_TB_VAR_INPUT          5
#define NGX_HTTP_TB_VAR_OUTPUT         6
#define NGX_HTTP_TB_VAR_CACHE_READ     7
#define NGX_HTTP_TB_VAR_CACHE_WRITE    8
#define NGX_HTTP_TB_VAR_COST           9
#define NGX_HTTP_TB_VAR_QUEUED_MS      10
#define NGX_HTTP_TB_VAR_TTFT_MS        11


static ngx_int_t ngx_http_tokenbiryani_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


static ngx_http_variable_t  ngx_http_tokenbiryani_vars[] = {

    { ngx_string("tokenbiryani_request_id"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_REQUEST_ID,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_account"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_ACCOUNT,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_key"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_KEY,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_session"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_SESSION,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_attempts"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_ATTEMPTS,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_input_tokens"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_INPUT,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_output_tokens"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_OUTPUT,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_cache_read_tokens"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_CACHE_READ,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_cache_write_tokens"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_CACHE_WRITE,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_cost"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_COST,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_queued_ms"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_QUEUED_MS,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("tokenbiryani_ttft_ms"), NULL,
      ngx_http_tokenbiryani_variable, NGX_HTTP_TB_VAR_TTFT_MS,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_tokenbiryani_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_tokenbiryani_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                             *p;
    size_t                              len;
    int64_t                             n;
    const char                         *s;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                buf[32];

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_tokenbiryani_module);

    if (ctx == NULL || ctx->kind == 0) {
        /* not a request of the gateway's, or not one of /v1 */
        v->not_found = 1;
        return NGX_OK;
    }

    n = -1;
    s = NULL;
    len = 0;

    switch (data) {

    case NGX_HTTP_TB_VAR_REQUEST_ID:
        s = (char *) ctx->request_id;
        len = NGX_HTTP_TB_REQUEST_ID_LEN;
        break;

    case NGX_HTTP_TB_VAR_ACCOUNT:
        if (ctx->answered) {
            s = (char *) ctx->answered->id.data;
            len = ctx->answered->id.len;
        }
        break;

    case NGX_HTTP_TB_VAR_KEY:
        if (ctx->key) {
            s = ctx->key->name;
            len = ngx_strlen(s);
        }
        break;

    case NGX_HTTP_TB_VAR_SESSION:
        if (ctx->route.session) {
            p = ngx_sprintf((u_char *) buf, "%016uxL", ctx->route.session);
            s = buf;
            len = p - (u_char *) buf;
        }
        break;

    case NGX_HTTP_TB_VAR_ATTEMPTS:
        n = (int64_t) ctx->attempts;
        break;

    case NGX_HTTP_TB_VAR_INPUT:
        n = ctx->usage.input_tokens;
        break;

    case NGX_HTTP_TB_VAR_OUTPUT:
        n = ctx->usage.input_tokens >= 0 ? ctx->usage.output_tokens : -1;
        break;

    case NGX_HTTP_TB_VAR_CACHE_READ:
        n = ctx->usage.input_tokens >= 0
            ? ngx_max(ctx->usage.cache_read_input_tokens, 0) : -1;
        break;

    case NGX_HTTP_TB_VAR_CACHE_WRITE:
        n = ctx->usage.input_tokens >= 0
            ? ngx_max(ctx->usage.cache_creation_input_tokens, 0) : -1;
        break;

    case NGX_HTTP_TB_VAR_COST:
        tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
        n = ngx_http_tokenbiryani_settle_cost(tmcf, ctx);

        if (n >= 0) {
            len = tb_cost_format(n, buf, sizeof(buf));
            s = buf;
        }

        n = -1;
        break;

    case NGX_HTTP_TB_VAR_QUEUED_MS:
        n = ctx->wait.waited_ms;
        break;

    default: /* NGX_HTTP_TB_VAR_TTFT_MS */
        n = ctx->ttft_ms;
        break;
    }

    if (n >= 0) {
        p = ngx_sprintf((u_char *) buf, "%L", n);
        s = buf;
        len = p - (u_char *) buf;
    }

    if (s == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    /* buf is this function's: a copy the request keeps */
    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(p, s, len);

    v->data = p;
    v->len = len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}
