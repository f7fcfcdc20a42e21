/*
 * Spend: the ledgers every cap is checked against, and the conversations.
 *
 * Three ledgers can hold a request back: its key's (in the key's state),
 * its conversation's (a session, below) and, per attempt, its account's
 * (in the account's slot).  Each counts what was settled in the trailing
 * spend window and what requests in flight reserved: a lease reserves the
 * attempt's estimated cost on all three in the step that takes it, and
 * giving the lease back releases the estimate and charges what the
 * attempt cost.  So caps hold under concurrency, and a dead worker's
 * reservations go with its leases.
 *
 * Sessions: an rbtree keyed by the session key (already scoped by the
 * virtual key), in an LRU queue, most recently charged first.  At most
 * NGX_HTTP_TB_SESSIONS are kept; the least recently charged one without a
 * reservation makes room, and so do they when the zone is full.
 */


#include "ngx_http_tokenbiryani_zone.h"


static ngx_http_tokenbiryani_session_t *ngx_http_tokenbiryani_session_find(
    ngx_http_tokenbiryani_shm_t *sh, uint64_t session);
static void ngx_http_tokenbiryani_session_copy(
    ngx_http_tokenbiryani_session_view_t *v,
    const ngx_http_tokenbiryani_session_t *s);
static void ngx_http_tokenbiryani_session_merge(
    ngx_http_tokenbiryani_session_view_t *v,
    const ngx_http_tokenbiryani_session_t *s, int64_t now, int64_t ttl);
static ngx_uint_t ngx_http_tokenbiryani_caps_reached(
    ngx_http_tokenbiryani_zone_t *zone, ngx_http_tokenbiryani_keystate_t *ks,
    ngx_http_tokenbiryani_session_t *s, ngx_http_tokenbiryani_caps_t *caps,
    int64_t now);


static ngx_http_tokenbiryani_session_t *
ngx_http_tokenbiryani_session_find(ngx_http_tokenbiryani_shm_t *sh,
    uint64_t session)
{
    return (ngx_http_tokenbiryani_session_t *)
               ngx_http_tokenbiryani_rbtree_find(&sh->sess_tree, session);
}


static void
ngx_http_tokenbiryani_session_free(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_session_t *s)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    ngx_queue_remove(&s->lru);
    ngx_rbtree_delete(&sh->sess_tree, &s->node);

    if (s->is_dirty) {
        ngx_queue_remove(&s->dirty);
    }

    if (s->peers) {
        ngx_slab_free_locked(zone->shpool, s->peers);
    }

    if (s->owner && s->owner->nsessions) {
        s->owner->nsessions--;
    }

    ngx_slab_free_locked(zone->shpool, s);
    sh->nsessions--;
    sh->sessions_evicted++;
}


/* the least recently charged session with nothing in flight: gone */
ngx_uint_t
ngx_http_tokenbiryani_session_evict(ngx_http_tokenbiryani_zone_t *zone)
{
    ngx_uint_t                        n;
    ngx_queue_t                      *q;
    ngx_http_tokenbiryani_shm_t      *sh;
    ngx_http_tokenbiryani_session_t  *s;

    sh = zone->sh;
    n = 0;

    for (q = ngx_queue_last(&sh->sess_lru);
         q != ngx_queue_sentinel(&sh->sess_lru) && n < 64;
         q = ngx_queue_prev(q), n++)
    {
        s = ngx_queue_data(q, ngx_http_tokenbiryani_session_t, lru);

        if (s->leases) {
            continue;
        }

        ngx_http_tokenbiryani_session_free(zone, s);

        return 1;
    }

    return 0;
}


/* a key's fair share of the zone's conversations */
static ngx_uint_t
ngx_http_tokenbiryani_session_share(ngx_http_tokenbiryani_zone_t *zone)
{
    ngx_uint_t  keys;

    keys = zone->tbcf->nkeys + zone->sh->rkeys.n;

    if (keys <= 1) {
        return NGX_HTTP_TB_SESSIONS;
    }

    return ngx_max(NGX_HTTP_TB_SESSIONS / keys, 64);
}


/* the key's own least recently charged idle one: gone (1), or none (0) */
static ngx_uint_t
ngx_http_tokenbiryani_session_evict_own(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_keystate_t *ks)
{
    ngx_queue_t                      *q;
    ngx_http_tokenbiryani_session_t  *s;

    for (q = ngx_queue_last(&zone->sh->sess_lru);
         q != ngx_queue_sentinel(&zone->sh->sess_lru);
         q = ngx_queue_prev(q))
    {
        s = ngx_queue_data(q, ngx_http_tokenbiryani_session_t, lru);

        if (s->owner == ks && s->leases == 0) {
            ngx_http_tokenbiryani_session_free(zone, s);
            return 1;
        }
    }

    return 0;
}


ngx_http_tokenbiryani_session_t *
ngx_http_tokenbiryani_session_locked(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t session, const u_char *key, size_t key_len,
    ngx_http_tokenbiryani_keystate_t *ks, int64_t now)
{
    ngx_http_tokenbiryani_shm_t      *sh;
    ngx_http_tokenbiryani_session_t  *s;

    if (session == 0) {
        return NULL;
    }

    sh = zone->sh;

    s = ngx_http_tokenbiryani_session_find(sh, session);
    if (s) {
        if (ks && s->owner == NULL) {
            /* another instance's, or the store's, now its key's too */
            s->owner = ks;
            ks->nsessions++;
        }

        return s;
    }

    if (ks && ks->nsessions >= ngx_http_tokenbiryani_session_share(zone)) {
        /*
         * A key past its share makes room with its own conversations,
         * never another key's: a tenant that opens new conversations
         * without end cannot push the others' ledgers out.  When all of
         * its own have requests in flight, this one is not counted.
         */
        if (!ngx_http_tokenbiryani_session_evict_own(zone, ks)) {
            return NULL;
        }

    } else if (sh->nsessions >= NGX_HTTP_TB_SESSIONS) {
        (void) ngx_http_tokenbiryani_session_evict(zone);
    }

    /* an idle conversation makes room first, then owners (affinity) */

    s = ngx_slab_alloc_locked(zone->shpool,
                              sizeof(ngx_http_tokenbiryani_session_t));

    if (s == NULL && ngx_http_tokenbiryani_session_evict(zone)) {
        s = ngx_slab_alloc_locked(zone->shpool,
                                  sizeof(ngx_http_tokenbiryani_session_t));
    }

    if (s == NULL) {
        s = ngx_http_tokenbiryani_alloc_locked(zone,
                                    sizeof(ngx_http_tokenbiryani_session_t));
    }

    if (s == NULL) {
        /* not counted: its caps cannot hold, its key's still do */
        return NULL;
    }

    ngx_memzero(s, sizeof(ngx_http_tokenbiryani_session_t));

    s->node.key = (ngx_rbtree_key_t) session;
    s->first_ms = now;
    s->last_ms = now;
    s->slot = -1;
    s->key_len = (uint32_t) ngx_min(key_len, TB_ID_MAX);

    if (s->key_len) {
        /* open mode has no key: NULL, 0 */
        ngx_memcpy(s->key, key, s->key_len);
    }

    if (ks) {
        s->owner = ks;
        ks->nsessions++;
    }

    /*
     * At the tail until it is charged: the head is kept in the order of
     * charges, which the store's writer reads up to the first it wrote;
     * a new one holds a lease, so it is not what makes room.
     */
    ngx_rbtree_insert(&sh->sess_tree, &s->node);
    ngx_queue_insert_tail(&sh->sess_lru, &s->lru);
    sh->nsessions++;

    return s;
}


/* 0 when what was settled is under the limit: the reservations of
 * requests in flight hold it, and it is theirs to free; -1 when nothing
 * frees it (a limit of 0) */
static int64_t
ngx_http_tokenbiryani_caps_frees(const tb_ledger_t *l,
    const ngx_http_tokenbiryani_caps_t *caps, int64_t now, int64_t bm,
    int by_turns)
{
    if (caps->limit <= 0) {
        /* nothing may be spent: no time frees it */
        return -1;
    }

    if (caps->held - caps->in_flight < caps->limit) {
        return 0;
    }

    return tb_ledger_frees_at(l, now, bm, caps->limit, by_turns);
}


/*
 * One ledger against its limit: reached, with what holds it and when.
 * others, others_flight: what the other instances sharing the pool said
 * of it (turns or nanodollars), settled and reserved in flight.
 *
 * What is in flight anywhere settles soon: a cap that only it holds is
 * waited for, as on one instance.  What is settled leaves with the
 * window: this instance's as its ledger says; of the others' only the
 * sum is told, which has left within one window and a bucket at the
 * latest.
 */
static ngx_uint_t
ngx_http_tokenbiryani_cap_held(const tb_ledger_t *l,
    ngx_http_tokenbiryani_caps_t *caps, ngx_uint_t which, int64_t limit,
    int64_t others, int64_t others_flight, int64_t now, int64_t bm)
{
    int64_t  spent, turns, settled;

    if (limit < 0) {
        return 0;
    }

    spent = tb_ledger_spent(l, now, bm, &turns);
    settled = ((which == NGX_HTTP_TB_CAP_TURNS) ? turns : spent) + others;

    caps->in_flight = ((which == NGX_HTTP_TB_CAP_TURNS) ? l->reserved_turns
                                                         : l->reserved)
                      + others_flight;
    caps->held = settled + caps->in_flight;

    if (caps->held < limit) {
        return 0;
    }

    caps->reached = which;
    caps->limit = limit;
    caps->frees_within = 0;

    if (limit <= 0 || others == 0 || settled < limit) {
        caps->frees_at = ngx_http_tokenbiryani_caps_frees(l, caps, now, bm,
                                             which == NGX_HTTP_TB_CAP_TURNS);

    } else if (limit - others > 0) {
        /* when this instance's own falls under what the others leave */
        caps->frees_at = tb_ledger_frees_at(l, now, bm, limit - others,
                                            which == NGX_HTTP_TB_CAP_TURNS);

    } else {
        /* the others' alone hold it: gone from their windows by then */
        caps->frees_at = now + bm * (TB_LEDGER_BUCKETS + 1);
        caps->frees_within = 1;
    }

    return 1;
}


/* what the other instances said of a key or a conversation, as of now:
 * settled, and in *flight reserved */
static int64_t
ngx_http_tokenbiryani_peers_held(const ngx_http_tokenbiryani_peer_spend_t *p,
    size_t stride, ngx_uint_t n, ngx_uint_t turns, int64_t now, int64_t ttl,
    int64_t *flight)
{
    int64_t     sum;
    ngx_uint_t  i;

    sum = 0;
    *flight = 0;

    for (i = 0; i < n; i++, p = (const void *) ((const u_char *) p + stride))
    {
        if (p->who && p->at_ms + ttl > now) {
            sum += turns ? p->spend.window_turns : p->spend.window_cost;
            *flight += turns ? p->spend.reserved_turns : p->spend.reserved;
        }
    }

    return sum;
}


static ngx_uint_t
ngx_http_tokenbiryani_caps_reached(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_keystate_t *ks, ngx_http_tokenbiryani_session_t *s,
    ngx_http_tokenbiryani_caps_t *caps, int64_t now)
{
    int64_t  bm, ttl, turns, cost, turns_flight, cost_flight;

    bm = zone->spend_bucket_ms;
    ttl = bm * TB_LEDGER_BUCKETS;
    caps->reached = NGX_HTTP_TB_CAP_NONE;

    if (ks) {
        cost = ngx_http_tokenbiryani_peers_held(ks->peers,
                   sizeof(ngx_http_tokenbiryani_peer_spend_t),
                   NGX_HTTP_TB_KEY_PEERS, 0, now, ttl, &cost_flight);

        (void) ngx_http_tokenbiryani_cap_held(&ks->spend, caps,
                                              NGX_HTTP_TB_CAP_KEY,
                                              caps->key_cap, cost,
                                              cost_flight, now, bm);
    }

    if (s == NULL || caps->reached != NGX_HTTP_TB_CAP_NONE) {
        return caps->reached;
    }

    turns = 0;
    cost = 0;
    turns_flight = 0;
    cost_flight = 0;

    if (s->peers) {
        turns = ngx_http_tokenbiryani_peers_held(&s->peers[0].spend,
                    sizeof(ngx_http_tokenbiryani_peer_session_t),
                    NGX_HTTP_TB_SESSION_PEERS, 1, now, ttl, &turns_flight);
        cost = ngx_http_tokenbiryani_peers_held(&s->peers[0].spend,
                   sizeof(ngx_http_tokenbiryani_peer_session_t),
                   NGX_HTTP_TB_SESSION_PEERS, 0, now, ttl, &cost_flight);
    }

    if (!ngx_http_tokenbiryani_cap_held(&s->ledger, caps,
                                        NGX_HTTP_TB_CAP_TURNS,
                                        caps->session_turns, turns,
                                        turns_flight, now, bm))
    {
        (void) ngx_http_tokenbiryani_cap_held(&s->ledger, caps,
                                              NGX_HTTP_TB_CAP_SESSION,
                                              caps->session_cap, cost,
                                              cost_flight, now, bm);
    }

    return caps->reached;
}


ngx_uint_t
ngx_http_tokenbiryani_caps_check(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, ngx_http_tokenbiryani_caps_t *caps, int64_t now)
{
    ngx_uint_t                         rc;
    ngx_http_tokenbiryani_keystate_t  *ks;
    ngx_http_tokenbiryani_session_t   *s;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ks = ngx_http_tokenbiryani_keystate_locked(zone, key);
    s = caps->session ? ngx_http_tokenbiryani_session_find(zone->sh,
                                                           caps->session)
                      : NULL;

    rc = ngx_http_tokenbiryani_caps_reached(zone, ks, s, caps, now);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


ngx_uint_t
ngx_http_tokenbiryani_caps_reserve_locked(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_keystate_t *ks, ngx_http_tokenbiryani_caps_t *caps,
    tb_account_state_t *st, const tb_account_conf_t *conf, int64_t cost,
    int64_t now, ngx_http_tokenbiryani_session_t **sp)
{
    ngx_http_tokenbiryani_session_t  *s;

    *sp = NULL;

    if (conf->spend_cap_usd >= 0
        && tb_ledger_spent(&st->spend, now, zone->spend_bucket_ms, NULL)
           + st->spend.reserved
           + tb_account_others_spend(st, now,
                                     zone->spend_bucket_ms * TB_LEDGER_BUCKETS)
           >= tb_usd_to_nd(conf->spend_cap_usd))
    {
        /* the account, which the decision read without the lock */
        return NGX_HTTP_TB_CAP_ACCOUNT;
    }

    s = NULL;

    if (caps) {
        s = ngx_http_tokenbiryani_session_locked(zone, caps->session,
                                                 caps->key_name,
                                                 caps->key_name_len, ks, now);

        if (ngx_http_tokenbiryani_caps_reached(zone, ks, s, caps, now)) {
            return caps->reached;
        }
    }

    st->spend.reserved += cost;

    if (ks) {
        ks->spend.reserved += cost;
    }

    if (s) {
        s->ledger.reserved += cost;
        s->ledger.reserved_turns++;
        s->leases++;
        ngx_http_tokenbiryani_session_dirty(zone->sh, s);
    }

    /* what the other instances are told of the account */
    st->news = 1;

    *sp = s;

    return NGX_HTTP_TB_CAP_NONE;
}


static void
ngx_http_tokenbiryani_release(tb_ledger_t *l, int64_t cost, int64_t turns)
{
    l->reserved = (l->reserved > cost) ? l->reserved - cost : 0;
    l->reserved_turns = (l->reserved_turns > turns)
                        ? l->reserved_turns - turns : 0;
}


void
ngx_http_tokenbiryani_caps_settle_locked(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_keystate_t *ks, ngx_http_tokenbiryani_session_t *s,
    tb_account_state_t *st, ngx_int_t slot, int64_t reserved,
    const ngx_http_tokenbiryani_charge_t *charge)
{
    int64_t                       bm, cost, now;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    bm = zone->spend_bucket_ms;

    if (st) {
        ngx_http_tokenbiryani_release(&st->spend, reserved, 0);
    }

    if (ks) {
        ngx_http_tokenbiryani_release(&ks->spend, reserved, 0);
    }

    if (s) {
        ngx_http_tokenbiryani_release(&s->ledger, reserved, 1);
        s->leases--;
        ngx_http_tokenbiryani_session_dirty(sh, s);
    }

    if (st) {
        st->news = 1;
    }

    if (charge == NULL) {
        return;
    }

    /* an answer: a turn, and what it cost (nothing known: counted 0) */

    now = charge->at_ms;
    cost = charge->cost > 0 ? charge->cost : 0;
    sh->spend_seq++;

    if (st) {
        tb_ledger_charge(&st->spend, now, bm, cost, 1);
        st->spend.seq = sh->spend_seq;

        st->tokens[0] += charge->tokens[0];
        st->tokens[1] += charge->tokens[1];
        st->tokens[2] += charge->tokens[2];
        st->tokens[3] += charge->tokens[3];
        st->cost_total += cost;
        st->cache_hits += (charge->tokens[2] > 0);
        st->unpriced += (charge->cost < 0);
    }

    if (ks) {
        tb_ledger_charge(&ks->spend, now, bm, cost, 1);
        ks->spend.seq = sh->spend_seq;
    }

    if (s == NULL) {
        return;
    }

    tb_ledger_charge(&s->ledger, now, bm, cost, 1);
    s->ledger.seq = sh->spend_seq;

    s->turns++;
    s->cost += cost;
    s->unpriced += (charge->cost < 0);
    s->tokens[0] += charge->tokens[0];
    s->tokens[1] += charge->tokens[1];
    s->tokens[2] += charge->tokens[2];
    s->tokens[3] += charge->tokens[3];
    s->last_ms = now;
    s->slot = (int32_t) slot;

    ngx_queue_remove(&s->lru);
    ngx_queue_insert_head(&sh->sess_lru, &s->lru);
}


/*
 * The sessions that cost most, worst first (cost, then turns), at most
 * max, into out; *total: how many are kept.
 */

ngx_uint_t
ngx_http_tokenbiryani_sessions_top(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_session_view_t *out, ngx_uint_t max,
    ngx_uint_t *total)
{
    int64_t                            cost, now;
    uint64_t                           turns;
    ngx_uint_t                         n, i, k;
    ngx_queue_t                       *q;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_session_t   *s;

    sh = zone->sh;
    n = 0;
    now = ngx_http_tokenbiryani_now_ms();

    ngx_shmtx_lock(&zone->shpool->mutex);

    *total = sh->nsessions;

    for (q = ngx_queue_head(&sh->sess_lru);
         q != ngx_queue_sentinel(&sh->sess_lru) && max;
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_tokenbiryani_session_t, lru);

        /* what it ran up, here and on the other instances */

        cost = s->cost;
        turns = s->turns;

        for (k = 0; s->peers && k < NGX_HTTP_TB_SESSION_PEERS; k++) {
            if (s->peers[k].spend.who) {
                cost += s->peers[k].cost;
                turns += (uint64_t) s->peers[k].turns;
            }
        }

        if (turns == 0) {
            /* made for the others' news, and they ran up nothing yet */
            continue;
        }

        /* its place among the worst kept so far */

        for (i = n; i > 0; i--) {
            if (out[i - 1].cost > cost
                || (out[i - 1].cost == cost && out[i - 1].turns >= turns))
            {
                break;
            }
        }

        if (i >= max) {
            continue;
        }

        if (n < max) {
            n++;
        }

        ngx_memmove(&out[i + 1], &out[i],
                    (n - 1 - i) * sizeof(ngx_http_tokenbiryani_session_view_t));

        ngx_http_tokenbiryani_session_copy(&out[i], s);
        ngx_http_tokenbiryani_session_merge(&out[i], s, now,
                                            zone->spend_bucket_ms
                                            * TB_LEDGER_BUCKETS);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


static void
ngx_http_tokenbiryani_session_copy(ngx_http_tokenbiryani_session_view_t *v,
    const ngx_http_tokenbiryani_session_t *s)
{
    /* written to the store as its bytes: none left from an earlier use */
    ngx_memzero(v, sizeof(ngx_http_tokenbiryani_session_view_t));

    v->session = (uint64_t) s->node.key;
    v->ledger = s->ledger;
    v->first_ms = s->first_ms;
    v->last_ms = s->last_ms;
    ngx_memcpy(v->tokens, s->tokens, sizeof(v->tokens));
    v->cost = s->cost;
    v->turns = s->turns;
    v->unpriced = s->unpriced;
    v->slot = s->slot;
    v->key_len = s->key_len;
    ngx_memcpy(v->key, s->key, s->key_len);
    v->key[s->key_len] = '\0';
}


/* what the other instances said of it, added to a copy */
static void
ngx_http_tokenbiryani_session_merge(ngx_http_tokenbiryani_session_view_t *v,
    const ngx_http_tokenbiryani_session_t *s, int64_t now, int64_t ttl)
{
    ngx_uint_t                                   k, i, seen;
    const ngx_http_tokenbiryani_peer_session_t  *p;

    /* a conversation made here only for the others' news was never seen */
    seen = (s->turns > 0);

    for (k = 0; s->peers && k < NGX_HTTP_TB_SESSION_PEERS; k++) {
        p = &s->peers[k];

        if (p->spend.who == 0 || p->turns == 0) {
            continue;
        }

        v->cost += p->cost;
        v->turns += (uint64_t) p->turns;
        v->unpriced += (uint32_t) p->unpriced;

        for (i = 0; i < 4; i++) {
            v->tokens[i] += p->tokens[i];
        }

        if (!seen || p->first_ms < v->first_ms) {
            v->first_ms = p->first_ms;
        }

        if (!seen || p->last_ms > v->last_ms) {
            /* served last by another instance: its account, by name */
            v->last_ms = p->last_ms;
            v->slot = -1;
            ngx_cpystrn(v->account, (u_char *) p->account, TB_ID_MAX + 1);
        }

        if (p->spend.at_ms + ttl > now) {
            v->others[0] += p->spend.spend.window_cost;
            v->others[1] += p->spend.spend.window_turns;
        }

        seen = 1;
    }
}


/*
 * What the store has not written yet: the ledgers charged after seq (of
 * the keys, the accounts' slots and the sessions), at most max of each
 * kind; *upto: the sequence they are complete to.  Of more sessions than
 * max, the ones charged first: the next call goes on after them.
 */

ngx_uint_t
ngx_http_tokenbiryani_spend_since(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t seq, ngx_http_tokenbiryani_ledger_view_t *ledgers,
    ngx_uint_t max_ledgers, ngx_http_tokenbiryani_session_view_t *sessions,
    ngx_uint_t max_sessions, ngx_uint_t *nsessions, uint64_t *upto)
{
    uint64_t                           last;
    ngx_uint_t                         n, i;
    ngx_queue_t                       *q;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_session_t   *s;
    ngx_http_tokenbiryani_keystate_t  *ks;

    sh = zone->sh;
    n = 0;
    last = seq;
    *nsessions = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    *upto = sh->spend_seq;

    if (sh->spend_seq <= seq) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return 0;
    }

    for (i = 0; i < sh->nslots && n < max_ledgers; i++) {
        if (sh->slots[i]->spend.seq > seq) {
            ledgers[n].kind = NGX_HTTP_TB_LEDGER_ACCOUNT;
            ledgers[n].id = i;
            ledgers[n].ledger = sh->slots[i]->spend;
            n++;
        }
    }

    for (q = ngx_queue_head(&sh->keys);
         q != ngx_queue_sentinel(&sh->keys) && n < max_ledgers;
         q = ngx_queue_next(q))
    {
        ks = ngx_queue_data(q, ngx_http_tokenbiryani_keystate_t, queue);

        if (ks->spend.seq > seq) {
            ledgers[n].kind = NGX_HTTP_TB_LEDGER_KEY;
            ledgers[n].id = ks->key;
            ledgers[n].ledger = ks->spend;
            n++;
        }
    }

    /*
     * The head is in the order of charges, the most recent first: the
     * first written already (or never charged) ends those to write, and
     * from there back towards the head they are taken in the order they
     * were charged
     */

    for (q = ngx_queue_head(&sh->sess_lru);
         q != ngx_queue_sentinel(&sh->sess_lru);
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_tokenbiryani_session_t, lru);

        if (s->ledger.seq <= seq) {
            break;
        }
    }

    for (q = ngx_queue_prev(q);
         q != ngx_queue_sentinel(&sh->sess_lru) && *nsessions < max_sessions;
         q = ngx_queue_prev(q))
    {
        s = ngx_queue_data(q, ngx_http_tokenbiryani_session_t, lru);

        ngx_http_tokenbiryani_session_copy(&sessions[(*nsessions)++], s);
        last = s->ledger.seq;
    }

    if (q != ngx_queue_sentinel(&sh->sess_lru)) {
        /* more than max: complete up to the last taken */
        *upto = last;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


/* read back by the master before workers start */

void
ngx_http_tokenbiryani_spend_restore(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t kind, uint64_t id, const tb_ledger_t *l)
{
    tb_ledger_t                       *dst;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_keystate_t  *ks;

    sh = zone->sh;
    dst = NULL;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (kind == NGX_HTTP_TB_LEDGER_ACCOUNT) {
        if (id < sh->nslots) {
            dst = &sh->slots[id]->spend;
        }

    } else {
        ks = ngx_http_tokenbiryani_keystate_locked(zone, id);
        if (ks) {
            dst = &ks->spend;
        }
    }

    if (dst) {
        tb_ledger_rebucket(dst, l, zone->spend_bucket_ms);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_session_restore(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_session_view_t *v)
{
    ngx_http_tokenbiryani_session_t  *s;

    ngx_shmtx_lock(&zone->shpool->mutex);

    s = ngx_http_tokenbiryani_session_locked(zone, v->session, v->key,
                                             v->key_len, NULL, v->first_ms);
    if (s) {
        tb_ledger_rebucket(&s->ledger, &v->ledger, zone->spend_bucket_ms);
        s->first_ms = v->first_ms;
        s->last_ms = v->last_ms;
        ngx_memcpy(s->tokens, v->tokens, sizeof(s->tokens));
        s->cost = v->cost;
        s->turns = v->turns;
        s->unpriced = v->unpriced;
        s->slot = v->slot;

        /* read back oldest first: the newest ends at the head */
        ngx_queue_remove(&s->lru);
        ngx_queue_insert_head(&zone->sh->sess_lru, &s->lru);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_pace_put(ngx_http_tokenbiryani_zone_t *zone,
    int64_t week, int64_t spent, int64_t at)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    sh->pace_week = week;
    sh->pace_spent = spent;
    sh->pace_at = at;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_int_t
ngx_http_tokenbiryani_pace_get(ngx_http_tokenbiryani_zone_t *zone,
    int64_t *week, int64_t *spent, int64_t *at)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    *week = sh->pace_week;
    *spent = sh->pace_spent;
    *at = sh->pace_at;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return *at ? NGX_OK : NGX_DECLINED;
}


ngx_uint_t
ngx_http_tokenbiryani_pacer(ngx_http_tokenbiryani_zone_t *zone, ngx_pid_t pid)
{
    return ngx_http_tokenbiryani_elect(zone, &zone->sh->pacer, pid);
}
