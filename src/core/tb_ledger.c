/*
 * A spend ledger over a trailing window (see tb_ledger.h).
 */

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tb_ledger.h"


int64_t
tb_ledger_bucket_ms(double window_hours)
{
    double  ms;

    ms = window_hours * 3600000.0 / TB_LEDGER_BUCKETS;

    if (!(ms >= 1)) {
        return 1;
    }

    if (ms > 1e15) {
        return (int64_t) 1e15;
    }

    return (int64_t) ms;
}


/* the oldest bucket index the window holds at bucket b */
static int64_t
tb_ledger_first(const tb_ledger_t *l, int64_t b)
{
    int64_t  first;

    first = (b > l->head ? b : l->head) - TB_LEDGER_SLOTS + 1;

    return first;
}


/* l in buckets of bucket_ms: itself, or rebucketed into copy */
static const tb_ledger_t *
tb_ledger_view(tb_ledger_t *copy, const tb_ledger_t *l, int64_t bucket_ms)
{
    if (l->bucket_ms == 0 || l->bucket_ms == bucket_ms) {
        return l;
    }

    tb_ledger_rebucket(copy, l, bucket_ms);
    copy->reserved = l->reserved;
    copy->reserved_turns = l->reserved_turns;

    return copy;
}


int64_t
tb_ledger_spent(const tb_ledger_t *l, int64_t now, int64_t bucket_ms,
    int64_t *turns)
{
    int64_t      b, k, first, cost, n;
    tb_ledger_t  copy;

    bucket_ms = (bucket_ms < 1) ? 1 : bucket_ms;
    l = tb_ledger_view(&copy, l, bucket_ms);

    b = now / bucket_ms;
    first = tb_ledger_first(l, b);
    cost = 0;
    n = 0;

    for (k = l->head; k >= first && k > l->head - TB_LEDGER_SLOTS; k--) {
        if (k < 0) {
            break;
        }

        cost += l->cost[k % TB_LEDGER_SLOTS];
        n += l->turns[k % TB_LEDGER_SLOTS];
    }

    if (turns) {
        *turns = n;
    }

    return cost;
}


int64_t
tb_ledger_rate(const tb_ledger_t *l, int64_t now, int64_t bucket_ms)
{
    int64_t      b, k, from, n, cost;
    tb_ledger_t  copy;

    bucket_ms = (bucket_ms < 1) ? 1 : bucket_ms;
    l = tb_ledger_view(&copy, l, bucket_ms);

    /* the buckets that cover the last hour, the current one included */

    n = 3600000 / bucket_ms + 1;
    n = (n < 2) ? 2 : (n > TB_LEDGER_SLOTS) ? TB_LEDGER_SLOTS : n;

    b = now / bucket_ms;
    from = b - n + 1;
    cost = 0;

    for (k = (l->head < b ? l->head : b); k >= from && k >= 0; k--) {
        if (k > l->head - TB_LEDGER_SLOTS) {
            cost += l->cost[k % TB_LEDGER_SLOTS];
        }
    }

    if (now <= from * bucket_ms) {
        return 0;
    }

    return (int64_t) ((double) cost * 3600000 / (now - from * bucket_ms));
}


void
tb_ledger_charge(tb_ledger_t *l, int64_t t, int64_t bucket_ms, int64_t cost,
    int64_t turns)
{
    int64_t      b, k, from;
    tb_ledger_t  copy;

    if (bucket_ms < 1) {
        bucket_ms = 1;
    }

    if (l->bucket_ms != bucket_ms) {
        if (l->bucket_ms) {
            copy = *l;
            tb_ledger_rebucket(l, &copy, bucket_ms);
            l->reserved = copy.reserved;
            l->reserved_turns = copy.reserved_turns;
            l->seq = copy.seq;
        }

        l->bucket_ms = bucket_ms;
    }

    if (t < 0) {
        return;
    }

    b = t / bucket_ms;

    if (b > l->head) {
        /* the buckets between the newest and this one are empty */

        from = l->head + 1;

        if (from < b - TB_LEDGER_SLOTS + 1) {
            from = b - TB_LEDGER_SLOTS + 1;
        }

        for (k = from; k <= b; k++) {
            l->cost[k % TB_LEDGER_SLOTS] = 0;
            l->turns[k % TB_LEDGER_SLOTS] = 0;
        }

        l->head = b;
    }

    if (b <= l->head - TB_LEDGER_SLOTS) {
        /* older than anything the window holds */
        return;
    }

    if (cost > 0) {
        l->cost[b % TB_LEDGER_SLOTS] += cost;
    }

    if (turns > 0) {
        turns += l->turns[b % TB_LEDGER_SLOTS];
        l->turns[b % TB_LEDGER_SLOTS] = (uint16_t) (turns < 65535 ? turns
                                                                  : 65535);
    }
}


int
tb_ledger_over(const tb_ledger_t *l, int64_t now, int64_t bucket_ms,
    int64_t cap)
{
    if (cap < 0) {
        return 0;
    }

    return tb_ledger_spent(l, now, bucket_ms, NULL) + l->reserved >= cap;
}


int64_t
tb_ledger_frees_at(const tb_ledger_t *l, int64_t now, int64_t bucket_ms,
    int64_t limit, int by_turns)
{
    int64_t      b, k, first, held, turns, v;
    tb_ledger_t  copy;

    bucket_ms = (bucket_ms < 1) ? 1 : bucket_ms;
    l = tb_ledger_view(&copy, l, bucket_ms);

    b = now / bucket_ms;
    first = tb_ledger_first(l, b);

    held = tb_ledger_spent(l, now, bucket_ms, &turns);

    if (by_turns) {
        held = turns + l->reserved_turns;

    } else {
        held += l->reserved;
    }

    if (held < limit) {
        return now;
    }

    if (first < 0) {
        first = 0;
    }

    if (first <= l->head - TB_LEDGER_SLOTS) {
        first = l->head - TB_LEDGER_SLOTS + 1;
    }

    /* the oldest bucket leaves first: at its index + SLOTS */

    for (k = first; k <= l->head; k++) {
        v = by_turns ? (int64_t) l->turns[k % TB_LEDGER_SLOTS]
                     : l->cost[k % TB_LEDGER_SLOTS];
        held -= v;

        if (held < limit) {
            return (k + TB_LEDGER_SLOTS) * bucket_ms;
        }
    }

    return 0;
}


void
tb_ledger_rebucket(tb_ledger_t *dst, const tb_ledger_t *src,
    int64_t bucket_ms)
{
    int64_t      k, sb;
    tb_ledger_t  l;

    memset(&l, 0, sizeof(tb_ledger_t));

    sb = src->bucket_ms > 0 ? src->bucket_ms : bucket_ms;

    for (k = src->head - TB_LEDGER_SLOTS + 1; k <= src->head; k++) {
        if (k < 0) {
            continue;
        }

        if (src->cost[k % TB_LEDGER_SLOTS] || src->turns[k % TB_LEDGER_SLOTS])
        {
            tb_ledger_charge(&l, k * sb, bucket_ms,
                             src->cost[k % TB_LEDGER_SLOTS],
                             src->turns[k % TB_LEDGER_SLOTS]);
        }
    }

    l.bucket_ms = bucket_ms;
    *dst = l;
}


int64_t
tb_usd_to_nd(double usd)
{
    if (!(usd >= 0)) {
        return -1;
    }

    if (usd > 9e9) {
        return (int64_t) 9e18;
    }

    return (int64_t) (usd * 1e9 + 0.5);
}


static size_t
tb_ledger_len(int n, size_t size)
{
    return (n < 0) ? 0 : ((size_t) n < size ? (size_t) n : size - 1);
}


size_t
tb_usd_format(int64_t nd, char *buf, size_t size)
{
    int      n, digits;
    int64_t  micro, frac;

    if (nd < 0) {
        return tb_ledger_len(snprintf(buf, size, "null"), size);
    }

    micro = (nd + 500) / 1000;
    frac = micro % 1000000;
    digits = 6;

    while (digits > 2 && frac % 10 == 0) {
        frac /= 10;
        digits--;
    }

    n = snprintf(buf, size, "%lld.%0*lld", (long long) (micro / 1000000),
                 digits, (long long) frac);

    return tb_ledger_len(n, size);
}


size_t
tb_wait_format(int64_t ms, char *buf, size_t size)
{
    int      n;
    int64_t  s;

    s = ms > 0 ? (ms + 999) / 1000 : 0;

    if (s < 60) {
        n = snprintf(buf, size, "%llds", (long long) s);

    } else if (s < 3600) {
        n = snprintf(buf, size, "%lldm %llds", (long long) (s / 60),
                     (long long) (s % 60));

    } else if (s < 86400) {
        n = snprintf(buf, size, "%lldh %lldm", (long long) (s / 3600),
                     (long long) (s % 3600 / 60));

    } else {
        n = snprintf(buf, size, "%lldd %lldh", (long long) (s / 86400),
                     (long long) (s % 86400 / 3600));
    }

    return tb_ledger_len(n, size);
}


size_t
tb_tokens_format(int64_t n, char *buf, size_t size)
{
    int  r;

    if (n < 0) {
        n = 0;
    }

    if (n < 1000) {
        r = snprintf(buf, size, "%lld", (long long) n);

    } else if (n < 999500) {
        /* rounded to the nearest thousand: 999,499 is 999k, not 1000k */
        r = snprintf(buf, size, "%lldk", (long long) ((n + 500) / 1000));

    } else if (n < 99995000) {
        r = snprintf(buf, size, "%.2fM", (double) n / 1e6);

    } else {
        r = snprintf(buf, size, "%.1fM", (double) n / 1e6);
    }

    return tb_ledger_len(r, size);
}
