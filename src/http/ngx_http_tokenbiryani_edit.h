
/*
 * The gateway's own edits of a Message's body, once, before routing: an
 * automatic prompt-cache breakpoint (cache.auto_breakpoint, or the key's)
 * and the pacing downshift (pacing.model_downshift).
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_EDIT_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_EDIT_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/*
 * After the scan: the body edited when one applies (*body, the request's
 * body bufs, ctx->body's model and spans, ctx->bp_added and
 * ctx->route.model_requested then say what changed), else untouched.  A platform
 * account is sent the same (Bedrock and Vertex take cache_control).  NGX_ERROR:
 * out of memory.
 */
ngx_int_t ngx_http_tokenbiryani_edit_body(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body);


#endif /* _NGX_HTTP_TOKENBIRYANI_EDIT_H_INCLUDED_ */
