/*
 * What the redis store is told to reach (store.backend: redis): the URL
 * parsed, plain C, no nginx headers, no network.
 *
 *     redis://[[user]:password@]host[:port][/database]
 *     unix:/path/to/redis.sock
 *
 * rediss:// is refused by name: the hiredis this is built with (Debian
 * 12's 0.14) has no TLS, and a URL that asks for it must not quietly talk
 * in the clear.
 */

#ifndef TB_REDIS_H
#define TB_REDIS_H

#include <stddef.h>


#define TB_REDIS_HOST_MAX     255
#define TB_REDIS_PATH_MAX     107     /* sun_path less its NUL */
#define TB_REDIS_SECRET_MAX   255

typedef struct {
    char   host[TB_REDIS_HOST_MAX + 1];    /* empty with a unix socket */
    int    port;
    char   path[TB_REDIS_PATH_MAX + 1];    /* the unix socket, or empty */
    int    database;                       /* -1: none in the URL */
    char   user[TB_REDIS_SECRET_MAX + 1];
    char   password[TB_REDIS_SECRET_MAX + 1];
} tb_redis_url_t;


/*
 * 0, or -1 with err saying what is wrong with the URL (never its
 * password).  A host is a name, an IPv4 address or [an IPv6 one]; the
 * port defaults to 6379, the database to none (-1).  %xx in the user and
 * password is decoded.
 */
int tb_redis_url_parse(tb_redis_url_t *u, const char *url, char *err,
    size_t errsize);

/* the URL without its password, for logs and /admin/status */
void tb_redis_url_print(const tb_redis_url_t *u, char *buf, size_t size);


#endif /* TB_REDIS_H */
