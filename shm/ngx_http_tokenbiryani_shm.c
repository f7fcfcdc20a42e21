/*
 * tokenbiryani shared zone: account slots and pool-wide counters.
 */


#include "ngx_http_tokenbiryani_shm.h"


static tb_account_state_t *ngx_http_tokenbiryani_shm_slot(
    ngx_http_tokenbiryani_shm_t *sh, ngx_slab_pool_t *shpool,
    ngx_http_tokenbiryani_account_t *a);
static ngx_uint_t ngx_http_tokenbiryani_slot_index(
    ngx_http_tokenbiryani_shm_t *sh, tb_account_state_t *slot);
static ngx_int_t ngx_http_tokenbiryani_shm_ring(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_shm_t *sh,
    ngx_slab_pool_t *shpool);


ngx_int_t
ngx_http_tokenbiryani_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_tokenbiryani_main_conf_t  *otmcf = data;

    size_t                              len;
    ngx_uint_t                          i;
    ngx_slab_pool_t                    *shpool;
    tb_account_state_t                 *slot;
    ngx_http_tokenbiryani_shm_t        *sh;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    tmcf->shpool = shpool;

    if (otmcf && otmcf->sh) {
        /* a reload that kept the zone: the pool's state lives on */
        sh = otmcf->sh;

    } else if (shm_zone->shm.exists) {
        sh = shpool->data;

    } else {
        sh = ngx_slab_calloc(shpool, sizeof(ngx_http_tokenbiryani_shm_t));
        if (sh == NULL) {
            return NGX_ERROR;
        }

        sh->magic = NGX_HTTP_TB_SHM_MAGIC;
        sh->created_ms = ngx_http_tokenbiryani_now_ms();

        ngx_queue_init(&sh->leases);
        ngx_queue_init(&sh->waiting[0]);
        ngx_queue_init(&sh->waiting[1]);
        ngx_queue_init(&sh->rpm);

        /* a waiter that never tried has blocked_gen 0: never current */
        sh->cap_gen = 1;

        ngx_rbtree_init(&sh->aff_tree, &sh->aff_sentinel,
                        ngx_rbtree_insert_value);
        ngx_queue_init(&sh->aff_lru);
        sh->aff_epoch_ms = sh->created_ms;

        shpool->data = sh;

        len = sizeof(" in tokenbiryani zone \"\"") + shm_zone->shm.name.len;

        shpool->log_ctx = ngx_slab_alloc(shpool, len);
        if (shpool->log_ctx == NULL) {
            return NGX_ERROR;
        }

        ngx_sprintf(shpool->log_ctx, " in tokenbiryani zone \"%V\"%Z",
                    &shm_zone->shm.name);

        shpool->log_nomem = 0;
    }

    if (sh->magic != NGX_HTTP_TB_SHM_MAGIC) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "tokenbiryani zone \"%V\" holds foreign data",
                      &shm_zone->shm.name);
        return NGX_ERROR;
    }

    tmcf->sh = sh;

    ngx_shmtx_lock(&shpool->mutex);

    if (ngx_http_tokenbiryani_shm_ring(tmcf, sh, shpool) != NGX_OK) {
        ngx_shmtx_unlock(&shpool->mutex);

        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "tokenbiryani zone \"%V\" is too small for an "
                      "inspector of %ui requests (%uz bytes each): make the "
                      "zone larger or observability.event_buffer smaller",
                      &shm_zone->shm.name,
                      (ngx_uint_t) tmcf->tbcf->observability_event_buffer,
                      sizeof(ngx_http_tokenbiryani_record_t));
        return NGX_ERROR;
    }

    sh->generation++;

    for (i = 0; i < sh->nslots; i++) {
        sh->slots[i]->live = 0;
    }

    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        slot = ngx_http_tokenbiryani_shm_slot(sh, shpool, &a[i]);
        if (slot == NULL) {
            ngx_shmtx_unlock(&shpool->mutex);

            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "tokenbiryani zone \"%V\" is too small for %ui "
                          "accounts", &shm_zone->shm.name,
                          tmcf->accounts.nelts);
            return NGX_ERROR;
        }

        slot->live = 1;
        a[i].sh = slot;
        a[i].slot = ngx_http_tokenbiryani_slot_index(sh, slot);
    }

    ngx_shmtx_unlock(&shpool->mutex);

    return NGX_OK;
}


static tb_account_state_t *
ngx_http_tokenbiryani_shm_slot(ngx_http_tokenbiryani_shm_t *sh,
    ngx_slab_pool_t *shpool, ngx_http_tokenbiryani_account_t *a)
{
    ngx_uint_t           i, n;
    tb_account_state_t  *slot, **slots;

    /*
     * A slot belongs to an id *and* a credential + host fingerprint: when a
     * reload gives an id another credential, that is another account with
     * its own limits, so it gets a fresh slot while workers of the
     * previous configuration finish on the old one.
     */

    for (i = 0; i < sh->nslots; i++) {
        slot = sh->slots[i];

        if (ngx_strlen(slot->id) == a->id.len
            && ngx_strncmp(slot->id, a->id.data, a->id.len) == 0
            && ngx_memcmp(slot->fingerprint, a->fingerprint, 8) == 0)
        {
            return slot;
        }
    }

    if (sh->nslots == sh->slots_size) {
        n = sh->slots_size ? sh->slots_size * 2 : 16;

        slots = ngx_slab_calloc_locked(shpool,
                                       n * sizeof(tb_account_state_t *));
        if (slots == NULL) {
            return NULL;
        }

        if (sh->nslots) {
            ngx_memcpy(slots, sh->slots,
                       sh->nslots * sizeof(tb_account_state_t *));
            ngx_slab_free_locked(shpool, sh->slots);
        }

        sh->slots = slots;
        sh->slots_size = n;
    }

    slot = ngx_slab_calloc_locked(shpool, sizeof(tb_account_state_t));
    if (slot == NULL) {
        return NULL;
    }

    tb_account_state_init(slot, (char *) a->id.data, a->fingerprint);

    sh->slots[sh->nslots++] = slot;

    return slot;
}


static ngx_uint_t
ngx_http_tokenbiryani_slot_index(ngx_http_tokenbiryani_shm_t *sh,
    tb_account_state_t *slot)
{
    ngx_uint_t  i;

    for (i = 0; i < sh->nslots; i++) {
        if (sh->slots[i] == slot) {
            return i;
        }
    }

    return 0;
}


/*
 * The inspector's ring, sized by observability.event_buffer.  A reload
 * that changes the size starts a new ring (the old history goes).
 */

static ngx_int_t
ngx_http_tokenbiryani_shm_ring(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_shm_t *sh, ngx_slab_pool_t *shpool)
{
    size_t                           size;
    ngx_uint_t                       n;
    ngx_http_tokenbiryani_record_t  *ring;

    n = (ngx_uint_t) tmcf->tbcf->observability_event_buffer;

    if (sh->ring && sh->ring_size == n) {
        return NGX_OK;
    }

    ring = NULL;

    if (n) {
        size = n * sizeof(ngx_http_tokenbiryani_record_t);

        ring = ngx_slab_alloc_locked(shpool, size);
        if (ring == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(ring, size);
    }

    if (sh->ring) {
        ngx_slab_free_locked(shpool, sh->ring);
    }

    sh->ring = ring;
    sh->ring_size = n;

    return NGX_OK;
}


ngx_uint_t
ngx_http_tokenbiryani_shm_observe(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, const tb_rl_obs_t *obs,
    ngx_int_t status, int64_t now_ms)
{
    unsigned  result;

    ngx_shmtx_lock(&tmcf->shpool->mutex);

    result = tb_account_observe(a->sh, obs, now_ms);
    a->sh->last_status = status;

    ngx_shmtx_unlock(&tmcf->shpool->mutex);

    /* a window seen again may hold more than was thought */
    ngx_http_tokenbiryani_capacity_changed(tmcf, now_ms);

    return result;
}


ngx_uint_t
ngx_http_tokenbiryani_shm_rr_next(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    return (ngx_uint_t) ngx_atomic_fetch_add(&tmcf->sh->rr_cursor, 1);
}


void
ngx_http_tokenbiryani_shm_attempt_start(ngx_http_tokenbiryani_account_t *a,
    ngx_uint_t leased, int64_t now_ms)
{
    /* a lease counts itself in flight when it is taken */
    if (!leased) {
        __atomic_add_fetch(&a->sh->inflight, 1, __ATOMIC_RELAXED);
    }

    __atomic_add_fetch(&a->sh->requests_total, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&a->sh->last_used_ms, now_ms, __ATOMIC_RELAXED);
}


/*
 * An attempt is over: the outcome's account action and the breaker, under
 * the lock.  Returns 1 when the breaker opened.
 */

ngx_uint_t
ngx_http_tokenbiryani_shm_attempt_end(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, ngx_uint_t leased,
    const tb_outcome_t *o, uint64_t model_hash, const char *model,
    size_t model_len, ngx_uint_t probed, int64_t now)
{
    int  opened;

    if (!leased) {
        __atomic_sub_fetch(&a->sh->inflight, 1, __ATOMIC_RELAXED);
    }

    ngx_shmtx_lock(&tmcf->shpool->mutex);

    if (o == NULL) {
        /* cancelled, or not the account's doing: neither way */
        opened = tb_breaker_record(&a->sh->breaker, &tmcf->breaker,
                                   TB_OUT_NEUTRAL, (int) probed, now);

    } else {
        opened = tb_account_apply(a->sh, o, &tmcf->breaker, model_hash,
                                  model, model_len, (int) probed, now);
    }

    ngx_shmtx_unlock(&tmcf->shpool->mutex);

    if (o && o->kind != TB_KIND_OK) {
        __atomic_add_fetch(&a->sh->failures_total, 1, __ATOMIC_RELAXED);
    }

    /* a breaker closed, a probe slot given back */
    ngx_http_tokenbiryani_capacity_changed(tmcf, now);

    return (ngx_uint_t) opened;
}


void
ngx_http_tokenbiryani_shm_set_enabled(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, ngx_uint_t enable, int64_t now)
{
    ngx_shmtx_lock(&tmcf->shpool->mutex);

    if (enable) {
        tb_account_clear(a->sh);

    } else {
        a->sh->disabled = 1;
        a->sh->disabled_ms = now;
        ngx_cpystrn((u_char *) a->sh->disabled_reason,
                    (u_char *) "disabled by an operator",
                    sizeof(a->sh->disabled_reason));
    }

    ngx_shmtx_unlock(&tmcf->shpool->mutex);

    ngx_http_tokenbiryani_capacity_changed(tmcf, now);
}


void
ngx_http_tokenbiryani_shm_snapshot(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, tb_account_state_t *copy)
{
    ngx_shmtx_lock(&tmcf->shpool->mutex);
    ngx_memcpy(copy, a->sh, sizeof(tb_account_state_t));
    ngx_shmtx_unlock(&tmcf->shpool->mutex);
}
