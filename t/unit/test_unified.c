/*
 * tb_unified: a Claude subscription's windows from its answers' unified
 * headers - the real captured 429 of a spent 5-hour window, the three
 * statuses, jitter, what is said again.
 */

#include <math.h>

#include "tb_test.h"
#include "tb_unified.h"


#define NOW   1785510000000LL      /* 2026-07-31T15:00:00Z, about */

static void
hdr(tb_unified_t *o, const char *n, const char *v, int want)
{
    TB_CHECK_INT(tb_unified_header(o, (const unsigned char *) n, strlen(n),
                                   (const unsigned char *) v, strlen(v),
                                   NOW), want);
}


TB_TEST(unified_captured_429)
{
    tb_unified_t  u, o;

    tb_unified_init(&u);
    tb_unified_init(&o);

    /* a public pooler's fixture: the 5-hour window spent */
    hdr(&o, "anthropic-ratelimit-unified-status", "rejected", 1);
    hdr(&o, "anthropic-ratelimit-unified-reset", "1785518400", 1);
    hdr(&o, "anthropic-ratelimit-unified-representative-claim", "five_hour",
        1);
    hdr(&o, "anthropic-ratelimit-unified-5h-status", "rejected", 1);
    hdr(&o, "anthropic-ratelimit-unified-5h-utilization", "1.01", 1);
    hdr(&o, "anthropic-ratelimit-unified-5h-reset", "1785518400", 1);
    hdr(&o, "anthropic-ratelimit-unified-5h-surpassed-threshold", "1.0", 1);
    hdr(&o, "anthropic-ratelimit-unified-7d-status", "allowed", 1);
    hdr(&o, "anthropic-ratelimit-unified-7d-utilization", "0.69", 1);
    hdr(&o, "anthropic-ratelimit-unified-7d-reset", "1785700000", 1);
    hdr(&o, "anthropic-ratelimit-unified-fallback-percentage", "0.5", 1);
    hdr(&o, "anthropic-ratelimit-unified-overage-status", "rejected", 1);
    hdr(&o, "anthropic-ratelimit-unified-overage-disabled-reason",
        "org_level_disabled", 1);
    hdr(&o, "retry-after", "7835", 0);
    hdr(&o, "anthropic-ratelimit-requests-remaining", "7", 0);

    tb_unified_apply(&u, &o);

    TB_CHECK_INT(u.all.status, TB_UNI_REJECTED);
    TB_CHECK_INT(u.all.reset_ms, 1785518400000LL);
    TB_CHECK_STR(u.claim, "five_hour");
    TB_CHECK_INT(u.w[TB_UNI_5H].status, TB_UNI_REJECTED);
    TB_CHECK(u.w[TB_UNI_5H].utilization > 1.0f);
    TB_CHECK_INT(u.w[TB_UNI_7D].status, TB_UNI_ALLOWED);
    TB_CHECK_STR(u.reason, "org_level_disabled");
    TB_CHECK_INT(u.overage, TB_UNI_REJECTED);

    /* spent until the 5-hour reset; no headroom */
    TB_CHECK_INT(tb_unified_blocked_until(&u, NOW), 1785518400000LL);
    TB_CHECK(tb_unified_headroom(&u, NOW) == 0);

    /* past the reset: not blocked, the 7-day window's room left */
    TB_CHECK_INT(tb_unified_blocked_until(&u, 1785518400000LL), 0);
    TB_CHECK(fabs(tb_unified_headroom(&u, 1785518400000LL) - 0.31) < 1e-6);
}


TB_TEST(unified_states)
{
    tb_unified_t  u, o;

    tb_unified_init(&u);
    TB_CHECK(tb_unified_headroom(&u, NOW) == -1);
    TB_CHECK_INT(tb_unified_blocked_until(&u, NOW), 0);

    tb_unified_init(&o);
    hdr(&o, "anthropic-ratelimit-unified-5h-status", "allowed_warning", 1);
    hdr(&o, "anthropic-ratelimit-unified-5h-utilization", "0.92", 1);
    hdr(&o, "anthropic-ratelimit-unified-5h-reset", "1785513600", 1);
    tb_unified_apply(&u, &o);

    TB_CHECK_INT(u.w[TB_UNI_5H].status, TB_UNI_WARNING);
    TB_CHECK(fabs(tb_unified_headroom(&u, NOW) - 0.08) < 1e-6);
    TB_CHECK_INT(tb_unified_blocked_until(&u, NOW), 0);

    /* the reset moved by seconds: jitter, the same window */
    tb_unified_init(&o);
    hdr(&o, "anthropic-ratelimit-unified-5h-reset", "1785513602", 1);
    tb_unified_apply(&u, &o);
    TB_CHECK_INT(u.w[TB_UNI_5H].reset_ms, 1785513600000LL);

    /* by hours: a new window */
    tb_unified_init(&o);
    hdr(&o, "anthropic-ratelimit-unified-5h-reset", "1785531600", 1);
    tb_unified_apply(&u, &o);
    TB_CHECK_INT(u.w[TB_UNI_5H].reset_ms, 1785531600000LL);

    /* throttled reads as rejected; nonsense is ignored */
    tb_unified_init(&o);
    hdr(&o, "anthropic-ratelimit-unified-7d-status", "throttled", 1);
    hdr(&o, "anthropic-ratelimit-unified-7d-reset", "1785600000", 1);
    hdr(&o, "anthropic-ratelimit-unified-7d-utilization", "-3", 1);
    hdr(&o, "anthropic-ratelimit-unified-5h-utilization", "lots", 1);
    hdr(&o, "anthropic-ratelimit-unified-representative-claim", "a b\r\nx",
        1);
    /* a reset years away is not believed */
    hdr(&o, "anthropic-ratelimit-unified-reset", "99999999999", 1);
    tb_unified_apply(&u, &o);
    TB_CHECK_INT(tb_unified_blocked_until(&u, NOW), 1785600000000LL);
    TB_CHECK(u.w[TB_UNI_7D].utilization < 0);
    TB_CHECK(fabs(u.w[TB_UNI_5H].utilization - 0.92f) < 1e-6);
    TB_CHECK_STR(u.claim, "");
    TB_CHECK_INT(u.all.reset_ms, 0);

    /* per-claim weekly windows */
    tb_unified_init(&o);
    hdr(&o, "anthropic-ratelimit-unified-7d_opus-utilization", "0.97", 1);
    tb_unified_apply(&u, &o);
    TB_CHECK(fabs(tb_unified_headroom(&u, NOW) - 0.03) < 1e-6);

    tb_unified_init(&o);
    hdr(&o, "x-anthropic-ratelimit-unified-status", "rejected", 0);
}


TB_TEST(unified_said_again)
{
    int           i, n;
    char          name[80], value[40];
    tb_unified_t  u, o;

    tb_unified_init(&u);
    TB_CHECK_INT(tb_unified_header_at(&u, 0, name, sizeof(name), value,
                                      sizeof(value)), 0);

    tb_unified_init(&o);
    hdr(&o, "anthropic-ratelimit-unified-status", "rejected", 1);
    hdr(&o, "anthropic-ratelimit-unified-reset", "1785518400", 1);
    hdr(&o, "anthropic-ratelimit-unified-representative-claim", "five_hour",
        1);
    hdr(&o, "anthropic-ratelimit-unified-5h-utilization", "1.01", 1);
    hdr(&o, "anthropic-ratelimit-unified-7d-status", "allowed", 1);
    tb_unified_apply(&u, &o);

    n = 0;
    i = 0;

    while ((i = tb_unified_header_at(&u, (unsigned) i, name, sizeof(name),
                                     value, sizeof(value))) != 0)
    {
        n++;

        if (strcmp(name, "anthropic-ratelimit-unified-reset") == 0) {
            TB_CHECK_STR(value, "1785518400");
        }

        if (strcmp(name, "anthropic-ratelimit-unified-5h-utilization") == 0) {
            TB_CHECK_STR(value, "1.01");
        }

        if (strcmp(name, "anthropic-ratelimit-unified-representative-claim")
            == 0)
        {
            TB_CHECK_STR(value, "five_hour");
        }
    }

    TB_CHECK_INT(n, 5);
}


int
main(void)
{
    TB_RUN(unified_captured_429);
    TB_RUN(unified_states);
    TB_RUN(unified_said_again);

    return tb_test_done();
}
