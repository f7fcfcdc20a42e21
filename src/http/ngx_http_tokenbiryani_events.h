/*
 * The admission and settlement events: in the zone's events ring always,
 * and as error_log lines at info.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_EVENTS_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_EVENTS_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


#define NGX_HTTP_TB_EVENT_ADMISSION    1
#define NGX_HTTP_TB_EVENT_SETTLEMENT   2
#define NGX_HTTP_TB_EVENT_REFUSAL      3      /* a key refused at the door */
#define NGX_HTTP_TB_EVENT_OBJECT       4      /* a batch's or a file's */

/* what became of an object */
#define NGX_HTTP_TB_STAGE_MADE        0
#define NGX_HTTP_TB_STAGE_CHANGED     1      /* its status or counts */
#define NGX_HTTP_TB_STAGE_CHARGED     2      /* its results read, priced */
#define NGX_HTTP_TB_STAGE_DELETED     3
#define NGX_HTTP_TB_STAGE_FORGOTTEN   4      /* gone from its account */
#define NGX_HTTP_TB_NSTAGES            5

/* why a key was refused before anything was routed */
#define NGX_HTTP_TB_REFUSED_INVALID    0      /* no key, or not one */
#define NGX_HTTP_TB_REFUSED_EXPIRED    1
#define NGX_HTTP_TB_REFUSED_REVOKED    2
#define NGX_HTTP_TB_REFUSED_MODEL      3      /* outside its models */
#define NGX_HTTP_TB_NREFUSED           4

/* what a decision did */
#define NGX_HTTP_TB_ADMIT              0      /* leased */
#define NGX_HTTP_TB_LOST               1      /* another worker was first */
#define NGX_HTTP_TB_QUEUE_BEHIND       2      /* earlier waiters go first */
#define NGX_HTTP_TB_QUEUE_SATURATED    3
#define NGX_HTTP_TB_REFUSE             4      /* no account ever could */
#define NGX_HTTP_TB_QUEUE_KEY          5      /* the key's max_inflight */
#define NGX_HTTP_TB_NDECISIONS         6

/* what came after an attempt */
#define NGX_HTTP_TB_NEXT_DONE          0
#define NGX_HTTP_TB_NEXT_RETURNED      1      /* not retried */
#define NGX_HTTP_TB_NEXT_BACKOFF       2
#define NGX_HTTP_TB_NEXT_RETRY         3
#define NGX_HTTP_TB_NEXT_QUEUE         4
#define NGX_HTTP_TB_NEXT_GIVE_UP       5
#define NGX_HTTP_TB_NNEXTS             6


/*
 * A decision on account a (NULL: none chosen); remaining: its windows
 * before the lease, or NULL.
 */
void ngx_http_tokenbiryani_event_admission(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    const int64_t *remaining, ngx_uint_t what, ngx_uint_t probe);

/* an attempt's end on a, and what comes next */
void ngx_http_tokenbiryani_event_settlement(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    ngx_uint_t next);

/* a request refused for its key: ctx->err.refused says why, and names it */
void ngx_http_tokenbiryani_event_refusal(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status);

/*
 * What became of object v (stage): request_id, of the request that did it,
 * or NULL
 */
void ngx_http_tokenbiryani_event_object(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log, const u_char *request_id,
    const ngx_http_tokenbiryani_object_view_t *v, ngx_uint_t stage);

/* the words for an event's codes */
const char *ngx_http_tokenbiryani_event_type_name(
    const ngx_http_tokenbiryani_event_t *ev);
const char *ngx_http_tokenbiryani_event_what_name(
    const ngx_http_tokenbiryani_event_t *ev);

/* an admission's reason in words, NUL-terminated, into buf */
u_char *ngx_http_tokenbiryani_event_reason(
    const ngx_http_tokenbiryani_event_t *ev, u_char *buf, size_t len);


#endif /* _NGX_HTTP_TOKENBIRYANI_EVENTS_H_INCLUDED_ */
