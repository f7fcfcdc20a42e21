/*
 * tokenbiryani: a request's record in the inspector, written once when the
 * request ends: ids, counts, the attempts and the last decision's
 * candidates - never prompt text, never a credential.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_record.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_settings.h"


/*
 * A model's price, looked up once per model and worker: a direct-mapped
 * cache by the model's hash (the request already has it), misses too.
 */

typedef struct {
    uint64_t                 hash;
    const tb_model_price_t  *price;
    ngx_uint_t               used;
} ngx_http_tokenbiryani_price_slot_t;


const tb_model_price_t *
ngx_http_tokenbiryani_price(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    ngx_http_tokenbiryani_price_slot_t  *e;

    static void                               *owner;
    static ngx_http_tokenbiryani_price_slot_t  cache[64];

    /* another configuration in this process (master_process off): its
     * prices are not the cached ones */
    if (owner != tmcf) {
        ngx_memzero(cache, sizeof(cache));
        owner = tmcf;
    }

    e = &cache[ctx->route.model_hash % 64];

    if (!e->used || e->hash != ctx->route.model_hash) {
        e->price = tb_price_find(&tmcf->prices, tmcf->builtin,
                                 (char *) ctx->body.model,
                                 ctx->body.model_len);
        e->hash = ctx->route.model_hash;
        e->used = 1;
    }

    return e->price;
}


int64_t
ngx_http_tokenbiryani_settle_cost(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    tb_cost_usage_t          cu;
    const tb_model_price_t  *price;

    if (ctx->costed) {
        return ctx->cost;
    }

    ctx->costed = 1;
    ctx->cost = -1;
    ctx->prices_as_of = -1;

    if (ctx->kind != NGX_HTTP_TB_MESSAGES || ctx->usage.input_tokens < 0) {
        return -1;
    }

    price = ngx_http_tokenbiryani_price(tmcf, ctx);
    if (price == NULL) {
        return -1;
    }

    cu.input = ctx->usage.input_tokens;
    cu.output = ctx->usage.output_tokens;
    cu.cache_read = ctx->usage.cache_read_input_tokens;
    cu.cache_write = ctx->usage.cache_creation_input_tokens;
    cu.cache_write_1h = ctx->usage.cache_creation_1h_input_tokens;

    ctx->cost = tb_cost(price, &cu, 0);
    ctx->prices_as_of = tb_price_date(tmcf->builtin, price);

    return ctx->cost;
}


/* a charge's usage, cost and model as a record's */

static void
ngx_http_tokenbiryani_record_charge(ngx_http_tokenbiryani_record_t *rec,
    const ngx_http_tokenbiryani_results_t *rd)
{
    tb_usage_init(&rec->usage);
    rec->usage.input_tokens = rd->charge.tokens[0];
    rec->usage.output_tokens = rd->charge.tokens[1];
    rec->usage.cache_read_input_tokens = rd->charge.tokens[2];
    rec->usage.cache_creation_input_tokens = rd->charge.tokens[3];
    rec->cost = rd->charge.cost;
    rec->prices_as_of = -1;
    ngx_cpystrn((u_char *) rec->model, (u_char *) rd->model,
                sizeof(rec->model));
}


void
ngx_http_tokenbiryani_record(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx)
{
    size_t                               len;
    ngx_uint_t                           i, k, n, picked;
    int64_t                              now, since;
    const char                          *name;
    const tb_strategy_t                 *st;
    tb_cand_out_t                       *o;
    ngx_http_tokenbiryani_account_t     *a;
    ngx_http_tokenbiryani_record_t      *rec;
    ngx_http_tokenbiryani_main_conf_t   *tmcf;
    ngx_http_tokenbiryani_inspect_cand_t *ic;

    /* the request's pool is being destroyed: no allocation from it */
    static ngx_http_tokenbiryani_record_t  record;

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    if (tmcf->tbcf->observability_event_buffer == 0) {
        return;
    }

    rec = &record;
    /* the candidates are written below, as many as there are */
    ngx_memzero(rec, offsetof(ngx_http_tokenbiryani_record_t, cands));

    now = ngx_http_tokenbiryani_now_ms();
    a = tmcf->accounts.elts;
    n = ctx->naccounts;

    ngx_memcpy(rec->id, ctx->request_id, NGX_HTTP_TB_REQUEST_ID_LEN);

    name = ctx->key ? ctx->key->name
                    : (ctx->err.refused_key ? ctx->err.refused_key : "");
    len = ngx_min(ngx_strlen(name), TB_ID_MAX);
    ngx_memcpy(rec->key, name, len);

    ngx_memcpy(rec->model, ctx->body.model, ctx->body.model_len);

    if (ctx->rare && ctx->rare->model_requested) {
        /* the client's model, after the one sent, when both fit */
        rec->edits |= NGX_HTTP_TB_REC_DOWNSHIFT;
        len = ngx_strlen(ctx->rare->model_requested);

        if (ctx->body.model_len + 1 + len < sizeof(rec->model)) {
            ngx_memcpy(rec->model + ctx->body.model_len + 1,
                       ctx->rare->model_requested, len);
        }
    }

    st = ngx_http_tokenbiryani_strategy(tmcf);
    len = ngx_min(ngx_strlen(st->name), sizeof(rec->strategy) - 1);
    ngx_memcpy(rec->strategy, st->name, len);

    rec->session = ctx->route.session;
    rec->session_source = (uint8_t) ctx->route.session_source;
    rec->started_ms = ctx->started_ms;
    rec->decided_ms = ctx->route.decided_ms;
    rec->latency_ms = now - ctx->started_ms;
    rec->ttft_ms = ctx->ttft_ms;
    rec->usage = ctx->usage;

    /* its cost, from its usage: unknown (-1) for a model with no price */

    rec->cost = ngx_http_tokenbiryani_settle_cost(tmcf, ctx);
    rec->prices_as_of = ctx->prices_as_of;

    if (ctx->kind == NGX_HTTP_TB_BATCHES) {
        /* a batch's results it read: what they charged */
        ngx_http_tokenbiryani_record_charge(rec,
            &((ngx_http_tokenbiryani_objreq_t *) ctx->object)->results);
    }

    rec->need = ctx->route.need;
    rec->status = (int16_t) r->headers_out.status;
    rec->kind = (uint8_t) ctx->kind;
    rec->streamed = ctx->body.stream;
    rec->affinity = (uint8_t) ctx->route.affinity;
    rec->soonest = ctx->route.decision.soonest;
    rec->chosen = -1;
    rec->queued_ms = ctx->wait.waited_ms;
    rec->paced_ds = (uint16_t) ngx_min((ctx->wait.paced_ms + 50) / 100, 65535);

    /* what the prompt cache could hold of it: a breakpoint asked for, and
     * its stable prefix */
    rec->breakpoint = ctx->body.breakpoint || ctx->bp_added;

    if (ctx->bp_added) {
        rec->edits |= NGX_HTTP_TB_REC_BREAKPOINT;
    }

    rec->prefix_64b = (uint16_t) ngx_min((ctx->body.system.len
                                          + ctx->body.tools.len + 63) / 64,
                                         65535);
    rec->queued = (uint32_t) ctx->wait.queued;
    rec->woken_ms = ctx->wait.queued ? ctx->wait.woken_ms : -1;
    rec->priority = (uint8_t) ctx->wait.priority;
    rec->pid = ngx_pid;

    if (ctx->answered) {
        rec->chosen = (int32_t) ctx->answered->slot;
    }

    rec->nattempts = (uint8_t) ngx_min(ctx->attempts,
                                       NGX_HTTP_TB_INSPECT_ATTEMPTS);

    for (i = 0; i < rec->nattempts; i++) {
        rec->attempts[i].slot = (uint32_t) a[ctx->log[i].account].slot;
        rec->attempts[i].status = (int16_t) ctx->log[i].status;
        rec->attempts[i].kind = (uint8_t) ctx->log[i].kind;
        rec->attempts[i].latency_ms = (uint32_t) ctx->log[i].latency_ms;
        rec->attempts[i].eligible = (uint32_t) ctx->log[i].eligible;
        rec->attempts[i].score = (float) ctx->log[i].score;

        /* the time between the one before's end and this one's start:
         * its backoff, a wait in the queue, the decision */

        if (i) {
            since = ctx->log[i].start_ms - ctx->log[i - 1].start_ms
                    - ctx->log[i - 1].latency_ms;
            rec->attempts[i].waited_ms = (uint32_t) ngx_max(since, 0);
        }
    }

    /*
     * The last decision's candidates: the chosen one first, then the
     * eligible ones by score, then the filtered ones in pool order, as
     * many as a record holds; every verdict is counted.
     */

    rec->candidates = (uint32_t) n;

    if (ctx->route.decisions == 0) {
        goto done;
    }

    for (i = 0; i < n; i++) {
        rec->verdicts[ctx->route.outs[i].verdict]++;
    }

    k = 0;

    for (picked = 0; picked < 3 && k < NGX_HTTP_TB_INSPECT_CANDS; picked++) {

        for (i = 0; i < n && k < NGX_HTTP_TB_INSPECT_CANDS; i++) {
            o = &ctx->route.outs[i];

            if ((picked == 0 && o->verdict != TB_V_CHOSEN)
                || (picked == 1 && o->verdict != TB_V_ELIGIBLE)
                || (picked == 2 && (o->verdict == TB_V_CHOSEN
                                    || o->verdict == TB_V_ELIGIBLE)))
            {
                continue;
            }

            ic = &rec->cands[k++];
            ngx_memzero(ic, sizeof(ngx_http_tokenbiryani_inspect_cand_t));

            ic->slot = (uint32_t) a[i].slot;
            ic->verdict = (uint8_t) o->verdict;
            ic->available_at = o->available_at;
            ic->headroom = (float) o->headroom;

            /* only a candidate that was scored has a score and terms: a
             * filtered one's are not written (the store keeps the record
             * as it is, so nothing undefined may be in it) */

            if (picked < 2) {
                ic->score = (float) o->score;

                for (len = 0; len < TB_TERMS; len++) {
                    ic->terms[len] = (float) o->terms[len];
                }
            }
        }
    }

    rec->ncands = (uint8_t) k;

done:

    ngx_http_tokenbiryani_inspect_add(&tmcf->zone, rec);
}


void
ngx_http_tokenbiryani_record_own(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *rid, ngx_uint_t kind, const u_char *key, ngx_int_t slot,
    const ngx_http_tokenbiryani_results_t *rd, int64_t started_ms)
{
    ngx_http_tokenbiryani_record_t  *rec;

    static ngx_http_tokenbiryani_record_t  record;

    if (tmcf->tbcf->observability_event_buffer == 0) {
        return;
    }

    rec = &record;
    ngx_memzero(rec, sizeof(ngx_http_tokenbiryani_record_t));

    ngx_memcpy(rec->id, rid, NGX_HTTP_TB_REQUEST_ID_LEN);
    ngx_cpystrn((u_char *) rec->key, (u_char *) key, sizeof(rec->key));
    ngx_http_tokenbiryani_record_charge(rec, rd);

    rec->started_ms = started_ms;
    rec->decided_ms = started_ms;
    rec->latency_ms = rd->charge.at_ms - started_ms;
    rec->ttft_ms = -1;
    rec->soonest = -1;
    rec->woken_ms = -1;
    rec->status = NGX_HTTP_OK;
    rec->kind = (uint8_t) kind;
    rec->chosen = (int32_t) slot;
    rec->pid = ngx_pid;

    ngx_http_tokenbiryani_inspect_add(&tmcf->zone, rec);
}
