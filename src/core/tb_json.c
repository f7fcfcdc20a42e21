/*
 * JSON without building a tree (see tb_json.h): the walker that validates
 * a document (strict RFC 8259) and hands the root's members to a scanner,
 * and the lookups, unescaping and escaping built on it.
 *
 * Everything here reads hostile input: request bodies come from clients,
 * responses from the network.  No function allocates, none keeps state
 * beyond whether the CPU has AVX2 (asked once), none reads outside
 * [p, p + len), and nesting is tracked with an explicit bit stack instead
 * of recursion.
 *
 * Strings are scanned 32, 16 or 8 bytes at a time (AVX2, SSE2, or words
 * as the machine allows): request bodies of agent clients are megabytes
 * of mostly long text strings, so the byte loop only runs around quotes,
 * escapes, control and non-ASCII bytes.
 */

#include <string.h>
#include <stdio.h>

#include "tb_json_int.h"
#include "tb_parse.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang_analyzer__)
#include <immintrin.h>
#define TB_JSON_AVX2  1
#endif


#define TB_JSON_ONES          0x0101010101010101ULL
#define TB_JSON_HIGH          0x8080808080808080ULL

#if defined(__GNUC__)
#define TB_JSON_INLINE        inline __attribute__((always_inline))
#else
#define TB_JSON_INLINE        inline
#endif


static TB_JSON_INLINE const unsigned char *tb_json_scan_string(
    tb_json_walk_t *w, const unsigned char *p, unsigned *esc);
static const unsigned char *tb_json_scan_long(tb_json_walk_t *w,
    const unsigned char *p, unsigned *esc);
static const unsigned char *tb_json_scan_utf8(const unsigned char *p,
    const unsigned char *end);
static const unsigned char *tb_json_scan_number(tb_json_walk_t *w,
    const unsigned char *p);
static int tb_json_fail(tb_json_walk_t *w, const unsigned char *p,
    const char *msg);
static int tb_json_hex4(const unsigned char *p, const unsigned char *end,
    unsigned *v);
static size_t tb_json_unescape_one(const unsigned char **pp,
    const unsigned char *end, unsigned char out[4]);
static int tb_json_lookup(const unsigned char *p, size_t len,
    const char *path, const unsigned char **v, const unsigned char **vend);


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

int
tb_json_walk(tb_json_walk_t *w)
{
    unsigned              depth, esc, take, tdepth;
    uint64_t              stack[(TB_JSON_MAX_DEPTH + 63) / 64] = { 0 };
    const unsigned char  *p, *end, *k, *cap;

    p = w->start;
    end = w->end;
    depth = 0;
    take = 0;
    tdepth = 1;
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

    if (take == 2 && depth == tdepth) {
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

    if (w->mark_len
        && (esc ? tb_json_key_eq(k + 1, p - 1, w->mark, w->mark_len)
                : ((size_t) (p - k - 2) == w->mark_len
                   && memcmp(k + 1, w->mark, w->mark_len) == 0)))
    {
        w->marked = 1;
    }

    if ((depth == 1 || w->deep) && w->key != NULL
        && w->key(w, k + 1, (size_t) (p - k - 2), esc))
    {
        take = 1;
        tdepth = depth;
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


#if defined(TB_JSON_AVX2)

/*
 * The plain bytes of a string from p, 32 at a time: the first quote,
 * backslash, control or non-ASCII byte, or where fewer than 32 are left.
 */

__attribute__((target("avx2")))
static const unsigned char *
tb_json_run_avx2(const unsigned char *p, const unsigned char *end)
{
    unsigned  mask;
    __m256i   x, quote, bslash, space;

    quote = _mm256_set1_epi8('"');
    bslash = _mm256_set1_epi8('\\');
    space = _mm256_set1_epi8(0x20);

    while (end - p >= 32) {
        x = _mm256_loadu_si256((const __m256i *) (const void *) p);

        /* signed: below the space are controls and every byte >= 0x80 */
        mask = (unsigned) _mm256_movemask_epi8(
                   _mm256_or_si256(
                       _mm256_or_si256(_mm256_cmpeq_epi8(x, quote),
                                       _mm256_cmpeq_epi8(x, bslash)),
                       _mm256_cmpgt_epi8(space, x)));

        if (mask) {
            return p + __builtin_ctz(mask);
        }

        p += 32;
    }

    return p;
}


static int
tb_json_avx2(void)
{
    static int  have = -1;

    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") ? 1 : 0;
    }

    return have;
}

#endif


/*
 * A string from its opening quote (p) to the byte after its closing one:
 * most are keys and short values that end within 16 plain bytes, told
 * here without a call; the rest, and every escape, control or non-ASCII
 * byte, go to tb_json_scan_long().
 */

static TB_JSON_INLINE const unsigned char *
tb_json_scan_string(tb_json_walk_t *w, const unsigned char *p, unsigned *esc)
{
#if defined(__SSE2__)
    int                   mask;
    const unsigned char  *q;

    if (w->end - p > 16) {
        mask = tb_simd_mask16(p + 1, '"', '\\', 0x20);

        if (mask) {
            q = p + 1 + __builtin_ctz((unsigned) mask);

            if (*q == '"') {
                *esc = 0;
                return q + 1;
            }
        }
    }
#endif

    return tb_json_scan_long(w, p, esc);
}


static const unsigned char *
tb_json_scan_long(tb_json_walk_t *w, const unsigned char *p, unsigned *esc)
{
    unsigned              v;
    uint64_t              x, t;
    unsigned char         c;
    const unsigned char  *s, *end, *q;

    s = p++;
    end = w->end;
    *esc = 0;

    for ( ;; ) {

#if defined(TB_JSON_AVX2)

        if (end - p >= 64 && tb_json_avx2()) {
            p = tb_json_run_avx2(p, end);

            if (end - p >= 32) {
                goto bytes;
            }
        }

#endif

#if defined(__SSE2__)

        /* 16 bytes at a time: a quote, a backslash, a control or a
         * non-ASCII byte (negative as a signed char) stops the run */

        while (end - p >= 16) {
            int  mask;

            mask = tb_simd_mask16(p, '"', '\\', 0x20);

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
    int       d;
    unsigned  i;

    if (end - p < 4) {
        return -1;
    }

    *v = 0;

    for (i = 0; i < 4; i++) {
        d = tb_hex_digit(p[i]);
        if (d < 0) {
            return -1;
        }

        *v = (*v << 4) | (unsigned) d;
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

size_t
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

int
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

const unsigned char *
tb_json_skip(const unsigned char *p, const unsigned char *end)
{
    size_t                depth;
    uint64_t              x, q, b, t;
    unsigned char         c;
    const unsigned char  *s;

    depth = 0;

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

                s = p;
                t = 0;

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

                if (t) {
                    /* the lowest flagged byte is exact */
#if defined(__GNUC__) && defined(__BYTE_ORDER__)                            \
    && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                    p += __builtin_ctzll(t) / 8;
#else
                    while (*p != '"' && *p != '\\') {
                        p++;
                    }
#endif
                    continue;
                }

                /*
                 * Fewer than 8 bytes left: one byte at a time, but only
                 * past a byte the loop's condition has seen; after word
                 * steps the byte at p is still unread (it may be the
                 * closing quote).
                 */

                if (p == s) {
                    p++;
                }
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

int
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

int
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

    tb_json_walk_init(&w, p, len, NULL, NULL, NULL);

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
