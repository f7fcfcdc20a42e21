/*
 * tokenbiryani: what happens between attempts.
 *
 * Admission (the key's rpm, priority and wait budget), the decision of
 * what to do after an attempt failed (another account now, a backoff, the
 * queue, or a final error), the queue wait itself, and the events every
 * attempt leaves in the error log.
 *
 * An attempt that cannot be followed by another one at once gives its
 * ngx_http_upstream_t up: peer.get declines the next connect with the
 * upstream's cleanup detached, so nginx lets go of it without finalizing
 * the request (ngx_http_tokenbiryani_pause).  The request then waits on
 * its own event (ctx->wait) - a backoff, the queue's budget, an error to
 * send - and a later attempt runs on a fresh ngx_http_upstream_t.  Nothing
 * ever blocks a worker.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_shm.h"
#include "tb_hash.h"


/* how often a worker with waiters looks at the queue */
#define NGX_HTTP_TB_TICK_MS            10

#define NGX_HTTP_TB_SCAN_MAX           256


static ngx_int_t ngx_http_tokenbiryani_budget_spent(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);
static ngx_int_t ngx_http_tokenbiryani_enqueue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, uint64_t gen, int64_t now);
static ngx_int_t ngx_http_tokenbiryani_fail_final(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *why);
static ngx_int_t ngx_http_tokenbiryani_fail_admission(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_set_retry_after(
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t at, int64_t now);
static int64_t ngx_http_tokenbiryani_soonest(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);
static void ngx_http_tokenbiryani_wait_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_wait_read(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_tick_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_try_waiter(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);
static void ngx_http_tokenbiryani_unqueue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t served, int64_t now);
static void ngx_http_tokenbiryani_send_fail(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_go(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_arm(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t action, int64_t delay);
static ngx_int_t ngx_http_tokenbiryani_parse_seconds(ngx_str_t *v,
    int64_t *ms);


static ngx_str_t  ngx_http_tb_none = ngx_string("-");


/* this worker's waiters, and the tick that lets them try */
static ngx_queue_t   ngx_http_tokenbiryani_waiters;
static ngx_event_t   ngx_http_tokenbiryani_tick;


ngx_int_t
ngx_http_tokenbiryani_dispatch_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_queue_init(&ngx_http_tokenbiryani_waiters);

    ngx_http_tokenbiryani_tick.handler = ngx_http_tokenbiryani_tick_handler;
    ngx_http_tokenbiryani_tick.data = tmcf;
    ngx_http_tokenbiryani_tick.log = cycle->log;
    ngx_http_tokenbiryani_tick.cancelable = 1;

    return NGX_OK;
}


/*
 * Before the first attempt: priority, wait budget, deadline and the key's
 * rpm, then the first dispatch.
 */

ngx_int_t
ngx_http_tokenbiryani_admit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                             now, budget, ms, retry;
    ngx_int_t                           slot;
    ngx_table_elt_t                    *h;
    const tb_config_t                  *cf;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;
    kc = ctx->key;
    now = ngx_http_tokenbiryani_now_ms();

    /* the key's priority; a client may lower its own, never raise it */

    ctx->priority = (kc && kc->priority == TB_PRIORITY_BATCH) ? 1 : 0;

    h = ngx_http_tokenbiryani_find_header(r, "x-tokenbiryani-priority",
                                 sizeof("x-tokenbiryani-priority") - 1);
    if (h) {
        if (h->value.len == 5
            && ngx_strncasecmp(h->value.data, (u_char *) "batch", 5) == 0)
        {
            ctx->priority = 1;

        } else if (!(h->value.len == 11
                     && ngx_strncasecmp(h->value.data,
                                        (u_char *) "interactive", 11) == 0))
        {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
                "invalid_request_error",
                "X-TokenBiryani-Priority: expected \"interactive\" or "
                "\"batch\", not \"%V\"", &h->value);
            return NGX_HTTP_TB_FAIL;
        }
    }

    /* the wait budget: the smallest of the three */

    budget = (int64_t) (cf->queue_default_max_wait_seconds * 1000);

    if (kc && kc->max_wait_seconds >= 0) {
        budget = ngx_min(budget, (int64_t) (kc->max_wait_seconds * 1000));
    }

    h = ngx_http_tokenbiryani_find_header(r, "x-tokenbiryani-max-wait",
                                 sizeof("x-tokenbiryani-max-wait") - 1);
    if (h) {
        if (ngx_http_tokenbiryani_parse_seconds(&h->value, &ms) != NGX_OK) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
                "invalid_request_error",
                "X-TokenBiryani-Max-Wait: expected a number of seconds, "
                "not \"%V\"", &h->value);
            return NGX_HTTP_TB_FAIL;
        }

        budget = ngx_min(budget, ms);
    }

    ctx->wait_budget_ms = budget;

    ctx->deadline_ms = cf->retry_deadline_seconds > 0
                       ? ctx->started_ms
                         + (int64_t) (cf->retry_deadline_seconds * 1000)
                       : 0;

    /* the key's rpm counts the requests it admits, and only those */

    if (kc && kc->rpm >= 0) {
        slot = -1;
        retry = 60000;

        if (kc->rpm > 0) {
            slot = ngx_http_tokenbiryani_rpm_take(tmcf,
                                tb_hash64(0, kc->name, ngx_strlen(kc->name)),
                                (ngx_uint_t) kc->rpm, now, &retry);
        }

        if (slot == -1) {
            ngx_http_tokenbiryani_set_retry_after(ctx, now + retry, now);
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "key \"%s\" is over its limit of %L requests a minute; "
                "retry in %is", kc->name, kc->rpm, ctx->retry_after);
            return NGX_HTTP_TB_FAIL;
        }

        if (slot >= 0) {
            ctx->rpm_slot = slot;
            ctx->rpm_taken = now;
        }
    }

    return ngx_http_tokenbiryani_dispatch(r, ctx);
}


static ngx_int_t
ngx_http_tokenbiryani_parse_seconds(ngx_str_t *v, int64_t *ms)
{
    u_char   *p, *last;
    int64_t   whole, frac, scale;

    p = v->data;
    last = p + v->len;

    while (p < last && (*p == ' ' || *p == '\t')) {
        p++;
    }

    while (last > p && (last[-1] == ' ' || last[-1] == '\t')) {
        last--;
    }

    if (p == last) {
        return NGX_ERROR;
    }

    whole = 0;

    for ( /* void */ ; p < last && *p >= '0' && *p <= '9'; p++) {
        if (whole > 1000000000) {
            return NGX_ERROR;
        }

        whole = whole * 10 + (*p - '0');
    }

    frac = 0;
    scale = 1000;

    if (p < last && *p == '.') {
        for (p++; p < last && *p >= '0' && *p <= '9'; p++) {
            if (scale > 1) {
                scale /= 10;
                frac += (*p - '0') * scale;
            }
        }
    }

    if (p != last) {
        return NGX_ERROR;
    }

    *ms = whole * 1000 + frac;

    return NGX_OK;
}


/*
 * The next step of a request that needs an account: GO with ctx->next
 * leased, WAIT in the queue, or FAIL with the error prepared.
 */

ngx_int_t
ngx_http_tokenbiryani_dispatch(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                             now;
    uint64_t                            gen;
    ngx_uint_t                          i, n, tried;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    if (ngx_http_tokenbiryani_budget_spent(r, ctx, now)) {
        return NGX_HTTP_TB_FAIL;
    }

    /* read before the decision: capacity returning after it is not lost */
    gen = ngx_http_tokenbiryani_capacity_gen(tmcf);

    if (ctx->attempts == 0 && ctx->queued == 0
        && !ngx_http_tokenbiryani_queue_clear_ahead(tmcf, ctx->priority, now))
    {
        /* waiters that could use what is there go first */

        (void) ngx_http_tokenbiryani_route(r, ctx, 0);

        if (!ctx->decision.servable) {
            return ngx_http_tokenbiryani_fail_admission(r, ctx);
        }

        ngx_http_tokenbiryani_log_admission(r, ctx, NULL, NULL, "queue",
                                            "earlier waiters go first");

        /* it has not tried: it may as soon as its turn comes */
        return ngx_http_tokenbiryani_enqueue(r, ctx, 0, now);
    }

    a = ngx_http_tokenbiryani_route(r, ctx, 1);

    if (a == NULL && !ctx->decision.servable) {

        /*
         * Only accounts this request gave up on are left: within the
         * budget they get another chance, when they can take it again -
         * a 429'd account after its cooldown, through the queue.
         */

        n = tmcf->accounts.nelts;
        tried = 0;

        for (i = 0; i < n; i++) {
            if (ctx->outs[i].verdict == TB_V_TRIED) {
                ctx->tried[i] &= ~NGX_HTTP_TB_TRIED;
                tried++;
            }
        }

        if (tried) {
            a = ngx_http_tokenbiryani_route(r, ctx, 1);
        }
    }

    if (a) {
        ctx->next = a;
        return NGX_HTTP_TB_GO;
    }

    if (!ctx->decision.servable) {
        ngx_http_tokenbiryani_log_admission(r, ctx, NULL, NULL, "refuse",
                                            "no account can serve");

        return ngx_http_tokenbiryani_fail_admission(r, ctx);
    }

    ngx_http_tokenbiryani_log_admission(r, ctx, NULL, NULL, "queue",
                                        "saturated");

    return ngx_http_tokenbiryani_enqueue(r, ctx, gen, now);
}


/* the three bounds of the retry budget, whichever binds first */

static ngx_int_t
ngx_http_tokenbiryani_budget_spent(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    const tb_config_t                  *cf;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;

    if (ctx->deadline_ms && now >= ctx->deadline_ms) {
        ngx_http_tokenbiryani_set_retry_after(ctx,
                             ngx_http_tokenbiryani_soonest(r, ctx, now), now);

        if (ctx->attempts) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_GATEWAY_TIME_OUT,
                "timeout_error",
                "no account answered within the request's deadline of "
                "%.0fs (%ui attempt%s)", cf->retry_deadline_seconds,
                ctx->attempts, ctx->attempts == 1 ? "" : "s");

        } else {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_GATEWAY_TIME_OUT,
                "timeout_error",
                "no capacity became available within the request's "
                "deadline of %.0fs", cf->retry_deadline_seconds);
        }

        return 1;
    }

    if (ctx->attempts == 0) {
        return 0;
    }

    if (ctx->attempts >= (ngx_uint_t) cf->retry_max_attempts) {
        (void) ngx_http_tokenbiryani_fail_final(r, ctx, "retry.max_attempts");
        return 1;
    }

    if (ctx->excluded >= (ngx_uint_t) cf->retry_max_accounts) {
        (void) ngx_http_tokenbiryani_fail_final(r, ctx, "retry.max_accounts");
        return 1;
    }

    return 0;
}


/*
 * The request's own error when its attempts ran out: the Anthropic type of
 * the last failure's class, and when capacity should come back.
 */

static ngx_int_t
ngx_http_tokenbiryani_fail_final(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *why)
{
    int64_t           now;
    const tb_rule_t  *rule;

    now = ngx_http_tokenbiryani_now_ms();
    rule = ctx->outcome.rule;

    if (rule == NULL || rule->error_type == NULL) {
        rule = &tb_rules[TB_KIND_TRANSPORT];
    }

    ngx_http_tokenbiryani_set_retry_after(ctx,
                             ngx_http_tokenbiryani_soonest(r, ctx, now), now);

    if (ctx->account) {
        ngx_http_tokenbiryani_set_error(r, rule->status, rule->error_type,
            "the request failed on %ui attempt%s (%s); the last: account "
            "\"%V\" %V", ctx->attempts, ctx->attempts == 1 ? "" : "s", why,
            &ctx->account->id, &ctx->last_error);

    } else {
        ngx_http_tokenbiryani_set_error(r, rule->status, rule->error_type,
            "the request failed (%s)", why);
    }

    return NGX_HTTP_TB_FAIL;
}


/*
 * No account could ever serve the request: say which of the reasons it is
 * (the verdicts of the decision just made).
 */

static ngx_int_t
ngx_http_tokenbiryani_fail_admission(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_uint_t                          i, n, exceeds, model;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    n = tmcf->accounts.nelts;

    exceeds = 0;
    model = 0;

    for (i = 0; i < n; i++) {
        switch (ctx->outs[i].verdict) {
        case TB_V_EXCEEDS:
            exceeds++;
            break;
        case TB_V_MODEL:
        case TB_V_REJECTED:
            model++;
            break;
        default:
            break;
        }
    }

    if (exceeds) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
            "overloaded_error",
            "no account in this pool can serve this request: it exceeds "
            "every account's rate limit (about %L input tokens, max_tokens "
            "%L)", ctx->need.n[TB_WIN_INPUT], ctx->need.max_tokens);

    } else if (model) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
            "overloaded_error",
            "no account in this pool can serve this request: none supports "
            "model \"%s\"%s", ctx->body.model,
            ctx->key && ctx->key->pool.n ? " in this key's pool" : "");

    } else {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
            "overloaded_error",
            "no account in this pool can serve this request: every account "
            "is disabled%s", ctx->key && ctx->key->pool.n
                             ? " or outside this key's pool" : "");
    }

    return NGX_HTTP_TB_FAIL;
}


static void
ngx_http_tokenbiryani_set_retry_after(ngx_http_tokenbiryani_ctx_t *ctx,
    int64_t at, int64_t now)
{
    int64_t  s;

    if (at <= 0) {
        ctx->retry_after = 0;
        return;
    }

    s = (at - now + 999) / 1000;

    ctx->retry_after = (ngx_int_t) ngx_max(s, 1);
}


/*
 * When some account that could serve the request should take it again,
 * with the accounts this request tried counted back in: 0 when unknown.
 */

static int64_t
ngx_http_tokenbiryani_soonest(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    ngx_uint_t                          i, n;
    tb_cand_t                          *c;
    tb_cand_out_t                      *outs;
    tb_route_in_t                       in;
    tb_decision_t                       d;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    n = tmcf->accounts.nelts;

    if (ctx->cands == NULL || n == 0) {
        return 0;
    }

    c = ngx_palloc(r->pool, n * sizeof(tb_cand_t));
    outs = ngx_palloc(r->pool, n * sizeof(tb_cand_out_t));
    if (c == NULL || outs == NULL) {
        return 0;
    }

    ngx_memcpy(c, ctx->cands, n * sizeof(tb_cand_t));

    for (i = 0; i < n; i++) {
        c[i].tried = 0;
    }

    ngx_http_tokenbiryani_route_input(tmcf, ctx, &in);
    in.now = now;

    tb_route(&in, c, n, outs, &d);

    if (d.chosen >= 0) {
        /* one could take it right now */
        return now + 1000;
    }

    return d.soonest;
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
    int64_t                             left, soonest, until;
    ngx_uint_t                          depth, rc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    soonest = ctx->decision.soonest;
    left = ctx->wait_budget_ms - ctx->waited_ms;

    /* capacity held by requests in flight comes back at no known time */
    ngx_http_tokenbiryani_set_retry_after(ctx, soonest ? soonest : now + 1000,
                                          now);

    if (left <= 0 || tmcf->tbcf->queue_max_size == 0) {

        if (ctx->queued) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "waited %Ls for pool capacity without any becoming "
                "available", (ctx->waited_ms + 500) / 1000);

        } else {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "every account that can serve this request is at capacity%s",
                ctx->retry_after ? "; see retry-after" : "");
        }

        return NGX_HTTP_TB_FAIL;
    }

    if (!ctx->decision.by_event && soonest && soonest - now > left) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error",
            "every account that can serve this request is at capacity for "
            "%is, longer than this request may wait (%Ls)",
            ctx->retry_after, (left + 999) / 1000);
        return NGX_HTTP_TB_FAIL;
    }

    rc = ngx_http_tokenbiryani_queue_add(tmcf, ctx, now, &depth);

    if (rc == NGX_HTTP_TB_QUEUE_FULL) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error", "wait queue is full (%ui waiting)", depth);
        return NGX_HTTP_TB_FAIL;
    }

    if (rc == NGX_HTTP_TB_QUEUE_NOMEM) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
            "overloaded_error",
            "the gateway's shared zone has no room to queue this request");
        return NGX_HTTP_TB_FAIL;
    }

    if (gen) {
        /* it just failed to find capacity at this generation */
        ctx->retry_at = soonest;
        ngx_http_tokenbiryani_queue_blocked(tmcf, ctx, gen, soonest);
    }

    ctx->queued++;
    ctx->wait_start_ms = now;

    ngx_queue_insert_tail(&ngx_http_tokenbiryani_waiters, &ctx->wq);
    ctx->waiting = 1;

    until = now + left;

    if (ctx->deadline_ms && ctx->deadline_ms < until) {
        until = ctx->deadline_ms;
    }

    /* which bound the timer is for: timers and the clock may differ by 1ms */
    ctx->wait_until_ms = until;

    ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_EXPIRE, until - now);

    if (!ngx_http_tokenbiryani_tick.timer_set) {
        ngx_add_timer(&ngx_http_tokenbiryani_tick, NGX_HTTP_TB_TICK_MS);
    }

    r->read_event_handler = ngx_http_tokenbiryani_wait_read;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_HTTP_TB_WAIT;
}


static void
ngx_http_tokenbiryani_arm(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t action, int64_t delay)
{
    ngx_event_t  *ev;

    ev = &ctx->wait;

    if (ev->handler == NULL) {
        ev->handler = ngx_http_tokenbiryani_wait_handler;
        ev->data = r;
        ev->log = r->connection->log;
    }

    ctx->action = action;

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


void
ngx_http_tokenbiryani_arm_dispatch(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_DISPATCH, 0);
}


void
ngx_http_tokenbiryani_arm_fail(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_FAIL, 0);
}


/*
 * An attempt of a Messages request is over and failed (the upstream's
 * free_peer): what comes next.  GO keeps the ngx_http_upstream_t for the
 * next attempt; anything else gives it up (see ngx_http_tokenbiryani_pause).
 */

void
ngx_http_tokenbiryani_attempt_over(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc,
    ngx_uint_t failed)
{
    int64_t                             delay, now;
    ngx_int_t                           rc;
    const tb_rule_t                    *rule;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = ctx->account;
    now = ngx_http_tokenbiryani_now_ms();

    if (r->connection->error || ctx->committed) {
        pc->tries = 0;
        ngx_http_tokenbiryani_log_settlement(r, ctx, a, "not retried");
        return;
    }

    if (!ctx->outcome_set) {
        /* never without one; a transport failure if it were */
        ctx->outcome.kind = TB_KIND_TRANSPORT;
        ctx->outcome.rule = &tb_rules[TB_KIND_TRANSPORT];
        ctx->outcome_set = 1;
    }

    rule = ctx->outcome.rule;

    if (rule->request == TB_REQ_RETRY_OTHER) {
        /* max_accounts counts the distinct accounts given up on */

        if (!(ctx->tried[a->index] & NGX_HTTP_TB_EXCLUDED)) {
            ctx->tried[a->index] |= NGX_HTTP_TB_EXCLUDED;
            ctx->excluded++;
        }

    } else {
        /* the same account may take it again, when it can */
        ctx->tried[a->index] &= ~NGX_HTTP_TB_TRIED;
    }

    pc->tries = 1;

    if (rule->request != TB_REQ_RETRY_ANY) {
        rc = ngx_http_tokenbiryani_dispatch(r, ctx);

    } else if (ngx_http_tokenbiryani_budget_spent(r, ctx, now)) {
        rc = NGX_HTTP_TB_FAIL;

    } else {
        delay = tb_backoff_ms(tmcf->tbcf, (unsigned) ctx->attempts,
                              (double) ngx_random()
                              / ((double) 0x7fffffff + 1.0));

        if (ctx->deadline_ms && now + delay > ctx->deadline_ms) {
            delay = ctx->deadline_ms - now;
        }

        ngx_http_tokenbiryani_log_settlement(r, ctx, a, "backoff");

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "tokenbiryani: %*s: account \"%V\" %V on attempt %ui, "
                      "retrying in %Lms", (size_t) NGX_HTTP_TB_REQUEST_ID_LEN,
                      ctx->request_id, &a->id, &ctx->last_error,
                      ctx->attempts, delay);

        ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_DISPATCH, delay);
        ctx->pausing = 1;
        return;
    }

    switch (rc) {

    case NGX_HTTP_TB_GO:
        ngx_http_tokenbiryani_log_settlement(r, ctx, a, "retry");

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "tokenbiryani: %*s: account \"%V\" %V on attempt %ui, "
                      "retrying on another account",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      &a->id, &ctx->last_error, ctx->attempts);
        return;

    case NGX_HTTP_TB_WAIT:
        ngx_http_tokenbiryani_log_settlement(r, ctx, a, "queue");

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "tokenbiryani: %*s: account \"%V\" %V on attempt %ui, "
                      "waiting for capacity",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      &a->id, &ctx->last_error, ctx->attempts);

        ctx->pausing = 1;
        return;

    default:
        ngx_http_tokenbiryani_log_settlement(r, ctx, a, "give up");

        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "tokenbiryani: %*s: account \"%V\" %V on attempt %ui, "
                      "giving up: %V", (size_t) NGX_HTTP_TB_REQUEST_ID_LEN,
                      ctx->request_id, &a->id, &ctx->last_error,
                      ctx->attempts, &ctx->err_message);

        ngx_http_tokenbiryani_arm(r, ctx, NGX_HTTP_TB_WAIT_FAIL, 0);
        ctx->pausing = 1;
        return;
    }
}


/*
 * peer.get of a request whose attempt will not follow at once: the
 * upstream is given up without finalizing the request.  The upstream's
 * cleanup is detached and the request referenced once more, so the
 * NGX_DECLINED returned here makes nginx drop this ngx_http_upstream_t
 * (ngx_http_upstream_finalize_request sees no cleanup and only releases
 * the extra reference).  The request then waits on ctx->wait.
 */

ngx_int_t
ngx_http_tokenbiryani_pause(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc)
{
    ngx_http_upstream_t  *u;

    u = r->upstream;

    ctx->pausing = 0;

    pc->tries = 0;
    pc->cached = 0;
    pc->connection = NULL;

    if (r->connection->error) {
        /* nginx finalizes the request as a client abort */
        ngx_http_tokenbiryani_abandon(r, ctx);
        return NGX_DECLINED;
    }

    r->main->count++;

    if (u->cleanup) {
        *u->cleanup = NULL;
        u->cleanup = NULL;
    }

    r->read_event_handler = ngx_http_tokenbiryani_wait_read;
    r->write_event_handler = ngx_http_request_empty_handler;

    return NGX_DECLINED;
}


/* the request's own event: a backoff over, a budget spent, an error due */

static void
ngx_http_tokenbiryani_wait_handler(ngx_event_t *ev)
{
    int64_t                       now, soonest;
    ngx_uint_t                    action;
    ngx_connection_t             *c;
    ngx_http_request_t           *r;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    r = ev->data;
    c = r->connection;
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    action = ctx->action;
    ctx->action = NGX_HTTP_TB_WAIT_NONE;

    switch (action) {

    case NGX_HTTP_TB_WAIT_DISPATCH:

        switch (ngx_http_tokenbiryani_dispatch(r, ctx)) {
        case NGX_HTTP_TB_GO:
            ngx_http_tokenbiryani_go(r, ctx);
            break;
        case NGX_HTTP_TB_FAIL:
            ngx_http_tokenbiryani_send_fail(r, ctx);
            break;
        default:
            break;
        }

        break;

    case NGX_HTTP_TB_WAIT_EXPIRE:
        now = ngx_max(ngx_http_tokenbiryani_now_ms(), ctx->wait_until_ms);

        ngx_http_tokenbiryani_unqueue(r, ctx, 0, now);

        if (!ngx_http_tokenbiryani_budget_spent(r, ctx, now)) {
            soonest = ngx_http_tokenbiryani_soonest(r, ctx, now);

            ngx_http_tokenbiryani_set_retry_after(ctx,
                                   soonest ? soonest : now + 1000, now);

            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "waited %Ls for pool capacity without any becoming "
                "available", (ctx->waited_ms + 500) / 1000);
        }

        ngx_log_error(NGX_LOG_INFO, c->log, 0,
                      "tokenbiryani: %*s: waited %Lms in the queue, %V",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      ctx->waited_ms, &ctx->err_message);

        ngx_http_tokenbiryani_send_fail(r, ctx);
        break;

    case NGX_HTTP_TB_WAIT_FAIL:
        ngx_http_tokenbiryani_send_fail(r, ctx);
        break;

    case NGX_HTTP_TB_WAIT_START:
        ngx_http_tokenbiryani_go(r, ctx);
        break;

    default:
        return;
    }

    ngx_http_run_posted_requests(c);
}


/* a fresh upstream for the attempt leased in ctx->next */

static void
ngx_http_tokenbiryani_go(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    if (r->upstream_states && r->upstream_states->nelts && ctx->attempts) {
        /* the entry nginx made for the connect that was declined */
        r->upstream_states->nelts--;
    }

    if (ngx_http_tokenbiryani_start_upstream(r, ctx) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_http_tokenbiryani_send_fail(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_finalize_request(r,
        ngx_http_tokenbiryani_send_error(r, ctx->err_status, NULL, NULL));
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

void
ngx_http_tokenbiryani_abandon(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                             now;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    if (ctx->waiting) {
        ngx_http_tokenbiryani_unqueue(r, ctx, 2, now);
    }

    if (ctx->wait.timer_set) {
        ngx_del_timer(&ctx->wait);
    }

    if (ctx->wait.posted) {
        ngx_delete_posted_event(&ctx->wait);
    }

    ctx->action = NGX_HTTP_TB_WAIT_NONE;

    if (ctx->attempts == 0 && ctx->rpm_slot >= 0 && ctx->key) {
        ngx_http_tokenbiryani_rpm_give_back(tmcf,
            tb_hash64(0, ctx->key->name, ngx_strlen(ctx->key->name)),
            ctx->rpm_slot, ctx->rpm_taken);
    }

    ctx->rpm_slot = -1;
}


static void
ngx_http_tokenbiryani_unqueue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t served, int64_t now)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (!ctx->waiting) {
        return;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_http_tokenbiryani_queue_remove(tmcf, ctx, served, now);

    ngx_queue_remove(&ctx->wq);
    ctx->waiting = 0;

    if (ctx->action == NGX_HTTP_TB_WAIT_EXPIRE) {
        ctx->action = NGX_HTTP_TB_WAIT_NONE;

        if (ctx->wait.timer_set) {
            ngx_del_timer(&ctx->wait);
        }
    }
}


/* a lease given back in this worker: its waiters try without delay */

void
ngx_http_tokenbiryani_queue_wake(void)
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

    n = ngx_http_tokenbiryani_queue_scan(tmcf, now, ids, NGX_HTTP_TB_SCAN_MAX);

    for (i = 0; i < n; i++) {

        for (q = ngx_queue_head(&ngx_http_tokenbiryani_waiters);
             q != ngx_queue_sentinel(&ngx_http_tokenbiryani_waiters);
             q = ngx_queue_next(q))
        {
            ctx = ngx_queue_data(q, ngx_http_tokenbiryani_ctx_t, wq);

            if (ctx->waiter_id != ids[i]) {
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

    gen = ngx_http_tokenbiryani_capacity_gen(tmcf);
    since = __atomic_load_n(&tmcf->sh->cap_gen_ms, __ATOMIC_RELAXED);

    if (ctx->retry_at && ctx->retry_at <= now && ctx->retry_at > since) {
        /* woken by time: a cooldown ended, a window refilled */
        since = ctx->retry_at;
    }

    if (ctx->deadline_ms && now >= ctx->deadline_ms) {
        ngx_http_tokenbiryani_unqueue(r, ctx, 0, now);
        (void) ngx_http_tokenbiryani_budget_spent(r, ctx, now);
        ngx_http_tokenbiryani_send_fail(r, ctx);
        return;
    }

    a = ngx_http_tokenbiryani_route(r, ctx, 1);

    if (a) {
        /* from the capacity event that woke it to the grant */
        ctx->woken_ms = since && now >= since ? now - since : 0;

        ngx_http_tokenbiryani_unqueue(r, ctx, 1, now);

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "tokenbiryani: %*s: capacity after %Lms in the queue, "
                      "%Lms after it came back",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      ctx->waited_ms, ctx->woken_ms);

        ctx->next = a;

        if (ctx->wait.timer_set) {
            ngx_del_timer(&ctx->wait);
        }

        ngx_http_tokenbiryani_go(r, ctx);
        return;
    }

    if (!ctx->decision.servable) {
        /* what it waited for went away: disabled, say */
        ngx_http_tokenbiryani_unqueue(r, ctx, 0, now);

        if (ctx->attempts) {
            (void) ngx_http_tokenbiryani_fail_final(r, ctx,
                                   "no account that can serve it is left");
        } else {
            (void) ngx_http_tokenbiryani_fail_admission(r, ctx);
        }

        ngx_http_tokenbiryani_send_fail(r, ctx);
        return;
    }

    ctx->retry_at = ctx->decision.soonest;

    ngx_http_tokenbiryani_queue_blocked(tmcf, ctx, gen, ctx->retry_at);
}


/*
 * The events: one admission line per decision that leases (or queues, or
 * refuses) and one settlement line per attempt, at info level.  Counts and
 * classes only: never prompt text, never a credential.
 */

void
ngx_http_tokenbiryani_log_admission(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    int64_t *remaining, const char *decision, const char *reason)
{
    ngx_int_t  w;
    u_char    *p;
    u_char     rem[96];

    if (r->connection->log->log_level < NGX_LOG_INFO) {
        return;
    }

    p = rem;

    if (remaining) {
        for (w = 0; w < TB_NWINDOWS; w++) {
            if (remaining[w] == TB_UNKNOWN) {
                p = ngx_snprintf(p, rem + sizeof(rem) - p, "%s?",
                                 w ? "/" : "");
            } else {
                p = ngx_snprintf(p, rem + sizeof(rem) - p, "%s%L",
                                 w ? "/" : "", remaining[w]);
            }
        }

    } else {
        p = ngx_cpymem(p, "-", 1);
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: event=admission request=%*s attempt=%ui "
                  "account=%V need=%L/%L/%L remaining_before=%*s "
                  "decision=%s reason=\"%s\" soonest_ms=%L",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  ctx->attempts + 1, a ? &a->id : &ngx_http_tb_none,
                  ctx->need.n[TB_WIN_REQUESTS], ctx->need.n[TB_WIN_INPUT],
                  ctx->need.n[TB_WIN_OUTPUT], (size_t) (p - rem), rem,
                  decision, reason,
                  ctx->decision.soonest
                  ? ctx->decision.soonest - ngx_http_tokenbiryani_now_ms()
                  : (int64_t) 0);
}


void
ngx_http_tokenbiryani_log_settlement(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    const char *next)
{
    const tb_rule_t  *rule;

    if (r->connection->log->log_level < NGX_LOG_INFO || a == NULL) {
        return;
    }

    rule = ctx->outcome_set ? ctx->outcome.rule : NULL;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: event=settlement request=%*s attempt=%ui "
                  "account=%V status=%ui class=%s account_action=%s "
                  "breaker=%s usage=%L/%L/%L/%L retry_after_ms=%L "
                  "latency_ms=%L next=\"%s\"",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  ctx->attempts, &a->id, ctx->status.code,
                  rule ? rule->name : "cancelled",
                  rule ? tb_account_action_name(rule->account) : "none",
                  rule ? tb_outcome_name(rule->breaker) : "neutral",
                  ctx->usage.input_tokens, ctx->usage.output_tokens,
                  ctx->usage.cache_read_input_tokens,
                  ctx->usage.cache_creation_input_tokens,
                  ctx->retry_after_ms,
                  ngx_http_tokenbiryani_now_ms() - ctx->attempt_ms, next);
}
