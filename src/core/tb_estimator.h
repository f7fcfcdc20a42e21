/*
 * The adaptive output estimate: what to lease for a request's output.
 *
 * max_tokens is a ceiling, not a forecast (an agent asks for 32,000 and
 * gets a few hundred), and leasing the ceiling spends the pool's
 * concurrency.  So per model the last `window` real output counts are kept
 * and the lease is their nearest-rank quantile (p95), bounded by:
 *   - the ceiling until min_samples outputs exist (19 is not enough at 20);
 *   - never above the caller's max_tokens, never below the floor;
 *   - the ceiling again while predictions are beaten more often than
 *     max_undershoot (a p95 is outrun ~5% of the time by construction;
 *     more means the distribution changed).
 *
 * One tb_est_t per model, in one contiguous block the caller places (the
 * shared zone in nginx).  Plain C, no nginx headers.
 */

#ifndef TB_ESTIMATOR_H
#define TB_ESTIMATOR_H

#include <stddef.h>
#include <stdint.h>

#include "tb_config.h"


#define TB_EST_MODEL_MAX      64

/*
 * The input estimate, calibrated: per model the last TB_EST_INPUT_SAMPLES
 * ratios of the prompt tokens an answer counted to the request's text
 * bytes (in tokens per million bytes); once TB_EST_INPUT_MIN are held, a
 * lease's input is their nearest-rank p95 times the request's text bytes,
 * so it follows the upstream's tokenizer and needs no safety margin.
 */
#define TB_EST_INPUT_SAMPLES  64
#define TB_EST_INPUT_MIN      8
#define TB_EST_INPUT_Q        0.95


typedef struct {
    uint64_t                  model_hash;
    char                      model[TB_EST_MODEL_MAX + 1];

    uint32_t                  window;         /* capacity of both rings */
    uint32_t                  n;              /* samples held */
    uint32_t                  head;           /* next sample slot */
    uint32_t                  nunder;         /* undershoot records held */
    uint32_t                  under_head;
    uint32_t                  undershoots;    /* 1s among them */

    /* kept up to date on every sample */
    uint32_t                  quantile;       /* at the configured q */
    uint32_t                  median;
    uint32_t                  max;
    double                    q;

    uint64_t                  last_used;      /* for eviction */

    /* the input estimate's ratios: a ring, and the same sorted */
    uint32_t                  in_n;
    uint32_t                  in_head;
    uint32_t                  in_ring[TB_EST_INPUT_SAMPLES];
    uint32_t                  in_sorted[TB_EST_INPUT_SAMPLES];

    /*
     * window uint32_t samples in arrival order (a ring), the same samples
     * kept sorted, then window undershoot bytes (a ring)
     */
    uint32_t                  data[];
} tb_est_t;


size_t tb_est_size(uint32_t window);

void tb_est_init(tb_est_t *e, const char *model, size_t len,
    uint64_t model_hash, uint32_t window, double q);

/*
 * One completed request: what was leased for output and what came.
 * actual <= 0 (an error, nothing produced) is ignored.  O(window): the
 * sorted copy is updated in place, so it is cheap under a lock.
 */
void tb_est_observe(tb_est_t *e, int64_t leased, int64_t actual);

/*
 * One answer's prompt: tokens counted (input, cache reads and writes
 * together) for text_bytes of text (requests with base64 payloads are
 * not samples: their fixed part is a guess).
 */
void tb_est_observe_input(tb_est_t *e, int64_t text_bytes, int64_t tokens);

/*
 * A lease's input tokens for text_bytes of text and fixed tokens of
 * payloads: calibrated when e holds enough samples, else the fixed guess
 * (3.5 bytes a token) times margin.  *calibrated says which.
 */
int64_t tb_est_input(const tb_est_t *e, int64_t text_bytes, int64_t fixed,
    double margin, int *calibrated);

/* the calibrated tokens per million bytes (p95), 0 while not calibrated */
uint32_t tb_est_input_ratio(const tb_est_t *e);

/* the undershoot rate, or -1 while fewer than min_samples records exist */
double tb_est_undershoot_rate(const tb_est_t *e, int64_t min_samples);

/* 1 when predicting (not falling back to the ceiling) */
int tb_est_predicting(const tb_est_t *e, const tb_config_t *cf);

/*
 * The output lease for a request whose ceiling is max_tokens: the ceiling
 * in max_tokens mode, without an estimator, or while not predicting.
 */
int64_t tb_est_lease(const tb_est_t *e, const tb_config_t *cf,
    int64_t max_tokens);

/* nearest rank: the value at index round(q * (n - 1)) of the sorted set */
uint32_t tb_est_nearest_rank(const uint32_t *sorted, uint32_t n, double q);

#endif /* TB_ESTIMATOR_H */
