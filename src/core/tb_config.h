/*
 * tokenbiryani YAML configuration: the schema of the reference
 * implementation (server, routing, retry, breaker, queue, batch, store,
 * spend, cache, pacing, sessions, observability, oauth, pricing, accounts,
 * keys), loaded with libyaml into plain structs.
 *
 * Plain C, no nginx headers: the loader is unit-tested and fuzzed alone.
 * Everything is allocated with malloc() and released by tb_config_free().
 */

#ifndef TB_CONFIG_H
#define TB_CONFIG_H

#include <stddef.h>
#include <stdint.h>


#define TB_CONFIG_ERRLEN      1024

/* "not set" for the optional numbers below (caps, limits) */
#define TB_UNSET              (-1)
#define TB_AUTO               (-2)     /* absent: the loader decides */


typedef struct {
    char                     *key;
    char                     *value;
} tb_kv_t;


typedef struct {
    tb_kv_t                  *items;
    size_t                    n;
} tb_kvlist_t;


typedef struct {
    char                    **items;
    size_t                    n;
} tb_strlist_t;


typedef enum {
    TB_ACCOUNT_ANTHROPIC_API = 0,
    TB_ACCOUNT_BEDROCK,
    TB_ACCOUNT_VERTEX,
    TB_ACCOUNT_OAUTH
} tb_account_type_e;


typedef enum {
    TB_PRIORITY_INTERACTIVE = 0,
    TB_PRIORITY_BATCH = 10
} tb_priority_e;


typedef struct {
    /* adapter options (accounts[].options); NULL when not given */
    char                     *region;
    char                     *profile;
    char                     *project;
    char                     *beta_header;
    char                     *credentials_path;
    char                     *token_env;
    char                     *access_token;
    char                     *token_path;
    char                     *expiry_path;
    int64_t                   expiry_skew_seconds;    /* TB_UNSET */
    tb_kvlist_t               model_map;
    char                     *anthropic_version;  /* the body's, for a
                                                     platform account */

    /* bedrock: SigV4 credentials (or api_key, a Bedrock API key); from
     * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or
     * AWS_BEARER_TOKEN_BEDROCK when the file gives none */
    char                     *access_key_id;
    char                     *secret_access_key;
    char                     *session_token;
} tb_account_options_t;


typedef struct {
    char                     *id;
    char                     *name;                   /* "" by default */
    tb_account_type_e         type;
    char                     *api_key;                /* NULL if absent */
    char                     *base_url;               /* as written, or "" */

    /* base_url (or the type's default) split up */
    unsigned                  tls:1;
    char                     *host;                   /* no brackets */
    int                       port;                   /* always set */
    char                     *path_prefix;            /* "" or "/x/y" */

    double                    priority;               /* 0.0 */
    double                    cost_tier;              /* 1.0 */
    tb_strlist_t              models;                 /* ["*"] */
    unsigned                  models_any:1;           /* models is ["*"] */
    int64_t                   max_concurrency;        /* 16 */
    double                    spend_cap_usd;          /* TB_UNSET */
    unsigned                  enabled:1;              /* true */
    tb_kvlist_t               headers;                /* extra upstream */
    tb_account_options_t      options;
    unsigned                  observable_limits:1;    /* true */
    unsigned                  cache_reads_count:1;    /* false */
    double                    assumed_headroom;       /* 0.5 */
    int                       replenishment;          /* TB_REFILL_*, auto */

    /* the capacity domain it shares limits with, by name; NULL: learned
     * from the organisation its answers name */
    char                     *capacity_domain;

    /* why it can take no request (a Bedrock account with no credentials
     * anywhere): a constant string, or NULL */
    const char               *unusable;

    /* vertex: the service account its tokens are made for (tb_gsa_t),
     * or NULL with options.access_token a token of the operator's */
    void                     *gsa;

    /* oauth: where its token (in api_key) came from ("api_key",
     * "options.access_token", "options.token_env",
     * "options.credentials_path"), and when it expires (ms, 0: not
     * said) */
    const char               *token_source;
    int64_t                   token_expires_ms;

    unsigned                  line;                   /* of "- id:" */
} tb_account_conf_t;


typedef struct {
    char                     *key;                    /* plaintext */
    char                     *name;                   /* "default" */
    tb_strlist_t              models;                 /* ["*"] */
    tb_strlist_t              pool;                   /* [] = all */
    int64_t                   rpm;                    /* TB_UNSET */
    double                    spend_cap_usd;          /* TB_UNSET */
    tb_priority_e             priority;               /* interactive */
    double                    max_wait_seconds;       /* TB_UNSET */
    double                    session_cap_usd;        /* TB_UNSET */
    int64_t                   session_max_turns;      /* TB_UNSET */
    int64_t                   max_inflight;           /* see tb_config.c */
    int64_t                   max_queued;             /* see tb_config.c */
    uint64_t                  name_hash;              /* tb_hash64(name) */
    unsigned                  admin:1;                /* false */
    unsigned                  auto_breakpoint:2;      /* 0, 1, or 2: the
                                                         cache section's */

    unsigned                  line;
} tb_key_conf_t;


typedef struct {
    char                     *pattern;                /* "claude-x*" */
    double                    input;                  /* USD per MTok */
    double                    output;                 /* (both required) */
    double                    cache_read;             /* TB_UNSET: 0.1 x */
    double                    cache_write;            /* ... 1.25 x input */
    double                    cache_write_1h;         /* ... 2 x input */
    unsigned                  line;
} tb_price_t;


typedef struct {
    /* server: nginx.conf owns listening; host/port/allow_remote and
     * hot_reload_seconds are accepted and reported as ignored */
    char                     *server_host;
    int64_t                   server_port;
    unsigned                  server_allow_remote:1;
    unsigned                  server_allow_private_hosts:1;   /* false:
                                 accounts added at runtime (the admin API,
                                 the store) reach no loopback, link-local
                                 or private address; the file's may */
    double                    server_request_timeout_seconds;   /* 600 */
    double                    server_hot_reload_seconds;        /* 5 */

    /* routing */
    char                     *routing_strategy;       /* sticky_headroom */
    unsigned                  routing_strategy_line;  /* 0 if default */
    double                    w_affinity;             /* .40 */
    double                    w_headroom;             /* .40 */
    double                    w_priority;             /* .10 */
    double                    w_load;                 /* .15 */
    double                    w_errors;               /* .20 */
    double                    w_cost;                 /* .10 */
    double                    affinity_ttl_seconds;   /* 1800 */
    double                    estimate_safety_margin; /* 1.15 */
    unsigned                  output_estimate_adaptive:1; /* adaptive */
    double                    output_estimate_quantile;   /* .95, [.5,1] */
    int64_t                   output_estimate_min_samples; /* 20 */
    int64_t                   output_estimate_window;      /* 200 */
    int64_t                   output_estimate_floor;       /* 256 */
    double                    output_estimate_max_undershoot; /* .20 */

    /* retry */
    int64_t                   retry_max_attempts;         /* 3 */
    int64_t                   retry_max_accounts;         /* 3 */
    double                    retry_deadline_seconds;     /* 120 */
    double                    retry_backoff_base_seconds; /* 0.25 */
    double                    retry_backoff_max_seconds;  /* 8 */
    double                    retry_first_token_grace_seconds; /* 20 */
    double                    retry_prelude_timeout_seconds;   /* 30 */
    int64_t                   retry_hold_response_bytes;  /* 4 MiB: a
                                                             JSON answer is
                                                             held whole up
                                                             to this size */

    /* breaker */
    int64_t                   breaker_failure_threshold;       /* 5 */
    double                    breaker_cooldown_seconds;        /* 30 */
    double                    breaker_overloaded_cooldown_seconds; /* 5 */
    double                    breaker_exhausted_cooldown_seconds;  /* 3600 */

    /* queue */
    int64_t                   queue_max_size;                  /* 128 */
    double                    queue_default_max_wait_seconds;  /* 60 */

    /* batch */
    unsigned                  batch_enabled:1;                 /* false */
    unsigned                  batch_api:1;                     /* false */
    double                    batch_poll_interval_seconds;     /* 2 */
    double                    batch_cost_multiplier;           /* 0.5 */

    /* files */
    unsigned                  files_api:1;                     /* false */

    /* store */
    char                     *store_backend;   /* memory | sqlite | redis */
    char                     *store_path;            /* tokenbiryani.db */
    char                     *store_secret_key_path; /* tokenbiryani.key */
    char                     *store_url;       /* redis://127.0.0.1:6379/0 */
    char                     *store_namespace;       /* tokenbiryani */
    char                     *store_password;        /* over the URL's */
    int64_t                   store_database;        /* -1: the URL's */
    char                     *store_instance;  /* "": host name, prefix */
    double                    store_timeout_seconds;   /* 0.25 */
    unsigned                  store_adopt_unauthenticated:1;   /* false:
                                 a record written before records were
                                 authenticated is refused */

    /* spend */
    double                    spend_window_hours;              /* 24 */

    /* cache */
    unsigned                  cache_auto_breakpoint:1;         /* false */
    int64_t                   cache_advice_min_requests;       /* 20 */

    /* pacing */
    unsigned                  pacing_enabled:1;                /* true */
    char                     *pacing_mode;     /* advisory | enforcing */
    char                     *pacing_window;   /* 7d | 5h */
    char                     *pacing_curve;    /* linear | business_hours */
    double                    pacing_ahead_threshold;          /* .10 */
    double                    pacing_behind_threshold;         /* .10 */
    double                    pacing_max_batch_delay_seconds;  /* 30 */
    double                    pacing_weekly_budget_usd;        /* TB_UNSET */
    unsigned                  pacing_prefer_batch_lane_when_ahead:1; /* true */
    tb_kvlist_t               pacing_model_downshift;
    int                       pacing_week_day;   /* 0 Monday .. 6 */
    int                       pacing_week_minute;      /* of that day */
    int                       pacing_tz_min;   /* east of UTC, minutes */

    /* sessions */
    unsigned                  sessions_track:1;                /* true */
    int64_t                   sessions_runaway_turns;          /* 200 */
    double                    sessions_runaway_spend_usd;      /* TB_UNSET */
    int64_t                   sessions_report_limit;           /* 20 */

    /* observability */
    unsigned                  observability_log_bodies:1;      /* false */
    int64_t                   observability_event_buffer;      /* 1000 */

    /* oauth */
    char                     *oauth_client_id;                 /* "" */
    char                     *oauth_authorize_url;
    char                     *oauth_token_url;
    char                     *oauth_redirect_uri;
    tb_strlist_t              oauth_scopes;
    double                    oauth_refresh_skew_seconds;      /* 300 */
    double                    oauth_refresh_interval_seconds;  /* 60 */

    /* pricing: "builtin", a mapping, or absent */
    unsigned                  pricing_builtin:1;
    tb_price_t               *prices;          /* operator entries, in */
    size_t                    nprices;         /* file order */

    tb_account_conf_t        *accounts;
    size_t                    naccounts;

    tb_key_conf_t            *keys;
    size_t                    nkeys;

    /* notices for keys accepted but ignored ("server.port is ignored: ...") */
    tb_strlist_t              warnings;

    /* the settings the file wrote, by path ("retry.max_attempts"): outside
     * accounts[] and keys[] */
    tb_strlist_t              written;
} tb_config_t;


/*
 * Loads and validates a configuration file.  Returns a new config, or NULL
 * with a one-line message in err: "<file>:<line>: <what is wrong>".
 * getenv_fn resolves ${VAR}; pass NULL to use getenv().
 */
typedef const char *(*tb_getenv_pt)(const char *name);

tb_config_t *tb_config_load_file(const char *path, tb_getenv_pt getenv_fn,
    char *err, size_t errlen);
tb_config_t *tb_config_load_buffer(const char *name, const char *data,
    size_t len, tb_getenv_pt getenv_fn, char *err, size_t errlen);
void tb_config_free(tb_config_t *cf);

/* frees a list's strings and the list, left empty */
void tb_conf_strlist_free(tb_strlist_t *list);

/*
 * An account given at runtime (an admin's JSON object), checked by the
 * same rules as the file's accounts: a config holding that one account,
 * or NULL with a message in err naming the field.  Nothing in it is read
 * from the environment (${VAR} without a default is an error), and a
 * credential or header value with CR, LF or NUL is refused.
 */
tb_config_t *tb_config_account_spec(const char *json, size_t len, char *err,
    size_t errlen);

/* whether the file wrote the setting at path ("routing.strategy") */
int tb_config_written(const tb_config_t *cf, const char *path);

/* a setting the file can write, as tb_config_each() shows it */
typedef enum {
    TB_SETTING_INT = 0,                 /* value: an int64_t */
    TB_SETTING_NUM,                     /* a double */
    TB_SETTING_STR                      /* a char *, maybe NULL */
} tb_setting_type_e;

typedef int (*tb_config_each_pt)(void *data, const char *path,
    tb_setting_type_e type, const void *value);

/*
 * Calls cb with every scalar setting of the file's sections, by path
 * ("routing.weights.affinity"), in the schema's order: numbers and
 * strings, not flags, lists, maps, accounts or keys.  It stops at the
 * first nonzero cb, and returns it.  Secrets are among them (store.password):
 * the caller chooses what it shows.
 */
int tb_config_each(const tb_config_t *cf, tb_config_each_pt cb, void *data);

/* a config with every default and no accounts or keys */
tb_config_t *tb_config_defaults(void);

const tb_account_conf_t *tb_config_account(const tb_config_t *cf,
    const char *id);

/* "anthropic_api", "bedrock", ... */
const char *tb_account_type_name(tb_account_type_e type);

/*
 * The loader accepts any non-empty routing.strategy: strategies may also be
 * registered by other modules, so the caller validates the name (and can
 * point at routing_strategy_line) against tb_builtin_strategy_table[] and
 * the plugins.
 */

#endif /* TB_CONFIG_H */
