/*
 * A key's state in the zone, shared by every worker: what it has in
 * flight and waiting, its spend ledger, its conversations.  Under the
 * lock.
 */


#include "ngx_http_tokenbiryani_zone.h"


/*
 * The element of list whose uint64_t key (at key_off in it, its queue link
 * at link_off) is key, or NULL.  Under the lock.
 */

static void *
ngx_http_tokenbiryani_queue_find(ngx_queue_t *list, size_t link_off,
    size_t key_off, uint64_t key)
{
    u_char       *e;
    ngx_queue_t  *q;

    for (q = ngx_queue_head(list);
         q != ngx_queue_sentinel(list);
         q = ngx_queue_next(q))
    {
        e = (u_char *) q - link_off;

        if (*(uint64_t *) (e + key_off) == key) {
            return e;
        }
    }

    return NULL;
}


/* a key's counters, or NULL: the zone's lock is held */

ngx_http_tokenbiryani_keystate_t *
ngx_http_tokenbiryani_keystate_find(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key)
{
    return ngx_http_tokenbiryani_queue_find(&zone->sh->keys,
               offsetof(ngx_http_tokenbiryani_keystate_t, queue),
               offsetof(ngx_http_tokenbiryani_keystate_t, key), key);
}


/* a key's rpm window, or NULL; under the lock */

ngx_http_tokenbiryani_rpm_t *
ngx_http_tokenbiryani_rpm_find_locked(ngx_http_tokenbiryani_shm_t *sh,
    uint64_t key)
{
    return ngx_http_tokenbiryani_queue_find(&sh->rpm,
               offsetof(ngx_http_tokenbiryani_rpm_t, queue),
               offsetof(ngx_http_tokenbiryani_rpm_t, key), key);
}


ngx_http_tokenbiryani_keystate_t *
ngx_http_tokenbiryani_keystate_locked(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key)
{
    ngx_http_tokenbiryani_keystate_t  *ks;

    if (key == 0) {
        return NULL;
    }

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
    ngx_queue_insert_tail(&zone->sh->keys, &ks->queue);

    return ks;
}


/* a key's word from its peers: told within a minute */

ngx_uint_t
ngx_http_tokenbiryani_keystate_peers_rpm(ngx_http_tokenbiryani_keystate_t *ks,
    int64_t now)
{
    int64_t     sum;
    ngx_uint_t  i;

    if (ks == NULL) {
        return 0;
    }

    sum = 0;

    for (i = 0; i < NGX_HTTP_TB_KEY_PEERS; i++) {
        if (ks->peers[i].who
            && ks->peers[i].at_ms + NGX_HTTP_TB_KEY_PEER_MS > now)
        {
            sum += ks->peers[i].rpm;
        }
    }

    return (ngx_uint_t) sum;
}
