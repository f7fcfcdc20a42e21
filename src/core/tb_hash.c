/*
 * 64-bit hashing: 16 bytes per round through a 64x64->128-bit multiply,
 * folded (the "mum" construction), with little-endian loads so the value
 * is the same on every machine.  And SipHash-2-4 (Aumasson and Bernstein,
 * 2012) with 128-bit output, written from its specification.
 */

#include <string.h>

#include "tb_hash.h"


#define TB_K0  0xa0761d6478bd642fULL
#define TB_K1  0xe7037ed1a0b428dbULL
#define TB_K2  0x8ebc6af09c88c6e3ULL
#define TB_K3  0x589965cc75374cc3ULL


static uint64_t
tb_mum(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    __uint128_t  r;

    r = (__uint128_t) a * b;

    return (uint64_t) r ^ (uint64_t) (r >> 64);
#else
    uint64_t  ha, hb, la, lb, hi, lo, rh, rm0, rm1, rl, t;

    ha = a >> 32; hb = b >> 32; la = (uint32_t) a; lb = (uint32_t) b;
    rh = ha * hb; rm0 = ha * lb; rm1 = hb * la; rl = la * lb;
    t = rl + (rm0 << 32);
    lo = t + (rm1 << 32);
    hi = rh + (rm0 >> 32) + (rm1 >> 32) + (t < rl) + (lo < t);

    return hi ^ lo;
#endif
}


static uint64_t
tb_load64(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t  v;

    /* one load where the byte order allows it */
    memcpy(&v, p, 8);

    return v;
#else
    return (uint64_t) p[0] | (uint64_t) p[1] << 8 | (uint64_t) p[2] << 16
           | (uint64_t) p[3] << 24 | (uint64_t) p[4] << 32
           | (uint64_t) p[5] << 40 | (uint64_t) p[6] << 48
           | (uint64_t) p[7] << 56;
#endif
}


static uint64_t
tb_load_tail(const unsigned char *p, size_t n)
{
    uint64_t  v;

    for (v = 0; n; n--) {
        v = v << 8 | p[n - 1];
    }

    return v;
}


uint64_t
tb_hash64(uint64_t seed, const void *data, size_t n)
{
    uint64_t              h;
    const unsigned char  *p;

    p = data;
    h = seed ^ TB_K0 ^ tb_mum(n ^ TB_K1, TB_K2);

    while (n >= 16) {
        h = tb_mum(tb_load64(p) ^ TB_K1, tb_load64(p + 8) ^ h);
        p += 16;
        n -= 16;
    }

    if (n >= 8) {
        h = tb_mum(tb_load64(p) ^ TB_K2, h ^ TB_K3);
        p += 8;
        n -= 8;
    }

    if (n) {
        h = tb_mum(tb_load_tail(p, n) ^ TB_K3, h ^ TB_K1);
    }

    return tb_mum(h ^ TB_K0, h ^ TB_K2);
}


void
tb_hash_init(tb_hash_t *st, uint64_t seed)
{
    st->h = seed ^ TB_K1;
    st->len = 0;
}


void
tb_hash_update(tb_hash_t *st, const void *p, size_t n)
{
    /* each piece is hashed whole and folded in: pieces are fields */
    st->h = tb_hash_mix(st->h, tb_hash64(st->len, p, n));
    st->len += n;
}


void
tb_hash_sep(tb_hash_t *st, unsigned tag)
{
    st->h = tb_hash_mix(st->h, (uint64_t) tag + 0x9e3779b97f4a7c15ULL);
    st->len++;
}


uint64_t
tb_hash_final(const tb_hash_t *st)
{
    return tb_hash_mix(st->h, st->len);
}


#define TB_ROTL(x, b)  (uint64_t) (((x) << (b)) | ((x) >> (64 - (b))))

#define TB_SIPROUND                                                         \
    do {                                                                    \
        v0 += v1; v1 = TB_ROTL(v1, 13); v1 ^= v0; v0 = TB_ROTL(v0, 32);    \
        v2 += v3; v3 = TB_ROTL(v3, 16); v3 ^= v2;                          \
        v0 += v3; v3 = TB_ROTL(v3, 21); v3 ^= v0;                          \
        v2 += v1; v1 = TB_ROTL(v1, 17); v1 ^= v2; v2 = TB_ROTL(v2, 32);    \
    } while (0)


static void
tb_store64(unsigned char *p, uint64_t v)
{
    unsigned  i;

    for (i = 0; i < 8; i++) {
        p[i] = (unsigned char) (v >> (8 * i));
    }
}


void
tb_siphash128(const unsigned char key[TB_SIPHASH_KEY_LEN], const void *data,
    size_t n, unsigned char out[TB_SIPHASH_LEN])
{
    size_t                left;
    uint64_t              k0, k1, v0, v1, v2, v3, m, b;
    const unsigned char  *p;

    p = data;

    k0 = tb_load64(key);
    k1 = tb_load64(key + 8);

    v0 = k0 ^ 0x736f6d6570736575ULL;
    v1 = k1 ^ 0x646f72616e646f6dULL ^ 0xee;
    v2 = k0 ^ 0x6c7967656e657261ULL;
    v3 = k1 ^ 0x7465646279746573ULL;

    b = (uint64_t) n << 56;

    for (left = n; left >= 8; left -= 8, p += 8) {
        m = tb_load64(p);

        v3 ^= m;
        TB_SIPROUND;
        TB_SIPROUND;
        v0 ^= m;
    }

    b |= tb_load_tail(p, left);

    v3 ^= b;
    TB_SIPROUND;
    TB_SIPROUND;
    v0 ^= b;

    v2 ^= 0xee;
    TB_SIPROUND;
    TB_SIPROUND;
    TB_SIPROUND;
    TB_SIPROUND;
    tb_store64(out, v0 ^ v1 ^ v2 ^ v3);

    v1 ^= 0xdd;
    TB_SIPROUND;
    TB_SIPROUND;
    TB_SIPROUND;
    TB_SIPROUND;
    tb_store64(out + 8, v0 ^ v1 ^ v2 ^ v3);
}
