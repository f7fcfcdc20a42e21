
/*
 * tokenbiryani: the operator's own Claude subscription, per worker (see
 * ngx_http_tokenbiryani_oauth.h).
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_oauth.h"
#include "ngx_http_tokenbiryani_attempt.h"

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif

#include <sys/stat.h>

#include "tb_oauth.h"


typedef struct {
    ngx_http_tokenbiryani_account_t  *account;
    ngx_event_t                       timer;
    ngx_msec_t                        interval;
    int64_t                           skew_ms;
#if (NGX_THREADS)
    ngx_thread_task_t                *task;
#endif
    ngx_uint_t                        busy;
    ngx_uint_t                        said;     /* a failure was logged */

    /* the file as last read, and the thread's answer */
    const char                       *path;
    struct stat                       seen;
    ngx_uint_t                        changed;
    char                             *token;    /* malloc()ed */
    int64_t                           expires_ms;
    char                              err[256];
} ngx_http_tokenbiryani_oauth_t;


static ngx_int_t ngx_http_tokenbiryani_oauth_set(
    ngx_http_tokenbiryani_oauth_t *o, const char *token, int64_t expires_ms,
    ngx_log_t *log);
#if (NGX_THREADS)
static void ngx_http_tokenbiryani_oauth_look(ngx_event_t *ev);
static void ngx_http_tokenbiryani_oauth_thread(void *data, ngx_log_t *log);
static void ngx_http_tokenbiryani_oauth_done(ngx_event_t *ev);

static void  *ngx_http_tokenbiryani_oauth_pool;
#endif


ngx_int_t
ngx_http_tokenbiryani_oauth_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_uint_t                        i;
    tb_account_conf_t                *ac;
    ngx_http_tokenbiryani_oauth_t    *o;
    ngx_http_tokenbiryani_account_t  *a;

    a = tmcf->accounts.elts;

    /* the file's accounts only: one added at runtime is never oauth */

    for (i = 0; i < tmcf->nyaml; i++) {
        ac = a[i].conf;

        if (ac->type != TB_ACCOUNT_OAUTH || !a[i].supported) {
            continue;
        }

        o = ngx_pcalloc(cycle->pool, sizeof(ngx_http_tokenbiryani_oauth_t));
        if (o == NULL) {
            return NGX_ERROR;
        }

        o->account = &a[i];
        o->skew_ms = (ac->options.expiry_skew_seconds >= 0
                      ? ac->options.expiry_skew_seconds
                      : (int64_t) tmcf->tbcf->oauth_refresh_skew_seconds)
                     * 1000;

        /* a token the attempts may send, or "waiting for an access
         * token" while it has none that has not expired */
        a[i].gauth = o;

        if (ngx_http_tokenbiryani_oauth_set(o, ac->api_key,
                                            ac->token_expires_ms, cycle->log)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (ac->options.credentials_path == NULL) {
            continue;
        }

#if (NGX_THREADS)
        o->path = ac->options.credentials_path;
        o->interval = (ngx_msec_t) ngx_max(1,
                          tmcf->tbcf->oauth_refresh_interval_seconds * 1000);
        ngx_http_tokenbiryani_oauth_pool = tmcf->thread_pool;

        /* the file as the configuration read it */
        if (stat(o->path, &o->seen) != 0) {
            ngx_memzero(&o->seen, sizeof(struct stat));
        }

        o->task = ngx_http_tokenbiryani_timed_task(cycle->pool,
                      ngx_http_tokenbiryani_oauth_thread,
                      ngx_http_tokenbiryani_oauth_done, &o->timer,
                      ngx_http_tokenbiryani_oauth_look, o, cycle->log);
        if (o->task == NULL) {
            return NGX_ERROR;
        }

        ngx_add_timer(&o->timer, o->interval);
#endif
    }

    return NGX_OK;
}


/* "Authorization: Bearer <token>", the old one wiped */

static ngx_int_t
ngx_http_tokenbiryani_oauth_set(ngx_http_tokenbiryani_oauth_t *o,
    const char *token, int64_t expires_ms, ngx_log_t *log)
{
    u_char                           *p;
    size_t                            len;
    ngx_http_tokenbiryani_account_t  *a;

    a = o->account;

    len = sizeof("Authorization: Bearer " CRLF) - 1 + ngx_strlen(token);

    p = ngx_alloc(len, log);
    if (p == NULL) {
        return NGX_ERROR;
    }

    (void) ngx_sprintf(p, "Authorization: Bearer %s" CRLF, token);

    if (a->bearer.data) {
        ngx_explicit_memzero(a->bearer.data, a->bearer.len);
        ngx_free(a->bearer.data);
    }

    a->bearer.data = p;
    a->bearer.len = len;

    /* valid until its expiry, less the margin; a token that says none
     * is valid until it is refused */
    a->token_until = expires_ms ? expires_ms - o->skew_ms : INT64_MAX;
    a->token_next = a->token_until;

    return NGX_OK;
}


#if (NGX_THREADS)

static void
ngx_http_tokenbiryani_oauth_look(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_oauth_t *o = ev->data;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    if (!o->busy) {
        o->err[0] = '\0';
        o->changed = 0;

        if (ngx_thread_task_post(ngx_http_tokenbiryani_oauth_pool, o->task)
            == NGX_OK)
        {
            o->busy = 1;
        }
    }

    ngx_add_timer(&o->timer, o->interval);
}


static void
ngx_http_tokenbiryani_oauth_done(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_oauth_t *o = ev->data;

    ngx_http_tokenbiryani_account_t  *a;

    a = o->account;
    o->busy = 0;

    if (!o->changed || ngx_exiting || ngx_terminate || ngx_quit) {
        goto done;
    }

    if (o->token == NULL) {
        if (!o->said) {
            /* once per spell */
            ngx_log_error(NGX_LOG_ERR, ev->log, 0,
                          "tokenbiryani: account \"%V\": options."
                          "credentials_path %s %s; the token read before "
                          "is kept", &a->id, o->path, o->err);
            o->said = 1;
        }

        goto done;
    }

    if (ngx_http_tokenbiryani_oauth_set(o, o->token, o->expires_ms, ev->log)
        != NGX_OK)
    {
        /* tried again when the file changes again */
        goto done;
    }

    o->said = 0;

    ngx_log_error(NGX_LOG_NOTICE, ev->log, 0,
                  "tokenbiryani: account \"%V\": a new token read from %s%s",
                  &a->id, o->path,
                  a->token_until <= ngx_http_tokenbiryani_now_ms()
                  ? ", past its expiry: the account waits for another" : "");

    /* requests this worker holds for it go now */
    ngx_http_tokenbiryani_attempt_wake();

done:

    if (o->token) {
        explicit_bzero(o->token, ngx_strlen(o->token));
        free(o->token);
        o->token = NULL;
    }
}


/* ------------------------------------------------------------------ */
/* in the thread: no nginx memory, logs or events from here on          */

static void
ngx_http_tokenbiryani_oauth_thread(void *data, ngx_log_t *log)
{
    ngx_http_tokenbiryani_oauth_t *o = data;

    int          err;
    struct stat  st;

    if (stat(o->path, &st) != 0) {
        /* gone, or not the worker's to read: what was read is kept, and
         * said once */
        err = errno;

        if (o->seen.st_ino || o->seen.st_mode != (mode_t) err) {
            ngx_memzero(&o->seen, sizeof(struct stat));
            o->seen.st_mode = (mode_t) err;
            o->changed = 1;
            (void) snprintf(o->err, sizeof(o->err), "cannot be looked at "
                            "by this worker: %s", strerror(err));
        }

        return;
    }

    if (st.st_ino == o->seen.st_ino && st.st_size == o->seen.st_size
        && st.st_mtim.tv_sec == o->seen.st_mtim.tv_sec
        && st.st_mtim.tv_nsec == o->seen.st_mtim.tv_nsec)
    {
        return;
    }

    o->seen = st;
    o->changed = 1;

    if (tb_oauth_creds_file(o->path, &o->token, &o->expires_ms, o->err,
                            sizeof(o->err))
        != 0)
    {
        o->token = NULL;
    }
}

#endif
