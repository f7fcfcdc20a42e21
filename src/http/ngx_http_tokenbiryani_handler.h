/*
 * The content handler of tokenbiryani_pass: the first stage of a /v1
 * request.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_HANDLER_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_HANDLER_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


ngx_int_t ngx_http_tokenbiryani_pass_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_TOKENBIRYANI_HANDLER_H_INCLUDED_ */
