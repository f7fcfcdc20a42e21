/*
 * /admin/keys: virtual keys minted, listed, rescoped and revoked at
 * runtime.
 *
 *   GET    /admin/keys          every key, the file's and the minted ones
 *   POST   /admin/keys          mints: 201 {"key": "bir_...", "record"}
 *   GET    /admin/keys/{name}   one key
 *   PATCH  /admin/keys/{name}   rescopes a minted key
 *   DELETE /admin/keys/{name}   revokes a minted key
 *
 * A key's secret appears once, in the answer that minted it; the zone
 * and the store keep its SHA-256 digest.  With a store, a write answers
 * once its row is committed, and the zone - every worker - has it from
 * then on; a store that cannot be written changes nothing and says so.
 * The YAML file's keys are the file's: listed, never changed (409).
 */


#include "ngx_http_tokenbiryani.h"
#include "tb_parse.h"
#include "ngx_http_tokenbiryani_error.h"
#include "ngx_http_tokenbiryani_keys.h"
#include "ngx_http_tokenbiryani_accounts.h"
#include "ngx_http_tokenbiryani_store.h"
#include "ngx_http_tokenbiryani_admin.h"


typedef struct {
    ngx_http_tokenbiryani_admin_write_t   w;       /* w.name: the key's */
    ngx_uint_t                            op;
    char                                 *spec;
    char                                  secret[TB_KEYSPEC_SECRET_LEN + 1];
    u_char                                digest[32];
} ngx_http_tokenbiryani_key_write_t;


static ngx_int_t ngx_http_tokenbiryani_keys_write(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w, u_char *body, size_t len);
static ngx_int_t ngx_http_tokenbiryani_keys_apply(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w);
static void ngx_http_tokenbiryani_keys_done(
    ngx_http_tokenbiryani_admin_write_t *w);
static cJSON *ngx_http_tokenbiryani_key_record(const tb_keyspec_t *ks,
    const char *source);
static const tb_keyspec_t *ngx_http_tokenbiryani_minted(
    ngx_http_tokenbiryani_main_conf_t *tmcf, const u_char *name, size_t len,
    ngx_uint_t *n);

/* the digest of the key ngx_http_tokenbiryani_minted() found last */
static u_char  ngx_http_tokenbiryani_minted_digest[32];


static const ngx_http_tokenbiryani_admin_resource_t
    ngx_http_tokenbiryani_key_resource =
{
    "key", "a key named",
    "nothing was changed: the store cannot be written",
    ngx_http_tokenbiryani_keys_write,
    ngx_http_tokenbiryani_keys_apply,
    ngx_http_tokenbiryani_keys_done
};


/* the name in /admin/keys/{name}; an empty one for /admin/keys */
static ngx_str_t *
ngx_http_tokenbiryani_keys_name(ngx_http_request_t *r)
{
    ngx_str_t  *name;

    name = ngx_palloc(r->pool, sizeof(ngx_str_t));
    if (name == NULL) {
        return NULL;
    }

    name->data = r->uri.data + sizeof("/admin/keys") - 1;
    name->len = r->uri.len - (sizeof("/admin/keys") - 1);

    if (name->len) {
        /* past the slash */
        name->data++;
        name->len--;
    }

    return name;
}


/* "name": an instant in RFC 3339, or null for 0 */
static ngx_int_t
ngx_http_tokenbiryani_keys_when(cJSON *obj, const char *name, int64_t ms)
{
    char  at[40];

    if (ms <= 0) {
        return cJSON_AddNullToObject(obj, name) ? NGX_OK : NGX_ERROR;
    }

    tb_format_rfc3339(ms, at, sizeof(at));

    return cJSON_AddStringToObject(obj, name, at) ? NGX_OK : NGX_ERROR;
}


ngx_int_t
ngx_http_tokenbiryani_admin_keys(ngx_http_request_t *r)
{
    size_t                              i;
    ngx_str_t                          *name;
    ngx_uint_t                          n;
    cJSON                              *root, *arr, *rec;
    tb_keyspec_t                        ks;
    ngx_uint_t                          nrev;
    const tb_keyspec_t                 *minted;
    const tb_key_conf_t                *kc;
    ngx_http_tokenbiryani_rkent_t      *ents;
    ngx_http_tokenbiryani_key_write_t  *kw;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    ngx_http_tokenbiryani_revoked_t     revoked[NGX_HTTP_TB_REVOKED];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    name = ngx_http_tokenbiryani_keys_name(r);
    if (name == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        if ((name->len == 0 && r->method != NGX_HTTP_POST)
            || (name->len && !(r->method & (NGX_HTTP_PATCH|NGX_HTTP_DELETE))))
        {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_ALLOWED,
                       "invalid_request_error",
                       "%V expects %s, not %V", &r->uri,
                       name->len ? "GET, PATCH or DELETE" : "GET or POST",
                       &r->method_name);
        }

        /* the body, then the write */

        kw = ngx_pcalloc(r->pool, sizeof(ngx_http_tokenbiryani_key_write_t));
        if (kw == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        kw->w.res = &ngx_http_tokenbiryani_key_resource;

        return ngx_http_tokenbiryani_admin_write(r, &kw->w);
    }

    if (name->len) {
        kc = ngx_http_tokenbiryani_yaml_key(tmcf, name->data, name->len);

        if (kc) {
            ngx_memzero(&ks, sizeof(ks));
            ks.conf = *kc;

            rec = ngx_http_tokenbiryani_key_record(&ks, "file");
            return rec ? ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, rec)
                       : NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        minted = ngx_http_tokenbiryani_minted(tmcf, name->data, name->len,
                                              &n);
        if (minted == NULL) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                       "not_found_error", "no key \"%*s\"",
                       ngx_min(name->len, 64), name->data);
        }

        rec = ngx_http_tokenbiryani_key_record(minted, "minted");
        return rec ? ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, rec)
                   : NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    arr = ngx_http_tokenbiryani_json_doc(&root, "keys",
                                         cJSON_AddArrayToObject);
    if (arr == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    for (i = 0; i < tmcf->tbcf->nkeys; i++) {
        ngx_memzero(&ks, sizeof(ks));
        ks.conf = tmcf->tbcf->keys[i];

        rec = ngx_http_tokenbiryani_key_record(&ks, "file");
        if (rec == NULL) {
            goto failed;
        }

        cJSON_AddItemToArray(arr, rec);

        if (ngx_http_tokenbiryani_keys_when(rec, "last_used_at",
                ngx_http_tokenbiryani_key_last_used(&tmcf->zone,
                                                    ks.conf.name_hash))
            != NGX_OK)
        {
            goto failed;
        }
    }

    ents = ngx_http_tokenbiryani_rkeys(tmcf, &n);
    if (ents == NULL) {
        goto failed;
    }

    for (i = 0; i < n; i++) {
        rec = ngx_http_tokenbiryani_key_record(&ents[i].ks, "minted");
        if (rec == NULL) {
            goto failed;
        }

        cJSON_AddItemToArray(arr, rec);

        if (ngx_http_tokenbiryani_keys_when(rec, "last_used_at",
                ngx_http_tokenbiryani_key_last_used(&tmcf->zone,
                                            ents[i].ks.conf.name_hash))
            != NGX_OK)
        {
            goto failed;
        }
    }

    /*
     * The keys revoked since the zone began (the last 64): by name, when,
     * and whether anything still presents them
     */

    arr = cJSON_AddArrayToObject(root, "revoked");
    if (arr == NULL) {
        goto failed;
    }

    nrev = ngx_http_tokenbiryani_revoked_copy(&tmcf->zone, revoked,
                                              NGX_HTTP_TB_REVOKED);

    for (i = 0; i < nrev; i++) {
        rec = ngx_http_tokenbiryani_json_push(arr);

        if (rec == NULL
            || cJSON_AddStringToObject(rec, "name", revoked[i].name) == NULL
            || ngx_http_tokenbiryani_keys_when(rec, "revoked_at",
                                               revoked[i].revoked_ms)
               != NGX_OK
            || cJSON_AddNumberToObject(rec, "refused",
                                       (double) revoked[i].refused) == NULL
            || ngx_http_tokenbiryani_keys_when(rec, "last_refused_at",
                                               revoked[i].refused_ms)
               != NGX_OK)
        {
            goto failed;
        }
    }

    /* the backend in use: where a minted key lives */

    if (cJSON_AddStringToObject(root, "store",
            !ngx_http_tokenbiryani_store_on(tmcf) ? "memory"
            : tmcf->store_backend == NGX_HTTP_TB_STORE_REDIS ? "redis"
            : "sqlite")
        == NULL)
    {
        goto failed;
    }

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);

failed:

    return ngx_http_tokenbiryani_cjson_fail(root);
}


/* the minted key of that name in this worker's copy, or NULL */
static const tb_keyspec_t *
ngx_http_tokenbiryani_minted(ngx_http_tokenbiryani_main_conf_t *tmcf,
    const u_char *name, size_t len, ngx_uint_t *n)
{
    ngx_uint_t                      i;
    ngx_http_tokenbiryani_rkent_t  *ents;

    ents = ngx_http_tokenbiryani_rkeys(tmcf, n);
    if (ents == NULL) {
        return NULL;
    }

    for (i = 0; i < *n; i++) {
        if (ngx_strlen(ents[i].ks.conf.name) == len
            && ngx_strncmp(ents[i].ks.conf.name, name, len) == 0)
        {
            /* its digest: what its record is bound to */
            ngx_memcpy(ngx_http_tokenbiryani_minted_digest, ents[i].digest,
                       32);
            return &ents[i].ks;
        }
    }

    return NULL;
}


/* a key as the API shows it: its scope, where it comes from, its use */
static cJSON *
ngx_http_tokenbiryani_key_record(const tb_keyspec_t *ks, const char *source)
{
    char   *text;
    cJSON  *rec;

    text = tb_keyspec_json(ks);
    if (text == NULL) {
        return NULL;
    }

    rec = cJSON_Parse(text);
    free(text);

    if (rec == NULL) {
        return NULL;
    }

    if (cJSON_AddStringToObject(rec, "source", source) == NULL) {
        cJSON_Delete(rec);
        return NULL;
    }

    if (source[0] == 'f') {
        /* the file's keys have no date of their own */
        cJSON_DeleteItemFromObjectCaseSensitive(rec, "created");
        cJSON_DeleteItemFromObjectCaseSensitive(rec, "expires_at");
    }

    return rec;
}


static int
ngx_http_tokenbiryani_key_account(void *data, const char *id)
{
    ngx_http_tokenbiryani_main_conf_t *tmcf = data;

    ngx_http_tokenbiryani_accounts_sync(tmcf);

    return ngx_http_tokenbiryani_account_find(tmcf, (u_char *) id,
                                              ngx_strlen(id))
           != NULL;
}


/* the write checked and prepared; sent to the store, or to the zone */
static ngx_int_t
ngx_http_tokenbiryani_keys_write(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w, u_char *body, size_t len)
{
    ngx_int_t                           rc;
    ngx_str_t                          *name;
    ngx_uint_t                          n;
    tb_keyspec_t                        ks;
    const tb_keyspec_t                 *minted;
    ngx_http_tokenbiryani_key_write_t  *kw;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                err[512];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);

    kw = (ngx_http_tokenbiryani_key_write_t *) w;

    name = ngx_http_tokenbiryani_keys_name(r);
    if (name == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (name->len) {
        if (!tb_keyspec_valid_name((char *) name->data, name->len)) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                       "not_found_error", "no key of that name: a key's name "
                       "is 1 to 64 letters, digits, '.', '_' or '-'");
        }

        if (ngx_http_tokenbiryani_yaml_key(tmcf, name->data, name->len)) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                       "invalid_request_error", "key \"%V\" is the YAML "
                       "file's: change it there and reload", name);
        }

        minted = ngx_http_tokenbiryani_minted(tmcf, name->data, name->len,
                                              &n);
        if (minted == NULL) {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_NOT_FOUND,
                       "not_found_error", "no key \"%V\"", name);
        }

        w->name.len = name->len;
        w->name.data = ngx_pnalloc(r->pool, name->len + 1);
        if (w->name.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(kw->digest, ngx_http_tokenbiryani_minted_digest, 32);

        ngx_cpystrn(w->name.data, name->data, name->len + 1);

        if (r->method == NGX_HTTP_DELETE) {
            kw->op = NGX_HTTP_TB_JOB_KEY_DELETE;
            goto write;
        }

        /* PATCH: the changes onto a copy of what is there */

        if (tb_keyspec_copy(&ks, minted) != 0) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (tb_keyspec_parse(&ks, (char *) body, len, TB_KEYSPEC_PATCH,
                             ngx_http_tokenbiryani_key_account, tmcf,
                             (int64_t) ngx_time(), err, sizeof(err))
            != 0)
        {
            tb_keyspec_free(&ks);
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "%s", err);
        }

        kw->op = NGX_HTTP_TB_JOB_KEY_UPDATE;

    } else {
        if (tb_keyspec_parse(&ks, (char *) body, len, TB_KEYSPEC_CREATE,
                             ngx_http_tokenbiryani_key_account, tmcf,
                             (int64_t) ngx_time(), err, sizeof(err))
            != 0)
        {
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "%s", err);
        }

        n = ngx_strlen(ks.conf.name);

        if (ngx_http_tokenbiryani_yaml_key(tmcf, (u_char *) ks.conf.name, n)
            || ngx_http_tokenbiryani_minted(tmcf, (u_char *) ks.conf.name, n,
                                            &n)
               != NULL)
        {
            rc = ngx_http_tokenbiryani_send_error(r, NGX_HTTP_CONFLICT,
                     "invalid_request_error", "a key named \"%s\" exists",
                     ks.conf.name);
            tb_keyspec_free(&ks);
            return rc;
        }

        /* minting the first key ends open mode: it must let its holder
         * in to /admin */

        if (tmcf->keytab.n == 0 && n == 0 && !ks.conf.admin) {
            tb_keyspec_free(&ks);
            return ngx_http_tokenbiryani_send_error(r, NGX_HTTP_BAD_REQUEST,
                       "invalid_request_error", "this gateway has no keys "
                       "yet, and the first key minted ends open mode: mint "
                       "an admin key first (\"admin\": true)");
        }

        if (tb_keyspec_secret(kw->secret, kw->digest) != 0) {
            tb_keyspec_free(&ks);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        w->name.len = ngx_strlen(ks.conf.name);
        w->name.data = ngx_pnalloc(r->pool, w->name.len + 1);
        if (w->name.data == NULL) {
            tb_keyspec_free(&ks);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_memcpy(w->name.data, ks.conf.name, w->name.len + 1);

        kw->op = NGX_HTTP_TB_JOB_KEY_INSERT;
    }

    /* the spec, in the request's pool */

    {
        char  *text;

        text = tb_keyspec_json(&ks);
        tb_keyspec_free(&ks);

        kw->spec = ngx_http_tokenbiryani_pool_text(r->pool, text);
        free(text);

        if (kw->spec == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    /* the record as the store keeps it: bound to its name and digest */

    {
        ngx_str_t  rec;

        if (ngx_http_tokenbiryani_record_wrap(r->pool, tmcf, TB_REC_KEY,
                                              w->name.data, w->name.len,
                                              kw->digest, 32,
                                              (u_char *) kw->spec,
                                              ngx_strlen(kw->spec), &rec)
            != NGX_OK)
        {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        kw->spec = (char *) rec.data;
    }

write:

    if (!ngx_http_tokenbiryani_store_on(tmcf)) {
        return ngx_http_tokenbiryani_keys_apply(r, w);
    }

    w->job.op = kw->op;
    w->job.u.record.name = (char *) w->name.data;
    w->job.u.record.digest = kw->digest;
    w->job.u.record.spec = kw->spec;

    return ngx_http_tokenbiryani_admin_store(r, w) == NGX_DONE
           ? NGX_DONE : NGX_HTTP_INTERNAL_SERVER_ERROR;
}


/* the secret, shown once, kept no longer */
static void
ngx_http_tokenbiryani_keys_done(ngx_http_tokenbiryani_admin_write_t *w)
{
    ngx_http_tokenbiryani_key_write_t *kw =
        (ngx_http_tokenbiryani_key_write_t *) w;

    ngx_explicit_memzero(kw->secret, sizeof(kw->secret));
}


/* the write into the zone, where every worker sees it, and the answer */
static ngx_int_t
ngx_http_tokenbiryani_keys_apply(ngx_http_request_t *r,
    ngx_http_tokenbiryani_admin_write_t *w)
{
    size_t                              tlen;
    ngx_uint_t                          rc;
    cJSON                              *root, *rec;
    const char                         *text;
    tb_keyspec_t                        ks;
    ngx_http_tokenbiryani_key_write_t  *kw;
    ngx_http_tokenbiryani_main_conf_t  *tmcf;
    char                                err[256];

    tmcf = ngx_http_get_module_main_conf(r, ngx_http_tokenbiryani_module);
    kw = (ngx_http_tokenbiryani_key_write_t *) w;

    if (kw->op == NGX_HTTP_TB_JOB_KEY_DELETE) {
        rc = ngx_http_tokenbiryani_rkey_delete(&tmcf->zone, w->name.data,
                                               w->name.len);

    } else if (kw->op == NGX_HTTP_TB_JOB_KEY_INSERT
               && ngx_http_tokenbiryani_store_on(tmcf))
    {
        /*
         * The store took the name, so the key is this one: another
         * instance's announcement of it, read back by this instance's
         * subscriber, may have put it into the zone already
         */
        rc = ngx_http_tokenbiryani_rkey_set(&tmcf->zone, w->name.data,
                 w->name.len, kw->digest, (u_char *) kw->spec,
                 ngx_strlen(kw->spec));

    } else {
        rc = ngx_http_tokenbiryani_rkey_put(&tmcf->zone, w->name.data,
                 w->name.len, kw->op == NGX_HTTP_TB_JOB_KEY_INSERT
                              ? kw->digest : NULL,
                 (u_char *) kw->spec, ngx_strlen(kw->spec));
    }

    switch (rc) {

    case NGX_HTTP_TB_RKEY_OK:
    case NGX_HTTP_TB_RKEY_NEW:
    case NGX_HTTP_TB_RKEY_SAME:
        break;

    case NGX_HTTP_TB_RKEY_NONE:
        if (kw->op == NGX_HTTP_TB_JOB_KEY_DELETE) {
            /* revoked meanwhile by another request: it is gone either way */
            break;
        }

        /* fall through */

    case NGX_HTTP_TB_RKEY_EXISTS:
    case NGX_HTTP_TB_RKEY_STALE:
        return ngx_http_tokenbiryani_admin_refused(r, w, rc);

    default:
        return ngx_http_tokenbiryani_send_error(r,
                   NGX_HTTP_INSUFFICIENT_STORAGE, "api_error",
                   "the zone is full: make tokenbiryani_zone larger%s",
                   ngx_http_tokenbiryani_store_on(tmcf)
                   ? " (the store has the key: it is loaded at the next "
                     "start)" : "");
    }

    ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                  "tokenbiryani: key \"%V\" %s by an operator", &w->name,
                  kw->op == NGX_HTTP_TB_JOB_KEY_INSERT ? "minted"
                  : kw->op == NGX_HTTP_TB_JOB_KEY_UPDATE ? "rescoped"
                  : "revoked");

    root = cJSON_CreateObject();
    if (root == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (kw->op == NGX_HTTP_TB_JOB_KEY_DELETE) {
        if (cJSON_AddStringToObject(root, "revoked", (char *) w->name.data)
            == NULL)
        {
            return ngx_http_tokenbiryani_cjson_fail(root);
        }

        return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, root);
    }

    text = tb_rec_payload(kw->spec, ngx_strlen(kw->spec), &tlen, NULL);

    if (tb_keyspec_parse(&ks, text, tlen, TB_KEYSPEC_STORED, NULL, NULL, 0,
                         err, sizeof(err))
        != 0)
    {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    rec = ngx_http_tokenbiryani_key_record(&ks, "minted");
    tb_keyspec_free(&ks);

    if (rec == NULL) {
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    if (kw->op == NGX_HTTP_TB_JOB_KEY_UPDATE) {
        cJSON_Delete(root);
        return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_OK, rec);
    }

    if (cJSON_AddStringToObject(root, "key", kw->secret) == NULL) {
        cJSON_Delete(rec);
        return ngx_http_tokenbiryani_cjson_fail(root);
    }

    cJSON_AddItemToObject(root, "record", rec);

    return ngx_http_tokenbiryani_send_cjson(r, NGX_HTTP_CREATED, root);
}
