/*
 * tokenbiryani: the glue between a request and the router in src/core.
 *
 * Before the first attempt: the session key, the input estimate and the
 * output lease size (the need vector), and the session's owner.  Per
 * attempt: the decision over every account, then the lease on the chosen
 * one, re-checked under the zone lock (another worker may have taken the
 * capacity a moment ago).  After each attempt: the lease goes back,
 * exactly once, reconciled against the usage the response reported.  When
 * the request ends: its record in the inspector.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_shm.h"
#include "tb_hash.h"


static void ngx_http_tokenbiryani_lease_timer(ngx_event_t *ev);
static void ngx_http_tokenbiryani_count_affinity(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);
static void ngx_http_tokenbiryani_record(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx);


/* this worker's requests holding a lease: renewed by the timer */
static ngx_queue_t  ngx_http_tokenbiryani_held;
static ngx_event_t  ngx_http_tokenbiryani_timer;


ngx_int_t
ngx_http_tokenbiryani_route_prepare(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_str_t *body)
{
    int64_t                             input, max_tokens;
    ngx_uint_t                          n;
    const char                         *scope;
    ngx_table_elt_t                    *h;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    n = tmcf->accounts.nelts;

    ctx->cands = ngx_pcalloc(r->pool, (n + 1) * sizeof(tb_cand_t));
    ctx->outs = ngx_pcalloc(r->pool, (n + 1) * sizeof(tb_cand_out_t));
    if (ctx->cands == NULL || ctx->outs == NULL) {
        return NGX_ERROR;
    }

    ctx->owner = -1;
    ctx->ttft_ms = -1;

    if (ctx->kind != NGX_HTTP_TB_MESSAGES) {
        return NGX_OK;
    }

    /* the conversation, scoped by the key so tenants never share one */

    scope = ctx->key ? ctx->key->name : "";

    h = ngx_http_tokenbiryani_find_header(r, "x-tokenbiryani-session",
                                          sizeof("x-tokenbiryani-session")
                                          - 1);

    ctx->session = tb_session_key(body->data, body->len, &ctx->body,
                                  h ? (char *) h->value.data : NULL,
                                  h ? h->value.len : 0,
                                  scope, ngx_strlen(scope),
                                  &ctx->session_source);

    ctx->owner = ngx_http_tokenbiryani_affinity_get(tmcf, ctx->session,
                                             ngx_http_tokenbiryani_now_ms());

    ctx->model_hash = tb_hash64(0, ctx->body.model, ctx->body.model_len);

    /* the need vector */

    input = tb_estimate_input(body->data, body->len, &ctx->body);
    input = (int64_t) (input * tmcf->tbcf->estimate_safety_margin + 0.999);

    max_tokens = ctx->body.max_tokens >= 0 ? ctx->body.max_tokens : 1024;

    ctx->need.n[TB_WIN_REQUESTS] = 1;
    ctx->need.n[TB_WIN_INPUT] = input > 0 ? input : 1;
    ctx->need.n[TB_WIN_OUTPUT] = ngx_http_tokenbiryani_estimate_output(tmcf,
                                     ctx->body.model, ctx->body.model_len,
                                     max_tokens);
    ctx->need.max_tokens = max_tokens;

    return NGX_OK;
}


/* what every decision about this request is asked: its model and need */

void
ngx_http_tokenbiryani_route_input(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx, tb_route_in_t *in)
{
    ngx_memzero(in, sizeof(tb_route_in_t));

    in->strategy = tmcf->strategy;
    ngx_memcpy(in->weights, tmcf->weights, sizeof(in->weights));
    in->model = ctx->body.model;
    in->model_len = ctx->body.model_len;
    in->model_hash = ctx->model_hash;
    in->breaker = tmcf->breaker;
    in->need = ctx->need;
    in->owner = -1;
}


/*
 * One decision, and the lease on its choice.  NULL when no account can
 * take the request now; ctx->decision says whether one ever could.
 */

ngx_http_tokenbiryani_account_t *
ngx_http_tokenbiryani_route(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t lease)
{
    ngx_uint_t                          probed, logging;
    size_t                              j;
    ngx_uint_t                          i, n, tries;
    tb_cand_t                          *c;
    tb_route_in_t                       in;
    const tb_key_conf_t                *kc;
    u_char                             *p;
    int64_t                             rem[TB_NWINDOWS];
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    u_char                              reason[128];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;
    n = tmcf->accounts.nelts;
    kc = ctx->key;

    ngx_http_tokenbiryani_route_input(tmcf, ctx, &in);
    in.session = ctx->session;

    if (in.strategy->rotate) {
        in.cursor = ngx_http_tokenbiryani_shm_rr_next(tmcf);
    }

    for (i = 0; i < n; i++) {
        c = &ctx->cands[i];

        c->conf = a[i].conf;
        c->st = a[i].sh;
        c->id_hash = a[i].id_hash;
        c->supported = a[i].supported;
        c->tried = (ctx->tried[i] & NGX_HTTP_TB_TRIED) ? 1 : 0;
        c->in_pool = 1;

        if (kc && kc->pool.n) {
            for (j = 0; j < kc->pool.n; j++) {
                if (ngx_strcmp(kc->pool.items[j], a[i].conf->id) == 0) {
                    break;
                }
            }

            c->in_pool = (j < kc->pool.n);
        }

        if (ctx->owner >= 0 && a[i].slot == (ngx_uint_t) ctx->owner) {
            in.owner = (int) i;
        }
    }

    for (tries = 0; tries < 3; tries++) {

        in.now = ngx_http_tokenbiryani_now_ms();

        tb_route(&in, ctx->cands, n, ctx->outs, &ctx->decision);
        ctx->decided_ms = in.now;

        if (ctx->decision.chosen < 0 || !lease) {
            break;
        }

        i = (ngx_uint_t) ctx->decision.chosen;

        logging = (r->connection->log->log_level >= NGX_LOG_INFO);

        if (logging) {
            for (j = 0; j < TB_NWINDOWS; j++) {
                rem[j] = tb_window_available(a[i].sh, (int) j, in.now);
            }
        }

        ctx->lease = ngx_http_tokenbiryani_lease_take(tmcf, &a[i], &ctx->need,
                                                      in.now, &ctx->lease_id,
                                                      &probed);

        if (logging) {
            p = ngx_snprintf(reason, sizeof(reason) - 1,
                             "score %.3f, %ui eligible, affinity %s%s",
                             ctx->outs[i].score,
                             (ngx_uint_t) ctx->decision.eligible,
                             tb_affinity_name(ctx->decision.affinity),
                             probed ? ", half-open probe" : "");
            *p = '\0';

            ngx_http_tokenbiryani_log_admission(r, ctx, &a[i], rem,
                              ctx->lease ? "admit" : "lost",
                              ctx->lease ? (char *) reason
                                         : "another worker took the capacity");
        }

        if (ctx->lease) {
            ctx->probed = probed;
            break;
        }

        /* another worker took that capacity first: decide again */
    }

    if (ctx->decisions++ == 0) {
        /* the owner's fate is decided by the first choice (see settle) */
        ctx->affinity = ctx->decision.affinity;
        ctx->owner_index = in.owner;
    }

    if (!lease) {
        return ctx->decision.chosen < 0 ? NULL : &a[ctx->decision.chosen];
    }

    if (ctx->lease == NULL) {
        return NULL;
    }

    ngx_queue_insert_tail(&ngx_http_tokenbiryani_held, &ctx->held);

    return &a[ctx->decision.chosen];
}


/*
 * The attempt is over: its lease goes back.  A success also teaches the
 * estimator what the model produced.  (The session's owner was set when
 * the answer was committed.)
 */

void
ngx_http_tokenbiryani_route_settle(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t success)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    if (ctx->lease == NULL) {
        return;
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_http_tokenbiryani_lease_give_back(tmcf, ctx->lease, ctx->lease_id,
                                          success ? &ctx->usage : NULL,
                                          ctx->headers_ms, ctx->obs_stale,
                                          ctx->probed);

    ngx_queue_remove(&ctx->held);
    ctx->lease = NULL;
    ctx->probed = 0;

    /* this worker's waiters need not wait for the next tick */
    ngx_http_tokenbiryani_queue_wake();

    if (!success || ctx->account == NULL) {
        return;
    }

    ngx_http_tokenbiryani_estimator_observe(tmcf, ctx->body.model,
                                            ctx->body.model_len,
                                            ctx->need.n[TB_WIN_OUTPUT],
                                            ctx->usage.output_tokens);

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
    tb_account_state_t                 *owner;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;

    if (ctx->owner_index < 0) {
        ctx->affinity = TB_AFF_NONE;
        __atomic_add_fetch(&ctx->account->sh->sessions_placed, 1,
                           __ATOMIC_RELAXED);

    } else if (ctx->account == &a[ctx->owner_index]) {
        ctx->affinity = TB_AFF_HONORED;

    } else if (ctx->affinity == TB_AFF_HONORED) {
        /* the owner was chosen and failed */
        ctx->affinity = TB_AFF_FORCED;
    }

    __atomic_add_fetch(&tmcf->sh->decisions, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&tmcf->sh->affinity[ctx->affinity], 1,
                       __ATOMIC_RELAXED);

    if (ctx->owner_index < 0) {
        return;
    }

    owner = a[ctx->owner_index].sh;

    switch (ctx->affinity) {

    case TB_AFF_HONORED:
        __atomic_add_fetch(&owner->affinity_honored, 1, __ATOMIC_RELAXED);
        break;

    case TB_AFF_BROKEN:
        __atomic_add_fetch(&owner->affinity_broken, 1, __ATOMIC_RELAXED);
        break;

    default:
        __atomic_add_fetch(&owner->affinity_forced, 1, __ATOMIC_RELAXED);
        break;
    }
}


/* the request's pool is going away: nothing may stay held */

void
ngx_http_tokenbiryani_request_done(void *data)
{
    ngx_http_tokenbiryani_ctx_t *ctx = data;

    ngx_http_request_t  *r;

    r = ctx->request;

    ngx_http_tokenbiryani_abandon(r, ctx);
    ngx_http_tokenbiryani_route_settle(r, ctx, 0);

    if (ctx->kind == NGX_HTTP_TB_MESSAGES && ctx->cands) {
        ngx_http_tokenbiryani_record(r, ctx);
    }
}


static void
ngx_http_tokenbiryani_record(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    size_t                               len;
    ngx_uint_t                           i, k, n, picked;
    int64_t                              now;
    const char                          *name;
    tb_cand_out_t                       *o;
    ngx_http_tokenbiryani_account_t     *a;
    ngx_http_tokenbiryani_record_t      *rec;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    ngx_http_tokenbiryani_inspect_cand_t *ic;

    /* the request's pool is being destroyed: no allocation from it */
    static ngx_http_tokenbiryani_record_t  record;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (tmcf->sh->ring_size == 0) {
        return;
    }

    rec = &record;
    /* the candidates are written below, as many as there are */
    ngx_memzero(rec, offsetof(ngx_http_tokenbiryani_record_t, cands));

    now = ngx_http_tokenbiryani_now_ms();
    a = tmcf->accounts.elts;
    n = tmcf->accounts.nelts;

    ngx_memcpy(rec->id, ctx->request_id, NGX_HTTP_TB_REQUEST_ID_LEN);

    name = ctx->key ? ctx->key->name : "";
    len = ngx_min(ngx_strlen(name), TB_ID_MAX);
    ngx_memcpy(rec->key, name, len);

    ngx_memcpy(rec->model, ctx->body.model, ctx->body.model_len);
    len = ngx_min(ngx_strlen(tmcf->strategy->name), sizeof(rec->strategy) - 1);
    ngx_memcpy(rec->strategy, tmcf->strategy->name, len);

    rec->session = ctx->session;
    rec->session_source = (uint8_t) ctx->session_source;
    rec->started_ms = ctx->started_ms;
    rec->decided_ms = ctx->decided_ms;
    rec->latency_ms = now - ctx->started_ms;
    rec->ttft_ms = ctx->ttft_ms;
    rec->usage = ctx->usage;
    rec->need = ctx->need;
    rec->status = (int16_t) r->headers_out.status;
    rec->kind = (uint8_t) ctx->kind;
    rec->streamed = ctx->body.stream;
    rec->affinity = (uint8_t) ctx->affinity;
    rec->soonest = ctx->decision.soonest;
    rec->chosen = -1;
    rec->queued_ms = ctx->waited_ms;
    rec->queued = (uint32_t) ctx->queued;
    rec->woken_ms = ctx->queued ? ctx->woken_ms : -1;
    rec->priority = (uint8_t) ctx->priority;
    rec->pid = ngx_pid;

    if (ctx->answered) {
        rec->chosen = (int32_t) ctx->answered->slot;
    }

    rec->nattempts = (uint8_t) ngx_min(ctx->attempts,
                                       NGX_HTTP_TB_INSPECT_ATTEMPTS);

    for (i = 0; i < rec->nattempts; i++) {
        rec->attempts[i].slot = (uint32_t) a[ctx->tries[i].account].slot;
        rec->attempts[i].status = (int16_t) ctx->tries[i].status;
        rec->attempts[i].kind = (uint8_t) ctx->tries[i].kind;
        rec->attempts[i].latency_ms = (uint32_t) ctx->tries[i].latency_ms;
    }

    /*
     * The last decision's candidates: the chosen one first, then the
     * eligible ones by score, then the filtered ones in pool order, as
     * many as a record holds; every verdict is counted.
     */

    rec->candidates = (uint32_t) n;

    if (ctx->decisions == 0) {
        goto done;
    }

    for (i = 0; i < n; i++) {
        rec->verdicts[ctx->outs[i].verdict]++;
    }

    k = 0;

    for (picked = 0; picked < 3 && k < NGX_HTTP_TB_INSPECT_CANDS; picked++) {

        for (i = 0; i < n && k < NGX_HTTP_TB_INSPECT_CANDS; i++) {
            o = &ctx->outs[i];

            if ((picked == 0 && o->verdict != TB_V_CHOSEN)
                || (picked == 1 && o->verdict != TB_V_ELIGIBLE)
                || (picked == 2 && (o->verdict == TB_V_CHOSEN
                                    || o->verdict == TB_V_ELIGIBLE)))
            {
                continue;
            }

            ic = &rec->cands[k++];
            ic->slot = (uint32_t) a[i].slot;
            ic->verdict = (uint8_t) o->verdict;
            ic->available_at = o->available_at;
            ic->score = (float) o->score;
            ic->headroom = (float) o->headroom;

            for (len = 0; len < TB_TERMS; len++) {
                ic->terms[len] = (float) o->terms[len];
            }
        }
    }

    rec->ncands = (uint8_t) k;

done:

    ngx_http_tokenbiryani_inspect_add(tmcf, rec);
}


/* the candidate index of an account slot, or -1 */

ngx_int_t
ngx_http_tokenbiryani_pool_slot(ngx_http_request_t *r, ngx_uint_t slot)
{
    ngx_uint_t                          i;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    a = tmcf->accounts.elts;

    for (i = 0; i < tmcf->accounts.nelts; i++) {
        if (a[i].slot == slot) {
            return (ngx_int_t) i;
        }
    }

    return -1;
}


ngx_int_t
ngx_http_tokenbiryani_init_worker(ngx_cycle_t *cycle)
{
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    ngx_queue_init(&ngx_http_tokenbiryani_held);

    tmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_tokenbiryani_module);

    if (tmcf == NULL || !tmcf->used) {
        return NGX_OK;
    }

    if (ngx_http_tokenbiryani_dispatch_init_worker(cycle, tmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_tokenbiryani_timer.handler = ngx_http_tokenbiryani_lease_timer;
    ngx_http_tokenbiryani_timer.data = tmcf;
    ngx_http_tokenbiryani_timer.log = cycle->log;

    /* it must not keep a worker that is shutting down alive */
    ngx_http_tokenbiryani_timer.cancelable = 1;

    /* renewed four times per timeout: a live worker never loses one */
    ngx_add_timer(&ngx_http_tokenbiryani_timer, tmcf->lease_timeout / 4);

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_lease_timer(ngx_event_t *ev)
{
    int64_t                             now;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = ev->data;
    now = ngx_http_tokenbiryani_now_ms();

    ngx_http_tokenbiryani_lease_renew(tmcf, &ngx_http_tokenbiryani_held, now);
    (void) ngx_http_tokenbiryani_lease_reclaim(tmcf, now);

    if (!ngx_exiting) {
        ngx_add_timer(ev, tmcf->lease_timeout / 4);
    }
}
