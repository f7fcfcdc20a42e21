/*
 * Routing: what a request needs, the decision over every account, the
 * lease on the account chosen, and the lease given back after the attempt.
 * The one verb for choosing an account is "route".
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ROUTE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ROUTE_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/*
 * Before the first attempt: the candidates, and for a Messages request its
 * conversation, the conversation's owner and the need vector (count_tokens
 * and models need one concurrency slot and no tokens).
 */
/* ctx->route.session: the conversation the request continues, or 0 */
void ngx_http_tokenbiryani_route_session(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body);

ngx_int_t ngx_http_tokenbiryani_route_prepare(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body);

/* what every decision about this request is asked: strategy, model, need */
void ngx_http_tokenbiryani_route_input(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx, tb_route_in_t *in);

/*
 * One decision, and with lease the lease on its choice (ctx->route.lease).
 * NULL when no account can take the request now; ctx->route.decision says
 * whether one ever could.
 */
ngx_http_tokenbiryani_account_t *ngx_http_tokenbiryani_route(
    ngx_http_request_t *r, ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_uint_t lease);

/*
 * The attempt is over: its lease goes back, reconciled against the usage
 * when it succeeded.  The caller lets this worker's waiters know.
 */
void ngx_http_tokenbiryani_route_settle(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t success);

/* the lease timer: renews this worker's leases, takes back dead ones */
ngx_int_t ngx_http_tokenbiryani_route_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);


#endif /* _NGX_HTTP_TOKENBIRYANI_ROUTE_H_INCLUDED_ */
