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


ngx_uint_t
ngx_http_tokenbiryani_racct_put(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_racct_view_t *in,
    const u_char fingerprint[8], int replenishment, ngx_uint_t create,
    ngx_uint_t max, ngx_uint_t *slot)
{
    ngx_uint_t                             rc;
    tb_account_state_t                    *st;
    ngx_http_tokenbiryani_shm_t           *sh;
    ngx_http_tokenbiryani_rrec_t          *r;
    ngx_http_tokenbiryani_racct_t         *old, *ra;
    ngx_http_tokenbiryani_zone_account_t   za;

    sh = zone->sh;
    rc = NGX_HTTP_TB_RKEY_OK;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (ngx_http_tokenbiryani_rrec_stale_locked(sh, TB_REC_ACCOUNT,
                                                in->id.data, in->id.len,
                                                in->spec.data, in->spec.len,
                                                &r))
    {
        rc = NGX_HTTP_TB_RKEY_STALE;
        goto done;
    }

    old = (ngx_http_tokenbiryani_racct_t *) r;

    if (create && old) {
        rc = NGX_HTTP_TB_RKEY_EXISTS;
        goto done;
    }

    if (!create && old == NULL) {
        rc = NGX_HTTP_TB_RKEY_NONE;
        goto done;
    }

    if (create && sh->raccts.n >= max) {
        rc = NGX_HTTP_TB_RKEY_FULL;
        goto done;
    }

    ra = (ngx_http_tokenbiryani_racct_t *)
             ngx_http_tokenbiryani_rrec_alloc_locked(zone, TB_REC_ACCOUNT,
                 in->id.data, in->id.len, in->spec.data, in->spec.len,
                 in->sealed.data, in->sealed.len);
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

    ngx_http_tokenbiryani_rrec_link_locked(zone, TB_REC_ACCOUNT, r,
                                           &ra->rec);

    *slot = ra->slot;

done:

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


ngx_uint_t
ngx_http_tokenbiryani_racct_delete(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len, ngx_uint_t *slot)
{
    ngx_uint_t                      rc;
    ngx_http_tokenbiryani_racct_t  *ra;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ra = (ngx_http_tokenbiryani_racct_t *)
             ngx_http_tokenbiryani_rrec_find_locked(zone->sh, TB_REC_ACCOUNT,
                                                    id, len);

    if (ra == NULL) {
        rc = NGX_HTTP_TB_RKEY_NONE;

    } else {
        *slot = ra->slot;

        /* the slot stays (history names it), but nothing routes to it */
        zone->sh->slots[ra->slot]->live = 0;

        (void) ngx_http_tokenbiryani_affinity_drop_locked(zone, ra->slot);

        ngx_http_tokenbiryani_rrec_remove_locked(zone, TB_REC_ACCOUNT,
                                                 &ra->rec);
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

    for (q = ngx_queue_head(&sh->raccts.queue);
         q != ngx_queue_sentinel(&sh->raccts.queue);
         q = ngx_queue_next(q))
    {
        ra = ngx_queue_data(q, ngx_http_tokenbiryani_racct_t, rec.queue);
        sh->slots[ra->slot]->live = 1;
    }
}


ngx_uint_t
ngx_http_tokenbiryani_racct_known(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_racct_view_t *v)
{
    ngx_uint_t                     known;
    ngx_http_tokenbiryani_rrec_t  *r;

    ngx_shmtx_lock(&zone->shpool->mutex);

    r = ngx_http_tokenbiryani_rrec_find_locked(zone->sh, TB_REC_ACCOUNT,
                                               v->id.data, v->id.len);
    known = 0;

    if (r) {
        known = ngx_http_tokenbiryani_rrec_same(r, v->spec.data, v->spec.len,
                                                v->sealed.data, v->sealed.len)
                ? 2 : 1;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return known;
}
