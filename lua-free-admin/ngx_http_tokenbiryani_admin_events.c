/*
 * tokenbiryani: GET /admin/events?since=ID&limit=N - the admission and
 * settlement events of every worker from the zone's ring, oldest first,
 * whatever the error_log level.  A poller passes the "next" of one answer
 * as the "since" of the next and misses nothing the ring still holds;
 * "dropped" says how many it missed because the ring turned over.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_events.h"
#include "ngx_http_tokenbiryani_error.h"


#define NGX_HTTP_TB_EVENTS_LIMIT       100
#define NGX_HTTP_TB_EVENTS_MAX         1000


static cJSON *ngx_http_tokenbiryani_event_json(ngx_http_request_t *r,
    const ngx_http_tokenbiryani_event_t *ev);
static cJSON *ngx_http_tokenbiryani_windows_json(cJSON *obj,
    const char *name, const int64_t *v);
static cJSON *ngx_http_tokenbiryani_object_event_json(cJSON *obj,
    const ngx_http_tokenbiryani_event_t *ev);


ngx_int_t
ngx_http_tokenbiryani_admin_events(ngx_http_request_t *r)
{
    uint64_t                            since, dropped, next;
    ngx_int_t                           rc, limit, v;
    ngx_str_t                           value;
    ngx_uint_t                          i, n;
    cJSON                              *root, *arr, *item;
    ngx_http_tokenbiryani_event_t      *evs;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V expects GET, not %V",
                   &r->uri, &r->method_name);
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    since = 0;
    limit = NGX_HTTP_TB_EVENTS_LIMIT;

    if (ngx_http_arg(r, (u_char *) "since", 5, &value) == NGX_OK) {
        v = ngx_atoi(value.data, value.len);

        if (v == NGX_ERROR) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error",
                       "since: expected an event id (a non-negative "
                       "integer)");
        }

        since = (uint64_t) v;
    }

    rc = ngx_http_tokenbiryani_admin_limit(r, &limit, 0);
    if (rc != NGX_OK) {
        return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    limit = ngx_min(limit, NGX_HTTP_TB_EVENTS_MAX);

    evs = ngx_palloc(r->pool, limit * sizeof(ngx_http_tokenbiryani_event_t));
    if (evs == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_tokenbiryani_events_read(&tmcf->zone, since, evs,
                                          (ngx_uint_t) limit, &dropped);

    arr = ngx_http_tokenbiryani_json_doc(&root, "events",
                                         cJSON_AddArrayToObject);
    if (arr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    next = since;

    for (i = 0; i < n; i++) {
        item = ngx_http_tokenbiryani_event_json(r, &evs[i]);
        if (item == NULL) {
            return ngx_http_tokenbiryani_cjson_fail(root);
        }

        cJSON_AddItemToArray(arr, item);
        next = evs[i].seq;
    }

    if (n == 0 && dropped) {
        next = since + dropped;
    }

    if (cJSON_AddNumberToObject(root, "next", (double) next) == NULL
        || cJSON_AddNumberToObject(root, "dropped", (double) dropped) == NULL
        || cJSON_AddNumberToObject(root, "last", (double)
               ngx_http_tokenbiryani_events_last(&tmcf->zone)) == NULL)
    {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}


static cJSON *
ngx_http_tokenbiryani_event_json(ngx_http_request_t *r,
    const ngx_http_tokenbiryani_event_t *ev)
{
    const char                         *id;
    cJSON                              *obj, *u;
    const tb_rule_t                    *rule;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                at[40];
    char                                rid[NGX_HTTP_TB_REQUEST_ID_LEN + 1];
    u_char                              reason[128];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    obj = cJSON_CreateObject();
    if (obj == NULL) {
        return NULL;
    }

    ngx_memcpy(rid, ev->request_id, NGX_HTTP_TB_REQUEST_ID_LEN);
    rid[NGX_HTTP_TB_REQUEST_ID_LEN] = '\0';

    tb_format_rfc3339(ev->at_ms, at, sizeof(at));

    id = ngx_http_tokenbiryani_zone_slot_id(&tmcf->zone, ev->slot);

    if (cJSON_AddNumberToObject(obj, "id", (double) ev->seq) == NULL
        || cJSON_AddStringToObject(obj, "at", at) == NULL
        || cJSON_AddStringToObject(obj, "type",
               ngx_http_tokenbiryani_event_type_name(ev)) == NULL
        || (rid[0] ? cJSON_AddStringToObject(obj, "request_id", rid)
                   : cJSON_AddNullToObject(obj, "request_id")) == NULL
        || (ev->type != NGX_HTTP_TB_EVENT_OBJECT
            && cJSON_AddNumberToObject(obj, "attempt", ev->attempt) == NULL)
        || (id ? cJSON_AddStringToObject(obj, "account", id)
               : cJSON_AddNullToObject(obj, "account")) == NULL)
    {
        goto failed;
    }

    if (ev->type == NGX_HTTP_TB_EVENT_OBJECT) {
        if (ngx_http_tokenbiryani_object_event_json(obj, ev) == NULL) {
            goto failed;
        }

    } else if (ev->type == NGX_HTTP_TB_EVENT_REFUSAL) {

        /* a key refused at the door: its name, if it had one */

        if (cJSON_AddNumberToObject(obj, "status", ev->status) == NULL
            || cJSON_AddStringToObject(obj, "reason",
                   ngx_http_tokenbiryani_event_what_name(ev)) == NULL
            || (ev->key[0]
                ? ngx_http_tokenbiryani_add_str(obj, "key", (u_char *) ev->key,
                      ngx_strnlen((u_char *) ev->key, TB_ID_MAX))
                : cJSON_AddNullToObject(obj, "key")) == NULL)
        {
            goto failed;
        }

    } else if (ev->type == NGX_HTTP_TB_EVENT_ADMISSION) {
        (void) ngx_http_tokenbiryani_event_reason(ev, reason, sizeof(reason));

        if (ngx_http_tokenbiryani_windows_json(obj, "need", ev->need) == NULL
            || (ev->slot >= 0
                ? ngx_http_tokenbiryani_windows_json(obj, "remaining_before",
                                                     ev->remaining)
                : cJSON_AddNullToObject(obj, "remaining_before")) == NULL
            || cJSON_AddStringToObject(obj, "decision",
                   ngx_http_tokenbiryani_event_what_name(ev)) == NULL
            || cJSON_AddStringToObject(obj, "reason", (char *) reason) == NULL
            || cJSON_AddNumberToObject(obj, "soonest_ms",
                                       (double) ev->soonest_ms) == NULL)
        {
            goto failed;
        }

    } else {
        rule = ev->kind < TB_NKINDS ? &tb_rules[ev->kind] : NULL;

        if (cJSON_AddNumberToObject(obj, "status", ev->status) == NULL
            || cJSON_AddStringToObject(obj, "class",
                   rule ? rule->name : "cancelled") == NULL
            || cJSON_AddStringToObject(obj, "account_action",
                   rule ? tb_account_action_name(rule->account) : "none")
               == NULL
            || cJSON_AddStringToObject(obj, "breaker",
                   rule ? tb_outcome_name(rule->breaker) : "neutral") == NULL)
        {
            goto failed;
        }

        u = cJSON_AddObjectToObject(obj, "usage");

        if (u == NULL
            || cJSON_AddNumberToObject(u, "input_tokens",
                                       (double) ev->usage[0]) == NULL
            || cJSON_AddNumberToObject(u, "output_tokens",
                                       (double) ev->usage[1]) == NULL
            || cJSON_AddNumberToObject(u, "cache_read_input_tokens",
                                       (double) ev->usage[2]) == NULL
            || cJSON_AddNumberToObject(u, "cache_creation_input_tokens",
                                       (double) ev->usage[3]) == NULL
            || (ev->retry_after_ms >= 0
                ? cJSON_AddNumberToObject(obj, "retry_after_ms",
                                          (double) ev->retry_after_ms)
                : cJSON_AddNullToObject(obj, "retry_after_ms")) == NULL
            || cJSON_AddNumberToObject(obj, "latency_ms",
                                       (double) ev->latency_ms) == NULL
            || cJSON_AddStringToObject(obj, "next",
                   ngx_http_tokenbiryani_event_what_name(ev)) == NULL)
        {
            goto failed;
        }
    }

    if (cJSON_AddNumberToObject(obj, "worker", (double) ev->pid) == NULL) {
        goto failed;
    }

    return obj;

failed:

    cJSON_Delete(obj);

    return NULL;
}


/* {"requests":..,"input_tokens":..,"output_tokens":..}, null if unknown */

static cJSON *
ngx_http_tokenbiryani_windows_json(cJSON *obj, const char *name,
    const int64_t *v)
{
    cJSON       *w;
    ngx_uint_t   i;

    static const char  *names[TB_NWINDOWS] = {
        "requests", "input_tokens", "output_tokens"
    };

    w = cJSON_AddObjectToObject(obj, name);
    if (w == NULL) {
        return NULL;
    }

    for (i = 0; i < TB_NWINDOWS; i++) {
        if ((v[i] == TB_UNKNOWN
             ? cJSON_AddNullToObject(w, names[i])
             : cJSON_AddNumberToObject(w, names[i], (double) v[i]))
            == NULL)
        {
            return NULL;
        }
    }

    return w;
}


/*
 * A batch's or a file's: "batch_id" or "file_id", its stage, and a
 * batch's processing_status, request_counts, what it holds here and
 * what it was charged (USD)
 */

static cJSON *
ngx_http_tokenbiryani_object_event_json(cJSON *obj,
    const ngx_http_tokenbiryani_event_t *ev)
{
    cJSON       *c;
    ngx_uint_t   i;

    if (ngx_http_tokenbiryani_add_str(obj,
            ev->kind == NGX_HTTP_TB_OBJECT_FILE ? "file_id" : "batch_id",
            (u_char *) ev->obj.id,
            ngx_strnlen((u_char *) ev->obj.id, NGX_HTTP_TB_EVENT_ID_MAX))
           == NULL
        || cJSON_AddStringToObject(obj, "stage",
               ngx_http_tokenbiryani_event_what_name(ev)) == NULL)
    {
        return NULL;
    }

    if (ev->kind == NGX_HTTP_TB_OBJECT_FILE) {
        return obj;
    }

    if (cJSON_AddStringToObject(obj, "processing_status",
                                tb_batch_status_name(ev->status)) == NULL
        || (c = cJSON_AddObjectToObject(obj, "request_counts")) == NULL)
    {
        return NULL;
    }

    for (i = 0; i < TB_BATCH_NCOUNTS; i++) {
        if (ngx_http_tokenbiryani_add_number_or_null(c,
                tb_batch_count_name(i), ev->obj.counts[i] >= 0,
                (double) ev->obj.counts[i]) == NULL)
        {
            return NULL;
        }
    }

    if (cJSON_AddNumberToObject(obj, "held_usd",
                                (double) ev->obj.reserved / 1e9) == NULL
        || cJSON_AddNumberToObject(obj, "charged_usd",
                                   (double) ev->obj.charged / 1e9) == NULL)
    {
        return NULL;
    }

    return obj;
}
