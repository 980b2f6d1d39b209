/*
 * Internal helpers shared by the layers of src/nn (seq.c, lstm.c); not
 * installed. Elementwise activations are inline so that the loops calling
 * them vectorise; DPT__NN_CLONES (core/clones.h) compiles such a loop for
 * AVX-512, AVX2 and the baseline, picked at load time. The clones give the
 * same bits (the same operations; no FMA contraction in ISO C mode, and
 * the explicit fmaf() is rounded once everywhere), so results do not depend
 * on the CPU. The sanitizer builds leave them out.
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
 * small policy networks (60% of a PPO run). Here a rational function of
 * a = |x| clamped to 9 (tanh(9) is 1 within a float's rounding):
 *   tanh(a) ~ a P(a^2) / Q(a^2),  P of degree 6, Q of degree 3 (Q(0) = 1)
 * with coefficients fitted to the relative error on [0, 9] (iteratively
 * reweighted least squares toward the minimax fit, 6.7e-9 in exact
 * arithmetic). Both polynomials are fused multiply-adds in Horner form
 * written as fmaf(): one rounding by definition, so the result is the same
 * wherever it runs. The clones (x86-64-v3 and v4) make them vector FMA
 * instructions; the baseline build calls libm's fmaf, slower and bitwise
 * equal. In float the relative error stays below 3e-7 over all floats in
 * [-12, 12] (the largest, 5 ulp, where tanh is within 1e-6 of 1), the
 * result never exceeds 1 and tanh(+-0) = +-0 (tests/test_nn.c). This is
 * about 16 operations per element against 24 for the exp-based form.
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
    float a = ua.f, z = a * a;
    float p = fmaf(z, -8.488442526826023e-14f, 5.277816702289062e-11f);
    p = fmaf(p, z, -2.0224878142775756e-08f);
    p = fmaf(p, z, 1.1154204697997548e-05f);
    p = fmaf(p, z, 0.0031039452008208876f);
    p = fmaf(p, z, 0.1308399993209719f);
    p = fmaf(p, z, 0.9999999934289459f);
    float q = fmaf(z, 0.0002546129845453106f, 0.02449513352805445f);
    q = fmaf(q, z, 0.464173270416304f);
    q = fmaf(q, z, 1.0f);
    union {
        float f;
        int32_t i;
    } ut = {(a * p) / q};
    ut.i = ut.i < 0x3f800000 ? ut.i : 0x3f800000; /* at most 1 */
    return copysignf(ut.f, x);
}

/* The logistic function from the tanh above: sigmoid(x) = (1 + tanh(x/2)) / 2,
 * an identity; in float the absolute error stays below 1.7e-7 over
 * [-30, 30] (measured against double; tanh's own is below 3e-7). The
 * relative error grows where sigmoid is tiny, which no gate notices. */
static inline float dpt__sigmoidf(float x)
{
    return 0.5f + 0.5f * dpt__tanhf(0.5f * x);
}

/*
 * exp and log in double for the losses, without libm: a libm call per
 * element was most of the PPO loss. Inline and branch-free so that a loop
 * over a batch vectorises (DPT__NN_CLONES); every step is an IEEE operation
 * or an explicit fma, so the bits are the same on every machine. exp is
 * within 1 ulp of libm's and log within 2 (tests/test_nn.c).
 *
 * dpt__exp_nonpos(x), x <= 0 (the argument of a log-sum-exp around the
 * maximum): e^x = 2^n e^r, n = round(x / ln2), r = x - n ln2 in two fused
 * steps (ln2 split in two doubles), e^r by its degree-13 Taylor polynomial
 * (truncation < 5e-18 for |r| <= ln2 / 2). Below -708, where e^x leaves the
 * normal range, the result is 0 (the true value is under 3.4e-308).
 */
static inline double dpt__exp_nonpos(double x)
{
    union {
        double f;
        int64_t i;
    } ua = {-x};
    int64_t big = ua.i > 0x4086200000000000; /* 708.0 */
    ua.i = big ? 0x4086200000000000 : ua.i;
    double t = -ua.f;
    const double magic = 6755399441055744.0; /* 1.5 * 2^52: rounds to an integer */
    union {
        double f;
        int64_t i;
    } uk = {fma(t, 1.4426950408889634, magic)};
    double n = uk.f - magic;
    double r = fma(n, -0.6931471805599453, t);
    r = fma(n, -2.3190468138462996e-17, r);
    double q = 1.0 / 6227020800.0; /* 1/13! */
    q = fma(q, r, 1.0 / 479001600.0);
    q = fma(q, r, 1.0 / 39916800.0);
    q = fma(q, r, 1.0 / 3628800.0);
    q = fma(q, r, 1.0 / 362880.0);
    q = fma(q, r, 1.0 / 40320.0);
    q = fma(q, r, 1.0 / 5040.0);
    q = fma(q, r, 1.0 / 720.0);
    q = fma(q, r, 1.0 / 120.0);
    q = fma(q, r, 1.0 / 24.0);
    q = fma(q, r, 1.0 / 6.0);
    q = fma(q, r, 0.5);
    q = fma(q, r, 1.0);
    q = fma(q, r, 1.0);
    /* the integer n sits in the low bits of uk (its binade's ulp is 1) */
    union {
        int64_t i;
        double f;
    } us = {(uk.i - 0x4338000000000000 + 1023) * ((int64_t)1 << 52)}; /* 2^n */
    union {
        double f;
        int64_t i;
    } ue = {q * us.f};
    ue.i &= big - 1; /* 0 where x < -708 */
    return ue.f;
}

/*
 * dpt__log_pos(x) for a positive normal x (a sum of exponentials, >= 1 in a
 * log-sum-exp): x = 2^e m with m in [sqrt(1/2), sqrt(2)), and
 *   log m = 2 atanh(u) = 2u (1 + u^2/3 + u^4/5 + ...),  u = (m - 1) / (m + 1)
 * to the u^22 term (|u| <= 0.172: truncation < 2e-17), then e ln2 + log m
 * in two fused steps.
 */
static inline double dpt__log_pos(double x)
{
    union {
        double f;
        int64_t i;
    } ux = {x};
    int64_t mant = ux.i & 0x000FFFFFFFFFFFFF;
    int64_t up = mant > 0x6A09E667F3BCD; /* m >= sqrt(2): halve it */
    int64_t e = (ux.i >> 52) - 1023 + up;
    union {
        int64_t i;
        double f;
    } um = {mant | (up ? 0x3FE0000000000000 : 0x3FF0000000000000)};
    union {
        int64_t i;
        double f;
    } ue = {e + 0x4338000000000000}; /* e as a double: magic + e, less magic */
    double ed = ue.f - 6755399441055744.0;
    double u = (um.f - 1.0) / (um.f + 1.0), z = u * u;
    double q = 1.0 / 23.0;
    q = fma(q, z, 1.0 / 21.0);
    q = fma(q, z, 1.0 / 19.0);
    q = fma(q, z, 1.0 / 17.0);
    q = fma(q, z, 1.0 / 15.0);
    q = fma(q, z, 1.0 / 13.0);
    q = fma(q, z, 1.0 / 11.0);
    q = fma(q, z, 1.0 / 9.0);
    q = fma(q, z, 1.0 / 7.0);
    q = fma(q, z, 1.0 / 5.0);
    q = fma(q, z, 1.0 / 3.0);
    double lm = fma(2.0 * u * z, q, 2.0 * u);
    return fma(ed, 0.6931471805599453, fma(ed, 2.3190468138462996e-17, lm));
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
