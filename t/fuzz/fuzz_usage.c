/*
 * libFuzzer: a response's usage, read as a Message's (the walk of the
 * whole body) and merged from a path (a stream event's), with the
 * 1-hour part of the cache writes: never outside the input, every count
 * -1 or not negative, and a refused object changes nothing.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_body.h"


static void
check(const tb_usage_t *u)
{
    if (u->input_tokens < -1 || u->output_tokens < -1
        || u->cache_read_input_tokens < -1
        || u->cache_creation_input_tokens < -1
        || u->cache_creation_1h_input_tokens < -1)
    {
        abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char  *copy;
    tb_usage_t      u, before;

    /* a copy of exactly size bytes: reading past it is caught */
    copy = malloc(size ? size : 1);
    if (copy == NULL) {
        return 0;
    }

    memcpy(copy, data, size);

    tb_usage_init(&u);
    (void) tb_usage_message(&u, copy, size);
    check(&u);

    before = u;

    if (tb_usage_merge(&u, copy, size, "usage") != 0
        && memcmp(&u, &before, sizeof(tb_usage_t)) != 0)
    {
        abort();
    }

    check(&u);

    before = u;

    if (tb_usage_merge(&u, copy, size, "message.usage") != 0
        && memcmp(&u, &before, sizeof(tb_usage_t)) != 0)
    {
        abort();
    }

    check(&u);

    free(copy);

    return 0;
}
