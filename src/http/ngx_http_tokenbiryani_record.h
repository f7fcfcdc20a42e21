/*
 * The request inspector's record of a request.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_RECORD_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_RECORD_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_batches.h"


/* the price of the request's model, NULL if it has none */
const tb_model_price_t *ngx_http_tokenbiryani_price(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * The request's cost from its usage (ctx->cost, ctx->prices_as_of), once:
 * -1 when its usage or its model's price is unknown.
 */
int64_t ngx_http_tokenbiryani_settle_cost(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_ctx_t *ctx);

/* from the request pool's cleanup: allocates nothing */
void ngx_http_tokenbiryani_record(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * A charge the gateway made of its own, with no client's request (the
 * results of a batch read in the background): a record of its own, by
 * id rid ("tbp_..."), in the inspector and the usage history as a request
 * of kind kind by key on account slot would be
 */
void ngx_http_tokenbiryani_record_own(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *rid, ngx_uint_t kind, const u_char *key, ngx_int_t slot,
    const ngx_http_tokenbiryani_results_t *rd, int64_t started_ms);


#endif /* _NGX_HTTP_TOKENBIRYANI_RECORD_H_INCLUDED_ */
