/*
 * The Server-Sent Events parser for Messages API streams (see tb_sse.h):
 * incremental over any split of the bytes, it finds the commit point (the
 * first content_block_delta), error events and the usage counters.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE                     /* memrchr() */
#endif

#include <string.h>
#include <stdio.h>

#include "tb_json_int.h"
#include "tb_sse.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif


#define TB_JSON_ONES          0x0101010101010101ULL
#define TB_JSON_HIGH          0x8080808080808080ULL


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
static int tb_sse_event_is(tb_sse_t *s, const char *name, size_t n);
#define tb_sse_event(s, lit)  tb_sse_event_is(s, lit, sizeof(lit) - 1)
static void tb_sse_copy_str(tb_sse_t *s, const char *path, char *buf,
    size_t size);


/* the whitespace of RFC 8259 */


/*
 * A stream's message_start and message_delta carry no free text: the
 * first "usage" key in them is the usage object, wherever it sits.
 */

static int
tb_usage_merge_event(tb_usage_t *u, const unsigned char *p, size_t len,
    const char *path)
{
    const unsigned char  *q, *lim, *end, *v;

    end = p + len;
    q = NULL;

    /* it is the last member: looked for from the end, quote by quote */

    if (len >= 7) {
        for (lim = end - 6; lim > p; lim = q, q = NULL) {
            q = memrchr(p, '"', (size_t) (lim - p));

            if (q == NULL || memcmp(q, "\"usage\"", 7) == 0) {
                break;
            }
        }
    }

    if (q != NULL) {
        v = tb_json_ws(q + 7, end);

        if (v < end && *v == ':') {
            v = tb_json_ws(v + 1, end);

            /* the object read where it is, its end where it ends */
            if (tb_usage_members(u, v, end) != NULL) {
                return 0;
            }
        }
    }

    return tb_usage_merge(u, p, len, path);
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
        int  mask;

        /* below a signed 0x80 is nothing */
        mask = tb_simd_mask16(p, '\n', '\r', (char) 0x80);

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
    size_t                prefix;
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

            /* the two lines every event is made of, whole in the buffer */

            prefix = (c == 'e' && end - p >= 7
                      && memcmp(p, "event: ", 7) == 0) ? 7
                     : (c == 'd' && end - p >= 6
                        && memcmp(p, "data: ", 6) == 0) ? 6 : 0;

            if (prefix) {
                p += prefix;
                s->field = (prefix == 7) ? TB_SSE_FIELD_EVENT
                                         : TB_SSE_FIELD_DATA;
                tb_sse_value_begin(s);
                s->state = TB_SSE_ST_VALUE;
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
           || tb_sse_event(s, "message_start")
           || tb_sse_event(s, "message_delta")
           || tb_sse_event(s, "error");
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
        && tb_sse_event(s, "content_block_delta"))
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
tb_sse_event_is(tb_sse_t *s, const char *name, size_t n)
{
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

        tb_json_walk_init(&w, s->data, s->data_len,
                          tb_json_peek_key, tb_json_peek_value, &pk);

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
                                 memcmp(name, "message_start", 13) == 0
                                 ? "message.usage" : "usage");

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
