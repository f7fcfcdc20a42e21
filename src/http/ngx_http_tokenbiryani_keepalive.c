/*
 * tokenbiryani: idle upstream connections, kept per account and per worker
 * (the shape of ngx_http_upstream_keepalive_module, with the cache on the
 * account instead of the upstream{} block).  A connection is only put back
 * when its response's framing was exact (u->keepalive, decided by the
 * input filter).
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_keepalive.h"


static void ngx_http_tokenbiryani_idle_close_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_idle_dummy_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_close_idle(ngx_connection_t *c);
static void ngx_http_tokenbiryani_hand_over(ngx_connection_t *c, void *data,
    ngx_log_t *log);


ngx_int_t
ngx_http_tokenbiryani_keepalive_get(ngx_peer_connection_t *pc,
    ngx_http_tokenbiryani_account_t *a)
{
    ngx_queue_t                        *q;
    ngx_connection_t                   *c;
    ngx_http_tokenbiryani_keepalive_t  *item;

    for (q = ngx_queue_head(&a->cache);
         q != ngx_queue_sentinel(&a->cache);
         q = ngx_queue_next(q))
    {
        item = ngx_queue_data(q, ngx_http_tokenbiryani_keepalive_t, queue);
        c = item->connection;

        if (ngx_memn2cmp((u_char *) &item->sockaddr, (u_char *) pc->sockaddr,
                         item->socklen, pc->socklen)
            != 0)
        {
            continue;
        }

        ngx_queue_remove(q);
        ngx_queue_insert_head(&a->free, q);

        c->sent = 0;
        ngx_http_tokenbiryani_hand_over(c, NULL, pc->log);

        if (c->read->timer_set) {
            ngx_del_timer(c->read);
        }

        pc->connection = c;
        pc->cached = 1;

        return NGX_DONE;
    }

    return NGX_OK;
}


void
ngx_http_tokenbiryani_keepalive_put(ngx_peer_connection_t *pc,
    ngx_http_request_t *r, ngx_http_tokenbiryani_account_t *a)
{
    ngx_queue_t                        *q;
    ngx_connection_t                   *c;
    ngx_http_upstream_t                *u;
    ngx_http_tokenbiryani_keepalive_t  *item;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    u = r->upstream;
    c = pc->connection;

    if (tmcf->keepalive == 0
        || a->retired
        || c->read->eof || c->read->error || c->read->timedout
        || c->write->error || c->write->timedout
        || c->requests >= tmcf->keepalive_requests
        || !u->request_body_sent
        || ngx_terminate || ngx_exiting
        || ngx_handle_read_event(c->read, 0) != NGX_OK)
    {
        return;
    }

    if (ngx_queue_empty(&a->free)) {
        q = ngx_queue_last(&a->cache);
        ngx_queue_remove(q);

        item = ngx_queue_data(q, ngx_http_tokenbiryani_keepalive_t, queue);
        ngx_http_tokenbiryani_close_idle(item->connection);

    } else {
        q = ngx_queue_head(&a->free);
        ngx_queue_remove(q);

        item = ngx_queue_data(q, ngx_http_tokenbiryani_keepalive_t, queue);
    }

    ngx_queue_insert_head(&a->cache, q);

    item->connection = c;
    item->socklen = pc->socklen;
    ngx_memcpy(&item->sockaddr, pc->sockaddr, pc->socklen);

    pc->connection = NULL;

    c->read->delayed = 0;
    ngx_add_timer(c->read, tmcf->keepalive_timeout);

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    c->write->handler = ngx_http_tokenbiryani_idle_dummy_handler;
    c->read->handler = ngx_http_tokenbiryani_idle_close_handler;

    ngx_http_tokenbiryani_hand_over(c, item, ngx_cycle->log);

    if (c->read->ready) {
        ngx_http_tokenbiryani_idle_close_handler(c->read);
    }
}


void
ngx_http_tokenbiryani_keepalive_drop(ngx_http_tokenbiryani_account_t *a)
{
    ngx_queue_t                        *q;
    ngx_http_tokenbiryani_keepalive_t  *item;

    while (!ngx_queue_empty(&a->cache)) {
        q = ngx_queue_head(&a->cache);
        ngx_queue_remove(q);

        item = ngx_queue_data(q, ngx_http_tokenbiryani_keepalive_t, queue);
        ngx_http_tokenbiryani_close_idle(item->connection);

        ngx_queue_insert_head(&a->free, q);
    }
}


/*
 * A connection changes hands: to the cache (data is its item, it is idle,
 * it logs to the cycle) or back to a request (no data, the peer's log).
 */

static void
ngx_http_tokenbiryani_hand_over(ngx_connection_t *c, void *data,
    ngx_log_t *log)
{
    c->data = data;
    c->idle = (data != NULL);
    c->log = log;
    c->read->log = log;
    c->write->log = log;
    c->pool->log = log;
}


static void
ngx_http_tokenbiryani_idle_close_handler(ngx_event_t *ev)
{
    int                                 n;
    char                                buf[1];
    ngx_connection_t                   *c;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_keepalive_t  *item;

    c = ev->data;

    if (c->close || c->read->timedout) {
        goto close;
    }

    /* an idle connection that becomes readable was closed or misbehaves */

    n = recv(c->fd, buf, 1, MSG_PEEK);

    if (n == -1 && ngx_socket_errno == NGX_EAGAIN) {
        ev->ready = 0;

        if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
            goto close;
        }

        return;
    }

close:

    item = c->data;
    a = item->account;

    ngx_http_tokenbiryani_close_idle(c);

    ngx_queue_remove(&item->queue);
    ngx_queue_insert_head(&a->free, &item->queue);
}


static void
ngx_http_tokenbiryani_idle_dummy_handler(ngx_event_t *ev)
{
    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "tokenbiryani: idle connection write event");
}


static void
ngx_http_tokenbiryani_close_idle(ngx_connection_t *c)
{
#if (NGX_HTTP_SSL)

    if (c->ssl) {
        c->ssl->no_wait_shutdown = 1;
        c->ssl->no_send_shutdown = 1;

        if (ngx_ssl_shutdown(c) == NGX_AGAIN) {
            c->ssl->handler = ngx_http_tokenbiryani_close_idle;
            return;
        }
    }

#endif

    ngx_destroy_pool(c->pool);
    ngx_close_connection(c);
}
