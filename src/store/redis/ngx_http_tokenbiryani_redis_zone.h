/*
 * What Redis says, put into the zone (store.backend: redis): another
 * instance's key, account or strategy as the subscriber or a comparison
 * of the whole reads it back, checked as the master checks what it loads.
 * The file's keys and accounts win over Redis's of the same name.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_REDIS_ZONE_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_REDIS_ZONE_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include <hiredis/hiredis.h>


/* a new name for a data set: 32 hex digits and a NUL into epoch */
void ngx_http_tokenbiryani_rzone_epoch(u_char *epoch);

/* a stored key's value, "<64 hex digits> <spec>": its digest */
ngx_int_t ngx_http_tokenbiryani_rzone_digest(const char *v, size_t len,
    u_char digest[32]);

/* the key of that name as Redis has it (value NULL or nil: none) */
void ngx_http_tokenbiryani_rzone_key(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *name, size_t len, const redisReply *value);

/* the account of that id (spec or sealed NULL or nil: none); its host is
 * looked up in the thread pool when it is a name */
void ngx_http_tokenbiryani_rzone_account(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *id, size_t len,
    const redisReply *spec, const redisReply *sealed);

/* the runtime strategy (NULL or nil: the file's) */
void ngx_http_tokenbiryani_rzone_strategy(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const redisReply *value);


/*
 * Another instance's owner of a session, as Redis holds it (the record
 * N:aff:<session>): into the zone when it is one an instance of this
 * gateway wrote, and names an account this configuration has.
 */
void ngx_http_tokenbiryani_rzone_owner(ngx_http_tokenbiryani_main_conf_t *tmcf,
    uint64_t session, const u_char *value, size_t len);


#endif /* _NGX_HTTP_TOKENBIRYANI_REDIS_ZONE_H_INCLUDED_ */
