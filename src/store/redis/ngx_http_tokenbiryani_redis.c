/*
 * hiredis's asynchronous context on nginx's event loop (see
 * ngx_http_tokenbiryani_redis.h).
 *
 * hiredis asks for read and write interest through its ev hooks; they map
 * onto an ngx_connection_t made for its socket, registered level-triggered:
 * hiredis reads at most 16 KB per call, and an edge-triggered socket with
 * more than that buffered would never be reported again.  The socket is
 * hiredis's: it closes it, so the connection is given back without
 * closing it (the cleanup hook).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_tokenbiryani_redis.h"


#define NGX_HTTP_TB_REDIS_BACKOFF_MIN   100
#define NGX_HTTP_TB_REDIS_BACKOFF_MAX   5000


typedef struct {
    ngx_queue_t                            queue;      /* in rd->sent */
    ngx_http_tokenbiryani_redis_t         *rd;
    ngx_http_tokenbiryani_redis_reply_pt   cb;
    void                                  *data;
    ngx_msec_t                             sent;
    ngx_uint_t                             persistent;
} ngx_http_tokenbiryani_redis_cmd_t;


static void ngx_http_tokenbiryani_redis_connect(
    ngx_http_tokenbiryani_redis_t *rd);
static void ngx_http_tokenbiryani_redis_lost(
    ngx_http_tokenbiryani_redis_t *rd);
static ngx_int_t ngx_http_tokenbiryani_redis_command(
    ngx_http_tokenbiryani_redis_t *rd,
    ngx_http_tokenbiryani_redis_reply_pt cb, void *data, int argc,
    const char **argv, const size_t *argvlen, ngx_uint_t persistent);


/* the ev hooks: interest in the socket, as nginx events */

static void
ngx_http_tokenbiryani_redis_read_handler(ngx_event_t *ev)
{
    ngx_connection_t  *c = ev->data;

    redisAsyncHandleRead(c->data);
}


static void
ngx_http_tokenbiryani_redis_write_handler(ngx_event_t *ev)
{
    ngx_connection_t  *c = ev->data;

    redisAsyncHandleWrite(c->data);
}


/* interest in one direction: added level-triggered, or deleted */
static void
ngx_http_tokenbiryani_redis_interest(ngx_event_t *ev, ngx_int_t event,
    ngx_uint_t add)
{
    if (add && !ev->active) {
        if (ngx_add_event(ev, event, NGX_LEVEL_EVENT) != NGX_OK) {
            ngx_log_error(NGX_LOG_ALERT, ev->log, 0,
                          "tokenbiryani: a Redis connection's event cannot "
                          "be added");
        }

    } else if (!add && ev->active) {
        (void) ngx_del_event(ev, event, 0);
    }
}


/* hiredis's four event hooks, one body: which event, and add or delete */
#define ngx_http_tokenbiryani_redis_hook(name, ev, event, add)                \
    static void                                                               \
    name(void *privdata)                                                      \
    {                                                                         \
        ngx_connection_t  *c = privdata;                                      \
                                                                              \
        ngx_http_tokenbiryani_redis_interest(c->ev, event, add);              \
    }

ngx_http_tokenbiryani_redis_hook(ngx_http_tokenbiryani_redis_add_read,
                                 read, NGX_READ_EVENT, 1)
ngx_http_tokenbiryani_redis_hook(ngx_http_tokenbiryani_redis_del_read,
                                 read, NGX_READ_EVENT, 0)
ngx_http_tokenbiryani_redis_hook(ngx_http_tokenbiryani_redis_add_write,
                                 write, NGX_WRITE_EVENT, 1)
ngx_http_tokenbiryani_redis_hook(ngx_http_tokenbiryani_redis_del_write,
                                 write, NGX_WRITE_EVENT, 0)


/* hiredis frees its context: the connection back, its socket left open
 * for hiredis to close */
static void
ngx_http_tokenbiryani_redis_cleanup(void *privdata)
{
    ngx_connection_t  *c = privdata;

    ngx_http_tokenbiryani_redis_del_read(c);
    ngx_http_tokenbiryani_redis_del_write(c);

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    ngx_free_connection(c);
    c->fd = (ngx_socket_t) -1;
}


/* a reply, or NULL as the context goes */
static void
ngx_http_tokenbiryani_redis_reply(redisAsyncContext *ac, void *reply,
    void *privdata)
{
    ngx_http_tokenbiryani_redis_cmd_t *cmd = privdata;

    void                                  *data;
    ngx_http_tokenbiryani_redis_t         *rd;
    ngx_http_tokenbiryani_redis_reply_pt   cb;

    rd = cmd->rd;
    cb = cmd->cb;
    data = cmd->data;

    if (reply == NULL && rd->ac == ac) {
        /* the connection is going: nothing more is sent on it */
        rd->state = NGX_HTTP_TB_REDIS_DOWN;
    }

    if (cmd->persistent) {
        if (reply == NULL) {
            ngx_free(cmd);
        }

        cb(rd, reply, data);
        return;
    }

    ngx_queue_remove(&cmd->queue);
    rd->nsent--;
    ngx_free(cmd);

    cb(rd, reply, data);
}


/* the oldest command in flight: answered in time, or Redis is down */
static void
ngx_http_tokenbiryani_redis_watch(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_redis_t *rd = ev->data;

    ngx_msec_t                          elapsed;
    ngx_http_tokenbiryani_redis_cmd_t  *cmd;
    char                                why[128];

    if (ngx_queue_empty(&rd->sent)) {
        return;
    }

    cmd = ngx_queue_data(ngx_queue_head(&rd->sent),
                         ngx_http_tokenbiryani_redis_cmd_t, queue);

    elapsed = ngx_current_msec - cmd->sent;

    if (elapsed < rd->conf->timeout) {
        ngx_add_timer(ev, rd->conf->timeout - elapsed);
        return;
    }

    ngx_snprintf((u_char *) why, sizeof(why), "no answer within %M ms "
                 "(store.timeout_seconds)%Z", rd->conf->timeout);

    ngx_http_tokenbiryani_redis_drop(rd, why);
}


static void
ngx_http_tokenbiryani_redis_retry(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_redis_connect(ev->data);
}


static void
ngx_http_tokenbiryani_redis_error(ngx_http_tokenbiryani_redis_t *rd,
    const char *what, const char *why)
{
    ngx_snprintf((u_char *) rd->error, sizeof(rd->error) - 1, "%s%s%s%Z",
                 what, why ? ": " : "", why ? why : "");
    rd->error[sizeof(rd->error) - 1] = '\0';
}


/* once per connection that ends: down, and the next try scheduled */
static void
ngx_http_tokenbiryani_redis_lost(ngx_http_tokenbiryani_redis_t *rd)
{
    rd->state = NGX_HTTP_TB_REDIS_DOWN;

    if (rd->watch.timer_set) {
        ngx_del_timer(&rd->watch);
    }

    if (rd->stopped) {
        return;
    }

    if (rd->down) {
        rd->down(rd);
    }

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    if (!rd->retry.timer_set) {
        ngx_add_timer(&rd->retry, rd->backoff);
    }

    rd->backoff = ngx_min(rd->backoff * 2, NGX_HTTP_TB_REDIS_BACKOFF_MAX);
}


static void
ngx_http_tokenbiryani_redis_connected(const redisAsyncContext *ac, int status)
{
    ngx_http_tokenbiryani_redis_t *rd = ac->data;

    if (status == REDIS_OK || rd->ac != ac) {
        return;
    }

    /* hiredis frees the context after this */
    ngx_http_tokenbiryani_redis_error(rd, "cannot connect", ac->errstr);
    rd->ac = NULL;
    ngx_http_tokenbiryani_redis_lost(rd);
}


static void
ngx_http_tokenbiryani_redis_disconnected(const redisAsyncContext *ac,
    int status)
{
    ngx_http_tokenbiryani_redis_t *rd = ac->data;

    if (rd->ac != ac) {
        /* dropped by us: said already */
        return;
    }

    ngx_http_tokenbiryani_redis_error(rd, "the connection was closed",
                                      ac->err ? ac->errstr : NULL);
    rd->ac = NULL;
    ngx_http_tokenbiryani_redis_lost(rd);
}


static void
ngx_http_tokenbiryani_redis_handshake(ngx_http_tokenbiryani_redis_t *rd,
    redisReply *reply, void *data)
{
    const char  *what = data;

    if (reply == NULL) {
        return;
    }

    if (reply->type == REDIS_REPLY_ERROR) {
        /* Redis's words: they never hold the password */
        ngx_http_tokenbiryani_redis_error(rd, what, reply->str);
        ngx_http_tokenbiryani_redis_drop(rd, NULL);
        return;
    }

    if (ngx_strcmp(what, "PING") != 0) {
        return;
    }

    rd->state = NGX_HTTP_TB_REDIS_READY;
    rd->backoff = NGX_HTTP_TB_REDIS_BACKOFF_MIN;
    rd->error[0] = '\0';

    if (rd->ready) {
        rd->ready(rd);
    }
}


/*
 * The handshake's commands, the same on the worker's connection and on a
 * blocking one: AUTH [user] password, and SELECT db.  Each fills argv and
 * lens and returns argc, 0 when the configuration asks for none.
 */
static int
ngx_http_tokenbiryani_redis_auth_args(ngx_http_tokenbiryani_redis_conf_t *conf,
    const char **argv, size_t *lens)
{
    int  argc;

    if (conf->password.len == 0) {
        return 0;
    }

    argc = 0;
    argv[argc] = "AUTH";
    lens[argc++] = 4;

    if (conf->user.len) {
        argv[argc] = (char *) conf->user.data;
        lens[argc++] = conf->user.len;
    }

    argv[argc] = (char *) conf->password.data;
    lens[argc++] = conf->password.len;

    return argc;
}


static int
ngx_http_tokenbiryani_redis_select_args(
    ngx_http_tokenbiryani_redis_conf_t *conf, const char **argv, size_t *lens,
    u_char *db)
{
    if (conf->database <= 0) {
        return 0;
    }

    argv[0] = "SELECT";
    lens[0] = 6;
    argv[1] = (char *) db;
    lens[1] = ngx_sprintf(db, "%d", conf->database) - db;

    return 2;
}


/*
 * One command of the handshake, none when argc is 0; its answer goes to
 * the handshake callback with "refused" to say.  One that cannot be sent
 * drops the connection, and the handshake goes no further.
 */
static ngx_int_t
ngx_http_tokenbiryani_redis_greet(ngx_http_tokenbiryani_redis_t *rd,
    const char *refused, const char *unsent, int argc, const char **argv,
    const size_t *lens)
{
    if (argc == 0) {
        return NGX_OK;
    }

    if (ngx_http_tokenbiryani_redis_command(rd,
            ngx_http_tokenbiryani_redis_handshake, (void *) refused, argc,
            argv, lens, 0)
        != NGX_OK)
    {
        ngx_http_tokenbiryani_redis_drop(rd, unsent);
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_redis_connect(ngx_http_tokenbiryani_redis_t *rd)
{
    int                                  argc;
    size_t                               lens[3];
    ngx_connection_t                    *c;
    redisAsyncContext                   *ac;
    const char                          *argv[3];
    ngx_http_tokenbiryani_redis_conf_t  *conf;
    u_char                               db[NGX_INT_T_LEN + 1];

    if (rd->ac || rd->stopped) {
        return;
    }

    conf = rd->conf;

    ac = conf->path.len ? redisAsyncConnectUnix((char *) conf->path.data)
                        : redisAsyncConnect((char *) conf->host.data,
                                            conf->port);
    if (ac == NULL) {
        ngx_http_tokenbiryani_redis_error(rd, "cannot connect", "no memory");
        ngx_http_tokenbiryani_redis_lost(rd);
        return;
    }

    if (ac->err) {
        ngx_http_tokenbiryani_redis_error(rd, "cannot connect", ac->errstr);
        redisAsyncFree(ac);
        ngx_http_tokenbiryani_redis_lost(rd);
        return;
    }

    c = ngx_get_connection(ac->c.fd, rd->log);
    if (c == NULL) {
        ngx_http_tokenbiryani_redis_error(rd, "cannot connect",
                                          "no free connection "
                                          "(worker_connections)");
        redisAsyncFree(ac);
        ngx_http_tokenbiryani_redis_lost(rd);
        return;
    }

    c->data = ac;
    c->log = rd->log;
    c->read->log = rd->log;
    c->write->log = rd->log;
    c->read->handler = ngx_http_tokenbiryani_redis_read_handler;
    c->write->handler = ngx_http_tokenbiryani_redis_write_handler;

    ac->data = rd;
    ac->ev.data = c;
    ac->ev.addRead = ngx_http_tokenbiryani_redis_add_read;
    ac->ev.delRead = ngx_http_tokenbiryani_redis_del_read;
    ac->ev.addWrite = ngx_http_tokenbiryani_redis_add_write;
    ac->ev.delWrite = ngx_http_tokenbiryani_redis_del_write;
    ac->ev.cleanup = ngx_http_tokenbiryani_redis_cleanup;

    (void) redisAsyncSetConnectCallback(ac,
                                        ngx_http_tokenbiryani_redis_connected);
    (void) redisAsyncSetDisconnectCallback(ac,
                                     ngx_http_tokenbiryani_redis_disconnected);

    rd->ac = ac;
    rd->state = NGX_HTTP_TB_REDIS_CONNECTING;

    /* AUTH, SELECT and a PING whose answer makes it ready, all timed */

    argc = ngx_http_tokenbiryani_redis_auth_args(conf, argv, lens);

    if (ngx_http_tokenbiryani_redis_greet(rd, "AUTH refused",
                                          "AUTH cannot be sent",
                                          argc, argv, lens)
        != NGX_OK)
    {
        return;
    }

    argc = ngx_http_tokenbiryani_redis_select_args(conf, argv, lens, db);

    if (ngx_http_tokenbiryani_redis_greet(rd, "SELECT refused",
                                          "SELECT cannot be sent",
                                          argc, argv, lens)
        != NGX_OK)
    {
        return;
    }

    argv[0] = "PING";
    lens[0] = 4;

    (void) ngx_http_tokenbiryani_redis_greet(rd, "PING", "PING cannot be sent",
                                             1, argv, lens);
}


void
ngx_http_tokenbiryani_redis_start(ngx_http_tokenbiryani_redis_t *rd)
{
    ngx_queue_init(&rd->sent);

    rd->backoff = NGX_HTTP_TB_REDIS_BACKOFF_MIN;

    rd->retry.handler = ngx_http_tokenbiryani_redis_retry;
    rd->retry.data = rd;
    rd->retry.log = rd->log;
    rd->retry.cancelable = 1;

    rd->watch.handler = ngx_http_tokenbiryani_redis_watch;
    rd->watch.data = rd;
    rd->watch.log = rd->log;
    rd->watch.cancelable = 1;

    /*
     * From init_worker the clock is the master's, as it was before it
     * read the store and forked: the handshake's deadline counts from now
     */
    ngx_time_update();

    ngx_http_tokenbiryani_redis_connect(rd);
}


void
ngx_http_tokenbiryani_redis_stop(ngx_http_tokenbiryani_redis_t *rd)
{
    redisAsyncContext  *ac;

    rd->stopped = 1;

    if (rd->retry.timer_set) {
        ngx_del_timer(&rd->retry);
    }

    if (rd->watch.timer_set) {
        ngx_del_timer(&rd->watch);
    }

    ac = rd->ac;

    if (ac) {
        rd->ac = NULL;
        rd->state = NGX_HTTP_TB_REDIS_DOWN;
        redisAsyncFree(ac);
    }
}


void
ngx_http_tokenbiryani_redis_drop(ngx_http_tokenbiryani_redis_t *rd,
    const char *why)
{
    redisAsyncContext  *ac;

    ac = rd->ac;

    if (ac == NULL) {
        return;
    }

    if (why) {
        ngx_http_tokenbiryani_redis_error(rd, why, NULL);
    }

    /* the callbacks in flight are answered NULL by the free, which is
     * deferred by hiredis when this runs inside one of them */
    rd->ac = NULL;
    rd->state = NGX_HTTP_TB_REDIS_DOWN;
    redisAsyncFree(ac);

    ngx_http_tokenbiryani_redis_lost(rd);
}


static ngx_int_t
ngx_http_tokenbiryani_redis_command(ngx_http_tokenbiryani_redis_t *rd,
    ngx_http_tokenbiryani_redis_reply_pt cb, void *data, int argc,
    const char **argv, const size_t *argvlen, ngx_uint_t persistent)
{
    ngx_http_tokenbiryani_redis_cmd_t  *cmd;

    cmd = ngx_alloc(sizeof(ngx_http_tokenbiryani_redis_cmd_t), rd->log);
    if (cmd == NULL) {
        return NGX_DECLINED;
    }

    cmd->rd = rd;
    cmd->cb = cb;
    cmd->data = data;
    cmd->sent = ngx_current_msec;
    cmd->persistent = persistent;

    if (redisAsyncCommandArgv(rd->ac, ngx_http_tokenbiryani_redis_reply, cmd,
                              argc, argv, argvlen)
        != REDIS_OK)
    {
        ngx_free(cmd);
        return NGX_DECLINED;
    }

    if (persistent) {
        return NGX_OK;
    }

    ngx_queue_insert_tail(&rd->sent, &cmd->queue);
    rd->nsent++;

    if (!rd->watch.timer_set) {
        ngx_add_timer(&rd->watch, rd->conf->timeout);
    }

    return NGX_OK;
}


void
ngx_http_tokenbiryani_redis_push(ngx_http_tokenbiryani_redis_t *rd)
{
    if (rd->ac && rd->state == NGX_HTTP_TB_REDIS_READY) {
        /* a non-blocking write: what does not fit waits for the event */
        redisAsyncHandleWrite(rd->ac);
    }
}


ngx_int_t
ngx_http_tokenbiryani_redis_send(ngx_http_tokenbiryani_redis_t *rd,
    ngx_http_tokenbiryani_redis_reply_pt cb, void *data, int argc,
    const char **argv, const size_t *argvlen, ngx_uint_t persistent)
{
    if (rd->state != NGX_HTTP_TB_REDIS_READY || rd->ac == NULL) {
        return NGX_DECLINED;
    }

    return ngx_http_tokenbiryani_redis_command(rd, cb, data, argc, argv,
                                               argvlen, persistent);
}


redisContext *
ngx_http_tokenbiryani_redis_connect_sync(
    ngx_http_tokenbiryani_redis_conf_t *conf, char *err, size_t size)
{
    int              argc;
    size_t           lens[3];
    ngx_msec_t       ms;
    redisReply      *r;
    redisContext    *c;
    struct timeval   tv;
    const char      *argv[3], *what;
    u_char           db[NGX_INT_T_LEN + 1];

    ms = ngx_max(conf->timeout, 1000);
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;

    c = conf->path.len
        ? redisConnectUnixWithTimeout((char *) conf->path.data, tv)
        : redisConnectWithTimeout((char *) conf->host.data, conf->port, tv);

    if (c == NULL || c->err) {
        ngx_cpystrn((u_char *) err,
                    (u_char *) (c ? c->errstr : "no memory"), size);
        if (c) {
            redisFree(c);
        }

        return NULL;
    }

    (void) redisSetTimeout(c, tv);

    for (what = "AUTH"; what; what = (what[0] == 'A') ? "SELECT" : NULL) {
        argc = (what[0] == 'A')
               ? ngx_http_tokenbiryani_redis_auth_args(conf, argv, lens)
               : ngx_http_tokenbiryani_redis_select_args(conf, argv, lens, db);

        if (argc == 0) {
            continue;
        }

        r = redisCommandArgv(c, argc, argv, lens);

        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            /* Redis's words: they never hold the password */
            ngx_snprintf((u_char *) err, size - 1, "%s refused: %s%Z", what,
                         r ? r->str : c->errstr);
            err[size - 1] = '\0';

            if (r) {
                freeReplyObject(r);
            }

            redisFree(c);
            return NULL;
        }

        freeReplyObject(r);
    }

    return c;
}
