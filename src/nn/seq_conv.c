/*
 * The image layers of a sequential stack: conv2d, max and average pooling
 * and flatten (and dropout, which any stack may hold), on rows that hold one NCHW image each (dpt/conv.h's kernels
 * on the whole batch at once). The kernels accumulate; the stack's modes
 * that store (DPT__STORE_GRADS, DPT__STORE_DX) zero the target first.
 */
#include "dpt/conv.h"
#include "dpt/nn.h"
#include "dpt/norm.h"
#include "dpt/status.h"
#include "conv_impl.h"
#include "seq_impl.h"

#include <string.h>

int dpt__seq_conv_geometry(const dpt_layer_spec_t *sp, dpt_shape_t in, dpt__layer_t *l,
                           dpt_shape_t *out)
{
    size_t sh = sp->stride_h, sw = sp->stride_w;
    int rc;
    if (sp->kind == DPT_LAYER_CONV2D) {
        dpt_conv2d_t cv = {in.c,        in.h,           in.w,         sp->out,
                           sp->kh,      sp->kw,         sh ? sh : 1,  sw ? sw : 1,
                           sp->pad_top, sp->pad_bottom, sp->pad_left, sp->pad_right};
        if (sp->out == 0)
            return dpt_error(DPT_EINVAL, "0 output channels");
        rc = sp->pad_same ? dpt_conv2d_same(&cv) : dpt_conv2d_check(&cv);
        if (rc)
            return rc;
        l->cv = cv;
        *out = (dpt_shape_t){cv.out_c, dpt_conv2d_out_h(&cv), dpt_conv2d_out_w(&cv)};
        return DPT_OK;
    }
    dpt_pool2d_t p = {in.c,
                      in.h,
                      in.w,
                      sp->kh,
                      sp->kw,
                      sh ? sh : sp->kh,
                      sw ? sw : sp->kw,
                      sp->pad_top,
                      sp->pad_bottom,
                      sp->pad_left,
                      sp->pad_right,
                      sp->count_pad};
    if (sp->pad_same) {
        /* SAME padding for a window, as for a kernel (dpt_conv2d_same()). */
        dpt_conv2d_t cv = {in.c, in.h, in.w, 1, p.kh, p.kw, p.stride_h, p.stride_w, 0, 0, 0, 0};
        if ((rc = dpt_conv2d_same(&cv)) != 0)
            return rc;
        p.pad_top = cv.pad_top, p.pad_bottom = cv.pad_bottom;
        p.pad_left = cv.pad_left, p.pad_right = cv.pad_right;
    }
    if ((rc = dpt_pool2d_check(&p)) != 0)
        return rc;
    l->pool = p;
    *out = (dpt_shape_t){p.channels, dpt_pool2d_out_h(&p), dpt_pool2d_out_w(&p)};
    return DPT_OK;
}

/* ---- conv2d ---------------------------------------------------------------- */

static void dpt__seq_conv_forward(const dpt__layer_t *l, const float *params, const float *x,
                                  float *y, size_t batch)
{
    /* The geometry was checked at create and the arrays are the stack's. */
    (void)dpt_conv2d_forward(&l->cv, y, x, params + l->w_off, params + l->b_off, batch, l->ws);
}

static void dpt__seq_conv_backward(const dpt__layer_t *l, const float *params, float *grads,
                                   const float *x, const float *y, const float *dy, float *dx,
                                   size_t batch, unsigned mode)
{
    (void)y;
    float *dw = grads + l->w_off, *db = grads + l->b_off;
    if (mode & DPT__STORE_GRADS) {
        memset(dw, 0, l->cv.out_c * l->cv.in_c * l->cv.kh * l->cv.kw * sizeof(float));
        memset(db, 0, l->cv.out_c * sizeof(float));
    }
    if (dx && (mode & DPT__STORE_DX))
        memset(dx, 0, batch * l->in * sizeof(float));
    (void)dpt_conv2d_backward(&l->cv, dx, dw, db, dy, x, params + l->w_off, batch, l->ws);
}

const dpt__layer_ops_t dpt__seq_conv2d_ops = {"conv2d", 1, dpt__seq_conv_forward,
                                              dpt__seq_conv_backward};

/* ---- pooling --------------------------------------------------------------- */

static void dpt__seq_maxpool_forward(const dpt__layer_t *l, const float *params, const float *x,
                                     float *y, size_t batch)
{
    (void)params;
    if (l->idx)
        (void)dpt__maxpool2d_forward_idx(&l->pool, y, l->idx, x, batch);
    else
        (void)dpt_maxpool2d_forward(&l->pool, y, x, batch);
}

static void dpt__seq_maxpool_backward(const dpt__layer_t *l, const float *params, float *grads,
                                      const float *x, const float *y, const float *dy, float *dx,
                                      size_t batch, unsigned mode)
{
    (void)params, (void)grads, (void)y;
    if (!dx)
        return;
    if ((mode & DPT__STORE_DX) && l->idx)
        (void)dpt__maxpool2d_backward_store_idx(&l->pool, dx, dy, l->idx, batch);
    else if (mode & DPT__STORE_DX)
        (void)dpt__maxpool2d_backward_store(&l->pool, dx, dy, x, batch);
    else
        (void)dpt_maxpool2d_backward(&l->pool, dx, dy, x, batch);
}

static void dpt__seq_avgpool_forward(const dpt__layer_t *l, const float *params, const float *x,
                                     float *y, size_t batch)
{
    (void)params;
    (void)dpt_avgpool2d_forward(&l->pool, y, x, batch);
}

static void dpt__seq_avgpool_backward(const dpt__layer_t *l, const float *params, float *grads,
                                      const float *x, const float *y, const float *dy, float *dx,
                                      size_t batch, unsigned mode)
{
    (void)params, (void)grads, (void)x, (void)y;
    if (!dx)
        return;
    if (mode & DPT__STORE_DX)
        memset(dx, 0, batch * l->in * sizeof(float));
    (void)dpt_avgpool2d_backward(&l->pool, dx, dy, batch);
}

const dpt__layer_ops_t dpt__seq_maxpool_ops = {"maxpool2d", 0, dpt__seq_maxpool_forward,
                                               dpt__seq_maxpool_backward};
const dpt__layer_ops_t dpt__seq_avgpool_ops = {"avgpool2d", 0, dpt__seq_avgpool_forward,
                                               dpt__seq_avgpool_backward};

/* ---- flatten --------------------------------------------------------------- */

/* Flatten, and dropout outside training: the values pass unchanged. */
static void dpt__seq_flatten_forward(const dpt__layer_t *l, const float *params, const float *x,
                                     float *y, size_t batch)
{
    (void)params;
    memcpy(y, x, batch * l->in * sizeof(float));
}

static void dpt__seq_flatten_backward(const dpt__layer_t *l, const float *params, float *grads,
                                      const float *x, const float *y, const float *dy, float *dx,
                                      size_t batch, unsigned mode)
{
    (void)params, (void)grads, (void)x, (void)y;
    size_t n = batch * l->in;
    if (!dx)
        return;
    if (mode & DPT__STORE_DX)
        memcpy(dx, dy, n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++)
            dx[i] += dy[i];
}

const dpt__layer_ops_t dpt__seq_flatten_ops = {"flatten", 0, dpt__seq_flatten_forward,
                                               dpt__seq_flatten_backward};

/* ---- dropout ---------------------------------------------------------------- */

/* The layer's own seed: the stack's mixed with its position (splitmix64),
 * so two dropout layers of a stack draw different masks. */
static uint64_t dpt__seq_dropout_seed(const dpt__layer_t *l)
{
    uint64_t z = l->noise->seed + 0x9e3779b97f4a7c15ull * (uint64_t)(l->pos + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Row r's key: its pass and its position in the pass. */
static void dpt__seq_dropout_key(const dpt__layer_t *l, size_t r, uint64_t *step, uint64_t *row)
{
    const int32_t *k = l->noise->keys;
    *step = k ? (uint64_t)(uint32_t)k[2 * r] : 0;
    *row = k ? (uint64_t)(uint32_t)k[2 * r + 1] : r;
}

static void dpt__seq_dropout_forward(const dpt__layer_t *l, const float *params, const float *x,
                                     float *y, size_t batch)
{
    if (!l->noise->train || l->spec.rate == 0.0f) {
        dpt__seq_flatten_forward(l, params, x, y, batch);
        return;
    }
    uint64_t seed = dpt__seq_dropout_seed(l), step, row;
    for (size_t r = 0; r < batch; r++) {
        dpt__seq_dropout_key(l, r, &step, &row);
        /* Checked at create (rate) and by the keys' type (rows below 2^32). */
        (void)dpt_dropout_forward(y + r * l->in, NULL, x + r * l->in, 1, l->in, l->spec.rate, seed,
                                  step, row);
    }
}

static void dpt__seq_dropout_backward(const dpt__layer_t *l, const float *params, float *grads,
                                      const float *x, const float *y, const float *dy, float *dx,
                                      size_t batch, unsigned mode)
{
    if (!l->noise->train || l->spec.rate == 0.0f) {
        dpt__seq_flatten_backward(l, params, grads, x, y, dy, dx, batch, mode);
        return;
    }
    if (!dx)
        return;
    if (mode & DPT__STORE_DX)
        memset(dx, 0, batch * l->in * sizeof(float));
    uint64_t seed = dpt__seq_dropout_seed(l), step, row;
    for (size_t r = 0; r < batch; r++) {
        dpt__seq_dropout_key(l, r, &step, &row);
        (void)dpt_dropout_backward(dx + r * l->in, dy + r * l->in, 1, l->in, l->spec.rate, seed,
                                   step, row);
    }
}

const dpt__layer_ops_t dpt__seq_dropout_ops = {"dropout", 0, dpt__seq_dropout_forward,
                                               dpt__seq_dropout_backward};
