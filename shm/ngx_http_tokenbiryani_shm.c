/*
 * tokenbiryani shared zone: account slots and pool-wide counters.
 */


#include "ngx_http_tokenbiryani_zone.h"


static void ngx_http_tokenbiryani_zone_regroup_locked(
    ngx_http_tokenbiryani_shm_t *sh, const char *org);
static void ngx_http_tokenbiryani_zone_domains_locked(
    ngx_http_tokenbiryani_zone_t *zone);
static ngx_int_t ngx_http_tokenbiryani_zone_too_small(
    ngx_shm_zone_t *shm_zone, const char *before, ngx_uint_t n,
    const char *what, size_t size);
static ngx_int_t ngx_http_tokenbiryani_zone_rings(
    ngx_http_tokenbiryani_zone_t *zone, ngx_http_tokenbiryani_shm_t *sh,
    ngx_slab_pool_t *shpool, const char **what, ngx_uint_t *n, size_t *size);
static ngx_int_t ngx_http_tokenbiryani_zone_array(ngx_slab_pool_t *shpool,
    void **array, ngx_uint_t *nelts, ngx_uint_t n, size_t size);


ngx_int_t
ngx_http_tokenbiryani_zone_init(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_tokenbiryani_zone_t  *ozone = data;

    size_t                                 len, size;
    ngx_uint_t                             i, n;
    const char                            *what;
    ngx_slab_pool_t                       *shpool;
    tb_account_state_t                    *slot;
    ngx_http_tokenbiryani_shm_t           *sh;
    ngx_http_tokenbiryani_zone_t          *zone;
    ngx_http_tokenbiryani_zone_account_t  *za;

    zone = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    zone->shpool = shpool;

    /* what is expendable, in the order it goes */
    ngx_http_tokenbiryani_evictor_add(zone,
                                      ngx_http_tokenbiryani_affinity_evict);
    ngx_http_tokenbiryani_evictor_add(zone,
                                      ngx_http_tokenbiryani_session_evict);

    if (ozone && ozone->sh) {
        /* a reload that kept the zone: the pool's state lives on */
        sh = ozone->sh;

    } else if (shm_zone->shm.exists) {
        sh = shpool->data;

    } else {
        sh = ngx_slab_calloc(shpool, sizeof(ngx_http_tokenbiryani_shm_t));
        if (sh == NULL) {
            return NGX_ERROR;
        }

        sh->magic = NGX_HTTP_TB_SHM_MAGIC;
        sh->created_ms = ngx_http_tokenbiryani_now_ms();

        ngx_queue_init(&sh->leases);
        ngx_queue_init(&sh->waiting[0]);
        ngx_queue_init(&sh->waiting[1]);
        ngx_queue_init(&sh->rpm);
        ngx_queue_init(&sh->keys);
        ngx_http_tokenbiryani_rlist_init(&sh->rkeys);
        ngx_http_tokenbiryani_rlist_init(&sh->raccts);
        sh->settings_gen = 1;

        /* a waiter that never tried has blocked_gen 0: never current */
        sh->cap_gen = 1;

        ngx_rbtree_init(&sh->aff_tree, &sh->aff_sentinel,
                        ngx_rbtree_insert_value);
        ngx_queue_init(&sh->aff_lru);
        sh->aff_epoch_ms = sh->created_ms;

        ngx_rbtree_init(&sh->sess_tree, &sh->sess_sentinel,
                        ngx_rbtree_insert_value);
        ngx_queue_init(&sh->sess_lru);
        ngx_queue_init(&sh->sess_dirty);

        ngx_rbtree_init(&sh->obj_tree, &sh->obj_sentinel,
                        ngx_rbtree_insert_value);
        ngx_queue_init(&sh->obj_queue);

        shpool->data = sh;

        len = sizeof(" in tokenbiryani zone \"\"") + shm_zone->shm.name.len;

        shpool->log_ctx = ngx_slab_alloc(shpool, len);
        if (shpool->log_ctx == NULL) {
            return NGX_ERROR;
        }

        ngx_sprintf(shpool->log_ctx, " in tokenbiryani zone \"%V\"%Z",
                    &shm_zone->shm.name);

        shpool->log_nomem = 0;
    }

    if (sh->magic != NGX_HTTP_TB_SHM_MAGIC) {
        ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                      "tokenbiryani zone \"%V\" holds foreign data",
                      &shm_zone->shm.name);
        return NGX_ERROR;
    }

    zone->sh = sh;

    ngx_shmtx_lock(&shpool->mutex);

    if (ngx_http_tokenbiryani_zone_rings(zone, sh, shpool, &what, &n, &size)
        != NGX_OK)
    {
        return ngx_http_tokenbiryani_zone_too_small(shm_zone, what, n,
                                                    "requests", size);
    }

    /* a request leaves two to four events: room for as many requests */

    if (ngx_http_tokenbiryani_events_init(zone,
            4 * (ngx_uint_t) zone->tbcf->observability_event_buffer)
        != NGX_OK)
    {
        return ngx_http_tokenbiryani_zone_too_small(shm_zone, "",
                   4 * (ngx_uint_t) zone->tbcf->observability_event_buffer,
                   "events", sizeof(ngx_http_tokenbiryani_event_t));
    }

    sh->generation++;

    for (i = 0; i < sh->nslots; i++) {
        sh->slots[i]->live = 0;
    }

    za = zone->accounts.elts;

    for (i = 0; i < zone->accounts.nelts; i++) {
        slot = ngx_http_tokenbiryani_zone_slot_locked(sh, shpool, &za[i],
                                                      &za[i].slot);
        if (slot == NULL) {
            ngx_shmtx_unlock(&shpool->mutex);

            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "tokenbiryani zone \"%V\" is too small for %ui "
                          "accounts", &shm_zone->shm.name,
                          zone->accounts.nelts);
            return NGX_ERROR;
        }

        slot->live = 1;
        slot->replenishment = za[i].replenishment;
        za[i].st = slot;
    }

    ngx_http_tokenbiryani_zone_domains_locked(zone);

    /* accounts added at runtime outlive a reload */
    ngx_http_tokenbiryani_raccts_live_locked(sh);

    ngx_shmtx_unlock(&shpool->mutex);

    return NGX_OK;
}


/*
 * The file's capacity domains: the accounts that name one share the
 * windows of the first that does.  An account that no longer names one
 * learns its domain again from its answers.
 */

static void
ngx_http_tokenbiryani_zone_domains_locked(ngx_http_tokenbiryani_zone_t *zone)
{
    ngx_uint_t                             i, j;
    tb_account_state_t                    *st;
    ngx_http_tokenbiryani_zone_account_t  *za;

    za = zone->accounts.elts;

    for (i = 0; i < zone->accounts.nelts; i++) {
        st = za[i].st;

        if (za[i].domain == NULL) {
            if (st->domain_file) {
                st->domain_file = 0;
                st->domain = 0;
            }

            continue;
        }

        for (j = 0; j < i; j++) {
            if (za[j].domain && ngx_strcmp(za[j].domain, za[i].domain) == 0) {
                break;
            }
        }

        st->domain_file = 1;
        st->domain = (uint32_t) za[j].slot + 1;
    }

    /* a domain of one is none */

    for (i = 0; i < zone->accounts.nelts; i++) {
        st = za[i].st;

        if (!st->domain_file || st->domain != za[i].slot + 1) {
            continue;
        }

        for (j = 0; j < zone->accounts.nelts; j++) {
            if (j != i && za[j].st->domain == st->domain) {
                break;
            }
        }

        if (j == zone->accounts.nelts) {
            st->domain = 0;
        }
    }
}


/*
 * The accounts that named organisation org in their answers, and no
 * domain in the file, share one: the windows of the one whose id sorts
 * first, whichever learned first, so that every gateway sharing the pool
 * through Redis, whatever its slots, counts an organisation against the
 * same account's windows (the one whose news the others adopt); an
 * organisation of one key has none.  Under the lock.
 */

static void
ngx_http_tokenbiryani_zone_regroup_locked(ngx_http_tokenbiryani_shm_t *sh,
    const char *org)
{
    uint32_t             d;
    ngx_uint_t           i, n, leader, moved;
    tb_account_state_t  *st;

    if (org[0] == '\0') {
        return;
    }

    n = 0;
    leader = 0;

    for (i = 0; i < sh->nslots; i++) {
        st = sh->slots[i];

        if (st->live && !st->domain_file && ngx_strcmp(st->org, org) == 0) {
            if (n++ == 0 || ngx_strcmp(st->id, sh->slots[leader]->id) < 0) {
                leader = i;
            }
        }
    }

    moved = 0;

    for (i = 0; i < sh->nslots; i++) {
        st = sh->slots[i];

        if (!st->domain_file && ngx_strcmp(st->org, org) == 0) {
            d = (n > 1 && st->live) ? (uint32_t) leader + 1 : 0;
            moved |= (st->domain != d);
            st->domain = d;
        }
    }

    if (!moved) {
        return;
    }

    /*
     * What a key took of its own windows before it joined (or after it
     * left) was never taken from the domain's slices: every slice of the
     * organisation begins again, its share of what the windows hold now
     */

    for (i = 0; i < sh->nslots; i++) {
        st = sh->slots[i];

        if (!st->domain_file && ngx_strcmp(st->org, org) == 0) {
            tb_slice_restart(st);
        }
    }
}


ngx_uint_t
ngx_http_tokenbiryani_zone_learn_org_locked(ngx_http_tokenbiryani_shm_t *sh,
    tb_account_state_t *st, const u_char *org, size_t len, ngx_uint_t told)
{
    char  was[TB_ORG_MAX];

    if (len >= TB_ORG_MAX
        || (ngx_strlen(st->org) == len && ngx_strncmp(st->org, org, len) == 0))
    {
        return 0;
    }

    ngx_memcpy(was, st->org, TB_ORG_MAX);
    ngx_memcpy(st->org, org, len);
    st->org[len] = '\0';
    st->org_told = told;

    if (st->domain_file) {
        return 0;
    }

    ngx_http_tokenbiryani_zone_regroup_locked(sh, was);
    ngx_http_tokenbiryani_zone_regroup_locked(sh, st->org);

    return 1;
}


tb_account_state_t *
ngx_http_tokenbiryani_cap_locked(ngx_http_tokenbiryani_shm_t *sh,
    tb_account_state_t *st, ngx_uint_t slot, ngx_uint_t *cap_slot)
{
    if (st->domain && st->domain - 1 < sh->nslots) {
        *cap_slot = st->domain - 1;
        return sh->slots[st->domain - 1];
    }

    *cap_slot = slot;

    return st;
}


const tb_account_state_t *
ngx_http_tokenbiryani_zone_capacity(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, uint32_t *domain)
{
    uint32_t                      d;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    d = __atomic_load_n(&sh->slots[slot]->domain, __ATOMIC_RELAXED);

    if (d && d - 1 < sh->nslots) {
        *domain = d;
        return sh->slots[d - 1];
    }

    *domain = 0;

    return sh->slots[slot];
}


/*
 * What observability.event_buffer asks (n of what, size bytes each) does
 * not fit in the zone: the lock given back, and said.
 */

static ngx_int_t
ngx_http_tokenbiryani_zone_too_small(ngx_shm_zone_t *shm_zone,
    const char *before, ngx_uint_t n, const char *what, size_t size)
{
    ngx_slab_pool_t  *shpool;

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    ngx_shmtx_unlock(&shpool->mutex);

    ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                  "tokenbiryani zone \"%V\" is too small for %s%ui %s "
                  "(%uz bytes each): make the zone larger or "
                  "observability.event_buffer smaller",
                  &shm_zone->shm.name, before, n, what, size);

    return NGX_ERROR;
}


/*
 * The inspector's ring, sized by observability.event_buffer, and with a
 * store the usage ring: four times that, at least NGX_HTTP_TB_USAGE_MIN.
 * A reload that changes a size starts a new one (the old history goes).
 * NGX_ERROR: what did not fit, n of size bytes.
 */

static ngx_int_t
ngx_http_tokenbiryani_zone_rings(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_shm_t *sh, ngx_slab_pool_t *shpool,
    const char **what, ngx_uint_t *n, size_t *size)
{
    void  *a;

    *what = "an inspector of ";
    *n = (ngx_uint_t) zone->tbcf->observability_event_buffer;
    *size = sizeof(ngx_http_tokenbiryani_record_t);
    a = sh->ring;

    if (ngx_http_tokenbiryani_zone_array(shpool, &a, &sh->ring_size, *n,
                                         *size)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    sh->ring = a;

    *what = "the usage of ";
    *n = (zone->tbcf->store_backend
          && ngx_strcmp(zone->tbcf->store_backend, "memory") != 0)
         ? ngx_max(4 * *n, NGX_HTTP_TB_USAGE_MIN) : 0;
    *size = sizeof(ngx_http_tokenbiryani_usage_entry_t);
    a = sh->usage;

    if (ngx_http_tokenbiryani_zone_array(shpool, &a, &sh->usage_size, *n,
                                         *size)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    sh->usage = a;

    return NGX_OK;
}


/*
 * An array of the zone of n elements, zeroed, in place of *array (of
 * *nelts) unless it is that many already: NGX_ERROR when it does not fit
 * (the old one kept).
 */

static ngx_int_t
ngx_http_tokenbiryani_zone_array(ngx_slab_pool_t *shpool, void **array,
    ngx_uint_t *nelts, ngx_uint_t n, size_t size)
{
    void  *a;

    if (*nelts == n && (*array != NULL || n == 0)) {
        return NGX_OK;
    }

    a = NULL;

    if (n) {
        a = ngx_slab_alloc_locked(shpool, n * size);
        if (a == NULL) {
            return NGX_ERROR;
        }

        ngx_memzero(a, n * size);
    }

    if (*array) {
        ngx_slab_free_locked(shpool, *array);
    }

    *array = a;
    *nelts = n;

    return NGX_OK;
}


ngx_uint_t
ngx_http_tokenbiryani_zone_observe(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, const tb_rl_obs_t *obs, const tb_unified_t *uni,
    ngx_int_t status, int64_t now)
{
    unsigned             result;
    ngx_uint_t           cap_slot;
    tb_account_state_t  *st, *cap;

    st = zone->sh->slots[slot];

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (obs->has_org) {
        /* the organisation it belongs to: its domain, learned, to be told */
        (void) ngx_http_tokenbiryani_zone_learn_org_locked(zone->sh, st,
                                                (const u_char *) obs->org,
                                                ngx_strlen(obs->org), 0);
    }

    /* the windows are the domain's: every key's answers read them */

    cap = ngx_http_tokenbiryani_cap_locked(zone->sh, st, slot, &cap_slot);

    result = tb_account_observe(cap, obs, now);

    if (uni) {
        /* a subscription's windows are its own: one said rejected, it is
         * spent until that window resets */
        tb_account_unified(st, uni, now);
    }

    st->last_status = status;
    st->news = 1;
    cap->news = 1;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    /* a window seen again may hold more than was thought */
    ngx_http_tokenbiryani_capacity_changed(zone, now);

    return result;
}


ngx_uint_t
ngx_http_tokenbiryani_zone_rr_next(ngx_http_tokenbiryani_zone_t *zone)
{
    return (ngx_uint_t) ngx_atomic_fetch_add(&zone->sh->rr_cursor, 1);
}


void
ngx_http_tokenbiryani_zone_attempt_start(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, ngx_uint_t leased, int64_t now)
{
    tb_account_state_t  *st;

    st = zone->sh->slots[slot];

    /* a lease counts itself in flight when it is taken */
    if (!leased) {
        __atomic_add_fetch(&st->inflight, 1, __ATOMIC_RELAXED);
    }

    __atomic_add_fetch(&st->requests_total, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&st->last_used_ms, now, __ATOMIC_RELAXED);
}


/*
 * An attempt is over: the outcome's account action and the breaker, under
 * the lock.  Returns 1 when the breaker opened.
 */

ngx_uint_t
ngx_http_tokenbiryani_zone_attempt_end(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, ngx_uint_t leased, const tb_outcome_t *o,
    uint64_t model_hash, const char *model, size_t model_len,
    ngx_uint_t probed, int64_t learn, int64_t started, int64_t now)
{
    int                  opened;
    int64_t              inflight;
    tb_account_state_t  *st;

    st = zone->sh->slots[slot];

    /* this attempt among them: a leased one leaves at its settlement */
    inflight = leased ? __atomic_load_n(&st->inflight, __ATOMIC_RELAXED)
                      : __atomic_sub_fetch(&st->inflight, 1,
                                           __ATOMIC_RELAXED) + 1;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (learn && o
        && (o->kind == TB_KIND_RATE_LIMIT || o->kind == TB_KIND_OK))
    {
        tb_account_ceiling(st, o->kind == TB_KIND_RATE_LIMIT, inflight,
                           learn, started, now);
    }

    if (o == NULL) {
        /* cancelled, or not the account's doing: neither way */
        opened = tb_breaker_record(&st->breaker, &zone->breaker,
                                   TB_OUT_NEUTRAL, (int) probed, now);

    } else {
        opened = tb_account_apply(st, o, &zone->breaker, model_hash,
                                  model, model_len, (int) probed, now);

        if (o->kind != TB_KIND_OK) {
            /* a cooldown, an exhaustion, a breaker the others should know */
            st->news = 1;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (o && o->kind != TB_KIND_OK) {
        __atomic_add_fetch(&st->failures_total, 1, __ATOMIC_RELAXED);
    }

    /* a breaker closed, a probe slot given back */
    ngx_http_tokenbiryani_capacity_changed(zone, now);

    return (ngx_uint_t) opened;
}


void
ngx_http_tokenbiryani_zone_set_enabled(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, ngx_uint_t enable, int64_t now)
{
    tb_account_state_t  *st;

    st = zone->sh->slots[slot];

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (enable) {
        tb_account_clear(st);

    } else {
        st->disabled = 1;
        st->disabled_ms = now;
        ngx_cpystrn((u_char *) st->disabled_reason,
                    (u_char *) "disabled by an operator",
                    sizeof(st->disabled_reason));
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    ngx_http_tokenbiryani_capacity_changed(zone, now);
}


void
ngx_http_tokenbiryani_zone_snapshot(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, tb_account_state_t *copy)
{
    ngx_shmtx_lock(&zone->shpool->mutex);
    ngx_memcpy(copy, zone->sh->slots[slot], sizeof(tb_account_state_t));
    ngx_shmtx_unlock(&zone->shpool->mutex);
}


const char *
ngx_http_tokenbiryani_zone_slot_id(ngx_http_tokenbiryani_zone_t *zone,
    int64_t slot)
{
    const tb_account_state_t  *st;

    st = ngx_http_tokenbiryani_zone_slot_state(zone, slot);

    return st ? st->id : NULL;
}


void
ngx_http_tokenbiryani_zone_objects_limited(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, int64_t until)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (slot < sh->nslots) {
        sh->slots[slot]->objects_until_ms = until;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


void
ngx_http_tokenbiryani_zone_unified(ngx_http_tokenbiryani_zone_t *zone,
    ngx_uint_t slot, tb_unified_t *out)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    tb_unified_init(out);

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (slot < sh->nslots) {
        *out = sh->slots[slot]->unified;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


const tb_account_state_t *
ngx_http_tokenbiryani_zone_slot_state(ngx_http_tokenbiryani_zone_t *zone,
    int64_t slot)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    /* slots are only ever added, and an id never changes */
    if (slot < 0 || (uint64_t) slot >= __atomic_load_n(&sh->nslots,
                                                        __ATOMIC_ACQUIRE))
    {
        return NULL;
    }

    return sh->slots[slot];
}


void
ngx_http_tokenbiryani_zone_count_affinity(ngx_http_tokenbiryani_zone_t *zone,
    ngx_int_t owner_slot, ngx_uint_t answered_slot, tb_affinity_e affinity)
{
    tb_account_state_t           *owner;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    __atomic_add_fetch(&sh->decisions, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&sh->affinity[affinity], 1, __ATOMIC_RELAXED);

    if (owner_slot < 0) {
        __atomic_add_fetch(&sh->slots[answered_slot]->sessions_placed, 1,
                           __ATOMIC_RELAXED);
        return;
    }

    owner = sh->slots[owner_slot];

    switch (affinity) {

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


void
ngx_http_tokenbiryani_zone_stats(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_zone_stats_t *stats)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    stats->generation = sh->generation;
    stats->created_ms = sh->created_ms;
    stats->aff_entries = sh->aff_entries;
    stats->aff_evicted = sh->aff_evicted;
    stats->aff_entry_size = sizeof(ngx_http_tokenbiryani_affinity_t);
    ngx_http_tokenbiryani_share_read(sh, &stats->share);
    ngx_memcpy(stats->affinity, sh->affinity, sizeof(stats->affinity));
    stats->leases_held = sh->nleases;
    stats->leases_reclaimed = sh->leases_reclaimed;
    stats->ring_size = sh->ring_size;
    stats->ring_seq = sh->ring_seq;
    stats->usage_size = sh->usage_size;
    stats->events_size = sh->events ? sh->events->size : 0;
    stats->spend_seq = sh->spend_seq;
    stats->nsessions = sh->nsessions;
    stats->sessions_evicted = sh->sessions_evicted;
    stats->failovers = sh->failovers;
    stats->queue_wait_ms = sh->queue_wait_ms;
    stats->queue_waits = sh->queue_waits;
    stats->zone_size = (size_t) (zone->shpool->end - (u_char *) zone->shpool);
    stats->zone_free = zone->shpool->pfree << ngx_pagesize_shift;
    stats->nslots = sh->nslots;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_uint_t
ngx_http_tokenbiryani_zone_nslots(ngx_http_tokenbiryani_zone_t *zone)
{
    return __atomic_load_n(&zone->sh->nslots, __ATOMIC_ACQUIRE);
}


void
ngx_http_tokenbiryani_zone_count_failover(ngx_http_tokenbiryani_zone_t *zone)
{
    (void) ngx_atomic_fetch_add(&zone->sh->failovers, 1);
}
