/*
 * The zone's layout: private to shm/.  Everything outside shm/ goes
 * through the functions of ngx_http_tokenbiryani_shm.h.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ZONE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ZONE_H_INCLUDED_


#include "ngx_http_tokenbiryani_shm.h"
#include "tb_record.h"


#define NGX_HTTP_TB_SHM_MAGIC          0x74627a65      /* "tbze" */

/* records removed whose generation is remembered (a replay refused) */
#define NGX_HTTP_TB_GRAVES             256


/*
 * What a peer sharing the pool said one of its keys or conversations ran
 * up (tb_peers.h), kept as that peer's until it says again
 */
typedef struct {
    uint64_t                       who;           /* the peer; 0 */
    int64_t                        at_ms;         /* said then */
    tb_peer_spend_t                spend;
    int64_t                        rpm;           /* keys */
} ngx_http_tokenbiryani_peer_spend_t;

#define NGX_HTTP_TB_KEY_PEERS          8
#define NGX_HTTP_TB_KEY_PEER_MS        60000  /* a peer's rpm holds */
#define NGX_HTTP_TB_SESSION_PEERS      4

/* a conversation's, with what its report shows */
typedef struct {
    ngx_http_tokenbiryani_peer_spend_t  spend;
    int64_t                        cost;
    int64_t                        turns;
    int64_t                        unpriced;
    int64_t                        tokens[4];
    int64_t                        first_ms;
    int64_t                        last_ms;
    u_char                         account[TB_ID_MAX + 1];
} ngx_http_tokenbiryani_peer_session_t;


/*
 * A one-time ticket that signs a browser in to the console: the admin key
 * it was made with, for a minute at most, given once and wiped then
 */
#define NGX_HTTP_TB_TICKETS            16

typedef struct {
    u_char                         id[NGX_HTTP_TB_TICKET_LEN];  /* 0: free */
    int64_t                        expires_ms;
    size_t                         key_len;
    u_char                         key[NGX_HTTP_TB_TICKET_KEY_MAX];
} ngx_http_tokenbiryani_ticket_slot_t;


/* a key's requests in flight and waiting, across workers; never freed */
typedef struct {
    ngx_queue_t                    queue;         /* in sh->keys */
    uint64_t                       key;           /* hash of its name */
    int64_t                        last_used_ms;  /* its last lease, 0 */
    ngx_uint_t                     inflight;      /* leases it holds */
    ngx_uint_t                     queued;        /* its waiters */
    ngx_uint_t                     nsessions;     /* conversations this
                                                     instance's requests
                                                     made for it */
    tb_ledger_t                    spend;         /* its spend window */

    /* the peers' (store.backend: redis), and what it told */
    ngx_http_tokenbiryani_peer_spend_t  peers[NGX_HTTP_TB_KEY_PEERS];
    tb_peer_key_t                  told;
} ngx_http_tokenbiryani_keystate_t;


/* a conversation: its ledger and what it ran up, see ..._spend.c */
typedef struct {
    ngx_rbtree_node_t              node;          /* key: the session */
    ngx_queue_t                    lru;           /* last charged first */
    tb_ledger_t                    ledger;
    int64_t                        first_ms;
    int64_t                        last_ms;
    int64_t                        tokens[4];     /* in, out, cache r/w */
    int64_t                        cost;          /* priced turns, nd */
    uint64_t                       turns;
    uint32_t                       unpriced;      /* turns with no price */
    int32_t                        slot;          /* last account; -1 */
    uint32_t                       leases;        /* held on it now */
    uint32_t                       key_len;
    u_char                         key[TB_ID_MAX];

    /* the key whose requests made it here, counted against its share */
    ngx_http_tokenbiryani_keystate_t  *owner;

    /*
     * Sharing the pool: changed since the peers were told (in
     * sh->sess_dirty), and what they said of it (NULL: nothing yet)
     */
    ngx_queue_t                    dirty;
    ngx_uint_t                     is_dirty;
    ngx_http_tokenbiryani_peer_session_t *peers;  /* [SESSION_PEERS] */
} ngx_http_tokenbiryani_session_t;


/* one held reservation */
typedef struct {
    ngx_queue_t                    queue;
    ngx_http_tokenbiryani_keystate_t *ks;         /* its key's, or NULL */
    uint64_t                       id;            /* 0: given back */
    ngx_uint_t                     slot;          /* index in slots */
    tb_need_t                      need;
    int64_t                        expires_ms;
    ngx_pid_t                      pid;
    ngx_uint_t                     probed;        /* holds the breaker's */
    ngx_uint_t                     reads_count;   /* the account counts
                                                     cache reads */
    ngx_http_tokenbiryani_session_t *sess;        /* its conversation's */
    ngx_uint_t                     cap_slot;      /* whose windows it holds:
                                                     its capacity domain's */
} ngx_http_tokenbiryani_lease_t;


/* a request waiting for capacity, in the queue every worker sees */
typedef struct {
    ngx_queue_t                    queue;         /* in sh->waiting[cls] */
    ngx_http_tokenbiryani_keystate_t *ks;         /* its key's, or NULL */
    uint64_t                       id;            /* 0: gone */
    ngx_pid_t                      pid;           /* the worker holding it */
    ngx_uint_t                     cls;           /* 0 interactive, 1 batch */
    uint64_t                       blocked_gen;   /* tried and failed at */
    int64_t                        retry_at;      /* ... until then, 0 */
    int64_t                        enqueued_ms;
    int64_t                        renewed_ms;    /* by its worker's tick */
    u_char                         request_id[NGX_HTTP_TB_REQUEST_ID_LEN];
} ngx_http_tokenbiryani_waiter_t;


/* a key's admissions over the last minute: one time per rpm slot */
typedef struct {
    ngx_queue_t                    queue;
    uint64_t                       key;           /* hash of its name */
    ngx_uint_t                     size;          /* the key's rpm */
    int64_t                        times[1];
} ngx_http_tokenbiryani_rpm_t;


/* one session's owner: 64 bytes, the slab's 64-byte class exactly */
typedef struct {
    ngx_rbtree_node_t              node;          /* key: the session */
    ngx_queue_t                    lru;
    uint16_t                       slot;
    uint16_t                       cached;        /* prompt cached there,
                                                     in 64-token units */
    uint32_t                       expires;       /* s since the epoch */
} ngx_http_tokenbiryani_affinity_t;


/*
 * A runtime record (a minted key, an account added at runtime): its name,
 * its spec (JSON text, the record's generation in its envelope) and its
 * secret (a key's SHA-256 digest, an account's sealed credential), each
 * NUL-terminated in data, after what its kind keeps besides.  A kind's
 * record begins with one.
 */
typedef struct {
    ngx_queue_t                    queue;         /* in its kind's list */
    size_t                         name_len;
    size_t                         spec_len;
    size_t                         secret_len;
    u_char                        *data;          /* name, spec, secret */
} ngx_http_tokenbiryani_rrec_t;

#define ngx_http_tokenbiryani_rrec_spec(r)                                    \
    ((r)->data + (r)->name_len + 1)
#define ngx_http_tokenbiryani_rrec_secret(r)                                  \
    ((r)->data + (r)->name_len + (r)->spec_len + 2)

/* the records of one kind; the generation changes with each change */
typedef struct {
    ngx_queue_t                    queue;
    ngx_uint_t                     n;
    ngx_atomic_t                   gen;
} ngx_http_tokenbiryani_rlist_t;

/* an account added at runtime: its slot and addresses besides */
typedef struct {
    ngx_http_tokenbiryani_rrec_t   rec;           /* id, spec, sealed */
    ngx_uint_t                     slot;
    uint64_t                       version;       /* of this content */
    ngx_uint_t                     naddrs;
    ngx_http_tokenbiryani_raddr_t  addrs[NGX_HTTP_TB_RACCT_ADDRS];
} ngx_http_tokenbiryani_racct_t;


/* the events ring: never freed, see shm/ngx_http_tokenbiryani_events.c */
typedef struct {
    ngx_uint_t                     size;
    uint64_t                       seq;           /* the last taken */
    uint64_t                       first;         /* this ring's first */
    ngx_http_tokenbiryani_event_t  ev[1];
} ngx_http_tokenbiryani_event_ring_t;


struct ngx_http_tokenbiryani_shm_s {
    uint32_t                       magic;
    uint64_t                       generation;    /* configurations loaded */
    int64_t                        created_ms;
    ngx_atomic_t                   rr_cursor;     /* round robin position */

    ngx_uint_t                     nslots;        /* account slots made */
    ngx_uint_t                     slots_size;
    tb_account_state_t           **slots;

    /* leases and waiters: one sequence numbers both */
    uint64_t                       seq;

    /* leases held, and the ones taken back from dead workers */
    ngx_queue_t                    leases;
    uint64_t                       nleases;
    uint64_t                       leases_reclaimed;

    /* session -> owner */
    ngx_rbtree_t                   aff_tree;
    ngx_rbtree_node_t              aff_sentinel;
    ngx_queue_t                    aff_lru;
    int64_t                        aff_epoch_ms;
    uint64_t                       aff_entries;
    uint64_t                       aff_evicted;

    /* the output estimators, one per model */
    ngx_uint_t                     nmodels;
    tb_est_t                      *models[NGX_HTTP_TB_ESTIMATORS];
    uint64_t                       models_clock;

    /* admission and settlement events */
    ngx_http_tokenbiryani_event_ring_t *events;

    /* the request inspector */
    ngx_http_tokenbiryani_record_t *ring;
    ngx_uint_t                     ring_size;
    uint64_t                       ring_seq;

    /* every request's usage under the record's number, until the usage
     * history has it (a store only): the inspector's ring may turn over
     * between two writes, this one is four times larger and holds far
     * less */
    ngx_http_tokenbiryani_usage_entry_t *usage;
    ngx_uint_t                     usage_size;

    /* decisions and what they did to affinity */
    uint64_t                       decisions;
    uint64_t                       affinity[4];   /* by tb_affinity_e */

    /*
     * The queue: interactive, then batch, FIFO in each.  Capacity that
     * comes back (a lease given back, a response's headers, an operator)
     * bumps the generation; a waiter that failed at this generation
     * cannot use what is there and does not hold the ones behind it.
     */
    ngx_queue_t                    waiting[2];
    ngx_uint_t                     nwaiting;
    uint64_t                       cap_gen;
    int64_t                        cap_gen_ms;
    uint64_t                       queued_total;
    uint64_t                       queue_served;
    uint64_t                       queue_timeouts;
    uint64_t                       queue_full;
    uint64_t                       queue_left;    /* clients gone */
    uint64_t                       queue_stale;   /* of dead workers */
    uint64_t                       queue_wait_ms; /* of every waiter gone */
    uint64_t                       queue_waits;

    /* keys' rpm windows, and what each key has in flight and waiting */
    ngx_queue_t                    rpm;
    ngx_queue_t                    keys;

    /* minted keys, and accounts added at runtime */
    ngx_http_tokenbiryani_rlist_t  rkeys;
    ngx_http_tokenbiryani_rlist_t  raccts;
    uint64_t                       raccts_version;

    /* settings changed at runtime: the strategy ("": the file's) */
    u_char                         strategy[32];
    ngx_atomic_t                   settings_gen;
    uint64_t                       strategy_rgen; /* its record's */

    /* the last records removed, by a hash of their kind and name, with
     * the generation they had: one read back again is a replay */
    struct {
        uint64_t                   hash;
        uint64_t                   gen;
    }                              graves[NGX_HTTP_TB_GRAVES];
    ngx_uint_t                     grave_next;

    /* the last keys revoked: who still uses one is seen, by its name */
    ngx_http_tokenbiryani_revoked_t
                                   revoked[NGX_HTTP_TB_REVOKED];
    ngx_uint_t                     revoked_next;

    /* records and messages refused as not this gateway's (counted) */
    uint64_t                       refused_records;
    uint64_t                       refused_messages;

    /* POST /admin/reload: tickets, and the reload helper's answers */
    ngx_http_tokenbiryani_reload_state_t reload;

    /* the durable store behind the zone */
    ngx_http_tokenbiryani_store_state_t  store;

    /* conversations, and the ledgers' sequence of charges */
    ngx_rbtree_t                   sess_tree;
    ngx_rbtree_node_t              sess_sentinel;

    /* objects the upstream keeps for an account: batches, files */
    ngx_rbtree_t                   obj_tree;
    ngx_rbtree_node_t              obj_sentinel;
    ngx_queue_t                    obj_queue;     /* newest first */
    ngx_uint_t                     nobjects;
    uint64_t                       objects_gen;
    uint64_t                       objects_dropped;
    ngx_pid_t                      objects_poller; /* the worker that polls
                                                     the open batches */

    /* pacing: the pool's spend in the budget week, as the history said */
    ngx_pid_t                      pacer;         /* the worker that reads */
    int64_t                        pace_week;     /* the week's start, ms */
    int64_t                        pace_spent;    /* nanodollars */
    int64_t                        pace_at;       /* read then; 0: never */
    ngx_queue_t                    sess_lru;
    ngx_uint_t                     nsessions;
    uint64_t                       sessions_evicted;
    uint64_t                       spend_seq;
    ngx_queue_t                    sess_dirty;    /* to tell the peers */

    /* answered requests that took more than one attempt */
    ngx_atomic_t                   failovers;

    /* a pool shared with other gateways: their share, how many they are */
    uint32_t                       withheld;      /* of TB_SHARE_ONE */
    ngx_uint_t                     peers;         /* with this one; 0:
                                                     never seen */
    int64_t                        granted_ms;    /* the last grant */
    unsigned                       shared;        /* others were seen */

    /* the console's sign-in tickets (ngx_http_tokenbiryani_tickets.c) */
    ngx_http_tokenbiryani_ticket_slot_t  tickets[NGX_HTTP_TB_TICKETS];
};


/* an object the upstream keeps (..._objects.c), in the zone */
typedef struct {
    ngx_rbtree_node_t              node;          /* key: its id hashed */
    ngx_queue_t                    queue;
    ngx_http_tokenbiryani_object_view_t  v;
} ngx_http_tokenbiryani_object_t;


/* a conversation changed: to be told to the peers */
static ngx_inline void
ngx_http_tokenbiryani_session_dirty(ngx_http_tokenbiryani_shm_t *sh,
    ngx_http_tokenbiryani_session_t *s)
{
    if (!s->is_dirty) {
        s->is_dirty = 1;
        ngx_queue_insert_tail(&sh->sess_dirty, &s->dirty);
    }
}


/* the pool's share and what asks for it, read under the lock */
static ngx_inline void
ngx_http_tokenbiryani_share_read(ngx_http_tokenbiryani_shm_t *sh,
    ngx_http_tokenbiryani_share_state_t *ss)
{
    ss->withheld = sh->withheld;
    ss->peers = sh->peers;
    ss->granted_ms = sh->granted_ms;
    ss->decisions = sh->decisions;
    ss->waiting = sh->nwaiting;
}


/*
 * The zone's memory (..._zone.c): when an allocation fails, the evictors
 * make room, in the order they were added (sessions, then conversations
 * no lease holds).  Under the lock.
 */
void *ngx_http_tokenbiryani_alloc_locked(ngx_http_tokenbiryani_zone_t *zone,
    size_t size);
void ngx_http_tokenbiryani_evictor_add(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_evict_pt evict);
/* the least recently used session, deleted (..._affinity.c) */
ngx_uint_t ngx_http_tokenbiryani_affinity_evict(
    ngx_http_tokenbiryani_zone_t *zone);

/*
 * Whether the worker that owns something in the zone is gone, asked of
 * the kernel once per pid per walk: kill(pid, 0) fails with ESRCH once
 * the master has reaped it.  A pid reused since is taken for alive, and
 * the lease's expiry stays the backstop.
 */
typedef struct {
    ngx_uint_t                     n;
    ngx_pid_t                      pid[8];
    u_char                         gone[8];
} ngx_http_tokenbiryani_owners_t;

ngx_uint_t ngx_http_tokenbiryani_owner_gone(
    ngx_http_tokenbiryani_owners_t *owners, ngx_pid_t pid);

/* whether worker pid does what *who names the worker of (0: none):
 * elected while the last is gone */
ngx_uint_t ngx_http_tokenbiryani_elect(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pid_t *who, ngx_pid_t pid);

/*
 * The index of the slot of account id (len bytes): a live one only (live),
 * with that credential and host fingerprint (not NULL); or -1.  Under the
 * lock.
 */
ngx_int_t ngx_http_tokenbiryani_zone_find_locked(
    ngx_http_tokenbiryani_shm_t *sh, const u_char *id, size_t len,
    const u_char *fingerprint, ngx_uint_t live);

/* the slot of an account id and fingerprint, made when new; NULL: no
 * memory.  Under the lock. */
tb_account_state_t *ngx_http_tokenbiryani_zone_slot_locked(
    ngx_http_tokenbiryani_shm_t *sh, ngx_slab_pool_t *shpool,
    ngx_http_tokenbiryani_zone_account_t *za, ngx_uint_t *index);

/* the slots of the accounts added at runtime marked live.  Under the lock. */
void ngx_http_tokenbiryani_raccts_live_locked(ngx_http_tokenbiryani_shm_t *sh);

/* every session placed on a slot forgotten; how many.  Under the lock. */
ngx_uint_t ngx_http_tokenbiryani_affinity_drop_locked(
    ngx_http_tokenbiryani_zone_t *zone, ngx_uint_t slot);

/* the node of a 64-bit key in an rbtree keyed by it, or NULL.  Under the
 * lock. */
ngx_rbtree_node_t *ngx_http_tokenbiryani_rbtree_find(ngx_rbtree_t *tree,
    uint64_t key);

/* a key's state, or NULL.  Under the lock. */
ngx_http_tokenbiryani_keystate_t *ngx_http_tokenbiryani_keystate_find(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t key);

/* a key's rpm window, or NULL.  Under the lock. */
ngx_http_tokenbiryani_rpm_t *ngx_http_tokenbiryani_rpm_find_locked(
    ngx_http_tokenbiryani_shm_t *sh, uint64_t key);

/* the least recently charged conversation no lease holds, freed; 0: none.
 * Under the lock. */
ngx_uint_t ngx_http_tokenbiryani_session_evict(
    ngx_http_tokenbiryani_zone_t *zone);

/*
 * A conversation, made when new (at the LRU's tail); NULL: session 0, or
 * no memory.  ks: the key whose request makes it (NULL: another
 * instance's, or the store's): a key holds at most a fair share of the
 * zone's conversations, NGX_HTTP_TB_SESSIONS over the number of keys, at
 * least 64 - past it, its own least recent idle one makes room, never
 * another key's.  Under the lock.
 */
ngx_http_tokenbiryani_session_t *ngx_http_tokenbiryani_session_locked(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t session, const u_char *key,
    size_t key_len, ngx_http_tokenbiryani_keystate_t *ks, int64_t now);

/*
 * A lease's caps: the account's cap re-checked, the key's and the
 * conversation's checked, and, if none is reached, cost reserved on all
 * three and a turn on the conversation (*sp, which the lease then holds).
 * NGX_HTTP_TB_CAP_*.  Under the lock.
 */
ngx_uint_t ngx_http_tokenbiryani_caps_reserve_locked(
    ngx_http_tokenbiryani_zone_t *zone, ngx_http_tokenbiryani_keystate_t *ks,
    ngx_http_tokenbiryani_caps_t *caps, tb_account_state_t *st,
    const tb_account_conf_t *conf, int64_t cost, int64_t now,
    ngx_http_tokenbiryani_session_t **sp);

/* what a lease reserved released, and what its attempt cost charged
 * (charge NULL: nothing answered).  Under the lock. */
void ngx_http_tokenbiryani_caps_settle_locked(
    ngx_http_tokenbiryani_zone_t *zone, ngx_http_tokenbiryani_keystate_t *ks,
    ngx_http_tokenbiryani_session_t *s, tb_account_state_t *st,
    ngx_int_t slot, int64_t reserved,
    const ngx_http_tokenbiryani_charge_t *charge);

/* a key's state, made when first asked for; NULL: key 0, or no memory */
ngx_http_tokenbiryani_keystate_t *ngx_http_tokenbiryani_keystate_locked(
    ngx_http_tokenbiryani_zone_t *zone, uint64_t key);

/* what the peers said a key (its state ks, or NULL) admitted in the last
 * minute.  Under the lock. */
ngx_uint_t ngx_http_tokenbiryani_keystate_peers_rpm(
    ngx_http_tokenbiryani_keystate_t *ks, int64_t now);


/*
 * The state whose windows an account's leases hold (its capacity
 * domain's, or its own), and that state's slot.  Under the lock.
 */
tb_account_state_t *ngx_http_tokenbiryani_cap_locked(
    ngx_http_tokenbiryani_shm_t *sh, tb_account_state_t *st,
    ngx_uint_t slot, ngx_uint_t *cap_slot);

/*
 * Account st belongs to organisation org (len bytes), as an answer or
 * another gateway (told: already told the peers) says: when that is
 * news, its capacity domain, and the one it left, formed again; 1 if
 * they were (not for an account the file puts in a domain).  Under the
 * lock.
 */
ngx_uint_t ngx_http_tokenbiryani_zone_learn_org_locked(
    ngx_http_tokenbiryani_shm_t *sh, tb_account_state_t *st,
    const u_char *org, size_t len, ngx_uint_t told);


/*
 * Runtime records' graves (shm/ngx_http_tokenbiryani_graves.c): a removed
 * one's generation remembered; whether one of generation gen may replace
 * what there is (of generation cur) and was.  Under the lock.
 */
void ngx_http_tokenbiryani_grave_put_locked(ngx_http_tokenbiryani_shm_t *sh,
    int kind, const u_char *name, size_t len, uint64_t gen);
uint64_t ngx_http_tokenbiryani_grave_gen_locked(
    ngx_http_tokenbiryani_shm_t *sh, int kind, const u_char *name,
    size_t len);
ngx_uint_t ngx_http_tokenbiryani_grave_stale_locked(
    ngx_http_tokenbiryani_shm_t *sh, int kind, const u_char *name,
    size_t len, uint64_t cur, uint64_t gen);
uint64_t ngx_http_tokenbiryani_spec_gen(const u_char *spec, size_t len);


/*
 * Runtime records of every kind (TB_REC_KEY, TB_REC_ACCOUNT;
 * shm/ngx_http_tokenbiryani_records.c).  Under the lock (_locked): the
 * record of a name, or NULL; the generation of a record's envelope (0:
 * none, or no record); whether a record of that name and spec would be a
 * replay (1), the one there is in *old; whether a record has that spec and
 * secret; a record made with its strings, linked in place of old (or
 * last), and removed, each change moving its list's generation.
 */
void ngx_http_tokenbiryani_rlist_init(ngx_http_tokenbiryani_rlist_t *list);
ngx_http_tokenbiryani_rrec_t *ngx_http_tokenbiryani_rrec_find_locked(
    ngx_http_tokenbiryani_shm_t *sh, int kind, const u_char *name,
    size_t len);
uint64_t ngx_http_tokenbiryani_rrec_gen(const ngx_http_tokenbiryani_rrec_t *r);
ngx_uint_t ngx_http_tokenbiryani_rrec_stale_locked(
    ngx_http_tokenbiryani_shm_t *sh, int kind, const u_char *name,
    size_t len, const u_char *spec, size_t spec_len,
    ngx_http_tokenbiryani_rrec_t **old);
ngx_uint_t ngx_http_tokenbiryani_rrec_same(
    const ngx_http_tokenbiryani_rrec_t *r, const u_char *spec,
    size_t spec_len, const u_char *secret, size_t secret_len);
ngx_http_tokenbiryani_rrec_t *ngx_http_tokenbiryani_rrec_alloc_locked(
    ngx_http_tokenbiryani_zone_t *zone, int kind, const u_char *name,
    size_t name_len, const u_char *spec, size_t spec_len,
    const u_char *secret, size_t secret_len);
void ngx_http_tokenbiryani_rrec_link_locked(ngx_http_tokenbiryani_zone_t *zone,
    int kind, ngx_http_tokenbiryani_rrec_t *old,
    ngx_http_tokenbiryani_rrec_t *r);
void ngx_http_tokenbiryani_rrec_remove_locked(
    ngx_http_tokenbiryani_zone_t *zone, int kind,
    ngx_http_tokenbiryani_rrec_t *r);

#endif /* _NGX_HTTP_TOKENBIRYANI_ZONE_H_INCLUDED_ */
