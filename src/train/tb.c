/*
 * TensorBoard event files of a run (see train_internal.h): one Event per
 * iteration holding every finite metric of the row as a scalar, written by
 * rank 0 beside result.jsonl. The encoding is src/core/tfrecord.c's.
 */
#define _GNU_SOURCE /* gethostname */
#include "core/io.h"
#include "core/tfrecord.h"
#include "dpt/status.h"
#include "train_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DPT__TB_PREFIX "events.out.tfevents."

/* Files opened by this process: the last part of their names, so two runs
 * of one process (dpt_train_seeds) never pick the same name. */
static atomic_uint dpt__tb_files;

int dpt__tb_dir(const dpt_config_t *c, const char *run_dir, char *out, size_t n)
{
    const char *d = dpt_config_str(c, DPT_CFG_tensorboard_dir);
    if (strcmp(d, "off") == 0)
        return 0;
    snprintf(out, n, "%s", d[0] ? d : run_dir);
    return 1;
}

const char *dpt__tb_step_name(const dpt_config_t *c)
{
    return !DPT_JOB_IS_RL(dpt_config_job(c)) ? "training_iteration" : "timesteps_total";
}

static double dpt__tb_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The seconds in the name of an events file (0 when it is not one). */
static long long dpt__tb_name_time(const char *name)
{
    size_t n = strlen(DPT__TB_PREFIX);
    if (strncmp(name, DPT__TB_PREFIX, n) != 0 || strstr(name, ".tmp-"))
        return 0;
    return strtoll(name + n, NULL, 10);
}

/* The newest time in the names of the events files in dir. */
static long long dpt__tb_newest(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    long long newest = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long t = dpt__tb_name_time(e->d_name);
        if (t > newest)
            newest = t;
    }
    closedir(d);
    return newest;
}

static int dpt__tb_flush(dpt__tb_t *tb)
{
    int bad = tb->buf.len && dpt__io_write(tb->fd, tb->buf.data, tb->buf.len) != 0;
    tb->buf.len = 0;
    if (bad)
        return dpt_error(DPT_EIO, "cannot write %s: %s", tb->path, strerror(errno));
    return DPT_OK;
}

int dpt__tb_open(dpt__tb_t *tb, const dpt_config_t *c, const char *run_dir)
{
    memset(tb, 0, sizeof *tb);
    tb->fd = -1;
    if (!dpt__tb_dir(c, run_dir, tb->dir, sizeof tb->dir))
        return DPT_OK;
    tb->step_name = dpt__tb_step_name(c);
    struct stat sb;
    if (stat(tb->dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return dpt_error(DPT_EINVAL, "tensorboard_dir %s exists and is not a directory", tb->dir);
    int rc = dpt__mkdirs(tb->dir);
    if (!rc)
        tb->on = 1;
    return rc;
}

/* Makes this process's events file, its first record queued. */
static int dpt__tb_create(dpt__tb_t *tb)
{
    char host[256];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/' || (unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
            *p = '_';
    /* TensorBoard reads the files of a directory in name order: a file
     * made in the same second as an older one (a quick resume) takes the
     * next second, so the order of the names is the order of the steps. */
    long long secs = (long long)time(NULL), newest = dpt__tb_newest(tb->dir);
    if (secs <= newest)
        secs = newest + 1;
    int len = snprintf(tb->path, sizeof tb->path, "%s/" DPT__TB_PREFIX "%lld.%s.%ld.%u", tb->dir,
                       secs, host, (long)getpid(), atomic_fetch_add(&dpt__tb_files, 1));
    if (len < 0 || (size_t)len >= sizeof tb->path)
        return dpt_error(DPT_EINVAL, "tensorboard_dir %s: the events file's path is too long",
                         tb->dir);
    tb->fd = dpt__io_open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
    if (tb->fd < 0)
        return dpt_error(DPT_EIO, "cannot create %s: %s", tb->path, strerror(errno));
    return dpt__tfevent_append(&tb->buf, dpt__tb_wall_time(), 0, "brain.Event:2", NULL);
}

int dpt__tb_write(dpt__tb_t *tb, const dpt_metric_t *metrics, size_t n)
{
    if (!tb->on)
        return DPT_OK;
    int rc = tb->fd < 0 ? dpt__tb_create(tb) : DPT_OK;
    double step = 0.0;
    tb->summary.len = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (strcmp(metrics[i].name, tb->step_name) == 0)
            step = metrics[i].value;
        /* As in result.jsonl (null) and progress.csv (empty): a metric with
         * no value this iteration (a return before any episode ended) is
         * left out. */
        if (isfinite(metrics[i].value))
            rc = dpt__tfevent_add_scalar(&tb->summary, metrics[i].name, (float)metrics[i].value);
    }
    if (!rc)
        rc = dpt__tfevent_append(&tb->buf, dpt__tb_wall_time(),
                                 isfinite(step) && step >= 0 ? (int64_t)step : 0, NULL,
                                 &tb->summary);
    return rc ? rc : dpt__tb_flush(tb);
}

void dpt__tb_close(dpt__tb_t *tb)
{
    if (tb->fd >= 0)
        close(tb->fd);
    tb->fd = -1;
    tb->on = 0;
    dpt__tfbuf_free(&tb->buf);
    dpt__tfbuf_free(&tb->summary);
}

/* Rewrites one events file with the records of steps up to `last` (and
 * those without a summary), streaming; the first record that is cut short
 * or corrupt (a write a kill interrupted) ends it. Untouched when nothing
 * is dropped. */
static int dpt__tb_filter_file(const char *path, uint64_t last)
{
    FILE *in = fopen(path, "rb");
    if (!in)
        return DPT_OK;
    dpt__atomic_file_t out;
    int rc = dpt__atomic_open(&out, path);
    if (rc) {
        fclose(in);
        return rc;
    }
    dpt__tfbuf_t rec = {0}, buf = {0};
    int dropped = 0, got;
    while (!rc && (got = dpt__tfrecord_read(in, path, &rec)) != 0) {
        dpt__tfevent_info_t ev;
        if (got < 0 || dpt__tfevent_decode(rec.data, rec.len, &ev) != 0) {
            if (got == DPT_ENOMEM)
                rc = got;
            dropped = 1;
            break;
        }
        if (ev.summary && (ev.step < 0 || (uint64_t)ev.step > last)) {
            dropped = 1;
            continue;
        }
        rc = dpt__tfrecord_append(&buf, rec.data, rec.len);
        if (!rc && buf.len >= ((size_t)1 << 16)) {
            rc = dpt__atomic_write(&out, buf.data, buf.len);
            buf.len = 0;
        }
    }
    int read_error = ferror(in);
    fclose(in);
    if (!rc && read_error)
        rc = dpt_error(DPT_EIO, "cannot read %s", path);
    if (!rc && dropped)
        rc = dpt__atomic_write(&out, buf.data, buf.len);
    if (!rc && dropped)
        rc = dpt__atomic_commit(&out);
    else
        dpt__atomic_abort(&out); /* also after a failed write (a no-op then) */
    dpt__tfbuf_free(&rec);
    dpt__tfbuf_free(&buf);
    return rc;
}

int dpt__tb_truncate(const dpt_config_t *c, const char *run_dir, uint64_t last)
{
    char dir[PATH_MAX];
    if (!dpt__tb_dir(c, run_dir, dir, sizeof dir))
        return DPT_OK;
    DIR *d = opendir(dir);
    if (!d)
        return DPT_OK; /* none written yet */
    int rc = DPT_OK;
    struct dirent *e;
    while (!rc && (e = readdir(d)) != NULL) {
        char path[PATH_MAX];
        if (!dpt__tb_name_time(e->d_name))
            continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            continue;
        rc = dpt__tb_filter_file(path, last);
    }
    closedir(d);
    return rc;
}
