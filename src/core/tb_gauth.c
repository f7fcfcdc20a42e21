/*
 * Google service accounts (see tb_gauth.h).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "tb_gauth.h"
#include "tb_json.h"


#define TB_GSA_FILE_MAX       (64 * 1024)


size_t
tb_base64url(const unsigned char *p, size_t n, char *out)
{
    size_t             i, w;
    uint32_t           v;
    static const char  t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                             "0123456789-_";

    for (i = 0, w = 0; i + 2 < n; i += 3) {
        v = (uint32_t) p[i] << 16 | (uint32_t) p[i + 1] << 8 | p[i + 2];
        out[w++] = t[v >> 18 & 63];
        out[w++] = t[v >> 12 & 63];
        out[w++] = t[v >> 6 & 63];
        out[w++] = t[v & 63];
    }

    if (n - i == 1) {
        v = (uint32_t) p[i] << 16;
        out[w++] = t[v >> 18 & 63];
        out[w++] = t[v >> 12 & 63];

    } else if (n - i == 2) {
        v = (uint32_t) p[i] << 16 | (uint32_t) p[i + 1] << 8;
        out[w++] = t[v >> 18 & 63];
        out[w++] = t[v >> 12 & 63];
        out[w++] = t[v >> 6 & 63];
    }

    out[w] = '\0';

    return w;
}


/* a string member, malloc()ed; NULL when absent or not a string */
static char *
tb_gsa_member(const char *json, size_t len, const char *name)
{
    char    *s;
    size_t   n;
    char     probe[2];

    if (tb_json_get_str((const unsigned char *) json, len, name, probe,
                        sizeof(probe), &n) != 0)
    {
        return NULL;
    }

    s = malloc(n + 1);
    if (s == NULL) {
        return NULL;
    }

    if (tb_json_get_str((const unsigned char *) json, len, name, s, n + 1,
                        &n) != 0)
    {
        free(s);
        return NULL;
    }

    return s;
}


static int
tb_gsa_header_safe(const char *s)
{
    for ( /* void */ ; *s; s++) {
        if ((unsigned char) *s < 0x21 || (unsigned char) *s > 0x7e) {
            return 0;
        }
    }

    return 1;
}


tb_gsa_t *
tb_gsa_parse(const char *json, size_t len, char *err, size_t errlen)
{
    BIO       *bio;
    char      *type;
    tb_gsa_t  *sa;
    EVP_PKEY  *pkey;

    if (tb_json_validate((const unsigned char *) json, len) != 0) {
        snprintf(err, errlen, "it is not JSON");
        return NULL;
    }

    type = tb_gsa_member(json, len, "type");

    if (type == NULL || strcmp(type, "service_account") != 0) {
        snprintf(err, errlen, "its \"type\" is %s%s%s, not "
                 "\"service_account\" (an authorized-user or external "
                 "account file is not one)", type ? "\"" : "",
                 type ? (strlen(type) < 40 ? type : "...") : "absent",
                 type ? "\"" : "");
        free(type);
        return NULL;
    }

    free(type);

    sa = calloc(1, sizeof(tb_gsa_t));
    if (sa == NULL) {
        snprintf(err, errlen, "no memory");
        return NULL;
    }

    sa->client_email = tb_gsa_member(json, len, "client_email");
    sa->private_key = tb_gsa_member(json, len, "private_key");
    sa->private_key_id = tb_gsa_member(json, len, "private_key_id");
    sa->token_uri = tb_gsa_member(json, len, "token_uri");

    if (sa->private_key_id == NULL) {
        sa->private_key_id = strdup("");
    }

    if (sa->token_uri == NULL) {
        sa->token_uri = strdup(TB_GAUTH_TOKEN_URI);
    }

    if (sa->client_email == NULL || sa->client_email[0] == '\0'
        || sa->private_key == NULL)
    {
        snprintf(err, errlen, "it has no %s",
                 sa->private_key ? "client_email" : "private_key");
        tb_gsa_free(sa);
        return NULL;
    }

    if (sa->private_key_id == NULL || sa->token_uri == NULL) {
        snprintf(err, errlen, "no memory");
        tb_gsa_free(sa);
        return NULL;
    }

    if (strncmp(sa->token_uri, "https://", 8) != 0
        && strncmp(sa->token_uri, "http://", 7) != 0)
    {
        snprintf(err, errlen, "its token_uri is not an http or https URL");
        tb_gsa_free(sa);
        return NULL;
    }

    if (!tb_gsa_header_safe(sa->client_email)
        || !tb_gsa_header_safe(sa->token_uri))
    {
        snprintf(err, errlen, "its client_email or token_uri holds a space "
                 "or a control byte");
        tb_gsa_free(sa);
        return NULL;
    }

    bio = BIO_new_mem_buf(sa->private_key, -1);
    pkey = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);

    if (pkey == NULL || EVP_PKEY_get_base_id(pkey) != EVP_PKEY_RSA) {
        snprintf(err, errlen, "its private_key is not a PEM RSA key");
        EVP_PKEY_free(pkey);
        tb_gsa_free(sa);
        return NULL;
    }

    sa->pkey = pkey;

    return sa;
}


tb_gsa_t *
tb_gsa_load(const char *path, char *err, size_t errlen)
{
    FILE      *f;
    char      *buf, why[256];
    size_t     n;
    tb_gsa_t  *sa;

    f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open %s", path);
        return NULL;
    }

    buf = malloc(TB_GSA_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        snprintf(err, errlen, "no memory");
        return NULL;
    }

    n = fread(buf, 1, TB_GSA_FILE_MAX + 1, f);
    fclose(f);

    if (n > TB_GSA_FILE_MAX) {
        OPENSSL_cleanse(buf, n);
        free(buf);
        snprintf(err, errlen, "%s is larger than 64 KB: not a key file", path);
        return NULL;
    }

    sa = tb_gsa_parse(buf, n, why, sizeof(why));

    OPENSSL_cleanse(buf, n);
    free(buf);

    if (sa == NULL) {
        snprintf(err, errlen, "%s: %s", path, why);
    }

    return sa;
}


void
tb_gsa_free(tb_gsa_t *sa)
{
    if (sa == NULL) {
        return;
    }

    if (sa->private_key) {
        OPENSSL_cleanse(sa->private_key, strlen(sa->private_key));
    }

    EVP_PKEY_free(sa->pkey);
    free(sa->client_email);
    free(sa->private_key);
    free(sa->private_key_id);
    free(sa->token_uri);
    free(sa);
}


size_t
tb_gsa_assertion(const tb_gsa_t *sa, int64_t now, char *out, size_t size,
    char *err, size_t errlen)
{
    int            n;
    size_t         hlen, clen, slen, need;
    char           kid[256], header[512], claims[1024];
    EVP_MD_CTX    *md;
    unsigned char  sig[1024];

    if (tb_json_escape(kid, sizeof(kid), sa->private_key_id,
                       strlen(sa->private_key_id)) >= sizeof(kid))
    {
        snprintf(err, errlen, "the private_key_id is too long");
        return 0;
    }

    n = snprintf(header, sizeof(header),
                 "{\"alg\":\"RS256\",\"typ\":\"JWT\"%s%s%s}",
                 kid[0] ? ",\"kid\":\"" : "", kid, kid[0] ? "\"" : "");

    hlen = (size_t) n;

    /* client_email and token_uri hold no quote or backslash (checked) */
    n = snprintf(claims, sizeof(claims),
                 "{\"iss\":\"%s\",\"scope\":\"%s\",\"aud\":\"%s\","
                 "\"iat\":%lld,\"exp\":%lld}", sa->client_email,
                 TB_GAUTH_SCOPE, sa->token_uri, (long long) now,
                 (long long) (now + TB_GAUTH_LIFETIME));

    if (n < 0 || (size_t) n >= sizeof(claims) || hlen >= sizeof(header)) {
        snprintf(err, errlen, "the client_email or token_uri is too long");
        return 0;
    }

    clen = (size_t) n;

    need = (hlen + 2) / 3 * 4 + 1 + (clen + 2) / 3 * 4 + 1
           + (sizeof(sig) + 2) / 3 * 4 + 1;

    if (size < need) {
        snprintf(err, errlen, "no room for the assertion");
        return 0;
    }

    n = (int) tb_base64url((unsigned char *) header, hlen, out);
    out[n++] = '.';
    n += (int) tb_base64url((unsigned char *) claims, clen, out + n);

    md = EVP_MD_CTX_new();
    slen = sizeof(sig);

    if (md == NULL
        || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, sa->pkey) != 1
        || EVP_DigestSign(md, sig, &slen, (unsigned char *) out, (size_t) n)
           != 1)
    {
        EVP_MD_CTX_free(md);
        snprintf(err, errlen, "the key could not sign");
        return 0;
    }

    EVP_MD_CTX_free(md);

    out[n++] = '.';
    n += (int) tb_base64url(sig, slen, out + n);

    return (size_t) n;
}


char *
tb_gsa_form(const char *assertion)
{
    int     n;
    char   *s;
    size_t  len;

    static const char  grant[] =
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
        "&assertion=";

    /* base64url and '.' need no escaping in a form */

    len = sizeof(grant) + strlen(assertion);

    s = malloc(len);
    if (s == NULL) {
        return NULL;
    }

    n = snprintf(s, len, "%s%s", grant, assertion);

    if (n < 0 || (size_t) n >= len) {
        free(s);
        return NULL;
    }

    return s;
}


int
tb_gsa_token(int status, const unsigned char *body, size_t len,
    char **token, int64_t *expires_in, char *err, size_t errlen)
{
    char     e[64], desc[200], *t;
    size_t   n;
    int64_t  ttl;

    *token = NULL;

    if (tb_json_validate(body, len) != 0) {
        snprintf(err, errlen, "the token endpoint answered %d with a body "
                 "that is not JSON", status);
        return -1;
    }

    if (status != 200) {
        e[0] = '\0';
        desc[0] = '\0';
        (void) tb_json_get_str(body, len, "error", e, sizeof(e), &n);
        (void) tb_json_get_str(body, len, "error_description", desc,
                               sizeof(desc), &n);

        for (n = 0; desc[n]; n++) {
            if ((unsigned char) desc[n] < 0x20) {
                desc[n] = ' ';
            }
        }

        for (n = 0; e[n]; n++) {
            if ((unsigned char) e[n] < 0x20) {
                e[n] = ' ';
            }
        }

        snprintf(err, errlen, "the token endpoint answered %d: %s%s%s",
                 status, e[0] ? e : "no error named",
                 desc[0] ? ": " : "", desc);
        return -1;
    }

    if (tb_json_get_str(body, len, "access_token", e, 1, &n) != 0
        || n == 0 || n > TB_GAUTH_TOKEN_MAX)
    {
        snprintf(err, errlen, "the token endpoint's answer has no "
                 "access_token of at most %d bytes", TB_GAUTH_TOKEN_MAX);
        return -1;
    }

    if (tb_json_get_int(body, len, "expires_in", &ttl) != 0 || ttl <= 0) {
        snprintf(err, errlen, "the token endpoint's answer has no positive "
                 "expires_in");
        return -1;
    }

    t = malloc(n + 1);
    if (t == NULL) {
        snprintf(err, errlen, "no memory");
        return -1;
    }

    (void) tb_json_get_str(body, len, "access_token", t, n + 1, &n);

    if (strlen(t) != n || !tb_gsa_header_safe(t)) {
        /* it goes into a header line: nothing but visible ASCII */
        OPENSSL_cleanse(t, n);
        free(t);
        snprintf(err, errlen, "the access_token holds a byte a header "
                 "value cannot");
        return -1;
    }

    *token = t;
    *expires_in = ttl;

    return 0;
}
