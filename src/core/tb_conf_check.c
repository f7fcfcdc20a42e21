/*
 * The configuration's rules across its entries, once every one is read
 * (part of the loader, tb_config.c): the accounts' ids and the keys'
 * secrets and names each unique, a key's pool naming accounts that exist,
 * one account of type oauth at most, a downshift's models plain ids; what
 * the keys' shares of the pool come to.
 */

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_body.h"
#include "tb_conf_int.h"
#include "tb_hash.h"
#include "tb_oauth.h"


/* "keys[1] (name tenant)": a key entry is never named by its key */
const char *
tb_conf_key_label(tb_config_t *cf, tb_key_conf_t *k, char *buf)
{
    char  show[TB_CONF_SHOWLEN];

    (void) snprintf(buf, TB_CONF_PATHLEN, "keys[%zu] (name %s)",
                    (size_t) (k - cf->keys), tb_conf_show(k->name, show));

    return buf;
}


/*
 * Of n items sorted by the string at str_off (then by line), the one that
 * repeats an earlier one's string and comes first in the file: its index,
 * or 0 when none repeats
 */
static size_t
tb_conf_dup(void **v, size_t n, size_t str_off, size_t line_off)
{
    size_t  i, best;

#define tb_conf_str(i)   (*(char **) (void *) ((char *) v[i] + str_off))
#define tb_conf_at(i)    (*(unsigned *) (void *) ((char *) v[i] + line_off))

    best = 0;

    for (i = 1; i < n; i++) {
        if (strcmp(tb_conf_str(i), tb_conf_str(i - 1)) == 0
            && (best == 0 || tb_conf_at(i) < tb_conf_at(best)))
        {
            best = i;
        }
    }

#undef tb_conf_str
#undef tb_conf_at

    return best;
}


static int
tb_conf_cmp_account_id(const void *one, const void *two)
{
    const tb_account_conf_t  *a, *b;

    a = *(const tb_account_conf_t *const *) one;
    b = *(const tb_account_conf_t *const *) two;

    return tb_conf_cmp_placed(a->id, a->line, b->id, b->line);
}


static int
tb_conf_find_account(const void *id, const void *elem)
{
    return strcmp(id, (*(const tb_account_conf_t *const *) elem)->id);
}


static int
tb_conf_cmp_key_secret(const void *one, const void *two)
{
    const tb_key_conf_t  *a, *b;

    a = *(const tb_key_conf_t *const *) one;
    b = *(const tb_key_conf_t *const *) two;

    return tb_conf_cmp_placed(a->key, a->line, b->key, b->line);
}


static int
tb_conf_cmp_key_name(const void *one, const void *two)
{
    const tb_key_conf_t  *a, *b;

    a = *(const tb_key_conf_t *const *) one;
    b = *(const tb_key_conf_t *const *) two;

    return tb_conf_cmp_placed(a->name, a->line, b->name, b->line);
}


/*
 * A key's fair share, where the file leaves it out: with two keys or more,
 * no key may hold more than three quarters of its pool's concurrency
 * (max_concurrency summed over the accounts it may use), nor more than
 * three quarters of the queue, so one greedy key always leaves room for
 * the others; with one key, nothing.  null says "no limit".
 */
static void
tb_conf_key_shares(tb_config_t *cf, tb_account_conf_t **sorted)
{
    size_t              i, j;
    int64_t             slots;
    tb_key_conf_t      *k;
    tb_account_conf_t  *a, **found;

    for (i = 0; i < cf->nkeys; i++) {
        k = &cf->keys[i];

        /* what the zone knows the key by */
        k->name_hash = tb_hash64(0, k->name, strlen(k->name));

        if (k->max_inflight == TB_AUTO) {
            k->max_inflight = TB_UNSET;

            if (cf->nkeys > 1) {
                slots = 0;

                if (k->pool.n == 0) {
                    for (j = 0; j < cf->naccounts; j++) {
                        slots += cf->accounts[j].max_concurrency;
                    }

                } else {
                    for (j = 0; j < k->pool.n; j++) {
                        found = bsearch(k->pool.items[j], sorted,
                                        cf->naccounts,
                                        sizeof(tb_account_conf_t *),
                                        tb_conf_find_account);
                        a = found ? *found : NULL;
                        slots += a ? a->max_concurrency : 0;
                    }
                }

                if (slots > 0) {
                    k->max_inflight = slots * 3 / 4 ? slots * 3 / 4 : 1;
                }
            }
        }

        if (k->max_queued == TB_AUTO) {
            k->max_queued = TB_UNSET;

            if (cf->nkeys > 1 && cf->queue_max_size > 0) {
                k->max_queued = cf->queue_max_size * 3 / 4
                                ? cf->queue_max_size * 3 / 4 : 1;
            }
        }
    }
}


/*
 * Checks across entries, once the whole file is read: keys may come
 * before the accounts their pools name.  Sorting keeps this O(n log n)
 * for a hostile file; of several repeats, the earliest in the file is
 * reported.
 */
int
tb_conf_validate(tb_conf_ctx_t *ctx)
{
    int                  rc;
    char                 l1[TB_CONF_PATHLEN], l2[TB_CONF_PATHLEN];
    char                 show[TB_CONF_SHOWLEN], show2[TB_CONF_SHOWLEN];
    size_t               i, j, best;
    tb_kv_t             *kv;
    tb_config_t         *cf;
    tb_key_conf_t      **keys, *k;
    tb_account_conf_t  **acc;

    cf = ctx->cf;
    acc = NULL;
    keys = NULL;
    rc = TB_CONF_OK;

    for (i = 0, j = 0; i < cf->naccounts; i++) {
        if (cf->accounts[i].type != TB_ACCOUNT_OAUTH) {
            continue;
        }

        if (j++) {
            return tb_conf_error(ctx, cf->accounts[i].line, "account %s: a "
                                 "second account of type oauth: "
                                 TB_OAUTH_TERMS, cf->accounts[i].id);
        }
    }

    for (i = 0; i < cf->pacing_model_downshift.n; i++) {
        kv = &cf->pacing_model_downshift.items[i];

        if (!tb_body_model_ok(kv->value, strlen(kv->value))) {
            return tb_conf_error(ctx, 0, "pacing.model_downshift.%s: \"%s\" "
                                 "is not a model id (printable ASCII, no "
                                 "quotes or backslashes)",
                                 tb_conf_show(kv->key, show2),
                                 tb_conf_show(kv->value, show));
        }
    }

    if (cf->naccounts > 0) {
        acc = malloc(cf->naccounts * sizeof(tb_account_conf_t *));
        if (acc == NULL) {
            return tb_conf_nomem(ctx);
        }

        for (i = 0; i < cf->naccounts; i++) {
            acc[i] = &cf->accounts[i];
        }

        qsort(acc, cf->naccounts, sizeof(tb_account_conf_t *),
              tb_conf_cmp_account_id);

        best = tb_conf_dup((void **) acc, cf->naccounts,
                           offsetof(tb_account_conf_t, id),
                           offsetof(tb_account_conf_t, line));

        if (best > 0) {
            rc = tb_conf_error(ctx, acc[best]->line, "account id \"%s\" is "
                               "used twice (lines %u and %u)",
                               tb_conf_show(acc[best]->id, show),
                               acc[best - 1]->line, acc[best]->line);
            goto done;
        }
    }

    if (cf->nkeys > 0) {
        keys = malloc(cf->nkeys * sizeof(tb_key_conf_t *));
        if (keys == NULL) {
            rc = tb_conf_nomem(ctx);
            goto done;
        }

        for (i = 0; i < cf->nkeys; i++) {
            keys[i] = &cf->keys[i];
        }

        qsort(keys, cf->nkeys, sizeof(tb_key_conf_t *),
              tb_conf_cmp_key_secret);

        best = tb_conf_dup((void **) keys, cf->nkeys,
                           offsetof(tb_key_conf_t, key),
                           offsetof(tb_key_conf_t, line));

        if (best > 0) {
            rc = tb_conf_error(ctx, keys[best]->line, "%s repeats the key of "
                               "%s at line %u: every key must be unique",
                               tb_conf_key_label(cf, keys[best], l1),
                               tb_conf_key_label(cf, keys[best - 1], l2),
                               keys[best - 1]->line);
            goto done;
        }

        qsort(keys, cf->nkeys, sizeof(tb_key_conf_t *), tb_conf_cmp_key_name);

        best = tb_conf_dup((void **) keys, cf->nkeys,
                           offsetof(tb_key_conf_t, name),
                           offsetof(tb_key_conf_t, line));

        if (best > 0) {
            rc = tb_conf_error(ctx, keys[best]->line, "keys[%zu]: name \"%s\" "
                               "is already used by keys[%zu] at line %u: "
                               "names must be unique",
                               (size_t) (keys[best] - cf->keys),
                               tb_conf_show(keys[best]->name, show),
                               (size_t) (keys[best - 1] - cf->keys),
                               keys[best - 1]->line);
            goto done;
        }
    }

    for (i = 0; i < cf->nkeys; i++) {
        k = &cf->keys[i];

        for (j = 0; j < k->pool.n; j++) {
            if (acc != NULL
                && bsearch(k->pool.items[j], acc, cf->naccounts,
                           sizeof(tb_account_conf_t *), tb_conf_find_account)
                   != NULL)
            {
                continue;
            }

            rc = tb_conf_error(ctx, k->line, "%s: pool names unknown "
                               "account %s", tb_conf_key_label(cf, k, l1),
                               tb_conf_show(k->pool.items[j], show));
            goto done;
        }
    }

    tb_conf_key_shares(cf, acc);

done:

    free(acc);
    free(keys);

    return rc;
}
