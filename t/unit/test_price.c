/*
 * Prices: longest-prefix matching, overrides, unpriced models, and the
 * cost of cached and uncached turns against figures computed by hand.
 */

#include "tb_test.h"
#include "tb_price.h"
#include "tb_config.h"


static const tb_model_price_t *
find(const tb_price_table_t *first, const char *model)
{
    return tb_price_find(first, &tb_price_builtin, model, strlen(model));
}


TB_TEST(dated_and_qualified_ids)
{
    const tb_model_price_t  *p;

    p = find(NULL, "claude-haiku-4-5-20251001");
    TB_CHECK(p != NULL);
    TB_CHECK_STR(p->pattern, "claude-haiku-4-5");

    p = find(NULL, "claude-haiku-4-5@20251001");
    TB_CHECK(p != NULL && strcmp(p->pattern, "claude-haiku-4-5") == 0);

    p = find(NULL, "claude-sonnet-4-5-20250929[1m]");
    TB_CHECK(p != NULL && strcmp(p->pattern, "claude-sonnet-4-5") == 0);

    p = find(NULL, "claude-haiku-4-5");
    TB_CHECK(p != NULL && strcmp(p->pattern, "claude-haiku-4-5") == 0);
}


TB_TEST(longest_prefix_wins)
{
    const tb_model_price_t  *p;

    /* "claude-opus-4" prefixes these too: the longer pattern wins */
    p = find(NULL, "claude-opus-4-1-20250805");
    TB_CHECK(p != NULL && strcmp(p->pattern, "claude-opus-4-1") == 0);
    TB_CHECK_INT(p->input, 15000);

    p = find(NULL, "claude-opus-4-6");
    TB_CHECK(p != NULL && strcmp(p->pattern, "claude-opus-4-6") == 0);
    TB_CHECK_INT(p->input, 5000);

    /* the dated Opus 4 is Opus 4 */
    p = find(NULL, "claude-opus-4-20250514");
    TB_CHECK(p != NULL && strcmp(p->pattern, "claude-opus-4") == 0);

    /* Fable 5.1 is not Fable 5 */
    p = find(NULL, "claude-fable-5-1");
    TB_CHECK(p != NULL && p->cache_read == 250);
    p = find(NULL, "claude-fable-5");
    TB_CHECK(p != NULL && p->cache_read == 1000);
}


TB_TEST(unpriced_is_unknown)
{
    tb_cost_usage_t  u = { 100, 100, 0, 0, -1 };

    /* another model that begins like a priced one is not that one */
    TB_CHECK(find(NULL, "claude-opus-4-9") == NULL);
    TB_CHECK(find(NULL, "claude-haiku-4-55") == NULL);
    TB_CHECK(find(NULL, "claude-sonnet-5-5") == NULL);
    TB_CHECK(find(NULL, "gpt-4o") == NULL);
    TB_CHECK(find(NULL, "") == NULL);

    /* and its cost is unknown, never 0 */
    TB_CHECK_INT(tb_cost(NULL, &u, 0), -1);
}


TB_TEST(overrides_win)
{
    const tb_model_price_t  *p;

    static const tb_model_price_t  mine[] = {
        { "claude-haiku-4-5", 2000, 8000, 200, 2500, 4000 },
        { "claude-sonnet-5-5*", 2000, 10000, 100, 2500, 4000 },
        { "my-*", 1, 1, 1, 1, 1 },
    };
    static const tb_price_table_t  ops = { "", "the YAML file", mine, 3 };

    /* the same pattern: the operator's */
    p = find(&ops, "claude-haiku-4-5-20251001");
    TB_CHECK(p == &mine[0]);

    /* a wildcard of the operator's, for a model the table leaves out */
    p = find(&ops, "claude-sonnet-5-5");
    TB_CHECK(p == &mine[1]);
    p = find(&ops, "claude-sonnet-5-5[1m]");
    TB_CHECK(p == &mine[1]);

    /* a longer builtin pattern still beats a shorter override */
    p = find(&ops, "my-model");
    TB_CHECK(p == &mine[2]);
    p = find(&ops, "claude-sonnet-4-6");
    TB_CHECK(p != NULL && strcmp(p->pattern, "claude-sonnet-4-6") == 0);
}


TB_TEST(cost_by_hand)
{
    char                     buf[32];
    tb_cost_usage_t          u;
    const tb_model_price_t  *p;

    /*
     * Sonnet 4.6 ($3 in, $15 out, $0.30 read, $3.75 5-min write, $6 1-hour
     * write per MTok), an uncached turn: 1,200 in, 300 out
     *   = 1200 * 3/1e6 + 300 * 15/1e6 = 0.0036 + 0.0045 = $0.0081
     */
    p = find(NULL, "claude-sonnet-4-6");
    TB_CHECK(p != NULL);

    u.input = 1200;
    u.output = 300;
    u.cache_read = 0;
    u.cache_write = 0;
    u.cache_write_1h = -1;
    TB_CHECK_INT(tb_cost(p, &u, 0), 8100000);
    tb_cost_format(tb_cost(p, &u, 0), buf, sizeof(buf));
    TB_CHECK_STR(buf, "0.008100");

    /*
     * The first cached turn: 20 in, 300 out, 10,000 written for 5 minutes
     *   = 0.00006 + 0.0045 + 10000 * 3.75/1e6 (0.0375) = $0.04206
     */
    u.input = 20;
    u.cache_write = 10000;
    TB_CHECK_INT(tb_cost(p, &u, 0), 42060000);

    /*
     * The next: 20 in, 300 out, 10,000 read
     *   = 0.00006 + 0.0045 + 10000 * 0.30/1e6 (0.003) = $0.00756
     */
    u.cache_write = 0;
    u.cache_read = 10000;
    TB_CHECK_INT(tb_cost(p, &u, 0), 7560000);

    /*
     * A write split: 4,000 of 10,000 for 1 hour
     *   = 0.00006 + 0.0045 + 6000 * 3.75/1e6 (0.0225) + 4000 * 6/1e6 (0.024)
     *   = $0.05106
     */
    u.cache_read = 0;
    u.cache_write = 10000;
    u.cache_write_1h = 4000;
    TB_CHECK_INT(tb_cost(p, &u, 0), 51060000);

    /* a batch: half, rounded half up */
    TB_CHECK_INT(tb_cost(p, &u, 1), 25530000);

    /* Haiku 3's $0.03/MTok read is a whole number of nanodollars: 30 */
    p = find(NULL, "claude-3-haiku-20240307");
    TB_CHECK(p != NULL);
    u.input = 0;
    u.output = 0;
    u.cache_write = 0;
    u.cache_write_1h = -1;
    u.cache_read = 1;
    TB_CHECK_INT(tb_cost(p, &u, 0), 30);
    TB_CHECK_INT(tb_cost(p, &u, 1), 15);

    /* unknown parts (-1) count nothing */
    u.input = -1;
    u.output = -1;
    u.cache_read = -1;
    u.cache_write = -1;
    TB_CHECK_INT(tb_cost(p, &u, 0), 0);
}


TB_TEST(the_files_entries)
{
    char                     err[256];
    tb_config_t             *cf;
    tb_model_price_t         out[4];
    tb_price_table_t         t;
    tb_cost_usage_t          u = { 1000000, 1000000, 1000000, 1000000, -1 };
    const tb_model_price_t  *p;

    static const char  yaml[] =
        "pricing:\n"
        "  builtin: true\n"
        "  claude-haiku-4-5: {input: 0.9, output: 4.5}\n"
        "  acme-*: {input: 0.0004, output: 1.2345678}\n";

    cf = tb_config_load_buffer("t.yaml", yaml, sizeof(yaml) - 1, NULL, err,
                               sizeof(err));
    TB_CHECK(cf != NULL);
    if (cf == NULL) {
        return;
    }

    TB_CHECK_INT(cf->nprices, 2);
    tb_price_table_from(&t, out, cf->prices, cf->nprices);
    TB_CHECK_INT(t.n, 2);

    /* the file's Haiku 4.5, over the builtin one; its cache rates the
     * standard multiples: 1M each of input, output, read, 5-minute write
     *   = 0.9 + 4.5 + 0.09 + 1.125 = $6.615 */
    p = tb_price_find(&t, &tb_price_builtin, "claude-haiku-4-5-20251001",
                      sizeof("claude-haiku-4-5-20251001") - 1);
    TB_CHECK(p == &out[0]);
    TB_CHECK_INT(tb_cost(p, &u, 0), 6615000000LL);

    /* rounded to a thousandth of a dollar per MTok */
    p = tb_price_find(&t, &tb_price_builtin, "acme-1", 6);
    TB_CHECK(p == &out[1]);
    TB_CHECK_INT(p->input, 0);
    TB_CHECK_INT(p->output, 1235);

    tb_config_free(cf);
}


TB_TEST(format)
{
    char  buf[32];

    tb_cost_format(0, buf, sizeof(buf));
    TB_CHECK_STR(buf, "0.000000");
    tb_cost_format(499, buf, sizeof(buf));
    TB_CHECK_STR(buf, "0.000000");
    tb_cost_format(500, buf, sizeof(buf));
    TB_CHECK_STR(buf, "0.000001");
    tb_cost_format(41200000000LL, buf, sizeof(buf));
    TB_CHECK_STR(buf, "41.200000");
    tb_cost_format(-1, buf, sizeof(buf));
    TB_CHECK_STR(buf, "null");
}


TB_TEST(table_is_dated_and_sourced)
{
    size_t  i, j;

    TB_CHECK_INT(strlen(tb_price_builtin.as_of), 10);
    TB_CHECK(strncmp(tb_price_builtin.source, "https://", 8) == 0);
    TB_CHECK(tb_price_builtin.n > 10);

    /* no pattern twice, every rate positive, cache reads below input */
    for (i = 0; i < tb_price_builtin.n; i++) {
        const tb_model_price_t  *p = &tb_price_builtin.models[i];

        TB_CHECK(p->input > 0 && p->output > p->input);
        TB_CHECK(p->cache_read > 0 && p->cache_read < p->input);
        TB_CHECK(p->cache_write_5m > p->input);
        TB_CHECK(p->cache_write_1h > p->cache_write_5m);

        for (j = i + 1; j < tb_price_builtin.n; j++) {
            TB_CHECK(strcmp(p->pattern, tb_price_builtin.models[j].pattern)
                     != 0);
        }
    }
}


int
main(void)
{
    TB_RUN(dated_and_qualified_ids);
    TB_RUN(longest_prefix_wins);
    TB_RUN(unpriced_is_unknown);
    TB_RUN(overrides_win);
    TB_RUN(cost_by_hand);
    TB_RUN(the_files_entries);
    TB_RUN(format);
    TB_RUN(table_is_dated_and_sourced);

    return tb_test_done();
}
