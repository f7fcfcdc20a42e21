/*
 * tokenbiryani: GET /admin/pacing - should this be spent now.  A reading
 * (src/core/tb_pacing.c) of every budget and cap the pool has:
 *
 *   - the pool's weekly budget (pacing.weekly_budget_usd), its spend since
 *     the week's start (pacing.week_starts, pacing.time_zone) read from
 *     the usage history in the store's thread, as /admin/usage reads it;
 *   - every key's and every account's spend cap over the trailing spend
 *     window, from the zone's ledgers, by the rate of its last hour.
 *
 * Each with a verdict in words; the tightest named.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_pacer.h"
#include "tb_ledger.h"
#include "tb_pacing.h"
#include "tb_parse.h"


typedef struct {
    ngx_http_tokenbiryani_admin_write_t   w;
    int64_t                               now;
    int64_t                               week;      /* its start, ms */
    ngx_uint_t                            read;      /* the week's spend */
} ngx_http_tokenbiryani_pacing_read_t;


static ngx_int_t ngx_http_tokenbiryani_pacing_answer(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w);
static ngx_int_t ngx_http_tokenbiryani_pacing_caps(ngx_http_request_t *r,
    cJSON *arr, int64_t now, const tb_pace_t **tightest, cJSON **which);
static ngx_int_t ngx_http_tokenbiryani_pacing_subscription(
    ngx_http_request_t *r, cJSON *arr, int64_t now, const tb_pace_t **tightest,
    cJSON **which);
static cJSON *ngx_http_tokenbiryani_reading_json(cJSON *arr,
    const char *scope, const char *name, const tb_pace_t *p,
    const char *what, double window_hours);


static const char  *ngx_http_tokenbiryani_days[7] = {
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
    "sunday"
};


static const ngx_http_tokenbiryani_admin_resource_t
    ngx_http_tokenbiryani_pacing_resource =
{
    NULL, NULL, "the store cannot be read", NULL,
    ngx_http_tokenbiryani_pacing_answer,
    ngx_http_tokenbiryani_admin_usage_done
};


ngx_int_t
ngx_http_tokenbiryani_admin_pacing(ngx_http_request_t *r)
{
    const tb_config_t                    *cf;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_http_tokenbiryani_pacing_read_t  *pr;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V expects GET, not %V",
                   &r->uri, &r->method_name);
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;

    pr = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_pacing_read_t));
    if (pr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    pr->w.request = r;
    pr->w.res = &ngx_http_tokenbiryani_pacing_resource;
    pr->now = ngx_http_tokenbiryani_now_ms();
    pr->week = tb_pace_week_start(pr->now, cf->pacing_week_day,
                                  cf->pacing_week_minute, cf->pacing_tz_min);

    if (cf->pacing_weekly_budget_usd < 0
        || !ngx_http_tokenbiryani_store_on(tmcf))
    {
        /* nothing to read: answered now */
        return ngx_http_tokenbiryani_pacing_answer(r, &pr->w);
    }

    /* the week's spend, by the hour, from the usage history */

    pr->read = 1;
    pr->w.job.u.usage.by = TB_STORE_BY_NONE;
    pr->w.job.u.usage.step = 3600;
    pr->w.job.u.usage.from = pr->week / 1000 / 3600 * 3600;

    return ngx_http_tokenbiryani_admin_usage_read(r, &pr->w);
}


static ngx_int_t
ngx_http_tokenbiryani_pacing_answer(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w)
{
    int64_t                               used, wk, at;
    ngx_uint_t                            i;
    cJSON                                *root, *arr, *week, *which, *t;
    tb_pace_t                             pool;
    const tb_pace_t                      *tightest;
    const tb_config_t                    *cf;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_http_tokenbiryani_pacing_read_t  *pr;
    char                                  buf[64], budget[32];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    cf = tmcf->tbcf;
    pr = (ngx_http_tokenbiryani_pacing_read_t *) w;

    root = cJSON_CreateObject();
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    tb_format_rfc3339(pr->now, buf, sizeof(buf));

    if (cJSON_AddStringToObject(root, "at", buf) == NULL
        || cJSON_AddBoolToObject(root, "enabled", cf->pacing_enabled) == NULL
        || cJSON_AddStringToObject(root, "mode", cf->pacing_mode) == NULL
        || cJSON_AddStringToObject(root, "curve", cf->pacing_curve) == NULL
        || (week = cJSON_AddObjectToObject(root, "week")) == NULL)
    {
        goto failed;
    }

    /* the budget week: when it starts, as configured and as a time */

    ngx_snprintf((u_char *) buf, sizeof(buf), "%s %02d:%02d%Z",
                 ngx_http_tokenbiryani_days[cf->pacing_week_day % 7],
                 cf->pacing_week_minute / 60, cf->pacing_week_minute % 60);

    if (cJSON_AddStringToObject(week, "starts", buf) == NULL) {
        goto failed;
    }

    ngx_snprintf((u_char *) buf, sizeof(buf), "%c%02d:%02d%Z",
                 cf->pacing_tz_min < 0 ? '-' : '+',
                 ngx_abs(cf->pacing_tz_min) / 60,
                 ngx_abs(cf->pacing_tz_min) % 60);

    if (cJSON_AddStringToObject(week, "time_zone", buf) == NULL) {
        goto failed;
    }

    tb_format_rfc3339(pr->week, buf, sizeof(buf));

    if (cJSON_AddStringToObject(week, "from", buf) == NULL) {
        goto failed;
    }

    tb_format_rfc3339(pr->week + TB_PACE_WEEK_MS, buf, sizeof(buf));

    if (cJSON_AddStringToObject(week, "to", buf) == NULL
        || (arr = cJSON_AddArrayToObject(root, "readings")) == NULL)
    {
        goto failed;
    }

    tightest = NULL;
    which = NULL;

    /* enforcing: what the requests pace by, as the pacer last read it */

    if (!ngx_http_tokenbiryani_pacer_on(tmcf)) {
        t = cJSON_AddNullToObject(root, "enforced");

    } else if (ngx_http_tokenbiryani_pace_get(&tmcf->zone, &wk, &used, &at)
               != NGX_OK)
    {
        t = cJSON_AddStringToObject(root, "enforced", "not read yet");

    } else {
        t = cJSON_AddObjectToObject(root, "enforced");
        tb_format_rfc3339(at, buf, sizeof(buf));

        if (t == NULL
            || cJSON_AddNumberToObject(t, "week_used_usd", (double) used / 1e9)
               == NULL
            || cJSON_AddStringToObject(t, "read_at", buf) == NULL)
        {
            t = NULL;
        }
    }

    if (t == NULL) {
        goto failed;
    }

    /* the pool's weekly budget: read from the history, or said why not */

    if (cf->pacing_weekly_budget_usd < 0) {
        t = cJSON_AddStringToObject(week, "budget", "none: set "
                                    "pacing.weekly_budget_usd to pace the "
                                    "pool's spend over the week");

    } else if (!pr->read) {
        t = cJSON_AddStringToObject(week, "budget", "not read: the week's "
                                    "spend is in the usage history, which "
                                    "store.backend: memory does not keep");

    } else {
        used = 0;

        for (i = 0; i < w->job.u.usage.npoints; i++) {
            used += w->job.u.usage.points[i].u.cost;
        }

        tb_pace_fixed(&pool, pr->week, pr->week + TB_PACE_WEEK_MS, pr->now,
                      used, tb_usd_to_nd(cf->pacing_weekly_budget_usd),
                      ngx_strcmp(cf->pacing_curve, "business_hours") == 0,
                      cf->pacing_tz_min, cf->pacing_ahead_threshold,
                      cf->pacing_behind_threshold);

        (void) tb_usd_format(pool.limit, budget, sizeof(budget));
        ngx_snprintf((u_char *) buf, sizeof(buf),
                     "the pool's $%s weekly budget%Z", budget);

        t = ngx_http_tokenbiryani_reading_json(arr, "pool", "weekly budget",
                                               &pool, buf, 7 * 24);
        tightest = &pool;
        which = t;
    }

    if (t == NULL
        || ngx_http_tokenbiryani_pacing_caps(r, arr, pr->now, &tightest,
                                             &which)
           != NGX_OK
        || ngx_http_tokenbiryani_pacing_subscription(r, arr, pr->now,
                                                     &tightest, &which)
           != NGX_OK)
    {
        goto failed;
    }

    /* the tightest: the one furthest ahead of its pace */

    if (which == NULL) {
        t = cJSON_AddNullToObject(root, "tightest");

    } else {
        t = cJSON_AddObjectToObject(root, "tightest");

        if (t == NULL
            || cJSON_AddItemReferenceToObject(t, "scope",
                   cJSON_GetObjectItem(which, "scope")) == 0
            || cJSON_AddItemReferenceToObject(t, "name",
                   cJSON_GetObjectItem(which, "name")) == 0
            || cJSON_AddItemReferenceToObject(t, "says",
                   cJSON_GetObjectItem(which, "says")) == 0)
        {
            t = NULL;
        }
    }

    if (t == NULL) {
        goto failed;
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    return ngx_http_tokenbiryani_cjson_fail(root);
}


/* every key's and account's spend cap, as its rolling window reads */

static ngx_int_t
ngx_http_tokenbiryani_pacing_caps(ngx_http_request_t *r, cJSON *arr,
    int64_t now, const tb_pace_t **tightest, cJSON **which)
{
    int64_t                              bm, window, cap, spent, frees,
                                         rate;
    tb_pace_t                           *p;
    cJSON                               *item;
    const char                          *scope, *name;
    ngx_uint_t                           i, n, nfile;
    tb_key_conf_t                       *kc;
    tb_account_state_t                   s;
    ngx_http_tokenbiryani_rkent_t       *ents;
    ngx_http_tokenbiryani_account_t     *a;
    ngx_http_tokenbiryani_key_spend_t    ks;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    char                                 usd[32], what[TB_ID_MAX + 64];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    bm = tmcf->zone.spend_bucket_ms;
    window = bm * TB_LEDGER_BUCKETS;

    ents = ngx_http_tokenbiryani_rkeys(tmcf, &n);
    if (ents == NULL) {
        return NGX_ERROR;
    }

    nfile = tmcf->tbcf->nkeys;

    for (i = 0; i < nfile + n + tmcf->accounts.nelts; i++) {

        if (i < nfile + n) {
            kc = (i < nfile) ? &tmcf->tbcf->keys[i] : &ents[i - nfile].ks.conf;

            if (kc->spend_cap_usd < 0) {
                continue;
            }

            /* what its cap counts: settled, in flight, and the peers' */
            ngx_http_tokenbiryani_key_spend(&tmcf->zone, kc->name_hash, now,
                                            &ks);

            cap = tb_usd_to_nd(kc->spend_cap_usd);
            spent = ks.window_cost + ks.reserved + ks.others;
            rate = ks.rate;

            /* room again when its own spend here leaves room beside the
             * peers' (0: what they hold holds it) */
            frees = (spent >= cap && cap > ks.others)
                    ? ngx_http_tokenbiryani_key_frees(&tmcf->zone,
                                                      kc->name_hash, now,
                                                      cap - ks.others)
                    : 0;
            scope = "key";
            name = kc->name;

        } else {
            a = (ngx_http_tokenbiryani_account_t *) tmcf->accounts.elts
                + (i - nfile - n);

            if (a->retired || a->conf == NULL
                || a->conf->spend_cap_usd < 0)
            {
                /* removed since, or no cap */
                continue;
            }

            ngx_http_tokenbiryani_zone_snapshot(&tmcf->zone, a->slot, &s);

            cap = tb_usd_to_nd(a->conf->spend_cap_usd);
            spent = tb_ledger_spent(&s.spend, now, bm, NULL)
                    + s.spend.reserved;
            rate = tb_ledger_rate(&s.spend, now, bm);
            frees = (spent >= cap)
                    ? tb_ledger_frees_at(&s.spend, now, bm, cap, 0) : 0;
            scope = "account";
            name = s.id;
        }

        p = ngx_palloc(r->pool, sizeof(tb_pace_t));
        if (p == NULL) {
            return NGX_ERROR;
        }

        tb_pace_rolling(p, window, now, spent, rate, cap, frees);

        (void) tb_usd_format(cap, usd, sizeof(usd));
        ngx_snprintf((u_char *) what, sizeof(what), "%s %s's $%s spend cap%Z",
                     scope, name, usd);

        item = ngx_http_tokenbiryani_reading_json(arr, scope, name, p, what,
                                                  tmcf->tbcf->spend_window_hours);
        if (item == NULL) {
            return NGX_ERROR;
        }

        if (*tightest == NULL || p->pace > (*tightest)->pace) {
            *tightest = p;
            *which = item;
        }
    }

    return NGX_OK;
}


/*
 * The operator's subscription's 5-hour and 7-day windows, as its answers
 * last said them: each a fixed window, from its reset less its length to
 * its reset, its utilization what is used (no dollars: a subscription's
 * windows are not priced)
 */

static ngx_int_t
ngx_http_tokenbiryani_pacing_subscription(ngx_http_request_t *r, cJSON *arr,
    int64_t now, const tb_pace_t **tightest, cJSON **which)
{
    int64_t                              len;
    unsigned                             w;
    tb_pace_t                           *p;
    cJSON                               *item;
    ngx_uint_t                           i;
    tb_unified_t                         u;
    ngx_http_tokenbiryani_account_t     *a;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    char                                 name[TB_ID_MAX + 8],
                                         what[TB_ID_MAX + 64];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->nyaml; i++) {
        if (a[i].conf->type != TB_ACCOUNT_OAUTH) {
            continue;
        }

        ngx_http_tokenbiryani_zone_unified(&tmcf->zone, a[i].slot, &u);

        for (w = TB_UNI_5H; w <= TB_UNI_7D; w++) {
            len = (w == TB_UNI_5H) ? 5 * 3600000LL : 7 * 86400000LL;

            if (u.w[w].utilization < 0 || u.w[w].reset_ms <= now
                || u.w[w].reset_ms - len > now + TB_UNI_JITTER_MS)
            {
                /* not said, reset since, or not a window of that length */
                continue;
            }

            /* (a reset said in whole seconds can end a moment later) */
            len = ngx_max(len, u.w[w].reset_ms - now);

            p = ngx_palloc(r->pool, sizeof(tb_pace_t));
            if (p == NULL) {
                return NGX_ERROR;
            }

            tb_pace_fixed(p, u.w[w].reset_ms - len, u.w[w].reset_ms, now,
                          (int64_t) (u.w[w].utilization * 1e6), 1000000, 0,
                          0, tmcf->tbcf->pacing_ahead_threshold,
                          tmcf->tbcf->pacing_behind_threshold);

            ngx_snprintf((u_char *) name, sizeof(name), "%V %s%Z",
                         &a[i].id, tb_unified_window_name(w));
            ngx_snprintf((u_char *) what, sizeof(what), "the subscription's "
                         "%s window%Z", w == TB_UNI_5H ? "5-hour" : "7-day");

            item = ngx_http_tokenbiryani_reading_json(arr, "subscription",
                                                      name, p, what,
                                                      w == TB_UNI_5H ? 5
                                                                     : 168);
            if (item == NULL) {
                return NGX_ERROR;
            }

            if (*tightest == NULL || p->pace > (*tightest)->pace) {
                *tightest = p;
                *which = item;
            }
        }
    }

    return NGX_OK;
}


/* one reading, added to arr */

static cJSON *
ngx_http_tokenbiryani_reading_json(cJSON *arr, const char *scope,
    const char *name, const tb_pace_t *p, const char *what,
    double window_hours)
{
    cJSON       *o;
    char         at[40], says[512];
    ngx_uint_t   money;

    o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }

    cJSON_AddItemToArray(arr, o);

    (void) tb_pace_say(p, what, says, sizeof(says));

    /* a subscription's windows are not in dollars */
    money = (scope[0] != 's');

    if (cJSON_AddStringToObject(o, "scope", scope) == NULL
        || cJSON_AddStringToObject(o, "name", name) == NULL
        || cJSON_AddStringToObject(o, "window", p->window_ms ? "rolling"
                                                             : "fixed") == NULL
        || cJSON_AddNumberToObject(o, "window_hours", window_hours) == NULL
        || ngx_http_tokenbiryani_add_number_or_null(o, "used_usd", money,
                                                    (double) p->used / 1e9)
           == NULL
        || ngx_http_tokenbiryani_add_number_or_null(o, "limit_usd", money,
                                                    (double) p->limit / 1e9)
           == NULL
        || cJSON_AddNumberToObject(o, "utilization", p->utilization) == NULL
        || ngx_http_tokenbiryani_add_number_or_null(o, "rate_usd_per_hour",
                                                    money,
                                                    (double) p->rate / 1e9)
           == NULL
        || cJSON_AddNumberToObject(o, "projected", p->projected) == NULL
        || cJSON_AddNumberToObject(o, "pace", p->pace) == NULL
        || cJSON_AddStringToObject(o, "verdict",
                                   tb_pace_verdict_name(p->verdict)) == NULL
        || cJSON_AddStringToObject(o, "says", says) == NULL)
    {
        return NULL;
    }

    if (!p->window_ms
        && (cJSON_AddNumberToObject(o, "elapsed", p->elapsed) == NULL
            || cJSON_AddNumberToObject(o, "target", p->target) == NULL
            || ngx_http_tokenbiryani_add_number_or_null(o, "unused_usd",
                   money && p->projected < 1,
                   (1 - p->projected) * (double) p->limit / 1e9) == NULL))
    {
        return NULL;
    }

    tb_format_rfc3339(p->runs_out_ms, at, sizeof(at));

    if ((p->runs_out_ms ? cJSON_AddStringToObject(o, "runs_out_at", at)
                        : cJSON_AddNullToObject(o, "runs_out_at")) == NULL)
    {
        return NULL;
    }

    tb_format_rfc3339(p->frees_ms, at, sizeof(at));

    if (p->window_ms
        && (p->frees_ms ? cJSON_AddStringToObject(o, "frees_at", at)
                        : cJSON_AddNullToObject(o, "frees_at")) == NULL)
    {
        return NULL;
    }

    return o;
}
