/*
 * The rate-limit mirror: what an account's last responses said about its
 * request, input-token and output-token windows, from the nine
 * anthropic-ratelimit-{requests,input-tokens,output-tokens}-
 * {limit,remaining,reset} headers, retry-after and
 * anthropic-organization-id.
 *
 * Parsing is split from publishing: a response's headers are collected
 * into a tb_rl_obs_t without any lock, then tb_mirror_apply() folds the
 * observation into the shared mirror in one short step.
 *
 * Plain C, no nginx headers; times are epoch milliseconds passed in.
 */

#ifndef TB_RATELIMIT_H
#define TB_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "tb_parse.h"


/* how a window comes back: learned from its headers, or configured */
#define TB_REFILL_AUTO        0        /* not known yet: as fixed */
#define TB_REFILL_BUCKET      1        /* a token bucket: linear refill */
#define TB_REFILL_FIXED       2        /* full again at fixed instants */


enum {
    TB_WIN_REQUESTS = 0,
    TB_WIN_INPUT,
    TB_WIN_OUTPUT,
    TB_NWINDOWS
};

enum {
    TB_RL_LIMIT = 0,
    TB_RL_REMAINING,
    TB_RL_RESET,
    TB_RL_NFIELDS
};

#define TB_ORG_MAX            64

/*
 * Counts and resets beyond these are not believed (no window is that
 * large or that long): a level's arithmetic stays within 64 bits
 */
#define TB_RL_COUNT_MAX       1000000000LL
#define TB_RL_RESET_MAX_MS    (31LL * 86400 * 1000)

/*
 * Gateways that share a pool order what they read by their clocks, apart
 * by no more than this: an answer from another gateway surely counts what
 * was counted upstream before that answer's request was sent
 */
#define TB_CLOCK_SKEW_MS      250

/* token counts are said rounded to the nearest thousand */
#define TB_RL_TOKENS_ROUNDING 1000


typedef struct {
    int64_t                   limit;          /* -1: never seen */
    int64_t                   remaining;      /* -1: never seen */
    int64_t                   reset_ms;       /* 0: unknown */
    int64_t                   observed_ms;    /* 0: never observed */
    uint64_t                  seq;            /* its request's order */
    int64_t                   sent_ms;        /* when that request was
                                                 sent, 0: unknown */
    int64_t                   read_ms;        /* the remaining count's
                                                 request sent (the
                                                 earliest it was read
                                                 upstream), 0: unknown */
    int                       adopted;        /* read by another
                                                 gateway */

    /* how it comes back (TB_REFILL_*), and the evidence it is learned by */
    int                       refill;         /* 0: not known yet */
    int64_t                   period_reset_ms;
    int64_t                   period_remaining;
} tb_window_t;


typedef struct {
    tb_window_t               w[TB_NWINDOWS];
    int64_t                   retry_after_ms;   /* absolute, 0: none */
    int64_t                   observed_ms;      /* last response seen */
    char                      org[TB_ORG_MAX];  /* "" unknown */
    int                       shared;           /* with other gateways: a
                                                   reading never says more
                                                   than the window held */
} tb_mirror_t;


typedef struct {
    unsigned                  has;              /* bit (win * 3 + field) */
    uint64_t                  seq;              /* the request's order in
                                                   sending, 0: unknown */
    int64_t                   sent_ms;          /* when it was sent, 0:
                                                   unknown */
    int64_t                   v[TB_NWINDOWS][TB_RL_NFIELDS];
    int64_t                   retry_after_ms;   /* delay, -1: none */
    unsigned                  has_org:1;
    char                      org[TB_ORG_MAX];
} tb_rl_obs_t;


void tb_mirror_init(tb_mirror_t *m);

void tb_rl_obs_init(tb_rl_obs_t *obs);

/*
 * Offers one response header (name in lower case).  Returns 1 when the
 * header is one the mirror reads (whether or not its value parsed), 0
 * otherwise.  Unparseable values are ignored, never fatal.
 */
int tb_rl_obs_header(tb_rl_obs_t *obs, const unsigned char *name,
    size_t name_len, const unsigned char *value, size_t value_len,
    int64_t now_ms);

/* 1 if the name is anthropic-ratelimit-* (any of them, unified too) */
int tb_rl_is_ratelimit_header(const unsigned char *name, size_t len);

/*
 * Folds a response's headers into the mirror, and with refill
 * TB_REFILL_AUTO learns from them how each window comes back (else refill
 * is what the account was configured with).  Responses can arrive in
 * another order than their requests were admitted upstream: an answer to
 * a request sent before the one the window was last read from is older
 * news, and only lowers what the window holds, never raises it (with
 * obs->seq 0 every observation is taken as the newest).  Returns which
 * windows' remaining counts were taken as the newest (bits 0-2) and which
 * were older news (bits 4-6).
 */
unsigned tb_mirror_apply(tb_mirror_t *m, const tb_rl_obs_t *obs,
    int64_t now_ms, int refill);

/*
 * Another gateway's reading of the same account's windows (sharing one
 * pool through a store): each window is taken where the other's was read
 * from a request sent later (the upstream counts a request when it
 * arrives: of two answers, the one to the request sent later counts
 * more, as a rule), never saying more than the window held before,
 * refilled to now_ms (see m->shared); from a request sent earlier, its
 * count is taken when it says less now.  The window's seq is kept (it
 * numbers this gateway's own requests).  Returns which windows were taken
 * (bits 0-2).
 */
unsigned tb_mirror_adopt(tb_mirror_t *m, const tb_window_t *w,
    int64_t retry_after_ms, int64_t now_ms);

/*
 * Whether an answer that said the window held `seen` was to a request the
 * window's own answer counts.  Upstream a window decreases in the order
 * requests arrive: an answer that said more than the window can have held
 * since (refilled, over the clocks' skew, and by the rounding of its
 * counts) was to a request that arrived before.  Only for a window whose
 * refill is known (0 otherwise, and for a window never read).
 */
int tb_window_counts(const tb_window_t *w, int win, int64_t seen,
    int64_t now);

/* tb_mirror_apply()'s result: per window, 1 << TB_WIN_*, shifted by */
#define TB_MIRROR_FRESH       0       /* the remaining count was taken */
#define TB_MIRROR_STALE       4       /* older news, not taken whole */

#define TB_UNKNOWN            INT64_MAX      /* a window never observed */

/*
 * A window's level at now.  Never observed: TB_UNKNOWN (reads as full);
 * once its reset has passed it reads as refilled to its limit.  Before
 * that, a token bucket (Anthropic documents its limits as such, the reset
 * header being when the bucket is full again) replenishes linearly from
 * the remaining count seen toward the limit at the reset time; a fixed
 * window, or one not yet known to be a bucket, holds what it had until
 * its reset (a window with no usable reset is taken for a bucket
 * refilling its limit per minute, so that it never stays empty).
 */
static inline int64_t
tb_window_level_inline(const tb_window_t *w, int64_t now)
{
    int64_t  level, elapsed, span;

    if (w->remaining < 0) {
        return TB_UNKNOWN;
    }

    if (w->remaining >= w->limit) {
        /* no limit seen (-1), or nothing to refill toward */
        return w->remaining;
    }

    if (w->reset_ms && now >= w->reset_ms) {
        return w->limit;
    }

    if (w->refill != TB_REFILL_BUCKET && w->reset_ms > w->observed_ms) {
        /* nothing comes back before the reset until it is known to */
        return w->remaining;
    }

    elapsed = now - w->observed_ms;

    if (elapsed <= 0) {
        return w->remaining;
    }

    if (w->reset_ms > w->observed_ms) {
        span = w->reset_ms - w->observed_ms;

    } else {
        /* no usable reset: a bucket refilling its limit per minute */
        span = 60000 * (w->limit - w->remaining) / w->limit;

        if (span <= 0) {
            return w->limit;
        }
    }

    if (elapsed >= span) {
        return w->limit;
    }

    /* 0 < elapsed < span: below the limit without a clamp */

    level = w->remaining + (w->limit - w->remaining) * elapsed / span;

    return level;
}

/* the latest reset of the windows a response says are empty; 0: none */
int64_t tb_rl_obs_blocked_until(const tb_rl_obs_t *obs);


#endif /* TB_RATELIMIT_H */
