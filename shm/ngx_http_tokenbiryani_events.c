/*
 * The events ring: the last admission and settlement events of every
 * worker, kept whatever the error_log level.  A writer takes a number with
 * one atomic add and fills its place in the ring in place, without the
 * zone lock; a reader copies a place and keeps it only if its number is
 * the same before and after the copy.  A ring is never freed (a reload
 * that changes its size makes a new one and leaves the old to the workers
 * that may still write into it), so a writer never writes into freed
 * memory.  Events hold counts, codes and ids - never prompt text, never a
 * credential.
 */


#include "ngx_http_tokenbiryani_zone.h"


ngx_int_t
ngx_http_tokenbiryani_events_init(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t size)
{
    size_t                                len;
    ngx_http_tokenbiryani_shm_t          *sh;
    ngx_http_tokenbiryani_event_ring_t   *ring, *old;

    sh = zone->sh;
    old = sh->events;

    if (old && old->size == size) {
        return NGX_OK;
    }

    if (size == 0) {
        sh->events = NULL;
        return NGX_OK;
    }

    len = offsetof(ngx_http_tokenbiryani_event_ring_t, ev)
          + size * sizeof(ngx_http_tokenbiryani_event_t);

    ring = ngx_slab_alloc_locked(zone->shpool, len);
    if (ring == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(ring, len);

    ring->size = size;

    /* the numbers go on where the old ring stopped: readers' "since" holds */
    ring->seq = old ? old->seq : 0;
    ring->first = ring->seq + 1;

    sh->events = ring;

    return NGX_OK;
}


ngx_http_tokenbiryani_event_t *
ngx_http_tokenbiryani_events_reserve(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t *seq)
{
    uint64_t                              n;
    ngx_http_tokenbiryani_event_t        *ev;
    ngx_http_tokenbiryani_event_ring_t   *ring;

    ring = __atomic_load_n(&zone->sh->events, __ATOMIC_ACQUIRE);

    if (ring == NULL) {
        return NULL;
    }

    n = __atomic_add_fetch(&ring->seq, 1, __ATOMIC_ACQ_REL);

    ev = &ring->ev[(n - 1) % ring->size];

    /* a place being written: readers stop at it */
    __atomic_store_n(&ev->seq, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);

    *seq = n;

    return ev;
}


void
ngx_http_tokenbiryani_events_publish(ngx_http_tokenbiryani_event_t *ev,
    uint64_t seq)
{
    __atomic_store_n(&ev->seq, seq, __ATOMIC_RELEASE);
}


/*
 * The events after since, oldest first, at most max, up to the first one
 * still being written (so that a reader asking again from the last one
 * returned misses nothing).  *dropped: how many after since the ring no
 * longer holds.
 */

ngx_uint_t
ngx_http_tokenbiryani_events_read(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t since, ngx_http_tokenbiryani_event_t *out, ngx_uint_t max,
    uint64_t *dropped)
{
    uint64_t                              s, last, oldest, got;
    ngx_uint_t                            n;
    ngx_http_tokenbiryani_event_t        *ev;
    ngx_http_tokenbiryani_event_ring_t   *ring;

    *dropped = 0;

    ring = __atomic_load_n(&zone->sh->events, __ATOMIC_ACQUIRE);

    if (ring == NULL) {
        return 0;
    }

    last = __atomic_load_n(&ring->seq, __ATOMIC_ACQUIRE);

    oldest = (last > ring->size) ? last - ring->size + 1 : 1;

    if (oldest < ring->first) {
        oldest = ring->first;
    }

    s = since + 1;

    if (s < oldest) {
        *dropped = oldest - s;
        s = oldest;
    }

    for (n = 0; s <= last && n < max; s++) {
        ev = &ring->ev[(s - 1) % ring->size];

        got = __atomic_load_n(&ev->seq, __ATOMIC_ACQUIRE);

        if (got > s) {
            /* written over by a later turn of the ring */
            (*dropped)++;
            continue;
        }

        if (got != s) {
            /* still being written: the next read starts here */
            break;
        }

        ngx_memcpy(&out[n], ev, sizeof(ngx_http_tokenbiryani_event_t));

        __atomic_thread_fence(__ATOMIC_ACQUIRE);

        if (__atomic_load_n(&ev->seq, __ATOMIC_RELAXED) != s) {
            /* a later turn began writing it during the copy */
            (*dropped)++;
            continue;
        }

        n++;
    }

    return n;
}


uint64_t
ngx_http_tokenbiryani_events_last(ngx_http_tokenbiryani_zone_t *zone)
{
    ngx_http_tokenbiryani_event_ring_t  *ring;

    ring = __atomic_load_n(&zone->sh->events, __ATOMIC_ACQUIRE);

    return ring ? __atomic_load_n(&ring->seq, __ATOMIC_ACQUIRE) : 0;
}


/*
 * An event read back from the store, under its own number, by the master
 * before any worker writes: the numbers go on from the newest.
 */

void
ngx_http_tokenbiryani_events_restore(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_event_t *ev)
{
    ngx_http_tokenbiryani_event_ring_t  *ring;

    ring = zone->sh->events;

    if (ring == NULL || ev->seq <= ring->seq) {
        return;
    }

    if (ring->seq == 0 || ring->first > ev->seq) {
        ring->first = ev->seq;
    }

    ngx_memcpy(&ring->ev[(ev->seq - 1) % ring->size], ev,
               sizeof(ngx_http_tokenbiryani_event_t));
    ring->seq = ev->seq;
}
