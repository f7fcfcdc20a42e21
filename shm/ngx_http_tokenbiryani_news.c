/*
 * Gateways that share one pool (store.backend: redis): what this zone
 * tells the others about its accounts, what it takes from theirs, and the
 * share of every account's windows it holds.
 */


#include "ngx_http_tokenbiryani_zone.h"


/*
 * The live account another gateway speaks of: the same id with the same
 * credential (the same id with another credential is another account).
 * Under the lock.
 */

static tb_account_state_t *
ngx_http_tokenbiryani_zone_told_locked(ngx_http_tokenbiryani_shm_t *sh,
    const u_char *id, size_t len, const u_char fingerprint[8])
{
    ngx_uint_t           i;
    tb_account_state_t  *st;

    for (i = 0; i < sh->nslots; i++) {
        st = sh->slots[i];

        if (st->live && ngx_strlen(st->id) == len
            && ngx_strncmp(st->id, id, len) == 0
            && ngx_memcmp(st->fingerprint, fingerprint, 8) == 0)
        {
            return st;
        }
    }

    return NULL;
}


void
ngx_http_tokenbiryani_zone_withhold(ngx_http_tokenbiryani_zone_t *zone,
    uint32_t withheld, ngx_uint_t peers, int64_t now)
{
    uint32_t                      was;
    ngx_uint_t                    i;
    tb_account_state_t           *st;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    if (withheld > TB_SHARE_ONE) {
        withheld = TB_SHARE_ONE;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    was = sh->withheld;
    sh->withheld = withheld;

    if (peers) {
        sh->peers = peers;
        sh->granted_ms = now;

        /* once others were seen, Redis away or not */
        sh->shared |= (peers > 1);
    }

    for (i = 0; i < sh->nslots; i++) {
        st = sh->slots[i];

        if (st->shared != sh->shared) {
            tb_account_share(st, sh->shared);
        }

        /* the slices take their new share of the limit */
        tb_slice_reshare(st, withheld, now);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (withheld < was) {
        /* a larger share: waiters may fit now */
        ngx_http_tokenbiryani_capacity_changed(zone, now);
    }
}


void
ngx_http_tokenbiryani_zone_share(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_share_state_t *ss)
{
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    ss->withheld = sh->withheld;
    ss->peers = sh->peers;
    ss->granted_ms = sh->granted_ms;
    ss->decisions = sh->decisions;
    ss->waiting = sh->nwaiting;

    ngx_shmtx_unlock(&zone->shpool->mutex);
}


ngx_uint_t
ngx_http_tokenbiryani_zone_news(ngx_http_tokenbiryani_zone_t *zone,
    int64_t now, ngx_http_tokenbiryani_news_t *out, ngx_uint_t max)
{
    int64_t                       holds[2];
    ngx_uint_t                    i, n;
    tb_account_state_t           *st;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (i = 0; i < sh->nslots && n < max; i++) {
        st = sh->slots[i];

        if (!st->live) {
            continue;
        }

        holds[0] = tb_account_held(st, TB_WIN_REQUESTS, now);
        holds[1] = tb_account_held(st, TB_WIN_INPUT, now);

        if (!st->news && holds[0] == st->told_holds[0]
            && holds[1] == st->told_holds[1])
        {
            continue;
        }

        st->news = 0;
        st->told_holds[0] = holds[0];
        st->told_holds[1] = holds[1];

        tb_account_news(st, &zone->breaker, zone->spend_bucket_ms, now,
                        &out[n].news);
        ngx_memcpy(out[n].id, st->id, sizeof(st->id));
        ngx_memcpy(out[n].fingerprint, st->fingerprint, 8);
        n++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


ngx_uint_t
ngx_http_tokenbiryani_zone_adopt(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len, const u_char fingerprint[8],
    const tb_account_news_t *news, uint64_t who, int64_t now)
{
    unsigned             taken;
    tb_account_state_t  *st;

    taken = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    st = ngx_http_tokenbiryani_zone_told_locked(zone->sh, id, len,
                                                fingerprint);
    if (st) {
        taken = tb_account_adopt(st, news, who, now) | 0x100;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (taken) {
        /* a window read more recently may hold more than was thought */
        ngx_http_tokenbiryani_capacity_changed(zone, now);
    }

    return taken != 0;
}


ngx_uint_t
ngx_http_tokenbiryani_zone_orgs(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_org_news_t *out, ngx_uint_t max)
{
    ngx_uint_t                    i, n;
    tb_account_state_t           *st;
    ngx_http_tokenbiryani_shm_t  *sh;

    sh = zone->sh;
    n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (i = 0; i < sh->nslots && n < max; i++) {
        st = sh->slots[i];

        if (!st->live || st->org_told || st->org[0] == '\0') {
            continue;
        }

        st->org_told = 1;

        ngx_memcpy(out[n].id, st->id, sizeof(st->id));
        ngx_memcpy(out[n].fingerprint, st->fingerprint, 8);
        ngx_memcpy(out[n].org, st->org, TB_ORG_MAX);
        n++;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return n;
}


ngx_uint_t
ngx_http_tokenbiryani_zone_adopt_org(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len, const u_char fingerprint[8],
    const u_char *org, size_t org_len, int64_t now)
{
    ngx_uint_t                    moved;
    tb_account_state_t           *st;
    ngx_http_tokenbiryani_shm_t  *sh;

    if (org_len == 0) {
        return 0;
    }

    sh = zone->sh;
    moved = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    st = ngx_http_tokenbiryani_zone_told_locked(sh, id, len, fingerprint);

    if (st) {
        /* what the other read of it is as good as an answer here; theirs,
         * already told */
        moved = ngx_http_tokenbiryani_zone_learn_org_locked(sh, st, org,
                                                            org_len, 1);
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    if (moved) {
        /* a domain left may hold more than was thought */
        ngx_http_tokenbiryani_capacity_changed(zone, now);
    }

    return moved;
}
