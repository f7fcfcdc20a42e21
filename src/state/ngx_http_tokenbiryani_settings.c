/*
 * Settings changed at runtime (see ngx_http_tokenbiryani_settings.h).
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_settings.h"

#include <sys/prctl.h>
#include <cjson/cJSON.h>


typedef struct {
    uint64_t                       gen;       /* 0: never looked */
    const tb_strategy_t           *strategy;
    ngx_uint_t                     runtime;
} ngx_http_tokenbiryani_settings_cache_t;


static ngx_http_tokenbiryani_settings_cache_t  ngx_http_tokenbiryani_settings;


/* a strategy by name: built in, or registered by another module */
const tb_strategy_t *
ngx_http_tokenbiryani_find_strategy(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const char *name)
{
    ngx_uint_t            i;
    const tb_strategy_t  *st, **plugins;

    st = tb_strategy_builtin(name);

    if (st) {
        return st;
    }

    plugins = tmcf->plugins.elts;

    for (i = 0; i < tmcf->plugins.nelts; i++) {
        if (ngx_strcmp(plugins[i]->name, name) == 0) {
            return plugins[i];
        }
    }

    return NULL;
}


const tb_strategy_t *
ngx_http_tokenbiryani_strategy_nth(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_uint_t n, ngx_uint_t *plugin)
{
    ngx_uint_t            i;
    const tb_strategy_t  **plugins;

    for (i = 0; tb_builtin_strategy_table[i].name; i++) {
        if (i == n) {
            *plugin = 0;
            return &tb_builtin_strategy_table[i];
        }
    }

    n -= i;

    if (n >= tmcf->plugins.nelts) {
        return NULL;
    }

    plugins = tmcf->plugins.elts;
    *plugin = 1;

    return plugins[n];
}


static void
ngx_http_tokenbiryani_settings_sync(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    uint64_t                                 gen;
    const tb_strategy_t                     *st;
    ngx_http_tokenbiryani_settings_cache_t  *c;
    u_char                                   name[32];

    c = &ngx_http_tokenbiryani_settings;

    if (c->gen && c->gen == ngx_http_tokenbiryani_settings_gen(&tmcf->zone))
    {
        return;
    }

    gen = ngx_http_tokenbiryani_settings_strategy(&tmcf->zone, name,
                                                  sizeof(name));

    st = name[0] ? ngx_http_tokenbiryani_find_strategy(tmcf, (char *) name)
                 : NULL;

    /* a name this configuration does not know (a plugin since removed):
     * the file's, as the master said when it loaded the store */

    c->strategy = st ? st : tmcf->strategy;
    c->runtime = (st != NULL);
    c->gen = gen;
}


const tb_strategy_t *
ngx_http_tokenbiryani_strategy(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_http_tokenbiryani_settings_sync(tmcf);

    return ngx_http_tokenbiryani_settings.strategy;
}


ngx_uint_t
ngx_http_tokenbiryani_strategy_is_runtime(
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_http_tokenbiryani_settings_sync(tmcf);

    return ngx_http_tokenbiryani_settings.runtime;
}


/*
 * POST /admin/reload: workers run as nginx's user, and may neither signal a
 * master that runs as root nor read a YAML file only root may read.  So
 * each configuration, as the master loads it, forks a small helper that
 * keeps root's rights: it waits on a pipe whose write end only the master
 * and the workers hold; woken, it reads the file as the master would, and
 * only when it loads sends SIGHUP to the pid in nginx's pid file; its
 * answer goes into the zone for the tickets of the workers that asked.
 * When every write end is gone (nginx stopped, or a later configuration
 * took over and the workers of this one exited) it reads end of file and
 * exits.
 */

/*
 * The write ends this master holds, of every configuration not yet
 * released: a worker closes those that are not its own configuration's,
 * so that a helper's pipe ends when its configuration's workers are gone.
 */
#define NGX_HTTP_TB_RELOAD_FDS  64

static int         ngx_http_tokenbiryani_reload_fds[NGX_HTTP_TB_RELOAD_FDS];
static ngx_uint_t  ngx_http_tokenbiryani_nreload_fds;

/* the helper of the configuration that runs, reaped when the master exits */
static ngx_pid_t   ngx_http_tokenbiryani_reloader_pid;


static void
ngx_http_tokenbiryani_reloader_close(void *data)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf = data;

    ngx_uint_t  i;

    if (tmcf->reload_fd == -1) {
        return;
    }

    for (i = 0; i < ngx_http_tokenbiryani_nreload_fds; i++) {
        if (ngx_http_tokenbiryani_reload_fds[i] == tmcf->reload_fd) {
            ngx_http_tokenbiryani_reload_fds[i] =
                ngx_http_tokenbiryani_reload_fds[
                    --ngx_http_tokenbiryani_nreload_fds];
            break;
        }
    }

    (void) close(tmcf->reload_fd);
    tmcf->reload_fd = -1;
}


void
ngx_http_tokenbiryani_reloader_worker(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_uint_t  i;

    for (i = 0; i < ngx_http_tokenbiryani_nreload_fds; i++) {
        if (ngx_http_tokenbiryani_reload_fds[i] != tmcf->reload_fd) {
            (void) close(ngx_http_tokenbiryani_reload_fds[i]);
        }
    }

    ngx_http_tokenbiryani_nreload_fds = 0;
}


/* the ids of a's accounts that b does not have (b NULL: all of a's) */
static cJSON *
ngx_http_tokenbiryani_account_ids(const tb_config_t *a, const tb_config_t *b)
{
    size_t   i;
    cJSON   *arr;

    arr = cJSON_CreateArray();
    if (arr == NULL) {
        return NULL;
    }

    for (i = 0; i < a->naccounts; i++) {
        if (b == NULL || tb_config_account(b, a->accounts[i].id) == NULL) {
            cJSON_AddItemToArray(arr, cJSON_CreateString(a->accounts[i].id));
        }
    }

    return arr;
}


/*
 * In the helper, for every ticket up to upto: the file read as the master
 * reads it (as root, in the environment nginx started with), checked
 * against this build's strategies, and only then the master signalled.
 */
static void
ngx_http_tokenbiryani_reloader_check(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const char *pidfile, uint64_t upto)
{
    int           pf;
    char         *json, buf[64], err[TB_CONFIG_ERRLEN];
    cJSON        *root;
    ssize_t       n;
    ngx_pid_t     pid;
    tb_config_t  *cf;
    u_char        text[TB_CONFIG_ERRLEN + 64], *p;

    cf = tb_config_load_file((char *) tmcf->config_file.data, NULL, err,
                             sizeof(err));

    if (cf == NULL) {
        p = ngx_snprintf(text, sizeof(text), "nothing was changed: %s", err);
        ngx_http_tokenbiryani_reload_answer(&tmcf->zone, upto, 0, text,
                                            p - text);
        return;
    }

    if (ngx_http_tokenbiryani_find_strategy(tmcf, cf->routing_strategy)
        == NULL)
    {
        p = ngx_snprintf(text, sizeof(text), "nothing was changed: %V:%ui: "
                         "routing.strategy: unknown strategy \"%s\"",
                         &tmcf->config_file,
                         (ngx_uint_t) cf->routing_strategy_line,
                         cf->routing_strategy);
        ngx_http_tokenbiryani_reload_answer(&tmcf->zone, upto, 0, text,
                                            p - text);
        tb_config_free(cf);
        return;
    }

    root = cJSON_CreateObject();

    if (root) {
        cJSON_AddBoolToObject(root, "reloading", 1);
        cJSON_AddItemToObject(root, "accounts",
                              ngx_http_tokenbiryani_account_ids(cf, NULL));
        cJSON_AddItemToObject(root, "added",
                              ngx_http_tokenbiryani_account_ids(cf,
                                                                tmcf->tbcf));
        cJSON_AddItemToObject(root, "removed",
                              ngx_http_tokenbiryani_account_ids(tmcf->tbcf,
                                                                cf));
        cJSON_AddStringToObject(root, "strategy", cf->routing_strategy);
    }

    json = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    tb_config_free(cf);

    pid = 0;
    pf = open(pidfile, O_RDONLY);

    if (pf != -1) {
        n = read(pf, buf, sizeof(buf) - 1);
        (void) close(pf);

        if (n > 0) {
            buf[n] = '\0';
            pid = (ngx_pid_t) atoi(buf);
        }
    }

    if (json == NULL || pid <= 1 || kill(pid, SIGHUP) == -1) {
        p = ngx_snprintf(text, sizeof(text), "the file loads, but the master "
                         "could not be signalled (pid file \"%s\"): run "
                         "nginx -s reload", pidfile);
        ngx_http_tokenbiryani_reload_answer(&tmcf->zone, upto, 0, text,
                                            p - text);
        cJSON_free(json);
        return;
    }

    ngx_http_tokenbiryani_reload_answer(&tmcf->zone, upto, 1, (u_char *) json,
                                        ngx_strlen(json));
    cJSON_free(json);
}


static void
ngx_http_tokenbiryani_reloader(ngx_http_tokenbiryani_main_conf_t *tmcf,
    int fd, const char *pidfile)
{
    int        i;
    char       buf[64];
    ssize_t    n;
    sigset_t   set;

    /* a name of its own (ps, and the test harness, tell it from a worker) */
    (void) prctl(PR_SET_NAME, "tb-reloader", 0, 0, 0);

    /* nothing of nginx's: its signal handlers, its files, its sockets */

    sigemptyset(&set);
    (void) sigprocmask(SIG_SETMASK, &set, NULL);

    for (i = 1; i < NSIG; i++) {
        (void) signal(i, SIG_DFL);
    }

    if (fd != 3) {
        if (dup2(fd, 3) == -1) {
            _exit(1);
        }

        fd = 3;
    }

    for (i = 0; i < 3; i++) {
        (void) close(i);
    }

    if (open("/dev/null", O_RDWR) == 0) {
        if (dup2(0, 1) == -1 || dup2(0, 2) == -1) {
            _exit(1);
        }
    }

    closefrom(4);

    for ( ;; ) {
        n = read(fd, buf, sizeof(buf));

        if (n == 0) {
            _exit(0);
        }

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }

            _exit(1);
        }

        /* every ticket given by now is answered by this one check */
        ngx_http_tokenbiryani_reloader_check(tmcf, pidfile,
            ngx_http_tokenbiryani_reload_asked(&tmcf->zone));
    }
}


ngx_int_t
ngx_http_tokenbiryani_reloader_start(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log)
{
    int                  fds[2];
    ngx_pid_t            pid;
    ngx_core_conf_t     *ccf;
    ngx_pool_cleanup_t  *cln;
    char                 pidfile[NGX_MAX_PATH];

    tmcf->reload_fd = -1;

    if (tmcf->cycle == NULL || ngx_test_config) {
        return NGX_OK;
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(tmcf->cycle->conf_ctx,
                                           ngx_core_module);

    if (ccf == NULL || ccf->pid.len == 0 || ccf->pid.len >= NGX_MAX_PATH) {
        return NGX_OK;
    }

    ngx_cpystrn((u_char *) pidfile, ccf->pid.data, ccf->pid.len + 1);

    cln = ngx_pool_cleanup_add(tmcf->cycle->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    if (pipe2(fds, O_CLOEXEC) == -1) {
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      "tokenbiryani: pipe() for /admin/reload failed");
        return NGX_OK;
    }

    pid = fork();

    if (pid == -1) {
        ngx_log_error(NGX_LOG_ALERT, log, ngx_errno,
                      "tokenbiryani: fork() for /admin/reload failed");
        (void) close(fds[0]);
        (void) close(fds[1]);
        return NGX_OK;
    }

    if (pid == 0) {
        (void) close(fds[1]);
        ngx_http_tokenbiryani_reloader(tmcf, fds[0], pidfile);
        _exit(0);
    }

    (void) close(fds[0]);

    if (ngx_nonblocking(fds[1]) == -1) {
        (void) close(fds[1]);
        return NGX_OK;
    }

    if (ngx_http_tokenbiryani_nreload_fds == NGX_HTTP_TB_RELOAD_FDS) {
        /* that many configurations alive at once: this one goes without */
        (void) close(fds[1]);
        return NGX_OK;
    }

    ngx_http_tokenbiryani_reload_fds[ngx_http_tokenbiryani_nreload_fds++] =
        fds[1];
    ngx_http_tokenbiryani_reloader_pid = pid;

    tmcf->reload_fd = fds[1];

    cln->handler = ngx_http_tokenbiryani_reloader_close;
    cln->data = tmcf;

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_reloader_ask(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    if (tmcf->reload_fd == -1) {
        return NGX_DECLINED;
    }

    /* a full pipe: reloads asked for and not yet made, this one among them */

    if (write(tmcf->reload_fd, "r", 1) == -1 && ngx_errno != NGX_EAGAIN) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The master exits: its helper's pipe is closed and the helper, which
 * reads end of file then, reaped - not left to an init that may not reap.
 */
void
ngx_http_tokenbiryani_reloader_exit(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    int         status;
    ngx_uint_t  i;

    ngx_http_tokenbiryani_reloader_close(tmcf);

    if (ngx_http_tokenbiryani_reloader_pid <= 0) {
        return;
    }

    for (i = 0; i < 100; i++) {
        if (waitpid(ngx_http_tokenbiryani_reloader_pid, &status, WNOHANG)
            != 0)
        {
            break;
        }

        ngx_msleep(2);
    }

    ngx_http_tokenbiryani_reloader_pid = 0;
}
