/*
 * tokenbiryani: the /admin JSON API and /healthz.
 *
 * Admin responses never carry a credential or a prompt: accounts are shown
 * by id, base URL and state, keys not at all.
 */


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_shm.h"


static ngx_int_t ngx_http_tokenbiryani_admin_status(ngx_http_request_t *r);
static cJSON *ngx_http_tokenbiryani_account_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_account_t *a, int64_t now, tb_state_e *state);
static cJSON *ngx_http_tokenbiryani_window_json(tb_window_t *w, int64_t now);
static ngx_int_t ngx_http_tokenbiryani_send_cjson(ngx_http_request_t *r,
    ngx_int_t status, cJSON *root);
static cJSON *ngx_http_tokenbiryani_add_str(cJSON *obj, const char *name,
    u_char *data, size_t len);


ngx_int_t
ngx_http_tokenbiryani_admin_handler(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_str_t                    *uri;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_tokenbiryani_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_tokenbiryani_authenticate(r, ctx, 1);
    if (rc != NGX_OK) {
        return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    uri = &r->uri;

    if (uri->len == sizeof("/admin/status") - 1
        && ngx_strncmp(uri->data, "/admin/status", uri->len) == 0)
    {
        if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error",
                       "%V expects GET, not %V", uri, &r->method_name);
        }

        return ngx_http_tokenbiryani_admin_status(r);
    }

    return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
               "not_found_error", "no admin endpoint at %V", uri);
}


static ngx_int_t
ngx_http_tokenbiryani_admin_status(ngx_http_request_t *r)
{
    int64_t                             now;
    ngx_uint_t                          i, n[4];
    tb_state_e                          state;
    cJSON                              *root, *obj, *arr, *acct;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    root = cJSON_CreateObject();
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    obj = cJSON_AddObjectToObject(root, "gateway");
    if (obj == NULL) {
        goto failed;
    }

    cJSON_AddStringToObject(obj, "version", NGX_HTTP_TOKENBIRYANI_VERSION);
    cJSON_AddNumberToObject(obj, "config_generation",
                            (double) tmcf->sh->generation);
    cJSON_AddNumberToObject(obj, "uptime_seconds",
                            (double) (now - tmcf->sh->created_ms) / 1000);

    /* selection is round robin until the scoring router is in place */
    cJSON_AddStringToObject(root, "strategy", "round_robin");
    cJSON_AddStringToObject(root, "configured_strategy",
                            tmcf->tbcf->routing_strategy);

    arr = cJSON_AddArrayToObject(root, "accounts");
    if (arr == NULL) {
        goto failed;
    }

    ngx_memzero(n, sizeof(n));

    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        acct = ngx_http_tokenbiryani_account_json(r, &a[i], now, &state);
        if (acct == NULL) {
            goto failed;
        }

        cJSON_AddItemToArray(arr, acct);
        n[state]++;
    }

    obj = cJSON_AddObjectToObject(root, "pool");
    if (obj == NULL) {
        goto failed;
    }

    cJSON_AddNumberToObject(obj, "total", (double) tmcf->accounts.nelts);
    cJSON_AddNumberToObject(obj, "ready", (double) n[TB_STATE_READY]);
    cJSON_AddNumberToObject(obj, "cooling", (double) n[TB_STATE_COOLING]);
    cJSON_AddNumberToObject(obj, "exhausted", (double) n[TB_STATE_EXHAUSTED]);
    cJSON_AddNumberToObject(obj, "disabled", (double) n[TB_STATE_DISABLED]);

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    cJSON_Delete(root);

    return NGX_HTTP_INTERNAL_SERVER_ERROR;
}


static cJSON *
ngx_http_tokenbiryani_account_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_account_t *a, int64_t now, tb_state_e *state)
{
    int64_t              until;
    cJSON               *acct, *limits, *w;
    tb_account_state_t   s;

    ngx_http_tokenbiryani_shm_snapshot(
        ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module),
        a, &s);

    *state = tb_account_state(&s, a->conf->enabled && a->supported, now,
                              &until);

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

    if (!a->supported) {
        cJSON_AddStringToObject(acct, "disabled_reason",
                                "account type not supported by this build");

    } else if (!a->conf->enabled) {
        cJSON_AddStringToObject(acct, "disabled_reason", "disabled in config");

    } else if (s.disabled) {
        cJSON_AddStringToObject(acct, "disabled_reason", s.disabled_reason);

    } else {
        cJSON_AddNullToObject(acct, "disabled_reason");
    }

    cJSON_AddNumberToObject(acct, "cooling_for",
                            until > now ? (double) (until - now) / 1000 : 0);
    cJSON_AddNumberToObject(acct, "inflight", (double) s.inflight);

    if (s.mirror.org[0]) {
        cJSON_AddStringToObject(acct, "organization_id", s.mirror.org);

    } else {
        cJSON_AddNullToObject(acct, "organization_id");
    }

    limits = cJSON_AddObjectToObject(acct, "limits");
    if (limits == NULL) {
        goto failed;
    }

    w = ngx_http_tokenbiryani_window_json(&s.mirror.w[TB_WIN_REQUESTS], now);
    cJSON_AddItemToObject(limits, "requests", w);
    w = ngx_http_tokenbiryani_window_json(&s.mirror.w[TB_WIN_INPUT], now);
    cJSON_AddItemToObject(limits, "input_tokens", w);
    w = ngx_http_tokenbiryani_window_json(&s.mirror.w[TB_WIN_OUTPUT], now);
    cJSON_AddItemToObject(limits, "output_tokens", w);

    if (s.mirror.retry_after_ms > now) {
        cJSON_AddNumberToObject(limits, "retry_after_in",
                             (double) (s.mirror.retry_after_ms - now) / 1000);

    } else {
        cJSON_AddNullToObject(limits, "retry_after_in");
    }

    if (s.mirror.observed_ms) {
        cJSON_AddNumberToObject(limits, "observed_ago",
                                (double) (now - s.mirror.observed_ms) / 1000);

    } else {
        cJSON_AddNullToObject(limits, "observed_ago");
    }

    cJSON_AddNumberToObject(acct, "requests_total",
                            (double) s.requests_total);
    cJSON_AddNumberToObject(acct, "failures_total",
                            (double) s.failures_total);

    if (s.last_status) {
        cJSON_AddNumberToObject(acct, "last_status", (double) s.last_status);

    } else {
        cJSON_AddNullToObject(acct, "last_status");
    }

    return acct;

failed:

    cJSON_Delete(acct);

    return NULL;
}


static cJSON *
ngx_http_tokenbiryani_window_json(tb_window_t *win, int64_t now)
{
    cJSON  *w;
    char    buf[32];

    w = cJSON_CreateObject();
    if (w == NULL) {
        return NULL;
    }

    if (win->limit >= 0) {
        cJSON_AddNumberToObject(w, "limit", (double) win->limit);

    } else {
        cJSON_AddNullToObject(w, "limit");
    }

    if (win->remaining >= 0) {
        cJSON_AddNumberToObject(w, "remaining", (double) win->remaining);

    } else {
        cJSON_AddNullToObject(w, "remaining");
    }

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

    return w;
}


ngx_int_t
ngx_http_tokenbiryani_healthz_handler(ngx_http_request_t *r)
{
    int64_t                             now, until;
    ngx_str_t                           json;
    ngx_uint_t                          i, ready;
    tb_state_e                          state;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    ctx = ngx_http_tokenbiryani_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error",
                   "%V expects GET, not %V", &r->uri, &r->method_name);
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    ready = 0;
    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        state = tb_account_state(a[i].sh, a[i].conf->enabled && a[i].supported,
                                 now, &until);

        if (state == TB_STATE_READY) {
            ready++;
        }
    }

    json.data = ngx_pnalloc(r->pool, sizeof("{\"status\":\"no_capacity\","
                                            "\"ready\":,\"total\":}") - 1
                                     + 2 * NGX_INT_T_LEN);
    if (json.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    json.len = ngx_sprintf(json.data,
                           "{\"status\":\"%s\",\"ready\":%ui,\"total\":%ui}",
                           ready ? "ok" : "no_capacity", ready,
                           tmcf->accounts.nelts)
               - json.data;

    ctx->own_error = 1;

    return ngx_http_tokenbiryani_send_json(r,
               ready ? NGX_HTTP_OK : NGX_HTTP_SERVICE_UNAVAILABLE, &json);
}


static ngx_int_t
ngx_http_tokenbiryani_send_cjson(ngx_http_request_t *r, ngx_int_t status,
    cJSON *root)
{
    char       *text;
    ngx_str_t   json;

    text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);

    if (text == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    json.len = ngx_strlen(text);
    json.data = ngx_pnalloc(r->pool, json.len);

    if (json.data == NULL) {
        cJSON_free(text);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(json.data, text, json.len);
    cJSON_free(text);

    return ngx_http_tokenbiryani_send_json(r, status, &json);
}


static cJSON *
ngx_http_tokenbiryani_add_str(cJSON *obj, const char *name, u_char *data,
    size_t len)
{
    char    buf[512];
    size_t  n;

    n = ngx_min(len, sizeof(buf) - 1);
    ngx_memcpy(buf, data, n);
    buf[n] = '\0';

    return cJSON_AddStringToObject(obj, name, buf);
}
