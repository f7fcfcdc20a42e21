/*
 * The pool's accounts as a worker has them: the file's, loaded with the
 * configuration, then those added at runtime (the zone's, copied when
 * they change).
 *
 * The worker's table has room for tokenbiryani_max_accounts and never
 * moves.  A request sees the accounts there were when it began
 * (ctx->naccounts); an account removed is retired, its place and the
 * memory of a changed account's previous content kept until every request
 * that began before the change has ended.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ACCOUNTS_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ACCOUNTS_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif


/*
 * What the proxy needs of an account, from its configuration: the URL
 * split up, the Host header, the credential header written once, and the
 * fingerprint of credential and host.  Everything is allocated from pool.
 * NGX_ERROR with a message in err (no prefix) for what the configuration
 * cannot have; NGX_ABORT for no memory.
 */
ngx_int_t ngx_http_tokenbiryani_account_fill(ngx_pool_t *pool,
    ngx_http_tokenbiryani_account_t *a, tb_account_conf_t *ac,
    u_char fingerprint[8], char *err, size_t errlen);

/* an account's idle connection cache, per worker */
ngx_int_t ngx_http_tokenbiryani_account_keepalive(ngx_pool_t *pool,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_account_t *a);

/*
 * A runtime account's spec and sealed credential opened: a configuration
 * holding that one account, its api_key set (tb_config_free() releases
 * it), or NULL with the reason in err.
 */
/*
 * Whether a runtime account's addresses reach what it may not: a
 * loopback, link-local or private one, unless server.allow_private_hosts.
 */
ngx_uint_t ngx_http_tokenbiryani_racct_private(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_raddr_t *addrs, ngx_uint_t n);

tb_config_t *ngx_http_tokenbiryani_racct_open(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const ngx_str_t *id,
    const ngx_str_t *spec, const ngx_str_t *sealed, char *err,
    size_t errlen);

/*
 * The request takes the worker's accounts as they are now (brought up to
 * date with the zone first): ctx->naccounts, and a hold that keeps what
 * it may point to until it ends.  NGX_ERROR: no memory.
 */
ngx_int_t ngx_http_tokenbiryani_accounts_hold(ngx_http_request_t *r,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx);

/* the worker's accounts brought up to date with the zone */
void ngx_http_tokenbiryani_accounts_sync(
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* changes whenever the worker's accounts change */
uint64_t ngx_http_tokenbiryani_accounts_epoch(void);

/* the account of that id in this worker (not retired), or NULL */
ngx_http_tokenbiryani_account_t *ngx_http_tokenbiryani_account_find(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len);

/* the file's account of that id, or NULL */
ngx_http_tokenbiryani_account_t *ngx_http_tokenbiryani_yaml_account(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len);

/*
 * A host's addresses (getaddrinfo: it blocks - for the thread pool, or
 * the master before workers run), at most max, with port; how many.  0:
 * none, the reason in err.
 */
ngx_uint_t ngx_http_tokenbiryani_resolve_host(const char *host,
    in_port_t port, ngx_http_tokenbiryani_raddr_t *out, ngx_uint_t max,
    char *err, size_t errlen);

/*
 * A host looked up in nginx's thread pool as a task of its own, so a slow
 * name server holds up neither the store's writes nor other lookups:
 * done is called from the event loop with naddrs (0: err says why).  The
 * struct lives until then.  NGX_ERROR: no thread pool.
 */
typedef struct ngx_http_tokenbiryani_lookup_s  ngx_http_tokenbiryani_lookup_t;

typedef void (*ngx_http_tokenbiryani_lookup_done_pt)(
    ngx_http_tokenbiryani_lookup_t *lk);

struct ngx_http_tokenbiryani_lookup_s {
    const char                            *host;
    in_port_t                              port;
    ngx_http_tokenbiryani_raddr_t         *addrs;    /* room for naddrs */
    ngx_uint_t                             naddrs;
    char                                   err[256];
    ngx_http_tokenbiryani_lookup_done_pt   done;
    void                                  *data;
#if (NGX_THREADS)
    ngx_thread_task_t                      task;
#endif
};

ngx_int_t ngx_http_tokenbiryani_lookup_post(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_lookup_t *lk);

/* an IP literal's address with port into out[0]: 1, or 0 if not one */
ngx_uint_t ngx_http_tokenbiryani_literal_addr(const char *host,
    in_port_t port, ngx_http_tokenbiryani_raddr_t *out);


#endif /* _NGX_HTTP_TOKENBIRYANI_ACCOUNTS_H_INCLUDED_ */
