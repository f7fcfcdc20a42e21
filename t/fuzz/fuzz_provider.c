/*
 * libFuzzer: a request body translated for Bedrock and for Vertex, with
 * betas from the input's tail.  A body the walker takes as one JSON
 * object comes out as one JSON object (measured and written alike, within
 * the bound) that starts with the version; one it refuses is refused.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_provider.h"
#include "tb_json.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int              t, valid;
    size_t           n, m, blen, blen_max;
    const uint8_t   *nul;
    unsigned char   *out;
    const char      *betas;

    static const tb_account_type_e  types[] = {
        TB_ACCOUNT_BEDROCK, TB_ACCOUNT_VERTEX
    };

    /* the type's own version, and options.anthropic_version at its
     * longest */
    static const char  *versions[] = {
        NULL,
        "vertex-0123456789abcdefghijklmnopqrstuvwxyz_ABCDEFGHIJKLMNOPQR.-"
    };

    /* body NUL betas */
    nul = memchr(data, '\0', size);
    betas = nul ? (const char *) nul + 1 : "";
    blen = nul ? size - (size_t) (nul + 1 - data) : 0;
    size = nul ? (size_t) (nul - data) : size;

    valid = tb_json_validate(data, size) == 0;

    for (t = 0; t < 2; t++) {
        n = tb_provider_body(types[t], versions[t], data, size, betas, blen,
                             NULL, 0);

        if (n == (size_t) -1) {
            continue;
        }

        blen_max = tb_provider_body_max(size, blen);

        if (!valid || n > blen_max) {
            abort();
        }

        out = malloc(n ? n : 1);
        if (out == NULL) {
            return 0;
        }

        m = tb_provider_body(types[t], versions[t], data, size, betas, blen,
                             out, n);

        if (m != n || tb_json_validate(out, n) != 0
            || memcmp(out, "{\"anthropic_version\":\"", 22) != 0)
        {
            abort();
        }

        free(out);
    }

    return 0;
}
