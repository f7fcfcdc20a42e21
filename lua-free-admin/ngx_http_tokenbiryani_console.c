/*
 * The console (tokenbiryani_console): one page, one stylesheet, two
 * scripts, compiled into the module (lua-free-admin/console, embedded by
 * src/tools/embed-assets.sh) and served with a strict Content-Security-
 * Policy: nothing from any other host, no inline script or style.  The
 * page holds no data and needs no key to load; it asks for an admin key,
 * keeps it in the browser and sends it only in x-api-key to /admin.
 *
 *   GET  /console/                 the page (/console redirects here)
 *   GET  /console/console.css      its stylesheet
 *   GET  /console/console-dom.js   its building blocks (DOM, numbers)
 *   GET  /console/console.js       its script
 *   GET  /console/icon.svg         its icon
 *   GET  /console/mode             {"open": B}: whether the gateway has no
 *                                  key (open mode), so that the page asks
 *                                  for one only when there is one to ask
 *   POST /console/ticket           {"ticket": T}: the admin key the ticket
 *                                  was made with (POST /admin/console-
 *                                  ticket), once, within a minute
 */


#include <openssl/rand.h>
#include <openssl/sha.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_request.h"


typedef struct {
    ngx_str_t                      name;
    ngx_str_t                      type;
    const u_char                  *data;
    size_t                         len;
} ngx_http_tokenbiryani_asset_t;


#include "ngx_http_tokenbiryani_console_assets.h"


static ngx_int_t ngx_http_tokenbiryani_console_headers(ngx_http_request_t *r,
    ngx_uint_t cache);
static void ngx_http_tokenbiryani_console_redeem(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_console_mode(ngx_http_request_t *r);
static ngx_int_t ngx_http_tokenbiryani_same_origin(ngx_http_request_t *r);
static void ngx_http_tokenbiryani_ticket_seal(const u_char *ticket,
    u_char *id, u_char *key, size_t len);


/*
 * Everything the page needs comes from the gateway: no CDN, no web font,
 * no inline script; the charts are SVG the script draws.
 */
static ngx_str_t  ngx_http_tb_console_csp = ngx_string(
    "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");


static ngx_int_t
ngx_http_tokenbiryani_add_header(ngx_http_request_t *r, const char *name,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value = *value;

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_console_headers(ngx_http_request_t *r, ngx_uint_t cache)
{
    static ngx_str_t  nosniff = ngx_string("nosniff");
    static ngx_str_t  noref = ngx_string("no-referrer");
    static ngx_str_t  deny = ngx_string("DENY");
    static ngx_str_t  no_store = ngx_string("no-store");
    static ngx_str_t  no_cache = ngx_string("no-cache");

    if (ngx_http_tokenbiryani_add_header(r, "Content-Security-Policy",
                                         &ngx_http_tb_console_csp) != NGX_OK
        || ngx_http_tokenbiryani_add_header(r, "X-Content-Type-Options",
                                            &nosniff) != NGX_OK
        || ngx_http_tokenbiryani_add_header(r, "Referrer-Policy", &noref)
           != NGX_OK
        || ngx_http_tokenbiryani_add_header(r, "X-Frame-Options", &deny)
           != NGX_OK
        || ngx_http_tokenbiryani_add_header(r, "Cache-Control",
                                            cache ? &no_cache : &no_store)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_console_handler(ngx_http_request_t *r)
{
    ngx_int_t                             rc;
    ngx_str_t                             rest;
    ngx_buf_t                            *b;
    ngx_chain_t                           out;
    const ngx_http_tokenbiryani_asset_t  *a;

    static ngx_str_t  location = ngx_string("/console/");

    if (ngx_http_tokenbiryani_create_ctx(r) == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* what follows the location's /console */

    rest.data = r->uri.data + sizeof("/console") - 1;
    rest.len = (r->uri.len >= sizeof("/console") - 1)
               ? r->uri.len - (sizeof("/console") - 1) : 0;

    if (r->uri.len < sizeof("/console") - 1
        || ngx_strncmp(r->uri.data, "/console", sizeof("/console") - 1) != 0
        || (rest.len && rest.data[0] != '/'))
    {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                   "not_found_error", "tokenbiryani_console serves /console");
    }

    if (rest.len == sizeof("/ticket") - 1
        && ngx_strncmp(rest.data, "/ticket", rest.len) == 0)
    {
        if (r->method != NGX_HTTP_POST) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error", "/console/ticket expects POST");
        }

        rc = ngx_http_tokenbiryani_same_origin(r);
        if (rc != NGX_OK) {
            return ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL);
        }

        /* anyone may knock here: {"ticket": "<32 hex>"} and no more */
        if (r->headers_in.content_length_n < 0
            || r->headers_in.content_length_n > 1024)
        {
            return ngx_http_tokenbiryani_send_error(r,
                       NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                       "request_too_large", "/console/ticket takes "
                       "{\"ticket\": T} with a Content-Length, 1 KB at most");
        }

        return ngx_http_tokenbiryani_admin_read_body(r,
                                       ngx_http_tokenbiryani_console_redeem);
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V expects GET", &r->uri);
    }

    if (rest.len == sizeof("/mode") - 1
        && ngx_strncmp(rest.data, "/mode", rest.len) == 0)
    {
        return ngx_http_tokenbiryani_console_mode(r);
    }

    if (rest.len == 0) {
        /* its files are named relative to /console/; relative, as it is:
         * not r->headers_out.location, which nginx makes absolute with a
         * scheme and port a proxy in front may not share */
        if (ngx_http_tokenbiryani_add_header(r, "Location", &location)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return NGX_HTTP_MOVED_PERMANENTLY;
    }

    if (rest.len == 1) {
        ngx_str_set(&rest, "/index.html");
    }

    for (a = ngx_http_tb_assets; a->data; a++) {
        if (rest.len == a->name.len + 1
            && ngx_strncmp(rest.data + 1, a->name.data, a->name.len) == 0)
        {
            break;
        }
    }

    if (a->data == NULL) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                   "not_found_error", "the console has no %V", &r->uri);
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_tokenbiryani_console_headers(r, 1) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = a->len;
    r->headers_out.content_type = a->type;
    r->headers_out.content_type_len = a->type.len;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the module's own bytes: read only, never freed */
    b->pos = (u_char *) a->data;
    b->last = (u_char *) a->data + a->len;
    b->memory = 1;
    b->last_buf = (r == r->main);
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


/* whether the page should ask for a key: only that, nothing of the keys */

static ngx_int_t
ngx_http_tokenbiryani_console_mode(ngx_http_request_t *r)
{
    cJSON                              *root;
    ngx_int_t                           rc;
    ngx_uint_t                          n;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    n = 0;

    if (tmcf->keytab.n == 0
        && ngx_http_tokenbiryani_rkeys(tmcf, &n) == NULL)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    root = cJSON_CreateObject();

    if (root == NULL
        || cJSON_AddBoolToObject(root, "open",
                                 tmcf->keytab.n == 0 && n == 0) == NULL
        || ngx_http_tokenbiryani_console_headers(r, 0) != NGX_OK)
    {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}


/* a web page of another site may not redeem a ticket it was shown */

static ngx_int_t
ngx_http_tokenbiryani_same_origin(ngx_http_request_t *r)
{
    size_t            n;
    u_char           *p, *last;
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */ ; i++) {
        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == sizeof("sec-fetch-site") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "sec-fetch-site",
                               h[i].key.len) == 0
            && !(h[i].value.len == sizeof("same-origin") - 1
                 && ngx_strncasecmp(h[i].value.data, (u_char *) "same-origin",
                                    h[i].value.len) == 0))
        {
            goto refused;
        }

        if (h[i].key.len == sizeof("origin") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "origin", 6) == 0)
        {
            /* scheme://host[:port] as the request's Host says it */
            last = h[i].value.data + h[i].value.len;
            p = ngx_strlchr(h[i].value.data, last, ':');

            if (p == NULL || r->headers_in.host == NULL
                || last - p < 3 || p[1] != '/' || p[2] != '/')
            {
                goto refused;
            }

            p += 3;
            n = last - p;

            if (n != r->headers_in.host->value.len
                || ngx_strncasecmp(p, r->headers_in.host->value.data, n) != 0)
            {
                goto refused;
            }
        }
    }

    return NGX_OK;

refused:

    ngx_http_tokenbiryani_set_error(r, NGX_HTTP_FORBIDDEN, "permission_error",
        "a console ticket is redeemed by the console's own page only");

    return NGX_HTTP_FORBIDDEN;
}


static void
ngx_http_tokenbiryani_console_redeem(ngx_http_request_t *r)
{
    size_t                              len, klen;
    u_char                             *body;
    cJSON                              *j, *t, *root;
    ngx_int_t                           rc;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    u_char                              key[NGX_HTTP_TB_TICKET_KEY_MAX + 1],
                                        ticket[NGX_HTTP_TB_TICKET_LEN],
                                        id[NGX_HTTP_TB_TICKET_LEN];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    rc = ngx_http_tokenbiryani_admin_body(r, &body, &len);
    if (rc != NGX_OK) {
        ngx_http_finalize_request(r,
            ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL));
        return;
    }

    j = cJSON_ParseWithLength((char *) body, len);
    t = cJSON_GetObjectItemCaseSensitive(j, "ticket");
    rc = NGX_DECLINED;

    if (cJSON_IsString(t)
        && ngx_strlen(t->valuestring) == NGX_HTTP_TB_TICKET_LEN)
    {
        ngx_memcpy(ticket, t->valuestring, NGX_HTTP_TB_TICKET_LEN);
        ngx_http_tokenbiryani_ticket_seal(ticket, id, NULL, 0);

        if (ngx_http_tokenbiryani_ticket_take(&tmcf->zone, id,
                NGX_HTTP_TB_TICKET_LEN, key, &klen,
                ngx_http_tokenbiryani_now_ms())
            == NGX_OK)
        {
            /* the zone kept it sealed by the ticket it never saw */
            ngx_http_tokenbiryani_ticket_seal(ticket, id, key, klen);
            rc = NGX_OK;
        }

        ngx_explicit_memzero(ticket, sizeof(ticket));
    }

    cJSON_Delete(j);

    if (rc != NGX_OK) {
        ngx_http_finalize_request(r, ngx_http_tokenbiryani_send_error(r,
            NGX_HTTP_BAD_REQUEST, "invalid_request_error",
            "this sign-in ticket is unknown, used or expired: a ticket is "
            "good once, within a minute (`tokenbiryani console` makes "
            "another), or sign in with an admin key"));
        return;
    }

    key[klen] = '\0';
    root = cJSON_CreateObject();

    if (root == NULL
        || cJSON_AddStringToObject(root, "key", (char *) key) == NULL
        || cJSON_AddBoolToObject(root, "open", klen == 0) == NULL)
    {
        ngx_explicit_memzero(key, sizeof(key));
        cJSON_Delete(root);
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_explicit_memzero(key, sizeof(key));

    if (ngx_http_tokenbiryani_console_headers(r, 0) != NGX_OK) {
        cJSON_Delete(root);
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_http_finalize_request(r, ngx_http_tokenbiryani_send_cjson(r,
                                 NGX_HTTP_OK, root));
}


/* POST /admin/console-ticket, behind the admin key (the admin handler's) */

ngx_int_t
ngx_http_tokenbiryani_admin_console_ticket(ngx_http_request_t *r)
{
    cJSON                              *root;
    ngx_int_t                           rc;
    ngx_str_t                           key;
    ngx_uint_t                          i;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    u_char                              rnd[NGX_HTTP_TB_TICKET_LEN / 2],
                                        id[NGX_HTTP_TB_TICKET_LEN + 1],
                                        slot[NGX_HTTP_TB_TICKET_LEN],
                                        sealed[NGX_HTTP_TB_TICKET_KEY_MAX];

    if (r->method != NGX_HTTP_POST) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "/admin/console-ticket expects "
                   "POST");
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (ngx_http_tokenbiryani_key_from_request(r, &key) != NGX_OK) {
        /* open mode: the ticket signs in with no key */
        ngx_str_null(&key);
    }

    if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < sizeof(rnd); i++) {
        (void) ngx_sprintf(id + 2 * i, "%02xd", rnd[i]);
    }

    id[NGX_HTTP_TB_TICKET_LEN] = '\0';

    if (key.len > NGX_HTTP_TB_TICKET_KEY_MAX) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "this key is too long for a "
                   "console ticket: sign in with it on the console's page");
    }

    /* the zone gets a digest of the ticket and the key sealed by it */
    ngx_memcpy(sealed, key.data, key.len);
    ngx_http_tokenbiryani_ticket_seal(id, slot, sealed, key.len);

    rc = ngx_http_tokenbiryani_ticket_put(&tmcf->zone, slot, sealed, key.len,
                                          ngx_http_tokenbiryani_now_ms());
    ngx_explicit_memzero(sealed, sizeof(sealed));

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    root = cJSON_CreateObject();

    if (root == NULL
        || cJSON_AddStringToObject(root, "ticket", (char *) id) == NULL
        || cJSON_AddNumberToObject(root, "expires_in_seconds",
                                   NGX_HTTP_TB_TICKET_MS / 1000) == NULL)
    {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_CREATED, root);
}


/*
 * What the zone keeps of a ticket: for its id, the first half of
 * SHA-256("tb-ticket-id" ticket) in hex; the key XORed with
 * SHA-256("tb-ticket-key" i ticket), block i.  Without the ticket (128
 * random bits, only ever in the browser and the command's output) the
 * zone's copy gives no key.  key NULL: the id only; sealing twice opens.
 */

static void
ngx_http_tokenbiryani_ticket_seal(const u_char *ticket, u_char *id,
    u_char *key, size_t len)
{
    size_t         i, k;
    u_char         in[sizeof("tb-ticket-key") + 1 + NGX_HTTP_TB_TICKET_LEN],
                   md[SHA256_DIGEST_LENGTH];
    static u_char  hex[] = "0123456789abcdef";

    ngx_memcpy(in, "tb-ticket-id", sizeof("tb-ticket-id") - 1);
    ngx_memcpy(in + sizeof("tb-ticket-id") - 1, ticket,
               NGX_HTTP_TB_TICKET_LEN);
    SHA256(in, sizeof("tb-ticket-id") - 1 + NGX_HTTP_TB_TICKET_LEN, md);

    for (i = 0; i < NGX_HTTP_TB_TICKET_LEN / 2; i++) {
        id[2 * i] = hex[md[i] >> 4];
        id[2 * i + 1] = hex[md[i] & 0xf];
    }

    for (i = 0; key && i < len; i += SHA256_DIGEST_LENGTH) {
        ngx_memcpy(in, "tb-ticket-key", sizeof("tb-ticket-key") - 1);
        in[sizeof("tb-ticket-key") - 1] =
                                     (u_char) (i / SHA256_DIGEST_LENGTH);
        ngx_memcpy(in + sizeof("tb-ticket-key"), ticket,
                   NGX_HTTP_TB_TICKET_LEN);
        SHA256(in, sizeof(in), md);

        for (k = 0; k < SHA256_DIGEST_LENGTH && i + k < len; k++) {
            key[i + k] ^= md[k];
        }
    }

    ngx_explicit_memzero(in, sizeof(in));
    ngx_explicit_memzero(md, sizeof(md));
}
