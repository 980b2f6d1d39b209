/* The system calls through which dpt writes files, and their fault hook
 * (see io.h). */
#include "io.h"
#include "dpt/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const dpt__io_names[DPT__IO_OP_COUNT] = {
#define DPT__IO_NAME(id, name) name,
    DPT__IO_OPS(DPT__IO_NAME)
#undef DPT__IO_NAME
};

static _Atomic uint64_t dpt__io_count[DPT__IO_OP_COUNT];
static _Atomic uint64_t dpt__io_injected;
/* The armed fault: its kind, first failing call and errno (0 = none). */
static _Atomic int dpt__io_fault_op, dpt__io_fault_err;
static _Atomic uint64_t dpt__io_fault_nth;

const char *dpt__io_op_name(dpt__io_op_t op)
{
    return (unsigned)op < DPT__IO_OP_COUNT ? dpt__io_names[op] : "?";
}

int dpt__io_op_parse(const char *name, dpt__io_op_t *op)
{
    for (int i = 0; i < DPT__IO_OP_COUNT; i++)
        if (strcmp(name, dpt__io_names[i]) == 0) {
            *op = (dpt__io_op_t)i;
            return 0;
        }
    return -1;
}

void dpt__io_fault_arm(dpt__io_op_t op, uint64_t nth, int err)
{
    atomic_store(&dpt__io_fault_err, 0);
    for (int i = 0; i < DPT__IO_OP_COUNT; i++)
        atomic_store(&dpt__io_count[i], 0);
    atomic_store(&dpt__io_injected, 0);
    atomic_store(&dpt__io_fault_op, (int)op);
    atomic_store(&dpt__io_fault_nth, nth);
    if (nth > 0 && err > 0)
        atomic_store(&dpt__io_fault_err, err);
}

uint64_t dpt__io_calls(dpt__io_op_t op)
{
    return (unsigned)op < DPT__IO_OP_COUNT ? atomic_load(&dpt__io_count[op]) : 0;
}

uint64_t dpt__io_faults(void)
{
    return atomic_load(&dpt__io_injected);
}

/* Counts a call; the errno to fail it with, or 0 to make it. */
static int dpt__io_fault(dpt__io_op_t op)
{
    uint64_t n = atomic_fetch_add(&dpt__io_count[op], 1) + 1;
    int err = atomic_load(&dpt__io_fault_err);
    if (!err || atomic_load(&dpt__io_fault_op) != (int)op || n < atomic_load(&dpt__io_fault_nth))
        return 0;
    atomic_fetch_add(&dpt__io_injected, 1);
    return err;
}

int dpt__io_open(const char *path, int flags, int mode)
{
    int err = dpt__io_fault(DPT__IO_OPEN);
    if (err) {
        errno = err;
        return -1;
    }
    return open(path, flags, (mode_t)mode);
}

FILE *dpt__io_fopen(const char *path, const char *mode)
{
    int err = dpt__io_fault(DPT__IO_OPEN);
    if (err) {
        errno = err;
        return NULL;
    }
    return fopen(path, mode);
}

int dpt__io_mkdir(const char *path, int mode)
{
    int err = dpt__io_fault(DPT__IO_OPEN);
    if (err) {
        errno = err;
        return -1;
    }
    return mkdir(path, (mode_t)mode);
}

int dpt__io_write(int fd, const void *data, size_t n)
{
    int err = dpt__io_fault(DPT__IO_WRITE);
    if (err) {
        errno = err;
        return -1;
    }
    const char *p = data;
    while (n > 0) {
        /* At most 1 GiB a call: some kernels cap a write there. */
        ssize_t k = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0) {
            errno = EIO;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int dpt__io_fflush(FILE *f)
{
    int err = dpt__io_fault(DPT__IO_WRITE);
    if (err) {
        errno = err;
        return EOF;
    }
    return fflush(f);
}

int dpt__io_fsync(int fd)
{
    int err = dpt__io_fault(DPT__IO_FSYNC);
    if (err) {
        errno = err;
        return -1;
    }
    return fsync(fd);
}

int dpt__io_rename(const char *from, const char *to)
{
    int err = dpt__io_fault(DPT__IO_RENAME);
    if (err) {
        errno = err;
        return -1;
    }
    return rename(from, to);
}

int dpt__io_read_status(int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR: return DPT_ENOENT;
    case ENOMEM: return DPT_ENOMEM;
    case EIO:
    case EMFILE:
    case ENFILE:
    case EINTR:
    case EAGAIN:
    case ENOSPC:
    case EOVERFLOW:
    case ETXTBSY:
    case EFBIG: return DPT_EIO;
    default: return DPT_EINVAL;
    }
}
