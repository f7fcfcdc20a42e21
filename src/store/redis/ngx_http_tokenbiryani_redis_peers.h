/*
 * The peers through Redis (store.backend: redis): the other gateways that
 * share this pool, and what this one exchanges with them.
 *
 * Capacity, by reservation.  Each gateway holds a share of every
 * account's windows, granted in Redis by one script that never grants
 * more than the peers leave (N:shares); it spends its slices of the
 * windows (see TB_SHARE_ONE in src/core/tb_account.h) in its own zone, so
 * the common request asks Redis nothing.  Shares follow demand (each asks
 * in proportion to the requests it routes, an idle one gives its share
 * back), a gateway that stops renewing loses its share, and with Redis
 * away each holds itself to one part in as many gateways as it last saw.
 *
 * News.  What one gateway reads of an account (its windows, by the time
 * the request was sent; a cooldown, an exhaustion, an open breaker), what
 * it holds that its windows do not count yet, and what its keys and
 * conversations ran up (src/core/tb_peers.h) are told to the peers on the
 * changes channel, coalesced, and folded into their zones
 * (shm/ngx_http_tokenbiryani_peers.c).
 *
 * Conversations.  A gateway that has no owner for a conversation asks
 * Redis before it routes the turn, and one that gives it a new owner says
 * so, so a conversation that reaches any peer stays on the account that
 * holds its prompt cache.  Nothing here waits: a question to Redis is
 * asked and the request goes on when it is answered, or at once when
 * Redis is away (what the zone knows is used then).
 *
 * Capacity and news are kept by one worker per gateway: the one elected to
 * write the store.  The request path reaches the owners only through the
 * store's table (ngx_http_tokenbiryani_store_owner_get/_put).
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_REDIS_PEERS_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_REDIS_PEERS_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_redis.h"
#include "ngx_http_tokenbiryani_redis_history.h"


/* the master, a new zone: the share the peers leave, read from Redis */
void ngx_http_tokenbiryani_rpeers_load(redisContext *c,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_rnames_t *n);

/* every worker: its connection and the names under the namespace */
void ngx_http_tokenbiryani_rpeers_init_worker(
    ngx_http_tokenbiryani_redis_t *cmd,
    const ngx_http_tokenbiryani_rnames_t *n);

/* the elected worker: the share and the news kept, on its connection */
void ngx_http_tokenbiryani_rpeers_start(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log);
void ngx_http_tokenbiryani_rpeers_stop(void);

/*
 * A message on the changes channel, without its "m ", "u " or "w ": an
 * account's news, what keys and conversations ran up, a peer asking to be
 * told everything again
 */
void ngx_http_tokenbiryani_rpeers_message(
    ngx_http_tokenbiryani_main_conf_t *tmcf, u_char kind, const u_char *p,
    size_t len);

/* the elected worker subscribed: the peers are asked to tell again */
void ngx_http_tokenbiryani_rpeers_subscribed(void);

/* the store's peers: owner_get, owner_put, object_get and the claims
 * (ngx_http_tokenbiryani_store.h) */
extern const ngx_http_tokenbiryani_store_peers_t
    ngx_http_tokenbiryani_rpeers_ops;


#endif /* _NGX_HTTP_TOKENBIRYANI_REDIS_PEERS_H_INCLUDED_ */
