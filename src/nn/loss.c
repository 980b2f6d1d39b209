/*
 * Losses and action distributions. Log-sum-exp is computed around the row
 * maximum, with sums in double, so large logits neither overflow nor lose
 * the small probabilities. Its exp and log are nn_impl.h's, made of fused
 * multiply-adds: the functions that use them are cloned per ISA
 * (DPT__NN_CLONES) so that those are instructions, not libm calls.
 */
#include "dpt/nn.h"
#include "dpt/status.h"
#include "nn/nn_impl.h"

#include <math.h>

#define DPT_LOG_2PI 1.8378770664093454835606594728112

/* log sum_k exp(z_k) of one row; also its maximum and sum_k exp(z_k - max),
 * so that a probability is exp(z_j - max) / sum (dpt__softmax_p): the same
 * bits as the batched form in dpt__categorical_logp_ex. */
static inline double dpt__logsumexp(const float *z, size_t k, float *zmax, double *sum)
{
    float m = z[0];
    for (size_t j = 1; j < k; j++)
        if (z[j] > m)
            m = z[j];
    double s = 0.0;
    for (size_t j = 0; j < k; j++)
        s += dpt__exp_nonpos((double)(z[j] - m));
    *zmax = m;
    *sum = s;
    return (double)m + dpt__log_pos(s);
}

static inline double dpt__softmax_p(float z, float zmax, double sum)
{
    return dpt__exp_nonpos((double)(z - zmax)) / sum;
}

static int dpt__check_finite(const char *what, const float *x, size_t rows, size_t cols)
{
    if (dpt_vec_all_finite(x, rows * cols))
        return DPT_OK;
    size_t i = dpt_vec_first_nonfinite(x, rows * cols);
    return dpt_error(DPT_ENUMERIC, "%s: row %zu column %zu is %g", what, i / cols, i % cols,
                     (double)x[i]);
}

DPT__NN_CLONES
int dpt_loss_softmax_xent(const float *logits, const int32_t *labels, size_t batch, size_t classes,
                          float *dlogits, double *loss, size_t *correct)
{
    if (batch == 0 || classes == 0)
        return dpt_error(DPT_EINVAL, "softmax cross-entropy: %zu rows, %zu classes", batch,
                         classes);
    for (size_t b = 0; b < batch; b++)
        if (labels[b] < 0 || (size_t)labels[b] >= classes)
            return dpt_error(DPT_EINVAL,
                             "softmax cross-entropy: label %d in row %zu is outside [0, %zu)",
                             (int)labels[b], b, classes);
    int rc = dpt__check_finite("softmax cross-entropy logits", logits, batch, classes);
    if (rc)
        return rc;
    double total = 0.0, inv_b = 1.0 / (double)batch;
    size_t hits = 0;
    for (size_t b = 0; b < batch; b++) {
        const float *z = logits + b * classes;
        float zmax;
        double sum, lse = dpt__logsumexp(z, classes, &zmax, &sum);
        total += lse - (double)z[labels[b]];
        size_t arg = 0;
        for (size_t j = 1; j < classes; j++)
            if (z[j] > z[arg])
                arg = j;
        hits += arg == (size_t)labels[b];
        if (dlogits) {
            float *dz = dlogits + b * classes;
            for (size_t j = 0; j < classes; j++) {
                double p = dpt__softmax_p(z[j], zmax, sum);
                dz[j] += (float)((p - (j == (size_t)labels[b] ? 1.0 : 0.0)) * inv_b);
            }
        }
    }
    *loss = total * inv_b;
    if (correct)
        *correct = hits;
    return DPT_OK;
}

int dpt_loss_mse(const float *y, const float *target, size_t batch, size_t dim, float *dy,
                 double *loss)
{
    if (batch == 0 || dim == 0)
        return dpt_error(DPT_EINVAL, "mean squared error: %zu rows, %zu columns", batch, dim);
    int rc = dpt__check_finite("mean squared error prediction", y, batch, dim);
    if (!rc)
        rc = dpt__check_finite("mean squared error target", target, batch, dim);
    if (rc)
        return rc;
    size_t n = batch * dim;
    double total = 0.0, scale = 2.0 / (double)n;
    for (size_t i = 0; i < n; i++) {
        double d = (double)y[i] - (double)target[i];
        total += d * d;
        if (dy)
            dy[i] += (float)(scale * d);
    }
    *loss = total / (double)n;
    return DPT_OK;
}

int dpt_loss_huber(const float *y, const float *target, size_t batch, size_t dim, double delta,
                   float *dy, double *loss)
{
    if (batch == 0 || dim == 0 || !(delta > 0.0))
        return dpt_error(DPT_EINVAL, "huber loss: %zu rows, %zu columns, delta %g", batch, dim,
                         delta);
    int rc = dpt__check_finite("huber loss prediction", y, batch, dim);
    if (!rc)
        rc = dpt__check_finite("huber loss target", target, batch, dim);
    if (rc)
        return rc;
    size_t n = batch * dim;
    double total = 0.0, inv = 1.0 / (double)n;
    for (size_t i = 0; i < n; i++) {
        double d = (double)y[i] - (double)target[i], a = fabs(d);
        total += a <= delta ? 0.5 * d * d : delta * (a - 0.5 * delta);
        if (dy)
            dy[i] += (float)(inv * (a <= delta ? d : (d > 0.0 ? delta : -delta)));
    }
    *loss = total * inv;
    return DPT_OK;
}

DPT__NN_CLONES
static void dpt__exp_nonpos_vec(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = dpt__exp_nonpos(x[i]);
}

DPT__NN_CLONES
static void dpt__lse_vec(const double *zmax, const double *sum, double *lse, size_t n)
{
    for (size_t i = 0; i < n; i++)
        lse[i] = zmax[i] + dpt__log_pos(sum[i]);
}

/* The cache's rows in passes over the whole batch, so that the exps and the
 * logs vectorise; each value has the bits of the row-by-row form
 * (dpt__logsumexp, dpt__softmax_p). p holds exp(z - max) first, h the sums
 * and lse the maxima until the logs. */
static void dpt__categorical_batch(const float *logits, size_t batch, size_t k,
                                   dpt__categorical_cache_t *c)
{
    for (size_t b = 0; b < batch; b++) {
        const float *z = logits + b * k;
        float m = z[0];
        for (size_t j = 1; j < k; j++)
            if (z[j] > m)
                m = z[j];
        for (size_t j = 0; j < k; j++)
            c->p[b * k + j] = (double)(z[j] - m);
        c->lse[b] = (double)m;
    }
    dpt__exp_nonpos_vec(c->p, batch * k);
    for (size_t b = 0; b < batch; b++) {
        double s = 0.0;
        for (size_t j = 0; j < k; j++)
            s += c->p[b * k + j];
        c->h[b] = s;
    }
    dpt__lse_vec(c->lse, c->h, c->lse, batch);
    for (size_t b = 0; b < batch; b++) {
        const float *z = logits + b * k;
        double s = c->h[b], lse = c->lse[b], h = 0.0;
        for (size_t j = 0; j < k; j++) {
            double p = c->p[b * k + j] / s;
            c->p[b * k + j] = p;
            h -= p * ((double)z[j] - lse);
        }
        c->h[b] = h;
    }
}

int dpt_categorical_logp(const float *logits, size_t batch, size_t k, const int32_t *actions,
                         float *logp, float *entropy)
{
    return dpt__categorical_logp_ex(logits, batch, k, actions, logp, entropy, NULL);
}

DPT__NN_CLONES
int dpt__categorical_logp_ex(const float *logits, size_t batch, size_t k, const int32_t *actions,
                             float *logp, float *entropy, dpt__categorical_cache_t *cache)
{
    if (batch == 0 || k == 0)
        return dpt_error(DPT_EINVAL, "categorical: %zu rows, %zu actions", batch, k);
    int rc = dpt__check_finite("categorical logits", logits, batch, k);
    if (rc)
        return rc;
    if (logp && actions)
        for (size_t b = 0; b < batch; b++)
            if (actions[b] < 0 || (size_t)actions[b] >= k)
                return dpt_error(DPT_EINVAL,
                                 "categorical: action %d in row %zu is outside [0, %zu)",
                                 (int)actions[b], b, k);
    if (cache) {
        dpt__categorical_batch(logits, batch, k, cache);
        for (size_t b = 0; b < batch; b++) {
            if (logp)
                logp[b] =
                    actions ? (float)((double)logits[b * k + actions[b]] - cache->lse[b]) : 0.0f;
            if (entropy)
                entropy[b] = (float)cache->h[b];
        }
        return DPT_OK;
    }
    for (size_t b = 0; b < batch; b++) {
        const float *z = logits + b * k;
        float zmax;
        double sum, lse = dpt__logsumexp(z, k, &zmax, &sum);
        if (logp)
            logp[b] = actions ? (float)((double)z[actions[b]] - lse) : 0.0f;
        if (entropy) {
            double h = 0.0;
            for (size_t j = 0; j < k; j++)
                h -= dpt__softmax_p(z[j], zmax, sum) * ((double)z[j] - lse);
            entropy[b] = (float)h;
        }
    }
    return DPT_OK;
}

void dpt_categorical_backward(const float *logits, size_t batch, size_t k, const int32_t *actions,
                              const float *dlogp, const float *dentropy, float *dlogits)
{
    dpt__categorical_backward_ex(logits, batch, k, actions, dlogp, dentropy, dlogits, NULL);
}

DPT__NN_CLONES
void dpt__categorical_backward_ex(const float *logits, size_t batch, size_t k,
                                  const int32_t *actions, const float *dlogp, const float *dentropy,
                                  float *dlogits, const dpt__categorical_cache_t *cache)
{
    for (size_t b = 0; b < batch; b++) {
        const float *z = logits + b * k;
        float *dz = dlogits + b * k;
        float zmax = 0.0f;
        double sum = 1.0, lse = cache ? cache->lse[b] : dpt__logsumexp(z, k, &zmax, &sum);
        double gl = dlogp ? (double)dlogp[b] : 0.0;
        double ge = dentropy ? (double)dentropy[b] : 0.0;
        double h = 0.0;
        if (ge != 0.0 && cache)
            h = cache->h[b];
        else if (ge != 0.0)
            for (size_t j = 0; j < k; j++)
                h -= dpt__softmax_p(z[j], zmax, sum) * ((double)z[j] - lse);
        for (size_t j = 0; j < k; j++) {
            double lp = (double)z[j] - lse;
            double p = cache ? cache->p[b * k + j] : dpt__softmax_p(z[j], zmax, sum);
            double g = 0.0;
            if (gl != 0.0)
                g += gl * ((actions && (size_t)actions[b] == j ? 1.0 : 0.0) - p);
            if (ge != 0.0)
                g += ge * (-p * (lp + h));
            dz[j] += (float)g;
        }
    }
}

DPT__NN_CLONES
int dpt_categorical_sample(const float *logits, size_t batch, size_t k, dpt_rng_t *rng,
                           int32_t *actions, float *logp)
{
    if (batch == 0 || k == 0)
        return dpt_error(DPT_EINVAL, "categorical: %zu rows, %zu actions", batch, k);
    int rc = dpt__check_finite("categorical logits", logits, batch, k);
    if (rc)
        return rc;
    for (size_t b = 0; b < batch; b++) {
        const float *z = logits + b * k;
        float zmax;
        double sum, lse = dpt__logsumexp(z, k, &zmax, &sum);
        /* Inverse CDF on one uniform draw: deterministic given the stream. */
        double u = dpt_rng_uniform_double(rng), acc = 0.0;
        size_t a = k - 1;
        for (size_t j = 0; j < k; j++) {
            acc += dpt__softmax_p(z[j], zmax, sum);
            if (u < acc) {
                a = j;
                break;
            }
        }
        actions[b] = (int32_t)a;
        if (logp)
            logp[b] = (float)((double)z[a] - lse);
    }
    return DPT_OK;
}

void dpt_categorical_argmax(const float *logits, size_t batch, size_t k, int32_t *actions)
{
    for (size_t b = 0; b < batch; b++) {
        const float *z = logits + b * k;
        size_t arg = 0;
        for (size_t j = 1; j < k; j++)
            if (z[j] > z[arg])
                arg = j;
        actions[b] = (int32_t)arg;
    }
}

int dpt_gaussian_logp(const float *mean, const float *log_std, size_t batch, size_t dim,
                      const float *actions, float *logp, float *entropy)
{
    if (batch == 0 || dim == 0)
        return dpt_error(DPT_EINVAL, "gaussian: %zu rows, %zu dimensions", batch, dim);
    int rc = dpt__check_finite("gaussian mean", mean, batch, dim);
    if (!rc)
        rc = dpt__check_finite("gaussian log_std", log_std, 1, dim);
    if (!rc && actions && logp)
        rc = dpt__check_finite("gaussian actions", actions, batch, dim);
    if (rc)
        return rc;
    double h = 0.0;
    for (size_t d = 0; d < dim; d++)
        h += (double)log_std[d] + 0.5 * (1.0 + DPT_LOG_2PI);
    for (size_t b = 0; b < batch; b++) {
        if (logp) {
            double lp = 0.0;
            for (size_t d = 0; d < dim; d++) {
                double s = exp((double)log_std[d]);
                double z = ((double)actions[b * dim + d] - (double)mean[b * dim + d]) / s;
                lp += -0.5 * z * z - (double)log_std[d] - 0.5 * DPT_LOG_2PI;
            }
            logp[b] = (float)lp;
        }
        if (entropy)
            entropy[b] = (float)h;
    }
    return DPT_OK;
}

void dpt_gaussian_backward(const float *mean, const float *log_std, size_t batch, size_t dim,
                           const float *actions, const float *dlogp, const float *dentropy,
                           float *dmean, float *dlog_std)
{
    for (size_t d = 0; d < dim; d++) {
        double inv_var = exp(-2.0 * (double)log_std[d]);
        double gls = 0.0;
        for (size_t b = 0; b < batch; b++) {
            double gl = dlogp ? (double)dlogp[b] : 0.0;
            double ge = dentropy ? (double)dentropy[b] : 0.0;
            double diff = (double)actions[b * dim + d] - (double)mean[b * dim + d];
            if (dmean)
                dmean[b * dim + d] += (float)(gl * diff * inv_var);
            gls += gl * (diff * diff * inv_var - 1.0) + ge;
        }
        if (dlog_std)
            dlog_std[d] += (float)gls;
    }
}

void dpt_gaussian_sample(const float *mean, const float *log_std, size_t batch, size_t dim,
                         dpt_rng_t *rng, float *actions, float *logp)
{
    for (size_t b = 0; b < batch; b++) {
        double lp = 0.0;
        for (size_t d = 0; d < dim; d++) {
            double z = dpt_rng_normal(rng);
            actions[b * dim + d] = (float)((double)mean[b * dim + d] + exp((double)log_std[d]) * z);
            lp += -0.5 * z * z - (double)log_std[d] - 0.5 * DPT_LOG_2PI;
        }
        if (logp)
            logp[b] = (float)lp;
    }
}
