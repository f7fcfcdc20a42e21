/*
 * The request inspector: a ring of the last observability.event_buffer
 * requests in the zone, written once per request when it ends.  Records
 * hold ids, counts and hashes - never prompt text, never a credential.
 */


#include "ngx_http_tokenbiryani_zone.h"
#include "tb_hash.h"


static uint64_t ngx_http_tokenbiryani_ring_first(uint64_t newest,
    ngx_uint_t size, uint64_t since, uint64_t *lost);


void
ngx_http_tokenbiryani_inspect_add(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_record_t *rec)
{
    ngx_http_tokenbiryani_shm_t          *sh;
    ngx_http_tokenbiryani_usage_entry_t  *e;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    rec->seq = ++sh->ring_seq;

    if (sh->ring_size) {
        /* the candidates it has, not the room for 32: readers stop at
         * ncands */
        ngx_memcpy(&sh->ring[(rec->seq - 1) % sh->ring_size], rec,
                   offsetof(ngx_http_tokenbiryani_record_t, cands)
                   + rec->ncands * sizeof(ngx_http_tokenbiryani_inspect_cand_t));
    }

    if (sh->usage_size) {
        e = &sh->usage[(rec->seq - 1) % sh->usage_size];

        e->seq = rec->seq;
        e->ended_ms = rec->started_ms + rec->latency_ms;
        e->input = rec->usage.input_tokens;
        e->output = rec->usage.output_tokens;
        e->cache_read = rec->usage.cache_read_input_tokens;
        e->cache_write = rec->usage.cache_creation_input_tokens;
        e->cost = rec->cost;
        e->chosen = rec->chosen;
        e->status = rec->status;
        ngx_memcpy(e->key, rec->key, sizeof(e->key));
        ngx_memcpy(e->model, rec->model, NGX_HTTP_TB_USAGE_MODEL);
        e->model[NGX_HTTP_TB_USAGE_MODEL] = '\0';

        if (memchr(rec->model, '\0', NGX_HTTP_TB_USAGE_MODEL + 1) == NULL) {
            /* longer than the entry holds: told apart by its hash */
            (void) ngx_snprintf((u_char *) e->model + 47, 18, "~%016xL%Z",
                                tb_hash64(0, rec->model,
                                          ngx_strlen(rec->model)));
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


/* the newest first, at most max */

ngx_uint_t
ngx_http_tokenbiryani_inspect_list(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_record_t *out, ngx_uint_t max)
{
    uint64_t                      seq;
    ngx_uint_t                    i, n;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (seq = sh->ring_seq;
         seq > 0 && n < max && sh->ring_seq - seq < sh->ring_size;
         seq--)
    {
        i = (seq - 1) % sh->ring_size;

        /* (a slot never written, or whose request is gone, is not) */
        if (sh->ring[i].seq == seq) {
            ngx_memcpy(&out[n++], &sh->ring[i],
                       sizeof(ngx_http_tokenbiryani_record_t));
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


ngx_int_t
ngx_http_tokenbiryani_inspect_find(ngx_http_tokenbiryani_zone_t *zone,
    u_char *id, ngx_http_tokenbiryani_record_t *out)
{
    ngx_int_t                        rc;
    ngx_uint_t                       i;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_record_t  *rec;

    sh = zone->sh;
    rc = NGX_DECLINED;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (i = 0; i < sh->ring_size; i++) {
        rec = &sh->ring[i];

        if (rec->seq
            && ngx_memcmp(rec->id, id, NGX_HTTP_TB_REQUEST_ID_LEN) == 0)
        {
            ngx_memcpy(out, rec, sizeof(ngx_http_tokenbiryani_record_t));
            rc = NGX_OK;
            break;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}


/*
 * The records after since, oldest first, at most max; how many.  Each is
 * copied up to its last candidate (what follows is not read): with a few
 * accounts that is a tenth of a record, and the lock is held that much
 * less.
 */

ngx_uint_t
ngx_http_tokenbiryani_inspect_since(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t since, ngx_http_tokenbiryani_record_t *out, ngx_uint_t max)
{
    uint64_t                         seq;
    ngx_uint_t                       n;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_record_t  *rec;

    sh = zone->sh;
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (sh->ring_size) {
        for (seq = ngx_http_tokenbiryani_ring_first(sh->ring_seq,
                       sh->ring_size, since, NULL);
             seq <= sh->ring_seq && n < max;
             seq++)
        {
            rec = &sh->ring[(seq - 1) % sh->ring_size];

            if (rec->seq != seq) {
                continue;
            }

            ngx_memcpy(&out[n], rec,
                       offsetof(ngx_http_tokenbiryani_record_t, cands)
                       + ngx_min(rec->ncands, NGX_HTTP_TB_INSPECT_CANDS)
                         * sizeof(ngx_http_tokenbiryani_inspect_cand_t));

            if (out[n].seq == seq) {
                n++;
            }
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


/* a record read back from the store, under its own number (the master) */

void
ngx_http_tokenbiryani_inspect_restore(ngx_http_tokenbiryani_zone_t *zone,
    const ngx_http_tokenbiryani_record_t *rec)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (sh->ring_size && rec->seq > sh->ring_seq) {
        ngx_memcpy(&sh->ring[(rec->seq - 1) % sh->ring_size], rec,
                   sizeof(ngx_http_tokenbiryani_record_t));
        sh->ring_seq = rec->seq;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_inspect_number_from(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t seq)
{
    ngx_shmtx_lock(&zone->shpool->mutex);

    if (seq != (uint64_t) NGX_ERROR && seq > zone->sh->ring_seq) {
        zone->sh->ring_seq = seq;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


static int ngx_libc_cdecl
ngx_http_tokenbiryani_record_cmp(const void *one, const void *two)
{
    const ngx_http_tokenbiryani_record_t  *a = one, *b = two;

    return (a->seq > b->seq) - (a->seq < b->seq);
}


ngx_int_t
ngx_http_tokenbiryani_inspect_compact(ngx_http_tokenbiryani_zone_t *zone,
    ngx_log_t *log)
{
    uint64_t                         seq;
    ngx_uint_t                       i, n, size;
    ngx_http_tokenbiryani_shm_t     *sh;
    ngx_http_tokenbiryani_record_t  *recs;

    sh = zone->sh;
    size = sh->ring_size;

    if (size == 0) {
        return NGX_OK;
    }

    recs = ngx_alloc(size * sizeof(ngx_http_tokenbiryani_record_t), log);
    if (recs == NULL) {
        return NGX_ERROR;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    n = 0;

    for (i = 0; i < size; i++) {
        if (sh->ring[i].seq) {
            ngx_memcpy(&recs[n++], &sh->ring[i],
                       sizeof(ngx_http_tokenbiryani_record_t));
        }
    }

    ngx_qsort(recs, n, sizeof(ngx_http_tokenbiryani_record_t),
              ngx_http_tokenbiryani_record_cmp);

    ngx_memzero(sh->ring, size * sizeof(ngx_http_tokenbiryani_record_t));

    /* (each has its own number, at most ring_seq: n of them fit below) */
    seq = sh->ring_seq - n;

    for (i = 0; i < n; i++) {
        recs[i].seq = ++seq;
        ngx_memcpy(&sh->ring[(seq - 1) % size], &recs[i],
                   sizeof(ngx_http_tokenbiryani_record_t));
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_free(recs);

    return NGX_OK;
}


ngx_uint_t
ngx_http_tokenbiryani_usage_since(ngx_http_tokenbiryani_zone_t *zone,
    uint64_t since, ngx_http_tokenbiryani_usage_entry_t *out, ngx_uint_t max,
    uint64_t *lost)
{
    uint64_t                              seq;
    ngx_uint_t                            n, size;
    ngx_http_tokenbiryani_shm_t          *sh;
    ngx_http_tokenbiryani_usage_entry_t  *e;

    sh = zone->sh;
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    size = sh->usage_size;
    seq = ngx_http_tokenbiryani_ring_first(sh->ring_seq, size, since, lost);

    while (size && seq <= sh->ring_seq && n < max) {
        e = &sh->usage[(seq - 1) % size];

        if (e->seq == seq++) {
            out[n++] = *e;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


/*
 * The first of a ring of size holding up to newest to read after since;
 * *lost (when not NULL): how many after since it no longer holds
 */

static uint64_t
ngx_http_tokenbiryani_ring_first(uint64_t newest, ngx_uint_t size,
    uint64_t since, uint64_t *lost)
{
    uint64_t  oldest;

    oldest = (newest > size) ? newest - size + 1 : 1;

    if (lost) {
        *lost = (size && oldest > since + 1) ? oldest - since - 1 : 0;
    }

    return ngx_max(since + 1, oldest);
}
