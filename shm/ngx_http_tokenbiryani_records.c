/*
 * What operators add at runtime, of every kind, in the zone: a list of
 * records, each a name, a spec (JSON text whose envelope carries the
 * record's generation) and a secret, after what its kind keeps besides.
 * A minted key and an account added at runtime are two kinds of it, each
 * a row of the table below (its list, its record, its view) and a file of
 * what is its own (shm/ngx_http_tokenbiryani_rkeys.c,
 * shm/ngx_http_tokenbiryani_raccts.c).  This file does the rest, the same
 * for each: finding one, refusing a replay, putting one in place of
 * another, removing one (and remembering its generation), and copying all
 * of them out for a worker to rebuild from.
 */


#include "ngx_http_tokenbiryani_zone.h"


/*
 * A kind of runtime record: its list in the zone, the size of its record
 * (an ngx_http_tokenbiryani_rrec_t first), and its view, which view()
 * fills from a record and the copies of its name, spec and secret.
 */
typedef struct {
    int                            kind;          /* TB_REC_KEY, ... */
    size_t                         list;          /* offset in the zone */
    size_t                         size;
    size_t                         view_size;
    void                         (*view)(void *view,
                                     const ngx_http_tokenbiryani_rrec_t *r,
                                     const ngx_str_t copy[3]);
} ngx_http_tokenbiryani_rkind_t;


static void ngx_http_tokenbiryani_rkey_view(void *view,
    const ngx_http_tokenbiryani_rrec_t *r, const ngx_str_t copy[3]);
static void ngx_http_tokenbiryani_racct_view(void *view,
    const ngx_http_tokenbiryani_rrec_t *r, const ngx_str_t copy[3]);


/* the kinds of runtime record: a new one is a row here and its view */
static const ngx_http_tokenbiryani_rkind_t  ngx_http_tokenbiryani_rkinds[] = {

    /* a minted key is a record and no more: its secret, its digest */
    { TB_REC_KEY,
      offsetof(ngx_http_tokenbiryani_shm_t, rkeys),
      sizeof(ngx_http_tokenbiryani_rrec_t),
      sizeof(ngx_http_tokenbiryani_rkey_view_t),
      ngx_http_tokenbiryani_rkey_view },

    { TB_REC_ACCOUNT,
      offsetof(ngx_http_tokenbiryani_shm_t, raccts),
      sizeof(ngx_http_tokenbiryani_racct_t),
      sizeof(ngx_http_tokenbiryani_racct_view_t),
      ngx_http_tokenbiryani_racct_view }
};


/* the kind of a record's envelope (tb_record.h), NULL for no list */
static const ngx_http_tokenbiryani_rkind_t *
ngx_http_tokenbiryani_rkind(int kind)
{
    ngx_uint_t  i;

    for (i = 0; i < sizeof(ngx_http_tokenbiryani_rkinds)
                    / sizeof(ngx_http_tokenbiryani_rkinds[0]); i++)
    {
        if (ngx_http_tokenbiryani_rkinds[i].kind == kind) {
            return &ngx_http_tokenbiryani_rkinds[i];
        }
    }

    return NULL;
}


void
ngx_http_tokenbiryani_rlist_init(ngx_http_tokenbiryani_rlist_t *list)
{
    ngx_queue_init(&list->queue);
    list->n = 0;
    list->gen = 1;
}


static ngx_http_tokenbiryani_rlist_t *
ngx_http_tokenbiryani_rlist(ngx_http_tokenbiryani_shm_t *sh, int kind)
{
    return (ngx_http_tokenbiryani_rlist_t *)
               ((u_char *) sh + ngx_http_tokenbiryani_rkind(kind)->list);
}


uint64_t
ngx_http_tokenbiryani_records_gen(ngx_http_tokenbiryani_zone_t *zone,
    int kind)
{
    ngx_http_tokenbiryani_rlist_t  *list;

    list = ngx_http_tokenbiryani_rlist(zone->sh, kind);

    return (uint64_t) __atomic_load_n(&list->gen, __ATOMIC_ACQUIRE);
}


uint64_t
ngx_http_tokenbiryani_record_gen(ngx_http_tokenbiryani_zone_t *zone, int kind,
    const u_char *name, size_t len)
{
    uint64_t                      gen, dead;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    gen = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (ngx_http_tokenbiryani_rkind(kind)) {
        gen = ngx_http_tokenbiryani_rrec_gen(
                  ngx_http_tokenbiryani_rrec_find_locked(sh, kind, name, len));

    } else if (kind == TB_REC_SETTING) {
        gen = sh->strategy_rgen;
    }

    dead = ngx_http_tokenbiryani_grave_gen_locked(sh, kind, name, len);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return ngx_max(gen, dead);
}


ngx_http_tokenbiryani_rrec_t *
ngx_http_tokenbiryani_rrec_find_locked(ngx_http_tokenbiryani_shm_t *sh,
    int kind, const u_char *name, size_t len)
{
    ngx_queue_t                    *q;
    ngx_http_tokenbiryani_rrec_t   *r;
    ngx_http_tokenbiryani_rlist_t  *list;

    list = ngx_http_tokenbiryani_rlist(sh, kind);

    for (q = ngx_queue_head(&list->queue);
         q != ngx_queue_sentinel(&list->queue);
         q = ngx_queue_next(q))
    {
        r = ngx_queue_data(q, ngx_http_tokenbiryani_rrec_t, queue);

        if (r->name_len == len && ngx_memcmp(r->data, name, len) == 0) {
            return r;
        }
    }

    return NULL;
}


uint64_t
ngx_http_tokenbiryani_rrec_gen(const ngx_http_tokenbiryani_rrec_t *r)
{
    if (r == NULL) {
        return 0;
    }

    return ngx_http_tokenbiryani_spec_gen(ngx_http_tokenbiryani_rrec_spec(r),
                                          r->spec_len);
}


ngx_uint_t
ngx_http_tokenbiryani_rrec_stale_locked(ngx_http_tokenbiryani_shm_t *sh,
    int kind, const u_char *name, size_t len,
    const u_char *spec, size_t spec_len, ngx_http_tokenbiryani_rrec_t **old)
{
    *old = ngx_http_tokenbiryani_rrec_find_locked(sh, kind, name, len);

    return ngx_http_tokenbiryani_grave_stale_locked(sh, kind, name, len,
               ngx_http_tokenbiryani_rrec_gen(*old),
               ngx_http_tokenbiryani_spec_gen(spec, spec_len));
}


ngx_uint_t
ngx_http_tokenbiryani_rrec_same(const ngx_http_tokenbiryani_rrec_t *r,
    const u_char *spec, size_t spec_len, const u_char *secret,
    size_t secret_len)
{
    return r->spec_len == spec_len
           && r->secret_len == secret_len
           && ngx_memcmp(ngx_http_tokenbiryani_rrec_spec(r), spec, spec_len)
              == 0
           && ngx_memcmp(ngx_http_tokenbiryani_rrec_secret(r), secret,
                         secret_len)
              == 0;
}


ngx_http_tokenbiryani_rrec_t *
ngx_http_tokenbiryani_rrec_alloc_locked(ngx_http_tokenbiryani_zone_t *zone,
    int kind, const u_char *name,
    size_t name_len, const u_char *spec, size_t spec_len,
    const u_char *secret, size_t secret_len)
{
    u_char                        *p;
    size_t                         size;
    ngx_http_tokenbiryani_rrec_t  *r;

    size = ngx_http_tokenbiryani_rkind(kind)->size;

    r = ngx_slab_alloc_locked(zone->shpool,
                              size + name_len + spec_len + secret_len + 3);
    if (r == NULL) {
        return NULL;
    }

    r->name_len = name_len;
    r->spec_len = spec_len;
    r->secret_len = secret_len;
    r->data = (u_char *) r + size;

    p = ngx_cpymem(r->data, name, name_len);
    *p++ = '\0';
    p = ngx_cpymem(p, spec, spec_len);
    *p++ = '\0';
    p = ngx_cpymem(p, secret, secret_len);
    *p = '\0';

    return r;
}


void
ngx_http_tokenbiryani_rrec_link_locked(ngx_http_tokenbiryani_zone_t *zone,
    int kind, ngx_http_tokenbiryani_rrec_t *old,
    ngx_http_tokenbiryani_rrec_t *r)
{
    ngx_http_tokenbiryani_rlist_t  *list;

    list = ngx_http_tokenbiryani_rlist(zone->sh, kind);

    if (old) {
        ngx_queue_insert_after(&old->queue, &r->queue);
        ngx_queue_remove(&old->queue);
        ngx_slab_free_locked(zone->shpool, old);

    } else {
        ngx_queue_insert_tail(&list->queue, &r->queue);
        list->n++;
    }

    (void) ngx_atomic_fetch_add(&list->gen, 1);
}


void
ngx_http_tokenbiryani_rrec_remove_locked(ngx_http_tokenbiryani_zone_t *zone,
    int kind, ngx_http_tokenbiryani_rrec_t *r)
{
    ngx_http_tokenbiryani_rlist_t  *list;

    list = ngx_http_tokenbiryani_rlist(zone->sh, kind);

    ngx_http_tokenbiryani_grave_put_locked(zone->sh, kind, r->data,
                                           r->name_len,
                                           ngx_http_tokenbiryani_rrec_gen(r));

    ngx_queue_remove(&r->queue);
    ngx_slab_free_locked(zone->shpool, r);
    list->n--;

    (void) ngx_atomic_fetch_add(&list->gen, 1);
}


ngx_int_t
ngx_http_tokenbiryani_records_copy(ngx_http_tokenbiryani_zone_t *zone,
    int kind, ngx_pool_t *pool, ngx_array_t *out, uint64_t *gen)
{
    u_char                               *p;
    size_t                                size, need;
    ngx_str_t                             copy[3];
    ngx_uint_t                            n;
    ngx_queue_t                          *q;
    ngx_http_tokenbiryani_rrec_t         *r;
    ngx_http_tokenbiryani_rlist_t        *list;
    const ngx_http_tokenbiryani_rkind_t  *kd;

    kd = ngx_http_tokenbiryani_rkind(kind);
    list = ngx_http_tokenbiryani_rlist(zone->sh, kind);

    for ( ;; ) {
        /* the size first, then the copy if it still fits: no allocation
         * under the lock */

        ngx_shmtx_lock(&zone->shpool->mutex);

        size = 0;
        n = list->n;

        for (q = ngx_queue_head(&list->queue);
             q != ngx_queue_sentinel(&list->queue);
             q = ngx_queue_next(q))
        {
            r = ngx_queue_data(q, ngx_http_tokenbiryani_rrec_t, queue);
            size += r->name_len + r->spec_len + r->secret_len + 3;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);

        if (ngx_array_init(out, pool, n ? n : 1, kd->view_size) != NGX_OK) {
            return NGX_ERROR;
        }

        p = ngx_pnalloc(pool, size ? size : 1);
        if (p == NULL) {
            return NGX_ERROR;
        }

        ngx_shmtx_lock(&zone->shpool->mutex);

        if (list->n != n) {
            ngx_shmtx_unlock(&zone->shpool->mutex);
            continue;
        }

        for (q = ngx_queue_head(&list->queue);
             q != ngx_queue_sentinel(&list->queue);
             q = ngx_queue_next(q))
        {
            r = ngx_queue_data(q, ngx_http_tokenbiryani_rrec_t, queue);

            need = r->name_len + r->spec_len + r->secret_len + 3;

            if (need > size) {
                break;
            }

            size -= need;

            copy[0].data = p;
            copy[0].len = r->name_len;
            copy[1].data = copy[0].data + r->name_len + 1;
            copy[1].len = r->spec_len;
            copy[2].data = copy[1].data + r->spec_len + 1;
            copy[2].len = r->secret_len;

            p = ngx_cpymem(p, r->data, need);

            /* preallocated: never NULL */
            kd->view(ngx_array_push(out), r, copy);
        }

        if (gen) {
            *gen = (uint64_t) list->gen;
        }

        ngx_shmtx_unlock(&zone->shpool->mutex);

        if (q == ngx_queue_sentinel(&list->queue) || out->nelts == n) {
            return NGX_OK;
        }

        /* a record grew between the two looks: again */
    }
}


static void
ngx_http_tokenbiryani_rkey_view(void *view,
    const ngx_http_tokenbiryani_rrec_t *r, const ngx_str_t copy[3])
{
    ngx_http_tokenbiryani_rkey_view_t  *v = view;

    v->name = copy[0];
    v->spec = copy[1];

    /* a key's secret is its 32-byte digest (rkey_write) */
    ngx_memzero(v->digest, sizeof(v->digest));
    ngx_memcpy(v->digest, copy[2].data,
               ngx_min(copy[2].len, sizeof(v->digest)));
}


static void
ngx_http_tokenbiryani_racct_view(void *view,
    const ngx_http_tokenbiryani_rrec_t *r, const ngx_str_t copy[3])
{
    ngx_http_tokenbiryani_racct_view_t   *v = view;
    const ngx_http_tokenbiryani_racct_t  *ra;

    ra = (const ngx_http_tokenbiryani_racct_t *) r;

    v->id = copy[0];
    v->spec = copy[1];
    v->sealed = copy[2];

    v->slot = ra->slot;
    v->version = ra->version;
    v->naddrs = ra->naddrs;
    ngx_memcpy(v->addrs, ra->addrs,
               ra->naddrs * sizeof(ngx_http_tokenbiryani_raddr_t));
}
