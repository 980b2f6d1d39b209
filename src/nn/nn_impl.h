/*
 * Internal helpers shared by the layers of src/nn (seq.c, lstm.c); not
 * installed. Elementwise activations are inline so that the loops calling
 * them vectorise; DPT__NN_CLONES (core/clones.h) compiles such a loop for
 * AVX-512, AVX2 and the baseline, picked at load time. The clones give the
 * same bits (the same operations, no FMA contraction in ISO C mode), so
 * results do not depend on the CPU. The sanitizer builds leave them out.
 */
#ifndef DPT_NN_IMPL_H
#define DPT_NN_IMPL_H

#include "core/clones.h"
#include "dpt/nn.h"
#include "dpt/rng.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define DPT__NN_CLONES DPT__CLONES

/*
 * tanh without libm: libm's tanhf is a scalar call per element and dominated
 * small policy networks (60% of a PPO run). Here, with a = |x| clamped to 9
 * (tanh(9) rounds to 1 in float):
 *   tanh(a) = -expm1(-2a) / (2 + expm1(-2a))
 *   expm1(t) = 2^n (e^r - 1) + (2^n - 1),  t = n ln2 + r,  |r| <= ln2 / 2
 * with e^r - 1 from its degree-7 Taylor polynomial (truncation < 1e-8) and
 * ln2 split in two parts (Cody–Waite) so r is exact enough. Written as plain
 * arithmetic so the compiler vectorises the loop; the result is within a few
 * ulp of tanh and, since no FMA contraction is allowed (ISO C mode), the same
 * on every x86-64 machine.
 */
static inline float dpt__tanhf(float x)
{
    /* Clamp |x| to 9 on the bit pattern: positive floats order like their
     * bits, and an integer select vectorises where a float compare (which
     * may trap in ISO C) does not. */
    union {
        float f;
        int32_t i;
    } ua = {fabsf(x)};
    ua.i = ua.i < 0x41100000 ? ua.i : 0x41100000; /* 9.0f */
    float t = -2.0f * ua.f;
    /* n = round(t / ln2) by the 1.5 * 2^23 trick (|t / ln2| < 27) */
    float n = (t * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = (t - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    float p =
        r *
        (1.0f +
         r * (0.5f + r * (1.0f / 6.0f +
                          r * (1.0f / 24.0f +
                               r * (1.0f / 120.0f + r * (1.0f / 720.0f + r * (1.0f / 5040.0f)))))));
    union {
        int32_t i;
        float f;
    } us = {((int32_t)n + 127) << 23}; /* 2^n */
    float s = us.f;
    float em = s * p + (s - 1.0f);
    float th = (0.0f - em) / (2.0f + em); /* 0 - em keeps tanh(0) = +0 */
    return copysignf(th, x);
}

/* The logistic function from the tanh above: sigmoid(x) = (1 + tanh(x/2)) / 2,
 * an identity; in float the absolute error stays below 1.1e-7 over
 * [-30, 30] (measured against double; tanh's own is below 1.5e-7). The
 * relative error grows where sigmoid is tiny, which no gate notices. */
static inline float dpt__sigmoidf(float x)
{
    return 0.5f + 0.5f * dpt__tanhf(0.5f * x);
}

/* Acting: between dpt__seq_act_begin(s, params) and dpt__seq_act_end(s),
 * dpt_seq_forward() with that same `params` and at most DPT__GEMM_SMALL_M
 * rows runs its linear layers on a transposed copy of their weights made by
 * begin (dpt__gemm_small: the same bits as dpt_gemm, without packing the
 * weights at every call). The caller promises that the arena does not
 * change in between. Begin returns 0, or DPT_ENOMEM / DPT_EOVERFLOW (then
 * forward simply runs as always). Other params, more rows, the backward
 * pass: unchanged. */
int dpt__seq_act_begin(dpt_seq_t *s, const float *params);
void dpt__seq_act_end(dpt_seq_t *s);

/* What dpt_categorical_logp() computes on its way and
 * dpt_categorical_backward() would compute again, per row b of a batch of
 * k actions: the log-sum-exp, the entropy in double and the probabilities
 * (caller's buffers: lse [batch], h [batch], p [batch * k]). The _ex
 * functions fill it (logp) and use it (backward) with the same bits as
 * without it; NULL: the public functions' behaviour. */
typedef struct dpt__categorical_cache {
    double *lse, *h, *p;
} dpt__categorical_cache_t;

int dpt__categorical_logp_ex(const float *logits, size_t batch, size_t k, const int32_t *actions,
                             float *logp, float *entropy, dpt__categorical_cache_t *cache);
void dpt__categorical_backward_ex(const float *logits, size_t batch, size_t k,
                                  const int32_t *actions, const float *dlogp, const float *dentropy,
                                  float *dlogits, const dpt__categorical_cache_t *cache);

/* Orthonormalises the rows of a [rows, cols] matrix (rows <= cols) in place
 * by modified Gram–Schmidt in double, redrawing a row from `rng` should it
 * vanish (seq.c). */
void dpt__orthonormal_rows(double *m, size_t rows, size_t cols, dpt_rng_t *rng);

#endif /* DPT_NN_IMPL_H */
