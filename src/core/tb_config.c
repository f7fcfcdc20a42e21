/*
 * tokenbiryani YAML configuration loader.
 *
 * The input is parsed twice with libyaml.  A first pass over the event
 * stream counts nodes and documents, so that a hostile file is refused
 * before a tree is built for it; the second pass builds the document that
 * the schema tables below walk.
 *
 * Every section is a table of fields: the key's name, its type, where it
 * is stored, its default and its bounds.  The same tables set the defaults
 * (tb_config_defaults) and free what was allocated (tb_config_free), so
 * adding a key is one line in one table.
 */

#if !defined _GNU_SOURCE && !defined _POSIX_C_SOURCE
#define _POSIX_C_SOURCE  200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <yaml.h>

#include "tb_config.h"


#define TB_CONF_OK          0
#define TB_CONF_ERROR       -1

#define TB_CONF_MAX_FILE    (16 * 1024 * 1024)
#define TB_CONF_MAX_NODES   100000
#define TB_CONF_MAX_MERGE   32          /* nesting of "<<" merge keys */
#define TB_CONF_MAX_WORK    (32 * 1024 * 1024)
#define TB_CONF_MAX_HEADERS 64
#define TB_CONF_MAX_VAR     255         /* longest ${NAME} */

#define TB_CONF_PATHLEN     256
#define TB_CONF_SHOWLEN     64          /* values quoted in messages */


/* field flags */
#define TB_CONF_GE          0x01        /* value >= min */
#define TB_CONF_GT          0x02        /* value > min */
#define TB_CONF_LE          0x04        /* value <= max */
#define TB_CONF_NULLABLE    0x08        /* null means TB_UNSET */
#define TB_CONF_NONEMPTY    0x10        /* a string must not be "" */


typedef enum {
    TB_CONF_CUSTOM = 0,                 /* the handler does everything */
    TB_CONF_STR,                        /* char * */
    TB_CONF_CHOICE,                     /* char *, one of .choices */
    TB_CONF_INT,                        /* int64_t */
    TB_CONF_NUM,                        /* double */
    TB_CONF_BOOL,                       /* a bit field, via .set_bit */
    TB_CONF_STRLIST,                    /* tb_strlist_t */
    TB_CONF_STRMAP,                     /* tb_kvlist_t */
    TB_CONF_SECTION                     /* .fields, at .offset */
} tb_conf_type_e;


typedef struct tb_conf_ctx_s    tb_conf_ctx_t;
typedef struct tb_conf_field_s  tb_conf_field_t;

/* bit fields have no address: each one gets a tiny setter */
typedef void (*tb_conf_bit_pt)(void *base, unsigned on);

typedef int (*tb_conf_handler_pt)(tb_conf_ctx_t *ctx,
    const tb_conf_field_t *f, yaml_node_t *node, const char *path,
    void *base);

/* checks the entry just appended to a string map */
typedef int (*tb_conf_kv_check_pt)(tb_conf_ctx_t *ctx, tb_kvlist_t *list,
    const char *path, unsigned line);


struct tb_conf_field_s {
    const char                   *name;
    tb_conf_type_e                type;
    size_t                        offset;
    unsigned                      flags;
    double                        min;
    double                        max;
    double                        dnum;     /* default number or flag */
    const char                   *dstr;     /* default string, or the
                                               single item of a list */
    const char *const            *choices;
    const tb_conf_field_t        *fields;
    tb_conf_bit_pt                set_bit;
    tb_conf_handler_pt            handler;  /* replaces generic parsing */
    const char                   *ignored;  /* why nginx ignores the key */
};


struct tb_conf_ctx_s {
    const char                   *name;
    tb_getenv_pt                  getenv_fn;
    yaml_document_t              *doc;
    tb_config_t                  *cf;
    char                         *err;
    size_t                        errlen;
    size_t                        work;     /* against alias expansion */
};


typedef struct {
    const char                   *name;
    yaml_node_t                  *key;
    yaml_node_t                  *value;
    yaml_node_t                  *map;      /* where it was written */
    size_t                        order;    /* precedence, file order */
} tb_conf_pair_t;


typedef struct {
    tb_conf_pair_t               *items;
    size_t                        n;
    size_t                        cap;
} tb_conf_pairs_t;


#ifdef __GNUC__
#define TB_CONF_PRINTF(a, b)  __attribute__((format(printf, a, b)))
#else
#define TB_CONF_PRINTF(a, b)
#endif

static int tb_conf_error(tb_conf_ctx_t *ctx, unsigned line,
    const char *fmt, ...) TB_CONF_PRINTF(3, 4);
static int tb_conf_section(tb_conf_ctx_t *ctx, yaml_node_t *node,
    const char *path, const tb_conf_field_t *fields, void *base);
static int tb_conf_strategy(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
static int tb_conf_output_estimate(tb_conf_ctx_t *ctx,
    const tb_conf_field_t *f, yaml_node_t *node, const char *path,
    void *base);
static int tb_conf_account_type(tb_conf_ctx_t *ctx,
    const tb_conf_field_t *f, yaml_node_t *node, const char *path,
    void *base);
static int tb_conf_base_url(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
static int tb_conf_headers(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
static int tb_conf_key_priority(tb_conf_ctx_t *ctx,
    const tb_conf_field_t *f, yaml_node_t *node, const char *path,
    void *base);
static int tb_conf_pricing(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
static int tb_conf_accounts(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
static int tb_conf_keys(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);


/* the schema */

#define TB_BIT_SETTER(type, field)                                            \
    static void                                                               \
    tb_conf_set_##field(void *base, unsigned on)                              \
    {                                                                         \
        ((type *) base)->field = on ? 1 : 0;                                  \
    }

TB_BIT_SETTER(tb_config_t, server_allow_remote)
TB_BIT_SETTER(tb_config_t, output_estimate_adaptive)
TB_BIT_SETTER(tb_config_t, batch_enabled)
TB_BIT_SETTER(tb_config_t, cache_auto_breakpoint)
TB_BIT_SETTER(tb_config_t, pacing_enabled)
TB_BIT_SETTER(tb_config_t, pacing_prefer_batch_lane_when_ahead)
TB_BIT_SETTER(tb_config_t, sessions_track)
TB_BIT_SETTER(tb_config_t, observability_log_bodies)
TB_BIT_SETTER(tb_config_t, pricing_builtin)
TB_BIT_SETTER(tb_account_conf_t, enabled)
TB_BIT_SETTER(tb_account_conf_t, observable_limits)
TB_BIT_SETTER(tb_key_conf_t, admin)


#define TB_STR(n, t, f, d)                                                    \
    { .name = n, .type = TB_CONF_STR, .offset = offsetof(t, f), .dstr = d }

#define TB_CHOICE(n, t, f, d, c)                                              \
    { .name = n, .type = TB_CONF_CHOICE, .offset = offsetof(t, f),            \
      .dstr = d, .choices = c }

/* r: the bounds, one of the TB_GE0 ... TB_RANGE() below */
#define TB_INT(n, t, f, d, r)                                                 \
    { .name = n, .type = TB_CONF_INT, .offset = offsetof(t, f), .dnum = d, r }

#define TB_NUM(n, t, f, d, r)                                                 \
    { .name = n, .type = TB_CONF_NUM, .offset = offsetof(t, f), .dnum = d, r }

#define TB_BOOL(n, f, d)                                                      \
    { .name = n, .type = TB_CONF_BOOL, .set_bit = tb_conf_set_##f, .dnum = d }

#define TB_LIST(n, t, f, d)                                                   \
    { .name = n, .type = TB_CONF_STRLIST, .offset = offsetof(t, f), .dstr = d }

#define TB_MAP(n, t, f)                                                       \
    { .name = n, .type = TB_CONF_STRMAP, .offset = offsetof(t, f) }

/* the sections of tb_config_t are flat: their fields live in cf itself */
#define TB_SECTION(n, off, flds)                                              \
    { .name = n, .type = TB_CONF_SECTION, .offset = off, .fields = flds }

#define TB_CUSTOM(n, h)                                                       \
    { .name = n, .type = TB_CONF_CUSTOM, .handler = h }

#define TB_END                { .name = NULL }

#define TB_CF                 tb_config_t
#define TB_AC                 tb_account_conf_t
#define TB_AO                 tb_account_options_t
#define TB_KC                 tb_key_conf_t

#define TB_ANY                .flags = 0
#define TB_GE0                .flags = TB_CONF_GE, .min = 0
#define TB_GT0                .flags = TB_CONF_GT, .min = 0
#define TB_GE1                .flags = TB_CONF_GE, .min = 1
#define TB_RANGE(lo, hi)      .flags = TB_CONF_GE|TB_CONF_LE, .min = lo,      \
                              .max = hi
#define TB_UNIT               TB_RANGE(0, 1)
#define TB_OPT_GE0            .flags = TB_CONF_NULLABLE|TB_CONF_GE, .min = 0
#define TB_OPT_GE1            .flags = TB_CONF_NULLABLE|TB_CONF_GE, .min = 1


#define TB_LISTEN_OWNS  "nginx.conf's listen directive owns the address"

static const tb_conf_field_t  tb_conf_server[] = {
    { .name = "host", .type = TB_CONF_STR,
      .offset = offsetof(TB_CF, server_host), .dstr = "127.0.0.1",
      .ignored = TB_LISTEN_OWNS },
    { .name = "port", .type = TB_CONF_INT,
      .offset = offsetof(TB_CF, server_port), .dnum = 8787,
      .flags = TB_CONF_GE|TB_CONF_LE, .min = 1, .max = 65535,
      .ignored = TB_LISTEN_OWNS },
    { .name = "allow_remote", .type = TB_CONF_BOOL,
      .set_bit = tb_conf_set_server_allow_remote, .dnum = 0,
      .ignored = "nginx.conf's listen and allow/deny directives decide "
                 "who may connect" },
    TB_NUM("request_timeout_seconds", TB_CF, server_request_timeout_seconds,
           600, TB_GE0),
    { .name = "hot_reload_seconds", .type = TB_CONF_NUM,
      .offset = offsetof(TB_CF, server_hot_reload_seconds), .dnum = 5,
      .flags = TB_CONF_GE, .min = 0,
      .ignored = "nginx re-reads its configuration on \"nginx -s reload\", "
                 "it does not poll the file" },
    TB_END
};

static const tb_conf_field_t  tb_conf_weights[] = {
    TB_NUM("affinity", TB_CF, w_affinity, .40, TB_GE0),
    TB_NUM("headroom", TB_CF, w_headroom, .40, TB_GE0),
    TB_NUM("priority", TB_CF, w_priority, .10, TB_GE0),
    TB_NUM("load", TB_CF, w_load, .15, TB_GE0),
    TB_NUM("errors", TB_CF, w_errors, .20, TB_GE0),
    TB_NUM("cost", TB_CF, w_cost, .10, TB_GE0),
    TB_END
};

static const tb_conf_field_t  tb_conf_routing[] = {
    { .name = "strategy", .type = TB_CONF_STR,
      .offset = offsetof(TB_CF, routing_strategy), .dstr = "sticky_headroom",
      .flags = TB_CONF_NONEMPTY, .handler = tb_conf_strategy },
    TB_SECTION("weights", 0, tb_conf_weights),
    TB_NUM("affinity_ttl_seconds", TB_CF, affinity_ttl_seconds, 1800,
           TB_GE0),
    TB_NUM("estimate_safety_margin", TB_CF, estimate_safety_margin, 1.15,
           TB_GT0),
    { .name = "output_estimate", .type = TB_CONF_BOOL,
      .set_bit = tb_conf_set_output_estimate_adaptive, .dnum = 1,
      .handler = tb_conf_output_estimate },
    TB_NUM("output_estimate_quantile", TB_CF, output_estimate_quantile, .95,
           TB_RANGE(.5, 1)),
    TB_INT("output_estimate_min_samples", TB_CF,
           output_estimate_min_samples, 20, TB_GE0),
    TB_INT("output_estimate_window", TB_CF, output_estimate_window, 200,
           TB_GE1),
    TB_INT("output_estimate_floor", TB_CF, output_estimate_floor, 256,
           TB_GE0),
    TB_NUM("output_estimate_max_undershoot", TB_CF,
           output_estimate_max_undershoot, .20, TB_UNIT),
    TB_END
};

static const tb_conf_field_t  tb_conf_retry[] = {
    TB_INT("max_attempts", TB_CF, retry_max_attempts, 3, TB_GE1),
    TB_INT("max_accounts", TB_CF, retry_max_accounts, 3, TB_GE1),
    TB_NUM("deadline_seconds", TB_CF, retry_deadline_seconds, 120, TB_GE0),
    TB_NUM("backoff_base_seconds", TB_CF, retry_backoff_base_seconds, .25,
           TB_GE0),
    TB_NUM("backoff_max_seconds", TB_CF, retry_backoff_max_seconds, 8,
           TB_GE0),
    TB_NUM("first_token_grace_seconds", TB_CF,
           retry_first_token_grace_seconds, 20, TB_GE0),
    TB_NUM("prelude_timeout_seconds", TB_CF, retry_prelude_timeout_seconds,
           30, TB_GE0),
    TB_END
};

static const tb_conf_field_t  tb_conf_breaker[] = {
    TB_INT("failure_threshold", TB_CF, breaker_failure_threshold, 5, TB_GE1),
    TB_NUM("cooldown_seconds", TB_CF, breaker_cooldown_seconds, 30, TB_GE0),
    TB_NUM("overloaded_cooldown_seconds", TB_CF,
           breaker_overloaded_cooldown_seconds, 5, TB_GE0),
    TB_NUM("exhausted_cooldown_seconds", TB_CF,
           breaker_exhausted_cooldown_seconds, 3600, TB_GE0),
    TB_END
};

static const tb_conf_field_t  tb_conf_queue[] = {
    /* 0 is meaningful: no queue, a saturated pool answers at once */
    TB_INT("max_size", TB_CF, queue_max_size, 128, TB_GE0),
    TB_NUM("default_max_wait_seconds", TB_CF, queue_default_max_wait_seconds,
           60, TB_GE0),
    TB_END
};

static const tb_conf_field_t  tb_conf_batch[] = {
    TB_BOOL("enabled", batch_enabled, 0),
    TB_NUM("poll_interval_seconds", TB_CF, batch_poll_interval_seconds, 2,
           TB_GT0),
    TB_NUM("cost_multiplier", TB_CF, batch_cost_multiplier, .5, TB_GE0),
    TB_END
};

static const char *const  tb_conf_backends[] = {
    "memory", "sqlite", "redis", NULL
};

static const tb_conf_field_t  tb_conf_store[] = {
    TB_CHOICE("backend", TB_CF, store_backend, "memory", tb_conf_backends),
    TB_STR("path", TB_CF, store_path, "tokenbiryani.db"),
    TB_STR("secret_key_path", TB_CF, store_secret_key_path,
           "tokenbiryani.key"),
    TB_STR("url", TB_CF, store_url, "redis://127.0.0.1:6379/0"),
    TB_STR("namespace", TB_CF, store_namespace, "tokenbiryani"),
    TB_END
};

static const tb_conf_field_t  tb_conf_spend[] = {
    TB_NUM("window_hours", TB_CF, spend_window_hours, 24, TB_GT0),
    TB_END
};

static const tb_conf_field_t  tb_conf_cache[] = {
    TB_BOOL("auto_breakpoint", cache_auto_breakpoint, 0),
    TB_INT("advice_min_requests", TB_CF, cache_advice_min_requests, 20,
           TB_GE0),
    TB_END
};

static const char *const  tb_conf_pacing_modes[] = {
    "advisory", "enforcing", NULL
};

static const char *const  tb_conf_pacing_windows[] = {
    "7d", "5h", NULL
};

static const char *const  tb_conf_pacing_curves[] = {
    "linear", "business_hours", NULL
};

static const tb_conf_field_t  tb_conf_pacing[] = {
    TB_BOOL("enabled", pacing_enabled, 1),
    TB_CHOICE("mode", TB_CF, pacing_mode, "advisory", tb_conf_pacing_modes),
    TB_CHOICE("window", TB_CF, pacing_window, "7d", tb_conf_pacing_windows),
    TB_CHOICE("curve", TB_CF, pacing_curve, "linear", tb_conf_pacing_curves),
    TB_NUM("ahead_threshold", TB_CF, pacing_ahead_threshold, .10, TB_GE0),
    TB_NUM("behind_threshold", TB_CF, pacing_behind_threshold, .10, TB_GE0),
    TB_NUM("max_batch_delay_seconds", TB_CF, pacing_max_batch_delay_seconds,
           30, TB_GE0),
    TB_NUM("weekly_budget_usd", TB_CF, pacing_weekly_budget_usd, TB_UNSET,
           TB_OPT_GE0),
    TB_BOOL("prefer_batch_lane_when_ahead",
            pacing_prefer_batch_lane_when_ahead, 1),
    TB_MAP("model_downshift", TB_CF, pacing_model_downshift),
    TB_END
};

static const tb_conf_field_t  tb_conf_sessions[] = {
    TB_BOOL("track", sessions_track, 1),
    TB_INT("runaway_turns", TB_CF, sessions_runaway_turns, 200, TB_GE1),
    TB_NUM("runaway_spend_usd", TB_CF, sessions_runaway_spend_usd, TB_UNSET,
           TB_OPT_GE0),
    TB_INT("report_limit", TB_CF, sessions_report_limit, 20, TB_GE0),
    TB_END
};

static const tb_conf_field_t  tb_conf_observability[] = {
    TB_BOOL("log_bodies", observability_log_bodies, 0),
    TB_INT("event_buffer", TB_CF, observability_event_buffer, 1000, TB_GE0),
    TB_END
};

static const tb_conf_field_t  tb_conf_oauth[] = {
    TB_STR("client_id", TB_CF, oauth_client_id, ""),
    TB_STR("authorize_url", TB_CF, oauth_authorize_url, ""),
    TB_STR("token_url", TB_CF, oauth_token_url, ""),
    TB_STR("redirect_uri", TB_CF, oauth_redirect_uri, ""),
    TB_LIST("scopes", TB_CF, oauth_scopes, NULL),
    TB_NUM("refresh_skew_seconds", TB_CF, oauth_refresh_skew_seconds, 300,
           TB_GE0),
    TB_NUM("refresh_interval_seconds", TB_CF, oauth_refresh_interval_seconds,
           60, TB_GT0),
    TB_END
};

static const tb_conf_field_t  tb_conf_top[] = {
    TB_SECTION("server", 0, tb_conf_server),
    TB_SECTION("routing", 0, tb_conf_routing),
    TB_SECTION("retry", 0, tb_conf_retry),
    TB_SECTION("breaker", 0, tb_conf_breaker),
    TB_SECTION("queue", 0, tb_conf_queue),
    TB_SECTION("batch", 0, tb_conf_batch),
    TB_SECTION("store", 0, tb_conf_store),
    TB_SECTION("spend", 0, tb_conf_spend),
    TB_SECTION("cache", 0, tb_conf_cache),
    TB_SECTION("pacing", 0, tb_conf_pacing),
    TB_SECTION("sessions", 0, tb_conf_sessions),
    TB_SECTION("observability", 0, tb_conf_observability),
    TB_SECTION("oauth", 0, tb_conf_oauth),
    TB_CUSTOM("pricing", tb_conf_pricing),
    TB_CUSTOM("accounts", tb_conf_accounts),
    TB_CUSTOM("keys", tb_conf_keys),
    TB_END
};

static const tb_conf_field_t  tb_conf_price[] = {
    TB_NUM("input", tb_price_t, input, 0, TB_GE0),
    TB_NUM("output", tb_price_t, output, 0, TB_GE0),
    TB_NUM("cache_read", tb_price_t, cache_read, 0, TB_GE0),
    TB_NUM("cache_write", tb_price_t, cache_write, 0, TB_GE0),
    TB_END
};

static const tb_conf_field_t  tb_conf_pricing_builtin =
    TB_BOOL("builtin", pricing_builtin, 0);

static const tb_conf_field_t  tb_conf_options[] = {
    TB_STR("region", TB_AO, region, NULL),
    TB_STR("profile", TB_AO, profile, NULL),
    TB_STR("project", TB_AO, project, NULL),
    TB_STR("beta_header", TB_AO, beta_header, NULL),
    TB_STR("credentials_path", TB_AO, credentials_path, NULL),
    TB_STR("token_env", TB_AO, token_env, NULL),
    TB_STR("access_token", TB_AO, access_token, NULL),
    TB_STR("token_path", TB_AO, token_path, NULL),
    TB_STR("expiry_path", TB_AO, expiry_path, NULL),
    TB_INT("expiry_skew_seconds", TB_AO, expiry_skew_seconds, TB_UNSET,
           TB_OPT_GE0),
    TB_MAP("model_map", TB_AO, model_map),
    TB_END
};

static const tb_conf_field_t  tb_conf_account[] = {
    TB_STR("id", TB_AC, id, NULL),
    TB_STR("name", TB_AC, name, ""),
    TB_CUSTOM("type", tb_conf_account_type),
    TB_STR("api_key", TB_AC, api_key, NULL),
    { .name = "base_url", .type = TB_CONF_STR,
      .offset = offsetof(TB_AC, base_url), .dstr = "",
      .handler = tb_conf_base_url },
    TB_NUM("priority", TB_AC, priority, 0, TB_ANY),
    TB_NUM("cost_tier", TB_AC, cost_tier, 1, TB_GT0),
    TB_LIST("models", TB_AC, models, "*"),
    TB_INT("max_concurrency", TB_AC, max_concurrency, 16, TB_GE1),
    TB_NUM("spend_cap_usd", TB_AC, spend_cap_usd, TB_UNSET, TB_OPT_GE0),
    TB_BOOL("enabled", enabled, 1),
    { .name = "headers", .type = TB_CONF_STRMAP,
      .offset = offsetof(TB_AC, headers), .handler = tb_conf_headers },
    TB_SECTION("options", offsetof(TB_AC, options), tb_conf_options),
    TB_BOOL("observable_limits", observable_limits, 1),
    TB_NUM("assumed_headroom", TB_AC, assumed_headroom, .5, TB_UNIT),
    TB_END
};

static const tb_conf_field_t  tb_conf_key[] = {
    TB_STR("key", TB_KC, key, NULL),
    TB_STR("name", TB_KC, name, "default"),
    TB_LIST("models", TB_KC, models, "*"),
    TB_LIST("pool", TB_KC, pool, NULL),
    TB_INT("rpm", TB_KC, rpm, TB_UNSET, TB_OPT_GE1),
    TB_NUM("spend_cap_usd", TB_KC, spend_cap_usd, TB_UNSET, TB_OPT_GE0),
    TB_CUSTOM("priority", tb_conf_key_priority),
    TB_NUM("max_wait_seconds", TB_KC, max_wait_seconds, TB_UNSET,
           TB_OPT_GE0),
    TB_NUM("session_cap_usd", TB_KC, session_cap_usd, TB_UNSET, TB_OPT_GE0),
    TB_INT("session_max_turns", TB_KC, session_max_turns, TB_UNSET,
           TB_OPT_GE1),
    TB_BOOL("admin", admin, 0),
    TB_END
};


/* the account types, in tb_account_type_e order, then aliases */
static const char *const  tb_conf_account_types[] = {
    "anthropic_api", "bedrock", "vertex", "oauth", "anthropic", NULL
};

static const char *const  tb_conf_priorities[] = {
    "interactive", "batch", "background", NULL
};

static const char *const  tb_conf_output_estimates[] = {
    "adaptive", "max_tokens", NULL
};


/* headers the gateway writes itself for every upstream request */
static const struct {
    const char                   *name;
    const char                   *why;
} tb_conf_owned_headers[] = {
    { "host", "the gateway sets it from base_url" },
    { "content-length", "the gateway frames the request body itself" },
    { "transfer-encoding", "the gateway frames the request body itself" },
    { "connection", "the gateway manages upstream connections" },
    { "x-api-key", "it carries the account's credential: use api_key" },
    { "authorization", "it carries the account's credential: use api_key "
                       "or the type's options" },
    { NULL, NULL }
};


/* messages */

static int
tb_conf_error(tb_conf_ctx_t *ctx, unsigned line, const char *fmt, ...)
{
    int      n;
    va_list  args;

    if (ctx->err == NULL || ctx->errlen == 0) {
        return TB_CONF_ERROR;
    }

    if (line) {
        n = snprintf(ctx->err, ctx->errlen, "%s:%u: ", ctx->name, line);

    } else {
        n = snprintf(ctx->err, ctx->errlen, "%s: ", ctx->name);
    }

    if (n < 0 || (size_t) n >= ctx->errlen) {
        return TB_CONF_ERROR;
    }

    va_start(args, fmt);
    (void) vsnprintf(ctx->err + n, ctx->errlen - (size_t) n, fmt, args);
    va_end(args);

    return TB_CONF_ERROR;
}


static int
tb_conf_nomem(tb_conf_ctx_t *ctx)
{
    return tb_conf_error(ctx, 0, "out of memory");
}


/*
 * A value as it may appear in a one-line message: control characters
 * become '?' so that nothing can forge a second log line, and long values
 * are cut.  Never used for credentials.
 */
static const char *
tb_conf_show(const char *s, char *buf)
{
    size_t  i;

    for (i = 0; s[i] != '\0' && i < TB_CONF_SHOWLEN - 4; i++) {
        buf[i] = ((unsigned char) s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    }

    if (s[i] != '\0') {
        memcpy(&buf[i], "...", 3);
        i += 3;
    }

    buf[i] = '\0';

    return buf;
}


static unsigned
tb_conf_line(yaml_node_t *node)
{
    return (unsigned) node->start_mark.line + 1;
}


static yaml_node_t *
tb_conf_node(tb_conf_ctx_t *ctx, int index)
{
    return yaml_document_get_node(ctx->doc, index);
}


static int
tb_conf_null_text(const char *s, size_t len)
{
    return len == 0
           || (len == 1 && s[0] == '~')
           || (len == 4 && (memcmp(s, "null", 4) == 0
                            || memcmp(s, "Null", 4) == 0
                            || memcmp(s, "NULL", 4) == 0));
}


/* a plain "", "~" or "null": the key is there with no value */
static int
tb_conf_null_node(yaml_node_t *node)
{
    return node->type == YAML_SCALAR_NODE
           && node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE
           && tb_conf_null_text((const char *) node->data.scalar.value,
                                node->data.scalar.length);
}


static int
tb_conf_expected(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what)
{
    const char  *got;

    switch (node->type) {
    case YAML_SEQUENCE_NODE:
        got = "a list";
        break;
    case YAML_MAPPING_NODE:
        got = "a mapping";
        break;
    default:
        got = tb_conf_null_node(node) ? "nothing (null)" : "a string";
        break;
    }

    return tb_conf_error(ctx, tb_conf_line(node), "%s: expected %s, got %s",
                         path, what, got);
}


/* counts work done for the document, which aliases can multiply */
static int
tb_conf_charge(tb_conf_ctx_t *ctx, size_t units, unsigned line)
{
    if (units > TB_CONF_MAX_WORK - ctx->work) {
        return tb_conf_error(ctx, line,
                             "the document expands to too much data "
                             "(aliases repeated too often?)");
    }

    ctx->work += units;

    return TB_CONF_OK;
}


static void
tb_conf_join(char *buf, const char *path, const char *name)
{
    char  show[TB_CONF_SHOWLEN];

    tb_conf_show(name, show);

    if (path[0] == '\0') {
        (void) snprintf(buf, TB_CONF_PATHLEN, "%s", show);

    } else {
        (void) snprintf(buf, TB_CONF_PATHLEN, "%s.%s", path, show);
    }
}


static char *
tb_conf_strndup(const char *s, size_t len)
{
    char  *p;

    p = malloc(len + 1);
    if (p == NULL) {
        return NULL;
    }

    memcpy(p, s, len);
    p[len] = '\0';

    return p;
}


static void
tb_conf_strlist_free(tb_strlist_t *list)
{
    size_t  i;

    for (i = 0; i < list->n; i++) {
        free(list->items[i]);
    }

    free(list->items);
    list->items = NULL;
    list->n = 0;
}


static void
tb_conf_kvlist_free(tb_kvlist_t *list)
{
    size_t  i;

    for (i = 0; i < list->n; i++) {
        free(list->items[i].key);
        free(list->items[i].value);
    }

    free(list->items);
    list->items = NULL;
    list->n = 0;
}


/* scalars */

static int
tb_conf_buf_add(char **buf, size_t *n, size_t *cap, const char *s,
    size_t len)
{
    char    *p;
    size_t   size;

    if (*n + len + 1 > *cap) {
        size = *cap * 2;

        if (size < *n + len + 1) {
            size = *n + len + 1;
        }

        p = realloc(*buf, size);
        if (p == NULL) {
            return TB_CONF_ERROR;
        }

        *buf = p;
        *cap = size;
    }

    memcpy(*buf + *n, s, len);
    *n += len;

    return TB_CONF_OK;
}


static int
tb_conf_var_name(const char *s, size_t len)
{
    size_t  i;

    if (len == 0 || len > TB_CONF_MAX_VAR || (s[0] >= '0' && s[0] <= '9')) {
        return 0;
    }

    for (i = 0; i < len; i++) {
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')
              || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
        {
            return 0;
        }
    }

    return 1;
}


/*
 * The text of a scalar in a new string, with ${VAR} and ${VAR:-default}
 * expanded anywhere in it.  Expansion comes first, so "${PORT:-8787}" is
 * an integer; *is_null is set when the result is a plain null.  An
 * expanded value is never quoted in a message: it may be a credential.
 */
static int
tb_conf_expand(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    char **out, int *is_null)
{
    char         name[TB_CONF_MAX_VAR + 1], show[TB_CONF_SHOWLEN];
    char        *buf;
    size_t       len, n, cap, nlen, vlen;
    unsigned     line;
    const char  *s, *end, *p, *q, *close, *def, *val;

    s = (const char *) node->data.scalar.value;
    len = node->data.scalar.length;
    line = tb_conf_line(node);

    if (memchr(s, '\0', len) != NULL) {
        return tb_conf_error(ctx, line, "%s: the value contains a NUL byte",
                             path);
    }

    if (tb_conf_charge(ctx, len + 1, line) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    cap = len + 1;
    buf = malloc(cap);
    if (buf == NULL) {
        return tb_conf_nomem(ctx);
    }

    n = 0;
    p = s;
    end = s + len;

    while (p < end) {

        if (*p != '$' || p + 1 == end || p[1] != '{') {
            q = memchr(p + 1, '$', (size_t) (end - p - 1));
            if (q == NULL) {
                q = end;
            }

            /* cannot fail: the buffer holds the whole scalar */
            (void) tb_conf_buf_add(&buf, &n, &cap, p, (size_t) (q - p));
            p = q;
            continue;
        }

        close = memchr(p + 2, '}', (size_t) (end - p - 2));
        if (close == NULL) {
            free(buf);
            return tb_conf_error(ctx, line,
                                 "%s: unterminated \"${\" (write ${NAME} or "
                                 "${NAME:-default}, or use $ without {)",
                                 path);
        }

        def = NULL;
        nlen = (size_t) (close - p - 2);

        for (q = p + 2; q + 1 < close; q++) {
            if (q[0] == ':' && q[1] == '-') {
                def = q + 2;
                nlen = (size_t) (q - p - 2);
                break;
            }
        }

        if (!tb_conf_var_name(p + 2, nlen)) {
            free(buf);

            if (nlen > TB_CONF_MAX_VAR) {
                nlen = TB_CONF_MAX_VAR;
            }

            memcpy(name, p + 2, nlen);
            name[nlen] = '\0';

            return tb_conf_error(ctx, line,
                                 "%s: \"${%s}\" is not a valid variable "
                                 "reference: names are letters, digits "
                                 "and '_'", path, tb_conf_show(name, show));
        }

        memcpy(name, p + 2, nlen);
        name[nlen] = '\0';

        val = ctx->getenv_fn(name);

        if (val != NULL) {
            vlen = strlen(val);

        } else if (def != NULL) {
            val = def;
            vlen = (size_t) (close - def);

        } else {
            free(buf);
            return tb_conf_error(ctx, line,
                                 "%s: environment variable %s is not set "
                                 "(write ${%s:-default} to give a default)",
                                 path, name, name);
        }

        if (tb_conf_charge(ctx, vlen, line) != TB_CONF_OK) {
            free(buf);
            return TB_CONF_ERROR;
        }

        if (tb_conf_buf_add(&buf, &n, &cap, val, vlen) != TB_CONF_OK) {
            free(buf);
            return tb_conf_nomem(ctx);
        }

        p = close + 1;
    }

    buf[n] = '\0';

    /*
     * Null is decided on the text as written: like the reference
     * implementation, a string key set to "${EMPTY}" gets "".  Numbers and
     * flags also read an expanded "" as null, see tb_conf_typed().
     */
    *is_null = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE
               && tb_conf_null_text(s, len);
    *out = buf;

    return TB_CONF_OK;
}


static int
tb_conf_scalar(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, char **out, int *is_null)
{
    if (node->type != YAML_SCALAR_NODE) {
        return tb_conf_expected(ctx, node, path, what);
    }

    return tb_conf_expand(ctx, node, path, out, is_null);
}


/*
 * The text of a number or a flag: here "${BUDGET:-}" means "no value",
 * which no number could mean otherwise.
 */
static int
tb_conf_typed(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, char **out, int *is_null)
{
    if (tb_conf_scalar(ctx, node, path, what, out, is_null) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    if (!*is_null) {
        *is_null = tb_conf_null_text(*out, strlen(*out));
    }

    return TB_CONF_OK;
}


static int
tb_conf_parse_bool(const char *s, unsigned *v)
{
    if (strcasecmp(s, "true") == 0 || strcasecmp(s, "yes") == 0
        || strcasecmp(s, "on") == 0)
    {
        *v = 1;
        return TB_CONF_OK;
    }

    if (strcasecmp(s, "false") == 0 || strcasecmp(s, "no") == 0
        || strcasecmp(s, "off") == 0)
    {
        *v = 0;
        return TB_CONF_OK;
    }

    return TB_CONF_ERROR;
}


/*
 * Decimal only.  A leading zero is refused rather than read as decimal:
 * YAML 1.1 (and so the reference implementation) reads "010" as octal 8.
 */
static int
tb_conf_parse_int(const char *s, int64_t *v, int *range)
{
    char        *end;
    long long    n;
    const char  *p;

    *range = 0;
    p = s;

    if (*p == '+' || *p == '-') {
        p++;
    }

    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '\0')) {
        return TB_CONF_ERROR;
    }

    for ( /* void */ ; *p; p++) {
        if (*p < '0' || *p > '9') {
            return TB_CONF_ERROR;
        }
    }

    errno = 0;
    n = strtoll(s, &end, 10);

    if (errno == ERANGE) {
        *range = 1;
        return TB_CONF_ERROR;
    }

    *v = (int64_t) n;

    return TB_CONF_OK;
}


/* integers or decimals, with an exponent; never nan, inf or hex */
static int
tb_conf_parse_num(const char *s, double *v)
{
    char        *end;
    double       d;
    size_t       digits;
    const char  *p;

    p = s;
    digits = 0;

    if (*p == '+' || *p == '-') {
        p++;
    }

    if (p[0] == '0' && p[1] >= '0' && p[1] <= '9') {
        return TB_CONF_ERROR;
    }

    for ( /* void */ ; *p >= '0' && *p <= '9'; p++) {
        digits++;
    }

    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++) {
            digits++;
        }
    }

    if (digits == 0) {
        return TB_CONF_ERROR;
    }

    if (*p == 'e' || *p == 'E') {
        p++;

        if (*p == '+' || *p == '-') {
            p++;
        }

        if (*p < '0' || *p > '9') {
            return TB_CONF_ERROR;
        }

        while (*p >= '0' && *p <= '9') {
            p++;
        }
    }

    if (*p != '\0') {
        return TB_CONF_ERROR;
    }

    d = strtod(s, &end);

    if (end != p || !isfinite(d)) {
        return TB_CONF_ERROR;
    }

    *v = d;

    return TB_CONF_OK;
}


static int
tb_conf_range(tb_conf_ctx_t *ctx, const tb_conf_field_t *f, double v,
    const char *text, const char *path, unsigned line)
{
    char  show[TB_CONF_SHOWLEN];

    if ((f->flags & TB_CONF_GE) && (f->flags & TB_CONF_LE)
        && (v < f->min || v > f->max))
    {
        return tb_conf_error(ctx, line, "%s: must be between %g and %g, "
                             "got %s", path, f->min, f->max,
                             tb_conf_show(text, show));
    }

    if ((f->flags & TB_CONF_GE) && v < f->min) {
        return tb_conf_error(ctx, line, "%s: must be at least %g, got %s",
                             path, f->min, tb_conf_show(text, show));
    }

    if ((f->flags & TB_CONF_GT) && v <= f->min) {
        return tb_conf_error(ctx, line, "%s: must be greater than %g, got %s",
                             path, f->min, tb_conf_show(text, show));
    }

    if ((f->flags & TB_CONF_LE) && v > f->max) {
        return tb_conf_error(ctx, line, "%s: must be at most %g, got %s",
                             path, f->max, tb_conf_show(text, show));
    }

    return TB_CONF_OK;
}


/* looks a scalar up in a NULL-terminated list; *index is -1 for null */
static int
tb_conf_choice(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *const *choices, int *index)
{
    int      i, is_null, rc;
    char    *s, known[TB_CONF_PATHLEN], show[TB_CONF_SHOWLEN];
    size_t   n;

    if (tb_conf_scalar(ctx, node, path, "a string", &s, &is_null)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (is_null) {
        free(s);
        *index = -1;
        return TB_CONF_OK;
    }

    for (i = 0; choices[i] != NULL; i++) {
        if (strcmp(s, choices[i]) == 0) {
            free(s);
            *index = i;
            return TB_CONF_OK;
        }
    }

    n = 0;
    known[0] = '\0';

    for (i = 0; choices[i] != NULL && n < sizeof(known); i++) {
        rc = snprintf(known + n, sizeof(known) - n, "%s%s",
                      i ? ", " : "", choices[i]);
        if (rc < 0) {
            break;
        }

        n += (size_t) rc;
    }

    rc = tb_conf_error(ctx, tb_conf_line(node), "%s: expected one of %s, "
                       "got \"%s\"", path, known, tb_conf_show(s, show));
    free(s);

    return rc;
}


/* mappings */

static int
tb_conf_pairs_push(tb_conf_pairs_t *pp, tb_conf_pair_t *pair)
{
    size_t           cap;
    tb_conf_pair_t  *items;

    if (pp->n == pp->cap) {
        cap = pp->cap ? pp->cap * 2 : 16;

        items = realloc(pp->items, cap * sizeof(tb_conf_pair_t));
        if (items == NULL) {
            return TB_CONF_ERROR;
        }

        pp->items = items;
        pp->cap = cap;
    }

    pair->order = pp->n;
    pp->items[pp->n++] = *pair;

    return TB_CONF_OK;
}


/*
 * Collects the keys of a mapping: its own first, then those of "<<"
 * merge keys (YAML 1.1, which the reference implementation honours), at
 * a lower precedence.
 */
static int
tb_conf_collect(tb_conf_ctx_t *ctx, yaml_node_t *map, const char *path,
    tb_conf_pairs_t *pp, unsigned depth)
{
    int                pass, merge;
    yaml_node_t       *key, *value, *item;
    tb_conf_pair_t     pair;
    yaml_node_pair_t  *p;
    yaml_node_item_t  *it;

    /* charged per visit too: merging empty mappings must not be free */
    if (tb_conf_charge(ctx, 1, tb_conf_line(map)) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    for (pass = 0; pass < 2; pass++) {

        for (p = map->data.mapping.pairs.start;
             p < map->data.mapping.pairs.top;
             p++)
        {
            key = tb_conf_node(ctx, p->key);
            value = tb_conf_node(ctx, p->value);

            if (key == NULL || value == NULL) {
                return tb_conf_error(ctx, tb_conf_line(map),
                                     "%s: malformed mapping", path);
            }

            if (key->type != YAML_SCALAR_NODE) {
                return tb_conf_expected(ctx, key, path, "a key name");
            }

            if (tb_conf_charge(ctx, 1, tb_conf_line(key)) != TB_CONF_OK) {
                return TB_CONF_ERROR;
            }

            merge = key->data.scalar.style == YAML_PLAIN_SCALAR_STYLE
                    && key->data.scalar.length == 2
                    && memcmp(key->data.scalar.value, "<<", 2) == 0;

            if (pass == 0 && !merge) {

                if (memchr(key->data.scalar.value, '\0',
                           key->data.scalar.length) != NULL)
                {
                    return tb_conf_error(ctx, tb_conf_line(key),
                                         "%s: a key contains a NUL byte",
                                         path);
                }

                if (pp->n >= TB_CONF_MAX_NODES) {
                    return tb_conf_error(ctx, tb_conf_line(key),
                                         "%s: too many keys (merges "
                                         "repeated too often?)", path);
                }

                pair.name = (const char *) key->data.scalar.value;
                pair.key = key;
                pair.value = value;
                pair.map = map;

                if (tb_conf_pairs_push(pp, &pair) != TB_CONF_OK) {
                    return tb_conf_nomem(ctx);
                }

                continue;
            }

            if (pass == 0 || !merge) {
                continue;
            }

            if (depth >= TB_CONF_MAX_MERGE) {
                return tb_conf_error(ctx, tb_conf_line(key),
                                     "%s: \"<<\" merges nest too deeply",
                                     path);
            }

            if (value->type == YAML_MAPPING_NODE) {
                if (tb_conf_collect(ctx, value, path, pp, depth + 1)
                    != TB_CONF_OK)
                {
                    return TB_CONF_ERROR;
                }

                continue;
            }

            if (value->type != YAML_SEQUENCE_NODE) {
                return tb_conf_expected(ctx, value, path,
                                        "a mapping or a list of mappings "
                                        "after \"<<\"");
            }

            /* earlier mappings in the list take precedence */
            for (it = value->data.sequence.items.start;
                 it < value->data.sequence.items.top;
                 it++)
            {
                item = tb_conf_node(ctx, *it);

                if (item == NULL || item->type != YAML_MAPPING_NODE) {
                    return tb_conf_expected(ctx, item ? item : value, path,
                                            "a mapping in the \"<<\" list");
                }

                if (tb_conf_collect(ctx, item, path, pp, depth + 1)
                    != TB_CONF_OK)
                {
                    return TB_CONF_ERROR;
                }
            }
        }
    }

    return TB_CONF_OK;
}


static int
tb_conf_cmp_pair_name(const void *one, const void *two)
{
    int                    rc;
    const tb_conf_pair_t  *a = one, *b = two;

    rc = strcmp(a->name, b->name);
    if (rc != 0) {
        return rc;
    }

    return (a->order > b->order) - (a->order < b->order);
}


static int
tb_conf_cmp_pair_order(const void *one, const void *two)
{
    const tb_conf_pair_t  *a = one, *b = two;

    return (a->order > b->order) - (a->order < b->order);
}


/*
 * The keys of a mapping, merges applied, in file order.  A key written
 * twice in the same mapping is an error: the YAML spec forbids it, and
 * the reference loader would silently keep the last one.
 */
static int
tb_conf_pairs(tb_conf_ctx_t *ctx, yaml_node_t *map, const char *path,
    tb_conf_pair_t **out, size_t *nout)
{
    char              show[TB_CONF_SHOWLEN];
    size_t            i, n;
    unsigned          l1, l2;
    tb_conf_pair_t   *a, *b;
    tb_conf_pairs_t   pp;

    pp.items = NULL;
    pp.n = 0;
    pp.cap = 0;

    if (tb_conf_collect(ctx, map, path, &pp, 0) != TB_CONF_OK) {
        free(pp.items);
        return TB_CONF_ERROR;
    }

    if (pp.n > 1) {
        qsort(pp.items, pp.n, sizeof(tb_conf_pair_t), tb_conf_cmp_pair_name);
    }

    /*
     * Within a run of equal names the first has the highest precedence;
     * the others are either duplicates written in one mapping or keys
     * overridden through a merge, which are dropped.  One mapping's keys
     * are collected in one go, so its duplicates are adjacent here.
     */
    for (i = 1; i < pp.n; i++) {
        a = &pp.items[i - 1];
        b = &pp.items[i];

        if (strcmp(a->name, b->name) != 0) {
            continue;
        }

        if (a->map == b->map && a->key != b->key) {
            l1 = tb_conf_line(a->key);
            l2 = tb_conf_line(b->key);

            (void) tb_conf_error(ctx, l1 > l2 ? l1 : l2,
                                 "%s%skey \"%s\" is given twice "
                                 "(lines %u and %u)",
                                 path, path[0] ? ": " : "",
                                 tb_conf_show(b->name, show),
                                 l1 < l2 ? l1 : l2, l1 > l2 ? l1 : l2);
            free(pp.items);
            return TB_CONF_ERROR;
        }

        b->value = NULL;
    }

    n = 0;

    for (i = 0; i < pp.n; i++) {
        if (pp.items[i].value != NULL) {
            pp.items[n++] = pp.items[i];
        }
    }

    if (n > 1) {
        qsort(pp.items, n, sizeof(tb_conf_pair_t), tb_conf_cmp_pair_order);
    }

    *out = pp.items;
    *nout = n;

    return TB_CONF_OK;
}


/* generic fields */

static int
tb_conf_set_str(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int     is_null, index;
    char   *s, **p;

    p = (char **) (void *) ((char *) base + f->offset);

    if (f->type == TB_CONF_CHOICE) {
        if (tb_conf_choice(ctx, node, path, f->choices, &index)
            != TB_CONF_OK)
        {
            return TB_CONF_ERROR;
        }

        if (index == -1) {
            return TB_CONF_OK;
        }

        s = strdup(f->choices[index]);
        if (s == NULL) {
            return tb_conf_nomem(ctx);
        }

    } else {
        if (tb_conf_scalar(ctx, node, path, "a string", &s, &is_null)
            != TB_CONF_OK)
        {
            return TB_CONF_ERROR;
        }

        /* "key:" with no value keeps the default, like an absent key */
        if (is_null) {
            free(s);
            return TB_CONF_OK;
        }

        if ((f->flags & TB_CONF_NONEMPTY) && s[0] == '\0') {
            free(s);
            return tb_conf_error(ctx, tb_conf_line(node),
                                 "%s: must not be empty", path);
        }
    }

    free(*p);
    *p = s;

    return TB_CONF_OK;
}


static int
tb_conf_set_int(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int       is_null, range, rc;
    char     *s, show[TB_CONF_SHOWLEN];
    int64_t   v;
    unsigned  line;

    line = tb_conf_line(node);

    if (tb_conf_typed(ctx, node, path, "an integer", &s, &is_null)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (is_null) {
        free(s);

        if (!(f->flags & TB_CONF_NULLABLE)) {
            return tb_conf_error(ctx, line, "%s: expected an integer, "
                                 "got nothing (null)", path);
        }

        v = TB_UNSET;

    } else {
        if (tb_conf_parse_int(s, &v, &range) != TB_CONF_OK) {
            if (range) {
                rc = tb_conf_error(ctx, line, "%s: %s is out of range",
                                   path, tb_conf_show(s, show));

            } else {
                rc = tb_conf_error(ctx, line, "%s: expected an integer, "
                                   "got \"%s\"", path, tb_conf_show(s, show));
            }

            free(s);
            return rc;
        }

        rc = tb_conf_range(ctx, f, (double) v, s, path, line);
        free(s);

        if (rc != TB_CONF_OK) {
            return rc;
        }
    }

    *(int64_t *) (void *) ((char *) base + f->offset) = v;

    return TB_CONF_OK;
}


static int
tb_conf_set_num(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int       is_null, rc;
    char     *s, show[TB_CONF_SHOWLEN];
    double    v;
    unsigned  line;

    line = tb_conf_line(node);

    if (tb_conf_typed(ctx, node, path, "a number", &s, &is_null)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (is_null) {
        free(s);

        if (!(f->flags & TB_CONF_NULLABLE)) {
            return tb_conf_error(ctx, line, "%s: expected a number, "
                                 "got nothing (null)", path);
        }

        v = TB_UNSET;

    } else {
        if (tb_conf_parse_num(s, &v) != TB_CONF_OK) {
            rc = tb_conf_error(ctx, line, "%s: expected a number, got \"%s\"",
                               path, tb_conf_show(s, show));
            free(s);
            return rc;
        }

        rc = tb_conf_range(ctx, f, v, s, path, line);
        free(s);

        if (rc != TB_CONF_OK) {
            return rc;
        }
    }

    *(double *) (void *) ((char *) base + f->offset) = v;

    return TB_CONF_OK;
}


static int
tb_conf_set_bool(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int       is_null, rc;
    char     *s, show[TB_CONF_SHOWLEN];
    unsigned  v, line;

    line = tb_conf_line(node);

    if (tb_conf_typed(ctx, node, path, "true or false", &s, &is_null)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (is_null) {
        free(s);
        return tb_conf_error(ctx, line, "%s: expected true or false, "
                             "got nothing (null)", path);
    }

    if (tb_conf_parse_bool(s, &v) != TB_CONF_OK) {
        rc = tb_conf_error(ctx, line, "%s: expected true or false, "
                           "got \"%s\"", path, tb_conf_show(s, show));
        free(s);
        return rc;
    }

    free(s);
    f->set_bit(base, v);

    return TB_CONF_OK;
}


static int
tb_conf_set_list(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int                is_null;
    char              *s, sub[TB_CONF_PATHLEN];
    size_t             n;
    yaml_node_t       *item;
    tb_strlist_t      *list;
    yaml_node_item_t  *it;

    list = (tb_strlist_t *) (void *) ((char *) base + f->offset);

    if (tb_conf_null_node(node)) {
        return TB_CONF_OK;
    }

    if (node->type != YAML_SEQUENCE_NODE) {
        return tb_conf_expected(ctx, node, path, "a list of strings");
    }

    n = (size_t) (node->data.sequence.items.top
                  - node->data.sequence.items.start);

    tb_conf_strlist_free(list);

    if (n == 0) {
        return TB_CONF_OK;
    }

    list->items = calloc(n, sizeof(char *));
    if (list->items == NULL) {
        return tb_conf_nomem(ctx);
    }

    for (it = node->data.sequence.items.start;
         it < node->data.sequence.items.top;
         it++)
    {
        (void) snprintf(sub, sizeof(sub), "%s[%zu]", path, list->n);

        item = tb_conf_node(ctx, *it);
        if (item == NULL) {
            return tb_conf_error(ctx, tb_conf_line(node), "%s: malformed "
                                 "list", path);
        }

        if (tb_conf_scalar(ctx, item, sub, "a string", &s, &is_null)
            != TB_CONF_OK)
        {
            return TB_CONF_ERROR;
        }

        if (is_null) {
            free(s);
            return tb_conf_error(ctx, tb_conf_line(item), "%s: expected a "
                                 "string, got nothing (null)", sub);
        }

        list->items[list->n++] = s;
    }

    return TB_CONF_OK;
}


static int
tb_conf_set_map(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base,
    tb_conf_kv_check_pt check)
{
    int              is_null, rc;
    char            *key, *value, sub[TB_CONF_PATHLEN];
    size_t           i, n;
    tb_kvlist_t     *list;
    tb_conf_pair_t  *pairs;

    list = (tb_kvlist_t *) (void *) ((char *) base + f->offset);

    if (tb_conf_null_node(node)) {
        return TB_CONF_OK;
    }

    if (node->type != YAML_MAPPING_NODE) {
        return tb_conf_expected(ctx, node, path,
                                "a mapping of names to strings");
    }

    if (tb_conf_pairs(ctx, node, path, &pairs, &n) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    tb_conf_kvlist_free(list);

    rc = TB_CONF_OK;

    if (n > 0) {
        list->items = calloc(n, sizeof(tb_kv_t));
        if (list->items == NULL) {
            rc = tb_conf_nomem(ctx);
            goto done;
        }
    }

    for (i = 0; i < n; i++) {
        tb_conf_join(sub, path, pairs[i].name);

        if (tb_conf_scalar(ctx, pairs[i].value, sub, "a string", &value,
                           &is_null)
            != TB_CONF_OK)
        {
            rc = TB_CONF_ERROR;
            goto done;
        }

        if (is_null) {
            free(value);
            rc = tb_conf_error(ctx, tb_conf_line(pairs[i].value),
                               "%s: expected a string, got nothing (null)",
                               sub);
            goto done;
        }

        key = strdup(pairs[i].name);
        if (key == NULL) {
            free(value);
            rc = tb_conf_nomem(ctx);
            goto done;
        }

        list->items[list->n].key = key;
        list->items[list->n].value = value;
        list->n++;

        if (check != NULL
            && check(ctx, list, path, tb_conf_line(pairs[i].key))
               != TB_CONF_OK)
        {
            rc = TB_CONF_ERROR;
            goto done;
        }
    }

done:

    free(pairs);

    return rc;
}


static int
tb_conf_set(tb_conf_ctx_t *ctx, const tb_conf_field_t *f, yaml_node_t *node,
    const char *path, void *base)
{
    switch (f->type) {

    case TB_CONF_STR:
    case TB_CONF_CHOICE:
        return tb_conf_set_str(ctx, f, node, path, base);

    case TB_CONF_INT:
        return tb_conf_set_int(ctx, f, node, path, base);

    case TB_CONF_NUM:
        return tb_conf_set_num(ctx, f, node, path, base);

    case TB_CONF_BOOL:
        return tb_conf_set_bool(ctx, f, node, path, base);

    case TB_CONF_STRLIST:
        return tb_conf_set_list(ctx, f, node, path, base);

    case TB_CONF_STRMAP:
        return tb_conf_set_map(ctx, f, node, path, base, NULL);

    case TB_CONF_SECTION:
        return tb_conf_section(ctx, node, path, f->fields,
                               (char *) base + f->offset);

    default:
        return tb_conf_error(ctx, tb_conf_line(node), "%s: no parser for "
                             "this key", path);
    }
}


static int
tb_conf_unknown(tb_conf_ctx_t *ctx, yaml_node_t *key, const char *path,
    const tb_conf_field_t *fields)
{
    int                     rc;
    char                    known[512], show[TB_CONF_SHOWLEN];
    size_t                  n;
    const tb_conf_field_t  *f;

    n = 0;
    known[0] = '\0';

    for (f = fields; f->name != NULL && n < sizeof(known); f++) {
        rc = snprintf(known + n, sizeof(known) - n, "%s%s", n ? ", " : "",
                      f->name);
        if (rc < 0) {
            break;
        }

        n += (size_t) rc;
    }

    tb_conf_show((const char *) key->data.scalar.value, show);

    if (path[0] == '\0') {
        return tb_conf_error(ctx, tb_conf_line(key), "unknown top-level "
                             "section \"%s\" (known: %s)", show, known);
    }

    return tb_conf_error(ctx, tb_conf_line(key), "%s: unknown key \"%s\" "
                         "(known: %s)", path, show, known);
}


static int
tb_conf_warn(tb_conf_ctx_t *ctx, unsigned line, const char *path,
    const char *why)
{
    int            n;
    char          *s, **items;
    tb_strlist_t  *w;

    w = &ctx->cf->warnings;

    n = snprintf(NULL, 0, "%s:%u: %s is ignored: %s", ctx->name, line, path,
                 why);
    if (n < 0) {
        return tb_conf_nomem(ctx);
    }

    s = malloc((size_t) n + 1);
    if (s == NULL) {
        return tb_conf_nomem(ctx);
    }

    (void) snprintf(s, (size_t) n + 1, "%s:%u: %s is ignored: %s", ctx->name,
                    line, path, why);

    items = realloc(w->items, (w->n + 1) * sizeof(char *));
    if (items == NULL) {
        free(s);
        return tb_conf_nomem(ctx);
    }

    w->items = items;
    w->items[w->n++] = s;

    return TB_CONF_OK;
}


/*
 * A mapping checked against a table: unknown keys are errors (a typo
 * must not silently leave a default in place), and "key:" with nothing,
 * like a section given as null, keeps every default.
 */
static int
tb_conf_section(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const tb_conf_field_t *fields, void *base)
{
    int                     rc;
    char                    sub[TB_CONF_PATHLEN];
    size_t                  i, n;
    tb_conf_pair_t         *pairs;
    const tb_conf_field_t  *f;

    if (tb_conf_null_node(node)) {
        return TB_CONF_OK;
    }

    if (node->type != YAML_MAPPING_NODE) {
        return tb_conf_expected(ctx, node, path, "a mapping");
    }

    if (tb_conf_pairs(ctx, node, path, &pairs, &n) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    rc = TB_CONF_OK;

    for (i = 0; i < n; i++) {

        for (f = fields; f->name != NULL; f++) {
            if (strcmp(f->name, pairs[i].name) == 0) {
                break;
            }
        }

        if (f->name == NULL) {
            rc = tb_conf_unknown(ctx, pairs[i].key, path, fields);
            break;
        }

        tb_conf_join(sub, path, f->name);

        if (f->handler != NULL) {
            rc = f->handler(ctx, f, pairs[i].value, sub, base);

        } else {
            rc = tb_conf_set(ctx, f, pairs[i].value, sub, base);
        }

        if (rc != TB_CONF_OK) {
            break;
        }

        if (f->ignored != NULL) {
            rc = tb_conf_warn(ctx, tb_conf_line(pairs[i].key), sub,
                              f->ignored);
            if (rc != TB_CONF_OK) {
                break;
            }
        }
    }

    free(pairs);

    return rc;
}


/* defaults and release, both driven by the tables */

static int
tb_conf_init(const tb_conf_field_t *fields, void *base)
{
    char                   *p, **sp;
    tb_strlist_t           *list;
    const tb_conf_field_t  *f;

    for (f = fields; f->name != NULL; f++) {
        p = (char *) base + f->offset;

        switch (f->type) {

        case TB_CONF_STR:
        case TB_CONF_CHOICE:
            if (f->dstr != NULL) {
                sp = (char **) (void *) p;
                *sp = strdup(f->dstr);
                if (*sp == NULL) {
                    return TB_CONF_ERROR;
                }
            }
            break;

        case TB_CONF_INT:
            *(int64_t *) (void *) p = (int64_t) f->dnum;
            break;

        case TB_CONF_NUM:
            *(double *) (void *) p = f->dnum;
            break;

        case TB_CONF_BOOL:
            f->set_bit(base, f->dnum != 0);
            break;

        case TB_CONF_STRLIST:
            if (f->dstr != NULL) {
                list = (tb_strlist_t *) (void *) p;

                list->items = malloc(sizeof(char *));
                if (list->items == NULL) {
                    return TB_CONF_ERROR;
                }

                list->items[0] = strdup(f->dstr);
                if (list->items[0] == NULL) {
                    return TB_CONF_ERROR;
                }

                list->n = 1;
            }
            break;

        case TB_CONF_SECTION:
            if (tb_conf_init(f->fields, p) != TB_CONF_OK) {
                return TB_CONF_ERROR;
            }
            break;

        default:
            break;
        }
    }

    return TB_CONF_OK;
}


static void
tb_conf_release(const tb_conf_field_t *fields, void *base)
{
    char                   *p, **sp;
    const tb_conf_field_t  *f;

    for (f = fields; f->name != NULL; f++) {
        p = (char *) base + f->offset;

        switch (f->type) {

        case TB_CONF_STR:
        case TB_CONF_CHOICE:
            sp = (char **) (void *) p;
            free(*sp);
            *sp = NULL;
            break;

        case TB_CONF_STRLIST:
            tb_conf_strlist_free((tb_strlist_t *) (void *) p);
            break;

        case TB_CONF_STRMAP:
            tb_conf_kvlist_free((tb_kvlist_t *) (void *) p);
            break;

        case TB_CONF_SECTION:
            tb_conf_release(f->fields, p);
            break;

        default:
            break;
        }
    }
}


/* custom keys */

static int
tb_conf_strategy(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    if (tb_conf_set_str(ctx, f, node, path, base) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    /* the caller validates the name and points here when it is unknown */
    ((tb_config_t *) base)->routing_strategy_line = tb_conf_line(node);

    return TB_CONF_OK;
}


static int
tb_conf_output_estimate(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int  index;

    if (tb_conf_choice(ctx, node, path, tb_conf_output_estimates, &index)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (index != -1) {
        f->set_bit(base, index == 0);
    }

    return TB_CONF_OK;
}


static int
tb_conf_account_type(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int  index;

    if (tb_conf_choice(ctx, node, path, tb_conf_account_types, &index)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (index == 4) {
        /* "anthropic", the alias */
        index = TB_ACCOUNT_ANTHROPIC_API;
    }

    if (index != -1) {
        ((tb_account_conf_t *) base)->type = (tb_account_type_e) index;
    }

    return TB_CONF_OK;
}


static int
tb_conf_key_priority(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int  index;

    if (tb_conf_choice(ctx, node, path, tb_conf_priorities, &index)
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    /* "background" is the reference implementation's synonym */
    if (index != -1) {
        ((tb_key_conf_t *) base)->priority = (index == 1)
                                             ? TB_PRIORITY_BATCH
                                             : TB_PRIORITY_INTERACTIVE;
    }

    return TB_CONF_OK;
}


static int
tb_conf_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
           || (c >= 'A' && c <= 'F');
}


static int
tb_conf_alnum(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
           || (c >= 'A' && c <= 'Z');
}


/*
 * Splits an upstream URL into what the balancer needs.  The URL is never
 * quoted back in a message: it may carry a credential in its userinfo or
 * query string.
 */
static int
tb_conf_url(tb_conf_ctx_t *ctx, tb_account_conf_t *a, const char *url,
    const char *path, unsigned line)
{
    int          port, digits;
    char        *host, *prefix;
    size_t       plen;
    unsigned     tls;
    const char  *p, *q, *end, *h, *hend, *rest;

    if (strncasecmp(url, "https://", 8) == 0) {
        tls = 1;
        port = 443;
        p = url + 8;

    } else if (strncasecmp(url, "http://", 7) == 0) {
        tls = 0;
        port = 80;
        p = url + 7;

    } else {
        return tb_conf_error(ctx, line, "%s: the URL must start with "
                             "http:// or https://", path);
    }

    if (strpbrk(p, "?#") != NULL) {
        return tb_conf_error(ctx, line, "%s: a query string or fragment is "
                             "not allowed (the gateway appends the API path "
                             "itself)", path);
    }

    for (q = p; *q; q++) {
        if ((unsigned char) *q <= 0x20 || *q == 0x7f) {
            return tb_conf_error(ctx, line, "%s: the URL contains a space or "
                                 "a control character", path);
        }
    }

    end = p + strcspn(p, "/");

    if (memchr(p, '@', (size_t) (end - p)) != NULL) {
        return tb_conf_error(ctx, line, "%s: credentials in the URL are not "
                             "supported (use api_key or headers)", path);
    }

    if (*p == '[') {
        h = p + 1;
        hend = memchr(h, ']', (size_t) (end - h));

        if (hend == NULL) {
            return tb_conf_error(ctx, line, "%s: an IPv6 address is missing "
                                 "its closing \"]\"", path);
        }

        for (q = h; q < hend; q++) {
            if (!tb_conf_hex(*q) && *q != ':' && *q != '.') {
                break;
            }
        }

        if (hend == h || q < hend || memchr(h, ':', (size_t) (hend - h))
                                     == NULL)
        {
            return tb_conf_error(ctx, line, "%s: invalid IPv6 address",
                                 path);
        }

        rest = hend + 1;

        if (rest < end && *rest != ':') {
            return tb_conf_error(ctx, line, "%s: unexpected text after the "
                                 "IPv6 address", path);
        }

    } else {
        h = p;
        hend = memchr(p, ':', (size_t) (end - p));

        if (hend == NULL) {
            hend = end;

        } else if (memchr(hend + 1, ':', (size_t) (end - hend - 1)) != NULL) {
            return tb_conf_error(ctx, line, "%s: an IPv6 address must be "
                                 "written in brackets, as in "
                                 "http://[::1]:8080", path);
        }

        if (hend == h) {
            return tb_conf_error(ctx, line, "%s: the URL has no host", path);
        }

        for (q = h; q < hend; q++) {
            if (!tb_conf_alnum(*q) && *q != '-' && *q != '.' && *q != '_') {
                return tb_conf_error(ctx, line, "%s: invalid character in "
                                     "the host name", path);
            }
        }

        rest = hend;
    }

    if (rest < end) {
        /* *rest is ':' */
        port = 0;
        digits = 0;

        for (q = rest + 1; q < end; q++) {
            if (*q < '0' || *q > '9' || ++digits > 5) {
                digits = 6;
                break;
            }

            port = port * 10 + (*q - '0');
        }

        if (digits == 0 || digits > 5 || port < 1 || port > 65535) {
            return tb_conf_error(ctx, line, "%s: invalid port (1 to 65535)",
                                 path);
        }
    }

    /* "/v1/" and "/v1" are the same prefix: the API path starts with '/' */
    plen = strlen(end);

    while (plen > 0 && end[plen - 1] == '/') {
        plen--;
    }

    host = tb_conf_strndup(h, (size_t) (hend - h));
    prefix = tb_conf_strndup(end, plen);

    if (host == NULL || prefix == NULL) {
        free(host);
        free(prefix);
        return tb_conf_nomem(ctx);
    }

    free(a->host);
    free(a->path_prefix);

    a->tls = tls;
    a->host = host;
    a->port = port;
    a->path_prefix = prefix;

    return TB_CONF_OK;
}


static int
tb_conf_base_url(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    tb_account_conf_t  *a;

    a = base;

    if (tb_conf_set_str(ctx, f, node, path, base) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    /* empty: the type's default, once options.region is known */
    if (a->base_url[0] == '\0') {
        return TB_CONF_OK;
    }

    return tb_conf_url(ctx, a, a->base_url, path, tb_conf_line(node));
}


static int
tb_conf_tchar(char c)
{
    return tb_conf_alnum(c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}


static int
tb_conf_check_header(tb_conf_ctx_t *ctx, tb_kvlist_t *list,
    const char *path, unsigned line)
{
    char         show[TB_CONF_SHOWLEN];
    size_t       i;
    tb_kv_t     *kv;
    const char  *p;

    kv = &list->items[list->n - 1];
    tb_conf_show(kv->key, show);

    if (list->n > TB_CONF_MAX_HEADERS) {
        return tb_conf_error(ctx, line, "%s: more than %d headers", path,
                             TB_CONF_MAX_HEADERS);
    }

    if (kv->key[0] == '\0') {
        return tb_conf_error(ctx, line, "%s: a header name must not be "
                             "empty", path);
    }

    for (p = kv->key; *p; p++) {
        if (!tb_conf_tchar(*p)) {
            return tb_conf_error(ctx, line, "%s: \"%s\" is not a valid "
                                 "header name (letters, digits and "
                                 "!#$%%&'*+-.^_`|~ only)", path, show);
        }
    }

    for (i = 0; tb_conf_owned_headers[i].name != NULL; i++) {
        if (strcasecmp(kv->key, tb_conf_owned_headers[i].name) == 0) {
            return tb_conf_error(ctx, line, "%s: header \"%s\" cannot be set "
                                 "here: %s", path, show,
                                 tb_conf_owned_headers[i].why);
        }
    }

    /* a CR or LF would let a value inject headers of its own */
    for (p = kv->value; *p; p++) {
        if (((unsigned char) *p < 0x20 && *p != '\t') || *p == 0x7f) {
            return tb_conf_error(ctx, line, "%s: the value of header \"%s\" "
                                 "contains a control character", path, show);
        }
    }

    for (i = 0; i + 1 < list->n; i++) {
        if (strcasecmp(list->items[i].key, kv->key) == 0) {
            return tb_conf_error(ctx, line, "%s: header \"%s\" is given twice "
                                 "(header names are case-insensitive)", path,
                                 show);
        }
    }

    return TB_CONF_OK;
}


static int
tb_conf_headers(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    return tb_conf_set_map(ctx, f, node, path, base, tb_conf_check_header);
}


static int
tb_conf_pricing(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int              is_null, rc;
    char            *s, sub[TB_CONF_PATHLEN], show[TB_CONF_SHOWLEN];
    size_t           i, n;
    tb_price_t      *price;
    tb_config_t     *cf;
    const char      *name, *star;
    tb_conf_pair_t  *pairs;

    cf = base;

    if (node->type == YAML_SCALAR_NODE) {
        if (tb_conf_expand(ctx, node, path, &s, &is_null) != TB_CONF_OK) {
            return TB_CONF_ERROR;
        }

        rc = TB_CONF_OK;

        if (is_null) {
            /* no prices */

        } else if (strcmp(s, "builtin") == 0) {
            cf->pricing_builtin = 1;

        } else {
            rc = tb_conf_error(ctx, tb_conf_line(node), "pricing: \"%s\" is "
                               "not valid: write \"pricing: builtin\" for the "
                               "price table that ships with this release, or "
                               "a mapping of model to prices",
                               tb_conf_show(s, show));
        }

        free(s);
        return rc;
    }

    if (node->type != YAML_MAPPING_NODE) {
        return tb_conf_expected(ctx, node, path,
                                "builtin or a mapping of model to prices");
    }

    if (tb_conf_pairs(ctx, node, path, &pairs, &n) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    rc = TB_CONF_OK;

    if (n > 0) {
        cf->prices = calloc(n, sizeof(tb_price_t));
        if (cf->prices == NULL) {
            rc = tb_conf_nomem(ctx);
            goto done;
        }
    }

    for (i = 0; i < n; i++) {
        name = pairs[i].name;
        tb_conf_join(sub, path, name);

        /* reserved: no model id is called "builtin" */
        if (strcmp(name, "builtin") == 0) {
            rc = tb_conf_set(ctx, &tb_conf_pricing_builtin, pairs[i].value,
                             sub, cf);
            if (rc != TB_CONF_OK) {
                goto done;
            }

            continue;
        }

        star = strchr(name, '*');

        if (name[0] == '\0' || (star != NULL && star[1] != '\0')) {
            rc = tb_conf_error(ctx, tb_conf_line(pairs[i].key),
                               "%s: expected a model id, or a pattern with "
                               "one \"*\" at its end", sub);
            goto done;
        }

        price = &cf->prices[cf->nprices];

        price->pattern = strdup(name);
        if (price->pattern == NULL) {
            rc = tb_conf_nomem(ctx);
            goto done;
        }

        cf->nprices++;

        rc = tb_conf_section(ctx, pairs[i].value, sub, tb_conf_price, price);
        if (rc != TB_CONF_OK) {
            goto done;
        }
    }

done:

    free(pairs);

    return rc;
}


/* accounts and keys */

static int
tb_conf_valid_id(const char *id)
{
    size_t  i;

    if (!tb_conf_alnum(id[0])) {
        return 0;
    }

    for (i = 1; id[i] != '\0'; i++) {
        if (i >= 64 || !(tb_conf_alnum(id[i]) || id[i] == '_' || id[i] == '-'))
        {
            return 0;
        }
    }

    return 1;
}


/* a region becomes part of a host name */
static int
tb_conf_valid_region(const char *region)
{
    size_t  i;

    for (i = 0; region[i] != '\0'; i++) {
        if (i >= 63 || !(tb_conf_alnum(region[i]) || region[i] == '-')) {
            return 0;
        }
    }

    return i > 0;
}


static int
tb_conf_account_finish(tb_conf_ctx_t *ctx, tb_account_conf_t *a,
    const char *path)
{
    char         url[TB_CONF_PATHLEN], show[TB_CONF_SHOWLEN];
    const char  *region;

    if (a->id == NULL || a->id[0] == '\0') {
        return tb_conf_error(ctx, a->line, "%s: id is required", path);
    }

    if (!tb_conf_valid_id(a->id)) {
        return tb_conf_error(ctx, a->line, "%s: id \"%s\" is not valid: use "
                             "1 to 64 letters, digits, '_' or '-', starting "
                             "with a letter or a digit", path,
                             tb_conf_show(a->id, show));
    }

    if (a->type == TB_ACCOUNT_ANTHROPIC_API
        && (a->api_key == NULL || a->api_key[0] == '\0'))
    {
        return tb_conf_error(ctx, a->line, "account %s: type anthropic_api "
                             "needs api_key", a->id);
    }

    /*
     * Subscription sessions report no anthropic-ratelimit-* headers: read
     * as observable, such an account would look permanently full and win
     * every routing comparison.
     */
    if (a->type == TB_ACCOUNT_OAUTH) {
        a->observable_limits = 0;
    }

    /* the router skips matching for the common ["*"] */
    a->models_any = (a->models.n == 1 && strcmp(a->models.items[0], "*") == 0);

    if (a->base_url[0] != '\0') {
        /* parsed when it was read */
        return TB_CONF_OK;
    }

    region = a->options.region;

    switch (a->type) {

    case TB_ACCOUNT_BEDROCK:
    case TB_ACCOUNT_VERTEX:
        if (region == NULL || region[0] == '\0') {
            region = (a->type == TB_ACCOUNT_BEDROCK) ? "us-east-1"
                                                     : "us-central1";
        }

        if (!tb_conf_valid_region(region)) {
            return tb_conf_error(ctx, a->line, "account %s: options.region "
                                 "\"%s\" is not a valid region name", a->id,
                                 tb_conf_show(region, show));
        }

        if (a->type == TB_ACCOUNT_BEDROCK) {
            (void) snprintf(url, sizeof(url),
                            "https://bedrock-runtime.%s.amazonaws.com",
                            region);

        } else if (strcmp(region, "global") == 0) {
            /* Vertex AI's global endpoint has no region prefix */
            (void) snprintf(url, sizeof(url),
                            "https://aiplatform.googleapis.com");

        } else {
            (void) snprintf(url, sizeof(url),
                            "https://%s-aiplatform.googleapis.com", region);
        }

        break;

    default:
        (void) snprintf(url, sizeof(url), "https://api.anthropic.com");
        break;
    }

    return tb_conf_url(ctx, a, url, path, a->line);
}


/*
 * A list of sections (accounts[], keys[]): each item a mapping read with
 * fields into an array of size-byte entries, each entry's line at
 * line_off, then checked by finish.  The count grows as each entry is
 * started, so tb_config_free() releases a half-built one.
 */

typedef int (*tb_conf_finish_pt)(tb_conf_ctx_t *ctx, void *item,
    const char *path);

static int
tb_conf_sections(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, const char *mapping, const tb_conf_field_t *fields,
    size_t size, size_t line_off, void **items, size_t *nitems,
    tb_conf_finish_pt finish)
{
    char          sub[TB_CONF_PATHLEN];
    size_t        i, n;
    unsigned      line;
    yaml_node_t  *item;
    char         *base;

    if (tb_conf_null_node(node)) {
        return TB_CONF_OK;
    }

    if (node->type != YAML_SEQUENCE_NODE) {
        return tb_conf_expected(ctx, node, path, what);
    }

    n = (size_t) (node->data.sequence.items.top
                  - node->data.sequence.items.start);

    if (n == 0) {
        return TB_CONF_OK;
    }

    *items = calloc(n, size);
    if (*items == NULL) {
        return tb_conf_nomem(ctx);
    }

    for (i = 0; i < n; i++) {
        base = (char *) *items + i * size;

        /* counted first: tb_config_free() releases a half-built entry */
        *nitems = i + 1;

        if (tb_conf_init(fields, base) != TB_CONF_OK) {
            return tb_conf_nomem(ctx);
        }

        (void) snprintf(sub, sizeof(sub), "%s[%zu]", path, i);

        item = tb_conf_node(ctx, node->data.sequence.items.start[i]);
        if (item == NULL) {
            return tb_conf_error(ctx, tb_conf_line(node), "%s: malformed "
                                 "list", path);
        }

        line = tb_conf_line(item);
        memcpy(base + line_off, &line, sizeof(unsigned));

        if (item->type != YAML_MAPPING_NODE) {
            return tb_conf_expected(ctx, item, sub, mapping);
        }

        if (tb_conf_section(ctx, item, sub, fields, base) != TB_CONF_OK) {
            return TB_CONF_ERROR;
        }

        if (finish(ctx, base, sub) != TB_CONF_OK) {
            return TB_CONF_ERROR;
        }
    }

    return TB_CONF_OK;
}


static int
tb_conf_account_done(tb_conf_ctx_t *ctx, void *item, const char *path)
{
    return tb_conf_account_finish(ctx, item, path);
}


static int
tb_conf_accounts(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    tb_config_t  *cf = base;

    return tb_conf_sections(ctx, node, path, "a list of accounts",
                            "a mapping with at least an id", tb_conf_account,
                            sizeof(tb_account_conf_t),
                            offsetof(tb_account_conf_t, line),
                            (void **) &cf->accounts, &cf->naccounts,
                            tb_conf_account_done);
}


/* "keys[1] (name tenant)": a key entry is never named by its key */
static const char *
tb_conf_key_label(tb_config_t *cf, tb_key_conf_t *k, char *buf)
{
    char  show[TB_CONF_SHOWLEN];

    (void) snprintf(buf, TB_CONF_PATHLEN, "keys[%zu] (name %s)",
                    (size_t) (k - cf->keys), tb_conf_show(k->name, show));

    return buf;
}


static int
tb_conf_key_done(tb_conf_ctx_t *ctx, void *item, const char *path)
{
    char            sub[TB_CONF_PATHLEN];
    tb_key_conf_t  *k = item;

    if (k->key == NULL || k->key[0] == '\0') {
        return tb_conf_error(ctx, k->line, "%s: key is required and must "
                             "not be empty",
                             tb_conf_key_label(ctx->cf, k, sub));
    }

    return TB_CONF_OK;
}


static int
tb_conf_keys(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    tb_config_t  *cf = base;

    return tb_conf_sections(ctx, node, path, "a list of keys",
                            "a mapping with at least a key", tb_conf_key,
                            sizeof(tb_key_conf_t),
                            offsetof(tb_key_conf_t, line),
                            (void **) &cf->keys, &cf->nkeys,
                            tb_conf_key_done);
}


static int
tb_conf_cmp_account_id(const void *one, const void *two)
{
    int                       rc;
    const tb_account_conf_t  *a, *b;

    a = *(const tb_account_conf_t *const *) one;
    b = *(const tb_account_conf_t *const *) two;

    rc = strcmp(a->id, b->id);
    if (rc != 0) {
        return rc;
    }

    return (a->line > b->line) - (a->line < b->line);
}


static int
tb_conf_find_account(const void *id, const void *elem)
{
    return strcmp(id, (*(const tb_account_conf_t *const *) elem)->id);
}


static int
tb_conf_cmp_key_secret(const void *one, const void *two)
{
    int                   rc;
    const tb_key_conf_t  *a, *b;

    a = *(const tb_key_conf_t *const *) one;
    b = *(const tb_key_conf_t *const *) two;

    rc = strcmp(a->key, b->key);
    if (rc != 0) {
        return rc;
    }

    return (a->line > b->line) - (a->line < b->line);
}


static int
tb_conf_cmp_key_name(const void *one, const void *two)
{
    int                   rc;
    const tb_key_conf_t  *a, *b;

    a = *(const tb_key_conf_t *const *) one;
    b = *(const tb_key_conf_t *const *) two;

    rc = strcmp(a->name, b->name);
    if (rc != 0) {
        return rc;
    }

    return (a->line > b->line) - (a->line < b->line);
}


/*
 * Checks across entries, once the whole file is read: keys may come
 * before the accounts their pools name.  Sorting keeps this O(n log n)
 * for a hostile file; of several repeats, the earliest in the file is
 * reported.
 */
static int
tb_conf_validate(tb_conf_ctx_t *ctx)
{
    int                  rc;
    char                 l1[TB_CONF_PATHLEN], l2[TB_CONF_PATHLEN];
    char                 show[TB_CONF_SHOWLEN];
    size_t               i, j, best;
    tb_config_t         *cf;
    tb_key_conf_t      **keys, *k;
    tb_account_conf_t  **acc;

    cf = ctx->cf;
    acc = NULL;
    keys = NULL;
    rc = TB_CONF_OK;

    if (cf->naccounts > 0) {
        acc = malloc(cf->naccounts * sizeof(tb_account_conf_t *));
        if (acc == NULL) {
            return tb_conf_nomem(ctx);
        }

        for (i = 0; i < cf->naccounts; i++) {
            acc[i] = &cf->accounts[i];
        }

        qsort(acc, cf->naccounts, sizeof(tb_account_conf_t *),
              tb_conf_cmp_account_id);

        best = 0;

        for (i = 1; i < cf->naccounts; i++) {
            if (strcmp(acc[i]->id, acc[i - 1]->id) == 0
                && (best == 0 || acc[i]->line < acc[best]->line))
            {
                best = i;
            }
        }

        if (best > 0) {
            rc = tb_conf_error(ctx, acc[best]->line, "account id \"%s\" is "
                               "used twice (lines %u and %u)",
                               tb_conf_show(acc[best]->id, show),
                               acc[best - 1]->line, acc[best]->line);
            goto done;
        }
    }

    if (cf->nkeys > 0) {
        keys = malloc(cf->nkeys * sizeof(tb_key_conf_t *));
        if (keys == NULL) {
            rc = tb_conf_nomem(ctx);
            goto done;
        }

        for (i = 0; i < cf->nkeys; i++) {
            keys[i] = &cf->keys[i];
        }

        qsort(keys, cf->nkeys, sizeof(tb_key_conf_t *),
              tb_conf_cmp_key_secret);

        best = 0;

        for (i = 1; i < cf->nkeys; i++) {
            if (strcmp(keys[i]->key, keys[i - 1]->key) == 0
                && (best == 0 || keys[i]->line < keys[best]->line))
            {
                best = i;
            }
        }

        if (best > 0) {
            rc = tb_conf_error(ctx, keys[best]->line, "%s repeats the key of "
                               "%s at line %u: every key must be unique",
                               tb_conf_key_label(cf, keys[best], l1),
                               tb_conf_key_label(cf, keys[best - 1], l2),
                               keys[best - 1]->line);
            goto done;
        }

        qsort(keys, cf->nkeys, sizeof(tb_key_conf_t *), tb_conf_cmp_key_name);

        best = 0;

        for (i = 1; i < cf->nkeys; i++) {
            if (strcmp(keys[i]->name, keys[i - 1]->name) == 0
                && (best == 0 || keys[i]->line < keys[best]->line))
            {
                best = i;
            }
        }

        if (best > 0) {
            rc = tb_conf_error(ctx, keys[best]->line, "keys[%zu]: name \"%s\" "
                               "is already used by keys[%zu] at line %u: "
                               "names must be unique",
                               (size_t) (keys[best] - cf->keys),
                               tb_conf_show(keys[best]->name, show),
                               (size_t) (keys[best - 1] - cf->keys),
                               keys[best - 1]->line);
            goto done;
        }
    }

    for (i = 0; i < cf->nkeys; i++) {
        k = &cf->keys[i];

        for (j = 0; j < k->pool.n; j++) {
            if (acc != NULL
                && bsearch(k->pool.items[j], acc, cf->naccounts,
                           sizeof(tb_account_conf_t *), tb_conf_find_account)
                   != NULL)
            {
                continue;
            }

            rc = tb_conf_error(ctx, k->line, "%s: pool names unknown "
                               "account %s", tb_conf_key_label(cf, k, l1),
                               tb_conf_show(k->pool.items[j], show));
            goto done;
        }
    }

done:

    free(acc);
    free(keys);

    return rc;
}


/* loading */

static const char *
tb_conf_getenv(const char *name)
{
    return getenv(name);
}


static int
tb_conf_yaml_error(tb_conf_ctx_t *ctx, yaml_parser_t *parser,
    const char *data, size_t len)
{
    size_t       i, end;
    unsigned     line;
    const char  *problem;

    problem = parser->problem ? parser->problem : "unknown error";

    switch (parser->error) {

    case YAML_MEMORY_ERROR:
        return tb_conf_nomem(ctx);

    case YAML_READER_ERROR:
        /* the reader reports a byte offset, not a mark */
        line = 1;
        end = parser->problem_offset < len ? parser->problem_offset : len;

        for (i = 0; i < end; i++) {
            if (data[i] == '\n') {
                line++;
            }
        }

        return tb_conf_error(ctx, line, "YAML syntax error: %s", problem);

    default:
        line = (unsigned) parser->problem_mark.line + 1;

        if (parser->context != NULL) {
            return tb_conf_error(ctx, line, "YAML syntax error: %s (%s at "
                                 "line %u)", problem, parser->context,
                                 (unsigned) parser->context_mark.line + 1);
        }

        return tb_conf_error(ctx, line, "YAML syntax error: %s", problem);
    }
}


/*
 * A pass over the event stream before the tree is built: syntax errors,
 * a second document, and node counts that only an alias bomb or a
 * generated file reaches are refused here, in bounded memory.
 */
static int
tb_conf_precheck(tb_conf_ctx_t *ctx, const char *data, size_t len)
{
    int             rc, done;
    size_t          nodes;
    unsigned        docs;
    yaml_event_t    event;
    yaml_parser_t   parser;

    if (!yaml_parser_initialize(&parser)) {
        return tb_conf_nomem(ctx);
    }

    yaml_parser_set_input_string(&parser, (const unsigned char *) data, len);

    rc = TB_CONF_OK;
    done = 0;
    nodes = 0;
    docs = 0;

    while (!done) {

        if (!yaml_parser_parse(&parser, &event)) {
            rc = tb_conf_yaml_error(ctx, &parser, data, len);
            break;
        }

        switch (event.type) {

        case YAML_STREAM_END_EVENT:
            done = 1;
            break;

        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) {
                rc = tb_conf_error(ctx, (unsigned) event.start_mark.line + 1,
                                   "a second YAML document starts here: the "
                                   "configuration must be one document");
                done = 1;
            }
            break;

        case YAML_ALIAS_EVENT:
        case YAML_SCALAR_EVENT:
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (++nodes > TB_CONF_MAX_NODES) {
                rc = tb_conf_error(ctx, (unsigned) event.start_mark.line + 1,
                                   "the document has more than %d nodes",
                                   TB_CONF_MAX_NODES);
                done = 1;
            }
            break;

        default:
            break;
        }

        yaml_event_delete(&event);
    }

    yaml_parser_delete(&parser);

    return rc;
}


tb_config_t *
tb_config_load_buffer(const char *name, const char *data, size_t len,
    tb_getenv_pt getenv_fn, char *err, size_t errlen)
{
    int               rc;
    yaml_node_t      *root;
    tb_config_t      *cf;
    tb_conf_ctx_t     ctx;
    yaml_parser_t     parser;
    yaml_document_t   doc;

    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }

    memset(&ctx, 0, sizeof(tb_conf_ctx_t));
    ctx.name = name ? name : "<config>";
    ctx.getenv_fn = getenv_fn ? getenv_fn : tb_conf_getenv;
    ctx.err = err;
    ctx.errlen = errlen;

    if (data == NULL) {
        data = "";
        len = 0;
    }

    if (len > TB_CONF_MAX_FILE) {
        (void) tb_conf_error(&ctx, 0, "the configuration is larger than "
                             "%d MB", TB_CONF_MAX_FILE / (1024 * 1024));
        return NULL;
    }

    if (tb_conf_precheck(&ctx, data, len) != TB_CONF_OK) {
        return NULL;
    }

    cf = tb_config_defaults();
    if (cf == NULL) {
        (void) tb_conf_nomem(&ctx);
        return NULL;
    }

    ctx.cf = cf;

    if (!yaml_parser_initialize(&parser)) {
        tb_config_free(cf);
        (void) tb_conf_nomem(&ctx);
        return NULL;
    }

    yaml_parser_set_input_string(&parser, (const unsigned char *) data, len);

    /* on failure libyaml releases the half-built document itself */
    if (!yaml_parser_load(&parser, &doc)) {
        (void) tb_conf_yaml_error(&ctx, &parser, data, len);
        yaml_parser_delete(&parser);
        tb_config_free(cf);
        return NULL;
    }

    ctx.doc = &doc;
    root = yaml_document_get_root_node(&doc);

    if (root == NULL || tb_conf_null_node(root)) {
        /* an empty file, or only comments: every default */
        rc = TB_CONF_OK;

    } else if (root->type != YAML_MAPPING_NODE) {
        rc = tb_conf_expected(&ctx, root, "the document root",
                              "a mapping of sections (server:, accounts:, "
                              "...)");

    } else {
        rc = tb_conf_section(&ctx, root, "", tb_conf_top, cf);
    }

    if (rc == TB_CONF_OK) {
        rc = tb_conf_validate(&ctx);
    }

    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);

    if (rc != TB_CONF_OK) {
        tb_config_free(cf);
        return NULL;
    }

    return cf;
}


tb_config_t *
tb_config_load_file(const char *path, tb_getenv_pt getenv_fn, char *err,
    size_t errlen)
{
    int           fd, error;
    char         *buf, *p;
    size_t        n, cap;
    ssize_t       r;
    tb_config_t  *cf;

    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        error = errno;

        if (err != NULL && errlen > 0) {
            (void) snprintf(err, errlen, "cannot open %s: %s", path,
                            strerror(error));
        }

        return NULL;
    }

    cap = 64 * 1024;
    n = 0;

    buf = malloc(cap);
    if (buf == NULL) {
        goto nomem;
    }

    /* a pipe or a file that grows while read has no trustworthy size */
    for ( ;; ) {

        if (n == cap) {
            cap *= 2;

            p = realloc(buf, cap);
            if (p == NULL) {
                goto nomem;
            }

            buf = p;
        }

        r = read(fd, buf + n, cap - n);

        if (r == -1) {
            if (errno == EINTR) {
                continue;
            }

            error = errno;

            if (err != NULL && errlen > 0) {
                (void) snprintf(err, errlen, "cannot read %s: %s", path,
                                strerror(error));
            }

            goto failed;
        }

        if (r == 0) {
            break;
        }

        n += (size_t) r;

        if (n > TB_CONF_MAX_FILE) {
            if (err != NULL && errlen > 0) {
                (void) snprintf(err, errlen, "%s: the file is larger than "
                                "%d MB", path,
                                TB_CONF_MAX_FILE / (1024 * 1024));
            }

            goto failed;
        }
    }

    (void) close(fd);

    cf = tb_config_load_buffer(path, buf, n, getenv_fn, err, errlen);

    free(buf);

    return cf;

nomem:

    if (err != NULL && errlen > 0) {
        (void) snprintf(err, errlen, "%s: out of memory", path);
    }

failed:

    free(buf);
    (void) close(fd);

    return NULL;
}


tb_config_t *
tb_config_defaults(void)
{
    tb_config_t  *cf;

    cf = calloc(1, sizeof(tb_config_t));
    if (cf == NULL) {
        return NULL;
    }

    if (tb_conf_init(tb_conf_top, cf) != TB_CONF_OK) {
        tb_config_free(cf);
        return NULL;
    }

    return cf;
}


void
tb_config_free(tb_config_t *cf)
{
    size_t  i;

    if (cf == NULL) {
        return;
    }

    for (i = 0; i < cf->naccounts; i++) {
        tb_conf_release(tb_conf_account, &cf->accounts[i]);
        free(cf->accounts[i].host);
        free(cf->accounts[i].path_prefix);
    }

    free(cf->accounts);

    for (i = 0; i < cf->nkeys; i++) {
        tb_conf_release(tb_conf_key, &cf->keys[i]);
    }

    free(cf->keys);

    for (i = 0; i < cf->nprices; i++) {
        free(cf->prices[i].pattern);
    }

    free(cf->prices);

    tb_conf_strlist_free(&cf->warnings);
    tb_conf_release(tb_conf_top, cf);

    free(cf);
}


const tb_account_conf_t *
tb_config_account(const tb_config_t *cf, const char *id)
{
    size_t  i;

    if (cf == NULL || id == NULL) {
        return NULL;
    }

    for (i = 0; i < cf->naccounts; i++) {
        if (cf->accounts[i].id != NULL
            && strcmp(cf->accounts[i].id, id) == 0)
        {
            return &cf->accounts[i];
        }
    }

    return NULL;
}


const char *
tb_account_type_name(tb_account_type_e type)
{
    switch (type) {

    case TB_ACCOUNT_ANTHROPIC_API:
        return "anthropic_api";

    case TB_ACCOUNT_BEDROCK:
        return "bedrock";

    case TB_ACCOUNT_VERTEX:
        return "vertex";

    case TB_ACCOUNT_OAUTH:
        return "oauth";
    }

    return "unknown";
}
