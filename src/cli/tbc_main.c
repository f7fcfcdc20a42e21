/*
 * tokenbiryani: the command line, the help, where the gateway and its
 * admin key are found.
 */

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tbc.h"


typedef struct {
    const char               *name;
    int                     (*run)(tbc_t *c);
    const char               *usage;
    const char               *help;
    const char               *opts;     /* its options, " a b c " */
} tbc_command_t;


/* what every command takes */
static const char  tbc_global_opts[] = " url key config json no-color dir ";


static const char  tbc_global_help[] =
    "global options (before or after the command):\n"
    "  --url URL        the gateway (default $TOKENBIRYANI_URL, else the\n"
    "                   one `init` wrote in this directory, else\n"
    "                   http://127.0.0.1:8787)\n"
    "  --key -          an admin key, read from stdin (default\n"
    "                   $TOKENBIRYANI_KEY, else the first admin key of the\n"
    "                   configuration file); a key given on the command\n"
    "                   line works, with a warning: others can read it\n"
    "  -c, --config F   the configuration file (default ./tokenbiryani.yaml)\n"
    "  --json           the gateway's answer as JSON, for scripts\n"
    "  --no-color       no colour (also NO_COLOR, or not a terminal)\n"
    "  -h, --help       this help, or a command's\n";


static const tbc_command_t  tbc_commands[] = {

    { "init", tbc_init, "init [--dir D] [--listen HOST:PORT] [--api-key -]\n"
      "       [--allow-private-hosts] [--force] | init --system",
      "Writes D/tokenbiryani.yaml (no accounts yet, unless --api-key seeds\n"
      "one; an admin key; the SQLite store), D/nginx.conf that loads the\n"
      "module and listens on HOST:PORT (127.0.0.1:8787), and prints the\n"
      "next steps. It does not overwrite without --force.\n"
      "  --dir D          where (default: the current directory)\n"
      "  --listen H:P     the gateway's address\n"
      "  --api-key -      an Anthropic key for a first account, read from\n"
      "                   stdin\n"
      "  --module F       the module to load (default: the one built with\n"
      "                   this command)\n"
      "  --allow-private-hosts\n"
      "                   let accounts added at runtime reach loopback and\n"
      "                   private addresses (a local mock, a proxy of your\n"
      "                   own); off, they reach public hosts only\n"
      "  --force          overwrite what is there\n"
      "  --system         the gateway of the Debian packages instead (as\n"
      "                   root): an admin key and a client key written into\n"
      "                   /etc/tokenbiryani/tokenbiryani.yaml, the site\n"
      "                   /etc/nginx/sites-enabled/tokenbiryani enabled,\n"
      "                   nginx -t, and nginx reloaded through its service\n"
      "                   (--api-key and --allow-private-hosts apply too)\n",
      " dir listen api-key module allow-private-hosts force system " },

    { "serve", tbc_serve, "serve [--dir D] [-d]",
      "Starts nginx with D/nginx.conf (what `init` wrote), in the\n"
      "foreground; with -d in the background, once it answers.\n"
      "  --dir D          where init wrote (default: the current directory)\n"
      "  -d, --daemon     in the background\n"
      "  --stop           stop the one started in D\n",
      " dir daemon stop " },

    { "console", tbc_console, "console [--no-browser]",
      "Prints the console's address, signed in through a one-time ticket\n"
      "(good for 60 s, once): never a key in a URL. With a desktop\n"
      "(DISPLAY or WAYLAND_DISPLAY) it opens it too.\n"
      "  --no-browser     print it only\n",
      " no-browser " },

    { "status", tbc_status, "status",
      "The pool: what is ready, the next reset, the queue, the cache, and\n"
      "each account's state and the headroom of its three windows.\n",
      " " },

    { "doctor", tbc_doctor, "doctor [--api-key - | --oauth-token -] "
      "[options]",
      "One real request (max_tokens 1) to the Anthropic API or U: the\n"
      "headers that came back beside the nine rate-limit headers the\n"
      "gateway reads (a subscription's six unified ones), and what it\n"
      "parsed from them. Exits 1 when any is missing.\n"
      "  --api-key -      the key, read from stdin (default\n"
      "                   $ANTHROPIC_API_KEY)\n"
      "  --oauth-token -  your own subscription's token instead, read\n"
      "                   from stdin: sent as a bearer with the OAuth beta\n"
      "  --base-url U     default https://api.anthropic.com\n"
      "  --model M        default claude-haiku-4-5\n",
      " api-key oauth-token base-url model " },

    { "accounts", tbc_accounts,
      "accounts list|add ID|test [ID]|rm ID|enable ID|disable ID",
      "  list             every account, its state and what it spent\n"
      "  add ID           add one at runtime, probed first:\n"
      "                   --api-key - [--name N] [--base-url U]\n"
      "                   [--priority P] [--cost-tier T] [--spend-cap USD]\n"
      "                   [--no-test]; --api-key - reads it from stdin,\n"
      "                   and without it $ANTHROPIC_API_KEY is used\n"
      "  test [ID]        the doctor check of one account, or of all\n"
      "  rm ID            remove an account added at runtime\n"
      "  enable ID        clear what the gateway decided about it\n"
      "  disable ID       take it out of service\n",
      " api-key name base-url priority cost-tier spend-cap no-test type " },

    { "keys", tbc_keys,
      "keys list|mint NAME|rescope NAME|revoke NAME",
      "  list             the file's keys and the minted ones\n"
      "  mint NAME        a new key, shown once: [--admin] [--models M,..]\n"
      "                   [--pool ID,..] [--rpm N] [--spend-cap USD]\n"
      "                   [--expires-in SECONDS]\n"
      "  rescope NAME     change a minted key: the same options\n"
      "  revoke NAME      refuse it from now\n",
      " admin models pool rpm spend-cap expires-in " },

    { "strategies", tbc_strategies, "strategies",
      "The routing strategies, and which one runs.\n",
      " " },

    { "requests", tbc_requests, "requests [ID] [--limit N]",
      "The last requests; with ID one of them, as the inspector shows it:\n"
      "the attempt chain, every candidate's verdict and score, tokens,\n"
      "cost, time to first token, time queued.\n",
      " limit " },

    { "usage", tbc_usage, "usage [--range 1h|24h|7d|30d] "
      "[--by account|model|key]",
      "Requests, tokens, cost and the cache's share over a range, by\n"
      "account, model or key.\n",
      " range by " },

    { "sessions", tbc_sessions, "sessions [--limit N]",
      "The conversations that cost most, and the runaways.\n",
      " limit " },

    { NULL, NULL, NULL, NULL, NULL }
};


/* options that take a value; every other --name is a flag */
static const char  *tbc_valued[] = {
    "url", "key", "config", "dir", "listen", "api-key", "oauth-token",
    "module",
    "base-url", "model", "name", "priority", "cost-tier", "spend-cap",
    "models", "pool", "rpm", "expires-in", "limit", "range", "by", NULL
};


static void
tbc_usage_all(FILE *f)
{
    const tbc_command_t  *cmd;

    fprintf(f, "usage: tokenbiryani [options] COMMAND [args]\n\n"
            "commands:\n");

    for (cmd = tbc_commands; cmd->name; cmd++) {
        fprintf(f, "  %s\n", cmd->usage);
    }

    fprintf(f, "\n%s\n`tokenbiryani COMMAND --help` says more.\n",
            tbc_global_help);
}


/* whether name is one of the words of " a b c " */
static int
tbc_opt_in(const char *list, const char *name)
{
    size_t       n;
    const char  *p;

    n = strlen(name);

    if (n == 0) {
        return 0;
    }

    for (p = list; (p = strstr(p, name)) != NULL; p += n) {
        if (p[-1] == ' ' && p[n] == ' ') {
            return 1;
        }
    }

    return 0;
}


static int
tbc_is_valued(const char *name)
{
    int  i;

    for (i = 0; tbc_valued[i]; i++) {
        if (strcmp(tbc_valued[i], name) == 0) {
            return 1;
        }
    }

    return 0;
}


int
main(int argc, char **argv)
{
    int                   i, help;
    char                 *a, *eq, **words, keybuf[256];
    const char           *nc;
    tbc_t                 c;
    const tbc_command_t  *cmd;

    memset(&c, 0, sizeof(tbc_t));

    words = calloc((size_t) argc + 1, sizeof(char *));
    if (words == NULL) {
        tbc_err("out of memory");
        return TBC_FAIL;
    }

    help = 0;

    /* options anywhere; the first word is the command, the rest its args */

    for (i = 1; i < argc; i++) {
        a = argv[i];

        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help = 1;
            continue;
        }

        if (strcmp(a, "-c") == 0) {
            a = "--config";
        } else if (strcmp(a, "-d") == 0) {
            a = "--daemon";
        }

        if (a[0] == '-' && a[1] == '-' && a[2] != '\0') {
            if (c.nopts == 32) {
                tbc_err("too many options");
                return TBC_USAGE;
            }

            a += 2;
            eq = strchr(a, '=');

            if (eq) {
                *eq = '\0';
                c.opt_value[c.nopts] = eq + 1;

            } else if (tbc_is_valued(a)) {
                if (i + 1 == argc) {
                    tbc_err("--%s needs a value", a);
                    return TBC_USAGE;
                }

                c.opt_value[c.nopts] = argv[++i];

                if ((strcmp(a, "key") == 0 || strcmp(a, "api-key") == 0
                     || strcmp(a, "oauth-token") == 0)
                    && strcmp(argv[i], "-") != 0)
                {
                    /* a secret: kept here, blanked from /proc's cmdline */
                    c.opt_value[c.nopts] = strdup(argv[i]);

                    if (c.opt_value[c.nopts] == NULL) {
                        tbc_err("out of memory");
                        return TBC_USAGE;
                    }

                    memset(argv[i], 'x', strlen(argv[i]));
                }

            } else {
                c.opt_value[c.nopts] = "1";
            }

            c.opt_name[c.nopts++] = a;
            continue;
        }

        if (a[0] == '-' && a[1] != '\0') {
            tbc_err("unknown option %s (see tokenbiryani --help)", a);
            return TBC_USAGE;
        }

        words[c.nargs++] = a;
    }

    if (c.nargs == 0) {
        tbc_usage_all(help ? stdout : stderr);
        return help ? TBC_OK : TBC_USAGE;
    }

    for (cmd = tbc_commands; cmd->name; cmd++) {
        if (strcmp(cmd->name, words[0]) == 0) {
            break;
        }
    }

    if (cmd->name == NULL) {
        tbc_err("no command \"%s\" (see tokenbiryani --help)", words[0]);
        return TBC_USAGE;
    }

    if (help) {
        printf("usage: tokenbiryani %s\n\n%s\n%s", cmd->usage, cmd->help,
               tbc_global_help);
        return TBC_OK;
    }

    /* an option the command does not take is a mistake, said as one */

    for (i = 0; i < c.nopts; i++) {
        if (!tbc_opt_in(tbc_global_opts, c.opt_name[i])
            && !tbc_opt_in(cmd->opts, c.opt_name[i]))
        {
            tbc_err("%s takes no option --%s (see tokenbiryani %s --help)",
                    cmd->name, c.opt_name[i], cmd->name);
            return TBC_USAGE;
        }
    }

    c.args = words + 1;
    c.nargs--;

    c.json = tbc_opt(&c, "json") != NULL;

    nc = getenv("NO_COLOR");
    c.color = isatty(STDOUT_FILENO) && (nc == NULL || nc[0] == '\0')
              && tbc_opt(&c, "no-color") == NULL;

    c.config = tbc_opt(&c, "config");
    if (c.config == NULL) {
        c.config = "tokenbiryani.yaml";
    }

    c.url = tbc_opt(&c, "url");
    if (c.url == NULL) {
        c.url = getenv("TOKENBIRYANI_URL");
    }

    if (c.url == NULL || c.url[0] == '\0') {
        c.url = tbc_init_url(tbc_opt(&c, "dir"));
        c.url_from_file = (c.url != NULL);

        if (c.url == NULL) {
            c.url = "http://127.0.0.1:8787";
        }
    }

    c.key = tbc_secret(&c, "key", keybuf, sizeof(keybuf));
    c.key_from = "--key";

    if (c.key == NULL) {
        c.key = getenv("TOKENBIRYANI_KEY");
        c.key_from = "$TOKENBIRYANI_KEY";
    }

    if (c.key == NULL || c.key[0] == '\0') {
        c.key = tbc_config_admin_key(c.config, c.config_err,
                                     sizeof(c.config_err));
        c.key_from = c.config;
    }

    return cmd->run(&c);
}
