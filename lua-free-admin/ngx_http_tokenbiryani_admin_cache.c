/*
 * tokenbiryani: GET /admin/cache-advice - is the prompt cache even on.
 * Over the Messages the inspector holds, by key and model: how many asked
 * for a cache breakpoint, the stable prefix they carried (system and
 * tools), how much of their prompts a cache served, and a verdict that
 * tells a client that sends no breakpoint from a routing that loses the
 * cache from a prefix too small to cache - once a group has
 * cache.advice_min_requests answers.
 */


#include "ngx_http_tokenbiryani.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_admin.h"


/* the API caches a prefix of at least this many tokens (the smaller
 * models' floor is higher; this is the least any caches) */
#define NGX_HTTP_TB_CACHE_MIN_TOKENS   TB_BODY_CACHEABLE_TOKENS

/* bytes of a system or tools value to a token, as the reference reads
 * them */
#define NGX_HTTP_TB_BYTES_PER_TOKEN    3.5


typedef struct {
    const char                    *key;
    const char                    *model;
    ngx_uint_t                     n;
    ngx_uint_t                     breakpoints;
    int64_t                        prefix;        /* tokens, summed */
    int64_t                        input;         /* uncached */
    int64_t                        read;
    int64_t                        write;
} ngx_http_tokenbiryani_cache_group_t;


static cJSON *ngx_http_tokenbiryani_cache_group_json(cJSON *arr,
    const ngx_http_tokenbiryani_cache_group_t *g, ngx_uint_t min);


ngx_int_t
ngx_http_tokenbiryani_admin_cache_advice(ngx_http_request_t *r)
{
    ngx_uint_t                            i, j, n, ngroups;
    cJSON                                *root, *arr;
    ngx_http_tokenbiryani_record_t       *recs, *rec;
    ngx_http_tokenbiryani_zone_stats_t    zs;
    ngx_http_tokenbiryani_main_conf_t    *tmcf;
    ngx_http_tokenbiryani_cache_group_t  *groups, *g;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                   "invalid_request_error", "%V expects GET, not %V",
                   &r->uri, &r->method_name);
    }

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    ngx_http_tokenbiryani_zone_stats(&tmcf->zone, &zs);

    recs = ngx_palloc(r->pool, (zs.ring_size + 1)
                               * sizeof(ngx_http_tokenbiryani_record_t));
    groups = ngx_pcalloc(r->pool, (zs.ring_size + 1)
                                  * sizeof(ngx_http_tokenbiryani_cache_group_t));
    if (recs == NULL || groups == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = ngx_http_tokenbiryani_inspect_list(&tmcf->zone, recs, zs.ring_size);
    ngroups = 0;

    for (i = 0; i < n; i++) {
        rec = &recs[i];

        /* a Message answered, with its usage */
        if (rec->kind != NGX_HTTP_TB_MESSAGES || rec->status != NGX_HTTP_OK
            || rec->usage.input_tokens < 0)
        {
            continue;
        }

        for (j = 0; j < ngroups; j++) {
            if (ngx_strcmp(groups[j].key, rec->key) == 0
                && ngx_strcmp(groups[j].model, rec->model) == 0)
            {
                break;
            }
        }

        g = &groups[j];

        if (j == ngroups) {
            g->key = rec->key;
            g->model = rec->model;
            ngroups++;
        }

        g->n++;
        g->breakpoints += rec->breakpoint;
        g->prefix += (int64_t) (rec->prefix_64b * 64
                                / NGX_HTTP_TB_BYTES_PER_TOKEN);
        g->input += rec->usage.input_tokens;
        g->read += ngx_max(rec->usage.cache_read_input_tokens, 0);
        g->write += ngx_max(rec->usage.cache_creation_input_tokens, 0);
    }

    arr = ngx_http_tokenbiryani_json_doc(&root, "groups",
                                         cJSON_AddArrayToObject);
    if (arr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (j = 0; j < ngroups; j++) {
        if (ngx_http_tokenbiryani_cache_group_json(arr, &groups[j],
                (ngx_uint_t) tmcf->tbcf->cache_advice_min_requests)
            == NULL)
        {
            return ngx_http_tokenbiryani_cjson_fail(root);
        }
    }

    if (cJSON_AddNumberToObject(root, "requests_read", (double) n) == NULL
        || cJSON_AddNumberToObject(root, "min_requests",
               (double) tmcf->tbcf->cache_advice_min_requests) == NULL)
    {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
}


static cJSON *
ngx_http_tokenbiryani_cache_group_json(cJSON *arr,
    const ngx_http_tokenbiryani_cache_group_t *g, ngx_uint_t min)
{
    double   rate, hit;
    int64_t  prefix, prompt;
    cJSON   *o;
    char     says[384];

    o = cJSON_CreateObject();
    if (o == NULL) {
        return NULL;
    }

    cJSON_AddItemToArray(arr, o);

    rate = (double) g->breakpoints / g->n;
    prefix = g->prefix / (int64_t) g->n;
    prompt = g->input + g->read + g->write;
    hit = prompt ? (double) g->read / prompt : 0;

    if (g->n < min) {
        ngx_snprintf((u_char *) says, sizeof(says),
                     "%ui of the %ui answers a verdict waits for%Z", g->n,
                     min);

    } else if (rate < .5 && prefix < NGX_HTTP_TB_CACHE_MIN_TOKENS) {
        ngx_snprintf((u_char *) says, sizeof(says),
                     "no cache_control breakpoint, and the stable prefix is "
                     "about %L tokens: under %d, too small to cache - "
                     "nothing to fix here%Z", prefix,
                     NGX_HTTP_TB_CACHE_MIN_TOKENS);

    } else if (rate < .5) {
        ngx_snprintf((u_char *) says, sizeof(says),
                     "no cache_control breakpoint on a stable prefix of "
                     "about %L tokens: caching never engages, and no "
                     "routing can recover it - the client must mark its "
                     "prefix with cache_control%Z", prefix);

    } else if (hit < .2) {
        ngx_snprintf((u_char *) says, sizeof(says),
                     "breakpoints sent, hit rate %d%%: conversations are "
                     "moving between accounts (see the accounts' cache "
                     "breaks), or their prefixes change from turn to turn%Z",
                     (int) (hit * 100 + .5));

    } else {
        ngx_snprintf((u_char *) says, sizeof(says),
                     "caching is engaged and working: %d%% of the prompt "
                     "tokens read from a cache%Z", (int) (hit * 100 + .5));
    }

    if (cJSON_AddStringToObject(o, "key", g->key) == NULL
        || cJSON_AddStringToObject(o, "model", g->model) == NULL
        || cJSON_AddNumberToObject(o, "requests", (double) g->n) == NULL
        || cJSON_AddNumberToObject(o, "breakpoint_rate", rate) == NULL
        || cJSON_AddNumberToObject(o, "mean_prefix_tokens", (double) prefix)
           == NULL
        || cJSON_AddNumberToObject(o, "cache_hit_rate", hit) == NULL
        || cJSON_AddNumberToObject(o, "uncached_input_tokens",
                                   (double) g->input) == NULL
        || cJSON_AddNumberToObject(o, "cache_read_tokens", (double) g->read)
           == NULL
        || cJSON_AddNumberToObject(o, "cache_write_tokens", (double) g->write)
           == NULL
        || (g->n < min ? cJSON_AddNullToObject(o, "verdict")
                       : cJSON_AddStringToObject(o, "verdict",
                             rate < .5 && prefix < NGX_HTTP_TB_CACHE_MIN_TOKENS
                             ? "too small"
                             : rate < .5 ? "no breakpoint"
                             : hit < .2 ? "routing" : "working")) == NULL
        || cJSON_AddStringToObject(o, "says", says) == NULL)
    {
        return NULL;
    }

    return o;
}
