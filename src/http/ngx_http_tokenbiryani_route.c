/*
 * tokenbiryani: the glue between a request and the router in src/core.
 *
 * Before the first attempt: the candidates, the session key, the input
 * estimate and the output lease size (the need vector), and the session's
 * owner.  Per attempt: the decision over every account, then the lease on
 * the chosen one, re-checked under the zone lock (another worker may have
 * taken the capacity a moment ago).  After each attempt: the lease goes
 * back, exactly once, reconciled against the usage the response reported.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_route.h"
#include "ngx_http_tokenbiryani_record.h"
#include "ngx_http_tokenbiryani_settings.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_events.h"
#include "ngx_http_tokenbiryani_batches.h"
#include "tb_hash.h"


static void ngx_http_tokenbiryani_count_affinity(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_lease_timer(ngx_event_t *ev);
static void ngx_http_tokenbiryani_route_objects_free(
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t n);


/* how often a worker looks for what dead workers left in the zone */
#define NGX_HTTP_TB_REAP_MS            250

static void ngx_http_tokenbiryani_lease_reap(
    ngx_http_tokenbiryani_main_conf_t *tmcf, int64_t now);

static void ngx_http_tokenbiryani_unpriced(ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_route_caps(
    ngx_http_tokenbiryani_main_conf_t *tmcf, ngx_http_tokenbiryani_ctx_t *ctx);

static ngx_event_t  ngx_http_tokenbiryani_lease_event;
static int64_t      ngx_http_tokenbiryani_renewed_ms;


/* the conversation, scoped by the key so tenants never share one */
void
ngx_http_tokenbiryani_route_session(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body)
{
    const char           *scope;
    ngx_table_elt_t      *h;
    const tb_key_conf_t  *kc;

    if (ctx->kind != NGX_HTTP_TB_MESSAGES) {
        return;
    }

    kc = ctx->key;
    scope = kc ? kc->name : "";

    h = ngx_http_tokenbiryani_own_header(r, ctx, "x-tokenbiryani-session",
                                         sizeof("x-tokenbiryani-session") - 1);

    ctx->route.session = tb_session_key(body->data, body->len, &ctx->body,
                                  h ? (char *) h->value.data : NULL,
                                  h ? h->value.len : 0,
                                  scope, ngx_strlen(scope),
                                  &ctx->route.session_source);
}


ngx_int_t
ngx_http_tokenbiryani_route_prepare(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body)
{
    u_char                             *pool;
    int64_t                             input, output, max_tokens, text;
    int64_t                             fixed;
    ngx_int_t                           pin;
    ngx_uint_t                          i, n, calibrated;
    tb_cand_t                          *c;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    a = tmcf->accounts.elts;
    n = ctx->naccounts;
    ctx->marks = ngx_pcalloc(r->pool, n + 1);
    ctx->route.cands = ngx_palloc(r->pool, (n + 1) * sizeof(tb_cand_t));
    ctx->route.outs = ngx_palloc(r->pool, (n + 1) * sizeof(tb_cand_out_t));
    if (ctx->marks == NULL || ctx->route.cands == NULL
        || ctx->route.outs == NULL)
    {
        return NGX_ERROR;
    }

    /* what the decisions of this request read of each account: a batch's
     * or a file's own account only, once it has one, and the account of
     * the files a Message names */

    pool = ctx->pool;
    pin = ctx->object ? ngx_http_tokenbiryani_object_pin(ctx) : ctx->pin;

    for (i = 0; i < n; i++) {
        c = &ctx->route.cands[i];

        c->conf = a[i].conf;
        c->st = a[i].sh;
        c->id_hash = a[i].id_hash;
        c->supported = a[i].supported;
        /* (a subscription takes no batch or file) */
        c->messages_only = ctx->kind != NGX_HTTP_TB_MESSAGES
                           && (a[i].platform
                               || (ctx->kind == NGX_HTTP_TB_BATCHES
                                   && a[i].conf->type == TB_ACCOUNT_OAUTH));

        /* a Vertex account's token, the domain: set per decision */
        c->token_wait = 0;
        c->token_at = 0;
        c->cap = NULL;
        c->domain = 0;
        c->removed = a[i].retired;
        c->tried = 0;
        c->in_pool = (pin >= 0) ? (a[i].slot == (ngx_uint_t) pin)
                                : (pool ? pool[i] : 1);
    }

    if (ctx->kind != NGX_HTTP_TB_MESSAGES) {
        /* one concurrency slot and no tokens: their limits are their own */
        ngx_memzero(&ctx->route.need, sizeof(tb_need_t));

        if (ctx->object) {
            ngx_http_tokenbiryani_object_need(ctx);

            if (pin < 0) {
                ngx_http_tokenbiryani_route_objects_free(ctx, n);
            }
        }

        return NGX_OK;
    }

    /* the conversation (ngx_http_tokenbiryani_route_session), its owner */

    ctx->route.owner = ngx_http_tokenbiryani_affinity_get(&tmcf->zone,
                                             ctx->route.session,
                                             ngx_http_tokenbiryani_now_ms(),
                                             &ctx->owner_cached);

    if (ctx->route.owner >= 0) {
        for (i = 0; i < n; i++) {
            if (a[i].slot == (ngx_uint_t) ctx->route.owner && !a[i].retired) {
                ctx->route.owner_index = (int) i;
                break;
            }
        }
    }

    ctx->route.model_hash = tb_hash64(0, ctx->body.model, ctx->body.model_len);

    /* the need vector */

    tb_estimate_input_parts(body->data, body->len, &ctx->body, &text, &fixed);

    max_tokens = ctx->body.max_tokens >= 0 ? ctx->body.max_tokens : 1024;

    input = ngx_http_tokenbiryani_estimate(&tmcf->zone, ctx->body.model,
                                           ctx->body.model_len, max_tokens,
                                           text, fixed, &output, &calibrated);

    /* a sample of the model's tokens per byte, when it answers */
    ctx->text_bytes = fixed ? 0 : text;

    ctx->route.need.n[TB_WIN_REQUESTS] = 1;
    ctx->route.need.n[TB_WIN_INPUT] = input;
    ctx->route.need.n[TB_WIN_OUTPUT] = output;
    ctx->route.need.max_tokens = max_tokens;

    ngx_http_tokenbiryani_route_caps(tmcf, ctx);

    return NGX_OK;
}


/*
 * A model with no price under a key with a spend cap: said once per model
 * (and worker) - what it costs is unknown, so it counts nothing against
 * the cap; its turns are still counted.
 */

static void
ngx_http_tokenbiryani_unpriced(ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_uint_t  i;

    static ngx_uint_t  n;
    static uint64_t    said[64];

    for (i = 0; i < n; i++) {
        if (said[i] == ctx->route.model_hash) {
            return;
        }
    }

    if (n < 64) {
        said[n++] = ctx->route.model_hash;
    }

    ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                  "tokenbiryani: model \"%*s\" has no price (pricing:): "
                  "spend caps cannot be enforced for it, its requests count "
                  "$0 against them", ctx->body.model_len, ctx->body.model);
}


/*
 * What the request may cost (its input estimate at the input rate, its
 * output lease at the output rate: reserved against every cap while an
 * attempt is in flight), and the caps of its key and its conversation.
 */

static void
ngx_http_tokenbiryani_route_caps(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    const tb_config_t             *cf;
    const tb_key_conf_t           *kc;
    const tb_model_price_t        *price;
    ngx_http_tokenbiryani_caps_t  *caps;

    cf = tmcf->tbcf;
    kc = ctx->key;
    caps = &ctx->caps;

    price = ngx_http_tokenbiryani_price(tmcf, ctx);

    if (price) {
        ctx->route.need.cost = ctx->route.need.n[TB_WIN_INPUT] * price->input
                         + ctx->route.need.n[TB_WIN_OUTPUT] * price->output;

    } else if (kc && (kc->spend_cap_usd >= 0 || kc->session_cap_usd >= 0)) {
        ngx_http_tokenbiryani_unpriced(ctx);
    }

    caps->key_cap = -1;
    caps->session_cap = -1;
    caps->session_turns = -1;

    if (kc) {
        caps->key_cap = tb_usd_to_nd(kc->spend_cap_usd);
        caps->key_name = (u_char *) kc->name;
        caps->key_name_len = ngx_strlen(kc->name);
    }

    if (!cf->sessions_track || ctx->route.session == 0) {
        return;
    }

    caps->session = ctx->route.session;

    if (kc) {
        caps->session_cap = tb_usd_to_nd(kc->session_cap_usd);
        caps->session_turns = kc->session_max_turns;
    }
}


void
ngx_http_tokenbiryani_route_input(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx, tb_route_in_t *in)
{
    ngx_memzero(in, sizeof(tb_route_in_t));

    in->strategy = (ctx->kind == NGX_HTTP_TB_MESSAGES)
                   ? ngx_http_tokenbiryani_strategy(tmcf) : tmcf->rotate;
    ngx_memcpy(in->weights, tmcf->weights, sizeof(in->weights));
    in->model = ctx->body.has_model ? ctx->body.model : NULL;
    in->model_len = ctx->body.model_len;
    in->model_hash = ctx->route.model_hash;
    in->breaker = tmcf->zone.breaker;
    in->need = ctx->route.need;
    in->session = ctx->route.session;
    in->owner = ctx->route.owner_index;
    in->spend_bucket_ms = tmcf->zone.spend_bucket_ms;

    /*
     * Cache-aware: on an account whose contract does not count cache
     * reads toward the input window, the owner will count the prompt less
     * what its cache holds for the conversation, and is leased that.
     */

    if (ctx->route.owner_index >= 0 && ctx->owner_cached > 0
        && !ctx->route.cands[ctx->route.owner_index].conf->cache_reads_count)
    {
        in->owner_need = ctx->route.need;
        in->owner_need.n[TB_WIN_INPUT] = ngx_max(1,
                      ctx->route.need.n[TB_WIN_INPUT] - ctx->owner_cached);
        in->owner_discount = 1;
    }
}


ngx_http_tokenbiryani_account_t *
ngx_http_tokenbiryani_route(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t lease)
{
    size_t                              j;
    int64_t                             rem[TB_NWINDOWS], now;
    ngx_uint_t                          i, n, tries, probed, rc;
    tb_route_in_t                       in;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;
    n = ctx->naccounts;

    ngx_http_tokenbiryani_route_input(tmcf, ctx, &in);

    if (in.strategy->rotate) {
        in.cursor = ngx_http_tokenbiryani_zone_rr_next(&tmcf->zone);
    }

    now = ngx_http_tokenbiryani_now_ms();

    for (i = 0; i < n; i++) {
        ctx->route.cands[i].tried = (ctx->marks[i] & NGX_HTTP_TB_MARK_TRIED) ? 1
                                                                       : 0;

        /* an account removed since the request began, or changed: what
         * it is now */
        ctx->route.cands[i].removed = a[i].retired;
        ctx->route.cands[i].conf = a[i].conf;

        /* the windows it counts against: its capacity domain's */
        ctx->route.cands[i].cap = ngx_http_tokenbiryani_zone_capacity(
                                      &tmcf->zone, a[i].slot,
                                      &ctx->route.cands[i].domain);

        /* a Vertex token may have come, or gone, since */
        ctx->route.cands[i].token_wait = a[i].gauth != NULL
                                   && a[i].token_until <= now;
        ctx->route.cands[i].token_at = a[i].token_next;
    }

    ctx->key_full = 0;

    for (tries = 0; tries < 3; tries++) {

        in.now = ngx_http_tokenbiryani_now_ms();

        tb_route(&in, ctx->route.cands, n, ctx->route.outs,
                 &ctx->route.decision);
        ctx->route.decided_ms = in.now;

        if (ctx->route.decision.chosen < 0 || !lease) {
            break;
        }

        i = (ngx_uint_t) ctx->route.decision.chosen;

        for (j = 0; j < TB_NWINDOWS; j++) {
            rem[j] = tb_window_available(a[i].sh, (int) j, in.now);
        }

        probed = 0;

        rc = ngx_http_tokenbiryani_lease_take(&tmcf->zone, a[i].slot,
                                 a[i].conf,
                                 ((int) i == in.owner && in.owner_discount)
                                 ? &in.owner_need : &ctx->route.need,
                                 ctx->key_hash,
                                 ctx->key ? ctx->key->max_inflight : -1,
                                 &ctx->caps, in.now, &ctx->route.lease,
                                 &probed);

        if (rc == NGX_HTTP_TB_LEASE_CAP && ctx->caps.frees_at == 0) {
            /* only what its key's requests in flight reserved holds it:
             * it waits for them, as for its key's share */
            ctx->caps.reached = NGX_HTTP_TB_CAP_NONE;
            rc = NGX_HTTP_TB_LEASE_KEY_FULL;
        }

        if (rc == NGX_HTTP_TB_LEASE_CAP) {
            /* a cap of its key's or its conversation's: refused */
            break;
        }

        if (rc == NGX_HTTP_TB_LEASE_KEY_FULL) {
            /* the key's share is taken: it waits for its own to end */
            ctx->key_full = 1;
            ngx_http_tokenbiryani_event_admission(r, ctx, NULL, NULL,
                                                  NGX_HTTP_TB_QUEUE_KEY, 0);
            break;
        }

        ngx_http_tokenbiryani_event_admission(r, ctx, &a[i], rem,
                                              ctx->route.lease.id
                                              ? NGX_HTTP_TB_ADMIT
                                              : NGX_HTTP_TB_LOST,
                                              probed);

        if (ctx->route.lease.id) {
            ctx->probed = probed;
            break;
        }

        /* another worker took that capacity first: decide again */
    }

    if (ctx->route.decisions++ == 0) {
        /* the owner's fate is decided by the first choice (see settle) */
        ctx->route.affinity = ctx->route.decision.affinity;
    }

    if (ctx->route.decision.chosen < 0 || (lease && ctx->route.lease.id == 0)) {
        return NULL;
    }

    return &a[ctx->route.decision.chosen];
}


void
ngx_http_tokenbiryani_route_settle(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t success)
{
    int                                 w;
    tb_answer_t                         ans;
    ngx_http_tokenbiryani_charge_t      ch, *chp;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (ctx->route.lease.id == 0) {
        return;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    /* an attempt that was answered ran up its usage's cost */

    chp = NULL;

    if (ctx->committed && ctx->account && ctx->usage.input_tokens >= 0) {
        ch.at_ms = ngx_http_tokenbiryani_now_ms();
        ch.cost = ngx_http_tokenbiryani_settle_cost(tmcf, ctx);
        ch.tokens[0] = ctx->usage.input_tokens;
        ch.tokens[1] = ngx_max(ctx->usage.output_tokens, 0);
        ch.tokens[2] = ngx_max(ctx->usage.cache_read_input_tokens, 0);
        ch.tokens[3] = ngx_max(ctx->usage.cache_creation_input_tokens, 0);
        chp = &ch;
    }

    ans.usage = success ? &ctx->usage : NULL;
    ans.headers_ms = ctx->resp.headers_ms;

    for (w = TB_WIN_REQUESTS; w <= TB_WIN_INPUT; w++) {
        ans.remaining[w] =
            (ctx->resp.obs.has & (1u << (w * TB_RL_NFIELDS + TB_RL_REMAINING)))
            ? ctx->resp.obs.v[w][TB_RL_REMAINING] : -1;
    }

    ngx_http_tokenbiryani_lease_give_back(&tmcf->zone, &ctx->route.lease, &ans,
                                          ctx->probed, chp);
    ctx->probed = 0;

    if (!success || ctx->account == NULL
        || ctx->kind != NGX_HTTP_TB_MESSAGES)
    {
        return;
    }

    ngx_http_tokenbiryani_estimator_observe(&tmcf->zone, ctx->body.model,
                                            ctx->body.model_len,
                                            ctx->route.need.n[TB_WIN_OUTPUT],
                                            ctx->usage.output_tokens,
                                            ctx->text_bytes,
                                            tb_usage_prompt(&ctx->usage));

    ngx_http_tokenbiryani_count_affinity(r, ctx);
}


/*
 * What the request did to its conversation's cache, counted once, when it
 * is answered: kept on the owner (honored), moved because the owner could
 * not serve - filtered out, or chosen and failed (a forced break) - or
 * moved although the owner could have served (broken).
 */

static void
ngx_http_tokenbiryani_count_affinity(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;

    if (ctx->route.owner_index < 0) {
        ctx->route.affinity = TB_AFF_NONE;

        ngx_http_tokenbiryani_zone_count_affinity(&tmcf->zone, -1,
                                                  ctx->account->slot,
                                                  TB_AFF_NONE);
        return;
    }

    if (ctx->account == &a[ctx->route.owner_index]
        || (ctx->route.cands[ctx->route.owner_index].domain != 0
            && ctx->route.cands[ctx->route.owner_index].domain
               == ctx->route.cands[ctx->account->index].domain))
    {
        /* the owner, or a key of its organisation: the same cache */
        ctx->route.affinity = TB_AFF_HONORED;

    } else if (ctx->route.affinity == TB_AFF_HONORED) {
        /* the owner was chosen and failed */
        ctx->route.affinity = TB_AFF_FORCED;
    }

    ngx_http_tokenbiryani_zone_count_affinity(&tmcf->zone,
                                              a[ctx->route.owner_index].slot,
                                              ctx->account->slot,
                                              ctx->route.affinity);
}


ngx_int_t
ngx_http_tokenbiryani_route_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_event_t  *ev;

    ev = &ngx_http_tokenbiryani_lease_event;

    /*
     * It must not keep a worker that is shutting down alive, yet it goes
     * on while such a worker still serves: cancelable, and re-armed always.
     */
    ngx_http_tokenbiryani_timer_init(ev, ngx_http_tokenbiryani_lease_timer,
                                     tmcf, cycle->log);

    /* what a worker that died before this one started left: at once */
    ngx_http_tokenbiryani_lease_reap(tmcf, ngx_http_tokenbiryani_now_ms());

    ngx_add_timer(ev, NGX_HTTP_TB_REAP_MS);

    return NGX_OK;
}


/*
 * Every NGX_HTTP_TB_REAP_MS: what workers that are gone held - leases,
 * probes, in-flight counts, queue places - comes back; four times per
 * lease timeout this worker's leases are renewed and the ones nobody
 * renewed (a worker that hangs) are taken back.
 */

static void
ngx_http_tokenbiryani_lease_timer(ngx_event_t *ev)
{
    int64_t                             now;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ev->data;
    now = ngx_http_tokenbiryani_now_ms();

    if (now - ngx_http_tokenbiryani_renewed_ms
        >= (int64_t) tmcf->lease_timeout / 4)
    {
        ngx_http_tokenbiryani_renewed_ms = now;
        ngx_http_tokenbiryani_lease_renew(&tmcf->zone, now);
        (void) ngx_http_tokenbiryani_lease_reclaim(&tmcf->zone, now, 1);
    }

    ngx_http_tokenbiryani_lease_reap(tmcf, now);

    ngx_add_timer(ev, NGX_HTTP_TB_REAP_MS);
}


static void
ngx_http_tokenbiryani_lease_reap(ngx_http_tokenbiryani_main_conf_t *tmcf,
    int64_t now)
{
    /* each gives back what it took (capacity, places) and says so */
    (void) ngx_http_tokenbiryani_lease_reclaim(&tmcf->zone, now, 0);
    (void) ngx_http_tokenbiryani_queue_reap(&tmcf->zone);
}


/*
 * A batch or a file made: the accounts whose Batches and Files APIs said
 * 429 lately are left out while another of the pool can take it (none
 * other: all stay, and the attempt learns again)
 */

static void
ngx_http_tokenbiryani_route_objects_free(ngx_http_tokenbiryani_ctx_t *ctx,
    ngx_uint_t n)
{
    int64_t      now;
    ngx_uint_t   i, free, limited;
    tb_cand_t   *c;

    now = ngx_http_tokenbiryani_now_ms();
    free = 0;
    limited = 0;

    for (i = 0; i < n; i++) {
        c = &ctx->route.cands[i];

        if (!c->in_pool || c->st == NULL) {
            continue;
        }

        if (__atomic_load_n(&c->st->objects_until_ms, __ATOMIC_RELAXED)
            > now)
        {
            limited++;

        } else {
            free++;
        }
    }

    if (limited == 0 || free == 0) {
        return;
    }

    for (i = 0; i < n; i++) {
        c = &ctx->route.cands[i];

        if (c->in_pool && c->st
            && __atomic_load_n(&c->st->objects_until_ms, __ATOMIC_RELAXED)
               > now)
        {
            c->in_pool = 0;
        }
    }
}
