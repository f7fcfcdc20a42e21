/*
 * A fast 64-bit hash for affinity keys, tie-breaks and model names: not
 * cryptographic (keys are compared by SHA-256 elsewhere), but well mixed,
 * deterministic across processes and machines, and quick on long inputs.
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
