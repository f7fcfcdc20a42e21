/*
 * The failure taxonomy: every upstream outcome maps to one thing done to
 * the account and one thing done with the request.  A table, so that the
 * code and docs/failures.md say the same thing.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_FAILURE_H
#define TB_FAILURE_H

#include <stddef.h>
#include <stdint.h>

#include "tb_config.h"


typedef enum {
    TB_KIND_OK = 0,
    TB_KIND_RATE_LIMIT,       /* 429 */
    TB_KIND_SPEND,            /* a spend limit reached: 429 or 400 */
    TB_KIND_BILLING,          /* 402 */
    TB_KIND_OVERLOADED,       /* 529, or an overloaded stream error */
    TB_KIND_AUTH,             /* 401, or 403 not about a model */
    TB_KIND_MODEL,            /* 403 about a model, permission_error */
    TB_KIND_CLIENT,           /* 400, 404, 413, other 4xx */
    TB_KIND_SERVER,           /* 408, 5xx */
    TB_KIND_STREAM,           /* an error event before the first delta */
    TB_KIND_TRANSPORT,        /* no response: connect, reset, TLS, EOF */
    TB_KIND_TIMEOUT,          /* no response within the request timeout */
    TB_KIND_STALL,            /* a stream silent for prelude_timeout */
    TB_KIND_UNKNOWN,          /* a status outside 2xx, 4xx, 5xx */
    TB_NKINDS
} tb_kind_e;


/* what happens to the account */
typedef enum {
    TB_ACC_NONE = 0,
    TB_ACC_COOLDOWN,          /* until retry-after / the reset / 60 s */
    TB_ACC_EXHAUST,           /* breaker.exhausted_cooldown_seconds */
    TB_ACC_SHORT_COOLDOWN,    /* breaker.overloaded_cooldown_seconds */
    TB_ACC_DISABLE,           /* until an operator re-enables it */
    TB_ACC_MODEL,             /* this model, on this account */
    TB_ACC_ERROR              /* a breaker failure, nothing else */
} tb_account_action_e;


/* what happens to the request */
typedef enum {
    TB_REQ_RETURN = 0,        /* to the client, as it is */
    TB_REQ_RETRY_OTHER,       /* on another account; this one excluded */
    TB_REQ_RETRY_ANY          /* on any account, this one included */
} tb_request_action_e;


/* what the outcome is to the breaker */
typedef enum {
    TB_OUT_SUCCESS = 0,
    TB_OUT_FAILURE,
    TB_OUT_NEUTRAL
} tb_outcome_e;


/* one row of the taxonomy: docs/failures.md is checked against these */
typedef struct {
    const char               *name;            /* "rate_limit" */
    const char               *upstream;        /* what it is, for docs */
    tb_account_action_e       account;
    tb_request_action_e       request;
    tb_outcome_e              breaker;
    int                       status;          /* when retries run out */
    const char               *error_type;      /* the client's error.type */
} tb_rule_t;

extern const tb_rule_t  tb_rules[TB_NKINDS];


typedef struct {
    int                       status;         /* 0: no response */
    unsigned                  timed_out:1;    /* with status 0 */
    unsigned                  stalled:1;      /* with status 0 or 200 */
    const unsigned char      *body;           /* the error body, if any */
    size_t                    body_len;
    const char               *stream_error;   /* error.type of an event */
    int64_t                   retry_after_ms; /* a delay; -1: none */
    int64_t                   reset_ms;       /* from the mirror; 0 */
    unsigned                  request_scoped:1;  /* a 429 that names no
                                                 window: no rate-limit
                                                 header, no retry-after,
                                                 x-should-retry: true */
    int64_t                   now;
} tb_response_t;


typedef struct {
    tb_kind_e                 kind;
    const tb_rule_t          *rule;
    int64_t                   until_ms;       /* the account's cooldown */
    char                      error_type[48]; /* upstream's error.type */
    char                      reason[96];     /* shown with the state */
} tb_outcome_t;


/*
 * The classifier: total, never fails.  Unknown statuses and error types
 * fall into the class of their status; a body that is not JSON, or is
 * cut short, is read as having no type and no message.
 */
void tb_classify(const tb_response_t *resp, const tb_config_t *cf,
    tb_outcome_t *out);

const char *tb_account_action_name(tb_account_action_e a);
const char *tb_request_action_name(tb_request_action_e a);
const char *tb_outcome_name(tb_outcome_e o);

/* the markdown row of docs/failures.md for a kind; bytes as snprintf */
size_t tb_rule_row(tb_kind_e kind, char *buf, size_t size);

/*
 * The pause before a retry: full jitter, a delay drawn uniformly from
 * [0, min(max, base * 2^(retry - 1))], with rnd in [0, 1).
 */
int64_t tb_backoff_ms(const tb_config_t *cf, unsigned retry, double rnd);


/*
 * The circuit breaker, per account: `threshold` breaker failures in a row
 * open it for `cooldown_ms`; then it is half-open and lets exactly one
 * probe through; the probe's success closes it, its failure opens it
 * again, a neutral outcome (a 429, a client error) gives the probe slot
 * back.  The slot is taken with a lease, never while candidates are being
 * compared.
 */

typedef enum {
    TB_BREAKER_CLOSED = 0,
    TB_BREAKER_OPEN,
    TB_BREAKER_HALF_OPEN
} tb_breaker_state_e;


typedef struct {
    uint32_t                  threshold;      /* failures in a row */
    int64_t                   cooldown_ms;    /* open this long */
} tb_breaker_conf_t;


typedef struct {
    uint32_t                  failures;       /* in a row */
    uint32_t                  open;           /* opened, not closed since */
    uint32_t                  probe;          /* a half-open probe is out */
    int64_t                   opened_ms;
    uint64_t                  opened_total;
} tb_breaker_t;


tb_breaker_state_e tb_breaker_state(const tb_breaker_t *b,
    const tb_breaker_conf_t *bc, int64_t now);

/* when an open breaker half-opens; 0 when it is not open */
int64_t tb_breaker_half_open_at(const tb_breaker_t *b,
    const tb_breaker_conf_t *bc, int64_t now);

/* 1 when a request may be sent now (closed, or half-open with no probe) */
int tb_breaker_allows(const tb_breaker_t *b, const tb_breaker_conf_t *bc,
    int64_t now);

/* takes the probe slot when half-open; call with the lease */
void tb_breaker_take(tb_breaker_t *b, const tb_breaker_conf_t *bc,
    int64_t now);

/*
 * An attempt's end: a failure, a success, or neither.  "probed" says
 * whether this attempt took the probe slot (only its end settles it).
 * Returns 1 when this call opened the breaker.
 */
int tb_breaker_record(tb_breaker_t *b, const tb_breaker_conf_t *bc,
    tb_outcome_e outcome, int probed, int64_t now);

void tb_breaker_reset(tb_breaker_t *b);

const char *tb_breaker_state_name(tb_breaker_state_e s);

#endif /* TB_FAILURE_H */
