/*
 * A worker's own call to an upstream account, off any client's request:
 * the probe of an account (the doctor check, lua-free-admin) and the
 * batches the gateway polls for itself (ngx_http_tokenbiryani_poller.c).
 * One request on a connection of its own, with the worker's event loop,
 * never blocking it; what came back - the status, the error's message,
 * the rate-limit headers as the mirror would read them, and the body:
 * held (64 KB at most), or handed to a sink as it comes, of any size.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_CALL_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_CALL_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


#define NGX_HTTP_TB_CALL_TIMEOUT       15000     /* ms, the default */
#define NGX_HTTP_TB_CALL_MAX_RESPONSE  65536     /* bytes held at most */
#define NGX_HTTP_TB_CALL_DETAIL_MAX    200       /* bytes of error.message */

/* the nine classic headers, in the mirror's order (window * 3 + field) */
#define NGX_HTTP_TB_RL_NHEADERS        (TB_NWINDOWS * TB_RL_NFIELDS)

extern ngx_str_t  ngx_http_tokenbiryani_ratelimit_names[];

/* the six a subscription's answer carries instead (5h, 7d: status,
 * utilization, reset) */
#define NGX_HTTP_TB_UNI_NHEADERS       6
extern ngx_str_t  ngx_http_tokenbiryani_unified_names[];


typedef struct ngx_http_tokenbiryani_call_s  ngx_http_tokenbiryani_call_t;

/* bytes of a 2xx's body as they come: NGX_OK, or NGX_ERROR to stop */
typedef ngx_int_t (*ngx_http_tokenbiryani_call_sink_pt)(void *data,
    u_char *p, size_t len);


typedef struct {
    ngx_addr_t                    *addrs;         /* tried in order */
    ngx_uint_t                     naddrs;
    ngx_str_t                      host_header;   /* "host[:port]" */
    ngx_str_t                      ssl_name;      /* SNI and verification,
                                                     when tls */
    ngx_str_t                      path_prefix;   /* "" or "/x" */
    ngx_str_t                      auth_header;   /* credential lines, each
                                                     ending CRLF */
    ngx_str_t                      bearer;        /* a subscription's, per
                                                     worker, the same */
    ngx_str_t                      method;        /* "GET", "POST" */
    ngx_str_t                      path;          /* after the prefix */
    ngx_str_t                      body;          /* JSON; len 0: none */
    ngx_str_t                      beta;          /* anthropic-beta's value,
                                                     printable ASCII; len 0:
                                                     none */
    const char                    *what;          /* in the log and the
                                                     User-Agent: "probe" */
    ngx_http_tokenbiryani_call_sink_pt  sink;     /* NULL: the body held */
    void                          *sink_data;
    unsigned                       tls:1;
    unsigned                       background:1;  /* no request waits:
                                                     a worker that exits
                                                     does not wait for it */
} ngx_http_tokenbiryani_call_target_t;


typedef struct {
    ngx_int_t                      status;        /* 0: no response */
    ngx_msec_t                     latency_ms;
    ngx_str_t                      error;         /* transport, TLS or parse
                                                     failure in words; len 0:
                                                     none */
    ngx_str_t                      detail;        /* the body's
                                                     error.message, len 0:
                                                     none */
    ngx_str_t                      body;          /* held (no sink), at
                                                     most 64 KB */
    off_t                          length;        /* given to the sink */
    tb_rl_obs_t                    obs;           /* what the mirror would
                                                     parse */
    int64_t                        observed_ms;   /* the headers were read,
                                                     epoch ms; 0: never */
    ngx_str_t                      values[NGX_HTTP_TB_RL_NHEADERS];
                                                  /* raw values of the nine,
                                                     len 0: absent */
    unsigned                       unified:1;     /* an anthropic-ratelimit-
                                                     unified-* came back */
    ngx_str_t                      uvalues[NGX_HTTP_TB_UNI_NHEADERS];
                                                  /* raw values of the six */
    tb_unified_t                   uobs;          /* what they say */
    unsigned                       complete:1;    /* the body whole, by its
                                                     framing or a clean
                                                     close */
    ngx_str_t                      retry_after;   /* raw, len 0: absent */
    ngx_str_t                      organization;  /* raw, len 0: absent */
} ngx_http_tokenbiryani_call_result_t;


typedef void (*ngx_http_tokenbiryani_call_done_pt)(
    ngx_http_tokenbiryani_call_result_t *res, void *data);


/* a target of an account's own (its addresses, Host, TLS and credential),
 * what it asks left empty */
void ngx_http_tokenbiryani_call_target(
    ngx_http_tokenbiryani_call_target_t *t,
    const ngx_http_tokenbiryani_account_t *a);

/* the operator's subscription's (type oauth): its bearer, the OAuth beta;
 * nothing for another account */
void ngx_http_tokenbiryani_call_oauth(ngx_http_tokenbiryani_call_target_t *t,
    const ngx_http_tokenbiryani_account_t *a);

/*
 * Starts the call: pool holds it (and the result) and must live until
 * done, which is called exactly once, from an event handler (never from
 * this function), after the connection is closed and the timer removed -
 * unless the call is cancelled first.  What t points to is copied.  A
 * timeout of 0 is NGX_HTTP_TB_CALL_TIMEOUT.  NULL: no memory (done is not
 * called).
 */
ngx_http_tokenbiryani_call_t *ngx_http_tokenbiryani_call(ngx_pool_t *pool,
    ngx_log_t *log, ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_call_target_t *t, ngx_msec_t timeout,
    ngx_http_tokenbiryani_call_done_pt done, void *data);

/*
 * A call about a message batch: method on /v1/messages/batches, then /id
 * (len 0: none) and below ("", "/results", "/cancel"), in t's target with
 * t's what, sink and body; as ngx_http_tokenbiryani_call()
 */
ngx_http_tokenbiryani_call_t *ngx_http_tokenbiryani_call_batch(
    ngx_pool_t *pool, ngx_log_t *log, ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_call_target_t *t, const char *method,
    const u_char *id, size_t len, const char *below, ngx_msec_t timeout,
    ngx_http_tokenbiryani_call_done_pt done, void *data);

/* a call not finished, stopped: its connection closed, done never called */
void ngx_http_tokenbiryani_call_cancel(ngx_http_tokenbiryani_call_t *call);


#endif /* _NGX_HTTP_TOKENBIRYANI_CALL_H_INCLUDED_ */
