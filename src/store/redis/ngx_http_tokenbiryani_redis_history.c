/*
 * The zone's history and spend in Redis (see
 * ngx_http_tokenbiryani_redis_history.h).
 *
 * Under the namespace N, for the instance I:
 *
 *     N:i:I:records     list: 8 bytes of sequence (little-endian), then a
 *                       record as the zone holds it; the newest kept
 *     N:i:I:events      list: the same, for events
 *     N:i:I:slots       hash: slot -> account id, so history outlives slots
 *     N:i:I:layout      the build's record layout: another's is not read
 *     N:i:I:flushed     hash: r, e -> the newest record and event written,
 *                       so a flush sent again (its answer lost) counts its
 *                       usage once
 *     N:i:I:ledgers     hash: a:<account id> or k:<key hash> -> ledger
 *     N:i:I:sessions    hash: conversation -> its state;
 *     N:i:I:sessions_t  and by when it was last seen, for pruning
 *     N:instances       sorted set: instance -> when it last flushed
 *
 * and shared by every instance, the usage history in buckets of 1 minute,
 * 15 minutes, 1 hour and 1 day, each kept as long as /admin/usage reads it:
 *
 *     N:u:<seconds>:<start>   hash: account US model US key ->
 *                             "requests,input,output,cache_read,
 *                              cache_write,cost,unpriced,errors,cache_hits"
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_redis.h"
#include "ngx_http_tokenbiryani_redis_history.h"


#define NGX_HTTP_TB_RUSAGE_VALUES      9
#define NGX_HTTP_TB_RUSAGE_BUCKETS     2000     /* read per answer, at most */
#define NGX_HTTP_TB_RHIST_CHUNK        512      /* conversations per HMGET */


/*
 * KEYS: records, events, slots, layout, flushed, ledgers, sessions,
 * sessions_t, instances.  ARGV: nslots, nrecords, nevents, nledgers,
 * nsessions, nusage, records kept, events kept, now (ms), instance,
 * namespace, layout, conversations kept, the first and last request's
 * (whose usage it carries, every one; the records of some of them) and
 * event's sequence, the request and event the zone knows the store has;
 * then slot, id; per record its blob; per usage bucket
 * (a minute of one group) start (s), group, values; per event its blob;
 * per ledger field, blob; per conversation field, last seen (ms), blob.
 *
 * A batch whose first request the store has already (the answer to the
 * last flush was lost, and it is sent again with more) is not written:
 * the answer says how far the store has each, and the next flush goes on
 * from there, so usage is never counted twice.
 *
 * A store that has less than the zone knows it wrote (Redis restarted
 * empty, or was restored from an older copy) is written nothing: the
 * answer says how far it has each, and the zone sends again what it
 * still holds after that, its usage with it - counted once, as Redis
 * lost it with the rest.  Another build's history (its layout) is let
 * go: its numbers are not this zone's.
 *
 * Answers {records, events written up to, 1 when the store had less}.
 */
static const char  ngx_http_tokenbiryani_lua_flush[] =
    "local i = 1 "
    "local function arg() local v = ARGV[i]; i = i + 1; return v end "
    "local nslot, nrec, nev = tonumber(arg()), tonumber(arg()), "
    "tonumber(arg()) "
    "local nled, nses, nuse = tonumber(arg()), tonumber(arg()), "
    "tonumber(arg()) "
    "local keepr, keepe, now = tonumber(arg()), tonumber(arg()), "
    "tonumber(arg()) "
    "local inst, ns = arg(), arg() "
    "local layout = arg() "
    "local maxses = tonumber(arg()) "
    "local rfirst, rlast = tonumber(arg()), tonumber(arg()) "
    "local efirst, elast = tonumber(arg()), tonumber(arg()) "
    "local rfrom, efrom = tonumber(arg()), tonumber(arg()) "
    "if redis.call('GET', KEYS[4]) ~= layout then "
    "  redis.call('DEL', KEYS[1], KEYS[2]) "
    "  redis.call('HDEL', KEYS[5], 'r', 'e') "
    "  redis.call('SET', KEYS[4], layout) "
    "end "
    "local doner = tonumber(redis.call('HGET', KEYS[5], 'r') or '0') "
    "local donee = tonumber(redis.call('HGET', KEYS[5], 'e') or '0') "
    "if doner < rfrom or donee < efrom then return {doner, donee, 1} end "
    "redis.call('ZADD', KEYS[9], now, inst) "
    "for n = 1, nslot do local s = arg(); "
    "redis.call('HSET', KEYS[3], s, arg()) end "
    "local function push(key, n, fresh) "
    "  local j = i "
    "  i = i + n "
    "  if not fresh then return end "
    "  while j < i do "
    "    local e = math.min(j + 999, i - 1) "
    "    redis.call('RPUSH', key, unpack(ARGV, j, e)) "
    "    j = e + 1 "
    "  end "
    "end "
    "local freshr = rlast > 0 and rfirst > doner "
    "push(KEYS[1], nrec, freshr) "
    "if freshr then redis.call('LTRIM', KEYS[1], -keepr, -1); "
    "doner = rlast; "
    "redis.call('HSET', KEYS[5], 'r', string.format('%d', doner)) end "
    "local res = {60, 900, 3600, 86400} "
    "local ttl = {180000, 180000, 2768400, 7948800} "
    "for n = 1, nuse do "
    "  local t, g, v = tonumber(arg()), arg(), arg() "
    "  if freshr then "
    "    local add = {} "
    "    for x in string.gmatch(v, '[^,]+') do add[#add + 1] = tonumber(x) "
    "end "
    "    for r = 1, 4 do "
    "      local k = ns .. ':u:' .. res[r] .. ':' .. (t - t % res[r]) "
    "      local old = redis.call('HGET', k, g) "
    "      local o = {} "
    "      if old then for x in string.gmatch(old, '[^,]+') do "
    "o[#o + 1] = tonumber(x) end end "
    "      local out = {} "
    "      for j = 1, #add do out[j] = string.format('%d', "
    "(o[j] or 0) + add[j]) end "
    "      redis.call('HSET', k, g, table.concat(out, ',')) "
    "      redis.call('EXPIRE', k, ttl[r]) "
    "    end "
    "  end "
    "end "
    "local freshe = nev > 0 and efirst > donee "
    "push(KEYS[2], nev, freshe) "
    "if freshe then redis.call('LTRIM', KEYS[2], -keepe, -1); "
    "donee = elast; "
    "redis.call('HSET', KEYS[5], 'e', string.format('%d', donee)) end "
    "for n = 1, nled do local f = arg(); "
    "redis.call('HSET', KEYS[6], f, arg()) end "
    "for n = 1, nses do "
    "  local f, t = arg(), arg() "
    "  redis.call('HSET', KEYS[7], f, arg()) "
    "  redis.call('ZADD', KEYS[8], t, f) "
    "end "
    "local gone = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', "
    "now - 7776000000) "
    "local c = redis.call('ZCARD', KEYS[8]) - #gone "
    "if c > maxses then "
    "  local more = redis.call('ZRANGE', KEYS[8], #gone, "
    "#gone + c - maxses - 1) "
    "  for _, f in ipairs(more) do gone[#gone + 1] = f end "
    "end "
    "for _, f in ipairs(gone) do redis.call('HDEL', KEYS[7], f); "
    "redis.call('ZREM', KEYS[8], f) end "
    "return {doner, donee, 0}";


ngx_int_t
ngx_http_tokenbiryani_rnames(ngx_pool_t *pool, ngx_str_t *ns,
    ngx_str_t *instance, ngx_http_tokenbiryani_rnames_t *n)
{
    size_t       i, len;
    char       **name;

    static const char  *shared[] = { "keys", "accounts", "sealed", "meta",
                                     "epoch", "changes", "instances",
                                     "shares", "objects" };
    static const char  *own[] = { "records", "events", "slots", "layout",
                                  "flushed", "ledgers", "sessions",
                                  "sessions_t" };

    n->ns = ngx_pnalloc(pool, ns->len + 1);
    n->instance = ngx_pnalloc(pool, instance->len + 1);
    if (n->ns == NULL || n->instance == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf((u_char *) n->ns, "%V%Z", ns);
    ngx_sprintf((u_char *) n->instance, "%V%Z", instance);

    name = &n->keys;

    for (i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
        len = ns->len + 1 + ngx_strlen(shared[i]) + 1;

        name[i] = ngx_pnalloc(pool, len);
        if (name[i] == NULL) {
            return NGX_ERROR;
        }

        ngx_sprintf((u_char *) name[i], "%V:%s%Z", ns, shared[i]);
    }

    name = &n->records;

    for (i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        len = ns->len + 3 + instance->len + 1 + ngx_strlen(own[i]) + 1;

        name[i] = ngx_pnalloc(pool, len);
        if (name[i] == NULL) {
            return NGX_ERROR;
        }

        ngx_sprintf((u_char *) name[i], "%V:i:%V:%s%Z", ns, instance,
                    own[i]);
    }

    return NGX_OK;
}


/* the flush's arguments: a list of pointers, their lengths, their bytes */

typedef struct {
    int                                 argc;
    const char                        **argv;
    size_t                             *lens;
    u_char                             *p;          /* the bytes' next */
} ngx_http_tokenbiryani_rargs_t;


static void
ngx_http_tokenbiryani_rargs_add(ngx_http_tokenbiryani_rargs_t *a,
    const void *data, size_t len)
{
    a->argv[a->argc] = data;
    a->lens[a->argc++] = len;
}


static void
ngx_http_tokenbiryani_rargs_num(ngx_http_tokenbiryani_rargs_t *a,
    int64_t v)
{
    u_char  *start;

    start = a->p;
    a->p = ngx_sprintf(a->p, "%L", v);
    ngx_http_tokenbiryani_rargs_add(a, start, a->p - start);
}


/* 8 bytes of sequence, then the blob */
static void
ngx_http_tokenbiryani_rargs_blob(ngx_http_tokenbiryani_rargs_t *a,
    uint64_t seq, const void *blob, size_t len)
{
    u_char      *start;
    ngx_uint_t   i;

    start = a->p;

    for (i = 0; i < 8; i++) {
        *a->p++ = (u_char) (seq >> (8 * i));
    }

    a->p = ngx_cpymem(a->p, blob, len);
    ngx_http_tokenbiryani_rargs_add(a, start, a->p - start);
}


void *
ngx_http_tokenbiryani_rflush_args(ngx_http_tokenbiryani_rnames_t *n,
    ngx_http_tokenbiryani_job_t *job, int *argc, const char ***argv,
    size_t **lens)
{
    u_char                                *block, *start;
    size_t                                 size, len;
    ngx_uint_t                             i, k, nargs, nled;
    ngx_http_tokenbiryani_rargs_t          a;
    ngx_http_tokenbiryani_record_t        *rec;
    ngx_http_tokenbiryani_usage_sum_t     *sum;
    ngx_http_tokenbiryani_ledger_view_t   *lv;
    ngx_http_tokenbiryani_session_view_t  *sv;
    ngx_http_tokenbiryani_job_flush_t     *fl;
    u_char                                 layout[128];

    fl = &job->u.flush;

    nargs = 3 + 9 + 19 + 2 * fl->nslots + fl->nrecords + 3 * fl->nsums
            + fl->nevents + 2 * fl->nledgers + 3 * fl->nsessions;

    size = nargs * (sizeof(char *) + sizeof(size_t)) + NGX_ALIGNMENT
           + 19 * NGX_INT64_LEN + sizeof(layout)
           + fl->nslots * (NGX_INT64_LEN + TB_ID_MAX + 1)
           + fl->nrecords * (8 + sizeof(ngx_http_tokenbiryani_record_t))
           + fl->nsums * (NGX_INT64_LEN + TB_ID_MAX
                            + NGX_HTTP_TB_USAGE_MODEL + TB_ID_MAX + 3
                            + NGX_HTTP_TB_RUSAGE_VALUES
                              * (NGX_INT64_LEN + 1))
           + fl->nevents * (8 + sizeof(ngx_http_tokenbiryani_event_t))
           + fl->nledgers * (TB_ID_MAX + 3 + sizeof(tb_ledger_t))
           + fl->nsessions * (16 + NGX_INT64_LEN
                               + sizeof(ngx_http_tokenbiryani_session_view_t));

    block = ngx_alloc(size, ngx_cycle->log);
    if (block == NULL) {
        return NULL;
    }

    a.argc = 0;
    a.argv = (const char **) block;
    a.lens = (size_t *) ngx_align_ptr(block + nargs * sizeof(char *),
                                      NGX_ALIGNMENT);
    a.p = (u_char *) (a.lens + nargs);

    ngx_http_tokenbiryani_rargs_add(&a, "EVAL", 4);
    ngx_http_tokenbiryani_rargs_add(&a, ngx_http_tokenbiryani_lua_flush,
                                    sizeof(ngx_http_tokenbiryani_lua_flush)
                                    - 1);
    ngx_http_tokenbiryani_rargs_add(&a, "9", 1);

    ngx_http_tokenbiryani_rargs_add(&a, n->records, ngx_strlen(n->records));
    ngx_http_tokenbiryani_rargs_add(&a, n->events, ngx_strlen(n->events));
    ngx_http_tokenbiryani_rargs_add(&a, n->slots, ngx_strlen(n->slots));
    ngx_http_tokenbiryani_rargs_add(&a, n->layout, ngx_strlen(n->layout));
    ngx_http_tokenbiryani_rargs_add(&a, n->flushed, ngx_strlen(n->flushed));
    ngx_http_tokenbiryani_rargs_add(&a, n->ledgers, ngx_strlen(n->ledgers));
    ngx_http_tokenbiryani_rargs_add(&a, n->sessions,
                                    ngx_strlen(n->sessions));
    ngx_http_tokenbiryani_rargs_add(&a, n->sessions_t,
                                    ngx_strlen(n->sessions_t));
    ngx_http_tokenbiryani_rargs_add(&a, n->instances,
                                    ngx_strlen(n->instances));

    /* the ledgers of accounts without an id are not written: placeholders
     * would shift the arguments, so they are counted first */

    nled = 0;

    for (i = 0; i < fl->nledgers; i++) {
        lv = &fl->ledgers[i];

        if (lv->kind != NGX_HTTP_TB_LEDGER_ACCOUNT
            || (lv->id < fl->nslots && fl->slot_ids[lv->id][0]))
        {
            nled++;
        }
    }

    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) fl->nslots);
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) fl->nrecords);
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) fl->nevents);
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) nled);
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) fl->nsessions);
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) fl->nsums);
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) ngx_max(fl->keep_records,
                                                          1));
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) ngx_max(fl->keep_events,
                                                          1));
    ngx_http_tokenbiryani_rargs_num(&a, fl->now_ms);
    ngx_http_tokenbiryani_rargs_add(&a, n->instance, ngx_strlen(n->instance));
    ngx_http_tokenbiryani_rargs_add(&a, n->ns, ngx_strlen(n->ns));

    ngx_http_tokenbiryani_history_layout(layout, sizeof(layout));
    start = a.p;
    a.p = ngx_cpymem(a.p, layout, ngx_strlen(layout));
    ngx_http_tokenbiryani_rargs_add(&a, start, a.p - start);

    ngx_http_tokenbiryani_rargs_num(&a, NGX_HTTP_TB_SESSIONS);

    /* the requests it writes through: their usage, every one */
    ngx_http_tokenbiryani_rargs_num(&a, fl->nusage
                                        ? (int64_t) fl->usage[0].seq : 0);
    ngx_http_tokenbiryani_rargs_num(&a, fl->nusage
                                        ? (int64_t) fl->records_seq : 0);
    ngx_http_tokenbiryani_rargs_num(&a, fl->nevents
                                        ? (int64_t) fl->events[0].seq : 0);
    ngx_http_tokenbiryani_rargs_num(&a, fl->nevents
                                        ? (int64_t) fl->events
                                              [fl->nevents - 1].seq : 0);
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) fl->records_from);
    ngx_http_tokenbiryani_rargs_num(&a, (int64_t) fl->events_from);

    for (i = 0; i < fl->nslots; i++) {
        ngx_http_tokenbiryani_rargs_num(&a, (int64_t) i);
        ngx_http_tokenbiryani_rargs_add(&a, fl->slot_ids[i],
                                        ngx_strlen(fl->slot_ids[i]));
    }

    for (i = 0; i < fl->nrecords; i++) {
        rec = &fl->records[i];

        ngx_http_tokenbiryani_rargs_blob(&a, rec->seq, rec,
            offsetof(ngx_http_tokenbiryani_record_t, cands)
            + ngx_min(rec->ncands, NGX_HTTP_TB_INSPECT_CANDS)
              * sizeof(ngx_http_tokenbiryani_inspect_cand_t));
    }

    for (k = 0; k < fl->nsums; k++) {
        sum = &fl->sums[k];

        ngx_http_tokenbiryani_rargs_num(&a, sum->t);

        start = a.p;
        a.p = ngx_sprintf(a.p, "%s\x1f%s\x1f%s", sum->acct, sum->model,
                          sum->key);
        ngx_http_tokenbiryani_rargs_add(&a, start, a.p - start);

        start = a.p;
        a.p = ngx_sprintf(a.p, "%L,%L,%L,%L,%L,%L,%L,%L,%L",
                          sum->u.requests, sum->u.input, sum->u.output,
                          sum->u.cache_read, sum->u.cache_write,
                          sum->u.cost, sum->u.unpriced, sum->u.errors,
                          sum->u.cache_hits);
        ngx_http_tokenbiryani_rargs_add(&a, start, a.p - start);
    }

    for (i = 0; i < fl->nevents; i++) {
        ngx_http_tokenbiryani_rargs_blob(&a, fl->events[i].seq,
                                         &fl->events[i],
                                         sizeof(ngx_http_tokenbiryani_event_t));
    }

    for (i = 0; i < fl->nledgers; i++) {
        lv = &fl->ledgers[i];

        start = a.p;

        if (lv->kind == NGX_HTTP_TB_LEDGER_ACCOUNT) {
            if (lv->id >= fl->nslots || fl->slot_ids[lv->id][0] == '\0') {
                continue;
            }

            a.p = ngx_sprintf(a.p, "a:%s", fl->slot_ids[lv->id]);

        } else {
            a.p = ngx_sprintf(a.p, "k:%016uxL", lv->id);
        }

        ngx_http_tokenbiryani_rargs_add(&a, start, a.p - start);

        start = a.p;
        a.p = ngx_cpymem(a.p, &lv->ledger, sizeof(tb_ledger_t));
        ngx_http_tokenbiryani_rargs_add(&a, start, a.p - start);
    }

    for (i = 0; i < fl->nsessions; i++) {
        sv = &fl->sessions[i];

        /* its account by id: slots are this zone's */
        if (sv->slot >= 0 && (ngx_uint_t) sv->slot < fl->nslots) {
            ngx_cpystrn(sv->account, fl->slot_ids[sv->slot], TB_ID_MAX + 1);
        }

        start = a.p;
        a.p = ngx_sprintf(a.p, "%016uxL", sv->session);
        ngx_http_tokenbiryani_rargs_add(&a, start, a.p - start);

        ngx_http_tokenbiryani_rargs_num(&a, sv->last_ms);

        len = sizeof(ngx_http_tokenbiryani_session_view_t);
        start = a.p;
        a.p = ngx_cpymem(a.p, sv, len);
        ngx_http_tokenbiryani_rargs_add(&a, start, len);
    }

    *argc = a.argc;
    *argv = a.argv;
    *lens = a.lens;

    return block;
}


/* the master's read */

static redisReply *
ngx_http_tokenbiryani_rhistory_cmd(redisContext *c, ngx_log_t *log,
    int argc, const char **argv)
{
    int          i;
    size_t       lens[8];
    redisReply  *r;

    for (i = 0; i < argc; i++) {
        lens[i] = ngx_strlen(argv[i]);
    }

    r = redisCommandArgv(c, argc, argv, lens);

    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "tokenbiryani: the store's %s is not read back from "
                      "Redis: %s", argv[1], r ? r->str : c->errstr);
        if (r) {
            freeReplyObject(r);
        }

        return NULL;
    }

    return r;
}


static uint64_t
ngx_http_tokenbiryani_rhistory_seq(const redisReply *r)
{
    uint64_t    seq;
    ngx_uint_t  i;

    seq = 0;

    for (i = 0; i < 8; i++) {
        seq |= (uint64_t) (u_char) r->str[i] << (8 * i);
    }

    return seq;
}


static void
ngx_http_tokenbiryani_rhistory_list(redisContext *c, ngx_log_t *log,
    const char *key, ngx_uint_t keep, int (*cb)(void *, uint64_t,
    const void *, size_t), void *data)
{
    size_t       i;
    redisReply  *r;
    const char  *argv[4];
    u_char       from[NGX_INT64_LEN + 2];

    ngx_sprintf(from, "-%ui%Z", ngx_max(keep, 1));

    argv[0] = "LRANGE";
    argv[1] = key;
    argv[2] = (char *) from;
    argv[3] = "-1";

    r = ngx_http_tokenbiryani_rhistory_cmd(c, log, 4, argv);
    if (r == NULL) {
        return;
    }

    for (i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
        if (r->element[i]->type == REDIS_REPLY_STRING
            && r->element[i]->len > 8)
        {
            (void) cb(data, ngx_http_tokenbiryani_rhistory_seq(r->element[i]),
                      r->element[i]->str + 8, r->element[i]->len - 8);
        }
    }

    freeReplyObject(r);
}


static void
ngx_http_tokenbiryani_rhistory_requests(redisContext *c,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log)
{
    size_t                               i;
    redisReply                          *r;
    const char                          *argv[3];
    ngx_http_tokenbiryani_hload_t        hl;
    ngx_http_tokenbiryani_zone_stats_t   zs;

    argv[0] = "GET";
    argv[1] = n->layout;

    r = ngx_http_tokenbiryani_rhistory_cmd(c, log, 2, argv);
    if (r == NULL) {
        return;
    }

    if (r->type != REDIS_REPLY_STRING
        || ngx_http_tokenbiryani_store_hload_begin(&hl, tmcf, r->str, log)
           != NGX_OK)
    {
        /* none written yet, or another build's (said) */
        freeReplyObject(r);
        return;
    }

    freeReplyObject(r);

    argv[0] = "HGETALL";
    argv[1] = n->slots;

    r = ngx_http_tokenbiryani_rhistory_cmd(c, log, 2, argv);

    for (i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements;
         i += 2)
    {
        if (r->element[i]->type == REDIS_REPLY_STRING
            && r->element[i + 1]->type == REDIS_REPLY_STRING)
        {
            (void) ngx_http_tokenbiryani_store_hload_slot(&hl,
                       (uint64_t) ngx_atoof((u_char *) r->element[i]->str,
                                            r->element[i]->len),
                       r->element[i + 1]->str);
        }
    }

    if (r) {
        freeReplyObject(r);
    }

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    ngx_http_tokenbiryani_rhistory_list(c, log, n->records, zs.ring_size,
        ngx_http_tokenbiryani_store_hload_record, &hl);
    ngx_http_tokenbiryani_rhistory_list(c, log, n->events, zs.events_size,
        ngx_http_tokenbiryani_store_hload_event, &hl);

    /* the usage is written through a request whose record may not be
     * (a sample of them is, when they come fast): numbers go on after it */

    argv[0] = "HGET";
    argv[1] = n->flushed;
    argv[2] = "r";

    r = ngx_http_tokenbiryani_rhistory_cmd(c, log, 3, argv);

    if (r && r->type == REDIS_REPLY_STRING) {
        ngx_http_tokenbiryani_inspect_number_from(&tmcf->zone,
            (uint64_t) ngx_atoof((u_char *) r->str, r->len));
    }

    if (r) {
        freeReplyObject(r);
    }

    ngx_http_tokenbiryani_store_hload_end(&hl, log);
}


static void
ngx_http_tokenbiryani_rhistory_spend(redisContext *c,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log)
{
    int                             argc;
    size_t                          i, j, k, lens[2 + NGX_HTTP_TB_RHIST_CHUNK];
    redisReply                     *r, *ids, *v;
    const char                     *argv[2 + NGX_HTTP_TB_RHIST_CHUNK];
    ngx_http_tokenbiryani_sload_t   sl;
    u_char                          from[NGX_INT64_LEN + 2];
    char                            id[TB_ID_MAX + 1];

    ngx_memzero(&sl, sizeof(sl));
    sl.tmcf = tmcf;

    argv[0] = "HGETALL";
    argv[1] = n->ledgers;

    r = ngx_http_tokenbiryani_rhistory_cmd(c, log, 2, argv);
    if (r == NULL) {
        return;
    }

    for (i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        v = r->element[i];

        if (v->type != REDIS_REPLY_STRING || v->len < 3 || v->str[1] != ':'
            || v->len - 2 > TB_ID_MAX
            || r->element[i + 1]->type != REDIS_REPLY_STRING)
        {
            continue;
        }

        ngx_cpystrn((u_char *) id, (u_char *) v->str + 2, v->len - 1);

        (void) ngx_http_tokenbiryani_store_sload_ledger(&sl,
                   v->str[0] == 'a' ? NGX_HTTP_TB_LEDGER_ACCOUNT
                                    : NGX_HTTP_TB_LEDGER_KEY,
                   id, r->element[i + 1]->str, r->element[i + 1]->len);
    }

    freeReplyObject(r);

    /* the newest conversations, oldest first: as they were in the zone */

    ngx_sprintf(from, "-%d%Z", NGX_HTTP_TB_SESSIONS);

    {
    const char  *zr[4] = { "ZRANGE", n->sessions_t, (char *) from, "-1" };

    ids = ngx_http_tokenbiryani_rhistory_cmd(c, log, 4, zr);
    }

    if (ids == NULL) {
        ngx_http_tokenbiryani_store_sload_end(&sl, log);
        return;
    }

    for (i = 0; ids->type == REDIS_REPLY_ARRAY && i < ids->elements;
         i += NGX_HTTP_TB_RHIST_CHUNK)
    {
        argv[0] = "HMGET";
        argv[1] = n->sessions;
        lens[0] = 5;
        lens[1] = ngx_strlen(n->sessions);
        argc = 2;

        for (j = i; j < ids->elements && j < i + NGX_HTTP_TB_RHIST_CHUNK;
             j++)
        {
            argv[argc] = ids->element[j]->str;
            lens[argc++] = ids->element[j]->len;
        }

        r = redisCommandArgv(c, argc, argv, lens);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
            if (r) {
                freeReplyObject(r);
            }

            break;
        }

        for (k = 0; k < r->elements; k++) {
            if (r->element[k]->type == REDIS_REPLY_STRING) {
                (void) ngx_http_tokenbiryani_store_sload_session(&sl, 0,
                           r->element[k]->str, r->element[k]->len);
            }
        }

        freeReplyObject(r);
    }

    freeReplyObject(ids);

    ngx_http_tokenbiryani_store_sload_end(&sl, log);
}


void
ngx_http_tokenbiryani_rhistory_read(redisContext *c,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log)
{
    ngx_http_tokenbiryani_rhistory_requests(c, n, tmcf, log);
    ngx_http_tokenbiryani_rhistory_spend(c, n, tmcf, log);
}


/* /admin/usage: the buckets of the range, one HGETALL each, pipelined */

typedef struct {
    ngx_http_tokenbiryani_job_t        *job;
    int64_t                             res;
    int64_t                             next;      /* the next reply's t */
    ngx_uint_t                          left;
    ngx_uint_t                          failed;
} ngx_http_tokenbiryani_rusage_t;


static int
ngx_http_tokenbiryani_rusage_cmp(const void *one, const void *two)
{
    const ngx_http_tokenbiryani_usage_point_t  *a = one, *b = two;

    if (a->t != b->t) {
        return a->t < b->t ? -1 : 1;
    }

    return ngx_strcmp(a->group, b->group);
}


static void
ngx_http_tokenbiryani_rusage_add(ngx_http_tokenbiryani_job_t *job, int64_t t,
    const u_char *group, size_t glen, const tb_usage_row_t *u)
{
    size_t                                n;
    ngx_uint_t                            i;
    ngx_http_tokenbiryani_usage_point_t  *p;
    ngx_http_tokenbiryani_job_usage_t    *us;

    us = &job->u.usage;

    glen = ngx_min(glen, TB_MODEL_MAX);

    for (i = us->npoints; i > 0 && us->points[i - 1].t == t; i--) {
        p = &us->points[i - 1];

        if (ngx_strlen(p->group) == glen
            && ngx_strncmp(p->group, group, glen) == 0)
        {
            p->u.requests += u->requests;
            p->u.input += u->input;
            p->u.output += u->output;
            p->u.cache_read += u->cache_read;
            p->u.cache_write += u->cache_write;
            p->u.cost += u->cost;
            p->u.unpriced += u->unpriced;
            p->u.errors += u->errors;
            p->u.cache_hits += u->cache_hits;
            return;
        }
    }

    if (us->npoints == us->points_size) {
        n = us->points_size ? us->points_size * 2 : 256;

        if (n > 200000) {
            return;
        }

        p = realloc(us->points, n * sizeof(*p));
        if (p == NULL) {
            return;
        }

        us->points = p;
        us->points_size = n;
    }

    p = &us->points[us->npoints++];
    p->t = t;
    ngx_memcpy(p->group, group, glen);
    p->group[glen] = '\0';
    p->u = *u;
}


static void
ngx_http_tokenbiryani_rusage_bucket(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rusage_t *ru = data;

    int64_t                             t, v[NGX_HTTP_TB_RUSAGE_VALUES];
    u_char                             *p, *last, *f, *sep[2];
    size_t                              i;
    ngx_uint_t                          k;
    tb_usage_row_t                      u;
    ngx_http_tokenbiryani_job_t        *job;
    ngx_http_tokenbiryani_job_usage_t  *us;

    job = ru->job;
    us = &job->u.usage;
    t = ru->next;
    ru->next += ru->res;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        if (!ru->failed) {
            ngx_snprintf((u_char *) job->err, sizeof(job->err) - 1,
                         "Redis: %s%Z", reply ? reply->str : rd->error);
            job->err[sizeof(job->err) - 1] = '\0';
        }

        ru->failed = 1;
    }

    for (i = 0; !ru->failed && reply->type == REDIS_REPLY_ARRAY
                && i + 1 < reply->elements; i += 2)
    {
        if (reply->element[i]->type != REDIS_REPLY_STRING
            || reply->element[i + 1]->type != REDIS_REPLY_STRING)
        {
            continue;
        }

        /* account US model US key */

        f = (u_char *) reply->element[i]->str;
        last = f + reply->element[i]->len;

        sep[0] = ngx_strlchr(f, last, 0x1f);
        sep[1] = sep[0] ? ngx_strlchr(sep[0] + 1, last, 0x1f) : NULL;

        if (sep[1] == NULL) {
            continue;
        }

        p = (u_char *) reply->element[i + 1]->str;
        last = p + reply->element[i + 1]->len;

        for (k = 0; k < NGX_HTTP_TB_RUSAGE_VALUES; k++) {
            v[k] = 0;

            while (p < last && *p >= '0' && *p <= '9') {
                v[k] = v[k] * 10 + (*p++ - '0');
            }

            if (p < last && *p == ',') {
                p++;
            }
        }

        u.requests = v[0];
        u.input = v[1];
        u.output = v[2];
        u.cache_read = v[3];
        u.cache_write = v[4];
        u.cost = v[5];
        u.unpriced = v[6];
        u.errors = v[7];
        u.cache_hits = v[8];

        switch (us->by) {

        case TB_STORE_BY_ACCOUNT:
            ngx_http_tokenbiryani_rusage_add(job, t / us->step
                                                  * us->step,
                                             f, sep[0] - f, &u);
            break;

        case TB_STORE_BY_MODEL:
            ngx_http_tokenbiryani_rusage_add(job, t / us->step
                                                  * us->step,
                                             sep[0] + 1,
                                             sep[1] - sep[0] - 1, &u);
            break;

        case TB_STORE_BY_KEY:
            ngx_http_tokenbiryani_rusage_add(job, t / us->step
                                                  * us->step,
                                             sep[1] + 1,
                                             (u_char *)
                                             reply->element[i]->str
                                             + reply->element[i]->len
                                             - sep[1] - 1, &u);
            break;

        default:
            ngx_http_tokenbiryani_rusage_add(job, t / us->step
                                                  * us->step,
                                             (u_char *) "", 0, &u);
            break;
        }
    }

    if (--ru->left) {
        return;
    }

    job->rc = ru->failed ? TB_STORE_ERROR : TB_STORE_OK;

    if (us->npoints) {
        ngx_qsort(us->points, us->npoints,
                  sizeof(ngx_http_tokenbiryani_usage_point_t),
                  ngx_http_tokenbiryani_rusage_cmp);
    }

    ngx_free(ru);

    job->done(job);
}


ngx_int_t
ngx_http_tokenbiryani_rusage_read(ngx_http_tokenbiryani_redis_t *rd,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_job_t *job)
{
    int64_t                          res, t, now;
    size_t                           lens[2];
    ngx_uint_t                       i, nb;
    const char                      *argv[2];
    ngx_http_tokenbiryani_rusage_t  *ru;
    u_char                           key[256];

    static const int64_t  resolutions[] = { 86400, 3600, 900, 60 };

    if (rd->state != NGX_HTTP_TB_REDIS_READY) {
        return NGX_DECLINED;
    }

    /* the coarsest buckets a step is made of */

    res = 60;

    for (i = 0; i < sizeof(resolutions) / sizeof(resolutions[0]); i++) {
        if (job->u.usage.step % resolutions[i] == 0) {
            res = resolutions[i];
            break;
        }
    }

    now = ngx_time();
    t = job->u.usage.from / res * res;
    nb = (ngx_uint_t) ngx_min((now - t) / res + 1,
                              NGX_HTTP_TB_RUSAGE_BUCKETS);

    ru = ngx_calloc(sizeof(ngx_http_tokenbiryani_rusage_t), ngx_cycle->log);
    if (ru == NULL) {
        return NGX_DECLINED;
    }

    ru->job = job;
    ru->res = res;
    ru->next = t;

    argv[0] = "HGETALL";
    lens[0] = 7;
    argv[1] = (char *) key;

    for (i = 0; i < nb; i++) {
        lens[1] = ngx_snprintf(key, sizeof(key), "%s:u:%L:%L", n->ns, res,
                               t + (int64_t) i * res)
                  - key;

        if (ngx_http_tokenbiryani_redis_send(rd,
                ngx_http_tokenbiryani_rusage_bucket, ru, 2, argv, lens, 0)
            != NGX_OK)
        {
            break;
        }

        ru->left++;
    }

    if (ru->left == 0) {
        ngx_free(ru);
        return NGX_DECLINED;
    }

    if (i < nb) {
        /* the connection went while they were sent: the ones sent fail */
        ru->failed = 1;
        ngx_cpystrn((u_char *) job->err, (u_char *) "Redis went away",
                    sizeof(job->err));
    }

    return NGX_OK;
}
