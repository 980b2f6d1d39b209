/*
 * Collectives: the reduction kernels shared by the threads and hier
 * backends (declared in comm_internal.h).
 *
 * Every reduced element is ((x_0 + x_1) + x_2) + ... in source order; the
 * variants below (P = 2 single pass, general accumulator, each also as an
 * AVX2 clone picked at run time) perform exactly these IEEE additions and
 * the same division, so they all give the same bits.
 */
#include "comm/comm_internal.h"

#include <string.h>

/* ---- reduction kernel ---------------------------------------------------- */

/* Blocks of RBLK floats are summed into a local accumulator (which the
 * compiler knows aliases nothing, so the adds vectorize without run-time
 * overlap checks) and then stored to every destination. A destination may
 * therefore be one of the sources: each block is fully read before it is
 * written. The order of the adds per element is fixed (rank order), so the
 * split into blocks or slices never changes a bit of the result. */
#define RBLK 1024

/* The whole work of a P = 2 allreduce: s = a[i] + b[i] (then / div), stored
 * into both. a and b are different participants' buffers, which never
 * overlap, hence restrict; without the accumulator round trip this is a
 * single pass. An AVX2 clone is picked at run time where the CPU has it
 * (the library is built for baseline x86-64); both compute the same IEEE
 * additions and divisions element by element, so their results are
 * bitwise identical. */
#define DPT__REDUCE2_BODY                  \
    if (div == 0.0f) {                     \
        for (size_t i = 0; i < n; i++) {   \
            float s = a[i] + b[i];         \
            a[i] = s;                      \
            b[i] = s;                      \
        }                                  \
    } else {                               \
        for (size_t i = 0; i < n; i++) {   \
            float s = (a[i] + b[i]) / div; \
            a[i] = s;                      \
            b[i] = s;                      \
        }                                  \
    }

static void reduce2_push(float *restrict a, float *restrict b, size_t n, float div)
{
    DPT__REDUCE2_BODY
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#define DPT__HAVE_AVX2_CLONE 1
__attribute__((target("avx2"))) static void reduce2_push_avx2(float *restrict a, float *restrict b,
                                                              size_t n, float div)
{
    DPT__REDUCE2_BODY
}
#endif

/* The general case: blocks of RBLK floats summed in rank order into a
 * local accumulator, then stored to every destination (see above). */
#define DPT__REDUCE_ACC_BODY                             \
    _Alignas(64) float acc[RBLK];                        \
    for (size_t i0 = 0; i0 < len; i0 += RBLK) {          \
        size_t n = len - i0 < RBLK ? len - i0 : RBLK;    \
        const float *a = src[0] + i0;                    \
        if (nsrc == 1) {                                 \
            for (size_t j = 0; j < n; j++)               \
                acc[j] = a[j];                           \
        } else {                                         \
            const float *b = src[1] + i0;                \
            for (size_t j = 0; j < n; j++)               \
                acc[j] = a[j] + b[j];                    \
            for (int k = 2; k < nsrc; k++) {             \
                const float *c = src[k] + i0;            \
                for (size_t j = 0; j < n; j++)           \
                    acc[j] += c[j];                      \
            }                                            \
        }                                                \
        if (div != 0.0f)                                 \
            for (size_t j = 0; j < n; j++)               \
                acc[j] = acc[j] / div;                   \
        for (int d = 0; d < ndst; d++)                   \
            memcpy(dst[d] + i0, acc, n * sizeof(float)); \
    }

static void reduce_acc(float *const *dst, int ndst, const float *const *src, int nsrc, size_t len,
                       float div)
{
    DPT__REDUCE_ACC_BODY
}

#ifdef DPT__HAVE_AVX2_CLONE
__attribute__((target("avx2"))) static void reduce_acc_avx2(float *const *dst, int ndst,
                                                            const float *const *src, int nsrc,
                                                            size_t len, float div)
{
    DPT__REDUCE_ACC_BODY
}
#endif

void dpt__reduce_push(float *const *dst, int ndst, const float *const *src, int nsrc, size_t len,
                      float div)
{
    if (nsrc == 2 && ndst == 2 && dst[0] == src[0] && dst[1] == src[1] && dst[0] != dst[1]) {
#ifdef DPT__HAVE_AVX2_CLONE
        if (__builtin_cpu_supports("avx2")) {
            reduce2_push_avx2(dst[0], dst[1], len, div);
            return;
        }
#endif
        reduce2_push(dst[0], dst[1], len, div);
        return;
    }
#ifdef DPT__HAVE_AVX2_CLONE
    if (__builtin_cpu_supports("avx2")) {
        reduce_acc_avx2(dst, ndst, src, nsrc, len, div);
        return;
    }
#endif
    reduce_acc(dst, ndst, src, nsrc, len, div);
}
