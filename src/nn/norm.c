/*
 * Batch normalization and dropout kernels (dpt/norm.h).
 *
 * Batch normalization. Each channel is one pass over its N*S values, sample
 * by sample (the channel's values of one sample are S contiguous floats):
 *
 *     forward (train)  sum -> mean; sum of squared deviations -> var (two
 *                      passes, not E[x^2] - mean^2, which cancels when the
 *                      mean is large); then y, row by row
 *     backward (train) sum(dy), sum(dy * xhat); then dx, row by row
 *
 * Sums are plain double accumulators visited in that order, never split
 * into lanes: the brief of these kernels is a fixed, documented order (the
 * statistics are what ranks will later average), and the per-element work
 * (one product and a rounding) is small next to a convolution's. The row
 * loops hold no sum, so they vectorise (DPT__NN_CLONES); each element is
 * computed in double and rounded once, the same bits in every clone.
 *
 * Dropout. The mask is recomputed from its key in the backward pass (no
 * buffer): one Philox block gives the words of four columns of one row
 * (dpt/norm.h gives the mapping). Both passes go through one loop
 * (dropout_apply), so they cannot disagree.
 */
#include "dpt/arena.h"
#include "dpt/norm.h"
#include "dpt/rng.h"
#include "dpt/status.h"
#include "nn_impl.h"

#include <math.h>
#include <string.h>

/* ---- batch normalization: checks ------------------------------------------ */

int dpt_batchnorm_check(const dpt_batchnorm_t *bn)
{
    size_t cs;
    if (!bn)
        return dpt_error(DPT_EINVAL, "batchnorm: no descriptor given");
    if (bn->channels == 0)
        return dpt_error(DPT_EINVAL, "batchnorm: channels is 0 (must be >= 1)");
    if (bn->spatial == 0)
        return dpt_error(DPT_EINVAL, "batchnorm: spatial is 0 (must be >= 1; 1 for rows [N, C])");
    if (!(bn->eps > 0.0f) || !isfinite(bn->eps))
        return dpt_error(DPT_EINVAL, "batchnorm: eps = %g (must be > 0 and finite)",
                         (double)bn->eps);
    if (dpt_mul_size(bn->channels, bn->spatial, &cs))
        return dpt_error(DPT_EOVERFLOW, "batchnorm: channels %zu x spatial %zu overflows",
                         bn->channels, bn->spatial);
    return DPT_OK;
}

/* The descriptor checked and N*C*S without overflow. */
static int bn_begin(const dpt_batchnorm_t *bn, const char *what, size_t batch)
{
    int rc = dpt_batchnorm_check(bn);
    if (rc != 0)
        return rc;
    size_t total;
    if (dpt_mul_size(batch, bn->channels * bn->spatial, &total))
        return dpt_error(DPT_EOVERFLOW, "batchnorm: %s: batch %zu x %zu channels x %zu overflows",
                         what, batch, bn->channels, bn->spatial);
    return DPT_OK;
}

/* ---- batch normalization: per-channel loops -------------------------------- */

/* Mean and biased variance of channel c over its n = N*S values, in double,
 * samples in order, then positions: two passes. */
static void channel_stats(const float *x, size_t batch, size_t c, size_t C, size_t S, double *mean,
                          double *var)
{
    double n = (double)batch * (double)S, sum = 0.0, sq = 0.0;
    for (size_t i = 0; i < batch; i++) {
        const float *xc = x + (i * C + c) * S;
        for (size_t s = 0; s < S; s++)
            sum += (double)xc[s];
    }
    double m = sum / n;
    for (size_t i = 0; i < batch; i++) {
        const float *xc = x + (i * C + c) * S;
        for (size_t s = 0; s < S; s++) {
            double d = (double)xc[s] - m;
            sq += d * d;
        }
    }
    *mean = m;
    *var = sq / n;
}

/* y[s] = (x[s] - m) * a + b for one row of S values, in double, rounded
 * once. y may be x. */
DPT__NN_CLONES
static void affine_row(float *y, const float *x, size_t n, double m, double a, double b)
{
    for (size_t s = 0; s < n; s++)
        y[s] = (float)(((double)x[s] - m) * a + b);
}

/* y of channel c: every sample's row through affine_row. */
static void channel_affine(float *y, const float *x, size_t batch, size_t c, size_t C, size_t S,
                           double m, double a, double b)
{
    for (size_t i = 0; i < batch; i++) {
        size_t off = (i * C + c) * S;
        affine_row(y + off, x + off, S, m, a, b);
    }
}

int dpt_batchnorm_forward_train(const dpt_batchnorm_t *bn, float *y, float *mean, float *invstd,
                                float *var, const float *x, const float *gamma, const float *beta,
                                size_t batch)
{
    int rc = bn_begin(bn, "training forward", batch);
    if (rc != 0)
        return rc;
    if (batch == 0)
        return dpt_error(DPT_EINVAL, "batchnorm: training forward: batch 0 has no statistics");
    if (!y || !mean || !invstd || !x)
        return dpt_error(DPT_EINVAL,
                         "batchnorm: training forward: y, mean, invstd and x are required");
    size_t C = bn->channels, S = bn->spatial;
    for (size_t c = 0; c < C; c++) {
        double m, v;
        channel_stats(x, batch, c, C, S, &m, &v);
        double k = 1.0 / sqrt(v + (double)bn->eps);
        double g = gamma ? (double)gamma[c] : 1.0, b = beta ? (double)beta[c] : 0.0;
        /* The statistics first: y may be x, and y's rows of this channel
         * are the last reads of its values. */
        mean[c] = (float)m;
        invstd[c] = (float)k;
        if (var)
            var[c] = (float)v;
        channel_affine(y, x, batch, c, C, S, m, g * k, b);
    }
    return DPT_OK;
}

/* 1 / sqrt(var + eps) in double: the evaluation passes' scale. */
static double eval_invstd(const dpt_batchnorm_t *bn, float var)
{
    return 1.0 / sqrt((double)var + (double)bn->eps);
}

int dpt_batchnorm_forward_eval(const dpt_batchnorm_t *bn, float *y, const float *x,
                               const float *running_mean, const float *running_var,
                               const float *gamma, const float *beta, size_t batch)
{
    int rc = bn_begin(bn, "evaluation forward", batch);
    if (rc != 0)
        return rc;
    if (batch == 0)
        return DPT_OK;
    if (!y || !x || !running_mean || !running_var)
        return dpt_error(DPT_EINVAL, "batchnorm: evaluation forward: y, x, running_mean and "
                                     "running_var are required");
    size_t C = bn->channels, S = bn->spatial;
    for (size_t c = 0; c < C; c++) {
        double k = eval_invstd(bn, running_var[c]);
        double g = gamma ? (double)gamma[c] : 1.0, b = beta ? (double)beta[c] : 0.0;
        channel_affine(y, x, batch, c, C, S, (double)running_mean[c], g * k, b);
    }
    return DPT_OK;
}

/* sum(dy) and, when want_xhat, sum(dy * (x - m) * k) of channel c, in
 * double, samples in order, then positions. */
static void channel_dy_sums(const float *dy, const float *x, size_t batch, size_t c, size_t C,
                            size_t S, double m, double k, int want_xhat, double *sdy, double *sdyx)
{
    double a = 0.0, b = 0.0;
    for (size_t i = 0; i < batch; i++) {
        size_t off = (i * C + c) * S;
        for (size_t s = 0; s < S; s++) {
            double d = (double)dy[off + s];
            a += d;
            if (want_xhat)
                b += d * (((double)x[off + s] - m) * k);
        }
    }
    *sdy = a;
    *sdyx = b;
}

/* dx[s] += a * (dy[s] - u - (x[s] - m) * k * v) for one row, in double,
 * rounded once (the training backward; u = mean(dy), v = mean(dy * xhat)). */
DPT__NN_CLONES
static void dx_train_row(float *restrict dx, const float *restrict dy, const float *restrict x,
                         size_t n, double m, double k, double a, double u, double v)
{
    for (size_t s = 0; s < n; s++) {
        double xhat = ((double)x[s] - m) * k;
        dx[s] = (float)((double)dx[s] + a * ((double)dy[s] - u - xhat * v));
    }
}

/* dx[s] += a * dy[s] for one row, in double, rounded once (evaluation). */
DPT__NN_CLONES
static void dx_eval_row(float *restrict dx, const float *restrict dy, size_t n, double a)
{
    for (size_t s = 0; s < n; s++)
        dx[s] = (float)((double)dx[s] + a * (double)dy[s]);
}

/* The backward passes' common part for channel c, given its mean m and
 * scale k: dgamma and dbeta accumulated, and, for dx, the row loop of the
 * training pass (train != 0) or of the evaluation pass. */
static void channel_backward(float *dx, float *dgamma, float *dbeta, const float *dy,
                             const float *x, size_t batch, size_t c, size_t C, size_t S, double m,
                             double k, double g, int train)
{
    double sdy, sdyx;
    channel_dy_sums(dy, x, batch, c, C, S, m, k, dgamma || (dx && train), &sdy, &sdyx);
    if (dbeta)
        dbeta[c] = (float)((double)dbeta[c] + sdy);
    if (dgamma)
        dgamma[c] = (float)((double)dgamma[c] + sdyx);
    if (!dx)
        return;
    double n = (double)batch * (double)S;
    for (size_t i = 0; i < batch; i++) {
        size_t off = (i * C + c) * S;
        if (train)
            dx_train_row(dx + off, dy + off, x + off, S, m, k, g * k, sdy / n, sdyx / n);
        else
            dx_eval_row(dx + off, dy + off, S, g * k);
    }
}

int dpt_batchnorm_backward_train(const dpt_batchnorm_t *bn, float *dx, float *dgamma, float *dbeta,
                                 const float *dy, const float *x, const float *mean,
                                 const float *invstd, const float *gamma, size_t batch)
{
    int rc = bn_begin(bn, "training backward", batch);
    if (rc != 0)
        return rc;
    if (batch == 0 || (!dx && !dgamma && !dbeta))
        return DPT_OK;
    if (!dy || ((dx || dgamma) && (!x || !mean || !invstd)))
        return dpt_error(DPT_EINVAL, "batchnorm: training backward: dy, and for dx or dgamma x, "
                                     "mean and invstd, are required");
    size_t C = bn->channels, S = bn->spatial;
    int need_x = dx || dgamma;
    for (size_t c = 0; c < C; c++) {
        double m = need_x ? (double)mean[c] : 0.0, k = need_x ? (double)invstd[c] : 0.0;
        double g = gamma ? (double)gamma[c] : 1.0;
        channel_backward(dx, dgamma, dbeta, dy, x, batch, c, C, S, m, k, g, 1);
    }
    return DPT_OK;
}

int dpt_batchnorm_backward_eval(const dpt_batchnorm_t *bn, float *dx, float *dgamma, float *dbeta,
                                const float *dy, const float *x, const float *running_mean,
                                const float *running_var, const float *gamma, size_t batch)
{
    int rc = bn_begin(bn, "evaluation backward", batch);
    if (rc != 0)
        return rc;
    if (batch == 0 || (!dx && !dgamma && !dbeta))
        return DPT_OK;
    if (!dy || ((dx || dgamma) && !running_var) || (dgamma && (!x || !running_mean)))
        return dpt_error(DPT_EINVAL,
                         "batchnorm: evaluation backward: dy, running_var for dx or dgamma, "
                         "and x and running_mean for dgamma, are required");
    size_t C = bn->channels, S = bn->spatial;
    for (size_t c = 0; c < C; c++) {
        double m = dgamma ? (double)running_mean[c] : 0.0;
        double k = dx || dgamma ? eval_invstd(bn, running_var[c]) : 0.0;
        double g = gamma ? (double)gamma[c] : 1.0;
        channel_backward(dx, dgamma, dbeta, dy, x, batch, c, C, S, m, k, g, 0);
    }
    return DPT_OK;
}

/* ---- batch normalization: statistics -------------------------------------- */

int dpt_batchnorm_update_running(const dpt_batchnorm_t *bn, float *running_mean, float *running_var,
                                 const float *mean, const float *var, size_t count, float momentum)
{
    int rc = dpt_batchnorm_check(bn);
    if (rc != 0)
        return rc;
    if (!running_mean || !running_var || !mean || !var)
        return dpt_error(DPT_EINVAL, "batchnorm: update_running: running_mean, running_var, "
                                     "mean and var are required");
    if (count == 0)
        return dpt_error(DPT_EINVAL, "batchnorm: update_running: count is 0 (must be >= 1)");
    if (!(momentum > 0.0f && momentum <= 1.0f))
        return dpt_error(DPT_EINVAL, "batchnorm: update_running: momentum = %g (must be in (0, 1])",
                         (double)momentum);
    double m = (double)momentum, n = (double)count;
    double unbias = count > 1 ? n / (n - 1.0) : 1.0;
    for (size_t c = 0; c < bn->channels; c++) {
        running_mean[c] = (float)((1.0 - m) * (double)running_mean[c] + m * (double)mean[c]);
        running_var[c] = (float)((1.0 - m) * (double)running_var[c] + m * (double)var[c] * unbias);
    }
    return DPT_OK;
}

int dpt_batchnorm_combine_stats(const dpt_batchnorm_t *bn, float *mean, float *var, size_t *count,
                                const float *means, const float *vars, const size_t *counts,
                                size_t parts)
{
    int rc = dpt_batchnorm_check(bn);
    if (rc != 0)
        return rc;
    size_t C = bn->channels, kc, total = 0;
    if (parts == 0)
        return dpt_error(DPT_EINVAL, "batchnorm: combine_stats: parts is 0 (must be >= 1)");
    if (!mean || !var || !means || !vars || !counts)
        return dpt_error(
            DPT_EINVAL, "batchnorm: combine_stats: mean, var, means, vars and counts are required");
    if (dpt_mul_size(parts, C, &kc))
        return dpt_error(DPT_EOVERFLOW,
                         "batchnorm: combine_stats: %zu parts x %zu channels overflow", parts, C);
    for (size_t k = 0; k < parts; k++) {
        if (counts[k] > (size_t)-1 - total)
            return dpt_error(DPT_EOVERFLOW, "batchnorm: combine_stats: the total count overflows");
        total += counts[k];
    }
    if (total == 0)
        return dpt_error(DPT_EINVAL, "batchnorm: combine_stats: every part has count 0");
    /* Channel by channel: every part's values of channel c are read before
     * mean[c] and var[c] are written, which is what makes the update of the
     * first part's rows in place safe. */
    for (size_t c = 0; c < C; c++) {
        double na = 0.0, ma = 0.0, sa = 0.0; /* count, mean, sum of squared deviations */
        for (size_t k = 0; k < parts; k++) {
            if (counts[k] == 0)
                continue;
            double nb = (double)counts[k], mb = (double)means[k * C + c];
            double sb = (double)vars[k * C + c] * nb, n = na + nb, d = mb - ma;
            ma += d * (nb / n);
            sa += sb + d * d * (na * nb / n);
            na = n;
        }
        mean[c] = (float)ma;
        var[c] = (float)(sa / na);
    }
    if (count)
        *count = total;
    return DPT_OK;
}

/* ---- dropout ------------------------------------------------------------- */

/* The checks shared by both passes; *work is rows * cols. */
static int dropout_begin(const char *what, float p, size_t rows, size_t cols, uint64_t row_offset,
                         size_t *work)
{
    if (!(p >= 0.0f && p < 1.0f))
        return dpt_error(DPT_EINVAL, "dropout: %s: p = %g (must be in [0, 1))", what, (double)p);
    if (dpt_mul_size(rows, cols, work))
        return dpt_error(DPT_EOVERFLOW, "dropout: %s: %zu rows x %zu cols overflows", what, rows,
                         cols);
    /* The counter's words: a row index below 2^32, a column block too. */
    const uint64_t lim = (uint64_t)1 << 32;
    if (row_offset > lim || (uint64_t)rows > lim - row_offset)
        return dpt_error(DPT_EINVAL,
                         "dropout: %s: row_offset %llu + %zu rows exceeds 2^32 (global rows)", what,
                         (unsigned long long)row_offset, rows);
    if ((uint64_t)cols > 4 * lim)
        return dpt_error(DPT_EINVAL, "dropout: %s: cols %zu exceeds 2^34", what, cols);
    return DPT_OK;
}

/* out = in * f (forward) or out += in * f (backward, acc != 0) for every
 * element, f recomputed from the key (dpt/norm.h); mask, when not NULL,
 * receives keep = 1, drop = 0. p > 0 here. */
static void dropout_apply(float *out, uint8_t *mask, const float *in, size_t rows, size_t cols,
                          float p, uint64_t seed, uint64_t step, uint64_t row_offset, int acc)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_DROPOUT);
    /* p < 1 in float is at most 1 - 2^-24, so t < 2^32 exactly. */
    uint32_t t = (uint32_t)floor((double)p * 4294967296.0);
    float s = (float)(1.0 / (1.0 - (double)p));
    uint32_t ctr[4] = {0, 0, (uint32_t)step, (uint32_t)(step >> 32)}, w[4];
    for (size_t r = 0; r < rows; r++) {
        ctr[1] = (uint32_t)(row_offset + r);
        float *o = out + r * cols;
        const float *v = in + r * cols;
        uint8_t *mk = mask ? mask + r * cols : NULL;
        for (size_t j0 = 0; j0 < cols; j0 += 4) {
            ctr[0] = (uint32_t)(j0 / 4);
            dpt_philox4x32_10(ctr, rng.key, w);
            for (size_t l = 0; l < 4 && j0 + l < cols; l++) {
                size_t j = j0 + l;
                int keep = w[l] >= t;
                float f = keep ? s : 0.0f;
                if (acc)
                    o[j] += v[j] * f;
                else
                    o[j] = v[j] * f;
                if (mk)
                    mk[j] = (uint8_t)keep;
            }
        }
    }
}

int dpt_dropout_forward(float *y, uint8_t *mask, const float *x, size_t rows, size_t cols, float p,
                        uint64_t seed, uint64_t step, uint64_t row_offset)
{
    size_t n;
    int rc = dropout_begin("forward", p, rows, cols, row_offset, &n);
    if (rc != 0)
        return rc;
    if (n == 0)
        return DPT_OK;
    if (!y || !x)
        return dpt_error(DPT_EINVAL, "dropout: forward: y and x are required");
    if (p == 0.0f) {
        if (y != x)
            memmove(y, x, n * sizeof(float));
        if (mask)
            memset(mask, 1, n);
        return DPT_OK;
    }
    dropout_apply(y, mask, x, rows, cols, p, seed, step, row_offset, 0);
    return DPT_OK;
}

int dpt_dropout_backward(float *dx, const float *dy, size_t rows, size_t cols, float p,
                         uint64_t seed, uint64_t step, uint64_t row_offset)
{
    size_t n;
    int rc = dropout_begin("backward", p, rows, cols, row_offset, &n);
    if (rc != 0)
        return rc;
    if (n == 0 || !dx)
        return DPT_OK;
    if (!dy)
        return dpt_error(DPT_EINVAL, "dropout: backward: dy is required");
    if (p == 0.0f) {
        for (size_t i = 0; i < n; i++)
            dx[i] += dy[i];
        return DPT_OK;
    }
    dropout_apply(dx, NULL, dy, rows, cols, p, seed, step, row_offset, 1);
    return DPT_OK;
}
