/*
 * tokenbiryani: an account's addresses follow DNS.  A host name is
 * resolved once when the configuration loads (nginx -t says when it does
 * not resolve); with a resolver in http{}, every worker then resolves it
 * again whenever the answer's TTL runs out, within
 * tokenbiryani_resolver_ttl's floor and ceiling.  An answer that differs
 * replaces the addresses new attempts use; a lookup that fails keeps the
 * last good ones.  TLS is unaffected: SNI and certificate verification
 * use the host name, whatever address it has.
 *
 * The address lists an account had are never freed: a connection being
 * made, or kept alive, may still point at one, and they change rarely.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_resolve.h"


typedef struct {
    ngx_http_tokenbiryani_account_t    *account;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_resolver_t                     *resolver;
    ngx_msec_t                          timeout;
    ngx_event_t                         timer;
    ngx_uint_t                          failures;   /* in a row */
} ngx_http_tokenbiryani_resolve_t;


static void ngx_http_tokenbiryani_resolve_start(ngx_event_t *ev);
static void ngx_http_tokenbiryani_resolve_handler(ngx_resolver_ctx_t *ctx);
static ngx_uint_t ngx_http_tokenbiryani_same_addrs(ngx_addr_t *a,
    ngx_uint_t na, ngx_resolver_addr_t *b, ngx_uint_t nb, in_port_t port);
static void ngx_http_tokenbiryani_resolve_again(
    ngx_http_tokenbiryani_resolve_t *rs, ngx_msec_t delay);


ngx_int_t
ngx_http_tokenbiryani_resolve_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_uint_t                          i;
    ngx_http_conf_ctx_t                *hc;
    ngx_http_core_loc_conf_t           *clcf;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_resolve_t    *rs;

    hc = (ngx_http_conf_ctx_t *) ngx_get_conf(cycle->conf_ctx,
                                              ngx_http_module);
    if (hc == NULL) {
        return NGX_OK;
    }

    /* the resolver of http{} itself; without one, addresses stay as loaded */

    clcf = hc->loc_conf[ngx_http_core_module.ctx_index];

    if (clcf->resolver == NULL || clcf->resolver->connections.nelts == 0) {
        return NGX_OK;
    }

    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (!a[i].by_name) {
            continue;
        }

        rs = ngx_pcalloc(cycle->pool, sizeof(ngx_http_tokenbiryani_resolve_t));
        if (rs == NULL) {
            return NGX_ERROR;
        }

        rs->account = &a[i];
        rs->tmcf = tmcf;
        rs->resolver = clcf->resolver;
        rs->timeout = (clcf->resolver_timeout == NGX_CONF_UNSET_MSEC)
                      ? 30000 : clcf->resolver_timeout;

        ngx_http_tokenbiryani_timer_init(&rs->timer,
                                         ngx_http_tokenbiryani_resolve_start,
                                         rs, cycle->log);

        /* the addresses loaded came with no TTL: ask soon */
        ngx_add_timer(&rs->timer, tmcf->resolver_ttl_min);
    }

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_resolve_start(ngx_event_t *ev)
{
    ngx_resolver_ctx_t               *ctx;
    ngx_http_tokenbiryani_resolve_t  *rs;

    rs = ev->data;

    ctx = ngx_resolve_start(rs->resolver, NULL);

    if (ctx == NULL || ctx == NGX_NO_RESOLVER) {
        ngx_log_error(NGX_LOG_WARN, ev->log, 0,
                      "tokenbiryani: account \"%V\": cannot start resolving "
                      "\"%V\"; keeping its addresses",
                      &rs->account->id, &rs->account->ssl_name);
        ngx_http_tokenbiryani_resolve_again(rs, rs->tmcf->resolver_ttl_min);
        return;
    }

    ctx->name = rs->account->ssl_name;
    ctx->handler = ngx_http_tokenbiryani_resolve_handler;
    ctx->data = rs;
    ctx->timeout = rs->timeout;

    /* its timeout must not hold back a worker that is shutting down */
    ctx->cancelable = 1;

    if (ngx_resolve_name(ctx) != NGX_OK) {
        /* the context is freed on failure */
        ngx_http_tokenbiryani_resolve_again(rs, rs->tmcf->resolver_ttl_min);
    }
}


static void
ngx_http_tokenbiryani_resolve_handler(ngx_resolver_ctx_t *ctx)
{
    u_char                           *p;
    time_t                            ttl;
    size_t                            len;
    ngx_uint_t                        i;
    ngx_msec_t                        next;
    ngx_addr_t                       *addrs;
    struct sockaddr                  *sa;
    ngx_http_tokenbiryani_account_t  *a;
    ngx_http_tokenbiryani_resolve_t  *rs;

    rs = ctx->data;
    a = rs->account;

    if (ctx->state != NGX_OK || ctx->naddrs == 0) {

        /* the last good addresses stay; say so once per outage */

        if (rs->failures++ == 0) {
            ngx_log_error(NGX_LOG_WARN, rs->timer.log, 0,
                          "tokenbiryani: account \"%V\": \"%V\" could not be "
                          "resolved (%i: %s); keeping its %ui last good "
                          "address%s", &a->id, &ctx->name, ctx->state,
                          ngx_resolver_strerror(ctx->state), a->naddrs,
                          a->naddrs == 1 ? "" : "es");
        }

        ngx_resolve_name_done(ctx);
        ngx_http_tokenbiryani_resolve_again(rs, rs->tmcf->resolver_ttl_min);
        return;
    }

    if (rs->failures) {
        ngx_log_error(NGX_LOG_NOTICE, rs->timer.log, 0,
                      "tokenbiryani: account \"%V\": \"%V\" resolves again",
                      &a->id, &ctx->name);
        rs->failures = 0;
    }

    ttl = ctx->valid - ngx_time();
    next = (ttl > 0) ? (ngx_msec_t) ttl * 1000 : 0;
    next = ngx_max(next, rs->tmcf->resolver_ttl_min);
    next = ngx_min(next, rs->tmcf->resolver_ttl_max);

    if (ngx_http_tokenbiryani_same_addrs(a->addrs, a->naddrs, ctx->addrs,
                                         ctx->naddrs, a->port))
    {
        ngx_resolve_name_done(ctx);
        ngx_http_tokenbiryani_resolve_again(rs, next);
        return;
    }

    /* a new list, in the worker's memory, with the account's port */

    addrs = ngx_pcalloc(ngx_cycle->pool, ctx->naddrs * sizeof(ngx_addr_t));
    if (addrs == NULL) {
        goto failed;
    }

    for (i = 0; i < ctx->naddrs; i++) {
        sa = ngx_palloc(ngx_cycle->pool, ctx->addrs[i].socklen);
        if (sa == NULL) {
            goto failed;
        }

        ngx_memcpy(sa, ctx->addrs[i].sockaddr, ctx->addrs[i].socklen);
        ngx_inet_set_port(sa, a->port);

        p = ngx_pnalloc(ngx_cycle->pool, NGX_SOCKADDR_STRLEN);
        if (p == NULL) {
            goto failed;
        }

        len = ngx_sock_ntop(sa, ctx->addrs[i].socklen, p,
                            NGX_SOCKADDR_STRLEN, 1);

        addrs[i].sockaddr = sa;
        addrs[i].socklen = ctx->addrs[i].socklen;
        addrs[i].name.data = p;
        addrs[i].name.len = len;
    }

    ngx_log_error(NGX_LOG_NOTICE, rs->timer.log, 0,
                  "tokenbiryani: account \"%V\": \"%V\" now resolves to "
                  "%V%s (was %V%s), for %M s", &a->id, &ctx->name,
                  &addrs[0].name, ctx->naddrs > 1 ? " and others" : "",
                  &a->addrs[0].name, a->naddrs > 1 ? " and others" : "",
                  next / 1000);

    /* attempts from now on: idle connections to the old ones age out */

    a->addrs = addrs;
    a->naddrs = ctx->naddrs;

    ngx_resolve_name_done(ctx);
    ngx_http_tokenbiryani_resolve_again(rs, next);
    return;

failed:

    ngx_resolve_name_done(ctx);
    ngx_http_tokenbiryani_resolve_again(rs, rs->tmcf->resolver_ttl_min);
}


/* the same addresses, in any order, with the account's port */

static ngx_uint_t
ngx_http_tokenbiryani_same_addrs(ngx_addr_t *a, ngx_uint_t na,
    ngx_resolver_addr_t *b, ngx_uint_t nb, in_port_t port)
{
    ngx_uint_t  i, j;

    if (na != nb) {
        return 0;
    }

    for (i = 0; i < nb; i++) {
        for (j = 0; j < na; j++) {
            if (ngx_cmp_sockaddr(b[i].sockaddr, b[i].socklen, a[j].sockaddr,
                                 a[j].socklen, 0) == NGX_OK
                && ngx_inet_get_port(a[j].sockaddr) == port)
            {
                break;
            }
        }

        if (j == na) {
            return 0;
        }
    }

    return 1;
}


static void
ngx_http_tokenbiryani_resolve_again(ngx_http_tokenbiryani_resolve_t *rs,
    ngx_msec_t delay)
{
    if (!rs->timer.timer_set) {
        ngx_add_timer(&rs->timer, delay);
    }
}
