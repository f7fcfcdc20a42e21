/*
 * tokenbiryani: a worker's own call to an upstream account, off any
 * client's request (see ngx_http_tokenbiryani_call.h).
 *
 * One request sent on a connection of its own with the worker's event
 * loop: connect (the next address when one refuses), TLS with SNI and the
 * certificate verified by name, the request, then the response read until
 * the upstream closes (the request says Connection: close), its framing
 * says it is complete, or 64 KB - or, to a sink, a body of any size as it
 * comes.  One timer bounds it all.
 *
 * The request is the only place the credential is: it is never logged,
 * and wiped once sent.  Nothing of it reaches the result.
 */


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "tb_oauth.h"
#include "ngx_http_tokenbiryani_call.h"


#define NGX_HTTP_TB_CALL_ERRLEN       256


struct ngx_http_tokenbiryani_call_s {
    ngx_pool_t                            *pool;
    ngx_log_t                             *log;
    char                                  *action;    /* the log's, before */

    ngx_peer_connection_t                  peer;
    ngx_addr_t                            *addrs;
    ngx_uint_t                             naddrs;
    ngx_uint_t                             next;      /* address to try */
    ngx_str_t                              host;      /* for messages */
    ngx_str_t                              ssl_name;  /* NUL-terminated */
#if (NGX_HTTP_SSL)
    ngx_ssl_t                             *ssl;
#endif

    ngx_buf_t                             *out;       /* the request */
    ngx_buf_t                             *in;        /* the response */

    ngx_event_t                            timer;
    ngx_event_t                            post;      /* done, when known
                                                         at the start */
    ngx_msec_t                             start;
    ngx_msec_t                             timeout;
    const char                            *doing;     /* for a timeout */

    const char                            *what;      /* for the log */
    ngx_http_tokenbiryani_call_sink_pt     sink;
    void                                  *sink_data;
    off_t                                  rest;      /* of the body the
                                                         sink is owed; -1:
                                                         to the close */

    ngx_http_tokenbiryani_call_done_pt     done;
    void                                  *data;
    ngx_http_tokenbiryani_call_result_t    res;

    unsigned                               tls:1;
    unsigned                               starting:1;
    unsigned                               broken:1;  /* a read failed */
    unsigned                               finished:1;
    unsigned                               streaming:1;  /* the head read:
                                                         the body to the
                                                         sink */
};


/* a response's head, as parsed */
typedef struct {
    ngx_int_t                              status;
    u_char                                *body;
    off_t                                  content_length;  /* -1: none */
    const char                            *error;
    unsigned                               chunked:1;
} ngx_http_tokenbiryani_call_head_t;


static ngx_int_t ngx_http_tokenbiryani_call_request(
    ngx_http_tokenbiryani_call_t *p,
    const ngx_http_tokenbiryani_call_target_t *t);
static void ngx_http_tokenbiryani_call_connect(
    ngx_http_tokenbiryani_call_t *p);
static void ngx_http_tokenbiryani_call_connected(ngx_event_t *ev);
static void ngx_http_tokenbiryani_call_connect_error(
    ngx_http_tokenbiryani_call_t *p, ngx_err_t err);
#if (NGX_HTTP_SSL)
static void ngx_http_tokenbiryani_call_tls(ngx_http_tokenbiryani_call_t *p,
    ngx_connection_t *c);
static void ngx_http_tokenbiryani_call_handshaked(ngx_connection_t *c);
#endif
static void ngx_http_tokenbiryani_call_write_handler(ngx_event_t *wev);
static void ngx_http_tokenbiryani_call_read_handler(ngx_event_t *rev);
static void ngx_http_tokenbiryani_call_dummy_handler(ngx_event_t *ev);
static void ngx_http_tokenbiryani_call_send(ngx_http_tokenbiryani_call_t *p);
static void ngx_http_tokenbiryani_call_recv(ngx_http_tokenbiryani_call_t *p);
static ngx_int_t ngx_http_tokenbiryani_call_process(
    ngx_http_tokenbiryani_call_t *p, ngx_uint_t final);
static ngx_int_t ngx_http_tokenbiryani_call_head(
    ngx_http_tokenbiryani_call_t *p, ngx_http_tokenbiryani_call_head_t *h,
    ngx_uint_t apply);
static void ngx_http_tokenbiryani_call_header(
    ngx_http_tokenbiryani_call_t *p, u_char *name, size_t name_len,
    u_char *value, size_t value_len);
static ngx_int_t ngx_http_tokenbiryani_call_dechunk(u_char *pos,
    u_char *last, u_char *dst, size_t *len);
static void ngx_http_tokenbiryani_call_detail(
    ngx_http_tokenbiryani_call_t *p, u_char *body, size_t len);
static void ngx_http_tokenbiryani_call_timeout(ngx_event_t *ev);
static void ngx_http_tokenbiryani_call_posted(ngx_event_t *ev);
static void ngx_http_tokenbiryani_call_fail(ngx_http_tokenbiryani_call_t *p,
    const char *fmt, ...);
static void ngx_http_tokenbiryani_call_finish(
    ngx_http_tokenbiryani_call_t *p, ngx_uint_t clean);
static void ngx_http_tokenbiryani_call_close(
    ngx_http_tokenbiryani_call_t *p, ngx_uint_t clean);
static ngx_int_t ngx_http_tokenbiryani_call_streamed(
    ngx_http_tokenbiryani_call_t *p, ngx_http_tokenbiryani_call_head_t *h,
    ngx_uint_t final);
static ngx_int_t ngx_http_tokenbiryani_call_stream(
    ngx_http_tokenbiryani_call_t *p, ngx_uint_t final);


/* the nine, in the mirror's order: window * TB_RL_NFIELDS + field */
ngx_str_t  ngx_http_tokenbiryani_unified_names[] = {
    ngx_string("anthropic-ratelimit-unified-5h-status"),
    ngx_string("anthropic-ratelimit-unified-5h-utilization"),
    ngx_string("anthropic-ratelimit-unified-5h-reset"),
    ngx_string("anthropic-ratelimit-unified-7d-status"),
    ngx_string("anthropic-ratelimit-unified-7d-utilization"),
    ngx_string("anthropic-ratelimit-unified-7d-reset")
};


ngx_str_t  ngx_http_tokenbiryani_ratelimit_names[] = {
    ngx_string("anthropic-ratelimit-requests-limit"),
    ngx_string("anthropic-ratelimit-requests-remaining"),
    ngx_string("anthropic-ratelimit-requests-reset"),
    ngx_string("anthropic-ratelimit-input-tokens-limit"),
    ngx_string("anthropic-ratelimit-input-tokens-remaining"),
    ngx_string("anthropic-ratelimit-input-tokens-reset"),
    ngx_string("anthropic-ratelimit-output-tokens-limit"),
    ngx_string("anthropic-ratelimit-output-tokens-remaining"),
    ngx_string("anthropic-ratelimit-output-tokens-reset")
};


void
ngx_http_tokenbiryani_call_target(ngx_http_tokenbiryani_call_target_t *t,
    const ngx_http_tokenbiryani_account_t *a)
{
    ngx_memzero(t, sizeof(ngx_http_tokenbiryani_call_target_t));

    t->addrs = a->addrs;
    t->naddrs = a->naddrs;
    t->host_header = a->host_header;
    t->ssl_name = a->ssl_name;
    t->path_prefix = a->path_prefix;
    t->auth_header = a->auth_header;
    t->tls = a->tls;

    ngx_http_tokenbiryani_call_oauth(t, a);
}


void
ngx_http_tokenbiryani_call_oauth(ngx_http_tokenbiryani_call_target_t *t,
    const ngx_http_tokenbiryani_account_t *a)
{
    if (a->conf == NULL || a->conf->type != TB_ACCOUNT_OAUTH) {
        return;
    }

    /* the operator's subscription: its token, the OAuth beta */
    t->bearer = a->bearer;
    t->beta.data = (u_char *) (a->conf->options.beta_header
                               ? a->conf->options.beta_header
                               : TB_OAUTH_BETA);
    t->beta.len = ngx_strlen(t->beta.data);
}


ngx_http_tokenbiryani_call_t *
ngx_http_tokenbiryani_call(ngx_pool_t *pool, ngx_log_t *log,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    const ngx_http_tokenbiryani_call_target_t *t, ngx_msec_t timeout,
    ngx_http_tokenbiryani_call_done_pt done, void *data)
{
    ngx_uint_t                     i;
    ngx_http_tokenbiryani_call_t  *p;

    p = ngx_pcalloc(pool, sizeof(ngx_http_tokenbiryani_call_t));
    if (p == NULL) {
        return NULL;
    }

    p->pool = pool;
    p->log = log;
    p->done = done;
    p->data = data;
    p->what = t->what ? t->what : "call";
    p->sink = t->sink;
    p->sink_data = t->sink_data;
    p->timeout = timeout ? timeout : NGX_HTTP_TB_CALL_TIMEOUT;
    p->start = ngx_current_msec;
    p->tls = t->tls;
    p->doing = "connecting to";

    tb_rl_obs_init(&p->res.obs);
    tb_unified_init(&p->res.uobs);

    /* what the target says, copied: the caller's may not outlive this */

    p->host.data = ngx_pstrdup(pool, (ngx_str_t *) &t->host_header);
    p->host.len = t->host_header.len;

    p->ssl_name.data = ngx_pnalloc(pool, t->ssl_name.len + 1);

    if (p->host.data == NULL || p->ssl_name.data == NULL) {
        return NULL;
    }

    ngx_cpystrn(p->ssl_name.data, t->ssl_name.data, t->ssl_name.len + 1);
    p->ssl_name.len = t->ssl_name.len;

    p->naddrs = t->naddrs;

    if (t->naddrs) {
        p->addrs = ngx_palloc(pool, t->naddrs * sizeof(ngx_addr_t));
        if (p->addrs == NULL) {
            return NULL;
        }

        for (i = 0; i < t->naddrs; i++) {
            p->addrs[i].socklen = t->addrs[i].socklen;
            p->addrs[i].sockaddr = ngx_palloc(pool, t->addrs[i].socklen);
            p->addrs[i].name.data = ngx_pstrdup(pool, &t->addrs[i].name);
            p->addrs[i].name.len = t->addrs[i].name.len;

            if (p->addrs[i].sockaddr == NULL || p->addrs[i].name.data == NULL)
            {
                return NULL;
            }

            ngx_memcpy(p->addrs[i].sockaddr, t->addrs[i].sockaddr,
                       t->addrs[i].socklen);
        }
    }

    if (ngx_http_tokenbiryani_call_request(p, t) != NGX_OK) {
        return NULL;
    }

    p->in = ngx_create_temp_buf(pool, NGX_HTTP_TB_CALL_MAX_RESPONSE);
    if (p->in == NULL) {
        return NULL;
    }

    ngx_http_tokenbiryani_timer_init(&p->timer,
                                     ngx_http_tokenbiryani_call_timeout, p,
                                     p->log);
    p->timer.cancelable = t->background;

    ngx_http_tokenbiryani_timer_init(&p->post,
                                     ngx_http_tokenbiryani_call_posted, p,
                                     p->log);

    p->action = p->log->action;
    p->log->action = "calling an upstream account";

    ngx_add_timer(&p->timer, p->timeout);

    /* what fails from here on is an answer: done is called, once, later */

    p->starting = 1;

#if (NGX_HTTP_SSL)
    p->ssl = tmcf->ssl;

    if (p->tls && p->ssl == NULL) {
        ngx_http_tokenbiryani_call_fail(p, "TLS is not set up in this "
                                        "gateway: no account of its "
                                        "configuration uses https");
        p->starting = 0;
        return p;
    }
#else
    if (p->tls) {
        ngx_http_tokenbiryani_call_fail(p, "this nginx was built without "
                                        "the SSL module");
        p->starting = 0;
        return p;
    }
#endif

    if (p->naddrs == 0) {
        ngx_http_tokenbiryani_call_fail(p, "%V has no address to connect to",
                                        &p->host);
        p->starting = 0;
        return p;
    }

    ngx_http_tokenbiryani_call_connect(p);

    p->starting = 0;

    return p;
}


ngx_http_tokenbiryani_call_t *
ngx_http_tokenbiryani_call_batch(ngx_pool_t *pool, ngx_log_t *log,
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_call_target_t *t, const char *method,
    const u_char *id, size_t len, const char *below, ngx_msec_t timeout,
    ngx_http_tokenbiryani_call_done_pt done, void *data)
{
    u_char  *path;

    path = ngx_pnalloc(pool, sizeof("/v1/messages/batches/") - 1 + len
                             + ngx_strlen(below));
    if (path == NULL) {
        return NULL;
    }

    t->path.data = path;
    t->path.len = ngx_sprintf(path, "/v1/messages/batches%s%*s%s",
                              len ? "/" : "", len, id, below)
                  - path;
    t->method.data = (u_char *) method;
    t->method.len = ngx_strlen(method);

    return ngx_http_tokenbiryani_call(pool, log, tmcf, t, timeout, done,
                                      data);
}


/*
 * The request, written once; the credential lines are its only secret.
 * A body that goes to a sink is asked for in HTTP/1.0, which no server
 * answers chunked: its end is its length or the close.
 */

static ngx_int_t
ngx_http_tokenbiryani_call_request(ngx_http_tokenbiryani_call_t *p,
    const ngx_http_tokenbiryani_call_target_t *t)
{
    size_t      len;
    ngx_buf_t  *b;

    len = t->method.len + 1 + t->path_prefix.len + t->path.len
          + sizeof(" HTTP/1.x" CRLF) - 1
          + sizeof("Host: " CRLF) - 1 + t->host_header.len
          + t->auth_header.len + t->bearer.len
          + sizeof("anthropic-version: 2023-06-01" CRLF) - 1
          + sizeof("anthropic-beta: " CRLF) - 1 + t->beta.len
          + sizeof("content-type: application/json" CRLF) - 1
          + sizeof("Content-Length: " CRLF) - 1 + NGX_SIZE_T_LEN
          + sizeof("Connection: close" CRLF) - 1
          + sizeof("User-Agent: tokenbiryani/" NGX_HTTP_TOKENBIRYANI_VERSION
                   " " CRLF) - 1 + ngx_strlen(p->what)
          + sizeof(CRLF) - 1 + t->body.len;

    b = ngx_create_temp_buf(p->pool, len);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last = ngx_sprintf(b->last, "%V %V%V HTTP/1.%c" CRLF "Host: %V" CRLF,
                          &t->method, &t->path_prefix, &t->path,
                          t->sink ? '0' : '1', &t->host_header);

    /* one of the two, the other empty (and maybe NULL: not for memcpy) */

    if (t->auth_header.len) {
        b->last = ngx_cpymem(b->last, t->auth_header.data,
                             t->auth_header.len);
    }

    if (t->bearer.len) {
        b->last = ngx_cpymem(b->last, t->bearer.data, t->bearer.len);
    }

    b->last = ngx_cpymem(b->last, "anthropic-version: 2023-06-01" CRLF,
                         sizeof("anthropic-version: 2023-06-01" CRLF) - 1);

    if (t->beta.len) {
        b->last = ngx_sprintf(b->last, "anthropic-beta: %V" CRLF, &t->beta);
    }

    if (t->body.len) {
        b->last = ngx_sprintf(b->last, "content-type: application/json" CRLF
                              "Content-Length: %uz" CRLF, t->body.len);
    }

    b->last = ngx_sprintf(b->last, "Connection: close" CRLF
                          "User-Agent: tokenbiryani/"
                          NGX_HTTP_TOKENBIRYANI_VERSION " %s" CRLF CRLF,
                          p->what);

    if (t->body.len) {
        b->last = ngx_cpymem(b->last, t->body.data, t->body.len);
    }

    p->out = b;

    return NGX_OK;
}


/* the next address, and the ones after it while they refuse at once */

static void
ngx_http_tokenbiryani_call_connect(ngx_http_tokenbiryani_call_t *p)
{
    ngx_int_t               rc;
    ngx_err_t               err;
    ngx_addr_t             *addr;
    ngx_connection_t       *c;
    ngx_peer_connection_t  *pc;

    pc = &p->peer;

    while (p->next < p->naddrs) {
        addr = &p->addrs[p->next++];

        ngx_memzero(pc, sizeof(ngx_peer_connection_t));

        pc->sockaddr = addr->sockaddr;
        pc->socklen = addr->socklen;
        pc->name = &addr->name;
        pc->get = ngx_event_get_peer;
        pc->log = p->log;
        pc->log_error = NGX_ERROR_ERR;

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, p->log, 0,
                       "tokenbiryani %s: connect to %V", p->what,
                       pc->name);

        p->doing = "connecting to";

        rc = ngx_event_connect_peer(pc);

        if (rc == NGX_DECLINED) {
            /* refused at once: ngx_event_connect_peer() closed it */
            err = ngx_socket_errno;
            ngx_http_tokenbiryani_call_connect_error(p, err);
            continue;
        }

        if (rc == NGX_ERROR || rc == NGX_BUSY || pc->connection == NULL) {
            ngx_http_tokenbiryani_call_fail(p, "cannot open a connection to "
                                             "%V", pc->name);
            return;
        }

        c = pc->connection;
        c->data = p;
        c->pool = p->pool;

        c->write->handler = ngx_http_tokenbiryani_call_connected;
        c->read->handler = ngx_http_tokenbiryani_call_connected;

        if (rc == NGX_AGAIN) {
            return;
        }

        /* NGX_OK: connected already */

        ngx_http_tokenbiryani_call_connected(c->write);
        return;
    }

    /* every address refused: the last one's error is the answer */

    ngx_http_tokenbiryani_call_finish(p, 0);
}


static void
ngx_http_tokenbiryani_call_connected(ngx_event_t *ev)
{
    int                             err;
    socklen_t                       len;
    ngx_connection_t               *c;
    ngx_http_tokenbiryani_call_t  *p;

    c = ev->data;
    p = c->data;

    err = 0;
    len = sizeof(int);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &err, &len) == -1) {
        err = ngx_socket_errno;
    }

    if (err) {
        ngx_http_tokenbiryani_call_connect_error(p, err);

        ngx_close_connection(c);
        p->peer.connection = NULL;

        ngx_http_tokenbiryani_call_connect(p);
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, p->log, 0,
                   "tokenbiryani %s: connected to %V", p->what,
                   p->peer.name);

#if (NGX_HTTP_SSL)

    if (p->tls) {
        ngx_http_tokenbiryani_call_tls(p, c);
        return;
    }

#endif

    c->write->handler = ngx_http_tokenbiryani_call_write_handler;
    c->read->handler = ngx_http_tokenbiryani_call_dummy_handler;

    ngx_http_tokenbiryani_call_send(p);
}


static void
ngx_http_tokenbiryani_call_connect_error(ngx_http_tokenbiryani_call_t *p,
    ngx_err_t err)
{
    u_char  *last, *msg;

    msg = ngx_pnalloc(p->pool, NGX_HTTP_TB_CALL_ERRLEN);
    if (msg == NULL) {
        return;
    }

    last = ngx_snprintf(msg, NGX_HTTP_TB_CALL_ERRLEN,
                        "connect() to %V failed", p->peer.name);

    if (err) {
        last = ngx_snprintf(last, msg + NGX_HTTP_TB_CALL_ERRLEN - last,
                            " (%d: ", err);
        last = ngx_strerror(err, last, msg + NGX_HTTP_TB_CALL_ERRLEN - last);
        last = ngx_snprintf(last, msg + NGX_HTTP_TB_CALL_ERRLEN - last, ")");
    }

    p->res.error.data = msg;
    p->res.error.len = last - msg;
}


#if (NGX_HTTP_SSL)

static void
ngx_http_tokenbiryani_call_tls(ngx_http_tokenbiryani_call_t *p,
    ngx_connection_t *c)
{
    ngx_int_t  rc;

    if (ngx_ssl_create_connection(p->ssl, c, NGX_SSL_BUFFER|NGX_SSL_CLIENT)
        != NGX_OK)
    {
        ngx_http_tokenbiryani_call_fail(p, "cannot start TLS with %V",
                                         &p->host);
        return;
    }

    c->sendfile = 0;

    /* as per RFC 6066, no SNI for a literal address */

    if (p->ssl_name.len
        && ngx_inet_addr(p->ssl_name.data, p->ssl_name.len) == INADDR_NONE
        && ngx_strlchr(p->ssl_name.data, p->ssl_name.data + p->ssl_name.len,
                       ':')
           == NULL
        && SSL_set_tlsext_host_name(c->ssl->connection,
                                    (char *) p->ssl_name.data)
           == 0)
    {
        ngx_ssl_error(NGX_LOG_ERR, p->log, 0,
                      "SSL_set_tlsext_host_name(\"%s\") failed",
                      p->ssl_name.data);
        ngx_http_tokenbiryani_call_fail(p, "cannot set the TLS server name "
                                         "\"%V\"", &p->ssl_name);
        return;
    }

    p->doing = "in the TLS handshake with";

    rc = ngx_ssl_handshake(c);

    if (rc == NGX_AGAIN) {
        c->ssl->handler = ngx_http_tokenbiryani_call_handshaked;
        return;
    }

    ngx_http_tokenbiryani_call_handshaked(c);
}


static void
ngx_http_tokenbiryani_call_handshaked(ngx_connection_t *c)
{
    long                            rc;
    ngx_http_tokenbiryani_call_t  *p;

    p = c->data;

    if (!c->ssl->handshaked) {
        ngx_http_tokenbiryani_call_fail(p, "the TLS handshake with %V "
                                         "failed", &p->host);
        return;
    }

    /* verified, never ignored: a call meets what a request would */

    rc = SSL_get_verify_result(c->ssl->connection);

    if (rc != X509_V_OK) {
        ngx_http_tokenbiryani_call_fail(p, "the certificate of %V does not "
                                         "verify: %s", &p->host,
                                         X509_verify_cert_error_string(rc));
        return;
    }

    if (ngx_ssl_check_host(c, &p->ssl_name) != NGX_OK) {
        ngx_http_tokenbiryani_call_fail(p, "the certificate of %V does not "
                                         "verify: it is not for \"%V\"",
                                         &p->host, &p->ssl_name);
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, p->log, 0,
                   "tokenbiryani %s: TLS with \"%V\" verified", p->what,
                   &p->ssl_name);

    c->write->handler = ngx_http_tokenbiryani_call_write_handler;
    c->read->handler = ngx_http_tokenbiryani_call_dummy_handler;

    ngx_http_tokenbiryani_call_send(p);
}

#endif


static void
ngx_http_tokenbiryani_call_write_handler(ngx_event_t *wev)
{
    ngx_connection_t  *c;

    c = wev->data;

    ngx_http_tokenbiryani_call_send(c->data);
}


static void
ngx_http_tokenbiryani_call_read_handler(ngx_event_t *rev)
{
    ngx_connection_t  *c;

    c = rev->data;

    ngx_http_tokenbiryani_call_recv(c->data);
}


static void
ngx_http_tokenbiryani_call_dummy_handler(ngx_event_t *ev)
{
    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "tokenbiryani call: dummy handler");
}


/* the socket would block: the call goes on at its next event */

static void
ngx_http_tokenbiryani_call_again(ngx_http_tokenbiryani_call_t *p,
    ngx_event_t *ev)
{
    ngx_int_t  rc;

    rc = ev->write ? ngx_handle_write_event(ev, 0)
                   : ngx_handle_read_event(ev, 0);

    if (rc != NGX_OK) {
        ngx_http_tokenbiryani_call_fail(p, "%s %V failed",
                                         ev->write ? "sending the request to"
                                                   : "reading the response of",
                                         &p->host);
    }
}


static void
ngx_http_tokenbiryani_call_send(ngx_http_tokenbiryani_call_t *p)
{
    ssize_t            n;
    ngx_buf_t         *b;
    ngx_connection_t  *c;

    c = p->peer.connection;
    b = p->out;

    p->doing = "sending the request to";

    while (b->pos < b->last) {
        n = c->send(c, b->pos, b->last - b->pos);

        if (n == NGX_AGAIN) {
            ngx_http_tokenbiryani_call_again(p, c->write);
            return;
        }

        if (n <= 0) {
            /* an error, or nothing written: nothing more will be */
            c->error = 1;
            ngx_http_tokenbiryani_call_fail(p, "sending the request to %V "
                                             "failed", &p->host);
            return;
        }

        b->pos += n;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, p->log, 0,
                   "tokenbiryani %s: request sent, %uz bytes", p->what,
                   (size_t) (b->last - b->start));

    /* the credential is in no memory longer than it must be */

    ngx_explicit_memzero(b->start, b->end - b->start);

    c->write->handler = ngx_http_tokenbiryani_call_dummy_handler;
    c->read->handler = ngx_http_tokenbiryani_call_read_handler;

    p->doing = "waiting for the response of";

    ngx_http_tokenbiryani_call_recv(p);
}


static void
ngx_http_tokenbiryani_call_recv(ngx_http_tokenbiryani_call_t *p)
{
    ssize_t            n;
    ngx_buf_t         *b;
    ngx_connection_t  *c;

    c = p->peer.connection;

    for ( ;; ) {
        /*
         * p->in asked afresh each time: once a body goes to a sink it is
         * read into a buffer of its own, and what is read into the head's
         * after that would never reach the sink.
         */
        b = p->in;

        if (b->last == b->end) {
            break;
        }

        n = c->recv(c, b->last, b->end - b->last);

        if (n == NGX_AGAIN) {
            ngx_http_tokenbiryani_call_again(p, c->read);
            return;
        }

        if (n == NGX_ERROR) {
            c->error = 1;
            p->broken = 1;
            break;
        }

        if (n == 0) {
            break;
        }

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, p->log, 0,
                       "tokenbiryani %s: read %z bytes", p->what, n);

        b->last += n;
        p->doing = "reading the response of";

        if (ngx_http_tokenbiryani_call_process(p, 0) == NGX_DONE) {
            return;
        }
    }

    /* the end of the connection, or 64 KB */

    (void) ngx_http_tokenbiryani_call_process(p, 1);
}


/*
 * What is in the buffer: NGX_AGAIN to read more (never when final), or
 * NGX_DONE with the call finished.
 */

static ngx_int_t
ngx_http_tokenbiryani_call_process(ngx_http_tokenbiryani_call_t *p,
    ngx_uint_t final)
{
    u_char                              *body;
    size_t                               len;
    ngx_int_t                            rc;
    ngx_uint_t                           complete;
    ngx_buf_t                           *b;
    ngx_http_tokenbiryani_call_head_t   h;

    if (p->streaming) {
        return ngx_http_tokenbiryani_call_stream(p, final);
    }

    b = p->in;

    rc = ngx_http_tokenbiryani_call_head(p, &h, 0);

    if (rc == NGX_ERROR) {
        ngx_http_tokenbiryani_call_fail(p, "a malformed response from %V: %s",
                                         &p->host, h.error);
        return NGX_DONE;
    }

    if (rc == NGX_AGAIN) {
        if (!final) {
            return NGX_AGAIN;
        }

        if (b->last == b->pos) {
            ngx_http_tokenbiryani_call_fail(p, p->broken
                                   ? "reading the response of %V failed: "
                                     "the connection broke before any byte"
                                   : "%V closed the connection without "
                                     "a response", &p->host);

        } else if (b->last == b->end) {
            ngx_http_tokenbiryani_call_fail(p, "a malformed response from "
                                             "%V: its headers are longer "
                                             "than %uz bytes", &p->host,
                                             (size_t)
                                             NGX_HTTP_TB_CALL_MAX_RESPONSE);

        } else {
            ngx_http_tokenbiryani_call_fail(p, "%V %s within the response's "
                                             "headers, after %uz bytes",
                                             &p->host,
                                             p->broken ? "broke the connection"
                                                       : "closed the "
                                                         "connection",
                                             (size_t) (b->last - b->pos));
        }

        return NGX_DONE;
    }

    if (p->sink && h.status >= 200 && h.status < 300) {
        return ngx_http_tokenbiryani_call_streamed(p, &h, final);
    }

    /* the body: whole by its framing, or by the end of the connection */

    body = h.body;
    len = b->last - h.body;
    complete = 0;

    if (h.status == NGX_HTTP_NO_CONTENT || h.status == NGX_HTTP_NOT_MODIFIED) {
        len = 0;
        complete = 1;

    } else if (h.chunked) {
        rc = ngx_http_tokenbiryani_call_dechunk(h.body, b->last, NULL, &len);

        if (rc == NGX_ERROR) {
            ngx_http_tokenbiryani_call_fail(p, "a malformed response from "
                                             "%V: a bad chunk in its body",
                                             &p->host);
            return NGX_DONE;
        }

        complete = (rc == NGX_OK);

    } else if (h.content_length >= 0) {
        if ((off_t) len >= h.content_length) {
            len = (size_t) h.content_length;
            complete = 1;
        }
    }

    if (!complete && !final) {
        return NGX_AGAIN;
    }

    /* now, once: the headers into the result */

    (void) ngx_http_tokenbiryani_call_head(p, &h, 1);

    p->res.status = h.status;
    p->res.observed_ms = ngx_http_tokenbiryani_now_ms();

    if (h.chunked && len) {
        body = ngx_pnalloc(p->pool, len);
        if (body == NULL) {
            len = 0;

        } else {
            (void) ngx_http_tokenbiryani_call_dechunk(h.body, b->last, body,
                                                       &len);
        }
    }

    if ((h.status < 200 || h.status >= 300) && len) {
        ngx_http_tokenbiryani_call_detail(p, body, len);
    }

    p->res.body.data = body;
    p->res.body.len = len;
    p->res.complete = complete;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, p->log, 0,
                   "tokenbiryani %s: status %i, body %uz bytes", p->what,
                   h.status, len);

    ngx_http_tokenbiryani_call_finish(p, 1);

    return NGX_DONE;
}


/*
 * A 2xx whose body goes to the sink: its headers into the result, the
 * body so far to the sink, from a buffer of its own (the result points
 * into the head's).
 */

static ngx_int_t
ngx_http_tokenbiryani_call_streamed(ngx_http_tokenbiryani_call_t *p,
    ngx_http_tokenbiryani_call_head_t *h, ngx_uint_t final)
{
    size_t      n;
    ngx_buf_t  *b;

    if (h->chunked) {
        ngx_http_tokenbiryani_call_fail(p, "a malformed response from %V: "
                                        "chunked, to a request in HTTP/1.0",
                                        &p->host);
        return NGX_DONE;
    }

    (void) ngx_http_tokenbiryani_call_head(p, h, 1);

    p->res.status = h->status;
    p->res.observed_ms = ngx_http_tokenbiryani_now_ms();

    b = ngx_create_temp_buf(p->pool, NGX_HTTP_TB_CALL_MAX_RESPONSE);
    if (b == NULL) {
        ngx_http_tokenbiryani_call_fail(p, "no memory for the body of %V",
                                        &p->host);
        return NGX_DONE;
    }

    n = p->in->last - h->body;
    b->last = ngx_cpymem(b->last, h->body, n);
    p->in->last = h->body;
    p->in = b;

    p->rest = (h->status == NGX_HTTP_NO_CONTENT) ? 0 : h->content_length;
    p->streaming = 1;

    return ngx_http_tokenbiryani_call_stream(p, final);
}


/* what came of the body since, to the sink: NGX_AGAIN or NGX_DONE */

static ngx_int_t
ngx_http_tokenbiryani_call_stream(ngx_http_tokenbiryani_call_t *p,
    ngx_uint_t final)
{
    size_t      n;
    ngx_buf_t  *b;

    b = p->in;
    n = b->last - b->pos;

    if (p->rest >= 0 && (off_t) n > p->rest) {
        n = (size_t) p->rest;
    }

    if (n && p->sink(p->sink_data, b->pos, n) != NGX_OK) {
        ngx_http_tokenbiryani_call_fail(p, "the body of %V could not be "
                                        "read", &p->host);
        return NGX_DONE;
    }

    p->res.length += n;

    if (p->rest >= 0) {
        p->rest -= n;
    }

    b->pos = b->start;
    b->last = b->start;

    if (p->rest == 0 || final) {
        /* whole by its length, or by a close that was not a failure */
        p->res.complete = (p->rest == 0 || (p->rest < 0 && !p->broken));
        ngx_http_tokenbiryani_call_finish(p, 1);
        return NGX_DONE;
    }

    return NGX_AGAIN;
}


/*
 * The status line and the header lines of the response in p->in:
 * NGX_OK with h filled, NGX_AGAIN when they are not all there yet, or
 * NGX_ERROR with h->error.  Interim 1xx responses are skipped.  With
 * apply, every header is also offered to the result.
 */

static ngx_int_t
ngx_http_tokenbiryani_call_head(ngx_http_tokenbiryani_call_t *p,
    ngx_http_tokenbiryani_call_head_t *h, ngx_uint_t apply)
{
    u_char     *pos, *last, *eol, *end, *colon, *v, *ve, c;
    size_t      i, n;
    off_t       cl;
    u_char      lc[64];

    pos = p->in->pos;
    last = p->in->last;

    ngx_memzero(h, sizeof(ngx_http_tokenbiryani_call_head_t));

next:

    h->content_length = -1;
    h->chunked = 0;

    /* "HTTP/1.x NNN reason" */

    eol = ngx_strlchr(pos, last, LF);
    if (eol == NULL) {
        return NGX_AGAIN;
    }

    end = (eol > pos && eol[-1] == CR) ? eol - 1 : eol;

    if (end - pos < 12
        || ngx_strncmp(pos, "HTTP/1.", 7) != 0
        || pos[7] < '0' || pos[7] > '9'
        || pos[8] != ' '
        || pos[9] < '1' || pos[9] > '5'
        || pos[10] < '0' || pos[10] > '9'
        || pos[11] < '0' || pos[11] > '9'
        || (end - pos > 12 && pos[12] != ' '))
    {
        h->error = "it does not begin with an HTTP/1.x status line";
        return NGX_ERROR;
    }

    h->status = (pos[9] - '0') * 100 + (pos[10] - '0') * 10 + (pos[11] - '0');

    pos = eol + 1;

    /* the header lines, up to an empty one */

    for ( ;; ) {
        eol = ngx_strlchr(pos, last, LF);
        if (eol == NULL) {
            return NGX_AGAIN;
        }

        end = (eol > pos && eol[-1] == CR) ? eol - 1 : eol;

        if (end == pos) {
            pos = eol + 1;
            break;
        }

        if (*pos == ' ' || *pos == '\t') {
            h->error = "a folded header line";
            return NGX_ERROR;
        }

        colon = ngx_strlchr(pos, end, ':');

        if (colon == NULL || colon == pos) {
            h->error = "a header line without a name and a colon";
            return NGX_ERROR;
        }

        n = colon - pos;

        for (i = 0; i < n; i++) {
            c = pos[i];

            if (c <= ' ' || c >= 0x7f || c == '(' || c == ')' || c == ','
                || c == '/' || c == ';' || c == '<' || c == '=' || c == '>'
                || c == '?' || c == '@' || c == '[' || c == '\\' || c == ']'
                || c == '{' || c == '}' || c == '"')
            {
                h->error = "a header name with a character no name has";
                return NGX_ERROR;
            }

            if (i < sizeof(lc)) {
                lc[i] = ngx_tolower(c);
            }
        }

        v = colon + 1;
        ve = end;

        while (v < ve && (*v == ' ' || *v == '\t')) {
            v++;
        }

        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) {
            ve--;
        }

        for (i = 0; i < (size_t) (ve - v); i++) {
            if (v[i] == '\0' || v[i] == CR) {
                h->error = "a header value with a NUL or a bare CR";
                return NGX_ERROR;
            }
        }

        pos = eol + 1;

        if (n > sizeof(lc)) {
            /* no header read here has a name that long */
            continue;
        }

        if (n == sizeof("content-length") - 1
            && ngx_strncmp(lc, "content-length", n) == 0)
        {
            cl = ngx_atoof(v, ve - v);

            if (cl == NGX_ERROR
                || (h->content_length != -1 && h->content_length != cl))
            {
                h->error = "a Content-Length that is not one number";
                return NGX_ERROR;
            }

            h->content_length = cl;

        } else if (n == sizeof("transfer-encoding") - 1
                   && ngx_strncmp(lc, "transfer-encoding", n) == 0)
        {
            /* chunked is the last coding, or the body is close-delimited */

            h->chunked = (ve - v >= 7
                          && ngx_strncasecmp(ve - 7, (u_char *) "chunked", 7)
                             == 0);
        }

        if (apply && h->status >= 200) {
            ngx_http_tokenbiryani_call_header(p, lc, n, v, ve - v);
        }
    }

    if (h->status < 200) {
        if (h->status == 101) {
            h->error = "it switches protocols (101)";
            return NGX_ERROR;
        }

        /* 100 Continue and the like: the response follows */
        goto next;
    }

    if (h->chunked) {
        /* Transfer-Encoding overrides Content-Length (RFC 9112, 6.3) */
        h->content_length = -1;
    }

    h->body = pos;

    return NGX_OK;
}


/* a header's value kept raw where its name stands among n names */

static void
ngx_http_tokenbiryani_call_keep(ngx_str_t *values, const ngx_str_t *names,
    ngx_uint_t n, u_char *name, size_t name_len, u_char *value,
    size_t value_len)
{
    ngx_uint_t  i;

    for (i = 0; i < n; i++) {
        if (name_len == names[i].len
            && ngx_strncmp(name, names[i].data, name_len) == 0)
        {
            values[i].data = value;
            values[i].len = value_len;
            return;
        }
    }
}


/* one response header, its name in lower case, into the result */

static void
ngx_http_tokenbiryani_call_header(ngx_http_tokenbiryani_call_t *p,
    u_char *name, size_t name_len, u_char *value, size_t value_len)
{
    ngx_str_t                             *raw;
    ngx_uint_t                             i;
    ngx_http_tokenbiryani_call_result_t  *res;

    static const struct {
        ngx_str_t                          name;
        size_t                             offset;
    }  kept[] = {
        { ngx_string("retry-after"),
          offsetof(ngx_http_tokenbiryani_call_result_t, retry_after) },
        { ngx_string("anthropic-organization-id"),
          offsetof(ngx_http_tokenbiryani_call_result_t, organization) }
    };

    res = &p->res;

    if (tb_rl_is_ratelimit_header(name, name_len)) {
        (void) tb_rl_obs_header(&res->obs, name, name_len, value, value_len,
                                ngx_http_tokenbiryani_now_ms());

        if (tb_unified_header(&res->uobs, name, name_len, value, value_len,
                              ngx_http_tokenbiryani_now_ms()))
        {
            res->unified = 1;

            ngx_http_tokenbiryani_call_keep(res->uvalues,
                                            ngx_http_tokenbiryani_unified_names,
                                            NGX_HTTP_TB_UNI_NHEADERS, name,
                                            name_len, value, value_len);

            return;
        }

        ngx_http_tokenbiryani_call_keep(res->values,
                                        ngx_http_tokenbiryani_ratelimit_names,
                                        NGX_HTTP_TB_RL_NHEADERS, name, name_len,
                                        value, value_len);

        return;
    }

    /* the two others the mirror reads, kept raw as well */

    for (i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
        if (name_len == kept[i].name.len
            && ngx_strncmp(name, kept[i].name.data, name_len) == 0)
        {
            (void) tb_rl_obs_header(&res->obs, name, name_len, value,
                                    value_len, ngx_http_tokenbiryani_now_ms());

            raw = (ngx_str_t *) ((u_char *) res + kept[i].offset);
            raw->data = value;
            raw->len = value_len;
            return;
        }
    }
}


/*
 * A chunked body from pos to last: NGX_OK when its last chunk is there,
 * NGX_AGAIN when it is cut short, NGX_ERROR when it is not chunked.  The
 * data, as far as it goes, is copied to dst (when not NULL); its length
 * is in *len either way.
 */

static ngx_int_t
ngx_http_tokenbiryani_call_dechunk(u_char *pos, u_char *last, u_char *dst,
    size_t *len)
{
    u_char      *eol;
    size_t       size, n;
    ngx_int_t    digits, d;

    *len = 0;

    for ( ;; ) {

        /* the size line: hex digits, then maybe extensions */

        size = 0;
        digits = 0;

        while (pos < last) {
            d = ngx_hextoi(pos, 1);

            if (d == NGX_ERROR) {
                break;
            }

            if (++digits > 8) {
                return NGX_ERROR;
            }

            size = size * 16 + d;
            pos++;
        }

        if (pos == last) {
            return NGX_AGAIN;
        }

        if (digits == 0) {
            return NGX_ERROR;
        }

        eol = ngx_strlchr(pos, last, LF);
        if (eol == NULL) {
            return NGX_AGAIN;
        }

        pos = eol + 1;

        if (size == 0) {
            break;
        }

        n = ngx_min(size, (size_t) (last - pos));

        if (dst) {
            ngx_memcpy(dst + *len, pos, n);
        }

        *len += n;
        pos += n;

        if (n < size) {
            return NGX_AGAIN;
        }

        /* the CRLF after the data */

        if (pos < last && *pos == CR) {
            pos++;
        }

        if (pos == last) {
            return NGX_AGAIN;
        }

        if (*pos != LF) {
            return NGX_ERROR;
        }

        pos++;
    }

    /* the trailer section, up to an empty line */

    for ( ;; ) {
        eol = ngx_strlchr(pos, last, LF);
        if (eol == NULL) {
            return NGX_AGAIN;
        }

        if (eol == pos || (eol == pos + 1 && *pos == CR)) {
            return NGX_OK;
        }

        pos = eol + 1;
    }
}


/* error.message of an error's JSON body, at most 200 bytes of it */

static void
ngx_http_tokenbiryani_call_detail(ngx_http_tokenbiryani_call_t *p,
    u_char *body, size_t len)
{
    size_t   n;
    cJSON   *root, *err, *msg;

    root = cJSON_ParseWithLength((char *) body, len);
    if (root == NULL) {
        return;
    }

    err = cJSON_GetObjectItemCaseSensitive(root, "error");
    msg = cJSON_IsObject(err)
          ? cJSON_GetObjectItemCaseSensitive(err, "message") : NULL;

    if (msg != NULL && cJSON_IsString(msg) && msg->valuestring != NULL) {
        n = ngx_strlen(msg->valuestring);

        if (n > NGX_HTTP_TB_CALL_DETAIL_MAX) {
            n = NGX_HTTP_TB_CALL_DETAIL_MAX;

            /* not within a UTF-8 sequence */
            while (n && ((u_char) msg->valuestring[n] & 0xc0) == 0x80) {
                n--;
            }
        }

        p->res.detail.data = ngx_pnalloc(p->pool, n);

        if (p->res.detail.data) {
            ngx_memcpy(p->res.detail.data, msg->valuestring, n);
            p->res.detail.len = n;
        }
    }

    cJSON_Delete(root);
}


static void
ngx_http_tokenbiryani_call_timeout(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_call_t  *p;

    p = ev->data;

    if (p->peer.connection) {
        p->peer.connection->timedout = 1;
    }

    ngx_http_tokenbiryani_call_fail(p, "timed out after %M ms %s %V",
                                     p->timeout, p->doing, &p->host);
}


static void
ngx_http_tokenbiryani_call_posted(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_call_t  *p;

    p = ev->data;

    p->done(&p->res, p->data);
}


static void
ngx_http_tokenbiryani_call_fail(ngx_http_tokenbiryani_call_t *p,
    const char *fmt, ...)
{
    u_char   *msg, *last;
    va_list   args;

    msg = ngx_pnalloc(p->pool, NGX_HTTP_TB_CALL_ERRLEN);

    if (msg) {
        va_start(args, fmt);
        last = ngx_vslprintf(msg, msg + NGX_HTTP_TB_CALL_ERRLEN, fmt, args);
        va_end(args);

        p->res.error.data = msg;
        p->res.error.len = last - msg;

    } else {
        ngx_str_set(&p->res.error, "the call failed (no memory)");
    }

    ngx_http_tokenbiryani_call_finish(p, 0);
}


/* the connection closed, the timer gone; then done, now or posted */

static void
ngx_http_tokenbiryani_call_finish(ngx_http_tokenbiryani_call_t *p,
    ngx_uint_t clean)
{
    if (p->finished) {
        return;
    }

    p->finished = 1;

    ngx_http_tokenbiryani_call_close(p, clean);

    if (p->timer.timer_set) {
        ngx_del_timer(&p->timer);
    }

    p->res.latency_ms = ngx_current_msec - p->start;
    p->log->action = p->action;

    if (p->res.status == 0 && p->res.error.len == 0) {
        ngx_str_set(&p->res.error, "no response");
    }

    if (p->res.error.len) {
        ngx_log_error(NGX_LOG_INFO, p->log, 0,
                      "tokenbiryani: %s of %V: %V",
                      p->what, &p->host, &p->res.error);

    } else {
        ngx_log_error(NGX_LOG_INFO, p->log, 0,
                      "tokenbiryani: %s of %V: status %i in %M ms",
                      p->what, &p->host, p->res.status,
                      p->res.latency_ms);
    }

    if (p->starting) {
        /* the caller has not finished its setup yet */
        ngx_post_event(&p->post, &ngx_posted_events);
        return;
    }

    p->done(&p->res, p->data);
}


static void
ngx_http_tokenbiryani_call_close(ngx_http_tokenbiryani_call_t *p,
    ngx_uint_t clean)
{
    ngx_connection_t  *c;

    if (p->out) {
        ngx_explicit_memzero(p->out->start, p->out->end - p->out->start);
    }

    c = p->peer.connection;

    if (c == NULL) {
        return;
    }

    p->peer.connection = NULL;

#if (NGX_HTTP_SSL)

    if (c->ssl) {
        /*
         * The close_notify is sent, the peer's is not waited for (as the
         * TLS standard allows); after a failure, nothing is sent.
         */

        c->ssl->no_wait_shutdown = 1;

        if (!clean) {
            c->ssl->no_send_shutdown = 1;
        }

        (void) ngx_ssl_shutdown(c);
    }

#endif

    ngx_close_connection(c);
}


void
ngx_http_tokenbiryani_call_cancel(ngx_http_tokenbiryani_call_t *p)
{
    if (p->post.posted) {
        ngx_delete_posted_event(&p->post);
    }

    if (p->timer.timer_set) {
        ngx_del_timer(&p->timer);
    }

    if (!p->finished) {
        p->finished = 1;
        p->log->action = p->action;
        ngx_http_tokenbiryani_call_close(p, 0);
    }
}
