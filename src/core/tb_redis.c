/*
 * The redis store's URL (see tb_redis.h).
 */

#include <stdio.h>
#include <string.h>
#include <ctype.h>

#include "tb_redis.h"
#include "tb_parse.h"


#define TB_REDIS_PORT         6379


static void
tb_redis_err(char *err, size_t errsize, const char *msg)
{
    if (errsize) {
        snprintf(err, errsize, "store.url: %s", msg);
    }
}


/* [p, last) percent-decoded into dst: 0, or -1 when malformed or long */
static int
tb_redis_decode(char *dst, size_t size, const char *p, const char *last)
{
    int     hi, lo;
    size_t  n;

    for (n = 0; p < last; n++) {
        if (n + 1 >= size) {
            return -1;
        }

        if (*p == '%') {
            if (last - p < 3) {
                return -1;
            }

            hi = tb_hex_digit((unsigned char) p[1]);
            lo = tb_hex_digit((unsigned char) p[2]);

            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                return -1;
            }

            dst[n] = (char) (hi * 16 + lo);
            p += 3;
            continue;
        }

        dst[n] = *p++;
    }

    dst[n] = '\0';

    return 0;
}


static int
tb_redis_number(const char *p, const char *last, long max, long *out)
{
    long  v;

    if (p == last || last - p > 10) {
        return -1;
    }

    for (v = 0; p < last; p++) {
        if (*p < '0' || *p > '9') {
            return -1;
        }

        v = v * 10 + (*p - '0');
    }

    if (v > max) {
        return -1;
    }

    *out = v;

    return 0;
}


int
tb_redis_url_parse(tb_redis_url_t *u, const char *url, char *err,
    size_t errsize)
{
    int          v6;
    long         v;
    size_t       n;
    const char  *p, *end, *at, *colon, *slash, *host, *hend, *port;

    memset(u, 0, sizeof(tb_redis_url_t));
    u->database = -1;
    u->port = TB_REDIS_PORT;

    n = strlen(url);

    for (p = url; *p; p++) {
        if ((unsigned char) *p <= ' ' || (unsigned char) *p >= 0x7f) {
            tb_redis_err(err, errsize, "has a space or a control or "
                         "non-ASCII character");
            return -1;
        }
    }

    if (strncmp(url, "rediss://", 9) == 0) {
        tb_redis_err(err, errsize, "rediss:// (Redis over TLS) is not "
                     "supported: this build's hiredis (Debian 12's 0.14) "
                     "has no TLS, and the gateway will not fall back to "
                     "plaintext; reach a remote Redis through a local TLS "
                     "tunnel such as stunnel, or a unix socket to a local "
                     "replica (docs/deployment.md)");
        return -1;
    }

    if (strncmp(url, "unix:", 5) == 0) {
        p = url + 5;

        if (strncmp(p, "//", 2) == 0) {
            p += 2;
        }

        if (*p != '/') {
            tb_redis_err(err, errsize, "a unix socket's path is absolute "
                         "(unix:/run/redis/redis.sock)");
            return -1;
        }

        if (strlen(p) > TB_REDIS_PATH_MAX) {
            tb_redis_err(err, errsize, "the unix socket's path is longer "
                         "than a socket address holds (107 bytes)");
            return -1;
        }

        strcpy(u->path, p);
        u->port = 0;

        return 0;
    }

    if (strncmp(url, "redis://", 8) != 0) {
        tb_redis_err(err, errsize, "is neither redis://host[:port][/db] "
                     "nor unix:/path (rediss:// is not supported)");
        return -1;
    }

    p = url + 8;
    end = url + n;

    slash = strchr(p, '/');
    if (slash == NULL) {
        slash = end;
    }

    /* the user and password: the last '@' before the path */

    at = NULL;

    for (host = p; host < slash; host++) {
        if (*host == '@') {
            at = host;
        }
    }

    host = p;

    if (at) {
        colon = memchr(p, ':', at - p);

        if (colon == NULL) {
            /* redis://secret@host: a password alone, as redis-cli reads it */
            colon = p - 1;

        } else if (tb_redis_decode(u->user, sizeof(u->user), p, colon) != 0) {
            tb_redis_err(err, errsize, "its user is malformed or too long");
            return -1;
        }

        if (tb_redis_decode(u->password, sizeof(u->password), colon + 1, at)
            != 0)
        {
            tb_redis_err(err, errsize, "its password is malformed (%xx) or "
                         "longer than 255 bytes");
            return -1;
        }

        host = at + 1;
    }

    /* host, [v6] or a name; then :port */

    v6 = (*host == '[');

    if (v6) {
        hend = memchr(host, ']', slash - host);
        if (hend == NULL || hend == host + 1) {
            tb_redis_err(err, errsize, "an IPv6 address in [] is not "
                         "closed");
            return -1;
        }

        port = hend + 1;
        host++;

    } else {
        hend = tb_find_end(host, slash, ':');

        port = hend;
    }

    if (hend == host) {
        tb_redis_err(err, errsize, "has no host");
        return -1;
    }

    if ((size_t) (hend - host) > TB_REDIS_HOST_MAX) {
        tb_redis_err(err, errsize, "its host is longer than 255 bytes");
        return -1;
    }

    for (p = host; p < hend; p++) {
        if (!(isalnum((unsigned char) *p) || *p == '.' || *p == '-'
              || *p == '_' || (*p == ':' && v6)))
        {
            tb_redis_err(err, errsize, "its host has a character a host "
                         "name cannot have");
            return -1;
        }
    }

    memcpy(u->host, host, hend - host);
    u->host[hend - host] = '\0';

    if (port < slash) {
        if (*port != ':'
            || tb_redis_number(port + 1, slash, 65535, &v) != 0 || v == 0)
        {
            tb_redis_err(err, errsize, "its port is not a number from 1 to "
                         "65535");
            return -1;
        }

        u->port = (int) v;
    }

    if (slash < end && slash + 1 < end) {
        if (tb_redis_number(slash + 1, end, 65535, &v) != 0) {
            tb_redis_err(err, errsize, "its path is a database number "
                         "(redis://host:6379/0), and nothing else");
            return -1;
        }

        u->database = (int) v;
    }

    return 0;
}


void
tb_redis_url_print(const tb_redis_url_t *u, char *buf, size_t size)
{
    int  v6;

    if (size == 0) {
        return;
    }

    if (u->path[0]) {
        snprintf(buf, size, "unix:%s", u->path);
        return;
    }

    v6 = (strchr(u->host, ':') != NULL);

    snprintf(buf, size, "redis://%s%s%s%s%s%s:%d", u->user,
             u->password[0] ? ":***" : "",
             (u->user[0] || u->password[0]) ? "@" : "",
             v6 ? "[" : "", u->host, v6 ? "]" : "", u->port);
}
