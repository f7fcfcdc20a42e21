/*
 * The SQLite store file: opened and checked (see tb_store.h).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "tb_store.h"


static const char  tb_store_schema[] =
    "CREATE TABLE IF NOT EXISTS tb_meta ("
    "  name  TEXT PRIMARY KEY NOT NULL,"
    "  value TEXT NOT NULL"
    ");"
    "INSERT OR IGNORE INTO tb_meta (name, value) VALUES ('schema', '1');";


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


int
tb_store_check(const char *path, int busy_ms, char *err, size_t errsize)
{
    int       rc;
    long      schema;
    char      buf[256];
    sqlite3  *db;

    db = NULL;

    rc = sqlite3_open_v2(path, &db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                         | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        return tb_store_fail(db, rc, path, "open", err, errsize);
    }

    (void) sqlite3_extended_result_codes(db, 1);
    (void) sqlite3_busy_timeout(db, busy_ms);

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

    rc = sqlite3_close(db);
    if (rc != SQLITE_OK) {
        return tb_store_fail(NULL, rc, path, "close", err, errsize);
    }

    return 0;
}
