/*
 * Account state.
 */

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
tb_account_state(const tb_account_state_t *a, int enabled, int64_t now_ms,
    int64_t *until_ms)
{
    *until_ms = 0;

    if (!enabled || a->disabled) {
        return TB_STATE_DISABLED;
    }

    if (a->cooling_until_ms > now_ms) {
        *until_ms = a->cooling_until_ms;
        return TB_STATE_COOLING;
    }

    return TB_STATE_READY;
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
