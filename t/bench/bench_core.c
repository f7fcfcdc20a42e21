/*
 * Micro-benchmarks of src/core, without nginx:
 *
 *   bench_core decide N ACCOUNTS   N route decisions over ACCOUNTS accounts
 *   bench_core scan N SIZE         N scans (+ session key + estimate) of an
 *                                  agent-style body of SIZE bytes
 *   bench_core report              everything, as a markdown table
 *
 * The first two are what `make bench-core` runs under callgrind, which
 * counts instructions (stable on a busy machine); "report" measures
 * wall-clock time per operation in the same process.  Not a test: it
 * prints figures and asserts nothing.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tb_router.h"
#include "tb_session.h"
#include "tb_hash.h"


#define T0  1795984859000LL


typedef struct {
    tb_config_t         *cf;
    tb_account_conf_t   *conf;
    tb_account_state_t  *st;
    tb_cand_t           *cand;
    tb_cand_out_t       *out;
    char               **ids;
    size_t               n;
} bench_pool_t;


static char  *star[] = { "*" };


static double
now_ns(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (double) ts.tv_sec * 1e9 + (double) ts.tv_nsec;
}


static void
pool_init(bench_pool_t *p, size_t n)
{
    size_t         i;
    unsigned char  fp[8] = { 0 };

    p->cf = tb_config_defaults();
    p->n = n;
    p->conf = calloc(n, sizeof(tb_account_conf_t));
    p->st = calloc(n, sizeof(tb_account_state_t));
    p->cand = calloc(n, sizeof(tb_cand_t));
    p->out = calloc(n, sizeof(tb_cand_out_t));
    p->ids = calloc(n, sizeof(char *));

    for (i = 0; i < n; i++) {
        p->ids[i] = malloc(32);
        snprintf(p->ids[i], 32, "acct-%04zu", i);

        p->conf[i].id = p->ids[i];
        p->conf[i].cost_tier = 1.0 + (double) (i % 3) * 0.5;
        p->conf[i].priority = 0;
        p->conf[i].max_concurrency = 16;
        p->conf[i].spend_cap_usd = TB_UNSET;
        p->conf[i].enabled = 1;
        p->conf[i].observable_limits = 1;
        p->conf[i].assumed_headroom = 0.5;
        p->conf[i].models.items = star;
        p->conf[i].models.n = 1;
        p->conf[i].models_any = 1;          /* as the loader sets it */

        tb_account_state_init(&p->st[i], p->ids[i], fp);

        /* a realistic mirror: every window seen, partly used */
        p->st[i].mirror.observed_ms = T0;
        p->st[i].mirror.w[TB_WIN_REQUESTS] = (tb_window_t) {
            4000, 3000 + (int64_t) (i * 37 % 900), T0 + 20000, T0 };
        p->st[i].mirror.w[TB_WIN_INPUT] = (tb_window_t) {
            2000000, 800000 + (int64_t) (i * 7919 % 900000), T0 + 30000, T0 };
        p->st[i].mirror.w[TB_WIN_OUTPUT] = (tb_window_t) {
            400000, 200000 + (int64_t) (i * 104729 % 150000), T0 + 30000,
            T0 };
        p->st[i].inflight = (int64_t) (i % 5);
        p->st[i].noutcomes = 50;
        p->st[i].outcomes = (i % 7) ? 0 : 1;
        p->st[i].nfailures = (i % 7) ? 0 : 1;

        p->cand[i].conf = &p->conf[i];
        p->cand[i].st = &p->st[i];
        p->cand[i].id_hash = tb_hash64(0, p->ids[i], strlen(p->ids[i]));
        p->cand[i].supported = 1;
        p->cand[i].in_pool = 1;
    }
}


static void
route_input(bench_pool_t *p, tb_route_in_t *in)
{
    memset(in, 0, sizeof(tb_route_in_t));

    in->strategy = tb_strategy_builtin("sticky_headroom");
    in->weights[TB_T_AFFINITY] = p->cf->w_affinity;
    in->weights[TB_T_HEADROOM] = p->cf->w_headroom;
    in->weights[TB_T_PRIORITY] = p->cf->w_priority;
    in->weights[TB_T_LOAD] = p->cf->w_load;
    in->weights[TB_T_ERRORS] = p->cf->w_errors;
    in->weights[TB_T_COST] = p->cf->w_cost;
    in->model = "claude-sonnet-4-6";
    in->model_len = 17;
    in->need.n[TB_WIN_REQUESTS] = 1;
    in->need.n[TB_WIN_INPUT] = 20000;
    in->need.n[TB_WIN_OUTPUT] = 2000;
    in->need.max_tokens = 32000;
    in->owner = (int) (p->n / 3);
    in->now = T0 + 5000;
}


static int
decide(bench_pool_t *p, tb_route_in_t *in, unsigned long k)
{
    tb_decision_t  d;

    in->session = 0x9e3779b97f4a7c15ULL * (k + 1);
    tb_route(in, p->cand, p->n, p->out, &d);

    return d.chosen;
}


/* an agent-style body: a long system prompt, tools, a growing history */

static char *
agent_body(size_t size, size_t *len)
{
    char    *b, *q;
    size_t   i, turn;

    b = malloc(size + 65536);
    q = b;

    q += sprintf(q, "{\"model\":\"claude-sonnet-4-6\",\"max_tokens\":32000,"
                    "\"stream\":true,\"system\":[{\"type\":\"text\",\"text\":"
                    "\"You are Claude Code, an interactive CLI tool. ");

    for (i = 0; i < 40; i++) {
        q += sprintf(q, "Rule %zu: follow the conventions of the code base "
                        "you are working in and explain briefly.\\n", i);
    }

    q += sprintf(q, "\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
                    "\"tools\":[");

    for (i = 0; i < 12; i++) {
        q += sprintf(q, "%s{\"name\":\"tool_%zu\",\"description\":\"A tool "
                        "that does thing number %zu with care.\","
                        "\"input_schema\":{\"type\":\"object\",\"properties\":"
                        "{\"path\":{\"type\":\"string\"}}}}", i ? "," : "",
                     i, i);
    }

    q += sprintf(q, "],\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                    "\"text\",\"text\":\"Please fix the failing test.\"}]}");

    for (turn = 0; (size_t) (q - b) + 600 < size; turn++) {
        q += sprintf(q, ",{\"role\":\"assistant\",\"content\":[{\"type\":"
                        "\"tool_use\",\"id\":\"toolu_%zu\",\"name\":\"tool_1\","
                        "\"input\":{\"path\":\"src/file_%zu.c\"}}]},"
                        "{\"role\":\"user\",\"content\":[{\"type\":"
                        "\"tool_result\",\"tool_use_id\":\"toolu_%zu\","
                        "\"content\":\"", turn, turn, turn);

        for (i = 0; i < 6 && (size_t) (q - b) + 200 < size; i++) {
            q += sprintf(q, "    if (rc != NGX_OK) {\\n        return rc;"
                            "\\n    }\\n");
        }

        q += sprintf(q, "\"}]}");
    }

    q += sprintf(q, "]}");

    *len = (size_t) (q - b);

    return b;
}


static void
scan_once(const char *body, size_t len)
{
    char                 err[128];
    tb_body_t            b;
    tb_session_source_e  src;

    if (tb_scan_body((const unsigned char *) body, len, &b, err, sizeof(err))
        != 0)
    {
        fprintf(stderr, "bench: %s\n", err);
        exit(1);
    }

    (void) tb_session_key((const unsigned char *) body, len, &b, NULL, 0,
                          "tenant", 6, &src);
    (void) tb_estimate_input((const unsigned char *) body, len, &b);
}


static double
time_decisions(size_t accounts, unsigned long n)
{
    double         t;
    unsigned long  k;
    bench_pool_t   p;
    tb_route_in_t  in;

    pool_init(&p, accounts);
    route_input(&p, &in);

    for (k = 0; k < n / 10; k++) {
        (void) decide(&p, &in, k);           /* warm up */
    }

    t = now_ns();

    for (k = 0; k < n; k++) {
        (void) decide(&p, &in, k);
    }

    return (now_ns() - t) / (double) n;
}


static double
time_scan(size_t size, unsigned long n, size_t *len)
{
    char          *body;
    double         t;
    unsigned long  k;

    body = agent_body(size, len);

    scan_once(body, *len);

    t = now_ns();

    for (k = 0; k < n; k++) {
        scan_once(body, *len);
    }

    t = (now_ns() - t) / (double) n;
    free(body);

    return t;
}


int
main(int argc, char **argv)
{
    size_t         len, size;
    double         ns16, ns1k, ns10k, ns1m;
    unsigned long  n, k;
    bench_pool_t   p;
    tb_route_in_t  in;
    char          *body;

    if (argc == 4 && strcmp(argv[1], "decide") == 0) {
        n = strtoul(argv[2], NULL, 10);
        pool_init(&p, strtoul(argv[3], NULL, 10));
        route_input(&p, &in);

        for (k = 0; k < n; k++) {
            (void) decide(&p, &in, k);
        }

        return 0;
    }

    if (argc == 4 && strcmp(argv[1], "scan") == 0) {
        n = strtoul(argv[2], NULL, 10);
        size = strtoul(argv[3], NULL, 10);
        body = agent_body(size, &len);

        for (k = 0; k < n; k++) {
            scan_once(body, len);
        }

        free(body);
        return 0;
    }

    ns16 = time_decisions(16, 200000);
    ns1k = time_decisions(1000, 5000);
    ns10k = time_scan(10 * 1024, 20000, &len);
    printf("| body scan, %zu-byte agent body | %.0f ns | %.0f MB/s |\n", len,
           ns10k, (double) len / ns10k * 1e3);
    ns1m = time_scan(1024 * 1024, 300, &len);
    printf("| body scan, %zu-byte agent body | %.0f ns | %.0f MB/s |\n", len,
           ns1m, (double) len / ns1m * 1e3);
    printf("| route decision, 16 accounts | %.0f ns | |\n", ns16);
    printf("| route decision, 1000 accounts | %.0f ns | |\n", ns1k);

    return 0;
}
