/*
 * tokenbiryani for NGINX: a pooling gateway for Claude API credentials.
 *
 * This file holds the directives, the configuration structures and the
 * wiring; the request path lives in src/http, a worker's copy of state in
 * src/state, the durable store in src/store (Redis in src/store/redis),
 * the shared zone in shm, the decisions in src/core, the admin API in
 * lua-free-admin.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_strategy.h"
#include "ngx_http_tokenbiryani_config.h"
#include "ngx_http_tokenbiryani_handler.h"
#include "ngx_http_tokenbiryani_balancer.h"
#include "ngx_http_tokenbiryani_route.h"
#include "ngx_http_tokenbiryani_resolve.h"
#include "ngx_http_tokenbiryani_attempt.h"
#include "ngx_http_tokenbiryani_filter.h"
#include "tb_oauth.h"
#include "ngx_http_tokenbiryani_oauth.h"
#include "ngx_http_tokenbiryani_admin.h"
#include "ngx_http_tokenbiryani_gauth.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "ngx_http_tokenbiryani_variables.h"
#include "ngx_http_tokenbiryani_poller.h"
#include "ngx_http_tokenbiryani_pacer.h"


static void *ngx_http_tokenbiryani_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_tokenbiryani_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_tokenbiryani_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_tokenbiryani_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static ngx_int_t ngx_http_tokenbiryani_postconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_tokenbiryani_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_tokenbiryani_init_worker(ngx_cycle_t *cycle);
static void ngx_http_tokenbiryani_exit_worker(ngx_cycle_t *cycle);
static void ngx_http_tokenbiryani_exit_master(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_tokenbiryani_check_open_mode(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf);
static ngx_uint_t ngx_http_tokenbiryani_loopback(struct sockaddr *sa);

static char *ngx_http_tokenbiryani_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_tokenbiryani_config(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_tokenbiryani_resolver_ttl(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_tokenbiryani_keepalive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_tokenbiryani_location(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);


static ngx_command_t  ngx_http_tokenbiryani_commands[] = {

    { ngx_string("tokenbiryani_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_tokenbiryani_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("tokenbiryani_config"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_tokenbiryani_config,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("tokenbiryani_ssl_trusted_certificate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_tokenbiryani_main_conf_t, trusted_certificate),
      NULL },

    { ngx_string("tokenbiryani_keepalive"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE12,
      ngx_http_tokenbiryani_keepalive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("tokenbiryani_resolver_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_tokenbiryani_resolver_ttl,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("tokenbiryani_lease_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_tokenbiryani_main_conf_t, lease_timeout),
      NULL },

    { ngx_string("tokenbiryani_max_accounts"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_tokenbiryani_main_conf_t, max_accounts),
      NULL },

    { ngx_string("tokenbiryani_pass"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_tokenbiryani_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      NGX_HTTP_TB_PASS,
      NULL },

    { ngx_string("tokenbiryani_admin"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_tokenbiryani_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      NGX_HTTP_TB_ADMIN,
      NULL },

    { ngx_string("tokenbiryani_healthz"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_tokenbiryani_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      NGX_HTTP_TB_HEALTHZ,
      NULL },

    { ngx_string("tokenbiryani_console"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_tokenbiryani_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      NGX_HTTP_TB_CONSOLE,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_tokenbiryani_module_ctx = {
    ngx_http_tokenbiryani_add_variables,      /* preconfiguration */
    ngx_http_tokenbiryani_postconfiguration,  /* postconfiguration */

    ngx_http_tokenbiryani_create_main_conf,   /* create main configuration */
    ngx_http_tokenbiryani_init_main_conf,     /* init main configuration */

    NULL,                                     /* create server configuration */
    NULL,                                     /* merge server configuration */

    ngx_http_tokenbiryani_create_loc_conf,    /* create location configuration */
    ngx_http_tokenbiryani_merge_loc_conf      /* merge location configuration */
};


ngx_module_t  ngx_http_tokenbiryani_module = {
    NGX_MODULE_V1,
    &ngx_http_tokenbiryani_module_ctx,        /* module context */
    ngx_http_tokenbiryani_commands,           /* module directives */
    NGX_HTTP_MODULE,                          /* module type */
    NULL,                                     /* init master */
    ngx_http_tokenbiryani_init_module,        /* init module */
    ngx_http_tokenbiryani_init_worker,        /* init process */
    NULL,                                     /* init thread */
    NULL,                                     /* exit thread */
    ngx_http_tokenbiryani_exit_worker,        /* exit process */
    ngx_http_tokenbiryani_exit_master,        /* exit master */
    NGX_MODULE_V1_PADDING
};


/* never forwarded to the client, whatever the upstream sends */
static ngx_str_t  ngx_http_tokenbiryani_hide_headers[] = {
    ngx_string("Date"),
    ngx_string("Server"),
    ngx_string("X-Accel-Expires"),
    ngx_string("X-Accel-Redirect"),
    ngx_string("X-Accel-Limit-Rate"),
    ngx_string("X-Accel-Buffering"),
    ngx_string("X-Accel-Charset"),
    ngx_null_string
};


static void *
ngx_http_tokenbiryani_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_tokenbiryani_main_conf_t));
    if (tmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     tmcf->zone = { 0 };
     *     tmcf->has_zone = 0;
     *     tmcf->tbcf = NULL;
     *     tmcf->trusted_certificate = { 0, NULL };
     *     tmcf->upstream = NULL;
     *     tmcf->used = 0;
     */

    tmcf->reload_fd = -1;
    tmcf->max_accounts = NGX_CONF_UNSET_UINT;
    tmcf->keepalive = NGX_CONF_UNSET_UINT;
    tmcf->keepalive_timeout = NGX_CONF_UNSET_MSEC;
    tmcf->lease_timeout = NGX_CONF_UNSET_MSEC;
    tmcf->resolver_ttl_min = NGX_CONF_UNSET_MSEC;
    tmcf->resolver_ttl_max = NGX_CONF_UNSET_MSEC;

    if (ngx_array_init(&tmcf->accounts, cf->pool, 4,
                       sizeof(ngx_http_tokenbiryani_account_t))
        != NGX_OK)
    {
        return NULL;
    }

    if (ngx_array_init(&tmcf->zone.accounts, cf->pool, 4,
                       sizeof(ngx_http_tokenbiryani_zone_account_t))
        != NGX_OK)
    {
        return NULL;
    }

    if (ngx_array_init(&tmcf->servers, cf->pool, 2,
                       sizeof(ngx_http_core_srv_conf_t *))
        != NGX_OK)
    {
        return NULL;
    }

    if (ngx_array_init(&tmcf->plugins, cf->pool, 2,
                       sizeof(tb_strategy_t *))
        != NGX_OK)
    {
        return NULL;
    }

    return tmcf;
}


ngx_int_t
ngx_http_tokenbiryani_register_strategy(ngx_conf_t *cf,
    const tb_strategy_t *strategy)
{
    ngx_uint_t                          i;
    const tb_strategy_t               **s;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_tokenbiryani_module);

    if (strategy->name == NULL || strategy->name[0] == '\0') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: a strategy needs a name");
        return NGX_ERROR;
    }

    if (tb_strategy_builtin(strategy->name)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: strategy \"%s\" is built in and "
                           "cannot be replaced", strategy->name);
        return NGX_ERROR;
    }

    s = tmcf->plugins.elts;

    for (i = 0; i < tmcf->plugins.nelts; i++) {
        if (ngx_strcmp(s[i]->name, strategy->name) == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "tokenbiryani: strategy \"%s\" is registered "
                               "twice", strategy->name);
            return NGX_ERROR;
        }
    }

    s = ngx_array_push(&tmcf->plugins);
    if (s == NULL) {
        return NGX_ERROR;
    }

    *s = strategy;

    return NGX_OK;
}


static char *
ngx_http_tokenbiryani_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_tokenbiryani_main_conf_t *tmcf = conf;

    void                               *elts;
    ngx_uint_t                          i, tls;
    ngx_file_info_t                     fi;
    ngx_http_tokenbiryani_account_t    *a;

    ngx_conf_init_uint_value(tmcf->keepalive, 64);
    ngx_conf_init_msec_value(tmcf->keepalive_timeout, 60000);
    ngx_conf_init_msec_value(tmcf->lease_timeout, 60000);
    ngx_conf_init_msec_value(tmcf->resolver_ttl_min, 5000);
    ngx_conf_init_msec_value(tmcf->resolver_ttl_max, 300000);

    if (tmcf->lease_timeout < 1000) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"tokenbiryani_lease_timeout\" must be at "
                           "least 1s");
        return NGX_CONF_ERROR;
    }

    tmcf->zone.lease_timeout = tmcf->lease_timeout;
    tmcf->keepalive_requests = 1000;

    if (tmcf->trusted_certificate.data == NULL) {
        ngx_str_set(&tmcf->trusted_certificate,
                    "/etc/ssl/certs/ca-certificates.crt");
    }

    if (!tmcf->used) {
        return NGX_CONF_OK;
    }

    if (tmcf->tbcf == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"tokenbiryani_config\" is required where "
                           "tokenbiryani locations are used");
        return NGX_CONF_ERROR;
    }

    if (!tmcf->has_zone) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"tokenbiryani_zone\" is required where "
                           "tokenbiryani locations are used");
        return NGX_CONF_ERROR;
    }

    /*
     * The accounts' table gets its room for the most there may be, the
     * file's and those added at runtime: it never moves once workers run.
     */

    ngx_conf_init_uint_value(tmcf->max_accounts, 64);

    if (tmcf->max_accounts > 4096) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"tokenbiryani_max_accounts\" must be at most "
                           "4096");
        return NGX_CONF_ERROR;
    }

    if (tmcf->max_accounts < tmcf->accounts.nelts) {
        tmcf->max_accounts = tmcf->accounts.nelts;
    }

    if (tmcf->max_accounts > tmcf->accounts.nalloc) {
        elts = ngx_pcalloc(cf->pool, tmcf->max_accounts
                                     * sizeof(ngx_http_tokenbiryani_account_t));
        if (elts == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memcpy(elts, tmcf->accounts.elts,
                   tmcf->accounts.nelts
                   * sizeof(ngx_http_tokenbiryani_account_t));

        tmcf->accounts.elts = elts;
        tmcf->accounts.nalloc = tmcf->max_accounts;
    }

    if (ngx_http_tokenbiryani_key_pools(cf, tmcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* per-worker idle connection caches, one per account */

    a = tmcf->accounts.elts;

    tls = 0;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        tls |= a[i].tls;

        if (ngx_http_tokenbiryani_account_keepalive(cf->pool, tmcf, &a[i])
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

#if (NGX_HTTP_SSL)
    {
    ngx_pool_cleanup_t  *cln;

    /*
     * Accounts added at runtime may use https: with a store, TLS is made
     * ready whenever the trusted certificates are there (without them,
     * such an account is refused when it is added).
     */

    if (!tls
        && (!ngx_http_tokenbiryani_store_on(tmcf)
            || ngx_file_info(tmcf->trusted_certificate.data, &fi)
               == NGX_FILE_ERROR))
    {
        return NGX_CONF_OK;
    }

    tmcf->ssl = ngx_pcalloc(cf->pool, sizeof(ngx_ssl_t));
    if (tmcf->ssl == NULL) {
        return NGX_CONF_ERROR;
    }

    tmcf->ssl->log = cf->log;

    if (ngx_ssl_create(tmcf->ssl, NGX_SSL_TLSv1_2|NGX_SSL_TLSv1_3, NULL)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        ngx_ssl_cleanup_ctx(tmcf->ssl);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_ssl_cleanup_ctx;
    cln->data = tmcf->ssl;

    if (ngx_ssl_trusted_certificate(cf, tmcf->ssl, &tmcf->trusted_certificate,
                                    8)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (ngx_ssl_client_session_cache(cf, tmcf->ssl, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }
    }
#else

    if (tls) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "an account's base_url uses https, but this "
                           "nginx was built without the SSL module");
        return NGX_CONF_ERROR;
    }

#endif

    return NGX_CONF_OK;
}


static void *
ngx_http_tokenbiryani_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_tokenbiryani_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_tokenbiryani_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->type = 0;
     *     conf->upstream.* = 0 / NULL;
     */

    conf->upstream.local = NGX_CONF_UNSET_PTR;
    conf->upstream.socket_keepalive = NGX_CONF_UNSET;
    conf->upstream.hide_headers = NGX_CONF_UNSET_PTR;
    conf->upstream.pass_headers = NGX_CONF_UNSET_PTR;

    return conf;
}


static char *
ngx_http_tokenbiryani_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_tokenbiryani_loc_conf_t  *prev = parent;
    ngx_http_tokenbiryani_loc_conf_t  *conf = child;

    ngx_msec_t                          timeout;
    ngx_hash_init_t                     hash;
    ngx_http_upstream_conf_t           *u;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (conf->type == 0) {
        conf->type = prev->type;
    }

    u = &conf->upstream;

    ngx_conf_merge_ptr_value(u->local, prev->upstream.local, NULL);
    ngx_conf_merge_value(u->socket_keepalive, prev->upstream.socket_keepalive,
                         0);

    /* the hash is needed even by locations that never proxy: merges of
     * nested locations read it */

    hash.max_size = 512;
    hash.bucket_size = ngx_align(64, ngx_cacheline_size);
    hash.name = "tokenbiryani_headers_hash";

    if (ngx_http_upstream_hide_headers_hash(cf, u, &prev->upstream,
                                            ngx_http_tokenbiryani_hide_headers,
                                            &hash)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (conf->type != NGX_HTTP_TB_PASS) {
        return NGX_CONF_OK;
    }

    tmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_tokenbiryani_module);

    timeout = (ngx_msec_t) (tmcf->tbcf->server_request_timeout_seconds
                            * 1000);

    u->upstream = tmcf->upstream;
    u->connect_timeout = 10000;
    u->send_timeout = 60000;
    u->read_timeout = timeout ? timeout : 1;
    u->buffer_size = 16384;     /* headers and a stream's prelude */

    /* streams go out as they arrive: no buffering, no temp files */
    u->buffering = 0;
    u->request_buffering = 1;
    u->max_temp_file_size = 0;
    u->ignore_client_abort = 0;
    u->intercept_errors = 0;
    u->pass_request_headers = 0;       /* the module writes its own */
    u->pass_request_body = 1;

    /*
     * Every retry decision is the module's: it returns INVALID_HEADER to
     * move on and keeps peer.tries itself.  POST is not idempotent, so
     * without NON_IDEMPOTENT nginx would never retry at all.
     */
    u->next_upstream = NGX_CONF_BITMASK_SET
                       |NGX_HTTP_UPSTREAM_FT_ERROR
                       |NGX_HTTP_UPSTREAM_FT_TIMEOUT
                       |NGX_HTTP_UPSTREAM_FT_INVALID_HEADER
                       |NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT;
    u->next_upstream_tries = 0;
    u->next_upstream_timeout = 0;

    /* an upstream never steers nginx: no redirects, rates or charsets */
    u->ignore_headers = NGX_HTTP_UPSTREAM_IGN_XA_REDIRECT
                        |NGX_HTTP_UPSTREAM_IGN_XA_EXPIRES
                        |NGX_HTTP_UPSTREAM_IGN_XA_LIMIT_RATE
                        |NGX_HTTP_UPSTREAM_IGN_XA_BUFFERING
                        |NGX_HTTP_UPSTREAM_IGN_XA_CHARSET;

#if (NGX_HTTP_SSL)
    u->ssl = tmcf->ssl;
    u->ssl_session_reuse = 1;
    u->ssl_server_name = 1;
    u->ssl_verify = 1;
#endif

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_postconfiguration(ngx_conf_t *cf)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_tokenbiryani_module);

    if (!tmcf->used) {
        return NGX_OK;
    }

    if (ngx_http_tokenbiryani_check_open_mode(cf, tmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_tokenbiryani_filter_init(cf);
}


/*
 * No keys at all means anyone who can connect may spend the pool and read
 * /admin: that is only acceptable when nobody but this machine can connect.
 * The operator's own subscription (an account of type oauth) is theirs
 * alone: the same.
 */

static ngx_int_t
ngx_http_tokenbiryani_check_open_mode(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    u_char                      text[NGX_SOCKADDR_STRLEN];
    size_t                      len;
    ngx_uint_t                  p, a, s, t;
    const char                 *oauth;
    ngx_http_conf_port_t       *port;
    ngx_http_conf_addr_t       *addr;
    ngx_http_core_srv_conf_t  **servers, **ours;
    ngx_http_core_main_conf_t  *cmcf;

    oauth = NULL;

    for (p = 0; p < tmcf->tbcf->naccounts; p++) {
        if (tmcf->tbcf->accounts[p].type == TB_ACCOUNT_OAUTH) {
            oauth = tmcf->tbcf->accounts[p].id;
        }
    }

    if (tmcf->tbcf->nkeys > 0 && oauth == NULL) {
        return NGX_OK;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    if (cmcf->ports == NULL) {
        return NGX_OK;
    }

    ours = tmcf->servers.elts;
    port = cmcf->ports->elts;

    for (p = 0; p < cmcf->ports->nelts; p++) {
        addr = port[p].addrs.elts;

        for (a = 0; a < port[p].addrs.nelts; a++) {

            if (ngx_http_tokenbiryani_loopback(addr[a].opt.sockaddr)) {
                continue;
            }

            servers = addr[a].servers.elts;

            for (s = 0; s < addr[a].servers.nelts; s++) {
                for (t = 0; t < tmcf->servers.nelts; t++) {
                    if (servers[s] != ours[t]) {
                        continue;
                    }

                    len = ngx_sock_ntop(addr[a].opt.sockaddr,
                                        addr[a].opt.socklen, text,
                                        NGX_SOCKADDR_STRLEN, 1);

                    if (oauth) {
                        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                                      "tokenbiryani: \"%V\": account \"%s\" "
                                      "is of type oauth, but a server using "
                                      "the gateway listens on %*s, which is "
                                      "not a loopback address: "
                                      TB_OAUTH_TERMS, &tmcf->config_file,
                                      oauth, len, text);
                        return NGX_ERROR;
                    }

                    ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                                  "tokenbiryani: \"%V\" declares no keys, "
                                  "so the gateway would be open to anyone, "
                                  "but a server using it listens on %*s, "
                                  "which is not a loopback address; add "
                                  "keys[] to the file or listen on "
                                  "127.0.0.1 only", &tmcf->config_file,
                                  len, text);
                    return NGX_ERROR;
                }
            }
        }
    }

    return NGX_OK;
}


static ngx_uint_t
ngx_http_tokenbiryani_loopback(struct sockaddr *sa)
{
    struct sockaddr_in   *sin;
#if (NGX_HAVE_INET6)
    u_char               *p;
    struct sockaddr_in6  *sin6;
#endif

    switch (sa->sa_family) {

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) sa;

        if (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr)) {
            return 1;
        }

        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
            p = sin6->sin6_addr.s6_addr;
            return p[12] == 127;
        }

        return 0;
#endif

#if (NGX_HAVE_UNIX_DOMAIN)
    case AF_UNIX:
        return 1;
#endif

    case AF_INET:
        sin = (struct sockaddr_in *) sa;
        return (ntohl(sin->sin_addr.s_addr) >> 24) == 127;

    default:
        return 0;
    }
}


static char *
ngx_http_tokenbiryani_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_tokenbiryani_main_conf_t *tmcf = conf;

    ssize_t          size;
    ngx_str_t       *value;
    ngx_shm_zone_t  *shm_zone;

    if (tmcf->has_zone) {
        return "is duplicate";
    }

    value = cf->args->elts;

    size = ngx_parse_size(&value[2]);

    if (size == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (size < (ssize_t) (256 * 1024)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is too small: at least 256k",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    shm_zone = ngx_shared_memory_add(cf, &value[1], size,
                                     &ngx_http_tokenbiryani_module);
    if (shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is already used", &value[1]);
        return NGX_CONF_ERROR;
    }

    /* the zone gets its handle, which holds nothing of the http module */
    shm_zone->init = ngx_http_tokenbiryani_store_zone_init;
    shm_zone->data = &tmcf->zone;

    tmcf->zone.shm_zone = shm_zone;
    tmcf->has_zone = 1;

    return NGX_CONF_OK;
}


static char *
ngx_http_tokenbiryani_config(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_tokenbiryani_main_conf_t *tmcf = conf;

    ngx_str_t  *value;

    if (tmcf->tbcf) {
        return "is duplicate";
    }

    value = cf->args->elts;

    tmcf->config_file = value[1];

    if (ngx_conf_full_name(cf->cycle, &tmcf->config_file, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (ngx_http_tokenbiryani_load_config(cf, tmcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_tokenbiryani_keepalive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_tokenbiryani_main_conf_t *tmcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (tmcf->keepalive != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid number of connections \"%V\"", &value[1]);
        return NGX_CONF_ERROR;
    }

    tmcf->keepalive = n;

    if (cf->args->nelts == 3) {
        tmcf->keepalive_timeout = ngx_parse_time(&value[2], 0);

        if (tmcf->keepalive_timeout == (ngx_msec_t) NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid timeout \"%V\"", &value[2]);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


/* tokenbiryani_resolver_ttl floor ceiling; */

static char *
ngx_http_tokenbiryani_resolver_ttl(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_tokenbiryani_main_conf_t *tmcf = conf;

    ngx_str_t  *value;

    if (tmcf->resolver_ttl_min != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    tmcf->resolver_ttl_min = ngx_parse_time(&value[1], 0);
    tmcf->resolver_ttl_max = ngx_parse_time(&value[2], 0);

    if (tmcf->resolver_ttl_min == (ngx_msec_t) NGX_ERROR
        || tmcf->resolver_ttl_max == (ngx_msec_t) NGX_ERROR
        || tmcf->resolver_ttl_min < 1000
        || tmcf->resolver_ttl_max < tmcf->resolver_ttl_min)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid \"tokenbiryani_resolver_ttl %V %V\": "
                           "expected a floor of at least 1s and a ceiling "
                           "no lower than it", &value[1], &value[2]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_tokenbiryani_location(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_tokenbiryani_loc_conf_t *tlcf = conf;

    ngx_uint_t                          i;
    ngx_http_core_loc_conf_t           *clcf;
    ngx_http_core_srv_conf_t           *cscf, **server;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (tlcf->type) {
        return "is duplicate";
    }

    tlcf->type = cmd->offset;

    tmcf = ngx_http_conf_get_module_main_conf(cf,
                                              ngx_http_tokenbiryani_module);
    tmcf->used = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    switch (tlcf->type) {

    case NGX_HTTP_TB_PASS:
        clcf->handler = ngx_http_tokenbiryani_pass_handler;

        if (tmcf->upstream == NULL) {
            tmcf->upstream = ngx_http_tokenbiryani_upstream_add(cf);
            if (tmcf->upstream == NULL) {
                return NGX_CONF_ERROR;
            }
        }

        break;

    case NGX_HTTP_TB_ADMIN:
        clcf->handler = ngx_http_tokenbiryani_admin_handler;
        break;

    case NGX_HTTP_TB_CONSOLE:
        /* the page and its files: the data it shows comes from /admin */
        clcf->handler = ngx_http_tokenbiryani_console_handler;
        return NGX_CONF_OK;

    default: /* NGX_HTTP_TB_HEALTHZ */
        clcf->handler = ngx_http_tokenbiryani_healthz_handler;
        return NGX_CONF_OK;
    }

    /* remember the server: its listens decide whether open mode is safe */

    cscf = ngx_http_conf_get_module_srv_conf(cf, ngx_http_core_module);
    server = tmcf->servers.elts;

    for (i = 0; i < tmcf->servers.nelts; i++) {
        if (server[i] == cscf) {
            return NGX_CONF_OK;
        }
    }

    server = ngx_array_push(&tmcf->servers);
    if (server == NULL) {
        return NGX_CONF_ERROR;
    }

    *server = cscf;

    return NGX_CONF_OK;
}


/*
 * The zones exist (the master made them for this cycle): every account
 * learns its slot before any worker is forked.
 */

static ngx_int_t
ngx_http_tokenbiryani_init_module(ngx_cycle_t *cycle)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_tokenbiryani_module);

    if (tmcf == NULL || !tmcf->used) {
        return NGX_OK;
    }

    return ngx_http_tokenbiryani_config_bind(cycle, tmcf);
}


static ngx_int_t
ngx_http_tokenbiryani_init_worker(ngx_cycle_t *cycle)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_tokenbiryani_module);

    if (tmcf == NULL || !tmcf->used) {
        return NGX_OK;
    }

    if (ngx_http_tokenbiryani_attempt_init_worker(cycle, tmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_tokenbiryani_resolve_init_worker(cycle, tmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_tokenbiryani_store_init_worker(cycle, tmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_tokenbiryani_poller_init_worker(cycle, tmcf) != NGX_OK
        || ngx_http_tokenbiryani_pacer_init_worker(cycle, tmcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_tokenbiryani_gauth_init_worker(cycle, tmcf) != NGX_OK
        || ngx_http_tokenbiryani_oauth_init_worker(cycle, tmcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_tokenbiryani_reloader_worker(tmcf);

    return ngx_http_tokenbiryani_route_init_worker(cycle, tmcf);
}


static void
ngx_http_tokenbiryani_exit_worker(ngx_cycle_t *cycle)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_tokenbiryani_module);

    if (tmcf == NULL || !tmcf->used) {
        return;
    }

    ngx_http_tokenbiryani_store_exit_worker(cycle, tmcf);
}


static void
ngx_http_tokenbiryani_exit_master(ngx_cycle_t *cycle)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_tokenbiryani_module);

    if (tmcf == NULL) {
        return;
    }

    ngx_http_tokenbiryani_reloader_exit(tmcf);
}
