/*
 * The configuration engine: YAML nodes read as typed fields of a schema.
 *
 * Every section is a table of fields: the key's name, its type, where it
 * is stored, its default and its bounds.  The same tables set the defaults
 * and free what was allocated, so adding a key is one line in one table
 * (tb_config.c).  ${VAR} and ${VAR:-default} are expanded in every scalar;
 * unknown keys are errors that name the known ones; the work an alias can
 * cause is charged against a budget.
 */

#if !defined _GNU_SOURCE && !defined _POSIX_C_SOURCE
#define _POSIX_C_SOURCE  200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <yaml.h>

#include "tb_conf_int.h"
#include "tb_parse.h"



/* messages */

int
tb_conf_error(tb_conf_ctx_t *ctx, unsigned line, const char *fmt, ...)
{
    int      n;
    va_list  args;

    if (ctx->err == NULL || ctx->errlen == 0) {
        return TB_CONF_ERROR;
    }

    if (line) {
        n = snprintf(ctx->err, ctx->errlen, "%s:%u: ", ctx->name, line);

    } else {
        n = snprintf(ctx->err, ctx->errlen, "%s: ", ctx->name);
    }

    if (n < 0 || (size_t) n >= ctx->errlen) {
        return TB_CONF_ERROR;
    }

    va_start(args, fmt);
    (void) vsnprintf(ctx->err + n, ctx->errlen - (size_t) n, fmt, args);
    va_end(args);

    return TB_CONF_ERROR;
}


int
tb_conf_nomem(tb_conf_ctx_t *ctx)
{
    return tb_conf_error(ctx, 0, "out of memory");
}


/*
 * A value as it may appear in a one-line message: control characters
 * become '?' so that nothing can forge a second log line, and long values
 * are cut.  Never used for credentials.
 */
const char *
tb_conf_show(const char *s, char *buf)
{
    size_t  i;

    for (i = 0; i < TB_CONF_SHOWLEN - 4 && s[i] != '\0'; i++) {
        buf[i] = ((unsigned char) s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    }

    if (s[i] != '\0') {
        memcpy(&buf[i], "...", 3);
        i += 3;
    }

    buf[i] = '\0';

    return buf;
}


unsigned
tb_conf_line(yaml_node_t *node)
{
    return (unsigned) node->start_mark.line + 1;
}


static yaml_node_t *
tb_conf_node(tb_conf_ctx_t *ctx, int index)
{
    return yaml_document_get_node(ctx->doc, index);
}


static int
tb_conf_null_text(const char *s, size_t len)
{
    return len == 0
           || (len == 1 && s[0] == '~')
           || (len == 4 && (memcmp(s, "null", 4) == 0
                            || memcmp(s, "Null", 4) == 0
                            || memcmp(s, "NULL", 4) == 0));
}


/* a plain "", "~" or "null": the key is there with no value */
int
tb_conf_null_node(yaml_node_t *node)
{
    return node->type == YAML_SCALAR_NODE
           && node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE
           && tb_conf_null_text((const char *) node->data.scalar.value,
                                node->data.scalar.length);
}


int
tb_conf_expected(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what)
{
    const char  *got;

    switch (node->type) {
    case YAML_SEQUENCE_NODE:
        got = "a list";
        break;
    case YAML_MAPPING_NODE:
        got = "a mapping";
        break;
    default:
        got = tb_conf_null_node(node) ? "nothing (null)" : "a string";
        break;
    }

    return tb_conf_error(ctx, tb_conf_line(node), "%s: expected %s, got %s",
                         path, what, got);
}


/*
 * The node of a list or a mapping, of the kind type: TB_CONF_OK to read
 * it, TB_CONF_NONE for null, or TB_CONF_ERROR, said, for another kind of
 * node.
 */
static int
tb_conf_collection(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    yaml_node_type_t type, const char *what)
{
    if (tb_conf_null_node(node)) {
        return TB_CONF_NONE;
    }

    if (node->type != type) {
        return tb_conf_expected(ctx, node, path, what);
    }

    return TB_CONF_OK;
}


/* the number of items of a sequence node */
static size_t
tb_conf_items(yaml_node_t *node)
{
    return (size_t) (node->data.sequence.items.top
                     - node->data.sequence.items.start);
}


/* counts work done for the document, which aliases can multiply */
static int
tb_conf_charge(tb_conf_ctx_t *ctx, size_t units, unsigned line)
{
    if (units > TB_CONF_MAX_WORK - ctx->work) {
        return tb_conf_error(ctx, line,
                             "the document expands to too much data "
                             "(aliases repeated too often?)");
    }

    ctx->work += units;

    return TB_CONF_OK;
}


void
tb_conf_join(char *buf, const char *path, const char *name)
{
    char  show[TB_CONF_SHOWLEN];

    tb_conf_show(name, show);

    if (path[0] == '\0') {
        (void) snprintf(buf, TB_CONF_PATHLEN, "%s", show);

    } else {
        (void) snprintf(buf, TB_CONF_PATHLEN, "%s.%s", path, show);
    }
}


char *
tb_conf_strndup(const char *s, size_t len)
{
    char  *p;

    p = malloc(len + 1);
    if (p == NULL) {
        return NULL;
    }

    memcpy(p, s, len);
    p[len] = '\0';

    return p;
}


void
tb_conf_strlist_free(tb_strlist_t *list)
{
    size_t  i;

    for (i = 0; i < list->n; i++) {
        free(list->items[i]);
    }

    free(list->items);
    list->items = NULL;
    list->n = 0;
}


static void
tb_conf_kvlist_free(tb_kvlist_t *list)
{
    size_t  i;

    for (i = 0; i < list->n; i++) {
        free(list->items[i].key);
        free(list->items[i].value);
    }

    free(list->items);
    list->items = NULL;
    list->n = 0;
}


/* scalars */

static int
tb_conf_buf_add(char **buf, size_t *n, size_t *cap, const char *s,
    size_t len)
{
    char    *p;
    size_t   size;

    if (*n + len + 1 > *cap) {
        size = *cap * 2;

        if (size < *n + len + 1) {
            size = *n + len + 1;
        }

        p = realloc(*buf, size);
        if (p == NULL) {
            return TB_CONF_ERROR;
        }

        *buf = p;
        *cap = size;
    }

    memcpy(*buf + *n, s, len);
    *n += len;

    return TB_CONF_OK;
}


static int
tb_conf_var_name(const char *s, size_t len)
{
    size_t  i;

    if (len == 0 || len > TB_CONF_MAX_VAR || (s[0] >= '0' && s[0] <= '9')) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')
              || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
        {
            return 0;
        }
    }

    return 1;
}


/*
 * The text of a scalar in a new string, with ${VAR} and ${VAR:-default}
 * expanded anywhere in it.  Expansion comes first, so "${PORT:-8787}" is
 * an integer; *is_null is set when the result is a plain null.  An
 * expanded value is never quoted in a message: it may be a credential.
 */
int
tb_conf_expand(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    char **out, int *is_null)
{
    char         name[TB_CONF_MAX_VAR + 1], show[TB_CONF_SHOWLEN];
    char        *buf;
    size_t       len, n, cap, nlen, vlen;
    unsigned     line;
    const char  *s, *end, *p, *q, *close, *def, *val;

    s = (const char *) node->data.scalar.value;
    len = node->data.scalar.length;
    line = tb_conf_line(node);

    if (memchr(s, '\0', len) != NULL) {
        return tb_conf_error(ctx, line, "%s: the value contains a NUL byte",
                             path);
    }

    if (tb_conf_charge(ctx, len + 1, line) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    cap = len + 1;
    buf = malloc(cap);
    if (buf == NULL) {
        return tb_conf_nomem(ctx);
    }

    n = 0;
    p = s;
    end = s + len;

    while (p < end) {

        if (*p != '$' || p + 1 == end || p[1] != '{') {
            q = tb_find_end(p + 1, end, '$');

            /* cannot fail: the buffer holds the whole scalar */
            (void) tb_conf_buf_add(&buf, &n, &cap, p, (size_t) (q - p));
            p = q;
            continue;
        }

        close = memchr(p + 2, '}', (size_t) (end - p - 2));
        if (close == NULL) {
            free(buf);
            return tb_conf_error(ctx, line,
                                 "%s: unterminated \"${\" (write ${NAME} or "
                                 "${NAME:-default}, or use $ without {)",
                                 path);
        }

        def = NULL;
        nlen = (size_t) (close - p - 2);

        for (q = p + 2; q + 1 < close; q++) {
            if (q[0] == ':' && q[1] == '-') {
                def = q + 2;
                nlen = (size_t) (q - p - 2);
                break;
            }
        }

        if (!tb_conf_var_name(p + 2, nlen)) {
            free(buf);

            if (nlen > TB_CONF_MAX_VAR) {
                nlen = TB_CONF_MAX_VAR;
            }

            memcpy(name, p + 2, nlen);
            name[nlen] = '\0';

            return tb_conf_error(ctx, line,
                                 "%s: \"${%s}\" is not a valid variable "
                                 "reference: names are letters, digits "
                                 "and '_'", path, tb_conf_show(name, show));
        }

        memcpy(name, p + 2, nlen);
        name[nlen] = '\0';

        val = ctx->getenv_fn(name);

        if (val != NULL) {
            vlen = strlen(val);

        } else if (def != NULL) {
            val = def;
            vlen = (size_t) (close - def);

        } else {
            free(buf);
            return tb_conf_error(ctx, line,
                                 "%s: environment variable %s is not set "
                                 "(write ${%s:-default} to give a default)",
                                 path, name, name);
        }

        if (tb_conf_charge(ctx, vlen, line) != TB_CONF_OK) {
            free(buf);
            return TB_CONF_ERROR;
        }

        if (tb_conf_buf_add(&buf, &n, &cap, val, vlen) != TB_CONF_OK) {
            free(buf);
            return tb_conf_nomem(ctx);
        }

        p = close + 1;
    }

    buf[n] = '\0';

    /*
     * Null is decided on the text as written: like the reference
     * implementation, a string key set to "${EMPTY}" gets "".  Numbers and
     * flags also read an expanded "" as null, see tb_conf_typed().
     */
    *is_null = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE
               && tb_conf_null_text(s, len);
    *out = buf;

    return TB_CONF_OK;
}


static int
tb_conf_scalar(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, char **out, int *is_null)
{
    /* written on every path, the failing ones included */
    *out = NULL;
    *is_null = 0;

    if (node->type != YAML_SCALAR_NODE) {
        (void) tb_conf_expected(ctx, node, path, what);
        return TB_CONF_ERROR;
    }

    return tb_conf_expand(ctx, node, path, out, is_null);
}


/*
 * A string.  Null is *out NULL where it may stand ("key:" with no value
 * keeps the default, like an absent key), an error elsewhere (an item of
 * a list or a mapping of strings).
 */
static int
tb_conf_string(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    int nullable, char **out)
{
    int  is_null;

    if (tb_conf_scalar(ctx, node, path, "a string", out, &is_null)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (!is_null) {
        return TB_CONF_OK;
    }

    free(*out);
    *out = NULL;

    if (nullable) {
        return TB_CONF_OK;
    }

    return tb_conf_error(ctx, tb_conf_line(node), "%s: expected a string, "
                         "got nothing (null)", path);
}


/*
 * The text of a number or a flag: here "${BUDGET:-}" means "no value",
 * which no number could mean otherwise.
 */
static int
tb_conf_typed(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, char **out, int *is_null)
{
    if (tb_conf_scalar(ctx, node, path, what, out, is_null) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    if (!*is_null) {
        *is_null = tb_conf_null_text(*out, strlen(*out));
    }

    return TB_CONF_OK;
}


static int
tb_conf_parse_bool(const char *s, unsigned *v)
{
    if (strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0
        || strcasecmp(s, "on") == 0)
    {
        *v = 1;
        return TB_CONF_OK;
    }

    if (strcasecmp(s, "false") == 0 || strcasecmp(s, "no") == 0
        || strcasecmp(s, "off") == 0)
    {
        *v = 0;
        return TB_CONF_OK;
    }

    return TB_CONF_ERROR;
}


/*
 * Decimal only.  A leading zero is refused rather than read as decimal:
 * YAML 1.1 (and so the reference implementation) reads "010" as octal 8.
 */
static int
tb_conf_parse_int(const char *s, int64_t *v, int *range)
{
    char        *end;
    long long    n;
    const char  *p;

    *range = 0;
    p = s;

    if (*p == '+' || *p == '-') {
        p++;
    }

    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '\0')) {
        return TB_CONF_ERROR;
    }

    for ( /* void */ ; *p; p++) {
        if (*p < '0' || *p > '9') {
            return TB_CONF_ERROR;
        }
    }

    errno = 0;
    n = strtoll(s, &end, 10);

    if (errno == ERANGE) {
        *range = 1;
        return TB_CONF_ERROR;
    }

    *v = (int64_t) n;

    return TB_CONF_OK;
}


/* integers or decimals, with an exponent; never nan, inf or hex */
static int
tb_conf_parse_num(const char *s, double *v)
{
    char        *end;
    double       d;
    size_t       digits;
    const char  *p;

    p = s;
    digits = 0;

    if (*p == '+' || *p == '-') {
        p++;
    }

    if (p[0] == '0' && p[1] >= '0' && p[1] <= '9') {
        return TB_CONF_ERROR;
    }

    for ( /* void */ ; *p >= '0' && *p <= '9'; p++) {
        digits++;
    }

    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++) {
            digits++;
        }
    }

    if (digits == 0) {
        return TB_CONF_ERROR;
    }

    if (*p == 'e' || *p == 'E') {
        p++;

        if (*p == '+' || *p == '-') {
            p++;
        }

        if (*p < '0' || *p > '9') {
            return TB_CONF_ERROR;
        }

        while (*p >= '0' && *p <= '9') {
            p++;
        }
    }

    if (*p != '\0') {
        return TB_CONF_ERROR;
    }

    d = strtod(s, &end);

    if (end != p || !isfinite(d)) {
        return TB_CONF_ERROR;
    }

    *v = d;

    return TB_CONF_OK;
}


static int
tb_conf_range(tb_conf_ctx_t *ctx, const tb_conf_field_t *f, double v,
    const char *text, const char *path, unsigned line)
{
    char  show[TB_CONF_SHOWLEN];

    if ((f->flags & TB_CONF_GE) && (f->flags & TB_CONF_LE)
        && (v < f->min || v > f->max))
    {
        return tb_conf_error(ctx, line, "%s: must be between %g and %g, "
                             "got %s", path, f->min, f->max,
                             tb_conf_show(text, show));
    }

    if ((f->flags & TB_CONF_GE) && v < f->min) {
        return tb_conf_error(ctx, line, "%s: must be at least %g, got %s",
                             path, f->min, tb_conf_show(text, show));
    }

    if ((f->flags & TB_CONF_GT) && v <= f->min) {
        return tb_conf_error(ctx, line, "%s: must be greater than %g, got %s",
                             path, f->min, tb_conf_show(text, show));
    }

    if ((f->flags & TB_CONF_LE) && v > f->max) {
        return tb_conf_error(ctx, line, "%s: must be at most %g, got %s",
                             path, f->max, tb_conf_show(text, show));
    }

    return TB_CONF_OK;
}


/* looks a scalar up in a NULL-terminated list; *index is -1 for null */
int
tb_conf_choice(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *const *choices, int *index)
{
    int      i, rc;
    char    *s, known[TB_CONF_PATHLEN], show[TB_CONF_SHOWLEN];
    size_t   n;

    *index = -1;

    if (tb_conf_string(ctx, node, path, 1, &s) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    if (s == NULL) {
        return TB_CONF_OK;
    }

    for (i = 0; choices[i] != NULL; i++) {
        if (strcmp(s, choices[i]) == 0) {
            free(s);
            *index = i;
            return TB_CONF_OK;
        }
    }

    n = 0;
    known[0] = '\0';

    for (i = 0; choices[i] != NULL && n < sizeof(known); i++) {
        rc = snprintf(known + n, sizeof(known) - n, "%s%s",
                      i ? ", " : "", choices[i]);
        if (rc < 0) {
            break;
        }

        n += (size_t) rc;
    }

    rc = tb_conf_error(ctx, tb_conf_line(node), "%s: expected one of %s, "
                       "got \"%s\"", path, known, tb_conf_show(s, show));
    free(s);

    return rc;
}


/* mappings */

static int
tb_conf_pairs_push(tb_conf_pairs_t *pp, tb_conf_pair_t *pair)
{
    size_t           cap;
    tb_conf_pair_t  *items;

    if (pp->n == pp->cap) {
        cap = pp->cap ? pp->cap * 2 : 16;

        items = realloc(pp->items, cap * sizeof(tb_conf_pair_t));
        if (items == NULL) {
            return TB_CONF_ERROR;
        }

        pp->items = items;
        pp->cap = cap;
    }

    pair->order = pp->n;
    pp->items[pp->n++] = *pair;

    return TB_CONF_OK;
}


/*
 * Collects the keys of a mapping: its own first, then those of "<<"
 * merge keys (YAML 1.1, which the reference implementation honours), at
 * a lower precedence.
 */
static int
tb_conf_collect(tb_conf_ctx_t *ctx, yaml_node_t *map, const char *path,
    tb_conf_pairs_t *pp, unsigned depth)
{
    int                pass, merge;
    yaml_node_t       *key, *value, *item;
    tb_conf_pair_t     pair;
    yaml_node_pair_t  *p;
    yaml_node_item_t  *it;

    /* charged per visit too: merging empty mappings must not be free */
    if (tb_conf_charge(ctx, 1, tb_conf_line(map)) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    for (pass = 0; pass < 2; pass++) {

        for (p = map->data.mapping.pairs.start;
             p < map->data.mapping.pairs.top;
             p++)
        {
            key = tb_conf_node(ctx, p->key);
            value = tb_conf_node(ctx, p->value);

            if (key == NULL || value == NULL) {
                return tb_conf_error(ctx, tb_conf_line(map),
                                     "%s: malformed mapping", path);
            }

            if (key->type != YAML_SCALAR_NODE) {
                return tb_conf_expected(ctx, key, path, "a key name");
            }

            if (tb_conf_charge(ctx, 1, tb_conf_line(key)) != TB_CONF_OK) {
                return TB_CONF_ERROR;
            }

            merge = key->data.scalar.style == YAML_PLAIN_SCALAR_STYLE
                    && key->data.scalar.length == 2
                    && memcmp(key->data.scalar.value, "<<", 2) == 0;

            if (pass == 0 && !merge) {

                if (memchr(key->data.scalar.value, '\0',
                           key->data.scalar.length) != NULL)
                {
                    return tb_conf_error(ctx, tb_conf_line(key),
                                         "%s: a key contains a NUL byte",
                                         path);
                }

                if (pp->n >= TB_CONF_MAX_NODES) {
                    return tb_conf_error(ctx, tb_conf_line(key),
                                         "%s: too many keys (merges "
                                         "repeated too often?)", path);
                }

                pair.name = (const char *) key->data.scalar.value;
                pair.key = key;
                pair.value = value;
                pair.map = map;

                if (tb_conf_pairs_push(pp, &pair) != TB_CONF_OK) {
                    return tb_conf_nomem(ctx);
                }

                continue;
            }

            if (pass == 0 || !merge) {
                continue;
            }

            if (depth >= TB_CONF_MAX_MERGE) {
                return tb_conf_error(ctx, tb_conf_line(key),
                                     "%s: \"<<\" merges nest too deeply",
                                     path);
            }

            if (value->type == YAML_MAPPING_NODE) {
                if (tb_conf_collect(ctx, value, path, pp, depth + 1)
                    != TB_CONF_OK)
                {
                    return TB_CONF_ERROR;
                }

                continue;
            }

            if (value->type != YAML_SEQUENCE_NODE) {
                return tb_conf_expected(ctx, value, path,
                                        "a mapping or a list of mappings "
                                        "after \"<<\"");
            }

            /* earlier mappings in the list take precedence */
            for (it = value->data.sequence.items.start;
                 it < value->data.sequence.items.top;
                 it++)
            {
                item = tb_conf_node(ctx, *it);

                if (item == NULL || item->type != YAML_MAPPING_NODE) {
                    return tb_conf_expected(ctx, item ? item : value, path,
                                            "a mapping in the \"<<\" list");
                }

                if (tb_conf_collect(ctx, item, path, pp, depth + 1)
                    != TB_CONF_OK)
                {
                    return TB_CONF_ERROR;
                }
            }
        }
    }

    return TB_CONF_OK;
}


int
tb_conf_cmp_placed(const char *a, size_t a_at, const char *b, size_t b_at)
{
    int  rc;

    rc = strcmp(a, b);
    if (rc != 0) {
        return rc;
    }

    return (a_at > b_at) - (a_at < b_at);
}


static int
tb_conf_cmp_pair_name(const void *one, const void *two)
{
    const tb_conf_pair_t  *a = one, *b = two;

    return tb_conf_cmp_placed(a->name, a->order, b->name, b->order);
}


static int
tb_conf_cmp_pair_order(const void *one, const void *two)
{
    const tb_conf_pair_t  *a = one, *b = two;

    return (a->order > b->order) - (a->order < b->order);
}


/*
 * The keys of a mapping, merges applied, in file order.  A key written
 * twice in the same mapping is an error: the YAML spec forbids it, and
 * the reference loader would silently keep the last one.
 */
int
tb_conf_pairs(tb_conf_ctx_t *ctx, yaml_node_t *map, const char *path,
    tb_conf_pair_t **out, size_t *nout)
{
    char              show[TB_CONF_SHOWLEN];
    size_t            i, n;
    unsigned          l1, l2;
    tb_conf_pair_t   *a, *b;
    tb_conf_pairs_t   pp;

    pp.items = NULL;
    pp.n = 0;
    pp.cap = 0;

    if (tb_conf_collect(ctx, map, path, &pp, 0) != TB_CONF_OK) {
        free(pp.items);
        return TB_CONF_ERROR;
    }

    if (pp.n > 1) {
        qsort(pp.items, pp.n, sizeof(tb_conf_pair_t), tb_conf_cmp_pair_name);
    }

    /*
     * Within a run of equal names the first has the highest precedence;
     * the others are either duplicates written in one mapping or keys
     * overridden through a merge, which are dropped.  One mapping's keys
     * are collected in one go, so its duplicates are adjacent here.
     */
    for (i = 1; i < pp.n; i++) {
        a = &pp.items[i - 1];
        b = &pp.items[i];

        if (strcmp(a->name, b->name) != 0) {
            continue;
        }

        if (a->map == b->map && a->key != b->key) {
            l1 = tb_conf_line(a->key);
            l2 = tb_conf_line(b->key);

            (void) tb_conf_error(ctx, l1 > l2 ? l1 : l2,
                                 "%s%skey \"%s\" is given twice "
                                 "(lines %u and %u)",
                                 path, path[0] ? ": " : "",
                                 tb_conf_show(b->name, show),
                                 l1 < l2 ? l1 : l2, l1 > l2 ? l1 : l2);
            free(pp.items);
            return TB_CONF_ERROR;
        }

        b->value = NULL;
    }

    n = 0;

    for (i = 0; i < pp.n; i++) {
        if (pp.items[i].value != NULL) {
            pp.items[n++] = pp.items[i];
        }
    }

    if (n > 1) {
        qsort(pp.items, n, sizeof(tb_conf_pair_t), tb_conf_cmp_pair_order);
    }

    *out = pp.items;
    *nout = n;

    return TB_CONF_OK;
}


int
tb_conf_mapping(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, tb_conf_pair_t **pairs, size_t *n, void **items,
    size_t size)
{
    int  rc;

    rc = tb_conf_collection(ctx, node, path, YAML_MAPPING_NODE, what);
    if (rc != TB_CONF_OK) {
        return rc;
    }

    if (tb_conf_pairs(ctx, node, path, pairs, n) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    if (items == NULL || *n == 0) {
        return TB_CONF_OK;
    }

    *items = calloc(*n, size);
    if (*items == NULL) {
        free(*pairs);
        *pairs = NULL;
        (void) tb_conf_nomem(ctx);
        return TB_CONF_ERROR;
    }

    return TB_CONF_OK;
}


/* generic fields */

int
tb_conf_set_str(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int     index;
    char   *s, **p;

    p = (char **) (void *) ((char *) base + f->offset);

    if (f->type == TB_CONF_CHOICE) {
        if (tb_conf_choice(ctx, node, path, f->choices, &index)
            != TB_CONF_OK)
        {
            return TB_CONF_ERROR;
        }

        if (index == -1) {
            return TB_CONF_OK;
        }

        s = strdup(f->choices[index]);
        if (s == NULL) {
            return tb_conf_nomem(ctx);
        }

    } else {
        if (tb_conf_string(ctx, node, path, 1, &s) != TB_CONF_OK) {
            return TB_CONF_ERROR;
        }

        if (s == NULL) {
            return TB_CONF_OK;
        }

        if ((f->flags & TB_CONF_NONEMPTY) && s[0] == '\0') {
            free(s);
            return tb_conf_error(ctx, tb_conf_line(node),
                                 "%s: must not be empty", path);
        }
    }

    free(*p);
    *p = s;

    return TB_CONF_OK;
}


/*
 * An integer (TB_CONF_INT) or a number (TB_CONF_NUM), its range checked,
 * or a flag (TB_CONF_BOOL), which cannot be null.
 */
static int
tb_conf_set_typed(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int          is_null, range, rc;
    char        *s, *p, show[TB_CONF_SHOWLEN];
    double       d;
    int64_t      i;
    unsigned     b, line;
    const char  *what;

    line = tb_conf_line(node);

    what = (f->type == TB_CONF_INT) ? "an integer"
           : (f->type == TB_CONF_NUM) ? "a number" : "true or false";

    if (tb_conf_typed(ctx, node, path, what, &s, &is_null) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    i = 0;
    d = 0;
    b = 0;

    if (is_null) {
        free(s);

        if (f->type == TB_CONF_BOOL || !(f->flags & TB_CONF_NULLABLE)) {
            return tb_conf_error(ctx, line, "%s: expected %s, "
                                 "got nothing (null)", path, what);
        }

        i = TB_UNSET;
        d = TB_UNSET;

    } else {
        range = 0;

        switch (f->type) {
        case TB_CONF_INT:
            rc = tb_conf_parse_int(s, &i, &range);
            d = (double) i;
            break;
        case TB_CONF_NUM:
            rc = tb_conf_parse_num(s, &d);
            break;
        default:
            rc = tb_conf_parse_bool(s, &b);
            break;
        }

        if (rc != TB_CONF_OK) {
            if (range) {
                rc = tb_conf_error(ctx, line, "%s: %s is out of range",
                                   path, tb_conf_show(s, show));

            } else {
                rc = tb_conf_error(ctx, line, "%s: expected %s, got \"%s\"",
                                   path, what, tb_conf_show(s, show));
            }

            free(s);
            return rc;
        }

        rc = (f->type == TB_CONF_BOOL)
             ? TB_CONF_OK : tb_conf_range(ctx, f, d, s, path, line);
        free(s);

        if (rc != TB_CONF_OK) {
            return rc;
        }
    }

    p = (char *) base + f->offset;

    switch (f->type) {
    case TB_CONF_INT:
        *(int64_t *) (void *) p = i;
        break;
    case TB_CONF_NUM:
        *(double *) (void *) p = d;
        break;
    default:
        f->set_bit(base, b);
        break;
    }

    return TB_CONF_OK;
}


static void
tb_conf_put_enum(const tb_conf_field_t *f, void *base, int v)
{
    if (f->set_bit != NULL) {
        f->set_bit(base, (unsigned) v);

    } else {
        /* (an enum's field: the enums of tb_config.h are int-sized) */
        *(int *) (void *) ((char *) base + f->offset) = v;
    }
}


/* one of .choices, stored as its value; null keeps the default */
static int
tb_conf_set_enum(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int  index;

    if (tb_conf_choice(ctx, node, path, f->choices, &index) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    if (index != -1) {
        tb_conf_put_enum(f, base, f->values ? f->values[index] : index);
    }

    return TB_CONF_OK;
}


static int
tb_conf_set_list(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int                rc;
    char              *s, sub[TB_CONF_PATHLEN];
    size_t             n;
    yaml_node_t       *item;
    tb_strlist_t      *list;
    yaml_node_item_t  *it;

    list = (tb_strlist_t *) (void *) ((char *) base + f->offset);

    rc = tb_conf_collection(ctx, node, path, YAML_SEQUENCE_NODE,
                            "a list of strings");
    if (rc != TB_CONF_OK) {
        return (rc == TB_CONF_NONE) ? TB_CONF_OK : rc;
    }

    n = tb_conf_items(node);

    tb_conf_strlist_free(list);

    if (n == 0) {
        return TB_CONF_OK;
    }

    list->items = calloc(n, sizeof(char *));
    if (list->items == NULL) {
        return tb_conf_nomem(ctx);
    }

    for (it = node->data.sequence.items.start;
         it < node->data.sequence.items.top;
         it++)
    {
        (void) snprintf(sub, sizeof(sub), "%s[%zu]", path, list->n);

        item = tb_conf_node(ctx, *it);
        if (item == NULL) {
            return tb_conf_error(ctx, tb_conf_line(node), "%s: malformed "
                                 "list", path);
        }

        if (tb_conf_string(ctx, item, sub, 0, &s) != TB_CONF_OK) {
            return TB_CONF_ERROR;
        }

        list->items[list->n++] = s;
    }

    return TB_CONF_OK;
}


int
tb_conf_set_map(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base,
    tb_conf_kv_check_pt check)
{
    int              rc;
    char            *key, *value, sub[TB_CONF_PATHLEN];
    size_t           i, n;
    tb_kv_t         *items;
    tb_kvlist_t     *list;
    tb_conf_pair_t  *pairs;

    items = NULL;

    rc = tb_conf_mapping(ctx, node, path, "a mapping of names to strings",
                         &pairs, &n, (void **) &items, sizeof(tb_kv_t));
    if (rc != TB_CONF_OK) {
        return (rc == TB_CONF_NONE) ? TB_CONF_OK : rc;
    }

    list = (tb_kvlist_t *) (void *) ((char *) base + f->offset);

    tb_conf_kvlist_free(list);
    list->items = items;

    rc = TB_CONF_OK;

    for (i = 0; i < n; i++) {
        tb_conf_join(sub, path, pairs[i].name);

        if (tb_conf_string(ctx, pairs[i].value, sub, 0, &value)
            != TB_CONF_OK)
        {
            rc = TB_CONF_ERROR;
            goto done;
        }

        key = strdup(pairs[i].name);
        if (key == NULL) {
            free(value);
            rc = tb_conf_nomem(ctx);
            goto done;
        }

        list->items[list->n].key = key;
        list->items[list->n].value = value;
        list->n++;

        if (check != NULL
            && check(ctx, list, path, tb_conf_line(pairs[i].key))
               != TB_CONF_OK)
        {
            rc = TB_CONF_ERROR;
            goto done;
        }
    }

done:

    free(pairs);

    return rc;
}


int
tb_conf_set(tb_conf_ctx_t *ctx, const tb_conf_field_t *f, yaml_node_t *node,
    const char *path, void *base)
{
    switch (f->type) {

    case TB_CONF_STR:
    case TB_CONF_CHOICE:
        return tb_conf_set_str(ctx, f, node, path, base);

    case TB_CONF_INT:
    case TB_CONF_NUM:
    case TB_CONF_BOOL:
        return tb_conf_set_typed(ctx, f, node, path, base);

    case TB_CONF_ENUM:
        return tb_conf_set_enum(ctx, f, node, path, base);

    case TB_CONF_STRLIST:
        return tb_conf_set_list(ctx, f, node, path, base);

    case TB_CONF_STRMAP:
        return tb_conf_set_map(ctx, f, node, path, base, NULL);

    case TB_CONF_SECTION:
        return tb_conf_section(ctx, node, path, f->fields,
                               (char *) base + f->offset);

    default:
        return tb_conf_error(ctx, tb_conf_line(node), "%s: no parser for "
                             "this key", path);
    }
}


static int
tb_conf_unknown(tb_conf_ctx_t *ctx, yaml_node_t *key, const char *path,
    const tb_conf_field_t *fields)
{
    int                     rc;
    char                    known[512], show[TB_CONF_SHOWLEN];
    size_t                  n;
    const tb_conf_field_t  *f;

    n = 0;
    known[0] = '\0';

    for (f = fields; f->name != NULL && n < sizeof(known); f++) {
        rc = snprintf(known + n, sizeof(known) - n, "%s%s", n ? ", " : "",
                      f->name);
        if (rc < 0) {
            break;
        }

        n += (size_t) rc;
    }

    tb_conf_show((const char *) key->data.scalar.value, show);

    if (path[0] == '\0') {
        return tb_conf_error(ctx, tb_conf_line(key), "unknown top-level "
                             "section \"%s\" (known: %s)", show, known);
    }

    return tb_conf_error(ctx, tb_conf_line(key), "%s: unknown key \"%s\" "
                         "(known: %s)", path, show, known);
}


/* s, allocated, added to the end of a list; released if it cannot be */
static int
tb_conf_push(tb_conf_ctx_t *ctx, tb_strlist_t *list, char *s)
{
    char  **items;

    items = realloc(list->items, (list->n + 1) * sizeof(char *));
    if (items == NULL) {
        free(s);
        return tb_conf_nomem(ctx);
    }

    list->items = items;
    list->items[list->n++] = s;

    return TB_CONF_OK;
}


int
tb_conf_notice(tb_conf_ctx_t *ctx, unsigned line, const char *fmt, ...)
{
    int       n;
    char     *s, msg[TB_CONFIG_ERRLEN];
    va_list   args;

    va_start(args, fmt);
    (void) vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);

    n = snprintf(NULL, 0, "%s:%u: %s", ctx->name, line, msg);
    if (n < 0) {
        return tb_conf_nomem(ctx);
    }

    s = malloc((size_t) n + 1);
    if (s == NULL) {
        return tb_conf_nomem(ctx);
    }

    (void) snprintf(s, (size_t) n + 1, "%s:%u: %s", ctx->name, line, msg);

    return tb_conf_push(ctx, &ctx->cf->warnings, s);
}


/* a setting the file wrote, remembered for GET /admin/settings */
static int
tb_conf_written(tb_conf_ctx_t *ctx, const char *path)
{
    char  *s;

    s = strdup(path);
    if (s == NULL) {
        return tb_conf_nomem(ctx);
    }

    return tb_conf_push(ctx, &ctx->cf->written, s);
}


static int
tb_conf_warn(tb_conf_ctx_t *ctx, unsigned line, const char *path,
    const char *why)
{
    return tb_conf_notice(ctx, line, "%s is ignored: %s", path, why);
}


/*
 * A mapping checked against a table: unknown keys are errors (a typo
 * must not silently leave a default in place), and "key:" with nothing,
 * like a section given as null, keeps every default.
 */
int
tb_conf_section(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const tb_conf_field_t *fields, void *base)
{
    int                     rc;
    char                    sub[TB_CONF_PATHLEN];
    size_t                  i, n;
    tb_conf_pair_t         *pairs;
    const tb_conf_field_t  *f;

    rc = tb_conf_mapping(ctx, node, path, "a mapping", &pairs, &n, NULL, 0);
    if (rc != TB_CONF_OK) {
        return (rc == TB_CONF_NONE) ? TB_CONF_OK : rc;
    }

    rc = TB_CONF_OK;

    for (i = 0; i < n; i++) {

        for (f = fields; f->name != NULL; f++) {
            if (strcmp(f->name, pairs[i].name) == 0) {
                break;
            }
        }

        if (f->name == NULL) {
            rc = tb_conf_unknown(ctx, pairs[i].key, path, fields);
            break;
        }

        tb_conf_join(sub, path, f->name);

        if (f->handler != NULL) {
            rc = f->handler(ctx, f, pairs[i].value, sub, base);

        } else {
            rc = tb_conf_set(ctx, f, pairs[i].value, sub, base);
        }

        if (rc != TB_CONF_OK) {
            break;
        }

        if (f->type != TB_CONF_SECTION && strchr(sub, '[') == NULL) {
            rc = tb_conf_written(ctx, sub);
            if (rc != TB_CONF_OK) {
                break;
            }
        }

        if (f->ignored != NULL) {
            rc = tb_conf_warn(ctx, tb_conf_line(pairs[i].key), sub,
                              f->ignored);
            if (rc != TB_CONF_OK) {
                break;
            }
        }
    }

    free(pairs);

    return rc;
}


/* defaults and release, both driven by the tables */

int
tb_conf_init(const tb_conf_field_t *fields, void *base)
{
    char                   *p, **sp;
    tb_strlist_t           *list;
    const tb_conf_field_t  *f;

    for (f = fields; f->name != NULL; f++) {
        p = (char *) base + f->offset;

        switch (f->type) {

        case TB_CONF_STR:
        case TB_CONF_CHOICE:
            if (f->dstr != NULL) {
                sp = (char **) (void *) p;
                *sp = strdup(f->dstr);
                if (*sp == NULL) {
                    return TB_CONF_ERROR;
                }
            }
            break;

        case TB_CONF_INT:
            *(int64_t *) (void *) p = (int64_t) f->dnum;
            break;

        case TB_CONF_NUM:
            *(double *) (void *) p = f->dnum;
            break;

        case TB_CONF_BOOL:
            /* (a setter may take a third value: "not said") */
            f->set_bit(base, (unsigned) f->dnum);
            break;

        case TB_CONF_ENUM:
            tb_conf_put_enum(f, base, (int) f->dnum);
            break;

        case TB_CONF_STRLIST:
            if (f->dstr != NULL) {
                list = (tb_strlist_t *) (void *) p;

                list->items = malloc(sizeof(char *));
                if (list->items == NULL) {
                    return TB_CONF_ERROR;
                }

                list->items[0] = strdup(f->dstr);
                if (list->items[0] == NULL) {
                    return TB_CONF_ERROR;
                }

                list->n = 1;
            }
            break;

        case TB_CONF_SECTION:
            if (tb_conf_init(f->fields, p) != TB_CONF_OK) {
                return TB_CONF_ERROR;
            }
            break;

        default:
            break;
        }
    }

    return TB_CONF_OK;
}


void
tb_conf_release(const tb_conf_field_t *fields, void *base)
{
    char                   *p, **sp;
    const tb_conf_field_t  *f;

    for (f = fields; f->name != NULL; f++) {
        p = (char *) base + f->offset;

        switch (f->type) {

        case TB_CONF_STR:
        case TB_CONF_CHOICE:
            sp = (char **) (void *) p;
            free(*sp);
            *sp = NULL;
            break;

        case TB_CONF_STRLIST:
            tb_conf_strlist_free((tb_strlist_t *) (void *) p);
            break;

        case TB_CONF_STRMAP:
            tb_conf_kvlist_free((tb_kvlist_t *) (void *) p);
            break;

        case TB_CONF_SECTION:
            tb_conf_release(f->fields, p);
            break;

        default:
            break;
        }
    }
}


int
tb_conf_each(const tb_conf_field_t *fields, const void *base,
    const char *prefix, tb_config_each_pt cb, void *data)
{
    int                     rc;
    char                    path[TB_CONF_PATHLEN];
    const char             *p;
    const tb_conf_field_t  *f;

    for (f = fields; f->name != NULL; f++) {
        rc = snprintf(path, sizeof(path), "%s%s%s", prefix, f->name,
                      f->type == TB_CONF_SECTION ? "." : "");
        if (rc < 0 || (size_t) rc >= sizeof(path)) {
            continue;
        }

        p = (const char *) base + f->offset;

        switch (f->type) {

        case TB_CONF_SECTION:
            rc = tb_conf_each(f->fields, p, path, cb, data);
            break;

        case TB_CONF_INT:
            rc = cb(data, path, TB_SETTING_INT, p);
            break;

        case TB_CONF_NUM:
            rc = cb(data, path, TB_SETTING_NUM, p);
            break;

        case TB_CONF_STR:
        case TB_CONF_CHOICE:
            rc = cb(data, path, TB_SETTING_STR,
                    *(char *const *) (const void *) p);
            break;

        default:
            /* a flag has no address; lists, maps and items are not one
             * value */
            rc = 0;
            break;
        }

        if (rc != 0) {
            return rc;
        }
    }

    return 0;
}


int
tb_conf_sections(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, const char *mapping, const tb_conf_field_t *fields,
    size_t size, size_t line_off, void **items, size_t *nitems,
    tb_conf_finish_pt finish)
{
    int           rc;
    char          sub[TB_CONF_PATHLEN];
    size_t        i, n;
    unsigned      line;
    yaml_node_t  *item;
    char         *base;

    rc = tb_conf_collection(ctx, node, path, YAML_SEQUENCE_NODE, what);
    if (rc != TB_CONF_OK) {
        return (rc == TB_CONF_NONE) ? TB_CONF_OK : rc;
    }

    n = tb_conf_items(node);

    if (n == 0) {
        return TB_CONF_OK;
    }

    *items = calloc(n, size);
    if (*items == NULL) {
        return tb_conf_nomem(ctx);
    }

    for (i = 0; i < n; i++) {
        base = (char *) *items + i * size;

        /* counted first: tb_config_free() releases a half-built entry */
        *nitems = i + 1;

        if (tb_conf_init(fields, base) != TB_CONF_OK) {
            return tb_conf_nomem(ctx);
        }

        (void) snprintf(sub, sizeof(sub), "%s[%zu]", path, i);

        item = tb_conf_node(ctx, node->data.sequence.items.start[i]);
        if (item == NULL) {
            return tb_conf_error(ctx, tb_conf_line(node), "%s: malformed "
                                 "list", path);
        }

        line = tb_conf_line(item);
        memcpy(base + line_off, &line, sizeof(unsigned));

        if (item->type != YAML_MAPPING_NODE) {
            return tb_conf_expected(ctx, item, sub, mapping);
        }

        if (tb_conf_section(ctx, item, sub, fields, base) != TB_CONF_OK) {
            return TB_CONF_ERROR;
        }

        if (finish(ctx, base, sub) != TB_CONF_OK) {
            return TB_CONF_ERROR;
        }
    }

    return TB_CONF_OK;
}
