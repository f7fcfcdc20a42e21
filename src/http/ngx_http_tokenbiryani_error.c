/*
 * tokenbiryani: the errors the gateway answers itself.  Whoever raises one
 * - the module, or nginx (a body over client_max_body_size, an upstream
 * that cannot be reached, a timeout, a malformed request) - the client
 * gets an Anthropic error; filter.c puts one in place of nginx's page.
 *
 * Every caller has made the request's context first.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_error.h"


static void ngx_http_tokenbiryani_default_error(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_int_t status);


ngx_int_t
ngx_http_tokenbiryani_error_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *json)
{
    u_char  *p;
    size_t   len, n;

    if (ctx->err.type == NULL
        || ctx->err.status != (ngx_int_t) r->headers_out.status)
    {
        ngx_http_tokenbiryani_default_error(r, ctx,
                                            r->headers_out.status);
    }

    if (ctx->err.type == NULL) {
        ctx->err.type = ngx_http_tokenbiryani_error_type(ctx->err.status);
    }

    if (ctx->err.json.len) {
        *json = ctx->err.json;
        return NGX_OK;
    }

    n = tb_json_escape(NULL, 0, (char *) ctx->err.message.data,
                       ctx->err.message.len);

    len = sizeof("{\"type\":\"error\",\"error\":{\"type\":\"\",\"message\":\"\"},"
                 "\"request_id\":\"\"}") - 1
          + ngx_strlen(ctx->err.type) + n + NGX_HTTP_TB_REQUEST_ID_LEN;

    json->data = ngx_pnalloc(r->pool, len + 1);
    if (json->data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(json->data, "{\"type\":\"error\",\"error\":{\"type\":\"%s\","
                    "\"message\":\"", ctx->err.type);

    tb_json_escape((char *) p, n + 1, (char *) ctx->err.message.data,
                   ctx->err.message.len);
    p += n;

    p = ngx_sprintf(p, "\"},\"request_id\":\"%*s\"}",
                    (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id);

    json->len = p - json->data;

    ctx->err.json = *json;

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_default_error(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_int_t status)
{
    off_t                      max;
    ngx_http_core_loc_conf_t  *clcf;

    switch (status) {

    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
        clcf = ngx_http_get_module_loc_conf(r, ngx_http_core_module);
        max = clcf->client_max_body_size;

        ngx_http_tokenbiryani_set_error(r, status, "request_too_large",
            "request body is larger than this gateway accepts "
            "(client_max_body_size %O bytes)", max);
        return;

    case NGX_HTTP_BAD_GATEWAY:
        if (ctx->last_error.len) {
            ngx_http_tokenbiryani_set_error(r, status, "api_error",
                "no upstream account could be reached after %ui "
                "attempt%s (last: %V)", ctx->attempts,
                ctx->attempts == 1 ? "" : "s", &ctx->last_error);
        } else {
            ngx_http_tokenbiryani_set_error(r, status, "api_error",
                "no upstream account could be reached");
        }
        return;

    case NGX_HTTP_GATEWAY_TIME_OUT:
        ngx_http_tokenbiryani_set_error(r, status, "timeout_error",
            "the upstream did not answer in time after %ui attempt%s",
            ctx->attempts, ctx->attempts == 1 ? "" : "s");
        return;

    case NGX_HTTP_NOT_ALLOWED:
        ngx_http_tokenbiryani_set_error(r, status, "invalid_request_error",
            "method %V is not allowed here", &r->method_name);
        return;

    case NGX_HTTP_NOT_FOUND:
        ngx_http_tokenbiryani_set_error(r, status, "not_found_error",
            "not found: %V", &r->uri);
        return;

    case NGX_HTTP_BAD_REQUEST:
        ngx_http_tokenbiryani_set_error(r, status, "invalid_request_error",
            "the request is not valid HTTP (its framing or a header)");
        return;

    case NGX_HTTP_REQUEST_URI_TOO_LARGE:
    case NGX_HTTP_REQUEST_HEADER_TOO_LARGE:
        ngx_http_tokenbiryani_set_error(r, status, "invalid_request_error",
            "request headers are too large");
        return;

    default:
        ngx_http_tokenbiryani_set_error(r, status,
            ngx_http_tokenbiryani_error_type(status),
            "%s", status >= 500 ? "the gateway failed to handle the request"
                                : "the request was rejected");
        return;
    }
}


const char *
ngx_http_tokenbiryani_error_type(ngx_int_t status)
{
    switch (status) {
    case NGX_HTTP_UNAUTHORIZED:
        return "authentication_error";
    case 402:
        return "billing_error";
    case NGX_HTTP_FORBIDDEN:
        return "permission_error";
    case NGX_HTTP_NOT_FOUND:
        return "not_found_error";
    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
        return "request_too_large";
    case NGX_HTTP_TOO_MANY_REQUESTS:
        return "rate_limit_error";
    case NGX_HTTP_SERVICE_UNAVAILABLE:
    case 529:
        return "overloaded_error";
    case NGX_HTTP_GATEWAY_TIME_OUT:
        return "timeout_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}


void
ngx_http_tokenbiryani_set_error(ngx_http_request_t *r, ngx_int_t status,
    const char *type, const char *fmt, ...)
{
    u_char                       *p;
    va_list                       args;
    u_char                        buf[1024];
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    if (ctx == NULL) {
        return;
    }

    va_start(args, fmt);
    p = ngx_vslprintf(buf, buf + sizeof(buf), fmt, args);
    va_end(args);

    ctx->err.status = status;
    ctx->err.type = type;
    ctx->err.json.len = 0;

    ctx->err.message.len = p - buf;
    ctx->err.message.data = ngx_pstrdup(r->pool,
                                        &(ngx_str_t) { p - buf, buf });
    if (ctx->err.message.data == NULL) {
        ctx->err.message.len = 0;
    }
}


ngx_int_t
ngx_http_tokenbiryani_send_error(ngx_http_request_t *r, ngx_int_t status,
    const char *type, const char *fmt, ...)
{
    u_char                       *p;
    va_list                       args;
    ngx_str_t                     json;
    u_char                        buf[1024];
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (fmt) {
        va_start(args, fmt);
        p = ngx_vslprintf(buf, buf + sizeof(buf), fmt, args);
        va_end(args);

        ngx_http_tokenbiryani_set_error(r, status, type, "%*s",
                                        (size_t) (p - buf), buf);

    } else if (ctx->err.type == NULL) {
        ngx_http_tokenbiryani_default_error(r, ctx, status);
    }

    status = ctx->err.status ? ctx->err.status : status;
    r->headers_out.status = status;

    if (ngx_http_tokenbiryani_error_json(r, ctx, &json) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->own_error = 1;

    return ngx_http_tokenbiryani_send_json(r, status, &json);
}


ngx_int_t
ngx_http_tokenbiryani_send_json(ngx_http_request_t *r, ngx_int_t status,
    ngx_str_t *json)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    r->headers_out.status = status;
    r->headers_out.content_length_n = json->len;

    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = sizeof("application/json") - 1;
    r->headers_out.content_type_lowcase = NULL;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = json->data;
    b->last = json->data + json->len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


ngx_int_t
ngx_http_tokenbiryani_upstream_invalid(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *what, ngx_int_t rc)
{
    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                  "tokenbiryani: account \"%V\" %s", &ctx->account->id, what);

    return rc;
}
