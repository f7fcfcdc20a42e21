/*
 * An example of routing strategies that live in a module of their own
 * (load it after ngx_http_tokenbiryani_module):
 *
 *   sticky_frugal     multipliers only: affinity first, then the cheapest
 *                     cost tier before headroom;
 *   fewest_requests   its own terms: keep a conversation on its owner, and
 *                     place new ones on the account that has served the
 *                     fewest requests so far.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_tokenbiryani_strategy.h"


static ngx_int_t ngx_http_tokenbiryani_example_preconfiguration(
    ngx_conf_t *cf);
static void ngx_http_tokenbiryani_fewest_requests(void *data,
    const tb_route_in_t *in, const tb_cand_t *c, const tb_cand_out_t *out,
    size_t index, size_t count, double *terms);


static tb_strategy_t  ngx_http_tokenbiryani_sticky_frugal = {
    "sticky_frugal",
    "affinity first, then the cheapest tier (example plugin)",
    { 1, .5, 1, 1, 1, 3 }, 0, NULL, { NULL }, NULL
};


static tb_strategy_t  ngx_http_tokenbiryani_fewest = {
    "fewest_requests",
    "affinity, then the account that served the fewest (example plugin)",
    { 0 }, 0, ngx_http_tokenbiryani_fewest_requests,
    { "affinity", "requests", NULL }, NULL
};


static ngx_http_module_t  ngx_http_tokenbiryani_example_strategy_module_ctx = {
    ngx_http_tokenbiryani_example_preconfiguration, /* preconfiguration */
    NULL,                                  /* postconfiguration */
    NULL,                                  /* create main configuration */
    NULL,                                  /* init main configuration */
    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */
    NULL,                                  /* create location configuration */
    NULL                                   /* merge location configuration */
};


ngx_module_t  ngx_http_tokenbiryani_example_strategy_module = {
    NGX_MODULE_V1,
    &ngx_http_tokenbiryani_example_strategy_module_ctx, /* module context */
    NULL,                                  /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_int_t
ngx_http_tokenbiryani_example_preconfiguration(ngx_conf_t *cf)
{
    if (ngx_http_tokenbiryani_register_strategy(cf,
                                        &ngx_http_tokenbiryani_sticky_frugal)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_tokenbiryani_register_strategy(cf,
                                                 &ngx_http_tokenbiryani_fewest);
}


static void
ngx_http_tokenbiryani_fewest_requests(void *data, const tb_route_in_t *in,
    const tb_cand_t *c, const tb_cand_out_t *out, size_t index, size_t count,
    double *terms)
{
    size_t    i;
    uint64_t  most;

    /* normalised over the accounts that can take the request */

    most = 0;

    for (i = 0; i < count; i++) {
        if (out[i].verdict == TB_V_ELIGIBLE
            && c[i].st->requests_total > most)
        {
            most = c[i].st->requests_total;
        }
    }

    terms[0] = ((int) index == in->owner) ? 2.0 : 0;
    terms[1] = most ? -(double) c[index].st->requests_total / (double) most
                    : 0;
}
