/*
 * Leases: what an attempt reserves on an account before it is sent.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_LEASE_H
#define TB_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "tb_router.h"


/*
 * Leases: under the caller's lock, re-checks that the account can still
 * take the request now (not disabled, cooling or exhausted meanwhile, the
 * breaker lets it through, the need fits, below max_concurrency), then
 * reserves all of it at once, and takes a half-open breaker's probe slot
 * (*probed = 1).  Returns 1 when reserved, 0 when it cannot (nothing
 * changed).
 */
int tb_lease_reserve(tb_account_state_t *st, const tb_account_conf_t *conf,
    const tb_breaker_conf_t *bc, const tb_need_t *need, int64_t now,
    int *probed);

/*
 * Gives a lease back, exactly once per reserve.  With the attempt's actual
 * usage (NULL if unknown), output the account produced after the response
 * headers were observed is taken from the mirror: the headers of a
 * response are sent before its output exists.  stale is what
 * tb_account_observe() said of the attempt's own answer: for the windows
 * where it was older news, the need stays held as pending until an answer
 * to a request sent after this one ended (lease sequence > seq) is read;
 * for the input window, what the answer says it counted when it says
 * (its cache reads too with reads_count).
 */
void tb_lease_release(tb_account_state_t *st, const tb_need_t *need,
    const tb_usage_t *usage, int64_t headers_ms, unsigned stale,
    uint64_t seq, int reads_count);


#endif /* TB_LEASE_H */
