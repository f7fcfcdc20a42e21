/*
 * The router: what each account can take now (the rate-limit mirror read
 * at a time), the filters with their verdicts, the score and its
 * strategies.  The lease arithmetic is in tb_lease.h.
 *
 * Everything here is a pure function of its inputs and `now`: the same
 * inputs always give the same choice, so decisions can be replayed, unit
 * tested and benchmarked without nginx.  The caller owns locking.
 */

#ifndef TB_ROUTER_H
#define TB_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "tb_config.h"
#include "tb_account.h"
#include "tb_body.h"
#include "tb_failure.h"



enum {
    TB_T_AFFINITY = 0,
    TB_T_HEADROOM,
    TB_T_PRIORITY,
    TB_T_LOAD,
    TB_T_ERRORS,
    TB_T_COST,
    TB_TERMS
};

extern const char *tb_term_names[TB_TERMS];


/*
 * The filters.  They are applied in this order: first what no waiting
 * changes (the pool, the limits, a disabled account, the model), then an
 * account this request already gave up on, then what comes back by itself
 * (exhausted, cooling, concurrency, spend, the breaker, headroom), so that
 * an account that could never serve the request never makes it wait.
 */
typedef enum {
    TB_V_ELIGIBLE = 0,
    TB_V_CHOSEN,
    TB_V_POOL,              /* outside this key's pool */
    TB_V_TRIED,             /* already attempted */
    TB_V_EXCEEDS,           /* request exceeds account limit */
    TB_V_DISABLED,          /* disabled (with its reason) */
    TB_V_COOLING,           /* cooling, Ns remaining */
    TB_V_MODEL,             /* model not in account allowlist */
    TB_V_REJECTED,          /* model rejected by upstream */
    TB_V_CONCURRENCY,       /* at max concurrency (N) */
    TB_V_SPEND,             /* spend cap reached */
    TB_V_CIRCUIT,           /* circuit open */
    TB_V_HEADROOM,          /* insufficient headroom */
    TB_V_EXHAUSTED,         /* exhausted (why), Ns remaining */
    TB_V_TOKEN,             /* waiting for an access token */
    TB_NVERDICTS
} tb_verdict_e;


typedef enum {
    TB_AFF_NONE = 0,        /* the request had no owner */
    TB_AFF_HONORED,         /* the owner won */
    TB_AFF_BROKEN,          /* the owner was eligible and lost */
    TB_AFF_FORCED           /* the owner was filtered out */
} tb_affinity_e;


/* what one attempt takes from an account's windows */
typedef struct {
    int64_t                   n[TB_NWINDOWS];  /* requests, input, output;
                                                  never negative */
    int64_t                   max_tokens;      /* the caller's ceiling, >= 0 */
    int64_t                   cost;            /* what it may cost at most,
                                                  nanodollars; 0: unknown */
} tb_need_t;


/*
 * A need of no tokens at all holds a concurrency slot only (count_tokens
 * and models, whose limits are their own): it neither waits for an
 * unobserved account's probe nor starts one.
 */
static inline int
tb_need_empty(const tb_need_t *need)
{
    return need->n[0] == 0 && need->n[1] == 0 && need->n[2] == 0;
}


/*
 * The affinity term of a key of the owner's capacity domain, as a part of
 * the owner's: it holds the cache too, the owner is preferred.
 */
#define TB_SIBLING_AFFINITY   0.75


typedef struct tb_strategy_s  tb_strategy_t;


typedef struct {
    const tb_account_conf_t  *conf;
    const tb_account_state_t *st;
    const tb_account_state_t *cap;             /* whose windows it reads:
                                                  its capacity domain's;
                                                  NULL: its own */
    uint32_t                  domain;          /* its domain, the same for
                                                  every key of it; 0: one
                                                  of its own */
    uint64_t                  id_hash;         /* tb_hash64 of the id */
    unsigned                  supported:1;     /* a type this build sends */
    unsigned                  messages_only:1; /* a platform's, and this
                                                  is count_tokens or
                                                  models */
    unsigned                  token_wait:1;    /* no valid access token
                                                  yet (Vertex) */
    int64_t                   token_at;        /* the next fetch, ms */
    unsigned                  removed:1;       /* by an operator, since */
    unsigned                  in_pool:1;
    unsigned                  tried:1;
} tb_cand_t;


typedef struct {
    tb_verdict_e              verdict;
    int64_t                   available_at;    /* ms; 0: not knowable */
    double                    headroom;
    double                    score;
    double                    terms[TB_TERMS];
} tb_cand_out_t;


typedef struct {
    const tb_strategy_t      *strategy;
    double                    weights[TB_TERMS];
    const char               *model;
    size_t                    model_len;
    uint64_t                  model_hash;      /* tb_hash64(0, model) */
    tb_breaker_conf_t         breaker;
    tb_need_t                 need;
    tb_need_t                 owner_need;      /* with owner_discount: the
                                                  owner's, what it counts
                                                  once its cache is read */
    unsigned                  owner_discount:1;
    uint64_t                  session;         /* 0: no session key */
    int                       owner;           /* candidate index, or -1 */
    uint64_t                  cursor;          /* round-robin position */
    int64_t                   spend_bucket_ms; /* of the spend window */
    int64_t                   now;
} tb_route_in_t;


typedef struct {
    int                       chosen;          /* candidate index, or -1 */
    tb_affinity_e             affinity;
    int64_t                   soonest;         /* ms; 0: nothing will */
    unsigned                  eligible;
    unsigned                  servable:1;      /* some account could ever */
    unsigned                  by_event:1;      /* capacity may come back
                                                  sooner, as leases end */
} tb_decision_t;


struct tb_strategy_s {
    const char               *name;
    const char               *description;
    double                    mult[TB_TERMS];
    unsigned                  rotate:1;        /* round robin */

    /*
     * A strategy may compute its own terms instead (a plugin's): for the
     * eligible candidate c[index] of the count in c[], it fills terms[]
     * (names in term_names, NULL-terminated when fewer than TB_TERMS; the
     * terms it does not name are 0) and the score is their sum.  out[] has every candidate's verdict, so a
     * term can be normalised over the eligible ones.
     */

    void                    (*terms)(void *data, const tb_route_in_t *in,
                                     const tb_cand_t *c,
                                     const tb_cand_out_t *out, size_t index,
                                     size_t count, double *terms);
    const char               *term_names[TB_TERMS];
    void                     *data;
};


extern const tb_strategy_t  tb_builtin_strategy_table[];

const tb_strategy_t *tb_strategy_builtin(const char *name);


/*
 * The mirror read at now.  A window never observed is TB_UNKNOWN (reads
 * as full); once its reset has passed it reads as refilled to its limit;
 * in between it replenishes linearly from the remaining count seen toward
 * the limit at the reset time - Anthropic's limits are token buckets whose
 * reset header is when the bucket is full again.
 */
int64_t tb_window_level(const tb_window_t *w, int64_t now);

/* level minus what is reserved, never below 0; TB_UNKNOWN if unobserved */
int64_t tb_window_available(const tb_account_state_t *st, int win,
    int64_t now);

/*
 * Headroom in [0, 1]: the tightest window's available / limit.  An account
 * with observable_limits off reads as its assumed_headroom, never full.
 */
double tb_headroom(const tb_account_conf_t *conf,
    const tb_account_state_t *st, int64_t now);

/* 1 when every known window can take the need now */
int tb_fits(const tb_account_state_t *st, const tb_need_t *need, int64_t now);

/* when it will (ms), 0 when no refill makes it fit */
int64_t tb_fits_at(const tb_account_state_t *st, const tb_need_t *need,
    int64_t now);

/* 1 when the request is larger than a known window's whole limit */
int tb_exceeds_limits(const tb_account_state_t *st, const tb_need_t *need);

/*
 * An account whose limits were never observed reads as full, but for one
 * request at a time at first: the rest wait for its first response's
 * headers instead of stampeding a window nobody has seen.  A first
 * response that takes longer than TB_PROBE_MS (a long request that is not
 * streamed) does not hold the account back any longer than that.
 */
#define TB_PROBE_MS           2000

int tb_probing(const tb_account_conf_t *conf, const tb_account_state_t *st,
    int64_t now);


/* filters, scores and picks; out[] has n entries */
void tb_route(const tb_route_in_t *in, const tb_cand_t *c, size_t n,
    tb_cand_out_t *out, tb_decision_t *d);

/* "filtered — cooling, 27s remaining", "chosen", ... */
size_t tb_verdict_str(tb_verdict_e v, const tb_cand_out_t *o,
    const tb_cand_t *c, int64_t now, char *buf, size_t size);

const char *tb_affinity_name(tb_affinity_e a);


#endif /* TB_ROUTER_H */
