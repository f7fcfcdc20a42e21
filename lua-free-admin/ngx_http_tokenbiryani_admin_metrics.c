/*
 * tokenbiryani: the pool's capacity and counters, for operators.
 *
 *   GET /admin/horizon   what the pool can take now and over the next
 *                        hour, in 5-minute steps, from the mirror and
 *                        the leases; the next reset; the queue;
 *   GET /admin/metrics   the Prometheus text format (0.0.4).
 *
 * Both behind the admin boundary: account ids and the pool's capacity
 * are the operator's.  Views are copied out of the zone and rendered
 * outside its lock.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "tb_ledger.h"


#define NGX_HTTP_TB_HORIZON_STEPS      13     /* now, then every 5 min */
#define NGX_HTTP_TB_HORIZON_STEP_MS    300000


/*
 * What an account can take at time t, window by window (TB_UNKNOWN when
 * its limits were never seen): 0 while it cools, is exhausted, is over
 * its spend cap or is disabled; otherwise its level then, less what is
 * reserved and pending now.
 */

static void
ngx_http_tokenbiryani_horizon_at(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a, const tb_account_state_t *s,
    int64_t t, int64_t *avail)
{
    ngx_uint_t  w;

    for (w = 0; w < TB_NWINDOWS; w++) {
        avail[w] = tb_window_available(s, (int) w, t);
    }

    if (!a->conf->enabled || !a->supported || s->disabled
        || s->cooling_until_ms > t || s->exhausted_until_ms > t
        || (a->conf->spend_cap_usd >= 0
            && tb_ledger_over(&s->spend, t, tmcf->zone.spend_bucket_ms,
                              tb_usd_to_nd(a->conf->spend_cap_usd))))
    {
        for (w = 0; w < TB_NWINDOWS; w++) {
            avail[w] = (avail[w] == TB_UNKNOWN) ? TB_UNKNOWN : 0;
        }
    }
}


ngx_int_t
ngx_http_tokenbiryani_admin_horizon(ngx_http_request_t *r)
{
    int64_t                              now, t, reset, avail[TB_NWINDOWS];
    int64_t                              sum[NGX_HTTP_TB_HORIZON_STEPS]
                                            [TB_NWINDOWS];
    ngx_uint_t                           i, k, w, counted, unobserved, ready;
    ngx_uint_t                           total;
    cJSON                               *root, *arr, *step, *obj;
    tb_account_state_t                   s;
    ngx_http_tokenbiryani_account_t     *a;
    ngx_http_tokenbiryani_queue_view_t   qv;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    const char                          *reason;
    u_char                               line[256], *p;
    char                                 wait[32], now_in[16], hour_in[16];

    static const char  *names[TB_NWINDOWS] = { "requests", "input_tokens",
                                               "output_tokens" };

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();
    a = tmcf->accounts.elts;

    ngx_memzero(sum, sizeof(sum));
    counted = 0;
    unobserved = 0;
    ready = 0;
    total = 0;
    reset = 0;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (a[i].retired) {
            continue;
        }

        total++;

        ngx_http_tokenbiryani_zone_snapshot(&tmcf->zone, a[i].slot, &s);

        if (tb_account_state(&s, a[i].conf->enabled && a[i].supported,
                             &tmcf->zone.breaker, now, &t, &reason)
            == TB_STATE_READY)
        {
            ready++;
        }

        if (!a[i].conf->observable_limits
            || tb_window_available(&s, TB_WIN_INPUT, now) == TB_UNKNOWN)
        {
            /* nothing known to add up: said apart, never as full */
            unobserved++;
            continue;
        }

        counted++;

        for (w = 0; w < TB_NWINDOWS; w++) {
            if (s.mirror.w[w].reset_ms > now
                && (reset == 0 || s.mirror.w[w].reset_ms < reset))
            {
                reset = s.mirror.w[w].reset_ms;
            }
        }

        for (k = 0; k < NGX_HTTP_TB_HORIZON_STEPS; k++) {
            ngx_http_tokenbiryani_horizon_at(tmcf, &a[i], &s,
                                     now + (int64_t) k
                                           * NGX_HTTP_TB_HORIZON_STEP_MS,
                                     avail);

            for (w = 0; w < TB_NWINDOWS; w++) {
                if (avail[w] > 0) {
                    sum[k][w] += avail[w];
                }
            }
        }
    }

    (void) ngx_http_tokenbiryani_queue_snapshot(&tmcf->zone, &qv, NULL, 0);

    obj = ngx_http_tokenbiryani_json_doc(&root, "accounts",
                                         cJSON_AddObjectToObject);
    if (obj == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cJSON_AddNumberToObject(obj, "total", (double) total);
    cJSON_AddNumberToObject(obj, "ready", (double) ready);
    cJSON_AddNumberToObject(obj, "counted", (double) counted);
    cJSON_AddNumberToObject(obj, "limits_unobserved", (double) unobserved);

    obj = cJSON_AddObjectToObject(root, "now");
    if (obj == NULL) {
        goto failed;
    }

    for (w = 0; w < TB_NWINDOWS; w++) {
        cJSON_AddNumberToObject(obj, names[w], (double) sum[0][w]);
    }

    arr = cJSON_AddArrayToObject(root, "next_hour");
    if (arr == NULL) {
        goto failed;
    }

    for (k = 0; k < NGX_HTTP_TB_HORIZON_STEPS; k++) {
        step = cJSON_CreateObject();
        if (step == NULL || !cJSON_AddItemToArray(arr, step)) {
            cJSON_Delete(step);
            goto failed;
        }

        cJSON_AddNumberToObject(step, "in_seconds",
                                (double) (k * NGX_HTTP_TB_HORIZON_STEP_MS
                                          / 1000));

        for (w = 0; w < TB_NWINDOWS; w++) {
            cJSON_AddNumberToObject(step, names[w], (double) sum[k][w]);
        }
    }

    ngx_http_tokenbiryani_add_number_or_null(root, "next_reset_seconds",
                                             reset != 0,
                                             (double) (reset - now) / 1000);

    obj = cJSON_AddObjectToObject(root, "queue");
    if (obj == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(obj, "depth", (double) qv.depth);
    cJSON_AddNumberToObject(obj, "interactive", (double) qv.n[0]);
    cJSON_AddNumberToObject(obj, "batch", (double) qv.n[1]);

    /* the one line a terminal shows */

    (void) tb_tokens_format(sum[0][TB_WIN_INPUT], now_in, sizeof(now_in));
    (void) tb_tokens_format(sum[NGX_HTTP_TB_HORIZON_STEPS - 1][TB_WIN_INPUT],
                            hour_in, sizeof(hour_in));

    p = ngx_snprintf(line, sizeof(line) - 1,
                     "%ui of %ui accounts ready, %s input tokens now, %s "
                     "within the hour", ready, total, now_in, hour_in);

    if (unobserved) {
        p = ngx_snprintf(p, line + sizeof(line) - 1 - p,
                         " (%ui with limits not observed)", unobserved);
    }

    if (reset) {
        (void) tb_wait_format(reset - now, wait, sizeof(wait));
        p = ngx_snprintf(p, line + sizeof(line) - 1 - p,
                         ", next reset in %s", wait);
    }

    p = ngx_snprintf(p, line + sizeof(line) - 1 - p, ", %ui queued",
                     qv.depth);
    *p = '\0';

    cJSON_AddStringToObject(root, "summary", (char *) line);

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    return ngx_http_tokenbiryani_cjson_fail(root);
}


/* the Prometheus text format: one family's help and type, then samples */

typedef struct {
    ngx_chain_t                   *first;
    ngx_chain_t                  **last;
    ngx_buf_t                     *b;
    ngx_pool_t                    *pool;
    size_t                         size;
    ngx_uint_t                     failed;
} ngx_http_tokenbiryani_text_t;


static void
ngx_http_tokenbiryani_text(ngx_http_tokenbiryani_text_t *tx,
    const char *fmt, ...)
{
    u_char       *p;
    va_list       args;
    ngx_chain_t  *cl;

    if (tx->failed) {
        return;
    }

    if (tx->b == NULL || tx->b->end - tx->b->last < 1024) {
        tx->b = ngx_create_temp_buf(tx->pool, 16384);
        cl = ngx_alloc_chain_link(tx->pool);
        if (tx->b == NULL || cl == NULL) {
            tx->failed = 1;
            return;
        }

        cl->buf = tx->b;
        cl->next = NULL;
        *tx->last = cl;
        tx->last = &cl->next;
    }

    va_start(args, fmt);
    p = ngx_vslprintf(tx->b->last, tx->b->end, fmt, args);
    va_end(args);

    tx->size += p - tx->b->last;
    tx->b->last = p;
}


#define tb_family(tx, name, type, help)                                       \
    ngx_http_tokenbiryani_text(tx, "# HELP " name " " help "\n"               \
                                   "# TYPE " name " " type "\n")


/* a counter each account's state keeps at offset: a sample an account */
static void
ngx_http_tokenbiryani_account_counter(ngx_http_tokenbiryani_text_t *tx,
    const char *name, ngx_http_tokenbiryani_account_t *a,
    tb_account_state_t *s, ngx_uint_t n, size_t offset)
{
    ngx_uint_t  i;

    for (i = 0; i < n; i++) {
        if (!a[i].retired) {
            ngx_http_tokenbiryani_text(tx, "%s{account=\"%V\"} %uL\n", name,
                &a[i].id,
                *(uint64_t *) (void *) ((u_char *) &s[i] + offset));
        }
    }
}


ngx_int_t
ngx_http_tokenbiryani_admin_metrics(ngx_http_request_t *r)
{
    int64_t                               now, until, avail[TB_NWINDOWS];
    ngx_int_t                             rc;
    ngx_uint_t                            i, k, n;
    const char                           *reason;
    tb_state_e                            state;
    tb_account_state_t                   *s;
    ngx_http_tokenbiryani_text_t          tx;
    ngx_http_tokenbiryani_account_t      *a;
    ngx_http_tokenbiryani_queue_view_t    qv;
    ngx_http_tokenbiryani_zone_stats_t    zs;
    ngx_http_tokenbiryani_store_state_t   ss;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;

    static const char  *kinds[4] = { "input", "output", "cache_read",
                                     "cache_write" };
    static const char  *wins[TB_NWINDOWS] = { "requests", "input_tokens",
                                              "output_tokens" };

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();
    a = tmcf->accounts.elts;

    if (r->method != NGX_HTTP_GET && r->method != NGX_HTTP_HEAD) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V /admin/metrics: only GET",
                   &r->method_name);
    }

    /* the accounts' states, copied first: rendering takes no lock */

    n = tmcf->accounts.nelts;

    s = ngx_palloc(r->pool, (n + 1) * sizeof(tb_account_state_t));
    if (s == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < n; i++) {
        if (!a[i].retired) {
            ngx_http_tokenbiryani_zone_snapshot(&tmcf->zone, a[i].slot, &s[i]);
        }
    }

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);
    (void) ngx_http_tokenbiryani_queue_snapshot(&tmcf->zone, &qv, NULL, 0);
    ngx_http_tokenbiryani_store_snapshot(&tmcf->zone, &ss);

    ngx_memzero(&tx, sizeof(tx));
    tx.pool = r->pool;
    tx.last = &tx.first;

#define tb_each_account                                                       \
    for (i = 0; i < n; i++)                                                   \
        if (!a[i].retired)

/* a family of one sample */
#define tb_one_sample(name, type, help, fmt, value)                           \
    tb_family(&tx, name, type, help);                                         \
    ngx_http_tokenbiryani_text(&tx, name " " fmt "\n", value)

/* a family of a counter each account has */
#define tb_account_counter(name, help, field)                                 \
    tb_family(&tx, name, "counter", help);                                    \
    ngx_http_tokenbiryani_account_counter(&tx, name, a, s, n,                 \
                                          offsetof(tb_account_state_t, field))

    tb_family(&tx, "tokenbiryani_requests_total", "counter",
              "Attempts answered or failed, by account and outcome.");

    tb_each_account {
        for (k = 0; k < TB_NKINDS; k++) {
            if (s[i].kinds[k]) {
                ngx_http_tokenbiryani_text(&tx,
                    "tokenbiryani_requests_total{account=\"%V\","
                    "outcome=\"%s\"} %uL\n", &a[i].id, tb_rules[k].name,
                    s[i].kinds[k]);
            }
        }
    }

    tb_family(&tx, "tokenbiryani_tokens_total", "counter",
              "Tokens of the answers, by account and kind.");

    tb_each_account {
        for (k = 0; k < 4; k++) {
            ngx_http_tokenbiryani_text(&tx,
                "tokenbiryani_tokens_total{account=\"%V\",kind=\"%s\"} %L\n",
                &a[i].id, kinds[k], s[i].tokens[k]);
        }
    }

    tb_family(&tx, "tokenbiryani_cost_usd_total", "counter",
              "What the answers cost at the configured prices, in USD.");

    tb_each_account {
        ngx_http_tokenbiryani_text(&tx,
            "tokenbiryani_cost_usd_total{account=\"%V\"} %L.%09L\n",
            &a[i].id, s[i].cost_total / 1000000000,
            s[i].cost_total % 1000000000);
    }

    tb_account_counter("tokenbiryani_unpriced_answers_total",
                       "Answers of a model with no price: not in the cost.",
                       unpriced);

    tb_account_counter("tokenbiryani_cache_hits_total",
                       "Answers that read a prompt cache.", cache_hits);

    tb_family(&tx, "tokenbiryani_account_state", "gauge",
              "1 for the state each account is in.");

    tb_each_account {
        state = tb_account_state(&s[i], a[i].conf->enabled && a[i].supported,
                                 &tmcf->zone.breaker, now, &until, &reason);

        for (k = TB_STATE_READY; k < TB_NSTATES; k++) {
            ngx_http_tokenbiryani_text(&tx,
                "tokenbiryani_account_state{account=\"%V\",state=\"%s\"} "
                "%d\n", &a[i].id, tb_state_name((tb_state_e) k),
                (int) (state == (tb_state_e) k));
        }
    }

    tb_family(&tx, "tokenbiryani_breaker_open", "gauge",
              "1 while an account's circuit breaker is open or half-open.");

    tb_each_account {
        ngx_http_tokenbiryani_text(&tx,
            "tokenbiryani_breaker_open{account=\"%V\"} %d\n", &a[i].id,
            (int) (tb_breaker_state(&s[i].breaker, &tmcf->zone.breaker, now)
                   != TB_BREAKER_CLOSED));
    }

    tb_family(&tx, "tokenbiryani_account_available", "gauge",
              "What an account's window has left now, less what is leased; "
              "absent while its limits are not observed.");

    tb_each_account {
        for (k = 0; k < TB_NWINDOWS; k++) {
            avail[k] = tb_window_available(&s[i], (int) k, now);

            if (avail[k] != TB_UNKNOWN && a[i].conf->observable_limits) {
                ngx_http_tokenbiryani_text(&tx,
                    "tokenbiryani_account_available{account=\"%V\","
                    "window=\"%s\"} %L\n", &a[i].id, wins[k], avail[k]);
            }
        }
    }

    tb_family(&tx, "tokenbiryani_account_inflight", "gauge",
              "Attempts in flight on an account.");

    tb_each_account {
        ngx_http_tokenbiryani_text(&tx,
            "tokenbiryani_account_inflight{account=\"%V\"} %L\n", &a[i].id,
            s[i].inflight);
    }

    tb_one_sample("tokenbiryani_failovers_total", "counter",
                  "Answered requests that took more than one attempt.",
                  "%uL", zs.failovers);

    tb_family(&tx, "tokenbiryani_cache_breaks_total", "counter",
              "Decisions that moved a conversation off the account holding "
              "its cache.");
    ngx_http_tokenbiryani_text(&tx,
        "tokenbiryani_cache_breaks_total{why=\"broken\"} %uL\n"
        "tokenbiryani_cache_breaks_total{why=\"forced\"} %uL\n",
        zs.affinity[TB_AFF_BROKEN], zs.affinity[TB_AFF_FORCED]);

    tb_family(&tx, "tokenbiryani_queue_depth", "gauge",
              "Requests waiting for capacity.");
    ngx_http_tokenbiryani_text(&tx,
        "tokenbiryani_queue_depth{class=\"interactive\"} %ui\n"
        "tokenbiryani_queue_depth{class=\"batch\"} %ui\n",
        qv.n[0], qv.n[1]);

    tb_family(&tx, "tokenbiryani_queue_wait_seconds", "summary",
              "How long requests waited in the queue.");
    ngx_http_tokenbiryani_text(&tx,
        "tokenbiryani_queue_wait_seconds_sum %uL.%03uL\n"
        "tokenbiryani_queue_wait_seconds_count %uL\n",
        zs.queue_wait_ms / 1000, zs.queue_wait_ms % 1000, zs.queue_waits);

    tb_family(&tx, "tokenbiryani_queue_outcomes_total", "counter",
              "How waits ended.");
    ngx_http_tokenbiryani_text(&tx,
        "tokenbiryani_queue_outcomes_total{outcome=\"served\"} %uL\n"
        "tokenbiryani_queue_outcomes_total{outcome=\"timed_out\"} %uL\n"
        "tokenbiryani_queue_outcomes_total{outcome=\"full\"} %uL\n"
        "tokenbiryani_queue_outcomes_total{outcome=\"client_left\"} %uL\n",
        qv.served, qv.timed_out, qv.full, qv.left);

    tb_one_sample("tokenbiryani_leases", "gauge",
                  "Reservations held on the pool's accounts.",
                  "%uL", zs.leases_held);

    tb_one_sample("tokenbiryani_leases_reclaimed_total", "counter",
                  "Leases taken back from workers that died or stopped "
                  "renewing.", "%uL", zs.leases_reclaimed);

    tb_one_sample("tokenbiryani_sessions", "gauge",
                  "Conversations the zone tracks.", "%ui", zs.nsessions);

    tb_one_sample("tokenbiryani_store_degraded", "gauge",
                  "1 while the durable store cannot be written.", "%d",
                  ngx_http_tokenbiryani_store_on(tmcf)
                  ? (int) (ss.degraded != 0) : 0);

    tb_family(&tx, "tokenbiryani_store_flushes_total", "counter",
              "History writes of the store, by result.");
    ngx_http_tokenbiryani_text(&tx,
        "tokenbiryani_store_flushes_total{result=\"ok\"} %uL\n"
        "tokenbiryani_store_flushes_total{result=\"failed\"} %uL\n",
        ss.flushes, ss.failures);

#undef tb_each_account
#undef tb_one_sample
#undef tb_account_counter

    if (tx.failed) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = (off_t) tx.size;
    ngx_str_set(&r->headers_out.content_type,
                "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = r->headers_out.content_type.len;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    tx.b->last_buf = (r == r->main) ? 1 : 0;
    tx.b->last_in_chain = 1;

    return ngx_http_output_filter(r, tx.first);
}
