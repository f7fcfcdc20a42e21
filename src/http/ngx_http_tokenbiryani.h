/*
 * tokenbiryani for NGINX: types shared by the module's glue files.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "tb_config.h"
#include "tb_json.h"
#include "tb_keys.h"
#include "tb_ratelimit.h"
#include "tb_account.h"
#include "tb_router.h"
#include "tb_session.h"
#include "tb_failure.h"


#define NGX_HTTP_TOKENBIRYANI_VERSION  "0.1.0"

#define NGX_HTTP_TB_PASS               1
#define NGX_HTTP_TB_ADMIN              2
#define NGX_HTTP_TB_HEALTHZ            3

/* what the request's wait event does when it fires */
#define NGX_HTTP_TB_WAIT_NONE          0
#define NGX_HTTP_TB_WAIT_DISPATCH      1     /* a backoff ended */
#define NGX_HTTP_TB_WAIT_FAIL          2     /* send the error prepared */
#define NGX_HTTP_TB_WAIT_EXPIRE        3     /* the queue's budget ran out */
#define NGX_HTTP_TB_WAIT_START         4     /* an attempt is leased */

/* what a dispatch came to */
#define NGX_HTTP_TB_GO                 0     /* ctx->next leased */
#define NGX_HTTP_TB_WAIT               1     /* queued, or backing off */
#define NGX_HTTP_TB_FAIL               2     /* ctx->err_* set */

/* ctx->tried[], per account */
#define NGX_HTTP_TB_TRIED              0x01  /* left out of this decision */
#define NGX_HTTP_TB_EXCLUDED           0x02  /* ever given up on (budget) */

/* what a /v1 request is */
#define NGX_HTTP_TB_MESSAGES           1
#define NGX_HTTP_TB_COUNT_TOKENS       2
#define NGX_HTTP_TB_MODELS             3

#define NGX_HTTP_TB_REQUEST_ID_LEN     28    /* "tbr_" + 24 hex */


typedef struct ngx_http_tokenbiryani_shm_s  ngx_http_tokenbiryani_shm_t;
typedef struct ngx_http_tokenbiryani_lease_s  ngx_http_tokenbiryani_lease_t;
typedef struct ngx_http_tokenbiryani_waiter_s  ngx_http_tokenbiryani_waiter_t;


typedef struct {
    ngx_queue_t                    queue;
    ngx_connection_t              *connection;
    void                          *account;
    socklen_t                      socklen;
    ngx_sockaddr_t                 sockaddr;   /* the peer it talks to */
} ngx_http_tokenbiryani_keepalive_t;


typedef struct {
    ngx_uint_t                     index;
    ngx_str_t                      id;
    tb_account_conf_t             *conf;

    ngx_addr_t                    *addrs;          /* resolved at load */
    ngx_uint_t                     naddrs;
    ngx_str_t                      host_header;    /* host[:port] */
    ngx_str_t                      ssl_name;       /* SNI, verification */
    ngx_str_t                      path_prefix;
    ngx_str_t                      auth_header;    /* "x-api-key: ...\r\n"
                                                      plus extra headers */
    ngx_str_t                      base_url;       /* for display */
    unsigned                       tls:1;
    unsigned                       supported:1;    /* type is proxied */

    unsigned char                  fingerprint[8];
    tb_account_state_t            *sh;             /* slot in the zone */
    ngx_uint_t                     slot;           /* its index there */
    uint64_t                       id_hash;

    /* per worker (copied at fork): idle upstream connections, TLS session */
    ngx_queue_t                    cache;
    ngx_queue_t                    free;
#if (NGX_HTTP_SSL)
    ngx_ssl_session_t             *ssl_session;
#endif
} ngx_http_tokenbiryani_account_t;


typedef struct {
    ngx_shm_zone_t                *shm_zone;
    ngx_http_tokenbiryani_shm_t   *sh;
    ngx_slab_pool_t               *shpool;

    ngx_str_t                      config_file;
    tb_config_t                   *tbcf;
    tb_keytab_t                    keytab;

    ngx_array_t                    accounts;  /* ngx_http_tokenbiryani_account_t */

    ngx_uint_t                     keepalive;
    ngx_msec_t                     keepalive_timeout;
    ngx_uint_t                     keepalive_requests;

    ngx_msec_t                     lease_timeout;

    ngx_str_t                      trusted_certificate;
#if (NGX_HTTP_SSL)
    ngx_ssl_t                     *ssl;
#endif

    ngx_http_upstream_srv_conf_t  *upstream;
    ngx_array_t                    servers;   /* ngx_http_core_srv_conf_t * */

    const tb_strategy_t           *strategy;
    ngx_array_t                    plugins;   /* tb_strategy_t * */
    double                         weights[TB_TERMS];
    tb_breaker_conf_t              breaker;

    ngx_uint_t                     used;      /* any location uses us */
} ngx_http_tokenbiryani_main_conf_t;


typedef struct {
    ngx_uint_t                     type;      /* NGX_HTTP_TB_PASS, ... */
    ngx_http_upstream_conf_t       upstream;
} ngx_http_tokenbiryani_loc_conf_t;


typedef struct {
    ngx_uint_t                     account;   /* index in the pool */
    ngx_int_t                      status;    /* 0: no response */
    ngx_uint_t                     kind;      /* tb_kind_e */
    int64_t                        start_ms;
    int64_t                        latency_ms;
} ngx_http_tokenbiryani_try_t;


typedef struct {
    ngx_http_request_t            *request;

    u_char                         request_id[NGX_HTTP_TB_REQUEST_ID_LEN];
    ngx_uint_t                     kind;      /* NGX_HTTP_TB_MESSAGES, ... */
    const tb_key_conf_t           *key;       /* NULL in open mode */
    unsigned                       admin:1;   /* the caller is an admin */

    tb_body_t                      body;
    ngx_str_t                      path;      /* upstream URI */

    /* routing */
    uint64_t                       session;
    tb_session_source_e            session_source;
    ngx_int_t                      owner;     /* slot of the owner, -1 */
    tb_need_t                      need;
    tb_cand_t                     *cands;     /* one per account */
    tb_cand_out_t                 *outs;
    tb_decision_t                  decision;  /* the last one made */
    int64_t                        decided_ms;
    tb_affinity_e                  affinity;  /* what it did to the cache */
    int                            owner_index;  /* in the pool, -1 */
    ngx_uint_t                     decisions;
    int64_t                        started_ms;
    int64_t                        ttft_ms;
    ngx_http_tokenbiryani_account_t  *next;   /* decided, leased, unsent */

    /* the lease of the current attempt */
    ngx_http_tokenbiryani_lease_t *lease;
    uint64_t                       lease_id;
    ngx_queue_t                    held;      /* in the worker's list */
    int64_t                        headers_ms;
    ngx_uint_t                     obs_stale;   /* its answer older news */

    /* what the attempts did, for the inspector */
    ngx_http_tokenbiryani_try_t    tries[8];

    tb_usage_t                     usage;
    u_char                        *json;      /* a JSON response, for usage */
    size_t                         json_len;

    /* attempts */
    ngx_uint_t                     attempts;
    uint8_t                       *tried;     /* NGX_HTTP_TB_TRIED, ... */
    ngx_http_tokenbiryani_account_t  *account;   /* this attempt */
    ngx_http_tokenbiryani_account_t  *answered;  /* sent the response */
    ngx_int_t                      last_status;  /* previous attempt */
    ngx_str_t                      last_error;   /* its failure, for logs */

    /* upstream request */
    ngx_chain_t                   *hdr;       /* first link of the request */
    off_t                          body_len;

    /* response parsing, per attempt */
    ngx_http_status_t              status;
    u_char                        *body_start;
    u_char                        *peek_pos;
    ngx_http_chunked_t             peek_chunked;
    off_t                          sse_fed;   /* decoded bytes peeked */
    off_t                          sse_skip;  /* not to be fed again */
    tb_rl_obs_t                    obs;

    ngx_http_chunked_t             chunked;
    tb_sse_t                       sse;
    u_char                        *sse_line;
    u_char                        *sse_data;

    /* failures, retries and the queue */
    tb_outcome_t                   outcome;       /* of the last attempt */
    ngx_event_t                    wait;          /* backoff, budget, resume */
    ngx_uint_t                     action;        /* NGX_HTTP_TB_WAIT_* */
    ngx_queue_t                    wq;            /* the worker's waiters */
    ngx_http_tokenbiryani_waiter_t *waiter;
    uint64_t                       waiter_id;
    ngx_uint_t                     priority;      /* 0 interactive, 1 batch */
    ngx_uint_t                     excluded;      /* accounts ruled out */
    ngx_uint_t                     queued;        /* times it waited */
    int64_t                        deadline_ms;
    int64_t                        wait_budget_ms;
    int64_t                        waited_ms;     /* in the queue, in all */
    int64_t                        wait_start_ms;
    int64_t                        wait_until_ms; /* the budget's end */
    int64_t                        woken_ms;      /* capacity to grant */
    int64_t                        retry_at;      /* its soonest, waiting */
    int64_t                        attempt_ms;    /* this attempt began */
    int64_t                        retry_after_ms;   /* upstream's, or -1 */
    ngx_int_t                      retry_after;   /* ours, seconds; 0 */
    ngx_int_t                      rpm_slot;      /* -1: none taken */
    int64_t                        rpm_taken;
    uint64_t                       model_hash;
    ngx_http_upstream_conf_t      *uconf;         /* a stream's own */
    u_char                        *errbody;       /* an error response */
    size_t                         errbody_len;
    u_char                        *errbuf;        /* ... when chunked */
    ngx_http_chunked_t             err_chunked;

    /* gateway-made error, sent by the filter in place of nginx's page */
    ngx_int_t                      err_status;
    const char                    *err_type;
    ngx_str_t                      err_message;
    ngx_str_t                      err_json;      /* rendered once */

    unsigned                       is_sse:1;
    unsigned                       peek_eof:1;
    unsigned                       committed:1;
    unsigned                       stream_done:1;
    unsigned                       error_after_commit:1;
    unsigned                       inflight:1;    /* counted on account */
    unsigned                       retry_logged:1;
    unsigned                       own_error:1;   /* body is ours */
    unsigned                       rewrite_body:1;
    unsigned                       json_overflow:1;
    unsigned                       settled:1;
    unsigned                       outcome_set:1;
    unsigned                       probed:1;      /* holds the probe slot */
    unsigned                       pausing:1;     /* drop the upstream */
    unsigned                       waiting:1;     /* in the local list */
    unsigned                       stalled:1;     /* prelude went silent */
    unsigned                       grace_commit:1;
} ngx_http_tokenbiryani_ctx_t;


extern ngx_module_t  ngx_http_tokenbiryani_module;


/* proxy (src/http/ngx_http_tokenbiryani_proxy.c) */
ngx_int_t ngx_http_tokenbiryani_pass_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_build_request_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
void ngx_http_tokenbiryani_reset_attempt(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
ngx_uint_t ngx_http_tokenbiryani_more_attempts(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/* balancer (src/http/ngx_http_tokenbiryani_balancer.c) */
ngx_http_upstream_srv_conf_t *ngx_http_tokenbiryani_upstream_add(
    ngx_conf_t *cf);
ngx_http_tokenbiryani_account_t *ngx_http_tokenbiryani_pick(
    ngx_http_request_t *r, ngx_http_tokenbiryani_ctx_t *ctx);
ngx_uint_t ngx_http_tokenbiryani_eligible_left(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
ngx_uint_t ngx_http_tokenbiryani_account_sets(
    ngx_http_tokenbiryani_account_t *a, ngx_str_t *name);

/* routing glue (src/http/ngx_http_tokenbiryani_router.c) */
void ngx_http_tokenbiryani_route_input(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx, tb_route_in_t *in);
ngx_int_t ngx_http_tokenbiryani_route_prepare(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body);
ngx_http_tokenbiryani_account_t *ngx_http_tokenbiryani_route(
    ngx_http_request_t *r, ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_uint_t lease);
void ngx_http_tokenbiryani_route_settle(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t success);
void ngx_http_tokenbiryani_request_done(void *data);
ngx_int_t ngx_http_tokenbiryani_init_worker(ngx_cycle_t *cycle);
ngx_int_t ngx_http_tokenbiryani_pool_slot(ngx_http_request_t *r,
    ngx_uint_t slot);

/* failures, retries, the queue (src/http/ngx_http_tokenbiryani_dispatch.c) */
ngx_int_t ngx_http_tokenbiryani_admit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
ngx_int_t ngx_http_tokenbiryani_dispatch(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
void ngx_http_tokenbiryani_attempt_over(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc,
    ngx_uint_t failed);
ngx_int_t ngx_http_tokenbiryani_pause(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc);
void ngx_http_tokenbiryani_abandon(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
void ngx_http_tokenbiryani_queue_wake(void);
void ngx_http_tokenbiryani_arm_dispatch(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
void ngx_http_tokenbiryani_arm_fail(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
ngx_msec_t ngx_http_tokenbiryani_prelude_timeout(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_dispatch_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);
ngx_int_t ngx_http_tokenbiryani_start_upstream(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
void ngx_http_tokenbiryani_log_admission(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    int64_t *remaining, const char *decision, const char *reason);
void ngx_http_tokenbiryani_log_settlement(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    const char *next);

/* filters and errors (src/http/ngx_http_tokenbiryani_filter.c) */
ngx_int_t ngx_http_tokenbiryani_filter_init(ngx_conf_t *cf);
ngx_int_t ngx_http_tokenbiryani_send_error(ngx_http_request_t *r,
    ngx_int_t status, const char *type, const char *fmt, ...);
void ngx_http_tokenbiryani_set_error(ngx_http_request_t *r,
    ngx_int_t status, const char *type, const char *fmt, ...);
ngx_int_t ngx_http_tokenbiryani_send_json(ngx_http_request_t *r,
    ngx_int_t status, ngx_str_t *json);
const char *ngx_http_tokenbiryani_error_type(ngx_int_t status);

/* utilities (src/http/ngx_http_tokenbiryani_util.c) */
ngx_http_tokenbiryani_ctx_t *ngx_http_tokenbiryani_create_ctx(
    ngx_http_request_t *r);
int64_t ngx_http_tokenbiryani_now_ms(void);
ngx_table_elt_t *ngx_http_tokenbiryani_find_header(ngx_http_request_t *r,
    const char *lowcase_name, size_t len);
ngx_int_t ngx_http_tokenbiryani_authenticate(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t need_admin);
ngx_int_t ngx_http_tokenbiryani_load_config(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf);
const tb_strategy_t *ngx_http_tokenbiryani_find_strategy(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *name);

/* admin API and health (lua-free-admin/) */
ngx_int_t ngx_http_tokenbiryani_admin_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_healthz_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_TOKENBIRYANI_H_INCLUDED_ */
