/*
 * libFuzzer: a Messages request body through everything that reads it
 * before routing - the scanner, the session key, the input estimate.
 */

#include <stdint.h>
#include <stddef.h>

#include "tb_body.h"
#include "tb_session.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char                 err[256];
    tb_body_t            b;
    tb_session_source_e  src;

    if (tb_scan_body(data, size, &b, err, sizeof(err)) != 0) {
        return 0;
    }

    (void) tb_session_key(data, size, &b, NULL, 0, "k", 1, &src);
    (void) tb_estimate_input(data, size, &b);

    return 0;
}
