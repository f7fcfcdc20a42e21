/*
 * AWS Signature Version 4 (AWS4-HMAC-SHA256) for the requests the gateway
 * sends to Bedrock: the canonical request, the string to sign, the
 * signing key and the Authorization header's value.
 *
 * The path is taken as it goes on the wire and URI-encoded once more in
 * the canonical request, as every AWS service but S3 expects: a Bedrock
 * model id's ':' travels as %3A and is signed as %253A.
 *
 * Plain C, no nginx headers; OpenSSL for SHA-256 and HMAC.
 */

#ifndef TB_SIGV4_H
#define TB_SIGV4_H

#include <stddef.h>
#include <stdint.h>


#define TB_SIGV4_DATE_LEN     16      /* "20150830T123600Z" */
#define TB_SIGV4_HEADERS_MAX  32      /* signed headers in one request */


typedef struct {
    const char               *name;          /* any case */
    size_t                    name_len;
    const char               *value;
    size_t                    value_len;
} tb_sigv4_header_t;


typedef struct {
    const char               *access_key;
    const char               *secret;
    const char               *region;        /* "us-east-1" */
    const char               *service;       /* "bedrock" */
} tb_sigv4_key_t;


/* x-amz-date of a Unix time, UTC: out gets TB_SIGV4_DATE_LEN + 1 bytes */
void tb_sigv4_date(int64_t unix_sec, char *out);

/* SHA-256 of p in lowercase hex: out gets 65 bytes */
void tb_sigv4_sha256_hex(const void *p, size_t n, char *out);

/*
 * The canonical request into buf (bytes needed, like snprintf, without
 * the NUL; buf may be NULL with size 0 to measure):
 *
 *   method
 *   the path URI-encoded (every byte but A-Z a-z 0-9 - . _ ~ and '/')
 *   the query's pairs decoded, encoded, sorted by name then value
 *   name:value lines, names lowercased and sorted (a stable sort:
 *     duplicates keep their order and are joined with ','), values
 *     trimmed and their runs of spaces and tabs made one space
 *   (empty line)
 *   the signed names joined with ';'
 *   the payload's SHA-256 in hex
 *
 * signed_headers (shsize bytes) gets the names joined with ';'.  -1 (as
 * size_t) when there are more than TB_SIGV4_HEADERS_MAX headers, a name
 * is empty or not a token, a value holds a control byte, or the query is
 * longer than 2048 bytes or has more than 64 pairs.
 */
size_t tb_sigv4_canonical(char *buf, size_t size, const char *method,
    const unsigned char *path, size_t plen, const unsigned char *query,
    size_t qlen, const tb_sigv4_header_t *h, size_t nh,
    const char *payload_sha256_hex, char *signed_headers, size_t shsize);

/*
 * The Authorization header's value for a canonical request:
 * "AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request,
 *  SignedHeaders=<...>, Signature=<hex>".  Bytes written (without the
 * NUL), or 0 when out is too small or the date is not one.
 */
size_t tb_sigv4_authorization(const tb_sigv4_key_t *k, const char *amz_date,
    const char *canonical, size_t clen, const char *signed_headers,
    char *out, size_t size);

/* the signature alone (64 hex digits and a NUL), for the tests */
int tb_sigv4_signature(const tb_sigv4_key_t *k, const char *amz_date,
    const char *canonical, size_t clen, char *out);


#endif /* TB_SIGV4_H */
