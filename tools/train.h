/*
 * tools/train.h — what the `dpt train` jobs share: the run directory,
 * checkpoint files, metrics and progress.
 */
#ifndef DPT_TOOLS_TRAIN_H
#define DPT_TOOLS_TRAIN_H

#include "config.h"
#include "metrics.h"
#include "dpt/checkpoint.h"

typedef struct dpt_run {
    dpt_config_t cfg;
    char dir[1024];              /* output directory */
    int quiet;
    int resume;                  /* 1 when continuing from a checkpoint */
    dpt_safetensors_t *ckpt;     /* the checkpoint resumed from (or NULL) */
    double time_offset;          /* time_total_s carried over from the checkpoint */
    int rank;                    /* MPI rank (0 without MPI) */
    dpt_metrics_t metrics;
    dpt_progress_t progress;
    int metrics_open;
} dpt_run_t;

/* A built-in env by name, or a plug-in by path (a shared library exporting
 * DPT_ENV_PLUGIN_SYMBOL); NULL with a dpt_error() message otherwise. */
struct dpt_env_class;
const struct dpt_env_class *dpt_cli_find_env(const char *name);

/* The jobs. Each returns an exit code and prints its own errors. */
int dpt_job_supervised(dpt_run_t *run);
int dpt_job_rl(dpt_run_t *run);

/* Writes `w` as checkpoint number `iteration` of the run (with job and
 * config digest metadata) and removes checkpoints beyond keep_checkpoints. */
int dpt_run_save_checkpoint(dpt_run_t *run, dpt_safetensors_writer_t *w, uint64_t iteration,
                            double time_total_s);
/* Opens the metrics files (appending after a resume, truncated to the
 * checkpoint's iteration). */
int dpt_run_open_metrics(dpt_run_t *run, uint64_t resumed_iteration);
/* Prints "dpt train: <what>: <status>: <message>" and returns 1. */
int dpt_run_fail(const char *what, int rc);

/* Finds the newest checkpoint in dir/checkpoints that loads and validates;
 * corrupt newer ones are reported on stderr and skipped. *st is NULL (and 0
 * returned) when there is none at all. */
int dpt_run_find_checkpoint(const char *dir, dpt_safetensors_t **st, int quiet);
/* The checkpoint path of an iteration. */
void dpt_run_checkpoint_path(const dpt_run_t *run, uint64_t iteration, char *out, size_t n);

#endif
