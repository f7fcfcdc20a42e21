/*
 * tokenbiryani status: the pool in a terminal, 80 columns.
 *
 *   POOL  4 accounts · 3 ready · 702k input ready · next reset 00:12 · ...
 *
 *   ACCOUNT         STATE          REQ   INPUT  OUTPUT   RESET  CACHE   SPEND
 *   acct-01         ● ready        98%     82%     79%   00:41    97%   $0.42
 */

#include <math.h>
#include <string.h>

#include "tbc.h"


/* what is left of a window: remaining / limit, NAN when never read */
static double
tbc_left(const cJSON *limits, const char *win)
{
    double        limit, rem;
    const cJSON  *w;

    w = cJSON_GetObjectItemCaseSensitive(limits, win);
    limit = tbc_num(w, "limit", -1);
    rem = tbc_num(w, "remaining", -1);

    if (limit <= 0 || rem < 0) {
        return NAN;
    }

    return rem / limit;
}


/* the soonest reset of a window that is not full, NAN when none */
static double
tbc_next_reset(const cJSON *limits)
{
    int           i;
    double        soonest, in, limit, rem;
    const cJSON  *w;

    static const char  *wins[] = { "requests", "input_tokens",
                                   "output_tokens" };

    soonest = NAN;

    for (i = 0; i < 3; i++) {
        w = cJSON_GetObjectItemCaseSensitive(limits, wins[i]);
        in = tbc_num(w, "reset_in", -1);
        limit = tbc_num(w, "limit", -1);
        rem = tbc_num(w, "remaining", -1);

        if (in > 0 && rem < limit && (isnan(soonest) || in < soonest)) {
            soonest = in;
        }
    }

    return soonest;
}


static void tbc_status_pace(tbc_t *c, const cJSON *pace);
static void tbc_status_subscription(tbc_t *c, const cJSON *sub);


static const char *
tbc_state_color(const char *state)
{
    return strcmp(state, "ready") == 0 ? "green"
           : strcmp(state, "cooling") == 0 ? "blue"
           : strcmp(state, "exhausted") == 0 ? "yellow" : "red";
}


int
tbc_status(tbc_t *c)
{
    int           rc, n, nready, nfailing;
    char          a[16], b[16], d[16], e[16], f[16], g[16], why[256];
    double        ready_input, soonest, reset, read, prompt, hit, learned;
    double        since, ago, hours;
    cJSON        *j, *pace;
    const cJSON  *accts, *acct, *limits, *usage, *store, *queue;
    const char   *state, *reason;

    if (c->nargs) {
        tbc_err("status takes no arguments");
        return TBC_USAGE;
    }

    j = tbc_admin(c, "GET", "/admin/status", NULL, &rc);
    if (j == NULL) {
        return rc;
    }

    /* the readings of /admin/pacing, if the gateway has them (a gateway
     * of an earlier release answers 404: no block) */

    if (tbc_call(c, "GET", "/admin/pacing", NULL, &pace) / 100 != 2) {
        cJSON_Delete(pace);
        pace = NULL;
    }

    if (c->json) {
        if (pace) {
            cJSON_AddItemToObject(j, "pacing", pace);
        }

        tbc_json_print(j);
        cJSON_Delete(j);
        return TBC_OK;
    }

    accts = cJSON_GetObjectItemCaseSensitive(j, "accounts");
    queue = cJSON_GetObjectItemCaseSensitive(j, "queue");
    store = cJSON_GetObjectItemCaseSensitive(j, "store");

    n = 0;
    nready = 0;
    nfailing = 0;
    hours = 24;
    ready_input = 0;
    soonest = NAN;
    read = 0;
    prompt = 0;

    cJSON_ArrayForEach(acct, accts) {
        n++;
        limits = cJSON_GetObjectItemCaseSensitive(acct, "limits");
        usage = cJSON_GetObjectItemCaseSensitive(acct, "usage");

        nfailing += (strcmp(tbc_str(acct, "state", ""), "failing") == 0);

        if (strcmp(tbc_str(acct, "state", ""), "ready") == 0) {
            nready++;
            ready_input += fmax(0, tbc_num(cJSON_GetObjectItemCaseSensitive(
                                   limits, "input_tokens"), "remaining", 0));
        }

        reset = tbc_next_reset(limits);

        if (!isnan(reset) && (isnan(soonest) || reset < soonest)) {
            soonest = reset;
        }

        read += tbc_num(usage, "cache_read_tokens", 0);
        prompt += tbc_num(usage, "input_tokens", 0)
                  + tbc_num(usage, "cache_read_tokens", 0)
                  + tbc_num(usage, "cache_write_tokens", 0);
    }

    tbc_tokens(a, sizeof(a), ready_input);
    tbc_clock(b, sizeof(b), soonest);
    tbc_pct(d, sizeof(d), prompt > 0 ? read / prompt : NAN);

    /* failing accounts are not ready, and said apart: a countdown is
     * not what brings them back */

    snprintf(why, sizeof(why), " · %d failing", nfailing);

    printf("\n  %sPOOL%s  %d account%s · %s%d ready%s%s%s%s · %s input ready "
           "· next reset %s\n        queue %.0f · cache %s · store %s %s · "
           "strategy %s\n\n",
           tbc_c(c, "bold"), tbc_c(c, "reset"), n, n == 1 ? "" : "s",
           tbc_c(c, nready ? "green" : "red"), nready, tbc_c(c, "reset"),
           tbc_c(c, "red"), nfailing ? why : "", tbc_c(c, "reset"),
           a, b, tbc_num(queue, "depth", 0), d,
           tbc_str(store, "backend", "?"), tbc_str(store, "state", "?"),
           tbc_str(j, "strategy", "?"));

    if (n == 0) {
        printf("  no accounts yet: `tokenbiryani accounts add ID --api-key "
               "K`, or the console's first run\n\n");
        cJSON_Delete(j);
        return TBC_OK;
    }

    printf("  %s%-15s %-13s %5s %7s %7s %7s %6s %8s%s\n", tbc_c(c, "dim"),
           "ACCOUNT", "STATE", "REQ", "INPUT", "OUTPUT", "RESET", "CACHE",
           "SPEND", tbc_c(c, "reset"));

    cJSON_ArrayForEach(acct, accts) {
        limits = cJSON_GetObjectItemCaseSensitive(acct, "limits");
        usage = cJSON_GetObjectItemCaseSensitive(acct, "usage");
        state = tbc_str(acct, "state", "?");

        tbc_pct(a, sizeof(a), tbc_left(limits, "requests"));
        tbc_pct(b, sizeof(b), tbc_left(limits, "input_tokens"));
        tbc_pct(d, sizeof(d), tbc_left(limits, "output_tokens"));
        tbc_clock(e, sizeof(e), tbc_next_reset(limits));

        hit = tbc_num(usage, "cache_hit_rate", NAN);
        tbc_pct(f, sizeof(f), hit);
        tbc_usd(g, sizeof(g), tbc_num(usage, "window_usd", 0));
        hours = tbc_num(usage, "window_hours", hours);

        /* "—" is one column of three bytes: the widths are the bytes'  */
        printf("  %-15.15s %s●%s %-11.11s %*s %*s %*s %*s %*s %8s\n",
               tbc_str(acct, "id", "?"), tbc_c(c, tbc_state_color(state)),
               tbc_c(c, "reset"), state,
               strcmp(a, "—") ? 5 : 7, a, strcmp(b, "—") ? 7 : 9, b,
               strcmp(d, "—") ? 7 : 9, d, strcmp(e, "—") ? 7 : 9, e,
               strcmp(f, "—") ? 6 : 8, f, g);

        reason = tbc_str(acct, "reason", NULL);

        if (reason && strcmp(state, "ready") != 0) {
            /* whole, wrapped at words: a reason cut short misleads; a
             * failing account's since when, and its last success */

            since = tbc_num(acct, "failing_for", NAN);
            ago = tbc_num(acct, "last_success_ago", NAN);

            if (strcmp(state, "failing") == 0 && !isnan(since)) {
                tbc_clock(e, sizeof(e), since);
                tbc_clock(f, sizeof(f), ago);

                if (isnan(ago)) {
                    snprintf(why, sizeof(why), "%s; failing for %s, no "
                             "success yet", reason, e);
                } else {
                    snprintf(why, sizeof(why), "%s; failing for %s, last "
                             "success %s ago", reason, e, f);
                }

                reason = why;
            }

            printf("  %s  ← ", tbc_c(c, "dim"));
            tbc_wrap(6, 72, reason);
            printf("%s\n", tbc_c(c, "reset"));
        }

        /* the operator's subscription: its 5-hour and 7-day meters */
        if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(acct,
                                                            "subscription")))
        {
            tbc_status_subscription(c,
                cJSON_GetObjectItemCaseSensitive(acct, "subscription"));

        /* Bedrock, Vertex: "—" above is not "unknown yet" but "never" */
        } else if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(limits,
                                                           "observable")))
        {
            learned = tbc_num(cJSON_GetObjectItemCaseSensitive(acct,
                                  "concurrency"), "learned", NAN);

            if (isnan(learned)) {
                printf("  %s  ← limits unobservable%s\n", tbc_c(c, "dim"),
                       tbc_c(c, "reset"));

            } else {
                printf("  %s  ← limits unobservable; concurrency %.0f, as "
                       "its 429s taught%s\n", tbc_c(c, "dim"), learned,
                       tbc_c(c, "reset"));
            }
        }
    }

    /* what SPEND is: the figure the console and the API show */
    printf("\n  %sSPEND: the last %.0f h, the spend caps' window, in flight "
           "included%s\n\n", tbc_c(c, "dim"), hours, tbc_c(c, "reset"));

    tbc_status_pace(c, pace);

    cJSON_Delete(pace);
    cJSON_Delete(j);

    return TBC_OK;
}


/*
 * PACE: every budget and cap read against its pace, the tightest first,
 * each with its verdict and the gateway's words for it
 */

/* "in 3h10m", "in 5d02h" */
static void
tbc_in(char *buf, size_t size, double secs)
{
    long  s;

    if (isnan(secs) || secs < 0) {
        snprintf(buf, size, "—");
        return;
    }

    s = (long) (secs < 1e7 ? secs : 1e7);

    if (s >= 86400) {
        snprintf(buf, size, "%ldd%02ldh", s / 86400, s % 86400 / 3600);

    } else {
        snprintf(buf, size, "%ldh%02ldm", s / 3600, s % 3600 / 60);
    }
}


/*
 * The operator's subscription, under its row:
 *   ← 5h ███████░░░  67% resets in 3h10m · 7d █░░░░░░░░░  10% in 5d02h
 */
static void
tbc_status_subscription(tbc_t *c, const cJSON *sub)
{
    int            i, k, cells;
    char           when[48];
    double         u;
    const char    *names[2] = { "5h", "7d" };
    const cJSON   *wins, *w;

    wins = cJSON_GetObjectItemCaseSensitive(sub, "windows");

    printf("  %s  ←", tbc_c(c, "dim"));

    for (i = 0; i < 2; i++) {
        w = cJSON_GetObjectItemCaseSensitive(wins, names[i]);
        u = tbc_num(w, "utilization", NAN);

        printf("%s %s ", i ? " ·" : "", names[i]);

        if (isnan(u)) {
            printf("not seen yet");
            continue;
        }

        cells = (int) (u * 10 + .5);
        cells = cells > 10 ? 10 : cells;

        for (k = 0; k < 10; k++) {
            printf("%s", k < cells ? "█" : "░");
        }

        tbc_in(when, sizeof(when), tbc_num(w, "resets_in", NAN));
        printf(" %3.0f%% %s%s", u * 100, i ? "in " : "resets in ", when);
    }

    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sub,
                                                      "token_waiting")))
    {
        printf("\n      waiting for a new token (%s)",
               tbc_str(sub, "token_source", "?"));
    }

    printf("%s\n", tbc_c(c, "reset"));
}


static void
tbc_status_pace(tbc_t *c, const cJSON *pace)
{
    const char   *verdict, *color;
    const cJSON  *r, *all, *tight, *week;

    all = cJSON_GetObjectItemCaseSensitive(pace, "readings");
    tight = cJSON_GetObjectItemCaseSensitive(pace, "tightest");
    week = cJSON_GetObjectItemCaseSensitive(pace, "week");

    if (pace == NULL) {
        return;
    }

    printf("  %sPACE%s  ", tbc_c(c, "bold"), tbc_c(c, "reset"));
    tbc_wrap(8, 70, cJSON_IsObject(tight) ? tbc_str(tight, "says", "")
                                          : "no budget or spend cap to pace");
    printf("\n");

    cJSON_ArrayForEach(r, all) {
        verdict = tbc_str(r, "verdict", "?");
        color = (strcmp(verdict, "reached") == 0
                 || strcmp(verdict, "runs out") == 0) ? "red"
                : (strcmp(verdict, "ahead") == 0) ? "yellow" : "green";

        printf("  %-7.7s %-15.15s %s%-8.8s%s ", tbc_str(r, "scope", "?"),
               tbc_str(r, "name", "?"), tbc_c(c, color), verdict,
               tbc_c(c, "reset"));
        tbc_wrap(35, 45, tbc_str(r, "says", ""));
        printf("\n");
    }

    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(week, "budget"))) {
        printf("  %s", tbc_c(c, "dim"));
        tbc_wrap(2, 76, tbc_str(week, "budget", ""));
        printf("%s\n", tbc_c(c, "reset"));
    }

    printf("\n");
}
