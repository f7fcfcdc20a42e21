/*
 * Vertex accounts' access tokens: made per worker from the service
 * account's key file (tb_gauth.c: an RS256 assertion) and the token
 * endpoint's answer, on timers, the exchange in nginx's thread pool -
 * never on a request's path.  A token is fetched when the worker starts
 * and again when four fifths of its life have passed; a failed fetch is
 * tried again after 1 s, doubling to 60 s.  While an account has no valid
 * token its verdict is "waiting for an access token": requests go
 * elsewhere, or wait in the queue within their budget, and are woken
 * when it comes.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_GAUTH_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_GAUTH_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* per worker: a first fetch for every account that needs tokens */
ngx_int_t ngx_http_tokenbiryani_gauth_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);


#endif /* _NGX_HTTP_TOKENBIRYANI_GAUTH_H_INCLUDED_ */
