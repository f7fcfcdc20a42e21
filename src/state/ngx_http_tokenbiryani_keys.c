/*
 * Minted keys in a worker (see ngx_http_tokenbiryani_keys.h).
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "ngx_http_tokenbiryani_events.h"

#include <openssl/crypto.h>


typedef struct {
    uint64_t                        gen;      /* 0: never built */
    uint64_t                        epoch;    /* of the accounts */
    ngx_http_tokenbiryani_rkent_t  *ents;
    ngx_uint_t                      n;
} ngx_http_tokenbiryani_rkeys_t;


static ngx_http_tokenbiryani_rkeys_t  ngx_http_tokenbiryani_cache;

/* what an empty table returns: not NULL, which means no memory */
static ngx_http_tokenbiryani_rkent_t  ngx_http_tokenbiryani_none[1];


/*
 * What a minted key's requests read of it, once per copy: its pool as
 * flags over the accounts (NULL: all), and unset limits as the file's keys
 * get them - with other keys about, three quarters of its pool's slots and
 * of the queue.  NGX_ERROR: no memory.
 */
static ngx_int_t
ngx_http_tokenbiryani_rkent_derive(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_rkent_t *ent, ngx_uint_t nminted)
{
    int64_t                           slots;
    ngx_uint_t                        i, j, others;
    const tb_key_conf_t              *kc;
    ngx_http_tokenbiryani_account_t  *a;

    kc = &ent->ks.conf;
    a = tmcf->accounts.elts;
    others = (tmcf->tbcf->nkeys + nminted > 1);

    if (kc->pool.n) {
        ent->pool = ngx_calloc(tmcf->max_accounts + 1, ngx_cycle->log);
        if (ent->pool == NULL) {
            return NGX_ERROR;
        }

        for (i = 0; i < tmcf->accounts.nelts; i++) {
            if (a[i].retired) {
                continue;
            }

            for (j = 0; j < kc->pool.n; j++) {
                if (ngx_strcmp(kc->pool.items[j], a[i].conf->id) == 0) {
                    ent->pool[i] = 1;
                    break;
                }
            }
        }
    }

    ent->max_inflight = kc->max_inflight;

    if (kc->max_inflight == TB_AUTO) {
        ent->max_inflight = TB_UNSET;
        slots = 0;

        for (i = 0; i < tmcf->accounts.nelts; i++) {
            if (!a[i].retired && (ent->pool == NULL || ent->pool[i])) {
                slots += a[i].conf->max_concurrency;
            }
        }

        if (others && slots > 0) {
            ent->max_inflight = slots * 3 / 4 ? slots * 3 / 4 : 1;
        }
    }

    ent->max_queued = kc->max_queued;

    if (kc->max_queued == TB_AUTO) {
        ent->max_queued = TB_UNSET;

        if (others && tmcf->tbcf->queue_max_size > 0) {
            ent->max_queued = tmcf->tbcf->queue_max_size * 3 / 4
                              ? tmcf->tbcf->queue_max_size * 3 / 4 : 1;
        }
    }

    return NGX_OK;
}


ngx_http_tokenbiryani_rkent_t *
ngx_http_tokenbiryani_rkeys(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_uint_t *n)
{
    size_t                              len;
    uint64_t                            gen;
    ngx_uint_t                          i, k;
    ngx_pool_t                         *pool;
    const char                         *spec;
    ngx_array_t                         views;
    ngx_http_tokenbiryani_rkeys_t      *c;
    ngx_http_tokenbiryani_rkent_t      *ents;
    ngx_http_tokenbiryani_rkey_view_t  *v;
    char                                err[256];

    c = &ngx_http_tokenbiryani_cache;

    if (c->gen == ngx_http_tokenbiryani_rkeys_gen(&tmcf->zone)
        && c->epoch == ngx_http_tokenbiryani_accounts_epoch())
    {
        *n = c->n;
        return c->ents ? c->ents : ngx_http_tokenbiryani_none;
    }

    pool = ngx_create_pool(4096, ngx_cycle->log);
    if (pool == NULL) {
        return NULL;
    }

    if (ngx_http_tokenbiryani_rkeys_copy(&tmcf->zone, pool, &views, &gen)
        != NGX_OK)
    {
        ngx_destroy_pool(pool);
        return NULL;
    }

    v = views.elts;

    ents = views.nelts
           ? ngx_calloc(views.nelts * sizeof(ngx_http_tokenbiryani_rkent_t),
                        ngx_cycle->log)
           : NULL;

    if (views.nelts && ents == NULL) {
        ngx_destroy_pool(pool);
        return NULL;
    }

    k = 0;

    for (i = 0; i < views.nelts; i++) {

        /* checked when it came in: the zone keeps its envelope */
        spec = tb_rec_payload((char *) v[i].spec.data, v[i].spec.len, &len,
                              NULL);

        if (tb_keyspec_parse(&ents[k].ks, spec, len, TB_KEYSPEC_STORED, NULL,
                             NULL, 0, err, sizeof(err))
            != 0)
        {
            /* checked before it was stored: only a bug gets here */
            ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                          "tokenbiryani: the minted key \"%V\" cannot be "
                          "read: %s", &v[i].name, err);
            continue;
        }

        ngx_memcpy(ents[k].digest, v[i].digest, 32);
        k++;
    }

    ngx_destroy_pool(pool);

    for (i = 0; i < k; i++) {
        if (ngx_http_tokenbiryani_rkent_derive(tmcf, &ents[i], k) != NGX_OK) {
            for (i = 0; i < k; i++) {
                ngx_free(ents[i].pool);
                tb_keyspec_free(&ents[i].ks);
            }

            ngx_free(ents);
            return NULL;
        }
    }

    for (i = 0; i < c->n; i++) {
        ngx_free(c->ents[i].pool);
        tb_keyspec_free(&c->ents[i].ks);
    }

    if (c->ents) {
        ngx_free(c->ents);
    }

    c->ents = ents;
    c->n = k;
    c->gen = gen;
    c->epoch = ngx_http_tokenbiryani_accounts_epoch();

    *n = k;

    return ents ? ents : ngx_http_tokenbiryani_none;
}


const tb_key_conf_t *
ngx_http_tokenbiryani_yaml_key(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *name, size_t len)
{
    size_t  i;

    for (i = 0; i < tmcf->tbcf->nkeys; i++) {
        if (ngx_strlen(tmcf->tbcf->keys[i].name) == len
            && ngx_strncmp(tmcf->tbcf->keys[i].name, name, len) == 0)
        {
            return &tmcf->tbcf->keys[i];
        }
    }

    return NULL;
}


static char **
ngx_http_tokenbiryani_copy_list(ngx_pool_t *pool, const tb_strlist_t *l)
{
    size_t   i, len;
    char   **items;

    items = ngx_palloc(pool, (l->n ? l->n : 1) * sizeof(char *));
    if (items == NULL) {
        return NULL;
    }

    for (i = 0; i < l->n; i++) {
        len = ngx_strlen(l->items[i]) + 1;

        items[i] = ngx_pnalloc(pool, len);
        if (items[i] == NULL) {
            return NULL;
        }

        ngx_memcpy(items[i], l->items[i], len);
    }

    return items;
}


ngx_int_t
ngx_http_tokenbiryani_rkey_auth(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *key)
{
    size_t                              len;
    ngx_uint_t                          i, n, found;
    tb_key_conf_t                      *kc;
    const tb_keyspec_t                 *ks;
    ngx_http_tokenbiryani_rkent_t      *ents, *ent;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    u_char                             *name;
    u_char                              digest[32];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ents = ngx_http_tokenbiryani_rkeys(tmcf, &n);
    if (ents == NULL) {
        return NGX_ERROR;
    }

    if (n == 0) {
        return NGX_DECLINED;
    }

    tb_sha256(key->data, key->len, digest);

    /* every entry compared, in constant time */

    found = n;

    for (i = 0; i < n; i++) {
        if (CRYPTO_memcmp(ents[i].digest, digest, 32) == 0) {
            found = i;
        }
    }

    if (found == n) {
        return NGX_DECLINED;
    }

    ent = &ents[found];
    ks = &ent->ks;

    if (ks->expires && ks->expires <= (int64_t) ngx_time()) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_UNAUTHORIZED,
            "authentication_error", "key \"%s\" expired", ks->conf.name);

        /* named where refusals are shown */
        ctx->err.refused = NGX_HTTP_TB_REFUSED_EXPIRED;
        name = ngx_pnalloc(r->pool, TB_ID_MAX + 1);

        if (name) {
            (void) ngx_cpystrn(name, (u_char *) ks->conf.name,
                               TB_ID_MAX + 1);
            ctx->err.refused_key = (const char *) name;
        }

        return NGX_ABORT;
    }

    /* a copy the request owns: the worker's may be rebuilt meanwhile */

    kc = ngx_palloc(r->pool, sizeof(tb_key_conf_t));
    if (kc == NULL) {
        return NGX_ERROR;
    }

    *kc = ks->conf;

    len = ngx_strlen(ks->conf.name) + 1;

    kc->name = ngx_pnalloc(r->pool, len);
    kc->models.items = ngx_http_tokenbiryani_copy_list(r->pool,
                                                       &ks->conf.models);
    kc->pool.items = ngx_http_tokenbiryani_copy_list(r->pool, &ks->conf.pool);

    if (kc->name == NULL || kc->models.items == NULL
        || kc->pool.items == NULL)
    {
        return NGX_ERROR;
    }

    ngx_memcpy(kc->name, ks->conf.name, len);

    /* the pool's flags and the limits, derived when the copy was built */

    ctx->pool = NULL;

    if (ent->pool) {
        ctx->pool = ngx_pnalloc(r->pool, tmcf->max_accounts + 1);
        if (ctx->pool == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(ctx->pool, ent->pool, tmcf->max_accounts + 1);
    }

    kc->max_inflight = ent->max_inflight;
    kc->max_queued = ent->max_queued;

    ctx->key = kc;
    ctx->key_hash = kc->name_hash;
    ctx->admin = kc->admin;

    return NGX_OK;
}
