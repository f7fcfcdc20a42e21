/*
 * What a runtime resource (a minted key, an account added at runtime) was
 * at its removal: the generation of its last record, kept a while, so
 * that a record of it read back later (from the store, from Redis, from
 * another instance) cannot bring back what was removed.  Under the lock.
 */


#include "ngx_http_tokenbiryani_zone.h"
#include "tb_hash.h"


static uint64_t
ngx_http_tokenbiryani_grave_hash(int kind, const u_char *name, size_t len)
{
    u_char  k;

    k = (u_char) kind;

    return tb_hash64(tb_hash64(0x746261677261766bULL, &k, 1), name, len);
}


uint64_t
ngx_http_tokenbiryani_grave_gen_locked(ngx_http_tokenbiryani_shm_t *sh,
    int kind, const u_char *name, size_t len)
{
    uint64_t    h;
    ngx_uint_t  i;

    h = ngx_http_tokenbiryani_grave_hash(kind, name, len);

    for (i = 0; i < NGX_HTTP_TB_GRAVES; i++) {
        if (sh->graves[i].hash == h && sh->graves[i].gen) {
            return sh->graves[i].gen;
        }
    }

    return 0;
}


void
ngx_http_tokenbiryani_grave_put_locked(ngx_http_tokenbiryani_shm_t *sh,
    int kind, const u_char *name, size_t len, uint64_t gen)
{
    uint64_t    h;
    ngx_uint_t  i;

    if (gen == 0) {
        /* no envelope (no store): nothing to replay */
        return;
    }

    h = ngx_http_tokenbiryani_grave_hash(kind, name, len);

    for (i = 0; i < NGX_HTTP_TB_GRAVES; i++) {
        if (sh->graves[i].hash == h && sh->graves[i].gen) {
            sh->graves[i].gen = ngx_max(sh->graves[i].gen, gen);
            return;
        }
    }

    i = sh->grave_next++ % NGX_HTTP_TB_GRAVES;
    sh->graves[i].hash = h;
    sh->graves[i].gen = gen;
}


/* whether a record of generation gen may replace what is, or was, there */
ngx_uint_t
ngx_http_tokenbiryani_grave_stale_locked(ngx_http_tokenbiryani_shm_t *sh,
    int kind, const u_char *name, size_t len, uint64_t cur, uint64_t gen)
{
    uint64_t  dead;

    if (gen < cur) {
        return 1;
    }

    dead = ngx_http_tokenbiryani_grave_gen_locked(sh, kind, name, len);

    return dead && gen <= dead;
}


uint64_t
ngx_http_tokenbiryani_spec_gen(const u_char *spec, size_t len)
{
    size_t    plen;
    uint64_t  gen;

    (void) tb_rec_payload((const char *) spec, len, &plen, &gen);

    return gen;
}
