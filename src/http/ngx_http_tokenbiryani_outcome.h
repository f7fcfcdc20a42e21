/*
 * What an attempt came to: ctx->outcome, a class of the failure taxonomy.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_OUTCOME_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_OUTCOME_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* a response: its status, the error body peeked, a stream's error event */
void ngx_http_tokenbiryani_classify_response(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status,
    const char *stream_error);

/* a failure without a response to classify: no connection, a timeout */
void ngx_http_tokenbiryani_classify_transport(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_connection_t *c);

/* a committed response that ended badly: an error event, a cut body */
void ngx_http_tokenbiryani_classify_broken(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_int_t rc);

/* the attempt's outcome in a few words, in ctx->last_error */
void ngx_http_tokenbiryani_describe_outcome(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);


#endif /* _NGX_HTTP_TOKENBIRYANI_OUTCOME_H_INCLUDED_ */
