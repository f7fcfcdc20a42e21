/*
 * libFuzzer: a line of what another gateway tells of its keys and
 * conversations (tb_peers.c) - scanned, and when it scans, printed back to
 * exactly the same bytes and scanned again to the same record.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_peers.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                kind;
    char               buf[TB_PEER_LINE_MAX + 1];
    size_t             n;
    tb_peer_key_t      k, k2;
    tb_peer_session_t  s, s2;

    kind = tb_peer_scan((const char *) data, size, &k, &s);

    if (kind == 0) {
        return 0;
    }

    n = (kind == TB_PEER_KEY) ? tb_peer_key_print(&k, buf)
                              : tb_peer_session_print(&s, buf);

    if (n > TB_PEER_LINE_MAX || n != size || memcmp(buf, data, n) != 0
        || tb_peer_scan(buf, n, &k2, &s2) != kind
        || (kind == TB_PEER_KEY ? memcmp(&k, &k2, sizeof(k))
                                : memcmp(&s, &s2, sizeof(s))) != 0)
    {
        abort();
    }

    return 0;
}
