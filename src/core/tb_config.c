/*
 * tokenbiryani YAML configuration: the schema and the loader.
 *
 * The input is parsed twice with libyaml.  A first pass over the event
 * stream counts nodes and documents, so that a hostile file is refused
 * before a tree is built for it; the second pass builds the document that
 * the engine (tb_conf_engine.c) walks with the schema tables below.
 *
 * Every section is a table of fields: the key's name, its type, where it
 * is stored, its default and its bounds.  The same tables set the defaults
 * (tb_config_defaults) and free what was allocated (tb_config_free), so
 * adding a key is one line in one table; what a table cannot say (a URL,
 * a header name, the accounts a key's pool names) is a handler here.
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

#include "tb_chars.h"
#include "tb_conf_int.h"
#include "tb_gauth.h"
#include "tb_pacing.h"
#include "tb_parse.h"
#include "tb_provider.h"
#include "tb_ratelimit.h"


static int tb_conf_strategy(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
static int tb_conf_base_url(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
static int tb_conf_headers(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
static int tb_conf_pacing_week(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);
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
TB_BIT_SETTER(tb_config_t, server_allow_private_hosts)
TB_BIT_SETTER(tb_config_t, output_estimate_adaptive)
TB_BIT_SETTER(tb_config_t, batch_enabled)
TB_BIT_SETTER(tb_config_t, batch_api)
TB_BIT_SETTER(tb_config_t, files_api)
TB_BIT_SETTER(tb_config_t, cache_auto_breakpoint)
TB_BIT_SETTER(tb_config_t, pacing_enabled)
TB_BIT_SETTER(tb_config_t, pacing_prefer_batch_lane_when_ahead)
TB_BIT_SETTER(tb_config_t, sessions_track)
TB_BIT_SETTER(tb_config_t, observability_log_bodies)
TB_BIT_SETTER(tb_config_t, pricing_builtin)
TB_BIT_SETTER(tb_config_t, store_adopt_unauthenticated)
TB_BIT_SETTER(tb_account_conf_t, enabled)
TB_BIT_SETTER(tb_account_conf_t, observable_limits)
TB_BIT_SETTER(tb_account_conf_t, cache_reads_count)
TB_BIT_SETTER(tb_key_conf_t, admin)

static void
tb_conf_set_auto_breakpoint(void *base, unsigned v)
{
    ((tb_key_conf_t *) base)->auto_breakpoint = v > 1 ? 2 : v;
}


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

#define TB_ENUM(n, t, f, d, c, v)                                             \
    { .name = n, .type = TB_CONF_ENUM, .offset = offsetof(t, f), .dnum = d,   \
      .choices = c, .values = v }

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


/* the account types, in tb_account_type_e order, then the alias */
static const char *const  tb_conf_account_types[] = {
    "anthropic_api", "bedrock", "vertex", "oauth", "anthropic", NULL
};

static const int  tb_conf_account_type_values[] = {
    TB_ACCOUNT_ANTHROPIC_API, TB_ACCOUNT_BEDROCK, TB_ACCOUNT_VERTEX,
    TB_ACCOUNT_OAUTH, TB_ACCOUNT_ANTHROPIC_API
};

/* in TB_REFILL_* order */
static const char *const  tb_conf_replenishments[] = {
    "auto", "token_bucket", "fixed_window", NULL
};

/* "background", the reference implementation's word, is read as batch */
static const char *const  tb_conf_priorities[] = {
    "interactive", "batch", "background", NULL
};

static const int  tb_conf_priority_values[] = {
    TB_PRIORITY_INTERACTIVE, TB_PRIORITY_BATCH, TB_PRIORITY_BATCH
};

/* the flag output_estimate_adaptive */
static const char *const  tb_conf_output_estimates[] = {
    "adaptive", "max_tokens", NULL
};

static const int  tb_conf_output_estimate_values[] = { 1, 0 };


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
    TB_BOOL("allow_private_hosts", server_allow_private_hosts, 0),
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
    { .name = "output_estimate", .type = TB_CONF_ENUM,
      .set_bit = tb_conf_set_output_estimate_adaptive, .dnum = 1,
      .choices = tb_conf_output_estimates,
      .values = tb_conf_output_estimate_values },
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
    TB_INT("hold_response_bytes", TB_CF, retry_hold_response_bytes,
           4194304, TB_RANGE(0, 1073741824)),
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
    TB_BOOL("api", batch_api, 0),
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
    TB_STR("password", TB_CF, store_password, ""),
    TB_INT("database", TB_CF, store_database, -1, TB_RANGE(-1, 65535)),
    TB_STR("instance", TB_CF, store_instance, ""),
    TB_NUM("timeout_seconds", TB_CF, store_timeout_seconds, .25,
           TB_RANGE(.001, 60)),
    TB_BOOL("adopt_unauthenticated", store_adopt_unauthenticated, 0),
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
    TB_CUSTOM("week_starts", tb_conf_pacing_week),
    TB_CUSTOM("time_zone", tb_conf_pacing_week),
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

static const tb_conf_field_t  tb_conf_files[] = {
    TB_BOOL("api", files_api, 0),
    TB_END
};

static const tb_conf_field_t  tb_conf_top[] = {
    TB_SECTION("server", 0, tb_conf_server),
    TB_SECTION("routing", 0, tb_conf_routing),
    TB_SECTION("retry", 0, tb_conf_retry),
    TB_SECTION("breaker", 0, tb_conf_breaker),
    TB_SECTION("queue", 0, tb_conf_queue),
    TB_SECTION("batch", 0, tb_conf_batch),
    TB_SECTION("files", 0, tb_conf_files),
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
    TB_NUM("input", tb_price_t, input, TB_UNSET, TB_GE0),
    TB_NUM("output", tb_price_t, output, TB_UNSET, TB_GE0),
    TB_NUM("cache_read", tb_price_t, cache_read, TB_UNSET, TB_GE0),
    TB_NUM("cache_write", tb_price_t, cache_write, TB_UNSET, TB_GE0),
    TB_NUM("cache_write_1h", tb_price_t, cache_write_1h, TB_UNSET, TB_GE0),
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
    TB_STR("anthropic_version", TB_AO, anthropic_version, NULL),
    TB_STR("access_key_id", TB_AO, access_key_id, NULL),
    TB_STR("secret_access_key", TB_AO, secret_access_key, NULL),
    TB_STR("session_token", TB_AO, session_token, NULL),
    TB_END
};

static const tb_conf_field_t  tb_conf_account[] = {
    TB_STR("id", TB_AC, id, NULL),
    TB_STR("name", TB_AC, name, ""),
    TB_ENUM("type", TB_AC, type, TB_ACCOUNT_ANTHROPIC_API,
            tb_conf_account_types, tb_conf_account_type_values),
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
    TB_ENUM("replenishment", TB_AC, replenishment, TB_REFILL_AUTO,
            tb_conf_replenishments, NULL),
    TB_BOOL("cache_reads_count", cache_reads_count, 0),
    TB_STR("capacity_domain", TB_AC, capacity_domain, NULL),
    TB_END
};

static const tb_conf_field_t  tb_conf_key[] = {
    TB_STR("key", TB_KC, key, NULL),
    TB_STR("name", TB_KC, name, "default"),
    TB_LIST("models", TB_KC, models, "*"),
    TB_LIST("pool", TB_KC, pool, NULL),
    TB_INT("rpm", TB_KC, rpm, TB_UNSET, TB_OPT_GE1),
    TB_NUM("spend_cap_usd", TB_KC, spend_cap_usd, TB_UNSET, TB_OPT_GE0),
    TB_ENUM("priority", TB_KC, priority, TB_PRIORITY_INTERACTIVE,
            tb_conf_priorities, tb_conf_priority_values),
    TB_NUM("max_wait_seconds", TB_KC, max_wait_seconds, TB_UNSET,
           TB_OPT_GE0),
    TB_NUM("session_cap_usd", TB_KC, session_cap_usd, TB_UNSET, TB_OPT_GE0),
    TB_INT("session_max_turns", TB_KC, session_max_turns, TB_UNSET,
           TB_OPT_GE1),
    TB_INT("max_inflight", TB_KC, max_inflight, TB_AUTO, TB_OPT_GE1),
    TB_INT("max_queued", TB_KC, max_queued, TB_AUTO, TB_OPT_GE0),
    TB_BOOL("admin", admin, 0),
    TB_BOOL("auto_breakpoint", auto_breakpoint, 2),
    TB_END
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


/* pacing.week_starts ("monday 00:00") and pacing.time_zone ("+05:30") */
static int
tb_conf_pacing_week(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base)
{
    int           rc, is_null, week, a, b;
    char         *s, show[TB_CONF_SHOWLEN];
    tb_config_t  *cf = base;

    if (tb_conf_expand(ctx, node, path, &s, &is_null) != TB_CONF_OK) {
        return TB_CONF_ERROR;
    }

    week = (f->name[0] == 'w');
    rc = TB_CONF_OK;

    if (!is_null
        && (week ? tb_pace_week_parse(s, &a, &b) : tb_pace_tz_parse(s, &a))
           != 0)
    {
        rc = tb_conf_error(ctx, tb_conf_line(node), "%s: \"%s\" is not %s",
                           path, tb_conf_show(s, show),
                           week ? "a day and a time (\"monday 00:00\")"
                                : "UTC or an offset from it (\"+05:30\")");

    } else if (!is_null && week) {
        cf->pacing_week_day = a;
        cf->pacing_week_minute = b;

    } else if (!is_null) {
        cf->pacing_tz_min = a;
    }

    free(s);

    return rc;
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
            if (tb_hex_digit(*q) < 0 && *q != ':' && *q != '.') {
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

    /* null is a scalar, read above */

    if (tb_conf_mapping(ctx, node, path,
                        "builtin or a mapping of model to prices", &pairs, &n,
                        (void **) &cf->prices, sizeof(tb_price_t))
        != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    rc = TB_CONF_OK;

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

        price->line = tb_conf_line(pairs[i].key);
        price->input = TB_UNSET;
        price->output = TB_UNSET;
        price->cache_read = TB_UNSET;
        price->cache_write = TB_UNSET;
        price->cache_write_1h = TB_UNSET;

        rc = tb_conf_section(ctx, pairs[i].value, sub, tb_conf_price, price);
        if (rc != TB_CONF_OK) {
            goto done;
        }

        /* a price missing its input or output would count as free */

        if (price->input < 0 || price->output < 0) {
            rc = tb_conf_error(ctx, price->line, "%s: input and output are "
                               "required (USD per million tokens; the cache "
                               "rates default to 0.1, 1.25 and 2 times "
                               "input)", sub);
            goto done;
        }

        if (price->cache_read < 0) {
            price->cache_read = price->input * 0.1;
        }

        if (price->cache_write < 0) {
            price->cache_write = price->input * 1.25;
        }

        if (price->cache_write_1h < 0) {
            price->cache_write_1h = price->input * 2;
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
    return tb_conf_alnum(id[0]) && tb_chars_ok(id, strlen(id), 64, "_-");
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

    if (a->capacity_domain && !tb_conf_valid_id(a->capacity_domain)) {
        return tb_conf_error(ctx, a->line, "account %s: capacity_domain "
                             "\"%s\" is not valid: use 1 to 64 letters, "
                             "digits, '_' or '-', starting with a letter or a "
                             "digit", a->id,
                             tb_conf_show(a->capacity_domain, show));
    }

    if (a->options.anthropic_version
        && !tb_provider_version_valid(a->options.anthropic_version))
    {
        return tb_conf_error(ctx, a->line, "account %s: "
                             "options.anthropic_version \"%s\" is not valid: "
                             "use 1 to 64 letters, digits, '.', '_' or '-'",
                             a->id, tb_conf_show(a->options.anthropic_version,
                                                 show));
    }

    if (a->type == TB_ACCOUNT_ANTHROPIC_API
        && (a->api_key == NULL || a->api_key[0] == '\0'))
    {
        return tb_conf_error(ctx, a->line, "account %s: type anthropic_api "
                             "needs api_key", a->id);
    }

    /*
     * Subscription sessions, Bedrock and Vertex report no
     * anthropic-ratelimit-* headers: read as observable, such an account
     * would look permanently full and win every routing comparison.
     */
    if (a->type == TB_ACCOUNT_OAUTH || a->type == TB_ACCOUNT_BEDROCK
        || a->type == TB_ACCOUNT_VERTEX)
    {
        a->observable_limits = 0;
    }

    if (a->type == TB_ACCOUNT_BEDROCK
        && tb_conf_bedrock_credentials(ctx, a) != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (a->type == TB_ACCOUNT_VERTEX
        && tb_conf_vertex_credentials(ctx, a) != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
    }

    if (a->type == TB_ACCOUNT_OAUTH
        && tb_conf_oauth_credentials(ctx, a) != TB_CONF_OK)
    {
        return TB_CONF_ERROR;
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
        tb_gsa_free(cf->accounts[i].gsa);
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
    tb_conf_strlist_free(&cf->written);
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


int
tb_config_written(const tb_config_t *cf, const char *path)
{
    size_t  i;

    for (i = 0; i < cf->written.n; i++) {
        if (strcmp(cf->written.items[i], path) == 0) {
            return 1;
        }
    }

    return 0;
}


int
tb_config_each(const tb_config_t *cf, tb_config_each_pt cb, void *data)
{
    return tb_conf_each(tb_conf_top, cf, "", cb, data);
}


static const char *
tb_config_no_env(const char *name)
{
    (void) name;

    return NULL;
}


/* a value that would end a header line, or a C string, before its end */
static int
tb_config_line_safe(const char *s)
{
    return s == NULL || strpbrk(s, "\r\n") == NULL;
}


tb_config_t *
tb_config_account_spec(const char *json, size_t len, char *err,
    size_t errlen)
{
    size_t        i, n;
    char         *buf, *p, *q, msg[TB_CONFIG_ERRLEN];
    tb_config_t  *cf;

    for (i = 0; i < len && strchr(" \t\r\n", json[i]); i++) { /* void */ }

    if (i == len || json[i] != '{' || memchr(json, '\0', len) != NULL) {
        snprintf(err, errlen, "the body must be a JSON object");
        return NULL;
    }

    /* JSON is YAML's flow style: one account in the file's own schema */

    n = sizeof("accounts: [\n]\n") + len;

    buf = malloc(n);
    if (buf == NULL) {
        snprintf(err, errlen, "no memory");
        return NULL;
    }

    memcpy(buf, "accounts: [\n", sizeof("accounts: [\n") - 1);
    memcpy(buf + sizeof("accounts: [\n") - 1, json, len);
    memcpy(buf + sizeof("accounts: [\n") - 1 + len, "\n]\n", 3);

    cf = tb_config_load_buffer("body", buf, sizeof("accounts: [\n") - 1 + len
                               + 3, tb_config_no_env, msg, sizeof(msg));
    free(buf);

    if (cf == NULL) {
        /* "body:2: accounts[0]: id ..." -> "id ..." */
        p = msg;

        if (strncmp(p, "body:", 5) == 0 && (q = strstr(p, ": ")) != NULL) {
            p = q + 2;
        }

        if (strncmp(p, "accounts[0]: ", 13) == 0) {
            p += 13;

        } else if (strncmp(p, "accounts[0].", 12) == 0) {
            p += 12;
        }

        snprintf(err, errlen, "%s", p);
        return NULL;
    }

    if (cf->naccounts != 1) {
        snprintf(err, errlen, "the body must be one account");
        tb_config_free(cf);
        return NULL;
    }

    if (!tb_config_line_safe(cf->accounts[0].api_key)) {
        snprintf(err, errlen, "api_key has a line break");
        tb_config_free(cf);
        return NULL;
    }

    for (i = 0; i < cf->accounts[0].headers.n; i++) {
        if (!tb_config_line_safe(cf->accounts[0].headers.items[i].value)) {
            snprintf(err, errlen, "headers.%s has a line break",
                     cf->accounts[0].headers.items[i].key);
            tb_config_free(cf);
            return NULL;
        }
    }

    return cf;
}
