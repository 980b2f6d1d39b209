/*
 * The portable GEMM's packers and micro-kernels, and the choice among them.
 *
 * Three kernels, each a micro-kernel with the packers that feed it: plain C
 * (4x8 tiles, any CPU), AVX2+FMA (6x16) and AVX-512F (8x32). The vector ones
 * are compiled with target attributes, so the library needs no -mavx2, and
 * are only run after a CPU check; on other architectures they are compiled
 * out. The widest kernel the CPU supports is picked once per process and
 * stays in use (tests can override it), which keeps results deterministic.
 * The drivers that block the problem and call these live in gemm.c; the
 * interface between the two is gemm_impl.h.
 */
#include "dpt/status.h"
#include "gemm_impl.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define DPT__GEMM_X86 1
#include <immintrin.h>
#else
#define DPT__GEMM_X86 0
#endif

/* Writes an m x n corner of a computed tile `t` (row stride ldt) into C. Used
 * for partial tiles and for a C with non-unit column stride (the swapped
 * problem). */
static void store_tile(const float *t, size_t ldt, float *c, size_t rsc, size_t csc, float alpha,
                       float beta, size_t m, size_t n)
{
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            float *cp = c + i * rsc + j * csc;
            float v = alpha * t[i * ldt + j];
            *cp = beta == 0.0f ? v : v + beta * *cp;
        }
    }
}

/* ---- packing ------------------------------------------------------------- */

/* The plain loops below handle any layout; the AVX packers further down
 * have faster copies of the common ones. */
static void pack_a_generic(size_t mr, size_t mc, size_t kc, const float *a, size_t rsa, size_t csa,
                           float *restrict dst)
{
    for (size_t i0 = 0; i0 < mc; i0 += mr) {
        size_t rows = dpt__gemm_min(mr, mc - i0);
        const float *src = a + i0 * rsa;
        /* The loop order follows whichever stride is 1. */
        if (csa == 1) {
            for (size_t i = 0; i < rows; i++)
                for (size_t p = 0; p < kc; p++)
                    dst[p * mr + i] = src[i * rsa + p];
        } else {
            for (size_t p = 0; p < kc; p++)
                for (size_t i = 0; i < rows; i++)
                    dst[p * mr + i] = src[i * rsa + p * csa];
        }
        for (size_t p = 0; rows < mr && p < kc; p++)
            for (size_t i = rows; i < mr; i++)
                dst[p * mr + i] = 0.0f;
        dst += mr * kc;
    }
}

static void pack_b_generic(size_t nr, size_t nc, size_t kc, const float *b, size_t rsb, size_t csb,
                           float *restrict dst)
{
    for (size_t j0 = 0; j0 < nc; j0 += nr) {
        size_t cols = dpt__gemm_min(nr, nc - j0);
        const float *src = b + j0 * csb;
        if (csb == 1) {
            for (size_t p = 0; p < kc; p++)
                for (size_t j = 0; j < cols; j++)
                    dst[p * nr + j] = src[p * rsb + j];
        } else {
            for (size_t j = 0; j < cols; j++)
                for (size_t p = 0; p < kc; p++)
                    dst[p * nr + j] = src[j * csb + p * rsb];
        }
        for (size_t p = 0; cols < nr && p < kc; p++)
            for (size_t j = cols; j < nr; j++)
                dst[p * nr + j] = 0.0f;
        dst += nr * kc;
    }
}

/* ---- the plain C micro-kernel (any CPU) ---------------------------------- */

#define DPT__C_MR 4
#define DPT__C_NR 8

static void ukernel_c(size_t k, const float *restrict a, size_t rsa, size_t csa,
                      const float *restrict b, float *restrict c, size_t rsc, size_t csc,
                      float alpha, float beta, size_t m, size_t n)
{
    float acc[DPT__C_MR][DPT__C_NR];
    memset(acc, 0, sizeof acc);
    for (size_t p = 0; p < k; p++) {
        for (size_t i = 0; i < DPT__C_MR; i++) {
            float ai = a[i * rsa + p * csa];
            for (size_t j = 0; j < DPT__C_NR; j++)
                acc[i][j] += ai * b[p * DPT__C_NR + j];
        }
    }
    store_tile(&acc[0][0], DPT__C_NR, c, rsc, csc, alpha, beta, m, n);
}

#if DPT__GEMM_X86

/* The vector kernels keep the accumulators in named variables: an array of
 * vectors indexed in the store loops would be kept in memory by GCC, with a
 * store per FMA. A tile of full-width rows with unit column stride is added
 * to C straight from the registers, row by row for the m rows that exist: in
 * the dW product k is the batch size, as small as 64, so the 24 extra moves
 * of a detour through memory would not be negligible next to the k loop.
 * Other tiles go through an aligned buffer and store_tile(). */

/* Prefetches the rows of a C tile with contiguous rows before the k loop, so
 * that the read-modify-write at its end does not wait for memory. */
static inline void prefetch_c(const float *c, size_t rsc, size_t csc, size_t m, size_t n)
{
    if (csc != 1)
        return;
    for (size_t i = 0; i < m; i++) {
        __builtin_prefetch(c + i * rsc, 1, 3);
        __builtin_prefetch(c + i * rsc + n - 1, 1, 3);
    }
}

/* ---- AVX packers (used by the AVX2 and the AVX-512 kernels) --------------- */

/* Transposes the 8x8 block r[0..7] (r[q] holds row q) in registers. */
__attribute__((target("avx2,fma"))) static inline void transpose8(__m256 r[8])
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Lane mask with the first `count` (<= 8) of eight lanes set. */
__attribute__((target("avx2,fma"))) static inline __m256i lanes_below(size_t count)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Zeros `count` floats at dst. */
__attribute__((target("avx2,fma"))) static inline void zero_floats(float *dst, size_t count)
{
    size_t i = 0;
    for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_setzero_ps());
    for (; i < count; i++)
        dst[i] = 0.0f;
}

/* pack_b for NR a multiple of 8 (16 or 32). Panels of a row-major B are
 * vector copies (masked loads fill the padding of a partial panel with
 * zeros); full panels of a transposed B (the forward pass X W^T) go through
 * 8x8 register transposes (about 40 instructions per 64 floats instead of
 * 128 scalar loads and stores). The copies are explicit vector code: GCC
 * turns a short contiguous copy loop into a call to memcpy per row, and perf
 * showed those calls taking a quarter of the dX product at batch 64. */
__attribute__((target("avx2,fma"))) static void pack_b_avx(size_t nr, size_t nc, size_t kc,
                                                           const float *b, size_t rsb, size_t csb,
                                                           float *restrict dst)
{
    for (size_t j0 = 0; j0 < nc; j0 += nr) {
        size_t cols = dpt__gemm_min(nr, nc - j0);
        const float *src = b + j0 * csb;
        if (cols == nr && csb == 1 && nr == 16) {
            for (size_t p = 0; p < kc; p++) {
                const float *s = src + p * rsb;
                __m256 v0 = _mm256_loadu_ps(s), v1 = _mm256_loadu_ps(s + 8);
                _mm256_store_ps(dst + p * 16, v0);
                _mm256_store_ps(dst + p * 16 + 8, v1);
            }
        } else if (cols == nr && csb == 1 && nr == 32) {
            for (size_t p = 0; p < kc; p++) {
                const float *s = src + p * rsb;
                __m256 v0 = _mm256_loadu_ps(s), v1 = _mm256_loadu_ps(s + 8);
                __m256 v2 = _mm256_loadu_ps(s + 16), v3 = _mm256_loadu_ps(s + 24);
                _mm256_store_ps(dst + p * 32, v0);
                _mm256_store_ps(dst + p * 32 + 8, v1);
                _mm256_store_ps(dst + p * 32 + 16, v2);
                _mm256_store_ps(dst + p * 32 + 24, v3);
            }
        } else if (csb == 1) {
            for (size_t j = 0; j < nr; j += 8) {
                __m256i mask = lanes_below(cols > j ? cols - j : 0);
                for (size_t p = 0; p < kc; p++)
                    _mm256_store_ps(dst + p * nr + j, _mm256_maskload_ps(src + p * rsb + j, mask));
            }
        } else if (cols == nr && rsb == 1) {
            for (size_t j = 0; j < nr; j += 8) {
                const float *s = src + j * csb;
                size_t p = 0;
                for (; p + 8 <= kc; p += 8) {
                    __m256 r[8];
                    for (int q = 0; q < 8; q++)
                        r[q] = _mm256_loadu_ps(s + (size_t)q * csb + p);
                    transpose8(r);
                    for (int q = 0; q < 8; q++)
                        _mm256_store_ps(dst + (p + (size_t)q) * nr + j, r[q]);
                }
                for (; p < kc; p++)
                    for (size_t q = 0; q < 8; q++)
                        dst[p * nr + j + q] = s[q * csb + p];
            }
        } else {
            zero_floats(dst, nr * kc);
            for (size_t j = 0; j < cols; j++)
                for (size_t p = 0; p < kc; p++)
                    dst[p * nr + j] = src[j * csb + p * rsb];
        }
        dst += nr * kc;
    }
}

/* pack_a for MR <= 8. For A stored transposed (rsa == 1, the dW = dY^T X
 * product) each p is MR consecutive floats, moved with masked loads (which
 * also zero the padding rows of a partial panel and read nothing past the
 * matrix). Row-major A is read in place by the kernels and packed here only
 * for its last, partial panel. */
__attribute__((target("avx2,fma"))) static void pack_a_avx(size_t mr, size_t mc, size_t kc,
                                                           const float *a, size_t rsa, size_t csa,
                                                           float *restrict dst)
{
    const __m256i store_mask = lanes_below(mr);
    for (size_t i0 = 0; i0 < mc; i0 += mr) {
        size_t rows = dpt__gemm_min(mr, mc - i0);
        const float *src = a + i0 * rsa;
        if (rsa == 1 && kc > 0) {
            __m256i mask = lanes_below(rows);
            /* Masked stores are slow on AMD: all but the last p store eight
             * floats, the extra ones being overwritten by the next p. */
            for (size_t p = 0; p + 1 < kc; p++)
                _mm256_storeu_ps(dst + p * mr, _mm256_maskload_ps(src + p * csa, mask));
            _mm256_maskstore_ps(dst + (kc - 1) * mr, store_mask,
                                _mm256_maskload_ps(src + (kc - 1) * csa, mask));
        } else {
            zero_floats(dst, mr * kc);
            for (size_t i = 0; i < rows; i++)
                for (size_t p = 0; p < kc; p++)
                    dst[p * mr + i] = src[i * rsa + p * csa];
        }
        dst += mr * kc;
    }
}

/* ---- AVX2 + FMA: 6 x 16 tile --------------------------------------------- */

/* 12 accumulators, two B vectors and one broadcast A value use 15 of the 16
 * ymm registers; 12 independent FMA chains hide the FMA latency on two
 * pipes. */
#define DPT__AVX2_MR 6
#define DPT__AVX2_NR 16

#define DPT__AVX2_ROW(ap, r0, r1)             \
    do {                                      \
        __m256 ai_ = _mm256_broadcast_ss(ap); \
        r0 = _mm256_fmadd_ps(ai_, b0, r0);    \
        r1 = _mm256_fmadd_ps(ai_, b1, r1);    \
    } while (0)

/* c[0:16] = alpha * (r0, r1) + beta * c[0:16], c not read when beta == 0. */
#define DPT__AVX2_UPDATE(cp, r0, r1)                                     \
    do {                                                                 \
        __m256 x0_ = _mm256_mul_ps(va, r0), x1_ = _mm256_mul_ps(va, r1); \
        if (beta != 0.0f) {                                              \
            x0_ = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cp), x0_);         \
            x1_ = _mm256_fmadd_ps(vb, _mm256_loadu_ps((cp) + 8), x1_);   \
        }                                                                \
        _mm256_storeu_ps(cp, x0_);                                       \
        _mm256_storeu_ps((cp) + 8, x1_);                                 \
    } while (0)

/* Row i of a tile (NR columns, the two vectors r0, r1) into the buffer t. */
#define DPT__AVX2_SPILL(t, i, r0, r1)                    \
    do {                                                 \
        _mm256_store_ps((t) + (i)*DPT__AVX2_NR, r0);     \
        _mm256_store_ps((t) + (i)*DPT__AVX2_NR + 8, r1); \
    } while (0)

__attribute__((target("avx2,fma"))) static void
ukernel_avx2(size_t k, const float *restrict a, size_t rsa, size_t csa, const float *restrict b,
             float *restrict c, size_t rsc, size_t csc, float alpha, float beta, size_t m, size_t n)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    /* Two row pointers and the offsets 0, rsa, 2*rsa from each fit x86
     * addressing modes, so the loop needs no per-row pointer updates. */
    const float *a0 = a, *a3 = a + 3 * rsa;
    size_t rsa2 = 2 * rsa;
    prefetch_c(c, rsc, csc, m, n);
    for (size_t p = 0; p < k; p++) {
        __m256 b0 = _mm256_load_ps(b);
        __m256 b1 = _mm256_load_ps(b + 8);
        DPT__AVX2_ROW(a0, c00, c01);
        DPT__AVX2_ROW(a0 + rsa, c10, c11);
        DPT__AVX2_ROW(a0 + rsa2, c20, c21);
        DPT__AVX2_ROW(a3, c30, c31);
        DPT__AVX2_ROW(a3 + rsa, c40, c41);
        DPT__AVX2_ROW(a3 + rsa2, c50, c51);
        a0 += csa;
        a3 += csa;
        b += DPT__AVX2_NR;
    }
    if (n == DPT__AVX2_NR && csc == 1) {
        __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
        DPT__AVX2_UPDATE(c, c00, c01);
        if (m > 1)
            DPT__AVX2_UPDATE(c + rsc, c10, c11);
        if (m > 2)
            DPT__AVX2_UPDATE(c + 2 * rsc, c20, c21);
        if (m > 3)
            DPT__AVX2_UPDATE(c + 3 * rsc, c30, c31);
        if (m > 4)
            DPT__AVX2_UPDATE(c + 4 * rsc, c40, c41);
        if (m > 5)
            DPT__AVX2_UPDATE(c + 5 * rsc, c50, c51);
        return;
    }
    _Alignas(32) float t[DPT__AVX2_MR * DPT__AVX2_NR];
    DPT__AVX2_SPILL(t, 0, c00, c01);
    DPT__AVX2_SPILL(t, 1, c10, c11);
    DPT__AVX2_SPILL(t, 2, c20, c21);
    DPT__AVX2_SPILL(t, 3, c30, c31);
    DPT__AVX2_SPILL(t, 4, c40, c41);
    DPT__AVX2_SPILL(t, 5, c50, c51);
    store_tile(t, DPT__AVX2_NR, c, rsc, csc, alpha, beta, m, n);
}

/* The edge kernel for the last one or two rows of an M block (M = 128 leaves
 * two rows after 21 full tiles, M = 512 too): 2 rows x 48 columns, the three
 * packed B panels b, b + bs, b + 2*bs side by side. The 6 x 16 kernel would
 * run its whole tile for those rows, 3 times the work; this one has 12
 * accumulators and 6 B loads per 2 broadcasts, as busy as the full tile.
 * Every element is the same chain of FMAs over p as in ukernel_avx2, so the
 * results are bitwise the same. For m == 1 the second row re-reads the
 * first (nothing past the matrix is read); b must hold three full panels. */
#define DPT__AVX2_EDGE_MR 2
#define DPT__AVX2_EDGE_PANELS 3

#define DPT__AVX2_EDGE_COL(bp, r0, r1)    \
    do {                                  \
        __m256 v_ = _mm256_load_ps(bp);   \
        r0 = _mm256_fmadd_ps(x0, v_, r0); \
        r1 = _mm256_fmadd_ps(x1, v_, r1); \
    } while (0)

/* c[0:48] = alpha * (r0..r5) + beta * c[0:48], c not read when beta == 0. */
#define DPT__AVX2_EDGE_UPDATE(cp, r0, r1, r2, r3, r4, r5) \
    do {                                                  \
        DPT__AVX2_UPDATE(cp, r0, r1);                     \
        DPT__AVX2_UPDATE((cp) + 16, r2, r3);              \
        DPT__AVX2_UPDATE((cp) + 32, r4, r5);              \
    } while (0)

__attribute__((target("avx2,fma"))) static void
ukernel_avx2_edge(size_t k, const float *restrict a, size_t rsa, size_t csa,
                  const float *restrict b, size_t bs, float *restrict c, size_t rsc, size_t csc,
                  float alpha, float beta, size_t m, size_t n)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c04 = c00, c05 = c00;
    __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00, c14 = c00, c15 = c00;
    const float *a0 = a, *a1 = m > 1 ? a + rsa : a;
    const float *b1 = b + bs, *b2 = b + 2 * bs;
    prefetch_c(c, rsc, csc, m, n);
    for (size_t p = 0; p < k; p++) {
        __m256 x0 = _mm256_broadcast_ss(a0), x1 = _mm256_broadcast_ss(a1);
        DPT__AVX2_EDGE_COL(b, c00, c10);
        DPT__AVX2_EDGE_COL(b + 8, c01, c11);
        DPT__AVX2_EDGE_COL(b1, c02, c12);
        DPT__AVX2_EDGE_COL(b1 + 8, c03, c13);
        DPT__AVX2_EDGE_COL(b2, c04, c14);
        DPT__AVX2_EDGE_COL(b2 + 8, c05, c15);
        a0 += csa;
        a1 += csa;
        b += DPT__AVX2_NR;
        b1 += DPT__AVX2_NR;
        b2 += DPT__AVX2_NR;
    }
    enum { W = DPT__AVX2_EDGE_PANELS * DPT__AVX2_NR };
    if (n == W && csc == 1) {
        __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
        DPT__AVX2_EDGE_UPDATE(c, c00, c01, c02, c03, c04, c05);
        if (m > 1)
            DPT__AVX2_EDGE_UPDATE(c + rsc, c10, c11, c12, c13, c14, c15);
        return;
    }
    _Alignas(32) float t[DPT__AVX2_EDGE_MR * W];
    DPT__AVX2_SPILL(t, 0, c00, c01);
    DPT__AVX2_SPILL(t, 1, c02, c03);
    DPT__AVX2_SPILL(t, 2, c04, c05);
    DPT__AVX2_SPILL(t, 3, c10, c11);
    DPT__AVX2_SPILL(t, 4, c12, c13);
    DPT__AVX2_SPILL(t, 5, c14, c15);
    store_tile(t, W, c, rsc, csc, alpha, beta, m, n);
}

/* The edge kernel for three or four rows (M = 64 and 256 leave four): a 4 x 16
 * tile, 8 accumulators, two B loads and four broadcasts per p, 8 FMAs where
 * the full tile would issue 12. Rows past m re-read row 0. */
__attribute__((target("avx2,fma"))) static void
ukernel_avx2_edge4(size_t k, const float *restrict a, size_t rsa, size_t csa,
                   const float *restrict b, size_t bs, float *restrict c, size_t rsc, size_t csc,
                   float alpha, float beta, size_t m, size_t n)
{
    (void)bs;
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00;
    __m256 c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    const float *a0 = a, *a1 = m > 1 ? a + rsa : a;
    const float *a2 = m > 2 ? a + 2 * rsa : a, *a3 = m > 3 ? a + 3 * rsa : a;
    prefetch_c(c, rsc, csc, m, n);
    for (size_t p = 0; p < k; p++) {
        __m256 b0 = _mm256_load_ps(b);
        __m256 b1 = _mm256_load_ps(b + 8);
        DPT__AVX2_ROW(a0, c00, c01);
        DPT__AVX2_ROW(a1, c10, c11);
        DPT__AVX2_ROW(a2, c20, c21);
        DPT__AVX2_ROW(a3, c30, c31);
        a0 += csa;
        a1 += csa;
        a2 += csa;
        a3 += csa;
        b += DPT__AVX2_NR;
    }
    if (n == DPT__AVX2_NR && csc == 1) {
        __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
        DPT__AVX2_UPDATE(c, c00, c01);
        if (m > 1)
            DPT__AVX2_UPDATE(c + rsc, c10, c11);
        if (m > 2)
            DPT__AVX2_UPDATE(c + 2 * rsc, c20, c21);
        if (m > 3)
            DPT__AVX2_UPDATE(c + 3 * rsc, c30, c31);
        return;
    }
    _Alignas(32) float t[4 * DPT__AVX2_NR];
    DPT__AVX2_SPILL(t, 0, c00, c01);
    DPT__AVX2_SPILL(t, 1, c10, c11);
    DPT__AVX2_SPILL(t, 2, c20, c21);
    DPT__AVX2_SPILL(t, 3, c30, c31);
    store_tile(t, DPT__AVX2_NR, c, rsc, csc, alpha, beta, m, n);
}

/* ---- AVX-512F: 8 x 32 tile ----------------------------------------------- */

/* The same scheme on zmm registers: 16 accumulators + 2 B vectors + 1
 * broadcast out of 32. */
#define DPT__AVX512_MR 8
#define DPT__AVX512_NR 32

#define DPT__AVX512_ROW(ap, r0, r1)         \
    do {                                    \
        __m512 ai_ = _mm512_set1_ps(*(ap)); \
        r0 = _mm512_fmadd_ps(ai_, b0, r0);  \
        r1 = _mm512_fmadd_ps(ai_, b1, r1);  \
    } while (0)

#define DPT__AVX512_UPDATE(cp, r0, r1)                                   \
    do {                                                                 \
        __m512 x0_ = _mm512_mul_ps(va, r0), x1_ = _mm512_mul_ps(va, r1); \
        if (beta != 0.0f) {                                              \
            x0_ = _mm512_fmadd_ps(vb, _mm512_loadu_ps(cp), x0_);         \
            x1_ = _mm512_fmadd_ps(vb, _mm512_loadu_ps((cp) + 16), x1_);  \
        }                                                                \
        _mm512_storeu_ps(cp, x0_);                                       \
        _mm512_storeu_ps((cp) + 16, x1_);                                \
    } while (0)

__attribute__((target("avx512f"))) static void
ukernel_avx512(size_t k, const float *restrict a, size_t rsa, size_t csa, const float *restrict b,
               float *restrict c, size_t rsc, size_t csc, float alpha, float beta, size_t m,
               size_t n)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    const float *a0 = a, *a4 = a + 4 * rsa;
    size_t rsa2 = 2 * rsa, rsa3 = 3 * rsa;
    prefetch_c(c, rsc, csc, m, n);
    for (size_t p = 0; p < k; p++) {
        __m512 b0 = _mm512_load_ps(b);
        __m512 b1 = _mm512_load_ps(b + 16);
        DPT__AVX512_ROW(a0, c00, c01);
        DPT__AVX512_ROW(a0 + rsa, c10, c11);
        DPT__AVX512_ROW(a0 + rsa2, c20, c21);
        DPT__AVX512_ROW(a0 + rsa3, c30, c31);
        DPT__AVX512_ROW(a4, c40, c41);
        DPT__AVX512_ROW(a4 + rsa, c50, c51);
        DPT__AVX512_ROW(a4 + rsa2, c60, c61);
        DPT__AVX512_ROW(a4 + rsa3, c70, c71);
        a0 += csa;
        a4 += csa;
        b += DPT__AVX512_NR;
    }
    if (n == DPT__AVX512_NR && csc == 1) {
        __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
        DPT__AVX512_UPDATE(c, c00, c01);
        if (m > 1)
            DPT__AVX512_UPDATE(c + rsc, c10, c11);
        if (m > 2)
            DPT__AVX512_UPDATE(c + 2 * rsc, c20, c21);
        if (m > 3)
            DPT__AVX512_UPDATE(c + 3 * rsc, c30, c31);
        if (m > 4)
            DPT__AVX512_UPDATE(c + 4 * rsc, c40, c41);
        if (m > 5)
            DPT__AVX512_UPDATE(c + 5 * rsc, c50, c51);
        if (m > 6)
            DPT__AVX512_UPDATE(c + 6 * rsc, c60, c61);
        if (m > 7)
            DPT__AVX512_UPDATE(c + 7 * rsc, c70, c71);
        return;
    }
    _Alignas(64) float t[DPT__AVX512_MR * DPT__AVX512_NR];
    _mm512_store_ps(t + 0, c00);
    _mm512_store_ps(t + 16, c01);
    _mm512_store_ps(t + 32, c10);
    _mm512_store_ps(t + 48, c11);
    _mm512_store_ps(t + 64, c20);
    _mm512_store_ps(t + 80, c21);
    _mm512_store_ps(t + 96, c30);
    _mm512_store_ps(t + 112, c31);
    _mm512_store_ps(t + 128, c40);
    _mm512_store_ps(t + 144, c41);
    _mm512_store_ps(t + 160, c50);
    _mm512_store_ps(t + 176, c51);
    _mm512_store_ps(t + 192, c60);
    _mm512_store_ps(t + 208, c61);
    _mm512_store_ps(t + 224, c70);
    _mm512_store_ps(t + 240, c71);
    store_tile(t, DPT__AVX512_NR, c, rsc, csc, alpha, beta, m, n);
}

#endif /* DPT__GEMM_X86 */

/* ---- direct kernels (gemm_impl.h: dpt__direct_fn, dpt__small_fn) ------------- */

/* The plain C kernel's sums for products with a few rows: acc += a * b, a
 * multiply and an add. (The C kernel has no direct kernel: its packed path
 * serves every other product.) */
static void small_c(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *wt,
                    size_t ldw, const float *bias, float *c, size_t ldc)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (size_t p = 0; p < k; p++)
                acc += a[i * lda + p] * wt[p * ldw + j];
            c[i * ldc + j] = bias ? acc + bias[j] : acc;
        }
}

#if DPT__GEMM_X86
/*
 * The direct kernels compute C = alpha * op(A) op(B) + beta * C (beta 0 or
 * 1), or C = op(A) op(B) + bias, for B with contiguous rows, without packing:
 * four rows of A at a time (a partial group repeats its first row and
 * discards the copies) against two vectors of B columns, eight independent
 * chains of fused multiply-adds over p from zero; a group of one or two rows
 * takes four vectors of columns instead (eight chains again), so two rows
 * cost half of four. Every element is the micro-kernels' sum: one chain over
 * increasing p, then alpha * acc, then + C (or + bias) in one rounding, the
 * same bits as the packed path for k <= DPT__GEMM_KC.
 */
typedef struct direct_out {
    float *c;
    size_t rsc, csc;
    float alpha, beta;
    const float *bias; /* not NULL: c = alpha * acc + bias (alpha 1), beta unused */
} direct_out_t;

/* A row's `cols` results from the vectors of t (alpha * acc applied by the
 * caller), through memory: a C with strided columns. */
static void direct_store_scalar(const float *t, size_t cols, size_t j, const direct_out_t *o,
                                float *c)
{
    for (size_t q = 0; q < cols; q++) {
        float v = t[q], *cp = c + q * o->csc;
        *cp = o->bias ? v + o->bias[j + q] : (o->beta == 0.0f ? v : v + o->beta * *cp);
    }
}

/* The vectors come by value: an accumulator array indexed at run time
 * would live in memory through the k loop. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
direct_store_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3, size_t nv, size_t cols, size_t i,
                  size_t j, const direct_out_t *o)
{
    const __m256 acc[4] = {a0, a1, a2, a3};
    float *c = o->c + i * o->rsc + j * o->csc;
    __m256 va = _mm256_set1_ps(o->alpha), vb = _mm256_set1_ps(o->beta);
    if (o->csc != 1) {
        _Alignas(32) float t[32];
        for (size_t q = 0; q < nv; q++)
            _mm256_store_ps(t + 8 * q, _mm256_mul_ps(va, acc[q]));
        direct_store_scalar(t, cols, j, o, c);
        return;
    }
    for (size_t q = 0; q < nv && 8 * q < cols; q++) {
        __m256i mq = lanes_below(cols - 8 * q);
        __m256 v = _mm256_mul_ps(va, acc[q]);
        if (o->bias)
            v = _mm256_add_ps(v, _mm256_maskload_ps(o->bias + j + 8 * q, mq));
        else if (o->beta != 0.0f)
            v = _mm256_fmadd_ps(vb, _mm256_maskload_ps(c + 8 * q, mq), v);
        if (cols - 8 * q >= 8)
            _mm256_storeu_ps(c + 8 * q, v);
        else
            _mm256_maskstore_ps(c + 8 * q, mq, v);
    }
}

__attribute__((target("avx2,fma"))) static void direct_avx2_core(size_t m, size_t n, size_t k,
                                                                 const float *a, size_t rsa,
                                                                 size_t csa, const float *b,
                                                                 size_t rsb, const direct_out_t *o)
{
    for (size_t i = 0; i < m; i += 4) {
        size_t rows = dpt__gemm_min(4, m - i), j = 0;
        const float *ar[4];
        for (size_t r = 0; r < 4; r++)
            ar[r] = a + (i + (r < rows ? r : 0)) * rsa;
        for (; rows <= 2 && j < n && n - j > 24; j += 32) {
            size_t cols = dpt__gemm_min(32, n - j);
            __m256i m3 = lanes_below(cols - 24);
            __m256 acc[2][4];
            for (size_t r = 0; r < 2; r++)
                for (size_t q = 0; q < 4; q++)
                    acc[r][q] = _mm256_setzero_ps();
            const float *w = b + j;
            for (size_t p = 0; p < k; p++, w += rsb) {
                __m256 b0 = _mm256_loadu_ps(w), b1 = _mm256_loadu_ps(w + 8);
                __m256 b2 = _mm256_loadu_ps(w + 16), b3 = _mm256_maskload_ps(w + 24, m3);
                for (size_t r = 0; r < 2; r++) {
                    __m256 x = _mm256_broadcast_ss(ar[r] + p * csa);
                    acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
                    acc[r][2] = _mm256_fmadd_ps(x, b2, acc[r][2]);
                    acc[r][3] = _mm256_fmadd_ps(x, b3, acc[r][3]);
                }
            }
            direct_store_avx2(acc[0][0], acc[0][1], acc[0][2], acc[0][3], 4, cols, i, j, o);
            if (rows > 1)
                direct_store_avx2(acc[1][0], acc[1][1], acc[1][2], acc[1][3], 4, cols, i + 1, j, o);
        }
        for (; j < n; j += 16) {
            size_t cols = dpt__gemm_min(16, n - j);
            __m256i m0 = lanes_below(cols), m1 = lanes_below(cols > 8 ? cols - 8 : 0);
            __m256 acc[4][2];
            for (size_t r = 0; r < 4; r++)
                acc[r][0] = acc[r][1] = _mm256_setzero_ps();
            const float *w = b + j;
            for (size_t p = 0; p < k; p++, w += rsb) {
                __m256 b0 = _mm256_maskload_ps(w, m0), b1 = _mm256_maskload_ps(w + 8, m1);
                for (size_t r = 0; r < 4; r++) {
                    __m256 x = _mm256_broadcast_ss(ar[r] + p * csa);
                    acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
                }
            }
            __m256 z = _mm256_setzero_ps();
            direct_store_avx2(acc[0][0], acc[0][1], z, z, 2, cols, i, j, o);
            if (rows > 1)
                direct_store_avx2(acc[1][0], acc[1][1], z, z, 2, cols, i + 1, j, o);
            if (rows > 2)
                direct_store_avx2(acc[2][0], acc[2][1], z, z, 2, cols, i + 2, j, o);
            if (rows > 3)
                direct_store_avx2(acc[3][0], acc[3][1], z, z, 2, cols, i + 3, j, o);
        }
    }
}

/* Lanes [0, cols) of a vector of 16 (cols may be <= 0 or > 16). */
__attribute__((target("avx512f"))) static inline __mmask16 lanes16(ptrdiff_t cols)
{
    return (__mmask16)(cols >= 16 ? 0xffffu : cols > 0 ? (1u << cols) - 1u : 0u);
}

__attribute__((target("avx512f"), always_inline)) static inline void
direct_store_avx512(__m512 a0, __m512 a1, __m512 a2, __m512 a3, size_t nv, size_t cols, size_t i,
                    size_t j, const direct_out_t *o)
{
    const __m512 acc[4] = {a0, a1, a2, a3};
    float *c = o->c + i * o->rsc + j * o->csc;
    __m512 va = _mm512_set1_ps(o->alpha), vb = _mm512_set1_ps(o->beta);
    if (o->csc != 1) {
        _Alignas(64) float t[64];
        for (size_t q = 0; q < nv; q++)
            _mm512_store_ps(t + 16 * q, _mm512_mul_ps(va, acc[q]));
        direct_store_scalar(t, cols, j, o, c);
        return;
    }
    for (size_t q = 0; q < nv; q++) {
        __mmask16 mq = lanes16((ptrdiff_t)cols - (ptrdiff_t)(16 * q));
        __m512 v = _mm512_mul_ps(va, acc[q]);
        if (o->bias)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mq, o->bias + j + 16 * q));
        else if (o->beta != 0.0f)
            v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mq, c + 16 * q), v);
        _mm512_mask_storeu_ps(c + 16 * q, mq, v);
    }
}

__attribute__((target("avx512f"))) static void direct_avx512_core(size_t m, size_t n, size_t k,
                                                                  const float *a, size_t rsa,
                                                                  size_t csa, const float *b,
                                                                  size_t rsb, const direct_out_t *o)
{
    for (size_t i = 0; i < m; i += 4) {
        size_t rows = dpt__gemm_min(4, m - i), j = 0;
        const float *ar[4];
        for (size_t r = 0; r < 4; r++)
            ar[r] = a + (i + (r < rows ? r : 0)) * rsa;
        for (; rows <= 2 && j < n && n - j > 48; j += 64) {
            size_t cols = dpt__gemm_min(64, n - j);
            __mmask16 m3 = lanes16((ptrdiff_t)cols - 48);
            __m512 acc[2][4];
            for (size_t r = 0; r < 2; r++)
                for (size_t q = 0; q < 4; q++)
                    acc[r][q] = _mm512_setzero_ps();
            const float *w = b + j;
            for (size_t p = 0; p < k; p++, w += rsb) {
                __m512 b0 = _mm512_loadu_ps(w), b1 = _mm512_loadu_ps(w + 16);
                __m512 b2 = _mm512_loadu_ps(w + 32), b3 = _mm512_maskz_loadu_ps(m3, w + 48);
                for (size_t r = 0; r < 2; r++) {
                    __m512 x = _mm512_set1_ps(ar[r][p * csa]);
                    acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
                    acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
                    acc[r][2] = _mm512_fmadd_ps(x, b2, acc[r][2]);
                    acc[r][3] = _mm512_fmadd_ps(x, b3, acc[r][3]);
                }
            }
            direct_store_avx512(acc[0][0], acc[0][1], acc[0][2], acc[0][3], 4, cols, i, j, o);
            if (rows > 1)
                direct_store_avx512(acc[1][0], acc[1][1], acc[1][2], acc[1][3], 4, cols, i + 1, j,
                                    o);
        }
        for (; j < n; j += 32) {
            size_t cols = dpt__gemm_min(32, n - j);
            __mmask16 m0 = lanes16((ptrdiff_t)cols), m1 = lanes16((ptrdiff_t)cols - 16);
            __m512 acc[4][2];
            for (size_t r = 0; r < 4; r++)
                acc[r][0] = acc[r][1] = _mm512_setzero_ps();
            const float *w = b + j;
            if (cols > 16) {
                for (size_t p = 0; p < k; p++, w += rsb) {
                    __m512 b0 = _mm512_loadu_ps(w), b1 = _mm512_maskz_loadu_ps(m1, w + 16);
                    for (size_t r = 0; r < 4; r++) {
                        __m512 x = _mm512_set1_ps(ar[r][p * csa]);
                        acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
                        acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
                    }
                }
            } else {
                for (size_t p = 0; p < k; p++, w += rsb) {
                    __m512 b0 = _mm512_maskz_loadu_ps(m0, w);
                    for (size_t r = 0; r < 4; r++)
                        acc[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(ar[r][p * csa]), b0, acc[r][0]);
                }
            }
            __m512 z = _mm512_setzero_ps();
            size_t nv = cols > 16 ? 2 : 1;
            direct_store_avx512(acc[0][0], acc[0][1], z, z, nv, cols, i, j, o);
            if (rows > 1)
                direct_store_avx512(acc[1][0], acc[1][1], z, z, nv, cols, i + 1, j, o);
            if (rows > 2)
                direct_store_avx512(acc[2][0], acc[2][1], z, z, nv, cols, i + 2, j, o);
            if (rows > 3)
                direct_store_avx512(acc[3][0], acc[3][1], z, z, nv, cols, i + 3, j, o);
        }
    }
}

#define DPT__DIRECT_WRAPPERS(isa, target_attr)                                                     \
    target_attr static void direct_##isa(size_t m, size_t n, size_t k, const float *a, size_t rsa, \
                                         size_t csa, const float *b, size_t rsb, float *c,         \
                                         size_t rsc, size_t csc, float alpha, float beta)          \
    {                                                                                              \
        direct_out_t o = {c, rsc, csc, alpha, beta, NULL};                                         \
        direct_##isa##_core(m, n, k, a, rsa, csa, b, rsb, &o);                                     \
    }                                                                                              \
    target_attr static void small_##isa(size_t m, size_t n, size_t k, const float *a, size_t lda,  \
                                        const float *wt, size_t ldw, const float *bias, float *c,  \
                                        size_t ldc)                                                \
    {                                                                                              \
        direct_out_t o = {c, ldc, 1, 1.0f, 0.0f, bias};                                            \
        direct_##isa##_core(m, n, k, a, lda, 1, wt, ldw, &o);                                      \
    }

DPT__DIRECT_WRAPPERS(avx2, __attribute__((target("avx2,fma"))))
DPT__DIRECT_WRAPPERS(avx512, __attribute__((target("avx512f"))))
#endif

/* ---- kernel table and run-time dispatch ---------------------------------- */

static int cpu_any(void)
{
    return 1;
}

#if DPT__GEMM_X86
/* __builtin_cpu_supports also checks (through XGETBV) that the OS saves the
 * vector registers, so a hypervisor hiding AVX-512 is respected. */
static int cpu_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* The AVX-512 kernel shares the AVX2 packers. */
static int cpu_avx512(void)
{
    return cpu_avx2() && __builtin_cpu_supports("avx512f");
}
#endif

/* Ordered from narrowest to widest: the dispatcher takes the last one the CPU
 * supports. */
static const dpt__gemm_kernel_t kernels[] = {
    {"c",
     "portable (plain C, 4x8 tiles)",
     DPT__C_MR,
     DPT__C_NR,
     ukernel_c,
     pack_a_generic,
     pack_b_generic,
     cpu_any,
     {{NULL, 0, 0}, {NULL, 0, 0}},
     small_c,
     NULL},
#if DPT__GEMM_X86
    {"avx2",
     "portable (avx2+fma, 6x16 tiles)",
     DPT__AVX2_MR,
     DPT__AVX2_NR,
     ukernel_avx2,
     pack_a_avx,
     pack_b_avx,
     cpu_avx2,
     {{ukernel_avx2_edge, DPT__AVX2_EDGE_MR, DPT__AVX2_EDGE_PANELS}, {ukernel_avx2_edge4, 4, 1}},
     small_avx2,
     direct_avx2},
    {"avx512f",
     "portable (avx512f, 8x32 tiles)",
     DPT__AVX512_MR,
     DPT__AVX512_NR,
     ukernel_avx512,
     pack_a_avx,
     pack_b_avx,
     cpu_avx512,
     {{NULL, 0, 0}, {NULL, 0, 0}},
     small_avx512,
     direct_avx512},
#endif
};
#define DPT__NKERNELS (sizeof kernels / sizeof kernels[0])

/* The kernel in use: an index into kernels[], or DPT__GEMM_KERNEL_UNPACKED.
 * Set once by kernel_select() and afterwards only by the test hook. */
static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;
static atomic_int kernel_index;

static void kernel_select(void)
{
    int best = 0;
    for (size_t i = 0; i < DPT__NKERNELS; i++) {
        if (kernels[i].supported())
            best = (int)i;
    }
    atomic_store(&kernel_index, best);
}

int dpt__gemm_kernel_current(void)
{
    pthread_once(&kernel_once, kernel_select);
    return atomic_load_explicit(&kernel_index, memory_order_relaxed);
}

const dpt__gemm_kernel_t *dpt__gemm_kernel(int index)
{
    assert(index >= 0 && (size_t)index < DPT__NKERNELS);
    return &kernels[index];
}

int dpt__gemm_set_kernel(const char *name)
{
    pthread_once(&kernel_once, kernel_select);
    if (name == NULL) {
        kernel_select();
        return DPT_OK;
    }
    if (strcmp(name, "unpacked") == 0) {
        atomic_store(&kernel_index, DPT__GEMM_KERNEL_UNPACKED);
        return DPT_OK;
    }
    for (size_t i = 0; i < DPT__NKERNELS; i++) {
        if (strcmp(name, kernels[i].name) != 0)
            continue;
        if (!kernels[i].supported())
            return dpt_error(DPT_ENOTSUP, "gemm: this CPU cannot run the %s kernel", name);
        atomic_store(&kernel_index, (int)i);
        return DPT_OK;
    }
#if DPT__GEMM_X86
    return dpt_error(DPT_EINVAL, "gemm: unknown kernel \"%s\"", name);
#else
    if (strcmp(name, "avx2") == 0 || strcmp(name, "avx512f") == 0)
        return dpt_error(DPT_ENOTSUP, "gemm: the %s kernel is built on x86 only", name);
    return dpt_error(DPT_EINVAL, "gemm: unknown kernel \"%s\"", name);
#endif
}
