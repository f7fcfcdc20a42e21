/*
 * Pacing: should this be spent now.  A reading says, for one budget or
 * cap, how much of it is used, where it should be by now, where it is
 * heading at this rate, and a verdict in words.
 *
 * Two kinds of window:
 *
 *   - a fixed one (the pool's weekly budget, from the week's start to its
 *     end): its elapsed share is the target (linearly, or by the business
 *     hours of the week gone), the use projected to the end at the rate so
 *     far;
 *   - a rolling one (a key's or an account's spend cap over the trailing
 *     spend window): nothing elapses, so it is read by its recent rate -
 *     when the cap is reached at this rate, or what a window at this rate
 *     comes to.
 *
 * Times in ms since the epoch, money in nanodollars, all passed in.  Plain
 * C, no nginx headers.
 */

#ifndef TB_PACING_H
#define TB_PACING_H

#include <stddef.h>
#include <stdint.h>


#define TB_PACE_WEEK_MS           (7 * 86400000LL)


typedef enum {
    TB_PACE_ON = 0,
    TB_PACE_AHEAD,               /* ahead, not on course to run out */
    TB_PACE_RUNS_OUT,            /* on course to run out before its end */
    TB_PACE_BEHIND,              /* on course to leave some unused */
    TB_PACE_IDLE,                /* a rolling one: nothing spent lately */
    TB_PACE_REACHED              /* a rolling one: at its cap now */
} tb_pace_verdict_e;


typedef struct {
    int64_t                   start_ms;       /* fixed: the window's */
    int64_t                   end_ms;
    int64_t                   now_ms;
    int64_t                   used;           /* nanodollars */
    int64_t                   limit;          /* nanodollars, > 0 */
    double                    elapsed;        /* fixed: 0..1 */
    double                    utilization;    /* used / limit */
    double                    target;         /* fixed: where it should be */
    double                    pace;           /* utilization - target */
    double                    projected;      /* the use at the end (a
                                                 window, for a rolling one)
                                                 at this rate, of limit */
    int64_t                   rate;           /* nanodollars an hour */
    int64_t                   runs_out_ms;    /* when it is gone at this
                                                 rate; 0: not before the end
                                                 (fixed), not at all
                                                 (rolling) */
    int64_t                   frees_ms;       /* rolling, reached: when the
                                                 window has room again; 0:
                                                 not knowable */
    int64_t                   window_ms;      /* rolling: its length */
    tb_pace_verdict_e         verdict;
} tb_pace_t;


/*
 * A fixed window [start, end) read at now with used of limit spent in it;
 * business: the target is the share of the window's business hours gone
 * (Monday to Friday, 09:00 to 17:00 at tz_min minutes east of UTC) rather
 * than of its time; ahead, behind: how far from the target (a share of the
 * limit) the reading is still on pace.
 */
void tb_pace_fixed(tb_pace_t *p, int64_t start, int64_t end, int64_t now,
    int64_t used, int64_t limit, int business, int tz_min, double ahead,
    double behind);

/*
 * A rolling window of window_ms read at now: used (settled and held) of
 * limit, rate an hour lately, frees: when the window would have room again
 * if it is at its cap (tb_ledger_frees_at; 0: not knowable).
 */
void tb_pace_rolling(tb_pace_t *p, int64_t window_ms, int64_t now,
    int64_t used, int64_t rate, int64_t limit, int64_t frees);

/*
 * The verdict in words, NUL-terminated in buf, of what (e.g. "the weekly
 * budget", "key tenant-3's $50 spend cap"); its length.
 */
size_t tb_pace_say(const tb_pace_t *p, const char *what, char *buf,
    size_t size);

/* its verdict's name: "on pace", "ahead", "runs out", ... */
const char *tb_pace_verdict_name(tb_pace_verdict_e v);

/*
 * The start of the week that holds now: wday (0 Monday .. 6 Sunday) at
 * minute of the day, at tz_min minutes east of UTC.
 */
int64_t tb_pace_week_start(int64_t now, int wday, int minute, int tz_min);

/*
 * "monday 00:00", "Sat 9:30": 0 with *wday and *minute, else -1.
 * "UTC", "Z", "+05:30", "-08:00": 0 with *tz_min, else -1.
 */
int tb_pace_week_parse(const char *s, int *wday, int *minute);
int tb_pace_tz_parse(const char *s, int *tz_min);


#endif /* TB_PACING_H */
