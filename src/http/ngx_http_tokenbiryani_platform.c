/*
 * tokenbiryani: Bedrock and Vertex accounts (see
 * ngx_http_tokenbiryani_platform.h).
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_platform.h"
#include "tb_provider.h"
#include "tb_sigv4.h"
#include "tb_evstream.h"
#include "tb_gauth.h"


#define NGX_HTTP_TB_EVS_BUF  8192

/* the request's platform part: made by the first platform attempt */
#define PL(ctx)  ((ngx_http_tokenbiryani_platform_ctx_t *) (ctx)->plat)


typedef struct {
    ngx_http_request_t            *request;
    ngx_http_tokenbiryani_ctx_t   *ctx;
    ngx_uint_t                     filter;  /* after the commit */
    ngx_chain_t                  **ll;      /* the next out link */
    ngx_buf_t                     *b;       /* being filled */
} ngx_http_tokenbiryani_evs_sink_t;


static ngx_chain_t *ngx_http_tokenbiryani_platform_body(
    ngx_http_request_t *r, ngx_http_tokenbiryani_ctx_t *ctx,
    tb_account_conf_t *ac);
static u_char *ngx_http_tokenbiryani_platform_sign(ngx_http_request_t *r,
    ngx_http_tokenbiryani_account_t *a, ngx_str_t *path, ngx_str_t *ctype,
    const char *payload_sha, u_char *p, u_char *last);
static tb_evs_t *ngx_http_tokenbiryani_evs_get(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_evs_cleanup(void *data);
static ngx_int_t ngx_http_tokenbiryani_evs_feed(
    ngx_http_tokenbiryani_evs_sink_t *s, u_char *p, size_t n);
static ngx_int_t ngx_http_tokenbiryani_evs_chunk(void *data, u_char *p,
    size_t n);
static int ngx_http_tokenbiryani_evs_frame(void *data,
    const tb_evs_frame_t *f);
static u_char *ngx_http_tokenbiryani_evs_room(
    ngx_http_tokenbiryani_evs_sink_t *s, size_t need);


ngx_int_t
ngx_http_tokenbiryani_platform_fill(ngx_pool_t *pool,
    ngx_http_tokenbiryani_account_t *a, char *err, size_t errlen)
{
    u_char             *p;
    size_t              len;
    tb_gsa_t           *sa;
    const char         *region, *project;
    tb_account_conf_t  *ac;

    ac = a->conf;

    ngx_str_null(&a->signer);
    ngx_str_null(&a->model_path);
    ngx_str_null(&a->bearer);
    a->token_until = 0;
    a->token_next = 0;
    a->gauth = NULL;

    if (!tb_provider_platform(ac->type)) {
        a->platform = 0;
        return NGX_OK;
    }

    a->platform = ac->type;

    if (ac->type == TB_ACCOUNT_BEDROCK) {

        ngx_str_set(&a->model_path, "/model/");

        if (ac->options.access_key_id == NULL) {
            /* an API key, in auth_header */
            return NGX_OK;
        }

        if (ngx_strchr(ac->options.access_key_id, CR)
            || ngx_strchr(ac->options.access_key_id, LF)
            || (ac->options.session_token
                && (ngx_strchr(ac->options.session_token, CR)
                    || ngx_strchr(ac->options.session_token, LF))))
        {
            ngx_snprintf((u_char *) err, errlen, "options.access_key_id or "
                         "session_token has a line break%Z");
            return NGX_ERROR;
        }

        /* for the fingerprint only: the credential's identity */

        len = ngx_strlen(ac->options.access_key_id) + 1
              + ngx_strlen(ac->options.secret_access_key);

        a->signer.data = ngx_pnalloc(pool, len);
        if (a->signer.data == NULL) {
            return NGX_ABORT;
        }

        p = ngx_sprintf(a->signer.data, "%s\n%s", ac->options.access_key_id,
                        ac->options.secret_access_key);
        a->signer.len = p - a->signer.data;

        return NGX_OK;
    }

    /* vertex: a token of the operator's, or the service account's */

    if (ac->options.access_token) {
        len = sizeof("Authorization: Bearer " CRLF) - 1
              + ngx_strlen(ac->options.access_token);

        a->bearer.data = ngx_pnalloc(pool, len);
        if (a->bearer.data == NULL) {
            return NGX_ABORT;
        }

        a->bearer.len = ngx_sprintf(a->bearer.data, "Authorization: Bearer "
                                    "%s" CRLF, ac->options.access_token)
                        - a->bearer.data;

        /* the fingerprint: a new token is a new credential */
        a->signer = a->bearer;

    } else if (ac->gsa) {
        sa = ac->gsa;
        a->signer.data = (u_char *) sa->client_email;
        a->signer.len = ngx_strlen(sa->client_email);
    }

    project = ac->options.project ? ac->options.project : "";
    region = ac->options.region ? ac->options.region : "us-central1";

    len = sizeof("/v1/projects//locations//publishers/anthropic/models/") - 1
          + 3 * ngx_strlen(project) + ngx_strlen(region);

    a->model_path.data = ngx_pnalloc(pool, len);
    if (a->model_path.data == NULL) {
        return NGX_ABORT;
    }

    p = ngx_cpymem(a->model_path.data, "/v1/projects/",
                   sizeof("/v1/projects/") - 1);
    p += tb_provider_path_segment(project, (char *) p,
                                  3 * ngx_strlen(project) + 1);
    p = ngx_sprintf(p, "/locations/%s/publishers/anthropic/models/", region);
    a->model_path.len = p - a->model_path.data;

    return NGX_OK;
}


/*
 * The client's anthropic-beta values, every header of that name joined
 * with commas (empty when it sent none); made once per request.
 */

static ngx_int_t
ngx_http_tokenbiryani_betas(ngx_http_request_t *r, ngx_str_t *out)
{
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);

    if (!PL(ctx)->betas_made) {
        if (ngx_http_tokenbiryani_header_join(r, "anthropic-beta",
                                              sizeof("anthropic-beta") - 1,
                                              &PL(ctx)->betas)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        PL(ctx)->betas_made = 1;
    }

    *out = PL(ctx)->betas;

    return NGX_OK;
}


/*
 * The body for this platform, made once per request: a link of its own
 * that the attempt's header is put in front of.
 */

static ngx_chain_t *
ngx_http_tokenbiryani_platform_body(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, tb_account_conf_t *ac)
{
    size_t                n, max, vlen;
    ngx_buf_t            *b;
    ngx_str_t             betas;
    ngx_uint_t            k, type;
    ngx_chain_t          *cl;
    const char           *version;

    type = ac->type;
    k = (type == TB_ACCOUNT_BEDROCK) ? 0 : 1;

    /* the account's options.anthropic_version, or the type's */
    version = ac->options.anthropic_version;
    vlen = version ? ngx_strlen(version) : 0;

    if (PL(ctx)->pbody[k]
        && PL(ctx)->pversion[k].len == vlen
        && (vlen == 0
            || ngx_strncmp(PL(ctx)->pversion[k].data, version, vlen) == 0))
    {
        return PL(ctx)->pbody[k];
    }

    ngx_str_null(&betas);

    if (type == TB_ACCOUNT_BEDROCK
        && ngx_http_tokenbiryani_betas(r, &betas) != NGX_OK)
    {
        return NULL;
    }

    max = tb_provider_body_max(ctx->route.body.len, betas.len);

    b = ngx_create_temp_buf(r->pool, max);
    if (b == NULL) {
        return NULL;
    }

    n = tb_provider_body(type, version, ctx->route.body.data,
                         ctx->route.body.len,
                         (char *) betas.data, betas.len, b->pos, max);

    if (n == (size_t) -1 || n > max) {
        /* the handler checked it was one JSON object */
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "tokenbiryani: the body could not be translated");
        return NULL;
    }

    b->last = b->pos + n;

    /*
     * The request's end: an upstream TLS connection buffers what it is
     * given until a buffer says to flush, and a kept-alive connection
     * gets no write event that would send it later.
     */
    b->last_buf = 1;

    cl = ngx_alloc_chain_link(r->pool);
    if (cl == NULL) {
        return NULL;
    }

    cl->buf = b;
    cl->next = NULL;

    if (type == TB_ACCOUNT_BEDROCK) {
        tb_sigv4_sha256_hex(b->pos, n, (char *) PL(ctx)->pbody_sha);
    }

    PL(ctx)->pbody[k] = cl;

    PL(ctx)->pversion[k].len = vlen;
    PL(ctx)->pversion[k].data = (u_char *) "";

    if (vlen) {
        PL(ctx)->pversion[k].data = ngx_pnalloc(r->pool, vlen);
        if (PL(ctx)->pversion[k].data == NULL) {
            return NULL;
        }

        ngx_memcpy(PL(ctx)->pversion[k].data, version, vlen);
    }

    return cl;
}


ngx_int_t
ngx_http_tokenbiryani_platform_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    u_char                           *p;
    size_t                            len, seg;
    ngx_buf_t                        *b;
    ngx_str_t                         path, ctype, beta;
    ngx_chain_t                      *body;
    const char                       *id, *action;
    tb_account_conf_t                *ac;
    ngx_http_tokenbiryani_account_t  *a;

    a = ctx->account;
    ac = a->conf;

    if (ctx->plat == NULL) {
        ctx->plat = ngx_pcalloc(r->pool,
                                sizeof(ngx_http_tokenbiryani_platform_ctx_t));
        if (ctx->plat == NULL) {
            return NGX_ERROR;
        }

        /* the client's body, for an attempt on another account */
        PL(ctx)->body_links = ctx->hdr->next;
        PL(ctx)->body_total = ctx->body_len;
    }

    body = ngx_http_tokenbiryani_platform_body(r, ctx, ac);
    if (body == NULL) {
        return NGX_ERROR;
    }

    /* always from its first byte: another attempt may have sent it */
    body->buf->pos = body->buf->start;
    ctx->hdr->next = body;
    ctx->body_len = ngx_buf_size(body->buf);

    /* the router let only a mapped model through */

    id = tb_model_map(ac, ctx->body.model, ctx->body.model_len);

    if (id == NULL) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "tokenbiryani: account \"%V\" has no model_map entry "
                      "for \"%s\"", &a->id, ctx->body.model);
        return NGX_ERROR;
    }

    if (ac->type == TB_ACCOUNT_BEDROCK) {
        action = ctx->body.stream ? "/invoke-with-response-stream"
                                  : "/invoke";

    } else {
        action = ctx->body.stream ? ":streamRawPredict" : ":rawPredict";
    }

    ngx_str_set(&ctype, "application/json");

    seg = tb_provider_path_segment(id, NULL, 0);

    path.len = a->path_prefix.len + a->model_path.len + seg
               + ngx_strlen(action);
    path.data = ngx_pnalloc(r->pool, path.len + 1);
    if (path.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(path.data, a->path_prefix.data, a->path_prefix.len);
    p = ngx_cpymem(p, a->model_path.data, a->model_path.len);
    p += tb_provider_path_segment(id, (char *) p, seg + 1);
    ngx_memcpy(p, action, ngx_strlen(action));

    /* Vertex takes the betas as a header: the client's, as they came */

    ngx_str_null(&beta);

    if (ac->type == TB_ACCOUNT_VERTEX
        && ngx_http_tokenbiryani_betas(r, &beta) != NGX_OK)
    {
        return NGX_ERROR;
    }

    len = beta.len ? sizeof("anthropic-beta: " CRLF) - 1 + beta.len : 0;

    len += sizeof("POST  HTTP/1.1" CRLF) - 1 + path.len
           + sizeof("Host: " CRLF) - 1 + a->host_header.len
           + sizeof("Content-Type: " CRLF) - 1 + ctype.len
           + sizeof("Accept: application/vnd.amazon.eventstream" CRLF) - 1
           + sizeof("Content-Length: " CRLF) - 1 + NGX_OFF_T_LEN
           + a->auth_header.len + a->bearer.len
           + sizeof("X-Amz-Date: 20150830T123600Z" CRLF) - 1
           + sizeof("X-Amz-Security-Token: " CRLF) - 1
           + (ac->options.session_token
              ? ngx_strlen(ac->options.session_token) : 0)
           + sizeof("Authorization: AWS4-HMAC-SHA256 Credential=////"
                    "aws4_request, SignedHeaders=content-type;host;"
                    "x-amz-date;x-amz-security-token, Signature=" CRLF)
           + 64 + 8 + 16 + (ac->options.access_key_id
                            ? ngx_strlen(ac->options.access_key_id) : 0)
           + (ac->options.region ? ngx_strlen(ac->options.region) : 16)
           + sizeof(CRLF) - 1;

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last = ngx_sprintf(b->last, "POST %V HTTP/1.1" CRLF "Host: %V" CRLF
                          "Content-Type: %V" CRLF "Content-Length: %O" CRLF,
                          &path, &a->host_header, &ctype, ctx->body_len);

    if (ac->type == TB_ACCOUNT_BEDROCK) {
        b->last = ngx_sprintf(b->last, "Accept: %s" CRLF,
                              ctx->body.stream
                              ? "application/vnd.amazon.eventstream"
                              : "application/json");

        if (ac->options.access_key_id) {
            b->last = ngx_http_tokenbiryani_platform_sign(r, a, &path, &ctype,
                                                  (char *) PL(ctx)->pbody_sha,
                                                  b->last, b->end);
            if (b->last == NULL) {
                return NGX_ERROR;
            }
        }

    } else {
        b->last = ngx_cpymem(b->last, "Accept: application/json" CRLF,
                             sizeof("Accept: application/json" CRLF) - 1);

        if (beta.len) {
            b->last = ngx_sprintf(b->last, "anthropic-beta: %V" CRLF, &beta);
        }
    }

    /* the credential (an API key, or Vertex's token) and extra headers */

    if (a->bearer.len) {
        b->last = ngx_cpymem(b->last, a->bearer.data, a->bearer.len);
    }

    b->last = ngx_copy(b->last, a->auth_header.data, a->auth_header.len);

    *b->last++ = CR; *b->last++ = LF;

    b->flush = 1;

    ctx->hdr->buf = b;

    return NGX_OK;
}


/*
 * SigV4 over what this attempt sends: the path as it goes, Host,
 * Content-Type, X-Amz-Date (now) and the session token, the body's
 * SHA-256.  The headers are written at p; NULL when they cannot be.
 */

static u_char *
ngx_http_tokenbiryani_platform_sign(ngx_http_request_t *r,
    ngx_http_tokenbiryani_account_t *a, ngx_str_t *path, ngx_str_t *ctype,
    const char *payload_sha, u_char *p, u_char *last)
{
    size_t              n, m;
    char               *creq, date[TB_SIGV4_DATE_LEN + 1], sh[128];
    ngx_uint_t          nh;
    tb_sigv4_key_t      key;
    tb_account_conf_t  *ac;
    tb_sigv4_header_t   h[4];

    ac = a->conf;

    tb_sigv4_date(ngx_time(), date);

    h[0].name = "host";
    h[0].name_len = 4;
    h[0].value = (char *) a->host_header.data;
    h[0].value_len = a->host_header.len;

    h[1].name = "content-type";
    h[1].name_len = 12;
    h[1].value = (char *) ctype->data;
    h[1].value_len = ctype->len;

    h[2].name = "x-amz-date";
    h[2].name_len = 10;
    h[2].value = date;
    h[2].value_len = TB_SIGV4_DATE_LEN;

    nh = 3;

    if (ac->options.session_token) {
        h[3].name = "x-amz-security-token";
        h[3].name_len = 20;
        h[3].value = ac->options.session_token;
        h[3].value_len = ngx_strlen(ac->options.session_token);
        nh = 4;
    }

    n = tb_sigv4_canonical(NULL, 0, "POST", path->data, path->len, NULL, 0,
                           h, nh, payload_sha, sh, sizeof(sh));

    if (n == (size_t) -1) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "tokenbiryani: account \"%V\": the request cannot be "
                      "signed", &a->id);
        return NULL;
    }

    creq = ngx_pnalloc(r->pool, n + 1);
    if (creq == NULL) {
        return NULL;
    }

    (void) tb_sigv4_canonical(creq, n + 1, "POST", path->data, path->len,
                              NULL, 0, h, nh, payload_sha, sh, sizeof(sh));

    key.access_key = ac->options.access_key_id;
    key.secret = ac->options.secret_access_key;
    key.region = ac->options.region ? ac->options.region : "us-east-1";
    key.service = "bedrock";

    p = ngx_sprintf(p, "X-Amz-Date: %s" CRLF, date);

    if (ac->options.session_token) {
        p = ngx_sprintf(p, "X-Amz-Security-Token: %s" CRLF,
                        ac->options.session_token);
    }

    p = ngx_cpymem(p, "Authorization: ", sizeof("Authorization: ") - 1);

    m = tb_sigv4_authorization(&key, date, creq, n, sh, (char *) p,
                               last - p);
    if (m == 0) {
        return NULL;
    }

    p += m;
    *p++ = CR; *p++ = LF;

    return p;
}


ngx_uint_t
ngx_http_tokenbiryani_platform_response_header(
    ngx_http_tokenbiryani_ctx_t *ctx, u_char *lowcase, size_t len,
    u_char *value, size_t vlen)
{
    size_t  n;

    static ngx_str_t  keep[] = {
        ngx_string("content-type"),
        ngx_string("content-length"),
        ngx_string("transfer-encoding"),
        ngx_string("connection"),
        ngx_string("retry-after"),
        ngx_null_string
    };

    ngx_str_t  *k;

    if (len == sizeof("x-amzn-errortype") - 1
        && ngx_strncmp(lowcase, "x-amzn-errortype", len) == 0)
    {
        n = ngx_min(vlen, sizeof(PL(ctx)->errname) - 1);
        ngx_memcpy(PL(ctx)->errname, value, n);
        PL(ctx)->errname[n] = '\0';
        return 0;
    }

    for (k = keep; k->len; k++) {
        if (len == k->len && ngx_strncmp(lowcase, k->data, len) == 0) {
            return 1;
        }
    }

    /* the platform's request ids, metrics and the like stay the operator's */
    return 0;
}


ngx_uint_t
ngx_http_tokenbiryani_platform_error(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status)
{
    u_char       *p;
    size_t        n;
    tb_perror_t   e;

    n = ngx_strlen(PL(ctx)->errname);

    tb_provider_error((tb_account_type_e) ctx->account->platform, (int) status,
                      n ? PL(ctx)->errname : NULL, n,
                      ctx->resp.errbody_len ? ctx->resp.errbody : NULL,
                      ctx->resp.errbody_len, &e);

    n = tb_provider_error_body(&e, NULL, 0);

    p = ngx_pnalloc(r->pool, n + 1);
    if (p == NULL) {
        return status;
    }

    (void) tb_provider_error_body(&e, (char *) p, n + 1);

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: %*s: account \"%V\" answered %ui %s: %s",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  &ctx->account->id, status, e.name[0] ? e.name : "-",
                  e.type);

    ctx->resp.errbody = p;
    ctx->resp.errbody_len = n;
    ctx->resp.replaced = 1;
    PL(ctx)->replaced_status = e.status;

    /* the name as shown (letters, digits, '_'), Google's status included */
    ngx_cpystrn(PL(ctx)->errname, (u_char *) e.name, sizeof(PL(ctx)->errname));

    return (ngx_uint_t) e.status;
}


const u_char *
ngx_http_tokenbiryani_platform_errname(ngx_http_tokenbiryani_ctx_t *ctx)
{
    if (ctx->plat == NULL || ctx->account == NULL
        || !ctx->account->platform || PL(ctx)->errname[0] == '\0')
    {
        return NULL;
    }

    return PL(ctx)->errname;
}


void
ngx_http_tokenbiryani_platform_error_commit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_upstream_t  *u;

    u = r->upstream;

    /*
     * What the client reads is ours: the platform's body, of whatever
     * length and framing, is left on a connection that is not kept.
     */

    u->buffer.start = ctx->resp.errbody;
    u->buffer.pos = ctx->resp.errbody;
    u->buffer.last = ctx->resp.errbody + ctx->resp.errbody_len;
    u->buffer.end = u->buffer.last;

    u->headers_in.status_n = PL(ctx)->replaced_status;
    u->headers_in.status_line.len = 0;
    u->headers_in.chunked = 0;
    u->headers_in.content_length_n = ctx->resp.errbody_len;

    if (u->headers_in.content_type) {
        ngx_str_set(&u->headers_in.content_type->value, "application/json");
    }

    ctx->resp.overlong = 1;
    ctx->resp.held = 0;
}


/*
 * The event-stream decoder, made once per request; each attempt begins
 * it again (ngx_http_tokenbiryani_platform_reset).
 */

static tb_evs_t *
ngx_http_tokenbiryani_evs_get(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_pool_cleanup_t  *cln;

    if (PL(ctx)->evs == NULL) {
        cln = ngx_pool_cleanup_add(r->pool, sizeof(tb_evs_t));
        if (cln == NULL) {
            return NULL;
        }

        cln->handler = ngx_http_tokenbiryani_evs_cleanup;
        PL(ctx)->evs = cln->data;
        tb_evs_init(PL(ctx)->evs, TB_EVS_FRAME_MAX);
    }

    return PL(ctx)->evs;
}


static void
ngx_http_tokenbiryani_evs_cleanup(void *data)
{
    tb_evs_free(data);
}


/* room for need bytes of SSE where this sink writes: its start */

static u_char *
ngx_http_tokenbiryani_evs_room(ngx_http_tokenbiryani_evs_sink_t *s,
    size_t need)
{
    size_t                        size;
    ngx_buf_t                    *b;
    ngx_chain_t                  *cl;
    ngx_http_request_t           *r;
    ngx_http_upstream_t          *u;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    r = s->request;
    ctx = s->ctx;

    if (!s->filter) {

        /* before the commit: ctx->hold, grown by doubling */

        if (ctx->hold_size - ctx->resp.held >= need) {
            return ctx->hold + ctx->resp.held;
        }

        size = ngx_max(2 * ctx->hold_size, ctx->resp.held + need);
        size = ngx_max(size, NGX_HTTP_TB_EVS_BUF);

        if (ngx_http_tokenbiryani_hold_resize(r, ctx, size) != NGX_OK) {
            return NULL;
        }

        return ctx->hold + ctx->resp.held;
    }

    /* after it: bufs of the upstream's free list, their memory reused */

    if (s->b && (size_t) (s->b->end - s->b->last) >= need) {
        return s->b->last;
    }

    u = r->upstream;

    cl = ngx_chain_get_free_buf(r->pool, &u->free_bufs);
    if (cl == NULL) {
        return NULL;
    }

    b = cl->buf;

    if (b->start == NULL || (size_t) (b->end - b->start) < need) {
        size = ngx_max(need, NGX_HTTP_TB_EVS_BUF);

        b->start = ngx_palloc(r->pool, size);
        if (b->start == NULL) {
            return NULL;
        }

        b->end = b->start + size;
    }

    b->pos = b->start;
    b->last = b->start;
    b->temporary = 1;
    b->memory = 0;
    b->flush = 1;
    b->last_buf = 0;
    b->tag = u->output.tag;

    *s->ll = cl;
    s->ll = &cl->next;
    s->b = b;

    return b->last;
}


static int
ngx_http_tokenbiryani_evs_frame(void *data, const tb_evs_frame_t *f)
{
    ngx_http_tokenbiryani_evs_sink_t *s = data;

    u_char                       *p;
    size_t                        n, need;
    unsigned                      seen;
    tb_evs_kind_e                 kind;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = s->ctx;
    need = tb_evs_sse_max(f->payload_len);

    p = ngx_http_tokenbiryani_evs_room(s, need);
    if (p == NULL) {
        return -2;
    }

    n = tb_evs_bedrock_sse(f, p, need, &kind);

    if (kind == TB_EVS_BAD) {
        return -3;
    }

    if (n == 0) {
        return 0;
    }

    seen = tb_sse_feed(ctx->sse, p, n);

    if (s->filter) {
        s->b->last += n;

        if ((seen & TB_SSE_ERROR) && ctx->committed) {
            ctx->resp.error_after_commit = 1;
        }

    } else {
        ctx->resp.held += n;
        ctx->resp.sse_fed += n;
    }

    return 0;
}


/* decoded stream bytes into the decoder; NGX_ERROR when it broke */

static ngx_int_t
ngx_http_tokenbiryani_evs_feed(ngx_http_tokenbiryani_evs_sink_t *s,
    u_char *p, size_t n)
{
    int                           rc;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = s->ctx;

    rc = tb_evs_feed(PL(ctx)->evs, p, n, ngx_http_tokenbiryani_evs_frame, s);

    if (rc == 0) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_ERR, s->request->connection->log, 0,
                  "tokenbiryani: account \"%V\" sent a broken event-stream: "
                  "%s", &ctx->account->id,
                  rc == -1 ? PL(ctx)->evs->why
                  : rc == -2 ? "no memory"
                  : "a frame whose payload is not an Anthropic event");

    return NGX_ERROR;
}


void
ngx_http_tokenbiryani_platform_reset(ngx_http_tokenbiryani_ctx_t *ctx)
{
    if (ctx->plat == NULL) {
        return;
    }

    PL(ctx)->errname[0] = '\0';
    PL(ctx)->replaced_status = 0;
    PL(ctx)->raw_left = 0;

    if (PL(ctx)->evs) {
        /* another attempt's frames are not this one's */
        tb_evs_free(PL(ctx)->evs);
        tb_evs_init(PL(ctx)->evs, TB_EVS_FRAME_MAX);
    }
}


void
ngx_http_tokenbiryani_platform_body_back(ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_chain_t  *cl;

    ctx->hdr->next = PL(ctx)->body_links;
    ctx->body_len = PL(ctx)->body_total;

    for (cl = PL(ctx)->body_links; cl; cl = cl->next) {
        cl->buf->pos = cl->buf->start;
    }
}


/* the raw bytes [p, last) of the response body: de-chunked, decoded */

static ngx_int_t
ngx_http_tokenbiryani_evs_raw(ngx_http_tokenbiryani_evs_sink_t *s,
    u_char *p, u_char *last, ngx_http_chunked_t *chunked)
{
    ngx_int_t                     rc;
    ngx_http_request_t           *r;
    ngx_http_upstream_t          *u;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    r = s->request;
    u = r->upstream;
    ctx = s->ctx;

    if (!u->headers_in.chunked) {

        if (PL(ctx)->raw_left >= 0) {
            if ((off_t) (last - p) > PL(ctx)->raw_left) {
                ctx->resp.overlong = 1;
                last = p + PL(ctx)->raw_left;
            }

            PL(ctx)->raw_left -= last - p;

            if (PL(ctx)->raw_left == 0) {
                ctx->resp.peek_eof = 1;
            }
        }

        return ngx_http_tokenbiryani_evs_feed(s, p, last - p);
    }

    rc = ngx_http_tokenbiryani_dechunk(r, &p, last, chunked,
                                       ngx_http_tokenbiryani_evs_chunk, s);

    if (rc == NGX_DONE) {
        ctx->resp.peek_eof = 1;

        if (p != last) {
            ctx->resp.overlong = 1;
        }

    } else if (rc == NGX_DECLINED) {
        return NGX_ERROR;

    } else if (rc == NGX_ERROR) {
        return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                   "sent an invalid chunked stream", NGX_ERROR);
    }

    return NGX_OK;
}


/* de-chunked bytes into the decoder: the walk stops where it broke */

static ngx_int_t
ngx_http_tokenbiryani_evs_chunk(void *data, u_char *p, size_t n)
{
    return (ngx_http_tokenbiryani_evs_feed(data, p, n) == NGX_OK)
           ? NGX_OK : NGX_DECLINED;
}


ngx_int_t
ngx_http_tokenbiryani_platform_peek(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_upstream_t               *u;
    ngx_http_tokenbiryani_evs_sink_t   s;

    u = r->upstream;

    if (ngx_http_tokenbiryani_evs_get(r, ctx) == NULL) {
        return NGX_ERROR;
    }

    if (!ctx->resp.raw_set) {
        /* once per attempt: the length the headers gave, or -1 */
        ctx->resp.raw_set = 1;
        PL(ctx)->raw_left = u->headers_in.chunked
                             ? -1 : u->headers_in.content_length_n;

        if (PL(ctx)->raw_left == 0) {
            ctx->resp.peek_eof = 1;
        }
    }

    ngx_memzero(&s, sizeof(ngx_http_tokenbiryani_evs_sink_t));
    s.request = r;
    s.ctx = ctx;

    if (ngx_http_tokenbiryani_evs_raw(&s, ctx->resp.peek_pos, u->buffer.last,
                                      &ctx->resp.peek_chunked)
        != NGX_OK)
    {
        if (!ctx->sse->delta) {
            /* before the commit point: an attempt that failed */
            return NGX_HTTP_UPSTREAM_INVALID_HEADER;
        }

        /*
         * A frame before the break had the first delta: the stream is
         * the client's up to there, and then broken.
         */
        ctx->resp.evs_broken = 1;
    }

    /* what was decoded is in ctx->hold: the next read goes where this began */
    u->buffer.last = ctx->resp.body_start;
    ctx->resp.peek_pos = ctx->resp.body_start;

    if (ctx->resp.peek_eof && !tb_evs_idle(PL(ctx)->evs)) {
        return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                   "ended its event-stream within a frame",
                   NGX_HTTP_UPSTREAM_INVALID_HEADER);
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_platform_commit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    size_t                size;
    ngx_http_upstream_t  *u;

    u = r->upstream;

    /* the held SSE leads the buffer; the next reads land after it */

    size = ctx->resp.held + u->conf->buffer_size;

    if (ctx->hold_size < size
        && ngx_http_tokenbiryani_hold_resize(r, ctx, size) != NGX_OK)
    {
        return NGX_ERROR;
    }

    u->buffer.start = ctx->hold;
    u->buffer.pos = ctx->hold;
    u->buffer.last = ctx->hold + ctx->resp.held;
    u->buffer.end = ctx->hold + ctx->hold_size;

    /* the client's body is SSE of its own length */
    u->headers_in.content_length_n = -1;

    ctx->resp.chunked = ctx->resp.peek_chunked;
    ctx->resp.evs_first = 1;

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_platform_filter(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ssize_t bytes)
{
    u_char                            *start;
    ngx_buf_t                         *buf, *b;
    ngx_chain_t                       *cl, **ll;
    ngx_http_upstream_t               *u;
    ngx_http_tokenbiryani_evs_sink_t   s;

    u = r->upstream;
    buf = &u->buffer;

    for (cl = u->out_bufs, ll = &u->out_bufs; cl; cl = cl->next) {
        ll = &cl->next;
    }

    start = buf->last;
    buf->pos = buf->last;
    buf->last += bytes;

    if (ctx->resp.evs_first) {

        /* the SSE held before the commit, fed to the parser already */

        ctx->resp.evs_first = 0;

        cl = ngx_chain_get_free_buf(r->pool, &u->free_bufs);
        if (cl == NULL) {
            return NGX_ERROR;
        }

        b = cl->buf;
        ngx_memzero(b, sizeof(ngx_buf_t));

        /* no start: its memory is u->buffer's, never another buf's */
        b->pos = start;
        b->last = buf->last;
        b->memory = 1;
        b->flush = 1;
        b->tag = u->output.tag;

        *ll = cl;
        buf->pos = buf->last;

    } else {
        ngx_memzero(&s, sizeof(ngx_http_tokenbiryani_evs_sink_t));
        s.request = r;
        s.ctx = ctx;
        s.filter = 1;
        s.ll = ll;

        if (ngx_http_tokenbiryani_evs_raw(&s, start, buf->last,
                                          &ctx->resp.chunked)
            != NGX_OK)
        {
            ctx->resp.evs_broken = 1;
        }

        buf->pos = buf->last;
    }

    if (ctx->resp.evs_broken) {

        /*
         * What was whole goes out, then nothing more: the stream ends here,
         * not done, and the finalizer adds the one error event.
         */

        u->length = 0;
        u->keepalive = 0;

        return NGX_OK;
    }

    if (ctx->resp.peek_eof) {

        /* the last chunk, or the length the headers gave */

        if (!tb_evs_idle(PL(ctx)->evs)) {
            return ngx_http_tokenbiryani_upstream_invalid(r, ctx,
                       "ended its event-stream within a frame", NGX_ERROR);
        }

        ctx->resp.done = 1;
        u->length = 0;
        u->keepalive = !u->headers_in.connection_close
                       && !ctx->resp.overlong;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_header_join(ngx_http_request_t *r,
    const char *lowcase_name, size_t len, ngx_str_t *out)
{
    u_char                         *p;
    size_t                          size;
    ngx_uint_t                      pass;
    ngx_table_elt_t                *h;
    ngx_http_tokenbiryani_hiter_t   it;

    size = 0;
    p = NULL;
    out->len = 0;
    out->data = NULL;

    /* the first pass measures, the second copies */

    for (pass = 0; pass < 2; pass++) {

        ngx_http_tokenbiryani_headers_begin(&it, &r->headers_in.headers);

        while ((h = ngx_http_tokenbiryani_header_next(&it)) != NULL) {
            if (h->key.len != len
                || ngx_strncmp(h->lowcase_key, lowcase_name, len) != 0)
            {
                continue;
            }

            if (pass == 0) {
                size += h->value.len + 1;
                continue;
            }

            if (p != out->data) {
                *p++ = ',';
            }

            p = ngx_cpymem(p, h->value.data, h->value.len);
        }

        if (pass == 0) {
            if (size == 0) {
                return NGX_OK;
            }

            out->data = ngx_pnalloc(r->pool, size);
            if (out->data == NULL) {
                return NGX_ERROR;
            }

            p = out->data;
        }
    }

    out->len = p - out->data;

    return NGX_OK;
}
