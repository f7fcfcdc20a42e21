/*
 * AWS's shared credentials file (see tb_awscred.h).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tb_awscred.h"
#include "tb_parse.h"


#define TB_AWSCRED_MAX        (1024 * 1024)


static const char *
tb_ac_trim(const char *s, const char *e, const char **end)
{
    while (s < e && (*s == ' ' || *s == '\t')) {
        s++;
    }

    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) {
        e--;
    }

    *end = e;

    return s;
}


static int
tb_ac_set(char **to, const char *v, const char *ve)
{
    char  *s;

    s = malloc((size_t) (ve - v) + 1);
    if (s == NULL) {
        return -1;
    }

    memcpy(s, v, (size_t) (ve - v));
    s[ve - v] = '\0';

    free(*to);
    *to = s;

    return 0;
}


int
tb_awscred_parse(const char *text, size_t len, const char *profile,
    tb_awscred_t *out)
{
    int          in;
    size_t       plen;
    const char  *p, *end, *nl, *s, *se, *eq, *k, *ke, *v, *ve;

    memset(out, 0, sizeof(tb_awscred_t));

    plen = strlen(profile);
    in = 0;
    p = text;
    end = text + len;

    for ( /* void */ ; p < end; p = nl + 1) {
        nl = tb_find_end(p, end, '\n');

        s = tb_ac_trim(p, nl, &se);

        if (s == se || *s == '#' || *s == ';') {
            continue;
        }

        if (*s == '[') {
            /* [name]: this profile's section, or another's */
            k = tb_ac_trim(s + 1, se, &ke);

            if (ke > k && ke[-1] == ']') {
                k = tb_ac_trim(k, ke - 1, &ke);
                in = ((size_t) (ke - k) == plen
                      && memcmp(k, profile, plen) == 0);

            } else {
                in = 0;
            }

            continue;
        }

        if (!in || (eq = memchr(s, '=', (size_t) (se - s))) == NULL) {
            continue;
        }

        k = tb_ac_trim(s, eq, &ke);
        v = tb_ac_trim(eq + 1, se, &ve);

#define tb_ac_key(name)                                                       \
        ((size_t) (ke - k) == sizeof(name) - 1                                \
         && strncasecmp(k, name, sizeof(name) - 1) == 0)

        if (tb_ac_key("aws_access_key_id")) {
            if (tb_ac_set(&out->access_key_id, v, ve) != 0) {
                goto nomem;
            }

        } else if (tb_ac_key("aws_secret_access_key")) {
            if (tb_ac_set(&out->secret_access_key, v, ve) != 0) {
                goto nomem;
            }

        } else if (tb_ac_key("aws_session_token")) {
            if (tb_ac_set(&out->session_token, v, ve) != 0) {
                goto nomem;
            }
        }

#undef tb_ac_key
    }

    if (out->access_key_id && out->access_key_id[0]
        && out->secret_access_key && out->secret_access_key[0])
    {
        if (out->session_token && out->session_token[0] == '\0') {
            free(out->session_token);
            out->session_token = NULL;
        }

        return 1;
    }

    tb_awscred_free(out);

    return 0;

nomem:

    tb_awscred_free(out);

    return -1;
}


int
tb_awscred_file(const char *path, const char *profile, tb_awscred_t *out)
{
    int     rc;
    FILE   *f;
    char   *buf;
    size_t  n;

    memset(out, 0, sizeof(tb_awscred_t));

    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }

    buf = malloc(TB_AWSCRED_MAX);
    if (buf == NULL) {
        fclose(f);
        return -1;
    }

    n = fread(buf, 1, TB_AWSCRED_MAX, f);
    fclose(f);

    rc = tb_awscred_parse(buf, n, profile, out);

    memset(buf, 0, n);
    free(buf);

    return rc;
}


void
tb_awscred_free(tb_awscred_t *c)
{
    if (c->secret_access_key) {
        memset(c->secret_access_key, 0, strlen(c->secret_access_key));
    }

    free(c->access_key_id);
    free(c->secret_access_key);
    free(c->session_token);

    memset(c, 0, sizeof(tb_awscred_t));
}
