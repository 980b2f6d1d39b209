/*
 * tools/metrics.h — per-iteration metrics and progress output of `dpt train`.
 *
 * A metrics row is a list of (key, number) pairs added in order; keys may
 * contain '/' to nest them ("info/learner/policy_loss"), as RLlib's results
 * do. Each row becomes one JSON object in result.jsonl (nested by '/') and
 * one line of progress.csv (flat, the same keys as columns). The first row
 * fixes the CSV columns; later rows must use the same keys in the same order.
 */
#ifndef DPT_TOOLS_METRICS_H
#define DPT_TOOLS_METRICS_H

#include <stdio.h>

#define DPT_METRICS_MAX 96
#define DPT_METRIC_KEY_MAX 64

typedef struct dpt_metrics {
    FILE *jsonl, *csv;
    int header_written;
    int n, ncols;
    char keys[DPT_METRICS_MAX][DPT_METRIC_KEY_MAX];
    double values[DPT_METRICS_MAX];
    char columns[DPT_METRICS_MAX][DPT_METRIC_KEY_MAX];
} dpt_metrics_t;

/* Opens result.jsonl and progress.csv in `dir` for appending (append = 1,
 * after resume) or writing. */
int dpt_metrics_open(dpt_metrics_t *m, const char *dir, int append);
void dpt_metrics_close(dpt_metrics_t *m);
void dpt_metrics_begin(dpt_metrics_t *m);
void dpt_metrics_add(dpt_metrics_t *m, const char *key, double value);
/* Writes the row to both files and flushes them. */
int dpt_metrics_end(dpt_metrics_t *m);
/* The value of `key` in the current row (NAN when absent). */
double dpt_metrics_get(const dpt_metrics_t *m, const char *key);

/* Keeps the lines of result.jsonl and progress.csv whose "training_iteration" is at
 * most `last_iteration` (for resuming from a checkpoint written before the
 * run stopped): rewrites both files atomically. */
int dpt_metrics_truncate(const char *dir, long last_iteration);

/* Progress display: a live line on a terminal, plain lines otherwise. */
typedef struct dpt_progress {
    int tty, quiet;
    double last_print, start;
} dpt_progress_t;

void dpt_progress_init(dpt_progress_t *p, int quiet);
/* `line` is the status text; frac in [0, 1] gives the ETA (negative: none).
 * force prints even when the last print was recent (e.g. the last line). */
void dpt_progress_update(dpt_progress_t *p, const char *line, double frac, int force);
/* Ends the live line (prints a newline on a terminal). */
void dpt_progress_done(dpt_progress_t *p);

/* mkdir -p; DPT_EIO with the path on failure. */
int dpt_mkdirs(const char *path);

#endif
