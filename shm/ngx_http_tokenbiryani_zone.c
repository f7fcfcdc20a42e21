/*
 * The zone's common ground, called by every file of shm/ and calling none
 * of them: its memory (allocation that evicts what is expendable, through
 * evictors the files that own such things register), the lookup in its
 * trees, the accounts' slots, and whether a worker that holds something is
 * gone.
 */


#include "ngx_http_tokenbiryani_zone.h"


ngx_rbtree_node_t *
ngx_http_tokenbiryani_rbtree_find(ngx_rbtree_t *tree, uint64_t k)
{
    ngx_rbtree_key_t    key;
    ngx_rbtree_node_t  *node, *sentinel;

    key = (ngx_rbtree_key_t) k;
    node = tree->root;
    sentinel = tree->sentinel;

    while (node != sentinel) {

        if (key < node->key) {
            node = node->left;
            continue;
        }

        if (key > node->key) {
            node = node->right;
            continue;
        }

        return node;
    }

    return NULL;
}


/*
 * The zone's memory: when an allocation fails, what the zone holds that is
 * expendable makes room, the evictors in the order they were registered
 * (the least recently used sessions, then the least recently charged
 * conversations that no lease holds), one thing at a time.  Under the lock.
 */

void *
ngx_http_tokenbiryani_alloc_locked(ngx_http_tokenbiryani_zone_t *zone,
    size_t size)
{
    void        *p;
    ngx_uint_t   i, e;

    for (i = 0; i < 64; i++) {
        p = ngx_slab_alloc_locked(zone->shpool, size);
        if (p) {
            return p;
        }

        for (e = 0; e < zone->nevictors; e++) {
            if (zone->evictors[e](zone)) {
                break;
            }
        }

        if (e == zone->nevictors) {
            /* nothing left to give */
            return NULL;
        }
    }

    return NULL;
}


void
ngx_http_tokenbiryani_evictor_add(ngx_http_tokenbiryani_zone_t *zone,
    ngx_http_tokenbiryani_evict_pt evict)
{
    ngx_uint_t  e;

    for (e = 0; e < zone->nevictors; e++) {
        if (zone->evictors[e] == evict) {
            return;
        }
    }

    if (zone->nevictors < NGX_HTTP_TB_EVICTORS) {
        zone->evictors[zone->nevictors++] = evict;
    }
}


ngx_int_t
ngx_http_tokenbiryani_zone_find_locked(ngx_http_tokenbiryani_shm_t *sh,
    const u_char *id, size_t len, const u_char *fingerprint, ngx_uint_t live)
{
    ngx_uint_t           i;
    tb_account_state_t  *st;

    for (i = 0; i < sh->nslots; i++) {
        st = sh->slots[i];

        if ((st->live || !live)
            && ngx_strlen(st->id) == len
            && ngx_strncmp(st->id, id, len) == 0
            && (fingerprint == NULL
                || ngx_memcmp(st->fingerprint, fingerprint, 8) == 0))
        {
            return (ngx_int_t) i;
        }
    }

    return -1;
}


tb_account_state_t *
ngx_http_tokenbiryani_zone_slot_locked(ngx_http_tokenbiryani_shm_t *sh,
    ngx_slab_pool_t *shpool, ngx_http_tokenbiryani_zone_account_t *za,
    ngx_uint_t *index)
{
    ngx_int_t            found;
    ngx_uint_t           n;
    tb_account_state_t  *slot, **slots;

    /*
     * A slot belongs to an id *and* a credential + host fingerprint: when a
     * reload gives an id another credential, that is another account with
     * its own limits, so it gets a fresh slot while workers of the
     * previous configuration finish on the old one.
     */

    found = ngx_http_tokenbiryani_zone_find_locked(sh, za->id, za->id_len,
                                                   za->fingerprint, 0);
    if (found >= 0) {
        *index = (ngx_uint_t) found;
        return sh->slots[found];
    }

    if (sh->nslots == sh->slots_size) {
        n = sh->slots_size ? sh->slots_size * 2 : 16;

        slots = ngx_slab_calloc_locked(shpool,
                                       n * sizeof(tb_account_state_t *));
        if (slots == NULL) {
            return NULL;
        }

        /*
         * The old table is not freed: workers of the previous
         * configuration still index it without the lock.  Doubling keeps
         * what is left behind smaller than the table in use.
         */

        if (sh->nslots) {
            ngx_memcpy(slots, sh->slots,
                       sh->nslots * sizeof(tb_account_state_t *));
        }

        __atomic_store_n(&sh->slots, slots, __ATOMIC_RELEASE);
        sh->slots_size = n;
    }

    slot = ngx_slab_calloc_locked(shpool, sizeof(tb_account_state_t));
    if (slot == NULL) {
        return NULL;
    }

    tb_account_state_init(slot, (char *) za->id, za->id_len, za->fingerprint);
    slot->withheld = sh->withheld;
    tb_account_share(slot, sh->shared);

    *index = sh->nslots;
    sh->slots[sh->nslots] = slot;
    __atomic_store_n(&sh->nslots, sh->nslots + 1, __ATOMIC_RELEASE);

    return slot;
}


ngx_uint_t
ngx_http_tokenbiryani_owner_gone(ngx_http_tokenbiryani_owners_t *owners,
    ngx_pid_t pid)
{
    ngx_uint_t  i, gone;

    if (pid == ngx_pid) {
        return 0;
    }

    for (i = 0; i < owners->n; i++) {
        if (owners->pid[i] == pid) {
            return owners->gone[i];
        }
    }

    gone = (kill(pid, 0) == -1 && ngx_errno == NGX_ESRCH);

    if (owners->n < 8) {
        owners->pid[owners->n] = pid;
        owners->gone[owners->n] = (u_char) gone;
        owners->n++;
    }

    return gone;
}


ngx_uint_t
ngx_http_tokenbiryani_elect(ngx_http_tokenbiryani_zone_t *zone,
    ngx_pid_t *who, ngx_pid_t pid)
{
    ngx_uint_t                      mine;
    ngx_http_tokenbiryani_owners_t  owners;

    owners.n = 0;

    ngx_shmtx_lock(&zone->shpool->mutex);

    if (*who == 0
        || (*who != pid && ngx_http_tokenbiryani_owner_gone(&owners, *who)))
    {
        *who = pid;
    }

    mine = (*who == pid);

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return mine;
}


/* the id's slot: a live one, or (create) whatever its credential, or a
 * new one; -1 when there is none */
static ngx_int_t
ngx_http_tokenbiryani_zone_slot(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len, ngx_uint_t create)
{
    ngx_int_t                             found;
    ngx_uint_t                            i;
    ngx_http_tokenbiryani_shm_t          *sh;
    tb_account_state_t                   *slot;
    ngx_http_tokenbiryani_zone_account_t  za;

    sh = zone->sh;

    if (len == 0 || len > TB_ID_MAX) {
        return -1;
    }

    ngx_shmtx_lock(&zone->shpool->mutex);

    found = ngx_http_tokenbiryani_zone_find_locked(sh, id, len, NULL, !create);

    if (found < 0 && create) {
        ngx_memzero(&za, sizeof(za));
        za.id = (u_char *) id;
        za.id_len = len;

        slot = ngx_http_tokenbiryani_zone_slot_locked(sh, zone->shpool, &za,
                                                      &i);
        if (slot) {
            found = (ngx_int_t) i;
        }
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return found;
}


ngx_int_t
ngx_http_tokenbiryani_zone_slot_of(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len)
{
    return ngx_http_tokenbiryani_zone_slot(zone, id, len, 1);
}


ngx_int_t
ngx_http_tokenbiryani_zone_slot_find(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t len)
{
    return ngx_http_tokenbiryani_zone_slot(zone, id, len, 0);
}
