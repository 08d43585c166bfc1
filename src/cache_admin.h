/*
 * cache_admin.h — what the files of the public cache administration share
 * (cache_admin.c: open, list, stats, prune, source, tuning results; cache_verify.c: verify
 * and rebuild; cache_ship.c: export and merge).  Internal to those files.
 */
#ifndef QJIT_CACHE_ADMIN_H
#define QJIT_CACHE_ADMIN_H

#include "cache_db.h"

struct qjit_cache_db {
    sqlite3 *db;
    char *path;
    char *uri;          /* how it was opened, to attach it elsewhere the same way */
    int writable;
    char *entry_desc, *entry_arch; /* what qjit_cache_db_source's entry points at */
    char *damage;       /* the file is a damaged qjit cache SQLite cannot open (db NULL):
                           what SQLite said; verify reports it, repair rebuilds it */
};


/* Errors of a handle: no file open (damaged, or a rebuild failed to reopen it), a recorded SQLite
 * failure, one with its code; each sets the message and returns the status. */
QJIT_HIDDEN qjit_status qjit_adm_unusable(qjit_cache_db *d);
QJIT_HIDDEN qjit_status qjit_adm_fail(qjit_cache_db *d, qjit_status st, const qjit_dberr *e);
QJIT_HIDDEN qjit_status qjit_adm_error(qjit_cache_db *d, int rc, const char *what);
QJIT_HIDDEN qjit_status qjit_adm_need_writable(qjit_cache_db *d, const char *fn);
/* (Re)open d->path for writing, migrating an older schema. */
QJIT_HIDDEN int qjit_adm_open_rw(qjit_cache_db *d, qjit_dberr *e);
/* The filter as three bound parameters of a WHERE clause over kernels. */
#define QJIT_ADM_FILTER_SQL                                                              \
    "(?1 IS NULL OR instr(arch, ?1) > 0) AND (?2 IS NULL OR instr(descriptor, ?2) > 0) " \
    "AND (?3 IS NULL OR substr(hex(key), 1, length(?3)) = upper(?3))"
QJIT_HIDDEN qjit_status qjit_adm_check_prefix(const char *p, int min_len);
QJIT_HIDDEN qjit_status qjit_adm_bind_filter(sqlite3_stmt *st, const qjit_cache_filter *f);
#define QJIT_ADM_ENTRY_COLUMNS                                                           \
    "key, descriptor, arch, cubin_size, source_size, compile_ms, created, last_used"
QJIT_HIDDEN void qjit_adm_fill_entry(sqlite3_stmt *st, qjit_cache_entry *en);
/* ATTACH a file read-only under the name `as`, checking its schema version. */
QJIT_HIDDEN int qjit_adm_attach(sqlite3 *db, const char *uri, const char *as, bool *attached,
                                qjit_dberr *e);

#endif
