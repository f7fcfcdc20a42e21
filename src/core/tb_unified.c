/*
 * A Claude subscription's windows from the unified headers (tb_unified.h).
 */

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "tb_unified.h"
#include "tb_parse.h"


#define TB_UNI_PREFIX         "anthropic-ratelimit-unified-"

/* no subscription window is longer than a week and a day */
#define TB_UNI_RESET_MAX_MS   (8LL * 86400 * 1000)


static const char *const  tb_uni_windows[TB_UNI_NWINDOWS] = {
    "5h", "7d", "7d_oi", "7d_opus", "7d_sonnet"
};

static const char *const  tb_uni_statuses[] = {
    "", "allowed", "allowed_warning", "rejected"
};


void
tb_unified_init(tb_unified_t *u)
{
    unsigned  i;

    memset(u, 0, sizeof(tb_unified_t));

    u->all.utilization = -1;

    for (i = 0; i < TB_UNI_NWINDOWS; i++) {
        u->w[i].utilization = -1;
    }
}


static unsigned
tb_uni_status(const unsigned char *v, size_t len)
{
    if (len == 7 && memcmp(v, "allowed", 7) == 0) {
        return TB_UNI_ALLOWED;
    }

    if (len == 15 && memcmp(v, "allowed_warning", 15) == 0) {
        return TB_UNI_WARNING;
    }

    if ((len == 8 && memcmp(v, "rejected", 8) == 0)
        || (len == 9 && memcmp(v, "throttled", 9) == 0))
    {
        return TB_UNI_REJECTED;
    }

    return TB_UNI_UNKNOWN;
}


/* a fraction: digits, one ".", at most 0..100 */
static int
tb_uni_fraction(const unsigned char *v, size_t len, float *out)
{
    size_t  i, dots;
    char    buf[32];
    double  d;

    if (len == 0 || len >= sizeof(buf)) {
        return -1;
    }

    dots = 0;

    for (i = 0; i < len; i++) {
        if (v[i] == '.') {
            dots++;

        } else if (v[i] < '0' || v[i] > '9') {
            return -1;
        }
    }

    if (dots > 1) {
        return -1;
    }

    memcpy(buf, v, len);
    buf[len] = '\0';

    d = strtod(buf, NULL);

    if (!isfinite(d) || d > 100) {
        return -1;
    }

    *out = (float) d;

    return 0;
}


/* epoch seconds, within a week and a day of now */
static int
tb_uni_reset(const unsigned char *v, size_t len, int64_t now, int64_t *out)
{
    int64_t  s;

    if (tb_parse_int64(v, len, &s) != 0 || s <= 0
        || s > INT64_MAX / 1000
        || s * 1000 > now + TB_UNI_RESET_MAX_MS)
    {
        return -1;
    }

    *out = s * 1000;

    return 0;
}


/* a window's field: status, utilization or reset */
static void
tb_uni_field(tb_uni_window_t *w, const unsigned char *f, size_t flen,
    const unsigned char *v, size_t vlen, int64_t now)
{
    if (flen == 6 && memcmp(f, "status", 6) == 0) {
        w->status = (uint8_t) tb_uni_status(v, vlen);

    } else if (flen == 11 && memcmp(f, "utilization", 11) == 0) {
        (void) tb_uni_fraction(v, vlen, &w->utilization);

    } else if (flen == 5 && memcmp(f, "reset", 5) == 0) {
        (void) tb_uni_reset(v, vlen, now, &w->reset_ms);
    }
}


static void
tb_uni_text(char *dst, size_t size, const unsigned char *v, size_t len)
{
    size_t  i, n;

    /* a word: letters, digits, '_' and '-' only, or nothing */

    n = 0;

    for (i = 0; i < len && n + 1 < size; i++) {
        if ((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z')
            || (v[i] >= '0' && v[i] <= '9') || v[i] == '_' || v[i] == '-')
        {
            dst[n++] = (char) v[i];

        } else {
            n = 0;
            break;
        }
    }

    dst[n] = '\0';
}


int
tb_unified_header(tb_unified_t *obs, const unsigned char *name,
    size_t name_len, const unsigned char *value, size_t value_len,
    int64_t now_ms)
{
    size_t                n, wl;
    unsigned              i;
    const unsigned char  *p;

    if (name_len <= sizeof(TB_UNI_PREFIX) - 1
        || memcmp(name, TB_UNI_PREFIX, sizeof(TB_UNI_PREFIX) - 1) != 0)
    {
        return 0;
    }

    p = name + sizeof(TB_UNI_PREFIX) - 1;
    n = name_len - (sizeof(TB_UNI_PREFIX) - 1);

    /* (trailing blanks are nginx's to strip; values here are tokens) */

    obs->observed_ms = now_ms;

    if (n == 6 && memcmp(p, "status", 6) == 0) {
        obs->all.status = (uint8_t) tb_uni_status(value, value_len);
        return 1;
    }

    if (n == 5 && memcmp(p, "reset", 5) == 0) {
        (void) tb_uni_reset(value, value_len, now_ms, &obs->all.reset_ms);
        return 1;
    }

    if (n == 20 && memcmp(p, "representative-claim", 20) == 0) {
        tb_uni_text(obs->claim, sizeof(obs->claim), value, value_len);
        return 1;
    }

    if (n == 14 && memcmp(p, "overage-status", 14) == 0) {
        obs->overage = (uint8_t) tb_uni_status(value, value_len);
        return 1;
    }

    if (n == 23 && memcmp(p, "overage-disabled-reason", 23) == 0) {
        tb_uni_text(obs->reason, sizeof(obs->reason), value, value_len);
        return 1;
    }

    for (i = 0; i < TB_UNI_NWINDOWS; i++) {
        wl = strlen(tb_uni_windows[i]);

        if (n > wl + 1 && memcmp(p, tb_uni_windows[i], wl) == 0
            && p[wl] == '-')
        {
            tb_uni_field(&obs->w[i], p + wl + 1, n - wl - 1, value,
                         value_len, now_ms);
            return 1;
        }
    }

    /* another of the family (fallback-percentage, ...): not read */
    return 1;
}


static void
tb_uni_window_apply(tb_uni_window_t *w, const tb_uni_window_t *o)
{
    if (o->status != TB_UNI_UNKNOWN) {
        w->status = o->status;
    }

    if (o->utilization >= 0) {
        w->utilization = o->utilization;
    }

    if (o->reset_ms) {
        /* seconds of jitter between answers are the same window */
        if (w->reset_ms == 0 || o->reset_ms > w->reset_ms + TB_UNI_JITTER_MS
            || o->reset_ms < w->reset_ms - TB_UNI_JITTER_MS)
        {
            w->reset_ms = o->reset_ms;
        }
    }
}


void
tb_unified_apply(tb_unified_t *u, const tb_unified_t *obs)
{
    unsigned  i;

    if (obs->observed_ms == 0) {
        return;
    }

    tb_uni_window_apply(&u->all, &obs->all);

    for (i = 0; i < TB_UNI_NWINDOWS; i++) {
        tb_uni_window_apply(&u->w[i], &obs->w[i]);
    }

    if (obs->overage != TB_UNI_UNKNOWN) {
        u->overage = obs->overage;
    }

    if (obs->claim[0]) {
        memcpy(u->claim, obs->claim, sizeof(u->claim));
    }

    if (obs->reason[0]) {
        memcpy(u->reason, obs->reason, sizeof(u->reason));
    }

    u->observed_ms = obs->observed_ms;
}


double
tb_unified_headroom(const tb_unified_t *u, int64_t now_ms)
{
    double    worst;
    unsigned  i;

    worst = -1;

    for (i = 0; i < TB_UNI_NWINDOWS; i++) {
        if (u->w[i].utilization < 0
            || (u->w[i].reset_ms && u->w[i].reset_ms <= now_ms))
        {
            /* unknown, or reset since */
            continue;
        }

        if (u->w[i].utilization > worst) {
            worst = u->w[i].utilization;
        }
    }

    if (worst < 0) {
        return -1;
    }

    return worst >= 1 ? 0 : 1 - worst;
}


int64_t
tb_unified_blocked_until(const tb_unified_t *u, int64_t now_ms)
{
    int64_t   until;
    unsigned  i;

    until = 0;

    for (i = 0; i < TB_UNI_NWINDOWS; i++) {
        if (u->w[i].status == TB_UNI_REJECTED && u->w[i].reset_ms > now_ms
            && u->w[i].reset_ms > until)
        {
            until = u->w[i].reset_ms;
        }
    }

    if (u->all.status == TB_UNI_REJECTED && u->all.reset_ms > now_ms
        && u->all.reset_ms > until)
    {
        until = u->all.reset_ms;
    }

    return until;
}


const char *
tb_unified_status_name(unsigned status)
{
    return status <= TB_UNI_REJECTED ? tb_uni_statuses[status] : "";
}


const char *
tb_unified_window_name(unsigned win)
{
    return win < TB_UNI_NWINDOWS ? tb_uni_windows[win] : "";
}


int
tb_unified_header_at(const tb_unified_t *u, unsigned i, char *name,
    size_t name_size, char *value, size_t value_size)
{
    unsigned                w, f;
    const char             *n, *v;
    const tb_uni_window_t  *win;

    /* 0 status, 1 reset, 2 claim, 3 overage status, 4 its reason, then
     * three a window: status, utilization, reset */

    for ( /* void */ ; i < 5 + 3 * TB_UNI_NWINDOWS; i++) {

        name[0] = '\0';
        value[0] = '\0';
        n = NULL;
        v = "";

        switch (i) {
        case 0:
            n = "status";
            v = tb_unified_status_name(u->all.status);
            break;

        case 1:
            if (u->all.reset_ms) {
                snprintf(name, name_size, TB_UNI_PREFIX "reset");
                snprintf(value, value_size, "%lld",
                         (long long) (u->all.reset_ms / 1000));
            }
            break;

        case 2:
            n = "representative-claim";
            v = u->claim;
            break;

        case 3:
            n = "overage-status";
            v = tb_unified_status_name(u->overage);
            break;

        case 4:
            n = "overage-disabled-reason";
            v = u->reason;
            break;

        default:
            w = (i - 5) / 3;
            f = (i - 5) % 3;
            win = &u->w[w];

            if (f == 0 && win->status) {
                snprintf(name, name_size, TB_UNI_PREFIX "%s-status",
                         tb_uni_windows[w]);
                snprintf(value, value_size, "%s",
                         tb_unified_status_name(win->status));

            } else if (f == 1 && win->utilization >= 0) {
                snprintf(name, name_size, TB_UNI_PREFIX "%s-utilization",
                         tb_uni_windows[w]);
                snprintf(value, value_size, "%.2f", win->utilization);

            } else if (f == 2 && win->reset_ms) {
                snprintf(name, name_size, TB_UNI_PREFIX "%s-reset",
                         tb_uni_windows[w]);
                snprintf(value, value_size, "%lld",
                         (long long) (win->reset_ms / 1000));
            }

            break;
        }

        /* a header that says a word: said when it has one */
        if (n && v[0]) {
            snprintf(name, name_size, TB_UNI_PREFIX "%s", n);
            snprintf(value, value_size, "%s", v);
        }

        if (name[0]) {
            return (int) i + 1;
        }
    }

    return 0;
}
