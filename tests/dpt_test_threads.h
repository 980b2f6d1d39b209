/*
 * tests/dpt_test_threads.h — running P participant threads of a threads
 * communicator group in a test (test_comm_threads.c, test_comm_algorithms.c).
 *
 * Each worker runs the test's function with its own handle; the CHECK
 * macros are not thread-safe, so workers only count failures in their own
 * slot (WCHECK_OK, WCHECK_EQ) and the main thread reports them after
 * joining. Everything is static, so a program uses what it needs.
 */
#ifndef DPT_TEST_THREADS_H
#define DPT_TEST_THREADS_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/comm.h"
#include "dpt/status.h"
#include "dpt_test.h"

typedef struct worker {
    int rank;
    dpt_comm_t *comm;
    const void *ctx; /* the test's shared, read-only data */
    int errors;      /* written only by this worker */
    char msg[400];   /* first failure */
    double elapsed;  /* seconds spent (timeout test) */
    uint64_t digest; /* fingerprint of results (determinism test) */
} worker_t;

static inline void werr(worker_t *w, const char *fmt, const char *a, int rc)
{
    if (w->errors++ == 0)
        snprintf(w->msg, sizeof w->msg, "rank %d: %s: %s (%s: %s)", w->rank, fmt, a,
                 dpt_status_name(rc), rc ? dpt_last_error() : "");
}

#define WCHECK_OK(w, expr)                        \
    do {                                          \
        int rc_ = (expr);                         \
        if (rc_ != 0)                             \
            werr((w), "call failed", #expr, rc_); \
    } while (0)

#define WCHECK_EQ(w, got, want, n)                                      \
    do {                                                                \
        if ((n) > 0 && memcmp((got), (want), (n) * sizeof(float)) != 0) \
            werr((w), "wrong result", #got, 0);                         \
    } while (0)

typedef void (*worker_fn)(worker_t *w);

static inline void *worker_main(void *arg)
{
    worker_t *w = arg;
    worker_fn fn;
    memcpy(&fn, (const char *)w->ctx, sizeof fn); /* ctx starts with the function */
    fn(w);
    return NULL;
}

/* Runs fn on P threads, each with its own handle of a fresh group; the ranks
 * listed as absent (absent[r] != 0) do not join a thread. Returns the
 * workers (caller frees), NULL if the group could not be made. */
static inline worker_t *run_group(int P, const dpt_comm_threads_options_t *opt, const void *ctx,
                                  const int *absent)
{
    dpt_comm_threads_group_t *g = NULL;
    int rc = dpt_comm_threads_group_create(&g, P, opt);
    CHECK_OK(rc);
    if (rc != 0)
        return NULL;
    worker_t *w = calloc((size_t)P, sizeof *w);
    pthread_t *th = calloc((size_t)P, sizeof *th);
    if (w == NULL || th == NULL)
        abort();
    for (int r = 0; r < P; r++) {
        w[r].rank = r;
        w[r].ctx = ctx;
        CHECK_OK(dpt_comm_threads_join(g, r, &w[r].comm));
    }
    for (int r = 0; r < P; r++)
        if (!(absent && absent[r]) && pthread_create(&th[r], NULL, worker_main, &w[r]) != 0)
            abort();
    for (int r = 0; r < P; r++)
        if (!(absent && absent[r]))
            pthread_join(th[r], NULL);
    for (int r = 0; r < P; r++)
        dpt_comm_destroy(w[r].comm);
    dpt_comm_threads_group_destroy(g);
    free(th);
    return w;
}

static inline int report(const worker_t *w, int P, const char *what)
{
    int bad = 0;
    for (int r = 0; r < P; r++) {
        if (w[r].errors) {
            fprintf(stderr, "  %s: %d errors, first: %s\n", what, w[r].errors, w[r].msg);
            bad++;
        }
    }
    return bad;
}

/* Integer-valued inputs in [-50, 50], different for every rank. */
static inline float input_value(int r, size_t i)
{
    return (float)((int)(((size_t)r * 7919u + i * 104729u + 13u) % 101u) - 50);
}

#endif /* DPT_TEST_THREADS_H */
