/*
 * Instances that share one pool (store.backend: redis): what this zone
 * tells the others its keys and conversations ran up, and what it keeps
 * of what they told, so that caps and key rpm hold on the sum of every
 * instance (src/core/tb_told.h).  Each instance's own is kept as that
 * instance's and replaced when it says again: told twice is counted once.
 */


#include "ngx_http_tokenbiryani_zone.h"


#define NGX_HTTP_TB_MINUTE_MS          60000


/* the place of instance who among n, or a free one, or the oldest */
static ngx_http_tokenbiryani_peer_spend_t *
ngx_http_tokenbiryani_peer_place(ngx_http_tokenbiryani_peer_spend_t *first,
    size_t stride, ngx_uint_t n, uint64_t who)
{
    ngx_uint_t                           i;
    ngx_http_tokenbiryani_peer_spend_t  *p, *oldest;

    oldest = first;

    for (i = 0, p = first; i < n;
         i++, p = (void *) ((u_char *) p + stride))
    {
        if (p->who == who) {
            return p;
        }

        if (p->who == 0 || (oldest->who && p->at_ms < oldest->at_ms)) {
            oldest = p;
        }
    }

    return oldest;
}


/* what a key admitted here in the last minute.  Under the lock. */
static int64_t
ngx_http_tokenbiryani_key_rpm_used(ngx_http_tokenbiryani_shm_t *sh,
    uint64_t key, int64_t now)
{
    int64_t                       used;
    ngx_uint_t                    i;
    ngx_http_tokenbiryani_rpm_t  *w;

    w = ngx_http_tokenbiryani_rpm_find_locked(sh, key);

    if (w == NULL) {
        return 0;
    }

    used = 0;

    for (i = 0; i < w->size; i++) {
        used += (w->times[i] > now - NGX_HTTP_TB_MINUTE_MS);
    }

    return used;
}


ngx_uint_t
ngx_http_tokenbiryani_key_others_rpm(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, int64_t now)
{
    int64_t                            sum;
    ngx_uint_t                         i;
    ngx_http_tokenbiryani_keystate_t  *ks;

    ks = ngx_http_tokenbiryani_keystate_find(zone, key);

    if (ks == NULL) {
        return 0;
    }

    sum = 0;

    for (i = 0; i < NGX_HTTP_TB_KEY_PEERS; i++) {
        if (ks->peers[i].who
            && ks->peers[i].at_ms + NGX_HTTP_TB_MINUTE_MS > now)
        {
            sum += ks->peers[i].rpm;
        }
    }

    return (ngx_uint_t) sum;
}


void
ngx_http_tokenbiryani_key_spend(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, int64_t now, ngx_http_tokenbiryani_key_spend_t *out)
{
    int64_t                            ttl;
    ngx_uint_t                         i;
    ngx_http_tokenbiryani_keystate_t  *ks;

    ngx_memzero(out, sizeof(ngx_http_tokenbiryani_key_spend_t));
    ttl = zone->spend_bucket_ms * TB_LEDGER_BUCKETS;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ks = ngx_http_tokenbiryani_keystate_find(zone, key);

    if (ks) {
        out->window_cost = tb_ledger_spent(&ks->spend, now,
                                           zone->spend_bucket_ms, NULL);
        out->reserved = ks->spend.reserved;
        out->rpm = ngx_http_tokenbiryani_key_rpm_used(zone->sh, key, now);
        out->others_rpm = ngx_http_tokenbiryani_key_others_rpm(zone, key,
                                                               now);

        for (i = 0; i < NGX_HTTP_TB_KEY_PEERS; i++) {
            if (ks->peers[i].who && ks->peers[i].at_ms + ttl > now) {
                out->others += ks->peers[i].spend.window_cost
                               + ks->peers[i].spend.reserved;
            }
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


static void
ngx_http_tokenbiryani_told_spend(tb_told_spend_t *t, const tb_ledger_t *l,
    int64_t now, int64_t bm)
{
    t->window_cost = tb_ledger_spent(l, now, bm, &t->window_turns);
    t->reserved = l->reserved;
    t->reserved_turns = l->reserved_turns;
}


ngx_uint_t
ngx_http_tokenbiryani_spend_tell(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now, tb_told_key_t *keys, ngx_uint_t max_keys,
    ngx_uint_t *nkeys, tb_told_session_t *sessions, ngx_uint_t max_sessions)
{
    int64_t                            bm;
    ngx_uint_t                         nk, ns;
    ngx_queue_t                       *q, *next;
    tb_told_key_t                      t;
    tb_told_session_t                 *ts;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_session_t   *s;
    ngx_http_tokenbiryani_keystate_t  *ks;

    sh = zone->sh;
    bm = zone->spend_bucket_ms;
    nk = 0;
    ns = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /* the keys whose window, reservations or rpm moved since told */

    for (q = ngx_queue_head(&sh->keys);
         q != ngx_queue_sentinel(&sh->keys) && nk < max_keys;
         q = ngx_queue_next(q))
    {
        ks = ngx_queue_data(q, ngx_http_tokenbiryani_keystate_t, queue);

        ngx_memzero(&t, sizeof(tb_told_key_t));
        t.key = ks->key;
        ngx_http_tokenbiryani_told_spend(&t.spend, &ks->spend, now, bm);
        t.rpm = ngx_http_tokenbiryani_key_rpm_used(sh, ks->key, now);

        if (ngx_memcmp(&t, &ks->told, sizeof(tb_told_key_t)) != 0) {
            ks->told = t;
            keys[nk++] = t;
        }
    }

    /* the conversations charged or reserved on since told */

    for (q = ngx_queue_head(&sh->sess_dirty);
         q != ngx_queue_sentinel(&sh->sess_dirty) && ns < max_sessions;
         q = next)
    {
        next = ngx_queue_next(q);
        s = ngx_queue_data(q, ngx_http_tokenbiryani_session_t, dirty);

        ngx_queue_remove(q);
        s->is_dirty = 0;

        if (s->turns == 0 && s->ledger.reserved_turns == 0) {
            /* nothing of its own: made for the others' news */
            continue;
        }

        ts = &sessions[ns++];
        ngx_memzero(ts, sizeof(tb_told_session_t));

        ts->session = (uint64_t) s->node.key;
        ngx_http_tokenbiryani_told_spend(&ts->spend, &s->ledger, now, bm);
        ts->cost = s->cost;
        ts->turns = (int64_t) s->turns;
        ts->unpriced = s->unpriced;
        ngx_memcpy(ts->tokens, s->tokens, sizeof(ts->tokens));
        ts->first_ms = s->first_ms;
        ts->last_ms = s->last_ms;
        ngx_memcpy(ts->key, s->key, ngx_min(s->key_len, TB_ID_MAX));

        if (s->slot >= 0 && (ngx_uint_t) s->slot < sh->nslots) {
            ngx_cpystrn((u_char *) ts->account,
                        (u_char *) sh->slots[s->slot]->id, TB_ID_MAX + 1);
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    *nkeys = nk;

    return ns;
}


void
ngx_http_tokenbiryani_spend_told_key(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t who, int64_t now, const tb_told_key_t *t)
{
    ngx_http_tokenbiryani_keystate_t    *ks;
    ngx_http_tokenbiryani_peer_spend_t  *p;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /* made if this instance has not seen the key yet: it will */
    ks = ngx_http_tokenbiryani_keystate_locked(zone, t->key);

    if (ks) {
        p = ngx_http_tokenbiryani_peer_place(ks->peers,
                              sizeof(ngx_http_tokenbiryani_peer_spend_t),
                              NGX_HTTP_TB_KEY_PEERS, who);
        p->who = who;
        p->at_ms = now;
        p->spend = t->spend;
        p->rpm = t->rpm;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_spend_told_session(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t who, int64_t now, const tb_told_session_t *t)
{
    size_t                                 size;
    ngx_http_tokenbiryani_session_t       *s;
    ngx_http_tokenbiryani_peer_spend_t    *p;
    ngx_http_tokenbiryani_peer_session_t  *ps;

    ngx_shmtx_lock(&zone->shpool->mutex);

    s = ngx_http_tokenbiryani_session_locked(zone, t->session,
                                             (u_char *) t->key,
                                             ngx_strlen(t->key), NULL, now);

    if (s && s->peers == NULL) {
        size = NGX_HTTP_TB_SESSION_PEERS
               * sizeof(ngx_http_tokenbiryani_peer_session_t);

        s->peers = ngx_slab_alloc_locked(zone->shpool, size);

        if (s->peers) {
            ngx_memzero(s->peers, size);
        }
    }

    if (s == NULL || s->peers == NULL) {
        /* no room: its caps count what this instance ran up only */
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return;
    }

    p = ngx_http_tokenbiryani_peer_place(&s->peers[0].spend,
                          sizeof(ngx_http_tokenbiryani_peer_session_t),
                          NGX_HTTP_TB_SESSION_PEERS, who);
    ps = (ngx_http_tokenbiryani_peer_session_t *) p;

    ps->spend.who = who;
    ps->spend.at_ms = now;
    ps->spend.spend = t->spend;
    ps->spend.rpm = 0;
    ps->cost = t->cost;
    ps->turns = t->turns;
    ps->unpriced = t->unpriced;
    ngx_memcpy(ps->tokens, t->tokens, sizeof(ps->tokens));
    ps->first_ms = t->first_ms;
    ps->last_ms = t->last_ms;
    ngx_cpystrn(ps->account, (u_char *) t->account, TB_ID_MAX + 1);

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_spend_retell(ngx_http_tokenbiryani_zone_t *zone)
{
    ngx_uint_t                         i;
    ngx_queue_t                       *q;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_session_t   *s;
    ngx_http_tokenbiryani_keystate_t  *ks;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&sh->keys);
         q != ngx_queue_sentinel(&sh->keys);
         q = ngx_queue_next(q))
    {
        ks = ngx_queue_data(q, ngx_http_tokenbiryani_keystate_t, queue);

        /* told nothing: anything is news */
        ngx_memset(&ks->told, 0xff, sizeof(tb_told_key_t));
    }

    for (q = ngx_queue_head(&sh->sess_lru);
         q != ngx_queue_sentinel(&sh->sess_lru);
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_tokenbiryani_session_t, lru);

        if (s->turns || s->ledger.reserved_turns) {
            ngx_http_tokenbiryani_session_dirty(sh, s);
        }
    }

    for (i = 0; i < sh->nslots; i++) {
        sh->slots[i]->news = 1;
        sh->slots[i]->org_told = 0;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}
