/*
 * The shared zone: every worker's view of the pool, as a store that knows
 * no request.  Callers hand in plain values (an account's slot, a need, a
 * class, an id) and get back values, copies and tickets; the zone's layout
 * is private to shm/ (ngx_http_tokenbiryani_zone.h), and this is the only
 * code that takes the zone lock: the slab pool's own mutex, the one lock
 * the master recovers when a worker dies holding it.
 *
 * The one exception to "copies only" is an account's live state, which
 * the router reads without the lock through the const pointer each
 * account holds (tb_account_state_t): a decision over many accounts must
 * not take a lock per account, and every choice is re-checked under the
 * lock when its lease is taken.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include "tb_router.h"
#include "tb_lease.h"
#include "tb_estimator.h"
#include "tb_peers.h"
#include "tb_record.h"
#include "tb_batch.h"


#define NGX_HTTP_TB_REQUEST_ID_LEN     28      /* "tbr_" + 24 hex */

#define NGX_HTTP_TB_ESTIMATORS         64      /* estimators kept */
#define NGX_HTTP_TB_INSPECT_CANDS      32      /* candidates per record */
#define NGX_HTTP_TB_INSPECT_ATTEMPTS   8       /* attempts per record */

/* a record's edits: what the gateway changed in the body it sent */
#define NGX_HTTP_TB_REC_BREAKPOINT     0x01    /* added a cache breakpoint */
#define NGX_HTTP_TB_REC_DOWNSHIFT      0x02    /* sent a cheaper model */


typedef struct ngx_http_tokenbiryani_shm_s  ngx_http_tokenbiryani_shm_t;


/*
 * A lease or a place in the queue: the object in the zone and the id it
 * had when it was taken.  Leases and waiters are numbered from one
 * sequence, so a ticket never matches anything but what it was given for,
 * even after the object was freed and its memory reused.  id 0: none.
 */
typedef struct {
    void                          *obj;
    uint64_t                       id;
} ngx_http_tokenbiryani_ticket_t;


/* one configured account, as the zone knows it */
typedef struct {
    u_char                        *id;
    size_t                         id_len;
    u_char                         fingerprint[8];   /* credential + host */
    int                            replenishment;    /* TB_REFILL_* */
    const char                    *domain;           /* capacity_domain, or
                                                        NULL: learned */

    /* set when the zone is initialised */
    tb_account_state_t            *st;
    ngx_uint_t                     slot;
} ngx_http_tokenbiryani_zone_account_t;


typedef struct ngx_http_tokenbiryani_zone_s  ngx_http_tokenbiryani_zone_t;

/* frees one expendable thing, under the lock: 0 when it has none */
typedef ngx_uint_t (*ngx_http_tokenbiryani_evict_pt)(
    ngx_http_tokenbiryani_zone_t *zone);

#define NGX_HTTP_TB_EVICTORS           4


/* the handle: the zone and what the store needs of the configuration */
struct ngx_http_tokenbiryani_zone_s {
    ngx_shm_zone_t                *shm_zone;
    ngx_slab_pool_t               *shpool;
    ngx_http_tokenbiryani_shm_t   *sh;

    const tb_config_t             *tbcf;
    tb_breaker_conf_t              breaker;
    ngx_msec_t                     lease_timeout;
    int64_t                        spend_bucket_ms;   /* spend.window_hours */

    ngx_array_t                    accounts;  /* zone_account_t, pool order */

    /* what makes room when the zone is full, in this order (..._zone.c) */
    ngx_http_tokenbiryani_evict_pt evictors[NGX_HTTP_TB_EVICTORS];
    ngx_uint_t                     nevictors;
};


static ngx_inline int64_t
ngx_http_tokenbiryani_now_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (int64_t) tp->sec * 1000 + tp->msec;
}


/* the zone and its accounts (shm/ngx_http_tokenbiryani_shm.c) */

ngx_int_t ngx_http_tokenbiryani_zone_init(ngx_shm_zone_t *shm_zone,
    void *data);

/* what a response's rate-limit headers say (and a subscription's unified
 * ones, uni, or NULL): the windows it was stale for */
ngx_uint_t ngx_http_tokenbiryani_zone_observe(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t slot,
    const tb_rl_obs_t *obs, const tb_unified_t *uni, ngx_int_t status,
    int64_t now);

ngx_uint_t ngx_http_tokenbiryani_zone_rr_next(
    ngx_http_tokenbiryani_zone_t *zone);

/*
 * The state whose windows an account's requests count against: its
 * capacity domain's (every key of an organisation reads one mirror and
 * takes one set of leases), or its own; *domain the domain's key (the
 * same for every key of it), 0 for an account of its own.  Read without
 * the lock: a domain only ever moves under it, and a stale read sends one
 * decision to the windows it had.
 */
const tb_account_state_t *ngx_http_tokenbiryani_zone_capacity(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t slot, uint32_t *domain);

void ngx_http_tokenbiryani_zone_attempt_start(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t slot, ngx_uint_t leased,
    int64_t now);

/*
 * An attempt's end; 1 when it opened the account's breaker.  learn: the
 * account's max_concurrency when its limits cannot be observed, so that
 * its 429s and answers move its ceiling (tb_account_ceiling(), with when
 * the attempt began); else 0.
 */
ngx_uint_t ngx_http_tokenbiryani_zone_attempt_end(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t slot, ngx_uint_t leased,
    const tb_outcome_t *o, uint64_t model_hash, const char *model,
    size_t model_len, ngx_uint_t probed, int64_t learn, int64_t started,
    int64_t now);

/* an operator's enable (clears every state) or disable */
void ngx_http_tokenbiryani_zone_set_enabled(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t slot, ngx_uint_t enable,
    int64_t now);

/* a consistent copy of a slot, for reports */
void ngx_http_tokenbiryani_zone_snapshot(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, tb_account_state_t *copy);

/*
 * The slot of an account id, made (not live, no credential) when the
 * configuration has none: for history written under an account since
 * removed.  -1: no memory.
 */
ngx_int_t ngx_http_tokenbiryani_zone_slot_of(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len);

/*
 * The slot of an account this configuration has (live) of that id: a
 * look-up that never makes one, for what the peers announce.  -1
 * when there is none.
 */
ngx_int_t ngx_http_tokenbiryani_zone_slot_find(
    ngx_http_tokenbiryani_zone_t *zone, const u_char *id, size_t len);

/*
 * A pool shared with other gateways (shm/ngx_http_tokenbiryani_peers.c).
 * The share of every account's windows the peers hold, and how many
 * gateways share the pool: a grant (0: not a grant, unchanged).
 */
void ngx_http_tokenbiryani_peers_withhold(ngx_http_tokenbiryani_zone_t *zone,
    uint32_t withheld, ngx_uint_t peers, int64_t now);

typedef struct {
    uint32_t                       withheld;
    ngx_uint_t                     peers;         /* 0: never seen */
    int64_t                        granted_ms;    /* 0: never */
    uint64_t                       decisions;     /* what asks for it */
    ngx_uint_t                     waiting;
} ngx_http_tokenbiryani_share_state_t;

void ngx_http_tokenbiryani_peers_share(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_share_state_t *ss);


typedef struct {
    char                           id[TB_ID_MAX + 1];
    u_char                         fingerprint[8];
    tb_account_news_t              news;
} ngx_http_tokenbiryani_news_t;


/*
 * The organisation an account's answers named: its capacity domain is
 * the same on every gateway that shares the pool, whichever of them read
 * the answer.  The accounts whose organisation the peers have not been
 * told (max at most, each told once; all again after
 * ngx_http_tokenbiryani_peers_retell()).
 */
typedef struct {
    char                           id[TB_ID_MAX + 1];
    u_char                         fingerprint[8];
    char                           org[TB_ORG_MAX];
} ngx_http_tokenbiryani_org_news_t;

/* what the peers are to be told now, max of each at most */
typedef struct {
    ngx_http_tokenbiryani_news_t      *news;
    ngx_uint_t                         nnews;
    ngx_http_tokenbiryani_org_news_t  *orgs;
    ngx_uint_t                         norgs;
    ngx_uint_t                         max;
} ngx_http_tokenbiryani_peers_told_t;

/*
 * In one pass: the accounts whose organisation the peers have not been
 * told, and those whose news they have not been told or whose holdings
 * changed since
 */
void ngx_http_tokenbiryani_peers_news(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now, ngx_http_tokenbiryani_peers_told_t *t);

/*
 * Another gateway's word of an account (who: the gateway, by a hash of its
 * name): its news, or (news NULL) the organisation its answers named.  1
 * if this zone has the account and took the news, or if the organisation
 * moved this zone's domains.
 */
ngx_uint_t ngx_http_tokenbiryani_peers_adopt(
    ngx_http_tokenbiryani_zone_t *zone, const u_char *id, size_t len,
    const u_char fingerprint[8], const tb_account_news_t *news,
    const u_char *org, size_t org_len, uint64_t who, int64_t now);

/*
 * What the keys and conversations ran up, told to the peers
 * that share the pool (shm/ngx_http_tokenbiryani_peers.c): what changed
 * since last told, at most max_keys keys (*nkeys) and max_sessions
 * conversations (returned); a peer's (who: by a hash of its
 * name) kept as its own; everything told again at the next tell (an
 * instance that starts, or comes back).
 */
ngx_uint_t ngx_http_tokenbiryani_peers_tell(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now, tb_peer_key_t *keys, ngx_uint_t max_keys,
    ngx_uint_t *nkeys, tb_peer_session_t *sessions, ngx_uint_t max_sessions);
void ngx_http_tokenbiryani_peers_told_key(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t who, int64_t now, const tb_peer_key_t *t);
void ngx_http_tokenbiryani_peers_told_session(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t who, int64_t now,
    const tb_peer_session_t *t);
void ngx_http_tokenbiryani_peers_retell(ngx_http_tokenbiryani_zone_t *zone);

/*
 * The console's sign-in tickets (shm/ngx_http_tokenbiryani_tickets.c): a
 * ticket of NGX_HTTP_TB_TICKET_LEN hex digits that gives the admin key it
 * was made with, once, within NGX_HTTP_TB_TICKET_MS.  put: NGX_ERROR for a
 * key too long; take: NGX_DECLINED for a ticket unknown, used or expired.
 */
#define NGX_HTTP_TB_TICKET_LEN         32
#define NGX_HTTP_TB_TICKET_KEY_MAX     256
#define NGX_HTTP_TB_TICKET_MS          60000

ngx_int_t ngx_http_tokenbiryani_ticket_put(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, const u_char *key, size_t len, int64_t now);
ngx_int_t ngx_http_tokenbiryani_ticket_take(
    ngx_http_tokenbiryani_zone_t *zone, const u_char *id, size_t id_len,
    u_char *key, size_t *len, int64_t now);

/* how many slots the zone has made */
ngx_uint_t ngx_http_tokenbiryani_zone_nslots(
    ngx_http_tokenbiryani_zone_t *zone);

/* an account's id by slot (ids never change once made); NULL if none */
const char *ngx_http_tokenbiryani_zone_slot_id(
    ngx_http_tokenbiryani_zone_t *zone, int64_t slot);

/* the live state of a slot, for a verdict in words; NULL if none */
const tb_account_state_t *ngx_http_tokenbiryani_zone_slot_state(
    ngx_http_tokenbiryani_zone_t *zone, int64_t slot);

/* a slot's Batches and Files APIs refused for their own limit until
 * until (ms) */
/* a subscription's windows as its answers said them, copied whole */
void ngx_http_tokenbiryani_zone_unified(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, tb_unified_t *out);

void ngx_http_tokenbiryani_zone_objects_limited(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t slot, int64_t until);

/*
 * One answered request's decision, counted: what it did to its
 * conversation (tb_affinity_e) on its owner's slot (-1: none) and on the
 * slot that answered.
 */
void ngx_http_tokenbiryani_zone_count_affinity(
    ngx_http_tokenbiryani_zone_t *zone, ngx_int_t owner_slot,
    ngx_uint_t answered_slot, tb_affinity_e affinity);

typedef struct {
    uint64_t                       generation;
    int64_t                        created_ms;
    uint64_t                       aff_entries;
    uint64_t                       aff_evicted;
    size_t                         aff_entry_size;
    ngx_http_tokenbiryani_share_state_t  share;   /* with the decisions and
                                                     who waits */
    uint64_t                       affinity[4];   /* by tb_affinity_e */
    uint64_t                       leases_held;
    uint64_t                       leases_reclaimed;
    ngx_uint_t                     ring_size;
    uint64_t                       ring_seq;      /* the newest record */
    ngx_uint_t                     usage_size;    /* 0: no usage ring */
    ngx_uint_t                     events_size;
    uint64_t                       spend_seq;     /* the last charge */
    ngx_uint_t                     nsessions;
    uint64_t                       sessions_evicted;
    uint64_t                       failovers;
    uint64_t                       queue_wait_ms;
    uint64_t                       queue_waits;
    size_t                         zone_size;     /* the slab pool's */
    size_t                         zone_free;     /* its free pages */
    ngx_uint_t                     nslots;        /* account slots made */
} ngx_http_tokenbiryani_zone_stats_t;

/* an answered request that took more than one attempt */
void ngx_http_tokenbiryani_zone_count_failover(
    ngx_http_tokenbiryani_zone_t *zone);

void ngx_http_tokenbiryani_zone_stats(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_zone_stats_t *stats);


/* spend caps and conversations (shm/ngx_http_tokenbiryani_spend.c) */

#define NGX_HTTP_TB_SESSIONS           16384  /* conversations kept */

#define NGX_HTTP_TB_CAP_NONE           0
#define NGX_HTTP_TB_CAP_KEY            1      /* keys[].spend_cap_usd */
#define NGX_HTTP_TB_CAP_SESSION        2      /* session_cap_usd */
#define NGX_HTTP_TB_CAP_TURNS          3      /* session_max_turns */
#define NGX_HTTP_TB_CAP_ACCOUNT        4      /* accounts[].spend_cap_usd */

/*
 * A request's caps, and, when one is reached, which, what it holds (spent
 * in the window and reserved in flight: nanodollars, or turns), the
 * limit, and when the window frees room (ms; 0: only what is in flight
 * holds it; -1: never, the limit is 0; at the latest, with frees_within:
 * what the peers spent holds it, and leaves their ledgers at times
 * not told).
 */
typedef struct {
    int64_t                        key_cap;       /* nanodollars; -1 none */
    uint64_t                       session;       /* 0: not tracked */
    int64_t                        session_cap;   /* nanodollars; -1 none */
    int64_t                        session_turns; /* -1: none */
    const u_char                  *key_name;
    size_t                         key_name_len;

    ngx_uint_t                     reached;       /* NGX_HTTP_TB_CAP_* */
    int64_t                        held;
    int64_t                        in_flight;
    int64_t                        limit;
    int64_t                        frees_at;
    ngx_uint_t                     frees_within;
} ngx_http_tokenbiryani_caps_t;

/* what an answered attempt ran up */
typedef struct {
    int64_t                        at_ms;
    int64_t                        cost;          /* nanodollars; -1 unknown */
    int64_t                        tokens[4];     /* in, out, cache r/w */
} ngx_http_tokenbiryani_charge_t;

/* a conversation, copied out */
typedef struct {
    uint64_t                       session;
    tb_ledger_t                    ledger;
    int64_t                        first_ms;
    int64_t                        last_ms;
    int64_t                        tokens[4];
    int64_t                        cost;
    uint64_t                       turns;
    uint32_t                       unpriced;
    int32_t                        slot;
    uint32_t                       key_len;
    u_char                         key[TB_ID_MAX + 1];
    u_char                         account[TB_ID_MAX + 1];  /* the store's,
                                                     or a peer's */
    int64_t                        others[2];     /* what the peers ran up
                                                     in the window: cost,
                                                     turns */
} ngx_http_tokenbiryani_session_view_t;

#define NGX_HTTP_TB_LEDGER_ACCOUNT     1      /* id: the slot */
#define NGX_HTTP_TB_LEDGER_KEY         2      /* id: the key's hash */

typedef struct {
    ngx_uint_t                     kind;
    uint64_t                       id;
    tb_ledger_t                    ledger;
} ngx_http_tokenbiryani_ledger_view_t;

/* whether a cap of the key's or the conversation's is reached (reserves
 * nothing) */
ngx_uint_t ngx_http_tokenbiryani_caps_check(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, ngx_http_tokenbiryani_caps_t *caps, int64_t now);

ngx_uint_t ngx_http_tokenbiryani_sessions_top(
    ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_session_view_t *out, ngx_uint_t max,
    ngx_uint_t *total);

ngx_uint_t ngx_http_tokenbiryani_spend_since(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t seq,
    ngx_http_tokenbiryani_ledger_view_t *ledgers, ngx_uint_t max_ledgers,
    ngx_http_tokenbiryani_session_view_t *sessions, ngx_uint_t max_sessions,
    ngx_uint_t *nsessions, uint64_t *upto);

void ngx_http_tokenbiryani_spend_restore(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, uint64_t id, const tb_ledger_t *l);

/*
 * Pacing: the pool's spend in the budget week that starts at week, as
 * the usage history said at at (ms), kept for every worker; read back
 * NGX_OK, or NGX_DECLINED when it was never read
 */
void ngx_http_tokenbiryani_pace_put(ngx_http_tokenbiryani_zone_t *zone,
    int64_t week, int64_t spent, int64_t at);
ngx_int_t ngx_http_tokenbiryani_pace_get(ngx_http_tokenbiryani_zone_t *zone,
    int64_t *week, int64_t *spent, int64_t *at);

/* whether worker pid reads the week's spend: elected while the last is
 * gone */
ngx_uint_t ngx_http_tokenbiryani_pacer(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pid_t pid);
void ngx_http_tokenbiryani_session_restore(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_session_view_t *v);


/* leases (shm/ngx_http_tokenbiryani_lease.c) */

#define NGX_HTTP_TB_LEASE_NONE         0      /* the account cannot */
#define NGX_HTTP_TB_LEASE_TAKEN        1
#define NGX_HTTP_TB_LEASE_KEY_FULL     2      /* the key holds key_max */
#define NGX_HTTP_TB_LEASE_CAP          3      /* a cap: caps->reached */

/*
 * Re-checks and reserves in one step under the lock, all of the need or
 * nothing, counted against the key (a hash of its name; 0: none) unless
 * it already holds key_max leases (-1: no limit), and need->cost reserved
 * against the account's, the key's and the conversation's caps (caps
 * NULL: the account's only) unless one is reached (LEASE_CAP, with
 * caps->reached; NGX_HTTP_TB_CAP_ACCOUNT if it is the account's).  TAKEN
 * with *ticket set.
 */
ngx_uint_t ngx_http_tokenbiryani_lease_take(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t slot,
    const tb_account_conf_t *conf, const tb_need_t *need, uint64_t key,
    int64_t key_max, ngx_http_tokenbiryani_caps_t *caps, int64_t now,
    ngx_http_tokenbiryani_ticket_t *ticket, ngx_uint_t *probed);

/*
 * Exactly once: a lease already given back or taken back is left alone.
 * ans: what the attempt's answer said (NULL: nothing came); charge: what
 * the attempt ran up, if it was answered (NULL: nothing).
 */
void ngx_http_tokenbiryani_lease_give_back(
    ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_ticket_t *ticket, const tb_answer_t *ans,
    ngx_uint_t probe_back, const ngx_http_tokenbiryani_charge_t *charge);

/* how many leases each worker holds: at most max workers, in pids/held */
ngx_uint_t ngx_http_tokenbiryani_lease_owners(
    ngx_http_tokenbiryani_zone_t *zone, ngx_pid_t *pids, ngx_uint_t *held,
    ngx_uint_t max);

/* every lease this worker holds lives another lease_timeout */
void ngx_http_tokenbiryani_lease_renew(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now);

/*
 * Takes back the leases of workers that are gone and, with expired, the
 * ones nobody renewed in time; returns how many.
 */
ngx_uint_t ngx_http_tokenbiryani_lease_reclaim(
    ngx_http_tokenbiryani_zone_t *zone, int64_t now, ngx_uint_t expired);

/* drops the queue places of workers that are gone; returns how many */
ngx_uint_t ngx_http_tokenbiryani_queue_reap(
    ngx_http_tokenbiryani_zone_t *zone);


/* the queue and the keys' rpm (shm/ngx_http_tokenbiryani_queue.c) */

#define NGX_HTTP_TB_QUEUE_OK           0
#define NGX_HTTP_TB_QUEUE_FULL         1
#define NGX_HTTP_TB_QUEUE_NOMEM        2
#define NGX_HTTP_TB_QUEUE_KEY_FULL     3      /* the key has key_max */

#define NGX_HTTP_TB_QUEUE_TIMEOUT      0      /* why a waiter left */
#define NGX_HTTP_TB_QUEUE_SERVED       1
#define NGX_HTTP_TB_QUEUE_GONE         2

/*
 * Whether a request of key could wait now: NGX_HTTP_TB_QUEUE_OK, or
 * _FULL / _KEY_FULL as queue_add would say (and count), nothing taken.
 * *depth as for queue_add.
 */
ngx_uint_t ngx_http_tokenbiryani_queue_room(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, int64_t key_max, ngx_uint_t *depth);

/* *depth: the queue's, or the key's when it is KEY_FULL */
ngx_uint_t ngx_http_tokenbiryani_queue_add(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t cls, u_char *request_id,
    uint64_t key, int64_t key_max, int64_t now, ngx_uint_t *depth,
    ngx_http_tokenbiryani_ticket_t *ticket);
void ngx_http_tokenbiryani_queue_remove(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_ticket_t *ticket, ngx_uint_t why);
ngx_uint_t ngx_http_tokenbiryani_queue_clear_ahead(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t cls, int64_t now);
void ngx_http_tokenbiryani_queue_blocked(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_ticket_t *ticket, uint64_t gen, int64_t retry_at);
ngx_uint_t ngx_http_tokenbiryani_queue_scan(
    ngx_http_tokenbiryani_zone_t *zone, int64_t now, uint64_t *ids,
    ngx_uint_t max);

/* what the admin API shows of the queue, copied out under the lock */
typedef struct {
    u_char                         request_id[NGX_HTTP_TB_REQUEST_ID_LEN];
    ngx_uint_t                     cls;
    int64_t                        enqueued_ms;
    ngx_pid_t                      pid;
} ngx_http_tokenbiryani_waiter_view_t;

typedef struct {
    ngx_uint_t                     depth;
    ngx_uint_t                     n[2];          /* by class */
    uint64_t                       queued_total;
    uint64_t                       served;
    uint64_t                       timed_out;
    uint64_t                       full;
    uint64_t                       left;
    uint64_t                       stale;
} ngx_http_tokenbiryani_queue_view_t;

ngx_uint_t ngx_http_tokenbiryani_queue_snapshot(
    ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_queue_view_t *view,
    ngx_http_tokenbiryani_waiter_view_t *waiters, ngx_uint_t max);

/* capacity came back somewhere: every waiter may try again */
void ngx_http_tokenbiryani_capacity_changed(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now);
uint64_t ngx_http_tokenbiryani_capacity_gen(ngx_http_tokenbiryani_zone_t *zone,
    int64_t *since);

/* what a key has in flight and waiting, across workers */
void ngx_http_tokenbiryani_key_usage(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, ngx_uint_t *inflight, ngx_uint_t *queued);

/* when a key was last admitted (a lease taken), 0: not since the zone began */
int64_t ngx_http_tokenbiryani_key_last_used(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key);

/* what a key ran up, as its caps and rpm count it */
typedef struct {
    int64_t                        window_cost;   /* settled, nanodollars */
    int64_t                        reserved;      /* in flight */
    int64_t                        others;        /* the peers',
                                                     both */
    int64_t                        rpm;           /* admitted in the last
                                                     minute, here */
    int64_t                        others_rpm;
    int64_t                        rate;          /* here lately, an hour
                                                     (tb_ledger_rate) */
} ngx_http_tokenbiryani_key_spend_t;

void ngx_http_tokenbiryani_key_spend(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, int64_t now, ngx_http_tokenbiryani_key_spend_t *ks);

/* when a key's own spend here is under limit (tb_ledger_frees_at) */
int64_t ngx_http_tokenbiryani_key_frees(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, int64_t now, int64_t limit);

ngx_int_t ngx_http_tokenbiryani_rpm_take(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, ngx_uint_t rpm, int64_t now, int64_t *retry_ms);
void ngx_http_tokenbiryani_rpm_give_back(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, ngx_int_t slot, int64_t taken);


/* affinity (shm/ngx_http_tokenbiryani_affinity.c) */

/*
 * The owner's slot, or -1, and the prompt tokens its cache holds for the
 * session (what its last answer read and wrote there).
 */
ngx_int_t ngx_http_tokenbiryani_affinity_get(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t session, int64_t now,
    int64_t *cached);

/*
 * The session's owner from now (told: a peer said so).  What the
 * peers must be told: _CHANGED (a new owner, or a new
 * conversation), _REFRESH (the same, told a quarter of its time to live
 * ago), _KEPT (nothing; always when told).
 */
#define NGX_HTTP_TB_AFFINITY_KEPT      0
#define NGX_HTTP_TB_AFFINITY_REFRESH   1
#define NGX_HTTP_TB_AFFINITY_CHANGED   2

ngx_uint_t ngx_http_tokenbiryani_affinity_set(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t session, ngx_uint_t slot,
    int64_t cached, int64_t now, ngx_uint_t told);

/* a peer's owner, "<account id> <cached tokens>", into the zone
 * (nothing when this configuration has no account of that id: the zone
 * never grows for an announcement) */
void ngx_http_tokenbiryani_affinity_adopt(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t session, const u_char *value, size_t len, int64_t now);


/* estimators (shm/ngx_http_tokenbiryani_estimator.c) */

/*
 * A request's output lease (tb_est_lease) into *output, and its input
 * lease returned: calibrated from the model's answers when it can be
 * (*calibrated), else the fixed guess with the safety margin.
 */
int64_t ngx_http_tokenbiryani_estimate(ngx_http_tokenbiryani_zone_t *zone,
    const char *model, size_t len, int64_t max_tokens, int64_t text_bytes,
    int64_t fixed, int64_t *output, ngx_uint_t *calibrated);

/*
 * One answer: its output against the output leased; its prompt tokens
 * (all of them, cache reads included) for text_bytes of text (0: not a
 * sample).
 */
void ngx_http_tokenbiryani_estimator_observe(
    ngx_http_tokenbiryani_zone_t *zone, const char *model, size_t len,
    int64_t leased, int64_t actual, int64_t text_bytes, int64_t prompt);
ngx_uint_t ngx_http_tokenbiryani_estimator_snapshot(
    ngx_http_tokenbiryani_zone_t *zone, tb_est_t **copies, ngx_uint_t max,
    ngx_pool_t *pool);


/* the events ring (shm/ngx_http_tokenbiryani_events.c) */

/*
 * One event, as plain data: its codes (type, what, kind) are the caller's
 * to define and to name.  A request's event (an admission, a settlement, a
 * refusal) and an object's (a batch or a file made, changed, charged,
 * deleted) share the place after the codes: the ring, and the history the
 * store keeps of it, hold one size of event.
 */

#define NGX_HTTP_TB_EVENT_ID_MAX       112   /* an object's id, at most */

typedef struct {
    uint64_t                       seq;           /* its id; 0: being written */
    int64_t                        at_ms;
    u_char                         request_id[NGX_HTTP_TB_REQUEST_ID_LEN];
    ngx_pid_t                      pid;
    int32_t                        slot;          /* the account; -1 none */
    uint16_t                       status;        /* settlement; an object's
                                                     tb_batch_status_e */
    uint8_t                        type;
    uint8_t                        what;          /* decision, next, stage */
    uint8_t                        kind;          /* settlement's class; an
                                                     object's kind */
    uint8_t                        attempt;
    uint8_t                        affinity;      /* admission */
    uint8_t                        probe;         /* admission */
    uint16_t                       eligible;      /* admission */
    float                          score;         /* admission */

    union {
        struct {                                  /* a request's */
            int64_t                need[TB_NWINDOWS];
            int64_t                remaining[TB_NWINDOWS]; /* before */
            int64_t                soonest_ms;    /* 0: none */
            int64_t                usage[4];      /* in, out, cache r/w */
            int64_t                retry_after_ms;
            int64_t                latency_ms;
            char                   key[TB_ID_MAX + 1]; /* a refusal's key,
                                                     by name; "" */
        };

        struct {                                  /* an object's */
            int64_t                counts[TB_BATCH_NCOUNTS]; /* -1: not
                                                     said */
            int64_t                reserved;      /* nanodollars held here */
            int64_t                charged;       /* nanodollars */
            u_char                 id[NGX_HTTP_TB_EVENT_ID_MAX + 1];
        } obj;
    };
} ngx_http_tokenbiryani_event_t;

/* (re)sized at the zone's init; 0: no ring */
ngx_int_t ngx_http_tokenbiryani_events_init(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t size);

/*
 * A place in the ring, numbered, for the caller to fill in place and then
 * publish; NULL when there is no ring.  No lock is taken.
 */
ngx_http_tokenbiryani_event_t *ngx_http_tokenbiryani_events_reserve(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t *seq);
void ngx_http_tokenbiryani_events_publish(ngx_http_tokenbiryani_event_t *ev,
    uint64_t seq);

/* the events after since, oldest first; *dropped: those no longer held */
ngx_uint_t ngx_http_tokenbiryani_events_read(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t since,
    ngx_http_tokenbiryani_event_t *out, ngx_uint_t max, uint64_t *dropped);

/* the newest event's id, 0 if none */
uint64_t ngx_http_tokenbiryani_events_last(ngx_http_tokenbiryani_zone_t *zone);

/* one read back from the store, by the master before workers start */
void ngx_http_tokenbiryani_events_restore(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_event_t *ev);


/* the request inspector (shm/ngx_http_tokenbiryani_inspect.c) */

typedef struct {
    uint32_t                       slot;
    uint8_t                        verdict;
    int64_t                        available_at;
    float                          score;
    float                          headroom;
    float                          terms[TB_TERMS];
} ngx_http_tokenbiryani_inspect_cand_t;


typedef struct {
    uint32_t                       slot;
    int16_t                        status;        /* 0: no response */
    uint8_t                        kind;          /* tb_kind_e, or
                                                     TB_NKINDS: cancelled */
    uint8_t                        pad;
    uint32_t                       latency_ms;
    uint32_t                       waited_ms;     /* since the one before
                                                     ended: backoff, the
                                                     queue, a decision */
    uint32_t                       eligible;      /* its decision's */
    float                          score;         /* the chosen one's */
} ngx_http_tokenbiryani_inspect_attempt_t;


typedef struct {
    uint64_t                       seq;           /* 0: empty */
    u_char                         id[NGX_HTTP_TB_REQUEST_ID_LEN];
    char                           key[TB_ID_MAX + 1];
    char                           model[TB_MODEL_MAX + 1];  /* the one
                                                     sent; with
                                                     NGX_HTTP_TB_REC_DOWNSHIFT
                                                     the client's follows
                                                     its NUL */
    char                           strategy[32];
    uint64_t                       session;
    int64_t                        started_ms;
    int64_t                        decided_ms;    /* the last decision */
    int64_t                        latency_ms;
    int64_t                        ttft_ms;       /* -1: not a stream */
    int64_t                        queued_ms;
    int64_t                        soonest;
    tb_usage_t                     usage;
    int64_t                        cost;          /* nanodollars, -1:
                                                     unknown */
    int32_t                        prices_as_of;  /* YYYYMMDD of the table
                                                     it was priced by, 0:
                                                     the file's, -1: none */
    uint8_t                        breakpoint;    /* it asked for a cache
                                                     breakpoint, or the
                                                     gateway added one */
    uint8_t                        edits;         /* NGX_HTTP_TB_REC_* (was
                                                     padding) */
    uint16_t                       prefix_64b;    /* its system and tools,
                                                     in 64 bytes (these
                                                     four bytes were
                                                     padding) */
    tb_need_t                      need;
    int16_t                        status;
    uint8_t                        kind;          /* NGX_HTTP_TB_MESSAGES */
    uint8_t                        streamed;
    uint8_t                        priority;
    uint8_t                        session_source;
    uint8_t                        affinity;
    uint8_t                        nattempts;
    uint8_t                        ncands;
    uint16_t                       paced_ds;      /* held back by pacing,
                                                     tenths of a second (in
                                                     what was padding: the
                                                     record keeps its size) */
    int32_t                        chosen;        /* slot, -1 */
    uint32_t                       candidates;    /* in the pool */
    uint32_t                       verdicts[TB_NVERDICTS];
    int64_t                        woken_ms;      /* capacity to grant */
    uint32_t                       queued;        /* times it waited */
    ngx_pid_t                      pid;           /* the worker */
    ngx_http_tokenbiryani_inspect_attempt_t
                                   attempts[NGX_HTTP_TB_INSPECT_ATTEMPTS];
    ngx_http_tokenbiryani_inspect_cand_t
                                   cands[NGX_HTTP_TB_INSPECT_CANDS];
} ngx_http_tokenbiryani_record_t;


/*
 * What the usage history counts of one request (see the record): its
 * model in 64 bytes (a longer id: its first 47, '~' and 16 hex digits of
 * its hash, so that two long ids stay apart).
 */
#define NGX_HTTP_TB_USAGE_MODEL        64
#define NGX_HTTP_TB_USAGE_MIN          4096

typedef struct {
    uint64_t                       seq;           /* the record's */
    int64_t                        ended_ms;
    int64_t                        input;         /* -1: unknown */
    int64_t                        output;
    int64_t                        cache_read;
    int64_t                        cache_write;
    int64_t                        cost;          /* nanodollars, -1 */
    int32_t                        chosen;        /* slot, -1 */
    int16_t                        status;
    char                           key[TB_ID_MAX + 1];
    char                           model[NGX_HTTP_TB_USAGE_MODEL + 1];
} ngx_http_tokenbiryani_usage_entry_t;


/* the record numbered, kept in the ring and its usage in the usage ring */
void ngx_http_tokenbiryani_inspect_add(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_record_t *rec);
ngx_uint_t ngx_http_tokenbiryani_inspect_list(
    ngx_http_tokenbiryani_zone_t *zone, ngx_http_tokenbiryani_record_t *out,
    ngx_uint_t max);
ngx_int_t ngx_http_tokenbiryani_inspect_find(
    ngx_http_tokenbiryani_zone_t *zone, u_char *id,
    ngx_http_tokenbiryani_record_t *out);

/* for the store: the records after since, oldest first; one read back */
ngx_uint_t ngx_http_tokenbiryani_inspect_since(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t since,
    ngx_http_tokenbiryani_record_t *out, ngx_uint_t max);
void ngx_http_tokenbiryani_inspect_restore(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_record_t *rec);

/* the master, reading the store back: the next request numbered after
 * seq at least (NGX_ERROR from ngx_atoof, or 0: nothing) */
void ngx_http_tokenbiryani_inspect_number_from(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t seq);

/*
 * The master, once the store is read back: the records it gave, oldest
 * first, made one run of numbers that ends at the ring's last, so that
 * they are listed newest first whether they were a sample of the requests
 * or the numbering went on past them (their numbers are not written
 * again: the store has them)
 */
ngx_int_t ngx_http_tokenbiryani_inspect_compact(
    ngx_http_tokenbiryani_zone_t *zone, ngx_log_t *log);

/* for the store: the usage after since, oldest first, every one the ring
 * still holds up to max; how many (*lost: those it no longer holds) */
ngx_uint_t ngx_http_tokenbiryani_usage_since(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t since,
    ngx_http_tokenbiryani_usage_entry_t *out, ngx_uint_t max,
    uint64_t *lost);



#define NGX_HTTP_TB_REVOKED            64     /* revoked keys remembered */

/* a key revoked here or by a peer: its digest, never the key */
typedef struct {
    u_char                         digest[32];
    char                           name[TB_ID_MAX + 1];
    int64_t                        revoked_ms;    /* 0: a free place */
    int64_t                        refused_ms;    /* last presented, 0 */
    uint64_t                       refused;       /* times presented */
} ngx_http_tokenbiryani_revoked_t;

/*
 * A key presented that is not one: if it was revoked, its name into name
 * (TB_ID_MAX + 1), counted as refused at now; 1 then, else 0
 */
ngx_uint_t ngx_http_tokenbiryani_revoked_seen(
    ngx_http_tokenbiryani_zone_t *zone, const u_char digest[32], char *name,
    int64_t now);

/* the revoked keys remembered, newest first, at most max; their number */
ngx_uint_t ngx_http_tokenbiryani_revoked_copy(
    ngx_http_tokenbiryani_zone_t *zone, ngx_http_tokenbiryani_revoked_t *out,
    ngx_uint_t max);

/* minted keys and the store's state (shm/ngx_http_tokenbiryani_rkeys.c) */

#define NGX_HTTP_TB_RKEY_OK            0
#define NGX_HTTP_TB_RKEY_EXISTS        1      /* that name is taken */
#define NGX_HTTP_TB_RKEY_NONE          2      /* no key of that name */
#define NGX_HTTP_TB_RKEY_NOMEM         3
#define NGX_HTTP_TB_RKEY_STALE         5      /* older than what is, or was,
                                                 there: a replay */
#define NGX_HTTP_TB_RKEY_SAME          6      /* _set: as it was */
#define NGX_HTTP_TB_RKEY_NEW           7      /* _set: there was none */

/*
 * A new key (_put: digest given), or another spec for one (digest NULL);
 * or a key as a peer has it (_set): added (_NEW), replaced
 * (digest and spec: _OK), or left as it is when it is the same (_SAME:
 * the generation then stays)
 */
ngx_uint_t ngx_http_tokenbiryani_rkey_write(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *name, size_t name_len, const u_char *digest,
    const u_char *spec, size_t spec_len, ngx_uint_t set);

#define ngx_http_tokenbiryani_rkey_put(zone, name, name_len, digest, spec,    \
                                       spec_len)                              \
    ngx_http_tokenbiryani_rkey_write(zone, name, name_len, digest, spec,      \
                                     spec_len, 0)
#define ngx_http_tokenbiryani_rkey_set(zone, name, name_len, digest, spec,    \
                                       spec_len)                              \
    ngx_http_tokenbiryani_rkey_write(zone, name, name_len, digest, spec,      \
                                     spec_len, 1)

ngx_uint_t ngx_http_tokenbiryani_rkey_delete(
    ngx_http_tokenbiryani_zone_t *zone, const u_char *name, size_t len);

/*
 * The runtime records of a kind (TB_REC_KEY: minted keys, TB_REC_ACCOUNT:
 * accounts added at runtime; shm/ngx_http_tokenbiryani_records.c): their
 * generation, which changes with every put and delete (read without the
 * lock), and a view of each into pool (*out: rkey_view_t, racct_view_t),
 * with the generation they are of.
 */
uint64_t ngx_http_tokenbiryani_records_gen(ngx_http_tokenbiryani_zone_t *zone,
    int kind);
ngx_int_t ngx_http_tokenbiryani_records_copy(
    ngx_http_tokenbiryani_zone_t *zone, int kind, ngx_pool_t *pool,
    ngx_array_t *out, uint64_t *gen);

#define ngx_http_tokenbiryani_rkeys_gen(zone)                                 \
    ngx_http_tokenbiryani_records_gen(zone, TB_REC_KEY)
#define ngx_http_tokenbiryani_rkeys_copy(zone, pool, out, gen)                \
    ngx_http_tokenbiryani_records_copy(zone, TB_REC_KEY, pool, out, gen)
#define ngx_http_tokenbiryani_raccts_gen(zone)                                \
    ngx_http_tokenbiryani_records_gen(zone, TB_REC_ACCOUNT)
#define ngx_http_tokenbiryani_raccts_copy(zone, pool, out, gen)               \
    ngx_http_tokenbiryani_records_copy(zone, TB_REC_ACCOUNT, pool, out, gen)

/*
 * Records (TB_REC_KEY, TB_REC_ACCOUNT) carry a generation in their
 * envelope (tb_record.h).  The zone refuses one older than the record it
 * holds of that name (_STALE), or than one it removed; this is the
 * newest generation it knows of, for the next write's.
 */
uint64_t ngx_http_tokenbiryani_record_gen(ngx_http_tokenbiryani_zone_t *zone,
    int kind, const u_char *name, size_t len);

/* a record read back and refused, or a message: counted for the status */
void ngx_http_tokenbiryani_count_refused(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t message);
void ngx_http_tokenbiryani_refused(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t *records, uint64_t *messages);

typedef struct {
    ngx_str_t                      name;
    u_char                         digest[32];
    ngx_str_t                      spec;          /* NUL-terminated */
} ngx_http_tokenbiryani_rkey_view_t;


/*
 * Accounts added at runtime (shm/ngx_http_tokenbiryani_raccts.c): each its
 * id, its spec (JSON without the credential), the credential sealed, the
 * addresses its host resolved to, and a zone slot, kept for as long as the
 * zone lives.  Workers keep a usable copy, rebuilt when the generation
 * moves.
 */

#define NGX_HTTP_TB_RACCT_ADDRS        8
#define NGX_HTTP_TB_RKEY_FULL          4      /* tokenbiryani_max_accounts */

typedef struct {
    socklen_t                      socklen;
    ngx_sockaddr_t                 sockaddr;
} ngx_http_tokenbiryani_raddr_t;

typedef struct {
    ngx_str_t                      id;            /* NUL-terminated */
    ngx_str_t                      spec;          /* NUL-terminated */
    ngx_str_t                      sealed;        /* NUL-terminated */
    ngx_uint_t                     slot;
    uint64_t                       version;
    ngx_uint_t                     naddrs;
    ngx_http_tokenbiryani_raddr_t  addrs[NGX_HTTP_TB_RACCT_ADDRS];
} ngx_http_tokenbiryani_racct_view_t;

/*
 * A new account (create: NGX_HTTP_TB_RKEY_EXISTS if the id is taken,
 * _FULL when max accounts are there) or another content for one
 * (NGX_HTTP_TB_RKEY_NONE if there is none).  in->slot, in->version are
 * ignored: a new account gets the slot of its id and fingerprint (made
 * when new), a changed one keeps its slot.  *slot: the slot it has.
 */
ngx_uint_t ngx_http_tokenbiryani_racct_put(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_racct_view_t *in,
    const u_char fingerprint[8], int replenishment, ngx_uint_t create,
    ngx_uint_t max, ngx_uint_t *slot);

/* an account removed, and the sessions placed on it; its slot in *slot */
ngx_uint_t ngx_http_tokenbiryani_racct_delete(
    ngx_http_tokenbiryani_zone_t *zone, const u_char *id, size_t len,
    ngx_uint_t *slot);

/* whether the zone has v's account: 0 not, 1 with another content, 2 with
 * v's spec and sealed credential */
ngx_uint_t ngx_http_tokenbiryani_racct_known(
    ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_racct_view_t *v);


/*
 * The strategy an operator set at runtime, by name ("" or NULL: the
 * file's), for every worker; the generation moves with each change.
 * gen: its record's (0: none), refused as NGX_HTTP_TB_RKEY_STALE when
 * older than the zone's.
 */
ngx_uint_t ngx_http_tokenbiryani_settings_set_strategy(
    ngx_http_tokenbiryani_zone_t *zone, const u_char *name, size_t len,
    uint64_t gen);
uint64_t ngx_http_tokenbiryani_settings_gen(ngx_http_tokenbiryani_zone_t *zone);
uint64_t ngx_http_tokenbiryani_settings_strategy(
    ngx_http_tokenbiryani_zone_t *zone, u_char *buf, size_t size);

/*
 * POST /admin/reload: a worker takes a ticket and wakes the reload helper
 * (a process of root's, forked by the master, which takes no lock of the
 * zone); the helper checks the file, signals the master and writes its
 * answer for every ticket up to the newest, under a sequence that readers
 * check before and after their copy.
 */
typedef struct {
    uint64_t                       asked;         /* tickets given */
    uint64_t                       done;          /* answered up to */
    uint64_t                       seq;           /* odd: being written */
    uint32_t                       ok;
    u_char                         text[4096];    /* NUL-terminated */
} ngx_http_tokenbiryani_reload_state_t;

uint64_t ngx_http_tokenbiryani_reload_ticket(ngx_http_tokenbiryani_zone_t *zone);
uint64_t ngx_http_tokenbiryani_reload_asked(ngx_http_tokenbiryani_zone_t *zone);
void ngx_http_tokenbiryani_reload_answer(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t upto, ngx_uint_t ok, const u_char *text, size_t len);

/* NGX_AGAIN until the ticket is answered; then NGX_OK with *ok and text */
ngx_int_t ngx_http_tokenbiryani_reload_result(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t ticket, ngx_uint_t *ok,
    u_char *text, size_t size);

/*
 * The durable store as every worker sees it: whether its writes work, the
 * first error since they stopped, and how far the history is written.
 * The flusher is the one worker that writes history.
 */
typedef struct {
    ngx_uint_t                     degraded;
    int64_t                        since_ms;      /* of the state */
    int64_t                        flushed_ms;    /* the last flush */
    uint64_t                       records_seq;   /* written up to */
    uint64_t                       events_seq;
    uint64_t                       spend_seq;     /* ledgers, sessions */
    uint64_t                       flushes;
    uint64_t                       failures;
    ngx_pid_t                      flusher;
    u_char                         error[256];
    u_char                         epoch[33];     /* redis: the data set
                                                     the zone holds */

    /* the last time the store had less history than the zone wrote: the
     * requests written again, and those gone from the usage history */
    int64_t                        rewound_ms;
    uint64_t                       rewound_again;
    uint64_t                       rewound_lost;
} ngx_http_tokenbiryani_store_state_t;

/*
 * A write's outcome; 1 when it changed the state (from working to
 * degraded or back), for the one log line.  err: NULL when it worked.
 */
ngx_uint_t ngx_http_tokenbiryani_store_report(
    ngx_http_tokenbiryani_zone_t *zone, const char *err, int64_t now);
void ngx_http_tokenbiryani_store_flushed(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t records_seq, uint64_t events_seq, uint64_t spend_seq,
    int64_t now);
void ngx_http_tokenbiryani_store_snapshot(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_store_state_t *copy);

/* the store has the history only up to records_seq and events_seq: the
 * zone writes again what it holds after them, the ledgers whole */
void ngx_http_tokenbiryani_store_rewind(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t records_seq, uint64_t events_seq, int64_t now);

/* the redis data set the zone holds (33 bytes, "" for none): copied into
 * get, then replaced by set, either NULL */
void ngx_http_tokenbiryani_store_epoch(ngx_http_tokenbiryani_zone_t *zone,
    u_char *get, const u_char *set);

/* whether this worker writes the history: elected while the last is gone */
ngx_uint_t ngx_http_tokenbiryani_store_flusher(
    ngx_http_tokenbiryani_zone_t *zone, ngx_pid_t pid);
void ngx_http_tokenbiryani_store_unelect(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pid_t pid);


/*
 * Objects the upstream keeps for the account that made them
 * (shm/ngx_http_tokenbiryani_objects.c): a message batch, a file.
 */

#define NGX_HTTP_TB_OBJECT_BATCH       1
#define NGX_HTTP_TB_OBJECT_FILE        2
#define NGX_HTTP_TB_OBJECT_ID_MAX      TB_BATCH_ID_MAX
#define NGX_HTTP_TB_OBJECT_COUNTS      TB_BATCH_NCOUNTS

typedef struct {
    ngx_uint_t                     kind;          /* NGX_HTTP_TB_OBJECT_* */
    ngx_uint_t                     status;        /* a batch's
                                                     tb_batch_status_e */
    ngx_uint_t                     over;          /* a batch that ended */
    ngx_int_t                      slot;          /* its account's */
    uint64_t                       key;           /* its key's name hashed;
                                                     0: open mode */
    int64_t                        created_ms;
    int64_t                        seen_ms;       /* its state, read then */
    int64_t                        reserved;      /* nanodollars held for
                                                     it on the ledgers */
    int64_t                        charged;       /* nanodollars */
    ngx_uint_t                     settled;       /* its hold released */
    ngx_uint_t                     held;          /* reserved is held in
                                                     this zone */
    uint64_t                       gen;           /* its record's, in the
                                                     store (tb_record.h) */
    int64_t                        counts[NGX_HTTP_TB_OBJECT_COUNTS];
    size_t                         id_len;
    u_char                         id[NGX_HTTP_TB_OBJECT_ID_MAX + 1];
    u_char                         key_name[TB_ID_MAX + 1];

    /* a file's */
    int64_t                        size;          /* bytes, -1: not said */
    ngx_uint_t                     downloadable;
    u_char                         filename[TB_FILE_NAME_MAX + 1];
    u_char                         mime[TB_FILE_MIME_MAX + 1];
} ngx_http_tokenbiryani_object_view_t;

/*
 * Its record as the store is to keep it now, of the next generation (the
 * zone's from now): NGX_OK; NGX_DECLINED when it is not known
 */
ngx_int_t ngx_http_tokenbiryani_object_record(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t kind, const u_char *id,
    size_t len, int64_t now, tb_object_rec_t *rec, uint64_t *gen);

/*
 * An object into the zone: one made here (in->gen 0), or its record read
 * back from the store (checked, in->gen its generation).  A new one is
 * added, with in->reserved (nanodollars) held on its account's and key's
 * ledgers when in->held and it is not settled: NGX_OK; NGX_BUSY when max
 * are kept and none is over; NGX_DECLINED when another id of its hash is
 * kept; NGX_ERROR: no memory.  Of one known, what is newer is taken - its
 * state, and settled: its hold here released, its charge made where its
 * results were read - NGX_OK; NGX_DONE: the zone had it as new already;
 * NGX_ABORT: it names another account or key than the zone's of that id.
 */
ngx_int_t ngx_http_tokenbiryani_object_adopt(
    ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_object_view_t *in, ngx_uint_t max);

/* a copy in *out (unless NULL): NGX_OK, or NGX_DECLINED when it is not
 * known */
ngx_int_t ngx_http_tokenbiryani_object_get(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, const u_char *id, size_t len,
    ngx_http_tokenbiryani_object_view_t *out);

/* what the upstream said of it now (counts: -1 for one not said):
 * NGX_OK; NGX_DONE when that is what the zone had; NGX_DECLINED: not
 * known */
ngx_int_t ngx_http_tokenbiryani_object_seen(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t kind, const u_char *id,
    size_t len, ngx_uint_t status,
    const int64_t counts[NGX_HTTP_TB_OBJECT_COUNTS], int64_t now);

/* a batch not yet charged is charged what it held here (deleted unread);
 * its last state in *out, unless NULL */
ngx_int_t ngx_http_tokenbiryani_object_remove(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t kind, const u_char *id,
    size_t len, int64_t now, ngx_http_tokenbiryani_object_view_t *out);

/*
 * Its hold released and what it cost charged, once: NGX_OK; NGX_DONE when
 * it was already; NGX_DECLINED: not known
 */
ngx_int_t ngx_http_tokenbiryani_object_settle(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t kind, const u_char *id,
    size_t len, const ngx_http_tokenbiryani_charge_t *charge);

/* whether worker pid polls the open batches: elected while the last is
 * gone */
ngx_uint_t ngx_http_tokenbiryani_object_poller(
    ngx_http_tokenbiryani_zone_t *zone, ngx_pid_t pid);

/*
 * The open batch whose hold is in this zone, not settled, read longest
 * ago and before before_ms, in *out, its account's id in account: NGX_OK
 * (its seen_ms is now from
 * now: it is not given again until it is due again); NGX_DECLINED: none
 * is due.
 */
ngx_int_t ngx_http_tokenbiryani_object_due(ngx_http_tokenbiryani_zone_t *zone,
    int64_t before_ms, int64_t now, ngx_http_tokenbiryani_object_view_t *out,
    u_char account[TB_ID_MAX + 1]);

/*
 * Newest first, of kind and key (0: every key's), after the one named
 * (NULL: from the newest): at most max in out, *more set when there are
 * more
 */
ngx_uint_t ngx_http_tokenbiryani_object_list(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t kind, uint64_t key,
    const u_char *after, size_t after_len,
    ngx_http_tokenbiryani_object_view_t *out, ngx_uint_t max,
    ngx_uint_t *more);


#endif /* _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_ */
