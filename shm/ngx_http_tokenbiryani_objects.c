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
                                             o->v.held ? o->v.reserved : 0,
                                             charge);

    o->v.settled = 1;
    o->v.held = 0;

    if (charge) {
        o->v.charged = charge->cost;
    }

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


static ngx_int_t
ngx_http_tokenbiryani_object_add_locked(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_object_view_t *in, ngx_uint_t max)
{
    ngx_queue_t                     *q;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_object_t  *o, *next;

    sh = zone->sh;

    if (ngx_http_tokenbiryani_rbtree_find(&sh->obj_tree,
            tb_hash64(NGX_HTTP_TB_OBJECT_SEED, in->id, in->id_len))
        != NULL)
    {
        /* known already (or another id of the same hash: refused too) */
        return NGX_DECLINED;
    }

    if (sh->nobjects >= max
        && !ngx_http_tokenbiryani_object_drop_over_locked(zone))
    {
        return NGX_BUSY;
    }

    o = ngx_http_tokenbiryani_alloc_locked(zone,
                                     sizeof(ngx_http_tokenbiryani_object_t));
    if (o == NULL) {
        return NGX_ERROR;
    }

    o->v = *in;
    o->v.held = (in->held && in->reserved > 0 && !in->settled);

    if (o->v.held) {
        /* what the batch may cost, held on its account's and key's ledgers
         * until its results are charged */
        ngx_http_tokenbiryani_object_hold_locked(zone, &o->v, in->reserved);
    }

    o->node.key = (ngx_rbtree_key_t) tb_hash64(NGX_HTTP_TB_OBJECT_SEED,
                                               in->id, in->id_len);
    ngx_rbtree_insert(&sh->obj_tree, &o->node);

    /* newest first: a new one at the head, one read back in its place */
    for (q = ngx_queue_head(&sh->obj_queue);
         q != ngx_queue_sentinel(&sh->obj_queue);
         q = ngx_queue_next(q))
    {
        next = ngx_queue_data(q, ngx_http_tokenbiryani_object_t, queue);

        if (next->v.created_ms <= in->created_ms) {
            break;
        }
    }

    /* (the macro reads its first argument more than once) */
    q = ngx_queue_prev(q);
    ngx_queue_insert_after(q, &o->queue);
    sh->nobjects++;
    sh->objects_gen++;

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_object_adopt(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_object_view_t *in, ngx_uint_t max)
{
    ngx_int_t                        rc;
    ngx_http_tokenbiryani_object_t  *o;

    if (in->id_len == 0 || in->id_len > NGX_HTTP_TB_OBJECT_ID_MAX) {
        return NGX_ERROR;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, in->kind, in->id,
                                                 in->id_len);

    if (o == NULL) {
        rc = ngx_http_tokenbiryani_object_add_locked(zone, in, max);
        goto done;
    }

    if (o->v.slot != in->slot || o->v.key != in->key) {
        /* an id is made once, on one account for one key */
        rc = NGX_ABORT;
        goto done;
    }

    if (in->gen <= o->v.gen) {
        rc = NGX_DONE;
        goto done;
    }

    o->v.gen = in->gen;
    o->v.status = in->status;
    o->v.over = in->over;
    o->v.seen_ms = in->seen_ms;
    ngx_memcpy(o->v.counts, in->counts, sizeof(o->v.counts));

    if (in->settled && !o->v.settled) {
        /* its results read, and charged, by another gateway: what is held
         * for it here is let go */
        ngx_http_tokenbiryani_object_settle_locked(zone, o, NULL);
        o->v.charged = in->charged;
    }

    zone->sh->objects_gen++;
    rc = NGX_OK;

done:

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


ngx_int_t
ngx_http_tokenbiryani_object_record(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, const u_char *id, size_t len, int64_t now,
    tb_object_rec_t *rec, uint64_t *gen)
{
    ngx_uint_t                       i;
    tb_account_state_t              *st;
    ngx_http_tokenbiryani_object_t  *o;

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, kind, id, len);

    if (o == NULL) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_DECLINED;
    }

    o->v.gen = tb_rec_next_gen(o->v.gen, now);
    *gen = o->v.gen;

    st = (o->v.slot >= 0 && (ngx_uint_t) o->v.slot < zone->sh->nslots)
         ? zone->sh->slots[o->v.slot] : NULL;

    rec->kind = (int) o->v.kind;
    rec->status = (int) o->v.status;
    rec->over = o->v.over ? 1 : 0;
    rec->settled = o->v.settled ? 1 : 0;
    rec->created_ms = o->v.created_ms;
    rec->seen_ms = o->v.seen_ms;
    rec->reserved = o->v.reserved;
    rec->charged = o->v.charged;

    for (i = 0; i < NGX_HTTP_TB_OBJECT_COUNTS; i++) {
        rec->counts[i] = o->v.counts[i];
    }

    ngx_cpystrn((u_char *) rec->account, st ? (u_char *) st->id
                                            : (u_char *) "",
                sizeof(rec->account));
    ngx_cpystrn((u_char *) rec->key, o->v.key_name, sizeof(rec->key));

    rec->size = (o->v.kind == NGX_HTTP_TB_OBJECT_FILE) ? o->v.size : -1;
    rec->downloadable = (o->v.kind == NGX_HTTP_TB_OBJECT_FILE
                         && o->v.downloadable);
    ngx_cpystrn((u_char *) rec->filename, o->v.filename,
                sizeof(rec->filename));
    ngx_cpystrn((u_char *) rec->mime, o->v.mime, sizeof(rec->mime));

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_object_get(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, const u_char *id, size_t len,
    ngx_http_tokenbiryani_object_view_t *out)
{
    ngx_http_tokenbiryani_object_t  *o;

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, kind, id, len);

    if (o && out) {
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
    ngx_int_t                        rc;
    ngx_uint_t                       i;
    ngx_http_tokenbiryani_object_t  *o;

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, kind, id, len);

    if (o == NULL) {
        rc = NGX_DECLINED;
        goto done;
    }

    rc = (o->v.status == status) ? NGX_DONE : NGX_OK;

    o->v.status = status;
    o->v.over = o->v.over || status == TB_BATCH_ENDED;
    o->v.seen_ms = now;

    for (i = 0; counts && i < NGX_HTTP_TB_OBJECT_COUNTS; i++) {
        if (counts[i] >= 0 && o->v.counts[i] != counts[i]) {
            o->v.counts[i] = counts[i];
            rc = NGX_OK;
        }
    }

    zone->sh->objects_gen++;

done:

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


ngx_int_t
ngx_http_tokenbiryani_object_remove(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, const u_char *id, size_t len, int64_t now,
    ngx_http_tokenbiryani_object_view_t *out)
{
    ngx_http_tokenbiryani_charge_t   charge;
    ngx_http_tokenbiryani_object_t  *o;

    ngx_shmtx_lock(&zone->shpool->mutex);

    o = ngx_http_tokenbiryani_object_find_locked(zone->sh, kind, id, len);

    if (o) {
        if (!o->v.settled) {
            /* gone before its results were read: what it held here is what
             * it is taken to have cost (another gateway's hold, there) */
            charge.at_ms = now;
            charge.cost = o->v.held ? o->v.reserved : 0;
            ngx_memzero(charge.tokens, sizeof(charge.tokens));
            ngx_http_tokenbiryani_object_settle_locked(zone, o, &charge);
        }

        if (out) {
            *out = o->v;
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


ngx_uint_t
ngx_http_tokenbiryani_object_poller(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pid_t pid)
{
    return ngx_http_tokenbiryani_elect(zone, &zone->sh->objects_poller, pid);
}


ngx_int_t
ngx_http_tokenbiryani_object_due(ngx_http_tokenbiryani_zone_t *zone,
    int64_t before_ms, int64_t now, ngx_http_tokenbiryani_object_view_t *out,
    u_char account[TB_ID_MAX + 1])
{
    tb_account_state_t              *st;
    ngx_queue_t                     *q;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_object_t  *o, *due;

    sh = zone->sh;
    due = NULL;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&sh->obj_queue);
         q != ngx_queue_sentinel(&sh->obj_queue);
         q = ngx_queue_next(q))
    {
        o = ngx_queue_data(q, ngx_http_tokenbiryani_object_t, queue);

        if (o->v.kind == NGX_HTTP_TB_OBJECT_BATCH && o->v.held
            && !o->v.settled && o->v.seen_ms < before_ms
            && (due == NULL || o->v.seen_ms < due->v.seen_ms))
        {
            due = o;
        }
    }

    if (due) {
        due->v.seen_ms = now;
        *out = due->v;

        st = (due->v.slot >= 0 && (ngx_uint_t) due->v.slot < sh->nslots)
             ? sh->slots[due->v.slot] : NULL;

        ngx_cpystrn(account, st ? (u_char *) st->id : (u_char *) "",
                    TB_ID_MAX + 1);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return due ? NGX_OK : NGX_DECLINED;
}
