/*
 * The module's own upstream{}: no servers, a balancer whose peer.get
 * starts each attempt on the account routed for it and whose peer.free
 * ends it.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_BALANCER_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_BALANCER_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


ngx_http_upstream_srv_conf_t *ngx_http_tokenbiryani_upstream_add(
    ngx_conf_t *cf);


#endif /* _NGX_HTTP_TOKENBIRYANI_BALANCER_H_INCLUDED_ */
