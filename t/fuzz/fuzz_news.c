/*
 * libFuzzer: an account's news as another gateway sends it through the
 * shared store - scanned, and when it scans, printed back to exactly the
 * same numbers, and folded without harm into a state alone and into one
 * that shares the pool (its slices begun on a reading of its own).
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_account.h"
#include "tb_lease.h"

#define NOW  1700000000000LL


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int                  probed;
    char                 buf[TB_NEWS_MAX + 1];
    size_t               n;
    tb_need_t            need;
    tb_rl_obs_t          obs;
    tb_account_conf_t    conf;
    tb_breaker_conf_t    bc;
    tb_account_news_t    news, again;
    tb_account_state_t  *a;
    unsigned char        fp[8] = { 0 };

    if (!tb_account_news_scan(&news, (const char *) data, size)) {
        return 0;
    }

    n = tb_account_news_print(&news, buf);

    if (n > TB_NEWS_MAX || !tb_account_news_scan(&again, buf, n)
        || memcmp(&news, &again, sizeof(news)) != 0)
    {
        abort();
    }

    a = calloc(1, sizeof(tb_account_state_t));
    if (a == NULL) {
        return 0;
    }

    tb_account_state_init(a, "a", sizeof("a") - 1, fp);
    (void) tb_account_adopt(a, &news, 7, NOW);
    (void) tb_window_available(a, TB_WIN_INPUT, NOW);

    /* shared, half of it, a reading of its own, a lease, the news again */
    tb_account_state_init(a, "a", sizeof("a") - 1, fp);
    tb_account_share(a, 1);
    tb_slice_reshare(a, TB_SHARE_ONE / 2, NOW - 2000);

    tb_rl_obs_init(&obs);
    obs.seq = 1;
    obs.sent_ms = NOW - 1500;
    obs.v[TB_WIN_REQUESTS][TB_RL_LIMIT] = 60;
    obs.v[TB_WIN_REQUESTS][TB_RL_REMAINING] = 30;
    obs.v[TB_WIN_REQUESTS][TB_RL_RESET] = NOW + 30000;
    obs.has = 7u;
    (void) tb_account_observe(a, &obs, NOW - 1000);

    memset(&need, 0, sizeof(need));
    need.n[TB_WIN_REQUESTS] = 1;
    need.n[TB_WIN_INPUT] = 1000;
    memset(&conf, 0, sizeof(conf));
    conf.max_concurrency = 10;
    memset(&bc, 0, sizeof(bc));
    bc.threshold = 5;
    bc.cooldown_ms = 30000;
    (void) tb_lease_reserve(a, &conf, &bc, &need, NOW - 900, &probed);

    (void) tb_account_adopt(a, &news, 7, NOW);
    (void) tb_slice_left(a, TB_WIN_REQUESTS, NOW + 60000);
    (void) tb_fits_at(a, &need, NOW);
    tb_slice_reshare(a, TB_SHARE_ONE / 4, NOW + 100);
    (void) tb_window_available(a, TB_WIN_INPUT, NOW + 200);

    free(a);

    return 0;
}
