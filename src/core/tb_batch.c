/*
 * The Message Batches API's documents (see tb_batch.h), on the JSON
 * walker the Messages body scanner uses (tb_json_int.h).
 */


#include <stdio.h>
#include <string.h>

#include "tb_batch.h"
#include "tb_chars.h"
#include "tb_json_int.h"
#include "tb_parse.h"


/* a member of an object the walk was asked for: which, and where */
typedef struct {
    const char               *const  *names;    /* NULL-terminated */
    unsigned                  seen;             /* a bit a name */
    int                       field;            /* the one taken, -1 */
    const char               *dup;              /* given twice, the first */
    tb_span_t                 spans[8];
} tb_batch_members_t;


static int
tb_batch_key(tb_json_walk_t *w, const unsigned char *k, size_t len,
    unsigned esc)
{
    size_t               n;
    unsigned             i;
    tb_batch_members_t  *m;

    m = w->data;
    m->field = -1;

    for (i = 0; m->names[i]; i++) {
        n = strlen(m->names[i]);

        if (esc ? !tb_json_key_eq(k, k + len, m->names[i], n)
                : len != n || memcmp(k, m->names[i], n) != 0)
        {
            continue;
        }

        /* parsers disagree on which of two counts: refused, not guessed */

        if (m->seen & (1u << i)) {
            if (m->dup == NULL) {
                m->dup = m->names[i];
            }

            return 0;
        }

        m->seen |= 1u << i;
        m->field = (int) i;
        return 1;
    }

    return 0;
}


static void
tb_batch_value(tb_json_walk_t *w, const unsigned char *v, size_t len)
{
    tb_batch_members_t  *m;

    m = w->data;

    if (m->field >= 0) {
        m->spans[m->field].off = (size_t) (v - w->start);
        m->spans[m->field].len = len;
    }
}


/*
 * The members named of one JSON object at p: 0, or -1 when it is not one
 * valid object (err_off where).  A member given twice is m->dup.
 */
static int
tb_batch_members(const unsigned char *p, size_t len,
    tb_batch_members_t *m, tb_json_walk_t *w)
{
    m->seen = 0;
    m->field = -1;
    m->dup = NULL;
    memset(m->spans, 0, sizeof(m->spans));

    tb_json_walk_init(w, p, len, tb_batch_key, tb_batch_value, m);

    if (tb_json_walk(w) != 0) {
        return -1;
    }

    if (*tb_json_ws(w->start, w->end) != '{') {
        w->err = "expected an object";
        w->err_off = 0;
        return -1;
    }

    return 0;
}


int
tb_batch_id_ok(const char *id, size_t len)
{
    return tb_chars_ok(id, len, TB_BATCH_ID_MAX, "_-");
}


/* one request of the list: {"custom_id": "...", "params": {...}} */
static int
tb_batch_request(const unsigned char *p, size_t len, size_t i,
    tb_batch_each_pt each, void *data, char *err, size_t errlen)
{
    size_t                n, k;
    tb_json_walk_t        w;
    tb_batch_members_t    m;
    const unsigned char  *v;
    char                  cid[TB_BATCH_CUSTOM_ID_MAX + 2];

    static const char *const  names[] = { "custom_id", "params", NULL };
    static const char         open[] = { '"', '{' };

    m.names = names;

    if (tb_batch_members(p, len, &m, &w) != 0) {
        snprintf(err, errlen, "requests.%zu: expected an object", i);
        return -1;
    }

    if (m.dup) {
        snprintf(err, errlen, "requests.%zu.%s: given more than once", i,
                 m.dup);
        return -1;
    }

    /* each member there, of its type: a string, an object */

    for (k = 0; k < 2; k++) {
        if (m.spans[k].len == 0) {
            snprintf(err, errlen, "requests.%zu.%s: Field required", i,
                     names[k]);
            return -1;
        }

        if (p[m.spans[k].off] != open[k]) {
            snprintf(err, errlen, "requests.%zu.%s: expected %s", i,
                     names[k], open[k] == '"' ? "a string" : "an object");
            return -1;
        }
    }

    v = p + m.spans[0].off;
    n = tb_json_unescape(v + 1, v + m.spans[0].len - 1, cid, sizeof(cid));

    if (n > TB_BATCH_CUSTOM_ID_MAX || !tb_batch_id_ok(cid, n)) {
        snprintf(err, errlen, "requests.%zu.custom_id: 1 to 64 of letters, "
                 "digits, '_' and '-'", i);
        return -1;
    }

    v = p + m.spans[1].off;

    return each(data, i, cid, v, m.spans[1].len, err, errlen);
}


int
tb_batch_scan(const unsigned char *p, size_t len, size_t max,
    tb_batch_each_pt each, void *data, size_t *n, char *err, size_t errlen)
{
    size_t                i;
    tb_json_walk_t        w;
    tb_batch_members_t    m;
    const unsigned char  *q, *end, *next;

    static const char *const  names[] = { "requests", NULL };

    if (errlen > 0) {
        err[0] = '\0';
    }

    *n = 0;

    if (p == NULL) {
        p = (const unsigned char *) "";
        len = 0;
    }

    m.names = names;

    if (tb_batch_members(p, len, &m, &w) != 0) {
        if (w.err_off == 0 && strcmp(w.err, "expected an object") == 0) {
            snprintf(err, errlen, "request body must be a JSON object");

        } else {
            snprintf(err, errlen, "request body is not valid JSON: %s at "
                     "byte %zu", w.err, w.err_off);
        }

        return -1;
    }

    if (m.dup) {
        snprintf(err, errlen, "requests: given more than once in the "
                 "request body");
        return -1;
    }

    if (m.spans[0].len == 0) {
        snprintf(err, errlen, "requests: Field required");
        return -1;
    }

    q = p + m.spans[0].off;
    end = q + m.spans[0].len;

    if (*q != '[') {
        snprintf(err, errlen, "requests: expected a list");
        return -1;
    }

    /* the list is valid JSON: its elements are walked without checks */

    q = tb_json_ws(q + 1, end);

    for (i = 0; *q != ']'; i++) {

        if (i == max) {
            snprintf(err, errlen, "requests: at most %zu requests in a "
                     "batch", max);
            return -1;
        }

        next = tb_json_skip(q, end);

        if (tb_batch_request(q, (size_t) (next - q), i, each, data, err,
                             errlen)
            != 0)
        {
            return -1;
        }

        q = tb_json_ws(next, end);

        if (*q == ',') {
            q = tb_json_ws(q + 1, end);
        }
    }

    if (i == 0) {
        snprintf(err, errlen, "requests: at least one request");
        return -1;
    }

    *n = i;

    return 0;
}


/* an object's id, the JSON string at span, into id (TB_BATCH_ID_MAX + 1
 * bytes): 0, or -1 (id empty) when it is not one the API gives */

static int
tb_batch_id_of(const unsigned char *p, const tb_span_t *span, char *id,
    size_t *len)
{
    const unsigned char  *s;

    s = p + span->off;
    id[0] = '\0';
    *len = 0;

    if (span->len < 2 || *s != '"') {
        return -1;
    }

    *len = tb_json_unescape(s + 1, s + span->len - 1, id,
                            TB_BATCH_ID_MAX + 1);

    if (*len > TB_BATCH_ID_MAX || !tb_batch_id_ok(id, *len)) {
        id[0] = '\0';
        *len = 0;
        return -1;
    }

    return 0;
}


static const char *const  tb_batch_states[] = {
    "in_progress", "in_progress", "canceling", "ended"
};

static const char *const  tb_batch_counts[TB_BATCH_NCOUNTS] = {
    "processing", "succeeded", "errored", "canceled", "expired"
};


const char *
tb_batch_status_name(int status)
{
    return tb_batch_states[(status > 0 && status <= TB_BATCH_ENDED)
                           ? status : 0];
}


const char *
tb_batch_count_name(size_t i)
{
    return i < TB_BATCH_NCOUNTS ? tb_batch_counts[i] : "";
}


/* tb_batch_object() */

int
tb_batch_object(const unsigned char *p, size_t len, tb_batch_obj_t *o)
{
    size_t                i;
    int64_t               v;
    tb_json_walk_t        w;
    tb_batch_members_t    m;
    const unsigned char  *s;
    char                  buf[32];

    static const char *const  names[] = {
        "id", "type", "processing_status", "request_counts", "results_url",
        NULL
    };

    memset(o, 0, sizeof(tb_batch_obj_t));

    for (i = 0; i < TB_BATCH_NCOUNTS; i++) {
        o->counts[i] = -1;
    }

    m.names = names;

    if (p == NULL || tb_batch_members(p, len, &m, &w) != 0 || m.dup
        || m.spans[0].len == 0 || m.spans[1].len == 0)
    {
        return -1;
    }

    s = p + m.spans[1].off;

    if (m.spans[1].len != sizeof("\"message_batch\"") - 1
        || memcmp(s, "\"message_batch\"", m.spans[1].len) != 0)
    {
        return -1;
    }

    if (tb_batch_id_of(p, &m.spans[0], o->id, &o->id_len) != 0) {
        return -1;
    }

    s = p + m.spans[2].off;

    if (m.spans[2].len && *s == '"') {
        (void) tb_json_unescape(s + 1, s + m.spans[2].len - 1, buf,
                                sizeof(buf));

        for (i = TB_BATCH_IN_PROGRESS; i <= TB_BATCH_ENDED; i++) {
            if (strcmp(buf, tb_batch_states[i]) == 0) {
                o->status = (tb_batch_status_e) i;
            }
        }
    }

    if (m.spans[3].len) {
        for (i = 0; i < TB_BATCH_NCOUNTS; i++) {
            if (tb_json_get_int(p + m.spans[3].off, m.spans[3].len,
                                tb_batch_counts[i], &v)
                == 0 && v >= 0)
            {
                o->counts[i] = v;
            }
        }
    }

    if (m.spans[4].len && p[m.spans[4].off] == '"') {
        o->results_url = m.spans[4];
    }

    return 0;
}


/* tb_batch_result() */

int
tb_batch_result(const unsigned char *p, size_t len, tb_batch_result_t *r)
{
    size_t                n;
    char                  type[16];
    const unsigned char  *v, *vend;

    static const char *const  types[] = {
        NULL, "succeeded", "errored", "canceled", "expired"
    };

    memset(r, 0, sizeof(tb_batch_result_t));
    tb_usage_init(&r->usage);

    if (p == NULL || tb_json_validate(p, len) != 0
        || *tb_json_ws(p, p + len) != '{'
        || tb_json_get_str(p, len, "result.type", type, sizeof(type), &n)
           != 0
        || n >= sizeof(type))
    {
        return -1;
    }

    for (n = 1; n < sizeof(types) / sizeof(types[0]); n++) {
        if (strcmp(type, types[n]) == 0) {
            r->type = (tb_result_type_e) n;
        }
    }

    if (r->type == TB_RESULT_UNKNOWN) {
        return -1;
    }

    if (r->type != TB_RESULT_SUCCEEDED) {
        return 0;
    }

    if (tb_json_get_str(p, len, "result.message.model", r->model,
                        sizeof(r->model), &n)
        != 0
        || n > TB_MODEL_MAX
        || tb_usage_merge(&r->usage, p, len, "result.message.usage") != 0
        || r->usage.input_tokens < 0 || r->usage.output_tokens < 0
        || tb_json_find(p, len, "result.message", &v, &vend) != 0
        || *v != '{')
    {
        r->model[0] = '\0';
        tb_usage_init(&r->usage);
        r->type = TB_RESULT_UNKNOWN;
        return -1;
    }

    r->message.off = (size_t) (v - p);
    r->message.len = (size_t) (vend - v);

    return 0;
}


/* tb_file_object() */

/* src unescaped into dst (size bytes), cut whole: never in a UTF-8
 * sequence's middle */
static void
tb_file_str(const unsigned char *s, size_t len, char *dst, size_t size)
{
    size_t         n;
    size_t         j, seq;
    unsigned char  c;

    n = tb_json_unescape(s + 1, s + len - 1, dst, size);

    if (n < size) {
        return;
    }

    /* cut: the last character kept, whole or not at all */

    n = size - 1;
    j = n;

    while (j && ((unsigned char) dst[j - 1] & 0xc0) == 0x80) {
        j--;
    }

    if (j == 0) {
        dst[0] = '\0';
        return;
    }

    c = (unsigned char) dst[j - 1];
    seq = (c < 0x80) ? 1 : (c >= 0xf0) ? 4 : (c >= 0xe0) ? 3 : 2;

    if (c >= 0xc0 && (j - 1) + seq > n) {
        n = j - 1;
    }

    dst[n] = '\0';
}


int
tb_file_object(const unsigned char *p, size_t len, tb_file_obj_t *f)
{
    int64_t               v;
    tb_json_walk_t        w;
    tb_batch_members_t    m;
    const unsigned char  *s;

    static const char *const  names[] = {
        "id", "type", "filename", "mime_type", "size_bytes", "downloadable",
        NULL
    };

    memset(f, 0, sizeof(tb_file_obj_t));
    f->size = -1;

    m.names = names;

    if (p == NULL || tb_batch_members(p, len, &m, &w) != 0 || m.dup
        || m.spans[0].len < 2 || m.spans[1].len == 0)
    {
        return -1;
    }

    s = p + m.spans[1].off;

    if (!((m.spans[1].len == sizeof("\"file\"") - 1
           && memcmp(s, "\"file\"", m.spans[1].len) == 0)
          || (m.spans[1].len == sizeof("\"file_deleted\"") - 1
              && memcmp(s, "\"file_deleted\"", m.spans[1].len) == 0)))
    {
        return -1;
    }

    if (tb_batch_id_of(p, &m.spans[0], f->id, &f->id_len) != 0) {
        return -1;
    }

    if (m.spans[2].len >= 2 && p[m.spans[2].off] == '"') {
        tb_file_str(p + m.spans[2].off, m.spans[2].len, f->filename,
                    sizeof(f->filename));
    }

    if (m.spans[3].len >= 2 && p[m.spans[3].off] == '"') {
        tb_file_str(p + m.spans[3].off, m.spans[3].len, f->mime,
                    sizeof(f->mime));
    }

    if (m.spans[4].len
        && tb_json_parse_int(p + m.spans[4].off,
                             p + m.spans[4].off + m.spans[4].len, &v) == 0
        && v >= 0)
    {
        f->size = v;
    }

    f->downloadable = (m.spans[5].len == 4
                       && memcmp(p + m.spans[5].off, "true", 4) == 0);

    return 0;
}


/* tb_file_refs() */

typedef struct {
    tb_file_ref_t            *refs;
    size_t                    max;
    size_t                    n;
} tb_file_refs_t;


static int
tb_file_refs_key(tb_json_walk_t *w, const unsigned char *k, size_t len,
    unsigned esc)
{
    return esc ? tb_json_key_eq(k, k + len, "file_id", 7)
               : (len == 7 && memcmp(k, "file_id", 7) == 0);
}


static void
tb_file_refs_value(tb_json_walk_t *w, const unsigned char *v, size_t len)
{
    size_t           n;
    tb_file_ref_t   *ref;
    tb_file_refs_t  *fr;
    char             id[TB_BATCH_ID_MAX + 2];

    fr = w->data;

    if (*v != '"') {
        return;
    }

    n = tb_json_unescape(v + 1, v + len - 1, id, sizeof(id));

    if (n < 5 || memcmp(id, "file_", 5) != 0) {
        return;
    }

    if (fr->n++ >= fr->max) {
        return;
    }

    ref = &fr->refs[fr->n - 1];

    if (n > TB_BATCH_ID_MAX || !tb_batch_id_ok(id, n)) {
        ref->id[0] = '\0';
        ref->id_len = 0;
        return;
    }

    memcpy(ref->id, id, n + 1);
    ref->id_len = n;
}


int
tb_file_refs(const unsigned char *p, size_t len, tb_file_ref_t *refs,
    size_t max, size_t *n)
{
    tb_json_walk_t  w;
    tb_file_refs_t  fr;

    fr.refs = refs;
    fr.max = max;
    fr.n = 0;
    *n = 0;

    if (p == NULL) {
        return -1;
    }

    tb_json_walk_init(&w, p, len, tb_file_refs_key, tb_file_refs_value, &fr);
    w.deep = 1;

    if (tb_json_walk(&w) != 0) {
        return -1;
    }

    *n = fr.n;

    return 0;
}


/* what an object record may hold (the same rules both ways) */
static int
tb_object_rec_ok(const tb_object_rec_t *o)
{
    size_t  i;

    if ((o->kind != TB_OBJECT_BATCH && o->kind != TB_OBJECT_FILE)
        || o->status < TB_BATCH_UNKNOWN || o->status > TB_BATCH_ENDED
        || (o->over != 0 && o->over != 1)
        || (o->settled != 0 && o->settled != 1)
        || o->created_ms < 0 || o->seen_ms < 0
        || o->reserved < 0 || o->charged < 0
        || o->account[0] == '\0'
        || (o->kind == TB_OBJECT_FILE
            && (o->size < -1
                || (o->downloadable != 0 && o->downloadable != 1))))
    {
        return 0;
    }

    for (i = 0; i < TB_BATCH_NCOUNTS; i++) {
        if (o->counts[i] < -1) {
            return 0;
        }
    }

    return 1;
}


size_t
tb_object_rec_encode(const tb_object_rec_t *o, char *out, size_t size)
{
    int  n, m;

    if (!tb_object_rec_ok(o)
        || strlen(o->account) > TB_ID_MAX || strlen(o->key) > TB_ID_MAX
        || strlen(o->filename) > TB_FILE_NAME_MAX
        || strlen(o->mime) > TB_FILE_MIME_MAX)
    {
        return 0;
    }

    n = snprintf(out, size,
                 "o1 %d %d %d %d %lld %lld %lld %lld %lld %lld %lld %lld "
                 "%lld %zu:%s %zu:%s",
                 o->kind, o->status, o->over, o->settled,
                 (long long) o->created_ms, (long long) o->seen_ms,
                 (long long) o->reserved, (long long) o->charged,
                 (long long) o->counts[0], (long long) o->counts[1],
                 (long long) o->counts[2], (long long) o->counts[3],
                 (long long) o->counts[4], strlen(o->account), o->account,
                 strlen(o->key), o->key);

    if (n <= 0 || (size_t) n >= size) {
        return 0;
    }

    if (o->kind == TB_OBJECT_FILE) {
        m = snprintf(out + n, size - n, " %lld %d %zu:%s %zu:%s",
                     (long long) o->size, o->downloadable,
                     strlen(o->filename), o->filename, strlen(o->mime),
                     o->mime);

        if (m <= 0 || (size_t) m >= size - n) {
            return 0;
        }

        n += m;
    }

    return (size_t) n;
}


/* one number and the space after it: 0 or -1 (its form is checked by
 * writing the whole again) */
static int
tb_object_rec_num(const char **pp, const char *end, int64_t *v)
{
    const char  *sp;

    sp = tb_find_end(*pp, end, ' ');

    if (sp == *pp || sp == end
        || tb_parse_int64((const unsigned char *) *pp, (size_t) (sp - *pp), v)
           != 0)
    {
        return -1;
    }

    *pp = sp + 1;

    return 0;
}


/* "<len>:<text>" into buf (max + 1 bytes): 0 or -1 */
static int
tb_object_rec_str(const char **pp, const char *end, char *buf, size_t max)
{
    size_t       n;
    const char  *p, *colon;

    p = *pp;
    colon = tb_find_end(p, end, ':');

    if (colon == end || colon == p || colon - p > 3) {
        return -1;
    }

    for (n = 0; p < colon; p++) {
        if (*p < '0' || *p > '9') {
            return -1;
        }

        n = n * 10 + (size_t) (*p - '0');
    }

    p = colon + 1;

    if (n > max || (size_t) (end - p) < n || memchr(p, '\0', n)) {
        return -1;
    }

    memcpy(buf, p, n);
    buf[n] = '\0';
    *pp = p + n;

    return 0;
}


int
tb_object_rec_decode(const char *p, size_t len, tb_object_rec_t *o)
{
    size_t       i;
    int64_t      v[4 + 4 + TB_BATCH_NCOUNTS];
    const char  *end;
    char         again[TB_OBJECT_REC_MAX + 1];

    end = p + len;

    if (len < 3 || memcmp(p, "o1 ", 3) != 0) {
        return -1;
    }

    p += 3;

    for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        if (tb_object_rec_num(&p, end, &v[i]) != 0) {
            return -1;
        }
    }

    if (v[0] > 2 || v[0] < 0 || v[1] > 3 || v[1] < 0 || v[2] > 1 || v[2] < 0
        || v[3] > 1 || v[3] < 0)
    {
        return -1;
    }

    o->kind = (int) v[0];
    o->status = (int) v[1];
    o->over = (int) v[2];
    o->settled = (int) v[3];
    o->created_ms = v[4];
    o->seen_ms = v[5];
    o->reserved = v[6];
    o->charged = v[7];

    for (i = 0; i < TB_BATCH_NCOUNTS; i++) {
        o->counts[i] = v[8 + i];
    }

    o->size = -1;
    o->downloadable = 0;
    o->filename[0] = '\0';
    o->mime[0] = '\0';

    if (tb_object_rec_str(&p, end, o->account, TB_ID_MAX) != 0
        || p == end || *p++ != ' '
        || tb_object_rec_str(&p, end, o->key, TB_ID_MAX) != 0)
    {
        return -1;
    }

    if (o->kind == TB_OBJECT_FILE) {
        if (p == end || *p++ != ' '
            || tb_object_rec_num(&p, end, &v[0]) != 0
            || tb_object_rec_num(&p, end, &v[1]) != 0
            || v[1] < 0 || v[1] > 1
            || tb_object_rec_str(&p, end, o->filename, TB_FILE_NAME_MAX) != 0
            || p == end || *p++ != ' '
            || tb_object_rec_str(&p, end, o->mime, TB_FILE_MIME_MAX) != 0)
        {
            return -1;
        }

        o->size = v[0];
        o->downloadable = (int) v[1];
    }

    if (p != end) {
        return -1;
    }

    /* one text for one object: what this gateway would have written, byte
     * for byte (no sign, zero, space or width it would not write) */

    return (tb_object_rec_encode(o, again, sizeof(again)) == len
            && memcmp(again, end - len, len) == 0)
           ? 0 : -1;
}
