/*
 * The price table shipped with the module (pricing: builtin): USD per
 * million tokens times 1000, i.e. nanodollars per token (tb_price.h).
 *
 * Read from Anthropic's price list (the source below) on the date below:
 * base input, 5-minute and 1-hour cache writes, cache hits, output.  Models
 * whose every rate that list did not give plainly are left out, so that
 * their cost is unknown rather than wrong: Claude Opus 5.5, Sonnet 5.5 and
 * Haiku 5.5 (whose price depends on the prompt's length).  Give them under
 * pricing: in the YAML file; an operator's entries win over these.
 */

#include "tb_price.h"


static const tb_model_price_t  tb_prices[] = {

    /* pattern                input  output  read  write5m  write1h */

    { "claude-fable-5-1",     10000, 50000,   250, 12500, 20000 },
    { "claude-mythos-5-1",    10000, 50000,   250, 12500, 20000 },
    { "claude-fable-5",       10000, 50000,  1000, 12500, 20000 },
    { "claude-mythos-5",      10000, 50000,  1000, 12500, 20000 },

    { "claude-opus-5",         5000, 25000,   500,  6250, 10000 },
    { "claude-opus-4-8",       5000, 25000,   500,  6250, 10000 },
    { "claude-opus-4-7",       5000, 25000,   500,  6250, 10000 },
    { "claude-opus-4-6",       5000, 25000,   500,  6250, 10000 },
    { "claude-opus-4-5",       5000, 25000,   500,  6250, 10000 },
    { "claude-opus-4-1",      15000, 75000,  1500, 18750, 30000 },
    { "claude-opus-4",        15000, 75000,  1500, 18750, 30000 },
    { "claude-3-opus",        15000, 75000,  1500, 18750, 30000 },

    { "claude-sonnet-5",       2000, 10000,   200,  2500,  4000 },
    { "claude-sonnet-4-6",     3000, 15000,   300,  3750,  6000 },
    { "claude-sonnet-4-5",     3000, 15000,   300,  3750,  6000 },
    { "claude-sonnet-4",       3000, 15000,   300,  3750,  6000 },
    { "claude-3-7-sonnet",     3000, 15000,   300,  3750,  6000 },

    { "claude-haiku-4-5",      1000,  5000,   100,  1250,  2000 },
    { "claude-3-5-haiku",       800,  4000,    80,  1000,  1600 },
    { "claude-3-haiku",         250,  1250,    30,   300,   500 },
};


const tb_price_table_t  tb_price_builtin = {
    "2026-12-02",
    "https://platform.claude.com/docs/en/about-claude/pricing",
    tb_prices,
    sizeof(tb_prices) / sizeof(tb_prices[0])
};
