/*
 * Unit tests: credentials sealed at rest - the key (hex, file, its mode),
 * sealing and opening, and every way a sealed value can be wrong: another
 * key, another record, an altered byte, a format we do not know.
 */

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_test.h"
#include "tb_seal.h"


#define HEX_A  "000102030405060708090a0b0c0d0e0f" \
               "101112131415161718191a1b1c1d1e1f"
#define HEX_B  "ff0102030405060708090a0b0c0d0e0f" \
               "101112131415161718191a1b1c1d1e1f"

#define CANARY "sk-ant-api03-CANARY-0123456789abcdef"


static int
is_b64(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
           || (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '=';
}


TB_TEST(key_from_hex)
{
    tb_seal_key_t  k, k2;

    TB_CHECK_INT(tb_seal_key_parse(&k, HEX_A, strlen(HEX_A)), 0);
    TB_CHECK_INT(k.key[0], 0x00);
    TB_CHECK_INT(k.key[31], 0x1f);
    TB_CHECK_INT(strlen(k.kid), TB_SEAL_KID_LEN);

    /* surrounding whitespace is not the key; upper case is the same key */
    TB_CHECK_INT(tb_seal_key_parse(&k2, " " HEX_A "\n",
                                   strlen(" " HEX_A "\n")), 0);
    TB_CHECK_STR(k2.kid, k.kid);
    TB_CHECK_INT(tb_seal_key_parse(&k2, "000102030405060708090A0B0C0D0E0F"
                                   "101112131415161718191A1B1C1D1E1F", 64), 0);
    TB_CHECK_STR(k2.kid, k.kid);

    TB_CHECK_INT(tb_seal_key_parse(&k2, HEX_B, 64), 0);
    TB_CHECK(strcmp(k2.kid, k.kid) != 0);

    TB_CHECK_INT(tb_seal_key_parse(&k2, HEX_A, 63), -1);
    TB_CHECK_INT(tb_seal_key_parse(&k2, HEX_A "00", 66), -1);
    TB_CHECK_INT(tb_seal_key_parse(&k2, "zz0102030405060708090a0b0c0d0e0f"
                                   "101112131415161718191a1b1c1d1e1f", 64), -1);
    TB_CHECK_INT(tb_seal_key_parse(&k2, "", 0), -1);
}


TB_TEST(seal_and_open)
{
    char           text[TB_SEAL_TEXT_LEN(sizeof(CANARY))], again[sizeof(text)];
    size_t         n;
    unsigned char  out[64];
    tb_seal_key_t  k;

    TB_CHECK_INT(tb_seal_key_parse(&k, HEX_A, 64), 0);

    TB_CHECK_INT(tb_seal(&k, CANARY, strlen(CANARY), "acct-1", 6, text,
                         sizeof(text)), TB_SEAL_OK);

    TB_CHECK(strncmp(text, TB_SEAL_PREFIX, strlen(TB_SEAL_PREFIX)) == 0);
    TB_CHECK(strncmp(text + strlen(TB_SEAL_PREFIX), k.kid, TB_SEAL_KID_LEN)
             == 0);
    TB_CHECK(strstr(text, "CANARY") == NULL);
    TB_CHECK(strstr(text, "sk-ant") == NULL);
    TB_CHECK(strlen(text) < sizeof(text));

    TB_CHECK_INT(tb_unseal(&k, text, strlen(text), "acct-1", 6, out,
                           sizeof(out), &n), TB_SEAL_OK);
    TB_CHECK_INT(n, strlen(CANARY));
    TB_CHECK(memcmp(out, CANARY, n) == 0);

    /* a fresh nonce every time */
    TB_CHECK_INT(tb_seal(&k, CANARY, strlen(CANARY), "acct-1", 6, again,
                         sizeof(again)), TB_SEAL_OK);
    TB_CHECK(strcmp(text, again) != 0);

    /* the empty credential seals too; a buffer too small is refused */
    TB_CHECK_INT(tb_seal(&k, "", 0, "a", 1, again, sizeof(again)), TB_SEAL_OK);
    TB_CHECK_INT(tb_unseal(&k, again, strlen(again), "a", 1, out,
                           sizeof(out), &n), TB_SEAL_OK);
    TB_CHECK_INT(n, 0);
    TB_CHECK_INT(tb_seal(&k, CANARY, strlen(CANARY), "a", 1, again,
                         TB_SEAL_TEXT_LEN(strlen(CANARY)) - 1), TB_SEAL_ERROR);
    TB_CHECK_INT(tb_unseal(&k, text, strlen(text), "acct-1", 6, out, 4, &n),
                 TB_SEAL_ERROR);

    tb_seal_key_wipe(&k);
    TB_CHECK_INT(k.key[31], 0);
}


TB_TEST(what_does_not_open)
{
    char           text[TB_SEAL_TEXT_LEN(sizeof(CANARY))], bad[sizeof(text)];
    size_t         i, n, len, head;
    unsigned char  out[64];
    tb_seal_key_t  k, other;
    tb_seal_rc_e   rc;

    TB_CHECK_INT(tb_seal_key_parse(&k, HEX_A, 64), 0);
    TB_CHECK_INT(tb_seal_key_parse(&other, HEX_B, 64), 0);
    TB_CHECK_INT(tb_seal(&k, CANARY, strlen(CANARY), "acct-1", 6, text,
                         sizeof(text)), TB_SEAL_OK);
    len = strlen(text);
    head = strlen(TB_SEAL_PREFIX) + TB_SEAL_KID_LEN + 1;

    /* another key says so; another record or context does not open */
    TB_CHECK_INT(tb_unseal(&other, text, len, "acct-1", 6, out, sizeof(out),
                           &n), TB_SEAL_OTHER_KEY);
    TB_CHECK_INT(tb_unseal(&k, text, len, "acct-2", 6, out, sizeof(out), &n),
                 TB_SEAL_FORGED);
    TB_CHECK_INT(tb_unseal(&k, text, len, "", 0, out, sizeof(out), &n),
                 TB_SEAL_FORGED);

    /* every byte of the payload altered: never opens */
    for (i = head; i < len; i++) {
        memcpy(bad, text, len + 1);
        bad[i] = (bad[i] == 'A') ? 'B' : 'A';

        rc = tb_unseal(&k, bad, len, "acct-1", 6, out, sizeof(out), &n);
        TB_CHECK(rc == TB_SEAL_FORGED || rc == TB_SEAL_FORMAT);
    }

    /* the format */
    TB_CHECK_INT(tb_unseal(&k, "", 0, "a", 1, out, sizeof(out), &n),
                 TB_SEAL_FORMAT);
    TB_CHECK_INT(tb_unseal(&k, CANARY, strlen(CANARY), "a", 1, out,
                           sizeof(out), &n), TB_SEAL_FORMAT);
    memcpy(bad, text, len + 1);
    bad[3] = '2';
    TB_CHECK_INT(tb_unseal(&k, bad, len, "acct-1", 6, out, sizeof(out), &n),
                 TB_SEAL_FORMAT);
    TB_CHECK_INT(tb_unseal(&k, text, head + 8, "acct-1", 6, out, sizeof(out),
                           &n), TB_SEAL_FORMAT);
    TB_CHECK_INT(tb_unseal(&k, text, len - 1, "acct-1", 6, out, sizeof(out),
                           &n), TB_SEAL_FORMAT);
    memcpy(bad, text, len + 1);
    bad[head + 2] = '*';
    TB_CHECK_INT(tb_unseal(&k, bad, len, "acct-1", 6, out, sizeof(out), &n),
                 TB_SEAL_FORMAT);

    for (i = head; i < len; i++) {
        TB_CHECK(is_b64(text[i]));
    }

    TB_CHECK(strstr(tb_seal_strerror(TB_SEAL_OTHER_KEY), "changed") != NULL);
}


TB_TEST(key_file)
{
    int            rc;
    char           dir[] = "/tmp/tb-seal-XXXXXX", path[64], err[256];
    FILE          *f;
    struct stat    st;
    tb_seal_key_t  k, k2;

    TB_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/secret.key", dir);

    /* missing, not asked to create */
    TB_CHECK_INT(tb_seal_key_file(&k, path, 0, err, sizeof(err)), -1);
    TB_CHECK(strstr(err, "cannot open") != NULL && strstr(err, path) != NULL);

    /* created 0600 with a key, and the same key read back */
    TB_CHECK_INT(tb_seal_key_file(&k, path, 1, err, sizeof(err)), 0);
    TB_CHECK_INT(stat(path, &st), 0);
    TB_CHECK_INT(st.st_mode & 07777, 0600);
    TB_CHECK_INT(tb_seal_key_file(&k2, path, 1, err, sizeof(err)), 0);
    TB_CHECK(memcmp(k.key, k2.key, TB_SEAL_KEY_LEN) == 0);
    TB_CHECK_STR(k.kid, k2.kid);

    /* readable by the group or others: refused, and it says how to fix */
    TB_CHECK_INT(chmod(path, 0640), 0);
    TB_CHECK_INT(tb_seal_key_file(&k2, path, 1, err, sizeof(err)), -1);
    TB_CHECK(strstr(err, "readable by others") != NULL);
    TB_CHECK(strstr(err, "0640") != NULL);
    TB_CHECK_INT(chmod(path, 0600), 0);

    /* not a key */
    f = fopen(path, "w");
    TB_CHECK(f != NULL);

    if (f) {
        fputs("not a key\n", f);
        fclose(f);
    }

    rc = tb_seal_key_file(&k2, path, 1, err, sizeof(err));
    TB_CHECK_INT(rc, -1);
    TB_CHECK(strstr(err, "64 hex digits") != NULL);

    /* a directory is not a key file */
    TB_CHECK_INT(tb_seal_key_file(&k2, dir, 0, err, sizeof(err)), -1);

    unlink(path);
    rmdir(dir);
    tb_seal_key_wipe(&k);
    tb_seal_key_wipe(&k2);
}


int
main(void)
{
    TB_RUN(key_from_hex);
    TB_RUN(seal_and_open);
    TB_RUN(what_does_not_open);
    TB_RUN(key_file);

    return tb_test_done();
}
