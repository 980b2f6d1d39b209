/*
 * Tests of the hierarchical collectives backend: 2 threads in each MPI
 * process, run by CTest under `mpirun -np 2` (2 x 2) and `-np 3` (3 x 2);
 * skipped when the build has no MPI.
 *
 * Thread 0 of each process is the main thread (the one that initialized
 * MPI, so MPI_THREAD_FUNNELED is enough). Worker threads count mismatches in
 * their own slot; the main thread CHECKs them after joining (the CHECK
 * macros are not thread-safe).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/comm.h"
#include "dpt_config.h"
#include "dpt_test.h"

#if DPT_HAVE_MPI

#define T 2

typedef struct worker {
    dpt_comm_t *comm;
    void (*fn)(struct worker *w);
    size_t count;
    int errors;
    char msg[400];
} worker_t;

static dpt_comm_hier_group_t *g_group;
static dpt_comm_t *g_comms[T];

static void werr(worker_t *w, const char *what, int rc)
{
    if (w->errors++ == 0)
        snprintf(w->msg, sizeof w->msg, "rank %d: %s (%s: %s)", dpt_comm_rank(w->comm), what,
                 dpt_status_name(rc), rc ? dpt_last_error() : "");
}

#define WOK(w, expr)               \
    do {                           \
        int rc_ = (expr);          \
        if (rc_ != 0)              \
            werr((w), #expr, rc_); \
    } while (0)
#define WEQ(w, got, want, n)                                            \
    do {                                                                \
        if ((n) > 0 && memcmp((got), (want), (n) * sizeof(float)) != 0) \
            werr((w), "wrong result: " #got, 0);                        \
    } while (0)

static void *thread_main(void *arg)
{
    worker_t *w = arg;
    w->fn(w);
    return NULL;
}

/* Runs fn on the T handles of this process, thread 0 on the calling
 * thread; returns the number of workers with errors (printed). */
static int run(void (*fn)(worker_t *), size_t count)
{
    worker_t w[T];
    pthread_t th[T];
    memset(w, 0, sizeof w);
    for (int t = 0; t < T; t++) {
        w[t].comm = g_comms[t];
        w[t].fn = fn;
        w[t].count = count;
    }
    for (int t = 1; t < T; t++)
        if (pthread_create(&th[t], NULL, thread_main, &w[t]) != 0)
            abort();
    fn(&w[0]);
    for (int t = 1; t < T; t++)
        pthread_join(th[t], NULL);
    int bad = 0;
    for (int t = 0; t < T; t++) {
        if (w[t].errors) {
            fprintf(stderr, "  count %zu: %d errors, first: %s\n", count, w[t].errors, w[t].msg);
            bad++;
        }
    }
    return bad;
}

static float input_value(int r, size_t i)
{
    return (float)((int)(((size_t)r * 7919u + i * 104729u + 13u) % 101u) - 50);
}

static void all_ops_worker(worker_t *w)
{
    dpt_comm_t *c = w->comm;
    int P = dpt_comm_size(c), r = dpt_comm_rank(c);
    size_t n = w->count, m = n ? n : 1;
    float *x = malloc(m * sizeof(float) * (size_t)P);
    float *sum = malloc(m * sizeof(float)), *avg = malloc(m * sizeof(float));
    float *buf = malloc(m * sizeof(float)), *recv = malloc(m * sizeof(float) * (size_t)P);
    if (!x || !sum || !avg || !buf || !recv)
        abort();
    /* the naive oracle: every input gathered, summed in rank order */
    for (int q = 0; q < P; q++)
        for (size_t i = 0; i < n; i++)
            x[(size_t)q * n + i] = input_value(q, i);
    for (size_t i = 0; i < n; i++) {
        float s = x[i];
        for (int q = 1; q < P; q++)
            s = s + x[(size_t)q * n + i];
        sum[i] = s;
        avg[i] = s / (float)P;
    }
    const float *mine = x + (size_t)r * n;

    memcpy(buf, mine, n * sizeof(float));
    WOK(w, dpt_comm_allreduce(c, buf, n, DPT_REDUCE_SUM));
    WEQ(w, buf, sum, n);
    memcpy(buf, mine, n * sizeof(float));
    WOK(w, dpt_comm_allreduce(c, buf, n, DPT_REDUCE_AVG));
    WEQ(w, buf, avg, n);
    dpt_comm_request_t req;
    memcpy(buf, mine, n * sizeof(float));
    WOK(w, dpt_comm_iallreduce(c, buf, n, DPT_REDUCE_SUM, &req));
    WOK(w, dpt_comm_wait(&req));
    WEQ(w, buf, sum, n);
    for (int root = 0; root < P; root++) {
        memcpy(buf, mine, n * sizeof(float));
        WOK(w, dpt_comm_broadcast(c, buf, n, root));
        WEQ(w, buf, x + (size_t)root * n, n);
    }
    memset(recv, 0xff, m * sizeof(float) * (size_t)P);
    WOK(w, dpt_comm_allgather(c, mine, n, recv));
    WEQ(w, recv, x, n * (size_t)P);
    memset(recv, 0xff, m * sizeof(float) * (size_t)P);
    memcpy(recv + (size_t)r * n, mine, n * sizeof(float));
    WOK(w, dpt_comm_allgather(c, recv + (size_t)r * n, n, recv));
    WEQ(w, recv, x, n * (size_t)P);
    size_t off = dpt_comm_block_offset(n, P, r), len = dpt_comm_block_size(n, P, r);
    WOK(w, dpt_comm_reduce_scatter(c, mine, n, recv, DPT_REDUCE_SUM));
    WEQ(w, recv, sum + off, len);
    WOK(w, dpt_comm_reduce_scatter(c, mine, n, recv, DPT_REDUCE_AVG));
    WEQ(w, recv, avg + off, len);
    WOK(w, dpt_comm_barrier(c));
    WOK(w, dpt_comm_check_equal(c, sum, n));
    free(x);
    free(sum);
    free(avg);
    free(buf);
    free(recv);
}

static void test_layout(void)
{
    int R = dpt_comm_size(g_comms[0]) / T;
    CHECK(dpt_comm_size(g_comms[0]) == R * T);
    CHECK(dpt_comm_backend(g_comms[0]) == DPT_COMM_HIER);
    CHECK(dpt_comm_rank(g_comms[1]) == dpt_comm_rank(g_comms[0]) + 1);
    CHECK(dpt_comm_rank(g_comms[0]) % T == 0);
}

static void test_all_ops(void)
{
    size_t P = (size_t)dpt_comm_size(g_comms[0]);
    size_t counts[] = {0, 1, P - 1, P, 1000, 10007, (size_t)1 << 20};
    for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++)
        CHECK(run(all_ops_worker, counts[j]) == 0);
}

/* Every algorithm of the step across processes (mpi.algorithm), with the
 * processes as nodes of one (ranks_per_node 1) or all on one host. */
static void test_mpi_algorithms(void)
{
    dpt_comm_algorithm_t algos[] = {DPT_ALLREDUCE_RING, DPT_ALLREDUCE_TREE, DPT_ALLREDUCE_HIER,
                                    DPT_ALLREDUCE_NATIVE};
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++)
        for (int rpn = 0; rpn <= 1; rpn++) {
            for (int t = 0; t < T; t++)
                dpt_comm_destroy(g_comms[t]);
            dpt_comm_hier_group_destroy(g_group);
            g_group = NULL;
            dpt_comm_hier_options_t opt;
            dpt_comm_hier_options_init(&opt);
            opt.threads.timeout_s = 60.0;
            opt.threads.algorithm = a % 2 ? DPT_ALLREDUCE_NATIVE : DPT_ALLREDUCE_AUTO;
            opt.mpi.algorithm = algos[a];
            opt.mpi.ranks_per_node = rpn;
            REQUIRE_OK(dpt_comm_hier_group_create(&g_group, T, &opt));
            for (int t = 0; t < T; t++)
                REQUIRE_OK(dpt_comm_hier_join(g_group, t, &g_comms[t]));
            CHECK(dpt_comm_allreduce_algorithm(g_comms[0], 100) == DPT_ALLREDUCE_HIER);
            size_t P = (size_t)dpt_comm_size(g_comms[0]);
            size_t counts[] = {0, 1, P - 1, P, 1000, 10007};
            for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++)
                CHECK(run(all_ops_worker, counts[j]) == 0);
        }
    dpt_comm_hier_options_t opt;
    dpt_comm_hier_options_init(&opt);
    opt.threads.algorithm = DPT_ALLREDUCE_RING;
    dpt_comm_hier_group_t *g = NULL;
    CHECK_ERR(dpt_comm_hier_group_create(&g, T, &opt), DPT_EINVAL, "threads.algorithm ring");
    CHECK(g == NULL);
}

static void mismatch_worker(worker_t *w)
{
    /* process 0 calls allreduce(10), the others broadcast(12, root 0) */
    float buf[12] = {0};
    dpt_comm_t *c = w->comm;
    int proc = dpt_comm_rank(c) / T;
    int rc = proc == 0 ? dpt_comm_allreduce(c, buf, 10, DPT_REDUCE_SUM)
                       : dpt_comm_broadcast(c, buf, 12, 0);
    if (rc != DPT_ECOMM)
        werr(w, "expected DPT_ECOMM", rc);
    else if (!strstr(dpt_last_error(), "called allreduce(count=10") ||
             !strstr(dpt_last_error(), "called broadcast(count=12, root=0)"))
        werr(w, "message does not name both sides", rc);
}

static void test_mismatch_detected(void)
{
    /* a separate group with the debug check on; it is failed afterwards */
    for (int t = 0; t < T; t++)
        dpt_comm_destroy(g_comms[t]);
    dpt_comm_hier_group_destroy(g_group);
    g_group = NULL;
    dpt_comm_hier_options_t opt;
    dpt_comm_hier_options_init(&opt);
    opt.mpi.check = 1;
    opt.threads.timeout_s = 30.0;
    REQUIRE_OK(dpt_comm_hier_group_create(&g_group, T, &opt));
    for (int t = 0; t < T; t++)
        REQUIRE_OK(dpt_comm_hier_join(g_group, t, &g_comms[t]));
    CHECK(run(mismatch_worker, 0) == 0);
}

static void test_bad_arguments(void)
{
    dpt_comm_hier_group_t *g = NULL;
    CHECK_ERR(dpt_comm_hier_group_create(&g, 0, NULL), DPT_EINVAL, "0 threads per process");
    dpt_comm_t *c = NULL;
    CHECK_ERR(dpt_comm_hier_join(g_group, T, &c), DPT_EINVAL, "rank 2");
    CHECK_ERR(dpt_comm_hier_join(g_group, 0, &c), DPT_ESTATE, "already joined");
    float buf[2];
    CHECK_ERR(dpt_comm_broadcast(g_comms[0], buf, 2, dpt_comm_size(g_comms[0])), DPT_EINVAL,
              "root");
}

/* The MPI part's timeout is checked before any communication (every process
 * makes the same mistake here, so none waits for the others). */
static void test_bad_timeout(void)
{
    dpt_comm_hier_options_t opt;
    dpt_comm_hier_options_init(&opt);
    CHECK(opt.mpi.timeout_s == 300.0);
    dpt_comm_hier_group_t *g = NULL;
    opt.mpi.timeout_s = 0.0;
    CHECK_ERR(dpt_comm_hier_group_create(&g, T, &opt), DPT_EINVAL, "timeout_s 0");
    CHECK(g == NULL);
    opt.mpi.timeout_s = -2.0;
    CHECK_ERR(dpt_comm_hier_group_create(&g, T, &opt), DPT_EINVAL, "timeout_s -2");
    CHECK(g == NULL);
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc;
    (void)argv;
    dpt_comm_hier_group_t *g = NULL;
    if (dpt_comm_hier_group_create(&g, 2, NULL) != DPT_ENOTSUP) {
        printf("dpt_comm_hier_group_create without MPI must return DPT_ENOTSUP\n");
        return 1;
    }
    DPT_TEST_SKIP("this build has no MPI");
#else
    int rc = dpt_comm_mpi_init(&argc, &argv, DPT_COMM_MPI_FUNNELED);
    if (rc < 0) {
        fprintf(stderr, "dpt_comm_mpi_init: %s\n", dpt_last_error());
        return 1;
    }
    dpt_comm_hier_options_t opt;
    dpt_comm_hier_options_init(&opt);
    opt.threads.timeout_s = 60.0;
    if (dpt_comm_hier_group_create(&g_group, T, &opt) < 0) {
        fprintf(stderr, "dpt_comm_hier_group_create: %s\n", dpt_last_error());
        return 1;
    }
    for (int t = 0; t < T; t++) {
        if (dpt_comm_hier_join(g_group, t, &g_comms[t]) < 0) {
            fprintf(stderr, "dpt_comm_hier_join: %s\n", dpt_last_error());
            return 1;
        }
    }
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_layout),  DPT_TEST(test_bad_arguments),  DPT_TEST(test_bad_timeout),
        DPT_TEST(test_all_ops), DPT_TEST(test_mpi_algorithms), DPT_TEST(test_mismatch_detected),
    };
    rc = DPT_TEST_RUN(cases);
    for (int t = 0; t < T; t++)
        dpt_comm_destroy(g_comms[t]);
    dpt_comm_hier_group_destroy(g_group);
    dpt_comm_mpi_finalize();
    return rc;
#endif
}
