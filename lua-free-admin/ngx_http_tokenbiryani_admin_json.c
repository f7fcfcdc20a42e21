/*
 * tokenbiryani: the admin API's documents - an account with its state,
 * limits and configuration, a request's inspector record, the queue, the
 * keys, the store, a strategy.  They read the zone and the worker's copy
 * of state and build JSON; they send nothing.
 *
 * Admin documents never carry a credential or a prompt: accounts are shown
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


static ngx_int_t ngx_http_tokenbiryani_domain_json(ngx_http_request_t *r,
    cJSON *acct, ngx_http_tokenbiryani_account_t *a, uint32_t dom,
    ngx_uint_t file);
static ngx_int_t ngx_http_tokenbiryani_unified_json(cJSON *acct,
    ngx_http_tokenbiryani_account_t *a, const tb_unified_t *u, int64_t now);
static cJSON *ngx_http_tokenbiryani_window_json(const tb_window_t *win,
    int64_t now);
static void ngx_http_tokenbiryani_add_windows(cJSON *obj, const char *name,
    const int64_t *v);
static const char *ngx_http_tokenbiryani_slot_id(ngx_http_request_t *r,
    int64_t slot);
static const char *ngx_http_tokenbiryani_kind_name(ngx_uint_t kind);
static ngx_int_t ngx_http_tokenbiryani_share_json(cJSON *obj,
    const ngx_http_tokenbiryani_share_state_t *ss, int64_t now);


/*
 * "capacity_domain": the account whose windows it shares, where the
 * domain came from, and its keys; null for an account of its own.
 */

static ngx_int_t
ngx_http_tokenbiryani_domain_json(ngx_http_request_t *r, cJSON *acct,
    ngx_http_tokenbiryani_account_t *a, uint32_t dom, ngx_uint_t file)
{
    uint32_t                            d;
    ngx_uint_t                          i, n;
    const char                         *id;
    cJSON                              *obj, *members;
    ngx_http_tokenbiryani_account_t    *all;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (dom == 0) {
        cJSON_AddNullToObject(acct, "capacity_domain");
        return NGX_OK;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    obj = cJSON_AddObjectToObject(acct, "capacity_domain");
    if (obj == NULL) {
        return NGX_ERROR;
    }

    id = ngx_http_tokenbiryani_slot_id(r, dom - 1);
    cJSON_AddStringToObject(obj, "windows_of", id ? id : "?");
    cJSON_AddStringToObject(obj, "source", file ? "file" : "learned");

    members = cJSON_AddArrayToObject(obj, "accounts");
    if (members == NULL) {
        return NGX_ERROR;
    }

    all = tmcf->accounts.elts;
    n = tmcf->accounts.nelts;

    for (i = 0; i < n; i++) {
        if (all[i].retired) {
            continue;
        }

        (void) ngx_http_tokenbiryani_zone_capacity(&tmcf->zone, all[i].slot,
                                                   &d);

        if (d == dom) {
            cJSON_AddItemToArray(members,
                cJSON_CreateString((char *) all[i].conf->id));
        }
    }

    return NGX_OK;
}


cJSON *
ngx_http_tokenbiryani_account_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_account_t *a, int64_t now, tb_state_e *state)
{
    int64_t                             until, prompt;
    ngx_uint_t                          i;
    const char                         *reason;
    uint32_t                            dom;
    cJSON                              *acct, *limits, *w, *m;
    tb_breaker_state_e                  bs;
    tb_account_state_t                  s, cs;
    const tb_account_state_t           *ws;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_http_tokenbiryani_zone_snapshot(&tmcf->zone, a->slot, &s);

    /* the windows it counts against: its capacity domain's */

    (void) ngx_http_tokenbiryani_zone_capacity(&tmcf->zone, a->slot, &dom);
    ws = &s;

    if (dom && dom - 1 != a->slot) {
        ngx_http_tokenbiryani_zone_snapshot(&tmcf->zone, dom - 1, &cs);
        ws = &cs;
    }

    *state = tb_account_state(&s, a->conf->enabled && a->supported,
                              &tmcf->zone.breaker, now, &until, &reason);

    if (!a->supported) {
        reason = a->conf->unusable ? a->conf->unusable
                                   : "account type not supported by this "
                                     "build";
    }

    acct = cJSON_CreateObject();
    if (acct == NULL) {
        return NULL;
    }

    ngx_http_tokenbiryani_add_str(acct, "id", a->id.data, a->id.len);
    cJSON_AddStringToObject(acct, "name", a->conf->name);
    cJSON_AddStringToObject(acct, "type", tb_account_type_name(a->conf->type));
    ngx_http_tokenbiryani_add_str(acct, "base_url", a->base_url.data,
                                  a->base_url.len);
    cJSON_AddBoolToObject(acct, "enabled", a->conf->enabled);
    cJSON_AddStringToObject(acct, "state", tb_state_name(*state));

    if (*state == TB_STATE_READY) {
        cJSON_AddNullToObject(acct, "reason");

    } else {
        cJSON_AddStringToObject(acct, "reason", reason);
    }

    ngx_http_tokenbiryani_add_number_or_null(acct, "until_in", until > now,
                                             (double) (until - now) / 1000);

    if (*state == TB_STATE_DISABLED) {
        cJSON_AddStringToObject(acct, "disabled_reason", reason);

    } else {
        cJSON_AddNullToObject(acct, "disabled_reason");
    }

    cJSON_AddNumberToObject(acct, "cooling_for",
                            *state == TB_STATE_COOLING && until > now
                            ? (double) (until - now) / 1000 : 0);

    /* since when it fails, and when it last answered well: "3 of 4
     * failing to connect; last success 2 min ago" */

    ngx_http_tokenbiryani_add_number_or_null(acct, "failing_for",
        s.failing_since_ms && s.failing_since_ms <= now,
        (double) (now - s.failing_since_ms) / 1000);

    ngx_http_tokenbiryani_add_number_or_null(acct, "last_success_ago",
        s.last_success_ms && s.last_success_ms <= now,
        (double) (now - s.last_success_ms) / 1000);

    w = cJSON_AddObjectToObject(acct, "breaker");
    if (w == NULL) {
        goto failed;
    }

    bs = tb_breaker_state(&s.breaker, &tmcf->zone.breaker, now);
    cJSON_AddStringToObject(w, "state", tb_breaker_state_name(bs));
    cJSON_AddNumberToObject(w, "failures", (double) s.breaker.failures);
    cJSON_AddBoolToObject(w, "probe_in_flight", s.breaker.probe != 0);
    cJSON_AddNumberToObject(w, "opened_total", (double) s.breaker.opened_total);

    ngx_http_tokenbiryani_add_number_or_null(w, "half_open_in",
        bs == TB_BREAKER_OPEN,
        (double) (tb_breaker_half_open_at(&s.breaker, &tmcf->zone.breaker,
                                          now)
                  - now) / 1000);

    m = cJSON_AddArrayToObject(acct, "rejected_models");
    if (m == NULL) {
        goto failed;
    }

    for (i = 0; i < s.nrejected && i < TB_REJECTED_MAX; i++) {
        cJSON_AddItemToArray(m, cJSON_CreateString(s.rejected[i].name));
    }

    m = cJSON_AddObjectToObject(acct, "outcomes");
    if (m == NULL) {
        goto failed;
    }

    for (i = 0; i < TB_NKINDS; i++) {
        if (s.kinds[i]) {
            cJSON_AddNumberToObject(m, tb_rules[i].name, (double) s.kinds[i]);
        }
    }

    cJSON_AddNumberToObject(acct, "inflight", (double) s.inflight);

    w = cJSON_AddObjectToObject(acct, "concurrency");
    if (w == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(w, "max", (double) a->conf->max_concurrency);

    ngx_http_tokenbiryani_add_number_or_null(w, "learned",
        s.ceiling && (int64_t) s.ceiling < a->conf->max_concurrency,
        (double) s.ceiling);

    if (s.org[0] || s.mirror.org[0]) {
        cJSON_AddStringToObject(acct, "organization_id",
                                s.org[0] ? s.org : s.mirror.org);

    } else {
        cJSON_AddNullToObject(acct, "organization_id");
    }

    if (ngx_http_tokenbiryani_domain_json(r, acct, a, dom, s.domain_file)
        != NGX_OK)
    {
        goto failed;
    }

    limits = cJSON_AddObjectToObject(acct, "limits");
    if (limits == NULL) {
        goto failed;
    }

    /*
     * Bedrock and Vertex send no rate-limit headers: their windows read
     * as unknown for ever, which a meter must not show as full.
     */
    cJSON_AddBoolToObject(limits, "observable", a->conf->observable_limits);

    if (!a->conf->observable_limits) {
        cJSON_AddStringToObject(limits, "unobservable", "limits unobservable: "
                                "it sends no rate-limit headers; it is "
                                "admitted by its concurrency and what its "
                                "429s teach");
    }

    if (a->conf->type == TB_ACCOUNT_OAUTH
        && ngx_http_tokenbiryani_unified_json(acct, a, &s.unified, now)
           != NGX_OK)
    {
        goto failed;
    }

    w = ngx_http_tokenbiryani_window_json(&ws->mirror.w[TB_WIN_REQUESTS], now);
    cJSON_AddItemToObject(limits, "requests", w);
    w = ngx_http_tokenbiryani_window_json(&ws->mirror.w[TB_WIN_INPUT], now);
    cJSON_AddItemToObject(limits, "input_tokens", w);
    w = ngx_http_tokenbiryani_window_json(&ws->mirror.w[TB_WIN_OUTPUT], now);
    cJSON_AddItemToObject(limits, "output_tokens", w);

    ngx_http_tokenbiryani_add_number_or_null(limits, "retry_after_in",
        ws->mirror.retry_after_ms > now,
        (double) (ws->mirror.retry_after_ms - now) / 1000);

    ngx_http_tokenbiryani_add_number_or_null(limits, "observed_ago",
        ws->mirror.observed_ms != 0,
        (double) (now - ws->mirror.observed_ms) / 1000);

    cJSON_AddNumberToObject(acct, "headroom",
                            tb_headroom(a->conf, ws, now));
    ngx_http_tokenbiryani_add_windows(acct, "reserved", ws->reserved);
    ngx_http_tokenbiryani_add_windows(acct, "pending", ws->pending);
    cJSON_AddNumberToObject(acct, "leases", (double) ws->leases);

    w = cJSON_AddObjectToObject(acct, "peak");
    if (w == NULL) {
        goto failed;
    }

    ngx_http_tokenbiryani_add_windows(w, "reserved", ws->peak_reserved);
    ngx_http_tokenbiryani_add_windows(w, "available", ws->peak_available);

    cJSON_AddNumberToObject(acct, "error_rate", tb_account_error_rate(&s));

    w = cJSON_AddObjectToObject(acct, "affinity");
    if (w == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(w, "honored", (double) s.affinity_honored);
    cJSON_AddNumberToObject(w, "broken", (double) s.affinity_broken);
    cJSON_AddNumberToObject(w, "forced_breaks", (double) s.affinity_forced);
    cJSON_AddNumberToObject(w, "sessions_placed", (double) s.sessions_placed);

    /*
     * What its answers ran up since the zone began: tokens by kind, what
     * they cost, the prompt's share read from its cache; and the spend
     * window its cap counts
     */

    w = cJSON_AddObjectToObject(acct, "usage");
    if (w == NULL) {
        goto failed;
    }

    prompt = s.tokens[0] + s.tokens[2] + s.tokens[3];

    cJSON_AddNumberToObject(w, "input_tokens", (double) s.tokens[0]);
    cJSON_AddNumberToObject(w, "output_tokens", (double) s.tokens[1]);
    cJSON_AddNumberToObject(w, "cache_read_tokens", (double) s.tokens[2]);
    cJSON_AddNumberToObject(w, "cache_write_tokens", (double) s.tokens[3]);
    cJSON_AddNumberToObject(w, "cost_usd", (double) s.cost_total / 1e9);
    cJSON_AddNumberToObject(w, "unpriced", (double) s.unpriced);

    if (prompt > 0) {
        cJSON_AddNumberToObject(w, "cache_hit_rate",
                                (double) s.tokens[2] / (double) prompt);
    } else {
        cJSON_AddNullToObject(w, "cache_hit_rate");
    }

    /* the one spend figure everything shows: the cap's window (settled
     * and reserved in flight), with the window named */

    cJSON_AddNumberToObject(w, "window_usd",
        (double) (tb_ledger_spent(&s.spend, now, tmcf->zone.spend_bucket_ms,
                                  NULL) + s.spend.reserved) / 1e9);
    cJSON_AddNumberToObject(w, "in_flight_usd",
                            (double) s.spend.reserved / 1e9);
    cJSON_AddNumberToObject(w, "window_hours",
                            tmcf->tbcf->spend_window_hours);

    cJSON_AddNumberToObject(acct, "requests_total",
                            (double) s.requests_total);
    cJSON_AddNumberToObject(acct, "failures_total",
                            (double) s.failures_total);

    ngx_http_tokenbiryani_add_number_or_null(acct, "last_status",
                                             s.last_status != 0,
                                             (double) s.last_status);

    return acct;

failed:

    cJSON_Delete(acct);

    return NULL;
}


/*
 * The operator's subscription: where its token comes from and until when,
 * and its windows as its answers said them (never the token)
 */

static ngx_int_t
ngx_http_tokenbiryani_unified_json(cJSON *acct,
    ngx_http_tokenbiryani_account_t *a, const tb_unified_t *u, int64_t now)
{
    unsigned   i;
    cJSON     *sub, *wins, *w;

    sub = cJSON_AddObjectToObject(acct, "subscription");
    wins = sub ? cJSON_AddObjectToObject(sub, "windows") : NULL;

    if (wins == NULL) {
        return NGX_ERROR;
    }

    cJSON_AddStringToObject(sub, "token_source", a->conf->token_source);
    ngx_http_tokenbiryani_add_number_or_null(sub, "token_expires_in",
        a->token_until != INT64_MAX && a->token_until != 0,
        (double) (a->token_until - now) / 1000);
    cJSON_AddBoolToObject(sub, "token_waiting",
                          a->gauth && a->token_until <= now);

    ngx_http_tokenbiryani_add_string_or_null(sub, "status",
        tb_unified_status_name(u->all.status));
    ngx_http_tokenbiryani_add_string_or_null(sub, "representative_claim",
                                             u->claim);
    ngx_http_tokenbiryani_add_number_or_null(sub, "resets_in",
        u->all.reset_ms > now, (double) (u->all.reset_ms - now) / 1000);
    ngx_http_tokenbiryani_add_number_or_null(sub, "headroom",
        tb_unified_headroom(u, now) >= 0, tb_unified_headroom(u, now));
    ngx_http_tokenbiryani_add_number_or_null(sub, "blocked_for",
        tb_unified_blocked_until(u, now) > now,
        (double) (tb_unified_blocked_until(u, now) - now) / 1000);
    ngx_http_tokenbiryani_add_string_or_null(sub, "overage_status",
        tb_unified_status_name(u->overage));
    ngx_http_tokenbiryani_add_string_or_null(sub, "overage_disabled_reason",
                                             u->reason);
    ngx_http_tokenbiryani_add_number_or_null(sub, "observed_ago",
        u->observed_ms != 0, (double) (now - u->observed_ms) / 1000);

    for (i = 0; i < TB_UNI_NWINDOWS; i++) {
        if (i > TB_UNI_7D && u->w[i].status == TB_UNI_UNKNOWN
            && u->w[i].utilization < 0)
        {
            /* the per-claim ones, when they were said */
            continue;
        }

        w = cJSON_AddObjectToObject(wins, tb_unified_window_name(i));
        if (w == NULL) {
            return NGX_ERROR;
        }

        ngx_http_tokenbiryani_add_string_or_null(w, "status",
            tb_unified_status_name(u->w[i].status));
        ngx_http_tokenbiryani_add_number_or_null(w, "utilization",
            u->w[i].utilization >= 0, u->w[i].utilization);
        ngx_http_tokenbiryani_add_number_or_null(w, "resets_in",
            u->w[i].reset_ms > now, (double) (u->w[i].reset_ms - now) / 1000);
    }

    return NGX_OK;
}


static cJSON *
ngx_http_tokenbiryani_window_json(const tb_window_t *win, int64_t now)
{
    cJSON  *w;
    char    buf[32];

    w = cJSON_CreateObject();
    if (w == NULL) {
        return NULL;
    }

    ngx_http_tokenbiryani_add_number_or_null(w, "limit", win->limit >= 0,
                                             (double) win->limit);

    ngx_http_tokenbiryani_add_number_or_null(w, "remaining",
                                             win->remaining >= 0,
                                             (double) win->remaining);

    if (win->reset_ms) {
        cJSON_AddNumberToObject(w, "reset_in",
                                win->reset_ms > now
                                ? (double) (win->reset_ms - now) / 1000 : 0);
        tb_format_rfc3339(win->reset_ms, buf, sizeof(buf));
        cJSON_AddStringToObject(w, "reset_at", buf);

    } else {
        cJSON_AddNullToObject(w, "reset_in");
        cJSON_AddNullToObject(w, "reset_at");
    }

    /* how it comes back, as configured or learned from its headers */

    cJSON_AddStringToObject(w, "replenishment",
                            win->refill == TB_REFILL_BUCKET ? "token_bucket"
                            : win->refill == TB_REFILL_FIXED ? "fixed_window"
                            : "unknown");

    return w;
}


static void
ngx_http_tokenbiryani_add_windows(cJSON *obj, const char *name,
    const int64_t *v)
{
    cJSON  *w;

    w = cJSON_AddObjectToObject(obj, name);
    if (w == NULL) {
        return;
    }

    cJSON_AddNumberToObject(w, "requests", (double) v[TB_WIN_REQUESTS]);
    cJSON_AddNumberToObject(w, "input_tokens", (double) v[TB_WIN_INPUT]);
    cJSON_AddNumberToObject(w, "output_tokens", (double) v[TB_WIN_OUTPUT]);
}


static const char *
ngx_http_tokenbiryani_slot_id(ngx_http_request_t *r, int64_t slot)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    return ngx_http_tokenbiryani_zone_slot_id(&tmcf->zone, slot);
}


static const char *
ngx_http_tokenbiryani_kind_name(ngx_uint_t kind)
{
    return kind < TB_NKINDS ? tb_rules[kind].name : "cancelled";
}


cJSON *
ngx_http_tokenbiryani_record_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_record_t *rec, ngx_uint_t full)
{
    char                                  buf[160], hint[160];
    double                                v;
    size_t                                t;
    int64_t                               prefix;
    ngx_uint_t                            i;
    tb_cand_t                             c;
    const char                           *id, *const *names;
    cJSON                                *obj, *d, *arr, *item, *terms;
    tb_cand_out_t                         o;
    const tb_strategy_t                  *st;
    ngx_http_tokenbiryani_account_t      *a;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_http_tokenbiryani_inspect_cand_t *ic;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    obj = cJSON_CreateObject();
    if (obj == NULL) {
        return NULL;
    }

    ngx_http_tokenbiryani_add_str(obj, "request_id", rec->id,
                                  NGX_HTTP_TB_REQUEST_ID_LEN);

    tb_format_rfc3339(rec->started_ms, buf, sizeof(buf));
    cJSON_AddStringToObject(obj, "started_at", buf);
    cJSON_AddStringToObject(obj, "key", rec->key);
    cJSON_AddStringToObject(obj, "model", rec->model);

    /* the client's, when pacing sent a cheaper one ("" otherwise) */
    cJSON_AddStringToObject(obj, "model_requested",
                            (rec->edits & NGX_HTTP_TB_REC_DOWNSHIFT)
                            ? rec->model + ngx_strlen(rec->model) + 1 : "");

    (void) ngx_snprintf((u_char *) buf, sizeof(buf), "%s:%016xL%Z",
                        rec->session_source == TB_SESSION_HEADER ? "hdr"
                                                                 : "fp",
                        rec->session);
    cJSON_AddStringToObject(obj, "session", buf);

    cJSON_AddBoolToObject(obj, "streamed", rec->streamed);
    cJSON_AddNumberToObject(obj, "status", rec->status);

    id = ngx_http_tokenbiryani_slot_id(r, rec->chosen);

    if (id) {
        cJSON_AddStringToObject(obj, "account", id);

    } else {
        cJSON_AddNullToObject(obj, "account");
    }

    cJSON_AddNumberToObject(obj, "latency_ms", (double) rec->latency_ms);

    ngx_http_tokenbiryani_add_number_or_null(obj, "ttft_ms", rec->ttft_ms >= 0,
                                             (double) rec->ttft_ms);

    cJSON_AddNumberToObject(obj, "queued_ms", (double) rec->queued_ms);
    cJSON_AddNumberToObject(obj, "paced_for_ms", (double) rec->paced_ds * 100);

    if (rec->kind == NGX_HTTP_TB_MESSAGES) {
        /* the prompt cache: a breakpoint asked for, the stable prefix, and
         * a word when a prefix worth caching came without one */
        d = cJSON_AddObjectToObject(obj, "cache");
        if (d == NULL) {
            goto failed;
        }

        prefix = (int64_t) (rec->prefix_64b * 64 / 3.5);

        cJSON_AddBoolToObject(d, "breakpoint", rec->breakpoint);
        cJSON_AddBoolToObject(d, "auto_breakpoint",
                              rec->edits & NGX_HTTP_TB_REC_BREAKPOINT);
        cJSON_AddNumberToObject(d, "prefix_tokens", (double) prefix);

        if (!rec->breakpoint && prefix >= TB_BODY_CACHEABLE_TOKENS) {
            ngx_snprintf((u_char *) hint, sizeof(hint),
                         "a stable prefix of about %L tokens and no "
                         "cache_control breakpoint: nothing of it is "
                         "cached%Z", prefix);
            cJSON_AddStringToObject(d, "hint", hint);

        } else {
            cJSON_AddNullToObject(d, "hint");
        }
    }
    cJSON_AddStringToObject(obj, "priority",
                            rec->priority ? "batch" : "interactive");
    cJSON_AddNumberToObject(obj, "worker", (double) rec->pid);

    if (rec->queued) {
        d = cJSON_AddObjectToObject(obj, "queue");
        if (d == NULL) {
            goto failed;
        }

        cJSON_AddNumberToObject(d, "waits", (double) rec->queued);
        cJSON_AddNumberToObject(d, "waited_ms", (double) rec->queued_ms);

        ngx_http_tokenbiryani_add_number_or_null(d, "woken_ms",
                                                 rec->woken_ms >= 0,
                                                 (double) rec->woken_ms);
    }
    cJSON_AddStringToObject(obj, "affinity",
                            tb_affinity_name((tb_affinity_e) rec->affinity));

    d = cJSON_AddObjectToObject(obj, "usage");
    if (d == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(d, "input_tokens", (double) rec->usage.input_tokens);
    cJSON_AddNumberToObject(d, "output_tokens",
                            (double) rec->usage.output_tokens);
    cJSON_AddNumberToObject(d, "cache_creation_input_tokens",
                            (double) rec->usage.cache_creation_input_tokens);
    cJSON_AddNumberToObject(d, "cache_read_input_tokens",
                            (double) rec->usage.cache_read_input_tokens);
    cJSON_AddNumberToObject(d, "cache_creation_1h_input_tokens",
                            (double) rec->usage.cache_creation_1h_input_tokens);

    /* what it cost, with the date of the prices: null, never 0, for a
     * model without a price */

    d = cJSON_AddObjectToObject(obj, "cost");
    if (d == NULL) {
        goto failed;
    }

    if (rec->cost >= 0) {
        u_char  as_of[16], *e;

        cJSON_AddNumberToObject(d, "usd", (double) rec->cost / 1e9);
        cJSON_AddStringToObject(d, "prices",
                                rec->prices_as_of > 0 ? "builtin" : "file");

        if (rec->prices_as_of > 0) {
            e = ngx_snprintf(as_of, sizeof(as_of), "%04d-%02d-%02d",
                             (int) (rec->prices_as_of / 10000),
                             (int) (rec->prices_as_of / 100 % 100),
                             (int) (rec->prices_as_of % 100));
            ngx_http_tokenbiryani_add_str(d, "prices_as_of", as_of,
                                          e - as_of);

        } else {
            cJSON_AddNullToObject(d, "prices_as_of");
        }

    } else {
        cJSON_AddNullToObject(d, "usd");
        cJSON_AddNullToObject(d, "prices");
        cJSON_AddNullToObject(d, "prices_as_of");
        cJSON_AddStringToObject(d, "why", rec->usage.input_tokens < 0
            ? "no usage: nothing was answered"
            : "no price for this model: spend caps count it as nothing");
    }

    arr = cJSON_AddArrayToObject(obj, "attempts");
    if (arr == NULL) {
        goto failed;
    }

    for (i = 0; i < rec->nattempts; i++) {
        item = cJSON_CreateObject();
        if (item == NULL) {
            goto failed;
        }

        id = ngx_http_tokenbiryani_slot_id(r, rec->attempts[i].slot);
        cJSON_AddStringToObject(item, "account", id ? id : "?");

        ngx_http_tokenbiryani_add_number_or_null(item, "status",
                                                 rec->attempts[i].status != 0,
                                                 rec->attempts[i].status);

        cJSON_AddStringToObject(item, "kind",
                        ngx_http_tokenbiryani_kind_name(rec->attempts[i].kind));
        cJSON_AddNumberToObject(item, "latency_ms",
                                rec->attempts[i].latency_ms);

        /* what came before it, and what sent it there */

        ngx_http_tokenbiryani_add_number_or_null(item, "waited_ms", i != 0,
                                                 rec->attempts[i].waited_ms);

        cJSON_AddNumberToObject(item, "eligible", rec->attempts[i].eligible);
        cJSON_AddNumberToObject(item, "score",
                                (double) (int64_t) (rec->attempts[i].score
                                                    * 10000 + 0.5) / 10000);
        cJSON_AddItemToArray(arr, item);
    }

    /* what its lease held: with the usage, the output reserved and never
     * used (the console's Efficiency page sums it over the list) */

    ngx_http_tokenbiryani_add_windows(obj, "lease", rec->need.n);
    cJSON_AddNumberToObject(cJSON_GetObjectItem(obj, "lease"), "max_tokens",
                            (double) rec->need.max_tokens);

    if (!full) {
        return obj;
    }

    d = cJSON_AddObjectToObject(obj, "decision");
    if (d == NULL) {
        goto failed;
    }

    cJSON_AddStringToObject(d, "strategy", rec->strategy);

    id = NULL;

    for (i = 0; i < rec->ncands; i++) {
        if (rec->cands[i].verdict == TB_V_CHOSEN) {
            id = ngx_http_tokenbiryani_slot_id(r, rec->cands[i].slot);
        }
    }

    if (id) {
        cJSON_AddStringToObject(d, "chosen", id);

    } else {
        cJSON_AddNullToObject(d, "chosen");
    }

    cJSON_AddStringToObject(d, "affinity",
                            tb_affinity_name((tb_affinity_e) rec->affinity));

    ngx_http_tokenbiryani_add_number_or_null(d, "soonest_available_in",
        rec->soonest > rec->decided_ms,
        (double) (rec->soonest - rec->decided_ms) / 1000);

    cJSON_AddNumberToObject(d, "accounts", rec->candidates);

    /* the terms are those of the strategy that decided */
    st = ngx_http_tokenbiryani_find_strategy(tmcf, rec->strategy);
    if (st == NULL) {
        st = ngx_http_tokenbiryani_strategy(tmcf);
    }

    names = st->terms || st->rotate ? st->term_names : tb_term_names;

    arr = cJSON_AddArrayToObject(d, "candidates");
    if (arr == NULL) {
        goto failed;
    }

    for (i = 0; i < rec->ncands; i++) {
        ic = &rec->cands[i];

        item = cJSON_CreateObject();
        if (item == NULL) {
            goto failed;
        }

        id = ngx_http_tokenbiryani_slot_id(r, ic->slot);
        cJSON_AddStringToObject(item, "account", id ? id : "?");

        /* the verdict in words, with the account as it is configured now */

        ngx_memzero(&c, sizeof(tb_cand_t));
        ngx_memzero(&o, sizeof(tb_cand_out_t));

        a = ngx_http_tokenbiryani_account_by_slot(tmcf, ic->slot);

        c.supported = 1;
        c.st = ngx_http_tokenbiryani_zone_slot_state(&tmcf->zone, ic->slot);

        if (a) {
            c.conf = a->conf;
            c.supported = a->supported;
        }

        o.available_at = ic->available_at;
        o.headroom = ic->headroom;

        if (c.conf || (ic->verdict != TB_V_DISABLED
                       && ic->verdict != TB_V_CONCURRENCY
                       && ic->verdict != TB_V_SPEND))
        {
            tb_verdict_str((tb_verdict_e) ic->verdict, &o, &c,
                           rec->decided_ms, buf, sizeof(buf));

        } else {
            ngx_cpystrn((u_char *) buf, (u_char *) "filtered",
                        sizeof(buf));
        }

        cJSON_AddStringToObject(item, "verdict", buf);

        if (c.conf && !c.conf->observable_limits) {
            /* its headroom term is assumed_headroom, not a reading */
            cJSON_AddStringToObject(item, "limits", "unobservable");
        }

        if (ic->verdict == TB_V_CHOSEN || ic->verdict == TB_V_ELIGIBLE) {
            v = (double) (int64_t) (ic->score * 10000 + (ic->score < 0
                                                         ? -0.5 : 0.5));
            cJSON_AddNumberToObject(item, "score", v / 10000);

            terms = cJSON_AddObjectToObject(item, "terms");
            if (terms == NULL) {
                goto failed;
            }

            for (t = 0; t < TB_TERMS && names[t]; t++) {
                v = (double) (int64_t) (ic->terms[t] * 10000
                                        + (ic->terms[t] < 0 ? -0.5 : 0.5));
                cJSON_AddNumberToObject(terms, names[t], v / 10000);
            }
        }

        if (ic->available_at > rec->decided_ms) {
            cJSON_AddNumberToObject(item, "available_in",
                        (double) (ic->available_at - rec->decided_ms) / 1000);
        }

        cJSON_AddItemToArray(arr, item);
    }

    return obj;

failed:

    cJSON_Delete(obj);

    return NULL;
}


cJSON *
ngx_http_tokenbiryani_strategy_json(const tb_strategy_t *st,
    ngx_uint_t plugin, ngx_uint_t current)
{
    size_t  t;
    cJSON  *obj, *m;

    obj = cJSON_CreateObject();
    if (obj == NULL) {
        return NULL;
    }

    cJSON_AddStringToObject(obj, "name", st->name);
    cJSON_AddStringToObject(obj, "description",
                            st->description ? st->description : "");
    cJSON_AddBoolToObject(obj, "plugin", plugin);
    cJSON_AddBoolToObject(obj, "current", current);

    if (st->terms || st->rotate) {
        m = cJSON_AddArrayToObject(obj, "terms");

        for (t = 0; m && t < TB_TERMS && st->term_names[t]; t++) {
            cJSON_AddItemToArray(m, cJSON_CreateString(st->term_names[t]));
        }

    } else {
        m = cJSON_AddObjectToObject(obj, "multipliers");

        for (t = 0; m && t < TB_TERMS; t++) {
            cJSON_AddNumberToObject(m, tb_term_names[t], st->mult[t]);
        }
    }

    return obj;
}


/* the queue: depth by class, counters, and who waits */

cJSON *
ngx_http_tokenbiryani_queue_json(ngx_http_request_t *r, int64_t now)
{
    char                                 id[NGX_HTTP_TB_REQUEST_ID_LEN + 1];
    ngx_uint_t                           i, k, max;
    cJSON                               *obj, *arr, *item;
    ngx_http_tokenbiryani_queue_view_t   view;
    ngx_http_tokenbiryani_zone_stats_t   zs;
    ngx_http_tokenbiryani_waiter_view_t *w;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    /*
     * Room for the waiters there are now and some that may come before the
     * lock is taken (read without it: only a size); later ones are counted
     * but not listed.  The queue never holds more than max_size.
     */
    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    max = ngx_min(zs.share.waiting + 64,
                  (ngx_uint_t) tmcf->tbcf->queue_max_size);

    w = ngx_palloc(r->pool, (max ? max : 1)
                            * sizeof(ngx_http_tokenbiryani_waiter_view_t));
    if (w == NULL) {
        return NULL;
    }

    k = ngx_http_tokenbiryani_queue_snapshot(&tmcf->zone, &view, w, max);

    arr = ngx_http_tokenbiryani_json_doc(&obj, "waiting",
                                         cJSON_AddArrayToObject);
    if (arr == NULL) {
        return NULL;
    }

    for (i = 0; i < k; i++) {
        item = cJSON_CreateObject();
        if (item == NULL) {
            continue;
        }

        ngx_memcpy(id, w[i].request_id, NGX_HTTP_TB_REQUEST_ID_LEN);
        id[NGX_HTTP_TB_REQUEST_ID_LEN] = '\0';

        cJSON_AddStringToObject(item, "request_id", id);
        cJSON_AddStringToObject(item, "priority",
                                w[i].cls ? "batch" : "interactive");
        cJSON_AddNumberToObject(item, "waited_ms",
                                (double) (now - w[i].enqueued_ms));
        cJSON_AddNumberToObject(item, "worker", (double) w[i].pid);
        cJSON_AddItemToArray(arr, item);
    }

    cJSON_AddNumberToObject(obj, "depth", (double) view.depth);
    cJSON_AddNumberToObject(obj, "interactive", (double) view.n[0]);
    cJSON_AddNumberToObject(obj, "batch", (double) view.n[1]);
    cJSON_AddNumberToObject(obj, "max_size",
                            (double) tmcf->tbcf->queue_max_size);
    cJSON_AddNumberToObject(obj, "max_wait_seconds",
                            tmcf->tbcf->queue_default_max_wait_seconds);
    cJSON_AddNumberToObject(obj, "queued_total", (double) view.queued_total);
    cJSON_AddNumberToObject(obj, "served", (double) view.served);
    cJSON_AddNumberToObject(obj, "timed_out", (double) view.timed_out);
    cJSON_AddNumberToObject(obj, "refused_full", (double) view.full);
    cJSON_AddNumberToObject(obj, "client_left", (double) view.left);
    cJSON_AddNumberToObject(obj, "dropped_stale", (double) view.stale);

    return obj;
}


/*
 * The keys by name - never their material - with what each holds across
 * workers and its limits (null: none).
 */

ngx_int_t
ngx_http_tokenbiryani_keys_json(ngx_http_request_t *r, cJSON *root)
{
    size_t                              i, nfile;
    cJSON                              *arr, *k, *sp;
    ngx_uint_t                          inflight, queued, n;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_rkent_t      *ents;
    ngx_http_tokenbiryani_key_spend_t   ksp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    arr = cJSON_AddArrayToObject(root, "keys");
    if (arr == NULL) {
        return NGX_ERROR;
    }

    ents = ngx_http_tokenbiryani_rkeys(tmcf, &n);
    if (ents == NULL) {
        return NGX_ERROR;
    }

    nfile = tmcf->tbcf->nkeys;

    for (i = 0; i < nfile + n; i++) {
        kc = (i < nfile) ? &tmcf->tbcf->keys[i] : &ents[i - nfile].ks.conf;

        ngx_http_tokenbiryani_key_usage(&tmcf->zone, kc->name_hash,
                                        &inflight, &queued);
        ngx_http_tokenbiryani_key_spend(&tmcf->zone, kc->name_hash,
                                        ngx_http_tokenbiryani_now_ms(), &ksp);

        k = cJSON_CreateObject();
        if (k == NULL) {
            return NGX_ERROR;
        }

        cJSON_AddItemToArray(arr, k);

        if (cJSON_AddStringToObject(k, "name", kc->name) == NULL
            || cJSON_AddStringToObject(k, "source",
                                       i < nfile ? "file" : "minted") == NULL
            || cJSON_AddBoolToObject(k, "admin", kc->admin) == NULL
            || (kc->auto_breakpoint == 2
                ? cJSON_AddNullToObject(k, "auto_breakpoint")
                : cJSON_AddBoolToObject(k, "auto_breakpoint",
                                        kc->auto_breakpoint)) == NULL
            || cJSON_AddNumberToObject(k, "inflight", (double) inflight)
               == NULL
            || cJSON_AddNumberToObject(k, "queued", (double) queued) == NULL
            || (kc->max_inflight >= 0
                ? cJSON_AddNumberToObject(k, "max_inflight",
                                          (double) kc->max_inflight)
                : cJSON_AddNullToObject(k, "max_inflight")) == NULL
            || (kc->max_queued >= 0
                ? cJSON_AddNumberToObject(k, "max_queued",
                                          (double) kc->max_queued)
                : cJSON_AddNullToObject(k, "max_queued")) == NULL
            || (kc->rpm >= 0
                ? cJSON_AddNumberToObject(k, "rpm", (double) kc->rpm)
                : cJSON_AddNullToObject(k, "rpm")) == NULL
            || cJSON_AddNumberToObject(k, "rpm_used",
                                       (double) (ksp.rpm + ksp.others_rpm))
               == NULL)
        {
            return NGX_ERROR;
        }

        /* what its spend cap counts: this instance's and the others' */

        sp = cJSON_AddObjectToObject(k, "spend");

        if (sp == NULL
            || cJSON_AddNumberToObject(sp, "window_usd",
                   (double) (ksp.window_cost + ksp.reserved + ksp.others)
                   / 1e9) == NULL
            || cJSON_AddNumberToObject(sp, "in_flight_usd",
                                       (double) ksp.reserved / 1e9) == NULL
            || cJSON_AddNumberToObject(sp, "other_instances_usd",
                                       (double) ksp.others / 1e9) == NULL
            || cJSON_AddNumberToObject(sp, "window_hours",
                                       tmcf->tbcf->spend_window_hours)
               == NULL
            || (kc->spend_cap_usd >= 0
                ? cJSON_AddNumberToObject(sp, "cap_usd", kc->spend_cap_usd)
                : cJSON_AddNullToObject(sp, "cap_usd")) == NULL)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* the part of the pool this gateway holds, of several sharing it */

static ngx_int_t
ngx_http_tokenbiryani_share_json(cJSON *obj,
    const ngx_http_tokenbiryani_share_state_t *ss, int64_t now)
{
    cJSON  *sh;

    if (ss->granted_ms == 0) {
        /* never granted yet */
        return cJSON_AddNullToObject(obj, "share") ? NGX_OK : NGX_ERROR;
    }

    sh = cJSON_AddObjectToObject(obj, "share");

    return (sh == NULL
            || cJSON_AddNumberToObject(sh, "held",
                   (double) (TB_SHARE_ONE - ss->withheld) / TB_SHARE_ONE)
               == NULL
            || cJSON_AddNumberToObject(sh, "gateways", (double) ss->peers)
               == NULL
            || cJSON_AddNumberToObject(sh, "granted_seconds_ago",
                   (double) (now - ss->granted_ms) / 1000) == NULL)
           ? NGX_ERROR : NGX_OK;
}


/*
 * The store behind the zone: which, and whether its writes work; when
 * they do not, since when and why, in the words of the one log line.
 */

ngx_int_t
ngx_http_tokenbiryani_store_json(ngx_http_request_t *r, cJSON *root,
    int64_t now, const ngx_http_tokenbiryani_share_state_t *share)
{
    uint64_t                              refused_records, refused_messages;
    cJSON                                *obj, *key;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_http_tokenbiryani_store_state_t   st;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    obj = cJSON_AddObjectToObject(root, "store");
    if (obj == NULL) {
        return NGX_ERROR;
    }

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        return (cJSON_AddStringToObject(obj, "backend", "memory") == NULL
                || cJSON_AddStringToObject(obj, "state", "memory only")
                   == NULL)
               ? NGX_ERROR : NGX_OK;
    }

    ngx_http_tokenbiryani_store_snapshot(&tmcf->zone, &st);

    if ((tmcf->store_backend == NGX_HTTP_TB_STORE_REDIS
         ? (cJSON_AddStringToObject(obj, "backend", "redis") == NULL
            || ngx_http_tokenbiryani_add_str(obj, "url",
                                             tmcf->store_shown.data,
                                             tmcf->store_shown.len) == NULL
            || ngx_http_tokenbiryani_add_str(obj, "namespace",
                                             tmcf->store_ns.data,
                                             tmcf->store_ns.len) == NULL
            || ngx_http_tokenbiryani_add_str(obj, "instance",
                                             tmcf->store_instance.data,
                                             tmcf->store_instance.len)
               == NULL
            || ngx_http_tokenbiryani_share_json(obj, share, now) != NGX_OK)
         : (cJSON_AddStringToObject(obj, "backend", "sqlite") == NULL
            || ngx_http_tokenbiryani_add_str(obj, "path",
                                             tmcf->store_path.data,
                                             tmcf->store_path.len) == NULL))
        || cJSON_AddStringToObject(obj, "state",
                                   st.degraded ? "degraded" : "ok") == NULL
        || (st.degraded
            ? cJSON_AddStringToObject(obj, "error", (char *) st.error)
            : cJSON_AddNullToObject(obj, "error")) == NULL
        || (st.since_ms
            ? cJSON_AddNumberToObject(obj, "state_for_seconds",
                                      (double) (now - st.since_ms) / 1000)
            : cJSON_AddNullToObject(obj, "state_for_seconds")) == NULL
        || (st.flushed_ms
            ? cJSON_AddNumberToObject(obj, "flushed_seconds_ago",
                                      (double) (now - st.flushed_ms) / 1000)
            : cJSON_AddNullToObject(obj, "flushed_seconds_ago")) == NULL
        || cJSON_AddNumberToObject(obj, "write_failures",
                                   (double) st.failures) == NULL
        || (st.flusher
            ? cJSON_AddNumberToObject(obj, "writer_pid", (double) st.flusher)
            : cJSON_AddNullToObject(obj, "writer_pid")) == NULL)
    {
        return NGX_ERROR;
    }

    /* the store had less history than this instance wrote: what it wrote
     * again, and what is gone from the usage history */

    if (st.rewound_ms == 0) {
        if (cJSON_AddNullToObject(obj, "history_rewritten") == NULL) {
            return NGX_ERROR;
        }

    } else {
        key = cJSON_AddObjectToObject(obj, "history_rewritten");

        if (key == NULL
            || cJSON_AddNumberToObject(key, "seconds_ago",
                   (double) (now - st.rewound_ms) / 1000) == NULL
            || cJSON_AddNumberToObject(key, "requests",
                                       (double) st.rewound_again) == NULL
            || cJSON_AddNumberToObject(key, "lost_requests",
                                       (double) st.rewound_lost) == NULL)
        {
            return NGX_ERROR;
        }
    }

    /* the secret key by where it came from and its id, never itself */

    key = cJSON_AddObjectToObject(obj, "secret_key");

    if (key == NULL
        || cJSON_AddStringToObject(key, "source",
               tmcf->seal_source == NGX_HTTP_TB_SEAL_ENV
               ? "TOKENBIRYANI_SECRET_KEY" : "file") == NULL
        || (tmcf->seal_source == NGX_HTTP_TB_SEAL_FILE
            ? ngx_http_tokenbiryani_add_str(key, "path", tmcf->seal_path.data,
                                            tmcf->seal_path.len)
            : cJSON_AddNullToObject(key, "path")) == NULL
        || cJSON_AddStringToObject(key, "id", tmcf->seal.kid) == NULL)
    {
        return NGX_ERROR;
    }

    /* what was read back, or heard from other instances, and refused as
     * not this gateway's (each record said once in the log) */

    ngx_http_tokenbiryani_refused(&tmcf->zone, &refused_records,
                                  &refused_messages);

    key = cJSON_AddObjectToObject(obj, "refused");

    if (key == NULL
        || cJSON_AddNumberToObject(key, "records", (double) refused_records)
           == NULL
        || cJSON_AddNumberToObject(key, "messages",
                                   (double) refused_messages) == NULL)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}
