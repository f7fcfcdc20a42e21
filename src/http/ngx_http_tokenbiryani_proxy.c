/*
 * tokenbiryani: the Messages API proxy.
 *
 * One request: authenticate, read and scan the body, then drive an
 * ngx_http_upstream_t whose balancer (ngx_http_tokenbiryani_balancer.c)
 * picks an account per attempt.  A failed attempt - a 429, 529 or 5xx, a
 * streamed error before the first content delta, a connect error or a
 * timeout - is retried on another account while the client has seen
 * nothing; a streamed 200 is held back until its first
 * content_block_delta, the commit point after which nothing is retried.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_shm.h"


static ngx_uint_t ngx_http_tokenbiryani_has_body(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_body_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_body_bytes(ngx_http_request_t *r,
    ngx_str_t *body);
static ngx_int_t ngx_http_tokenbiryani_error_body(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_classify_response(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status,
    const char *stream_error);
static ngx_int_t ngx_http_tokenbiryani_decide(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_create_request(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_reinit_request(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_process_status_line(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_process_header(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_process_prelude(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_commit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_retry(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *why);
static ngx_int_t ngx_http_tokenbiryani_filter_init_upstream(void *data);
static ngx_int_t ngx_http_tokenbiryani_input_filter(void *data,
    ssize_t bytes);
static void ngx_http_tokenbiryani_feed_sse(ngx_http_tokenbiryani_ctx_t *ctx,
    u_char *p, u_char *last);
static u_char *ngx_http_tokenbiryani_sse_buffers(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_sse_buffers_free(void *data);
static void ngx_http_tokenbiryani_keep_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, u_char *p, u_char *last);
static void ngx_http_tokenbiryani_broken_outcome(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_int_t rc);
static void ngx_http_tokenbiryani_abort_request(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_finalize_request(ngx_http_request_t *r,
    ngx_int_t rc);


/* request headers the client's request never passes upstream */
static ngx_str_t  ngx_http_tokenbiryani_skip_headers[] = {
    ngx_string("host"),
    ngx_string("connection"),
    ngx_string("keep-alive"),
    ngx_string("proxy-connection"),
    ngx_string("proxy-authorization"),
    ngx_string("proxy-authenticate"),
    ngx_string("te"),
    ngx_string("trailer"),
    ngx_string("transfer-encoding"),
    ngx_string("upgrade"),
    ngx_string("content-length"),
    ngx_string("expect"),
    ngx_string("x-api-key"),
    ngx_string("authorization"),
    /* the gateway reads usage from the stream: identity encoding only */
    ngx_string("accept-encoding"),
    ngx_null_string
};


ngx_int_t
ngx_http_tokenbiryani_pass_handler(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_str_t                    *uri;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_tokenbiryani_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    uri = &r->uri;

    /*
     * The path sent upstream is the one checked here, so it must mean the
     * same to every parser: no dot-segments, empty segments, fragments or
     * percent-encoding (an encoded "/", "." or "?" is read differently by
     * different servers).  No client of the Messages API sends one.
     */

    if (r->complex_uri || r->quoted_uri || r->empty_path_in_uri) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error",
                   "the request path must be plain: no \".\" or \"..\" "
                   "segments, empty segments, fragments or "
                   "percent-encoding");
    }

    if (uri->len == sizeof("/v1/messages") - 1
        && ngx_strncmp(uri->data, "/v1/messages", uri->len) == 0)
    {
        ctx->kind = NGX_HTTP_TB_MESSAGES;

    } else if (uri->len == sizeof("/v1/messages/count_tokens") - 1
               && ngx_strncmp(uri->data, "/v1/messages/count_tokens",
                              uri->len) == 0)
    {
        ctx->kind = NGX_HTTP_TB_COUNT_TOKENS;

    } else if ((uri->len == sizeof("/v1/models") - 1
                && ngx_strncmp(uri->data, "/v1/models", uri->len) == 0)
               || (uri->len > sizeof("/v1/models/") - 1
                   && ngx_strncmp(uri->data, "/v1/models/",
                                  sizeof("/v1/models/") - 1) == 0))
    {
        ctx->kind = NGX_HTTP_TB_MODELS;

    } else {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                   "not_found_error",
                   "tokenbiryani serves /v1/messages, "
                   "/v1/messages/count_tokens and /v1/models, not %V", uri);
    }

    if (ctx->kind == NGX_HTTP_TB_MODELS) {
        if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error",
                       "%V expects GET, not %V", uri, &r->method_name);
        }

        /*
         * A body on a GET is never sent upstream: without a length of its
         * own it would be read there as the start of another request.
         */

        if (ngx_http_tokenbiryani_has_body(r)) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error",
                       "%V carries no body: send %V without one",
                       &r->method_name, uri);
        }

    } else if (r->method != NGX_HTTP_POST) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error",
                   "%V expects POST, not %V", uri, &r->method_name);
    }

    rc = ngx_http_tokenbiryani_authenticate(r, ctx, 0);
    if (rc != NGX_OK) {
        return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    /*
     * The whole body is kept (in memory or in a temp file) so that every
     * attempt can send it again.
     */

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_tokenbiryani_body_handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static ngx_uint_t
ngx_http_tokenbiryani_has_body(ngx_http_request_t *r)
{
    if (r->headers_in.content_length_n > 0 || r->headers_in.chunked) {
        return 1;
    }

#if (NGX_HTTP_V2)
    if (r->stream && !r->stream->in_closed) {
        /* DATA frames follow the headers */
        return 1;
    }
#endif

    return 0;
}


static void
ngx_http_tokenbiryani_body_handler(ngx_http_request_t *r)
{
    ngx_str_t                           body;
    ngx_pool_cleanup_t                 *cln;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                err[256];

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (r->connection->error) {
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        return;
    }

    ctx->started_ms = ngx_http_tokenbiryani_now_ms();

    body.len = 0;
    body.data = (u_char *) "";

    if (ctx->kind != NGX_HTTP_TB_MODELS) {

        if (ngx_http_tokenbiryani_body_bytes(r, &body) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        if (tb_scan_body(body.data, body.len, &ctx->body, err, sizeof(err))
            != 0)
        {
            ngx_http_finalize_request(r,
                ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                                                 "invalid_request_error",
                                                 "%s", err));
            return;
        }

        if (!ctx->body.has_model) {
            ngx_http_finalize_request(r,
                ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                                                 "invalid_request_error",
                                                 "model: field required"));
            return;
        }

        if (ctx->key
            && !tb_models_match(ctx->key->models.items, ctx->key->models.n,
                                ctx->body.model, ctx->body.model_len))
        {
            ngx_http_finalize_request(r,
                ngx_http_tokenbiryani_send_error(r, NGX_HTTP_FORBIDDEN,
                    "permission_error", "key \"%s\" may not use model \"%s\"",
                    ctx->key->name, ctx->body.model));
            return;
        }
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ctx->tried = ngx_pcalloc(r->pool, tmcf->accounts.nelts + 1);
    if (ctx->tried == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ngx_http_tokenbiryani_route_prepare(r, ctx, &body) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* from here on the request leaves a record, and no lease behind */
    cln->handler = ngx_http_tokenbiryani_request_done;
    cln->data = ctx;

    if (ctx->kind == NGX_HTTP_TB_MESSAGES) {

        switch (ngx_http_tokenbiryani_admit(r, ctx)) {

        case NGX_HTTP_TB_GO:
            break;

        case NGX_HTTP_TB_WAIT:
            /* the queue or a backoff; the request is kept by its body */
            return;

        default:
            ngx_http_tokenbiryani_abandon(r, ctx);
            ngx_http_finalize_request(r,
                ngx_http_tokenbiryani_send_error(r, ctx->err_status, NULL,
                                                 NULL));
            return;
        }

    } else if (!ngx_http_tokenbiryani_eligible_left(r, ctx)) {
        ngx_http_finalize_request(r,
            ngx_http_tokenbiryani_send_error(r,
                NGX_HTTP_SERVICE_UNAVAILABLE, "overloaded_error",
                "no account in this pool can serve this request: every "
                "account is disabled or outside this key's pool"));
        return;
    }

    if (ngx_http_tokenbiryani_start_upstream(r, ctx) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }
}


/*
 * The wait for a stream's first bytes, and between them until its first
 * delta: retry.prelude_timeout_seconds (0: the request timeout), never
 * longer than the request timeout.
 */

ngx_msec_t
ngx_http_tokenbiryani_prelude_timeout(ngx_http_request_t *r)
{
    ngx_http_tokenbiryani_loc_conf_t   *tlcf;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    tlcf = ngx_http_get_module_loc_conf(r, ngx_http_tokenbiryani_module);

    if (tmcf->tbcf->retry_prelude_timeout_seconds <= 0) {
        return tlcf->upstream.read_timeout;
    }

    return ngx_min(tlcf->upstream.read_timeout,
                   (ngx_msec_t) ngx_max(1,
                       tmcf->tbcf->retry_prelude_timeout_seconds * 1000));
}


/*
 * The body as one contiguous read-only buffer for the scanner: the bufs
 * themselves, if there is one in memory, else a copy.
 */

static ngx_int_t
ngx_http_tokenbiryani_body_bytes(ngx_http_request_t *r, ngx_str_t *body)
{
    u_char       *p;
    off_t         len;
    ssize_t       n;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    body->len = 0;
    body->data = (u_char *) "";

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NGX_OK;
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        body->data = cl->buf->pos;
        body->len = cl->buf->last - cl->buf->pos;
        return NGX_OK;
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        len += ngx_buf_size(cl->buf);
    }

    p = ngx_pnalloc(r->pool, (size_t) len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    body->data = p;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (!b->in_file) {
            if (b->pos != b->last) {
                p = ngx_cpymem(p, b->pos, b->last - b->pos);
            }

            continue;
        }

        n = ngx_read_file(b->file, p, (size_t) (b->file_last - b->file_pos),
                          b->file_pos);

        if (n != (ssize_t) (b->file_last - b->file_pos)) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "tokenbiryani: could not read back the request "
                          "body from its temp file");
            return NGX_ERROR;
        }

        p += n;
    }

    body->len = p - body->data;

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_start_upstream(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_upstream_t               *u;
    ngx_http_tokenbiryani_loc_conf_t  *tlcf;

    tlcf = ngx_http_get_module_loc_conf(r, ngx_http_tokenbiryani_module);

    if (ngx_http_upstream_create(r) != NGX_OK) {
        return NGX_ERROR;
    }

    u = r->upstream;

    ngx_str_set(&u->schema, "http://");
    u->output.tag = (ngx_buf_tag_t) &ngx_http_tokenbiryani_module;
    u->conf = &tlcf->upstream;

    if (ctx->kind == NGX_HTTP_TB_MESSAGES && ctx->body.stream
        && ngx_http_tokenbiryani_prelude_timeout(r)
           != tlcf->upstream.read_timeout)
    {
        /*
         * A stream waits prelude_timeout for its response to begin and
         * between bytes until its first delta; then the request timeout.
         */

        if (ctx->uconf == NULL) {
            ctx->uconf = ngx_palloc(r->pool,
                                    sizeof(ngx_http_upstream_conf_t));
            if (ctx->uconf == NULL) {
                return NGX_ERROR;
            }

            ngx_memcpy(ctx->uconf, &tlcf->upstream,
                       sizeof(ngx_http_upstream_conf_t));
        }

        ctx->uconf->read_timeout = ngx_http_tokenbiryani_prelude_timeout(r);
        u->conf = ctx->uconf;
    }

    u->create_request = ngx_http_tokenbiryani_create_request;
    u->reinit_request = ngx_http_tokenbiryani_reinit_request;
    u->process_header = ngx_http_tokenbiryani_process_status_line;
    u->abort_request = ngx_http_tokenbiryani_abort_request;
    u->finalize_request = ngx_http_tokenbiryani_finalize_request;

    u->input_filter_init = ngx_http_tokenbiryani_filter_init_upstream;
    u->input_filter = ngx_http_tokenbiryani_input_filter;
    u->input_filter_ctx = r;

    u->buffering = 0;

    ngx_http_upstream_init(r);

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_create_request(ngx_http_request_t *r)
{
    ngx_buf_t                    *b;
    ngx_chain_t                  *cl, *body, **ll;
    ngx_http_upstream_t          *u;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    u = r->upstream;

    /* link 0: the header, rebuilt with each attempt's credential */

    cl = ngx_alloc_chain_link(r->pool);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    cl->buf = ngx_calloc_buf(r->pool);
    if (cl->buf == NULL) {
        return NGX_ERROR;
    }

    ctx->hdr = cl;
    ll = &cl->next;

    /*
     * links 1..n: shallow copies of the body bufs, so sending one attempt
     * never moves the positions the next attempt starts from
     */

    ctx->body_len = 0;

    /* a body goes up with POST only, and always with its length */

    for (body = (r->method == NGX_HTTP_POST) ? u->request_bufs : NULL;
         body;
         body = body->next)
    {
        b = ngx_alloc_buf(r->pool);
        if (b == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(b, body->buf, sizeof(ngx_buf_t));
        ctx->body_len += ngx_buf_size(b);

        *ll = ngx_alloc_chain_link(r->pool);
        if (*ll == NULL) {
            return NGX_ERROR;
        }

        (*ll)->buf = b;
        ll = &(*ll)->next;
    }

    *ll = NULL;

    u->request_bufs = cl;

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_build_request_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    size_t                            len;
    ngx_buf_t                        *b;
    ngx_str_t                        *s;
    ngx_uint_t                        i, version;
    ngx_list_part_t                  *part;
    ngx_table_elt_t                  *h;
    ngx_http_tokenbiryani_account_t  *a;

    a = ctx->account;

    len = r->method_name.len + 1 + a->path_prefix.len + r->uri.len
          + 1 + r->args.len + sizeof(" HTTP/1.1" CRLF) - 1
          + sizeof("Host: " CRLF) - 1 + a->host_header.len
          + a->auth_header.len
          + sizeof("Content-Length: " CRLF) - 1 + NGX_OFF_T_LEN
          + sizeof("anthropic-version: 2023-06-01" CRLF) - 1
          + sizeof(CRLF) - 1;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        len += h[i].key.len + sizeof(": " CRLF) - 1 + h[i].value.len;
    }

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last = ngx_copy(b->last, r->method_name.data, r->method_name.len);
    *b->last++ = ' ';
    b->last = ngx_copy(b->last, a->path_prefix.data, a->path_prefix.len);
    b->last = ngx_copy(b->last, r->uri.data, r->uri.len);

    if (r->args.len) {
        *b->last++ = '?';
        b->last = ngx_copy(b->last, r->args.data, r->args.len);
    }

    b->last = ngx_cpymem(b->last, " HTTP/1.1" CRLF "Host: ",
                         sizeof(" HTTP/1.1" CRLF "Host: ") - 1);
    b->last = ngx_copy(b->last, a->host_header.data, a->host_header.len);
    *b->last++ = CR; *b->last++ = LF;

    b->last = ngx_copy(b->last, a->auth_header.data, a->auth_header.len);

    if (r->method == NGX_HTTP_POST) {
        b->last = ngx_sprintf(b->last, "Content-Length: %O" CRLF,
                              ctx->body_len);
    }

    version = 0;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len > sizeof("x-tokenbiryani-") - 1
            && ngx_strncmp(h[i].lowcase_key, "x-tokenbiryani-",
                           sizeof("x-tokenbiryani-") - 1) == 0)
        {
            continue;
        }

        for (s = ngx_http_tokenbiryani_skip_headers; s->len; s++) {
            if (h[i].key.len == s->len
                && ngx_strncmp(h[i].lowcase_key, s->data, s->len) == 0)
            {
                break;
            }
        }

        if (s->len) {
            continue;
        }

        /* the account's own headers win over the client's */

        if (ngx_http_tokenbiryani_account_sets(a, &h[i].key)) {
            continue;
        }

        if (h[i].key.len == sizeof("anthropic-version") - 1
            && ngx_strncmp(h[i].lowcase_key, "anthropic-version",
                           h[i].key.len) == 0)
        {
            version = 1;
        }

        b->last = ngx_copy(b->last, h[i].key.data, h[i].key.len);
        *b->last++ = ':'; *b->last++ = ' ';
        b->last = ngx_copy(b->last, h[i].value.data, h[i].value.len);
        *b->last++ = CR; *b->last++ = LF;
    }

    if (!version) {
        b->last = ngx_cpymem(b->last, "anthropic-version: 2023-06-01" CRLF,
                             sizeof("anthropic-version: 2023-06-01" CRLF) - 1);
    }

    *b->last++ = CR; *b->last++ = LF;

    /* swap the buffer: a reinit resets pos to start on every link */
    ctx->hdr->buf = b;

    return NGX_OK;
}


void
ngx_http_tokenbiryani_reset_attempt(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_memzero(&ctx->status, sizeof(ngx_http_status_t));
    ngx_memzero(&ctx->peek_chunked, sizeof(ngx_http_chunked_t));
    ngx_memzero(&ctx->chunked, sizeof(ngx_http_chunked_t));

    tb_rl_obs_init(&ctx->obs);

    ctx->obs_stale = 0;
    ctx->headers_ms = 0;
    ctx->body_start = NULL;
    ctx->peek_pos = NULL;
    ctx->sse_skip = 0;
    ctx->sse_fed = 0;
    ctx->is_sse = 0;
    ctx->peek_eof = 0;
    ctx->stream_done = 0;
    ctx->error_after_commit = 0;

    if (ctx->sse_line) {
        tb_sse_init(&ctx->sse, ctx->sse_line, ctx->sse_data);
    }

    /* the response parser keeps its state in r */
    r->state = 0;

    if (r->upstream) {
        r->upstream->process_header =
                                    ngx_http_tokenbiryani_process_status_line;
    }
}


/*
 * reinit_request only runs when the failed attempt had sent its request;
 * the attempt state is reset in peer.get, which always runs.
 */

static ngx_int_t
ngx_http_tokenbiryani_reinit_request(ngx_http_request_t *r)
{
    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_process_status_line(ngx_http_request_t *r)
{
    size_t                        len;
    ngx_int_t                     rc;
    ngx_http_upstream_t          *u;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    u = r->upstream;

    rc = ngx_http_parse_status_line(r, &u->buffer, &ctx->status);

    if (rc == NGX_AGAIN) {
        return rc;
    }

    if (rc == NGX_ERROR) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "tokenbiryani: account \"%V\" sent no valid HTTP/1.x "
                      "status line", &ctx->account->id);

        ngx_str_set(&ctx->last_error, "invalid response");

        return ngx_http_tokenbiryani_retry(r, ctx, "an invalid response");
    }

    if (u->state && u->state->status == 0) {
        u->state->status = ctx->status.code;
    }

    u->headers_in.status_n = ctx->status.code;

    len = ctx->status.end - ctx->status.start;
    u->headers_in.status_line.len = len;
    u->headers_in.status_line.data = ngx_pnalloc(r->pool, len);
    if (u->headers_in.status_line.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(u->headers_in.status_line.data, ctx->status.start, len);

    if (ctx->status.http_version < NGX_HTTP_VERSION_11) {
        u->headers_in.connection_close = 1;
    }

    u->process_header = ngx_http_tokenbiryani_process_header;

    return ngx_http_tokenbiryani_process_header(r);
}


static ngx_int_t
ngx_http_tokenbiryani_process_header(ngx_http_request_t *r)
{
    u_char                         *lowcase;
    size_t                          len;
    ngx_int_t                       rc;
    ngx_table_elt_t                *h;
    u_char                          name[64];
    ngx_http_upstream_t            *u;
    ngx_http_tokenbiryani_ctx_t    *ctx;
    ngx_http_upstream_header_t     *hh;
    ngx_http_upstream_main_conf_t  *umcf;

    umcf = ngx_http_get_module_main_conf(r, ngx_http_upstream_module);
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    u = r->upstream;

    for ( ;; ) {

        rc = ngx_http_parse_header_line(r, &u->buffer, 1);

        if (rc == NGX_OK) {

            /*
             * The pool's limit headers describe the operator's capacity,
             * not the tenant's: they feed the mirror and reach admin keys
             * only.
             */

            len = r->header_name_end - r->header_name_start;

            if (len == r->lowcase_index) {
                lowcase = r->lowcase_header;

            } else {
                /* the parser lowercases the first 32 bytes only */
                lowcase = name;
                len = ngx_min(len, sizeof(name));
                ngx_strlow(name, r->header_name_start, len);
            }

            if (tb_rl_obs_header(&ctx->obs, lowcase, len, r->header_start,
                                 r->header_end - r->header_start,
                                 ngx_http_tokenbiryani_now_ms())
                && !ctx->admin
                && !(len == sizeof("retry-after") - 1
                     && ngx_strncmp(lowcase, "retry-after", len) == 0))
            {
                continue;
            }

            h = ngx_list_push(&u->headers_in.headers);
            if (h == NULL) {
                return NGX_ERROR;
            }

            h->hash = r->header_hash;

            h->key.len = r->header_name_end - r->header_name_start;
            h->value.len = r->header_end - r->header_start;

            h->key.data = ngx_pnalloc(r->pool,
                               h->key.len + 1 + h->value.len + 1 + h->key.len);
            if (h->key.data == NULL) {
                h->hash = 0;
                return NGX_ERROR;
            }

            h->value.data = h->key.data + h->key.len + 1;
            h->lowcase_key = h->key.data + h->key.len + 1 + h->value.len + 1;

            ngx_memcpy(h->key.data, r->header_name_start, h->key.len);
            h->key.data[h->key.len] = '\0';
            ngx_memcpy(h->value.data, r->header_start, h->value.len);
            h->value.data[h->value.len] = '\0';

            if (h->key.len == r->lowcase_index) {
                ngx_memcpy(h->lowcase_key, r->lowcase_header, h->key.len);

            } else {
                ngx_strlow(h->lowcase_key, h->key.data, h->key.len);
            }

            hh = ngx_hash_find(&umcf->headers_in_hash, h->hash,
                               h->lowcase_key, h->key.len);

            if (hh && hh->handler(r, h, hh->offset) != NGX_OK) {
                return NGX_ERROR;
            }

            continue;
        }

        if (rc == NGX_HTTP_PARSE_HEADER_DONE) {
            break;
        }

        if (rc == NGX_AGAIN) {
            return NGX_AGAIN;
        }

        /* rc == NGX_HTTP_PARSE_INVALID_HEADER */

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "tokenbiryani: account \"%V\" sent an invalid header",
                      &ctx->account->id);

        ngx_str_set(&ctx->last_error, "invalid response header");

        return ngx_http_tokenbiryani_retry(r, ctx, "an invalid header");
    }

    /*
     * Every Messages response, errors included, teaches the mirror
     * something.  count_tokens and models have limits of their own.
     */

    ctx->headers_ms = ngx_http_tokenbiryani_now_ms();

    if (ctx->kind == NGX_HTTP_TB_MESSAGES) {
        /* leases are numbered in the order they were taken: sending order */
        ctx->obs.seq = ctx->lease ? ctx->lease_id : 0;

        ctx->obs_stale = ngx_http_tokenbiryani_shm_observe(
            ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module),
            ctx->account, &ctx->obs, ctx->status.code, ctx->headers_ms);
    }

    if (u->headers_in.chunked) {
        u->headers_in.content_length_n = -1;
    }

    ctx->is_sse = u->headers_in.content_type
                  && u->headers_in.content_type->value.len >= 17
                  && ngx_strncasecmp(u->headers_in.content_type->value.data,
                                     (u_char *) "text/event-stream", 17)
                     == 0;

    ctx->body_start = u->buffer.pos;
    ctx->peek_pos = u->buffer.pos;

    u->process_header = ngx_http_tokenbiryani_process_prelude;

    return ngx_http_tokenbiryani_process_prelude(r);
}


/*
 * Decides what to do with the response: retry, hold (a stream before its
 * first content delta) or commit.  Called again with each read while held.
 */

static ngx_int_t
ngx_http_tokenbiryani_process_prelude(ngx_http_request_t *r)
{
    u_char                             *p;
    off_t                               n;
    int64_t                             now;
    ngx_buf_t                           tmp;
    ngx_int_t                           rc;
    ngx_uint_t                          status;
    u_char                              why[64];
    ngx_http_upstream_t                *u;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    u = r->upstream;
    status = u->headers_in.status_n;

    if (ctx->kind != NGX_HTTP_TB_MESSAGES) {

        /* count_tokens, models: another account on a 429 or a 5xx */

        if (status == NGX_HTTP_TOO_MANY_REQUESTS || status >= 500) {
            p = ngx_snprintf(why, sizeof(why) - 1, "status %ui", status);
            *p = '\0';

            ctx->last_error.data = ngx_pnalloc(r->pool, p - why);
            if (ctx->last_error.data) {
                ctx->last_error.len = p - why;
                ngx_memcpy(ctx->last_error.data, why, p - why);
            }

            return ngx_http_tokenbiryani_retry(r, ctx, (char *) why);
        }

        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    if (status >= 400) {

        /* the error body tells a spend limit from a rate limit */

        rc = ngx_http_tokenbiryani_error_body(r, ctx);

        if (rc != NGX_OK) {
            return rc;
        }

        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);

        return ngx_http_tokenbiryani_decide(r, ctx);
    }

    if (status != NGX_HTTP_OK || !ctx->is_sse) {
        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    if (ctx->sse_line == NULL) {
        ctx->sse_line = ngx_http_tokenbiryani_sse_buffers(r);
        if (ctx->sse_line == NULL) {
            return NGX_ERROR;
        }

        ctx->sse_data = ctx->sse_line + TB_SSE_LINE_MAX;
        tb_sse_init(&ctx->sse, ctx->sse_line, ctx->sse_data);
    }

    /*
     * Peek: de-chunk what arrived into the SSE parser without consuming
     * u->buffer, so that a commit can hand the whole body on as received.
     */

    ngx_memzero(&tmp, sizeof(ngx_buf_t));
    tmp.pos = ctx->peek_pos;
    tmp.last = u->buffer.last;

    while (tmp.pos < tmp.last && !ctx->sse.delta && !ctx->sse.error) {

        if (!u->headers_in.chunked) {
            n = tmp.last - tmp.pos;
            ngx_http_tokenbiryani_feed_sse(ctx, tmp.pos, tmp.last);
            ctx->sse_fed += n;
            tmp.pos = tmp.last;
            break;
        }

        rc = ngx_http_parse_chunked(r, &tmp, &ctx->peek_chunked);

        if (rc == NGX_OK) {
            n = ngx_min((off_t) (tmp.last - tmp.pos),
                        ctx->peek_chunked.size);

            ngx_http_tokenbiryani_feed_sse(ctx, tmp.pos, tmp.pos + n);

            ctx->sse_fed += n;
            tmp.pos += n;
            ctx->peek_chunked.size -= n;
            continue;
        }

        if (rc == NGX_DONE) {
            ctx->peek_eof = 1;
            break;
        }

        if (rc == NGX_AGAIN) {
            break;
        }

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "tokenbiryani: account \"%V\" sent an invalid chunked "
                      "stream", &ctx->account->id);

        return ngx_http_tokenbiryani_retry(r, ctx, "an invalid stream");
    }

    ctx->peek_pos = tmp.pos;

    if (ctx->sse.delta) {
        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    if (ctx->sse.error) {
        ngx_http_tokenbiryani_classify_response(r, ctx, status,
                                                ctx->sse.error_type);
        return ngx_http_tokenbiryani_decide(r, ctx);
    }

    now = ngx_http_tokenbiryani_now_ms();

    if (now - ctx->attempt_ms
        >= (int64_t) (tmcf->tbcf->retry_first_token_grace_seconds * 1000))
    {
        /*
         * Slow but alive: past the grace period the stream is the
         * client's at the first bytes that come, and is not retried.
         */

        ctx->grace_commit = 1;

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "tokenbiryani: %*s: no content delta from account "
                      "\"%V\" after %Lms: committing the stream",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      &ctx->account->id, now - ctx->attempt_ms);

        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    if (ctx->peek_eof || u->buffer.last == u->buffer.end) {
        /* a stream without content, or a prelude too big to hold */
        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    if (ctx->uconf && u->peer.connection) {
        /* silence is measured from the last bytes */
        ngx_add_timer(u->peer.connection->read, ctx->uconf->read_timeout);
    }

    return NGX_AGAIN;
}


/*
 * The SSE parser's two line buffers (2 x 16 KB): too big for a request
 * pool, so taken from a small per-worker stock of them and given back when
 * the request ends, instead of a malloc() and a free() per stream.
 */

#define NGX_HTTP_TB_SSE_STOCK  32

static u_char      *ngx_http_tokenbiryani_sse_stock[NGX_HTTP_TB_SSE_STOCK];
static ngx_uint_t   ngx_http_tokenbiryani_sse_nstock;


static u_char *
ngx_http_tokenbiryani_sse_buffers(ngx_http_request_t *r)
{
    u_char              *p;
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    if (ngx_http_tokenbiryani_sse_nstock) {
        p = ngx_http_tokenbiryani_sse_stock[--ngx_http_tokenbiryani_sse_nstock];

    } else {
        p = ngx_alloc(2 * TB_SSE_LINE_MAX, r->connection->log);
        if (p == NULL) {
            return NULL;
        }
    }

    cln->handler = ngx_http_tokenbiryani_sse_buffers_free;
    cln->data = p;

    return p;
}


static void
ngx_http_tokenbiryani_sse_buffers_free(void *data)
{
    if (ngx_http_tokenbiryani_sse_nstock < NGX_HTTP_TB_SSE_STOCK) {
        ngx_http_tokenbiryani_sse_stock[ngx_http_tokenbiryani_sse_nstock++] =
                                                                         data;
        return;
    }

    ngx_free(data);
}


/*
 * An error response's body, whole or as much as the buffer holds, for the
 * classifier: it is peeked, never consumed, so that a response returned to
 * the client goes out as it came.
 */

static ngx_int_t
ngx_http_tokenbiryani_error_body(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    off_t                 want, m;
    size_t                n;
    ngx_int_t             rc;
    ngx_buf_t             tmp;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (!u->headers_in.chunked) {
        ctx->errbody = ctx->body_start;
        ctx->errbody_len = u->buffer.last - ctx->body_start;

        if (u->headers_in.content_length_n < 0) {
            /* delimited by the close: what came with the headers */
            return NGX_OK;
        }

        want = ngx_min(u->headers_in.content_length_n,
                       (off_t) (u->buffer.end - ctx->body_start));

        if ((off_t) ctx->errbody_len < want) {
            return NGX_AGAIN;
        }

        ctx->errbody_len = (size_t) want;

        return NGX_OK;
    }

    /* a chunked body is decoded into a buffer of its own */

    if (ctx->errbuf == NULL) {
        ctx->errbuf = ngx_pnalloc(r->pool, u->conf->buffer_size);
        if (ctx->errbuf == NULL) {
            return NGX_ERROR;
        }
    }

    ctx->errbody = ctx->errbuf;

    ngx_memzero(&tmp, sizeof(ngx_buf_t));
    tmp.pos = ctx->peek_pos;
    tmp.last = u->buffer.last;

    for ( ;; ) {
        rc = ngx_http_parse_chunked(r, &tmp, &ctx->peek_chunked);

        if (rc == NGX_OK) {
            m = ngx_min((off_t) (tmp.last - tmp.pos), ctx->peek_chunked.size);
            n = ngx_min((size_t) m, u->conf->buffer_size - ctx->errbody_len);

            ngx_memcpy(ctx->errbody + ctx->errbody_len, tmp.pos, n);
            ctx->errbody_len += n;

            tmp.pos += (size_t) m;
            ctx->peek_chunked.size -= m;
            continue;
        }

        break;
    }

    ctx->peek_pos = tmp.pos;

    if (rc == NGX_AGAIN && u->buffer.last < u->buffer.end
        && ctx->errbody_len < u->conf->buffer_size)
    {
        return NGX_AGAIN;
    }

    /* the last chunk, a full buffer, or a broken encoding: classify */

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_classify_response(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status,
    const char *stream_error)
{
    tb_response_t                       resp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_memzero(&resp, sizeof(tb_response_t));

    resp.status = (int) status;
    resp.body = ctx->errbody_len ? ctx->errbody : NULL;
    resp.body_len = ctx->errbody_len;
    resp.stream_error = stream_error;
    resp.retry_after_ms = ctx->obs.retry_after_ms;
    resp.reset_ms = tb_rl_obs_blocked_until(&ctx->obs);
    resp.now = ngx_http_tokenbiryani_now_ms();

    ctx->retry_after_ms = ctx->obs.retry_after_ms;

    tb_classify(&resp, tmcf->tbcf, &ctx->outcome);
    ctx->outcome_set = 1;
}


/* a classified response: to the client, or on to the next attempt */

static ngx_int_t
ngx_http_tokenbiryani_decide(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    if (ctx->outcome.rule->request == TB_REQ_RETURN) {
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    /* free_peer decides what comes next, with the outcome applied */
    return NGX_HTTP_UPSTREAM_INVALID_HEADER;
}


static ngx_int_t
ngx_http_tokenbiryani_commit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_upstream_t               *u;
    ngx_http_tokenbiryani_loc_conf_t  *tlcf;

    u = r->upstream;

    /* hand the whole body on from its first byte */
    u->buffer.pos = ctx->body_start;

    ctx->committed = 1;

    if (ctx->kind == NGX_HTTP_TB_MESSAGES && ctx->session
        && u->headers_in.status_n >= 200 && u->headers_in.status_n < 300)
    {
        /*
         * The account answering holds the conversation's prompt cache from
         * now on: its next turn, which may come the instant the client has
         * this answer, must find it the owner.
         */
        ngx_http_tokenbiryani_affinity_set(
            ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module),
            ctx->session, ctx->account->slot, ngx_http_tokenbiryani_now_ms());
    }

    if (ctx->uconf) {
        /* from here on the request timeout, between any two reads */
        tlcf = ngx_http_get_module_loc_conf(r, ngx_http_tokenbiryani_module);
        ctx->uconf->read_timeout = tlcf->upstream.read_timeout;
    }
    ctx->answered = ctx->account;

    if (ctx->is_sse) {
        ctx->ttft_ms = ngx_http_tokenbiryani_now_ms() - ctx->started_ms;
    }

    /* what the peek fed the parser is not fed again by the input filter */
    ctx->sse_skip = ctx->sse_fed;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: %*s answered by \"%V\" with %ui on "
                  "attempt %ui", (size_t) NGX_HTTP_TB_REQUEST_ID_LEN,
                  ctx->request_id, &ctx->account->id,
                  u->headers_in.status_n, ctx->attempts);

    return NGX_OK;
}


/*
 * Moves on to another account while one is left to try; the last attempt's
 * own response goes to the client as it is.
 */

static ngx_int_t
ngx_http_tokenbiryani_retry(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *why)
{
    if (ctx->kind == NGX_HTTP_TB_MESSAGES) {
        /* a broken response: free_peer classifies it as a transport error */
        return NGX_HTTP_UPSTREAM_INVALID_HEADER;
    }

    if (ngx_http_tokenbiryani_more_attempts(r, ctx)) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "tokenbiryani: %*s: account \"%V\" gave %s on attempt "
                      "%ui, retrying on another account",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      &ctx->account->id, why, ctx->attempts);

        ctx->retry_logged = 1;

        return NGX_HTTP_UPSTREAM_INVALID_HEADER;
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "tokenbiryani: %*s: account \"%V\" gave %s on attempt %ui, "
                  "the last one: passing it to the client",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  &ctx->account->id, why, ctx->attempts);

    if (ctx->status.code == 0) {
        /* nothing valid to pass on */
        ctx->retry_logged = 1;
        return NGX_HTTP_UPSTREAM_INVALID_HEADER;
    }

    return ngx_http_tokenbiryani_commit(r, ctx);
}


ngx_uint_t
ngx_http_tokenbiryani_more_attempts(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (ctx->attempts >= (ngx_uint_t) tmcf->tbcf->retry_max_attempts) {
        return 0;
    }

    return ngx_http_tokenbiryani_eligible_left(r, ctx);
}


static ngx_int_t
ngx_http_tokenbiryani_filter_init_upstream(void *data)
{
    ngx_http_request_t  *r = data;

    ngx_http_upstream_t          *u;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    u = r->upstream;
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    ngx_memzero(&ctx->chunked, sizeof(ngx_http_chunked_t));

    if (r->method == NGX_HTTP_HEAD
        || u->headers_in.status_n == NGX_HTTP_NO_CONTENT
        || u->headers_in.status_n == NGX_HTTP_NOT_MODIFIED)
    {
        /*
         * No body follows, whatever the length headers say.  An upstream
         * that sends one anyway would leave it on the connection: a HEAD's
         * connection is not reused.
         */
        u->length = 0;
        u->keepalive = r->method != NGX_HTTP_HEAD
                       && !u->headers_in.connection_close
                       && u->buffer.pos == u->buffer.last;
        ctx->stream_done = 1;

    } else if (u->headers_in.chunked) {
        /* the end is the last chunk; EOF before it is a broken stream */
        u->length = -1;

    } else if (u->headers_in.content_length_n == 0) {
        u->length = 0;
        u->keepalive = !u->headers_in.connection_close
                       && u->buffer.pos == u->buffer.last;
        ctx->stream_done = 1;

    } else {
        u->length = u->headers_in.content_length_n;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_input_filter(void *data, ssize_t bytes)
{
    ngx_http_request_t  *r = data;

    u_char                       *start;
    ngx_int_t                     rc;
    ngx_uint_t                    overlong;
    ngx_buf_t                    *b, *buf;
    ngx_chain_t                  *cl, **ll;
    ngx_http_upstream_t          *u;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    u = r->upstream;
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (!u->headers_in.chunked) {
        start = u->buffer.last;

        /*
         * Bytes past the Content-Length are not this response's, and could
         * be read as the next one's: the connection is not kept.
         */
        overlong = (u->length >= 0 && bytes > u->length);

        rc = ngx_http_upstream_non_buffered_filter(data, bytes);

        if (ctx->is_sse) {
            ngx_http_tokenbiryani_feed_sse(ctx, start, start + bytes);

        } else {
            ngx_http_tokenbiryani_keep_json(r, ctx, start, start + bytes);
        }

        if (u->length == 0) {
            ctx->stream_done = 1;
            u->keepalive = !u->headers_in.connection_close && !overlong;
        }

        return rc;
    }

    buf = &u->buffer;
    buf->pos = buf->last;
    buf->last += bytes;

    for (cl = u->out_bufs, ll = &u->out_bufs; cl; cl = cl->next) {
        ll = &cl->next;
    }

    for ( ;; ) {

        rc = ngx_http_parse_chunked(r, buf, &ctx->chunked);

        if (rc == NGX_OK) {

            /* a chunk's data: pass it on and flush, one event at a time */

            cl = ngx_chain_get_free_buf(r->pool, &u->free_bufs);
            if (cl == NULL) {
                return NGX_ERROR;
            }

            *ll = cl;
            ll = &cl->next;

            b = cl->buf;

            b->flush = 1;
            b->memory = 1;

            b->pos = buf->pos;
            b->tag = u->output.tag;

            if (buf->last - buf->pos >= ctx->chunked.size) {
                buf->pos += (size_t) ctx->chunked.size;
                b->last = buf->pos;
                ctx->chunked.size = 0;

            } else {
                ctx->chunked.size -= buf->last - buf->pos;
                buf->pos = buf->last;
                b->last = buf->last;
            }

            if (ctx->is_sse) {
                ngx_http_tokenbiryani_feed_sse(ctx, b->pos, b->last);

            } else {
                ngx_http_tokenbiryani_keep_json(r, ctx, b->pos, b->last);
            }

            continue;
        }

        if (rc == NGX_DONE) {

            /* the last chunk: the body is complete, the connection reusable */

            ctx->stream_done = 1;
            u->keepalive = !u->headers_in.connection_close;
            u->length = 0;

            if (buf->pos != buf->last) {
                ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                              "tokenbiryani: account \"%V\" sent data after "
                              "the last chunk", &ctx->account->id);
                u->keepalive = 0;
            }

            break;
        }

        if (rc == NGX_AGAIN) {
            break;
        }

        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "tokenbiryani: account \"%V\" sent an invalid chunked "
                      "response", &ctx->account->id);

        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_feed_sse(ngx_http_tokenbiryani_ctx_t *ctx, u_char *p,
    u_char *last)
{
    size_t    skip;
    unsigned  seen;

    if (ctx->sse_skip) {
        skip = ngx_min((size_t) (last - p), (size_t) ctx->sse_skip);
        ctx->sse_skip -= skip;
        p += skip;
    }

    if (p == last) {
        return;
    }

    seen = tb_sse_feed(&ctx->sse, p, last - p);

    if ((seen & TB_SSE_ERROR) && ctx->committed) {
        ctx->error_after_commit = 1;
    }
}


/*
 * A JSON Message ends with its usage: keep the body (up to 1 MB; larger
 * ones settle on the estimate) to read it when the response is complete.
 */

static void
ngx_http_tokenbiryani_keep_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, u_char *p, u_char *last)
{
    u_char  *buf;
    size_t   n, size;

    n = last - p;

    if (n == 0 || ctx->json_overflow || ctx->kind != NGX_HTTP_TB_MESSAGES
        || r->upstream->headers_in.status_n != NGX_HTTP_OK)
    {
        return;
    }

    if (ctx->json_len + n > 1024 * 1024) {
        ctx->json_overflow = 1;
        return;
    }

    size = ctx->json ? ngx_align(ctx->json_len, 4096) : 0;

    if (ctx->json == NULL || ctx->json_len + n > size) {
        size = ngx_align(ctx->json_len + n, 4096) * 2;

        buf = ngx_pnalloc(r->pool, size);
        if (buf == NULL) {
            ctx->json_overflow = 1;
            return;
        }

        if (ctx->json_len) {
            ngx_memcpy(buf, ctx->json, ctx->json_len);
        }

        ctx->json = buf;
    }

    ngx_memcpy(ctx->json + ctx->json_len, p, n);
    ctx->json_len += n;
}


/*
 * A response that was the client's and ended badly is the account's
 * failure all the same: an error event of the upstream's own, or a body
 * cut short.
 */

static void
ngx_http_tokenbiryani_broken_outcome(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_int_t rc)
{
    tb_response_t                       resp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    ngx_memzero(&resp, sizeof(tb_response_t));

    if (ctx->is_sse && ctx->error_after_commit) {
        resp.status = NGX_HTTP_OK;
        resp.stream_error = ctx->sse.error_type;

    } else if (!(ctx->stream_done || (ctx->is_sse && ctx->sse.stop))) {
        resp.status = 0;
        resp.timed_out = (rc == NGX_HTTP_GATEWAY_TIME_OUT);

    } else {
        return;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    resp.retry_after_ms = -1;
    resp.now = ngx_http_tokenbiryani_now_ms();

    tb_classify(&resp, tmcf->tbcf, &ctx->outcome);
}


static void
ngx_http_tokenbiryani_abort_request(ngx_http_request_t *r)
{
    return;
}


static void
ngx_http_tokenbiryani_finalize_request(ngx_http_request_t *r, ngx_int_t rc)
{
    u_char                       *p;
    size_t                        len;
    ngx_buf_t                    *b;
    ngx_chain_t                   out;
    const char                   *type;
    ngx_http_upstream_t          *u;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    u = r->upstream;

    /* what the response said it used, before the lease is settled */

    if (ctx->committed && ctx->is_sse) {
        ctx->usage = ctx->sse.usage;

    } else if (ctx->committed && ctx->json && !ctx->json_overflow) {
        (void) tb_usage_merge(&ctx->usage, ctx->json, ctx->json_len,
                              "usage");
    }

    if (ctx->committed && ctx->outcome_set
        && ctx->outcome.kind == TB_KIND_OK
        && rc != NGX_HTTP_CLIENT_CLOSED_REQUEST && !r->connection->error)
    {
        ngx_http_tokenbiryani_broken_outcome(r, ctx, rc);
    }

    /*
     * A stream is complete at its last chunk or, when it is delimited by
     * the connection's close, at message_stop.
     */

    if (!u->header_sent || !ctx->is_sse || ctx->stream_done || ctx->sse.stop
        || ctx->error_after_commit || rc == NGX_HTTP_CLIENT_CLOSED_REQUEST
        || r->connection->error)
    {
        return;
    }

    /*
     * The stream broke after the client started reading it: it cannot be
     * retried, so it ends with exactly one Anthropic error event.
     */

    type = (rc == NGX_HTTP_GATEWAY_TIME_OUT) ? "timeout_error" : "api_error";

    len = sizeof("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
                 "\"\",\"message\":\"the upstream stream from account  was "
                 "interrupted after it began; the response is incomplete\"},"
                 "\"request_id\":\"\"}\n\n") - 1
          + ngx_strlen(type) + ctx->account->id.len
          + NGX_HTTP_TB_REQUEST_ID_LEN;

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return;
    }

    p = ngx_sprintf(b->last, "event: error\ndata: {\"type\":\"error\","
                    "\"error\":{\"type\":\"%s\",\"message\":\"the upstream "
                    "stream from account %V was interrupted after it began; "
                    "the response is incomplete\"},\"request_id\":\"%*s\"}"
                    "\n\n", type, &ctx->account->id,
                    (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id);
    b->last = p;
    b->flush = 1;

    /* rc 0: the upstream core sends the last buffer itself */
    b->last_buf = (rc != 0);

    out.buf = b;
    out.next = NULL;

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "tokenbiryani: %*s: the stream from account \"%V\" broke "
                  "after the commit point; ending it with an error event",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  &ctx->account->id);

    ctx->error_after_commit = 1;

    (void) ngx_http_output_filter(r, &out);
}
