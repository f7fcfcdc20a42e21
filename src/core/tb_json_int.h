/*
 * What the JSON walker shares with the scanners built on it (tb_body.c,
 * tb_sse.c).  Not a public interface: src/core only.
 */

#ifndef TB_JSON_INT_H
#define TB_JSON_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tb_json.h"
#include "tb_body.h"


typedef struct tb_json_walk_s  tb_json_walk_t;

/*
 * Called for each key of the root object (of every object, deep) - raw
 * bytes between the quotes, esc set when they contain a backslash; a
 * non-zero return asks for the value of that key to be passed to the
 * value handler once it has been scanned and validated completely.
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
    unsigned                  deep;     /* the key handler sees the keys of
                                           every object, not the root's
                                           only */

    /* a key looked for in every object, at no call's cost: marked when
     * one is found (mark_len 0: none) */
    const char               *mark;
    size_t                    mark_len;
    unsigned                  marked;

    const char               *err;
    size_t                    err_off;
};


/* 0 when the document is valid; the handlers saw the root's members */
int tb_json_walk(tb_json_walk_t *w);

/* a walk over len bytes at p, with its handlers (or none) */
static inline void
tb_json_walk_init(tb_json_walk_t *w, const void *p, size_t len,
    tb_json_key_pt key, tb_json_value_pt value, void *data)
{
    memset(w, 0, sizeof(tb_json_walk_t));
    w->start = p;
    w->end = (const unsigned char *) p + len;
    w->key = key;
    w->value = value;
    w->data = data;
}

#if defined(__SSE2__)

#include <emmintrin.h>

/* the 16 bytes at p, as a mask of those equal to a or b, or below lt
 * (as signed chars: 0 for none) */
static inline int
tb_simd_mask16(const unsigned char *p, char a, char b, char lt)
{
    __m128i  x;

    x = _mm_loadu_si128((const __m128i *) (const void *) p);

    return _mm_movemask_epi8(
               _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(a)),
                                         _mm_cmpeq_epi8(x, _mm_set1_epi8(b))),
                            _mm_cmplt_epi8(x, _mm_set1_epi8(lt))));
}

#endif


/* past the whitespace of RFC 8259: inline, the walk's innermost step */
static inline const unsigned char *
tb_json_ws(const unsigned char *p, const unsigned char *end)
{
    while (p < end
           && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
    {
        p++;
    }

    return p;
}

/* past one value (or a key with its quotes), bounded by end */
const unsigned char *tb_json_skip(const unsigned char *p,
    const unsigned char *end);

/* a raw key (between its quotes) equals name, escapes resolved */
int tb_json_key_eq(const unsigned char *k, const unsigned char *end,
    const char *name, size_t nlen);

/* a string's raw bytes unescaped into buf, NUL-terminated; full length */
size_t tb_json_unescape(const unsigned char *p, const unsigned char *end,
    char *buf, size_t size);

int tb_json_parse_int(const unsigned char *p, const unsigned char *end,
    int64_t *value);

/* the value at a dotted key path, without validating the document */
int tb_json_find(const unsigned char *p, size_t len, const char *path,
    const unsigned char **v, const unsigned char **vend);

/* a whole usage object read into u (0), or -1 with u untouched */
int tb_usage_object(tb_usage_t *u, const unsigned char *v,
    const unsigned char *vend);

/* the usage object at v, wherever it ends before end: past its '}', or
 * NULL with u untouched */
const unsigned char *tb_usage_members(tb_usage_t *u, const unsigned char *v,
    const unsigned char *end);


#endif /* TB_JSON_INT_H */
