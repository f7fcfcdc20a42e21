/*
 * /admin/accounts: accounts added, changed, removed and tested at runtime.
 *
 *   GET    /admin/accounts             every account, the file's and the
 *                                      ones added at runtime
 *   POST   /admin/accounts             adds one: probed first (one
 *                                      max_tokens=1 request) unless
 *                                      "probe": false; 201
 *   PATCH  /admin/accounts/{id}        renames, rotates the credential
 *                                      (probed; re-enables an account
 *                                      disabled for auth), priority,
 *                                      cost_tier, models, max_concurrency,
 *                                      spend_cap_usd, observable_limits,
 *                                      enabled
 *   DELETE /admin/accounts/{id}        removes it, and the sessions placed
 *                                      on it
 *   POST   /admin/accounts/{id}/test   the doctor check of an account
 *   POST   /admin/accounts/test        ... of a credential not stored
 *
 * (GET /admin/accounts/{id} and .../enable, .../disable are in
 * ngx_http_tokenbiryani_admin.c.)
 *
 * An added account's credential is sealed (AES-256-GCM under the store's
 * secret key) before it leaves the request: the zone and the store hold
 * only the sealed text, and no answer carries more of it than its last
 * four characters.  A write answers once its row is committed; the host is
 * resolved and the probe made without blocking the worker (the thread
 * pool, the event loop).  The file's accounts are the file's: 409.
 */


#include "ngx_http_tokenbiryani.h"
#include "tb_racct.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_admin_probe.h"


#define NGX_HTTP_TB_ACCT_ADD           1
#define NGX_HTTP_TB_ACCT_CHANGE        2
#define NGX_HTTP_TB_ACCT_REMOVE        3
#define NGX_HTTP_TB_ACCT_TEST          4      /* a stored account */
#define NGX_HTTP_TB_ACCT_TRY           5      /* a credential not stored */

#define NGX_HTTP_TB_KEY_MAX            400    /* a credential's length */
#define NGX_HTTP_TB_PROBE_MODEL        "claude-haiku-4-5"


typedef struct {
    ngx_http_tokenbiryani_admin_write_t   w;         /* w.name: the id */
    ngx_http_tokenbiryani_lookup_t        lookup;    /* the host's */
    ngx_uint_t                            op;
    ngx_uint_t                            probe;     /* before it is stored */
    ngx_uint_t                            rotated;   /* a new credential */

    char                                 *spec;      /* without api_key */
    char                                 *sealed;
    ngx_str_t                             model;
    ngx_msec_t                            timeout;   /* of the probe */

    /* what is proxied to, from the checked spec */
    tb_config_t                          *cf;
    ngx_http_tokenbiryani_account_t       acct;
    u_char                                fingerprint[8];
    ngx_uint_t                            slot;      /* ..._ACCT_TEST */
    ngx_uint_t                            borrowed;  /* acct is the worker's */

    char                                 *host;
    ngx_http_tokenbiryani_raddr_t         addrs[NGX_HTTP_TB_RACCT_ADDRS];
    ngx_uint_t                            naddrs;

    cJSON                                *probed;    /* the probe's result */
} ngx_http_tokenbiryani_acct_write_t;


static ngx_int_t ngx_http_tokenbiryani_accounts_list(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_accounts_write(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w, u_char *body, size_t len);
static ngx_int_t ngx_http_tokenbiryani_accounts_check(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw, cJSON *root, const char *key);
static ngx_int_t ngx_http_tokenbiryani_accounts_resolve(
    ngx_http_request_t *r, ngx_http_tokenbiryani_acct_write_t *aw);
static void ngx_http_tokenbiryani_accounts_resolved(
    ngx_http_tokenbiryani_lookup_t *lk);
static ngx_int_t ngx_http_tokenbiryani_accounts_resolved_now(
    ngx_http_request_t *r, ngx_http_tokenbiryani_acct_write_t *aw);
static ngx_int_t ngx_http_tokenbiryani_accounts_probe(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw);
static void ngx_http_tokenbiryani_accounts_probed(ngx_http_request_t *r,
    ngx_http_tokenbiryani_call_result_t *res, void *data);
static ngx_int_t ngx_http_tokenbiryani_accounts_probed_now(
    ngx_http_request_t *r, ngx_http_tokenbiryani_call_result_t *res,
    ngx_http_tokenbiryani_acct_write_t *aw);
static void ngx_http_tokenbiryani_accounts_tested(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw, cJSON *root);
static ngx_int_t ngx_http_tokenbiryani_accounts_refused(ngx_http_request_t *r,
    ngx_http_tokenbiryani_call_result_t *res,
    ngx_http_tokenbiryani_acct_write_t *aw);
static ngx_int_t ngx_http_tokenbiryani_accounts_store(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw);
static ngx_int_t ngx_http_tokenbiryani_accounts_apply(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w);
static void ngx_http_tokenbiryani_accounts_unstore(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw);
static ngx_int_t ngx_http_tokenbiryani_accounts_answer(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw, ngx_int_t status);
static void ngx_http_tokenbiryani_accounts_finish(ngx_http_request_t *r,
    ngx_int_t rc);
static void ngx_http_tokenbiryani_accounts_cleanup(void *data);
static ngx_int_t ngx_http_tokenbiryani_racct_view(ngx_http_request_t *r,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_str_t *id,
    ngx_http_tokenbiryani_racct_view_t *out);


static const ngx_http_tokenbiryani_admin_resource_t
    ngx_http_tokenbiryani_account_resource =
{
    "account", "an account",
    "nothing was changed: the store cannot be written",
    ngx_http_tokenbiryani_accounts_write,
    ngx_http_tokenbiryani_accounts_apply,
    NULL
};


/* the fields an added account may be given, and changed */

static const char  *ngx_http_tokenbiryani_acct_fields[] = {
    "id", "name", "type", "api_key", "base_url", "priority", "cost_tier",
    "models", "max_concurrency", "spend_cap_usd", "enabled",
    "observable_limits", "cache_reads_count", "assumed_headroom",
    "replenishment", NULL
};

static const char  *ngx_http_tokenbiryani_acct_changeable[] = {
    "name", "api_key", "priority", "cost_tier", "models", "max_concurrency",
    "spend_cap_usd", "enabled", "observable_limits", "cache_reads_count",
    "assumed_headroom", NULL
};


ngx_int_t
ngx_http_tokenbiryani_admin_accounts(ngx_http_request_t *r)
{
    u_char                              *p, *last, *slash;
    ngx_pool_cleanup_t                  *cln;
    ngx_http_tokenbiryani_acct_write_t  *aw;

    p = r->uri.data + sizeof("/admin/accounts") - 1;
    last = r->uri.data + r->uri.len;

    if (p < last) {
        p++;    /* the slash */
    }

    if (p == last) {
        if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
            return ngx_http_tokenbiryani_accounts_list(r);
        }

        if (r->method != NGX_HTTP_POST) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error", "%V expects GET or POST, "
                       "not %V", &r->uri, &r->method_name);
        }
    }

    aw = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_acct_write_t));
    if (aw == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    aw->w.res = &ngx_http_tokenbiryani_account_resource;
    aw->probe = 1;

    slash = ngx_strlchr(p, last, '/');

    if (p == last) {
        aw->op = NGX_HTTP_TB_ACCT_ADD;

    } else if ((size_t) (last - p) == sizeof("test") - 1
               && ngx_strncmp(p, "test", sizeof("test") - 1) == 0)
    {
        aw->op = NGX_HTTP_TB_ACCT_TRY;

    } else if (slash
               && (size_t) (last - slash) == sizeof("/test") - 1
               && ngx_strncmp(slash, "/test", sizeof("/test") - 1) == 0)
    {
        aw->op = NGX_HTTP_TB_ACCT_TEST;

    } else if (slash == NULL && (r->method & (NGX_HTTP_PATCH|NGX_HTTP_DELETE)))
    {
        aw->op = (r->method == NGX_HTTP_PATCH) ? NGX_HTTP_TB_ACCT_CHANGE
                                               : NGX_HTTP_TB_ACCT_REMOVE;

    } else {
        /* GET /admin/accounts/{id}, .../enable, .../disable */
        return NGX_DECLINED;
    }

    if ((aw->op == NGX_HTTP_TB_ACCT_TRY || aw->op == NGX_HTTP_TB_ACCT_TEST)
        && r->method != NGX_HTTP_POST)
    {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V expects POST, not %V",
                   &r->uri, &r->method_name);
    }

    if (aw->op != NGX_HTTP_TB_ACCT_ADD && aw->op != NGX_HTTP_TB_ACCT_TRY) {
        aw->w.name.data = p;
        aw->w.name.len = (slash ? slash : last) - p;
    }

    /* what the request holds is let go with it, answered or not */

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_tokenbiryani_accounts_cleanup;
    cln->data = aw;

    return ngx_http_tokenbiryani_admin_write(r, &aw->w);
}


static void
ngx_http_tokenbiryani_accounts_cleanup(void *data)
{
    ngx_http_tokenbiryani_acct_write_t *aw = data;

    if (aw->acct.auth_header.data && !aw->borrowed) {
        ngx_explicit_memzero(aw->acct.auth_header.data,
                             aw->acct.auth_header.len);
    }

    if (aw->cf) {
        tb_config_free(aw->cf);
        aw->cf = NULL;
    }

    if (aw->probed) {
        cJSON_Delete(aw->probed);
        aw->probed = NULL;
    }
}


/* the masked credential: "sk-ant-..." and its last four, or less */
static cJSON *
ngx_http_tokenbiryani_add_masked(cJSON *obj, const char *key)
{
    size_t  n;
    u_char  buf[32], *p;

    if (key == NULL || (n = ngx_strlen(key)) == 0) {
        return cJSON_AddNullToObject(obj, "credential");
    }

    p = buf;

    if (n >= 16 && ngx_strncmp(key, "sk-ant-", 7) == 0) {
        p = ngx_cpymem(p, "sk-ant-", 7);
    }

    /* U+2026, then the last four when that leaves at least eight unseen */
    p = ngx_cpymem(p, "\xe2\x80\xa6", 3);

    if (n >= 12) {
        p = ngx_cpymem(p, key + n - 4, 4);
    }

    return ngx_http_tokenbiryani_add_str(obj, "credential", buf, p - buf);
}


cJSON *
ngx_http_tokenbiryani_admin_account_record(ngx_http_request_t *r,
    ngx_http_tokenbiryani_account_t *a, int64_t now, tb_state_e *state)
{
    size_t   i;
    cJSON   *acct, *m;

    acct = ngx_http_tokenbiryani_account_json(r, a, now, state);
    if (acct == NULL) {
        return NULL;
    }

    cJSON_AddStringToObject(acct, "source", a->runtime ? "runtime" : "file");
    ngx_http_tokenbiryani_add_masked(acct, a->conf->api_key);
    cJSON_AddNumberToObject(acct, "priority", a->conf->priority);
    cJSON_AddNumberToObject(acct, "cost_tier", a->conf->cost_tier);
    cJSON_AddNumberToObject(acct, "max_concurrency",
                            (double) a->conf->max_concurrency);
    cJSON_AddBoolToObject(acct, "observable_limits",
                          a->conf->observable_limits);

    ngx_http_tokenbiryani_add_number_or_null(acct, "spend_cap_usd",
                                             a->conf->spend_cap_usd >= 0,
                                             a->conf->spend_cap_usd);

    m = cJSON_AddArrayToObject(acct, "models");
    if (m == NULL) {
        cJSON_Delete(acct);
        return NULL;
    }

    for (i = 0; i < a->conf->models.n; i++) {
        cJSON_AddItemToArray(m, cJSON_CreateString(a->conf->models.items[i]));
    }

    return acct;
}


ngx_int_t
ngx_http_tokenbiryani_admin_account_records(ngx_http_request_t *r,
    cJSON *arr, int64_t now, ngx_uint_t *n)
{
    ngx_uint_t                          i, total;
    tb_state_e                          state;
    cJSON                              *acct;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;
    total = 0;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (a[i].retired) {
            continue;
        }

        acct = ngx_http_tokenbiryani_admin_account_record(r, &a[i], now,
                                                          &state);
        if (acct == NULL) {
            return NGX_ERROR;
        }

        cJSON_AddItemToArray(arr, acct);

        if (n) {
            n[state]++;
        }

        total++;
    }

    return total;
}


static ngx_int_t
ngx_http_tokenbiryani_accounts_list(ngx_http_request_t *r)
{
    ngx_uint_t                           j;
    cJSON                               *root, *arr, *acct;
    ngx_array_t                          views;
    uint64_t                             gen;
    tb_config_t                         *cf;
    ngx_http_tokenbiryani_account_t     *a;
    ngx_http_tokenbiryani_racct_view_t  *v;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    char                                 err[512];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    arr = ngx_http_tokenbiryani_json_doc(&root, "accounts",
                                         cJSON_AddArrayToObject);
    if (arr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_tokenbiryani_admin_account_records(r, arr,
                                        ngx_http_tokenbiryani_now_ms(), NULL)
        == NGX_ERROR)
    {
        goto failed;
    }

    /* the zone's accounts this worker cannot serve, and why */

    if (ngx_http_tokenbiryani_store_on(tmcf)) {
        if (ngx_http_tokenbiryani_raccts_copy(&tmcf->zone, r->pool, &views,
                                              &gen)
            != NGX_OK)
        {
            goto failed;
        }

        v = views.elts;

        for (j = 0; j < views.nelts; j++) {
            a = ngx_http_tokenbiryani_account_find(tmcf, v[j].id.data,
                                                   v[j].id.len);
            if (a && a->runtime) {
                continue;
            }

            acct = ngx_http_tokenbiryani_json_push(arr);
            if (acct == NULL) {
                goto failed;
            }

            ngx_http_tokenbiryani_add_str(acct, "id", v[j].id.data,
                                          v[j].id.len);
            cJSON_AddStringToObject(acct, "source", "runtime");
            cJSON_AddStringToObject(acct, "state", "disabled");

            if (ngx_http_tokenbiryani_yaml_account(tmcf, v[j].id.data,
                                                   v[j].id.len))
            {
                cJSON_AddStringToObject(acct, "reason", "the YAML file has "
                                        "an account of that id: the file's "
                                        "is used");
                continue;
            }

            cf = ngx_http_tokenbiryani_racct_open(tmcf, &v[j].id,
                                                  &v[j].spec, &v[j].sealed,
                                                  err, sizeof(err));
            if (cf) {
                tb_config_free(cf);
                ngx_cpystrn((u_char *) err, (u_char *)
                            (v[j].naddrs == 0
                             ? "its host did not resolve when the store was "
                               "loaded (see the error log; a PATCH looks it "
                               "up again)"
                             : "this worker has no room for it "
                               "(tokenbiryani_max_accounts)"),
                            sizeof(err));
            }

            cJSON_AddStringToObject(acct, "reason", err);
        }
    }

    cJSON_AddNumberToObject(root, "max_accounts", (double) tmcf->max_accounts);

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    return ngx_http_tokenbiryani_cjson_fail(root);
}


/* a runtime account's record in the zone, copied into the request */
static ngx_int_t
ngx_http_tokenbiryani_racct_view(ngx_http_request_t *r,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_str_t *id,
    ngx_http_tokenbiryani_racct_view_t *out)
{
    uint64_t                             gen;
    ngx_uint_t                           i;
    ngx_array_t                          views;
    ngx_http_tokenbiryani_racct_view_t  *v;

    if (ngx_http_tokenbiryani_raccts_copy(&tmcf->zone, r->pool, &views, &gen)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    v = views.elts;

    for (i = 0; i < views.nelts; i++) {
        if (v[i].id.len == id->len
            && ngx_memcmp(v[i].id.data, id->data, id->len) == 0)
        {
            *out = v[i];
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


/* a probe's "timeout_ms", from 100 ms to a minute */

#define NGX_HTTP_TB_TIMEOUT_RULE                                              \
    "timeout_ms must be a number of milliseconds from 100 to 60000"

static ngx_int_t
ngx_http_tokenbiryani_acct_timeout(cJSON *item,
    ngx_http_tokenbiryani_acct_write_t *aw)
{
    if (!cJSON_IsNumber(item) || item->valuedouble < 100
        || item->valuedouble > 60000)
    {
        return NGX_ERROR;
    }

    aw->timeout = (ngx_msec_t) item->valuedouble;

    return NGX_OK;
}


/* an Anthropic-shaped 400 that names the problem */
#define ngx_http_tokenbiryani_acct_400(r, ...)                               \
    ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,                \
                                     "invalid_request_error", __VA_ARGS__)


static ngx_int_t
ngx_http_tokenbiryani_accounts_write(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w, u_char *body, size_t len)
{
    u_char                              *p;
    size_t                               n;
    ngx_int_t                            rc;
    cJSON                               *root, *item, *next;
    const char                          *key, **f;
    ngx_http_tokenbiryani_account_t     *a;
    ngx_http_tokenbiryani_acct_write_t  *aw;
    ngx_http_tokenbiryani_racct_view_t   v;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    u_char                               keybuf[512];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    aw = (ngx_http_tokenbiryani_acct_write_t *) w;

    ngx_http_tokenbiryani_accounts_sync(tmcf);

    if (aw->op != NGX_HTTP_TB_ACCT_ADD && aw->op != NGX_HTTP_TB_ACCT_TRY) {
        a = ngx_http_tokenbiryani_account_find(tmcf, aw->w.name.data,
                                               aw->w.name.len);

        if (a == NULL && aw->op == NGX_HTTP_TB_ACCT_TEST) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                       "not_found_error", "no account \"%*s\" that serves "
                       "(GET /admin/accounts lists them all, with why)",
                       ngx_min(aw->w.name.len, 64), aw->w.name.data);
        }

        /* one the zone has but this worker cannot serve can still be
         * changed or removed */

        if (a == NULL
            && (ngx_http_tokenbiryani_yaml_account(tmcf, aw->w.name.data,
                                                   aw->w.name.len)
                || ngx_http_tokenbiryani_racct_view(r, tmcf, &aw->w.name, &v)
                   != NGX_OK))
        {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                       "not_found_error", "no account \"%*s\"",
                       ngx_min(aw->w.name.len, 64), aw->w.name.data);
        }

        if (a && aw->op == NGX_HTTP_TB_ACCT_TEST) {
            /* the file's too: its own credential, its own mirror */
            ngx_memcpy(&aw->acct, a, sizeof(ngx_http_tokenbiryani_account_t));
            aw->borrowed = 1;
            aw->slot = a->slot;

            root = len ? cJSON_ParseWithLength((char *) body, len) : NULL;

            if (len && (root == NULL || !cJSON_IsObject(root))) {
                cJSON_Delete(root);
                return ngx_http_tokenbiryani_acct_400(r,
                           "the body must be a JSON object (or empty)");
            }

            item = cJSON_GetObjectItemCaseSensitive(root, "model");

            if (item && !cJSON_IsString(item)) {
                cJSON_Delete(root);
                return ngx_http_tokenbiryani_acct_400(r,
                                                "model must be a string");
            }

            if (item) {
                n = ngx_strlen(item->valuestring);
                aw->model.data = ngx_pnalloc(r->pool, n);
                if (aw->model.data == NULL) {
                    return ngx_http_tokenbiryani_cjson_fail(root);
                }

                aw->model.len = n;
                ngx_memcpy(aw->model.data, item->valuestring, n);
            }

            item = cJSON_GetObjectItemCaseSensitive(root, "timeout_ms");

            if (item && ngx_http_tokenbiryani_acct_timeout(item, aw) != NGX_OK)
            {
                cJSON_Delete(root);
                return ngx_http_tokenbiryani_acct_400(r,
                                           NGX_HTTP_TB_TIMEOUT_RULE);
            }

            cJSON_Delete(root);

            aw->naddrs = ngx_min(a->naddrs, NGX_HTTP_TB_RACCT_ADDRS);

            return ngx_http_tokenbiryani_accounts_probe(r, aw);
        }

        if (a && !a->runtime) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                       "invalid_request_error", "account \"%V\" is the YAML "
                       "file's: change it there and reload (POST "
                       "/admin/accounts/%V/disable takes it out of service "
                       "now)", &a->id, &a->id);
        }

        n = aw->w.name.len;
        p = aw->w.name.data;

        aw->w.name.data = ngx_pnalloc(r->pool, n + 1);
        if (aw->w.name.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_cpystrn(aw->w.name.data, p, n + 1);

        if (aw->op == NGX_HTTP_TB_ACCT_REMOVE) {
            return ngx_http_tokenbiryani_accounts_store(r, aw);
        }
    }

    /* ADD, TRY, CHANGE: a JSON object of known fields */

    root = cJSON_ParseWithLength((char *) body, len);

    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ngx_http_tokenbiryani_acct_400(r,
                                      "the body must be a JSON object");
    }

    key = NULL;

    for (item = root->child; item; item = next) {
        next = item->next;

        if (item->string == NULL) {
            continue;
        }

        if (ngx_strcmp(item->string, "probe") == 0
            && aw->op != NGX_HTTP_TB_ACCT_TRY)
        {
            if (!cJSON_IsBool(item)) {
                rc = ngx_http_tokenbiryani_acct_400(r,
                                        "probe must be true or false");
                goto done;
            }

            aw->probe = cJSON_IsTrue(item);
            cJSON_Delete(cJSON_DetachItemViaPointer(root, item));
            continue;
        }

        if (ngx_strcmp(item->string, "timeout_ms") == 0
            && aw->op == NGX_HTTP_TB_ACCT_TRY)
        {
            if (ngx_http_tokenbiryani_acct_timeout(item, aw) != NGX_OK) {
                rc = ngx_http_tokenbiryani_acct_400(r,
                                                NGX_HTTP_TB_TIMEOUT_RULE);
                goto done;
            }

            cJSON_Delete(cJSON_DetachItemViaPointer(root, item));
            continue;
        }

        if (ngx_strcmp(item->string, "model") == 0
            && aw->op != NGX_HTTP_TB_ACCT_CHANGE)
        {
            if (!cJSON_IsString(item) || item->valuestring[0] == '\0'
                || ngx_strlen(item->valuestring) > 128)
            {
                rc = ngx_http_tokenbiryani_acct_400(r,
                          "model must be a model's name (a string)");
                goto done;
            }

            n = ngx_strlen(item->valuestring);
            aw->model.data = ngx_pnalloc(r->pool, n);
            if (aw->model.data == NULL) {
                rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
                goto done;
            }

            ngx_memcpy(aw->model.data, item->valuestring, n);
            aw->model.len = n;

            cJSON_Delete(cJSON_DetachItemViaPointer(root, item));
            continue;
        }

        f = (aw->op == NGX_HTTP_TB_ACCT_CHANGE)
            ? ngx_http_tokenbiryani_acct_changeable
            : ngx_http_tokenbiryani_acct_fields;

        for ( /* void */ ; *f; f++) {
            if (ngx_strcmp(item->string, *f) == 0) {
                break;
            }
        }

        if (*f == NULL) {
            if (aw->op == NGX_HTTP_TB_ACCT_CHANGE
                && (ngx_strcmp(item->string, "id") == 0
                    || ngx_strcmp(item->string, "type") == 0
                    || ngx_strcmp(item->string, "base_url") == 0
                    || ngx_strcmp(item->string, "replenishment") == 0))
            {
                rc = ngx_http_tokenbiryani_acct_400(r, "%s cannot be "
                         "changed: remove the account and add it again",
                         item->string);

            } else if (ngx_strcmp(item->string, "headers") == 0
                       || ngx_strcmp(item->string, "options") == 0)
            {
                rc = ngx_http_tokenbiryani_acct_400(r, "%s cannot be set "
                         "through the API: an account that needs them "
                         "belongs in the YAML file", item->string);

            } else {
                rc = ngx_http_tokenbiryani_acct_400(r, "unknown field "
                         "\"%*s\"",
                         ngx_min(ngx_strlen(item->string), 64),
                         item->string);
            }

            goto done;
        }

        if (ngx_strcmp(item->string, "api_key") == 0) {
            if (!cJSON_IsString(item) || item->valuestring[0] == '\0') {
                rc = ngx_http_tokenbiryani_acct_400(r,
                                   "api_key must be a non-empty string");
                goto done;
            }

            key = item->valuestring;
        }
    }

    if (aw->op == NGX_HTTP_TB_ACCT_TRY) {
        /* a credential on its own: an id only for the checks */
        item = cJSON_GetObjectItemCaseSensitive(root, "id");

        if (item == NULL) {
            cJSON_AddStringToObject(root, "id", "test");
        }
    }

    if (aw->op == NGX_HTTP_TB_ACCT_CHANGE) {
        /* the changes onto what is there */

        rc = ngx_http_tokenbiryani_racct_view(r, tmcf, &aw->w.name, &v);
        if (rc != NGX_OK) {
            rc = (rc == NGX_ERROR)
                 ? NGX_HTTP_INTERNAL_SERVER_ERROR
                 : ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                       "not_found_error", "no account \"%V\"", &aw->w.name);
            goto done;
        }

        {
        cJSON  *base;

        {
        size_t       plen;
        const char  *payload;

        payload = tb_rec_payload((char *) v.spec.data, v.spec.len, &plen,
                                 NULL);
        base = cJSON_ParseWithLength(payload, plen);
        }
        if (base == NULL) {
            rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
            goto done;
        }

        for (item = root->child; item; item = next) {
            next = item->next;

            if (item->string == NULL
                || ngx_strcmp(item->string, "api_key") == 0)
            {
                continue;
            }

            cJSON_DeleteItemFromObjectCaseSensitive(base, item->string);
            cJSON_AddItemToObject(base, item->string,
                                  cJSON_DetachItemViaPointer(root, item));
        }

        if (key) {
            /* rotated: the new credential, probed before it is stored */
            aw->rotated = 1;
            cJSON_AddStringToObject(base, "api_key", key);

        } else {
            /* the sealed credential as it is */
            aw->sealed = (char *) v.sealed.data;
            aw->probe = 0;

            if (tb_unseal(&tmcf->seal, (char *) v.sealed.data, v.sealed.len,
                          (char *) aw->w.name.data, aw->w.name.len, keybuf,
                          sizeof(keybuf) - 1, &n)
                != TB_SEAL_OK)
            {
                cJSON_Delete(base);
                rc = ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                         "invalid_request_error", "the credential of "
                         "account \"%V\" cannot be opened with this secret "
                         "key: give it again (api_key)", &aw->w.name);
                goto done;
            }

            keybuf[n] = '\0';
            cJSON_AddStringToObject(base, "api_key", (char *) keybuf);
            ngx_explicit_memzero(keybuf, n);
        }

        cJSON_Delete(root);
        root = base;
        key = cJSON_GetObjectItemCaseSensitive(root, "api_key")->valuestring;
        }
    }

    rc = ngx_http_tokenbiryani_accounts_check(r, aw, root, key);

done:

    /* the credential leaves no copy behind in cJSON's memory */

    item = root ? cJSON_GetObjectItemCaseSensitive(root, "api_key") : NULL;

    if (item && cJSON_IsString(item)) {
        ngx_explicit_memzero(item->valuestring,
                             ngx_strlen(item->valuestring));
    }

    cJSON_Delete(root);

    return rc;
}


/* the account checked as the file's are, its spec and sealed credential */
static ngx_int_t
ngx_http_tokenbiryani_accounts_check(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw, cJSON *root, const char *key)
{
    char                               *text;
    size_t                              n;
    ngx_int_t                           rc;
    ngx_uint_t                          i, runtime;
    cJSON                              *item;
    tb_seal_rc_e                        src;
    tb_account_conf_t                  *ac;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                err[512];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (aw->op != NGX_HTTP_TB_ACCT_TRY
        && (!ngx_http_tokenbiryani_store_on(tmcf)
            || tmcf->seal_source == NGX_HTTP_TB_SEAL_NONE))
    {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                   "invalid_request_error", "accounts are added at runtime "
                   "only with a store that keeps their credentials sealed: "
                   "set store.backend: sqlite in the YAML file, with "
                   "TOKENBIRYANI_SECRET_KEY (64 hex digits) in nginx's "
                   "environment or store.secret_key_path (a file made "
                   "0600 when missing)");
    }

    if (key == NULL) {
        return ngx_http_tokenbiryani_acct_400(r, "api_key is required");
    }

    if (ngx_strlen(key) > NGX_HTTP_TB_KEY_MAX) {
        return ngx_http_tokenbiryani_acct_400(r, "api_key is longer than %d "
                                              "characters",
                                              NGX_HTTP_TB_KEY_MAX);
    }

    item = cJSON_GetObjectItemCaseSensitive(root, "id");

    if (!cJSON_IsString(item)) {
        return ngx_http_tokenbiryani_acct_400(r, "id is required (a "
                                              "string)");
    }

    if (aw->op == NGX_HTTP_TB_ACCT_ADD) {
        n = ngx_strlen(item->valuestring);

        if (!tb_racct_valid_id(item->valuestring, n)) {
            return ngx_http_tokenbiryani_acct_400(r, "id must be 1 to 64 "
                       "letters, digits, '_' or '-', starting with a letter "
                       "or digit (and not \"test\")");
        }

        if (ngx_http_tokenbiryani_yaml_account(tmcf,
                                               (u_char *) item->valuestring,
                                               n))
        {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                       "invalid_request_error", "account \"%s\" is the YAML "
                       "file's", item->valuestring);
        }

        if (ngx_http_tokenbiryani_account_find(tmcf,
                                               (u_char *) item->valuestring,
                                               n))
        {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                       "invalid_request_error", "an account \"%s\" exists",
                       item->valuestring);
        }

        a = tmcf->accounts.elts;
        runtime = 0;

        for (i = tmcf->nyaml; i < tmcf->accounts.nelts; i++) {
            runtime += !a[i].retired;
        }

        if (tmcf->nyaml + runtime >= tmcf->max_accounts) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                       "invalid_request_error", "the pool has "
                       "tokenbiryani_max_accounts (%ui) accounts: remove one "
                       "or raise the directive", tmcf->max_accounts);
        }

        aw->w.name.len = n;
        aw->w.name.data = ngx_pnalloc(r->pool, n + 1);
        if (aw->w.name.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(aw->w.name.data, item->valuestring, n + 1);
    }

    item = cJSON_GetObjectItemCaseSensitive(root, "type");

    if (item && (!cJSON_IsString(item)
                 || (ngx_strcmp(item->valuestring, "anthropic_api") != 0
                     && ngx_strcmp(item->valuestring, "anthropic") != 0)))
    {
        return ngx_http_tokenbiryani_acct_400(r, "type: accounts added at "
                   "runtime are \"anthropic_api\" (Anthropic API keys)");
    }

    /* where it may point: no private address unless the operator allows */

    item = cJSON_GetObjectItemCaseSensitive(root, "base_url");

    if (item && cJSON_IsString(item)
        && tb_racct_base_url(item->valuestring,
                             tmcf->tbcf->server_allow_private_hosts, err,
                             sizeof(err))
           != 0)
    {
        return ngx_http_tokenbiryani_acct_400(r, "%s", err);
    }

    /* the file's own rules, the environment never read */

    text = cJSON_PrintUnformatted(root);
    if (text == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    aw->cf = tb_config_account_spec(text, ngx_strlen(text), err, sizeof(err));

    ngx_explicit_memzero(text, ngx_strlen(text));
    cJSON_free(text);

    if (aw->cf == NULL) {
        return ngx_http_tokenbiryani_acct_400(r, "%s", err);
    }

    ac = &aw->cf->accounts[0];

    rc = ngx_http_tokenbiryani_account_fill(r->pool, &aw->acct, ac,
                                            aw->fingerprint, err,
                                            sizeof(err));
    if (rc == NGX_ABORT) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc != NGX_OK) {
        return ngx_http_tokenbiryani_acct_400(r, "%s", err);
    }

#if (NGX_HTTP_SSL)
    if (aw->acct.tls && tmcf->ssl == NULL) {
        return ngx_http_tokenbiryani_acct_400(r, "base_url: https needs the "
                   "trusted certificates (tokenbiryani_ssl_trusted_"
                   "certificate, \"%V\", was not there at start)",
                   &tmcf->trusted_certificate);
    }
#else
    if (aw->acct.tls) {
        return ngx_http_tokenbiryani_acct_400(r, "base_url: this nginx was "
                   "built without TLS");
    }
#endif

    aw->host = ac->host;

    if (aw->op == NGX_HTTP_TB_ACCT_TRY) {
        return ngx_http_tokenbiryani_accounts_resolve(r, aw);
    }

    /* the spec kept: everything but the credential */

    item = cJSON_DetachItemFromObjectCaseSensitive(root, "api_key");

    if (item) {
        ngx_explicit_memzero(item->valuestring,
                             ngx_strlen(item->valuestring));
        cJSON_Delete(item);
    }

    text = cJSON_PrintUnformatted(root);

    aw->spec = ngx_http_tokenbiryani_pool_text(r->pool, text);
    cJSON_free(text);

    if (aw->spec == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the credential sealed, bound to the account's id */

    if (aw->sealed == NULL) {
        n = ngx_strlen(ac->api_key);

        aw->sealed = ngx_pnalloc(r->pool, TB_SEAL_TEXT_LEN(n));
        if (aw->sealed == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        src = tb_seal(&tmcf->seal, ac->api_key, n, (char *) aw->w.name.data,
                      aw->w.name.len, aw->sealed, TB_SEAL_TEXT_LEN(n));
        if (src != TB_SEAL_OK) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "tokenbiryani: account \"%V\": its credential "
                          "cannot be sealed: %s", &aw->w.name,
                          tb_seal_strerror(src));
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    /* the record as the store keeps it: bound to its id and credential */

    {
        ngx_str_t  rec;

        if (ngx_http_tokenbiryani_record_wrap(r->pool, tmcf, TB_REC_ACCOUNT,
                                              aw->w.name.data, aw->w.name.len,
                                              aw->sealed,
                                              ngx_strlen(aw->sealed),
                                              (u_char *) aw->spec,
                                              ngx_strlen(aw->spec), &rec)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        aw->spec = (char *) rec.data;
    }

    return ngx_http_tokenbiryani_accounts_resolve(r, aw);
}


/* the host looked up in the thread pool, never on the event loop */
static ngx_int_t
ngx_http_tokenbiryani_accounts_resolve(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (!aw->acct.by_name) {
        /* an address already: nothing to wait for */
        aw->lookup.naddrs = ngx_http_tokenbiryani_literal_addr(aw->host,
                                 aw->acct.port ? aw->acct.port
                                 : (in_port_t) aw->cf->accounts[0].port,
                                 aw->addrs);

        if (aw->lookup.naddrs == 0) {
            return ngx_http_tokenbiryani_acct_400(r, "base_url: \"%s\" is "
                       "not an address", aw->host);
        }

        return ngx_http_tokenbiryani_accounts_resolved_now(r, aw);
    }

    aw->lookup.host = aw->host;
    aw->lookup.port = aw->acct.port ? aw->acct.port
                                    : (in_port_t) aw->cf->accounts[0].port;
    aw->lookup.addrs = aw->addrs;
    aw->lookup.naddrs = NGX_HTTP_TB_RACCT_ADDRS;
    aw->lookup.done = ngx_http_tokenbiryani_accounts_resolved;
    aw->lookup.data = aw;

    if (ngx_http_tokenbiryani_lookup_post(tmcf, &aw->lookup) != NGX_OK) {
        return ngx_http_tokenbiryani_send_error(r,
                   NGX_HTTP_SERVICE_UNAVAILABLE, "api_error", "the host "
                   "cannot be looked up: this gateway has no thread pool "
                   "(store.backend: sqlite makes one)");
    }

    /* the reference the body's reading took is the one held throughout */
    return NGX_DONE;
}


static void
ngx_http_tokenbiryani_accounts_resolved(ngx_http_tokenbiryani_lookup_t *lk)
{
    ngx_http_tokenbiryani_acct_write_t *aw = lk->data;

    ngx_http_request_t  *r;

    r = aw->w.request;

    if (lk->naddrs == 0) {
        ngx_http_tokenbiryani_accounts_finish(r,
            ngx_http_tokenbiryani_acct_400(r, "base_url: %s; nothing was "
                                           "stored", lk->err));
        return;
    }

    ngx_http_tokenbiryani_accounts_finish(r,
                           ngx_http_tokenbiryani_accounts_resolved_now(r, aw));
}


/* the addresses known: the probe, or the write */
static ngx_int_t
ngx_http_tokenbiryani_accounts_resolved_now(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw)
{
    ngx_uint_t                          i;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    aw->naddrs = aw->lookup.naddrs;

    /* a name is checked by what it resolves to, as a literal is */

    for (i = 0; !tmcf->tbcf->server_allow_private_hosts && i < aw->naddrs;
         i++)
    {
        if (tb_racct_private_addr(&aw->addrs[i].sockaddr.sockaddr)) {
            return ngx_http_tokenbiryani_acct_400(r, "base_url: %s resolves "
                       "to a loopback, link-local or private address, which "
                       "accounts added at runtime may not reach "
                       "(server.allow_private_hosts)", aw->host);
        }
    }

    if (aw->probe
        && (aw->op == NGX_HTTP_TB_ACCT_TRY || aw->op == NGX_HTTP_TB_ACCT_ADD
            || aw->rotated))
    {
        return ngx_http_tokenbiryani_accounts_probe(r, aw);
    }

    return ngx_http_tokenbiryani_accounts_store(r, aw);
}


/*
 * The end of one asynchronous step: the reference it held let go, unless
 * the next step (NGX_DONE) holds it now
 */
static void
ngx_http_tokenbiryani_accounts_finish(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_connection_t  *c;

    if (rc == NGX_DONE) {
        return;
    }

    c = r->connection;

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


static ngx_int_t
ngx_http_tokenbiryani_accounts_probe(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw)
{
    ngx_uint_t                            i;
    ngx_addr_t                           *addrs;
    tb_account_conf_t                    *ac;
    ngx_http_tokenbiryani_call_target_t   t;
    ngx_str_t                             model;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_memzero(&t, sizeof(t));

    if (aw->op == NGX_HTTP_TB_ACCT_TEST) {
        t.addrs = aw->acct.addrs;
        t.naddrs = aw->acct.naddrs;

    } else {
        addrs = ngx_pcalloc(r->pool, aw->naddrs * sizeof(ngx_addr_t));
        if (addrs == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        for (i = 0; i < aw->naddrs; i++) {
            addrs[i].sockaddr = &aw->addrs[i].sockaddr.sockaddr;
            addrs[i].socklen = aw->addrs[i].socklen;

            addrs[i].name.data = ngx_pnalloc(r->pool, NGX_SOCKADDR_STRLEN);
            if (addrs[i].name.data == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            addrs[i].name.len = ngx_sock_ntop(addrs[i].sockaddr,
                                              addrs[i].socklen,
                                              addrs[i].name.data,
                                              NGX_SOCKADDR_STRLEN, 1);
        }

        t.addrs = addrs;
        t.naddrs = aw->naddrs;
    }

    if (t.naddrs == 0) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                   "invalid_request_error", "account \"%V\" has no address "
                   "to probe", &aw->w.name);
    }

    if (aw->acct.platform) {
        /* the header check reads anthropic-ratelimit-*: none comes back */
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                   "invalid_request_error", "account \"%V\" is a %s "
                   "account: the header check is for Anthropic API keys, "
                   "and its platform sends no rate-limit headers",
                   &aw->w.name, tb_account_type_name(aw->acct.conf->type));
    }

    t.host_header = aw->acct.host_header;
    t.ssl_name = aw->acct.ssl_name;
    t.path_prefix = aw->acct.path_prefix;
    t.auth_header = aw->acct.auth_header;
    t.tls = aw->acct.tls;
    ngx_http_tokenbiryani_call_oauth(&t, &aw->acct);

    /* the model: asked for, else the account's first that is not "*" */

    model = aw->model;

    if (model.len == 0) {
        ngx_str_set(&model, NGX_HTTP_TB_PROBE_MODEL);

        ac = aw->acct.conf;

        for (i = 0; ac && i < ac->models.n; i++) {
            if (ngx_strchr(ac->models.items[i], '*') == NULL) {
                model.data = (u_char *) ac->models.items[i];
                model.len = ngx_strlen(ac->models.items[i]);
                break;
            }
        }
    }

    if (ngx_http_tokenbiryani_probe(r, tmcf, &t, &model,
                                    aw->timeout ? aw->timeout
                                                : NGX_HTTP_TB_PROBE_TIMEOUT,
                                    ngx_http_tokenbiryani_accounts_probed, aw)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_DONE;
}


static void
ngx_http_tokenbiryani_accounts_probed(ngx_http_request_t *r,
    ngx_http_tokenbiryani_call_result_t *res, void *data)
{
    ngx_http_tokenbiryani_accounts_finish(r,
                     ngx_http_tokenbiryani_accounts_probed_now(r, res, data));
}


/* what the probe saw: the answer (a test, a try, a refusal), or the write */
static ngx_int_t
ngx_http_tokenbiryani_accounts_probed_now(ngx_http_request_t *r,
    ngx_http_tokenbiryani_call_result_t *res,
    ngx_http_tokenbiryani_acct_write_t *aw)
{
    cJSON                              *root;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    aw->probed = ngx_http_tokenbiryani_probe_json(res);
    if (aw->probed == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (aw->op == NGX_HTTP_TB_ACCT_TEST) {
        /* what it said is what the account's mirror learns */

        if (res->status) {
            (void) ngx_http_tokenbiryani_zone_observe(&tmcf->zone, aw->slot,
                                           &res->obs,
                                           res->unified ? &res->uobs : NULL,
                                           res->status,
                                           ngx_http_tokenbiryani_now_ms());
        }

        /* the probe's answer, with the account as it is now */

        root = aw->probed;
        aw->probed = NULL;

        ngx_http_tokenbiryani_add_str(root, "account", aw->w.name.data,
                                      aw->w.name.len);

        ngx_http_tokenbiryani_accounts_tested(r, aw, root);

        return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
    }

    if (aw->op == NGX_HTTP_TB_ACCT_TRY) {
        root = aw->probed;
        aw->probed = NULL;

        return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
    }

    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(aw->probed, "ok"))) {
        return ngx_http_tokenbiryani_accounts_refused(r, res, aw);
    }

    return ngx_http_tokenbiryani_accounts_store(r, aw);
}


/* a test's answer: the account's state and mirror as they are now */
static void
ngx_http_tokenbiryani_accounts_tested(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw, cJSON *root)
{
    tb_state_e                          state;
    cJSON                              *acct, *limits;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    a = ngx_http_tokenbiryani_account_find(tmcf, aw->w.name.data,
                                           aw->w.name.len);
    if (a == NULL) {
        return;
    }

    acct = ngx_http_tokenbiryani_account_json(r, a,
                                              ngx_http_tokenbiryani_now_ms(),
                                              &state);
    if (acct == NULL) {
        return;
    }

    cJSON_AddStringToObject(root, "state", tb_state_name(state));

    limits = cJSON_DetachItemFromObjectCaseSensitive(acct, "limits");
    if (limits) {
        cJSON_AddItemToObject(root, "mirror", limits);
    }

    cJSON_Delete(acct);
}


/* nothing stored: the error says why, the probe what it saw */
static ngx_int_t
ngx_http_tokenbiryani_accounts_refused(ngx_http_request_t *r,
    ngx_http_tokenbiryani_call_result_t *res,
    ngx_http_tokenbiryani_acct_write_t *aw)
{
    u_char  *p;
    cJSON   *root, *e;
    u_char   msg[512];

    root = cJSON_CreateObject();
    e = root ? cJSON_AddObjectToObject(root, "error") : NULL;

    if (e == NULL) {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    cJSON_AddStringToObject(root, "type", "error");
    cJSON_AddStringToObject(e, "type", "invalid_request_error");

    if (res->status) {
        p = ngx_snprintf(msg, sizeof(msg) - 1, "the upstream refused "
                         "this credential: %i%s%V%s; nothing was stored "
                         "(\"probe\": false stores it untested)",
                         res->status, res->detail.len ? " (" : "",
                         &res->detail, res->detail.len ? ")" : "");

    } else {
        p = ngx_snprintf(msg, sizeof(msg) - 1, "the probe got no "
                         "answer: %V; nothing was stored (\"probe\": "
                         "false stores it untested)", &res->error);
    }

    ngx_http_tokenbiryani_add_str(e, "message", msg, p - msg);

    cJSON_AddItemToObject(root, "probe", aw->probed);
    aw->probed = NULL;

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_BAD_REQUEST, root);
}


static ngx_int_t
ngx_http_tokenbiryani_accounts_store(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw)
{
    aw->w.job.op = (aw->op == NGX_HTTP_TB_ACCT_REMOVE)
                   ? NGX_HTTP_TB_JOB_ACCOUNT_DELETE
                   : NGX_HTTP_TB_JOB_ACCOUNT_PUT;
    aw->w.job.u.record.create = (aw->op == NGX_HTTP_TB_ACCT_ADD);
    aw->w.job.u.record.name = (char *) aw->w.name.data;
    aw->w.job.u.record.spec = aw->spec;
    aw->w.job.u.record.sealed = aw->sealed;

    /* a removal the store has done already: the zone follows */
    aw->w.gone = (aw->op == NGX_HTTP_TB_ACCT_REMOVE);

    return ngx_http_tokenbiryani_admin_store(r, &aw->w) == NGX_DONE
           ? NGX_DONE : NGX_HTTP_INTERNAL_SERVER_ERROR;
}


/*
 * A row the zone could not take, removed from the store again: a job of
 * its own, on the heap (the request may be gone before it runs).
 */

typedef struct {
    ngx_http_tokenbiryani_job_t  job;
    u_char                       id[1];
} ngx_http_tokenbiryani_unstore_t;


static void
ngx_http_tokenbiryani_accounts_unstored(ngx_http_tokenbiryani_job_t *job)
{
    if (job->rc != TB_STORE_OK && job->rc != TB_STORE_NONE) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%s\" stays in the store "
                      "though it was not added (%s): it is loaded at the "
                      "next start", job->u.record.name, job->err);
    }

    ngx_free(job->data);
}


static void
ngx_http_tokenbiryani_accounts_unstore(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw)
{
    ngx_http_tokenbiryani_unstore_t    *u;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    u = ngx_calloc(sizeof(ngx_http_tokenbiryani_unstore_t) + aw->w.name.len,
                   r->connection->log);
    if (u == NULL) {
        return;
    }

    ngx_memcpy(u->id, aw->w.name.data, aw->w.name.len);

    u->job.op = NGX_HTTP_TB_JOB_ACCOUNT_DELETE;
    u->job.u.record.name = (char *) u->id;
    u->job.done = ngx_http_tokenbiryani_accounts_unstored;
    u->job.data = u;

    if (ngx_http_tokenbiryani_store_post(tmcf, &u->job) != NGX_OK) {
        ngx_free(u);
    }
}


/* the write into the zone, where every worker sees it, and the answer */
static ngx_int_t
ngx_http_tokenbiryani_accounts_apply(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w)
{
    ngx_uint_t                           rc, slot;
    tb_account_state_t                   s;
    ngx_http_tokenbiryani_acct_write_t  *aw;
    ngx_http_tokenbiryani_racct_view_t   v;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    aw = (ngx_http_tokenbiryani_acct_write_t *) w;

    if (aw->op == NGX_HTTP_TB_ACCT_REMOVE) {
        /* gone already if another request removed it meanwhile */
        (void) ngx_http_tokenbiryani_racct_delete(&tmcf->zone, aw->w.name.data,
                                                  aw->w.name.len, &slot);

        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "tokenbiryani: account \"%V\" removed by an operator",
                      &aw->w.name);

        ngx_http_tokenbiryani_accounts_sync(tmcf);

        return ngx_http_tokenbiryani_accounts_answer(r, aw, NGX_HTTP_OK);
    }

    ngx_memzero(&v, sizeof(v));

    v.id = aw->w.name;
    v.spec.data = (u_char *) aw->spec;
    v.spec.len = ngx_strlen(aw->spec);
    v.sealed.data = (u_char *) aw->sealed;
    v.sealed.len = ngx_strlen(aw->sealed);
    v.naddrs = aw->naddrs;
    ngx_memcpy(v.addrs, aw->addrs, sizeof(v.addrs));

    rc = ngx_http_tokenbiryani_racct_put(&tmcf->zone, &v, aw->fingerprint,
                                         aw->cf->accounts[0].replenishment,
                                         aw->op == NGX_HTTP_TB_ACCT_ADD,
                                         tmcf->max_accounts - tmcf->nyaml,
                                         &slot);

    if (rc == NGX_HTTP_TB_RKEY_EXISTS && aw->op == NGX_HTTP_TB_ACCT_ADD) {
        /*
         * The store took the id, so the account is this one: this
         * instance's subscriber may have read its announcement back into
         * the zone already
         */
        rc = ngx_http_tokenbiryani_racct_put(&tmcf->zone, &v,
                                             aw->fingerprint,
                                             aw->cf->accounts[0].replenishment,
                                             0,
                                             tmcf->max_accounts - tmcf->nyaml,
                                             &slot);
    }
    if (rc != NGX_HTTP_TB_RKEY_OK && aw->op == NGX_HTTP_TB_ACCT_ADD) {
        /* the store has a row the zone could not take: it goes too */
        ngx_http_tokenbiryani_accounts_unstore(r, aw);
    }

    switch (rc) {

    case NGX_HTTP_TB_RKEY_OK:
        break;

    case NGX_HTTP_TB_RKEY_EXISTS:
    case NGX_HTTP_TB_RKEY_NONE:
    case NGX_HTTP_TB_RKEY_STALE:
        return ngx_http_tokenbiryani_admin_refused(r, w, rc);

    case NGX_HTTP_TB_RKEY_FULL:
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                   "invalid_request_error", "the pool has "
                   "tokenbiryani_max_accounts (%ui) accounts: remove one or "
                   "raise the directive; nothing was added",
                   tmcf->max_accounts);

    default:
        return ngx_http_tokenbiryani_send_error(r,
                   NGX_HTTP_INSUFFICIENT_STORAGE, "api_error",
                   "the zone is full: make tokenbiryani_zone larger; "
                   "nothing was added");
    }

    if (aw->rotated) {
        /* a new credential: an account disabled for its old one serves */

        ngx_http_tokenbiryani_zone_snapshot(&tmcf->zone, slot, &s);

        if (s.disabled
            && ngx_strncmp(s.disabled_reason, "invalid_auth",
                           sizeof("invalid_auth") - 1) == 0)
        {
            ngx_http_tokenbiryani_zone_set_enabled(&tmcf->zone, slot, 1,
                                             ngx_http_tokenbiryani_now_ms());
        }
    }

    ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                  "tokenbiryani: account \"%V\" %s by an operator", &aw->w.name,
                  aw->op == NGX_HTTP_TB_ACCT_ADD ? "added"
                  : aw->rotated ? "changed, its credential rotated"
                  : "changed");

    ngx_http_tokenbiryani_accounts_sync(tmcf);

    return ngx_http_tokenbiryani_accounts_answer(r, aw,
                                   aw->op == NGX_HTTP_TB_ACCT_ADD
                                   ? NGX_HTTP_CREATED : NGX_HTTP_OK);
}


static ngx_int_t
ngx_http_tokenbiryani_accounts_answer(ngx_http_request_t *r,
    ngx_http_tokenbiryani_acct_write_t *aw, ngx_int_t status)
{
    tb_state_e                          state;
    cJSON                              *root;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (aw->op == NGX_HTTP_TB_ACCT_REMOVE) {
        root = cJSON_CreateObject();
        if (root == NULL
            || ngx_http_tokenbiryani_add_str(root, "deleted", aw->w.name.data,
                                             aw->w.name.len)
               == NULL)
        {
            return ngx_http_tokenbiryani_cjson_fail(root);
        }

        return ngx_http_tokenbiryani_send_cjson(r, status, root);
    }

    a = ngx_http_tokenbiryani_account_find(tmcf, aw->w.name.data,
                                           aw->w.name.len);

    if (a == NULL) {
        return ngx_http_tokenbiryani_send_error(r,
                   NGX_HTTP_INTERNAL_SERVER_ERROR, "api_error",
                   "account \"%V\" is stored but this worker cannot use it "
                   "(see the error log)", &aw->w.name);
    }

    root = ngx_http_tokenbiryani_admin_account_record(r, a,
                                               ngx_http_tokenbiryani_now_ms(),
                                               &state);
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (aw->probed) {
        cJSON_AddItemToObject(root, "probe", aw->probed);
        aw->probed = NULL;

    } else {
        cJSON_AddNullToObject(root, "probe");
    }

    return ngx_http_tokenbiryani_send_cjson(r, status, root);
}
