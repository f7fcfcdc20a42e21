/*
 * tokenbiryani: the probe of one upstream account (the doctor check).
 *
 * One POST {path_prefix}/v1/messages asking for a single token, a call of
 * the worker's own (ngx_http_tokenbiryani_call.c) that the admin request
 * waits for, and its result as the admin answer's object.
 */


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_admin_probe.h"


/* a probe, for the request that waits for it */
typedef struct {
    ngx_http_request_t                    *request;
    ngx_http_tokenbiryani_call_t          *call;
    ngx_http_tokenbiryani_probe_done_pt    done;
    void                                  *data;
} ngx_http_tokenbiryani_probe_t;


static void ngx_http_tokenbiryani_probe_done(
    ngx_http_tokenbiryani_call_result_t *res, void *data);
static void ngx_http_tokenbiryani_probe_cleanup(void *data);


static const char  *ngx_http_tokenbiryani_probe_windows[] = {
    "requests", "input_tokens", "output_tokens"
};

static const char  *ngx_http_tokenbiryani_probe_fields[] = {
    "limit", "remaining", "reset_in_seconds"
};


ngx_int_t
ngx_http_tokenbiryani_probe(ngx_http_request_t *r,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_call_target_t *t, const ngx_str_t *model,
    ngx_msec_t timeout, ngx_http_tokenbiryani_probe_done_pt done,
    void *data)
{
    char                                 *text, name[256];
    size_t                                len;
    cJSON                                *body, *msgs, *msg;
    ngx_pool_cleanup_t                   *cln;
    ngx_http_tokenbiryani_probe_t        *p;
    ngx_http_tokenbiryani_call_target_t   ct;

    /* the body, {"model", "max_tokens": 1, "messages": [ping]}: cJSON
     * escapes the model */

    body = cJSON_CreateObject();
    if (body == NULL) {
        return NGX_ERROR;
    }

    len = ngx_min(model->len, sizeof(name) - 1);
    ngx_memcpy(name, model->data, len);
    name[len] = '\0';

    msgs = NULL;
    msg = NULL;

    if (cJSON_AddStringToObject(body, "model", name) == NULL
        || cJSON_AddNumberToObject(body, "max_tokens", 1) == NULL
        || (msgs = cJSON_AddArrayToObject(body, "messages")) == NULL
        || (msg = cJSON_CreateObject()) == NULL)
    {
        cJSON_Delete(body);
        return NGX_ERROR;
    }

    cJSON_AddItemToArray(msgs, msg);

    if (cJSON_AddStringToObject(msg, "role", "user") == NULL
        || cJSON_AddStringToObject(msg, "content", "ping") == NULL)
    {
        cJSON_Delete(body);
        return NGX_ERROR;
    }

    text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);

    if (text == NULL) {
        return NGX_ERROR;
    }

    p = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_probe_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);

    if (p == NULL || cln == NULL) {
        cJSON_free(text);
        return NGX_ERROR;
    }

    p->request = r;
    p->done = done;
    p->data = data;

    ct = *t;
    ngx_str_set(&ct.method, "POST");
    ngx_str_set(&ct.path, "/v1/messages");
    ct.body.data = (u_char *) text;
    ct.body.len = ngx_strlen(text);
    ct.what = "probe";
    ct.sink = NULL;

    p->call = ngx_http_tokenbiryani_call(r->pool, r->connection->log, tmcf,
                                         &ct, timeout,
                                         ngx_http_tokenbiryani_probe_done, p);
    cJSON_free(text);

    if (p->call == NULL) {
        return NGX_ERROR;
    }

    /* a request that ends before the probe takes the probe with it */

    cln->handler = ngx_http_tokenbiryani_probe_cleanup;
    cln->data = p;

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_probe_done(ngx_http_tokenbiryani_call_result_t *res,
    void *data)
{
    ngx_http_tokenbiryani_probe_t *p = data;

    p->call = NULL;
    p->done(p->request, res, p->data);
}


static void
ngx_http_tokenbiryani_probe_cleanup(void *data)
{
    ngx_http_tokenbiryani_probe_t *p = data;

    if (p->call) {
        ngx_http_tokenbiryani_call_cancel(p->call);
        p->call = NULL;
    }
}


cJSON *
ngx_http_tokenbiryani_probe_json(
    const ngx_http_tokenbiryani_call_result_t *res)
{
    char          consequence[512];
    u_char       *last;
    int64_t       v;
    ngx_uint_t    i, w, f, present, ok, failed, nh;
    ngx_str_t         *names;
    const ngx_str_t   *values;
    const char   *what, *limits, *field;
    cJSON        *root, *arr, *item, *parsed, *win;

    ok = (res->status >= 200 && res->status < 300) || res->status == 429;

    present = 0;

    for (i = 0; i < NGX_HTTP_TB_RL_NHEADERS; i++) {
        present += (res->values[i].len != 0);
    }

    root = cJSON_CreateObject();
    if (root == NULL) {
        return NULL;
    }

    failed = (cJSON_AddBoolToObject(root, "ok", ok) == NULL
              || (res->status
                  ? cJSON_AddNumberToObject(root, "status",
                                            (double) res->status)
                  : cJSON_AddNullToObject(root, "status")) == NULL
              || cJSON_AddNumberToObject(root, "latency_ms",
                                         (double) res->latency_ms) == NULL
              || (res->error.len
                  ? ngx_http_tokenbiryani_add_str(root, "error",
                                                  res->error.data,
                                                  res->error.len)
                  : cJSON_AddNullToObject(root, "error")) == NULL
              || (res->detail.len
                  ? ngx_http_tokenbiryani_add_str(root, "detail",
                                                  res->detail.data,
                                                  res->detail.len)
                  : cJSON_AddNullToObject(root, "detail")) == NULL
              || cJSON_AddStringToObject(root, "family",
                                         present ? "limits"
                                         : res->unified ? "unified" : "none")
                 == NULL);

    if (failed) {
        goto failed;
    }

    /* the nine (a subscription's answer: its six): which came back, as
     * they came */

    if (!present && res->unified) {
        names = ngx_http_tokenbiryani_unified_names;
        values = res->uvalues;
        nh = NGX_HTTP_TB_UNI_NHEADERS;

    } else {
        names = ngx_http_tokenbiryani_ratelimit_names;
        values = res->values;
        nh = NGX_HTTP_TB_RL_NHEADERS;
    }

    arr = cJSON_AddArrayToObject(root, "checked");
    if (arr == NULL) {
        goto failed;
    }

    for (i = 0; i < nh; i++) {
        item = ngx_http_tokenbiryani_json_push(arr);

        if (item == NULL
            || ngx_http_tokenbiryani_add_str(item, "header", names[i].data,
                                             names[i].len) == NULL
            || cJSON_AddBoolToObject(item, "present", values[i].len != 0)
               == NULL
            || (values[i].len
                ? ngx_http_tokenbiryani_add_str(item, "value",
                                                values[i].data,
                                                values[i].len)
                : cJSON_AddNullToObject(item, "value")) == NULL)
        {
            goto failed;
        }
    }

    arr = cJSON_AddArrayToObject(root, "missing");
    if (arr == NULL) {
        goto failed;
    }

    for (i = 0; i < nh; i++) {
        if (values[i].len) {
            continue;
        }

        item = cJSON_CreateString((char *) names[i].data);
        if (item == NULL) {
            goto failed;
        }

        cJSON_AddItemToArray(arr, item);
    }

    /* what the mirror would read of them */

    parsed = cJSON_AddObjectToObject(root, "parsed");
    if (parsed == NULL) {
        goto failed;
    }

    for (w = 0; w < TB_NWINDOWS; w++) {
        win = cJSON_AddObjectToObject(parsed,
                                      ngx_http_tokenbiryani_probe_windows[w]);
        if (win == NULL) {
            goto failed;
        }

        for (f = 0; f < TB_RL_NFIELDS; f++) {
            field = ngx_http_tokenbiryani_probe_fields[f];

            if (!(res->obs.has & (1u << (w * TB_RL_NFIELDS + f)))) {
                item = cJSON_AddNullToObject(win, field);

            } else if (f == TB_RL_RESET) {
                /* an instant: how far it was past the response */
                v = res->obs.v[w][f] - res->observed_ms;
                item = cJSON_AddNumberToObject(win, field,
                                               v > 0 ? (double) v / 1000 : 0);

            } else {
                item = cJSON_AddNumberToObject(win, field,
                                               (double) res->obs.v[w][f]);
            }

            if (item == NULL) {
                goto failed;
            }
        }
    }

    if ((res->obs.retry_after_ms >= 0
         ? cJSON_AddNumberToObject(root, "retry_after_seconds",
                                   (double) res->obs.retry_after_ms / 1000)
         : cJSON_AddNullToObject(root, "retry_after_seconds")) == NULL
        || (res->organization.len
            ? ngx_http_tokenbiryani_add_str(root, "organization_id",
                                            res->organization.data,
                                            res->organization.len)
            : cJSON_AddNullToObject(root, "organization_id")) == NULL)
    {
        goto failed;
    }

    /* what it means for routing, in a sentence */

    if (present == NGX_HTTP_TB_RL_NHEADERS) {
        limits = "routing sees this account's limits";

    } else if (present) {
        limits = "only some limit headers came back: the windows without "
                 "them are routed as if full";

    } else if (res->unified) {
        /* a subscription's (type oauth): routed on its tightest window */
        limits = res->uvalues[1].len && res->uvalues[4].len
                 ? "a subscription's windows came back: routing reads the "
                   "tightest of its 5-hour and 7-day windows"
                 : "only some of a subscription's window headers came back: "
                   "routing reads those there are";

    } else {
        limits = "no limit header came back: the account is routed as if "
                 "full until one does";
    }

    what = NULL;

    if (res->status == 0) {
        limits = "no response: every request routed to this account would "
                 "fail the same way";

    } else if (res->status == 401 || res->status == 403) {
        what = "the credential was refused: every request routed to this "
               "account would fail";

    } else if (res->status == 429) {
        what = "the credential works, but the account is rate limited now";

    } else if (!ok) {
        what = "the upstream answered with an error: requests routed to this "
               "account may fail the same way";
    }

    if (what) {
        last = ngx_snprintf((u_char *) consequence, sizeof(consequence) - 1,
                            "%s; %s", what, limits);

    } else {
        last = ngx_snprintf((u_char *) consequence, sizeof(consequence) - 1,
                            "%s", limits);
    }

    *last = '\0';

    if (cJSON_AddStringToObject(root, "consequence", consequence) == NULL) {
        goto failed;
    }

    return root;

failed:

    cJSON_Delete(root);

    return NULL;
}
