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
        if (tb_parse_rfc3339(value, value_len, &v) != 0) {
            return 1;
        }

    } else if (tb_parse_int64(value, value_len, &v) != 0 || v < 0) {
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


unsigned
tb_mirror_apply(tb_mirror_t *m, const tb_rl_obs_t *obs, int64_t now_ms,
    int refill)
{
    int           w, f;
    int64_t       level, prev_remaining;
    unsigned      bit, rem, reset, result;
    tb_window_t  *win;

    result = 0;

    /*
     * Each window is written whole from what this response carried; the
     * fields it did not carry keep their previous values.
     */

    for (w = 0; w < TB_NWINDOWS; w++) {
        win = &m->w[w];

        rem = 1u << (w * TB_RL_NFIELDS + TB_RL_REMAINING);
        reset = 1u << (w * TB_RL_NFIELDS + TB_RL_RESET);

        if (obs->seq && obs->seq < win->seq) {

            /* older news: it may only say there is less */

            if (obs->has & rem) {
                result |= 1u << (w + TB_MIRROR_STALE);
            }

            if (obs->has & (1u << (w * TB_RL_NFIELDS + TB_RL_LIMIT))) {
                win->limit = obs->v[w][TB_RL_LIMIT];
            }

            level = tb_window_level_inline(win, now_ms);

            if ((obs->has & rem) && level != TB_UNKNOWN
                && obs->v[w][TB_RL_REMAINING] < level)
            {
                win->remaining = obs->v[w][TB_RL_REMAINING];
                win->observed_ms = now_ms;

                if ((obs->has & reset) && obs->v[w][TB_RL_RESET] > win->reset_ms)
                {
                    win->reset_ms = obs->v[w][TB_RL_RESET];
                }
            }

            continue;
        }

        prev_remaining = win->remaining;

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
        }

        if (refill != TB_REFILL_AUTO) {
            win->refill = refill;

        } else if ((obs->has & rem) && (obs->has & reset)) {
            tb_window_learn(win, prev_remaining, now_ms);
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
