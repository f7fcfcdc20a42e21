/*
 * What every location of the module needs first: the request's context
 * and its caller.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_REQUEST_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_REQUEST_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* the request's context, made once, with its request id */
ngx_http_tokenbiryani_ctx_t *ngx_http_tokenbiryani_create_ctx(
    ngx_http_request_t *r);

/* an id to find one request by (NGX_HTTP_TB_REQUEST_ID_LEN bytes at p):
 * prefix (4 bytes: "tbr_" a client's request, "tbp_" the gateway's own
 * work), then 96 random bits in hex */
void ngx_http_tokenbiryani_request_id(u_char *p, const char *prefix);

/* the key a request presents (x-api-key, or Authorization: Bearer) */
ngx_int_t ngx_http_tokenbiryani_key_from_request(ngx_http_request_t *r,
    ngx_str_t *key);

/*
 * The caller's virtual key: NGX_OK, or an HTTP status with the error
 * prepared.  need_admin: only admin keys pass.
 */
ngx_int_t ngx_http_tokenbiryani_authenticate(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t need_admin);

/* a request header by its lower-case name, or NULL */
ngx_table_elt_t *ngx_http_tokenbiryani_find_header(ngx_http_request_t *r,
    const char *lowcase_name, size_t len);

/*
 * The same for the gateway's own headers (x-tokenbiryani-*): most requests
 * carry none, and the first look tells the others so.
 */
ngx_table_elt_t *ngx_http_tokenbiryani_own_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *lowcase_name, size_t len);


#endif /* _NGX_HTTP_TOKENBIRYANI_REQUEST_H_INCLUDED_ */
