/*
 * Pacing's reader: with pacing.mode: enforcing and a weekly budget, one
 * worker (elected in the zone) reads the pool's spend in the budget week
 * from the usage history every few seconds, in the store's thread, and
 * keeps it in the zone for every worker's requests to pace by
 * (ngx_http_tokenbiryani_admit_paced).
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_PACER_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_PACER_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* how often the week's spend is read again, ms */
#define NGX_HTTP_TB_PACER_MS           5000


ngx_int_t ngx_http_tokenbiryani_pacer_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* whether this configuration paces requests by the week's spend */
ngx_uint_t ngx_http_tokenbiryani_pacer_on(
    ngx_http_tokenbiryani_main_conf_t *tmcf);


#endif /* _NGX_HTTP_TOKENBIRYANI_PACER_H_INCLUDED_ */
