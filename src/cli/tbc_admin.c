/*
 * tokenbiryani accounts, keys, strategies, requests, usage, sessions: the
 * admin API in a terminal.  Every table fits 80 columns; --json prints
 * the gateway's answer as it is.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tbc.h"
#include "tb_chars.h"


static char *tbc_join(const cJSON *arr);


/* prints j as JSON with --json; 1 if it did */
static int
tbc_json_out(tbc_t *c, cJSON *j)
{
    if (!c->json) {
        return 0;
    }

    tbc_json_print(j);

    return 1;
}


/*
 * GET path for a table: the answer in *out to print, or NULL and the exit
 * code to end with (TBC_OK where --json has printed the answer).
 */
static int
tbc_table(tbc_t *c, const char *path, cJSON **out)
{
    int     rc;
    cJSON  *j;

    *out = NULL;

    j = tbc_admin(c, "GET", path, NULL, &rc);
    if (j == NULL) {
        return rc;
    }

    if (tbc_json_out(c, j)) {
        cJSON_Delete(j);
        return TBC_OK;
    }

    *out = j;

    return TBC_OK;
}


/* --limit N, 20 by default */
static int
tbc_limit(tbc_t *c)
{
    const char  *limit;

    limit = tbc_opt(c, "limit");

    return limit ? atoi(limit) : 20;
}


/* a path with one id, escaped: ids are letters, digits, '_', '-', '.' */
static int
tbc_path(char *buf, size_t size, const char *fmt, const char *id)
{
    if (*id != '\0' && !tb_chars_ok(id, strlen(id), SIZE_MAX, "_-.")) {
        tbc_err("\"%s\": an id or a name is letters, digits, '_', '-' "
                "or '.'", id);
        return 0;
    }

    snprintf(buf, size, fmt, id);

    return 1;
}


static int
tbc_need_args(tbc_t *c, int n, const char *usage)
{
    if (c->nargs != n) {
        tbc_err("usage: tokenbiryani %s", usage);
        return 0;
    }

    return 1;
}


/* a number option into the body; 0 and an error if it is not one */
static int
tbc_num_opt(tbc_t *c, cJSON *body, const char *opt, const char *field)
{
    char        *end;
    double       v;
    const char  *s;

    s = tbc_opt(c, opt);
    if (s == NULL) {
        return 1;
    }

    v = strtod(s, &end);

    if (end == s || *end != '\0' || !isfinite(v)) {
        tbc_err("--%s: \"%s\" is not a number", opt, s);
        return 0;
    }

    cJSON_AddNumberToObject(body, field, v);

    return 1;
}


/* a comma-separated list option into the body */
static void
tbc_list_opt(tbc_t *c, cJSON *body, const char *opt, const char *field)
{
    char        *copy, *p, *save;
    cJSON       *arr;
    const char  *s;

    s = tbc_opt(c, opt);
    if (s == NULL) {
        return;
    }

    arr = cJSON_AddArrayToObject(body, field);
    copy = strdup(s);

    if (arr == NULL || copy == NULL) {
        free(copy);
        return;
    }

    for (p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        cJSON_AddItemToArray(arr, cJSON_CreateString(p));
    }

    free(copy);
}


/* what an account test said, as one line; 1 if it is a failure */
static int
tbc_test_line(tbc_t *c, const char *id, const cJSON *t)
{
    int           n;
    double        ra;
    const char   *family;
    const cJSON  *missing, *m;

    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "ok"))) {
        printf("  %s✗%s %-16s %.0f %s\n", tbc_c(c, "red"), tbc_c(c, "reset"),
               id, tbc_num(t, "status", 0),
               tbc_str(t, "detail", tbc_str(t, "error", "failed")));
        return 1;
    }

    /* a 429 proves the credential, and says it cannot serve now */

    if (tbc_num(t, "status", 0) == 429) {
        ra = tbc_num(t, "retry_after_seconds", -1);

        if (ra >= 0) {
            printf("  %s✓%s %-16s credential ok · rate-limited for %.0f s\n",
                   tbc_c(c, "yellow"), tbc_c(c, "reset"), id, ceil(ra));
        } else {
            printf("  %s✓%s %-16s credential ok · rate-limited (the answer "
                   "says not until when)\n", tbc_c(c, "yellow"),
                   tbc_c(c, "reset"), id);
        }

        return 0;
    }

    family = tbc_str(t, "family", "none");
    missing = cJSON_GetObjectItemCaseSensitive(t, "missing");
    n = cJSON_GetArraySize(missing);

    if (strcmp(family, "none") == 0) {
        printf("  %s?%s %-16s credential ok · no limit header came back\n",
               tbc_c(c, "yellow"), tbc_c(c, "reset"), id);
        return 0;
    }

    if (n) {
        printf("  %s!%s %-16s credential ok · %d rate-limit header%s "
               "missing:", tbc_c(c, "yellow"), tbc_c(c, "reset"), id, n,
               n == 1 ? "" : "s");

        cJSON_ArrayForEach(m, missing) {
            if (cJSON_IsString(m)) {
                printf(" %s", m->valuestring
                              + (strncmp(m->valuestring,
                                         "anthropic-ratelimit-", 20) == 0
                                 ? 20 : 0));
            }
        }

        printf("\n");
        return 0;
    }

    printf("  %s✓%s %-16s credential ok · every limit header present "
           "(%.0f ms)\n", tbc_c(c, "green"), tbc_c(c, "reset"), id,
           tbc_num(t, "latency_ms", 0));

    return 0;
}


static int
tbc_accounts_list(tbc_t *c)
{
    int           rc;
    cJSON        *j;
    char          spend[32];
    double        hours;
    const char   *cred;
    const cJSON  *a, *usage;

    hours = 24;

    rc = tbc_table(c, "/admin/accounts", &j);
    if (j == NULL) {
        return rc;
    }

    printf("%-18s %-14s %-10s %-8s %-12s %10s\n", "ACCOUNT", "TYPE",
           "STATE", "SOURCE", "CREDENTIAL", "SPEND");

    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(j, "accounts"))
    {
        usage = cJSON_GetObjectItemCaseSensitive(a, "usage");
        cred = tbc_str(a, "credential", "—");

        /* "…1234": widths in columns, not bytes */
        tbc_usd(spend, sizeof(spend), tbc_num(usage, "window_usd", 0));
        hours = tbc_num(usage, "window_hours", hours);

        printf("%-18.18s %-14.14s %-10.10s %-8.8s %-*.*s %10s\n",
               tbc_str(a, "id", "?"), tbc_str(a, "type", "?"),
               tbc_str(a, "state", "?"), tbc_str(a, "source", "?"),
               tbc_w(12, cred), tbc_w(12, cred), cred, spend);
    }

    printf("\nSPEND: the last %.0f h, the spend caps' window, in flight "
           "included\n", hours);

    cJSON_Delete(j);

    return TBC_OK;
}


static int
tbc_accounts_add(tbc_t *c)
{
    int          rc;
    char        *text, line[1024];
    cJSON       *body, *j, *probe, *rec;
    const char  *key, *type;

    if (!tbc_need_args(c, 2, "accounts add ID --api-key K [options]")) {
        return TBC_USAGE;
    }

    /*
     * --api-key -: the first line of stdin, so that the credential is in
     * no process list and no shell history; without it, $ANTHROPIC_API_KEY
     */
    key = tbc_secret(c, "api-key", line, sizeof(line));

    if (key && key[0] == '\0') {
        tbc_err("--api-key -: nothing on stdin");
        return TBC_USAGE;

    } else if (key == NULL) {
        key = getenv("ANTHROPIC_API_KEY");
    }

    if (key == NULL || key[0] == '\0') {
        tbc_err("accounts add needs a credential: --api-key K, --api-key - "
                "(read from stdin) or $ANTHROPIC_API_KEY");
        return TBC_USAGE;
    }

    body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "id", c->args[1]);
    cJSON_AddStringToObject(body, "api_key", key);

    type = tbc_opt(c, "type");
    if (type) {
        cJSON_AddStringToObject(body, "type", type);
    }

    if (tbc_opt(c, "name")) {
        cJSON_AddStringToObject(body, "name", tbc_opt(c, "name"));
    }

    if (tbc_opt(c, "base-url")) {
        cJSON_AddStringToObject(body, "base_url", tbc_opt(c, "base-url"));
    }

    if (!tbc_num_opt(c, body, "priority", "priority")
        || !tbc_num_opt(c, body, "cost-tier", "cost_tier")
        || !tbc_num_opt(c, body, "spend-cap", "spend_cap_usd"))
    {
        cJSON_Delete(body);
        return TBC_USAGE;
    }

    if (tbc_opt(c, "no-test")) {
        cJSON_AddBoolToObject(body, "probe", 0);
    }

    text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);

    if (text == NULL) {
        return TBC_FAIL;
    }

    j = tbc_admin(c, "POST", "/admin/accounts", text, &rc);

    /* the credential is not left in freed memory */
    memset(text, 0, strlen(text));
    free(text);
    memset(line, 0, sizeof(line));

    if (j == NULL) {
        /* the credential failed its check: 1; the gateway said no: 4 */
        return (rc == TBC_REFUSED && c->probe_refused) ? TBC_FAIL : rc;
    }

    if (!tbc_json_out(c, j)) {
        probe = cJSON_GetObjectItemCaseSensitive(j, "probe");
        rec = cJSON_GetObjectItemCaseSensitive(j, "account");

        if (probe && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(probe,
                                                                   "ok")))
        {
            printf("ok credential accepted in %.2fs\n",
                   tbc_num(probe, "latency_ms", 0) / 1000);
        }

        printf("%s added (%s)\n", c->args[1],
               tbc_str(rec ? rec : j, "credential", "stored"));
    }

    cJSON_Delete(j);

    return TBC_OK;
}


static int
tbc_accounts_test(tbc_t *c)
{
    int           rc, failed;
    char          path[256];
    cJSON        *list, *j;
    const cJSON  *a;
    const char   *id;

    if (c->nargs > 2) {
        tbc_err("usage: tokenbiryani accounts test [ID]");
        return TBC_USAGE;
    }

    failed = 0;

    if (c->nargs == 2) {
        if (!tbc_path(path, sizeof(path), "/admin/accounts/%s/test",
                      c->args[1]))
        {
            return TBC_USAGE;
        }

        j = tbc_admin(c, "POST", path, "{}", &rc);
        if (j == NULL) {
            return rc;
        }

        if (!tbc_json_out(c, j)) {
            failed = tbc_test_line(c, c->args[1], j);
        }

        cJSON_Delete(j);

        return failed ? TBC_FAIL : TBC_OK;
    }

    list = tbc_admin(c, "GET", "/admin/accounts", NULL, &rc);
    if (list == NULL) {
        return rc;
    }

    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(list, "accounts"))
    {
        id = tbc_str(a, "id", "");

        if (!tbc_path(path, sizeof(path), "/admin/accounts/%s/test", id)) {
            continue;
        }

        j = tbc_admin(c, "POST", path, "{}", &rc);

        if (j == NULL) {
            failed = 1;
            continue;
        }

        if (!tbc_json_out(c, j)) {
            failed |= tbc_test_line(c, id, j);
        }

        cJSON_Delete(j);
    }

    cJSON_Delete(list);

    return failed ? TBC_FAIL : TBC_OK;
}


static int
tbc_accounts_simple(tbc_t *c, const char *method, const char *fmt,
    const char *done)
{
    int     rc;
    char    path[256];
    cJSON  *j;

    if (!tbc_need_args(c, 2, "accounts rm|enable|disable ID")
        || !tbc_path(path, sizeof(path), fmt, c->args[1]))
    {
        return TBC_USAGE;
    }

    j = tbc_admin(c, method, path, method[0] == 'P' ? "{}" : NULL, &rc);
    if (j == NULL) {
        return rc;
    }

    if (!tbc_json_out(c, j)) {
        printf("%s %s", c->args[1], done);

        if (tbc_str(j, "state", NULL)) {
            printf(" (%s)", tbc_str(j, "state", ""));
        }

        printf("\n");
    }

    cJSON_Delete(j);

    return TBC_OK;
}


int
tbc_accounts(tbc_t *c)
{
    const char  *sub;

    sub = c->nargs ? c->args[0] : "list";

    if (strcmp(sub, "list") == 0) {
        return tbc_accounts_list(c);
    }

    if (strcmp(sub, "add") == 0) {
        return tbc_accounts_add(c);
    }

    if (strcmp(sub, "test") == 0) {
        return tbc_accounts_test(c);
    }

    if (strcmp(sub, "rm") == 0) {
        return tbc_accounts_simple(c, "DELETE", "/admin/accounts/%s",
                                   "removed");
    }

    if (strcmp(sub, "enable") == 0) {
        return tbc_accounts_simple(c, "POST", "/admin/accounts/%s/enable",
                                   "enabled");
    }

    if (strcmp(sub, "disable") == 0) {
        return tbc_accounts_simple(c, "POST", "/admin/accounts/%s/disable",
                                   "disabled");
    }

    tbc_err("accounts: no \"%s\" (list, add, test, rm, enable, disable)",
            sub);

    return TBC_USAGE;
}


/* keys */

static cJSON *
tbc_key_body(tbc_t *c, const char *name)
{
    cJSON  *body;

    body = cJSON_CreateObject();

    if (name) {
        cJSON_AddStringToObject(body, "name", name);
    }

    if (tbc_opt(c, "admin")) {
        cJSON_AddBoolToObject(body, "admin", 1);
    }

    tbc_list_opt(c, body, "models", "models");
    tbc_list_opt(c, body, "pool", "pool");

    if (!tbc_num_opt(c, body, "rpm", "rpm")
        || !tbc_num_opt(c, body, "spend-cap", "spend_cap_usd")
        || !tbc_num_opt(c, body, "expires-in", "expires_in_seconds"))
    {
        cJSON_Delete(body);
        return NULL;
    }

    return body;
}


/* one row of the keys table; a limit that is not set is "—" */
static void
tbc_key_row(const cJSON *k)
{
    char        *text, rpm[32], cap[32];
    const char  *m;

    /* the patterns, joined: claude-sonnet-*,claude-haiku-* */
    text = tbc_join(cJSON_GetObjectItemCaseSensitive(k, "models"));

    if (tbc_num(k, "rpm", -1) >= 0) {
        snprintf(rpm, sizeof(rpm), "%.0f", tbc_num(k, "rpm", 0));

    } else {
        strcpy(rpm, "—");
    }

    if (tbc_num(k, "spend_cap_usd", -1) >= 0) {
        snprintf(cap, sizeof(cap), "$%.2f", tbc_num(k, "spend_cap_usd", 0));

    } else {
        strcpy(cap, "—");
    }

    m = text ? text : "—";

    printf("%-20.20s %-7.7s %-5s %-*.*s %*s %*s\n",
           tbc_str(k, "name", "?"), tbc_str(k, "source", "?"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(k, "admin"))
           ? "yes" : "no", tbc_w(22, m), tbc_w(22, m), m,
           tbc_w(5, rpm), rpm, tbc_w(10, cap), cap);

    free(text);
}


int
tbc_keys(tbc_t *c)
{
    int           rc;
    char          path[256], *text;
    cJSON        *j, *body;
    const cJSON  *k, *rec;
    const char   *sub;

    sub = c->nargs ? c->args[0] : "list";

    if (strcmp(sub, "list") == 0) {
        rc = tbc_table(c, "/admin/keys", &j);
        if (j == NULL) {
            return rc;
        }

        printf("%-20s %-7s %-5s %-22s %5s %10s\n", "KEY", "SOURCE",
               "ADMIN", "MODELS", "RPM", "CAP");

        cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(j, "keys")) {
            tbc_key_row(k);
        }

        cJSON_Delete(j);

        return TBC_OK;
    }

    if (strcmp(sub, "mint") == 0 || strcmp(sub, "rescope") == 0) {
        if (!tbc_need_args(c, 2, "keys mint|rescope NAME [options]")
            || !tbc_path(path, sizeof(path), "/admin/keys/%s", c->args[1]))
        {
            return TBC_USAGE;
        }

        body = tbc_key_body(c, sub[0] == 'm' ? c->args[1] : NULL);
        if (body == NULL) {
            return TBC_USAGE;
        }

        if (sub[0] == 'r' && tbc_opt(c, "admin")) {
            tbc_err("a key's admin cannot change: revoke it and mint another");
            cJSON_Delete(body);
            return TBC_USAGE;
        }

        text = cJSON_PrintUnformatted(body);
        cJSON_Delete(body);

        j = tbc_admin(c, sub[0] == 'm' ? "POST" : "PATCH",
                      sub[0] == 'm' ? "/admin/keys" : path, text, &rc);
        free(text);

        if (j == NULL) {
            return rc;
        }

        if (!tbc_json_out(c, j)) {
            if (sub[0] == 'm') {
                rec = cJSON_GetObjectItemCaseSensitive(j, "record");
                printf("%s minted%s. Its secret, shown this once:\n\n  %s\n\n"
                       "export ANTHROPIC_BASE_URL=%s\n"
                       "export ANTHROPIC_AUTH_TOKEN=%s\n",
                       c->args[1],
                       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec,
                                                                     "admin"))
                       ? " (admin)" : "", tbc_str(j, "key", "?"), c->url,
                       tbc_str(j, "key", "?"));

            } else {
                printf("%s rescoped\n", c->args[1]);
            }
        }

        cJSON_Delete(j);

        return TBC_OK;
    }

    if (strcmp(sub, "revoke") == 0) {
        if (!tbc_need_args(c, 2, "keys revoke NAME")
            || !tbc_path(path, sizeof(path), "/admin/keys/%s", c->args[1]))
        {
            return TBC_USAGE;
        }

        j = tbc_admin(c, "DELETE", path, NULL, &rc);
        if (j == NULL) {
            return rc;
        }

        if (!tbc_json_out(c, j)) {
            printf("%s revoked: every worker refuses it from its next "
                   "request\n", c->args[1]);
        }

        cJSON_Delete(j);

        return TBC_OK;
    }

    tbc_err("keys: no \"%s\" (list, mint, rescope, revoke)", sub);

    return TBC_USAGE;
}


int
tbc_strategies(tbc_t *c)
{
    int           rc;
    cJSON        *j;
    const cJSON  *s;

    j = tbc_admin(c, "GET", "/admin/strategies", NULL, &rc);
    if (j == NULL) {
        return rc;
    }

    if (!tbc_json_out(c, j)) {
        cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(j,
                                                               "strategies"))
        {
            printf("%s %-18s ",
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s,
                                                                 "current"))
                   ? "*" : " ", tbc_str(s, "name", "?"));
            tbc_wrap(21, 56, tbc_str(s, "description", ""));
            printf("%s\n",
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s,
                                                                 "plugin"))
                   ? " (plugin)" : "");
        }
    }

    cJSON_Delete(j);

    return TBC_OK;
}


/* an array of strings joined by commas (malloc'ed), NULL when none */
static char *
tbc_join(const cJSON *arr)
{
    char         *text;
    size_t        len;
    const cJSON  *v;

    len = 0;

    cJSON_ArrayForEach(v, arr) {
        if (cJSON_IsString(v)) {
            len += strlen(v->valuestring) + 1;
        }
    }

    if (len == 0 || (text = malloc(len)) == NULL) {
        return NULL;
    }

    text[0] = '\0';

    cJSON_ArrayForEach(v, arr) {
        if (cJSON_IsString(v)) {
            if (text[0]) {
                strcat(text, ",");
            }

            strcat(text, v->valuestring);
        }
    }

    return text;
}


/* one request, as the inspector shows it */
static void
tbc_request_detail(tbc_t *c, const cJSON *r)
{
    int           first, n;
    char          ttft[32];
    const cJSON  *a, *d, *cand, *terms, *t, *u, *cost;

    printf("%s  %s · %s · key %s · %s\n", tbc_str(r, "request_id", "?"),
           tbc_str(r, "started_at", "?"), tbc_str(r, "model", "?"),
           tbc_str(r, "key", "?"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "streamed"))
           ? "stream" : "JSON");

    printf("\nattempts  ");
    first = 1;

    n = 0;

    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(r, "attempts")) {
        /* the time between two attempts: its backoff, or the queue */
        if (!first && tbc_num(a, "waited_ms", 0) > 0) {
            printf(" → ⏱ %.0f ms", tbc_num(a, "waited_ms", 0));
        }

        printf("%s%s → %.0f (%.0f ms)", first ? "" : " → ",
               tbc_str(a, "account", "?"), tbc_num(a, "status", 0),
               tbc_num(a, "latency_ms", 0));
        first = 0;
        n++;
    }

    printf("%s\n", first ? "none" : "");

    /* every attempt's decision, when there was more than one */

    if (n > 1) {
        n = 0;

        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(r,
                                                               "attempts"))
        {
            printf("  %d. %-16.16s chosen among %.0f eligible, score %.4f",
                   ++n, tbc_str(a, "account", "?"),
                   tbc_num(a, "eligible", 0), tbc_num(a, "score", 0));

            if (n > 1) {
                printf(", %.0f ms after the one before", tbc_num(a,
                                                        "waited_ms", 0));
            }

            printf("\n");
        }
    }

    u = cJSON_GetObjectItemCaseSensitive(r, "usage");
    cost = cJSON_GetObjectItemCaseSensitive(r, "cost");

    printf("tokens    in %.0f · out %.0f · cache read %.0f · cache write "
           "%.0f\n", tbc_num(u, "input_tokens", 0),
           tbc_num(u, "output_tokens", 0),
           tbc_num(u, "cache_read_input_tokens", 0),
           tbc_num(u, "cache_creation_input_tokens", 0));

    if (tbc_num(cost, "usd", -1) >= 0) {
        printf("cost      $%.6f\n", tbc_num(cost, "usd", 0));
    } else {
        printf("cost      unknown (no price)\n");
    }

    if (tbc_num(r, "ttft_ms", -1) >= 0) {
        snprintf(ttft, sizeof(ttft), "%.0f ms", tbc_num(r, "ttft_ms", 0));

    } else {
        snprintf(ttft, sizeof(ttft), "—");
    }

    printf("time      %.0f ms · first token %s · queued %.0f ms · "
           "affinity %s\n", tbc_num(r, "latency_ms", 0), ttft,
           tbc_num(r, "queued_ms", 0), tbc_str(r, "affinity", "—"));

    d = cJSON_GetObjectItemCaseSensitive(r, "decision");

    if (d == NULL) {
        return;
    }

    printf("\ndecision  %s, %s chosen, affinity %s%s\n",
           tbc_str(d, "strategy", "?"), tbc_str(d, "chosen", "none"),
           tbc_str(d, "affinity", "—"),
           n > 1 ? " (the last attempt's)" : "");

    cJSON_ArrayForEach(cand, cJSON_GetObjectItemCaseSensitive(d,
                                                              "candidates"))
    {
        printf("  %-16.16s %-12.40s", tbc_str(cand, "account", "?"),
               tbc_str(cand, "verdict", "?"));

        if (tbc_num(cand, "score", NAN) == tbc_num(cand, "score", NAN)) {
            printf(" %.4f", tbc_num(cand, "score", 0));
        }

        terms = cJSON_GetObjectItemCaseSensitive(cand, "terms");

        cJSON_ArrayForEach(t, terms) {
            if (cJSON_IsNumber(t) && t->valuedouble != 0) {
                printf(" %s %.3g", t->string ? t->string : "?",
                       t->valuedouble);
            }
        }

        printf("\n");
    }
}


int
tbc_requests(tbc_t *c)
{
    int           rc;
    char          path[256];
    cJSON        *j;
    const cJSON  *r, *a, *cost;

    if (c->nargs > 1) {
        tbc_err("usage: tokenbiryani requests [ID] [--limit N]");
        return TBC_USAGE;
    }

    if (c->nargs == 1) {
        if (!tbc_path(path, sizeof(path), "/admin/requests/%s", c->args[0])) {
            return TBC_USAGE;
        }

    } else {
        snprintf(path, sizeof(path), "/admin/requests?limit=%d",
                 tbc_limit(c));
    }

    rc = tbc_table(c, path, &j);
    if (j == NULL) {
        return rc;
    }

    if (c->nargs == 1) {
        tbc_request_detail(c, j);
        cJSON_Delete(j);
        return TBC_OK;
    }

    printf("%-28s %6s %-14s %5s %8s %10s\n", "REQUEST", "STATUS", "ACCOUNT",
           "TRIES", "MS", "COST");

    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(j, "requests")) {
        a = cJSON_GetObjectItemCaseSensitive(r, "attempts");
        cost = cJSON_GetObjectItemCaseSensitive(r, "cost");

        printf("%-28.28s %6.0f %-14.14s %5d %8.0f ",
               tbc_str(r, "request_id", "?"), tbc_num(r, "status", 0),
               tbc_str(r, "account", "—"), cJSON_GetArraySize(a),
               tbc_num(r, "latency_ms", 0));

        if (tbc_num(cost, "usd", -1) >= 0) {
            printf("%3s$%.6f\n", "", tbc_num(cost, "usd", 0));
        } else {
            printf("%12s\n", "—");
        }
    }

    cJSON_Delete(j);

    return TBC_OK;
}


/* one row of the usage table; a cost no price gives is unknown, not $0 */
static void
tbc_usage_row(const char *name, const cJSON *t)
{
    char    in[16], out[16], hit[16], cost[32];
    double  usd;

    tbc_tokens(in, sizeof(in), tbc_num(t, "input_tokens", 0));
    tbc_tokens(out, sizeof(out), tbc_num(t, "output_tokens", 0));
    tbc_pct(hit, sizeof(hit), tbc_num(t, "cache_hit_rate", NAN));

    usd = tbc_num(t, "cost_usd", NAN);

    if (isnan(usd)) {
        snprintf(cost, sizeof(cost), "unknown");

    } else {
        snprintf(cost, sizeof(cost), "$%.6f", usd);
    }

    printf("%-22.22s %8.0f %8s %8s %*s %6.0f %12s\n", name,
           tbc_num(t, "requests", 0), in, out, tbc_w(7, hit), hit,
           tbc_num(t, "errors", 0), cost);
}


int
tbc_usage(tbc_t *c)
{
    int           rc;
    char          path[256];
    cJSON        *j;
    const cJSON  *g;
    const char   *range, *by;

    range = tbc_opt(c, "range");
    by = tbc_opt(c, "by");

    if (range == NULL) {
        range = "24h";
    }

    if (by == NULL) {
        by = "account";
    }

    /* the ranges the gateway keeps, and nothing else: said here, exit 2 */

    if ((strcmp(range, "1h") && strcmp(range, "24h") && strcmp(range, "7d")
         && strcmp(range, "30d"))
        || (strcmp(by, "account") && strcmp(by, "model") && strcmp(by, "key")))
    {
        tbc_err("usage: --range 1h|24h|7d|30d, --by account|model|key");
        return TBC_USAGE;
    }

    snprintf(path, sizeof(path), "/admin/usage?range=%s&by=%s", range, by);

    rc = tbc_table(c, path, &j);
    if (j == NULL) {
        return rc;
    }

    printf("last %s, by %s\n\n%-22s %8s %8s %8s %7s %6s %12s\n", range, by,
           by[0] == 'a' ? "ACCOUNT" : by[0] == 'm' ? "MODEL" : "KEY",
           "REQUESTS", "INPUT", "OUTPUT", "CACHE", "FAILED", "COST");

    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(j, "groups")) {
        tbc_usage_row(tbc_str(g, "name", "")[0] ? tbc_str(g, "name", "")
                                                : "(none)",
                      cJSON_GetObjectItemCaseSensitive(g, "totals"));
    }

    printf("\n");
    tbc_usage_row("all", cJSON_GetObjectItemCaseSensitive(j, "totals"));
    printf("\nFAILED: answered requests that ended in an error; an attempt "
           "that failed over\nto another account and then succeeded is not "
           "one (the console's attempt\nerrors count those)\n");

    cJSON_Delete(j);

    return TBC_OK;
}


int
tbc_sessions(tbc_t *c)
{
    int           rc;
    char          path[256];
    cJSON        *j;
    int           runaway;
    const cJSON  *s;
    const char   *why;

    snprintf(path, sizeof(path), "/admin/sessions?limit=%d", tbc_limit(c));

    rc = tbc_table(c, path, &j);
    if (j == NULL) {
        return rc;
    }

    printf("%-18s %-14s %-14s %6s %12s  %s\n", "SESSION", "KEY", "ACCOUNT",
           "TURNS", "COST", "RUNAWAY");

    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(j, "sessions")) {
        runaway = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s,
                                                                "runaway"));
        why = tbc_str(s, "why", NULL);

        printf("%-18.18s %-14.14s %-14.14s %6.0f %3s$%.6f  %s%s%s\n",
               tbc_str(s, "session", "?"), tbc_str(s, "key", "?"),
               tbc_str(s, "account", "—"), tbc_num(s, "turns", 0), "",
               tbc_num(s, "cost_usd", 0),
               tbc_c(c, runaway ? "red" : "reset"), runaway ? "yes" : "no",
               tbc_c(c, "reset"));

        /* why, whole, under the row: the table stays within 80 columns */

        if (why && why[0]) {
            printf("  ↳ ");
            tbc_wrap(4, 74, why);
            printf("\n");
        }
    }

    cJSON_Delete(j);

    return TBC_OK;
}
