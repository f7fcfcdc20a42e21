/*
 * What instances agree on at request time (see
 * ngx_http_tokenbiryani_share.h).
 *
 *     N:aff:<session>   "<account id> <cached prompt tokens>" in the
 *                       envelope that authenticates it (tb_record.h: the
 *                       session's hex its name), expiring with
 *                       affinity_ttl_seconds; a new owner is also
 *                       announced on N:changes as "f <session>", which the
 *                       subscriber of every instance reads back into its
 *                       zone (ngx_http_tokenbiryani_redis_store.c)
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_share.h"
#include "ngx_http_tokenbiryani_redis.h"
#include "ngx_http_tokenbiryani_redis_store.h"
#include "ngx_http_tokenbiryani_redis_zone.h"


/* KEYS: the session's; ARGV: value, ttl, channel, the announcement */
static const char  ngx_http_tokenbiryani_lua_owner[] =
    "redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) "
    "if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end "
    "return 1";


typedef struct {
    ngx_http_request_t                    *request;    /* NULL: it ended */
    ngx_pool_cleanup_t                    *cln;
    ngx_http_tokenbiryani_share_resume_pt  resume;
    ngx_http_tokenbiryani_main_conf_t     *tmcf;
    uint64_t                               session;
} ngx_http_tokenbiryani_share_wait_t;


static void
ngx_http_tokenbiryani_share_gone(void *data)
{
    ngx_http_tokenbiryani_share_wait_t *w = data;

    /* the answer, when it comes, finds nobody waiting */
    w->request = NULL;
}


static void
ngx_http_tokenbiryani_share_owned(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    ngx_http_tokenbiryani_share_wait_t *w = data;

    ngx_connection_t                       *c;
    ngx_http_request_t                     *r;
    ngx_http_tokenbiryani_share_resume_pt   resume;

    r = w->request;
    resume = w->resume;

    if (reply && reply->type == REDIS_REPLY_STRING) {
        ngx_http_tokenbiryani_rzone_owner(w->tmcf, w->session,
                                          (u_char *) reply->str, reply->len);
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


ngx_int_t
ngx_http_tokenbiryani_share_owner(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_http_tokenbiryani_share_resume_pt resume)
{
    int64_t                              cached;
    size_t                               lens[2];
    const char                          *argv[2];
    ngx_pool_cleanup_t                  *cln;
    ngx_http_tokenbiryani_redis_t       *rd;
    ngx_http_tokenbiryani_rnames_t      *n;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    ngx_http_tokenbiryani_share_wait_t  *w;
    u_char                               key[128];

    if (ctx->kind != NGX_HTTP_TB_MESSAGES || ctx->route.session == 0) {
        return NGX_OK;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    rd = ngx_http_tokenbiryani_redis_worker(tmcf, &n);
    if (rd == NULL || rd->state != NGX_HTTP_TB_REDIS_READY) {
        /* no Redis, or away: the zone's knowledge is all there is */
        return NGX_OK;
    }

    if (ngx_http_tokenbiryani_affinity_get(&tmcf->zone, ctx->route.session,
                                           ngx_http_tokenbiryani_now_ms(),
                                           &cached)
        >= 0)
    {
        /* known here: another instance's new owner would have been told */
        return NGX_OK;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_OK;
    }

    w = ngx_alloc(sizeof(ngx_http_tokenbiryani_share_wait_t),
                  r->connection->log);
    if (w == NULL) {
        return NGX_OK;
    }

    w->request = r;
    w->cln = cln;
    w->resume = resume;
    w->tmcf = tmcf;
    w->session = ctx->route.session;

    argv[0] = "GET";
    lens[0] = 3;
    argv[1] = (char *) key;
    lens[1] = ngx_snprintf(key, sizeof(key), "%s:aff:%016uxL", n->ns,
                           ctx->route.session)
              - key;

    if (ngx_http_tokenbiryani_redis_send(rd, ngx_http_tokenbiryani_share_owned,
                                         w, 2, argv, lens, 0)
        != NGX_OK)
    {
        ngx_free(w);
        return NGX_OK;
    }

    cln->handler = ngx_http_tokenbiryani_share_gone;
    cln->data = w;

    return NGX_AGAIN;
}


static void
ngx_http_tokenbiryani_share_told(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    /* a write nobody waits for: Redis away loses it, the next turn of the
     * conversation tells it again */
}


void
ngx_http_tokenbiryani_share_affinity(ngx_http_tokenbiryani_main_conf_t *tmcf,
    uint64_t session, const ngx_str_t *account, int64_t cached,
    ngx_uint_t share)
{
    u_char                          *p;
    int64_t                          now;
    ngx_uint_t                       i;
    size_t                           lens[8];
    const char                      *argv[8];
    ngx_http_tokenbiryani_redis_t   *rd;
    ngx_http_tokenbiryani_rnames_t  *n;
    u_char                           key[128], owner[TB_ID_MAX + 32],
                                     value[TB_REC_ENVELOPE_LEN(TB_ID_MAX
                                                               + 32) + 1];
    u_char                           ttl[NGX_INT_T_LEN + 1], plain[32],
                                     msg[32 + 64], hex[16];

    if (share == NGX_HTTP_TB_AFFINITY_KEPT) {
        return;
    }

    rd = ngx_http_tokenbiryani_redis_worker(tmcf, &n);
    if (rd == NULL || rd->state != NGX_HTTP_TB_REDIS_READY
        || account->len > TB_ID_MAX)
    {
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
            ngx_http_tokenbiryani_share_told, NULL, 8, argv, lens, 0)
        == NGX_OK)
    {
        /* the client may send the next turn to another instance the
         * moment it has this answer: the owner is on its way first */
        ngx_http_tokenbiryani_redis_push(rd);
    }
}
