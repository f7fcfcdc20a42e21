/*
 * The attempt loop: from the first attempt to the last, with the backoffs,
 * the queue and the pauses between them, and the request's end.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ATTEMPT_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ATTEMPT_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* the body is read and scanned: admission, then the first attempt */
void ngx_http_tokenbiryani_attempt_begin(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * peer.get of an attempt that does not follow at once (a backoff, the
 * queue, an error to send): the ngx_http_upstream_t is given up without
 * finalizing the request.
 */
ngx_int_t ngx_http_tokenbiryani_attempt_pause(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc);

/* peer.free of an attempt that never reached its account: take it again */
void ngx_http_tokenbiryani_attempt_again(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc);

/* peer.free of a failed attempt: another one now, later, or the error */
void ngx_http_tokenbiryani_attempt_failed(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_peer_connection_t *pc);

/* capacity came back in this worker: its waiters try without delay */
void ngx_http_tokenbiryani_attempt_wake(void);

ngx_int_t ngx_http_tokenbiryani_attempt_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);


#endif /* _NGX_HTTP_TOKENBIRYANI_ATTEMPT_H_INCLUDED_ */
