/*
 * tokenbiryani: the upstream callbacks of one attempt.
 *
 * create_request links the header (rebuilt per attempt in peer.get, with
 * that attempt's credential) in front of shallow copies of the body.
 * process_header parses the status line and the headers, mirroring the
 * rate-limit headers as they pass; then the prelude: an error response is
 * classified from its body, peeked and never consumed; a streamed 200 is
 * held back - de-chunked into the SSE parser without moving u->buffer.pos
 * - until its first content_block_delta, the commit point after which
 * nothing is retried.  Returning NGX_HTTP_UPSTREAM_INVALID_HEADER ends the
 * attempt as a failure: peer.free decides what comes next.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_upstream.h"
#include "ngx_http_tokenbiryani_batches.h"
#include "ngx_http_tokenbiryani_outcome.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_platform.h"
#include "tb_oauth.h"


static ngx_int_t ngx_http_tokenbiryani_create_request(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_reinit_request(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_process_status_line(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_process_header(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_process_prelude(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_peek_stream(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_sse_in(void *data, u_char *p,
    size_t n);
static ngx_int_t ngx_http_tokenbiryani_error_body(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_errbody_copy(void *data, u_char *p,
    size_t n);
static ngx_int_t ngx_http_tokenbiryani_hold(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_unchunk(ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_unchunk_move(void *data, u_char *p,
    size_t n);
static ngx_int_t ngx_http_tokenbiryani_decide(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_commit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_input_filter_init(void *data);
static ngx_int_t ngx_http_tokenbiryani_input_filter(void *data,
    ssize_t bytes);
static void ngx_http_tokenbiryani_body_bytes_in(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, u_char *p, u_char *last);
static tb_sse_t *ngx_http_tokenbiryani_sse_get(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_sse_put(void *data);
static void ngx_http_tokenbiryani_abort_request(ngx_http_request_t *r);
static u_char *ngx_http_tokenbiryani_decimal(u_char *p, off_t n);
static void ngx_http_tokenbiryani_finalize_request(ngx_http_request_t *r,
    ngx_int_t rc);


/*
 * The request headers the client's request never passes upstream, by the
 * length of their names: every header of every attempt is looked up here,
 * with one comparison for most.
 */
static const char  *ngx_http_tokenbiryani_skip_headers[][2] = {
    [2]  = { "te", NULL },
    [4]  = { "host", NULL },
    [6]  = { "expect", NULL },
    [7]  = { "trailer", "upgrade" },
    [9]  = { "x-api-key", NULL },
    [10] = { "connection", "keep-alive" },
    [13] = { "authorization", NULL },
    [14] = { "content-length", NULL },
    /* the gateway reads usage from the stream: identity encoding only */
    [15] = { "accept-encoding", NULL },
    [16] = { "proxy-connection", NULL },
    [17] = { "transfer-encoding", NULL },
    [18] = { "proxy-authenticate", NULL },
    [19] = { "proxy-authorization", NULL }
};


static ngx_uint_t
ngx_http_tokenbiryani_skip_header(ngx_table_elt_t *h)
{
    ngx_uint_t    i;
    const char  **names;

    if (h->key.len >= sizeof(ngx_http_tokenbiryani_skip_headers)
                      / sizeof(ngx_http_tokenbiryani_skip_headers[0]))
    {
        return 0;
    }

    names = ngx_http_tokenbiryani_skip_headers[h->key.len];

    for (i = 0; i < 2 && names[i] != NULL; i++) {
        if (ngx_memcmp(h->lowcase_key, names[i], h->key.len) == 0) {
            return 1;
        }
    }

    return 0;
}


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


ngx_int_t
ngx_http_tokenbiryani_upstream_start(ngx_http_request_t *r,
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

    u->input_filter_init = ngx_http_tokenbiryani_input_filter_init;
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
     * never moves the positions the next attempt starts from.  A body goes
     * up with POST only, and always with its length.
     */

    ctx->body_len = 0;

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


/* n >= 0 in decimal */

static u_char *
ngx_http_tokenbiryani_decimal(u_char *p, off_t n)
{
    u_char  *q, tmp[NGX_OFF_T_LEN];

    q = tmp + sizeof(tmp);

    do {
        *--q = (u_char) ('0' + n % 10);
        n /= 10;
    } while (n > 0);

    return ngx_cpymem(p, q, tmp + sizeof(tmp) - q);
}


ngx_int_t
ngx_http_tokenbiryani_upstream_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    size_t                            len;
    ngx_buf_t                        *b;
    ngx_str_t                         betas;
    ngx_uint_t                        j, version, oauth;
    ngx_table_elt_t                  *h;
    const char                       *beta;
    tb_account_conf_t                *ac;
    ngx_http_tokenbiryani_hiter_t     it;
    ngx_http_tokenbiryani_account_t  *a;

    a = ctx->account;
    ac = a->conf;

    if (a->platform) {
        return ngx_http_tokenbiryani_platform_header(r, ctx);
    }

    if (ctx->plat) {
        /* after a platform's attempt: the client's body, from its start */
        ngx_http_tokenbiryani_platform_body_back(ctx);
    }

    /*
     * The operator's subscription: its token as a bearer (per worker), and
     * the OAuth beta after the client's own
     */

    oauth = (ac->type == TB_ACCOUNT_OAUTH);
    len = 0;

#if (NGX_SUPPRESS_WARN)
    beta = NULL;
#endif

    if (oauth) {
        beta = ac->options.beta_header ? ac->options.beta_header
                                       : TB_OAUTH_BETA;

        if (ngx_http_tokenbiryani_header_join(r, "anthropic-beta",
                                              sizeof("anthropic-beta") - 1,
                                              &betas)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        len = a->bearer.len + sizeof("anthropic-beta: ," CRLF) - 1
              + betas.len + ngx_strlen(beta);
    }

    len += r->method_name.len + 1 + a->path_prefix.len + r->uri.len
          + 1 + r->args.len + sizeof(" HTTP/1.1" CRLF) - 1
          + sizeof("Host: " CRLF) - 1 + a->host_header.len
          + a->auth_header.len
          + sizeof("Content-Length: " CRLF) - 1 + NGX_OFF_T_LEN
          + sizeof("anthropic-version: 2023-06-01" CRLF) - 1
          + sizeof(CRLF) - 1;

    ngx_http_tokenbiryani_headers_begin(&it, &r->headers_in.headers);

    while ((h = ngx_http_tokenbiryani_header_next(&it)) != NULL) {
        len += h->key.len + sizeof(": " CRLF) - 1 + h->value.len;
    }

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_ERROR;
    }

    /* the path and query string nginx parsed and the handler checked */

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

    if (oauth) {
        b->last = ngx_copy(b->last, a->bearer.data, a->bearer.len);
        b->last = ngx_cpymem(b->last, "anthropic-beta: ",
                             sizeof("anthropic-beta: ") - 1);

        if (betas.len) {
            b->last = ngx_copy(b->last, betas.data, betas.len);
            *b->last++ = ',';
        }

        b->last = ngx_cpymem(b->last, beta, ngx_strlen(beta));
        *b->last++ = CR; *b->last++ = LF;
    }

    if (r->method == NGX_HTTP_POST) {
        /* digits written here: a printf costs ten times as much */
        b->last = ngx_cpymem(b->last, "Content-Length: ",
                             sizeof("Content-Length: ") - 1);
        b->last = ngx_http_tokenbiryani_decimal(b->last, ctx->body_len);
        *b->last++ = CR; *b->last++ = LF;
    }

    version = 0;

    ngx_http_tokenbiryani_headers_begin(&it, &r->headers_in.headers);

    while ((h = ngx_http_tokenbiryani_header_next(&it)) != NULL) {
        if (h->key.len > sizeof("x-tokenbiryani-") - 1
            && ngx_memcmp(h->lowcase_key, "x-tokenbiryani-",
                          sizeof("x-tokenbiryani-") - 1) == 0)
        {
            continue;
        }

        if (ngx_http_tokenbiryani_skip_header(h)) {
            continue;
        }

        if (oauth && h->key.len == sizeof("anthropic-beta") - 1
            && ngx_memcmp(h->lowcase_key, "anthropic-beta",
                          sizeof("anthropic-beta") - 1) == 0)
        {
            /* joined above, with the OAuth beta */
            continue;
        }

        /* the account's own headers win over the client's */

        for (j = 0; j < ac->headers.n; j++) {
            if (ngx_strlen(ac->headers.items[j].key) == h->key.len
                && ngx_strncasecmp((u_char *) ac->headers.items[j].key,
                                   h->key.data, h->key.len) == 0)
            {
                break;
            }
        }

        if (j < ac->headers.n) {
            continue;
        }

        if (h->key.len == sizeof("anthropic-version") - 1
            && ngx_memcmp(h->lowcase_key, "anthropic-version",
                          sizeof("anthropic-version") - 1) == 0)
        {
            version = 1;
        }

        b->last = ngx_copy(b->last, h->key.data, h->key.len);
        *b->last++ = ':'; *b->last++ = ' ';
        b->last = ngx_copy(b->last, h->value.data, h->value.len);
        *b->last++ = CR; *b->last++ = LF;
    }

    if (!version) {
        b->last = ngx_cpymem(b->last, "anthropic-version: 2023-06-01" CRLF,
                             sizeof("anthropic-version: 2023-06-01" CRLF) - 1);
    }

    *b->last++ = CR; *b->last++ = LF;

    /*
     * An upstream TLS connection buffers what it is given until a buffer
     * says to flush, and a kept-alive connection gets no write event that
     * would send it later: a request without a body ends here.  The
     * client's body ends in nginx's last_buf.
     */
    b->flush = 1;

    /* swap the buffer: a reinit resets pos to start on every link */
    ctx->hdr->buf = b;

    return NGX_OK;
}


void
ngx_http_tokenbiryani_upstream_reset(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_memzero(&ctx->resp, sizeof(ngx_http_tokenbiryani_response_t));
    tb_rl_obs_init(&ctx->resp.obs);

    if (ctx->sse) {
        tb_sse_init(ctx->sse, (u_char *) (ctx->sse + 1),
                    (u_char *) (ctx->sse + 1) + TB_SSE_LINE_MAX);
    }

    ngx_http_tokenbiryani_platform_reset(ctx);

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
    ngx_http_status_t            *status;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    u = r->upstream;
    status = &ctx->resp.status;

    rc = ngx_http_parse_status_line(r, &u->buffer, status);

    if (rc == NGX_AGAIN) {
        return rc;
    }

    if (rc == NGX_ERROR) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "tokenbiryani: account \"%V\" sent no valid HTTP/1.x "
                      "status line", &ctx->account->id);

        /* a broken response: peer.free classifies it as a transport error */
        return NGX_HTTP_UPSTREAM_INVALID_HEADER;
    }

    if (u->state && u->state->status == 0) {
        u->state->status = status->code;
    }

    u->headers_in.status_n = status->code;

    len = status->end - status->start;
    u->headers_in.status_line.len = len;
    u->headers_in.status_line.data = ngx_pnalloc(r->pool, len);
    if (u->headers_in.status_line.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(u->headers_in.status_line.data, status->start, len);

    if (status->http_version < NGX_HTTP_VERSION_11) {
        u->headers_in.connection_close = 1;
    }

    u->process_header = ngx_http_tokenbiryani_process_header;

    /* a subscription's answer says its windows in headers of its own */
    if (ctx->account->conf->type == TB_ACCOUNT_OAUTH) {
        if (ctx->rare == NULL) {
            ctx->rare = ngx_pcalloc(r->pool,
                                    sizeof(ngx_http_tokenbiryani_rare_t));
            if (ctx->rare == NULL) {
                return NGX_ERROR;
            }
        }

        tb_unified_init(&ctx->rare->unified);
        ctx->resp.unified = 1;
    }

    return ngx_http_tokenbiryani_process_header(r);
}


static ngx_int_t
ngx_http_tokenbiryani_process_header(ngx_http_request_t *r)
{
    u_char                             *lowcase;
    size_t                              len;
    ngx_int_t                           rc;
    ngx_table_elt_t                    *h;
    u_char                              name[64];
    ngx_http_upstream_t                *u;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_upstream_header_t         *hh;
    ngx_http_upstream_main_conf_t      *umcf;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

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
                tb_ascii_lower(name, r->header_name_start, len);
            }

            if (ctx->account->platform) {
                /* tb_rl_obs_header reads retry-after, the one they send */
                (void) tb_rl_obs_header(&ctx->resp.obs, lowcase, len,
                                        r->header_start,
                                        r->header_end - r->header_start,
                                        ngx_http_tokenbiryani_now_ms());

                if (!ngx_http_tokenbiryani_platform_response_header(ctx,
                                 lowcase, len, r->header_start,
                                 r->header_end - r->header_start))
                {
                    continue;
                }

            } else if (tb_rl_obs_header(&ctx->resp.obs, lowcase, len,
                                        r->header_start,
                                        r->header_end - r->header_start,
                                        ngx_http_tokenbiryani_now_ms()))
            {
                if (ctx->resp.unified) {
                    /* a subscription's windows (unified-*): the
                     * operator's, as the nine are (the gateway's own 429
                     * says them again) */
                    (void) tb_unified_header(&ctx->rare->unified, lowcase,
                                       len, r->header_start,
                                       r->header_end - r->header_start,
                                       ngx_http_tokenbiryani_now_ms());
                }

                if (!ctx->admin
                    && !(len == sizeof("retry-after") - 1
                         && ngx_strncmp(lowcase, "retry-after", len) == 0))
                {
                    continue;
                }
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
                tb_ascii_lower(h->lowcase_key, h->key.data, h->key.len);
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

        return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                   "sent an invalid header", NGX_HTTP_UPSTREAM_INVALID_HEADER);
    }

    /*
     * Every Messages response, errors included, teaches the mirror
     * something.  count_tokens and models have limits of their own.
     */

    ctx->resp.headers_ms = ngx_http_tokenbiryani_now_ms();

    if (ctx->kind == NGX_HTTP_TB_MESSAGES) {
        tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

        /* leases are numbered in the order they were taken: sending order */
        ctx->resp.obs.seq = ctx->route.lease.id;
        ctx->resp.obs.sent_ms = ctx->attempt_ms;

        (void) ngx_http_tokenbiryani_zone_observe(&tmcf->zone,
                              ctx->account->slot, &ctx->resp.obs,
                              ctx->resp.unified ? &ctx->rare->unified : NULL,
                              ctx->resp.status.code,
                              ctx->resp.headers_ms);
    }

    if (u->headers_in.chunked) {
        u->headers_in.content_length_n = -1;
    }

    ctx->resp.is_sse = u->headers_in.content_type
                       && u->headers_in.content_type->value.len >= 17
                       && ngx_strncasecmp(
                              u->headers_in.content_type->value.data,
                              (u_char *) "text/event-stream", 17) == 0;

    if (ctx->account->platform == TB_ACCOUNT_BEDROCK
        && u->headers_in.status_n == NGX_HTTP_OK
        && u->headers_in.content_type
        && u->headers_in.content_type->value.len >= 34
        && ngx_strncasecmp(u->headers_in.content_type->value.data,
                           (u_char *) "application/vnd.amazon.eventstream",
                           34) == 0)
    {
        /* decoded and sent on as the SSE the client asked for */
        ctx->resp.evs = 1;
        ctx->resp.is_sse = 1;
        ngx_str_set(&u->headers_in.content_type->value, "text/event-stream");
    }

    ctx->resp.body_start = u->buffer.pos;
    ctx->resp.peek_pos = u->buffer.pos;

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
    int64_t                             now;
    ngx_int_t                           rc;
    ngx_uint_t                          status;
    ngx_http_upstream_t                *u;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    u = r->upstream;
    status = u->headers_in.status_n;

    if (status >= 400) {

        /* the error body tells a spend limit from a rate limit */

        rc = ngx_http_tokenbiryani_error_body(r, ctx);

        if (rc != NGX_OK) {
            return rc;
        }

        if (ctx->account->platform) {
            /* said as Anthropic would: for the classifier and the client */
            status = ngx_http_tokenbiryani_platform_error(r, ctx, status);
        }

        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);

        return ngx_http_tokenbiryani_decide(r, ctx);
    }

    if (status != NGX_HTTP_OK || !ctx->resp.is_sse
        || ctx->kind != NGX_HTTP_TB_MESSAGES)
    {
        if (status >= 200 && status < 300 && !ctx->resp.is_sse) {

            /*
             * A JSON answer is the client's only once it is whole: one cut
             * short, broken or late is an attempt that failed.
             */

            rc = ngx_http_tokenbiryani_hold(r, ctx);

            if (rc != NGX_OK) {
                return rc;
            }
        }

        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    if (ctx->sse == NULL) {
        ctx->sse = ngx_http_tokenbiryani_sse_get(r);
        if (ctx->sse == NULL) {
            return NGX_ERROR;
        }
    }

    rc = ctx->resp.evs ? ngx_http_tokenbiryani_platform_peek(r, ctx)
                       : ngx_http_tokenbiryani_peek_stream(r, ctx);

    if (rc != NGX_OK) {
        return rc;
    }

    if (ctx->sse->delta) {
        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    if (ctx->sse->error) {
        ngx_http_tokenbiryani_classify_response(r, ctx, status,
                                                ctx->sse->error_type);
        return ngx_http_tokenbiryani_decide(r, ctx);
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    if (now - ctx->attempt_ms
        >= (int64_t) (tmcf->tbcf->retry_first_token_grace_seconds * 1000))
    {
        /*
         * Slow but alive: past the grace period the stream is the
         * client's at the first bytes that come, and is not retried.
         */

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "tokenbiryani: %*s: no content delta from account "
                      "\"%V\" after %Lms: committing the stream",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      &ctx->account->id, now - ctx->attempt_ms);

        ngx_http_tokenbiryani_classify_response(r, ctx, status, NULL);
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    if (ctx->resp.peek_eof || u->buffer.last == u->buffer.end
        || (ctx->resp.evs && ctx->resp.held >= u->conf->buffer_size))
    {
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
 * Peek: de-chunk what arrived of a stream into the SSE parser without
 * consuming u->buffer, so that a commit can hand the whole body on as
 * received.
 */

static ngx_int_t
ngx_http_tokenbiryani_peek_stream(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    size_t                n;
    ngx_int_t             rc;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (ctx->resp.peek_pos >= u->buffer.last
        || ctx->sse->delta || ctx->sse->error)
    {
        return NGX_OK;
    }

    if (!u->headers_in.chunked) {
        n = u->buffer.last - ctx->resp.peek_pos;
        (void) ngx_http_tokenbiryani_sse_in(ctx, ctx->resp.peek_pos, n);
        ctx->resp.peek_pos = u->buffer.last;
        return NGX_OK;
    }

    rc = ngx_http_tokenbiryani_dechunk(r, &ctx->resp.peek_pos, u->buffer.last,
                                       &ctx->resp.peek_chunked,
                                       ngx_http_tokenbiryani_sse_in, ctx);

    if (rc == NGX_DONE) {
        ctx->resp.peek_eof = 1;

    } else if (rc == NGX_ERROR) {
        return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                   "sent an invalid chunked stream",
                   NGX_HTTP_UPSTREAM_INVALID_HEADER);
    }

    return NGX_OK;
}


/* stream bytes into the SSE parser: enough once it saw a delta or an error */

static ngx_int_t
ngx_http_tokenbiryani_sse_in(void *data, u_char *p, size_t n)
{
    ngx_http_tokenbiryani_ctx_t *ctx = data;

    (void) tb_sse_feed(ctx->sse, p, n);
    ctx->resp.sse_fed += n;

    return (ctx->sse->delta || ctx->sse->error) ? NGX_DECLINED : NGX_OK;
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
    off_t                              want;
    ngx_int_t                          rc;
    ngx_http_upstream_t               *u;
    ngx_http_tokenbiryani_response_t  *resp;

    u = r->upstream;
    resp = &ctx->resp;

    if (!u->headers_in.chunked) {
        resp->errbody = resp->body_start;
        resp->errbody_len = u->buffer.last - resp->body_start;

        if (u->headers_in.content_length_n < 0) {
            /* delimited by the close: what came with the headers */
            return NGX_OK;
        }

        want = ngx_min(u->headers_in.content_length_n,
                       (off_t) (u->buffer.end - resp->body_start));

        if ((off_t) resp->errbody_len < want) {
            return NGX_AGAIN;
        }

        resp->errbody_len = (size_t) want;

        return NGX_OK;
    }

    /* a chunked body is decoded into a buffer of its own */

    if (resp->errbody == NULL) {
        resp->errbody = ngx_pnalloc(r->pool, u->conf->buffer_size);
        if (resp->errbody == NULL) {
            return NGX_ERROR;
        }
    }

    rc = ngx_http_tokenbiryani_dechunk(r, &resp->peek_pos, u->buffer.last,
                                       &resp->peek_chunked,
                                       ngx_http_tokenbiryani_errbody_copy, ctx);

    if (rc == NGX_AGAIN && u->buffer.last < u->buffer.end
        && resp->errbody_len < u->conf->buffer_size)
    {
        return NGX_AGAIN;
    }

    /* the last chunk, a full buffer, or a broken encoding: classify */

    return NGX_OK;
}


/* an error's chunk data, decoded into resp.errbody as far as it has room */

static ngx_int_t
ngx_http_tokenbiryani_errbody_copy(void *data, u_char *p, size_t n)
{
    ngx_http_tokenbiryani_ctx_t *ctx = data;

    size_t                             size;
    ngx_http_tokenbiryani_response_t  *resp;

    resp = &ctx->resp;
    size = ctx->request->upstream->conf->buffer_size;

    n = ngx_min(n, size - resp->errbody_len);

    ngx_memcpy(resp->errbody + resp->errbody_len, p, n);
    resp->errbody_len += n;

    return NGX_OK;
}


/*
 * Holds a 2xx body that is not a stream until it is complete, in a buffer
 * of its own (ctx->hold) that grows to its Content-Length at once, or by
 * doubling for a chunked one, each old buffer let go as it is replaced:
 * O(size) memory and copying, at most the bound and a read.  u->buffer is
 * emptied after each read so that the next one has room.  NGX_OK once the
 * body is whole (resp.whole), or when it cannot or need not be held: no
 * body, one delimited by the connection's close, or one larger than
 * retry.hold_response_bytes, which goes on as it comes.  NGX_AGAIN for
 * more; NGX_HTTP_UPSTREAM_INVALID_HEADER for a broken chunked encoding or
 * a Messages body that is not JSON.
 */

static ngx_int_t
ngx_http_tokenbiryani_hold(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    off_t                               want, clen;
    u_char                             *end, *old;
    size_t                              n, size, bound;
    ngx_int_t                           rc;
    ngx_http_upstream_t                *u;
    ngx_http_tokenbiryani_response_t   *resp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    u = r->upstream;
    resp = &ctx->resp;
    clen = u->headers_in.content_length_n;

    if (r->method == NGX_HTTP_HEAD
        || u->headers_in.status_n == NGX_HTTP_NO_CONTENT
        || (!u->headers_in.chunked && clen <= 0))
    {
        /* no body, or one only the close delimits: nothing to hold */
        return NGX_OK;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    bound = (size_t) tmcf->tbcf->retry_hold_response_bytes;

    if (!u->headers_in.chunked && clen > (off_t) bound) {
        return NGX_OK;
    }

    n = u->buffer.last - resp->peek_pos;

    if (u->headers_in.chunked) {
        want = n;

    } else {
        want = ngx_min((off_t) n, clen - (off_t) resp->held);

        if ((off_t) n > want) {
            /* bytes past its length: not this response's */
            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "tokenbiryani: account \"%V\" sent more than its "
                          "Content-Length: its connection is not kept",
                          &ctx->account->id);
            resp->overlong = 1;
        }
    }

    if (resp->held + want > ctx->hold_size) {
        if (u->headers_in.chunked) {
            /*
             * Doubling, up to the bound and a read more at once: a body
             * larger than the bound goes on as it comes from there, in
             * this buffer, which needs no more.
             */
            size = ngx_max(2 * ctx->hold_size, u->conf->buffer_size);

            if (size >= bound) {
                size = bound + u->conf->buffer_size;
            }

            size = ngx_max(size, resp->held + (size_t) want);

        } else {
            size = (size_t) clen;
        }

        old = ctx->hold;

        if (ngx_http_tokenbiryani_hold_resize(r, ctx, size) != NGX_OK) {
            return NGX_ERROR;
        }

        /* what it held is in the new buffer: the old one let go now, not
         * with the request */
        if (old) {
            (void) ngx_pfree(r->pool, old);
        }
    }

    if (u->headers_in.chunked) {

        /* where the last chunk is: the raw bytes are held as they came */

        end = resp->peek_pos;

        rc = ngx_http_tokenbiryani_dechunk(r, &end, u->buffer.last,
                                           &resp->peek_chunked, NULL, NULL);

        if (rc == NGX_ERROR) {
            return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                       "sent an invalid chunked response",
                       NGX_HTTP_UPSTREAM_INVALID_HEADER);
        }

        if (rc == NGX_DONE) {
            resp->done = 1;
            resp->overlong = (end != u->buffer.last);
            want = end - resp->peek_pos;
        }
    }

    if (want) {
        ngx_memcpy(ctx->hold + resp->held, resp->peek_pos, (size_t) want);
        resp->held += (size_t) want;
    }

    /* the next read goes where this one began */
    u->buffer.last = resp->body_start;
    resp->peek_pos = resp->body_start;

    if (!u->headers_in.chunked) {
        resp->done = ((off_t) resp->held == clen);
    }

    if (!resp->done) {

        if (resp->held > bound) {
            /* a chunked body larger than the bound: on as it comes */
            return NGX_OK;
        }

        return NGX_AGAIN;
    }

    resp->whole = 1;

    if (ctx->kind != NGX_HTTP_TB_COUNT_TOKENS
        && ctx->kind != NGX_HTTP_TB_MODELS && u->headers_in.chunked)
    {
        ngx_http_tokenbiryani_unchunk(ctx);
    }

    /* a batch's answer: the batch kept, its results_url made the gateway's */

    if (ctx->kind == NGX_HTTP_TB_BATCHES
        && ngx_http_tokenbiryani_object_answered(r, ctx) != NGX_OK)
    {
        return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                   "answered 2xx with a body that is not the batch asked for",
                   NGX_HTTP_UPSTREAM_INVALID_HEADER);
    }

    /* a Message is read once: valid JSON, and its usage */

    if (ctx->kind == NGX_HTTP_TB_MESSAGES
        && tb_usage_message(&ctx->usage, ctx->hold, resp->held) != 0)
    {
        return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                   "answered 2xx with a body that is not JSON",
                   NGX_HTTP_UPSTREAM_INVALID_HEADER);
    }

    return NGX_OK;
}


/*
 * A whole chunked Message, decoded in place: it goes on to the client with
 * a Content-Length, and its usage is read from it.
 */

static void
ngx_http_tokenbiryani_unchunk(ngx_http_tokenbiryani_ctx_t *ctx)
{
    u_char               *pos, *w;
    ngx_http_chunked_t    chunked;
    ngx_http_upstream_t  *u;

    u = ctx->request->upstream;

    ngx_memzero(&chunked, sizeof(ngx_http_chunked_t));
    pos = ctx->hold;
    w = ctx->hold;

    (void) ngx_http_tokenbiryani_dechunk(ctx->request, &pos,
                                         ctx->hold + ctx->resp.held, &chunked,
                                         ngx_http_tokenbiryani_unchunk_move,
                                         &w);

    ctx->resp.held = w - ctx->hold;

    u->headers_in.chunked = 0;
    u->headers_in.content_length_n = ctx->resp.held;
}


/* decoded bytes are never ahead of the raw ones: memmove */

static ngx_int_t
ngx_http_tokenbiryani_unchunk_move(void *data, u_char *p, size_t n)
{
    u_char  **w = data;

    ngx_memmove(*w, p, n);
    *w += n;

    return NGX_OK;
}


/* a classified response: to the client, or on to the next attempt */

static ngx_int_t
ngx_http_tokenbiryani_decide(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    if (ctx->outcome.rule->request == TB_REQ_RETURN) {
        return ngx_http_tokenbiryani_commit(r, ctx);
    }

    /* peer.free decides what comes next, with the outcome applied */
    return NGX_HTTP_UPSTREAM_INVALID_HEADER;
}


static ngx_int_t
ngx_http_tokenbiryani_commit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                             cached;
    ngx_uint_t                          share;
    ngx_http_upstream_t                *u;
    ngx_http_tokenbiryani_loc_conf_t   *tlcf;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    u = r->upstream;

    if (ctx->resp.replaced) {
        /* a platform's error, in Anthropic's words */
        ngx_http_tokenbiryani_platform_error_commit(r, ctx);

    } else if (ctx->resp.evs) {
        /* the SSE decoded so far, then each read decoded as it comes */
        if (ngx_http_tokenbiryani_platform_commit(r, ctx) != NGX_OK) {
            return NGX_ERROR;
        }

    } else if (ctx->resp.held) {
        /* the body held: the upstream hands it on from there */
        u->buffer.start = ctx->hold;
        u->buffer.pos = ctx->hold;
        u->buffer.last = ctx->hold + ctx->resp.held;
        u->buffer.end = ctx->hold + ctx->hold_size;

    } else {
        /* hand the whole body on from its first byte */
        u->buffer.pos = ctx->resp.body_start;
    }

    ctx->committed = 1;

    if (ctx->kind == NGX_HTTP_TB_MESSAGES && ctx->route.session
        && u->headers_in.status_n >= 200 && u->headers_in.status_n < 300)
    {
        /*
         * The account answering holds the conversation's prompt cache from
         * now on: its next turn, which may come the instant the client has
         * this answer, must find it the owner.
         */
        tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

        cached = (ctx->usage.cache_read_input_tokens > 0
                  ? ctx->usage.cache_read_input_tokens : 0)
                 + (ctx->usage.cache_creation_input_tokens > 0
                    ? ctx->usage.cache_creation_input_tokens : 0);

        share = ngx_http_tokenbiryani_affinity_set(&tmcf->zone,
                    ctx->route.session,
                    ctx->account->slot, cached,
                    ngx_http_tokenbiryani_now_ms(), 0);

        /* and so do the peers, when there are */
        ngx_http_tokenbiryani_store_owner_put(tmcf, ctx->route.session,
                                              &ctx->account->id, cached,
                                              share);
    }

    if (ctx->uconf) {
        /* from here on the request timeout, between any two reads */
        tlcf = ngx_http_get_module_loc_conf(r, ngx_http_tokenbiryani_module);
        ctx->uconf->read_timeout = tlcf->upstream.read_timeout;
    }

    ctx->answered = ctx->account;

    if (ctx->resp.is_sse) {
        ctx->ttft_ms = ngx_http_tokenbiryani_now_ms() - ctx->started_ms;
    }

    /* what the peek fed the parser is not fed again by the input filter */
    ctx->resp.sse_skip = ctx->resp.sse_fed;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: %*s answered by \"%V\" with %ui on "
                  "attempt %ui", (size_t) NGX_HTTP_TB_REQUEST_ID_LEN,
                  ctx->request_id, &ctx->account->id,
                  u->headers_in.status_n, ctx->attempts);

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_input_filter_init(void *data)
{
    ngx_http_request_t  *r = data;

    ngx_http_upstream_t          *u;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    u = r->upstream;
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (ctx->resp.evs) {
        /* ends at the stream's own end (ngx_http_tokenbiryani_platform.c) */
        u->length = -1;
        return NGX_OK;
    }

    ngx_memzero(&ctx->resp.chunked, sizeof(ngx_http_chunked_t));

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
        ctx->resp.done = 1;

    } else if (u->headers_in.chunked) {
        /* the end is the last chunk; EOF before it is a broken stream */
        u->length = -1;

    } else if (u->headers_in.content_length_n == 0) {
        u->length = 0;
        u->keepalive = !u->headers_in.connection_close
                       && u->buffer.pos == u->buffer.last;
        ctx->resp.done = 1;

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
    ngx_http_chunked_t           *chunked;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    u = r->upstream;
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (ctx->resp.evs) {
        return ngx_http_tokenbiryani_platform_filter(r, ctx, bytes);
    }

    if (!u->headers_in.chunked) {
        start = u->buffer.last;

        /*
         * Bytes past the Content-Length are not this response's, and could
         * be read as the next one's: the connection is not kept.
         */
        overlong = (u->length >= 0 && bytes > u->length)
                   || ctx->resp.overlong;

        rc = ngx_http_upstream_non_buffered_filter(data, bytes);

        ngx_http_tokenbiryani_body_bytes_in(r, ctx, start, start + bytes);

        if (u->length == 0) {
            ctx->resp.done = 1;
            u->keepalive = !u->headers_in.connection_close && !overlong;

            if (ctx->object) {
                ngx_http_tokenbiryani_object_done(r, ctx);
            }
        }

        return rc;
    }

    buf = &u->buffer;
    buf->pos = buf->last;
    buf->last += bytes;

    chunked = &ctx->resp.chunked;

    for (cl = u->out_bufs, ll = &u->out_bufs; cl; cl = cl->next) {
        ll = &cl->next;
    }

    for ( ;; ) {

        rc = ngx_http_parse_chunked(r, buf, chunked);

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

            if (buf->last - buf->pos >= chunked->size) {
                buf->pos += (size_t) chunked->size;
                b->last = buf->pos;
                chunked->size = 0;

            } else {
                chunked->size -= buf->last - buf->pos;
                buf->pos = buf->last;
                b->last = buf->last;
            }

            ngx_http_tokenbiryani_body_bytes_in(r, ctx, b->pos, b->last);

            continue;
        }

        if (rc == NGX_DONE) {

            /* the last chunk: the body is complete, the connection reusable */

            ctx->resp.done = 1;
            u->keepalive = !u->headers_in.connection_close;
            u->length = 0;

            if (ctx->object) {
                ngx_http_tokenbiryani_object_done(r, ctx);
            }

            if (buf->pos != buf->last || ctx->resp.overlong) {
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

        return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                   "sent an invalid chunked response", NGX_ERROR);
    }

    return NGX_OK;
}


/*
 * Decoded body bytes on their way to the client: a stream's go through
 * the SSE parser for its usage and errors (what the peek fed it, it has
 * seen).  A JSON answer was held whole: its usage is read there.
 */

static void
ngx_http_tokenbiryani_body_bytes_in(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, u_char *p, u_char *last)
{
    size_t    skip;
    unsigned  seen;

    if (ctx->sse == NULL || !ctx->resp.is_sse) {
        if (ctx->object) {
            /* a batch's results, too large to hold: read as they pass */
            ngx_http_tokenbiryani_object_bytes(r, ctx, p, last);
        }

        return;
    }

    if (ctx->resp.sse_skip) {
        skip = ngx_min((size_t) (last - p), (size_t) ctx->resp.sse_skip);
        ctx->resp.sse_skip -= skip;
        p += skip;
    }

    if (p == last) {
        return;
    }

    seen = tb_sse_feed(ctx->sse, p, last - p);

    if ((seen & TB_SSE_ERROR) && ctx->committed) {
        ctx->resp.error_after_commit = 1;
    }
}


/*
 * The SSE parser and its two line buffers (2 x 16 KB): too big for a
 * request pool, so taken from a small per-worker stock and given back when
 * the request ends, instead of a malloc() and a free() per stream.
 */

#define NGX_HTTP_TB_SSE_STOCK  32
#define NGX_HTTP_TB_SSE_SIZE   (sizeof(tb_sse_t) + 2 * TB_SSE_LINE_MAX)

static tb_sse_t    *ngx_http_tokenbiryani_sse_stock[NGX_HTTP_TB_SSE_STOCK];
static ngx_uint_t   ngx_http_tokenbiryani_sse_nstock;


static tb_sse_t *
ngx_http_tokenbiryani_sse_get(ngx_http_request_t *r)
{
    tb_sse_t            *sse;
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    if (ngx_http_tokenbiryani_sse_nstock) {
        sse = ngx_http_tokenbiryani_sse_stock[
                                       --ngx_http_tokenbiryani_sse_nstock];

    } else {
        sse = ngx_alloc(NGX_HTTP_TB_SSE_SIZE, r->connection->log);
        if (sse == NULL) {
            return NULL;
        }
    }

    cln->handler = ngx_http_tokenbiryani_sse_put;
    cln->data = sse;

    tb_sse_init(sse, (u_char *) (sse + 1),
                (u_char *) (sse + 1) + TB_SSE_LINE_MAX);

    return sse;
}


static void
ngx_http_tokenbiryani_sse_put(void *data)
{
    if (ngx_http_tokenbiryani_sse_nstock < NGX_HTTP_TB_SSE_STOCK) {
        ngx_http_tokenbiryani_sse_stock[ngx_http_tokenbiryani_sse_nstock++] =
                                                                         data;
        return;
    }

    ngx_free(data);
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

    if (ctx->committed && ctx->resp.is_sse && ctx->sse) {
        ctx->usage = ctx->sse->usage;
    }

    if (ctx->committed && ctx->resp.classified
        && ctx->outcome.kind == TB_KIND_OK
        && rc != NGX_HTTP_CLIENT_CLOSED_REQUEST && !r->connection->error)
    {
        ngx_http_tokenbiryani_classify_broken(r, ctx, rc);
    }

    /*
     * A stream is complete at its last chunk or, when it is delimited by
     * the connection's close, at message_stop.
     */

    if (!u->header_sent || !ctx->resp.is_sse || ctx->sse == NULL
        || ctx->resp.done || ctx->sse->stop || ctx->resp.error_after_commit
        || rc == NGX_HTTP_CLIENT_CLOSED_REQUEST || r->connection->error)
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

    ctx->resp.error_after_commit = 1;

    (void) ngx_http_output_filter(r, &out);
}
