/*
 * tokenbiryani: the YAML file at load time - the accounts as the proxy
 * uses them (addresses, the credential header written once), the keys,
 * the strategy - and the accounts' slots in the zone once it exists.
 */


#include "ngx_http_tokenbiryani.h"

#include <pwd.h>

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif

#include "ngx_http_tokenbiryani_config.h"
#include "tb_hash.h"
#include "tb_store.h"
#include "tb_seal.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_sqlite.h"
#include "ngx_http_tokenbiryani_redis_store.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "ngx_http_tokenbiryani_accounts.h"


static void ngx_http_tokenbiryani_config_cleanup(void *data);
static ngx_int_t ngx_http_tokenbiryani_check_store(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf);
static ngx_int_t ngx_http_tokenbiryani_add_account(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf, tb_account_conf_t *ac);
static const char *ngx_http_tokenbiryani_conf_getenv(const char *name);


/*
 * store.backend: sqlite - the file (store.path, relative to the YAML
 * file's directory) is created, put in WAL mode and checked here, in the
 * master or in nginx -t, so that a file that cannot serve is named before
 * any worker starts.
 */

/* a path of the YAML file's: relative to its directory */
static const char *
ngx_http_tokenbiryani_yaml_relative(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *path)
{
    u_char  *p;
    size_t   dir, len;

    if (path[0] == '/') {
        return path;
    }

    len = ngx_strlen(path);
    dir = 0;

    for (p = tmcf->config_file.data;
         p < tmcf->config_file.data + tmcf->config_file.len;
         p++)
    {
        if (*p == '/') {
            dir = p - tmcf->config_file.data + 1;
        }
    }

    p = ngx_pnalloc(cf->pool, dir + len + 1);
    if (p == NULL) {
        return NULL;
    }

    ngx_memcpy(p, tmcf->config_file.data, dir);
    ngx_memcpy(p + dir, path, len + 1);

    return (const char *) p;
}


/*
 * The key credentials are sealed under in the store: TOKENBIRYANI_SECRET_KEY
 * (64 hex digits) in nginx's environment, else the file at
 * store.secret_key_path, made (0600, 32 random bytes) when missing and
 * refused when group or others may read it.  The master reads it; workers
 * have it from the fork.
 */

static ngx_int_t
ngx_http_tokenbiryani_secret_key(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    const char  *env, *path;
    char         err[NGX_MAX_ERROR_STR];

    env = getenv("TOKENBIRYANI_SECRET_KEY");

    if (env && env[0]) {
        if (tb_seal_key_parse(&tmcf->seal, env, ngx_strlen(env)) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "tokenbiryani: TOKENBIRYANI_SECRET_KEY must be "
                               "64 hex digits (32 bytes; openssl rand -hex "
                               "32 makes one)");
            return NGX_ERROR;
        }

        tmcf->seal_source = NGX_HTTP_TB_SEAL_ENV;
        tb_rec_key_init(&tmcf->rec, &tmcf->seal);
        return NGX_OK;
    }

    path = ngx_http_tokenbiryani_yaml_relative(cf, tmcf,
                                             tmcf->tbcf->store_secret_key_path);
    if (path == NULL) {
        return NGX_ERROR;
    }

    if (tb_seal_key_file(&tmcf->seal, path, 1, err, sizeof(err)) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "tokenbiryani: %s (or set "
                           "TOKENBIRYANI_SECRET_KEY in nginx's environment)",
                           err);
        return NGX_ERROR;
    }

    tmcf->seal_path.data = (u_char *) path;
    tmcf->seal_path.len = ngx_strlen(path);
    tmcf->seal_source = NGX_HTTP_TB_SEAL_FILE;
    tb_rec_key_init(&tmcf->rec, &tmcf->seal);

    return NGX_OK;
}


/*
 * The master opens the store, its -wal and -shm files and the secret key,
 * and makes what is missing, as root when it runs as root: in a directory
 * the workers' user can write, one of them could put a link there that
 * root would follow at the next start or reload.
 */

static ngx_int_t
ngx_http_tokenbiryani_store_dir(ngx_conf_t *cf, const char *path)
{
    char             *slash, dir[NGX_MAX_PATH];
    ngx_uid_t         uid;
    ngx_gid_t         gid;
    struct stat       st;
    struct passwd    *pw;
    ngx_core_conf_t  *ccf;

    if (geteuid() != 0) {
        return NGX_OK;
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);

    if (ccf->user == (ngx_uid_t) NGX_CONF_UNSET_UINT) {
        /* the default the core module will set */
        pw = getpwnam(NGX_USER);
        if (pw == NULL) {
            return NGX_OK;
        }

        uid = pw->pw_uid;
        gid = pw->pw_gid;

    } else {
        uid = ccf->user;
        gid = ccf->group;
    }

    if (uid == 0) {
        /* workers that run as root have nothing to gain */
        return NGX_OK;
    }

    ngx_cpystrn((u_char *) dir, (u_char *) path, sizeof(dir));
    slash = strrchr(dir, '/');

    if (slash == NULL) {
        ngx_cpystrn((u_char *) dir, (u_char *) ".", sizeof(dir));

    } else if (slash == dir) {
        dir[1] = '\0';

    } else {
        *slash = '\0';
    }

    if (stat(dir, &st) == -1) {
        /* the store's own check says what is wrong with it */
        return NGX_OK;
    }

    if ((st.st_uid == uid && (st.st_mode & S_IWUSR))
        || (st.st_gid == gid && (st.st_mode & S_IWGRP))
        || (st.st_mode & S_IWOTH))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: the store's directory \"%s\" can "
                           "be written by the workers' user: a link put there "
                           "would be followed by the master, as root, when it "
                           "opens the store or the secret key; make the "
                           "directory root's alone (chown root, chmod 755), "
                           "or set store.path in one that is", dir);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_check_store(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    const char  *path;
    char         err[NGX_MAX_ERROR_STR];

    if (tmcf->tbcf->store_path[0] == '\0') {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: %s: store.path is empty",
                           tmcf->config_file.data);
        return NGX_ERROR;
    }

    path = ngx_http_tokenbiryani_yaml_relative(cf, tmcf,
                                               tmcf->tbcf->store_path);
    if (path == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_tokenbiryani_store_dir(cf, path) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_tokenbiryani_secret_key(cf, tmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    if (tb_store_check(path, 2000, err, sizeof(err)) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "tokenbiryani: %s", err);
        return NGX_ERROR;
    }

    return ngx_http_tokenbiryani_sqlite_conf(cf, tmcf, path);
}


/*
 * nginx's thread pool, for the accounts whose credentials are made or read
 * there: a Vertex account's tokens (from its service account), the
 * operator's subscription's login file
 */

static ngx_int_t
ngx_http_tokenbiryani_conf_threads(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    size_t              i;
    const char         *why;
    tb_account_conf_t  *ac;

    why = NULL;
    ac = NULL;

    for (i = 0; i < tmcf->tbcf->naccounts && why == NULL; i++) {
        ac = &tmcf->tbcf->accounts[i];

        if (ac->gsa) {
            why = "makes its Vertex tokens";

        } else if (ac->type == TB_ACCOUNT_OAUTH
                   && ac->options.credentials_path)
        {
            why = "reads its token from its login file";
        }
    }

    if (why == NULL) {
        return NGX_OK;
    }

#if (NGX_THREADS)

    if (tmcf->thread_pool == NULL) {
        tmcf->thread_pool = ngx_thread_pool_add(cf, NULL);
        if (tmcf->thread_pool == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;

#else

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "tokenbiryani: %s: account \"%s\" %s in nginx's "
                       "thread pool, and this nginx is built without threads "
                       "(--with-threads)", tmcf->config_file.data, ac->id,
                       why);
    return NGX_ERROR;

#endif
}


ngx_int_t
ngx_http_tokenbiryani_load_config(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    u_char               *p, *last;
    size_t                i;
    ngx_uint_t            n, plugin;
    tb_config_t          *tbcf;
    tb_model_price_t     *models;
    ngx_pool_cleanup_t   *cln;
    const tb_strategy_t  *st;
    char                  err[TB_CONFIG_ERRLEN];
    u_char                names[512];

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    tbcf = tb_config_load_file((char *) tmcf->config_file.data,
                               ngx_http_tokenbiryani_conf_getenv,
                               err, sizeof(err));
    if (tbcf == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "tokenbiryani: %s", err);
        return NGX_ERROR;
    }

    cln->handler = ngx_http_tokenbiryani_config_cleanup;
    cln->data = tmcf;

    tmcf->tbcf = tbcf;

    for (i = 0; i < tbcf->warnings.n; i++) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0, "tokenbiryani: %s: %s",
                           tmcf->config_file.data, tbcf->warnings.items[i]);
    }

    tmcf->strategy = ngx_http_tokenbiryani_find_strategy(tmcf,
                                                 tbcf->routing_strategy);

    if (tmcf->strategy == NULL) {
        p = names;
        last = names + sizeof(names);

        for (n = 0;
             (st = ngx_http_tokenbiryani_strategy_nth(tmcf, n, &plugin));
             n++)
        {
            p = ngx_slprintf(p, last, "%s%s", p == names ? "" : ", ",
                             st->name);
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: %s:%ui: routing.strategy: unknown "
                           "strategy \"%s\" (known: %*s)",
                           tmcf->config_file.data,
                           (ngx_uint_t) tbcf->routing_strategy_line,
                           tbcf->routing_strategy, (size_t) (p - names),
                           names);
        return NGX_ERROR;
    }

    /* the cycle whose core configuration the store and the reload helper
     * read once it is complete */
    tmcf->cycle = cf->cycle;

    if (ngx_strcmp(tbcf->store_backend, "sqlite") == 0
        && ngx_http_tokenbiryani_check_store(cf, tmcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_strcmp(tbcf->store_backend, "redis") == 0
        && (ngx_http_tokenbiryani_secret_key(cf, tmcf) != NGX_OK
            || ngx_http_tokenbiryani_redis_conf(cf, tmcf) != NGX_OK))
    {
        return NGX_ERROR;
    }

    tmcf->weights[TB_T_AFFINITY] = tbcf->w_affinity;
    tmcf->weights[TB_T_HEADROOM] = tbcf->w_headroom;
    tmcf->weights[TB_T_PRIORITY] = tbcf->w_priority;
    tmcf->weights[TB_T_LOAD] = tbcf->w_load;
    tmcf->weights[TB_T_ERRORS] = tbcf->w_errors;
    tmcf->weights[TB_T_COST] = tbcf->w_cost;

    /* what a request costs: the file's prices, then the builtin table */

    if (tbcf->nprices) {
        models = ngx_palloc(cf->pool,
                            tbcf->nprices * sizeof(tb_model_price_t));
        if (models == NULL) {
            return NGX_ERROR;
        }

        tb_price_table_from(&tmcf->prices, models, tbcf->prices,
                            tbcf->nprices);
    }

    tmcf->builtin = tbcf->pricing_builtin ? &tb_price_builtin : NULL;

    /* count_tokens and models: round robin among the eligible */
    tmcf->rotate = tb_strategy_builtin("round_robin");

    tmcf->zone.tbcf = tbcf;
    tmcf->zone.breaker.threshold =
                                (uint32_t) tbcf->breaker_failure_threshold;
    tmcf->zone.breaker.cooldown_ms =
                        (int64_t) (tbcf->breaker_cooldown_seconds * 1000);
    tmcf->zone.spend_bucket_ms = tb_ledger_bucket_ms(tbcf->spend_window_hours);

    if (tb_keytab_build(&tmcf->keytab, tbcf) != 0) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "tokenbiryani: no memory or no randomness for the key "
                      "table");
        return NGX_ERROR;
    }

    /* from here on the keys exist only as their digests */

    for (i = 0; i < tbcf->nkeys; i++) {
        ngx_explicit_memzero(tbcf->keys[i].key,
                             ngx_strlen(tbcf->keys[i].key));
    }

    for (i = 0; i < tbcf->naccounts; i++) {
        if (ngx_http_tokenbiryani_add_account(cf, tmcf, &tbcf->accounts[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    tmcf->nyaml = tmcf->accounts.nelts;

    return ngx_http_tokenbiryani_conf_threads(cf, tmcf);
}




/*
 * A key's pool as flags over the accounts, once per configuration: a
 * request reads them instead of comparing names.  NULL for a key that may
 * use every account.
 */

ngx_int_t
ngx_http_tokenbiryani_key_pools(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    size_t                            i, j, k;
    tb_config_t                      *tbcf;
    tb_key_conf_t                    *kc;
    ngx_http_tokenbiryani_account_t  *a;

    tbcf = tmcf->tbcf;
    a = tmcf->accounts.elts;

    if (tbcf->nkeys == 0) {
        return NGX_OK;
    }

    tmcf->pools = ngx_pcalloc(cf->pool, tbcf->nkeys * sizeof(u_char *));
    if (tmcf->pools == NULL) {
        return NGX_ERROR;
    }

    for (k = 0; k < tbcf->nkeys; k++) {
        kc = &tbcf->keys[k];

        if (kc->pool.n == 0) {
            continue;
        }

        tmcf->pools[k] = ngx_pcalloc(cf->pool, tmcf->max_accounts + 1);
        if (tmcf->pools[k] == NULL) {
            return NGX_ERROR;
        }

        for (i = 0; i < tmcf->accounts.nelts; i++) {
            for (j = 0; j < kc->pool.n; j++) {
                if (ngx_strcmp(kc->pool.items[j], a[i].conf->id) == 0) {
                    tmcf->pools[k][i] = 1;
                    break;
                }
            }
        }
    }

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_config_cleanup(void *data)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf = data;

    tb_keytab_free(&tmcf->keytab);
    tb_seal_key_wipe(&tmcf->seal);
    tb_rec_key_wipe(&tmcf->rec);
    tb_config_free(tmcf->tbcf);
    tmcf->tbcf = NULL;
}


static const char *
ngx_http_tokenbiryani_conf_getenv(const char *name)
{
    /*
     * The file is read by the master, whose environment is the one nginx
     * was started with: ${VAR} means that.
     */
    return getenv(name);
}


static ngx_int_t
ngx_http_tokenbiryani_add_account(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf, tb_account_conf_t *ac)
{
    ngx_int_t                              rc;
    ngx_url_t                              u;
    ngx_http_tokenbiryani_account_t       *a;
    ngx_http_tokenbiryani_zone_account_t  *za;
    char                                   err[NGX_MAX_ERROR_STR];

    a = ngx_array_push(&tmcf->accounts);
    za = ngx_array_push(&tmcf->zone.accounts);
    if (a == NULL || za == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(a, sizeof(ngx_http_tokenbiryani_account_t));
    ngx_memzero(za, sizeof(ngx_http_tokenbiryani_zone_account_t));

    a->index = tmcf->accounts.nelts - 1;

    rc = ngx_http_tokenbiryani_account_fill(cf->pool, a, ac, za->fingerprint,
                                            err, sizeof(err));
    if (rc == NGX_ABORT) {
        return NGX_ERROR;
    }

    if (rc != NGX_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: %V:%ui: account \"%s\": %s",
                           &tmcf->config_file, (ngx_uint_t) ac->line, ac->id,
                           err);
        return NGX_ERROR;
    }

    za->id = a->id.data;
    za->id_len = a->id.len;
    za->replenishment = ac->replenishment;
    za->domain = ac->capacity_domain;

    if (!a->supported) {
        return NGX_OK;
    }

    /* resolved once, like proxy_pass with a literal host */

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url.len = a->host_header.len;
    u.url.data = a->host_header.data;
    u.default_port = (in_port_t) (ac->tls ? 443 : 80);

    if (ngx_parse_url(cf->pool, &u) != NGX_OK || u.naddrs == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: %V:%ui: account \"%s\": cannot use "
                           "base_url host \"%s\": %s", &tmcf->config_file,
                           (ngx_uint_t) ac->line, ac->id, ac->host,
                           u.err ? u.err : "no address");
        return NGX_ERROR;
    }

    a->addrs = u.addrs;
    a->naddrs = u.naddrs;
    a->port = u.port;

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_config_bind(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_uint_t                             i;
    ngx_http_tokenbiryani_account_t       *a;
    ngx_http_tokenbiryani_zone_account_t  *za;

    a = tmcf->accounts.elts;
    za = tmcf->zone.accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (za[i].st == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                          "tokenbiryani: account \"%V\" has no slot in the "
                          "zone", &a[i].id);
            return NGX_ERROR;
        }

        a[i].sh = za[i].st;
        a[i].slot = za[i].slot;
    }

    return NGX_OK;
}


ngx_http_tokenbiryani_account_t *
ngx_http_tokenbiryani_account_by_slot(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_uint_t slot)
{
    ngx_uint_t                        i;
    ngx_http_tokenbiryani_account_t  *a;

    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (a[i].slot == slot && !a[i].retired) {
            return &a[i];
        }
    }

    return NULL;
}
