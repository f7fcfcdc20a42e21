/*
 * Virtual key table.
 */

#include <stdlib.h>
#include <string.h>

/* the one-shot and the EVP calls allocate, or look the digest up, on
 * every call; the plain SHA-256 functions do neither */
#define OPENSSL_SUPPRESS_DEPRECATED  1

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "tb_keys.h"
#include "tb_parse.h"


void
tb_sha256(const void *p, size_t n, unsigned char out[TB_DIGEST_LEN])
{
    SHA256_CTX  c;

    SHA256_Init(&c);
    SHA256_Update(&c, p, n);
    SHA256_Final(out, &c);

    OPENSSL_cleanse(&c, sizeof(c));
}


int
tb_keytab_build(tb_keytab_t *t, const tb_config_t *cf)
{
    size_t  i;

    t->ents = NULL;
    t->n = 0;

    if (cf->nkeys == 0) {
        return 0;
    }

    if (RAND_bytes(t->secret, sizeof(t->secret)) != 1) {
        return -1;
    }

    t->ents = calloc(cf->nkeys, sizeof(tb_keyent_t));
    if (t->ents == NULL) {
        OPENSSL_cleanse(t->secret, sizeof(t->secret));
        return -1;
    }

    for (i = 0; i < cf->nkeys; i++) {
        tb_siphash128(t->secret, cf->keys[i].key, strlen(cf->keys[i].key),
                      t->ents[i].digest);
        t->ents[i].conf = &cf->keys[i];
    }

    t->n = cf->nkeys;

    return 0;
}


void
tb_keytab_free(tb_keytab_t *t)
{
    if (t->ents) {
        OPENSSL_cleanse(t->ents, t->n * sizeof(tb_keyent_t));
        free(t->ents);
    }

    OPENSSL_cleanse(t->secret, sizeof(t->secret));

    t->ents = NULL;
    t->n = 0;
}


static int
tb_digest_eq(const unsigned char *a, const unsigned char *b)
{
    size_t    i;
    uint64_t  x, y, d;

    d = 0;

    for (i = 0; i < TB_KEY_DIGEST_LEN; i += 8) {
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        d |= x ^ y;
    }

    return d == 0;
}


const tb_key_conf_t *
tb_keytab_lookup(const tb_keytab_t *t, const unsigned char *key, size_t len)
{
    size_t                i;
    unsigned char         digest[TB_KEY_DIGEST_LEN];
    const tb_key_conf_t  *found;

    if (len == 0 || t->n == 0) {
        return NULL;
    }

    tb_siphash128(t->secret, key, len, digest);

    found = NULL;

    /*
     * No early exit, and the digests compared a word at a time without a
     * branch on their bytes: the time taken does not depend on which key,
     * if any, matched.
     */

    for (i = 0; i < t->n; i++) {
        if (tb_digest_eq(digest, t->ents[i].digest)) {
            found = t->ents[i].conf;
        }
    }

    OPENSSL_cleanse(digest, sizeof(digest));

    return found;
}


void
tb_key_label(const unsigned char *key, size_t len, char out[9])
{
    unsigned char  digest[TB_DIGEST_LEN];

    tb_sha256(key, len, digest);
    tb_format_hex(digest, 4, out);

    out[8] = '\0';
}
