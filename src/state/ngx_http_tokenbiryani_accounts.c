/*
 * tokenbiryani: the pool's accounts in a worker (see
 * ngx_http_tokenbiryani_accounts.h).
 */


#include "ngx_http_tokenbiryani.h"
#include "tb_racct.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "ngx_http_tokenbiryani_keepalive.h"
#include "ngx_http_tokenbiryani_platform.h"
#include "tb_hash.h"

#include <cjson/cJSON.h>


/* memory a changed or removed account pointed to, kept for old requests */
typedef struct ngx_http_tokenbiryani_grave_s  ngx_http_tokenbiryani_grave_t;

struct ngx_http_tokenbiryani_grave_s {
    ngx_http_tokenbiryani_grave_t  *next;
    ngx_pool_t                     *pool;
    uint64_t                        epoch;
};


typedef struct {
    uint64_t                        gen;      /* of the zone's, copied */
    uint64_t                        epoch;    /* of this worker's table */
    ngx_queue_t                     held;     /* requests, oldest first */
    ngx_http_tokenbiryani_grave_t  *graves;
    ngx_uint_t                      init;
    ngx_msec_t                      retry;    /* an account found no place:
                                                 tried again from then */
} ngx_http_tokenbiryani_accounts_t;


static ngx_http_tokenbiryani_accounts_t  ngx_http_tokenbiryani_accts;


static void ngx_http_tokenbiryani_accounts_release(void *data);
static ngx_uint_t ngx_http_tokenbiryani_accounts_quiet(uint64_t epoch);
static void ngx_http_tokenbiryani_accounts_bury(ngx_pool_t *pool);
static void ngx_http_tokenbiryani_accounts_reap(void);
static ngx_int_t ngx_http_tokenbiryani_racct_apply(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_racct_view_t *v);
static void ngx_http_tokenbiryani_config_free(void *data);


ngx_int_t
ngx_http_tokenbiryani_account_fill(ngx_pool_t *pool,
    ngx_http_tokenbiryani_account_t *a, tb_account_conf_t *ac,
    u_char fingerprint[8], char *err, size_t errlen)
{
    u_char         *p;
    size_t          i, len;
    ngx_str_t       fp;
    ngx_uint_t      default_port, named;
    unsigned char   digest[TB_DIGEST_LEN];

    a->conf = ac;
    a->id.data = (u_char *) ac->id;
    a->id.len = ngx_strlen(ac->id);
    a->id_hash = tb_hash64(0, a->id.data, a->id.len);
    a->tls = ac->tls;

    /*
     * Anthropic API keys, and Bedrock (ngx_http_tokenbiryani_platform.c);
     * not an account the loader found no credentials for
     */
    a->supported = (ac->type == TB_ACCOUNT_ANTHROPIC_API
                    || ac->type == TB_ACCOUNT_BEDROCK
                    || ac->type == TB_ACCOUNT_VERTEX
                    || ac->type == TB_ACCOUNT_OAUTH)
                   && ac->unusable == NULL;

    default_port = ac->tls ? 443 : 80;
    len = ngx_strlen(ac->host);

    /* display form, and what the fingerprint covers */

    a->base_url.len = sizeof("https://[]:65535") - 1 + len
                      + ngx_strlen(ac->path_prefix);
    a->base_url.data = ngx_pnalloc(pool, a->base_url.len);
    if (a->base_url.data == NULL) {
        return NGX_ABORT;
    }

    p = ngx_sprintf(a->base_url.data, "%s://", ac->tls ? "https" : "http");

    if (ngx_strchr(ac->host, ':')) {
        p = ngx_sprintf(p, "[%s]", ac->host);

    } else {
        p = ngx_sprintf(p, "%s", ac->host);
    }

    if ((ngx_uint_t) ac->port != default_port) {
        p = ngx_sprintf(p, ":%d", ac->port);
    }

    a->host_header.data = a->base_url.data + (ac->tls ? 8 : 7);
    a->host_header.len = p - a->host_header.data;

    p = ngx_sprintf(p, "%s", ac->path_prefix);
    a->base_url.len = p - a->base_url.data;

    a->ssl_name.data = (u_char *) ac->host;
    a->ssl_name.len = len;

    a->path_prefix.data = (u_char *) ac->path_prefix;
    a->path_prefix.len = ngx_strlen(ac->path_prefix);

    named = (ngx_inet_addr((u_char *) ac->host, len) == INADDR_NONE
             && ngx_strchr(ac->host, ':') == NULL);
    a->by_name = a->supported && named;

    /* the credential and extra headers, written once, sent per attempt */

    len = 0;

    if (ac->api_key) {
        /* a Bedrock API key is a bearer token; Vertex's are per hour, a
         * subscription's per worker (in bearer, not here) */
        len += sizeof("Authorization: Bearer " CRLF) - 1
               + ngx_strlen(ac->api_key);
    }

    for (i = 0; i < ac->headers.n; i++) {
        len += ngx_strlen(ac->headers.items[i].key) + sizeof(": " CRLF) - 1
               + ngx_strlen(ac->headers.items[i].value);

        if (ngx_strchr(ac->headers.items[i].value, CR)
            || ngx_strchr(ac->headers.items[i].value, LF))
        {
            ngx_snprintf((u_char *) err, errlen, "header \"%s\" has a line "
                         "break in its value%Z", ac->headers.items[i].key);
            return NGX_ERROR;
        }
    }

    if (ac->api_key
        && (ngx_strchr(ac->api_key, CR) || ngx_strchr(ac->api_key, LF)))
    {
        ngx_snprintf((u_char *) err, errlen, "api_key has a line break%Z");
        return NGX_ERROR;
    }

    a->auth_header.data = ngx_pnalloc(pool, len + 1);
    if (a->auth_header.data == NULL) {
        return NGX_ABORT;
    }

    p = a->auth_header.data;

    if (ac->api_key && ac->type == TB_ACCOUNT_ANTHROPIC_API) {
        p = ngx_sprintf(p, "x-api-key: %s" CRLF, ac->api_key);

    } else if (ac->api_key && ac->type == TB_ACCOUNT_BEDROCK) {
        p = ngx_sprintf(p, "Authorization: Bearer %s" CRLF, ac->api_key);
    }

    for (i = 0; i < ac->headers.n; i++) {
        p = ngx_sprintf(p, "%s: %s" CRLF, ac->headers.items[i].key,
                        ac->headers.items[i].value);
    }

    a->auth_header.len = p - a->auth_header.data;

    if (ngx_http_tokenbiryani_platform_fill(pool, a, err, errlen) != NGX_OK) {
        return NGX_ERROR;
    }

    /* a new credential or host makes a new account in the shared zone */

    fp.len = a->auth_header.len + a->base_url.len + 1 + a->signer.len;
    fp.data = ngx_pnalloc(pool, fp.len);
    if (fp.data == NULL) {
        return NGX_ABORT;
    }

    p = ngx_cpymem(fp.data, a->base_url.data, a->base_url.len);
    *p++ = '\n';

    p = ngx_cpymem(p, a->auth_header.data, a->auth_header.len);

    if (a->signer.len) {
        ngx_memcpy(p, a->signer.data, a->signer.len);
    }

    tb_sha256(fp.data, fp.len, digest);
    ngx_explicit_memzero(fp.data, fp.len);

    ngx_memcpy(fingerprint, digest, 8);

    if (a->supported && a->tls && !named) {
        ngx_snprintf((u_char *) err, errlen, "an https base_url must name a "
                     "host, not an IP address: the certificate is verified "
                     "against the name%Z");
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_account_keepalive(ngx_pool_t *pool,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a)
{
    ngx_uint_t                          j;
    ngx_http_tokenbiryani_keepalive_t  *items;

    ngx_queue_init(&a->cache);
    ngx_queue_init(&a->free);

    if (tmcf->keepalive == 0) {
        return NGX_OK;
    }

    items = ngx_pcalloc(pool, tmcf->keepalive
                              * sizeof(ngx_http_tokenbiryani_keepalive_t));
    if (items == NULL) {
        return NGX_ERROR;
    }

    for (j = 0; j < tmcf->keepalive; j++) {
        items[j].account = a;
        ngx_queue_insert_head(&a->free, &items[j].queue);
    }

    return NGX_OK;
}


/*
 * The first n accounts searched for an id; a retired place is skipped.
 * The YAML accounts come first and are never retired (only runtime ones
 * are), so n = nyaml searches them alone.
 */
static ngx_http_tokenbiryani_account_t *
ngx_http_tokenbiryani_account_search(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_uint_t n, const u_char *id, size_t len)
{
    ngx_uint_t                        i;
    ngx_http_tokenbiryani_account_t  *a;

    a = tmcf->accounts.elts;

    for (i = 0; i < n; i++) {
        if (!a[i].retired && a[i].id.len == len
            && ngx_memcmp(a[i].id.data, id, len) == 0)
        {
            return &a[i];
        }
    }

    return NULL;
}


ngx_http_tokenbiryani_account_t *
ngx_http_tokenbiryani_yaml_account(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *id, size_t len)
{
    return ngx_http_tokenbiryani_account_search(tmcf, tmcf->nyaml, id, len);
}


ngx_uint_t
ngx_http_tokenbiryani_resolve_host(const char *host, in_port_t port,
    ngx_http_tokenbiryani_raddr_t *out, ngx_uint_t max, char *err,
    size_t errlen)
{
    int               rc;
    ngx_uint_t        n;
    struct addrinfo   hints, *res, *ai;

    ngx_memzero(&hints, sizeof(struct addrinfo));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
#ifdef AI_ADDRCONFIG
    hints.ai_flags = AI_ADDRCONFIG;
#endif

    rc = getaddrinfo(host, NULL, &hints, &res);

    if (rc != 0) {
        ngx_snprintf((u_char *) err, errlen, "host \"%s\" does not "
                     "resolve: %s%Z", host, gai_strerror(rc));
        return 0;
    }

    n = 0;

    for (ai = res; ai && n < max; ai = ai->ai_next) {
        if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            || ai->ai_addrlen > sizeof(ngx_sockaddr_t))
        {
            continue;
        }

        ngx_memcpy(&out[n].sockaddr, ai->ai_addr, ai->ai_addrlen);
        out[n].socklen = ai->ai_addrlen;
        ngx_inet_set_port(&out[n].sockaddr.sockaddr, port);
        n++;
    }

    freeaddrinfo(res);

    if (n == 0) {
        ngx_snprintf((u_char *) err, errlen, "host \"%s\" has no IPv4 or "
                     "IPv6 address%Z", host);
    }

    return n;
}


#if (NGX_THREADS)

static void
ngx_http_tokenbiryani_lookup_thread(void *data, ngx_log_t *log)
{
    ngx_http_tokenbiryani_lookup_t *lk = data;

    lk->naddrs = ngx_http_tokenbiryani_resolve_host(lk->host, lk->port,
                                                    lk->addrs, lk->naddrs,
                                                    lk->err, sizeof(lk->err));
}


static void
ngx_http_tokenbiryani_lookup_done(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_lookup_t *lk = ev->data;

    lk->done(lk);
}

#endif


ngx_int_t
ngx_http_tokenbiryani_lookup_post(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_lookup_t *lk)
{
#if (NGX_THREADS)
    if (tmcf->thread_pool == NULL) {
        return NGX_ERROR;
    }

    lk->err[0] = '\0';

    ngx_memzero(&lk->task, sizeof(ngx_thread_task_t));
    lk->task.ctx = lk;
    lk->task.handler = ngx_http_tokenbiryani_lookup_thread;
    lk->task.event.handler = ngx_http_tokenbiryani_lookup_done;
    lk->task.event.data = lk;
    lk->task.event.log = ngx_cycle->log;

    return ngx_thread_task_post(tmcf->thread_pool, &lk->task);
#else
    return NGX_ERROR;
#endif
}


ngx_uint_t
ngx_http_tokenbiryani_literal_addr(const char *host, in_port_t port,
    ngx_http_tokenbiryani_raddr_t *out)
{
    size_t     len;
    ngx_addr_t  addr;
    u_char      buf[NGX_SOCKADDR_STRLEN];

    len = ngx_strlen(host);

    if (len >= sizeof(buf)) {
        return 0;
    }

    ngx_memcpy(buf, host, len);

    /* ngx_parse_addr() allocates: a pool of its own, gone after */

    {
    ngx_pool_t  *pool;

    pool = ngx_create_pool(512, ngx_cycle->log);
    if (pool == NULL) {
        return 0;
    }

    if (ngx_parse_addr(pool, &addr, buf, len) != NGX_OK
        || addr.socklen > sizeof(ngx_sockaddr_t))
    {
        ngx_destroy_pool(pool);
        return 0;
    }

    ngx_memcpy(&out[0].sockaddr, addr.sockaddr, addr.socklen);
    out[0].socklen = addr.socklen;
    ngx_inet_set_port(&out[0].sockaddr.sockaddr, port);

    ngx_destroy_pool(pool);
    }

    return 1;
}


ngx_uint_t
ngx_http_tokenbiryani_racct_private(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_raddr_t *addrs, ngx_uint_t n)
{
    ngx_uint_t  i;

    if (tmcf->tbcf->server_allow_private_hosts) {
        return 0;
    }

    for (i = 0; i < n; i++) {
        if (tb_racct_private_addr(&addrs[i].sockaddr.sockaddr)) {
            return 1;
        }
    }

    return 0;
}


tb_config_t *
ngx_http_tokenbiryani_racct_open(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_str_t *id, const ngx_str_t *spec, const ngx_str_t *sealed,
    char *err, size_t errlen)
{
    char          *text, key[512];
    size_t         n, plen;
    cJSON         *root, *item;
    const char    *payload;
    tb_config_t   *cf;
    tb_seal_rc_e   rc;

    /*
     * The spec in its envelope (checked where it was read back), held to
     * the admin API's rules whatever it came through: a record written
     * before those rules, or before records were authenticated, cannot
     * carry what the API refuses.
     */

    payload = tb_rec_payload((char *) spec->data, spec->len, &plen, NULL);

    if (tb_racct_check(payload, plen, (char *) id->data, id->len,
                       tmcf->tbcf->server_allow_private_hosts, err, errlen)
        != 0)
    {
        return NULL;
    }

    rc = tb_unseal(&tmcf->seal, (char *) sealed->data, sealed->len,
                   (char *) id->data, id->len, (unsigned char *) key,
                   sizeof(key) - 1, &n);

    if (rc != TB_SEAL_OK) {
        if (rc == TB_SEAL_OTHER_KEY) {
            ngx_snprintf((u_char *) err, errlen, "its credential was sealed "
                         "under the secret key %*s, and the secret key is "
                         "now %s: start with the key it was sealed under, or "
                         "remove the account and add it again with every "
                         "field it had (nothing of a record written under "
                         "another key is kept)%Z",
                         (size_t) ngx_min(TB_SEAL_KID_LEN,
                                          sealed->len
                                          - (sizeof(TB_SEAL_PREFIX) - 1)),
                         sealed->data + sizeof(TB_SEAL_PREFIX) - 1,
                         tmcf->seal.kid);

        } else {
            ngx_snprintf((u_char *) err, errlen, "its credential cannot be "
                         "opened: %s%Z", tb_seal_strerror(rc));
        }

        return NULL;
    }

    key[n] = '\0';

    root = cJSON_ParseWithLength(payload, plen);

    if (root == NULL || !cJSON_IsObject(root)
        || (item = cJSON_AddStringToObject(root, "api_key", key)) == NULL)
    {
        ngx_explicit_memzero(key, sizeof(key));
        cJSON_Delete(root);
        ngx_snprintf((u_char *) err, errlen, "its spec is not a JSON "
                     "object%Z");
        return NULL;
    }

    ngx_explicit_memzero(key, sizeof(key));

    text = cJSON_PrintUnformatted(root);

    ngx_explicit_memzero(item->valuestring, n);
    cJSON_Delete(root);

    if (text == NULL) {
        ngx_snprintf((u_char *) err, errlen, "no memory%Z");
        return NULL;
    }

    cf = tb_config_account_spec(text, ngx_strlen(text), err, errlen);

    ngx_explicit_memzero(text, ngx_strlen(text));
    cJSON_free(text);

    return cf;
}


ngx_int_t
ngx_http_tokenbiryani_accounts_hold(ngx_http_request_t *r,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_pool_cleanup_t                *cln;
    ngx_http_tokenbiryani_accounts_t  *w;

    w = &ngx_http_tokenbiryani_accts;

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        /* no store: the file's accounts are all there ever are */
        ctx->naccounts = tmcf->accounts.nelts;
        return NGX_OK;
    }

    ngx_http_tokenbiryani_accounts_sync(tmcf);

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_tokenbiryani_accounts_release;
    cln->data = ctx;

    ctx->naccounts = tmcf->accounts.nelts;
    ctx->held_epoch = w->epoch;
    ngx_queue_insert_tail(&w->held, &ctx->held);

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_accounts_release(void *data)
{
    ngx_http_tokenbiryani_ctx_t *ctx = data;

    ngx_queue_remove(&ctx->held);

    if (ngx_http_tokenbiryani_accts.graves) {
        ngx_http_tokenbiryani_accounts_reap();
    }
}


uint64_t
ngx_http_tokenbiryani_accounts_epoch(void)
{
    return ngx_http_tokenbiryani_accts.epoch;
}


/* whether every request that began by epoch has ended */
static ngx_uint_t
ngx_http_tokenbiryani_accounts_quiet(uint64_t epoch)
{
    ngx_queue_t                  *q;
    ngx_http_tokenbiryani_ctx_t  *ctx;

    if (ngx_queue_empty(&ngx_http_tokenbiryani_accts.held)) {
        return 1;
    }

    q = ngx_queue_head(&ngx_http_tokenbiryani_accts.held);
    ctx = ngx_queue_data(q, ngx_http_tokenbiryani_ctx_t, held);

    return ctx->held_epoch > epoch;
}


static void
ngx_http_tokenbiryani_accounts_bury(ngx_pool_t *pool)
{
    ngx_http_tokenbiryani_grave_t  *g;

    if (pool == NULL) {
        return;
    }

    g = ngx_alloc(sizeof(ngx_http_tokenbiryani_grave_t), ngx_cycle->log);
    if (g == NULL) {
        /* kept for good rather than freed under a request */
        return;
    }

    g->pool = pool;
    g->epoch = ngx_http_tokenbiryani_accts.epoch;
    g->next = ngx_http_tokenbiryani_accts.graves;
    ngx_http_tokenbiryani_accts.graves = g;
}


static void
ngx_http_tokenbiryani_accounts_reap(void)
{
    ngx_http_tokenbiryani_grave_t  *g, **gp;

    for (gp = &ngx_http_tokenbiryani_accts.graves; *gp; /* void */) {
        g = *gp;

        if (!ngx_http_tokenbiryani_accounts_quiet(g->epoch)) {
            gp = &g->next;
            continue;
        }

        *gp = g->next;
        ngx_destroy_pool(g->pool);
        ngx_free(g);
    }
}


ngx_http_tokenbiryani_account_t *
ngx_http_tokenbiryani_account_find(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *id, size_t len)
{
    return ngx_http_tokenbiryani_account_search(tmcf, tmcf->accounts.nelts,
                                                id, len);
}


void
ngx_http_tokenbiryani_accounts_sync(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    uint64_t                             gen;
    ngx_uint_t                           i, j, found, changed;
    ngx_pool_t                          *pool;
    ngx_array_t                          views;
    ngx_http_tokenbiryani_account_t     *a;
    ngx_http_tokenbiryani_accounts_t    *w;
    ngx_http_tokenbiryani_racct_view_t  *v;

    w = &ngx_http_tokenbiryani_accts;

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        return;
    }

    if (w->gen == ngx_http_tokenbiryani_raccts_gen(&tmcf->zone)
        && (w->retry == 0 || ngx_current_msec < w->retry))
    {
        return;
    }

    if (!w->init) {
        ngx_queue_init(&w->held);
        w->epoch = 1;
        w->init = 1;
    }

    w->retry = 0;

    pool = ngx_create_pool(4096, ngx_cycle->log);
    if (pool == NULL) {
        return;
    }

    if (ngx_http_tokenbiryani_raccts_copy(&tmcf->zone, pool, &views, &gen)
        != NGX_OK)
    {
        ngx_destroy_pool(pool);
        return;
    }

    v = views.elts;
    changed = 0;

    /* removed: retired, their idle connections closed */

    a = tmcf->accounts.elts;

    for (i = tmcf->nyaml; i < tmcf->accounts.nelts; i++) {
        if (a[i].retired) {
            continue;
        }

        found = 0;

        /* removed, or removed and added again as another account (a
         * slot of its own): either way this place is done with */

        for (j = 0; j < views.nelts; j++) {
            if (v[j].id.len == a[i].id.len
                && ngx_memcmp(v[j].id.data, a[i].id.data, a[i].id.len) == 0
                && v[j].slot == a[i].slot)
            {
                found = 1;
                break;
            }
        }

        if (found) {
            continue;
        }

        a[i].retired = 1;
        a[i].supported = 0;
        a[i].retired_epoch = w->epoch;
        ngx_http_tokenbiryani_keepalive_drop(&a[i]);
        changed = 1;
    }

    /* added or changed */

    for (j = 0; j < views.nelts; j++) {
        switch (ngx_http_tokenbiryani_racct_apply(tmcf, &v[j])) {

        case NGX_OK:
            changed = 1;
            break;

        case NGX_AGAIN:
            /* no place until older requests end: again in a second */
            w->retry = ngx_current_msec + 1000;
            break;

        default:
            break;
        }
    }

    ngx_destroy_pool(pool);

    w->gen = gen;

    if (changed) {
        w->epoch++;
    }
}


/*
 * NGX_OK: the worker's table changed; NGX_DECLINED: nothing to do (or it
 * cannot be served: said once); NGX_AGAIN: no free place yet
 */
static ngx_int_t
ngx_http_tokenbiryani_racct_apply(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_racct_view_t *v)
{
    u_char                            fingerprint[8];
    ngx_int_t                         rc;
    ngx_uint_t                        i;
    ngx_pool_t                       *vpool;
    tb_config_t                      *cf;
    ngx_pool_cleanup_t               *cln;
    ngx_http_tokenbiryani_account_t  *a, *old, next;
    char                              err[512];

    a = tmcf->accounts.elts;
    old = NULL;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (a[i].retired || a[i].id.len != v->id.len
            || ngx_memcmp(a[i].id.data, v->id.data, v->id.len) != 0)
        {
            continue;
        }

        if (!a[i].runtime) {
            /* the file's since a reload: the file's wins */
            return NGX_DECLINED;
        }

        if (a[i].version == v->version) {
            return NGX_DECLINED;
        }

        /* a new content for the same account (the removal loop retired
         * a place whose slot the id no longer has) */
        old = &a[i];
        break;
    }

    if (v->naddrs == 0) {
        /* its host did not resolve when it was loaded: the master said so */
        return NGX_DECLINED;
    }

    vpool = ngx_create_pool(1024, ngx_cycle->log);
    if (vpool == NULL) {
        return NGX_DECLINED;
    }

    cf = ngx_http_tokenbiryani_racct_open(tmcf, &v->id, &v->spec, &v->sealed,
                                          err, sizeof(err));
    if (cf == NULL) {
        /* once per worker and change: GET /admin/accounts says it too */
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" left out: %s",
                      &v->id, err);
        ngx_destroy_pool(vpool);
        return NGX_DECLINED;
    }

    cln = ngx_pool_cleanup_add(vpool, 0);
    if (cln == NULL) {
        tb_config_free(cf);
        ngx_destroy_pool(vpool);
        return NGX_DECLINED;
    }

    cln->handler = ngx_http_tokenbiryani_config_free;
    cln->data = cf;

    ngx_memzero(&next, sizeof(ngx_http_tokenbiryani_account_t));

    rc = ngx_http_tokenbiryani_account_fill(vpool, &next, &cf->accounts[0],
                                            fingerprint, err, sizeof(err));
    if (rc != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" left out: %s", &v->id,
                      rc == NGX_ERROR ? err : "no memory");
        ngx_destroy_pool(vpool);
        return NGX_DECLINED;
    }

#if (NGX_HTTP_SSL)
    if (next.tls && tmcf->ssl == NULL)
#else
    if (next.tls)
#endif
    {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" left out: https, and "
                      "this gateway has no TLS context (the trusted "
                      "certificates \"%V\" were not there at start)",
                      &v->id, &tmcf->trusted_certificate);
        ngx_destroy_pool(vpool);
        return NGX_DECLINED;
    }

    next.addrs = ngx_pcalloc(vpool, v->naddrs * sizeof(ngx_addr_t));
    if (next.addrs == NULL) {
        ngx_destroy_pool(vpool);
        return NGX_DECLINED;
    }

    for (i = 0; i < v->naddrs; i++) {
        next.addrs[i].sockaddr = ngx_pnalloc(vpool, v->addrs[i].socklen);
        next.addrs[i].name.data = ngx_pnalloc(vpool, NGX_SOCKADDR_STRLEN);
        if (next.addrs[i].sockaddr == NULL
            || next.addrs[i].name.data == NULL)
        {
            ngx_destroy_pool(vpool);
            return NGX_DECLINED;
        }

        ngx_memcpy(next.addrs[i].sockaddr, &v->addrs[i].sockaddr,
                   v->addrs[i].socklen);
        next.addrs[i].socklen = v->addrs[i].socklen;
        next.addrs[i].name.len = ngx_sock_ntop(next.addrs[i].sockaddr,
                                               next.addrs[i].socklen,
                                               next.addrs[i].name.data,
                                               NGX_SOCKADDR_STRLEN, 1);
    }

    next.naddrs = v->naddrs;
    next.port = (in_port_t) cf->accounts[0].port;
    next.runtime = 1;
    next.version = v->version;
    next.vpool = vpool;
    next.slot = v->slot;
    next.sh = ngx_http_tokenbiryani_zone_slot_state(&tmcf->zone,
                                                    (int64_t) v->slot);
    if (next.sh == NULL) {
        ngx_destroy_pool(vpool);
        return NGX_DECLINED;
    }

    if (old) {
        /* a new content in the same place: requests holding the old one
         * keep reading it until they end */

        ngx_http_tokenbiryani_accounts_bury(old->vpool);

        next.index = old->index;
        next.cache = old->cache;
        next.free = old->free;
#if (NGX_HTTP_SSL)
        next.ssl_session = old->ssl_session;
#endif
        next.next_addr = 0;

        /* written over in place: the idle queues' sentinels stay where
         * their items point */
        *old = next;

        return NGX_OK;
    }

    /* a place: one retired that no request can still see, or a new one */

    a = tmcf->accounts.elts;

    for (i = tmcf->nyaml; i < tmcf->accounts.nelts; i++) {
        if (a[i].retired
            && ngx_http_tokenbiryani_accounts_quiet(a[i].retired_epoch))
        {
            break;
        }
    }

    if (i == tmcf->accounts.nelts) {
        if (tmcf->accounts.nelts == tmcf->max_accounts) {
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "tokenbiryani: account \"%V\" waits for a place "
                          "in this worker: tokenbiryani_max_accounts (%ui) "
                          "are in use, some by accounts removed while "
                          "requests that began before are still running",
                          &v->id, tmcf->max_accounts);
            ngx_destroy_pool(vpool);
            return NGX_AGAIN;
        }

        old = ngx_array_push(&tmcf->accounts);   /* room: never moves */
        ngx_memzero(old, sizeof(ngx_http_tokenbiryani_account_t));

        if (ngx_http_tokenbiryani_account_keepalive(ngx_cycle->pool, tmcf,
                                                    old)
            != NGX_OK)
        {
            tmcf->accounts.nelts--;
            ngx_destroy_pool(vpool);
            return NGX_DECLINED;
        }

        next.index = tmcf->accounts.nelts - 1;

    } else {
        old = &a[i];

        ngx_http_tokenbiryani_accounts_bury(old->vpool);
        next.index = i;

#if (NGX_HTTP_SSL)
        if (old->ssl_session) {
            ngx_ssl_free_session(old->ssl_session);
            old->ssl_session = NULL;
        }
#endif
    }

    next.cache = old->cache;
    next.free = old->free;

    *old = next;

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_config_free(void *data)
{
    tb_config_free(data);
}
