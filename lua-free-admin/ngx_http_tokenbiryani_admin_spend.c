/*
 * tokenbiryani: what was spent, for operators.
 *
 *   GET /admin/usage?range=1h|24h|7d|30d&by=account|model|key
 *       the usage history from the store (read in its thread, never on
 *       the event loop): series and totals of requests, tokens by kind,
 *       cost, cache-hit rate and errors;
 *   GET /admin/sessions?limit=N
 *       the conversations that cost most, worst first, from the zone,
 *       with the runaways flagged and why.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "tb_ledger.h"
#include "tb_parse.h"


typedef struct {
    ngx_http_tokenbiryani_admin_write_t   w;
    const char                           *range;
    const char                           *by;
} ngx_http_tokenbiryani_usage_read_t;


static ngx_int_t ngx_http_tokenbiryani_usage_answer(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w);
static void ngx_http_tokenbiryani_usage_add(tb_usage_row_t *to,
    const tb_usage_row_t *u);
static cJSON *ngx_http_tokenbiryani_usage_json(cJSON *obj,
    const tb_usage_row_t *u);
static cJSON *ngx_http_tokenbiryani_usage_totals(cJSON *obj,
    const tb_usage_row_t *u);


/* a read of the store: answered as a write is, and never refused */
static const ngx_http_tokenbiryani_admin_resource_t
    ngx_http_tokenbiryani_usage_resource =
{
    NULL, NULL, "the store cannot be read", NULL,
    ngx_http_tokenbiryani_usage_answer,
    ngx_http_tokenbiryani_admin_usage_done
};


static const struct {
    const char  *name;
    int64_t      seconds;
    int64_t      step;
} ngx_http_tokenbiryani_ranges[] = {
    { "1h",  3600,        60 },
    { "24h", 86400,       900 },
    { "7d",  7 * 86400,   3600 },
    { "30d", 30 * 86400,  86400 },
};


ngx_int_t
ngx_http_tokenbiryani_admin_usage(ngx_http_request_t *r)
{
    ngx_str_t                            value;
    ngx_uint_t                           i;
    ngx_http_tokenbiryani_usage_read_t  *ur;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;

    static const char  *bys[] = { "", "account", "model", "key" };

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (r->method != NGX_HTTP_GET) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V /admin/usage: only GET",
                   &r->method_name);
    }

    ur = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_usage_read_t));
    if (ur == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ur->w.request = r;
    ur->w.res = &ngx_http_tokenbiryani_usage_resource;
    ur->w.job.u.usage.by = TB_STORE_BY_NONE;
    ur->by = NULL;
    i = 0;

    if (ngx_http_arg(r, (u_char *) "range", 5, &value) == NGX_OK) {
        for (i = 0; i < sizeof(ngx_http_tokenbiryani_ranges)
                        / sizeof(ngx_http_tokenbiryani_ranges[0]); i++)
        {
            if (value.len == ngx_strlen(ngx_http_tokenbiryani_ranges[i].name)
                && ngx_strncmp(value.data, ngx_http_tokenbiryani_ranges[i].name,
                               value.len) == 0)
            {
                break;
            }
        }

        if (i == sizeof(ngx_http_tokenbiryani_ranges)
                 / sizeof(ngx_http_tokenbiryani_ranges[0]))
        {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error",
                       "range: expected 1h, 24h, 7d or 30d");
        }
    }

    ur->range = ngx_http_tokenbiryani_ranges[i].name;
    ur->w.job.u.usage.step = ngx_http_tokenbiryani_ranges[i].step;
    ur->w.job.u.usage.from = (ngx_time()
                              - ngx_http_tokenbiryani_ranges[i].seconds)
                             / ur->w.job.u.usage.step * ur->w.job.u.usage.step;

    if (ngx_http_arg(r, (u_char *) "by", 2, &value) == NGX_OK) {
        for (i = 1; i < 4; i++) {
            if (value.len == ngx_strlen(bys[i])
                && ngx_strncmp(value.data, bys[i], value.len) == 0)
            {
                ur->w.job.u.usage.by = (int) i;
                ur->by = bys[i];
                break;
            }
        }

        if (i == 4) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error",
                       "by: expected account, model or key");
        }
    }

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        return ngx_http_tokenbiryani_send_error(r,
                   NGX_HTTP_SERVICE_UNAVAILABLE, "api_error",
                   "the usage history is kept in the store, and this "
                   "gateway has none (store.backend: memory); set "
                   "store.backend: sqlite");
    }


    return ngx_http_tokenbiryani_admin_usage_read(r, &ur->w);
}


static ngx_int_t
ngx_http_tokenbiryani_usage_answer(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w)
{
    ngx_uint_t                           i, j, ngroups;
    cJSON                               *root, *groups, *g, *series, *pt;
    tb_usage_row_t                       total, *gt;
    ngx_http_tokenbiryani_job_usage_t   *us;
    ngx_http_tokenbiryani_usage_read_t  *ur;
    ngx_http_tokenbiryani_usage_point_t *p;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    ngx_http_tokenbiryani_store_state_t  st;
    char                                 buf[64];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    ur = (ngx_http_tokenbiryani_usage_read_t *) w;
    us = &w->job.u.usage;

    root = cJSON_CreateObject();
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cJSON_AddStringToObject(root, "range", ur->range);

    if (ur->by) {
        cJSON_AddStringToObject(root, "by", ur->by);

    } else {
        cJSON_AddNullToObject(root, "by");
    }

    cJSON_AddNumberToObject(root, "step_seconds", (double) us->step);
    tb_format_rfc3339(us->from * 1000, buf, sizeof(buf));
    cJSON_AddStringToObject(root, "from", buf);

    if (tmcf->builtin) {
        cJSON_AddStringToObject(root, "prices_as_of", tmcf->builtin->as_of);

    } else {
        cJSON_AddNullToObject(root, "prices_as_of");
    }

    /* what the history has: up to the last write, at most a second ago */
    ngx_http_tokenbiryani_store_snapshot(&tmcf->zone, &st);

    if (st.flushed_ms) {
        tb_format_rfc3339(st.flushed_ms, buf, sizeof(buf));
        cJSON_AddStringToObject(root, "written_through", buf);

    } else {
        cJSON_AddNullToObject(root, "written_through");
    }

    /* the points come ordered by bucket then group: groups in order seen */

    groups = cJSON_AddArrayToObject(root, "groups");
    if (groups == NULL) {
        goto failed;
    }

    gt = ngx_pcalloc(r->pool, (us->npoints + 1) * sizeof(tb_usage_row_t));
    if (gt == NULL) {
        goto failed;
    }

    ngx_memzero(&total, sizeof(tb_usage_row_t));
    ngroups = 0;

    for (i = 0; i < us->npoints; i++) {
        p = &us->points[i];

        for (j = 0; j < ngroups; j++) {
            g = cJSON_GetArrayItem(groups, (int) j);

            if (ngx_strcmp(cJSON_GetObjectItem(g, "name")->valuestring,
                           p->group) == 0)
            {
                break;
            }
        }

        if (j == ngroups) {
            g = cJSON_CreateObject();
            if (g == NULL || !cJSON_AddItemToArray(groups, g)) {
                cJSON_Delete(g);
                goto failed;
            }

            cJSON_AddStringToObject(g, "name", p->group);

            if (cJSON_AddArrayToObject(g, "series") == NULL) {
                goto failed;
            }

            ngroups++;
        }

        series = cJSON_GetObjectItem(g, "series");

        pt = cJSON_CreateObject();
        if (pt == NULL || !cJSON_AddItemToArray(series, pt)) {
            cJSON_Delete(pt);
            goto failed;
        }

        cJSON_AddNumberToObject(pt, "t", (double) p->t);

        if (ngx_http_tokenbiryani_usage_json(pt, &p->u) == NULL) {
            goto failed;
        }

        ngx_http_tokenbiryani_usage_add(&gt[j], &p->u);
        ngx_http_tokenbiryani_usage_add(&total, &p->u);
    }

    for (j = 0; j < ngroups; j++) {
        g = cJSON_GetArrayItem(groups, (int) j);

        if (ngx_http_tokenbiryani_usage_totals(g, &gt[j]) == NULL) {
            goto failed;
        }
    }

    if (ngx_http_tokenbiryani_usage_totals(root, &total) == NULL) {
        goto failed;
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    return ngx_http_tokenbiryani_cjson_fail(root);
}


static void
ngx_http_tokenbiryani_usage_add(tb_usage_row_t *to, const tb_usage_row_t *u)
{
    to->requests += u->requests;
    to->input += u->input;
    to->output += u->output;
    to->cache_read += u->cache_read;
    to->cache_write += u->cache_write;
    to->cost += u->cost;
    to->unpriced += u->unpriced;
    to->errors += u->errors;
    to->cache_hits += u->cache_hits;
}


/*
 * A bucket's or a total's counters; the cache-hit rate is the share of
 * the prompt tokens that were read from a cache.
 */

static cJSON *
ngx_http_tokenbiryani_usage_json(cJSON *obj, const tb_usage_row_t *u)
{
    int64_t  prompt;

    if (obj == NULL) {
        return NULL;
    }

    prompt = u->input + u->cache_read + u->cache_write;

    cJSON_AddNumberToObject(obj, "requests", (double) u->requests);
    cJSON_AddNumberToObject(obj, "input_tokens", (double) u->input);
    cJSON_AddNumberToObject(obj, "output_tokens", (double) u->output);
    cJSON_AddNumberToObject(obj, "cache_read_tokens", (double) u->cache_read);
    cJSON_AddNumberToObject(obj, "cache_write_tokens",
                            (double) u->cache_write);
    cJSON_AddNumberToObject(obj, "cost_usd", (double) u->cost / 1e9);
    cJSON_AddNumberToObject(obj, "unpriced_requests", (double) u->unpriced);
    cJSON_AddNumberToObject(obj, "errors", (double) u->errors);
    cJSON_AddNumberToObject(obj, "cache_hit_rate",
                            prompt ? (double) u->cache_read / (double) prompt
                                   : 0);

    return obj;
}


/* obj's "totals": what its rows add up to, u */

static cJSON *
ngx_http_tokenbiryani_usage_totals(cJSON *obj, const tb_usage_row_t *u)
{
    return ngx_http_tokenbiryani_usage_json(
               cJSON_AddObjectToObject(obj, "totals"), u);
}


/* GET /admin/sessions */

ngx_int_t
ngx_http_tokenbiryani_admin_sessions(ngx_http_request_t *r)
{
    double                                 spend;
    int64_t                                now, bm, turns, cost;
    ngx_int_t                              rc, limit;
    ngx_uint_t                             i, n, total, runaway;
    cJSON                                 *root, *arr, *item;
    const char                            *id;
    const tb_config_t                     *cf;
    ngx_http_tokenbiryani_session_view_t  *views, *v;
    ngx_http_tokenbiryani_zone_stats_t     zs;
    ngx_http_tokenbiryani_main_conf_t     *tmcf;
    char                                   buf[64], usd[32], wait[32];
    u_char                                 why[128], *p;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;
    now = ngx_http_tokenbiryani_now_ms();
    bm = tmcf->zone.spend_bucket_ms;

    if (r->method != NGX_HTTP_GET) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V /admin/sessions: only GET",
                   &r->method_name);
    }

    limit = cf->sessions_report_limit;

    rc = ngx_http_tokenbiryani_admin_limit(r, &limit, 1000);
    if (rc != NGX_OK) {
        return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    views = ngx_palloc(r->pool, (limit + 1)
                                * sizeof(ngx_http_tokenbiryani_session_view_t));
    if (views == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = limit ? ngx_http_tokenbiryani_sessions_top(&tmcf->zone, views,
                                                   (ngx_uint_t) limit, &total)
              : 0;

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    root = cJSON_CreateObject();
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cJSON_AddBoolToObject(root, "tracking", cf->sessions_track);
    cJSON_AddNumberToObject(root, "window_hours", cf->spend_window_hours);
    cJSON_AddNumberToObject(root, "runaway_turns",
                            (double) cf->sessions_runaway_turns);

    ngx_http_tokenbiryani_add_number_or_null(root, "runaway_spend_usd",
        cf->sessions_runaway_spend_usd >= 0,
        cf->sessions_runaway_spend_usd);

    cJSON_AddNumberToObject(root, "total", (double) zs.nsessions);
    cJSON_AddNumberToObject(root, "evicted", (double) zs.sessions_evicted);

    arr = cJSON_AddArrayToObject(root, "sessions");
    if (arr == NULL) {
        goto failed;
    }

    for (i = 0; i < n; i++) {
        v = &views[i];

        item = cJSON_CreateObject();
        if (item == NULL || !cJSON_AddItemToArray(arr, item)) {
            cJSON_Delete(item);
            goto failed;
        }

        p = ngx_sprintf((u_char *) buf, "%016uxL", v->session);
        *p = '\0';
        cJSON_AddStringToObject(item, "session", buf);
        cJSON_AddStringToObject(item, "key", (char *) v->key);

        id = (v->slot < 0 && v->account[0])
             ? (const char *) v->account    /* served last on another */
             : ngx_http_tokenbiryani_zone_slot_id(&tmcf->zone, v->slot);

        if (id) {
            cJSON_AddStringToObject(item, "account", id);
        } else {
            cJSON_AddNullToObject(item, "account");
        }

        cJSON_AddNumberToObject(item, "turns", (double) v->turns);
        cJSON_AddNumberToObject(item, "cost_usd", (double) v->cost / 1e9);
        cJSON_AddNumberToObject(item, "unpriced_turns", (double) v->unpriced);
        cJSON_AddNumberToObject(item, "input_tokens", (double) v->tokens[0]);
        cJSON_AddNumberToObject(item, "output_tokens", (double) v->tokens[1]);
        cJSON_AddNumberToObject(item, "cache_read_tokens",
                                (double) v->tokens[2]);
        cJSON_AddNumberToObject(item, "cache_write_tokens",
                                (double) v->tokens[3]);

        tb_format_rfc3339(v->first_ms, buf, sizeof(buf));
        cJSON_AddStringToObject(item, "first_seen", buf);
        tb_format_rfc3339(v->last_ms, buf, sizeof(buf));
        cJSON_AddStringToObject(item, "last_seen", buf);
        cJSON_AddNumberToObject(item, "last_seen_ago_seconds",
                                (double) (now - v->last_ms) / 1000);

        /* what its caps count: the window's, every instance's */
        cost = tb_ledger_spent(&v->ledger, now, bm, &turns) + v->others[0];
        turns += v->others[1];
        cJSON_AddNumberToObject(item, "window_turns", (double) turns);
        cJSON_AddNumberToObject(item, "window_cost_usd", (double) cost / 1e9);

        spend = (double) v->cost / 1e9;
        runaway = ((int64_t) v->turns >= cf->sessions_runaway_turns)
                  || (cf->sessions_runaway_spend_usd >= 0
                      && spend >= cf->sessions_runaway_spend_usd);

        cJSON_AddBoolToObject(item, "runaway", runaway);

        if (runaway) {
            (void) tb_usd_format(v->cost, usd, sizeof(usd));
            (void) tb_wait_format(v->last_ms - v->first_ms, wait,
                                  sizeof(wait));
            p = ngx_snprintf(why, sizeof(why) - 1, "%uL turns, $%s in %s",
                             v->turns, usd, wait);
            *p = '\0';
            cJSON_AddStringToObject(item, "why", (char *) why);

        } else {
            cJSON_AddNullToObject(item, "why");
        }
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    return ngx_http_tokenbiryani_cjson_fail(root);
}
