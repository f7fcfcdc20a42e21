/*
 * What operators change at runtime, in the zone: minted keys and settings,
 * and the state of the durable store behind it.
 *
 * The zone holds each minted key as a runtime record (its name, its spec
 * (JSON text) and, as its secret, the SHA-256 digest of the key: see
 * shm/ngx_http_tokenbiryani_records.c); workers keep a parsed copy and
 * rebuild it when the generation moves, so a key minted, rescoped or
 * revoked in one worker holds in every worker from its next request.
 */


#include "ngx_http_tokenbiryani_zone.h"
#include "tb_hash.h"


ngx_uint_t
ngx_http_tokenbiryani_rkey_write(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *name, size_t name_len, const u_char *digest,
    const u_char *spec, size_t spec_len, ngx_uint_t set)
{
    ngx_uint_t                     rc;
    ngx_http_tokenbiryani_rrec_t  *old, *k;

    rc = NGX_HTTP_TB_RKEY_OK;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (ngx_http_tokenbiryani_rrec_stale_locked(zone->sh, TB_REC_KEY, name,
                                                name_len, spec, spec_len,
                                                &old))
    {
        rc = NGX_HTTP_TB_RKEY_STALE;
        goto done;
    }

    if (digest == NULL && old == NULL) {
        rc = NGX_HTTP_TB_RKEY_NONE;
        goto done;
    }

    if (digest == NULL) {
        /* another spec, the same secret */
        digest = ngx_http_tokenbiryani_rrec_secret(old);

    } else if (set) {
        if (old
            && ngx_http_tokenbiryani_rrec_same(old, spec, spec_len, digest, 32))
        {
            /* as it is: the generation stays, no worker rebuilds */
            rc = NGX_HTTP_TB_RKEY_SAME;
            goto done;
        }

    } else if (old) {
        rc = NGX_HTTP_TB_RKEY_EXISTS;
        goto done;
    }

    k = ngx_http_tokenbiryani_rrec_alloc_locked(zone, TB_REC_KEY, name,
                                                name_len, spec, spec_len,
                                                digest, 32);
    if (k == NULL) {
        rc = NGX_HTTP_TB_RKEY_NOMEM;
        goto done;
    }

    if (old == NULL && set) {
        rc = NGX_HTTP_TB_RKEY_NEW;
    }

    ngx_http_tokenbiryani_rrec_link_locked(zone, TB_REC_KEY, old, k);

done:

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


/* a key revoked: remembered by its digest, the oldest forgotten first */
static void
ngx_http_tokenbiryani_revoked_put_locked(ngx_http_tokenbiryani_shm_t *sh,
    const u_char *digest, const u_char *name, size_t len)
{
    ngx_http_tokenbiryani_revoked_t  *rv;

    rv = &sh->revoked[sh->revoked_next++ % NGX_HTTP_TB_REVOKED];

    len = ngx_min(len, TB_ID_MAX);
    ngx_memcpy(rv->digest, digest, 32);
    ngx_memcpy(rv->name, name, len);
    rv->name[len] = '\0';
    rv->revoked_ms = (int64_t) ngx_time() * 1000;
    rv->refused_ms = 0;
    rv->refused = 0;
}


ngx_uint_t
ngx_http_tokenbiryani_revoked_seen(ngx_http_tokenbiryani_zone_t *zone,
    const u_char digest[32], char *name, int64_t now)
{
    ngx_uint_t                        i, found;
    ngx_http_tokenbiryani_revoked_t  *rv;

    found = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (i = 0; i < NGX_HTTP_TB_REVOKED; i++) {
        rv = &zone->sh->revoked[i];

        if (rv->revoked_ms && ngx_memcmp(rv->digest, digest, 32) == 0) {
            rv->refused_ms = now;
            rv->refused++;
            ngx_memcpy(name, rv->name, TB_ID_MAX + 1);
            found = 1;
            break;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return found;
}


ngx_uint_t
ngx_http_tokenbiryani_revoked_copy(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_revoked_t *out, ngx_uint_t max)
{
    ngx_uint_t                    i, n, at;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /* newest first: back from the next place to be written */

    for (i = 1; i <= NGX_HTTP_TB_REVOKED && n < max; i++) {
        at = (sh->revoked_next + NGX_HTTP_TB_REVOKED - i)
             % NGX_HTTP_TB_REVOKED;

        if (sh->revoked[at].revoked_ms) {
            out[n++] = sh->revoked[at];
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


ngx_uint_t
ngx_http_tokenbiryani_rkey_delete(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *name, size_t len)
{
    ngx_uint_t                     rc;
    ngx_http_tokenbiryani_rrec_t  *k;

    ngx_shmtx_lock(&zone->shpool->mutex);

    k = ngx_http_tokenbiryani_rrec_find_locked(zone->sh, TB_REC_KEY, name,
                                               len);

    if (k == NULL) {
        rc = NGX_HTTP_TB_RKEY_NONE;

    } else {
        ngx_http_tokenbiryani_revoked_put_locked(zone->sh,
            ngx_http_tokenbiryani_rrec_secret(k), name, len);
        ngx_http_tokenbiryani_rrec_remove_locked(zone, TB_REC_KEY, k);
        rc = NGX_HTTP_TB_RKEY_OK;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


void
ngx_http_tokenbiryani_count_refused(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t message)
{
    ngx_shmtx_lock(&zone->shpool->mutex);

    if (message) {
        zone->sh->refused_messages++;

    } else {
        zone->sh->refused_records++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_refused(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t *records, uint64_t *messages)
{
    ngx_shmtx_lock(&zone->shpool->mutex);

    *records = zone->sh->refused_records;
    *messages = zone->sh->refused_messages;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_uint_t
ngx_http_tokenbiryani_store_report(ngx_http_tokenbiryani_zone_t *zone,
    const char *err, int64_t now)
{
    ngx_uint_t                            changed;
    ngx_http_tokenbiryani_store_state_t  *st;

    st = &zone->sh->store;

    ngx_shmtx_lock(&zone->shpool->mutex);

    changed = (st->degraded != (err != NULL));

    if (changed) {
        st->degraded = (err != NULL);
        st->since_ms = now;

        if (err) {
            ngx_cpystrn(st->error, (u_char *) err, sizeof(st->error));
        }
    }

    if (err) {
        st->failures++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return changed;
}


void
ngx_http_tokenbiryani_store_flushed(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t records_seq, uint64_t events_seq, uint64_t spend_seq,
    int64_t now)
{
    ngx_http_tokenbiryani_store_state_t  *st;

    st = &zone->sh->store;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (records_seq > st->records_seq) {
        st->records_seq = records_seq;
    }

    if (events_seq > st->events_seq) {
        st->events_seq = events_seq;
    }

    if (spend_seq > st->spend_seq) {
        st->spend_seq = spend_seq;
    }

    st->flushed_ms = now;
    st->flushes++;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_store_rewind(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t records_seq, uint64_t events_seq, int64_t now)
{
    uint64_t                              oldest;
    ngx_uint_t                            n;
    ngx_http_tokenbiryani_shm_t          *sh;
    ngx_http_tokenbiryani_store_state_t  *st;

    sh = zone->sh;
    st = &sh->store;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (records_seq < st->records_seq) {
        /* the first request whose usage the zone still holds */
        n = sh->usage_size ? sh->usage_size : sh->ring_size;
        oldest = (sh->ring_seq > n) ? sh->ring_seq - n + 1 : 1;

        st->rewound_lost = (oldest - 1 > records_seq)
                           ? ngx_min(oldest - 1, st->records_seq)
                             - records_seq
                           : 0;
        st->rewound_again = st->records_seq - records_seq
                            - st->rewound_lost;
        st->records_seq = records_seq;
        st->rewound_ms = now;
    }

    if (events_seq < st->events_seq) {
        st->events_seq = events_seq;
        st->rewound_ms = now;
    }

    /* the ledgers and conversations, every one again */
    st->spend_seq = 0;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_store_snapshot(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_store_state_t *copy)
{
    ngx_shmtx_lock(&zone->shpool->mutex);
    *copy = zone->sh->store;
    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_uint_t
ngx_http_tokenbiryani_store_flusher(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pid_t pid)
{
    return ngx_http_tokenbiryani_elect(zone, &zone->sh->store.flusher, pid);
}


void
ngx_http_tokenbiryani_store_unelect(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pid_t pid)
{
    ngx_shmtx_lock(&zone->shpool->mutex);

    if (zone->sh->store.flusher == pid) {
        zone->sh->store.flusher = 0;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_uint_t
ngx_http_tokenbiryani_settings_set_strategy(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *name, size_t len, uint64_t gen)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    len = (name == NULL) ? 0 : ngx_min(len, sizeof(sh->strategy) - 1);

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (gen && gen < sh->strategy_rgen) {
        /* an older record than the one this zone holds: a replay */
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_HTTP_TB_RKEY_STALE;
    }

    if (gen) {
        sh->strategy_rgen = gen;
    }

    ngx_memzero(sh->strategy, sizeof(sh->strategy));

    if (len) {
        ngx_memcpy(sh->strategy, name, len);
    }

    (void) ngx_atomic_fetch_add(&sh->settings_gen, 1);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return NGX_HTTP_TB_RKEY_OK;
}


uint64_t
ngx_http_tokenbiryani_settings_gen(ngx_http_tokenbiryani_zone_t *zone)
{
    return (uint64_t) __atomic_load_n(&zone->sh->settings_gen,
                                      __ATOMIC_ACQUIRE);
}


uint64_t
ngx_http_tokenbiryani_settings_strategy(ngx_http_tokenbiryani_zone_t *zone,
    u_char *buf, size_t size)
{
    uint64_t  gen;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ngx_cpystrn(buf, zone->sh->strategy, size);
    gen = zone->sh->settings_gen;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return gen;
}


uint64_t
ngx_http_tokenbiryani_reload_ticket(ngx_http_tokenbiryani_zone_t *zone)
{
    return __atomic_add_fetch(&zone->sh->reload.asked, 1, __ATOMIC_ACQ_REL);
}


uint64_t
ngx_http_tokenbiryani_reload_asked(ngx_http_tokenbiryani_zone_t *zone)
{
    return __atomic_load_n(&zone->sh->reload.asked, __ATOMIC_ACQUIRE);
}


void
ngx_http_tokenbiryani_reload_answer(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t upto, ngx_uint_t ok, const u_char *text, size_t len)
{
    ngx_http_tokenbiryani_reload_state_t  *rs;

    /* one writer, the helper: no lock, a sequence for the readers */

    rs = &zone->sh->reload;

    __atomic_add_fetch(&rs->seq, 1, __ATOMIC_ACQ_REL);

    len = ngx_min(len, sizeof(rs->text) - 1);
    ngx_memcpy(rs->text, text, len);
    rs->text[len] = '\0';
    rs->ok = (uint32_t) ok;

    __atomic_store_n(&rs->done, upto, __ATOMIC_RELEASE);
    __atomic_add_fetch(&rs->seq, 1, __ATOMIC_ACQ_REL);
}


ngx_int_t
ngx_http_tokenbiryani_reload_result(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t ticket, ngx_uint_t *ok, u_char *text, size_t size)
{
    uint64_t                               s1, s2;
    ngx_http_tokenbiryani_reload_state_t  *rs;

    rs = &zone->sh->reload;

    s1 = __atomic_load_n(&rs->seq, __ATOMIC_ACQUIRE);

    if ((s1 & 1) || __atomic_load_n(&rs->done, __ATOMIC_ACQUIRE) < ticket) {
        return NGX_AGAIN;
    }

    ngx_cpystrn(text, rs->text, ngx_min(size, sizeof(rs->text)));
    *ok = rs->ok;

    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    s2 = __atomic_load_n(&rs->seq, __ATOMIC_ACQUIRE);

    return (s1 == s2) ? NGX_OK : NGX_AGAIN;
}


void
ngx_http_tokenbiryani_store_epoch(ngx_http_tokenbiryani_zone_t *zone,
    u_char *get, const u_char *set)
{
    ngx_http_tokenbiryani_store_state_t  *st;

    st = &zone->sh->store;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (get) {
        ngx_memcpy(get, st->epoch, sizeof(st->epoch));
    }

    if (set) {
        ngx_cpystrn(st->epoch, (u_char *) set, sizeof(st->epoch));
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}
