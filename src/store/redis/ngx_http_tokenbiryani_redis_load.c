/*
 * The shared store in Redis, before any worker serves: its configuration
 * (the URL, where it points, this instance's name) and the master's read
 * of it into a new zone.  What the workers do with it is in
 * ngx_http_tokenbiryani_redis_store.c.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_redis.h"
#include "ngx_http_tokenbiryani_redis_store.h"
#include "ngx_http_tokenbiryani_redis_peers.h"
#include "ngx_http_tokenbiryani_redis_history.h"
#include "ngx_http_tokenbiryani_redis_zone.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "tb_keyspec.h"
#include "tb_redis.h"

#include <netdb.h>


/* KEYS: accounts, sealed; {HGETALL accounts, HGETALL sealed} */
const char  ngx_http_tokenbiryani_redis_lua_accounts[] =
    "return {redis.call('HGETALL', KEYS[1]), "
    "redis.call('HGETALL', KEYS[2])}";


/* configuration */

static ngx_int_t
ngx_http_tokenbiryani_redis_str(ngx_conf_t *cf, ngx_str_t *out,
    const char *s)
{
    out->len = ngx_strlen(s);
    out->data = ngx_pnalloc(cf->pool, out->len + 1);
    if (out->data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(out->data, s, out->len + 1);

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_redis_numeric(ngx_conf_t *cf, const char *host,
    int port, ngx_str_t *out)
{
    int               rc;
    struct addrinfo   hints, *res;
    char              buf[NI_MAXHOST];

    ngx_memzero(&hints, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;

    /* the master, at configuration: the one place a lookup may wait */
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: store.url: the host \"%s\" cannot "
                           "be resolved: %s", host, gai_strerror(rc));
        return NGX_ERROR;
    }

    rc = getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof(buf), NULL,
                     0, NI_NUMERICHOST);
    freeaddrinfo(res);

    if (rc != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: store.url: the host \"%s\" has no "
                           "usable address: %s", host, gai_strerror(rc));
        return NGX_ERROR;
    }

    return ngx_http_tokenbiryani_redis_str(cf, out, buf);
}


static ngx_uint_t
ngx_http_tokenbiryani_redis_name_ok(const char *s, size_t max)
{
    size_t  n;

    for (n = 0; s[n]; n++) {
        if (!(isalnum((u_char) s[n]) || s[n] == '.' || s[n] == '_'
              || s[n] == '-' || s[n] == ':'))
        {
            return 0;
        }
    }

    return n > 0 && n <= max;
}


ngx_int_t
ngx_http_tokenbiryani_redis_conf(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    u_char                              *p;
    tb_config_t                         *tbcf;
    tb_redis_url_t                       u;
    ngx_http_tokenbiryani_redis_conf_t  *rc;
    char                                 err[512], shown[600];
    u_char                               host[256];

    tbcf = tmcf->tbcf;

    if (tb_redis_url_parse(&u, tbcf->store_url, err, sizeof(err)) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "tokenbiryani: %s: %s",
                           tmcf->config_file.data, err);
        return NGX_ERROR;
    }

    if (!ngx_http_tokenbiryani_redis_name_ok(tbcf->store_namespace, 64)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: %s: store.namespace is 1 to 64 "
                           "letters, digits, '.', '_', '-' or ':'",
                           tmcf->config_file.data);
        return NGX_ERROR;
    }

    if (tbcf->store_instance[0]
        && !ngx_http_tokenbiryani_redis_name_ok(tbcf->store_instance, 64))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "tokenbiryani: %s: store.instance is 1 to 64 "
                           "letters, digits, '.', '_', '-' or ':'",
                           tmcf->config_file.data);
        return NGX_ERROR;
    }

    rc = ngx_pcalloc(cf->pool, sizeof(ngx_http_tokenbiryani_redis_conf_t));
    if (rc == NULL) {
        return NGX_ERROR;
    }

    if (u.path[0]) {
        if (ngx_http_tokenbiryani_redis_str(cf, &rc->path, u.path)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

    } else if (ngx_http_tokenbiryani_redis_numeric(cf, u.host, u.port,
                                                   &rc->host)
               != NGX_OK)
    {
        return NGX_ERROR;
    }

    rc->port = u.port;
    rc->database = (tbcf->store_database >= 0) ? (int) tbcf->store_database
                   : (u.database > 0) ? u.database : 0;
    rc->timeout = (ngx_msec_t) (tbcf->store_timeout_seconds * 1000);

    if (rc->timeout == 0) {
        rc->timeout = 1;
    }

    if (ngx_http_tokenbiryani_redis_str(cf, &rc->user, u.user) != NGX_OK
        || ngx_http_tokenbiryani_redis_str(cf, &rc->password,
                                           tbcf->store_password[0]
                                           ? tbcf->store_password
                                           : u.password)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_explicit_memzero(u.password, sizeof(u.password));

    tb_redis_url_print(&u, shown, sizeof(shown) - 16);
    p = (u_char *) shown + ngx_strlen(shown);

    if (rc->database) {
        ngx_sprintf(p, "/%d%Z", rc->database);
    }

    if (ngx_http_tokenbiryani_redis_str(cf, &rc->shown, shown) != NGX_OK
        || ngx_http_tokenbiryani_redis_str(cf, &tmcf->store_ns,
                                           tbcf->store_namespace)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* this instance's name: the file's, or the host's and the prefix's */

    if (tbcf->store_instance[0]) {
        if (ngx_http_tokenbiryani_redis_str(cf, &tmcf->store_instance,
                                            tbcf->store_instance)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

    } else {
        if (gethostname((char *) host, sizeof(host) - 1) == -1) {
            ngx_cpystrn(host, (u_char *) "localhost", sizeof(host));
        }

        host[sizeof(host) - 1] = '\0';

        tmcf->store_instance.data = ngx_pnalloc(cf->pool,
                                                ngx_strlen(host) + 10);
        if (tmcf->store_instance.data == NULL) {
            return NGX_ERROR;
        }

        tmcf->store_instance.len = ngx_sprintf(tmcf->store_instance.data,
                                       "%s-%08xD", host,
                                       ngx_crc32_short(cf->cycle->prefix.data,
                                                       cf->cycle->prefix.len))
                                   - tmcf->store_instance.data;
    }

    tmcf->redis = rc;
    tmcf->store_ops = &ngx_http_tokenbiryani_redis_ops;
    tmcf->store_shown = rc->shown;
    tmcf->store_backend = NGX_HTTP_TB_STORE_REDIS;

#if (NGX_THREADS)
    /* accounts added at runtime have their hosts looked up there */
    tmcf->thread_pool = ngx_thread_pool_add(cf, NULL);
    if (tmcf->thread_pool == NULL) {
        return NGX_ERROR;
    }
#endif

    return NGX_OK;
}


/* the master's read: blocking, bounded, before any worker serves */

static redisReply *
ngx_http_tokenbiryani_redis_sync(redisContext *c, int argc,
    const char **argv, const size_t *lens, char *err, size_t size)
{
    redisReply  *reply;

    reply = redisCommandArgv(c, argc, argv, lens);

    if (reply == NULL) {
        ngx_cpystrn((u_char *) err, (u_char *) (c->errstr[0] ? c->errstr
                                                : "no answer"), size);
        return NULL;
    }

    if (reply->type == REDIS_REPLY_ERROR) {
        ngx_snprintf((u_char *) err, size - 1, "%s: %s%Z", argv[0],
                     reply->str);
        err[size - 1] = '\0';
        freeReplyObject(reply);
        return NULL;
    }

    return reply;
}


/* the records adopted at load, written back in their envelopes */
static void
ngx_http_tokenbiryani_redis_adopted_back(redisContext *c,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_store_load_t *ld)
{
    u_char                           *value;
    size_t                            lens[4], vlen;
    ngx_uint_t                        done;
    redisReply                       *r;
    const char                       *argv[4];
    ngx_http_tokenbiryani_adopted_t  *ad;
    char                              err[256];

    done = 0;

    for (ad = ld->adopted; ad; ad = ad->next) {
        vlen = ngx_strlen(ad->value);
        value = (u_char *) ad->value;

        argv[0] = "HSET";
        argv[2] = ad->name;

        switch (ad->kind) {

        case TB_REC_KEY:
            /* "<digest in hex> <spec>" */
            value = ngx_alloc(65 + vlen + 1, ld->log);
            if (value == NULL) {
                continue;
            }

            ngx_hex_dump(value, ad->digest, 32);
            value[64] = ' ';
            ngx_memcpy(value + 65, ad->value, vlen);
            vlen += 65;
            argv[1] = n->keys;
            break;

        case TB_REC_ACCOUNT:
            argv[1] = n->accounts;
            break;

        default:
            argv[1] = n->meta;
            break;
        }

        argv[3] = (char *) value;

        lens[0] = 4;
        lens[1] = ngx_strlen(argv[1]);
        lens[2] = ngx_strlen(argv[2]);
        lens[3] = vlen;

        r = ngx_http_tokenbiryani_redis_sync(c, 4, argv, lens, err,
                                             sizeof(err));

        if (value != (u_char *) ad->value) {
            ngx_free(value);
        }

        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            ngx_log_error(NGX_LOG_WARN, ld->log, 0,
                          "tokenbiryani: \"%s\", adopted, could not be "
                          "written back to Redis: it is adopted again at "
                          "the next start while store.adopt_unauthenticated "
                          "is set", ad->name);

        } else {
            done++;
        }

        if (r) {
            freeReplyObject(r);
        }
    }

    ngx_http_tokenbiryani_store_adopted_free(ld, done);
}


/* a command of two words, "GET key": its reply, or NULL with err said */
static redisReply *
ngx_http_tokenbiryani_redis_get(redisContext *c, const char *cmd,
    const char *key, char *err, size_t size)
{
    size_t       lens[2];
    const char  *argv[2];

    argv[0] = cmd;
    argv[1] = key;
    lens[0] = ngx_strlen(cmd);
    lens[1] = ngx_strlen(key);

    return ngx_http_tokenbiryani_redis_sync(c, 2, argv, lens, err, size);
}


/*
 * The zone has no room for what Redis holds: the reply released, and err
 * says so in the words ngx_http_tokenbiryani_redis_load() knows as not
 * Redis's failure.
 */
static ngx_int_t
ngx_http_tokenbiryani_redis_full(redisReply *r, char *err, size_t size)
{
    freeReplyObject(r);
    ngx_cpystrn((u_char *) err, (u_char *) "the zone is full", size);

    return NGX_ERROR;
}


/* an object's record and when it was made, for the order they are read
 * back in (the lists' order: oldest first in, newest at the head) */
typedef struct {
    int64_t                             created_ms;
    redisReply                         *id;
    redisReply                         *value;
} ngx_http_tokenbiryani_robject_t;


static int ngx_libc_cdecl
ngx_http_tokenbiryani_robject_cmp(const void *a, const void *b)
{
    const ngx_http_tokenbiryani_robject_t  *x = a, *y = b;

    return (x->created_ms > y->created_ms) - (x->created_ms < y->created_ms);
}


static void
ngx_http_tokenbiryani_redis_read_objects(redisContext *c,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_store_load_t *ld)
{
    size_t                            plen;
    ngx_uint_t                        i, nobj;
    redisReply                       *r;
    const char                       *payload;
    tb_object_rec_t                   rec;
    ngx_http_tokenbiryani_robject_t  *all;
    char                              err[512];

    r = ngx_http_tokenbiryani_redis_get(c, "HGETALL", n->objects, err,
                                        sizeof(err));
    if (r == NULL) {
        ngx_log_error(NGX_LOG_ERR, ld->log, 0, "tokenbiryani: %s: the "
                      "batches kept before are not known until Redis "
                      "answers", err);
        return;
    }

    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
        freeReplyObject(r);
        return;
    }

    all = ngx_alloc(r->elements / 2 * sizeof(ngx_http_tokenbiryani_robject_t),
                    ld->log);
    if (all == NULL) {
        freeReplyObject(r);
        return;
    }

    nobj = 0;

    for (i = 0; i + 1 < r->elements; i += 2) {
        if (r->element[i]->type != REDIS_REPLY_STRING
            || r->element[i + 1]->type != REDIS_REPLY_STRING)
        {
            continue;
        }

        /* the order only: each is checked when it is read into the zone */
        payload = tb_rec_payload(r->element[i + 1]->str,
                                 r->element[i + 1]->len, &plen, NULL);

        all[nobj].created_ms =
            (tb_object_rec_decode(payload, plen, &rec) == 0)
            ? rec.created_ms : 0;
        all[nobj].id = r->element[i];
        all[nobj].value = r->element[i + 1];
        nobj++;
    }

    ngx_qsort(all, nobj, sizeof(ngx_http_tokenbiryani_robject_t),
              ngx_http_tokenbiryani_robject_cmp);

    for (i = 0; i < nobj; i++) {
        (void) ngx_http_tokenbiryani_store_object_in(ld->tmcf, ld->log,
                   (u_char *) all[i].id->str, all[i].id->len,
                   (u_char *) all[i].value->str, all[i].value->len, 1);
    }

    ngx_free(all);
    freeReplyObject(r);
}


static ngx_int_t
ngx_http_tokenbiryani_redis_read(redisContext *c,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_store_load_t *ld,
    char *err, size_t size)
{
    size_t       lens[5];
    ngx_uint_t   i;
    redisReply  *r, *sealed, *pair;
    const char  *argv[5];
    u_char       digest[32], epoch[33];
    char         name[TB_ID_MAX + 1];

    /* the data set: this zone holds it from now */

    r = ngx_http_tokenbiryani_redis_get(c, "GET", n->epoch, err, size);
    if (r == NULL) {
        return NGX_ERROR;
    }

    if (r->type == REDIS_REPLY_STRING && r->len && r->len < sizeof(epoch)) {
        ngx_cpystrn(epoch, (u_char *) r->str, r->len + 1);
        freeReplyObject(r);

    } else {
        freeReplyObject(r);

        ngx_http_tokenbiryani_rzone_epoch(epoch);

        argv[0] = "SET";
        argv[1] = n->epoch;
        argv[2] = (char *) epoch;
        argv[3] = "NX";
        lens[0] = 3;
        lens[1] = ngx_strlen(n->epoch);
        lens[2] = ngx_strlen(epoch);
        lens[3] = 2;

        r = ngx_http_tokenbiryani_redis_sync(c, 4, argv, lens, err, size);
        if (r == NULL) {
            return NGX_ERROR;
        }

        if (r->type == REDIS_REPLY_NIL) {
            /* another instance made one meanwhile: read again at sync */
            epoch[0] = '\0';
        }

        freeReplyObject(r);
    }

    ngx_http_tokenbiryani_store_epoch(&tmcf->zone, NULL, epoch);

    /* the minted keys */

    r = ngx_http_tokenbiryani_redis_get(c, "HGETALL", n->keys, err, size);
    if (r == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        pair = r->element[i + 1];

        if (r->element[i]->type != REDIS_REPLY_STRING
            || pair->type != REDIS_REPLY_STRING
            || ngx_http_tokenbiryani_rzone_digest(pair->str, pair->len,
                                                  digest)
               != NGX_OK
            || r->element[i]->len > TB_ID_MAX)
        {
            ngx_log_error(NGX_LOG_ERR, ld->log, 0,
                          "tokenbiryani: a key in Redis is unreadable and "
                          "left out");
            ld->skipped++;
            continue;
        }

        ngx_cpystrn((u_char *) name, (u_char *) r->element[i]->str,
                    r->element[i]->len + 1);

        if (ngx_http_tokenbiryani_store_load_key(ld, name, digest,
                                                 pair->str + 65)
            != 0)
        {
            return ngx_http_tokenbiryani_redis_full(r, err, size);
        }
    }

    freeReplyObject(r);

    /* the accounts added at runtime */

    argv[0] = "EVAL";
    argv[1] = ngx_http_tokenbiryani_redis_lua_accounts;
    argv[2] = "2";
    argv[3] = n->accounts;
    argv[4] = n->sealed;
    lens[0] = 4;
    lens[1] = sizeof(ngx_http_tokenbiryani_redis_lua_accounts) - 1;
    lens[2] = 1;
    lens[3] = ngx_strlen(n->accounts);
    lens[4] = ngx_strlen(n->sealed);

    r = ngx_http_tokenbiryani_redis_sync(c, 5, argv, lens, err, size);
    if (r == NULL) {
        return NGX_ERROR;
    }

    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2
        && r->element[0]->type == REDIS_REPLY_ARRAY
        && r->element[1]->type == REDIS_REPLY_ARRAY)
    {
        for (i = 0; i + 1 < r->element[0]->elements; i += 2) {
            redisReply  *id, *spec, *s;
            ngx_uint_t   j;

            id = r->element[0]->element[i];
            spec = r->element[0]->element[i + 1];
            sealed = r->element[1];
            s = NULL;

            for (j = 0; j + 1 < sealed->elements; j += 2) {
                if (sealed->element[j]->len == id->len
                    && ngx_memcmp(sealed->element[j]->str, id->str, id->len)
                       == 0)
                {
                    s = sealed->element[j + 1];
                    break;
                }
            }

            if (s == NULL || id->len > TB_ID_MAX) {
                ld->skipped++;
                continue;
            }

            ngx_cpystrn((u_char *) name, (u_char *) id->str, id->len + 1);

            if (ngx_http_tokenbiryani_store_load_account(ld, name, spec->str,
                                                         s->str)
                != 0)
            {
                return ngx_http_tokenbiryani_redis_full(r, err, size);
            }
        }
    }

    freeReplyObject(r);

    /* the batches and files the upstream keeps */

    ngx_http_tokenbiryani_redis_read_objects(c, n, ld);

    /* the strategy set at runtime */

    argv[0] = "HGET";
    argv[1] = n->meta;
    argv[2] = NGX_HTTP_TB_SETTING_STRATEGY;
    lens[0] = 4;
    lens[1] = ngx_strlen(n->meta);
    lens[2] = sizeof(NGX_HTTP_TB_SETTING_STRATEGY) - 1;

    r = ngx_http_tokenbiryani_redis_sync(c, 3, argv, lens, err, size);
    if (r == NULL) {
        return NGX_ERROR;
    }

    if (r->type == REDIS_REPLY_STRING && r->len
        && r->len <= TB_REC_ENVELOPE_LEN(64))
    {
        ngx_http_tokenbiryani_store_load_strategy(ld, r->str, r->len);
    }

    freeReplyObject(r);

    /* records adopted (store.adopt_unauthenticated), written back */

    ngx_http_tokenbiryani_redis_adopted_back(c, n, ld);

    /* this instance's history and spend */
    ngx_http_tokenbiryani_rhistory_read(c, n, tmcf, ld->log);

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_redis_load(ngx_shm_zone_t *shm_zone,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t fresh)
{
    ngx_int_t                            rc;
    ngx_pool_t                          *pool;
    redisContext                        *c;
    ngx_http_tokenbiryani_rnames_t       n;
    ngx_http_tokenbiryani_redis_conf_t  *conf;
    ngx_http_tokenbiryani_store_load_t   ld;
    char                                 err[512], why[600];

    if (!fresh) {
        return NGX_OK;
    }

    conf = tmcf->redis;

    pool = ngx_create_pool(1024, shm_zone->shm.log);
    if (pool == NULL
        || ngx_http_tokenbiryani_rnames(pool, &tmcf->store_ns,
                                        &tmcf->store_instance, &n)
           != NGX_OK)
    {
        if (pool) {
            ngx_destroy_pool(pool);
        }

        return NGX_ERROR;
    }

    err[0] = '\0';
    rc = NGX_ERROR;

    /* a second at least: a start is not the request path */
    c = ngx_http_tokenbiryani_redis_connect_sync(conf, err, sizeof(err));
    if (c == NULL) {
        goto failed;
    }

    ngx_memzero(&ld, sizeof(ld));
    ld.tmcf = tmcf;
    ld.log = shm_zone->shm.log;

    if (ngx_http_tokenbiryani_redis_read(c, tmcf, &n, &ld, err, sizeof(err))
        != NGX_OK)
    {
        ngx_http_tokenbiryani_store_adopted_free(&ld, 0);

        if (ngx_strcmp(err, "the zone is full") == 0) {
            /* said already, and not Redis's failure */
            redisFree(c);
            ngx_destroy_pool(pool);
            return NGX_ERROR;
        }

        goto failed;
    }

    ngx_http_tokenbiryani_rpeers_load(c, tmcf, &n);

    ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                  "tokenbiryani: the store %V (namespace \"%V\", instance "
                  "\"%V\") loaded: %ui minted keys, %ui accounts%s",
                  &conf->shown, &tmcf->store_ns, &tmcf->store_instance,
                  ld.keys, ld.accounts,
                  ld.skipped ? " (some left out, see above)" : "");

    rc = NGX_OK;

failed:

    if (c) {
        redisFree(c);
    }

    ngx_destroy_pool(pool);

    if (rc == NGX_OK) {
        return NGX_OK;
    }

    /* not an outage: the file's keys and accounts serve meanwhile */

    ngx_snprintf((u_char *) why, sizeof(why) - 1, "Redis %V: %s%Z",
                 &conf->shown, err);
    why[sizeof(why) - 1] = '\0';

    (void) ngx_http_tokenbiryani_store_report(&tmcf->zone, why,
                                              ngx_http_tokenbiryani_now_ms());

    ngx_log_error(NGX_LOG_WARN, shm_zone->shm.log, 0,
                  "tokenbiryani: the store is degraded: %s; the gateway "
                  "starts with the file's keys and accounts, and takes the "
                  "store's once Redis answers", why);

    return NGX_OK;
}
