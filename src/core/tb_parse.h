/*
 * Numbers, durations and dates as headers carry them: one parser for the
 * upstreams' rate-limit headers and retry-after and for the client's
 * headers.  Every function reads exactly [p, p + len), tolerates the
 * surrounding whitespace a header value may have, and returns 0 or -1.
 * Last, the byte helpers the parsers of core/ share.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_PARSE_H
#define TB_PARSE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>


/* "2026-11-29T20:40:59Z", "...59.123+02:00" → epoch ms; 0 or -1 */
int tb_parse_rfc3339(const unsigned char *p, size_t len, int64_t *ms);

/* IMF-fixdate, RFC 850 and asctime() dates → epoch seconds; 0 or -1 */
int tb_parse_http_date(const unsigned char *p, size_t len, int64_t *sec);

/* seconds, decimals to the millisecond, surrounding space → ms; 0 or -1 */
int tb_parse_seconds(const unsigned char *p, size_t len, int64_t *ms);

/* delta-seconds (decimals tolerated) or an HTTP date → delay in ms */
int tb_parse_retry_after(const unsigned char *p, size_t len, int64_t now_ms,
    int64_t *delay_ms);

/* decimal integer, optional surrounding whitespace → 0 or -1 */
int tb_parse_int64(const unsigned char *p, size_t len, int64_t *value);

/* epoch ms → "2026-11-29T20:40:59Z" (21 bytes + NUL) */
void tb_format_rfc3339(int64_t ms, char *buf, size_t size);

/* n bytes with A-Z lowered into dst (may be src), 8 at a time; header
 * names longer than the 32 bytes nginx's parser lowers on the way */
void tb_ascii_lower(unsigned char *dst, const unsigned char *src, size_t n);

/* n bytes → 2n lowercase hex digits in out (no NUL) */
void tb_format_hex(const unsigned char *p, size_t n, char *out);

/* the value of a hex digit of either case, or -1 */
static inline int
tb_hex_digit(int c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }

    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }

    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }

    return -1;
}

/* the first byte c in [p, end), or end: where an item of a list ends */
static inline const void *
tb_find_end(const void *p, const void *end, int c)
{
    const void  *q;

    q = memchr(p, c, (size_t) ((const char *) end - (const char *) p));

    return q ? q : end;
}


#endif /* TB_PARSE_H */
