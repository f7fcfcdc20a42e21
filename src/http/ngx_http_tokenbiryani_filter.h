/*
 * The header and body filters: the request id and the answering account
 * on every response of the gateway's locations, and Anthropic errors in
 * place of nginx's error pages.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_FILTER_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_FILTER_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


ngx_int_t ngx_http_tokenbiryani_filter_init(ngx_conf_t *cf);


#endif /* _NGX_HTTP_TOKENBIRYANI_FILTER_H_INCLUDED_ */
