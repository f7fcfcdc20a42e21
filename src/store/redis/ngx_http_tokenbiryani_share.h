/*
 * What instances that share a Redis (store.backend: redis) agree on at
 * request time.  Conversations: an instance that has no owner for a
 * conversation asks Redis before it routes the turn, and an instance that
 * gives one a new owner says so, so a conversation that reaches either
 * instance stays on the account that holds its prompt cache.
 *
 * Nothing here waits: a question to Redis is asked and the request goes
 * on when it is answered, or at once when Redis is away (what the zone
 * knows is used then).
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_SHARE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_SHARE_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


typedef void (*ngx_http_tokenbiryani_share_resume_pt)(ngx_http_request_t *r);

/*
 * Before routing: ctx->route.session's owner from Redis into the zone when the
 * zone has none.  NGX_OK: go on now; NGX_AGAIN: resume(r) is called from
 * the event loop once it is answered (or has failed).
 */
ngx_int_t ngx_http_tokenbiryani_share_owner(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_http_tokenbiryani_share_resume_pt resume);

/* at the commit: the owner affinity_set said the others must be told */
void ngx_http_tokenbiryani_share_affinity(
    ngx_http_tokenbiryani_main_conf_t *tmcf, uint64_t session,
    const ngx_str_t *account, int64_t cached, ngx_uint_t share);


#endif /* _NGX_HTTP_TOKENBIRYANI_SHARE_H_INCLUDED_ */
