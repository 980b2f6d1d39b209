/* result.jsonl / progress.csv writers and the progress line. */
#include "metrics.h"
#include "dpt/stats.h"
#include "dpt/status.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int dpt_mkdirs(const char *path)
{
    char buf[1024];
    if (strlen(path) >= sizeof buf)
        return dpt_error(DPT_EINVAL, "path too long: %.100s...", path);
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
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

int dpt_metrics_open(dpt_metrics_t *m, const char *dir, int append)
{
    memset(m, 0, sizeof *m);
    char path[1100];
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    m->jsonl = fopen(path, append ? "a" : "w");
    if (!m->jsonl)
        return dpt_error(DPT_EIO, "cannot open %s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/progress.csv", dir);
    if (append) {
        /* An existing non-empty CSV already has its header. */
        struct stat st;
        m->header_written = stat(path, &st) == 0 && st.st_size > 0;
    }
    m->csv = fopen(path, append ? "a" : "w");
    if (!m->csv) {
        fclose(m->jsonl);
        m->jsonl = NULL;
        return dpt_error(DPT_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    return DPT_OK;
}

void dpt_metrics_close(dpt_metrics_t *m)
{
    if (m->jsonl)
        fclose(m->jsonl);
    if (m->csv)
        fclose(m->csv);
    m->jsonl = m->csv = NULL;
}

void dpt_metrics_begin(dpt_metrics_t *m)
{
    m->n = 0;
}

void dpt_metrics_add(dpt_metrics_t *m, const char *key, double value)
{
    if (m->n == DPT_METRICS_MAX)
        return;
    snprintf(m->keys[m->n], DPT_METRIC_KEY_MAX, "%s", key);
    m->values[m->n++] = value;
}

double dpt_metrics_get(const dpt_metrics_t *m, const char *key)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->keys[i], key) == 0)
            return m->values[i];
    return NAN;
}

/* JSON has no NaN or infinity: write null. Integers print without a
 * fraction; others with enough digits to round-trip. */
static void dpt__json_number(FILE *f, double v)
{
    if (!isfinite(v))
        fputs("null", f);
    else if (v == floor(v) && fabs(v) < 1e15)
        fprintf(f, "%.0f", v);
    else
        fprintf(f, "%.15g", v);
}

/* Number of leading '/'-separated components shared by a and b. */
static int dpt__split(const char *key, const char *parts[8], size_t lens[8])
{
    int n = 0;
    const char *p = key;
    while (n < 8) {
        const char *s = strchr(p, '/');
        parts[n] = p;
        lens[n] = s ? (size_t)(s - p) : strlen(p);
        n++;
        if (!s)
            break;
        p = s + 1;
    }
    return n;
}

int dpt_metrics_end(dpt_metrics_t *m)
{
    if (!m->header_written) {
        m->ncols = m->n;
        for (int i = 0; i < m->n; i++) {
            memcpy(m->columns[i], m->keys[i], DPT_METRIC_KEY_MAX);
            fprintf(m->csv, "%s%s", i ? "," : "", m->keys[i]);
        }
        fputc('\n', m->csv);
        m->header_written = 1;
    }
    /* CSV: one value per column, by name (empty when absent). */
    int cols = m->ncols ? m->ncols : m->n;
    for (int c = 0; c < cols; c++) {
        const char *name = m->ncols ? m->columns[c] : m->keys[c];
        double v = dpt_metrics_get(m, name);
        if (c)
            fputc(',', m->csv);
        if (isfinite(v))
            dpt__json_number(m->csv, v);
    }
    fputc('\n', m->csv);
    /* JSON: open and close nested objects as the '/' prefixes change. */
    const char *prev[8] = {0};
    size_t prevlen[8] = {0};
    int depth = 0; /* open nested objects */
    fputc('{', m->jsonl);
    int first_at_level[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < m->n; i++) {
        const char *parts[8];
        size_t lens[8];
        int np = dpt__split(m->keys[i], parts, lens);
        int common = 0;
        while (common < depth && common < np - 1 && lens[common] == prevlen[common] &&
               strncmp(parts[common], prev[common], lens[common]) == 0)
            common++;
        while (depth > common) {
            fputc('}', m->jsonl);
            depth--;
        }
        while (depth < np - 1) {
            fprintf(m->jsonl, "%s\"%.*s\":{", first_at_level[depth] ? "" : ",",
                    (int)lens[depth], parts[depth]);
            first_at_level[depth] = 0;
            prev[depth] = parts[depth];
            prevlen[depth] = lens[depth];
            depth++;
            first_at_level[depth] = 1;
        }
        fprintf(m->jsonl, "%s\"%.*s\":", first_at_level[depth] ? "" : ",", (int)lens[np - 1],
                parts[np - 1]);
        first_at_level[depth] = 0;
        dpt__json_number(m->jsonl, m->values[i]);
    }
    while (depth-- > 0)
        fputc('}', m->jsonl);
    fputs("}\n", m->jsonl);
    if (fflush(m->jsonl) != 0 || fflush(m->csv) != 0 || ferror(m->jsonl) || ferror(m->csv))
        return dpt_error(DPT_EIO, "writing metrics failed: %s", strerror(errno));
    return DPT_OK;
}

/* Keeps lines whose iteration <= last. For JSON the "iteration" field is
 * read from the line; for CSV from the column named "iteration". */
static int dpt__filter_file(const char *path, int csv, long last)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return DPT_OK; /* nothing to truncate */
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return dpt_error(DPT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    }
    static char line[65536];
    int col = -1, lineno = 0;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        long it = -1;
        if (csv) {
            if (lineno == 1) {
                /* find the iteration column */
                int c = 0;
                for (char *p = line; p; c++) {
                    if (strncmp(p, "training_iteration", 18) == 0 && (p[18] == ',' || p[18] == '\n'))
                        col = c;
                    p = strchr(p, ',');
                    if (p)
                        p++;
                }
                fputs(line, out);
                continue;
            }
            char *p = line;
            for (int c = 0; p && c < col; c++) {
                p = strchr(p, ',');
                if (p)
                    p++;
            }
            if (p && col >= 0)
                it = strtol(p, NULL, 10);
        } else {
            char *p = strstr(line, "\"training_iteration\":");
            if (p)
                it = strtol(p + 21, NULL, 10);
        }
        if (it >= 0 && it <= last)
            fputs(line, out);
    }
    fclose(in);
    int bad = ferror(out);
    if (fclose(out) != 0 || bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return dpt_error(DPT_EIO, "cannot rewrite %s", path);
    }
    return DPT_OK;
}

int dpt_metrics_truncate(const char *dir, long last_iteration)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    int rc = dpt__filter_file(path, 0, last_iteration);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/progress.csv", dir);
    return dpt__filter_file(path, 1, last_iteration);
}

void dpt_progress_init(dpt_progress_t *p, int quiet)
{
    p->tty = isatty(STDOUT_FILENO);
    p->quiet = quiet;
    p->start = dpt_now();
    p->last_print = -1e9;
}

void dpt_progress_update(dpt_progress_t *p, const char *line, double frac, int force)
{
    if (p->quiet)
        return;
    double now = dpt_now();
    /* A live line refreshes 10 times a second; plain output every 5 s. */
    double period = p->tty ? 0.1 : 5.0;
    if (!force && now - p->last_print < period)
        return;
    p->last_print = now;
    double el = now - p->start;
    char eta[48] = "";
    if (frac > 0.0 && frac <= 1.0)
        snprintf(eta, sizeof eta, "  eta %.0fs", el * (1.0 - frac) / frac);
    if (p->tty)
        printf("\r\033[K%s  elapsed %.1fs%s", line, el, eta);
    else
        printf("%s  elapsed %.1fs%s\n", line, el, eta);
    fflush(stdout);
}

void dpt_progress_done(dpt_progress_t *p)
{
    if (!p->quiet && p->tty)
        printf("\n");
}
