/*
 * GET /admin/batches and GET /admin/files: every batch or file the gateway
 * keeps, newest first - which key made it, which account holds it, what
 * it is - and, for a batch, its state, its counts as last read, what it
 * holds on the ledgers and what it was charged.
 *
 *   ?key=<name>     one key's only
 *   ?limit=<n>      1 to 1000, 100 by default
 *   ?after_id=<id>  the page after that one
 */


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_error.h"
#include "tb_parse.h"
#include "tb_hash.h"


#define NGX_HTTP_TB_ADMIN_OBJECTS_MAX  1000


static cJSON *
ngx_http_tokenbiryani_object_admin_json(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_object_view_t *v)
{
    cJSON       *obj, *c;
    ngx_uint_t   i;
    const char  *account;
    char         at[32], seen[32];

    obj = cJSON_CreateObject();
    if (obj == NULL) {
        return NULL;
    }

    account = ngx_http_tokenbiryani_zone_slot_id(&tmcf->zone, v->slot);

    tb_format_rfc3339(v->created_ms, at, sizeof(at));
    tb_format_rfc3339(v->seen_ms, seen, sizeof(seen));

    if (ngx_http_tokenbiryani_add_str(obj, "id", v->id, v->id_len) == NULL
        || (v->key_name[0]
            ? ngx_http_tokenbiryani_add_str(obj, "key", v->key_name,
                                            ngx_strlen(v->key_name))
            : cJSON_AddNullToObject(obj, "key")) == NULL
        || (account ? cJSON_AddStringToObject(obj, "account", account)
                    : cJSON_AddNullToObject(obj, "account")) == NULL
        || cJSON_AddStringToObject(obj, "created_at", at) == NULL)
    {
        goto failed;
    }

    if (v->kind == NGX_HTTP_TB_OBJECT_FILE) {
        if (ngx_http_tokenbiryani_add_str(obj, "filename", v->filename,
                                          ngx_strlen(v->filename)) == NULL
            || ngx_http_tokenbiryani_add_str(obj, "mime_type", v->mime,
                                             ngx_strlen(v->mime)) == NULL
            || ngx_http_tokenbiryani_add_number_or_null(obj, "size_bytes",
                   v->size >= 0, (double) v->size) == NULL
            || cJSON_AddBoolToObject(obj, "downloadable", v->downloadable)
               == NULL)
        {
            goto failed;
        }

        return obj;
    }

    if (cJSON_AddStringToObject(obj, "processing_status",
                                tb_batch_status_name((int) v->status)) == NULL
        || cJSON_AddStringToObject(obj, "seen_at", seen) == NULL
        || (c = cJSON_AddObjectToObject(obj, "request_counts")) == NULL)
    {
        goto failed;
    }

    for (i = 0; i < NGX_HTTP_TB_OBJECT_COUNTS; i++) {
        if (ngx_http_tokenbiryani_add_number_or_null(c,
                tb_batch_count_name(i),
                v->counts[i] >= 0, (double) v->counts[i]) == NULL)
        {
            goto failed;
        }
    }

    /* what it may still cost, held here; what its results cost */

    if (cJSON_AddNumberToObject(obj, "estimate_usd",
                                (double) v->reserved / 1e9) == NULL
        || cJSON_AddNumberToObject(obj, "held_usd",
                                   v->held && !v->settled
                                   ? (double) v->reserved / 1e9 : 0) == NULL
        || cJSON_AddBoolToObject(obj, "charged", v->settled) == NULL
        || cJSON_AddNumberToObject(obj, "charged_usd",
                                   (double) v->charged / 1e9) == NULL)
    {
        goto failed;
    }

    return obj;

failed:

    cJSON_Delete(obj);

    return NULL;
}


ngx_int_t
ngx_http_tokenbiryani_admin_objects(ngx_http_request_t *r)
{
    cJSON                                *root, *arr, *item;
    uint64_t                              key;
    ngx_int_t                             limit, rc;
    ngx_str_t                             value, after;
    ngx_uint_t                            kind, i, n, more;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_http_tokenbiryani_object_view_t  *v;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    kind = (r->uri.len == sizeof("/admin/files") - 1)
           ? NGX_HTTP_TB_OBJECT_FILE : NGX_HTTP_TB_OBJECT_BATCH;

    limit = 100;

    rc = ngx_http_tokenbiryani_admin_limit(r, &limit,
                                           NGX_HTTP_TB_ADMIN_OBJECTS_MAX);
    if (rc != NGX_OK) {
        return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    key = 0;

    if (ngx_http_arg(r, (u_char *) "key", 3, &value) == NGX_OK) {
        if (value.len == 0 || value.len > TB_ID_MAX) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error",
                       "key: a key's name, 1 to %d bytes", TB_ID_MAX);
        }

        key = tb_hash64(0, value.data, value.len);
    }

    if (ngx_http_arg(r, (u_char *) "after_id", 8, &after) != NGX_OK) {
        after.len = 0;
    }

    v = ngx_palloc(r->pool,
                   limit * sizeof(ngx_http_tokenbiryani_object_view_t));
    if (v == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_tokenbiryani_object_list(&tmcf->zone, kind, key,
                                          after.len ? after.data : NULL,
                                          after.len, v, (ngx_uint_t) limit,
                                          &more);

    root = cJSON_CreateObject();
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    arr = cJSON_AddArrayToObject(root,
              kind == NGX_HTTP_TB_OBJECT_FILE ? "files" : "batches");

    if (arr == NULL
        || cJSON_AddBoolToObject(root, "has_more", more) == NULL)
    {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    for (i = 0; i < n; i++) {
        item = ngx_http_tokenbiryani_object_admin_json(tmcf, &v[i]);
        if (item == NULL) {
            return ngx_http_tokenbiryani_cjson_fail(root);
        }

        cJSON_AddItemToArray(arr, item);
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}
