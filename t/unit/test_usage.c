/*
 * Unit tests: the usage history in the store - buckets added to, read by
 * range, step and group, rolled up (minutes into hours after two days,
 * hours into days after 31) and pruned after 90 days, time injected - and
 * the spend ledgers and conversations written and read back.
 */

#include <stdlib.h>
#include <unistd.h>

#include "tb_test.h"
#include "tb_store.h"
#include "tb_ledger.h"


#define DAY   86400LL
#define NOW   (20000LL * DAY + 7 * 3600 + 1234)


typedef struct {
    int             n;
    int64_t         t[64];
    char            g[64][32];
    tb_usage_row_t  u[64];
} points_t;


static int
collect(void *data, int64_t t, const char *group, const tb_usage_row_t *u)
{
    points_t *p = data;

    if (p->n < 64) {
        p->t[p->n] = t;
        snprintf(p->g[p->n], sizeof(p->g[0]), "%s", group ? group : "");
        p->u[p->n] = *u;
        p->n++;
    }

    return 0;
}


static tb_store_t *
open_store(char *dir, size_t size)
{
    char  err[512], db[96];

    snprintf(dir, size, "/tmp/tb-usage-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        return NULL;
    }

    snprintf(db, sizeof(db), "%s/t.db", dir);

    return tb_store_open(db, 100, err, sizeof(err));
}


static void
close_store(tb_store_t *s, const char *dir)
{
    char  cmd[160];

    tb_store_close(s);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void) system(cmd);
}


static tb_usage_row_t
row(int64_t requests, int64_t cost)
{
    tb_usage_row_t  u;

    memset(&u, 0, sizeof(u));
    u.requests = requests;
    u.input = 10 * requests;
    u.output = 20 * requests;
    u.cost = cost;

    return u;
}


TB_TEST(buckets_add_up_by_group)
{
    char            dir[64];
    points_t        p;
    tb_store_t     *s;
    tb_usage_row_t  u;

    s = open_store(dir, sizeof(dir));
    TB_CHECK(s != NULL);
    if (s == NULL) {
        return;
    }

    u = row(1, 100);
    TB_CHECK_INT(tb_store_usage_add(s, 60, NOW / 60 * 60, "a1", "m", "k1", &u),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_usage_add(s, 60, NOW / 60 * 60, "a1", "m", "k1", &u),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_usage_add(s, 60, NOW / 60 * 60 - 60, "a2", "m",
                                    "k2", &u), TB_STORE_OK);

    /* by key, in minutes: two buckets */
    memset(&p, 0, sizeof(p));
    TB_CHECK_INT(tb_store_usage(s, NOW - 3600, 60, TB_STORE_BY_KEY, collect,
                                &p), TB_STORE_OK);
    TB_CHECK_INT(p.n, 2);
    TB_CHECK(strcmp(p.g[0], "k2") == 0);
    TB_CHECK(strcmp(p.g[1], "k1") == 0);
    TB_CHECK_INT(p.u[1].requests, 2);
    TB_CHECK_INT(p.u[1].cost, 200);
    TB_CHECK_INT(p.u[1].output, 40);

    /* all in one, by the hour */
    memset(&p, 0, sizeof(p));
    TB_CHECK_INT(tb_store_usage(s, NOW - 3600, 3600, TB_STORE_BY_NONE,
                                collect, &p), TB_STORE_OK);
    TB_CHECK(p.n >= 1 && p.n <= 2);
    TB_CHECK_INT(p.u[0].requests + (p.n == 2 ? p.u[1].requests : 0), 3);

    /* a range that starts after them: nothing */
    memset(&p, 0, sizeof(p));
    TB_CHECK_INT(tb_store_usage(s, NOW + 60, 60, TB_STORE_BY_ACCOUNT,
                                collect, &p), TB_STORE_OK);
    TB_CHECK_INT(p.n, 0);

    close_store(s, dir);
}


TB_TEST(rolled_up_and_pruned)
{
    int64_t         cost, reqs;
    int             i;
    char            dir[64];
    points_t        p;
    tb_store_t     *s;
    tb_usage_row_t  u;

    s = open_store(dir, sizeof(dir));
    TB_CHECK(s != NULL);
    if (s == NULL) {
        return;
    }

    u = row(1, 7);

    /* minutes of three days ago (one hour's worth), of 40 and of 100 */
    for (i = 0; i < 60; i++) {
        TB_CHECK_INT(tb_store_usage_add(s, 60, (NOW - 3 * DAY) / 3600 * 3600
                                        + i * 60, "a1", "m", "k", &u),
                     TB_STORE_OK);
    }

    TB_CHECK_INT(tb_store_usage_add(s, 60, NOW - 40 * DAY, "a1", "m", "k",
                                    &u), TB_STORE_OK);
    TB_CHECK_INT(tb_store_usage_add(s, 60, NOW - 100 * DAY, "a1", "m", "k",
                                    &u), TB_STORE_OK);
    /* and one of now, left as it is */
    TB_CHECK_INT(tb_store_usage_add(s, 60, NOW / 60 * 60, "a1", "m", "k", &u),
                 TB_STORE_OK);

    TB_CHECK_INT(tb_store_usage_rollup(s, NOW), TB_STORE_OK);

    /* the 30-day view: every request but the 100-day-old one, same cost */
    memset(&p, 0, sizeof(p));
    TB_CHECK_INT(tb_store_usage(s, NOW - 60 * DAY, 86400, TB_STORE_BY_NONE,
                                collect, &p), TB_STORE_OK);

    reqs = 0;
    cost = 0;

    for (i = 0; i < p.n; i++) {
        reqs += p.u[i].requests;
        cost += p.u[i].cost;
    }

    TB_CHECK_INT(reqs, 62);
    TB_CHECK_INT(cost, 62 * 7);

    /* the three-day-old hour is one hour bucket now: its minutes are gone */
    memset(&p, 0, sizeof(p));
    TB_CHECK_INT(tb_store_usage(s, NOW - 4 * DAY, 60, TB_STORE_BY_NONE,
                                collect, &p), TB_STORE_OK);
    TB_CHECK_INT(p.n, 2);
    TB_CHECK_INT(p.t[0] % 3600, 0);
    TB_CHECK_INT(p.u[0].requests, 60);
    TB_CHECK_INT(p.u[1].requests, 1);

    /* rolling up again changes nothing */
    TB_CHECK_INT(tb_store_usage_rollup(s, NOW), TB_STORE_OK);
    memset(&p, 0, sizeof(p));
    TB_CHECK_INT(tb_store_usage(s, NOW - 4 * DAY, 60, TB_STORE_BY_NONE,
                                collect, &p), TB_STORE_OK);
    TB_CHECK_INT(p.n, 2);
    TB_CHECK_INT(p.u[0].requests, 60);

    close_store(s, dir);
}


typedef struct {
    int          n;
    int          scope;
    char         id[32];
    tb_ledger_t  l;
} ledgers_t;


static int
ledger_cb(void *data, int scope, const char *id, const void *blob, size_t len)
{
    ledgers_t *ls = data;

    ls->n++;
    ls->scope = scope;
    snprintf(ls->id, sizeof(ls->id), "%s", id);

    if (len == sizeof(tb_ledger_t)) {
        memcpy(&ls->l, blob, len);
    }

    return 0;
}


static int
session_cb(void *data, uint64_t seq, const void *blob, size_t len)
{
    int *n = data;

    (*n)++;

    return !(seq > 0 && len == 5 && memcmp(blob, "hello", 5) == 0);
}


TB_TEST(ledgers_and_sessions_kept)
{
    int          n;
    char         dir[64];
    ledgers_t    ls;
    tb_store_t  *s;
    tb_ledger_t  l;

    s = open_store(dir, sizeof(dir));
    TB_CHECK(s != NULL);
    if (s == NULL) {
        return;
    }

    memset(&l, 0, sizeof(l));
    tb_ledger_charge(&l, NOW * 1000, 3600000, 12345, 1);

    TB_CHECK_INT(tb_store_ledger_put(s, 2, "00000000000000ff", &l, sizeof(l)),
                 TB_STORE_OK);
    /* written again: replaced, not added */
    tb_ledger_charge(&l, NOW * 1000, 3600000, 5, 1);
    TB_CHECK_INT(tb_store_ledger_put(s, 2, "00000000000000ff", &l, sizeof(l)),
                 TB_STORE_OK);

    memset(&ls, 0, sizeof(ls));
    TB_CHECK_INT(tb_store_ledgers(s, ledger_cb, &ls), TB_STORE_OK);
    TB_CHECK_INT(ls.n, 1);
    TB_CHECK_INT(ls.scope, 2);
    TB_CHECK(strcmp(ls.id, "00000000000000ff") == 0);
    TB_CHECK_INT(tb_ledger_spent(&ls.l, NOW * 1000, 3600000, NULL), 12350);

    TB_CHECK_INT(tb_store_session_put(s, "aa", "k", NOW * 1000 - 91 * DAY
                                      * 1000, "old!!", 5), TB_STORE_OK);
    TB_CHECK_INT(tb_store_session_put(s, "bb", "k", NOW * 1000, "hello", 5),
                 TB_STORE_OK);
    TB_CHECK_INT(tb_store_sessions_prune(s, NOW * 1000 - 90 * DAY * 1000,
                                         100), TB_STORE_OK);

    n = 0;
    TB_CHECK_INT(tb_store_sessions(s, 100, session_cb, &n), TB_STORE_OK);
    TB_CHECK_INT(n, 1);

    close_store(s, dir);
}


int
main(void)
{
    TB_RUN(buckets_add_up_by_group);
    TB_RUN(rolled_up_and_pruned);
    TB_RUN(ledgers_and_sessions_kept);

    return tb_test_done();
}
