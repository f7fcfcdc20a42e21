/*
 * Unit tests: what an account added at runtime may be - the admin API's
 * rules, applied again to what is read back - and which hosts and
 * addresses no such account may reach unless the operator allows it.
 */

#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "tb_test.h"
#include "tb_racct.h"


static char  err[256];


static int
check(const char *spec, const char *id, int allow)
{
    err[0] = '\0';
    return tb_racct_check(spec, strlen(spec), id, strlen(id), allow, err,
                          sizeof(err));
}


TB_TEST(specs)
{
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":\"https://api.anthropic.com\","
                       "\"priority\":2,\"models\":[\"claude-*\"]}", "a1", 0), 0);
    TB_CHECK_INT(check("{\"id\":\"a1\"}", "a1", 0), 0);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"type\":\"anthropic\"}", "a1", 0), 0);

    /* what the API never takes */
    TB_CHECK_INT(check("{\"id\":\"a1\",\"headers\":{\"x\":\"1\"}}", "a1", 0), -1);
    TB_CHECK(strstr(err, "\"headers\"") != NULL);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"options\":{}}", "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"api_key\":\"sk\"}", "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"type\":\"vertex\"}", "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"type\":1}", "a1", 0), -1);

    /* its record's id, one an added account can have */
    TB_CHECK_INT(check("{\"id\":\"a2\"}", "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"test\"}", "test", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"-x\"}", "-x", 0), -1);
    TB_CHECK_INT(check("{}", "a1", 0), -1);

    /* a member twice, and not an object */
    TB_CHECK_INT(check("{\"id\":\"a1\",\"priority\":1,\"priority\":9}", "a1",
                       0), -1);
    TB_CHECK(strstr(err, "twice") != NULL);
    TB_CHECK_INT(check("[]", "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"a1\"", "a1", 0), -1);

    /* base_url: http(s), a host, no user information */
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":\"ftp://x\"}", "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":\"https://u:p@x.io\"}",
                       "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":\"https://\"}", "a1", 0),
                 -1);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":1}", "a1", 0), -1);
}


TB_TEST(private_hosts)
{
    static const char  *private[] = {
        "127.0.0.1", "127.1.2.3", "localhost", "LocalHost.", "a.localhost",
        "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1",
        "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1",
        "255.255.255.255", "::1", "::", "fe80::1", "fd00::1", "fc00::1",
        "::ffff:127.0.0.1", "::ffff:169.254.169.254", "ff02::1", NULL
    };

    static const char  *public[] = {
        "api.anthropic.com", "8.8.8.8", "172.15.0.1", "172.32.0.1",
        "100.128.0.1", "2606:4700::1111", "localhost.example.com",
        "192.169.0.1", NULL
    };

    const char  **h;

    for (h = private; *h; h++) {
        if (!tb_racct_private_host(*h)) {
            TB_FAIL_AT("%s is not said private", *h);
        }
    }

    for (h = public; *h; h++) {
        if (tb_racct_private_host(*h)) {
            TB_FAIL_AT("%s is said private", *h);
        }
    }

    /* the rule applied to a spec, and allowed */
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":\"http://127.0.0.1:8080\"}",
                       "a1", 0), -1);
    TB_CHECK(strstr(err, "server.allow_private_hosts") != NULL);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":\"http://[::1]:8080/v\"}",
                       "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":"
                       "\"http://169.254.169.254/latest\"}", "a1", 0), -1);
    TB_CHECK_INT(check("{\"id\":\"a1\",\"base_url\":\"http://127.0.0.1:8080\"}",
                       "a1", 1), 0);
}


TB_TEST(private_addrs)
{
    struct sockaddr_in   v4;
    struct sockaddr_in6  v6;

    memset(&v4, 0, sizeof(v4));
    v4.sin_family = AF_INET;
    (void) inet_pton(AF_INET, "10.1.2.3", &v4.sin_addr);
    TB_CHECK(tb_racct_private_addr((struct sockaddr *) &v4));
    (void) inet_pton(AF_INET, "93.184.216.34", &v4.sin_addr);
    TB_CHECK(!tb_racct_private_addr((struct sockaddr *) &v4));

    memset(&v6, 0, sizeof(v6));
    v6.sin6_family = AF_INET6;
    (void) inet_pton(AF_INET6, "::ffff:192.168.0.1", &v6.sin6_addr);
    TB_CHECK(tb_racct_private_addr((struct sockaddr *) &v6));
    (void) inet_pton(AF_INET6, "2606:4700::1111", &v6.sin6_addr);
    TB_CHECK(!tb_racct_private_addr((struct sockaddr *) &v6));
}


int
main(void)
{
    TB_RUN(specs);
    TB_RUN(private_hosts);
    TB_RUN(private_addrs);

    return tb_test_done();
}
