/*
 * Unit tests: rate-limit header parsing, dates, the mirror update, virtual
 * keys and model scopes.
 */

#include <stdlib.h>

#include "tb_test.h"
#include "tb_ratelimit.h"
#include "tb_router.h"
#include "tb_lease.h"
#include "tb_account.h"
#include "tb_keys.h"


#define S(s)  (const unsigned char *) (s), sizeof(s) - 1

/* 2026-11-29T20:40:59Z */
#define T0    1795984859000LL


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


TB_TEST(ascii_lower)
{
    size_t         n, i, off;
    unsigned char  src[80], dst[80], want;

    /* every byte value at every position of a word, against the byte rule */

    for (i = 0; i < 256; i++) {
        for (off = 0; off < 24; off++) {
            for (n = 0; n < sizeof(src); n++) {
                src[n] = (unsigned char) ((n * 37 + i) & 0xff);
            }

            src[off] = (unsigned char) i;
            tb_ascii_lower(dst, src, 24 + off);

            for (n = 0; n < 24 + off; n++) {
                want = (src[n] >= 'A' && src[n] <= 'Z')
                       ? (unsigned char) (src[n] + 32) : src[n];

                if (dst[n] != want) {
                    TB_FAIL_AT("byte %zu of %zu (0x%02x): got 0x%02x",
                               n, 24 + off, src[n], dst[n]);
                    return;
                }
            }
        }
    }

    /* in place */
    memcpy(src, "Anthropic-RateLimit-Output-Tokens-Remaining", 44);
    tb_ascii_lower(src, src, 43);
    TB_CHECK(memcmp(src, "anthropic-ratelimit-output-tokens-remaining", 44)
             == 0);
}


TB_TEST(rfc3339_utc)
{
    int64_t  ms;

    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T20:40:59Z"), &ms), 0);
    TB_CHECK_INT(ms, T0);

    TB_CHECK_INT(tb_parse_rfc3339(S("1970-01-01T00:00:00Z"), &ms), 0);
    TB_CHECK_INT(ms, 0);

    TB_CHECK_INT(tb_parse_rfc3339(S(" 2026-11-29t20:40:59z "), &ms), 0);
    TB_CHECK_INT(ms, T0);
}


TB_TEST(rfc3339_fraction_and_offset)
{
    int64_t  ms;

    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T20:40:59.5Z"), &ms), 0);
    TB_CHECK_INT(ms, T0 + 500);

    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T20:40:59.123456Z"), &ms), 0);
    TB_CHECK_INT(ms, T0 + 123);

    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T22:40:59+02:00"), &ms), 0);
    TB_CHECK_INT(ms, T0);

    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T18:10:59-02:30"), &ms), 0);
    TB_CHECK_INT(ms, T0);
}


TB_TEST(rfc3339_leap_years)
{
    int64_t  ms;

    TB_CHECK_INT(tb_parse_rfc3339(S("2024-02-29T00:00:00Z"), &ms), 0);
    TB_CHECK_INT(ms, 1709164800000LL);
    TB_CHECK_INT(tb_parse_rfc3339(S("2025-02-29T00:00:00Z"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("2000-02-29T00:00:00Z"), &ms), 0);
    TB_CHECK_INT(tb_parse_rfc3339(S("2100-02-29T00:00:00Z"), &ms), -1);
}


TB_TEST(rfc3339_garbage)
{
    int64_t  ms;

    TB_CHECK_INT(tb_parse_rfc3339(S(""), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("soon"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T20:40:59"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("2026-13-29T20:40:59Z"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T24:40:59Z"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T20:40:59.Z"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T20:40:59+2:00"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("2026-11-29T20:40:59Zjunk"), &ms), -1);
    TB_CHECK_INT(tb_parse_rfc3339(S("1795984859"), &ms), -1);
}


TB_TEST(http_dates)
{
    int64_t  s;

    TB_CHECK_INT(tb_parse_http_date(S("Sun, 06 Nov 1994 08:49:37 GMT"), &s), 0);
    TB_CHECK_INT(s, 784111777);
    TB_CHECK_INT(tb_parse_http_date(S("Sunday, 06-Nov-94 08:49:37 GMT"), &s),
                 0);
    TB_CHECK_INT(s, 784111777);
    TB_CHECK_INT(tb_parse_http_date(S("Sun Nov  6 08:49:37 1994"), &s), 0);
    TB_CHECK_INT(s, 784111777);
    TB_CHECK_INT(tb_parse_http_date(S("Sun, 06 Nov 1994 08:49:37 UTC"), &s),
                 -1);
    TB_CHECK_INT(tb_parse_http_date(S("Sun, 06 Nov 1994"), &s), -1);
    TB_CHECK_INT(tb_parse_http_date(S("Sun, 31 Feb 1994 08:49:37 GMT"), &s),
                 -1);
}


TB_TEST(retry_after)
{
    int64_t  d;

    TB_CHECK_INT(tb_parse_retry_after(S("45"), T0, &d), 0);
    TB_CHECK_INT(d, 45000);
    TB_CHECK_INT(tb_parse_retry_after(S(" 0 "), T0, &d), 0);
    TB_CHECK_INT(d, 0);
    TB_CHECK_INT(tb_parse_retry_after(S("1.25"), T0, &d), 0);
    TB_CHECK_INT(d, 1250);

    /* an HTTP date 30 s after now */
    TB_CHECK_INT(tb_parse_retry_after(S("Sun, 29 Nov 2026 20:41:29 GMT"), T0,
                                      &d), 0);
    TB_CHECK_INT(d, 30000);

    /* a date in the past means now */
    TB_CHECK_INT(tb_parse_retry_after(S("Sun, 06 Nov 1994 08:49:37 GMT"), T0,
                                      &d), 0);
    TB_CHECK_INT(d, 0);

    TB_CHECK_INT(tb_parse_retry_after(S("-5"), T0, &d), -1);
    TB_CHECK_INT(tb_parse_retry_after(S("5s"), T0, &d), -1);
    TB_CHECK_INT(tb_parse_retry_after(S(""), T0, &d), -1);
    TB_CHECK_INT(tb_parse_retry_after(S("99999999999999999999"), T0, &d), -1);
}


TB_TEST(seconds)
{
    int64_t  ms;

    /* what X-TokenBiryani-Max-Wait and retry-after's delta-seconds take */
    TB_CHECK_INT(tb_parse_seconds(S("5"), &ms), 0);
    TB_CHECK_INT(ms, 5000);
    TB_CHECK_INT(tb_parse_seconds(S("\t0.5 "), &ms), 0);
    TB_CHECK_INT(ms, 500);
    TB_CHECK_INT(tb_parse_seconds(S("2.0019"), &ms), 0);
    TB_CHECK_INT(ms, 2001);
    TB_CHECK_INT(tb_parse_seconds(S("7."), &ms), 0);
    TB_CHECK_INT(ms, 7000);

    TB_CHECK_INT(tb_parse_seconds(S(".5"), &ms), -1);
    TB_CHECK_INT(tb_parse_seconds(S("-1"), &ms), -1);
    TB_CHECK_INT(tb_parse_seconds(S("1e3"), &ms), -1);
    TB_CHECK_INT(tb_parse_seconds(S("soon"), &ms), -1);
    TB_CHECK_INT(tb_parse_seconds(S(" "), &ms), -1);
    TB_CHECK_INT(tb_parse_seconds(S("1000000000"), &ms), -1);
}


TB_TEST(int64_parse)
{
    int64_t  v;

    TB_CHECK_INT(tb_parse_int64(S("4000"), &v), 0);
    TB_CHECK_INT(v, 4000);
    TB_CHECK_INT(tb_parse_int64(S(" 12 "), &v), 0);
    TB_CHECK_INT(v, 12);
    TB_CHECK_INT(tb_parse_int64(S("9223372036854775807"), &v), 0);
    TB_CHECK_INT(v, INT64_MAX);
    TB_CHECK_INT(tb_parse_int64(S("9223372036854775808"), &v), -1);
    TB_CHECK_INT(tb_parse_int64(S("12a"), &v), -1);
    TB_CHECK_INT(tb_parse_int64(S(""), &v), -1);
    TB_CHECK_INT(tb_parse_int64(S("-"), &v), -1);
}


TB_TEST(format_round_trip)
{
    int64_t  ms;
    char     buf[32];

    tb_format_rfc3339(T0 + 999, buf, sizeof(buf));
    TB_CHECK_STR(buf, "2026-11-29T20:40:59Z");
    TB_CHECK_INT(tb_parse_rfc3339((unsigned char *) buf, strlen(buf), &ms), 0);
    TB_CHECK_INT(ms, T0);

    tb_format_rfc3339(0, buf, sizeof(buf));
    TB_CHECK_STR(buf, "1970-01-01T00:00:00Z");

    tb_format_rfc3339(T0, buf, 5);
    TB_CHECK_STR(buf, "2026");
}


TB_TEST(observe_nine_headers)
{
    tb_mirror_t  m;
    tb_rl_obs_t  o;

    tb_mirror_init(&m);
    TB_CHECK_INT(m.w[TB_WIN_INPUT].limit, -1);
    TB_CHECK_INT(m.w[TB_WIN_INPUT].remaining, -1);

    tb_rl_obs_init(&o);

    TB_CHECK_INT(tb_rl_obs_header(&o, S("anthropic-ratelimit-requests-limit"),
                                  S("4000"), T0), 1);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-requests-remaining"),
                     S("3999"), T0);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-requests-reset"),
                     S("2026-11-29T20:41:00Z"), T0);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-input-tokens-limit"),
                     S("2000000"), T0);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-input-tokens-remaining"),
                     S("1994000"), T0);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-input-tokens-reset"),
                     S("2026-11-29T20:41:01Z"), T0);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-output-tokens-limit"),
                     S("400000"), T0);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-output-tokens-remaining"),
                     S("399000"), T0);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-output-tokens-reset"),
                     S("2026-11-29T20:41:02Z"), T0);
    tb_rl_obs_header(&o, S("anthropic-organization-id"), S("org-1 "), T0);
    tb_rl_obs_header(&o, S("retry-after"), S("12"), T0);

    /* read but not mirrored */
    TB_CHECK_INT(tb_rl_obs_header(&o,
                 S("anthropic-ratelimit-unified-5h-utilization"), S("0.4"), T0),
                 1);
    TB_CHECK_INT(tb_rl_obs_header(&o, S("content-type"), S("x"), T0), 0);

    tb_mirror_apply(&m, &o, T0, TB_REFILL_AUTO);

    TB_CHECK_INT(m.w[TB_WIN_REQUESTS].limit, 4000);
    TB_CHECK_INT(m.w[TB_WIN_REQUESTS].remaining, 3999);
    TB_CHECK_INT(m.w[TB_WIN_REQUESTS].reset_ms, T0 + 1000);
    TB_CHECK_INT(m.w[TB_WIN_INPUT].limit, 2000000);
    TB_CHECK_INT(m.w[TB_WIN_INPUT].remaining, 1994000);
    TB_CHECK_INT(m.w[TB_WIN_INPUT].reset_ms, T0 + 2000);
    TB_CHECK_INT(m.w[TB_WIN_OUTPUT].limit, 400000);
    TB_CHECK_INT(m.w[TB_WIN_OUTPUT].remaining, 399000);
    TB_CHECK_INT(m.w[TB_WIN_OUTPUT].reset_ms, T0 + 3000);
    TB_CHECK_INT(m.w[TB_WIN_OUTPUT].observed_ms, T0);
    TB_CHECK_STR(m.org, "org-1");
    TB_CHECK_INT(m.retry_after_ms, T0 + 12000);
    TB_CHECK_INT(m.observed_ms, T0);
}


TB_TEST(observe_partial_and_bad_values)
{
    tb_mirror_t  m;
    tb_rl_obs_t  o;

    tb_mirror_init(&m);

    tb_rl_obs_init(&o);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-input-tokens-limit"),
                     S("1000"), T0);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-input-tokens-remaining"),
                     S("900"), T0);
    tb_mirror_apply(&m, &o, T0, TB_REFILL_AUTO);

    /* a later response with a garbage remaining and no limit */
    tb_rl_obs_init(&o);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-input-tokens-remaining"),
                     S("lots"), T0 + 5);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-input-tokens-reset"),
                     S("not a date"), T0 + 5);
    tb_rl_obs_header(&o, S("anthropic-ratelimit-requests-remaining"),
                     S("-3"), T0 + 5);
    tb_rl_obs_header(&o, S("retry-after"), S("soon"), T0 + 5);
    tb_mirror_apply(&m, &o, T0 + 5, TB_REFILL_AUTO);

    TB_CHECK_INT(m.w[TB_WIN_INPUT].limit, 1000);
    TB_CHECK_INT(m.w[TB_WIN_INPUT].remaining, 900);
    TB_CHECK_INT(m.w[TB_WIN_INPUT].observed_ms, T0);
    TB_CHECK_INT(m.w[TB_WIN_REQUESTS].remaining, -1);
    TB_CHECK_INT(m.retry_after_ms, 0);
    TB_CHECK_INT(m.observed_ms, T0 + 5);
}


TB_TEST(organization_truncated)
{
    tb_rl_obs_t  o;
    char         big[200];

    memset(big, 'x', sizeof(big));
    tb_rl_obs_init(&o);
    tb_rl_obs_header(&o, S("anthropic-organization-id"),
                     (unsigned char *) big, sizeof(big), T0);
    TB_CHECK_INT(strlen(o.org), TB_ORG_MAX - 1);
}


TB_TEST(keys_lookup)
{
    tb_config_t    cf;
    tb_key_conf_t  keys[3];
    tb_keytab_t    t;
    char           label[9];

    memset(&cf, 0, sizeof(cf));
    memset(keys, 0, sizeof(keys));

    keys[0].key = "bir_alpha";
    keys[0].name = "alpha";
    keys[1].key = "bir_beta";
    keys[1].name = "beta";
    keys[2].key = "bir_gamma";
    keys[2].name = "gamma";

    cf.keys = keys;
    cf.nkeys = 3;

    TB_CHECK_INT(tb_keytab_build(&t, &cf), 0);
    TB_CHECK(tb_keytab_lookup(&t, S("bir_beta")) == &keys[1]);
    TB_CHECK(tb_keytab_lookup(&t, S("bir_gamma")) == &keys[2]);
    TB_CHECK(tb_keytab_lookup(&t, S("bir_bet")) == NULL);
    TB_CHECK(tb_keytab_lookup(&t, S("bir_beta ")) == NULL);
    TB_CHECK(tb_keytab_lookup(&t, S("")) == NULL);

    tb_key_label((unsigned char *) "bir_beta", 8, label);
    TB_CHECK_INT(strlen(label), 8);
    TB_CHECK(strstr("bir_beta", label) == NULL);

    tb_keytab_free(&t);
    TB_CHECK(t.ents == NULL);

    cf.nkeys = 0;
    TB_CHECK_INT(tb_keytab_build(&t, &cf), 0);
    TB_CHECK(tb_keytab_lookup(&t, S("bir_beta")) == NULL);
    tb_keytab_free(&t);
}


/* the reference implementation's vectors_sip128: key 00..0f, message
 * 00..(n-1), for n of 0, 1, 7, 8, 15, 16 and 63 */
TB_TEST(siphash128_known_answers)
{
    size_t         i, k;
    unsigned char  key[16], msg[64], out[16];

    static const struct {
        size_t         n;
        unsigned char  want[16];
    } v[] = {
        { 0, { 0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6,
               0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93 } },
        { 1, { 0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44,
               0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45 } },
        { 7, { 0xa1, 0xf1, 0xeb, 0xbe, 0xd8, 0xdb, 0xc1, 0x53,
               0xc0, 0xb8, 0x4a, 0xa6, 0x1f, 0xf0, 0x82, 0x39 } },
        { 8, { 0x3b, 0x62, 0xa9, 0xba, 0x62, 0x58, 0xf5, 0x61,
               0x0f, 0x83, 0xe2, 0x64, 0xf3, 0x14, 0x97, 0xb4 } },
        { 15, { 0x54, 0x93, 0xe9, 0x99, 0x33, 0xb0, 0xa8, 0x11,
                0x7e, 0x08, 0xec, 0x0f, 0x97, 0xcf, 0xc3, 0xd9 } },
        { 16, { 0x6e, 0xe2, 0xa4, 0xca, 0x67, 0xb0, 0x54, 0xbb,
                0xfd, 0x33, 0x15, 0xbf, 0x85, 0x23, 0x05, 0x77 } },
        { 63, { 0x51, 0x50, 0xd1, 0x77, 0x2f, 0x50, 0x83, 0x4a,
                0x50, 0x3e, 0x06, 0x9a, 0x97, 0x3f, 0xbd, 0x7c } },
    };

    for (i = 0; i < 16; i++) {
        key[i] = (unsigned char) i;
    }

    for (i = 0; i < 64; i++) {
        msg[i] = (unsigned char) i;
    }

    for (k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        tb_siphash128(key, msg, v[k].n, out);
        TB_CHECK(memcmp(out, v[k].want, 16) == 0);
    }
}


TB_TEST(sha256_known_answer)
{
    size_t         i;
    char           hex[65];
    unsigned char  d[TB_DIGEST_LEN];

    tb_sha256("abc", 3, d);

    for (i = 0; i < TB_DIGEST_LEN; i++) {
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    }

    TB_CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223"
                      "b00361a396177a9cb410ff61f20015ad");
}


TB_TEST(model_scopes)
{
    char  *pats[] = { "claude-sonnet-4-6", "claude-opus-*", "*" };

    TB_CHECK(tb_models_match(pats, 2, "claude-sonnet-4-6", 17));
    TB_CHECK(!tb_models_match(pats, 2, "claude-sonnet-4-5", 17));
    TB_CHECK(!tb_models_match(pats, 2, "claude-sonnet-4-6-x", 19));
    TB_CHECK(tb_models_match(pats, 2, "claude-opus-4-6", 15));
    TB_CHECK(tb_models_match(pats, 2, "claude-opus-", 12));
    TB_CHECK(!tb_models_match(pats, 2, "claude-opu", 10));
    TB_CHECK(tb_models_match(pats + 2, 1, "anything", 8));
    TB_CHECK(tb_models_match(pats + 2, 1, "", 0));
    TB_CHECK(!tb_models_match(pats, 0, "claude-sonnet-4-6", 17));
}


TB_TEST(account_states)
{
    int64_t             until;
    const char         *why;
    tb_account_state_t  a;
    tb_breaker_conf_t   bc = { 5, 30000 };
    unsigned char       fp[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

    memset(&a, 0, sizeof(a));
    tb_account_state_init(&a, "acct-01", sizeof("acct-01") - 1, fp);
    TB_CHECK_STR(a.id, "acct-01");
    TB_CHECK_INT(a.gen, 1);
    TB_CHECK_INT(a.mirror.w[TB_WIN_OUTPUT].limit, -1);

    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0, &until, &why), TB_STATE_READY);
    TB_CHECK_INT(tb_account_state(&a, 0, &bc, T0, &until, &why), TB_STATE_DISABLED);

    a.cooling_until_ms = T0 + 27000;
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0, &until, &why), TB_STATE_COOLING);
    TB_CHECK_INT(until, T0 + 27000);
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0 + 27000, &until, &why), TB_STATE_READY);

    a.disabled = 1;
    TB_CHECK_INT(tb_account_state(&a, 1, &bc, T0, &until, &why), TB_STATE_DISABLED);
    TB_CHECK_STR(tb_state_name(TB_STATE_COOLING), "cooling");

    tb_account_state_init(&a, "acct-01", sizeof("acct-01") - 1, fp);
    TB_CHECK_INT(a.gen, 2);
    TB_CHECK_INT(a.disabled, 0);
}


/* answers read out of sending order: older news only says there is less */

static void
obs_requests(tb_rl_obs_t *o, uint64_t seq, const char *remaining)
{
    tb_rl_obs_init(o);
    o->seq = seq;
    tb_rl_obs_header(o, S("anthropic-ratelimit-requests-limit"), S("60"),
                     T0);
    tb_rl_obs_header(o, (const unsigned char *) "anthropic-ratelimit-"
                     "requests-remaining", 38, (const unsigned char *)
                     remaining, strlen(remaining), T0);
}


/* one observation of the requests window: remaining, reset in ms from T0 */
static void
see(tb_mirror_t *m, int64_t at, int64_t limit, int64_t remaining,
    int64_t reset_in, int refill)
{
    tb_rl_obs_t  o;

    tb_rl_obs_init(&o);
    o.v[TB_WIN_REQUESTS][TB_RL_LIMIT] = limit;
    o.v[TB_WIN_REQUESTS][TB_RL_REMAINING] = remaining;
    o.v[TB_WIN_REQUESTS][TB_RL_RESET] = T0 + reset_in;
    o.has = 7u << (TB_WIN_REQUESTS * TB_RL_NFIELDS);

    tb_mirror_apply(m, &o, at, refill);
}


TB_TEST(replenishment_learned)
{
    tb_mirror_t   m;
    tb_window_t  *w;

    w = &m.w[TB_WIN_REQUESTS];

    /* a bucket: its reset moves later as it is drawn from */
    tb_mirror_init(&m);
    see(&m, T0, 60, 50, 10000, TB_REFILL_AUTO);
    TB_CHECK_INT(w->refill, TB_REFILL_AUTO);
    see(&m, T0 + 100, 60, 49, 11000, TB_REFILL_AUTO);
    TB_CHECK_INT(w->refill, TB_REFILL_AUTO);        /* within the grain */
    see(&m, T0 + 200, 60, 47, 13000, TB_REFILL_AUTO);
    TB_CHECK_INT(w->refill, TB_REFILL_BUCKET);

    /* a bucket: it rose before its reset */
    tb_mirror_init(&m);
    see(&m, T0, 60, 50, 10000, TB_REFILL_AUTO);
    see(&m, T0 + 3000, 60, 53, 7000, TB_REFILL_AUTO);
    TB_CHECK_INT(w->refill, TB_REFILL_BUCKET);

    /* a fixed window: it fell by a twentieth, its reset where it was */
    tb_mirror_init(&m);
    see(&m, T0, 60, 50, 10000, TB_REFILL_AUTO);
    see(&m, T0 + 100, 60, 49, 10000, TB_REFILL_AUTO);
    see(&m, T0 + 200, 60, 48, 10000, TB_REFILL_AUTO);
    TB_CHECK_INT(w->refill, TB_REFILL_AUTO);        /* 2 < 3 */
    see(&m, T0 + 300, 60, 47, 10000, TB_REFILL_AUTO);
    TB_CHECK_INT(w->refill, TB_REFILL_FIXED);

    /* the next period starts afresh: the old reset passed */
    see(&m, T0 + 10500, 60, 59, 20000, TB_REFILL_AUTO);
    TB_CHECK_INT(w->period_reset_ms, T0 + 20000);
    TB_CHECK_INT(w->period_remaining, 59);
    TB_CHECK_INT(w->refill, TB_REFILL_FIXED);       /* kept until told */
    see(&m, T0 + 11000, 60, 58, 23000, TB_REFILL_AUTO);
    TB_CHECK_INT(w->refill, TB_REFILL_BUCKET);      /* evidence wins */

    /* an account configured says what it is, whatever it looks like */
    tb_mirror_init(&m);
    see(&m, T0, 60, 50, 10000, TB_REFILL_FIXED);
    see(&m, T0 + 100, 60, 55, 10000, TB_REFILL_FIXED);
    TB_CHECK_INT(w->refill, TB_REFILL_FIXED);
    see(&m, T0 + 200, 60, 40, 10000, TB_REFILL_BUCKET);
    TB_CHECK_INT(w->refill, TB_REFILL_BUCKET);

    /* a fixed window holds until its reset; a bucket refills toward it */
    tb_mirror_init(&m);
    see(&m, T0, 60, 0, 10000, TB_REFILL_FIXED);
    TB_CHECK_INT(tb_window_level(w, T0 + 9999), 0);
    TB_CHECK_INT(tb_window_level(w, T0 + 10000), 60);
    see(&m, T0, 60, 0, 10000, TB_REFILL_BUCKET);
    TB_CHECK_INT(tb_window_level(w, T0 + 5000), 30);
}


TB_TEST(observe_out_of_order)
{
    unsigned            r;
    tb_rl_obs_t         o;
    tb_account_state_t  a;
    tb_need_t           need;
    unsigned char       fp[8] = { 0 };

    tb_account_state_init(&a, "a", sizeof("a") - 1, fp);

    obs_requests(&o, 5, "10");
    r = tb_account_observe(&a, &o, T0);
    TB_CHECK_INT(r, 1u << (TB_WIN_REQUESTS + TB_MIRROR_FRESH));
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].remaining, 10);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].seq, 5);

    /* the answer to a request sent earlier, read later: not taken */
    obs_requests(&o, 3, "12");
    r = tb_account_observe(&a, &o, T0);
    TB_CHECK_INT(r, 1u << (TB_WIN_REQUESTS + TB_MIRROR_STALE));
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].remaining, 10);

    /* ... unless it says there is less */
    obs_requests(&o, 4, "8");
    tb_account_observe(&a, &o, T0);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].remaining, 8);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].seq, 5);

    /* newer news is taken whole, up too */
    obs_requests(&o, 9, "20");
    tb_account_observe(&a, &o, T0);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].remaining, 20);

    /* unnumbered answers are the newest */
    obs_requests(&o, 0, "30");
    tb_account_observe(&a, &o, T0);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].remaining, 30);

    /*
     * The upstream admits concurrent requests in an order of its own.
     * Leases 6 and 7 go out together; 7 reaches the upstream first, so
     * its answer, read after 6's, counts less than 6's did.  6 has ended
     * by then: it stays held until an answer sent after it ended is read.
     */
    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;
    obs_requests(&o, 5, "10");
    tb_account_observe(&a, &o, T0);
    a.nreleased = 0;
    a.reserved[TB_WIN_REQUESTS] = 2;
    a.leases = 2;
    a.inflight = 2;

    obs_requests(&o, 6, "8");                  /* counts 6 and 7 */
    tb_account_observe(&a, &o, T0);
    tb_lease_release(&a, &need, answer(NULL, T0), 7, 6, 0, 0);
    TB_CHECK_INT(a.pending[TB_WIN_REQUESTS], 0);    /* its own answer */
    TB_CHECK_INT(tb_window_available(&a, TB_WIN_REQUESTS, T0), 8 - 1);

    obs_requests(&o, 7, "9");                  /* counts 7, not 6 */
    tb_account_observe(&a, &o, T0);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].remaining, 9);
    TB_CHECK_INT(a.pending[TB_WIN_REQUESTS], 1);    /* 6 is held again */
    TB_CHECK_INT(tb_window_available(&a, TB_WIN_REQUESTS, T0), 9 - 1 - 1);

    tb_lease_release(&a, &need, answer(NULL, T0), 7, 7, 0, 0);
    TB_CHECK_INT(a.pending[TB_WIN_REQUESTS], 1);
    TB_CHECK_INT(tb_window_available(&a, TB_WIN_REQUESTS, T0), 9 - 1);

    /* an answer to a request sent after both ended counts both */
    obs_requests(&o, 8, "7");
    tb_account_observe(&a, &o, T0);
    TB_CHECK_INT(a.pending[TB_WIN_REQUESTS], 0);
    TB_CHECK_INT(a.nreleased, 0);
    TB_CHECK_INT(tb_window_available(&a, TB_WIN_REQUESTS, T0), 7);

    /*
     * The input held as pending is what the answer counted, not the
     * lease: a cache that missed counts more than a discounted lease, and
     * cache reads count only where the account says they do.
     */
    {
        tb_need_t   in;
        tb_usage_t  u;

        memset(&in, 0, sizeof(in));
        in.n[TB_WIN_REQUESTS] = 1;
        in.n[TB_WIN_INPUT] = 100;
        u.input_tokens = 300;
        u.output_tokens = 10;
        u.cache_creation_input_tokens = 50;
        u.cache_read_input_tokens = 2000;

        /* the input window last read from lease 8: these ended later */
        a.reserved[TB_WIN_INPUT] = 300;
        a.inflight = 3;
        tb_lease_release(&a, &in, answer(&u, T0), 50, 20, 0, 0);
        TB_CHECK_INT(a.reserved[TB_WIN_INPUT], 200);
        TB_CHECK_INT(a.pending[TB_WIN_INPUT], 350);

        tb_lease_release(&a, &in, answer(&u, T0), 51, 21, 1, 0);
        TB_CHECK_INT(a.pending[TB_WIN_INPUT], 350 + 2350);

        /* no usage: the lease */
        tb_lease_release(&a, &in, answer(NULL, T0), 52, 22, 0, 0);
        TB_CHECK_INT(a.pending[TB_WIN_INPUT], 350 + 2350 + 100);
    }
}


/*
 * Two gateways sharing one pool: each holds a share of the windows, the
 * news of one is folded into the other's mirror by the time its request
 * was sent, and what the other's answer surely counts stops being pending.
 */
TB_TEST(shared_pool)
{
    char                buf[TB_NEWS_MAX + 1];
    size_t              n;
    tb_rl_obs_t         o;
    tb_need_t           need;
    tb_account_news_t   news, back;
    tb_account_state_t  a, b;
    tb_breaker_conf_t   bc;
    unsigned char       fp[8] = { 0 };

    memset(&bc, 0, sizeof(bc));
    bc.threshold = 5;
    bc.cooldown_ms = 30000;

    tb_account_state_init(&a, "a", sizeof("a") - 1, fp);
    tb_account_state_init(&b, "a", sizeof("a") - 1, fp);

    /* a reads 40 left of 60, sent at T0 - 100 */
    obs_requests(&o, 5, "40");
    o.sent_ms = T0 - 100;
    tb_account_observe(&a, &o, T0);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].sent_ms, T0 - 100);

    /* half of it is a's: 20, the whole when alone */
    TB_CHECK_INT(tb_window_available(&a, TB_WIN_REQUESTS, T0), 40);
    a.withheld = TB_SHARE_ONE / 2;
    TB_CHECK_INT(tb_window_available(&a, TB_WIN_REQUESTS, T0), 20);
    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 20;
    TB_CHECK(tb_fits(&a, &need, T0));
    need.n[TB_WIN_REQUESTS] = 21;
    TB_CHECK(!tb_fits(&a, &need, T0));
    a.reserved[TB_WIN_REQUESTS] = 5;
    TB_CHECK_INT(tb_window_available(&a, TB_WIN_REQUESTS, T0), 15);
    a.reserved[TB_WIN_REQUESTS] = 0;

    /* none of it: nothing fits, not even on unknown windows */
    b.withheld = TB_SHARE_ONE;
    need.n[TB_WIN_REQUESTS] = 1;
    TB_CHECK(!tb_fits(&b, &need, T0));
    TB_CHECK(tb_headroom(NULL, &b, T0) == 0.0);
    b.withheld = 0;
    TB_CHECK(tb_fits(&b, &need, T0));

    /* the news as text and back, exactly */
    a.cooling_until_ms = T0 + 5000;
    tb_account_news(&a, &bc, 3600000, T0, &news);
    n = tb_account_news_print(&news, buf);
    TB_CHECK(n <= TB_NEWS_MAX);
    TB_CHECK(tb_account_news_scan(&back, buf, n));
    TB_CHECK_INT(back.cooling_until_ms, T0 + 5000);
    TB_CHECK_INT(back.w[TB_WIN_REQUESTS].remaining, 40);
    TB_CHECK_INT(back.w[TB_WIN_REQUESTS].limit, 60);
    TB_CHECK_INT(back.w[TB_WIN_REQUESTS].sent_ms, T0 - 100);
    TB_CHECK_INT(back.w[TB_WIN_INPUT].remaining, -1);
    TB_CHECK(!tb_account_news_scan(&back, buf, n - 1 - (buf[n - 2] == ' ')));
    TB_CHECK(!tb_account_news_scan(&back, "2 0 0 0", 7));
    TB_CHECK(!tb_account_news_scan(&back, "", 0));
    buf[n] = ' ';
    TB_CHECK(!tb_account_news_scan(&back, buf, n + 1));

    /*
     * b sent one request at T0 - 2000 that ended at T0 - 1000, not
     * counted by b's last answer; a's answer (to a request sent later)
     * counts it, and its window is taken; the rest is taken too
     */
    obs_requests(&o, 1, "50");
    o.sent_ms = T0 - 3000;
    tb_account_observe(&b, &o, T0 - 2500);
    need.n[TB_WIN_REQUESTS] = 1;
    b.reserved[TB_WIN_REQUESTS] = 1;
    b.leases = 1;
    b.inflight = 1;
    tb_lease_release(&b, &need, NULL, 3, 2, 0, T0 - 1000);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 1);

    TB_CHECK_INT(tb_account_adopt(&b, &news, 7, T0), 1u << TB_WIN_REQUESTS);
    TB_CHECK_INT(b.mirror.w[TB_WIN_REQUESTS].remaining, 40);
    TB_CHECK_INT(b.mirror.w[TB_WIN_REQUESTS].seq, 1);   /* b's own order */
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 0);
    TB_CHECK_INT(b.cooling_until_ms, T0 + 5000);
    TB_CHECK(strcmp(b.cooling_reason, "resting on another instance") == 0);

    /* older news is not taken: sent earlier than what b has */
    news.w[TB_WIN_REQUESTS].remaining = 59;
    news.w[TB_WIN_REQUESTS].sent_ms = T0 - 200;
    TB_CHECK_INT(tb_account_adopt(&b, &news, 7, T0), 0);
    TB_CHECK_INT(b.mirror.w[TB_WIN_REQUESTS].remaining, 40);

    /* a lease that ended within the clock's skew of it stays pending */
    b.reserved[TB_WIN_REQUESTS] = 1;
    b.leases = 1;
    b.inflight = 1;
    tb_lease_release(&b, &need, NULL, 9, 8, 0, T0 - 50);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 1);
    news.w[TB_WIN_REQUESTS].remaining = 30;
    news.w[TB_WIN_REQUESTS].sent_ms = T0;
    TB_CHECK_INT(tb_account_adopt(&b, &news, 7, T0), 1u << TB_WIN_REQUESTS);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 1);
    news.w[TB_WIN_REQUESTS].sent_ms = T0 - 50 + TB_CLOCK_SKEW_MS + 1;
    tb_account_adopt(&b, &news, 7, T0);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 0);

    /*
     * b's own answer to a request it sent before the one a read: later in
     * b's order, older news all the same - it may only say there is less
     */
    obs_requests(&o, 12, "45");
    o.sent_ms = T0 - 10;
    tb_account_observe(&b, &o, T0 + 300);
    TB_CHECK_INT(b.mirror.w[TB_WIN_REQUESTS].remaining, 30);
    obs_requests(&o, 13, "25");
    o.sent_ms = T0 - 5;
    tb_account_observe(&b, &o, T0 + 300);
    TB_CHECK_INT(b.mirror.w[TB_WIN_REQUESTS].remaining, 25);

    /* sent after it: b's own again, in b's order */
    obs_requests(&o, 14, "44");
    o.sent_ms = T0 + TB_CLOCK_SKEW_MS + 200;
    tb_account_observe(&b, &o, T0 + 500);
    TB_CHECK_INT(b.mirror.w[TB_WIN_REQUESTS].remaining, 44);
    TB_CHECK(!b.mirror.w[TB_WIN_REQUESTS].adopted);

    /*
     * b's lease 20 answered at T0 + 900 (its headers), ended later; a's
     * news of a request sent at T0 + 1000 does not surely count it, so
     * it stays pending - until b's own answer to it: the window counts in
     * arrival order, so saying more than a's, lease 20 arrived before
     * a's request and a's answer counts it; saying no more, it arrived
     * after and its own answer is the window's
     */
    b.reserved[TB_WIN_REQUESTS] = 1;
    b.leases = 1;
    b.inflight = 1;
    tb_lease_release(&b, &need, answer(NULL, T0 + 900), 21, 20, 0, T0 + 2000);
    news.w[TB_WIN_REQUESTS].remaining = 10;
    news.w[TB_WIN_REQUESTS].sent_ms = T0 + 1000;
    TB_CHECK_INT(tb_account_adopt(&b, &news, 7, T0 + 1100), 1u << TB_WIN_REQUESTS);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 1);

    /* while it is not known to refill, nothing is inferred */
    obs_requests(&o, 20, "14");
    o.sent_ms = T0 + 800;
    tb_account_observe(&b, &o, T0 + 1200);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 1);

    /*
     * a bucket (60 a minute, no reset said): 10 then may be 11 by T0 +
     * 1450, and the count said one more
     */
    b.mirror.w[TB_WIN_REQUESTS].refill = TB_REFILL_BUCKET;
    obs_requests(&o, 20, "12");
    o.sent_ms = T0 + 800;
    tb_account_observe(&b, &o, T0 + 1200);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 1);
    obs_requests(&o, 20, "13");
    o.sent_ms = T0 + 800;
    tb_account_observe(&b, &o, T0 + 1200);
    TB_CHECK_INT(b.mirror.w[TB_WIN_REQUESTS].remaining, 10);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 0);

    b.reserved[TB_WIN_REQUESTS] = 1;
    b.leases = 1;
    b.inflight = 1;
    tb_lease_release(&b, &need, answer(NULL, T0 + 1300), 23, 22, 0, T0 + 2000);
    news.w[TB_WIN_REQUESTS].sent_ms = T0 + 1400;
    tb_account_adopt(&b, &news, 7, T0 + 1500);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 1);
    obs_requests(&o, 22, "9");
    o.sent_ms = T0 + 1200;
    tb_account_observe(&b, &o, T0 + 1600);
    TB_CHECK_INT(b.mirror.w[TB_WIN_REQUESTS].remaining, 9);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 0);

    /* the same lease ended with its answer's headers long before: counted */
    b.reserved[TB_WIN_REQUESTS] = 1;
    b.leases = 1;
    b.inflight = 1;
    tb_lease_release(&b, &need, answer(NULL, T0 + 1300), 31, 30, 0, T0 + 5000);
    news.w[TB_WIN_REQUESTS].remaining = 5;
    news.w[TB_WIN_REQUESTS].sent_ms = T0 + 1300 + TB_CLOCK_SKEW_MS + 1;
    tb_account_adopt(&b, &news, 7, T0 + 5100);
    TB_CHECK_INT(b.pending[TB_WIN_REQUESTS], 0);
}


/*
 * A burst: three leases taken at once, answered in another order than
 * they were taken.  Each answer said what the window held when it arrived;
 * the window decreases in that order, so the one that says least arrived
 * last and counts the others, whatever their numbers - as long as no
 * reading raises the window again, which holds when the pool is shared
 * (alone, a later lease's answer read from before raises it, and a
 * release dropped for what an earlier window said would be lost: there
 * only the leases' order counts).
 */
TB_TEST(burst_counted_by_what_answers_said)
{
    tb_rl_obs_t          o;
    tb_need_t            need;
    tb_answer_t          ans;
    tb_account_state_t   a;
    unsigned char        fp[8] = { 0 };

    /* alone: what lease 1 said does not count */
    tb_account_state_init(&a, "a", sizeof("a") - 1, fp);
    a.replenishment = TB_REFILL_FIXED;
    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;
    memset(&ans, 0, sizeof(ans));
    ans.remaining[TB_WIN_INPUT] = -1;
    a.reserved[TB_WIN_REQUESTS] = 2;
    a.leases = 2;
    a.inflight = 2;
    obs_requests(&o, 3, "8");
    o.sent_ms = T0 - 5;
    tb_account_observe(&a, &o, T0);
    ans.headers_ms = T0;
    ans.remaining[TB_WIN_REQUESTS] = 10;
    tb_lease_release(&a, &need, &ans, 3, 1, 0, T0 + 30);
    TB_CHECK_INT(a.pending[TB_WIN_REQUESTS], 1);

    /* shared */
    tb_account_state_init(&a, "a", sizeof("a") - 1, fp);
    tb_account_share(&a, 1);
    a.replenishment = TB_REFILL_FIXED;
    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;
    memset(&ans, 0, sizeof(ans));
    ans.remaining[TB_WIN_INPUT] = -1;

    a.reserved[TB_WIN_REQUESTS] = 3;
    a.leases = 3;
    a.inflight = 3;

    /* lease 3 answered first, saying 8 */
    obs_requests(&o, 3, "8");
    o.sent_ms = T0 - 5;
    tb_account_observe(&a, &o, T0);
    ans.headers_ms = T0;
    ans.remaining[TB_WIN_REQUESTS] = 8;
    tb_lease_release(&a, &need, &ans, 3, 3, 0, T0 + 10);
    TB_CHECK_INT(a.pending[TB_WIN_REQUESTS], 0);         /* its own */

    /*
     * lease 1 says 10 (a fixed window, which does not refill until its
     * reset; counts are said to one): arrived before 3, which counts it
     */
    obs_requests(&o, 1, "10");
    o.sent_ms = T0 - 7;
    tb_account_observe(&a, &o, T0 + 20);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].remaining, 8);
    ans.remaining[TB_WIN_REQUESTS] = 10;
    tb_lease_release(&a, &need, &ans, 3, 1, 0, T0 + 30);
    TB_CHECK_INT(a.pending[TB_WIN_REQUESTS], 0);

    /*
     * lease 2 says 7: it arrived last; the window takes what it says, and
     * still holds lease 2 as pending (not surely counted by the answer of
     * the lease taken last): counted twice, on the safe side, until an
     * answer to a lease taken after it ended
     */
    obs_requests(&o, 2, "7");
    o.sent_ms = T0 - 6;
    tb_account_observe(&a, &o, T0 + 40);
    TB_CHECK_INT(a.mirror.w[TB_WIN_REQUESTS].remaining, 7);
    ans.remaining[TB_WIN_REQUESTS] = 7;
    tb_lease_release(&a, &need, &ans, 3, 2, 0, T0 + 50);
    TB_CHECK_INT(a.pending[TB_WIN_REQUESTS], 1);
    TB_CHECK_INT(tb_window_available(&a, TB_WIN_REQUESTS, T0 + 50), 7 - 1);
}


/* one reading of the requests window by a, sent at sent, said at now */
static void
read_requests(tb_account_state_t *a, uint64_t seq, int64_t remaining,
    int64_t reset_ms, int refill, int64_t sent, int64_t now)
{
    tb_rl_obs_t  o;

    tb_rl_obs_init(&o);
    o.seq = seq;
    o.sent_ms = sent;
    o.v[TB_WIN_REQUESTS][TB_RL_LIMIT] = 60;
    o.v[TB_WIN_REQUESTS][TB_RL_REMAINING] = remaining;
    o.v[TB_WIN_REQUESTS][TB_RL_RESET] = reset_ms;
    o.has = 7u << (TB_WIN_REQUESTS * TB_RL_NFIELDS);
    a->replenishment = refill;

    tb_account_observe(a, &o, now);
}


/*
 * Two gateways, half each, one window of 60 that does not refill before
 * its reset.  Each takes its half; the upstream counts all of x's first.
 * x then reads 30 left and holds nothing: a share of what is left would
 * let it take 15 more, which y's 30 in flight need.  Its slice is spent:
 * nothing more, until the window refills or the share changes.
 */
TB_TEST(slices_hold_however_the_upstream_orders)
{
    int                  i, probed;
    tb_need_t            one;
    tb_answer_t          ans;
    tb_account_conf_t    conf;
    tb_breaker_conf_t    bc;
    tb_account_news_t    news;
    tb_account_state_t   x, y;
    unsigned char        fp[8] = { 0 };

    memset(&conf, 0, sizeof(conf));
    conf.max_concurrency = 1000;
    memset(&bc, 0, sizeof(bc));
    bc.threshold = 5;
    bc.cooldown_ms = 30000;
    memset(&one, 0, sizeof(one));
    one.n[TB_WIN_REQUESTS] = 1;

    tb_account_state_init(&x, "a", sizeof("a") - 1, fp);
    tb_account_state_init(&y, "a", sizeof("a") - 1, fp);
    tb_account_share(&x, 1);
    tb_account_share(&y, 1);
    tb_slice_reshare(&x, TB_SHARE_ONE / 2, T0);
    tb_slice_reshare(&y, TB_SHARE_ONE / 2, T0);

    read_requests(&x, 1, 60, T0 + 60000, TB_REFILL_FIXED, T0 - 10, T0);
    read_requests(&y, 1, 60, T0 + 60000, TB_REFILL_FIXED, T0 - 10, T0);

    for (i = 0; i < 30; i++) {
        TB_CHECK(tb_lease_reserve(&x, &conf, &bc, &one, T0, &probed));
        TB_CHECK(tb_lease_reserve(&y, &conf, &bc, &one, T0, &probed));
    }

    TB_CHECK(!tb_lease_reserve(&x, &conf, &bc, &one, T0, &probed));
    TB_CHECK(!tb_lease_reserve(&y, &conf, &bc, &one, T0, &probed));

    /* x's thirty counted first, answered and ended */
    memset(&ans, 0, sizeof(ans));
    ans.remaining[TB_WIN_INPUT] = -1;

    for (i = 0; i < 30; i++) {
        read_requests(&x, 2 + i, 59 - i, T0 + 60000, TB_REFILL_FIXED, T0,
                      T0 + 100);
        ans.headers_ms = T0 + 100;
        ans.remaining[TB_WIN_REQUESTS] = 59 - i;
        tb_lease_release(&x, &one, &ans, 100, 2 + i, 0, T0 + 100);
    }

    TB_CHECK_INT(x.mirror.w[TB_WIN_REQUESTS].remaining, 30);
    TB_CHECK_INT(x.reserved[TB_WIN_REQUESTS], 0);
    TB_CHECK(x.pending[TB_WIN_REQUESTS] <= 1);      /* 31 said: maybe not */
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 100), 0);
    TB_CHECK(!tb_lease_reserve(&x, &conf, &bc, &one, T0 + 100, &probed));

    /* y reads it too, and what x holds: nothing more for y either */
    tb_account_news(&x, &bc, 3600000, T0 + 100, &news);
    tb_account_adopt(&y, &news, 7, T0 + 150);
    TB_CHECK_INT(y.mirror.w[TB_WIN_REQUESTS].remaining, 30);
    TB_CHECK(!tb_lease_reserve(&y, &conf, &bc, &one, T0 + 150, &probed));

    /* y's share grows to three quarters, x's falls to a quarter: the
     * fifteen move from x's slice to y's, which its thirty in flight
     * leave no room for in the window */
    tb_slice_reshare(&x, TB_SHARE_ONE / 4 * 3, T0 + 200);
    tb_slice_reshare(&y, TB_SHARE_ONE / 4, T0 + 200);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 200), -15);
    TB_CHECK_INT(tb_slice_left(&y, TB_WIN_REQUESTS, T0 + 200), 15);
    TB_CHECK_INT(tb_window_available(&y, TB_WIN_REQUESTS, T0 + 200), 0);

    /*
     * the window's reset: each slice is its share of it again, less what
     * that gateway holds that the new window counts (not x's one pending:
     * it ended long before the reset, and was counted in the window that
     * ended)
     */
    read_requests(&x, 40, 59, T0 + 120000, TB_REFILL_FIXED, T0 + 60010,
                  T0 + 60020);
    TB_CHECK_INT(x.pending[TB_WIN_REQUESTS], 0);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 60020), 15);
    TB_CHECK_INT(tb_window_available(&x, TB_WIN_REQUESTS, T0 + 60020), 15);
}


/*
 * A bucket's slice refills at its share of the rate the window's reading
 * says (what it lacks by its reset), in fractions too: refilled every
 * millisecond, a slice of half a window of 60 a minute gains one in 2 s.
 */
TB_TEST(slices_refill_by_the_bucket)
{
    int                  i;
    tb_account_state_t   x;
    unsigned char        fp[8] = { 0 };

    tb_account_state_init(&x, "a", sizeof("a") - 1, fp);
    tb_account_share(&x, 1);
    tb_slice_reshare(&x, TB_SHARE_ONE / 2, T0);

    /* 30 of 60 left, full again in 30 s: one a second */
    read_requests(&x, 1, 30, T0 + 30000, TB_REFILL_BUCKET, T0 - 10, T0);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0), 15);
    tb_slice_spend(&x, TB_WIN_REQUESTS, 15, T0);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0), 0);

    for (i = 1; i <= 2000; i++) {
        tb_slice_refill(&x, T0 + i);
    }

    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 2000), 1);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 10000), 5);

    /* never more than its share of the limit */
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 3600000), 30);

    /*
     * a full window, or one that says no reset: its limit a minute (a
     * reading that says it is full gives the slices nothing: they gain
     * only as time goes)
     */
    read_requests(&x, 2, 60, T0 + 10000, TB_REFILL_BUCKET, T0 + 10000,
                  T0 + 10000);
    i = (int) tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 10000);
    TB_CHECK_INT(i, 5);
    tb_slice_spend(&x, TB_WIN_REQUESTS, 30, T0 + 10000);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 10000), i - 30);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 20000), i - 30 + 5);
}


/*
 * A slice begun again (its account joined a capacity domain: the windows
 * it counts against changed) begins with what the window says after the
 * reading that comes next, whether this gateway read it or another told
 * it: what a key took of its own windows before it joined was never taken
 * from the domain's slice, and a slice begun before the reading would keep
 * it (two gateways sharing an organisation then admitted one request more
 * than it had).
 */
TB_TEST(slices_begin_again_after_the_reading)
{
    tb_breaker_conf_t    bc;
    tb_account_news_t    news;
    tb_account_state_t   x, y;
    unsigned char        fp[8] = { 0 };

    memset(&bc, 0, sizeof(bc));

    tb_account_state_init(&x, "a", sizeof("a") - 1, fp);
    tb_account_state_init(&y, "a", sizeof("a") - 1, fp);
    tb_account_share(&x, 1);
    tb_account_share(&y, 1);
    tb_slice_reshare(&x, TB_SHARE_ONE / 2, T0);
    tb_slice_reshare(&y, TB_SHARE_ONE / 2, T0);

    /* 40 of 60 left: half of it each, begun */
    read_requests(&x, 1, 40, T0 + 60000, TB_REFILL_FIXED, T0 - 10, T0);
    tb_account_news(&x, &bc, 3600000, T0, &news);
    tb_account_adopt(&y, &news, 7, T0);
    tb_slice_refill(&x, T0 + 1);
    tb_slice_refill(&y, T0 + 1);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 1), 20);
    TB_CHECK_INT(tb_slice_left(&y, TB_WIN_REQUESTS, T0 + 1), 20);

    /* a reading of a begun slice leaves it as it was */
    read_requests(&x, 2, 36, T0 + 60000, TB_REFILL_FIXED, T0, T0 + 2);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 2), 20);

    /* begun again, then 30 read: 15 each, x by its own answer, y told */
    tb_slice_restart(&x);
    tb_slice_restart(&y);
    read_requests(&x, 3, 30, T0 + 60000, TB_REFILL_FIXED, T0 + 3, T0 + 5);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 5), 15);
    tb_account_news(&x, &bc, 3600000, T0 + 5, &news);
    tb_account_adopt(&y, &news, 7, T0 + 6);
    TB_CHECK_INT(y.mirror.w[TB_WIN_REQUESTS].remaining, 30);
    TB_CHECK_INT(tb_slice_left(&y, TB_WIN_REQUESTS, T0 + 6), 15);

    /* and they hold from then on */
    tb_slice_refill(&x, T0 + 7);
    tb_slice_refill(&y, T0 + 7);
    tb_slice_spend(&x, TB_WIN_REQUESTS, 15, T0 + 8);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 8), 0);
    TB_CHECK_INT(tb_slice_left(&y, TB_WIN_REQUESTS, T0 + 8), 15);
}


/*
 * Redis away, a gateway that spent its slice of a fixed window admits
 * nothing more, so no reading comes to say the window reset, nor that
 * what ended before it was counted.  Its slice says when it comes back:
 * at the reset, whole again, and the window holds it - whatever was
 * pending then (counted in the window that ended), but what ended too
 * close to the reset to be sure.
 */
TB_TEST(slices_begin_again_at_a_fixed_reset_without_a_reading)
{
    int                  i, probed;
    tb_need_t            one;
    tb_answer_t          ans;
    tb_account_conf_t    conf;
    tb_breaker_conf_t    bc;
    tb_account_state_t   x;
    unsigned char        fp[8] = { 0 };

    memset(&conf, 0, sizeof(conf));
    conf.max_concurrency = 1000;
    memset(&bc, 0, sizeof(bc));
    memset(&one, 0, sizeof(one));
    one.n[TB_WIN_REQUESTS] = 1;

    tb_account_state_init(&x, "a", sizeof("a") - 1, fp);
    tb_account_share(&x, 1);
    tb_slice_reshare(&x, TB_SHARE_ONE / 2, T0);

    /* 60 a window, until T0 + 4 s: 30 for this gateway */
    read_requests(&x, 1, 60, T0 + 4000, TB_REFILL_FIXED, T0 - 10, T0);

    for (i = 0; i < 30; i++) {
        TB_CHECK(tb_lease_reserve(&x, &conf, &bc, &one, T0, &probed));
    }

    TB_CHECK(!tb_lease_reserve(&x, &conf, &bc, &one, T0, &probed));

    /* ended, their answers saying nothing of the window: all pending,
     * the last one just before the reset */
    memset(&ans, 0, sizeof(ans));
    ans.remaining[TB_WIN_REQUESTS] = -1;
    ans.remaining[TB_WIN_INPUT] = -1;

    for (i = 0; i < 30; i++) {
        ans.headers_ms = (i < 29) ? T0 + 100 : T0 + 3900;
        tb_lease_release(&x, &one, &ans, 100, 2 + i, 0, ans.headers_ms);
    }

    TB_CHECK_INT(x.pending[TB_WIN_REQUESTS], 30);
    TB_CHECK_INT(tb_window_available(&x, TB_WIN_REQUESTS, T0 + 3900), 0);
    TB_CHECK_INT(tb_slice_at(&x, TB_WIN_REQUESTS, 1, T0 + 3900), T0 + 4000);
    TB_CHECK_INT(tb_fits_at(&x, &one, T0 + 3900), T0 + 4000);

    /* the reset, no reading since: 29 were counted before it */
    TB_CHECK_INT(tb_account_pending_at(&x, TB_WIN_REQUESTS, T0 + 4000), 1);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 4000), 29);
    TB_CHECK_INT(tb_window_available(&x, TB_WIN_REQUESTS, T0 + 4000), 29);

    for (i = 0; i < 29; i++) {
        TB_CHECK(tb_lease_reserve(&x, &conf, &bc, &one, T0 + 4000, &probed));
    }

    TB_CHECK(!tb_lease_reserve(&x, &conf, &bc, &one, T0 + 4000, &probed));

    /* its next reset is not known until an answer says it */
    TB_CHECK_INT(tb_slice_at(&x, TB_WIN_REQUESTS, 1, T0 + 4000), 0);
}


/*
 * A bucket's slice says when it holds what is asked: at its share of the
 * rate its reading says, never when the slice cannot hold it.
 */
TB_TEST(slices_say_when_they_refill)
{
    tb_account_state_t   x;
    unsigned char        fp[8] = { 0 };

    tb_account_state_init(&x, "a", sizeof("a") - 1, fp);
    tb_account_share(&x, 1);
    tb_slice_reshare(&x, TB_SHARE_ONE / 2, T0);

    /* 30 of 60 left, full again in 30 s: half a request a second here */
    read_requests(&x, 1, 30, T0 + 30000, TB_REFILL_BUCKET, T0 - 10, T0);
    tb_slice_spend(&x, TB_WIN_REQUESTS, 15, T0);

    TB_CHECK_INT(tb_slice_at(&x, TB_WIN_REQUESTS, 1, T0), T0 + 2000);
    TB_CHECK_INT(tb_slice_at(&x, TB_WIN_REQUESTS, 3, T0), T0 + 6000);
    TB_CHECK_INT(tb_slice_left(&x, TB_WIN_REQUESTS, T0 + 6000), 3);
    TB_CHECK_INT(tb_slice_at(&x, TB_WIN_REQUESTS, 3, T0 + 6000), T0 + 6000);
    TB_CHECK_INT(tb_slice_at(&x, TB_WIN_REQUESTS, 31, T0), 0);
}


/*
 * What another gateway said it holds is in the window's count once the
 * window is read from a request sent after it was said, or once a fixed
 * window's reset has passed since.  Redis away, nothing newer is said:
 * what it held when Redis went is not taken off for a minute.
 */
TB_TEST(holds_told_are_counted_by_a_later_reading)
{
    int                  i, probed;
    tb_need_t            one;
    tb_account_conf_t    conf;
    tb_breaker_conf_t    bc;
    tb_account_news_t    news;
    tb_account_state_t   x, y, z;
    unsigned char        fp[8] = { 0 };

    memset(&conf, 0, sizeof(conf));
    conf.max_concurrency = 1000;
    memset(&bc, 0, sizeof(bc));
    memset(&one, 0, sizeof(one));
    one.n[TB_WIN_REQUESTS] = 1;

    tb_account_state_init(&x, "a", sizeof("a") - 1, fp);
    tb_account_state_init(&y, "a", sizeof("a") - 1, fp);
    tb_account_state_init(&z, "a", sizeof("a") - 1, fp);
    tb_account_share(&x, 1);
    tb_account_share(&y, 1);
    tb_account_share(&z, 1);
    tb_slice_reshare(&x, TB_SHARE_ONE / 2, T0);
    tb_slice_reshare(&y, TB_SHARE_ONE / 2, T0);
    tb_slice_reshare(&z, TB_SHARE_ONE / 2, T0);

    /* y holds 8 in flight, and says so */
    read_requests(&y, 1, 40, T0 + 60000, TB_REFILL_BUCKET, T0 - 10, T0);

    for (i = 0; i < 8; i++) {
        TB_CHECK(tb_lease_reserve(&y, &conf, &bc, &one, T0, &probed));
    }

    tb_account_news(&y, &bc, 3600000, T0 + 10, &news);
    TB_CHECK_INT(news.holds[0], 8);

    /* x reads the window from y's reading: y's 8 are not in its count */
    tb_account_adopt(&x, &news, 7, T0 + 20);
    TB_CHECK_INT(tb_account_others(&x, TB_WIN_REQUESTS, T0 + 30), 8);
    TB_CHECK_INT(tb_window_available(&x, TB_WIN_REQUESTS, T0 + 30), 20);

    /* read again from a request sent after: they are, and still until
     * TB_PEER_HOLDS_MS has passed, nothing newer being said */
    read_requests(&x, 1, 30, T0 + 60000, TB_REFILL_BUCKET, T0 + 500,
                  T0 + 510);
    TB_CHECK_INT(tb_account_others(&x, TB_WIN_REQUESTS, T0 + 520), 0);
    TB_CHECK_INT(tb_window_available(&x, TB_WIN_REQUESTS, T0 + 520), 15);

    /* z has read a fixed window itself; y's 8 count until its reset */
    read_requests(&z, 1, 40, T0 + 4000, TB_REFILL_FIXED, T0, T0 + 5);
    tb_account_adopt(&z, &news, 7, T0 + 20);
    TB_CHECK_INT(tb_account_others(&z, TB_WIN_REQUESTS, T0 + 30), 8);
    TB_CHECK_INT(tb_account_others(&z, TB_WIN_REQUESTS, T0 + 4000), 0);
    TB_CHECK_INT(tb_window_available(&z, TB_WIN_REQUESTS, T0 + 4000), 30);
}


int
main(void)
{
    TB_RUN(ascii_lower);
    TB_RUN(rfc3339_utc);
    TB_RUN(rfc3339_fraction_and_offset);
    TB_RUN(rfc3339_leap_years);
    TB_RUN(rfc3339_garbage);
    TB_RUN(http_dates);
    TB_RUN(retry_after);
    TB_RUN(seconds);
    TB_RUN(int64_parse);
    TB_RUN(format_round_trip);
    TB_RUN(observe_nine_headers);
    TB_RUN(observe_partial_and_bad_values);
    TB_RUN(organization_truncated);
    TB_RUN(keys_lookup);
    TB_RUN(siphash128_known_answers);
    TB_RUN(sha256_known_answer);
    TB_RUN(model_scopes);
    TB_RUN(account_states);
    TB_RUN(observe_out_of_order);
    TB_RUN(shared_pool);
    TB_RUN(burst_counted_by_what_answers_said);
    TB_RUN(slices_hold_however_the_upstream_orders);
    TB_RUN(slices_refill_by_the_bucket);
    TB_RUN(slices_begin_again_after_the_reading);
    TB_RUN(slices_begin_again_at_a_fixed_reset_without_a_reading);
    TB_RUN(slices_say_when_they_refill);
    TB_RUN(holds_told_are_counted_by_a_later_reading);
    TB_RUN(replenishment_learned);

    return tb_test_done();
}
