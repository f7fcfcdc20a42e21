/*
 * Minted keys: their scope as JSON, parsed and checked (see tb_keyspec.h).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <openssl/rand.h>

#include "tb_chars.h"
#include "tb_keyspec.h"
#include "tb_keys.h"
#include "tb_account.h"
#include "tb_body.h"
#include "tb_hash.h"


/* what may appear in a spec, and where */
#define TB_KS_POST    0x01    /* accepted when minting */
#define TB_KS_PATCH   0x02    /* accepted when rescoping */
#define TB_KS_NULL    0x04    /* null clears it */

#define TB_KS_DOUBLE  0x08    /* the field null clears is a double */

typedef struct {
    const char   *name;
    unsigned      flags;
    size_t        cleared;  /* TB_KS_NULL: the field null sets, in ks */
    int64_t       value;    /* ... to this */
} tb_ks_field_t;

#define TB_KS_SET     (TB_KS_POST | TB_KS_PATCH)
#define TB_KS_I64(m, v)                                                       \
    TB_KS_SET | TB_KS_NULL, offsetof(tb_keyspec_t, m), v
#define TB_KS_DBL(m)                                                          \
    TB_KS_SET | TB_KS_NULL | TB_KS_DOUBLE, offsetof(tb_keyspec_t, m), TB_UNSET

static const tb_ks_field_t  tb_ks_fields[] = {
    { "name",               TB_KS_POST, 0, 0 },
    { "admin",              TB_KS_POST, 0, 0 },
    { "models",             TB_KS_SET, 0, 0 },
    { "pool",               TB_KS_SET, 0, 0 },
    { "rpm",                TB_KS_I64(conf.rpm, TB_UNSET) },
    { "priority",           TB_KS_SET, 0, 0 },
    { "max_wait_seconds",   TB_KS_DBL(conf.max_wait_seconds) },
    { "spend_cap_usd",      TB_KS_DBL(conf.spend_cap_usd) },
    { "session_cap_usd",    TB_KS_DBL(conf.session_cap_usd) },
    { "session_max_turns",  TB_KS_I64(conf.session_max_turns, TB_UNSET) },
    { "max_inflight",       TB_KS_I64(conf.max_inflight, TB_AUTO) },
    { "max_queued",         TB_KS_I64(conf.max_queued, TB_AUTO) },
    { "expires_at",         TB_KS_I64(expires, 0) },
    { "expires_in_seconds", TB_KS_SET, 0, 0 },
    { "auto_breakpoint",    TB_KS_SET | TB_KS_NULL, 0, 0 },
    { "created",            0, 0, 0 },     /* the store's record only */
    { NULL, 0, 0, 0 }
};


static const tb_ks_field_t *
tb_ks_find(const char *name)
{
    const tb_ks_field_t  *f;

    for (f = tb_ks_fields; f->name; f++) {
        if (strcmp(f->name, name) == 0) {
            return f;
        }
    }

    return NULL;
}


static int tb_ks_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));


#include <stdarg.h>

static int
tb_ks_error(char *err, size_t errlen, const char *fmt, ...)
{
    va_list  ap;

    va_start(ap, fmt);
    (void) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);

    return -1;
}


int
tb_keyspec_valid_name(const char *name, size_t len)
{
    return tb_chars_ok(name, len, TB_KEYSPEC_NAME_MAX, "_-.")
           && name[0] != '.';
}


/* printable, no quote or backslash: safe in a log line and a message */
static int
tb_ks_plain(const char *s)
{
    for ( /* void */ ; *s; s++) {
        if ((unsigned char) *s < 0x21 || (unsigned char) *s > 0x7e
            || *s == '"' || *s == '\\')
        {
            return 0;
        }
    }

    return 1;
}


static int
tb_ks_list_copy(tb_strlist_t *dst, const tb_strlist_t *src)
{
    size_t  i;

    dst->n = 0;
    dst->items = NULL;

    if (src->n == 0) {
        return 0;
    }

    dst->items = calloc(src->n, sizeof(char *));
    if (dst->items == NULL) {
        return -1;
    }

    for (i = 0; i < src->n; i++) {
        dst->items[i] = strdup(src->items[i]);
        if (dst->items[i] == NULL) {
            dst->n = i;
            tb_conf_strlist_free(dst);
            return -1;
        }
    }

    dst->n = src->n;

    return 0;
}


void
tb_keyspec_free(tb_keyspec_t *ks)
{
    free(ks->conf.name);
    tb_conf_strlist_free(&ks->conf.models);
    tb_conf_strlist_free(&ks->conf.pool);
    memset(ks, 0, sizeof(tb_keyspec_t));
}


int
tb_keyspec_copy(tb_keyspec_t *dst, const tb_keyspec_t *src)
{
    *dst = *src;
    dst->conf.name = NULL;
    dst->conf.models.items = NULL;
    dst->conf.models.n = 0;
    dst->conf.pool.items = NULL;
    dst->conf.pool.n = 0;

    dst->conf.name = strdup(src->conf.name ? src->conf.name : "");

    if (dst->conf.name == NULL
        || tb_ks_list_copy(&dst->conf.models, &src->conf.models) != 0
        || tb_ks_list_copy(&dst->conf.pool, &src->conf.pool) != 0)
    {
        tb_keyspec_free(dst);
        return -1;
    }

    return 0;
}


/* a list of strings: models or account ids */
static int
tb_ks_list(const cJSON *v, const char *field, int ids,
    tb_keyspec_account_pt account, void *data, tb_strlist_t *out,
    char *err, size_t errlen)
{
    size_t        i, j, n;
    const cJSON  *e;
    const char   *s;

    out->items = NULL;
    out->n = 0;

    if (!cJSON_IsArray(v)) {
        return tb_ks_error(err, errlen, "%s must be an array of strings",
                           field);
    }

    n = (size_t) cJSON_GetArraySize(v);

    if (n > TB_KEYSPEC_LIST_MAX) {
        return tb_ks_error(err, errlen, "%s has %zu entries, at most %d are "
                           "accepted", field, n, TB_KEYSPEC_LIST_MAX);
    }

    if (!ids && n == 0) {
        return tb_ks_error(err, errlen, "%s must name at least one model "
                           "(\"*\" for every model)", field);
    }

    out->items = calloc(n ? n : 1, sizeof(char *));

    if (out->items == NULL) {
        return tb_ks_error(err, errlen, "no memory");
    }

    i = 0;

    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsString(e)) {
            tb_conf_strlist_free(out);
            return tb_ks_error(err, errlen, "%s[%zu] must be a string",
                               field, i);
        }

        s = e->valuestring;

        if (s[0] == '\0' || strlen(s) > (ids ? TB_ID_MAX : TB_MODEL_MAX)
            || !tb_ks_plain(s))
        {
            tb_conf_strlist_free(out);
            return tb_ks_error(err, errlen, "%s[%zu] must be 1 to %d "
                               "printable characters without spaces or "
                               "quotes", field, i,
                               ids ? TB_ID_MAX : TB_MODEL_MAX);
        }

        if (ids && account && !account(data, s)) {
            tb_conf_strlist_free(out);
            return tb_ks_error(err, errlen, "%s[%zu] names no account of "
                               "this gateway: \"%s\"", field, i, s);
        }

        for (j = 0; j < out->n; j++) {
            if (strcmp(out->items[j], s) == 0) {
                tb_conf_strlist_free(out);
                return tb_ks_error(err, errlen, "%s[%zu] repeats \"%s\"",
                                   field, i, s);
            }
        }

        if (out->n == n) {
            break;
        }

        out->items[out->n] = strdup(s);
        if (out->items[out->n] == NULL) {
            tb_conf_strlist_free(out);
            return tb_ks_error(err, errlen, "no memory");
        }

        out->n++;
        i++;
    }

    return 0;
}


/* a whole number in [min, max], as an int64 */
static int
tb_ks_int(const cJSON *v, const char *field, int64_t min, int64_t max,
    int64_t *out, char *err, size_t errlen)
{
    double  d;

    if (!cJSON_IsNumber(v)) {
        return tb_ks_error(err, errlen, "%s must be a number", field);
    }

    d = v->valuedouble;

    if (!isfinite(d) || d != floor(d) || d < (double) min
        || d > (double) max)
    {
        return tb_ks_error(err, errlen, "%s must be a whole number from "
                           "%lld to %lld", field, (long long) min,
                           (long long) max);
    }

    *out = (int64_t) d;

    return 0;
}


static int
tb_ks_money(const cJSON *v, const char *field, double *out, char *err,
    size_t errlen)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)
        || v->valuedouble < 0 || v->valuedouble > 1e9)
    {
        return tb_ks_error(err, errlen, "%s must be a number from 0 to "
                           "1000000000", field);
    }

    *out = v->valuedouble;

    return 0;
}


/* "2027-01-31T12:00:00Z", UTC only */
static int
tb_ks_time(const char *s, int64_t *out)
{
    int        n;
    char       z;
    struct tm  tm;

    memset(&tm, 0, sizeof(tm));
    n = 0;

    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%c%n", &tm.tm_year, &tm.tm_mon,
               &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &z, &n)
        != 7 || z != 'Z' || s[n] != '\0' || tm.tm_mon < 1 || tm.tm_mon > 12
        || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23
        || tm.tm_min > 59 || tm.tm_sec > 60 || tm.tm_year < 1970)
    {
        return -1;
    }

    tm.tm_year -= 1900;
    tm.tm_mon -= 1;

    *out = (int64_t) timegm(&tm);

    return 0;
}


/* one field onto ks */
static int
tb_ks_field(tb_keyspec_t *ks, const cJSON *v, int mode,
    tb_keyspec_account_pt account, void *data, int64_t now, char *err,
    size_t errlen)
{
    char                 *p;
    const char           *f;
    int64_t               n = 0;
    tb_strlist_t          list;
    tb_key_conf_t        *k;
    const tb_ks_field_t  *fd;

    f = v->string;
    k = &ks->conf;

    if (cJSON_IsNull(v)) {
        fd = tb_ks_find(f);

        if (fd == NULL || !(fd->flags & TB_KS_NULL)) {
            return tb_ks_error(err, errlen, "%s cannot be null", f);
        }

        if (strcmp(f, "auto_breakpoint") == 0) {
            /* the cache section's */
            k->auto_breakpoint = 2;
            return 0;
        }

        p = (char *) ks + fd->cleared;

        if (fd->flags & TB_KS_DOUBLE) {
            *(double *) (void *) p = (double) fd->value;

        } else {
            *(int64_t *) (void *) p = fd->value;
        }

        return 0;
    }

    if (strcmp(f, "name") == 0) {
        if (!cJSON_IsString(v)
            || !tb_keyspec_valid_name(v->valuestring,
                                      strlen(v->valuestring)))
        {
            return tb_ks_error(err, errlen, "name must be 1 to %d letters, "
                               "digits, '.', '_' or '-', not starting with "
                               "'.'", TB_KEYSPEC_NAME_MAX);
        }

        free(k->name);
        k->name = strdup(v->valuestring);

        return k->name ? 0 : tb_ks_error(err, errlen, "no memory");
    }

    if (strcmp(f, "admin") == 0 || strcmp(f, "auto_breakpoint") == 0) {
        if (!cJSON_IsBool(v)) {
            return tb_ks_error(err, errlen, "%s must be true or false%s", f,
                               f[0] == 'a' && f[1] == 'u' ? " (or null: the "
                               "cache section's)" : "");
        }

        if (f[1] == 'd') {
            k->admin = cJSON_IsTrue(v) ? 1 : 0;

        } else {
            k->auto_breakpoint = cJSON_IsTrue(v) ? 1 : 0;
        }

        return 0;
    }

    if (strcmp(f, "models") == 0 || strcmp(f, "pool") == 0) {
        if (tb_ks_list(v, f, f[0] == 'p',
                       mode == TB_KEYSPEC_STORED ? NULL : account, data,
                       &list, err, errlen)
            != 0)
        {
            return -1;
        }

        if (f[0] == 'p') {
            tb_conf_strlist_free(&k->pool);
            k->pool = list;

        } else {
            tb_conf_strlist_free(&k->models);
            k->models = list;
        }

        return 0;
    }

    if (strcmp(f, "rpm") == 0) {
        return tb_ks_int(v, f, 1, 1000000, &k->rpm, err, errlen);
    }

    if (strcmp(f, "session_max_turns") == 0) {
        return tb_ks_int(v, f, 1, 1000000, &k->session_max_turns, err,
                         errlen);
    }

    if (strcmp(f, "max_inflight") == 0) {
        return tb_ks_int(v, f, 1, 1000000, &k->max_inflight, err, errlen);
    }

    if (strcmp(f, "max_queued") == 0) {
        return tb_ks_int(v, f, 0, 1000000, &k->max_queued, err, errlen);
    }

    if (strcmp(f, "priority") == 0) {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "interactive") == 0) {
            k->priority = TB_PRIORITY_INTERACTIVE;
            return 0;
        }

        if (cJSON_IsString(v) && (strcmp(v->valuestring, "batch") == 0
                                  || strcmp(v->valuestring, "background")
                                     == 0))
        {
            k->priority = TB_PRIORITY_BATCH;
            return 0;
        }

        return tb_ks_error(err, errlen, "priority must be \"interactive\" "
                           "or \"batch\"");
    }

    if (strcmp(f, "max_wait_seconds") == 0) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)
            || v->valuedouble < 0 || v->valuedouble > 86400)
        {
            return tb_ks_error(err, errlen, "max_wait_seconds must be a "
                               "number from 0 to 86400");
        }

        k->max_wait_seconds = v->valuedouble;
        return 0;
    }

    if (strcmp(f, "spend_cap_usd") == 0) {
        return tb_ks_money(v, f, &k->spend_cap_usd, err, errlen);
    }

    if (strcmp(f, "session_cap_usd") == 0) {
        return tb_ks_money(v, f, &k->session_cap_usd, err, errlen);
    }

    if (strcmp(f, "created") == 0) {
        return tb_ks_int(v, f, 0, INT64_C(1) << 40, &ks->created, err,
                         errlen);
    }

    if (strcmp(f, "expires_in_seconds") == 0) {
        if (tb_ks_int(v, f, 1, INT64_C(10) * 366 * 86400, &n, err, errlen)
            != 0)
        {
            return -1;
        }

        ks->expires = now + n;
        return 0;
    }

    /* expires_at: seconds since the epoch, or an RFC 3339 UTC time */

    if (cJSON_IsString(v)) {
        if (tb_ks_time(v->valuestring, &n) != 0) {
            return tb_ks_error(err, errlen, "expires_at must be a time like "
                               "\"2027-01-31T12:00:00Z\" (UTC) or seconds "
                               "since the epoch");
        }

    } else if (tb_ks_int(v, f, 1, INT64_C(1) << 40, &n, err, errlen) != 0) {
        return tb_ks_error(err, errlen, "expires_at must be a time like "
                           "\"2027-01-31T12:00:00Z\" (UTC) or seconds since "
                           "the epoch");
    }

    if (mode != TB_KEYSPEC_STORED && n <= now) {
        return tb_ks_error(err, errlen, "expires_at is in the past");
    }

    ks->expires = n;

    return 0;
}


int
tb_keyspec_parse(tb_keyspec_t *ks, const char *json, size_t len, int mode,
    tb_keyspec_account_pt account, void *data, int64_t now, char *err,
    size_t errlen)
{
    unsigned              need;
    const char           *end;
    const cJSON          *v;
    tb_keyspec_t          work;
    const tb_ks_field_t  *f;
    cJSON                *root;

    if (len > TB_KEYSPEC_BODY_MAX) {
        return tb_ks_error(err, errlen, "the body is %zu bytes, at most %d "
                           "are accepted", len, TB_KEYSPEC_BODY_MAX);
    }

    root = cJSON_ParseWithLengthOpts(json, len, &end, 0);

    if (root == NULL) {
        return tb_ks_error(err, errlen, "the body is not valid JSON");
    }

    /* one value and nothing after it but white space */

    for ( /* void */ ; end < json + len; end++) {
        if (*end != ' ' && *end != '\t' && *end != '\r' && *end != '\n') {
            cJSON_Delete(root);
            return tb_ks_error(err, errlen, "the body is not valid JSON: "
                               "something follows its object");
        }
    }

    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return tb_ks_error(err, errlen, "the body must be a JSON object");
    }

    need = (mode == TB_KEYSPEC_PATCH) ? TB_KS_PATCH : TB_KS_POST;

    /* every field known and allowed, none twice */

    cJSON_ArrayForEach(v, root) {
        f = tb_ks_find(v->string);

        if (f == NULL) {
            tb_ks_error(err, errlen, "unknown field \"%.64s\"%s", v->string,
                        strcmp(v->string, "key") == 0
                        ? ": a key's secret is always drawn by the gateway"
                        : "");
            cJSON_Delete(root);
            return -1;
        }

        if (mode != TB_KEYSPEC_STORED && !(f->flags & need)) {
            tb_ks_error(err, errlen, "%s cannot be %s", f->name,
                        mode == TB_KEYSPEC_PATCH
                        ? "changed: revoke the key and mint another"
                        : "set by a request");
            cJSON_Delete(root);
            return -1;
        }

        if (cJSON_IsNull(v) && !(f->flags & TB_KS_NULL)) {
            tb_ks_error(err, errlen, "%s cannot be null", f->name);
            cJSON_Delete(root);
            return -1;
        }

        if (cJSON_GetObjectItemCaseSensitive(root, v->string) != v) {
            tb_ks_error(err, errlen, "%s appears twice", f->name);
            cJSON_Delete(root);
            return -1;
        }
    }

    if (mode == TB_KEYSPEC_PATCH) {
        if (tb_keyspec_copy(&work, ks) != 0) {
            cJSON_Delete(root);
            return tb_ks_error(err, errlen, "no memory");
        }

    } else {
        memset(&work, 0, sizeof(work));
        work.conf.rpm = TB_UNSET;
        work.conf.spend_cap_usd = TB_UNSET;
        work.conf.priority = TB_PRIORITY_INTERACTIVE;
        work.conf.max_wait_seconds = TB_UNSET;
        work.conf.session_cap_usd = TB_UNSET;
        work.conf.session_max_turns = TB_UNSET;
        work.conf.max_inflight = TB_AUTO;
        work.conf.max_queued = TB_AUTO;
        work.conf.auto_breakpoint = 2;
        work.created = now;
    }

    cJSON_ArrayForEach(v, root) {
        if (tb_ks_field(&work, v, mode, account, data, now, err, errlen)
            != 0)
        {
            cJSON_Delete(root);
            tb_keyspec_free(&work);
            return -1;
        }
    }

    cJSON_Delete(root);

    if (work.conf.name == NULL) {
        tb_keyspec_free(&work);
        return tb_ks_error(err, errlen, "name is required");
    }

    if (work.conf.models.n == 0) {
        /* none given: every model (an empty list given is refused) */
        tb_conf_strlist_free(&work.conf.models);
        work.conf.models.items = calloc(1, sizeof(char *));
        if (work.conf.models.items == NULL
            || (work.conf.models.items[0] = strdup("*")) == NULL)
        {
            tb_keyspec_free(&work);
            return tb_ks_error(err, errlen, "no memory");
        }

        work.conf.models.n = 1;
    }

    work.conf.name_hash = tb_hash64(0, work.conf.name,
                                    strlen(work.conf.name));

    if (mode == TB_KEYSPEC_PATCH) {
        tb_keyspec_free(ks);
    }

    *ks = work;

    return 0;
}


static cJSON *
tb_ks_json_list(const tb_strlist_t *l)
{
    size_t  i;
    cJSON  *a, *s;

    a = cJSON_CreateArray();
    if (a == NULL) {
        return NULL;
    }

    for (i = 0; i < l->n; i++) {
        s = cJSON_CreateString(l->items[i]);
        if (s == NULL) {
            cJSON_Delete(a);
            return NULL;
        }

        cJSON_AddItemToArray(a, s);
    }

    return a;
}


static int
tb_ks_json_opt(cJSON *o, const char *name, double v, int unset)
{
    return (v == unset ? cJSON_AddNullToObject(o, name)
                       : cJSON_AddNumberToObject(o, name, v)) != NULL;
}


char *
tb_keyspec_json(const tb_keyspec_t *ks)
{
    char                 *text;
    cJSON                *o, *l;
    const tb_key_conf_t  *k;

    k = &ks->conf;

    o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }

    text = NULL;

    if (cJSON_AddStringToObject(o, "name", k->name) == NULL
        || cJSON_AddBoolToObject(o, "admin", k->admin) == NULL
        || (l = tb_ks_json_list(&k->models)) == NULL)
    {
        goto done;
    }

    cJSON_AddItemToObject(o, "models", l);

    if ((l = tb_ks_json_list(&k->pool)) == NULL) {
        goto done;
    }

    cJSON_AddItemToObject(o, "pool", l);

    if (!tb_ks_json_opt(o, "rpm", (double) k->rpm, TB_UNSET)
        || cJSON_AddStringToObject(o, "priority",
                                   k->priority == TB_PRIORITY_BATCH
                                   ? "batch" : "interactive") == NULL
        || !tb_ks_json_opt(o, "max_wait_seconds", k->max_wait_seconds,
                           TB_UNSET)
        || !tb_ks_json_opt(o, "spend_cap_usd", k->spend_cap_usd, TB_UNSET)
        || !tb_ks_json_opt(o, "session_cap_usd", k->session_cap_usd,
                           TB_UNSET)
        || !tb_ks_json_opt(o, "session_max_turns",
                           (double) k->session_max_turns, TB_UNSET)
        || !tb_ks_json_opt(o, "max_inflight", (double) k->max_inflight,
                           TB_AUTO)
        || !tb_ks_json_opt(o, "max_queued", (double) k->max_queued, TB_AUTO)
        || (k->auto_breakpoint == 2
            ? cJSON_AddNullToObject(o, "auto_breakpoint")
            : cJSON_AddBoolToObject(o, "auto_breakpoint",
                                    k->auto_breakpoint)) == NULL
        || cJSON_AddNumberToObject(o, "created", (double) ks->created)
           == NULL
        || !tb_ks_json_opt(o, "expires_at", (double) ks->expires, 0))
    {
        goto done;
    }

    text = cJSON_PrintUnformatted(o);

done:

    cJSON_Delete(o);

    return text;
}


int
tb_keyspec_secret(char out[TB_KEYSPEC_SECRET_LEN + 1],
    unsigned char digest[32])
{
    static const char  b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                               "vwxyz0123456789-_";
    size_t             i, o;
    uint32_t           v;
    unsigned char      r[32];

    if (RAND_bytes(r, sizeof(r)) != 1) {
        return -1;
    }

    memcpy(out, "bir_", 4);
    o = 4;

    /* 32 bytes: ten groups of three, 40 characters, and two bytes, 3 */

    for (i = 0; i + 3 <= sizeof(r); i += 3) {
        v = ((uint32_t) r[i] << 16) | ((uint32_t) r[i + 1] << 8) | r[i + 2];

        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = b64[(v >> 6) & 63];
        out[o++] = b64[v & 63];
    }

    v = ((uint32_t) r[30] << 16) | ((uint32_t) r[31] << 8);

    out[o++] = b64[(v >> 18) & 63];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = b64[(v >> 6) & 63];
    out[o] = '\0';

    tb_sha256(out, o, digest);

    memset(r, 0, sizeof(r));

    return o == TB_KEYSPEC_SECRET_LEN ? 0 : -1;
}
