/*
 * A Claude subscription's windows (an account of type oauth), from the
 * anthropic-ratelimit-unified-* headers its answers carry instead of the
 * nine of an API key (../docs/subscription.md):
 *
 *   -unified-status, -unified-reset (epoch seconds),
 *   -unified-representative-claim (five_hour, seven_day, ...),
 *   -unified-{5h,7d,7d_oi,7d_opus,7d_sonnet}-{status,utilization,reset},
 *   -unified-overage-status, -unified-overage-disabled-reason.
 *
 * Utilization is a fraction (it can pass 1); a status is allowed,
 * allowed_warning or rejected (throttled is read as rejected).  Unknown
 * windows and values are ignored, never fatal.  A reset that moves by
 * less than a minute between answers is jitter, not a new window.
 *
 * Plain C, no nginx headers; times are epoch milliseconds passed in.
 */

#ifndef TB_UNIFIED_H
#define TB_UNIFIED_H

#include <stddef.h>
#include <stdint.h>


enum {
    TB_UNI_UNKNOWN = 0,
    TB_UNI_ALLOWED,
    TB_UNI_WARNING,                    /* allowed_warning */
    TB_UNI_REJECTED                    /* rejected, throttled */
};

/* the windows, in header order */
enum {
    TB_UNI_5H = 0,
    TB_UNI_7D,
    TB_UNI_7D_OI,                      /* overage included */
    TB_UNI_7D_OPUS,
    TB_UNI_7D_SONNET,
    TB_UNI_NWINDOWS
};

#define TB_UNI_JITTER_MS      60000    /* a reset moved by less: the same */
#define TB_UNI_CLAIM_MAX      32
#define TB_UNI_REASON_MAX     40


typedef struct {
    uint8_t                   status;          /* TB_UNI_* */
    float                     utilization;     /* -1: unknown */
    int64_t                   reset_ms;        /* 0: unknown */
} tb_uni_window_t;


typedef struct {
    tb_uni_window_t           all;             /* -unified-status, -reset */
    tb_uni_window_t           w[TB_UNI_NWINDOWS];
    uint8_t                   overage;         /* TB_UNI_*, its status */
    char                      claim[TB_UNI_CLAIM_MAX];     /* "" unknown */
    char                      reason[TB_UNI_REASON_MAX];   /* overage's */
    int64_t                   observed_ms;     /* 0: never */
} tb_unified_t;


void tb_unified_init(tb_unified_t *u);

/*
 * One response header (name in lower case) into an observation: 1 when
 * it is a unified header (whether or not its value parsed), else 0.
 */
int tb_unified_header(tb_unified_t *obs, const unsigned char *name,
    size_t name_len, const unsigned char *value, size_t value_len,
    int64_t now_ms);

/* an answer's observation folded into the account's state */
void tb_unified_apply(tb_unified_t *u, const tb_unified_t *obs);

/* 1 - the tightest known utilization of a window not past its reset,
 * in [0, 1]; -1 when none is known */
double tb_unified_headroom(const tb_unified_t *u, int64_t now_ms);

/* when a rejected window resets (the latest such), or 0 when none is
 * rejected now */
int64_t tb_unified_blocked_until(const tb_unified_t *u, int64_t now_ms);

const char *tb_unified_status_name(unsigned status);

const char *tb_unified_window_name(unsigned win);  /* "5h", "7d", ... */

/*
 * The headers that say the state again, one at a time: from i (0 first),
 * the next one known, name and value written (NUL-terminated); returns the
 * i to ask next, or 0 past the last.  Those never seen are left out.
 */
int tb_unified_header_at(const tb_unified_t *u, unsigned i, char *name,
    size_t name_size, char *value, size_t value_size);


#endif /* TB_UNIFIED_H */
