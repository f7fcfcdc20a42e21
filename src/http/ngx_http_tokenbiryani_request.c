/*
 * tokenbiryani: what every location of the module needs first - the
 * request's context with its id, the caller's virtual key, a header.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_error.h"


static ngx_int_t ngx_http_tokenbiryani_key_from_request(ngx_http_request_t *r,
    ngx_str_t *key);


ngx_http_tokenbiryani_ctx_t *
ngx_http_tokenbiryani_create_ctx(ngx_http_request_t *r)
{
    u_char                       *p;
    ngx_uint_t                    i;
    uint32_t                      rnd;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    static u_char  hex[] = "0123456789abcdef";

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    if (ctx) {
        return ctx;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->request = r;
    ctx->owner = -1;
    ctx->owner_index = -1;
    ctx->ttft_ms = -1;
    ctx->rpm_slot = -1;
    ctx->woken_ms = -1;
    tb_usage_init(&ctx->usage);

    /* 96 random bits: unique enough to find one request in the logs */

    p = ngx_cpymem(ctx->request_id, "tbr_", 4);

    for (i = 0; i < 3; i++) {
        rnd = (uint32_t) ngx_random();
        rnd ^= (uint32_t) ngx_random() << 16;

        p[0] = hex[(rnd >> 28) & 0xf];
        p[1] = hex[(rnd >> 24) & 0xf];
        p[2] = hex[(rnd >> 20) & 0xf];
        p[3] = hex[(rnd >> 16) & 0xf];
        p[4] = hex[(rnd >> 12) & 0xf];
        p[5] = hex[(rnd >> 8) & 0xf];
        p[6] = hex[(rnd >> 4) & 0xf];
        p[7] = hex[rnd & 0xf];
        p += 8;
    }

    ngx_http_set_ctx(r, ctx, ngx_http_tokenbiryani_module);

    return ctx;
}


ngx_table_elt_t *
ngx_http_tokenbiryani_find_header(ngx_http_request_t *r,
    const char *lowcase_name, size_t len)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncmp(h[i].lowcase_key, lowcase_name, len) == 0)
        {
            return &h[i];
        }
    }
}


static ngx_int_t
ngx_http_tokenbiryani_key_from_request(ngx_http_request_t *r, ngx_str_t *key)
{
    u_char           *p, *last;
    ngx_table_elt_t  *h;

    h = ngx_http_tokenbiryani_find_header(r, "x-api-key", 9);

    if (h && h->value.len) {
        *key = h->value;
        return NGX_OK;
    }

    h = r->headers_in.authorization;

    if (h == NULL) {
        return NGX_DECLINED;
    }

    p = h->value.data;
    last = p + h->value.len;

    if (h->value.len < 7 || ngx_strncasecmp(p, (u_char *) "Bearer ", 7) != 0)
    {
        return NGX_DECLINED;
    }

    for (p += 7; p < last && *p == ' '; p++) { /* void */ }

    while (last > p && last[-1] == ' ') {
        last--;
    }

    if (p == last) {
        return NGX_DECLINED;
    }

    key->data = p;
    key->len = last - p;

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_authenticate(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t need_admin)
{
    ngx_str_t                           key;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (tmcf->keytab.n == 0) {
        /* open mode, allowed on loopback only (checked at startup) */
        ctx->admin = 1;
        return NGX_OK;
    }

    if (ngx_http_tokenbiryani_key_from_request(r, &key) != NGX_OK) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_UNAUTHORIZED,
            "authentication_error",
            "missing credentials: send your tokenbiryani key in the "
            "x-api-key header or as Authorization: Bearer");
        return NGX_HTTP_UNAUTHORIZED;
    }

    kc = tb_keytab_lookup(&tmcf->keytab, key.data, key.len);

    if (kc == NULL) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_UNAUTHORIZED,
            "authentication_error", "invalid key");
        return NGX_HTTP_UNAUTHORIZED;
    }

    ctx->key = kc;
    ctx->admin = kc->admin;

    if (need_admin && !kc->admin) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN,
            "permission_error", "key \"%s\" is not an admin key", kc->name);
        return NGX_HTTP_FORBIDDEN;
    }

    return NGX_OK;
}
