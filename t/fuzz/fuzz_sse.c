/*
 * libFuzzer: a response stream fed to the SSE parser, split where the
 * first byte of the input says, then byte by byte.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

#include "tb_sse.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t          i, cut;
    tb_sse_t        s;
    unsigned char  *line, *buf;

    if (size == 0) {
        return 0;
    }

    line = malloc(2 * TB_SSE_LINE_MAX);
    if (line == NULL) {
        return 0;
    }

    buf = line + TB_SSE_LINE_MAX;

    cut = data[0] % size;
    data++;
    size--;

    if (cut > size) {
        cut = size;
    }

    tb_sse_init(&s, line, buf);
    (void) tb_sse_feed(&s, data, cut);
    (void) tb_sse_feed(&s, data + cut, size - cut);

    tb_sse_init(&s, line, buf);

    for (i = 0; i < size; i++) {
        (void) tb_sse_feed(&s, data + i, 1);
    }

    free(line);

    return 0;
}
