/*
 * tokenbiryani: admission.
 *
 * When a request arrives: its priority (a client may lower its own, never
 * raise it), its wait budget and deadline, and the key's rpm.  Before each
 * attempt: whether it may go now (routed and leased), must wait - behind
 * earlier waiters, or for capacity - or fails, because its retry budget is
 * spent or no account could ever serve it.  And the words of every
 * refusal, so the client hears why and when to come back.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_admit.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_route.h"
#include "ngx_http_tokenbiryani_events.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_pacer.h"
#include "tb_hash.h"
#include "tb_ledger.h"
#include "tb_pacing.h"


static void ngx_http_tokenbiryani_set_retry_after(
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t at, int64_t now);
static int64_t ngx_http_tokenbiryani_soonest(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);


/*
 * How long the request may wait: the smallest of queue.default_max_wait,
 * the key's max_wait_seconds and X-TokenBiryani-Max-Wait, in ms; -1 when
 * the header cannot be read.
 */
static int64_t
ngx_http_tokenbiryani_wait_budget(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                             budget, ms;
    ngx_table_elt_t                    *h;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    kc = ctx->key;

    budget = (int64_t) (tmcf->tbcf->queue_default_max_wait_seconds * 1000);

    if (kc && kc->max_wait_seconds >= 0) {
        budget = ngx_min(budget, (int64_t) (kc->max_wait_seconds * 1000));
    }

    h = ngx_http_tokenbiryani_own_header(r, ctx, "x-tokenbiryani-max-wait",
                                 sizeof("x-tokenbiryani-max-wait") - 1);
    if (h) {
        if (tb_parse_seconds(h->value.data, h->value.len, &ms) != 0) {
            return -1;
        }

        budget = ngx_min(budget, ms);
    }

    return budget;
}


/*
 * A place in the key's rpm (kc->rpm >= 0): its slot, -2 when the zone has
 * no room to count it (let through), or -1 with the refusal prepared.
 */
static ngx_int_t
ngx_http_tokenbiryani_admit_rpm(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_main_conf_t *tmcf,
    int64_t now)
{
    int64_t               retry;
    ngx_int_t             slot;
    const tb_key_conf_t  *kc;

    kc = ctx->key;
    slot = -1;
    retry = 60000;

    if (kc->rpm > 0) {
        slot = ngx_http_tokenbiryani_rpm_take(&tmcf->zone, ctx->key_hash,
                                              (ngx_uint_t) kc->rpm, now,
                                              &retry);
    }

    if (slot == -1) {
        ngx_http_tokenbiryani_set_retry_after(ctx, now + retry, now);
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error",
            "key \"%s\" is over its limit of %L requests a minute; "
            "retry in %is", kc->name, kc->rpm, ctx->wait.retry_after);
    }

    return slot;
}


ngx_int_t
ngx_http_tokenbiryani_admit_key(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                             now;
    ngx_int_t                           slot;
    ngx_uint_t                          inflight, queued, rc, depth;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    kc = ctx->key;

    if (kc == NULL) {
        return NGX_OK;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    /* its rpm: a place is looked for, and given back (admission takes it) */

    if (kc->rpm >= 0) {
        slot = ngx_http_tokenbiryani_admit_rpm(r, ctx, tmcf, now);

        if (slot >= 0) {
            ngx_http_tokenbiryani_rpm_give_back(&tmcf->zone, ctx->key_hash,
                                                slot, now);

        } else if (slot == -1) {
            return NGX_HTTP_TB_FAIL;
        }
    }

    /* its spend cap, spent already (held by settled spend, not in flight) */

    if (ctx->kind == NGX_HTTP_TB_MESSAGES && kc->spend_cap_usd >= 0) {
        ngx_memzero(&ctx->caps, sizeof(ngx_http_tokenbiryani_caps_t));
        ctx->caps.key_cap = tb_usd_to_nd(kc->spend_cap_usd);
        ctx->caps.session_cap = -1;
        ctx->caps.session_turns = -1;
        ctx->caps.key_name = (u_char *) kc->name;
        ctx->caps.key_name_len = ngx_strlen(kc->name);

        if (ngx_http_tokenbiryani_caps_check(&tmcf->zone, ctx->key_hash,
                                             &ctx->caps, now)
            && ctx->caps.frees_at != 0)
        {
            return ngx_http_tokenbiryani_refuse_cap(r, ctx, now);
        }

        ctx->caps.reached = NGX_HTTP_TB_CAP_NONE;
    }

    /*
     * Its share: every place in flight held, it would have to wait, and
     * there is no place for it in the queue - refused as the queue would
     * refuse it, and counted the same
     */

    if (kc->max_inflight >= 0) {
        ngx_http_tokenbiryani_key_usage(&tmcf->zone, ctx->key_hash,
                                        &inflight, &queued);

        if (inflight >= (ngx_uint_t) kc->max_inflight
            && (tmcf->tbcf->queue_max_size == 0
                || ngx_http_tokenbiryani_wait_budget(r, ctx) == 0))
        {
            /* it would not wait: as admit_wait says it */
            ngx_http_tokenbiryani_set_retry_after(ctx, now + 1000, now);
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "key \"%s\" holds its max_inflight of %L requests",
                kc->name, kc->max_inflight);
            return NGX_HTTP_TB_FAIL;
        }

        if (inflight >= (ngx_uint_t) kc->max_inflight) {
            rc = ngx_http_tokenbiryani_queue_room(&tmcf->zone, ctx->key_hash,
                                                  kc->max_queued, &depth);

            if (rc != NGX_HTTP_TB_QUEUE_OK) {
                ngx_http_tokenbiryani_set_retry_after(ctx, now + 1000, now);
                return ngx_http_tokenbiryani_refuse_queue(r, ctx, rc, depth);
            }
        }
    }

    return NGX_OK;
}


/* a gateway header the client sent with a value it cannot take */

static ngx_int_t
ngx_http_tokenbiryani_bad_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *name, const char *expected)
{
    u_char            lc[32];
    size_t            len;
    ngx_table_elt_t  *h;

    len = ngx_strlen(name);
    ngx_strlow(lc, (u_char *) name, len);

    h = ngx_http_tokenbiryani_own_header(r, ctx, (char *) lc, len);

    ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
        "invalid_request_error", "%s: expected %s, not \"%V\"", name,
        expected, &h->value);

    return NGX_HTTP_TB_FAIL;
}


ngx_int_t
ngx_http_tokenbiryani_admit_request(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                             now, budget;
    ngx_int_t                           slot;
    const tb_config_t                  *cf;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;
    kc = ctx->key;
    now = ngx_http_tokenbiryani_now_ms();

    if (ngx_http_tokenbiryani_admit_priority(r, ctx) != NGX_OK) {
        return ngx_http_tokenbiryani_bad_header(r, ctx,
                   "X-TokenBiryani-Priority", "\"interactive\" or \"batch\"");
    }

    /* the wait budget: the smallest of the three */

    budget = ngx_http_tokenbiryani_wait_budget(r, ctx);

    if (budget < 0) {
        return ngx_http_tokenbiryani_bad_header(r, ctx,
                   "X-TokenBiryani-Max-Wait", "a number of seconds");
    }

    ctx->wait.budget_ms = budget;

    ctx->wait.deadline_ms = cf->retry_deadline_seconds > 0
                       ? ctx->started_ms
                         + (int64_t) (cf->retry_deadline_seconds * 1000)
                       : 0;

    /* the key's rpm counts the requests it admits, and only those */

    if (kc && kc->rpm >= 0) {
        slot = ngx_http_tokenbiryani_admit_rpm(r, ctx, tmcf, now);

        if (slot == -1) {
            return NGX_HTTP_TB_FAIL;
        }

        if (slot >= 0) {
            ctx->rpm_slot = slot;
            ctx->rpm_taken = now;
        }
    }

    /* the caps of its key and its conversation, as they are now */

    if (ctx->kind == NGX_HTTP_TB_MESSAGES
        && (ctx->caps.key_cap >= 0 || ctx->caps.session_cap >= 0
            || ctx->caps.session_turns >= 0)
        && ngx_http_tokenbiryani_caps_check(&tmcf->zone, ctx->key_hash,
                                            &ctx->caps, now))
    {
        if (ctx->caps.frees_at) {
            return ngx_http_tokenbiryani_refuse_cap(r, ctx, now);
        }

        /* held by requests in flight only: it waits for them to settle */
        ctx->caps.reached = NGX_HTTP_TB_CAP_NONE;
    }

    return NGX_OK;
}


/*
 * A cap reached: 429, saying which, how much of it is held and when the
 * window frees room.  One that frees within a minute (or is held only by
 * requests in flight) is worth a retry after it; one that frees later is
 * not, and the client is told not to retry (x-should-retry: false).
 */

/* "24h", "90m", "3s": the spend window, as an operator wrote it */
static void
ngx_http_tokenbiryani_window_text(double hours, char *buf, size_t size)
{
    u_char   *p;
    int64_t   s;

    s = (int64_t) (hours * 3600 + 0.5);

    if (s % 3600 == 0) {
        p = ngx_snprintf((u_char *) buf, size - 1, "%Lh", s / 3600);

    } else if (s % 60 == 0) {
        p = ngx_snprintf((u_char *) buf, size - 1, "%Lm", s / 60);

    } else {
        p = ngx_snprintf((u_char *) buf, size - 1, "%Ls", s);
    }

    *p = '\0';
}


ngx_int_t
ngx_http_tokenbiryani_refuse_cap(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    char                           held[32], limit[32], fl[32], wait[32];
    char                           window[32];
    u_char                         when[96], inflight[96], *p;
    const tb_config_t             *cf;
    ngx_http_tokenbiryani_caps_t  *caps;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;
    caps = &ctx->caps;

    if (caps->frees_at < 0) {
        /* a limit of 0: nothing will ever be allowed */
        ctx->final = 1;
        p = ngx_snprintf(when, sizeof(when) - 1,
                         "nothing may be spent until the limit is raised");

    } else if (caps->frees_at == 0) {
        /* what holds it is in flight: it settles soon */
        ngx_http_tokenbiryani_set_retry_after(ctx, now + 1000, now);
        p = ngx_snprintf(when, sizeof(when) - 1,
                         "room again when requests in flight settle");

    } else {
        (void) tb_wait_format(caps->frees_at - now, wait, sizeof(wait));
        p = ngx_snprintf(when, sizeof(when) - 1, caps->frees_within
                         ? "room again within %s, as what other instances "
                           "spent leaves the window"
                         : "room again in %s", wait);

        if (caps->frees_at - now <= 60000) {
            ngx_http_tokenbiryani_set_retry_after(ctx, caps->frees_at, now);

        } else {
            ctx->final = 1;
        }
    }

    *p = '\0';

    if (ctx->final) {
        /* not to be retried: no retry-after (the queue may have set one) */
        ctx->wait.retry_after = 0;
    }

    ngx_http_tokenbiryani_window_text(cf->spend_window_hours, window,
                                      sizeof(window));

    if (caps->reached == NGX_HTTP_TB_CAP_TURNS) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error",
            "this conversation has run %L turns in the last %s, at the "
            "%L-turn limit (session_max_turns) of key \"%s\"; start a new "
            "conversation or raise the limit; %s", caps->held, window,
            caps->limit, ctx->key->name, when);

        return NGX_HTTP_TB_FAIL;
    }

    (void) tb_usd_format(caps->held, held, sizeof(held));
    (void) tb_usd_format(caps->limit, limit, sizeof(limit));
    (void) tb_usd_format(caps->in_flight, fl, sizeof(fl));

    p = (caps->in_flight > 0)
        ? ngx_snprintf(inflight, sizeof(inflight) - 1,
                       " ($%s of it reserved by requests in flight)", fl)
        : inflight;
    *p = '\0';

    ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
        "rate_limit_error",
        "%s \"%s\" has spent $%s of its $%s %s in the last %s%s; %s",
        caps->reached == NGX_HTTP_TB_CAP_KEY ? "key" : "a conversation of key",
        ctx->key->name, held, limit,
        caps->reached == NGX_HTTP_TB_CAP_KEY ? "spend cap (spend_cap_usd)"
                                             : "limit (session_cap_usd)",
        window, inflight, when);

    return NGX_HTTP_TB_FAIL;
}


double
ngx_http_tokenbiryani_admit_ahead(ngx_http_request_t *r, int64_t now)
{
    double                              ahead;
    int64_t                             week, spent, at;
    tb_pace_t                           p;
    const tb_config_t                  *cf;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;

    if (!ngx_http_tokenbiryani_pacer_on(tmcf)
        || ngx_http_tokenbiryani_pace_get(&tmcf->zone, &week, &spent, &at)
           != NGX_OK
        || week != tb_pace_week_start(now, cf->pacing_week_day,
                                      cf->pacing_week_minute,
                                      cf->pacing_tz_min))
    {
        /* not read yet, or last week's */
        return 0;
    }

    tb_pace_fixed(&p, week, week + TB_PACE_WEEK_MS, now, spent,
                  tb_usd_to_nd(cf->pacing_weekly_budget_usd),
                  ngx_strcmp(cf->pacing_curve, "business_hours") == 0,
                  cf->pacing_tz_min, cf->pacing_ahead_threshold,
                  cf->pacing_behind_threshold);

    ahead = cf->pacing_ahead_threshold;

    return p.pace > ahead ? (p.pace - ahead) / ngx_max(ahead, .01) : 0;
}


int64_t
ngx_http_tokenbiryani_admit_paced(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    double                              over;
    int64_t                             delay, left;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (ctx->wait.priority == 0 || ctx->kind != NGX_HTTP_TB_MESSAGES) {
        /* interactive traffic is never held back */
        return 0;
    }

    over = ngx_http_tokenbiryani_admit_ahead(r, now);

    if (over <= 0) {
        return 0;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    /* the further ahead, the longer: all of max_batch_delay_seconds once
     * it is twice the threshold ahead */

    delay = (int64_t) (tmcf->tbcf->pacing_max_batch_delay_seconds * 1000
                       * ngx_min(over, 1.0));

    left = ctx->wait.budget_ms - ctx->wait.waited_ms - ctx->wait.paced_ms;

    if (ctx->wait.deadline_ms) {
        left = ngx_min(left, ctx->wait.deadline_ms - now);
    }

    return ngx_max(ngx_min(delay, left), 0);
}


ngx_int_t
ngx_http_tokenbiryani_admit_attempt(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, uint64_t *gen)
{
    int64_t                             now;
    ngx_uint_t                          i, n, tried;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    if (ngx_http_tokenbiryani_budget_spent(r, ctx, now)) {
        return NGX_HTTP_TB_FAIL;
    }

    /* read before the decision: capacity returning after it is not lost */
    *gen = ngx_http_tokenbiryani_capacity_gen(&tmcf->zone, NULL);

    if (ctx->attempts == 0 && ctx->wait.queued == 0
        && !ngx_http_tokenbiryani_queue_clear_ahead(&tmcf->zone,
                                                     ctx->wait.priority, now))
    {
        /* waiters that could use what is there go first */

        (void) ngx_http_tokenbiryani_route(r, ctx, 0);

        if (!ctx->route.decision.servable) {
            return ngx_http_tokenbiryani_refuse_unservable(r, ctx);
        }

        /* ... or is it its own key's share that holds it back? */

        if (ctx->key && ctx->key->max_inflight >= 0) {
            ngx_http_tokenbiryani_key_usage(&tmcf->zone, ctx->key_hash,
                                            &i, &n);

            ctx->key_full = (i >= (ngx_uint_t) ctx->key->max_inflight);
        }

        ngx_http_tokenbiryani_event_admission(r, ctx, NULL, NULL,
                                              ctx->key_full
                                              ? NGX_HTTP_TB_QUEUE_KEY
                                              : NGX_HTTP_TB_QUEUE_BEHIND, 0);

        /* it has not tried: it may as soon as its turn comes */
        *gen = 0;

        return NGX_HTTP_TB_QUEUE;
    }

    a = ngx_http_tokenbiryani_route(r, ctx, 1);

    if (ctx->caps.reached) {
        /* taking its lease, a cap was reached */
        return ngx_http_tokenbiryani_refuse_cap(r, ctx, now);
    }

    if (a == NULL) {

        /*
         * No other account can take it now: one that failed in a way that
         * may not happen again (retry_any) takes it again.  When only
         * accounts this request gave up on are left, within the budget
         * they all get another chance, when they can take it again - a
         * 429'd account after its cooldown, through the queue.
         */

        n = ctx->naccounts;
        tried = 0;

        for (i = 0; i < n; i++) {
            if (ctx->route.outs[i].verdict == TB_V_TRIED
                && (!ctx->route.decision.servable
                    || (ctx->marks[i] & NGX_HTTP_TB_MARK_AGAIN)))
            {
                ctx->marks[i] &= ~(NGX_HTTP_TB_MARK_TRIED
                                   |NGX_HTTP_TB_MARK_AGAIN);
                tried++;
            }
        }

        if (tried) {
            a = ngx_http_tokenbiryani_route(r, ctx, 1);
        }
    }

    if (a) {
        ctx->route.next = a;
        return NGX_HTTP_TB_GO;
    }

    if (!ctx->route.decision.servable) {
        ngx_http_tokenbiryani_event_admission(r, ctx, NULL, NULL,
                                              NGX_HTTP_TB_REFUSE, 0);

        return ngx_http_tokenbiryani_refuse_unservable(r, ctx);
    }

    if (!ctx->key_full) {
        ngx_http_tokenbiryani_event_admission(r, ctx, NULL, NULL,
                                              NGX_HTTP_TB_QUEUE_SATURATED, 0);
    }

    return NGX_HTTP_TB_QUEUE;
}


ngx_int_t
ngx_http_tokenbiryani_admit_wait(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now, int64_t *left)
{
    char                                in[32];
    int64_t                             soonest;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    soonest = ctx->route.decision.soonest;
    *left = ctx->wait.budget_ms - ctx->wait.waited_ms - ctx->wait.paced_ms;

    /* capacity held by requests in flight comes back at no known time */
    ngx_http_tokenbiryani_set_retry_after(ctx, soonest ? soonest : now + 1000,
                                          now);

    if (*left <= 0 || tmcf->tbcf->queue_max_size == 0) {

        if (ctx->key_full) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "key \"%s\" holds its max_inflight of %L requests%s",
                ctx->key->name, ctx->key->max_inflight,
                ctx->wait.queued ? ", and did for the whole wait" : "");

        } else if (ctx->wait.queued) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "waited %Ls for pool capacity without any becoming "
                "available", (ctx->wait.waited_ms + 500) / 1000);

        } else if (soonest > now + 60000 && !ctx->route.decision.by_event) {
            /* long enough to be said in words */
            (void) tb_wait_format(soonest - now, in, sizeof(in));

            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "every account that can serve this request is at capacity "
                "for %is (%s); see retry-after", ctx->wait.retry_after, in);

        } else {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
                "rate_limit_error",
                "every account that can serve this request is at capacity%s",
                ctx->wait.retry_after ? "; see retry-after" : "");
        }

        return NGX_HTTP_TB_FAIL;
    }

    /* the key's own requests end at no known time */

    if (!ctx->key_full && !ctx->route.decision.by_event && soonest
        && soonest - now > *left)
    {
        /* "for 18001s (5h 0m)": a client shows this message as it is */
        (void) tb_wait_format(soonest - now, in, sizeof(in));

        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error",
            "every account that can serve this request is at capacity for "
            "%is (%s), longer than this request may wait (%Ls)",
            ctx->wait.retry_after, in, (*left + 999) / 1000);
        return NGX_HTTP_TB_FAIL;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_refuse_queue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t rc, ngx_uint_t depth)
{
    if (rc == NGX_HTTP_TB_QUEUE_FULL) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error", "wait queue is full (%ui waiting)", depth);

    } else if (rc == NGX_HTTP_TB_QUEUE_KEY_FULL) {
        ngx_http_tokenbiryani_set_retry_after(ctx,
                                 ngx_http_tokenbiryani_now_ms() + 1000,
                                 ngx_http_tokenbiryani_now_ms());
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error",
            "key \"%s\" already has %ui requests waiting, its max_queued",
            ctx->key->name, depth);

    } else {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_SERVICE_UNAVAILABLE,
            "overloaded_error",
            "the gateway's shared zone has no room to queue this request");
    }

    return NGX_HTTP_TB_FAIL;
}


ngx_int_t
ngx_http_tokenbiryani_refuse_waited(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    int64_t  soonest;

    if (ngx_http_tokenbiryani_budget_spent(r, ctx, now)) {
        /* the deadline's error says it better */
        return NGX_HTTP_TB_FAIL;
    }

    soonest = ngx_http_tokenbiryani_soonest(r, ctx, now);

    ngx_http_tokenbiryani_set_retry_after(ctx, soonest ? soonest : now + 1000,
                                          now);

    if (ctx->key_full) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error",
            "waited %Ls while key \"%s\" held its max_inflight of %L "
            "requests", (ctx->wait.waited_ms + 500) / 1000, ctx->key->name,
            ctx->key->max_inflight);

    } else {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
            "rate_limit_error",
            "waited %Ls for pool capacity without any becoming available",
            (ctx->wait.waited_ms + 500) / 1000);
    }

    return NGX_HTTP_TB_FAIL;
}


/* the three bounds of the retry budget, whichever binds first */

ngx_uint_t
ngx_http_tokenbiryani_budget_spent(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    const tb_config_t                  *cf;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;

    if (ctx->wait.deadline_ms && now >= ctx->wait.deadline_ms) {
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
        (void) ngx_http_tokenbiryani_refuse_final(r, ctx, "retry.max_attempts");
        return 1;
    }

    if (ctx->excluded >= (ngx_uint_t) cf->retry_max_accounts) {
        (void) ngx_http_tokenbiryani_refuse_final(r, ctx, "retry.max_accounts");
        return 1;
    }

    return 0;
}


/*
 * The request's own error when its attempts ran out: the Anthropic type of
 * the last failure's class, and when capacity should come back.
 */

ngx_int_t
ngx_http_tokenbiryani_refuse_final(ngx_http_request_t *r,
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
 * (the verdicts of the decision just made), with a status no client
 * library retries -- the official SDKs retry 408, 409, 429 and 5xx -- and
 * x-should-retry: false, which they obey before looking at the status.
 */

ngx_int_t
ngx_http_tokenbiryani_refuse_unservable(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_uint_t  i, n, exceeds, model, refused;

    n = ctx->naccounts;

    exceeds = 0;
    model = 0;
    refused = 0;

    for (i = 0; i < n; i++) {
        switch (ctx->route.outs[i].verdict) {
        case TB_V_EXCEEDS:
            exceeds++;
            break;
        case TB_V_MODEL:
            model++;
            break;
        case TB_V_REJECTED:
            refused++;
            break;
        default:
            break;
        }
    }

    ctx->final = 1;

    if (exceeds) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
            "invalid_request_error",
            "no account in this pool can serve this request: it exceeds "
            "every account's rate limit (about %L input tokens, max_tokens "
            "%L)", ctx->route.need.n[TB_WIN_INPUT], ctx->route.need.max_tokens);

    } else if (refused) {

        /*
         * The model is offered, and refused upstream by every account
         * that offers it (a 403 permission_error, Bedrock's
         * AccessDeniedException, Vertex's PERMISSION_DENIED): the truth
         * is a permission the operator has to grant, not a model unknown.
         */

        if (ctx->account && ctx->last_error.len) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN,
                "permission_error",
                "no account in this pool can serve this request: every "
                "account%s that offers model \"%s\" refused it; the last: "
                "account \"%V\" %V",
                ctx->key && ctx->key->pool.n ? " in this key's pool" : "",
                ctx->body.model, &ctx->account->id, &ctx->last_error);

        } else {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN,
                "permission_error",
                "no account in this pool can serve this request: every "
                "account%s that offers model \"%s\" refused it",
                ctx->key && ctx->key->pool.n ? " in this key's pool" : "",
                ctx->body.model);
        }

    } else if (model) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_NOT_FOUND,
            "not_found_error",
            "no account in this pool can serve this request: none supports "
            "model \"%s\"%s", ctx->body.model,
            ctx->key && ctx->key->pool.n ? " in this key's pool" : "");

    } else {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN,
            "permission_error",
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
        ctx->wait.retry_after = 0;
        return;
    }

    s = (at - now + 999) / 1000;

    ctx->wait.retry_after = (ngx_int_t) ngx_max(s, 1);
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
    n = ctx->naccounts;

    if (ctx->route.cands == NULL || n == 0) {
        return 0;
    }

    c = ngx_palloc(r->pool, n * sizeof(tb_cand_t));
    outs = ngx_palloc(r->pool, n * sizeof(tb_cand_out_t));
    if (c == NULL || outs == NULL) {
        return 0;
    }

    ngx_memcpy(c, ctx->route.cands, n * sizeof(tb_cand_t));

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
