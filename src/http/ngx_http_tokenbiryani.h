/*
 * tokenbiryani for NGINX: the types every stage of a request shares.
 *
 * One request goes through the files of src/http in this order, each
 * with its own header saying what it exports (docs/architecture.md):
 *
 *   handler   the content handler: path, method, auth, the body read and
 *             scanned, the request context
 *   route     the need, a decision over every account, its lease, settle
 *   admit     the key's limits, then for each attempt: go, wait or fail,
 *             and the refusals' texts
 *   attempt   the attempt loop: backoff, the queue, pause and resume, a
 *             client that goes away, the end of the request
 *   upstream  the ngx_http_upstream_t callbacks: the request each attempt
 *             sends, the response's headers, the prelude hold, the commit,
 *             the body as it streams
 *   outcome   what a response, a transport failure or a broken stream was
 *   balancer  peer.get and peer.free: where attempts begin and end
 *   keepalive idle upstream connections, per account and worker
 *   filter    what every response of the gateway carries
 *   error     Anthropic-shaped errors
 *   events    the admission and settlement lines
 *   record    the request's record in the inspector
 *
 * What they read of a worker's state (the YAML file's accounts, keys and
 * strategy; minted keys, accounts added at runtime, settings, platform
 * tokens) is in src/state; the durable store in src/store.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif

#include "tb_config.h"
#include "tb_json.h"
#include "tb_body.h"
#include "tb_sse.h"
#include "tb_keys.h"
#include "tb_ratelimit.h"
#include "tb_unified.h"
#include "tb_account.h"
#include "tb_router.h"
#include "tb_session.h"
#include "tb_failure.h"
#include "tb_seal.h"
#include "tb_record.h"
#include "tb_price.h"

#include "ngx_http_tokenbiryani_shm.h"


#define NGX_HTTP_TOKENBIRYANI_VERSION  "0.1.0"

/* where the secret key came from */
#define NGX_HTTP_TB_SEAL_NONE          0
#define NGX_HTTP_TB_SEAL_ENV           1
#define NGX_HTTP_TB_SEAL_FILE          2

/* what a location does */
#define NGX_HTTP_TB_PASS               1
#define NGX_HTTP_TB_ADMIN              2
#define NGX_HTTP_TB_HEALTHZ            3
#define NGX_HTTP_TB_CONSOLE            4

/* what a /v1 request is */
#define NGX_HTTP_TB_MESSAGES           1
#define NGX_HTTP_TB_COUNT_TOKENS       2
#define NGX_HTTP_TB_MODELS             3
#define NGX_HTTP_TB_BATCHES            4      /* batches and files:
                                                 ..._batches.c */

/* ctx->marks[], per account */
#define NGX_HTTP_TB_MARK_TRIED         0x01  /* left out of the decisions */
#define NGX_HTTP_TB_MARK_EXCLUDED      0x02  /* given up on (max_accounts) */
#define NGX_HTTP_TB_MARK_AGAIN         0x04  /* tried, and may take it again
                                                when no other account can */


typedef struct {
    ngx_queue_t                    queue;
    ngx_connection_t              *connection;
    void                          *account;
    socklen_t                      socklen;
    ngx_sockaddr_t                 sockaddr;   /* the peer it talks to */
} ngx_http_tokenbiryani_keepalive_t;


typedef struct {
    ngx_uint_t                     index;          /* in the pool */
    ngx_str_t                      id;
    tb_account_conf_t             *conf;

    ngx_addr_t                    *addrs;          /* per worker: DNS */
    ngx_uint_t                     naddrs;
    ngx_uint_t                     next_addr;      /* per worker */
    in_port_t                      port;
    ngx_str_t                      host_header;    /* host[:port] */
    ngx_str_t                      ssl_name;       /* SNI, verification */
    ngx_str_t                      path_prefix;
    ngx_str_t                      auth_header;    /* "x-api-key: ...\r\n"
                                                      plus extra headers */
    ngx_str_t                      base_url;       /* for display */

    /* Bedrock and Vertex (ngx_http_tokenbiryani_platform.c): what signs
     * (an access key and its secret, for the fingerprint), and the path
     * before a model's id */
    ngx_str_t                      signer;
    ngx_str_t                      model_path;

    /* Vertex and the operator's subscription, per worker: "Authorization:
     * Bearer ...\r\n", valid until token_until (ms), fetched or read again
     * at token_next; its refresher (_gauth.c's or _oauth.c's: non-NULL,
     * the account waits while it has no valid token) */
    ngx_str_t                      bearer;
    int64_t                        token_until;
    int64_t                        token_next;
    void                          *gauth;
    unsigned                       platform:2;     /* tb_account_type_e
                                                      of a platform; 0 */
    unsigned                       tls:1;
    unsigned                       supported:1;    /* type is proxied */
    unsigned                       by_name:1;      /* host is a DNS name */
    unsigned                       runtime:1;      /* added at runtime */
    unsigned                       retired:1;      /* removed since */

    /* an account added at runtime: the content it has, where it lives */
    uint64_t                       version;
    uint64_t                       retired_epoch;
    ngx_pool_t                    *vpool;

    uint64_t                       id_hash;

    /* its slot in the zone: read there without the lock, never written */
    const tb_account_state_t      *sh;
    ngx_uint_t                     slot;

    /* per worker (copied at fork): idle upstream connections, TLS session */
    ngx_queue_t                    cache;
    ngx_queue_t                    free;
#if (NGX_HTTP_SSL)
    ngx_ssl_session_t             *ssl_session;
#endif
} ngx_http_tokenbiryani_account_t;


/* a store backend's operations (src/store/ngx_http_tokenbiryani_store.h) */
typedef struct ngx_http_tokenbiryani_store_ops_s
    ngx_http_tokenbiryani_store_ops_t;


typedef struct {
    ngx_http_tokenbiryani_zone_t   zone;
    ngx_uint_t                     has_zone;  /* tokenbiryani_zone seen */

    ngx_str_t                      config_file;
    tb_config_t                   *tbcf;
    tb_keytab_t                    keytab;

    /* store.backend: sqlite - the file, the pool its writes run in */
    ngx_uint_t                     store_backend; /* NGX_HTTP_TB_STORE_* */
    ngx_str_t                      store_path;   /* NUL-terminated */
    ngx_str_t                      store_shown;  /* the path, or the URL
                                                    without its password */
    void                          *thread_pool;  /* ngx_thread_pool_t */

    /* store.backend: redis - where, and this instance's name in it */
    const ngx_http_tokenbiryani_store_ops_t  *store_ops;  /* NULL: none */
    void                          *redis;  /* ..._redis_conf_t */
    ngx_str_t                      store_ns;
    ngx_str_t                      store_instance;
    ngx_cycle_t                   *cycle;        /* being configured */
    int                            reload_fd;    /* to the reload helper */

    /* the key credentials are sealed under at rest */
    tb_seal_key_t                  seal;
    tb_rec_key_t                   rec;          /* what authenticates the
                                                    store's records and the
                                                    instances' messages */
    ngx_uint_t                     seal_source;  /* NGX_HTTP_TB_SEAL_* */
    ngx_str_t                      seal_path;
    u_char                       **pools;     /* per key: its accounts,
                                                 1 per pool index */

    ngx_array_t                    accounts;  /* of ..._account_t, room
                                                 for max_accounts: never
                                                 moves */
    ngx_uint_t                     nyaml;     /* the file's, first */
    ngx_uint_t                     max_accounts;

    ngx_uint_t                     keepalive;
    ngx_msec_t                     keepalive_timeout;
    ngx_uint_t                     keepalive_requests;

    ngx_msec_t                     lease_timeout;
    ngx_msec_t                     resolver_ttl_min;
    ngx_msec_t                     resolver_ttl_max;

    ngx_str_t                      trusted_certificate;
#if (NGX_HTTP_SSL)
    ngx_ssl_t                     *ssl;
#endif

    ngx_http_upstream_srv_conf_t  *upstream;
    ngx_array_t                    servers;   /* ngx_http_core_srv_conf_t * */

    /* pricing: the file's entries, over the builtin table when asked */
    tb_price_table_t               prices;
    const tb_price_table_t        *builtin;   /* NULL: not asked for */

    const tb_strategy_t           *strategy;
    const tb_strategy_t           *rotate;    /* count_tokens, models */
    ngx_array_t                    plugins;   /* tb_strategy_t * */
    double                         weights[TB_TERMS];

    ngx_uint_t                     used;      /* any location uses us */
} ngx_http_tokenbiryani_main_conf_t;


#define NGX_HTTP_TB_STORE_NONE         0      /* store.backend: memory */
#define NGX_HTTP_TB_STORE_SQLITE       1
#define NGX_HTTP_TB_STORE_REDIS        2

/* whether writes go to a store (else the zone is all there is) */
#define ngx_http_tokenbiryani_store_on(tmcf)                                  \
    ((tmcf)->store_backend != NGX_HTTP_TB_STORE_NONE)


typedef struct {
    ngx_uint_t                     type;      /* NGX_HTTP_TB_PASS, ... */
    ngx_http_upstream_conf_t       upstream;
} ngx_http_tokenbiryani_loc_conf_t;


/* what one attempt did, for the inspector: packed (32 bytes), it is
 * eight of them in every request's context */
typedef struct {
    int64_t                        start_ms;
    int32_t                        latency_ms;
    uint32_t                       account;   /* index in the pool */
    uint32_t                       eligible;  /* its decision's */
    float                          score;     /* the chosen one's */
    int16_t                        status;    /* 0: no response */
    uint8_t                        kind;      /* tb_kind_e; TB_NKINDS:
                                                 not classified */
} ngx_http_tokenbiryani_attempt_log_t;


/* one attempt's response, as it is parsed: zeroed when the attempt starts */
typedef struct {
    ngx_http_status_t              status;
    u_char                        *body_start;
    u_char                        *peek_pos;      /* peeked up to here */
    ngx_http_chunked_t             peek_chunked;
    ngx_http_chunked_t             chunked;
    off_t                          sse_fed;       /* decoded bytes peeked */
    off_t                          sse_skip;      /* not to be fed again */
    u_char                        *errbody;       /* an error's body */
    size_t                         errbody_len;
    int64_t                        headers_ms;
    tb_rl_obs_t                    obs;
    size_t                         held;          /* bytes in ctx->hold */

    /* a platform's (the rest in ngx_http_tokenbiryani_platform_ctx_t):
     * the error said in Anthropic's words in place of its body, an
     * event-stream */
    unsigned                       is_sse:1;
    unsigned                       evs:1;         /* Bedrock's, as SSE */
    unsigned                       evs_first:1;   /* the held SSE next */
    unsigned                       evs_broken:1;  /* after the commit */
    unsigned                       raw_set:1;
    unsigned                       replaced:1;
    unsigned                       peek_eof:1;
    unsigned                       done:1;        /* the body is complete */
    unsigned                       whole:1;       /* ... and all in hold */
    unsigned                       overlong:1;    /* more than its framing */
    unsigned                       error_after_commit:1;
    unsigned                       classified:1;  /* ctx->outcome is its */
    unsigned                       unified:1;     /* a subscription's: its
                                                     headers read into
                                                     ctx->rare->unified */
} ngx_http_tokenbiryani_response_t;


/* routing: what the request needs, the decisions made */
typedef struct {
    ngx_str_t                      body;      /* the body, one buffer */
    uint64_t                       session;
    uint64_t                       model_hash;
    tb_session_source_e            session_source;
    tb_affinity_e                  affinity;  /* what it did to the cache */
    int                            owner_index;  /* the owner in the pool,
                                                    -1 */
    ngx_int_t                      owner;     /* ... its zone slot, -1 */
    tb_need_t                      need;
    tb_cand_t                     *cands;     /* one per account */
    tb_cand_out_t                 *outs;
    tb_decision_t                  decision;  /* the last one made */
    int64_t                        decided_ms;
    ngx_uint_t                     decisions;
    ngx_http_tokenbiryani_account_t  *next;   /* routed, leased, unsent */
    ngx_http_tokenbiryani_ticket_t lease;     /* the current attempt's */
} ngx_http_tokenbiryani_routing_t;


/* what few requests have, allocated when one does (ctx->rare) */
typedef struct {
    u_char                        *model_requested;  /* NUL; NULL: the
                                                        client's model, the
                                                        one sent (_edit.c) */
    tb_unified_t                   unified;   /* a subscription's answer:
                                                 this attempt's (resp.unified)
                                                 */
} ngx_http_tokenbiryani_rare_t;


/* waiting: a backoff, the queue */
typedef struct {
    ngx_event_t                    event;
    ngx_uint_t                     action;        /* NGX_HTTP_TB_WAIT_* */
    ngx_queue_t                    link;          /* the worker's waiters */
    ngx_http_tokenbiryani_ticket_t ticket;        /* its place in the zone */
    ngx_uint_t                     priority;      /* 0 interactive, 1 batch */
    ngx_uint_t                     queued;        /* times it waited */
    int64_t                        deadline_ms;
    int64_t                        budget_ms;
    int64_t                        waited_ms;     /* in the queue, in all */
    int64_t                        paced_ms;      /* held back by pacing */
    int64_t                        start_ms;
    int64_t                        until_ms;      /* the budget's end */
    int64_t                        woken_ms;      /* capacity to grant */
    int64_t                        retry_at;      /* its soonest, waiting */
    ngx_int_t                      retry_after;   /* ours, seconds; 0 */
} ngx_http_tokenbiryani_wait_t;


/* the gateway's own error, sent by the filter in place of nginx's */
typedef struct {
    ngx_int_t                      status;
    const char                    *type;
    ngx_str_t                      message;
    ngx_str_t                      json;          /* rendered once */

    /* refused for its key: why (NGX_HTTP_TB_REFUSED_*), and the name of
     * a key that is no longer one (revoked, expired), else NULL */
    ngx_uint_t                     refused;
    const char                    *refused_key;
} ngx_http_tokenbiryani_error_t;


/*
 * A request's context, in groups the way ngx_http_upstream_t keeps its
 * own: routing, the attempts, this attempt's response, the response the
 * client gets, waiting, money, the gateway's own error; a platform's
 * state hangs off plat.  Allocated zeroed for every request: kept under
 * 2 KiB (see ngx_http_tokenbiryani_create_ctx()).
 */

typedef struct {
    ngx_http_request_t            *request;

    u_char                         request_id[NGX_HTTP_TB_REQUEST_ID_LEN];
    int32_t                        prices_as_of;  /* tb_price_date, -1 */
    ngx_uint_t                     kind;      /* NGX_HTTP_TB_MESSAGES, ... */
    const tb_key_conf_t           *key;       /* NULL in open mode */
    u_char                        *pool;      /* the key's accounts, 1 per
                                                 pool index; NULL: all */

    tb_body_t                      body;

    void                          *admin_data;  /* an admin write's */
    void                          *object;      /* a batch or file
                                                   request's: _objreq_t */
    ngx_int_t                      pin;         /* the slot of the files
                                                   it names; -1: any */

    /* the accounts there were when it began: the ones it may use */
    ngx_uint_t                     naccounts;
    ngx_queue_t                    held;
    uint64_t                       held_epoch;

    ngx_http_tokenbiryani_routing_t  route;

    /* attempts */
    ngx_uint_t                     attempts;
    u_char                        *marks;     /* NGX_HTTP_TB_MARK_*, per
                                                 account */
    ngx_uint_t                     excluded;  /* accounts given up on */
    ngx_http_tokenbiryani_account_t  *account;   /* this attempt's */
    ngx_http_tokenbiryani_account_t  *answered;  /* sent the response */
    int64_t                        attempt_ms;   /* this attempt began */
    ngx_str_t                      last_error;   /* its failure, in words */
    ngx_http_tokenbiryani_attempt_log_t
                                   log[NGX_HTTP_TB_INSPECT_ATTEMPTS];

    /* this attempt's response, and what it was */
    ngx_http_tokenbiryani_response_t  resp;
    tb_outcome_t                   outcome;

    /* the request upstream */
    ngx_chain_t                   *hdr;       /* first link of the request */
    off_t                          body_len;
    void                          *plat;      /* a platform's attempts':
                                                 ..._platform_ctx_t */
    ngx_http_upstream_conf_t      *uconf;     /* a stream's own */

    /* the response the client gets */
    tb_sse_t                      *sse;       /* a stream's parser */
    tb_usage_t                     usage;
    u_char                        *hold;      /* a JSON answer, held whole */
    size_t                         hold_size;
    int64_t                        started_ms;
    int64_t                        ttft_ms;

    ngx_http_tokenbiryani_wait_t   wait;

    /* its key's share: the rpm slot taken, the prompt sampled */
    uint64_t                       key_hash;      /* of its name; 0: none */
    int64_t                        text_bytes;    /* an input sample, 0 */
    int64_t                        owner_cached;  /* prompt in its cache */
    ngx_int_t                      rpm_slot;      /* -1: none taken */
    int64_t                        rpm_taken;

    /* money: its caps (what reached one), its cost once settled */
    ngx_http_tokenbiryani_caps_t   caps;
    int64_t                        cost;          /* nd; -1 unknown */

    ngx_http_tokenbiryani_error_t  err;
    ngx_http_tokenbiryani_rare_t  *rare;          /* NULL: none of it */

    unsigned                       admin:1;       /* the caller is one */
    unsigned                       committed:1;
    unsigned                       inflight:1;    /* counted on account */
    unsigned                       probed:1;      /* holds the probe slot */
    unsigned                       pausing:1;     /* drop the upstream */
    unsigned                       waiting:1;     /* in the local list */
    unsigned                       own_error:1;   /* body is ours */
    unsigned                       final:1;       /* x-should-retry: false */
    unsigned                       key_full:1;    /* at its max_inflight */
    unsigned                       rewrite_body:1;
    unsigned                       costed:1;      /* cost is settled */
    unsigned                       no_own_headers:1;  /* x-tokenbiryani-* */
    unsigned                       object_body:1; /* a batch's, rewritten */
    unsigned                       spilled:1;     /* sent to the spill
                                                     lane, once */
    unsigned                       claim_lost:1;  /* another gateway
                                                     charges the batch */
    unsigned                       bp_added:1;    /* the gateway added a
                                                     cache breakpoint */
} ngx_http_tokenbiryani_ctx_t;


extern ngx_module_t  ngx_http_tokenbiryani_module;


/* the headers of a list, one by one: begin, then next until NULL */
typedef struct {
    ngx_list_part_t               *part;
    ngx_uint_t                     i;
} ngx_http_tokenbiryani_hiter_t;

static ngx_inline void
ngx_http_tokenbiryani_headers_begin(ngx_http_tokenbiryani_hiter_t *it,
    ngx_list_t *headers)
{
    it->part = &headers->part;
    it->i = 0;
}

static ngx_inline ngx_table_elt_t *
ngx_http_tokenbiryani_header_next(ngx_http_tokenbiryani_hiter_t *it)
{
    while (it->i >= it->part->nelts) {
        if (it->part->next == NULL) {
            return NULL;
        }

        it->part = it->part->next;
        it->i = 0;
    }

    return (ngx_table_elt_t *) it->part->elts + it->i++;
}


#if (NGX_THREADS)

/*
 * A task of the worker's own for nginx's thread pool: handler runs in a
 * thread with data, done back in the event loop with data; NULL: no
 * memory.
 */
static ngx_inline ngx_thread_task_t *
ngx_http_tokenbiryani_task(ngx_pool_t *pool,
    void (*handler)(void *data, ngx_log_t *log), ngx_event_handler_pt done,
    void *data, ngx_log_t *log)
{
    ngx_thread_task_t  *task;

    task = ngx_thread_task_alloc(pool, 0);
    if (task == NULL) {
        return NULL;
    }

    task->handler = handler;
    task->ctx = data;
    task->event.handler = done;
    task->event.data = data;
    task->event.log = log;

    return task;
}

#endif


/*
 * A timer of the worker's own: cancelable, so that it never keeps a worker
 * that is shutting down alive (a handler that wants it again re-arms it).
 */
static ngx_inline void
ngx_http_tokenbiryani_timer_init(ngx_event_t *ev,
    ngx_event_handler_pt handler, void *data, ngx_log_t *log)
{
    ev->handler = handler;
    ev->data = data;
    ev->log = log;
    ev->cancelable = 1;
}


#if (NGX_THREADS)

/* a task of the thread pool (see above) that a timer of the worker's own
 * (tick, with data) posts: the timer set up, the task made; NULL: no
 * memory */
static ngx_inline ngx_thread_task_t *
ngx_http_tokenbiryani_timed_task(ngx_pool_t *pool,
    void (*handler)(void *data, ngx_log_t *log), ngx_event_handler_pt done,
    ngx_event_t *timer, ngx_event_handler_pt tick, void *data,
    ngx_log_t *log)
{
    ngx_http_tokenbiryani_timer_init(timer, tick, data, log);

    return ngx_http_tokenbiryani_task(pool, handler, done, data, log);
}

#endif


/* a run of a chunked body's data: NGX_OK for more, NGX_DECLINED to stop */
typedef ngx_int_t (*ngx_http_tokenbiryani_chunk_pt)(void *data, u_char *p,
    size_t n);


/*
 * De-chunks [*pos, last) with the parser's state in chunked, consuming no
 * buffer: each run of data goes to handler (NULL: passed over).  What the
 * parser said last - NGX_DONE after the last chunk, NGX_AGAIN for more,
 * NGX_ERROR for a broken encoding - or NGX_DECLINED when the handler had
 * enough; *pos is where it stopped.
 */
static ngx_inline ngx_int_t
ngx_http_tokenbiryani_dechunk(ngx_http_request_t *r, u_char **pos,
    u_char *last, ngx_http_chunked_t *chunked,
    ngx_http_tokenbiryani_chunk_pt handler, void *data)
{
    off_t      n;
    ngx_int_t  rc;
    ngx_buf_t  b;

    ngx_memzero(&b, sizeof(ngx_buf_t));
    b.pos = *pos;
    b.last = last;

    do {
        rc = ngx_http_parse_chunked(r, &b, chunked);

        if (rc != NGX_OK) {
            break;
        }

        n = ngx_min((off_t) (b.last - b.pos), chunked->size);

        if (handler) {
            rc = handler(data, b.pos, (size_t) n);
        }

        b.pos += n;
        chunked->size -= n;

    } while (rc == NGX_OK);

    *pos = b.pos;

    return rc;
}


/* ctx->hold moved to size bytes (more than it has), the held bytes kept */
static ngx_inline ngx_int_t
ngx_http_tokenbiryani_hold_resize(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, size_t size)
{
    u_char  *p;

    p = ngx_pnalloc(r->pool, size);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (ctx->resp.held) {
        ngx_memcpy(p, ctx->hold, ctx->resp.held);
    }

    ctx->hold = p;
    ctx->hold_size = size;

    return NGX_OK;
}


#endif /* _NGX_HTTP_TOKENBIRYANI_H_INCLUDED_ */
