/*
 * The peers: the other gateways that share this pool (store.backend:
 * redis).  What this zone tells them of its accounts and what it takes
 * from their word, the share of every account's windows it holds; what it
 * tells them its keys and conversations ran up and what it keeps of what
 * they told, so that caps and key rpm hold on the sum of every gateway
 * (src/core/tb_peers.h).  Each peer's own is kept as that peer's and
 * replaced when it says again: told twice is counted once.  The transport
 * is src/store/redis/ngx_http_tokenbiryani_redis_peers.c.
 */


#include "ngx_http_tokenbiryani_zone.h"


#define NGX_HTTP_TB_MINUTE_MS          60000


void
ngx_http_tokenbiryani_peers_withhold(ngx_http_tokenbiryani_zone_t *zone,
    uint32_t withheld, ngx_uint_t peers, int64_t now)
{
    uint32_t                      was;
    ngx_uint_t                    i;
    tb_account_state_t           *st;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    if (withheld > TB_SHARE_ONE) {
        withheld = TB_SHARE_ONE;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    was = sh->withheld;
    sh->withheld = withheld;

    if (peers) {
        sh->peers = peers;
        sh->granted_ms = now;

        /* once others were seen, Redis away or not */
        sh->shared |= (peers > 1);
    }

    for (i = 0; i < sh->nslots; i++) {
        st = sh->slots[i];

        if (st->shared != sh->shared) {
            tb_account_share(st, sh->shared);
        }

        /* the slices take their new share of the limit */
        tb_slice_reshare(st, withheld, now);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (withheld < was) {
        /* a larger share: waiters may fit now */
        ngx_http_tokenbiryani_capacity_changed(zone, now);
    }
}


void
ngx_http_tokenbiryani_peers_share(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_share_state_t *ss)
{
    ngx_shmtx_lock(&zone->shpool->mutex);
    ngx_http_tokenbiryani_share_read(zone->sh, ss);
    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * The next live account from slot *i on, *i moved past it; NULL: none
 * left.  Under the lock.
 */
static tb_account_state_t *
ngx_http_tokenbiryani_peers_next(ngx_http_tokenbiryani_shm_t *sh,
    ngx_uint_t *i)
{
    tb_account_state_t  *st;

    while (*i < sh->nslots) {
        st = sh->slots[(*i)++];

        if (st->live) {
            return st;
        }
    }

    return NULL;
}


void
ngx_http_tokenbiryani_peers_news(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now, ngx_http_tokenbiryani_peers_told_t *t)
{
    int64_t              holds[2];
    ngx_uint_t           i;
    tb_account_state_t  *st;

    i = 0;
    t->nnews = 0;
    t->norgs = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    while ((t->nnews < t->max || t->norgs < t->max)
           && (st = ngx_http_tokenbiryani_peers_next(zone->sh, &i)))
    {
        if (t->norgs < t->max && !st->org_told && st->org[0] != '\0') {
            st->org_told = 1;

            ngx_memcpy(t->orgs[t->norgs].id, st->id, sizeof(st->id));
            ngx_memcpy(t->orgs[t->norgs].fingerprint, st->fingerprint, 8);
            ngx_memcpy(t->orgs[t->norgs].org, st->org, TB_ORG_MAX);
            t->norgs++;
        }

        if (t->nnews == t->max) {
            continue;
        }

        holds[0] = tb_account_held(st, TB_WIN_REQUESTS, now);
        holds[1] = tb_account_held(st, TB_WIN_INPUT, now);

        if (!st->news && holds[0] == st->told_holds[0]
            && holds[1] == st->told_holds[1])
        {
            continue;
        }

        st->news = 0;
        st->told_holds[0] = holds[0];
        st->told_holds[1] = holds[1];

        tb_account_news(st, &zone->breaker, zone->spend_bucket_ms, now,
                        &t->news[t->nnews].news);
        ngx_memcpy(t->news[t->nnews].id, st->id, sizeof(st->id));
        ngx_memcpy(t->news[t->nnews].fingerprint, st->fingerprint, 8);
        t->nnews++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_uint_t
ngx_http_tokenbiryani_peers_adopt(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len, const u_char fingerprint[8],
    const tb_account_news_t *news, const u_char *org, size_t org_len,
    uint64_t who, int64_t now)
{
    ngx_int_t                     i;
    ngx_uint_t                    moved;
    tb_account_state_t           *st;
    ngx_http_tokenbiryani_shm_t  *sh;

    if (news == NULL && org_len == 0) {
        return 0;
    }

    sh = zone->sh;
    moved = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /*
     * the live account it speaks of: the same id with the same credential
     * (the same id with another credential is another account)
     */

    i = ngx_http_tokenbiryani_zone_find_locked(sh, id, len, fingerprint, 1);
    st = (i >= 0) ? sh->slots[i] : NULL;

    if (st && news) {
        /* a window read more recently may hold more than was thought */
        (void) tb_account_adopt(st, news, who, now);
        moved = 1;

    } else if (st) {
        /* what the other read of it is as good as an answer here; theirs,
         * already told; a domain left may hold more than was thought */
        moved = ngx_http_tokenbiryani_zone_learn_org_locked(sh, st, org,
                                                            org_len, 1);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (moved) {
        ngx_http_tokenbiryani_capacity_changed(zone, now);
    }

    return moved;
}


/* the place of peer who among n, or a free one, or the oldest */
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
        out->rate = tb_ledger_rate(&ks->spend, now, zone->spend_bucket_ms);
        out->rpm = ngx_http_tokenbiryani_key_rpm_used(zone->sh, key, now);
        out->others_rpm = ngx_http_tokenbiryani_keystate_peers_rpm(ks, now);

        for (i = 0; i < NGX_HTTP_TB_KEY_PEERS; i++) {
            if (ks->peers[i].who && ks->peers[i].at_ms + ttl > now) {
                out->others += ks->peers[i].spend.window_cost
                               + ks->peers[i].spend.reserved;
            }
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


int64_t
ngx_http_tokenbiryani_key_frees(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, int64_t now, int64_t limit)
{
    int64_t                            at;
    ngx_http_tokenbiryani_keystate_t  *ks;

    at = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ks = ngx_http_tokenbiryani_keystate_find(zone, key);

    if (ks) {
        at = tb_ledger_frees_at(&ks->spend, now, zone->spend_bucket_ms,
                                limit, 0);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return at;
}


static void
ngx_http_tokenbiryani_told_spend(tb_peer_spend_t *t, const tb_ledger_t *l,
    int64_t now, int64_t bm)
{
    t->window_cost = tb_ledger_spent(l, now, bm, &t->window_turns);
    t->reserved = l->reserved;
    t->reserved_turns = l->reserved_turns;
}


ngx_uint_t
ngx_http_tokenbiryani_peers_tell(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now, tb_peer_key_t *keys, ngx_uint_t max_keys,
    ngx_uint_t *nkeys, tb_peer_session_t *sessions, ngx_uint_t max_sessions)
{
    int64_t                            bm;
    ngx_uint_t                         nk, ns;
    ngx_queue_t                       *q, *next;
    tb_peer_key_t                      t;
    tb_peer_session_t                 *ts;
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

        ngx_memzero(&t, sizeof(tb_peer_key_t));
        t.key = ks->key;
        ngx_http_tokenbiryani_told_spend(&t.spend, &ks->spend, now, bm);
        t.rpm = ngx_http_tokenbiryani_key_rpm_used(sh, ks->key, now);

        if (ngx_memcmp(&t, &ks->told, sizeof(tb_peer_key_t)) != 0) {
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
            /* nothing of its own: made for the peers' news */
            continue;
        }

        ts = &sessions[ns++];
        ngx_memzero(ts, sizeof(tb_peer_session_t));

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
ngx_http_tokenbiryani_peers_told_key(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t who, int64_t now, const tb_peer_key_t *t)
{
    ngx_http_tokenbiryani_keystate_t    *ks;
    ngx_http_tokenbiryani_peer_spend_t  *p;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /* made if this gateway has not seen the key yet: it will */
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
ngx_http_tokenbiryani_peers_told_session(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t who, int64_t now, const tb_peer_session_t *t)
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
        /* no room: its caps count what this gateway ran up only */
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
ngx_http_tokenbiryani_peers_retell(ngx_http_tokenbiryani_zone_t *zone)
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
        ngx_memset(&ks->told, 0xff, sizeof(tb_peer_key_t));
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
