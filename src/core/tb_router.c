/*
 * The router: mirror arithmetic, filters, scores, strategies, leases.
 */

#include <stdio.h>
#include <string.h>

#include "tb_router.h"
#include "tb_hash.h"
#include "tb_provider.h"


const char *tb_term_names[TB_TERMS] = {
    "affinity", "headroom", "priority", "load", "errors", "cost"
};


/*
 * The six strategies: per-term multipliers of routing.weights.  Affinity
 * against headroom is what keeps a conversation on the account that holds
 * its prompt cache.
 */

const tb_strategy_t  tb_builtin_strategy_table[] = {

    { "sticky_headroom",
      "affinity first, then the most headroom (default)",
      { 1, 1, 1, 1, 1, 1 }, 0, NULL, { NULL }, NULL },

    { "headroom",
      "the most headroom, affinity off (cache-blind)",
      { 0, 1, 1, 1, 1, 1 }, 0, NULL, { NULL }, NULL },

    { "cost_tiered",
      "drain the cheapest tier first, spill upward",
      { .5, .25, 1, 1, 1, 8 }, 0, NULL, { NULL }, NULL },

    { "priority",
      "strict ordered failover by account priority",
      { .25, .25, 8, 1, 1, 1 }, 0, NULL, { NULL }, NULL },

    { "least_loaded",
      "the fewest requests in flight (cache-blind)",
      { 0, .2, 1, 8, 1, 1 }, 0, NULL, { NULL }, NULL },

    { "round_robin",
      "rotation, ignoring every signal (cache-blind)",
      { 0, 0, 0, 0, 0, 0 }, 1, NULL, { "rotation", NULL }, NULL },

    { NULL, NULL, { 0 }, 0, NULL, { NULL }, NULL }
};


const tb_strategy_t *
tb_strategy_builtin(const char *name)
{
    const tb_strategy_t  *s;

    for (s = tb_builtin_strategy_table; s->name; s++) {
        if (strcmp(s->name, name) == 0) {
            return s;
        }
    }

    return NULL;
}


#define tb_level  tb_window_level_inline

/* the tie-break's scale: below any difference a weight can make */
#define TB_JITTER  1e-6


int64_t
tb_window_level(const tb_window_t *w, int64_t now)
{
    return tb_level(w, now);
}


int64_t
tb_window_available(const tb_account_state_t *st, int win, int64_t now)
{
    int64_t  level, slice;

    level = tb_window_level(&st->mirror.w[win], now);

    if (level == TB_UNKNOWN) {
        return TB_UNKNOWN;
    }

    if (st->shared && win != TB_WIN_OUTPUT) {
        /*
         * Several gateways: what the window leaves once what the others
         * hold is taken off too, and no more than this one's slice
         */
        level -= tb_account_others(st, win, now)
                 + tb_account_held(st, win, now);

        slice = tb_slice_left(st, win, now);

        if (slice != TB_UNKNOWN && slice < level) {
            level = slice;
        }

        return level > 0 ? level : 0;
    }

    if (st->withheld) {
        /* the part of it this gateway holds, of several sharing the pool */
        level = level * (TB_SHARE_ONE - st->withheld) / TB_SHARE_ONE;
    }

    level -= tb_account_held(st, win, now);

    return level > 0 ? level : 0;
}


double
tb_headroom(const tb_account_conf_t *conf, const tb_account_state_t *st,
    int64_t now)
{
    int      w;
    double   h, f;
    int64_t  avail, limit;

    if (conf && !conf->observable_limits) {
        /* a subscription's: 1 - its tightest window's utilization */
        f = conf->type == TB_ACCOUNT_OAUTH
            ? tb_unified_headroom(&st->unified, now) : -1;

        return f >= 0 ? f : conf->assumed_headroom;
    }

    if (st->withheld >= TB_SHARE_ONE) {
        return 0.0;
    }

    h = 1.0;

    for (w = 0; w < TB_NWINDOWS; w++) {
        limit = st->mirror.w[w].limit;
        avail = tb_window_available(st, w, now);

        if (st->withheld) {
            limit = limit * (TB_SHARE_ONE - st->withheld) / TB_SHARE_ONE;
        }

        if (limit <= 0 || avail == TB_UNKNOWN) {
            continue;
        }

        f = (double) avail / (double) limit;

        if (f > 1.0) {
            f = 1.0;
        }

        if (f < h) {
            h = f;
        }
    }

    return h;
}


int
tb_fits(const tb_account_state_t *st, const tb_need_t *need, int64_t now)
{
    int      w;
    int64_t  avail;

    if (st->withheld >= TB_SHARE_ONE && !tb_need_empty(need)) {
        /* this gateway holds none of the pool now */
        return 0;
    }

    for (w = 0; w < TB_NWINDOWS; w++) {
        avail = tb_window_available(st, w, now);

        if (avail != TB_UNKNOWN && avail < need->n[w]) {
            return 0;
        }
    }

    return 1;
}


/*
 * A window short of its limit not yet known to be a bucket or a fixed
 * window: its reset is when it is full at the latest; a bucket's next
 * answers would say sooner.  Not a time to refuse a request for.
 */
static int
tb_refill_unsure(const tb_account_state_t *st, int64_t now)
{
    int                 w;
    const tb_window_t  *win;

    for (w = 0; w < TB_NWINDOWS; w++) {
        win = &st->mirror.w[w];

        if (win->refill == TB_REFILL_AUTO && win->remaining >= 0
            && win->remaining < win->limit && win->reset_ms > now)
        {
            return 1;
        }
    }

    return 0;
}


int64_t
tb_fits_at(const tb_account_state_t *st, const tb_need_t *need, int64_t now)
{
    int                 w;
    int64_t             want, at, latest, span, share;
    const tb_window_t  *win;

    latest = now;

    for (w = 0; w < TB_NWINDOWS; w++) {
        win = &st->mirror.w[w];

        if (tb_window_level(win, now) == TB_UNKNOWN
            || tb_window_available(st, w, now) >= need->n[w])
        {
            continue;
        }

        want = need->n[w] + tb_account_held(st, w, now);

        if (st->shared && w != TB_WIN_OUTPUT) {
            /*
             * Its share is its slice's: the slice must hold it, and the
             * whole window it with what everyone holds
             */
            at = tb_slice_at(st, w, need->n[w], now);

            if (at == 0) {
                return 0;
            }

            if (at > latest) {
                latest = at;
            }

            want += tb_account_others(st, w, now);

        } else if (st->withheld) {
            /* what the whole window must hold for this share to fit it */
            share = TB_SHARE_ONE - (int64_t) st->withheld;

            if (share <= 0) {
                return 0;
            }

            want = (want * TB_SHARE_ONE + share - 1) / share;
        }

        if (want <= tb_window_level(win, now)) {
            /* the window holds it: only the slice lacks it */
            continue;
        }

        if (win->limit <= 0 || want > win->limit) {
            /* only leases coming back can make room: not knowable */
            return 0;
        }

        if (win->refill != TB_REFILL_BUCKET && win->reset_ms > now) {
            /*
             * Nothing before its reset, all of it then (not yet known to
             * be a bucket: at the latest then, see tb_refill_unsure())
             */
            at = win->reset_ms;

            if (at > latest) {
                latest = at;
            }

            continue;
        }

        if (win->reset_ms > win->observed_ms) {
            span = win->reset_ms - win->observed_ms;

        } else {
            span = 60000 * (win->limit - win->remaining) / win->limit;
        }

        if (win->limit > win->remaining && span > 0) {
            at = win->observed_ms
                 + (want - win->remaining) * span
                   / (win->limit - win->remaining);

            /* the integer division rounds down: one more millisecond */
            at++;

        } else {
            at = win->reset_ms ? win->reset_ms : 0;
        }

        if (at == 0) {
            return 0;
        }

        if (at > latest) {
            latest = at;
        }
    }

    return latest;
}


int
tb_exceeds_limits(const tb_account_state_t *st, const tb_need_t *need)
{
    const tb_window_t  *w;

    w = &st->mirror.w[TB_WIN_INPUT];

    if (w->limit >= 0 && need->n[TB_WIN_INPUT] > w->limit) {
        return 1;
    }

    /* admission uses the caller's ceiling, whatever the lease predicts */

    w = &st->mirror.w[TB_WIN_OUTPUT];

    if (w->limit >= 0 && need->max_tokens > w->limit) {
        return 1;
    }

    w = &st->mirror.w[TB_WIN_REQUESTS];

    return w->limit >= 0 && need->n[TB_WIN_REQUESTS] > w->limit;
}


int
tb_probing(const tb_account_conf_t *conf, const tb_account_state_t *st,
    int64_t now)
{
    return (conf == NULL || conf->observable_limits)
           && st->mirror.observed_ms == 0 && st->leases > 0
           && now - st->probe_ms < TB_PROBE_MS;
}


/*
 * The filters.  Every window is read once, for the three things that need
 * it (a request larger than the window, whether it fits now, the
 * headroom): this is the decision's inner loop.
 */

static tb_verdict_e
tb_route_filter(const tb_route_in_t *in, const tb_need_t *need,
    const tb_cand_t *c, tb_cand_out_t *o)
{
    int                        fits, exceeds;
    double                     h, f;
    int64_t                    avail, cap, spent;
    const tb_window_t         *win;
    const tb_account_conf_t   *conf;
    const tb_account_state_t  *st, *ws;

    st = c->st;
    conf = c->conf;

    /* the windows are its capacity domain's, the rest its own */
    ws = c->cap ? c->cap : st;

    if (!c->in_pool) {
        return TB_V_POOL;
    }

    fits = 1;
    exceeds = 0;
    h = 1.0;

    /*
     * The three windows, unrolled: this is the decision's inner loop.
     * Admission takes the caller's max_tokens for the output window,
     * whatever the lease says.
     */

#define tb_route_window(wi, want)                                             \
    win = &ws->mirror.w[wi];                                                  \
                                                                              \
    if (win->remaining >= 0) {                                                \
        if ((uint64_t) (want) > (uint64_t) win->limit) { /* -1: none */       \
            exceeds = 1;                                                      \
        }                                                                     \
                                                                              \
        avail = tb_level(win, in->now) - tb_account_held(ws, wi, in->now);    \
                                                                              \
        if (avail < need->n[wi]) {                                            \
            fits = 0;                                                         \
            avail = avail > 0 ? avail : 0;                                    \
        }                                                                     \
                                                                              \
        if (win->limit > 0) {                                                 \
            f = (double) avail / (double) win->limit;                         \
            h = f < h ? f : h;                                                \
        }                                                                     \
    }

    tb_route_window(TB_WIN_REQUESTS, need->n[TB_WIN_REQUESTS])
    tb_route_window(TB_WIN_INPUT, need->n[TB_WIN_INPUT])
    tb_route_window(TB_WIN_OUTPUT, need->max_tokens)

#undef tb_route_window

    if (fits && (ws->shared || ws->withheld) && !tb_fits(ws, need, in->now)) {
        /*
         * The window has room, this gateway's part of it (its slices, what
         * the others hold) does not: not eligible - the lease would be
         * refused - but saturated, with the time its part comes back
         */
        fits = 0;
    }

    o->headroom = conf->observable_limits ? (h < 1.0 ? h : 1.0)
                                          : tb_headroom(conf, st, in->now);

    if (c->removed) {
        return TB_V_DISABLED;
    }

    if (exceeds) {
        return TB_V_EXCEEDS;
    }

    if (!c->supported || c->messages_only || conf->unusable
        || !conf->enabled || st->disabled)
    {
        return TB_V_DISABLED;
    }

    if (in->model
        && !conf->models_any
        && !tb_models_match(conf->models.items, conf->models.n, in->model,
                            in->model_len))
    {
        return TB_V_MODEL;
    }

    /* Bedrock and Vertex serve a model only under its platform id */

    if (in->model && tb_provider_platform(conf->type)
        && tb_model_map(conf, in->model, in->model_len) == NULL)
    {
        return TB_V_MODEL;
    }

    if (st->nrejected && tb_account_rejects(st, in->model_hash)) {
        return TB_V_REJECTED;
    }

    /* an account this request gave up on, for now */

    if (c->tried) {
        return TB_V_TRIED;
    }

    /* from here on: capacity that comes back by itself */

    if (c->token_wait) {
        o->available_at = c->token_at > in->now ? c->token_at : in->now;
        return TB_V_TOKEN;
    }

    if (st->exhausted_until_ms > in->now) {
        o->available_at = st->exhausted_until_ms;
        return TB_V_EXHAUSTED;
    }

    if (st->cooling_until_ms > in->now) {
        o->available_at = st->cooling_until_ms;
        return TB_V_COOLING;
    }

    if (st->inflight >= tb_account_max_inflight(st, conf->max_concurrency)) {
        return TB_V_CONCURRENCY;
    }

    if (conf->spend_cap_usd >= 0) {
        cap = tb_usd_to_nd(conf->spend_cap_usd);

        if (tb_ledger_over(&st->spend, in->now, in->spend_bucket_ms, cap)) {
            /* how much of its cap is held, and when the window frees */
            spent = tb_ledger_spent(&st->spend, in->now, in->spend_bucket_ms,
                                    NULL)
                    + st->spend.reserved;
            o->headroom = cap > 0 ? (double) spent / (double) cap : 1.0;
            o->available_at = tb_ledger_frees_at(&st->spend, in->now,
                                                 in->spend_bucket_ms, cap, 0);
            return TB_V_SPEND;
        }
    }

    if (st->breaker.open
        && !tb_breaker_allows(&st->breaker, &in->breaker, in->now))
    {
        /* open: until it half-opens; half-open with its probe out: 0 */
        o->available_at = tb_breaker_half_open_at(&st->breaker,
                                                  &in->breaker, in->now);
        return TB_V_CIRCUIT;
    }

    if (!fits) {
        o->available_at = tb_fits_at(ws, need, in->now);
        return TB_V_HEADROOM;
    }

    if (!tb_need_empty(need) && tb_probing(conf, ws, in->now)) {
        o->available_at = ws->probe_ms + TB_PROBE_MS;
        return TB_V_HEADROOM;
    }

    return TB_V_ELIGIBLE;
}


/*
 * Whether candidate i holds the conversation's prompt cache: the owner, or
 * a key of the owner's capacity domain (the cache is the organisation's).
 */
static int
tb_route_cache_holder(const tb_route_in_t *in, const tb_cand_t *c, size_t n,
    size_t i)
{
    if (in->owner < 0 || (size_t) in->owner >= n) {
        return 0;
    }

    return (int) i == in->owner
           || (c[i].domain != 0 && c[i].domain == c[in->owner].domain);
}


static int
tb_route_saturated(tb_verdict_e v)
{
    /* capacity that comes back by itself: worth waiting for */
    return v == TB_V_COOLING || v == TB_V_CONCURRENCY || v == TB_V_SPEND
           || v == TB_V_CIRCUIT || v == TB_V_HEADROOM || v == TB_V_EXHAUSTED
           || v == TB_V_TOKEN;
}


void
tb_route(const tb_route_in_t *in, const tb_cand_t *c, size_t n,
    tb_cand_out_t *out, tb_decision_t *d)
{
    int                        best;
    size_t                     i, t;
    double                     score, tmin, tmax, load, jitter, cost;
    double                     wm[TB_TERMS];
    uint64_t                   h;
    tb_cand_out_t             *o;
    const tb_strategy_t       *s;
    const tb_account_conf_t   *conf;
    const tb_account_state_t  *st;

    s = in->strategy;

    d->chosen = -1;
    d->affinity = TB_AFF_NONE;
    d->soonest = 0;
    d->eligible = 0;
    d->servable = 0;
    d->by_event = 0;

    tmin = 0;
    tmax = 0;

    for (i = 0; i < n; i++) {
        o = &out[i];
        o->available_at = 0;
        o->headroom = 0;
        o->score = 0;

        /*
         * The owner counts less of the prompt: its cache holds the rest;
         * and so does a key of the owner's domain, whose organisation's
         * cache it is.
         */
        o->verdict = tb_route_filter(in, in->owner_discount
                                         && tb_route_cache_holder(in, c, n,
                                                                  i)
                                         ? &in->owner_need : &in->need,
                                     &c[i], o);

        if (o->verdict != TB_V_ELIGIBLE) {
            if (tb_route_saturated(o->verdict)) {
                d->servable = 1;

                /*
                 * Concurrency, headroom with leases outstanding, a probe
                 * out: the time is not knowable, a lease ending brings it.
                 */
                if (o->verdict == TB_V_CONCURRENCY
                    || o->verdict == TB_V_SPEND
                    || o->verdict == TB_V_TOKEN
                    || ((o->verdict == TB_V_HEADROOM
                         || o->verdict == TB_V_CIRCUIT)
                        && (o->available_at == 0
                            || (c[i].cap ? c[i].cap : c[i].st)->leases > 0))
                    || (o->verdict == TB_V_HEADROOM
                        && tb_refill_unsure(c[i].cap ? c[i].cap : c[i].st,
                                            in->now)))
                {
                    d->by_event = 1;
                }

                if (o->available_at
                    && (d->soonest == 0 || o->available_at < d->soonest))
                {
                    d->soonest = o->available_at;
                }
            }

            continue;
        }

        /* the cost spread is taken over the eligible accounts only */

        if (d->eligible == 0 || c[i].conf->cost_tier < tmin) {
            tmin = c[i].conf->cost_tier;
        }

        if (d->eligible == 0 || c[i].conf->cost_tier > tmax) {
            tmax = c[i].conf->cost_tier;
        }

        d->eligible++;
    }

    if (d->eligible == 0) {
        goto affinity;
    }

    d->servable = 1;
    best = -1;

    for (t = 0; t < TB_TERMS; t++) {
        wm[t] = in->weights[t] * s->mult[t];
    }

    cost = (tmax > tmin) ? -wm[5] / (tmax - tmin) : 0;

    for (i = 0; i < n; i++) {
        o = &out[i];

        if (o->verdict != TB_V_ELIGIBLE) {
            continue;
        }

        st = c[i].st;
        conf = c[i].conf;

        if (s->terms) {
            /* a plugin fills the terms it names; the others count 0 */
            memset(o->terms, 0, sizeof(o->terms));
            s->terms(s->data, in, c, out, i, n, o->terms);

            for (score = 0, t = 0; t < TB_TERMS; t++) {
                score += o->terms[t];
            }

        } else if (s->rotate) {
            /* the account after the cursor first, ignoring every signal */
            memset(o->terms, 0, sizeof(o->terms));
            o->terms[0] = -(double) ((i + n - in->cursor % n) % n);
            score = o->terms[0];

        } else {
            load = (double) st->inflight
                   / (double) (conf->max_concurrency
                               ? conf->max_concurrency : 1);

            /* the owner key first; a key of its domain shares its cache */
            o->terms[TB_T_AFFINITY] = ((int) i == in->owner) ? wm[0]
                                      : tb_route_cache_holder(in, c, n, i)
                                      ? wm[0] * TB_SIBLING_AFFINITY : 0;
            o->terms[TB_T_HEADROOM] = wm[1] * o->headroom;
            o->terms[TB_T_PRIORITY] = wm[2] * conf->priority;
            o->terms[TB_T_LOAD] = -wm[3] * (load < 1 ? load : 1);
            o->terms[TB_T_ERRORS] = st->noutcomes
                                    ? -wm[4] * (double) st->nfailures
                                      / (double) st->noutcomes
                                    : 0;
            o->terms[TB_T_COST] = cost * (conf->cost_tier - tmin);

            score = o->terms[0] + o->terms[1] + o->terms[2] + o->terms[3]
                    + o->terms[4] + o->terms[5];
        }

        /*
         * Ties break on a hash of (session, account): stable for one
         * conversation under replay, spread across conversations.
         */

        o->score = score;

        if (best >= 0 && score + TB_JITTER <= out[best].score) {
            continue;                   /* no jitter can lift it */
        }

        h = tb_hash_mix(in->session, c[i].id_hash);
        jitter = (double) (h >> 11) * (1.0 / 9007199254740992.0) * TB_JITTER;

        o->score = score + jitter;

        if (best < 0 || o->score > out[best].score) {
            best = (int) i;
        }
    }

    d->chosen = best;
    out[best].verdict = TB_V_CHOSEN;

affinity:

    if (in->owner < 0 || (size_t) in->owner >= n) {
        d->affinity = TB_AFF_NONE;

    } else if (out[in->owner].verdict == TB_V_CHOSEN
               || (d->chosen >= 0
                   && tb_route_cache_holder(in, c, n, (size_t) d->chosen)))
    {
        /* a key of the owner's organisation reads the same cache */
        d->affinity = TB_AFF_HONORED;

    } else if (out[in->owner].verdict == TB_V_ELIGIBLE) {
        d->affinity = TB_AFF_BROKEN;

    } else {
        d->affinity = TB_AFF_FORCED;
    }
}


size_t
tb_verdict_str(tb_verdict_e v, const tb_cand_out_t *o, const tb_cand_t *c,
    int64_t now, char *buf, size_t size)
{
    int          timed;
    char         held[32], capped[32], wait[32], what[TB_REASON_MAX + 16];
    int64_t      left, cap;
    const char  *why;

    timed = 0;

    switch (v) {

    case TB_V_CHOSEN:
        return (size_t) snprintf(buf, size, "chosen");

    case TB_V_ELIGIBLE:
        return (size_t) snprintf(buf, size, "eligible");

    case TB_V_POOL:
        why = "outside this key's pool";
        break;

    case TB_V_TRIED:
        why = "already attempted";
        break;

    case TB_V_EXCEEDS:
        why = "request exceeds account limit";
        break;

    case TB_V_DISABLED:
        if (c->removed) {
            why = "removed by an operator";

        } else if (c->conf->unusable) {
            why = c->conf->unusable;

        } else if (!c->supported) {
            why = "account type not supported by this build";

        } else if (c->messages_only) {
            why = "its platform serves /v1/messages only";

        } else if (!c->conf->enabled) {
            why = "disabled";

        } else if (c->st->disabled_reason[0]) {
            why = c->st->disabled_reason;

        } else {
            why = "disabled";
        }

        break;

    case TB_V_COOLING:
        why = "cooling";
        timed = 1;
        break;

    case TB_V_MODEL:
        /* an inspector record may outlive its account: no conf then */
        why = (c->conf == NULL || !tb_provider_platform(c->conf->type))
              ? "model not in account allowlist"
              : c->conf->models_any ? "model not in account model_map"
              : "model not in account allowlist or model_map";
        break;

    case TB_V_REJECTED:
        why = "model rejected by upstream";
        break;

    case TB_V_TOKEN:
        why = "waiting for an access token";
        break;

    case TB_V_CONCURRENCY:
        if (c->st
            && tb_account_max_inflight(c->st, c->conf->max_concurrency)
               < c->conf->max_concurrency)
        {
            return (size_t) snprintf(buf, size,
                                     "filtered \xe2\x80\x94 at the "
                                     "concurrency its 429s taught (%lld of "
                                     "%lld)",
                                     (long long) c->st->ceiling,
                                     (long long) c->conf->max_concurrency);
        }

        return (size_t) snprintf(buf, size,
                                 "filtered \xe2\x80\x94 at max concurrency "
                                 "(%lld)",
                                 (long long) c->conf->max_concurrency);

    case TB_V_SPEND:
        /* o->headroom: the share of the cap spent and held in flight */
        cap = tb_usd_to_nd(c->conf->spend_cap_usd);
        (void) tb_usd_format(cap > 0 ? (int64_t) (o->headroom * (double) cap)
                                     : 0, held, sizeof(held));
        (void) tb_usd_format(cap, capped, sizeof(capped));

        if (cap <= 0) {
            return (size_t) snprintf(buf, size,
                                     "filtered \xe2\x80\x94 spend cap of "
                                     "$0");
        }

        if (o->available_at == 0) {
            return (size_t) snprintf(buf, size,
                                     "filtered \xe2\x80\x94 spend cap "
                                     "reached ($%s of $%s, held by requests "
                                     "in flight)", held, capped);
        }

        (void) tb_wait_format(o->available_at - now, wait, sizeof(wait));

        return (size_t) snprintf(buf, size,
                                 "filtered \xe2\x80\x94 spend cap reached "
                                 "($%s of $%s), room again in %s",
                                 held, capped, wait);

    case TB_V_CIRCUIT:
        if (o->available_at == 0) {
            why = "circuit half-open, its probe in flight";
            break;
        }

        why = "circuit open";
        timed = 1;
        break;

    case TB_V_EXHAUSTED:
        (void) snprintf(what, sizeof(what), "exhausted (%s)",
                        c->st->exhausted_reason[0] ? c->st->exhausted_reason
                                                   : "spend");
        why = what;
        timed = 1;
        break;

    default: /* TB_V_HEADROOM */
        why = "insufficient headroom";
        break;
    }

    if (timed) {
        left = o->available_at > now ? o->available_at - now : 0;

        /* whole seconds, rounded as the reference does ("%.0f") */
        return (size_t) snprintf(buf, size,
                                 "filtered \xe2\x80\x94 %s, %llds remaining",
                                 why, (long long) ((left + 500) / 1000));
    }

    return (size_t) snprintf(buf, size, "filtered \xe2\x80\x94 %s", why);
}


const char *
tb_affinity_name(tb_affinity_e a)
{
    static const char  *names[] = { "none", "honored", "broken",
                                    "forced_break" };

    return names[a];
}
