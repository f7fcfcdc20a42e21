/*
 * The /admin JSON API and /healthz.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"


ngx_int_t ngx_http_tokenbiryani_admin_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_healthz_handler(ngx_http_request_t *r);

/* GET /admin/events (lua-free-admin/ngx_http_tokenbiryani_admin_events.c) */
ngx_int_t ngx_http_tokenbiryani_admin_events(ngx_http_request_t *r);

/* /admin/keys (lua-free-admin/ngx_http_tokenbiryani_admin_keys.c) */
ngx_int_t ngx_http_tokenbiryani_admin_keys(ngx_http_request_t *r);

/* sends root (and frees it) as the response */
ngx_int_t ngx_http_tokenbiryani_send_cjson(ngx_http_request_t *r,
    ngx_int_t status, cJSON *root);


#endif /* _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_ */
