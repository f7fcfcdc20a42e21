/*
 * tokenbiryani: the attempt loop.
 *
 * Admission decides (ngx_http_tokenbiryani_admit.c); this file acts: an
 * attempt starts on a fresh ngx_http_upstream_t, a failed one is followed
 * by another at once, after a backoff, after a wait in the queue, or by
 * the final error.
 *
 * An attempt that cannot be followed by another one at once gives its
 * ngx_http_upstream_t up: peer.get declines the next connect with the
 * upstream's cleanup detached, so nginx lets go of it without finalizing
 * the request (ngx_http_tokenbiryani_attempt_pause).  The request then
 * waits on its own event (ctx->wait.event) - a backoff, the queue's budget, an
 * error to send - and resumes on a fresh ngx_http_upstream_t.  Nothing
 * ever blocks a worker.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_attempt.h"
#include "ngx_http_tokenbiryani_spill.h"
#include "ngx_http_tokenbiryani_batches.h"
#include "ngx_http_tokenbiryani_admit.h"
#include "ngx_http_tokenbiryani_route.h"
#include "ngx_http_tokenbiryani_upstream.h"
#include "ngx_http_tokenbiryani_record.h"
#include "ngx_http_tokenbiryani_events.h"
#include "ngx_http_tokenbiryani_error.h"
#include "tb_hash.h"


/* what the request's wait event does when it fires */
#define NGX_HTTP_TB_WAIT_NONE          0
#define NGX_HTTP_TB_WAIT_ADMIT         1     /* a backoff ended */
#define NGX_HTTP_TB_WAIT_FAIL          2     /* send the error prepared */
#define NGX_HTTP_TB_WAIT_EXPIRE        3     /* the queue's budget ran out */

/* how often a worker with waiters looks at the queue */
#define NGX_HTTP_TB_TICK_MS            10

#define NGX_HTTP_TB_SCAN_MAX           256


static ngx_int_t ngx_http_tokenbiryani_attempt_next(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_enqueue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, uint64_t gen, int64_t now);
static void ngx_http_tokenbiryani_unqueue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t why, int64_t now);
static void ngx_http_tokenbiryani_tick_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_try_waiter(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);
static void ngx_http_tokenbiryani_arm(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t action, int64_t delay);
static void ngx_http_tokenbiryani_wait_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_wait_read(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_resume(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_send_fail(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_abandon(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_request_done(void *data);
static void ngx_http_tokenbiryani_spill_back(ngx_http_request_t *r);


/* this worker's waiters, and the tick that lets them try */
static ngx_queue_t   ngx_http_tokenbiryani_waiters;
static ngx_event_t   ngx_http_tokenbiryani_tick;


ngx_int_t
ngx_http_tokenbiryani_attempt_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_queue_init(&ngx_http_tokenbiryani_waiters);

    ngx_http_tokenbiryani_timer_init(&ngx_http_tokenbiryani_tick,
                                     ngx_http_tokenbiryani_tick_handler, tmcf,
                                     cycle->log);

    return NGX_OK;
}


void
ngx_http_tokenbiryani_attempt_begin(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t              delay;
    ngx_int_t            rc;
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    /* from here on the request leaves a record, and no lease behind */
    cln->handler = ngx_http_tokenbiryani_request_done;
    cln->data = ctx;

    rc = ngx_http_tokenbiryani_admit_request(r, ctx);

    if (rc == NGX_OK) {
        delay = ngx_http_tokenbiryani_admit_paced(r, ctx,
                                                  ngx_http_tokenbiryani_now_ms());

        if (delay > 0
            && ((ngx_http_tokenbiryani_main_conf_t *)
                ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module))
               ->tbcf->pacing_prefer_batch_lane_when_ahead
            && ngx_http_tokenbiryani_spill(r, ctx,
                                           ngx_http_tokenbiryani_spill_back, 1)
               == NGX_OK)
        {
            /* the spill lane's, at the batch price, rather than held */
            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "tokenbiryani: %*s: sent to the batch lane, the "
                          "pool's weekly budget being ahead of its pace",
                          (size_t) NGX_HTTP_TB_REQUEST_ID_LEN,
                          ctx->request_id);
            return;
        }

        if (delay > 0) {
            /* held back: the pool's weekly budget is ahead of its pace */
            ctx->wait.paced_ms = delay;

            ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                          "tokenbiryani: %*s: paced for %Lms, the pool's "
                          "weekly budget being ahead of its pace",
                          (size_t) NGX_HTTP_TB_REQUEST_ID_LEN,
                          ctx->request_id, delay);

            ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_ADMIT, delay);

            r->read_event_handler = ngx_http_tokenbiryani_wait_read;
            r->write_event_handler = ngx_http_request_empty_handler;
            return;
        }

        rc = ngx_http_tokenbiryani_attempt_next(r, ctx);
    }

    switch (rc) {

    case NGX_HTTP_TB_GO:
        if (ngx_http_tokenbiryani_upstream_start(r, ctx) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        }

        return;

    case NGX_HTTP_TB_WAIT:
        /* the queue or a backoff; the request is kept by its body */
        return;

    default:
        ngx_http_tokenbiryani_abandon(r, ctx);
        ngx_http_tokenbiryani_send_fail(r, ctx);
        return;
    }
}


/* GO with ctx->route.next leased, WAIT in the queue, or FAIL */

static ngx_int_t
ngx_http_tokenbiryani_attempt_next(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_int_t  rc;
    uint64_t   gen;

    rc = ngx_http_tokenbiryani_admit_attempt(r, ctx, &gen);

    if (rc != NGX_HTTP_TB_QUEUE) {
        return rc;
    }

    /* batch priority, the pool saturated: the spill lane, if it may */
    if (!ctx->spilled
        && ngx_http_tokenbiryani_spill(r, ctx,
                                       ngx_http_tokenbiryani_spill_back, 0)
           == NGX_OK)
    {
        return NGX_HTTP_TB_WAIT;
    }

    return ngx_http_tokenbiryani_enqueue(r, ctx, gen,
                                         ngx_http_tokenbiryani_now_ms());
}


/* the spill lane gave it back: the queue, as if it had never spilled */

static void
ngx_http_tokenbiryani_spill_back(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    rc = ngx_http_tokenbiryani_enqueue(r, ctx, 0,
                                       ngx_http_tokenbiryani_now_ms());

    if (rc == NGX_HTTP_TB_WAIT) {
        return;
    }

    ngx_http_tokenbiryani_abandon(r, ctx);
    ngx_http_tokenbiryani_send_fail(r, ctx);
}


ngx_int_t
ngx_http_tokenbiryani_attempt_pause(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc)
{
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (!ctx->pausing) {
        /* nothing was decided for this try: decide it on the next turn */
        ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_ADMIT, 0);
    }

    ctx->pausing = 0;

    pc->tries = 0;
    pc->cached = 0;
    pc->connection = NULL;

    if (r->connection->error) {
        /* nginx finalizes the request as a client abort */
        ngx_http_tokenbiryani_abandon(r, ctx);
        return NGX_DECLINED;
    }

    /*
     * The upstream's cleanup is detached and the request referenced once
     * more, so the NGX_DECLINED returned here makes nginx drop this
     * ngx_http_upstream_t (ngx_http_upstream_finalize_request sees no
     * cleanup and only releases the extra reference).
     */

    r->main->count++;

    if (u->cleanup) {
        *u->cleanup = NULL;
        u->cleanup = NULL;
    }

    r->read_event_handler = ngx_http_tokenbiryani_wait_read;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_DECLINED;
}


void
ngx_http_tokenbiryani_attempt_again(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc)
{
    pc->tries = 1;

    if (r->connection->error) {
        return;
    }

    switch (ngx_http_tokenbiryani_attempt_next(r, ctx)) {

    case NGX_HTTP_TB_GO:
        break;

    case NGX_HTTP_TB_FAIL:
        ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_FAIL, 0);
        ctx->pausing = 1;
        break;

    default:
        ctx->pausing = 1;
        break;
    }
}


/* a failed attempt settled: the event, and the log line saying what next */
static void
ngx_http_tokenbiryani_settled(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    ngx_uint_t next, const char *fmt, ...)
{
    u_char   *p;
    va_list   args;
    u_char    then[NGX_MAX_ERROR_STR];

    ngx_http_tokenbiryani_event_settlement(r, ctx, a, next);

    va_start(args, fmt);
    p = ngx_vslprintf(then, then + sizeof(then), fmt, args);
    va_end(args);

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "tokenbiryani: %*s: account \"%V\" %V on attempt %ui, %*s",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  &a->id, &ctx->last_error, ctx->attempts,
                  (size_t) (p - then), then);
}


/*
 * A failed attempt: what comes next.  GO keeps the ngx_http_upstream_t
 * for the next attempt; anything else gives it up (attempt_pause).
 */

void
ngx_http_tokenbiryani_attempt_failed(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc)
{
    int64_t                             delay, now;
    ngx_int_t                           rc;
    const tb_rule_t                    *rule;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = ctx->account;
    now = ngx_http_tokenbiryani_now_ms();

    if (r->connection->error || ctx->committed
        || (ctx->object && ngx_http_tokenbiryani_object_made(r, ctx)))
    {
        pc->tries = 0;
        ngx_http_tokenbiryani_event_settlement(r, ctx, a, NGX_HTTP_TB_NEXT_RETURNED);
        return;
    }

    if (!ctx->resp.classified) {
        /* never without one; a transport failure if it were */
        ctx->outcome.kind = TB_KIND_TRANSPORT;
        ctx->outcome.rule = &tb_rules[TB_KIND_TRANSPORT];
        ctx->resp.classified = 1;
    }

    rule = ctx->outcome.rule;

    if (rule->request == TB_REQ_RETRY_OTHER) {
        /* max_accounts counts the distinct accounts given up on */

        if (!(ctx->marks[a->index] & NGX_HTTP_TB_MARK_EXCLUDED)) {
            ctx->marks[a->index] |= NGX_HTTP_TB_MARK_EXCLUDED;
            ctx->excluded++;
        }

        ctx->marks[a->index] &= ~NGX_HTTP_TB_MARK_AGAIN;

    } else {
        /*
         * The same account may take it again, but only when no other can
         * now: a connection, a stream or a server that failed once is
         * likelier to fail again than another account is, whatever its
         * priority (ngx_http_tokenbiryani_admit_attempt).
         */
        ctx->marks[a->index] |= NGX_HTTP_TB_MARK_AGAIN;
    }

    pc->tries = 1;

    if (rule->request != TB_REQ_RETRY_ANY) {
        rc = ngx_http_tokenbiryani_attempt_next(r, ctx);

    } else if (ngx_http_tokenbiryani_budget_spent(r, ctx, now)) {
        rc = NGX_HTTP_TB_FAIL;

    } else {
        delay = tb_backoff_ms(tmcf->tbcf, (unsigned) ctx->attempts,
                              (double) ngx_random()
                              / ((double) 0x7fffffff + 1.0));

        if (ctx->wait.deadline_ms && now + delay > ctx->wait.deadline_ms) {
            delay = ctx->wait.deadline_ms - now;
        }

        ngx_http_tokenbiryani_settled(r, ctx, a, NGX_HTTP_TB_NEXT_BACKOFF,
                                      "retrying in %Lms", delay);

        ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_ADMIT, delay);
        ctx->pausing = 1;
        return;
    }

    switch (rc) {

    case NGX_HTTP_TB_GO:
        ngx_http_tokenbiryani_settled(r, ctx, a, NGX_HTTP_TB_NEXT_RETRY,
                                      "retrying on another account");
        return;

    case NGX_HTTP_TB_WAIT:
        ngx_http_tokenbiryani_settled(r, ctx, a, NGX_HTTP_TB_NEXT_QUEUE,
                                      "waiting for capacity");

        ctx->pausing = 1;
        return;

    default:
        ngx_http_tokenbiryani_settled(r, ctx, a, NGX_HTTP_TB_NEXT_GIVE_UP,
                                      "giving up: %V", &ctx->err.message);

        ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_FAIL, 0);
        ctx->pausing = 1;
        return;
    }
}


/*
 * Waits in the queue for at most what is left of the request's wait budget
 * (and never past its deadline).  Waiting is pointless when nothing can
 * come back in time: the client hears when at once.
 */

static ngx_int_t
ngx_http_tokenbiryani_enqueue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, uint64_t gen, int64_t now)
{
    int64_t                             left, until;
    ngx_uint_t                          depth, rc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (ngx_http_tokenbiryani_admit_wait(r, ctx, now, &left) != NGX_OK) {
        return NGX_HTTP_TB_FAIL;
    }

    rc = ngx_http_tokenbiryani_queue_add(&tmcf->zone, ctx->wait.priority,
                                         ctx->request_id, ctx->key_hash,
                                         ctx->key ? ctx->key->max_queued : -1,
                                         now, &depth, &ctx->wait.ticket);

    if (rc != NGX_HTTP_TB_QUEUE_OK) {
        return ngx_http_tokenbiryani_refuse_queue(r, ctx, rc, depth);
    }

    if (gen) {
        /* it just failed to find capacity at this generation */
        ctx->wait.retry_at = ctx->route.decision.soonest;
        ngx_http_tokenbiryani_queue_blocked(&tmcf->zone, &ctx->wait.ticket, gen,
                                            ctx->wait.retry_at);
    }

    ctx->wait.queued++;
    ctx->wait.start_ms = now;

    ngx_queue_insert_tail(&ngx_http_tokenbiryani_waiters, &ctx->wait.link);
    ctx->waiting = 1;

    until = now + left;

    if (ctx->wait.deadline_ms && ctx->wait.deadline_ms < until) {
        until = ctx->wait.deadline_ms;
    }

    /* which bound the timer is for: timers and the clock may differ by 1ms */
    ctx->wait.until_ms = until;

    ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_EXPIRE, until - now);

    if (!ngx_http_tokenbiryani_tick.timer_set) {
        ngx_add_timer(&ngx_http_tokenbiryani_tick, NGX_HTTP_TB_TICK_MS);
    }

    r->read_event_handler = ngx_http_tokenbiryani_wait_read;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_HTTP_TB_WAIT;
}


static void
ngx_http_tokenbiryani_unqueue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t why, int64_t now)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (!ctx->waiting) {
        return;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_http_tokenbiryani_queue_remove(&tmcf->zone, &ctx->wait.ticket, why);
    ctx->wait.waited_ms += now - ctx->wait.start_ms;

    ngx_queue_remove(&ctx->wait.link);
    ctx->waiting = 0;

    if (ctx->wait.action == NGX_HTTP_TB_WAIT_EXPIRE) {
        ctx->wait.action = NGX_HTTP_TB_WAIT_NONE;

        if (ctx->wait.event.timer_set) {
            ngx_del_timer(&ctx->wait.event);
        }
    }
}


void
ngx_http_tokenbiryani_attempt_wake(void)
{
    if (ngx_http_tokenbiryani_tick.handler == NULL
        || ngx_queue_empty(&ngx_http_tokenbiryani_waiters))
    {
        return;
    }

    if (!ngx_http_tokenbiryani_tick.posted) {
        ngx_post_event(&ngx_http_tokenbiryani_tick, &ngx_posted_events);
    }
}


static void
ngx_http_tokenbiryani_tick_handler(ngx_event_t *ev)
{
    int64_t                             now;
    ngx_uint_t                          i, n;
    ngx_queue_t                        *q;
    ngx_connection_t                   *c;
    ngx_http_request_t                 *r;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    uint64_t                            ids[NGX_HTTP_TB_SCAN_MAX];

    tmcf = ev->data;

    if (ngx_queue_empty(&ngx_http_tokenbiryani_waiters)) {
        return;
    }

    now = ngx_http_tokenbiryani_now_ms();

    n = ngx_http_tokenbiryani_queue_scan(&tmcf->zone, now, ids,
                                         NGX_HTTP_TB_SCAN_MAX);

    for (i = 0; i < n; i++) {

        for (q = ngx_queue_head(&ngx_http_tokenbiryani_waiters);
             q != ngx_queue_sentinel(&ngx_http_tokenbiryani_waiters);
             q = ngx_queue_next(q))
        {
            ctx = ngx_queue_data(q, ngx_http_tokenbiryani_ctx_t, wait.link);

            if (ctx->wait.ticket.id != ids[i]) {
                continue;
            }

            r = ctx->request;
            c = r->connection;

            ngx_http_tokenbiryani_try_waiter(r, ctx, now);

            ngx_http_run_posted_requests(c);
            break;
        }
    }

    if (!ngx_queue_empty(&ngx_http_tokenbiryani_waiters)
        && !ev->timer_set)
    {
        ngx_add_timer(ev, NGX_HTTP_TB_TICK_MS);
    }
}


static void
ngx_http_tokenbiryani_try_waiter(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    int64_t                             since;
    uint64_t                            gen;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    gen = ngx_http_tokenbiryani_capacity_gen(&tmcf->zone, &since);

    if (ctx->wait.retry_at && ctx->wait.retry_at <= now
        && ctx->wait.retry_at > since)
    {
        /* woken by time: a cooldown ended, a window refilled */
        since = ctx->wait.retry_at;
    }

    if (ctx->wait.deadline_ms && now >= ctx->wait.deadline_ms) {
        ngx_http_tokenbiryani_unqueue(r, ctx, NGX_HTTP_TB_QUEUE_TIMEOUT, now);
        (void) ngx_http_tokenbiryani_budget_spent(r, ctx, now);
        ngx_http_tokenbiryani_send_fail(r, ctx);
        return;
    }

    a = ngx_http_tokenbiryani_route(r, ctx, 1);

    if (a) {
        /* from the capacity event that woke it to the grant */
        ctx->wait.woken_ms = since && now >= since ? now - since : 0;

        ngx_http_tokenbiryani_unqueue(r, ctx, NGX_HTTP_TB_QUEUE_SERVED, now);

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "tokenbiryani: %*s: capacity after %Lms in the queue, "
                      "%Lms after it came back",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      ctx->wait.waited_ms, ctx->wait.woken_ms);

        ctx->route.next = a;

        if (ctx->wait.event.timer_set) {
            ngx_del_timer(&ctx->wait.event);
        }

        ngx_http_tokenbiryani_resume(r, ctx);
        return;
    }

    if (ctx->caps.reached) {
        /* taking its lease, a cap of its key's or conversation's was */
        ngx_http_tokenbiryani_unqueue(r, ctx, NGX_HTTP_TB_QUEUE_TIMEOUT, now);
        (void) ngx_http_tokenbiryani_refuse_cap(r, ctx, now);
        ngx_http_tokenbiryani_send_fail(r, ctx);
        return;
    }

    if (!ctx->route.decision.servable) {
        /* what it waited for went away: disabled, say */
        ngx_http_tokenbiryani_unqueue(r, ctx, NGX_HTTP_TB_QUEUE_TIMEOUT, now);

        if (ctx->attempts) {
            (void) ngx_http_tokenbiryani_refuse_final(r, ctx,
                                   "no account that can serve it is left");
        } else {
            (void) ngx_http_tokenbiryani_refuse_unservable(r, ctx);
        }

        ngx_http_tokenbiryani_send_fail(r, ctx);
        return;
    }

    ctx->wait.retry_at = ctx->route.decision.soonest;

    ngx_http_tokenbiryani_queue_blocked(&tmcf->zone, &ctx->wait.ticket, gen,
                                        ctx->wait.retry_at);
}


static void
ngx_http_tokenbiryani_arm(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t action, int64_t delay)
{
    ngx_event_t  *ev;

    ev = &ctx->wait.event;

    if (ev->handler == NULL) {
        ev->handler = ngx_http_tokenbiryani_wait_handler;
        ev->data = r;
        ev->log = r->connection->log;
    }

    ctx->wait.action = action;

    if (ev->posted) {
        ngx_delete_posted_event(ev);
    }

    if (delay <= 0) {
        if (ev->timer_set) {
            ngx_del_timer(ev);
        }

        ngx_post_event(ev, &ngx_posted_events);
        return;
    }

    ngx_add_timer(ev, (ngx_msec_t) delay);
}


/* the request's own event: a backoff over, a budget spent, an error due */

static void
ngx_http_tokenbiryani_wait_handler(ngx_event_t *ev)
{
    int64_t                       now;
    ngx_uint_t                    action;
    ngx_connection_t             *c;
    ngx_http_request_t           *r;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    r = ev->data;
    c = r->connection;
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    action = ctx->wait.action;
    ctx->wait.action = NGX_HTTP_TB_WAIT_NONE;

    switch (action) {

    case NGX_HTTP_TB_WAIT_ADMIT:

        switch (ngx_http_tokenbiryani_attempt_next(r, ctx)) {
        case NGX_HTTP_TB_GO:
            ngx_http_tokenbiryani_resume(r, ctx);
            break;
        case NGX_HTTP_TB_FAIL:
            ngx_http_tokenbiryani_send_fail(r, ctx);
            break;
        default:
            break;
        }

        break;

    case NGX_HTTP_TB_WAIT_EXPIRE:
        now = ngx_max(ngx_http_tokenbiryani_now_ms(), ctx->wait.until_ms);

        ngx_http_tokenbiryani_unqueue(r, ctx, NGX_HTTP_TB_QUEUE_TIMEOUT, now);

        (void) ngx_http_tokenbiryani_refuse_waited(r, ctx, now);

        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "tokenbiryani: %*s: waited %Lms in the queue, %V",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      ctx->wait.waited_ms, &ctx->err.message);

        ngx_http_tokenbiryani_send_fail(r, ctx);
        break;

    case NGX_HTTP_TB_WAIT_FAIL:
        ngx_http_tokenbiryani_send_fail(r, ctx);
        break;

    default:
        return;
    }

    ngx_http_run_posted_requests(c);
}


/* a fresh upstream for the attempt leased in ctx->route.next */

static void
ngx_http_tokenbiryani_resume(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    if (r->upstream_states && r->upstream_states->nelts && ctx->attempts) {
        /* the entry nginx made for the connect that was declined */
        r->upstream_states->nelts--;
    }

    if (ngx_http_tokenbiryani_upstream_start(r, ctx) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_http_tokenbiryani_send_fail(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_finalize_request(r,
        ngx_http_tokenbiryani_send_error(r, ctx->err.status, NULL, NULL));
}


/*
 * The client's connection while the request waits: a client that goes
 * away leaves the queue at once, its place and anything held given back.
 */

static void
ngx_http_tokenbiryani_wait_read(ngx_http_request_t *r)
{
    int                           n;
    char                          buf[1];
    ngx_err_t                     err;
    ngx_event_t                  *ev;
    ngx_connection_t             *c;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    c = r->connection;
    ev = c->read;

    if (c->error) {
        goto gone;
    }

#if (NGX_HTTP_V2)
    if (r->stream) {
        /* a reset stream comes with c->error */
        return;
    }
#endif

#if (NGX_HAVE_EPOLLRDHUP)

    if ((ngx_event_flags & NGX_USE_EPOLL_EVENT) && ngx_use_epoll_rdhup) {

        if (!ev->pending_eof) {
            return;
        }

        ev->eof = 1;
        c->error = 1;
        goto gone;
    }

#endif

    n = recv(c->fd, buf, 1, MSG_PEEK);
    err = ngx_socket_errno;

    if (n > 0) {
        /* a pipelined request: not a close */
        return;
    }

    if (n == -1 && err == NGX_EAGAIN) {
        if ((ngx_event_flags & NGX_USE_LEVEL_EVENT) && ev->active) {
            (void) ngx_del_event(ev, NGX_READ_EVENT, 0);
        }

        return;
    }

    ev->eof = 1;
    c->error = 1;

gone:

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "tokenbiryani: %*s: the client went away while the "
                  "request waited", (size_t) NGX_HTTP_TB_REQUEST_ID_LEN,
                  ctx->request_id);

    ngx_http_tokenbiryani_abandon(r, ctx);

    ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
}


/*
 * The request is going away (its pool cleanup, a client that left): out
 * of the queue, its event stopped, its rpm slot back if it was never sent.
 */

static void
ngx_http_tokenbiryani_abandon(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                             now;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    if (ctx->waiting) {
        ngx_http_tokenbiryani_unqueue(r, ctx, NGX_HTTP_TB_QUEUE_GONE, now);
    }

    if (ctx->wait.event.timer_set) {
        ngx_del_timer(&ctx->wait.event);
    }

    if (ctx->wait.event.posted) {
        ngx_delete_posted_event(&ctx->wait.event);
    }

    ctx->wait.action = NGX_HTTP_TB_WAIT_NONE;

    if (ctx->attempts == 0 && ctx->rpm_slot >= 0 && ctx->key) {
        ngx_http_tokenbiryani_rpm_give_back(&tmcf->zone, ctx->key_hash,
                                            ctx->rpm_slot, ctx->rpm_taken);
    }

    ctx->rpm_slot = -1;
}


/* the request's pool is going away: nothing may stay held */

static void
ngx_http_tokenbiryani_request_done(void *data)
{
    ngx_http_tokenbiryani_ctx_t *ctx = data;

    ngx_http_request_t                 *r;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    r = ctx->request;

    ngx_http_tokenbiryani_abandon(r, ctx);

    if (ctx->route.lease.id) {
        ngx_http_tokenbiryani_route_settle(r, ctx, 0);
        ngx_http_tokenbiryani_attempt_wake();
    }

    if (ctx->kind == NGX_HTTP_TB_MESSAGES) {
        if (ctx->answered && ctx->attempts > 1) {
            tmcf = ngx_http_get_module_main_conf(r,
                                                 ngx_http_tokenbiryani_module);
            ngx_http_tokenbiryani_zone_count_failover(&tmcf->zone);
        }

        ngx_http_tokenbiryani_record(r, ctx);

    } else if (ctx->kind == NGX_HTTP_TB_BATCHES
               && ((ngx_http_tokenbiryani_objreq_t *) ctx->object)->charged)
    {
        /* a batch's results read, and charged: what they cost, recorded */
        ngx_http_tokenbiryani_record(r, ctx);
    }
}
