/*
 * Minted keys as a worker sees them: a parsed copy of the zone's, rebuilt
 * when the zone's generation moves (a key minted, rescoped or revoked in
 * any worker), and the lookup a request makes when its key is none of the
 * YAML file's.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_KEYS_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_KEYS_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "tb_keyspec.h"


typedef struct {
    u_char                         digest[32];
    tb_keyspec_t                   ks;

    /* derived when the copy is built: its accounts, 1 per pool index
     * (NULL: all), and its limits with the file's rules for unset ones */
    u_char                        *pool;
    int64_t                        max_inflight;
    int64_t                        max_queued;
} ngx_http_tokenbiryani_rkent_t;


/* this worker's copy, brought up to date; NULL: no memory */
ngx_http_tokenbiryani_rkent_t *ngx_http_tokenbiryani_rkeys(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t *n);

/*
 * The minted key a request presents: NGX_OK with ctx->key (a copy in the
 * request's pool) and ctx->pool set, NGX_DECLINED when it is no minted
 * key, NGX_ABORT when it expired (the error prepared), NGX_ERROR.
 */
ngx_int_t ngx_http_tokenbiryani_rkey_auth(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *key);

/* the YAML file's key of that name, or NULL */
const tb_key_conf_t *ngx_http_tokenbiryani_yaml_key(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *name, size_t len);


#endif /* _NGX_HTTP_TOKENBIRYANI_KEYS_H_INCLUDED_ */
