/*
 * tokenbiryani: what every location of the module needs first - the
 * request's context with its id, the caller's virtual key, a header.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_events.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_keys.h"


static ngx_int_t ngx_http_tokenbiryani_open_check(ngx_http_request_t *r,
    ngx_uint_t need_admin);
static ngx_uint_t ngx_http_tokenbiryani_loopback_host(u_char *p, size_t len);


#define ngx_http_tokenbiryani_ctx_small()                                     \
    (void) sizeof(char[sizeof(ngx_http_tokenbiryani_ctx_t) < 2048 ? 1 : -1])


ngx_http_tokenbiryani_ctx_t *
ngx_http_tokenbiryani_create_ctx(ngx_http_request_t *r)
{
    ngx_http_tokenbiryani_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
    if (ctx) {
        return ctx;
    }

    /*
     * Zeroed on every request: glibc's memset turns to "rep stosb" from
     * 2 KiB, a byte at a time as an instruction counter sees it, so the
     * context stays under that (the build fails when it grows past it).
     */

    ngx_http_tokenbiryani_ctx_small();

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->request = r;
    ctx->route.owner = -1;
    ctx->route.owner_index = -1;
    ctx->ttft_ms = -1;
    ctx->rpm_slot = -1;
    ctx->pin = -1;
    ctx->wait.woken_ms = -1;
    tb_usage_init(&ctx->usage);

    /* no caps until its key's are known */
    ctx->caps.key_cap = -1;
    ctx->caps.session_cap = -1;
    ctx->caps.session_turns = -1;

    ngx_http_tokenbiryani_request_id(ctx->request_id, "tbr_");

    ngx_http_set_ctx(r, ctx, ngx_http_tokenbiryani_module);

    return ctx;
}


void
ngx_http_tokenbiryani_request_id(u_char *p, const char *prefix)
{
    uint32_t     rnd;
    ngx_uint_t   i;

    static u_char  hex[] = "0123456789abcdef";

    /* 96 random bits: unique enough to find one request in the logs */

    p = ngx_cpymem(p, prefix, 4);

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
}


ngx_table_elt_t *
ngx_http_tokenbiryani_find_header(ngx_http_request_t *r,
    const char *lowcase_name, size_t len)
{
    ngx_table_elt_t                *h;
    ngx_http_tokenbiryani_hiter_t   it;

    ngx_http_tokenbiryani_headers_begin(&it, &r->headers_in.headers);

    while ((h = ngx_http_tokenbiryani_header_next(&it)) != NULL) {
        if (h->key.len == len
            && ngx_strncmp(h->lowcase_key, lowcase_name, len) == 0)
        {
            return h;
        }
    }

    return NULL;
}


ngx_table_elt_t *
ngx_http_tokenbiryani_own_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, const char *lowcase_name, size_t len)
{
    ngx_uint_t                      own;
    ngx_table_elt_t                *h;
    ngx_http_tokenbiryani_hiter_t   it;

    if (ctx->no_own_headers) {
        return NULL;
    }

    own = 0;

    ngx_http_tokenbiryani_headers_begin(&it, &r->headers_in.headers);

    while ((h = ngx_http_tokenbiryani_header_next(&it)) != NULL) {
        if (h->key.len <= sizeof("x-tokenbiryani-") - 1
            || ngx_memcmp(h->lowcase_key, "x-tokenbiryani-",
                          sizeof("x-tokenbiryani-") - 1) != 0)
        {
            continue;
        }

        own = 1;

        if (h->key.len == len
            && ngx_memcmp(h->lowcase_key, lowcase_name, len) == 0)
        {
            return h;
        }
    }

    if (!own) {
        ctx->no_own_headers = 1;
    }

    return NULL;
}


ngx_int_t
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
    ngx_uint_t                          n;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    u_char                             *name, digest[32];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (tmcf->keytab.n == 0) {
        if (ngx_http_tokenbiryani_rkeys(tmcf, &n) == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (n == 0) {
            /* open mode, allowed on loopback only (checked at startup) */
            ctx->admin = 1;
            return ngx_http_tokenbiryani_open_check(r, need_admin);
        }
    }

    if (ngx_http_tokenbiryani_key_from_request(r, &key) != NGX_OK) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_UNAUTHORIZED,
            "authentication_error",
            "missing credentials: send your tokenbiryani key in the "
            "x-api-key header or as Authorization: Bearer");
        return NGX_HTTP_UNAUTHORIZED;
    }

    kc = tmcf->keytab.n ? tb_keytab_lookup(&tmcf->keytab, key.data, key.len)
                        : NULL;

    if (kc) {
        ctx->key = kc;
        ctx->pool = tmcf->pools[kc - tmcf->tbcf->keys];
        ctx->key_hash = kc->name_hash;
        ctx->admin = kc->admin;

    } else {
        /* none of the file's: a minted key, or none */

        switch (ngx_http_tokenbiryani_rkey_auth(r, ctx, &key)) {

        case NGX_OK:
            kc = ctx->key;
            break;

        case NGX_DECLINED:

            /* a key revoked is said as such, by its name: whoever still
             * uses it is seen (and stops: it cannot come back) */

            name = ngx_pnalloc(r->pool, TB_ID_MAX + 1);
            tb_sha256(key.data, key.len, digest);

            if (name
                && ngx_http_tokenbiryani_revoked_seen(&tmcf->zone, digest,
                       (char *) name, ngx_http_tokenbiryani_now_ms()))
            {
                ctx->err.refused = NGX_HTTP_TB_REFUSED_REVOKED;
                ctx->err.refused_key = (const char *) name;
                ngx_http_tokenbiryani_set_error(r, NGX_HTTP_UNAUTHORIZED,
                    "authentication_error", "key \"%s\" was revoked", name);
                return NGX_HTTP_UNAUTHORIZED;
            }

            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_UNAUTHORIZED,
                "authentication_error", "invalid key");
            return NGX_HTTP_UNAUTHORIZED;

        case NGX_ABORT:
            return NGX_HTTP_UNAUTHORIZED;

        default:
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    if (need_admin && !kc->admin) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN,
            "permission_error", "key \"%s\" is not an admin key", kc->name);
        return NGX_HTTP_FORBIDDEN;
    }

    return NGX_OK;
}


/*
 * Open mode serves programs on the operator's machine, not web pages in
 * the operator's browser.  A page elsewhere can reach 127.0.0.1 with a
 * simple request (a text/plain POST needs no preflight), or read answers
 * through a name it rebinds to 127.0.0.1; so the Host must be a loopback
 * name or address, a request a browser marks cross-site (Origin not
 * loopback, "null", or Sec-Fetch-Site: cross-site) is refused, and an
 * admin write must say application/json, which no page can send
 * cross-origin without a preflight the gateway never grants.
 */

/* "host[:port]" without the scheme's default port, into out: its length */
static size_t
ngx_http_tokenbiryani_authority(u_char *p, size_t len, ngx_uint_t tls,
    u_char *out, size_t size)
{
    const char  *port;
    size_t       plen;

    port = tls ? ":443" : ":80";
    plen = tls ? 4 : 3;

    if (len > plen && ngx_strncmp(p + len - plen, port, plen) == 0) {
        len -= plen;
    }

    if (len >= size) {
        return 0;
    }

    ngx_strlow(out, p, len);

    return len;
}


static ngx_uint_t
ngx_http_tokenbiryani_same_origin(ngx_http_request_t *r, ngx_str_t *origin)
{
    u_char      *p;
    size_t       n, m, skip;
    ngx_uint_t   tls;
    u_char       a[256], b[256];

#if (NGX_HTTP_SSL)
    tls = (r->connection->ssl != NULL);
#else
    tls = 0;
#endif

    skip = tls ? sizeof("https://") - 1 : sizeof("http://") - 1;
    p = origin->data;

    if (r->headers_in.host == NULL || origin->len <= skip
        || ngx_strncasecmp(p, (u_char *) (tls ? "https://" : "http://"),
                           skip)
           != 0)
    {
        return 0;
    }

    n = ngx_http_tokenbiryani_authority(p + skip, origin->len - skip, tls,
                                        a, sizeof(a));
    m = ngx_http_tokenbiryani_authority(r->headers_in.host->value.data,
                                        r->headers_in.host->value.len, tls,
                                        b, sizeof(b));

    return n && n == m && ngx_memcmp(a, b, n) == 0;
}


static ngx_int_t
ngx_http_tokenbiryani_open_check(ngx_http_request_t *r, ngx_uint_t need_admin)
{
    ngx_table_elt_t  *h;

    if (r->headers_in.host
        && !ngx_http_tokenbiryani_loopback_host(r->headers_in.server.data,
                                                r->headers_in.server.len))
    {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN,
            "permission_error",
            "this gateway has no keys and answers only requests addressed "
            "to a loopback name or address, not to Host \"%V\"",
            &r->headers_in.server);
        return NGX_HTTP_FORBIDDEN;
    }

    h = ngx_http_tokenbiryani_find_header(r, "sec-fetch-site",
                                          sizeof("sec-fetch-site") - 1);

    if (h && h->value.len == sizeof("cross-site") - 1
        && ngx_strncasecmp(h->value.data, (u_char *) "cross-site",
                           h->value.len) == 0)
    {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN,
            "permission_error",
            "this gateway has no keys and refuses cross-site requests "
            "from web pages (Sec-Fetch-Site: cross-site)");
        return NGX_HTTP_FORBIDDEN;
    }

    /*
     * A page's Origin is its scheme, host and port: only the gateway's own
     * (this request's scheme and Host) may drive it - a page of another
     * local server, on another port, may not.
     */

    h = ngx_http_tokenbiryani_find_header(r, "origin", sizeof("origin") - 1);

    if (h && !ngx_http_tokenbiryani_same_origin(r, &h->value)) {
        ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN,
            "permission_error",
            "this gateway has no keys and refuses requests from web "
            "pages of another origin (Origin: %V)", &h->value);
        return NGX_HTTP_FORBIDDEN;
    }

    if (need_admin && !(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        h = r->headers_in.content_type;

        if (h == NULL
            || h->value.len < sizeof("application/json") - 1
            || ngx_strncasecmp(h->value.data, (u_char *) "application/json",
                               sizeof("application/json") - 1) != 0
            || (h->value.len > sizeof("application/json") - 1
                && h->value.data[sizeof("application/json") - 1] != ';'
                && h->value.data[sizeof("application/json") - 1] != ' '))
        {
            ngx_http_tokenbiryani_set_error(r, NGX_HTTP_UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                "this gateway has no keys: an admin %V must be sent with "
                "Content-Type: application/json", &r->method_name);
            return NGX_HTTP_UNSUPPORTED_MEDIA_TYPE;
        }
    }

    return NGX_OK;
}


/* localhost and the names under it (RFC 6761), 127.0.0.0/8, [::1] */

static ngx_uint_t
ngx_http_tokenbiryani_loopback_host(u_char *p, size_t len)
{
    in_addr_t  a;
#if (NGX_HAVE_INET6)
    u_char     a6[16];
#endif

    static const size_t  lh = sizeof("localhost") - 1;

    if (len && p[len - 1] == '.') {
        /* the root's dot */
        len--;
    }

    if (len == 0) {
        return 0;
    }

    if (len >= lh
        && ngx_strncasecmp(p + len - lh, (u_char *) "localhost", lh) == 0
        && (len == lh || p[len - lh - 1] == '.'))
    {
        return 1;
    }

    if (p[0] == '[') {
#if (NGX_HAVE_INET6)
        if (len > 2 && p[len - 1] == ']'
            && ngx_inet6_addr(p + 1, len - 2, a6) == NGX_OK)
        {
            return IN6_IS_ADDR_LOOPBACK((struct in6_addr *) a6);
        }
#endif
        return 0;
    }

    a = ngx_inet_addr(p, len);

    return a != INADDR_NONE && (ntohl(a) >> 24) == 127;
}
