/*
 * libFuzzer: response headers the mirror reads (name NUL value), the
 * date and retry-after parsers, and the mirror folding an observation.
 */

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "tb_ratelimit.h"


#define T0  1795984859000LL


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t       v;
    size_t        n;
    tb_mirror_t   m;
    tb_rl_obs_t   obs;
    const uint8_t *value;

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

    return 0;
}
