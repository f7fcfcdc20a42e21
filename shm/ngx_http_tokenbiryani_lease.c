/*
 * Leases: what an attempt reserved on an account, held in the zone until
 * it is given back.  Every lease expires unless the worker holding it
 * renews it, so a worker that dies does not strand its reservations: any
 * worker's timer takes expired ones back.
 */


#include "ngx_http_tokenbiryani_zone.h"


static void ngx_http_tokenbiryani_lease_drop(
    ngx_http_tokenbiryani_zone_t *zone, ngx_http_tokenbiryani_lease_t *lease,
    const tb_answer_t *ans, const ngx_http_tokenbiryani_charge_t *charge);


ngx_uint_t
ngx_http_tokenbiryani_lease_take(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, const tb_account_conf_t *conf, const tb_need_t *need,
    uint64_t key, int64_t key_max, ngx_http_tokenbiryani_caps_t *caps,
    int64_t now, ngx_http_tokenbiryani_ticket_t *ticket, ngx_uint_t *probed)
{
    int                                took;
    ngx_uint_t                         cap, cap_slot;
    tb_account_state_t                *capst;
    ngx_http_tokenbiryani_session_t   *sess;
    ngx_slab_pool_t                   *shpool;
    ngx_http_tokenbiryani_shm_t       *sh;
    ngx_http_tokenbiryani_lease_t     *lease;
    ngx_http_tokenbiryani_keystate_t  *ks;

    sh = zone->sh;
    shpool = zone->shpool;

    ngx_shmtx_lock(&shpool->mutex);

    ks = ngx_http_tokenbiryani_keystate_locked(zone, key);

    if (ks && key_max >= 0 && ks->inflight >= (ngx_uint_t) key_max) {
        ngx_shmtx_unlock(&shpool->mutex);
        return NGX_HTTP_TB_LEASE_KEY_FULL;
    }

    lease = ngx_http_tokenbiryani_alloc_locked(zone,
                                  sizeof(ngx_http_tokenbiryani_lease_t));
    if (lease == NULL) {
        ngx_shmtx_unlock(&shpool->mutex);
        return NGX_HTTP_TB_LEASE_NONE;
    }

    cap = ngx_http_tokenbiryani_caps_reserve_locked(zone, ks, caps,
                                                    sh->slots[slot], conf,
                                                    need->cost, now, &sess);
    if (cap != NGX_HTTP_TB_CAP_NONE) {
        ngx_slab_free_locked(shpool, lease);
        ngx_shmtx_unlock(&shpool->mutex);

        if (cap == NGX_HTTP_TB_CAP_ACCOUNT) {
            /* the account's own: another account may serve */
            return NGX_HTTP_TB_LEASE_NONE;
        }

        return NGX_HTTP_TB_LEASE_CAP;
    }

    /* the account's own state, its capacity domain's windows */
    capst = ngx_http_tokenbiryani_cap_locked(sh, sh->slots[slot], slot,
                                             &cap_slot);

    if (!tb_lease_reserve_in(sh->slots[slot], capst, conf, &zone->breaker,
                             need, now, &took))
    {
        ngx_http_tokenbiryani_caps_settle_locked(zone, ks, sess,
                                                 sh->slots[slot],
                                                 (ngx_int_t) slot,
                                                 need->cost, NULL);
        ngx_slab_free_locked(shpool, lease);
        ngx_shmtx_unlock(&shpool->mutex);
        return NGX_HTTP_TB_LEASE_NONE;
    }

    if (ks) {
        ks->inflight++;
        ks->last_used_ms = now;
    }

    lease->ks = ks;
    lease->id = ++sh->seq;
    lease->slot = slot;
    lease->cap_slot = cap_slot;
    lease->need = *need;
    lease->reads_count = conf->cache_reads_count;
    lease->expires_ms = now + zone->lease_timeout;
    lease->pid = ngx_pid;
    lease->probed = took;
    lease->sess = sess;

    ngx_queue_insert_tail(&sh->leases, &lease->queue);
    sh->nleases++;

    ngx_shmtx_unlock(&shpool->mutex);

    ticket->obj = lease;
    ticket->id = lease->id;
    *probed = took;

    return NGX_HTTP_TB_LEASE_TAKEN;
}


void
ngx_http_tokenbiryani_lease_give_back(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_ticket_t *ticket, const tb_answer_t *ans,
    ngx_uint_t probe_back, const ngx_http_tokenbiryani_charge_t *charge)
{
    ngx_http_tokenbiryani_shm_t    *sh;
    ngx_http_tokenbiryani_lease_t  *lease;

    if (ticket->id == 0) {
        return;
    }

    sh = zone->sh;
    lease = ticket->obj;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (lease->id == ticket->id) {
        if (probe_back && lease->probed && lease->slot < sh->nslots) {
            /* the probe was never sent: the next request probes */
            sh->slots[lease->slot]->breaker.probe = 0;
        }

        ngx_http_tokenbiryani_lease_drop(zone, lease, ans, charge);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ticket->obj = NULL;
    ticket->id = 0;

    ngx_http_tokenbiryani_capacity_changed(zone,
                                           ngx_http_tokenbiryani_now_ms());
}


static void
ngx_http_tokenbiryani_lease_drop(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_lease_t *lease, const tb_answer_t *ans,
    const ngx_http_tokenbiryani_charge_t *charge)
{
    ngx_slab_pool_t              *shpool;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    shpool = zone->shpool;

    if (lease->slot < sh->nslots && lease->cap_slot < sh->nslots) {
        /*
         * Leases taken from now on are sent after this one ended.  Back to
         * the windows it was taken on, whatever the domain is now.
         */
        tb_lease_release_in(sh->slots[lease->slot],
                            sh->slots[lease->cap_slot], &lease->need, ans,
                            sh->seq, lease->id, (int) lease->reads_count,
                            ngx_http_tokenbiryani_now_ms());
    }

    ngx_http_tokenbiryani_caps_settle_locked(zone, lease->ks, lease->sess,
                                             lease->slot < sh->nslots
                                             ? sh->slots[lease->slot] : NULL,
                                             (ngx_int_t) lease->slot,
                                             lease->need.cost, charge);

    if (lease->ks) {
        lease->ks->inflight--;
    }

    ngx_queue_remove(&lease->queue);
    sh->nleases--;

    lease->id = 0;
    ngx_slab_free_locked(shpool, lease);
}


void
ngx_http_tokenbiryani_lease_renew(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now)
{
    ngx_queue_t                    *q;
    ngx_http_tokenbiryani_shm_t    *sh;
    ngx_http_tokenbiryani_lease_t  *lease;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&sh->leases);
         q != ngx_queue_sentinel(&sh->leases);
         q = ngx_queue_next(q))
    {
        lease = ngx_queue_data(q, ngx_http_tokenbiryani_lease_t, queue);

        if (lease->pid == ngx_pid) {
            lease->expires_ms = now + zone->lease_timeout;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_uint_t
ngx_http_tokenbiryani_lease_reclaim(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now, ngx_uint_t expired)
{
    ngx_uint_t                      n, gone;
    ngx_queue_t                    *q, *next;
    ngx_http_tokenbiryani_shm_t    *sh;
    ngx_http_tokenbiryani_lease_t  *lease;
    ngx_http_tokenbiryani_owners_t  owners;

    sh = zone->sh;
    n = 0;
    owners.n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&sh->leases);
         q != ngx_queue_sentinel(&sh->leases);
         q = next)
    {
        next = ngx_queue_next(q);
        lease = ngx_queue_data(q, ngx_http_tokenbiryani_lease_t, queue);

        gone = ngx_http_tokenbiryani_owner_gone(&owners, lease->pid);

        if (!gone && !(expired && lease->expires_ms <= now)) {
            continue;
        }

        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "tokenbiryani: took back a lease on account \"%s\" "
                      "%s worker %P %s",
                      lease->slot < sh->nslots ? sh->slots[lease->slot]->id
                                               : "?",
                      gone ? "of" : "that", lease->pid,
                      gone ? "which is gone" : "stopped renewing");

        if (lease->probed && lease->slot < sh->nslots) {
            /* a probe that will never report: the next request probes */
            sh->slots[lease->slot]->breaker.probe = 0;
        }

        ngx_http_tokenbiryani_lease_drop(zone, lease, NULL, NULL);
        sh->leases_reclaimed++;
        n++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (n) {
        ngx_http_tokenbiryani_capacity_changed(zone, now);
    }

    return n;
}


ngx_uint_t
ngx_http_tokenbiryani_lease_owners(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pid_t *pids, ngx_uint_t *held, ngx_uint_t max)
{
    ngx_uint_t                      i, n;
    ngx_queue_t                    *q;
    ngx_http_tokenbiryani_shm_t    *sh;
    ngx_http_tokenbiryani_lease_t  *lease;

    sh = zone->sh;
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (q = ngx_queue_head(&sh->leases);
         q != ngx_queue_sentinel(&sh->leases);
         q = ngx_queue_next(q))
    {
        lease = ngx_queue_data(q, ngx_http_tokenbiryani_lease_t, queue);

        for (i = 0; i < n; i++) {
            if (pids[i] == lease->pid) {
                break;
            }
        }

        if (i == n) {
            if (n == max) {
                continue;
            }

            pids[n] = lease->pid;
            held[n] = 0;
            n++;
        }

        held[i]++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}
