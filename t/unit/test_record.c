/*
 * Unit tests: records and messages authenticated under the store's secret
 * key - a vector computed apart (Python's hmac), and every way a record
 * read back can be wrong: another kind, name, bound, generation, payload,
 * key, an envelope cut or bent; a message altered, unsigned or replayed.
 */

#include <stdlib.h>

#include "tb_test.h"
#include "tb_record.h"


#define HEX_A  "000102030405060708090a0b0c0d0e0f" \
               "101112131415161718191a1b1c1d1e1f"
#define HEX_B  "ff0102030405060708090a0b0c0d0e0f" \
               "101112131415161718191a1b1c1d1e1f"

#define SPEC   "{\"name\":\"tenant-1\"}"
#define VECTOR "tba1.630dcd29.1700000000000." \
               "WZ6ivwn-hAU0jS91bOOSd_zAoE0BH848kUoZrVoiorA." SPEC


static void
keys(tb_rec_key_t *a, tb_rec_key_t *b)
{
    tb_seal_key_t  k;

    (void) tb_seal_key_parse(&k, HEX_A, strlen(HEX_A));
    tb_rec_key_init(a, &k);
    (void) tb_seal_key_parse(&k, HEX_B, strlen(HEX_B));
    tb_rec_key_init(b, &k);
}


TB_TEST(vector)
{
    char           out[512];
    size_t         n, plen;
    uint64_t       gen;
    const char    *p;
    tb_rec_key_t   a, b;
    unsigned char  digest[32];

    keys(&a, &b);
    memset(digest, 0xab, sizeof(digest));

    n = tb_rec_wrap(&a, TB_REC_KEY, "tenant-1", 8, digest, 32,
                    1700000000000ULL, SPEC, strlen(SPEC), out, sizeof(out));
    TB_CHECK_INT(n, strlen(VECTOR));
    TB_CHECK_STR(out, VECTOR);
    TB_CHECK(n <= TB_REC_ENVELOPE_LEN(strlen(SPEC)));

    TB_CHECK_INT(tb_rec_open(&a, TB_REC_KEY, "tenant-1", 8, digest, 32,
                             out, n, &gen, &p, &plen), TB_REC_OK);
    TB_CHECK(gen == 1700000000000ULL);
    TB_CHECK_INT(plen, strlen(SPEC));
    TB_CHECK(memcmp(p, SPEC, plen) == 0);

    /* what the zone's copies are read with: no check, the same parts */
    p = tb_rec_payload(out, n, &plen, &gen);
    TB_CHECK(gen == 1700000000000ULL && plen == strlen(SPEC));
    p = tb_rec_payload(SPEC, strlen(SPEC), &plen, &gen);
    TB_CHECK(gen == 0 && p == (const char *) SPEC);

    /* too small a buffer: nothing */
    TB_CHECK_INT(tb_rec_wrap(&a, TB_REC_KEY, "tenant-1", 8, digest, 32, 1,
                             SPEC, strlen(SPEC), out, 40), 0);
    /* no generation 0: a record always has one */
    TB_CHECK_INT(tb_rec_wrap(&a, TB_REC_KEY, "tenant-1", 8, digest, 32, 0,
                             SPEC, strlen(SPEC), out, sizeof(out)), 0);
}


TB_TEST(refused)
{
    char           out[512], bent[512];
    size_t         n, plen, i;
    uint64_t       gen;
    const char    *p;
    tb_rec_key_t   a, b, none;
    unsigned char  digest[32], other[32];

    keys(&a, &b);
    memset(&none, 0, sizeof(none));
    memset(digest, 0xab, sizeof(digest));
    memset(other, 0xcd, sizeof(other));

    n = tb_rec_wrap(&a, TB_REC_ACCOUNT, "team-b", 6, "tbs1.sealed", 11, 42,
                    SPEC, strlen(SPEC), out, sizeof(out));
    TB_CHECK(n > 0);

#define OPEN(k, kind, name, bound, blen, text, len)                          \
    tb_rec_open(k, kind, name, strlen(name), bound, blen, text, len, &gen,   \
                &p, &plen)

    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "tbs1.sealed", 11, out,
                      n), TB_REC_OK);
    TB_CHECK(gen == 42);

    /* another kind, name or bound: a record moved or a blob swapped */
    TB_CHECK_INT(OPEN(&a, TB_REC_KEY, "team-b", "tbs1.sealed", 11, out, n),
                 TB_REC_FORGED);
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-c", "tbs1.sealed", 11, out,
                      n), TB_REC_FORGED);
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "tbs1.sealeD", 11, out,
                      n), TB_REC_FORGED);
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "tbs1.sealed", 10, out,
                      n), TB_REC_FORGED);

    /* another secret key: said as such */
    TB_CHECK_INT(OPEN(&b, TB_REC_ACCOUNT, "team-b", "tbs1.sealed", 11, out,
                      n), TB_REC_OTHER_KEY);
    TB_CHECK_INT(OPEN(&none, TB_REC_ACCOUNT, "team-b", "tbs1.sealed", 11, out,
                      n), TB_REC_FORGED);

    /* every byte of the envelope and payload matters */
    for (i = 0; i < n; i++) {
        memcpy(bent, out, n);
        bent[i] ^= 0x01;

        if (OPEN(&a, TB_REC_ACCOUNT, "team-b", "tbs1.sealed", 11, bent, n)
            == TB_REC_OK)
        {
            TB_FAIL_AT("byte %zu altered, still verified", i);
        }
    }

    /* the generation raised, its MAC kept */
    memcpy(bent, out, n + 1);
    p = strstr(bent, ".42.");
    TB_CHECK(p != NULL);
    bent[p - bent + 2] = '3';
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "tbs1.sealed", 11, bent,
                      n), TB_REC_FORGED);

    /* cut short, anywhere */
    for (i = 0; i < n; i++) {
        if (OPEN(&a, TB_REC_ACCOUNT, "team-b", "tbs1.sealed", 11, out, i)
            == TB_REC_OK)
        {
            TB_FAIL_AT("cut at %zu, still verified", i);
        }
    }

    /* a payload appended to */
    memcpy(bent, out, n);
    bent[n] = ' ';
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "tbs1.sealed", 11, bent,
                      n + 1), TB_REC_FORGED);

    /* no envelope: written before; "tba" of another form: unreadable */
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "", 0, SPEC,
                      strlen(SPEC)), TB_REC_LEGACY);
    TB_CHECK(p == (const char *) SPEC && plen == strlen(SPEC) && gen == 0);
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "", 0, "tba2.x", 6),
                 TB_REC_FORMAT);
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "", 0,
                      "tba1.630dcd29.042.", 18), TB_REC_FORMAT);
    TB_CHECK_INT(OPEN(&a, TB_REC_ACCOUNT, "team-b", "", 0, "", 0),
                 TB_REC_LEGACY);

#undef OPEN

    (void) digest;
    (void) other;
}


TB_TEST(generations)
{
    TB_CHECK(tb_rec_next_gen(0, 1000) == 1000);
    TB_CHECK(tb_rec_next_gen(999, 1000) == 1000);
    TB_CHECK(tb_rec_next_gen(1000, 1000) == 1001);
    TB_CHECK(tb_rec_next_gen(5000, 1000) == 5001);
    TB_CHECK(tb_rec_next_gen(7, -1) == 8);
}


TB_TEST(messages)
{
    char           out[256], bent[256];
    size_t         n, blen, i;
    const char    *body;
    tb_rec_key_t   a, b;

    keys(&a, &b);

    n = tb_msg_sign(&a, "a team-b", 8, 1700000000123LL, out, sizeof(out));
    TB_CHECK_STR(out, "a 1700000000123 b0f18f6eb2f40acd5b0967707b418075 "
                 "team-b");
    TB_CHECK_INT(n, strlen(out));

    TB_CHECK_INT(tb_msg_verify(&a, out, n, 1700000000123LL, &body, &blen), 0);
    TB_CHECK(blen == 6 && memcmp(body, "team-b", 6) == 0);

    /* late or early by more than the skew: a replay, or a clock wrong */
    TB_CHECK_INT(tb_msg_verify(&a, out, n,
                               1700000000123LL + TB_MSG_SKEW_MS + 1, &body,
                               &blen), -1);
    TB_CHECK_INT(tb_msg_verify(&a, out, n,
                               1700000000123LL - TB_MSG_SKEW_MS - 1, &body,
                               &blen), -1);
    TB_CHECK_INT(tb_msg_verify(&a, out, n, 1700000000123LL + 1000, &body,
                               &blen), 0);

    /* another key, an unsigned message, any byte altered */
    TB_CHECK_INT(tb_msg_verify(&b, out, n, 1700000000123LL, &body, &blen),
                 -1);
    TB_CHECK_INT(tb_msg_verify(&a, "a team-b", 8, 1700000000123LL, &body,
                               &blen), -1);

    for (i = 0; i < n; i++) {
        memcpy(bent, out, n);
        bent[i] ^= 0x01;

        if (tb_msg_verify(&a, bent, n, 1700000000123LL, &body, &blen) == 0) {
            TB_FAIL_AT("byte %zu altered, still verified", i);
        }
    }

    for (i = 0; i < n; i++) {
        if (tb_msg_verify(&a, out, i, 1700000000123LL, &body, &blen) == 0) {
            TB_FAIL_AT("cut at %zu, still verified", i);
        }
    }

    /* an empty body is a message too */
    n = tb_msg_sign(&a, "w ", 2, 5, out, sizeof(out));
    TB_CHECK(n > 0);
    TB_CHECK_INT(tb_msg_verify(&a, out, n, 5, &body, &blen), 0);
    TB_CHECK_INT(blen, 0);
}


int
main(void)
{
    TB_RUN(vector);
    TB_RUN(refused);
    TB_RUN(generations);
    TB_RUN(messages);

    return tb_test_done();
}
