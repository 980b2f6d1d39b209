/*
 * Tests of the threads collectives backend against a naive oracle.
 *
 * P participant threads run every operation on integer-valued floats (so the
 * expected sums are exact) and compare their results bitwise with a naive
 * gather-sum-broadcast computed here. The CHECK macros are not thread-safe,
 * so worker threads only count mismatches in their own slot; the main thread
 * checks the counts after joining them.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt_test.h"
#include "dpt_test_threads.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif
#if defined(__SANITIZE_THREAD__)
#define BIG_COUNT ((size_t)1 << 16) /* TSan is ~10x slower; keep the run short */
#else
#define BIG_COUNT ((size_t)1 << 20)
#endif

/* ---- the oracle ------------------------------------------------------------ */

typedef struct all_ctx {
    worker_fn fn;
    int P;
    size_t count;
    float **x;       /* x[r]: rank r's input */
    float *sum;      /* oracle allreduce sum */
    float *avg;      /* oracle allreduce avg */
    float *gathered; /* oracle allgather: x_0 | x_1 | ... */
} all_ctx_t;

/* Naive gather, sum in rank order, "broadcast" (the one result). */
static void oracle(all_ctx_t *c)
{
    size_t n = c->count;
    for (int r = 0; r < c->P; r++)
        if (n)
            memcpy(c->gathered + (size_t)r * n, c->x[r], n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float s = c->gathered[i];
        for (int r = 1; r < c->P; r++)
            s = s + c->gathered[(size_t)r * n + i];
        c->sum[i] = s;
        c->avg[i] = s / (float)c->P;
    }
}

static void all_ops_worker(worker_t *w)
{
    const all_ctx_t *c = w->ctx;
    int r = w->rank, P = c->P;
    size_t n = c->count;
    float *buf = malloc((n ? n : 1) * sizeof(float));
    float *recv = malloc((n ? n * (size_t)P : 1) * sizeof(float));
    if (buf == NULL || recv == NULL)
        abort();

    if (dpt_comm_rank(w->comm) != r || dpt_comm_size(w->comm) != P)
        werr(w, "rank/size", "dpt_comm_rank", 0);

    for (int pass = 0; pass < 2; pass++) { /* twice: the group is reusable */
        memcpy(buf, c->x[r], n * sizeof(float));
        WCHECK_OK(w, dpt_comm_allreduce(w->comm, buf, n, DPT_REDUCE_SUM));
        WCHECK_EQ(w, buf, c->sum, n);

        memcpy(buf, c->x[r], n * sizeof(float));
        WCHECK_OK(w, dpt_comm_allreduce(w->comm, buf, n, DPT_REDUCE_AVG));
        WCHECK_EQ(w, buf, c->avg, n);

        dpt_comm_request_t req;
        memcpy(buf, c->x[r], n * sizeof(float));
        WCHECK_OK(w, dpt_comm_iallreduce(w->comm, buf, n, DPT_REDUCE_SUM, &req));
        WCHECK_OK(w, dpt_comm_wait(&req));
        WCHECK_EQ(w, buf, c->sum, n);
        WCHECK_OK(w, dpt_comm_wait(&req)); /* inactive now: returns 0 */

        for (int root = 0; root < P; root++) {
            memcpy(buf, c->x[r], n * sizeof(float));
            WCHECK_OK(w, dpt_comm_broadcast(w->comm, buf, n, root));
            WCHECK_EQ(w, buf, c->x[root], n);
        }

        memset(recv, 0xff, n * (size_t)P * sizeof(float));
        WCHECK_OK(w, dpt_comm_allgather(w->comm, c->x[r], n, recv));
        WCHECK_EQ(w, recv, c->gathered, n * (size_t)P);

        /* in place: send is the own block of recv */
        memset(recv, 0xff, n * (size_t)P * sizeof(float));
        memcpy(recv + (size_t)r * n, c->x[r], n * sizeof(float));
        WCHECK_OK(w, dpt_comm_allgather(w->comm, recv + (size_t)r * n, n, recv));
        WCHECK_EQ(w, recv, c->gathered, n * (size_t)P);

        size_t off = dpt_comm_block_offset(n, P, r), len = dpt_comm_block_size(n, P, r);
        WCHECK_OK(w, dpt_comm_reduce_scatter(w->comm, c->x[r], n, recv, DPT_REDUCE_SUM));
        WCHECK_EQ(w, recv, c->sum + off, len);
        WCHECK_OK(w, dpt_comm_reduce_scatter(w->comm, c->x[r], n, recv, DPT_REDUCE_AVG));
        WCHECK_EQ(w, recv, c->avg + off, len);

        WCHECK_OK(w, dpt_comm_barrier(w->comm));
        WCHECK_OK(w, dpt_comm_check_equal(w->comm, c->sum, n));
    }
    free(recv);
    free(buf);
}

static void run_all_ops(int P, size_t n, size_t small_bytes, double spin_us)
{
    all_ctx_t c = {.fn = all_ops_worker, .P = P, .count = n};
    c.x = calloc((size_t)P, sizeof *c.x);
    size_t m = n ? n : 1;
    c.sum = malloc(m * sizeof(float));
    c.avg = malloc(m * sizeof(float));
    c.gathered = malloc(m * (size_t)P * sizeof(float));
    if (!c.x || !c.sum || !c.avg || !c.gathered)
        abort();
    for (int r = 0; r < P; r++) {
        c.x[r] = malloc(m * sizeof(float));
        if (!c.x[r])
            abort();
        for (size_t i = 0; i < n; i++)
            c.x[r][i] = input_value(r, i);
    }
    oracle(&c);

    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 60.0;
    opt.small_bytes = small_bytes;
    opt.spin_us = spin_us;
    worker_t *w = run_group(P, &opt, &c, NULL);
    if (w != NULL) {
        char what[96];
        snprintf(what, sizeof what, "P=%d count=%zu small_bytes=%zu%s", P, n,
                 small_bytes == DPT_COMM_SMALL_AUTO ? 0 : small_bytes,
                 small_bytes == DPT_COMM_SMALL_AUTO ? " (auto)" : "");
        CHECK(report(w, P, what) == 0);
        free(w);
    }
    for (int r = 0; r < P; r++)
        free(c.x[r]);
    free(c.x);
    free(c.sum);
    free(c.avg);
    free(c.gathered);
}

static const int PS[] = {1, 2, 3, 4, 7, 8};

static void test_all_ops_default_paths(void)
{
    for (size_t k = 0; k < sizeof PS / sizeof PS[0]; k++) {
        int P = PS[k];
        size_t counts[] = {0, 1, (size_t)P - 1, (size_t)P, 1000, 10007, BIG_COUNT};
        for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++)
            run_all_ops(P, counts[j], DPT_COMM_SMALL_AUTO, -1.0);
    }
}

/* small_bytes = 0 sends every count, even 1 with P = 8, through the large
 * (reduce-scatter) path; spin_us = 0 makes every wait block at once. */
static void test_all_ops_large_path_blocking(void)
{
    for (size_t k = 0; k < sizeof PS / sizeof PS[0]; k++) {
        int P = PS[k];
        size_t counts[] = {0, 1, (size_t)P - 1, (size_t)P, 1000, 10007};
        for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++)
            run_all_ops(P, counts[j], 0, 0.0);
    }
}

/* Everything on the small path, even 10007 floats. */
static void test_all_ops_small_path(void)
{
    int ps[] = {2, 3, 8};
    for (size_t k = 0; k < 3; k++) {
        size_t counts[] = {1, 1000, 10007};
        for (size_t j = 0; j < 3; j++)
            run_all_ops(ps[k], counts[j], 64 * 1024, 5.0);
    }
}

/* ---- determinism with non-integer data ------------------------------------- */

typedef struct det_ctx {
    worker_fn fn;
    int P;
    size_t count;
    float **x;
    float *expect; /* rank-order sum: ((x0 + x1) + x2) + ... */
} det_ctx_t;

static void det_worker(worker_t *w)
{
    const det_ctx_t *c = w->ctx;
    float *buf = malloc(c->count * sizeof(float));
    if (!buf)
        abort();
    memcpy(buf, c->x[w->rank], c->count * sizeof(float));
    WCHECK_OK(w, dpt_comm_allreduce(w->comm, buf, c->count, DPT_REDUCE_SUM));
    WCHECK_EQ(w, buf, c->expect, c->count);
    w->digest = dpt_comm_fingerprint(buf, c->count);
    free(buf);
}

static uint64_t det_run(int P, size_t n, size_t small_bytes)
{
    det_ctx_t c = {.fn = det_worker, .P = P, .count = n};
    c.x = calloc((size_t)P, sizeof *c.x);
    c.expect = malloc(n * sizeof(float));
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < P; r++) {
        c.x[r] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            c.x[r][i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 1000.0f;
        }
    }
    for (size_t i = 0; i < n; i++) {
        float a = c.x[0][i];
        for (int r = 1; r < P; r++)
            a = a + c.x[r][i];
        c.expect[i] = a;
    }
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.small_bytes = small_bytes;
    opt.timeout_s = 60.0;
    worker_t *w = run_group(P, &opt, &c, NULL);
    uint64_t d = 0;
    if (w) {
        CHECK(report(w, P, "determinism") == 0);
        d = w[0].digest;
        for (int r = 1; r < P; r++)
            CHECK(w[r].digest == d);
        free(w);
    }
    for (int r = 0; r < P; r++)
        free(c.x[r]);
    free(c.x);
    free(c.expect);
    return d;
}

static void test_determinism_random_floats(void)
{
    int ps[] = {3, 4, 7};
    for (int k = 0; k < 3; k++) {
        uint64_t a = det_run(ps[k], 10007, 0);
        uint64_t b = det_run(ps[k], 10007, 0);
        uint64_t c = det_run(ps[k], 10007, 64 * 1024); /* small path: same bits */
        CHECK(a == b);
        CHECK(a == c);
    }
}

/* ---- failures ---------------------------------------------------------------- */

typedef struct timeout_ctx {
    worker_fn fn;
    int op; /* 0 allreduce, 1 barrier, 2 broadcast */
} timeout_ctx_t;

static void timeout_worker(worker_t *w)
{
    const timeout_ctx_t *c = w->ctx;
    float buf[64];
    for (int i = 0; i < 64; i++)
        buf[i] = (float)i;
    double t0 = dpt_now();
    int rc;
    if (c->op == 0)
        rc = dpt_comm_allreduce(w->comm, buf, 64, DPT_REDUCE_SUM);
    else if (c->op == 1)
        rc = dpt_comm_barrier(w->comm);
    else
        rc = dpt_comm_broadcast(w->comm, buf, 64, 0);
    w->elapsed = dpt_now() - t0;
    if (rc != DPT_ETIMEDOUT)
        werr(w, "expected DPT_ETIMEDOUT", "first call", rc);
    else if (strstr(dpt_last_error(), "rank 2") == NULL)
        werr(w, "message does not name rank 2", dpt_last_error(), rc);
    /* the group is failed now: further calls fail at once */
    rc = dpt_comm_barrier(w->comm);
    if (rc != DPT_ETIMEDOUT)
        werr(w, "expected DPT_ETIMEDOUT after failure", "barrier", rc);
}

static void test_timeout_missing_participant(void)
{
    for (int op = 0; op < 3; op++) {
        timeout_ctx_t c = {.fn = timeout_worker, .op = op};
        dpt_comm_threads_options_t opt;
        dpt_comm_threads_options_init(&opt);
        opt.timeout_s = 0.2;
        int absent[4] = {0, 0, 1, 0}; /* rank 2 never arrives */
        double t0 = dpt_now();
        worker_t *w = run_group(4, &opt, &c, absent);
        double t = dpt_now() - t0;
        if (w) {
            CHECK(report(w, 4, "timeout") == 0);
            for (int r = 0; r < 4; r++)
                if (!absent[r])
                    CHECK(w[r].elapsed < 5.0);
            free(w);
        }
        CHECK(t < 10.0);
    }
}

/* A participant that fails aborts the group: the others, waiting with a
 * 60 s timeout, fail at once with DPT_ECOMM and its reason. */
typedef struct abort_ctx {
    worker_fn fn;
} abort_ctx_t;

static void abort_worker(worker_t *w)
{
    float buf[8] = {0};
    double t0 = dpt_now();
    int rc;
    if (w->rank == 2) {
        /* Let the others start waiting first. */
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        rc = dpt_comm_abort(w->comm, "env step failed");
        if (rc != DPT_ECOMM)
            werr(w, "expected DPT_ECOMM from dpt_comm_abort", "abort", rc);
    } else {
        rc = dpt_comm_allreduce(w->comm, buf, 8, DPT_REDUCE_SUM);
        if (rc != DPT_ECOMM)
            werr(w, "expected DPT_ECOMM", "allreduce", rc);
        else if (!strstr(dpt_last_error(), "rank 2: env step failed"))
            werr(w, "message lacks the reason", dpt_last_error(), rc);
    }
    w->elapsed = dpt_now() - t0;
    /* Failed for good: later calls fail at once too. */
    rc = dpt_comm_barrier(w->comm);
    if (rc != DPT_ECOMM)
        werr(w, "expected DPT_ECOMM after the abort", "barrier", rc);
}

static void test_abort(void)
{
    abort_ctx_t c = {.fn = abort_worker};
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 60.0;
    worker_t *w = run_group(4, &opt, &c, NULL);
    if (w) {
        CHECK(report(w, 4, "abort") == 0);
        for (int r = 0; r < 4; r++)
            CHECK(w[r].elapsed < 10.0);
        free(w);
    }
    CHECK_ERR(dpt_comm_abort(NULL, "x"), DPT_EINVAL, "NULL");
    dpt_comm_threads_group_t *g;
    dpt_comm_t *one;
    REQUIRE_OK(dpt_comm_threads_group_create(&g, 1, &opt));
    REQUIRE_OK(dpt_comm_threads_join(g, 0, &one));
    CHECK_ERR(dpt_comm_abort(one, NULL), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_comm_abort(one, "gone"), DPT_ECOMM, "rank 0: gone");
    dpt_comm_destroy(one);
    dpt_comm_threads_group_destroy(g);
}

typedef struct mismatch_ctx {
    worker_fn fn;
} mismatch_ctx_t;

static void mismatch_worker(worker_t *w)
{
    float buf[12] = {0};
    int rc = w->rank == 0 ? dpt_comm_allreduce(w->comm, buf, 10, DPT_REDUCE_SUM)
                          : dpt_comm_broadcast(w->comm, buf, 12, 0);
    if (rc != DPT_ECOMM)
        werr(w, "expected DPT_ECOMM", "mismatched call", rc);
    else if (!strstr(dpt_last_error(), "rank 0 called allreduce(count=10") ||
             !strstr(dpt_last_error(), "rank 1 called broadcast(count=12, root=0)"))
        werr(w, "message does not name both sides", dpt_last_error(), rc);
}

static void test_mismatched_calls(void)
{
    mismatch_ctx_t c = {.fn = mismatch_worker};
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 10.0;
    worker_t *w = run_group(2, &opt, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "mismatch") == 0);
        free(w);
    }
}

/* A waiter must block, not spin: rank 1 arrives 300 ms late, and rank 0's
 * thread may use only a little CPU meanwhile. */
typedef struct sleep_ctx {
    worker_fn fn;
} sleep_ctx_t;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleepy_worker(worker_t *w)
{
    float buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (float)(i + w->rank);
    if (w->rank == 1) {
        struct timespec d = {0, 300 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    double c0 = thread_cpu_s(), t0 = dpt_now();
    WCHECK_OK(w, dpt_comm_allreduce(w->comm, buf, 1000, DPT_REDUCE_SUM));
    w->elapsed = thread_cpu_s() - c0;
    if (w->rank == 0 && dpt_now() - t0 < 0.25)
        werr(w, "rank 0 did not wait for rank 1", "allreduce", 0);
    for (int i = 0; i < 1000; i++)
        if (buf[i] != (float)(2 * i + 1))
            werr(w, "wrong sum", "allreduce", 0);
}

static void test_waiting_blocks(void)
{
    sleep_ctx_t c = {.fn = sleepy_worker};
    worker_t *w = run_group(2, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "waiting") == 0);
        CHECK(w[0].elapsed < 0.05); /* CPU seconds while waiting ~0.3 s */
        if (w[0].elapsed >= 0.05)
            fprintf(stderr, "  rank 0 used %.3f s of CPU while waiting\n", w[0].elapsed);
        free(w);
    }
}

typedef struct late_ctx {
    worker_fn fn;
} late_ctx_t;

/* check_equal with one rank holding different data */
static void check_equal_worker(worker_t *w)
{
    float buf[100];
    for (int i = 0; i < 100; i++)
        buf[i] = (float)i;
    if (w->rank == 2)
        buf[50] = -1.0f;
    int rc = dpt_comm_check_equal(w->comm, buf, 100);
    if (rc != DPT_ECOMM || !strstr(dpt_last_error(), "rank 2"))
        werr(w, "expected DPT_ECOMM naming rank 2", "check_equal", rc);
    buf[50] = 50.0f;
    WCHECK_OK(w, dpt_comm_check_equal(w->comm, buf, 100));
}

static void test_check_equal(void)
{
    late_ctx_t c = {.fn = check_equal_worker};
    worker_t *w = run_group(3, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 3, "check_equal") == 0);
        free(w);
    }
}

/* allgather_u64: every bit of every value arrives, NaN patterns included. */
static uint64_t u64_value(int r, size_t i)
{
    static const uint64_t pat[] = {UINT64_MAX, 0x7ff0000000000001ull, 0xfff8000000000000ull, 0,
                                   0x8000000000000000ull};
    return pat[i % 5] ^ ((uint64_t)r << 40) ^ (uint64_t)i;
}

static void allgather_u64_worker(worker_t *w)
{
    int P = dpt_comm_size(w->comm);
    uint64_t mine[7], all[7 * 8];
    for (size_t i = 0; i < 7; i++)
        mine[i] = u64_value(w->rank, i);
    WCHECK_OK(w, dpt_comm_allgather_u64(w->comm, mine, 7, all));
    for (int q = 0; q < P; q++)
        for (size_t i = 0; i < 7; i++)
            if (all[(size_t)q * 7 + i] != u64_value(q, i))
                werr(w, "wrong result", "allgather_u64", 0);
    WCHECK_OK(w, dpt_comm_allgather_u64(w->comm, NULL, 0, NULL));
}

static void test_allgather_u64(void)
{
    late_ctx_t c = {.fn = allgather_u64_worker};
    static const int sizes[] = {1, 2, 3, 8};
    for (size_t k = 0; k < 4; k++) {
        worker_t *w = run_group(sizes[k], NULL, &c, NULL);
        if (w) {
            CHECK(report(w, sizes[k], "allgather_u64") == 0);
            free(w);
        }
    }
}

static void test_bad_arguments(void)
{
    dpt_comm_threads_group_t *g = NULL;
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);

    CHECK_ERR(dpt_comm_threads_group_create(&g, 0, NULL), DPT_EINVAL, "group size 0");
    CHECK_ERR(dpt_comm_threads_group_create(&g, -3, NULL), DPT_EINVAL, "group size -3");
    CHECK_ERR(dpt_comm_threads_group_create(NULL, 2, NULL), DPT_EINVAL, "NULL");
    opt.timeout_s = 0.0;
    CHECK_ERR(dpt_comm_threads_group_create(&g, 2, &opt), DPT_EINVAL, "timeout_s");
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 0.5;
    REQUIRE_OK(dpt_comm_threads_group_create(&g, 2, &opt));

    dpt_comm_t *c = NULL, *c2 = NULL;
    CHECK_ERR(dpt_comm_threads_join(g, 2, &c), DPT_EINVAL, "rank 2");
    CHECK_ERR(dpt_comm_threads_join(g, -1, &c), DPT_EINVAL, "rank -1");
    REQUIRE_OK(dpt_comm_threads_join(g, 1, &c));
    CHECK_ERR(dpt_comm_threads_join(g, 1, &c2), DPT_ESTATE, "rank 1 has already joined");

    float buf[4] = {1, 2, 3, 4};
    CHECK_ERR(dpt_comm_allreduce(c, NULL, 4, DPT_REDUCE_SUM), DPT_EINVAL,
              "comm rank 1: allreduce: buf is NULL");
    CHECK_ERR(dpt_comm_allreduce(c, buf, 4, (dpt_reduce_op_t)7), DPT_EINVAL, "reduce op 7");
    CHECK_ERR(dpt_comm_broadcast(c, buf, 4, 2), DPT_EINVAL, "root 2");
    CHECK_ERR(dpt_comm_broadcast(c, buf, 4, -1), DPT_EINVAL, "root -1");
    CHECK_ERR(dpt_comm_broadcast(c, NULL, 4, 0), DPT_EINVAL, "broadcast: buf is NULL");
    CHECK_ERR(dpt_comm_allgather(c, NULL, 3, buf), DPT_EINVAL, "allgather: send is NULL");
    CHECK_ERR(dpt_comm_allgather(c, buf, 3, NULL), DPT_EINVAL, "allgather: recv is NULL");
    CHECK_ERR(dpt_comm_reduce_scatter(c, NULL, 4, buf, DPT_REDUCE_SUM), DPT_EINVAL,
              "reduce_scatter: send is NULL");
    CHECK_ERR(dpt_comm_reduce_scatter(c, buf, 4, NULL, DPT_REDUCE_SUM), DPT_EINVAL,
              "reduce_scatter: recv is NULL");
    CHECK_ERR(dpt_comm_allreduce(NULL, buf, 4, DPT_REDUCE_SUM), DPT_EINVAL, "NULL communicator");
    CHECK_ERR(dpt_comm_iallreduce(c, buf, 4, DPT_REDUCE_SUM, NULL), DPT_EINVAL, "NULL request");

    /* One outstanding request per handle. Rank 0 never joins, so the wait
     * times out; the point here is the DPT_ESTATE before it. */
    dpt_comm_request_t req;
    REQUIRE_OK(dpt_comm_iallreduce(c, buf, 4, DPT_REDUCE_SUM, &req));
    CHECK_ERR(dpt_comm_barrier(c), DPT_ESTATE, "iallreduce #1 is not yet waited for");
    CHECK_ERR(dpt_comm_wait(&req), DPT_ETIMEDOUT, "waiting for rank 0");
    CHECK_ERR(dpt_comm_barrier(c), DPT_ETIMEDOUT, "failed earlier");

    dpt_comm_destroy(c);
    dpt_comm_threads_group_destroy(g);
    dpt_comm_destroy(NULL);
    dpt_comm_threads_group_destroy(NULL);

    dpt_reduce_op_t op;
    dpt_comm_backend_t be;
    CHECK_OK(dpt_reduce_op_parse("avg", &op));
    CHECK(op == DPT_REDUCE_AVG);
    CHECK_ERR(dpt_reduce_op_parse("max", &op), DPT_EINVAL, "max");
    CHECK_OK(dpt_comm_backend_parse("hier", &be));
    CHECK(be == DPT_COMM_HIER);
    CHECK_ERR(dpt_comm_backend_parse("gloo", &be), DPT_EINVAL, "gloo");
    CHECK(dpt_comm_backend_available(DPT_COMM_THREADS) == 1);
}

static void test_blocks(void)
{
    for (int P = 1; P <= 9; P++) {
        size_t counts[] = {0, 1, 5, 8, 9, 10007};
        for (size_t j = 0; j < 6; j++) {
            size_t n = counts[j], total = 0;
            for (int r = 0; r < P; r++) {
                CHECK(dpt_comm_block_offset(n, P, r) == total);
                size_t b = dpt_comm_block_size(n, P, r);
                CHECK(b == n / (size_t)P + ((size_t)r < n % (size_t)P));
                total += b;
            }
            CHECK(total == n);
            CHECK(dpt_comm_block_offset(n, P, P) == n);
        }
    }
    CHECK(dpt_comm_block_size(10, 0, 0) == 0);
    CHECK(dpt_comm_block_size(10, 2, 2) == 0);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_blocks),
        DPT_TEST(test_bad_arguments),
        DPT_TEST(test_all_ops_default_paths),
        DPT_TEST(test_all_ops_large_path_blocking),
        DPT_TEST(test_all_ops_small_path),
        DPT_TEST(test_determinism_random_floats),
        DPT_TEST(test_timeout_missing_participant),
        DPT_TEST(test_abort),
        DPT_TEST(test_waiting_blocks),
        DPT_TEST(test_mismatched_calls),
        DPT_TEST(test_check_equal),
        DPT_TEST(test_allgather_u64),
    };
    (void)SANITIZED;
    return DPT_TEST_RUN(cases);
}
