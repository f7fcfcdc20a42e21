/*
 * The probe of one upstream account (the doctor check): one small
 * request to its /v1/messages, sent with the worker's own event loop,
 * and what came back - the status, the error's message, and the
 * rate-limit headers as the mirror would read them.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ADMIN_PROBE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ADMIN_PROBE_H_INCLUDED_


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"


#define NGX_HTTP_TB_PROBE_TIMEOUT      15000     /* ms, the default */
#define NGX_HTTP_TB_PROBE_MAX_RESPONSE 65536     /* bytes read at most */
#define NGX_HTTP_TB_PROBE_DETAIL_MAX   200       /* bytes of error.message */

/* the nine classic headers, in the mirror's order (window * 3 + field) */
#define NGX_HTTP_TB_PROBE_NHEADERS     (TB_NWINDOWS * TB_RL_NFIELDS)


typedef struct {
    ngx_addr_t                    *addrs;         /* tried in order */
    ngx_uint_t                     naddrs;
    ngx_str_t                      host_header;   /* "host[:port]" */
    ngx_str_t                      ssl_name;      /* SNI and verification,
                                                     when tls */
    ngx_str_t                      path_prefix;   /* "" or "/x" */
    ngx_str_t                      auth_header;   /* credential lines, each
                                                     ending CRLF */
    ngx_str_t                      model;
    unsigned                       tls:1;
} ngx_http_tokenbiryani_probe_target_t;


typedef struct {
    ngx_int_t                      status;        /* 0: no response */
    ngx_msec_t                     latency_ms;
    ngx_str_t                      error;         /* transport, TLS or parse
                                                     failure in words; len 0:
                                                     none */
    ngx_str_t                      detail;        /* the body's
                                                     error.message, len 0:
                                                     none */
    tb_rl_obs_t                    obs;           /* what the mirror would
                                                     parse */
    int64_t                        observed_ms;   /* the headers were read,
                                                     epoch ms; 0: never */
    ngx_str_t                      values[NGX_HTTP_TB_PROBE_NHEADERS];
                                                  /* raw values of the nine,
                                                     len 0: absent */
    unsigned                       unified:1;     /* an anthropic-ratelimit-
                                                     unified-* came back */
    ngx_str_t                      retry_after;   /* raw, len 0: absent */
    ngx_str_t                      organization;  /* raw, len 0: absent */
} ngx_http_tokenbiryani_probe_result_t;


typedef void (*ngx_http_tokenbiryani_probe_done_pt)(ngx_http_request_t *r,
    ngx_http_tokenbiryani_probe_result_t *res, void *data);


/*
 * Starts the probe for request r: r's pool holds it and r's log is its
 * log.  The caller holds a reference to r (the one its body's reading
 * took, or r->main->count++) and finalizes r in done, which is called
 * exactly once, from an event handler (never from this
 * function), after the connection is closed and the timer removed; the
 * result lives in r's pool.  What t points to is copied.  A timeout of 0
 * is NGX_HTTP_TB_PROBE_TIMEOUT.  NGX_OK, or NGX_ERROR (no memory: done is
 * not called).
 */
ngx_int_t ngx_http_tokenbiryani_probe(ngx_http_request_t *r,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_probe_target_t *t, ngx_msec_t timeout,
    ngx_http_tokenbiryani_probe_done_pt done, void *data);

/*
 * The result as the admin answer's object:
 *
 *   {"ok", "status", "latency_ms", "error", "detail",
 *    "family": "limits" | "unified" | "none",
 *    "checked": [{"header", "present", "value"} x 9], "missing": [...],
 *    "parsed": {"requests" | "input_tokens" | "output_tokens":
 *               {"limit", "remaining", "reset_in_seconds"}},
 *    "retry_after_seconds", "organization_id", "consequence"}
 *
 * ok is a 2xx, or a 429 (the credential was accepted).  NULL: no memory.
 */
cJSON *ngx_http_tokenbiryani_probe_json(
    const ngx_http_tokenbiryani_probe_result_t *res);


#endif /* _NGX_HTTP_TOKENBIRYANI_ADMIN_PROBE_H_INCLUDED_ */
