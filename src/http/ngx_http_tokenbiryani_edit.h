
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
 * ctx->rare->model_requested then say what changed), else untouched.  A platform
 * account is sent the same (Bedrock and Vertex take cache_control).  NGX_ERROR:
 * out of memory.
 */
ngx_int_t ngx_http_tokenbiryani_edit_body(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body);

/* whether an edit may apply: a breakpoint the key (or the cache section)
 * adds and the client did not send, or a downshift map (the common case,
 * neither, costs these few comparisons) */
static ngx_inline ngx_uint_t
ngx_http_tokenbiryani_edit_wanted(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_uint_t  bp;

    bp = (ctx->key && ctx->key->auto_breakpoint != 2)
         ? ctx->key->auto_breakpoint : tmcf->tbcf->cache_auto_breakpoint;

    return (bp && !ctx->body.breakpoint)
           || tmcf->tbcf->pacing_model_downshift.n;
}


#endif /* _NGX_HTTP_TOKENBIRYANI_EDIT_H_INCLUDED_ */
