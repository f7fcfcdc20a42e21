/*
 * tokenbiryani: what every command shares - its errors, its options, a
 * secret read from stdin rather than the command line.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tbc.h"


void
tbc_err(const char *fmt, ...)
{
    va_list  ap;

    fputs("tokenbiryani: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}


int
tbc_find(const char *const *names, int n, const char *name)
{
    int  i;

    for (i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            return i;
        }
    }

    return -1;
}


const char *
tbc_opt(const tbc_t *c, const char *name)
{
    int  i;

    i = tbc_find(c->opt_name, c->nopts, name);

    return (i == -1) ? NULL : c->opt_value[i];
}


const char *
tbc_secret(const tbc_t *c, const char *name, char *buf, size_t size)
{
    const char  *v;

    v = tbc_opt(c, name);

    if (v == NULL) {
        return NULL;
    }

    if (strcmp(v, "-") == 0) {
        if (fgets(buf, (int) size, stdin) == NULL) {
            buf[0] = '\0';

        } else {
            buf[strcspn(buf, "\r\n")] = '\0';
        }

        return buf;
    }

    tbc_err("warning: --%s on the command line can be read by other users of "
            "this machine while the command runs: give --%s - (stdin) or the "
            "environment instead", name, name);

    return v;
}
