/*
 * The rules of accounts added at runtime (see tb_racct.h).
 */

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cjson/cJSON.h>

#include "tb_racct.h"
#include "tb_oauth.h"


const char  *tb_racct_fields[] = {
    "id", "name", "type", "base_url", "priority", "cost_tier", "models",
    "max_concurrency", "spend_cap_usd", "enabled", "observable_limits",
    "cache_reads_count", "assumed_headroom", "replenishment", NULL
};


int
tb_racct_valid_id(const char *id, size_t len)
{
    size_t  i;

    if (len == 0 || len > 64 || (len == 4 && memcmp(id, "test", 4) == 0)) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if ((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z')
            || (id[i] >= '0' && id[i] <= '9')
            || (i > 0 && (id[i] == '_' || id[i] == '-')))
        {
            continue;
        }

        return 0;
    }

    return 1;
}


static int
tb_racct_private_v4(const unsigned char *a)
{
    return a[0] == 0 || a[0] == 10 || a[0] == 127
           || (a[0] == 100 && (a[1] & 0xc0) == 64)          /* 100.64/10 */
           || (a[0] == 169 && a[1] == 254)                  /* link-local */
           || (a[0] == 172 && (a[1] & 0xf0) == 16)          /* 172.16/12 */
           || (a[0] == 192 && a[1] == 168)
           || (a[0] == 192 && a[1] == 0 && a[2] == 0)       /* 192.0.0/24 */
           || a[0] >= 224;                       /* multicast, reserved */
}


static int
tb_racct_private_v6(const unsigned char *a)
{
    static const unsigned char  zero[16];
    static const unsigned char  mapped[12] = {
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
    };

    if (memcmp(a, zero, 15) == 0 && (a[15] == 0 || a[15] == 1)) {
        return 1;                                   /* ::, ::1 */
    }

    if (memcmp(a, mapped, 12) == 0 || memcmp(a, zero, 12) == 0) {
        return tb_racct_private_v4(a + 12);          /* v4 in v6 */
    }

    return (a[0] & 0xfe) == 0xfc                     /* fc00::/7 */
           || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)  /* fe80::/10 */
           || (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)  /* site-local */
           || a[0] == 0xff;                            /* multicast */
}


int
tb_racct_private_host(const char *host)
{
    size_t           n;
    struct in_addr   v4;
    struct in6_addr  v6;

    n = strlen(host);

    if (n && host[n - 1] == '.') {
        n--;                             /* "localhost." is localhost */
    }

    if ((n == 9 && strncasecmp(host, "localhost", 9) == 0)
        || (n > 10 && strncasecmp(host + n - 10, ".localhost", 10) == 0))
    {
        return 1;
    }

    if (inet_pton(AF_INET, host, &v4) == 1) {
        return tb_racct_private_v4((const unsigned char *) &v4);
    }

    if (inet_pton(AF_INET6, host, &v6) == 1) {
        return tb_racct_private_v6(v6.s6_addr);
    }

    return 0;
}


int
tb_racct_private_addr(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        return tb_racct_private_v4((const unsigned char *)
                          &((const struct sockaddr_in *) sa)->sin_addr);
    }

    if (sa->sa_family == AF_INET6) {
        return tb_racct_private_v6(
                          ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr);
    }

    /* a unix socket or anything else is no upstream of a runtime account */
    return 1;
}


/* the host of an http(s) URL, without brackets, into host: 0 or -1 */
static int
tb_racct_url_host(const char *url, char *host, size_t size)
{
    size_t       n;
    const char  *p, *e;

    if (strncasecmp(url, "https://", 8) == 0) {
        p = url + 8;

    } else if (strncasecmp(url, "http://", 7) == 0) {
        p = url + 7;

    } else {
        return -1;
    }

    if (strpbrk(p, "@\\") != NULL) {
        /* user information, or a backslash some parsers read as '/' */
        return -1;
    }

    if (*p == '[') {
        e = strchr(p, ']');
        if (e == NULL) {
            return -1;
        }

        p++;

    } else {
        e = p + strcspn(p, ":/?#");
    }

    n = (size_t) (e - p);

    if (n == 0 || n >= size) {
        return -1;
    }

    memcpy(host, p, n);
    host[n] = '\0';

    return 0;
}


int
tb_racct_base_url(const char *url, int allow_private, char *err,
    size_t errlen)
{
    char  host[256];

    if (tb_racct_url_host(url, host, sizeof(host)) != 0) {
        snprintf(err, errlen, "base_url must be an http or https URL with a "
                 "host and no user information");
        return -1;
    }

    if (!allow_private && tb_racct_private_host(host)) {
        snprintf(err, errlen, "base_url: %.64s is a loopback, link-local or "
                 "private address, which accounts added at runtime may not "
                 "reach (server.allow_private_hosts)", host);
        return -1;
    }

    return 0;
}


int
tb_racct_check(const char *spec, size_t len, const char *id, size_t idlen,
    int allow_private, char *err, size_t errlen)
{
    int           rc;
    cJSON        *root, *item, *other;
    const char  **f;

    root = cJSON_ParseWithLength(spec, len);

    if (root == NULL || !cJSON_IsObject(root)) {
        snprintf(err, errlen, "its spec is not a JSON object");
        cJSON_Delete(root);
        return -1;
    }

    rc = -1;

    for (item = root->child; item; item = item->next) {

        for (f = tb_racct_fields; *f; f++) {
            if (strcmp(item->string, *f) == 0) {
                break;
            }
        }

        if (*f == NULL) {
            snprintf(err, errlen, "its spec has \"%.64s\", which an account "
                     "added at runtime cannot have", item->string);
            goto done;
        }

        for (other = item->next; other; other = other->next) {
            if (strcmp(other->string, item->string) == 0) {
                snprintf(err, errlen, "its spec has \"%s\" twice",
                         item->string);
                goto done;
            }
        }
    }

    item = cJSON_GetObjectItemCaseSensitive(root, "id");

    if (!cJSON_IsString(item) || strlen(item->valuestring) != idlen
        || memcmp(item->valuestring, id, idlen) != 0)
    {
        snprintf(err, errlen, "its spec names another id");
        goto done;
    }

    if (!tb_racct_valid_id(id, idlen)) {
        snprintf(err, errlen, "its id is not one an account added at runtime "
                 "can have");
        goto done;
    }

    item = cJSON_GetObjectItemCaseSensitive(root, "type");

    if (cJSON_IsString(item) && strcmp(item->valuestring, "oauth") == 0) {
        /* the operator's own subscription is the file's, one at most */
        snprintf(err, errlen, "type: oauth is not added at runtime: "
                 TB_OAUTH_TERMS);
        goto done;
    }

    if (item && (!cJSON_IsString(item)
                 || (strcmp(item->valuestring, "anthropic_api") != 0
                     && strcmp(item->valuestring, "anthropic") != 0)))
    {
        snprintf(err, errlen, "type: accounts added at runtime are "
                 "\"anthropic_api\" (Anthropic API keys)");
        goto done;
    }

    item = cJSON_GetObjectItemCaseSensitive(root, "base_url");

    if (item && (!cJSON_IsString(item)
                 || tb_racct_base_url(item->valuestring, allow_private, err,
                                      errlen)
                    != 0))
    {
        if (!cJSON_IsString(item)) {
            snprintf(err, errlen, "base_url must be a string");
        }

        goto done;
    }

    rc = 0;

done:

    cJSON_Delete(root);

    return rc;
}
