/*
 * The SQLite store file (store.backend: sqlite).
 *
 * Plain C (libsqlite3), no nginx headers.  Everything here touches the
 * disk: for configuration time in the master, never a worker's request.
 */

#ifndef TB_STORE_H
#define TB_STORE_H

#include <stddef.h>


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

#endif /* TB_STORE_H */
