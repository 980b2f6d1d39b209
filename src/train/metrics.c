/* result.jsonl, progress.csv and the TensorBoard events of a run (see
 * train_internal.h). */
#define _GNU_SOURCE /* getline */
#include "core/intern.h"
#include "core/io.h"
#include "dpt/status.h"
#include "train_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A resumed run's progress.csv keeps the columns of its header: they
 * become m's columns (names interned), so that a metric the run did not
 * have when it started (one a later build added) is left out of the rows
 * instead of shifting the values under the header. Best effort: a header
 * that cannot be read leaves m->ncols 0 (the rows then follow the metrics'
 * order, as in a run of one build). */
static void dpt__metrics_read_header(dpt__metrics_t *m, const char *path)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0, max = sizeof m->columns / sizeof m->columns[0];
    ssize_t len = f ? getline(&line, &cap, f) : -1;
    if (f)
        fclose(f);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
    size_t n = 0;
    for (char *p = len > 0 ? line : NULL, *next; p && n < max; p = next) {
        next = strchr(p, ',');
        if (next)
            *next++ = '\0';
        if (!(m->columns[n++] = dpt__intern(p))) {
            n = 0;
            break;
        }
    }
    free(line);
    m->ncols = n;
}

int dpt__metrics_open(dpt__metrics_t *m, const char *dir, int append, const dpt_config_t *c)
{
    memset(m, 0, sizeof *m);
    m->tb.fd = -1;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    m->jsonl = dpt__io_fopen(path, append ? "a" : "w");
    if (!m->jsonl)
        return dpt_error(DPT_EIO, "cannot open %s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/progress.csv", dir);
    if (append) {
        /* An existing non-empty CSV already has its header. */
        struct stat st;
        m->header_written = stat(path, &st) == 0 && st.st_size > 0;
        if (m->header_written)
            dpt__metrics_read_header(m, path);
    }
    m->csv = dpt__io_fopen(path, append ? "a" : "w");
    if (!m->csv) {
        int e = errno;
        fclose(m->jsonl);
        m->jsonl = NULL;
        return dpt_error(DPT_EIO, "cannot open %s: %s", path, strerror(e));
    }
    int rc = dpt__tb_open(&m->tb, c, dir);
    if (rc) {
        fclose(m->jsonl);
        fclose(m->csv);
        m->jsonl = m->csv = NULL;
    }
    return rc;
}

void dpt__metrics_close(dpt__metrics_t *m)
{
    if (m->jsonl)
        fclose(m->jsonl);
    if (m->csv)
        fclose(m->csv);
    m->jsonl = m->csv = NULL;
    dpt__tb_close(&m->tb);
}

/* JSON has no NaN or infinity: write null. Integers print without a
 * fraction; others with enough digits to round-trip. */
static void dpt__metrics_json_number(FILE *f, double v)
{
    if (!isfinite(v))
        fputs("null", f);
    else if (v == floor(v) && fabs(v) < 1e15)
        fprintf(f, "%.0f", v);
    else
        fprintf(f, "%.17g", v);
}

/* Splits a key at '/' into at most 8 parts. */
static int dpt__metrics_split(const char *key, const char *parts[8], size_t lens[8])
{
    int n = 0;
    const char *p = key;
    while (n < 8) {
        const char *s = n < 7 ? strchr(p, '/') : NULL;
        parts[n] = p;
        lens[n] = s ? (size_t)(s - p) : strlen(p);
        n++;
        if (!s)
            break;
        p = s + 1;
    }
    return n;
}

/* The order the JSON writes metrics in: as given, except that every metric
 * under a '/' prefix is moved up to the first one with that prefix (a
 * stable grouping), so that each nested object is written once even when
 * the metrics of a prefix are not contiguous. */
static void dpt__metrics_json_order(const dpt_metric_t *metrics, size_t n, size_t *order)
{
    /* key[i][d]: the first metric sharing i's first d + 1 parts as a
     * prefix (d below i's last part), and i itself at its last part. */
    size_t key[DPT_TRAIN_MAX_METRICS][8];
    int depth[DPT_TRAIN_MAX_METRICS];
    const char *parts[DPT_TRAIN_MAX_METRICS][8];
    size_t lens[DPT_TRAIN_MAX_METRICS][8];
    for (size_t i = 0; i < n; i++)
        depth[i] = dpt__metrics_split(metrics[i].name, parts[i], lens[i]);
    for (size_t i = 0; i < n; i++) {
        for (int d = 0; d < depth[i] - 1; d++) {
            size_t j = 0;
            for (; j < i; j++) {
                int same = depth[j] - 1 > d;
                for (int e = 0; same && e <= d; e++)
                    same = lens[j][e] == lens[i][e] &&
                           strncmp(parts[j][e], parts[i][e], lens[i][e]) == 0;
                if (same)
                    break;
            }
            key[i][d] = j;
        }
        key[i][depth[i] - 1] = i;
    }
    /* Insertion sort by the keys, lexicographically. */
    for (size_t i = 0; i < n; i++) {
        size_t k = i;
        while (k > 0) {
            size_t a = order[k - 1];
            int d = 0, less = 0;
            while (d < depth[i] && d < depth[a] && key[i][d] == key[a][d])
                d++;
            if (d < depth[i] && d < depth[a])
                less = key[i][d] < key[a][d];
            if (!less)
                break;
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
}

static double dpt__metrics_find(const dpt_metric_t *metrics, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(metrics[i].name, name) == 0)
            return metrics[i].value;
    return NAN;
}

int dpt__metrics_write(dpt__metrics_t *m, const dpt_metric_t *metrics, size_t n)
{
    if (!m->header_written) {
        m->ncols = n < sizeof m->columns / sizeof m->columns[0]
                       ? n
                       : sizeof m->columns / sizeof m->columns[0];
        for (size_t i = 0; i < m->ncols; i++) {
            m->columns[i] = metrics[i].name;
            fprintf(m->csv, "%s%s", i ? "," : "", metrics[i].name);
        }
        fputc('\n', m->csv);
        m->header_written = 1;
    }
    /* CSV: one value per column, by name (empty when absent). After a
     * resume the columns are those of the header already there. */
    size_t cols = m->ncols ? m->ncols : n;
    for (size_t c = 0; c < cols; c++) {
        double v = m->ncols ? dpt__metrics_find(metrics, n, m->columns[c]) : metrics[c].value;
        if (c)
            fputc(',', m->csv);
        if (isfinite(v))
            dpt__metrics_json_number(m->csv, v);
    }
    fputc('\n', m->csv);
    /* JSON: open and close nested objects as the '/' prefixes change, the
     * metrics in the order of dpt__metrics_json_order (each object written once). */
    const char *prev[8] = {0};
    size_t prevlen[8] = {0};
    int depth = 0, first[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    size_t order[DPT_TRAIN_MAX_METRICS];
    if (n > DPT_TRAIN_MAX_METRICS)
        n = DPT_TRAIN_MAX_METRICS;
    dpt__metrics_json_order(metrics, n, order);
    fputc('{', m->jsonl);
    for (size_t oi = 0; oi < n; oi++) {
        size_t i = order[oi];
        const char *parts[8];
        size_t lens[8];
        int np = dpt__metrics_split(metrics[i].name, parts, lens);
        int common = 0;
        while (common < depth && common < np - 1 && lens[common] == prevlen[common] &&
               strncmp(parts[common], prev[common], lens[common]) == 0)
            common++;
        while (depth > common) {
            fputc('}', m->jsonl);
            depth--;
        }
        while (depth < np - 1) {
            fprintf(m->jsonl, "%s\"%.*s\":{", first[depth] ? "" : ",", (int)lens[depth],
                    parts[depth]);
            first[depth] = 0;
            prev[depth] = parts[depth];
            prevlen[depth] = lens[depth];
            depth++;
            first[depth] = 1;
        }
        fprintf(m->jsonl, "%s\"%.*s\":", first[depth] ? "" : ",", (int)lens[np - 1], parts[np - 1]);
        first[depth] = 0;
        dpt__metrics_json_number(m->jsonl, metrics[i].value);
    }
    while (depth-- > 0)
        fputc('}', m->jsonl);
    fputs("}\n", m->jsonl);
    if (dpt__io_fflush(m->jsonl) != 0 || ferror(m->jsonl))
        return dpt_error(DPT_EIO, "cannot write result.jsonl: %s", strerror(errno));
    if (dpt__io_fflush(m->csv) != 0 || ferror(m->csv))
        return dpt_error(DPT_EIO, "cannot write progress.csv: %s", strerror(errno));
    return dpt__tb_write(&m->tb, metrics, n);
}

/* The value of column `col` of a CSV line (or -1). */
static long long dpt__metrics_csv_field(const char *line, int col)
{
    const char *p = line;
    for (int c = 0; p && c < col; c++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (!p || col < 0)
        return -1;
    char *end;
    long long v = strtoll(p, &end, 10);
    return end == p ? -1 : v;
}

/* Keeps the complete lines whose iteration is <= last; rewrites atomically,
 * streaming (a long run's metrics need not fit in memory). */
static int dpt__metrics_filter_file(const char *path, int csv, uint64_t last)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return DPT_OK; /* nothing to truncate */
    dpt__atomic_file_t out;
    int rc = dpt__atomic_open(&out, path);
    if (rc) {
        fclose(in);
        return rc;
    }
    char buf[1 << 16], *line = NULL;
    size_t used = 0, cap = 0;
    ssize_t len;
    int col = -1, lineno = 0;
    while (!rc && (len = getline(&line, &cap, in)) > 0) {
        lineno++;
        if (line[len - 1] != '\n')
            break; /* cut off by a kill: not a row */
        long long it = -1;
        if (csv && lineno == 1) {
            int c = 0;
            for (char *p = line; p; c++) {
                if (strncmp(p, "training_iteration", 18) == 0 && (p[18] == ',' || p[18] == '\n'))
                    col = c;
                p = strchr(p, ',');
                if (p)
                    p++;
            }
        } else if (csv) {
            it = dpt__metrics_csv_field(line, col);
        } else {
            char *p = strstr(line, "\"training_iteration\":");
            if (p)
                it = strtoll(p + 21, NULL, 10);
        }
        if (!(csv && lineno == 1) && !(it >= 0 && (uint64_t)it <= last))
            continue;
        /* Whole lines into a 64 KiB buffer, written when full. */
        if (used + (size_t)len > sizeof buf) {
            rc = dpt__atomic_write(&out, buf, used);
            used = 0;
        }
        if (!rc && (size_t)len > sizeof buf)
            rc = dpt__atomic_write(&out, line, (size_t)len);
        else if (!rc) {
            memcpy(buf + used, line, (size_t)len);
            used += (size_t)len;
        }
    }
    int read_error = ferror(in);
    free(line);
    fclose(in);
    if (rc)
        return rc; /* the write aborted itself */
    if (read_error) {
        dpt__atomic_abort(&out);
        return dpt_error(DPT_EIO, "cannot read %s", path);
    }
    if ((rc = dpt__atomic_write(&out, buf, used)) != 0)
        return rc;
    return dpt__atomic_commit(&out);
}

int dpt__metrics_truncate(const char *dir, const dpt_config_t *c, uint64_t iteration,
                          uint64_t timesteps)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    int rc = dpt__metrics_filter_file(path, 0, iteration);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/progress.csv", dir);
    if ((rc = dpt__metrics_filter_file(path, 1, iteration)) != 0)
        return rc;
    int by_iteration = strcmp(dpt__tb_step_name(c), "training_iteration") == 0;
    return dpt__tb_truncate(c, dir, by_iteration ? iteration : timesteps);
}
