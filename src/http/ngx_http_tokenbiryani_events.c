/*
 * tokenbiryani: the events every request leaves: one admission event per
 * decision that leases (or queues, or refuses) and one settlement event
 * per attempt.  Each goes into the zone's events ring, which
 * GET /admin/events serves whatever the log level, and, at info level,
 * into the error log as one line.  Counts, codes and ids only: never
 * prompt text, never a credential.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_events.h"


static ngx_str_t  ngx_http_tb_none = ngx_string("-");

static const char  *ngx_http_tb_decisions[NGX_HTTP_TB_NDECISIONS] = {
    "admit", "lost", "queue", "queue", "refuse", "queue"
};

static const char  *ngx_http_tb_nexts[NGX_HTTP_TB_NNEXTS] = {
    "done", "not retried", "backoff", "retry", "queue", "give up"
};

static const char  *ngx_http_tb_stages[NGX_HTTP_TB_NSTAGES] = {
    "created", "changed", "charged", "deleted", "forgotten"
};

static const char  *ngx_http_tb_refusals[NGX_HTTP_TB_NREFUSED] = {
    "invalid key", "key expired", "key revoked", "model outside the key's "
    "scope"
};

/* why a decision went as it did; an admission's reason is formatted */
static const char  *ngx_http_tb_reasons[NGX_HTTP_TB_NDECISIONS] = {
    NULL,
    "another worker took the capacity",
    "earlier waiters go first",
    "saturated",
    "no account can serve",
    "the key holds its max_inflight"
};


/* the object's part of an event is no larger than the request's: the
 * ring's and the stored history's event keeps its size */
typedef char ngx_http_tokenbiryani_event_fits_t[
    (offsetof(ngx_http_tokenbiryani_event_t, obj.id)
     + NGX_HTTP_TB_EVENT_ID_MAX + 1
     <= offsetof(ngx_http_tokenbiryani_event_t, key) + TB_ID_MAX + 1)
    ? 1 : -1];


/*
 * An event of type begun: in the ring (*seq set: published once filled),
 * or, with no room there and local given, in local while the log wants
 * its fields (*seq 0); NULL: neither.  request_id: NULL for none; its
 * at_ms is now.
 */
static ngx_http_tokenbiryani_event_t *
ngx_http_tokenbiryani_event_begin(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log, const u_char *request_id, ngx_uint_t type,
    ngx_http_tokenbiryani_event_t *local, uint64_t *seq)
{
    ngx_http_tokenbiryani_event_t  *ev;

    ev = ngx_http_tokenbiryani_events_reserve(&tmcf->zone, seq);
    if (ev == NULL) {
        if (local == NULL || log->log_level < NGX_LOG_INFO) {
            return NULL;
        }

        ev = local;
        *seq = 0;
    }

    ngx_memzero(ev, sizeof(ngx_http_tokenbiryani_event_t));

    ev->at_ms = ngx_http_tokenbiryani_now_ms();

    if (request_id) {
        ngx_memcpy(ev->request_id, request_id, NGX_HTTP_TB_REQUEST_ID_LEN);
    }

    ev->pid = ngx_pid;
    ev->type = (uint8_t) type;

    return ev;
}


/* a request's event, begun */
#define ngx_http_tokenbiryani_event_request(r, ctx, type, local, seq)         \
    ngx_http_tokenbiryani_event_begin(                                        \
        ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module),       \
        (r)->connection->log, (ctx)->request_id, type, local, seq)


void
ngx_http_tokenbiryani_event_admission(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    const int64_t *remaining, ngx_uint_t what, ngx_uint_t probe)
{
    u_char                         *p;
    int64_t                         now;
    uint64_t                        seq;
    ngx_uint_t                      w;
    ngx_http_tokenbiryani_event_t  *ev, local;
    u_char                          rem[96], reason[128];

    ev = ngx_http_tokenbiryani_event_request(r, ctx,
                                             NGX_HTTP_TB_EVENT_ADMISSION,
                                             &local, &seq);
    if (ev == NULL) {
        return;
    }

    now = ev->at_ms;

    ev->slot = a ? (int32_t) a->slot : -1;
    ev->what = (uint8_t) what;
    ev->attempt = (uint8_t) ngx_min(ctx->attempts + 1, 255);
    ev->affinity = (uint8_t) ctx->route.decision.affinity;
    ev->probe = (uint8_t) probe;
    ev->eligible = (uint16_t) ctx->route.decision.eligible;
    ev->score = (a && ctx->route.decision.chosen >= 0)
                ? (float) ctx->route.outs[ctx->route.decision.chosen].score : 0;

    for (w = 0; w < TB_NWINDOWS; w++) {
        ev->need[w] = ctx->route.need.n[w];
        ev->remaining[w] = remaining ? remaining[w] : TB_UNKNOWN;
    }

    ev->soonest_ms = ctx->route.decision.soonest
                     ? ctx->route.decision.soonest - now : 0;

    if (r->connection->log->log_level >= NGX_LOG_INFO) {
        p = rem;

        for (w = 0; w < TB_NWINDOWS; w++) {
            if (!remaining || remaining[w] == TB_UNKNOWN) {
                p = ngx_snprintf(p, rem + sizeof(rem) - p, "%s?",
                                 w ? "/" : "");
            } else {
                p = ngx_snprintf(p, rem + sizeof(rem) - p, "%s%L",
                                 w ? "/" : "", remaining[w]);
            }
        }

        if (!remaining) {
            p = ngx_cpymem(rem, "-", 1);
        }

        (void) ngx_http_tokenbiryani_event_reason(ev, reason, sizeof(reason));

        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "tokenbiryani: event=admission request=%*s attempt=%ui "
                      "account=%V need=%L/%L/%L remaining_before=%*s "
                      "decision=%s reason=\"%s\" soonest_ms=%L",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      ctx->attempts + 1, a ? &a->id : &ngx_http_tb_none,
                      ev->need[TB_WIN_REQUESTS], ev->need[TB_WIN_INPUT],
                      ev->need[TB_WIN_OUTPUT], (size_t) (p - rem), rem,
                      ngx_http_tb_decisions[what], reason, ev->soonest_ms);
    }

    if (seq) {
        ngx_http_tokenbiryani_events_publish(ev, seq);
    }
}


void
ngx_http_tokenbiryani_event_settlement(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_account_t *a,
    ngx_uint_t next)
{
    uint64_t                        seq;
    const tb_rule_t                *rule;
    ngx_http_tokenbiryani_event_t  *ev, local;

    if (a == NULL) {
        return;
    }

    ev = ngx_http_tokenbiryani_event_request(r, ctx,
                                             NGX_HTTP_TB_EVENT_SETTLEMENT,
                                             &local, &seq);
    if (ev == NULL) {
        return;
    }

    rule = ctx->resp.classified ? ctx->outcome.rule : NULL;

    ev->slot = (int32_t) a->slot;
    ev->status = (uint16_t) ctx->resp.status.code;
    ev->what = (uint8_t) next;
    ev->kind = (uint8_t) (rule ? ctx->outcome.kind : TB_NKINDS);
    ev->attempt = (uint8_t) ngx_min(ctx->attempts, 255);
    ev->usage[0] = ctx->usage.input_tokens;
    ev->usage[1] = ctx->usage.output_tokens;
    ev->usage[2] = ctx->usage.cache_read_input_tokens;
    ev->usage[3] = ctx->usage.cache_creation_input_tokens;
    ev->retry_after_ms = ctx->resp.obs.retry_after_ms;
    ev->latency_ms = ev->at_ms - ctx->attempt_ms;

    if (r->connection->log->log_level >= NGX_LOG_INFO) {
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "tokenbiryani: event=settlement request=%*s attempt=%ui "
                      "account=%V status=%ui class=%s account_action=%s "
                      "breaker=%s usage=%L/%L/%L/%L retry_after_ms=%L "
                      "latency_ms=%L next=\"%s\"",
                      (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                      ctx->attempts, &a->id, ctx->resp.status.code,
                      rule ? rule->name : "cancelled",
                      rule ? tb_account_action_name(rule->account) : "none",
                      rule ? tb_outcome_name(rule->breaker) : "neutral",
                      ev->usage[0], ev->usage[1], ev->usage[2], ev->usage[3],
                      ev->retry_after_ms, ev->latency_ms,
                      ngx_http_tb_nexts[next]);
    }

    if (seq) {
        ngx_http_tokenbiryani_events_publish(ev, seq);
    }
}


void
ngx_http_tokenbiryani_event_refusal(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_uint_t status)
{
    size_t                          len;
    uint64_t                        seq;
    const char                     *name;
    ngx_http_tokenbiryani_event_t  *ev;

    name = ctx->key ? ctx->key->name
                    : (ctx->err.refused_key ? ctx->err.refused_key : "");

    /* its name, never what was presented */

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "tokenbiryani: event=refusal request=%*s status=%ui "
                  "key=\"%s\" reason=\"%s\"",
                  (size_t) NGX_HTTP_TB_REQUEST_ID_LEN, ctx->request_id,
                  status, name, ngx_http_tb_refusals[ctx->err.refused]);

    ev = ngx_http_tokenbiryani_event_request(r, ctx,
                                             NGX_HTTP_TB_EVENT_REFUSAL,
                                             NULL, &seq);
    if (ev == NULL) {
        return;
    }

    ev->slot = -1;
    ev->status = (uint16_t) status;
    ev->what = (uint8_t) ctx->err.refused;

    len = ngx_min(ngx_strlen(name), TB_ID_MAX);
    ngx_memcpy(ev->key, name, len);
    ev->key[len] = '\0';

    ngx_http_tokenbiryani_events_publish(ev, seq);
}


void
ngx_http_tokenbiryani_event_object(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_log_t *log, const u_char *request_id,
    const ngx_http_tokenbiryani_object_view_t *v, ngx_uint_t stage)
{
    size_t                          len;
    uint64_t                        seq;
    const char                     *account;
    ngx_http_tokenbiryani_event_t  *ev, local;

    ev = ngx_http_tokenbiryani_event_begin(tmcf, log, request_id,
                                           NGX_HTTP_TB_EVENT_OBJECT,
                                           &local, &seq);
    if (ev == NULL) {
        return;
    }

    len = ngx_min(v->id_len, NGX_HTTP_TB_EVENT_ID_MAX);

    ev->slot = (int32_t) v->slot;
    ev->status = (uint16_t) v->status;
    ev->kind = (uint8_t) v->kind;
    ev->what = (uint8_t) stage;
    ngx_memcpy(ev->obj.counts, v->counts, sizeof(ev->obj.counts));
    ev->obj.reserved = (v->held && !v->settled) ? v->reserved : 0;
    ev->obj.charged = v->charged;
    ngx_memcpy(ev->obj.id, v->id, len);
    ev->obj.id[len] = '\0';

    if (log->log_level >= NGX_LOG_INFO) {
        account = ngx_http_tokenbiryani_zone_slot_id(&tmcf->zone, ev->slot);

        ngx_log_error(NGX_LOG_INFO, log, 0,
                      "tokenbiryani: event=%s request=%*s id=%s stage=%s "
                      "account=%s status=%s counts=%L/%L/%L/%L/%L "
                      "held=%L charged=%L",
                      ngx_http_tokenbiryani_event_type_name(ev),
                      (size_t) (request_id ? NGX_HTTP_TB_REQUEST_ID_LEN : 1),
                      request_id ? request_id : (u_char *) "-", ev->obj.id,
                      ngx_http_tb_stages[stage],
                      account ? account : "-",
                      tb_batch_status_name(ev->status),
                      ev->obj.counts[0], ev->obj.counts[1], ev->obj.counts[2],
                      ev->obj.counts[3], ev->obj.counts[4], ev->obj.reserved,
                      ev->obj.charged);
    }

    if (seq) {
        ngx_http_tokenbiryani_events_publish(ev, seq);
    }
}


const char *
ngx_http_tokenbiryani_event_type_name(const ngx_http_tokenbiryani_event_t *ev)
{
    switch (ev->type) {

    case NGX_HTTP_TB_EVENT_ADMISSION:
        return "admission";

    case NGX_HTTP_TB_EVENT_REFUSAL:
        return "refusal";

    case NGX_HTTP_TB_EVENT_OBJECT:
        return ev->kind == NGX_HTTP_TB_OBJECT_FILE ? "file" : "batch";

    default:
        return "settlement";
    }
}


const char *
ngx_http_tokenbiryani_event_what_name(const ngx_http_tokenbiryani_event_t *ev)
{
    if (ev->type == NGX_HTTP_TB_EVENT_OBJECT) {
        return ev->what < NGX_HTTP_TB_NSTAGES ? ngx_http_tb_stages[ev->what]
                                              : "unknown";
    }

    if (ev->type == NGX_HTTP_TB_EVENT_REFUSAL) {
        return ev->what < NGX_HTTP_TB_NREFUSED
               ? ngx_http_tb_refusals[ev->what] : "unknown";
    }

    if (ev->type == NGX_HTTP_TB_EVENT_ADMISSION) {
        return ev->what < NGX_HTTP_TB_NDECISIONS
               ? ngx_http_tb_decisions[ev->what] : "unknown";
    }

    return ev->what < NGX_HTTP_TB_NNEXTS ? ngx_http_tb_nexts[ev->what]
                                         : "unknown";
}


u_char *
ngx_http_tokenbiryani_event_reason(const ngx_http_tokenbiryani_event_t *ev,
    u_char *buf, size_t len)
{
    u_char  *p;

    if (ev->what == NGX_HTTP_TB_ADMIT) {
        p = ngx_snprintf(buf, len - 1, "score %.3f, %ui eligible, "
                         "affinity %s%s", (double) ev->score,
                         (ngx_uint_t) ev->eligible,
                         tb_affinity_name((tb_affinity_e) ev->affinity),
                         ev->probe ? ", half-open probe" : "");

    } else {
        p = ngx_snprintf(buf, len - 1, "%s",
                         ngx_http_tb_reasons[ev->what < NGX_HTTP_TB_NDECISIONS
                                             ? ev->what
                                             : NGX_HTTP_TB_REFUSE]);
    }

    *p = '\0';

    return p;
}
