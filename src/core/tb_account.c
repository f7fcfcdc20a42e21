/*
 * Account state.
 */

#include <stdio.h>
#include <string.h>

#include "tb_account.h"


void
tb_account_state_init(tb_account_state_t *a, const char *id,
    const unsigned char fingerprint[8])
{
    size_t    n;
    uint64_t  gen;

    gen = a->gen;

    memset(a, 0, sizeof(tb_account_state_t));

    n = strlen(id);
    if (n > TB_ID_MAX) {
        n = TB_ID_MAX;
    }

    memcpy(a->id, id, n);
    a->id[n] = '\0';
    memcpy(a->fingerprint, fingerprint, 8);
    a->gen = gen + 1;

    tb_mirror_init(&a->mirror);
}


tb_state_e
tb_account_state(const tb_account_state_t *a, int enabled,
    const tb_breaker_conf_t *bc, int64_t now_ms, int64_t *until_ms,
    const char **reason)
{
    int64_t  at;

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

    at = tb_breaker_half_open_at(&a->breaker, bc, now_ms);

    if (a->cooling_until_ms > now_ms || at) {
        if (a->cooling_until_ms >= at) {
            *until_ms = a->cooling_until_ms;
            *reason = a->cooling_reason;

        } else {
            *until_ms = at;
            *reason = "circuit open";
        }

        return TB_STATE_COOLING;
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


int
tb_account_apply(tb_account_state_t *a, const tb_outcome_t *o,
    const tb_breaker_conf_t *bc, uint64_t model_hash, const char *model,
    size_t model_len, int probed, int64_t now_ms)
{
    const tb_rule_t  *r;

    r = o->rule;

    a->kinds[o->kind]++;

    switch (r->account) {

    case TB_ACC_COOLDOWN:
    case TB_ACC_SHORT_COOLDOWN:
        if (o->until_ms > a->cooling_until_ms) {
            a->cooling_until_ms = o->until_ms;
            snprintf(a->cooling_reason, sizeof(a->cooling_reason), "%s",
                     o->reason);
        }

        break;

    case TB_ACC_EXHAUST:
        if (o->until_ms > a->exhausted_until_ms) {
            a->exhausted_until_ms = o->until_ms;
            snprintf(a->exhausted_reason, sizeof(a->exhausted_reason), "%s",
                     o->reason);
        }

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

    return tb_breaker_record(&a->breaker, bc, r->breaker, probed, now_ms);
}


/*
 * pending, from the releases kept: what each window's latest answer may
 * not count; releases every window surely counts are dropped.
 */
static void
tb_account_pending(tb_account_state_t *a)
{
    int            w, keep;
    uint32_t       i, j;
    uint64_t       s;
    tb_release_t  *r;

    a->pending[TB_WIN_REQUESTS] = 0;
    a->pending[TB_WIN_INPUT] = 0;

    for (i = 0, j = 0; i < a->nreleased; i++) {
        r = &a->released[i];
        keep = 0;

        for (w = TB_WIN_REQUESTS; w <= TB_WIN_INPUT; w++) {
            s = a->mirror.w[w].seq;

            if (r->n[w] == 0 || r->ended < s) {
                /* nothing of it there, or that window's answer counts it */
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

    result = tb_mirror_apply(&a->mirror, obs, now_ms, a->replenishment);

    if (obs->seq == 0) {
        /* no order known: taken as the newest, counting everything */
        a->nreleased = 0;
    }

    tb_account_pending(a);

    return result;
}


void
tb_account_released(tb_account_state_t *a, uint64_t ended, uint64_t own,
    int64_t requests, int64_t input)
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
        memmove(&a->released[0], &a->released[1],
                (TB_RELEASES - 1) * sizeof(tb_release_t));
        a->nreleased--;
    }

    r = &a->released[a->nreleased++];
    r->ended = ended;
    r->own = own;
    r->n[0] = requests;
    r->n[1] = input;

    tb_account_pending(a);
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
    a->nrejected = 0;
    memset(a->rejected, 0, sizeof(a->rejected));
    tb_breaker_reset(&a->breaker);
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
                                    "disabled" };

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
