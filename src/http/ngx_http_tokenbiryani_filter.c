/*
 * tokenbiryani: what every response of the gateway's locations carries.
 *
 * The header filter stamps x-tokenbiryani-request-id (and the account that
 * answered).  Errors are Anthropic-shaped JSON whoever raises them: the
 * module's own, and nginx's (a body over client_max_body_size, an upstream
 * that cannot be reached, a timeout), whose HTML page the body filter
 * replaces.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_filter.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_error.h"


static ngx_int_t ngx_http_tokenbiryani_header_filter(ngx_http_request_t *r);
static ngx_uint_t ngx_http_tokenbiryani_unrouted(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_int_t ngx_http_tokenbiryani_unified_out(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_add_header(ngx_http_request_t *r,
    ngx_str_t *name, ngx_str_t *value);


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


static ngx_str_t  ngx_http_tb_request_id_header =
    ngx_string("x-tokenbiryani-request-id");
static ngx_str_t  ngx_http_tb_account_header =
    ngx_string("x-tokenbiryani-account");
static ngx_str_t  ngx_http_tb_retry_after = ngx_string("retry-after");
static ngx_str_t  ngx_http_tb_should_retry = ngx_string("x-should-retry");
static ngx_str_t  ngx_http_tb_false = ngx_string("false");


/*
 * The gateway's own answers that no retry can change - a key unknown,
 * revoked or expired, a scope or a model refused, an admin key required,
 * a request it cannot read - say so the way the official SDKs and Claude
 * Code read it (x-should-retry: false, which they obey before the status):
 * some of them retry a 401 or a 403 otherwise.  An upstream's answer
 * passed on keeps its own headers.
 */

static ngx_uint_t
ngx_http_tokenbiryani_unretryable(ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_uint_t status)
{
    if (ctx->answered && !ctx->own_error) {
        return 0;
    }

    switch (status) {
    case NGX_HTTP_BAD_REQUEST:
    case NGX_HTTP_UNAUTHORIZED:
    case NGX_HTTP_FORBIDDEN:
    case NGX_HTTP_NOT_FOUND:
    case NGX_HTTP_NOT_ALLOWED:
    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
    case NGX_HTTP_UNSUPPORTED_MEDIA_TYPE:
        return 1;
    default:
        return 0;
    }
}


/*
 * A 429 while the operator's subscription (the one account of type oauth)
 * has a window spent: its unified headers as its answers last said them,
 * so that Claude Code's own limit message names the reset.  (Its answers'
 * own are kept from the client like the nine.)
 */

static ngx_int_t
ngx_http_tokenbiryani_unified_out(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int                                 i;
    char                                name[80], val[48];
    ngx_str_t                           n, v;
    ngx_uint_t                          k;
    tb_unified_t                        u;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (ctx->admin && !ctx->own_error) {
        /* an admin key was sent the answer's own */
        return NGX_OK;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;

    for (k = 0; k < tmcf->nyaml; k++) {
        if (a[k].conf->type == TB_ACCOUNT_OAUTH) {
            break;
        }
    }

    if (k == tmcf->nyaml) {
        return NGX_OK;
    }

    ngx_http_tokenbiryani_zone_unified(&tmcf->zone, a[k].slot, &u);

    if (tb_unified_blocked_until(&u, ngx_http_tokenbiryani_now_ms()) == 0) {
        return NGX_OK;
    }

    i = 0;

    while ((i = tb_unified_header_at(&u, (unsigned) i, name, sizeof(name),
                                     val, sizeof(val)))
           != 0)
    {
        n.len = ngx_strlen(name);
        v.len = ngx_strlen(val);

        n.data = ngx_pnalloc(r->pool, n.len + v.len);
        if (n.data == NULL) {
            return NGX_ERROR;
        }

        v.data = ngx_cpymem(n.data, name, n.len);
        ngx_memcpy(v.data, val, v.len);

        if (ngx_http_tokenbiryani_add_header(r, &n, &v) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_filter_init(ngx_conf_t *cf)
{
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_tokenbiryani_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_tokenbiryani_body_filter;

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_header_filter(ngx_http_request_t *r)
{
    ngx_str_t                          value, json;
    ngx_http_tokenbiryani_ctx_t       *ctx;
    ngx_http_tokenbiryani_loc_conf_t  *tlcf;

    if (r != r->main) {
        return ngx_http_next_header_filter(r);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (ctx == NULL) {
        tlcf = ngx_http_get_module_loc_conf(r, ngx_http_tokenbiryani_module);

        if (tlcf->type == 0 && !ngx_http_tokenbiryani_unrouted(r)) {
            return ngx_http_next_header_filter(r);
        }

        /*
         * nginx answered before the handler ran (a body that is too big),
         * or before any location was chosen (a malformed request)
         */

        ctx = ngx_http_tokenbiryani_create_ctx(r);
        if (ctx == NULL) {
            return NGX_ERROR;
        }
    }

    if (ctx->object_body) {
        /* a batch's answer, rewritten: its own length */
        r->headers_out.content_length_n = ctx->resp.held;

        if (r->headers_out.content_length) {
            r->headers_out.content_length->hash = 0;
            r->headers_out.content_length = NULL;
        }
    }

    value.data = ctx->request_id;
    value.len = NGX_HTTP_TB_REQUEST_ID_LEN;

    if (ngx_http_tokenbiryani_add_header(r, &ngx_http_tb_request_id_header,
                                         &value)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ctx->answered) {
        if (ngx_http_tokenbiryani_add_header(r, &ngx_http_tb_account_header,
                                             &ctx->answered->id)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (ctx->wait.retry_after > 0 && !ctx->final && !ctx->committed
        && r->headers_out.status >= NGX_HTTP_BAD_REQUEST)
    {
        /*
         * the gateway's own error, when it knows when capacity returns
         * (never with x-should-retry: false below - one or the other)
         */

        value.data = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
        if (value.data == NULL) {
            return NGX_ERROR;
        }

        value.len = ngx_sprintf(value.data, "%i", ctx->wait.retry_after)
                    - value.data;

        if (ngx_http_tokenbiryani_add_header(r, &ngx_http_tb_retry_after,
                                             &value)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (r->headers_out.status == NGX_HTTP_TOO_MANY_REQUESTS
        && !ctx->committed
        && ngx_http_tokenbiryani_unified_out(r, ctx) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if ((ctx->final || ngx_http_tokenbiryani_unretryable(ctx,
                                                 r->headers_out.status))
        && !ctx->committed
        && r->headers_out.status >= NGX_HTTP_BAD_REQUEST)
    {
        /* no attempt of this request can ever succeed: clients, stop */

        if (ngx_http_tokenbiryani_add_header(r, &ngx_http_tb_should_retry,
                                             &ngx_http_tb_false)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (r->headers_out.status < NGX_HTTP_SPECIAL_RESPONSE
        || ctx->own_error || ctx->committed)
    {
        return ngx_http_next_header_filter(r);
    }

    /* nginx's own error page: the client gets an Anthropic error instead */

    if (ngx_http_tokenbiryani_error_json(r, ctx, &json) != NGX_OK) {
        return NGX_ERROR;
    }

    ctx->rewrite_body = 1;

    r->headers_out.content_length_n = json.len;

    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }

    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = sizeof("application/json") - 1;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.charset.len = 0;

    ngx_http_clear_accept_ranges(r);
    ngx_http_clear_last_modified(r);
    ngx_http_clear_etag(r);

    return ngx_http_next_header_filter(r);
}


/*
 * An error nginx raised before the request reached any location (bad
 * framing, headers too large, an invalid header) on a server that hosts
 * the gateway: its clients get an Anthropic error too.
 */

static ngx_uint_t
ngx_http_tokenbiryani_unrouted(ngx_http_request_t *r)
{
    ngx_uint_t                          i;
    ngx_http_core_srv_conf_t           *cscf, **servers;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (r->headers_out.status < NGX_HTTP_BAD_REQUEST) {
        return 0;
    }

    cscf = ngx_http_get_module_srv_conf(r, ngx_http_core_module);

    if (cscf == NULL || r->loc_conf != cscf->ctx->loc_conf) {
        return 0;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    servers = tmcf->servers.elts;

    for (i = 0; i < tmcf->servers.nelts; i++) {
        if (servers[i] == cscf) {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_tokenbiryani_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_buf_t                    *b;
    ngx_str_t                     json;
    ngx_uint_t                    last;
    ngx_chain_t                  *cl, out;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (ctx == NULL || !ctx->rewrite_body || r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    last = 0;

    for (cl = in; cl; cl = cl->next) {
        cl->buf->pos = cl->buf->last;
        cl->buf->file_pos = cl->buf->file_last;

        if (cl->buf->last_buf) {
            last = 1;
        }
    }

    if (!last) {
        return NGX_OK;
    }

    ctx->rewrite_body = 0;

    if (ngx_http_tokenbiryani_error_json(r, ctx, &json) != NGX_OK) {
        return NGX_ERROR;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = json.data;
    b->last = json.data + json.len;
    b->memory = 1;
    b->last_buf = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_next_body_filter(r, &out);
}


static ngx_int_t
ngx_http_tokenbiryani_add_header(ngx_http_request_t *r, ngx_str_t *name,
    ngx_str_t *value)
{
    ngx_table_elt_t                *h;
    ngx_http_tokenbiryani_hiter_t   it;

    /* once per response, even when nginx sends an error after a failure */

    ngx_http_tokenbiryani_headers_begin(&it, &r->headers_out.headers);

    while ((h = ngx_http_tokenbiryani_header_next(&it)) != NULL) {
        if (h->hash && h->key.len == name->len
            && ngx_strncasecmp(h->key.data, name->data, name->len) == 0)
        {
            h->value = *value;
            return NGX_OK;
        }
    }

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key = *name;
    h->value = *value;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}
