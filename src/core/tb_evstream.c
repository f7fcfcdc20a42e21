/*
 * AWS event-stream decoding, and Bedrock's frames as SSE (see
 * tb_evstream.h).
 */

#include <stdlib.h>
#include <string.h>

#include "tb_evstream.h"
#include "tb_provider.h"
#include "tb_json_int.h"


#define TB_EVS_PRELUDE        12
#define TB_EVS_MIN            16      /* prelude + message CRC */
#define TB_EVS_TYPE_MAX       64      /* an event's "type" */


static uint32_t  tb_crc32_table[256];
static int       tb_crc32_ready;


static void
tb_crc32_init(void)
{
    uint32_t  c, i, k;

    for (i = 0; i < 256; i++) {
        c = i;

        for (k = 0; k < 8; k++) {
            c = (c & 1) ? 0xedb88320U ^ (c >> 1) : c >> 1;
        }

        tb_crc32_table[i] = c;
    }

    tb_crc32_ready = 1;
}


uint32_t
tb_crc32(uint32_t crc, const unsigned char *p, size_t n)
{
    size_t  i;

    if (!tb_crc32_ready) {
        /* the same table whoever builds it first: no lock needed */
        tb_crc32_init();
    }

    crc = ~crc;

    for (i = 0; i < n; i++) {
        crc = tb_crc32_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    }

    return ~crc;
}


static uint32_t
tb_be32(const unsigned char *p)
{
    return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16
           | (uint32_t) p[2] << 8 | (uint32_t) p[3];
}


void
tb_evs_init(tb_evs_t *d, size_t max)
{
    memset(d, 0, sizeof(tb_evs_t));
    d->max = (max >= TB_EVS_MIN) ? max : TB_EVS_FRAME_MAX;
}


void
tb_evs_free(tb_evs_t *d)
{
    free(d->buf);
    d->buf = NULL;
    d->len = 0;
    d->cap = 0;
}


int
tb_evs_idle(const tb_evs_t *d)
{
    return d->why == NULL && d->len == 0;
}


/* the headers of a frame: the four the gateway reads, the rest skipped */
static int
tb_evs_headers(const unsigned char *p, const unsigned char *end,
    tb_evs_frame_t *f)
{
    size_t                nlen, vlen;
    unsigned              type;
    const unsigned char  *name, *value;

    static const size_t   fixed[] = { 0, 0, 1, 2, 4, 8, 0, 0, 8, 16 };

    while (p < end) {
        nlen = *p++;

        if (nlen == 0 || (size_t) (end - p) < nlen + 1) {
            return -1;
        }

        name = p;
        p += nlen;
        type = *p++;

        if (type > 9) {
            return -1;
        }

        if (type == 6 || type == 7) {
            if (end - p < 2) {
                return -1;
            }

            vlen = (size_t) p[0] << 8 | p[1];
            p += 2;

        } else {
            vlen = fixed[type];
        }

        if ((size_t) (end - p) < vlen) {
            return -1;
        }

        value = p;
        p += vlen;

        if (type != 7) {
            continue;
        }

        if (nlen == 13 && memcmp(name, ":message-type", 13) == 0) {
            f->message_type = value;
            f->message_type_len = vlen;

        } else if (nlen == 11 && memcmp(name, ":event-type", 11) == 0) {
            f->event_type = value;
            f->event_type_len = vlen;

        } else if (nlen == 15 && memcmp(name, ":exception-type", 15) == 0) {
            f->exception_type = value;
            f->exception_type_len = vlen;

        } else if (nlen == 11 && memcmp(name, ":error-code", 11) == 0) {
            f->error_code = value;
            f->error_code_len = vlen;
        }
    }

    return 0;
}


/*
 * One whole frame at p (its total length checked against its prelude's):
 * its CRCs, its headers, then cb.
 */
static int
tb_evs_frame(tb_evs_t *d, const unsigned char *p, size_t total,
    tb_evs_frame_pt cb, void *data)
{
    size_t          hlen;
    tb_evs_frame_t  f;

    if (tb_crc32(0, p, total - 4) != tb_be32(p + total - 4)) {
        d->why = "a frame's message CRC does not match";
        return -1;
    }

    hlen = tb_be32(p + 4);

    memset(&f, 0, sizeof(tb_evs_frame_t));

    if (tb_evs_headers(p + TB_EVS_PRELUDE, p + TB_EVS_PRELUDE + hlen, &f)
        != 0)
    {
        d->why = "a frame has a malformed header";
        return -1;
    }

    f.payload = p + TB_EVS_PRELUDE + hlen;
    f.payload_len = total - TB_EVS_MIN - hlen;

    d->frames++;

    return cb(data, &f);
}


/* a prelude's lengths and CRC: the frame's total length, or 0 */
static size_t
tb_evs_prelude(tb_evs_t *d, const unsigned char *p)
{
    uint32_t  total, hlen;

    if (tb_crc32(0, p, 8) != tb_be32(p + 8)) {
        d->why = "a frame's prelude CRC does not match";
        return 0;
    }

    total = tb_be32(p);
    hlen = tb_be32(p + 4);

    if (total < TB_EVS_MIN || total > d->max || hlen > total - TB_EVS_MIN) {
        d->why = "a frame's length is not one a frame can have";
        return 0;
    }

    return total;
}


static int
tb_evs_keep(tb_evs_t *d, const unsigned char *p, size_t n, size_t want)
{
    size_t          cap;
    unsigned char  *b;

    if (d->len + n > d->cap) {
        cap = d->cap ? d->cap : 256;

        while (cap < want || cap < d->len + n) {
            cap *= 2;
        }

        b = realloc(d->buf, cap);
        if (b == NULL) {
            d->why = "no memory for a frame";
            return -1;
        }

        d->buf = b;
        d->cap = cap;
    }

    memcpy(d->buf + d->len, p, n);
    d->len += n;

    return 0;
}


/*
 * The frame begun before, from the bytes at *p up to want bytes in all:
 * 1 when it holds them, 0 when the bytes ended first (all of them kept),
 * -1 without memory.
 */
static int
tb_evs_fill(tb_evs_t *d, const unsigned char **p, const unsigned char *end,
    size_t want)
{
    size_t  take;

    take = want - d->len;
    take = take < (size_t) (end - *p) ? take : (size_t) (end - *p);

    if (tb_evs_keep(d, *p, take, want) != 0) {
        return -1;
    }

    *p += take;

    return d->len == want;
}


int
tb_evs_feed(tb_evs_t *d, const unsigned char *p, size_t n,
    tb_evs_frame_pt cb, void *data)
{
    int                   rc;
    size_t                total;
    const unsigned char  *end;

    if (d->why) {
        return -1;
    }

    d->bytes += n;
    end = p + n;

    /* a frame begun before: complete it from the new bytes */

    while (d->len && p < end) {

        if (d->len < TB_EVS_PRELUDE) {
            rc = tb_evs_fill(d, &p, end, TB_EVS_PRELUDE);

            if (rc != 1) {
                return rc;
            }
        }

        total = tb_evs_prelude(d, d->buf);

        if (total == 0) {
            return -1;
        }

        rc = tb_evs_fill(d, &p, end, total);

        if (rc != 1) {
            return rc;
        }

        d->len = 0;

        rc = tb_evs_frame(d, d->buf, total, cb, data);

        if (rc != 0) {
            return rc;
        }
    }

    /* whole frames in place; the last one's beginning kept */

    while (p < end) {

        if (end - p < TB_EVS_PRELUDE) {
            return tb_evs_keep(d, p, (size_t) (end - p), TB_EVS_PRELUDE);
        }

        total = tb_evs_prelude(d, p);

        if (total == 0) {
            return -1;
        }

        if ((size_t) (end - p) < total) {
            return tb_evs_keep(d, p, (size_t) (end - p), total);
        }

        rc = tb_evs_frame(d, p, total, cb, data);

        if (rc != 0) {
            return rc;
        }

        p += total;
    }

    return 0;
}


/* strict base64 (RFC 4648 section 4, padded): bytes written, or -1 */
static int64_t
tb_evs_base64(const unsigned char *s, size_t n, unsigned char *out)
{
    size_t    i, w;
    int       c, k, pad;
    uint32_t  acc;

    if (n % 4) {
        return -1;
    }

    acc = 0;
    w = 0;
    pad = 0;

    for (i = 0; i < n; i++) {
        c = s[i];

        if (c >= 'A' && c <= 'Z') {
            k = c - 'A';

        } else if (c >= 'a' && c <= 'z') {
            k = c - 'a' + 26;

        } else if (c >= '0' && c <= '9') {
            k = c - '0' + 52;

        } else if (c == '+') {
            k = 62;

        } else if (c == '/') {
            k = 63;

        } else if (c == '=' && i >= n - 2 && (i == n - 1 || s[n - 1] == '='))
        {
            k = 0;
            pad++;

        } else {
            return -1;
        }

        if (pad && c != '=') {
            return -1;
        }

        acc = acc << 6 | (uint32_t) k;

        if (i % 4 == 3) {
            out[w++] = (unsigned char) (acc >> 16);
            out[w++] = (unsigned char) (acc >> 8);
            out[w++] = (unsigned char) acc;
            acc = 0;
        }
    }

    return (int64_t) (w - (size_t) pad);
}


static size_t
tb_evs_error_sse(const tb_perror_t *e, unsigned char *out, size_t size)
{
    size_t  n, m;

    static const char  head[] = "event: error\ndata: ";

    n = sizeof(head) - 1;

    if (size < n + 3) {
        return 0;
    }

    memcpy(out, head, n);

    m = tb_provider_error_body(e, (char *) out + n, size - n - 2);

    if (n + m + 2 >= size) {
        return 0;
    }

    out[n + m] = '\n';
    out[n + m + 1] = '\n';

    return n + m + 2;
}


size_t
tb_evs_bedrock_sse(const tb_evs_frame_t *f, unsigned char *out,
    size_t size, tb_evs_kind_e *kind)
{
    size_t                n, i, tlen;
    int64_t               jlen;
    tb_perror_t           e;
    unsigned char        *json, *b64;
    const unsigned char  *name;
    char                  type[TB_EVS_TYPE_MAX + 1];

    if (size < tb_evs_sse_max(f->payload_len)) {
        *kind = TB_EVS_BAD;
        return 0;
    }

    if (f->message_type_len == 9
        && memcmp(f->message_type, "exception", 9) == 0)
    {
        *kind = TB_EVS_EXCEPTION;
        tb_provider_error(TB_ACCOUNT_BEDROCK, 0, f->exception_type,
                          f->exception_type_len, f->payload, f->payload_len,
                          &e);
        return tb_evs_error_sse(&e, out, size);
    }

    if (f->message_type_len == 5 && memcmp(f->message_type, "error", 5) == 0)
    {
        *kind = TB_EVS_EXCEPTION;
        name = f->error_code ? f->error_code : (const unsigned char *) "";
        tb_provider_error(TB_ACCOUNT_BEDROCK, 0, name, f->error_code_len,
                          NULL, 0, &e);
        return tb_evs_error_sse(&e, out, size);
    }

    if (f->message_type_len != 5 || memcmp(f->message_type, "event", 5) != 0
        || f->event_type_len != 5 || memcmp(f->event_type, "chunk", 5) != 0)
    {
        /* an event of another kind carries nothing for the client */
        *kind = f->message_type_len ? TB_EVS_SKIP : TB_EVS_BAD;
        return 0;
    }

    if (f->payload_len == 0) {
        *kind = TB_EVS_SKIP;
        return 0;
    }

    /*
     * {"bytes":"<base64>"}: the string unescaped into the second half of
     * out, decoded into the first, where the SSE is then written around
     * it (the JSON moves right by the event line's length: memmove).
     */

    *kind = TB_EVS_BAD;

    b64 = out + size - f->payload_len;

    if (tb_json_get_str(f->payload, f->payload_len, "bytes", (char *) b64,
                        f->payload_len, &n) != 0
        || n >= f->payload_len)
    {
        return 0;
    }

    json = out + 7 + TB_EVS_TYPE_MAX + 7;

    if (json + n > b64) {
        return 0;
    }

    jlen = tb_evs_base64(b64, n, json);

    if (jlen <= 0 || tb_json_validate(json, (size_t) jlen) != 0
        || tb_json_get_str(json, (size_t) jlen, "type", type, sizeof(type),
                           &tlen) != 0
        || tlen == 0 || tlen > TB_EVS_TYPE_MAX)
    {
        return 0;
    }

    for (i = 0; i < tlen; i++) {
        if (!((type[i] >= 'a' && type[i] <= 'z') || type[i] == '_'
              || (type[i] >= '0' && type[i] <= '9')))
        {
            return 0;
        }
    }

    for (i = 0; i < (size_t) jlen; i++) {
        /* valid JSON has raw line breaks only as whitespace */
        if (json[i] == '\n' || json[i] == '\r') {
            json[i] = ' ';
        }
    }

    n = 7 + tlen + 7;
    memmove(out + n, json, (size_t) jlen);
    memcpy(out, "event: ", 7);
    memcpy(out + 7, type, tlen);
    memcpy(out + 7 + tlen, "\ndata: ", 7);
    out[n + jlen] = '\n';
    out[n + jlen + 1] = '\n';

    *kind = TB_EVS_EVENT;

    return n + (size_t) jlen + 2;
}


static size_t
tb_evs_header_str(unsigned char *p, const char *name, const char *value)
{
    size_t  nl, vl;

    nl = strlen(name);
    vl = strlen(value);

    if (p) {
        p[0] = (unsigned char) nl;
        memcpy(p + 1, name, nl);
        p[1 + nl] = 7;
        p[2 + nl] = (unsigned char) (vl >> 8);
        p[3 + nl] = (unsigned char) vl;
        memcpy(p + 4 + nl, value, vl);
    }

    return 4 + nl + vl;
}


size_t
tb_evs_encode(unsigned char *out, size_t size, const char *message_type,
    const char *event_type, const char *exception_type,
    const unsigned char *payload, size_t plen)
{
    size_t          h, total;
    uint32_t        crc;
    unsigned char  *p;

    h = tb_evs_header_str(NULL, ":message-type", message_type);

    if (event_type) {
        h += tb_evs_header_str(NULL, ":event-type", event_type);
    }

    if (exception_type) {
        h += tb_evs_header_str(NULL, ":exception-type", exception_type);
    }

    h += tb_evs_header_str(NULL, ":content-type", "application/json");

    total = TB_EVS_MIN + h + plen;

    if (out == NULL || size < total) {
        return total;
    }

    p = out;
    p[0] = (unsigned char) (total >> 24);
    p[1] = (unsigned char) (total >> 16);
    p[2] = (unsigned char) (total >> 8);
    p[3] = (unsigned char) total;
    p[4] = (unsigned char) (h >> 24);
    p[5] = (unsigned char) (h >> 16);
    p[6] = (unsigned char) (h >> 8);
    p[7] = (unsigned char) h;

    crc = tb_crc32(0, p, 8);
    p[8] = (unsigned char) (crc >> 24);
    p[9] = (unsigned char) (crc >> 16);
    p[10] = (unsigned char) (crc >> 8);
    p[11] = (unsigned char) crc;

    p += TB_EVS_PRELUDE;
    p += tb_evs_header_str(p, ":message-type", message_type);

    if (event_type) {
        p += tb_evs_header_str(p, ":event-type", event_type);
    }

    if (exception_type) {
        p += tb_evs_header_str(p, ":exception-type", exception_type);
    }

    p += tb_evs_header_str(p, ":content-type", "application/json");

    if (plen) {
        memcpy(p, payload, plen);
        p += plen;
    }

    crc = tb_crc32(0, out, total - 4);
    p[0] = (unsigned char) (crc >> 24);
    p[1] = (unsigned char) (crc >> 16);
    p[2] = (unsigned char) (crc >> 8);
    p[3] = (unsigned char) crc;

    return total;
}
