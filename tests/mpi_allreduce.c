/*
 * Tests of the MPI backend's allreduce algorithms (native, ring, tree,
 * hier, auto), run by CTest under `mpirun -np 2`, `-np 3` and `-np 4`
 * (skipped without MPI).
 *
 * Every rank knows every rank's input, so each computes the expected
 * results itself: integer-valued inputs give the naive oracle's bits with
 * every algorithm and node layout (ranks_per_node 0 = by host, 1, 2);
 * random floats give the documented order bitwise for ring and tree, the
 * same bits on every rank and in a second run for all, within
 * 2 (P - 1) 2^-24 sum |x_r| of the oracle. auto runs what the table says; a
 * rank missing from a ring allreduce is reported by name; ranks configured
 * with different algorithms are a reported mismatch.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt_config.h"
#include "dpt_test.h"
#include "dpt_test_allreduce.h"

#if DPT_HAVE_MPI
#include <mpi.h>

static int g_P, g_rank;

static float input_value(int r, size_t i)
{
    return (float)((int)(((size_t)r * 7919u + i * 104729u + 13u) % 101u) - 50);
}

#define CHECK_BITS(got, want, n) CHECK((n) == 0 || memcmp((got), (want), (n) * sizeof(float)) == 0)

static const dpt_comm_algorithm_t ALGOS[] = {DPT_ALLREDUCE_NATIVE, DPT_ALLREDUCE_RING,
                                             DPT_ALLREDUCE_TREE, DPT_ALLREDUCE_HIER,
                                             DPT_ALLREDUCE_AUTO};
#define NALGOS (sizeof ALGOS / sizeof ALGOS[0])

static dpt_comm_t *make(dpt_comm_algorithm_t algo, int ranks_per_node, int check, double timeout)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.algorithm = algo;
    opt.ranks_per_node = ranks_per_node;
    opt.check = check;
    opt.timeout_s = timeout;
    dpt_comm_t *c = NULL;
    CHECK_OK(dpt_comm_mpi_create(&c, &opt));
    return c;
}

/* What an allreduce of n floats runs with `algo` (every rank on one host). */
static dpt_comm_algorithm_t runs(dpt_comm_algorithm_t algo, int rpn, size_t n)
{
    if (algo != DPT_ALLREDUCE_AUTO)
        return algo;
    int nodes = rpn > 0 ? (g_P + rpn - 1) / rpn : 1;
    return dpt__comm_auto(DPT__LEVEL_MPI, g_P, nodes > 1 ? 2 : 1, n * sizeof(float));
}

/* x[q] = rank q's input; fills the expected SUM (documented order for
 * random data) and AVG. */
static void expect(const float *const *x, size_t n, dpt_comm_algorithm_t a, int random, float *sum,
                   float *avg)
{
    float v[64];
    for (size_t i = 0; i < n; i++) {
        float s = sum_rank_order(x, g_P, i);
        if (random && a == DPT_ALLREDUCE_RING)
            s = sum_ring_order(x, g_P, n, i);
        else if (random && a == DPT_ALLREDUCE_TREE)
            s = sum_tree_order(x, g_P, i, v);
        sum[i] = s;
        avg[i] = s / (float)g_P;
    }
}

/* One algorithm and layout, one count: SUM, AVG, iallreduce; integer or
 * random data. */
static void one_case(dpt_comm_t *c, dpt_comm_algorithm_t algo, int rpn, size_t n, int random)
{
    size_t m = n ? n : 1;
    float **x = malloc(sizeof *x * (size_t)g_P);
    float *sum = malloc(m * sizeof(float)), *avg = malloc(m * sizeof(float));
    float *buf = malloc(m * sizeof(float)), *first = malloc(m * sizeof(float));
    if (!x || !sum || !avg || !buf || !first)
        abort();
    for (int q = 0; q < g_P; q++) {
        x[q] = malloc(m * sizeof(float));
        if (x[q] == NULL)
            abort();
        if (random)
            random_fill(x[q], n, q, (int)n);
        else
            for (size_t i = 0; i < n; i++)
                x[q][i] = input_value(q, i);
    }
    const float *const *cx = (const float *const *)x;
    dpt_comm_algorithm_t a = runs(algo, rpn, n);
    CHECK(dpt_comm_allreduce_algorithm(c, n) == a);
    expect(cx, n, a, random, sum, avg);
    const float *mine = x[g_rank];

    memcpy(buf, mine, n * sizeof(float));
    CHECK_OK(dpt_comm_allreduce(c, buf, n, DPT_REDUCE_SUM));
    if (a != DPT_ALLREDUCE_HIER && !(random && a == DPT_ALLREDUCE_NATIVE))
        CHECK_BITS(buf, sum, n);
    int far = 0;
    for (size_t i = 0; i < n; i++)
        far +=
            fabs((double)buf[i] - (double)sum_rank_order(cx, g_P, i)) > sum_order_bound(cx, g_P, i);
    CHECK(far == 0);
    CHECK_OK(dpt_comm_check_equal(c, buf, n));
    memcpy(first, buf, n * sizeof(float));
    memcpy(buf, mine, n * sizeof(float));
    CHECK_OK(dpt_comm_allreduce(c, buf, n, DPT_REDUCE_SUM));
    CHECK_BITS(buf, first, n); /* the same bits again */
    if (!random)
        CHECK_BITS(buf, sum, n);

    memcpy(buf, mine, n * sizeof(float));
    CHECK_OK(dpt_comm_allreduce(c, buf, n, DPT_REDUCE_AVG));
    for (size_t i = 0; i < n; i++)
        first[i] = first[i] / (float)g_P;
    CHECK_BITS(buf, first, n);
    if (!random)
        CHECK_BITS(buf, avg, n);

    dpt_comm_request_t req;
    memcpy(buf, mine, n * sizeof(float));
    CHECK_OK(dpt_comm_iallreduce(c, buf, n, DPT_REDUCE_AVG, &req));
    CHECK_OK(dpt_comm_wait(&req));
    CHECK_BITS(buf, first, n);
    if (dpt_test_failures > 0 && g_rank == 0)
        fprintf(stderr, "  (last case: %s, ranks_per_node %d, count %zu%s)\n",
                dpt_comm_algorithm_name(algo), rpn, n, random ? ", random" : "");
    for (int q = 0; q < g_P; q++)
        free(x[q]);
    free(x);
    free(sum);
    free(avg);
    free(buf);
    free(first);
}

static void test_every_algorithm_and_layout(void)
{
    int rpns[] = {0, 1, 2};
    for (size_t a = 0; a < NALGOS; a++)
        for (size_t l = 0; l < sizeof rpns / sizeof rpns[0]; l++) {
            int rpn = rpns[l];
            if (rpn > 0 && ALGOS[a] != DPT_ALLREDUCE_HIER && ALGOS[a] != DPT_ALLREDUCE_AUTO)
                continue; /* only hier (and auto) look at the layout */
            dpt_comm_t *c = make(ALGOS[a], rpn, a == 0, 60.0);
            if (c == NULL)
                continue;
            size_t P = (size_t)g_P;
            size_t counts[] = {0, 1, P - 1, P, 1000, 10007, (size_t)1 << 20};
            for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++)
                one_case(c, ALGOS[a], rpn, counts[j], 0);
            size_t rcounts[] = {1, P + 1, 10007, (size_t)1 << 18};
            for (size_t j = 0; j < sizeof rcounts / sizeof rcounts[0]; j++)
                one_case(c, ALGOS[a], rpn, rcounts[j], 1);
            dpt_comm_destroy(c);
        }
}

/* Ranks configured with different algorithms: with the debug check every
 * rank gets DPT_ECOMM naming both, instead of a deadlock. */
static void test_mismatched_algorithms(void)
{
    dpt_comm_t *c = make(g_rank == 0 ? DPT_ALLREDUCE_RING : DPT_ALLREDUCE_TREE, 0, 1, 60.0);
    REQUIRE(c != NULL);
    float buf[10] = {0};
    dpt_error_clear();
    int rc = dpt_comm_allreduce(c, buf, 10, DPT_REDUCE_SUM);
    CHECK(rc == DPT_ECOMM);
    CHECK(strstr(dpt_last_error(), "rank 0 called allreduce(count=10, op=sum, algorithm=ring)"));
    CHECK(strstr(dpt_last_error(), "rank 1 called allreduce(count=10, op=sum, algorithm=tree)"));
    dpt_comm_destroy(c);
}

/* The last rank never calls a ring (or tree, or hier) allreduce: the others
 * fail with DPT_ETIMEDOUT naming it, within the timeout and grace. */
static void test_missing_rank_named(void)
{
    dpt_comm_algorithm_t algos[] = {DPT_ALLREDUCE_RING, DPT_ALLREDUCE_TREE, DPT_ALLREDUCE_HIER};
    for (int k = 0; k < 3; k++) {
        dpt_comm_t *c = make(algos[k], 1, 0, 0.5);
        REQUIRE(c != NULL);
        /* MPI may write into a timed-out call's buffer later: static. */
        static float buf[3][1000];
        char want[64];
        snprintf(want, sizeof want, "rank %d (did not respond)", g_P - 1);
        if (g_rank != g_P - 1) {
            double t0 = dpt_now();
            CHECK_ERR(dpt_comm_allreduce(c, buf[k], 1000, DPT_REDUCE_SUM), DPT_ETIMEDOUT, want);
            CHECK(dpt_now() - t0 < 0.5 + 0.25 + 1.0);
            CHECK_ERR(dpt_comm_barrier(c), DPT_ETIMEDOUT, "failed earlier");
        }
        dpt_comm_destroy(c);
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void test_bad_options(void)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    dpt_comm_t *c = NULL;
    opt.ranks_per_node = -1;
    CHECK_ERR(dpt_comm_mpi_create(&c, &opt), DPT_EINVAL, "ranks_per_node -1");
    opt.ranks_per_node = 0;
    opt.algorithm = (dpt_comm_algorithm_t)42;
    CHECK_ERR(dpt_comm_mpi_create(&c, &opt), DPT_EINVAL, "algorithm 42");
    CHECK(c == NULL);
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc;
    (void)argv;
    DPT_TEST_SKIP("this build has no MPI");
#else
    int rc = dpt_comm_mpi_init(&argc, &argv, DPT_COMM_MPI_FUNNELED);
    if (rc < 0) {
        fprintf(stderr, "dpt_comm_mpi_init: %s\n", dpt_last_error());
        return 1;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &g_P);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    if (g_P < 2 || g_P > 64) {
        fprintf(stderr, "mpi_allreduce: run under mpirun with 2 to 64 ranks\n");
        return 1;
    }
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_bad_options),
        DPT_TEST(test_every_algorithm_and_layout),
        DPT_TEST(test_mismatched_algorithms),
        DPT_TEST(test_missing_rank_named),
    };
    rc = DPT_TEST_RUN(cases);
    dpt_comm_mpi_finalize();
    return rc;
#endif
}
