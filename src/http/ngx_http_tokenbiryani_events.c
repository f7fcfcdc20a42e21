/*
 * tokenbiryani: the events every request leaves in the error log, at info
 * level: one admission line per decision that leases (or queues, or
 * refuses) and one settlement line per attempt.  Counts and classes only:
 * never prompt text, never a credential.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_events.h"


static ngx_str_t  ngx_http_tb_none = ngx_string("-");


void
ngx_http_tokenbiryani_log_admission(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    int64_t *remaining, const char *decision, const char *reason)
{
    ngx_int_t  w;
    u_char    *p;
    u_char     rem[96];

    if (r->connection->log->log_level < NGX_LOG_INFO) {
        return;
    }

    p = rem;

    if (remaining) {
        for (w = 0; w < TB_NWINDOWS; w++) {
            if (remaining[w] == TB_UNKNOWN) {
                p = ngx_snprintf(p, rem + sizeof(rem) - p, "%s?",
                                 w ? "/" : "");
            } else {
                p = ngx_snprintf(p, rem + sizeof(rem) - p, "%s%L",
                                 w ? "/" : "", remaining[w]);
            }
        }

    } else {
        p = ngx_cpymem(p, "-", 1);
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: event=admission request=%*s attempt=%ui "
                  "account=%V need=%L/%L/%L remaining_before=%*s "
                  "decision=%s reason=\"%s\" soonest_ms=%L",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  ctx->attempts + 1, a ? &a->id : &ngx_http_tb_none,
                  ctx->need.n[TB_WIN_REQUESTS], ctx->need.n[TB_WIN_INPUT],
                  ctx->need.n[TB_WIN_OUTPUT], (size_t) (p - rem), rem,
                  decision, reason,
                  ctx->decision.soonest
                  ? ctx->decision.soonest - ngx_http_tokenbiryani_now_ms()
                  : (int64_t) 0);
}


void
ngx_http_tokenbiryani_log_settlement(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    const char *next)
{
    const tb_rule_t  *rule;

    if (r->connection->log->log_level < NGX_LOG_INFO || a == NULL) {
        return;
    }

    rule = ctx->resp.classified ? ctx->outcome.rule : NULL;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: event=settlement request=%*s attempt=%ui "
                  "account=%V status=%ui class=%s account_action=%s "
                  "breaker=%s usage=%L/%L/%L/%L retry_after_ms=%L "
                  "latency_ms=%L next=\"%s\"",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  ctx->attempts, &a->id, ctx->resp.status.code,
                  rule ? rule->name : "cancelled",
                  rule ? tb_account_action_name(rule->account) : "none",
                  rule ? tb_outcome_name(rule->breaker) : "neutral",
                  ctx->usage.input_tokens, ctx->usage.output_tokens,
                  ctx->usage.cache_read_input_tokens,
                  ctx->usage.cache_creation_input_tokens,
                  ctx->resp.obs.retry_after_ms,
                  ngx_http_tokenbiryani_now_ms() - ctx->attempt_ms, next);
}
