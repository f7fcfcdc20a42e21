/*
 * A fast 64-bit hash for affinity keys, tie-breaks and model names: not
 * cryptographic, but well mixed, deterministic across processes and
 * machines, and quick on long inputs.  And SipHash-2-4 with its 128-bit
 * output, a keyed pseudorandom function, for what an attacker must not be
 * able to steer: the digests virtual keys are compared by.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_HASH_H
#define TB_HASH_H

#include <stddef.h>
#include <stdint.h>


typedef struct {
    uint64_t                  h;
    uint64_t                  len;
} tb_hash_t;


void tb_hash_init(tb_hash_t *st, uint64_t seed);
void tb_hash_update(tb_hash_t *st, const void *p, size_t n);
/* a field separator, so that ("ab","c") and ("a","bc") differ */
void tb_hash_sep(tb_hash_t *st, unsigned tag);
uint64_t tb_hash_final(const tb_hash_t *st);

uint64_t tb_hash64(uint64_t seed, const void *p, size_t n);

#define TB_SIPHASH_KEY_LEN    16
#define TB_SIPHASH_LEN        16

/* SipHash-2-4-128 of p under key, as its reference implementation gives */
void tb_siphash128(const unsigned char key[TB_SIPHASH_KEY_LEN],
    const void *p, size_t n, unsigned char out[TB_SIPHASH_LEN]);

/* combines two hashes (order matters): a 64x64->128-bit multiply, folded */
static inline uint64_t
tb_hash_mix(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    __uint128_t  r;

    r = (__uint128_t) (a ^ 0xa0761d6478bd642fULL)
        * (b ^ 0x589965cc75374cc3ULL);

    return (uint64_t) r ^ (uint64_t) (r >> 64);
#else
    return tb_hash64(a, &b, sizeof(b));
#endif
}

#endif /* TB_HASH_H */
