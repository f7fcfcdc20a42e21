/*
 * libFuzzer target: records and messages read back from a store nobody
 * trusts (src/core/tb_record.c) and the rules an account read back meets
 * again (src/core/tb_racct.c).
 *
 *   - tb_rec_open() and tb_msg_verify() on any bytes: no crash, and what
 *     they give back lies inside the input;
 *   - a record made of the input (its payload) opens as it was made, and
 *     altered at any one byte the input names never opens;
 *   - a message made of the input verifies, and altered never does;
 *   - tb_racct_check() on any payload: no crash, a message when it fails.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tb_record.h"
#include "tb_racct.h"


static tb_rec_key_t  key;
static int           ready;


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char           *text, *env, *msg, err[256];
    size_t          n, plen, blen, at;
    uint64_t        gen;
    const char     *payload, *body;
    tb_seal_key_t   sk;

    if (!ready) {
        memset(&sk, 0, sizeof(sk));
        memcpy(sk.kid, "00000000", 9);
        tb_rec_key_init(&key, &sk);
        ready = 1;
    }

    text = malloc(size + 1);
    if (text == NULL) {
        return 0;
    }

    memcpy(text, data, size);
    text[size] = '\0';

    /* any bytes, opened as each kind of record */

    (void) tb_rec_open(&key, TB_REC_KEY, "name", 4, "bound", 5, text, size,
                       &gen, &payload, &plen);

    if (payload < text || payload + plen > text + size) {
        abort();
    }

    payload = tb_rec_payload(text, size, &plen, &gen);

    if (payload < text || payload + plen > text + size) {
        abort();
    }

    if (tb_msg_verify(&key, text, size, 1700000000000LL, &body, &blen) == 0
        && (body < text || body + blen > text + size))
    {
        abort();
    }

    /* the rules of a runtime account, on any payload */

    if (tb_racct_check(text, size, "acct", 4, size & 1, err, sizeof(err))
        != 0 && err[0] == '\0')
    {
        abort();
    }

    /* a record made of the input: it opens, and no byte can change */

    n = TB_REC_ENVELOPE_LEN(size) + 1;
    env = malloc(n);

    if (env) {
        n = tb_rec_wrap(&key, TB_REC_ACCOUNT, "acct", 4, "sealed", 6,
                        1 + size, text, size, env, n);

        if (n == 0
            || tb_rec_open(&key, TB_REC_ACCOUNT, "acct", 4, "sealed", 6, env,
                           n, &gen, &payload, &plen) != TB_REC_OK
            || gen != 1 + size || plen != size
            || memcmp(payload, text, size) != 0)
        {
            abort();
        }

        at = size ? data[0] % n : 0;
        env[at] ^= size ? (data[size - 1] | 1) : 1;

        if (tb_rec_open(&key, TB_REC_ACCOUNT, "acct", 4, "sealed", 6, env, n,
                        &gen, &payload, &plen) == TB_REC_OK)
        {
            abort();
        }

        free(env);
    }

    /* a message of the input as its body */

    msg = malloc(size + 3);
    env = malloc(size + 128);

    if (msg && env) {
        msg[0] = 'u';
        msg[1] = ' ';
        memcpy(msg + 2, data, size);

        n = tb_msg_sign(&key, msg, size + 2, 1700000000000LL, env, size + 128);

        if (n == 0
            || tb_msg_verify(&key, env, n, 1700000000001LL, &body, &blen) != 0
            || blen != size || memcmp(body, data, size) != 0)
        {
            abort();
        }

        at = size ? data[0] % n : 0;
        env[at] ^= 0x20;

        if (tb_msg_verify(&key, env, n, 1700000000001LL, &body, &blen) == 0) {
            abort();
        }
    }

    free(msg);
    free(env);
    free(text);

    return 0;
}
