/*
 * Credentials sealed at rest (see tb_seal.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "tb_keys.h"
#include "tb_parse.h"
#include "tb_seal.h"


#define TB_SEAL_AAD_MAX       256


static const char  tb_b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";


static size_t
tb_b64_encode(const unsigned char *p, size_t n, char *out)
{
    size_t    i, o;
    unsigned  v;

    for (i = 0, o = 0; i + 2 < n; i += 3) {
        v = (unsigned) p[i] << 16 | (unsigned) p[i + 1] << 8 | p[i + 2];
        out[o++] = tb_b64[v >> 18];
        out[o++] = tb_b64[(v >> 12) & 63];
        out[o++] = tb_b64[(v >> 6) & 63];
        out[o++] = tb_b64[v & 63];
    }

    if (n - i == 1) {
        v = (unsigned) p[i] << 16;
        out[o++] = tb_b64[v >> 18];
        out[o++] = tb_b64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';

    } else if (n - i == 2) {
        v = (unsigned) p[i] << 16 | (unsigned) p[i + 1] << 8;
        out[o++] = tb_b64[v >> 18];
        out[o++] = tb_b64[(v >> 12) & 63];
        out[o++] = tb_b64[(v >> 6) & 63];
        out[o++] = '=';
    }

    return o;
}


static int
tb_b64_digit(unsigned char c)
{
    const char  *q;

    if (c == '\0' || (q = strchr(tb_b64, c)) == NULL) {
        return -1;
    }

    return (int) (q - tb_b64);
}


/* strict: whole quads, padding only at the end; -1 or the length */
static long
tb_b64_decode(const char *s, size_t len, unsigned char *out, size_t size)
{
    int     d[4];
    size_t  i, o, k, pad;

    if (len == 0 || len % 4 != 0) {
        return -1;
    }

    o = 0;

    for (i = 0; i < len; i += 4) {
        pad = 0;

        for (k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == len && k >= 2) {
                d[k] = 0;
                pad++;
                continue;
            }

            if (pad) {
                return -1;                  /* a digit after padding */
            }

            d[k] = tb_b64_digit((unsigned char) s[i + k]);

            if (d[k] < 0) {
                return -1;
            }
        }

        if (o + 3 - pad > size) {
            return -1;
        }

        /* the bits a padded quad does not use are 0: one text per value */

        if ((pad == 2 && (d[1] & 15)) || (pad == 1 && (d[2] & 3))) {
            return -1;
        }

        out[o++] = (unsigned char) (d[0] << 2 | d[1] >> 4);

        if (pad < 2) {
            out[o++] = (unsigned char) ((d[1] & 15) << 4 | d[2] >> 2);
        }

        if (pad < 1) {
            out[o++] = (unsigned char) ((d[2] & 3) << 6 | d[3]);
        }
    }

    return (long) o;
}


int
tb_seal_key_parse(tb_seal_key_t *k, const char *hex, size_t len)
{
    int     hi, lo;
    size_t  i;

    while (len && (*hex == ' ' || *hex == '\t' || *hex == '\r'
                   || *hex == '\n'))
    {
        hex++;
        len--;
    }

    while (len && (hex[len - 1] == ' ' || hex[len - 1] == '\t'
                   || hex[len - 1] == '\r' || hex[len - 1] == '\n'))
    {
        len--;
    }

    if (len != 2 * TB_SEAL_KEY_LEN) {
        return -1;
    }

    for (i = 0; i < TB_SEAL_KEY_LEN; i++) {
        hi = tb_hex_digit((unsigned char) hex[2 * i]);
        lo = tb_hex_digit((unsigned char) hex[2 * i + 1]);

        if (hi < 0 || lo < 0) {
            OPENSSL_cleanse(k->key, sizeof(k->key));
            return -1;
        }

        k->key[i] = (unsigned char) (hi << 4 | lo);
    }

    /* the key's label is its id: the first 8 hex digits of its SHA-256 */
    tb_key_label(k->key, TB_SEAL_KEY_LEN, k->kid);

    return 0;
}


static int
tb_seal_key_create(const char *path, char *err, size_t errsize)
{
    int            fd;
    ssize_t        w;
    char           hex[2 * TB_SEAL_KEY_LEN + 1];
    unsigned char  raw[TB_SEAL_KEY_LEN];

    if (RAND_bytes(raw, sizeof(raw)) != 1) {
        snprintf(err, errsize, "no randomness to create the secret key "
                 "file \"%s\"", path);
        return -1;
    }

    tb_format_hex(raw, TB_SEAL_KEY_LEN, hex);
    hex[2 * TB_SEAL_KEY_LEN] = '\n';
    OPENSSL_cleanse(raw, sizeof(raw));

    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
              0600);
    if (fd == -1) {
        OPENSSL_cleanse(hex, sizeof(hex));
        snprintf(err, errsize, "cannot create the secret key file \"%s\": "
                 "%s", path, strerror(errno));
        return -1;
    }

    w = write(fd, hex, sizeof(hex));
    OPENSSL_cleanse(hex, sizeof(hex));

    if (w != (ssize_t) sizeof(hex) || fsync(fd) != 0) {
        snprintf(err, errsize, "cannot write the secret key file \"%s\": "
                 "%s", path, w < 0 ? strerror(errno) : "short write");
        (void) close(fd);
        (void) unlink(path);
        return -1;
    }

    if (close(fd) != 0) {
        snprintf(err, errsize, "cannot write the secret key file \"%s\": "
                 "%s", path, strerror(errno));
        (void) unlink(path);
        return -1;
    }

    return 0;
}


int
tb_seal_key_file(tb_seal_key_t *k, const char *path, int create, char *err,
    size_t errsize)
{
    int          fd, rc;
    ssize_t      n;
    struct stat  st;
    char         buf[256];

    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd == -1 && errno == ENOENT && create) {
        if (tb_seal_key_create(path, err, errsize) != 0) {
            return -1;
        }

        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }

    if (fd == -1) {
        snprintf(err, errsize, "cannot open the secret key file \"%s\": %s",
                 path, strerror(errno));
        return -1;
    }

    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errsize, "the secret key file \"%s\" is not a regular "
                 "file", path);
        (void) close(fd);
        return -1;
    }

    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errsize, "the secret key file \"%s\" is readable by "
                 "others (mode %04o): chmod 600 it", path,
                 (unsigned) (st.st_mode & 07777));
        (void) close(fd);
        return -1;
    }

    n = read(fd, buf, sizeof(buf));
    (void) close(fd);

    if (n < 0) {
        snprintf(err, errsize, "cannot read the secret key file \"%s\": %s",
                 path, strerror(errno));
        return -1;
    }

    rc = (n < (ssize_t) sizeof(buf))
         ? tb_seal_key_parse(k, buf, (size_t) n) : -1;

    OPENSSL_cleanse(buf, sizeof(buf));

    if (rc != 0) {
        snprintf(err, errsize, "the secret key file \"%s\" does not hold 64 "
                 "hex digits", path);
        return -1;
    }

    return 0;
}


void
tb_seal_key_wipe(tb_seal_key_t *k)
{
    OPENSSL_cleanse(k, sizeof(tb_seal_key_t));
}


/* the additional data: the version, the key id and the context */
static size_t
tb_seal_aad(const char *kid, const char *ctx, size_t ctxlen,
    unsigned char *aad)
{
    size_t  n;

    n = sizeof(TB_SEAL_PREFIX) - 1;
    memcpy(aad, TB_SEAL_PREFIX, n);
    memcpy(aad + n, kid, TB_SEAL_KID_LEN);
    n += TB_SEAL_KID_LEN;
    aad[n++] = '.';
    memcpy(aad + n, ctx, ctxlen);

    return n + ctxlen;
}


tb_seal_rc_e
tb_seal(const tb_seal_key_t *k, const void *p, size_t n, const char *ctx,
    size_t ctxlen, char *out, size_t outsize)
{
    int              len, ok;
    size_t           raw_len, o, aadlen;
    unsigned char   *raw, aad[TB_SEAL_AAD_MAX];
    EVP_CIPHER_CTX  *c;

    if (outsize < TB_SEAL_TEXT_LEN(n) || n > (1u << 20)
        || ctxlen > TB_SEAL_AAD_MAX - 32)
    {
        return TB_SEAL_ERROR;
    }

    raw_len = TB_SEAL_NONCE_LEN + n + TB_SEAL_TAG_LEN;

    raw = malloc(raw_len);
    if (raw == NULL) {
        return TB_SEAL_ERROR;
    }

    c = EVP_CIPHER_CTX_new();
    aadlen = tb_seal_aad(k->kid, ctx, ctxlen, aad);

    ok = c != NULL
         && RAND_bytes(raw, TB_SEAL_NONCE_LEN) == 1
         && EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, k->key, raw) == 1
         && EVP_EncryptUpdate(c, NULL, &len, aad, (int) aadlen) == 1
         && EVP_EncryptUpdate(c, raw + TB_SEAL_NONCE_LEN, &len, p, (int) n)
            == 1
         && (size_t) len == n
         && EVP_EncryptFinal_ex(c, raw + TB_SEAL_NONCE_LEN + n, &len) == 1
         && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TB_SEAL_TAG_LEN,
                                raw + TB_SEAL_NONCE_LEN + n) == 1;

    EVP_CIPHER_CTX_free(c);

    if (ok) {
        o = sizeof(TB_SEAL_PREFIX) - 1;
        memcpy(out, TB_SEAL_PREFIX, o);
        memcpy(out + o, k->kid, TB_SEAL_KID_LEN);
        o += TB_SEAL_KID_LEN;
        out[o++] = '.';
        o += tb_b64_encode(raw, raw_len, out + o);
        out[o] = '\0';
    }

    OPENSSL_cleanse(raw, raw_len);
    free(raw);

    return ok ? TB_SEAL_OK : TB_SEAL_ERROR;
}


tb_seal_rc_e
tb_unseal(const tb_seal_key_t *k, const char *text, size_t len,
    const char *ctx, size_t ctxlen, unsigned char *out, size_t outsize,
    size_t *n)
{
    int              l, ok;
    long             raw_len;
    size_t           head, ct_len, aadlen;
    unsigned char   *raw, aad[TB_SEAL_AAD_MAX];
    EVP_CIPHER_CTX  *c;
    tb_seal_rc_e     rc;

    head = sizeof(TB_SEAL_PREFIX) - 1 + TB_SEAL_KID_LEN + 1;

    if (len < head || memcmp(text, TB_SEAL_PREFIX, sizeof(TB_SEAL_PREFIX) - 1)
        != 0 || text[head - 1] != '.' || ctxlen > TB_SEAL_AAD_MAX - 32)
    {
        return TB_SEAL_FORMAT;
    }

    if (memcmp(text + sizeof(TB_SEAL_PREFIX) - 1, k->kid, TB_SEAL_KID_LEN)
        != 0)
    {
        return TB_SEAL_OTHER_KEY;
    }

    raw = malloc(len - head + 3);
    if (raw == NULL) {
        return TB_SEAL_ERROR;
    }

    raw_len = tb_b64_decode(text + head, len - head, raw, len - head + 3);

    if (raw_len < TB_SEAL_NONCE_LEN + TB_SEAL_TAG_LEN) {
        free(raw);
        return TB_SEAL_FORMAT;
    }

    ct_len = (size_t) raw_len - TB_SEAL_NONCE_LEN - TB_SEAL_TAG_LEN;

    if (ct_len > outsize) {
        OPENSSL_cleanse(raw, (size_t) raw_len);
        free(raw);
        return TB_SEAL_ERROR;
    }

    c = EVP_CIPHER_CTX_new();
    aadlen = tb_seal_aad(k->kid, ctx, ctxlen, aad);
    rc = TB_SEAL_ERROR;

    ok = c != NULL
         && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, k->key, raw) == 1
         && EVP_DecryptUpdate(c, NULL, &l, aad, (int) aadlen) == 1
         && EVP_DecryptUpdate(c, out, &l, raw + TB_SEAL_NONCE_LEN,
                              (int) ct_len) == 1
         && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TB_SEAL_TAG_LEN,
                                raw + TB_SEAL_NONCE_LEN + ct_len) == 1;

    if (ok) {
        rc = (EVP_DecryptFinal_ex(c, out + ct_len, &l) == 1)
             ? TB_SEAL_OK : TB_SEAL_FORGED;
    }

    EVP_CIPHER_CTX_free(c);
    OPENSSL_cleanse(raw, (size_t) raw_len);
    free(raw);

    if (rc != TB_SEAL_OK) {
        /* nothing of a forged value is handed out */
        OPENSSL_cleanse(out, ct_len);
        return rc;
    }

    *n = ct_len;

    return TB_SEAL_OK;
}


const char *
tb_seal_strerror(tb_seal_rc_e rc)
{
    switch (rc) {

    case TB_SEAL_OK:
        return "ok";

    case TB_SEAL_FORMAT:
        return "not a sealed value this version can read";

    case TB_SEAL_OTHER_KEY:
        return "sealed under another secret key: the secret key changed";

    case TB_SEAL_FORGED:
        return "does not authenticate under the secret key: altered, or "
               "moved from another record";

    default:
        return "out of memory or no randomness";
    }
}
