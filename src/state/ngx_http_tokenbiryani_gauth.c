/*
 * tokenbiryani: Vertex accounts' access tokens (see
 * ngx_http_tokenbiryani_gauth.h).
 *
 * The exchange runs in a thread of nginx's pool with plain sockets and
 * OpenSSL, blocking there and only there: connect, TLS (verified, the
 * host as SNI), one POST, the answer read to its end, each step bounded.
 * Nothing in the thread touches nginx's memory or logs: it reads its
 * job's copies and writes its job's answer.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_gauth.h"
#include "ngx_http_tokenbiryani_attempt.h"
#include "tb_gauth.h"

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif

#include <netdb.h>
#include <poll.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>


#define NGX_HTTP_TB_GAUTH_TIMEOUT   10      /* seconds, every step */
#define NGX_HTTP_TB_GAUTH_ANSWER    (64 * 1024)
#define NGX_HTTP_TB_GAUTH_RETRY     1000    /* ms, doubling */
#define NGX_HTTP_TB_GAUTH_RETRY_MAX 60000


typedef struct {
    ngx_http_tokenbiryani_account_t  *account;
    ngx_event_t                       timer;
#if (NGX_THREADS)
    ngx_thread_task_t                *task;
#endif
    ngx_uint_t                        failures;
    ngx_uint_t                        busy;
    ngx_uint_t                        said;     /* a failure was logged */
    ngx_uint_t                        said_hash;  /* ... and which */

    /* the job: what the thread reads, and what it answers */
    char                             *url;      /* the token_uri */
    char                             *form;
    char                             *cafile;   /* or NULL: the system's */
    int                               status;
    u_char                           *answer;
    size_t                            answer_len;
    char                              err[256];
} ngx_http_tokenbiryani_gauth_t;


#if (NGX_THREADS)

static void ngx_http_tokenbiryani_gauth_fetch(ngx_event_t *ev);
static void ngx_http_tokenbiryani_gauth_thread(void *data, ngx_log_t *log);
static void ngx_http_tokenbiryani_gauth_done(ngx_event_t *ev);
static int ngx_http_tokenbiryani_gauth_exchange(
    ngx_http_tokenbiryani_gauth_t *g);

static void              *ngx_http_tokenbiryani_gauth_pool;

#endif


ngx_int_t
ngx_http_tokenbiryani_gauth_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
#if (NGX_THREADS)
    ngx_uint_t                        i;
    tb_gsa_t                         *sa;
    ngx_http_tokenbiryani_gauth_t    *g;
    ngx_http_tokenbiryani_account_t  *a;

    a = tmcf->accounts.elts;
    ngx_http_tokenbiryani_gauth_pool = tmcf->thread_pool;

    /* the file's accounts only: one added at runtime is never Vertex */

    for (i = 0; i < tmcf->nyaml; i++) {
        sa = a[i].conf->gsa;

        if (sa == NULL || !a[i].supported) {
            continue;
        }

        g = ngx_pcalloc(cycle->pool, sizeof(ngx_http_tokenbiryani_gauth_t));
        if (g == NULL) {
            return NGX_ERROR;
        }

        g->account = &a[i];
        g->url = sa->token_uri;
        g->cafile = tmcf->trusted_certificate.len
                    ? (char *) tmcf->trusted_certificate.data : NULL;

        g->task = ngx_http_tokenbiryani_timed_task(cycle->pool,
                      ngx_http_tokenbiryani_gauth_thread,
                      ngx_http_tokenbiryani_gauth_done, &g->timer,
                      ngx_http_tokenbiryani_gauth_fetch, g, cycle->log);
        if (g->task == NULL) {
            return NGX_ERROR;
        }

        a[i].gauth = g;
        a[i].token_next = ngx_http_tokenbiryani_now_ms();

        /* the first token at once, from the event loop */
        ngx_add_timer(&g->timer, 1);
    }

#endif

    return NGX_OK;
}


#if (NGX_THREADS)

static void
ngx_http_tokenbiryani_gauth_fetch(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_gauth_t *g = ev->data;

    char                             *assertion, err[256];
    size_t                            n;
    ngx_http_tokenbiryani_account_t  *a;

    a = g->account;

    if (g->busy || ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    /* signed here: the key is the worker's, the thread gets the form */

    assertion = ngx_alloc(8192, ev->log);
    if (assertion == NULL) {
        ngx_add_timer(&g->timer, NGX_HTTP_TB_GAUTH_RETRY);
        return;
    }

    n = tb_gsa_assertion(a->conf->gsa, ngx_time(), assertion, 8192, err,
                         sizeof(err));

    if (n == 0) {
        ngx_log_error(NGX_LOG_ERR, ev->log, 0,
                      "tokenbiryani: account \"%V\": no Vertex token: %s",
                      &a->id, err);
        ngx_free(assertion);
        ngx_add_timer(&g->timer, NGX_HTTP_TB_GAUTH_RETRY_MAX);
        return;
    }

    g->form = tb_gsa_form(assertion);

    ngx_explicit_memzero(assertion, n);
    ngx_free(assertion);

    if (g->form == NULL) {
        ngx_add_timer(&g->timer, NGX_HTTP_TB_GAUTH_RETRY);
        return;
    }

    g->status = 0;
    g->answer = NULL;
    g->answer_len = 0;
    g->err[0] = '\0';
    g->busy = 1;

    if (ngx_thread_task_post(ngx_http_tokenbiryani_gauth_pool, g->task)
        != NGX_OK)
    {
        g->busy = 0;
        free(g->form);
        g->form = NULL;
        ngx_add_timer(&g->timer, NGX_HTTP_TB_GAUTH_RETRY);
    }
}


static void
ngx_http_tokenbiryani_gauth_thread(void *data, ngx_log_t *log)
{
    ngx_http_tokenbiryani_gauth_t *g = data;

    if (ngx_http_tokenbiryani_gauth_exchange(g) != 0 && g->err[0] == '\0') {
        (void) snprintf(g->err, sizeof(g->err), "the exchange failed");
    }
}


static void
ngx_http_tokenbiryani_gauth_done(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_gauth_t *g = ev->data;

    u_char                           *p;
    char                             *token, err[320];
    size_t                            len;
    int64_t                           ttl, now, life;
    ngx_uint_t                        hash;
    ngx_msec_t                        delay;
    ngx_http_tokenbiryani_account_t  *a;

    a = g->account;
    g->busy = 0;

    explicit_bzero(g->form, strlen(g->form));
    free(g->form);
    g->form = NULL;

    now = ngx_http_tokenbiryani_now_ms();
    token = NULL;

    if (g->err[0]) {
        (void) snprintf(err, sizeof(err), "%s", g->err);

    } else if (tb_gsa_token(g->status, g->answer, g->answer_len, &token,
                            &ttl, err, sizeof(err))
               == 0)
    {
        err[0] = '\0';
    }

    if (g->answer) {
        explicit_bzero(g->answer, g->answer_len);
        free(g->answer);
        g->answer = NULL;
    }

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        if (token) {
            explicit_bzero(token, strlen(token));
            free(token);
        }

        return;
    }

    if (token == NULL) {
        g->failures++;
        delay = (ngx_msec_t) ngx_min(NGX_HTTP_TB_GAUTH_RETRY_MAX,
                                     NGX_HTTP_TB_GAUTH_RETRY
                                     << ngx_min(g->failures - 1, 6));

        hash = ngx_hash_key((u_char *) err, ngx_strlen(err));

        if (!g->said || hash != g->said_hash) {
            /* once per failing spell and reason, not once per try */
            g->said_hash = hash;
            ngx_log_error(NGX_LOG_ERR, ev->log, 0,
                          "tokenbiryani: account \"%V\": no Vertex access "
                          "token from %s: %s; trying again, the account "
                          "waits", &a->id, g->url, err);
            g->said = 1;
        }

        a->token_next = now + delay;
        ngx_add_timer(&g->timer, delay);
        return;
    }

    /* "Authorization: Bearer <token>": malloc()ed, the old one wiped */

    len = sizeof("Authorization: Bearer " CRLF) - 1 + ngx_strlen(token);

    p = ngx_alloc(len, ev->log);

    if (p == NULL) {
        explicit_bzero(token, strlen(token));
        free(token);
        ngx_add_timer(&g->timer, NGX_HTTP_TB_GAUTH_RETRY);
        return;
    }

    (void) ngx_sprintf(p, "Authorization: Bearer %s" CRLF, token);

    explicit_bzero(token, strlen(token));
    free(token);

    if (a->bearer.data) {
        ngx_explicit_memzero(a->bearer.data, a->bearer.len);
        ngx_free(a->bearer.data);
    }

    a->bearer.data = p;
    a->bearer.len = len;

    life = ttl * 1000;
    a->token_until = now + life;

    if (g->said || g->failures) {
        ngx_log_error(NGX_LOG_NOTICE, ev->log, 0,
                      "tokenbiryani: account \"%V\" has a Vertex access "
                      "token again", &a->id);
    }

    g->failures = 0;
    g->said = 0;

    /* again when four fifths of its life have passed */
    delay = (ngx_msec_t) ngx_max(1000, life * 4 / 5);
    a->token_next = now + delay;
    ngx_add_timer(&g->timer, delay);

    /* requests this worker holds for it go now */
    ngx_http_tokenbiryani_attempt_wake();
}


/* ------------------------------------------------------------------ */
/* in the thread: no nginx memory, logs or events from here on          */

typedef struct {
    int       tls;
    char      host[256];
    char      port[8];
    char      path[1024];
} ngx_http_tokenbiryani_gurl_t;


static int
ngx_http_tokenbiryani_gurl(const char *url, ngx_http_tokenbiryani_gurl_t *u)
{
    size_t       n;
    const char  *p, *h, *slash, *colon;

    if (strncmp(url, "https://", 8) == 0) {
        u->tls = 1;
        p = url + 8;

    } else if (strncmp(url, "http://", 7) == 0) {
        u->tls = 0;
        p = url + 7;

    } else {
        return -1;
    }

    slash = strchr(p, '/');
    h = slash ? slash : p + strlen(p);

    colon = memchr(p, ':', (size_t) (h - p));
    n = (size_t) ((colon ? colon : h) - p);

    if (n == 0 || n >= sizeof(u->host)) {
        return -1;
    }

    memcpy(u->host, p, n);
    u->host[n] = '\0';

    if (colon) {
        n = (size_t) (h - colon - 1);
        if (n == 0 || n >= sizeof(u->port)) {
            return -1;
        }

        memcpy(u->port, colon + 1, n);
        u->port[n] = '\0';

    } else {
        (void) snprintf(u->port, sizeof(u->port), "%s", u->tls ? "443" : "80");
    }

    (void) snprintf(u->path, sizeof(u->path), "%s", slash ? slash : "/");

    return 0;
}


/* a TCP connection, its connect bounded; -1 with err */
static int
ngx_http_tokenbiryani_gauth_connect(ngx_http_tokenbiryani_gauth_t *g,
    ngx_http_tokenbiryani_gurl_t *u)
{
    int               fd, rc, e;
    socklen_t         elen;
    struct pollfd     pfd;
    struct timeval    tv;
    struct addrinfo   hints, *res, *ai;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;

    rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc != 0) {
        (void) snprintf(g->err, sizeof(g->err), "%s does not resolve: %s",
                        u->host, gai_strerror(rc));
        return -1;
    }

    fd = -1;

    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK,
                    ai->ai_protocol);
        if (fd == -1) {
            continue;
        }

        rc = connect(fd, ai->ai_addr, ai->ai_addrlen);

        if (rc != 0 && errno == EINPROGRESS) {
            pfd.fd = fd;
            pfd.events = POLLOUT;

            rc = poll(&pfd, 1, NGX_HTTP_TB_GAUTH_TIMEOUT * 1000);

            e = 0;
            elen = sizeof(e);

            if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) == 0
                && e == 0)
            {
                rc = 0;

            } else {
                errno = (rc == 0) ? ETIMEDOUT : e;
                rc = -1;
            }
        }

        if (rc == 0) {
            break;
        }

        close(fd);
        fd = -1;
    }

    freeaddrinfo(res);

    if (fd == -1) {
        (void) snprintf(g->err, sizeof(g->err), "cannot connect to %s:%s: %s",
                        u->host, u->port, strerror(errno));
        return -1;
    }

    /* blocking from here, each read and write bounded */

    (void) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);

    tv.tv_sec = NGX_HTTP_TB_GAUTH_TIMEOUT;
    tv.tv_usec = 0;
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    return fd;
}


/* "HTTP/1.x NNN ...\r\n headers \r\n\r\n body": status and body in g */
static int
ngx_http_tokenbiryani_gauth_parse(ngx_http_tokenbiryani_gauth_t *g,
    u_char *buf, size_t n)
{
    u_char   *p, *end, *body, *w, *line;
    size_t    len, clen;
    int       chunked, have_len;
    char     *e;

    end = buf + n;

    if (n < 12 || ngx_strncmp(buf, "HTTP/1.", 7) != 0) {
        (void) snprintf(g->err, sizeof(g->err), "the token endpoint did not "
                        "answer HTTP");
        return -1;
    }

    g->status = atoi((char *) buf + 9);

    body = ngx_strlcasestrn(buf, end, (u_char *) "\r\n\r\n", 4 - 1);
    if (body == NULL) {
        (void) snprintf(g->err, sizeof(g->err), "the token endpoint's answer "
                        "has no end of headers");
        return -1;
    }

    chunked = 0;
    have_len = 0;
    clen = 0;

    for (line = buf; line < body; line = p + 2) {
        p = ngx_strlcasestrn(line, body + 2, (u_char *) "\r\n", 2 - 1);
        if (p == NULL) {
            break;
        }

        if (p - line > 17
            && ngx_strncasecmp(line, (u_char *) "transfer-encoding:", 18)
               == 0
            && ngx_strlcasestrn(line, p, (u_char *) "chunked", 7 - 1))
        {
            chunked = 1;
        }

        if (p - line > 15
            && ngx_strncasecmp(line, (u_char *) "content-length:", 15) == 0)
        {
            clen = (size_t) strtoul((char *) line + 15, &e, 10);
            have_len = 1;
        }
    }

    body += 4;

    if (chunked) {

        /* the chunks' data, moved together in place */

        w = body;

        for (p = body; p < end; /* void */) {
            len = (size_t) strtoul((char *) p, &e, 16);
            line = ngx_strlcasestrn(p, end, (u_char *) "\r\n", 2 - 1);

            if (line == NULL || (u_char *) e > line) {
                break;
            }

            p = line + 2;

            if (len == 0 || len > (size_t) (end - p)) {
                break;
            }

            ngx_memmove(w, p, len);
            w += len;
            p += len + 2;
        }

        len = w - body;

    } else {
        len = end - body;

        if (have_len && clen < len) {
            len = clen;
        }
    }

    g->answer = malloc(len + 1);
    if (g->answer == NULL) {
        (void) snprintf(g->err, sizeof(g->err), "no memory");
        return -1;
    }

    memcpy(g->answer, body, len);
    g->answer_len = len;

    return 0;
}


static int
ngx_http_tokenbiryani_gauth_exchange(ngx_http_tokenbiryani_gauth_t *g)
{
    int                            fd, rc, dport;
    SSL                           *ssl;
    char                          *req;
    u_char                        *buf;
    size_t                         n, len, sent;
    ssize_t                        k;
    SSL_CTX                       *sctx;
    ngx_http_tokenbiryani_gurl_t   u;

    if (ngx_http_tokenbiryani_gurl(g->url, &u) != 0) {
        (void) snprintf(g->err, sizeof(g->err), "the token_uri cannot be "
                        "read");
        return -1;
    }

    len = strlen(g->form);
    n = len + strlen(u.path) + strlen(u.host) + strlen(u.port) + 256;

    req = malloc(n);
    buf = malloc(NGX_HTTP_TB_GAUTH_ANSWER + 1);

    if (req == NULL || buf == NULL) {
        free(req);
        free(buf);
        (void) snprintf(g->err, sizeof(g->err), "no memory");
        return -1;
    }

    /* the port is part of Host unless it is the scheme's (RFC 9110 7.2) */

    dport = (strcmp(u.port, u.tls ? "443" : "80") == 0);

    n = (size_t) snprintf(req, n, "POST %s HTTP/1.1\r\nHost: %s%s%s\r\n"
                          "Content-Type: application/x-www-form-urlencoded"
                          "\r\nContent-Length: %zu\r\nConnection: close\r\n"
                          "User-Agent: tokenbiryani/" NGX_HTTP_TOKENBIRYANI_VERSION
                          "\r\n\r\n%s", u.path, u.host, dport ? "" : ":",
                          dport ? "" : u.port, len, g->form);

    sctx = NULL;
    ssl = NULL;
    rc = -1;

    fd = ngx_http_tokenbiryani_gauth_connect(g, &u);
    if (fd == -1) {
        goto done;
    }

    if (u.tls) {
        sctx = SSL_CTX_new(TLS_client_method());

        if (sctx == NULL
            || (g->cafile ? SSL_CTX_load_verify_locations(sctx, g->cafile,
                                                          NULL)
                          : SSL_CTX_set_default_verify_paths(sctx)) != 1)
        {
            (void) snprintf(g->err, sizeof(g->err), "no certificates to "
                            "verify %s with", u.host);
            goto done;
        }

        SSL_CTX_set_verify(sctx, SSL_VERIFY_PEER, NULL);
        SSL_CTX_set_min_proto_version(sctx, TLS1_2_VERSION);

        ssl = SSL_new(sctx);

        if (ssl == NULL || SSL_set_fd(ssl, fd) != 1
            || SSL_set_tlsext_host_name(ssl, u.host) != 1
            || SSL_set1_host(ssl, u.host) != 1
            || SSL_connect(ssl) != 1)
        {
            (void) snprintf(g->err, sizeof(g->err), "TLS with %s failed: %s",
                            u.host,
                            ssl && SSL_get_verify_result(ssl) != X509_V_OK
                            ? X509_verify_cert_error_string(
                                  SSL_get_verify_result(ssl))
                            : "the handshake failed");
            goto done;
        }
    }

    for (sent = 0; sent < n; sent += (size_t) k) {
        k = u.tls ? SSL_write(ssl, req + sent, (int) (n - sent))
                  : write(fd, req + sent, n - sent);

        if (k <= 0) {
            (void) snprintf(g->err, sizeof(g->err), "the request to %s could "
                            "not be sent", u.host);
            goto done;
        }
    }

    for (len = 0; len < NGX_HTTP_TB_GAUTH_ANSWER; len += (size_t) k) {
        k = u.tls ? SSL_read(ssl, buf + len,
                             (int) (NGX_HTTP_TB_GAUTH_ANSWER - len))
                  : read(fd, buf + len, NGX_HTTP_TB_GAUTH_ANSWER - len);

        if (k <= 0) {
            break;
        }
    }

    if (k < 0 && len == 0) {
        (void) snprintf(g->err, sizeof(g->err), "no answer from %s", u.host);
        goto done;
    }

    rc = ngx_http_tokenbiryani_gauth_parse(g, buf, len);

done:

    if (ssl) {
        SSL_free(ssl);
    }

    if (sctx) {
        SSL_CTX_free(sctx);
    }

    if (fd != -1) {
        close(fd);
    }

    explicit_bzero(req, strlen(req));
    free(req);
    explicit_bzero(buf, NGX_HTTP_TB_GAUTH_ANSWER);
    free(buf);

    return rc;
}

#endif
