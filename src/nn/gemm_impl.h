/*
 * Internal: the interface between the portable GEMM's drivers (gemm.c) and
 * its packers and micro-kernels (gemm_kernels.c).
 *
 * A kernel is a descriptor: a micro-kernel for an MR x NR tile of C and the
 * two packers that lay operand blocks out the way it reads them. The kernels
 * file holds a table of them, one per instruction set, and picks the widest
 * one the CPU runs once per process; the drivers ask for that pick on every
 * call and run its functions through the descriptor.
 */
#ifndef DPT_NN_GEMM_IMPL_H
#define DPT_NN_GEMM_IMPL_H

#include <stddef.h>

/* A micro-kernel: acc = sum over p < k of a[i*rsa + p*csa] * b[p*NR + j] for
 * the full MR x NR tile, then for i < m, j < n:
 *     c[i*rsc + j*csc] = alpha * acc[i][j] + beta * c[...]
 * with c not read when beta == 0. A is either a packed panel (rsa = 1,
 * csa = MR) or MR rows read in place (csa = 1); `b` is a packed panel,
 * aligned to 64 bytes. */
typedef void (*dpt__ukernel_fn)(size_t k, const float *restrict a, size_t rsa, size_t csa,
                                const float *restrict b, float *restrict c, size_t rsc, size_t csc,
                                float alpha, float beta, size_t m, size_t n);

/* A packer copies one operand block into micro-panels:
 *   pack_a: op(A)[0:len, 0:kc] (element (i, p) at x[i*rs + p*cs]) into
 *           `width`-row panels; panel q holds, for each p, the values of
 *           rows q*width.. side by side, zeros past row len.
 *   pack_b: op(B)[0:kc, 0:len] (element (p, j) at x[p*rs + j*cs]) into
 *           `width`-column panels, zeros past column len.
 * Both are transposes or strided copies; each ISA has its own copy of the
 * common layouts, and plain loops handle the rest. */
/* An edge kernel: the same sums for the last m <= mr rows of an M block
 * (mr of its dpt__gemm_edge_t), over `panels` packed B panels at once (panel
 * q at b + q*bs), n columns in all (n > (panels - 1) * NR: every panel it
 * reads exists). */
typedef void (*dpt__edge_fn)(size_t k, const float *restrict a, size_t rsa, size_t csa,
                             const float *restrict b, size_t bs, float *restrict c, size_t rsc,
                             size_t csc, float alpha, float beta, size_t m, size_t n);

typedef struct dpt__gemm_edge {
    dpt__edge_fn fn; /* NULL: none */
    size_t mr, panels;
} dpt__gemm_edge_t;

typedef void (*dpt__pack_fn)(size_t width, size_t len, size_t kc, const float *x, size_t rs,
                             size_t cs, float *restrict dst);

/* A small-M kernel (batch-of-a-few inference): for i < m, j < n,
 *     c[i*ldc + j] = acc(i, j) + bias[j]   (bias NULL: acc(i, j))
 *     acc(i, j) = sum over p < k of a[i*lda + p] * wt[p*ldw + j]
 * with every element summed in the kernel's own way: the micro-kernel's
 * chain over increasing p (fused multiply-adds where it uses them, from
 * zero), and the bias added like beta = 1 adds C. wt is B already
 * transposed (k x n), ldw a multiple of 16 >= n; the kernel may read the
 * padding columns (their results are discarded). k <= DPT__GEMM_KC. */
typedef void (*dpt__small_fn)(size_t m, size_t n, size_t k, const float *a, size_t lda,
                              const float *wt, size_t ldw, const float *bias, float *c, size_t ldc);

/* A direct kernel: C = alpha * op(A) op(B) + beta * C for beta 0 or 1 (C not
 * read when 0), op(A) element (i, p) at a[i*rsa + p*csa], op(B) with
 * contiguous rows (element (p, j) at b[p*rsb + j]), k <= DPT__GEMM_KC,
 * without packing. Every element gets the packed path's bits: the
 * micro-kernel's chain over increasing p from zero, times alpha, plus C. The
 * driver calls it for products with few rows or a short K (gemm.c). */
typedef void (*dpt__direct_fn)(size_t m, size_t n, size_t k, const float *a, size_t rsa, size_t csa,
                               const float *b, size_t rsb, float *c, size_t rsc, size_t csc,
                               float alpha, float beta);

/* One portable kernel variant. The drivers' blocking (DPT__GEMM_MC and
 * DPT__GEMM_NC in gemm.c) is a multiple of every kernel's mr and nr. */
typedef struct dpt__gemm_kernel {
    const char *name;     /* accepted by dpt__gemm_set_kernel() */
    const char *describe; /* returned by dpt_gemm_describe() */
    size_t mr, nr;        /* micro-tile */
    dpt__ukernel_fn fn;
    dpt__pack_fn pack_a, pack_b;
    int (*supported)(void);
    /* Edge kernels by increasing mr: the last, partial row panel of an M
     * block goes to the first that has enough rows; with none, it runs the
     * full tile. */
    dpt__gemm_edge_t edges[2];
    dpt__small_fn small;
    dpt__direct_fn direct; /* NULL: every product is packed */
} dpt__gemm_kernel_t;

/* The kernel index meaning the unpacked loop without workspace (tests select
 * it to exercise the out-of-memory path); it names no table entry. */
#define DPT__GEMM_KERNEL_UNPACKED (-1)

/* The index of the kernel in use: the dispatcher's pick (made on the first
 * call, once per process) unless dpt__gemm_set_kernel() changed it since;
 * DPT__GEMM_KERNEL_UNPACKED for the unpacked loop. Thread-safe. */
int dpt__gemm_kernel_current(void);

/* The descriptor of kernel `index`, an index returned by
 * dpt__gemm_kernel_current() other than DPT__GEMM_KERNEL_UNPACKED. Static
 * storage, never freed. */
const dpt__gemm_kernel_t *dpt__gemm_kernel(int index);

/* Test hook, deliberately not in the public header (tests/test_gemm.c
 * declares it): selects the portable kernel by name ("c", "avx2", "avx512f",
 * or "unpacked" for the no-workspace loop), or the one the dispatcher would
 * pick for NULL. Returns 0, DPT_ENOTSUP when the CPU lacks the instructions
 * or this build does not have the kernel, DPT_EINVAL for other names. */
int dpt__gemm_set_kernel(const char *name);

/* Test hook (tests/test_gemm.c declares it): on = 0 sends every product
 * through the packed path, 1 (the default) lets the driver use the direct
 * kernel where it applies. Process-wide. */
void dpt__gemm_set_direct(int on);

/* ---- a B operand packed once, for many products ------------------------------
 *
 * A recurrent layer multiplies by the same weights at every step of a
 * sequence; packing them once per pass instead of once per product saves a
 * copy of the whole matrix per step. dpt__gemm_bpack() records op(B) (k x n,
 * as dpt_gemm's transb/b/ldb give it) and, when the portable kernel will run
 * the product, lays it out in that kernel's panels, block by block exactly as
 * the driver would. dpt__gemm_bpacked() then computes
 *     C = alpha * op(A) * op(B) + beta * C        (op(A): m x k)
 * bitwise equal to dpt_gemm() with the same arguments. Whenever the packed
 * copy cannot serve (another backend or kernel picked since, a product the
 * driver would transpose, no memory for the copy) it calls dpt_gemm(), so a
 * failed pack only costs speed. The packed copy is only valid while B's
 * values do not change. */
typedef struct dpt__gemm_bpack {
    int transb;
    size_t k, n, ldb;
    const float *b;
    int kernel;  /* the kernel the panels are for; DPT__GEMM_KERNEL_UNPACKED: none */
    float *data; /* the panels (64-byte aligned), or NULL */
    size_t cap;  /* floats allocated at data */
} dpt__gemm_bpack_t;

/* Records op(B) in *p and packs it when that can serve. *p starts zeroed and
 * keeps its buffer from one call to the next. Returns 0, or DPT_ENOMEM when
 * the buffer could not grow (the products then run through dpt_gemm). */
int dpt__gemm_bpack(dpt__gemm_bpack_t *p, int transb, size_t k, size_t n, const float *b,
                    size_t ldb);
/* C = alpha * op(A) * op(B) + beta * C with the op(B) recorded in *p. */
void dpt__gemm_bpacked(int transa, size_t m, float alpha, const float *a, size_t lda,
                       const dpt__gemm_bpack_t *p, float beta, float *c, size_t ldc);
/* Frees the packed copy; *p is zeroed. */
void dpt__gemm_bpack_free(dpt__gemm_bpack_t *p);

/* ---- products with a few rows --------------------------------------------------
 *
 * Acting steps a few envs at a time: products of m <= DPT__GEMM_SMALL_M rows
 * by a weight matrix that stays the same for many calls. With the weights
 * transposed once (k x n, row stride ldw: dpt__gemm_small_ld(n)),
 * dpt__gemm_small() computes
 *     C = A W^T + bias   (bias NULL: C = A W^T)        A: m x k, W: n x k
 * bitwise equal to dpt_gemm(0, 1, m, n, k, 1, A, lda, W, k, beta, C, ldc)
 * with C holding the bias rows and beta = 1 (or beta = 0 without a bias),
 * without packing or blocking. dpt__gemm_small_ok() says whether it can
 * serve (the portable backend with a kernel that has it, m and k in range);
 * otherwise the caller uses dpt_gemm(). */
#define DPT__GEMM_SMALL_M 8

int dpt__gemm_small_ok(size_t m, size_t k);
size_t dpt__gemm_small_ld(size_t n);
void dpt__gemm_small(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *wt,
                     size_t ldw, const float *bias, float *c, size_t ldc);

/* The smaller of a and b. */
static inline size_t dpt__gemm_min(size_t a, size_t b)
{
    return a < b ? a : b;
}

#endif
