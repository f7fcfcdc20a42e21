/*
 * The /admin JSON API and /healthz.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_


#include <cjson/cJSON.h>

#include "ngx_http_tokenbiryani.h"


ngx_int_t ngx_http_tokenbiryani_admin_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_healthz_handler(ngx_http_request_t *r);

/* /console, and POST /admin/console-ticket (..._console.c) */
ngx_int_t ngx_http_tokenbiryani_console_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_admin_console_ticket(ngx_http_request_t *r);

/* GET /admin/events (lua-free-admin/ngx_http_tokenbiryani_admin_events.c) */
ngx_int_t ngx_http_tokenbiryani_admin_events(ngx_http_request_t *r);

/* /admin/usage, /admin/sessions (..._admin_spend.c) */
ngx_int_t ngx_http_tokenbiryani_admin_usage(ngx_http_request_t *r);
ngx_int_t ngx_http_tokenbiryani_admin_sessions(ngx_http_request_t *r);

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

/* a request's inspector record; full: with its candidates and phases */
cJSON *ngx_http_tokenbiryani_record_json(ngx_http_request_t *r,
    ngx_http_tokenbiryani_record_t *rec, ngx_uint_t full);
cJSON *ngx_http_tokenbiryani_strategy_json(const tb_strategy_t *st,
    ngx_uint_t plugin, ngx_uint_t current);
cJSON *ngx_http_tokenbiryani_queue_json(ngx_http_request_t *r, int64_t now);
ngx_int_t ngx_http_tokenbiryani_keys_json(ngx_http_request_t *r,
    cJSON *root);
ngx_int_t ngx_http_tokenbiryani_store_json(ngx_http_request_t *r,
    cJSON *root, int64_t now);

/* sending (..._admin_io.c) */

/* a string of len bytes, at most 511, added to obj as name */
cJSON *ngx_http_tokenbiryani_add_str(cJSON *obj, const char *name,
    u_char *data, size_t len);

/* an admin write's body in memory: NGX_OK, or a status, error prepared */
ngx_int_t ngx_http_tokenbiryani_admin_body(ngx_http_request_t *r,
    u_char **body, size_t *len);

/* sends root (and frees it) as the response */
ngx_int_t ngx_http_tokenbiryani_send_cjson(ngx_http_request_t *r,
    ngx_int_t status, cJSON *root);


#endif /* _NGX_HTTP_TOKENBIRYANI_ADMIN_H_INCLUDED_ */
