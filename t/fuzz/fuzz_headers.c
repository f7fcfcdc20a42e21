/*
 * libFuzzer: response headers the mirror reads (name NUL value), the
 * date and retry-after parsers, and the mirror folding an observation;
 * a subscription's unified headers, folded and said again.
 */

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "tb_ratelimit.h"
#include "tb_unified.h"


#define T0  1795984859000LL


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t       v;
    size_t        n;
    tb_mirror_t   m;
    tb_rl_obs_t   obs;
    const uint8_t *value;
    int            i;
    char           hn[80], hv[48];
    tb_unified_t   u, uo;

    value = memchr(data, 0, size);
    n = value ? (size_t) (value - data) : size;
    value = value ? value + 1 : data + size;

    tb_rl_obs_init(&obs);
    (void) tb_rl_obs_header(&obs, data, n, value, size - (value - data), T0);

    (void) tb_parse_rfc3339(data, size, &v);
    (void) tb_parse_http_date(data, size, &v);
    (void) tb_parse_retry_after(data, size, T0, &v);
    (void) tb_parse_int64(data, size, &v);

    tb_mirror_init(&m);
    tb_mirror_apply(&m, &obs, T0, (int) (size % 3));
    (void) tb_rl_obs_blocked_until(&obs);

    tb_unified_init(&u);
    tb_unified_init(&uo);
    (void) tb_unified_header(&uo, data, n, value, size - (value - data), T0);
    tb_unified_apply(&u, &uo);
    (void) tb_unified_headroom(&u, T0);
    (void) tb_unified_blocked_until(&u, T0);

    i = 0;

    while ((i = tb_unified_header_at(&u, (unsigned) i, hn, sizeof(hn), hv,
                                     sizeof(hv))) != 0)
    {
        /* what is said again is printable, for a response header */
        for (n = 0; hv[n]; n++) {
            if ((unsigned char) hv[n] < 0x20 || (unsigned char) hv[n] > 0x7e) {
                __builtin_trap();
            }
        }
    }

    return 0;
}
