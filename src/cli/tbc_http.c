/*
 * tokenbiryani: the gateway's admin API over libcurl, and what the tables
 * are made of.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "tbc.h"
#include "tb_config.h"


typedef struct {
    char                     *data;
    size_t                    len;
} tbc_buf_t;


static int tbc_url_local(const char *url);
static void tbc_sanitize(cJSON *j);


static size_t
tbc_collect(char *p, size_t size, size_t n, void *data)
{
    char       *d;
    tbc_buf_t  *b;

    b = data;
    d = realloc(b->data, b->len + size * n + 1);

    if (d == NULL) {
        return 0;
    }

    memcpy(d + b->len, p, size * n);
    b->data = d;
    b->len += size * n;
    b->data[b->len] = '\0';

    return size * n;
}


CURL *
tbc_curl(const char *url, struct curl_slist *hs, curl_write_callback sink,
    void *data, char *err, long connect_ms)
{
    CURL  *h;

    h = curl_easy_init();
    if (h == NULL) {
        tbc_err("libcurl did not start");
        return NULL;
    }

    err[0] = '\0';

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, data);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);

    return h;
}


CURLcode
tbc_curl_perform(CURL *h, long *code)
{
    CURLcode  rc;

    rc = curl_easy_perform(h);
    *code = 0;

    if (rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    }

    return rc;
}


long
tbc_call(tbc_t *c, const char *method, const char *path, const char *body,
    cJSON **out)
{
    long                code;
    char                url[2048], hdr[1024], errbuf[CURL_ERROR_SIZE];
    CURL               *h;
    CURLcode            rc;
    tbc_buf_t           b;
    struct curl_slist  *hs;

    *out = NULL;

    if (snprintf(url, sizeof(url), "%s%s", c->url, path)
        >= (int) sizeof(url))
    {
        tbc_err("the gateway's URL is too long");
        return 0;
    }

    hs = NULL;

    if (c->key) {
        /* the key travels in a header, never in the URL */
        snprintf(hdr, sizeof(hdr), "x-api-key: %s", c->key);
        hs = curl_slist_append(hs, hdr);
    }

    if (body) {
        hs = curl_slist_append(hs, "content-type: application/json");
    }

    b.data = NULL;
    b.len = 0;

    h = tbc_curl(url, hs, tbc_collect, &b, errbuf, 3000L);
    if (h == NULL) {
        curl_slist_free_all(hs);
        return 0;
    }

    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);

    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    }

    rc = tbc_curl_perform(h, &code);

    if (rc != CURLE_OK) {
        tbc_err("no gateway answered at %s: %s (is it running? "
                "`tokenbiryani serve`, or --url)", c->url,
                errbuf[0] ? errbuf : curl_easy_strerror(rc));

    } else if (b.data) {
        *out = cJSON_Parse(b.data);
        tbc_sanitize(*out);
    }

    free(b.data);
    curl_slist_free_all(hs);
    curl_easy_cleanup(h);

    return code;
}


/* whether a URL's host is this machine: loopback, or every address */
static int
tbc_url_local(const char *url)
{
    size_t       n;
    const char  *h;

    static const char  *local[] = { "localhost", "127.", "[::1]",
                                    "0.0.0.0", "[::]", NULL };
    int                 i;

    h = strstr(url, "://");
    if (h == NULL) {
        return 0;
    }

    h += 3;
    n = strcspn(h, "/?#");

    if (memchr(h, '@', n) != NULL) {
        return 0;
    }

    for (i = 0; local[i]; i++) {
        if (strncmp(h, local[i], strlen(local[i])) != 0) {
            continue;
        }

        /* "127." is a prefix; the others end the host */
        if (local[i][strlen(local[i]) - 1] == '.') {
            return strspn(h + 4, "0123456789.") == strcspn(h + 4, ":/?#");
        }

        return h[strlen(local[i])] == ':' || h[strlen(local[i])] == '/'
               || h[strlen(local[i])] == '\0';
    }

    return 0;
}


/* what a tenant can put in a model's name never drives the terminal */
static void
tbc_sanitize(cJSON *j)
{
    unsigned char  *p;
    cJSON          *v;

    if (cJSON_IsString(j) && j->valuestring) {
        for (p = (unsigned char *) j->valuestring; *p; p++) {
            if (*p < 0x20 || *p == 0x7f) {
                *p = '?';

            } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
                /* C1 controls, U+0080 to U+009F */
                p[0] = '?';
                p[1] = '?';
                p++;
            }
        }
    }

    cJSON_ArrayForEach(v, j) {
        tbc_sanitize(v);
    }
}


const char *
tbc_error_message(const cJSON *j)
{
    const cJSON  *e, *m;

    e = cJSON_GetObjectItemCaseSensitive(j, "error");
    m = cJSON_GetObjectItemCaseSensitive(e, "message");

    return cJSON_IsString(m) ? m->valuestring : "";
}


/*
 * The API's words for what the command says with a flag: its hints name
 * the fields of a JSON body, which the operator of the command never saw
 */
static const char *
tbc_cli_words(const char *msg, char *buf, size_t size)
{
    size_t       i, n;
    const char  *p;

    static const struct {
        const char  *api;
        const char  *cli;
    }  words[] = {
        { "\"probe\": false", "--no-test" },
        { NULL, NULL }
    };

    for (i = 0; words[i].api; i++) {
        p = strstr(msg, words[i].api);
        n = strlen(words[i].api);

        if (p && (size_t) (p - msg) + strlen(words[i].cli) + strlen(p + n)
                 < size)
        {
            snprintf(buf, size, "%.*s%s%s", (int) (p - msg), msg,
                     words[i].cli, p + n);
            return buf;
        }
    }

    return msg;
}


cJSON *
tbc_admin(tbc_t *c, const char *method, const char *path, const char *body,
    int *rc)
{
    long    code;
    char    words[1024];
    cJSON  *j;

    if (c->key == NULL && c->config_err[0]) {
        /* the file is there and says something wrong: that, not "no key" */
        tbc_err("no admin key: %s cannot be read: %s (or give one with "
                "--key, $TOKENBIRYANI_KEY)", c->config, c->config_err);
        *rc = TBC_USAGE;
        return NULL;
    }

    if (c->key == NULL) {
        tbc_err("no admin key: --key, $TOKENBIRYANI_KEY, or an admin key in "
                "%s (`tokenbiryani init` writes one)", c->config);
        *rc = TBC_USAGE;
        return NULL;
    }

    /*
     * A directory's .tokenbiryani/url is the word of whoever wrote that
     * directory: a key given from elsewhere goes there only if it is
     * this machine
     */
    if (c->url_from_file && c->key_from != c->config
        && !tbc_url_local(c->url))
    {
        tbc_err("this directory's .tokenbiryani/url names %s, not this "
                "machine: the key from %s goes there only with --url",
                c->url, c->key_from);
        *rc = TBC_USAGE;
        return NULL;
    }

    code = tbc_call(c, method, path, body, &j);

    if (code == 0) {
        *rc = TBC_UNREACHABLE;
        return NULL;
    }

    if (code >= 200 && code < 300 && j) {
        *rc = TBC_OK;
        return j;
    }

    if (code == 401 || code == 403) {
        tbc_err("the gateway refused the admin key from %s (%ld): %s",
                c->key_from, code, tbc_error_message(j));

    } else {
        tbc_err("%s %s: %ld %s", method, path, code,
                j ? tbc_cli_words(tbc_error_message(j), words, sizeof(words))
                  : "(not the gateway's JSON)");
    }

    c->probe_refused = (code == 400
                        && cJSON_GetObjectItemCaseSensitive(j, "probe"));

    cJSON_Delete(j);
    *rc = TBC_REFUSED;

    return NULL;
}


const char *
tbc_config_admin_key(const char *path, char *err, size_t size)
{
    size_t        i;
    const char   *key;
    tb_config_t  *cf;

    err[0] = '\0';

    if (access(path, F_OK) != 0) {
        return NULL;
    }

    cf = tb_config_load_file(path, NULL, err, size);
    if (cf == NULL) {
        if (err[0] == '\0') {
            snprintf(err, size, "it is not a configuration");
        }

        return NULL;
    }

    key = NULL;

    for (i = 0; i < cf->nkeys; i++) {
        if (cf->keys[i].admin && cf->keys[i].key) {
            key = strdup(cf->keys[i].key);
            break;
        }
    }

    /* kept for the command's life: the key is all it needs of it */
    tb_config_free(cf);

    return key;
}


/* output */

const char *
tbc_c(const tbc_t *c, const char *what)
{
    static const struct {
        const char  *name;
        const char  *esc;
    }  colors[] = {
        { "green", "\033[32m" }, { "blue", "\033[34m" },
        { "red", "\033[31m" }, { "yellow", "\033[33m" },
        { "dim", "\033[2m" }, { "bold", "\033[1m" },
        { "reset", "\033[0m" }, { NULL, NULL }
    };

    int  i;

    if (!c->color) {
        return "";
    }

    for (i = 0; colors[i].name; i++) {
        if (strcmp(colors[i].name, what) == 0) {
            return colors[i].esc;
        }
    }

    return "";
}


/* dollars as the console shows them: $0.00, $0.0042, $12.30, $1234 */
void
tbc_usd(char *buf, size_t size, double n)
{
    if (n == 0) {
        snprintf(buf, size, "$0.00");

    } else if (fabs(n) < 0.01) {
        snprintf(buf, size, "$%.4f", n);

    } else if (fabs(n) < 100) {
        snprintf(buf, size, "$%.2f", n);

    } else {
        snprintf(buf, size, "$%.0f", n);
    }
}


/*
 * Prints s in lines of at most width columns, broken at spaces, never
 * inside a word (one longer than a line is its own line), continuation
 * lines indented by indent columns; the last line without its newline
 */
void
tbc_wrap(int indent, int width, const char *s)
{
    int          cols;
    const char  *p, *q, *brk;

    for (p = s; *p == ' '; p++) { /* void */ }

    for ( ;; ) {
        cols = 0;
        brk = NULL;

        for (q = p; *q; q++) {
            if (((unsigned char) *q & 0xc0) != 0x80) {
                if (cols == width) {
                    break;
                }

                cols++;
            }

            if (*q == ' ') {
                brk = q;
            }
        }

        if (*q == '\0') {
            fputs(p, stdout);
            return;
        }

        if (*q == ' ') {
            brk = q;

        } else if (brk == NULL) {
            brk = strchr(q, ' ');

            if (brk == NULL) {
                fputs(p, stdout);
                return;
            }
        }

        printf("%.*s", (int) (brk - p), p);

        for (p = brk; *p == ' '; p++) { /* void */ }

        if (*p == '\0') {
            return;
        }

        printf("\n%*s", indent, "");
    }
}


/* printf's width for s to fill w columns: a UTF-8 sequence is one column
 * of several bytes, and printf counts bytes */
int
tbc_w(int w, const char *s)
{
    for ( /* void */ ; *s; s++) {
        if (((unsigned char) *s & 0xc0) == 0x80) {
            w++;
        }
    }

    return w;
}


void
tbc_pct(char *buf, size_t size, double f)
{
    if (isnan(f) || f < 0) {
        snprintf(buf, size, "—");
        return;
    }

    snprintf(buf, size, "%.0f%%", f * 100);
}


void
tbc_tokens(char *buf, size_t size, double n)
{
    if (isnan(n) || n < 0) {
        snprintf(buf, size, "—");

    } else if (n >= 999500) {
        /* not "1000k": what rounds to a thousand k is a million */
        snprintf(buf, size, "%.2fM", n / 1e6);

    } else if (n >= 1e3) {
        snprintf(buf, size, "%.0fk", n / 1e3);

    } else {
        snprintf(buf, size, "%.0f", n);
    }
}


void
tbc_clock(char *buf, size_t size, double secs)
{
    long  s;

    if (isnan(secs) || secs < 0) {
        snprintf(buf, size, "—");
        return;
    }

    s = (long) ceil(secs);

    if (s >= 3600) {
        snprintf(buf, size, "%ldh%02ldm", s / 3600, s % 3600 / 60);

    } else {
        snprintf(buf, size, "%02ld:%02ld", s / 60, s % 60);
    }
}


void
tbc_json_print(const cJSON *j)
{
    char  *s;

    s = cJSON_Print(j);

    if (s) {
        puts(s);
        free(s);
    }
}


double
tbc_num(const cJSON *obj, const char *name, double dflt)
{
    const cJSON  *v;

    v = cJSON_GetObjectItemCaseSensitive(obj, name);

    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}


const char *
tbc_str(const cJSON *obj, const char *name, const char *dflt)
{
    const cJSON  *v;

    v = cJSON_GetObjectItemCaseSensitive(obj, name);

    return cJSON_IsString(v) ? v->valuestring : dflt;
}
