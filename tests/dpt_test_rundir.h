/*
 * tests/dpt_test_rundir.h — what a run directory must look like after any
 * failure, kill or fault (the fault tests' invariant): every checkpoint
 * loads (checksum included), config.conf is complete or absent, and
 * result.jsonl / progress.csv hold complete rows but perhaps a last one cut
 * by a kill, and so do the TensorBoard events files (each record's CRCs
 * right, the first one "brain.Event:2"). Temporaries of an interrupted write
 * may be there (a resume removes them); they are counted.
 */
#ifndef DPT_TEST_RUNDIR_H
#define DPT_TEST_RUNDIR_H

#include "dpt_test_tfevents.h"

#include "dpt/checkpoint.h"
#include "dpt/status.h"
#include "dpt/train.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dpt_test_rundir {
    int checkpoints;              /* checkpoint files that load */
    int bad;                      /* files that break the invariant (printed) */
    int temporaries;              /* NAME.tmp-... files */
    int config;                   /* 1 complete, 0 absent */
    int cut_rows;                 /* metrics files whose last row has no newline */
    unsigned long long newest;    /* iteration of the newest checkpoint */
    unsigned long long rows;      /* complete rows of result.jsonl */
    unsigned long long last_iter; /* training_iteration of its last complete row */
    int gaps;                     /* rows whose iteration is not the previous + 1 */
    int events_files;             /* TensorBoard events files */
    unsigned long long events;    /* their Events with a summary (one per row) */
    int events_repeats;           /* such Events whose step is not above the one before */
} dpt_test_rundir_t;

/* Reads the events files of dir in name order (TensorBoard's). */
static inline void dpt_test_rundir_events(const char *dir, dpt_test_rundir_t *r)
{
    size_t n;
    char **files = dpt_test_tf_list(dir, &n);
    long long last = -1;
    for (size_t i = 0; i < n; i++) {
        dpt_test_tffile_t f;
        if (dpt_test_tffile_read(files[i], &f) != 0) {
            r->bad++;
            continue;
        }
        r->events_files++;
        r->bad += f.bad;
        r->cut_rows += f.cut;
        if (f.n && strcmp(f.events[0].file_version, "brain.Event:2") != 0) {
            fprintf(stderr, "%s: the first record is not file_version brain.Event:2\n", files[i]);
            r->bad++;
        }
        for (size_t k = 0; k < f.n; k++) {
            if (!f.events[k].has_summary)
                continue;
            r->events++;
            if (f.events[k].step <= last)
                r->events_repeats++;
            last = f.events[k].step;
        }
        dpt_test_tffile_free(&f);
    }
    dpt_test_tf_list_free(files, n);
}

/* Reads result.jsonl: complete rows, their iterations in sequence. */
static inline void dpt_test_rundir_metrics(const char *path, dpt_test_rundir_t *r)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[65536];
    int head = 1; /* this piece starts a row (rows may be longer than line) */
    unsigned long long it = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (head) {
            const char *p = strstr(line, "\"training_iteration\":");
            it = p ? strtoull(p + 21, NULL, 10) : 0;
        }
        head = n > 0 && line[n - 1] == '\n';
        if (!head) {
            if (feof(f) || n + 1 < sizeof line) {
                r->cut_rows++;
                break;
            }
            continue; /* the rest of a long row follows */
        }
        if (it != r->last_iter + 1)
            r->gaps++;
        r->last_iter = it;
        r->rows++;
    }
    fclose(f);
}

/* Whether the last byte of a file is a newline (or the file is empty or
 * absent). */
static inline int dpt_test_ends_with_newline(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 1;
    int last = '\n', c;
    while ((c = fgetc(f)) != EOF)
        last = c;
    fclose(f);
    return last == '\n';
}

/* Checks dir (one level, and dir/checkpoints); fills *r. Returns r->bad. */
static inline int dpt_test_rundir_check(const char *dir, dpt_test_rundir_t *r)
{
    memset(r, 0, sizeof *r);
    for (int level = 0; level < 2; level++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, level ? "%s/checkpoints" : "%s", dir);
        DIR *d = opendir(path);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char file[PATH_MAX + 256];
            snprintf(file, sizeof file, "%s/%s", path, e->d_name);
            unsigned long long it;
            int used = 0;
            if (strstr(e->d_name, ".tmp-")) {
                r->temporaries++;
            } else if (sscanf(e->d_name, "checkpoint-%llu.safetensors%n", &it, &used) == 1 &&
                       e->d_name[used] == '\0') {
                dpt_safetensors_t *st;
                if (dpt_safetensors_load(&st, file) != 0) {
                    fprintf(stderr, "checkpoint does not load: %s\n", dpt_last_error());
                    r->bad++;
                    continue;
                }
                dpt_safetensors_destroy(st);
                r->checkpoints++;
                if (it > r->newest)
                    r->newest = it;
            } else if (level == 0 && strcmp(e->d_name, "config.conf") == 0) {
                dpt_config_t *c;
                if (dpt_config_create(&c) != 0) {
                    r->bad++;
                    continue;
                }
                if (dpt_config_load(c, file) != 0 || dpt_config_finalize(c) != 0) {
                    fprintf(stderr, "config.conf is not complete: %s\n", dpt_last_error());
                    r->bad++;
                } else {
                    r->config = 1;
                }
                dpt_config_destroy(c);
            }
        }
        closedir(d);
    }
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    dpt_test_rundir_metrics(path, r);
    snprintf(path, sizeof path, "%s/progress.csv", dir);
    if (!dpt_test_ends_with_newline(path))
        r->cut_rows++;
    dpt_test_rundir_events(dir, r);
    return r->bad;
}

#endif /* DPT_TEST_RUNDIR_H */
