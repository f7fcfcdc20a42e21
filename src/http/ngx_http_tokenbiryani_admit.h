/*
 * Admission: the key's limits when a request arrives, then for each
 * attempt whether it goes now, waits for capacity or fails, and the texts
 * of every refusal.  It decides; ngx_http_tokenbiryani_attempt.c acts.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ADMIT_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ADMIT_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_request.h"


/* what an admission came to */
#define NGX_HTTP_TB_GO                 0     /* route.next routed, leased */
#define NGX_HTTP_TB_WAIT               1     /* queued, or backing off */
#define NGX_HTTP_TB_FAIL               2     /* the error is prepared */
#define NGX_HTTP_TB_QUEUE              3     /* to wait in the queue */


/*
 * Before the body is read: what the key alone decides - over its rpm,
 * holding its max_inflight with its max_queued waiting, its spend cap
 * spent - so that a request its key could not send now is refused before
 * its bytes are held.  Nothing is taken.  NGX_OK or NGX_HTTP_TB_FAIL.
 */
ngx_int_t ngx_http_tokenbiryani_admit_key(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * Before the first attempt: priority, wait budget, deadline and the key's
 * rpm (which counts the requests it admits, and only those).  NGX_OK or
 * NGX_HTTP_TB_FAIL.
 */
ngx_int_t ngx_http_tokenbiryani_admit_request(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * Pacing, enforcing (pacing.mode: enforcing, a weekly budget): how long a
 * batch-priority Message is held back before its first attempt, in ms, in
 * proportion to how far the pool's weekly budget is ahead of its pace
 * (pacing.max_batch_delay_seconds at pacing.ahead_threshold past it, and
 * more), within the request's wait budget and deadline; 0: not at all,
 * and never an interactive request.
 */
int64_t ngx_http_tokenbiryani_admit_paced(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);

/*
 * How far the pool's weekly budget is past pacing.ahead_threshold, in
 * thresholds (1: twice the threshold ahead), when enforcing; 0 when it
 * is not ahead, not enforcing or not read yet.
 */
double ngx_http_tokenbiryani_admit_ahead(ngx_http_request_t *r, int64_t now);

/*
 * The key's priority in ctx->wait.priority; a client may lower its own,
 * never raise it.  NGX_ERROR: X-TokenBiryani-Priority says neither
 * "interactive" nor "batch".
 */
static ngx_inline ngx_int_t
ngx_http_tokenbiryani_admit_priority(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_table_elt_t  *h;

    ctx->wait.priority = (ctx->key && ctx->key->priority == TB_PRIORITY_BATCH)
                         ? 1 : 0;

    h = ngx_http_tokenbiryani_own_header(r, ctx, "x-tokenbiryani-priority",
                                 sizeof("x-tokenbiryani-priority") - 1);
    if (h == NULL) {
        return NGX_OK;
    }

    if (h->value.len == 5
        && ngx_strncasecmp(h->value.data, (u_char *) "batch", 5) == 0)
    {
        ctx->wait.priority = 1;
        return NGX_OK;
    }

    return (h->value.len == 11
            && ngx_strncasecmp(h->value.data, (u_char *) "interactive", 11)
               == 0)
           ? NGX_OK : NGX_ERROR;
}

/*
 * The next attempt: GO with ctx->route.next routed and leased, QUEUE with *gen
 * the capacity generation it failed at (0: it has not tried yet), or
 * FAIL with the error prepared.
 */
ngx_int_t ngx_http_tokenbiryani_admit_attempt(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, uint64_t *gen);

/*
 * Whether a request may wait in the queue at all, and for how long:
 * the ms left of its wait budget, or FAIL (0 left, no queue, or nothing
 * can come back in time) with the error prepared.
 */
ngx_int_t ngx_http_tokenbiryani_admit_wait(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now, int64_t *left);

/* the queue refused it (NGX_HTTP_TB_QUEUE_FULL, _NOMEM): FAIL */
ngx_int_t ngx_http_tokenbiryani_refuse_queue(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t rc, ngx_uint_t depth);

/* the wait budget ran out in the queue: FAIL */
ngx_int_t ngx_http_tokenbiryani_refuse_waited(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);

/* a cap of its key's or its conversation's is reached (ctx->caps): FAIL */
ngx_int_t ngx_http_tokenbiryani_refuse_cap(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);

/* 1 when the retry budget (attempts, accounts, deadline) is spent */
ngx_uint_t ngx_http_tokenbiryani_budget_spent(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);

/* the attempts ran out: the last failure's class decides the error */
ngx_int_t ngx_http_tokenbiryani_refuse_final(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *why);

/* no account could ever serve it: which of the reasons it is */
ngx_int_t ngx_http_tokenbiryani_refuse_unservable(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);


#endif /* _NGX_HTTP_TOKENBIRYANI_ADMIT_H_INCLUDED_ */
