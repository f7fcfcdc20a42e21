/*
 * libFuzzer: store.url as the YAML file gives it - parsed, and when it
 * parses, printed without its password (which must never be in the text).
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "tb_redis.h"


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char            *url, err[512], shown[1024], want[1024];
    tb_redis_url_t   u;

    url = malloc(size + 1);
    if (url == NULL) {
        return 0;
    }

    memcpy(url, data, size);
    url[size] = '\0';

    if (tb_redis_url_parse(&u, url, err, sizeof(err)) == 0) {
        tb_redis_url_print(&u, shown, sizeof(shown));

        /* exactly the parts, the password as *** */
        if (u.path[0] == '\0') {
            snprintf(want, sizeof(want), "redis://%s%s%s%s%s%s:%d", u.user,
                     u.password[0] ? ":***" : "",
                     (u.user[0] || u.password[0]) ? "@" : "",
                     strchr(u.host, ':') ? "[" : "", u.host,
                     strchr(u.host, ':') ? "]" : "", u.port);

            if (strcmp(shown, want) != 0) {
                abort();
            }
        }

        if (u.path[0] == '\0' && (u.port < 1 || u.port > 65535)) {
            abort();
        }
    }

    free(url);

    return 0;
}
