/*
 * tokenbiryani: the balancer.  Each attempt of a request picks an account
 * in peer.get, which runs before every connect, and rewrites the request
 * header with that account's credential there (reinit_request would be too
 * late: it is skipped when the failed try never sent its request).  Idle
 * upstream connections are kept per account and per worker, TLS sessions
 * too.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_shm.h"


static ngx_int_t ngx_http_tokenbiryani_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_tokenbiryani_get_peer(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_tokenbiryani_free_peer(ngx_peer_connection_t *pc,
    void *data, ngx_uint_t state);
static void ngx_http_tokenbiryani_classify_transport(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_connection_t *c);
static void ngx_http_tokenbiryani_describe(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_note_attempt(
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_connection_t *c,
    ngx_uint_t failed);
static ngx_uint_t ngx_http_tokenbiryani_eligible(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a);
static ngx_uint_t ngx_http_tokenbiryani_model_allowed(
    tb_account_conf_t *ac, tb_body_t *body);
static ngx_int_t ngx_http_tokenbiryani_cached_connection(
    ngx_peer_connection_t *pc, ngx_http_tokenbiryani_account_t *a);
static void ngx_http_tokenbiryani_keep_connection(ngx_peer_connection_t *pc,
    ngx_http_request_t *r, ngx_http_tokenbiryani_account_t *a);
static void ngx_http_tokenbiryani_idle_close_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_idle_dummy_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_close_idle(ngx_connection_t *c);

#if (NGX_HTTP_SSL)
static ngx_int_t ngx_http_tokenbiryani_set_session(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_tokenbiryani_save_session(ngx_peer_connection_t *pc,
    void *data);
#endif


/*
 * The module's own upstream{}, not registered with the upstream module: it
 * has no servers, only this balancer, so no user upstream name can clash.
 */

ngx_http_upstream_srv_conf_t *
ngx_http_tokenbiryani_upstream_add(ngx_conf_t *cf)
{
    ngx_http_upstream_srv_conf_t  *uscf;

    uscf = ngx_pcalloc(cf->pool, sizeof(ngx_http_upstream_srv_conf_t));
    if (uscf == NULL) {
        return NULL;
    }

    ngx_str_set(&uscf->host, "tokenbiryani");
    uscf->file_name = cf->conf_file->file.name.data;
    uscf->line = cf->conf_file->line;
    uscf->no_port = 1;
    uscf->peer.init = ngx_http_tokenbiryani_init_peer;

    return uscf;
}


static ngx_int_t
ngx_http_tokenbiryani_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_upstream_t  *u;

    u = r->upstream;

    u->peer.data = r;
    u->peer.get = ngx_http_tokenbiryani_get_peer;
    u->peer.free = ngx_http_tokenbiryani_free_peer;

    /* the module decides about every further try in peer.free */
    u->peer.tries = 1;

#if (NGX_HTTP_SSL)
    u->peer.set_session = ngx_http_tokenbiryani_set_session;
    u->peer.save_session = ngx_http_tokenbiryani_save_session;
#endif

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_get_peer(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_request_t *r = data;

    int64_t                           now;
    ngx_addr_t                       *addr;
    ngx_http_upstream_t              *u;
    __typeof__(((ngx_http_tokenbiryani_ctx_t *) 0)->tries[0])  *t;
    ngx_http_tokenbiryani_ctx_t      *ctx;
    ngx_http_tokenbiryani_account_t  *a;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    u = r->upstream;

    if (ctx->kind == NGX_HTTP_TB_MESSAGES) {

        /* every attempt is decided (and leased) before its connect */

        if (ctx->pausing || ctx->next == NULL) {
            if (!ctx->pausing) {
                ngx_http_tokenbiryani_arm_dispatch(r, ctx);
            }

            return ngx_http_tokenbiryani_pause(r, ctx, pc);
        }

        a = ctx->next;
        ctx->next = NULL;

    } else {
        a = ngx_http_tokenbiryani_pick(r, ctx);
    }

    if (a == NULL) {
        /* nginx answers 502, which the filter turns into an API error */
        pc->tries = 0;

        if (ctx->last_error.len == 0) {
            ngx_str_set(&ctx->last_error, "no account left to try");
        }

        return NGX_BUSY;
    }

    ctx->account = a;
    ctx->tried[a->index] |= NGX_HTTP_TB_TRIED;
    ctx->attempts++;

    ngx_http_tokenbiryani_reset_attempt(r, ctx);

    now = ngx_http_tokenbiryani_now_ms();

    ngx_http_tokenbiryani_shm_attempt_start(a, ctx->lease != NULL, now);
    ctx->inflight = 1;
    ctx->attempt_ms = now;
    ctx->outcome_set = 0;
    ctx->stalled = 0;
    ctx->retry_after_ms = -1;
    ctx->errbody_len = 0;

    if (ctx->uconf) {
        /* a stream waits for its first bytes prelude_timeout at most */
        ctx->uconf->read_timeout = ngx_http_tokenbiryani_prelude_timeout(r);
    }

    if (ctx->attempts <= 8) {
        t = &ctx->tries[ctx->attempts - 1];
        t->account = a->index;
        t->start_ms = now;
        t->status = 0;
        t->kind = TB_NKINDS;
        t->latency_ms = 0;
    }

    addr = &a->addrs[(ctx->attempts - 1) % a->naddrs];

    pc->sockaddr = addr->sockaddr;
    pc->socklen = addr->socklen;
    pc->name = &addr->name;
    pc->cached = 0;
    pc->connection = NULL;

#if (NGX_HTTP_SSL)
    u->ssl = a->tls;
    u->ssl_name = a->ssl_name;
#endif

    if (a->tls) {
        ngx_str_set(&u->schema, "https://");

    } else {
        ngx_str_set(&u->schema, "http://");
    }

    if (ngx_http_tokenbiryani_build_request_header(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, pc->log, 0,
                   "tokenbiryani: attempt %ui on account \"%V\" (%V)",
                   ctx->attempts, &a->id, pc->name);

    return ngx_http_tokenbiryani_cached_connection(pc, a);
}


static void
ngx_http_tokenbiryani_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    ngx_http_request_t *r = data;

    ngx_uint_t                          failed, more, leased, ok, messages;
    ngx_connection_t                   *c;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    a = ctx->account;
    c = pc->connection;

    failed = (state & NGX_PEER_FAILED) ? 1 : 0;
    leased = (ctx->lease != NULL);
    messages = (ctx->kind == NGX_HTTP_TB_MESSAGES);

    ngx_http_tokenbiryani_note_attempt(ctx, c, failed);

    if (failed && pc->cached && ctx->status.code == 0
        && !(c && (c->read->timedout || c->write->timedout))
        && (r->upstream->state == NULL
            || r->upstream->state->bytes_received == 0))
    {

        /*
         * An idle connection the upstream had already closed: not the
         * account's fault.  The attempt is taken again, on the same
         * account if it is still the best choice.
         */

        if (ctx->inflight) {
            (void) ngx_http_tokenbiryani_shm_attempt_end(tmcf, a, leased, NULL,
                                             0, NULL, 0, ctx->probed,
                                             ngx_http_tokenbiryani_now_ms());
            ctx->probed = 0;
            ngx_http_tokenbiryani_route_settle(r, ctx, 0);
            ctx->inflight = 0;
        }

        ctx->tried[a->index] &= ~NGX_HTTP_TB_TRIED;
        ctx->attempts--;
        pc->tries = 1;

        if (messages && !r->connection->error) {
            switch (ngx_http_tokenbiryani_dispatch(r, ctx)) {
            case NGX_HTTP_TB_GO:
                break;
            case NGX_HTTP_TB_FAIL:
                ngx_http_tokenbiryani_arm_fail(r, ctx);
                ctx->pausing = 1;
                break;
            default:
                ctx->pausing = 1;
                break;
            }
        }

        return;
    }

    if (ctx->inflight) {

        if (messages && failed && !ctx->outcome_set) {
            ngx_http_tokenbiryani_classify_transport(r, ctx, c);
        }

        if (ctx->outcome_set) {
            ngx_http_tokenbiryani_describe(r, ctx);

            if (ctx->attempts && ctx->attempts <= 8) {
                ctx->tries[ctx->attempts - 1].kind = ctx->outcome.kind;
            }
        }

        if (ngx_http_tokenbiryani_shm_attempt_end(tmcf, a, leased,
                                   messages && ctx->outcome_set
                                   ? &ctx->outcome : NULL,
                                   ctx->model_hash, ctx->body.model,
                                   ctx->body.model_len, ctx->probed,
                                   ngx_http_tokenbiryani_now_ms()))
        {
            ngx_log_error(NGX_LOG_WARN, pc->log, 0,
                          "tokenbiryani: account \"%V\": circuit open after "
                          "%L failures in a row", &a->id,
                          (int64_t) tmcf->breaker.threshold);
        }

        ctx->probed = 0;

        ok = !failed && ctx->committed
             && ctx->status.code >= 200 && ctx->status.code < 300
             && (!messages
                 || (ctx->outcome_set && ctx->outcome.kind == TB_KIND_OK));

        ngx_http_tokenbiryani_route_settle(r, ctx, ok);
        ctx->inflight = 0;
    }

    if (!failed) {
        if (messages) {
            ngx_http_tokenbiryani_log_settlement(r, ctx, a, "done");
        }

        if (c && r->upstream->keepalive) {
            ngx_http_tokenbiryani_keep_connection(pc, r, a);
        }

        return;
    }

    if (messages) {
        ngx_http_tokenbiryani_attempt_over(r, ctx, pc, failed);
        return;
    }

    more = ngx_http_tokenbiryani_more_attempts(r, ctx);

    if (ctx->retry_logged) {
        /* the response itself was the failure, already said so */
        ctx->retry_logged = 0;

    } else {
        if (c && (c->read->timedout || c->write->timedout)) {
            ngx_str_set(&ctx->last_error, "timed out");

        } else if (ctx->status.code == 0) {
            ngx_str_set(&ctx->last_error, "connection failed");

        } else {
            ngx_str_set(&ctx->last_error, "broke off");
        }

        ngx_log_error(NGX_LOG_WARN, pc->log, 0,
                      "tokenbiryani: %*s: account \"%V\" %V on attempt %ui, "
                      "%s", (size_t) NGX_HTTP_TB_REQUEST_ID_LEN,
                      ctx->request_id, &a->id, &ctx->last_error,
                      ctx->attempts,
                      more ? "retrying on another account"
                           : "no attempts left");
    }

    pc->tries = more ? 1 : 0;
}


/* a failure without a response to classify: no connection, a timeout */

static void
ngx_http_tokenbiryani_classify_transport(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_connection_t *c)
{
    tb_response_t                       resp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_memzero(&resp, sizeof(tb_response_t));

    resp.timed_out = (c && (c->read->timedout || c->write->timedout));
    resp.retry_after_ms = -1;
    resp.now = ngx_http_tokenbiryani_now_ms();

    /* a stream's silence before its first delta is a stall */
    resp.stalled = resp.timed_out && ctx->body.stream && ctx->uconf
                   && !ctx->committed;

    tb_classify(&resp, tmcf->tbcf, &ctx->outcome);
    ctx->outcome_set = 1;
}


/* the attempt in a few words, for the logs and the client's error */

static void
ngx_http_tokenbiryani_describe(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    u_char                             *p;
    u_char                              buf[128];
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    switch (ctx->outcome.kind) {

    case TB_KIND_STALL:
        p = ngx_snprintf(buf, sizeof(buf), "sent nothing for %.1fs before "
                         "its first content delta",
                         tmcf->tbcf->retry_prelude_timeout_seconds);
        break;

    case TB_KIND_TIMEOUT:
        p = ngx_snprintf(buf, sizeof(buf), "timed out");
        break;

    case TB_KIND_TRANSPORT:
        p = ngx_snprintf(buf, sizeof(buf), "%s",
                         ctx->status.code ? "broke off" : "connection failed");
        break;

    default:
        if (ctx->is_sse && ctx->sse.error) {
            p = ngx_snprintf(buf, sizeof(buf), "gave stream error %s",
                             ctx->sse.error_type[0] ? ctx->sse.error_type
                                                    : "(untyped)");
        } else {
            p = ngx_snprintf(buf, sizeof(buf), "gave status %ui",
                             ctx->status.code);
        }

        break;
    }

    if (ctx->outcome.kind != TB_KIND_OK && ctx->outcome.kind != TB_KIND_CLIENT
        && ctx->outcome.kind != TB_KIND_UNKNOWN)
    {
        p = ngx_snprintf(p, buf + sizeof(buf) - p, " (%s)",
                         ctx->outcome.rule->name);
    }

    ctx->last_error.data = ngx_pnalloc(r->pool, p - buf);
    if (ctx->last_error.data == NULL) {
        ctx->last_error.len = 0;
        return;
    }

    ngx_memcpy(ctx->last_error.data, buf, p - buf);
    ctx->last_error.len = p - buf;
}


/* what the attempt came to, for the inspector */

static void
ngx_http_tokenbiryani_note_attempt(ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_connection_t *c, ngx_uint_t failed)
{
    if (ctx->attempts == 0 || ctx->attempts > 8) {
        return;
    }

    /* the kind, a class of the taxonomy, once the attempt is classified */
    ctx->tries[ctx->attempts - 1].kind = TB_NKINDS;
    ctx->tries[ctx->attempts - 1].status = ctx->status.code;
    ctx->tries[ctx->attempts - 1].latency_ms = ngx_http_tokenbiryani_now_ms()
                                    - ctx->tries[ctx->attempts - 1].start_ms;
}


ngx_http_tokenbiryani_account_t *
ngx_http_tokenbiryani_pick(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_uint_t                          i, n, start;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    n = tmcf->accounts.nelts;

    if (n == 0) {
        return NULL;
    }

    a = tmcf->accounts.elts;

    /* round robin over the whole pool, shared by every worker */

    start = ngx_http_tokenbiryani_shm_rr_next(tmcf) % n;

    for (i = 0; i < n; i++) {
        if (ngx_http_tokenbiryani_eligible(r, ctx, &a[(start + i) % n])) {
            return &a[(start + i) % n];
        }
    }

    return NULL;
}


ngx_uint_t
ngx_http_tokenbiryani_eligible_left(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_uint_t                          i;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (ngx_http_tokenbiryani_eligible(r, ctx, &a[i])) {
            return 1;
        }
    }

    return 0;
}


static ngx_uint_t
ngx_http_tokenbiryani_eligible(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a)
{
    size_t                i;
    const tb_key_conf_t  *kc;

    if (!a->supported || !a->conf->enabled || a->sh->disabled
        || (ctx->tried[a->index] & NGX_HTTP_TB_TRIED))
    {
        return 0;
    }

    kc = ctx->key;

    if (kc && kc->pool.n) {
        for (i = 0; i < kc->pool.n; i++) {
            if (ngx_strcmp(kc->pool.items[i], a->conf->id) == 0) {
                break;
            }
        }

        if (i == kc->pool.n) {
            return 0;
        }
    }

    return ngx_http_tokenbiryani_model_allowed(a->conf, &ctx->body);
}


static ngx_uint_t
ngx_http_tokenbiryani_model_allowed(tb_account_conf_t *ac, tb_body_t *body)
{
    if (!body->has_model) {
        return 1;
    }

    return tb_models_match(ac->models.items, ac->models.n, body->model,
                           body->model_len);
}


ngx_uint_t
ngx_http_tokenbiryani_account_sets(ngx_http_tokenbiryani_account_t *a,
    ngx_str_t *name)
{
    size_t  i;

    for (i = 0; i < a->conf->headers.n; i++) {
        if (ngx_strlen(a->conf->headers.items[i].key) == name->len
            && ngx_strncasecmp((u_char *) a->conf->headers.items[i].key,
                               name->data, name->len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_tokenbiryani_cached_connection(ngx_peer_connection_t *pc,
    ngx_http_tokenbiryani_account_t *a)
{
    ngx_queue_t                        *q;
    ngx_connection_t                   *c;
    ngx_http_tokenbiryani_keepalive_t  *item;

    for (q = ngx_queue_head(&a->cache);
         q != ngx_queue_sentinel(&a->cache);
         q = ngx_queue_next(q))
    {
        item = ngx_queue_data(q, ngx_http_tokenbiryani_keepalive_t, queue);
        c = item->connection;

        if (ngx_memn2cmp((u_char *) &item->sockaddr, (u_char *) pc->sockaddr,
                         item->socklen, pc->socklen)
            != 0)
        {
            continue;
        }

        ngx_queue_remove(q);
        ngx_queue_insert_head(&a->free, q);

        c->idle = 0;
        c->sent = 0;
        c->data = NULL;
        c->log = pc->log;
        c->read->log = pc->log;
        c->write->log = pc->log;
        c->pool->log = pc->log;

        if (c->read->timer_set) {
            ngx_del_timer(c->read);
        }

        pc->connection = c;
        pc->cached = 1;

        return NGX_DONE;
    }

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_keep_connection(ngx_peer_connection_t *pc,
    ngx_http_request_t *r, ngx_http_tokenbiryani_account_t *a)
{
    ngx_queue_t                        *q;
    ngx_connection_t                   *c;
    ngx_http_upstream_t                *u;
    ngx_http_tokenbiryani_keepalive_t  *item;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    u = r->upstream;
    c = pc->connection;

    if (tmcf->keepalive == 0
        || c->read->eof || c->read->error || c->read->timedout
        || c->write->error || c->write->timedout
        || c->requests >= tmcf->keepalive_requests
        || !u->request_body_sent
        || ngx_terminate || ngx_exiting
        || ngx_handle_read_event(c->read, 0) != NGX_OK)
    {
        return;
    }

    if (ngx_queue_empty(&a->free)) {
        q = ngx_queue_last(&a->cache);
        ngx_queue_remove(q);

        item = ngx_queue_data(q, ngx_http_tokenbiryani_keepalive_t, queue);
        ngx_http_tokenbiryani_close_idle(item->connection);

    } else {
        q = ngx_queue_head(&a->free);
        ngx_queue_remove(q);

        item = ngx_queue_data(q, ngx_http_tokenbiryani_keepalive_t, queue);
    }

    ngx_queue_insert_head(&a->cache, q);

    item->connection = c;
    item->socklen = pc->socklen;
    ngx_memcpy(&item->sockaddr, pc->sockaddr, pc->socklen);

    pc->connection = NULL;

    c->read->delayed = 0;
    ngx_add_timer(c->read, tmcf->keepalive_timeout);

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    c->write->handler = ngx_http_tokenbiryani_idle_dummy_handler;
    c->read->handler = ngx_http_tokenbiryani_idle_close_handler;

    c->data = item;
    c->idle = 1;
    c->log = ngx_cycle->log;
    c->read->log = ngx_cycle->log;
    c->write->log = ngx_cycle->log;
    c->pool->log = ngx_cycle->log;

    if (c->read->ready) {
        ngx_http_tokenbiryani_idle_close_handler(c->read);
    }
}


static void
ngx_http_tokenbiryani_idle_close_handler(ngx_event_t *ev)
{
    int                                 n;
    char                                buf[1];
    ngx_connection_t                   *c;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_keepalive_t  *item;

    c = ev->data;

    if (c->close || c->read->timedout) {
        goto close;
    }

    /* an idle connection that becomes readable was closed or misbehaves */

    n = recv(c->fd, buf, 1, MSG_PEEK);

    if (n == -1 && ngx_socket_errno == NGX_EAGAIN) {
        ev->ready = 0;

        if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
            goto close;
        }

        return;
    }

close:

    item = c->data;
    a = item->account;

    ngx_http_tokenbiryani_close_idle(c);

    ngx_queue_remove(&item->queue);
    ngx_queue_insert_head(&a->free, &item->queue);
}


static void
ngx_http_tokenbiryani_idle_dummy_handler(ngx_event_t *ev)
{
    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "tokenbiryani: idle connection write event");
}


static void
ngx_http_tokenbiryani_close_idle(ngx_connection_t *c)
{
#if (NGX_HTTP_SSL)

    if (c->ssl) {
        c->ssl->no_wait_shutdown = 1;
        c->ssl->no_send_shutdown = 1;

        if (ngx_ssl_shutdown(c) == NGX_AGAIN) {
            c->ssl->handler = ngx_http_tokenbiryani_close_idle;
            return;
        }
    }

#endif

    ngx_destroy_pool(c->pool);
    ngx_close_connection(c);
}


#if (NGX_HTTP_SSL)

static ngx_int_t
ngx_http_tokenbiryani_set_session(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_request_t *r = data;

    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (ctx->account->ssl_session == NULL) {
        return NGX_OK;
    }

    return ngx_ssl_set_session(pc->connection, ctx->account->ssl_session);
}


static void
ngx_http_tokenbiryani_save_session(ngx_peer_connection_t *pc, void *data)
{
    ngx_http_request_t *r = data;

    ngx_ssl_session_t            *session;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    session = ngx_ssl_get_session(pc->connection);
    if (session == NULL) {
        return;
    }

    if (ctx->account->ssl_session) {
        ngx_ssl_free_session(ctx->account->ssl_session);
    }

    ctx->account->ssl_session = session;
}

#endif
