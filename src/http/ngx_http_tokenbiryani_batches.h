/*
 * The Message Batches API through the pool: a batch is pinned to the
 * account that holds it and private to the key that made it.  Its path
 * read at the handler; a create's body checked against the key's scopes;
 * every other operation sent to the batch's account only, or answered
 * with the 404 an unknown id gets when the key is not its own; the list
 * answered by the gateway, the key's own batches only; what the upstream
 * says of a batch kept in the zone (shm/ngx_http_tokenbiryani_objects.c).
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_BATCHES_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_BATCHES_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_shm.h"


#define NGX_HTTP_TB_OBJ_CREATE         1
#define NGX_HTTP_TB_OBJ_LIST           2
#define NGX_HTTP_TB_OBJ_GET            3
#define NGX_HTTP_TB_OBJ_CANCEL         4
#define NGX_HTTP_TB_OBJ_DELETE         5
#define NGX_HTTP_TB_OBJ_RESULTS        6
#define NGX_HTTP_TB_OBJ_CONTENT        7      /* a file's */

/* the longest results line read as it passes (a Message of 128k tokens
 * of output is some 600 KB) */
#define NGX_HTTP_TB_RESULT_LINE_MAX    (8 * 1024 * 1024)

/*
 * A batch's results read line by line as they pass, never held whole:
 * each succeeded request's usage at the batch price added to charge; a
 * line longer than the gateway reads, or one that is not a result, is
 * counted lost.
 */
typedef struct {
    u_char                        *line;          /* of a line cut by a */
    size_t                         line_len;      /* buffer's end */
    size_t                         line_size;
    ngx_uint_t                     lines;         /* read, lost ones too */
    ngx_uint_t                     lost;          /* lines not read */
    ngx_uint_t                     skipping;      /* in one of them */
    ngx_http_tokenbiryani_charge_t charge;
    u_char                         model[TB_MODEL_MAX + 1];  /* the
                                                     succeeded lines', or
                                                     "(several)" */
} ngx_http_tokenbiryani_results_t;

/* a batch request's own (ctx->object) */
typedef struct {
    ngx_uint_t                     op;            /* NGX_HTTP_TB_OBJ_* */
    ngx_uint_t                     requests;      /* a create's */
    int64_t                        estimate;      /* its cost at most:
                                                     nanodollars */

    /* results too large to hold, read line by line as they pass */
    ngx_http_tokenbiryani_results_t  results;
    ngx_uint_t                     charged;       /* results holds what
                                                     this request charged */
    ngx_http_tokenbiryani_object_view_t  found;   /* the batch it names */
} ngx_http_tokenbiryani_objreq_t;


/*
 * At the handler, for a kind of object (NGX_HTTP_TB_OBJECT_BATCH under
 * /v1/messages/batches, _FILE under /v1/files): NGX_DECLINED when the
 * path is not one of its; NGX_OK with ctx->kind NGX_HTTP_TB_BATCHES and
 * ctx->object set; otherwise the status of the error set (a method the
 * path does not take, an id no object can have).
 */
ngx_int_t ngx_http_tokenbiryani_object_path(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t kind);

/*
 * Once the body is read (body: a create's): NGX_OK to be routed (pinned
 * to the batch's account but for a create), NGX_DONE when the gateway
 * answered (the list), else the status of the error set.
 */
ngx_int_t ngx_http_tokenbiryani_object_begin(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body);

/* a create's need: its estimated cost, against its key's cap */
void ngx_http_tokenbiryani_object_need(ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * A create's attempt that failed once it was sent, without an error
 * status: the batch may have been made, and one sent again could make a
 * second.  1: not to be retried.
 */
ngx_uint_t ngx_http_tokenbiryani_object_made(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/* the zone slot a batch request must go to, or -1 for any (a create) */
ngx_int_t ngx_http_tokenbiryani_object_pin(ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * Results on their way to the client when they were too large to hold:
 * each line's usage added as it passes (bytes), charged once they end
 * (done)
 */
void ngx_http_tokenbiryani_object_bytes(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, u_char *p, u_char *last);
void ngx_http_tokenbiryani_object_done(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * n bytes at p added to a line of results (*line, *len of *size bytes,
 * grown from pool): NGX_OK; NGX_DECLINED when it would be longer than
 * NGX_HTTP_TB_RESULT_LINE_MAX; NGX_ERROR: no memory
 */
ngx_int_t ngx_http_tokenbiryani_line_append(ngx_pool_t *pool, u_char **line,
    size_t *len, size_t *size, u_char *p, size_t n);

/*
 * Bytes of a batch's results (pool: for a line cut by their end), and
 * the end of them (the last line, without its newline)
 */
void ngx_http_tokenbiryani_results_read(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_results_t *rd, ngx_pool_t *pool, u_char *p,
    u_char *last);
void ngx_http_tokenbiryani_results_end(
    ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_results_t *rd);

/* results read whole, to be charged: with a line not read (too long, or
 * not a result), what batch id held (reserved) is what it is taken to
 * have cost, if that is more, said in one log line */
void ngx_http_tokenbiryani_results_lost(ngx_http_tokenbiryani_results_t *rd,
    int64_t reserved, ngx_log_t *log, const u_char *id, size_t len);

/* an object just made (a batch, a file) kept on the account that made it
 * for the request's key, and written to the store */
void ngx_http_tokenbiryani_object_keep(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_object_view_t *v,
    ngx_http_tokenbiryani_account_t *account, int64_t now);

/*
 * A batch's retrieve answered (answer: its body) by the gateway's own
 * call: what it says noted in the zone and, changed, in the store.
 * NGX_OK with *b the batch; NGX_DECLINED when it is not the object of
 * that batch.
 */
ngx_int_t ngx_http_tokenbiryani_object_said(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log,
    const u_char *rid, const u_char *id, size_t len, const ngx_str_t *answer,
    tb_batch_obj_t *b);

/* the results of a batch, read: charged once (NGX_OK), the store told;
 * NGX_DONE: charged already */
ngx_int_t ngx_http_tokenbiryani_object_settled(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log,
    const u_char *rid, const u_char *id, size_t len,
    const ngx_http_tokenbiryani_charge_t *charge);

/*
 * What became of an object (stage, NGX_HTTP_TB_STAGE_*): written to the
 * store and told in the events, rid the request's that did it (NULL: the
 * gateway's own).  gone: its last view, for one no longer in the zone
 * (deleted, forgotten); NULL: read from the zone.
 */
void ngx_http_tokenbiryani_object_changed(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log,
    const u_char *rid, ngx_uint_t kind, const u_char *id, size_t len,
    ngx_uint_t stage, const ngx_http_tokenbiryani_object_view_t *gone);


/*
 * A whole 2xx answer to a batch request (held in ctx->hold): the batch it
 * describes kept, its state noted, a deleted one forgotten.  NGX_OK, or
 * NGX_ERROR when the answer is not the object the API sends.
 */
ngx_int_t ngx_http_tokenbiryani_object_answered(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);

/*
 * files.api: a Message (or its count) that names files goes to the account
 * that holds them (ctx->pin).  NGX_OK; otherwise the status of the error
 * set: a file the key did not upload through the gateway (404, as an
 * unknown one), files on two accounts (400).
 */
ngx_int_t ngx_http_tokenbiryani_files_pin(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body);


#endif /* _NGX_HTTP_TOKENBIRYANI_BATCHES_H_INCLUDED_ */
