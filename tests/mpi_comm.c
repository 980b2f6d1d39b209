/*
 * Tests of the MPI collectives backend, run by CTest under
 * `mpirun -np 2` and `-np 3` (and skipped when the build has no MPI).
 *
 * Every rank knows every rank's input (a formula of rank and index, with
 * integer values so sums are exact), so each rank computes the naive
 * gather-sum-broadcast oracle by itself and compares bitwise.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt_config.h"
#include "dpt_test.h"

#if DPT_HAVE_MPI
#include <mpi.h>

static dpt_comm_t *g_comm;  /* native allreduce, without the debug check */
static dpt_comm_t *g_check; /* with it */

static float input_value(int r, size_t i)
{
    return (float)((int)(((size_t)r * 7919u + i * 104729u + 13u) % 101u) - 50);
}

#define CHECK_BITS(got, want, n) CHECK((n) == 0 || memcmp((got), (want), (n) * sizeof(float)) == 0)

static void all_ops(dpt_comm_t *c, size_t n)
{
    int P = dpt_comm_size(c), r = dpt_comm_rank(c);
    size_t m = n ? n : 1;
    float *x = malloc(m * sizeof(float) * (size_t)P); /* every rank's input */
    float *sum = malloc(m * sizeof(float)), *avg = malloc(m * sizeof(float));
    float *buf = malloc(m * sizeof(float)), *recv = malloc(m * sizeof(float) * (size_t)P);
    if (!x || !sum || !avg || !buf || !recv)
        abort();
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
    CHECK_OK(dpt_comm_allreduce(c, buf, n, DPT_REDUCE_SUM));
    CHECK_BITS(buf, sum, n);
    memcpy(buf, mine, n * sizeof(float));
    CHECK_OK(dpt_comm_allreduce(c, buf, n, DPT_REDUCE_AVG));
    CHECK_BITS(buf, avg, n);

    dpt_comm_request_t req;
    memcpy(buf, mine, n * sizeof(float));
    CHECK_OK(dpt_comm_iallreduce(c, buf, n, DPT_REDUCE_AVG, &req));
    CHECK_OK(dpt_comm_wait(&req));
    CHECK_BITS(buf, avg, n);

    for (int root = 0; root < P; root++) {
        memcpy(buf, mine, n * sizeof(float));
        CHECK_OK(dpt_comm_broadcast(c, buf, n, root));
        CHECK_BITS(buf, x + (size_t)root * n, n);
    }

    memset(recv, 0xff, m * sizeof(float) * (size_t)P);
    CHECK_OK(dpt_comm_allgather(c, mine, n, recv));
    CHECK_BITS(recv, x, n * (size_t)P);
    memset(recv, 0xff, m * sizeof(float) * (size_t)P);
    memcpy(recv + (size_t)r * n, mine, n * sizeof(float));
    CHECK_OK(dpt_comm_allgather(c, recv + (size_t)r * n, n, recv)); /* in place */
    CHECK_BITS(recv, x, n * (size_t)P);

    size_t off = dpt_comm_block_offset(n, P, r), len = dpt_comm_block_size(n, P, r);
    CHECK_OK(dpt_comm_reduce_scatter(c, mine, n, recv, DPT_REDUCE_SUM));
    CHECK_BITS(recv, sum + off, len);
    CHECK_OK(dpt_comm_reduce_scatter(c, mine, n, recv, DPT_REDUCE_AVG));
    CHECK_BITS(recv, avg + off, len);

    CHECK_OK(dpt_comm_barrier(c));
    CHECK_OK(dpt_comm_check_equal(c, sum, n));
    free(x);
    free(sum);
    free(avg);
    free(buf);
    free(recv);
}

static void run_counts(dpt_comm_t *c)
{
    size_t P = (size_t)dpt_comm_size(c);
    size_t counts[] = {0, 1, P - 1, P, 1000, 10007, (size_t)1 << 20};
    for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++)
        all_ops(c, counts[j]);
}

static void test_all_ops(void)
{
    CHECK(dpt_comm_backend(g_comm) == DPT_COMM_MPI);
    run_counts(g_comm);
}

static void test_all_ops_with_check(void)
{
    run_counts(g_check);
}

/* Non-integer data: two runs give the same bits, and all ranks agree. */
static void test_determinism(void)
{
    size_t n = 100003;
    int r = dpt_comm_rank(g_comm);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    if (!a || !b)
        abort();
    for (int k = 0; k < 2; k++) {
        float *v = k ? b : a;
        uint64_t s = 0x9e3779b97f4a7c15ull + (uint64_t)r;
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            v[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 1000.0f;
        }
        CHECK_OK(dpt_comm_allreduce(g_comm, v, n, DPT_REDUCE_SUM));
    }
    CHECK(memcmp(a, b, n * sizeof(float)) == 0);
    CHECK_OK(dpt_comm_check_equal(g_comm, a, n));
    /* a rank with different data is named */
    if (r == 1)
        a[7] += 1.0f;
    CHECK_ERR(dpt_comm_check_equal(g_comm, a, n), DPT_ECOMM, "rank 1");
    free(a);
    free(b);
}

static void test_bad_arguments(void)
{
    float buf[4] = {0};
    int P = dpt_comm_size(g_comm);
    CHECK_ERR(dpt_comm_allreduce(g_comm, NULL, 4, DPT_REDUCE_SUM), DPT_EINVAL, "buf is NULL");
    CHECK_ERR(dpt_comm_broadcast(g_comm, buf, 4, P), DPT_EINVAL, "root");
    CHECK_ERR(dpt_comm_broadcast(g_comm, buf, 4, -1), DPT_EINVAL, "root -1");
    CHECK_ERR(dpt_comm_abort(g_comm, "x"), DPT_ENOTSUP, "dpt_comm_mpi_abort");
    CHECK_ERR(dpt_comm_reduce_scatter(g_comm, NULL, 4, buf, DPT_REDUCE_SUM), DPT_EINVAL,
              "send is NULL");
    dpt_comm_request_t req;
    CHECK_OK(dpt_comm_iallreduce(g_comm, buf, 4, DPT_REDUCE_SUM, &req));
    CHECK_ERR(dpt_comm_barrier(g_comm), DPT_ESTATE, "not yet waited for");
    CHECK_OK(dpt_comm_wait(&req));
    /* still usable after argument errors */
    CHECK_OK(dpt_comm_barrier(g_comm));
}

/* Ranks deliberately call different collectives: with the debug check every
 * rank gets DPT_ECOMM naming both sides instead of a deadlock. */
static void test_mismatch_detected(void)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.check = 1;
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_mpi_create(&c, &opt));
    float buf[12] = {0};
    int rc;
    dpt_error_clear();
    if (dpt_comm_rank(c) == 0)
        rc = dpt_comm_allreduce(c, buf, 10, DPT_REDUCE_SUM);
    else
        rc = dpt_comm_broadcast(c, buf, 12, 0);
    CHECK(rc == DPT_ECOMM);
    CHECK(strstr(dpt_last_error(), "rank 0 called allreduce(count=10, op=sum, algorithm=") != NULL);
    CHECK(strstr(dpt_last_error(), "rank 1 called broadcast(count=12, root=0)") != NULL);
    if (rc != DPT_ECOMM)
        fprintf(stderr, "got %s: %s\n", dpt_status_name(rc), dpt_last_error());
    /* the communicator is failed now */
    CHECK_ERR(dpt_comm_barrier(c), DPT_ECOMM, "failed earlier");
    dpt_comm_destroy(c);

    /* a count mismatch of the same call is caught too */
    REQUIRE_OK(dpt_comm_mpi_create(&c, &opt));
    rc = dpt_comm_allreduce(c, buf, dpt_comm_rank(c) == 0 ? 3 : 4, DPT_REDUCE_AVG);
    CHECK(rc == DPT_ECOMM && strstr(dpt_last_error(), "count=3") &&
          strstr(dpt_last_error(), "count=4"));
    dpt_comm_destroy(c);
}

/* Non-integer data (rounding depends on the order of the additions). */
static void random_fill(float *v, size_t n, int r, int salt)
{
    uint64_t s = 0x9e3779b97f4a7c15ull + (uint64_t)r * 7u + (uint64_t)salt;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 1000.0f;
    }
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof(float)) == 0;
}

/* dpt's MPI collectives are MPI's non-blocking ones: with non-integer data
 * their results are bitwise those of calling MPI_Iallreduce & co directly.
 * With 2 ranks each element is a single addition, so they also equal the
 * blocking MPI_Allreduce / MPI_Reduce_scatter (what dpt used before); with
 * 3 or more ranks Open MPI's blocking and non-blocking algorithms may add in
 * different orders: reported, not a failure. */
static void test_same_bits_as_mpi(void)
{
    int P = dpt_comm_size(g_comm), r = dpt_comm_rank(g_comm);
    size_t counts[] = {1, (size_t)P - 1, (size_t)P, 1000, 10007, (size_t)1 << 20};
    MPI_Comm mc;
    REQUIRE(MPI_Comm_dup(MPI_COMM_WORLD, &mc) == MPI_SUCCESS);
    int *rc_counts = malloc(sizeof(int) * (size_t)P);
    REQUIRE(rc_counts != NULL);
    int blocking_differs = 0;
    for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
        size_t n = counts[j];
        if (n == 0)
            continue;
        float *x = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float));
        float *b = malloc(n * sizeof(float)), *c = malloc(n * sizeof(float));
        REQUIRE(x && a && b && c);
        random_fill(x, n, r, (int)j);
        MPI_Request q;

        /* allreduce SUM and AVG, iallreduce */
        memcpy(a, x, n * sizeof(float));
        CHECK_OK(dpt_comm_allreduce(g_comm, a, n, DPT_REDUCE_SUM));
        memcpy(b, x, n * sizeof(float));
        CHECK(MPI_Iallreduce(MPI_IN_PLACE, b, (int)n, MPI_FLOAT, MPI_SUM, mc, &q) == MPI_SUCCESS);
        CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE) == MPI_SUCCESS);
        CHECK(same_bits(a, b, n));
        memcpy(c, x, n * sizeof(float));
        CHECK(MPI_Allreduce(MPI_IN_PLACE, c, (int)n, MPI_FLOAT, MPI_SUM, mc) == MPI_SUCCESS);
        if (P == 2)
            CHECK(same_bits(a, c, n));
        else if (!same_bits(a, c, n))
            blocking_differs |= 1;
        dpt_comm_request_t req;
        memcpy(a, x, n * sizeof(float));
        CHECK_OK(dpt_comm_iallreduce(g_comm, a, n, DPT_REDUCE_SUM, &req));
        CHECK_OK(dpt_comm_wait(&req));
        CHECK(same_bits(a, b, n));
        memcpy(a, x, n * sizeof(float));
        CHECK_OK(dpt_comm_allreduce(g_comm, a, n, DPT_REDUCE_AVG));
        for (size_t i = 0; i < n; i++)
            b[i] = b[i] / (float)P;
        CHECK(same_bits(a, b, n));

        /* reduce-scatter */
        size_t len = dpt_comm_block_size(n, P, r);
        CHECK_OK(dpt_comm_reduce_scatter(g_comm, x, n, a, DPT_REDUCE_SUM));
        if (n % (size_t)P == 0) {
            CHECK(MPI_Ireduce_scatter_block(x, b, (int)(n / (size_t)P), MPI_FLOAT, MPI_SUM, mc,
                                            &q) == MPI_SUCCESS);
            CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE) == MPI_SUCCESS);
            CHECK(MPI_Reduce_scatter_block(x, c, (int)(n / (size_t)P), MPI_FLOAT, MPI_SUM, mc) ==
                  MPI_SUCCESS);
        } else {
            for (int k = 0; k < P; k++)
                rc_counts[k] = (int)dpt_comm_block_size(n, P, k);
            CHECK(MPI_Ireduce_scatter(x, b, rc_counts, MPI_FLOAT, MPI_SUM, mc, &q) == MPI_SUCCESS);
            CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE) == MPI_SUCCESS);
            CHECK(MPI_Reduce_scatter(x, c, rc_counts, MPI_FLOAT, MPI_SUM, mc) == MPI_SUCCESS);
        }
        CHECK(same_bits(a, b, len));
        if (P == 2)
            CHECK(same_bits(a, c, len));
        else if (!same_bits(a, c, len))
            blocking_differs |= 2;
        free(x);
        free(a);
        free(b);
        free(c);
    }
    int all = 0;
    MPI_Allreduce(&blocking_differs, &all, 1, MPI_INT, MPI_BOR, mc);
    if (r == 0 && all)
        printf("  note: with %d ranks Open MPI's blocking %s%s%s gave other bits than the "
               "non-blocking calls dpt uses for some counts (different algorithms)\n",
               P, all & 1 ? "MPI_Allreduce" : "", all == 3 ? " and " : "",
               all & 2 ? "MPI_Reduce_scatter" : "");
    free(rc_counts);
    MPI_Comm_free(&mc);
}

/* Non-integer data, every count: all ranks hold the same bits. */
static void test_equal_across_ranks(void)
{
    int P = dpt_comm_size(g_comm), r = dpt_comm_rank(g_comm);
    size_t counts[] = {1, (size_t)P - 1, (size_t)P, 1000, 10007, 100003, (size_t)1 << 20};
    for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
        size_t n = counts[j];
        float *a = malloc((n ? n : 1) * sizeof(float));
        REQUIRE(a != NULL);
        for (int k = 0; k < 3; k++) {
            random_fill(a, n, r, (int)j);
            if (k == 2) {
                dpt_comm_request_t req;
                CHECK_OK(dpt_comm_iallreduce(g_comm, a, n, DPT_REDUCE_AVG, &req));
                CHECK_OK(dpt_comm_wait(&req));
            } else {
                CHECK_OK(dpt_comm_allreduce(g_comm, a, n, k ? DPT_REDUCE_AVG : DPT_REDUCE_SUM));
            }
            CHECK_OK(dpt_comm_check_equal(g_comm, a, n));
        }
        free(a);
    }
}

static void test_bad_timeout(void)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    CHECK(opt.timeout_s == 300.0);
    dpt_comm_t *c = (dpt_comm_t *)&opt; /* must be reset to NULL */
    double bad[] = {0.0, -1.0, NAN, INFINITY};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        opt.timeout_s = bad[k];
        CHECK_ERR(dpt_comm_mpi_create(&c, &opt), DPT_EINVAL, "timeout_s");
        CHECK(c == NULL);
    }
    /* no communication happened: the world is still in step */
    CHECK_OK(dpt_comm_barrier(g_comm));
}

/* A rank that waits does not burn its core: the last rank enters the
 * barrier 300 ms late; rank 0 spends far less than that on the CPU. */
static void test_wait_does_not_spin(void)
{
    int P = dpt_comm_size(g_comm), r = dpt_comm_rank(g_comm);
    CHECK_OK(dpt_comm_barrier(g_comm));
    if (r == P - 1)
        nanosleep(&(struct timespec){0, 300 * 1000 * 1000L}, NULL);
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    double t0 = dpt_now();
    CHECK_OK(dpt_comm_barrier(g_comm));
    double wall = dpt_now() - t0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
    if (r == 0) {
        CHECK(wall > 0.2);
        CHECK(cpu < 0.1);
        if (!(cpu < 0.1))
            fprintf(stderr, "  rank 0 used %.3f s of CPU in a %.3f s wait\n", cpu, wall);
    }
}

/* The last rank never calls the allreduce: every other rank fails within
 * the timeout and the grace period with DPT_ETIMEDOUT naming it. */
static void test_timeout_names_missing_rank(void)
{
    int P = dpt_comm_size(g_comm), r = dpt_comm_rank(g_comm);
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.timeout_s = 0.5;
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_mpi_create(&c, &opt));
    /* MPI may write into the buffer of a timed-out call later: static. */
    static float buf[8];
    char want[64];
    snprintf(want, sizeof want, "rank %d (did not respond)", P - 1);
    if (r != P - 1) {
        double t0 = dpt_now();
        /* its own report, or (P = 3) the other waiting rank's notice */
        CHECK_ERR(dpt_comm_allreduce(c, buf, 8, DPT_REDUCE_SUM), DPT_ETIMEDOUT, want);
        CHECK(dpt_now() - t0 < 0.5 + 0.25 + 1.0);
        CHECK_ERR(dpt_comm_barrier(c), DPT_ETIMEDOUT, "failed earlier");
    }
    dpt_comm_destroy(c);
    CHECK_OK(dpt_comm_barrier(g_comm));
}

static void test_create_twice_and_custom_comm(void)
{
    /* a second handle on an explicitly given communicator */
    MPI_Comm world = MPI_COMM_WORLD;
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.mpi_comm = &world;
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_mpi_create(&c, &opt));
    CHECK(dpt_comm_size(c) == dpt_comm_size(g_comm));
    CHECK(dpt_comm_rank(c) == dpt_comm_rank(g_comm));
    float v = 1.0f;
    CHECK_OK(dpt_comm_allreduce(c, &v, 1, DPT_REDUCE_SUM));
    CHECK(v == (float)dpt_comm_size(c));
    dpt_comm_destroy(c);
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc;
    (void)argv;
    dpt_comm_t *c = NULL;
    if (dpt_comm_mpi_create(&c, NULL) != DPT_ENOTSUP || !strstr(dpt_last_error(), "no MPI")) {
        printf("dpt_comm_mpi_create without MPI must return DPT_ENOTSUP\n");
        return 1;
    }
    DPT_TEST_SKIP("this build has no MPI");
#else
    int rc = dpt_comm_mpi_init(&argc, &argv, DPT_COMM_MPI_FUNNELED);
    if (rc < 0) {
        fprintf(stderr, "dpt_comm_mpi_init: %s\n", dpt_last_error());
        return 1;
    }
    /* g_comm's allreduce is MPI's own (test_same_bits_as_mpi compares them);
     * g_check's the default, auto (mpi_allreduce.c tests every algorithm). */
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.algorithm = DPT_ALLREDUCE_NATIVE;
    if (dpt_comm_mpi_create(&g_comm, &opt) < 0) {
        fprintf(stderr, "dpt_comm_mpi_create: %s\n", dpt_last_error());
        return 1;
    }
    opt.check = 1;
    opt.algorithm = DPT_ALLREDUCE_AUTO;
    if (dpt_comm_mpi_create(&g_check, &opt) < 0) {
        fprintf(stderr, "dpt_comm_mpi_create: %s\n", dpt_last_error());
        return 1;
    }
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_all_ops),
        DPT_TEST(test_all_ops_with_check),
        DPT_TEST(test_determinism),
        DPT_TEST(test_bad_arguments),
        DPT_TEST(test_mismatch_detected),
        DPT_TEST(test_create_twice_and_custom_comm),
        DPT_TEST(test_same_bits_as_mpi),
        DPT_TEST(test_equal_across_ranks),
        DPT_TEST(test_bad_timeout),
        DPT_TEST(test_wait_does_not_spin),
        DPT_TEST(test_timeout_names_missing_rank),
    };
    if (dpt_comm_size(g_comm) < 2) {
        fprintf(stderr, "mpi_comm: run under mpirun with at least 2 ranks\n");
        return 1;
    }
    rc = DPT_TEST_RUN(cases);
    dpt_comm_destroy(g_comm);
    dpt_comm_destroy(g_check);
    dpt_comm_mpi_finalize();
    return rc;
#endif
}
