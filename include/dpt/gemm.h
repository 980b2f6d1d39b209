/*
 * dpt/gemm.h — single-precision matrix multiply.
 *
 *     C = alpha * op(A) * op(B) + beta * C
 *
 * Row-major storage. op(X) is X or its transpose: op(A) is M x K, op(B) is
 * K x N, C is M x N. lda/ldb/ldc are row strides in elements (for a
 * non-transposed A, lda >= K; for a transposed A, A is stored K x M and
 * lda >= M; likewise for B). When beta == 0, C is not read (NaNs in C do not
 * propagate). M, N or K equal to 0 is valid: with K == 0, C = beta * C.
 *
 * Backends: the portable kernel written in dpt (always built; it uses the
 * widest vector unit the CPU offers at run time) and a CBLAS such as OpenBLAS
 * (when the build found one). The default backend was chosen by measurement
 * at the shapes dpt trains; see docs/GEMM.md. Calls from several threads at
 * once are safe: dpt asks OpenBLAS for one thread per call so that towers do
 * not oversubscribe the cores.
 */
#ifndef DPT_GEMM_H
#define DPT_GEMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_GEMM_BACKEND_LIST(X)     \
    X(DPT_GEMM_PORTABLE, "portable") \
    X(DPT_GEMM_CBLAS, "cblas")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_gemm_backend {
#define DPT__GEMM_ENUM(sym, name) sym,
    DPT_GEMM_BACKEND_LIST(DPT__GEMM_ENUM)
#undef DPT__GEMM_ENUM
    DPT_GEMM_BACKEND_COUNT
} dpt_gemm_backend_t;
/* clang-format on */

/* The backend used by dpt_gemm() (process-wide): DPT_GEMM_PORTABLE until
 * dpt_gemm_set_backend() changes it (see docs/GEMM.md for the measurements
 * behind that default). */
dpt_gemm_backend_t dpt_gemm_get_backend(void);

/* Selects the backend used by dpt_gemm(). Returns 0, DPT_ENOTSUP when the
 * backend is not built in (CBLAS without a CBLAS), DPT_EINVAL for an unknown
 * value. Not meant to be called while other threads run GEMMs. */
int dpt_gemm_set_backend(dpt_gemm_backend_t backend);

/* "portable" / "cblas"; "unknown" for other values. */
const char *dpt_gemm_backend_name(dpt_gemm_backend_t backend);

/* A sentence describing the kernel in use, e.g. "portable (avx512f)" or
 * "cblas (openblas 0.3.21, 1 thread per call)". Static storage. */
const char *dpt_gemm_describe(dpt_gemm_backend_t backend);

/* C = alpha*op(A)*op(B) + beta*C with the current backend. transa/transb are
 * 0 (no transpose) or 1 (transpose). No argument checking beyond asserts: the
 * layers check shapes before calling. */
void dpt_gemm(int transa, int transb, size_t m, size_t n, size_t k, float alpha, const float *a,
              size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc);

/* The same with an explicit backend (tests and benchmarks compare them).
 * Returns 0, DPT_ENOTSUP when `backend` is not built in, or DPT_EINVAL for an
 * unknown value. */
int dpt_gemm_ex(dpt_gemm_backend_t backend, int transa, int transb, size_t m, size_t n, size_t k,
                float alpha, const float *a, size_t lda, const float *b, size_t ldb, float beta,
                float *c, size_t ldc);

#ifdef __cplusplus
}
#endif
#endif /* DPT_GEMM_H */
