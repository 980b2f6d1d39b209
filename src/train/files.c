/* Files of a run: atomic writes, directories; the launcher's world. */
#include "dpt/status.h"
#include "core/io.h"
#include "train_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dpt__mkdirs(const char *path)
{
    char buf[PATH_MAX];
    if (!path[0])
        return dpt_error(DPT_EINVAL, "empty directory name");
    if (strlen(path) >= sizeof buf)
        return dpt_error(DPT_EINVAL, "path too long: %.100s...", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            struct stat sb;
            /* Only what is missing is made (a full or read-only disk
             * refuses mkdir, even of a directory that exists). */
            if (stat(buf, &sb) != 0 && dpt__io_mkdir(buf, 0777) != 0 && errno != EEXIST)
                return dpt_error(DPT_EIO, "cannot create directory %s: %s", buf, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return dpt_error(DPT_EIO, "%s is not a directory", path);
    return DPT_OK;
}

int dpt__atomic_open(dpt__atomic_file_t *a, const char *path)
{
    a->fd = -1;
    if (strlen(path) >= sizeof a->path)
        return dpt_error(DPT_EINVAL, "path too long: %.100s...", path);
    snprintf(a->path, sizeof a->path, "%s", path);
    /* The same pattern as checkpoint temporaries (NAME.tmp-PID-...), so one
     * rule finds the leftovers of a killed write. */
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp-%ld", path, (long)getpid());
    a->fd = dpt__io_open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (a->fd < 0)
        return dpt_error(DPT_EIO, "cannot write %s: %s", path, strerror(errno));
    return DPT_OK;
}

void dpt__atomic_abort(dpt__atomic_file_t *a)
{
    if (a->fd >= 0) {
        close(a->fd);
        unlink(a->tmp);
    }
    a->fd = -1;
}

/* Aborts the write and reports errno e for `what` ("" or ": fsync"...). */
static int dpt__files_atomic_fail(dpt__atomic_file_t *a, const char *what, int e)
{
    dpt__atomic_abort(a);
    return dpt_error(DPT_EIO, "cannot write %s%s: %s", a->path, what, strerror(e));
}

int dpt__atomic_write(dpt__atomic_file_t *a, const void *data, size_t n)
{
    if (n && dpt__io_write(a->fd, data, n) != 0)
        return dpt__files_atomic_fail(a, "", errno);
    return DPT_OK;
}

int dpt__atomic_commit(dpt__atomic_file_t *a)
{
    if (dpt__io_fsync(a->fd) != 0)
        return dpt__files_atomic_fail(a, ": fsync", errno);
    int fd = a->fd;
    a->fd = -1;
    if (close(fd) != 0) {
        int e = errno;
        unlink(a->tmp);
        return dpt_error(DPT_EIO, "cannot write %s: close: %s", a->path, strerror(e));
    }
    if (dpt__io_rename(a->tmp, a->path) != 0) {
        int e = errno;
        unlink(a->tmp);
        return dpt_error(DPT_EIO, "cannot write %s: rename: %s", a->path, strerror(e));
    }
    char dir[PATH_MAX];
    const char *slash = strrchr(a->path, '/');
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - a->path), a->path);
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        int bad = dpt__io_fsync(dfd) != 0;
        int e = errno;
        close(dfd);
        if (bad)
            return dpt_error(DPT_EIO, "cannot write %s: fsync of its directory: %s", a->path,
                             strerror(e));
    }
    return DPT_OK;
}

int dpt__write_file_atomic(const char *path, const void *data, size_t n)
{
    dpt__atomic_file_t a;
    int rc = dpt__atomic_open(&a, path);
    if (!rc)
        rc = dpt__atomic_write(&a, data, n);
    if (!rc)
        rc = dpt__atomic_commit(&a);
    return rc;
}

static int dpt__files_env_int(const char *a, const char *b, int dflt)
{
    const char *s = getenv(a);
    if (!s)
        s = getenv(b);
    if (!s || !*s)
        return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || v < 0 || v > INT_MAX) ? dflt : (int)v;
}

int dpt__mpi_world_size(void)
{
    int n = dpt__files_env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
    return n < 1 ? 1 : n;
}

int dpt__mpi_rank(void)
{
    return dpt__files_env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
}

int dpt__remove_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (!strstr(e->d_name, ".tmp-"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0)
            n++;
    }
    closedir(d);
    return n;
}
