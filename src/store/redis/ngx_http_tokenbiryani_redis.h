/*
 * One connection to Redis on the worker's event loop (store.backend:
 * redis): hiredis's asynchronous API, its reads and writes driven by nginx
 * connection events.  Nothing here waits: a command is sent and its reply
 * arrives through a callback, later, from the event loop.
 *
 * A Redis that does not answer a command within store.timeout_seconds is
 * treated as one that is down: the connection is dropped, every command
 * in flight is answered NULL, and it is tried again after a backoff that
 * doubles up to 5 s.  While it is not ready a command is refused at once
 * (NGX_DECLINED), so a caller never queues work behind a dead Redis.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_REDIS_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_REDIS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>


typedef struct {
    ngx_str_t                       host;      /* numeric, NUL-terminated */
    int                             port;
    ngx_str_t                       path;      /* a unix socket, or empty */
    int                             database;  /* 0: SELECT is not sent */
    ngx_str_t                       user;
    ngx_str_t                       password;
    ngx_msec_t                      timeout;
    ngx_str_t                       shown;     /* the URL, no password */
} ngx_http_tokenbiryani_redis_conf_t;


#define NGX_HTTP_TB_REDIS_DOWN          0
#define NGX_HTTP_TB_REDIS_CONNECTING    1
#define NGX_HTTP_TB_REDIS_READY         2


typedef struct ngx_http_tokenbiryani_redis_s  ngx_http_tokenbiryani_redis_t;

/* reply: NULL when the connection failed or timed out before it came */
typedef void (*ngx_http_tokenbiryani_redis_reply_pt)(
    ngx_http_tokenbiryani_redis_t *rd, redisReply *reply, void *data);

typedef void (*ngx_http_tokenbiryani_redis_event_pt)(
    ngx_http_tokenbiryani_redis_t *rd);


struct ngx_http_tokenbiryani_redis_s {
    ngx_http_tokenbiryani_redis_conf_t   *conf;
    redisAsyncContext                    *ac;
    ngx_log_t                            *log;
    ngx_uint_t                            state;
    ngx_uint_t                            stopped;    /* no reconnect */

    ngx_event_t                           retry;      /* the next connect */
    ngx_event_t                           watch;      /* the oldest reply */
    ngx_msec_t                            backoff;

    ngx_queue_t                           sent;       /* timed, oldest
                                                         first */
    ngx_uint_t                            nsent;

    /* ready: the handshake answered; down: lost (not at stop) */
    ngx_http_tokenbiryani_redis_event_pt  ready;
    ngx_http_tokenbiryani_redis_event_pt  down;
    void                                 *data;

    ngx_uint_t                            said_down;  /* logged once */
    char                                  error[256]; /* why it is down */
};


/* the first connect, from init_worker (later ones are its own) */
void ngx_http_tokenbiryani_redis_start(ngx_http_tokenbiryani_redis_t *rd);

/* closes it for good: commands in flight are answered NULL */
void ngx_http_tokenbiryani_redis_stop(ngx_http_tokenbiryani_redis_t *rd);

/*
 * Sends one command (binary-safe arguments).  NGX_OK: cb is called once,
 * later, with its reply or NULL.  NGX_DECLINED: not ready, cb is never
 * called.  persistent: a SUBSCRIBE, whose cb is called for every message
 * and is not bound by the timeout.
 */
ngx_int_t ngx_http_tokenbiryani_redis_send(ngx_http_tokenbiryani_redis_t *rd,
    ngx_http_tokenbiryani_redis_reply_pt cb, void *data, int argc,
    const char **argv, const size_t *argvlen, ngx_uint_t persistent);

/* what is queued written to the socket now, not at the next turn of the
 * event loop (a write that must land before the client can act on the
 * answer it goes with) */
void ngx_http_tokenbiryani_redis_push(ngx_http_tokenbiryani_redis_t *rd);

/* the connection dropped now, as if Redis had gone (a reply that is
 * garbage, a subscriber that must start over): reconnects after backoff */
void ngx_http_tokenbiryani_redis_drop(ngx_http_tokenbiryani_redis_t *rd,
    const char *why);


/*
 * A blocking connection, AUTH and SELECT done: for the master before
 * workers run and for a worker's last act as it exits, never for one
 * that serves.  Bounded by the timeout (a second at least); NULL with
 * the reason in err.
 */
redisContext *ngx_http_tokenbiryani_redis_connect_sync(
    ngx_http_tokenbiryani_redis_conf_t *conf, char *err, size_t size);


#endif /* _NGX_HTTP_TOKENBIRYANI_REDIS_H_INCLUDED_ */
