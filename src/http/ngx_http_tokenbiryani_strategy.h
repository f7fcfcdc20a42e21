/*
 * tokenbiryani for NGINX: routing strategies from other modules.
 *
 * A dynamic module loaded after ngx_http_tokenbiryani_module can add a
 * named strategy that routing.strategy then selects.  A strategy is either
 * a set of multipliers of routing.weights (the six terms affinity,
 * headroom, priority, load, errors, cost - see tb_router.h), or a terms()
 * function that scores each eligible account itself; either way the
 * filters, the leases and the inspector work as for the built-in ones.
 *
 * Register from the module's http preconfiguration hook, which runs before
 * the tokenbiryani_config file is read:
 *
 *     static tb_strategy_t  my_strategy = {
 *         "my_strategy", "what it does",
 *         { 1, 1, 1, 1, 1, 1 }, 0, NULL, { NULL }, NULL
 *     };
 *
 *     static ngx_int_t
 *     my_preconfiguration(ngx_conf_t *cf)
 *     {
 *         return ngx_http_tokenbiryani_register_strategy(cf, &my_strategy);
 *     }
 *
 * The strategy (and what its data points at) must live as long as the
 * configuration: a static, or memory from cf->pool.  A name may not be
 * registered twice, nor shadow a built-in one.  The module's nginx config
 * script adds tokenbiryani's src/core and src/http to ngx_module_incs.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_STRATEGY_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_STRATEGY_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "tb_router.h"


ngx_int_t ngx_http_tokenbiryani_register_strategy(ngx_conf_t *cf,
    const tb_strategy_t *strategy);


#endif /* _NGX_HTTP_TOKENBIRYANI_STRATEGY_H_INCLUDED_ */
