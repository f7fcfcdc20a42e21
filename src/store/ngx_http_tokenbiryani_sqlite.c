/*
 * The SQLite backend of the store (store.backend: sqlite): one file,
 * read by the master into a new zone, written by each worker in nginx's
 * thread pool, one task at a time per worker, each task taking every job
 * queued meanwhile: the event loop never waits for the disk.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_sqlite.h"

#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#include <malloc.h>
#endif


#define NGX_HTTP_TB_STORE_BUSY_MS      5000


#if (NGX_THREADS)

/* this worker's writer: one task, the jobs it runs and the ones waiting */
typedef struct {
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_thread_task_t                  *task;
    tb_store_t                         *db;         /* the thread's only */
    ngx_http_tokenbiryani_job_t        *running;    /* the thread's */
    ngx_http_tokenbiryani_job_t        *pending;
    ngx_http_tokenbiryani_job_t       **last;
    ngx_http_tokenbiryani_job_t         open;       /* the worker's open */
} ngx_http_tokenbiryani_sqlite_writer_t;


static ngx_int_t ngx_http_tokenbiryani_sqlite_load(ngx_shm_zone_t *shm_zone,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t fresh);
static ngx_int_t ngx_http_tokenbiryani_sqlite_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);
static void ngx_http_tokenbiryani_sqlite_exit_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf);
static ngx_int_t ngx_http_tokenbiryani_sqlite_post(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_job_t *job);
static int ngx_http_tokenbiryani_sqlite_flush_now(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_job_t *job);

static void ngx_http_tokenbiryani_sqlite_own(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log);
static void ngx_http_tokenbiryani_sqlite_thread(void *data, ngx_log_t *log);
static void ngx_http_tokenbiryani_sqlite_done(ngx_event_t *ev);
static void ngx_http_tokenbiryani_sqlite_run(
    ngx_http_tokenbiryani_sqlite_writer_t *w);
static void ngx_http_tokenbiryani_sqlite_opened(
    ngx_http_tokenbiryani_job_t *job);
static int ngx_http_tokenbiryani_sqlite_flush_exec(tb_store_t *db,
    ngx_http_tokenbiryani_job_t *job);
static int ngx_http_tokenbiryani_sqlite_flush_spend(tb_store_t *db,
    ngx_http_tokenbiryani_job_t *job);
static void ngx_http_tokenbiryani_sqlite_load_history(tb_store_t *db,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log);
static void ngx_http_tokenbiryani_sqlite_load_spend(tb_store_t *db,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log);
static void ngx_http_tokenbiryani_sqlite_load_settings(tb_store_t *db,
    ngx_http_tokenbiryani_store_load_t *ld);
static void ngx_http_tokenbiryani_sqlite_adopted_back(tb_store_t *db,
    ngx_http_tokenbiryani_store_load_t *ld);


const ngx_http_tokenbiryani_store_ops_t  ngx_http_tokenbiryani_sqlite_ops = {
    ngx_http_tokenbiryani_sqlite_load,
    ngx_http_tokenbiryani_sqlite_init_worker,
    ngx_http_tokenbiryani_sqlite_exit_worker,
    ngx_http_tokenbiryani_sqlite_post,
    ngx_http_tokenbiryani_sqlite_flush_now,
    NULL                                /* no peers: the zone knows all */
};


static ngx_http_tokenbiryani_sqlite_writer_t
    ngx_http_tokenbiryani_sqlite_writer;

#endif


ngx_int_t
ngx_http_tokenbiryani_sqlite_conf(ngx_conf_t *cf,
    ngx_http_tokenbiryani_main_conf_t *tmcf, const char *path)
{
#if (NGX_THREADS)
    size_t  len;

    /* "default": made with 32 threads unless thread_pool says otherwise */
    tmcf->thread_pool = ngx_thread_pool_add(cf, NULL);
    if (tmcf->thread_pool == NULL) {
        return NGX_ERROR;
    }

    len = ngx_strlen(path);

    tmcf->store_path.data = ngx_pnalloc(cf->pool, len + 1);
    if (tmcf->store_path.data == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(tmcf->store_path.data, path, len + 1);
    tmcf->store_path.len = len;
    tmcf->store_shown = tmcf->store_path;
    tmcf->store_backend = NGX_HTTP_TB_STORE_SQLITE;
    tmcf->store_ops = &ngx_http_tokenbiryani_sqlite_ops;

    return NGX_OK;

#else
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "tokenbiryani: %s: store.backend: sqlite writes in "
                       "nginx's thread pool, and this nginx is built without "
                       "threads (--with-threads)", tmcf->config_file.data);
    return NGX_ERROR;
#endif
}


#if (NGX_THREADS)

/*
 * The store file and its -wal and -shm files are made 0600 and, when the
 * master runs as root, given to the workers' user; the -wal and -shm files
 * stay beside it (SQLITE_FCNTL_PERSIST_WAL), so no worker needs to create
 * a file in a directory it may not write.
 */

static void
ngx_http_tokenbiryani_sqlite_own(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log)
{
    int               fd;
    ngx_uint_t        i;
    struct stat       st;
    ngx_core_conf_t  *ccf;
    u_char            path[NGX_MAX_PATH + 8];

    static const char  *suffix[] = { "", "-wal", "-shm" };

    if (tmcf->cycle == NULL || tmcf->store_path.len + 5 > NGX_MAX_PATH) {
        return;
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(tmcf->cycle->conf_ctx,
                                           ngx_core_module);

    for (i = 0; i < 3; i++) {
        ngx_sprintf(path, "%V%s%Z", &tmcf->store_path, suffix[i]);

        /* the file itself, never what a link there points at */

        fd = open((char *) path, O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC);

        if (fd == -1) {
            if (ngx_errno != NGX_ENOENT) {
                ngx_log_error(NGX_LOG_WARN, log, ngx_errno,
                              "tokenbiryani: \"%s\" is left as it is: it "
                              "cannot be opened as a file of its own (a "
                              "link is not followed)", path);
            }

            continue;
        }

        if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
            ngx_log_error(NGX_LOG_WARN, log, 0,
                          "tokenbiryani: \"%s\" is not a regular file: it is "
                          "left as it is", path);
            (void) close(fd);
            continue;
        }

        /* the history and what is sealed are nobody else's to read */

        if (fchmod(fd, 0600) == -1) {
            ngx_log_error(NGX_LOG_WARN, log, ngx_errno,
                          "tokenbiryani: chmod(\"%s\", 0600) failed", path);
        }

        if (geteuid() == 0 && ccf != NULL
            && ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT && ccf->user != 0
            && fchown(fd, ccf->user, ccf->group) == -1)
        {
            ngx_log_error(NGX_LOG_WARN, log, ngx_errno,
                          "tokenbiryani: chown(\"%s\") for the workers' "
                          "user failed: the store may not be writable by "
                          "them", path);
        }

        (void) close(fd);
    }
}


/* the records adopted at load, written back in their envelopes */
static void
ngx_http_tokenbiryani_sqlite_adopted_back(tb_store_t *db,
    ngx_http_tokenbiryani_store_load_t *ld)
{
    int                               rc;
    ngx_uint_t                        n;
    ngx_http_tokenbiryani_adopted_t  *ad;

    n = 0;

    for (ad = ld->adopted; ad; ad = ad->next) {
        switch (ad->kind) {

        case TB_REC_KEY:
            rc = tb_store_key_update(db, ad->name, ad->value);
            break;

        case TB_REC_ACCOUNT:
            rc = tb_store_account_put(db, ad->name, ad->value, ad->sealed, 0);
            break;

        default:
            rc = tb_store_meta_put(db, ad->name, ad->value);
            break;
        }

        if (rc != TB_STORE_OK) {
            ngx_log_error(NGX_LOG_WARN, ld->log, 0,
                          "tokenbiryani: \"%s\", adopted, could not be "
                          "written back (%s): it is adopted again at the "
                          "next start while store.adopt_unauthenticated is "
                          "set", ad->name, tb_store_error(db));
            continue;
        }

        n++;
    }

    ngx_http_tokenbiryani_store_adopted_free(ld, n);
}


/* a stored object into the new zone (refused ones said, left out) */
static int
ngx_http_tokenbiryani_sqlite_load_object(void *data, const char *id,
    size_t len, const char *value, size_t vlen)
{
    ngx_http_tokenbiryani_store_load_t *ld = data;

    (void) ngx_http_tokenbiryani_store_object_in(ld->tmcf, ld->log,
                                                 (const u_char *) id, len,
                                                 (const u_char *) value,
                                                 vlen, 1);
    return 0;
}


static ngx_int_t
ngx_http_tokenbiryani_sqlite_load(ngx_shm_zone_t *shm_zone,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_uint_t fresh)
{
    tb_store_t                          *db;
    ngx_http_tokenbiryani_store_load_t   ld;
    char                                 err[NGX_MAX_ERROR_STR];

    ngx_http_tokenbiryani_sqlite_own(tmcf, shm_zone->shm.log);

    if (!fresh) {
        return NGX_OK;
    }

    db = tb_store_open((char *) tmcf->store_path.data,
                       NGX_HTTP_TB_STORE_BUSY_MS, err, sizeof(err));
    if (db == NULL) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "tokenbiryani: %s", err);
        return NGX_ERROR;
    }

    ngx_memzero(&ld, sizeof(ld));
    ld.tmcf = tmcf;
    ld.log = shm_zone->shm.log;

    if (tb_store_keys(db, ngx_http_tokenbiryani_store_load_key, &ld)
        != TB_STORE_OK
        || tb_store_accounts(db, ngx_http_tokenbiryani_store_load_account,
                             &ld)
           != TB_STORE_OK)
    {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "tokenbiryani: %s", tb_store_error(db));
        ngx_http_tokenbiryani_store_adopted_free(&ld, 0);
        tb_store_close(db);
        return NGX_ERROR;
    }

    ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                  "tokenbiryani: the store \"%V\" loaded: %ui minted keys, "
                  "%ui accounts%s", &tmcf->store_path, ld.keys, ld.accounts,
                  ld.skipped ? " (some left out, see above)" : "");

    if (tb_store_objects(db, ngx_http_tokenbiryani_sqlite_load_object, &ld)
        != TB_STORE_OK)
    {
        ngx_log_error(NGX_LOG_ERR, shm_zone->shm.log, 0,
                      "tokenbiryani: %s: the batches kept before are not "
                      "known until it can be read", tb_store_error(db));
    }

    ngx_http_tokenbiryani_sqlite_load_settings(db, &ld);
    ngx_http_tokenbiryani_sqlite_adopted_back(db, &ld);
    ngx_http_tokenbiryani_sqlite_load_history(db, tmcf, shm_zone->shm.log);
    ngx_http_tokenbiryani_sqlite_load_spend(db, tmcf, shm_zone->shm.log);

    tb_store_close(db);

    return NGX_OK;
}


static ngx_int_t
ngx_http_tokenbiryani_sqlite_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_thread_task_t                      *task;
    ngx_http_tokenbiryani_job_t            *job;
    ngx_http_tokenbiryani_sqlite_writer_t  *w;

    w = &ngx_http_tokenbiryani_sqlite_writer;

    task = ngx_http_tokenbiryani_task(cycle->pool,
                                      ngx_http_tokenbiryani_sqlite_thread,
                                      ngx_http_tokenbiryani_sqlite_done, w,
                                      cycle->log);
    if (task == NULL) {
        return NGX_ERROR;
    }

    w->tmcf = tmcf;
    w->task = task;
    w->last = &w->pending;

    /*
     * SQLite runs in whichever of the pool's threads takes the task, and
     * glibc gives each thread that allocates an arena of its own (up to
     * eight per core): what SQLite freed in one was kept there, out of
     * reach of the others, and the writing worker grew by some MB a minute
     * for minutes (issue 30: 44 MB against 7 for the other worker; 14 MB
     * with one arena).  One task runs at a time: one arena serves them all.
     */
    (void) mallopt(M_ARENA_MAX, 1);

    /*
     * The worker's connection, opened now and kept: a store that cannot
     * be opened is said at once, and while a worker holds the file open,
     * another process closing it (an operator's sqlite3, a backup) is
     * never its last connection, which would remove the -wal and -shm
     * files a worker may not be allowed to make again.
     */

    job = &w->open;

    job->op = NGX_HTTP_TB_JOB_OPEN;
    job->done = ngx_http_tokenbiryani_sqlite_opened;
    job->data = w;

    (void) ngx_http_tokenbiryani_sqlite_post(tmcf, job);

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_sqlite_opened(ngx_http_tokenbiryani_job_t *job)
{
    if (job->rc != TB_STORE_OK) {
        ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                      "tokenbiryani: the store is not open in this worker "
                      "yet (it is tried again with each write): %s",
                      job->err);
    }
}


static ngx_int_t
ngx_http_tokenbiryani_sqlite_post(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_job_t *job)
{
    ngx_http_tokenbiryani_sqlite_writer_t  *w;

    w = &ngx_http_tokenbiryani_sqlite_writer;

    if (w->task == NULL) {
        return NGX_ERROR;
    }

    job->next = NULL;

    *w->last = job;
    w->last = &job->next;

    if (w->running == NULL) {
        ngx_http_tokenbiryani_sqlite_run(w);
    }

    return NGX_OK;
}


/*
 * The exiting worker's last flush, on a connection of its own: nginx's
 * thread pool has finished its tasks by now (its module exits first).
 */
static int
ngx_http_tokenbiryani_sqlite_flush_now(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_job_t *job)
{
    int          rc;
    tb_store_t  *db;

    db = tb_store_open((char *) tmcf->store_path.data,
                       NGX_HTTP_TB_STORE_BUSY_MS, job->err, sizeof(job->err));
    if (db == NULL) {
        return TB_STORE_ERROR;
    }

    rc = ngx_http_tokenbiryani_sqlite_flush_exec(db, job);

    tb_store_close(db);

    return rc;
}


static void
ngx_http_tokenbiryani_sqlite_exit_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    /* another worker (of the next generation) writes from now on */
    ngx_http_tokenbiryani_store_unelect(&tmcf->zone, ngx_pid);
}


/* every job waiting goes to the thread as one task */
static void
ngx_http_tokenbiryani_sqlite_run(ngx_http_tokenbiryani_sqlite_writer_t *w)
{
    ngx_http_tokenbiryani_job_t  *job;

    if (w->pending == NULL) {
        return;
    }

    w->running = w->pending;
    w->pending = NULL;
    w->last = &w->pending;

    if (ngx_thread_task_post(w->tmcf->thread_pool, w->task) == NGX_OK) {
        return;
    }

    /* the pool's queue is full: these fail now, from the event loop */

    for (job = w->running; job; job = job->next) {
        ngx_cpystrn((u_char *) job->err,
                    (u_char *) "the thread pool's queue is full", 
                    sizeof(job->err));
    }

    ngx_post_event(&w->task->event, &ngx_posted_events);
}


/* in the store's thread: a bucket read, kept (malloc: no pool here) */
static int
ngx_http_tokenbiryani_sqlite_usage_point(void *data, int64_t t,
    const char *group, const tb_usage_row_t *u)
{
    ngx_http_tokenbiryani_job_t *job = data;

    size_t                                n;
    ngx_http_tokenbiryani_usage_point_t  *p;
    ngx_http_tokenbiryani_job_usage_t    *us;

    us = &job->u.usage;

    if (us->npoints == us->points_size) {
        n = us->points_size ? us->points_size * 2 : 256;

        if (n > 200000) {
            /* more than any range asks for: the rest is left out */
            return 1;
        }

        p = realloc(us->points, n * sizeof(*p));
        if (p == NULL) {
            return 1;
        }

        us->points = p;
        us->points_size = n;
    }

    p = &us->points[us->npoints++];
    p->t = t;
    ngx_cpystrn((u_char *) p->group, (u_char *) (group ? group : ""),
                sizeof(p->group));
    p->u = *u;

    return 0;
}


static void
ngx_http_tokenbiryani_sqlite_thread(void *data, ngx_log_t *log)
{
    ngx_http_tokenbiryani_sqlite_writer_t *w = data;

    int                           rc;
    ngx_http_tokenbiryani_job_t  *job;
    char                          err[512];

    err[0] = '\0';

    for (job = w->running; job; job = job->next) {
        if (w->db == NULL && err[0] == '\0') {
            w->db = tb_store_open((char *) w->tmcf->store_path.data,
                                  NGX_HTTP_TB_STORE_BUSY_MS, err,
                                  sizeof(err));
        }

        if (w->db == NULL) {
            job->rc = TB_STORE_ERROR;
            ngx_cpystrn((u_char *) job->err, (u_char *) err,
                        sizeof(job->err));
            continue;
        }

        switch (job->op) {

        case NGX_HTTP_TB_JOB_KEY_INSERT:
            rc = tb_store_key_insert(w->db, job->u.record.name,
                                     job->u.record.digest,
                                     job->u.record.spec);
            break;

        case NGX_HTTP_TB_JOB_KEY_UPDATE:
            rc = tb_store_key_update(w->db, job->u.record.name,
                                     job->u.record.spec);
            break;

        case NGX_HTTP_TB_JOB_KEY_DELETE:
            rc = tb_store_key_delete(w->db, job->u.record.name);
            break;

        case NGX_HTTP_TB_JOB_SETTING:
            rc = tb_store_meta_put(w->db, job->u.record.name,
                                   job->u.record.spec);
            break;

        case NGX_HTTP_TB_JOB_ACCOUNT_PUT:
            rc = tb_store_account_put(w->db, job->u.record.name,
                                      job->u.record.spec,
                                      job->u.record.sealed,
                                      (int) job->u.record.create);
            break;

        case NGX_HTTP_TB_JOB_ACCOUNT_DELETE:
            rc = tb_store_account_delete(w->db, job->u.record.name);
            break;

        case NGX_HTTP_TB_JOB_OBJECT_PUT:
            rc = tb_store_object_put(w->db, job->u.record.name,
                                     job->u.record.spec);
            break;

        case NGX_HTTP_TB_JOB_OBJECT_DELETE:
            rc = tb_store_object_delete(w->db, job->u.record.name);
            break;

        case NGX_HTTP_TB_JOB_OPEN:
            rc = TB_STORE_OK;
            break;

        case NGX_HTTP_TB_JOB_USAGE:
            rc = tb_store_usage(w->db, job->u.usage.from, job->u.usage.step,
                                job->u.usage.by,
                                ngx_http_tokenbiryani_sqlite_usage_point, job);
            break;

        default: /* NGX_HTTP_TB_JOB_FLUSH */
            rc = ngx_http_tokenbiryani_sqlite_flush_exec(w->db, job);
            break;
        }

        job->rc = rc;

        if (rc == TB_STORE_ERROR) {
            ngx_cpystrn((u_char *) job->err,
                        (u_char *) tb_store_error(w->db), sizeof(job->err));
        }
    }

    /*
     * A store that failed is opened afresh next time: it may be another
     * file by then (restored from a backup, the disk remounted).  Not one
     * another process holds locked: closing it could leave that process
     * the file's last connection, which removes the -wal and -shm files
     * this one needs and may not be allowed to make again.
     */

    for (job = w->running; job; job = job->next) {
        if (job->rc == TB_STORE_ERROR && w->db && !tb_store_busy(w->db)) {
            tb_store_close(w->db);
            w->db = NULL;
            break;
        }
    }
}


static void
ngx_http_tokenbiryani_sqlite_done(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_sqlite_writer_t *w = ev->data;

    const char                   *err;
    ngx_uint_t                    wrote;
    ngx_http_tokenbiryani_job_t  *job, *next;

    err = NULL;
    wrote = 0;

    for (job = w->running; job; job = job->next) {
        if (job->op == NGX_HTTP_TB_JOB_USAGE
            || job->op == NGX_HTTP_TB_JOB_OPEN)
        {
            /* not a write */
            continue;
        }

        wrote = 1;

        if (job->rc == TB_STORE_ERROR) {
            err = job->err;
            break;
        }
    }

    if (wrote) {
        ngx_http_tokenbiryani_store_wrote(w->tmcf, err, ev->log);
    }

    job = w->running;
    w->running = NULL;

    for ( /* void */ ; job; job = next) {
        next = job->next;
        job->done(job);
    }

    ngx_http_tokenbiryani_sqlite_run(w);
}


/*
 * In the flush's transaction: each record's usage into its minute of the
 * usage history, the ledgers and conversations charged since the last
 * write, and once an hour the history rolled up and the oldest pruned.
 */

static int
ngx_http_tokenbiryani_sqlite_flush_spend(tb_store_t *db,
    ngx_http_tokenbiryani_job_t *job)
{
    ngx_uint_t                             i;
    ngx_http_tokenbiryani_usage_sum_t     *sum;
    ngx_http_tokenbiryani_ledger_view_t   *lv;
    ngx_http_tokenbiryani_session_view_t  *sv;
    ngx_http_tokenbiryani_job_flush_t     *fl;
    u_char                                 id[32], *p;

    fl = &job->u.flush;

    for (i = 0; i < fl->nsums; i++) {
        sum = &fl->sums[i];

        if (tb_store_usage_add(db, 60, sum->t, sum->acct, sum->model,
                               sum->key, &sum->u)
            != TB_STORE_OK)
        {
            return TB_STORE_ERROR;
        }
    }

    for (i = 0; i < fl->nledgers; i++) {
        lv = &fl->ledgers[i];

        if (lv->kind == NGX_HTTP_TB_LEDGER_ACCOUNT) {
            if (lv->id >= fl->nslots || fl->slot_ids[lv->id][0] == '\0') {
                continue;
            }

            if (tb_store_ledger_put(db, NGX_HTTP_TB_LEDGER_ACCOUNT,
                                    (char *) fl->slot_ids[lv->id],
                                    &lv->ledger, sizeof(tb_ledger_t))
                != TB_STORE_OK)
            {
                return TB_STORE_ERROR;
            }

            continue;
        }

        p = ngx_sprintf(id, "%016uxL", lv->id);
        *p = '\0';

        if (tb_store_ledger_put(db, NGX_HTTP_TB_LEDGER_KEY, (char *) id,
                                &lv->ledger, sizeof(tb_ledger_t))
            != TB_STORE_OK)
        {
            return TB_STORE_ERROR;
        }
    }

    for (i = 0; i < fl->nsessions; i++) {
        sv = &fl->sessions[i];

        p = ngx_sprintf(id, "%016uxL", sv->session);
        *p = '\0';

        /* its account by id: slots are this zone's */
        if (sv->slot >= 0 && (ngx_uint_t) sv->slot < fl->nslots) {
            ngx_cpystrn(sv->account, fl->slot_ids[sv->slot], TB_ID_MAX + 1);
        }

        if (tb_store_session_put(db, (char *) id, (char *) sv->key,
                                 sv->last_ms, sv, sizeof(*sv))
            != TB_STORE_OK)
        {
            return TB_STORE_ERROR;
        }
    }

    if (!fl->rollup) {
        return TB_STORE_OK;
    }

    /* conversations silent for 90 days go, and all but the newest kept */

    if (tb_store_sessions_prune(db, fl->now_ms - 90LL * 86400000,
                                NGX_HTTP_TB_SESSIONS)
        != TB_STORE_OK)
    {
        return TB_STORE_ERROR;
    }

    return tb_store_usage_rollup(db, fl->now_ms / 1000);
}


/* one transaction: the slots' ids, the history, the oldest pruned */
static int
ngx_http_tokenbiryani_sqlite_flush_exec(tb_store_t *db,
    ngx_http_tokenbiryani_job_t *job)
{
    ngx_uint_t                          i;
    ngx_http_tokenbiryani_record_t     *rec;
    ngx_http_tokenbiryani_job_flush_t  *fl;
    u_char                              layout[128];

    fl = &job->u.flush;

    ngx_http_tokenbiryani_history_layout(layout, sizeof(layout));

    if (tb_store_begin(db) != TB_STORE_OK) {
        goto failed;
    }

    if (tb_store_meta_put(db, "history_layout", (char *) layout)
        != TB_STORE_OK)
    {
        goto failed;
    }

    for (i = 0; i < fl->nslots; i++) {
        if (fl->slot_ids[i][0]
            && tb_store_slot_put(db, i, (char *) fl->slot_ids[i])
               != TB_STORE_OK)
        {
            goto failed;
        }
    }

    for (i = 0; i < fl->nrecords; i++) {
        rec = &fl->records[i];

        if (tb_store_history_put(db, TB_STORE_RECORDS, rec->seq, rec,
                offsetof(ngx_http_tokenbiryani_record_t, cands)
                + ngx_min(rec->ncands, NGX_HTTP_TB_INSPECT_CANDS)
                  * sizeof(ngx_http_tokenbiryani_inspect_cand_t))
            != TB_STORE_OK)
        {
            goto failed;
        }
    }

    for (i = 0; i < fl->nevents; i++) {
        if (tb_store_history_put(db, TB_STORE_EVENTS, fl->events[i].seq,
                                 &fl->events[i],
                                 sizeof(ngx_http_tokenbiryani_event_t))
            != TB_STORE_OK)
        {
            goto failed;
        }
    }

    if (ngx_http_tokenbiryani_sqlite_flush_spend(db, job) != TB_STORE_OK) {
        goto failed;
    }

    if (tb_store_history_prune(db, TB_STORE_RECORDS, fl->keep_records)
        != TB_STORE_OK
        || tb_store_history_prune(db, TB_STORE_EVENTS, fl->keep_events)
           != TB_STORE_OK
        || tb_store_commit(db) != TB_STORE_OK)
    {
        goto failed;
    }

    return TB_STORE_OK;

failed:

    ngx_cpystrn((u_char *) job->err, (u_char *) tb_store_error(db),
                sizeof(job->err));
    tb_store_rollback(db);

    return TB_STORE_ERROR;
}


static void
ngx_http_tokenbiryani_sqlite_load_history(tb_store_t *db,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log)
{
    ngx_http_tokenbiryani_hload_t        hl;
    ngx_http_tokenbiryani_zone_stats_t   zs;
    char                                 stored[128];

    if (tb_store_meta_get(db, "history_layout", stored, sizeof(stored))
        != TB_STORE_OK)
    {
        /* none written yet */
        return;
    }

    if (ngx_http_tokenbiryani_store_hload_begin(&hl, tmcf, stored, log)
        != NGX_OK)
    {
        return;
    }

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    if (tb_store_slots(db, ngx_http_tokenbiryani_store_hload_slot, &hl)
        != TB_STORE_OK
        || tb_store_history(db, TB_STORE_RECORDS, zs.ring_size,
                            ngx_http_tokenbiryani_store_hload_record, &hl)
           != TB_STORE_OK
        || tb_store_history(db, TB_STORE_EVENTS, zs.events_size,
                            ngx_http_tokenbiryani_store_hload_event, &hl)
           != TB_STORE_OK)
    {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "tokenbiryani: the store's request history is not read "
                      "back: %s", tb_store_error(db));
    }

    ngx_http_tokenbiryani_store_hload_end(&hl, log);
}


static void
ngx_http_tokenbiryani_sqlite_load_spend(tb_store_t *db,
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_log_t *log)
{
    ngx_http_tokenbiryani_sload_t  sl;

    ngx_memzero(&sl, sizeof(sl));
    sl.tmcf = tmcf;

    if (tb_store_ledgers(db, ngx_http_tokenbiryani_store_sload_ledger, &sl)
        != TB_STORE_OK
        || tb_store_sessions(db, NGX_HTTP_TB_SESSIONS,
                             ngx_http_tokenbiryani_store_sload_session, &sl)
           != TB_STORE_OK)
    {
        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "tokenbiryani: the store's spend ledgers are not read "
                      "back: %s; caps count from nothing", tb_store_error(db));
        return;
    }

    ngx_http_tokenbiryani_store_sload_end(&sl, log);
}


static void
ngx_http_tokenbiryani_sqlite_load_settings(tb_store_t *db,
    ngx_http_tokenbiryani_store_load_t *ld)
{
    char  value[TB_REC_ENVELOPE_LEN(64) + 1];

    if (tb_store_meta_get(db, "setting.routing.strategy", value,
                          sizeof(value))
        != TB_STORE_OK || value[0] == '\0')
    {
        return;
    }

    ngx_http_tokenbiryani_store_load_strategy(ld, value, ngx_strlen(value));
}

#endif
