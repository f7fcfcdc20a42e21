/*
 * The adaptive output estimate.
 */

#include <string.h>

#include "tb_estimator.h"


size_t
tb_est_size(uint32_t window)
{
    return sizeof(tb_est_t) + 2 * window * sizeof(uint32_t) + window;
}


void
tb_est_init(tb_est_t *e, const char *model, size_t len, uint64_t model_hash,
    uint32_t window, double q)
{
    memset(e, 0, tb_est_size(window));

    if (len > TB_EST_MODEL_MAX) {
        len = TB_EST_MODEL_MAX;
    }

    memcpy(e->model, model, len);
    e->model[len] = '\0';
    e->model_hash = model_hash;
    e->window = window ? window : 1;
    e->q = q;
}


/* the first index whose value is >= v */
static uint32_t
tb_est_lower_bound(const uint32_t *a, uint32_t n, uint32_t v)
{
    uint32_t  lo, hi, mid;

    lo = 0;
    hi = n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (a[mid] < v) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return lo;
}


/*
 * v into a window of size samples kept twice: in the order they came (a
 * ring, *head its next place) and sorted (*n of them); once the window is
 * full, the oldest leaves both
 */
static void
tb_est_push(uint32_t *ring, uint32_t *sorted, uint32_t size, uint32_t *head,
    uint32_t *n, uint32_t v)
{
    uint32_t  i;

    if (*n == size) {
        i = tb_est_lower_bound(sorted, *n, ring[*head]);
        memmove(&sorted[i], &sorted[i + 1], (*n - i - 1) * sizeof(uint32_t));
        (*n)--;
    }

    ring[*head] = v;
    *head = (*head + 1) % size;

    i = tb_est_lower_bound(sorted, *n, v);
    memmove(&sorted[i + 1], &sorted[i], (*n - i) * sizeof(uint32_t));
    sorted[i] = v;
    (*n)++;
}


uint32_t
tb_est_nearest_rank(const uint32_t *sorted, uint32_t n, double q)
{
    double    pos;
    uint32_t  i;

    if (n == 0) {
        return 0;
    }

    pos = q * (double) (n - 1);
    i = (uint32_t) (pos + 0.5);

    return sorted[i < n ? i : n - 1];
}


void
tb_est_observe(tb_est_t *e, int64_t leased, int64_t actual)
{
    uint8_t   *under, old;
    uint32_t  *ring, *sorted, v;

    if (actual <= 0) {
        return;
    }

    ring = e->data;
    sorted = e->data + e->window;
    under = (uint8_t *) (e->data + 2 * e->window);

    v = actual > (int64_t) UINT32_MAX ? UINT32_MAX : (uint32_t) actual;

    tb_est_push(ring, sorted, e->window, &e->head, &e->n, v);

    /* was the lease beaten? */

    if (e->nunder == e->window) {
        old = under[e->under_head];
        e->undershoots -= old;

    } else {
        e->nunder++;
    }

    under[e->under_head] = (actual > leased) ? 1 : 0;
    e->undershoots += under[e->under_head];
    e->under_head = (e->under_head + 1) % e->window;

    e->quantile = tb_est_nearest_rank(sorted, e->n, e->q);
    e->median = tb_est_nearest_rank(sorted, e->n, 0.5);
    e->max = sorted[e->n - 1];
}


double
tb_est_undershoot_rate(const tb_est_t *e, int64_t min_samples)
{
    if (e->nunder == 0 || (int64_t) e->nunder < min_samples) {
        return -1;
    }

    return (double) e->undershoots / (double) e->nunder;
}


int
tb_est_predicting(const tb_est_t *e, const tb_config_t *cf)
{
    double  rate;

    if (e == NULL || !cf->output_estimate_adaptive
        || (int64_t) e->n < cf->output_estimate_min_samples)
    {
        return 0;
    }

    rate = tb_est_undershoot_rate(e, cf->output_estimate_min_samples);

    return rate < 0 || rate <= cf->output_estimate_max_undershoot;
}


int64_t
tb_est_lease(const tb_est_t *e, const tb_config_t *cf, int64_t max_tokens)
{
    int64_t  v;

    if (max_tokens < 1) {
        max_tokens = 1;
    }

    if (!tb_est_predicting(e, cf)) {
        return max_tokens;
    }

    v = e->quantile;

    if (v < cf->output_estimate_floor) {
        v = cf->output_estimate_floor;
    }

    return v < max_tokens ? v : max_tokens;
}


void
tb_est_observe_input(tb_est_t *e, int64_t text_bytes, int64_t tokens)
{
    uint32_t  v;
    uint64_t  r;

    if (text_bytes < 64 || tokens <= 0) {
        return;
    }

    r = (uint64_t) tokens * 1000000 / (uint64_t) text_bytes;
    v = r > UINT32_MAX ? UINT32_MAX : (uint32_t) r;

    tb_est_push(e->in_ring, e->in_sorted, TB_EST_INPUT_SAMPLES, &e->in_head,
                &e->in_n, v);
}


uint32_t
tb_est_input_ratio(const tb_est_t *e)
{
    if (e == NULL || e->in_n < TB_EST_INPUT_MIN) {
        return 0;
    }

    return tb_est_nearest_rank(e->in_sorted, e->in_n, TB_EST_INPUT_Q);
}


int64_t
tb_est_input(const tb_est_t *e, int64_t text_bytes, int64_t fixed,
    double margin, int *calibrated)
{
    int64_t   tokens;
    uint32_t  ratio;

    ratio = tb_est_input_ratio(e);

    if (ratio) {
        *calibrated = 1;
        /* rounded up: a token short is a token over the window */
        tokens = fixed + (int64_t) (((uint64_t) text_bytes * ratio + 999999)
                                    / 1000000);

    } else {
        *calibrated = 0;
        tokens = (int64_t) ((fixed + (text_bytes * 2 + 6) / 7) * margin
                            + 0.999);
    }

    return tokens > 0 ? tokens : 1;
}
