/*
 * Pacing's reader (see ngx_http_tokenbiryani_pacer.h): a read of the
 * usage history at a time, by one worker, never on the event loop.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_pacer.h"
#include "ngx_http_tokenbiryani_store.h"
#include "tb_pacing.h"


typedef struct {
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_event_t                         timer;
    ngx_http_tokenbiryani_job_t         job;
    ngx_uint_t                          busy;    /* a read under way */
    int64_t                             week;    /* the read's */
} ngx_http_tokenbiryani_pacer_t;


static void ngx_http_tokenbiryani_pacer_tick(ngx_event_t *ev);
static void ngx_http_tokenbiryani_pacer_read(ngx_http_tokenbiryani_job_t *job);


static ngx_http_tokenbiryani_pacer_t  ngx_http_tokenbiryani_pacer_state;


ngx_uint_t
ngx_http_tokenbiryani_pacer_on(ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    const tb_config_t  *cf;

    cf = tmcf->tbcf;

    return cf->pacing_enabled && cf->pacing_weekly_budget_usd >= 0
           && ngx_strcmp(cf->pacing_mode, "enforcing") == 0
           && ngx_http_tokenbiryani_store_on(tmcf);
}


ngx_int_t
ngx_http_tokenbiryani_pacer_init_worker(ngx_cycle_t *cycle,
    ngx_http_tokenbiryani_main_conf_t *tmcf)
{
    ngx_http_tokenbiryani_pacer_t  *pc;

    if (!ngx_http_tokenbiryani_pacer_on(tmcf)) {
        return NGX_OK;
    }

    pc = &ngx_http_tokenbiryani_pacer_state;

    ngx_memzero(pc, sizeof(ngx_http_tokenbiryani_pacer_t));
    pc->tmcf = tmcf;

    ngx_http_tokenbiryani_timer_init(&pc->timer,
                                     ngx_http_tokenbiryani_pacer_tick, pc,
                                     cycle->log);

    /* the first read soon after the start: requests pace by it */
    ngx_add_timer(&pc->timer, 200);

    return NGX_OK;
}


static void
ngx_http_tokenbiryani_pacer_tick(ngx_event_t *ev)
{
    ngx_http_tokenbiryani_pacer_t *pc = ev->data;

    int64_t             now;
    const tb_config_t  *cf;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return;
    }

    ngx_add_timer(&pc->timer, NGX_HTTP_TB_PACER_MS);

    if (pc->busy
        || !ngx_http_tokenbiryani_pacer(&pc->tmcf->zone, ngx_pid))
    {
        return;
    }

    cf = pc->tmcf->tbcf;
    now = ngx_http_tokenbiryani_now_ms();

    pc->week = tb_pace_week_start(now, cf->pacing_week_day,
                                  cf->pacing_week_minute, cf->pacing_tz_min);

    /* the week's spend, by the hour, as /admin/pacing reads it */

    ngx_memzero(&pc->job, sizeof(ngx_http_tokenbiryani_job_t));
    pc->job.op = NGX_HTTP_TB_JOB_USAGE;
    pc->job.u.usage.by = TB_STORE_BY_NONE;
    pc->job.u.usage.step = 3600;
    pc->job.u.usage.from = pc->week / 1000 / 3600 * 3600;
    pc->job.done = ngx_http_tokenbiryani_pacer_read;
    pc->job.data = pc;

    if (ngx_http_tokenbiryani_store_post(pc->tmcf, &pc->job) == NGX_OK) {
        pc->busy = 1;
    }
}


static void
ngx_http_tokenbiryani_pacer_read(ngx_http_tokenbiryani_job_t *job)
{
    ngx_http_tokenbiryani_pacer_t *pc = job->data;

    int64_t     spent;
    ngx_uint_t  i;

    pc->busy = 0;

    if (job->rc == TB_STORE_OK) {
        spent = 0;

        for (i = 0; i < job->u.usage.npoints; i++) {
            spent += job->u.usage.points[i].u.cost;
        }

        ngx_http_tokenbiryani_pace_put(&pc->tmcf->zone, pc->week, spent,
                                       ngx_http_tokenbiryani_now_ms());
    }

    free(job->u.usage.points);
    job->u.usage.points = NULL;
}
