/*
 * Unit tests: minted keys - their secret, their spec parsed (what a POST
 * may set, what a PATCH may change, null clearing), written back and read
 * again, and the store that keeps them.
 */

#include <stdlib.h>
#include <unistd.h>

#include "tb_test.h"
#include "tb_keyspec.h"
#include "tb_keys.h"
#include "tb_store.h"


#define NOW  1800000000


static int
account(void *data, const char *id)
{
    (void) data;

    return strcmp(id, "a1") == 0 || strcmp(id, "a2") == 0;
}


static int
parse(tb_keyspec_t *ks, const char *json, int mode, char *err)
{
    return tb_keyspec_parse(ks, json, strlen(json), mode, account, NULL, NOW,
                            err, 256);
}


TB_TEST(secret)
{
    int            i, j;
    char           a[TB_KEYSPEC_SECRET_LEN + 1], b[TB_KEYSPEC_SECRET_LEN + 1];
    unsigned char  da[32], db[32], want[32];

    TB_CHECK_INT(tb_keyspec_secret(a, da), 0);
    TB_CHECK_INT(tb_keyspec_secret(b, db), 0);

    TB_CHECK_INT(strlen(a), 47);
    TB_CHECK(strncmp(a, "bir_", 4) == 0);
    TB_CHECK(strcmp(a, b) != 0);

    for (i = 4; i < 47; i++) {
        j = (unsigned char) a[i];
        TB_CHECK((j >= 'A' && j <= 'Z') || (j >= 'a' && j <= 'z')
                 || (j >= '0' && j <= '9') || j == '-' || j == '_');
    }

    /* the digest is the SHA-256 of the whole key, as the store keeps it */
    tb_sha256(a, strlen(a), want);
    TB_CHECK(memcmp(da, want, 32) == 0);
    TB_CHECK(memcmp(da, db, 32) != 0);
}


TB_TEST(create_defaults_and_fields)
{
    char          err[256];
    tb_keyspec_t  ks;

    TB_CHECK_INT(parse(&ks, "{\"name\": \"bot\"}", TB_KEYSPEC_CREATE, err),
                 0);
    TB_CHECK_STR(ks.conf.name, "bot");
    TB_CHECK_INT(ks.conf.models.n, 1);
    TB_CHECK_STR(ks.conf.models.items[0], "*");
    TB_CHECK_INT(ks.conf.pool.n, 0);
    TB_CHECK_INT(ks.conf.rpm, TB_UNSET);
    TB_CHECK_INT(ks.conf.max_inflight, TB_AUTO);
    TB_CHECK_INT(ks.conf.admin, 0);
    TB_CHECK_INT(ks.created, NOW);
    TB_CHECK_INT(ks.expires, 0);
    TB_CHECK(ks.conf.key == NULL);
    tb_keyspec_free(&ks);

    TB_CHECK_INT(parse(&ks, "{\"name\": \"b\", \"pool\": [\"a2\", \"a1\"], "
                       "\"models\": [\"claude-haiku-*\"], \"rpm\": 7, "
                       "\"priority\": \"background\", \"admin\": true, "
                       "\"max_wait_seconds\": 2.5, \"spend_cap_usd\": 0, "
                       "\"session_cap_usd\": 1.25, \"session_max_turns\": 9, "
                       "\"max_inflight\": 4, \"max_queued\": 0, "
                       "\"expires_at\": \"2030-01-01T00:00:00Z\"}",
                       TB_KEYSPEC_CREATE, err), 0);
    TB_CHECK_INT(ks.conf.pool.n, 2);
    TB_CHECK_STR(ks.conf.pool.items[1], "a1");
    TB_CHECK_INT(ks.conf.rpm, 7);
    TB_CHECK_INT(ks.conf.priority, TB_PRIORITY_BATCH);
    TB_CHECK_INT(ks.conf.admin, 1);
    TB_CHECK_DBL(ks.conf.max_wait_seconds, 2.5, 1e-9);
    TB_CHECK_DBL(ks.conf.spend_cap_usd, 0, 1e-9);
    TB_CHECK_DBL(ks.conf.session_cap_usd, 1.25, 1e-9);
    TB_CHECK_INT(ks.conf.session_max_turns, 9);
    TB_CHECK_INT(ks.conf.max_inflight, 4);
    TB_CHECK_INT(ks.conf.max_queued, 0);
    TB_CHECK_INT(ks.expires, 1893456000);
    tb_keyspec_free(&ks);

    TB_CHECK_INT(parse(&ks, "{\"name\": \"b\", \"expires_in_seconds\": 60}",
                       TB_KEYSPEC_CREATE, err), 0);
    TB_CHECK_INT(ks.expires, NOW + 60);
    tb_keyspec_free(&ks);
}


TB_TEST(refused)
{
    size_t        i;
    char          err[256];
    tb_keyspec_t  ks;

    static const struct {
        const char  *json;
        const char  *says;
    } bad[] = {
        { "", "not valid JSON" },
        { "{\"name\": \"a\"} {}", "something follows" },
        { "\"name\"", "must be a JSON object" },
        { "{\"rpm\": 3}", "name is required" },
        { "{\"name\": \"a\", \"nope\": 1}", "unknown field \"nope\"" },
        { "{\"name\": \"a\", \"created\": 5}", "created cannot be set" },
        { "{\"name\": \"a\", \"rpm\": null, \"rpm\": 2}", "rpm appears twice" },
        { "{\"name\": null}", "name cannot be null" },
        { "{\"name\": \"a b\"}", "name must be" },
        { "{\"name\": \".hidden\"}", "name must be" },
        { "{\"name\": \"a\\nb\"}", "name must be" },
        { "{\"name\": \"a\", \"pool\": [3]}", "pool[0] must be a string" },
        { "{\"name\": \"a\", \"pool\": [\"a3\"]}", "names no account" },
        { "{\"name\": \"a\", \"models\": [\"\"]}", "models[0] must be 1 to" },
        { "{\"name\": \"a\", \"rpm\": 1e300}", "rpm must be a whole number" },
        { "{\"name\": \"a\", \"max_wait_seconds\": 1e9}",
          "max_wait_seconds must be" },
        { "{\"name\": \"a\", \"expires_at\": \"2030-13-01T00:00:00Z\"}",
          "expires_at must be a time" },
        { "{\"name\": \"a\", \"expires_at\": \"2030-01-01T00:00:00+01:00\"}",
          "expires_at must be a time" },
        { "{\"name\": \"a\", \"expires_at\": 1700000000}",
          "expires_at is in the past" },
    };

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        TB_CHECK_INT(parse(&ks, bad[i].json, TB_KEYSPEC_CREATE, err), -1);
        TB_CHECK_CONTAINS(err, bad[i].says);
    }
}


TB_TEST(patch_changes_only_what_it_names)
{
    char          err[256];
    tb_keyspec_t  ks;

    TB_CHECK_INT(parse(&ks, "{\"name\": \"b\", \"rpm\": 7, \"pool\": "
                       "[\"a1\"], \"expires_in_seconds\": 60}",
                       TB_KEYSPEC_CREATE, err), 0);

    TB_CHECK_INT(parse(&ks, "{\"rpm\": null, \"models\": [\"x-*\"]}",
                       TB_KEYSPEC_PATCH, err), 0);
    TB_CHECK_INT(ks.conf.rpm, TB_UNSET);
    TB_CHECK_STR(ks.conf.models.items[0], "x-*");
    TB_CHECK_STR(ks.conf.pool.items[0], "a1");
    TB_CHECK_STR(ks.conf.name, "b");
    TB_CHECK_INT(ks.expires, NOW + 60);

    /* a refused PATCH leaves the key as it was */
    TB_CHECK_INT(parse(&ks, "{\"rpm\": 3, \"pool\": [\"zz\"]}",
                       TB_KEYSPEC_PATCH, err), -1);
    TB_CHECK_INT(ks.conf.rpm, TB_UNSET);
    TB_CHECK_STR(ks.conf.pool.items[0], "a1");

    TB_CHECK_INT(parse(&ks, "{\"admin\": true}", TB_KEYSPEC_PATCH, err), -1);
    TB_CHECK_CONTAINS(err, "admin cannot be changed");
    TB_CHECK_INT(parse(&ks, "{\"name\": \"c\"}", TB_KEYSPEC_PATCH, err), -1);
    TB_CHECK_CONTAINS(err, "name cannot be changed");

    TB_CHECK_INT(parse(&ks, "{\"expires_at\": null}", TB_KEYSPEC_PATCH, err),
                 0);
    TB_CHECK_INT(ks.expires, 0);

    tb_keyspec_free(&ks);
}


TB_TEST(written_and_read_back)
{
    char          err[256], *one, *two;
    tb_keyspec_t  ks, back;

    TB_CHECK_INT(parse(&ks, "{\"name\": \"b\", \"pool\": [\"a2\"], "
                       "\"rpm\": 7, \"priority\": \"batch\", "
                       "\"spend_cap_usd\": 12.5, \"expires_at\": 1900000000}",
                       TB_KEYSPEC_CREATE, err), 0);

    one = tb_keyspec_json(&ks);
    TB_CHECK(one != NULL);
    TB_CHECK_CONTAINS(one, "\"priority\":\"batch\"");
    TB_CHECK_CONTAINS(one, "\"session_cap_usd\":null");

    /* the store's record is read without checking the accounts: one
     * removed from the file since leaves the key loadable */
    TB_CHECK_INT(tb_keyspec_parse(&back, one, strlen(one), TB_KEYSPEC_STORED,
                                  NULL, NULL, 0, err, sizeof(err)), 0);
    two = tb_keyspec_json(&back);
    TB_CHECK_STR(two, one);
    TB_CHECK_INT(back.created, NOW);
    TB_CHECK_INT(back.expires, 1900000000);

    free(one);
    free(two);
    tb_keyspec_free(&ks);
    tb_keyspec_free(&back);
}


static int
tb_keyspec_test_count(void *data, const char *name,
    const unsigned char *digest, const char *spec)
{
    int  *n = data;

    TB_CHECK_STR(name, "b");
    TB_CHECK_INT(digest[0], 8);
    TB_CHECK_STR(spec, "{\"name\":\"b\",\"rpm\":1}");

    (*n)++;

    return 0;
}


TB_TEST(store_keys)
{
    int            n;
    char           path[] = "/tmp/tb-keyspec-XXXXXX", err[512], db[64];
    unsigned char  digest[32];
    tb_store_t    *s;

    TB_CHECK(mkdtemp(path) != NULL);
    snprintf(db, sizeof(db), "%s/t.db", path);

    s = tb_store_open(db, 100, err, sizeof(err));
    TB_CHECK(s != NULL);

    memset(digest, 7, sizeof(digest));

    TB_CHECK_INT(tb_store_key_insert(s, "a", digest, "{\"name\":\"a\"}"),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_key_insert(s, "a", digest, "{}"), TB_STORE_EXISTS);
    digest[0] = 8;
    TB_CHECK_INT(tb_store_key_insert(s, "b", digest, "{\"name\":\"b\"}"),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_key_update(s, "b", "{\"name\":\"b\",\"rpm\":1}"),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_key_update(s, "c", "{}"), TB_STORE_NONE);
    TB_CHECK_INT(tb_store_key_delete(s, "a"), TB_STORE_OK);
    TB_CHECK_INT(tb_store_key_delete(s, "a"), TB_STORE_NONE);

    tb_store_close(s);

    /* what another connection reads back */
    s = tb_store_open(db, 100, err, sizeof(err));
    TB_CHECK(s != NULL);

    n = 0;
    TB_CHECK_INT(tb_store_keys(s, tb_keyspec_test_count, &n), TB_STORE_OK);
    TB_CHECK_INT(n, 1);

    tb_store_close(s);

    snprintf(err, sizeof(err), "rm -rf %s", path);
    TB_CHECK_INT(system(err), 0);
}


static int
tb_accounts_test_cb(void *data, const char *id, const char *spec,
    const char *sealed)
{
    char  *out = data;

    /* in the order they were added, as the master loads them */
    strcat(out, id);
    strcat(out, "=");
    strcat(out, spec);
    strcat(out, "/");
    strcat(out, sealed);
    strcat(out, ";");

    return 0;
}


TB_TEST(store_accounts)
{
    char         path[] = "/tmp/tb-accounts-XXXXXX", err[512], db[64];
    char         seen[512];
    tb_store_t  *s;

    TB_CHECK(mkdtemp(path) != NULL);
    snprintf(db, sizeof(db), "%s/t.db", path);

    s = tb_store_open(db, 100, err, sizeof(err));
    TB_CHECK(s != NULL);

    TB_CHECK_INT(tb_store_account_put(s, "z", "{\"id\":\"z\"}", "tbs1.z", 1),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_account_put(s, "a", "{\"id\":\"a\"}", "tbs1.a", 1),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_account_put(s, "a", "{}", "tbs1.x", 1),
                 TB_STORE_EXISTS);
    TB_CHECK_INT(tb_store_account_put(s, "a", "{\"id\":\"a\",\"priority\":1}",
                                      "tbs1.a2", 0),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_account_put(s, "nobody", "{}", "tbs1.n", 0),
                 TB_STORE_NONE);
    TB_CHECK_INT(tb_store_account_put(s, "m", "{\"id\":\"m\"}", "tbs1.m", 1),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_account_delete(s, "m"), TB_STORE_OK);
    TB_CHECK_INT(tb_store_account_delete(s, "m"), TB_STORE_NONE);

    tb_store_close(s);

    /* what another connection reads back: added order, the update kept */
    s = tb_store_open(db, 100, err, sizeof(err));
    TB_CHECK(s != NULL);

    seen[0] = '\0';
    TB_CHECK_INT(tb_store_accounts(s, tb_accounts_test_cb, seen),
                 TB_STORE_OK);
    TB_CHECK_STR(seen, "z={\"id\":\"z\"}/tbs1.z;"
                       "a={\"id\":\"a\",\"priority\":1}/tbs1.a2;");

    tb_store_close(s);

    snprintf(err, sizeof(err), "rm -rf %s", path);
    TB_CHECK_INT(system(err), 0);
}


static int
tb_history_test_cb(void *data, uint64_t seq, const void *blob, size_t len)
{
    uint64_t  *seqs = data;

    TB_CHECK_INT(len, 8);
    TB_CHECK(memcmp(blob, &seq, 8) == 0);

    seqs[++seqs[0]] = seq;

    return 0;
}


TB_TEST(store_history)
{
    char         path[] = "/tmp/tb-history-XXXXXX", err[512], db[64],
                 buf[32];
    uint64_t     seq, seqs[16];
    tb_store_t  *s;

    TB_CHECK(mkdtemp(path) != NULL);
    snprintf(db, sizeof(db), "%s/t.db", path);

    s = tb_store_open(db, 100, err, sizeof(err));
    TB_CHECK(s != NULL);

    TB_CHECK_INT(tb_store_begin(s), TB_STORE_OK);

    for (seq = 1; seq <= 10; seq++) {
        TB_CHECK_INT(tb_store_history_put(s, TB_STORE_RECORDS, seq, &seq, 8),
                     TB_STORE_OK);
    }

    /* written again (a flush retried after a failure): replaced */
    seq = 4;
    TB_CHECK_INT(tb_store_history_put(s, TB_STORE_RECORDS, 4, &seq, 8),
                 TB_STORE_OK);

    seq = 77;
    TB_CHECK_INT(tb_store_history_put(s, TB_STORE_EVENTS, 77, &seq, 8),
                 TB_STORE_OK);

    /* the newest 6 kept */
    TB_CHECK_INT(tb_store_history_prune(s, TB_STORE_RECORDS, 6), TB_STORE_OK);
    TB_CHECK_INT(tb_store_commit(s), TB_STORE_OK);

    memset(seqs, 0, sizeof(seqs));
    TB_CHECK_INT(tb_store_history(s, TB_STORE_RECORDS, 100,
                                  tb_history_test_cb, seqs), TB_STORE_OK);
    TB_CHECK_INT(seqs[0], 6);
    TB_CHECK_INT(seqs[1], 5);
    TB_CHECK_INT(seqs[6], 10);

    /* the newest 3 of them, oldest first */
    memset(seqs, 0, sizeof(seqs));
    TB_CHECK_INT(tb_store_history(s, TB_STORE_RECORDS, 3,
                                  tb_history_test_cb, seqs), TB_STORE_OK);
    TB_CHECK_INT(seqs[0], 3);
    TB_CHECK_INT(seqs[1], 8);
    TB_CHECK_INT(seqs[3], 10);

    /* the other kind untouched by the prune */
    memset(seqs, 0, sizeof(seqs));
    TB_CHECK_INT(tb_store_history(s, TB_STORE_EVENTS, 100,
                                  tb_history_test_cb, seqs), TB_STORE_OK);
    TB_CHECK_INT(seqs[0], 1);

    /* a rolled back transaction leaves nothing */
    TB_CHECK_INT(tb_store_begin(s), TB_STORE_OK);
    seq = 11;
    TB_CHECK_INT(tb_store_history_put(s, TB_STORE_RECORDS, 11, &seq, 8),
                 TB_STORE_OK);
    tb_store_rollback(s);
    memset(seqs, 0, sizeof(seqs));
    TB_CHECK_INT(tb_store_history(s, TB_STORE_RECORDS, 100,
                                  tb_history_test_cb, seqs), TB_STORE_OK);
    TB_CHECK_INT(seqs[0], 6);

    TB_CHECK_INT(tb_store_meta_put(s, "setting.x", "y"), TB_STORE_OK);
    TB_CHECK_INT(tb_store_meta_get(s, "setting.x", buf, sizeof(buf)),
                 TB_STORE_OK);
    TB_CHECK_STR(buf, "y");
    TB_CHECK_INT(tb_store_meta_get(s, "nope", buf, sizeof(buf)),
                 TB_STORE_NONE);

    tb_store_close(s);

    snprintf(err, sizeof(err), "rm -rf %s", path);
    TB_CHECK_INT(system(err), 0);
}


int
main(void)
{
    TB_RUN(secret);
    TB_RUN(create_defaults_and_fields);
    TB_RUN(refused);
    TB_RUN(patch_changes_only_what_it_names);
    TB_RUN(written_and_read_back);
    TB_RUN(store_keys);
    TB_RUN(store_accounts);
    TB_RUN(store_history);

    return tb_test_done();
}
