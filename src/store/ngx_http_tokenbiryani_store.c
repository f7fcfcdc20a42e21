/*
 * The durable store behind the zone, whichever its backend (see
 * ngx_http_tokenbiryani_store.h): what is read back checked and put into
 * the zone, the history's flushes, the one path by which a job reaches
 * the backend.
 */


#include "ngx_http_tokenbiryani.h"
#include "tb_racct.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "tb_keyspec.h"
#include "tb_hash.h"

/* the history: written by one worker, elected, a tenth of a ring at a time */
typedef struct {
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_event_t                         timer;      /* every 100 ms */
    ngx_uint_t                          flushing;   /* a flush is posted */
} ngx_http_tokenbiryani_flusher_t;


static ngx_http_tokenbiryani_flusher_t  ngx_http_tokenbiryani_flusher;

/* the last time requests whose usage was gone unwritten were said */
static int64_t  ngx_http_tokenbiryani_lost_said = -60000;


static void ngx_http_tokenbiryani_flush_timer(ngx_event_t *ev);
static void ngx_http_tokenbiryani_flushed(ngx_http_tokenbiryani_job_t *job);
static void ngx_http_tokenbiryani_flush_landed(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_job_t *job,
    ngx_log_t *log);


static const char *ngx_http_tokenbiryani_store_adopt(
    ngx_http_tokenbiryani_store_load_t *ld, int kind, const char *name,
    const u_char *digest, const char *sealed, const char *payload,
    size_t plen);


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

    /* fresh: a new zone, read from the store; a reload: the zone lived on,
     * and it is the truth */

    return tmcf->store_ops->load(shm_zone, tmcf, fresh);
}


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


/* the master, before workers start: a minted key into the zone */
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

ngx_int_t
ngx_http_tokenbiryani_store_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_http_tokenbiryani_flusher_t  *f;

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        return NGX_OK;
    }

    f = &ngx_http_tokenbiryani_flusher;

    f->tmcf = tmcf;

    /* data: tmcf (nginx's debug log reads it as a connection) */
    ngx_http_tokenbiryani_timer_init(&f->timer,
                                     ngx_http_tokenbiryani_flush_timer, tmcf,
                                     cycle->log);

    ngx_add_timer(&f->timer, NGX_HTTP_TB_FLUSH_TICK_MS);

    return tmcf->store_ops->init_worker(cycle, tmcf);
}


static void
ngx_http_tokenbiryani_flush_timer(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_job_t      *job;
    ngx_http_tokenbiryani_flusher_t  *f;

    f = &ngx_http_tokenbiryani_flusher;

    if (!f->flushing
        && ngx_http_tokenbiryani_store_flusher(&f->tmcf->zone, ngx_pid))
    {
        job = ngx_http_tokenbiryani_flush_collect(f->tmcf, 1);

        if (job) {
            job->done = ngx_http_tokenbiryani_flushed;
            job->data = f;
            f->flushing = 1;

            if (ngx_http_tokenbiryani_store_post(f->tmcf, job) != NGX_OK) {
                f->flushing = 0;
                ngx_http_tokenbiryani_flush_release(job);
            }
        }
    }

    ngx_add_timer(ev, NGX_HTTP_TB_FLUSH_TICK_MS);
}


static void
ngx_http_tokenbiryani_flushed(ngx_http_tokenbiryani_job_t *job)
{
    ngx_http_tokenbiryani_flusher_t *f = job->data;

    if (job->rc == TB_STORE_OK) {
        ngx_http_tokenbiryani_flush_landed(f->tmcf, job, ngx_cycle->log);
    }

    f->flushing = 0;

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
    int64_t                              now;
    ngx_http_tokenbiryani_store_state_t  st;
    ngx_http_tokenbiryani_job_flush_t   *fl;

    fl = &job->u.flush;

    now = ngx_http_tokenbiryani_now_ms();

    if (fl->usage_lost && now - ngx_http_tokenbiryani_lost_said >= 60000) {
        ngx_http_tokenbiryani_lost_said = now;

        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "tokenbiryani: %uL requests ended before the history "
                      "was written (more than the zone keeps, %ui, since "
                      "the last write): their usage is not in the usage "
                      "history; the store is slow or the rate is beyond "
                      "what observability.event_buffer allows (4 times it "
                      "in 100 ms)", fl->usage_lost,
                      ngx_max(4 * (ngx_uint_t) tmcf->tbcf
                                  ->observability_event_buffer,
                              NGX_HTTP_TB_USAGE_MIN));
    }

    if (!fl->rewind) {
        ngx_http_tokenbiryani_store_flushed(&tmcf->zone, fl->records_seq,
                                            fl->events_seq, fl->spend_seq,
                                            now);
        return;
    }

    ngx_http_tokenbiryani_store_rewind(&tmcf->zone, fl->records_seq,
                                       fl->events_seq, now);
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
    ngx_http_tokenbiryani_job_t  *job;

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        return;
    }

    /*
     * What the last flush left is written here, the worker's last act, so
     * a graceful stop loses no history; then the backend lets go of the
     * election and its connections.
     */

    if (ngx_http_tokenbiryani_store_flusher(&tmcf->zone, ngx_pid)) {
        job = ngx_http_tokenbiryani_flush_collect(tmcf, 0);

        if (job) {
            job->err[0] = '\0';

            if (tmcf->store_ops->flush_now(tmcf, job) == TB_STORE_OK) {
                ngx_http_tokenbiryani_flush_landed(tmcf, job, cycle->log);

            } else {
                ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                              "tokenbiryani: the last history of this "
                              "worker is not written: %s", job->err);
            }

            ngx_http_tokenbiryani_flush_release(job);
        }
    }

    tmcf->store_ops->exit_worker(cycle, tmcf);
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
    if (tmcf->store_ops == NULL) {
        return NGX_ERROR;
    }

    job->rc = TB_STORE_ERROR;
    job->err[0] = '\0';
    job->posted = ngx_current_msec;

    return tmcf->store_ops->post(tmcf, job);
}


ngx_int_t
ngx_http_tokenbiryani_store_owner_get(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_http_tokenbiryani_store_resume_pt resume)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (tmcf->store_ops == NULL || tmcf->store_ops->peers == NULL) {
        return NGX_OK;
    }

    return tmcf->store_ops->peers->owner_get(r, ctx, resume);
}


void
ngx_http_tokenbiryani_store_owner_put(ngx_http_tokenbiryani_main_conf_t *tmcf,
    uint64_t session, const ngx_str_t *account, int64_t cached,
    ngx_uint_t share)
{
    if (tmcf->store_ops != NULL && tmcf->store_ops->peers != NULL) {
        tmcf->store_ops->peers->owner_put(tmcf, session, account, cached,
                                          share);
    }
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
    ev.obj.id[NGX_HTTP_TB_EVENT_ID_MAX] = '\0';
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

    if (ngx_http_tokenbiryani_inspect_compact(&hl->tmcf->zone, log)
        != NGX_OK)
    {
        /* those the numbering passed are not listed until it turns */
        ngx_log_error(NGX_LOG_WARN, log, 0, "tokenbiryani: no memory to "
                      "order the requests read back from the store");
    }

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


/* the settings an operator made at runtime, over the file's */
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


static void
ngx_http_tokenbiryani_store_object_done(ngx_http_tokenbiryani_job_t *job)
{
    ngx_http_tokenbiryani_main_conf_t *tmcf = job->data;

    ngx_http_tokenbiryani_store_wrote(tmcf,
                                      job->rc == TB_STORE_ERROR ? job->err
                                                                : NULL,
                                      ngx_cycle->log);
    ngx_free(job);
}


void
ngx_http_tokenbiryani_store_object(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_uint_t kind, const u_char *id, size_t len, ngx_uint_t gone)
{
    u_char                       *p;
    size_t                        plen, size;
    uint64_t                      gen;
    tb_object_rec_t               rec;
    ngx_http_tokenbiryani_job_t  *job;
    char                          payload[TB_OBJECT_REC_MAX + 1];

    if (!ngx_http_tokenbiryani_store_on(tmcf) || !tmcf->rec.set
        || len == 0 || len > NGX_HTTP_TB_OBJECT_ID_MAX)
    {
        return;
    }

    plen = 0;
    gen = 0;

    if (!gone) {
        if (ngx_http_tokenbiryani_object_record(&tmcf->zone, kind, id, len,
                                                ngx_http_tokenbiryani_now_ms(),
                                                &rec, &gen)
            != NGX_OK)
        {
            return;
        }

        plen = tb_object_rec_encode(&rec, payload, sizeof(payload));
        if (plen == 0) {
            return;
        }
    }

    /* the job, its id and its record's envelope in one allocation */

    size = sizeof(ngx_http_tokenbiryani_job_t) + len + 1
           + TB_REC_ENVELOPE_LEN(plen) + 1;

    job = ngx_alloc(size, ngx_cycle->log);
    if (job == NULL) {
        return;
    }

    ngx_memzero(job, sizeof(ngx_http_tokenbiryani_job_t));

    p = (u_char *) (job + 1);
    job->u.record.name = (char *) p;
    p = ngx_cpymem(p, id, len);
    *p++ = '\0';

    if (gone) {
        job->op = NGX_HTTP_TB_JOB_OBJECT_DELETE;

    } else {
        job->op = NGX_HTTP_TB_JOB_OBJECT_PUT;
        job->u.record.spec = (char *) p;

        if (tb_rec_wrap(&tmcf->rec, TB_REC_OBJECT, (const char *) id, len,
                        NULL, 0, gen, payload, plen, (char *) p,
                        TB_REC_ENVELOPE_LEN(plen) + 1)
            == 0)
        {
            ngx_free(job);
            return;
        }
    }

    job->done = ngx_http_tokenbiryani_store_object_done;
    job->data = tmcf;

    if (ngx_http_tokenbiryani_store_post(tmcf, job) != NGX_OK) {
        ngx_http_tokenbiryani_store_wrote(tmcf, job->err[0] ? job->err
                                          : "the write cannot be queued",
                                          ngx_cycle->log);
        ngx_free(job);
    }
}


ngx_int_t
ngx_http_tokenbiryani_store_object_in(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log, const u_char *id, size_t len, const u_char *text,
    size_t tlen, ngx_uint_t load)
{
    size_t                               plen;
    ngx_int_t                            rc;
    const char                          *payload, *why;
    tb_object_rec_t                      rec;
    ngx_http_tokenbiryani_object_view_t  v;

    if (!tb_batch_id_ok((const char *) id, len)) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "tokenbiryani: an object in the store is refused: its "
                      "id is not one the API gives");
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        return NGX_DECLINED;
    }

    if (ngx_http_tokenbiryani_record_check(tmcf, log, TB_REC_OBJECT,
                                           "object", id, len, NULL, 0,
                                           text, tlen, NULL)
        != NGX_OK)
    {
        /* said, and counted */
        return NGX_DECLINED;
    }

    ngx_memzero(&v, sizeof(v));

    payload = tb_rec_payload((const char *) text, tlen, &plen, &v.gen);

    if (tb_object_rec_decode(payload, plen, &rec) != 0) {
        why = "its record cannot be read";
        goto refused;
    }

    v.kind = (rec.kind == TB_OBJECT_BATCH) ? NGX_HTTP_TB_OBJECT_BATCH
                                           : NGX_HTTP_TB_OBJECT_FILE;
    v.status = (ngx_uint_t) rec.status;
    v.over = (ngx_uint_t) rec.over;
    v.settled = (ngx_uint_t) rec.settled;
    v.held = load;
    v.created_ms = rec.created_ms;
    v.seen_ms = rec.seen_ms;
    v.reserved = rec.reserved;
    v.charged = rec.charged;
    ngx_memcpy(v.counts, rec.counts, sizeof(v.counts));
    v.id_len = len;
    ngx_memcpy(v.id, id, len);

    /* its account by id: one since removed is kept, at the start, so that
     * its batches are still answered for */
    v.slot = load
             ? ngx_http_tokenbiryani_zone_slot_of(&tmcf->zone,
                   (u_char *) rec.account, ngx_strlen(rec.account))
             : ngx_http_tokenbiryani_zone_slot_find(&tmcf->zone,
                   (u_char *) rec.account, ngx_strlen(rec.account));

    if (rec.key[0]) {
        v.key = tb_hash64(0, rec.key, ngx_strlen(rec.key));
        ngx_cpystrn(v.key_name, (u_char *) rec.key, sizeof(v.key_name));
    }

    v.size = rec.size;
    v.downloadable = (ngx_uint_t) rec.downloadable;
    ngx_cpystrn(v.filename, (u_char *) rec.filename, sizeof(v.filename));
    ngx_cpystrn(v.mime, (u_char *) rec.mime, sizeof(v.mime));

    rc = ngx_http_tokenbiryani_object_adopt(&tmcf->zone, &v,
                                            NGX_HTTP_TB_OBJECTS_MAX);

    if (rc == NGX_OK || rc == NGX_DONE) {
        return NGX_OK;
    }

    why = (rc == NGX_ABORT) ? "the zone has that id on another account or "
                              "key"
          : (rc == NGX_BUSY) ? "the zone keeps as many objects as it may"
          : (rc == NGX_DECLINED) ? "another id of the same hash is kept"
          : "no memory";

refused:

    ngx_log_error(NGX_LOG_ERR, log, 0,
                  "tokenbiryani: object \"%*s\" in the store is refused: %s",
                  len, id, why);

    ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);

    return NGX_DECLINED;
}


ngx_int_t
ngx_http_tokenbiryani_store_object_get(ngx_http_request_t *r,
    const u_char *id, size_t len,
    ngx_http_tokenbiryani_store_resume_pt resume)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (tmcf->store_ops == NULL || tmcf->store_ops->peers == NULL) {
        return NGX_OK;
    }

    return tmcf->store_ops->peers->object_get(r, id, len, resume);
}


void
ngx_http_tokenbiryani_store_object_gone(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len)
{
    int64_t  now;

    now = ngx_http_tokenbiryani_now_ms();

    if (ngx_http_tokenbiryani_object_remove(&tmcf->zone,
                                            NGX_HTTP_TB_OBJECT_BATCH, id,
                                            len, now, NULL)
        != NGX_OK)
    {
        (void) ngx_http_tokenbiryani_object_remove(&tmcf->zone,
                                                   NGX_HTTP_TB_OBJECT_FILE,
                                                   id, len, now, NULL);
    }
}


ngx_int_t
ngx_http_tokenbiryani_store_object_claim(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len,
    ngx_http_tokenbiryani_claim_pt done, void *data)
{
    if (tmcf->store_ops == NULL || tmcf->store_ops->peers == NULL) {
        return NGX_DECLINED;
    }

    return tmcf->store_ops->peers->object_claim(tmcf, id, len, done, data);
}


ngx_int_t
ngx_http_tokenbiryani_store_object_claim_r(ngx_http_request_t *r,
    const u_char *id, size_t len,
    ngx_http_tokenbiryani_store_resume_pt resume)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (tmcf->store_ops == NULL || tmcf->store_ops->peers == NULL) {
        return NGX_OK;
    }

    return tmcf->store_ops->peers->object_claim_r(r, id, len, resume);
}
