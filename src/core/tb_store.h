/*
 * The SQLite store file (store.backend: sqlite).
 *
 * Plain C (libsqlite3), no nginx headers.  Everything here touches the
 * disk: for configuration time in the master, never a worker's request.
 */

#ifndef TB_STORE_H
#define TB_STORE_H

#include <stddef.h>
#include <stdint.h>


#define TB_STORE_SCHEMA       1


/*
 * Opens the store file (creating it), puts it in WAL mode, checks it
 * (quick_check), creates its schema and takes its write lock once: 0, or
 * -1 with a message in err that names the file and the problem - not a
 * database, corrupt, cannot be created or written, locked by another
 * process, disk full, written by a newer schema.  busy_ms: how long a lock
 * held by another process is waited for.
 */
int tb_store_check(const char *path, int busy_ms, char *err, size_t errsize);


/*
 * An open store: one connection, used by one thread at a time (a
 * worker's writes run one task at a time in nginx's thread pool; the
 * master reads it before workers start).  Every call that fails leaves
 * its reason in tb_store_error().
 */
typedef struct tb_store_s  tb_store_t;

#define TB_STORE_OK           0
#define TB_STORE_ERROR       -1
#define TB_STORE_EXISTS       1       /* a key of that name is stored */
#define TB_STORE_NONE         2       /* no key of that name */

tb_store_t *tb_store_open(const char *path, int busy_ms, char *err,
    size_t errsize);
void tb_store_close(tb_store_t *s);
const char *tb_store_error(const tb_store_t *s);
/* whether the last failure was another process's lock (not the file's) */
int tb_store_busy(const tb_store_t *s);

/* a minted key: its name, SHA-256 digest and spec (tb_keyspec_json) */
int tb_store_key_insert(tb_store_t *s, const char *name,
    const unsigned char digest[32], const char *spec);
int tb_store_key_update(tb_store_t *s, const char *name, const char *spec);
int tb_store_key_delete(tb_store_t *s, const char *name);

typedef int (*tb_store_key_pt)(void *data, const char *name,
    const unsigned char *digest, const char *spec);

/* every stored key, by name; a callback's nonzero return stops */
int tb_store_keys(tb_store_t *s, tb_store_key_pt cb, void *data);

/*
 * An account added at runtime: its id, its spec (JSON, without the
 * credential) and the credential sealed (tb_seal).  create: insert, else
 * update (TB_STORE_NONE when there is no such account).
 */
int tb_store_account_put(tb_store_t *s, const char *id, const char *spec,
    const char *sealed, int create);
int tb_store_account_delete(tb_store_t *s, const char *id);

typedef int (*tb_store_account_pt)(void *data, const char *id,
    const char *spec, const char *sealed);

/* every stored account, in the order they were added */
int tb_store_accounts(tb_store_t *s, tb_store_account_pt cb, void *data);

/*
 * An object the upstream keeps (a batch, a file): its id and its record
 * (the envelope, tb_record.h), put in place of the one before.
 */
int tb_store_object_put(tb_store_t *s, const char *id, const char *value);
int tb_store_object_delete(tb_store_t *s, const char *id);

typedef int (*tb_store_object_pt)(void *data, const char *id, size_t len,
    const char *value, size_t vlen);

/* every stored object, in the order they were first written */
int tb_store_objects(tb_store_t *s, tb_store_object_pt cb, void *data);

/*
 * History: inspector records (TB_STORE_RECORDS) and events
 * (TB_STORE_EVENTS), each a numbered blob of the layout its writer
 * names; the newest keep of a kind are kept.
 */
#define TB_STORE_RECORDS      1
#define TB_STORE_EVENTS       2

int tb_store_begin(tb_store_t *s);
int tb_store_commit(tb_store_t *s);
void tb_store_rollback(tb_store_t *s);

int tb_store_history_put(tb_store_t *s, int kind, uint64_t seq,
    const void *data, size_t len);
int tb_store_history_prune(tb_store_t *s, int kind, uint64_t keep);

typedef int (*tb_store_blob_pt)(void *data, uint64_t seq, const void *blob,
    size_t len);

/* the newest limit of a kind, oldest first */
int tb_store_history(tb_store_t *s, int kind, uint64_t limit,
    tb_store_blob_pt cb, void *data);

/* a small named value (tb_meta) */
int tb_store_meta_put(tb_store_t *s, const char *name, const char *value);
int tb_store_meta_get(tb_store_t *s, const char *name, char *buf,
    size_t size);

/* the account ids of the zone's slots, for history written under them */
int tb_store_slot_put(tb_store_t *s, uint64_t slot, const char *id);

typedef int (*tb_store_slot_pt)(void *data, uint64_t slot, const char *id);
int tb_store_slots(tb_store_t *s, tb_store_slot_pt cb, void *data);

/*
 * Spend ledgers (a blob of their writer's layout) by scope and id; the
 * conversations, by id, with their key and when they were last charged.
 */
int tb_store_ledger_put(tb_store_t *s, int scope, const char *id,
    const void *data, size_t len);

typedef int (*tb_store_ledger_pt)(void *data, int scope, const char *id,
    const void *blob, size_t len);
int tb_store_ledgers(tb_store_t *s, tb_store_ledger_pt cb, void *data);

int tb_store_session_put(tb_store_t *s, const char *id, const char *key,
    int64_t last_ms, const void *data, size_t len);
/* the ones last charged before before_ms gone, and all but the newest keep */
int tb_store_sessions_prune(tb_store_t *s, int64_t before_ms, uint64_t keep);
/* the newest limit, oldest first (seq: last_ms) */
int tb_store_sessions(tb_store_t *s, uint64_t limit, tb_store_blob_pt cb,
    void *data);

/*
 * Usage history: counters per bucket (res seconds long, from t seconds
 * since the epoch), account, model and key, added to.
 */
typedef struct {
    int64_t                   requests;
    int64_t                   input;
    int64_t                   output;
    int64_t                   cache_read;
    int64_t                   cache_write;
    int64_t                   cost;           /* nanodollars, priced ones */
    int64_t                   unpriced;       /* answers with no price */
    int64_t                   errors;
    int64_t                   cache_hits;     /* answers that read a cache */
} tb_usage_row_t;

int tb_store_usage_add(tb_store_t *s, int64_t res, int64_t t,
    const char *account, const char *model, const char *key,
    const tb_usage_row_t *u);
int tb_store_usage_rollup(tb_store_t *s, int64_t now_s);

#define TB_STORE_BY_NONE      0
#define TB_STORE_BY_ACCOUNT   1
#define TB_STORE_BY_MODEL     2
#define TB_STORE_BY_KEY       3

/* buckets of step_s seconds from from_s, by a group: oldest first */
typedef int (*tb_store_usage_pt)(void *data, int64_t t, const char *group,
    const tb_usage_row_t *u);
int tb_store_usage(tb_store_t *s, int64_t from_s, int64_t step_s, int by,
    tb_store_usage_pt cb, void *data);

#endif /* TB_STORE_H */
