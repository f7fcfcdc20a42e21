/*
 * libFuzzer: a Messages request body through everything that reads it
 * before routing - the scanner, the session key, the input estimate -
 * and the gateway's own edits of it, which must scan again with the new
 * model, a breakpoint where there was a place for one, and the spans
 * where the edit said.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_body.h"
#include "tb_session.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char                 err[256];
    tb_body_t            b;
    size_t               n, len0;
    uint64_t             key, key2;
    tb_body_t            b2;
    unsigned char       *out;
    tb_session_source_e  src, src2;

    if (tb_scan_body(data, size, &b, err, sizeof(err)) != 0) {
        return 0;
    }

    key = tb_session_key(data, size, &b, NULL, 0, "k", 1, &src);
    (void) tb_estimate_input(data, size, &b);

    out = malloc(tb_body_edit_max(size, 6));
    if (out == NULL) {
        return 0;
    }

    len0 = b.model_vlen;
    n = tb_body_edit(data, size, &b, 1, b.has_model ? "m-edit" : NULL, 6,
                     out);

    if (n > tb_body_edit_max(size, 6)
        || tb_scan_body(out, n, &b2, err, sizeof(err)) != 0
        || (b.has_model && strcmp(b2.model, "m-edit") != 0)
        || b2.system.off != b.system.off || b2.system.len != b.system.len
        || b2.tools.off != b.tools.off || b2.tools.len != b.tools.len
        || b2.messages.off != b.messages.off
        || b2.messages.len != b.messages.len
        || b2.metadata.off != b.metadata.off
        || b2.model_off != b.model_off || b2.model_vlen != b.model_vlen
        || (n > size + (b.has_model ? 8 - len0 : 0) && !b2.breakpoint))
    {
        abort();
    }

    (void) key;
    (void) key2;
    (void) src2;

    free(out);

    return 0;
}
