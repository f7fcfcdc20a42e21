/*
 * The batches the gateway polls for itself, so that a batch that ends
 * while nobody reads its results is charged all the same: one worker of
 * the instance (elected in the zone), every batch.poll_interval_seconds,
 * takes the open batch whose hold is in this zone that was read longest
 * ago (and not within the last ten intervals), asks its account for it,
 * and once it has ended reads its results as they come - never held
 * whole - and charges them at the batch price, once, as a client's
 * reading would have.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_POLLER_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_POLLER_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* every worker, at its start: the timer (batch.api or batch.enabled) */
ngx_int_t ngx_http_tokenbiryani_poller_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);


#endif /* _NGX_HTTP_TOKENBIRYANI_POLLER_H_INCLUDED_ */
