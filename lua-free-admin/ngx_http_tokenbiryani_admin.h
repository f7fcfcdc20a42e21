/*
 * The /admin JSON API and /healthz.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


ngx_int_t ngx_http_tokenbiryani_admin_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_healthz_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_ */
