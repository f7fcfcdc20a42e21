/*
 * libFuzzer: the failure classifier on an upstream's error response: the
 * status from the first two bytes, the body the rest.
 */

#include <stdint.h>
#include <stddef.h>

#include "tb_failure.h"


static tb_config_t  *cf;


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tb_outcome_t   o;
    tb_response_t  r;

    if (cf == NULL) {
        cf = tb_config_defaults();
    }

    if (size < 2) {
        return 0;
    }

    r.status = (data[0] << 8 | data[1]) % 700;
    r.timed_out = data[0] & 1;
    r.stalled = (data[1] & 3) == 3;
    r.body = data + 2;
    r.body_len = size - 2;
    r.stream_error = (data[0] & 2) ? "overloaded_error" : NULL;
    r.retry_after_ms = (data[1] & 4) ? 7000 : -1;
    r.reset_ms = 0;
    r.now = 1795984859000LL;

    tb_classify(&r, cf, &o);

    if (o.rule != &tb_rules[o.kind]) {
        __builtin_trap();
    }

    return 0;
}
