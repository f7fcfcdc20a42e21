/*
 * Accounts added at runtime, in the zone.
 *
 * Each is its id, its spec (JSON text, without the credential), the
 * credential sealed under the store's secret key (the zone never holds it
 * in the clear), the addresses its host resolved to when it was added, and
 * the slot its limits and leases live in.  Workers keep a usable copy and
 * rebuild it when the generation moves, so an account added, changed or
 * removed in one worker is there, changed or gone in every worker from its
 * next request.
 */


#include "ngx_http_tokenbiryani_zone.h"


ngx_http_tokenbiryani_racct_t *
ngx_http_tokenbiryani_racct_find_locked(ngx_http_tokenbiryani_shm_t *sh,
    const u_char *id, size_t len)
{
    ngx_queue_t                    *q;
    ngx_http_tokenbiryani_racct_t  *ra;

    for (q = ngx_queue_head(&sh->raccts);
         q != ngx_queue_sentinel(&sh->raccts);
         q = ngx_queue_next(q))
    {
        ra = ngx_queue_data(q, ngx_http_tokenbiryani_racct_t, queue);

        if (ra->id_len == len && ngx_memcmp(ra->data, id, len) == 0) {
            return ra;
        }
    }

    return NULL;
}


ngx_uint_t
ngx_http_tokenbiryani_racct_put(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_racct_view_t *in,
    const u_char fingerprint[8], int replenishment, ngx_uint_t create,
    ngx_uint_t max, ngx_uint_t *slot)
{
    u_char                                *p;
    ngx_uint_t                             rc;
    tb_account_state_t                    *st;
    ngx_http_tokenbiryani_shm_t           *sh;
    ngx_http_tokenbiryani_racct_t         *old, *ra;
    ngx_http_tokenbiryani_zone_account_t   za;

    sh = zone->sh;
    rc = NGX_HTTP_TB_RKEY_OK;

    ngx_shmtx_lock(&zone->shpool->mutex);

    old = ngx_http_tokenbiryani_racct_find_locked(sh, in->id.data,
                                                  in->id.len);

    if (ngx_http_tokenbiryani_grave_stale_locked(sh, TB_REC_ACCOUNT,
            in->id.data, in->id.len,
            old ? ngx_http_tokenbiryani_spec_gen(old->data + old->id_len + 1,
                                                 old->spec_len)
                : 0,
            ngx_http_tokenbiryani_spec_gen(in->spec.data, in->spec.len)))
    {
        rc = NGX_HTTP_TB_RKEY_STALE;
        goto done;
    }

    if (create && old) {
        rc = NGX_HTTP_TB_RKEY_EXISTS;
        goto done;
    }

    if (!create && old == NULL) {
        rc = NGX_HTTP_TB_RKEY_NONE;
        goto done;
    }

    if (create && sh->nraccts >= max) {
        rc = NGX_HTTP_TB_RKEY_FULL;
        goto done;
    }

    ra = ngx_slab_alloc_locked(zone->shpool,
                               offsetof(ngx_http_tokenbiryani_racct_t, data)
                               + in->id.len + in->spec.len + in->sealed.len
                               + 3);
    if (ra == NULL) {
        rc = NGX_HTTP_TB_RKEY_NOMEM;
        goto done;
    }

    if (old) {
        ra->slot = old->slot;
        st = sh->slots[old->slot];

    } else {
        ngx_memzero(&za, sizeof(ngx_http_tokenbiryani_zone_account_t));
        za.id = in->id.data;
        za.id_len = in->id.len;
        ngx_memcpy(za.fingerprint, fingerprint, 8);

        st = ngx_http_tokenbiryani_zone_slot_locked(sh, zone->shpool, &za,
                                                    &ra->slot);
        if (st == NULL) {
            ngx_slab_free_locked(zone->shpool, ra);
            rc = NGX_HTTP_TB_RKEY_NOMEM;
            goto done;
        }
    }

    st->live = 1;
    st->replenishment = replenishment;

    ra->version = ++sh->raccts_version;
    ra->naddrs = ngx_min(in->naddrs, NGX_HTTP_TB_RACCT_ADDRS);
    ngx_memcpy(ra->addrs, in->addrs,
               ra->naddrs * sizeof(ngx_http_tokenbiryani_raddr_t));

    ra->id_len = in->id.len;
    ra->spec_len = in->spec.len;
    ra->sealed_len = in->sealed.len;

    p = ngx_cpymem(ra->data, in->id.data, in->id.len);
    *p++ = '\0';
    p = ngx_cpymem(p, in->spec.data, in->spec.len);
    *p++ = '\0';
    p = ngx_cpymem(p, in->sealed.data, in->sealed.len);
    *p = '\0';

    if (old) {
        ngx_queue_insert_after(&old->queue, &ra->queue);
        ngx_queue_remove(&old->queue);
        ngx_slab_free_locked(zone->shpool, old);

    } else {
        ngx_queue_insert_tail(&sh->raccts, &ra->queue);
        sh->nraccts++;
    }

    *slot = ra->slot;

    (void) ngx_atomic_fetch_add(&sh->raccts_gen, 1);

done:

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


ngx_uint_t
ngx_http_tokenbiryani_racct_delete(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len, ngx_uint_t *slot)
{
    ngx_uint_t                      rc;
    ngx_http_tokenbiryani_shm_t    *sh;
    ngx_http_tokenbiryani_racct_t  *ra;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ra = ngx_http_tokenbiryani_racct_find_locked(sh, id, len);

    if (ra == NULL) {
        rc = NGX_HTTP_TB_RKEY_NONE;

    } else {
        *slot = ra->slot;

        /* the slot stays (history names it), but nothing routes to it */
        sh->slots[ra->slot]->live = 0;

        (void) ngx_http_tokenbiryani_affinity_drop_locked(zone, ra->slot);

        ngx_http_tokenbiryani_grave_put_locked(sh, TB_REC_ACCOUNT, id, len,
                    ngx_http_tokenbiryani_spec_gen(ra->data + ra->id_len + 1,
                                                   ra->spec_len));

        ngx_queue_remove(&ra->queue);
        ngx_slab_free_locked(zone->shpool, ra);
        sh->nraccts--;
        (void) ngx_atomic_fetch_add(&sh->raccts_gen, 1);
        rc = NGX_HTTP_TB_RKEY_OK;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


void
ngx_http_tokenbiryani_raccts_live_locked(ngx_http_tokenbiryani_shm_t *sh)
{
    ngx_queue_t                    *q;
    ngx_http_tokenbiryani_racct_t  *ra;

    for (q = ngx_queue_head(&sh->raccts);
         q != ngx_queue_sentinel(&sh->raccts);
         q = ngx_queue_next(q))
    {
        ra = ngx_queue_data(q, ngx_http_tokenbiryani_racct_t, queue);
        sh->slots[ra->slot]->live = 1;
    }
}


ngx_uint_t
ngx_http_tokenbiryani_racct_known(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_racct_view_t *v)
{
    u_char                         *spec;
    ngx_uint_t                      known;
    ngx_http_tokenbiryani_racct_t  *ra;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ra = ngx_http_tokenbiryani_racct_find_locked(zone->sh, v->id.data,
                                                 v->id.len);
    known = 0;

    if (ra) {
        spec = ra->data + ra->id_len + 1;

        known = (ra->spec_len == v->spec.len
                 && ra->sealed_len == v->sealed.len
                 && ngx_memcmp(spec, v->spec.data, v->spec.len) == 0
                 && ngx_memcmp(spec + ra->spec_len + 1, v->sealed.data,
                               v->sealed.len) == 0)
                ? 2 : 1;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return known;
}


uint64_t
ngx_http_tokenbiryani_raccts_gen(ngx_http_tokenbiryani_zone_t *zone)
{
    return (uint64_t) __atomic_load_n(&zone->sh->raccts_gen,
                                      __ATOMIC_ACQUIRE);
}


ngx_int_t
ngx_http_tokenbiryani_raccts_copy(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pool_t *pool, ngx_array_t *out, uint64_t *gen)
{
    u_char                              *p;
    size_t                               size, need;
    ngx_uint_t                           n;
    ngx_queue_t                         *q;
    ngx_http_tokenbiryani_shm_t         *sh;
    ngx_http_tokenbiryani_racct_t       *ra;
    ngx_http_tokenbiryani_racct_view_t  *v;

    sh = zone->sh;

    for ( ;; ) {
        /* the size first, then the copy if it still fits: no allocation
         * under the lock */

        ngx_shmtx_lock(&zone->shpool->mutex);

        size = 0;
        n = sh->nraccts;

        for (q = ngx_queue_head(&sh->raccts);
             q != ngx_queue_sentinel(&sh->raccts);
             q = ngx_queue_next(q))
        {
            ra = ngx_queue_data(q, ngx_http_tokenbiryani_racct_t, queue);
            size += ra->id_len + ra->spec_len + ra->sealed_len + 3;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);

        if (ngx_array_init(out, pool, n ? n : 1,
                           sizeof(ngx_http_tokenbiryani_racct_view_t))
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        p = ngx_pnalloc(pool, size ? size : 1);
        if (p == NULL) {
            return NGX_ERROR;
        }

        ngx_shmtx_lock(&zone->shpool->mutex);

        if (sh->nraccts != n) {
            ngx_shmtx_unlock(&zone->shpool->mutex);
            continue;
        }

        for (q = ngx_queue_head(&sh->raccts);
             q != ngx_queue_sentinel(&sh->raccts);
             q = ngx_queue_next(q))
        {
            ra = ngx_queue_data(q, ngx_http_tokenbiryani_racct_t, queue);

            need = ra->id_len + ra->spec_len + ra->sealed_len + 3;

            if (need > size) {
                break;
            }

            size -= need;

            v = ngx_array_push(out);   /* preallocated: never NULL */

            v->slot = ra->slot;
            v->version = ra->version;
            v->naddrs = ra->naddrs;
            ngx_memcpy(v->addrs, ra->addrs,
                       ra->naddrs * sizeof(ngx_http_tokenbiryani_raddr_t));

            v->id.data = p;
            v->id.len = ra->id_len;
            v->spec.data = p + ra->id_len + 1;
            v->spec.len = ra->spec_len;
            v->sealed.data = v->spec.data + ra->spec_len + 1;
            v->sealed.len = ra->sealed_len;

            p = ngx_cpymem(p, ra->data, need);
        }

        if (gen) {
            *gen = (uint64_t) sh->raccts_gen;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);

        if (q == ngx_queue_sentinel(&sh->raccts) || out->nelts == n) {
            return NGX_OK;
        }

        /* a record grew between the two looks: again */
    }
}
