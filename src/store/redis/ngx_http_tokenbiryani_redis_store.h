/*
 * The shared store (store.backend: redis): the durable state the sqlite
 * backend keeps, in one Redis that several gateways use, and the changes
 * one of them makes told to the others.
 *
 * Written by each worker on its own connection, without waiting; read by
 * the master into a new zone (a blocking read, before any worker serves);
 * kept in step by one worker per instance, subscribed to the namespace's
 * changes, which puts each change another instance made into the zone
 * and, whenever it (re)subscribes, compares the whole of it.  Redis that
 * is away is the store degraded: serving goes on from the zone.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_REDIS_STORE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_REDIS_STORE_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_redis.h"
#include "ngx_http_tokenbiryani_redis_history.h"


/* at configuration: the URL, where it points, this instance's name */
ngx_int_t ngx_http_tokenbiryani_redis_conf(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* the master, a new zone: the store read into it (Redis away: a warning,
 * the zone starts with the file's only and is filled once it is back) */
ngx_int_t ngx_http_tokenbiryani_redis_load(ngx_shm_zone_t *shm_zone,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t fresh);

ngx_int_t ngx_http_tokenbiryani_redis_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);
void ngx_http_tokenbiryani_redis_exit_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* this worker's connection and the names under the namespace; NULL when
 * the store is not redis */
ngx_http_tokenbiryani_redis_t *ngx_http_tokenbiryani_redis_worker(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_rnames_t **names);

/* as ngx_http_tokenbiryani_store_post(), for every job but RESOLVE */
ngx_int_t ngx_http_tokenbiryani_redis_post(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_job_t *job);

/* between its two files: the backend's operations (set at
 * configuration), the read of every account (at load and on a pull) and
 * the name the strategy setting is kept under */
extern const ngx_http_tokenbiryani_store_ops_t
    ngx_http_tokenbiryani_redis_ops;
extern const char  ngx_http_tokenbiryani_redis_lua_accounts[];

#define NGX_HTTP_TB_SETTING_STRATEGY   "setting.routing.strategy"


#endif /* _NGX_HTTP_TOKENBIRYANI_REDIS_STORE_H_INCLUDED_ */
