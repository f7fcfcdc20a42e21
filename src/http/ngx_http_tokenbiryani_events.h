/*
 * The admission and settlement events, as error_log lines at info.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_EVENTS_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_EVENTS_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* a decision: remaining (per window, before the lease) may be NULL */
void ngx_http_tokenbiryani_log_admission(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    int64_t *remaining, const char *decision, const char *reason);

/* an attempt's end, and what comes next */
void ngx_http_tokenbiryani_log_settlement(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    const char *next);


#endif /* _NGX_HTTP_TOKENBIRYANI_EVENTS_H_INCLUDED_ */
