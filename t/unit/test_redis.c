/*
 * The redis store's URL: what is reached, what is refused and why.
 */

#include "tb_test.h"
#include "tb_redis.h"


static int
parse(tb_redis_url_t *u, const char *url, char *err)
{
    err[0] = '\0';
    return tb_redis_url_parse(u, url, err, 512);
}


TB_TEST(url_host_port_db)
{
    tb_redis_url_t  u;
    char            err[512];

    TB_CHECK_INT(parse(&u, "redis://127.0.0.1:6390/3", err), 0);
    TB_CHECK_STR(u.host, "127.0.0.1");
    TB_CHECK_INT(u.port, 6390);
    TB_CHECK_INT(u.database, 3);
    TB_CHECK_STR(u.path, "");
    TB_CHECK_STR(u.password, "");

    TB_CHECK_INT(parse(&u, "redis://cache.internal", err), 0);
    TB_CHECK_STR(u.host, "cache.internal");
    TB_CHECK_INT(u.port, 6379);
    TB_CHECK_INT(u.database, -1);

    TB_CHECK_INT(parse(&u, "redis://[::1]:7000/", err), 0);
    TB_CHECK_STR(u.host, "::1");
    TB_CHECK_INT(u.port, 7000);
    TB_CHECK_INT(u.database, -1);
}


TB_TEST(url_password)
{
    tb_redis_url_t  u;
    char            err[512], buf[512];

    TB_CHECK_INT(parse(&u, "redis://:s%40cret@10.0.0.2/1", err), 0);
    TB_CHECK_STR(u.user, "");
    TB_CHECK_STR(u.password, "s@cret");
    TB_CHECK_STR(u.host, "10.0.0.2");
    TB_CHECK_INT(u.database, 1);

    tb_redis_url_print(&u, buf, sizeof(buf));
    TB_CHECK_STR(buf, "redis://:***@10.0.0.2:6379");

    TB_CHECK_INT(parse(&u, "redis://gw:pw:with:colons@h:1", err), 0);
    TB_CHECK_STR(u.user, "gw");
    TB_CHECK_STR(u.password, "pw:with:colons");

    /* a password alone before '@', as redis-cli -u reads it */
    TB_CHECK_INT(parse(&u, "redis://onlypw@h", err), 0);
    TB_CHECK_STR(u.user, "");
    TB_CHECK_STR(u.password, "onlypw");

    /* a malformed escape is refused, and the message does not echo it */
    TB_CHECK_INT(parse(&u, "redis://:bad%zzsecret@h", err), -1);
    TB_CHECK_CONTAINS(err, "password is malformed");
    TB_CHECK(strstr(err, "secret") == NULL);

    TB_CHECK_INT(parse(&u, "redis://:nul%00@h", err), -1);
}


TB_TEST(url_unix)
{
    tb_redis_url_t  u;
    char            err[512], buf[512];

    TB_CHECK_INT(parse(&u, "unix:/run/redis/redis.sock", err), 0);
    TB_CHECK_STR(u.path, "/run/redis/redis.sock");
    TB_CHECK_STR(u.host, "");

    tb_redis_url_print(&u, buf, sizeof(buf));
    TB_CHECK_STR(buf, "unix:/run/redis/redis.sock");

    TB_CHECK_INT(parse(&u, "unix:///tmp/r.sock", err), 0);
    TB_CHECK_STR(u.path, "/tmp/r.sock");

    TB_CHECK_INT(parse(&u, "unix:relative.sock", err), -1);
    TB_CHECK_CONTAINS(err, "absolute");
}


TB_TEST(url_refused)
{
    tb_redis_url_t  u;
    char            err[512];

    TB_CHECK_INT(parse(&u, "rediss://redis.example.com:6380", err), -1);
    TB_CHECK_CONTAINS(err, "rediss:// (Redis over TLS) is not supported");
    TB_CHECK_CONTAINS(err, "stunnel");
    TB_CHECK_CONTAINS(err, "docs/deployment.md");

    TB_CHECK_INT(parse(&u, "http://h", err), -1);
    TB_CHECK_INT(parse(&u, "redis://", err), -1);
    TB_CHECK_CONTAINS(err, "no host");
    TB_CHECK_INT(parse(&u, "redis://h:0", err), -1);
    TB_CHECK_INT(parse(&u, "redis://h:65536", err), -1);
    TB_CHECK_INT(parse(&u, "redis://h:12x", err), -1);
    TB_CHECK_INT(parse(&u, "redis://h/db", err), -1);
    TB_CHECK_INT(parse(&u, "redis://h/1/2", err), -1);
    TB_CHECK_INT(parse(&u, "redis://h o/", err), -1);
    TB_CHECK_INT(parse(&u, "redis://[::1/", err), -1);
    TB_CHECK_INT(parse(&u, "redis://ho$t", err), -1);
    TB_CHECK_INT(parse(&u, "redis://a:b:c", err), -1);
}


int
main(void)
{
    TB_RUN(url_host_port_db);
    TB_RUN(url_password);
    TB_RUN(url_unix);
    TB_RUN(url_refused);

    return tb_test_done();
}
