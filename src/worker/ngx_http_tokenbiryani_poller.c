/*
 * The batches the gateway polls for itself (see
 * ngx_http_tokenbiryani_poller.h): one batch at a time, a retrieve, then
 * its results when it has ended, each a call of the worker's own
 * (ngx_http_tokenbiryani_call.c) in a pool of its own.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_call.h"
#include "ngx_http_tokenbiryani_poller.h"
#include "ngx_http_tokenbiryani_batches.h"
#include "ngx_http_tokenbiryani_record.h"
#include "ngx_http_tokenbiryani_request.h"
#include "ngx_http_tokenbiryani_events.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "tb_batch.h"


/* a batch is asked again after ten ticks at the soonest */
#define NGX_HTTP_TB_POLL_AGAIN         10

#define NGX_HTTP_TB_POLL_TIMEOUT       60000     /* ms, a call */


typedef struct {
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_event_t                           timer;
    ngx_msec_t                            interval;

    /* the poll under way: its pool (NULL: none), call and batch */
    ngx_pool_t                           *pool;
    ngx_http_tokenbiryani_call_target_t   target;
    ngx_http_tokenbiryani_object_view_t   v;
    u_char                                account[TB_ID_MAX + 1];
    ngx_uint_t                            expected;  /* result lines */
    int64_t                               started;   /* its results' read */
    ngx_http_tokenbiryani_results_t       results;
} ngx_http_tokenbiryani_poller_t;


static void ngx_http_tokenbiryani_poller_tick(ngx_event_t *ev);
static void ngx_http_tokenbiryani_poller_next(
    ngx_http_tokenbiryani_poller_t *pl);
static ngx_int_t ngx_http_tokenbiryani_poller_call(
    ngx_http_tokenbiryani_poller_t *pl, const char *what,
    ngx_http_tokenbiryani_call_done_pt done);
static void ngx_http_tokenbiryani_poller_retrieved(
    ngx_http_tokenbiryani_call_result_t *res, void *data);
static void ngx_http_tokenbiryani_poller_claimed(void *data, ngx_uint_t won);
static ngx_int_t ngx_http_tokenbiryani_poller_sink(void *data, u_char *p,
    size_t len);
static void ngx_http_tokenbiryani_poller_read(
    ngx_http_tokenbiryani_call_result_t *res, void *data);
static void ngx_http_tokenbiryani_poller_end(
    ngx_http_tokenbiryani_poller_t *pl,
    ngx_http_tokenbiryani_call_result_t *res, const char *doing);


static ngx_http_tokenbiryani_poller_t  ngx_http_tokenbiryani_poller;


ngx_int_t
ngx_http_tokenbiryani_poller_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_http_tokenbiryani_poller_t  *pl;

    if (!tmcf->tbcf->batch_api && !tmcf->tbcf->batch_enabled) {
        /* no batch is made: neither the API nor the spill lane */
        return NGX_OK;
    }

    pl = &ngx_http_tokenbiryani_poller;

    ngx_memzero(pl, sizeof(ngx_http_tokenbiryani_poller_t));

    pl->tmcf = tmcf;
    pl->interval = (ngx_msec_t) (tmcf->tbcf->batch_poll_interval_seconds
                                 * 1000);
    pl->interval = ngx_max(pl->interval, 1);

    ngx_http_tokenbiryani_timer_init(&pl->timer,
                                     ngx_http_tokenbiryani_poller_tick, pl,
                                     cycle->log);

    ngx_add_timer(&pl->timer, pl->interval);

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_poller_tick(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_poller_t *pl = ev->data;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    ngx_add_timer(&pl->timer, pl->interval);

    /* one poll at a time, by one worker */

    if (pl->pool == NULL
        && ngx_http_tokenbiryani_object_poller(&pl->tmcf->zone, ngx_pid))
    {
        ngx_http_tokenbiryani_poller_next(pl);
    }
}


/* the batch that is due, if one is, asked of its account */

static void
ngx_http_tokenbiryani_poller_next(ngx_http_tokenbiryani_poller_t *pl)
{
    int64_t                             now;
    ngx_http_tokenbiryani_account_t    *a;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = pl->tmcf;
    now = ngx_http_tokenbiryani_now_ms();

    if (ngx_http_tokenbiryani_object_due(&tmcf->zone,
            now - (int64_t) (pl->interval * NGX_HTTP_TB_POLL_AGAIN), now,
            &pl->v, pl->account)
        != NGX_OK)
    {
        return;
    }

    ngx_http_tokenbiryani_accounts_sync(tmcf);

    a = ngx_http_tokenbiryani_account_find(tmcf, pl->account,
                                           ngx_strlen(pl->account));

    if (a == NULL || a->platform || a->naddrs == 0) {
        /* not an account this worker can ask now: asked again later */
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "tokenbiryani poll: batch \"%*s\" not asked now",
                       pl->v.id_len, pl->v.id);
        return;
    }

    ngx_http_tokenbiryani_call_target(&pl->target, a);
    pl->target.background = 1;
    ngx_str_set(&pl->target.method, "GET");

    pl->pool = ngx_create_pool(4096, ngx_cycle->log);
    if (pl->pool == NULL) {
        return;
    }

    if (ngx_http_tokenbiryani_poller_call(pl, "batch poll",
            ngx_http_tokenbiryani_poller_retrieved)
        != NGX_OK)
    {
        ngx_destroy_pool(pl->pool);
        pl->pool = NULL;
    }
}


/* GET /v1/messages/batches/{id}, or .../results for a sink */

static ngx_int_t
ngx_http_tokenbiryani_poller_call(ngx_http_tokenbiryani_poller_t *pl,
    const char *what, ngx_http_tokenbiryani_call_done_pt done)
{
    pl->target.what = what;

    return ngx_http_tokenbiryani_call_batch(pl->pool, ngx_cycle->log,
                                            pl->tmcf, &pl->target, "GET",
                                            pl->v.id, pl->v.id_len,
                                            pl->target.sink ? "/results" : "",
                                            NGX_HTTP_TB_POLL_TIMEOUT, done,
                                            pl)
           ? NGX_OK : NGX_ERROR;
}


static void
ngx_http_tokenbiryani_poller_retrieved(
    ngx_http_tokenbiryani_call_result_t *res, void *data)
{
    ngx_http_tokenbiryani_poller_t *pl = data;

    int64_t                             now;
    ngx_uint_t                          i;
    tb_batch_obj_t                      b;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;

    tmcf = pl->tmcf;
    now = ngx_http_tokenbiryani_now_ms();

    if (res->status == NGX_HTTP_NOT_FOUND) {
        /* gone from its account (deleted there, or past its keeping):
         * what it held is what it is taken to have cost */
        if (ngx_http_tokenbiryani_object_remove(&tmcf->zone,
                                                NGX_HTTP_TB_OBJECT_BATCH,
                                                pl->v.id, pl->v.id_len, now,
                                                &pl->v)
            == NGX_OK)
        {
            ngx_http_tokenbiryani_object_changed(tmcf, ngx_cycle->log, NULL,
                                                 NGX_HTTP_TB_OBJECT_BATCH,
                                                 pl->v.id, pl->v.id_len,
                                                 NGX_HTTP_TB_STAGE_FORGOTTEN,
                                                 &pl->v);
        }

        ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                      "tokenbiryani: batch \"%*s\" is gone from account "
                      "\"%s\": it is forgotten, charged what it held",
                      pl->v.id_len, pl->v.id, pl->account);

        ngx_http_tokenbiryani_poller_end(pl, NULL, NULL);
        return;
    }

    if (res->status != NGX_HTTP_OK
        || ngx_http_tokenbiryani_object_said(tmcf, ngx_cycle->log, NULL,
                                             pl->v.id, pl->v.id_len,
                                             &res->body, &b)
           != NGX_OK)
    {
        ngx_http_tokenbiryani_poller_end(pl, res, "reading");
        return;
    }

    if (b.status != TB_BATCH_ENDED) {
        ngx_http_tokenbiryani_poller_end(pl, NULL, NULL);
        return;
    }

    /* ended: its results, a line a request, read as they come */

    pl->expected = 0;

    for (i = TB_BATCH_SUCCEEDED; i < TB_BATCH_NCOUNTS; i++) {
        pl->expected += (b.counts[i] > 0) ? (ngx_uint_t) b.counts[i] : 0;
    }

    /* gateways sharing the store: the one that claims it charges it */

    if (ngx_http_tokenbiryani_store_object_claim(tmcf, pl->v.id,
            pl->v.id_len, ngx_http_tokenbiryani_poller_claimed, pl)
        == NGX_DECLINED)
    {
        ngx_http_tokenbiryani_poller_claimed(pl, 1);
    }
}


static void
ngx_http_tokenbiryani_poller_claimed(void *data, ngx_uint_t won)
{
    ngx_http_tokenbiryani_poller_t *pl = data;

    if (!won) {
        /* another gateway charges it; its hold here goes when it is told
         * the batch was charged (or is asked again, if that one fails) */
        ngx_http_tokenbiryani_poller_end(pl, NULL, NULL);
        return;
    }

    ngx_memzero(&pl->results, sizeof(ngx_http_tokenbiryani_results_t));
    pl->started = ngx_http_tokenbiryani_now_ms();
    pl->target.sink = ngx_http_tokenbiryani_poller_sink;
    pl->target.sink_data = pl;

    if (ngx_http_tokenbiryani_poller_call(pl, "batch results",
                                          ngx_http_tokenbiryani_poller_read)
        != NGX_OK)
    {
        ngx_http_tokenbiryani_poller_end(pl, NULL, NULL);
    }
}


static ngx_int_t
ngx_http_tokenbiryani_poller_sink(void *data, u_char *p, size_t len)
{
    ngx_http_tokenbiryani_poller_t *pl = data;

    ngx_http_tokenbiryani_results_read(pl->tmcf, &pl->results, pl->pool, p,
                                       p + len);

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_poller_read(ngx_http_tokenbiryani_call_result_t *res,
    void *data)
{
    ngx_http_tokenbiryani_poller_t *pl = data;

    ngx_http_tokenbiryani_charge_t     *charge;
    ngx_http_tokenbiryani_results_t    *rd;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                usd[32];
    u_char                              rid[NGX_HTTP_TB_REQUEST_ID_LEN];

    tmcf = pl->tmcf;
    rd = &pl->results;
    charge = &rd->charge;

    ngx_http_tokenbiryani_results_end(tmcf, rd);

    if (res->status != NGX_HTTP_OK || !res->complete
        || rd->lines < pl->expected)
    {
        /* cut short, or not there yet: read whole another time, nothing
         * of this reading charged */
        ngx_http_tokenbiryani_poller_end(pl, res, "reading the results of");
        return;
    }

    ngx_http_tokenbiryani_results_lost(rd, pl->v.reserved, ngx_cycle->log,
                                       pl->v.id, pl->v.id_len);

    charge->at_ms = ngx_http_tokenbiryani_now_ms();

    /* the reading's id: its charge's event and its record name it */
    ngx_http_tokenbiryani_request_id(rid, "tbp_");

    if (ngx_http_tokenbiryani_object_settled(tmcf, ngx_cycle->log, rid,
                                             pl->v.id, pl->v.id_len, charge)
        != NGX_OK)
    {
        /* a client read them meanwhile, and was charged */
        ngx_http_tokenbiryani_poller_end(pl, NULL, NULL);
        return;
    }

    /* in the inspector and the usage history, as the reading it was */
    ngx_http_tokenbiryani_record_own(tmcf, rid, NGX_HTTP_TB_BATCHES,
                                     pl->v.key_name, pl->v.slot, rd,
                                     pl->started);

    (void) tb_usd_format(charge->cost, usd, sizeof(usd));

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "tokenbiryani: batch \"%*s\" on account \"%s\" ended with "
                  "its results unread: the gateway read them (%ui lines) "
                  "and charged $%s at the batch price", pl->v.id_len,
                  pl->v.id, pl->account, rd->lines, usd);

    ngx_http_tokenbiryani_poller_end(pl, NULL, NULL);
}


/* the poll over (doing: what failed, said at info), its pool gone */

static void
ngx_http_tokenbiryani_poller_end(ngx_http_tokenbiryani_poller_t *pl,
    ngx_http_tokenbiryani_call_result_t *res, const char *doing)
{
    if (doing) {
        ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                      "tokenbiryani: %s batch \"%*s\" on account \"%s\" "
                      "failed (%V%sstatus %i): asked again later", doing,
                      pl->v.id_len, pl->v.id, pl->account, &res->error,
                      res->error.len ? ", " : "", res->status);
    }

    pl->target.sink = NULL;
    pl->target.sink_data = NULL;

    ngx_destroy_pool(pl->pool);
    pl->pool = NULL;
}
