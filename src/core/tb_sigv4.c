/*
 * AWS Signature Version 4 (see tb_sigv4.h).
 */

#include <string.h>
#include <stdio.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "tb_parse.h"
#include "tb_sigv4.h"


#define TB_SIGV4_PAIRS_MAX    64
#define TB_SIGV4_QUERY_MAX    2048


/* a writer that measures once it runs out of room */
typedef struct {
    char                     *buf;
    size_t                    size;
    size_t                    len;
} tb_sv_out_t;


typedef struct {
    const unsigned char      *name;
    size_t                    name_len;
    const unsigned char      *value;
    size_t                    value_len;
} tb_sv_pair_t;


static const char  tb_sv_hex[] = "0123456789ABCDEF";


static void
tb_sv_put(tb_sv_out_t *o, const void *p, size_t n)
{
    if (o->len < o->size) {
        memcpy(o->buf + o->len, p, n <= o->size - o->len ? n : o->size - o->len);
    }

    o->len += n;
}


static void
tb_sv_putc(tb_sv_out_t *o, char c)
{
    tb_sv_put(o, &c, 1);
}


static int
tb_sv_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
           || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'
           || c == '~';
}


/* URI-encoded as SigV4 wants it: %XX in upper case, '/' kept if asked */
static void
tb_sv_encode(tb_sv_out_t *o, const unsigned char *p, size_t n,
    int keep_slash)
{
    char    e[3];
    size_t  i;

    for (i = 0; i < n; i++) {
        if (tb_sv_unreserved(p[i]) || (keep_slash && p[i] == '/')) {
            tb_sv_putc(o, (char) p[i]);
            continue;
        }

        e[0] = '%';
        e[1] = tb_sv_hex[p[i] >> 4];
        e[2] = tb_sv_hex[p[i] & 0x0f];
        tb_sv_put(o, e, 3);
    }
}


/* %XX decoded into d (as long as the source at most); a stray '%' stays */
static size_t
tb_sv_decode(unsigned char *d, const unsigned char *p, size_t n)
{
    int     hi, lo;
    size_t  i, w;

    for (i = 0, w = 0; i < n; i++) {
        if (p[i] == '%' && i + 2 < n
            && (hi = tb_hex_digit(p[i + 1])) >= 0
            && (lo = tb_hex_digit(p[i + 2])) >= 0)
        {
            d[w++] = (unsigned char) (hi << 4 | lo);
            i += 2;
            continue;
        }

        d[w++] = p[i];
    }

    return w;
}


static int
tb_sv_cmp_bytes(const unsigned char *a, size_t an, const unsigned char *b,
    size_t bn)
{
    int  rc;

    rc = memcmp(a, b, an < bn ? an : bn);

    if (rc != 0) {
        return rc;
    }

    return (an > bn) - (an < bn);
}


/* header names compared lowercased */
static int
tb_sv_cmp_name(const tb_sigv4_header_t *a, const tb_sigv4_header_t *b)
{
    size_t         i, n;
    unsigned char  ca, cb;

    n = a->name_len < b->name_len ? a->name_len : b->name_len;

    for (i = 0; i < n; i++) {
        ca = (unsigned char) a->name[i];
        cb = (unsigned char) b->name[i];
        ca = (ca >= 'A' && ca <= 'Z') ? ca | 0x20 : ca;
        cb = (cb >= 'A' && cb <= 'Z') ? cb | 0x20 : cb;

        if (ca != cb) {
            return ca < cb ? -1 : 1;
        }
    }

    return (a->name_len > b->name_len) - (a->name_len < b->name_len);
}


static int
tb_sv_valid_header(const tb_sigv4_header_t *h)
{
    size_t         i;
    unsigned char  c;

    if (h->name_len == 0) {
        return 0;
    }

    /* a name is a token (RFC 9110, 5.6.2): never ';', which joins them */

    for (i = 0; i < h->name_len; i++) {
        c = (unsigned char) h->name[i];

        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
              || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c)))
        {
            return 0;
        }
    }

    for (i = 0; i < h->value_len; i++) {
        c = (unsigned char) h->value[i];

        if ((c < ' ' && c != '\t') || c == 0x7f) {
            return 0;
        }
    }

    return 1;
}


/* trimmed, runs of spaces and tabs as one space */
static void
tb_sv_value(tb_sv_out_t *o, const char *v, size_t n)
{
    size_t  i;
    int     space;

    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) {
        n--;
    }

    for (i = 0; i < n && (v[i] == ' ' || v[i] == '\t'); i++) {
        /* void */
    }

    space = 0;

    for ( /* void */ ; i < n; i++) {
        if (v[i] == ' ' || v[i] == '\t') {
            space = 1;
            continue;
        }

        if (space) {
            tb_sv_putc(o, ' ');
            space = 0;
        }

        tb_sv_putc(o, v[i]);
    }
}


static void
tb_sv_lower(tb_sv_out_t *o, const char *p, size_t n)
{
    size_t  i;
    char    c;

    for (i = 0; i < n; i++) {
        c = p[i];
        tb_sv_putc(o, (c >= 'A' && c <= 'Z') ? (char) (c | 0x20) : c);
    }
}


/* p..p+n decoded, then encoded as SigV4 wants it, at enc + *w */
static size_t
tb_sv_reencode(unsigned char *enc, size_t *w, const unsigned char *p,
    size_t n)
{
    size_t         len;
    tb_sv_out_t    o;
    unsigned char  dec[TB_SIGV4_QUERY_MAX];

    len = tb_sv_decode(dec, p, n);

    o.buf = (char *) enc + *w;
    o.size = 3 * len;
    o.len = 0;

    tb_sv_encode(&o, dec, len, 0);

    *w += o.len;

    return o.len;
}


/*
 * The query's pairs, decoded and encoded again into enc (3 x qlen bytes),
 * sorted by their encoded bytes; how many, or -1 for too many.
 */
static int
tb_sv_query(const unsigned char *q, size_t qlen, unsigned char *enc,
    tb_sv_pair_t *pairs)
{
    int                   n, i, j, rc;
    size_t                w;
    tb_sv_pair_t          t;
    const unsigned char  *p, *end, *amp, *eq;

    n = 0;
    w = 0;
    p = q;
    end = q + qlen;

    while (p < end) {
        amp = tb_find_end(p, end, '&');

        if (amp > p) {
            if (n == TB_SIGV4_PAIRS_MAX) {
                return -1;
            }

            eq = tb_find_end(p, amp, '=');

            pairs[n].name = enc + w;
            pairs[n].name_len = tb_sv_reencode(enc, &w, p,
                                               (size_t) (eq - p));

            pairs[n].value = enc + w;
            pairs[n].value_len = (eq < amp)
                                 ? tb_sv_reencode(enc, &w, eq + 1,
                                                  (size_t) (amp - eq - 1))
                                 : 0;
            n++;
        }

        p = amp + 1;
    }

    /* insertion sort: by encoded name, then value, as bytes */

    for (i = 1; i < n; i++) {
        t = pairs[i];

        for (j = i - 1; j >= 0; j--) {
            rc = tb_sv_cmp_bytes(pairs[j].name, pairs[j].name_len, t.name,
                                 t.name_len);

            if (rc == 0) {
                rc = tb_sv_cmp_bytes(pairs[j].value, pairs[j].value_len,
                                     t.value, t.value_len);
            }

            if (rc <= 0) {
                break;
            }

            pairs[j + 1] = pairs[j];
        }

        pairs[j + 1] = t;
    }

    return n;
}


size_t
tb_sigv4_canonical(char *buf, size_t size, const char *method,
    const unsigned char *path, size_t plen, const unsigned char *query,
    size_t qlen, const tb_sigv4_header_t *h, size_t nh,
    const char *payload_sha256_hex, char *signed_headers, size_t shsize)
{
    int                 np, i;
    size_t              k, j, idx[TB_SIGV4_HEADERS_MAX], t;
    tb_sv_out_t         o, so;
    tb_sv_pair_t        pairs[TB_SIGV4_PAIRS_MAX];
    unsigned char       enc[3 * TB_SIGV4_QUERY_MAX];
    const tb_sigv4_header_t  *hk;

    if (nh > TB_SIGV4_HEADERS_MAX || qlen > TB_SIGV4_QUERY_MAX) {
        return (size_t) -1;
    }

    for (k = 0; k < nh; k++) {
        if (!tb_sv_valid_header(&h[k])) {
            return (size_t) -1;
        }

        idx[k] = k;
    }

    /* a stable sort by lowercased name */

    for (k = 1; k < nh; k++) {
        t = idx[k];

        for (j = k; j > 0 && tb_sv_cmp_name(&h[idx[j - 1]], &h[t]) > 0; j--) {
            idx[j] = idx[j - 1];
        }

        idx[j] = t;
    }

    np = tb_sv_query(query, qlen, enc, pairs);

    if (np < 0) {
        return (size_t) -1;
    }

    o.buf = buf;
    o.size = size;
    o.len = 0;

    tb_sv_put(&o, method, strlen(method));
    tb_sv_putc(&o, '\n');

    if (plen == 0) {
        tb_sv_putc(&o, '/');

    } else {
        tb_sv_encode(&o, path, plen, 1);
    }

    tb_sv_putc(&o, '\n');

    for (i = 0; i < np; i++) {
        if (i) {
            tb_sv_putc(&o, '&');
        }

        tb_sv_put(&o, pairs[i].name, pairs[i].name_len);
        tb_sv_putc(&o, '=');
        tb_sv_put(&o, pairs[i].value, pairs[i].value_len);
    }

    tb_sv_putc(&o, '\n');

    so.buf = signed_headers;
    so.size = shsize;
    so.len = 0;

    for (k = 0; k < nh; k++) {
        hk = &h[idx[k]];

        if (k && tb_sv_cmp_name(&h[idx[k - 1]], hk) == 0) {
            /* a duplicate: its value joins the line before */
            tb_sv_putc(&o, ',');
            tb_sv_value(&o, hk->value, hk->value_len);
            continue;
        }

        if (k) {
            tb_sv_putc(&o, '\n');
            tb_sv_putc(&so, ';');
        }

        tb_sv_lower(&o, hk->name, hk->name_len);
        tb_sv_putc(&o, ':');
        tb_sv_value(&o, hk->value, hk->value_len);

        tb_sv_lower(&so, hk->name, hk->name_len);
    }

    if (nh) {
        tb_sv_putc(&o, '\n');
    }

    tb_sv_putc(&o, '\n');

    if (so.len < shsize) {
        signed_headers[so.len] = '\0';

    } else if (shsize) {
        return (size_t) -1;
    }

    tb_sv_put(&o, signed_headers, so.len);
    tb_sv_putc(&o, '\n');
    tb_sv_put(&o, payload_sha256_hex, strlen(payload_sha256_hex));

    if (o.len < size) {
        buf[o.len] = '\0';
    }

    return o.len;
}


void
tb_sigv4_date(int64_t unix_sec, char *out)
{
    char       tmp[64];
    time_t     t;
    struct tm  tm;

    t = (time_t) unix_sec;
    gmtime_r(&t, &tm);

    (void) snprintf(tmp, sizeof(tmp), "%04d%02d%02dT%02d%02d%02dZ",
                    (tm.tm_year + 1900) % 10000, tm.tm_mon + 1, tm.tm_mday,
                    tm.tm_hour, tm.tm_min, tm.tm_sec);

    memcpy(out, tmp, TB_SIGV4_DATE_LEN);
    out[TB_SIGV4_DATE_LEN] = '\0';
}


void
tb_sigv4_sha256_hex(const void *p, size_t n, char *out)
{
    unsigned int   len;
    unsigned char  md[EVP_MAX_MD_SIZE];

    len = 0;

    if (EVP_Digest(p, n, md, &len, EVP_sha256(), NULL) != 1 || len != 32) {
        memset(md, 0, 32);
    }

    tb_format_hex(md, 32, out);
    out[64] = '\0';
}


static int
tb_sv_hmac(const void *key, size_t klen, const void *p, size_t n,
    unsigned char out[32])
{
    unsigned int  len;

    len = 32;

    return HMAC(EVP_sha256(), key, (int) klen, p, n, out, &len) != NULL
           && len == 32 ? 0 : -1;
}


static int
tb_sv_valid_date(const char *d)
{
    size_t  i;

    if (d == NULL || strlen(d) != TB_SIGV4_DATE_LEN || d[8] != 'T'
        || d[15] != 'Z')
    {
        return 0;
    }

    for (i = 0; i < 15; i++) {
        if (i != 8 && (d[i] < '0' || d[i] > '9')) {
            return 0;
        }
    }

    return 1;
}


int
tb_sigv4_signature(const tb_sigv4_key_t *k, const char *amz_date,
    const char *canonical, size_t clen, char *out)
{
    int             rc;
    size_t          n, slen;
    char            hash[65], sts[512];
    unsigned char   kd[32], ks[32];
    unsigned char  *secret;

    if (!tb_sv_valid_date(amz_date)) {
        return -1;
    }

    tb_sigv4_sha256_hex(canonical, clen, hash);

    n = (size_t) snprintf(sts, sizeof(sts),
                          "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s",
                          amz_date, amz_date, k->region, k->service, hash);

    if (n >= sizeof(sts)) {
        return -1;
    }

    /* kSecret = "AWS4" + secret; kDate, kRegion, kService, kSigning */

    slen = strlen(k->secret);
    secret = OPENSSL_malloc(slen + 4);
    if (secret == NULL) {
        return -1;
    }

    memcpy(secret, "AWS4", 4);
    memcpy(secret + 4, k->secret, slen);

    rc = tb_sv_hmac(secret, slen + 4, amz_date, 8, kd);
    OPENSSL_clear_free(secret, slen + 4);

    rc = rc
         || tb_sv_hmac(kd, 32, k->region, strlen(k->region), ks)
         || tb_sv_hmac(ks, 32, k->service, strlen(k->service), kd)
         || tb_sv_hmac(kd, 32, "aws4_request", 12, ks)
         || tb_sv_hmac(ks, 32, sts, n, kd);

    if (rc == 0) {
        tb_format_hex(kd, 32, out);
        out[64] = '\0';
    }

    OPENSSL_cleanse(kd, sizeof(kd));
    OPENSSL_cleanse(ks, sizeof(ks));

    return rc ? -1 : 0;
}


size_t
tb_sigv4_authorization(const tb_sigv4_key_t *k, const char *amz_date,
    const char *canonical, size_t clen, const char *signed_headers,
    char *out, size_t size)
{
    int   n;
    char  sig[65];

    if (tb_sigv4_signature(k, amz_date, canonical, clen, sig) != 0) {
        return 0;
    }

    n = snprintf(out, size, "AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/%s/"
                 "aws4_request, SignedHeaders=%s, Signature=%s",
                 k->access_key, amz_date, k->region, k->service,
                 signed_headers, sig);

    if (n < 0 || (size_t) n >= size) {
        return 0;
    }

    return (size_t) n;
}
