/*
 * tokenbiryani: the balancer.  Each attempt is routed (and leased) before
 * its connect; peer.get, which runs before every connect, takes that
 * account and rewrites the request header with its credential (the
 * upstream's reinit_request would be too late: it is skipped when the
 * failed try never sent its request).  peer.free ends the attempt: its
 * outcome applied to the account, its lease given back, and - when it
 * failed - the decision of what comes next (ngx_http_tokenbiryani_attempt.c).
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_balancer.h"
#include "ngx_http_tokenbiryani_upstream.h"
#include "ngx_http_tokenbiryani_outcome.h"
#include "ngx_http_tokenbiryani_route.h"
#include "ngx_http_tokenbiryani_attempt.h"
#include "ngx_http_tokenbiryani_keepalive.h"
#include "ngx_http_tokenbiryani_events.h"


static ngx_int_t ngx_http_tokenbiryani_init_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us);
static ngx_int_t ngx_http_tokenbiryani_get_peer(ngx_peer_connection_t *pc,
    void *data);
static void ngx_http_tokenbiryani_free_peer(ngx_peer_connection_t *pc,
    void *data, ngx_uint_t state);
static void ngx_http_tokenbiryani_end_attempt(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc,
    ngx_uint_t failed);

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

    int64_t                               now;
    ngx_addr_t                           *addr;
    ngx_http_upstream_t                  *u;
    ngx_http_tokenbiryani_ctx_t          *ctx;
    ngx_http_tokenbiryani_account_t      *a;
    ngx_http_tokenbiryani_attempt_log_t  *log;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    u = r->upstream;

    if (ctx->pausing || ctx->route.next == NULL) {
        /* the next attempt does not follow at once */
        return ngx_http_tokenbiryani_attempt_pause(r, ctx, pc);
    }

    a = ctx->route.next;
    ctx->route.next = NULL;

    ctx->account = a;
    ctx->marks[a->index] |= NGX_HTTP_TB_MARK_TRIED;
    ctx->attempts++;

    ngx_http_tokenbiryani_upstream_reset(r, ctx);

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    ngx_http_tokenbiryani_zone_attempt_start(&tmcf->zone, a->slot,
                                             ctx->route.lease.id != 0, now);
    ctx->inflight = 1;
    ctx->attempt_ms = now;

    if (ctx->uconf) {
        /* a stream waits for its first bytes prelude_timeout at most */
        ctx->uconf->read_timeout = ngx_http_tokenbiryani_prelude_timeout(r);
    }

    if (ctx->attempts <= NGX_HTTP_TB_INSPECT_ATTEMPTS) {
        log = &ctx->log[ctx->attempts - 1];
        log->account = (uint32_t) a->index;
        log->start_ms = now;
        log->status = 0;
        log->kind = (uint8_t) TB_NKINDS;
        log->latency_ms = 0;

        /* the decision that sent it here, for the inspector */
        log->eligible = (uint32_t) ctx->route.decision.eligible;
        log->score = (float) (ctx->route.decision.chosen >= 0
                     ? ctx->route.outs[ctx->route.decision.chosen].score : 0);
    }

    /* the account's addresses in turn, per worker: a retry takes the next */
    addr = &a->addrs[a->next_addr++ % a->naddrs];

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

    if (ngx_http_tokenbiryani_upstream_header(r, ctx) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, pc->log, 0,
                   "tokenbiryani: attempt %ui on account \"%V\" (%V)",
                   ctx->attempts, &a->id, pc->name);

    return ngx_http_tokenbiryani_keepalive_get(pc, a);
}


static void
ngx_http_tokenbiryani_free_peer(ngx_peer_connection_t *pc, void *data,
    ngx_uint_t state)
{
    ngx_http_request_t *r = data;

    ngx_uint_t                            failed;
    ngx_connection_t                     *c;
    ngx_http_tokenbiryani_ctx_t          *ctx;
    ngx_http_tokenbiryani_attempt_log_t  *log;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    c = pc->connection;

    failed = (state & NGX_PEER_FAILED) ? 1 : 0;

    if (ctx->attempts && ctx->attempts <= NGX_HTTP_TB_INSPECT_ATTEMPTS) {
        log = &ctx->log[ctx->attempts - 1];
        log->kind = (uint8_t) TB_NKINDS;
        log->status = (int16_t) ctx->resp.status.code;
        log->latency_ms = (int32_t) ngx_min(ngx_http_tokenbiryani_now_ms()
                                            - log->start_ms, INT32_MAX);
    }

    if (failed && pc->cached && ctx->resp.status.code == 0
        && !(c && (c->read->timedout || c->write->timedout))
        && (r->upstream->state == NULL
            || r->upstream->state->bytes_received == 0))
    {
        /*
         * An idle connection the upstream had already closed: not the
         * account's fault.  The attempt is taken again, on the same
         * account if it is still the best choice.
         */

        ngx_http_tokenbiryani_end_attempt(r, ctx, pc, 0);

        ctx->marks[ctx->account->index] &= ~NGX_HTTP_TB_MARK_TRIED;
        ctx->attempts--;

        ngx_http_tokenbiryani_attempt_again(r, ctx, pc);
        return;
    }

    ngx_http_tokenbiryani_end_attempt(r, ctx, pc, failed);

    if (!failed) {
        ngx_http_tokenbiryani_event_settlement(r, ctx, ctx->account, NGX_HTTP_TB_NEXT_DONE);

        if (c && r->upstream->keepalive) {
            ngx_http_tokenbiryani_keepalive_put(pc, r, ctx->account);
        }

        return;
    }

    ngx_http_tokenbiryani_attempt_failed(r, ctx, pc);
}


/*
 * The attempt is over for the account: its outcome applied (the account
 * action and the breaker; none when it was not the account's doing), its
 * lease given back, this worker's waiters told.
 */

static void
ngx_http_tokenbiryani_end_attempt(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc,
    ngx_uint_t failed)
{
    ngx_uint_t                          ok;
    const tb_outcome_t                 *o;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (!ctx->inflight) {
        return;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = ctx->account;

    if (failed && !ctx->resp.classified) {
        ngx_http_tokenbiryani_classify_transport(r, ctx, pc->connection);
    }

    o = NULL;

    if (ctx->resp.classified) {

        /* a failure in words, for the logs and the client's error */
        if (ctx->outcome.kind != TB_KIND_OK) {
            ngx_http_tokenbiryani_describe_outcome(r, ctx);
        }

        if (ctx->attempts && ctx->attempts <= NGX_HTTP_TB_INSPECT_ATTEMPTS) {
            ctx->log[ctx->attempts - 1].kind = (uint8_t) ctx->outcome.kind;
        }

        /*
         * count_tokens and models have rate limits of their own: their
         * 429 says nothing of the Messages windows the account cools for.
         */

        if (ctx->kind == NGX_HTTP_TB_MESSAGES
            || ctx->outcome.kind != TB_KIND_RATE_LIMIT)
        {
            o = &ctx->outcome;

        } else if (ctx->object) {
            /* the Batches and Files APIs' limits (batch operations a
             * minute): their 429 leaves this account out of the next
             * creates until its retry-after, a minute if it says none */
            ngx_http_tokenbiryani_zone_objects_limited(&tmcf->zone, a->slot,
                ngx_http_tokenbiryani_now_ms()
                + (ctx->resp.obs.retry_after_ms > 0
                   ? ctx->resp.obs.retry_after_ms : 60000));
        }
    }

    if (ngx_http_tokenbiryani_zone_attempt_end(&tmcf->zone, a->slot,
                                  ctx->route.lease.id != 0, o,
                                  ctx->route.model_hash,
                                  ctx->body.model, ctx->body.model_len,
                                  ctx->probed,
                                  a->conf->observable_limits
                                  ? 0 : a->conf->max_concurrency,
                                  ctx->attempt_ms,
                                  ngx_http_tokenbiryani_now_ms()))
    {
        ngx_log_error(NGX_LOG_WARN, pc->log, 0,
                      "tokenbiryani: account \"%V\": circuit open after "
                      "%L failures in a row", &a->id,
                      (int64_t) tmcf->zone.breaker.threshold);
    }

    /* the breaker has settled the probe, if this attempt was one */
    ctx->probed = 0;

    ok = !failed && ctx->committed
         && ctx->resp.status.code >= 200 && ctx->resp.status.code < 300
         && ctx->resp.classified && ctx->outcome.kind == TB_KIND_OK;

    ngx_http_tokenbiryani_route_settle(r, ctx, ok);
    ctx->inflight = 0;

    ngx_http_tokenbiryani_attempt_wake();
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
