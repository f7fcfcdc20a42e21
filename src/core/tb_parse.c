/*
 * The one parser of numbers, durations and dates that every header goes
 * through: the rate-limit headers and retry-after of the upstreams, and
 * the client's X-TokenBiryani-* headers (see tb_parse.h).
 */

#include <string.h>

#include "tb_parse.h"


/* the whitespace around a header value (no locale, no call) */
#define tb_space(c)  ((c) == ' ' || (c) == '\t' || (c) == '\r' || (c) == '\n')


/* *p to last without the whitespace around: *p moved, the new last */
static inline const unsigned char *
tb_trim(const unsigned char **p, const unsigned char *last)
{
    const unsigned char  *q;

    q = *p;

    while (q < last && tb_space(*q)) {
        q++;
    }

    while (last > q && tb_space(last[-1])) {
        last--;
    }

    *p = q;

    return last;
}


/* days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant) */

static int64_t
tb_days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t   era;
    unsigned  yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned) (y - era * 400);
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

    return era * 146097 + (int64_t) doe - 719468;
}


static void
tb_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    int64_t   era;
    unsigned  doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = (unsigned) (z - era * 146097);
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t) yoe + era * 400 + (*m <= 2);
}


static int
tb_digits(const unsigned char *p, const unsigned char *last, size_t n,
    unsigned *value)
{
    unsigned  v;

    if ((size_t) (last - p) < n) {
        return -1;
    }

    for (v = 0; n; n--, p++) {
        if (*p < '0' || *p > '9') {
            return -1;
        }

        v = v * 10 + (*p - '0');
    }

    *value = v;

    return 0;
}


static int
tb_valid_date(unsigned y, unsigned mo, unsigned d, unsigned h, unsigned mi,
    unsigned s)
{
    static const unsigned  mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30,
                                       31, 30, 31 };

    if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1
        || d > mdays[mo - 1] || h > 23 || mi > 59 || s > 60)
    {
        return -1;
    }

    if (mo == 2 && d == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
    {
        return -1;
    }

    return 0;
}


int
tb_parse_rfc3339(const unsigned char *p, size_t len, int64_t *ms)
{
    int                   sign;
    int64_t               t, frac;
    unsigned              y, mo, d, h, mi, s, oh, om, digits;
    const unsigned char  *last;

    last = tb_trim(&p, p + len);

    if (tb_digits(p, last, 4, &y) || last - p < 19 || p[4] != '-'
        || tb_digits(p + 5, last, 2, &mo) || p[7] != '-'
        || tb_digits(p + 8, last, 2, &d)
        || (p[10] != 'T' && p[10] != 't' && p[10] != ' ')
        || tb_digits(p + 11, last, 2, &h) || p[13] != ':'
        || tb_digits(p + 14, last, 2, &mi) || p[16] != ':'
        || tb_digits(p + 17, last, 2, &s))
    {
        return -1;
    }

    if (tb_valid_date(y, mo, d, h, mi, s) != 0) {
        return -1;
    }

    p += 19;
    frac = 0;

    if (p < last && *p == '.') {
        p++;

        for (digits = 0; p < last && *p >= '0' && *p <= '9'; p++, digits++) {
            if (digits < 3) {
                frac = frac * 10 + (*p - '0');
            }
        }

        if (digits == 0) {
            return -1;
        }

        for ( /* void */ ; digits < 3; digits++) {
            frac *= 10;
        }
    }

    t = (tb_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60
         + (s == 60 ? 59 : s)) * 1000 + frac;

    if (p < last && (*p == 'Z' || *p == 'z') && p + 1 == last) {
        *ms = t;
        return 0;
    }

    if (last - p != 6 || (*p != '+' && *p != '-') || p[3] != ':'
        || tb_digits(p + 1, last, 2, &oh) || tb_digits(p + 4, last, 2, &om)
        || oh > 23 || om > 59)
    {
        return -1;
    }

    sign = (*p == '-') ? -1 : 1;

    /* local time = UTC + offset */
    *ms = t - sign * (int64_t) (oh * 3600 + om * 60) * 1000;

    return 0;
}


static int
tb_month(const unsigned char *p)
{
    static const char  *months = "JanFebMarAprMayJunJulAugSepOctNovDec";
    int                 i;

    for (i = 0; i < 12; i++) {
        if (memcmp(p, months + i * 3, 3) == 0) {
            return i + 1;
        }
    }

    return -1;
}


/*
 * An HTTP-date after its weekday's comma, the two forms alike but for the
 * separator and the year's digits: " 06 Nov 1994 08:49:37 GMT"
 * (IMF-fixdate: ' ', 4) and " 06-Nov-94 08:49:37 GMT" (RFC 850: '-', 2).
 */
static int
tb_http_date_gmt(const unsigned char *p, const unsigned char *last,
    unsigned char sep, size_t ylen, unsigned *d, int *mo, unsigned *y,
    unsigned *h, unsigned *mi, unsigned *s)
{
    const unsigned char  *t;

    /* the time of day, after the year */
    t = p + 8 + ylen;

    if ((size_t) (last - p) != 21 + ylen || p[0] != ' '
        || tb_digits(p + 1, last, 2, d) || p[3] != sep
        || (*mo = tb_month(p + 4)) < 0 || p[7] != sep
        || tb_digits(p + 8, last, ylen, y) || t[0] != ' '
        || tb_digits(t + 1, last, 2, h) || t[3] != ':'
        || tb_digits(t + 4, last, 2, mi) || t[6] != ':'
        || tb_digits(t + 7, last, 2, s) || memcmp(t + 9, " GMT", 4) != 0)
    {
        return -1;
    }

    return 0;
}


int
tb_parse_http_date(const unsigned char *p, size_t len, int64_t *sec)
{
    int                   mo;
    unsigned              y, d, h, mi, s;
    const unsigned char  *last, *c;

    last = tb_trim(&p, p + len);

    c = memchr(p, ',', last - p);

    if (c != NULL && c - p == 3) {

        /* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */

        if (tb_http_date_gmt(c + 1, last, ' ', 4, &d, &mo, &y, &h, &mi, &s)
            != 0)
        {
            return -1;
        }

    } else if (c != NULL) {

        /* RFC 850: Sunday, 06-Nov-94 08:49:37 GMT */

        if (tb_http_date_gmt(c + 1, last, '-', 2, &d, &mo, &y, &h, &mi, &s)
            != 0)
        {
            return -1;
        }

        y += (y < 70) ? 2000 : 1900;

    } else {

        /* asctime(): Sun Nov  6 08:49:37 1994 */

        if (last - p != 24 || p[3] != ' ' || (mo = tb_month(p + 4)) < 0
            || p[7] != ' ' || p[10] != ' '
            || tb_digits(p + 11, last, 2, &h) || p[13] != ':'
            || tb_digits(p + 14, last, 2, &mi) || p[16] != ':'
            || tb_digits(p + 17, last, 2, &s) || p[19] != ' '
            || tb_digits(p + 20, last, 4, &y))
        {
            return -1;
        }

        if (p[8] == ' ') {
            if (tb_digits(p + 9, last, 1, &d)) {
                return -1;
            }

        } else if (tb_digits(p + 8, last, 2, &d)) {
            return -1;
        }
    }

    if (tb_valid_date(y, (unsigned) mo, d, h, mi, s) != 0) {
        return -1;
    }

    *sec = tb_days_from_civil(y, (unsigned) mo, d) * 86400
           + h * 3600 + mi * 60 + (s == 60 ? 59 : s);

    return 0;
}


int
tb_parse_seconds(const unsigned char *p, size_t len, int64_t *ms)
{
    int64_t               secs, frac, scale;
    const unsigned char  *last;

    last = tb_trim(&p, p + len);

    if (p == last || *p < '0' || *p > '9') {
        return -1;
    }

    for (secs = 0; p < last && *p >= '0' && *p <= '9'; p++) {
        secs = secs * 10 + (*p - '0');

        if (secs > 100000000) {
            return -1;          /* over three years: nonsense */
        }
    }

    frac = 0;

    if (p < last && *p == '.') {
        for (p++, scale = 100; p < last && *p >= '0' && *p <= '9'; p++) {
            frac += (*p - '0') * scale;
            scale /= 10;
        }
    }

    if (p != last) {
        return -1;
    }

    *ms = secs * 1000 + frac;

    return 0;
}


int
tb_parse_retry_after(const unsigned char *p, size_t len, int64_t now_ms,
    int64_t *delay_ms)
{
    int64_t               secs, ms;
    const unsigned char  *q, *last;

    /* delta-seconds, or else an HTTP date */

    if (tb_parse_seconds(p, len, delay_ms) == 0) {
        return 0;
    }

    last = p + len;

    for (q = p; q < last && tb_space(*q); q++) { /* void */ }

    if (q == last || (*q >= '0' && *q <= '9')) {
        return -1;
    }

    if (tb_parse_http_date(p, len, &secs) != 0) {
        return -1;
    }

    ms = secs * 1000 - now_ms;
    *delay_ms = ms > 0 ? ms : 0;

    return 0;
}


int
tb_parse_int64(const unsigned char *p, size_t len, int64_t *value)
{
    int                   neg;
    unsigned              d;
    int64_t               v;
    const unsigned char  *last;

    last = tb_trim(&p, p + len);

    neg = 0;

    if (p < last && (*p == '-' || *p == '+')) {
        neg = (*p == '-');
        p++;
    }

    if (p == last) {
        return -1;
    }

    /* 18 digits never overflow: only longer numbers are checked */

    v = 0;

    if (last - p <= 18) {
        for ( /* void */ ; p < last; p++) {
            d = (unsigned) (*p - '0');

            if (d > 9) {
                return -1;
            }

            v = v * 10 + d;
        }

    } else {
        for ( /* void */ ; p < last; p++) {
            d = (unsigned) (*p - '0');

            if (d > 9 || v > (INT64_MAX - (int64_t) d) / 10) {
                return -1;
            }

            v = v * 10 + d;
        }
    }

    *value = neg ? -v : v;

    return 0;
}


void
tb_format_rfc3339(int64_t ms, char *buf, size_t size)
{
    int64_t   days, secs, y;
    size_t    len;
    unsigned  mo, d;
    char      tmp[32];

    if (size == 0) {
        return;
    }

    secs = ms / 1000;
    days = secs / 86400;
    secs %= 86400;

    if (secs < 0) {
        secs += 86400;
        days--;
    }

    tb_civil_from_days(days, &y, &mo, &d);

    tmp[0] = '\0';

    if (y >= 0 && y <= 9999) {
        /* built by hand: no locale, no libc time zone */
        tmp[0] = (char) ('0' + y / 1000);
        tmp[1] = (char) ('0' + y / 100 % 10);
        tmp[2] = (char) ('0' + y / 10 % 10);
        tmp[3] = (char) ('0' + y % 10);
        tmp[4] = '-';
        tmp[5] = (char) ('0' + mo / 10);
        tmp[6] = (char) ('0' + mo % 10);
        tmp[7] = '-';
        tmp[8] = (char) ('0' + d / 10);
        tmp[9] = (char) ('0' + d % 10);
        tmp[10] = 'T';
        tmp[11] = (char) ('0' + secs / 36000);
        tmp[12] = (char) ('0' + secs / 3600 % 10);
        tmp[13] = ':';
        tmp[14] = (char) ('0' + secs % 3600 / 600);
        tmp[15] = (char) ('0' + secs % 3600 / 60 % 10);
        tmp[16] = ':';
        tmp[17] = (char) ('0' + secs % 60 / 10);
        tmp[18] = (char) ('0' + secs % 10);
        tmp[19] = 'Z';
        tmp[20] = '\0';
    }

    len = strlen(tmp);

    if (len > size - 1) {
        len = size - 1;
    }

    memcpy(buf, tmp, len);
    buf[len] = '\0';
}


void
tb_format_hex(const unsigned char *p, size_t n, char *out)
{
    size_t  i;

    static const char  hex[] = "0123456789abcdef";

    for (i = 0; i < n; i++) {
        out[2 * i] = hex[p[i] >> 4];
        out[2 * i + 1] = hex[p[i] & 0xf];
    }
}


void
tb_ascii_lower(unsigned char *dst, const unsigned char *src, size_t n)
{
    uint64_t  x, low7, ge_a, gt_z, upper;

    /*
     * Per byte, in one 64-bit word: of the ASCII bytes (high bit clear),
     * those at or above 'A' and not above 'Z' get 0x20 added; the seven
     * low bits plus a bias carry into the high bit without crossing into
     * the next byte.
     */

    for ( /* void */ ; n >= 8; n -= 8, src += 8, dst += 8) {
        memcpy(&x, src, 8);

        low7 = x & 0x7f7f7f7f7f7f7f7fULL;
        ge_a = low7 + 0x3f3f3f3f3f3f3f3fULL;     /* 0x80 - 'A' */
        gt_z = low7 + 0x2525252525252525ULL;     /* 0x7f - 'Z' */
        upper = ge_a & ~gt_z & ~x & 0x8080808080808080ULL;

        x |= upper >> 2;
        memcpy(dst, &x, 8);
    }

    for ( /* void */ ; n; n--) {
        *dst++ = (*src >= 'A' && *src <= 'Z') ? (unsigned char) (*src | 0x20)
                                              : *src;
        src++;
    }
}
