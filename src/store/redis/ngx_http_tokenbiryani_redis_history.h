/*
 * What the redis store keeps of the zone's history and spend: the
 * inspector's records and the events (per instance), the spend ledgers
 * and conversations (per instance), and the usage history (shared: every
 * instance adds to the same buckets).  Written by the elected worker's
 * flush, one script a second; read back by the master into a new zone;
 * the usage history read for /admin/usage.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_REDIS_HISTORY_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_REDIS_HISTORY_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_redis.h"


/* the names under the namespace N and the instance I, NUL-terminated */
typedef struct {
    char                               *ns;          /* N */
    char                               *keys;        /* N:keys */
    char                               *accounts;    /* N:accounts */
    char                               *sealed;      /* N:sealed */
    char                               *meta;        /* N:meta */
    char                               *epoch;       /* N:epoch */
    char                               *changes;     /* N:changes */
    char                               *instances;   /* N:instances */
    char                               *shares;      /* N:shares */
    char                               *objects;     /* N:objects */
    char                               *records;     /* N:i:I:records */
    char                               *events;      /* N:i:I:events */
    char                               *slots;       /* N:i:I:slots */
    char                               *layout;      /* N:i:I:layout */
    char                               *flushed;     /* N:i:I:flushed */
    char                               *ledgers;     /* N:i:I:ledgers */
    char                               *sessions;    /* N:i:I:sessions */
    char                               *sessions_t;  /* N:i:I:sessions_t */
    char                               *instance;    /* I */
} ngx_http_tokenbiryani_rnames_t;


ngx_int_t ngx_http_tokenbiryani_rnames(ngx_pool_t *pool, ngx_str_t *ns,
    ngx_str_t *instance, ngx_http_tokenbiryani_rnames_t *n);

/*
 * The flush as one EVAL: its arguments in one ngx_alloc'd block (the
 * caller frees it once the command is sent), or NULL.
 */
void *ngx_http_tokenbiryani_rflush_args(ngx_http_tokenbiryani_rnames_t *n,
    ngx_http_tokenbiryani_job_t *job, int *argc, const char ***argv,
    size_t **lens);

/* the master: the history and the spend read back into the zone */
void ngx_http_tokenbiryani_rhistory_read(redisContext *c,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log);

/* NGX_HTTP_TB_JOB_USAGE: the buckets read on rd, job->done called once
 * (NGX_DECLINED: Redis is not ready, job->done is not called) */
ngx_int_t ngx_http_tokenbiryani_rusage_read(ngx_http_tokenbiryani_redis_t *rd,
    ngx_http_tokenbiryani_rnames_t *n, ngx_http_tokenbiryani_job_t *job);


#endif /* _NGX_HTTP_TOKENBIRYANI_REDIS_HISTORY_H_INCLUDED_ */
