/*
 * What a flush writes: the zone's history the store does not have yet,
 * gathered into a job both backends write (SQLite in the thread pool,
 * Redis as one script), and each record's part in the usage history.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_store.h"
#include "tb_hash.h"


#define NGX_HTTP_TB_FLUSH_LEDGERS      1024   /* keys' per write, at most */
#define NGX_HTTP_TB_FLUSH_SESSIONS     1024   /* conversations' */
#define NGX_HTTP_TB_FLUSH_PROBE_MS     10000  /* redis, with nothing new */


/*
 * The flush's job, kept by the process and grown, never shrunk: a few MB
 * asked of malloc and given back every second left the flusher's heap to
 * grow with what other allocations pinned between them (issue 30), and
 * touching fresh pages each time cost the event loop page faults.  A
 * flush that comes while it is out (the last one, at exit, with a Redis
 * write in flight) gets its own.
 */
static ngx_http_tokenbiryani_job_t  *ngx_http_tokenbiryani_flush_buf;
static int64_t                       ngx_http_tokenbiryani_flushed_whole;
static size_t                        ngx_http_tokenbiryani_flush_size;
static ngx_uint_t                    ngx_http_tokenbiryani_flush_out;

/* the hour the usage history was last rolled up in, by this process */
static int64_t  ngx_http_tokenbiryani_rolled_up = -1;


static const char *ngx_http_tokenbiryani_usage_row(
    ngx_http_tokenbiryani_job_t *job,
    const ngx_http_tokenbiryani_usage_entry_t *e, tb_usage_row_t *u);
static ngx_http_tokenbiryani_job_t *ngx_http_tokenbiryani_flush_job(
    size_t size);


/*
 * History is written as the zone holds it (a record up to its last
 * candidate, an event whole), so it is read back only by a build whose
 * layout is the same; another build's is left in the file, unread, with
 * one log line.
 */

void
ngx_http_tokenbiryani_history_layout(u_char *buf, size_t size)
{
    u_char  *p;

    p = ngx_snprintf(buf, size - 1, "record %uz, %d candidates, %d attempts;"
                     " event %uz",
                     sizeof(ngx_http_tokenbiryani_record_t),
                     NGX_HTTP_TB_INSPECT_CANDS, NGX_HTTP_TB_INSPECT_ATTEMPTS,
                     sizeof(ngx_http_tokenbiryani_event_t));
    *p = '\0';
}


/*
 * What the store does not have yet, from the zone; NULL: nothing new (or,
 * on a tick, not enough to be worth a write yet).
 *
 * A tick (every 100 ms) writes at most a tenth of each ring: a whole
 * ring of records (2.3 KB each) copied, formatted and sent at once held
 * the flusher's event loop for milliseconds, its requests' p99 with it
 * (issue 30).  It writes when a tenth waits, or a second has passed since
 * the last whole write; the spend ledgers, the conversations, the hourly
 * roll-up and Redis's probe go with the write once a second.  At the last
 * flush (a worker's exit) everything goes.
 */
ngx_http_tokenbiryani_job_t *
ngx_http_tokenbiryani_flush_collect(ngx_http_tokenbiryani_main_conf_t *tmcf,
    ngx_uint_t tick)
{
    u_char                              *p, *id;
    size_t                               size;
    int64_t                              now;
    uint64_t                             ev_last, dropped, waiting, since;
    uint64_t                             lost;
    ngx_uint_t                           i, nrec, nev, nslots, got, nled;
    ngx_uint_t                           rollup, probe, whole, rcap, ecap;
    ngx_uint_t                           nuse, ucap, hsize;
    ngx_http_tokenbiryani_job_t         *job;
    ngx_http_tokenbiryani_zone_stats_t   zs;
    ngx_http_tokenbiryani_store_state_t  st;
    ngx_http_tokenbiryani_job_flush_t   *fl;

    ngx_http_tokenbiryani_store_snapshot(&tmcf->zone, &st);
    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    ev_last = ngx_http_tokenbiryani_events_last(&tmcf->zone);

    waiting = (zs.ring_seq > st.records_seq) ? zs.ring_seq - st.records_seq
                                             : 0;
    nrec = (ngx_uint_t) ngx_min(waiting, (uint64_t) zs.ring_size);
    nuse = (ngx_uint_t) ngx_min(waiting, (uint64_t) zs.usage_size);
    nev = (ev_last > st.events_seq)
          ? (ngx_uint_t) ngx_min(ev_last - st.events_seq,
                                 (uint64_t) zs.events_size)
          : 0;

    now = ngx_http_tokenbiryani_now_ms();
    whole = 1;

    if (tick) {
        rcap = ngx_max(zs.ring_size / 10, 1);
        ecap = ngx_max(zs.events_size / 10, 1);
        ucap = ngx_max(zs.usage_size / 10, 1);
        whole = (now - ngx_http_tokenbiryani_flushed_whole
                 >= NGX_HTTP_TB_FLUSH_MS);

        if (!whole && nrec < rcap && nev < ecap && nuse < ucap) {
            return NULL;
        }

        /*
         * Every request's usage goes, but of the records no more than a
         * tenth of the ring: when the ring has turned over since the last
         * write they are a sample already, written once a second
         */

        nrec = (!whole && zs.usage_size && waiting > zs.ring_size)
               ? 0 : ngx_min(nrec, rcap);
        nev = ngx_min(nev, ecap);
    }

    rollup = whole && (now / 3600000 != ngx_http_tokenbiryani_rolled_up);

    /*
     * Redis is asked now and then even with nothing new, so that an idle
     * instance finds it restarted empty and writes its history again
     */
    probe = (whole && tmcf->store_backend == NGX_HTTP_TB_STORE_REDIS
             && now - st.flushed_ms >= NGX_HTTP_TB_FLUSH_PROBE_MS);

    if (whole) {
        ngx_http_tokenbiryani_flushed_whole = now;
    }

    if (nrec == 0 && nuse == 0 && nev == 0
        && (!whole || st.spend_seq >= zs.spend_seq)
        && !rollup && !probe)
    {
        return NULL;
    }

    /* the usage summed by minute and group through a table of twice as
     * many places as requests */
    for (hsize = 16; hsize < 2 * nuse; hsize <<= 1) {
        /* void */
    }

    nslots = ngx_http_tokenbiryani_zone_nslots(&tmcf->zone);
    nled = whole ? nslots + NGX_HTTP_TB_FLUSH_LEDGERS : 0;

    size = sizeof(ngx_http_tokenbiryani_job_t)
           + nrec * sizeof(ngx_http_tokenbiryani_record_t)
           + nuse * sizeof(ngx_http_tokenbiryani_usage_entry_t)
           + nev * sizeof(ngx_http_tokenbiryani_event_t)
           + nslots * (sizeof(u_char *) + TB_ID_MAX + 1) + NGX_ALIGNMENT
           + nled * sizeof(ngx_http_tokenbiryani_ledger_view_t)
           + (whole ? NGX_HTTP_TB_FLUSH_SESSIONS : 0)
             * sizeof(ngx_http_tokenbiryani_session_view_t)
           + NGX_ALIGNMENT
           + nuse * sizeof(ngx_http_tokenbiryani_usage_sum_t)
           + hsize * sizeof(uint32_t);

    job = ngx_http_tokenbiryani_flush_job(size);
    if (job == NULL) {
        return NULL;
    }

    job->op = NGX_HTTP_TB_JOB_FLUSH;

    fl = &job->u.flush;
    fl->keep_records = zs.ring_size;
    fl->keep_events = zs.events_size;

    p = (u_char *) (job + 1);

    /* records in chunks: the lock is held for a few at a time */

    fl->records = (ngx_http_tokenbiryani_record_t *) p;
    fl->records_seq = st.records_seq;
    fl->records_from = st.records_seq;
    fl->events_from = st.events_seq;

    while (fl->nrecords < nrec) {
        got = ngx_http_tokenbiryani_inspect_since(&tmcf->zone,
                  fl->records_seq, fl->records + fl->nrecords,
                  ngx_min(nrec - fl->nrecords, 32));
        if (got == 0) {
            break;
        }

        fl->nrecords += got;
        fl->records_seq = fl->records[fl->nrecords - 1].seq;
    }

    p += nrec * sizeof(ngx_http_tokenbiryani_record_t);

    /* every request's usage from the same point: the flush is written
     * through the last of them, the records a part of it */

    fl->usage = (ngx_http_tokenbiryani_usage_entry_t *) p;

    since = st.records_seq;

    while (fl->nusage < nuse) {
        /* 256 at a time: the zone's lock is held for a few at a time */
        got = ngx_http_tokenbiryani_usage_since(&tmcf->zone, since,
                  fl->usage + fl->nusage, ngx_min(nuse - fl->nusage, 256),
                  &lost);
        fl->usage_lost += lost;

        if (got == 0) {
            break;
        }

        fl->nusage += got;
        since = fl->usage[fl->nusage - 1].seq;
    }

    if (fl->nrecords && waiting <= zs.ring_size) {
        /* the ring keeps up: written through its last record taken, every
         * record and its usage, the rest next time */
        while (fl->nusage
               && fl->usage[fl->nusage - 1].seq > fl->records_seq)
        {
            fl->nusage--;
        }

    } else if (fl->nusage) {
        /* it does not (or keeps none): through the last usage, and the
         * records of some of them */
        while (fl->nrecords
               && fl->records[fl->nrecords - 1].seq
                  > fl->usage[fl->nusage - 1].seq)
        {
            fl->nrecords--;
        }

        fl->records_seq = fl->usage[fl->nusage - 1].seq;
    }

    p += nuse * sizeof(ngx_http_tokenbiryani_usage_entry_t);

    fl->events = (ngx_http_tokenbiryani_event_t *) p;
    fl->nevents = nev ? ngx_http_tokenbiryani_events_read(&tmcf->zone,
                                                           st.events_seq,
                                                           fl->events, nev,
                                                           &dropped)
                       : 0;
    fl->events_seq = fl->nevents ? fl->events[fl->nevents - 1].seq
                                   : st.events_seq;

    p += nev * sizeof(ngx_http_tokenbiryani_event_t);

    /* the accounts the slots stand for, so that history outlives them */

    fl->slot_ids = (u_char **) p;
    p += nslots * sizeof(u_char *);

    for (i = 0; i < nslots; i++) {
        id = (u_char *) ngx_http_tokenbiryani_zone_slot_id(&tmcf->zone,
                                                           (int64_t) i);
        fl->slot_ids[i] = p;
        p = ngx_cpystrn(p, id ? id : (u_char *) "", TB_ID_MAX + 1) + 1;
    }

    fl->nslots = nslots;

    /* the ledgers and conversations charged since the last write */

    /* after the ids' bytes: aligned again */
    p = ngx_align_ptr(p, NGX_ALIGNMENT);
    fl->ledgers = (ngx_http_tokenbiryani_ledger_view_t *) p;
    p += nled * sizeof(ngx_http_tokenbiryani_ledger_view_t);
    fl->sessions = (ngx_http_tokenbiryani_session_view_t *) p;

    fl->spend_seq = st.spend_seq;

    if (whole) {
        fl->nledgers = ngx_http_tokenbiryani_spend_since(&tmcf->zone,
                            st.spend_seq, fl->ledgers, nled, fl->sessions,
                            NGX_HTTP_TB_FLUSH_SESSIONS, &fl->nsessions,
                            &fl->spend_seq);
    }

    if (whole && fl->nledgers == nled) {
        /* more than a write holds: this again, and the rest, next time */
        fl->spend_seq = st.spend_seq;
    }

    p = ngx_align_ptr((u_char *) (fl->sessions
                                  + (whole ? NGX_HTTP_TB_FLUSH_SESSIONS : 0)),
                      NGX_ALIGNMENT);
    fl->sums = (ngx_http_tokenbiryani_usage_sum_t *) p;
    p += nuse * sizeof(ngx_http_tokenbiryani_usage_sum_t);
    fl->sum_hash = (uint32_t *) p;
    fl->sum_hsize = hsize;

    ngx_http_tokenbiryani_flush_sum(job);

    fl->now_ms = now;
    fl->rollup = rollup;

    if (rollup) {
        ngx_http_tokenbiryani_rolled_up = now / 3600000;
    }

    if (fl->nrecords == 0 && fl->nusage == 0 && fl->nevents == 0
        && fl->nledgers == 0
        && fl->nsessions == 0 && !rollup && !probe)
    {
        ngx_http_tokenbiryani_flush_release(job);
        return NULL;
    }

    return job;
}


/*
 * What is copied into it is copied whole (records, events, ledgers) or
 * zeroed first (a conversation's view): no byte of an earlier flush is
 * written again
 */
static ngx_http_tokenbiryani_job_t *
ngx_http_tokenbiryani_flush_job(size_t size)
{
    ngx_http_tokenbiryani_job_t  *job;

    if (ngx_http_tokenbiryani_flush_out) {
        return ngx_calloc(size, ngx_cycle->log);
    }

    if (size > ngx_http_tokenbiryani_flush_size) {
        ngx_free(ngx_http_tokenbiryani_flush_buf);
        ngx_http_tokenbiryani_flush_size = 0;

        /* with room for the ring to fill a little more */
        size += size / 4;

        ngx_http_tokenbiryani_flush_buf = ngx_alloc(size, ngx_cycle->log);
        if (ngx_http_tokenbiryani_flush_buf == NULL) {
            return NULL;
        }

        ngx_http_tokenbiryani_flush_size = size;
    }

    job = ngx_http_tokenbiryani_flush_buf;
    ngx_memzero(job, sizeof(ngx_http_tokenbiryani_job_t));
    ngx_http_tokenbiryani_flush_out = 1;

    return job;
}


void
ngx_http_tokenbiryani_flush_release(ngx_http_tokenbiryani_job_t *job)
{
    if (job == NULL) {
        return;
    }

    if (job == ngx_http_tokenbiryani_flush_buf) {
        ngx_http_tokenbiryani_flush_out = 0;
        return;
    }

    ngx_free(job);
}


void
ngx_http_tokenbiryani_flush_sum(ngx_http_tokenbiryani_job_t *job)
{
    int64_t                               t;
    uint64_t                              h;
    uint32_t                              k, *hash;
    ngx_uint_t                            i, hsize;
    const char                           *acct;
    tb_usage_row_t                        u;
    ngx_http_tokenbiryani_usage_sum_t    *sum;
    ngx_http_tokenbiryani_job_flush_t    *fl;
    ngx_http_tokenbiryani_usage_entry_t  *e;

    fl = &job->u.flush;
    hash = fl->sum_hash;
    hsize = fl->sum_hsize;
    fl->nsums = 0;

    ngx_memset(hash, 0xff, hsize * sizeof(uint32_t));

    for (i = 0; i < fl->nusage; i++) {
        e = &fl->usage[i];
        acct = ngx_http_tokenbiryani_usage_row(job, e, &u);
        t = e->ended_ms / 60000 * 60;

        h = tb_hash64((uint64_t) t, e->key, ngx_strlen(e->key));
        h = tb_hash64(h ^ (uint64_t) (uintptr_t) acct, e->model,
                      ngx_strlen(e->model));

        for (k = (uint32_t) (h & (hsize - 1)); /* void */ ;
             k = (k + 1) & (hsize - 1))
        {
            if (hash[k] == (uint32_t) -1) {
                hash[k] = (uint32_t) fl->nsums;

                sum = &fl->sums[fl->nsums++];
                sum->t = t;
                sum->acct = acct;
                sum->model = e->model;
                sum->key = e->key;
                ngx_memzero(&sum->u, sizeof(tb_usage_row_t));
                break;
            }

            sum = &fl->sums[hash[k]];

            if (sum->t == t && sum->acct == acct
                && ngx_strcmp(sum->key, e->key) == 0
                && ngx_strcmp(sum->model, e->model) == 0)
            {
                break;
            }
        }

        sum->u.requests += u.requests;
        sum->u.input += u.input;
        sum->u.output += u.output;
        sum->u.cache_read += u.cache_read;
        sum->u.cache_write += u.cache_write;
        sum->u.cost += u.cost;
        sum->u.unpriced += u.unpriced;
        sum->u.errors += u.errors;
        sum->u.cache_hits += u.cache_hits;
    }
}


static const char *
ngx_http_tokenbiryani_usage_row(ngx_http_tokenbiryani_job_t *job,
    const ngx_http_tokenbiryani_usage_entry_t *e, tb_usage_row_t *u)
{
    ngx_memzero(u, sizeof(tb_usage_row_t));

    u->requests = 1;
    u->errors = (e->status >= 400 || e->status == 0);

    if (e->input >= 0) {
        u->input = e->input;
        u->output = ngx_max(e->output, 0);
        u->cache_read = ngx_max(e->cache_read, 0);
        u->cache_write = ngx_max(e->cache_write, 0);
        u->cache_hits = (u->cache_read > 0);

        if (e->cost >= 0) {
            u->cost = e->cost;

        } else {
            u->unpriced = 1;
        }
    }

    return (e->chosen >= 0 && (ngx_uint_t) e->chosen < job->u.flush.nslots)
           ? (char *) job->u.flush.slot_ids[e->chosen] : "";
}
