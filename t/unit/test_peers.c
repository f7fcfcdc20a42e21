/*
 * Unit tests: what a gateway tells the others of its keys and
 * conversations (tb_peers.c) - printed and scanned back exactly, names
 * that carry any byte but NUL, and every line that is not exactly what
 * the printer writes refused whole.
 */

#include <string.h>

#include "tb_test.h"
#include "tb_peers.h"


TB_TEST(key_round_trip)
{
    char           buf[TB_PEER_LINE_MAX + 1];
    size_t         n;
    tb_peer_key_t  k, back;
    tb_peer_session_t  s;

    memset(&k, 0, sizeof(k));
    k.key = 0xfedcba9876543210ULL;
    k.spend.window_cost = 1234567;
    k.spend.window_turns = 7;
    k.spend.reserved = 89;
    k.spend.reserved_turns = 1;
    k.rpm = 42;

    n = tb_peer_key_print(&k, buf);
    TB_CHECK(n <= TB_PEER_LINE_MAX);
    buf[n] = '\0';
    TB_CHECK(strcmp(buf, "k fedcba9876543210 1234567 7 89 1 42") == 0);
    TB_CHECK_INT(tb_peer_scan(buf, n, &back, &s), TB_PEER_KEY);
    TB_CHECK(memcmp(&k, &back, sizeof(k)) == 0);

    /* one byte less, one more, a sign, a capital, too many digits */
    TB_CHECK_INT(tb_peer_scan(buf, n - 1, &back, &s), TB_PEER_KEY);
    TB_CHECK_INT(back.rpm, 4);
    TB_CHECK_INT(tb_peer_scan(buf, n - 3, &back, &s), 0);
    TB_CHECK_INT(tb_peer_scan("k fedcba9876543210 1 2 3 4 5 ", 30, &back, &s),
                 0);
    TB_CHECK_INT(tb_peer_scan("k fedcba9876543210 -1 2 3 4 5", 29, &back, &s),
                 0);
    TB_CHECK_INT(tb_peer_scan("k FEDCBA9876543210 1 2 3 4 5", 28, &back, &s),
                 0);
    TB_CHECK_INT(tb_peer_scan("k fedcba987654321 1 2 3 4 5", 27, &back, &s),
                 0);
    TB_CHECK_INT(tb_peer_scan("k 0000000000000001 1000000000000000000 2 3 4 5",
                              46, &back, &s), 0);
    TB_CHECK_INT(tb_peer_scan("k 0000000000000001 999999999999999999 2 3 4 5",
                              45, &back, &s), TB_PEER_KEY);
    TB_CHECK_INT(tb_peer_scan("k fedcba9876543210 1 2 3 4 05", 29, &back, &s),
                 0);
    TB_CHECK_INT(tb_peer_scan("k fedcba9876543210 1 2 3 4 0", 28, &back, &s),
                 TB_PEER_KEY);
    TB_CHECK_INT(tb_peer_scan("x", 1, &back, &s), 0);
    TB_CHECK_INT(tb_peer_scan("", 0, &back, &s), 0);
}


TB_TEST(session_round_trip)
{
    char               buf[TB_PEER_LINE_MAX + 1];
    size_t             n;
    tb_peer_key_t      k;
    tb_peer_session_t  s, back;

    memset(&s, 0, sizeof(s));
    s.session = 0x0123456789abcdefULL;
    s.spend.window_cost = 5;
    s.spend.window_turns = 2;
    s.cost = 99;
    s.turns = 3;
    s.unpriced = 1;
    s.tokens[0] = 10;
    s.tokens[3] = 40;
    s.first_ms = 1795984859000LL;
    s.last_ms = 1795984869000LL;
    strcpy(s.key, "a key, with spaces");
    strcpy(s.account, "acct-01");

    n = tb_peer_session_print(&s, buf);
    TB_CHECK(n <= TB_PEER_LINE_MAX);
    TB_CHECK_INT(tb_peer_scan(buf, n, &k, &back), TB_PEER_SESSION);
    TB_CHECK(memcmp(&s, &back, sizeof(s)) == 0);

    /* no account: "-" */
    memset(s.account, 0, sizeof(s.account));
    n = tb_peer_session_print(&s, buf);
    TB_CHECK(buf[n - 1] == '-' && buf[n - 2] == ' ');
    TB_CHECK_INT(tb_peer_scan(buf, n, &k, &back), TB_PEER_SESSION);
    TB_CHECK(memcmp(&s, &back, sizeof(s)) == 0);

    /* the longest names fit the longest line */
    memset(s.key, 0xff, TB_ID_MAX);
    s.key[TB_ID_MAX] = '\0';
    memset(s.account, 'z', TB_ID_MAX);
    s.account[TB_ID_MAX] = '\0';
    s.cost = 999999999999999999LL;
    n = tb_peer_session_print(&s, buf);
    TB_CHECK(n <= TB_PEER_LINE_MAX);
    TB_CHECK_INT(tb_peer_scan(buf, n, &k, &back), TB_PEER_SESSION);
    TB_CHECK(memcmp(&s, &back, sizeof(s)) == 0);

    /* a name one byte too long, an odd hex digit, a NUL, no key */
    TB_CHECK_INT(tb_peer_scan("c 0000000000000001 0 0 0 0 0 0 0 0 0 0 0 0 0 "
                              "61 2d", 50, &k, &back), TB_PEER_SESSION);
    TB_CHECK_INT(tb_peer_scan("c 0000000000000001 0 0 0 0 0 0 0 0 0 0 0 0 0 "
                              "6 2d", 49, &k, &back), 0);
    TB_CHECK_INT(tb_peer_scan("c 0000000000000001 0 0 0 0 0 0 0 0 0 0 0 0 0 "
                              "6100 2d", 52, &k, &back), 0);
    TB_CHECK_INT(tb_peer_scan("c 0000000000000001 0 0 0 0 0 0 0 0 0 0 0 0 0 "
                              "- -", 48, &k, &back), 0);
    n = tb_peer_session_print(&s, buf);
    memcpy(buf + n, "61", 2);
    TB_CHECK_INT(tb_peer_scan(buf, n + 2, &k, &back), 0);
}


int
main(void)
{
    TB_RUN(key_round_trip);
    TB_RUN(session_round_trip);

    return tb_test_done();
}
