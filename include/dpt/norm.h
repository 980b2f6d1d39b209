/*
 * dpt/norm.h — batch normalization and dropout kernels.
 *
 * The kernels under the sequential stack's batchnorm and dropout layers
 * (dpt/nn.h; the model language's batchnorm and dropout).
 *
 * Layout. Batch normalization reads x as [N, C, S] in row-major order: N
 * samples, C channels, S positions per channel of one sample (element
 * (n, c, s) at (n*C + c)*S + s). An NCHW image batch [N, C, H, W] is that
 * array with S = H*W (PyTorch's nn.BatchNorm2d); flat rows [N, C] are S = 1
 * (nn.BatchNorm1d on 2-D input). Each channel is normalized over its
 * n = N*S values. Dropout reads x as rows [rows, cols], any row-major
 * array (an NCHW batch is [N, C*H*W]).
 *
 * Conventions (dpt/conv.h's): a descriptor first, then outputs, then
 * inputs; forward functions write their outputs; backward functions
 * ACCUMULATE (+=) into every gradient they produce (the caller zeroes them);
 * a gradient pointer that is NULL is not computed. Every pointer is
 * borrowed for the duration of the call. The kernels run on the calling
 * thread only and never allocate.
 *
 * Numerics. Every sum of batch normalization (the statistics, the backward
 * pass's two sums, the gradients of gamma and beta) is in double, in a fixed
 * order: for each channel, samples in order, then positions in order. Per
 * element values are computed in double and rounded to float once (an
 * accumulated gradient: old value plus the new term, then one rounding).
 * Equal inputs therefore give bitwise equal outputs, whatever the thread.
 *
 * Errors: functions return 0 or a negative DPT_E... code with a message
 * (dpt_last_error()) naming the field or the array; nothing is written
 * unless the checks pass.
 */
#ifndef DPT_NORM_H
#define DPT_NORM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Batch normalization                                                      */

/* The shape of a batch normalization, without the batch size. */
typedef struct dpt_batchnorm {
    size_t channels; /* C: statistics and parameters per channel */
    size_t spatial;  /* S: positions per channel of one sample (H*W; 1 for rows [N, C]) */
    float eps;       /* added to the variance: > 0 and finite (PyTorch's default is 1e-5) */
} dpt_batchnorm_t;

/* Checks a descriptor: channels >= 1, spatial >= 1, eps > 0 and finite, and
 * channels * spatial without overflow. Returns 0, DPT_EINVAL with a message
 * naming the field, or DPT_EOVERFLOW. */
int dpt_batchnorm_check(const dpt_batchnorm_t *bn);

/* Training forward: per channel c, over its n = N*S values,
 *     mean_c   = (1/n) sum_{n,s} x[n, c, s]
 *     var_c    = (1/n) sum_{n,s} (x[n, c, s] - mean_c)^2   (biased; two passes)
 *     invstd_c = 1 / sqrt(var_c + eps)
 *     y[n, c, s] = gamma[c] * (x[n, c, s] - mean_c) * invstd_c + beta[c]
 * with the statistics and y computed in double (y from the double mean and
 * invstd, rounded to float once).
 *   y       [N, C, S]  output; may be x itself (in place)
 *   mean    [C]        output, saved for the backward pass
 *   invstd  [C]        output, saved for the backward pass
 *   var     [C]        output, the biased variance (for
 *                      dpt_batchnorm_update_running()), or NULL
 *   x       [N, C, S]
 *   gamma   [C], or NULL for 1 (no affine scale)
 *   beta    [C], or NULL for 0 (no affine shift)
 * batch = N >= 1 (statistics need a value; N*S == 1 gives var 0 and y =
 * beta). Errors: those of dpt_batchnorm_check(); DPT_EINVAL for batch 0 or
 * a NULL y, mean, invstd or x; DPT_EOVERFLOW when N*C*S overflows. */
int dpt_batchnorm_forward_train(const dpt_batchnorm_t *bn, float *y, float *mean, float *invstd,
                                float *var, const float *x, const float *gamma, const float *beta,
                                size_t batch);

/* Evaluation forward with given statistics (running estimates, or pooled
 * ones from dpt_batchnorm_combine_stats()):
 *     y[n, c, s] = gamma[c] * (x[n, c, s] - running_mean[c]) * k_c + beta[c],
 *     k_c = 1 / sqrt(running_var[c] + eps)
 * in double, rounded once. y [N, C, S] may be x itself; running_mean and
 * running_var [C]; gamma, beta as in training (NULL: 1 and 0). batch may be
 * 0 (nothing is done). Errors: those of dpt_batchnorm_check(), DPT_EINVAL
 * for a NULL y, x, running_mean or running_var, DPT_EOVERFLOW. */
int dpt_batchnorm_forward_eval(const dpt_batchnorm_t *bn, float *y, const float *x,
                               const float *running_mean, const float *running_var,
                               const float *gamma, const float *beta, size_t batch);

/* Training backward, for dy = dL/dy [N, C, S] of a training forward whose
 * statistics depend on x; with xhat = (x - mean_c) * invstd_c and n = N*S,
 * ACCUMULATES
 *   dx [N, C, S]  += gamma[c] * invstd_c * (dy - (1/n) sum(dy) - xhat * (1/n) sum(dy * xhat))
 *   dgamma [C]    += sum_{n,s} dy * xhat
 *   dbeta  [C]    += sum_{n,s} dy
 * (sums per channel, in double, in the fixed order). mean and invstd are the
 * forward's saved outputs; x its input; gamma as given to the forward (NULL:
 * 1). Each of dx, dgamma, dbeta may be NULL (not computed); x, mean and
 * invstd are only read for dx or dgamma (they may be NULL when only dbeta is
 * wanted). batch may be 0 (nothing is done). Errors: those of
 * dpt_batchnorm_check(), DPT_EINVAL for a NULL array that is needed,
 * DPT_EOVERFLOW. */
int dpt_batchnorm_backward_train(const dpt_batchnorm_t *bn, float *dx, float *dgamma, float *dbeta,
                                 const float *dy, const float *x, const float *mean,
                                 const float *invstd, const float *gamma, size_t batch);

/* Evaluation backward (the statistics are constants): with k_c and xhat =
 * (x - running_mean[c]) * k_c as in dpt_batchnorm_forward_eval(), ACCUMULATES
 *   dx [N, C, S]  += gamma[c] * k_c * dy
 *   dgamma [C]    += sum_{n,s} dy * xhat
 *   dbeta  [C]    += sum_{n,s} dy
 * Each gradient may be NULL; running_var is read for dx and dgamma, x and
 * running_mean for dgamma only. Errors: as dpt_batchnorm_backward_train(). */
int dpt_batchnorm_backward_eval(const dpt_batchnorm_t *bn, float *dx, float *dgamma, float *dbeta,
                                const float *dy, const float *x, const float *running_mean,
                                const float *running_var, const float *gamma, size_t batch);

/* Updates running statistics from a batch's (PyTorch's rule, in double):
 *     running_mean = (1 - m) * running_mean + m * mean
 *     running_var  = (1 - m) * running_var + m * var * count / (count - 1)
 * where var is the biased variance over `count` values per channel (N*S of
 * a training forward, or the pooled count of dpt_batchnorm_combine_stats())
 * and the factor count / (count - 1) makes it unbiased; count == 1 uses var
 * as it is. momentum m in (0, 1] (PyTorch's default is 0.1; m = 1 keeps the
 * last batch's statistics only). running_mean, running_var [C] are updated
 * in place; mean, var [C]. Errors: those of dpt_batchnorm_check(),
 * DPT_EINVAL for a NULL array, count 0 or momentum out of range. */
int dpt_batchnorm_update_running(const dpt_batchnorm_t *bn, float *running_mean, float *running_var,
                                 const float *mean, const float *var, size_t count, float momentum);

/* Pools the statistics of K parts of a batch (towers, ranks) into those of
 * the whole, as if computed over all its rows: part k has count_k values per
 * channel, mean_k and biased var_k. Parts are merged in index order with the
 * parallel-variance formula (Chan, Golub and LeVeque), in double: with the
 * running (n_a, mean_a, M_a) (M = var * n) and a part b,
 *     n     = n_a + n_b,   d = mean_b - mean_a
 *     mean  = mean_a + d * n_b / n
 *     M     = M_a + M_b + d^2 * n_a * n_b / n
 * and finally var = M / n. A part with count 0 is skipped.
 *   mean, var  [C]     outputs; they may be the first part's rows (means,
 *                      vars) for an update in place
 *   count      output: the total count, or NULL
 *   means      [K, C]  row k is part k's mean
 *   vars       [K, C]  row k is part k's biased variance
 *   counts     [K]
 * Errors: those of dpt_batchnorm_check(); DPT_EINVAL for K == 0, a NULL
 * array or a total count of 0; DPT_EOVERFLOW when the total or K*C
 * overflows. */
int dpt_batchnorm_combine_stats(const dpt_batchnorm_t *bn, float *mean, float *var, size_t *count,
                                const float *means, const float *vars, const size_t *counts,
                                size_t parts);

/* ------------------------------------------------------------------------ */
/* Dropout                                                                  */

/*
 * Inverted dropout (PyTorch's nn.Dropout in training mode): each element is
 * kept with probability 1 - p and scaled, or dropped:
 *     y[r, j] = x[r, j] * f[r, j],  f = s if kept, 0 if dropped,
 *     s = (float)(1 / (1 - p))       (computed in double, rounded once)
 * A dropped element is x * 0: a NaN or an infinity gives NaN there, as in
 * PyTorch. In evaluation mode dropout is the identity and no kernel is
 * called.
 *
 * The mask is a pure function of the key (seed, step), the GLOBAL row index
 * R = row_offset + r (r: the row within the call) and the column j, so that
 * a row gets the same mask whichever split of the batch, thread, tower or
 * rank computes it, and the backward pass recomputes it instead of keeping
 * it. Exactly: with the words w[0..4) of
 *     dpt_philox4x32_10(counter = {j / 4, R, step mod 2^32, step / 2^32},
 *                       key = K(seed))
 * where K(seed) is the key dpt_rng_init() derives from (seed, purpose
 * DPT_RNG_DROPOUT) (its rank and index do not enter the key), element
 * (R, j) is dropped if and only if
 *     w[j mod 4] < t,   t = floor(p * 2^32)
 * so its probability is t / 2^32, within 2^-32 of p. (j / 4 is integer
 * division.) Hence R < 2^32 and cols <= 2^34: a step's global batch has at
 * most 2^32 rows. Two dropout layers of one network called with the same
 * seed, step and shapes draw the same masks: give each layer its own seed
 * (e.g. derived from the run's seed and the layer's index).
 *
 * p == 0 is the identity: y = x bit for bit, dx += dy, the generator unused.
 */

/* Forward:
 *   y     [rows, cols]  output; may be x itself (in place)
 *   mask  [rows, cols]  output, 1 where kept and 0 where dropped, or NULL
 *                       (not needed by the backward pass: for callers that
 *                       want to inspect it)
 *   x     [rows, cols]
 *   p     drop probability in [0, 1)
 *   seed, step     the key; step is the training step (or any counter that
 *                  must give new masks)
 *   row_offset     the global index of the call's first row
 * rows or cols may be 0 (nothing is done; the arrays may then be NULL).
 * Errors: DPT_EINVAL naming p when p is not in [0, 1) (NaN included),
 * naming row_offset when row_offset + rows > 2^32, naming cols when cols >
 * 2^34, for a NULL y or x; DPT_EOVERFLOW when rows * cols overflows. */
int dpt_dropout_forward(float *y, uint8_t *mask, const float *x, size_t rows, size_t cols, float p,
                        uint64_t seed, uint64_t step, uint64_t row_offset);

/* Backward: ACCUMULATES dx [rows, cols] += dy [rows, cols] * f, the factor f
 * of each element recomputed from (seed, step, row_offset + r, j) exactly as
 * the forward computed it: pass the forward's arguments. dx NULL: nothing is
 * done. Errors: as dpt_dropout_forward(), DPT_EINVAL for a NULL dy. */
int dpt_dropout_backward(float *dx, const float *dy, size_t rows, size_t cols, float p,
                         uint64_t seed, uint64_t step, uint64_t row_offset);

#ifdef __cplusplus
}
#endif
#endif /* DPT_NORM_H */
