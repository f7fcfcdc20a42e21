/*
 * tokenbiryani: what an attempt came to, in the failure taxonomy of
 * src/core/tb_failure.c: a response (its status, error body or stream
 * error), a failure without a response (no connection, a timeout, a
 * stall), or a committed response that ended badly.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_outcome.h"
#include "ngx_http_tokenbiryani_platform.h"


/* the answer says x-should-retry: true */
static ngx_uint_t
ngx_http_tokenbiryani_should_retry(ngx_http_request_t *r)
{
    ngx_table_elt_t                *h;
    ngx_http_tokenbiryani_hiter_t   it;

    ngx_http_tokenbiryani_headers_begin(&it, &r->upstream->headers_in.headers);

    while ((h = ngx_http_tokenbiryani_header_next(&it)) != NULL) {
        if (h->key.len == sizeof("x-should-retry") - 1
            && ngx_strncmp(h->lowcase_key, "x-should-retry",
                           sizeof("x-should-retry") - 1) == 0)
        {
            return h->value.len == 4
                   && ngx_strncasecmp(h->value.data, (u_char *) "true", 4)
                      == 0;
        }
    }

    return 0;
}


void
ngx_http_tokenbiryani_classify_response(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status,
    const char *stream_error)
{
    tb_response_t                       resp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_memzero(&resp, sizeof(tb_response_t));

    resp.status = (int) status;
    resp.body = ctx->resp.errbody_len ? ctx->resp.errbody : NULL;
    resp.body_len = ctx->resp.errbody_len;
    resp.stream_error = stream_error;
    resp.retry_after_ms = ctx->resp.obs.retry_after_ms;
    resp.reset_ms = tb_rl_obs_blocked_until(&ctx->resp.obs);
    resp.now = ngx_http_tokenbiryani_now_ms();

    if (ctx->resp.unified) {
        /* a subscription's: a window spent until its reset, or a 429 that
         * names none at all, which is that request's, not the account's */
        resp.reset_ms = ngx_max(resp.reset_ms,
                                tb_unified_blocked_until(&ctx->rare->unified,
                                                         resp.now));

        resp.request_scoped = status == 429
                              && ctx->rare->unified.observed_ms == 0
                              && ctx->resp.obs.has == 0
                              && resp.retry_after_ms < 0
                              && ngx_http_tokenbiryani_should_retry(r);
    }

    tb_classify(&resp, tmcf->tbcf, &ctx->outcome);
    ctx->resp.classified = 1;
}


/* a failure without a response to classify: no connection, a timeout */

void
ngx_http_tokenbiryani_classify_transport(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_connection_t *c)
{
    tb_response_t                       resp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_memzero(&resp, sizeof(tb_response_t));

    resp.timed_out = (c && (c->read->timedout || c->write->timedout));
    resp.retry_after_ms = -1;
    resp.now = ngx_http_tokenbiryani_now_ms();

    /* a stream's silence before its first delta is a stall */
    resp.stalled = resp.timed_out && ctx->body.stream && ctx->uconf
                   && !ctx->committed;

    tb_classify(&resp, tmcf->tbcf, &ctx->outcome);
    ctx->resp.classified = 1;
}


/*
 * A response that was the client's and ended badly is the account's
 * failure all the same: an error event of the upstream's own, or a body
 * cut short.
 */

void
ngx_http_tokenbiryani_classify_broken(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_int_t rc)
{
    tb_response_t                       resp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    ngx_memzero(&resp, sizeof(tb_response_t));

    if (ctx->sse && ctx->resp.error_after_commit) {
        resp.status = NGX_HTTP_OK;
        resp.stream_error = ctx->sse->error_type;

    } else if (!(ctx->resp.done || (ctx->sse && ctx->sse->stop))) {
        resp.status = 0;
        resp.timed_out = (rc == NGX_HTTP_GATEWAY_TIME_OUT);

    } else {
        return;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    resp.retry_after_ms = -1;
    resp.now = ngx_http_tokenbiryani_now_ms();

    tb_classify(&resp, tmcf->tbcf, &ctx->outcome);
}


/* the attempt in a few words, for the logs and the client's error */

void
ngx_http_tokenbiryani_describe_outcome(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    u_char                             *p;
    u_char                              buf[160];
    const u_char                       *name;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    switch (ctx->outcome.kind) {

    case TB_KIND_STALL:
        p = ngx_snprintf(buf, sizeof(buf), "sent nothing for %.1fs before "
                         "its first content delta",
                         tmcf->tbcf->retry_prelude_timeout_seconds);
        break;

    case TB_KIND_TIMEOUT:
        p = ngx_snprintf(buf, sizeof(buf), "timed out");
        break;

    case TB_KIND_TRANSPORT:
        p = ngx_snprintf(buf, sizeof(buf), "%s",
                         ctx->resp.status.code ? "broke off"
                                               : "connection failed");
        break;

    default:
        if (ctx->sse && ctx->sse->error) {
            p = ngx_snprintf(buf, sizeof(buf), "gave stream error %s",
                             ctx->sse->error_type[0] ? ctx->sse->error_type
                                                     : "(untyped)");
        } else {
            p = ngx_snprintf(buf, sizeof(buf), "gave status %ui",
                             ctx->resp.status.code);

            name = ngx_http_tokenbiryani_platform_errname(ctx);

            if (name) {
                p = ngx_snprintf(p, buf + sizeof(buf) - p, " %s", name);
            }
        }

        break;
    }

    if (ctx->outcome.kind != TB_KIND_OK && ctx->outcome.kind != TB_KIND_CLIENT
        && ctx->outcome.kind != TB_KIND_UNKNOWN)
    {
        p = ngx_snprintf(p, buf + sizeof(buf) - p, " (%s)",
                         ctx->outcome.rule->name);
    }

    ctx->last_error.data = ngx_pnalloc(r->pool, p - buf);
    if (ctx->last_error.data == NULL) {
        ctx->last_error.len = 0;
        return;
    }

    ngx_memcpy(ctx->last_error.data, buf, p - buf);
    ctx->last_error.len = p - buf;
}
