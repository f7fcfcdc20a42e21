/*
 * libFuzzer: the SigV4 canonicaliser on a path, a query and headers cut
 * from the input (a NUL ends each part, a LF each header, ':' its name).
 * Measuring and writing must agree; when it canonicalises, the request
 * has exactly one line per distinct header and never a byte below space
 * in a value, the path is only unreserved bytes, '/' and %XX, and the
 * signature is 64 hex digits.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_sigv4.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t              n, m, nh, i, lines;
    const uint8_t      *p, *end, *part[3], *nl, *colon;
    size_t              plen[3];
    char               *buf, sh[1024], sig[65];
    tb_sigv4_header_t   h[TB_SIGV4_HEADERS_MAX + 4];

    static const tb_sigv4_key_t  key = {
        "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        "us-east-1", "bedrock"
    };

    p = data;
    end = data + size;

    for (i = 0; i < 3; i++) {
        nl = memchr(p, '\0', (size_t) (end - p));
        part[i] = p;
        plen[i] = (nl ? nl : end) - p;
        p = nl ? nl + 1 : end;
    }

    /* headers: name:value lines from the third part */

    nh = 0;
    p = part[2];

    while (p < part[2] + plen[2] && nh < TB_SIGV4_HEADERS_MAX + 4) {
        nl = memchr(p, '\n', (size_t) (part[2] + plen[2] - p));
        if (nl == NULL) {
            nl = part[2] + plen[2];
        }

        colon = memchr(p, ':', (size_t) (nl - p));

        if (colon) {
            h[nh].name = (const char *) p;
            h[nh].name_len = (size_t) (colon - p);
            h[nh].value = (const char *) colon + 1;
            h[nh].value_len = (size_t) (nl - colon - 1);
            nh++;
        }

        p = nl + 1;
    }

    n = tb_sigv4_canonical(NULL, 0, "POST", part[0], plen[0], part[1],
                           plen[1], h, nh, "e3b0", sh, sizeof(sh));

    if (n == (size_t) -1) {
        return 0;
    }

    buf = malloc(n + 1);
    if (buf == NULL) {
        return 0;
    }

    m = tb_sigv4_canonical(buf, n + 1, "POST", part[0], plen[0], part[1],
                           plen[1], h, nh, "e3b0", sh, sizeof(sh));

    if (m != n || strlen(buf) != n) {
        abort();
    }

    /* POST, the path, the query, headers..., empty, signed, hash */

    lines = 0;

    for (i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            lines++;
        }

        if ((unsigned char) buf[i] < ' ' && buf[i] != '\n') {
            abort();
        }
    }

    {
        size_t  distinct = 0, semis = 0;

        for (i = 0; sh[i]; i++) {
            semis += (sh[i] == ';');
        }

        distinct = nh ? semis + 1 : 0;

        if (lines != 5 + distinct) {
            abort();
        }
    }

    for (i = 5; buf[i] != '\n'; i++) {
        unsigned char  c = (unsigned char) buf[i];

        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
              || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'
              || c == '~' || c == '/' || c == '%'))
        {
            abort();
        }
    }

    if (tb_sigv4_signature(&key, "20250101T000000Z", buf, n, sig) != 0
        || strlen(sig) != 64)
    {
        abort();
    }

    free(buf);

    return 0;
}
