/*
 * Idle upstream connections, per account and per worker.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_KEEPALIVE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_KEEPALIVE_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* NGX_DONE with pc->connection an idle one to pc->sockaddr, else NGX_OK */
ngx_int_t ngx_http_tokenbiryani_keepalive_get(ngx_peer_connection_t *pc,
    ngx_http_tokenbiryani_account_t *a);

/* the attempt's connection, kept if it can be reused */
void ngx_http_tokenbiryani_keepalive_put(ngx_peer_connection_t *pc,
    ngx_http_request_t *r, ngx_http_tokenbiryani_account_t *a);

/* every idle connection of an account closed (it is being removed) */
void ngx_http_tokenbiryani_keepalive_drop(ngx_http_tokenbiryani_account_t *a);


#endif /* _NGX_HTTP_TOKENBIRYANI_KEEPALIVE_H_INCLUDED_ */
