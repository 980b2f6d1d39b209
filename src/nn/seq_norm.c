/*
 * The batch-normalization layer of a sequential stack (dpt/norm.h's
 * kernels on the whole batch at once).
 *
 * Four variables: gamma ("<i>.weight", ones), beta ("<i>.bias", zeros),
 * running_mean (zeros) and running_var (ones), one value per channel. While
 * training (the stack's train flag, dpt_seq_set_dropout()) the forward pass
 * normalizes with the batch's statistics and keeps them; the backward pass
 * then writes, beside the gradients of gamma and beta, the update of the
 * running statistics into their gradient slots:
 *     d running_mean = m * (mean - running_mean)
 *     d running_var  = m * (var * n / (n - 1) - running_var)
 * (PyTorch's rule with momentum m; n the values per channel, var the
 * biased variance), which the optimizer adds as it is (dpt/optim.h,
 * "running statistics"). Outside training the forward pass uses the running
 * statistics and the update is 0.
 */
#include "dpt/nn.h"
#include "dpt/norm.h"
#include "dpt/status.h"
#include "seq_impl.h"

#include <string.h>

/* The momentum and eps of a layer (0: PyTorch's defaults). */
float dpt__seq_bn_momentum(const dpt_layer_spec_t *sp)
{
    return sp->rate > 0.0f ? sp->rate : 0.1f;
}

float dpt__seq_bn_eps(const dpt_layer_spec_t *sp)
{
    return sp->gain > 0.0f ? sp->gain : 1e-5f;
}

static dpt_batchnorm_t dpt__seq_bn(const dpt__layer_t *l)
{
    return (dpt_batchnorm_t){l->ishape.c, l->ishape.h * l->ishape.w, dpt__seq_bn_eps(&l->spec)};
}

static void dpt__seq_bn_forward(const dpt__layer_t *l, const float *params, const float *x,
                                float *y, size_t batch)
{
    dpt_batchnorm_t bn = dpt__seq_bn(l);
    size_t C = bn.channels;
    const float *gamma = params + l->w_off, *beta = params + l->b_off;
    /* The descriptor was checked at create: these cannot fail. */
    if (l->noise->train)
        (void)dpt_batchnorm_forward_train(&bn, y, l->bn, l->bn + C, l->bn + 2 * C, x, gamma, beta,
                                          batch);
    else
        (void)dpt_batchnorm_forward_eval(&bn, y, x, params + l->rm_off, params + l->rv_off, gamma,
                                         beta, batch);
}

static void dpt__seq_bn_backward(const dpt__layer_t *l, const float *params, float *grads,
                                 const float *x, const float *y, const float *dy, float *dx,
                                 size_t batch, unsigned mode)
{
    (void)y;
    dpt_batchnorm_t bn = dpt__seq_bn(l);
    size_t C = bn.channels;
    const float *gamma = params + l->w_off;
    float *dg = grads + l->w_off, *db = grads + l->b_off;
    float *drm = grads + l->rm_off, *drv = grads + l->rv_off;
    if (mode & DPT__STORE_GRADS) {
        memset(dg, 0, C * sizeof *dg);
        memset(db, 0, C * sizeof *db);
        memset(drm, 0, C * sizeof *drm);
        memset(drv, 0, C * sizeof *drv);
    }
    if (dx && (mode & DPT__STORE_DX))
        memset(dx, 0, batch * l->in * sizeof *dx);
    if (!l->noise->train) {
        (void)dpt_batchnorm_backward_eval(&bn, dx, dg, db, dy, x, params + l->rm_off,
                                          params + l->rv_off, gamma, batch);
        return;
    }
    (void)dpt_batchnorm_backward_train(&bn, dx, dg, db, dy, x, l->bn, l->bn + C, gamma, batch);
    /* The running statistics' update, in double, rounded once. */
    double m = (double)dpt__seq_bn_momentum(&l->spec);
    double n = (double)batch * (double)bn.spatial;
    double unbias = n > 1.0 ? n / (n - 1.0) : 1.0;
    const float *rm = params + l->rm_off, *rv = params + l->rv_off;
    for (size_t c = 0; c < C; c++) {
        double um = m * ((double)l->bn[c] - (double)rm[c]);
        double uv = m * ((double)l->bn[2 * C + c] * unbias - (double)rv[c]);
        drm[c] = (float)((double)drm[c] + um);
        drv[c] = (float)((double)drv[c] + uv);
    }
}

const dpt__layer_ops_t dpt__seq_batchnorm_ops = {"batchnorm", 1, dpt__seq_bn_forward,
                                                 dpt__seq_bn_backward};
