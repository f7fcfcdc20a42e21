/*
 * Google service accounts, for Vertex AI: the key file read, the signed
 * assertion (an RS256 JWT) that the token endpoint trades for an access
 * token, and that endpoint's answer.
 *
 *   assertion = base64url(header) "." base64url(claims) "." base64url(sig)
 *   header    = {"alg":"RS256","typ":"JWT","kid":<private_key_id>}
 *   claims    = {"iss":<client_email>,"scope":<scope>,"aud":<token_uri>,
 *                "iat":now,"exp":now+3600}
 *   sig       = RSASSA-PKCS1-v1_5 with SHA-256 over header "." claims
 *
 * POSTed as application/x-www-form-urlencoded
 * grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=...
 *
 * Plain C, no nginx headers; OpenSSL for RSA.
 */

#ifndef TB_GAUTH_H
#define TB_GAUTH_H

#include <stddef.h>
#include <stdint.h>


#define TB_GAUTH_SCOPE        "https://www.googleapis.com/auth/cloud-platform"
#define TB_GAUTH_TOKEN_URI    "https://oauth2.googleapis.com/token"
#define TB_GAUTH_LIFETIME     3600
#define TB_GAUTH_TOKEN_MAX    4096     /* an access token longer: refused */


typedef struct {
    char                     *client_email;    /* malloc()ed */
    char                     *private_key;     /* PEM */
    char                     *private_key_id;  /* "" when absent */
    char                     *token_uri;
    void                     *pkey;            /* EVP_PKEY, RSA */
} tb_gsa_t;


/*
 * A service account's key file (JSON, "type": "service_account"): a new
 * tb_gsa_t, its private key parsed and checked to be RSA, or NULL with
 * the reason in err (never a byte of the key in it).
 */
tb_gsa_t *tb_gsa_parse(const char *json, size_t len, char *err,
    size_t errlen);
tb_gsa_t *tb_gsa_load(const char *path, char *err, size_t errlen);
void tb_gsa_free(tb_gsa_t *sa);

/*
 * The signed assertion for now (Unix seconds) into out, NUL-terminated:
 * its length, or 0 (err says why).
 */
size_t tb_gsa_assertion(const tb_gsa_t *sa, int64_t now, char *out,
    size_t size, char *err, size_t errlen);

/* the form body the token endpoint takes, for an assertion: malloc()ed */
char *tb_gsa_form(const char *assertion);

/*
 * The token endpoint's answer: 0 with the access token (malloc()ed; only
 * the bytes a header value may hold) and its lifetime in seconds, or -1
 * with the reason in err: the endpoint's own "error" and
 * "error_description", or what is wrong with the answer.
 */
int tb_gsa_token(int status, const unsigned char *body, size_t len,
    char **token, int64_t *expires_in, char *err, size_t errlen);

/* base64url without padding, for the tests too: bytes written */
size_t tb_base64url(const unsigned char *p, size_t n, char *out);


#endif /* TB_GAUTH_H */
