/*
 * The failure taxonomy and the circuit breaker.
 */

#include <stdio.h>
#include <string.h>
#include <ctype.h>

#include "tb_failure.h"
#include "tb_json.h"


const tb_rule_t  tb_rules[TB_NKINDS] = {

    /* name, upstream, account, request, breaker, status, error type */

    [TB_KIND_OK] = { "ok", "2xx",
        TB_ACC_NONE, TB_REQ_RETURN, TB_OUT_SUCCESS,
        200, NULL },

    [TB_KIND_RATE_LIMIT] = { "rate_limit", "429 `rate_limit_error`",
        TB_ACC_COOLDOWN, TB_REQ_RETRY_OTHER, TB_OUT_NEUTRAL,
        429, "rate_limit_error" },

    [TB_KIND_SPEND] = { "spend_limit",
        "429 or 400 saying a spend limit was reached "
        "(`enforced_spend_limit_reached`, or no `retry-after` and a spend "
        "message)",
        TB_ACC_EXHAUST, TB_REQ_RETRY_OTHER, TB_OUT_NEUTRAL,
        429, "rate_limit_error" },

    [TB_KIND_BILLING] = { "billing", "402 `billing_error`",
        TB_ACC_EXHAUST, TB_REQ_RETRY_OTHER, TB_OUT_NEUTRAL,
        429, "rate_limit_error" },

    [TB_KIND_OVERLOADED] = { "overloaded",
        "529 `overloaded_error`, or that error as a stream event",
        TB_ACC_SHORT_COOLDOWN, TB_REQ_RETRY_ANY, TB_OUT_FAILURE,
        529, "overloaded_error" },

    [TB_KIND_AUTH] = { "invalid_auth",
        "401, or 403 neither `permission_error` nor about a model",
        TB_ACC_DISABLE, TB_REQ_RETRY_OTHER, TB_OUT_NEUTRAL,
        502, "api_error" },

    [TB_KIND_MODEL] = { "model_not_permitted",
        "403 `permission_error`, or a 403 about a model",
        TB_ACC_MODEL, TB_REQ_RETRY_OTHER, TB_OUT_NEUTRAL,
        502, "api_error" },

    [TB_KIND_CLIENT] = { "client_error", "400, 404, 413, any other 4xx",
        TB_ACC_NONE, TB_REQ_RETURN, TB_OUT_NEUTRAL,
        0, NULL },

    [TB_KIND_SERVER] = { "upstream_error", "408, 500, 502, 503, 504, any "
        "other 5xx",
        TB_ACC_ERROR, TB_REQ_RETRY_ANY, TB_OUT_FAILURE,
        502, "api_error" },

    [TB_KIND_STREAM] = { "stream_error", "an `error` event of another type "
        "before the first content delta",
        TB_ACC_ERROR, TB_REQ_RETRY_ANY, TB_OUT_FAILURE,
        502, "api_error" },

    [TB_KIND_TRANSPORT] = { "transport", "no response: connect error, "
        "reset, TLS failure, invalid or cut-short response",
        TB_ACC_ERROR, TB_REQ_RETRY_ANY, TB_OUT_FAILURE,
        502, "api_error" },

    [TB_KIND_TIMEOUT] = { "timeout", "no response within "
        "`server.request_timeout_seconds`",
        TB_ACC_ERROR, TB_REQ_RETRY_ANY, TB_OUT_FAILURE,
        504, "timeout_error" },

    [TB_KIND_STALL] = { "stalled", "a stream that sent nothing for "
        "`retry.prelude_timeout_seconds` before its first content delta",
        TB_ACC_ERROR, TB_REQ_RETRY_OTHER, TB_OUT_FAILURE,
        504, "timeout_error" },

    [TB_KIND_UNKNOWN] = { "unknown", "any status outside 2xx, 4xx and 5xx",
        TB_ACC_NONE, TB_REQ_RETURN, TB_OUT_NEUTRAL,
        0, NULL },
};


static int tb_contains_ci(const char *hay, const char *needle);
static tb_kind_e tb_classify_event(const char *type);


void
tb_classify(const tb_response_t *resp, const tb_config_t *cf,
    tb_outcome_t *out)
{
    int          st;
    size_t       n;
    int64_t      until;
    tb_kind_e    kind;
    char         message[256], code[64];

    memset(out, 0, sizeof(tb_outcome_t));

    message[0] = '\0';
    code[0] = '\0';

    if (resp->body && resp->body_len) {
        (void) tb_json_get_str(resp->body, resp->body_len, "error.type",
                               out->error_type, sizeof(out->error_type), &n);
        (void) tb_json_get_str(resp->body, resp->body_len, "error.message",
                               message, sizeof(message), &n);
        (void) tb_json_get_str(resp->body, resp->body_len,
                               "error.details.error_code", code,
                               sizeof(code), &n);
    }

    st = resp->status;

    if (resp->stalled) {
        kind = TB_KIND_STALL;

    } else if (st == 0) {
        kind = resp->timed_out ? TB_KIND_TIMEOUT : TB_KIND_TRANSPORT;

    } else if (st >= 200 && st < 300) {

        if (resp->stream_error) {
            snprintf(out->error_type, sizeof(out->error_type), "%s",
                     resp->stream_error);
            kind = tb_classify_event(resp->stream_error);

        } else {
            kind = TB_KIND_OK;
        }

    } else if ((st == 429 || st == 400)
               && (strcmp(code, "enforced_spend_limit_reached") == 0
                   || ((st == 400 || resp->retry_after_ms < 0)
                       && (tb_contains_ci(message, "spend limit")
                           || tb_contains_ci(message, "spending limit")
                           || tb_contains_ci(message, "spend cap")
                           || tb_contains_ci(message, "usage limit")
                           || tb_contains_ci(message, "credit balance")))))
    {
        kind = TB_KIND_SPEND;

    } else if (st == 429) {
        kind = TB_KIND_RATE_LIMIT;

    } else if (st == 402) {
        kind = TB_KIND_BILLING;

    } else if (st == 529) {
        kind = TB_KIND_OVERLOADED;

    } else if (st == 401) {
        kind = TB_KIND_AUTH;

    } else if (st == 403) {
        kind = (strcmp(out->error_type, "permission_error") == 0
                || tb_contains_ci(message, "model"))
               ? TB_KIND_MODEL : TB_KIND_AUTH;

    } else if (st == 408 || (st >= 500 && st < 600)) {
        kind = TB_KIND_SERVER;

    } else if (st >= 400 && st < 500) {
        kind = TB_KIND_CLIENT;

    } else {
        kind = TB_KIND_UNKNOWN;
    }

    out->kind = kind;
    out->rule = &tb_rules[kind];

    switch (out->rule->account) {

    case TB_ACC_COOLDOWN:
        if (resp->request_scoped) {
            /* that request's, not the account's: it is not rested */
            until = 0;
            snprintf(out->reason, sizeof(out->reason),
                     "rate limited (429) naming no window: this request's");

        } else if (resp->retry_after_ms >= 0) {
            until = resp->now + resp->retry_after_ms;
            snprintf(out->reason, sizeof(out->reason),
                     "rate limited (429), retry-after %llds",
                     (long long) ((resp->retry_after_ms + 999) / 1000));

        } else if (resp->reset_ms > resp->now) {
            until = resp->reset_ms;
            snprintf(out->reason, sizeof(out->reason),
                     "rate limited (429), until the window resets");

        } else {
            until = resp->now + 60000;
            snprintf(out->reason, sizeof(out->reason),
                     "rate limited (429), no retry-after: 60s");
        }

        out->until_ms = until;
        break;

    case TB_ACC_EXHAUST:
        out->until_ms = resp->now
                        + (int64_t) (cf->breaker_exhausted_cooldown_seconds
                                     * 1000);
        snprintf(out->reason, sizeof(out->reason), "%s",
                 kind == TB_KIND_BILLING ? "billing_error (402)"
                                         : "spend limit reached");
        break;

    case TB_ACC_SHORT_COOLDOWN:
        out->until_ms = resp->now
                        + (int64_t) (cf->breaker_overloaded_cooldown_seconds
                                     * 1000);
        snprintf(out->reason, sizeof(out->reason), "overloaded (%s)",
                 st == 529 ? "529" : "stream error");
        break;

    case TB_ACC_DISABLE:
        snprintf(out->reason, sizeof(out->reason), "invalid_auth");
        break;

    case TB_ACC_ERROR:
        /* what a failing account shows: the last failure, in words */

        switch (kind) {

        case TB_KIND_TRANSPORT:
            snprintf(out->reason, sizeof(out->reason), "no answer: connect "
                     "error, reset or TLS failure");
            break;

        case TB_KIND_TIMEOUT:
            snprintf(out->reason, sizeof(out->reason), "no answer within "
                     "the request timeout");
            break;

        case TB_KIND_STALL:
            snprintf(out->reason, sizeof(out->reason), "a stream stalled "
                     "before its first delta");
            break;

        case TB_KIND_STREAM:
            snprintf(out->reason, sizeof(out->reason), "stream error (%s)",
                     out->error_type[0] ? out->error_type : "unknown");
            break;

        default:
            snprintf(out->reason, sizeof(out->reason), "upstream error %d",
                     st);
            break;
        }

        break;

    case TB_ACC_MODEL:
        snprintf(out->reason, sizeof(out->reason),
                 "model rejected by upstream (403)");
        break;

    default:
        break;
    }
}


static tb_kind_e
tb_classify_event(const char *type)
{
    static const struct {
        const char  *type;
        tb_kind_e    kind;
    } map[] = {
        { "overloaded_error", TB_KIND_OVERLOADED },
        { "rate_limit_error", TB_KIND_RATE_LIMIT },
        { "api_error", TB_KIND_SERVER },
        { "timeout_error", TB_KIND_SERVER },
        { "authentication_error", TB_KIND_AUTH },
        { "permission_error", TB_KIND_MODEL },
        { "billing_error", TB_KIND_BILLING },
        { "invalid_request_error", TB_KIND_CLIENT },
        { "not_found_error", TB_KIND_CLIENT },
        { "request_too_large", TB_KIND_CLIENT },
        { NULL, TB_KIND_STREAM }
    };

    size_t  i;

    for (i = 0; map[i].type; i++) {
        if (strcmp(map[i].type, type) == 0) {
            break;
        }
    }

    return map[i].kind;
}


static int
tb_contains_ci(const char *hay, const char *needle)
{
    size_t  i, n;

    n = strlen(needle);

    for ( /* void */ ; *hay; hay++) {
        for (i = 0; i < n; i++) {
            if (hay[i] == '\0'
                || tolower((unsigned char) hay[i]) != needle[i])
            {
                break;
            }
        }

        if (i == n) {
            return 1;
        }
    }

    return 0;
}


const char *
tb_account_action_name(tb_account_action_e a)
{
    static const char  *names[] = {
        "none", "cooldown", "exhaust", "short_cooldown", "disable",
        "mark_model", "breaker_failure"
    };

    return names[a];
}


const char *
tb_request_action_name(tb_request_action_e a)
{
    static const char  *names[] = { "return", "retry_other", "retry_any" };

    return names[a];
}


const char *
tb_outcome_name(tb_outcome_e o)
{
    static const char  *names[] = { "success", "failure", "neutral" };

    return names[o];
}


size_t
tb_rule_row(tb_kind_e kind, char *buf, size_t size)
{
    char              final[64];
    const tb_rule_t  *r;

    r = &tb_rules[kind];

    if (r->error_type) {
        snprintf(final, sizeof(final), "%d `%s`", r->status, r->error_type);

    } else {
        snprintf(final, sizeof(final), "the response itself");
    }

    return (size_t) snprintf(buf, size, "| `%s` | %s | %s | %s | %s | %s |",
                             r->name, r->upstream,
                             tb_account_action_name(r->account),
                             tb_request_action_name(r->request),
                             tb_outcome_name(r->breaker), final);
}


int64_t
tb_backoff_ms(const tb_config_t *cf, unsigned retry, double rnd)
{
    double  cap;

    cap = cf->retry_backoff_base_seconds;

    while (retry-- > 1 && cap < cf->retry_backoff_max_seconds) {
        cap *= 2;
    }

    if (cap > cf->retry_backoff_max_seconds) {
        cap = cf->retry_backoff_max_seconds;
    }

    if (rnd < 0) {
        rnd = 0;
    }

    return (int64_t) (cap * rnd * 1000);
}


/* the breaker */

tb_breaker_state_e
tb_breaker_state(const tb_breaker_t *b, const tb_breaker_conf_t *bc,
    int64_t now)
{
    if (!b->open) {
        return TB_BREAKER_CLOSED;
    }

    return now >= b->opened_ms + bc->cooldown_ms ? TB_BREAKER_HALF_OPEN
                                                 : TB_BREAKER_OPEN;
}


int64_t
tb_breaker_half_open_at(const tb_breaker_t *b, const tb_breaker_conf_t *bc,
    int64_t now)
{
    if (tb_breaker_state(b, bc, now) != TB_BREAKER_OPEN) {
        return 0;
    }

    return b->opened_ms + bc->cooldown_ms;
}


int
tb_breaker_allows(const tb_breaker_t *b, const tb_breaker_conf_t *bc,
    int64_t now)
{
    switch (tb_breaker_state(b, bc, now)) {

    case TB_BREAKER_CLOSED:
        return 1;

    case TB_BREAKER_HALF_OPEN:
        return !b->probe;

    default:
        return 0;
    }
}


void
tb_breaker_take(tb_breaker_t *b, const tb_breaker_conf_t *bc, int64_t now)
{
    if (tb_breaker_state(b, bc, now) == TB_BREAKER_HALF_OPEN) {
        b->probe = 1;
    }
}


int
tb_breaker_record(tb_breaker_t *b, const tb_breaker_conf_t *bc,
    tb_outcome_e outcome, int probed, int64_t now)
{
    if (probed) {
        b->probe = 0;
    }

    switch (outcome) {

    case TB_OUT_SUCCESS:
        if (b->open && !probed) {
            /* an attempt from before the breaker opened: no verdict */
            return 0;
        }

        b->failures = 0;
        b->open = 0;
        return 0;

    case TB_OUT_FAILURE:
        b->failures++;

        if (b->open) {
            if (probed) {
                /* the probe failed: open again, for a whole cooldown */
                b->opened_ms = now;
                b->opened_total++;
                return 1;
            }

            return 0;
        }

        if (bc->threshold && b->failures >= bc->threshold) {
            b->open = 1;
            b->opened_ms = now;
            b->opened_total++;
            return 1;
        }

        return 0;

    default:
        return 0;
    }
}


void
tb_breaker_reset(tb_breaker_t *b)
{
    b->failures = 0;
    b->open = 0;
    b->probe = 0;
    b->opened_ms = 0;
}


const char *
tb_breaker_state_name(tb_breaker_state_e s)
{
    static const char  *names[] = { "closed", "open", "half_open" };

    return names[s];
}
