/*
 * The shared zone: every worker's view of the pool.  This is the only code
 * that takes the zone lock (the slab pool's own mutex, the one lock the
 * master recovers when a worker dies holding it).
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "tb_router.h"
#include "tb_estimator.h"


#define NGX_HTTP_TB_SHM_MAGIC          0x74627a33      /* "tbz3" */

#define NGX_HTTP_TB_ESTIMATORS         64      /* estimators kept */
#define NGX_HTTP_TB_INSPECT_CANDS      32      /* candidates per record */
#define NGX_HTTP_TB_INSPECT_ATTEMPTS   8


/* one held reservation */
struct ngx_http_tokenbiryani_lease_s {
    ngx_queue_t                    queue;
    uint64_t                       id;
    ngx_uint_t                     slot;          /* index in slots */
    tb_need_t                      need;
    int64_t                        expires_ms;
    ngx_pid_t                      pid;
    ngx_uint_t                     probed;        /* holds the breaker's */
};


/* a request waiting for capacity, in the queue every worker sees */
struct ngx_http_tokenbiryani_waiter_s {
    ngx_queue_t                    queue;         /* in sh->waiting[cls] */
    uint64_t                       id;            /* 0: gone */
    ngx_pid_t                      pid;           /* the worker holding it */
    ngx_uint_t                     cls;           /* 0 interactive, 1 batch */
    uint64_t                       blocked_gen;   /* tried and failed at */
    int64_t                        retry_at;      /* ... until then, 0 */
    int64_t                        enqueued_ms;
    int64_t                        renewed_ms;    /* by its worker's tick */
    u_char                         request_id[NGX_HTTP_TB_REQUEST_ID_LEN];
};


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
    uint32_t                       slot;
    uint32_t                       expires;       /* s since the epoch */
} ngx_http_tokenbiryani_affinity_t;


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
    uint32_t                       latency_ms;
} ngx_http_tokenbiryani_inspect_attempt_t;




typedef struct {
    uint64_t                       seq;           /* 0: empty */
    u_char                         id[NGX_HTTP_TB_REQUEST_ID_LEN];
    char                           key[TB_ID_MAX + 1];
    char                           model[TB_MODEL_MAX + 1];
    char                           strategy[32];
    uint64_t                       session;
    int64_t                        started_ms;
    int64_t                        decided_ms;    /* the last decision */
    int64_t                        latency_ms;
    int64_t                        ttft_ms;       /* -1: not a stream */
    int64_t                        queued_ms;
    int64_t                        soonest;
    tb_usage_t                     usage;
    tb_need_t                      need;
    int16_t                        status;
    uint8_t                        kind;          /* NGX_HTTP_TB_MESSAGES */
    uint8_t                        streamed;
    uint8_t                        priority;
    uint8_t                        session_source;
    uint8_t                        affinity;
    uint8_t                        nattempts;
    uint8_t                        ncands;
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


struct ngx_http_tokenbiryani_shm_s {
    uint32_t                       magic;
    uint64_t                       generation;    /* configurations loaded */
    int64_t                        created_ms;
    ngx_atomic_t                   rr_cursor;     /* round robin position */

    ngx_uint_t                     nslots;        /* account slots made */
    ngx_uint_t                     slots_size;
    tb_account_state_t           **slots;

    /* leases held, and the ones taken back from dead workers */
    ngx_queue_t                    leases;
    uint64_t                       lease_seq;
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

    /* the request inspector */
    ngx_http_tokenbiryani_record_t *ring;
    ngx_uint_t                     ring_size;
    uint64_t                       ring_seq;

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
    uint64_t                       waiter_seq;
    uint64_t                       cap_gen;
    int64_t                        cap_gen_ms;
    uint64_t                       queued_total;
    uint64_t                       queue_served;
    uint64_t                       queue_timeouts;
    uint64_t                       queue_full;
    uint64_t                       queue_left;    /* clients gone */
    uint64_t                       queue_stale;   /* of dead workers */

    /* keys' rpm windows */
    ngx_queue_t                    rpm;
};


ngx_int_t ngx_http_tokenbiryani_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);

ngx_uint_t ngx_http_tokenbiryani_shm_observe(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, const tb_rl_obs_t *obs,
    ngx_int_t status, int64_t now_ms);

ngx_uint_t ngx_http_tokenbiryani_shm_rr_next(
    ngx_http_tokenbiryani_main_conf_t *tmcf);

void ngx_http_tokenbiryani_shm_attempt_start(
    ngx_http_tokenbiryani_account_t *a, ngx_uint_t leased, int64_t now_ms);
ngx_uint_t ngx_http_tokenbiryani_shm_attempt_end(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, ngx_uint_t leased,
    const tb_outcome_t *o, uint64_t model_hash, const char *model,
    size_t model_len, ngx_uint_t probed, int64_t now);

/* an operator's enable (clears every state) or disable */
void ngx_http_tokenbiryani_shm_set_enabled(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, ngx_uint_t enable, int64_t now);

/* a consistent copy of a slot, for reports */
void ngx_http_tokenbiryani_shm_snapshot(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, tb_account_state_t *copy);


/* leases (shm/ngx_http_tokenbiryani_lease.c) */
ngx_http_tokenbiryani_lease_t *ngx_http_tokenbiryani_lease_take(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, const tb_need_t *need,
    int64_t now, uint64_t *id, ngx_uint_t *probed);
void ngx_http_tokenbiryani_lease_give_back(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_lease_t *lease, uint64_t id,
    const tb_usage_t *usage, int64_t headers_ms, ngx_uint_t stale,
    ngx_uint_t probe_back);
void ngx_http_tokenbiryani_lease_renew(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_queue_t *held,
    int64_t now);
ngx_uint_t ngx_http_tokenbiryani_lease_reclaim(
    ngx_http_tokenbiryani_main_conf_t *tmcf, int64_t now);
ngx_uint_t ngx_http_tokenbiryani_lease_count(
    ngx_http_tokenbiryani_main_conf_t *tmcf);


/* the queue (shm/ngx_http_tokenbiryani_queue.c) */
#define NGX_HTTP_TB_QUEUE_OK           0
#define NGX_HTTP_TB_QUEUE_FULL         1
#define NGX_HTTP_TB_QUEUE_NOMEM        2

ngx_uint_t ngx_http_tokenbiryani_queue_add(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_ctx_t *ctx,
    int64_t now, ngx_uint_t *depth);
void ngx_http_tokenbiryani_queue_remove(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t served, int64_t now);
ngx_uint_t ngx_http_tokenbiryani_queue_clear_ahead(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t cls, int64_t now);
void ngx_http_tokenbiryani_queue_blocked(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx, uint64_t gen, int64_t retry_at);
ngx_uint_t ngx_http_tokenbiryani_queue_scan(
    ngx_http_tokenbiryani_main_conf_t *tmcf, int64_t now, uint64_t *ids,
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
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_queue_view_t *view,
    ngx_http_tokenbiryani_waiter_view_t *waiters, ngx_uint_t max);
void ngx_http_tokenbiryani_capacity_changed(
    ngx_http_tokenbiryani_main_conf_t *tmcf, int64_t now);
uint64_t ngx_http_tokenbiryani_capacity_gen(
    ngx_http_tokenbiryani_main_conf_t *tmcf);
ngx_int_t ngx_http_tokenbiryani_rpm_take(
    ngx_http_tokenbiryani_main_conf_t *tmcf, uint64_t key, ngx_uint_t rpm,
    int64_t now, int64_t *retry_ms);
void ngx_http_tokenbiryani_rpm_give_back(
    ngx_http_tokenbiryani_main_conf_t *tmcf, uint64_t key, ngx_int_t slot,
    int64_t taken);


/* affinity (shm/ngx_http_tokenbiryani_affinity.c) */
void *ngx_http_tokenbiryani_alloc_locked(
    ngx_http_tokenbiryani_main_conf_t *tmcf, size_t size);
ngx_int_t ngx_http_tokenbiryani_affinity_get(
    ngx_http_tokenbiryani_main_conf_t *tmcf, uint64_t session, int64_t now);
void ngx_http_tokenbiryani_affinity_set(
    ngx_http_tokenbiryani_main_conf_t *tmcf, uint64_t session,
    ngx_uint_t slot, int64_t now);


/* estimators (shm/ngx_http_tokenbiryani_estimator.c) */
int64_t ngx_http_tokenbiryani_estimate_output(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *model, size_t len,
    int64_t max_tokens);
void ngx_http_tokenbiryani_estimator_observe(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *model, size_t len,
    int64_t leased, int64_t actual);
ngx_uint_t ngx_http_tokenbiryani_estimator_snapshot(
    ngx_http_tokenbiryani_main_conf_t *tmcf, tb_est_t **copies,
    ngx_uint_t max, ngx_pool_t *pool);


/* the inspector (shm/ngx_http_tokenbiryani_inspect.c) */
void ngx_http_tokenbiryani_inspect_add(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_record_t *rec);
ngx_uint_t ngx_http_tokenbiryani_inspect_list(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_record_t *out, ngx_uint_t max);
ngx_int_t ngx_http_tokenbiryani_inspect_find(
    ngx_http_tokenbiryani_main_conf_t *tmcf, u_char *id,
    ngx_http_tokenbiryani_record_t *out);


#endif /* _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_ */
