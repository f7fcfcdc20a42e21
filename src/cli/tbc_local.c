/*
 * tokenbiryani init, serve, console: a gateway of its own on this machine.
 *
 *   D/tokenbiryani.yaml     the pool (no accounts yet), an admin key, the
 *                           SQLite store beside it
 *   D/nginx.conf            loads the module, listens, /v1/ /admin/
 *                           /healthz /console
 *   D/.tokenbiryani/        nginx's prefix: logs, pid, temp files, and the
 *                           gateway's address for the other commands
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tbc.h"


/* where the tokenbiryani package keeps its configuration */
#define TBC_SYSTEM_DIR        "/etc/tokenbiryani"


#ifndef TBC_MODULE
#define TBC_MODULE            "ngx_http_tokenbiryani_module.so"
#endif

#define TBC_NGINX             "/usr/sbin/nginx"


static const char *
tbc_dir(tbc_t *c, char *abs)
{
    const char  *d;

    d = tbc_opt(c, "dir");
    if (d == NULL) {
        d = ".";
    }

    if (realpath(d, abs) == NULL) {
        tbc_err("%s: %s", d, strerror(errno));
        return NULL;
    }

    return abs;
}


/* as root, nginx's workers run as another user: they must reach D */
static int
tbc_reachable(const char *dir)
{
    char         path[PATH_MAX], *slash;
    struct stat  st;

    if (geteuid() != 0) {
        return 1;
    }

    snprintf(path, sizeof(path), "%s", dir);

    for ( ;; ) {
        if (stat(path, &st) == 0 && !(st.st_mode & S_IXOTH)) {
            tbc_err("%s is not reachable by nginx's workers (they run as "
                    "another user when nginx starts as root): init in a "
                    "directory others may enter, or not as root", path);
            return 0;
        }

        slash = strrchr(path, '/');

        if (slash == NULL || slash == path) {
            return 1;
        }

        *slash = '\0';
    }
}


static int
tbc_write(const char *path, const char *text, mode_t mode)
{
    int      fd;
    size_t   len;
    ssize_t  n;

    /* its mode before its text: an admin key is never readable by others,
     * not even in a file written again with --force */
    fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW, mode);

    if (fd == -1 || fchmod(fd, mode) != 0 || ftruncate(fd, 0) != 0) {
        tbc_err("%s: %s", path, strerror(errno));

        if (fd != -1) {
            close(fd);
        }

        return 0;
    }

    len = strlen(text);
    n = write(fd, text, len);

    if (close(fd) != 0 || n != (ssize_t) len) {
        tbc_err("%s: could not be written", path);
        return 0;
    }

    return 1;
}


/* "bir_" and 48 hex digits of the system's random */
static int
tbc_new_key(char *key)
{
    int            fd, i;
    unsigned char  r[24];

    fd = open("/dev/urandom", O_RDONLY);

    if (fd == -1 || read(fd, r, sizeof(r)) != (ssize_t) sizeof(r)) {
        tbc_err("/dev/urandom: %s", strerror(errno));

        if (fd != -1) {
            close(fd);
        }

        return 0;
    }

    close(fd);

    strcpy(key, "bir_");

    for (i = 0; i < 24; i++) {
        sprintf(key + 4 + i * 2, "%02x", r[i]);
    }

    return 1;
}


/* a path nginx.conf and YAML can hold unquoted */
/* a key that may be written into YAML as it is */
static int
tbc_api_key_ok(const char *k)
{
    return strlen(k) <= 512
           && strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789-_.") == strlen(k);
}


static int
tbc_plain_path(const char *p)
{
    return strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                     "0123456789._-+/") == strlen(p);
}


/*
 * The YAML init writes: the SQLite store at db (its secret key at key_file,
 * else beside the YAML file), an account from api_key (NULL: none yet),
 * an admin key and a client key, made here into admin and key
 */
static int
tbc_init_yaml(tbc_t *c, char *yaml, size_t size, const char *who,
    const char *db, const char *key_file, const char *api_key, char *admin,
    char *key)
{
    char  accounts[1024];

    if (api_key) {
        snprintf(accounts, sizeof(accounts),
                 "\n  - id: acct-01\n    type: anthropic_api\n"
                 "    api_key: \"%s\"", api_key);
    }

    if (!tbc_new_key(admin) || !tbc_new_key(key)) {
        return 0;
    }

    snprintf(yaml, size,
             "# written by `tokenbiryani %s`: the pool, its keys, where it "
             "keeps them\n"
             "%s"
             "store:\n"
             "  backend: sqlite\n"
             "  path: %s\n"
             "%s%s%s"
             "pricing: builtin                  # the dated table shipped "
             "with the module\n"
             "routing:\n"
             "  strategy: sticky_headroom\n"
             "accounts:%s\n"
             "keys:\n"
             "  - key: %s\n"
             "    name: admin                      # the console and "
             "the command\n"
             "    admin: true\n"
             "  - key: %s\n"
             "    name: default                    # for clients: "
             "no /admin\n",
             who,
             tbc_opt(c, "allow-private-hosts")
             ? "server:\n  allow_private_hosts: true      # accounts added at "
               "runtime may reach\n                                   # "
               "loopback and private hosts\n"
             : "",
             db, key_file ? "  secret_key_path: " : "",
             key_file ? key_file : "", key_file ? "\n" : "",
             api_key ? accounts : " []          # add them: "
             "`tokenbiryani accounts add`, or the console", admin, key);

    return 1;
}


/* argv run and waited for: its exit code, -1 when it could not be run;
 * quiet: its output thrown away */
static int
tbc_run(char *const argv[], int quiet)
{
    int    status, fd;
    pid_t  pid;

    pid = fork();

    if (pid == 0) {
        if (quiet) {
            fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                (void) dup2(fd, STDOUT_FILENO);
                (void) dup2(fd, STDERR_FILENO);
            }
        }

        execvp(argv[0], argv);
        _exit(127);
    }

    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        return -1;
    }

    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}


/*
 * init --system: the gateway the Debian packages installed.  The packaged
 * YAML (an empty pool, no keys) gets an admin key and a client key, the
 * site is enabled, nginx checks the whole and is reloaded through its
 * service when it runs (systemd's; without systemd, nginx -s reload, what
 * the init script would do).
 */
static int
tbc_init_system(tbc_t *c)
{
    int           rc;
    int           pid;
    FILE         *f;
    char          admin[64], key[64], yaml[4096], keybuf[1024],
                  line[1024];
    const char   *api_key;
    struct stat   st;

    static const char  yaml_path[] = TBC_SYSTEM_DIR "/tokenbiryani.yaml";
    static const char  site[] = "/etc/nginx/sites-enabled/tokenbiryani";
    static char *const nginx_t[] = { "nginx", "-t", "-q", NULL };
    static char *const systemctl[] = { "systemctl", "reload-or-restart",
                                       "nginx", NULL };
    static char *const reload[] = { "nginx", "-s", "reload", NULL };

    if (geteuid() != 0) {
        tbc_err("init --system writes into /etc and reloads nginx: run it "
                "as root");
        return TBC_FAIL;
    }

    if (stat(yaml_path, &st) != 0
        || stat("/etc/nginx/sites-available/tokenbiryani", &st) != 0)
    {
        tbc_err("%s or /etc/nginx/sites-available/tokenbiryani is not "
                "there: init --system sets up what the tokenbiryani package "
                "installed (apt-get install tokenbiryani)", yaml_path);
        return TBC_FAIL;
    }

    f = fopen(yaml_path, "r");
    if (f == NULL) {
        tbc_err("%s: %s", yaml_path, strerror(errno));
        return TBC_FAIL;
    }

    /* the packaged file has no keys (they are commented out) */
    rc = 0;

    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "keys:", 5) == 0) {
            rc = 1;
        }
    }

    fclose(f);

    if (rc && !tbc_opt(c, "force")) {
        tbc_err("%s has keys already: --force to write it again (new keys; "
                "the store keeps what was minted and added at runtime)",
                yaml_path);
        return TBC_FAIL;
    }

    api_key = tbc_secret(c, "api-key", keybuf, sizeof(keybuf));

    if (api_key && !tbc_api_key_ok(api_key)) {
        tbc_err("--api-key: that is not an Anthropic key");
        return TBC_USAGE;
    }

    if (!tbc_init_yaml(c, yaml, sizeof(yaml), "init --system",
                       "/var/lib/tokenbiryani/tokenbiryani.db",
                       TBC_SYSTEM_DIR "/tokenbiryani.key", api_key, admin,
                       key))
    {
        return TBC_FAIL;
    }

    if (!tbc_write(yaml_path, yaml, 0600)) {
        return TBC_FAIL;
    }

    if (lstat(site, &st) != 0
        && symlink("../sites-available/tokenbiryani", site) != 0)
    {
        tbc_err("%s: %s", site, strerror(errno));
        return TBC_FAIL;
    }

    if (tbc_run(nginx_t, 0) != 0) {
        tbc_err("nginx -t refused the configuration (above): nginx was not "
                "reloaded");
        return TBC_FAIL;
    }

    /* running: reloaded through its service, else by a signal */
    f = fopen("/run/nginx.pid", "r");
    pid = 0;

    if (f) {
        if (fscanf(f, "%d", &pid) != 1 || pid <= 0 || kill(pid, 0) != 0) {
            pid = 0;
        }

        fclose(f);
    }

    rc = -1;

    if (pid) {
        rc = tbc_run(stat("/run/systemd/system", &st) == 0 ? systemctl
                                                            : reload, 0);
    }

    printf("wrote %s (%s; an admin key for the console and this command, "
           "a client key)\nenabled %s\n%s\n\n"
           "the admin key (the console's; this command reads it from the "
           "file: sudo tokenbiryani\n-c " TBC_SYSTEM_DIR "/tokenbiryani.yaml "
           "status):\n\n  %s\n\n"
           "a client (the client key: it cannot reach /admin):\n\n"
           "export ANTHROPIC_BASE_URL=http://127.0.0.1:8787\n"
           "export ANTHROPIC_AUTH_TOKEN=%s\n",
           yaml_path, api_key ? "one account" : "no account yet: add one in "
           "the console, http://127.0.0.1:8787/console", site,
           rc == 0 ? "nginx reloaded"
           : pid ? "nginx could not be reloaded (above): reload it"
                 : "nginx is not running: start it (systemctl start nginx)",
           admin, key);

    return TBC_OK;
}


int
tbc_init(tbc_t *c)
{
    char         dir[PATH_MAX], yaml_path[PATH_MAX + 64],
                 conf_path[PATH_MAX + 64], prefix[PATH_MAX + 64],
                 url_path[PATH_MAX + 128], key[64], admin[64],
                 yaml[PATH_MAX + 2048], conf[3 * PATH_MAX + 2048],
                 accounts[1024], keybuf[1024], db[PATH_MAX + 64];
    char         module_path[PATH_MAX];
    const char  *listen, *api_key, *module, *port;
    struct stat  st;

    if (c->nargs) {
        tbc_err("init takes no arguments (see tokenbiryani init --help)");
        return TBC_USAGE;
    }

    if (tbc_opt(c, "system")) {
        return tbc_init_system(c);
    }

    if (tbc_dir(c, dir) == NULL || !tbc_reachable(dir)) {
        return TBC_FAIL;
    }

    listen = tbc_opt(c, "listen");
    if (listen == NULL) {
        listen = "127.0.0.1:8787";
    }

    port = strrchr(listen, ':');

    if (strlen(listen) > 64
        || strspn(listen, "0123456789.:[]abcdefABCDEF") != strlen(listen)
        || port == NULL || port == listen || port[1] == '\0'
        || strspn(port + 1, "0123456789") != strlen(port + 1)
        || atoi(port + 1) < 1 || atoi(port + 1) > 65535)
    {
        tbc_err("--listen: HOST:PORT, an address and a port "
                "(127.0.0.1:8787)");
        return TBC_USAGE;
    }

    module = tbc_opt(c, "module");
    if (module == NULL) {
        module = TBC_MODULE;
    }

    /* nginx reads load_module from its own prefix: the path made whole */
    if (realpath(module, module_path) == NULL) {
        tbc_err("the module %s is not there (build it with `make`, or "
                "--module)", module);
        return TBC_FAIL;
    }

    module = module_path;

    /* both paths are written into nginx.conf and YAML as they are */
    if (!tbc_plain_path(dir) || !tbc_plain_path(module)) {
        tbc_err("%s: a path of letters, digits and . _ - + / only, for "
                "nginx.conf", tbc_plain_path(dir) ? module : dir);
        return TBC_USAGE;
    }

    snprintf(yaml_path, sizeof(yaml_path), "%s/tokenbiryani.yaml", dir);
    snprintf(conf_path, sizeof(conf_path), "%s/nginx.conf", dir);
    snprintf(prefix, sizeof(prefix), "%s/.tokenbiryani", dir);
    snprintf(url_path, sizeof(url_path), "%s/url", prefix);

    if (!tbc_opt(c, "force")
        && (stat(yaml_path, &st) == 0 || stat(conf_path, &st) == 0))
    {
        tbc_err("%s or %s is there already: --force to write them again "
                "(a new admin key)", yaml_path, conf_path);
        return TBC_FAIL;
    }

    api_key = tbc_secret(c, "api-key", keybuf, sizeof(keybuf));

    if (api_key && !tbc_api_key_ok(api_key)) {
        tbc_err("--api-key: that is not an Anthropic key");
        return TBC_USAGE;
    }

    snprintf(db, sizeof(db), "%s/tokenbiryani.db", dir);

    if (!tbc_init_yaml(c, yaml, sizeof(yaml), "init", db, NULL, api_key,
                       admin, key))
    {
        return TBC_FAIL;
    }

    snprintf(conf, sizeof(conf),
             "# written by `tokenbiryani init`; started by `tokenbiryani "
             "serve`\n"
             "load_module %s;\n\n"
             "worker_processes 2;\n"
             "error_log logs/error.log notice;\n"
             "pid logs/nginx.pid;\n\n"
             "events { worker_connections 1024; }\n\n"
             "http {\n"
             "    access_log logs/access.log;\n"
             "    client_body_temp_path client_body_temp;\n"
             "    proxy_temp_path proxy_temp;\n"
             "    fastcgi_temp_path fastcgi_temp;\n"
             "    uwsgi_temp_path uwsgi_temp;\n"
             "    scgi_temp_path scgi_temp;\n\n"
             "    tokenbiryani_zone    tokenbiryani 32m;\n"
             "    tokenbiryani_config  %s;\n\n"
             "    server {\n"
             "        listen %s;\n\n"
             "        client_max_body_size     32m;\n"
             "        client_body_buffer_size  1m;\n\n"
             "        location /v1/          { tokenbiryani_pass; }\n"
             "        location /admin/       { tokenbiryani_admin; }\n"
             "        location = /healthz    { tokenbiryani_healthz; }\n"
             "        location /console      { tokenbiryani_console; }\n"
             "    }\n"
             "}\n", module, yaml_path, listen);

    if ((mkdir(prefix, 0711) != 0 && errno != EEXIST)
        || chmod(prefix, 0711) != 0)
    {
        tbc_err("%s: %s", prefix, strerror(errno));
        return TBC_FAIL;
    }

    snprintf(url_path, sizeof(url_path), "%s/logs", prefix);
    (void) mkdir(url_path, 0755);
    snprintf(url_path, sizeof(url_path), "%s/url", prefix);
    snprintf(accounts, sizeof(accounts), "http://%s\n", listen);

    if (!tbc_write(yaml_path, yaml, 0600)
        || !tbc_write(conf_path, conf, 0644)
        || !tbc_write(url_path, accounts, 0644))
    {
        return TBC_FAIL;
    }

    printf("wrote %s (%s; an admin key for the console and this "
           "command, a client key)\nwrote %s (listens on %s)\n\n"
           "next:\n"
           "  tokenbiryani serve -d      start it\n"
           "  tokenbiryani console       open the console%s\n"
           "%s"
           "\nthen point a client at it (the client key: it cannot reach "
           "/admin):\n\n"
           "export ANTHROPIC_BASE_URL=http://%s\n"
           "export ANTHROPIC_AUTH_TOKEN=%s\n",
           yaml_path, api_key ? "one account" : "no account yet", conf_path,
           listen, api_key ? "" : ": add an account there",
           api_key ? "" : "  or: tokenbiryani accounts add acct-01 "
                          "--api-key sk-ant-...\n",
           listen, key);

    return TBC_OK;
}


/* nginx -p D/.tokenbiryani/ -c D/nginx.conf [extra...] */
static int
tbc_nginx(const char *dir, const char *a1, const char *a2, int wait)
{
    int          status;
    char         prefix[PATH_MAX + 64], conf[PATH_MAX + 64];
    pid_t        pid;
    const char  *nginx;
    char        *argv[10];
    int          argc;

    nginx = getenv("TOKENBIRYANI_NGINX");
    if (nginx == NULL || nginx[0] == '\0') {
        nginx = TBC_NGINX;
    }

    snprintf(prefix, sizeof(prefix), "%s/.tokenbiryani/", dir);
    snprintf(conf, sizeof(conf), "%s/nginx.conf", dir);

    argc = 0;
    argv[argc++] = (char *) nginx;
    argv[argc++] = "-p";
    argv[argc++] = prefix;
    argv[argc++] = "-c";
    argv[argc++] = conf;

    if (a1) {
        argv[argc++] = (char *) a1;
        argv[argc++] = (char *) a2;
    }

    argv[argc] = NULL;

    if (!wait) {
        execv(nginx, argv);
        tbc_err("%s: %s", nginx, strerror(errno));
        return TBC_FAIL;
    }

    pid = fork();

    if (pid == 0) {
        execv(nginx, argv);
        tbc_err("%s: %s", nginx, strerror(errno));
        _exit(127);
    }

    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        tbc_err("nginx could not be started: %s", strerror(errno));
        return TBC_FAIL;
    }

    return (WIFEXITED(status) && WEXITSTATUS(status) == 0) ? TBC_OK
                                                           : TBC_FAIL;
}


const char *
tbc_init_url(const char *dir)
{
    FILE         *f;
    char          path[PATH_MAX + 64];
    static char   url[256];

    snprintf(path, sizeof(path), "%.*s/.tokenbiryani/url", PATH_MAX,
             dir ? dir : ".");
    f = fopen(path, "r");

    if (f == NULL) {
        return NULL;
    }

    if (fgets(url, sizeof(url), f) == NULL) {
        url[0] = '\0';
    }

    fclose(f);
    url[strcspn(url, "\r\n")] = '\0';

    return url[0] ? url : NULL;
}


/*
 * The master process of the gateway started in dir, from its pid file:
 * 0 when there is none, or the pid is not a live nginx (a stale file, a
 * pid reused since)
 */
static pid_t
tbc_running(const char *dir)
{
    int      fd;
    char     path[PATH_MAX + 64], buf[64];
    long     v;
    char    *end;
    ssize_t  n;

    snprintf(path, sizeof(path), "%s/.tokenbiryani/logs/nginx.pid", dir);

    fd = open(path, O_RDONLY | O_NOFOLLOW);
    if (fd == -1) {
        return 0;
    }

    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);

    if (n <= 0) {
        return 0;
    }

    buf[n] = '\0';
    errno = 0;
    v = strtol(buf, &end, 10);

    if (errno || v <= 1 || v > INT_MAX || (*end != '\n' && *end != '\0')) {
        return 0;
    }

    if (kill((pid_t) v, 0) != 0 && errno != EPERM) {
        return 0;
    }

    /* nginx names its master "nginx: master process ..." */

    snprintf(path, sizeof(path), "/proc/%ld/cmdline", v);

    fd = open(path, O_RDONLY);
    if (fd != -1) {
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);

        if (n <= 0) {
            return 0;
        }

        buf[n] = '\0';

        if (strstr(buf, "nginx") == NULL) {
            return 0;
        }
    }

    return (pid_t) v;
}


int
tbc_serve(tbc_t *c)
{
    int          i, rc;
    long         code;
    char         dir[PATH_MAX], yaml[PATH_MAX + 64];
    pid_t        pid;
    cJSON       *j;
    struct timespec  ts;

    if (c->nargs) {
        tbc_err("serve takes no arguments (see tokenbiryani serve --help)");
        return TBC_USAGE;
    }

    if (tbc_dir(c, dir) == NULL) {
        return TBC_FAIL;
    }

    pid = tbc_running(dir);

    /*
     * Stopped by its pid file's process, not by `nginx -s quit`, which
     * reads the configuration first and refuses when it is broken: the
     * moment an operator most wants it stopped
     */

    if (tbc_opt(c, "stop")) {
        if (pid == 0) {
            tbc_err("no gateway is running in %s", dir);
            return TBC_FAIL;
        }

        if (kill(pid, SIGQUIT) != 0) {
            tbc_err("could not stop nginx (pid %ld): %s", (long) pid,
                    strerror(errno));
            return TBC_FAIL;
        }

        ts.tv_sec = 0;
        ts.tv_nsec = 50 * 1000 * 1000;

        /*
         * Its requests finish first: a stream, or a console's live feed,
         * can hold it for as long as they last.  Five seconds, then what
         * is happening is said
         */

        for (i = 0; i < 100 && kill(pid, 0) == 0; i++) {
            nanosleep(&ts, NULL);
        }

        if (i == 100) {
            printf("stopping the gateway in %s (pid %ld): it takes no new "
                   "request, and ends when those in flight do (`kill %ld` "
                   "ends them now)\n", dir, (long) pid, (long) pid);
            return TBC_OK;
        }

        printf("stopped the gateway in %s (pid %ld)\n", dir, (long) pid);
        return TBC_OK;
    }

    if (pid) {
        tbc_err("a gateway is already running in %s (pid %ld): "
                "`tokenbiryani serve --stop` first", dir, (long) pid);
        return TBC_FAIL;
    }

    snprintf(yaml, sizeof(yaml), "%s/nginx.conf", dir);

    if (access(yaml, R_OK) != 0) {
        tbc_err("%s: not there - `tokenbiryani init` first", yaml);
        return TBC_FAIL;
    }

    if (!tbc_opt(c, "daemon")) {
        /* in the foreground: nginx is this process from now */
        return tbc_nginx(dir, "-g", "daemon off;", 0);
    }

    rc = tbc_nginx(dir, NULL, NULL, 1);
    if (rc != TBC_OK) {
        tbc_err("nginx did not start: see %s/.tokenbiryani/logs/error.log",
                dir);
        return rc;
    }

    /* it answers /healthz once its workers serve (503 with no account) */

    ts.tv_sec = 0;
    ts.tv_nsec = 50 * 1000 * 1000;

    for (i = 0; i < 200; i++) {
        code = tbc_call(c, "GET", "/healthz", NULL, &j);
        cJSON_Delete(j);

        if (code) {
            break;
        }

        nanosleep(&ts, NULL);
    }

    if (code == 0) {
        tbc_err("nginx started but nothing answers at %s", c->url);
        return TBC_UNREACHABLE;
    }

    printf("tokenbiryani is running on %s (nginx -p %s/.tokenbiryani/)\n"
           "  tokenbiryani console      the console\n"
           "  tokenbiryani status       the pool\n"
           "  tokenbiryani serve --stop stop it\n", c->url, dir);

    return TBC_OK;
}


/*
 * The browser is given a file of this user's only (0600) that sends it
 * on to the URL: a ticket on xdg-open's or the browser's command line
 * could be read by any local user from /proc within its minute.  The file
 * is removed once the ticket has expired.
 */
static void
tbc_open_browser(const char *url)
{
    int          fd;
    char         path[PATH_MAX], page[4096];
    pid_t        pid;
    const char  *tmp;

    if (strpbrk(url, "\"<>&'") != NULL) {
        return;
    }

    tmp = getenv("XDG_RUNTIME_DIR");
    if (tmp == NULL || tmp[0] == '\0') {
        tmp = "/tmp";
    }

    snprintf(path, sizeof(path), "%s/tokenbiryani-console-XXXXXX.html",
             tmp);

    fd = mkstemps(path, 5);
    if (fd == -1) {
        return;
    }

    snprintf(page, sizeof(page),
             "<!doctype html><meta charset=\"utf-8\">"
             "<meta http-equiv=\"refresh\" content=\"0;url=%s\">"
             "<a href=\"%s\">the tokenbiryani console</a>\n", url, url);

    if (write(fd, page, strlen(page)) != (ssize_t) strlen(page)) {
        close(fd);
        unlink(path);
        return;
    }

    close(fd);

    pid = fork();

    if (pid == 0) {
        /* the opener, then the file's removal after the ticket's minute;
         * holding none of the command's output open meanwhile */
        (void) setsid();

        fd = open("/dev/null", O_RDWR);

        if (fd != -1) {
            (void) dup2(fd, STDIN_FILENO);
            (void) dup2(fd, STDOUT_FILENO);
            (void) dup2(fd, STDERR_FILENO);

            if (fd > STDERR_FILENO) {
                close(fd);
            }
        }

        if (fork() == 0) {
            execlp("xdg-open", "xdg-open", path, (char *) NULL);
            _exit(127);
        }

        sleep(65);
        unlink(path);
        _exit(0);
    }

    if (pid == -1) {
        unlink(path);
    }
}


int
tbc_console(tbc_t *c)
{
    int           rc;
    char          url[1024];
    cJSON        *j;
    const char   *ticket;

    if (c->nargs) {
        tbc_err("console takes no arguments");
        return TBC_USAGE;
    }

    j = tbc_admin(c, "POST", "/admin/console-ticket", "{}", &rc);
    if (j == NULL) {
        return rc;
    }

    ticket = tbc_str(j, "ticket", NULL);

    if (ticket == NULL) {
        tbc_err("the gateway gave no ticket");
        cJSON_Delete(j);
        return TBC_FAIL;
    }

    /* the ticket in the fragment: the browser never sends it in a URL */
    if ((size_t) snprintf(url, sizeof(url), "%s/console/#ticket=%s", c->url,
                          ticket)
        >= sizeof(url))
    {
        tbc_err("the gateway's URL is too long");
        cJSON_Delete(j);
        return TBC_USAGE;
    }

    cJSON_Delete(j);

    printf("%s\n(signed in by a ticket good for one use within %.0f s)\n",
           url, 60.0);

    if (!tbc_opt(c, "no-browser")
        && (getenv("DISPLAY") || getenv("WAYLAND_DISPLAY")))
    {
        tbc_open_browser(url);
    }

    return TBC_OK;
}
