/*
 * JSON and SSE scanning without building a tree (see tb_json.h).
 *
 * Everything here reads hostile input: request bodies come from clients,
 * streams from the network.  No function allocates, none keeps global
 * state, none reads outside [p, p + len), and nesting is tracked with an
 * explicit bit stack instead of recursion.
 *
 * Strings are scanned eight bytes at a time: request bodies of agent
 * clients are megabytes of mostly long text strings, so the byte loop
 * only runs around quotes, escapes, control and non-ASCII bytes.
 */

#include <string.h>
#include <stdio.h>

#include "tb_json.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif


#define TB_JSON_ONES          0x0101010101010101ULL
#define TB_JSON_HIGH          0x8080808080808080ULL


typedef struct tb_json_walk_s  tb_json_walk_t;

/*
 * Called for each key of the root object (raw bytes between the quotes,
 * esc set when they contain a backslash); a non-zero return asks for the
 * value of that key to be passed to the value handler once it has been
 * scanned and validated completely.
 */
typedef int (*tb_json_key_pt)(tb_json_walk_t *w, const unsigned char *k,
    size_t len, unsigned esc);
typedef void (*tb_json_value_pt)(tb_json_walk_t *w, const unsigned char *v,
    size_t len);

struct tb_json_walk_s {
    const unsigned char      *start;
    const unsigned char      *end;
    tb_json_key_pt            key;
    tb_json_value_pt          value;
    void                     *data;

    const char               *err;
    size_t                    err_off;
};


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
} tb_body_ctx_t;


/* SSE parser states and the field a line sets */

enum {
    TB_SSE_ST_START = 0,
    TB_SSE_ST_NAME,
    TB_SSE_ST_SPACE,
    TB_SSE_ST_VALUE
};

enum {
    TB_SSE_FIELD_OTHER = 0,
    TB_SSE_FIELD_EVENT,
    TB_SSE_FIELD_DATA
};

/* longest field name kept: only "event" and "data" matter */
#define TB_SSE_NAME_MAX       8


typedef struct {
    char                     *buf;
    size_t                    size;
    size_t                    len;
    unsigned                  found:1;
} tb_json_peek_t;


static int tb_json_walk(tb_json_walk_t *w);
static const unsigned char *tb_json_scan_string(tb_json_walk_t *w,
    const unsigned char *p, unsigned *esc);
static const unsigned char *tb_json_scan_utf8(const unsigned char *p,
    const unsigned char *end);
static const unsigned char *tb_json_scan_number(tb_json_walk_t *w,
    const unsigned char *p);
static int tb_json_fail(tb_json_walk_t *w, const unsigned char *p,
    const char *msg);
static const unsigned char *tb_json_ws(const unsigned char *p,
    const unsigned char *end);
static int tb_json_hex4(const unsigned char *p, const unsigned char *end,
    unsigned *v);
static size_t tb_json_unescape_one(const unsigned char **pp,
    const unsigned char *end, unsigned char out[4]);
static size_t tb_json_unescape(const unsigned char *p,
    const unsigned char *end, char *buf, size_t size);
static int tb_json_key_eq(const unsigned char *k, const unsigned char *end,
    const char *name, size_t nlen);
static const unsigned char *tb_json_skip(const unsigned char *p,
    const unsigned char *end);
static int tb_json_lookup(const unsigned char *p, size_t len,
    const char *path, const unsigned char **v, const unsigned char **vend);
static int tb_json_find(const unsigned char *p, size_t len,
    const char *path, const unsigned char **v, const unsigned char **vend);
static int tb_json_parse_int(const unsigned char *p,
    const unsigned char *end, int64_t *value);

static int tb_body_key(tb_json_walk_t *w, const unsigned char *k, size_t len,
    unsigned esc);
static void tb_body_value(tb_json_walk_t *w, const unsigned char *v,
    size_t len);

static int tb_json_peek_key(tb_json_walk_t *w, const unsigned char *k,
    size_t len, unsigned esc);
static void tb_json_peek_value(tb_json_walk_t *w, const unsigned char *v,
    size_t len);

static void tb_sse_field(tb_sse_t *s);
static void tb_sse_value_begin(tb_sse_t *s);
static void tb_sse_value(tb_sse_t *s, const unsigned char *p, size_t n);
static unsigned tb_sse_line_end(tb_sse_t *s);
static void tb_sse_append(tb_sse_t *s, const unsigned char *p, size_t n);
static unsigned tb_sse_dispatch(tb_sse_t *s);
static int tb_sse_event_is(tb_sse_t *s, const char *name);
static void tb_sse_copy_str(tb_sse_t *s, const char *path, char *buf,
    size_t size);


/* the whitespace of RFC 8259 */

static const unsigned char *
tb_json_ws(const unsigned char *p, const unsigned char *end)
{
    while (p < end
           && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
    {
        p++;
    }

    return p;
}


static int
tb_json_fail(tb_json_walk_t *w, const unsigned char *p, const char *msg)
{
    w->err = msg;
    w->err_off = (size_t) (p - w->start);

    return -1;
}


/*
 * The structural parser: a loop over "expect a value", "expect a key" and
 * "a value just ended" with the open containers kept in a bit stack
 * (1: object, 0: array), so hostile nesting costs 64 bytes of stack and
 * is refused at TB_JSON_MAX_DEPTH.
 */

static int
tb_json_walk(tb_json_walk_t *w)
{
    unsigned              depth, esc, take;
    uint64_t              stack[(TB_JSON_MAX_DEPTH + 63) / 64];
    const unsigned char  *p, *end, *k, *cap;

    p = w->start;
    end = w->end;
    depth = 0;
    take = 0;
    cap = NULL;

value:

    p = tb_json_ws(p, end);

    if (p == end) {
        return tb_json_fail(w, p, "unexpected end of input");
    }

    if (take == 1) {
        /* the value of a root key the handler asked for */
        cap = p;
        take = 2;
    }

    switch (*p) {

    case '{':
        if (depth == TB_JSON_MAX_DEPTH) {
            return tb_json_fail(w, p, "nesting is too deep");
        }

        stack[depth / 64] |= (uint64_t) 1 << (depth % 64);
        depth++;

        p = tb_json_ws(p + 1, end);

        if (p < end && *p == '}') {
            p++;
            depth--;
            goto close;
        }

        goto key;

    case '[':
        if (depth == TB_JSON_MAX_DEPTH) {
            return tb_json_fail(w, p, "nesting is too deep");
        }

        stack[depth / 64] &= ~((uint64_t) 1 << (depth % 64));
        depth++;

        p = tb_json_ws(p + 1, end);

        if (p < end && *p == ']') {
            p++;
            depth--;
            goto close;
        }

        goto value;

    case '"':
        p = tb_json_scan_string(w, p, &esc);
        if (p == NULL) {
            return -1;
        }

        goto close;

    case 't':
        if (end - p < 4 || memcmp(p, "true", 4) != 0) {
            return tb_json_fail(w, p, "invalid literal");
        }

        p += 4;
        goto close;

    case 'f':
        if (end - p < 5 || memcmp(p, "false", 5) != 0) {
            return tb_json_fail(w, p, "invalid literal");
        }

        p += 5;
        goto close;

    case 'n':
        if (end - p < 4 || memcmp(p, "null", 4) != 0) {
            return tb_json_fail(w, p, "invalid literal");
        }

        p += 4;
        goto close;

    case '-':
    case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9':
        p = tb_json_scan_number(w, p);
        if (p == NULL) {
            return -1;
        }

        goto close;

    default:
        return tb_json_fail(w, p, "expected a value");
    }

close:

    if (take == 2 && depth == 1) {
        take = 0;
        w->value(w, cap, (size_t) (p - cap));
    }

    p = tb_json_ws(p, end);

    if (depth == 0) {
        if (p != end) {
            return tb_json_fail(w, p, "unexpected data after the document");
        }

        return 0;
    }

    if (p == end) {
        return tb_json_fail(w, p, "unexpected end of input");
    }

    if (stack[(depth - 1) / 64] & ((uint64_t) 1 << ((depth - 1) % 64))) {

        if (*p == ',') {
            p = tb_json_ws(p + 1, end);

            if (p < end && *p == '}') {
                return tb_json_fail(w, p, "trailing comma");
            }

            goto key;
        }

        if (*p == '}') {
            p++;
            depth--;
            goto close;
        }

        return tb_json_fail(w, p, "expected ',' or '}'");
    }

    if (*p == ',') {
        p = tb_json_ws(p + 1, end);

        if (p < end && *p == ']') {
            return tb_json_fail(w, p, "trailing comma");
        }

        goto value;
    }

    if (*p == ']') {
        p++;
        depth--;
        goto close;
    }

    return tb_json_fail(w, p, "expected ',' or ']'");

key:

    /* p is past whitespace here */

    if (p == end) {
        return tb_json_fail(w, p, "unexpected end of input");
    }

    if (*p != '"') {
        return tb_json_fail(w, p, "expected a string key");
    }

    k = p;

    p = tb_json_scan_string(w, p, &esc);
    if (p == NULL) {
        return -1;
    }

    if (depth == 1 && w->key != NULL) {
        take = w->key(w, k + 1, (size_t) (p - k - 2), esc) ? 1 : 0;
    }

    p = tb_json_ws(p, end);

    if (p == end) {
        return tb_json_fail(w, p, "unexpected end of input");
    }

    if (*p != ':') {
        return tb_json_fail(w, p, "expected ':'");
    }

    p++;

    goto value;
}


/*
 * A word with a bit 7 set in each byte that is '"', '\\', below 0x20 or
 * at or above 0x80.  Borrows of the subtractions only run upwards from a
 * byte that matched, so the lowest set bit is always exact.
 */

static uint64_t
tb_json_special(uint64_t x)
{
    uint64_t  q, b;

    q = x ^ (TB_JSON_ONES * '"');
    b = x ^ (TB_JSON_ONES * '\\');

    return (((q - TB_JSON_ONES) & ~q)
            | ((b - TB_JSON_ONES) & ~b)
            | ((x - TB_JSON_ONES * 0x20) & ~x)
            | x)
           & TB_JSON_HIGH;
}


/* p is at the opening quote; returns the byte after the closing one */

static const unsigned char *
tb_json_scan_string(tb_json_walk_t *w, const unsigned char *p, unsigned *esc)
{
    unsigned              v;
    uint64_t              x, t;
    unsigned char         c;
    const unsigned char  *s, *end, *q;

    s = p++;
    end = w->end;
    *esc = 0;

    for ( ;; ) {

#if defined(__SSE2__)

        /* 16 bytes at a time: a quote, a backslash, a control or a
         * non-ASCII byte (negative as a signed char) stops the run */

        while (end - p >= 16) {
            __m128i  x16;
            int      mask;

            x16 = _mm_loadu_si128((const __m128i *) (const void *) p);
            mask = _mm_movemask_epi8(
                       _mm_or_si128(
                           _mm_or_si128(_mm_cmpeq_epi8(x16, _mm_set1_epi8('"')),
                                        _mm_cmpeq_epi8(x16,
                                                       _mm_set1_epi8('\\'))),
                           _mm_cmplt_epi8(x16, _mm_set1_epi8(0x20))));

            if (mask) {
                p += __builtin_ctz((unsigned) mask);
                goto bytes;
            }

            p += 16;
        }

#endif

        while (end - p >= 16) {
            memcpy(&x, p, 8);

            t = tb_json_special(x);
            if (t) {
                goto found;
            }

            memcpy(&x, p + 8, 8);

            t = tb_json_special(x);
            if (t) {
                p += 8;
                goto found;
            }

            p += 16;
        }

        while (end - p >= 8) {
            memcpy(&x, p, 8);

            t = tb_json_special(x);
            if (t) {
                goto found;
            }

            p += 8;
        }

        goto bytes;

    found:

#if defined(__GNUC__) && defined(__BYTE_ORDER__)                            \
    && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        p += __builtin_ctzll(t) / 8;
#endif

    bytes:

        if (p == end) {
            tb_json_fail(w, s, "unterminated string");
            return NULL;
        }

        c = *p;

        if (c == '"') {
            return p + 1;
        }

        if (c == '\\') {
            *esc = 1;

            if (end - p < 2) {
                tb_json_fail(w, s, "unterminated string");
                return NULL;
            }

            switch (p[1]) {

            case '"': case '\\': case '/':
            case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;

            case 'u':
                /* lone surrogates pass here: get_str maps them to U+FFFD */
                if (tb_json_hex4(p + 2, end, &v) != 0) {
                    tb_json_fail(w, p, "invalid \\u escape");
                    return NULL;
                }

                p += 6;
                continue;

            default:
                tb_json_fail(w, p, "invalid escape sequence");
                return NULL;
            }
        }

        if (c < 0x20) {
            tb_json_fail(w, p, "control character in string");
            return NULL;
        }

        if (c < 0x80) {
            p++;
            continue;
        }

        q = tb_json_scan_utf8(p, end);
        if (q == NULL) {
            tb_json_fail(w, p, "invalid UTF-8");
            return NULL;
        }

        p = q;
    }
}


/*
 * One UTF-8 sequence at p (lead byte >= 0x80): no overlong forms, no
 * surrogates, nothing above U+10FFFF (RFC 3629).
 */

static const unsigned char *
tb_json_scan_utf8(const unsigned char *p, const unsigned char *end)
{
    size_t         n;
    unsigned char  c, lo, hi;

    c = p[0];
    lo = 0x80;
    hi = 0xbf;

    if (c < 0xc2) {
        return NULL;

    } else if (c < 0xe0) {
        n = 1;

    } else if (c < 0xf0) {
        n = 2;

        if (c == 0xe0) {
            lo = 0xa0;

        } else if (c == 0xed) {
            hi = 0x9f;
        }

    } else if (c < 0xf5) {
        n = 3;

        if (c == 0xf0) {
            lo = 0x90;

        } else if (c == 0xf4) {
            hi = 0x8f;
        }

    } else {
        return NULL;
    }

    if ((size_t) (end - p) <= n) {
        return NULL;
    }

    if (p[1] < lo || p[1] > hi) {
        return NULL;
    }

    if (n >= 2 && (p[2] & 0xc0) != 0x80) {
        return NULL;
    }

    if (n == 3 && (p[3] & 0xc0) != 0x80) {
        return NULL;
    }

    return p + n + 1;
}


static int
tb_json_hex4(const unsigned char *p, const unsigned char *end, unsigned *v)
{
    unsigned       i, d;
    unsigned char  c;

    if (end - p < 4) {
        return -1;
    }

    *v = 0;

    for (i = 0; i < 4; i++) {
        c = p[i];

        if (c >= '0' && c <= '9') {
            d = c - '0';

        } else if (c >= 'a' && c <= 'f') {
            d = c - 'a' + 10;

        } else if (c >= 'A' && c <= 'F') {
            d = c - 'A' + 10;

        } else {
            return -1;
        }

        *v = (*v << 4) | d;
    }

    return 0;
}


/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */

static const unsigned char *
tb_json_scan_number(tb_json_walk_t *w, const unsigned char *p)
{
    const unsigned char  *s, *end;

    s = p;
    end = w->end;

    if (*p == '-') {
        p++;
    }

    if (p == end || *p < '0' || *p > '9') {
        tb_json_fail(w, s, "invalid number");
        return NULL;
    }

    if (*p == '0') {
        p++;

        if (p < end && *p >= '0' && *p <= '9') {
            tb_json_fail(w, s, "leading zeros are not allowed");
            return NULL;
        }

    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            p++;
        }
    }

    if (p < end && *p == '.') {
        p++;

        if (p == end || *p < '0' || *p > '9') {
            tb_json_fail(w, s, "invalid number");
            return NULL;
        }

        while (p < end && *p >= '0' && *p <= '9') {
            p++;
        }
    }

    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;

        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }

        if (p == end || *p < '0' || *p > '9') {
            tb_json_fail(w, s, "invalid number");
            return NULL;
        }

        while (p < end && *p >= '0' && *p <= '9') {
            p++;
        }
    }

    return p;
}


/*
 * Decodes one character of a string body at *pp (validated text): a raw
 * byte is passed through, an escape becomes UTF-8.  A surrogate that is
 * not part of a proper pair becomes U+FFFD.
 */

static size_t
tb_json_unescape_one(const unsigned char **pp, const unsigned char *end,
    unsigned char out[4])
{
    unsigned              cp, lo;
    const unsigned char  *p;

    p = *pp;

    if (*p != '\\' || end - p < 2) {
        out[0] = *p;
        *pp = p + 1;
        return 1;
    }

    switch (p[1]) {
    case 'b': out[0] = '\b'; break;
    case 'f': out[0] = '\f'; break;
    case 'n': out[0] = '\n'; break;
    case 'r': out[0] = '\r'; break;
    case 't': out[0] = '\t'; break;
    case 'u': out[0] = 0; break;
    default:  out[0] = p[1]; break;
    }

    if (p[1] != 'u') {
        *pp = p + 2;
        return 1;
    }

    if (tb_json_hex4(p + 2, end, &cp) != 0) {
        /* not reached on validated text; keep going byte-wise */
        out[0] = '\\';
        *pp = p + 1;
        return 1;
    }

    p += 6;

    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (end - p >= 6 && p[0] == '\\' && p[1] == 'u'
            && tb_json_hex4(p + 2, end, &lo) == 0
            && lo >= 0xdc00 && lo <= 0xdfff)
        {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            p += 6;

        } else {
            cp = 0xfffd;
        }

    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
        cp = 0xfffd;
    }

    *pp = p;

    if (cp < 0x80) {
        out[0] = (unsigned char) cp;
        return 1;
    }

    if (cp < 0x800) {
        out[0] = (unsigned char) (0xc0 | (cp >> 6));
        out[1] = (unsigned char) (0x80 | (cp & 0x3f));
        return 2;
    }

    if (cp < 0x10000) {
        out[0] = (unsigned char) (0xe0 | (cp >> 12));
        out[1] = (unsigned char) (0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char) (0x80 | (cp & 0x3f));
        return 3;
    }

    out[0] = (unsigned char) (0xf0 | (cp >> 18));
    out[1] = (unsigned char) (0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char) (0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char) (0x80 | (cp & 0x3f));
    return 4;
}


/*
 * Unescapes the string body p..end into buf (NUL-terminated when size > 0,
 * truncated to size - 1); returns the full unescaped length.
 */

static size_t
tb_json_unescape(const unsigned char *p, const unsigned char *end, char *buf,
    size_t size)
{
    size_t                n, len, i;
    unsigned char         out[4];
    const unsigned char  *q;

    len = 0;

    while (p < end) {

        if (*p != '\\') {
            /* copy a run of plain bytes at once */
            q = memchr(p, '\\', (size_t) (end - p));
            if (q == NULL) {
                q = end;
            }

            n = (size_t) (q - p);

            if (len < size) {
                i = size - 1 - len < n ? size - 1 - len : n;
                memcpy(buf + len, p, i);
            }

            len += n;
            p = q;
            continue;
        }

        n = tb_json_unescape_one(&p, end, out);

        for (i = 0; i < n; i++) {
            if (len + i + 1 < size) {
                buf[len + i] = (char) out[i];
            }
        }

        len += n;
    }

    if (size > 0) {
        buf[len < size - 1 ? len : size - 1] = '\0';
    }

    return len;
}


/* compares a raw key k..end (escapes allowed) with a plain name */

static int
tb_json_key_eq(const unsigned char *k, const unsigned char *end,
    const char *name, size_t nlen)
{
    size_t         i, n;
    unsigned char  out[4];

    /* an escape only makes the raw key longer than what it decodes to */

    if ((size_t) (end - k) < nlen) {
        return 0;
    }

    if ((size_t) (end - k) == nlen) {
        return memcmp(k, name, nlen) == 0;
    }

    i = 0;

    while (k < end) {

        if (*k != '\\') {
            if (i >= nlen || (unsigned char) name[i] != *k) {
                return 0;
            }

            i++;
            k++;
            continue;
        }

        n = tb_json_unescape_one(&k, end, out);

        if (nlen - i < n || memcmp(name + i, out, n) != 0) {
            return 0;
        }

        i += n;
    }

    return i == nlen;
}


/*
 * Skips one value of an already validated document; the bounds are still
 * checked so that a caller mistake cannot turn into an overread.
 */

static const unsigned char *
tb_json_skip(const unsigned char *p, const unsigned char *end)
{
    size_t         depth;
    uint64_t       x, q, b, t;
    unsigned char  c;

    depth = 0;
    t = 0;

    while (p < end) {
        c = *p;

        if (c == '"') {
            p++;

            while (p < end && *p != '"') {
                if (*p == '\\') {
                    p += (end - p >= 2) ? 2 : 1;
                    continue;
                }

                /* to the next quote or backslash, 8 bytes at a time */

                while (end - p >= 8) {
                    memcpy(&x, p, 8);
                    q = x ^ (TB_JSON_ONES * '"');
                    b = x ^ (TB_JSON_ONES * '\\');
                    t = (((q - TB_JSON_ONES) & ~q) | ((b - TB_JSON_ONES) & ~b))
                        & TB_JSON_HIGH;

                    if (t) {
                        break;
                    }

                    p += 8;
                }

                if (end - p < 8 || t == 0) {
                    p++;
                    continue;
                }

#if defined(__GNUC__) && defined(__BYTE_ORDER__)                            \
    && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                p += __builtin_ctzll(t) / 8;
#else
                p++;
#endif
            }

            if (p < end) {
                p++;
            }

            if (depth == 0) {
                return p;
            }

            continue;
        }

        if (c == '{' || c == '[') {
            depth++;
            p++;
            continue;
        }

        if (c == '}' || c == ']') {
            if (depth == 0) {
                return p;
            }

            p++;

            if (--depth == 0) {
                return p;
            }

            continue;
        }

        if (depth == 0
            && (c == ',' || c == ':' || c == ' ' || c == '\t' || c == '\r'
                || c == '\n'))
        {
            return p;
        }

        p++;
    }

    return p;
}


/*
 * Finds the value at a dotted key path; *v and *vend delimit its text.
 * The whole document is validated first, so the walk below can rely on
 * the grammar.  With duplicate keys the last one wins at every level.
 */

static int
tb_json_lookup(const unsigned char *p, size_t len, const char *path,
    const unsigned char **v, const unsigned char **vend)
{
    if (p == NULL || path == NULL || tb_json_validate(p, len) != 0) {
        return -1;
    }

    return tb_json_find(p, len, path, v, vend);
}


/*
 * The lookup without validating the document first: every read is bounded
 * by the end, so a broken document finds nothing or a wrong value, never
 * reads past it.  For what the gateway only reads (usage in responses).
 */

static int
tb_json_find(const unsigned char *p, size_t len, const char *path,
    const unsigned char **v, const unsigned char **vend)
{
    size_t                nlen;
    const char           *name, *dot;
    const unsigned char  *end, *k, *kend, *found;

    if (p == NULL || path == NULL) {
        return -1;
    }

    end = p + len;
    p = tb_json_ws(p, end);
    name = path;

    for ( ;; ) {

        if (p == end || *p != '{') {
            return -1;
        }

        dot = strchr(name, '.');
        nlen = dot ? (size_t) (dot - name) : strlen(name);
        found = NULL;

        p = tb_json_ws(p + 1, end);

        while (p < end && *p == '"') {
            k = p + 1;
            kend = tb_json_skip(p, end);
            p = tb_json_ws(kend, end);

            if (p == end || *p != ':') {
                return -1;
            }

            p = tb_json_ws(p + 1, end);

            if (tb_json_key_eq(k, kend - 1, name, nlen)) {
                found = p;
            }

            p = tb_json_ws(tb_json_skip(p, end), end);

            if (p < end && *p == ',') {
                p = tb_json_ws(p + 1, end);
            }
        }

        if (found == NULL) {
            return -1;
        }

        p = found;

        if (dot == NULL) {
            break;
        }

        name = dot + 1;
    }

    *v = p;
    *vend = tb_json_skip(p, end);

    return 0;
}


/* a JSON integer (no fraction, no exponent) in the int64 range */

static int
tb_json_parse_int(const unsigned char *p, const unsigned char *end,
    int64_t *value)
{
    int       neg;
    unsigned  d;
    uint64_t  n, limit;

    neg = 0;

    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }

    if (p == end) {
        return -1;
    }

    limit = neg ? (uint64_t) INT64_MAX + 1 : (uint64_t) INT64_MAX;
    n = 0;

    while (p < end) {
        if (*p < '0' || *p > '9') {
            return -1;
        }

        d = *p++ - '0';

        if (n > (limit - d) / 10) {
            return -1;
        }

        n = n * 10 + d;
    }

    if (neg) {
        /* -(2^63) is representable; avoid negating it as int64 */
        *value = n == (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) n;

    } else {
        *value = (int64_t) n;
    }

    return 0;
}


int
tb_json_validate(const unsigned char *p, size_t len)
{
    tb_json_walk_t  w;

    if (p == NULL) {
        return -1;
    }

    memset(&w, 0, sizeof(tb_json_walk_t));
    w.start = p;
    w.end = p + len;

    return tb_json_walk(&w);
}


int
tb_json_get_int(const unsigned char *p, size_t len, const char *path,
    int64_t *value)
{
    const unsigned char  *v, *vend;

    if (tb_json_lookup(p, len, path, &v, &vend) != 0) {
        return -1;
    }

    if (v == vend || (*v != '-' && (*v < '0' || *v > '9'))) {
        return -1;
    }

    return tb_json_parse_int(v, vend, value);
}


int
tb_json_get_str(const unsigned char *p, size_t len, const char *path,
    char *buf, size_t size, size_t *outlen)
{
    size_t                n;
    const unsigned char  *v, *vend;

    if (tb_json_lookup(p, len, path, &v, &vend) != 0) {
        return -1;
    }

    if (vend - v < 2 || *v != '"') {
        return -1;
    }

    n = tb_json_unescape(v + 1, vend - 1, buf, size);

    if (outlen) {
        *outlen = n;
    }

    return 0;
}


int
tb_json_get_bool(const unsigned char *p, size_t len, const char *path,
    int *value)
{
    const unsigned char  *v, *vend;

    if (tb_json_lookup(p, len, path, &v, &vend) != 0) {
        return -1;
    }

    if (v == vend || (*v != 't' && *v != 'f')) {
        return -1;
    }

    *value = (*v == 't');

    return 0;
}


/*
 * Escapes never get cut in half on truncation: the output stops before
 * the first escape that does not fit, so it is always valid JSON text.
 */

size_t
tb_json_escape(char *buf, size_t size, const char *s, size_t n)
{
    size_t          i, len, k;
    char            tmp[6];
    unsigned char   c;
    unsigned        full;
    static const char  hex[] = "0123456789abcdef";

    len = 0;
    full = 0;

    for (i = 0; i < n; i++) {
        c = (unsigned char) s[i];

        if (c == '"' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char) c;
            k = 2;

        } else if (c == '\n') {
            tmp[0] = '\\';
            tmp[1] = 'n';
            k = 2;

        } else if (c == '\r') {
            tmp[0] = '\\';
            tmp[1] = 'r';
            k = 2;

        } else if (c == '\t') {
            tmp[0] = '\\';
            tmp[1] = 't';
            k = 2;

        } else if (c < 0x20) {
            tmp[0] = '\\';
            tmp[1] = 'u';
            tmp[2] = '0';
            tmp[3] = '0';
            tmp[4] = hex[c >> 4];
            tmp[5] = hex[c & 0xf];
            k = 6;

        } else {
            tmp[0] = (char) c;
            k = 1;
        }

        if (!full && size > 0 && len + k < size) {
            memcpy(buf + len, tmp, k);

        } else if (!full) {
            full = 1;

            if (size > 0) {
                buf[len] = '\0';
            }
        }

        len += k;
    }

    if (!full && size > 0) {
        buf[len] = '\0';
    }

    return len;
}


void
tb_usage_init(tb_usage_t *u)
{
    u->input_tokens = -1;
    u->output_tokens = -1;
    u->cache_creation_input_tokens = -1;
    u->cache_read_input_tokens = -1;
}


/* the members of a usage object, v at its '{' and vend after its '}' */

static void
tb_usage_members(tb_usage_t *u, const unsigned char *v,
    const unsigned char *vend)
{
    size_t                i;
    int64_t               n;
    const unsigned char  *k, *kend, *end, *val, *vale;

    static const struct {
        const char  *name;
        size_t       len;
        size_t       off;
    }  fields[] = {
        { "input_tokens", 12, offsetof(tb_usage_t, input_tokens) },
        { "output_tokens", 13, offsetof(tb_usage_t, output_tokens) },
        { "cache_creation_input_tokens", 27,
          offsetof(tb_usage_t, cache_creation_input_tokens) },
        { "cache_read_input_tokens", 23,
          offsetof(tb_usage_t, cache_read_input_tokens) }
    };

    /*
     * one pass over the members; later duplicates overwrite earlier ones.
     * Counts are never negative, and -1 would read as "unknown".
     */

    end = vend;
    v = tb_json_ws(v + 1, end);

    while (v < end && *v == '"') {
        k = v + 1;
        kend = tb_json_skip(v, end);
        v = tb_json_ws(kend, end);

        if (v == end || *v != ':') {
            break;
        }

        val = tb_json_ws(v + 1, end);
        vale = tb_json_skip(val, end);

        for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
            if (val < vale && *val >= '0' && *val <= '9'
                && tb_json_key_eq(k, kend - 1, fields[i].name, fields[i].len)
                && tb_json_parse_int(val, vale, &n) == 0)
            {
                memcpy((char *) u + fields[i].off, &n, sizeof(int64_t));
            }
        }

        v = tb_json_ws(vale, end);

        if (v < end && *v == ',') {
            v = tb_json_ws(v + 1, end);
        }
    }
}


int
tb_usage_merge(tb_usage_t *u, const unsigned char *p, size_t len,
    const char *path)
{
    const unsigned char  *v, *vend;

    /*
     * Found without validating the whole response, but the usage object
     * itself must be whole: a body cut short reports nothing.
     */

    if (tb_json_find(p, len, path, &v, &vend) != 0 || v == vend
        || *v != '{' || tb_json_validate(v, (size_t) (vend - v)) != 0)
    {
        return -1;
    }

    tb_usage_members(u, v, vend);

    return 0;
}


/*
 * A stream's message_start and message_delta carry no free text: the
 * first "usage" key in them is the usage object, wherever it sits.
 */

static int
tb_usage_merge_event(tb_usage_t *u, const unsigned char *p, size_t len,
    const char *path)
{
    const unsigned char  *q, *end, *v, *vend;

    end = p + len;
    q = p;

    while (end - q >= 8) {
        q = memchr(q, '"', (size_t) (end - q - 7));

        if (q == NULL) {
            break;
        }

        if (memcmp(q, "\"usage\"", 7) == 0) {
            v = tb_json_ws(q + 7, end);

            if (v < end && *v == ':') {
                v = tb_json_ws(v + 1, end);
                vend = tb_json_skip(v, end);

                if (v < vend && *v == '{'
                    && tb_json_validate(v, (size_t) (vend - v)) == 0)
                {
                    tb_usage_members(u, v, vend);
                    return 0;
                }
            }
        }

        q++;
    }

    return tb_usage_merge(u, p, len, path);
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

    memset(&w, 0, sizeof(tb_json_walk_t));
    w.start = p;
    w.end = p + len;
    w.key = tb_body_key;
    w.value = tb_body_value;
    w.data = &ctx;

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

    } else if (ctx.model_err) {
        msg = ctx.model_err;

    } else if (ctx.stream_err) {
        msg = ctx.stream_err;

    } else if (ctx.max_tokens_err) {
        msg = ctx.max_tokens_err;

    } else {
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


/* the root "type" of a possibly truncated event (see tb_sse_dispatch) */

static int
tb_json_peek_key(tb_json_walk_t *w, const unsigned char *k, size_t len,
    unsigned esc)
{
    return tb_json_key_eq(k, k + len, "type", 4);
}


static void
tb_json_peek_value(tb_json_walk_t *w, const unsigned char *v, size_t len)
{
    tb_json_peek_t  *pk;

    pk = w->data;

    if (*v == '"') {
        pk->len = tb_json_unescape(v + 1, v + len - 1, pk->buf, pk->size);
        pk->found = 1;

    } else {
        pk->found = 0;
    }
}


/* tb_sse_* */

void
tb_sse_init(tb_sse_t *s, unsigned char *line, unsigned char *data)
{
    memset(s, 0, sizeof(tb_sse_t));

    tb_usage_init(&s->usage);
    s->state = TB_SSE_ST_START;
    s->line = line;
    s->data = data;
}


/* the first '\n' or '\r' from p, or end: where a line ends */

static const unsigned char *
tb_sse_eol(const unsigned char *p, const unsigned char *end)
{
#if defined(__SSE2__)

    while (end - p >= 16) {
        __m128i  x16;
        int      mask;

        x16 = _mm_loadu_si128((const __m128i *) (const void *) p);
        mask = _mm_movemask_epi8(
                   _mm_or_si128(_mm_cmpeq_epi8(x16, _mm_set1_epi8('\n')),
                                _mm_cmpeq_epi8(x16, _mm_set1_epi8('\r'))));

        if (mask) {
            return p + __builtin_ctz((unsigned) mask);
        }

        p += 16;
    }

    while (p < end && *p != '\n' && *p != '\r') {
        p++;
    }

    return p;

#else

    const unsigned char  *q, *r;

    q = memchr(p, '\n', (size_t) (end - p));
    if (q == NULL) {
        q = end;
    }

    r = memchr(p, '\r', (size_t) (q - p));

    return r ? r : q;

#endif
}


unsigned
tb_sse_feed(tb_sse_t *s, const unsigned char *p, size_t n)
{
    unsigned              rc;
    unsigned char         c;
    const unsigned char  *end, *q;

    rc = 0;

    if (n == 0) {
        return rc;
    }

    end = p + n;
    s->bytes += n;

    while (p < end) {
        c = *p;

        if (s->saw_cr) {
            /* the "\n" of a "\r\n" ends nothing on its own */
            s->saw_cr = 0;

            if (c == '\n') {
                p++;
                continue;
            }
        }

        switch (s->state) {

        case TB_SSE_ST_START:
            if (c == '\n' || c == '\r') {
                s->saw_cr = (c == '\r');
                p++;
                rc |= tb_sse_dispatch(s);
                break;
            }

            s->line_len = 0;
            s->state = TB_SSE_ST_NAME;

            /* fall through */

        case TB_SSE_ST_NAME:
            while (p < end) {
                c = *p;

                if (c == ':') {
                    p++;
                    tb_sse_field(s);
                    s->state = TB_SSE_ST_SPACE;
                    break;
                }

                if (c == '\n' || c == '\r') {
                    /* a line without a colon: the whole line names the
                     * field and the value is empty */
                    tb_sse_field(s);
                    tb_sse_value_begin(s);
                    s->state = TB_SSE_ST_VALUE;
                    break;
                }

                if (s->line_len < TB_SSE_NAME_MAX) {
                    s->line[s->line_len] = c;
                }

                if (s->line_len <= TB_SSE_NAME_MAX) {
                    s->line_len++;
                }

                p++;
            }

            break;

        case TB_SSE_ST_SPACE:
            if (c == ' ') {
                p++;
            }

            tb_sse_value_begin(s);
            s->state = TB_SSE_ST_VALUE;
            break;

        case TB_SSE_ST_VALUE:
            q = tb_sse_eol(p, end);

            if (q > p) {
                tb_sse_value(s, p, (size_t) (q - p));
            }

            p = q;

            if (p < end) {
                s->saw_cr = (*p == '\r');
                p++;
                rc |= tb_sse_line_end(s);
            }

            break;
        }
    }

    return rc;
}


static void
tb_sse_field(tb_sse_t *s)
{
    if (s->line_len == 5 && memcmp(s->line, "event", 5) == 0) {
        s->field = TB_SSE_FIELD_EVENT;

    } else if (s->line_len == 4 && memcmp(s->line, "data", 4) == 0) {
        s->field = TB_SSE_FIELD_DATA;

    } else {
        /* comments (an empty name) and fields we do not use */
        s->field = TB_SSE_FIELD_OTHER;
    }
}


/*
 * Whether the data of the current event is worth copying: the usage and
 * error events, and events whose type only the JSON can tell.
 */

static int
tb_sse_wanted(tb_sse_t *s)
{
    if (s->event_long) {
        return 0;
    }

    return s->event_len == 0
           || tb_sse_event_is(s, "message_start")
           || tb_sse_event_is(s, "message_delta")
           || tb_sse_event_is(s, "error");
}


static void
tb_sse_value_begin(tb_sse_t *s)
{
    switch (s->field) {

    case TB_SSE_FIELD_EVENT:
        /* a second "event:" line replaces the name */
        s->event_len = 0;
        s->event_long = 0;
        s->event[0] = '\0';
        s->skip_line = 0;
        break;

    case TB_SSE_FIELD_DATA:
        if (!s->saw_data) {
            s->saw_data = 1;
            s->want_data = tb_sse_wanted(s) ? 1 : 0;
            s->data_len = 0;

        } else if (s->want_data) {
            tb_sse_append(s, (const unsigned char *) "\n", 1);
        }

        s->skip_line = !s->want_data;
        break;

    default:
        s->skip_line = 1;
        break;
    }
}


static void
tb_sse_value(tb_sse_t *s, const unsigned char *p, size_t n)
{
    size_t  room;

    if (s->skip_line) {
        return;
    }

    if (s->field == TB_SSE_FIELD_EVENT) {
        room = sizeof(s->event) - 1 - s->event_len;

        if (n > room) {
            /* too long to be a name we know: "some other event" */
            s->event_long = 1;
            s->skip_line = 1;
            return;
        }

        memcpy(s->event + s->event_len, p, n);
        s->event_len += n;
        s->event[s->event_len] = '\0';
        return;
    }

    tb_sse_append(s, p, n);
}


static void
tb_sse_append(tb_sse_t *s, const unsigned char *p, size_t n)
{
    if (s->overflow) {
        return;
    }

    if (n > TB_SSE_LINE_MAX - s->data_len) {
        /*
         * keep what fits: the event is dropped at dispatch, except that
         * the "type" of an unnamed event may still be read from it
         */
        n = TB_SSE_LINE_MAX - s->data_len;
        s->overflow = 1;
    }

    memcpy(s->data + s->data_len, p, n);
    s->data_len += n;
}


static unsigned
tb_sse_line_end(tb_sse_t *s)
{
    s->state = TB_SSE_ST_START;

    if (s->field == TB_SSE_FIELD_EVENT
        && !s->delta
        && tb_sse_event_is(s, "content_block_delta"))
    {
        /*
         * the commit point: the gateway holds the response until here and
         * must not wait for (and buffer) the delta's data
         */
        s->delta = 1;
        return TB_SSE_DELTA;
    }

    return 0;
}


static int
tb_sse_event_is(tb_sse_t *s, const char *name)
{
    size_t  n;

    n = strlen(name);

    return !s->event_long && s->event_len == n
           && memcmp(s->event, name, n) == 0;
}


/* copies a string of the event's data, cut at a UTF-8 boundary */

static void
tb_sse_copy_str(tb_sse_t *s, const char *path, char *buf, size_t size)
{
    size_t  len, i, need;

    buf[0] = '\0';

    if (s->overflow
        || tb_json_get_str(s->data, s->data_len, path, buf, size, &len) != 0)
    {
        buf[0] = '\0';
        return;
    }

    if (len < size) {
        return;
    }

    /* drop a sequence the truncation cut in half */

    len = size - 1;
    i = len;

    while (i > 0 && ((unsigned char) buf[i - 1] & 0xc0) == 0x80) {
        i--;
    }

    if (i > 0 && (unsigned char) buf[i - 1] >= 0xc0) {
        need = (unsigned char) buf[i - 1] >= 0xf0 ? 4
               : (unsigned char) buf[i - 1] >= 0xe0 ? 3 : 2;

        if (len - (i - 1) < need) {
            buf[i - 1] = '\0';
        }
    }
}


static unsigned
tb_sse_dispatch(tb_sse_t *s)
{
    int              unnamed;
    size_t           len;
    unsigned         rc;
    tb_usage_t       old;
    tb_json_walk_t   w;
    tb_json_peek_t   pk;
    char             type[32];
    const char      *name;

    rc = 0;

    if (!s->saw_data) {
        /* no data line: per the SSE spec nothing is dispatched */
        goto reset;
    }

    s->events++;

    unnamed = (s->event_len == 0 && !s->event_long);
    name = s->event_long ? "" : s->event;

    if (unnamed) {
        /*
         * the type comes from the JSON; an oversized event keeps its first
         * TB_SSE_LINE_MAX bytes, enough to find a leading "type" member
         * and so still see a huge unnamed content_block_delta commit
         */
        memset(&pk, 0, sizeof(tb_json_peek_t));
        pk.buf = type;
        pk.size = sizeof(type);
        type[0] = '\0';

        memset(&w, 0, sizeof(tb_json_walk_t));
        w.start = s->data;
        w.end = s->data + s->data_len;
        w.key = tb_json_peek_key;
        w.value = tb_json_peek_value;
        w.data = &pk;

        if (s->data_len == 0
            || (tb_json_walk(&w) != 0 && !s->overflow)
            || !pk.found
            || pk.len >= sizeof(type))
        {
            type[0] = '\0';
        }

        name = type;

        if (!s->delta && strcmp(name, "content_block_delta") == 0) {
            s->delta = 1;
            rc |= TB_SSE_DELTA;
        }
    }

    len = strlen(name);

    if (len == 13
        && (memcmp(name, "message_start", 13) == 0
            || memcmp(name, "message_delta", 13) == 0))
    {
        if (!s->overflow && s->want_data) {
            old = s->usage;

            tb_usage_merge_event(&s->usage, s->data, s->data_len,
                                 name[9] == 't' ? "message.usage" : "usage");

            if (memcmp(&old, &s->usage, sizeof(tb_usage_t)) != 0) {
                rc |= TB_SSE_USAGE;
            }
        }

    } else if (len == 5 && memcmp(name, "error", 5) == 0) {
        s->error = 1;
        rc |= TB_SSE_ERROR;

        if (s->want_data) {
            tb_sse_copy_str(s, "error.type", s->error_type,
                            sizeof(s->error_type));
            tb_sse_copy_str(s, "error.message", s->error_message,
                            sizeof(s->error_message));

        } else {
            s->error_type[0] = '\0';
            s->error_message[0] = '\0';
        }

    } else if (len == 12 && memcmp(name, "message_stop", 12) == 0) {
        s->stop = 1;
        rc |= TB_SSE_STOP;
    }

reset:

    s->event_len = 0;
    s->event_long = 0;
    s->event[0] = '\0';
    s->data_len = 0;
    s->saw_data = 0;
    s->want_data = 0;
    s->overflow = 0;

    return rc;
}
