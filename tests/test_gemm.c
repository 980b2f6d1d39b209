/*
 * Tests of dpt_gemm: every portable kernel this CPU can run, and CBLAS when
 * it is built in, against a naive double-precision reference over many
 * shapes, all four transpose combinations, padded strides and several
 * alpha/beta values; bitwise determinism across calls and threads; the
 * backend selection errors.
 */
#include "dpt/gemm.h"
#include "dpt_config.h"
#include "dpt_test.h"
#include "nn/gemm_impl.h"

#include <float.h>
#include <pthread.h>
#include <stdint.h>

/* Every portable kernel variant; those the CPU lacks are skipped. "unpacked"
 * is the loop used when the per-thread workspace cannot be allocated. */
static const char *const kernel_names[] = {"c", "avx2", "avx512f", "unpacked"};

/* Extra elements at the end of each row of A, B and C, filled with NaN (A, B)
 * or a sentinel (C), so that reading or writing outside the matrix shows. */
#define PAD 3
#define SENTINEL 12345.0f

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

/* Uniform in [-1, 1), from a xorshift64* generator (fixed seed, so failures
 * reproduce). */
static float rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545f4914f6cdd1du;
    return (float)((double)(r >> 40) / (double)(1u << 23)) - 1.0f;
}

/* A rows x cols row-major matrix with leading dimension cols + PAD: values
 * in [-1, 1), NaN in the padding. */
static float *matrix_new(size_t rows, size_t cols, size_t *ld)
{
    *ld = cols + PAD;
    size_t count = rows * *ld + 1;
    float *x = malloc(count * sizeof(float));
    if (!x)
        return NULL;
    for (size_t i = 0; i < count; i++)
        x[i] = NAN;
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            x[i * *ld + j] = rnd();
    return x;
}

/*
 * Error bound. Each element of C is a sum of k products formed and added in
 * float, then scaled by alpha and added to beta*C: the rounding error of such
 * a sum is at most about (k + 2) * u * (|alpha| * sum_p |a_ip b_pj| +
 * |beta c_ij|) with u = FLT_EPSILON / 2 (Higham, ch. 3). We allow
 * (k + 4) * FLT_EPSILON times that scale, twice the worst case, relative to
 * the sum of magnitudes rather than to the result, so cancellation does not
 * cause false failures. A wrong index or a missed term gives an error of
 * order 1 in this measure, far above the tolerance.
 */
static double tolerance(size_t k)
{
    return (double)(k + 4) * (double)FLT_EPSILON;
}

typedef struct gemm_case {
    int ta, tb;
    size_t m, n, k;
    float alpha, beta;
} gemm_case_t;

/* Runs one GEMM with `backend` on random data and checks it against the
 * double reference, the untouched padding of C, and (beta == 0) that the NaN
 * which fills C before the call does not propagate. Returns 0 when it
 * passed. */
static int run_case(dpt_gemm_backend_t backend, gemm_case_t t)
{
    size_t ar = t.ta ? t.k : t.m, ac = t.ta ? t.m : t.k;
    size_t br = t.tb ? t.n : t.k, bc = t.tb ? t.k : t.n;
    size_t lda, ldb, ldc;
    float *a = matrix_new(ar, ac, &lda);
    float *b = matrix_new(br, bc, &ldb);
    float *c = matrix_new(t.m, t.n, &ldc);
    float *c0 = matrix_new(t.m, t.n, &ldc);
    int bad = 0;
    if (!a || !b || !c || !c0) {
        CHECK(!"out of memory");
        bad = 1;
        goto done;
    }
    for (size_t i = 0; i < t.m * ldc + 1; i++) {
        int pad = (i % ldc) >= t.n || i == t.m * ldc;
        c[i] = pad ? SENTINEL : (t.beta == 0.0f ? NAN : c[i]);
        c0[i] = c[i];
    }
    int rc =
        dpt_gemm_ex(backend, t.ta, t.tb, t.m, t.n, t.k, t.alpha, a, lda, b, ldb, t.beta, c, ldc);
    CHECK_OK(rc);
    double worst = 0.0;
    for (size_t i = 0; i < t.m; i++) {
        for (size_t j = 0; j < t.n; j++) {
            double sum = 0.0, mag = 0.0;
            for (size_t p = 0; p < t.k; p++) {
                double x = t.ta ? a[p * lda + i] : a[i * lda + p];
                double y = t.tb ? b[j * ldb + p] : b[p * ldb + j];
                sum += x * y;
                mag += fabs(x * y);
            }
            double ref = (double)t.alpha * sum, scale = fabs((double)t.alpha) * mag;
            if (t.beta != 0.0f) {
                ref += (double)t.beta * (double)c0[i * ldc + j];
                scale += fabs((double)t.beta * (double)c0[i * ldc + j]);
            }
            double err = fabs((double)c[i * ldc + j] - ref);
            double rel = err / (scale > 0.0 ? scale : 1.0);
            if (!(rel <= worst))
                worst = isnan(rel) ? (double)INFINITY : rel;
        }
    }
    if (!(worst <= tolerance(t.k))) {
        fprintf(stderr, "  %s ta=%d tb=%d m=%zu n=%zu k=%zu alpha=%g beta=%g: error %.3g > %.3g\n",
                dpt_gemm_describe(backend), t.ta, t.tb, t.m, t.n, t.k, (double)t.alpha,
                (double)t.beta, worst, tolerance(t.k));
        bad = 1;
    }
    for (size_t i = 0; i < t.m * ldc + 1; i++) {
        if (((i % ldc) >= t.n || i == t.m * ldc) && c[i] != SENTINEL) {
            fprintf(stderr, "  ta=%d tb=%d m=%zu n=%zu k=%zu: padding of C overwritten at %zu\n",
                    t.ta, t.tb, t.m, t.n, t.k, i);
            bad = 1;
            break;
        }
    }
done:
    free(a);
    free(b);
    free(c);
    free(c0);
    return bad;
}

/* Shapes: the trivial one, odd sizes that are not multiples of any tile,
 * exact tiles, narrow N and M (the transposed-problem path), K past one KC
 * block (256), M past one MC block (96), N past one NC block (1024), and the
 * layer shapes dpt trains. */
static const size_t shapes[][3] = {
    {1, 1, 1},
    {7, 13, 5},
    {5, 7, 13},
    {13, 5, 7},
    {6, 16, 8},
    {8, 32, 4},
    {4, 8, 3},
    {17, 33, 65},
    {1, 100, 300},
    {100, 1, 300},
    {128, 2, 64},
    {2, 64, 128},
    {3, 50, 2},
    {20, 30, 600},
    {10, 1100, 20},
    {300, 257, 129},
    {64, 10, 512},
    {64, 512, 40},
    /* One to four rows past the full tiles (the edge kernels): the 2-row
     * kernel's fast store (48 columns), a partial third panel, a group of
     * fewer panels, past an MC block, the per-device batch of the benchmark;
     * the 4-row kernel with 3 and 4 rows. */
    {14, 48, 7},
    {13, 40, 9},
    {98, 100, 20},
    {128, 512, 196},
    {9, 70, 33},
    {64, 512, 100},
    {100, 20, 64},
};

static const float alphas[] = {1.0f, -0.5f, 2.5f};
static const float betas[] = {0.0f, 1.0f, -1.5f};

/* All shapes x transposes x (alpha, beta) pairs; returns the failure count. */
static int run_all(dpt_gemm_backend_t backend)
{
    int failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int tr = 0; tr < 4; tr++) {
            for (size_t v = 0; v < 3; v++) {
                gemm_case_t t = {tr >> 1,
                                 tr & 1,
                                 shapes[s][0],
                                 shapes[s][1],
                                 shapes[s][2],
                                 alphas[v],
                                 betas[(v + (size_t)tr) % 3]};
                failed += run_case(backend, t);
            }
        }
    }
    return failed;
}

static void test_portable_kernels(void)
{
    int ran = 0;
    for (size_t i = 0; i < sizeof kernel_names / sizeof kernel_names[0]; i++) {
        int rc = dpt__gemm_set_kernel(kernel_names[i]);
        if (rc == DPT_ENOTSUP) {
            printf("     kernel %s: not supported here, skipped\n", kernel_names[i]);
            continue;
        }
        CHECK_OK(rc);
        printf("     kernel %s: %s\n", kernel_names[i], dpt_gemm_describe(DPT_GEMM_PORTABLE));
        CHECK(run_all(DPT_GEMM_PORTABLE) == 0);
        ran++;
    }
    CHECK_OK(dpt__gemm_set_kernel(NULL));
    CHECK(ran >= 2);
    CHECK_ERR(dpt__gemm_set_kernel("sse9"), DPT_EINVAL, "sse9");
}

static void test_cblas(void)
{
    if (!DPT_HAVE_CBLAS) {
        printf("     skipped: CBLAS is not built in\n");
        return;
    }
    printf("     %s\n", dpt_gemm_describe(DPT_GEMM_CBLAS));
    CHECK(run_all(DPT_GEMM_CBLAS) == 0);
}

/* CBLAS and the portable kernel agree within twice the reference tolerance
 * on the layer shapes (each is within one tolerance of the exact result). */
static void test_cblas_vs_portable(void)
{
    if (!DPT_HAVE_CBLAS) {
        printf("     skipped: CBLAS is not built in\n");
        return;
    }
    size_t m = 64, n = 512, k = 784, lda, ldb, ldc;
    float *x = matrix_new(m, k, &lda), *w = matrix_new(n, k, &ldb);
    float *c1 = matrix_new(m, n, &ldc), *c2 = matrix_new(m, n, &ldc);
    REQUIRE(x && w && c1 && c2);
    CHECK_OK(dpt_gemm_ex(DPT_GEMM_PORTABLE, 0, 1, m, n, k, 1.0f, x, lda, w, ldb, 0.0f, c1, ldc));
    CHECK_OK(dpt_gemm_ex(DPT_GEMM_CBLAS, 0, 1, m, n, k, 1.0f, x, lda, w, ldb, 0.0f, c2, ldc));
    double worst = 0.0;
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            double mag = 0.0;
            for (size_t p = 0; p < k; p++)
                mag += fabs((double)x[i * lda + p] * (double)w[j * ldb + p]);
            double diff = fabs((double)c1[i * ldc + j] - (double)c2[i * ldc + j]);
            worst = fmax(worst, diff / mag);
        }
    }
    CHECK(worst <= 2.0 * tolerance(k));
    free(x);
    free(w);
    free(c1);
    free(c2);
}

/* K == 0 gives C = beta*C; M == 0 or N == 0 touch nothing; alpha == 0 reads
 * neither A nor B (NaNs there do not propagate). */
static void test_degenerate(void)
{
    for (int be = 0; be < DPT_GEMM_BACKEND_COUNT; be++) {
        dpt_gemm_backend_t backend = (dpt_gemm_backend_t)be;
        if (be == DPT_GEMM_CBLAS && !DPT_HAVE_CBLAS)
            continue;
        float nan_ab[4] = {NAN, NAN, NAN, NAN};
        float c[6] = {1, 2, 3, 4, 5, 6};
        CHECK_OK(dpt_gemm_ex(backend, 0, 0, 2, 3, 0, 1.0f, nan_ab, 1, nan_ab, 3, 2.0f, c, 3));
        CHECK(c[0] == 2.0f && c[5] == 12.0f);
        for (int i = 0; i < 6; i++)
            c[i] = NAN;
        CHECK_OK(dpt_gemm_ex(backend, 1, 1, 2, 3, 0, 1.0f, nan_ab, 2, nan_ab, 1, 0.0f, c, 3));
        CHECK(c[0] == 0.0f && c[5] == 0.0f);
        for (int i = 0; i < 6; i++)
            c[i] = 7.0f;
        CHECK_OK(dpt_gemm_ex(backend, 0, 0, 0, 3, 2, 1.0f, nan_ab, 2, nan_ab, 3, 0.0f, c, 3));
        CHECK_OK(dpt_gemm_ex(backend, 0, 0, 2, 0, 2, 1.0f, nan_ab, 2, nan_ab, 1, 0.0f, c, 3));
        CHECK(c[0] == 7.0f && c[5] == 7.0f);
        CHECK_OK(dpt_gemm_ex(backend, 0, 0, 2, 3, 1, 0.0f, nan_ab, 1, nan_ab, 3, 0.5f, c, 3));
        CHECK(c[0] == 3.5f && c[5] == 3.5f);
    }
}

/* The MLP forward shape of the first layer; its result is computed by the
 * main thread and by a second thread. */
#define DET_M 64
#define DET_N 512
#define DET_K 784

typedef struct det_job {
    const float *x, *w;
    float *c;
} det_job_t;

static void *det_thread(void *arg)
{
    det_job_t *j = arg;
    dpt_gemm(0, 1, DET_M, DET_N, DET_K, 1.0f, j->x, DET_K, j->w, DET_K, 0.0f, j->c, DET_N);
    return NULL;
}

static void check_deterministic(dpt_gemm_backend_t backend, const float *x, const float *w,
                                float *c1, float *c2, float *c3)
{
    CHECK_OK(dpt_gemm_set_backend(backend));
    dpt_gemm(0, 1, DET_M, DET_N, DET_K, 1.0f, x, DET_K, w, DET_K, 0.0f, c1, DET_N);
    dpt_gemm(0, 1, DET_M, DET_N, DET_K, 1.0f, x, DET_K, w, DET_K, 0.0f, c2, DET_N);
    CHECK(memcmp(c1, c2, sizeof(float) * DET_M * DET_N) == 0);
    det_job_t job = {x, w, c3};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, det_thread, &job) == 0);
    REQUIRE(pthread_join(th, NULL) == 0);
    CHECK(memcmp(c1, c3, sizeof(float) * DET_M * DET_N) == 0);
}

static void test_deterministic(void)
{
    dpt_gemm_backend_t saved = dpt_gemm_get_backend();
    size_t n_in = (size_t)DET_M * DET_K, n_w = (size_t)DET_N * DET_K, n_c = (size_t)DET_M * DET_N;
    float *x = malloc(n_in * sizeof(float)), *w = malloc(n_w * sizeof(float));
    float *c1 = malloc(n_c * sizeof(float)), *c2 = malloc(n_c * sizeof(float));
    float *c3 = malloc(n_c * sizeof(float));
    REQUIRE(x && w && c1 && c2 && c3);
    for (size_t i = 0; i < n_in; i++)
        x[i] = rnd();
    for (size_t i = 0; i < n_w; i++)
        w[i] = rnd();
    check_deterministic(DPT_GEMM_PORTABLE, x, w, c1, c2, c3);
    if (DPT_HAVE_CBLAS)
        check_deterministic(DPT_GEMM_CBLAS, x, w, c1, c2, c3);
    CHECK_OK(dpt_gemm_set_backend(saved));
    free(x);
    free(w);
    free(c1);
    free(c2);
    free(c3);
}

/* Every row of C is the same bits whatever M is: the last rows of a
 * product, which go to the edge kernels (M = 97..100 leave 1 to 4 rows past
 * an MC block of 96), equal those rows computed inside full tiles (M = 102),
 * for A read in place and packed (transposed). */
static void test_rows_independent_of_m(void)
{
    enum { ML = 102, N = 100, K = 37 };
    float *a = malloc(sizeof(float) * ML * K), *at = malloc(sizeof(float) * ML * K);
    float *b = malloc(sizeof(float) * K * N);
    float *cs = malloc(sizeof(float) * ML * N), *cl = malloc(sizeof(float) * ML * N);
    REQUIRE(a && at && b && cs && cl);
    for (size_t i = 0; i < (size_t)ML * K; i++)
        a[i] = rnd();
    for (size_t i = 0; i < ML; i++)
        for (size_t p = 0; p < K; p++)
            at[p * ML + i] = a[i * K + p];
    for (size_t i = 0; i < (size_t)K * N; i++)
        b[i] = rnd();
    for (size_t v = 0; v < sizeof kernel_names / sizeof kernel_names[0]; v++) {
        if (dpt__gemm_set_kernel(kernel_names[v]) != DPT_OK)
            continue;
        for (size_t ms = 97; ms <= 100; ms++) {
            for (int ta = 0; ta < 2; ta++) {
                const float *x = ta ? at : a;
                size_t lda = ta ? ML : K;
                dpt_gemm_ex(DPT_GEMM_PORTABLE, ta, 0, ms, N, K, 1.0f, x, lda, b, N, 0.0f, cs, N);
                dpt_gemm_ex(DPT_GEMM_PORTABLE, ta, 0, ML, N, K, 1.0f, x, lda, b, N, 0.0f, cl, N);
                CHECK(memcmp(cs, cl, sizeof(float) * ms * N) == 0);
            }
        }
    }
    CHECK_OK(dpt__gemm_set_kernel(NULL));
    free(a);
    free(at);
    free(b);
    free(cs);
    free(cl);
}

static void test_backend_selection(void)
{
    dpt_gemm_backend_t saved = dpt_gemm_get_backend();
    CHECK(saved == DPT_GEMM_PORTABLE || saved == DPT_GEMM_CBLAS);
    CHECK_ERR(dpt_gemm_set_backend(DPT_GEMM_BACKEND_COUNT), DPT_EINVAL, "unknown backend");
    CHECK_ERR(dpt_gemm_set_backend((dpt_gemm_backend_t)-1), DPT_EINVAL, "unknown backend");
    CHECK(dpt_gemm_get_backend() == saved);
    CHECK_OK(dpt_gemm_set_backend(DPT_GEMM_PORTABLE));
    CHECK(dpt_gemm_get_backend() == DPT_GEMM_PORTABLE);
    float a = 2.0f, b = 3.0f, c = 0.0f;
    if (DPT_HAVE_CBLAS) {
        CHECK_OK(dpt_gemm_set_backend(DPT_GEMM_CBLAS));
        CHECK(dpt_gemm_get_backend() == DPT_GEMM_CBLAS);
        CHECK(strstr(dpt_gemm_describe(DPT_GEMM_CBLAS), "1 thread per call") != NULL ||
              !DPT_HAVE_OPENBLAS_THREADS);
    } else {
        CHECK_ERR(dpt_gemm_set_backend(DPT_GEMM_CBLAS), DPT_ENOTSUP, "cblas");
        CHECK(dpt_gemm_get_backend() == DPT_GEMM_PORTABLE);
        CHECK_ERR(dpt_gemm_ex(DPT_GEMM_CBLAS, 0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1),
                  DPT_ENOTSUP, "cblas");
    }
    CHECK_ERR(dpt_gemm_ex(DPT_GEMM_BACKEND_COUNT, 0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1),
              DPT_EINVAL, "unknown backend");
    dpt_gemm(0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
    CHECK(c == 6.0f);
    CHECK_OK(dpt_gemm_set_backend(saved));
    CHECK(strcmp(dpt_gemm_backend_name(DPT_GEMM_PORTABLE), "portable") == 0);
    CHECK(strcmp(dpt_gemm_backend_name(DPT_GEMM_CBLAS), "cblas") == 0);
    CHECK(strcmp(dpt_gemm_backend_name(DPT_GEMM_BACKEND_COUNT), "unknown") == 0);
    CHECK(strncmp(dpt_gemm_describe(DPT_GEMM_PORTABLE), "portable (", 10) == 0);
    CHECK(strncmp(dpt_gemm_describe(DPT_GEMM_CBLAS), "cblas (", 7) == 0);
    CHECK(strcmp(dpt_gemm_describe(DPT_GEMM_BACKEND_COUNT), "unknown") == 0);
}

/* A B packed once (dpt__gemm_bpack) gives, product after product, exactly
 * what dpt_gemm gives with the same arguments: for every kernel, both
 * layouts of B, shapes with several column blocks and K chunks, an N
 * narrower than the micro-tile (not packed: the plain path), and after the
 * backend changed under a packed copy. */
static void test_bpack(void)
{
    static const size_t bshapes[][3] = {/* m, n, k */
                                        {64, 1024, 256}, {64, 256, 1024}, {5, 33, 7},
                                        {97, 1100, 300}, {3, 10, 16},     {1, 64, 1}};
    const char *names[] = {"c", "avx2", "avx512f", NULL};
    for (size_t v = 0; v < sizeof names / sizeof names[0]; v++) {
        if (dpt__gemm_set_kernel(names[v]) == DPT_ENOTSUP)
            continue;
        for (size_t s = 0; s < sizeof bshapes / sizeof bshapes[0]; s++) {
            for (int tb = 0; tb < 2; tb++) {
                size_t m = bshapes[s][0], n = bshapes[s][1], k = bshapes[s][2], lda, ldb, ldc;
                float *a = matrix_new(m, k, &lda);
                float *b = tb ? matrix_new(n, k, &ldb) : matrix_new(k, n, &ldb);
                float *c1 = matrix_new(m, n, &ldc), *c2 = matrix_new(m, n, &ldc);
                REQUIRE(a && b && c1 && c2);
                memcpy(c2, c1, (m * ldc + 1) * sizeof(float));
                dpt__gemm_bpack_t p = {0};
                CHECK_OK(dpt__gemm_bpack(&p, tb, k, n, b, ldb));
                for (int rep = 0; rep < 2; rep++) { /* the packed copy serves twice */
                    dpt_gemm(0, tb, m, n, k, 0.5f, a, lda, b, ldb, 1.0f, c1, ldc);
                    dpt__gemm_bpacked(0, m, 0.5f, a, lda, &p, 1.0f, c2, ldc);
                }
                CHECK(memcmp(c1, c2, m * ldc * sizeof(float)) == 0);
                CHECK(p.kernel != DPT__GEMM_KERNEL_UNPACKED ||
                      n < dpt__gemm_kernel(dpt__gemm_kernel_current())->nr);
                dpt__gemm_bpack_free(&p);
                CHECK(p.data == NULL && p.cap == 0);
                free(a);
                free(b);
                free(c1);
                free(c2);
            }
        }
    }
    /* A copy packed for one kernel, used after another was picked, falls
     * back to dpt_gemm with the kernel now in use. */
    CHECK_OK(dpt__gemm_set_kernel("c"));
    size_t lda, ldb, ldc;
    float *a = matrix_new(8, 40, &lda), *b = matrix_new(40, 48, &ldb);
    float *c1 = matrix_new(8, 48, &ldc), *c2 = matrix_new(8, 48, &ldc);
    REQUIRE(a && b && c1 && c2);
    dpt__gemm_bpack_t p = {0};
    CHECK_OK(dpt__gemm_bpack(&p, 0, 40, 48, b, ldb));
    CHECK(p.kernel != DPT__GEMM_KERNEL_UNPACKED);
    CHECK_OK(dpt__gemm_set_kernel("unpacked"));
    dpt_gemm(0, 0, 8, 48, 40, 1.0f, a, lda, b, ldb, 0.0f, c1, ldc);
    dpt__gemm_bpacked(0, 8, 1.0f, a, lda, &p, 0.0f, c2, ldc);
    for (size_t i = 0; i < 8; i++)
        CHECK(memcmp(c1 + i * ldc, c2 + i * ldc, 48 * sizeof(float)) == 0);
    /* Packing under the unpacked loop records B only. */
    CHECK_OK(dpt__gemm_bpack(&p, 0, 40, 48, b, ldb));
    CHECK(p.kernel == DPT__GEMM_KERNEL_UNPACKED);
    dpt__gemm_bpacked(0, 8, 1.0f, a, lda, &p, 0.0f, c2, ldc);
    for (size_t i = 0; i < 8; i++)
        CHECK(memcmp(c1 + i * ldc, c2 + i * ldc, 48 * sizeof(float)) == 0);
#if DPT_HAVE_CBLAS
    CHECK_OK(dpt__gemm_set_kernel(NULL));
    CHECK_OK(dpt__gemm_bpack(&p, 0, 40, 48, b, ldb));
    CHECK_OK(dpt_gemm_set_backend(DPT_GEMM_CBLAS));
    dpt_gemm(0, 0, 8, 48, 40, 1.0f, a, lda, b, ldb, 0.0f, c1, ldc);
    dpt__gemm_bpacked(0, 8, 1.0f, a, lda, &p, 0.0f, c2, ldc);
    for (size_t i = 0; i < 8; i++)
        CHECK(memcmp(c1 + i * ldc, c2 + i * ldc, 48 * sizeof(float)) == 0);
    CHECK_OK(dpt_gemm_set_backend(DPT_GEMM_PORTABLE));
#endif
    CHECK_OK(dpt__gemm_set_kernel(NULL));
    dpt__gemm_bpack_free(&p);
    free(a);
    free(b);
    free(c1);
    free(c2);
}

/* Products of a few rows with the weights transposed once: bitwise
 * dpt_gemm with the bias rows in C and beta = 1 (or beta = 0 without a
 * bias), for every kernel, rows 1..8, widths around the vector sizes, k up
 * to KC; the padding columns of the transposed weights hold NaN and never
 * reach C. Out of range: m > 8, k > 256, another backend. */
static void test_small(void)
{
    static const size_t ns[] = {1, 2, 3, 8, 15, 16, 17, 31, 32, 33, 48, 64, 70};
    static const size_t ks[] = {1, 4, 64, 255, 256};
    const char *names[] = {"c", "avx2", "avx512f"};
    for (size_t v = 0; v < sizeof names / sizeof names[0]; v++) {
        if (dpt__gemm_set_kernel(names[v]) == DPT_ENOTSUP)
            continue;
        for (size_t m = 1; m <= DPT__GEMM_SMALL_M; m++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                    size_t n = ns[ni], k = ks[ki], lda, ldw, ldc, ldb = dpt__gemm_small_ld(n);
                    REQUIRE(dpt__gemm_small_ok(m, k));
                    float *a = matrix_new(m, k, &lda), *w = matrix_new(n, k, &ldw);
                    float *bias = matrix_new(1, n, &ldc), *c1 = matrix_new(m, n, &ldc);
                    float *c2 = matrix_new(m, n, &ldc), *wt = malloc(k * ldb * sizeof *wt);
                    REQUIRE(a && w && bias && c1 && c2 && wt);
                    for (size_t p = 0; p < k; p++)
                        for (size_t j = 0; j < ldb; j++)
                            wt[p * ldb + j] = j < n ? w[j * ldw + p] : NAN;
                    for (int with_bias = 0; with_bias < 2; with_bias++) {
                        for (size_t i = 0; i < m; i++)
                            memcpy(c1 + i * ldc, bias, n * sizeof *c1);
                        dpt_gemm(0, 1, m, n, k, 1.0f, a, lda, w, ldw, with_bias ? 1.0f : 0.0f, c1,
                                 ldc);
                        dpt__gemm_small(m, n, k, a, lda, wt, ldb, with_bias ? bias : NULL, c2, ldc);
                        int same = 1;
                        for (size_t i = 0; i < m; i++)
                            same &= memcmp(c1 + i * ldc, c2 + i * ldc, n * sizeof *c1) == 0;
                        if (!same)
                            fprintf(stderr, "small %s m=%zu n=%zu k=%zu bias=%d differs\n",
                                    names[v], m, n, k, with_bias);
                        CHECK(same);
                    }
                    free(a), free(w), free(bias), free(c1), free(c2), free(wt);
                }
    }
    CHECK_OK(dpt__gemm_set_kernel(NULL));
    CHECK(!dpt__gemm_small_ok(DPT__GEMM_SMALL_M + 1, 4));
    CHECK(!dpt__gemm_small_ok(4, 257));
    CHECK(!dpt__gemm_small_ok(0, 4));
    CHECK_OK(dpt__gemm_set_kernel("unpacked"));
    CHECK(!dpt__gemm_small_ok(4, 4));
    CHECK_OK(dpt__gemm_set_kernel(NULL));
    if (dpt_gemm_set_backend(DPT_GEMM_CBLAS) == DPT_OK) {
        CHECK(!dpt__gemm_small_ok(4, 4));
        CHECK_OK(dpt_gemm_set_backend(DPT_GEMM_PORTABLE));
    }
}

/* dpt__gemm_set_direct is a test hook (nn/gemm_impl.h). Products with at
 * most 8 rows (in the problem or its transpose) go to the direct kernels;
 * their bits must be the packed path's, for every kernel that has them,
 * every transpose combination, beta 0 (C not read: NaN there stays out) and
 * 1, alpha 1 and 0.5, columns around the vector widths. */
static void test_direct_is_packed(void)
{
    static const size_t dims[] = {1, 2, 3, 4, 5, 8, 9, 17, 64};
    static const size_t ns[] = {1, 2, 4, 15, 16, 17, 24, 25, 31, 32, 33, 48, 49, 64, 65, 100};
    static const size_t ks[] = {1, 2, 7, 64, 256};
    const char *names[] = {"avx2", "avx512f"};
    for (size_t v = 0; v < 2; v++) {
        if (dpt__gemm_set_kernel(names[v]) == DPT_ENOTSUP)
            continue;
        for (size_t mi = 0; mi < sizeof dims / sizeof dims[0]; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                    for (int tr = 0; tr < 4; tr++)
                        for (int bi = 0; bi < 2; bi++) {
                            size_t m = dims[mi], n = ns[ni], k = ks[ki];
                            if (m > 8 && n > 8)
                                continue; /* neither orientation is direct */
                            int ta = tr & 1, tb = tr >> 1;
                            float alpha = bi ? 0.5f : 1.0f, beta = (float)bi;
                            size_t lda, ldb, ldc;
                            float *a = ta ? matrix_new(k, m, &lda) : matrix_new(m, k, &lda);
                            float *b = tb ? matrix_new(n, k, &ldb) : matrix_new(k, n, &ldb);
                            float *c1 = matrix_new(m, n, &ldc), *c2 = matrix_new(m, n, &ldc);
                            REQUIRE(a && b && c1 && c2);
                            for (size_t i = 0; i < m; i++)
                                for (size_t j = 0; j < n; j++) {
                                    if (beta == 0.0f)
                                        c1[i * ldc + j] = NAN;
                                    c2[i * ldc + j] = c1[i * ldc + j];
                                }
                            dpt__gemm_set_direct(0);
                            dpt_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c1, ldc);
                            dpt__gemm_set_direct(1);
                            dpt_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c2, ldc);
                            int same = memcmp(c1, c2, (m * ldc) * sizeof *c1) == 0;
                            if (!same)
                                fprintf(stderr, "direct %s m=%zu n=%zu k=%zu ta=%d tb=%d beta=%g\n",
                                        names[v], m, n, k, ta, tb, (double)beta);
                            CHECK(same);
                            free(a), free(b), free(c1), free(c2);
                        }
    }
    dpt__gemm_set_direct(1);
    CHECK_OK(dpt__gemm_set_kernel(NULL));
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_backend_selection),
        DPT_TEST(test_degenerate),
        DPT_TEST(test_portable_kernels),
        DPT_TEST(test_cblas),
        DPT_TEST(test_cblas_vs_portable),
        DPT_TEST(test_deterministic),
        DPT_TEST(test_rows_independent_of_m),
        DPT_TEST(test_bpack),
        DPT_TEST(test_small),
        DPT_TEST(test_direct_is_packed),
    };
    printf("default backend: %s\n", dpt_gemm_describe(dpt_gemm_get_backend()));
    return DPT_TEST_RUN(cases);
}
