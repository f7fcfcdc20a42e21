/*
 * Account state.
 */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tb_account.h"
#include "tb_ledger.h"


static void tb_slice_refill_to(tb_account_state_t *a, int64_t now_ms,
    int begin);


/*
 * A fixed window whose reset has passed: what it counted before is gone,
 * whether or not a reading since has said so
 */
static int
tb_window_reset_passed(const tb_window_t *w, int64_t now)
{
    return w->refill == TB_REFILL_FIXED && w->reset_ms && w->reset_ms <= now;
}


void
tb_account_state_init(tb_account_state_t *a, const char *id, size_t len,
    const unsigned char fingerprint[8])
{
    size_t    n;
    uint64_t  gen;

    gen = a->gen;

    memset(a, 0, sizeof(tb_account_state_t));

    n = len;
    if (n > TB_ID_MAX) {
        n = TB_ID_MAX;
    }

    memcpy(a->id, id, n);
    a->id[n] = '\0';
    memcpy(a->fingerprint, fingerprint, 8);
    a->gen = gen + 1;

    tb_mirror_init(&a->mirror);
    tb_unified_init(&a->unified);


}


tb_state_e
tb_account_state(const tb_account_state_t *a, int enabled,
    const tb_breaker_conf_t *bc, int64_t now_ms, int64_t *until_ms,
    const char **reason)
{
    *until_ms = 0;
    *reason = "";

    if (!enabled) {
        *reason = "disabled in config";
        return TB_STATE_DISABLED;
    }

    if (a->disabled) {
        *reason = a->disabled_reason[0] ? a->disabled_reason : "disabled";
        return TB_STATE_DISABLED;
    }

    if (a->exhausted_until_ms > now_ms) {
        *until_ms = a->exhausted_until_ms;
        *reason = a->exhausted_reason;
        return TB_STATE_EXHAUSTED;
    }

    if (a->breaker.open) {
        /* open until it half-opens, then one probe at a time */
        *until_ms = tb_breaker_half_open_at(&a->breaker, bc, now_ms);
        *reason = a->failing_reason[0] ? a->failing_reason : "circuit open";
        return TB_STATE_FAILING;
    }

    if (a->cooling_until_ms > now_ms) {
        *until_ms = a->cooling_until_ms;
        *reason = a->cooling_reason;
        return TB_STATE_COOLING;
    }

    if (a->breaker.failures
        && (a->failing_kind == TB_KIND_TRANSPORT
            || a->failing_kind == TB_KIND_TIMEOUT))
    {
        *reason = a->failing_reason;
        return TB_STATE_FAILING;
    }

    return TB_STATE_READY;
}


int
tb_account_rejects(const tb_account_state_t *a, uint64_t model_hash)
{
    uint32_t  i;

    for (i = 0; i < a->nrejected && i < TB_REJECTED_MAX; i++) {
        if (a->rejected[i].hash == model_hash) {
            return 1;
        }
    }

    return 0;
}


void
tb_account_reject(tb_account_state_t *a, uint64_t model_hash,
    const char *model, size_t len)
{
    uint32_t  i;

    if (tb_account_rejects(a, model_hash)) {
        return;
    }

    if (a->nrejected == TB_REJECTED_MAX) {
        memmove(&a->rejected[0], &a->rejected[1],
                (TB_REJECTED_MAX - 1) * sizeof(a->rejected[0]));
        a->nrejected--;
    }

    i = a->nrejected++;

    if (len >= TB_REJECTED_NAME) {
        len = TB_REJECTED_NAME - 1;
    }

    a->rejected[i].hash = model_hash;
    memcpy(a->rejected[i].name, model, len);
    a->rejected[i].name[len] = '\0';
}


/* a rest (a cooldown, an exhaustion) until until_ms, unless one ends later */
static void
tb_account_rest(int64_t *held_ms, char *held_reason, int64_t until_ms,
    const char *reason)
{
    if (until_ms > *held_ms) {
        *held_ms = until_ms;
        snprintf(held_reason, TB_REASON_MAX, "%s", reason);
    }
}


void
tb_account_unified(tb_account_state_t *a, const tb_unified_t *obs,
    int64_t now_ms)
{
    int64_t  until;

    tb_unified_apply(&a->unified, obs);

    until = tb_unified_blocked_until(&a->unified, now_ms);

    if (until) {
        tb_account_rest(&a->exhausted_until_ms, a->exhausted_reason, until,
                        "a subscription window used up (its answers said "
                        "rejected)");
    }
}


int
tb_account_apply(tb_account_state_t *a, const tb_outcome_t *o,
    const tb_breaker_conf_t *bc, uint64_t model_hash, const char *model,
    size_t model_len, int probed, int64_t now_ms)
{
    int               opened;
    const tb_rule_t  *r;

    r = o->rule;

    a->kinds[o->kind]++;

    switch (r->account) {

    case TB_ACC_COOLDOWN:
    case TB_ACC_SHORT_COOLDOWN:
        tb_account_rest(&a->cooling_until_ms, a->cooling_reason, o->until_ms,
                        o->reason);
        break;

    case TB_ACC_EXHAUST:
        tb_account_rest(&a->exhausted_until_ms, a->exhausted_reason,
                        o->until_ms, o->reason);
        break;

    case TB_ACC_DISABLE:
        if (!a->disabled) {
            a->disabled = 1;
            a->disabled_ms = now_ms;
            snprintf(a->disabled_reason, sizeof(a->disabled_reason), "%s",
                     o->reason);
        }

        break;

    case TB_ACC_MODEL:
        if (model) {
            tb_account_reject(a, model_hash, model, model_len);
        }

        break;

    default:
        break;
    }

    if (r->breaker != TB_OUT_NEUTRAL) {
        tb_account_outcome(a, r->breaker == TB_OUT_FAILURE);
    }

    opened = tb_breaker_record(&a->breaker, bc, r->breaker, probed, now_ms);

    if (r->breaker == TB_OUT_SUCCESS && !a->breaker.open) {
        a->last_success_ms = now_ms;
        a->failing_since_ms = 0;
        a->failing_reason[0] = '\0';

    } else if (r->breaker == TB_OUT_FAILURE) {
        if (a->failing_since_ms == 0) {
            a->failing_since_ms = now_ms;
        }

        a->failing_kind = (uint32_t) o->kind;

        if (a->breaker.open) {
            snprintf(a->failing_reason, sizeof(a->failing_reason),
                     "circuit open after %u failures in a row: %.52s",
                     a->breaker.failures, o->reason);

        } else {
            snprintf(a->failing_reason, sizeof(a->failing_reason), "%s",
                     o->reason);
        }
    }

    return opened;
}


/*
 * pending, from the releases kept: what each window's latest answer may
 * not count; releases every window surely counts are dropped.
 */
static void
tb_account_pending(tb_account_state_t *a, int64_t now)
{
    int                 w, keep;
    uint32_t            i, j;
    uint64_t            s;
    tb_release_t       *r;
    const tb_window_t  *win;

    a->pending[TB_WIN_REQUESTS] = 0;
    a->pending[TB_WIN_INPUT] = 0;

    for (i = 0, j = 0; i < a->nreleased; i++) {
        r = &a->released[i];
        keep = 0;

        for (w = TB_WIN_REQUESTS; w <= TB_WIN_INPUT; w++) {
            win = &a->mirror.w[w];
            s = win->seq;

            if (r->n[w] == 0 || r->ended < s
                || (a->shared && tb_window_counts(win, w, r->seen[w], now))
                || (r->ended_ms
                    && r->ended_ms + TB_CLOCK_SKEW_MS < win->sent_ms)
                || (r->ended_ms && tb_window_reset_passed(win, now)
                    && r->ended_ms + TB_CLOCK_SKEW_MS < win->reset_ms))
            {
                /*
                 * nothing of it there, or that window's answer counts it:
                 * its request was taken after this one ended, arrived
                 * after it (the window holds less than this one's answer
                 * said: only while readings never raise the window, as
                 * when the pool is shared - alone, a later answer read
                 * from before may raise it, and what was dropped would be
                 * lost), or was sent after the upstream had surely
                 * counted this one; or it was counted before a fixed
                 * window's reset, which has passed
                 */
                continue;
            }

            /* an answer newer by number may still count less: kept */
            keep = 1;

            if (r->own != s) {
                a->pending[w] += r->n[w];
            }
        }

        if (keep) {
            a->released[j++] = *r;
        }
    }

    a->nreleased = j;
}


unsigned
tb_account_observe(tb_account_state_t *a, const tb_rl_obs_t *obs,
    int64_t now_ms)
{
    unsigned  result;

    /* the slices refilled by the window as it was read until now */
    tb_slice_refill_to(a, now_ms, 0);

    result = tb_mirror_apply(&a->mirror, obs, now_ms, a->replenishment);

    if (obs->seq == 0) {
        /* no order known: taken as the newest, counting everything */
        a->nreleased = 0;
    }

    tb_account_pending(a, now_ms);

    return result;
}


void
tb_account_released(tb_account_state_t *a, uint64_t ended, uint64_t own,
    int64_t ended_ms, const int64_t *seen, int64_t requests, int64_t input,
    int64_t now_ms)
{
    tb_release_t  *r;

    if (a->nreleased == TB_RELEASES) {
        /*
         * Full: the two oldest become one, pending until an answer sent
         * after the later of them ended (never taken for its own)
         */
        a->released[1].n[0] += a->released[0].n[0];
        a->released[1].n[1] += a->released[0].n[1];
        a->released[1].own = 0;
        a->released[1].seen[0] = -1;
        a->released[1].seen[1] = -1;
        memmove(&a->released[0], &a->released[1],
                (TB_RELEASES - 1) * sizeof(tb_release_t));
        a->nreleased--;
    }

    r = &a->released[a->nreleased++];
    r->ended = ended;
    r->own = own;
    r->ended_ms = ended_ms;
    r->seen[0] = seen ? seen[0] : -1;
    r->seen[1] = seen ? seen[1] : -1;
    r->n[0] = requests;
    r->n[1] = input;

    tb_account_pending(a, now_ms);
}


int64_t
tb_account_pending_at(const tb_account_state_t *a, int win, int64_t now_ms)
{
    int64_t              p;
    uint32_t             i;
    const tb_window_t   *w;
    const tb_release_t  *r;

    w = &a->mirror.w[win];

    if (win > TB_WIN_INPUT || !tb_window_reset_passed(w, now_ms)) {
        return a->pending[win];
    }

    /*
     * Only what ended after the reset (or may have): what ended before
     * was counted in the window that ended.  The answer the window was
     * read from counts its own.
     */

    p = 0;

    for (i = 0; i < a->nreleased; i++) {
        r = &a->released[i];

        if (r->n[win] == 0 || r->own == w->seq
            || (r->ended_ms && r->ended_ms + TB_CLOCK_SKEW_MS < w->reset_ms))
        {
            continue;
        }

        p += r->n[win];
    }

    return p < a->pending[win] ? p : a->pending[win];
}


void
tb_account_share(tb_account_state_t *a, unsigned shared)
{
    a->shared = shared;
    a->mirror.shared = (int) shared;
}


/* v * the share of withheld, rounded down */
static int64_t
tb_share_of(int64_t v, uint32_t withheld)
{
    return v * (TB_SHARE_ONE - (int64_t) withheld) / TB_SHARE_ONE;
}


/* a slice gains no more than this at once (ms): it is whole long before */
#define TB_SLICE_GAIN_MAX_MS  600000


/*
 * What a slice gains a millisecond: its share of the window's refill, at
 * the rate its reading says (what it lacks by its reset), or its limit a
 * minute when the reading was full or said no reset (Anthropic's windows
 * are a minute's); a fixed window gains only at its reset, when the slice
 * begins again.
 */
static double
tb_slice_rate(const tb_account_state_t *a, int win)
{
    double              rate;
    const tb_window_t  *w;

    w = &a->mirror.w[win];

    if (w->limit <= 0 || w->remaining < 0 || w->refill == TB_REFILL_FIXED) {
        return 0;
    }

    if (w->remaining < w->limit && w->reset_ms > w->observed_ms) {
        rate = (double) (w->limit - w->remaining)
               / (double) (w->reset_ms - w->observed_ms);

    } else {
        rate = (double) w->limit / 60000.0;
    }

    return rate * (double) (TB_SHARE_ONE - a->withheld) / TB_SHARE_ONE;
}


/*
 * What a slice gains from since to now, in fractions: a slice refilled on
 * every request gains a little of one each time
 */
static double
tb_slice_gain(const tb_account_state_t *a, int win, int64_t since,
    int64_t now)
{
    int64_t  dt;

    if (since == 0 || now <= since) {
        return 0;
    }

    dt = now - since;

    if (dt > TB_SLICE_GAIN_MAX_MS) {
        dt = TB_SLICE_GAIN_MAX_MS;
    }

    return tb_slice_rate(a, win) * (double) dt;
}


/* what is left of a slice at now; 0 with *begun 0 when it has not */
static double
tb_slice_now(const tb_account_state_t *a, int win, int64_t now_ms,
    int *begun)
{
    double              left, cap;
    int64_t             level;
    const tb_window_t  *w;

    *begun = 0;

    if (!a->shared) {
        return 0;
    }

    w = &a->mirror.w[win];

    if (!a->slice_begun[win]
        || (w->refill == TB_REFILL_FIXED && w->reset_ms
            && a->slice_ms < w->reset_ms && w->reset_ms <= now_ms))
    {
        /*
         * Begun, or begun again: a fixed window is whole again after its
         * reset, whatever was spent before (a bucket's refill is gained)
         */
        level = tb_window_level_inline(w, now_ms);

        if (level == TB_UNKNOWN) {
            return 0;
        }

        /*
         * its share of what the window holds, less its own (nothing that
         * ended before a fixed window's reset: it was counted before)
         */
        *begun = 1;

        return (double) (tb_share_of(level, a->withheld)
                         - tb_account_held(a, win, now_ms));
    }

    *begun = 1;
    left = a->slice[win] + tb_slice_gain(a, win, a->slice_ms, now_ms);

    if (w->limit > 0) {
        cap = (double) w->limit * (double) (TB_SHARE_ONE - a->withheld)
              / TB_SHARE_ONE;

        if (left > cap) {
            left = cap;
        }
    }

    return left;
}


int64_t
tb_slice_left(const tb_account_state_t *a, int win, int64_t now_ms)
{
    int     begun;
    double  left;

    left = tb_slice_now(a, win, now_ms, &begun);

    if (!begun) {
        return TB_UNKNOWN;
    }

    /*
     * whole units, rounded down (below zero too), past what adding up
     * fractions loses
     */
    return (int64_t) floor(left + 1e-6);
}


int64_t
tb_slice_at(const tb_account_state_t *a, int win, int64_t n, int64_t now_ms)
{
    int                 begun;
    double              left, rate, cap, dt;
    const tb_window_t  *w;

    left = tb_slice_now(a, win, now_ms, &begun);

    if (!begun || left + 1e-6 >= (double) n) {
        return now_ms;
    }

    w = &a->mirror.w[win];

    cap = (double) w->limit * (double) (TB_SHARE_ONE - a->withheld)
          / TB_SHARE_ONE;

    if (w->limit <= 0 || (double) n > cap + 1e-6) {
        /* more than the slice ever holds */
        return 0;
    }

    if (w->refill == TB_REFILL_FIXED) {
        /* whole again at its reset, if one is known to come */
        return w->reset_ms > now_ms ? w->reset_ms : 0;
    }

    rate = tb_slice_rate(a, win);

    if (rate <= 0) {
        return 0;
    }

    /* the millisecond it has gained what it lacks */
    dt = ceil(((double) n - left - 1e-6) / rate);

    if (dt > (double) TB_RL_RESET_MAX_MS) {
        /* no window takes that long: not a time to wait for */
        return 0;
    }

    return now_ms + (int64_t) dt;
}


/*
 * Refilled to now; a slice not begun begins (once its window is known)
 * only with begin: before a reading is applied, what has not begun
 * begins with what the window says after it, not before
 */
static void
tb_slice_refill_to(tb_account_state_t *a, int64_t now_ms, int begin)
{
    int     w, begun;
    double  left;

    if (!a->shared) {
        return;
    }

    for (w = TB_WIN_REQUESTS; w <= TB_WIN_INPUT; w++) {
        if (!begin && !a->slice_begun[w]) {
            continue;
        }

        /* begun once the window is known */
        left = tb_slice_now(a, w, now_ms, &begun);

        if (begun) {
            a->slice[w] = left;
            a->slice_begun[w] = 1;
        }
    }

    a->slice_ms = now_ms;
}


void
tb_slice_refill(tb_account_state_t *a, int64_t now_ms)
{
    tb_slice_refill_to(a, now_ms, 1);
}


void
tb_slice_spend(tb_account_state_t *a, int win, int64_t n, int64_t now_ms)
{
    if (!a->shared) {
        return;
    }

    tb_slice_refill(a, now_ms);

    if (a->slice_begun[win]) {
        a->slice[win] -= (double) n;
    }
}


void
tb_slice_reshare(tb_account_state_t *a, uint32_t withheld, int64_t now_ms)
{
    int      w;
    int64_t  limit;

    /* refilled at the share it had until now */
    tb_slice_refill(a, now_ms);

    for (w = TB_WIN_REQUESTS; w <= TB_WIN_INPUT; w++) {
        limit = a->mirror.w[w].limit;

        if (a->slice_begun[w] && limit > 0) {
            /* the limit's part that changes hands */
            a->slice[w] += (double) limit
                           * ((double) a->withheld - (double) withheld)
                           / TB_SHARE_ONE;
        }
    }

    a->withheld = withheld;
}


void
tb_slice_restart(tb_account_state_t *a)
{
    a->slice_begun[TB_WIN_REQUESTS] = 0;
    a->slice_begun[TB_WIN_INPUT] = 0;
}


int64_t
tb_account_others_spend(const tb_account_state_t *a, int64_t now_ms,
    int64_t ttl_ms)
{
    int                     i;
    int64_t                 sum;
    const tb_peer_holds_t  *p;

    sum = 0;

    for (i = 0; i < TB_PEERS; i++) {
        p = &a->peers[i];

        if (p->who && p->at_ms + ttl_ms > now_ms) {
            sum += p->spend[0] + p->spend[1];
        }
    }

    return sum;
}


int64_t
tb_account_others(const tb_account_state_t *a, int win, int64_t now_ms)
{
    int                     i;
    int64_t                 sum, counted;
    const tb_peer_holds_t  *p;
    const tb_window_t      *w;

    /*
     * What they said they held before the window's reading was sent is
     * in its count: what was pending had been counted upstream, what was
     * reserved was on its way, and their slices have it.  Before a fixed
     * window's reset that has passed, it was counted in the window that
     * ended.  (Redis away, nothing newer is said: without this, what they
     * held when it went would be believed for TB_PEER_HOLDS_MS.)
     */

    w = &a->mirror.w[win];
    counted = w->sent_ms;

    if (tb_window_reset_passed(w, now_ms) && w->reset_ms > counted) {
        counted = w->reset_ms;
    }

    sum = 0;

    for (i = 0; i < TB_PEERS; i++) {
        p = &a->peers[i];

        if (p->who && p->at_ms + TB_PEER_HOLDS_MS > now_ms
            && p->at_ms + TB_CLOCK_SKEW_MS >= counted)
        {
            sum += p->holds[win];
        }
    }

    return sum;
}


void
tb_account_clear(tb_account_state_t *a)
{
    a->disabled = 0;
    a->disabled_reason[0] = '\0';
    a->disabled_ms = 0;
    a->cooling_until_ms = 0;
    a->cooling_reason[0] = '\0';
    a->exhausted_until_ms = 0;
    a->exhausted_reason[0] = '\0';
    a->failing_reason[0] = '\0';
    a->failing_kind = 0;
    a->failing_since_ms = 0;
    a->nrejected = 0;
    memset(a->rejected, 0, sizeof(a->rejected));
    a->ceiling = 0;
    a->ceiling_ok = 0;
    a->ceiling_ms = 0;
    tb_breaker_reset(&a->breaker);
}


void
tb_account_ceiling(tb_account_state_t *a, int throttled, int64_t inflight,
    int64_t max_concurrency, int64_t started_ms, int64_t now_ms)
{
    int64_t  c, had;

    had = tb_account_max_inflight(a, max_concurrency);

    if (throttled) {
        /* multiplicative decrease from what was in flight, never up */
        c = (inflight < had ? inflight : had) * 3 / 4;
        a->ceiling = (uint32_t) (c >= 1 ? c : 1);
        a->ceiling_ok = 0;
        a->ceiling_ms = now_ms;
        return;
    }

    if (a->ceiling == 0 || started_ms <= a->ceiling_ms) {
        /* an attempt sent before the 429 says nothing of the ceiling */
        return;
    }

    /* additive increase: one more after a ceiling's worth of answers */

    if (++a->ceiling_ok >= a->ceiling) {
        a->ceiling_ok = 0;
        a->ceiling++;

        if ((int64_t) a->ceiling >= max_concurrency) {
            a->ceiling = 0;
        }
    }
}


double
tb_account_error_rate(const tb_account_state_t *a)
{
    return a->noutcomes ? (double) a->nfailures / (double) a->noutcomes : 0;
}


void
tb_account_outcome(tb_account_state_t *a, int failed)
{
    /* the oldest outcome leaves the window as the new one enters */

    if (a->noutcomes == TB_OUTCOMES) {
        a->nfailures -= (uint32_t) ((a->outcomes >> (TB_OUTCOMES - 1)) & 1);

    } else {
        a->noutcomes++;
    }

    a->outcomes = ((a->outcomes << 1) | (failed ? 1 : 0))
                  & ((1ULL << TB_OUTCOMES) - 1);
    a->nfailures += failed ? 1 : 0;
}


const char *
tb_state_name(tb_state_e state)
{
    static const char  *names[] = { "ready", "cooling", "exhausted",
                                    "disabled", "failing" };

    return names[state];
}


int
tb_models_match(char *const *patterns, size_t n, const char *name,
    size_t len)
{
    size_t       i, plen;
    const char  *p;

    for (i = 0; i < n; i++) {
        p = patterns[i];

        if (p[0] == '*' && p[1] == '\0') {
            return 1;                       /* the default: everything */
        }

        plen = strlen(p);

        if (plen && p[plen - 1] == '*') {
            if (len >= plen - 1 && memcmp(name, p, plen - 1) == 0) {
                return 1;
            }

            continue;
        }

        if (plen == len && memcmp(name, p, len) == 0) {
            return 1;
        }
    }

    return 0;
}


void
tb_account_news(const tb_account_state_t *a, const tb_breaker_conf_t *bc,
    int64_t bucket_ms, int64_t now_ms, tb_account_news_t *n)
{
    int64_t  at;

    memcpy(n->w, a->mirror.w, sizeof(n->w));
    n->holds[0] = tb_account_held(a, TB_WIN_REQUESTS, now_ms);
    n->holds[1] = tb_account_held(a, TB_WIN_INPUT, now_ms);
    n->spend[0] = tb_ledger_spent(&a->spend, now_ms, bucket_ms, NULL);
    n->spend[1] = a->spend.reserved;
    n->retry_after_ms = a->mirror.retry_after_ms;
    n->cooling_until_ms = a->cooling_until_ms;
    n->exhausted_until_ms = a->exhausted_until_ms;

    /* an open breaker rests the account until it half-opens */
    at = tb_breaker_half_open_at(&a->breaker, bc, now_ms);

    if (at > n->cooling_until_ms) {
        n->cooling_until_ms = at;
    }
}


/*
 * "1 requests input spent reserved retry cooling exhausted" (what it
 * holds, what it spent, and its rests), and per window "limit remaining
 * reset observed sent read refill": decimal numbers, one space apart
 */

#define TB_NEWS_HEAD          8
#define TB_NEWS_NUMBERS       (TB_NEWS_HEAD + TB_NWINDOWS * 7)

size_t
tb_account_news_print(const tb_account_news_t *n, char *buf)
{
    int      w, len;
    size_t   off;

    off = (size_t) sprintf(buf, "1 %lld %lld %lld %lld %lld %lld %lld",
                           (long long) n->holds[0], (long long) n->holds[1],
                           (long long) n->spend[0], (long long) n->spend[1],
                           (long long) n->retry_after_ms,
                           (long long) n->cooling_until_ms,
                           (long long) n->exhausted_until_ms);

    for (w = 0; w < TB_NWINDOWS; w++) {
        len = sprintf(buf + off, " %lld %lld %lld %lld %lld %lld %d",
                      (long long) n->w[w].limit,
                      (long long) n->w[w].remaining,
                      (long long) n->w[w].reset_ms,
                      (long long) n->w[w].observed_ms,
                      (long long) n->w[w].sent_ms,
                      (long long) n->w[w].read_ms, n->w[w].refill);
        off += (size_t) len;
    }

    return off;
}


int
tb_account_news_scan(tb_account_news_t *n, const char *p, size_t len)
{
    int          i, k, neg, digits;
    int64_t      v[TB_NEWS_NUMBERS], x;
    const char  *end;

    end = p + len;

    for (i = 0; i < TB_NEWS_NUMBERS; i++) {
        if (i > 0) {
            if (p == end || *p != ' ') {
                return 0;
            }

            p++;
        }

        neg = (p < end && *p == '-');
        p += neg;
        x = 0;
        digits = 0;

        while (p < end && *p >= '0' && *p <= '9') {
            if (++digits > 18) {
                return 0;
            }

            x = x * 10 + (*p++ - '0');
        }

        if (digits == 0) {
            return 0;
        }

        v[i] = neg ? -x : x;
    }

    if (p != end || v[0] != 1) {
        return 0;
    }

    memset(n, 0, sizeof(tb_account_news_t));

    if (v[1] < 0 || v[1] > TB_RL_COUNT_MAX || v[2] < 0
        || v[2] > TB_RL_COUNT_MAX || v[3] < 0 || v[4] < 0)
    {
        return 0;
    }

    n->holds[0] = v[1];
    n->holds[1] = v[2];
    n->spend[0] = v[3];
    n->spend[1] = v[4];
    n->retry_after_ms = v[5];
    n->cooling_until_ms = v[6];
    n->exhausted_until_ms = v[7];

    for (i = 0; i < TB_NWINDOWS; i++) {
        k = TB_NEWS_HEAD + i * 7;

        n->w[i].limit = v[k];
        n->w[i].remaining = v[k + 1];
        n->w[i].reset_ms = v[k + 2];
        n->w[i].observed_ms = v[k + 3];
        n->w[i].sent_ms = v[k + 4];
        n->w[i].read_ms = v[k + 5];
        n->w[i].refill = (v[k + 6] == TB_REFILL_BUCKET
                          || v[k + 6] == TB_REFILL_FIXED)
                         ? (int) v[k + 6] : TB_REFILL_AUTO;

        if (n->w[i].limit < -1 || n->w[i].limit > TB_RL_COUNT_MAX
            || n->w[i].remaining < -1 || n->w[i].remaining > TB_RL_COUNT_MAX
            || n->w[i].reset_ms < 0 || n->w[i].observed_ms < 0
            || n->w[i].sent_ms < 0 || n->w[i].read_ms < 0
            || n->w[i].read_ms > n->w[i].sent_ms
            || n->w[i].reset_ms - n->w[i].observed_ms > TB_RL_RESET_MAX_MS)
        {
            /* what no response's headers could have said */
            return 0;
        }
    }

    return 1;
}


unsigned
tb_account_adopt(tb_account_state_t *a, const tb_account_news_t *n,
    uint64_t who, int64_t now_ms)
{
    int               i;
    unsigned          taken;
    tb_peer_holds_t  *p, *oldest;

    tb_slice_refill_to(a, now_ms, 0);

    taken = tb_mirror_adopt(&a->mirror, n->w, n->retry_after_ms, now_ms);

    /* its place, or a free one, or the one said longest ago */

    p = NULL;
    oldest = &a->peers[0];

    for (i = 0; i < TB_PEERS; i++) {
        if (a->peers[i].who == who) {
            p = &a->peers[i];
            break;
        }

        if (a->peers[i].at_ms < oldest->at_ms) {
            oldest = &a->peers[i];
        }
    }

    if (p == NULL) {
        p = oldest;
        p->who = who;
    }

    p->at_ms = now_ms;
    p->holds[0] = n->holds[0];
    p->holds[1] = n->holds[1];
    p->spend[0] = n->spend[0];
    p->spend[1] = n->spend[1];

    if (n->cooling_until_ms > now_ms) {
        tb_account_rest(&a->cooling_until_ms, a->cooling_reason,
                        n->cooling_until_ms, "resting on another instance");
    }

    if (n->exhausted_until_ms > now_ms) {
        tb_account_rest(&a->exhausted_until_ms, a->exhausted_reason,
                        n->exhausted_until_ms, "exhausted on another instance");
    }

    if (taken) {
        tb_account_pending(a, now_ms);
    }

    return taken;
}
