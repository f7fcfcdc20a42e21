/*
 * tokenbiryani doctor: one real request (max_tokens 1) to the Anthropic
 * API, and whether the nine rate-limit headers the gateway routes on came
 * back - read by the gateway's own parser (src/core/tb_ratelimit.c).
 */

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include <curl/curl.h>

#include "tbc.h"
#include "tb_ratelimit.h"
#include "tb_unified.h"
#include "tb_oauth.h"


#define TBC_HEADERS_MAX       64


typedef struct {
    int                       n;
    char                     *name[TBC_HEADERS_MAX];
    char                     *value[TBC_HEADERS_MAX];
    tb_rl_obs_t               obs;
    int64_t                   now_ms;
} tbc_headers_t;


static const char  *tbc_nine[] = {
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
};


static void
tbc_headers_free(tbc_headers_t *h)
{
    int  i;

    for (i = 0; i < h->n; i++) {
        free(h->name[i]);
        free(h->value[i]);
    }

    h->n = 0;
}


static size_t
tbc_header(char *p, size_t size, size_t n, void *data)
{
    size_t          len, i, nl, vl;
    char           *colon, *v;
    tbc_headers_t  *h;

    h = data;
    len = size * n;

    if (len > 5 && memcmp(p, "HTTP/", 5) == 0) {
        /* a status line: the headers of an interim response are not the
         * answer's */
        tbc_headers_free(h);
        tb_rl_obs_init(&h->obs);
        return len;
    }

    colon = memchr(p, ':', len);

    /* kept: what doctor shows, the anthropic-* headers and two more */
    if (colon == NULL || h->n == TBC_HEADERS_MAX
        || !((colon - p > 10 && strncasecmp(p, "anthropic-", 10) == 0)
             || (colon - p == 11 && strncasecmp(p, "retry-after", 11) == 0)
             || (colon - p == 10 && strncasecmp(p, "request-id", 10) == 0)))
    {
        return len;
    }

    nl = (size_t) (colon - p);
    v = colon + 1;
    vl = len - nl - 1;

    while (vl && (*v == ' ' || *v == '\t')) {
        v++;
        vl--;
    }

    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
    {
        vl--;
    }

    h->name[h->n] = strndup(p, nl);
    h->value[h->n] = strndup(v, vl);

    if (h->name[h->n] == NULL || h->value[h->n] == NULL) {
        return 0;
    }

    for (i = 0; i < nl; i++) {
        h->name[h->n][i] = (char) tolower((unsigned char) h->name[h->n][i]);
    }

    (void) tb_rl_obs_header(&h->obs, (unsigned char *) h->name[h->n], nl,
                            (unsigned char *) h->value[h->n], vl, h->now_ms);
    h->n++;

    return len;
}


static const char *
tbc_value(const tbc_headers_t *h, const char *name)
{
    int  i;

    i = tbc_find((const char *const *) h->name, h->n, name);

    return (i == -1) ? NULL : h->value[i];
}


static size_t
tbc_discard(char *p, size_t size, size_t n, void *data)
{
    (void) p;
    (void) data;

    return size * n;
}


/* the headers named, each ticked or crossed: how many are missing */
static int
tbc_checklist(tbc_t *c, tbc_headers_t *h, const char *const *names, int n)
{
    int          i, missing;
    const char  *v;

    missing = 0;

    for (i = 0; i < n; i++) {
        v = tbc_value(h, names[i]);
        missing += (v == NULL);
        printf("  %s%s%s %s\n", tbc_c(c, v ? "green" : "red"),
               v ? "✓" : "✗", tbc_c(c, "reset"), names[i]);
    }

    return missing;
}


/* the last line: whether what answered can serve, and be seen */
static int
tbc_doctor_verdict(tbc_t *c, long code, const char *what, int missing,
    int n, const char *unseen)
{
    if (code != 200 && code != 429) {
        printf("\n%sPROBLEM%s the upstream answered %ld: this %s cannot "
               "serve requests as it is\n", tbc_c(c, "red"),
               tbc_c(c, "reset"), code, what);
        return TBC_FAIL;
    }

    if (missing) {
        printf("\n%sPROBLEM%s %d of %d headers are missing: the gateway "
               "cannot see %s\n", tbc_c(c, "red"), tbc_c(c, "reset"),
               missing, n, unseen);
        return TBC_FAIL;
    }

    printf("\n%sOK%s every header the gateway needs is present and "
           "parsed\n", tbc_c(c, "green"), tbc_c(c, "reset"));

    return TBC_OK;
}


/* a subscription's answer: the six unified headers, what they say */
static int
tbc_doctor_unified(tbc_t *c, tbc_headers_t *h, long code)
{
    int            i, missing;
    double         hr;
    unsigned       w;
    tb_unified_t   u;

    static const char  *six[] = {
        "anthropic-ratelimit-unified-5h-status",
        "anthropic-ratelimit-unified-5h-utilization",
        "anthropic-ratelimit-unified-5h-reset",
        "anthropic-ratelimit-unified-7d-status",
        "anthropic-ratelimit-unified-7d-utilization",
        "anthropic-ratelimit-unified-7d-reset"
    };

    tb_unified_init(&u);

    for (i = 0; i < h->n; i++) {
        (void) tb_unified_header(&u, (const unsigned char *) h->name[i],
                                 strlen(h->name[i]),
                                 (const unsigned char *) h->value[i],
                                 strlen(h->value[i]), h->now_ms);
    }

    printf("\nthe six a subscription's answer carries, that the gateway "
           "routes on:\n");
    missing = tbc_checklist(c, h, six, 6);

    printf("\nwhat the gateway reads from them:\n");

    for (w = TB_UNI_5H; w <= TB_UNI_7D; w++) {
        printf("  %-3s %s", tb_unified_window_name(w),
               u.w[w].status ? tb_unified_status_name(u.w[w].status) : "—");

        if (u.w[w].utilization >= 0) {
            printf(" · %.0f%% used", u.w[w].utilization * 100);
        }

        if (u.w[w].reset_ms > h->now_ms) {
            printf(" · resets in %.0fs",
                   (double) (u.w[w].reset_ms - h->now_ms) / 1000);
        }

        printf("\n");
    }

    hr = tb_unified_headroom(&u, h->now_ms);

    if (hr >= 0) {
        printf("  headroom %.0f%% (1 - the tightest window's use)\n",
               hr * 100);
    }

    tbc_headers_free(h);

    return tbc_doctor_verdict(c, code, "token", missing, 6,
                              "those windows");
}


int
tbc_doctor(tbc_t *c)
{
    int              i, w, missing, oauth;
    long             code;
    char             url[1024], hdr[1024], body[256], err[CURL_ERROR_SIZE],
                     keybuf[1024];
    CURL            *cu;
    CURLcode         rc;
    const char      *key, *base, *model;
    tbc_headers_t    h;
    struct timeval   tv;
    struct curl_slist  *hs;

    static const char  *wins[] = { "requests", "input tokens",
                                   "output tokens" };

    oauth = 0;
    key = tbc_secret(c, "oauth-token", keybuf, sizeof(keybuf));

    if (key) {
        oauth = 1;

        if (!tb_oauth_token_ok(key, strlen(key))) {
            tbc_err("--oauth-token: not a token (a character a header "
                    "cannot carry)");
            return TBC_USAGE;
        }

    } else {
        key = tbc_secret(c, "api-key", keybuf, sizeof(keybuf));
    }

    if (key == NULL) {
        key = getenv("ANTHROPIC_API_KEY");
    }

    if (key == NULL || key[0] == '\0') {
        tbc_err("doctor needs a key: --api-key - (read from stdin) or "
                "$ANTHROPIC_API_KEY");
        return TBC_USAGE;
    }

    base = tbc_opt(c, "base-url");
    if (base == NULL) {
        base = "https://api.anthropic.com";
    }

    model = tbc_opt(c, "model");
    if (model == NULL) {
        model = "claude-haiku-4-5";
    }

    if (strpbrk(model, "\"\\") != NULL || strlen(model) > 128) {
        tbc_err("--model: a model's name has no quote or backslash");
        return TBC_USAGE;
    }

    memset(&h, 0, sizeof(h));
    tb_rl_obs_init(&h.obs);
    gettimeofday(&tv, NULL);
    h.now_ms = (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;

    if (strlen(base) > 512 || strlen(key) > 512) {
        tbc_err("--base-url or the key is too long");
        return TBC_USAGE;
    }

    snprintf(url, sizeof(url), "%s/v1/messages", base);
    snprintf(hdr, sizeof(hdr), oauth ? "Authorization: Bearer %s"
                                     : "x-api-key: %s", key);
    snprintf(body, sizeof(body), "{\"model\":\"%s\",\"max_tokens\":1,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", model);

    hs = curl_slist_append(NULL, hdr);
    hs = curl_slist_append(hs, "anthropic-version: 2023-06-01");

    if (oauth) {
        hs = curl_slist_append(hs, "anthropic-beta: " TB_OAUTH_BETA);
    }
    hs = curl_slist_append(hs, "content-type: application/json");

    cu = tbc_curl(url, hs, tbc_discard, NULL, err, 10000L);
    if (cu == NULL) {
        curl_slist_free_all(hs);
        return TBC_FAIL;
    }

    curl_easy_setopt(cu, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(cu, CURLOPT_HEADERFUNCTION, tbc_header);
    curl_easy_setopt(cu, CURLOPT_HEADERDATA, &h);

    rc = tbc_curl_perform(cu, &code);

    curl_slist_free_all(hs);
    curl_easy_cleanup(cu);

    if (rc != CURLE_OK) {
        tbc_err("%s did not answer: %s", base,
                err[0] ? err : curl_easy_strerror(rc));
        tbc_headers_free(&h);
        return TBC_UNREACHABLE;
    }

    printf("POST %s (%s, max_tokens 1): %ld\n\n", url, model, code);

    printf("headers that came back:\n");

    for (i = 0; i < h.n; i++) {
        if (strncmp(h.name[i], "anthropic-", 10) == 0
            || strcmp(h.name[i], "retry-after") == 0
            || strcmp(h.name[i], "request-id") == 0)
        {
            printf("  %s: %s\n", h.name[i], h.value[i]);
        }
    }

    if (oauth) {
        return tbc_doctor_unified(c, &h, code);
    }

    printf("\nthe nine the gateway routes on:\n");
    missing = tbc_checklist(c, &h, tbc_nine, 9);

    printf("\nwhat the gateway's mirror reads from them:\n");

    for (w = 0; w < TB_NWINDOWS; w++) {
        printf("  %-14s", wins[w]);

        if (h.obs.has & (1u << (w * TB_RL_NFIELDS + TB_RL_LIMIT))) {
            printf(" limit %lld", (long long) h.obs.v[w][TB_RL_LIMIT]);
        } else {
            printf(" limit —");
        }

        if (h.obs.has & (1u << (w * TB_RL_NFIELDS + TB_RL_REMAINING))) {
            printf(" · remaining %lld",
                   (long long) h.obs.v[w][TB_RL_REMAINING]);
        } else {
            printf(" · remaining —");
        }

        if (h.obs.has & (1u << (w * TB_RL_NFIELDS + TB_RL_RESET))) {
            printf(" · reset in %.1fs\n",
                   (double) (h.obs.v[w][TB_RL_RESET] - h.now_ms) / 1000);
        } else {
            printf(" · reset —\n");
        }
    }

    tbc_headers_free(&h);

    return tbc_doctor_verdict(c, code, "key", missing, 9,
                              "those limits, and routes as if they were "
                              "never reached");
}
