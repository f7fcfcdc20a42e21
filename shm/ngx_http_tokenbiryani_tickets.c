/*
 * The console's sign-in tickets: `tokenbiryani console` asks for one with
 * an admin key and puts it in the fragment of the console's address; the
 * page gives it back once and gets that key, which it keeps in the
 * browser.  A key never travels in a URL, and a ticket is good once,
 * within a minute.  Tickets live in the zone only, never in the store.
 */


#include "ngx_http_tokenbiryani_zone.h"


ngx_int_t
ngx_http_tokenbiryani_ticket_put(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, const u_char *key, size_t len, int64_t now)
{
    ngx_uint_t                            i;
    ngx_http_tokenbiryani_shm_t          *sh;
    ngx_http_tokenbiryani_ticket_slot_t  *t, *oldest;

    /* len 0: open mode, no key to give */
    if (len > NGX_HTTP_TB_TICKET_KEY_MAX) {
        return NGX_ERROR;
    }

    sh = zone->sh;

    ngx_shmtx_lock(&zone->shpool->mutex);

    /* a free place, one expired, or the oldest */

    oldest = &sh->tickets[0];

    for (i = 0; i < NGX_HTTP_TB_TICKETS; i++) {
        t = &sh->tickets[i];

        if (t->id[0] != '\0' && t->expires_ms <= now) {
            /* a key is kept no longer than its ticket is good */
            ngx_explicit_memzero(t,
                                 sizeof(ngx_http_tokenbiryani_ticket_slot_t));
        }

        /* a free place (expires_ms 0) sorts before any ticket */
        if (t->expires_ms < oldest->expires_ms) {
            oldest = t;
        }
    }

    ngx_explicit_memzero(oldest, sizeof(ngx_http_tokenbiryani_ticket_slot_t));
    ngx_memcpy(oldest->id, id, NGX_HTTP_TB_TICKET_LEN);
    if (len) {
        /* open mode: NULL, 0 */
        ngx_memcpy(oldest->key, key, len);
    }
    oldest->key_len = len;
    oldest->expires_ms = now + NGX_HTTP_TB_TICKET_MS;

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return NGX_OK;
}


ngx_int_t
ngx_http_tokenbiryani_ticket_take(ngx_http_tokenbiryani_zone_t *zone,
    const u_char *id, size_t id_len, u_char *key, size_t *len, int64_t now)
{
    u_char                                diff;
    ngx_int_t                             rc;
    ngx_uint_t                            i, k;
    ngx_http_tokenbiryani_shm_t          *sh;
    ngx_http_tokenbiryani_ticket_slot_t  *t;

    if (id_len != NGX_HTTP_TB_TICKET_LEN) {
        return NGX_DECLINED;
    }

    sh = zone->sh;
    rc = NGX_DECLINED;

    ngx_shmtx_lock(&zone->shpool->mutex);

    for (i = 0; i < NGX_HTTP_TB_TICKETS; i++) {
        t = &sh->tickets[i];

        if (t->id[0] == '\0') {
            continue;
        }

        if (t->expires_ms <= now) {
            /* a key is kept no longer than its ticket is good */
            ngx_explicit_memzero(t,
                                 sizeof(ngx_http_tokenbiryani_ticket_slot_t));
            continue;
        }

        /* compared whole, whatever differs first */
        diff = 0;

        for (k = 0; k < NGX_HTTP_TB_TICKET_LEN; k++) {
            diff |= t->id[k] ^ id[k];
        }

        if (diff) {
            continue;
        }

        if (t->key_len) {
            ngx_memcpy(key, t->key, t->key_len);
        }
        *len = t->key_len;
        rc = NGX_OK;

        /* once, used or not */
        ngx_explicit_memzero(t, sizeof(ngx_http_tokenbiryani_ticket_slot_t));
        break;
    }

    ngx_shmtx_unlock(&zone->shpool->mutex);

    return rc;
}
