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
 * The same for an account of a capacity domain: its own state (st: the
 * disabled, cooling and exhausted states, the breaker, what it has in
 * flight) checked, the windows of cap - the domain's, whose mirror every
 * key of the organisation reads and whose leases every key takes - held.
 * cap == st for an account of its own.
 */
int tb_lease_reserve_in(tb_account_state_t *st, tb_account_state_t *cap,
    const tb_account_conf_t *conf, const tb_breaker_conf_t *bc,
    const tb_need_t *need, int64_t now, int *probed);

/* what an attempt's answer said, as far as its lease is concerned */
typedef struct {
    const tb_usage_t         *usage;          /* NULL: not known */
    int64_t                   headers_ms;     /* when its headers came */
    int64_t                   remaining[2];   /* what they said the
                                                 requests and input
                                                 windows held; -1: not
                                                 said */
} tb_answer_t;

/*
 * Gives a lease back, exactly once per reserve.  With the attempt's answer
 * (NULL: none came) and its usage, output the account produced after the
 * response headers were observed is taken from the mirror: the headers of
 * a response are sent before its output exists.  Its request and input
 * stay held as pending while the mirror may not count them (tb_release_t):
 * seq is the lease sequence now, own the lease's own number; the input
 * held is what the answer says the window counted when it says (its cache
 * reads too with reads_count); now is when it ended.
 */
void tb_lease_release(tb_account_state_t *st, const tb_need_t *need,
    const tb_answer_t *ans, uint64_t seq, uint64_t own, int reads_count,
    int64_t now);

/* ... to the windows it was reserved on (cap), st's in flight less one */
void tb_lease_release_in(tb_account_state_t *st, tb_account_state_t *cap,
    const tb_need_t *need, const tb_answer_t *ans, uint64_t seq,
    uint64_t own, int reads_count, int64_t now);


#endif /* TB_LEASE_H */
