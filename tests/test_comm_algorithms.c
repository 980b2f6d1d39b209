/*
 * Tests of the allreduce algorithms of the threads backend (native, ring,
 * tree, hier, auto) and of the auto table.
 *
 * Integer-valued inputs (exact sums): every algorithm gives the naive
 * oracle's bits, for P in {1, 2, 3, 4, 7, 8} and counts {0, 1, P-1, P, 1000,
 * 10007}, SUM and AVG, blocking and iallreduce. Random floats: each
 * algorithm gives bitwise the sum in the order it documents (dpt/comm.h),
 * the same bits on every participant and in a second run, and stays within
 * 2 (P - 1) 2^-24 sum |x_r| of the oracle. auto runs what the table says.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "dpt/comm.h"
#include "dpt_test.h"
#include "dpt_test_allreduce.h"
#include "dpt_test_threads.h"

static const int PS[] = {1, 2, 3, 4, 7, 8};
static const dpt_comm_algorithm_t ALGOS[] = {DPT_ALLREDUCE_NATIVE, DPT_ALLREDUCE_RING,
                                             DPT_ALLREDUCE_TREE, DPT_ALLREDUCE_HIER,
                                             DPT_ALLREDUCE_AUTO};
#define NALGOS (sizeof ALGOS / sizeof ALGOS[0])

typedef struct ar_ctx {
    worker_fn fn;
    int P;
    size_t count;
    float **x;    /* x[r]: rank r's input */
    float *sum;   /* expected SUM */
    float *avg;   /* expected AVG */
    int random;   /* non-integer data: compare with the documented order */
    double *tol;  /* random: per element, the bound around the oracle */
    float *naive; /* random: the oracle's sum */
} ar_ctx_t;

static void ar_worker(worker_t *w)
{
    const ar_ctx_t *c = w->ctx;
    size_t n = c->count;
    float *buf = malloc((n ? n : 1) * sizeof(float));
    if (buf == NULL)
        abort();
    for (int pass = 0; pass < 2; pass++) { /* twice: the same bits again */
        memcpy(buf, c->x[w->rank], n * sizeof(float));
        WCHECK_OK(w, dpt_comm_allreduce(w->comm, buf, n, DPT_REDUCE_SUM));
        WCHECK_EQ(w, buf, c->sum, n);
        if (c->random) {
            for (size_t i = 0; i < n; i++)
                if (fabs((double)buf[i] - (double)c->naive[i]) > c->tol[i]) {
                    werr(w, "farther from the oracle than the bound", "allreduce", 0);
                    break;
                }
        }
        memcpy(buf, c->x[w->rank], n * sizeof(float));
        WCHECK_OK(w, dpt_comm_allreduce(w->comm, buf, n, DPT_REDUCE_AVG));
        WCHECK_EQ(w, buf, c->avg, n);
        dpt_comm_request_t req;
        memcpy(buf, c->x[w->rank], n * sizeof(float));
        WCHECK_OK(w, dpt_comm_iallreduce(w->comm, buf, n, DPT_REDUCE_SUM, &req));
        WCHECK_OK(w, dpt_comm_wait(&req));
        WCHECK_EQ(w, buf, c->sum, n);
        WCHECK_OK(w, dpt_comm_check_equal(w->comm, buf, n));
    }
    free(buf);
}

/* The algorithm that runs for (P, n) under `algo` on the threads backend. */
static dpt_comm_algorithm_t runs(dpt_comm_algorithm_t algo, int P, size_t n, int oversub)
{
    if (algo == DPT_ALLREDUCE_AUTO)
        algo = dpt__comm_auto(DPT__LEVEL_THREADS, P, oversub, n * sizeof(float));
    return algo == DPT_ALLREDUCE_HIER ? DPT_ALLREDUCE_NATIVE : algo;
}

static void run_case(dpt_comm_algorithm_t algo, int P, size_t n, int random, size_t small_bytes)
{
    ar_ctx_t c = {.fn = ar_worker, .P = P, .count = n, .random = random};
    size_t m = n ? n : 1;
    c.x = calloc((size_t)P, sizeof *c.x);
    c.sum = malloc(m * sizeof(float));
    c.avg = malloc(m * sizeof(float));
    c.naive = malloc(m * sizeof(float));
    c.tol = malloc(m * sizeof(double));
    float *v = malloc((size_t)P * sizeof(float));
    if (!c.x || !c.sum || !c.avg || !c.naive || !c.tol || !v)
        abort();
    for (int r = 0; r < P; r++) {
        c.x[r] = malloc(m * sizeof(float));
        if (c.x[r] == NULL)
            abort();
        if (random)
            random_fill(c.x[r], n, r, (int)n);
        else
            for (size_t i = 0; i < n; i++)
                c.x[r][i] = input_value(r, i);
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    dpt_comm_algorithm_t a = runs(algo, P, n, ncpu > 0 && P > ncpu);
    const float *const *x = (const float *const *)c.x;
    for (size_t i = 0; i < n; i++) {
        c.naive[i] = sum_rank_order(x, P, i);
        c.tol[i] = sum_order_bound(x, P, i);
        /* integer data: every order gives the oracle's bits */
        float s = c.naive[i];
        if (random && a == DPT_ALLREDUCE_RING)
            s = sum_ring_order(x, P, n, i);
        else if (random && a == DPT_ALLREDUCE_TREE)
            s = sum_tree_order(x, P, i, v);
        c.sum[i] = s;
        c.avg[i] = s / (float)P;
    }
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 60.0;
    opt.algorithm = algo;
    opt.small_bytes = small_bytes;
    worker_t *w = run_group(P, &opt, &c, NULL);
    if (w != NULL) {
        char what[128];
        snprintf(what, sizeof what, "%s P=%d count=%zu%s", dpt_comm_algorithm_name(algo), P, n,
                 random ? " random" : "");
        CHECK(report(w, P, what) == 0);
        free(w);
    }
    for (int r = 0; r < P; r++)
        free(c.x[r]);
    free(c.x);
    free(c.sum);
    free(c.avg);
    free(c.naive);
    free(c.tol);
    free(v);
}

static void test_integers_equal_oracle(void)
{
    for (size_t a = 0; a < NALGOS; a++)
        for (size_t k = 0; k < sizeof PS / sizeof PS[0]; k++) {
            int P = PS[k];
            size_t counts[] = {0, 1, (size_t)P - 1, (size_t)P, 1000, 10007};
            for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++)
                run_case(ALGOS[a], P, counts[j], 0, DPT_COMM_SMALL_AUTO);
        }
}

/* native with the small path forced on (one barrier) and off. */
static void test_native_paths(void)
{
    for (size_t k = 1; k < sizeof PS / sizeof PS[0]; k++) {
        run_case(DPT_ALLREDUCE_NATIVE, PS[k], 1000, 0, 64 * 1024);
        run_case(DPT_ALLREDUCE_NATIVE, PS[k], 1000, 1, 64 * 1024);
        run_case(DPT_ALLREDUCE_NATIVE, PS[k], 1000, 1, 0);
    }
}

/* Non-integer data: the documented order bitwise, twice, on every
 * participant, within the bound of the oracle. */
static void test_random_floats(void)
{
    for (size_t a = 0; a < NALGOS; a++)
        for (size_t k = 0; k < sizeof PS / sizeof PS[0]; k++) {
            run_case(ALGOS[a], PS[k], 10007, 1, DPT_COMM_SMALL_AUTO);
            run_case(ALGOS[a], PS[k], 7, 1, DPT_COMM_SMALL_AUTO);
        }
    run_case(DPT_ALLREDUCE_RING, 3, (size_t)1 << 18, 1, DPT_COMM_SMALL_AUTO);
    run_case(DPT_ALLREDUCE_TREE, 5, (size_t)1 << 18, 1, DPT_COMM_SMALL_AUTO);
}

/* The table as docs/SCALING.md and comm_algo.c state it: a change of the
 * table must change this test (and the docs). */
static void test_auto_table(void)
{
    const size_t K = 1024, M = 1024 * 1024;
    for (int P = 1; P <= 64; P *= 2)
        for (int ov = 0; ov <= 1; ov++) {
            CHECK(dpt__comm_auto(DPT__LEVEL_THREADS, P, ov, 4) == DPT_ALLREDUCE_NATIVE);
            CHECK(dpt__comm_auto(DPT__LEVEL_THREADS, P, ov, 64 * M) == DPT_ALLREDUCE_NATIVE);
        }
    for (int P = 2; P <= 1024; P *= 2) {
        CHECK(dpt__comm_auto(DPT__LEVEL_MPI, P, 1, 4) == DPT_ALLREDUCE_TREE);
        CHECK(dpt__comm_auto(DPT__LEVEL_MPI, P, 1, 64 * K) == DPT_ALLREDUCE_TREE);
        CHECK(dpt__comm_auto(DPT__LEVEL_MPI, P, 1, 64 * K + 4) == DPT_ALLREDUCE_RING);
        CHECK(dpt__comm_auto(DPT__LEVEL_MPI, P, 1, 64 * M) == DPT_ALLREDUCE_RING);
        CHECK(dpt__comm_auto(DPT__LEVEL_MPI, P, 2, 4) == DPT_ALLREDUCE_HIER);
        CHECK(dpt__comm_auto(DPT__LEVEL_MPI, P, 2, 64 * M) == DPT_ALLREDUCE_HIER);
        CHECK(dpt__comm_auto(DPT__LEVEL_GROUPS, P, -1, 64 * K) == DPT_ALLREDUCE_TREE);
        CHECK(dpt__comm_auto(DPT__LEVEL_GROUPS, P, -1, 64 * K + 4) == DPT_ALLREDUCE_RING);
    }
    /* every row's own choice at its upper size, and no row names auto */
    for (size_t i = 0; i < dpt__auto_table_len; i++) {
        const dpt__auto_row_t *row = &dpt__auto_table[i];
        CHECK(row->algorithm != DPT_ALLREDUCE_AUTO);
        int layout = row->layout < 0 ? 1 : row->layout;
        if (i == 0 || dpt__auto_table[i - 1].level != row->level ||
            dpt__auto_table[i - 1].layout != row->layout)
            CHECK(dpt__comm_auto(row->level, row->min_p, layout, row->max_bytes) == row->algorithm);
    }
}

/* dpt_comm_allreduce_algorithm reports the table's choice, and auto's
 * results are bitwise those of that algorithm chosen explicitly. */
typedef struct auto_ctx {
    worker_fn fn;
    size_t count;
    dpt_comm_algorithm_t expect;
} auto_ctx_t;

static void auto_worker(worker_t *w)
{
    const auto_ctx_t *c = w->ctx;
    if (dpt_comm_allreduce_algorithm(w->comm, c->count) != c->expect)
        werr(w, "dpt_comm_allreduce_algorithm", "not the table's choice", 0);
}

static void test_auto_reports_table(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    size_t counts[] = {0, 1, 1024, 1025, (size_t)1 << 20};
    for (size_t k = 0; k < sizeof PS / sizeof PS[0]; k++)
        for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
            int P = PS[k];
            auto_ctx_t c = {.fn = auto_worker, .count = counts[j]};
            c.expect = dpt__comm_auto(DPT__LEVEL_THREADS, P, ncpu > 0 && P > ncpu,
                                      counts[j] * sizeof(float));
            worker_t *w = run_group(P, NULL, &c, NULL);
            if (w) {
                CHECK(report(w, P, "auto") == 0);
                free(w);
            }
        }
    /* explicit choices are reported as given (hier runs native) */
    for (size_t a = 0; a + 1 < NALGOS; a++) {
        auto_ctx_t c = {.fn = auto_worker, .count = 100, .expect = runs(ALGOS[a], 3, 100, 0)};
        dpt_comm_threads_options_t opt;
        dpt_comm_threads_options_init(&opt);
        opt.algorithm = ALGOS[a];
        worker_t *w = run_group(3, &opt, &c, NULL);
        if (w) {
            CHECK(report(w, 3, "explicit") == 0);
            free(w);
        }
    }
    CHECK(dpt_comm_allreduce_algorithm(NULL, 1) == DPT_COMM_ALGORITHM_COUNT);
}

static void test_names_and_options(void)
{
    dpt_comm_algorithm_t a;
    for (int i = 0; i < DPT_COMM_ALGORITHM_COUNT; i++) {
        CHECK_OK(dpt_comm_algorithm_parse(dpt_comm_algorithm_name((dpt_comm_algorithm_t)i), &a));
        CHECK((int)a == i);
    }
    CHECK(strcmp(dpt_comm_algorithm_name(DPT_ALLREDUCE_RING), "ring") == 0);
    CHECK(strcmp(dpt_comm_algorithm_name(DPT_COMM_ALGORITHM_COUNT), "?") == 0);
    CHECK_ERR(dpt_comm_algorithm_parse("butterfly", &a), DPT_EINVAL, "auto, native, ring");
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    CHECK(opt.algorithm == DPT_ALLREDUCE_AUTO);
    opt.algorithm = DPT_COMM_ALGORITHM_COUNT;
    dpt_comm_threads_group_t *g = NULL;
    CHECK_ERR(dpt_comm_threads_group_create(&g, 2, &opt), DPT_EINVAL, "algorithm");
    CHECK(g == NULL);
    dpt_comm_mpi_options_t mo;
    dpt_comm_mpi_options_init(&mo);
    CHECK(mo.algorithm == DPT_ALLREDUCE_AUTO && mo.ranks_per_node == 0);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_names_and_options),  DPT_TEST(test_auto_table),
        DPT_TEST(test_auto_reports_table), DPT_TEST(test_integers_equal_oracle),
        DPT_TEST(test_native_paths),       DPT_TEST(test_random_floats),
    };
    return DPT_TEST_RUN(cases);
}
