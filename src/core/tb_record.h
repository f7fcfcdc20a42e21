/*
 * Records the gateway reads back from a store it does not trust (SQLite's
 * file, Redis) and messages between instances, authenticated under the
 * store's secret key.
 *
 * A record is its payload (a spec, a setting's value) in an envelope of
 * text that fits where the payload was kept before,
 *
 *     tba1.<key id>.<generation>.<MAC>.<payload>
 *
 * where the MAC is HMAC-SHA-256, base64url without padding, under a key
 * derived from the secret key (never the sealing key itself), over
 *
 *     "tba1" 0 kind 0 | generation (8 bytes, big-endian)
 *     | name | bound | payload          (each: 4 bytes of length, bytes)
 *
 * kind says what the record is (a key, an account, a setting: one can
 * never pass for another), name which one (a record moved to another name
 * does not verify), bound what is kept beside the payload and must go
 * with it (a key's digest, an account's sealed credential: swapped, it
 * does not verify), and the generation is the record's version, larger
 * with every write, so that instances that hold a record refuse an older
 * one replayed in its place.
 *
 * A message is "<type> <body>" as before, sent as
 *
 *     <type> <ms> <MAC> <body>
 *
 * with the MAC (hex, 128 bits) over type, the sender's clock in ms and the
 * body: a message another instance did not make does not verify, and one
 * replayed later than TB_MSG_SKEW_MS is refused.
 *
 * Plain C (OpenSSL's libcrypto), no nginx headers.
 */

#ifndef TB_RECORD_H
#define TB_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "tb_seal.h"


#define TB_REC_PREFIX         "tba1."
#define TB_REC_MAC_B64        43          /* 32 bytes, base64url */
#define TB_REC_GEN_MAX        20          /* digits of a uint64 */

/* the envelope around a payload of n bytes, without a NUL */
#define TB_REC_ENVELOPE_LEN(n)                                              \
    (sizeof(TB_REC_PREFIX) - 1 + TB_SEAL_KID_LEN + 1 + TB_REC_GEN_MAX + 1   \
     + TB_REC_MAC_B64 + 1 + (n))

#define TB_REC_KEY          'k'         /* a minted key */
#define TB_REC_ACCOUNT      'a'         /* an account added at runtime */
#define TB_REC_SETTING      's'         /* a runtime setting */
#define TB_REC_OWNER        'o'         /* a conversation's owner */
#define TB_REC_OBJECT       'b'         /* a batch or a file, by its id */

#define TB_MSG_MAC_HEX       32
#define TB_MSG_SKEW_MS       30000      /* how old a message may be */


typedef struct {
    unsigned char             key[32];
    char                      kid[TB_SEAL_KID_LEN + 1];
    unsigned                  set:1;
} tb_rec_key_t;


typedef enum {
    TB_REC_OK = 0,
    TB_REC_LEGACY,          /* no envelope: written before records were
                               authenticated */
    TB_REC_FORMAT,          /* an envelope that cannot be read */
    TB_REC_OTHER_KEY,       /* made under another secret key */
    TB_REC_FORGED           /* this key, and it does not verify */
} tb_rec_rc_e;


/* the record key of a store's secret key */
void tb_rec_key_init(tb_rec_key_t *rk, const tb_seal_key_t *k);
void tb_rec_key_wipe(tb_rec_key_t *rk);

/*
 * The record (kind, name, bound, gen, payload) as its envelope into out,
 * NUL-terminated: its length, or 0 when out (size bytes) is too small.
 */
size_t tb_rec_wrap(const tb_rec_key_t *rk, int kind, const char *name,
    size_t nlen, const void *bound, size_t blen, uint64_t gen,
    const char *payload, size_t plen, char *out, size_t size);

/*
 * Opens text (len bytes): TB_REC_OK with *gen, *payload and *plen set
 * when it is the envelope of (kind, name, bound); TB_REC_LEGACY (with
 * *payload the text itself, *gen 0) when it has none.
 */
tb_rec_rc_e tb_rec_open(const tb_rec_key_t *rk, int kind, const char *name,
    size_t nlen, const void *bound, size_t blen, const char *text,
    size_t len, uint64_t *gen, const char **payload, size_t *plen);

/*
 * What is inside an envelope made by this gateway, unchecked (the zone's
 * copies, verified when they came in): the payload, and *gen when gen is
 * not NULL (0 for text without an envelope).
 */
const char *tb_rec_payload(const char *text, size_t len, size_t *plen,
    uint64_t *gen);

/* the next generation of a record whose last one was last, at now_ms */
uint64_t tb_rec_next_gen(uint64_t last, int64_t now_ms);

const char *tb_rec_strerror(tb_rec_rc_e rc);


/*
 * A message "<type> <body>" signed: "<type> <ms> <mac> <body>" into out,
 * NUL-terminated; its length, or 0 when out is too small.
 */
size_t tb_msg_sign(const tb_rec_key_t *rk, const char *msg, size_t len,
    int64_t now_ms, char *out, size_t size);

/*
 * A signed message checked: 0 with *body and *blen the body (the type is
 * msg[0]); -1 when it is not signed, does not verify or is older (or
 * newer) than TB_MSG_SKEW_MS at now_ms.
 */
int tb_msg_verify(const tb_rec_key_t *rk, const char *msg, size_t len,
    int64_t now_ms, const char **body, size_t *blen);

#endif /* TB_RECORD_H */
