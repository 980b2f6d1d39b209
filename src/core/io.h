/*
 * src/core/io.h — the system calls through which dpt writes files
 * (internal).
 *
 * Every file dpt writes — checkpoints, config.conf, metrics, overrides.log,
 * the directories of a run — goes through these wrappers. They behave as the
 * calls they wrap (same return values, errno set on failure) and count every
 * call by kind, so that a test can make the Nth call of a kind fail with an
 * errno of its choice (ENOSPC for a full disk, EROFS for a read-only one, EIO)
 * and check that dpt reports it and loses nothing already saved. Permission
 * bits cannot prove that when the tests run as root; this hook can.
 *
 * The hook is process-wide and thread-safe. It is for tests only: nothing in
 * the library arms it.
 */
#ifndef DPT_CORE_IO_H
#define DPT_CORE_IO_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The kinds of call that can be made to fail. */
#define DPT__IO_OPS(X)                                                       \
    X(OPEN, "open")     /* open or fopen for writing, mkdir */               \
    X(WRITE, "write")   /* write, or fflush of a stream's buffered output */ \
    X(FSYNC, "fsync")   /* fsync of a file or of a directory */              \
    X(RENAME, "rename") /* rename over the final name */

typedef enum {
#define DPT__IO_ENUM(id, name) DPT__IO_##id,
    DPT__IO_OPS(DPT__IO_ENUM)
#undef DPT__IO_ENUM
        DPT__IO_OP_COUNT
} dpt__io_op_t;

/* "open", "write", "fsync", "rename". */
const char *dpt__io_op_name(dpt__io_op_t op);
/* Parses one of those names; 0, or -1 for another string. */
int dpt__io_op_parse(const char *name, dpt__io_op_t *op);

/* Test hook: from the `nth` call of `op` on (1-based, counting calls made
 * after this one), every call of that kind fails with `err` — a full or
 * read-only disk stays so. nth = 0 disarms. Resets the counts. */
void dpt__io_fault_arm(dpt__io_op_t op, uint64_t nth, int err);
/* Calls of `op` since the last dpt__io_fault_arm (or since the start). */
uint64_t dpt__io_calls(dpt__io_op_t op);
/* Faults injected since the last dpt__io_fault_arm. */
uint64_t dpt__io_faults(void);

/* The wrappers: each counts its call, then fails with the armed errno or
 * makes the real call. dpt__io_write retries EINTR and writes all n bytes
 * (0, or -1 with errno); dpt__io_fflush returns 0 or EOF with errno. */
int dpt__io_open(const char *path, int flags, int mode);
FILE *dpt__io_fopen(const char *path, const char *mode);
int dpt__io_mkdir(const char *path, int mode);
int dpt__io_write(int fd, const void *data, size_t n);
int dpt__io_fflush(FILE *f);
int dpt__io_fsync(int fd);
int dpt__io_rename(const char *from, const char *to);

/* The status of a failed open of a file dpt reads (a config, a checkpoint,
 * a dataset, a run's files), from its errno: what the given path names is
 * bad input, a failure of the system is not. DPT_ENOENT when the path names
 * nothing (ENOENT, ENOTDIR: a component is a file), DPT_ENOMEM for ENOMEM,
 * DPT_EIO for the system's failures (EIO, EMFILE, ENFILE, EINTR, ...),
 * DPT_EINVAL otherwise (EACCES, EISDIR, ELOOP, ENAMETOOLONG, ...: the path
 * names what cannot be read). Not counted and never faulted. */
int dpt__io_read_status(int err);

#endif
