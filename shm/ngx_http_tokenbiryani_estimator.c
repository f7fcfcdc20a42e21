/*
 * The output estimators in the zone: one tb_est_t per model, so every
 * worker learns from every completion.  At most NGX_HTTP_TB_ESTIMATORS
 * models; a new one replaces the one used least recently.
 */


#include "ngx_http_tokenbiryani_zone.h"
#include "tb_hash.h"


static tb_est_t *
ngx_http_tokenbiryani_est_find(ngx_http_tokenbiryani_shm_t *sh,
    uint64_t hash, const char *model, size_t len)
{
    ngx_uint_t   i;
    tb_est_t    *e;

    for (i = 0; i < sh->nmodels; i++) {
        e = sh->models[i];

        if (e->model_hash == hash && ngx_strlen(e->model) == len
            && ngx_strncmp(e->model, model, len) == 0)
        {
            return e;
        }
    }

    return NULL;
}


int64_t
ngx_http_tokenbiryani_estimate(ngx_http_tokenbiryani_zone_t *zone,
    const char *model, size_t len, int64_t max_tokens, int64_t text_bytes,
    int64_t fixed, int64_t *output, ngx_uint_t *calibrated)
{
    int                           cal;
    int64_t                       input;
    uint64_t                      hash;
    tb_est_t                     *e;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    len = ngx_min(len, TB_EST_MODEL_MAX);
    hash = tb_hash64(0, model, len);

    ngx_shmtx_lock(&zone->shpool->mutex);

    e = ngx_http_tokenbiryani_est_find(sh, hash, model, len);

    if (e) {
        e->last_used = ++sh->models_clock;
    }

    *output = tb_est_lease(zone->tbcf->output_estimate_adaptive ? e : NULL,
                           zone->tbcf, max_tokens);

    input = tb_est_input(e, text_bytes, fixed,
                         zone->tbcf->estimate_safety_margin, &cal);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    *calibrated = cal;

    return input;
}


void
ngx_http_tokenbiryani_estimator_observe(
    ngx_http_tokenbiryani_zone_t *zone, const char *model, size_t len,
    int64_t leased, int64_t actual, int64_t text_bytes, int64_t prompt)
{
    uint32_t                      window;
    uint64_t                      hash;
    tb_est_t                     *e;
    ngx_uint_t                    i, lru;
    ngx_slab_pool_t              *shpool;
    ngx_http_tokenbiryani_shm_t  *sh;

    if (actual <= 0 && prompt <= 0) {
        return;
    }

    sh = zone->sh;
    shpool = zone->shpool;
    len = ngx_min(len, TB_EST_MODEL_MAX);
    hash = tb_hash64(0, model, len);
    window = (uint32_t) zone->tbcf->output_estimate_window;

    ngx_shmtx_lock(&shpool->mutex);

    e = ngx_http_tokenbiryani_est_find(sh, hash, model, len);

    if (e == NULL) {

        if (sh->nmodels == NGX_HTTP_TB_ESTIMATORS) {
            lru = 0;

            for (i = 1; i < sh->nmodels; i++) {
                if (sh->models[i]->last_used < sh->models[lru]->last_used) {
                    lru = i;
                }
            }

            ngx_slab_free_locked(shpool, sh->models[lru]);
            sh->models[lru] = sh->models[--sh->nmodels];
        }

        e = ngx_http_tokenbiryani_alloc_locked(zone, tb_est_size(window));
        if (e == NULL) {
            ngx_shmtx_unlock(&shpool->mutex);
            return;
        }

        tb_est_init(e, model, len, hash, window,
                    zone->tbcf->output_estimate_quantile);

        sh->models[sh->nmodels++] = e;
    }

    /* a reload may change the quantile; the samples stay */
    e->q = zone->tbcf->output_estimate_quantile;
    e->last_used = ++sh->models_clock;

    tb_est_observe(e, leased, actual);

    if (text_bytes > 0) {
        tb_est_observe_input(e, text_bytes, prompt);
    }

    ngx_shmtx_unlock(&shpool->mutex);
}


/* consistent copies of every estimator, for /admin/estimation */

ngx_uint_t
ngx_http_tokenbiryani_estimator_snapshot(
    ngx_http_tokenbiryani_zone_t *zone, tb_est_t **copies,
    ngx_uint_t max, ngx_pool_t *pool)
{
    size_t                        size;
    tb_est_t                     *e;
    ngx_uint_t                    i, n;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (i = 0; i < sh->nmodels && n < max; i++) {
        e = sh->models[i];
        size = tb_est_size(e->window);

        copies[n] = ngx_palloc(pool, size);
        if (copies[n] == NULL) {
            break;
        }

        ngx_memcpy(copies[n], e, size);
        n++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}
