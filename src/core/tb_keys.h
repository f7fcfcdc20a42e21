/*
 * Virtual keys: a client's key is hashed with SHA-256 and compared with
 * the configured keys' digests in constant time, so neither the key nor
 * the position of a mismatch leaks through timing, and no plaintext key
 * needs to stay in a request's memory.
 *
 * Plain C (OpenSSL's libcrypto), no nginx headers.
 */

#ifndef TB_KEYS_H
#define TB_KEYS_H

#include <stddef.h>

#include "tb_config.h"


#define TB_DIGEST_LEN         32


typedef struct {
    unsigned char             digest[TB_DIGEST_LEN];
    const tb_key_conf_t      *conf;
} tb_keyent_t;


typedef struct {
    tb_keyent_t              *ents;
    size_t                    n;
} tb_keytab_t;


void tb_sha256(const void *p, size_t n, unsigned char out[TB_DIGEST_LEN]);

/* builds the table from cf->keys; 0 or -1 (out of memory) */
int tb_keytab_build(tb_keytab_t *t, const tb_config_t *cf);
void tb_keytab_free(tb_keytab_t *t);

/* the key's configuration, or NULL; every entry is compared */
const tb_key_conf_t *tb_keytab_lookup(const tb_keytab_t *t,
    const unsigned char *key, size_t len);

/* a non-secret label for logs: the first 8 hex digits of the digest */
void tb_key_label(const unsigned char *key, size_t len, char out[9]);

#endif /* TB_KEYS_H */
