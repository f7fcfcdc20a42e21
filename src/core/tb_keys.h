/*
 * Virtual keys: a client's key is hashed with SipHash-2-4-128 under a
 * secret drawn when the table is built and compared with the configured
 * keys' digests in constant time, so neither the key nor the position of
 * a mismatch leaks through timing (without the secret nobody can choose a
 * key by its digest), and no plaintext key needs to stay in a request's
 * memory.  A keyed hash of a short key costs a tenth of a SHA-256.
 *
 * Plain C (OpenSSL's libcrypto), no nginx headers.
 */

#ifndef TB_KEYS_H
#define TB_KEYS_H

#include <stddef.h>

#include "tb_config.h"
#include "tb_hash.h"


#define TB_DIGEST_LEN         32


#define TB_KEY_DIGEST_LEN     TB_SIPHASH_LEN


typedef struct {
    unsigned char             digest[TB_KEY_DIGEST_LEN];
    const tb_key_conf_t      *conf;
} tb_keyent_t;


typedef struct {
    tb_keyent_t              *ents;
    size_t                    n;
    unsigned char             secret[TB_SIPHASH_KEY_LEN];
} tb_keytab_t;


void tb_sha256(const void *p, size_t n, unsigned char out[TB_DIGEST_LEN]);

/* builds the table from cf->keys; 0 or -1 (out of memory, no randomness) */
int tb_keytab_build(tb_keytab_t *t, const tb_config_t *cf);
void tb_keytab_free(tb_keytab_t *t);

/* the key's configuration, or NULL; every entry is compared */
const tb_key_conf_t *tb_keytab_lookup(const tb_keytab_t *t,
    const unsigned char *key, size_t len);

/* a non-secret label for logs: the first 8 hex digits of the digest */
void tb_key_label(const unsigned char *key, size_t len, char out[9]);

#endif /* TB_KEYS_H */
