/*
 * The spill lane (see ngx_http_tokenbiryani_spill.h): a batch of one made,
 * polled and read with calls of the worker's own
 * (ngx_http_tokenbiryani_call.c) while the client's request waits.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_spill.h"
#include "ngx_http_tokenbiryani_batches.h"
#include "ngx_http_tokenbiryani_record.h"
#include "ngx_http_tokenbiryani_platform.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_call.h"
#include "ngx_http_tokenbiryani_store.h"
#include "tb_batch.h"
#include "tb_price.h"


#define NGX_HTTP_TB_SPILL_ID           "tokenbiryani-spill"
#define NGX_HTTP_TB_SPILL_TIMEOUT      30000     /* ms, a call */


typedef struct {
    ngx_http_request_t                   *request;
    ngx_http_tokenbiryani_ctx_t          *ctx;
    ngx_http_tokenbiryani_spill_back_pt   back;
    ngx_http_tokenbiryani_account_t      *account;

    ngx_http_tokenbiryani_call_t         *call;    /* the one under way */
    ngx_http_tokenbiryani_call_target_t   target;
    ngx_event_t                           timer;   /* the next poll */
    ngx_msec_t                            interval;
    int64_t                               started;
    int64_t                               deadline;
    int64_t                               estimate;
    ngx_uint_t                            polls;

    u_char                                id[TB_BATCH_ID_MAX + 1];
    size_t                                id_len;

    /* its results, one line */
    u_char                               *line;
    size_t                                line_len;
    size_t                                line_size;
} ngx_http_tokenbiryani_spill_t;


static ngx_http_tokenbiryani_account_t *ngx_http_tokenbiryani_spill_account(
    ngx_http_request_t *r, ngx_http_tokenbiryani_ctx_t *ctx, int64_t estimate,
    int64_t now);
static ngx_int_t ngx_http_tokenbiryani_spill_call(
    ngx_http_tokenbiryani_spill_t *sp, const char *method, const char *below,
    ngx_str_t *body, ngx_http_tokenbiryani_call_done_pt done);
static void ngx_http_tokenbiryani_spill_made(
    ngx_http_tokenbiryani_call_result_t *res, void *data);
static void ngx_http_tokenbiryani_spill_tick(ngx_event_t *ev);
static void ngx_http_tokenbiryani_spill_polled(
    ngx_http_tokenbiryani_call_result_t *res, void *data);
static ngx_int_t ngx_http_tokenbiryani_spill_sink(void *data, u_char *p,
    size_t len);
static void ngx_http_tokenbiryani_spill_read(
    ngx_http_tokenbiryani_call_result_t *res, void *data);
static void ngx_http_tokenbiryani_spill_cancelled(
    ngx_http_tokenbiryani_call_result_t *res, void *data);
static void ngx_http_tokenbiryani_spill_cancel(
    ngx_http_tokenbiryani_spill_t *sp);
static void ngx_http_tokenbiryani_spill_fall_back(
    ngx_http_tokenbiryani_spill_t *sp, const char *why);
static void ngx_http_tokenbiryani_spill_end(ngx_http_tokenbiryani_spill_t *sp,
    ngx_int_t rc);
static ngx_int_t ngx_http_tokenbiryani_spill_header(ngx_http_request_t *r,
    const char *name, u_char *value, size_t len);
static void ngx_http_tokenbiryani_spill_cleanup(void *data);


ngx_int_t
ngx_http_tokenbiryani_spill(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_spill_back_pt back,
    ngx_uint_t paced)
{
    u_char                             *p;
    int64_t                             now, estimate;
    ngx_str_t                           body, beta;
    tb_cost_usage_t                     cu;
    ngx_pool_cleanup_t                 *cln;
    const tb_model_price_t             *price;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_spill_t      *sp;
    ngx_http_tokenbiryani_key_spend_t   ks;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    /* batch priority, a Message not streamed, spilled once at most, the
     * pool saturated with a known time to capacity (or the week ahead of
     * its pace), room in its budget */

    if (!tmcf->tbcf->batch_enabled || ctx->kind != NGX_HTTP_TB_MESSAGES
        || ctx->wait.priority == 0 || ctx->body.stream || ctx->spilled
        || ctx->key_full || (ctx->route.decision.soonest == 0 && !paced)
        || ctx->wait.budget_ms - ctx->wait.waited_ms - ctx->wait.paced_ms
           <= 0)
    {
        return NGX_DECLINED;
    }

    /* what it may cost: its input estimate and its max_tokens, at the
     * batch price, held for it while it runs */

    estimate = 0;
    price = ngx_http_tokenbiryani_price(tmcf, ctx);

    if (price) {
        ngx_memzero(&cu, sizeof(cu));
        cu.input = ctx->route.need.n[TB_WIN_INPUT];
        cu.output = ctx->route.need.max_tokens;
        estimate = tb_cost(price, &cu, 0) / 2;
    }

    /* a key whose cap could not hold it waits in the queue, where its cap
     * is what it meets */

    if (ctx->key && ctx->key->spend_cap_usd >= 0) {
        ngx_http_tokenbiryani_key_spend(&tmcf->zone, ctx->key_hash, now, &ks);

        if (ks.window_cost + ks.reserved + ks.others + estimate
            > tb_usd_to_nd(ctx->key->spend_cap_usd))
        {
            return NGX_DECLINED;
        }
    }

    a = ngx_http_tokenbiryani_spill_account(r, ctx, estimate, now);
    if (a == NULL) {
        return NGX_DECLINED;
    }

    /* the client's anthropic-beta goes with its batch, as it would with
     * its Message (the Files API's beta for one naming a file); one with a
     * byte that is not printable ASCII is not the gateway's to pass on */

    if (ngx_http_tokenbiryani_header_join(r, "anthropic-beta",
                                          sizeof("anthropic-beta") - 1,
                                          &beta)
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    for (p = beta.data; p < beta.data + beta.len; p++) {
        if (*p < 0x20 || *p >= 0x7f) {
            return NGX_DECLINED;
        }
    }

    sp = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_spill_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (sp == NULL || cln == NULL) {
        return NGX_DECLINED;
    }

    ctx->spilled = 1;

    sp->request = r;
    sp->ctx = ctx;
    sp->back = back;
    sp->account = a;
    sp->started = now;
    sp->estimate = estimate;
    sp->deadline = now + ctx->wait.budget_ms - ctx->wait.waited_ms
                   - ctx->wait.paced_ms;
    sp->interval = (ngx_msec_t) (tmcf->tbcf->batch_poll_interval_seconds
                                 * 1000);
    sp->interval = ngx_max(sp->interval, 1);

    ngx_http_tokenbiryani_timer_init(&sp->timer,
                                     ngx_http_tokenbiryani_spill_tick, sp,
                                     r->connection->log);
    sp->timer.cancelable = 0;

    cln->handler = ngx_http_tokenbiryani_spill_cleanup;
    cln->data = sp;

    ngx_http_tokenbiryani_call_target(&sp->target, a);

    sp->target.beta = beta;

    /* {"requests": [{"custom_id": ..., "params": <the body>}]} */

    body.len = sizeof("{\"requests\":[{\"custom_id\":\"" NGX_HTTP_TB_SPILL_ID
                      "\",\"params\":") - 1
               + ctx->route.body.len + sizeof("}]}") - 1;

    body.data = ngx_pnalloc(r->pool, body.len);
    if (body.data == NULL) {
        return NGX_DECLINED;
    }

    p = ngx_cpymem(body.data, "{\"requests\":[{\"custom_id\":\""
                   NGX_HTTP_TB_SPILL_ID "\",\"params\":",
                   sizeof("{\"requests\":[{\"custom_id\":\""
                          NGX_HTTP_TB_SPILL_ID "\",\"params\":") - 1);
    p = ngx_cpymem(p, ctx->route.body.data, ctx->route.body.len);
    ngx_memcpy(p, "}]}", 3);

    if (ngx_http_tokenbiryani_spill_call(sp, "POST", "", &body,
                                         ngx_http_tokenbiryani_spill_made)
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    /* the client's leaving is noticed; its request waits for the lane */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: the pool is saturated: a batch-priority "
                  "request spills to the Message Batches API on account "
                  "\"%V\"", &a->id);

    return NGX_OK;
}


/*
 * The account its batch goes to: its conversation's owner when it can take
 * a batch, else the first that can of the key's pool (and of the account
 * its files are on, when it names files); never one whose spend cap could
 * not hold the batch's estimate
 */

static ngx_http_tokenbiryani_account_t *
ngx_http_tokenbiryani_spill_account(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t estimate, int64_t now)
{
    int64_t                             cap;
    ngx_uint_t                          i, n;
    tb_cand_t                          *c;
    const tb_account_conf_t            *conf;
    ngx_http_tokenbiryani_account_t    *a, *first;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;
    n = ctx->naccounts;
    first = NULL;

    /* one pass, the route's own state read and never changed: the request
     * may yet go back to the queue and be routed */

    for (i = 0; i < n; i++) {
        c = &ctx->route.cands[i];

        conf = c->conf;

        if (!c->in_pool || c->removed || !a[i].supported || a[i].platform
            || conf->type == TB_ACCOUNT_OAUTH || a[i].naddrs == 0 || (ctx->pin >= 0 && a[i].slot
                                    != (ngx_uint_t) ctx->pin))
        {
            continue;
        }

        if (conf->spend_cap_usd >= 0) {
            /* spent, held and the estimate over the cap: read without the
             * lock, as the router reads it */
            cap = tb_usd_to_nd(conf->spend_cap_usd);

            if (estimate > cap
                || tb_ledger_over(&c->st->spend, now,
                                  tmcf->zone.spend_bucket_ms,
                                  cap - estimate + 1))
            {
                continue;
            }
        }

        if ((int) i == ctx->route.owner_index) {
            return &a[i];
        }

        if (first == NULL) {
            first = &a[i];
        }
    }

    return first;
}


/* a call about its batch: method on /v1/messages/batches{/id}{below} */

static ngx_int_t
ngx_http_tokenbiryani_spill_call(ngx_http_tokenbiryani_spill_t *sp,
    const char *method, const char *below, ngx_str_t *body,
    ngx_http_tokenbiryani_call_done_pt done)
{
    ngx_http_request_t  *r;

    r = sp->request;

    if (body) {
        sp->target.body = *body;

    } else {
        ngx_str_null(&sp->target.body);
    }

    sp->target.what = "batch spill";

    sp->call = ngx_http_tokenbiryani_call_batch(r->pool, r->connection->log,
                   ngx_http_get_module_main_conf(r,
                                                 ngx_http_tokenbiryani_module),
                   &sp->target, method, sp->id, sp->id_len, below,
                   NGX_HTTP_TB_SPILL_TIMEOUT, done, sp);

    return sp->call ? NGX_OK : NGX_ERROR;
}


static void
ngx_http_tokenbiryani_spill_made(ngx_http_tokenbiryani_call_result_t *res,
    void *data)
{
    ngx_http_tokenbiryani_spill_t *sp = data;

    tb_batch_obj_t                       b;
    ngx_http_tokenbiryani_ctx_t         *ctx;
    ngx_http_tokenbiryani_object_view_t  v;

    sp->call = NULL;
    ctx = sp->ctx;

    if (res->status != NGX_HTTP_OK
        || tb_batch_object(res->body.data, res->body.len, &b) != 0)
    {
        ngx_http_tokenbiryani_spill_fall_back(sp, "its batch was not made");
        return;
    }

    sp->id_len = b.id_len;
    ngx_memcpy(sp->id, b.id, b.id_len);

    /* one of its key's batches: held, and charged even if the client
     * leaves before it ends */

    ngx_memzero(&v, sizeof(v));
    v.kind = NGX_HTTP_TB_OBJECT_BATCH;
    v.status = b.status;
    v.reserved = sp->estimate;
    v.held = 1;
    ngx_memcpy(v.counts, b.counts, sizeof(v.counts));
    v.id_len = b.id_len;
    ngx_memcpy(v.id, b.id, b.id_len);

    ngx_http_tokenbiryani_object_keep(sp->request, ctx, &v, sp->account,
                                      ngx_http_tokenbiryani_now_ms());

    ngx_add_timer(&sp->timer, sp->interval);
}


static void
ngx_http_tokenbiryani_spill_tick(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_spill_t *sp = ev->data;

    ngx_connection_t  *c;

    c = sp->request->connection;

    if (ngx_http_tokenbiryani_now_ms() >= sp->deadline) {
        ngx_http_tokenbiryani_spill_cancel(sp);

        ngx_http_tokenbiryani_set_error(sp->request,
            NGX_HTTP_TOO_MANY_REQUESTS, "rate_limit_error",
            "batch %*s did not finish within this request's wait budget; "
            "it was cancelled upstream", sp->id_len, sp->id);

        ngx_http_tokenbiryani_spill_end(sp, NGX_HTTP_TOO_MANY_REQUESTS);
        ngx_http_run_posted_requests(c);
        return;
    }

    sp->polls++;

    if (ngx_http_tokenbiryani_spill_call(sp, "GET", "", NULL,
                                         ngx_http_tokenbiryani_spill_polled)
        != NGX_OK)
    {
        ngx_add_timer(&sp->timer, sp->interval);
    }
}


static void
ngx_http_tokenbiryani_spill_polled(ngx_http_tokenbiryani_call_result_t *res,
    void *data)
{
    ngx_http_tokenbiryani_spill_t *sp = data;

    int64_t                             left;
    tb_batch_obj_t                      b;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    sp->call = NULL;
    tmcf = ngx_http_get_module_main_conf(sp->request,
                                         ngx_http_tokenbiryani_module);

    if (res->status == NGX_HTTP_OK
        && ngx_http_tokenbiryani_object_said(tmcf,
                                             sp->request->connection->log,
                                             sp->ctx->request_id, sp->id,
                                             sp->id_len, &res->body, &b)
           == NGX_OK)
    {
        if (b.status == TB_BATCH_ENDED) {
            sp->target.sink = ngx_http_tokenbiryani_spill_sink;
            sp->target.sink_data = sp;

            if (ngx_http_tokenbiryani_spill_call(sp, "GET", "/results", NULL,
                    ngx_http_tokenbiryani_spill_read)
                == NGX_OK)
            {
                return;
            }
        }
    }

    /* not yet (or not read): again, no later than its deadline */

    left = sp->deadline - ngx_http_tokenbiryani_now_ms();
    ngx_add_timer(&sp->timer,
                  (ngx_msec_t) ngx_max(ngx_min((int64_t) sp->interval, left),
                                       1));
}


static ngx_int_t
ngx_http_tokenbiryani_spill_sink(void *data, u_char *p, size_t len)
{
    ngx_http_tokenbiryani_spill_t *sp = data;

    return ngx_http_tokenbiryani_line_append(sp->request->pool, &sp->line,
                                             &sp->line_len, &sp->line_size,
                                             p, len)
           == NGX_OK ? NGX_OK : NGX_ERROR;
}


static void
ngx_http_tokenbiryani_spill_read(ngx_http_tokenbiryani_call_result_t *res,
    void *data)
{
    ngx_http_tokenbiryani_spill_t *sp = data;

    size_t                              n;
    ngx_int_t                           rc;
    ngx_str_t                           json;
    ngx_connection_t                   *c;
    tb_batch_result_t                   result;
    ngx_http_request_t                 *r;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_results_t     rd;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    sp->call = NULL;
    r = sp->request;
    c = r->connection;
    ctx = sp->ctx;
    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    n = sp->line_len;

    while (n && (sp->line[n - 1] == '\n' || sp->line[n - 1] == '\r')) {
        n--;
    }

    if (res->status != NGX_HTTP_OK || !res->complete || n == 0
        || tb_batch_result(sp->line, n, &result) != 0
        || result.type != TB_RESULT_SUCCEEDED)
    {
        if (res->status == NGX_HTTP_OK && res->complete && n
            && tb_batch_result(sp->line, n, &result) == 0)
        {
            /* it ended without a message (errored, expired, canceled):
             * nothing to charge, the queue serves it */
            ngx_memzero(&rd, sizeof(rd));
            rd.charge.at_ms = ngx_http_tokenbiryani_now_ms();
            (void) ngx_http_tokenbiryani_object_settled(tmcf, c->log,
                                                        ctx->request_id,
                                                        sp->id, sp->id_len,
                                                        &rd.charge);
            ngx_http_tokenbiryani_spill_fall_back(sp, "its batch ended "
                                                  "without a message");
            return;
        }

        /* its results not read whole: polled again */
        sp->line_len = 0;
        sp->target.sink = NULL;
        ngx_add_timer(&sp->timer, sp->interval);
        return;
    }

    /* charged once at the batch price, as the batch it was */

    ngx_memzero(&rd, sizeof(rd));
    ngx_http_tokenbiryani_results_read(tmcf, &rd, r->pool, sp->line,
                                       sp->line + n);
    ngx_http_tokenbiryani_results_end(tmcf, &rd);
    rd.charge.at_ms = ngx_http_tokenbiryani_now_ms();

    (void) ngx_http_tokenbiryani_object_settled(tmcf, c->log,
                                                ctx->request_id, sp->id,
                                                sp->id_len, &rd.charge);

    /* the request's record: its usage, at what it cost (no lease was
     * taken: nothing else charges it) */

    ctx->usage = result.usage;
    ctx->cost = rd.charge.cost;
    ctx->costed = 1;

    /* the message, as if it had been answered at once */

    json.data = sp->line + result.message.off;
    json.len = result.message.len;

    if (ngx_http_tokenbiryani_spill_header(r, "x-tokenbiryani-via",
                                           (u_char *) "batch", 5)
           != NGX_OK
        || ngx_http_tokenbiryani_spill_header(r, "x-tokenbiryani-account",
               sp->account->id.data, sp->account->id.len) != NGX_OK
        || ngx_http_tokenbiryani_spill_header(r, "x-tokenbiryani-batch-id",
                                              sp->id, sp->id_len)
           != NGX_OK)
    {
        ngx_http_tokenbiryani_spill_end(sp, NGX_HTTP_INTERNAL_SERVER_ERROR);
        ngx_http_run_posted_requests(c);
        return;
    }

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "tokenbiryani: batch \"%*s\" answered the spilled request "
                  "after %ui polls", sp->id_len, sp->id, sp->polls);

    rc = ngx_http_tokenbiryani_send_json(r, NGX_HTTP_OK, &json);

    ngx_http_tokenbiryani_spill_end(sp, rc);
    ngx_http_run_posted_requests(c);
}


/* past its budget: the batch cancelled upstream, on a call of its own
 * that outlives the request */

static void
ngx_http_tokenbiryani_spill_cancelled(ngx_http_tokenbiryani_call_result_t *res,
    void *data)
{
    ngx_destroy_pool(data);
}


static void
ngx_http_tokenbiryani_spill_cancel(ngx_http_tokenbiryani_spill_t *sp)
{
    ngx_pool_t  *pool;

    pool = ngx_create_pool(1024, ngx_cycle->log);
    if (pool == NULL) {
        return;
    }

    ngx_str_null(&sp->target.body);
    sp->target.sink = NULL;
    sp->target.background = 1;
    sp->target.what = "batch spill";

    if (ngx_http_tokenbiryani_call_batch(pool, ngx_cycle->log,
            ngx_http_get_module_main_conf(sp->request,
                                          ngx_http_tokenbiryani_module),
            &sp->target, "POST", sp->id, sp->id_len, "/cancel",
            NGX_HTTP_TB_SPILL_TIMEOUT, ngx_http_tokenbiryani_spill_cancelled,
            pool)
        == NULL)
    {
        ngx_destroy_pool(pool);
    }
}


/* its submission failed, or its batch ended without a message: the
 * queue takes it, as if it had never spilled (it does not spill again) */

static void
ngx_http_tokenbiryani_spill_fall_back(ngx_http_tokenbiryani_spill_t *sp,
    const char *why)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = sp->request;
    c = r->connection;

    ngx_log_error(NGX_LOG_INFO, c->log, 0,
                  "tokenbiryani: the spill lane gives the request back to "
                  "the queue: %s", why);

    if (sp->timer.timer_set) {
        ngx_del_timer(&sp->timer);
    }

    /* its time in the lane is time it waited */
    sp->ctx->wait.waited_ms += ngx_http_tokenbiryani_now_ms() - sp->started;

    sp->back(r);
    ngx_http_run_posted_requests(c);
}


/* answered: an error with its batch's id */

static void
ngx_http_tokenbiryani_spill_end(ngx_http_tokenbiryani_spill_t *sp,
    ngx_int_t rc)
{
    ngx_http_request_t  *r;

    r = sp->request;

    if (sp->timer.timer_set) {
        ngx_del_timer(&sp->timer);
    }

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        if (sp->id_len) {
            (void) ngx_http_tokenbiryani_spill_header(r,
                       "x-tokenbiryani-batch-id", sp->id, sp->id_len);
        }

        rc = ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    ngx_http_finalize_request(r, rc);
}


/* a header of the lane's own on the answer */

static ngx_int_t
ngx_http_tokenbiryani_spill_header(ngx_http_request_t *r, const char *name,
    u_char *value, size_t len)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);

    h->value.data = ngx_pnalloc(r->pool, len);
    if (h->value.data == NULL) {
        h->hash = 0;
        return NGX_ERROR;
    }

    ngx_memcpy(h->value.data, value, len);
    h->value.len = len;

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_spill_cleanup(void *data)
{
    ngx_http_tokenbiryani_spill_t *sp = data;

    if (sp->timer.timer_set) {
        ngx_del_timer(&sp->timer);
    }

    if (sp->call) {
        ngx_http_tokenbiryani_call_cancel(sp->call);
        sp->call = NULL;
    }
}
