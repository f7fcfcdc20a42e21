/*
 * A spend ledger over a trailing window: what a key, an account or a
 * conversation spent (nanodollars) and how many turns it ran, in buckets
 * of a 24th of the window, and what its requests in flight reserved.
 *
 * A charge counts from its bucket until that bucket is 25 buckets old:
 * between one window and one window and a bucket after it was made, never
 * less, so a cap is never lifted early.  Times are passed in (ms); the
 * caller holds whatever lock the ledger needs.  Reading (spent, frees_at)
 * writes nothing, so a reader without the lock gets an approximation and
 * never a torn structure.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_LEDGER_H
#define TB_LEDGER_H

#include <stdint.h>


#define TB_LEDGER_BUCKETS         24      /* a window */
#define TB_LEDGER_SLOTS           25      /* a window and the current */


typedef struct {
    int64_t                   bucket_ms;  /* its buckets'; 0: none yet */
    int64_t                   head;       /* the newest bucket's index
                                             (time / bucket_ms); 0: none */
    int64_t                   cost[TB_LEDGER_SLOTS];     /* nanodollars */
    uint16_t                  turns[TB_LEDGER_SLOTS];     /* saturating */
    int64_t                   reserved;   /* in flight, nanodollars */
    int64_t                   reserved_turns;
    uint64_t                  seq;        /* the caller's: its last change */
} tb_ledger_t;


/*
 * A ledger made with buckets of another length (a window changed since,
 * a ledger read back) is read and charged as if its charges had been made
 * at the start of their buckets.
 */

/* a window's bucket length in ms (>= 1) */
int64_t tb_ledger_bucket_ms(double window_hours);

/* what the window holds at now: cost (nanodollars); *turns if not NULL */
int64_t tb_ledger_spent(const tb_ledger_t *l, int64_t now, int64_t bucket_ms,
    int64_t *turns);

/*
 * What it has spent lately, in nanodollars an hour: its buckets of the
 * last hour at least (two at the least), over the time they cover to now.
 */
int64_t tb_ledger_rate(const tb_ledger_t *l, int64_t now, int64_t bucket_ms);

/*
 * A settled request at time t: cost (>= 0) and turns into t's bucket; a
 * t older than the window is dropped, a newer one rolls the window.
 */
void tb_ledger_charge(tb_ledger_t *l, int64_t t, int64_t bucket_ms,
    int64_t cost, int64_t turns);

/*
 * Whether a cap (nanodollars; -1: none) is reached: spent and reserved
 * at or over it.
 */
int tb_ledger_over(const tb_ledger_t *l, int64_t now, int64_t bucket_ms,
    int64_t cap);

/*
 * When the window will have dropped enough that spent and reserved are
 * under limit (cost, or turns with by_turns): the time in ms, now if
 * they already are, 0 if no charge leaving can do it (what is in flight
 * holds it).
 */
int64_t tb_ledger_frees_at(const tb_ledger_t *l, int64_t now,
    int64_t bucket_ms, int64_t limit, int by_turns);

/* src's charges into dst (zeroed first), in buckets of bucket_ms */
void tb_ledger_rebucket(tb_ledger_t *dst, const tb_ledger_t *src,
    int64_t bucket_ms);

/* a cap in USD (negative: none) in nanodollars (-1: none) */
int64_t tb_usd_to_nd(double usd);

/*
 * "0.01", "1.2345", "41.20": nanodollars as dollars, to the micro-dollar,
 * with at least two decimals and no trailing zeros past them; its length.
 */
size_t tb_usd_format(int64_t nd, char *buf, size_t size);

/* "45s", "12m 5s", "3h 12m", "2d 4h": a wait in words; its length */
size_t tb_wait_format(int64_t ms, char *buf, size_t size);

/* "950", "702k", "1.00M", "12.3M": a count of tokens to read; its length */
size_t tb_tokens_format(int64_t n, char *buf, size_t size);

#endif /* TB_LEDGER_H */
