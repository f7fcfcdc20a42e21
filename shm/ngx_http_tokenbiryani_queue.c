/*
 * The queue every worker sees: requests that no account can take now wait
 * here, interactive before batch, first come first served within a class.
 *
 * Nothing is handed over between workers: each worker's tick (10 ms while
 * it has waiters, at once when it gave a lease back itself) walks the
 * queue in order and lets its own waiters try for capacity, stopping at
 * the first waiter of another worker that has not tried since capacity
 * last changed.  A waiter that tried and failed at this capacity
 * generation cannot use what is there, so it holds nobody back; when
 * capacity changes, the order of the queue is the order of the tries.
 * Capacity that comes back with time (a cooldown ending, a window
 * refilling) is the waiter's retry_at, the soonest its last decision saw.
 *
 * The keys' rpm windows live here too.
 */


#include "ngx_http_tokenbiryani_zone.h"


/* a waiter whose worker has not renewed it for this long is passed over */
#define NGX_HTTP_TB_WAITER_STALE_MS   2000
/* ... and dropped after this long: its worker is gone */
#define NGX_HTTP_TB_WAITER_DEAD_MS    10000


static void
ngx_http_tokenbiryani_waiter_drop_locked(ngx_http_tokenbiryani_shm_t *sh,
    ngx_http_tokenbiryani_waiter_t *w)
{
    if (w->ks) {
        w->ks->queued--;
    }

    ngx_queue_remove(&w->queue);
    sh->nwaiting--;
}


/*
 * The waiter after w in queue order, interactive then batch (the first
 * for NULL); NULL after the last.  Under the lock; w may be dropped once
 * the next is known.
 */
static ngx_http_tokenbiryani_waiter_t *
ngx_http_tokenbiryani_waiter_next(ngx_http_tokenbiryani_shm_t *sh,
    ngx_http_tokenbiryani_waiter_t *w)
{
    ngx_uint_t    c;
    ngx_queue_t  *q;

    c = w ? w->cls : 0;
    q = w ? ngx_queue_next(&w->queue) : ngx_queue_head(&sh->waiting[0]);

    while (q == ngx_queue_sentinel(&sh->waiting[c])) {
        if (++c == 2) {
            return NULL;
        }

        q = ngx_queue_head(&sh->waiting[c]);
    }

    return ngx_queue_data(q, ngx_http_tokenbiryani_waiter_t, queue);
}


/* a waiter its worker no longer tends (why: how that is known) dropped */
static void
ngx_http_tokenbiryani_waiter_abandoned_locked(
    ngx_http_tokenbiryani_zone_t *zone, ngx_http_tokenbiryani_waiter_t *w,
    const char *why)
{
    ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                  "tokenbiryani: dropped the queued request %*s of worker "
                  "%P, which %s",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, w->request_id, w->pid,
                  why);

    ngx_http_tokenbiryani_waiter_drop_locked(zone->sh, w);
    zone->sh->queue_stale++;
    w->id = 0;
    ngx_slab_free_locked(zone->shpool, w);
}


static ngx_uint_t
ngx_http_tokenbiryani_waiter_blocked(ngx_http_tokenbiryani_shm_t *sh,
    ngx_http_tokenbiryani_waiter_t *w, int64_t now)
{
    if (w->pid != ngx_pid && now - w->renewed_ms > NGX_HTTP_TB_WAITER_STALE_MS)
    {
        return 1;
    }

    return w->blocked_gen == sh->cap_gen
           && (w->retry_at == 0 || now < w->retry_at);
}


ngx_uint_t
ngx_http_tokenbiryani_queue_room(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, int64_t key_max, ngx_uint_t *depth)
{
    ngx_uint_t                         rc;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_keystate_t  *ks;

    sh = zone->sh;
    rc = NGX_HTTP_TB_QUEUE_OK;

    ngx_shmtx_lock(&zone->shpool->mutex);

    *depth = sh->nwaiting;

    if (sh->nwaiting >= (ngx_uint_t) zone->tbcf->queue_max_size) {
        rc = NGX_HTTP_TB_QUEUE_FULL;

    } else {
        ks = ngx_http_tokenbiryani_keystate_find(zone, key);

        if (ks && key_max >= 0 && ks->queued >= (ngx_uint_t) key_max) {
            *depth = ks->queued;
            rc = NGX_HTTP_TB_QUEUE_KEY_FULL;
        }
    }

    if (rc != NGX_HTTP_TB_QUEUE_OK) {
        sh->queue_full++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


ngx_uint_t
ngx_http_tokenbiryani_queue_add(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t cls, u_char *request_id, uint64_t key, int64_t key_max,
    int64_t now, ngx_uint_t *depth, ngx_http_tokenbiryani_ticket_t *ticket)
{
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_waiter_t    *w;
    ngx_http_tokenbiryani_keystate_t  *ks;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    *depth = sh->nwaiting;

    if (sh->nwaiting >= (ngx_uint_t) zone->tbcf->queue_max_size) {
        sh->queue_full++;
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_HTTP_TB_QUEUE_FULL;
    }

    ks = ngx_http_tokenbiryani_keystate_locked(zone, key);

    if (ks && key_max >= 0 && ks->queued >= (ngx_uint_t) key_max) {
        *depth = ks->queued;
        sh->queue_full++;
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_HTTP_TB_QUEUE_KEY_FULL;
    }

    w = ngx_http_tokenbiryani_alloc_locked(zone,
                                    sizeof(ngx_http_tokenbiryani_waiter_t));
    if (w == NULL) {
        ngx_shmtx_unlock(&zone->shpool->mutex);
        return NGX_HTTP_TB_QUEUE_NOMEM;
    }

    if (ks) {
        ks->queued++;
    }

    w->ks = ks;
    w->id = ++sh->seq;
    w->pid = ngx_pid;
    w->cls = cls ? 1 : 0;
    w->blocked_gen = 0;
    w->retry_at = 0;
    w->enqueued_ms = now;
    w->renewed_ms = now;
    ngx_memcpy(w->request_id, request_id, NGX_HTTP_TB_REQUEST_ID_LEN);

    ngx_queue_insert_tail(&sh->waiting[w->cls], &w->queue);
    sh->nwaiting++;
    sh->queued_total++;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ticket->obj = w;
    ticket->id = w->id;

    return NGX_HTTP_TB_QUEUE_OK;
}


void
ngx_http_tokenbiryani_queue_remove(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_ticket_t *ticket, ngx_uint_t why)
{
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_waiter_t  *w;

    if (ticket->id == 0) {
        return;
    }

    sh = zone->sh;
    w = ticket->obj;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /* another worker may have dropped it as stale: the id tells */

    if (w->id == ticket->id) {
        ngx_http_tokenbiryani_waiter_drop_locked(sh, w);

        /* how long waiters wait, whatever ended it */
        sh->queue_wait_ms += (uint64_t) ngx_max(
                                 ngx_http_tokenbiryani_now_ms() - w->enqueued_ms,
                                 0);
        sh->queue_waits++;

        switch (why) {
        case NGX_HTTP_TB_QUEUE_SERVED:
            sh->queue_served++;
            break;
        case NGX_HTTP_TB_QUEUE_TIMEOUT:
            sh->queue_timeouts++;
            break;
        default:
            sh->queue_left++;
            break;
        }

        w->id = 0;
        ngx_slab_free_locked(zone->shpool, w);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ticket->obj = NULL;
    ticket->id = 0;
}


/*
 * 1 when a new request of this class may try for capacity at once: no
 * waiter of its class or a better one could use what is there.
 */

ngx_uint_t
ngx_http_tokenbiryani_queue_clear_ahead(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t cls, int64_t now)
{
    ngx_uint_t                       clear;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_waiter_t  *w;

    sh = zone->sh;

    if (__atomic_load_n(&sh->nwaiting, __ATOMIC_RELAXED) == 0) {
        return 1;
    }

    clear = 1;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (w = ngx_http_tokenbiryani_waiter_next(sh, NULL);
         w && w->cls <= cls;
         w = ngx_http_tokenbiryani_waiter_next(sh, w))
    {
        if (!ngx_http_tokenbiryani_waiter_blocked(sh, w, now)) {
            clear = 0;
            break;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return clear;
}


void
ngx_http_tokenbiryani_queue_blocked(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_ticket_t *ticket, uint64_t gen, int64_t retry_at)
{
    ngx_http_tokenbiryani_waiter_t  *w;

    if (ticket->id == 0) {
        return;
    }

    w = ticket->obj;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (w->id == ticket->id) {
        w->blocked_gen = gen;
        w->retry_at = retry_at;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * The ids of this worker's waiters that may try now, in queue order: up
 * to the first waiter of another worker that may try itself.  Renews this
 * worker's waiters and drops those of workers that are gone.
 */

ngx_uint_t
ngx_http_tokenbiryani_queue_scan(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now, uint64_t *ids, ngx_uint_t max)
{
    ngx_uint_t                       n, stop;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_waiter_t  *w, *next;

    sh = zone->sh;
    n = 0;
    stop = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (w = ngx_http_tokenbiryani_waiter_next(sh, NULL); w; w = next) {
        next = ngx_http_tokenbiryani_waiter_next(sh, w);

        if (w->pid == ngx_pid) {
            w->renewed_ms = now;

            if (!stop && n < max
                && !ngx_http_tokenbiryani_waiter_blocked(sh, w, now))
            {
                ids[n++] = w->id;
            }

            continue;
        }

        if (now - w->renewed_ms > NGX_HTTP_TB_WAITER_DEAD_MS) {
            ngx_http_tokenbiryani_waiter_abandoned_locked(zone, w,
                                                      "stopped tending it");
            continue;
        }

        if (!ngx_http_tokenbiryani_waiter_blocked(sh, w, now)) {
            /* it goes first: nobody behind it may */
            stop = 1;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


/* capacity came back somewhere: every waiter may try again */

void
ngx_http_tokenbiryani_capacity_changed(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now)
{
    __atomic_add_fetch(&zone->sh->cap_gen, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&zone->sh->cap_gen_ms, now, __ATOMIC_RELAXED);
}


/* the generation, and when it last changed */

uint64_t
ngx_http_tokenbiryani_capacity_gen(ngx_http_tokenbiryani_zone_t *zone,
    int64_t *since)
{
    if (since) {
        *since = __atomic_load_n(&zone->sh->cap_gen_ms, __ATOMIC_RELAXED);
    }

    return __atomic_load_n(&zone->sh->cap_gen, __ATOMIC_SEQ_CST);
}


/*
 * A key's rpm: the last `rpm` admissions' times.  A slot older than a
 * minute is free; with other instances sharing the pool, what they said
 * they admitted in the last minute takes slots too.  Returns the slot
 * taken, or -1 with *retry_ms until one frees, or -2 when the zone has no
 * room (the request is let through: a full zone must not lock a key out;
 * NGX_ERROR, which is -1, refused it for a minute).
 */

ngx_int_t
ngx_http_tokenbiryani_rpm_take(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, ngx_uint_t rpm, int64_t now, int64_t *retry_ms)
{
    ngx_int_t                     slot;
    ngx_uint_t                    i, used, others;
    int64_t                       oldest;
    ngx_http_tokenbiryani_shm_t  *sh;
    ngx_http_tokenbiryani_rpm_t  *w;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    w = ngx_http_tokenbiryani_rpm_find_locked(sh, key);

    if (w && w->size != rpm) {
        /* the key's rpm changed with a reload: a new window */
        ngx_queue_remove(&w->queue);
        ngx_slab_free_locked(zone->shpool, w);
        w = NULL;
    }

    if (w == NULL) {
        w = ngx_http_tokenbiryani_alloc_locked(zone,
                  sizeof(ngx_http_tokenbiryani_rpm_t)
                  + (rpm - 1) * sizeof(int64_t));
        if (w == NULL) {
            ngx_shmtx_unlock(&zone->shpool->mutex);
            return -2;
        }

        w->key = key;
        w->size = rpm;
        ngx_memzero(w->times, rpm * sizeof(int64_t));
        ngx_queue_insert_tail(&sh->rpm, &w->queue);
    }

    others = ngx_http_tokenbiryani_keystate_peers_rpm(
                 ngx_http_tokenbiryani_keystate_find(zone, key), now);

    slot = -1;
    oldest = 0;
    used = 0;

    for (i = 0; i < w->size; i++) {
        if (w->times[i] <= now - 60000) {
            if (slot < 0) {
                slot = (ngx_int_t) i;
            }

            continue;
        }

        used++;

        if (oldest == 0 || w->times[i] < oldest) {
            oldest = w->times[i];
        }
    }

    if (slot >= 0 && used + others < w->size) {
        w->times[slot] = now;

    } else {
        /* the others' admissions age out within the minute */
        *retry_ms = (slot < 0 && oldest) ? oldest + 60000 - now : 60000;
        slot = -1;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return slot;
}


/* a request refused before its first attempt: it was not admitted */

void
ngx_http_tokenbiryani_rpm_give_back(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, ngx_int_t slot, int64_t taken)
{
    ngx_http_tokenbiryani_rpm_t  *w;

    ngx_shmtx_lock(&zone->shpool->mutex);

    w = ngx_http_tokenbiryani_rpm_find_locked(zone->sh, key);

    if (w && (ngx_uint_t) slot < w->size && w->times[slot] == taken) {
        w->times[slot] = 0;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/*
 * The queue as the admin API shows it: counters and up to max waiters in
 * queue order, copied under the lock so that nothing is built while the
 * zone is held.  Returns how many waiters were copied.
 */

ngx_uint_t
ngx_http_tokenbiryani_queue_snapshot(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_queue_view_t *view,
    ngx_http_tokenbiryani_waiter_view_t *waiters, ngx_uint_t max)
{
    ngx_uint_t                       k;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_waiter_t  *w;

    sh = zone->sh;
    k = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    view->n[0] = 0;
    view->n[1] = 0;

    for (w = ngx_http_tokenbiryani_waiter_next(sh, NULL);
         w;
         w = ngx_http_tokenbiryani_waiter_next(sh, w))
    {
        view->n[w->cls]++;

        if (k == max) {
            continue;
        }

        ngx_memcpy(waiters[k].request_id, w->request_id,
                   NGX_HTTP_TB_REQUEST_ID_LEN);
        waiters[k].cls = w->cls;
        waiters[k].enqueued_ms = w->enqueued_ms;
        waiters[k].pid = w->pid;
        k++;
    }

    view->depth = sh->nwaiting;
    view->queued_total = sh->queued_total;
    view->served = sh->queue_served;
    view->timed_out = sh->queue_timeouts;
    view->full = sh->queue_full;
    view->left = sh->queue_left;
    view->stale = sh->queue_stale;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return k;
}


void
ngx_http_tokenbiryani_key_usage(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key, ngx_uint_t *inflight, ngx_uint_t *queued)
{
    ngx_http_tokenbiryani_keystate_t  *ks;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ks = ngx_http_tokenbiryani_keystate_find(zone, key);

    *inflight = ks ? ks->inflight : 0;
    *queued = ks ? ks->queued : 0;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


int64_t
ngx_http_tokenbiryani_key_last_used(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t key)
{
    int64_t                            at;
    ngx_http_tokenbiryani_keystate_t  *ks;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ks = ngx_http_tokenbiryani_keystate_find(zone, key);
    at = ks ? ks->last_used_ms : 0;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return at;
}


ngx_uint_t
ngx_http_tokenbiryani_queue_reap(ngx_http_tokenbiryani_zone_t *zone)
{
    ngx_uint_t                       n;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_waiter_t  *w, *next;
    ngx_http_tokenbiryani_owners_t   owners;

    sh = zone->sh;
    n = 0;
    owners.n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (w = ngx_http_tokenbiryani_waiter_next(sh, NULL); w; w = next) {
        next = ngx_http_tokenbiryani_waiter_next(sh, w);

        if (ngx_http_tokenbiryani_owner_gone(&owners, w->pid)) {
            ngx_http_tokenbiryani_waiter_abandoned_locked(zone, w, "is gone");
            n++;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}
