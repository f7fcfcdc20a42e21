/*
 * A key's state in the zone, shared by every worker: what it has in
 * flight and waiting, its spend ledger, its conversations.  Under the
 * lock.
 */


#include "ngx_http_tokenbiryani_zone.h"


/* a key's counters, or NULL: the zone's lock is held */

ngx_http_tokenbiryani_keystate_t *
ngx_http_tokenbiryani_keystate_find(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key)
{
    ngx_queue_t                       *q;
    ngx_http_tokenbiryani_keystate_t  *ks;

    for (q = ngx_queue_head(&zone->sh->keys);
         q != ngx_queue_sentinel(&zone->sh->keys);
         q = ngx_queue_next(q))
    {
        ks = ngx_queue_data(q, ngx_http_tokenbiryani_keystate_t, queue);

        if (ks->key == key) {
            return ks;
        }
    }

    return NULL;
}


ngx_http_tokenbiryani_keystate_t *
ngx_http_tokenbiryani_keystate_locked(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key)
{
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_keystate_t  *ks;

    if (key == 0) {
        return NULL;
    }

    sh = zone->sh;

    ks = ngx_http_tokenbiryani_keystate_find(zone, key);
    if (ks) {
        return ks;
    }

    ks = ngx_http_tokenbiryani_alloc_locked(zone,
                                sizeof(ngx_http_tokenbiryani_keystate_t));
    if (ks == NULL) {
        /* counted nowhere: the key goes unlimited rather than refused */
        return NULL;
    }

    ks->key = key;
    ks->last_used_ms = 0;
    ks->inflight = 0;
    ks->queued = 0;
    ks->nsessions = 0;
    ngx_memzero(&ks->spend, sizeof(tb_ledger_t));
    ngx_queue_insert_tail(&sh->keys, &ks->queue);

    return ks;
}
