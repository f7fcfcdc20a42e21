/*
 * Lease arithmetic (see tb_lease.h): the reservation of a need on an
 * account, all of it or nothing, and its release reconciled against what
 * the upstream reported.  The caller holds the zone lock.
 */

#include <string.h>

#include "tb_lease.h"


int
tb_lease_reserve(tb_account_state_t *st, const tb_account_conf_t *conf,
    const tb_breaker_conf_t *bc, const tb_need_t *need, int64_t now,
    int *probed)
{
    return tb_lease_reserve_in(st, st, conf, bc, need, now, probed);
}


int
tb_lease_reserve_in(tb_account_state_t *st, tb_account_state_t *cap,
    const tb_account_conf_t *conf, const tb_breaker_conf_t *bc,
    const tb_need_t *need, int64_t now, int *probed)
{
    int      w;
    int64_t  level, held;

    *probed = 0;

    /* the account's own state, then its capacity domain's windows */

    if (st->disabled || st->cooling_until_ms > now
        || st->exhausted_until_ms > now
        || (st->breaker.open && !tb_breaker_allows(&st->breaker, bc, now))
        || (!tb_need_empty(need) && tb_probing(conf, cap, now))
        || !tb_fits(cap, need, now)
        || __atomic_load_n(&st->inflight, __ATOMIC_RELAXED)
           >= tb_account_max_inflight(st, conf->max_concurrency))
    {
        return 0;
    }

    /* from this gateway's slices, when it shares the pool (before the
     * reservation: a slice begun now counts what is reserved) */
    tb_slice_spend(cap, TB_WIN_REQUESTS, need->n[TB_WIN_REQUESTS], now);
    tb_slice_spend(cap, TB_WIN_INPUT, need->n[TB_WIN_INPUT], now);

    for (w = 0; w < TB_NWINDOWS; w++) {
        cap->reserved[w] += need->n[w];

        level = tb_window_level(&cap->mirror.w[w], now);
        held = tb_account_held(cap, w, now);

        if (level != TB_UNKNOWN && held > cap->peak_reserved[w]) {
            cap->peak_reserved[w] = held;
            cap->peak_available[w] = level;
        }
    }

    if (!tb_need_empty(need)) {
        if (cap->mirror.observed_ms == 0 && cap->leases == 0) {
            cap->probe_ms = now;
        }

        cap->leases++;
    }

    if (st->breaker.open) {
        /* half-open: this request is the probe */
        tb_breaker_take(&st->breaker, bc, now);
        *probed = 1;
    }

    __atomic_add_fetch(&st->inflight, 1, __ATOMIC_RELAXED);

    return 1;
}


void
tb_lease_release(tb_account_state_t *st, const tb_need_t *need,
    const tb_answer_t *ans, uint64_t seq, uint64_t own, int reads_count,
    int64_t now)
{
    tb_lease_release_in(st, st, need, ans, seq, own, reads_count, now);
}


void
tb_lease_release_in(tb_account_state_t *st, tb_account_state_t *cap,
    const tb_need_t *need, const tb_answer_t *ans, uint64_t seq,
    uint64_t own, int reads_count, int64_t now)
{
    int                w;
    int64_t            input;
    tb_window_t       *out;
    const tb_usage_t  *usage;

    for (w = 0; w < TB_NWINDOWS; w++) {
        cap->reserved[w] -= need->n[w];

        if (cap->reserved[w] < 0) {
            cap->reserved[w] = 0;
        }
    }

    usage = ans ? ans->usage : NULL;

    /*
     * Held as pending while the mirror may not count it: for the input,
     * what the answer says the window counted when it says, rather than
     * the estimate leased (a cache that missed counts more).
     */

    input = need->n[TB_WIN_INPUT];

    if (usage && usage->input_tokens >= 0) {
        input = usage->input_tokens
                + (usage->cache_creation_input_tokens > 0
                   ? usage->cache_creation_input_tokens : 0)
                + (reads_count && usage->cache_read_input_tokens > 0
                   ? usage->cache_read_input_tokens : 0);
    }

    if (input != need->n[TB_WIN_INPUT]) {
        /* the slice spent what the answer says, not the estimate */
        tb_slice_spend(cap, TB_WIN_INPUT, input - need->n[TB_WIN_INPUT], now);
    }

    if (need->n[TB_WIN_REQUESTS] || input) {
        /* the upstream had counted it by when its answer began */
        tb_account_released(cap, seq, own,
                            (ans && ans->headers_ms) ? ans->headers_ms : now,
                            ans ? ans->remaining : NULL,
                            need->n[TB_WIN_REQUESTS], input, now);
    }

    if (!tb_need_empty(need) && cap->leases > 0) {
        cap->leases--;
    }

    __atomic_sub_fetch(&st->inflight, 1, __ATOMIC_RELAXED);

    if (usage == NULL || usage->output_tokens <= 0 || ans->headers_ms == 0) {
        return;
    }

    out = &cap->mirror.w[TB_WIN_OUTPUT];

    if (out->remaining >= 0 && out->observed_ms <= ans->headers_ms) {
        out->remaining -= usage->output_tokens;

        if (out->remaining < 0) {
            out->remaining = 0;
        }
    }
}
