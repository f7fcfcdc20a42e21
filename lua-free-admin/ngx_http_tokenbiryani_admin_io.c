/*
 * tokenbiryani: what every /admin answer shares - a cJSON document sent
 * as the response, a bounded string added to one, a write's body read
 * into memory.
 */


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_error.h"


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
