/*
 * The YAML file, at configuration time, and the accounts' zone slots.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_CONFIG_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_CONFIG_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


ngx_int_t ngx_http_tokenbiryani_load_config(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* the file's keys' pools as flags over the accounts (init_main_conf) */
ngx_int_t ngx_http_tokenbiryani_key_pools(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* once the zone exists: each account's slot there */
ngx_int_t ngx_http_tokenbiryani_config_bind(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);

/* the configured account in a zone slot, or NULL */
ngx_http_tokenbiryani_account_t *ngx_http_tokenbiryani_account_by_slot(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t slot);


#endif /* _NGX_HTTP_TOKENBIRYANI_CONFIG_H_INCLUDED_ */
