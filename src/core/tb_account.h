/*
 * An account's runtime state, as it lives in the shared zone: one slot per
 * configured account, seen by every worker and kept across reloads.
 *
 * The struct is plain C so the core can reason about it; the shm/ code is
 * the only place that allocates slots and takes the zone lock, and the
 * counters marked "atomic" are only touched with atomic builtins.
 */

#ifndef TB_ACCOUNT_H
#define TB_ACCOUNT_H

#include <stddef.h>
#include <stdint.h>

#include "tb_ratelimit.h"
#include "tb_unified.h"
#include "tb_failure.h"
#include "tb_ledger.h"


#define TB_ID_MAX             64
#define TB_REASON_MAX         96
#define TB_OUTCOMES           50      /* recent outcomes for the error rate */
#define TB_REJECTED_MAX       8       /* models refused upstream, kept */
#define TB_REJECTED_NAME      48


typedef enum {
    TB_STATE_READY = 0,
    TB_STATE_COOLING,
    TB_STATE_EXHAUSTED,
    TB_STATE_DISABLED,
    TB_STATE_FAILING
} tb_state_e;

#define TB_NSTATES            5


/*
 * A lease that ended, kept until the mirror surely counts it.  The
 * upstream admits requests in an order of its own: an answer includes
 * every request that ended before its own was leased (it was sent after
 * them), and its own; of the others, sent concurrently, it may include
 * any, none or some - its count may be older than a request that already
 * ended.  So an ended request stays pending while the window's latest
 * answer (mirror seq S) was leased no later than it ended (ended >= S)
 * and is not its own answer (own != S) - unless the window says less than
 * its own answer did, by more than the window can have refilled since:
 * the window decreases in the order requests arrive, so that answer's
 * request arrived after it - or was sent after its answer began (another
 * gateway's, clocks apart by TB_CLOCK_SKEW_MS at most).
 */
#define TB_RELEASES           32

typedef struct {
    uint64_t                  ended;          /* the lease sequence then */
    uint64_t                  own;            /* its lease; 0: unknown */
    int64_t                   ended_ms;       /* by when the upstream
                                                 surely counted it: its
                                                 answer began, or it
                                                 ended */
    int64_t                   seen[2];        /* what its answer said
                                                 the windows held; -1 */
    int64_t                   n[2];           /* requests, input */
} tb_release_t;


/*
 * Several gateways sharing one pool (store.backend: redis) each hold a
 * share of every account's windows, in 1/TB_SHARE_ONE: this gateway's
 * reservations and what it sent that the mirror may not count yet stay
 * within its share of what the windows hold.  A state holds what the
 * others hold (0: alone, the whole of it).
 *
 * Of the requests and input windows each gateway holds a slice: its
 * share of what the window held when the slice began, refilled at its
 * share of the window's refill, spent by what it takes whatever the
 * upstream counts first - so the slices never add up to more than the
 * window, however the upstream orders the requests of several gateways.
 * A share that changes moves its part of the limit between the slices.
 * Besides, each gateway tells the others what it holds that its windows
 * do not count yet (its reservations and what is pending), and takes no
 * more than the windows leave once the others' is taken off: a window
 * not full when the slices began, or spent by someone else, is not
 * over-spent either.
 */
#define TB_SHARE_ONE          65536

/* the other gateways whose holdings an account keeps */
#define TB_PEERS              8

/* what another gateway said it holds is believed this long (ms) */
#define TB_PEER_HOLDS_MS      60000

typedef struct {
    uint64_t                  who;            /* the gateway, 0: free */
    int64_t                   at_ms;          /* said then */
    int64_t                   holds[2];       /* requests, input */
    int64_t                   spend[2];       /* its spend window: settled,
                                                 reserved (nanodollars) */
} tb_peer_holds_t;


typedef struct {

    /*
     * What every routing decision reads, together at the front: a
     * decision over many accounts touches a few cache lines of each.
     */

    /* leased and not yet settled, per window (requests, input, output) */
    int64_t                   reserved[TB_NWINDOWS];

    /*
     * Settled, but maybe not counted by the mirror yet (requests and
     * input): the sum over the releases below that the window's latest
     * answer may not include, counted like a reservation.
     */
    int64_t                   pending[TB_NWINDOWS];
    int64_t                   leases;         /* leases held */
    int64_t                   probe_ms;       /* first lease, unobserved */
    int64_t                   inflight;       /* atomic */
    uint32_t                  withheld;       /* of TB_SHARE_ONE: the
                                                 other gateways' share */
    uint32_t                  news;           /* changed since told */
    uint32_t                  shared;         /* with other gateways */
    double                    slice[2];       /* requests, input */
    uint32_t                  slice_begun[2];
    int64_t                   slice_ms;       /* refilled until then */

    /*
     * An account whose limits cannot be observed (Bedrock, Vertex): the
     * concurrency its 429s taught, 0 while none has; raised by one after
     * as many answers in a row as it allows (tb_account_ceiling()).
     */
    uint32_t                  ceiling;
    uint32_t                  ceiling_ok;
    int64_t                   ceiling_ms;     /* lowered then */

    /*
     * Its capacity domain: the slot (+1) of the account whose windows and
     * leases every key of the domain shares - keys of one organisation
     * share one set of limits - 0 while it has none but its own; set by
     * the file's capacity_domain (domain_file) or learned from the
     * anthropic-organization-id its answers carry (org).
     */
    uint32_t                  domain;
    uint32_t                  domain_file;
    char                      org[TB_ORG_MAX];
    uint32_t                  org_told;       /* to the other gateways */

    /* state, written under the zone lock */
    uint32_t                  disabled;       /* 0, or why (see reason) */
    uint32_t                  nrejected;      /* models refused, below */
    int64_t                   cooling_until_ms;
    int64_t                   exhausted_until_ms;
    int64_t                   objects_until_ms; /* its Batches and Files
                                                 APIs' own rate limit
                                                 answered 429 until then
                                                 (read without the lock:
                                                 one word) */
    tb_breaker_t              breaker;

    /* the last TB_OUTCOMES outcomes, bit 1 = failure, newest in bit 0 */
    uint64_t                  outcomes;
    uint32_t                  noutcomes;
    uint32_t                  nfailures;      /* 1s among them */

    tb_mirror_t               mirror;

    /* the releases the mirror may not count yet, oldest first */
    tb_release_t              released[TB_RELEASES];
    uint32_t                  nreleased;

    /* what the other gateways hold of it, and what this one last said */
    tb_peer_holds_t           peers[TB_PEERS];
    int64_t                   told_holds[2];

    /* the rest: reports, reasons, counters */

    char                      id[TB_ID_MAX + 1];
    uint32_t                  live;           /* configured now */
    int                       replenishment;  /* TB_REFILL_*, configured */
    uint64_t                  gen;            /* bumped on (re)assignment */
    unsigned char             fingerprint[8]; /* of credential + base_url */

    /* the highest reservation seen next to what the mirror had left */
    int64_t                   peak_reserved[TB_NWINDOWS];
    int64_t                   peak_available[TB_NWINDOWS];

    char                      disabled_reason[TB_REASON_MAX];
    int64_t                   disabled_ms;
    char                      cooling_reason[TB_REASON_MAX];
    char                      exhausted_reason[TB_REASON_MAX];

    /*
     * Failures that count against the breaker: the last one's words
     * ("circuit open after 5 failures in a row: ..." once it opened),
     * the first of the run the last success ended, and that success
     */
    char                      failing_reason[TB_REASON_MAX];
    uint32_t                  failing_kind;   /* tb_kind_e of the last */
    int64_t                   failing_since_ms;
    int64_t                   last_success_ms;

    /* models this account's upstream refused (403), newest last */
    struct {
        uint64_t              hash;
        char                  name[TB_REJECTED_NAME];
    }                         rejected[TB_REJECTED_MAX];

    /* outcomes by kind of the taxonomy (tb_kind_e) */
    uint64_t                  kinds[TB_NKINDS];

    /* atomic */
    uint64_t                  requests_total;
    uint64_t                  failures_total;
    int64_t                   last_status;
    int64_t                   last_used_ms;

    /* affinity outcomes of decisions that chose or had this owner */
    uint64_t                  affinity_honored;
    uint64_t                  affinity_broken;      /* owner lost the score */
    uint64_t                  affinity_forced;      /* owner filtered out */
    uint64_t                  sessions_placed;      /* new sessions here */

    /* what it spent in the spend window, and has in flight (the lock) */
    tb_ledger_t               spend;

    /* what its answers ran up, since the zone was made (the lock) */
    int64_t                   tokens[4];      /* in, out, cache r/w */
    int64_t                   cost_total;     /* nanodollars, priced */
    uint64_t                  cache_hits;     /* answers that read one */
    uint64_t                  unpriced;       /* answers with no price */

    /* a subscription's windows (type oauth): what its answers said */
    tb_unified_t              unified;
} tb_account_state_t;


/* id: len bytes, no NUL needed (at most TB_ID_MAX are kept) */
void tb_account_state_init(tb_account_state_t *a, const char *id,
    size_t len, const unsigned char fingerprint[8]);

/*
 * The account's state at now, *until_ms when it ends by itself (0: it
 * does not) and *reason why.  "enabled" is the configuration's flag.
 * Failing: its breaker is open or half-open, or its last attempts got no
 * answer (a connect error, a timeout) since its last success - it is
 * still tried (a half-open breaker's probe, a closed one's next request),
 * but nobody should read it as ready.
 */
tb_state_e tb_account_state(const tb_account_state_t *a, int enabled,
    const tb_breaker_conf_t *bc, int64_t now_ms, int64_t *until_ms,
    const char **reason);

/* 1 when the upstream refused this model on this account */
int tb_account_rejects(const tb_account_state_t *a, uint64_t model_hash);

/* remembers a refused model (the oldest one goes when full) */
void tb_account_reject(tb_account_state_t *a, uint64_t model_hash,
    const char *model, size_t len);

/*
 * Applies an attempt's outcome: the account action of its class and the
 * breaker.  Returns 1 when the breaker opened.  Under the zone lock.
 */
/*
 * A subscription's answer's unified headers folded into its windows; a
 * window they say is rejected exhausts it until that window resets.
 */
void tb_account_unified(tb_account_state_t *a, const tb_unified_t *obs,
    int64_t now_ms);

int tb_account_apply(tb_account_state_t *a, const tb_outcome_t *o,
    const tb_breaker_conf_t *bc, uint64_t model_hash, const char *model,
    size_t model_len, int probed, int64_t now_ms);

/*
 * A response's rate-limit headers: folded into the mirror; what was
 * pending and is now surely counted by it is dropped.  Returns
 * tb_mirror_apply()'s result.  Under the zone lock.
 */
unsigned tb_account_observe(tb_account_state_t *a, const tb_rl_obs_t *obs,
    int64_t now_ms);

/* an ended lease (see tb_release_t); pending updated.  Under the lock. */
void tb_account_released(tb_account_state_t *a, uint64_t ended,
    uint64_t own, int64_t ended_ms, const int64_t *seen, int64_t requests,
    int64_t input, int64_t now_ms);

/*
 * What is pending of a window (requests or input) at now: a fixed window
 * whose reset has passed counts nothing that ended before it, though no
 * reading since has said so (none may come while nothing is admitted).
 */
int64_t tb_account_pending_at(const tb_account_state_t *a, int win,
    int64_t now_ms);

/* what this gateway holds that a window does not count: its reservations
 * and what is pending at now */
static inline int64_t
tb_account_held(const tb_account_state_t *a, int win, int64_t now_ms)
{
    return a->reserved[win]
           + (a->pending[win] ? tb_account_pending_at(a, win, now_ms) : 0);
}


/*
 * What one gateway tells the others that share the pool about an account:
 * its windows as last read, what it holds that they do not count (its
 * reservations and what is pending, requests and input), what it spent of
 * it (for the account's spend cap), and how long it must rest (a cooldown, an exhaustion, an open breaker until it
 * half-opens).
 */
typedef struct {
    tb_window_t               w[TB_NWINDOWS];
    int64_t                   holds[2];
    int64_t                   spend[2];       /* settled in the spend
                                                 window, reserved */
    int64_t                   retry_after_ms;
    int64_t                   cooling_until_ms;
    int64_t                   exhausted_until_ms;
} tb_account_news_t;

#define TB_NEWS_MAX           (8 + 8 * 21 + TB_NWINDOWS * 7 * 21)

/* bucket_ms: the spend window's buckets (tb_ledger_bucket_ms()) */
void tb_account_news(const tb_account_state_t *a,
    const tb_breaker_conf_t *bc, int64_t bucket_ms, int64_t now_ms,
    tb_account_news_t *n);

/* as text (at most TB_NEWS_MAX bytes, no NUL), and back: 0 if malformed */
size_t tb_account_news_print(const tb_account_news_t *n, char *buf);
int tb_account_news_scan(tb_account_news_t *n, const char *p, size_t len);

/*
 * Another gateway's news folded in (tb_mirror_adopt() for the windows; a
 * rest it says is longer than ours is taken; what it holds, kept as the
 * gateway who's); what this gateway sent and that answer surely counts is
 * no longer pending.  Returns the windows taken.  Under the lock.
 */
unsigned tb_account_adopt(tb_account_state_t *a, const tb_account_news_t *n,
    uint64_t who, int64_t now_ms);

/* shared with other gateways (see tb_mirror_t's shared), or not */
void tb_account_share(tb_account_state_t *a, unsigned shared);

/*
 * The slices (see TB_SHARE_ONE): what is left of the slice of window win
 * (requests or input) at now, TB_UNKNOWN while it has not begun; refilled
 * to now (begun once the window is known); spent; and a share changed
 * from withheld to now_withheld.  Under the lock but for the first.
 */
int64_t tb_slice_left(const tb_account_state_t *a, int win, int64_t now_ms);

/*
 * When the slice of window win will hold n: now if it does, a fixed
 * window's reset, or when a rolling window's refill brings it; 0 when no
 * time is known (more than the slice can ever hold, or a fixed window
 * whose next reset is not known yet).
 */
int64_t tb_slice_at(const tb_account_state_t *a, int win, int64_t n,
    int64_t now_ms);
void tb_slice_refill(tb_account_state_t *a, int64_t now_ms);
void tb_slice_spend(tb_account_state_t *a, int win, int64_t n,
    int64_t now_ms);
void tb_slice_reshare(tb_account_state_t *a, uint32_t withheld,
    int64_t now_ms);

/* begun again at its next use: its share of the window then, less its
 * own (the windows it counts against changed).  Under the lock. */
void tb_slice_restart(tb_account_state_t *a);

/*
 * What the other gateways hold of a window (requests or input) now: what
 * they said within TB_PEER_HOLDS_MS that the window's count may not have:
 * said after its reading was sent, and after a fixed window's reset that
 * has passed
 */
int64_t tb_account_others(const tb_account_state_t *a, int win,
    int64_t now_ms);

/* what they spent of the account in its spend window and reserve, as
 * they said it within ttl_ms */
int64_t tb_account_others_spend(const tb_account_state_t *a,
    int64_t now_ms, int64_t ttl_ms);

/* an operator's re-enable: every state and the breaker cleared */
void tb_account_clear(tb_account_state_t *a);

/*
 * What an unobservable account's answers teach (under the lock): a 429
 * (throttled) lowers its ceiling to three quarters of what was in flight
 * when it came (at least 1), never above the ceiling it had; an answer
 * that was not one, to an attempt begun since (started_ms), counts toward
 * raising it by one, once as many as the ceiling allows have come in a
 * row; reaching max_concurrency the ceiling is gone.
 */
void tb_account_ceiling(tb_account_state_t *a, int throttled,
    int64_t inflight, int64_t max_concurrency, int64_t started_ms,
    int64_t now_ms);

/* the attempts it may have in flight: max_concurrency, or the ceiling */
static inline int64_t
tb_account_max_inflight(const tb_account_state_t *a,
    int64_t max_concurrency)
{
    return a->ceiling && (int64_t) a->ceiling < max_concurrency
           ? (int64_t) a->ceiling : max_concurrency;
}

const char *tb_state_name(tb_state_e state);

/* failure fraction over the recent outcomes, 0 with none */
double tb_account_error_rate(const tb_account_state_t *a);

/* records one outcome (failed or not) */
void tb_account_outcome(tb_account_state_t *a, int failed);

/*
 * Model scopes: 1 when name matches one of the patterns (an exact id, or a
 * prefix ending in '*'); an empty list matches nothing.
 */
int tb_models_match(char *const *patterns, size_t n, const char *name,
    size_t len);

#endif /* TB_ACCOUNT_H */
