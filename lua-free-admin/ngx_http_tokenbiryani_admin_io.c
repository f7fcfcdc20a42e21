/*
 * tokenbiryani: what every /admin answer shares - a cJSON document sent
 * as the response and the pieces it is built of, a bounded string added
 * to one, ?limit= read, a write's body read into memory - and the one
 * pipeline of a runtime resource's write: the body checked, the record
 * put in the store, applied and answered once it is there.
 */


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_store.h"


static void ngx_http_tokenbiryani_admin_write_body(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_admin_written(
    ngx_http_tokenbiryani_job_t *job);


ngx_int_t
ngx_http_tokenbiryani_send_cjson(ngx_http_request_t *r, ngx_int_t status,
    cJSON *root)
{
    char                         *text;
    ngx_str_t                     json;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);

    /* an error status with a body of ours: not replaced by the filter's */
    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    if (ctx) {
        ctx->own_error = 1;
    }

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


ngx_int_t
ngx_http_tokenbiryani_cjson_fail(cJSON *root)
{
    cJSON_Delete(root);

    return NGX_HTTP_INTERNAL_SERVER_ERROR;
}


cJSON *
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


cJSON *
ngx_http_tokenbiryani_add_number_or_null(cJSON *obj, const char *name,
    ngx_uint_t known, double n)
{
    return known ? cJSON_AddNumberToObject(obj, name, n)
                 : cJSON_AddNullToObject(obj, name);
}


cJSON *
ngx_http_tokenbiryani_add_string_or_null(cJSON *obj, const char *name,
    const char *s)
{
    return s[0] ? cJSON_AddStringToObject(obj, name, s)
                : cJSON_AddNullToObject(obj, name);
}


cJSON *
ngx_http_tokenbiryani_json_doc(cJSON **root, const char *name,
    cJSON *(*add)(cJSON *obj, const char *name))
{
    cJSON  *member;

    *root = cJSON_CreateObject();
    if (*root == NULL) {
        return NULL;
    }

    member = add(*root, name);
    if (member == NULL) {
        cJSON_Delete(*root);
        *root = NULL;
    }

    return member;
}


cJSON *
ngx_http_tokenbiryani_json_push(cJSON *arr)
{
    cJSON  *obj;

    obj = cJSON_CreateObject();
    if (obj == NULL) {
        return NULL;
    }

    cJSON_AddItemToArray(arr, obj);

    return obj;
}


char *
ngx_http_tokenbiryani_pool_text(ngx_pool_t *pool, const char *text)
{
    char    *p;
    size_t   n;

    if (text == NULL) {
        /* what made it failed */
        return NULL;
    }

    n = ngx_strlen(text) + 1;

    p = ngx_pnalloc(pool, n);
    if (p == NULL) {
        return NULL;
    }

    ngx_memcpy(p, text, n);

    return p;
}


ngx_int_t
ngx_http_tokenbiryani_admin_limit(ngx_http_request_t *r, ngx_int_t *limit,
    ngx_int_t max)
{
    ngx_int_t  n;
    ngx_str_t  value;

    if (ngx_http_arg(r, (u_char *) "limit", 5, &value) != NGX_OK) {
        return NGX_OK;
    }

    n = ngx_atoi(value.data, value.len);

    if (n == NGX_ERROR || n < 1 || (max && n > max)) {
        if (max) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
                "invalid_request_error",
                "limit: expected an integer from 1 to %i", max);

        } else {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
                "invalid_request_error",
                "limit: expected a positive integer");
        }

        return NGX_HTTP_BAD_REQUEST;
    }

    *limit = n;

    return NGX_OK;
}


/*
 * An admin write's body, whole, in memory and NUL-terminated (empty when
 * there is none): NGX_OK, or an HTTP status with its error prepared (413
 * when it went to a file: longer than client_body_buffer_size).
 */
ngx_int_t
ngx_http_tokenbiryani_admin_body(ngx_http_request_t *r, u_char **body,
    size_t *len)
{
    u_char       *p;
    size_t        n;
    ngx_chain_t  *cl;

    n = 0;

    if (r->request_body) {
        for (cl = r->request_body->bufs; cl; cl = cl->next) {
            if (cl->buf->in_file) {
                ngx_http_tokenbiryani_set_error(r,
                    NGX_HTTP_REQUEST_ENTITY_TOO_LARGE, "request_too_large",
                    "an admin request's body must fit in "
                    "client_body_buffer_size");
                return NGX_HTTP_REQUEST_ENTITY_TOO_LARGE;
            }

            n += cl->buf->last - cl->buf->pos;
        }
    }

    p = ngx_pnalloc(r->pool, n + 1);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    *body = p;
    *len = n;

    if (r->request_body) {
        for (cl = r->request_body->bufs; cl; cl = cl->next) {
            if (cl->buf->last > cl->buf->pos) {
                p = ngx_cpymem(p, cl->buf->pos, cl->buf->last - cl->buf->pos);
            }
        }
    }

    *p = '\0';

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_admin_read_body(ngx_http_request_t *r,
    ngx_http_client_body_handler_pt handler)
{
    ngx_int_t  rc;

    r->request_body_in_single_buf = 1;

    rc = ngx_http_read_client_request_body(r, handler);
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


ngx_int_t
ngx_http_tokenbiryani_admin_write(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w)
{
    ngx_http_tokenbiryani_ctx_t  *ctx;

    w->request = r;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    ctx->admin_data = w;

    return ngx_http_tokenbiryani_admin_read_body(r,
                                       ngx_http_tokenbiryani_admin_write_body);
}


static void
ngx_http_tokenbiryani_admin_write_body(ngx_http_request_t *r)
{
    size_t                                len;
    u_char                               *body;
    ngx_int_t                             rc;
    ngx_http_tokenbiryani_ctx_t          *ctx;
    ngx_http_tokenbiryani_admin_write_t  *w;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    w = ctx->admin_data;

    rc = ngx_http_tokenbiryani_admin_body(r, &body, &len);
    if (rc != NGX_OK) {
        ngx_http_finalize_request(r,
                                  ngx_http_tokenbiryani_send_error(r, rc, NULL,
                                                                   NULL));
        return;
    }

    rc = w->res->write(r, w, body, len);

    if (rc != NGX_DONE) {
        ngx_http_finalize_request(r, rc);
    }
}


ngx_int_t
ngx_http_tokenbiryani_admin_store(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    w->job.done = ngx_http_tokenbiryani_admin_written;
    w->job.data = w;

    if (ngx_http_tokenbiryani_store_post(tmcf, &w->job) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the reference the body's reading took is the one held throughout */
    return NGX_DONE;
}


ngx_int_t
ngx_http_tokenbiryani_admin_usage_read(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w)
{
    w->job.op = NGX_HTTP_TB_JOB_USAGE;

    if (ngx_http_tokenbiryani_admin_store(r, w) != NGX_DONE) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* answered when the read is done */
    r->main->count++;

    return NGX_DONE;
}


void
ngx_http_tokenbiryani_admin_usage_done(ngx_http_tokenbiryani_admin_write_t *w)
{
    free(w->job.u.usage.points);
    w->job.u.usage.points = NULL;
}


/* the store's answer, in the event loop: applied, or said why not */
static void
ngx_http_tokenbiryani_admin_written(ngx_http_tokenbiryani_job_t *job)
{
    ngx_http_tokenbiryani_admin_write_t *w = job->data;

    ngx_int_t            rc;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = w->request;
    c = r->connection;

    if (job->rc == TB_STORE_OK || (job->rc == TB_STORE_NONE && w->gone)) {
        /* a delete the store had gone already: the zone follows */
        rc = w->res->apply(r, w);

    } else if (w->res->noun
               && (job->rc == TB_STORE_EXISTS || job->rc == TB_STORE_NONE))
    {
        rc = ngx_http_tokenbiryani_admin_refused(r, w,
                 job->rc == TB_STORE_EXISTS ? NGX_HTTP_TB_RKEY_EXISTS
                                            : NGX_HTTP_TB_RKEY_NONE);

    } else {
        rc = ngx_http_tokenbiryani_send_error(r,
                 NGX_HTTP_SERVICE_UNAVAILABLE, "api_error", "%s (%s)",
                 w->res->failure, job->err);
    }

    if (w->res->done) {
        w->res->done(w);
    }

    /* the request, and w in its pool, may be gone after this */
    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


ngx_int_t
ngx_http_tokenbiryani_admin_refused(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w, ngx_uint_t why)
{
    switch (why) {

    case NGX_HTTP_TB_RKEY_EXISTS:
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                   "invalid_request_error", "%s \"%V\" exists",
                   w->res->a_noun, &w->name);

    case NGX_HTTP_TB_RKEY_NONE:
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                   "not_found_error", "no %s \"%V\"", w->res->noun,
                   &w->name);

    default: /* NGX_HTTP_TB_RKEY_STALE */
        /* another instance wrote a newer one meanwhile: it stands */
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                   "invalid_request_error", "%s \"%V\" was changed "
                   "meanwhile by another instance: read it and try again",
                   w->res->noun, &w->name);
    }
}
