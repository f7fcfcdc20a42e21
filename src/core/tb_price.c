/*
 * Prices and costs (see tb_price.h).
 */

#include "tb_price.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


/* how well pattern matches model: its length + 1, or 0 */
static size_t
tb_price_match(const char *pattern, const char *model, size_t len)
{
    size_t  i, n;

    n = strlen(pattern);

    if (n && pattern[n - 1] == '*') {
        n--;
        return (len >= n && memcmp(model, pattern, n) == 0) ? n + 1 : 0;
    }

    if (len < n || memcmp(model, pattern, n) != 0) {
        return 0;
    }

    if (len == n || model[n] == '@' || model[n] == ':' || model[n] == '[') {
        return n + 1;
    }

    /* a dated id: "-" and eight digits, then the end or a qualifier; a
     * "-" and anything else is another model ("claude-opus-4-9" is not
     * "claude-opus-4") */

    if (model[n] != '-' || len < n + 9) {
        return 0;
    }

    for (i = n + 1; i < n + 9; i++) {
        if (model[i] < '0' || model[i] > '9') {
            return 0;
        }
    }

    if (len == n + 9 || model[n + 9] == '@' || model[n + 9] == ':'
        || model[n + 9] == '[' || model[n + 9] == '-')
    {
        return n + 1;
    }

    return 0;
}


const tb_model_price_t *
tb_price_find(const tb_price_table_t *first, const tb_price_table_t *second,
    const char *model, size_t len)
{
    size_t                   i, m, best;
    const tb_model_price_t  *found;
    const tb_price_table_t  *t[2];
    int                      k;

    t[0] = first;
    t[1] = second;

    found = NULL;
    best = 0;

    for (k = 0; k < 2; k++) {
        if (t[k] == NULL) {
            continue;
        }

        for (i = 0; i < t[k]->n; i++) {
            m = tb_price_match(t[k]->models[i].pattern, model, len);

            /* strictly longer: the first table wins a tie */
            if (m > best) {
                best = m;
                found = &t[k]->models[i];
            }
        }
    }

    return found;
}


static int64_t
tb_cost_part(int64_t tokens, int64_t rate)
{
    return tokens > 0 ? tokens * rate : 0;
}


int64_t
tb_cost(const tb_model_price_t *p, const tb_cost_usage_t *u, int batch)
{
    int64_t  c, w1h, w5m;

    if (p == NULL) {
        return -1;
    }

    w1h = u->cache_write_1h > 0 ? u->cache_write_1h : 0;
    w5m = u->cache_write > 0 ? u->cache_write : 0;

    /* a 1-hour part larger than the writes is taken as all of them */
    if (w1h > w5m) {
        w1h = w5m;
    }

    w5m -= w1h;

    c = tb_cost_part(u->input, p->input)
        + tb_cost_part(u->output, p->output)
        + tb_cost_part(u->cache_read, p->cache_read)
        + tb_cost_part(w5m, p->cache_write_5m)
        + tb_cost_part(w1h, p->cache_write_1h);

    return batch ? (c + 1) / 2 : c;
}


size_t
tb_cost_format(int64_t nanodollars, char *buf, size_t size)
{
    int      n;
    int64_t  micro;

    if (nanodollars < 0) {
        n = snprintf(buf, size, "null");

    } else {
        /* to the nearest micro-dollar */
        micro = (nanodollars + 500) / 1000;
        n = snprintf(buf, size, "%lld.%06lld", (long long) (micro / 1000000),
                     (long long) (micro % 1000000));
    }

    return (n < 0) ? 0 : ((size_t) n < size ? (size_t) n : size - 1);
}


static int64_t
tb_price_nano(double usd_per_mtok)
{
    return (int64_t) llround(usd_per_mtok * 1000);
}


void
tb_price_table_from(tb_price_table_t *t, tb_model_price_t *out,
    const tb_price_t *p, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        out[i].pattern = p[i].pattern;
        out[i].input = tb_price_nano(p[i].input);
        out[i].output = tb_price_nano(p[i].output);
        out[i].cache_read = tb_price_nano(p[i].cache_read);
        out[i].cache_write_5m = tb_price_nano(p[i].cache_write);
        out[i].cache_write_1h = tb_price_nano(p[i].cache_write_1h);
    }

    t->as_of = "";
    t->source = "the YAML file";
    t->models = out;
    t->n = n;
}


int32_t
tb_price_date(const tb_price_table_t *builtin, const tb_model_price_t *p)
{
    int32_t      d;
    const char  *s;

    if (builtin == NULL || p < builtin->models
        || p >= builtin->models + builtin->n)
    {
        return 0;
    }

    /* "YYYY-MM-DD" */
    d = 0;

    for (s = builtin->as_of; *s; s++) {
        if (*s >= '0' && *s <= '9') {
            d = d * 10 + (*s - '0');
        }
    }

    return d;
}
