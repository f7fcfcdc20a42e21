/*
 * /admin/settings and /admin/reload.
 *
 *   GET  /admin/settings   what the gateway runs now, each value with where
 *                          it comes from: default, file or runtime
 *   POST /admin/settings   changes what can change at runtime (the
 *                          strategy), for every worker, kept in the store
 *   POST /admin/reload     has the reload helper read the YAML file as
 *                          nginx -s reload would; a file that does not
 *                          load changes nothing and is answered with the
 *                          loader's error and its line, one that loads is
 *                          applied by signalling the master
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_config.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_admin.h"


/* what GET /admin/settings lists: a section ("routing.") or one setting */
static const char *const  ngx_http_tokenbiryani_settings_shown[] = {
    "routing.", "retry.", "breaker.", "queue.", "store.backend",
    "observability.event_buffer", NULL
};


typedef struct {
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    cJSON                                *obj;
} ngx_http_tokenbiryani_settings_list_t;


typedef struct {
    ngx_http_tokenbiryani_admin_write_t   w;
    u_char                               *strategy;  /* NULL: the file's */
    uint64_t                              rgen;      /* its record's */
    uint64_t                              ticket;    /* the reload's */
    ngx_msec_t                            asked;
    ngx_event_t                           wait;
} ngx_http_tokenbiryani_settings_write_t;


#define NGX_HTTP_TB_RELOAD_POLL_MS     20
#define NGX_HTTP_TB_RELOAD_WAIT_MS     15000


static ngx_int_t ngx_http_tokenbiryani_settings_write(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w, u_char *body, size_t len);
static ngx_int_t ngx_http_tokenbiryani_settings_apply(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w);
static void ngx_http_tokenbiryani_reload_body(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_reload_wait(ngx_event_t *ev);
static ngx_int_t ngx_http_tokenbiryani_settings_get(ngx_http_request_t *r);
static int ngx_http_tokenbiryani_setting_json(void *data, const char *path,
    tb_setting_type_e type, const void *value);
static ngx_int_t ngx_http_tokenbiryani_strategy_setting(
    ngx_http_tokenbiryani_main_conf_t *tmcf, cJSON *item);
static int ngx_http_tokenbiryani_setting_named(void *data, const char *path,
    tb_setting_type_e type, const void *value);


/* a setting's write: any no of the store is its failure */
static const ngx_http_tokenbiryani_admin_resource_t
    ngx_http_tokenbiryani_setting_resource =
{
    NULL, NULL,
    "nothing was changed: the store cannot be written",
    ngx_http_tokenbiryani_settings_write,
    ngx_http_tokenbiryani_settings_apply,
    NULL
};


ngx_int_t
ngx_http_tokenbiryani_admin_settings(ngx_http_request_t *r)
{
    ngx_http_tokenbiryani_settings_write_t  *sw;

    if (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) {
        return ngx_http_tokenbiryani_settings_get(r);
    }

    if (r->method != NGX_HTTP_POST) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V expects GET or POST, not %V",
                   &r->uri, &r->method_name);
    }

    sw = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_settings_write_t));
    if (sw == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    sw->w.res = &ngx_http_tokenbiryani_setting_resource;

    return ngx_http_tokenbiryani_admin_write(r, &sw->w);
}


ngx_int_t
ngx_http_tokenbiryani_admin_reload(ngx_http_request_t *r)
{
    if (r->method != NGX_HTTP_POST) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V expects POST, not %V",
                   &r->uri, &r->method_name);
    }

    return ngx_http_tokenbiryani_admin_read_body(r,
                                           ngx_http_tokenbiryani_reload_body);
}


/* one setting of those shown, its value and where the value comes from */
static int
ngx_http_tokenbiryani_setting_json(void *data, const char *path,
    tb_setting_type_e type, const void *value)
{
    ngx_http_tokenbiryani_settings_list_t *sl = data;

    size_t              n;
    cJSON              *item, *v;
    const char *const  *s;

    for (s = ngx_http_tokenbiryani_settings_shown; *s; s++) {
        n = ngx_strlen(*s);

        if ((*s)[n - 1] == '.' ? ngx_strncmp(path, *s, n) == 0
                               : ngx_strcmp(path, *s) == 0)
        {
            break;
        }
    }

    if (*s == NULL) {
        return 0;
    }

    item = cJSON_AddObjectToObject(sl->obj, path);
    if (item == NULL) {
        return 1;
    }

    if (ngx_strcmp(path, "routing.strategy") == 0) {
        return ngx_http_tokenbiryani_strategy_setting(sl->tmcf, item)
               != NGX_OK;
    }

    switch (type) {

    case TB_SETTING_INT:
        v = cJSON_CreateNumber((double) *(const int64_t *) value);
        break;

    case TB_SETTING_NUM:
        v = cJSON_CreateNumber(*(const double *) value);
        break;

    default:
        v = value ? cJSON_CreateString(value) : cJSON_CreateNull();
        break;
    }

    return !cJSON_AddItemToObject(item, "value", v)
           || cJSON_AddStringToObject(item, "source",
                  tb_config_written(sl->tmcf->tbcf, path) ? "file"
                                                          : "default")
              == NULL
           || cJSON_AddBoolToObject(item, "settable", 0) == NULL;
}


/* the strategy: the one setting a runtime write can change */
static ngx_int_t
ngx_http_tokenbiryani_strategy_setting(ngx_http_tokenbiryani_main_conf_t *tmcf,
    cJSON *item)
{
    ngx_uint_t            i, plugin;
    cJSON                *opts;
    const tb_strategy_t  *st;

    if (cJSON_AddStringToObject(item, "value",
            ngx_http_tokenbiryani_strategy(tmcf)->name) == NULL
        || cJSON_AddStringToObject(item, "source",
               ngx_http_tokenbiryani_strategy_is_runtime(tmcf)
               ? "runtime"
               : tb_config_written(tmcf->tbcf, "routing.strategy")
                 ? "file" : "default") == NULL
        || cJSON_AddStringToObject(item, "file_value",
                                   tmcf->strategy->name) == NULL
        || cJSON_AddBoolToObject(item, "settable", 1) == NULL
        || (opts = cJSON_AddArrayToObject(item, "options")) == NULL)
    {
        return NGX_ERROR;
    }

    for (i = 0; (st = ngx_http_tokenbiryani_strategy_nth(tmcf, i, &plugin));
         i++)
    {
        cJSON_AddItemToArray(opts, cJSON_CreateString(st->name));
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_settings_get(ngx_http_request_t *r)
{
    cJSON                                  *root, *item;
    ngx_http_tokenbiryani_zone_stats_t      zs;
    ngx_http_tokenbiryani_main_conf_t      *tmcf;
    ngx_http_tokenbiryani_settings_list_t   sl;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    sl.tmcf = tmcf;
    sl.obj = ngx_http_tokenbiryani_json_doc(&root, "settings",
                                            cJSON_AddObjectToObject);
    if (sl.obj == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (tb_config_each(tmcf->tbcf, ngx_http_tokenbiryani_setting_json, &sl)
        != 0)
    {
        goto failed;
    }

    /* the prices every cost and cap is counted by, and what they cannot */

    item = cJSON_AddObjectToObject(root, "pricing");
    if (item == NULL) {
        goto failed;
    }

    if (tmcf->builtin) {
        cJSON_AddStringToObject(item, "builtin_as_of", tmcf->builtin->as_of);
        cJSON_AddStringToObject(item, "builtin_source",
                                tmcf->builtin->source);
        cJSON_AddNumberToObject(item, "builtin_models",
                                (double) tmcf->builtin->n);

    } else {
        cJSON_AddNullToObject(item, "builtin_as_of");
    }

    cJSON_AddNumberToObject(item, "file_models", (double) tmcf->prices.n);
    cJSON_AddStringToObject(item, "unpriced",
        (tmcf->builtin || tmcf->prices.n)
        ? "a model no entry prices has an unknown cost: it is counted as "
          "unpriced, never as $0, and spend caps cannot count it"
        : "no prices: every cost is unknown and no spend cap can count "
          "anything (set pricing: builtin)");

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    if (ngx_http_tokenbiryani_add_str(root, "config_file",
                                      tmcf->config_file.data,
                                      tmcf->config_file.len) == NULL
        || cJSON_AddNumberToObject(root, "config_generation",
                                   (double) zs.generation) == NULL)
    {
        goto failed;
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    return ngx_http_tokenbiryani_cjson_fail(root);
}


/* the body read: the reload helper asked to read the file */
static void
ngx_http_tokenbiryani_reload_body(ngx_http_request_t *r)
{
    ngx_int_t                                rc;
    ngx_http_tokenbiryani_main_conf_t       *tmcf;
    ngx_http_tokenbiryani_settings_write_t  *sw;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    sw = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_settings_write_t));
    if (sw == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    sw->w.request = r;

    if (ngx_process != NGX_PROCESS_WORKER) {
        rc = ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                 "invalid_request_error", "this nginx runs without a "
                 "master process (master_process off): restart it to "
                 "apply the file");
        ngx_http_finalize_request(r, rc);
        return;
    }

    sw->ticket = ngx_http_tokenbiryani_reload_ticket(&tmcf->zone);

    if (ngx_http_tokenbiryani_reloader_ask(tmcf) != NGX_OK) {
        rc = ngx_http_tokenbiryani_send_error(r,
                 NGX_HTTP_INTERNAL_SERVER_ERROR, "api_error",
                 "the reload helper cannot be asked: run nginx -s reload");
        ngx_http_finalize_request(r, rc);
        return;
    }

    /* its answer comes through the zone: looked for on a timer */

    sw->asked = ngx_current_msec;
    sw->wait.handler = ngx_http_tokenbiryani_reload_wait;
    sw->wait.data = r->connection;
    sw->wait.log = r->connection->log;
    sw->wait.cancelable = 1;

    ngx_add_timer(&sw->wait, NGX_HTTP_TB_RELOAD_POLL_MS);
}


/* stops tb_config_each() at the setting named data */
static int
ngx_http_tokenbiryani_setting_named(void *data, const char *path,
    tb_setting_type_e type, const void *value)
{
    return ngx_strcmp(path, (const char *) data) == 0;
}


/* the change checked, then written: NGX_DONE, or a status */
static ngx_int_t
ngx_http_tokenbiryani_settings_write(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w, u_char *body, size_t len)
{
    size_t                                  plen;
    ngx_str_t                               rec;
    ngx_int_t                               rc;
    ngx_uint_t                              failed;
    cJSON                                  *root, *v;
    const tb_strategy_t                    *st;
    ngx_http_tokenbiryani_main_conf_t      *tmcf;
    ngx_http_tokenbiryani_settings_write_t *sw;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    sw = (ngx_http_tokenbiryani_settings_write_t *) w;

    root = cJSON_ParseWithLength((char *) body, len);

    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "the body must be a JSON object, "
                   "such as {\"routing.strategy\": \"headroom\"}");
    }

    if (cJSON_GetArraySize(root) == 0) {
        cJSON_Delete(root);
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error",
                   "nothing to change: name a setting");
    }

    rc = NGX_OK;
    failed = 0;

    cJSON_ArrayForEach(v, root) {
        if (ngx_strcmp(v->string, "routing.strategy") == 0
            || ngx_strcmp(v->string, "strategy") == 0)
        {
            if (cJSON_IsNull(v)) {
                sw->strategy = NULL;
                continue;
            }

            st = cJSON_IsString(v)
                 ? ngx_http_tokenbiryani_find_strategy(tmcf, v->valuestring)
                 : NULL;

            if (st == NULL) {
                failed = 1;
                rc = ngx_http_tokenbiryani_send_error(r,
                         NGX_HTTP_BAD_REQUEST, "invalid_request_error",
                         "routing.strategy must name a strategy this gateway "
                         "has (GET /admin/settings lists them), or be null "
                         "for the file's");
                break;
            }

            sw->strategy = (u_char *) st->name;
            continue;
        }

        failed = 1;

        if (tb_config_each(tmcf->tbcf, ngx_http_tokenbiryani_setting_named,
                           v->string)
            != 0)
        {
            rc = ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                     "invalid_request_error", "%s is the file's: change it "
                     "there and POST /admin/reload", v->string);
        } else {
            rc = ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                     "invalid_request_error", "unknown setting \"%*s\" "
                     "(settable at runtime: routing.strategy)",
                     ngx_min(ngx_strlen(v->string), 64), v->string);
        }

        break;
    }

    cJSON_Delete(root);

    if (failed) {
        return rc;
    }

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        /* the zone is all there is: applied now, in this handler */
        return ngx_http_tokenbiryani_settings_apply(r, w);
    }

    /* the record as the store keeps it: its name, its value, authenticated */

    if (ngx_http_tokenbiryani_record_wrap(r->pool, tmcf, TB_REC_SETTING,
            (u_char *) "setting.routing.strategy",
            sizeof("setting.routing.strategy") - 1, NULL, 0,
            sw->strategy ? sw->strategy : (u_char *) "",
            sw->strategy ? ngx_strlen(sw->strategy) : 0, &rec)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    (void) tb_rec_payload((char *) rec.data, rec.len, &plen, &sw->rgen);

    w->job.op = NGX_HTTP_TB_JOB_SETTING;
    w->job.u.record.name = "setting.routing.strategy";
    w->job.u.record.spec = (char *) rec.data;

    if (ngx_http_tokenbiryani_admin_store(r, w) != NGX_DONE) {
        return ngx_http_tokenbiryani_send_error(r,
                   NGX_HTTP_SERVICE_UNAVAILABLE, "api_error",
                   "this nginx has no thread pool to do it in");
    }

    return NGX_DONE;
}


/* the strategy into the zone, for every worker, and the settings shown */
static ngx_int_t
ngx_http_tokenbiryani_settings_apply(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w)
{
    ngx_http_tokenbiryani_main_conf_t       *tmcf;
    ngx_http_tokenbiryani_settings_write_t  *sw;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    sw = (ngx_http_tokenbiryani_settings_write_t *) w;

    if (ngx_http_tokenbiryani_settings_set_strategy(&tmcf->zone,
            sw->strategy, sw->strategy ? ngx_strlen(sw->strategy) : 0,
            sw->rgen)
        == NGX_HTTP_TB_RKEY_STALE)
    {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                   "invalid_request_error", "routing.strategy was set "
                   "meanwhile by another instance: read it and try again");
    }

    ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                  "tokenbiryani: routing.strategy set to \"%s\" by an "
                  "operator", sw->strategy ? (char *) sw->strategy
                                           : tmcf->strategy->name);

    return ngx_http_tokenbiryani_settings_get(r);
}


/* the reload helper's answer to this request's ticket, or a timeout */
static void
ngx_http_tokenbiryani_reload_wait(ngx_event_t *ev)
{
    ngx_int_t                                rc;
    ngx_str_t                                json;
    ngx_uint_t                               ok;
    ngx_connection_t                        *c;
    ngx_http_request_t                      *r;
    ngx_http_tokenbiryani_main_conf_t       *tmcf;
    ngx_http_tokenbiryani_settings_write_t  *sw;
    u_char                                   text[4096];

    sw = (ngx_http_tokenbiryani_settings_write_t *)
         ((u_char *) ev - offsetof(ngx_http_tokenbiryani_settings_write_t,
                                   wait));
    r = sw->w.request;
    c = r->connection;
    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (ngx_http_tokenbiryani_reload_result(&tmcf->zone, sw->ticket, &ok,
                                            text, sizeof(text))
        == NGX_AGAIN)
    {
        if (ngx_current_msec - sw->asked < NGX_HTTP_TB_RELOAD_WAIT_MS) {
            ngx_add_timer(ev, NGX_HTTP_TB_RELOAD_POLL_MS);
            return;
        }

        rc = ngx_http_tokenbiryani_send_error(r,
                 NGX_HTTP_GATEWAY_TIME_OUT, "api_error", "the reload helper "
                 "did not answer within %M ms: see the error log, or run "
                 "nginx -s reload", (ngx_msec_t) NGX_HTTP_TB_RELOAD_WAIT_MS);
        goto done;
    }

    if (!ok) {
        rc = ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                 "invalid_request_error", "%s", text);
        goto done;
    }

    ngx_log_error(NGX_LOG_NOTICE, c->log, 0,
                  "tokenbiryani: reload asked by an operator: the file "
                  "loads, the master is signalled");

    json.data = ngx_pnalloc(r->pool, ngx_strlen(text));
    if (json.data == NULL) {
        rc = NGX_HTTP_INTERNAL_SERVER_ERROR;
        goto done;
    }

    json.len = ngx_strlen(text);
    ngx_memcpy(json.data, text, json.len);

    rc = ngx_http_tokenbiryani_send_json(r, NGX_HTTP_OK, &json);

done:

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}
