/*
 * The console (tokenbiryani_console): one page, one stylesheet, one
 * script, compiled into the module (lua-free-admin/console, embedded by
 * src/tools/embed-assets.sh) and served with a strict Content-Security-
 * Policy: nothing from any other host, no inline script or style.  The
 * page holds no data and needs no key to load; it asks for an admin key,
 * keeps it in the browser and sends it only in x-api-key to /admin.
 *
 *   GET  /console/                 the page (/console redirects here)
 *   GET  /console/console.css      its stylesheet
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
    ngx_table_elt_t                      *loc;
    const ngx_http_tokenbiryani_asset_t  *a;

    if (ngx_http_tokenbiryani_create_ctx(r) == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* what follows the location's /console */

    rest.data = r->uri.data + sizeof("/console") - 1;
    rest.len = (r->uri.len >= sizeof("/console") - 1)
               ? r->uri.len - (sizeof("/console") - 1) : 0;

    if (r->uri.len < sizeof("/console") - 1
        || ngx_strncmp(r->uri.data, "/console", sizeof("/console") - 1) != 0)
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

        r->request_body_in_single_buf = 1;

        rc = ngx_http_read_client_request_body(r,
                                       ngx_http_tokenbiryani_console_redeem);
        if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
            return rc;
        }

        return NGX_DONE;
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
        /* its files are named relative to /console/ */
        loc = ngx_list_push(&r->headers_out.headers);
        if (loc == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        /* relative, as it is: not r->headers_out.location, which nginx
         * makes absolute with a scheme and port a proxy in front may not
         * share */
        loc->hash = 1;
        ngx_str_set(&loc->key, "Location");
        ngx_str_set(&loc->value, "/console/");

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
        cJSON_Delete(root);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}


/* a web page of another site may not redeem a ticket it was shown */

static ngx_int_t
ngx_http_tokenbiryani_same_origin(ngx_http_request_t *r)
{
    size_t            n;
    u_char           *p;
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
            p = ngx_strlchr(h[i].value.data,
                            h[i].value.data + h[i].value.len, '/');

            if (p == NULL || r->headers_in.host == NULL) {
                goto refused;
            }

            p += 2;
            n = h[i].value.data + h[i].value.len - p;

            if (p > h[i].value.data + h[i].value.len
                || n != r->headers_in.host->value.len
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
    u_char                              key[NGX_HTTP_TB_TICKET_KEY_MAX + 1];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    rc = ngx_http_tokenbiryani_admin_body(r, &body, &len);
    if (rc != NGX_OK) {
        ngx_http_finalize_request(r,
            ngx_http_tokenbiryani_send_error(r, rc, NULL, NULL));
        return;
    }

    j = cJSON_ParseWithLength((char *) body, len);
    t = cJSON_GetObjectItemCaseSensitive(j, "ticket");

    rc = (cJSON_IsString(t)
          && ngx_http_tokenbiryani_ticket_take(&tmcf->zone,
                 (u_char *) t->valuestring, ngx_strlen(t->valuestring), key,
                 &klen, ngx_http_tokenbiryani_now_ms()) == NGX_OK)
         ? NGX_OK : NGX_DECLINED;

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
    ngx_str_t                           key;
    ngx_uint_t                          i;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    u_char                              rnd[NGX_HTTP_TB_TICKET_LEN / 2],
                                        id[NGX_HTTP_TB_TICKET_LEN + 1];

    if (r->method != NGX_HTTP_POST) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "/admin/console-ticket expects "
                   "POST");
    }

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
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

    if (ngx_http_tokenbiryani_ticket_put(&tmcf->zone, id, key.data, key.len,
                                         ngx_http_tokenbiryani_now_ms())
        != NGX_OK)
    {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                   "invalid_request_error", "this key is too long for a "
                   "console ticket: sign in with it on the console's page");
    }

    root = cJSON_CreateObject();

    if (root == NULL
        || cJSON_AddStringToObject(root, "ticket", (char *) id) == NULL
        || cJSON_AddNumberToObject(root, "expires_in_seconds",
                                   NGX_HTTP_TB_TICKET_MS / 1000) == NULL)
    {
        cJSON_Delete(root);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_CREATED, root);
}
