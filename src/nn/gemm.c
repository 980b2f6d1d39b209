/*
 * Single-precision GEMM: the public interface, the drivers of dpt's own
 * packed kernel, and the CBLAS backend. The packers and micro-kernels the
 * drivers call, and the choice among them, are in gemm_kernels.c.
 *
 * The portable kernel follows the GotoBLAS/BLIS layering, written for dpt:
 *
 *     for jc over N in steps of NC          columns of C and op(B)
 *       for pc over K in chunks <= KC       one rank-kc update of C
 *         pack op(B)[pc:pc+kc, jc:jc+NC]  -> bbuf, NR-column panels
 *         for ic over M in steps of MC
 *           pack op(A)[ic:ic+MC, pc:pc+kc] -> abuf, MR-row panels
 *             (skipped when the rows of op(A) are contiguous: the
 *              micro-kernel then reads them in place)
 *           for jr over NC in steps of NR   one B panel stays in L1
 *             for ir over MC in steps of MR
 *               micro-kernel: an MR x NR tile of C, accumulated in registers
 *
 * Every operand is addressed through a row stride and a column stride, so the
 * four transpose combinations are only different strides, and C^T = op(B)^T
 * op(A)^T is the same problem with A and B swapped. That swap is used when N
 * is narrower than the micro-tile (the 10- and 2-wide output layers), where a
 * tile of NR columns would be mostly padding.
 *
 * Packing pads partial panels with zeros, so the micro-kernel always runs a
 * full tile and only its store handles edges. The panels live in one buffer
 * per thread (allocated on the thread's first call, freed when it exits);
 * when that allocation fails, a plain loop without packing computes the
 * result instead (correct, slower, and rounded differently).
 *
 * Determinism: each element of C is summed over k in increasing order, in
 * chunks of at most KC accumulated into C one after the other. The blocking depends
 * only on the shape and on the kernel picked once per process, never on
 * pointers, alignment or the calling thread, so equal inputs give bitwise
 * equal outputs.
 */
#include "dpt/gemm.h"
#include "dpt/status.h"
#include "dpt_config.h"
#include "gemm_impl.h"

#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if DPT_HAVE_CBLAS
#include <cblas.h>
#endif

/* The backend dpt_gemm() uses until dpt_gemm_set_backend() changes it: the
 * portable kernel, in every build. Chosen with bench_gemm on the development
 * machine (AMD EPYC with AVX2, no AVX-512; docs/GEMM.md has the tables).
 * Summed over all products of a training step, OpenBLAS was faster on the
 * MLP (784-512-512-10 at batch 64-256): by 2-11% with its Haswell kernels
 * (OPENBLAS_CORETYPE=Haswell, as CI sets it) and 1-6% with the Zen kernels it
 * picks by itself. The portable kernel was faster on the PPO network
 * (4-64-64-2 at batch 128-512): by 3-8% and 24-42% respectively. No backend
 * wins everywhere; the portable one loses little where it loses, wins more
 * where it wins, and gives results that do not depend on whether OpenBLAS is
 * installed or on OPENBLAS_CORETYPE. On a CPU with AVX-512, where the portable
 * kernel uses its 8x32 variant, this was not measured. */
#define DPT__GEMM_DEFAULT_BACKEND DPT_GEMM_PORTABLE

/* ---- blocking ------------------------------------------------------------ */

/* KC x NR floats of B (16 KiB for NR = 16) stay in L1 while the micro-kernel
 * walks down the MC x KC block of A (96 KiB, in L2). NC covers the widest
 * layer dpt trains (784) in one block. MC and NC are multiples of every
 * kernel's MR and NR, so only the last panel of a matrix is partial. */
#define DPT__GEMM_KC 256
#define DPT__GEMM_MC 96
#define DPT__GEMM_NC 1024
#define DPT__GEMM_ABUF_FLOATS ((size_t)DPT__GEMM_MC * DPT__GEMM_KC)
#define DPT__GEMM_BBUF_FLOATS ((size_t)DPT__GEMM_KC * DPT__GEMM_NC)

/* ---- per-thread packing workspace ----------------------------------------- */

/* One block per thread holds abuf then bbuf. It is kept across calls (a
 * training step calls GEMM many times, and first touches of fresh pages are
 * expensive on these machines) and freed by the key's destructor when the
 * thread exits. */
static pthread_once_t workspace_once = PTHREAD_ONCE_INIT;
static pthread_key_t workspace_key;
static int workspace_key_ok;

static void workspace_key_create(void)
{
    workspace_key_ok = pthread_key_create(&workspace_key, free) == 0;
}

/* Returns the calling thread's workspace or NULL when it cannot be had. */
static float *workspace_get(void)
{
    pthread_once(&workspace_once, workspace_key_create);
    if (!workspace_key_ok)
        return NULL;
    float *ws = pthread_getspecific(workspace_key);
    if (ws)
        return ws;
    void *p = NULL;
    size_t bytes = (DPT__GEMM_ABUF_FLOATS + DPT__GEMM_BBUF_FLOATS) * sizeof(float);
    if (posix_memalign(&p, 64, bytes) != 0)
        return NULL;
    if (pthread_setspecific(workspace_key, p) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* ---- drivers ------------------------------------------------------------- */

/* Operand strides: element (i, j) of a matrix X is x[i*rs + j*cs]. */
typedef struct dpt__gemm_args {
    size_t m, n, k;
    float alpha, beta;
    const float *a;
    size_t rsa, csa;
    const float *b;
    size_t rsb, csb;
    float *c;
    size_t rsc, csc;
} dpt__gemm_args_t;

/* The fallback without workspace: one dot product per element, summed in
 * increasing k like the packed kernels, but without their chunks of KC or
 * fused multiply-adds, so the last bits can differ from theirs. */
static void gemm_unpacked(const dpt__gemm_args_t *g)
{
    for (size_t i = 0; i < g->m; i++) {
        for (size_t j = 0; j < g->n; j++) {
            float s = 0.0f;
            for (size_t p = 0; p < g->k; p++)
                s += g->a[i * g->rsa + p * g->csa] * g->b[p * g->rsb + j * g->csb];
            float *cp = g->c + i * g->rsc + j * g->csc;
            *cp = g->beta == 0.0f ? g->alpha * s : g->alpha * s + g->beta * *cp;
        }
    }
}

/* The last `rem` rows (starting at row `full` of the block) against the
 * panels of one group of `gn` columns: one edge-kernel call when the group
 * has all its panels, else the full-tile kernel panel by panel. */
static void edge_rows(const dpt__gemm_kernel_t *kr, const dpt__gemm_edge_t *e,
                      const dpt__gemm_args_t *g, float *abuf, const float *ablock, size_t direct,
                      size_t full, size_t rem, size_t kc, const float *bgroup, float *c, float beta,
                      size_t gn)
{
    size_t nr = kr->nr;
    const float *ap = full < direct ? ablock + full * g->rsa : abuf + (full - direct) * kc;
    size_t rsa = full < direct ? g->rsa : 1, csa = full < direct ? 1 : kr->mr;
    if (gn > (e->panels - 1) * nr) {
        e->fn(kc, ap, rsa, csa, bgroup, kc * nr, c, g->rsc, g->csc, g->alpha, beta, rem, gn);
        return;
    }
    /* The full-tile kernel reads mr rows: only a packed panel has them. */
    if (full < direct) {
        kr->pack_a(kr->mr, rem, kc, ap, g->rsa, g->csa, abuf);
        ap = abuf;
        rsa = 1;
        csa = kr->mr;
    }
    for (size_t jr = 0; jr < gn; jr += nr)
        kr->fn(kc, ap, rsa, csa, bgroup + jr * kc, c + jr * g->csc, g->rsc, g->csc, g->alpha, beta,
               rem, dpt__gemm_min(nr, gn - jr));
}

/* Tiles of `tile` rows needed to cover `len`, times `tile`: the padded size. */
static size_t padded(size_t len, size_t tile)
{
    return (len + tile - 1) / tile * tile;
}

/* The driver cuts K into equal chunks of at most KC (784 = 4 x 196, not
 * 3 x 256 + 16): a short last chunk would cost a full pass over C and a
 * packing round for little work. The chunk length: */
static size_t k_step(size_t k)
{
    size_t chunks = (k + DPT__GEMM_KC - 1) / DPT__GEMM_KC;
    return (k + chunks - 1) / chunks;
}

/* Where the panels of op(B)[pc:pc+kc, jc:jc+nc] start in a B packed whole
 * (dpt__gemm_bpack): the blocks of NC columns one after the other, each with
 * its chunks of K in order. Every block before the last is NC wide, a
 * multiple of NR, so it takes exactly NC * k floats. */
static size_t bpack_offset(size_t k, size_t jc, size_t pc, size_t nc, size_t nr)
{
    return jc * k + pc * padded(nc, nr);
}

/* bpre: op(B) packed whole for this kernel (dpt__gemm_bpack), or NULL to
 * pack it block by block into the workspace. */
static void gemm_packed(const dpt__gemm_kernel_t *kr, const dpt__gemm_args_t *g, float *ws,
                        const float *bpre)
{
    float *abuf = ws;
    float *bbuf = ws + DPT__GEMM_ABUF_FLOATS;
    size_t mr = kr->mr, nr = kr->nr;
    /* When the rows of op(A) are contiguous (csa == 1) the micro-kernel reads
     * full MR-row panels in place: packing them is a transpose, which made
     * the forward pass at batch 64 about a quarter slower when measured. Only
     * the last, partial panel is packed (with zero rows). Other layouts are
     * packed. */
    int in_place = g->csa == 1;
    size_t kstep = k_step(g->k);
    for (size_t jc = 0; jc < g->n; jc += DPT__GEMM_NC) {
        size_t nc = dpt__gemm_min(DPT__GEMM_NC, g->n - jc);
        for (size_t pc = 0; pc < g->k; pc += kstep) {
            size_t kc = dpt__gemm_min(kstep, g->k - pc);
            /* The first chunk of k applies the caller's beta; later chunks add
             * to what the earlier ones stored. */
            float beta = pc == 0 ? g->beta : 1.0f;
            const float *bblock = bbuf;
            if (bpre)
                bblock = bpre + bpack_offset(g->k, jc, pc, nc, nr);
            else
                kr->pack_b(nr, nc, kc, g->b + pc * g->rsb + jc * g->csb, g->rsb, g->csb, bbuf);
            for (size_t ic = 0; ic < g->m; ic += DPT__GEMM_MC) {
                size_t mc = dpt__gemm_min(DPT__GEMM_MC, g->m - ic);
                const float *ablock = g->a + ic * g->rsa + pc * g->csa;
                size_t full = mc / mr * mr, rem = mc - full;
                /* A last panel of only a few rows goes to the edge kernel,
                 * which reads them in place when the rows are contiguous. */
                const dpt__gemm_edge_t *edge = NULL;
                size_t nedges = sizeof kr->edges / sizeof kr->edges[0];
                for (size_t e = 0; rem > 0 && !edge && e < nedges; e++)
                    if (kr->edges[e].fn && rem <= kr->edges[e].mr)
                        edge = &kr->edges[e];
                size_t direct = in_place ? (edge ? mc : full) : 0;
                if (direct < mc)
                    kr->pack_a(mr, mc - direct, kc, ablock + direct * g->rsa, g->rsa, g->csa, abuf);
                size_t tiled = edge ? full : mc;
                size_t group = edge ? edge->panels * nr : nr;
                for (size_t jg = 0; jg < nc; jg += group) {
                    size_t gn = dpt__gemm_min(group, nc - jg);
                    for (size_t jr = jg; jr < jg + gn; jr += nr) {
                        size_t n = dpt__gemm_min(nr, nc - jr);
                        const float *bpanel = bblock + jr * kc;
                        for (size_t ir = 0; ir < tiled; ir += mr) {
                            size_t m = dpt__gemm_min(mr, mc - ir);
                            float *c = g->c + (ic + ir) * g->rsc + (jc + jr) * g->csc;
                            const float *ap =
                                ir < direct ? ablock + ir * g->rsa : abuf + (ir - direct) * kc;
                            kr->fn(kc, ap, ir < direct ? g->rsa : 1, ir < direct ? 1 : mr, bpanel,
                                   c, g->rsc, g->csc, g->alpha, beta, m, n);
                        }
                    }
                    if (edge)
                        edge_rows(kr, edge, g, abuf, ablock, direct, full, rem, kc,
                                  bblock + jg * kc,
                                  g->c + (ic + full) * g->rsc + (jc + jg) * g->csc, beta, gn);
                }
            }
        }
    }
}

/* ---- direct products -------------------------------------------------------
 *
 * Packing pays for itself when the packed panels are reused across many
 * rows of A. A product with at most DPT__GEMM_DIRECT_M rows reuses them only
 * that often: the weight gradients of an RL policy's narrow layers (dW of a
 * 1- or 2-output head, [2 x 64] over 64 rows; of a 4-input first layer,
 * [64 x 4], whose transpose has 4 rows) spent 4x their arithmetic on packing
 * B and on padded tiles (0.81 us against 0.18 us direct on Zen 4). They go to
 * the kernel's direct form instead (same bits), when op(B) has contiguous
 * rows in the problem or in its transpose and beta is 0 or 1 (the epilogue
 * both paths share). A short K alone does not qualify: with many rows the
 * packed tiles store C faster (dX of a 2-output head: 0.32 packed, 0.55 us
 * direct). */
#define DPT__GEMM_DIRECT_M 8

static atomic_int direct_enabled = 1;

void dpt__gemm_set_direct(int on)
{
    atomic_store(&direct_enabled, on != 0);
}

static int direct_fits(const dpt__gemm_args_t *g)
{
    return g->csb == 1 && g->m <= DPT__GEMM_DIRECT_M;
}

static void direct_run(const dpt__gemm_kernel_t *kr, const dpt__gemm_args_t *g)
{
    kr->direct(g->m, g->n, g->k, g->a, g->rsa, g->csa, g->b, g->rsb, g->c, g->rsc, g->csc, g->alpha,
               g->beta);
}

/* C^T = op(B)^T op(A)^T: the same product with A and B swapped. */
static dpt__gemm_args_t gemm_transposed(const dpt__gemm_args_t *g)
{
    dpt__gemm_args_t t = *g;
    t.m = g->n;
    t.n = g->m;
    t.a = g->b;
    t.rsa = g->csb;
    t.csa = g->rsb;
    t.b = g->a;
    t.rsb = g->csa;
    t.csb = g->rsa;
    t.rsc = g->csc;
    t.csc = g->rsc;
    return t;
}

static void gemm_portable(dpt__gemm_args_t g)
{
    int ki = dpt__gemm_kernel_current();
    float *ws = ki == DPT__GEMM_KERNEL_UNPACKED ? NULL : workspace_get();
    if (ws == NULL) {
        gemm_unpacked(&g);
        return;
    }
    const dpt__gemm_kernel_t *kr = dpt__gemm_kernel(ki);
    if (kr->direct && g.k <= DPT__GEMM_KC && (g.beta == 0.0f || g.beta == 1.0f) &&
        atomic_load_explicit(&direct_enabled, memory_order_relaxed)) {
        if (direct_fits(&g)) {
            direct_run(kr, &g);
            return;
        }
        dpt__gemm_args_t t = gemm_transposed(&g);
        if (direct_fits(&t)) {
            direct_run(kr, &t);
            return;
        }
    }
    /* For a C narrower than the micro-tile, solve C^T = op(B)^T op(A)^T
     * instead when that wastes fewer padded lanes (N = 10 with NR = 16 pads
     * to 16 columns, but N = 10 rows pad only to 12). Wider outputs keep the
     * original problem: its stores are contiguous and a row-major A is read
     * in place, while the swap changes little. */
    if (g.n < kr->nr &&
        padded(g.n, kr->mr) * padded(g.m, kr->nr) < padded(g.m, kr->mr) * padded(g.n, kr->nr))
        g = gemm_transposed(&g);
    gemm_packed(kr, &g, ws, NULL);
}

/* C = beta * C, without reading C when beta == 0 (the result when K == 0 or
 * alpha == 0, where BLAS does not read A or B either). */
static void scale_c(size_t m, size_t n, float beta, float *c, size_t ldc)
{
    for (size_t i = 0; i < m; i++) {
        float *row = c + i * ldc;
        if (beta == 0.0f)
            memset(row, 0, n * sizeof(float));
        else if (beta != 1.0f)
            for (size_t j = 0; j < n; j++)
                row[j] *= beta;
    }
}

/* ---- CBLAS backend ------------------------------------------------------- */

#if DPT_HAVE_CBLAS
static pthread_once_t cblas_once = PTHREAD_ONCE_INIT;
static char cblas_describe[256];

/* Towers call GEMM from several threads at once; one OpenBLAS thread per call
 * keeps them from oversubscribing the cores. */
static void cblas_setup(void)
{
#if DPT_HAVE_OPENBLAS_THREADS
    openblas_set_num_threads(1);
    snprintf(cblas_describe, sizeof cblas_describe, "cblas (%s, core %s, 1 thread per call)",
             openblas_get_config(), openblas_get_corename());
#else
    snprintf(cblas_describe, sizeof cblas_describe,
             "cblas (%s, threads as the library is configured)", DPT_BLAS_NAME);
#endif
}

/* Returns 0 when CBLAS ran, nonzero when a size does not fit its int
 * arguments (the caller then uses the portable kernel). */
static int gemm_cblas(int transa, int transb, size_t m, size_t n, size_t k, float alpha,
                      const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                      size_t ldc)
{
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return -1;
    pthread_once(&cblas_once, cblas_setup);
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
                transb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b,
                (int)ldb, beta, c, (int)ldc);
    return 0;
}
#endif

/* ---- public interface ---------------------------------------------------- */

static atomic_int current_backend = DPT__GEMM_DEFAULT_BACKEND;

static int backend_built(dpt_gemm_backend_t backend)
{
    return backend == DPT_GEMM_PORTABLE || (backend == DPT_GEMM_CBLAS && DPT_HAVE_CBLAS);
}

static int backend_check(dpt_gemm_backend_t backend)
{
    if ((int)backend < 0 || (int)backend >= (int)DPT_GEMM_BACKEND_COUNT)
        return dpt_error(DPT_EINVAL, "gemm: unknown backend %d", (int)backend);
    if (!backend_built(backend))
        return dpt_error(DPT_ENOTSUP, "gemm: backend %s is not built in (no CBLAS found)",
                         dpt_gemm_backend_name(backend));
    return DPT_OK;
}

dpt_gemm_backend_t dpt_gemm_get_backend(void)
{
    return (dpt_gemm_backend_t)atomic_load_explicit(&current_backend, memory_order_relaxed);
}

int dpt_gemm_set_backend(dpt_gemm_backend_t backend)
{
    int rc = backend_check(backend);
    if (rc < 0)
        return rc;
    atomic_store(&current_backend, (int)backend);
    return DPT_OK;
}

const char *dpt_gemm_backend_name(dpt_gemm_backend_t backend)
{
    switch (backend) {
#define DPT__GEMM_NAME(sym, name) \
    case sym: return name;
        DPT_GEMM_BACKEND_LIST(DPT__GEMM_NAME)
#undef DPT__GEMM_NAME
    default: return "unknown";
    }
}

const char *dpt_gemm_describe(dpt_gemm_backend_t backend)
{
    switch (backend) {
    case DPT_GEMM_PORTABLE: {
        int ki = dpt__gemm_kernel_current();
        return ki == DPT__GEMM_KERNEL_UNPACKED ? "portable (unpacked loop)"
                                               : dpt__gemm_kernel(ki)->describe;
    }
    case DPT_GEMM_CBLAS:
#if DPT_HAVE_CBLAS
        pthread_once(&cblas_once, cblas_setup);
        return cblas_describe;
#else
        return "cblas (not built in)";
#endif
    default: return "unknown";
    }
}

int dpt_gemm_ex(dpt_gemm_backend_t backend, int transa, int transb, size_t m, size_t n, size_t k,
                float alpha, const float *a, size_t lda, const float *b, size_t ldb, float beta,
                float *c, size_t ldc)
{
    int rc = backend_check(backend);
    if (rc < 0)
        return rc;
    assert((transa == 0 || transa == 1) && (transb == 0 || transb == 1));
    assert(m == 0 || k == 0 || lda >= (transa ? m : k));
    assert(n == 0 || k == 0 || ldb >= (transb ? k : n));
    assert(m == 0 || n == 0 || ldc >= n);
    if (m == 0 || n == 0)
        return DPT_OK;
    if (k == 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return DPT_OK;
    }
#if DPT_HAVE_CBLAS
    if (backend == DPT_GEMM_CBLAS &&
        gemm_cblas(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0)
        return DPT_OK;
#endif
    dpt__gemm_args_t g = {
        .m = m,
        .n = n,
        .k = k,
        .alpha = alpha,
        .beta = beta,
        .a = a,
        .rsa = transa ? 1 : lda,
        .csa = transa ? lda : 1,
        .b = b,
        .rsb = transb ? 1 : ldb,
        .csb = transb ? ldb : 1,
        .c = c,
        .rsc = ldc,
        .csc = 1,
    };
    gemm_portable(g);
    return DPT_OK;
}

void dpt_gemm(int transa, int transb, size_t m, size_t n, size_t k, float alpha, const float *a,
              size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc)
{
    (void)dpt_gemm_ex(dpt_gemm_get_backend(), transa, transb, m, n, k, alpha, a, lda, b, ldb, beta,
                      c, ldc);
}

/* ---- products with a few rows ------------------------------------------------ */

int dpt__gemm_small_ok(size_t m, size_t k)
{
    if (m == 0 || m > DPT__GEMM_SMALL_M || k == 0 || k > DPT__GEMM_KC ||
        atomic_load(&current_backend) != DPT_GEMM_PORTABLE)
        return 0;
    int ki = dpt__gemm_kernel_current();
    return ki != DPT__GEMM_KERNEL_UNPACKED && dpt__gemm_kernel(ki)->small != NULL;
}

size_t dpt__gemm_small_ld(size_t n)
{
    return (n + 15) / 16 * 16;
}

void dpt__gemm_small(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *wt,
                     size_t ldw, const float *bias, float *c, size_t ldc)
{
    dpt__gemm_kernel(dpt__gemm_kernel_current())->small(m, n, k, a, lda, wt, ldw, bias, c, ldc);
}

/* ---- a B operand packed once ---------------------------------------------- */

int dpt__gemm_bpack(dpt__gemm_bpack_t *p, int transb, size_t k, size_t n, const float *b,
                    size_t ldb)
{
    assert(transb == 0 || transb == 1);
    p->transb = transb;
    p->k = k;
    p->n = n;
    p->b = b;
    p->ldb = ldb;
    p->kernel = DPT__GEMM_KERNEL_UNPACKED;
    int ki = dpt__gemm_kernel_current();
    if (dpt_gemm_get_backend() != DPT_GEMM_PORTABLE || ki == DPT__GEMM_KERNEL_UNPACKED || k == 0 ||
        n == 0)
        return DPT_OK;
    const dpt__gemm_kernel_t *kr = dpt__gemm_kernel(ki);
    size_t nr = kr->nr;
    /* gemm_portable may transpose a product narrower than NR; those keep
     * the plain path. */
    if (n < nr)
        return DPT_OK;
    size_t pn = padded(n, nr), need;
    if (pn < n || pn > SIZE_MAX / sizeof(float) / k)
        return DPT_ENOMEM;
    need = pn * k;
    if (need > p->cap) {
        free(p->data);
        p->data = NULL;
        p->cap = 0;
        void *q = NULL;
        if (posix_memalign(&q, 64, need * sizeof(float)) != 0)
            return DPT_ENOMEM;
        p->data = q;
        p->cap = need;
    }
    size_t rsb = transb ? 1 : ldb, csb = transb ? ldb : 1, kstep = k_step(k);
    for (size_t jc = 0; jc < n; jc += DPT__GEMM_NC) {
        size_t nc = dpt__gemm_min(DPT__GEMM_NC, n - jc);
        for (size_t pc = 0; pc < k; pc += kstep) {
            size_t kc = dpt__gemm_min(kstep, k - pc);
            kr->pack_b(nr, nc, kc, b + pc * rsb + jc * csb, rsb, csb,
                       p->data + bpack_offset(k, jc, pc, nc, nr));
        }
    }
    p->kernel = ki;
    return DPT_OK;
}

void dpt__gemm_bpacked(int transa, size_t m, float alpha, const float *a, size_t lda,
                       const dpt__gemm_bpack_t *p, float beta, float *c, size_t ldc)
{
    float *ws = NULL;
    if (p->kernel != DPT__GEMM_KERNEL_UNPACKED && m > 0 && alpha != 0.0f &&
        dpt_gemm_get_backend() == DPT_GEMM_PORTABLE && dpt__gemm_kernel_current() == p->kernel)
        ws = workspace_get();
    if (ws == NULL) {
        dpt_gemm(transa, p->transb, m, p->n, p->k, alpha, a, lda, p->b, p->ldb, beta, c, ldc);
        return;
    }
    assert(transa == 0 || transa == 1);
    assert(lda >= (transa ? m : p->k) && ldc >= p->n);
    dpt__gemm_args_t g = {
        .m = m,
        .n = p->n,
        .k = p->k,
        .alpha = alpha,
        .beta = beta,
        .a = a,
        .rsa = transa ? 1 : lda,
        .csa = transa ? lda : 1,
        .b = p->b,
        .rsb = p->transb ? 1 : p->ldb,
        .csb = p->transb ? p->ldb : 1,
        .c = c,
        .rsc = ldc,
        .csc = 1,
    };
    gemm_packed(dpt__gemm_kernel(p->kernel), &g, ws, p->data);
}

void dpt__gemm_bpack_free(dpt__gemm_bpack_t *p)
{
    free(p->data);
    memset(p, 0, sizeof *p);
}
