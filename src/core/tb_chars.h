/*
 * The characters an id, a name, a token or a host may hold: checked
 * before they reach a header, a path or a log line; and an entry of a
 * table found by its name.
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


/*
 * The entry named name of a table ended by a NULL name, each entry size
 * bytes with its name its first member; NULL: none
 */
static inline const void *
tb_named(const void *table, size_t size, const char *name)
{
    const char  *entry, *n;

    for (entry = table; (n = *(const char *const *) (const void *) entry);
         entry += size)
    {
        if (strcmp(n, name) == 0) {
            return entry;
        }
    }

    return NULL;
}


#endif /* TB_CHARS_H */
