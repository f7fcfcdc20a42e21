/*
 * tokenbiryani: the operator's command.  A client of the gateway's /admin
 * API (libcurl, cJSON), but for `doctor`, which makes one real request to
 * an upstream, and `init` / `serve` / `console`, which set up and start a
 * gateway of its own on this machine.
 *
 * Plain C; it links src/core for the YAML loader and the rate-limit
 * header parser, so what it shows is what the gateway reads.
 */

#ifndef TBC_H
#define TBC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>


/* exit codes */
#define TBC_OK                0
#define TBC_FAIL              1       /* the check failed: doctor, test */
#define TBC_USAGE             2       /* a wrong command line */
#define TBC_UNREACHABLE       3       /* no gateway answered */
#define TBC_REFUSED           4       /* the gateway refused the request */


typedef struct {
    const char               *url;            /* the gateway */
    const char               *key;            /* its admin key */
    const char               *key_from;       /* where the key came from */
    int                       url_from_file;  /* the url is init's file's */
    int                       probe_refused;  /* a 400 that carried a probe:
                                                 the upstream said no */
    const char               *config;         /* tokenbiryani.yaml */
    char                      config_err[512]; /* why it could not be read,
                                                 when it is there */
    int                       json;           /* --json */
    int                       color;          /* on a terminal, no NO_COLOR */

    /* the options of the command, by name ("limit", "range", ...) */
    int                       nopts;
    const char               *opt_name[32];
    const char               *opt_value[32];

    /* its words after the command */
    int                       nargs;
    char                    **args;
} tbc_t;


/* where name stands among the n names, or -1 */
int tbc_find(const char *const *names, int n, const char *name);

/* an option's value, or NULL; a flag's presence ("1") */
const char *tbc_opt(const tbc_t *c, const char *name);

/*
 * A secret option (--key, --api-key): "-" reads the first line of stdin
 * into buf; a value on the command line is used with a warning (other
 * users of the machine can read it in /proc while the command runs; the
 * command blanks it from its argv at once); NULL when not given.
 */
const char *tbc_secret(const tbc_t *c, const char *name, char *buf,
    size_t size);

/* errors: one line on stderr, "tokenbiryani: ..." */
void tbc_err(const char *fmt, ...);

/*
 * The gateway: one request to its admin API (body: JSON text or NULL).
 * Returns the HTTP status with *out the answer parsed (NULL if it was not
 * JSON), or 0 when nothing answered - having said why on stderr.
 */
long tbc_call(tbc_t *c, const char *method, const char *path,
    const char *body, cJSON **out);

/*
 * A libcurl handle for one request: url with the headers hs, the answer's
 * body to sink(data), libcurl's words into err (CURL_ERROR_SIZE);
 * connect_ms to connect, a minute in all, no signals.  NULL, said, when
 * libcurl does not start.
 */
CURL *tbc_curl(const char *url, struct curl_slist *hs,
    curl_write_callback sink, void *data, char *err, long connect_ms);

/* the request made: CURLE_OK with the HTTP status in *code, else 0 */
CURLcode tbc_curl_perform(CURL *h, long *code);

/*
 * tbc_call, and the answer must be 2xx: otherwise the gateway's own words
 * on stderr and NULL, *rc the exit code to end with.
 */
cJSON *tbc_admin(tbc_t *c, const char *method, const char *path,
    const char *body, int *rc);

/* an Anthropic-shaped error's message, or "" */
const char *tbc_error_message(const cJSON *j);

/* output: colour, and the figures as the tables show them */
const char *tbc_c(const tbc_t *c, const char *what);   /* "green", "reset" */
int tbc_w(int w, const char *s);                      /* printf width, w cols */
void tbc_wrap(int indent, int width, const char *s);  /* at spaces only */
void tbc_usd(char *buf, size_t size, double n);      /* "$0.0042" */
void tbc_pct(char *buf, size_t size, double f);        /* "98%", "—" */
void tbc_tokens(char *buf, size_t size, double n);     /* "702k", "1.23M" */
void tbc_clock(char *buf, size_t size, double secs);   /* "00:41", "1h05m" */
void tbc_json_print(const cJSON *j);

/* a JSON member as a number, or the default */
double tbc_num(const cJSON *obj, const char *name, double dflt);
const char *tbc_str(const cJSON *obj, const char *name, const char *dflt);


/* the commands */
int tbc_status(tbc_t *c);
int tbc_doctor(tbc_t *c);
int tbc_accounts(tbc_t *c);
int tbc_keys(tbc_t *c);
int tbc_strategies(tbc_t *c);
int tbc_requests(tbc_t *c);
int tbc_usage(tbc_t *c);
int tbc_sessions(tbc_t *c);
int tbc_init(tbc_t *c);
int tbc_serve(tbc_t *c);
int tbc_console(tbc_t *c);

/* the address `init` wrote in dir (NULL: "."), or NULL */
const char *tbc_init_url(const char *dir);

/* the admin key from the configuration file, or NULL */
const char *tbc_config_admin_key(const char *path, char *err, size_t size);


#endif /* TBC_H */
