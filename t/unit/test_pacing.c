/*
 * Unit tests: pacing readings and their verdicts, time injected - a fixed
 * window (the weekly budget) on the linear and the business-hours curve,
 * a rolling one (a spend cap), the week's start in a time zone, and the
 * configuration's words for them.
 */

#include "tb_test.h"
#include "tb_pacing.h"
#include "tb_ledger.h"


#define H      3600000LL
#define D      (24 * H)
#define USD    1000000000LL

/* Monday 2026-11-30 00:00:00 UTC */
#define MON    1795996800000LL


static int
has(const char *s, const char *sub)
{
    return strstr(s, sub) != NULL;
}


TB_TEST(week_start)
{
    int64_t  t;

    /* the epoch day of MON is a Monday */
    TB_CHECK_INT((MON / D + 3) % 7, 0);
    TB_CHECK_INT(MON % D, 0);

    t = MON + 3 * D + 5 * H;                      /* Thursday 05:00 */
    TB_CHECK_INT(tb_pace_week_start(t, 0, 0, 0), MON);
    TB_CHECK_INT(tb_pace_week_start(MON, 0, 0, 0), MON);
    TB_CHECK_INT(tb_pace_week_start(MON - 1, 0, 0, 0), MON - 7 * D);

    /* Friday 17:00: Thursday is before it, so last week's */
    TB_CHECK_INT(tb_pace_week_start(t, 4, 17 * 60, 0), MON - 3 * D + 17 * H);

    /* Monday 00:00 at +05:30 is Sunday 18:30 UTC */
    TB_CHECK_INT(tb_pace_week_start(t, 0, 0, 330), MON - 330 * 60000LL);
    TB_CHECK_INT(tb_pace_week_start(MON - 5 * H, 0, 0, 330),
                 MON - 330 * 60000LL);

    /* and at -08:00, Monday 08:00 UTC: Monday 07:00 UTC is last week's */
    TB_CHECK_INT(tb_pace_week_start(MON + 7 * H, 0, 0, -480),
                 MON - 7 * D + 8 * H);
}


TB_TEST(fixed_on_ahead_behind)
{
    char       buf[256];
    tb_pace_t  p;

    /* half the week gone, half the budget used: on pace */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 84 * H, 50 * USD, 100 * USD,
                  0, 0, .1, .1);
    TB_CHECK(p.verdict == TB_PACE_ON);
    TB_CHECK(p.elapsed > .499 && p.elapsed < .501);
    TB_CHECK(p.projected > .999 && p.projected < 1.001);
    (void) tb_pace_say(&p, "the weekly budget", buf, sizeof(buf));
    TB_CHECK(has(buf, "on pace: 50% of the weekly budget used, 50% expected"));

    /* a quarter gone, 40% used: ahead and gone before the end */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 42 * H, 40 * USD, 100 * USD,
                  0, 0, .1, .1);
    TB_CHECK(p.verdict == TB_PACE_RUNS_OUT);
    TB_CHECK(p.projected > 1.59 && p.projected < 1.61);
    /* 40 in 42 h: the other 60 in 63 h */
    TB_CHECK_INT(p.runs_out_ms, MON + 42 * H + 63 * H);
    (void) tb_pace_say(&p, "the weekly budget", buf, sizeof(buf));
    TB_CHECK(has(buf, "ahead of pace: at this rate the weekly budget is gone "
                      "in 2d 15h, with 5d 6h of the window still to go"));

    /* ahead, but within the threshold: on pace, though the rate so far
     * would run it out before the end */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 84 * H, 58 * USD, 100 * USD,
                  0, 0, .1, .1);
    TB_CHECK(p.verdict == TB_PACE_ON);
    TB_CHECK(p.projected > 1.15 && p.runs_out_ms > MON + 84 * H);
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 84 * H, 61 * USD, 100 * USD,
                  0, 0, .1, .1);
    TB_CHECK(p.verdict == TB_PACE_RUNS_OUT);

    /* half gone, a fifth used: behind, 60% left unused */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 84 * H, 20 * USD, 100 * USD,
                  0, 0, .1, .1);
    TB_CHECK(p.verdict == TB_PACE_BEHIND);
    (void) tb_pace_say(&p, "the weekly budget", buf, sizeof(buf));
    TB_CHECK(has(buf, "behind pace: on course to leave 60% of the weekly "
                      "budget unused"));

    /* spent already */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 24 * H, 120 * USD, 100 * USD,
                  0, 0, .1, .1);
    TB_CHECK(p.verdict == TB_PACE_RUNS_OUT);
    TB_CHECK_INT(p.runs_out_ms, MON + 24 * H);
    (void) tb_pace_say(&p, "the weekly budget", buf, sizeof(buf));
    TB_CHECK(has(buf, "the weekly budget is spent, with 6d 0h of the window"));

    /* the first instant: nothing elapsed, nothing projected past use */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON, 0, 100 * USD, 0, 0, .1, .1);
    TB_CHECK(p.verdict == TB_PACE_ON);
    TB_CHECK_INT(p.runs_out_ms, 0);
}


TB_TEST(fixed_business_hours)
{
    tb_pace_t  p;

    /* Monday 17:00: one business day of five gone */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 17 * H, 25 * USD, 100 * USD,
                  1, 0, .1, .1);
    TB_CHECK(p.target > .199 && p.target < .201);
    TB_CHECK(p.verdict == TB_PACE_ON);

    /* the same use at Monday 17:00 is far ahead on the linear curve */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 17 * H, 25 * USD, 100 * USD,
                  0, 0, .1, .1);
    TB_CHECK(p.verdict == TB_PACE_RUNS_OUT);

    /* Saturday noon: the whole business week gone */
    tb_pace_fixed(&p, MON, MON + 7 * D, MON + 5 * D + 12 * H, 20 * USD,
                  100 * USD, 1, 0, .1, .1);
    TB_CHECK(p.target > .999);
    TB_CHECK(p.verdict == TB_PACE_BEHIND);

    /* at +09:00, Monday 09:00 local is 00:00 UTC: 8 h of 40 by 08:00 UTC */
    tb_pace_fixed(&p, MON - 9 * H, MON - 9 * H + 7 * D, MON + 8 * H,
                  0, 100 * USD, 1, 540, .1, .1);
    TB_CHECK(p.target > .199 && p.target < .201);
}


TB_TEST(rolling)
{
    char       buf[256];
    tb_pace_t  p;

    /* $10 of a $50 cap, $1 an hour: a window of 24 h comes to $24 */
    tb_pace_rolling(&p, 24 * H, MON, 10 * USD, 1 * USD, 50 * USD, 0);
    TB_CHECK(p.verdict == TB_PACE_ON);
    TB_CHECK(p.projected > .479 && p.projected < .481);
    (void) tb_pace_say(&p, "key tenant-3's $50 spend cap", buf, sizeof(buf));
    TB_CHECK(has(buf, "at this rate ($1.00 an hour) a window comes to 48% of "
                      "key tenant-3's $50 spend cap: under it"));

    /* $4 an hour: the cap in 10 h */
    tb_pace_rolling(&p, 24 * H, MON, 10 * USD, 4 * USD, 50 * USD, 0);
    TB_CHECK(p.verdict == TB_PACE_RUNS_OUT);
    TB_CHECK_INT(p.runs_out_ms, MON + 10 * H);
    (void) tb_pace_say(&p, "key tenant-3's $50 spend cap", buf, sizeof(buf));
    TB_CHECK(has(buf, "at this rate ($4.00 an hour) key tenant-3's $50 spend "
                      "cap is reached in 10h 0m"));

    /* reached: room when the window moves on */
    tb_pace_rolling(&p, 24 * H, MON, 50 * USD, 4 * USD, 50 * USD,
                    MON + 3 * H);
    TB_CHECK(p.verdict == TB_PACE_REACHED);
    (void) tb_pace_say(&p, "account a1's $50 spend cap", buf, sizeof(buf));
    TB_CHECK(has(buf, "account a1's $50 spend cap is reached: room again in "
                      "3h 0m"));

    /* nothing lately */
    tb_pace_rolling(&p, 24 * H, MON, 5 * USD, 0, 50 * USD, 0);
    TB_CHECK(p.verdict == TB_PACE_IDLE);
    (void) tb_pace_say(&p, "the cap", buf, sizeof(buf));
    TB_CHECK(has(buf, "nothing spent lately: 10% of the cap used"));
}


TB_TEST(words)
{
    int  d, m, tz;

    TB_CHECK(tb_pace_week_parse("monday 00:00", &d, &m) == 0);
    TB_CHECK_INT(d, 0);
    TB_CHECK_INT(m, 0);
    TB_CHECK(tb_pace_week_parse("Sat 9:30", &d, &m) == 0);
    TB_CHECK_INT(d, 5);
    TB_CHECK_INT(m, 570);
    TB_CHECK(tb_pace_week_parse("SUNDAY 23:59", &d, &m) == 0);
    TB_CHECK_INT(d, 6);
    TB_CHECK(tb_pace_week_parse("mo 00:00", &d, &m) == -1);
    TB_CHECK(tb_pace_week_parse("monday", &d, &m) == -1);
    TB_CHECK(tb_pace_week_parse("monday 24:00", &d, &m) == -1);
    TB_CHECK(tb_pace_week_parse("monday 10:7", &d, &m) == -1);
    TB_CHECK(tb_pace_week_parse("monday 10:00 x", &d, &m) == -1);
    TB_CHECK(tb_pace_week_parse("mondays 10:00", &d, &m) == -1);
    TB_CHECK(tb_pace_week_parse("", &d, &m) == -1);

    TB_CHECK(tb_pace_tz_parse("UTC", &tz) == 0);
    TB_CHECK_INT(tz, 0);
    TB_CHECK(tb_pace_tz_parse("+05:30", &tz) == 0);
    TB_CHECK_INT(tz, 330);
    TB_CHECK(tb_pace_tz_parse("-08", &tz) == 0);
    TB_CHECK_INT(tz, -480);
    TB_CHECK(tb_pace_tz_parse("+15:00", &tz) == -1);
    TB_CHECK(tb_pace_tz_parse("+5:30", &tz) == -1);
    TB_CHECK(tb_pace_tz_parse("Europe/Paris", &tz) == -1);
    TB_CHECK(tb_pace_tz_parse("+05:60", &tz) == -1);

    TB_CHECK(strcmp(tb_pace_verdict_name(TB_PACE_BEHIND), "behind") == 0);
}


int
main(void)
{
    TB_RUN(week_start);
    TB_RUN(fixed_on_ahead_behind);
    TB_RUN(fixed_business_hours);
    TB_RUN(rolling);
    TB_RUN(words);

    return tb_test_done();
}
