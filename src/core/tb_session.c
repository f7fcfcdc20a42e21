/*
 * Session keys and input estimates, from a body tb_scan_body() validated:
 * the walk below trusts the grammar and only bounds its reads.
 */

#include <stdlib.h>
#include <string.h>

#include "tb_session.h"
#include "tb_hash.h"


#define TB_SESSION_MAX_TOOLS  512


/*
 * Is the string "base64" anywhere in a JSON text?  Quotes are rare in a
 * body next to its text, and memchr() finds them fast (faster than
 * memmem(), measured).
 */

static int
tb_has_base64(const unsigned char *p, size_t len)
{
    const unsigned char  *end;

    end = p + len;

    while (end - p >= 8) {
        p = memchr(p, '"', (size_t) (end - p - 7));

        if (p == NULL) {
            return 0;
        }

        if (memcmp(p, "\"base64\"", 8) == 0) {
            return 1;
        }

        p++;
    }

    return 0;
}


#define TB_SESSION_MAX_DEPTH  64         /* deeper values are hashed raw */


typedef struct {
    const unsigned char      *p;
    const unsigned char      *end;
    unsigned char             close;
    unsigned                  first:1;
} tb_iter_t;


typedef struct {
    const unsigned char      *p;
    size_t                    len;
} tb_str_t;


static const unsigned char *
tb_ws(const unsigned char *p, const unsigned char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) {
        p++;
    }

    return p;
}


/* p at the opening quote; returns just past the closing one */
static const unsigned char *
tb_skip_string(const unsigned char *p, const unsigned char *end)
{
    const unsigned char  *q, *b;

    p++;

    for ( ;; ) {
        q = memchr(p, '"', (size_t) (end - p));

        if (q == NULL) {
            return end;
        }

        /* escaped if preceded by an odd run of backslashes */

        for (b = q; b > p && b[-1] == '\\'; b--) { /* void */ }

        if (((q - b) & 1) == 0) {
            return q + 1;
        }

        p = q + 1;
    }
}


static const unsigned char *
tb_skip_value(const unsigned char *p, const unsigned char *end)
{
    size_t  depth;

    depth = 0;

    while (p < end) {

        switch (*p) {

        case '"':
            p = tb_skip_string(p, end);

            if (depth == 0) {
                return p;
            }

            continue;

        case '{':
        case '[':
            depth++;
            break;

        case '}':
        case ']':
            if (depth == 0) {
                return p;
            }

            if (--depth == 0) {
                return p + 1;
            }

            break;

        case ',':
        case ' ':
        case '\t':
        case '\r':
        case '\n':
        case ':':
            if (depth == 0) {
                return p;
            }

            break;
        }

        p++;
    }

    return p;
}


static int
tb_iter_begin(tb_iter_t *it, const unsigned char *v, size_t len,
    unsigned char open)
{
    if (len < 2 || v[0] != open) {
        return -1;
    }

    it->p = v + 1;
    it->end = v + len;
    it->close = (open == '{') ? '}' : ']';
    it->first = 1;

    return 0;
}


/* the next element's value; -1 at the end */
static int
tb_iter_elem(tb_iter_t *it, tb_str_t *v)
{
    const unsigned char  *p;

    p = tb_ws(it->p, it->end);

    if (!it->first) {
        if (p >= it->end || *p != ',') {
            return -1;
        }

        p = tb_ws(p + 1, it->end);
    }

    if (p >= it->end || *p == it->close) {
        return -1;
    }

    it->first = 0;

    v->p = p;
    it->p = tb_skip_value(p, it->end);
    v->len = (size_t) (it->p - p);

    return 0;
}


/* the next member: its key (without quotes, raw) and value */
static int
tb_iter_member(tb_iter_t *it, tb_str_t *k, tb_str_t *v)
{
    const unsigned char  *p;

    if (tb_iter_elem(it, k) != 0 || k->len < 2) {
        return -1;
    }

    p = tb_ws(it->p, it->end);

    if (p >= it->end || *p != ':') {
        return -1;
    }

    p = tb_ws(p + 1, it->end);

    v->p = p;
    it->p = tb_skip_value(p, it->end);
    v->len = (size_t) (it->p - p);

    k->p++;
    k->len -= 2;

    return 0;
}


static int
tb_str_is(const tb_str_t *s, const char *lit)
{
    size_t  n;

    n = strlen(lit);

    return s->len == n && memcmp(s->p, lit, n) == 0;
}


/* the raw content of a string value, without its quotes */
static int
tb_string_body(const tb_str_t *v, tb_str_t *out)
{
    if (v->len < 2 || v->p[0] != '"') {
        return -1;
    }

    out->p = v->p + 1;
    out->len = v->len - 2;

    return 0;
}


static int
tb_member(const tb_str_t *obj, const char *name, tb_str_t *v)
{
    int        found;
    tb_str_t   k, val;
    tb_iter_t  it;

    if (tb_iter_begin(&it, obj->p, obj->len, '{') != 0) {
        return -1;
    }

    found = -1;

    while (tb_iter_member(&it, &k, &val) == 0) {
        if (tb_str_is(&k, name)) {
            *v = val;
            found = 0;
        }
    }

    return found;
}


/*
 * Hashes a JSON value's structure and scalars, leaving out every
 * "cache_control" member at any depth: the markers move between turns,
 * the content does not.
 */

static void
tb_hash_value(tb_hash_t *h, const tb_str_t *v, unsigned depth)
{
    tb_str_t   k, e;
    tb_iter_t  it;

    if (v->len && depth < TB_SESSION_MAX_DEPTH) {

        if (v->p[0] == '{' && tb_iter_begin(&it, v->p, v->len, '{') == 0) {
            tb_hash_sep(h, '{');

            while (tb_iter_member(&it, &k, &e) == 0) {
                if (tb_str_is(&k, "cache_control")) {
                    continue;
                }

                tb_hash_update(h, k.p, k.len);
                tb_hash_value(h, &e, depth + 1);
            }

            tb_hash_sep(h, '}');
            return;
        }

        if (v->p[0] == '[' && tb_iter_begin(&it, v->p, v->len, '[') == 0) {
            tb_hash_sep(h, '[');

            while (tb_iter_elem(&it, &e) == 0) {
                tb_hash_value(h, &e, depth + 1);
            }

            tb_hash_sep(h, ']');
            return;
        }
    }

    tb_hash_update(h, v->p, v->len);
}


static int
tb_str_cmp(const void *a, const void *b)
{
    int              rc;
    size_t           n;
    const tb_str_t  *x, *y;

    x = a;
    y = b;
    n = x->len < y->len ? x->len : y->len;

    rc = memcmp(x->p, y->p, n);

    if (rc) {
        return rc;
    }

    return (x->len > y->len) - (x->len < y->len);
}


static void
tb_hash_tools(tb_hash_t *h, const unsigned char *body, const tb_span_t *sp)
{
    size_t     n, i;
    tb_str_t   tools, tool, name, names[TB_SESSION_MAX_TOOLS];
    tb_iter_t  it;

    tools.p = body + sp->off;
    tools.len = sp->len;

    if (tb_iter_begin(&it, tools.p, tools.len, '[') != 0) {
        return;
    }

    n = 0;

    while (n < TB_SESSION_MAX_TOOLS && tb_iter_elem(&it, &tool) == 0) {
        if (tb_member(&tool, "name", &name) == 0
            && tb_string_body(&name, &names[n]) == 0)
        {
            n++;
        }
    }

    /* names only, in any order: a client may list its tools differently */

    qsort(names, n, sizeof(tb_str_t), tb_str_cmp);

    for (i = 0; i < n; i++) {
        tb_hash_update(h, names[i].p, names[i].len);
    }
}


/*
 * The role and content of the message object at p, in one pass over its
 * members (the last duplicate wins, as everywhere); *next is just past the
 * object.  -1 when p holds no object.
 */

static int
tb_message_fields(const unsigned char *p, const unsigned char *end,
    tb_str_t *role, tb_str_t *content, const unsigned char **next)
{
    tb_str_t   k, v;
    tb_iter_t  it;

    if (p >= end || *p != '{') {
        return -1;
    }

    it.p = p + 1;
    it.end = end;
    it.close = '}';
    it.first = 1;

    role->p = NULL;
    role->len = 0;
    content->p = NULL;
    content->len = 0;

    while (tb_iter_member(&it, &k, &v) == 0) {
        if (k.len == 4 && memcmp(k.p, "role", 4) == 0) {
            *role = v;

        } else if (k.len == 7 && memcmp(k.p, "content", 7) == 0) {
            *content = v;
        }
    }

    p = tb_ws(it.p, end);
    *next = (p < end && *p == '}') ? p + 1 : tb_skip_value(p, end);

    return 0;
}


static void
tb_hash_first_user_message(tb_hash_t *h, const unsigned char *body,
    const tb_span_t *sp)
{
    tb_str_t              role, content;
    const unsigned char  *p, *end, *next;

    p = body + sp->off;
    end = p + sp->len;

    if (sp->len < 2 || *p != '[') {
        return;
    }

    end--;                                  /* at the closing ']' */
    p = tb_ws(p + 1, end);

    /* a message is not skipped before its members are read: the first
     * user message, the one looked for, is mostly the first element */

    while (p < end) {
        if (tb_message_fields(p, end, &role, &content, &next) == 0) {
            if (tb_str_is(&role, "\"user\"")) {
                if (content.len) {
                    tb_hash_value(h, &content, 0);
                }

                return;
            }

        } else {
            next = tb_skip_value(p, end);
        }

        p = tb_ws(next, end);

        if (p >= end || *p != ',') {
            return;
        }

        p = tb_ws(p + 1, end);
    }
}


uint64_t
tb_session_key(const unsigned char *body, size_t len, const tb_body_t *b,
    const char *header, size_t hlen, const char *scope, size_t slen,
    tb_session_source_e *source)
{
    uint64_t   key;
    tb_str_t   sys;
    tb_hash_t  h;

    tb_hash_init(&h, 0x7462736573736e31ULL);      /* "tbsessn1" */

    tb_hash_update(&h, scope, slen);
    tb_hash_sep(&h, 0);

    if (hlen) {
        *source = TB_SESSION_HEADER;

        tb_hash_sep(&h, 'h');
        tb_hash_update(&h, header,
                       hlen < TB_SESSION_HEADER_MAX ? hlen
                                                    : TB_SESSION_HEADER_MAX);
        goto done;
    }

    *source = TB_SESSION_FINGERPRINT;

    tb_hash_sep(&h, 'f');
    tb_hash_update(&h, b->model, b->model_len);

    tb_hash_sep(&h, 's');

    if (b->system.len) {
        sys.p = body + b->system.off;
        sys.len = b->system.len;
        tb_hash_value(&h, &sys, 0);
    }

    tb_hash_sep(&h, 't');

    if (b->tools.len) {
        tb_hash_tools(&h, body, &b->tools);
    }

    tb_hash_sep(&h, 'm');

    if (b->messages.len) {
        tb_hash_first_user_message(&h, body, &b->messages);
    }

    (void) len;

done:

    key = tb_hash_final(&h);

    return key ? key : 1;
}


/* base64 payloads in message content, by kind */
static void
tb_estimate_block(const tb_str_t *block, size_t *b64, int64_t *tokens)
{
    tb_str_t  type, source, stype, data;

    if (tb_member(block, "source", &source) != 0
        || tb_member(&source, "type", &stype) != 0
        || !tb_str_is(&stype, "\"base64\"")
        || tb_member(&source, "data", &data) != 0)
    {
        return;
    }

    *b64 += data.len;

    if (tb_member(block, "type", &type) == 0 && tb_str_is(&type, "\"image\""))
    {
        *tokens += TB_IMAGE_TOKENS;

    } else {
        *tokens += (int64_t) (data.len * 3 / 4 / 32);
    }
}


int64_t
tb_estimate_input(const unsigned char *body, size_t len, const tb_body_t *b)
{
    int64_t  text, fixed;

    tb_estimate_input_parts(body, len, b, &text, &fixed);

    /* 3.5 bytes a token over-counts English a little: the safe side */
    fixed += (text * 2 + 6) / 7;

    return fixed > 0 ? fixed : 1;
}


void
tb_estimate_input_parts(const unsigned char *body, size_t len,
    const tb_body_t *b, int64_t *text_bytes, int64_t *fixed_tokens)
{
    size_t     b64;
    int64_t    tokens;
    tb_str_t   msgs, msg, content, block;
    tb_iter_t  it, ic;

    b64 = 0;
    tokens = 0;

    /*
     * Most bodies carry no base64 payload at all: then the walk over the
     * messages, the costly part, is not needed.
     */

    if (b->messages.len
        && tb_has_base64(body + b->messages.off, b->messages.len))
    {
        msgs.p = body + b->messages.off;
        msgs.len = b->messages.len;

        if (tb_iter_begin(&it, msgs.p, msgs.len, '[') == 0) {

            while (tb_iter_elem(&it, &msg) == 0) {

                if (tb_member(&msg, "content", &content) != 0
                    || tb_iter_begin(&ic, content.p, content.len, '[') != 0)
                {
                    continue;
                }

                while (tb_iter_elem(&ic, &block) == 0) {
                    tb_estimate_block(&block, &b64, &tokens);
                }
            }
        }
    }

    if (b64 > len) {
        b64 = len;
    }

    *text_bytes = (int64_t) (len - b64);
    *fixed_tokens = tokens;
}
