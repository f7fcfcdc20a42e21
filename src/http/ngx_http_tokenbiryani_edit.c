
/*
 * The gateway's own edits of a Message's body, made once before routing
 * (docs/usage.md "Cache advice", docs/spend.md "Pacing"):
 *
 *  - cache.auto_breakpoint (or the key's): a request that asks for no
 *    prompt-cache breakpoint, on a stable prefix (system and tools) the
 *    cache would take, gets one where that prefix ends;
 *  - pacing.model_downshift: a batch-priority request, while the pool's
 *    weekly budget runs ahead of its pace (enforcing), is sent to the
 *    cheaper model the map names, where its key may use that model.
 *
 * The body is copied once with those members changed at their spans
 * (tb_body_edit); every other byte is the client's.  A request neither
 * applies to is not touched and costs a few comparisons.
 */


#include "ngx_http_tokenbiryani_edit.h"
#include "ngx_http_tokenbiryani_admit.h"


static const char *ngx_http_tokenbiryani_downshift(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);


ngx_int_t
ngx_http_tokenbiryani_edit_body(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body)
{
    u_char                             *p;
    size_t                              len, mlen, max, prefix;
    ngx_buf_t                          *b;
    ngx_uint_t                          bp;
    ngx_chain_t                        *cl;
    const char                         *model;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    kc = ctx->key;

    bp = (kc && kc->auto_breakpoint != 2) ? kc->auto_breakpoint
                                          : tmcf->tbcf->cache_auto_breakpoint;

    bp = bp && !ctx->body.breakpoint
         && tb_body_prefix_tokens(&ctx->body) >= TB_BODY_CACHEABLE_TOKENS;

    model = NULL;

    if (tmcf->tbcf->pacing_model_downshift.n) {
        model = ngx_http_tokenbiryani_downshift(r, ctx);
    }

    if ((!bp && model == NULL) || body->len > NGX_MAX_INT32_VALUE) {
        /* (spans are 32-bit: no Messages body is 2 GB) */
        return NGX_OK;
    }

    mlen = model ? ngx_strlen(model) : 0;
    max = tb_body_edit_max(body->len, mlen);

    p = ngx_pnalloc(r->pool, max);
    b = ngx_calloc_buf(r->pool);
    cl = ngx_alloc_chain_link(r->pool);

    if (p == NULL || b == NULL || cl == NULL) {
        return NGX_ERROR;
    }

    prefix = ctx->body.system.len + ctx->body.tools.len;

    len = tb_body_edit(body->data, body->len, &ctx->body, bp, model, mlen, p);

    /* (none when neither system nor tools had a place for one) */
    ctx->bp_added = (ctx->body.system.len + ctx->body.tools.len != prefix);

    b->start = p;
    b->pos = p;
    b->last = p + len;
    b->end = p + max;
    b->temporary = 1;
    b->last_buf = 1;

    cl->buf = b;
    cl->next = NULL;

    /* what the upstream is sent (ngx_http_upstream_init takes it) */
    r->request_body->bufs = cl;

    body->data = p;
    body->len = len;

    if (model) {
        if (ctx->rare == NULL) {
            ctx->rare = ngx_pcalloc(r->pool,
                                    sizeof(ngx_http_tokenbiryani_rare_t));
        }

        if (ctx->rare == NULL
            || (ctx->rare->model_requested = ngx_pnalloc(r->pool,
                                                ctx->body.model_len + 1))
               == NULL)
        {
            return NGX_ERROR;
        }

        ngx_memcpy(ctx->rare->model_requested, ctx->body.model,
                   ctx->body.model_len + 1);

        ngx_memcpy(ctx->body.model, model, mlen + 1);
        ctx->body.model_len = mlen;

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "tokenbiryani: %*s: sent to \"%s\" for \"%s\", the "
                      "pool's weekly budget being ahead of its pace",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      model, ctx->rare->model_requested);
    }

    return NGX_OK;
}


/* the cheaper model for this request, or NULL */

static const char *
ngx_http_tokenbiryani_downshift(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    size_t              n, len;
    ngx_uint_t          i, found;
    const char         *to;
    const tb_kvlist_t  *map;

    if (ngx_http_tokenbiryani_admit_priority(r, ctx) != NGX_OK
        || ctx->wait.priority == 0)
    {
        /* interactive traffic is never downshifted (a header that says
         * neither is refused when the request is admitted) */
        return NULL;
    }

    map = &((ngx_http_tokenbiryani_main_conf_t *)
            ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module))
           ->tbcf->pacing_model_downshift;

    /* the model's own entry, else the first "prefix*" that matches */

    to = NULL;
    found = 0;

    for (i = 0; i < map->n && !found; i++) {
        if (ngx_strcmp(map->items[i].key, ctx->body.model) == 0) {
            to = map->items[i].value;
            found = 1;
        }
    }

    for (i = 0; i < map->n && !found; i++) {
        len = ngx_strlen(map->items[i].key);

        if (len && map->items[i].key[len - 1] == '*'
            && ctx->body.model_len >= len - 1
            && ngx_strncmp(map->items[i].key, ctx->body.model, len - 1) == 0)
        {
            to = map->items[i].value;
            found = 1;
        }
    }

    if (to == NULL) {
        return NULL;
    }

    n = ngx_strlen(to);

    if ((n == ctx->body.model_len
         && ngx_strncmp(to, ctx->body.model, n) == 0)
        || !tb_body_model_ok(to, n)
        || (ctx->key
            && !tb_models_match(ctx->key->models.items, ctx->key->models.n,
                                to, n))
        || ngx_http_tokenbiryani_admit_ahead(r, ngx_http_tokenbiryani_now_ms())
           <= 0)
    {
        /* the same, not one it may use, or the budget on pace */
        return NULL;
    }

    return to;
}
