/*
 * The probe of one upstream account (the doctor check): one small
 * request to its /v1/messages, a call of the worker's own
 * (ngx_http_tokenbiryani_call.h) made for an admin request, and what came
 * back - the status, the error's message, and the rate-limit headers as
 * the mirror would read them - as the admin answer's object.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ADMIN_PROBE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ADMIN_PROBE_H_INCLUDED_


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_call.h"


#define NGX_HTTP_TB_PROBE_TIMEOUT      NGX_HTTP_TB_CALL_TIMEOUT


typedef void (*ngx_http_tokenbiryani_probe_done_pt)(ngx_http_request_t *r,
    ngx_http_tokenbiryani_call_result_t *res, void *data);


/*
 * Starts the probe for request r: t is the account's target (its method,
 * path and body are the probe's), model the model it asks for.  r's pool
 * holds it and r's log is its log.  The caller holds a reference to r
 * (the one its body's reading took, or r->main->count++) and finalizes r
 * in done, which is called exactly once, from an event handler (never
 * from this function), after the connection is closed and the timer
 * removed; the result lives in r's pool.  A request that ends first takes
 * the probe with it.  A timeout of 0 is NGX_HTTP_TB_PROBE_TIMEOUT.
 * NGX_OK, or NGX_ERROR (no memory: done is not called).
 */
ngx_int_t ngx_http_tokenbiryani_probe(ngx_http_request_t *r,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_call_target_t *t, const ngx_str_t *model,
    ngx_msec_t timeout, ngx_http_tokenbiryani_probe_done_pt done,
    void *data);

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
    const ngx_http_tokenbiryani_call_result_t *res);


#endif /* _NGX_HTTP_TOKENBIRYANI_ADMIN_PROBE_H_INCLUDED_ */
