/*
 * Settings an operator changes at runtime (POST /admin/settings), held in
 * the zone for every worker and kept in the store: the strategy.  A
 * worker keeps the one it resolved and looks again only when the zone's
 * generation moves: one atomic load per request.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_SETTINGS_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_SETTINGS_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* a strategy by name, built in or a plugin's; NULL: none */
const tb_strategy_t *ngx_http_tokenbiryani_find_strategy(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *name);

/*
 * the strategies known, built in first, then those other modules
 * registered: the n-th (*plugin: a module's), or NULL past the last
 */
const tb_strategy_t *ngx_http_tokenbiryani_strategy_nth(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t n,
    ngx_uint_t *plugin);

/* the strategy Messages requests are routed by now */
const tb_strategy_t *ngx_http_tokenbiryani_strategy(
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* whether the strategy is the runtime's, not the file's */
ngx_uint_t ngx_http_tokenbiryani_strategy_is_runtime(
    ngx_http_tokenbiryani_main_conf_t *tmcf);


/*
 * The helper that signals the master for POST /admin/reload, started by
 * the master as each configuration loads; ask: NGX_OK (the master will
 * reload), NGX_DECLINED (no helper: nginx -t, no pid file), NGX_ERROR.
 */
ngx_int_t ngx_http_tokenbiryani_reloader_start(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log);
ngx_int_t ngx_http_tokenbiryani_reloader_ask(
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* the master exits: its helper stopped and reaped */
void ngx_http_tokenbiryani_reloader_exit(
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* a worker: the write ends of other configurations' helpers closed */
void ngx_http_tokenbiryani_reloader_worker(
    ngx_http_tokenbiryani_main_conf_t *tmcf);


#endif /* _NGX_HTTP_TOKENBIRYANI_SETTINGS_H_INCLUDED_ */
