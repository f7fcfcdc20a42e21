/*
 * tokenbiryani: the first stage of a /v1 request.
 *
 * The path and method say what the request is; the virtual key who sends
 * it; then the whole body is read (every attempt re-sends it) and scanned
 * once, and the request goes on to the attempt loop
 * (ngx_http_tokenbiryani_attempt.c).
 */


#include "ngx_http_tokenbiryani.h"

#include <sys/mman.h>

#include "ngx_http_tokenbiryani_handler.h"
#include "ngx_http_tokenbiryani_batches.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_route.h"
#include "ngx_http_tokenbiryani_attempt.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_admit.h"
#include "ngx_http_tokenbiryani_edit.h"
#include "ngx_http_tokenbiryani_record.h"
#include "ngx_http_tokenbiryani_events.h"


/* key refusals kept (an event, a record) a second, per worker */
#define NGX_HTTP_TB_REFUSALS_KEPT  5


static ngx_uint_t ngx_http_tokenbiryani_has_body(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_refuse_body(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_body_handler(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_route_begin(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_batch_begin(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body);
static void ngx_http_tokenbiryani_batch_known(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_body_bytes(ngx_http_request_t *r,
    ngx_str_t *body);
static void ngx_http_tokenbiryani_body_unmap(void *data);
static void ngx_http_tokenbiryani_refused_early(void *data);
static ngx_int_t ngx_http_tokenbiryani_refusal_seen(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status);


ngx_int_t
ngx_http_tokenbiryani_pass_handler(ngx_http_request_t *r)
{
    ngx_int_t                           rc;
    ngx_str_t                          *uri;
    ngx_pool_cleanup_t                 *cln;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    ctx = ngx_http_tokenbiryani_create_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    /* the accounts there are now are the ones it may use */
    if (ngx_http_tokenbiryani_accounts_hold(r, tmcf, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    uri = &r->uri;

    /*
     * The path sent upstream is the one checked here, so it must mean the
     * same to every parser: no dot-segments, empty segments, fragments or
     * percent-encoding (an encoded "/", "." or "?" is read differently by
     * different servers).  No client of the Messages API sends one.
     */

    if (r->complex_uri || r->quoted_uri || r->empty_path_in_uri) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error",
                   "the request path must be plain: no \".\" or \"..\" "
                   "segments, empty segments, fragments or "
                   "percent-encoding");
    }

    if (uri->len == sizeof("/v1/messages") - 1
        && ngx_strncmp(uri->data, "/v1/messages", uri->len) == 0)
    {
        ctx->kind = NGX_HTTP_TB_MESSAGES;

    } else if (uri->len == sizeof("/v1/messages/count_tokens") - 1
               && ngx_strncmp(uri->data, "/v1/messages/count_tokens",
                              uri->len) == 0)
    {
        ctx->kind = NGX_HTTP_TB_COUNT_TOKENS;

    } else if ((uri->len == sizeof("/v1/models") - 1
                && ngx_strncmp(uri->data, "/v1/models", uri->len) == 0)
               || (uri->len > sizeof("/v1/models/") - 1
                   && ngx_strncmp(uri->data, "/v1/models/",
                                  sizeof("/v1/models/") - 1) == 0))
    {
        ctx->kind = NGX_HTTP_TB_MODELS;

    } else {
        /* the Message Batches API and the Files API, when they are on */
        rc = tmcf->tbcf->batch_api
             ? ngx_http_tokenbiryani_object_path(r, ctx,
                                                 NGX_HTTP_TB_OBJECT_BATCH)
             : NGX_DECLINED;

        if (rc == NGX_DECLINED && tmcf->tbcf->files_api) {
            rc = ngx_http_tokenbiryani_object_path(r, ctx,
                                                   NGX_HTTP_TB_OBJECT_FILE);
        }

        if (rc == NGX_DECLINED) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                       "not_found_error",
                       "tokenbiryani serves /v1/messages, "
                       "/v1/messages/count_tokens%s%s and /v1/models, not %V",
                       tmcf->tbcf->batch_api ? ", /v1/messages/batches" : "",
                       tmcf->tbcf->files_api ? ", /v1/files" : "", uri);
        }

        if (rc != NGX_OK) {
            return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
        }
    }

    if (ctx->kind == NGX_HTTP_TB_MODELS
        || (ctx->kind == NGX_HTTP_TB_BATCHES
            && ((ngx_http_tokenbiryani_objreq_t *) ctx->object)->op
               != NGX_HTTP_TB_OBJ_CREATE))
    {
        if (ctx->kind == NGX_HTTP_TB_MODELS
            && !(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)))
        {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error",
                       "%V expects GET, not %V", uri, &r->method_name);
        }

        /*
         * A body on a GET is never sent upstream: without a length of its
         * own it would be read there as the start of another request.  It
         * is read and refused, answering once the client has sent it all
         * (an HTTP/2 client still sending when the answer comes gets its
         * stream reset instead).
         */

        if (ngx_http_tokenbiryani_has_body(r)) {
            rc = ngx_http_read_client_request_body(r,
                                     ngx_http_tokenbiryani_refuse_body);

            return rc >= NGX_HTTP_SPECIAL_RESPONSE ? rc : NGX_DONE;
        }

    } else if (r->method != NGX_HTTP_POST) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error",
                   "%V expects POST, not %V", uri, &r->method_name);
    }

    rc = ngx_http_tokenbiryani_authenticate(r, ctx, 0);
    if (rc != NGX_OK) {

        /* a key refused: seen in the live feed and the inspector, by its
         * name when it had one (revoked, expired), never its secret */

        if (rc == NGX_HTTP_UNAUTHORIZED
            && ngx_http_tokenbiryani_refusal_seen(r, ctx, rc) != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
    }

    /* what the key alone decides, before a byte of the body is held */

    if (ngx_http_tokenbiryani_admit_key(r, ctx) != NGX_OK) {

        /* in the inspector and the usage as a refusal after it would be */

        ctx->started_ms = ngx_http_tokenbiryani_now_ms();

        if (ctx->kind == NGX_HTTP_TB_MESSAGES) {
            cln = ngx_pool_cleanup_add(r->pool, 0);
            if (cln == NULL) {
                return NGX_HTTP_INTERNAL_SERVER_ERROR;
            }

            cln->handler = ngx_http_tokenbiryani_refused_early;
            cln->data = ctx;
        }

        return ngx_http_tokenbiryani_send_error(r, ctx->err.status, NULL,
                                                NULL);
    }

    /*
     * The whole body is kept so that every attempt can send it again: in
     * memory when it fits client_body_buffer_size (one copy more when
     * nginx left it in two pieces, the part that came with the headers and
     * the rest), else in its temp file, mapped - never copied into the
     * worker's memory
     */

    rc = ngx_http_read_client_request_body(r,
                                           ngx_http_tokenbiryani_body_handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    return NGX_DONE;
}


static ngx_uint_t
ngx_http_tokenbiryani_has_body(ngx_http_request_t *r)
{
    if (r->headers_in.content_length_n > 0 || r->headers_in.chunked) {
        return 1;
    }

#if (NGX_HTTP_V2)
    if (r->stream && !r->stream->in_closed) {
        /* DATA frames follow the headers */
        return 1;
    }
#endif

    return 0;
}


static void
ngx_http_tokenbiryani_refuse_body(ngx_http_request_t *r)
{
    if (r->connection->error) {
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        return;
    }

    ngx_http_finalize_request(r,
        ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                                         "invalid_request_error",
                                         "%V carries no body: send %V "
                                         "without one", &r->method_name,
                                         &r->uri));
}


/* a batch request, its body read: answered here, or routed */

static void
ngx_http_tokenbiryani_batch_begin(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body)
{
    ngx_http_tokenbiryani_objreq_t     *o;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    o = ctx->object;

    if (o->op == NGX_HTTP_TB_OBJ_CREATE
        && o->found.kind == NGX_HTTP_TB_OBJECT_BATCH
        && ngx_http_tokenbiryani_body_bytes(r, body) != NGX_OK)
    {
        /* (an upload's body is sent as it was read, never mapped) */
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->route.body = *body;

    if (o->op != NGX_HTTP_TB_OBJ_CREATE && o->op != NGX_HTTP_TB_OBJ_LIST) {
        tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

        /* a batch or a file another gateway made, that this one has not
         * heard of yet: asked of the store first */
        if (ngx_http_tokenbiryani_object_get(&tmcf->zone, o->found.kind,
                                             o->found.id, o->found.id_len,
                                             NULL)
            != NGX_OK
            && ngx_http_tokenbiryani_store_object_get(r, o->found.id,
                   o->found.id_len, ngx_http_tokenbiryani_batch_known)
               == NGX_AGAIN)
        {
            return;
        }
    }

    ngx_http_tokenbiryani_batch_known(r);
}


static void
ngx_http_tokenbiryani_batch_known(ngx_http_request_t *r)
{
    ngx_int_t                        rc;
    ngx_str_t                       *body;
    ngx_http_tokenbiryani_ctx_t     *ctx;
    ngx_http_tokenbiryani_objreq_t  *o;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    body = &ctx->route.body;
    o = ctx->object;

    rc = ngx_http_tokenbiryani_object_begin(r, ctx, body);

    if (rc == NGX_DONE) {
        return;
    }

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r,
                                  ngx_http_tokenbiryani_send_error(r, rc, NULL,
                                                                   NULL));
        return;
    }

    /* its results, the key's own: which gateway charges them, when
     * gateways share the store, asked first */
    if (o->op == NGX_HTTP_TB_OBJ_RESULTS
        && ngx_http_tokenbiryani_store_object_claim_r(r, o->found.id,
               o->found.id_len, ngx_http_tokenbiryani_route_begin)
           == NGX_AGAIN)
    {
        return;
    }

    ngx_http_tokenbiryani_route_begin(r);
}


static void
ngx_http_tokenbiryani_body_handler(ngx_http_request_t *r)
{
    ngx_int_t                           rc;
    ngx_str_t                           body;
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                err[256];

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (r->connection->error) {
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        return;
    }

    ctx->started_ms = ngx_http_tokenbiryani_now_ms();

    body.len = 0;
    body.data = (u_char *) "";

    if (ctx->kind == NGX_HTTP_TB_BATCHES) {
        ngx_http_tokenbiryani_batch_begin(r, ctx, &body);
        return;
    }

    if (ctx->kind != NGX_HTTP_TB_MODELS) {

        if (ngx_http_tokenbiryani_body_bytes(r, &body) != NGX_OK) {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        if (tb_scan_body(body.data, body.len, &ctx->body, err, sizeof(err))
            != 0)
        {
            ngx_http_finalize_request(r,
                ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                                                 "invalid_request_error",
                                                 "%s", err));
            return;
        }

        if (!ctx->body.has_model) {
            ngx_http_finalize_request(r,
                ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                                                 "invalid_request_error",
                                                 "model: field required"));
            return;
        }

        if (ctx->key
            && !tb_models_match(ctx->key->models.items, ctx->key->models.n,
                                ctx->body.model, ctx->body.model_len))
        {
            ctx->err.refused = NGX_HTTP_TB_REFUSED_MODEL;

            ngx_http_finalize_request(r,
                ngx_http_tokenbiryani_refusal_seen(r, ctx, NGX_HTTP_FORBIDDEN)
                != NGX_OK
                ? NGX_HTTP_INTERNAL_SERVER_ERROR
                : ngx_http_tokenbiryani_send_error(r, NGX_HTTP_FORBIDDEN,
                    "permission_error", "key \"%s\" may not use model \"%s\"",
                    ctx->key->name, ctx->body.model));
            return;
        }

        /* files.api: the files it names, on their account */
        tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

        if (tmcf->tbcf->files_api) {
            rc = ngx_http_tokenbiryani_files_pin(r, ctx, &body);

            if (rc != NGX_OK) {
                ngx_http_finalize_request(r,
                    ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL));
                return;
            }
        }

        /* the gateway's own: a cache breakpoint, a pacing downshift */
        if (ctx->kind == NGX_HTTP_TB_MESSAGES
            && ngx_http_tokenbiryani_edit_wanted(tmcf, ctx)
            && ngx_http_tokenbiryani_edit_body(r, ctx, &body) != NGX_OK)
        {
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    ctx->route.body = body;

    ngx_http_tokenbiryani_route_session(r, ctx, &body);

    /* a conversation a peer gave an owner: asked first */
    if (ngx_http_tokenbiryani_store_owner_get(r, ctx,
                                              ngx_http_tokenbiryani_route_begin)
        == NGX_AGAIN)
    {
        return;
    }

    ngx_http_tokenbiryani_route_begin(r);
}


static void
ngx_http_tokenbiryani_route_begin(ngx_http_request_t *r)
{
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (ngx_http_tokenbiryani_route_prepare(r, ctx, &ctx->route.body)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_http_tokenbiryani_attempt_begin(r, ctx);
}


/*
 * The body as one contiguous read-only buffer for the scanner, and for
 * what later reads it whole (a conversation's fingerprint, a platform's
 * translation): the buf itself, when it is one in memory; its temp file
 * mapped, when it is there; a copy only of what nginx left in pieces.
 */

static ngx_int_t
ngx_http_tokenbiryani_body_bytes(ngx_http_request_t *r, ngx_str_t *body)
{
    u_char              *p;
    off_t                len;
    ssize_t              n;
    ngx_buf_t           *b, *file;
    ngx_uint_t           pieces;
    ngx_chain_t         *cl;
    ngx_pool_cleanup_t  *cln;

    body->len = 0;
    body->data = (u_char *) "";

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        return NGX_OK;
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        body->data = cl->buf->pos;
        body->len = cl->buf->last - cl->buf->pos;
        return NGX_OK;
    }

    /* all of it in its temp file: mapped read-only, page cache not heap */

    file = NULL;
    pieces = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        if (ngx_buf_size(cl->buf) == 0) {
            continue;
        }

        pieces++;
        file = cl->buf->in_file ? cl->buf : NULL;
    }

    if (pieces == 1 && file && file->file_pos == 0 && file->file_last > 0) {
        cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_str_t));
        if (cln == NULL) {
            return NGX_ERROR;
        }

        p = mmap(NULL, (size_t) file->file_last, PROT_READ, MAP_PRIVATE,
                 file->file->fd, 0);

        if (p != MAP_FAILED) {
            body->data = p;
            body->len = (size_t) file->file_last;

            ((ngx_str_t *) cln->data)->data = p;
            ((ngx_str_t *) cln->data)->len = body->len;
            cln->handler = ngx_http_tokenbiryani_body_unmap;

            return NGX_OK;
        }

        ngx_log_error(NGX_LOG_WARN, r->connection->log, ngx_errno,
                      "tokenbiryani: mmap() of the request body's temp file "
                      "failed: it is read into memory");
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        len += ngx_buf_size(cl->buf);
    }

    p = ngx_pnalloc(r->pool, (size_t) len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    body->data = p;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        b = cl->buf;

        if (!b->in_file) {
            if (b->pos != b->last) {
                p = ngx_cpymem(p, b->pos, b->last - b->pos);
            }

            continue;
        }

        n = ngx_read_file(b->file, p, (size_t) (b->file_last - b->file_pos),
                          b->file_pos);

        if (n != (ssize_t) (b->file_last - b->file_pos)) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "tokenbiryani: could not read back the request "
                          "body from its temp file");
            return NGX_ERROR;
        }

        p += n;
    }

    body->len = p - body->data;

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_body_unmap(void *data)
{
    ngx_str_t  *map = data;

    if (munmap(map->data, map->len) == -1) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, ngx_errno,
                      "tokenbiryani: munmap() of a request body failed");
    }
}


/*
 * A request refused for its key (invalid, revoked, expired, a model out of
 * its scope): an event now, and its record in the inspector once it ends
 */
static ngx_int_t
ngx_http_tokenbiryani_refusal_seen(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status)
{
    ngx_pool_cleanup_t  *cln;

    static time_t        second;
    static ngx_uint_t    seen;

    /*
     * Anyone who can reach the gateway can be refused: at most a few a
     * second per worker are kept, so that a flood of made-up keys cannot
     * push the inspector's and the feed's history out
     */

    if (ngx_time() != second) {
        second = ngx_time();
        seen = 0;
    }

    if (++seen > NGX_HTTP_TB_REFUSALS_KEPT) {
        return NGX_OK;
    }

    if (ctx->started_ms == 0) {
        ctx->started_ms = ngx_http_tokenbiryani_now_ms();
    }

    ngx_http_tokenbiryani_event_refusal(r, ctx, status);

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_tokenbiryani_refused_early;
    cln->data = ctx;

    return NGX_OK;
}


/* a request refused before its body was read: its record all the same */
static void
ngx_http_tokenbiryani_refused_early(void *data)
{
    ngx_http_tokenbiryani_ctx_t *ctx = data;

    ngx_http_tokenbiryani_record(ctx->request, ctx);
}
