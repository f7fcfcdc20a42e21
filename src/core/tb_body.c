/*
 * The Messages API's request body and usage objects (see tb_body.h): one
 * pass over a request body that validates it and picks out what routing
 * needs, and the usage counters of a response.
 */

#include <string.h>
#include <stdio.h>

#include "tb_json_int.h"


/* scan_body state for the walk handlers */

enum {
    TB_BODY_NONE = 0,
    TB_BODY_MODEL,
    TB_BODY_STREAM,
    TB_BODY_MAX_TOKENS,
    TB_BODY_SYSTEM,
    TB_BODY_TOOLS,
    TB_BODY_MESSAGES,
    TB_BODY_METADATA
};

typedef struct {
    tb_body_t                *body;
    unsigned                  field;
    const char               *model_err;
    const char               *stream_err;
    const char               *max_tokens_err;
    unsigned                  seen;          /* 1 << field */
    const char               *dup;           /* a member given twice */
} tb_body_ctx_t;


static int tb_body_key(tb_json_walk_t *w, const unsigned char *k, size_t len,
    unsigned esc);
static void tb_body_value(tb_json_walk_t *w, const unsigned char *v,
    size_t len);


void
tb_usage_init(tb_usage_t *u)
{
    u->input_tokens = -1;
    u->output_tokens = -1;
    u->cache_creation_input_tokens = -1;
    u->cache_read_input_tokens = -1;
    u->cache_creation_1h_input_tokens = -1;
}


/*
 * A usage object, v at its '{' and vend just after it: 0 when it is whole
 * (its members, then its '}' exactly at vend - 1) with the counters it
 * carries written to u, -1 with u untouched otherwise - a body cut short
 * reports nothing.  One pass: the object is validated as it is read, its
 * members' values skipped unless they are counters.  Later duplicates
 * overwrite earlier ones; counts are never negative, and -1 would read as
 * "unknown".
 */

/*
 * usage.cache_creation, {"ephemeral_5m_input_tokens": n,
 * "ephemeral_1h_input_tokens": n}: the writes made for an hour, priced
 * apart.  Read defensively (the enclosing object checks the framing): a
 * member it cannot read ends the look, leaving *h1 as it was.
 */

static void
tb_usage_cache_creation(const unsigned char *v, const unsigned char *end,
    int64_t *h1)
{
    int64_t               n;
    const unsigned char  *k, *kend, *val, *vale;

    v = tb_json_ws(v + 1, end);

    while (v < end && *v == '"') {
        k = v + 1;
        kend = tb_json_skip(v, end);

        if (kend <= k || kend >= end || kend[-1] != '"') {
            return;
        }

        kend--;

        v = tb_json_ws(kend + 1, end);

        if (v >= end || *v != ':') {
            return;
        }

        val = tb_json_ws(v + 1, end);
        vale = tb_json_skip(val, end);

        if (vale <= val || vale > end) {
            return;
        }

        if (*val >= '0' && *val <= '9'
            && tb_json_key_eq(k, kend, "ephemeral_1h_input_tokens", 25)
            && tb_json_parse_int(val, vale, &n) == 0)
        {
            *h1 = n;
        }

        v = tb_json_ws(vale, end);

        if (v >= end || *v != ',') {
            return;
        }

        v = tb_json_ws(v + 1, end);
    }
}


int
tb_usage_object(tb_usage_t *u, const unsigned char *v,
    const unsigned char *vend)
{
    return tb_usage_members(u, v, vend) == vend ? 0 : -1;
}


/*
 * The members of a usage object from its '{' within [v, end): the four
 * counters merged into u, and past its '}' returned; NULL (u untouched)
 * when it is not one.
 */

const unsigned char *
tb_usage_members(tb_usage_t *u, const unsigned char *v,
    const unsigned char *vend)
{
    int                   plain;
    size_t                klen;
    int64_t               n, num, *field;
    unsigned              d;
    tb_usage_t            got;
    const unsigned char  *k, *kend, *end, *val, *vale;

    if (vend - v < 2 || *v != '{') {
        return NULL;
    }

    /*
     * Every value is skipped whole, so the '}' met where a member could
     * begin or continue is the object's own; a value that runs into the
     * end was cut short.
     */

    got = *u;
    end = vend;
    v = tb_json_ws(v + 1, end);

    if (v < end && *v == '}') {
        goto done;
    }

    while (v < end) {

        if (*v != '"') {
            return NULL;
        }

        k = v + 1;

        /* a key ends at the first quote unless a backslash precedes it */

        kend = memchr(k, '"', (size_t) (end - k));

        if (kend != NULL && kend[-1] == '\\') {
            kend = tb_json_skip(v, end) - 1;
        }

        if (kend == NULL || kend < k || kend >= end - 1 || *kend != '"') {
            return NULL;
        }

        v = tb_json_ws(kend + 1, end);

        if (v == end || *v != ':') {
            return NULL;
        }

        val = tb_json_ws(v + 1, end);

        /* the counters are plain integers: their digits end them, and
         * up to 18 of them are read on the way (no overflow) */

        for (vale = val, num = 0;
             vale < end && (d = (unsigned) (*vale - '0')) <= 9;
             vale++)
        {
            if (vale - val < 18) {
                num = num * 10 + d;
            }
        }

        plain = 1;

        if (vale == val || vale == end
            || *vale == '.' || *vale == 'e' || *vale == 'E')
        {
            vale = tb_json_skip(val, end);
            plain = 0;
        }

        if (vale == val || vale >= end) {
            return NULL;
        }

        /* read as scanned: up to 18 digits, no leading zero */
        plain = plain && vale - val <= 18 && (*val != '0' || vale - val == 1);

        /* the four counters, by length first: keys are never escaped */

        klen = (size_t) (kend - k);
        field = NULL;

        switch (klen) {

        case sizeof("input_tokens") - 1:
            if (memcmp(k, "input_tokens", klen) == 0) {
                field = &got.input_tokens;
            }
            break;

        case sizeof("output_tokens") - 1:
            if (memcmp(k, "output_tokens", klen) == 0) {
                field = &got.output_tokens;
            }
            break;

        case sizeof("cache_read_input_tokens") - 1:
            if (memcmp(k, "cache_read_input_tokens", klen) == 0) {
                field = &got.cache_read_input_tokens;
            }
            break;

        case sizeof("cache_creation_input_tokens") - 1:
            if (memcmp(k, "cache_creation_input_tokens", klen) == 0) {
                field = &got.cache_creation_input_tokens;
            }
            break;

        case sizeof("cache_creation") - 1:
            if (*val == '{' && memcmp(k, "cache_creation", klen) == 0) {
                tb_usage_cache_creation(val, vale,
                                        &got.cache_creation_1h_input_tokens);
            }
            break;

        default:
            break;
        }

        if (field == NULL && memchr(k, '\\', klen)) {
            /* an escaped key: compare it decoded */
            field = tb_json_key_eq(k, kend, "input_tokens", 12)
                    ? &got.input_tokens
                    : tb_json_key_eq(k, kend, "output_tokens", 13)
                    ? &got.output_tokens
                    : tb_json_key_eq(k, kend, "cache_read_input_tokens", 23)
                    ? &got.cache_read_input_tokens
                    : tb_json_key_eq(k, kend, "cache_creation_input_tokens",
                                     27)
                    ? &got.cache_creation_input_tokens : NULL;
        }

        if (field && *val >= '0' && *val <= '9') {
            if (plain) {
                *field = num;

            } else if (tb_json_parse_int(val, vale, &n) == 0) {
                *field = n;
            }
        }

        v = tb_json_ws(vale, end);

        if (v < end && *v == '}') {
            goto done;
        }

        if (v == end || *v != ',') {
            return NULL;
        }

        v = tb_json_ws(v + 1, end);
    }

    /* no closing brace */
    return NULL;

done:

    *u = got;

    return v + 1;
}


/* tb_usage_message(): the root's "usage" member, seen by the walk */

static int
tb_usage_key(tb_json_walk_t *w, const unsigned char *k, size_t len,
    unsigned esc)
{
    return esc ? tb_json_key_eq(k, k + len, "usage", 5)
               : len == 5 && memcmp(k, "usage", 5) == 0;
}


static void
tb_usage_value(tb_json_walk_t *w, const unsigned char *v, size_t len)
{
    tb_usage_t  *u = w->data;

    /* the last duplicate wins, as everywhere */
    (void) tb_usage_object(u, v, v + len);
}


int
tb_usage_message(tb_usage_t *u, const unsigned char *p, size_t len)
{
    tb_usage_t      got;
    tb_json_walk_t  w;

    got = *u;

    tb_json_walk_init(&w, p, len, tb_usage_key, tb_usage_value, &got);

    if (tb_json_walk(&w) != 0) {
        return -1;
    }

    *u = got;

    return 0;
}


int
tb_usage_merge(tb_usage_t *u, const unsigned char *p, size_t len,
    const char *path)
{
    const unsigned char  *v, *vend;

    /* found without validating the whole response */

    if (tb_json_find(p, len, path, &v, &vend) != 0) {
        return -1;
    }

    return tb_usage_object(u, v, vend);
}


/* tb_scan_body() */

static int
tb_body_key(tb_json_walk_t *w, const unsigned char *k, size_t len,
    unsigned esc)
{
    size_t          i;
    tb_body_ctx_t  *ctx;

    static const struct {
        const char  *name;
        size_t       len;
        unsigned     field;
    }  keys[] = {
        { "model", 5, TB_BODY_MODEL },
        { "stream", 6, TB_BODY_STREAM },
        { "max_tokens", 10, TB_BODY_MAX_TOKENS },
        { "system", 6, TB_BODY_SYSTEM },
        { "tools", 5, TB_BODY_TOOLS },
        { "messages", 8, TB_BODY_MESSAGES },
        { "metadata", 8, TB_BODY_METADATA }
    };

    ctx = w->data;
    ctx->field = TB_BODY_NONE;

    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {

        if (esc) {
            if (!tb_json_key_eq(k, k + len, keys[i].name, keys[i].len)) {
                continue;
            }

        } else if (len != keys[i].len || memcmp(k, keys[i].name, len) != 0) {
            continue;
        }

        /*
         * A member the gateway acts on given twice: parsers disagree on
         * which one counts (the last, the first, an error), so the scope
         * checked here and the one the upstream reads could differ
         */

        if (ctx->seen & (1u << keys[i].field)) {
            if (ctx->dup == NULL) {
                ctx->dup = keys[i].name;
            }

            return 0;
        }

        ctx->seen |= 1u << keys[i].field;
        ctx->field = keys[i].field;
        return 1;
    }

    return 0;
}


static void
tb_body_value(tb_json_walk_t *w, const unsigned char *v, size_t len)
{
    size_t          n, i;
    int64_t         num;
    tb_body_t      *body;
    tb_body_ctx_t  *ctx;

    ctx = w->data;
    body = ctx->body;

    switch (ctx->field) {

    case TB_BODY_MODEL:
        body->has_model = 0;
        body->model_len = 0;
        body->model[0] = '\0';

        if (*v != '"') {
            ctx->model_err = "model: expected a string";
            break;
        }

        n = tb_json_unescape(v + 1, v + len - 1, body->model,
                             sizeof(body->model));

        if (n > TB_MODEL_MAX) {
            body->model[0] = '\0';
            ctx->model_err = "model: longer than 256 bytes";
            break;
        }

        /*
         * model ids are plain ASCII names; a "\u0000" or a newline would
         * cut or split the id wherever it is printed or compared as a C
         * string
         */

        for (i = 0; i < n; i++) {
            if ((unsigned char) body->model[i] < 0x20
                || body->model[i] == 0x7f)
            {
                body->model[0] = '\0';
                ctx->model_err = "model: contains control characters";
                return;
            }
        }

        body->has_model = 1;
        body->model_len = n;
        body->model_off = (uint32_t) (v - w->start);
        body->model_vlen = (uint32_t) len;
        ctx->model_err = NULL;
        break;

    case TB_BODY_STREAM:
        if (*v == 't' || *v == 'f') {
            body->has_stream = 1;
            body->stream = (*v == 't');
            ctx->stream_err = NULL;

        } else {
            body->has_stream = 0;
            body->stream = 0;
            ctx->stream_err = "stream: expected true or false";
        }

        break;

    case TB_BODY_MAX_TOKENS:
        if (*v >= '0' && *v <= '9'
            && tb_json_parse_int(v, v + len, &num) == 0)
        {
            body->max_tokens = num;
            ctx->max_tokens_err = NULL;

        } else {
            body->max_tokens = -1;
            ctx->max_tokens_err =
                "max_tokens: expected a non-negative integer";
        }

        break;

    case TB_BODY_SYSTEM:
        body->system.off = (size_t) (v - w->start);
        body->system.len = len;
        break;

    case TB_BODY_TOOLS:
        body->tools.off = (size_t) (v - w->start);
        body->tools.len = len;
        break;

    case TB_BODY_MESSAGES:
        body->messages.off = (size_t) (v - w->start);
        body->messages.len = len;
        break;

    case TB_BODY_METADATA:
        body->metadata.off = (size_t) (v - w->start);
        body->metadata.len = len;
        break;

    default:
        break;
    }
}


int
tb_scan_body(const unsigned char *p, size_t len, tb_body_t *body,
    char *err, size_t errlen)
{
    const char           *msg;
    tb_body_ctx_t         ctx;
    tb_json_walk_t        w;
    const unsigned char  *q;

    memset(body, 0, sizeof(tb_body_t));
    body->max_tokens = -1;

    if (errlen > 0) {
        err[0] = '\0';
    }

    memset(&ctx, 0, sizeof(tb_body_ctx_t));
    ctx.body = body;

    if (p == NULL) {
        /* an empty body: NULL + 0 is not even defined in C */
        p = (const unsigned char *) "";
        len = 0;
    }

    tb_json_walk_init(&w, p, len, tb_body_key, tb_body_value, &ctx);
    w.mark = "cache_control";
    w.mark_len = sizeof("cache_control") - 1;

    if (tb_json_walk(&w) != 0) {
        if (errlen > 0) {
            snprintf(err, errlen,
                     "request body is not valid JSON: %s at byte %zu",
                     w.err, w.err_off);
        }

        goto failed;
    }

    q = tb_json_ws(w.start, w.end);

    if (*q != '{') {
        msg = "request body must be a JSON object";

    } else if (ctx.dup) {
        if (errlen > 0) {
            snprintf(err, errlen, "%s: given more than once in the request "
                     "body", ctx.dup);
        }

        goto failed;

    } else if (ctx.model_err) {
        msg = ctx.model_err;

    } else if (ctx.stream_err) {
        msg = ctx.stream_err;

    } else if (ctx.max_tokens_err) {
        msg = ctx.max_tokens_err;

    } else {
        body->breakpoint = w.marked;
        return 0;
    }

    if (errlen > 0) {
        snprintf(err, errlen, "%s", msg);
    }

failed:

    /* nothing half-read is left for a caller that ignores the error */

    memset(body, 0, sizeof(tb_body_t));
    body->max_tokens = -1;

    return -1;
}


int
tb_body_model_ok(const char *s, size_t len)
{
    size_t  i;

    if (len == 0 || len > TB_MODEL_MAX) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if ((unsigned char) s[i] < 0x20 || (unsigned char) s[i] > 0x7e
            || s[i] == '"' || s[i] == '\\')
        {
            return 0;
        }
    }

    return 1;
}


/* one change: del bytes at off replaced by text; grows: the span (index
 * into tb_body_edit's) whose value it is part of, or -1 */
typedef struct {
    size_t          off;
    size_t          del;
    const char     *text;
    size_t          len;
    int             grows;
} tb_body_change_t;


#define TB_BODY_BP_MEMBER   "\"cache_control\":{\"type\":\"ephemeral\"}"
#define TB_BODY_BP_WRAP     "[{\"type\":\"text\",\"text\":"
#define TB_BODY_BP_UNWRAP   ",\"cache_control\":{\"type\":\"ephemeral\"}}]"


static const unsigned char *
tb_body_back_ws(const unsigned char *start, const unsigned char *q)
{
    while (q > start && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
    {
        q--;
    }

    return q;
}


/*
 * A breakpoint at the end of a stable prefix's value (system, else tools):
 * a string system wrapped as one text block that carries it, or the last
 * block of an array given a cache_control member.  0 with the changes
 * added, -1 when the value has no place for one.
 */
static int
tb_body_bp_at(const unsigned char *p, tb_span_t *v, int index,
    tb_body_change_t *c, size_t *n)
{
    const unsigned char  *q, *first;

    if (v->len == 0) {
        return -1;
    }

    if (p[v->off] == '"') {
        c[*n].off = v->off;
        c[*n].del = 0;
        c[*n].text = TB_BODY_BP_WRAP;
        c[*n].len = sizeof(TB_BODY_BP_WRAP) - 1;
        c[*n].grows = index;
        (*n)++;

        c[*n].off = v->off + v->len;
        c[*n].del = 0;
        c[*n].text = TB_BODY_BP_UNWRAP;
        c[*n].len = sizeof(TB_BODY_BP_UNWRAP) - 1;
        c[*n].grows = index;
        (*n)++;

        return 0;
    }

    if (p[v->off] != '[') {
        return -1;
    }

    /* the last element's closing "}", before the array's "]" */

    first = p + v->off;
    q = tb_body_back_ws(first, p + v->off + v->len - 2);

    if (q <= first || *q != '}') {
        return -1;
    }

    c[*n].off = (size_t) (q - p);
    c[*n].del = 0;
    c[*n].grows = index;

    if (*tb_body_back_ws(first, q - 1) == '{') {
        /* an empty object */
        c[*n].text = TB_BODY_BP_MEMBER;
        c[*n].len = sizeof(TB_BODY_BP_MEMBER) - 1;

    } else {
        c[*n].text = "," TB_BODY_BP_MEMBER;
        c[*n].len = sizeof("," TB_BODY_BP_MEMBER) - 1;
    }

    (*n)++;

    return 0;
}


size_t
tb_body_edit(const unsigned char *p, size_t len, tb_body_t *body,
    int breakpoint, const char *model, size_t model_len, unsigned char *out)
{
    size_t             n, i, j, at, off, grow;
    unsigned char     *o;
    tb_span_t          spans[5], *sp;
    tb_body_change_t   c[3], t;

    spans[0] = body->system;
    spans[1] = body->tools;
    spans[2] = body->messages;
    spans[3] = body->metadata;
    spans[4].off = body->model_off;
    spans[4].len = body->model_vlen;

    n = 0;

    if (breakpoint && tb_body_bp_at(p, &spans[0], 0, c, &n) != 0) {
        (void) tb_body_bp_at(p, &spans[1], 1, c, &n);
    }

    if (model && spans[4].len) {
        c[n].off = spans[4].off;
        c[n].del = spans[4].len;
        c[n].text = NULL;
        c[n].len = model_len + 2;
        c[n].grows = 4;
        n++;
    }

    /* in the body's order */

    for (i = 1; i < n; i++) {
        for (j = i; j > 0 && c[j - 1].off > c[j].off; j--) {
            t = c[j];
            c[j] = c[j - 1];
            c[j - 1] = t;
        }
    }

    o = out;
    at = 0;

    for (i = 0; i < n; i++) {
        memcpy(o, p + at, c[i].off - at);
        o += c[i].off - at;

        if (c[i].text) {
            memcpy(o, c[i].text, c[i].len);
            o += c[i].len;

        } else {
            *o++ = '"';
            memcpy(o, model, model_len);
            o += model_len;
            *o++ = '"';
        }

        at = c[i].off + c[i].del;
    }

    memcpy(o, p + at, len - at);
    o += len - at;

    /* the spans, from the body's offsets to out's: a change before a
     * value moves it, one of the value's own makes it longer */

    for (j = 0; j < 5; j++) {
        sp = &spans[j];

        if (sp->len == 0) {
            continue;
        }

        off = sp->off;
        grow = 0;

        for (i = 0; i < n; i++) {
            if (c[i].grows == (int) j) {
                grow += c[i].len - c[i].del;

            } else if (c[i].off <= sp->off) {
                off += c[i].len - c[i].del;
            }
        }

        sp->off = off;
        sp->len += grow;
    }

    body->system = spans[0];
    body->tools = spans[1];
    body->messages = spans[2];
    body->metadata = spans[3];
    body->model_off = (uint32_t) spans[4].off;
    body->model_vlen = (uint32_t) spans[4].len;

    return (size_t) (o - out);
}
