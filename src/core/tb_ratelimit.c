/*
 * Rate-limit header parsing and the mirror update.
 */

#include <string.h>

#include "tb_ratelimit.h"


/* the window names after the prefix, indexed by TB_WIN_* */
static const struct {
    const char               *name;
    size_t                    len;
} tb_rl_windows[TB_NWINDOWS] = {
    { "requests-", sizeof("requests-") - 1 },
    { "input-tokens-", sizeof("input-tokens-") - 1 },
    { "output-tokens-", sizeof("output-tokens-") - 1 }
};

static const char  tb_rl_prefix[] = "anthropic-ratelimit-";


void
tb_mirror_init(tb_mirror_t *m)
{
    int  i;

    memset(m, 0, sizeof(tb_mirror_t));

    for (i = 0; i < TB_NWINDOWS; i++) {
        m->w[i].limit = -1;
        m->w[i].remaining = -1;
    }
}


void
tb_rl_obs_init(tb_rl_obs_t *obs)
{
    memset(obs, 0, sizeof(tb_rl_obs_t));
    obs->retry_after_ms = -1;
}


int
tb_rl_is_ratelimit_header(const unsigned char *name, size_t len)
{
    return len > sizeof(tb_rl_prefix) - 1
           && memcmp(name, tb_rl_prefix, sizeof(tb_rl_prefix) - 1) == 0;
}


/*
 * A reset time: the windows of one response mostly share it, and the
 * next response's is often the same second, so the last one parsed is
 * remembered (a pure function's memo; a worker is one thread).
 */

static int
tb_rl_reset_parse(const unsigned char *p, size_t len, int64_t *ms)
{
    static size_t         last_len;
    static int64_t        last_ms;
    static unsigned char  last[40];

    if (len == last_len && memcmp(p, last, len) == 0) {
        *ms = last_ms;
        return 0;
    }

    if (tb_parse_rfc3339(p, len, ms) != 0) {
        return -1;
    }

    if (len <= sizeof(last)) {
        memcpy(last, p, len);
        last_len = len;
        last_ms = *ms;
    }

    return 0;
}

int
tb_rl_obs_header(tb_rl_obs_t *obs, const unsigned char *name, size_t name_len,
    const unsigned char *value, size_t value_len, int64_t now_ms)
{
    int                   win, f;
    size_t                n, len;
    int64_t               v;
    const unsigned char  *p;

    /*
     * Every response header of every attempt comes through here: the
     * names are told apart by their length and first bytes before any
     * comparison.
     */

    if (name_len == sizeof("retry-after") - 1) {
        if (memcmp(name, "retry-after", name_len) != 0) {
            return 0;
        }

        if (tb_parse_retry_after(value, value_len, now_ms, &v) == 0) {
            obs->retry_after_ms = v;
        }

        return 1;
    }

    if (name_len <= sizeof(tb_rl_prefix) - 1 || name[0] != 'a'
        || name[1] != 'n')
    {
        return 0;
    }

    if (name_len == sizeof("anthropic-organization-id") - 1
        && memcmp(name, "anthropic-organization-id", name_len) == 0)
    {
        while (value_len
               && (value[value_len - 1] == ' ' || value[value_len - 1] == '\t'))
        {
            value_len--;
        }

        n = value_len < TB_ORG_MAX - 1 ? value_len : TB_ORG_MAX - 1;
        memcpy(obs->org, value, n);
        obs->org[n] = '\0';
        obs->has_org = 1;

        return 1;
    }

    if (memcmp(name, tb_rl_prefix, sizeof(tb_rl_prefix) - 1) != 0) {
        return 0;
    }

    p = name + sizeof(tb_rl_prefix) - 1;
    len = name_len - (sizeof(tb_rl_prefix) - 1);

    /* unified-*, tokens-*: read by nobody, but the pool's all the same */

    switch (p[0]) {

    case 'r':
        win = TB_WIN_REQUESTS;
        break;

    case 'i':
        win = TB_WIN_INPUT;
        break;

    case 'o':
        win = TB_WIN_OUTPUT;
        break;

    default:
        return 1;
    }

    n = tb_rl_windows[win].len;

    if (len <= n || memcmp(p, tb_rl_windows[win].name, n) != 0) {
        return 1;
    }

    p += n;
    len -= n;

    if (len == sizeof("limit") - 1 && memcmp(p, "limit", len) == 0) {
        f = TB_RL_LIMIT;

    } else if (len == sizeof("reset") - 1 && memcmp(p, "reset", len) == 0) {
        f = TB_RL_RESET;

    } else if (len == sizeof("remaining") - 1
               && memcmp(p, "remaining", len) == 0)
    {
        f = TB_RL_REMAINING;

    } else {
        return 1;
    }

    if (f == TB_RL_RESET) {
        if (tb_rl_reset_parse(value, value_len, &v) != 0
            || v > now_ms + TB_RL_RESET_MAX_MS)
        {
            /* beyond any window: the arithmetic of levels stays bounded */
            return 1;
        }

    } else if (tb_parse_int64(value, value_len, &v) != 0 || v < 0
               || v > TB_RL_COUNT_MAX)
    {
        return 1;
    }

    obs->v[win][f] = v;
    obs->has |= 1u << (win * TB_RL_NFIELDS + f);

    return 1;
}


/*
 * What two observations of a window in one period say of how it comes
 * back.  A token bucket refills between resets, and its reset (when it is
 * full again) moves later as it is drawn from faster than it refills; a
 * fixed window only falls until its reset, which stays where it was.  A
 * fall too small to have moved a bucket's reset past the header's
 * one-second grain (a twentieth of the limit, for a minute's window) says
 * nothing yet.
 */
static void
tb_window_learn(tb_window_t *win, int64_t prev_remaining, int64_t now_ms)
{
    int64_t  fell, enough;

    if (win->period_reset_ms == 0 || now_ms >= win->period_reset_ms
        || prev_remaining < 0)
    {
        /* a new period: what it starts from */
        win->period_reset_ms = win->reset_ms;
        win->period_remaining = win->remaining;
        return;
    }

    if (win->remaining > prev_remaining
        || win->reset_ms > win->period_reset_ms + 1500)
    {
        win->refill = TB_REFILL_BUCKET;
        return;
    }

    fell = win->period_remaining - win->remaining;
    enough = win->limit / 20 > 2 ? win->limit / 20 : 2;

    if (fell >= enough && win->reset_ms >= win->period_reset_ms - 1500) {
        win->refill = TB_REFILL_FIXED;
    }
}


/*
 * A pool shared with other gateways: the upstream answers requests in an
 * order of its own, and a request sent later can be answered from before
 * others were counted.  Alone, what this gateway sent and that answer may
 * not count is pending here; the others' is not.  So a reading never says
 * more than the window held before it, refilled to now: what it says more
 * is older, not more capacity (the window's reset, once passed, refills
 * it).
 */
static void
tb_window_no_more(tb_window_t *win, const tb_window_t *before, int64_t now)
{
    int64_t  level;

    level = tb_window_level_inline(before, now);

    if (level == TB_UNKNOWN || win->remaining <= level) {
        return;
    }

    win->remaining = level;
    win->observed_ms = now;
    win->read_ms = before->read_ms;

    if (before->reset_ms > win->reset_ms) {
        win->reset_ms = before->reset_ms;
    }
}


unsigned
tb_mirror_apply(tb_mirror_t *m, const tb_rl_obs_t *obs, int64_t now_ms,
    int refill)
{
    int           w, f, taken;
    int64_t       level, prev_remaining;
    unsigned      bit, rem, reset, result;
    tb_window_t  *win, before;

    result = 0;

    /*
     * Each window is written whole from what this response carried; the
     * fields it did not carry keep their previous values.
     */

    for (w = 0; w < TB_NWINDOWS; w++) {
        win = &m->w[w];

        rem = 1u << (w * TB_RL_NFIELDS + TB_RL_REMAINING);
        reset = 1u << (w * TB_RL_NFIELDS + TB_RL_RESET);

        if ((obs->seq && obs->seq < win->seq)
            || (win->adopted && obs->sent_ms && obs->sent_ms < win->sent_ms))
        {
            /*
             * older news: it may only say there is less (what another
             * gateway read is ordered with ours by when it was sent)
             */

            if (obs->has & rem) {
                result |= 1u << (w + TB_MIRROR_STALE);
            }

            if (obs->has & (1u << (w * TB_RL_NFIELDS + TB_RL_LIMIT))) {
                win->limit = obs->v[w][TB_RL_LIMIT];
            }

            level = tb_window_level_inline(win, now_ms);

            taken = (obs->has & rem) && level != TB_UNKNOWN
                    && obs->v[w][TB_RL_REMAINING] < level;

            if ((obs->has & rem) && win->adopted && obs->seq > win->seq
                && (taken
                    || tb_window_counts(win, w, obs->v[w][TB_RL_REMAINING],
                                        now_ms)))
            {
                /*
                 * Our own answer to a request sent before the one another
                 * gateway read.  The upstream counts requests in the order
                 * they arrive: saying less than the other's, ours arrived
                 * later (and is taken below); saying more than the
                 * other's could have grown to since, ours arrived before
                 * and the other's counts it.  Either way the window now
                 * counts ours and what ours counts: no longer pending.
                 */
                win->seq = obs->seq;
            }

            if (taken) {
                win->remaining = obs->v[w][TB_RL_REMAINING];
                win->observed_ms = now_ms;
                win->read_ms = obs->sent_ms;

                if ((obs->has & reset) && obs->v[w][TB_RL_RESET] > win->reset_ms)
                {
                    win->reset_ms = obs->v[w][TB_RL_RESET];
                }
            }

            continue;
        }

        prev_remaining = win->remaining;
        before = *win;

        for (f = 0; f < TB_RL_NFIELDS; f++) {
            bit = 1u << (w * TB_RL_NFIELDS + f);

            if (!(obs->has & bit)) {
                continue;
            }

            switch (f) {
            case TB_RL_LIMIT:
                win->limit = obs->v[w][f];
                break;
            case TB_RL_REMAINING:
                win->remaining = obs->v[w][f];
                break;
            default:
                win->reset_ms = obs->v[w][f];
                break;
            }

            win->observed_ms = now_ms;
            win->seq = obs->seq;
            win->sent_ms = obs->sent_ms;
            win->read_ms = obs->sent_ms;
            win->adopted = 0;
        }

        if (refill != TB_REFILL_AUTO) {
            win->refill = refill;

        } else if ((obs->has & rem) && (obs->has & reset)) {
            tb_window_learn(win, prev_remaining, now_ms);
        }

        if ((obs->has & rem) && m->shared) {
            tb_window_no_more(win, &before, now_ms);
        }

        if (obs->has & rem) {
            result |= 1u << (w + TB_MIRROR_FRESH);
        }
    }

    if (obs->retry_after_ms >= 0) {
        m->retry_after_ms = now_ms + obs->retry_after_ms;
    }

    if (obs->has_org) {
        memcpy(m->org, obs->org, TB_ORG_MAX);
    }

    m->observed_ms = now_ms;

    return result;
}


int
tb_window_counts(const tb_window_t *w, int win, int64_t seen, int64_t now)
{
    int64_t      level;
    tb_window_t  from;

    if (seen < 0 || w->refill == TB_REFILL_AUTO || w->read_ms == 0) {
        return 0;
    }

    /*
     * What it can hold at most: refilled since its count was read at the
     * earliest (it may have been observed later, or by another gateway
     * whose clock is ahead) until now at the latest
     */
    from = *w;

    if (from.observed_ms > w->read_ms - TB_CLOCK_SKEW_MS) {
        from.observed_ms = w->read_ms - TB_CLOCK_SKEW_MS;
    }

    level = tb_window_level_inline(&from, now + TB_CLOCK_SKEW_MS);

    if (level == TB_UNKNOWN) {
        return 0;
    }

    /* a level is computed in whole units, below what it holds by one */
    level += 1 + (win == TB_WIN_REQUESTS ? 0 : TB_RL_TOKENS_ROUNDING);

    return seen > level;
}


unsigned
tb_mirror_adopt(tb_mirror_t *m, const tb_window_t *w, int64_t retry_after_ms,
    int64_t now_ms)
{
    int           i;
    int64_t       level;
    unsigned      result;
    tb_window_t  *win, own;

    result = 0;

    for (i = 0; i < TB_NWINDOWS; i++) {
        win = &m->w[i];

        if (w[i].remaining < 0) {
            continue;
        }

        if (w[i].sent_ms <= win->sent_ms) {
            level = tb_window_level_inline(win, now_ms);

            if (level != TB_UNKNOWN
                && tb_window_level_inline(&w[i], now_ms) < level)
            {
                /*
                 * Read from a request sent earlier, yet saying less now:
                 * it was counted later upstream (or read again since, by
                 * an answer of its own that said less).  Less is taken.
                 */
                win->limit = w[i].limit;
                win->remaining = w[i].remaining;
                win->reset_ms = w[i].reset_ms;
                win->observed_ms = w[i].observed_ms;
                win->read_ms = w[i].read_ms;
                result |= 1u << i;
            }

            continue;
        }

        own = *win;
        *win = w[i];

        /* its order and the evidence a refill is learned by are our own */
        win->seq = own.seq;
        win->period_reset_ms = own.period_reset_ms;
        win->period_remaining = own.period_remaining;

        if (w[i].refill == TB_REFILL_AUTO) {
            win->refill = own.refill;
        }

        win->adopted = 1;

        tb_window_no_more(win, &own, now_ms);

        if (win->observed_ms > m->observed_ms) {
            m->observed_ms = win->observed_ms;
        }

        result |= 1u << i;
    }

    if (retry_after_ms > m->retry_after_ms) {
        m->retry_after_ms = retry_after_ms;
    }

    return result;
}


int64_t
tb_rl_obs_blocked_until(const tb_rl_obs_t *obs)
{
    int       w;
    int64_t   until;
    unsigned  rem, reset;

    until = 0;

    for (w = 0; w < TB_NWINDOWS; w++) {
        rem = 1u << (w * TB_RL_NFIELDS + TB_RL_REMAINING);
        reset = 1u << (w * TB_RL_NFIELDS + TB_RL_RESET);

        if ((obs->has & rem) && (obs->has & reset)
            && obs->v[w][TB_RL_REMAINING] == 0
            && obs->v[w][TB_RL_RESET] > until)
        {
            until = obs->v[w][TB_RL_RESET];
        }
    }

    return until;
}
