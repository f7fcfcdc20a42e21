/*
 * Capacity shared between gateways that share a Redis (store.backend:
 * redis), by reservation.  Each gateway holds a share of every account's
 * windows, granted in Redis by one script that never grants more than
 * the others leave (N:shares); it spends its slices of the windows (see
 * TB_SHARE_ONE in src/core/tb_account.h) in its own zone, so the common
 * request asks Redis nothing.  Shares follow demand (each asks in
 * proportion to the requests it routes, an idle one gives its share
 * back), a gateway that stops renewing loses its share, and with Redis
 * away each holds itself to one part in as many gateways as it last saw.
 *
 * What one gateway reads of an account (its windows, by the time the
 * request was sent; a cooldown, an exhaustion, an open breaker) and what
 * it holds that its windows do not count yet are told to the others on
 * the changes channel, coalesced, and folded into their zones.
 *
 * One worker per gateway does this: the one elected to write the store.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_REDIS_CAPACITY_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_REDIS_CAPACITY_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_redis.h"
#include "ngx_http_tokenbiryani_redis_history.h"


/* the master, a new zone: the share the others leave, read from Redis */
void ngx_http_tokenbiryani_rcap_load(redisContext *c,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_rnames_t *n);

/* the elected worker: the share and the news kept, on its connection */
void ngx_http_tokenbiryani_rcap_start(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_redis_t *cmd,
    const ngx_http_tokenbiryani_rnames_t *n, ngx_log_t *log);
void ngx_http_tokenbiryani_rcap_stop(void);

/*
 * A message on the changes channel, without its "m ", "u " or "w ": an
 * account's news, what keys and conversations ran up, an instance asking
 * to be told everything again
 */
void ngx_http_tokenbiryani_rcap_message(
    ngx_http_tokenbiryani_main_conf_t *tmcf, u_char kind, const u_char *p,
    size_t len);

/* the elected worker subscribed: the others are asked to tell again */
void ngx_http_tokenbiryani_rcap_subscribed(void);


#endif /* _NGX_HTTP_TOKENBIRYANI_REDIS_CAPACITY_H_INCLUDED_ */
