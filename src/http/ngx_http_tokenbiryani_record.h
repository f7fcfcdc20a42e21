/*
 * The request inspector's record of a request.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_RECORD_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_RECORD_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* from the request pool's cleanup: allocates nothing */
void ngx_http_tokenbiryani_record(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);


#endif /* _NGX_HTTP_TOKENBIRYANI_RECORD_H_INCLUDED_ */
