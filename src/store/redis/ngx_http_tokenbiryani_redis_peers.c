/*
 * The peers through Redis: the other gateways that share this pool
 * (see ngx_http_tokenbiryani_redis_peers.h).  The shares of every
 * account's windows, the news of accounts, keys and conversations, and
 * the owners of conversations:
 *
 *     N:shares          gateway -> "held demand expires"
 *     N:aff:<session>   "<account id> <cached prompt tokens>" in the
 *                       envelope that authenticates it (tb_record.h: the
 *                       session's hex its name), expiring with
 *                       affinity_ttl_seconds; a new owner is also
 *                       announced on N:changes as "f <session>", which the
 *                       subscriber of every peer reads back into its
 *                       zone (ngx_http_tokenbiryani_redis_store.c)
 */


#include "ngx_http_tokenbiryani_redis_peers.h"
#include "ngx_http_tokenbiryani_redis_zone.h"


/* how often the news is told and the share asked for */
#define NGX_HTTP_TB_RPEERS_TICK_MS      50
#define NGX_HTTP_TB_RPEERS_ASK_TICKS    2

/* a share not renewed for this long is free for the peers */
#define NGX_HTTP_TB_RPEERS_TTL_MS       3000

#define NGX_HTTP_TB_RPEERS_NEWS         64

/* what keys and conversations ran up: told at most this many a tick, in
 * messages of at most this size */
#define NGX_HTTP_TB_RPEERS_KEYS          256
#define NGX_HTTP_TB_RPEERS_SESSIONS      256
#define NGX_HTTP_TB_RPEERS_MSG           32768


/*
 * The share: KEYS[1] N:shares, a hash of gateway -> "held demand expires"
 * (ms, Redis's clock); ARGV me, the share it holds now, its demand (the
 * requests it routed since it last asked, and those waiting), the TTL.
 * A gateway's due is its part of the demand (each counted one more, so an
 * idle one keeps a sliver and none starves); it is granted that, or what
 * the peers leave if that is less.  What it holds now stays recorded
 * until it asks again, so a share it gives back is free only once it
 * surely stopped using it.  ARGV[5]: the most it takes now (a gateway
 * back from Redis being away takes no more than it held meanwhile until
 * the peers are surely back too).  Returns { granted, gateways, due }.
 */
static const char  ngx_http_tokenbiryani_lua_share[] =
    "local t = redis.call('TIME') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "local me, cur, dem, ttl = ARGV[1], tonumber(ARGV[2]), "
    "tonumber(ARGV[3]), tonumber(ARGV[4]) "
    "local all = redis.call('HGETALL', KEYS[1]) "
    "local held, sum, n = 0, dem + 1, 1 "
    "for i = 1, #all, 2 do "
    "  if all[i] ~= me then "
    "    local h, d, e = string.match(all[i + 1], '^(%d+) (%d+) (%d+)$') "
    "    if h == nil or tonumber(e) < now then "
    "      redis.call('HDEL', KEYS[1], all[i]) "
    "    else "
    "      held = held + tonumber(h) sum = sum + tonumber(d) + 1 n = n + 1 "
    "    end "
    "  end "
    "end "
    "local due = math.floor(65536 * (dem + 1) / sum) "
    "local got = math.min(due, 65536 - held, tonumber(ARGV[5])) "
    "if got < 0 then got = 0 end "
    "local keep = math.max(got, cur) "
    "redis.call('HSET', KEYS[1], me, keep .. ' ' .. dem .. ' ' .. "
    "(now + ttl)) "
    "redis.call('PEXPIRE', KEYS[1], ttl * 10) "
    "return { got, n, due }";


typedef struct {
    ngx_http_tokenbiryani_main_conf_t     *tmcf;  /* NULL: not elected */
    ngx_http_tokenbiryani_redis_t         *cmd;   /* this worker's */
    const ngx_http_tokenbiryani_rnames_t  *n;

    ngx_event_t                            tick;
    ngx_uint_t                             ticks;
    ngx_uint_t                             asking;    /* a SHARE in flight */
    ngx_uint_t                             again;     /* granted less */
    ngx_uint_t                             degraded;
    int64_t                                degraded_ms;   /* since */
    ngx_uint_t                             granted;   /* once, at least */
    ngx_uint_t                             returning;
    int64_t                                returned_ms;   /* since */
    uint32_t                               cap;       /* held while away */
    uint32_t                               asked_cap;
    uint64_t                               decisions; /* when last asked */

    ngx_http_tokenbiryani_news_t           news[NGX_HTTP_TB_RPEERS_NEWS];
    ngx_http_tokenbiryani_org_news_t       orgs[NGX_HTTP_TB_RPEERS_NEWS];
    tb_peer_key_t                          keys[NGX_HTTP_TB_RPEERS_KEYS];
    tb_peer_session_t              sessions[NGX_HTTP_TB_RPEERS_SESSIONS];
    u_char                                 msg[NGX_HTTP_TB_RPEERS_MSG];
    u_char                                 sig[NGX_HTTP_TB_RPEERS_MSG
                                                  + 64];
} ngx_http_tokenbiryani_rpeers_t;


static ngx_http_tokenbiryani_rpeers_t   ngx_http_tokenbiryani_rpeers;


static void ngx_http_tokenbiryani_rpeers_tick(ngx_event_t *ev);
static void ngx_http_tokenbiryani_rpeers_ask(
    ngx_http_tokenbiryani_rpeers_t *rc);
static void ngx_http_tokenbiryani_rpeers_granted(
    ngx_http_tokenbiryani_redis_t *rd, redisReply *reply, void *data);
static void ngx_http_tokenbiryani_rpeers_degrade(
    ngx_http_tokenbiryani_rpeers_t *rc);
static void ngx_http_tokenbiryani_rpeers_tell(
    ngx_http_tokenbiryani_rpeers_t *rc, int64_t now);
static void ngx_http_tokenbiryani_rpeers_tell_spend(
    ngx_http_tokenbiryani_rpeers_t *rc, int64_t now);
static ngx_int_t ngx_http_tokenbiryani_rpeers_publish(
    ngx_http_tokenbiryani_rpeers_t *rc, const u_char *msg, size_t len);


void
ngx_http_tokenbiryani_rpeers_load(redisContext *c,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_rnames_t *n)
{
    size_t       i, len;
    int64_t      held, h;
    u_char      *p, *last;
    redisReply  *r;
    ngx_uint_t   peers;

    r = redisCommand(c, "HGETALL %s", n->shares);

    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        /* nothing known of the peers: alone until the first grant */
        if (r) {
            freeReplyObject(r);
        }

        return;
    }

    held = 0;
    peers = 1;

    /*
     * What the peers hold (an expired share counted too: the master has
     * no clock of Redis's, and the first grant, a moment away, frees it)
     */

    for (i = 0; i + 1 < r->elements; i += 2) {
        if (r->element[i]->type != REDIS_REPLY_STRING
            || r->element[i + 1]->type != REDIS_REPLY_STRING
            || (r->element[i]->len == ngx_strlen(n->instance)
                && ngx_strncmp(r->element[i]->str, n->instance,
                               r->element[i]->len) == 0))
        {
            continue;
        }

        p = (u_char *) r->element[i + 1]->str;
        last = p + r->element[i + 1]->len;

        for (len = 0; p + len < last && p[len] != ' '; len++) {
            /* void */
        }

        h = ngx_atoi(p, len);

        if (h > 0) {
            held += h;
            peers++;
        }
    }

    freeReplyObject(r);

    if (peers > 1) {
        ngx_http_tokenbiryani_peers_withhold(&tmcf->zone,
                                 (uint32_t) ngx_min(held, TB_SHARE_ONE),
                                 peers, ngx_http_tokenbiryani_now_ms());
    }
}


void
ngx_http_tokenbiryani_rpeers_init_worker(ngx_http_tokenbiryani_redis_t *cmd,
    const ngx_http_tokenbiryani_rnames_t *n)
{
    ngx_http_tokenbiryani_rpeers.cmd = cmd;
    ngx_http_tokenbiryani_rpeers.n = n;
}


void
ngx_http_tokenbiryani_rpeers_start(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log)
{
    ngx_http_tokenbiryani_rpeers_t  *rc;

    rc = &ngx_http_tokenbiryani_rpeers;

    rc->tmcf = tmcf;

    ngx_http_tokenbiryani_timer_init(&rc->tick,
                                     ngx_http_tokenbiryani_rpeers_tick, rc,
                                     log);

    ngx_add_timer(&rc->tick, 1);
}


void
ngx_http_tokenbiryani_rpeers_stop(void)
{
    ngx_http_tokenbiryani_rpeers_t  *rc;

    rc = &ngx_http_tokenbiryani_rpeers;

    if (rc->tick.timer_set) {
        ngx_del_timer(&rc->tick);
    }

    rc->tmcf = NULL;
}


static void
ngx_http_tokenbiryani_rpeers_tick(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_rpeers_t *rc = ev->data;

    if (rc->cmd->state != NGX_HTTP_TB_REDIS_READY) {
        ngx_http_tokenbiryani_rpeers_degrade(rc);

    } else {
        ngx_http_tokenbiryani_rpeers_tell(rc, ngx_http_tokenbiryani_now_ms());

        if (!rc->asking
            && (rc->again || rc->degraded
                || rc->ticks % NGX_HTTP_TB_RPEERS_ASK_TICKS == 0))
        {
            ngx_http_tokenbiryani_rpeers_ask(rc);
        }
    }

    rc->ticks++;

    ngx_add_timer(ev, NGX_HTTP_TB_RPEERS_TICK_MS);
}


static void
ngx_http_tokenbiryani_rpeers_ignore(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
}


/* what this gateway read of its accounts since it last said, said */

static void
ngx_http_tokenbiryani_rpeers_tell(ngx_http_tokenbiryani_rpeers_t *rc,
    int64_t now)
{
    u_char                              *p;
    ngx_uint_t                           i;
    ngx_http_tokenbiryani_news_t        *nw;
    ngx_http_tokenbiryani_peers_told_t   t;
    u_char                         msg[2 + 64 + 1 + 16 + 1 + TB_ID_MAX + 1
                                       + TB_NEWS_MAX];

    /*
     * the organisations first: whoever adopts the windows below counts
     * them against the same account's as this gateway does
     */

    t.news = rc->news;
    t.orgs = rc->orgs;
    t.max = NGX_HTTP_TB_RPEERS_NEWS;

    ngx_http_tokenbiryani_peers_news(&rc->tmcf->zone, now, &t);

    for (i = 0; i < t.norgs; i++) {
        p = ngx_snprintf(msg, 2 + 64 + 1, "o %s ", rc->n->instance);
        p = ngx_hex_dump(p, rc->orgs[i].fingerprint, 8);
        p = ngx_sprintf(p, " %s %s", rc->orgs[i].id, rc->orgs[i].org);

        if (ngx_http_tokenbiryani_rpeers_publish(rc, msg, p - msg) != NGX_OK) {
            return;
        }
    }

    for (i = 0; i < t.nnews; i++) {
        nw = &rc->news[i];

        p = ngx_snprintf(msg, 2 + 64 + 1, "m %s ", rc->n->instance);
        p = ngx_hex_dump(p, nw->fingerprint, 8);
        p = ngx_sprintf(p, " %s ", nw->id);
        p += tb_account_news_print(&nw->news, (char *) p);

        if (ngx_http_tokenbiryani_rpeers_publish(rc, msg, p - msg) != NGX_OK) {
            return;
        }
    }

    ngx_http_tokenbiryani_rpeers_tell_spend(rc, now);
}


/*
 * What its keys and conversations ran up since it last said, said:
 * "u <instance>" and a line a key or conversation, in messages of at most
 * NGX_HTTP_TB_RPEERS_MSG bytes
 */

static void
ngx_http_tokenbiryani_rpeers_tell_spend(ngx_http_tokenbiryani_rpeers_t *rc,
    int64_t now)
{
    u_char      *p, *head, *last;
    ngx_uint_t   i, nkeys, nsessions;

    nsessions = ngx_http_tokenbiryani_peers_tell(&rc->tmcf->zone, now,
                                                 rc->keys,
                                                 NGX_HTTP_TB_RPEERS_KEYS,
                                                 &nkeys, rc->sessions,
                                                 NGX_HTTP_TB_RPEERS_SESSIONS);
    if (nkeys + nsessions == 0) {
        return;
    }

    last = rc->msg + NGX_HTTP_TB_RPEERS_MSG;
    head = ngx_snprintf(rc->msg, 2 + 64, "u %s", rc->n->instance);
    p = head;

    for (i = 0; i < nkeys + nsessions; i++) {
        if (last - p < 1 + TB_PEER_LINE_MAX) {
            if (ngx_http_tokenbiryani_rpeers_publish(rc, rc->msg, p - rc->msg)
                != NGX_OK)
            {
                return;
            }

            p = head;
        }

        *p++ = '\n';
        p += (i < nkeys)
             ? tb_peer_key_print(&rc->keys[i], (char *) p)
             : tb_peer_session_print(&rc->sessions[i - nkeys], (char *) p);
    }

    (void) ngx_http_tokenbiryani_rpeers_publish(rc, rc->msg, p - rc->msg);
}


static ngx_int_t
ngx_http_tokenbiryani_rpeers_publish(ngx_http_tokenbiryani_rpeers_t *rc,
    const u_char *msg, size_t len)
{
    size_t       lens[3];
    const char  *argv[3];

    /* signed: a peer takes only what one of ours said */

    lens[2] = tb_msg_sign(&rc->tmcf->rec, (const char *) msg, len,
                          ngx_http_tokenbiryani_now_ms(), (char *) rc->sig,
                          sizeof(rc->sig));
    if (lens[2] == 0) {
        return NGX_ERROR;
    }

    argv[0] = "PUBLISH";
    argv[1] = rc->n->changes;
    argv[2] = (const char *) rc->sig;
    lens[0] = 7;
    lens[1] = ngx_strlen(rc->n->changes);

    return ngx_http_tokenbiryani_redis_send(rc->cmd,
               ngx_http_tokenbiryani_rpeers_ignore, NULL, 3, argv, lens, 0);
}


void
ngx_http_tokenbiryani_rpeers_subscribed(void)
{
    u_char                        *p;
    ngx_http_tokenbiryani_rpeers_t  *rc;
    u_char                         msg[2 + 64];

    rc = &ngx_http_tokenbiryani_rpeers;

    if (rc->tmcf == NULL || rc->cmd->state != NGX_HTTP_TB_REDIS_READY) {
        /* asked once the command connection is back (it resubscribes) */
        return;
    }

    p = ngx_snprintf(msg, sizeof(msg), "w %s", rc->n->instance);

    (void) ngx_http_tokenbiryani_rpeers_publish(rc, msg, p - msg);
}


static void
ngx_http_tokenbiryani_rpeers_ask(ngx_http_tokenbiryani_rpeers_t *rc)
{
    size_t                                lens[9];
    uint64_t                              demand;
    ngx_uint_t                            i;
    const char                           *argv[9];
    ngx_http_tokenbiryani_share_state_t   ss;
    u_char       held[NGX_INT_T_LEN + 1], dem[NGX_INT64_LEN + 1],
                 ttl[NGX_INT_T_LEN + 1], cap[NGX_INT_T_LEN + 1];

    ngx_http_tokenbiryani_peers_share(&rc->tmcf->zone, &ss);

    demand = ss.decisions - rc->decisions + ss.waiting;
    rc->decisions = ss.decisions;

    /*
     * Back from Redis being away, the peers may not be yet, and each
     * holds its part of the pool meanwhile: this gateway takes no more
     * than its own until they can have asked again (a share not renewed
     * for the TTL is free, so by then every one back has said what it
     * holds, and one still away is not counted)
     */

    if (rc->degraded) {
        rc->cap = TB_SHARE_ONE - ss.withheld;
    }

    /* (at the start, what the master read of the peers' shares holds) */
    rc->asked_cap = (rc->granted && (rc->degraded || rc->returning))
                    ? rc->cap : TB_SHARE_ONE;

    ngx_sprintf(held, "%uD%Z", (uint32_t) (TB_SHARE_ONE - ss.withheld));
    ngx_sprintf(dem, "%uL%Z", demand);
    ngx_sprintf(ttl, "%d%Z", NGX_HTTP_TB_RPEERS_TTL_MS);
    ngx_sprintf(cap, "%uD%Z", rc->asked_cap);

    argv[0] = "EVAL";
    argv[1] = ngx_http_tokenbiryani_lua_share;
    argv[2] = "1";
    argv[3] = rc->n->shares;
    argv[4] = rc->n->instance;
    argv[5] = (char *) held;
    argv[6] = (char *) dem;
    argv[7] = (char *) ttl;
    argv[8] = (char *) cap;

    for (i = 0; i < 9; i++) {
        lens[i] = ngx_strlen(argv[i]);
    }

    if (ngx_http_tokenbiryani_redis_send(rc->cmd,
            ngx_http_tokenbiryani_rpeers_granted, rc, 9, argv, lens, 0)
        == NGX_OK)
    {
        rc->asking = 1;
    }
}


static void
ngx_http_tokenbiryani_rpeers_granted(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rpeers_t *rc = data;

    int64_t                               now;
    long long                             got, peers, due;
    ngx_http_tokenbiryani_share_state_t   ss;

    rc->asking = 0;

    if (rc->tmcf == NULL) {
        /* stopped meanwhile */
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->type != REDIS_REPLY_INTEGER
        || reply->element[2]->type != REDIS_REPLY_INTEGER)
    {
        if (reply && reply->type == REDIS_REPLY_ERROR) {
            ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                          "tokenbiryani: Redis %V refused the share script: "
                          "%*s", &rc->tmcf->store_shown,
                          (size_t) reply->len, reply->str);
        }

        ngx_http_tokenbiryani_rpeers_degrade(rc);
        return;
    }

    got = reply->element[0]->integer;
    peers = reply->element[1]->integer;
    due = reply->element[2]->integer;

    if (got < 0 || got > TB_SHARE_ONE || peers < 1) {
        ngx_http_tokenbiryani_rpeers_degrade(rc);
        return;
    }

    now = ngx_http_tokenbiryani_now_ms();

    if (rc->degraded) {
        rc->degraded = 0;
        rc->returning = rc->granted;
        rc->returned_ms = now;

        if (!rc->granted) {
            /* Redis was away since the start: shared from now on */
            ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                          "tokenbiryani: the pool is shared through Redis "
                          "again (%L gateways)", peers);
        }
    }

    rc->granted = 1;

    if (rc->returning) {
        if (now - rc->returned_ms < NGX_HTTP_TB_RPEERS_TTL_MS) {
            /* the peers may not have asked yet: as many as were seen */
            ngx_http_tokenbiryani_peers_share(&rc->tmcf->zone, &ss);

            if ((ngx_uint_t) peers < ss.peers) {
                peers = (long long) ss.peers;
            }

        } else {
            /* every one back has asked by now: Redis counts them */
            rc->returning = 0;
            ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                          "tokenbiryani: the pool is shared through Redis "
                          "again (%L gateways)", peers);
        }
    }

    ngx_http_tokenbiryani_peers_withhold(&rc->tmcf->zone,
                                         (uint32_t) (TB_SHARE_ONE - got),
                                         (ngx_uint_t) peers, now);

    /* granted less than its due (and than it may take): asked again at
     * the next tick */
    rc->again = (got < due && got < (long long) rc->asked_cap);
}


/*
 * Redis away: one part in as many gateways as were last seen.  A share
 * larger than the one held is taken only once the peers' can have
 * expired in Redis: until then another gateway may still be using more
 * than its part.
 */

static void
ngx_http_tokenbiryani_rpeers_degrade(ngx_http_tokenbiryani_rpeers_t *rc)
{
    int64_t                               now;
    uint32_t                              want;
    ngx_uint_t                            peers;
    ngx_http_tokenbiryani_share_state_t   ss;

    ngx_http_tokenbiryani_peers_share(&rc->tmcf->zone, &ss);

    now = ngx_http_tokenbiryani_now_ms();
    peers = ss.peers;
    want = peers > 1 ? TB_SHARE_ONE - TB_SHARE_ONE / (uint32_t) peers : 0;

    if (!rc->degraded) {
        rc->degraded_ms = now;
    }

    if (want < ss.withheld
        && now - rc->degraded_ms < NGX_HTTP_TB_RPEERS_TTL_MS)
    {
        want = ss.withheld;
    }

    if (!rc->degraded) {
        rc->degraded = 1;
        ngx_log_error(NGX_LOG_WARN, rc->tick.log, 0,
                      "tokenbiryani: the pool's capacity is not shared "
                      "while Redis is away: this gateway holds itself to "
                      "1/%ui of every account's windows", peers ? peers : 1);
    }

    if (ss.withheld != want) {
        ngx_http_tokenbiryani_peers_withhold(&rc->tmcf->zone, want, 0, now);
    }
}


/* the instance a message names, as who; 0 if it is this one */

static uint64_t
ngx_http_tokenbiryani_rpeers_who(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *inst, size_t len)
{
    if (len == 0
        || (len == tmcf->store_instance.len
            && ngx_strncmp(inst, tmcf->store_instance.data, len) == 0))
    {
        /* its own, back */
        return 0;
    }

    return ((uint64_t) ngx_crc32_long((u_char *) inst, len) << 32
            | (ngx_hash_key((u_char *) inst, len) & 0xffffffff)) | 1;
}


void
ngx_http_tokenbiryani_rpeers_message(ngx_http_tokenbiryani_main_conf_t *tmcf,
    u_char kind, const u_char *p, size_t len)
{
    const u_char       *last, *inst, *id, *fp, *nl;
    size_t              id_len;
    int64_t             now;
    uint64_t            who;
    ngx_int_t           b;
    ngx_uint_t          i;
    tb_peer_key_t       tk;
    tb_account_news_t   news;
    tb_peer_session_t   ts;
    u_char              fingerprint[8];

    last = p + len;
    now = ngx_http_tokenbiryani_now_ms();

    if (kind == 'w') {
        /* "instance": it asks to be told everything again */
        if (ngx_http_tokenbiryani_rpeers_who(tmcf, p, len)) {
            ngx_http_tokenbiryani_peers_retell(&tmcf->zone);
        }

        return;
    }

    if (kind == 'u') {
        /* "instance\nline\nline..." */
        nl = ngx_strlchr((u_char *) p, (u_char *) last, '\n');

        if (nl == NULL) {
            return;
        }

        who = ngx_http_tokenbiryani_rpeers_who(tmcf, p, nl - p);

        while (who && nl < last) {
            p = nl + 1;
            nl = ngx_strlchr((u_char *) p, (u_char *) last, '\n');

            if (nl == NULL) {
                nl = last;
            }

            switch (tb_peer_scan((const char *) p, nl - p, &tk, &ts)) {

            case TB_PEER_KEY:
                ngx_http_tokenbiryani_peers_told_key(&tmcf->zone, who, now,
                                                     &tk);
                break;

            case TB_PEER_SESSION:
                ngx_http_tokenbiryani_peers_told_session(&tmcf->zone, who,
                                                         now, &ts);
                break;

            default:
                /* not what a peer writes: the rest too */
                return;
            }
        }

        return;
    }

    /* "instance fingerprint id news", "instance fingerprint id org" */

    inst = p;
    p = ngx_strlchr((u_char *) p, (u_char *) last, ' ');
    if (p == NULL) {
        return;
    }

    who = ngx_http_tokenbiryani_rpeers_who(tmcf, inst, p - inst);

    if (who == 0) {
        return;
    }

    fp = p + 1;

    if (last - fp < 17 || fp[16] != ' ') {
        return;
    }

    for (i = 0; i < 8; i++) {
        b = ngx_hextoi((u_char *) fp + 2 * i, 2);
        if (b < 0) {
            return;
        }

        fingerprint[i] = (u_char) b;
    }

    id = fp + 17;
    p = ngx_strlchr((u_char *) id, (u_char *) last, ' ');
    if (p == NULL) {
        return;
    }

    id_len = p - id;

    if (id_len == 0 || id_len > TB_ID_MAX) {
        return;
    }

    if (kind == 'o') {
        for (p++, nl = p; nl < last; nl++) {
            if (*nl < 0x20 || *nl == 0x7f) {
                /* not what an answer's header could have named */
                return;
            }
        }

        (void) ngx_http_tokenbiryani_peers_adopt(&tmcf->zone, id, id_len,
                                                 fingerprint, NULL, p,
                                                 last - p, who, now);
        return;
    }

    if (!tb_account_news_scan(&news, (const char *) p + 1, last - p - 1)) {
        return;
    }

    (void) ngx_http_tokenbiryani_peers_adopt(&tmcf->zone, id, id_len,
                                             fingerprint, &news, NULL, 0,
                                             who, now);
}


/* KEYS: the session's; ARGV: value, ttl, channel, the announcement */
static const char  ngx_http_tokenbiryani_lua_owner[] =
    "redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) "
    "if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end "
    "return 1";


/* a request that waits for what the peers know: a conversation's owner
 * (session), or an object (id) */
typedef struct {
    ngx_http_request_t                    *request;    /* NULL: it ended */
    ngx_pool_cleanup_t                    *cln;
    ngx_http_tokenbiryani_store_resume_pt  resume;
    ngx_http_tokenbiryani_main_conf_t     *tmcf;
    uint64_t                               session;
    ngx_uint_t                             claim;      /* a batch's charge
                                                          asked for */
    size_t                                 id_len;
    u_char                                 id[NGX_HTTP_TB_OBJECT_ID_MAX];
} ngx_http_tokenbiryani_rpeers_wait_t;


static void
ngx_http_tokenbiryani_rpeers_gone(void *data)
{
    ngx_http_tokenbiryani_rpeers_wait_t *w = data;

    /* the answer, when it comes, finds nobody waiting */
    w->request = NULL;
}


static void
ngx_http_tokenbiryani_rpeers_owned(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rpeers_wait_t *w = data;

    ngx_connection_t                       *c;
    ngx_http_request_t                     *r;
    ngx_http_tokenbiryani_ctx_t            *ctx;
    ngx_http_tokenbiryani_store_resume_pt   resume;

    r = w->request;
    resume = w->resume;

    if (w->claim) {
        /* another gateway charges it: this request reads it, and does not
         * charge it again (no answer: charged here, as without Redis) */
        if (r && reply && reply->type == REDIS_REPLY_INTEGER
            && reply->integer == 0)
        {
            ctx = ngx_http_get_module_ctx(r, ngx_http_tokenbiryani_module);
            ctx->claim_lost = 1;
        }

    } else if (reply && reply->type == REDIS_REPLY_STRING) {
        if (w->id_len) {
            (void) ngx_http_tokenbiryani_store_object_in(w->tmcf,
                       ngx_cycle->log, w->id, w->id_len,
                       (u_char *) reply->str, reply->len, 0);

        } else {
            ngx_http_tokenbiryani_rzone_owner(w->tmcf, w->session,
                                              (u_char *) reply->str,
                                              reply->len);
        }
    }

    if (r) {
        w->cln->handler = NULL;
    }

    ngx_free(w);

    if (r == NULL) {
        return;
    }

    /* the request goes on as if the zone had known */

    c = r->connection;

    resume(r);
    ngx_http_run_posted_requests(c);
}


/* this worker's connection, when it is ready; NULL: no Redis, or away
 * (the zone's knowledge is all there is); len: of an object's id to ask
 * about, 1 to NGX_HTTP_TB_OBJECT_ID_MAX */
static ngx_http_tokenbiryani_redis_t *
ngx_http_tokenbiryani_rpeers_ready(size_t len)
{
    ngx_http_tokenbiryani_redis_t  *rd;

    rd = ngx_http_tokenbiryani_rpeers.cmd;

    if (rd == NULL || rd->state != NGX_HTTP_TB_REDIS_READY
        || len == 0 || len > NGX_HTTP_TB_OBJECT_ID_MAX)
    {
        return NULL;
    }

    return rd;
}


/* argv sent, the request resumed with its answer: NGX_AGAIN; NGX_OK when
 * it cannot wait (it goes on with what the zone knows) */
static ngx_int_t
ngx_http_tokenbiryani_rpeers_wait_for(ngx_http_request_t *r,
    ngx_http_tokenbiryani_store_resume_pt resume, uint64_t session,
    ngx_uint_t claim, const u_char *id, size_t id_len, int argc,
    const char **argv, const size_t *lens)
{
    ngx_pool_cleanup_t                   *cln;
    ngx_http_tokenbiryani_rpeers_wait_t  *w;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_OK;
    }

    w = ngx_alloc(sizeof(ngx_http_tokenbiryani_rpeers_wait_t),
                  r->connection->log);
    if (w == NULL) {
        return NGX_OK;
    }

    w->request = r;
    w->cln = cln;
    w->resume = resume;
    w->tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    w->session = session;
    w->claim = claim;
    w->id_len = id_len;

    if (id_len) {
        ngx_memcpy(w->id, id, id_len);
    }

    if (ngx_http_tokenbiryani_redis_send(ngx_http_tokenbiryani_rpeers.cmd,
                                         ngx_http_tokenbiryani_rpeers_owned,
                                         w, argc, argv, lens, 0)
        != NGX_OK)
    {
        ngx_free(w);
        return NGX_OK;
    }

    cln->handler = ngx_http_tokenbiryani_rpeers_gone;
    cln->data = w;

    return NGX_AGAIN;
}


static ngx_int_t
ngx_http_tokenbiryani_rpeers_owner_get(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_http_tokenbiryani_store_resume_pt resume)
{
    int64_t                                cached;
    size_t                                 lens[2];
    const char                            *argv[2];
    ngx_http_tokenbiryani_redis_t         *rd;
    ngx_http_tokenbiryani_main_conf_t     *tmcf;
    const ngx_http_tokenbiryani_rnames_t  *n;
    u_char                                 key[128];

    if (ctx->kind != NGX_HTTP_TB_MESSAGES || ctx->route.session == 0) {
        return NGX_OK;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    rd = ngx_http_tokenbiryani_rpeers_ready(1);
    n = ngx_http_tokenbiryani_rpeers.n;

    if (rd == NULL) {
        return NGX_OK;
    }

    if (ngx_http_tokenbiryani_affinity_get(&tmcf->zone, ctx->route.session,
                                           ngx_http_tokenbiryani_now_ms(),
                                           &cached)
        >= 0)
    {
        /* known here: a peer's new owner would have been told */
        return NGX_OK;
    }

    argv[0] = "GET";
    lens[0] = 3;
    argv[1] = (char *) key;
    lens[1] = ngx_snprintf(key, sizeof(key), "%s:aff:%016uxL", n->ns,
                           ctx->route.session)
              - key;

    return ngx_http_tokenbiryani_rpeers_wait_for(r, resume,
                                                 ctx->route.session, 0, NULL,
                                                 0, 2, argv, lens);
}


static ngx_int_t
ngx_http_tokenbiryani_rpeers_object_get(ngx_http_request_t *r,
    const u_char *id, size_t len,
    ngx_http_tokenbiryani_store_resume_pt resume)
{
    size_t                          lens[3];
    const char                     *argv[3];
    ngx_http_tokenbiryani_redis_t  *rd;

    rd = ngx_http_tokenbiryani_rpeers_ready(len);

    if (rd == NULL) {
        return NGX_OK;
    }

    argv[0] = "HGET";
    lens[0] = 4;
    argv[1] = ngx_http_tokenbiryani_rpeers.n->objects;
    lens[1] = ngx_strlen(argv[1]);
    argv[2] = (const char *) id;
    lens[2] = len;

    return ngx_http_tokenbiryani_rpeers_wait_for(r, resume, 0, 0, id, len,
                                                 3, argv, lens);
}


static void
ngx_http_tokenbiryani_rpeers_put_done(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    /* a write nobody waits for: Redis away loses it, the next turn of the
     * conversation tells it again */
}


static void
ngx_http_tokenbiryani_rpeers_owner_put(ngx_http_tokenbiryani_main_conf_t *tmcf,
    uint64_t session, const ngx_str_t *account, int64_t cached,
    ngx_uint_t share)
{
    u_char                                *p;
    int64_t                                now;
    ngx_uint_t                             i;
    size_t                                 lens[8];
    const char                            *argv[8];
    ngx_http_tokenbiryani_redis_t         *rd;
    const ngx_http_tokenbiryani_rnames_t  *n;
    u_char                                 key[128], owner[TB_ID_MAX + 32],
                                           value[TB_REC_ENVELOPE_LEN(TB_ID_MAX
                                                                     + 32)
                                                 + 1];
    u_char                                 ttl[NGX_INT_T_LEN + 1],
                                           plain[32], msg[32 + 64], hex[16];

    if (share == NGX_HTTP_TB_AFFINITY_KEPT) {
        return;
    }

    rd = ngx_http_tokenbiryani_rpeers_ready(1);
    n = ngx_http_tokenbiryani_rpeers.n;

    if (rd == NULL || account->len > TB_ID_MAX) {
        return;
    }

    argv[0] = "EVAL";
    argv[1] = ngx_http_tokenbiryani_lua_owner;
    argv[2] = "1";

    argv[3] = (char *) key;
    ngx_snprintf(key, sizeof(key), "%s:aff:%016uxL%Z", n->ns, session);

    /* the owner, authenticated: its session is its name */

    now = ngx_http_tokenbiryani_now_ms();

    p = ngx_snprintf(owner, sizeof(owner), "%V %L", account,
                     cached > 0 ? cached : 0);
    ngx_sprintf(hex, "%016uxL", session);

    if (tb_rec_wrap(&tmcf->rec, TB_REC_OWNER, (char *) hex, sizeof(hex),
                    NULL, 0, tb_rec_next_gen(0, now), (char *) owner,
                    p - owner, (char *) value, sizeof(value))
        == 0)
    {
        return;
    }

    argv[4] = (char *) value;

    argv[5] = (char *) ttl;
    ngx_sprintf(ttl, "%L%Z",
                (int64_t) ngx_max(tmcf->tbcf->affinity_ttl_seconds, 1));

    argv[6] = n->changes;

    /* a new owner is announced; a refresh only lengthens its life */
    argv[7] = (char *) msg;
    msg[0] = '\0';

    if (share == NGX_HTTP_TB_AFFINITY_CHANGED) {
        p = ngx_sprintf(plain, "f %016uxL", session);

        if (tb_msg_sign(&tmcf->rec, (char *) plain, p - plain, now,
                        (char *) msg, sizeof(msg))
            == 0)
        {
            msg[0] = '\0';
        }
    }

    for (i = 0; i < 8; i++) {
        lens[i] = ngx_strlen(argv[i]);
    }

    if (ngx_http_tokenbiryani_redis_send(rd,
            ngx_http_tokenbiryani_rpeers_put_done, NULL, 8, argv, lens, 0)
        == NGX_OK)
    {
        /* the client may send the next turn to a peer the
         * moment it has this answer: the owner is on its way first */
        ngx_http_tokenbiryani_redis_push(rd);
    }
}


/*
 * KEYS: the batch's claim; ARGV: this instance, its time to live (ms).
 * 1: this instance charges it (it claimed it now, or had), 0: another does
 */
static const char  ngx_http_tokenbiryani_lua_claim[] =
    "local v = redis.call('GET', KEYS[1]) "
    "if v and v ~= ARGV[1] then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1";

#define NGX_HTTP_TB_CLAIM_MS           "600000"


typedef struct {
    ngx_http_tokenbiryani_claim_pt         done;
    void                                  *data;
} ngx_http_tokenbiryani_rpeers_claim_t;


/* the claim's command into argv (key: room for it) */
static void
ngx_http_tokenbiryani_rpeers_claim_args(const u_char *id, size_t len,
    u_char *key, size_t size, const char **argv, size_t *lens)
{
    const ngx_http_tokenbiryani_rnames_t  *n;

    n = ngx_http_tokenbiryani_rpeers.n;

    argv[0] = "EVAL";
    argv[1] = ngx_http_tokenbiryani_lua_claim;
    argv[2] = "1";
    argv[3] = (char *) key;
    argv[4] = n->instance;
    argv[5] = NGX_HTTP_TB_CLAIM_MS;

    lens[0] = 4;
    lens[1] = sizeof(ngx_http_tokenbiryani_lua_claim) - 1;
    lens[2] = 1;
    lens[3] = ngx_snprintf(key, size, "%s:claim:%*s", n->ns, len, id) - key;
    lens[4] = ngx_strlen(n->instance);
    lens[5] = sizeof(NGX_HTTP_TB_CLAIM_MS) - 1;
}


static void
ngx_http_tokenbiryani_rpeers_claimed(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_rpeers_claim_t *cl = data;

    ngx_http_tokenbiryani_claim_pt   done;
    void                            *arg;

    done = cl->done;
    arg = cl->data;
    ngx_free(cl);

    /* no answer: charged here, as without Redis */
    done(arg, !(reply && reply->type == REDIS_REPLY_INTEGER
                && reply->integer == 0));
}


static ngx_int_t
ngx_http_tokenbiryani_rpeers_object_claim(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len,
    ngx_http_tokenbiryani_claim_pt done, void *data)
{
    size_t                                 lens[6];
    const char                            *argv[6];
    ngx_http_tokenbiryani_redis_t         *rd;
    ngx_http_tokenbiryani_rpeers_claim_t  *cl;
    u_char                                 key[NGX_HTTP_TB_OBJECT_ID_MAX
                                               + 128];

    rd = ngx_http_tokenbiryani_rpeers_ready(len);

    if (rd == NULL) {
        /* without Redis, charged here */
        return NGX_DECLINED;
    }

    cl = ngx_alloc(sizeof(ngx_http_tokenbiryani_rpeers_claim_t),
                   ngx_cycle->log);
    if (cl == NULL) {
        return NGX_DECLINED;
    }

    cl->done = done;
    cl->data = data;

    ngx_http_tokenbiryani_rpeers_claim_args(id, len, key, sizeof(key), argv,
                                            lens);

    if (ngx_http_tokenbiryani_redis_send(rd,
                                         ngx_http_tokenbiryani_rpeers_claimed,
                                         cl, 6, argv, lens, 0)
        != NGX_OK)
    {
        ngx_free(cl);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_rpeers_object_claim_r(ngx_http_request_t *r,
    const u_char *id, size_t len,
    ngx_http_tokenbiryani_store_resume_pt resume)
{
    size_t       lens[6];
    const char  *argv[6];
    u_char       key[NGX_HTTP_TB_OBJECT_ID_MAX + 128];

    if (ngx_http_tokenbiryani_rpeers_ready(len) == NULL) {
        return NGX_OK;
    }

    ngx_http_tokenbiryani_rpeers_claim_args(id, len, key, sizeof(key), argv,
                                            lens);

    return ngx_http_tokenbiryani_rpeers_wait_for(r, resume, 0, 1, id, len, 6,
                                                 argv, lens);
}


const ngx_http_tokenbiryani_store_peers_t  ngx_http_tokenbiryani_rpeers_ops = {
    ngx_http_tokenbiryani_rpeers_owner_get,
    ngx_http_tokenbiryani_rpeers_owner_put,
    ngx_http_tokenbiryani_rpeers_object_get,
    ngx_http_tokenbiryani_rpeers_object_claim,
    ngx_http_tokenbiryani_rpeers_object_claim_r
};
