/*
 * An account's upstream addresses, following DNS: its host re-resolved
 * with nginx's resolver, per worker.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_RESOLVE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_RESOLVE_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* starts re-resolving every account named by host, if http{} has a resolver */
ngx_int_t ngx_http_tokenbiryani_resolve_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);


#endif /* _NGX_HTTP_TOKENBIRYANI_RESOLVE_H_INCLUDED_ */
