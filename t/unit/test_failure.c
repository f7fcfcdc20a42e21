/*
 * Unit tests: the failure taxonomy (every row, the spend and model
 * variants, stream errors, bodies that are not JSON), cooldowns, the
 * backoff, the circuit breaker, account actions, and docs/failures.md
 * against the table the code uses.
 */

#include <stdlib.h>

#include "tb_test.h"
#include "tb_failure.h"
#include "tb_account.h"
#include "tb_router.h"
#include "tb_lease.h"
#include "tb_hash.h"


#define T0        1795984859000LL

#define B(s)      (const unsigned char *) (s), sizeof(s) - 1


static tb_config_t  *cf;


static tb_outcome_t
classify(int status, const unsigned char *body, size_t len, int64_t retry)
{
    tb_outcome_t   o;
    tb_response_t  r;

    memset(&r, 0, sizeof(r));
    r.status = status;
    r.body = body;
    r.body_len = len;
    r.retry_after_ms = retry;
    r.now = T0;

    tb_classify(&r, cf, &o);

    return o;
}


#define ERR(type, msg)                                                        \
    "{\"type\":\"error\",\"error\":{\"type\":\"" type "\",\"message\":\""     \
    msg "\"},\"request_id\":\"req_1\"}"


TB_TEST(every_status_class)
{
    tb_outcome_t  o;

    o = classify(200, NULL, 0, -1);
    TB_CHECK_INT(o.kind, TB_KIND_OK);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETURN);
    TB_CHECK_INT(o.rule->breaker, TB_OUT_SUCCESS);

    o = classify(429, B(ERR("rate_limit_error", "Number of requests has "
                            "exceeded your per-minute rate limit")), 7000);
    TB_CHECK_INT(o.kind, TB_KIND_RATE_LIMIT);
    TB_CHECK_INT(o.rule->account, TB_ACC_COOLDOWN);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_OTHER);
    TB_CHECK_INT(o.rule->breaker, TB_OUT_NEUTRAL);
    TB_CHECK_INT(o.until_ms, T0 + 7000);
    TB_CHECK_STR(o.error_type, "rate_limit_error");
    TB_CHECK_STR(o.reason, "rate limited (429), retry-after 7s");

    o = classify(402, B(ERR("billing_error", "pay up")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_BILLING);
    TB_CHECK_INT(o.rule->account, TB_ACC_EXHAUST);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_OTHER);
    TB_CHECK_INT(o.until_ms, T0 + 3600000);

    o = classify(529, B(ERR("overloaded_error", "Overloaded")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_OVERLOADED);
    TB_CHECK_INT(o.rule->account, TB_ACC_SHORT_COOLDOWN);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_ANY);
    TB_CHECK_INT(o.rule->breaker, TB_OUT_FAILURE);
    TB_CHECK_INT(o.until_ms, T0 + 5000);
    TB_CHECK_INT(o.rule->status, 529);
    TB_CHECK_STR(o.rule->error_type, "overloaded_error");

    o = classify(401, B(ERR("authentication_error", "invalid x-api-key")),
                 -1);
    TB_CHECK_INT(o.kind, TB_KIND_AUTH);
    TB_CHECK_INT(o.rule->account, TB_ACC_DISABLE);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_OTHER);
    TB_CHECK_STR(o.reason, "invalid_auth");

    o = classify(400, B(ERR("invalid_request_error", "messages: required")),
                 -1);
    TB_CHECK_INT(o.kind, TB_KIND_CLIENT);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETURN);
    TB_CHECK_INT(o.rule->account, TB_ACC_NONE);

    o = classify(404, B(ERR("not_found_error", "no such model")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_CLIENT);

    o = classify(413, B("Request Entity Too Large"), -1);
    TB_CHECK_INT(o.kind, TB_KIND_CLIENT);
    TB_CHECK_STR(o.error_type, "");

    o = classify(409, NULL, 0, -1);
    TB_CHECK_INT(o.kind, TB_KIND_CLIENT);

    o = classify(408, B(ERR("timeout_error", "slow")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_SERVER);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_ANY);
    TB_CHECK_INT(o.rule->breaker, TB_OUT_FAILURE);

    o = classify(500, B(ERR("api_error", "boom")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_SERVER);
    o = classify(502, NULL, 0, -1);
    TB_CHECK_INT(o.kind, TB_KIND_SERVER);
    o = classify(503, NULL, 0, -1);
    TB_CHECK_INT(o.kind, TB_KIND_SERVER);
    o = classify(504, B(ERR("timeout_error", "x")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_SERVER);
    o = classify(599, NULL, 0, -1);
    TB_CHECK_INT(o.kind, TB_KIND_SERVER);

    o = classify(302, NULL, 0, -1);
    TB_CHECK_INT(o.kind, TB_KIND_UNKNOWN);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETURN);
}


TB_TEST(spend_limits)
{
    tb_outcome_t  o;

    /* the documented spend-cap 429: a code and no retry-after */
    o = classify(429, B("{\"type\":\"error\",\"error\":{\"type\":"
                        "\"rate_limit_error\",\"message\":\"This request "
                        "would exceed your workspace's spend limit.\","
                        "\"details\":{\"error_code\":"
                        "\"enforced_spend_limit_reached\"}}}"), -1);
    TB_CHECK_INT(o.kind, TB_KIND_SPEND);
    TB_CHECK_INT(o.rule->account, TB_ACC_EXHAUST);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_OTHER);
    TB_CHECK_INT(o.until_ms, T0 + 3600000);
    TB_CHECK_STR(o.reason, "spend limit reached");

    /* the code wins even with a retry-after */
    o = classify(429, B("{\"type\":\"error\",\"error\":{\"type\":"
                        "\"rate_limit_error\",\"message\":\"x\","
                        "\"details\":{\"error_code\":"
                        "\"enforced_spend_limit_reached\"}}}"), 5000);
    TB_CHECK_INT(o.kind, TB_KIND_SPEND);

    /* a spend message without retry-after */
    o = classify(429, B(ERR("rate_limit_error", "You have reached your "
                            "specified API usage limits")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_SPEND);

    /* ...but with a retry-after it is an ordinary rate limit */
    o = classify(429, B(ERR("rate_limit_error", "You have reached your "
                            "specified API usage limits")), 3000);
    TB_CHECK_INT(o.kind, TB_KIND_RATE_LIMIT);

    /* a 400 with a spend message: exhausted, not returned */
    o = classify(400, B(ERR("invalid_request_error", "Your credit balance "
                            "is too low to access the Anthropic API.")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_SPEND);

    o = classify(400, B(ERR("invalid_request_error", "This request would "
                            "exceed your organization's Spend Limit")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_SPEND);

    /* a plain 429 without retry-after is a rate limit */
    o = classify(429, B(ERR("rate_limit_error", "slow down")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_RATE_LIMIT);
}


TB_TEST(forbidden)
{
    tb_outcome_t  o;

    o = classify(403, B(ERR("permission_error", "your API key does not "
                            "have permission to use the specified "
                            "resource")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_MODEL);
    TB_CHECK_INT(o.rule->account, TB_ACC_MODEL);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_OTHER);

    o = classify(403, B(ERR("forbidden", "model claude-x is not available "
                            "for this key")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_MODEL);

    o = classify(403, B(ERR("authentication_error", "key revoked")), -1);
    TB_CHECK_INT(o.kind, TB_KIND_AUTH);
    TB_CHECK_INT(o.rule->account, TB_ACC_DISABLE);

    o = classify(403, B("<html>Forbidden</html>"), -1);
    TB_CHECK_INT(o.kind, TB_KIND_AUTH);
}


TB_TEST(cooldowns)
{
    tb_outcome_t   o;
    tb_response_t  r;

    memset(&r, 0, sizeof(r));
    r.status = 429;
    r.retry_after_ms = -1;
    r.reset_ms = T0 + 12000;
    r.now = T0;

    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.until_ms, T0 + 12000);
    TB_CHECK_STR(o.reason, "rate limited (429), until the window resets");

    r.reset_ms = T0 - 1;
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.until_ms, T0 + 60000);

    /* a subscription's 429 naming no window: that request's, no rest */
    r.request_scoped = 1;
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_RATE_LIMIT);
    TB_CHECK_INT(o.until_ms, 0);
    TB_CHECK_STR(o.reason, "rate limited (429) naming no window: this "
                 "request's");
    r.request_scoped = 0;

    /* breaker.overloaded_cooldown_seconds is honoured */
    cf->breaker_overloaded_cooldown_seconds = 2.5;
    r.status = 529;
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.until_ms, T0 + 2500);
    cf->breaker_overloaded_cooldown_seconds = 5;

    cf->breaker_exhausted_cooldown_seconds = 120;
    r.status = 402;
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.until_ms, T0 + 120000);
    cf->breaker_exhausted_cooldown_seconds = 3600;
}


TB_TEST(transport_and_streams)
{
    tb_outcome_t   o;
    tb_response_t  r;

    memset(&r, 0, sizeof(r));
    r.retry_after_ms = -1;
    r.now = T0;

    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_TRANSPORT);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_ANY);
    TB_CHECK_INT(o.rule->breaker, TB_OUT_FAILURE);

    r.timed_out = 1;
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_TIMEOUT);
    TB_CHECK_STR(o.rule->error_type, "timeout_error");
    TB_CHECK_INT(o.rule->status, 504);

    r.timed_out = 0;
    r.stalled = 1;
    r.status = 200;
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_STALL);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_OTHER);

    r.stalled = 0;
    r.stream_error = "overloaded_error";
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_OVERLOADED);
    TB_CHECK_STR(o.reason, "overloaded (stream error)");
    TB_CHECK_STR(o.error_type, "overloaded_error");

    r.stream_error = "api_error";
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_SERVER);

    r.stream_error = "rate_limit_error";
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_RATE_LIMIT);

    r.stream_error = "invalid_request_error";
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_CLIENT);

    /* a type nobody knows yet: a stream failure, never a crash */
    r.stream_error = "quantum_flux_error";
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_STREAM);
    TB_CHECK_INT(o.rule->request, TB_REQ_RETRY_ANY);

    r.stream_error = "";
    tb_classify(&r, cf, &o);
    TB_CHECK_INT(o.kind, TB_KIND_STREAM);
}


TB_TEST(bodies_that_are_not_json)
{
    size_t         i;
    tb_outcome_t   o;
    unsigned char  junk[256];

    /* cut short, wrong types, binary: status decides */
    o = classify(429, B("{\"type\":\"error\",\"error\":{\"type\":\"rate_"),
                 -1);
    TB_CHECK_INT(o.kind, TB_KIND_RATE_LIMIT);

    o = classify(403, B("{\"error\":[1,2,3]}"), -1);
    TB_CHECK_INT(o.kind, TB_KIND_AUTH);

    o = classify(500, B("\xff\xfe\x00garbage"), -1);
    TB_CHECK_INT(o.kind, TB_KIND_SERVER);

    o = classify(403, B("{\"error\":{\"type\":\"permission_error\","
                        "\"message\":1}}"), -1);
    TB_CHECK_INT(o.kind, TB_KIND_MODEL);

    for (i = 0; i < sizeof(junk); i++) {
        junk[i] = (unsigned char) (i * 37 + 11);
    }

    for (i = 0; i < 700; i++) {
        o = classify((int) (i % 700), junk, i % sizeof(junk), -1);
        TB_CHECK(o.rule == &tb_rules[o.kind]);
    }
}


TB_TEST(backoff)
{
    int      i;
    int64_t  d;

    /* base .25, max 8: caps .25 .5 1 2 4 8 8 */
    TB_CHECK_INT(tb_backoff_ms(cf, 1, 0.999999), 249);
    TB_CHECK_INT(tb_backoff_ms(cf, 2, 0.5), 250);
    TB_CHECK_INT(tb_backoff_ms(cf, 3, 0.5), 500);
    TB_CHECK_INT(tb_backoff_ms(cf, 6, 0.5), 4000);
    TB_CHECK_INT(tb_backoff_ms(cf, 7, 0.5), 4000);
    TB_CHECK_INT(tb_backoff_ms(cf, 40, 0.5), 4000);
    TB_CHECK_INT(tb_backoff_ms(cf, 1, 0), 0);

    for (i = 0; i < 1000; i++) {
        d = tb_backoff_ms(cf, 3, (double) rand() / ((double) RAND_MAX + 1));
        TB_CHECK(d >= 0 && d < 1000);
    }
}


TB_TEST(breaker_cycle)
{
    int                i;
    tb_breaker_t       b;
    tb_breaker_conf_t  bc = { 5, 30000 };

    memset(&b, 0, sizeof(b));

    for (i = 0; i < 4; i++) {
        TB_CHECK_INT(tb_breaker_record(&b, &bc, TB_OUT_FAILURE, 0, T0), 0);
    }

    /* a neutral outcome does not reset the run, a success does */
    tb_breaker_record(&b, &bc, TB_OUT_NEUTRAL, 0, T0);
    TB_CHECK_INT(b.failures, 4);
    tb_breaker_record(&b, &bc, TB_OUT_SUCCESS, 0, T0);
    TB_CHECK_INT(b.failures, 0);

    for (i = 0; i < 4; i++) {
        tb_breaker_record(&b, &bc, TB_OUT_FAILURE, 0, T0);
    }

    TB_CHECK_INT(tb_breaker_state(&b, &bc, T0), TB_BREAKER_CLOSED);
    TB_CHECK_INT(tb_breaker_record(&b, &bc, TB_OUT_FAILURE, 0, T0 + 10), 1);
    TB_CHECK_INT(tb_breaker_state(&b, &bc, T0 + 10), TB_BREAKER_OPEN);
    TB_CHECK(!tb_breaker_allows(&b, &bc, T0 + 10));
    TB_CHECK_INT(tb_breaker_half_open_at(&b, &bc, T0 + 10), T0 + 30010);
    TB_CHECK_INT(b.opened_total, 1);

    /* late failures of attempts sent before it opened change nothing */
    TB_CHECK_INT(tb_breaker_record(&b, &bc, TB_OUT_FAILURE, 0, T0 + 20), 0);
    TB_CHECK_INT(b.opened_ms, T0 + 10);

    /* half-open: one probe, taken with the lease only */
    TB_CHECK_INT(tb_breaker_state(&b, &bc, T0 + 30010),
                 TB_BREAKER_HALF_OPEN);
    TB_CHECK(tb_breaker_allows(&b, &bc, T0 + 30010));
    TB_CHECK(tb_breaker_allows(&b, &bc, T0 + 30010));
    tb_breaker_take(&b, &bc, T0 + 30010);
    TB_CHECK(!tb_breaker_allows(&b, &bc, T0 + 30011));

    /* a neutral probe gives the slot back */
    tb_breaker_record(&b, &bc, TB_OUT_NEUTRAL, 1, T0 + 30020);
    TB_CHECK(tb_breaker_allows(&b, &bc, T0 + 30021));
    TB_CHECK_INT(tb_breaker_state(&b, &bc, T0 + 30021),
                 TB_BREAKER_HALF_OPEN);

    /* the probe fails: open again for a whole cooldown */
    tb_breaker_take(&b, &bc, T0 + 30030);
    TB_CHECK_INT(tb_breaker_record(&b, &bc, TB_OUT_FAILURE, 1, T0 + 31000),
                 1);
    TB_CHECK_INT(tb_breaker_state(&b, &bc, T0 + 31000), TB_BREAKER_OPEN);
    TB_CHECK_INT(tb_breaker_half_open_at(&b, &bc, T0 + 31000), T0 + 61000);
    TB_CHECK_INT(b.opened_total, 2);
    TB_CHECK_INT(b.probe, 0);

    /* a success that was not the probe does not close it */
    tb_breaker_record(&b, &bc, TB_OUT_SUCCESS, 0, T0 + 62000);
    TB_CHECK_INT(tb_breaker_state(&b, &bc, T0 + 62000),
                 TB_BREAKER_HALF_OPEN);

    /* the probe succeeds: closed */
    tb_breaker_take(&b, &bc, T0 + 62000);
    tb_breaker_record(&b, &bc, TB_OUT_SUCCESS, 1, T0 + 62500);
    TB_CHECK_INT(tb_breaker_state(&b, &bc, T0 + 62500), TB_BREAKER_CLOSED);
    TB_CHECK_INT(b.failures, 0);
    TB_CHECK(tb_breaker_allows(&b, &bc, T0 + 62500));
    TB_CHECK_STR(tb_breaker_state_name(TB_BREAKER_HALF_OPEN), "half_open");
}


TB_TEST(probe_taken_by_the_lease_only)
{
    int                 probed, i;
    char               *star[] = { "*" };
    tb_need_t           need;
    tb_cand_t           c[2];
    tb_cand_out_t       out[2];
    tb_route_in_t       in;
    tb_decision_t       d;
    tb_account_conf_t   conf[2];
    tb_account_state_t  st[2];
    unsigned char       fp[8] = { 0 };
    tb_breaker_conf_t   bc = { 5, 30000 };

    memset(conf, 0, sizeof(conf));
    memset(c, 0, sizeof(c));
    memset(&in, 0, sizeof(in));
    memset(&need, 0, sizeof(need));

    for (i = 0; i < 2; i++) {
        conf[i].id = i ? "b" : "a";
        conf[i].max_concurrency = 16;
        conf[i].spend_cap_usd = TB_UNSET;
        conf[i].enabled = 1;
        conf[i].observable_limits = 1;
        conf[i].cost_tier = 1;
        conf[i].models.items = star;
        conf[i].models.n = 1;
        tb_account_state_init(&st[i], conf[i].id, strlen(conf[i].id), fp);
        st[i].mirror.observed_ms = T0 - 1;
        c[i].conf = &conf[i];
        c[i].st = &st[i];
        c[i].supported = 1;
        c[i].in_pool = 1;
        c[i].id_hash = (uint64_t) i + 1;
    }

    need.n[TB_WIN_REQUESTS] = 1;

    in.strategy = tb_strategy_builtin("sticky_headroom");
    in.weights[TB_T_HEADROOM] = 1;
    in.weights[TB_T_PRIORITY] = 1;
    in.breaker = bc;
    in.need = need;
    in.owner = -1;

    /* a half-open on top: evaluating it many times takes nothing */
    st[0].breaker.open = 1;
    st[0].breaker.opened_ms = T0 - 40000;
    conf[0].priority = 1;

    for (i = 0; i < 10; i++) {
        in.now = T0 + i;
        tb_route(&in, c, 2, out, &d);
        TB_CHECK_INT(d.chosen, 0);
    }

    TB_CHECK_INT(st[0].breaker.probe, 0);

    /* the lease takes it: nobody else gets through until it ends */
    TB_CHECK(tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));
    TB_CHECK_INT(probed, 1);
    TB_CHECK_INT(st[0].breaker.probe, 1);
    TB_CHECK(!tb_lease_reserve(&st[0], &conf[0], &bc, &need, T0, &probed));

    tb_route(&in, c, 2, out, &d);
    TB_CHECK_INT(d.chosen, 1);
    TB_CHECK_INT(out[0].verdict, TB_V_CIRCUIT);
    TB_CHECK_INT(out[0].available_at, 0);

    /* an account at its closed breaker takes no probe */
    TB_CHECK(tb_lease_reserve(&st[1], &conf[1], &bc, &need, T0, &probed));
    TB_CHECK_INT(probed, 0);

    /* nothing but the open one: the request waits, by event */
    st[1].inflight = 16;
    tb_route(&in, c, 2, out, &d);
    TB_CHECK_INT(d.chosen, -1);
    TB_CHECK(d.servable);
    TB_CHECK(d.by_event);
}


TB_TEST(account_actions)
{
    int                 i;
    int64_t             until;
    uint64_t            mh;
    const char         *why;
    tb_outcome_t        o;
    tb_response_t       r;
    tb_account_state_t  a;
    unsigned char       fp[8] = { 0 };
    tb_breaker_conf_t   bc = { 3, 30000 };

    tb_account_state_init(&a, "a", sizeof("a") - 1, fp);
    memset(&r, 0, sizeof(r));
    r.now = T0;
    r.retry_after_ms = 9000;
    r.status = 429;

    tb_classify(&r, cf, &o);
    tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0, &until, &why),
                 TB_STATE_COOLING);
    TB_CHECK_INT(until, T0 + 9000);
    TB_CHECK_STR(why, "rate limited (429), retry-after 9s");
    TB_CHECK_INT(a.kinds[TB_KIND_RATE_LIMIT], 1);
    TB_CHECK_INT(a.noutcomes, 0);

    /* a shorter cooldown does not cut a longer one */
    r.status = 529;
    r.retry_after_ms = -1;
    tb_classify(&r, cf, &o);
    tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0);
    TB_CHECK_INT(a.cooling_until_ms, T0 + 9000);
    TB_CHECK_INT(a.noutcomes, 1);
    TB_CHECK_INT(a.nfailures, 1);

    r.status = 402;
    tb_classify(&r, cf, &o);
    tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0, &until, &why),
                 TB_STATE_EXHAUSTED);
    TB_CHECK_INT(until, T0 + 3600000);
    TB_CHECK_STR(why, "billing_error (402)");

    r.status = 403;
    r.body = (const unsigned char *) ERR("permission_error", "no");
    r.body_len = strlen((const char *) r.body);
    tb_classify(&r, cf, &o);
    mh = tb_hash64(0, "claude-opus-4-6", 15);
    tb_account_apply(&a, &o, &bc, mh, "claude-opus-4-6", 15, 0, T0);
    TB_CHECK(tb_account_rejects(&a, mh));
    TB_CHECK(!tb_account_rejects(&a, mh + 1));
    TB_CHECK_STR(a.rejected[0].name, "claude-opus-4-6");

    for (i = 0; i < TB_REJECTED_MAX + 3; i++) {
        tb_account_reject(&a, (uint64_t) i + 100, "m", 1);
    }

    TB_CHECK_INT(a.nrejected, TB_REJECTED_MAX);
    TB_CHECK(!tb_account_rejects(&a, mh));
    TB_CHECK(tb_account_rejects(&a, TB_REJECTED_MAX + 102));

    r.status = 401;
    r.body = NULL;
    r.body_len = 0;
    tb_classify(&r, cf, &o);
    tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0, &until, &why),
                 TB_STATE_DISABLED);
    TB_CHECK_STR(why, "invalid_auth");
    TB_CHECK_INT(until, 0);

    /* three server errors open the breaker: cooling, "circuit open" */
    tb_account_clear(&a);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0, &until, &why),
                 TB_STATE_READY);
    TB_CHECK_INT(a.nrejected, 0);

    r.status = 500;
    tb_classify(&r, cf, &o);

    for (i = 0; i < 2; i++) {
        TB_CHECK_INT(tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0), 0);
    }

    TB_CHECK_INT(tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0), 1);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0 + 1000, &until, &why),
                 TB_STATE_FAILING);
    TB_CHECK_STR(why, "circuit open after 3 failures in a row: upstream "
                 "error 500");
    TB_CHECK_INT(until, T0 + 30000);

    /* half-open: one probe may go, and it is still not ready */
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0 + 30000, &until, &why),
                 TB_STATE_FAILING);
    TB_CHECK_INT(until, 0);
    TB_CHECK_INT(a.failing_since_ms, T0);

    /* an answer from before it opened is no verdict */
    r.status = 200;
    tb_classify(&r, cf, &o);
    tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0 + 30001);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0 + 30001, &until, &why),
                 TB_STATE_FAILING);
    TB_CHECK_INT(a.last_success_ms, 0);

    /* the probe's success: ready, and when */
    tb_account_apply(&a, &o, &bc, 0, NULL, 0, 1, T0 + 30002);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0 + 30002, &until, &why),
                 TB_STATE_READY);
    TB_CHECK_INT(a.last_success_ms, T0 + 30002);
    TB_CHECK_INT(a.failing_since_ms, 0);

    /* one server error in a row: still ready (retried, not failing) */
    r.status = 503;
    tb_classify(&r, cf, &o);
    tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0 + 31000);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0 + 31000, &until, &why),
                 TB_STATE_READY);

    /* no answer at all since the last success: failing, before the
     * breaker opens */
    r.status = 0;
    tb_classify(&r, cf, &o);
    tb_account_apply(&a, &o, &bc, 0, NULL, 0, 0, T0 + 32000);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0 + 32000, &until, &why),
                 TB_STATE_FAILING);
    TB_CHECK_STR(why, "no answer: connect error, reset or TLS failure");
    TB_CHECK_INT(a.failing_since_ms, T0 + 31000);

    tb_account_clear(&a);
    TB_CHECK_INT(a.breaker.open, 0);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0 + 33000, &until, &why),
                 TB_STATE_READY);
}


/* docs/failures.md holds the table this code uses, row for row */

TB_TEST(docs_table)
{
    int     k, found;
    char    row[1024], line[2048];
    FILE   *f;
    size_t  n;

    f = fopen("docs/failures.md", "r");
    TB_CHECK(f != NULL);

    if (f == NULL) {
        return;
    }

    for (k = 0; k < TB_NKINDS; k++) {
        tb_rule_row((tb_kind_e) k, row, sizeof(row));

        found = 0;
        rewind(f);

        while (fgets(line, sizeof(line), f)) {
            n = strlen(line);

            while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) {
                line[--n] = '\0';
            }

            if (strcmp(line, row) == 0) {
                found = 1;
                break;
            }
        }

        if (!found) {
            TB_FAIL_AT("docs/failures.md lacks the row\n%s", row);
        }
    }

    fclose(f);
}


int
main(void)
{
    cf = tb_config_defaults();

    TB_RUN(every_status_class);
    TB_RUN(spend_limits);
    TB_RUN(forbidden);
    TB_RUN(cooldowns);
    TB_RUN(transport_and_streams);
    TB_RUN(bodies_that_are_not_json);
    TB_RUN(backoff);
    TB_RUN(breaker_cycle);
    TB_RUN(probe_taken_by_the_lease_only);
    TB_RUN(account_actions);
    TB_RUN(docs_table);

    tb_config_free(cf);

    return tb_test_done();
}
