/*
 * Authenticated records and messages (see tb_record.h).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "tb_record.h"


#define TB_HMAC_BLOCK         64


static const char  tb_b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static const char  tb_hexd[] = "0123456789abcdef";


/* HMAC-SHA-256 over parts fed one after another */

typedef struct {
    EVP_MD_CTX               *md;
    const tb_rec_key_t       *rk;
    int                       ok;
} tb_hmac_t;


static void
tb_hmac_begin(tb_hmac_t *h, const tb_rec_key_t *rk)
{
    size_t         i;
    unsigned char  pad[TB_HMAC_BLOCK];

    h->rk = rk;
    h->md = EVP_MD_CTX_new();
    h->ok = 0;

    if (h->md == NULL) {
        return;
    }

    memset(pad, 0x36, sizeof(pad));

    for (i = 0; i < sizeof(rk->key); i++) {
        pad[i] ^= rk->key[i];
    }

    h->ok = EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) == 1
            && EVP_DigestUpdate(h->md, pad, sizeof(pad)) == 1;

    OPENSSL_cleanse(pad, sizeof(pad));
}


static void
tb_hmac_update(tb_hmac_t *h, const void *p, size_t n)
{
    if (h->ok && n) {
        h->ok = EVP_DigestUpdate(h->md, p, n) == 1;
    }
}


/* a length, then the bytes */
static void
tb_hmac_part(tb_hmac_t *h, const void *p, size_t n)
{
    unsigned char  len[4];

    len[0] = (unsigned char) (n >> 24);
    len[1] = (unsigned char) (n >> 16);
    len[2] = (unsigned char) (n >> 8);
    len[3] = (unsigned char) n;

    tb_hmac_update(h, len, 4);
    tb_hmac_update(h, p, n);
}


static int
tb_hmac_end(tb_hmac_t *h, unsigned char out[32])
{
    size_t         i;
    unsigned int   len;
    unsigned char  pad[TB_HMAC_BLOCK], inner[32];

    if (h->md == NULL) {
        return -1;
    }

    if (h->ok) {
        h->ok = EVP_DigestFinal_ex(h->md, inner, &len) == 1 && len == 32;
    }

    memset(pad, 0x5c, sizeof(pad));

    for (i = 0; i < sizeof(h->rk->key); i++) {
        pad[i] ^= h->rk->key[i];
    }

    if (h->ok) {
        h->ok = EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) == 1
                && EVP_DigestUpdate(h->md, pad, sizeof(pad)) == 1
                && EVP_DigestUpdate(h->md, inner, sizeof(inner)) == 1
                && EVP_DigestFinal_ex(h->md, out, &len) == 1 && len == 32;
    }

    OPENSSL_cleanse(pad, sizeof(pad));
    OPENSSL_cleanse(inner, sizeof(inner));
    EVP_MD_CTX_free(h->md);
    h->md = NULL;

    return h->ok ? 0 : -1;
}


void
tb_rec_key_init(tb_rec_key_t *rk, const tb_seal_key_t *k)
{
    tb_hmac_t     h;
    tb_rec_key_t  seal;

    /* HMAC(secret key, label): the sealing key is used for nothing else */

    memset(&seal, 0, sizeof(seal));
    memcpy(seal.key, k->key, sizeof(seal.key));

    memset(rk, 0, sizeof(tb_rec_key_t));

    tb_hmac_begin(&h, &seal);
    tb_hmac_update(&h, "tokenbiryani record authentication v1",
                   sizeof("tokenbiryani record authentication v1") - 1);

    if (tb_hmac_end(&h, rk->key) == 0) {
        memcpy(rk->kid, k->kid, sizeof(rk->kid));
        rk->set = 1;
    }

    OPENSSL_cleanse(&seal, sizeof(seal));
}


void
tb_rec_key_wipe(tb_rec_key_t *rk)
{
    OPENSSL_cleanse(rk, sizeof(tb_rec_key_t));
}


static int
tb_rec_mac(const tb_rec_key_t *rk, int kind, const char *name, size_t nlen,
    const void *bound, size_t blen, uint64_t gen, const char *payload,
    size_t plen, unsigned char mac[32])
{
    int            i;
    tb_hmac_t      h;
    unsigned char  head[6 + 8];

    memcpy(head, "tba1", 4);
    head[4] = 0;
    head[5] = (unsigned char) kind;

    for (i = 0; i < 8; i++) {
        head[6 + i] = (unsigned char) (gen >> (56 - 8 * i));
    }

    tb_hmac_begin(&h, rk);
    tb_hmac_update(&h, head, 4);
    tb_hmac_update(&h, "", 1);
    tb_hmac_update(&h, head + 5, 1);
    tb_hmac_update(&h, "", 1);
    tb_hmac_update(&h, head + 6, 8);
    tb_hmac_part(&h, name, nlen);
    tb_hmac_part(&h, bound, blen);
    tb_hmac_part(&h, payload, plen);

    return tb_hmac_end(&h, mac);
}


static void
tb_b64url_32(const unsigned char in[32], char out[TB_REC_MAC_B64])
{
    size_t    i, o;
    unsigned  v;

    for (i = 0, o = 0; i + 2 < 32; i += 3) {
        v = (unsigned) in[i] << 16 | (unsigned) in[i + 1] << 8 | in[i + 2];
        out[o++] = tb_b64url[v >> 18];
        out[o++] = tb_b64url[(v >> 12) & 63];
        out[o++] = tb_b64url[(v >> 6) & 63];
        out[o++] = tb_b64url[v & 63];
    }

    /* 30 of 32 bytes done: two left, three characters */
    v = (unsigned) in[30] << 16 | (unsigned) in[31] << 8;
    out[o++] = tb_b64url[v >> 18];
    out[o++] = tb_b64url[(v >> 12) & 63];
    out[o] = tb_b64url[(v >> 6) & 63];
}


size_t
tb_rec_wrap(const tb_rec_key_t *rk, int kind, const char *name, size_t nlen,
    const void *bound, size_t blen, uint64_t gen, const char *payload,
    size_t plen, char *out, size_t size)
{
    int            n;
    char           mac[TB_REC_MAC_B64 + 1];
    unsigned char  raw[32];

    if (!rk->set || gen == 0
        || tb_rec_mac(rk, kind, name, nlen, bound, blen, gen, payload, plen,
                      raw)
           != 0)
    {
        return 0;
    }

    tb_b64url_32(raw, mac);
    mac[TB_REC_MAC_B64] = '\0';

    n = snprintf(out, size, TB_REC_PREFIX "%s.%llu.%s.", rk->kid,
                 (unsigned long long) gen, mac);

    if (n < 0 || (size_t) n + plen + 1 > size) {
        return 0;
    }

    memcpy(out + n, payload, plen);
    out[n + plen] = '\0';

    return (size_t) n + plen;
}


/* the envelope's parts: 0, or -1 when text has none that can be read */
static int
tb_rec_split(const char *text, size_t len, const char **kid, uint64_t *gen,
    const char **mac, const char **payload)
{
    size_t       i, p;
    uint64_t     g;

    p = sizeof(TB_REC_PREFIX) - 1;

    if (len < p + TB_SEAL_KID_LEN + 1 + 1 + 1 + TB_REC_MAC_B64 + 1
        || memcmp(text, TB_REC_PREFIX, p) != 0)
    {
        return -1;
    }

    *kid = text + p;
    p += TB_SEAL_KID_LEN;

    if (text[p++] != '.') {
        return -1;
    }

    for (g = 0, i = 0; p < len && text[p] >= '0' && text[p] <= '9'; p++, i++)
    {
        if (i >= TB_REC_GEN_MAX - 1 || (i == 0 && text[p] == '0')) {
            /* no leading zero: one generation, one spelling */
            return -1;
        }

        g = g * 10 + (uint64_t) (text[p] - '0');
    }

    if (i == 0 || p >= len || text[p++] != '.') {
        return -1;
    }

    if (len - p < TB_REC_MAC_B64 + 1 || text[p + TB_REC_MAC_B64] != '.') {
        return -1;
    }

    *mac = text + p;
    *payload = text + p + TB_REC_MAC_B64 + 1;
    *gen = g;

    return 0;
}


tb_rec_rc_e
tb_rec_open(const tb_rec_key_t *rk, int kind, const char *name, size_t nlen,
    const void *bound, size_t blen, const char *text, size_t len,
    uint64_t *gen, const char **payload, size_t *plen)
{
    int            diff;
    char           want[TB_REC_MAC_B64];
    uint64_t       g;
    const char    *kid, *mac, *p;
    unsigned char  raw[32];

    *gen = 0;
    *payload = text;
    *plen = len;

    if (len < sizeof(TB_REC_PREFIX) - 1
        || memcmp(text, TB_REC_PREFIX, sizeof(TB_REC_PREFIX) - 1) != 0)
    {
        /* "tba" followed by anything else is no spec of ours either */
        return (len >= 3 && memcmp(text, "tba", 3) == 0) ? TB_REC_FORMAT
                                                         : TB_REC_LEGACY;
    }

    if (tb_rec_split(text, len, &kid, &g, &mac, &p) != 0) {
        return TB_REC_FORMAT;
    }

    if (!rk->set) {
        return TB_REC_FORGED;
    }

    if (memcmp(kid, rk->kid, TB_SEAL_KID_LEN) != 0) {
        return TB_REC_OTHER_KEY;
    }

    if (tb_rec_mac(rk, kind, name, nlen, bound, blen, g, p,
                   len - (size_t) (p - text), raw)
        != 0)
    {
        return TB_REC_FORGED;
    }

    tb_b64url_32(raw, want);

    diff = CRYPTO_memcmp(want, mac, TB_REC_MAC_B64);

    OPENSSL_cleanse(raw, sizeof(raw));

    if (diff != 0) {
        return TB_REC_FORGED;
    }

    *gen = g;
    *payload = p;
    *plen = len - (size_t) (p - text);

    return TB_REC_OK;
}


const char *
tb_rec_payload(const char *text, size_t len, size_t *plen, uint64_t *gen)
{
    uint64_t     g;
    const char  *kid, *mac, *p;

    if (tb_rec_split(text, len, &kid, &g, &mac, &p) != 0) {
        if (gen) {
            *gen = 0;
        }

        *plen = len;
        return text;
    }

    if (gen) {
        *gen = g;
    }

    *plen = len - (size_t) (p - text);

    return p;
}


uint64_t
tb_rec_next_gen(uint64_t last, int64_t now_ms)
{
    /*
     * The clock's milliseconds, so that a record made again after it was
     * removed (whose generation no instance may remember) is newer than
     * any it had before; never less than one more than the last.
     */

    if (now_ms > 0 && (uint64_t) now_ms > last) {
        return (uint64_t) now_ms;
    }

    return last + 1;
}


const char *
tb_rec_strerror(tb_rec_rc_e rc)
{
    switch (rc) {
    case TB_REC_OK:
        return "authenticated";
    case TB_REC_LEGACY:
        return "written without authentication (before records were "
               "authenticated)";
    case TB_REC_FORMAT:
        return "its authentication cannot be read";
    case TB_REC_OTHER_KEY:
        return "authenticated under another secret key";
    default:
        return "its authentication does not verify: it was not written by "
               "this gateway, or was changed since";
    }
}


/* messages */

static int
tb_msg_mac(const tb_rec_key_t *rk, int type, int64_t ms, const char *body,
    size_t blen, char hex[TB_MSG_MAC_HEX])
{
    int            i;
    tb_hmac_t      h;
    unsigned char  head[6 + 8], raw[32];

    memcpy(head, "tbm1", 4);
    head[4] = 0;
    head[5] = (unsigned char) type;

    for (i = 0; i < 8; i++) {
        head[6 + i] = (unsigned char) ((uint64_t) ms >> (56 - 8 * i));
    }

    tb_hmac_begin(&h, rk);
    tb_hmac_update(&h, head, sizeof(head));
    tb_hmac_part(&h, body, blen);

    if (tb_hmac_end(&h, raw) != 0) {
        return -1;
    }

    for (i = 0; i < TB_MSG_MAC_HEX / 2; i++) {
        hex[2 * i] = tb_hexd[raw[i] >> 4];
        hex[2 * i + 1] = tb_hexd[raw[i] & 15];
    }

    OPENSSL_cleanse(raw, sizeof(raw));

    return 0;
}


size_t
tb_msg_sign(const tb_rec_key_t *rk, const char *msg, size_t len,
    int64_t now_ms, char *out, size_t size)
{
    int          n;
    char         hex[TB_MSG_MAC_HEX + 1];
    size_t       blen;
    const char  *body;

    if (!rk->set || len < 2 || msg[1] != ' ' || now_ms <= 0) {
        return 0;
    }

    body = msg + 2;
    blen = len - 2;

    if (tb_msg_mac(rk, (unsigned char) msg[0], now_ms, body, blen, hex) != 0)
    {
        return 0;
    }

    hex[TB_MSG_MAC_HEX] = '\0';

    n = snprintf(out, size, "%c %lld %s ", msg[0], (long long) now_ms, hex);

    if (n < 0 || (size_t) n + blen + 1 > size) {
        return 0;
    }

    memcpy(out + n, body, blen);
    out[n + blen] = '\0';

    return (size_t) n + blen;
}


int
tb_msg_verify(const tb_rec_key_t *rk, const char *msg, size_t len,
    int64_t now_ms, const char **body, size_t *blen)
{
    size_t       p, i;
    int64_t      ms;
    char         want[TB_MSG_MAC_HEX];

    if (!rk->set || len < 2 || msg[1] != ' ') {
        return -1;
    }

    for (p = 2, i = 0, ms = 0; p < len && msg[p] >= '0' && msg[p] <= '9';
         p++, i++)
    {
        if (i >= 18) {
            return -1;
        }

        ms = ms * 10 + (msg[p] - '0');
    }

    if (i == 0 || p >= len || msg[p++] != ' '
        || len - p < TB_MSG_MAC_HEX + 1 || msg[p + TB_MSG_MAC_HEX] != ' ')
    {
        return -1;
    }

    if (ms < now_ms - TB_MSG_SKEW_MS || ms > now_ms + TB_MSG_SKEW_MS) {
        return -1;
    }

    *body = msg + p + TB_MSG_MAC_HEX + 1;
    *blen = len - (p + TB_MSG_MAC_HEX + 1);

    if (tb_msg_mac(rk, (unsigned char) msg[0], ms, *body, *blen, want) != 0)
    {
        return -1;
    }

    return CRYPTO_memcmp(want, msg + p, TB_MSG_MAC_HEX) == 0 ? 0 : -1;
}
