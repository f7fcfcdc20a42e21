/*
 * The ngx_http_upstream_t of an attempt: the request it sends, the
 * response's status line and headers, the prelude held back until the
 * commit point, and the body as it streams to the client.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_UPSTREAM_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_UPSTREAM_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* a fresh ngx_http_upstream_t for the attempt routed in ctx->route.next */
ngx_int_t ngx_http_tokenbiryani_upstream_start(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * Per attempt, from peer.get: the response state reset, and the request's
 * header rebuilt with the attempt's account (ctx->account).
 */
void ngx_http_tokenbiryani_upstream_reset(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
ngx_int_t ngx_http_tokenbiryani_upstream_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * The wait for a stream's first bytes, and between them until its first
 * delta: retry.prelude_timeout_seconds (0: the request timeout), never
 * longer than the request timeout.
 */
ngx_msec_t ngx_http_tokenbiryani_prelude_timeout(ngx_http_request_t *r);


#endif /* _NGX_HTTP_TOKENBIRYANI_UPSTREAM_H_INCLUDED_ */
