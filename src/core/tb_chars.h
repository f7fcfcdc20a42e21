/*
 * The characters an id, a name, a token or a host may hold: checked
 * before they reach a header, a path or a log line.
 */

#ifndef TB_CHARS_H
#define TB_CHARS_H


#include <stddef.h>
#include <string.h>


/* 1 when s is 1 to max bytes, each a letter, a digit or one of extra */
static inline int
tb_chars_ok(const char *s, size_t len, size_t max, const char *extra)
{
    size_t  i;
    char    c;

    if (len == 0 || len > max) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || (c != '\0' && strchr(extra, c))))
        {
            return 0;
        }
    }

    return 1;
}


#endif /* TB_CHARS_H */
