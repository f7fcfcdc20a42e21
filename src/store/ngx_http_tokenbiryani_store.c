/*
 * The durable store behind the zone: loaded by the master, written in the
 * thread pool (see ngx_http_tokenbiryani_store.h).
 */


#include "ngx_http_tokenbiryani.h"
#include "tb_racct.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "tb_keyspec.h"

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#include <malloc.h>
#endif


#define NGX_HTTP_TB_STORE_BUSY_MS      5000


#if (NGX_THREADS)

/* this worker's writer: one task, the jobs it runs and the ones waiting */
typedef struct {
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_thread_task_t                  *task;
    tb_store_t                         *db;         /* the thread's only */
    ngx_http_tokenbiryani_job_t        *running;    /* the thread's */
    ngx_http_tokenbiryani_job_t        *pending;
    ngx_http_tokenbiryani_job_t       **last;
    ngx_event_t                         flush;      /* every 100 ms */
    ngx_uint_t                          flushing;   /* a flush is posted */
} ngx_http_tokenbiryani_writer_t;


static ngx_http_tokenbiryani_writer_t  ngx_http_tokenbiryani_writer;


static void ngx_http_tokenbiryani_store_thread(void *data, ngx_log_t *log);
static void ngx_http_tokenbiryani_store_done(ngx_event_t *ev);
static void ngx_http_tokenbiryani_store_run(
    ngx_http_tokenbiryani_writer_t *w);
static void ngx_http_tokenbiryani_flush_timer(ngx_event_t *ev);
static void ngx_http_tokenbiryani_flushed(ngx_http_tokenbiryani_job_t *job);
static void ngx_http_tokenbiryani_flush_landed(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_job_t *job,
    ngx_log_t *log);
static void ngx_http_tokenbiryani_opened(ngx_http_tokenbiryani_job_t *job);

#endif


static int ngx_http_tokenbiryani_flush_exec(tb_store_t *db,
    ngx_http_tokenbiryani_job_t *job);
static int ngx_http_tokenbiryani_flush_spend(tb_store_t *db,
    ngx_http_tokenbiryani_job_t *job);

static void ngx_http_tokenbiryani_load_history(tb_store_t *db,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log);
static void ngx_http_tokenbiryani_load_spend(tb_store_t *db,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log);
static void ngx_http_tokenbiryani_load_settings(tb_store_t *db,
    ngx_http_tokenbiryani_store_load_t *ld);
static void ngx_http_tokenbiryani_store_adopted_back(tb_store_t *db,
    ngx_http_tokenbiryani_store_load_t *ld);
static const char *ngx_http_tokenbiryani_store_adopt(
    ngx_http_tokenbiryani_store_load_t *ld, int kind, const char *name,
    const u_char *digest, const char *sealed, const char *payload,
    size_t plen);


static ngx_int_t ngx_http_tokenbiryani_store_load(ngx_shm_zone_t *shm_zone,
    ngx_http_tokenbiryani_main_conf_t *tmcf);
static void ngx_http_tokenbiryani_store_own(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log);


ngx_int_t
ngx_http_tokenbiryani_store_conf(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *path)
{
    size_t  len;

#if (NGX_THREADS)
    /* "default": made with 32 threads unless thread_pool says otherwise */
    tmcf->thread_pool = ngx_thread_pool_add(cf, NULL);
    if (tmcf->thread_pool == NULL) {
        return NGX_ERROR;
    }
#else
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "tokenbiryani: %s: store.backend: sqlite writes in "
                       "nginx's thread pool, and this nginx is built without "
                       "threads (--with-threads)", tmcf->config_file.data);
    return NGX_ERROR;
#endif

    len = ngx_strlen(path);

    tmcf->store_path.data = ngx_pnalloc(cf->pool, len + 1);
    if (tmcf->store_path.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(tmcf->store_path.data, path, len + 1);
    tmcf->store_path.len = len;
    tmcf->store_shown = tmcf->store_path;
    tmcf->store_backend = NGX_HTTP_TB_STORE_SQLITE;

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_store_zone_init(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_tokenbiryani_zone_t  *ozone = data;

    ngx_uint_t                          fresh;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    /* the zone's handle is the first member of the main configuration */
    tmcf = shm_zone->data;

    fresh = !(ozone && ozone->sh) && !shm_zone->shm.exists;

    if (ngx_http_tokenbiryani_zone_init(shm_zone, data) != NGX_OK) {
        return NGX_ERROR;
    }

    /* the core configuration is complete here: the pid file is known */

    if (ngx_http_tokenbiryani_reloader_start(tmcf, shm_zone->shm.log)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        return NGX_OK;
    }

    if (tmcf->store_backend == NGX_HTTP_TB_STORE_SQLITE) {
        ngx_http_tokenbiryani_store_own(tmcf, shm_zone->shm.log);
    }

    if (!fresh) {
        /* a reload: the zone lived on, and it is the truth */
        return NGX_OK;
    }

    if (tmcf->store_ops) {
        return tmcf->store_ops->load(shm_zone, tmcf);
    }

    return ngx_http_tokenbiryani_store_load(shm_zone, tmcf);
}


/*
 * The store file and its -wal and -shm files are made 0600 and, when the
 * master runs as root, given to the workers' user; the -wal and -shm files
 * stay beside it (SQLITE_FCNTL_PERSIST_WAL), so no worker needs to create
 * a file in a directory it may not write.
 */

static void
ngx_http_tokenbiryani_store_own(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log)
{
    int               fd;
    ngx_uint_t        i;
    struct stat       st;
    ngx_core_conf_t  *ccf;
    u_char            path[NGX_MAX_PATH + 8];

    static const char  *suffix[] = { "", "-wal", "-shm" };

    if (tmcf->cycle == NULL || tmcf->store_path.len + 5 > NGX_MAX_PATH) {
        return;
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(tmcf->cycle->conf_ctx,
                                           ngx_core_module);

    for (i = 0; i < 3; i++) {
        ngx_sprintf(path, "%V%s%Z", &tmcf->store_path, suffix[i]);

        /* the file itself, never what a link there points at */

        fd = open((char *) path, O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC);

        if (fd == -1) {
            if (ngx_errno != NGX_ENOENT) {
                ngx_log_error(NGX_LOG_WARN, log, ngx_errno,
                              "tokenbiryani: \"%s\" is left as it is: it "
                              "cannot be opened as a file of its own (a "
                              "link is not followed)", path);
            }

            continue;
        }

        if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
            ngx_log_error(NGX_LOG_WARN, log, 0,
                          "tokenbiryani: \"%s\" is not a regular file: it is "
                          "left as it is", path);
            (void) close(fd);
            continue;
        }

        /* the history and what is sealed are nobody else's to read */

        if (fchmod(fd, 0600) == -1) {
            ngx_log_error(NGX_LOG_WARN, log, ngx_errno,
                          "tokenbiryani: chmod(\"%s\", 0600) failed", path);
        }

        if (geteuid() == 0 && ccf != NULL
            && ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT && ccf->user != 0
            && fchown(fd, ccf->user, ccf->group) == -1)
        {
            ngx_log_error(NGX_LOG_WARN, log, ngx_errno,
                          "tokenbiryani: chown(\"%s\") for the workers' "
                          "user failed: the store may not be writable by "
                          "them", path);
        }

        (void) close(fd);
    }
}


/* the master, before workers start: every minted key into the zone */


/*
 * An account added at runtime, into the new zone: its host resolved now
 * (the master, before any worker runs, as for the file's accounts), its
 * slot made from its credential and host.  One that cannot be opened or
 * resolved is said once and left out of routing, listed with the reason.
 */

int
ngx_http_tokenbiryani_store_load_account(void *data, const char *id,
    const char *spec, const char *sealed)
{
    ngx_http_tokenbiryani_store_load_t  *ld = data;

    u_char                               fingerprint[8];
    u_char                               placeholder[TB_ID_MAX + 16];
    u_char                               quarantined[
                                             TB_REC_ENVELOPE_LEN(TB_ID_MAX
                                                                 + 16) + 1];
    ngx_int_t                            rc;
    ngx_uint_t                           slot, zrc, legacy;
    ngx_pool_t                          *pool;
    tb_config_t                         *cf;
    ngx_http_tokenbiryani_account_t      a;
    ngx_http_tokenbiryani_racct_view_t   v;
    char                                 err[512];

    ngx_memzero(&v, sizeof(v));
    ngx_memzero(fingerprint, sizeof(fingerprint));

    v.id.data = (u_char *) id;
    v.id.len = ngx_strlen(id);
    v.spec.data = (u_char *) spec;
    v.spec.len = ngx_strlen(spec);
    v.sealed.data = (u_char *) sealed;
    v.sealed.len = ngx_strlen(sealed);

    if (v.id.len == 0 || v.id.len > TB_ID_MAX) {
        ngx_log_error(NGX_LOG_ERR, ld->log, 0,
                      "tokenbiryani: an account in the store has an id no "
                      "account can have, and is refused");
        ld->skipped++;
        return 0;
    }

    if (ngx_http_tokenbiryani_yaml_account(ld->tmcf, v.id.data, v.id.len)) {
        ngx_log_error(NGX_LOG_WARN, ld->log, 0,
                      "tokenbiryani: the account \"%s\" added at runtime is "
                      "left out: the YAML file has an account of that id",
                      id);
        ld->skipped++;
        return 0;
    }

    /*
     * Written by this gateway, its spec bound to its id and its sealed
     * credential: one that does not verify never enters the zone, which
     * every worker and the other instances take as checked.
     */

    legacy = 0;

    rc = ngx_http_tokenbiryani_record_check(ld->tmcf, ld->log,
                                            TB_REC_ACCOUNT, "account",
                                            v.id.data, v.id.len, sealed,
                                            v.sealed.len, v.spec.data,
                                            v.spec.len, &legacy);

    if (rc == NGX_ABORT) {
        /*
         * Written under another secret key (the key was changed): nothing
         * of its spec can be trusted.  It is listed by its id alone, not
         * serving, its credential saying why, until the operator gives it
         * again, whole.
         */

        ngx_snprintf(placeholder, sizeof(placeholder), "{\"id\":\"%s\"}%Z",
                     id);

        v.spec.data = quarantined;
        v.spec.len = tb_rec_wrap(&ld->tmcf->rec, TB_REC_ACCOUNT, id,
                                 v.id.len, sealed, v.sealed.len,
                                 tb_rec_next_gen(0,
                                            ngx_http_tokenbiryani_now_ms()),
                                 (char *) placeholder,
                                 ngx_strlen(placeholder),
                                 (char *) quarantined, sizeof(quarantined));
        if (v.spec.len == 0) {
            ld->skipped++;
            return 0;
        }

    } else if (rc != NGX_OK) {
        ld->skipped++;
        return 0;
    }

    if (legacy) {
        /* the API's rules first: nothing adopted that it would refuse */

        if (tb_racct_check(spec, v.spec.len, id, v.id.len,
                           ld->tmcf->tbcf->server_allow_private_hosts, err,
                           sizeof(err))
            != 0)
        {
            ngx_log_error(NGX_LOG_ERR, ld->log, 0,
                          "tokenbiryani: the account \"%s\" in the store is "
                          "refused: %s", id, err);
            ld->skipped++;
            return 0;
        }

        spec = ngx_http_tokenbiryani_store_adopt(ld, TB_REC_ACCOUNT, id, NULL,
                                                 sealed, spec, v.spec.len);
        if (spec == NULL) {
            return -1;
        }

        v.spec.data = (u_char *) spec;
        v.spec.len = ngx_strlen(spec);
    }

    pool = ngx_create_pool(1024, ld->log);
    if (pool == NULL) {
        return -1;
    }

    cf = ngx_http_tokenbiryani_racct_open(ld->tmcf, &v.id, &v.spec,
                                          &v.sealed, err, sizeof(err));
    if (cf == NULL) {
        ngx_log_error(NGX_LOG_ERR, ld->log, 0,
                      "tokenbiryani: the account \"%s\" added at runtime "
                      "does not serve: %s", id, err);
        ld->skipped++;

    } else {
        ngx_memzero(&a, sizeof(a));

        rc = ngx_http_tokenbiryani_account_fill(pool, &a, &cf->accounts[0],
                                                fingerprint, err,
                                                sizeof(err));
        if (rc == NGX_OK) {
            v.naddrs = ngx_http_tokenbiryani_resolve_host(cf->accounts[0].host,
                           (in_port_t) cf->accounts[0].port, v.addrs,
                           NGX_HTTP_TB_RACCT_ADDRS, err, sizeof(err));
        }

        if (rc == NGX_OK && v.naddrs
            && ngx_http_tokenbiryani_racct_private(ld->tmcf, v.addrs,
                                                   v.naddrs))
        {
            ngx_snprintf((u_char *) err, sizeof(err), "its host resolves to "
                         "a loopback, link-local or private address "
                         "(server.allow_private_hosts)%Z");
            v.naddrs = 0;
        }

        if (rc != NGX_OK || v.naddrs == 0) {
            ngx_log_error(NGX_LOG_ERR, ld->log, 0,
                          "tokenbiryani: the account \"%s\" added at "
                          "runtime does not serve: %s", id,
                          rc == NGX_ABORT ? "no memory" : err);
            ld->skipped++;
        }

        ngx_explicit_memzero(a.auth_header.data, a.auth_header.len);
    }

    zrc = ngx_http_tokenbiryani_racct_put(&ld->tmcf->zone, &v, fingerprint,
              cf ? cf->accounts[0].replenishment : 0, 1,
              ld->tmcf->max_accounts - ld->tmcf->nyaml, &slot);

    if (cf) {
        tb_config_free(cf);
    }

    ngx_destroy_pool(pool);

    switch (zrc) {

    case NGX_HTTP_TB_RKEY_OK:
        ld->accounts++;
        return 0;

    case NGX_HTTP_TB_RKEY_FULL:
        ngx_log_error(NGX_LOG_ERR, ld->log, 0,
                      "tokenbiryani: the account \"%s\" added at runtime is "
                      "left out: tokenbiryani_max_accounts (%ui) are there",
                      id, ld->tmcf->max_accounts);
        ld->skipped++;
        return 0;

    case NGX_HTTP_TB_RKEY_NOMEM:
        ngx_log_error(NGX_LOG_EMERG, ld->log, 0,
                      "tokenbiryani: the zone is too small for the store's "
                      "accounts: make tokenbiryani_zone larger");
        return -1;

    default:
        return 0;
    }
}


/*
 * A record written before records were authenticated, adopted: its
 * envelope made now, and remembered to be written back.  NULL: no memory.
 */
static const char *
ngx_http_tokenbiryani_store_adopt(ngx_http_tokenbiryani_store_load_t *ld,
    int kind, const char *name, const u_char *digest, const char *sealed,
    const char *payload, size_t plen)
{
    size_t                            size, nlen;
    ngx_http_tokenbiryani_adopted_t  *ad;

    nlen = ngx_strlen(name);
    size = TB_REC_ENVELOPE_LEN(plen) + 1;

    ad = ngx_alloc(sizeof(ngx_http_tokenbiryani_adopted_t) + nlen + 1
                   + (sealed ? ngx_strlen(sealed) + 1 : 0) + size, ld->log);
    if (ad == NULL) {
        return NULL;
    }

    ngx_memzero(ad, sizeof(ngx_http_tokenbiryani_adopted_t));

    ad->kind = kind;
    ad->name = (char *) (ad + 1);
    ngx_memcpy(ad->name, name, nlen + 1);
    ad->value = ad->name + nlen + 1;

    if (sealed) {
        ad->sealed = ad->value;
        ngx_memcpy(ad->sealed, sealed, ngx_strlen(sealed) + 1);
        ad->value = ad->sealed + ngx_strlen(sealed) + 1;
    }

    if (digest) {
        ngx_memcpy(ad->digest, digest, 32);
    }

    if (tb_rec_wrap(&ld->tmcf->rec, kind, name, nlen,
                    digest ? (const void *) digest : (const void *) sealed,
                    digest ? 32 : (sealed ? ngx_strlen(sealed) : 0),
                    tb_rec_next_gen(0, ngx_http_tokenbiryani_now_ms()),
                    payload, plen, ad->value, size)
        == 0)
    {
        ngx_free(ad);
        return NULL;
    }

    ngx_log_error(NGX_LOG_WARN, ld->log, 0,
                  "tokenbiryani: %s \"%s\", written without authentication, "
                  "is adopted (store.adopt_unauthenticated) and written back "
                  "authenticated", kind == TB_REC_KEY ? "the key"
                  : kind == TB_REC_ACCOUNT ? "the account" : "the setting",
                  name);

    ad->next = ld->adopted;
    ld->adopted = ad;

    return ad->value;
}


void
ngx_http_tokenbiryani_store_adopted_free(
    ngx_http_tokenbiryani_store_load_t *ld, ngx_uint_t written)
{
    ngx_http_tokenbiryani_adopted_t  *ad, *next;

    if (written) {
        ngx_log_error(NGX_LOG_NOTICE, ld->log, 0,
                      "tokenbiryani: %ui records written without "
                      "authentication were adopted and written back "
                      "authenticated: store.adopt_unauthenticated can be "
                      "removed", written);
    }

    for (ad = ld->adopted; ad; ad = next) {
        next = ad->next;
        ngx_free(ad);
    }

    ld->adopted = NULL;
}


int
ngx_http_tokenbiryani_store_load_key(void *data, const char *name,
    const unsigned char *digest, const char *spec)
{
    ngx_http_tokenbiryani_store_load_t  *ld = data;

    size_t        nlen, plen;
    ngx_uint_t    rc, legacy;
    const char   *payload;
    tb_keyspec_t  ks;
    char          err[256];

    nlen = ngx_strlen(name);
    legacy = 0;

    /* written by this gateway, bound to its name and digest */

    if (ngx_http_tokenbiryani_record_check(ld->tmcf, ld->log, TB_REC_KEY,
                                           "key", (u_char *) name, nlen,
                                           digest, 32, (u_char *) spec,
                                           ngx_strlen(spec), &legacy)
        != NGX_OK)
    {
        ld->skipped++;
        return 0;
    }

    payload = tb_rec_payload(spec, ngx_strlen(spec), &plen, NULL);

    /* and held to the admin API's rules again */

    if (!tb_keyspec_valid_name(name, nlen)) {
        ngx_cpystrn((u_char *) err, (u_char *) "not a name a key can have",
                    sizeof(err));
        goto unreadable;
    }

    if (tb_keyspec_parse(&ks, payload, plen, TB_KEYSPEC_STORED, NULL, NULL,
                         0, err, sizeof(err))
        != 0)
    {
        goto unreadable;
    }

    rc = (ngx_strcmp(ks.conf.name, name) == 0);

    tb_keyspec_free(&ks);

    if (!rc) {
        ngx_cpystrn((u_char *) err, (u_char *) "its spec names another key",
                    sizeof(err));
        goto unreadable;
    }

    /* a key the file defines since it was minted: the file's wins */

    if (ngx_http_tokenbiryani_yaml_key(ld->tmcf, (u_char *) name, nlen)) {
        ngx_log_error(NGX_LOG_WARN, ld->log, 0,
                      "tokenbiryani: the minted key \"%s\" is left out: the "
                      "YAML file has a key of that name", name);
        ld->skipped++;
        return 0;
    }

    if (legacy) {
        spec = ngx_http_tokenbiryani_store_adopt(ld, TB_REC_KEY, name, digest,
                                                 NULL, payload, plen);
        if (spec == NULL) {
            return -1;
        }
    }

    rc = ngx_http_tokenbiryani_rkey_put(&ld->tmcf->zone, (u_char *) name,
                                        nlen, digest, (u_char *) spec,
                                        ngx_strlen(spec));
    if (rc == NGX_HTTP_TB_RKEY_NOMEM) {
        ngx_log_error(NGX_LOG_EMERG, ld->log, 0,
                      "tokenbiryani: the zone is too small for the store's "
                      "keys: make tokenbiryani_zone larger");
        return -1;
    }

    ld->keys++;

    return 0;

unreadable:

    ngx_log_error(NGX_LOG_ERR, ld->log, 0,
                  "tokenbiryani: the store's key \"%s\" is unreadable and "
                  "left out: %s", name, err);
    ld->skipped++;

    return 0;
}


/* the records adopted at load, written back in their envelopes */
static void
ngx_http_tokenbiryani_store_adopted_back(tb_store_t *db,
    ngx_http_tokenbiryani_store_load_t *ld)
{
    int                               rc;
    ngx_uint_t                        n;
    ngx_http_tokenbiryani_adopted_t  *ad;

    n = 0;

    for (ad = ld->adopted; ad; ad = ad->next) {
        switch (ad->kind) {

        case TB_REC_KEY:
            rc = tb_store_key_update(db, ad->name, ad->value);
            break;

        case TB_REC_ACCOUNT:
            rc = tb_store_account_put(db, ad->name, ad->value, ad->sealed, 0);
            break;

        default:
            rc = tb_store_meta_put(db, ad->name, ad->value);
            break;
        }

        if (rc != TB_STORE_OK) {
            ngx_log_error(NGX_LOG_WARN, ld->log, 0,
                          "tokenbiryani: \"%s\", adopted, could not be "
                          "written back (%s): it is adopted again at the "
                          "next start while store.adopt_unauthenticated is "
                          "set", ad->name, tb_store_error(db));
            continue;
        }

        n++;
    }

    ngx_http_tokenbiryani_store_adopted_free(ld, n);
}


static ngx_int_t
ngx_http_tokenbiryani_store_load(ngx_shm_zone_t *shm_zone,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    tb_store_t                          *db;
    ngx_http_tokenbiryani_store_load_t   ld;
    char                           err[NGX_MAX_ERROR_STR];

    db = tb_store_open((char *) tmcf->store_path.data,
                       NGX_HTTP_TB_STORE_BUSY_MS, err, sizeof(err));
    if (db == NULL) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "tokenbiryani: %s", err);
        return NGX_ERROR;
    }

    ngx_memzero(&ld, sizeof(ld));
    ld.tmcf = tmcf;
    ld.log = shm_zone->shm.log;

    if (tb_store_keys(db, ngx_http_tokenbiryani_store_load_key, &ld)
        != TB_STORE_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "tokenbiryani: %s", tb_store_error(db));
        ngx_http_tokenbiryani_store_adopted_free(&ld, 0);
        tb_store_close(db);
        return NGX_ERROR;
    }

    if (tb_store_accounts(db, ngx_http_tokenbiryani_store_load_account, &ld)
        != TB_STORE_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "tokenbiryani: %s", tb_store_error(db));
        ngx_http_tokenbiryani_store_adopted_free(&ld, 0);
        tb_store_close(db);
        return NGX_ERROR;
    }

    ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                  "tokenbiryani: the store \"%V\" loaded: %ui minted keys, "
                  "%ui accounts%s", &tmcf->store_path, ld.keys, ld.accounts,
                  ld.skipped ? " (some left out, see above)" : "");

    ngx_http_tokenbiryani_load_settings(db, &ld);
    ngx_http_tokenbiryani_store_adopted_back(db, &ld);
    ngx_http_tokenbiryani_load_history(db, tmcf, shm_zone->shm.log);
    ngx_http_tokenbiryani_load_spend(db, tmcf, shm_zone->shm.log);

    tb_store_close(db);

    return NGX_OK;
}


#if (NGX_THREADS)

ngx_int_t
ngx_http_tokenbiryani_store_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_thread_task_t               *task;
    ngx_http_tokenbiryani_job_t     *job;
    ngx_http_tokenbiryani_writer_t  *w;

    if (tmcf->thread_pool == NULL) {
        return NGX_OK;
    }

    w = &ngx_http_tokenbiryani_writer;

    task = ngx_thread_task_alloc(cycle->pool, 0);
    if (task == NULL) {
        return NGX_ERROR;
    }

    task->handler = ngx_http_tokenbiryani_store_thread;
    task->ctx = w;
    task->event.handler = ngx_http_tokenbiryani_store_done;
    task->event.data = w;
    task->event.log = cycle->log;

    w->tmcf = tmcf;
    w->task = task;
    w->last = &w->pending;

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        return NGX_OK;
    }

    /* the history: written by one worker, elected, every second */

    w->flush.handler = ngx_http_tokenbiryani_flush_timer;
    w->flush.data = tmcf;      /* nginx's debug log reads it as a connection */
    w->flush.log = cycle->log;
    w->flush.cancelable = 1;

    ngx_add_timer(&w->flush, NGX_HTTP_TB_FLUSH_TICK_MS);

    if (tmcf->store_ops) {
        return tmcf->store_ops->init_worker(cycle, tmcf);
    }

    /*
     * SQLite runs in whichever of the pool's threads takes the task, and
     * glibc gives each thread that allocates an arena of its own (up to
     * eight per core): what SQLite freed in one was kept there, out of
     * reach of the others, and the writing worker grew by some MB a minute
     * for minutes (issue 30: 44 MB against 7 for the other worker; 14 MB
     * with one arena).  One task runs at a time: one arena serves them all.
     */
    (void) mallopt(M_ARENA_MAX, 1);

    /*
     * The worker's connection, opened now and kept: a store that cannot
     * be opened is said at once, and while a worker holds the file open,
     * another process closing it (an operator's sqlite3, a backup) is
     * never its last connection, which would remove the -wal and -shm
     * files a worker may not be allowed to make again.
     */

    job = ngx_calloc(sizeof(ngx_http_tokenbiryani_job_t), cycle->log);
    if (job == NULL) {
        return NGX_ERROR;
    }

    job->op = NGX_HTTP_TB_JOB_OPEN;
    job->done = ngx_http_tokenbiryani_opened;
    job->data = w;

    (void) ngx_http_tokenbiryani_store_post(tmcf, job);

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_opened(ngx_http_tokenbiryani_job_t *job)
{
    if (job->rc != TB_STORE_OK) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the store is not open in this worker "
                      "yet (it is tried again with each write): %s",
                      job->err);
    }

    ngx_free(job);
}


static void
ngx_http_tokenbiryani_flush_timer(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_job_t     *job;
    ngx_http_tokenbiryani_writer_t  *w;

    w = &ngx_http_tokenbiryani_writer;

    if (!w->flushing
        && ngx_http_tokenbiryani_store_flusher(&w->tmcf->zone, ngx_pid))
    {
        job = ngx_http_tokenbiryani_flush_collect(w->tmcf, 1);

        if (job) {
            job->done = ngx_http_tokenbiryani_flushed;
            job->data = w;
            w->flushing = 1;

            (void) ngx_http_tokenbiryani_store_post(w->tmcf, job);
        }
    }

    ngx_add_timer(ev, NGX_HTTP_TB_FLUSH_TICK_MS);
}


static void
ngx_http_tokenbiryani_flushed(ngx_http_tokenbiryani_job_t *job)
{
    ngx_http_tokenbiryani_writer_t *w = job->data;

    if (job->rc == TB_STORE_OK) {
        ngx_http_tokenbiryani_flush_landed(w->tmcf, job, ngx_cycle->log);
    }

    w->flushing = 0;

    ngx_http_tokenbiryani_flush_release(job);
}


/*
 * A flush the store took: the zone's history is written up to where the
 * store says, or, when the store had less than the zone knew it wrote
 * (Redis restarted empty, or restored from an older copy), the zone goes
 * back to there and writes again what it still holds - the usage of what
 * it no longer holds is lost, which the log and /admin/status say.
 */
static void
ngx_http_tokenbiryani_flush_landed(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_job_t *job, ngx_log_t *log)
{
    int64_t                               now;
    ngx_http_tokenbiryani_store_state_t   st;

    now = ngx_http_tokenbiryani_now_ms();

    if (!job->rewind) {
        ngx_http_tokenbiryani_store_flushed(&tmcf->zone, job->records_seq,
                                            job->events_seq, job->spend_seq,
                                            now);
        return;
    }

    ngx_http_tokenbiryani_store_rewind(&tmcf->zone, job->records_seq,
                                       job->events_seq, now);
    ngx_http_tokenbiryani_store_snapshot(&tmcf->zone, &st);

    ngx_log_error(NGX_LOG_WARN, log, 0,
                  "tokenbiryani: the store %V had less of this instance's "
                  "history than it wrote (restarted empty, or restored): "
                  "the %uL requests it still holds are written again, their "
                  "usage and the spend ledgers with them; %uL older requests "
                  "are gone from the usage history", &tmcf->store_shown,
                  st.rewound_again, st.rewound_lost);
}


void
ngx_http_tokenbiryani_store_exit_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    tb_store_t                               *db;
    ngx_http_tokenbiryani_job_t              *job;
    const ngx_http_tokenbiryani_store_ops_t  *ops;
    char                                      err[NGX_MAX_ERROR_STR];

    /*
     * nginx's thread pool has finished its tasks by now (its module exits
     * first); what the last flush left is written here, the worker's last
     * act, so a graceful stop loses no history
     */

    if (tmcf->store_ops) {
        ops = tmcf->store_ops;

        if (ngx_http_tokenbiryani_store_flusher(&tmcf->zone, ngx_pid)) {
            job = ngx_http_tokenbiryani_flush_collect(tmcf, 0);

            if (job && ops->flush_now(tmcf, job) == TB_STORE_OK) {
                ngx_http_tokenbiryani_flush_landed(tmcf, job, cycle->log);

            } else if (job) {
                ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                              "tokenbiryani: the last history of this "
                              "worker is not written: %s", job->err);
            }

            ngx_http_tokenbiryani_flush_release(job);
        }

        ops->exit_worker(cycle, tmcf);
        return;
    }

    if (!ngx_http_tokenbiryani_store_on(tmcf)
        || !ngx_http_tokenbiryani_store_flusher(&tmcf->zone, ngx_pid))
    {
        return;
    }

    job = ngx_http_tokenbiryani_flush_collect(tmcf, 0);

    if (job) {
        db = tb_store_open((char *) tmcf->store_path.data,
                           NGX_HTTP_TB_STORE_BUSY_MS, err, sizeof(err));

        if (db == NULL) {
            ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                          "tokenbiryani: the last history of this worker is "
                          "not written: %s", err);

        } else {
            if (ngx_http_tokenbiryani_flush_exec(db, job) == TB_STORE_OK) {
                ngx_http_tokenbiryani_store_flushed(&tmcf->zone,
                    job->records_seq, job->events_seq, job->spend_seq,
                    ngx_http_tokenbiryani_now_ms());

            } else {
                ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                              "tokenbiryani: the last history of this "
                              "worker is not written: %s", job->err);
            }

            tb_store_close(db);
        }

        ngx_http_tokenbiryani_flush_release(job);
    }

    /* another worker (of the next generation) writes from now on */
    ngx_http_tokenbiryani_store_unelect(&tmcf->zone, ngx_pid);
}


ngx_int_t
ngx_http_tokenbiryani_record_wrap(ngx_pool_t *pool,
    ngx_http_tokenbiryani_main_conf_t *tmcf, int kind, const u_char *name,
    size_t nlen, const void *bound, size_t blen, const u_char *payload,
    size_t plen, ngx_str_t *out)
{
    size_t    size;
    uint64_t  gen;

    if (!ngx_http_tokenbiryani_store_on(tmcf) || !tmcf->rec.set) {
        out->data = ngx_pnalloc(pool, plen + 1);
        if (out->data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(out->data, payload, plen);
        out->data[plen] = '\0';
        out->len = plen;

        return NGX_OK;
    }

    gen = tb_rec_next_gen(ngx_http_tokenbiryani_record_gen(&tmcf->zone, kind,
                                                          name, nlen),
                          ngx_http_tokenbiryani_now_ms());

    size = TB_REC_ENVELOPE_LEN(plen) + 1;

    out->data = ngx_pnalloc(pool, size);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    out->len = tb_rec_wrap(&tmcf->rec, kind, (const char *) name, nlen,
                           bound, blen, gen, (const char *) payload, plen,
                           (char *) out->data, size);

    return out->len ? NGX_OK : NGX_ERROR;
}


ngx_int_t
ngx_http_tokenbiryani_record_check(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log, int kind, const char *what, const u_char *name,
    size_t nlen, const void *bound, size_t blen, const u_char *text,
    size_t len, ngx_uint_t *legacy)
{
    size_t        plen;
    uint64_t      gen;
    tb_rec_rc_e   rc;
    const char   *payload;

    rc = tb_rec_open(&tmcf->rec, kind, (const char *) name, nlen, bound, blen,
                     (const char *) text, len, &gen, &payload, &plen);

    if (rc == TB_REC_OK) {
        return NGX_OK;
    }

    if (rc == TB_REC_LEGACY && legacy
        && tmcf->tbcf->store_adopt_unauthenticated)
    {
        *legacy = 1;
        return NGX_OK;
    }

    if (rc == TB_REC_OTHER_KEY && kind == TB_REC_ACCOUNT && legacy) {
        /* listed by its id alone, its credential saying why (the load) */
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        return NGX_ABORT;
    }

    ngx_log_error(NGX_LOG_ERR, log, 0,
                  "tokenbiryani: %s \"%*s\" in the store is refused: %s%s",
                  what, nlen, name, tb_rec_strerror(rc),
                  rc == TB_REC_LEGACY && legacy
                  ? " (store.adopt_unauthenticated: true adopts such records "
                    "at the next start, once they are checked)"
                  : rc == TB_REC_OTHER_KEY
                  ? " (start with the secret key it was written under)"
                  : "");

    ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);

    return NGX_DECLINED;
}


ngx_int_t
ngx_http_tokenbiryani_store_post(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_job_t *job)
{
    ngx_http_tokenbiryani_writer_t  *w;

    if (tmcf->store_ops && job->op != NGX_HTTP_TB_JOB_RESOLVE) {
        return tmcf->store_ops->post(tmcf, job);
    }

    w = &ngx_http_tokenbiryani_writer;

    if (w->task == NULL) {
        return NGX_ERROR;
    }

    job->next = NULL;
    job->rc = TB_STORE_ERROR;
    job->err[0] = '\0';
    job->posted = ngx_current_msec;

    *w->last = job;
    w->last = &job->next;

    if (w->running == NULL) {
        ngx_http_tokenbiryani_store_run(w);
    }

    return NGX_OK;
}


/* every job waiting goes to the thread as one task */
static void
ngx_http_tokenbiryani_store_run(ngx_http_tokenbiryani_writer_t *w)
{
    ngx_http_tokenbiryani_job_t  *job;

    if (w->pending == NULL) {
        return;
    }

    w->running = w->pending;
    w->pending = NULL;
    w->last = &w->pending;

    if (ngx_thread_task_post(w->tmcf->thread_pool, w->task) == NGX_OK) {
        return;
    }

    /* the pool's queue is full: these fail now, from the event loop */

    for (job = w->running; job; job = job->next) {
        ngx_cpystrn((u_char *) job->err,
                    (u_char *) "the thread pool's queue is full", 
                    sizeof(job->err));
    }

    ngx_post_event(&w->task->event, &ngx_posted_events);
}


/* in the store's thread: a bucket read, kept (malloc: no pool here) */
static int
ngx_http_tokenbiryani_usage_point(void *data, int64_t t, const char *group,
    const tb_usage_row_t *u)
{
    ngx_http_tokenbiryani_job_t *job = data;

    size_t                                n;
    ngx_http_tokenbiryani_usage_point_t  *p;

    if (job->npoints == job->points_size) {
        n = job->points_size ? job->points_size * 2 : 256;

        if (n > 200000) {
            /* more than any range asks for: the rest is left out */
            return 1;
        }

        p = realloc(job->points, n * sizeof(*p));
        if (p == NULL) {
            return 1;
        }

        job->points = p;
        job->points_size = n;
    }

    p = &job->points[job->npoints++];
    p->t = t;
    ngx_cpystrn((u_char *) p->group, (u_char *) (group ? group : ""),
                sizeof(p->group));
    p->u = *u;

    return 0;
}


static void
ngx_http_tokenbiryani_store_thread(void *data, ngx_log_t *log)
{
    ngx_http_tokenbiryani_writer_t *w = data;

    int                           rc;
    ngx_http_tokenbiryani_job_t  *job;
    char                          err[512];

    err[0] = '\0';

    for (job = w->running; job; job = job->next) {
        if (job->op == NGX_HTTP_TB_JOB_RESOLVE) {
            job->naddrs = ngx_http_tokenbiryani_resolve_host(job->name,
                              job->port, job->addrs, job->naddrs, job->err,
                              sizeof(job->err));
            /* not the store's failure: TB_STORE_NONE, with err */
            job->rc = job->naddrs ? TB_STORE_OK : TB_STORE_NONE;
            continue;
        }

        if (w->db == NULL && err[0] == '\0') {
            w->db = tb_store_open((char *) w->tmcf->store_path.data,
                                  NGX_HTTP_TB_STORE_BUSY_MS, err,
                                  sizeof(err));
        }

        if (w->db == NULL) {
            job->rc = TB_STORE_ERROR;
            ngx_cpystrn((u_char *) job->err, (u_char *) err,
                        sizeof(job->err));
            continue;
        }

        switch (job->op) {

        case NGX_HTTP_TB_JOB_KEY_INSERT:
            rc = tb_store_key_insert(w->db, job->name, job->digest,
                                     job->spec);
            break;

        case NGX_HTTP_TB_JOB_KEY_UPDATE:
            rc = tb_store_key_update(w->db, job->name, job->spec);
            break;

        case NGX_HTTP_TB_JOB_KEY_DELETE:
            rc = tb_store_key_delete(w->db, job->name);
            break;

        case NGX_HTTP_TB_JOB_SETTING:
            rc = tb_store_meta_put(w->db, job->name, job->spec);
            break;

        case NGX_HTTP_TB_JOB_ACCOUNT_PUT:
            rc = tb_store_account_put(w->db, job->name, job->spec,
                                      job->sealed, (int) job->create);
            break;

        case NGX_HTTP_TB_JOB_ACCOUNT_DELETE:
            rc = tb_store_account_delete(w->db, job->name);
            break;

        case NGX_HTTP_TB_JOB_OPEN:
            rc = TB_STORE_OK;
            break;

        case NGX_HTTP_TB_JOB_USAGE:
            rc = tb_store_usage(w->db, job->usage_from, job->usage_step,
                                job->usage_by, ngx_http_tokenbiryani_usage_point,
                                job);
            break;

        default: /* NGX_HTTP_TB_JOB_FLUSH */
            rc = ngx_http_tokenbiryani_flush_exec(w->db, job);
            break;
        }

        job->rc = rc;

        if (rc == TB_STORE_ERROR) {
            ngx_cpystrn((u_char *) job->err,
                        (u_char *) tb_store_error(w->db), sizeof(job->err));
        }
    }

    /*
     * A store that failed is opened afresh next time: it may be another
     * file by then (restored from a backup, the disk remounted).  Not one
     * another process holds locked: closing it could leave that process
     * the file's last connection, which removes the -wal and -shm files
     * this one needs and may not be allowed to make again.
     */

    for (job = w->running; job; job = job->next) {
        if (job->rc == TB_STORE_ERROR && w->db && !tb_store_busy(w->db)) {
            tb_store_close(w->db);
            w->db = NULL;
            break;
        }
    }
}


static void
ngx_http_tokenbiryani_store_done(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_writer_t *w = ev->data;

    const char                   *err;
    ngx_uint_t                    wrote;
    ngx_http_tokenbiryani_job_t  *job, *next;

    err = NULL;
    wrote = 0;

    for (job = w->running; job; job = job->next) {
        if (job->op == NGX_HTTP_TB_JOB_RESOLVE
            || job->op == NGX_HTTP_TB_JOB_USAGE
            || job->op == NGX_HTTP_TB_JOB_OPEN)
        {
            /* not a write */
            continue;
        }

        wrote = 1;

        if (job->rc == TB_STORE_ERROR) {
            err = job->err;
            break;
        }
    }

    if (wrote) {
        ngx_http_tokenbiryani_store_wrote(w->tmcf, err, ev->log);
    }

    job = w->running;
    w->running = NULL;

    for ( /* void */ ; job; job = next) {
        next = job->next;
        job->done(job);
    }

    ngx_http_tokenbiryani_store_run(w);
}

#else

ngx_int_t
ngx_http_tokenbiryani_store_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    return NGX_OK;
}


void
ngx_http_tokenbiryani_store_exit_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
}


ngx_int_t
ngx_http_tokenbiryani_store_post(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_job_t *job)
{
    return NGX_ERROR;
}

#endif




/*
 * In the flush's transaction: each record's usage into its minute of the
 * usage history, the ledgers and conversations charged since the last
 * write, and once an hour the history rolled up and the oldest pruned.
 */

static int
ngx_http_tokenbiryani_flush_spend(tb_store_t *db,
    ngx_http_tokenbiryani_job_t *job)
{
    ngx_uint_t                             i;
    const char                            *acct;
    tb_usage_row_t                         u;
    ngx_http_tokenbiryani_record_t        *rec;
    ngx_http_tokenbiryani_ledger_view_t   *lv;
    ngx_http_tokenbiryani_session_view_t  *sv;
    u_char                                 id[32], *p;

    for (i = 0; i < job->nrecords; i++) {
        rec = &job->records[i];

        acct = ngx_http_tokenbiryani_record_usage(job, rec, &u);

        if (tb_store_usage_add(db, 60,
                               (rec->started_ms + rec->latency_ms) / 60000
                               * 60, acct, rec->model, rec->key, &u)
            != TB_STORE_OK)
        {
            return TB_STORE_ERROR;
        }
    }

    for (i = 0; i < job->nledgers; i++) {
        lv = &job->ledgers[i];

        if (lv->kind == NGX_HTTP_TB_LEDGER_ACCOUNT) {
            if (lv->id >= job->nslots || job->slot_ids[lv->id][0] == '\0') {
                continue;
            }

            if (tb_store_ledger_put(db, NGX_HTTP_TB_LEDGER_ACCOUNT,
                                    (char *) job->slot_ids[lv->id],
                                    &lv->ledger, sizeof(tb_ledger_t))
                != TB_STORE_OK)
            {
                return TB_STORE_ERROR;
            }

            continue;
        }

        p = ngx_sprintf(id, "%016uxL", lv->id);
        *p = '\0';

        if (tb_store_ledger_put(db, NGX_HTTP_TB_LEDGER_KEY, (char *) id,
                                &lv->ledger, sizeof(tb_ledger_t))
            != TB_STORE_OK)
        {
            return TB_STORE_ERROR;
        }
    }

    for (i = 0; i < job->nsessions; i++) {
        sv = &job->sessions[i];

        p = ngx_sprintf(id, "%016uxL", sv->session);
        *p = '\0';

        /* its account by id: slots are this zone's */
        if (sv->slot >= 0 && (ngx_uint_t) sv->slot < job->nslots) {
            ngx_cpystrn(sv->account, job->slot_ids[sv->slot], TB_ID_MAX + 1);
        }

        if (tb_store_session_put(db, (char *) id, (char *) sv->key,
                                 sv->last_ms, sv, sizeof(*sv))
            != TB_STORE_OK)
        {
            return TB_STORE_ERROR;
        }
    }

    if (!job->rollup) {
        return TB_STORE_OK;
    }

    /* conversations silent for 90 days go, and all but the newest kept */

    if (tb_store_sessions_prune(db, job->now_ms - 90LL * 86400000,
                                NGX_HTTP_TB_SESSIONS)
        != TB_STORE_OK)
    {
        return TB_STORE_ERROR;
    }

    return tb_store_usage_rollup(db, job->now_ms / 1000);
}


/* one transaction: the slots' ids, the history, the oldest pruned */
static int
ngx_http_tokenbiryani_flush_exec(tb_store_t *db,
    ngx_http_tokenbiryani_job_t *job)
{
    ngx_uint_t                       i;
    ngx_http_tokenbiryani_record_t  *rec;
    u_char                           layout[128];

    ngx_http_tokenbiryani_history_layout(layout, sizeof(layout));

    if (tb_store_begin(db) != TB_STORE_OK) {
        goto failed;
    }

    if (tb_store_meta_put(db, "history_layout", (char *) layout)
        != TB_STORE_OK)
    {
        goto failed;
    }

    for (i = 0; i < job->nslots; i++) {
        if (job->slot_ids[i][0]
            && tb_store_slot_put(db, i, (char *) job->slot_ids[i])
               != TB_STORE_OK)
        {
            goto failed;
        }
    }

    for (i = 0; i < job->nrecords; i++) {
        rec = &job->records[i];

        if (tb_store_history_put(db, TB_STORE_RECORDS, rec->seq, rec,
                offsetof(ngx_http_tokenbiryani_record_t, cands)
                + ngx_min(rec->ncands, NGX_HTTP_TB_INSPECT_CANDS)
                  * sizeof(ngx_http_tokenbiryani_inspect_cand_t))
            != TB_STORE_OK)
        {
            goto failed;
        }
    }

    for (i = 0; i < job->nevents; i++) {
        if (tb_store_history_put(db, TB_STORE_EVENTS, job->events[i].seq,
                                 &job->events[i],
                                 sizeof(ngx_http_tokenbiryani_event_t))
            != TB_STORE_OK)
        {
            goto failed;
        }
    }

    if (ngx_http_tokenbiryani_flush_spend(db, job) != TB_STORE_OK) {
        goto failed;
    }

    if (tb_store_history_prune(db, TB_STORE_RECORDS, job->keep_records)
        != TB_STORE_OK
        || tb_store_history_prune(db, TB_STORE_EVENTS, job->keep_events)
           != TB_STORE_OK
        || tb_store_commit(db) != TB_STORE_OK)
    {
        goto failed;
    }

    return TB_STORE_OK;

failed:

    ngx_cpystrn((u_char *) job->err, (u_char *) tb_store_error(db),
                sizeof(job->err));
    tb_store_rollback(db);

    return TB_STORE_ERROR;
}


/* the master: history read back, its slots mapped onto this zone's */

int
ngx_http_tokenbiryani_store_hload_slot(void *data, uint64_t slot,
    const char *id)
{
    ngx_http_tokenbiryani_hload_t *hl = data;

    if (slot < hl->nmap) {
        hl->map[slot] = ngx_http_tokenbiryani_zone_slot_of(&hl->tmcf->zone,
                            (u_char *) id, ngx_strlen(id));
    }

    return 0;
}


static int64_t
ngx_http_tokenbiryani_hload_map(ngx_http_tokenbiryani_hload_t *hl,
    int64_t slot)
{
    return (slot >= 0 && (uint64_t) slot < hl->nmap) ? hl->map[slot] : -1;
}


int
ngx_http_tokenbiryani_store_hload_record(void *data, uint64_t seq,
    const void *blob, size_t len)
{
    ngx_http_tokenbiryani_hload_t *hl = data;

    ngx_uint_t                      i;
    ngx_http_tokenbiryani_record_t  rec;

    if (len < offsetof(ngx_http_tokenbiryani_record_t, cands)
        || len > sizeof(ngx_http_tokenbiryani_record_t))
    {
        return 0;
    }

    ngx_memzero(&rec, sizeof(rec));
    ngx_memcpy(&rec, blob, len);

    rec.seq = seq;
    rec.ncands = ngx_min(rec.ncands, (len - offsetof(
                            ngx_http_tokenbiryani_record_t, cands))
                         / sizeof(ngx_http_tokenbiryani_inspect_cand_t));
    rec.nattempts = ngx_min(rec.nattempts, NGX_HTTP_TB_INSPECT_ATTEMPTS);
    rec.key[sizeof(rec.key) - 1] = '\0';
    rec.model[sizeof(rec.model) - 1] = '\0';
    rec.strategy[sizeof(rec.strategy) - 1] = '\0';

    rec.chosen = (int32_t) ngx_http_tokenbiryani_hload_map(hl, rec.chosen);

    for (i = 0; i < rec.nattempts; i++) {
        rec.attempts[i].slot = (uint32_t) ngx_http_tokenbiryani_hload_map(hl,
                                              rec.attempts[i].slot);
    }

    for (i = 0; i < rec.ncands; i++) {
        rec.cands[i].slot = (uint32_t) ngx_http_tokenbiryani_hload_map(hl,
                                           rec.cands[i].slot);
    }

    ngx_http_tokenbiryani_inspect_restore(&hl->tmcf->zone, &rec);
    hl->records++;

    return 0;
}


int
ngx_http_tokenbiryani_store_hload_event(void *data, uint64_t seq,
    const void *blob, size_t len)
{
    ngx_http_tokenbiryani_hload_t *hl = data;

    ngx_http_tokenbiryani_event_t  ev;

    if (len != sizeof(ngx_http_tokenbiryani_event_t)) {
        return 0;
    }

    ngx_memcpy(&ev, blob, len);

    ev.seq = seq;
    ev.key[TB_ID_MAX] = '\0';
    ev.slot = (int32_t) ngx_http_tokenbiryani_hload_map(hl, ev.slot);

    ngx_http_tokenbiryani_events_restore(&hl->tmcf->zone, &ev);
    hl->events++;

    return 0;
}


ngx_int_t
ngx_http_tokenbiryani_store_hload_begin(ngx_http_tokenbiryani_hload_t *hl,
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *stored,
    ngx_log_t *log)
{
    ngx_uint_t  i;
    u_char      layout[128];

    ngx_http_tokenbiryani_history_layout(layout, sizeof(layout));

    if (ngx_strcmp(layout, stored) != 0) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "tokenbiryani: the store's request history was written "
                      "by another build (%s, this one: %s) and is not read "
                      "back", stored, layout);
        return NGX_DECLINED;
    }

    ngx_memzero(hl, sizeof(ngx_http_tokenbiryani_hload_t));
    hl->tmcf = tmcf;
    hl->nmap = 4096;

    hl->map = ngx_alloc(hl->nmap * sizeof(ngx_int_t), log);
    if (hl->map == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < hl->nmap; i++) {
        hl->map[i] = -1;
    }

    return NGX_OK;
}


void
ngx_http_tokenbiryani_store_hload_end(ngx_http_tokenbiryani_hload_t *hl,
    ngx_log_t *log)
{
    ngx_http_tokenbiryani_zone_stats_t  zs;

    ngx_free(hl->map);

    /* what was read back is written already */

    ngx_http_tokenbiryani_zone_stats(&hl->tmcf->zone, &zs);
    ngx_http_tokenbiryani_store_flushed(&hl->tmcf->zone, zs.ring_seq,
                                        ngx_http_tokenbiryani_events_last(
                                            &hl->tmcf->zone),
                                        0, 0);

    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "tokenbiryani: the store's history read back: %ui "
                  "requests, %ui events", hl->records, hl->events);
}


static void
ngx_http_tokenbiryani_load_history(tb_store_t *db,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log)
{
    ngx_http_tokenbiryani_hload_t        hl;
    ngx_http_tokenbiryani_zone_stats_t   zs;
    char                                 stored[128];

    if (tb_store_meta_get(db, "history_layout", stored, sizeof(stored))
        != TB_STORE_OK)
    {
        /* none written yet */
        return;
    }

    if (ngx_http_tokenbiryani_store_hload_begin(&hl, tmcf, stored, log)
        != NGX_OK)
    {
        return;
    }

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    if (tb_store_slots(db, ngx_http_tokenbiryani_store_hload_slot, &hl)
        != TB_STORE_OK
        || tb_store_history(db, TB_STORE_RECORDS, zs.ring_size,
                            ngx_http_tokenbiryani_store_hload_record, &hl)
           != TB_STORE_OK
        || tb_store_history(db, TB_STORE_EVENTS, zs.events_size,
                            ngx_http_tokenbiryani_store_hload_event, &hl)
           != TB_STORE_OK)
    {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "tokenbiryani: the store's request history is not read "
                      "back: %s", tb_store_error(db));
    }

    ngx_http_tokenbiryani_store_hload_end(&hl, log);
}


/* the settings an operator made at runtime, over the file's */
/* the master: the spend ledgers and the conversations read back */

int
ngx_http_tokenbiryani_store_sload_ledger(void *data, int scope,
    const char *id, const void *blob, size_t len)
{
    ngx_http_tokenbiryani_sload_t *sl = data;

    size_t       n;
    ngx_int_t    slot;
    uint64_t     key;
    tb_ledger_t  l;

    if (len != sizeof(tb_ledger_t)) {
        sl->skipped++;
        return 0;
    }

    ngx_memcpy(&l, blob, len);
    l.reserved = 0;
    l.reserved_turns = 0;

    if (scope == NGX_HTTP_TB_LEDGER_ACCOUNT) {
        slot = ngx_http_tokenbiryani_zone_slot_of(&sl->tmcf->zone,
                                                  (u_char *) id,
                                                  ngx_strlen(id));
        if (slot < 0) {
            return 0;
        }

        key = (uint64_t) slot;

    } else if (scope == NGX_HTTP_TB_LEDGER_KEY) {
        n = ngx_strlen(id);
        if (n != 16) {
            return 0;
        }

        key = 0;

        for ( /* void */ ; n; n--, id++) {
            key <<= 4;
            key |= (uint64_t) ((*id >= 'a') ? *id - 'a' + 10 : *id - '0');
        }

    } else {
        return 0;
    }

    ngx_http_tokenbiryani_spend_restore(&sl->tmcf->zone, (ngx_uint_t) scope,
                                        key, &l);
    sl->ledgers++;

    return 0;
}


int
ngx_http_tokenbiryani_store_sload_session(void *data, uint64_t seq,
    const void *blob, size_t len)
{
    ngx_http_tokenbiryani_sload_t *sl = data;

    ngx_http_tokenbiryani_session_view_t  v;

    if (len != sizeof(v)) {
        sl->skipped++;
        return 0;
    }

    ngx_memcpy(&v, blob, len);
    v.key_len = ngx_min(v.key_len, TB_ID_MAX);
    v.key[v.key_len] = '\0';
    v.account[TB_ID_MAX] = '\0';
    v.ledger.reserved = 0;
    v.ledger.reserved_turns = 0;

    v.slot = v.account[0]
             ? (int32_t) ngx_http_tokenbiryani_zone_slot_of(&sl->tmcf->zone,
                           v.account, ngx_strlen(v.account))
             : -1;

    ngx_http_tokenbiryani_session_restore(&sl->tmcf->zone, &v);
    sl->sessions++;

    return 0;
}


static void
ngx_http_tokenbiryani_load_spend(tb_store_t *db,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log)
{
    ngx_http_tokenbiryani_sload_t  sl;

    ngx_memzero(&sl, sizeof(sl));
    sl.tmcf = tmcf;

    if (tb_store_ledgers(db, ngx_http_tokenbiryani_store_sload_ledger, &sl)
        != TB_STORE_OK
        || tb_store_sessions(db, NGX_HTTP_TB_SESSIONS,
                             ngx_http_tokenbiryani_store_sload_session, &sl)
           != TB_STORE_OK)
    {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "tokenbiryani: the store's spend ledgers are not read "
                      "back: %s; caps count from nothing", tb_store_error(db));
        return;
    }

    ngx_http_tokenbiryani_store_sload_end(&sl, log);
}


void
ngx_http_tokenbiryani_store_sload_end(ngx_http_tokenbiryani_sload_t *sl,
    ngx_log_t *log)
{
    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "tokenbiryani: the store's spend read back: %ui ledgers, "
                  "%ui conversations", sl->ledgers, sl->sessions);

    if (sl->skipped) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "tokenbiryani: %ui spend ledgers and conversations in "
                      "the store were written by another build (another "
                      "layout) and are not read back: their caps count "
                      "from nothing", sl->skipped);
    }
}


static void
ngx_http_tokenbiryani_load_settings(tb_store_t *db,
    ngx_http_tokenbiryani_store_load_t *ld)
{
    char  value[TB_REC_ENVELOPE_LEN(64) + 1];

    if (tb_store_meta_get(db, "setting.routing.strategy", value,
                          sizeof(value))
        != TB_STORE_OK || value[0] == '\0')
    {
        return;
    }

    ngx_http_tokenbiryani_store_load_strategy(ld, value, ngx_strlen(value));
}


void
ngx_http_tokenbiryani_store_load_strategy(
    ngx_http_tokenbiryani_store_load_t *ld, const char *value, size_t len)
{
    size_t                              plen;
    uint64_t                            gen;
    ngx_uint_t                          legacy;
    ngx_log_t                          *log;
    const char                         *payload;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                name[64];

    tmcf = ld->tmcf;
    log = ld->log;
    legacy = 0;

    if (ngx_http_tokenbiryani_record_check(tmcf, log, TB_REC_SETTING,
            "the setting", (u_char *) "setting.routing.strategy",
            sizeof("setting.routing.strategy") - 1, NULL, 0,
            (u_char *) value, len, &legacy)
        != NGX_OK)
    {
        return;
    }

    payload = tb_rec_payload(value, len, &plen, &gen);

    if (plen == 0) {
        /* the file's */
        return;
    }

    if (plen >= sizeof(name)) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "tokenbiryani: the strategy set at runtime is too long "
                      "a name, and is left out");
        return;
    }

    ngx_memcpy(name, payload, plen);
    name[plen] = '\0';

    if (legacy) {
        if (ngx_http_tokenbiryani_store_adopt(ld, TB_REC_SETTING,
                                              "setting.routing.strategy",
                                              NULL, NULL, name, plen)
            == NULL)
        {
            return;
        }

        (void) tb_rec_payload(ld->adopted->value,
                              ngx_strlen(ld->adopted->value), &plen, &gen);
    }

    if (ngx_http_tokenbiryani_find_strategy(tmcf, name) == NULL) {
        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "tokenbiryani: the strategy \"%s\" set at runtime is "
                      "not in this build or its plugins: the file's \"%s\" "
                      "is used", name, tmcf->strategy->name);
        return;
    }

    (void) ngx_http_tokenbiryani_settings_set_strategy(&tmcf->zone,
                                       (u_char *) name, ngx_strlen(name), gen);

    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "tokenbiryani: routing.strategy \"%s\", set at runtime, "
                  "from the store", name);
}


/* a write's outcome: the store degraded or back, said once */
void
ngx_http_tokenbiryani_store_wrote(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const char *err, ngx_log_t *log)
{
    if (!ngx_http_tokenbiryani_store_report(&tmcf->zone, err,
                                            ngx_http_tokenbiryani_now_ms()))
    {
        return;
    }

    if (err) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "tokenbiryani: the store cannot be written, the "
                      "gateway serves from memory and keeps trying: %s",
                      err);
    } else {
        ngx_log_error(NGX_LOG_NOTICE, log, 0,
                      "tokenbiryani: the store \"%V\" is written again",
                      &tmcf->store_shown);
    }
}
