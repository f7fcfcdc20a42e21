/*
 * What Redis says, put into the zone (see
 * ngx_http_tokenbiryani_redis_zone.h).
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_redis_zone.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "tb_keyspec.h"


void
ngx_http_tokenbiryani_rzone_epoch(u_char *epoch)
{
    ngx_sprintf(epoch, "%08xD%08xD%08xD%08xD%Z", (uint32_t) ngx_random(),
                (uint32_t) ngx_time(), (uint32_t) ngx_pid,
                (uint32_t) ngx_random());
}


/* the key's stored value: its digest, from 64 hex digits */
ngx_int_t
ngx_http_tokenbiryani_rzone_digest(const char *v, size_t len,
    u_char digest[32])
{
    ngx_int_t   hi, lo;
    ngx_uint_t  i;

    if (len < 66 || v[64] != ' ') {
        return NGX_ERROR;
    }

    for (i = 0; i < 32; i++) {
        hi = ngx_hextoi((u_char *) &v[2 * i], 1);
        lo = ngx_hextoi((u_char *) &v[2 * i + 1], 1);

        if (hi == NGX_ERROR || lo == NGX_ERROR) {
            return NGX_ERROR;
        }

        digest[i] = (u_char) (hi * 16 + lo);
    }

    return NGX_OK;
}


void
ngx_http_tokenbiryani_rzone_key(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *name, size_t len,
    const redisReply *value)
{
    size_t        plen;
    ngx_uint_t    rc;
    const char   *payload;
    tb_keyspec_t  ks;
    u_char        digest[32];
    char          err[256];

    if (len == 0 || len > TB_ID_MAX
        || ngx_http_tokenbiryani_yaml_key(tmcf, (u_char *) name, len))
    {
        /* the file's key of that name wins, as at load */
        return;
    }

    if (value == NULL || value->type != REDIS_REPLY_STRING) {
        if (ngx_http_tokenbiryani_rkey_delete(&tmcf->zone, name, len)
            == NGX_HTTP_TB_RKEY_OK)
        {
            ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                          "tokenbiryani: key \"%*s\" revoked by another "
                          "instance", len, name);
        }

        return;
    }

    if (ngx_http_tokenbiryani_rzone_digest(value->str, value->len, digest)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the key \"%*s\" in Redis is "
                      "unreadable and left out", len, name);
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        return;
    }

    /* written by an instance of this gateway, bound to name and digest */

    if (ngx_http_tokenbiryani_record_check(tmcf, ngx_cycle->log, TB_REC_KEY,
                                           "key", name, len, digest, 32,
                                           (u_char *) value->str + 65,
                                           value->len - 65, NULL)
        != NGX_OK)
    {
        return;
    }

    payload = tb_rec_payload(value->str + 65, value->len - 65, &plen, NULL);

    if (!tb_keyspec_valid_name((const char *) name, len)
        || tb_keyspec_parse(&ks, payload, plen, TB_KEYSPEC_STORED, NULL, NULL,
                            0, err, sizeof(err))
           != 0)
    {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the key \"%*s\" in Redis is "
                      "unreadable and left out", len, name);
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        return;
    }

    rc = (ngx_strlen(ks.conf.name) == len
          && ngx_strncmp(ks.conf.name, name, len) == 0);

    tb_keyspec_free(&ks);

    if (!rc) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the key \"%*s\" in Redis names another "
                      "key in its spec and is left out", len, name);
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        return;
    }

    rc = ngx_http_tokenbiryani_rkey_set(&tmcf->zone, name, len, digest,
                                        (u_char *) value->str + 65,
                                        value->len - 65);

    switch (rc) {

    case NGX_HTTP_TB_RKEY_NEW:
    case NGX_HTTP_TB_RKEY_OK:
        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "tokenbiryani: key \"%*s\" %s by another instance",
                      len, name, rc == NGX_HTTP_TB_RKEY_NEW ? "minted"
                                                            : "changed");
        break;

    case NGX_HTTP_TB_RKEY_STALE:
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the key \"%*s\" in Redis is refused: "
                      "it is older than one this instance had (a record "
                      "written again)", len, name);
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        break;

    case NGX_HTTP_TB_RKEY_NOMEM:
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the key \"%*s\" from Redis does not "
                      "fit: make tokenbiryani_zone larger", len, name);
        break;

    default:
        break;
    }
}


/* an account another instance wrote: opened, its host looked up off the
 * event loop, then put into the zone */

typedef struct {
    ngx_http_tokenbiryani_lookup_t      lookup;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    u_char                              fingerprint[8];
    int                                 replenishment;
    ngx_http_tokenbiryani_racct_view_t  v;
    ngx_http_tokenbiryani_raddr_t       addrs[NGX_HTTP_TB_RACCT_ADDRS];
    char                                host[256];
    u_char                              data[1];   /* id, spec, sealed */
} ngx_http_tokenbiryani_rzone_t;


static void
ngx_http_tokenbiryani_rzone_put(ngx_http_tokenbiryani_rzone_t *ra)
{
    ngx_uint_t                          rc, slot, exists;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ra->tmcf;
    exists = (ngx_http_tokenbiryani_racct_known(&tmcf->zone, &ra->v) != 0);

    rc = ngx_http_tokenbiryani_racct_put(&tmcf->zone, &ra->v, ra->fingerprint,
                                         ra->replenishment, !exists,
                                         tmcf->max_accounts - tmcf->nyaml,
                                         &slot);

    switch (rc) {

    case NGX_HTTP_TB_RKEY_OK:
        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" %s by another instance",
                      &ra->v.id, exists ? "changed" : "added");
        ngx_http_tokenbiryani_accounts_sync(tmcf);
        break;

    case NGX_HTTP_TB_RKEY_FULL:
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" from Redis is left out: "
                      "tokenbiryani_max_accounts (%ui) are there",
                      &ra->v.id, tmcf->max_accounts);
        break;

    case NGX_HTTP_TB_RKEY_NOMEM:
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" from Redis does not fit: "
                      "make tokenbiryani_zone larger", &ra->v.id);
        break;

    case NGX_HTTP_TB_RKEY_STALE:
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the account \"%V\" in Redis is "
                      "refused: it is older than one this instance had (a "
                      "record written again)", &ra->v.id);
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        break;

    default:
        /* added or removed meanwhile: the next announcement settles it */
        break;
    }
}


static void
ngx_http_tokenbiryani_rzone_resolved(ngx_http_tokenbiryani_lookup_t *lk)
{
    ngx_http_tokenbiryani_rzone_t *ra = lk->data;

    if (lk->naddrs
        && ngx_http_tokenbiryani_racct_private(ra->tmcf, ra->addrs,
                                               lk->naddrs))
    {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" from Redis does not "
                      "serve here: its host resolves to a loopback, "
                      "link-local or private address "
                      "(server.allow_private_hosts)", &ra->v.id);

    } else if (lk->naddrs) {
        ra->v.naddrs = lk->naddrs;
        ngx_memcpy(ra->v.addrs, ra->addrs, sizeof(ra->v.addrs));
        ngx_http_tokenbiryani_rzone_put(ra);

    } else {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" from Redis does not "
                      "serve here: %s", &ra->v.id, lk->err);
    }

    ngx_free(ra);
}


void
ngx_http_tokenbiryani_rzone_account(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len,
    const redisReply *spec, const redisReply *sealed)
{
    u_char                              *p;
    in_port_t                            port;
    ngx_int_t                            rc;
    ngx_uint_t                           slot;
    ngx_pool_t                          *pool;
    tb_config_t                         *cf;
    ngx_http_tokenbiryani_account_t      a;
    ngx_http_tokenbiryani_rzone_t       *ra;
    ngx_http_tokenbiryani_racct_view_t   known;
    char                                 err[512];

    if (len == 0 || len > TB_ID_MAX
        || ngx_http_tokenbiryani_yaml_account(tmcf, id, len))
    {
        return;
    }

    if (spec == NULL || spec->type != REDIS_REPLY_STRING
        || sealed == NULL || sealed->type != REDIS_REPLY_STRING)
    {
        if (ngx_http_tokenbiryani_racct_delete(&tmcf->zone, id, len, &slot)
            == NGX_HTTP_TB_RKEY_OK)
        {
            ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                          "tokenbiryani: account \"%*s\" removed by another "
                          "instance", len, id);
            ngx_http_tokenbiryani_accounts_sync(tmcf);
        }

        return;
    }

    /*
     * Written by an instance of this gateway, bound to its id and sealed
     * credential; then held to the admin API's rules (racct_open).  One
     * that does not verify never enters the zone.
     */

    if (ngx_http_tokenbiryani_record_check(tmcf, ngx_cycle->log,
                                           TB_REC_ACCOUNT, "account", id, len,
                                           sealed->str, sealed->len,
                                           (u_char *) spec->str, spec->len,
                                           NULL)
        != NGX_OK)
    {
        return;
    }

    /* as the zone has it already: nothing to do */

    ngx_memzero(&known, sizeof(ngx_http_tokenbiryani_racct_view_t));
    known.id.data = (u_char *) id;
    known.id.len = len;
    known.spec.data = (u_char *) spec->str;
    known.spec.len = spec->len;
    known.sealed.data = (u_char *) sealed->str;
    known.sealed.len = sealed->len;

    if (ngx_http_tokenbiryani_racct_known(&tmcf->zone, &known) == 2) {
        return;
    }

    pool = ngx_create_pool(4096, ngx_cycle->log);
    if (pool == NULL) {
        return;
    }

    ra = ngx_calloc(sizeof(ngx_http_tokenbiryani_rzone_t) + len + spec->len
                    + sealed->len + 3, ngx_cycle->log);
    if (ra == NULL) {
        ngx_destroy_pool(pool);
        return;
    }

    ra->tmcf = tmcf;

    p = ra->data;
    ra->v.id.data = p;
    ra->v.id.len = len;
    p = ngx_cpymem(p, id, len);
    *p++ = '\0';
    ra->v.spec.data = p;
    ra->v.spec.len = spec->len;
    p = ngx_cpymem(p, spec->str, spec->len);
    *p++ = '\0';
    ra->v.sealed.data = p;
    ra->v.sealed.len = sealed->len;
    p = ngx_cpymem(p, sealed->str, sealed->len);
    *p = '\0';

    cf = ngx_http_tokenbiryani_racct_open(tmcf, &ra->v.id, &ra->v.spec,
                                          &ra->v.sealed, err, sizeof(err));
    if (cf == NULL) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" from Redis does not "
                      "serve here: %s", &ra->v.id, err);
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        ngx_free(ra);
        ngx_destroy_pool(pool);
        return;
    }

    ngx_memzero(&a, sizeof(a));

    rc = ngx_http_tokenbiryani_account_fill(pool, &a, &cf->accounts[0],
                                            ra->fingerprint, err,
                                            sizeof(err));

    ngx_explicit_memzero(a.auth_header.data, a.auth_header.len);

    port = (in_port_t) cf->accounts[0].port;
    ra->replenishment = cf->accounts[0].replenishment;
    ngx_cpystrn((u_char *) ra->host, (u_char *) cf->accounts[0].host,
                sizeof(ra->host));

    tb_config_free(cf);
    ngx_destroy_pool(pool);

    if (rc != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: account \"%V\" from Redis does not "
                      "serve here: %s", &ra->v.id,
                      rc == NGX_ABORT ? "no memory" : err);
        ngx_free(ra);
        return;
    }

    ra->v.naddrs = ngx_http_tokenbiryani_literal_addr(ra->host, port,
                                                      ra->v.addrs);
    if (ra->v.naddrs) {
        ngx_http_tokenbiryani_rzone_put(ra);
        ngx_free(ra);
        return;
    }

    ra->lookup.host = ra->host;
    ra->lookup.port = port;
    ra->lookup.addrs = ra->addrs;
    ra->lookup.naddrs = NGX_HTTP_TB_RACCT_ADDRS;
    ra->lookup.done = ngx_http_tokenbiryani_rzone_resolved;
    ra->lookup.data = ra;

    if (ngx_http_tokenbiryani_lookup_post(tmcf, &ra->lookup) != NGX_OK) {
        ngx_free(ra);
    }
}


void
ngx_http_tokenbiryani_rzone_strategy(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const redisReply *value)
{
    size_t       plen;
    uint64_t     gen;
    const char  *payload;
    u_char       cur[64], name[64];

    name[0] = '\0';
    gen = 0;

    if (value && value->type == REDIS_REPLY_STRING) {

        /* written by an instance of this gateway, as this setting */

        if (ngx_http_tokenbiryani_record_check(tmcf, ngx_cycle->log,
                TB_REC_SETTING, "the setting",
                (u_char *) "setting.routing.strategy",
                sizeof("setting.routing.strategy") - 1, NULL, 0,
                (u_char *) value->str, value->len, NULL)
            != NGX_OK)
        {
            return;
        }

        payload = tb_rec_payload(value->str, value->len, &plen, &gen);

        if (plen >= sizeof(name)) {
            return;
        }

        ngx_memcpy(name, payload, plen);
        name[plen] = '\0';
    }

    (void) ngx_http_tokenbiryani_settings_strategy(&tmcf->zone, cur,
                                                   sizeof(cur));

    if (ngx_strcmp(cur, name) == 0) {
        return;
    }

    if (name[0] && ngx_http_tokenbiryani_find_strategy(tmcf, (char *) name)
                   == NULL)
    {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "tokenbiryani: the strategy \"%s\" another instance "
                      "set is not in this build or its plugins: this one "
                      "keeps \"%s\"", name,
                      cur[0] ? cur : (u_char *) tmcf->strategy->name);
        return;
    }

    if (ngx_http_tokenbiryani_settings_set_strategy(&tmcf->zone, name,
                                                    ngx_strlen(name), gen)
        == NGX_HTTP_TB_RKEY_STALE)
    {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the setting \"setting.routing.strategy\" "
                      "in Redis is refused: it is older than the one this "
                      "instance has (a record written again)");
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "tokenbiryani: routing.strategy \"%s\", set by another "
                  "instance", name[0] ? name : (u_char *) tmcf->strategy->name);
}


void
ngx_http_tokenbiryani_rzone_owner(ngx_http_tokenbiryani_main_conf_t *tmcf,
    uint64_t session, const u_char *value, size_t len)
{
    size_t       plen;
    uint64_t     gen;
    const char  *payload;
    u_char       hex[16];

    ngx_sprintf(hex, "%016uxL", session);

    if (tb_rec_open(&tmcf->rec, TB_REC_OWNER, (char *) hex, sizeof(hex),
                    NULL, 0, (const char *) value, len, &gen, &payload, &plen)
        != TB_REC_OK)
    {
        /* not one of ours: the conversation goes where the zone says */
        ngx_http_tokenbiryani_count_refused(&tmcf->zone, 0);
        return;
    }

    ngx_http_tokenbiryani_affinity_adopt(&tmcf->zone, session,
                                         (const u_char *) payload, plen,
                                         ngx_http_tokenbiryani_now_ms());
}
