/*
 * Unit tests: the mirror read at a time, filters and their verdicts,
 * scores and strategies, leases, the output estimator, session keys.
 */

#include <stdlib.h>

#include "tb_test.h"
#include "tb_router.h"
#include "tb_lease.h"
#include "tb_estimator.h"
#include "tb_session.h"
#include "tb_hash.h"


#define T0        1795984859000LL


/* an attempt's answer: its usage, when its headers came, nothing said of
 * the windows (one at a time: the next call overwrites it) */
static const tb_answer_t *
answer(const tb_usage_t *usage, int64_t headers_ms)
{
    static tb_answer_t  ans;

    ans.usage = usage;
    ans.headers_ms = headers_ms;
    ans.remaining[0] = -1;
    ans.remaining[1] = -1;

    return &ans;
}
#define NACCTS    4

#define S(s)      (const unsigned char *) (s), sizeof(s) - 1


static tb_config_t         *cf;
static tb_account_conf_t    conf[NACCTS];
static tb_account_state_t   st[NACCTS];
static tb_cand_t            cand[NACCTS];
static tb_cand_out_t        out[NACCTS];
static char                *star[] = { "*" };
static tb_breaker_conf_t    bc = { 5, 30000 };
static int                  probed;


static void
setup(void)
{
    int            i;
    unsigned char  fp[8] = { 0 };
    static char   *ids[] = { "a0", "a1", "a2", "a3" };

    if (cf == NULL) {
        cf = tb_config_defaults();
    }

    memset(conf, 0, sizeof(conf));
    memset(st, 0, sizeof(st));
    memset(cand, 0, sizeof(cand));

    for (i = 0; i < NACCTS; i++) {
        conf[i].id = ids[i];
        conf[i].cost_tier = 1.0;
        conf[i].max_concurrency = 16;
        conf[i].enabled = 1;
        conf[i].observable_limits = 1;
        conf[i].assumed_headroom = 0.5;
        conf[i].spend_cap_usd = TB_UNSET;
        conf[i].models.items = star;
        conf[i].models.n = 1;

        tb_account_state_init(&st[i], ids[i], strlen(ids[i]), fp);

        cand[i].conf = &conf[i];
        cand[i].st = &st[i];
        cand[i].id_hash = tb_hash64(0, ids[i], 2);
        cand[i].supported = 1;
        cand[i].in_pool = 1;
    }
}


static void
observe(tb_account_state_t *a, int w, int64_t limit, int64_t remaining,
    int64_t reset, int64_t at)
{
    a->mirror.w[w].limit = limit;
    a->mirror.w[w].remaining = remaining;
    a->mirror.w[w].reset_ms = reset;
    a->mirror.w[w].observed_ms = at;
    a->mirror.observed_ms = at;
}


static tb_route_in_t
input(const char *strategy, int owner, uint64_t session)
{
    int            i;
    tb_route_in_t  in;

    memset(&in, 0, sizeof(in));

    in.strategy = tb_strategy_builtin(strategy);
    in.weights[TB_T_AFFINITY] = cf->w_affinity;
    in.weights[TB_T_HEADROOM] = cf->w_headroom;
    in.weights[TB_T_PRIORITY] = cf->w_priority;
    in.weights[TB_T_LOAD] = cf->w_load;
    in.weights[TB_T_ERRORS] = cf->w_errors;
    in.weights[TB_T_COST] = cf->w_cost;
    in.model = "claude-sonnet-4-6";
    in.model_len = strlen(in.model);
    in.model_hash = tb_hash64(0, in.model, in.model_len);
    in.breaker = bc;
    in.need.n[TB_WIN_REQUESTS] = 1;
    in.need.n[TB_WIN_INPUT] = 1000;
    in.need.n[TB_WIN_OUTPUT] = 500;
    in.need.max_tokens = 1024;
    in.session = session;
    in.owner = owner;
    in.now = T0;

    for (i = 0; i < NACCTS; i++) {
        (void) i;
    }

    return in;
}


static int
decide(tb_route_in_t *in, tb_decision_t *d)
{
    tb_route(in, cand, NACCTS, out, d);
    return d->chosen;
}


TB_TEST(window_never_seen_reads_full)
{
    setup();

    TB_CHECK_INT(tb_window_level(&st[0].mirror.w[TB_WIN_INPUT], T0),
                 TB_UNKNOWN);
    TB_CHECK_INT(tb_window_available(&st[0], TB_WIN_INPUT, T0), TB_UNKNOWN);
    TB_CHECK_DBL(tb_headroom(&conf[0], &st[0], T0), 1.0, 1e-12);
}


TB_TEST(window_refills_continuously_then_fully)
{
    tb_window_t  *w;

    setup();

    /* 40,000 of 100,000 left, full again 30 s later: a token bucket */
    observe(&st[0], TB_WIN_INPUT, 100000, 40000, T0 + 30000, T0);
    w = &st[0].mirror.w[TB_WIN_INPUT];
    w->refill = TB_REFILL_BUCKET;

    TB_CHECK_INT(tb_window_level(w, T0), 40000);
    TB_CHECK_INT(tb_window_level(w, T0 + 15000), 70000);
    TB_CHECK_INT(tb_window_level(w, T0 + 29999), 99998);
    TB_CHECK_INT(tb_window_level(w, T0 + 30000), 100000);
    TB_CHECK_INT(tb_window_level(w, T0 + 999999), 100000);

    /* a clock behind the observation reads the observation */
    TB_CHECK_INT(tb_window_level(w, T0 - 5000), 40000);

    /* no reset header: a bucket refilling its limit per minute */
    observe(&st[1], TB_WIN_INPUT, 60000, 0, 0, T0);
    TB_CHECK_INT(tb_window_level(&st[1].mirror.w[TB_WIN_INPUT], T0 + 30000),
                 30000);
    TB_CHECK_INT(tb_window_level(&st[1].mirror.w[TB_WIN_INPUT], T0 + 60000),
                 60000);

    /* not yet known to be a bucket, or a fixed window: nothing before reset */
    observe(&st[3], TB_WIN_INPUT, 100000, 40000, T0 + 30000, T0);
    w = &st[3].mirror.w[TB_WIN_INPUT];
    TB_CHECK_INT(tb_window_level(w, T0 + 15000), 40000);
    TB_CHECK_INT(tb_window_level(w, T0 + 29999), 40000);
    TB_CHECK_INT(tb_window_level(w, T0 + 30000), 100000);
    w->refill = TB_REFILL_FIXED;
    TB_CHECK_INT(tb_window_level(w, T0 + 29999), 40000);

    /* remaining seen without a limit: taken as it is */
    observe(&st[2], TB_WIN_INPUT, -1, 500, T0 + 1000, T0);
    TB_CHECK_INT(tb_window_level(&st[2].mirror.w[TB_WIN_INPUT], T0 + 5000),
                 500);
}


TB_TEST(headroom_is_the_tightest_window_after_reservations)
{
    setup();

    observe(&st[0], TB_WIN_REQUESTS, 100, 90, T0 + 60000, T0);
    observe(&st[0], TB_WIN_INPUT, 100000, 50000, T0 + 60000, T0);
    observe(&st[0], TB_WIN_OUTPUT, 10000, 8000, T0 + 60000, T0);

    TB_CHECK_DBL(tb_headroom(&conf[0], &st[0], T0), 0.5, 1e-9);

    st[0].reserved[TB_WIN_OUTPUT] = 6000;
    TB_CHECK_DBL(tb_headroom(&conf[0], &st[0], T0), 0.2, 1e-9);

    st[0].reserved[TB_WIN_OUTPUT] = 9000;
    TB_CHECK_DBL(tb_headroom(&conf[0], &st[0], T0), 0.0, 1e-9);
    TB_CHECK_INT(tb_window_available(&st[0], TB_WIN_OUTPUT, T0), 0);
}


TB_TEST(unobservable_reads_assumed_headroom)
{
    setup();

    conf[0].observable_limits = 0;
    TB_CHECK_DBL(tb_headroom(&conf[0], &st[0], T0), 0.5, 1e-12);

    conf[0].assumed_headroom = 0.25;
    TB_CHECK_DBL(tb_headroom(&conf[0], &st[0], T0), 0.25, 1e-12);

    /* and never full, even with a mirror that says so */
    observe(&st[0], TB_WIN_INPUT, 1000, 1000, T0 + 1000, T0);
    TB_CHECK_DBL(tb_headroom(&conf[0], &st[0], T0), 0.25, 1e-12);
}


TB_TEST(unobservable_learns_its_concurrency_from_429s)
{
    char           buf[128];
    int64_t        i;
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    conf[0].observable_limits = 0;
    conf[0].max_concurrency = 16;

    /* none taught yet: max_concurrency */
    TB_CHECK_INT(tb_account_max_inflight(&st[0], 16), 16);

    /* a 429 with 8 in flight: three quarters of them */
    tb_account_ceiling(&st[0], 1, 8, 16, T0, T0);
    TB_CHECK_INT(st[0].ceiling, 6);
    TB_CHECK_INT(tb_account_max_inflight(&st[0], 16), 6);

    /* another with 12 in flight (others' in flight): never up */
    tb_account_ceiling(&st[0], 1, 12, 16, T0, T0);
    TB_CHECK_INT(st[0].ceiling, 4);

    /* a lone request refused: at least one */
    tb_account_ceiling(&st[0], 1, 1, 16, T0, T0);

    /* an answer to an attempt sent before the 429 teaches nothing */
    tb_account_ceiling(&st[0], 0, 1, 16, T0, T0 + 5);
    TB_CHECK_INT(st[0].ceiling, 1);
    TB_CHECK_INT(st[0].ceiling_ok, 0);
    TB_CHECK_INT(st[0].ceiling, 1);

    /* one answer raises 1 to 2, two more raise it to 3 */
    tb_account_ceiling(&st[0], 0, 1, 16, T0 + 1, T0 + 9);
    TB_CHECK_INT(st[0].ceiling, 2);
    tb_account_ceiling(&st[0], 0, 1, 16, T0 + 1, T0 + 9);
    TB_CHECK_INT(st[0].ceiling, 2);
    tb_account_ceiling(&st[0], 0, 1, 16, T0 + 1, T0 + 9);
    TB_CHECK_INT(st[0].ceiling, 3);

    /* the router holds to it, and says so */
    st[0].inflight = 3;
    in = input("headroom", -1, 0);
    (void) decide(&in, &d);
    TB_CHECK_INT(out[0].verdict, TB_V_CONCURRENCY);
    tb_verdict_str(out[0].verdict, &out[0], &cand[0], T0, buf, sizeof(buf));
    TB_CHECK_STR(buf, "filtered \xe2\x80\x94 at the concurrency its 429s "
                      "taught (3 of 16)");
    st[0].inflight = 2;
    (void) decide(&in, &d);
    TB_CHECK(out[0].verdict != TB_V_CONCURRENCY);

    /* enough answers and the ceiling is gone */
    for (i = 0; i < 200 && st[0].ceiling; i++) {
        tb_account_ceiling(&st[0], 0, 1, 16, T0 + 1, T0 + 9);
    }
    TB_CHECK_INT(st[0].ceiling, 0);
    TB_CHECK_INT(tb_account_max_inflight(&st[0], 16), 16);

    /* an operator's re-enable forgets it */
    tb_account_ceiling(&st[0], 1, 4, 16, T0, T0);
    TB_CHECK_INT(st[0].ceiling, 3);
    tb_account_clear(&st[0]);
    TB_CHECK_INT(st[0].ceiling, 0);
}


TB_TEST(fits_and_when)
{
    tb_need_t  need;

    setup();

    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;
    need.n[TB_WIN_INPUT] = 30000;

    observe(&st[0], TB_WIN_INPUT, 100000, 10000, T0 + 45000, T0);

    /* not known to refill before its reset: at the latest then */
    TB_CHECK(!tb_fits(&st[0], &need, T0));
    TB_CHECK_INT(tb_fits_at(&st[0], &need, T0), T0 + 45000);
    TB_CHECK(!tb_fits(&st[0], &need, T0 + 44999));
    TB_CHECK(tb_fits(&st[0], &need, T0 + 45000));

    /* a fixed window: at its reset, all at once */
    st[0].mirror.w[TB_WIN_INPUT].refill = TB_REFILL_FIXED;
    TB_CHECK_INT(tb_fits_at(&st[0], &need, T0), T0 + 45000);

    /* a token bucket */
    st[0].mirror.w[TB_WIN_INPUT].refill = TB_REFILL_BUCKET;

    /* 10,000 -> 100,000 over 45 s: 2,000 a second; 30,000 in 10 s */
    TB_CHECK_INT(tb_fits_at(&st[0], &need, T0), T0 + 10001);
    TB_CHECK(tb_fits(&st[0], &need, T0 + 10001));

    /* reservations push it out */
    st[0].reserved[TB_WIN_INPUT] = 20000;
    TB_CHECK_INT(tb_fits_at(&st[0], &need, T0), T0 + 20001);

    /* more than the whole window can ever hold: not knowable */
    st[0].reserved[TB_WIN_INPUT] = 80000;
    TB_CHECK_INT(tb_fits_at(&st[0], &need, T0), 0);
}


TB_TEST(exceeds_uses_the_callers_ceiling)
{
    tb_need_t  need;

    setup();

    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;
    need.n[TB_WIN_INPUT] = 10;
    need.n[TB_WIN_OUTPUT] = 800;            /* the prediction */
    need.max_tokens = 32000;                /* what the caller asked */

    observe(&st[0], TB_WIN_OUTPUT, 16000, 16000, T0, T0);

    TB_CHECK(tb_exceeds_limits(&st[0], &need));

    need.max_tokens = 16000;
    TB_CHECK(!tb_exceeds_limits(&st[0], &need));

    observe(&st[0], TB_WIN_INPUT, 5, 5, T0, T0);
    TB_CHECK(tb_exceeds_limits(&st[0], &need));
}


static void
verdict_is(int i, int64_t now, const char *want)
{
    char  buf[128];

    tb_verdict_str(out[i].verdict, &out[i], &cand[i], now, buf, sizeof(buf));
    TB_CHECK_STR(buf, want);
}


TB_TEST(every_verdict_string)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();
    in = input("sticky_headroom", -1, 7);

    cand[0].in_pool = 0;
    cand[1].tried = 1;
    observe(&st[2], TB_WIN_INPUT, 500, 500, T0, T0);       /* too small */
    decide(&in, &d);

    verdict_is(0, T0, "filtered \xe2\x80\x94 outside this key's pool");
    verdict_is(1, T0, "filtered \xe2\x80\x94 already attempted");
    verdict_is(2, T0, "filtered \xe2\x80\x94 request exceeds account limit");
    verdict_is(3, T0, "chosen");

    setup();
    conf[0].enabled = 0;
    st[1].disabled = 1;
    strcpy(st[1].disabled_reason, "invalid_auth");
    st[2].cooling_until_ms = T0 + 26600;
    decide(&in, &d);

    verdict_is(0, T0, "filtered \xe2\x80\x94 disabled");
    verdict_is(1, T0, "filtered \xe2\x80\x94 invalid_auth");
    verdict_is(2, T0, "filtered \xe2\x80\x94 cooling, 27s remaining");
    TB_CHECK_INT(out[2].available_at, T0 + 26600);
    verdict_is(3, T0, "chosen");

    setup();
    {
        static char  *opus[] = { "claude-opus-*" };
        conf[0].models.items = opus;
    }
    tb_account_reject(&st[1], in.model_hash, "claude-sonnet-4-6", 17);
    st[2].inflight = 16;
    conf[3].spend_cap_usd = 0.5;
    in.spend_bucket_ms = 3600000;
    tb_ledger_charge(&st[3].spend, T0 - 7200000, in.spend_bucket_ms,
                     400000000, 1);
    st[3].spend.reserved = 150000000;
    decide(&in, &d);

    verdict_is(0, T0, "filtered \xe2\x80\x94 model not in account allowlist");
    verdict_is(1, T0, "filtered \xe2\x80\x94 model rejected by upstream");
    verdict_is(2, T0, "filtered \xe2\x80\x94 at max concurrency (16)");
    verdict_is(3, T0, "filtered \xe2\x80\x94 spend cap reached "
               "($0.55 of $0.50), room again in 22h 19m");

    /* a cap of $0: nothing frees it */
    conf[3].spend_cap_usd = 0;
    decide(&in, &d);
    verdict_is(3, T0, "filtered \xe2\x80\x94 spend cap of $0");
    conf[3].spend_cap_usd = 0.5;
    decide(&in, &d);
    TB_CHECK_INT(d.chosen, -1);

    setup();
    st[0].breaker.open = 1;
    st[0].breaker.opened_ms = T0;
    observe(&st[1], TB_WIN_INPUT, 100000, 10, T0 + 60000, T0);
    st[1].mirror.w[TB_WIN_INPUT].refill = TB_REFILL_BUCKET;
    cand[2].supported = 0;
    decide(&in, &d);

    verdict_is(0, T0, "filtered \xe2\x80\x94 circuit open, 30s remaining");
    TB_CHECK_INT(out[0].available_at, T0 + 30000);
    verdict_is(1, T0, "filtered \xe2\x80\x94 insufficient headroom");
    TB_CHECK(out[1].available_at > T0);
    verdict_is(2, T0,
               "filtered \xe2\x80\x94 account type not supported by this build");
    verdict_is(3, T0, "chosen");

    /* removed by an operator: before every other filter, even a request
     * its limits could never take */
    setup();
    observe(&st[3], TB_WIN_INPUT, 10, 10, T0 + 60000, T0);
    cand[3].removed = 1;
    cand[3].supported = 0;
    decide(&in, &d);

    verdict_is(3, T0, "filtered \xe2\x80\x94 removed by an operator");
    TB_CHECK(d.chosen != 3);
}


TB_TEST(filters_apply_in_order)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();
    in = input("sticky_headroom", -1, 7);

    /* every reason at once: the first in the order is the verdict */
    cand[0].tried = 1;
    cand[0].in_pool = 0;
    st[0].cooling_until_ms = T0 + 1000;
    decide(&in, &d);
    TB_CHECK_INT(out[0].verdict, TB_V_POOL);

    st[1].disabled = 1;
    st[1].cooling_until_ms = T0 + 1000;
    decide(&in, &d);
    TB_CHECK_INT(out[1].verdict, TB_V_DISABLED);
}


TB_TEST(deterministic_under_replay)
{
    int            i, first, spread[NACCTS];
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    in = input("sticky_headroom", -1, 12345);
    first = decide(&in, &d);

    for (i = 0; i < 50; i++) {
        TB_CHECK_INT(decide(&in, &d), first);
    }

    /* with equal accounts, different sessions spread over them */

    memset(spread, 0, sizeof(spread));

    for (i = 1; i <= 400; i++) {
        in.session = tb_hash64(i, "s", 1);
        spread[decide(&in, &d)]++;
    }

    for (i = 0; i < NACCTS; i++) {
        TB_CHECK(spread[i] > 50);
    }
}


TB_TEST(headroom_wins_without_an_owner)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    observe(&st[0], TB_WIN_INPUT, 100000, 20000, T0 + 60000, T0);
    observe(&st[1], TB_WIN_INPUT, 100000, 90000, T0 + 60000, T0);
    observe(&st[2], TB_WIN_INPUT, 100000, 50000, T0 + 60000, T0);
    observe(&st[3], TB_WIN_INPUT, 100000, 60000, T0 + 60000, T0);

    in = input("sticky_headroom", -1, 99);
    TB_CHECK_INT(decide(&in, &d), 1);
    TB_CHECK_INT(d.affinity, TB_AFF_NONE);

    /* identical to the default when there is no owner */
    in = input("headroom", -1, 99);
    TB_CHECK_INT(decide(&in, &d), 1);
}


TB_TEST(affinity_beats_a_headroom_gap)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    observe(&st[0], TB_WIN_INPUT, 100000, 30000, T0 + 60000, T0);
    observe(&st[1], TB_WIN_INPUT, 100000, 99000, T0 + 60000, T0);
    observe(&st[2], TB_WIN_INPUT, 100000, 50000, T0 + 60000, T0);
    observe(&st[3], TB_WIN_INPUT, 100000, 50000, T0 + 60000, T0);

    in = input("sticky_headroom", 0, 99);
    TB_CHECK_INT(decide(&in, &d), 0);
    TB_CHECK_INT(d.affinity, TB_AFF_HONORED);
    TB_CHECK_DBL(out[0].terms[TB_T_AFFINITY], 0.40, 1e-12);
    TB_CHECK_DBL(out[1].terms[TB_T_AFFINITY], 0.0, 1e-12);

    /* the cache-blind strategy ignores the owner: counted as a break */
    in = input("headroom", 0, 99);
    TB_CHECK_INT(decide(&in, &d), 1);
    TB_CHECK_INT(d.affinity, TB_AFF_BROKEN);

    /* an owner that cannot serve is a forced break */
    st[0].cooling_until_ms = T0 + 5000;
    in = input("sticky_headroom", 0, 99);
    TB_CHECK_INT(decide(&in, &d), 1);
    TB_CHECK_INT(d.affinity, TB_AFF_FORCED);
}


TB_TEST(round_robin_rotates)
{
    int            i;
    size_t         t;
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    /* signals that every other strategy would follow */
    observe(&st[2], TB_WIN_INPUT, 100000, 100000, T0 + 60000, T0);
    conf[3].priority = 10;

    in = input("round_robin", 1, 5);

    for (i = 0; i < 8; i++) {
        in.cursor = (uint64_t) i;
        TB_CHECK_INT(decide(&in, &d), i % NACCTS);
    }

    /* a filtered account is skipped to the next one */
    st[1].cooling_until_ms = T0 + 1000;
    in.cursor = 1;
    TB_CHECK_INT(decide(&in, &d), 2);

    /* it names one term: the others are 0, not what out[] held before
     * (the inspector keeps them, and the store writes them) */
    for (i = 0; i < NACCTS; i++) {
        for (t = 1; t < TB_TERMS; t++) {
            out[i].terms[t] = 1e9;
        }
    }

    in.cursor = 2;
    TB_CHECK_INT(decide(&in, &d), 2);

    for (t = 1; t < TB_TERMS; t++) {
        TB_CHECK(out[2].terms[t] == 0);
    }
}


static void
only_third(void *data, const tb_route_in_t *in, const tb_cand_t *c,
    const tb_cand_out_t *o, size_t index, size_t count, double *terms)
{
    terms[0] = (index == 2) ? 1.0 : 0;
}


TB_TEST(plugin_terms_it_does_not_name_count_zero)
{
    size_t         i, t;
    tb_decision_t  d;
    tb_route_in_t  in;
    tb_strategy_t  s;

    setup();

    memset(&s, 0, sizeof(s));
    s.name = "only_third";
    s.terms = only_third;
    s.term_names[0] = "third";

    in = input("sticky_headroom", -1, 5);
    in.strategy = &s;

    /* what a previous decision left in out[]: not the plugin's terms */
    for (i = 0; i < NACCTS; i++) {
        for (t = 0; t < TB_TERMS; t++) {
            out[i].terms[t] = (i == 0) ? 1e9 : 0;
        }
    }

    TB_CHECK_INT(decide(&in, &d), 2);
    TB_CHECK(out[0].terms[TB_TERMS - 1] == 0);
}


TB_TEST(priority_fails_over_in_order)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    conf[0].priority = 0;
    conf[1].priority = 3;       /* primary */
    conf[2].priority = 2;       /* backup */
    conf[3].priority = 1;

    /* even a well-rested secondary does not outbid the primary */
    observe(&st[1], TB_WIN_INPUT, 100000, 30000, T0 + 60000, T0);

    in = input("priority", -1, 1);
    TB_CHECK_INT(decide(&in, &d), 1);

    st[1].cooling_until_ms = T0 + 1000;
    TB_CHECK_INT(decide(&in, &d), 2);

    cand[2].tried = 1;
    TB_CHECK_INT(decide(&in, &d), 3);
}


TB_TEST(cost_tiered_drains_the_cheap_tier_first)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    conf[0].cost_tier = 2.0;
    conf[1].cost_tier = 1.0;
    conf[2].cost_tier = 3.0;
    conf[3].cost_tier = 1.5;

    in = input("cost_tiered", -1, 1);
    TB_CHECK_INT(decide(&in, &d), 1);
    TB_CHECK_DBL(out[1].terms[TB_T_COST], 0.0, 1e-12);
    TB_CHECK_DBL(out[2].terms[TB_T_COST], -0.8, 1e-12);

    /* out of capacity: spill upward, to the next tier */
    st[1].inflight = 16;
    TB_CHECK_INT(decide(&in, &d), 3);
}


TB_TEST(least_loaded_and_error_rate)
{
    int            i;
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    st[0].inflight = 8;
    st[1].inflight = 2;
    st[2].inflight = 12;
    st[3].inflight = 4;

    in = input("least_loaded", -1, 1);
    TB_CHECK_INT(decide(&in, &d), 1);
    TB_CHECK_DBL(out[1].terms[TB_T_LOAD], -0.15 * 8 * 2 / 16, 1e-12);

    /* recent failures cost score */
    setup();

    for (i = 0; i < 10; i++) {
        tb_account_outcome(&st[0], 1);
        tb_account_outcome(&st[1], 0);
    }

    TB_CHECK_DBL(tb_account_error_rate(&st[0]), 1.0, 1e-12);
    TB_CHECK_DBL(tb_account_error_rate(&st[1]), 0.0, 1e-12);

    cand[2].tried = 1;
    cand[3].tried = 1;
    in = input("sticky_headroom", -1, 1);
    TB_CHECK_INT(decide(&in, &d), 1);
    TB_CHECK_DBL(out[0].terms[TB_T_ERRORS], -0.20, 1e-12);

    for (i = 0; i < 60; i++) {
        tb_account_outcome(&st[0], i % 2);
    }

    TB_CHECK_DBL(tb_account_error_rate(&st[0]), 0.5, 1e-12);

    /* only the last 50 count: 50 successes wash 50 failures out */
    for (i = 0; i < 50; i++) {
        tb_account_outcome(&st[1], 1);
    }

    for (i = 0; i < 49; i++) {
        tb_account_outcome(&st[1], 0);
    }

    TB_CHECK_DBL(tb_account_error_rate(&st[1]), 1.0 / 50, 1e-12);
    tb_account_outcome(&st[1], 0);
    TB_CHECK_DBL(tb_account_error_rate(&st[1]), 0.0, 1e-12);
}


TB_TEST(servable_and_soonest)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();
    in = input("sticky_headroom", -1, 1);

    st[0].cooling_until_ms = T0 + 9000;
    st[1].cooling_until_ms = T0 + 4000;
    st[2].inflight = 16;
    cand[3].in_pool = 0;
    decide(&in, &d);

    TB_CHECK_INT(d.chosen, -1);
    TB_CHECK(d.servable);
    TB_CHECK_INT(d.soonest, T0 + 4000);

    /* nothing could ever serve: fail fast */
    setup();
    conf[0].enabled = 0;
    cand[1].in_pool = 0;
    {
        static char  *opus[] = { "claude-opus-*" };
        conf[2].models.items = opus;
    }
    observe(&st[3], TB_WIN_INPUT, 10, 10, T0, T0);
    decide(&in, &d);

    TB_CHECK_INT(d.chosen, -1);
    TB_CHECK(!d.servable);
    TB_CHECK_INT(d.soonest, 0);
}


/*
 * Gateways sharing the pool: an account whose window has room but whose
 * slice this gateway has spent is not eligible - its lease would be
 * refused - but saturated, with when its slice comes back (a fixed
 * window's reset, a rolling one's refill), so that a waiter is woken then
 * whatever else happens: with Redis away nothing else does.
 */
TB_TEST(a_spent_slice_waits_for_its_refill)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();
    in = input("sticky_headroom", -1, 1);
    cand[1].in_pool = 0;
    cand[2].in_pool = 0;
    cand[3].in_pool = 0;

    /* 20 a window until T0 + 4 s, half of it here, spent */
    tb_account_share(&st[0], 1);
    tb_slice_reshare(&st[0], TB_SHARE_ONE / 2, T0);
    observe(&st[0], TB_WIN_REQUESTS, 20, 20, T0 + 4000, T0);
    st[0].mirror.w[TB_WIN_REQUESTS].refill = TB_REFILL_FIXED;
    tb_slice_spend(&st[0], TB_WIN_REQUESTS, 10, T0);
    TB_CHECK_INT(tb_slice_left(&st[0], TB_WIN_REQUESTS, T0), 0);

    decide(&in, &d);
    TB_CHECK_INT(d.chosen, -1);
    TB_CHECK(d.servable);
    TB_CHECK_INT(out[0].verdict, TB_V_HEADROOM);
    TB_CHECK_INT(out[0].available_at, T0 + 4000);
    TB_CHECK_INT(d.soonest, T0 + 4000);

    in.now = T0 + 4000;
    TB_CHECK_INT(decide(&in, &d), 0);
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &in.need, T0 + 4000,
                              &probed));

    /* a rolling window: 10 of 20 left, full in 2 s - 5 a second, 2.5
     * here - and the slice spent: one more in 400 ms */
    setup();
    in = input("sticky_headroom", -1, 1);
    cand[1].in_pool = 0;
    cand[2].in_pool = 0;
    cand[3].in_pool = 0;

    tb_account_share(&st[0], 1);
    tb_slice_reshare(&st[0], TB_SHARE_ONE / 2, T0);
    observe(&st[0], TB_WIN_REQUESTS, 20, 10, T0 + 2000, T0);
    st[0].mirror.w[TB_WIN_REQUESTS].refill = TB_REFILL_BUCKET;
    tb_slice_spend(&st[0], TB_WIN_REQUESTS, 5, T0);
    TB_CHECK_INT(tb_slice_left(&st[0], TB_WIN_REQUESTS, T0), 0);

    decide(&in, &d);
    TB_CHECK_INT(out[0].verdict, TB_V_HEADROOM);
    TB_CHECK_INT(out[0].available_at, T0 + 400);

    in.now = T0 + 400;
    TB_CHECK_INT(decide(&in, &d), 0);
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &in.need, T0 + 400,
                              &probed));

    /* alone, the same window serves at once */
    setup();
    in = input("sticky_headroom", -1, 1);
    observe(&st[0], TB_WIN_REQUESTS, 20, 10, T0 + 2000, T0);
    cand[1].in_pool = 0;
    cand[2].in_pool = 0;
    cand[3].in_pool = 0;
    TB_CHECK_INT(decide(&in, &d), 0);
}


TB_TEST(leases_are_all_or_nothing)
{
    int        i;
    tb_need_t  need;

    setup();

    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;
    need.n[TB_WIN_INPUT] = 400;
    need.n[TB_WIN_OUTPUT] = 100;

    observe(&st[0], TB_WIN_REQUESTS, 50, 50, T0 + 60000, T0);
    observe(&st[0], TB_WIN_INPUT, 1000, 1000, T0 + 60000, T0);
    observe(&st[0], TB_WIN_OUTPUT, 1000, 1000, T0 + 60000, T0);

    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));

    /* the input window has 200 left: no part of a third is taken */
    TB_CHECK(!tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));
    TB_CHECK_INT(st[0].reserved[TB_WIN_REQUESTS], 2);
    TB_CHECK_INT(st[0].reserved[TB_WIN_INPUT], 800);
    TB_CHECK_INT(st[0].reserved[TB_WIN_OUTPUT], 200);
    TB_CHECK_INT(st[0].inflight, 2);
    TB_CHECK_INT(st[0].leases, 2);
    TB_CHECK_INT(st[0].peak_reserved[TB_WIN_INPUT], 800);
    TB_CHECK_INT(st[0].peak_available[TB_WIN_INPUT], 1000);

    tb_lease_release(&st[0], &need, NULL, 0, 0, 0, 0);
    tb_lease_release(&st[0], &need, NULL, 0, 0, 0, 0);

    for (i = 0; i < TB_NWINDOWS; i++) {
        TB_CHECK_INT(st[0].reserved[i], 0);
    }

    TB_CHECK_INT(st[0].inflight, 0);
    TB_CHECK_INT(st[0].leases, 0);

    /* concurrency is part of the lease */
    conf[0].max_concurrency = 1;
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));
    TB_CHECK(!tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));
    tb_lease_release(&st[0], &need, NULL, 0, 0, 0, 0);
}


TB_TEST(unseen_limits_admit_one_probe_at_a_time)
{
    tb_need_t      need;
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;

    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));
    TB_CHECK(!tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));

    in = input("sticky_headroom", 0, 1);
    decide(&in, &d);
    TB_CHECK_INT(out[0].verdict, TB_V_HEADROOM);
    TB_CHECK_INT(d.affinity, TB_AFF_FORCED);

    /* a first response slower than TB_PROBE_MS holds nobody back */
    TB_CHECK(!tb_lease_reserve(&st[0], &conf[0], &bc, &need,
                               T0 + TB_PROBE_MS - 1, &probed));
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0 + TB_PROBE_MS, &probed));

    /* the first response's headers end the probe */
    st[0].mirror.observed_ms = T0;
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));

    /* an account that never reports limits is not held to it */
    conf[1].observable_limits = 0;
    TB_CHECK(tb_lease_reserve(&st[1], &conf[1], &bc, &need, T0, &probed));
    TB_CHECK(tb_lease_reserve(&st[1], &conf[1], &bc, &need, T0, &probed));
}


TB_TEST(concurrency_only_leases_skip_the_probe)
{
    tb_need_t      tokens, slot;
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    memset(&tokens, 0, sizeof(tokens));
    tokens.n[TB_WIN_REQUESTS] = 1;
    memset(&slot, 0, sizeof(slot));

    /* count_tokens and models on an unobserved account: no probe held */
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &slot, T0, &probed));
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &slot, T0, &probed));
    TB_CHECK_INT(st[0].leases, 0);
    TB_CHECK_INT(st[0].inflight, 2);

    /* ... so a Messages request may still be the probe */
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &tokens, T0, &probed));
    TB_CHECK(!tb_lease_reserve(&st[0], &conf[0], &bc, &tokens, T0, &probed));

    /* and the probe out does not hold a concurrency-only need back */
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &slot, T0, &probed));

    in = input("round_robin", 0, 1);
    in.need = slot;
    decide(&in, &d);
    TB_CHECK(out[0].verdict == TB_V_ELIGIBLE || out[0].verdict == TB_V_CHOSEN);

    tb_lease_release(&st[0], &slot, NULL, 0, 0, 0, 0);
    TB_CHECK_INT(st[0].leases, 1);
    TB_CHECK_INT(st[0].inflight, 3);
}


TB_TEST(release_reconciles_output_once_headers_are_old)
{
    tb_need_t   need;
    tb_usage_t  u;

    setup();

    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_OUTPUT] = 500;

    observe(&st[0], TB_WIN_OUTPUT, 10000, 9000, T0 + 60000, T0);
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));

    tb_usage_init(&u);
    u.output_tokens = 1200;

    /* the headers observed were this response's: its output is not in */
    tb_lease_release(&st[0], &need, answer(&u, T0), 0, 0, 0, 0);
    TB_CHECK_INT(st[0].mirror.w[TB_WIN_OUTPUT].remaining, 7800);

    /* a newer observation already knows better */
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));
    st[0].mirror.w[TB_WIN_OUTPUT].observed_ms = T0 + 10;
    tb_lease_release(&st[0], &need, answer(&u, T0), 0, 0, 0, 0);
    TB_CHECK_INT(st[0].mirror.w[TB_WIN_OUTPUT].remaining, 7800);
}


TB_TEST(peak_reservation_never_exceeds_the_mirror)
{
    int        i, ok;
    tb_need_t  need;

    setup();

    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;
    need.n[TB_WIN_INPUT] = 300;

    observe(&st[0], TB_WIN_INPUT, 10000, 2000, T0 + 60000, T0);

    for (ok = 0, i = 0; i < 100; i++) {
        ok += tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed);
    }

    TB_CHECK_INT(ok, 6);
    TB_CHECK(st[0].peak_reserved[TB_WIN_INPUT]
             <= st[0].peak_available[TB_WIN_INPUT]);
}


static tb_config_t *
est_config(void)
{
    static tb_config_t  *ecf;

    if (ecf == NULL) {
        ecf = tb_config_defaults();
    }

    return ecf;
}


static tb_est_t *
new_est(void)
{
    tb_est_t  *e;

    e = malloc(tb_est_size(200));
    tb_est_init(e, "claude-x", 8, 1, 200, 0.95);

    return e;
}


/* the input estimate learns the model's tokens per byte from its answers */
/* the owner is judged on what it will count: the prompt less its cache */
TB_TEST(owner_needs_only_the_uncached_part)
{
    tb_decision_t  d;
    tb_route_in_t  in;

    setup();

    /* every account has 500 input tokens left; the prompt is 1,000 */
    observe(&st[0], TB_WIN_INPUT, 100000, 500, T0 + 60000, T0);
    observe(&st[1], TB_WIN_INPUT, 100000, 500, T0 + 60000, T0);
    observe(&st[2], TB_WIN_INPUT, 100000, 500, T0 + 60000, T0);
    observe(&st[3], TB_WIN_INPUT, 100000, 500, T0 + 60000, T0);

    in = input("sticky_headroom", 2, 42);
    TB_CHECK_INT(decide(&in, &d), -1);
    TB_CHECK_INT(out[2].verdict, TB_V_HEADROOM);

    /* its cache holds 900 of them: the owner fits, and only the owner */
    in.owner_need = in.need;
    in.owner_need.n[TB_WIN_INPUT] = 100;
    in.owner_discount = 1;
    TB_CHECK_INT(decide(&in, &d), 2);
    TB_CHECK_INT(d.affinity, TB_AFF_HONORED);
    TB_CHECK_INT(out[0].verdict, TB_V_HEADROOM);
}


TB_TEST(input_estimate_calibrated)
{
    int        i, cal;
    int64_t    est;
    tb_est_t  *e;

    e = new_est();

    /* uncalibrated: 3.5 bytes a token, times the margin */
    est = tb_est_input(e, 7000, 0, 1.15, &cal);
    TB_CHECK_INT(cal, 0);
    TB_CHECK_INT(est, 2300);
    TB_CHECK_INT(tb_est_input(NULL, 7000, 100, 1.0, &cal), 2100);

    /* a tokenizer of 4 bytes a token: 250 per 1,000 bytes */
    for (i = 0; i < TB_EST_INPUT_MIN - 1; i++) {
        tb_est_observe_input(e, 4000, 1000);
    }

    (void) tb_est_input(e, 7000, 0, 1.15, &cal);
    TB_CHECK_INT(cal, 0);

    tb_est_observe_input(e, 4000, 1000);
    est = tb_est_input(e, 7000, 0, 1.15, &cal);
    TB_CHECK_INT(cal, 1);
    TB_CHECK_INT(est, 1750);                /* no margin on top */
    TB_CHECK_INT(tb_est_input(e, 7000, 300, 1.15, &cal), 2050);

    /* the p95 of what came: a few denser prompts lift it */
    for (i = 0; i < 56; i++) {
        tb_est_observe_input(e, 4000, 1000);
    }
    for (i = 0; i < 8; i++) {
        tb_est_observe_input(e, 4000, 1200);
    }
    TB_CHECK_INT(tb_est_input_ratio(e), 300000);

    /* the ring rolls: 64 samples of 200 per 1,000 bytes replace them */
    for (i = 0; i < TB_EST_INPUT_SAMPLES; i++) {
        tb_est_observe_input(e, 5000, 1000);
    }
    TB_CHECK_INT(tb_est_input_ratio(e), 200000);

    /* not samples: tiny bodies, nothing counted */
    tb_est_observe_input(e, 10, 5000);
    tb_est_observe_input(e, 5000, 0);
    TB_CHECK_INT(e->in_n, TB_EST_INPUT_SAMPLES);
    TB_CHECK_INT(tb_est_input_ratio(e), 200000);

    free(e);
}


TB_TEST(estimator_needs_twenty_samples)
{
    int        i;
    tb_est_t  *e;

    e = new_est();

    for (i = 0; i < 19; i++) {
        tb_est_observe(e, 8000, 300);
    }

    TB_CHECK(!tb_est_predicting(e, est_config()));
    TB_CHECK_INT(tb_est_lease(e, est_config(), 8000), 8000);

    tb_est_observe(e, 8000, 300);
    TB_CHECK(tb_est_predicting(e, est_config()));
    TB_CHECK_INT(tb_est_lease(e, est_config(), 8000), 300);

    free(e);
}


TB_TEST(estimator_nearest_rank_p95)
{
    int        i;
    tb_est_t  *e;

    e = new_est();

    for (i = 0; i < 95; i++) {
        tb_est_observe(e, 100000, 100);
    }

    for (i = 0; i < 5; i++) {
        tb_est_observe(e, 100000, 9000);
    }

    TB_CHECK_INT(e->quantile, 100);
    TB_CHECK_INT(e->median, 100);
    TB_CHECK_INT(e->max, 9000);

    /* the floor, and never above the caller's ceiling */
    TB_CHECK_INT(tb_est_lease(e, est_config(), 100000), 256);
    TB_CHECK_INT(tb_est_lease(e, est_config(), 200), 200);

    free(e);
}


TB_TEST(estimator_window_rolls)
{
    int        i;
    tb_est_t  *e;

    e = new_est();

    for (i = 0; i < 200; i++) {
        tb_est_observe(e, 100000, 5000);
    }

    TB_CHECK_INT(e->quantile, 5000);

    /* 200 newer, smaller outputs push every old one out */
    for (i = 0; i < 200; i++) {
        tb_est_observe(e, 100000, 400 + i % 10);
    }

    TB_CHECK_INT(e->n, 200);
    TB_CHECK_INT(e->max, 409);
    TB_CHECK_INT(e->quantile, 409);

    /* zero and negative outputs (errors) are not samples */
    tb_est_observe(e, 100, 0);
    tb_est_observe(e, 100, -1);
    TB_CHECK_INT(e->n, 200);

    free(e);
}


TB_TEST(estimator_backs_off_when_beaten)
{
    int           i;
    tb_est_t     *e;
    tb_config_t  *ecf;

    ecf = est_config();
    e = new_est();

    for (i = 0; i < 40; i++) {
        tb_est_observe(e, 1000, 500);
    }

    TB_CHECK(tb_est_predicting(e, ecf));

    /* a new shape: most outputs beat the lease */
    for (i = 0; i < 20; i++) {
        tb_est_observe(e, 500, 3000);
    }

    TB_CHECK(tb_est_undershoot_rate(e, 20) > 0.20);
    TB_CHECK(!tb_est_predicting(e, ecf));
    TB_CHECK_INT(tb_est_lease(e, ecf, 4096), 4096);

    /* max_tokens mode never predicts */
    setup();
    free(e);
    e = new_est();

    for (i = 0; i < 40; i++) {
        tb_est_observe(e, 1000, 500);
    }

    ecf->output_estimate_adaptive = 0;
    TB_CHECK_INT(tb_est_lease(e, ecf, 4096), 4096);
    ecf->output_estimate_adaptive = 1;

    TB_CHECK_INT(tb_est_lease(NULL, ecf, 4096), 4096);

    free(e);
}


static uint64_t
session_of(const char *body, const char *hdr, const char *scope)
{
    char                  err[128];
    tb_body_t             b;
    tb_session_source_e   src;

    if (tb_scan_body((const unsigned char *) body, strlen(body), &b, err,
                     sizeof(err))
        != 0)
    {
        printf("# %s\n", err);
        return 0;
    }

    return tb_session_key((const unsigned char *) body, strlen(body), &b,
                          hdr, hdr ? strlen(hdr) : 0, scope, strlen(scope),
                          &src);
}


TB_TEST(fingerprint_is_stable_from_the_first_turn)
{
    uint64_t  t1, t2, t3;

    t1 = session_of(
        "{\"model\":\"m\",\"max_tokens\":10,"
        "\"system\":[{\"type\":\"text\",\"text\":\"You are helpful.\","
        "\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"tools\":[{\"name\":\"bash\",\"input_schema\":{}},"
        "{\"name\":\"edit\",\"input_schema\":{}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"fix the bug\",\"cache_control\":{\"type\":\"ephemeral\"}"
        "}]}]}", NULL, "tenant");

    /* turn 2: the markers moved, the conversation grew */
    t2 = session_of(
        "{\"model\":\"m\",\"max_tokens\":10,\"stream\":true,"
        "\"system\":[{\"type\":\"text\",\"text\":\"You are helpful.\"}],"
        "\"tools\":[{\"name\":\"edit\",\"input_schema\":{}},"
        "{\"name\":\"bash\",\"input_schema\":{},"
        "\"cache_control\":{\"type\":\"ephemeral\"}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"fix the bug\"}]},{\"role\":\"assistant\",\"content\":"
        "\"looking\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"go on\",\"cache_control\":{\"type\":\"ephemeral\"}}]}]}",
        NULL, "tenant");

    TB_CHECK(t1 != 0);
    TB_CHECK(t1 == t2);

    /* another system prompt, model, tool set or first message: another */
    t3 = session_of(
        "{\"model\":\"m\",\"system\":\"You are terse.\",\"messages\":"
        "[{\"role\":\"user\",\"content\":\"fix the bug\"}]}", NULL, "tenant");
    TB_CHECK(t3 != t1);

    TB_CHECK(session_of("{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                        "\"content\":\"a\"}]}", NULL, "tenant")
             != session_of("{\"model\":\"n\",\"messages\":[{\"role\":"
                           "\"user\",\"content\":\"a\"}]}", NULL, "tenant"));

    TB_CHECK(session_of("{\"model\":\"m\",\"tools\":[{\"name\":\"a\"}],"
                        "\"messages\":[]}", NULL, "t")
             != session_of("{\"model\":\"m\",\"tools\":[{\"name\":\"b\"}],"
                           "\"messages\":[]}", NULL, "t"));

    TB_CHECK(session_of("{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                        "\"content\":\"a\"}]}", NULL, "t")
             != session_of("{\"model\":\"m\",\"messages\":[{\"role\":"
                           "\"user\",\"content\":\"b\"}]}", NULL, "t"));
}


TB_TEST(session_scoped_by_key_and_header_wins)
{
    const char  *body;

    body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
           "\"content\":\"hello\"}]}";

    TB_CHECK(session_of(body, NULL, "tenant-a")
             != session_of(body, NULL, "tenant-b"));

    TB_CHECK(session_of(body, "conv-1", "t") == session_of(
             "{\"model\":\"other\",\"messages\":[]}", "conv-1", "t"));
    TB_CHECK(session_of(body, "conv-1", "t") != session_of(body, "conv-2",
                                                           "t"));
    TB_CHECK(session_of(body, "conv-1", "t") != session_of(body, "conv-1",
                                                           "u"));
    TB_CHECK(session_of(body, "conv-1", "t") != session_of(body, NULL, "t"));
}


TB_TEST(input_estimate)
{
    char         err[64], *big;
    size_t       n, pre;
    int64_t      est;
    tb_body_t    b;
    const char  *body;

    body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
           "\"content\":\"hello there\"}]}";
    tb_scan_body((const unsigned char *) body, strlen(body), &b, err,
                 sizeof(err));
    est = tb_estimate_input((const unsigned char *) body, strlen(body), &b);
    TB_CHECK_INT(est, (int64_t) ((strlen(body) * 2 + 6) / 7));

    /* a 1 MB base64 image is one image, not 300,000 tokens */
    n = 1000000;
    big = malloc(n + 200);
    strcpy(big, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                "[{\"type\":\"image\",\"source\":{\"type\":\"base64\","
                "\"media_type\":\"image/png\",\"data\":\"");
    pre = strlen(big);
    memset(big + pre, 'A', n);
    strcpy(big + pre + n, "\"}},{\"type\":\"text\",\"text\":\"what?\"}]}]}");

    TB_CHECK_INT(tb_scan_body((const unsigned char *) big, strlen(big), &b,
                              err, sizeof(err)), 0);
    est = tb_estimate_input((const unsigned char *) big, strlen(big), &b);
    TB_CHECK(est >= TB_IMAGE_TOKENS && est < TB_IMAGE_TOKENS + 100);

    free(big);
}


int
main(void)
{
    TB_RUN(window_never_seen_reads_full);
    TB_RUN(window_refills_continuously_then_fully);
    TB_RUN(headroom_is_the_tightest_window_after_reservations);
    TB_RUN(unobservable_reads_assumed_headroom);
    TB_RUN(unobservable_learns_its_concurrency_from_429s);
    TB_RUN(fits_and_when);
    TB_RUN(exceeds_uses_the_callers_ceiling);
    TB_RUN(every_verdict_string);
    TB_RUN(filters_apply_in_order);
    TB_RUN(deterministic_under_replay);
    TB_RUN(headroom_wins_without_an_owner);
    TB_RUN(affinity_beats_a_headroom_gap);
    TB_RUN(round_robin_rotates);
    TB_RUN(plugin_terms_it_does_not_name_count_zero);
    TB_RUN(priority_fails_over_in_order);
    TB_RUN(cost_tiered_drains_the_cheap_tier_first);
    TB_RUN(least_loaded_and_error_rate);
    TB_RUN(servable_and_soonest);
    TB_RUN(a_spent_slice_waits_for_its_refill);
    TB_RUN(leases_are_all_or_nothing);
    TB_RUN(concurrency_only_leases_skip_the_probe);
    TB_RUN(unseen_limits_admit_one_probe_at_a_time);
    TB_RUN(release_reconciles_output_once_headers_are_old);
    TB_RUN(peak_reservation_never_exceeds_the_mirror);
    TB_RUN(owner_needs_only_the_uncached_part);
    TB_RUN(input_estimate_calibrated);
    TB_RUN(estimator_needs_twenty_samples);
    TB_RUN(estimator_nearest_rank_p95);
    TB_RUN(estimator_window_rolls);
    TB_RUN(estimator_backs_off_when_beaten);
    TB_RUN(fingerprint_is_stable_from_the_first_turn);
    TB_RUN(session_scoped_by_key_and_header_wins);
    TB_RUN(input_estimate);

    tb_config_free(cf);
    tb_config_free(est_config());

    return tb_test_done();
}
