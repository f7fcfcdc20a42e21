/*
 * What a request costs: a dated price table, model ids matched by their
 * longest priced prefix, and the cost of a usage in whole nanodollars.
 *
 * Prices are kept as nanodollars per token, which is exactly the USD per
 * million tokens of the price lists times 1000 ($3/MTok is 3000, $0.03/MTok
 * is 30): every published rate is a whole number there, and sums of costs
 * never drift the way binary fractions of a dollar do.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_PRICE_H
#define TB_PRICE_H

#include <stddef.h>
#include <stdint.h>

#include "tb_config.h"


typedef struct {
    const char               *pattern;        /* an id, or "prefix*" */
    int64_t                   input;          /* nanodollars per token */
    int64_t                   output;
    int64_t                   cache_read;
    int64_t                   cache_write_5m;
    int64_t                   cache_write_1h;
} tb_model_price_t;


typedef struct {
    const char               *as_of;          /* "YYYY-MM-DD" */
    const char               *source;         /* where it was read */
    const tb_model_price_t   *models;
    size_t                    n;
} tb_price_table_t;


/* the table shipped with the module (src/core/tb_prices.c) */
extern const tb_price_table_t  tb_price_builtin;


/*
 * The price of a model id, or NULL (an unknown cost, never 0).  A pattern
 * without '*' is an id and every dated or qualified form of it: the id
 * itself, or followed by '@', ':', '[' or a '-' and eight digits
 * ("claude-haiku-4-5" prices "claude-haiku-4-5-20251001",
 * "claude-haiku-4-5@20251001" and "claude-haiku-4-5[1m]", not
 * "claude-haiku-4-55"); a pattern ending in '*' is any id it begins.  The longest matching pattern wins;
 * the first table given (an operator's overrides) before the second (the
 * builtin one) at equal length.  Either table may be NULL.
 */
const tb_model_price_t *tb_price_find(const tb_price_table_t *first,
    const tb_price_table_t *second, const char *model, size_t len);


/*
 * The YAML file's pricing entries (a tb_config_t's prices and nprices) as
 * a table of nanodollars in out (room for n): its patterns point into the
 * entries, rates rounded to the nearest thousandth of a dollar per million
 * tokens.
 */
void tb_price_table_from(tb_price_table_t *t, tb_model_price_t *out,
    const tb_price_t *prices, size_t n);

/*
 * The date of the table a price is from, as YYYYMMDD: builtin's as_of if
 * it is one of builtin's, 0 if it is not (the file's, undated).
 */
int32_t tb_price_date(const tb_price_table_t *builtin,
    const tb_model_price_t *p);

/* a response's usage, as billed: -1 where the answer said nothing */
typedef struct {
    int64_t                   input;          /* uncached input */
    int64_t                   output;
    int64_t                   cache_read;
    int64_t                   cache_write;    /* every cache write */
    int64_t                   cache_write_1h; /* of which 1-hour, -1: not
                                                 said (all priced 5 min) */
} tb_cost_usage_t;


/*
 * The cost in nanodollars: each kind of token at its rate, cache writes
 * the usage says were 1-hour at that rate and the rest at the 5-minute
 * one, halved (rounding half up) for a batch.  -1 when p is NULL.
 */
int64_t tb_cost(const tb_model_price_t *p, const tb_cost_usage_t *u,
    int batch);


/* "1.234567" from nanodollars, to the micro-dollar, into buf; its length */
size_t tb_cost_format(int64_t nanodollars, char *buf, size_t size);

#endif /* TB_PRICE_H */
