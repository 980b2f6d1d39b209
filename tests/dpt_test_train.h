/*
 * tests/dpt_test_train.h — helpers of the trainer tests (dpt/train.h):
 * configs, weights, checkpoints, result comparisons, and the ranks' setup
 * and agreement checks of the MPI test programs. Everything is static
 * inline, so a program includes what it uses and nothing else warns; none
 * needs an MPI build to compile (the communicator API is always declared).
 */
#ifndef DPT_TEST_TRAIN_H
#define DPT_TEST_TRAIN_H

#include "dpt_test_files.h"

#include "dpt/checkpoint.h"
#include "dpt/comm.h"
#include "dpt/status.h"
#include "dpt/train.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- configs ---- */

static inline int dpt_test_config_set_all(dpt_config_t *c, const char *const *sets, size_t n)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++)
        rc = dpt_config_set(c, sets[i]);
    return rc;
}

/* A finalized config: the "key=value" settings of base[0..nbase), then
 * those of sets[0..nsets) (either may be NULL with a count of 0). On error
 * *out is NULL and the status is returned, its message kept. */
static inline int dpt_test_config(dpt_config_t **out, const char *const *base, size_t nbase,
                                  const char *const *sets, size_t nsets)
{
    int rc = dpt_config_create(out);
    if (rc) {
        *out = NULL;
        return rc;
    }
    rc = dpt_test_config_set_all(*out, base, nbase);
    if (!rc)
        rc = dpt_test_config_set_all(*out, sets, nsets);
    if (!rc)
        rc = dpt_config_finalize(*out);
    if (rc) {
        dpt_config_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* The same with the settings after base given as a NULL-terminated list
 * (first, then ap): the config, or NULL with the message printed. */
static inline dpt_config_t *dpt_test_config_va(const char *const *base, size_t nbase,
                                               const char *first, va_list ap)
{
    dpt_config_t *c;
    int rc = dpt_config_create(&c);
    if (rc) {
        fprintf(stderr, "config: %s\n", dpt_last_error());
        return NULL;
    }
    rc = dpt_test_config_set_all(c, base, nbase);
    for (const char *kv = first; !rc && kv; kv = va_arg(ap, const char *))
        rc = dpt_config_set(c, kv);
    if (!rc)
        rc = dpt_config_finalize(c);
    if (rc) {
        fprintf(stderr, "config: %s\n", dpt_last_error());
        dpt_config_destroy(c);
        return NULL;
    }
    return c;
}

/* ---- weights and checkpoints ---- */

/* A malloc'ed copy of the trainer's weights and, when n is not NULL, their
 * count in *n; NULL on failure. */
static inline float *dpt_test_weights(dpt_trainer_t *t, size_t *n)
{
    size_t count = dpt_trainer_vars(t)->total;
    if (n)
        *n = count;
    float *w = malloc(count * sizeof *w);
    if (w && dpt_trainer_get_weights(t, w, count) != 0) {
        free(w);
        return NULL;
    }
    return w;
}

/* Takes part in t's checkpoint (dpt_trainer_checkpoint, collective over a
 * trainer's ranks) and, when `writes` (the one rank with a writer), saves it
 * to path; the other ranks pass no writer. */
static inline int dpt_test_checkpoint(dpt_trainer_t *t, const char *path, int writes)
{
    dpt_safetensors_writer_t *w = NULL;
    int rc = writes ? dpt_safetensors_writer_create(&w) : 0;
    if (rc)
        return rc;
    rc = dpt_trainer_checkpoint(t, w);
    if (!rc && w)
        rc = dpt_safetensors_save(w, path);
    dpt_safetensors_writer_destroy(w);
    return rc;
}

/* ---- results ---- */

/* Metrics that measure time (durations and rates) differ from run to run;
 * every other one must be bitwise equal after a resume. */
static inline int dpt_test_timing_metric(const char *name)
{
    size_t n = strlen(name);
    return strcmp(name, "env_steps_per_s") == 0 || strcmp(name, "samples_per_s") == 0 ||
           strcmp(name, "time_this_iter_s") == 0 || strncmp(name, "timing_breakdown/", 17) == 0 ||
           (n > 3 && strcmp(name + n - 3, "_ms") == 0); /* sync_replicas' token_wait_ms */
}

/* 1 when a and b have the same metrics, in the same order, with bitwise
 * equal values but for the timings; prints the first that differs. */
static inline int dpt_test_same_metrics(const dpt_train_result_t *a, const dpt_train_result_t *b)
{
    if (a->nmetrics != b->nmetrics)
        return 0;
    for (size_t i = 0; i < a->nmetrics; i++) {
        if (strcmp(a->metrics[i].name, b->metrics[i].name) != 0)
            return 0;
        if (!dpt_test_timing_metric(a->metrics[i].name) &&
            memcmp(&a->metrics[i].value, &b->metrics[i].value, sizeof(double)) != 0) {
            fprintf(stderr, "metric %s: %.17g vs %.17g\n", a->metrics[i].name, a->metrics[i].value,
                    b->metrics[i].value);
            return 0;
        }
    }
    return 1;
}

/* ---- ranks ---- */

/* 1 when every participant of comm passed the same h (a collective). */
static inline int dpt_test_same_on_all_ranks(dpt_comm_t *comm, uint64_t h)
{
    /* 16-bit pieces are exact as floats. */
    float mine[4] = {(float)(h & 0xffff), (float)((h >> 16) & 0xffff), (float)((h >> 32) & 0xffff),
                     (float)(h >> 48)};
    int size = dpt_comm_size(comm);
    float *all = malloc((size_t)size * sizeof mine);
    if (!all || dpt_comm_allgather(comm, mine, 4, all) != 0) {
        free(all);
        return 0;
    }
    int same = 1;
    for (int k = 0; k < size; k++)
        same &= memcmp(all + 4 * k, mine, sizeof mine) == 0;
    free(all);
    return same;
}

/* The start of an MPI test program: MPI initialized at `level`, *comm over
 * MPI_COMM_WORLD, and path = $TMPDIR/<name>_<pid>.safetensors (TMPDIR unset
 * or empty: /tmp) with rank 0's process id, the same file on every rank.
 * 0, or 1 (the exit code) with the failure printed. */
static inline int dpt_test_mpi_begin(int *argc, char ***argv, dpt_comm_mpi_thread_t level,
                                     const char *name, dpt_comm_t **comm, char *path, size_t size)
{
    if (dpt_comm_mpi_init(argc, argv, level) != 0) {
        fprintf(stderr, "MPI init: %s\n", dpt_last_error());
        return 1;
    }
    dpt_comm_mpi_options_t o;
    dpt_comm_mpi_options_init(&o);
    if (dpt_comm_mpi_create(comm, &o) != 0) {
        fprintf(stderr, "MPI comm: %s\n", dpt_last_error());
        return 1;
    }
    /* Exact as a float: pids are below 2^24. */
    float pid = (float)getpid();
    if (dpt_comm_broadcast(*comm, &pid, 1, 0) != 0) {
        fprintf(stderr, "MPI broadcast: %s\n", dpt_last_error());
        return 1;
    }
    snprintf(path, size, "%s/%s_%.0f.safetensors", dpt_test_tmp_base(), name, (double)pid);
    return 0;
}

/* The end of an MPI test program. */
static inline void dpt_test_mpi_end(dpt_comm_t *comm)
{
    dpt_comm_destroy(comm);
    dpt_comm_mpi_finalize();
}

#endif /* DPT_TEST_TRAIN_H */
