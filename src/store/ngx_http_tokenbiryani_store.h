/*
 * The durable store behind the zone (store.backend: sqlite or redis),
 * reached through its backend's ops table.
 *
 * The zone is the truth while nginx runs.  The master reads the store
 * into a new zone before any worker starts; a worker writes to it only
 * off its event loop (SQLite: nginx's thread pool, one task at a time per
 * worker; Redis: asynchronous commands): the event loop never waits.
 * An admin write answers once its row is committed; if the store cannot
 * be written, serving goes on from the zone, the error log says why once,
 * /admin/status shows the store degraded, and the next write that works
 * says it resumed.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_STORE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_STORE_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "tb_store.h"


#define NGX_HTTP_TB_JOB_KEY_INSERT     1
#define NGX_HTTP_TB_JOB_KEY_UPDATE     2
#define NGX_HTTP_TB_JOB_KEY_DELETE     3
#define NGX_HTTP_TB_JOB_FLUSH          4
#define NGX_HTTP_TB_JOB_SETTING        5      /* tb_meta: name = spec */
#define NGX_HTTP_TB_JOB_ACCOUNT_PUT    6      /* create: insert */
#define NGX_HTTP_TB_JOB_ACCOUNT_DELETE 7
#define NGX_HTTP_TB_JOB_USAGE          9      /* a read of the history */
#define NGX_HTTP_TB_JOB_OPEN           10     /* the connection, no more */
#define NGX_HTTP_TB_JOB_OBJECT_PUT     11     /* name: an object's id */
#define NGX_HTTP_TB_JOB_OBJECT_DELETE  12


/* one bucket of the usage history, of one group */
typedef struct {
    int64_t                            t;            /* s since the epoch */
    char                               group[TB_MODEL_MAX + 1];
    tb_usage_row_t                     u;
} ngx_http_tokenbiryani_usage_point_t;

#define NGX_HTTP_TB_FLUSH_MS           1000   /* history, at least this often */
#define NGX_HTTP_TB_FLUSH_TICK_MS      100    /* a tenth of a ring, this often */


typedef struct ngx_http_tokenbiryani_job_s  ngx_http_tokenbiryani_job_t;

/* a request that waited for the store goes on */
typedef void (*ngx_http_tokenbiryani_store_resume_pt)(ngx_http_request_t *r);

typedef void (*ngx_http_tokenbiryani_job_done_pt)(
    ngx_http_tokenbiryani_job_t *job);

/* a claim answered: won, this gateway charges the batch */
typedef void (*ngx_http_tokenbiryani_claim_pt)(void *data, ngx_uint_t won);

/* NGX_HTTP_TB_JOB_KEY_*, _SETTING, _ACCOUNT_*, _OBJECT_*: one runtime
 * record */
typedef struct {
    const char                        *name;
    const u_char                      *digest;     /* a key's */
    const char                        *spec;       /* NULL: a delete */
    const char                        *sealed;     /* an account's */
    ngx_uint_t                         create;     /* an account's insert */
} ngx_http_tokenbiryani_job_record_t;

/* a minute of one group's usage (account, model, key), summed */
typedef struct {
    int64_t                            t;           /* its start, s */
    const char                        *acct;
    const char                        *model;
    const char                        *key;
    tb_usage_row_t                     u;
} ngx_http_tokenbiryani_usage_sum_t;

/* NGX_HTTP_TB_JOB_FLUSH: the history after what the store has */
typedef struct {
    ngx_http_tokenbiryani_record_t    *records;    /* of the requests in
                                                      it: every one while
                                                      the ring keeps up,
                                                      a sample when not */
    ngx_uint_t                         nrecords;
    ngx_http_tokenbiryani_usage_entry_t  *usage;   /* every request's, in
                                                      order */
    ngx_uint_t                         nusage;
    uint64_t                           usage_lost;   /* gone before it */
    ngx_http_tokenbiryani_usage_sum_t  *sums;      /* the usage, by minute
                                                      and group */
    ngx_uint_t                         nsums;
    uint32_t                          *sum_hash;   /* twice as many places
                                                      as requests */
    ngx_uint_t                         sum_hsize;
    ngx_http_tokenbiryani_event_t     *events;
    ngx_uint_t                         nevents;
    u_char                           **slot_ids;   /* by slot */
    ngx_uint_t                         nslots;
    uint64_t                           keep_records;
    uint64_t                           keep_events;
    uint64_t                           records_seq;  /* the newest request
                                                        in it */
    uint64_t                           events_seq;
    uint64_t                           records_from; /* the store had, */
    uint64_t                           events_from;  /* as the zone knew */
    ngx_uint_t                         rewind;       /* it had less: the
                                                        zone's, again */
    ngx_http_tokenbiryani_ledger_view_t  *ledgers;   /* charged since */
    ngx_uint_t                         nledgers;
    ngx_http_tokenbiryani_session_view_t *sessions;
    ngx_uint_t                         nsessions;
    uint64_t                           spend_seq;    /* complete up to */
    int64_t                            now_ms;
    ngx_uint_t                         rollup;       /* usage rolled up */
} ngx_http_tokenbiryani_job_flush_t;

/* NGX_HTTP_TB_JOB_USAGE: from, step (s), by (TB_STORE_BY_*); the points
 * read, malloc'd (the done handler frees them) */
typedef struct {
    int64_t                            from;
    int64_t                            step;
    int                                by;
    ngx_http_tokenbiryani_usage_point_t  *points;
    ngx_uint_t                         npoints;
    ngx_uint_t                         points_size;
} ngx_http_tokenbiryani_job_usage_t;

/* a job for the store's backend: its operation, what that operation
 * carries (u, by op; NGX_HTTP_TB_JOB_OPEN carries nothing), its outcome */
struct ngx_http_tokenbiryani_job_s {
    ngx_http_tokenbiryani_job_t       *next;
    ngx_uint_t                         op;

    /* memory that lives until done is called */
    union {
        ngx_http_tokenbiryani_job_record_t  record;
        ngx_http_tokenbiryani_job_flush_t   flush;
        ngx_http_tokenbiryani_job_usage_t   usage;
    } u;

    /* what happened: TB_STORE_*, and why when TB_STORE_ERROR */
    int                                rc;
    char                               err[512];
    ngx_msec_t                         posted;

    ngx_http_tokenbiryani_job_done_pt  done;
    void                              *data;
};


/* a record written before records were authenticated, adopted at load
 * (store.adopt_unauthenticated): written back in its envelope */
typedef struct ngx_http_tokenbiryani_adopted_s
                                   ngx_http_tokenbiryani_adopted_t;

struct ngx_http_tokenbiryani_adopted_s {
    ngx_http_tokenbiryani_adopted_t    *next;
    int                                 kind;        /* TB_REC_* */
    char                               *name;
    u_char                              digest[32];  /* a key's */
    char                               *sealed;      /* an account's */
    char                               *value;       /* the envelope */
};

/* the master's load: what is read into a new zone, and how much */
typedef struct {
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_log_t                          *log;
    ngx_uint_t                          keys;
    ngx_uint_t                          accounts;
    ngx_uint_t                          skipped;
    ngx_http_tokenbiryani_adopted_t    *adopted;     /* ngx_alloc'd */
} ngx_http_tokenbiryani_store_load_t;

/* what was adopted, freed; written: how many were written back (said) */
void ngx_http_tokenbiryani_store_adopted_free(
    ngx_http_tokenbiryani_store_load_t *ld, ngx_uint_t written);

/* one stored key or account into the zone (data: ..._store_load_t): 0, or
 * -1 when the zone is full (said) */
int ngx_http_tokenbiryani_store_load_key(void *data, const char *name,
    const unsigned char *digest, const char *spec);
int ngx_http_tokenbiryani_store_load_account(void *data, const char *id,
    const char *spec, const char *sealed);
void ngx_http_tokenbiryani_store_load_strategy(
    ngx_http_tokenbiryani_store_load_t *ld, const char *value, size_t len);

/* a write's outcome (err: NULL when it worked): degraded or back, the log
 * told once per change of state */
void ngx_http_tokenbiryani_store_wrote(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const char *err, ngx_log_t *log);

/*
 * The history and the spend read back by the master, by either backend:
 * hload_begin with the layout the store says it wrote (NGX_DECLINED:
 * another build's, said), then the slots, records and events through the
 * callbacks, then hload_end; the ledgers and conversations through the
 * sload callbacks, then sload_end.
 */
typedef struct {
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_int_t                          *map;      /* old slot -> new */
    ngx_uint_t                          nmap;
    ngx_uint_t                          records;
    ngx_uint_t                          events;
} ngx_http_tokenbiryani_hload_t;

typedef struct {
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_uint_t                          ledgers;
    ngx_uint_t                          sessions;
    ngx_uint_t                          skipped;  /* another build's */
} ngx_http_tokenbiryani_sload_t;

void ngx_http_tokenbiryani_history_layout(u_char *buf, size_t size);
ngx_int_t ngx_http_tokenbiryani_store_hload_begin(
    ngx_http_tokenbiryani_hload_t *hl, ngx_http_tokenbiryani_main_conf_t *tmcf,
    const char *stored, ngx_log_t *log);
int ngx_http_tokenbiryani_store_hload_slot(void *data, uint64_t slot,
    const char *id);
int ngx_http_tokenbiryani_store_hload_record(void *data, uint64_t seq,
    const void *blob, size_t len);
int ngx_http_tokenbiryani_store_hload_event(void *data, uint64_t seq,
    const void *blob, size_t len);
void ngx_http_tokenbiryani_store_hload_end(ngx_http_tokenbiryani_hload_t *hl,
    ngx_log_t *log);
int ngx_http_tokenbiryani_store_sload_ledger(void *data, int scope,
    const char *id, const void *blob, size_t len);
int ngx_http_tokenbiryani_store_sload_session(void *data, uint64_t seq,
    const void *blob, size_t len);
void ngx_http_tokenbiryani_store_sload_end(ngx_http_tokenbiryani_sload_t *sl,
    ngx_log_t *log);

/* what the store does not have yet, from the zone (given back with
 * ngx_http_tokenbiryani_flush_release once written); NULL: nothing new */
ngx_http_tokenbiryani_job_t *ngx_http_tokenbiryani_flush_collect(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t tick);
void ngx_http_tokenbiryani_flush_release(ngx_http_tokenbiryani_job_t *job);

/* a flush's usage summed again, after some of it was left out */
void ngx_http_tokenbiryani_flush_sum(ngx_http_tokenbiryani_job_t *job);


/* the zone's init: the shm init, then (a new zone) the store read into it */
ngx_int_t ngx_http_tokenbiryani_store_zone_init(ngx_shm_zone_t *shm_zone,
    void *data);

ngx_int_t ngx_http_tokenbiryani_store_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* a worker that exits: the history it is the writer of, flushed now, in
 * one path whichever the backend */
void ngx_http_tokenbiryani_store_exit_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* what a backend shared by gateways asks and tells the others */
typedef struct {
    /* a conversation's owner as the peers know it, and a new owner told
     * to them */
    ngx_int_t (*owner_get)(ngx_http_request_t *r,
        ngx_http_tokenbiryani_ctx_t *ctx,
        ngx_http_tokenbiryani_store_resume_pt resume);
    void (*owner_put)(ngx_http_tokenbiryani_main_conf_t *tmcf,
        uint64_t session, const ngx_str_t *account, int64_t cached,
        ngx_uint_t share);
    /* an object the zone does not know, as the peers wrote it */
    ngx_int_t (*object_get)(ngx_http_request_t *r, const u_char *id,
        size_t len, ngx_http_tokenbiryani_store_resume_pt resume);
    /* which gateway charges a batch's results, shared with the peers: for
     * the gateway's own read (NGX_OK: done is called; NGX_DECLINED: won
     * now) and for a client's (NGX_AGAIN: resume is called,
     * ctx->claim_lost set when lost; NGX_OK: won) */
    ngx_int_t (*object_claim)(ngx_http_tokenbiryani_main_conf_t *tmcf,
        const u_char *id, size_t len, ngx_http_tokenbiryani_claim_pt done,
        void *data);
    ngx_int_t (*object_claim_r)(ngx_http_request_t *r, const u_char *id,
        size_t len, ngx_http_tokenbiryani_store_resume_pt resume);
} ngx_http_tokenbiryani_store_peers_t;

/*
 * A backend of the store: what the store does, done its way.  Each is in
 * its own file (ngx_http_tokenbiryani_sqlite.c, redis/), sets
 * tmcf->store_ops when its configuration is read, and is reached only
 * through this table.
 */
struct ngx_http_tokenbiryani_store_ops_s {
    /* the master, at each configuration; fresh: a new zone, to be read
     * from the store (otherwise the zone lived on and is the truth) */
    ngx_int_t (*load)(ngx_shm_zone_t *shm_zone,
        ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t fresh);
    ngx_int_t (*init_worker)(ngx_cycle_t *cycle,
        ngx_http_tokenbiryani_main_conf_t *tmcf);
    /* after the last flush: the election let go, connections closed */
    void (*exit_worker)(ngx_cycle_t *cycle,
        ngx_http_tokenbiryani_main_conf_t *tmcf);
    /* a job queued (rc, err and posted already set); done later */
    ngx_int_t (*post)(ngx_http_tokenbiryani_main_conf_t *tmcf,
        ngx_http_tokenbiryani_job_t *job);
    /* the exiting worker's last flush, written before it returns:
     * TB_STORE_OK, or TB_STORE_ERROR with job->err */
    int (*flush_now)(ngx_http_tokenbiryani_main_conf_t *tmcf,
        ngx_http_tokenbiryani_job_t *job);
    /* what the gateways sharing the store tell each other (NULL: a store
     * no other gateway shares, whose zone knows all) */
    const ngx_http_tokenbiryani_store_peers_t  *peers;
};

/*
 * A runtime record (TB_REC_KEY, _ACCOUNT, _SETTING) as it is written to
 * the store and kept in the zone: its payload in the envelope that
 * authenticates it (tb_record.h), of the next generation after the one
 * the zone knows; the payload as it is when no store keeps records.
 * NGX_ERROR: no memory.
 */
ngx_int_t ngx_http_tokenbiryani_record_wrap(ngx_pool_t *pool,
    ngx_http_tokenbiryani_main_conf_t *tmcf, int kind, const u_char *name,
    size_t nlen, const void *bound, size_t blen, const u_char *payload,
    size_t plen, ngx_str_t *out);

/*
 * A record read back from the store (text, len bytes) checked: NGX_OK, or
 * NGX_DECLINED when it is not this gateway's (said once in the log,
 * naming what, counted).  A record written before records were
 * authenticated passes only at the master's load with
 * store.adopt_unauthenticated (*legacy set then: it is written back).
 */
ngx_int_t ngx_http_tokenbiryani_record_check(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log, int kind,
    const char *what, const u_char *name, size_t nlen, const void *bound,
    size_t blen, const u_char *text, size_t len, ngx_uint_t *legacy);

/*
 * Before routing: ctx->route.session's owner from the peers into the zone
 * when the zone has none.  NGX_OK: go on now; NGX_AGAIN: resume(r) is
 * called from the event loop once it is answered (or has failed).
 */
ngx_int_t ngx_http_tokenbiryani_store_owner_get(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_http_tokenbiryani_store_resume_pt resume);

/* at the commit: the owner ngx_http_tokenbiryani_affinity_set() said the
 * peers must be told (share) */
void ngx_http_tokenbiryani_store_owner_put(
    ngx_http_tokenbiryani_main_conf_t *tmcf, uint64_t session,
    const ngx_str_t *account, int64_t cached, ngx_uint_t share);

/*
 * An object the upstream keeps (a batch, a file) as the zone has it now,
 * written to the store in its record (TB_REC_OBJECT), or its removal
 * (gone): a write nobody waits for, its failure said as the store's are.
 * No store, or no secret key: nothing.
 */
void ngx_http_tokenbiryani_store_object(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t kind,
    const u_char *id, size_t len, ngx_uint_t gone);

/*
 * An object's record read back from the store (its id, its text) checked
 * as strictly as what a tenant sends, and put into the zone; refused with
 * one line in the log (counted) when it is not this gateway's or cannot be
 * read.  load: the master's read (its hold taken again; an account since
 * removed kept by its id); else another gateway's news of it.
 */
ngx_int_t ngx_http_tokenbiryani_store_object_in(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log,
    const u_char *id, size_t len, const u_char *text, size_t tlen,
    ngx_uint_t load);

/*
 * An object the zone does not know (id), from the store another gateway
 * wrote it to, into the zone.  NGX_OK: go on now with what the zone has;
 * NGX_AGAIN: resume(r) is called from the event loop once it is answered
 * (or has failed).
 */
ngx_int_t ngx_http_tokenbiryani_store_object_get(ngx_http_request_t *r,
    const u_char *id, size_t len,
    ngx_http_tokenbiryani_store_resume_pt resume);

/*
 * Whether this gateway charges a batch's results, when gateways share the
 * store: one claims it (for ten minutes, again and again by the same
 * one), the others read and do not charge.  For the gateway's own read:
 * NGX_OK, done called later; NGX_DECLINED: won now.  For a client's
 * request: NGX_AGAIN, resume called later (ctx->claim_lost set when
 * another gateway charges it); NGX_OK: won now.
 */
ngx_int_t ngx_http_tokenbiryani_store_object_claim(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len,
    ngx_http_tokenbiryani_claim_pt done, void *data);
ngx_int_t ngx_http_tokenbiryani_store_object_claim_r(ngx_http_request_t *r,
    const u_char *id, size_t len,
    ngx_http_tokenbiryani_store_resume_pt resume);

/* an object another gateway removed, removed here (what it held here
 * charged) */
void ngx_http_tokenbiryani_store_object_gone(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len);

/* the most objects the zone keeps */
#define NGX_HTTP_TB_OBJECTS_MAX        65536

/*
 * Queues a write; job->done is called from the event loop once it is
 * committed or failed, never from within this call.  NGX_ERROR: no store.
 */
ngx_int_t ngx_http_tokenbiryani_store_post(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_job_t *job);


#endif /* _NGX_HTTP_TOKENBIRYANI_STORE_H_INCLUDED_ */
