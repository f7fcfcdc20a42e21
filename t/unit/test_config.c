/*
 * Unit tests of the YAML configuration loader (src/core/tb_config.c):
 * the file, its sections and the settings; the accounts and keys are
 * test_config_items.c's.
 */

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "tb_config.h"
#include "tb_router.h"
#include "tb_ratelimit.h"
#include "tb_test.h"
#include "tb_config_test.h"


static void
check_defaults(const tb_config_t *cf)
{
    TB_CHECK_STR(cf->server_host, "127.0.0.1");
    TB_CHECK_INT(cf->server_port, 8787);
    TB_CHECK_INT(cf->server_allow_remote, 0);
    TB_CHECK_DBL(cf->server_request_timeout_seconds, 600, 1e-9);
    TB_CHECK_DBL(cf->server_hot_reload_seconds, 5, 1e-9);

    TB_CHECK_STR(cf->routing_strategy, "sticky_headroom");
    TB_CHECK_INT(cf->routing_strategy_line, 0);
    TB_CHECK_DBL(cf->w_affinity, .40, 1e-9);
    TB_CHECK_DBL(cf->w_headroom, .40, 1e-9);
    TB_CHECK_DBL(cf->w_priority, .10, 1e-9);
    TB_CHECK_DBL(cf->w_load, .15, 1e-9);
    TB_CHECK_DBL(cf->w_errors, .20, 1e-9);
    TB_CHECK_DBL(cf->w_cost, .10, 1e-9);
    TB_CHECK_DBL(cf->affinity_ttl_seconds, 1800, 1e-9);
    TB_CHECK_DBL(cf->estimate_safety_margin, 1.15, 1e-9);
    TB_CHECK_INT(cf->output_estimate_adaptive, 1);
    TB_CHECK_DBL(cf->output_estimate_quantile, .95, 1e-9);
    TB_CHECK_INT(cf->output_estimate_min_samples, 20);
    TB_CHECK_INT(cf->output_estimate_window, 200);
    TB_CHECK_INT(cf->output_estimate_floor, 256);
    TB_CHECK_DBL(cf->output_estimate_max_undershoot, .20, 1e-9);

    TB_CHECK_INT(cf->retry_max_attempts, 3);
    TB_CHECK_INT(cf->retry_max_accounts, 3);
    TB_CHECK_DBL(cf->retry_deadline_seconds, 120, 1e-9);
    TB_CHECK_DBL(cf->retry_backoff_base_seconds, .25, 1e-9);
    TB_CHECK_DBL(cf->retry_backoff_max_seconds, 8, 1e-9);
    TB_CHECK_DBL(cf->retry_first_token_grace_seconds, 20, 1e-9);
    TB_CHECK_DBL(cf->retry_prelude_timeout_seconds, 30, 1e-9);

    TB_CHECK_INT(cf->breaker_failure_threshold, 5);
    TB_CHECK_DBL(cf->breaker_cooldown_seconds, 30, 1e-9);
    TB_CHECK_DBL(cf->breaker_overloaded_cooldown_seconds, 5, 1e-9);
    TB_CHECK_DBL(cf->breaker_exhausted_cooldown_seconds, 3600, 1e-9);

    TB_CHECK_INT(cf->queue_max_size, 128);
    TB_CHECK_DBL(cf->queue_default_max_wait_seconds, 60, 1e-9);

    TB_CHECK_INT(cf->batch_enabled, 0);
    TB_CHECK_DBL(cf->batch_poll_interval_seconds, 2, 1e-9);
    TB_CHECK_DBL(cf->batch_cost_multiplier, .5, 1e-9);

    TB_CHECK_STR(cf->store_backend, "memory");
    TB_CHECK_STR(cf->store_path, "tokenbiryani.db");
    TB_CHECK_STR(cf->store_secret_key_path, "tokenbiryani.key");
    TB_CHECK_STR(cf->store_url, "redis://127.0.0.1:6379/0");
    TB_CHECK_STR(cf->store_namespace, "tokenbiryani");

    TB_CHECK_DBL(cf->spend_window_hours, 24, 1e-9);

    TB_CHECK_INT(cf->cache_auto_breakpoint, 0);
    TB_CHECK_INT(cf->cache_advice_min_requests, 20);

    TB_CHECK_INT(cf->pacing_enabled, 1);
    TB_CHECK_STR(cf->pacing_mode, "advisory");
    TB_CHECK_STR(cf->pacing_window, "7d");
    TB_CHECK_STR(cf->pacing_curve, "linear");
    TB_CHECK_DBL(cf->pacing_ahead_threshold, .10, 1e-9);
    TB_CHECK_DBL(cf->pacing_behind_threshold, .10, 1e-9);
    TB_CHECK_DBL(cf->pacing_max_batch_delay_seconds, 30, 1e-9);
    TB_CHECK_DBL(cf->pacing_weekly_budget_usd, TB_UNSET, 1e-9);
    TB_CHECK_INT(cf->pacing_prefer_batch_lane_when_ahead, 1);
    TB_CHECK_INT(cf->pacing_model_downshift.n, 0);
    TB_CHECK_INT(cf->pacing_week_day, 0);
    TB_CHECK_INT(cf->pacing_week_minute, 0);
    TB_CHECK_INT(cf->pacing_tz_min, 0);

    TB_CHECK_INT(cf->sessions_track, 1);
    TB_CHECK_INT(cf->sessions_runaway_turns, 200);
    TB_CHECK_DBL(cf->sessions_runaway_spend_usd, TB_UNSET, 1e-9);
    TB_CHECK_INT(cf->sessions_report_limit, 20);

    TB_CHECK_INT(cf->observability_log_bodies, 0);
    TB_CHECK_INT(cf->observability_event_buffer, 1000);

    TB_CHECK_STR(cf->oauth_client_id, "");
    TB_CHECK_STR(cf->oauth_authorize_url, "");
    TB_CHECK_STR(cf->oauth_token_url, "");
    TB_CHECK_STR(cf->oauth_redirect_uri, "");
    TB_CHECK_INT(cf->oauth_scopes.n, 0);
    TB_CHECK_DBL(cf->oauth_refresh_skew_seconds, 300, 1e-9);
    TB_CHECK_DBL(cf->oauth_refresh_interval_seconds, 60, 1e-9);

    TB_CHECK_INT(cf->pricing_builtin, 0);
    TB_CHECK_INT(cf->nprices, 0);
    TB_CHECK_INT(cf->naccounts, 0);
    TB_CHECK_INT(cf->nkeys, 0);
    TB_CHECK_INT(cf->warnings.n, 0);
}


TB_TEST(test_defaults_empty_file)
{
    tb_config_t  *cf;

    cf = load("");
    TB_CHECK(cf != NULL);

    if (cf) {
        check_defaults(cf);
    }

    tb_config_free(cf);
}


TB_TEST(test_defaults_comments_only)
{
    tb_config_t  *cf;

    cf = load("# nothing here\n\n   # still nothing\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        check_defaults(cf);
    }

    tb_config_free(cf);

    cf = load("---\n# an empty document\n");
    TB_CHECK(cf != NULL);
    tb_config_free(cf);
}


TB_TEST(test_defaults_function)
{
    tb_config_t  *cf;

    cf = tb_config_defaults();
    TB_CHECK(cf != NULL);

    if (cf) {
        check_defaults(cf);
    }

    tb_config_free(cf);
    tb_config_free(NULL);
}


TB_TEST(test_null_sections_mean_defaults)
{
    tb_config_t  *cf;

    cf = load("server:\nrouting:\nretry: ~\nbreaker: null\npacing: {}\n"
              "accounts:\nkeys: []\npricing:\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        check_defaults(cf);
    }

    tb_config_free(cf);
}


static const char  *full_yaml =
    "server:\n"
    "  request_timeout_seconds: 300\n"
    "routing:\n"
    "  strategy: cost_tiered\n"
    "  weights:\n"
    "    affinity: 0.5\n"
    "    headroom: 0.3\n"
    "    priority: 0.2\n"
    "    load: 0.1\n"
    "    errors: 0.25\n"
    "    cost: 0.05\n"
    "  affinity_ttl_seconds: 900\n"
    "  estimate_safety_margin: 1.3\n"
    "  output_estimate: max_tokens\n"
    "  output_estimate_quantile: 0.9\n"
    "  output_estimate_min_samples: 10\n"
    "  output_estimate_window: 100\n"
    "  output_estimate_floor: 128\n"
    "  output_estimate_max_undershoot: 0.3\n"
    "retry:\n"
    "  max_attempts: 5\n"
    "  max_accounts: 2\n"
    "  deadline_seconds: 60\n"
    "  backoff_base_seconds: 0.5\n"
    "  backoff_max_seconds: 4\n"
    "  first_token_grace_seconds: 10\n"
    "  prelude_timeout_seconds: 15\n"
    "breaker:\n"
    "  failure_threshold: 7\n"
    "  cooldown_seconds: 45\n"
    "  overloaded_cooldown_seconds: 2.5\n"
    "  exhausted_cooldown_seconds: 1800\n"
    "queue:\n"
    "  max_size: 0\n"
    "  default_max_wait_seconds: 30\n"
    "batch:\n"
    "  enabled: yes\n"
    "  poll_interval_seconds: 1.5\n"
    "  cost_multiplier: 0.4\n"
    "store:\n"
    "  backend: redis\n"
    "  path: /var/lib/tb.db\n"
    "  secret_key_path: /etc/tb.key\n"
    "  url: redis://10.0.0.1:6379/2\n"
    "  namespace: tb-prod\n"
    "spend:\n"
    "  window_hours: 12\n"
    "cache:\n"
    "  auto_breakpoint: On\n"
    "  advice_min_requests: 5\n"
    "pacing:\n"
    "  enabled: false\n"
    "  mode: enforcing\n"
    "  window: 5h\n"
    "  curve: business_hours\n"
    "  ahead_threshold: 0.2\n"
    "  behind_threshold: 0.15\n"
    "  max_batch_delay_seconds: 60\n"
    "  weekly_budget_usd: 250.5\n"
    "  week_starts: Sunday 18:30\n"
    "  time_zone: \"-05:00\"\n"
    "  prefer_batch_lane_when_ahead: no\n"
    "  model_downshift:\n"
    "    claude-opus-4-6: claude-sonnet-4-6\n"
    "    claude-sonnet-4-6: claude-haiku-4-5\n"
    "sessions:\n"
    "  track: off\n"
    "  runaway_turns: 50\n"
    "  runaway_spend_usd: 10\n"
    "  report_limit: 5\n"
    "observability:\n"
    "  log_bodies: TRUE\n"
    "  event_buffer: 2000\n"
    "oauth:\n"
    "  client_id: my-client\n"
    "  authorize_url: https://auth.example/authorize\n"
    "  token_url: https://auth.example/token\n"
    "  redirect_uri: https://gw.example/cb\n"
    "  scopes: [user:inference, \"org:read\"]\n"
    "  refresh_skew_seconds: 120\n"
    "  refresh_interval_seconds: 30\n"
    "pricing:\n"
    "  claude-opus-4-*:\n"
    "    input: 15\n"
    "    output: 75\n"
    "    cache_read: 1.5\n"
    "    cache_write: 18.75\n"
    "  claude-haiku-4-5: {input: 1, output: 5}\n"
    "accounts:\n"
    "  - id: acct-01\n"
    "    name: Main key\n"
    "    type: anthropic_api\n"
    "    api_key: ${ANTHROPIC_API_KEY}\n"
    "    priority: 2.5\n"
    "    cost_tier: 0.8\n"
    "    models: [claude-sonnet-*, claude-haiku-4-5]\n"
    "    max_concurrency: 4\n"
    "    spend_cap_usd: 100\n"
    "    enabled: true\n"
    "    headers:\n"
    "      anthropic-beta: prompt-caching-2024-07-31\n"
    "      X-Team: infra\n"
    "    observable_limits: false\n"
    "    assumed_headroom: 0.25\n"
    "  - id: vtx\n"
    "    type: vertex\n"
    "    enabled: false\n"
    "    options:\n"
    "      project: my-project\n"
    "      region: europe-west4\n"
    "      credentials_path: /etc/gcp.json\n"
    "      token_env: GCP_TOKEN\n"
    "      access_token: ya29.x\n"
    "      token_path: /run/token\n"
    "      expiry_path: /run/expiry\n"
    "      expiry_skew_seconds: 90\n"
    "      beta_header: b1\n"
    "      profile: p1\n"
    "      model_map:\n"
    "        claude-sonnet-4-6: claude-sonnet-4-6@20250929\n"
    "keys:\n"
    "  - key: bir_admin_0123456789\n"
    "    name: ops\n"
    "    admin: true\n"
    "  - key: bir_tenant_0123456789\n"
    "    name: tenant\n"
    "    models: [claude-haiku-*]\n"
    "    pool: [acct-01, vtx]\n"
    "    rpm: 60\n"
    "    spend_cap_usd: 5\n"
    "    priority: batch\n"
    "    max_wait_seconds: 0\n"
    "    session_cap_usd: 1.5\n"
    "    session_max_turns: 40\n";


TB_TEST(test_full_file)
{
    tb_config_t              *cf;
    const tb_key_conf_t      *k;
    const tb_account_conf_t  *a;

    cf = load(full_yaml);
    TB_CHECK(cf != NULL);
    TB_CHECK_STR(err, "");

    if (cf == NULL) {
        return;
    }

    TB_CHECK_DBL(cf->server_request_timeout_seconds, 300, 1e-9);
    TB_CHECK_INT(cf->warnings.n, 0);

    TB_CHECK_STR(cf->routing_strategy, "cost_tiered");
    TB_CHECK_INT(cf->routing_strategy_line, 4);
    TB_CHECK_DBL(cf->w_affinity, .5, 1e-9);
    TB_CHECK_DBL(cf->w_errors, .25, 1e-9);
    TB_CHECK_DBL(cf->w_cost, .05, 1e-9);
    TB_CHECK_DBL(cf->estimate_safety_margin, 1.3, 1e-9);
    TB_CHECK_INT(cf->output_estimate_adaptive, 0);
    TB_CHECK_DBL(cf->output_estimate_quantile, .9, 1e-9);
    TB_CHECK_INT(cf->output_estimate_window, 100);
    TB_CHECK_INT(cf->output_estimate_floor, 128);

    TB_CHECK_INT(cf->retry_max_attempts, 5);
    TB_CHECK_INT(cf->retry_max_accounts, 2);
    TB_CHECK_DBL(cf->retry_backoff_base_seconds, .5, 1e-9);
    TB_CHECK_DBL(cf->retry_prelude_timeout_seconds, 15, 1e-9);

    TB_CHECK_INT(cf->breaker_failure_threshold, 7);
    TB_CHECK_DBL(cf->breaker_overloaded_cooldown_seconds, 2.5, 1e-9);

    TB_CHECK_INT(cf->queue_max_size, 0);
    TB_CHECK_DBL(cf->queue_default_max_wait_seconds, 30, 1e-9);

    TB_CHECK_INT(cf->batch_enabled, 1);
    TB_CHECK_DBL(cf->batch_poll_interval_seconds, 1.5, 1e-9);

    TB_CHECK_STR(cf->store_backend, "redis");
    TB_CHECK_STR(cf->store_url, "redis://10.0.0.1:6379/2");
    TB_CHECK_STR(cf->store_namespace, "tb-prod");

    TB_CHECK_DBL(cf->spend_window_hours, 12, 1e-9);
    TB_CHECK_INT(cf->cache_auto_breakpoint, 1);
    TB_CHECK_INT(cf->cache_advice_min_requests, 5);

    TB_CHECK_INT(cf->pacing_enabled, 0);
    TB_CHECK_STR(cf->pacing_mode, "enforcing");
    TB_CHECK_STR(cf->pacing_window, "5h");
    TB_CHECK_STR(cf->pacing_curve, "business_hours");
    TB_CHECK_DBL(cf->pacing_weekly_budget_usd, 250.5, 1e-9);
    TB_CHECK_INT(cf->pacing_prefer_batch_lane_when_ahead, 0);
    TB_CHECK_INT(cf->pacing_week_day, 6);
    TB_CHECK_INT(cf->pacing_week_minute, 18 * 60 + 30);
    TB_CHECK_INT(cf->pacing_tz_min, -300);
    TB_CHECK_INT(cf->pacing_model_downshift.n, 2);

    if (cf->pacing_model_downshift.n == 2) {
        TB_CHECK_STR(cf->pacing_model_downshift.items[0].key,
                     "claude-opus-4-6");
        TB_CHECK_STR(cf->pacing_model_downshift.items[0].value,
                     "claude-sonnet-4-6");
        TB_CHECK_STR(cf->pacing_model_downshift.items[1].value,
                     "claude-haiku-4-5");
    }

    TB_CHECK_INT(cf->sessions_track, 0);
    TB_CHECK_INT(cf->sessions_runaway_turns, 50);
    TB_CHECK_DBL(cf->sessions_runaway_spend_usd, 10, 1e-9);

    TB_CHECK_INT(cf->observability_log_bodies, 1);
    TB_CHECK_INT(cf->observability_event_buffer, 2000);

    TB_CHECK_STR(cf->oauth_client_id, "my-client");
    TB_CHECK_STR(cf->oauth_token_url, "https://auth.example/token");
    TB_CHECK_INT(cf->oauth_scopes.n, 2);

    if (cf->oauth_scopes.n == 2) {
        TB_CHECK_STR(cf->oauth_scopes.items[0], "user:inference");
        TB_CHECK_STR(cf->oauth_scopes.items[1], "org:read");
    }

    TB_CHECK_DBL(cf->oauth_refresh_interval_seconds, 30, 1e-9);

    TB_CHECK_INT(cf->pricing_builtin, 0);
    TB_CHECK_INT(cf->nprices, 2);

    if (cf->nprices == 2) {
        TB_CHECK_STR(cf->prices[0].pattern, "claude-opus-4-*");
        TB_CHECK_DBL(cf->prices[0].input, 15, 1e-9);
        TB_CHECK_DBL(cf->prices[0].cache_write, 18.75, 1e-9);
        TB_CHECK_STR(cf->prices[1].pattern, "claude-haiku-4-5");
        TB_CHECK_DBL(cf->prices[1].output, 5, 1e-9);
        /* not given: a tenth of input, not free */
        TB_CHECK_DBL(cf->prices[1].cache_read, 0.1, 1e-9);
    }

    TB_CHECK_INT(cf->naccounts, 2);

    a = tb_config_account(cf, "acct-01");
    TB_CHECK(a != NULL);

    if (a) {
        TB_CHECK_STR(a->name, "Main key");
        TB_CHECK_INT(a->type, TB_ACCOUNT_ANTHROPIC_API);
        TB_CHECK_STR(a->api_key, "sk-ant-test-0001");
        TB_CHECK_STR(a->base_url, "");
        TB_CHECK_STR(a->host, "api.anthropic.com");
        TB_CHECK_INT(a->port, 443);
        TB_CHECK_INT(a->tls, 1);
        TB_CHECK_STR(a->path_prefix, "");
        TB_CHECK_DBL(a->priority, 2.5, 1e-9);
        TB_CHECK_DBL(a->cost_tier, .8, 1e-9);
        TB_CHECK_INT(a->models.n, 2);
        TB_CHECK_INT(a->models_any, 0);
        TB_CHECK_INT(a->max_concurrency, 4);
        TB_CHECK_DBL(a->spend_cap_usd, 100, 1e-9);
        TB_CHECK_INT(a->enabled, 1);
        TB_CHECK_INT(a->headers.n, 2);

        if (a->headers.n == 2) {
            TB_CHECK_STR(a->headers.items[1].key, "X-Team");
            TB_CHECK_STR(a->headers.items[1].value, "infra");
        }

        TB_CHECK_INT(a->observable_limits, 0);
        TB_CHECK_DBL(a->assumed_headroom, .25, 1e-9);
        TB_CHECK_INT(a->line, 90);
    }

    a = tb_config_account(cf, "vtx");
    TB_CHECK(a != NULL);

    if (a) {
        TB_CHECK_INT(a->type, TB_ACCOUNT_VERTEX);
        TB_CHECK(a->api_key == NULL);
        TB_CHECK_INT(a->enabled, 0);
        TB_CHECK_STR(a->host, "europe-west4-aiplatform.googleapis.com");
        TB_CHECK_STR(a->options.project, "my-project");
        TB_CHECK_STR(a->options.access_token, "ya29.x");
        TB_CHECK_STR(a->options.expiry_path, "/run/expiry");
        TB_CHECK_INT(a->options.expiry_skew_seconds, 90);
        TB_CHECK_INT(a->options.model_map.n, 1);
        TB_CHECK_INT(a->models.n, 1);

        if (a->models.n == 1) {
            TB_CHECK_STR(a->models.items[0], "*");
        }

        TB_CHECK_INT(a->models_any, 1);
    }

    TB_CHECK_INT(cf->nkeys, 2);

    if (cf->nkeys == 2) {
        k = &cf->keys[0];
        TB_CHECK_STR(k->name, "ops");
        TB_CHECK_INT(k->admin, 1);
        TB_CHECK_INT(k->rpm, TB_UNSET);
        TB_CHECK_INT(k->priority, TB_PRIORITY_INTERACTIVE);
        TB_CHECK_INT(k->pool.n, 0);

        k = &cf->keys[1];
        TB_CHECK_STR(k->key, "bir_tenant_0123456789");
        TB_CHECK_INT(k->admin, 0);
        TB_CHECK_INT(k->pool.n, 2);
        TB_CHECK_INT(k->rpm, 60);
        TB_CHECK_DBL(k->spend_cap_usd, 5, 1e-9);
        TB_CHECK_INT(k->priority, TB_PRIORITY_BATCH);
        TB_CHECK_DBL(k->max_wait_seconds, 0, 1e-9);
        TB_CHECK_DBL(k->session_cap_usd, 1.5, 1e-9);
        TB_CHECK_INT(k->session_max_turns, 40);
    }

    tb_config_free(cf);
}


static const char  *example_yaml =
    "server:\n"
    "  host: 127.0.0.1\n"
    "  port: 8787\n"
    "routing:\n"
    "  strategy: sticky_headroom\n"
    "  weights: {affinity: 0.4, headroom: 0.4, priority: 0.1, load: 0.15, "
    "errors: 0.2, cost: 0.1}\n"
    "  affinity_ttl_seconds: 1800\n"
    "retry: {max_attempts: 3, max_accounts: 3, deadline_seconds: 120}\n"
    "queue: {max_size: 128, default_max_wait_seconds: 60}\n"
    "store: {backend: sqlite, path: tokenbiryani.db}\n"
    "pricing: builtin\n"
    "accounts:\n"
    "  - id: acct-01\n"
    "    type: anthropic_api\n"
    "    api_key: ${ANTHROPIC_API_KEY}\n"
    "  - id: acct-bedrock\n"
    "    type: bedrock\n"
    "    cost_tier: 1.2\n"
    "    options:\n"
    "      region: us-east-1\n"
    "      model_map:\n"
    "        claude-sonnet-4-6: us.anthropic.claude-sonnet-4-6-v1:0\n"
    "keys:\n"
    "  - key: bir_example_admin_key_0123456789abcdef\n"
    "    name: default\n"
    "    admin: true\n"
    "  - key: ${TENANT_KEY:-bir_tenant}\n"
    "    name: tenant-1\n"
    "    pool: [acct-01]\n"
    "    rpm: 60\n"
    "    spend_cap_usd: 5\n";


TB_TEST(test_reference_example)
{
    tb_config_t              *cf;
    const tb_account_conf_t  *a;

    cf = load(example_yaml);
    TB_CHECK(cf != NULL);
    TB_CHECK_STR(err, "");

    if (cf == NULL) {
        return;
    }

    TB_CHECK_STR(cf->store_backend, "sqlite");
    TB_CHECK_INT(cf->pricing_builtin, 1);
    TB_CHECK_INT(cf->routing_strategy_line, 5);
    TB_CHECK_INT(cf->naccounts, 2);
    TB_CHECK_INT(cf->nkeys, 2);

    a = tb_config_account(cf, "acct-bedrock");
    TB_CHECK(a != NULL);

    if (a) {
        TB_CHECK_INT(a->type, TB_ACCOUNT_BEDROCK);
        TB_CHECK_DBL(a->cost_tier, 1.2, 1e-9);
        TB_CHECK_STR(a->host, "bedrock-runtime.us-east-1.amazonaws.com");
        TB_CHECK_INT(a->port, 443);
        TB_CHECK_INT(a->options.model_map.n, 1);

        if (a->options.model_map.n == 1) {
            TB_CHECK_STR(a->options.model_map.items[0].value,
                         "us.anthropic.claude-sonnet-4-6-v1:0");
        }

        /* the reference's ambient credentials are none here: it loads,
         * and says it takes no request */
        TB_CHECK(a->unusable != NULL);
        TB_CHECK_INT(a->observable_limits, 0);
    }

    if (cf->nkeys == 2) {
        TB_CHECK_STR(cf->keys[1].key, "bir_tenant");
        TB_CHECK_INT(cf->keys[1].rpm, 60);
        TB_CHECK_INT(cf->keys[0].admin, 1);
    }

    /* host and port are present: both are reported as ignored; and the
     * Bedrock account without credentials */
    TB_CHECK_INT(cf->warnings.n, 3);

    if (cf->warnings.n == 3) {
        TB_CHECK_CONTAINS(cf->warnings.items[2], "test.yaml:16: account "
                          "acct-bedrock: type bedrock has no credentials");
        TB_CHECK_CONTAINS(cf->warnings.items[2], "it takes no request");
    }

    tb_config_free(cf);
}


TB_TEST(test_env_interpolation)
{
    tb_config_t  *cf;

    cf = load("store:\n"
              "  namespace: ${A}\n"
              "  path: \"${A}-x-${B:-y}-${NOPE:-z}\"\n"
              "  url: ${NOPE:-redis://h:1/0}\n"
              "  secret_key_path: ${EMPTY:-fallback}\n"
              "oauth:\n"
              "  client_id: ${NOPE:-}\n"
              "  token_url: 'cost: $5 and $ {A} and $'\n"
              "server:\n"
              "  request_timeout_seconds: ${PORT}\n");
    TB_CHECK(cf != NULL);
    TB_CHECK_STR(err, "");

    if (cf) {
        TB_CHECK_STR(cf->store_namespace, "alpha");
        TB_CHECK_STR(cf->store_path, "alpha-x-beta-z");
        TB_CHECK_STR(cf->store_url, "redis://h:1/0");
        /* set but empty is set: the default is only for unset */
        TB_CHECK_STR(cf->store_secret_key_path, "");
        TB_CHECK_STR(cf->oauth_client_id, "");
        TB_CHECK_STR(cf->oauth_token_url, "cost: $5 and $ {A} and $");
        TB_CHECK_DBL(cf->server_request_timeout_seconds, 9000, 1e-9);
    }

    tb_config_free(cf);
}


TB_TEST(test_env_nullable_number)
{
    tb_config_t  *cf;

    cf = load("pacing:\n  weekly_budget_usd: ${NOPE:-}\n"
              "retry:\n  max_attempts: ${NOPE:-7}\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_DBL(cf->pacing_weekly_budget_usd, TB_UNSET, 1e-9);
        TB_CHECK_INT(cf->retry_max_attempts, 7);
    }

    tb_config_free(cf);
}


TB_TEST(test_env_unset_is_an_error)
{
    EXPECT_ERROR("pacing:\n  week_starts: someday 00:00\n",
                 "test.yaml:2: pacing.week_starts: \"someday 00:00\" is not "
                 "a day and a time (\"monday 00:00\")");
    EXPECT_ERROR("pacing:\n  time_zone: Europe/Paris\n",
                 "pacing.time_zone: \"Europe/Paris\" is not UTC or an offset "
                 "from it (\"+05:30\")");
    EXPECT_ERROR("store:\n  path: x\n  namespace: pre-${MISSING_VAR}\n",
                 "test.yaml:3: ");
    TB_CHECK_CONTAINS(err, "MISSING_VAR");
    TB_CHECK_CONTAINS(err, "store.namespace");

    EXPECT_ERROR("store:\n  path: ${A}${B\n", "test.yaml:2: ");
    TB_CHECK_CONTAINS(err, "unterminated");

    EXPECT_ERROR("store:\n  path: ${not valid}\n", "not a valid variable");
}


TB_TEST(test_unknown_key_in_section)
{
    EXPECT_ERROR("server:\n  request_timeout_seconds: 5\n"
                 "routing:\n  strateggy: headroom\n",
                 "test.yaml:4: routing: unknown key \"strateggy\"");
    TB_CHECK_CONTAINS(err, "known: strategy, weights, affinity_ttl_seconds");

    EXPECT_ERROR("routing:\n  weights:\n    affinty: 1\n",
                 "test.yaml:3: routing.weights: unknown key \"affinty\"");

    EXPECT_ERROR(ACCOUNT_OK "    api_kye: x\n",
                 "test.yaml:4: accounts[0]: unknown key \"api_kye\"");

    EXPECT_ERROR(ACCOUNT_OK "    options:\n      regoin: x\n",
                 "test.yaml:5: accounts[0].options: unknown key \"regoin\"");

    EXPECT_ERROR("pricing:\n  m1: {input: 1, outptu: 2}\n",
                 "test.yaml:2: pricing.m1: unknown key \"outptu\"");
}


TB_TEST(test_unknown_top_level_section)
{
    EXPECT_ERROR("server: {}\n\nrouter:\n  strategy: x\n",
                 "test.yaml:3: unknown top-level section \"router\"");
    TB_CHECK_CONTAINS(err, "known: server, routing");
}


TB_TEST(test_wrong_types)
{
    EXPECT_ERROR("retry:\n\n\n\n\n\n  max_attempts: three\n",
                 "test.yaml:7: retry.max_attempts: expected an integer, "
                 "got \"three\"");

    EXPECT_ERROR("retry:\n  max_attempts: 1.5\n", "expected an integer");
    EXPECT_ERROR("retry:\n  max_attempts: 0x10\n", "expected an integer");
    EXPECT_ERROR("retry:\n  max_attempts: 010\n", "expected an integer");
    EXPECT_ERROR("retry:\n  max_attempts: 99999999999999999999\n",
                 "out of range");

    EXPECT_ERROR("batch:\n  enabled: maybe\n",
                 "test.yaml:2: batch.enabled: expected true or false, "
                 "got \"maybe\"");

    EXPECT_ERROR(ACCOUNT_OK "    models: claude-sonnet-4-6\n",
                 "accounts[0].models: expected a list of strings, "
                 "got a string");

    EXPECT_ERROR("routing:\n  - strategy\n",
                 "test.yaml:2: routing: expected a mapping, got a list");

    EXPECT_ERROR("retry:\n  max_attempts: {a: 1}\n",
                 "retry.max_attempts: expected an integer, got a mapping");

    EXPECT_ERROR("store:\n  path: [a, b]\n",
                 "store.path: expected a string, got a list");

    EXPECT_ERROR("retry:\n  max_attempts:\n",
                 "retry.max_attempts: expected an integer, got nothing");

    EXPECT_ERROR("routing:\n  affinity_ttl_seconds: .inf\n",
                 "expected a number");
    EXPECT_ERROR("routing:\n  affinity_ttl_seconds: nan\n",
                 "expected a number");
    EXPECT_ERROR("routing:\n  affinity_ttl_seconds: 1e999\n",
                 "expected a number");

    EXPECT_ERROR(ACCOUNT_OK "    models: [a, [b]]\n",
                 "accounts[0].models[1]: expected a string, got a list");

    EXPECT_ERROR("accounts:\n  id: a1\n",
                 "accounts: expected a list of accounts, got a mapping");

    EXPECT_ERROR("store:\n  backend: postgres\n",
                 "store.backend: expected one of memory, sqlite, redis, "
                 "got \"postgres\"");

    EXPECT_ERROR("routing:\n  output_estimate: p95\n",
                 "expected one of adaptive, max_tokens");
}


TB_TEST(test_numbers_and_booleans)
{
    tb_config_t  *cf;

    cf = load("retry:\n  max_attempts: +4\n  backoff_base_seconds: .5\n"
              "  backoff_max_seconds: 1e1\n  deadline_seconds: \"30\"\n"
              "batch:\n  enabled: ON\n"
              "cache:\n  auto_breakpoint: Yes\n"
              "pacing:\n  enabled: NO\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->retry_max_attempts, 4);
        TB_CHECK_DBL(cf->retry_backoff_base_seconds, .5, 1e-9);
        TB_CHECK_DBL(cf->retry_backoff_max_seconds, 10, 1e-9);
        TB_CHECK_DBL(cf->retry_deadline_seconds, 30, 1e-9);
        TB_CHECK_INT(cf->batch_enabled, 1);
        TB_CHECK_INT(cf->cache_auto_breakpoint, 1);
        TB_CHECK_INT(cf->pacing_enabled, 0);
    }

    tb_config_free(cf);
}


TB_TEST(test_ranges)
{
    EXPECT_ERROR("retry:\n  max_attempts: 0\n",
                 "retry.max_attempts: must be at least 1, got 0");
    EXPECT_ERROR("retry:\n  max_accounts: -2\n", "must be at least 1");
    EXPECT_ERROR("retry:\n  deadline_seconds: -1\n",
                 "retry.deadline_seconds: must be at least 0");
    EXPECT_ERROR("queue:\n  max_size: -1\n", "queue.max_size");
    EXPECT_ERROR("routing:\n  output_estimate_quantile: 0.3\n",
                 "must be between 0.5 and 1, got 0.3");
    EXPECT_ERROR("routing:\n  output_estimate_quantile: 1.01\n",
                 "must be between 0.5 and 1");
    EXPECT_ERROR(ACCOUNT_OK "    cost_tier: 0\n",
                 "accounts[0].cost_tier: must be greater than 0");
    EXPECT_ERROR(ACCOUNT_OK "    assumed_headroom: 2\n",
                 "accounts[0].assumed_headroom: must be between 0 and 1");
    EXPECT_ERROR(ACCOUNT_OK "    max_concurrency: 0\n", "must be at least 1");
    EXPECT_ERROR(ACCOUNT_OK "    spend_cap_usd: -5\n", "must be at least 0");
    EXPECT_ERROR(ACCOUNT_OK "keys:\n  - key: k\n    rpm: 0\n",
                 "keys[0].rpm: must be at least 1");
    EXPECT_ERROR("server:\n  port: 70000\n", "server.port");
}


TB_TEST(test_nullable_values)
{
    tb_config_t  *cf;

    cf = load(ACCOUNT_OK "    spend_cap_usd: null\n"
              "keys:\n  - key: k1\n    rpm: ~\n    spend_cap_usd:\n"
              "    max_wait_seconds: NULL\n    session_max_turns: 3\n"
              "sessions:\n  runaway_spend_usd: 2.5\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_DBL(cf->accounts[0].spend_cap_usd, TB_UNSET, 1e-9);
        TB_CHECK_INT(cf->keys[0].rpm, TB_UNSET);
        TB_CHECK_DBL(cf->keys[0].spend_cap_usd, TB_UNSET, 1e-9);
        TB_CHECK_DBL(cf->keys[0].max_wait_seconds, TB_UNSET, 1e-9);
        TB_CHECK_DBL(cf->keys[0].session_cap_usd, TB_UNSET, 1e-9);
        TB_CHECK_INT(cf->keys[0].session_max_turns, 3);
        TB_CHECK_DBL(cf->sessions_runaway_spend_usd, 2.5, 1e-9);
    }

    tb_config_free(cf);
}


/* a key's fair share: three quarters of its pool's slots, and of the queue */
TB_TEST(test_key_shares)
{
    tb_config_t  *cf;

    cf = load("accounts:\n"
              "  - {id: a, api_key: x, max_concurrency: 16}\n"
              "  - {id: b, api_key: y, max_concurrency: 4}\n"
              "  - {id: c, api_key: z, max_concurrency: 1}\n"
              "queue:\n  max_size: 10\n"
              "keys:\n"
              "  - {key: k1, name: all}\n"
              "  - {key: k2, name: pool-b, pool: [b]}\n"
              "  - {key: k3, name: pool-c, pool: [c]}\n"
              "  - {key: k4, name: set, max_inflight: 2, max_queued: 0}\n"
              "  - {key: k5, name: none, max_inflight: null, "
              "max_queued: ~}\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->keys[0].max_inflight, 15);     /* 21 * 3 / 4 */
        TB_CHECK_INT(cf->keys[0].max_queued, 7);        /* 10 * 3 / 4 */
        TB_CHECK_INT(cf->keys[1].max_inflight, 3);
        TB_CHECK_INT(cf->keys[2].max_inflight, 1);      /* never 0 */
        TB_CHECK_INT(cf->keys[3].max_inflight, 2);
        TB_CHECK_INT(cf->keys[3].max_queued, 0);        /* never waits */
        TB_CHECK_INT(cf->keys[4].max_inflight, TB_UNSET);
        TB_CHECK_INT(cf->keys[4].max_queued, TB_UNSET);
        TB_CHECK(cf->keys[0].name_hash != 0
                 && cf->keys[0].name_hash != cf->keys[1].name_hash);
    }

    tb_config_free(cf);

    /* one key has no one to leave room for */
    cf = load("accounts:\n  - {id: a, api_key: x}\n"
              "keys:\n  - {key: k1}\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->keys[0].max_inflight, TB_UNSET);
        TB_CHECK_INT(cf->keys[0].max_queued, TB_UNSET);
    }

    tb_config_free(cf);

    EXPECT_ERROR("keys:\n  - {key: k1, max_inflight: 0}\n", "max_inflight");
    EXPECT_ERROR("keys:\n  - {key: k1, max_queued: -1}\n", "max_queued");
}


TB_TEST(test_pricing)
{
    tb_config_t  *cf;

    cf = load("pricing: builtin\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->pricing_builtin, 1);
        TB_CHECK_INT(cf->nprices, 0);
    }

    tb_config_free(cf);

    cf = load("pricing:\n"
              "  claude-z-*: {input: 3, output: 15}\n"
              "  builtin: true\n"
              "  claude-a: {input: 2, output: 10, cache_read: 0.3,"
              " cache_write_1h: 5}\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->pricing_builtin, 1);
        TB_CHECK_INT(cf->nprices, 2);

        if (cf->nprices == 2) {
            /* file order, not sorted; unset cache rates are the standard
             * multiples of input */
            TB_CHECK_STR(cf->prices[0].pattern, "claude-z-*");
            TB_CHECK_DBL(cf->prices[0].output, 15, 1e-9);
            TB_CHECK_DBL(cf->prices[0].cache_read, .3, 1e-9);
            TB_CHECK_DBL(cf->prices[0].cache_write, 3.75, 1e-9);
            TB_CHECK_DBL(cf->prices[0].cache_write_1h, 6, 1e-9);
            TB_CHECK_STR(cf->prices[1].pattern, "claude-a");
            TB_CHECK_DBL(cf->prices[1].cache_read, .3, 1e-9);
            TB_CHECK_DBL(cf->prices[1].cache_write, 2.5, 1e-9);
            TB_CHECK_DBL(cf->prices[1].cache_write_1h, 5, 1e-9);
            TB_CHECK_INT(cf->prices[1].line, 4);
        }
    }

    tb_config_free(cf);

    cf = load("pricing:\n  builtin: false\n  m: {input: 1, output: 5}\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->pricing_builtin, 0);
        TB_CHECK_INT(cf->nprices, 1);
    }

    tb_config_free(cf);

    /* a price without its input or output would make the model free */
    EXPECT_ERROR("pricing:\n  m: {input: 1}\n",
                 "test.yaml:2: pricing.m: input and output are required");
    EXPECT_ERROR("pricing:\n  m: {cache_read: 0.3}\n",
                 "pricing.m: input and output are required");
    EXPECT_ERROR("pricing:\n  m:\n",
                 "pricing.m: input and output are required");

    EXPECT_ERROR("pricing: bultin\n",
                 "test.yaml:1: pricing: \"bultin\" is not valid");
    EXPECT_ERROR("pricing:\n  m: {input: -1}\n",
                 "pricing.m.input: must be at least 0");
    EXPECT_ERROR("pricing:\n  a*b: {input: 1}\n", "pricing.a*b: expected a "
                 "model id");
    EXPECT_ERROR("pricing: [builtin]\n", "pricing: expected builtin or a "
                 "mapping");
    EXPECT_ERROR("pricing:\n  m: 3\n", "pricing.m: expected a mapping");
}


TB_TEST(test_yaml_syntax_error_has_line)
{
    EXPECT_ERROR("server:\n  host: a\nrouting:\n  strategy: x: y\n",
                 "test.yaml:4: YAML syntax error: mapping values are not "
                 "allowed in this context");

    EXPECT_ERROR("routing:\n  weights: {affinity: 1\n", "YAML syntax error");

    EXPECT_ERROR("accounts:\n  - *nowhere\n",
                 "test.yaml:2: YAML syntax error: found undefined alias");
}


TB_TEST(test_document_rules)
{
    EXPECT_ERROR("server: {}\n---\nrouting: {}\n",
                 "test.yaml:2: a second YAML document");
    EXPECT_ERROR("- a\n- b\n", "test.yaml:1: the document root: expected a "
                 "mapping");
    EXPECT_ERROR("just text\n", "the document root: expected a mapping");
    EXPECT_ERROR("store:\n  path: \"a\\0b\"\n", "NUL byte");
}


TB_TEST(test_duplicate_yaml_keys)
{
    EXPECT_ERROR("retry:\n  max_attempts: 2\n  deadline_seconds: 1\n"
                 "  max_attempts: 4\n",
                 "test.yaml:4: retry: key \"max_attempts\" is given twice "
                 "(lines 2 and 4)");
    EXPECT_ERROR("retry: {}\nretry: {}\n",
                 "test.yaml:2: key \"retry\" is given twice");
}


TB_TEST(test_anchors_and_merge_keys)
{
    tb_config_t  *cf;

    cf = load("x-common: &common\n"
              "  type: bedrock\n"
              "  cost_tier: 2\n"
              "  models: &models [claude-sonnet-*]\n"
              "accounts:\n"
              "  - <<: *common\n    id: b1\n"
              "  - <<: *common\n    id: b2\n    cost_tier: 3\n");
    /* an unknown top-level key, even one used only for anchors */
    TB_CHECK(cf == NULL);
    TB_CHECK_CONTAINS(err, "unknown top-level section \"x-common\"");
    tb_config_free(cf);

    cf = load("accounts:\n"
              "  - &first\n    id: b1\n    type: bedrock\n    cost_tier: 2\n"
              "    models: [claude-sonnet-*]\n"
              "  - <<: *first\n    id: b2\n    cost_tier: 3\n"
              "  - <<: [{max_concurrency: 2}, *first]\n    id: b3\n");
    TB_CHECK(cf != NULL);
    TB_CHECK_STR(err, "");

    if (cf && cf->naccounts == 3) {
        TB_CHECK_STR(cf->accounts[1].id, "b2");
        TB_CHECK_INT(cf->accounts[1].type, TB_ACCOUNT_BEDROCK);
        TB_CHECK_DBL(cf->accounts[1].cost_tier, 3, 1e-9);
        TB_CHECK_INT(cf->accounts[1].models.n, 1);
        TB_CHECK_STR(cf->accounts[2].id, "b3");
        TB_CHECK_INT(cf->accounts[2].max_concurrency, 2);
        TB_CHECK_DBL(cf->accounts[2].cost_tier, 2, 1e-9);
    }

    tb_config_free(cf);

    EXPECT_ERROR("retry: &r\n  max_attempts: 2\n  <<: *r\n", "merge");
}


TB_TEST(test_alias_bomb_is_refused)
{
    char    *yaml, *p, *def;
    size_t   i, n;

    /* more nodes than allowed */
    n = 100005;
    yaml = malloc(n * 4 + 64);
    TB_CHECK(yaml != NULL);

    if (yaml == NULL) {
        return;
    }

    p = yaml;
    p += sprintf(p, "oauth:\n  scopes: [");

    for (i = 0; i < n; i++) {
        p += sprintf(p, "a,");
    }

    sprintf(p, "a]\n");

    EXPECT_ERROR(yaml, "more than 100000 nodes");
    free(yaml);

    /*
     * Few nodes, but each level merges the previous one eight times:
     * 8^10 keys if nothing stopped it.
     */
    yaml = malloc(8192);
    def = malloc(8192);
    TB_CHECK(yaml != NULL && def != NULL);

    if (yaml == NULL || def == NULL) {
        free(yaml);
        free(def);
        return;
    }

    strcpy(def, "&a0 {k0: 1, k1: 2}");

    for (i = 1; i <= 10; i++) {
        p = yaml + sprintf(yaml, "&a%zu {<<: [%s", i, def);

        for (n = 0; n < 7; n++) {
            p += sprintf(p, ", *a%zu", i - 1);
        }

        sprintf(p, "]}");
        strcpy(def, yaml);
    }

    sprintf(yaml, "server:\n  <<: [%s, *a10]\n", def);

    EXPECT_ERROR(yaml, "test.yaml:2: server: too many keys");

    /* the same with empty mappings: no keys, but as much work */
    strcpy(def, "&a0 {}");

    for (i = 1; i <= 10; i++) {
        p = yaml + sprintf(yaml, "&a%zu {<<: [%s", i, def);

        for (n = 0; n < 7; n++) {
            p += sprintf(p, ", *a%zu", i - 1);
        }

        sprintf(p, "]}");
        strcpy(def, yaml);
    }

    sprintf(yaml, "server:\n  <<: [%s, *a10]\n", def);

    EXPECT_ERROR(yaml, "too much data");

    free(def);
    free(yaml);
}


TB_TEST(test_server_warnings)
{
    tb_config_t  *cf;

    cf = load("server:\n  host: 0.0.0.0\n  port: ${PORT}\n"
              "  allow_remote: true\n  hot_reload_seconds: 0\n"
              "  request_timeout_seconds: 30\n");
    TB_CHECK(cf != NULL);

    if (cf == NULL) {
        return;
    }

    TB_CHECK_INT(cf->warnings.n, 4);

    if (cf->warnings.n == 4) {
        TB_CHECK_CONTAINS(cf->warnings.items[0],
                          "test.yaml:2: server.host is ignored: "
                          "nginx.conf's listen directive owns the address");
        TB_CHECK_CONTAINS(cf->warnings.items[1],
                          "test.yaml:3: server.port is ignored: "
                          "nginx.conf's listen directive");
        TB_CHECK_CONTAINS(cf->warnings.items[2],
                          "server.allow_remote is ignored");
        TB_CHECK_CONTAINS(cf->warnings.items[3],
                          "server.hot_reload_seconds is ignored");
    }

    /* still parsed, for whoever wants to report them */
    TB_CHECK_STR(cf->server_host, "0.0.0.0");
    TB_CHECK_INT(cf->server_port, 9000);
    TB_CHECK_INT(cf->server_allow_remote, 1);

    tb_config_free(cf);

    EXPECT_ERROR("server:\n  port: eighty\n", "server.port: expected an "
                 "integer");
}


TB_TEST(test_strategy)
{
    tb_config_t  *cf;
    int           i, found;

    cf = load("\nrouting:\n\n  strategy: my_plugin_strategy\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_STR(cf->routing_strategy, "my_plugin_strategy");
        TB_CHECK_INT(cf->routing_strategy_line, 4);
    }

    tb_config_free(cf);

    EXPECT_ERROR("routing:\n  strategy: \"\"\n",
                 "routing.strategy: must not be empty");

    found = 0;

    for (i = 0; tb_builtin_strategy_table[i].name != NULL; i++) {
        found += strcmp(tb_builtin_strategy_table[i].name,
                        "sticky_headroom") == 0
                 || strcmp(tb_builtin_strategy_table[i].name,
                           "round_robin") == 0;
    }

    TB_CHECK_INT(i, 6);
    TB_CHECK_INT(found, 2);
}


TB_TEST(test_load_file)
{
    int           fd;
    char          path[] = "/tmp/tb_config_test_XXXXXX";
    tb_config_t  *cf;

    cf = tb_config_load_file("/nonexistent/tokenbiryani.yaml", test_getenv,
                             err, sizeof(err));
    TB_CHECK(cf == NULL);
    TB_CHECK_CONTAINS(err, "cannot open /nonexistent/tokenbiryani.yaml: "
                      "No such file or directory");

    fd = mkstemp(path);
    TB_CHECK(fd != -1);

    if (fd == -1) {
        return;
    }

    TB_CHECK((size_t) write(fd, example_yaml, strlen(example_yaml))
             == strlen(example_yaml));
    close(fd);

    cf = tb_config_load_file(path, test_getenv, err, sizeof(err));
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->naccounts, 2);
        TB_CHECK_CONTAINS(cf->warnings.items[0], path);
    }

    tb_config_free(cf);

    /* the file's name prefixes the message */
    fd = open(path, O_WRONLY | O_TRUNC);

    if (fd != -1) {
        TB_CHECK(write(fd, "retry:\n  max_attempts: x\n", 25) == 25);
        close(fd);
    }

    cf = tb_config_load_file(path, test_getenv, err, sizeof(err));
    TB_CHECK(cf == NULL);
    TB_CHECK(strncmp(err, path, strlen(path)) == 0);
    TB_CHECK_CONTAINS(err, ":2: retry.max_attempts");

    unlink(path);

    cf = tb_config_load_file("/tmp", test_getenv, err, sizeof(err));
    TB_CHECK(cf == NULL);
    TB_CHECK_CONTAINS(err, "/tmp");
}


TB_TEST(test_real_getenv_and_small_errbuf)
{
    char          small[16];
    const char   *yaml;
    tb_config_t  *cf;

    setenv("TB_CONFIG_TEST_NS", "from-env", 1);

    yaml = "store:\n  namespace: ${TB_CONFIG_TEST_NS}\n";
    cf = tb_config_load_buffer("t.yaml", yaml, strlen(yaml), NULL, NULL, 0);
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_STR(cf->store_namespace, "from-env");
    }

    tb_config_free(cf);

    /* a short buffer truncates, NUL-terminated */
    cf = tb_config_load_buffer("t.yaml", "nope: 1\n", 8, NULL, small,
                               sizeof(small));
    TB_CHECK(cf == NULL);
    TB_CHECK(strlen(small) == sizeof(small) - 1);

    cf = tb_config_load_buffer(NULL, NULL, 0, NULL, NULL, 0);
    TB_CHECK(cf != NULL);
    tb_config_free(cf);
}


TB_TEST(test_lists_and_maps)
{
    tb_config_t  *cf;

    cf = load(ACCOUNT_OK "    models: []\n"
              "    options:\n      model_map: {a: b, c: \"${A}\"}\n"
              "keys:\n  - key: k\n    models:\n      - claude-*\n"
              "      - 'x'\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK_INT(cf->accounts[0].models.n, 0);
        TB_CHECK_INT(cf->accounts[0].options.model_map.n, 2);
        TB_CHECK_STR(cf->accounts[0].options.model_map.items[1].value,
                     "alpha");
        TB_CHECK_INT(cf->keys[0].models.n, 2);
        TB_CHECK_STR(cf->keys[0].models.items[1], "x");
    }

    tb_config_free(cf);

    EXPECT_ERROR("pacing:\n  model_downshift: [a]\n",
                 "pacing.model_downshift: expected a mapping");
    EXPECT_ERROR("pacing:\n  model_downshift: {a: }\n",
                 "pacing.model_downshift.a: expected a string, got nothing");
    EXPECT_ERROR("pacing:\n  model_downshift: {claude-opus-4-5: 'x\"y'}\n",
                 "pacing.model_downshift.claude-opus-4-5: \"x\"y\" is not a "
                 "model id (printable ASCII, no quotes or backslashes)");
    EXPECT_ERROR("keys:\n  - key: k1\n    auto_breakpoint: maybe\n",
                 "auto_breakpoint: expected true or false, got \"maybe\"");
    EXPECT_ERROR("oauth:\n  scopes: [a, ~]\n",
                 "oauth.scopes[1]: expected a string, got nothing");
    EXPECT_ERROR("oauth:\n  scopes: {a: b}\n",
                 "oauth.scopes: expected a list of strings, got a mapping");
}


TB_TEST(test_written)
{
    tb_config_t  *cf;

    cf = load("routing:\n  strategy: headroom\n  weights:\n"
                 "    cost: 0.5\nretry:\n  max_attempts: 4\n"
                 "accounts:\n  - id: a\n    api_key: k\n    priority: 2\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        TB_CHECK(tb_config_written(cf, "routing.strategy"));
        TB_CHECK(tb_config_written(cf, "routing.weights.cost"));
        TB_CHECK(tb_config_written(cf, "retry.max_attempts"));
        TB_CHECK(!tb_config_written(cf, "retry.max_accounts"));
        TB_CHECK(!tb_config_written(cf, "routing.weights.affinity"));
        TB_CHECK(!tb_config_written(cf, "routing"));
        /* an account's fields are its own, not settings */
        TB_CHECK(!tb_config_written(cf, "accounts[0].priority"));
        TB_CHECK(tb_config_written(cf, "accounts"));
        TB_CHECK_INT(cf->written.n, 4);
        tb_config_free(cf);
    }
}


typedef struct {
    int            n;
    int            sections;       /* a path with a list's or map's name */
    int            stop_at;        /* the call that stops the walk; 0 */
    double         cost;
    int64_t        attempts;
    const char    *backend;
    int            flags;          /* a flag's path seen */
} each_seen_t;


static int
each_cb(void *data, const char *path, tb_setting_type_e type,
    const void *value)
{
    each_seen_t  *e = data;

    e->n++;

    if (strcmp(path, "routing.weights.cost") == 0 && type == TB_SETTING_NUM) {
        e->cost = *(const double *) value;
    }

    if (strcmp(path, "retry.max_attempts") == 0 && type == TB_SETTING_INT) {
        e->attempts = *(const int64_t *) value;
    }

    if (strcmp(path, "store.backend") == 0 && type == TB_SETTING_STR) {
        e->backend = value;
    }

    if (strncmp(path, "accounts", 8) == 0 || strncmp(path, "keys", 4) == 0
        || strcmp(path, "pacing.model_downshift") == 0
        || path[strlen(path) - 1] == '.')
    {
        e->sections++;
    }

    if (strcmp(path, "batch.enabled") == 0) {
        e->flags++;
    }

    return e->n == e->stop_at ? 7 : 0;
}


TB_TEST(test_each)
{
    int            all;
    each_seen_t    e;
    tb_config_t   *cf;

    cf = load("routing:\n  weights:\n    cost: 0.5\nretry:\n"
              "  max_attempts: 4\nstore:\n  backend: sqlite\n"
              "accounts:\n  - id: a\n    api_key: k\n");
    TB_CHECK(cf != NULL);

    if (cf) {
        memset(&e, 0, sizeof(e));
        TB_CHECK_INT(tb_config_each(cf, each_cb, &e), 0);
        TB_CHECK_DBL(e.cost, .5, 1e-9);
        TB_CHECK_INT(e.attempts, 4);
        TB_CHECK(e.backend != NULL && strcmp(e.backend, "sqlite") == 0);
        /* numbers and strings only: no section, list, map or flag */
        TB_CHECK_INT(e.sections, 0);
        TB_CHECK_INT(e.flags, 0);
        TB_CHECK(e.n > 60);

        /* the first nonzero answer stops the walk and is returned */
        all = e.n;
        memset(&e, 0, sizeof(e));
        e.stop_at = 3;
        TB_CHECK_INT(tb_config_each(cf, each_cb, &e), 7);
        TB_CHECK_INT(e.n, 3);
        TB_CHECK(all > 3);

        tb_config_free(cf);
    }
}


int
main(void)
{
    TB_RUN(test_defaults_empty_file);
    TB_RUN(test_defaults_comments_only);
    TB_RUN(test_defaults_function);
    TB_RUN(test_null_sections_mean_defaults);
    TB_RUN(test_full_file);
    TB_RUN(test_reference_example);
    TB_RUN(test_env_interpolation);
    TB_RUN(test_env_nullable_number);
    TB_RUN(test_env_unset_is_an_error);
    TB_RUN(test_unknown_key_in_section);
    TB_RUN(test_unknown_top_level_section);
    TB_RUN(test_wrong_types);
    TB_RUN(test_numbers_and_booleans);
    TB_RUN(test_ranges);
    TB_RUN(test_nullable_values);
    TB_RUN(test_pricing);
    TB_RUN(test_yaml_syntax_error_has_line);
    TB_RUN(test_document_rules);
    TB_RUN(test_duplicate_yaml_keys);
    TB_RUN(test_anchors_and_merge_keys);
    TB_RUN(test_alias_bomb_is_refused);
    TB_RUN(test_server_warnings);
    TB_RUN(test_strategy);
    TB_RUN(test_load_file);
    TB_RUN(test_real_getenv_and_small_errbuf);
    TB_RUN(test_lists_and_maps);
    TB_RUN(test_key_shares);
    TB_RUN(test_written);
    TB_RUN(test_each);

    return tb_test_done();
}
