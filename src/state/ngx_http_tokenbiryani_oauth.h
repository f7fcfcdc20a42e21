/*
 * The operator's own Claude subscription (an account of type oauth,
 * docs/subscription.md), per worker: its token as the Authorization
 * header the attempts send, valid until its expiry less
 * options.expiry_skew_seconds (oauth.refresh_skew_seconds by default).
 * A token read from this machine's Claude Code login file
 * (options.credentials_path) is read again, in nginx's thread pool, when
 * the file changes, looked at every oauth.refresh_interval_seconds; a
 * token past its expiry leaves the account "waiting for an access token"
 * until the file has a new one.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_OAUTH_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_OAUTH_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* per worker: the account's header, and its file looked at */
ngx_int_t ngx_http_tokenbiryani_oauth_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);


#endif /* _NGX_HTTP_TOKENBIRYANI_OAUTH_H_INCLUDED_ */
