/*
 * The operator's own Claude subscription's token (tb_oauth.h).
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tb_chars.h"
#include "tb_oauth.h"


int
tb_oauth_token_ok(const char *s, size_t len)
{
    return tb_chars_ok(s, len, TB_OAUTH_TOKEN_MAX, "-._~+/=");
}


int
tb_oauth_creds_parse(const char *json, size_t len, char **token,
    int64_t *expires_ms, char *err, size_t errlen)
{
    int           rc;
    double        d;
    cJSON        *root, *o, *t, *e;

    rc = -1;
    *token = NULL;
    *expires_ms = 0;

    root = cJSON_ParseWithLength(json, len);

    if (root == NULL) {
        snprintf(err, errlen, "is not JSON");
        return -1;
    }

    o = cJSON_GetObjectItemCaseSensitive(root, "claudeAiOauth");
    t = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "accessToken")
                          : NULL;

    if (!cJSON_IsString(t)) {
        snprintf(err, errlen, "has no claudeAiOauth.accessToken");
        goto done;
    }

    if (!tb_oauth_token_ok(t->valuestring, strlen(t->valuestring))) {
        /* never say the token itself */
        snprintf(err, errlen, "has a claudeAiOauth.accessToken that is not "
                 "a token (a character a header cannot carry, or longer "
                 "than %d bytes)", TB_OAUTH_TOKEN_MAX);
        goto done;
    }

    e = cJSON_GetObjectItemCaseSensitive(o, "expiresAt");

    if (e && !cJSON_IsNull(e)) {
        d = cJSON_IsNumber(e) ? e->valuedouble : -1;

        if (!isfinite(d) || d < 0 || d > 1e15) {
            snprintf(err, errlen, "has a claudeAiOauth.expiresAt that is "
                     "not milliseconds since the epoch");
            goto done;
        }

        *expires_ms = (int64_t) d;
    }

    *token = strdup(t->valuestring);

    if (*token == NULL) {
        snprintf(err, errlen, "could not be read: no memory");
        goto done;
    }

    rc = 0;

done:

    cJSON_Delete(root);

    return rc;
}


int
tb_oauth_creds_file(const char *path, char **token, int64_t *expires_ms,
    char *err, size_t errlen)
{
    int     rc;
    char   *buf;
    FILE   *f;
    size_t  n;

    *token = NULL;

    f = fopen(path, "r");

    if (f == NULL) {
        snprintf(err, errlen, "cannot be opened: %s", strerror(errno));
        return -1;
    }

    buf = malloc(TB_OAUTH_FILE_MAX + 1);

    if (buf == NULL) {
        fclose(f);
        snprintf(err, errlen, "could not be read: no memory");
        return -1;
    }

    n = fread(buf, 1, TB_OAUTH_FILE_MAX + 1, f);

    if (ferror(f)) {
        snprintf(err, errlen, "could not be read: %s", strerror(errno));
        rc = -1;

    } else if (n > TB_OAUTH_FILE_MAX) {
        snprintf(err, errlen, "is larger than %d bytes", TB_OAUTH_FILE_MAX);
        rc = -1;

    } else {
        rc = tb_oauth_creds_parse(buf, n, token, expires_ms, err, errlen);
    }

    /* (a token was in it) */
    memset(buf, 0, n < TB_OAUTH_FILE_MAX ? n : TB_OAUTH_FILE_MAX);
    free(buf);
    fclose(f);

    return rc;
}
