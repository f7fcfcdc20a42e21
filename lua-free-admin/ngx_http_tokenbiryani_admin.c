/*
 * tokenbiryani: the /admin JSON API's routes, /admin/status and the
 * inspector's pages, and /healthz.  The documents are built in
 * ..._admin_json.c, sent through ..._admin_io.c; each resource that takes
 * writes has its own file.
 *
 * Admin responses never carry a credential or a prompt: accounts are shown
 * by id, base URL and state, keys not at all.
 */


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_config.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "ngx_http_tokenbiryani_accounts.h"


/* a route: the path, or the path and what follows a '/' after it */
typedef struct {
    ngx_str_t                    path;
    unsigned                     below:1;     /* path/..., as well */
    unsigned                     get_only:1;  /* else the handler checks */
    ngx_int_t                  (*handler)(ngx_http_request_t *r);
} ngx_http_tokenbiryani_admin_route_t;


static ngx_int_t ngx_http_tokenbiryani_admin_status(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_admin_requests(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_admin_request(ngx_http_request_t *r,
    u_char *id, size_t len);
static ngx_int_t ngx_http_tokenbiryani_admin_request_route(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_admin_estimation(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_admin_strategies(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_admin_accounts_route(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_admin_account(ngx_http_request_t *r,
    u_char *p, size_t len);


#define ngx_http_tb_route(p, below, get, h)                                  \
    { ngx_string(p), below, get, h }

static ngx_http_tokenbiryani_admin_route_t  ngx_http_tokenbiryani_routes[] = {
    ngx_http_tb_route("/admin/status", 0, 1,
                      ngx_http_tokenbiryani_admin_status),
    ngx_http_tb_route("/admin/keys", 1, 0, ngx_http_tokenbiryani_admin_keys),
    ngx_http_tb_route("/admin/settings", 0, 0,
                      ngx_http_tokenbiryani_admin_settings),
    ngx_http_tb_route("/admin/reload", 0, 0,
                      ngx_http_tokenbiryani_admin_reload),
    ngx_http_tb_route("/admin/accounts", 1, 0,
                      ngx_http_tokenbiryani_admin_accounts_route),
    ngx_http_tb_route("/admin/console-ticket", 0, 0,
                      ngx_http_tokenbiryani_admin_console_ticket),
    ngx_http_tb_route("/admin/requests", 0, 1,
                      ngx_http_tokenbiryani_admin_requests),
    ngx_http_tb_route("/admin/requests", 1, 1,
                      ngx_http_tokenbiryani_admin_request_route),
    ngx_http_tb_route("/admin/events", 0, 1,
                      ngx_http_tokenbiryani_admin_events),
    ngx_http_tb_route("/admin/batches", 0, 1,
                      ngx_http_tokenbiryani_admin_objects),
    ngx_http_tb_route("/admin/files", 0, 1,
                      ngx_http_tokenbiryani_admin_objects),
    ngx_http_tb_route("/admin/strategies", 0, 1,
                      ngx_http_tokenbiryani_admin_strategies),
    ngx_http_tb_route("/admin/estimation", 0, 1,
                      ngx_http_tokenbiryani_admin_estimation),
    ngx_http_tb_route("/admin/usage", 0, 1,
                      ngx_http_tokenbiryani_admin_usage),
    ngx_http_tb_route("/admin/sessions", 0, 1,
                      ngx_http_tokenbiryani_admin_sessions),
    ngx_http_tb_route("/admin/pacing", 0, 1,
                      ngx_http_tokenbiryani_admin_pacing),
    ngx_http_tb_route("/admin/cache-advice", 0, 1,
                      ngx_http_tokenbiryani_admin_cache_advice),
    ngx_http_tb_route("/admin/horizon", 0, 1,
                      ngx_http_tokenbiryani_admin_horizon),
    ngx_http_tb_route("/admin/metrics", 0, 1,
                      ngx_http_tokenbiryani_admin_metrics),
    { ngx_null_string, 0, 0, NULL }
};


ngx_int_t
ngx_http_tokenbiryani_admin_handler(ngx_http_request_t *r)
{
    ngx_int_t                             rc;
    ngx_str_t                            *uri;
    ngx_http_tokenbiryani_ctx_t          *ctx;
    ngx_http_tokenbiryani_admin_route_t  *rt;

    ctx = ngx_http_tokenbiryani_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_tokenbiryani_authenticate(r, ctx, 1);
    if (rc != NGX_OK) {
        return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    uri = &r->uri;

    /* the accounts as the zone has them now */
    ngx_http_tokenbiryani_accounts_sync(
        ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module));

    for (rt = ngx_http_tokenbiryani_routes; rt->handler; rt++) {

        if (uri->len < rt->path.len
            || ngx_strncmp(uri->data, rt->path.data, rt->path.len) != 0)
        {
            continue;
        }

        if (uri->len != rt->path.len
            && !(rt->below && uri->data[rt->path.len] == '/'))
        {
            continue;
        }

        if (rt->get_only && !(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error",
                       "%V expects GET, not %V", uri, &r->method_name);
        }

        return rt->handler(r);
    }

    return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
               "not_found_error", "no admin endpoint at %V", uri);
}


/* /admin/accounts and below; GET /admin/accounts/{id} is read here */
static ngx_int_t
ngx_http_tokenbiryani_admin_accounts_route(ngx_http_request_t *r)
{
    size_t      skip;
    ngx_int_t   rc;

    rc = ngx_http_tokenbiryani_admin_accounts(r);

    skip = sizeof("/admin/accounts/") - 1;

    if (rc != NGX_DECLINED || r->uri.len <= skip) {
        return rc;
    }

    return ngx_http_tokenbiryani_admin_account(r, r->uri.data + skip,
                                               r->uri.len - skip);
}


/* GET /admin/requests/{id} */
static ngx_int_t
ngx_http_tokenbiryani_admin_request_route(ngx_http_request_t *r)
{
    size_t  skip;

    skip = sizeof("/admin/requests/") - 1;

    return ngx_http_tokenbiryani_admin_request(r, r->uri.data + skip,
                                               r->uri.len - skip);
}


static ngx_int_t
ngx_http_tokenbiryani_admin_status(ngx_http_request_t *r)
{
    int64_t                              now;
    ngx_int_t                            total;
    ngx_pid_t                            pids[64];
    ngx_uint_t                           i, n[TB_NSTATES], nw, held[64];
    cJSON                               *root, *obj, *arr, *w;
    ngx_http_tokenbiryani_zone_stats_t   zs;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    obj = ngx_http_tokenbiryani_json_doc(&root, "gateway",
                                         cJSON_AddObjectToObject);
    if (obj == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    cJSON_AddStringToObject(obj, "version", NGX_HTTP_TOKENBIRYANI_VERSION);
    cJSON_AddNumberToObject(obj, "config_generation",
                            (double) zs.generation);
    cJSON_AddNumberToObject(obj, "uptime_seconds",
                            (double) (now - zs.created_ms) / 1000);

    /* what the shared zone holds: a slab page is its smallest measure */
    obj = cJSON_AddObjectToObject(obj, "zone");
    if (obj == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(obj, "bytes", (double) zs.zone_size);
    cJSON_AddNumberToObject(obj, "free_bytes", (double) zs.zone_free);
    cJSON_AddNumberToObject(obj, "account_slots", (double) zs.nslots);

    cJSON_AddStringToObject(root, "strategy",
                            ngx_http_tokenbiryani_strategy(tmcf)->name);

    obj = cJSON_AddObjectToObject(root, "affinity");
    if (obj == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(obj, "sessions", (double) zs.aff_entries);
    cJSON_AddNumberToObject(obj, "bytes_per_entry",
                            (double) zs.aff_entry_size);
    cJSON_AddNumberToObject(obj, "evicted", (double) zs.aff_evicted);
    cJSON_AddNumberToObject(obj, "ttl_seconds",
                            tmcf->tbcf->affinity_ttl_seconds);
    cJSON_AddNumberToObject(obj, "decisions", (double) zs.share.decisions);
    cJSON_AddNumberToObject(obj, "no_owner",
                            (double) zs.affinity[TB_AFF_NONE]);
    cJSON_AddNumberToObject(obj, "honored",
                            (double) zs.affinity[TB_AFF_HONORED]);
    cJSON_AddNumberToObject(obj, "broken",
                            (double) zs.affinity[TB_AFF_BROKEN]);
    cJSON_AddNumberToObject(obj, "forced_breaks",
                            (double) zs.affinity[TB_AFF_FORCED]);

    obj = cJSON_AddObjectToObject(root, "leases");
    if (obj == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(obj, "held", (double) zs.leases_held);
    cJSON_AddNumberToObject(obj, "taken_back", (double) zs.leases_reclaimed);

    /* who holds them: what a worker that died still held shows here */

    nw = ngx_http_tokenbiryani_lease_owners(&tmcf->zone, pids, held, 64);

    arr = cJSON_AddArrayToObject(obj, "workers");
    if (arr == NULL) {
        goto failed;
    }

    for (i = 0; i < nw; i++) {
        w = ngx_http_tokenbiryani_json_push(arr);
        if (w == NULL) {
            goto failed;
        }

        cJSON_AddNumberToObject(w, "pid", (double) pids[i]);
        cJSON_AddNumberToObject(w, "held", (double) held[i]);
    }

    obj = ngx_http_tokenbiryani_queue_json(r, now);
    if (obj == NULL) {
        goto failed;
    }

    cJSON_AddItemToObject(root, "queue", obj);

    if (ngx_http_tokenbiryani_keys_json(r, root) != NGX_OK
        || ngx_http_tokenbiryani_store_json(r, root, now, &zs.share) != NGX_OK)
    {
        goto failed;
    }

    arr = cJSON_AddArrayToObject(root, "accounts");
    if (arr == NULL) {
        goto failed;
    }

    ngx_memzero(n, sizeof(n));

    total = ngx_http_tokenbiryani_admin_account_records(r, arr, now, n);
    if (total == NGX_ERROR) {
        goto failed;
    }

    obj = cJSON_AddObjectToObject(root, "pool");
    if (obj == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(obj, "total", (double) total);
    cJSON_AddNumberToObject(obj, "ready", (double) n[TB_STATE_READY]);
    cJSON_AddNumberToObject(obj, "cooling", (double) n[TB_STATE_COOLING]);
    cJSON_AddNumberToObject(obj, "exhausted", (double) n[TB_STATE_EXHAUSTED]);
    cJSON_AddNumberToObject(obj, "disabled", (double) n[TB_STATE_DISABLED]);
    cJSON_AddNumberToObject(obj, "failing", (double) n[TB_STATE_FAILING]);

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    return ngx_http_tokenbiryani_cjson_fail(root);
}


static ngx_int_t
ngx_http_tokenbiryani_admin_requests(ngx_http_request_t *r)
{
    ngx_int_t                            rc, limit;
    ngx_uint_t                           i, n;
    cJSON                               *root, *arr, *item;
    ngx_http_tokenbiryani_record_t      *recs;
    ngx_http_tokenbiryani_zone_stats_t   zs;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    limit = 50;

    rc = ngx_http_tokenbiryani_admin_limit(r, &limit, 0);
    if (rc != NGX_OK) {
        return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    limit = ngx_min((ngx_uint_t) limit, zs.ring_size);

    recs = ngx_palloc(r->pool,
                      (limit + 1) * sizeof(ngx_http_tokenbiryani_record_t));
    if (recs == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_tokenbiryani_inspect_list(&tmcf->zone, recs,
                                           (ngx_uint_t) limit);

    arr = ngx_http_tokenbiryani_json_doc(&root, "requests",
                                         cJSON_AddArrayToObject);
    if (arr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < n; i++) {
        item = ngx_http_tokenbiryani_record_json(r, &recs[i], 0);
        if (item == NULL) {
            return ngx_http_tokenbiryani_cjson_fail(root);
        }

        cJSON_AddItemToArray(arr, item);
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}


static ngx_int_t
ngx_http_tokenbiryani_admin_request(ngx_http_request_t *r, u_char *id,
    size_t len)
{
    cJSON                              *root;
    ngx_http_tokenbiryani_record_t     *rec;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    rec = ngx_palloc(r->pool, sizeof(ngx_http_tokenbiryani_record_t));
    if (rec == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (len != NGX_HTTP_TB_REQUEST_ID_LEN
        || ngx_http_tokenbiryani_inspect_find(&tmcf->zone, id, rec) != NGX_OK)
    {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                   "not_found_error",
                   "no request %*s in the inspector (it keeps the last %ui)",
                   ngx_min(len, 64), id,
                   (ngx_uint_t) tmcf->tbcf->observability_event_buffer);
    }

    root = ngx_http_tokenbiryani_record_json(r, rec, 1);
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}


static ngx_int_t
ngx_http_tokenbiryani_admin_estimation(ngx_http_request_t *r)
{
    double                              rate;
    ngx_uint_t                          i, n;
    tb_est_t                           *copies[NGX_HTTP_TB_ESTIMATORS];
    cJSON                              *root, *models, *m, *in;
    tb_config_t                        *cf;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;

    n = ngx_http_tokenbiryani_estimator_snapshot(&tmcf->zone, copies,
                                                 NGX_HTTP_TB_ESTIMATORS,
                                                 r->pool);

    root = cJSON_CreateObject();
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cJSON_AddStringToObject(root, "mode", cf->output_estimate_adaptive
                                          ? "adaptive" : "max_tokens");
    cJSON_AddNumberToObject(root, "quantile", cf->output_estimate_quantile);
    cJSON_AddNumberToObject(root, "min_samples",
                            (double) cf->output_estimate_min_samples);
    cJSON_AddNumberToObject(root, "window",
                            (double) cf->output_estimate_window);
    cJSON_AddNumberToObject(root, "floor",
                            (double) cf->output_estimate_floor);
    cJSON_AddNumberToObject(root, "max_undershoot",
                            cf->output_estimate_max_undershoot);

    models = cJSON_AddObjectToObject(root, "models");
    if (models == NULL) {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    for (i = 0; i < n; i++) {
        m = cJSON_AddObjectToObject(models, copies[i]->model);
        if (m == NULL) {
            return ngx_http_tokenbiryani_cjson_fail(root);
        }

        cJSON_AddNumberToObject(m, "samples", copies[i]->n);
        cJSON_AddBoolToObject(m, "predicting",
                              tb_est_predicting(copies[i], cf));
        cJSON_AddNumberToObject(m, "median", copies[i]->median);
        cJSON_AddNumberToObject(m, "p95", copies[i]->quantile);
        cJSON_AddNumberToObject(m, "max", copies[i]->max);

        rate = tb_est_undershoot_rate(copies[i], 1);

        ngx_http_tokenbiryani_add_number_or_null(m, "undershoot_rate",
                                                 rate >= 0, rate);

        /* the input estimate: tokens per 1,000 text bytes once calibrated */

        in = cJSON_AddObjectToObject(m, "input");
        if (in == NULL) {
            return ngx_http_tokenbiryani_cjson_fail(root);
        }

        cJSON_AddNumberToObject(in, "samples", copies[i]->in_n);

        if (tb_est_input_ratio(copies[i])) {
            cJSON_AddBoolToObject(in, "calibrated", 1);
            cJSON_AddNumberToObject(in, "tokens_per_kb",
                (double) tb_est_input_ratio(copies[i]) / 1000);

        } else {
            cJSON_AddBoolToObject(in, "calibrated", 0);
            cJSON_AddNullToObject(in, "tokens_per_kb");
        }
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}


static ngx_int_t
ngx_http_tokenbiryani_admin_strategies(ngx_http_request_t *r)
{
    ngx_uint_t                          i, plugin;
    cJSON                              *root, *arr, *item;
    const tb_strategy_t                *st, *cur;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    arr = ngx_http_tokenbiryani_json_doc(&root, "strategies",
                                         cJSON_AddArrayToObject);
    if (arr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cur = ngx_http_tokenbiryani_strategy(tmcf);

    for (i = 0; (st = ngx_http_tokenbiryani_strategy_nth(tmcf, i, &plugin));
         i++)
    {
        item = ngx_http_tokenbiryani_strategy_json(st, plugin, st == cur);
        cJSON_AddItemToArray(arr, item);
    }

    item = cJSON_AddObjectToObject(root, "weights");

    for (i = 0; item && i < TB_TERMS; i++) {
        cJSON_AddNumberToObject(item, tb_term_names[i], tmcf->weights[i]);
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}


ngx_int_t
ngx_http_tokenbiryani_healthz_handler(ngx_http_request_t *r)
{
    int64_t                               now, until, last;
    cJSON                                *root, *reasons, *item, *n;
    ngx_uint_t                            i, ready, failing, total;
    const char                           *reason, *store, *st_name, *st_why;
    tb_account_state_t                    s;
    ngx_http_tokenbiryani_store_state_t   st;
    tb_state_e                          state;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    /* the context: what sends the answer marks it as its own */
    if (ngx_http_tokenbiryani_create_ctx(r) == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error",
                   "%V expects GET, not %V", &r->uri, &r->method_name);
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    ngx_http_tokenbiryani_accounts_sync(tmcf);

    root = cJSON_CreateObject();
    reasons = cJSON_CreateArray();

    if (root == NULL || reasons == NULL) {
        cJSON_Delete(root);
        cJSON_Delete(reasons);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ready = 0;
    failing = 0;
    total = 0;
    last = 0;
    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (a[i].retired) {
            continue;
        }

        total++;

        ngx_http_tokenbiryani_zone_snapshot(&tmcf->zone, a[i].slot, &s);

        state = tb_account_state(&s, a[i].conf->enabled && a[i].supported,
                                 &tmcf->zone.breaker, now, &until, &reason);

        if (s.last_success_ms > last) {
            last = s.last_success_ms;
        }

        if (state == TB_STATE_READY) {
            ready++;
            continue;
        }

        failing += (state == TB_STATE_FAILING);

        /*
         * Why the others are not ready, counted by state and reason: no
         * account's id (this answers whoever can reach it), the words
         * the console and the command show
         */

        cJSON_ArrayForEach(item, reasons) {
            st_name = cJSON_GetStringValue(
                          cJSON_GetObjectItemCaseSensitive(item, "state"));
            st_why = cJSON_GetStringValue(
                          cJSON_GetObjectItemCaseSensitive(item, "reason"));
            n = cJSON_GetObjectItemCaseSensitive(item, "accounts");

            if (st_name && st_why && n
                && ngx_strcmp(st_name, tb_state_name(state)) == 0
                && ngx_strcmp(st_why, reason) == 0)
            {
                cJSON_SetNumberValue(n, n->valuedouble + 1);
                break;
            }
        }

        if (item == NULL && cJSON_GetArraySize(reasons) < 16) {
            item = cJSON_CreateObject();
            if (item == NULL
                || cJSON_AddStringToObject(item, "state",
                                           tb_state_name(state)) == NULL
                || cJSON_AddStringToObject(item, "reason", reason) == NULL
                || cJSON_AddNumberToObject(item, "accounts", 1) == NULL)
            {
                cJSON_Delete(item);
                goto failed;
            }

            cJSON_AddItemToArray(reasons, item);
        }
    }

    /* a store that is away is not an outage: it is said, and serving
     * goes on */

    store = "memory";

    if (ngx_http_tokenbiryani_store_on(tmcf)) {
        ngx_http_tokenbiryani_store_snapshot(&tmcf->zone, &st);
        store = st.degraded ? "degraded" : "ok";
    }

    if (cJSON_AddStringToObject(root, "status",
                                ready ? "ok" : "no_capacity") == NULL
        || cJSON_AddNumberToObject(root, "ready", (double) ready) == NULL
        || cJSON_AddNumberToObject(root, "total", (double) total) == NULL
        || cJSON_AddStringToObject(root, "store", store) == NULL
        || cJSON_AddNumberToObject(root, "failing", (double) failing) == NULL
        || (last && last <= now
            ? cJSON_AddNumberToObject(root, "last_success_ago",
                                      (double) ((now - last) / 1000))
            : cJSON_AddNullToObject(root, "last_success_ago")) == NULL)
    {
        goto failed;
    }

    cJSON_AddItemToObject(root, "reasons", reasons);

    return ngx_http_tokenbiryani_send_cjson(r,
               ready ? NGX_HTTP_OK : NGX_HTTP_SERVICE_UNAVAILABLE, root);

failed:

    cJSON_Delete(reasons);

    return ngx_http_tokenbiryani_cjson_fail(root);
}


/*
 * POST /admin/accounts/{id}/enable: every state cleared (disabled,
 * cooling, exhausted, the breaker, the models refused); .../disable: the
 * account takes nothing until enabled.  Both answer with the account.
 */

static ngx_int_t
ngx_http_tokenbiryani_admin_account(ngx_http_request_t *r, u_char *p,
    size_t len)
{
    size_t                              n;
    int64_t                             now;
    u_char                             *slash;
    ngx_uint_t                          enable;
    tb_state_e                          state;
    cJSON                              *acct;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    slash = ngx_strlchr(p, p + len, '/');

    if (slash == NULL) {
        n = len;
        enable = 2;

    } else {
        n = slash - p;

        if ((size_t) (p + len - slash) == sizeof("/enable") - 1
            && ngx_strncmp(slash, "/enable", sizeof("/enable") - 1) == 0)
        {
            enable = 1;

        } else if ((size_t) (p + len - slash) == sizeof("/disable") - 1
                   && ngx_strncmp(slash, "/disable",
                                  sizeof("/disable") - 1) == 0)
        {
            enable = 0;

        } else {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                       "not_found_error", "no admin endpoint at %V", &r->uri);
        }
    }

    a = ngx_http_tokenbiryani_account_find(tmcf, p, n);

    if (a == NULL) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                   "not_found_error", "no account \"%*s\"",
                   ngx_min(n, 64), p);
    }

    if (enable == 2) {
        if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error",
                       "%V expects GET, not %V", &r->uri, &r->method_name);
        }

    } else {
        if (r->method != NGX_HTTP_POST) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error",
                       "%V expects POST, not %V", &r->uri, &r->method_name);
        }

        now = ngx_http_tokenbiryani_now_ms();

        ngx_http_tokenbiryani_zone_set_enabled(&tmcf->zone, a->slot, enable,
                                               now);

        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "tokenbiryani: account \"%V\" %s by an operator",
                      &a->id, enable ? "enabled, its state cleared"
                                     : "disabled");
    }

    acct = ngx_http_tokenbiryani_admin_account_record(r, a,
                                              ngx_http_tokenbiryani_now_ms(),
                                              &state);
    if (acct == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, acct);
}
