/*
 * The shared zone: every worker's view of the pool.  This is the only code
 * that takes the zone lock (the slab pool's own mutex, the one lock the
 * master recovers when a worker dies holding it).
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


#define NGX_HTTP_TB_SHM_MAGIC   0x74627a31      /* "tbz1" */


struct ngx_http_tokenbiryani_shm_s {
    uint32_t                       magic;
    uint64_t                       generation;    /* configurations loaded */
    int64_t                        created_ms;
    ngx_atomic_t                   rr_cursor;     /* round robin position */

    ngx_uint_t                     nslots;        /* account slots made */
    ngx_uint_t                     slots_size;
    tb_account_state_t           **slots;
};


ngx_int_t ngx_http_tokenbiryani_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);

void ngx_http_tokenbiryani_shm_observe(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, const tb_rl_obs_t *obs,
    ngx_int_t status, int64_t now_ms);

ngx_uint_t ngx_http_tokenbiryani_shm_rr_next(
    ngx_http_tokenbiryani_main_conf_t *tmcf);

void ngx_http_tokenbiryani_shm_attempt_start(
    ngx_http_tokenbiryani_account_t *a, int64_t now_ms);
void ngx_http_tokenbiryani_shm_attempt_end(
    ngx_http_tokenbiryani_account_t *a, ngx_uint_t failed);

/* a consistent copy of a slot, for reports */
void ngx_http_tokenbiryani_shm_snapshot(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, tb_account_state_t *copy);


#endif /* _NGX_HTTP_TOKENBIRYANI_SHM_H_INCLUDED_ */
