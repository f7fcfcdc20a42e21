/*
 * Pacing readings and their verdicts (see tb_pacing.h).
 */

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "tb_pacing.h"
#include "tb_ledger.h"


#define TB_PACE_DAY_MS            86400000LL
#define TB_PACE_HOUR_MS           3600000LL


static double tb_pace_business(int64_t start, int64_t end, int64_t now,
    int tz_min);
static int64_t tb_pace_business_ms(int64_t from, int64_t to, int tz_min);


static const char *const  tb_pace_days[7] = {
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday",
    "sunday"
};


void
tb_pace_fixed(tb_pace_t *p, int64_t start, int64_t end, int64_t now,
    int64_t used, int64_t limit, int business, int tz_min, double ahead,
    double behind)
{
    double  base;

    memset(p, 0, sizeof(tb_pace_t));

    p->start_ms = start;
    p->end_ms = end;
    p->now_ms = now;
    p->used = used > 0 ? used : 0;
    p->limit = limit > 0 ? limit : 1;

    if (end > start && now > start) {
        p->elapsed = (now >= end) ? 1 : (double) (now - start) / (end - start);
        p->rate = (int64_t) ((double) p->used * TB_PACE_HOUR_MS
                             / (double) (now - start));
    }

    p->utilization = (double) p->used / p->limit;
    p->target = business ? tb_pace_business(start, end, now, tz_min)
                         : p->elapsed;
    p->pace = p->utilization - p->target;

    /* the use so far, carried on to the end at the rate so far (the
     * rate of the business hours gone, on that curve) */

    base = business ? p->target : p->elapsed;
    p->projected = base > 0 ? p->utilization / base : p->utilization;

    if (p->used >= p->limit) {
        p->runs_out_ms = now;

    } else if (p->rate > 0 && p->projected > 1) {
        p->runs_out_ms = now + (int64_t) ((double) (p->limit - p->used)
                                          * TB_PACE_HOUR_MS / p->rate);

        if (p->runs_out_ms >= end) {
            p->runs_out_ms = 0;
        }
    }

    if (p->used >= p->limit) {
        p->verdict = TB_PACE_RUNS_OUT;

    } else if (p->pace > ahead) {
        p->verdict = p->runs_out_ms ? TB_PACE_RUNS_OUT : TB_PACE_AHEAD;

    } else if (p->pace < -behind) {
        p->verdict = TB_PACE_BEHIND;

    } else {
        p->verdict = TB_PACE_ON;
    }
}


void
tb_pace_rolling(tb_pace_t *p, int64_t window_ms, int64_t now, int64_t used,
    int64_t rate, int64_t limit, int64_t frees)
{
    memset(p, 0, sizeof(tb_pace_t));

    p->window_ms = window_ms;
    p->start_ms = now - window_ms;
    p->end_ms = now;
    p->now_ms = now;
    p->used = used > 0 ? used : 0;
    p->limit = limit > 0 ? limit : 1;
    p->rate = rate > 0 ? rate : 0;
    p->elapsed = 1;
    p->target = 1;
    p->utilization = (double) p->used / p->limit;

    /* a whole window at this rate, of the cap */
    p->projected = (double) p->rate * window_ms / TB_PACE_HOUR_MS / p->limit;
    p->pace = p->projected - 1;

    if (p->used >= p->limit) {
        p->verdict = TB_PACE_REACHED;
        p->runs_out_ms = now;
        p->frees_ms = frees;
        return;
    }

    if (p->rate == 0) {
        p->verdict = TB_PACE_IDLE;
        return;
    }

    if (p->projected < 1) {
        /* a window at this rate stays under it, whatever is spent now */
        p->verdict = TB_PACE_ON;
        return;
    }

    p->runs_out_ms = now + (int64_t) ((double) (p->limit - p->used)
                                      * TB_PACE_HOUR_MS / p->rate);
    p->verdict = TB_PACE_RUNS_OUT;
}


size_t
tb_pace_say(const tb_pace_t *p, const char *what, char *buf, size_t size)
{
    int     n;
    char    in[32], left[32], rate[32];

    if (size == 0) {
        return 0;
    }

    (void) tb_usd_format(p->rate, rate, sizeof(rate));

    if (p->window_ms) {

        /* a rolling window */

        switch (p->verdict) {

        case TB_PACE_REACHED:
            if (p->frees_ms > p->now_ms) {
                (void) tb_wait_format(p->frees_ms - p->now_ms, in,
                                      sizeof(in));
                n = snprintf(buf, size, "%s is reached: room again in %s, as "
                             "the window moves on", what, in);
            } else {
                n = snprintf(buf, size, "%s is reached: room again as "
                             "requests in flight end or the window moves on",
                             what);
            }
            break;

        case TB_PACE_IDLE:
            n = snprintf(buf, size, "nothing spent lately: %d%% of %s used "
                         "in the window", (int) (p->utilization * 100 + .5),
                         what);
            break;

        case TB_PACE_RUNS_OUT:
            (void) tb_wait_format(p->runs_out_ms - p->now_ms, in, sizeof(in));
            n = snprintf(buf, size, "at this rate ($%s an hour) %s is "
                         "reached in %s: a window at this rate comes to %d%% "
                         "of it", rate, what, in,
                         (int) (p->projected * 100 + .5));
            break;

        default:
            n = snprintf(buf, size, "at this rate ($%s an hour) a window "
                         "comes to %d%% of %s: under it", rate,
                         (int) (p->projected * 100 + .5), what);
            break;
        }

    } else {

        /* a fixed window */

        (void) tb_wait_format(p->end_ms > p->now_ms ? p->end_ms - p->now_ms
                                                    : 0,
                              left, sizeof(left));

        switch (p->verdict) {

        case TB_PACE_RUNS_OUT:
            if (p->runs_out_ms <= p->now_ms) {
                n = snprintf(buf, size, "%s is spent, with %s of the window "
                             "still to go", what, left);
                break;
            }

            (void) tb_wait_format(p->runs_out_ms - p->now_ms, in, sizeof(in));
            n = snprintf(buf, size, "ahead of pace: at this rate %s is gone "
                         "in %s, with %s of the window still to go", what, in,
                         left);
            break;

        case TB_PACE_AHEAD:
            n = snprintf(buf, size, "ahead of pace (%d%% of %s used, %d%% "
                         "expected by now), but not on course to run out",
                         (int) (p->utilization * 100 + .5), what,
                         (int) (p->target * 100 + .5));
            break;

        case TB_PACE_BEHIND:
            n = snprintf(buf, size, "behind pace: on course to leave %d%% of "
                         "%s unused", (int) ((1 - p->projected) * 100 + .5),
                         what);
            break;

        default:
            n = snprintf(buf, size, "on pace: %d%% of %s used, %d%% "
                         "expected by now", (int) (p->utilization * 100 + .5),
                         what, (int) (p->target * 100 + .5));
            break;
        }
    }

    if (n < 0) {
        buf[0] = '\0';
        return 0;
    }

    return ((size_t) n < size) ? (size_t) n : size - 1;
}


const char *
tb_pace_verdict_name(tb_pace_verdict_e v)
{
    static const char *const  names[] = {
        "on pace", "ahead", "runs out", "behind", "idle", "reached"
    };

    return ((unsigned) v < sizeof(names) / sizeof(names[0])) ? names[v]
                                                            : "unknown";
}


int64_t
tb_pace_week_start(int64_t now, int wday, int minute, int tz_min)
{
    int64_t  local, day, wd, start;

    local = now + (int64_t) tz_min * 60000;
    day = local / TB_PACE_DAY_MS;

    /* 1970-01-01 was a Thursday: 3 counting from Monday */
    wd = (day + 3) % 7;

    start = (day - (wd - wday + 7) % 7) * TB_PACE_DAY_MS
            + (int64_t) minute * 60000;

    if (start > local) {
        start -= TB_PACE_WEEK_MS;
    }

    return start - (int64_t) tz_min * 60000;
}


/* the share of [start, end)'s business hours that are before now */

static double
tb_pace_business(int64_t start, int64_t end, int64_t now, int tz_min)
{
    int64_t  all;

    all = tb_pace_business_ms(start, end, tz_min);

    if (all <= 0) {
        /* a window without business hours: by its time */
        return (now <= start) ? 0
               : (now >= end || end <= start) ? 1
               : (double) (now - start) / (end - start);
    }

    if (now <= start) {
        return 0;
    }

    return (double) tb_pace_business_ms(start, now < end ? now : end, tz_min)
           / all;
}


/* Monday to Friday, 09:00 to 17:00 local: how much of [from, to) */

static int64_t
tb_pace_business_ms(int64_t from, int64_t to, int tz_min)
{
    int64_t  off, day, last, open, close, a, b, sum;

    off = (int64_t) tz_min * 60000;
    sum = 0;

    if (to <= from) {
        return 0;
    }

    day = (from + off) / TB_PACE_DAY_MS;
    last = (to + off) / TB_PACE_DAY_MS;

    for ( /* void */ ; day <= last; day++) {
        if ((day + 3) % 7 >= 5) {
            continue;                   /* Saturday, Sunday */
        }

        open = day * TB_PACE_DAY_MS + 9 * TB_PACE_HOUR_MS - off;
        close = open + 8 * TB_PACE_HOUR_MS;

        a = from > open ? from : open;
        b = to < close ? to : close;

        if (b > a) {
            sum += b - a;
        }
    }

    return sum;
}


int
tb_pace_week_parse(const char *s, int *wday, int *minute)
{
    int          d, h, m, i;
    size_t       n;
    const char  *p;

    for (p = s; *p >= 'A' && (*p | 0x20) >= 'a' && (*p | 0x20) <= 'z'; p++) {
        /* void */
    }

    n = (size_t) (p - s);
    d = -1;

    for (i = 0; i < 7 && n >= 3; i++) {
        if ((n == 3 || n == strlen(tb_pace_days[i]))
            && strncasecmp(s, tb_pace_days[i], n) == 0)
        {
            d = i;
        }
    }

    if (d < 0 || *p != ' ') {
        return -1;
    }

    while (*p == ' ') {
        p++;
    }

    for (h = 0, i = 0; i < 2 && *p >= '0' && *p <= '9'; i++, p++) {
        h = h * 10 + (*p - '0');
    }

    if (i == 0 || *p++ != ':') {
        return -1;
    }

    for (m = 0, i = 0; i < 2 && *p >= '0' && *p <= '9'; i++, p++) {
        m = m * 10 + (*p - '0');
    }

    if (i != 2 || *p != '\0' || h > 23 || m > 59) {
        return -1;
    }

    *wday = d;
    *minute = h * 60 + m;

    return 0;
}


int
tb_pace_tz_parse(const char *s, int *tz_min)
{
    int  sign, h, m, i;

    if (strcasecmp(s, "UTC") == 0 || strcmp(s, "Z") == 0) {
        *tz_min = 0;
        return 0;
    }

    if (*s != '+' && *s != '-') {
        return -1;
    }

    sign = (*s++ == '-') ? -1 : 1;

    for (h = 0, i = 0; i < 2 && *s >= '0' && *s <= '9'; i++, s++) {
        h = h * 10 + (*s - '0');
    }

    if (i != 2) {
        return -1;
    }

    m = 0;

    if (*s == ':') {
        s++;

        for (i = 0; i < 2 && *s >= '0' && *s <= '9'; i++, s++) {
            m = m * 10 + (*s - '0');
        }

        if (i != 2) {
            return -1;
        }
    }

    if (*s != '\0' || m > 59 || h * 60 + m > 14 * 60) {
        return -1;
    }

    *tz_min = sign * (h * 60 + m);

    return 0;
}
