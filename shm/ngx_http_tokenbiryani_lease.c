/*
 * Leases: what an attempt reserved on an account, held in the zone until
 * it is given back.  Every lease expires unless the worker holding it
 * renews it, so a worker that dies does not strand its reservations: any
 * worker's timer takes expired ones back.
 */


#include "ngx_http_tokenbiryani_shm.h"


static void ngx_http_tokenbiryani_lease_drop(
    ngx_http_tokenbiryani_shm_t *sh, ngx_slab_pool_t *shpool,
    ngx_http_tokenbiryani_lease_t *lease, const tb_usage_t *usage,
    int64_t headers_ms, ngx_uint_t stale);


/*
 * Re-checks and reserves in one step under the lock: all of the need or
 * nothing.  NULL when the account cannot take it any more.
 */

ngx_http_tokenbiryani_lease_t *
ngx_http_tokenbiryani_lease_take(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, const tb_need_t *need, int64_t now,
    uint64_t *id, ngx_uint_t *probed)
{
    int                             took;
    ngx_slab_pool_t                *shpool;
    ngx_http_tokenbiryani_shm_t    *sh;
    ngx_http_tokenbiryani_lease_t  *lease;

    sh = tmcf->sh;
    shpool = tmcf->shpool;

    ngx_shmtx_lock(&shpool->mutex);

    lease = ngx_http_tokenbiryani_alloc_locked(tmcf,
                                  sizeof(ngx_http_tokenbiryani_lease_t));
    if (lease == NULL) {
        ngx_shmtx_unlock(&shpool->mutex);
        return NULL;
    }

    if (!tb_lease_reserve(a->sh, a->conf, &tmcf->breaker, need, now, &took))
    {
        ngx_slab_free_locked(shpool, lease);
        ngx_shmtx_unlock(&shpool->mutex);
        return NULL;
    }

    lease->id = ++sh->lease_seq;
    lease->slot = a->slot;
    lease->need = *need;
    lease->expires_ms = now + tmcf->lease_timeout;
    lease->pid = ngx_pid;
    lease->probed = took;

    ngx_queue_insert_tail(&sh->leases, &lease->queue);

    ngx_shmtx_unlock(&shpool->mutex);

    *id = lease->id;
    *probed = took;

    return lease;
}


/*
 * Exactly once: a lease already given back, or taken back from a worker
 * that seemed dead, is not given back twice (its id no longer matches).
 */

void
ngx_http_tokenbiryani_lease_give_back(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_lease_t *lease, uint64_t id,
    const tb_usage_t *usage, int64_t headers_ms, ngx_uint_t stale,
    ngx_uint_t probe_back)
{
    ngx_shmtx_lock(&tmcf->shpool->mutex);

    if (lease->id == id) {
        if (probe_back && lease->probed && lease->slot < tmcf->sh->nslots) {
            /* the probe was never sent: the next request probes */
            tmcf->sh->slots[lease->slot]->breaker.probe = 0;
        }

        ngx_http_tokenbiryani_lease_drop(tmcf->sh, tmcf->shpool, lease,
                                         usage, headers_ms, stale);
    }

    ngx_shmtx_unlock(&tmcf->shpool->mutex);

    ngx_http_tokenbiryani_capacity_changed(tmcf,
                                           ngx_http_tokenbiryani_now_ms());
}


static void
ngx_http_tokenbiryani_lease_drop(ngx_http_tokenbiryani_shm_t *sh,
    ngx_slab_pool_t *shpool, ngx_http_tokenbiryani_lease_t *lease,
    const tb_usage_t *usage, int64_t headers_ms, ngx_uint_t stale)
{
    if (lease->slot < sh->nslots) {
        /* leases taken from now on are sent after this one ended */
        tb_lease_release(sh->slots[lease->slot], &lease->need, usage,
                         headers_ms, (unsigned) stale, sh->lease_seq);
    }

    ngx_queue_remove(&lease->queue);

    lease->id = 0;
    ngx_slab_free_locked(shpool, lease);
}


/* held: this worker's leases, as ngx_http_tokenbiryani_held_t links */

void
ngx_http_tokenbiryani_lease_renew(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_queue_t *held, int64_t now)
{
    ngx_queue_t                  *q;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    if (ngx_queue_empty(held)) {
        return;
    }

    ngx_shmtx_lock(&tmcf->shpool->mutex);

    for (q = ngx_queue_head(held);
         q != ngx_queue_sentinel(held);
         q = ngx_queue_next(q))
    {
        ctx = ngx_queue_data(q, ngx_http_tokenbiryani_ctx_t, held);

        if (ctx->lease && ctx->lease->id == ctx->lease_id) {
            ctx->lease->expires_ms = now + tmcf->lease_timeout;
        }
    }

    ngx_shmtx_unlock(&tmcf->shpool->mutex);
}


ngx_uint_t
ngx_http_tokenbiryani_lease_reclaim(ngx_http_tokenbiryani_main_conf_t *tmcf,
    int64_t now)
{
    ngx_uint_t                      n;
    ngx_queue_t                    *q, *next;
    ngx_http_tokenbiryani_shm_t    *sh;
    ngx_http_tokenbiryani_lease_t  *lease;

    sh = tmcf->sh;
    n = 0;

    ngx_shmtx_lock(&tmcf->shpool->mutex);

    for (q = ngx_queue_head(&sh->leases);
         q != ngx_queue_sentinel(&sh->leases);
         q = next)
    {
        next = ngx_queue_next(q);
        lease = ngx_queue_data(q, ngx_http_tokenbiryani_lease_t, queue);

        if (lease->expires_ms > now) {
            continue;
        }

        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "tokenbiryani: took back a lease on account \"%s\" "
                      "that worker %P stopped renewing",
                      lease->slot < sh->nslots ? sh->slots[lease->slot]->id
                                               : "?",
                      lease->pid);

        if (lease->probed && lease->slot < sh->nslots) {
            /* a probe that will never report: the next request probes */
            sh->slots[lease->slot]->breaker.probe = 0;
        }

        ngx_http_tokenbiryani_lease_drop(sh, tmcf->shpool, lease, NULL, 0, 0);
        sh->leases_reclaimed++;
        n++;
    }

    ngx_shmtx_unlock(&tmcf->shpool->mutex);

    if (n) {
        ngx_http_tokenbiryani_capacity_changed(tmcf, now);
    }

    return n;
}


ngx_uint_t
ngx_http_tokenbiryani_lease_count(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_uint_t    n;
    ngx_queue_t  *q;

    n = 0;

    ngx_shmtx_lock(&tmcf->shpool->mutex);

    for (q = ngx_queue_head(&tmcf->sh->leases);
         q != ngx_queue_sentinel(&tmcf->sh->leases);
         q = ngx_queue_next(q))
    {
        n++;
    }

    ngx_shmtx_unlock(&tmcf->shpool->mutex);

    return n;
}
