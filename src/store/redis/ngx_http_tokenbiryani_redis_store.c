/*
 * The shared store in Redis (see ngx_http_tokenbiryani_redis_store.h):
 * what the workers do with it; its configuration and the master's read
 * are in ngx_http_tokenbiryani_redis_load.c.
 *
 * Under the namespace N:
 *
 *     N:keys       hash  name -> 64 hex digits of the digest, ' ', spec
 *     N:accounts   hash  id -> spec (JSON, no credential)
 *     N:sealed     hash  id -> the credential, sealed (AES-256-GCM)
 *     N:meta       hash  setting name -> value
 *     N:epoch      the data set's name: made when Redis has none, so an
 *                  instance that finds another (or none) knows Redis lost
 *                  or replaced what it had
 *     N:objects    hash  id -> the record of a batch or a file the
 *                  upstream keeps for one account (tb_batch.h)
 *     N:changes    the channel each write is announced on: "k name",
 *                  "a id", "s name", "b id"
 *
 * Every write is one script: the change and its announcement are one
 * step, and an insert of a name that exists or an update of one that does
 * not is told apart as sqlite tells it.
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


#define NGX_HTTP_TB_REDIS_ELECT_MS     1000


/*
 * KEYS[1] the hash; ARGV: name, channel, value, then the announcement
 * (signed by the gateway, tb_msg_sign) last in every script below
 */
static const char  ngx_http_tokenbiryani_lua_key_insert[] =
    "if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3]) == 0 then "
    "return 0 end "
    "redis.call('PUBLISH', ARGV[2], ARGV[4]) return 1";

/* the digest kept, the spec replaced */
static const char  ngx_http_tokenbiryani_lua_key_update[] =
    "local v = redis.call('HGET', KEYS[1], ARGV[1]) "
    "if not v then return 0 end "
    "redis.call('HSET', KEYS[1], ARGV[1], string.sub(v, 1, 65) .. ARGV[3]) "
    "redis.call('PUBLISH', ARGV[2], ARGV[4]) return 1";

static const char  ngx_http_tokenbiryani_lua_key_delete[] =
    "if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end "
    "redis.call('PUBLISH', ARGV[2], ARGV[3]) return 1";

/* KEYS: accounts, sealed; ARGV: id, channel, spec, sealed, create,
 * announcement; 0: it exists (create), 2: there is none (update) */
static const char  ngx_http_tokenbiryani_lua_account_put[] =
    "local e = redis.call('HEXISTS', KEYS[1], ARGV[1]) "
    "if ARGV[5] == '1' and e == 1 then return 0 end "
    "if ARGV[5] == '0' and e == 0 then return 2 end "
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) "
    "redis.call('HSET', KEYS[2], ARGV[1], ARGV[4]) "
    "redis.call('PUBLISH', ARGV[2], ARGV[6]) return 1";

static const char  ngx_http_tokenbiryani_lua_account_delete[] =
    "local n = redis.call('HDEL', KEYS[1], ARGV[1]) "
    "redis.call('HDEL', KEYS[2], ARGV[1]) "
    "if n == 0 then return 0 end "
    "redis.call('PUBLISH', ARGV[2], ARGV[3]) return 1";

/* KEYS: accounts, sealed; ARGV: id; {spec, sealed}, nil for none */
static const char  ngx_http_tokenbiryani_lua_account_get[] =
    "return {redis.call('HGET', KEYS[1], ARGV[1]), "
    "redis.call('HGET', KEYS[2], ARGV[1])}";

/* KEYS: accounts, sealed; ARGV: id, spec, sealed: put back if missing */
static const char  ngx_http_tokenbiryani_lua_account_back[] =
    "if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then "
    "redis.call('HSET', KEYS[2], ARGV[1], ARGV[3]) end return 1";

/* KEYS: objects; ARGV: id, channel, record (the announcement last) */
static const char  ngx_http_tokenbiryani_lua_object_put[] =
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) "
    "redis.call('PUBLISH', ARGV[2], ARGV[4]) return 1";

static const char  ngx_http_tokenbiryani_lua_object_delete[] =
    "redis.call('HDEL', KEYS[1], ARGV[1]) "
    "redis.call('PUBLISH', ARGV[2], ARGV[3]) return 1";

static const char  ngx_http_tokenbiryani_lua_setting[] =
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) "
    "redis.call('PUBLISH', ARGV[2], ARGV[4]) return 1";


/*
 * A record's write, by its job's op: the script, the letter its
 * announcement starts with, its hash (an offset in the names; accounts
 * have the sealed secrets' second), and what goes after its name and the
 * channel: a minted key's digest and spec, the spec, an account's sealed
 * secret and whether it is a create.  Another kind of record is a row.
 */
typedef struct {
    ngx_uint_t                          op;
    const char                         *script;
    char                                letter;
    size_t                              hash;
    unsigned                            sealed:1;
    unsigned                            spec:1;
    unsigned                            digest:1;
} ngx_http_tokenbiryani_rwrite_t;

#define ngx_http_tb_rname(name)                                               \
    offsetof(ngx_http_tokenbiryani_rnames_t, name)

static const ngx_http_tokenbiryani_rwrite_t  ngx_http_tokenbiryani_rwrites[] = {
    { NGX_HTTP_TB_JOB_KEY_INSERT, ngx_http_tokenbiryani_lua_key_insert, 'k',
      ngx_http_tb_rname(keys), 0, 1, 1 },
    { NGX_HTTP_TB_JOB_KEY_UPDATE, ngx_http_tokenbiryani_lua_key_update, 'k',
      ngx_http_tb_rname(keys), 0, 1, 0 },
    { NGX_HTTP_TB_JOB_KEY_DELETE, ngx_http_tokenbiryani_lua_key_delete, 'k',
      ngx_http_tb_rname(keys), 0, 0, 0 },
    { NGX_HTTP_TB_JOB_SETTING, ngx_http_tokenbiryani_lua_setting, 's',
      ngx_http_tb_rname(meta), 0, 1, 0 },
    { NGX_HTTP_TB_JOB_ACCOUNT_PUT, ngx_http_tokenbiryani_lua_account_put, 'a',
      ngx_http_tb_rname(accounts), 1, 1, 0 },
    { NGX_HTTP_TB_JOB_ACCOUNT_DELETE, ngx_http_tokenbiryani_lua_account_delete,
      'a', ngx_http_tb_rname(accounts), 1, 0, 0 },
    { NGX_HTTP_TB_JOB_OBJECT_PUT, ngx_http_tokenbiryani_lua_object_put, 'b',
      ngx_http_tb_rname(objects), 0, 1, 0 },
    { NGX_HTTP_TB_JOB_OBJECT_DELETE, ngx_http_tokenbiryani_lua_object_delete,
      'b', ngx_http_tb_rname(objects), 0, 0, 0 }
};


/* this worker's: its connection, and the subscriber when it is elected */
typedef struct {
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_http_tokenbiryani_rnames_t      n;

    ngx_http_tokenbiryani_redis_t       cmd;
    ngx_http_tokenbiryani_redis_t       sub;
    ngx_uint_t                          sub_started;
    ngx_uint_t                          cmd_up;     /* cmd was ready */
    ngx_uint_t                          resync;     /* once cmd is ready */

    ngx_event_t                         elect;

    /* jobs answered without Redis: from the event loop, never inline */
    ngx_event_t                         later_ev;
    ngx_http_tokenbiryani_job_t        *later;
    ngx_http_tokenbiryani_job_t       **later_last;

    /* a write back in flight: what it has put back */
    ngx_uint_t                          back_keys;
    ngx_uint_t                          back_accounts;
} ngx_http_tokenbiryani_rstore_t;


static ngx_http_tokenbiryani_rstore_t  ngx_http_tokenbiryani_rstore;

static int ngx_http_tokenbiryani_redis_flush_now(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_job_t *job);

const ngx_http_tokenbiryani_store_ops_t
    ngx_http_tokenbiryani_redis_ops =
{
    ngx_http_tokenbiryani_redis_load,
    ngx_http_tokenbiryani_redis_init_worker,
    ngx_http_tokenbiryani_redis_exit_worker,
    ngx_http_tokenbiryani_redis_post,
    ngx_http_tokenbiryani_redis_flush_now,
    &ngx_http_tokenbiryani_rpeers_ops
};


static ngx_int_t ngx_http_tokenbiryani_rstore_write(
    ngx_http_tokenbiryani_rstore_t *rs, ngx_http_tokenbiryani_job_t *job,
    const ngx_http_tokenbiryani_rwrite_t *w);
static void ngx_http_tokenbiryani_rstore_unreachable(
    ngx_http_tokenbiryani_rstore_t *rs, ngx_http_tokenbiryani_job_t *job);
static void ngx_http_tokenbiryani_rstore_gone(
    ngx_http_tokenbiryani_rstore_t *rs, const redisReply *all,
    ngx_uint_t accounts);
static ngx_int_t ngx_http_tokenbiryani_rstore_flush(
    ngx_http_tokenbiryani_rstore_t *rs, ngx_http_tokenbiryani_job_t *job);
static int ngx_http_tokenbiryani_rstore_flushed(
    ngx_http_tokenbiryani_job_t *job, const redisReply *reply);
static void ngx_http_tokenbiryani_rstore_verified(
    ngx_http_tokenbiryani_rstore_t *rs, const redisReply *msg);
static void ngx_http_tokenbiryani_rstore_resync(
    ngx_http_tokenbiryani_rstore_t *rs);
static void ngx_http_tokenbiryani_rstore_pull(
    ngx_http_tokenbiryani_rstore_t *rs);


ngx_http_tokenbiryani_redis_t *
ngx_http_tokenbiryani_redis_worker(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_rnames_t **names)
{
    ngx_http_tokenbiryani_rstore_t  *rs;

    rs = &ngx_http_tokenbiryani_rstore;

    if (tmcf->store_backend != NGX_HTTP_TB_STORE_REDIS || rs->tmcf == NULL) {
        return NULL;
    }

    *names = &rs->n;

    return &rs->cmd;
}


/* a worker's writes */

static void
ngx_http_tokenbiryani_rstore_later_handler(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_rstore_t *rs = ev->data;

    ngx_uint_t                    wrote;
    const char                   *err;
    ngx_http_tokenbiryani_job_t  *job, *next;

    job = rs->later;
    rs->later = NULL;
    rs->later_last = &rs->later;

    err = NULL;
    wrote = 0;

    for (next = job; next; next = next->next) {
        if (next->op == NGX_HTTP_TB_JOB_OPEN
            || next->op == NGX_HTTP_TB_JOB_USAGE
            || (next->rc == TB_STORE_ERROR && next->err[0] == '\0'))
        {
            /* not a write, or one not tried yet: says nothing of the
             * store */
            continue;
        }

        wrote = 1;

        if (next->rc == TB_STORE_ERROR && err == NULL) {
            err = next->err;
        }
    }

    if (wrote) {
        ngx_http_tokenbiryani_store_wrote(rs->tmcf, err, ev->log);
    }

    for ( /* void */ ; job; job = next) {
        next = job->next;
        job->done(job);
    }
}


/* a job answered from the event loop, soon, without Redis */
static void
ngx_http_tokenbiryani_rstore_later(ngx_http_tokenbiryani_rstore_t *rs,
    ngx_http_tokenbiryani_job_t *job)
{
    job->next = NULL;
    *rs->later_last = job;
    rs->later_last = &job->next;

    if (!rs->later_ev.posted) {
        ngx_post_event(&rs->later_ev, &ngx_posted_events);
    }
}


static void
ngx_http_tokenbiryani_rstore_written(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_job_t *job = data;

    ngx_http_tokenbiryani_rstore_t  *rs;

    rs = &ngx_http_tokenbiryani_rstore;

    if (reply == NULL) {
        job->rc = TB_STORE_ERROR;
        ngx_snprintf((u_char *) job->err, sizeof(job->err) - 1,
                     "Redis %V went away before it answered: %s%Z",
                     &rs->tmcf->store_shown, rd->error);

    } else if (reply->type == REDIS_REPLY_ERROR) {
        job->rc = TB_STORE_ERROR;
        ngx_snprintf((u_char *) job->err, sizeof(job->err) - 1,
                     "Redis %V: %s%Z", &rs->tmcf->store_shown, reply->str);

    } else if (job->op == NGX_HTTP_TB_JOB_FLUSH) {
        job->rc = ngx_http_tokenbiryani_rstore_flushed(job, reply);

    } else if (reply->type == REDIS_REPLY_INTEGER && reply->integer != 1) {
        job->rc = (reply->integer == 0
                   && (job->op == NGX_HTTP_TB_JOB_KEY_INSERT
                       || (job->op == NGX_HTTP_TB_JOB_ACCOUNT_PUT
                           && job->u.record.create)))
                  ? TB_STORE_EXISTS : TB_STORE_NONE;

    } else {
        job->rc = TB_STORE_OK;
    }

    job->err[sizeof(job->err) - 1] = '\0';

    ngx_http_tokenbiryani_store_wrote(rs->tmcf,
                                      job->rc == TB_STORE_ERROR ? job->err
                                                                : NULL,
                                      rd->log);

    job->done(job);
}


/*
 * The flush's answer: how far the store has the records and the events.
 * A batch the store had begun already was not written: the zone's flush
 * goes on from where the store is.  A store that had less than the zone
 * knew was written nothing, and the zone goes back to where it is.
 */
static int
ngx_http_tokenbiryani_rstore_flushed(ngx_http_tokenbiryani_job_t *job,
    const redisReply *reply)
{
    ngx_http_tokenbiryani_job_flush_t  *fl;

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->type != REDIS_REPLY_INTEGER
        || reply->element[2]->type != REDIS_REPLY_INTEGER
        || reply->element[0]->integer < 0
        || reply->element[1]->integer < 0)
    {
        ngx_cpystrn((u_char *) job->err, (u_char *) "the flush's script "
                    "answered unlike itself", sizeof(job->err));
        return TB_STORE_ERROR;
    }

    fl = &job->u.flush;

    if (reply->element[2]->integer) {
        fl->rewind = 1;
        fl->records_seq = (uint64_t) reply->element[0]->integer;
        fl->events_seq = (uint64_t) reply->element[1]->integer;
        return TB_STORE_OK;
    }

    if (fl->nrecords || fl->nusage) {
        fl->records_seq = (uint64_t) reply->element[0]->integer;
    }

    if (fl->nevents) {
        fl->events_seq = (uint64_t) reply->element[1]->integer;
    }

    return TB_STORE_OK;
}


/* the elected worker's flush: one script, sent without waiting */
static ngx_int_t
ngx_http_tokenbiryani_rstore_flush(ngx_http_tokenbiryani_rstore_t *rs,
    ngx_http_tokenbiryani_job_t *job)
{
    int           argc;
    void         *block;
    size_t       *lens;
    ngx_int_t     rc;
    const char  **argv;

    block = ngx_http_tokenbiryani_rflush_args(&rs->n, job, &argc, &argv,
                                              &lens);
    if (block == NULL) {
        ngx_cpystrn((u_char *) job->err, (u_char *) "no memory",
                    sizeof(job->err));
        ngx_http_tokenbiryani_rstore_later(rs, job);
        return NGX_OK;
    }

    rc = ngx_http_tokenbiryani_redis_send(&rs->cmd,
             ngx_http_tokenbiryani_rstore_written, job, argc, argv, lens, 0);

    /* hiredis has its own copy of the command */
    ngx_free(block);

    if (rc != NGX_OK) {
        if (rs->cmd.error[0] == '\0') {
            /* the worker's first connection is still being made: not a
             * failure of the store, the next tick flushes */
            job->err[0] = '\0';

        } else {
            ngx_snprintf((u_char *) job->err, sizeof(job->err) - 1,
                         "Redis %V is not reachable: %s%Z",
                         &rs->tmcf->store_shown, rs->cmd.error);
            job->err[sizeof(job->err) - 1] = '\0';
        }

        ngx_http_tokenbiryani_rstore_later(rs, job);
    }

    return NGX_OK;
}


/*
 * A flush of the event loop may have landed while the exiting worker's
 * last one was collected: what the store has is left out of it, or the
 * script would refuse the whole batch as begun already and the rest
 * would be lost.
 */
static void
ngx_http_tokenbiryani_rstore_skip_done(redisContext *c,
    ngx_http_tokenbiryani_rstore_t *rs, ngx_http_tokenbiryani_job_t *job)
{
    size_t                              lens[4];
    uint64_t                            done;
    ngx_uint_t                          k;
    redisReply                         *r;
    const char                         *argv[4];
    ngx_http_tokenbiryani_job_flush_t  *fl;

    fl = &job->u.flush;

    argv[0] = "HMGET";
    argv[1] = rs->n.flushed;
    argv[2] = "r";
    argv[3] = "e";

    for (k = 0; k < 4; k++) {
        lens[k] = ngx_strlen(argv[k]);
    }

    r = redisCommandArgv(c, 4, argv, lens);

    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        done = (r->element[0]->type == REDIS_REPLY_STRING)
               ? (uint64_t) ngx_atoof((u_char *) r->element[0]->str,
                                      r->element[0]->len) : 0;

        for (k = 0; k < fl->nrecords && fl->records[k].seq <= done; k++) {
            /* void */
        }

        fl->records += k;
        fl->nrecords -= k;

        for (k = 0; k < fl->nusage && fl->usage[k].seq <= done; k++) {
            /* void */
        }

        if (k) {
            fl->usage += k;
            fl->nusage -= k;
            ngx_http_tokenbiryani_flush_sum(job);
        }

        done = (r->element[1]->type == REDIS_REPLY_STRING)
               ? (uint64_t) ngx_atoof((u_char *) r->element[1]->str,
                                      r->element[1]->len) : 0;

        for (k = 0; k < fl->nevents && fl->events[k].seq <= done; k++) {
            /* void */
        }

        fl->events += k;
        fl->nevents -= k;
    }

    if (r) {
        freeReplyObject(r);
    }
}


/* the exiting worker's last flush: a connection of its own, waited for
 * (the worker serves nothing any more), bounded by the timeout */
static int
ngx_http_tokenbiryani_redis_flush_now(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_job_t *job)
{
    int                              argc, rc;
    void                            *block;
    size_t                          *lens;
    redisReply                      *r;
    redisContext                    *c;
    const char                     **argv;
    ngx_http_tokenbiryani_rstore_t  *rs;

    rs = &ngx_http_tokenbiryani_rstore;

    c = ngx_http_tokenbiryani_redis_connect_sync(tmcf->redis, job->err,
                                                 sizeof(job->err));
    if (c == NULL) {
        return TB_STORE_ERROR;
    }

    ngx_http_tokenbiryani_rstore_skip_done(c, rs, job);

    block = ngx_http_tokenbiryani_rflush_args(&rs->n, job, &argc, &argv,
                                              &lens);
    if (block == NULL) {
        redisFree(c);
        ngx_cpystrn((u_char *) job->err, (u_char *) "no memory",
                    sizeof(job->err));
        return TB_STORE_ERROR;
    }

    r = redisCommandArgv(c, argc, argv, lens);
    ngx_free(block);

    rc = (r && r->type != REDIS_REPLY_ERROR)
         ? ngx_http_tokenbiryani_rstore_flushed(job, r) : TB_STORE_ERROR;

    if (rc != TB_STORE_OK) {
        ngx_cpystrn((u_char *) job->err,
                    (u_char *) (r ? (r->str ? r->str : "an unexpected answer")
                                  : c->errstr), sizeof(job->err));
    }

    if (r) {
        freeReplyObject(r);
    }

    redisFree(c);

    return rc;
}


ngx_int_t
ngx_http_tokenbiryani_redis_post(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_job_t *job)
{
    ngx_uint_t                       i;
    ngx_http_tokenbiryani_rstore_t  *rs;

    rs = &ngx_http_tokenbiryani_rstore;

    if (rs->tmcf == NULL) {
        return NGX_ERROR;
    }

    job->next = NULL;

    for (i = 0;
         i < sizeof(ngx_http_tokenbiryani_rwrites)
             / sizeof(ngx_http_tokenbiryani_rwrite_t);
         i++)
    {
        if (ngx_http_tokenbiryani_rwrites[i].op == job->op) {
            return ngx_http_tokenbiryani_rstore_write(rs, job,
                       &ngx_http_tokenbiryani_rwrites[i]);
        }
    }

    switch (job->op) {

    case NGX_HTTP_TB_JOB_FLUSH:
        return ngx_http_tokenbiryani_rstore_flush(rs, job);

    case NGX_HTTP_TB_JOB_USAGE:
        if (ngx_http_tokenbiryani_rusage_read(&rs->cmd, &rs->n, job)
            != NGX_OK)
        {
            ngx_http_tokenbiryani_rstore_unreachable(rs, job);
        }

        return NGX_OK;

    default: /* NGX_HTTP_TB_JOB_OPEN: the connection is the worker's */
        job->rc = TB_STORE_OK;
        ngx_http_tokenbiryani_rstore_later(rs, job);
        return NGX_OK;
    }
}


/*
 * A record written as w says: one script that changes its hash and
 * publishes the announcement, signed now (a job sent again after Redis
 * was away is signed when it is sent): "k <name>", "s <setting>",
 * "a <id>", "b <id>"
 */

static ngx_int_t
ngx_http_tokenbiryani_rstore_write(ngx_http_tokenbiryani_rstore_t *rs,
    ngx_http_tokenbiryani_job_t *job, const ngx_http_tokenbiryani_rwrite_t *w)
{
    int          argc;
    u_char      *value;
    size_t       lens[12], n;
    ngx_int_t    rc;
    ngx_uint_t   i;
    const char  *argv[12];
    char         plain[TB_ID_MAX + 68], msg[TB_ID_MAX + 160];

    n = ngx_snprintf((u_char *) plain, sizeof(plain), "%c %s", w->letter,
                     job->u.record.name)
        - (u_char *) plain;

    if (tb_msg_sign(&rs->tmcf->rec, plain, n, ngx_http_tokenbiryani_now_ms(),
                    msg, sizeof(msg))
        == 0)
    {
        ngx_cpystrn((u_char *) job->err, (u_char *) "the announcement "
                    "cannot be signed", sizeof(job->err));
        return NGX_ERROR;
    }

    /* EVAL script numkeys KEYS... ARGV: name, channel, values...,
     * announcement */

    value = NULL;
    argc = 0;

    argv[argc++] = "EVAL";
    argv[argc++] = w->script;
    argv[argc++] = w->sealed ? "2" : "1";
    argv[argc++] = *(char **) ((u_char *) &rs->n + w->hash);

    if (w->sealed) {
        argv[argc++] = rs->n.sealed;
    }

    argv[argc++] = job->u.record.name;
    argv[argc++] = rs->n.changes;

    if (w->digest) {
        /* a minted key: the hex of its digest, then its spec */
        value = ngx_alloc(64 + 1 + ngx_strlen(job->u.record.spec) + 1,
                          ngx_cycle->log);
        if (value == NULL) {
            return NGX_ERROR;
        }

        ngx_hex_dump(value, (u_char *) job->u.record.digest, 32);
        value[64] = ' ';
        ngx_memcpy(value + 65, job->u.record.spec,
                   ngx_strlen(job->u.record.spec) + 1);
        argv[argc++] = (char *) value;

    } else if (w->spec) {
        argv[argc++] = job->u.record.spec;

        if (w->sealed) {
            argv[argc++] = job->u.record.sealed;
            argv[argc++] = job->u.record.create ? "1" : "0";
        }
    }

    argv[argc++] = msg;

    for (i = 0; i < (ngx_uint_t) argc; i++) {
        lens[i] = ngx_strlen(argv[i]);
    }

    rc = ngx_http_tokenbiryani_redis_send(&rs->cmd,
             ngx_http_tokenbiryani_rstore_written, job, argc, argv, lens, 0);

    if (value) {
        /* hiredis has its own copy of the command */
        ngx_free(value);
    }

    if (rc != NGX_OK) {
        ngx_http_tokenbiryani_rstore_unreachable(rs, job);
    }

    return NGX_OK;
}


/* Redis not answering now: the job waits for it, saying so */

static void
ngx_http_tokenbiryani_rstore_unreachable(ngx_http_tokenbiryani_rstore_t *rs,
    ngx_http_tokenbiryani_job_t *job)
{
    ngx_snprintf((u_char *) job->err, sizeof(job->err) - 1,
                 "Redis %V is not reachable: %s%Z", &rs->tmcf->store_shown,
                 rs->cmd.error[0] ? rs->cmd.error : "not connected yet");
    job->err[sizeof(job->err) - 1] = '\0';
    ngx_http_tokenbiryani_rstore_later(rs, job);
}


/*
 * Keeping the zone in step: the elected worker's subscriber.  A change
 * announced is read back on this worker's connection and put into the
 * zone; on every (re)subscription, the whole is compared.
 */

static ngx_uint_t
ngx_http_tokenbiryani_reply_is(const redisReply *r, const char *s)
{
    size_t  n;

    n = ngx_strlen(s);

    return r->type == REDIS_REPLY_STRING && r->len == n
           && ngx_strncasecmp((u_char *) r->str, (u_char *) s, n) == 0;
}


/* one change announced: what it names, read back */

typedef struct {
    ngx_uint_t                          kind;   /* 'k', 'a', 's' */
    size_t                              len;
    u_char                              name[1];
} ngx_http_tokenbiryani_rchange_t;


static uint64_t
ngx_http_tokenbiryani_rstore_session(const u_char *hex, size_t len)
{
    uint64_t  v;

    for (v = 0; len; len--, hex++) {
        v <<= 4;
        v |= (uint64_t) ((*hex >= 'a') ? *hex - 'a' + 10 : *hex - '0');
    }

    return v;
}


static void
ngx_http_tokenbiryani_rstore_changed(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rchange_t *ch = data;

    ngx_http_tokenbiryani_rstore_t  *rs;

    rs = &ngx_http_tokenbiryani_rstore;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        /* compared whole when the connection is back */
        rs->resync = 1;
        ngx_free(ch);
        return;
    }

    switch (ch->kind) {

    case 'k':
        ngx_http_tokenbiryani_rzone_key(rs->tmcf, ch->name, ch->len,
                                               reply);
        break;

    case 'f':
        if (reply->type == REDIS_REPLY_STRING) {
            ngx_http_tokenbiryani_rzone_owner(rs->tmcf,
                ngx_http_tokenbiryani_rstore_session(ch->name, ch->len),
                (u_char *) reply->str, reply->len);
        }

        break;

    case 'b':
        if (reply->type == REDIS_REPLY_STRING) {
            (void) ngx_http_tokenbiryani_store_object_in(rs->tmcf,
                       ngx_cycle->log, ch->name, ch->len,
                       (u_char *) reply->str, reply->len, 0);

        } else if (reply->type == REDIS_REPLY_NIL) {
            /* removed, by a gateway that signed its saying so */
            ngx_http_tokenbiryani_store_object_gone(rs->tmcf, ch->name,
                                                    ch->len);
        }

        break;

    case 'a':
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) {
            ngx_http_tokenbiryani_rzone_account(rs->tmcf, ch->name,
                ch->len, reply->element[0], reply->element[1]);
        }

        break;

    default:
        if (ch->len == sizeof(NGX_HTTP_TB_SETTING_STRATEGY) - 1
            && ngx_strncmp(ch->name, NGX_HTTP_TB_SETTING_STRATEGY, ch->len)
               == 0)
        {
            ngx_http_tokenbiryani_rzone_strategy(rs->tmcf, reply);
        }

        break;
    }

    ngx_free(ch);
}


static void
ngx_http_tokenbiryani_rstore_announced(ngx_http_tokenbiryani_rstore_t *rs,
    const redisReply *msg)
{
    int                               i, argc;
    size_t                            lens[6];
    const char                       *argv[6];
    ngx_http_tokenbiryani_rchange_t  *ch;
    u_char                            key[128];

    if (msg->type != REDIS_REPLY_STRING || msg->len < 3 || msg->str[1] != ' ')
    {
        return;
    }

    if (msg->str[0] == 'm' || msg->str[0] == 'o' || msg->str[0] == 'u'
        || msg->str[0] == 'w')
    {
        /*
         * another gateway's news of an account or of the organisation it
         * belongs to, what its keys and conversations ran up, or its
         * asking for ours: in the message
         */
        ngx_http_tokenbiryani_rpeers_message(rs->tmcf, msg->str[0],
                                             (u_char *) msg->str + 2,
                                             msg->len - 2);
        return;
    }

    if (msg->len - 2 > TB_ID_MAX + 64) {
        return;
    }

    ch = ngx_alloc(sizeof(ngx_http_tokenbiryani_rchange_t) + msg->len,
                   ngx_cycle->log);
    if (ch == NULL) {
        return;
    }

    ch->kind = (u_char) msg->str[0];
    ch->len = msg->len - 2;
    ngx_memcpy(ch->name, msg->str + 2, ch->len);
    ch->name[ch->len] = '\0';

    switch (ch->kind) {

    case 'f':
        /* a conversation's new owner: 16 lowercase hex digits */
        for (i = 0; i < 16 && (size_t) i < ch->len; i++) {
            if (!((ch->name[i] >= '0' && ch->name[i] <= '9')
                  || (ch->name[i] >= 'a' && ch->name[i] <= 'f')))
            {
                break;
            }
        }

        if (ch->len != 16 || i != 16) {
            ngx_free(ch);
            return;
        }

        argv[0] = "GET";
        argv[1] = (char *) key;
        ngx_snprintf(key, sizeof(key), "%s:aff:%s%Z", rs->n.ns, ch->name);
        argc = 2;
        break;

    case 'k':
    case 's':
    case 'b':
        argv[0] = "HGET";
        argv[1] = (ch->kind == 'k') ? rs->n.keys
                  : (ch->kind == 'b') ? rs->n.objects : rs->n.meta;
        argv[2] = (char *) ch->name;
        argc = 3;
        break;

    case 'a':
        argv[0] = "EVAL";
        argv[1] = ngx_http_tokenbiryani_lua_account_get;
        argv[2] = "2";
        argv[3] = rs->n.accounts;
        argv[4] = rs->n.sealed;
        argv[5] = (char *) ch->name;
        argc = 6;
        break;

    default:
        ngx_free(ch);
        return;
    }

    for (i = 0; i < argc; i++) {
        lens[i] = ngx_strlen(argv[i]);
    }

    if (ngx_http_tokenbiryani_redis_send(&rs->cmd,
            ngx_http_tokenbiryani_rstore_changed, ch, argc, argv, lens, 0)
        != NGX_OK)
    {
        rs->resync = 1;
        ngx_free(ch);
    }
}


static void
ngx_http_tokenbiryani_rstore_message(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rstore_t *rs = data;

    if (reply == NULL) {
        /* the subscription ends with its connection */
        return;
    }

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3) {
        return;
    }

    if (ngx_http_tokenbiryani_reply_is(reply->element[0], "subscribe")) {
        /* from now no change is missed: what came before, compared */
        ngx_http_tokenbiryani_rstore_resync(rs);

        /* and what the other instances ran up, told again */
        ngx_http_tokenbiryani_rpeers_subscribed();
        return;
    }

    if (ngx_http_tokenbiryani_reply_is(reply->element[0], "message")) {
        ngx_http_tokenbiryani_rstore_verified(rs, reply->element[2]);
    }
}


/*
 * A message on the channel, as another instance of this gateway signed it
 * (tb_msg_sign), passed on as "<type> <body>"; one that does not verify,
 * or is older than TB_MSG_SKEW_MS, is ignored and counted (and said once
 * a minute, at most).
 */
static void
ngx_http_tokenbiryani_rstore_verified(ngx_http_tokenbiryani_rstore_t *rs,
    const redisReply *msg)
{
    size_t       blen;
    int64_t      now;
    redisReply   plain;
    const char  *body;

    static ngx_msec_t  said;

    now = ngx_http_tokenbiryani_now_ms();

    if (msg->type != REDIS_REPLY_STRING
        || tb_msg_verify(&rs->tmcf->rec, msg->str, msg->len, now, &body,
                         &blen)
           != 0)
    {
        ngx_http_tokenbiryani_count_refused(&rs->tmcf->zone, 1);

        if (said == 0 || ngx_current_msec - said > 60000) {
            said = ngx_current_msec;
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "tokenbiryani: a message on %s that no instance "
                          "of this gateway signed (or signed more than %ds "
                          "ago) is ignored; such messages are counted in "
                          "/admin/status (store.refused.messages)",
                          rs->n.changes, TB_MSG_SKEW_MS / 1000);
        }

        return;
    }

    /* the body moved up behind its type: "<type> <body>", in place */

    ngx_memmove(msg->str + 2, body, blen);

    plain = *msg;
    plain.len = blen + 2;

    ngx_http_tokenbiryani_rstore_announced(rs, &plain);
}


static void
ngx_http_tokenbiryani_rstore_sub_ready(ngx_http_tokenbiryani_redis_t *rd)
{
    ngx_http_tokenbiryani_rstore_t *rs = rd->data;

    size_t       lens[2];
    const char  *argv[2];

    argv[0] = "SUBSCRIBE";
    argv[1] = rs->n.changes;
    lens[0] = 9;
    lens[1] = ngx_strlen(rs->n.changes);

    if (ngx_http_tokenbiryani_redis_send(rd,
            ngx_http_tokenbiryani_rstore_message, rs, 2, argv, lens, 1)
        != NGX_OK)
    {
        ngx_http_tokenbiryani_redis_drop(rd, "SUBSCRIBE cannot be sent");
    }
}


/* the whole compared: first the data set's name */

static ngx_uint_t
ngx_http_tokenbiryani_rstore_has(const redisReply *all, const u_char *name,
    size_t len)
{
    size_t  i;

    for (i = 0; all->type == REDIS_REPLY_ARRAY && i + 1 < all->elements;
         i += 2)
    {
        if (all->element[i]->type == REDIS_REPLY_STRING
            && all->element[i]->len == len
            && ngx_memcmp(all->element[i]->str, name, len) == 0)
        {
            return 1;
        }
    }

    return 0;
}


static void
ngx_http_tokenbiryani_rstore_pulled_keys(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rstore_t *rs = data;

    size_t  i;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        rs->resync = 1;
        return;
    }

    for (i = 0; i + 1 < reply->elements; i += 2) {
        if (reply->element[i]->type == REDIS_REPLY_STRING) {
            ngx_http_tokenbiryani_rzone_key(rs->tmcf,
                (u_char *) reply->element[i]->str, reply->element[i]->len,
                reply->element[i + 1]);
        }
    }

    /* what the zone has and Redis has not: revoked meanwhile */
    ngx_http_tokenbiryani_rstore_gone(rs, reply, 0);
}


static void
ngx_http_tokenbiryani_rstore_pulled_accounts(
    ngx_http_tokenbiryani_redis_t *rd, redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rstore_t *rs = data;

    size_t       i, j;
    redisReply  *specs, *sealed, *s;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 2
        || reply->element[0]->type != REDIS_REPLY_ARRAY
        || reply->element[1]->type != REDIS_REPLY_ARRAY)
    {
        rs->resync = 1;
        return;
    }

    specs = reply->element[0];
    sealed = reply->element[1];

    for (i = 0; i + 1 < specs->elements; i += 2) {
        s = NULL;

        for (j = 0; j + 1 < sealed->elements; j += 2) {
            if (sealed->element[j]->len == specs->element[i]->len
                && ngx_memcmp(sealed->element[j]->str, specs->element[i]->str,
                              specs->element[i]->len)
                   == 0)
            {
                s = sealed->element[j + 1];
                break;
            }
        }

        if (s) {
            ngx_http_tokenbiryani_rzone_account(rs->tmcf,
                (u_char *) specs->element[i]->str, specs->element[i]->len,
                specs->element[i + 1], s);
        }
    }

    /* what the zone has and Redis has not: removed meanwhile */
    ngx_http_tokenbiryani_rstore_gone(rs, specs, 1);
}


/*
 * The keys (or accounts) the zone has that all, the hash Redis has, lacks:
 * put into the zone as gone
 */

static void
ngx_http_tokenbiryani_rstore_gone(ngx_http_tokenbiryani_rstore_t *rs,
    const redisReply *all, ngx_uint_t accounts)
{
    ngx_str_t                           *name;
    ngx_uint_t                           i, n;
    ngx_pool_t                          *pool;
    ngx_array_t                          views;
    ngx_http_tokenbiryani_rkey_view_t   *k;
    ngx_http_tokenbiryani_racct_view_t  *a;

    pool = ngx_create_pool(4096, ngx_cycle->log);
    if (pool == NULL) {
        return;
    }

    if ((accounts
         ? ngx_http_tokenbiryani_raccts_copy(&rs->tmcf->zone, pool, &views,
                                             NULL)
         : ngx_http_tokenbiryani_rkeys_copy(&rs->tmcf->zone, pool, &views,
                                            NULL))
        != NGX_OK)
    {
        ngx_destroy_pool(pool);
        return;
    }

    n = views.nelts;
    k = views.elts;
    a = views.elts;

    for (i = 0; i < n; i++) {
        name = accounts ? &a[i].id : &k[i].name;

        if (ngx_http_tokenbiryani_rstore_has(all, name->data, name->len)) {
            continue;
        }

        if (accounts) {
            ngx_http_tokenbiryani_rzone_account(rs->tmcf, name->data,
                                                name->len, NULL, NULL);
        } else {
            ngx_http_tokenbiryani_rzone_key(rs->tmcf, name->data, name->len,
                                            NULL);
        }
    }

    ngx_destroy_pool(pool);
}


static void
ngx_http_tokenbiryani_rstore_pulled_strategy(
    ngx_http_tokenbiryani_redis_t *rd, redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rstore_t *rs = data;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        rs->resync = 1;
        return;
    }

    ngx_http_tokenbiryani_rzone_strategy(rs->tmcf, reply);
}


static void
ngx_http_tokenbiryani_rstore_pull(ngx_http_tokenbiryani_rstore_t *rs)
{
    size_t       lens[5];
    ngx_uint_t   i;
    const char  *argv[5];

    argv[0] = "HGETALL";
    argv[1] = rs->n.keys;

    for (i = 0; i < 2; i++) {
        lens[i] = ngx_strlen(argv[i]);
    }

    if (ngx_http_tokenbiryani_redis_send(&rs->cmd,
            ngx_http_tokenbiryani_rstore_pulled_keys, rs, 2, argv, lens, 0)
        != NGX_OK)
    {
        rs->resync = 1;
        return;
    }

    argv[0] = "EVAL";
    argv[1] = ngx_http_tokenbiryani_redis_lua_accounts;
    argv[2] = "2";
    argv[3] = rs->n.accounts;
    argv[4] = rs->n.sealed;

    for (i = 0; i < 5; i++) {
        lens[i] = ngx_strlen(argv[i]);
    }

    if (ngx_http_tokenbiryani_redis_send(&rs->cmd,
            ngx_http_tokenbiryani_rstore_pulled_accounts, rs, 5, argv, lens,
            0)
        != NGX_OK)
    {
        rs->resync = 1;
        return;
    }

    argv[0] = "HGET";
    argv[1] = rs->n.meta;
    argv[2] = NGX_HTTP_TB_SETTING_STRATEGY;

    for (i = 0; i < 3; i++) {
        lens[i] = ngx_strlen(argv[i]);
    }

    if (ngx_http_tokenbiryani_redis_send(&rs->cmd,
            ngx_http_tokenbiryani_rstore_pulled_strategy, rs, 3, argv, lens,
            0)
        != NGX_OK)
    {
        rs->resync = 1;
    }
}


/*
 * Redis has another data set than the zone's, or none: it restarted
 * empty, or was restored.  What this instance holds goes back where
 * Redis has nothing of that name, then a new data set name, then the
 * whole is read as usual.
 */

static void
ngx_http_tokenbiryani_rstore_ignore(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
}


static void
ngx_http_tokenbiryani_rstore_renamed(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rstore_t *rs = data;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        rs->resync = 1;
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "tokenbiryani: Redis %V did not have this gateway's data "
                  "set (restarted empty, or restored): this instance wrote "
                  "back what Redis lacked of its %ui minted keys and %ui "
                  "accounts", &rs->tmcf->store_shown, rs->back_keys,
                  rs->back_accounts);

    ngx_http_tokenbiryani_rstore_resync(rs);
}


static void
ngx_http_tokenbiryani_rstore_back(ngx_http_tokenbiryani_rstore_t *rs,
    const u_char *redis_epoch)
{
    u_char                              *p;
    size_t                               lens[6];
    ngx_uint_t                           i, j;
    ngx_pool_t                          *pool;
    ngx_array_t                          keys, accts;
    const char                          *argv[6];
    ngx_http_tokenbiryani_rkey_view_t   *k;
    ngx_http_tokenbiryani_racct_view_t  *a;
    u_char                               epoch[33], cur[64];
    ngx_str_t                            rec;

    pool = ngx_create_pool(4096, ngx_cycle->log);
    if (pool == NULL) {
        return;
    }

    if (ngx_http_tokenbiryani_rkeys_copy(&rs->tmcf->zone, pool, &keys, NULL)
        != NGX_OK
        || ngx_http_tokenbiryani_raccts_copy(&rs->tmcf->zone, pool, &accts,
                                             NULL)
           != NGX_OK)
    {
        ngx_destroy_pool(pool);
        return;
    }

    rs->back_keys = 0;
    rs->back_accounts = 0;

    k = keys.elts;

    for (i = 0; i < keys.nelts; i++) {
        p = ngx_pnalloc(pool, 65 + k[i].spec.len + 1);
        if (p == NULL) {
            break;
        }

        ngx_hex_dump(p, k[i].digest, 32);
        p[64] = ' ';
        ngx_memcpy(p + 65, k[i].spec.data, k[i].spec.len + 1);

        argv[0] = "HSETNX";
        argv[1] = rs->n.keys;
        argv[2] = (char *) k[i].name.data;
        argv[3] = (char *) p;

        for (j = 0; j < 4; j++) {
            lens[j] = ngx_strlen(argv[j]);
        }

        lens[2] = k[i].name.len;

        if (ngx_http_tokenbiryani_redis_send(&rs->cmd,
                ngx_http_tokenbiryani_rstore_ignore, NULL, 4, argv, lens, 0)
            != NGX_OK)
        {
            break;
        }

        rs->back_keys++;
    }

    a = accts.elts;

    for (i = 0; i < accts.nelts; i++) {
        argv[0] = "EVAL";
        argv[1] = ngx_http_tokenbiryani_lua_account_back;
        argv[2] = "2";
        argv[3] = rs->n.accounts;
        argv[4] = rs->n.sealed;
        argv[5] = (char *) a[i].id.data;

        for (j = 0; j < 6; j++) {
            lens[j] = ngx_strlen(argv[j]);
        }

        {
        const char  *av[8];
        size_t       al[8];

        for (j = 0; j < 6; j++) {
            av[j] = argv[j];
            al[j] = lens[j];
        }

        av[6] = (char *) a[i].spec.data;
        al[6] = a[i].spec.len;
        av[7] = (char *) a[i].sealed.data;
        al[7] = a[i].sealed.len;

        if (ngx_http_tokenbiryani_redis_send(&rs->cmd,
                ngx_http_tokenbiryani_rstore_ignore, NULL, 8, av, al, 0)
            != NGX_OK)
        {
            break;
        }
        }

        rs->back_accounts++;
    }

    (void) ngx_http_tokenbiryani_settings_strategy(&rs->tmcf->zone, cur,
                                                   sizeof(cur));
    if (cur[0]
        && ngx_http_tokenbiryani_record_wrap(pool, rs->tmcf, TB_REC_SETTING,
               (u_char *) NGX_HTTP_TB_SETTING_STRATEGY,
               sizeof(NGX_HTTP_TB_SETTING_STRATEGY) - 1, NULL, 0, cur,
               ngx_strlen(cur), &rec)
           == NGX_OK)
    {
        argv[0] = "HSETNX";
        argv[1] = rs->n.meta;
        argv[2] = NGX_HTTP_TB_SETTING_STRATEGY;
        argv[3] = (char *) rec.data;

        for (j = 0; j < 4; j++) {
            lens[j] = ngx_strlen(argv[j]);
        }

        (void) ngx_http_tokenbiryani_redis_send(&rs->cmd,
                   ngx_http_tokenbiryani_rstore_ignore, NULL, 4, argv, lens,
                   0);
    }

    ngx_destroy_pool(pool);

    /* a new name for what Redis holds now: every other instance finds it
     * is not the one it has, and writes back what it holds too */

    if (redis_epoch == NULL) {
        ngx_http_tokenbiryani_rzone_epoch(epoch);

    } else {
        ngx_cpystrn(epoch, (u_char *) redis_epoch, sizeof(epoch));
    }

    ngx_http_tokenbiryani_store_epoch(&rs->tmcf->zone, NULL, epoch);

    argv[0] = "SET";
    argv[1] = rs->n.epoch;
    argv[2] = (char *) epoch;

    for (j = 0; j < 3; j++) {
        lens[j] = ngx_strlen(argv[j]);
    }

    if (ngx_http_tokenbiryani_redis_send(&rs->cmd,
            ngx_http_tokenbiryani_rstore_renamed, rs, 3, argv, lens, 0)
        != NGX_OK)
    {
        rs->resync = 1;
    }
}


static void
ngx_http_tokenbiryani_rstore_epoch(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rstore_t *rs = data;

    u_char  mine[33];

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        rs->resync = 1;
        return;
    }

    ngx_http_tokenbiryani_store_epoch(&rs->tmcf->zone, mine, NULL);

    if (reply->type != REDIS_REPLY_STRING || reply->len == 0
        || reply->len >= sizeof(mine))
    {
        /* nothing at all: it restarted empty */
        ngx_http_tokenbiryani_rstore_back(rs, NULL);
        return;
    }

    if (mine[0] == '\0') {
        /* the master could not read it: this zone takes what Redis has */
        ngx_cpystrn(mine, (u_char *) reply->str, reply->len + 1);
        ngx_http_tokenbiryani_store_epoch(&rs->tmcf->zone, NULL, mine);
        ngx_http_tokenbiryani_rstore_pull(rs);
        return;
    }

    if (reply->len == ngx_strlen(mine)
        && ngx_memcmp(reply->str, mine, reply->len) == 0)
    {
        ngx_http_tokenbiryani_rstore_pull(rs);
        return;
    }

    /* another data set: what this instance holds is merged into it */
    ngx_cpystrn(mine, (u_char *) reply->str, reply->len + 1);
    ngx_http_tokenbiryani_rstore_back(rs, mine);
}


static void
ngx_http_tokenbiryani_rstore_resync(ngx_http_tokenbiryani_rstore_t *rs)
{
    size_t       lens[2];
    const char  *argv[2];

    rs->resync = 0;

    argv[0] = "GET";
    argv[1] = rs->n.epoch;
    lens[0] = 3;
    lens[1] = ngx_strlen(rs->n.epoch);

    if (ngx_http_tokenbiryani_redis_send(&rs->cmd,
            ngx_http_tokenbiryani_rstore_epoch, rs, 2, argv, lens, 0)
        != NGX_OK)
    {
        rs->resync = 1;
    }
}


/* the worker's connection */

static void
ngx_http_tokenbiryani_rstore_cmd_ready(ngx_http_tokenbiryani_redis_t *rd)
{
    ngx_http_tokenbiryani_rstore_t *rs = rd->data;

    rs->cmd_up = 1;

    ngx_http_tokenbiryani_store_wrote(rs->tmcf, NULL, rd->log);

    if (rs->resync && rs->sub.state == NGX_HTTP_TB_REDIS_READY) {
        ngx_http_tokenbiryani_rstore_resync(rs);
    }
}


static void
ngx_http_tokenbiryani_rstore_cmd_down(ngx_http_tokenbiryani_redis_t *rd)
{
    ngx_http_tokenbiryani_rstore_t *rs = rd->data;

    char  why[600];

    rs->resync = 1;

    if (!rs->cmd_up) {
        /*
         * a try to connect again that failed: said when the connection
         * was lost (or by the master, at start), not again with each try
         * - another worker back meanwhile would make the log flap
         */
        return;
    }

    rs->cmd_up = 0;

    ngx_snprintf((u_char *) why, sizeof(why) - 1, "Redis %V: %s%Z",
                 &rs->tmcf->store_shown, rd->error);
    why[sizeof(why) - 1] = '\0';

    ngx_http_tokenbiryani_store_wrote(rs->tmcf, why, rd->log);
}


static void
ngx_http_tokenbiryani_rstore_sub_down(ngx_http_tokenbiryani_redis_t *rd)
{
    ngx_http_tokenbiryani_rstore_t *rs = rd->data;

    /* changes may be missed until it is back: compared then */
    rs->resync = 1;
}


static void
ngx_http_tokenbiryani_rstore_elect(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_rstore_t *rs = ev->data;

    if (!rs->sub_started
        && ngx_http_tokenbiryani_store_flusher(&rs->tmcf->zone, ngx_pid))
    {
        rs->sub_started = 1;
        ngx_http_tokenbiryani_redis_start(&rs->sub);
        ngx_http_tokenbiryani_rpeers_start(rs->tmcf, ev->log);
    }

    if (rs->resync && rs->sub.state == NGX_HTTP_TB_REDIS_READY
        && rs->cmd.state == NGX_HTTP_TB_REDIS_READY)
    {
        ngx_http_tokenbiryani_rstore_resync(rs);
    }

    ngx_add_timer(ev, NGX_HTTP_TB_REDIS_ELECT_MS);
}


ngx_int_t
ngx_http_tokenbiryani_redis_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_http_tokenbiryani_rstore_t  *rs;

    rs = &ngx_http_tokenbiryani_rstore;

    if (ngx_http_tokenbiryani_rnames(cycle->pool, &tmcf->store_ns,
                                     &tmcf->store_instance, &rs->n)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    rs->tmcf = tmcf;
    rs->later_last = &rs->later;

    rs->later_ev.handler = ngx_http_tokenbiryani_rstore_later_handler;
    rs->later_ev.data = rs;
    rs->later_ev.log = cycle->log;

    rs->cmd.conf = tmcf->redis;
    rs->cmd.log = cycle->log;
    rs->cmd.ready = ngx_http_tokenbiryani_rstore_cmd_ready;
    rs->cmd.down = ngx_http_tokenbiryani_rstore_cmd_down;
    rs->cmd.data = rs;

    rs->sub.conf = tmcf->redis;
    rs->sub.log = cycle->log;
    rs->sub.ready = ngx_http_tokenbiryani_rstore_sub_ready;
    rs->sub.down = ngx_http_tokenbiryani_rstore_sub_down;
    rs->sub.data = rs;

    ngx_http_tokenbiryani_rpeers_init_worker(&rs->cmd, &rs->n);
    ngx_http_tokenbiryani_redis_start(&rs->cmd);

    ngx_http_tokenbiryani_timer_init(&rs->elect,
                                     ngx_http_tokenbiryani_rstore_elect, rs,
                                     cycle->log);

    ngx_add_timer(&rs->elect, 1);

    return NGX_OK;
}


void
ngx_http_tokenbiryani_redis_exit_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_http_tokenbiryani_rstore_t  *rs;

    rs = &ngx_http_tokenbiryani_rstore;

    if (rs->tmcf == NULL) {
        return;
    }

    if (rs->elect.timer_set) {
        ngx_del_timer(&rs->elect);
    }

    ngx_http_tokenbiryani_rpeers_stop();
    ngx_http_tokenbiryani_redis_stop(&rs->sub);
    ngx_http_tokenbiryani_redis_stop(&rs->cmd);

    /* the subscriber's worker of the next generation takes over */
    ngx_http_tokenbiryani_store_unelect(&tmcf->zone, ngx_pid);
}
