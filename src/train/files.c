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

int dpt__write_file_atomic(const char *path, const void *data, size_t n)
{
    char tmp[PATH_MAX + 64], dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (strlen(path) >= PATH_MAX)
        return dpt_error(DPT_EINVAL, "path too long: %.100s...", path);
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        snprintf(dir, sizeof dir, ".");
    /* The same pattern as checkpoint temporaries (NAME.tmp-PID-...), so one
     * rule finds the leftovers of a killed write. */
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int fd = dpt__io_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
        return dpt_error(DPT_EIO, "cannot write %s: %s", path, strerror(errno));
    if (dpt__io_write(fd, data, n) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return dpt_error(DPT_EIO, "cannot write %s: %s", path, strerror(e));
    }
    if (dpt__io_fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return dpt_error(DPT_EIO, "cannot write %s: fsync: %s", path, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return dpt_error(DPT_EIO, "cannot write %s: close: %s", path, strerror(e));
    }
    if (dpt__io_rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return dpt_error(DPT_EIO, "cannot write %s: rename: %s", path, strerror(e));
    }
    int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        int bad = dpt__io_fsync(dfd) != 0;
        int e = errno;
        close(dfd);
        if (bad)
            return dpt_error(DPT_EIO, "cannot write %s: fsync of its directory: %s", path,
                             strerror(e));
    }
    return DPT_OK;
}

static int dpt__env_int(const char *a, const char *b, int dflt)
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
    int n = dpt__env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
    return n < 1 ? 1 : n;
}

int dpt__mpi_rank(void)
{
    return dpt__env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
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
