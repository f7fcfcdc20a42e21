/*
 * Errors the gateway answers itself, Anthropic-shaped:
 * {"type":"error","error":{"type":...,"message":...},"request_id":...}.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ERROR_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ERROR_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* prepares the error the request will end with (type NULL: by status) */
void ngx_http_tokenbiryani_set_error(ngx_http_request_t *r,
    ngx_int_t status, const char *type, const char *fmt, ...);

/*
 * Sends the error prepared by set_error (or a new one when fmt is given),
 * for callers that own the response; returns what to finalize with.
 */
ngx_int_t ngx_http_tokenbiryani_send_error(ngx_http_request_t *r,
    ngx_int_t status, const char *type, const char *fmt, ...);

ngx_int_t ngx_http_tokenbiryani_send_json(ngx_http_request_t *r,
    ngx_int_t status, ngx_str_t *json);

/*
 * The error body for the response's status: the module's message when it
 * set one for that status, else one for the status nginx chose.  Built
 * once and kept.
 */
ngx_int_t ngx_http_tokenbiryani_error_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *json);

/* an account's answer that breaks the protocol ("sent an invalid
 * header"): said in the log with the account's id; returns rc */
ngx_int_t ngx_http_tokenbiryani_upstream_invalid(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *what, ngx_int_t rc);

/* the Anthropic error type of an HTTP status */
const char *ngx_http_tokenbiryani_error_type(ngx_int_t status);


#endif /* _NGX_HTTP_TOKENBIRYANI_ERROR_H_INCLUDED_ */
