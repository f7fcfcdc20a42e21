/*
 * Credentials at rest: sealed with AES-256-GCM under the store's secret
 * key, as text that fits a column or a line,
 *
 *     tbs1.<key id>.<base64 of nonce | ciphertext | tag>
 *
 * where the key id is the first 8 hex digits of SHA-256 over the key, so
 * that opening with another key says so instead of "tampered".  What the
 * credential belongs to (an account id) is bound in as additional data: a
 * sealed value moved to another row does not open.
 *
 * The secret key comes from TOKENBIRYANI_SECRET_KEY or a file, as 64 hex
 * digits; a file readable by group or others is refused.
 *
 * Plain C (OpenSSL's libcrypto), no nginx headers.  The file functions
 * read or create one small file: for configuration time, not a request.
 */

#ifndef TB_SEAL_H
#define TB_SEAL_H

#include <stddef.h>


#define TB_SEAL_KEY_LEN       32
#define TB_SEAL_NONCE_LEN     12
#define TB_SEAL_TAG_LEN       16
#define TB_SEAL_PREFIX        "tbs1."
#define TB_SEAL_KID_LEN       8

/* the text a credential of n bytes seals to, with its NUL */
#define TB_SEAL_TEXT_LEN(n)                                                  \
    (sizeof(TB_SEAL_PREFIX) - 1 + TB_SEAL_KID_LEN + 1                        \
     + ((TB_SEAL_NONCE_LEN + (n) + TB_SEAL_TAG_LEN + 2) / 3) * 4 + 1)


typedef enum {
    TB_SEAL_OK = 0,
    TB_SEAL_ERROR,          /* out of memory, no randomness, buffer size */
    TB_SEAL_FORMAT,         /* not a sealed value of a version we know */
    TB_SEAL_OTHER_KEY,      /* sealed under another key */
    TB_SEAL_FORGED          /* this key, but tag, data or context differ */
} tb_seal_rc_e;


typedef struct {
    unsigned char             key[TB_SEAL_KEY_LEN];
    char                      kid[TB_SEAL_KID_LEN + 1];
} tb_seal_key_t;


/* the key from 64 hex digits (surrounding whitespace allowed); 0 or -1 */
int tb_seal_key_parse(tb_seal_key_t *k, const char *hex, size_t len);

/*
 * The key from a file of 64 hex digits, created (0600, 32 random bytes)
 * when create is set and the file does not exist.  -1 with a message in
 * err naming the file and the problem: missing, unreadable, readable by
 * group or others, not 64 hex digits.
 */
int tb_seal_key_file(tb_seal_key_t *k, const char *path, int create,
    char *err, size_t errsize);

void tb_seal_key_wipe(tb_seal_key_t *k);

/* seals n bytes of p for context ctx into out (TB_SEAL_TEXT_LEN(n)) */
tb_seal_rc_e tb_seal(const tb_seal_key_t *k, const void *p, size_t n,
    const char *ctx, size_t ctxlen, char *out, size_t outsize);

/* opens what tb_seal() made; the plaintext into out, its length in *n */
tb_seal_rc_e tb_unseal(const tb_seal_key_t *k, const char *text,
    size_t len, const char *ctx, size_t ctxlen, unsigned char *out,
    size_t outsize, size_t *n);

/* what a return code means, for an error message */
const char *tb_seal_strerror(tb_seal_rc_e rc);

#endif /* TB_SEAL_H */
