/*
 * The SQLite store file: opened and checked (see tb_store.h).
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "tb_store.h"


struct tb_store_s {
    sqlite3                  *db;
    int                       busy;       /* the last failure: a lock */
    char                      path[1024];
    char                      err[1536];
};


static const char  tb_store_schema[] =
    "CREATE TABLE IF NOT EXISTS tb_meta ("
    "  name  TEXT PRIMARY KEY NOT NULL,"
    "  value TEXT NOT NULL"
    ");"
    "INSERT OR IGNORE INTO tb_meta (name, value) VALUES ('schema', '1');"
    "CREATE TABLE IF NOT EXISTS tb_keys ("
    "  name   TEXT PRIMARY KEY NOT NULL,"
    "  digest BLOB NOT NULL UNIQUE,"
    "  spec   TEXT NOT NULL"
    ");"
    "CREATE TABLE IF NOT EXISTS tb_accounts ("
    "  id     TEXT PRIMARY KEY NOT NULL,"
    "  spec   TEXT NOT NULL,"
    "  sealed TEXT NOT NULL"
    ");"
    "CREATE TABLE IF NOT EXISTS tb_history ("
    "  kind   INTEGER NOT NULL,"
    "  seq    INTEGER NOT NULL,"
    "  data   BLOB NOT NULL,"
    "  PRIMARY KEY (kind, seq)"
    ") WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS tb_objects ("
    "  id     TEXT PRIMARY KEY NOT NULL,"
    "  value  TEXT NOT NULL"
    ");"
    "CREATE TABLE IF NOT EXISTS tb_slots ("
    "  slot   INTEGER PRIMARY KEY NOT NULL,"
    "  id     TEXT NOT NULL"
    ");"
    "CREATE TABLE IF NOT EXISTS tb_ledgers ("
    "  scope  INTEGER NOT NULL,"
    "  id     TEXT NOT NULL,"
    "  data   BLOB NOT NULL,"
    "  PRIMARY KEY (scope, id)"
    ") WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS tb_sessions ("
    "  id      TEXT PRIMARY KEY NOT NULL,"
    "  key     TEXT NOT NULL,"
    "  last_ms INTEGER NOT NULL,"
    "  data    BLOB NOT NULL"
    ");"
    "CREATE INDEX IF NOT EXISTS tb_sessions_last ON tb_sessions (last_ms);"
    "CREATE TABLE IF NOT EXISTS tb_usage ("
    "  res     INTEGER NOT NULL,"
    "  t       INTEGER NOT NULL,"
    "  account TEXT NOT NULL,"
    "  model   TEXT NOT NULL,"
    "  key     TEXT NOT NULL,"
    "  requests INTEGER NOT NULL DEFAULT 0,"
    "  input    INTEGER NOT NULL DEFAULT 0,"
    "  output   INTEGER NOT NULL DEFAULT 0,"
    "  cache_read  INTEGER NOT NULL DEFAULT 0,"
    "  cache_write INTEGER NOT NULL DEFAULT 0,"
    "  cost     INTEGER NOT NULL DEFAULT 0,"
    "  unpriced INTEGER NOT NULL DEFAULT 0,"
    "  errors   INTEGER NOT NULL DEFAULT 0,"
    "  cache_hits INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY (res, t, account, model, key)"
    ") WITHOUT ROWID;";


static const char *
tb_store_problem(int rc)
{
    switch (rc & 0xff) {

    case SQLITE_NOTADB:
        return "is not an SQLite database";

    case SQLITE_CORRUPT:
        return "is corrupt";

    case SQLITE_CANTOPEN:
        return "cannot be opened or created (its directory must be writable "
               "by nginx's user)";

    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return "cannot be written";

    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return "is locked by another process";

    case SQLITE_FULL:
        return "cannot grow: the disk is full";

    case SQLITE_IOERR:
        return "could not be read or written (I/O error)";

    default:
        return NULL;
    }
}


static int
tb_store_fail(sqlite3 *db, int rc, const char *path, const char *what,
    char *err, size_t errsize)
{
    const char  *problem;

    problem = tb_store_problem(rc);

    if (problem) {
        snprintf(err, errsize, "the store file \"%s\" %s (%s: %s)", path,
                 problem, what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));

    } else {
        snprintf(err, errsize, "the store file \"%s\": %s failed: %s", path,
                 what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    }

    sqlite3_close(db);

    return -1;
}


/* the single text a one-row statement returns, into buf */
static int
tb_store_text(sqlite3 *db, const char *sql, char *buf, size_t size)
{
    int            rc;
    sqlite3_stmt  *st;
    const char    *t;

    rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        return rc;
    }

    rc = sqlite3_step(st);

    if (rc == SQLITE_ROW) {
        t = (const char *) sqlite3_column_text(st, 0);
        snprintf(buf, size, "%s", t ? t : "");
        rc = SQLITE_OK;

    } else if (rc == SQLITE_DONE) {
        buf[0] = '\0';
        rc = SQLITE_OK;
    }

    sqlite3_finalize(st);

    return rc;
}


/*
 * WAL mode kept across closes (the -wal and -shm files stay, so a worker
 * running as another user than the master that created them never needs
 * to create them in a directory it may not write), checked with
 * quick_check when asked, the schema made and its version read under the
 * write lock: 0, or -1 with the message in err.
 */
static int
tb_store_prepare(sqlite3 *db, const char *path, int busy_ms, int check,
    char *err, size_t errsize)
{
    int   rc, persist;
    long  schema;
    char  buf[256];

    (void) sqlite3_extended_result_codes(db, 1);
    (void) sqlite3_busy_timeout(db, busy_ms);

    persist = 1;
    (void) sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL,
                                &persist);

    /* reading the header finds a file that is no database at all */

    rc = tb_store_text(db, "PRAGMA journal_mode=WAL", buf, sizeof(buf));
    if (rc != SQLITE_OK) {
        return tb_store_fail(db, rc, path, "journal_mode=WAL", err, errsize);
    }

    if (strcmp(buf, "wal") != 0) {
        snprintf(err, errsize, "the store file \"%s\" cannot be put in WAL "
                 "mode (it stays \"%s\"; a network file system?)", path, buf);
        sqlite3_close(db);
        return -1;
    }

    /* an acknowledged admin write is on the disk, not only in a cache */

    rc = sqlite3_exec(db, "PRAGMA synchronous=FULL", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        return tb_store_fail(db, rc, path, "synchronous=FULL", err, errsize);
    }

    if (check) {
        rc = tb_store_text(db, "PRAGMA quick_check", buf, sizeof(buf));
        if (rc != SQLITE_OK) {
            return tb_store_fail(db, rc, path, "quick_check", err, errsize);
        }

        if (strcmp(buf, "ok") != 0) {
            snprintf(err, errsize, "the store file \"%s\" is corrupt "
                     "(quick_check: %s)", path, buf);
            sqlite3_close(db);
            return -1;
        }
    }

    /* the write lock, once: a file another process holds is found now */

    rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        return tb_store_fail(db, rc, path, "BEGIN IMMEDIATE", err, errsize);
    }

    rc = sqlite3_exec(db, tb_store_schema, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        (void) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return tb_store_fail(db, rc, path, "schema", err, errsize);
    }

    rc = tb_store_text(db, "SELECT value FROM tb_meta WHERE name = 'schema'",
                       buf, sizeof(buf));
    if (rc != SQLITE_OK) {
        (void) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return tb_store_fail(db, rc, path, "schema", err, errsize);
    }

    schema = strtol(buf, NULL, 10);

    if (schema < 1 || schema > TB_STORE_SCHEMA) {
        (void) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        snprintf(err, errsize, "the store file \"%s\" has schema %s, this "
                 "build reads up to %d: it was written by a newer version",
                 path, buf, TB_STORE_SCHEMA);
        sqlite3_close(db);
        return -1;
    }

    rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        (void) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return tb_store_fail(db, rc, path, "COMMIT", err, errsize);
    }

    return 0;
}


static sqlite3 *
tb_store_connect(const char *path, int busy_ms, int check, char *err,
    size_t errsize)
{
    int       rc;
    sqlite3  *db;

    db = NULL;

    rc = sqlite3_open_v2(path, &db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                         | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        (void) tb_store_fail(db, rc, path, "open", err, errsize);
        return NULL;
    }

    if (tb_store_prepare(db, path, busy_ms, check, err, errsize) != 0) {
        return NULL;
    }

    return db;
}


int
tb_store_check(const char *path, int busy_ms, char *err, size_t errsize)
{
    int       rc;
    sqlite3  *db;

    db = tb_store_connect(path, busy_ms, 1, err, errsize);
    if (db == NULL) {
        return -1;
    }

    rc = sqlite3_close(db);
    if (rc != SQLITE_OK) {
        return tb_store_fail(NULL, rc, path, "close", err, errsize);
    }

    return 0;
}


tb_store_t *
tb_store_open(const char *path, int busy_ms, char *err, size_t errsize)
{
    tb_store_t  *s;

    s = calloc(1, sizeof(tb_store_t));
    if (s == NULL) {
        snprintf(err, errsize, "the store file \"%s\": no memory", path);
        return NULL;
    }

    snprintf(s->path, sizeof(s->path), "%s", path);

    s->db = tb_store_connect(path, busy_ms, 0, err, errsize);
    if (s->db == NULL) {
        free(s);
        return NULL;
    }

    return s;
}


void
tb_store_close(tb_store_t *s)
{
    if (s) {
        (void) sqlite3_close(s->db);
        free(s);
    }
}


const char *
tb_store_error(const tb_store_t *s)
{
    return s->err;
}


/* the reason of a failed call, kept; TB_STORE_ERROR */
static int
tb_store_failed(tb_store_t *s, int rc, const char *what)
{
    const char  *problem;

    problem = tb_store_problem(rc);
    s->busy = ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED);

    if (problem) {
        snprintf(s->err, sizeof(s->err), "the store file \"%s\" %s (%s: %s)",
                 s->path, problem, what, sqlite3_errmsg(s->db));

    } else {
        snprintf(s->err, sizeof(s->err), "the store file \"%s\": %s failed: "
                 "%s", s->path, what, sqlite3_errmsg(s->db));
    }

    return TB_STORE_ERROR;
}


/* one statement, its ? bound by the format: t text, b 32-byte blob,
 * i int64, z blob with its length (two arguments); a format that begins
 * with "!" wants a row changed (TB_STORE_NONE if none was) */
static int
tb_store_run(tb_store_t *s, const char *what, const char *sql,
    const char *fmt, ...)
{
    int            rc, i, must;
    va_list        ap;
    const void    *p;
    sqlite3_stmt  *st;

    /* "!" first: a row must change, else TB_STORE_NONE */
    must = (*fmt == '!');
    fmt += must;

    rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        return tb_store_failed(s, rc, what);
    }

    va_start(ap, fmt);

    for (i = 0; fmt[i]; i++) {
        switch (fmt[i]) {

        case 't':
            rc = sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1,
                                   SQLITE_STATIC);
            break;

        case 'b':
            rc = sqlite3_bind_blob(st, i + 1, va_arg(ap, const void *), 32,
                                   SQLITE_STATIC);
            break;

        case 'z':
            p = va_arg(ap, const void *);
            rc = sqlite3_bind_blob(st, i + 1, p, (int) va_arg(ap, size_t),
                                   SQLITE_STATIC);
            break;

        default: /* 'i' */
            rc = sqlite3_bind_int64(st, i + 1,
                                    (sqlite3_int64) va_arg(ap, int64_t));
            break;
        }

        if (rc != SQLITE_OK) {
            break;
        }
    }

    va_end(ap);

    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
    }

    sqlite3_finalize(st);

    if (rc == SQLITE_DONE) {
        return (must && sqlite3_changes(s->db) == 0) ? TB_STORE_NONE
                                                     : TB_STORE_OK;
    }

    if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE) {
        return TB_STORE_EXISTS;
    }

    return tb_store_failed(s, rc, what);
}


/*
 * The rows of sql (no parameters), each to row() with the caller's
 * callback (a pointer to it) until one returns non-zero.
 */
typedef int (*tb_store_row_pt)(sqlite3_stmt *st, const void *cb,
    void *data);

static int
tb_store_rows(tb_store_t *s, const char *what, const char *sql,
    tb_store_row_pt row, const void *cb, void *data)
{
    int            rc;
    sqlite3_stmt  *st;

    rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        return tb_store_failed(s, rc, what);
    }

    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (row(st, cb, data) != 0) {
            rc = SQLITE_DONE;
            break;
        }
    }

    sqlite3_finalize(st);

    return rc == SQLITE_DONE ? TB_STORE_OK : tb_store_failed(s, rc, what);
}


#define tb_store_col(st, i)  ((const char *) sqlite3_column_text(st, i))


int
tb_store_key_insert(tb_store_t *s, const char *name,
    const unsigned char digest[32], const char *spec)
{
    return tb_store_run(s, "insert a key",
                        "INSERT INTO tb_keys (name, digest, spec) "
                        "VALUES (?, ?, ?)", "tbt", name, digest, spec);
}


int
tb_store_key_update(tb_store_t *s, const char *name, const char *spec)
{
    return tb_store_run(s, "update a key",
                        "UPDATE tb_keys SET spec = ? WHERE name = ?", "!tt",
                        spec, name);
}


int
tb_store_key_delete(tb_store_t *s, const char *name)
{
    return tb_store_run(s, "delete a key",
                        "DELETE FROM tb_keys WHERE name = ?", "!t", name);
}


static int
tb_store_key_row(sqlite3_stmt *st, const void *cb, void *data)
{
    if (sqlite3_column_bytes(st, 1) != 32 || tb_store_col(st, 0) == NULL
        || tb_store_col(st, 2) == NULL)
    {
        return 0;
    }

    return (*(const tb_store_key_pt *) cb)(data, tb_store_col(st, 0),
                                           sqlite3_column_blob(st, 1),
                                           tb_store_col(st, 2));
}


int
tb_store_keys(tb_store_t *s, tb_store_key_pt cb, void *data)
{
    return tb_store_rows(s, "read the keys", "SELECT name, digest, spec "
                         "FROM tb_keys ORDER BY name", tb_store_key_row,
                         &cb, data);
}


int
tb_store_account_put(tb_store_t *s, const char *id, const char *spec,
    const char *sealed, int create)
{
    if (create) {
        return tb_store_run(s, "insert an account",
                            "INSERT INTO tb_accounts (id, spec, sealed) "
                            "VALUES (?, ?, ?)", "ttt", id, spec, sealed);
    }

    return tb_store_run(s, "update an account",
                        "UPDATE tb_accounts SET spec = ?, sealed = ? "
                        "WHERE id = ?", "!ttt", spec, sealed, id);
}


int
tb_store_account_delete(tb_store_t *s, const char *id)
{
    return tb_store_run(s, "delete an account",
                        "DELETE FROM tb_accounts WHERE id = ?", "!t", id);
}


static int
tb_store_account_row(sqlite3_stmt *st, const void *cb, void *data)
{
    if (tb_store_col(st, 0) == NULL || tb_store_col(st, 1) == NULL
        || tb_store_col(st, 2) == NULL)
    {
        return 0;
    }

    return (*(const tb_store_account_pt *) cb)(data, tb_store_col(st, 0),
                                               tb_store_col(st, 1),
                                               tb_store_col(st, 2));
}


int
tb_store_accounts(tb_store_t *s, tb_store_account_pt cb, void *data)
{
    return tb_store_rows(s, "read the accounts", "SELECT id, spec, sealed "
                         "FROM tb_accounts ORDER BY rowid",
                         tb_store_account_row, &cb, data);
}


int
tb_store_object_put(tb_store_t *s, const char *id, const char *value)
{
    return tb_store_run(s, "write an object",
                        "INSERT INTO tb_objects (id, value) VALUES (?, ?) "
                        "ON CONFLICT (id) DO UPDATE SET value = "
                        "excluded.value", "tt", id, value);
}


int
tb_store_object_delete(tb_store_t *s, const char *id)
{
    return tb_store_run(s, "delete an object",
                        "DELETE FROM tb_objects WHERE id = ?", "t", id);
}


static int
tb_store_object_row(sqlite3_stmt *st, const void *cb, void *data)
{
    if (tb_store_col(st, 0) == NULL || tb_store_col(st, 1) == NULL) {
        return 0;
    }

    return (*(const tb_store_object_pt *) cb)(data, tb_store_col(st, 0),
               (size_t) sqlite3_column_bytes(st, 0), tb_store_col(st, 1),
               (size_t) sqlite3_column_bytes(st, 1));
}


int
tb_store_objects(tb_store_t *s, tb_store_object_pt cb, void *data)
{
    return tb_store_rows(s, "read the objects", "SELECT id, value "
                         "FROM tb_objects ORDER BY rowid",
                         tb_store_object_row, &cb, data);
}


int
tb_store_begin(tb_store_t *s)
{
    int  rc;

    rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);

    return rc == SQLITE_OK ? TB_STORE_OK : tb_store_failed(s, rc, "BEGIN");
}


int
tb_store_commit(tb_store_t *s)
{
    int  rc;

    rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        return TB_STORE_OK;
    }

    (void) tb_store_failed(s, rc, "COMMIT");
    (void) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);

    return TB_STORE_ERROR;
}


void
tb_store_rollback(tb_store_t *s)
{
    if (!sqlite3_get_autocommit(s->db)) {
        (void) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    }
}


int
tb_store_history_put(tb_store_t *s, int kind, uint64_t seq, const void *data,
    size_t len)
{
    return tb_store_run(s, "write history",
                        "INSERT OR REPLACE INTO tb_history (kind, seq, data) "
                        "VALUES (?, ?, ?)", "iiz", (int64_t) kind,
                        (int64_t) seq, data, len);
}


int
tb_store_history_prune(tb_store_t *s, int kind, uint64_t keep)
{
    return tb_store_run(s, "prune history",
                        "DELETE FROM tb_history WHERE kind = ? AND seq <= "
                        "(SELECT seq FROM tb_history WHERE kind = ? "
                        "ORDER BY seq DESC LIMIT 1 OFFSET ?)", "iii",
                        (int64_t) kind, (int64_t) kind, (int64_t) keep);
}


/*
 * The rows of sql, each (an integer, a blob), to cb until it returns
 * non-zero; sql's ? bound to the n integers a.
 */
static int
tb_store_blobs(tb_store_t *s, const char *what, const char *sql,
    const int64_t *a, int n, tb_store_blob_pt cb, void *data)
{
    int            rc, i;
    sqlite3_stmt  *st;

    rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        return tb_store_failed(s, rc, what);
    }

    for (i = 0; i < n; i++) {
        (void) sqlite3_bind_int64(st, i + 1, (sqlite3_int64) a[i]);
    }

    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (cb(data, (uint64_t) sqlite3_column_int64(st, 0),
               sqlite3_column_blob(st, 1),
               (size_t) sqlite3_column_bytes(st, 1))
            != 0)
        {
            rc = SQLITE_DONE;
            break;
        }
    }

    sqlite3_finalize(st);

    return rc == SQLITE_DONE ? TB_STORE_OK : tb_store_failed(s, rc, what);
}


int
tb_store_history(tb_store_t *s, int kind, uint64_t limit, tb_store_blob_pt cb,
    void *data)
{
    int64_t  a[2];

    a[0] = kind;
    a[1] = (int64_t) limit;

    return tb_store_blobs(s, "read history",
                          "SELECT seq, data FROM (SELECT seq, data "
                          "FROM tb_history WHERE kind = ? ORDER BY seq "
                          "DESC LIMIT ?) ORDER BY seq", a, 2, cb, data);
}


int
tb_store_meta_put(tb_store_t *s, const char *name, const char *value)
{
    return tb_store_run(s, "write tb_meta",
                        "INSERT OR REPLACE INTO tb_meta (name, value) "
                        "VALUES (?, ?)", "tt", name, value);
}


int
tb_store_meta_get(tb_store_t *s, const char *name, char *buf, size_t size)
{
    int            rc;
    sqlite3_stmt  *st;
    const char    *t;

    rc = sqlite3_prepare_v2(s->db, "SELECT value FROM tb_meta WHERE name = ?",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
        return tb_store_failed(s, rc, "read tb_meta");
    }

    (void) sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);

    buf[0] = '\0';
    rc = sqlite3_step(st);

    if (rc == SQLITE_ROW) {
        t = (const char *) sqlite3_column_text(st, 0);
        snprintf(buf, size, "%s", t ? t : "");
        rc = SQLITE_DONE;

    } else if (rc == SQLITE_DONE) {
        sqlite3_finalize(st);
        return TB_STORE_NONE;
    }

    sqlite3_finalize(st);

    return rc == SQLITE_DONE ? TB_STORE_OK
                             : tb_store_failed(s, rc, "read tb_meta");
}


int
tb_store_slot_put(tb_store_t *s, uint64_t slot, const char *id)
{
    return tb_store_run(s, "write a slot",
                        "INSERT OR REPLACE INTO tb_slots (slot, id) "
                        "VALUES (?, ?)", "it", (int64_t) slot, id);
}


static int
tb_store_slot_row(sqlite3_stmt *st, const void *cb, void *data)
{
    if (tb_store_col(st, 1) == NULL) {
        return 0;
    }

    return (*(const tb_store_slot_pt *) cb)(data,
                                            (uint64_t) sqlite3_column_int64(st,
                                                                            0),
                                            tb_store_col(st, 1));
}


int
tb_store_slots(tb_store_t *s, tb_store_slot_pt cb, void *data)
{
    return tb_store_rows(s, "read the slots", "SELECT slot, id FROM tb_slots",
                         tb_store_slot_row, &cb, data);
}


int
tb_store_ledger_put(tb_store_t *s, int scope, const char *id,
    const void *data, size_t len)
{
    return tb_store_run(s, "write a ledger",
                        "INSERT OR REPLACE INTO tb_ledgers (scope, id, data) "
                        "VALUES (?, ?, ?)", "itz", (int64_t) scope, id, data,
                        len);
}


static int
tb_store_ledger_row(sqlite3_stmt *st, const void *cb, void *data)
{
    if (tb_store_col(st, 1) == NULL) {
        return 0;
    }

    return (*(const tb_store_ledger_pt *) cb)(data,
               (int) sqlite3_column_int64(st, 0), tb_store_col(st, 1),
               sqlite3_column_blob(st, 2),
               (size_t) sqlite3_column_bytes(st, 2));
}


int
tb_store_ledgers(tb_store_t *s, tb_store_ledger_pt cb, void *data)
{
    return tb_store_rows(s, "read the ledgers",
                         "SELECT scope, id, data FROM tb_ledgers",
                         tb_store_ledger_row, &cb, data);
}


int
tb_store_session_put(tb_store_t *s, const char *id, const char *key,
    int64_t last_ms, const void *data, size_t len)
{
    return tb_store_run(s, "write a session",
                        "INSERT OR REPLACE INTO tb_sessions "
                        "(id, key, last_ms, data) VALUES (?, ?, ?, ?)",
                        "ttiz", id, key, last_ms, data, len);
}


int
tb_store_sessions_prune(tb_store_t *s, int64_t before_ms, uint64_t keep)
{
    int  rc;

    rc = tb_store_run(s, "prune sessions",
                      "DELETE FROM tb_sessions WHERE last_ms < ?", "i",
                      before_ms);
    if (rc != TB_STORE_OK) {
        return rc;
    }

    return tb_store_run(s, "prune sessions",
                        "DELETE FROM tb_sessions WHERE last_ms <= "
                        "(SELECT last_ms FROM tb_sessions ORDER BY last_ms "
                        "DESC LIMIT 1 OFFSET ?)", "i", (int64_t) keep);
}


int
tb_store_sessions(tb_store_t *s, uint64_t limit, tb_store_blob_pt cb,
    void *data)
{
    int64_t  a;

    a = (int64_t) limit;

    return tb_store_blobs(s, "read the sessions",
                          "SELECT last_ms, data FROM (SELECT last_ms, data "
                          "FROM tb_sessions ORDER BY last_ms DESC LIMIT ?) "
                          "ORDER BY last_ms", &a, 1, cb, data);
}


/* a bucket that exists already is added to */
#define TB_STORE_USAGE_ADD_UP                                                 \
    " ON CONFLICT (res, t, account, model, key) DO UPDATE SET "               \
    "requests = requests + excluded.requests, "                               \
    "input = input + excluded.input, output = output + excluded.output, "     \
    "cache_read = cache_read + excluded.cache_read, "                         \
    "cache_write = cache_write + excluded.cache_write, "                      \
    "cost = cost + excluded.cost, unpriced = unpriced + excluded.unpriced, "  \
    "errors = errors + excluded.errors, "                                     \
    "cache_hits = cache_hits + excluded.cache_hits"


int
tb_store_usage_add(tb_store_t *s, int64_t res, int64_t t, const char *account,
    const char *model, const char *key, const tb_usage_row_t *u)
{
    return tb_store_run(s, "write usage",
        "INSERT INTO tb_usage (res, t, account, model, key, requests, input, "
        "output, cache_read, cache_write, cost, unpriced, errors, cache_hits) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        TB_STORE_USAGE_ADD_UP,
        "iitttiiiiiiiii", res, t, account, model, key, u->requests, u->input,
        u->output, u->cache_read, u->cache_write, u->cost, u->unpriced,
        u->errors, u->cache_hits);
}


/*
 * Minutes older than two days into hours, hours older than 31 days into
 * days, days older than 90 days gone (t in seconds since the epoch).
 */

int
tb_store_usage_rollup(tb_store_t *s, int64_t now_s)
{
    int           rc, i;
    int64_t       from, to, before;

    static const int64_t  step[2][2] = { { 60, 3600 }, { 3600, 86400 } };
    static const int64_t  age[2] = { 2 * 86400, 31 * 86400 };

    for (i = 0; i < 2; i++) {
        from = step[i][0];
        to = step[i][1];
        before = (now_s - age[i]) / to * to;

        rc = tb_store_run(s, "roll usage up",
            "INSERT INTO tb_usage (res, t, account, model, key, requests, "
            "input, output, cache_read, cache_write, cost, unpriced, errors, "
            "cache_hits) SELECT ?, t / ? * ?, account, model, key, "
            "sum(requests), sum(input), sum(output), sum(cache_read), "
            "sum(cache_write), sum(cost), sum(unpriced), sum(errors), "
            "sum(cache_hits) FROM tb_usage WHERE res = ? AND t < ? "
            "GROUP BY t / ?, account, model, key "
            TB_STORE_USAGE_ADD_UP,
            "iiiiii", to, to, to, from, before, to);
        if (rc != TB_STORE_OK) {
            return rc;
        }

        rc = tb_store_run(s, "roll usage up",
                          "DELETE FROM tb_usage WHERE res = ? AND t < ?", "ii",
                          from, before);
        if (rc != TB_STORE_OK) {
            return rc;
        }
    }

    return tb_store_run(s, "prune usage",
                        "DELETE FROM tb_usage WHERE t < ?", "i",
                        now_s - 90 * 86400);
}


int
tb_store_usage(tb_store_t *s, int64_t from_s, int64_t step_s, int by,
    tb_store_usage_pt cb, void *data)
{
    int             rc;
    char            sql[1024];
    sqlite3_stmt   *st;
    tb_usage_row_t  u;

    static const char  *cols[] = { "''", "account", "model", "key" };

    if (by < 0 || by > 3) {
        by = 0;
    }

    /* every resolution: a range covers what was rolled up within it */

    snprintf(sql, sizeof(sql),
             "SELECT t / %lld * %lld AS b, %s AS g, sum(requests), sum(input), "
             "sum(output), sum(cache_read), sum(cache_write), sum(cost), "
             "sum(unpriced), sum(errors), sum(cache_hits) FROM tb_usage "
             "WHERE t >= ? GROUP BY b, g ORDER BY b, g",
             (long long) step_s, (long long) step_s, cols[by]);

    rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        return tb_store_failed(s, rc, "read usage");
    }

    (void) sqlite3_bind_int64(st, 1, (sqlite3_int64) from_s);

    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        u.requests = sqlite3_column_int64(st, 2);
        u.input = sqlite3_column_int64(st, 3);
        u.output = sqlite3_column_int64(st, 4);
        u.cache_read = sqlite3_column_int64(st, 5);
        u.cache_write = sqlite3_column_int64(st, 6);
        u.cost = sqlite3_column_int64(st, 7);
        u.unpriced = sqlite3_column_int64(st, 8);
        u.errors = sqlite3_column_int64(st, 9);
        u.cache_hits = sqlite3_column_int64(st, 10);

        if (cb(data, sqlite3_column_int64(st, 0),
               (const char *) sqlite3_column_text(st, 1), &u)
            != 0)
        {
            rc = SQLITE_DONE;
            break;
        }
    }

    sqlite3_finalize(st);

    return rc == SQLITE_DONE ? TB_STORE_OK : tb_store_failed(s, rc,
                                                             "read usage");
}


int
tb_store_busy(const tb_store_t *s)
{
    return s->busy;
}
