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


typedef struct {
    int64_t                   limit;          /* -1: never seen */
    int64_t                   remaining;      /* -1: never seen */
    int64_t                   reset_ms;       /* 0: unknown */
    int64_t                   observed_ms;    /* 0: never observed */
} tb_window_t;


typedef struct {
    tb_window_t               w[TB_NWINDOWS];
    int64_t                   retry_after_ms;   /* absolute, 0: none */
    int64_t                   observed_ms;      /* last response seen */
    char                      org[TB_ORG_MAX];  /* "" unknown */
} tb_mirror_t;


typedef struct {
    unsigned                  has;              /* bit (win * 3 + field) */
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

void tb_mirror_apply(tb_mirror_t *m, const tb_rl_obs_t *obs, int64_t now_ms);

/* the latest reset of the windows a response says are empty; 0: none */
int64_t tb_rl_obs_blocked_until(const tb_rl_obs_t *obs);


/* "2026-11-29T20:40:59Z", "...59.123+02:00" → epoch ms; 0 or -1 */
int tb_parse_rfc3339(const unsigned char *p, size_t len, int64_t *ms);

/* IMF-fixdate, RFC 850 and asctime() dates → epoch seconds; 0 or -1 */
int tb_parse_http_date(const unsigned char *p, size_t len, int64_t *sec);

/* delta-seconds (decimals tolerated) or an HTTP date → delay in ms */
int tb_parse_retry_after(const unsigned char *p, size_t len, int64_t now_ms,
    int64_t *delay_ms);

/* decimal integer, optional surrounding whitespace → 0 or -1 */
int tb_parse_int64(const unsigned char *p, size_t len, int64_t *value);

/* epoch ms → "2026-11-29T20:40:59Z" (21 bytes + NUL) */
void tb_format_rfc3339(int64_t ms, char *buf, size_t size);

#endif /* TB_RATELIMIT_H */
