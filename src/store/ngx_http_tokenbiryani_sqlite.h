/*
 * The SQLite backend of the store (store.backend: sqlite).
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_SQLITE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_SQLITE_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* at configuration: the file's path, nginx's thread pool, the ops */
ngx_int_t ngx_http_tokenbiryani_sqlite_conf(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *path);

extern const ngx_http_tokenbiryani_store_ops_t
    ngx_http_tokenbiryani_sqlite_ops;


#endif /* _NGX_HTTP_TOKENBIRYANI_SQLITE_H_INCLUDED_ */
