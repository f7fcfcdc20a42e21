/*
 * Session affinity: which account holds a conversation's prompt cache.
 * An rbtree keyed by the 64-bit session key, with an LRU queue: entries
 * expire after routing.affinity_ttl_seconds without a success, and when
 * the zone is full the least recently used ones make room.  One entry is
 * 64 bytes, the slab allocator's 64-byte class exactly.
 */


#include "ngx_http_tokenbiryani_zone.h"


static ngx_http_tokenbiryani_affinity_t *ngx_http_tokenbiryani_affinity_find(
    ngx_http_tokenbiryani_shm_t *sh, uint64_t session);
static void ngx_http_tokenbiryani_affinity_delete(
    ngx_http_tokenbiryani_shm_t *sh, ngx_slab_pool_t *shpool,
    ngx_http_tokenbiryani_affinity_t *e);


static uint32_t
ngx_http_tokenbiryani_affinity_clock(ngx_http_tokenbiryani_shm_t *sh,
    int64_t now)
{
    return (uint32_t) ((now - sh->aff_epoch_ms) / 1000);
}


/* the owner's slot index, or -1; *cached: its cached prompt, in tokens */

ngx_int_t
ngx_http_tokenbiryani_affinity_get(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t session, int64_t now, int64_t *cached)
{
    ngx_int_t                          slot;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_affinity_t  *e;

    sh = zone->sh;
    slot = -1;
    *cached = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    e = ngx_http_tokenbiryani_affinity_find(sh, session);

    if (e) {
        if (e->expires > ngx_http_tokenbiryani_affinity_clock(sh, now)) {
            slot = e->slot;
            *cached = (int64_t) e->cached * 64;

        } else {
            ngx_http_tokenbiryani_affinity_delete(sh, zone->shpool, e);
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return slot;
}


/*
 * When the entry was last told to the other instances, in units of a 32nd
 * of the time to live, modulo 256: in the byte of the rbtree node nothing
 * else uses (the entry is the slab's 64-byte class exactly).  An entry
 * lives at most 32 units, so the difference never wraps.
 */

static u_char
ngx_http_tokenbiryani_affinity_unit(ngx_http_tokenbiryani_zone_t *zone,
    uint32_t clock)
{
    uint32_t  unit;

    unit = (uint32_t) ngx_max(zone->tbcf->affinity_ttl_seconds / 32, 1);

    return (u_char) (clock / unit);
}


ngx_uint_t
ngx_http_tokenbiryani_affinity_set(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t session, ngx_uint_t slot, int64_t cached, int64_t now,
    ngx_uint_t told)
{
    u_char                             unit;
    uint32_t                           clock;
    ngx_uint_t                         share;
    ngx_slab_pool_t                   *shpool;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_affinity_t  *e;

    if (slot > 65535) {
        /* an entry holds 16 bits of slot */
        return NGX_HTTP_TB_AFFINITY_KEPT;
    }

    sh = zone->sh;
    shpool = zone->shpool;

    ngx_shmtx_lock(&shpool->mutex);

    clock = ngx_http_tokenbiryani_affinity_clock(sh, now);
    unit = ngx_http_tokenbiryani_affinity_unit(zone, clock);

    e = ngx_http_tokenbiryani_affinity_find(sh, session);

    if (e == NULL) {
        e = ngx_http_tokenbiryani_alloc_locked(zone,
                                     sizeof(ngx_http_tokenbiryani_affinity_t));
        if (e == NULL) {
            ngx_shmtx_unlock(&shpool->mutex);
            return NGX_HTTP_TB_AFFINITY_KEPT;
        }

        e->node.key = (ngx_rbtree_key_t) session;
        ngx_rbtree_insert(&sh->aff_tree, &e->node);
        sh->aff_entries++;
        share = NGX_HTTP_TB_AFFINITY_CHANGED;

    } else {
        ngx_queue_remove(&e->lru);

        share = (e->slot != slot) ? NGX_HTTP_TB_AFFINITY_CHANGED
                : ((u_char) (unit - e->node.data) >= 8)
                  ? NGX_HTTP_TB_AFFINITY_REFRESH : NGX_HTTP_TB_AFFINITY_KEPT;
    }

    ngx_queue_insert_head(&sh->aff_lru, &e->lru);

    if (told) {
        /* from another instance: nothing to tell back */
        share = NGX_HTTP_TB_AFFINITY_KEPT;
    }

    if (share != NGX_HTTP_TB_AFFINITY_KEPT || told) {
        e->node.data = unit;
    }

    e->slot = (uint16_t) slot;

    /* rounded down: what is discounted for it is never more than it holds */
    cached /= 64;
    e->cached = (uint16_t) (cached < 0 ? 0 : ngx_min(cached, 65535));
    e->expires = clock + (uint32_t) zone->tbcf->affinity_ttl_seconds;

    ngx_shmtx_unlock(&shpool->mutex);

    return share;
}


void
ngx_http_tokenbiryani_affinity_adopt(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t session, const u_char *value, size_t len, int64_t now)
{
    u_char     *sp;
    ngx_int_t   slot, cached;

    sp = ngx_strlchr((u_char *) value, (u_char *) value + len, ' ');
    if (sp == NULL || sp == value) {
        return;
    }

    cached = ngx_atoi(sp + 1, value + len - sp - 1);

    /* looked up, never made: the announcement is another instance's */
    slot = ngx_http_tokenbiryani_zone_slot_find(zone, value, sp - value);
    if (slot < 0) {
        /* an account this instance does not have */
        return;
    }

    (void) ngx_http_tokenbiryani_affinity_set(zone, session, (ngx_uint_t) slot,
                                              cached > 0 ? cached : 0, now, 1);
}


static ngx_http_tokenbiryani_affinity_t *
ngx_http_tokenbiryani_affinity_find(ngx_http_tokenbiryani_shm_t *sh,
    uint64_t session)
{
    return (ngx_http_tokenbiryani_affinity_t *)
               ngx_http_tokenbiryani_rbtree_find(&sh->aff_tree, session);
}


static void
ngx_http_tokenbiryani_affinity_delete(ngx_http_tokenbiryani_shm_t *sh,
    ngx_slab_pool_t *shpool, ngx_http_tokenbiryani_affinity_t *e)
{
    ngx_queue_remove(&e->lru);
    ngx_rbtree_delete(&sh->aff_tree, &e->node);
    ngx_slab_free_locked(shpool, e);
    sh->aff_entries--;
}


/* the zone is full: the least recently used session goes */
ngx_uint_t
ngx_http_tokenbiryani_affinity_evict(ngx_http_tokenbiryani_zone_t *zone)
{
    ngx_queue_t                  *q;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    if (ngx_queue_empty(&sh->aff_lru)) {
        return 0;
    }

    q = ngx_queue_last(&sh->aff_lru);
    ngx_http_tokenbiryani_affinity_delete(sh, zone->shpool,
        ngx_queue_data(q, ngx_http_tokenbiryani_affinity_t, lru));
    sh->aff_evicted++;

    return 1;
}


ngx_uint_t
ngx_http_tokenbiryani_affinity_drop_locked(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot)
{
    ngx_uint_t                         n;
    ngx_queue_t                       *q, *next;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_affinity_t  *e;

    sh = zone->sh;
    n = 0;

    for (q = ngx_queue_head(&sh->aff_lru);
         q != ngx_queue_sentinel(&sh->aff_lru);
         q = next)
    {
        next = ngx_queue_next(q);
        e = ngx_queue_data(q, ngx_http_tokenbiryani_affinity_t, lru);

        if (e->slot == slot) {
            ngx_http_tokenbiryani_affinity_delete(sh, zone->shpool, e);
            n++;
        }
    }

    return n;
}


