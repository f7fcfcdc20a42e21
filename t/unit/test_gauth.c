/*
 * Unit tests: a Google service account's key file, the RS256 assertion
 * made for it (verified with the key pair's public half, its header and
 * claims decoded), and the token endpoint's answers.
 */

#include <stdlib.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/ec.h>

#include "tb_test.h"
#include "tb_gauth.h"
#include "tb_json.h"


static EVP_PKEY  *key;
static char       pem[8192];


static void
make_key(void)
{
    BIO     *bio;
    size_t   n;
    char    *p;

    key = EVP_RSA_gen(2048);

    bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL);
    n = (size_t) BIO_get_mem_data(bio, &p);
    memcpy(pem, p, n);
    pem[n] = '\0';
    BIO_free(bio);
}


/* the key file's JSON: the PEM with its line breaks escaped */
static char *
key_file(const char *type, const char *email, const char *uri,
    const char *pemtext)
{
    char   *out, *w;
    size_t  i;

    out = malloc(16384);
    w = out + sprintf(out, "{\"type\":\"%s\",\"project_id\":\"p\","
                      "\"private_key_id\":\"k1d\",\"private_key\":\"", type);

    for (i = 0; pemtext[i]; i++) {
        if (pemtext[i] == '\n') {
            *w++ = '\\';
            *w++ = 'n';

        } else {
            *w++ = pemtext[i];
        }
    }

    sprintf(w, "\",\"client_email\":\"%s\"%s%s%s}", email,
            uri ? ",\"token_uri\":\"" : "", uri ? uri : "", uri ? "\"" : "");

    return out;
}


static size_t
unb64url(const char *s, size_t n, unsigned char *out)
{
    size_t    i, w;
    int       bits, k;
    uint32_t  acc;
    char      c;

    acc = 0;
    bits = 0;
    w = 0;

    for (i = 0; i < n; i++) {
        c = s[i];
        k = (c >= 'A' && c <= 'Z') ? c - 'A'
            : (c >= 'a' && c <= 'z') ? c - 'a' + 26
            : (c >= '0' && c <= '9') ? c - '0' + 52
            : c == '-' ? 62 : c == '_' ? 63 : -1;

        if (k < 0) {
            return (size_t) -1;
        }

        acc = acc << 6 | (uint32_t) k;
        bits += 6;

        if (bits >= 8) {
            bits -= 8;
            out[w++] = (unsigned char) (acc >> bits);
        }
    }

    return w;
}


TB_TEST(key_files)
{
    char        *f, err[256];
    tb_gsa_t    *sa;
    EVP_PKEY    *ec;
    BIO         *bio;
    char        *p, ecpem[2048];
    size_t       n;

    f = key_file("service_account", "svc@p.iam.gserviceaccount.com",
                 "http://127.0.0.1:9/token", pem);
    sa = tb_gsa_parse(f, strlen(f), err, sizeof(err));
    TB_CHECK(sa != NULL);
    if (sa) {
        TB_CHECK_STR(sa->client_email, "svc@p.iam.gserviceaccount.com");
        TB_CHECK_STR(sa->token_uri, "http://127.0.0.1:9/token");
        TB_CHECK_STR(sa->private_key_id, "k1d");
    }
    tb_gsa_free(sa);
    free(f);

    /* token_uri: Google's when the file has none */
    f = key_file("service_account", "svc@p", NULL, pem);
    sa = tb_gsa_parse(f, strlen(f), err, sizeof(err));
    TB_CHECK(sa && strcmp(sa->token_uri, TB_GAUTH_TOKEN_URI) == 0);
    tb_gsa_free(sa);
    free(f);

    /* what is not one, each said; never the key's bytes */
    f = key_file("authorized_user", "svc@p", NULL, pem);
    TB_CHECK(tb_gsa_parse(f, strlen(f), err, sizeof(err)) == NULL);
    TB_CHECK_CONTAINS(err, "not \"service_account\"");
    free(f);

    f = key_file("service_account", "", NULL, pem);
    TB_CHECK(tb_gsa_parse(f, strlen(f), err, sizeof(err)) == NULL);
    TB_CHECK_CONTAINS(err, "no client_email");
    free(f);

    f = key_file("service_account", "svc@p", "ftp://x/token", pem);
    TB_CHECK(tb_gsa_parse(f, strlen(f), err, sizeof(err)) == NULL);
    TB_CHECK_CONTAINS(err, "token_uri is not an http or https URL");
    free(f);

    f = key_file("service_account", "svc@p", "http://x/a b", pem);
    TB_CHECK(tb_gsa_parse(f, strlen(f), err, sizeof(err)) == NULL);
    free(f);

    f = key_file("service_account", "svc@p", NULL,
                 "-----BEGIN PRIVATE KEY-----\nnotakey\n-----END PRIVATE "
                 "KEY-----\n");
    TB_CHECK(tb_gsa_parse(f, strlen(f), err, sizeof(err)) == NULL);
    TB_CHECK_CONTAINS(err, "not a PEM RSA key");
    TB_CHECK(strstr(err, "notakey") == NULL);
    free(f);

    /* an EC key is not RSA */
    ec = EVP_EC_gen("P-256");
    bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, ec, NULL, NULL, 0, NULL, NULL);
    n = (size_t) BIO_get_mem_data(bio, &p);
    memcpy(ecpem, p, n);
    ecpem[n] = '\0';
    BIO_free(bio);
    EVP_PKEY_free(ec);

    f = key_file("service_account", "svc@p", NULL, ecpem);
    TB_CHECK(tb_gsa_parse(f, strlen(f), err, sizeof(err)) == NULL);
    TB_CHECK_CONTAINS(err, "not a PEM RSA key");
    free(f);

    TB_CHECK(tb_gsa_parse("{not json", 9, err, sizeof(err)) == NULL);
    TB_CHECK_CONTAINS(err, "not JSON");

    TB_CHECK(tb_gsa_load("/nonexistent/key.json", err, sizeof(err)) == NULL);
    TB_CHECK_CONTAINS(err, "cannot open /nonexistent/key.json");
}


TB_TEST(the_assertion_verifies)
{
    char            *f, err[256], out[4096], part[1024], *dot1, *dot2;
    size_t           n, m;
    int64_t          v;
    tb_gsa_t        *sa;
    EVP_MD_CTX      *md;
    unsigned char    sig[1024];

    f = key_file("service_account", "svc@p.iam.gserviceaccount.com",
                 "http://127.0.0.1:9/token", pem);
    sa = tb_gsa_parse(f, strlen(f), err, sizeof(err));
    free(f);
    TB_CHECK(sa != NULL);
    if (sa == NULL) {
        return;
    }

    n = tb_gsa_assertion(sa, 1750000000, out, sizeof(out), err, sizeof(err));
    TB_CHECK(n > 0 && n == strlen(out));

    dot1 = strchr(out, '.');
    dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
    TB_CHECK(dot1 && dot2 && strchr(dot2 + 1, '.') == NULL);
    if (!dot1 || !dot2) {
        tb_gsa_free(sa);
        return;
    }

    m = unb64url(out, (size_t) (dot1 - out), (unsigned char *) part);
    part[m] = '\0';
    TB_CHECK_STR(part, "{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"k1d\"}");

    m = unb64url(dot1 + 1, (size_t) (dot2 - dot1 - 1), (unsigned char *) part);
    part[m] = '\0';
    TB_CHECK(tb_json_validate((unsigned char *) part, m) == 0);
    TB_CHECK(tb_json_get_int((unsigned char *) part, m, "iat", &v) == 0
             && v == 1750000000);
    TB_CHECK(tb_json_get_int((unsigned char *) part, m, "exp", &v) == 0
             && v == 1750003600);
    TB_CHECK_CONTAINS(part, "\"iss\":\"svc@p.iam.gserviceaccount.com\"");
    TB_CHECK_CONTAINS(part, "\"aud\":\"http://127.0.0.1:9/token\"");
    TB_CHECK_CONTAINS(part, "\"scope\":\"https://www.googleapis.com/auth/"
                            "cloud-platform\"");

    /* RS256 over "header.claims", with the public half */
    m = unb64url(dot2 + 1, strlen(dot2 + 1), sig);
    TB_CHECK_INT(m, 256);
    md = EVP_MD_CTX_new();
    TB_CHECK(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key) == 1);
    TB_CHECK(EVP_DigestVerify(md, sig, m, (unsigned char *) out,
                              (size_t) (dot2 - out)) == 1);

    /* one bit of the claims changed: it does not */
    out[dot1 - out + 5] ^= 1;
    TB_CHECK(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key) == 1);
    TB_CHECK(EVP_DigestVerify(md, sig, m, (unsigned char *) out,
                              (size_t) (dot2 - out)) != 1);
    EVP_MD_CTX_free(md);

    /* no room */
    TB_CHECK_INT(tb_gsa_assertion(sa, 1, out, 100, err, sizeof(err)), 0);

    f = tb_gsa_form("a.b.c");
    TB_CHECK_STR(f, "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3A"
                    "jwt-bearer&assertion=a.b.c");
    free(f);

    tb_gsa_free(sa);
}


TB_TEST(token_answers)
{
    char     err[256], *t;
    int64_t  ttl;

#define ANSWER(s, body)                                                       \
    tb_gsa_token(s, (const unsigned char *) body, sizeof(body) - 1, &t, &ttl, \
                 err, sizeof(err))

    TB_CHECK_INT(ANSWER(200, "{\"access_token\":\"ya29.abc-_.~+/=\","
                        "\"expires_in\":3599,\"token_type\":\"Bearer\"}"), 0);
    TB_CHECK_STR(t, "ya29.abc-_.~+/=");
    TB_CHECK_INT(ttl, 3599);
    free(t);

    TB_CHECK_INT(ANSWER(400, "{\"error\":\"invalid_grant\","
                        "\"error_description\":\"Invalid JWT Signature.\"}"),
                 -1);
    TB_CHECK_STR(err, "the token endpoint answered 400: invalid_grant: "
                      "Invalid JWT Signature.");
    TB_CHECK(t == NULL);

    TB_CHECK_INT(ANSWER(200, "{\"expires_in\":3599}"), -1);
    TB_CHECK_CONTAINS(err, "no access_token");

    TB_CHECK_INT(ANSWER(200, "{\"access_token\":\"x\"}"), -1);
    TB_CHECK_CONTAINS(err, "no positive expires_in");

    TB_CHECK_INT(ANSWER(200, "{\"access_token\":\"x\",\"expires_in\":0}"), -1);

    /* a token that would split or end a header line */
    TB_CHECK_INT(ANSWER(200, "{\"access_token\":\"x\\r\\nX-Evil: 1\","
                        "\"expires_in\":60}"), -1);
    TB_CHECK_CONTAINS(err, "a byte a header value cannot");
    TB_CHECK_INT(ANSWER(200, "{\"access_token\":\"a b\",\"expires_in\":60}"),
                 -1);
    TB_CHECK_INT(ANSWER(200, "{\"access_token\":\"a\\u0000b\","
                        "\"expires_in\":60}"), -1);

    TB_CHECK_INT(ANSWER(502, "<html>bad gateway</html>"), -1);
    TB_CHECK_CONTAINS(err, "answered 502 with a body that is not JSON");

#undef ANSWER
}


TB_TEST(base64url)
{
    char  out[16];

    TB_CHECK_INT(tb_base64url((unsigned char *) "", 0, out), 0);
    TB_CHECK_INT(tb_base64url((unsigned char *) "f", 1, out), 2);
    TB_CHECK_STR(out, "Zg");
    tb_base64url((unsigned char *) "fo", 2, out);
    TB_CHECK_STR(out, "Zm8");
    tb_base64url((unsigned char *) "foo", 3, out);
    TB_CHECK_STR(out, "Zm9v");
    tb_base64url((unsigned char *) "\xfb\xff", 2, out);
    TB_CHECK_STR(out, "-_8");
}


int
main(void)
{
    make_key();

    TB_RUN(key_files);
    TB_RUN(the_assertion_verifies);
    TB_RUN(token_answers);
    TB_RUN(base64url);

    EVP_PKEY_free(key);

    return tb_test_done();
}
