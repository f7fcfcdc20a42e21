/*
 * The /admin JSON API and /healthz.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"


ngx_int_t ngx_http_tokenbiryani_admin_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_healthz_handler(ngx_http_request_t *r);

/* /console, and POST /admin/console-ticket (..._console.c) */
ngx_int_t ngx_http_tokenbiryani_console_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_admin_console_ticket(ngx_http_request_t *r);

/* GET /admin/batches, /admin/files (..._admin_objects.c) */
ngx_int_t ngx_http_tokenbiryani_admin_objects(ngx_http_request_t *r);

/* GET /admin/events (lua-free-admin/ngx_http_tokenbiryani_admin_events.c) */
ngx_int_t ngx_http_tokenbiryani_admin_events(ngx_http_request_t *r);

/* /admin/usage, /admin/sessions (..._admin_spend.c) */
ngx_int_t ngx_http_tokenbiryani_admin_usage(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_admin_sessions(ngx_http_request_t *r);

/* GET /admin/pacing (..._admin_pacing.c) */
ngx_int_t ngx_http_tokenbiryani_admin_pacing(ngx_http_request_t *r);

/* GET /admin/cache-advice (..._admin_cache.c) */
ngx_int_t ngx_http_tokenbiryani_admin_cache_advice(ngx_http_request_t *r);

/* /admin/horizon, /admin/metrics (..._admin_metrics.c) */
ngx_int_t ngx_http_tokenbiryani_admin_horizon(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_admin_metrics(ngx_http_request_t *r);

/* /admin/keys (lua-free-admin/ngx_http_tokenbiryani_admin_keys.c) */
ngx_int_t ngx_http_tokenbiryani_admin_keys(ngx_http_request_t *r);

/* /admin/settings, /admin/reload (..._admin_settings.c) */
ngx_int_t ngx_http_tokenbiryani_admin_settings(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_admin_reload(ngx_http_request_t *r);

/* /admin/accounts (..._admin_accounts.c); NGX_DECLINED: not its own */
ngx_int_t ngx_http_tokenbiryani_admin_accounts(ngx_http_request_t *r);

/* the documents (..._admin_json.c) */

/* an account for an admin answer: its state, limits and configuration */
cJSON *ngx_http_tokenbiryani_account_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_account_t *a, int64_t now, tb_state_e *state);
cJSON *ngx_http_tokenbiryani_admin_account_record(ngx_http_request_t *r,
    ngx_http_tokenbiryani_account_t *a, int64_t now, tb_state_e *state);
/* every account that serves, its record added to arr, counted by state in
 * n (TB_NSTATES, or NULL): how many, or NGX_ERROR */
ngx_int_t ngx_http_tokenbiryani_admin_account_records(ngx_http_request_t *r,
    cJSON *arr, int64_t now, ngx_uint_t *n);

/* a request's inspector record; full: with its candidates and phases */
cJSON *ngx_http_tokenbiryani_record_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_record_t *rec, ngx_uint_t full);
cJSON *ngx_http_tokenbiryani_strategy_json(const tb_strategy_t *st,
    ngx_uint_t plugin, ngx_uint_t current);
cJSON *ngx_http_tokenbiryani_queue_json(ngx_http_request_t *r, int64_t now);
ngx_int_t ngx_http_tokenbiryani_keys_json(ngx_http_request_t *r,
    cJSON *root);
ngx_int_t ngx_http_tokenbiryani_store_json(ngx_http_request_t *r,
    cJSON *root, int64_t now,
    const ngx_http_tokenbiryani_share_state_t *share);

/* sending (..._admin_io.c) */

/* a string of len bytes, at most 511, added to obj as name */
cJSON *ngx_http_tokenbiryani_add_str(cJSON *obj, const char *name,
    u_char *data, size_t len);

/* n added to obj as name where it is known, or null where it is not */
cJSON *ngx_http_tokenbiryani_add_number_or_null(cJSON *obj, const char *name,
    ngx_uint_t known, double n);

/* s added to obj as name, or null where it is "" */
cJSON *ngx_http_tokenbiryani_add_string_or_null(cJSON *obj, const char *name,
    const char *s);

/*
 * A new document with one member, name, made by add (cJSON_AddArrayTo-
 * Object, cJSON_AddObjectToObject): the member, the document in *root; or
 * NULL and no document
 */
cJSON *ngx_http_tokenbiryani_json_doc(cJSON **root, const char *name,
    cJSON *(*add)(cJSON *obj, const char *name));

/* a new object at the end of arr, or NULL */
cJSON *ngx_http_tokenbiryani_json_push(cJSON *arr);

/* text, NUL-terminated, copied into the pool; NULL if text is NULL or
 * there is no memory */
char *ngx_http_tokenbiryani_pool_text(ngx_pool_t *pool, const char *text);

/*
 * ?limit=N, from 1 to max (0: no bound), in *limit, left as it is when
 * there is none: NGX_OK, or a status with its error prepared
 */
ngx_int_t ngx_http_tokenbiryani_admin_limit(ngx_http_request_t *r,
    ngx_int_t *limit, ngx_int_t max);

/* the body read, then handler called: NGX_DONE, or a status */
ngx_int_t ngx_http_tokenbiryani_admin_read_body(ngx_http_request_t *r,
    ngx_http_client_body_handler_pt handler);

/* an admin write's body in memory: NGX_OK, or a status, error prepared */
ngx_int_t ngx_http_tokenbiryani_admin_body(ngx_http_request_t *r,
    u_char **body, size_t *len);

/* sends root (and frees it) as the response */
ngx_int_t ngx_http_tokenbiryani_send_cjson(ngx_http_request_t *r,
    ngx_int_t status, cJSON *root);

/* root, a document that could not be made whole, freed: the status */
ngx_int_t ngx_http_tokenbiryani_cjson_fail(cJSON *root);


/*
 * One write of a runtime resource (a key, an account, a setting): its
 * body read and checked by the resource's write, its record put in the
 * store's thread pool, and once it lands there, applied to the zone and
 * answered by the resource's apply.  A resource's own state begins with
 * an ngx_http_tokenbiryani_admin_write_t.  A read of the store (the usage
 * history) is answered the same way, with no body and no write.
 */

typedef struct ngx_http_tokenbiryani_admin_write_s
    ngx_http_tokenbiryani_admin_write_t;

typedef struct {
    /* "key", as in: no key "k"; NULL: every no of the store is a failure */
    const char      *noun;
    /* "a key named", as in: a key named "k" exists */
    const char      *a_noun;
    /* what the answer says when the store cannot do the job */
    const char      *failure;

    /* the body checked, the record made: NGX_DONE, or a status */
    ngx_int_t      (*write)(ngx_http_request_t *r,
                            ngx_http_tokenbiryani_admin_write_t *w,
                            u_char *body, size_t len);
    /* the record in the store: into the zone, and the answer */
    ngx_int_t      (*apply)(ngx_http_request_t *r,
                            ngx_http_tokenbiryani_admin_write_t *w);
    /* the answer given; NULL: nothing to let go */
    void           (*done)(ngx_http_tokenbiryani_admin_write_t *w);
} ngx_http_tokenbiryani_admin_resource_t;

struct ngx_http_tokenbiryani_admin_write_s {
    ngx_http_tokenbiryani_job_t                    job;
    ngx_http_request_t                            *request;
    const ngx_http_tokenbiryani_admin_resource_t  *res;
    ngx_str_t                                      name;  /* NUL-terminated */
    ngx_uint_t                                     gone;  /* a delete: done
                                                             if the store has
                                                             none */
};

/* w's body read and handed to its resource's write: NGX_DONE, or a status */
ngx_int_t ngx_http_tokenbiryani_admin_write(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w);

/* w's job (op and record set) posted to the store: NGX_DONE, or NGX_ERROR */
ngx_int_t ngx_http_tokenbiryani_admin_store(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w);

/* a read of the usage history (w's job.u.usage set) posted to the store,
 * answered by w's resource when it is done: NGX_DONE, or a status */
ngx_int_t ngx_http_tokenbiryani_admin_usage_read(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w);

/* what a usage read held, given back */
void ngx_http_tokenbiryani_admin_usage_done(
    ngx_http_tokenbiryani_admin_write_t *w);

/* the answer to a write refused: NGX_HTTP_TB_RKEY_EXISTS, _NONE or _STALE */
ngx_int_t ngx_http_tokenbiryani_admin_refused(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w, ngx_uint_t why);


#endif /* _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_ */
