/*
 * tokenbiryani: the $tokenbiryani_* variables, for log_format and
 * anything else nginx lets read a variable.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_VARIABLES_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_VARIABLES_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


ngx_int_t ngx_http_tokenbiryani_add_variables(ngx_conf_t *cf);


#endif /* _NGX_HTTP_TOKENBIRYANI_VARIABLES_H_INCLUDED_ */
