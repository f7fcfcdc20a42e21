/*
 * Objects the upstream keeps for the account that made them (a message
 * batch, a file): which account holds each, which key made it, and what
 * the gateway last saw of it.  An rbtree keyed by a hash of the id (the id
 * itself compared), with a queue newest first for the lists.  At most
 * objects_max are kept; a new one makes room by dropping the oldest that
 * is over (a batch that ended and owes nothing), never one that is live.
 */


#include "ngx_http_tokenbiryani_zone.h"
#include "tb_hash.h"


#define NGX_HTTP_TB_OBJECT_SEED        0x6f626a6563747331ULL


static ngx_http_tokenbiryani_object_t *
ngx_http_tokenbiryani_object_find_locked(ngx_http_tokenbiryani_shm_t *sh,
    ngx_uint_t kind, const u_char *id, size_t len)
{
    ngx_rbtree_node_t               *node;
    ngx_http_tokenbiryani_object_t  *o;

    node = ngx_http_tokenbiryani_rbtree_find(&sh->obj_tree,
               tb_hash64(NGX_HTTP_TB_OBJECT_SEED, id, len));

    if (node == NULL) {
        return NULL;
    }

    o = (ngx_http_tokenbiryani_object_t *) node;

    if (o->v.kind != kind || o->v.id_len != len
        || ngx_memcmp(o->v.id, id, len) != 0)
    {
        return NULL;
    }

    return o;
}


static void
ngx_http_tokenbiryani_object_delete_locked(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_object_t *o)
{
    ngx_queue_remove(&o->queue);
    ngx_rbtree_delete(&zone->sh->obj_tree, &o->node);
    ngx_slab_free_locked(zone->shpool, o);
    zone->sh->nobjects--;
}


/* the oldest object that is over, dropped to make room: 1, or 0 if none */
static ngx_uint_t
ngx_http_tokenbiryani_object_drop_over_locked(
    ngx_http_tokenbiryani_zone_t *zone)
{
    ngx_queue_t                     *q;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_object_t  *o;

    sh = zone->sh;

    for (q = ngx_queue_last(&sh->obj_queue);
         q != ngx_queue_sentinel(&sh->obj_queue);
         q = ngx_queue_prev(q))
    {
        o = ngx_queue_data(q, ngx_http_tokenbiryani_object_t, queue);

        if (o->v.over && o->v.settled) {
            ngx_http_tokenbiryani_object_delete_locked(zone, o);
            sh->objects_dropped++;
            return 1;
        }
    }

    return 0;
}


static void
ngx_http_tokenbiryani_object_hold_locked(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_object_view_t *v, int64_t cost)
{
    tb_account_state_t                *st;
    ngx_http_tokenbiryani_keystate_t  *ks;

    st = (v->slot >= 0 && (ngx_uint_t) v->slot < zone->sh->nslots)
         ? zone->sh->slots[v->slot] : NULL;
    ks = v->key ? ngx_http_tokenbiryani_keystate_locked(zone, v->key) : NULL;

    if (st) {
        st->spend.reserved += cost;
        st->news = 1;
    }

    if (ks) {
        ks->spend.reserved += cost;
    }
}


/* its hold released, and what it cost charged (NULL: nothing), once */
static void
ngx_http_tokenbiryani_object_settle_locked(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_object_t *o,
    const ngx_http_tokenbiryani_charge_t *charge)
{
    tb_account_state_t                *st;
    ngx_http_tokenbiryani_keystate_t  *ks;

    if (o->v.settled) {
        return;
    }

    st = (o->v.slot >= 0 && (ngx_uint_t) o->v.slot < zone->sh->nslots)
         ? zone->sh->slots[o->v.slot] : NULL;
    ks = o->v.key ? ngx_http_tokenbiryani_keystate_locked(zone, o->v.key)
                  : NULL;

    ngx_http_tokenbiryani_caps_settle_locked(zone, ks, NULL, st, o->v.slot,
                                             o->v.reserved, charge);

    o->v.settled = 1;
    o->v.charged = charge ? charge->cost : 0;
    o->v.reserved = 0;
    zone->sh->objects_gen++;
}


ngx_int_t
ngx_http_tokenbiryani_object_settle(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, const u_char *id, size_t len,
    const ngx_http_tokenbiryani_charge_t *charge)
{
    ngx_int_t                        rc;
    ngx_http_tokenbiryani_object_t  *o;

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, kind, id, len);

    rc = (o == NULL) ? NGX_DECLINED : o->v.settled ? NGX_DONE : NGX_OK;

    if (rc == NGX_OK) {
        ngx_http_tokenbiryani_object_settle_locked(zone, o, charge);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


ngx_int_t
ngx_http_tokenbiryani_object_add(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_object_view_t *in, ngx_uint_t max)
{
    ngx_int_t                        rc;
    ngx_slab_pool_t                 *shpool;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_object_t  *o;

    if (in->id_len == 0 || in->id_len > NGX_HTTP_TB_OBJECT_ID_MAX) {
        return NGX_ERROR;
    }

    sh = zone->sh;
    shpool = zone->shpool;

    ngx_shmtx_lock(&shpool->mutex);

    if (ngx_http_tokenbiryani_rbtree_find(&sh->obj_tree,
            tb_hash64(NGX_HTTP_TB_OBJECT_SEED, in->id, in->id_len))
        != NULL)
    {
        /* known already (or another id of the same hash: refused too) */
        rc = NGX_DECLINED;
        goto done;
    }

    if (sh->nobjects >= max
        && !ngx_http_tokenbiryani_object_drop_over_locked(zone))
    {
        rc = NGX_BUSY;
        goto done;
    }

    o = ngx_http_tokenbiryani_alloc_locked(zone,
                                     sizeof(ngx_http_tokenbiryani_object_t));
    if (o == NULL) {
        rc = NGX_ERROR;
        goto done;
    }

    o->v = *in;

    if (in->reserved > 0) {
        /* what the batch may cost, held on its account's and key's ledgers
         * until its results are charged */
        ngx_http_tokenbiryani_object_hold_locked(zone, &o->v, in->reserved);
    }

    o->node.key = (ngx_rbtree_key_t) tb_hash64(NGX_HTTP_TB_OBJECT_SEED,
                                               in->id, in->id_len);
    ngx_rbtree_insert(&sh->obj_tree, &o->node);
    ngx_queue_insert_head(&sh->obj_queue, &o->queue);
    sh->nobjects++;
    sh->objects_gen++;

    rc = NGX_OK;

done:

    ngx_shmtx_unlock(&shpool->mutex);

    return rc;
}


ngx_int_t
ngx_http_tokenbiryani_object_get(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, const u_char *id, size_t len,
    ngx_http_tokenbiryani_object_view_t *out)
{
    ngx_http_tokenbiryani_object_t  *o;

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, kind, id, len);

    if (o) {
        *out = o->v;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return o ? NGX_OK : NGX_DECLINED;
}


ngx_int_t
ngx_http_tokenbiryani_object_seen(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, const u_char *id, size_t len, ngx_uint_t status,
    const int64_t counts[NGX_HTTP_TB_OBJECT_COUNTS], int64_t now)
{
    ngx_uint_t                       i;
    ngx_http_tokenbiryani_object_t  *o;

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, kind, id, len);

    if (o) {
        o->v.status = (u_char) status;
        o->v.seen_ms = now;

        for (i = 0; counts && i < NGX_HTTP_TB_OBJECT_COUNTS; i++) {
            if (counts[i] >= 0) {
                o->v.counts[i] = counts[i];
            }
        }

        zone->sh->objects_gen++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return o ? NGX_OK : NGX_DECLINED;
}


ngx_int_t
ngx_http_tokenbiryani_object_remove(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, const u_char *id, size_t len, int64_t now)
{
    ngx_http_tokenbiryani_charge_t   charge;
    ngx_http_tokenbiryani_object_t  *o;

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, kind, id, len);

    if (o) {
        if (!o->v.settled) {
            /* gone before its results were read: what it held is what it
             * is taken to have cost */
            charge.at_ms = now;
            charge.cost = o->v.reserved;
            ngx_memzero(charge.tokens, sizeof(charge.tokens));
            ngx_http_tokenbiryani_object_settle_locked(zone, o, &charge);
        }

        ngx_http_tokenbiryani_object_delete_locked(zone, o);
        zone->sh->objects_gen++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return o ? NGX_OK : NGX_DECLINED;
}


ngx_uint_t
ngx_http_tokenbiryani_object_list(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, uint64_t key, const u_char *after, size_t after_len,
    ngx_http_tokenbiryani_object_view_t *out, ngx_uint_t max,
    ngx_uint_t *more)
{
    ngx_uint_t                       n, past;
    ngx_queue_t                     *q;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_object_t  *o;

    sh = zone->sh;
    n = 0;
    past = (after == NULL);
    *more = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&sh->obj_queue);
         q != ngx_queue_sentinel(&sh->obj_queue);
         q = ngx_queue_next(q))
    {
        o = ngx_queue_data(q, ngx_http_tokenbiryani_object_t, queue);

        if (o->v.kind != kind || (key && o->v.key != key)) {
            continue;
        }

        if (!past) {
            past = (o->v.id_len == after_len
                    && ngx_memcmp(o->v.id, after, after_len) == 0);
            continue;
        }

        if (n == max) {
            *more = 1;
            break;
        }

        out[n++] = o->v;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}
