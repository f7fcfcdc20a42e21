/*
 * Bedrock and Vertex accounts: the one place where an attempt's request
 * and response differ from Anthropic's.
 *
 * The request: the body translated once per request and platform
 * (tb_provider_body: model out, anthropic_version in, Bedrock's stream
 * out and betas in), the model's platform id from options.model_map in
 * the path, the gateway's own headers only (none of the client's but
 * Vertex's anthropic-beta), signed per attempt (SigV4) or with the
 * account's bearer token.  The response: the platform's headers kept
 * from the client but for its framing; its errors said in Anthropic's
 * words (tb_provider_error), for the classifier and, when one is the
 * client's, in place of the platform's body; Bedrock's event-stream
 * decoded and re-encoded as the SSE the client expects.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_PLATFORM_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_PLATFORM_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "tb_evstream.h"


/* what a request keeps for its attempts on platform accounts */
typedef struct {
    ngx_chain_t                   *body_links;   /* the client's body */
    off_t                          body_total;
    ngx_chain_t                   *pbody[2];     /* Bedrock's, Vertex's */
    ngx_str_t                      pversion[2];  /* their anthropic_version
                                                    option ("" for none) */
    u_char                         pbody_sha[65]; /* Bedrock's SHA-256 */
    ngx_str_t                      betas;        /* anthropic-beta, joined */
    tb_evs_t                      *evs;          /* Bedrock streams */
    unsigned                       betas_made:1;

    /* this attempt's: its error's name (x-amzn-ErrorType), the status the
     * error says in Anthropic's words, event-stream bytes left by its
     * Content-Length (-1: to the last chunk or the close) */
    u_char                         errname[64];
    ngx_uint_t                     replaced_status;
    off_t                          raw_left;
} ngx_http_tokenbiryani_platform_ctx_t;


/*
 * After an attempt on a platform account: the request's own body linked
 * again behind the header, from its first byte.
 */
void ngx_http_tokenbiryani_platform_body_back(
    ngx_http_tokenbiryani_ctx_t *ctx);

/* an account's platform parts, at load: its signer, its model path */
ngx_int_t ngx_http_tokenbiryani_platform_fill(ngx_pool_t *pool,
    ngx_http_tokenbiryani_account_t *a, char *err, size_t errlen);

/* the attempt's request header and body, for a platform account */
ngx_int_t ngx_http_tokenbiryani_platform_header(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * A response header of a platform account: 1 when it may reach the
 * client (its framing and type only); the platform's error name is
 * kept for the classifier on the way.
 */
ngx_uint_t ngx_http_tokenbiryani_platform_response_header(
    ngx_http_tokenbiryani_ctx_t *ctx, u_char *lowcase, size_t len,
    u_char *value, size_t vlen);

/*
 * An error response of a platform account, once its body is peeked: in
 * Anthropic's words (ctx->resp.errbody replaced, the status it means
 * returned), so that it is classified, and sent when it is the client's,
 * as Anthropic's would be.
 */
ngx_uint_t ngx_http_tokenbiryani_platform_error(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status);

/* this attempt's error as its platform named it, or NULL */
const u_char *ngx_http_tokenbiryani_platform_errname(
    ngx_http_tokenbiryani_ctx_t *ctx);

/* the replaced error as the client's response, at the commit */
void ngx_http_tokenbiryani_platform_error_commit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * Bedrock's event-stream before the commit: what came decoded, its SSE
 * held (ctx->hold) and fed to the parser; the raw bytes consumed.
 * NGX_OK, or NGX_HTTP_UPSTREAM_INVALID_HEADER for a broken stream.
 */
ngx_int_t ngx_http_tokenbiryani_platform_peek(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/* at the commit: the held SSE first, the reads after it decoded */
ngx_int_t ngx_http_tokenbiryani_platform_commit(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/* a new attempt: no frame of the last one's kept */
void ngx_http_tokenbiryani_platform_reset(ngx_http_tokenbiryani_ctx_t *ctx);

/* the input filter of a committed event-stream */
ngx_int_t ngx_http_tokenbiryani_platform_filter(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ssize_t bytes);


/* every request header of that lower-case name, their values joined with
 * commas into the pool (out->len 0: none): NGX_OK, or NGX_ERROR */
ngx_int_t ngx_http_tokenbiryani_header_join(ngx_http_request_t *r,
    const char *lowcase_name, size_t len, ngx_str_t *out);


#endif /* _NGX_HTTP_TOKENBIRYANI_PLATFORM_H_INCLUDED_ */
