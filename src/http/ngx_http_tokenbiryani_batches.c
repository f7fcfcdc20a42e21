/*
 * The Message Batches API through the pool (see
 * ngx_http_tokenbiryani_batches.h).
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_batches.h"
#include "ngx_http_tokenbiryani_events.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_store.h"
#include "tb_batch.h"
#include "tb_chars.h"
#include "tb_keys.h"
#include "tb_price.h"
#include "tb_session.h"
#include "tb_ledger.h"


#define NGX_HTTP_TB_BATCHES_PATH       "/v1/messages/batches"
#define NGX_HTTP_TB_FILES_PATH         "/v1/files"

#define NGX_HTTP_TB_LIST_MAX           1000

/* a batch expires 24 hours after it was made (the API's) */
#define NGX_HTTP_TB_BATCH_EXPIRES_MS   (24 * 3600 * 1000LL)


static ngx_int_t ngx_http_tokenbiryani_object_list_answer(
    ngx_http_request_t *r, ngx_http_tokenbiryani_ctx_t *ctx);
static ngx_int_t ngx_http_tokenbiryani_object_charge(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now);
static void ngx_http_tokenbiryani_result_line(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *p, size_t len,
    ngx_http_tokenbiryani_results_t *rd);
static ngx_str_t *ngx_http_tokenbiryani_origin(ngx_http_request_t *r,
    ngx_str_t *scheme);
static u_char *ngx_http_tokenbiryani_object_time(u_char *p, const char *name,
    int64_t ms);


/* the paths of a kind of object: its collection, an object's own, and
 * what is below an object's (a method it takes, the op) */
typedef struct {
    ngx_str_t                      prefix;
    ngx_uint_t                     kind;          /* NGX_HTTP_TB_OBJECT_* */
    const char                    *noun;          /* the API's type */
    struct {
        ngx_str_t                  path;
        ngx_uint_t                 method;
        ngx_uint_t                 op;
    }                              below[2];
} ngx_http_tokenbiryani_objpath_t;


static const ngx_http_tokenbiryani_objpath_t  ngx_http_tokenbiryani_objpaths[]
    = {
    { ngx_string(NGX_HTTP_TB_BATCHES_PATH), NGX_HTTP_TB_OBJECT_BATCH,
      "message_batch",
      { { ngx_string("/cancel"), NGX_HTTP_POST, NGX_HTTP_TB_OBJ_CANCEL },
        { ngx_string("/results"), NGX_HTTP_GET|NGX_HTTP_HEAD,
          NGX_HTTP_TB_OBJ_RESULTS } } },

    { ngx_string(NGX_HTTP_TB_FILES_PATH), NGX_HTTP_TB_OBJECT_FILE, "file",
      { { ngx_string("/content"), NGX_HTTP_GET|NGX_HTTP_HEAD,
          NGX_HTTP_TB_OBJ_CONTENT },
        { ngx_null_string, 0, 0 } } }
};


/* the API's word for a kind of object, in answers and messages */
static const char *
ngx_http_tokenbiryani_object_noun(ngx_uint_t kind)
{
    return (kind == NGX_HTTP_TB_OBJECT_FILE) ? "file" : "message_batch";
}


ngx_int_t
ngx_http_tokenbiryani_object_path(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t kind)
{
    u_char                                 *p, *end, *slash;
    size_t                                  len;
    ngx_uint_t                              op, i;
    ngx_str_t                              *uri;
    ngx_http_tokenbiryani_objreq_t         *o;
    const ngx_http_tokenbiryani_objpath_t  *def;

    def = &ngx_http_tokenbiryani_objpaths[kind == NGX_HTTP_TB_OBJECT_FILE];

    uri = &r->uri;
    len = def->prefix.len;

    if (uri->len < len
        || ngx_strncmp(uri->data, def->prefix.data, len) != 0
        || (uri->len > len && uri->data[len] != '/'))
    {
        return NGX_DECLINED;
    }

    p = uri->data + len + 1;
    end = uri->data + uri->len;

    if (uri->len <= len + 1) {
        /* the collection */
        op = (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD)) ? NGX_HTTP_TB_OBJ_LIST
             : (r->method == NGX_HTTP_POST) ? NGX_HTTP_TB_OBJ_CREATE : 0;
        p = end;
        slash = end;

    } else {
        slash = ngx_strlchr(p, end, '/');
        if (slash == NULL) {
            slash = end;
        }

        if (!tb_batch_id_ok((char *) p, slash - p)) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_NOT_FOUND,
                "not_found_error", "%s not found", def->noun);
            return NGX_HTTP_NOT_FOUND;
        }

        if (slash == end) {
            op = (r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))
                 ? NGX_HTTP_TB_OBJ_GET
                 : (r->method == NGX_HTTP_DELETE) ? NGX_HTTP_TB_OBJ_DELETE : 0;

        } else {
            for (i = 0; i < 2 && def->below[i].path.len; i++) {
                if ((size_t) (end - slash) == def->below[i].path.len
                    && ngx_strncmp(slash, def->below[i].path.data,
                                   end - slash)
                       == 0)
                {
                    break;
                }
            }

            if (i == 2 || def->below[i].path.len == 0) {
                ngx_http_tokenbiryani_set_error(r, NGX_HTTP_NOT_FOUND,
                    "not_found_error", "tokenbiryani serves no %V", uri);
                return NGX_HTTP_NOT_FOUND;
            }

            op = (r->method & def->below[i].method) ? def->below[i].op : 0;
        }
    }

    if (op == 0) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_NOT_ALLOWED,
            "invalid_request_error", "%V does not take %V", uri,
            &r->method_name);
        return NGX_HTTP_NOT_ALLOWED;
    }

    o = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_objreq_t));
    if (o == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    o->op = op;
    o->found.kind = def->kind;
    o->found.slot = -1;
    o->found.id_len = slash - p;
    ngx_memcpy(o->found.id, p, o->found.id_len);

    if (op != NGX_HTTP_TB_OBJ_LIST) {
        /* only the list reads a query string: nothing else is sent on */
        r->args.len = 0;
    }

    ctx->kind = NGX_HTTP_TB_BATCHES;
    ctx->object = o;

    return NGX_OK;
}


/* a create's requests, each checked against the key's scopes */

typedef struct {
    ngx_http_tokenbiryani_ctx_t        *ctx;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_uint_t                          forbidden;
    int64_t                             cost;     /* nanodollars, at the
                                                     batch price */
} ngx_http_tokenbiryani_batch_check_t;


/* what a request of a batch may cost: its input estimate and its whole
 * max_tokens, at half the model's price (the batch price) */

static int64_t
ngx_http_tokenbiryani_batch_estimate(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const unsigned char *params, size_t plen, const tb_body_t *body)
{
    tb_cost_usage_t          cu;
    const tb_model_price_t  *price;

    price = tb_price_find(&tmcf->prices, tmcf->builtin, body->model,
                          body->model_len);
    if (price == NULL) {
        /* unpriced: counted as nothing, as a Message of it would be */
        return 0;
    }

    ngx_memzero(&cu, sizeof(cu));
    cu.input = tb_estimate_input(params, plen, body);
    cu.output = body->max_tokens >= 0 ? body->max_tokens : 1024;

    return tb_cost(price, &cu, 0) / 2;
}


static int
ngx_http_tokenbiryani_batch_each(void *data, size_t i, const char *custom_id,
    const unsigned char *params, size_t plen, char *err, size_t errlen)
{
    tb_body_t                             body;
    ngx_http_tokenbiryani_ctx_t          *ctx;
    ngx_http_tokenbiryani_batch_check_t  *bc;
    char                                  why[256];

    bc = data;
    ctx = bc->ctx;

    if (tb_scan_body(params, plen, &body, why, sizeof(why)) != 0) {
        ngx_snprintf((u_char *) err, errlen, "requests.%uz.params: %s%Z", i,
                     why);
        return -1;
    }

    if (!body.has_model) {
        ngx_snprintf((u_char *) err, errlen,
                     "requests.%uz.params.model: Field required%Z", i);
        return -1;
    }

    if (body.stream) {
        ngx_snprintf((u_char *) err, errlen, "requests.%uz.params.stream: "
                     "a batch's requests do not stream%Z", i);
        return -1;
    }

    if (ctx->key
        && !tb_models_match(ctx->key->models.items, ctx->key->models.n,
                            body.model, body.model_len))
    {
        bc->forbidden = 1;
        ngx_snprintf((u_char *) err, errlen, "key \"%s\" may not use model "
                     "\"%s\" (requests.%uz)%Z", ctx->key->name, body.model,
                     i);
        return -1;
    }

    bc->cost += ngx_http_tokenbiryani_batch_estimate(bc->tmcf, params, plen,
                                                     &body);

    return 0;
}


/*
 * A batch whose estimate its key's cap cannot hold is refused before it is
 * sent: unlike a Message, it may cost many requests' worth at once.
 */

static ngx_int_t
ngx_http_tokenbiryani_batch_cap(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    int64_t                            held, cap;
    ngx_http_tokenbiryani_objreq_t    *o;
    ngx_http_tokenbiryani_key_spend_t  ks;
    char                               h[32], c[32], e[32];

    o = ctx->object;

    if (ctx->key == NULL || ctx->key->spend_cap_usd < 0) {
        return NGX_OK;
    }

    ngx_http_tokenbiryani_key_spend(&tmcf->zone, ctx->key_hash,
                                    ngx_http_tokenbiryani_now_ms(), &ks);

    held = ks.window_cost + ks.reserved + ks.others;
    cap = tb_usd_to_nd(ctx->key->spend_cap_usd);

    if (held + o->estimate <= cap) {
        return NGX_OK;
    }

    (void) tb_usd_format(held, h, sizeof(h));
    (void) tb_usd_format(cap, c, sizeof(c));
    (void) tb_usd_format(o->estimate, e, sizeof(e));

    ctx->final = 1;

    ngx_http_tokenbiryani_set_error(r, NGX_HTTP_TOO_MANY_REQUESTS,
        "rate_limit_error",
        "key \"%s\" has spent $%s of its $%s spend cap (spend_cap_usd), and "
        "this batch of %ui requests may cost up to $%s at the batch price: "
        "send a smaller batch, or raise the cap", ctx->key->name, h, c,
        o->requests, e);

    return NGX_HTTP_TOO_MANY_REQUESTS;
}


ngx_int_t
ngx_http_tokenbiryani_object_begin(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body)
{
    size_t                                n;
    ngx_http_tokenbiryani_objreq_t       *o;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_http_tokenbiryani_batch_check_t   bc;
    char                                  err[512];

    o = ctx->object;
    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    switch (o->op) {

    case NGX_HTTP_TB_OBJ_LIST:
        return ngx_http_tokenbiryani_object_list_answer(r, ctx);

    case NGX_HTTP_TB_OBJ_CREATE:
        if (o->found.kind == NGX_HTTP_TB_OBJECT_FILE) {
            /* an upload: its body goes to the account as it is */
            return NGX_OK;
        }

        bc.ctx = ctx;
        bc.tmcf = tmcf;
        bc.forbidden = 0;
        bc.cost = 0;

        if (tb_batch_scan(body->data, body->len, TB_BATCH_MAX_REQUESTS,
                          ngx_http_tokenbiryani_batch_each, &bc, &n, err,
                          sizeof(err))
            != 0)
        {
            ngx_http_tokenbiryani_set_error(r,
                bc.forbidden ? NGX_HTTP_FORBIDDEN : NGX_HTTP_BAD_REQUEST,
                bc.forbidden ? "permission_error" : "invalid_request_error",
                "%s", err);
            return bc.forbidden ? NGX_HTTP_FORBIDDEN : NGX_HTTP_BAD_REQUEST;
        }

        o->requests = n;
        o->estimate = bc.cost;

        return ngx_http_tokenbiryani_batch_cap(r, ctx, tmcf);

    default:
        break;
    }

    /*
     * Another key's batch or file is answered as an unknown one: nothing
     * says it exists.  An admin key reaches every one.
     */

    if (ngx_http_tokenbiryani_object_get(&tmcf->zone, o->found.kind,
                                         o->found.id, o->found.id_len,
                                         &o->found)
        != NGX_OK
        || (!ctx->admin && o->found.key != ctx->key_hash))
    {
        o->found.slot = -1;
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_NOT_FOUND,
            "not_found_error", "%s not found: %*s",
            ngx_http_tokenbiryani_object_noun(o->found.kind),
            o->found.id_len, o->found.id);
        return NGX_HTTP_NOT_FOUND;
    }

    return NGX_OK;
}


void
ngx_http_tokenbiryani_object_need(ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_objreq_t  *o;

    o = ctx->object;

    if (o->op != NGX_HTTP_TB_OBJ_CREATE || ctx->key == NULL) {
        return;
    }

    /* the batch's estimate, reserved against the key's and the account's
     * caps by the lease, then held for the batch once it is made */

    ctx->route.need.cost = o->estimate;
    ctx->caps.key_cap = tb_usd_to_nd(ctx->key->spend_cap_usd);
    ctx->caps.key_name = (u_char *) ctx->key->name;
    ctx->caps.key_name_len = ngx_strlen(ctx->key->name);
}


ngx_uint_t
ngx_http_tokenbiryani_object_made(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_objreq_t  *o;

    o = ctx->object;

    if (o->op != NGX_HTTP_TB_OBJ_CREATE || !r->upstream->request_sent
        || ctx->resp.status.code >= 400)
    {
        /* nothing sent, or an error said: no batch was made */
        return 0;
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "tokenbiryani: a %s sent to account \"%V\" failed before "
                  "its answer was read: it is not sent again, which could "
                  "make a second one",
                  o->found.kind == NGX_HTTP_TB_OBJECT_FILE ? "file upload"
                                                           : "batch create",
                  &ctx->account->id);

    return 1;
}


ngx_int_t
ngx_http_tokenbiryani_object_pin(ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_objreq_t  *o;

    o = ctx->object;

    if (o == NULL || o->op == NGX_HTTP_TB_OBJ_CREATE) {
        return -1;
    }

    return o->found.slot;
}


/*
 * The results_url the upstream gave points at the upstream: a client that
 * follows it would send its gateway key there.  It is made to point at
 * this gateway, by the Host the client used.
 */

static ngx_int_t
ngx_http_tokenbiryani_object_results_url(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const tb_batch_obj_t *b)
{
    u_char     *p, *body;
    size_t      len;
    ngx_str_t   scheme, *host;

    host = ngx_http_tokenbiryani_origin(r, &scheme);

    if (host == NULL) {
        /* nowhere to point it: none at all beats the upstream's */
        len = ctx->resp.held - b->results_url.len + sizeof("null") - 1;

    } else {
        len = ctx->resp.held - b->results_url.len
              + sizeof("\"://" NGX_HTTP_TB_BATCHES_PATH "//results\"") - 1
              + scheme.len + host->len + b->id_len;
    }

    body = ngx_pnalloc(r->pool, len);
    if (body == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(body, ctx->hold, b->results_url.off);

    if (host == NULL) {
        p = ngx_cpymem(p, "null", 4);

    } else {
        p = ngx_sprintf(p,
                        "\"%V://%V" NGX_HTTP_TB_BATCHES_PATH "/%*s/results\"",
                        &scheme, host, b->id_len, b->id);
    }

    p = ngx_cpymem(p, ctx->hold + b->results_url.off + b->results_url.len,
                   ctx->resp.held - b->results_url.off - b->results_url.len);

    ctx->hold = body;
    ctx->hold_size = len;
    ctx->resp.held = p - body;
    r->upstream->headers_in.content_length_n = ctx->resp.held;
    ctx->object_body = 1;

    return NGX_OK;
}


/*
 * The Host the client reached the gateway by, port too (a name, an
 * address), and its scheme: for a URL that points back at the gateway;
 * NULL when it is not one to put in a URL
 */

static ngx_str_t *
ngx_http_tokenbiryani_origin(ngx_http_request_t *r, ngx_str_t *scheme)
{
    ngx_str_t  *host;

    host = r->headers_in.host ? &r->headers_in.host->value : NULL;

    if (host == NULL
        || !tb_chars_ok((char *) host->data, host->len, host->len, ".-:[]"))
    {
        return NULL;
    }

#if (NGX_HTTP_SSL)
    if (r->connection->ssl) {
        ngx_str_set(scheme, "https");
        return host;
    }
#endif

    ngx_str_set(scheme, "http");

    return host;
}


/* one line of a batch's results: a succeeded request's usage, at the
 * batch price, added to charge (another result adds nothing; a line that
 * is not one is lost) */

static void
ngx_http_tokenbiryani_result_line(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *p, size_t len, ngx_http_tokenbiryani_results_t *rd)
{
    size_t                           n;
    tb_cost_usage_t                  cu;
    tb_batch_result_t                res;
    const tb_model_price_t          *price;
    ngx_http_tokenbiryani_charge_t  *charge;

    while (len && (p[len - 1] == '\r' || p[len - 1] == ' '
                   || p[len - 1] == '\t'))
    {
        len--;
    }

    if (len == 0) {
        /* a blank line: nothing of a result */
        return;
    }

    if (tb_batch_result(p, len, &res) != 0) {
        rd->lost++;
        return;
    }

    if (res.type != TB_RESULT_SUCCEEDED) {
        return;
    }

    charge = &rd->charge;

    cu.input = res.usage.input_tokens;
    cu.output = res.usage.output_tokens;
    cu.cache_read = ngx_max(res.usage.cache_read_input_tokens, 0);
    cu.cache_write = ngx_max(res.usage.cache_creation_input_tokens, 0);
    cu.cache_write_1h = ngx_max(res.usage.cache_creation_1h_input_tokens, 0);

    charge->tokens[0] += cu.input;
    charge->tokens[1] += cu.output;
    charge->tokens[2] += cu.cache_read;
    charge->tokens[3] += cu.cache_write;

    n = ngx_strlen(res.model);

    price = tb_price_find(&tmcf->prices, tmcf->builtin, res.model, n);

    if (price) {
        charge->cost += tb_cost(price, &cu, 0) / 2;
    }

    /* the model the usage history files it under */

    if (rd->model[0] == '\0') {
        ngx_memcpy(rd->model, res.model, n + 1);

    } else if (ngx_strcmp(rd->model, res.model) != 0) {
        ngx_cpystrn(rd->model, (u_char *) "(several)", sizeof(rd->model));
    }
}


/* what the results charged, kept on the request that read them for its
 * record (the inspector, /admin/usage); never its own usage, which its
 * account's windows and the ledgers would count again */

static void
ngx_http_tokenbiryani_results_on_record(ngx_http_tokenbiryani_ctx_t *ctx,
    const ngx_http_tokenbiryani_results_t *rd)
{
    ngx_http_tokenbiryani_objreq_t  *o;

    o = ctx->object;

    if (&o->results != rd) {
        o->results = *rd;
    }

    o->charged = 1;
}


void
ngx_http_tokenbiryani_object_changed(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log, const u_char *rid, ngx_uint_t kind, const u_char *id,
    size_t len, ngx_uint_t stage,
    const ngx_http_tokenbiryani_object_view_t *gone)
{
    ngx_http_tokenbiryani_object_view_t  v;

    ngx_http_tokenbiryani_store_object(tmcf, kind, id, len, gone != NULL);

    if (gone == NULL) {
        if (ngx_http_tokenbiryani_object_get(&tmcf->zone, kind, id, len, &v)
            != NGX_OK)
        {
            return;
        }

        gone = &v;
    }

    ngx_http_tokenbiryani_event_object(tmcf, log, rid, gone, stage);
}


ngx_int_t
ngx_http_tokenbiryani_object_said(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log, const u_char *rid, const u_char *id, size_t len,
    const ngx_str_t *answer, tb_batch_obj_t *b)
{
    if (tb_batch_object(answer->data, answer->len, b) != 0
        || b->id_len != len || ngx_memcmp(b->id, id, len) != 0)
    {
        return NGX_DECLINED;
    }

    if (ngx_http_tokenbiryani_object_seen(&tmcf->zone,
                                          NGX_HTTP_TB_OBJECT_BATCH, id, len,
                                          b->status, b->counts,
                                          ngx_http_tokenbiryani_now_ms())
        == NGX_OK)
    {
        ngx_http_tokenbiryani_object_changed(tmcf, log, rid,
                                             NGX_HTTP_TB_OBJECT_BATCH, id,
                                             len, NGX_HTTP_TB_STAGE_CHANGED,
                                             NULL);
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_object_settled(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log, const u_char *rid, const u_char *id, size_t len,
    const ngx_http_tokenbiryani_charge_t *charge)
{
    if (ngx_http_tokenbiryani_object_settle(&tmcf->zone,
                                            NGX_HTTP_TB_OBJECT_BATCH, id, len,
                                            charge)
        != NGX_OK)
    {
        return NGX_DONE;
    }

    ngx_http_tokenbiryani_object_changed(tmcf, log, rid,
                                         NGX_HTTP_TB_OBJECT_BATCH, id, len,
                                         NGX_HTTP_TB_STAGE_CHARGED, NULL);

    return NGX_OK;
}


/*
 * A batch's results, whole: each succeeded request's usage at the batch
 * price, charged once for the batch (its hold released).  Results too
 * large to hold are read as they pass (ngx_http_tokenbiryani_object_bytes).
 */

static ngx_int_t
ngx_http_tokenbiryani_object_charge(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    ngx_http_tokenbiryani_objreq_t     *o;
    ngx_http_tokenbiryani_results_t     rd;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    o = ctx->object;
    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (!ctx->resp.whole || ctx->claim_lost) {
        /* (another gateway charges them: it read them too, or will) */
        return NGX_OK;
    }

    /* read afresh: what passed while it was held is in o->results */

    ngx_memzero(&rd, sizeof(ngx_http_tokenbiryani_results_t));

    ngx_http_tokenbiryani_results_read(tmcf, &rd, r->pool, ctx->hold,
                                       ctx->hold + ctx->resp.held);
    ngx_http_tokenbiryani_results_end(tmcf, &rd);
    ngx_http_tokenbiryani_results_lost(&rd, o->found.reserved,
                                       r->connection->log, o->found.id,
                                       o->found.id_len);

    rd.charge.at_ms = now;

    if (ngx_http_tokenbiryani_object_settled(tmcf, r->connection->log,
                                             ctx->request_id, o->found.id,
                                             o->found.id_len, &rd.charge)
        == NGX_OK)
    {
        ngx_http_tokenbiryani_results_on_record(ctx, &rd);
    }

    return NGX_OK;
}


/* a batch's results, answered 200 and too large to hold: read as they
 * pass */

static ngx_uint_t
ngx_http_tokenbiryani_results_passing(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_objreq_t  *o;

    o = ctx->object;

    return o->op == NGX_HTTP_TB_OBJ_RESULTS && !ctx->resp.whole
           && r->upstream->headers_in.status_n == NGX_HTTP_OK;
}


void
ngx_http_tokenbiryani_results_read(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_results_t *rd, ngx_pool_t *pool, u_char *p,
    u_char *last)
{
    u_char  *nl;
    size_t   n;

    while (p < last) {
        nl = ngx_strlchr(p, last, '\n');
        n = (nl ? nl : last) - p;

        if (rd->skipping) {
            /* the rest of a line too long to read: passed over */

        } else if (ngx_http_tokenbiryani_line_append(pool, &rd->line,
                                                     &rd->line_len,
                                                     &rd->line_size, p, n)
                   != NGX_OK)
        {
            /* longer than the gateway reads (or no memory) */
            rd->lost++;
            rd->lines++;
            rd->skipping = 1;
            rd->line_len = 0;
        }

        if (nl == NULL) {
            break;
        }

        if (!rd->skipping && rd->line_len) {
            ngx_http_tokenbiryani_result_line(tmcf, rd->line, rd->line_len,
                                              rd);
            rd->lines++;
        }

        rd->skipping = 0;
        rd->line_len = 0;
        p = nl + 1;
    }
}


ngx_int_t
ngx_http_tokenbiryani_line_append(ngx_pool_t *pool, u_char **line,
    size_t *len, size_t *size, u_char *p, size_t n)
{
    u_char  *grown;
    size_t   want;

    if (*len + n > NGX_HTTP_TB_RESULT_LINE_MAX) {
        return NGX_DECLINED;
    }

    if (n == 0) {
        return NGX_OK;
    }

    if (*len + n > *size) {
        want = ngx_max(ngx_max(2 * *size, *len + n), 4096);

        grown = ngx_pnalloc(pool, want);
        if (grown == NULL) {
            return NGX_ERROR;
        }

        if (*len) {
            ngx_memcpy(grown, *line, *len);
        }

        *line = grown;
        *size = want;
    }

    ngx_memcpy(*line + *len, p, n);
    *len += n;

    return NGX_OK;
}


void
ngx_http_tokenbiryani_results_end(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_results_t *rd)
{
    if (rd->line_len && !rd->skipping) {
        /* the last line, without its newline */
        ngx_http_tokenbiryani_result_line(tmcf, rd->line, rd->line_len, rd);
        rd->lines++;
        rd->line_len = 0;
    }
}


void
ngx_http_tokenbiryani_results_lost(ngx_http_tokenbiryani_results_t *rd,
    int64_t reserved, ngx_log_t *log, const u_char *id, size_t len)
{
    if (rd->lost == 0) {
        return;
    }

    rd->charge.cost = ngx_max(rd->charge.cost, reserved);

    ngx_log_error(NGX_LOG_WARN, log, 0,
                  "tokenbiryani: %ui of %ui lines of batch \"%*s\"'s "
                  "results could not be read (longer than the gateway reads, "
                  "or not a result): it is charged what it held, if that is "
                  "more than the rest", rd->lost, rd->lines, len, id);
}


void
ngx_http_tokenbiryani_object_bytes(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, u_char *p, u_char *last)
{
    ngx_http_tokenbiryani_objreq_t  *o;

    if (!ngx_http_tokenbiryani_results_passing(r, ctx)) {
        return;
    }

    o = ctx->object;

    ngx_http_tokenbiryani_results_read(
        ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module),
        &o->results, r->pool, p, last);
}


void
ngx_http_tokenbiryani_object_done(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_objreq_t     *o;
    ngx_http_tokenbiryani_results_t    *rd;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (!ngx_http_tokenbiryani_results_passing(r, ctx)) {
        return;
    }

    o = ctx->object;
    rd = &o->results;
    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (ctx->claim_lost) {
        /* another gateway charges them */
        return;
    }

    ngx_http_tokenbiryani_results_end(tmcf, rd);
    ngx_http_tokenbiryani_results_lost(rd, o->found.reserved,
                                       r->connection->log, o->found.id,
                                       o->found.id_len);

    rd->charge.at_ms = ngx_http_tokenbiryani_now_ms();

    if (ngx_http_tokenbiryani_object_settled(tmcf, r->connection->log,
                                             ctx->request_id, o->found.id,
                                             o->found.id_len, &rd->charge)
        == NGX_OK)
    {
        ngx_http_tokenbiryani_results_on_record(ctx, rd);
    }
}


void
ngx_http_tokenbiryani_object_keep(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_object_view_t *v,
    ngx_http_tokenbiryani_account_t *account, int64_t now)
{
    ngx_int_t                           rc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    v->slot = account->slot;
    v->key = ctx->key_hash;
    v->created_ms = now;
    v->seen_ms = now;

    if (ctx->key) {
        ngx_cpystrn(v->key_name, (u_char *) ctx->key->name,
                    sizeof(v->key_name));
    }

    rc = ngx_http_tokenbiryani_object_adopt(&tmcf->zone, v,
                                            NGX_HTTP_TB_OBJECTS_MAX);

    if (rc != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "tokenbiryani: %s \"%*s\" made on account \"%V\" "
                      "could not be kept (%s): its key cannot reach it "
                      "through the gateway",
                      ngx_http_tokenbiryani_object_noun(v->kind), v->id_len,
                      v->id, &account->id,
                      (rc == NGX_DONE || rc == NGX_ABORT
                       || rc == NGX_DECLINED) ? "its id is known already"
                      : rc == NGX_BUSY ? "the zone keeps as many objects as "
                                         "it may"
                      : "no memory");
        return;
    }

    ngx_http_tokenbiryani_object_changed(tmcf, r->connection->log,
                                         ctx->request_id, v->kind, v->id,
                                         v->id_len, NGX_HTTP_TB_STAGE_MADE,
                                         NULL);
}


/* a file's object: the one uploaded kept, on its account, for its key */

static ngx_int_t
ngx_http_tokenbiryani_file_answered(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, int64_t now)
{
    tb_file_obj_t                        f;
    ngx_http_tokenbiryani_objreq_t      *o;
    ngx_http_tokenbiryani_object_view_t  v;

    o = ctx->object;

    if (tb_file_object(ctx->hold, ctx->resp.held, &f) != 0) {
        return NGX_ERROR;
    }

    if (o->op != NGX_HTTP_TB_OBJ_CREATE) {
        /* the account answered for another file than the one asked */
        return (f.id_len == o->found.id_len
                && ngx_memcmp(f.id, o->found.id, f.id_len) == 0)
               ? NGX_OK : NGX_ERROR;
    }

    ngx_memzero(&v, sizeof(v));
    v.kind = NGX_HTTP_TB_OBJECT_FILE;
    v.settled = 1;                      /* a file holds nothing */
    v.size = f.size;
    v.downloadable = f.downloadable;
    v.id_len = f.id_len;
    ngx_memcpy(v.id, f.id, f.id_len);
    ngx_cpystrn(v.filename, (u_char *) f.filename, sizeof(v.filename));
    ngx_cpystrn(v.mime, (u_char *) f.mime, sizeof(v.mime));

    ngx_http_tokenbiryani_object_keep(r, ctx, &v, ctx->account, now);

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_object_answered(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    int64_t                              now;
    tb_batch_obj_t                       b;
    ngx_http_tokenbiryani_objreq_t      *o;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    ngx_http_tokenbiryani_object_view_t  v;

    o = ctx->object;
    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    now = ngx_http_tokenbiryani_now_ms();

    if (o->op == NGX_HTTP_TB_OBJ_RESULTS) {
        return ngx_http_tokenbiryani_object_charge(r, ctx, now);
    }

    if (o->op == NGX_HTTP_TB_OBJ_CONTENT) {
        /* a file's bytes: the client's, nothing of them read */
        return NGX_OK;
    }

    if (o->op == NGX_HTTP_TB_OBJ_DELETE) {
        /* {"id": ..., "type": "..._deleted"}: forgotten here */
        if (ngx_http_tokenbiryani_object_remove(&tmcf->zone, o->found.kind,
                                                o->found.id,
                                                o->found.id_len, now, &v)
            == NGX_OK)
        {
            ngx_http_tokenbiryani_object_changed(tmcf, r->connection->log,
                                                 ctx->request_id, v.kind,
                                                 v.id, v.id_len,
                                                 NGX_HTTP_TB_STAGE_DELETED,
                                                 &v);
        }

        return NGX_OK;
    }

    if (o->found.kind == NGX_HTTP_TB_OBJECT_FILE) {
        return ngx_http_tokenbiryani_file_answered(r, ctx, now);
    }

    if (tb_batch_object(ctx->hold, ctx->resp.held, &b) != 0) {
        return NGX_ERROR;
    }

    if (o->op != NGX_HTTP_TB_OBJ_CREATE) {
        if (b.id_len != o->found.id_len
            || ngx_memcmp(b.id, o->found.id, b.id_len) != 0)
        {
            /* the account answered for another batch than the one asked */
            return NGX_ERROR;
        }

        if (ngx_http_tokenbiryani_object_seen(&tmcf->zone,
                                              NGX_HTTP_TB_OBJECT_BATCH,
                                              o->found.id, o->found.id_len,
                                              b.status, b.counts, now)
            == NGX_OK)
        {
            /* what changed, kept: a poll that finds it as it was writes
             * nothing */
            ngx_http_tokenbiryani_object_changed(tmcf, r->connection->log,
                                                 ctx->request_id,
                                                 NGX_HTTP_TB_OBJECT_BATCH,
                                                 o->found.id,
                                                 o->found.id_len,
                                                 NGX_HTTP_TB_STAGE_CHANGED,
                                                 NULL);
        }

    } else {
        ngx_memzero(&v, sizeof(v));
        v.kind = NGX_HTTP_TB_OBJECT_BATCH;
        v.status = b.status;
        v.over = (b.status == TB_BATCH_ENDED);
        v.reserved = o->estimate;
        v.held = 1;
        ngx_memcpy(v.counts, b.counts, sizeof(v.counts));
        v.id_len = b.id_len;
        ngx_memcpy(v.id, b.id, b.id_len);

        ngx_http_tokenbiryani_object_keep(r, ctx, &v, ctx->account, now);
    }

    if (b.results_url.len) {
        return ngx_http_tokenbiryani_object_results_url(r, ctx, &b);
    }

    return NGX_OK;
}


/* the list: the gateway's own answer, of the key's batches only */

static u_char *
ngx_http_tokenbiryani_object_json(u_char *p,
    const ngx_http_tokenbiryani_object_view_t *v, const ngx_str_t *scheme,
    const ngx_str_t *host)
{
    ngx_uint_t  i;

    if (v->kind == NGX_HTTP_TB_OBJECT_FILE) {
        p = ngx_sprintf(p, "{\"id\":\"%*s\",\"type\":\"file\","
                        "\"filename\":\"", v->id_len, v->id);
        p = (u_char *) ngx_escape_json(p, (u_char *) v->filename,
                                       ngx_strlen(v->filename));
        p = ngx_cpymem(p, "\",\"mime_type\":\"",
                       sizeof("\",\"mime_type\":\"") - 1);
        p = (u_char *) ngx_escape_json(p, (u_char *) v->mime,
                                       ngx_strlen(v->mime));
        p = ngx_cpymem(p, "\",\"size_bytes\":",
                       sizeof("\",\"size_bytes\":") - 1);
        p = (v->size >= 0) ? ngx_sprintf(p, "%L", v->size)
                           : ngx_cpymem(p, "null", 4);
        p = ngx_http_tokenbiryani_object_time(p, ",\"created_at\":",
                                              v->created_ms);

        return ngx_sprintf(p, ",\"downloadable\":%s}",
                           v->downloadable ? "true" : "false");
    }

    p = ngx_sprintf(p, "{\"id\":\"%*s\",\"type\":\"message_batch\","
                    "\"processing_status\":\"%s\",\"request_counts\":{",
                    v->id_len, v->id,
                    tb_batch_status_name((int) v->status));

    for (i = 0; i < NGX_HTTP_TB_OBJECT_COUNTS; i++) {
        p = ngx_sprintf(p, "%s\"%s\":%L", i ? "," : "",
                        tb_batch_count_name(i),
                        v->counts[i] > 0 ? v->counts[i] : 0);
    }

    /* when it ended, was archived or its cancel asked the gateway does not
     * keep: a retrieve gives its account's word */

    p = ngx_cpymem(p, "},\"ended_at\":null,\"archived_at\":null,"
                   "\"cancel_initiated_at\":null",
                   sizeof("},\"ended_at\":null,\"archived_at\":null,"
                          "\"cancel_initiated_at\":null") - 1);
    p = ngx_http_tokenbiryani_object_time(p, ",\"created_at\":",
                                          v->created_ms);
    p = ngx_http_tokenbiryani_object_time(p, ",\"expires_at\":",
                                          v->created_ms
                                          + NGX_HTTP_TB_BATCH_EXPIRES_MS);

    if (v->status != TB_BATCH_ENDED || host == NULL) {
        return ngx_cpymem(p, ",\"results_url\":null}",
                          sizeof(",\"results_url\":null}") - 1);
    }

    return ngx_sprintf(p, ",\"results_url\":\"%V://%V"
                       NGX_HTTP_TB_BATCHES_PATH "/%*s/results\"}",
                       scheme, host, v->id_len, v->id);
}


/* name, then the time at ms as the API writes one, quoted */

static u_char *
ngx_http_tokenbiryani_object_time(u_char *p, const char *name, int64_t ms)
{
    ngx_tm_t  tm;

    ngx_gmtime(ms / 1000, &tm);

    return ngx_sprintf(p, "%s\"%4d-%02d-%02dT%02d:%02d:%02dZ\"", name,
                       tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                       tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec);
}


static ngx_int_t
ngx_http_tokenbiryani_object_list_answer(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    u_char                               *p;
    ngx_int_t                             limit;
    ngx_str_t                             json, value, scheme, *host;
    ngx_uint_t                            i, n, more;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_http_tokenbiryani_object_view_t  *v;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    limit = 20;

    if (ngx_http_arg(r, (u_char *) "limit", 5, &value) == NGX_OK) {
        limit = ngx_atoi(value.data, value.len);

        if (limit < 1 || limit > NGX_HTTP_TB_LIST_MAX) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
                "invalid_request_error",
                "limit: an integer from 1 to 1000");
            return NGX_HTTP_BAD_REQUEST;
        }
    }

    if (ngx_http_arg(r, (u_char *) "before_id", 9, &value) == NGX_OK) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
            "invalid_request_error",
            "before_id: the gateway pages its list forward only, with "
            "after_id");
        return NGX_HTTP_BAD_REQUEST;
    }

    if (ngx_http_arg(r, (u_char *) "after_id", 8, &value) != NGX_OK) {
        value.len = 0;
    }

    v = ngx_palloc(r->pool,
                   limit * sizeof(ngx_http_tokenbiryani_object_view_t));
    if (v == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_tokenbiryani_object_list(&tmcf->zone,
                                          ((ngx_http_tokenbiryani_objreq_t *)
                                           ctx->object)->found.kind,
                                          ctx->admin ? 0 : ctx->key_hash,
                                          value.len ? value.data : NULL,
                                          value.len, v, (ngx_uint_t) limit,
                                          &more);

    host = ngx_http_tokenbiryani_origin(r, &scheme);

    /* a file's name and type escaped may be six times as long; a batch's
     * results_url names the Host */
    json.data = ngx_pnalloc(r->pool, 128 + n * (640 + 3 * TB_BATCH_ID_MAX
                                                + (host ? host->len : 0)
                                                + 6 * (TB_FILE_NAME_MAX
                                                       + TB_FILE_MIME_MAX)));
    if (json.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_sprintf(json.data, "{\"data\":[");

    for (i = 0; i < n; i++) {
        if (i) {
            *p++ = ',';
        }

        p = ngx_http_tokenbiryani_object_json(p, &v[i], &scheme, host);
    }

    p = ngx_sprintf(p, "],\"has_more\":%s,", more ? "true" : "false");

    if (n) {
        p = ngx_sprintf(p, "\"first_id\":\"%*s\",\"last_id\":\"%*s\"}",
                        v[0].id_len, v[0].id, v[n - 1].id_len, v[n - 1].id);

    } else {
        p = ngx_sprintf(p, "\"first_id\":null,\"last_id\":null}");
    }

    json.len = p - json.data;

    ngx_http_finalize_request(r,
        ngx_http_tokenbiryani_send_json(r, NGX_HTTP_OK, &json));

    return NGX_DONE;
}


/* the most files a Message may name that the gateway looks up */
#define NGX_HTTP_TB_FILE_REFS_MAX      64


ngx_int_t
ngx_http_tokenbiryani_files_pin(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body)
{
    size_t                               i, n;
    ngx_int_t                            slot;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    ngx_http_tokenbiryani_object_view_t  v;
    u_char                               first[TB_BATCH_ID_MAX + 1];
    tb_file_ref_t                        refs[NGX_HTTP_TB_FILE_REFS_MAX];

    /* a walk of its own, with files.api only: a member or an id may be
     * escaped any way JSON allows, so no search for a word could tell */

    if (tb_file_refs(body->data, body->len, refs, NGX_HTTP_TB_FILE_REFS_MAX,
                     &n)
        != 0
        || n == 0)
    {
        return NGX_OK;
    }

    if (n > NGX_HTTP_TB_FILE_REFS_MAX) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
            "invalid_request_error", "the request names %uz files: the "
            "gateway takes %d at most", n, NGX_HTTP_TB_FILE_REFS_MAX);
        return NGX_HTTP_BAD_REQUEST;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    slot = -1;
    first[0] = '\0';

    for (i = 0; i < n; i++) {

        /*
         * A file this key did not upload through the gateway is answered
         * as unknown, and nothing goes upstream: a file id is no key to
         * another tenant's files.  An admin key reaches every file the
         * gateway knows.
         */

        if (refs[i].id_len == 0
            || ngx_http_tokenbiryani_object_get(&tmcf->zone,
                                                NGX_HTTP_TB_OBJECT_FILE,
                                                (u_char *) refs[i].id,
                                                refs[i].id_len, &v)
               != NGX_OK
            || (!ctx->admin && v.key != ctx->key_hash))
        {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_NOT_FOUND,
                "not_found_error", "file not found: %s",
                refs[i].id_len ? refs[i].id : "(an id the API never gives)");
            return NGX_HTTP_NOT_FOUND;
        }

        if (slot >= 0 && v.slot != slot) {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_BAD_REQUEST,
                "invalid_request_error", "files %s and %s are held by two "
                "accounts of the pool, and a request goes to one: name "
                "files uploaded through one account (upload the file again "
                "to have it where the other is)", first, refs[i].id);
            return NGX_HTTP_BAD_REQUEST;
        }

        if (slot < 0) {
            slot = v.slot;
            ngx_cpystrn(first, (u_char *) refs[i].id, sizeof(first));
        }
    }

    /* a hard pin: the files' account or none, never a failover */
    ctx->pin = slot;

    return NGX_OK;
}
