/*
 * Unit tests: the spend ledger - charges counted for a whole window and
 * never less, the window rolling as time passes (time injected), what is
 * reserved in flight, and when a cap frees room.
 */

#include "tb_test.h"
#include "tb_ledger.h"


#define H   3600000LL                     /* an hour, ms */
#define BM  (H)                           /* 24 h window: 1 h buckets */
#define T0  (1000LL * 24 * H + 1234)      /* somewhere mid-bucket */


TB_TEST(bucket_length)
{
    TB_CHECK_INT(tb_ledger_bucket_ms(24), H);
    TB_CHECK_INT(tb_ledger_bucket_ms(1), H / 24);
    TB_CHECK_INT(tb_ledger_bucket_ms(0.0000001), 1);
    TB_CHECK_INT(tb_usd_to_nd(0.01), 10000000);
    TB_CHECK_INT(tb_usd_to_nd(-1), -1);
    TB_CHECK_INT(tb_usd_to_nd(0), 0);
}


TB_TEST(counts_a_whole_window)
{
    int64_t      turns;
    tb_ledger_t  l = { 0 };

    tb_ledger_charge(&l, T0, BM, 500, 1);
    tb_ledger_charge(&l, T0 + 10, BM, 250, 1);

    TB_CHECK_INT(tb_ledger_spent(&l, T0, BM, &turns), 750);
    TB_CHECK_INT(turns, 2);

    /* a window later it still counts (never lifted early) ... */
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 24 * H, BM, NULL), 750);

    /* ... and once its bucket is a window old, it does not */
    TB_CHECK_INT(tb_ledger_spent(&l, (T0 / BM + 25) * BM, BM, &turns), 0);
    TB_CHECK_INT(turns, 0);
    TB_CHECK_INT(tb_ledger_spent(&l, (T0 / BM + 25) * BM - 1, BM, NULL),
                 750);
}


TB_TEST(rate_of_the_last_hour)
{
    tb_ledger_t  l = { 0 };

    /* nothing: no rate */
    TB_CHECK_INT(tb_ledger_rate(&l, T0, BM), 0);

    /* 1 h buckets: the current bucket and the one before, over the time
     * they cover: $3 in the 1 h 1.234 s since the start of T0 - H's */
    tb_ledger_charge(&l, T0 - H, BM, 1000, 1);
    tb_ledger_charge(&l, T0, BM, 2000, 1);
    TB_CHECK_INT(tb_ledger_rate(&l, T0, BM), 3000 * H / (H + 1234));

    /* an old charge is no part of it */
    tb_ledger_charge(&l, T0 - 5 * H, BM, 1000000, 1);
    TB_CHECK_INT(tb_ledger_rate(&l, T0, BM), 3000 * H / (H + 1234));

    /* at the next bucket's start: T0's bucket alone, an hour of it */
    TB_CHECK_INT(tb_ledger_rate(&l, (T0 / BM + 1) * BM, BM), 2000);

    /* an hour on, none of it */
    TB_CHECK_INT(tb_ledger_rate(&l, (T0 / BM + 2) * BM, BM), 0);
}


TB_TEST(window_rolls)
{
    int          i;
    tb_ledger_t  l = { 0 };

    /* one charge an hour for two days: the window holds 25 of them */
    for (i = 0; i < 48; i++) {
        tb_ledger_charge(&l, T0 + i * H, BM, 10, 1);
    }

    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 47 * H, BM, NULL), 250);

    /* a long silence empties it; a charge then starts afresh */
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 200 * H, BM, NULL), 0);
    tb_ledger_charge(&l, T0 + 200 * H, BM, 7, 1);
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 200 * H, BM, NULL), 7);
}


TB_TEST(old_charges_dropped)
{
    tb_ledger_t  l = { 0 };

    tb_ledger_charge(&l, T0 + 30 * H, BM, 100, 1);

    /* a charge the window no longer holds (a late restore) is dropped */
    tb_ledger_charge(&l, T0, BM, 999, 1);
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 30 * H, BM, NULL), 100);

    /* one inside it is added where it belongs */
    tb_ledger_charge(&l, T0 + 10 * H, BM, 1, 0);
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 30 * H, BM, NULL), 101);
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 35 * H + BM, BM, NULL), 100);
}


TB_TEST(reserved_counts_against_cap)
{
    tb_ledger_t  l = { 0 };

    tb_ledger_charge(&l, T0, BM, 400, 1);

    TB_CHECK(!tb_ledger_over(&l, T0, BM, 1000));
    l.reserved = 599;
    TB_CHECK(!tb_ledger_over(&l, T0, BM, 1000));
    l.reserved = 600;
    TB_CHECK(tb_ledger_over(&l, T0, BM, 1000));
    TB_CHECK(!tb_ledger_over(&l, T0, BM, -1));

    /* only what is in flight holds it: no time frees it */
    l.reserved = 1000;
    TB_CHECK_INT(tb_ledger_frees_at(&l, T0, BM, 1000, 0), 0);
}


TB_TEST(frees_at)
{
    tb_ledger_t  l = { 0 };

    tb_ledger_charge(&l, T0, BM, 600, 1);
    tb_ledger_charge(&l, T0 + 5 * H, BM, 600, 1);

    /* under the cap: now */
    TB_CHECK_INT(tb_ledger_frees_at(&l, T0 + 6 * H, BM, 2000, 0),
                 T0 + 6 * H);

    /* 1200 of 1000: the first charge leaving is enough */
    TB_CHECK_INT(tb_ledger_frees_at(&l, T0 + 6 * H, BM, 1000, 0),
                 (T0 / BM + 25) * BM);

    /* 1200 of 500: both must leave */
    TB_CHECK_INT(tb_ledger_frees_at(&l, T0 + 6 * H, BM, 500, 0),
                 (T0 / BM + 5 + 25) * BM);

    /* turns: 2 of a limit of 2, the first one leaving frees one */
    TB_CHECK_INT(tb_ledger_frees_at(&l, T0 + 6 * H, BM, 2, 1),
                 (T0 / BM + 25) * BM);
    l.reserved_turns = 1;
    TB_CHECK_INT(tb_ledger_frees_at(&l, T0 + 6 * H, BM, 2, 1),
                 (T0 / BM + 5 + 25) * BM);

    /* and at that time it is indeed under */
    TB_CHECK(!tb_ledger_over(&l, (T0 / BM + 25) * BM, BM, 1000));
    TB_CHECK(tb_ledger_over(&l, (T0 / BM + 25) * BM - 1, BM, 1000));
}


TB_TEST(rebucketed)
{
    tb_ledger_t  l = { 0 }, m;

    tb_ledger_charge(&l, T0, BM, 100, 1);
    tb_ledger_charge(&l, T0 + 3 * H, BM, 50, 1);

    /* the window halved: what is older than 12 h goes, the rest stays */
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 3 * H, BM / 2, NULL), 150);
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 13 * H, BM / 2, NULL), 50);

    tb_ledger_rebucket(&m, &l, BM / 2);
    TB_CHECK_INT(m.bucket_ms, BM / 2);
    TB_CHECK_INT(tb_ledger_spent(&m, T0 + 3 * H, BM / 2, NULL), 150);

    /* a charge in the new length moves the ledger there */
    tb_ledger_charge(&l, T0 + 4 * H, BM / 2, 1, 1);
    TB_CHECK_INT(l.bucket_ms, BM / 2);
    TB_CHECK_INT(tb_ledger_spent(&l, T0 + 4 * H, BM / 2, NULL), 151);
}


TB_TEST(tokens_in_words)
{
    char  buf[16];

    tb_tokens_format(950, buf, sizeof(buf));
    TB_CHECK_STR(buf, "950");
    tb_tokens_format(701600, buf, sizeof(buf));
    TB_CHECK_STR(buf, "702k");
    tb_tokens_format(999499, buf, sizeof(buf));
    TB_CHECK_STR(buf, "999k");
    tb_tokens_format(999500, buf, sizeof(buf));
    TB_CHECK_STR(buf, "1.00M");
    tb_tokens_format(4000000, buf, sizeof(buf));
    TB_CHECK_STR(buf, "4.00M");
    tb_tokens_format(123456789, buf, sizeof(buf));
    TB_CHECK_STR(buf, "123.5M");
    tb_tokens_format(-5, buf, sizeof(buf));
    TB_CHECK_STR(buf, "0");
}


int
main(void)
{
    TB_RUN(bucket_length);
    TB_RUN(counts_a_whole_window);
    TB_RUN(rate_of_the_last_hour);
    TB_RUN(window_rolls);
    TB_RUN(old_charges_dropped);
    TB_RUN(reserved_counts_against_cap);
    TB_RUN(frees_at);
    TB_RUN(rebucketed);
    TB_RUN(tokens_in_words);

    return tb_test_done();
}
