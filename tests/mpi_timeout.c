/*
 * Failure scenarios of the MPI and hier collectives, one per run, driven by
 * tests/mpi_timeout_test.sh under `mpirun -np 2` (or 3):
 *
 *   mpi_timeout late    rank 1 sleeps 4 s before its allreduce (timeout 1 s):
 *                       rank 0 fails within ~3 s with DPT_ETIMEDOUT naming
 *                       rank 1 as not responding; rank 1, arriving late,
 *                       never hangs: its allreduce completes or fails, and
 *                       its next collective fails with rank 0's failure.
 *   mpi_timeout stop    rank 1 stops itself (SIGSTOP) before the collective:
 *                       rank 0 reports it and calls dpt_comm_mpi_abort, so
 *                       mpirun ends the job, the stopped rank included.
 *   mpi_timeout hier    hier, 2 threads per process; thread 1 of process 1
 *                       (rank 3) never arrives: its process's threads time
 *                       out naming it, and the failure reaches process 0,
 *                       whose threads fail naming rank 3 too, well before
 *                       the MPI timeout.
 *   mpi_timeout other   (-np 3, debug check on) rank 0 calls allreduce,
 *                       rank 1 barrier, rank 2 nothing: rank 0's report says
 *                       rank 1 is in barrier #1 and rank 2 did not respond.
 *   mpi_timeout probe   exits 0 if the build has MPI, 77 otherwise (no MPI
 *                       call).
 *
 * Each rank prints one line per outcome ("rank R: ...") and exits 0 when its
 * expectations held, 1 otherwise; the script checks the exit status of
 * mpirun, the time taken and the messages. Further arguments are ignored
 * (the script passes a token that identifies its processes).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "dpt_config.h"

#if DPT_HAVE_MPI

static int g_rank;
static double g_t0;

/* Prints "rank R: <what> after T s: CODE: message" and returns 1 unless the
 * call returned `want` with every needle in its message. */
static int expect(const char *what, int rc, int want, const char *n1, const char *n2)
{
    const char *msg = rc ? dpt_last_error() : "";
    int ok = rc == want && (n1 == NULL || strstr(msg, n1)) && (n2 == NULL || strstr(msg, n2));
    printf("rank %d: %s after %.2f s: %s: %s%s\n", g_rank, what, dpt_now() - g_t0,
           dpt_status_name(rc), msg, ok ? "" : "  <-- UNEXPECTED");
    fflush(stdout);
    return ok ? 0 : 1;
}

static int create(dpt_comm_t **c, double timeout_s, int check)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.timeout_s = timeout_s;
    opt.check = check;
    int rc = dpt_comm_mpi_create(c, &opt);
    if (rc != 0)
        printf("rank %d: dpt_comm_mpi_create: %s\n", g_rank, dpt_last_error());
    return rc;
}

/* Buffers of collectives that may fail: MPI may write into them until the
 * process ends, so they are static. */
static float g_buf[4];

static int mode_late(void)
{
    dpt_comm_t *c = NULL;
    if (create(&c, 1.0, 0) != 0)
        return 1;
    int bad = 0, rc;
    g_t0 = dpt_now();
    if (g_rank == 0) {
        rc = dpt_comm_allreduce(c, g_buf, 4, DPT_REDUCE_SUM);
        bad |= expect("allreduce", rc, DPT_ETIMEDOUT, "allreduce #1 (4 floats) timed out after 1 s",
                      "not arrived: rank 1 (did not respond)");
        if (dpt_now() - g_t0 > 3.0)
            bad |= expect("took more than 3 s", 1, 0, NULL, NULL);
        bad |= expect("barrier on the failed communicator", dpt_comm_barrier(c), DPT_ETIMEDOUT,
                      "failed earlier", NULL);
    } else {
        sleep(4);
        /* Rank 0 gave up, but its allreduce is still pending in MPI: this
         * one may complete with it, or fail with rank 0's notice. */
        rc = dpt_comm_allreduce(c, g_buf, 4, DPT_REDUCE_SUM);
        printf("rank 1: late allreduce after %.2f s: %s: %s\n", dpt_now() - g_t0,
               dpt_status_name(rc), rc ? dpt_last_error() : "completed");
        fflush(stdout);
        if (rc != 0 && rc != DPT_ETIMEDOUT)
            bad = 1;
        double t1 = dpt_now();
        rc = dpt_comm_barrier(c);
        bad |= expect("barrier", rc, DPT_ETIMEDOUT, "rank 0", "timed out");
        if (dpt_now() - t1 > 2.0)
            bad |= expect("barrier took more than 2 s", 1, 0, NULL, NULL);
    }
    dpt_comm_destroy(c); /* must not hang on a failed communicator */
    return bad;
}

static int mode_stop(void)
{
    dpt_comm_t *c = NULL;
    if (create(&c, 1.0, 0) != 0)
        return 1;
    g_t0 = dpt_now();
    if (g_rank == 1)
        raise(SIGSTOP); /* as `kill -STOP`: stopped until mpirun kills it */
    int rc = dpt_comm_allreduce(c, g_buf, 4, DPT_REDUCE_SUM);
    int bad = expect("allreduce", rc, DPT_ETIMEDOUT, "not arrived: rank 1 (did not respond)",
                     "stopped, dead, or busy outside dpt's collectives");
    if (g_rank == 0) {
        printf("rank 0: calling dpt_comm_mpi_abort(3)\n");
        fflush(stdout);
        rc = dpt_comm_mpi_abort(3);
        printf("rank 0: dpt_comm_mpi_abort returned %s: %s\n", dpt_status_name(rc),
               dpt_last_error());
    }
    return 1 | bad; /* never reached in a correct run */
}

/* ---- hier ---------------------------------------------------------------- */

#define T 2

typedef struct worker {
    dpt_comm_t *comm;
    int rc;
    char msg[512];
} worker_t;

static float g_hbuf[T][1000];

static void *hier_thread(void *arg)
{
    worker_t *w = arg;
    int r = dpt_comm_rank(w->comm);
    if (r == 3)
        return NULL; /* rank 3 never arrives */
    w->rc = dpt_comm_allreduce(w->comm, g_hbuf[r % T], 1000, DPT_REDUCE_SUM);
    snprintf(w->msg, sizeof w->msg, "%s", w->rc ? dpt_last_error() : "");
    return NULL;
}

static int mode_hier(void)
{
    dpt_comm_hier_options_t opt;
    dpt_comm_hier_options_init(&opt);
    opt.threads.timeout_s = 1.0;
    opt.mpi.timeout_s = 5.0;
    dpt_comm_hier_group_t *g = NULL;
    if (dpt_comm_hier_group_create(&g, T, &opt) != 0) {
        printf("rank %d: dpt_comm_hier_group_create: %s\n", g_rank, dpt_last_error());
        return 1;
    }
    worker_t w[T];
    memset(w, 0, sizeof w);
    for (int t = 0; t < T; t++)
        if (dpt_comm_hier_join(g, t, &w[t].comm) != 0)
            return 1;
    g_t0 = dpt_now();
    pthread_t th;
    if (pthread_create(&th, NULL, hier_thread, &w[1]) != 0)
        return 1;
    hier_thread(&w[0]);
    pthread_join(th, NULL);
    double took = dpt_now() - g_t0;
    int bad = 0;
    for (int t = 0; t < T; t++) {
        int r = dpt_comm_rank(w[t].comm);
        if (r == 3)
            continue;
        const char *need = r == 2 ? "waiting for rank 3" : "rank 3";
        int ok = w[t].rc == DPT_ETIMEDOUT && strstr(w[t].msg, need) != NULL;
        printf("rank %d: allreduce after %.2f s: %s: %s%s\n", r, took, dpt_status_name(w[t].rc),
               w[t].msg, ok ? "" : "  <-- UNEXPECTED");
        bad |= !ok;
    }
    /* The threads timeout is 1 s and the MPI one 5 s: process 0 must have
     * heard of process 1's failure instead of waiting for its own timeout. */
    if (took > 3.0) {
        printf("rank %d: took %.2f s, more than 3 s  <-- UNEXPECTED\n", g_rank * T, took);
        bad = 1;
    }
    fflush(stdout);
    for (int t = 0; t < T; t++)
        dpt_comm_destroy(w[t].comm);
    dpt_comm_hier_group_destroy(g);
    return bad;
}

static int mode_other(void)
{
    dpt_comm_t *c = NULL;
    if (create(&c, 1.0, 1) != 0)
        return 1;
    g_t0 = dpt_now();
    int rc, bad = 0;
    if (g_rank == 0) {
        rc = dpt_comm_allreduce(c, g_buf, 4, DPT_REDUCE_SUM);
        bad = expect("allreduce", rc, DPT_ETIMEDOUT, "rank 1 (in barrier #1)",
                     "rank 2 (did not respond)");
    } else if (g_rank == 1) {
        /* Times out too, at about the same time: its own report, or rank
         * 0's notice; either names rank 2. */
        rc = dpt_comm_barrier(c);
        bad = expect("barrier", rc, DPT_ETIMEDOUT, "rank 2 (did not respond)", NULL);
    } else {
        sleep(3);
    }
    dpt_comm_destroy(c);
    return bad;
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mpi_timeout late|stop|hier|other|probe [token]\n");
        return 2;
    }
    if (strcmp(argv[1], "probe") == 0)
        return DPT_HAVE_MPI ? 0 : 77;
#if !DPT_HAVE_MPI
    printf("skipped: this build has no MPI\n");
    return 77;
#else
    const char *mode = argv[1];
    if (dpt_comm_mpi_init(&argc, &argv, DPT_COMM_MPI_FUNNELED) != 0) {
        fprintf(stderr, "dpt_comm_mpi_init: %s\n", dpt_last_error());
        return 1;
    }
    dpt_comm_t *world = NULL;
    if (create(&world, 30.0, 0) != 0)
        return 1;
    g_rank = dpt_comm_rank(world);
    dpt_comm_destroy(world);
    int bad;
    if (strcmp(mode, "late") == 0)
        bad = mode_late();
    else if (strcmp(mode, "stop") == 0)
        bad = mode_stop();
    else if (strcmp(mode, "hier") == 0)
        bad = mode_hier();
    else if (strcmp(mode, "other") == 0)
        bad = mode_other();
    else {
        fprintf(stderr, "mpi_timeout: unknown mode '%s'\n", mode);
        bad = 2;
    }
    dpt_comm_mpi_finalize();
    return bad;
#endif
}
