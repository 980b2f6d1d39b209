/*
 * Layers and sequential stacks.
 *
 * Each layer kind is one entry of a const ops table (name, parameter
 * tensors, output size, init, forward, backward); the stack walks the table.
 * The image layers (conv2d, pooling, flatten) are in seq_conv.c.
 * Activations are kept per layer for the backward pass; input gradients go
 * through two ping-pong buffers. Everything is sized at create.
 */
#include "dpt/gemm.h"
#include "dpt/nn.h"
#include "dpt/status.h"
#include "conv_impl.h"
#include "gemm_impl.h"
#include "nn_impl.h"
#include "seq_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* linear: y = x W^T + b
 *   x [B, I], W [O, I], b [O], y [B, O]
 *   dW += dy^T x   [O, I]
 *   db += sum_b dy [O]
 *   dx += dy W     [B, I] */
static void dpt__linear_forward(const dpt__layer_t *l, const float *params, const float *x,
                                float *y, size_t batch)
{
    const float *w = params + l->w_off, *b = params + l->b_off;
    for (size_t r = 0; r < batch; r++)
        memcpy(y + r * l->out, b, l->out * sizeof(float));
    dpt_gemm(0, 1, batch, l->out, l->in, 1.0f, x, l->in, w, l->in, 1.0f, y, l->out);
}

/* db (+)= the column sums of dy [rows, cols], each column summed from the
 * first row down (stored: from dy's first row; added: from db). Blocks of
 * 64 columns stay in registers over the rows. */
DPT__NN_CLONES
static void dpt__bias_grad(const float *dy, size_t rows, size_t cols, float *db, int store)
{
    enum { W = 64 };
    size_t o = 0;
    for (; o + W <= cols; o += W) {
        float acc[W];
        size_t r = store ? 1 : 0;
        for (int k = 0; k < W; k++)
            acc[k] = store ? dy[o + k] : db[o + k];
        for (; r < rows; r++)
            for (int k = 0; k < W; k++)
                acc[k] += dy[r * cols + o + k];
        for (int k = 0; k < W; k++)
            db[o + k] = acc[k];
    }
    for (; o < cols; o++) {
        float s = store ? dy[o] : db[o];
        for (size_t r = store ? 1 : 0; r < rows; r++)
            s += dy[r * cols + o];
        db[o] = s;
    }
}

static void dpt__linear_backward(const dpt__layer_t *l, const float *params, float *grads,
                                 const float *x, const float *y, const float *dy, float *dx,
                                 size_t batch, unsigned mode)
{
    (void)y;
    float *dw = grads + l->w_off, *db = grads + l->b_off;
    int store = (mode & DPT__STORE_GRADS) != 0;
    /* Stored gradients skip reading C in the product (beta = 0) and start
     * the bias sums from the first row (the same sums as from zero). */
    dpt_gemm(1, 0, l->out, l->in, batch, 1.0f, dy, l->out, x, l->in, store ? 0.0f : 1.0f, dw,
             l->in);
    dpt__bias_grad(dy, batch, l->out, db, store);
    if (dx)
        dpt_gemm(0, 0, batch, l->in, l->out, 1.0f, dy, l->out, params + l->w_off, l->in,
                 (mode & DPT__STORE_DX) ? 0.0f : 1.0f, dx, l->in);
}

/* ReLU works on bit patterns: a float compare-and-select does not vectorise
 * in ISO C (the compare may trap), integer masks do. x > 0 as a float is
 * "sign bit clear and not +0", which is the signed integer test bits > 0
 * (this also passes +NaN through, which the input checks exclude). The
 * backward mask uses y > 0, i.e. y's bits are non-zero (y is +0 or > 0). */
static void dpt__relu_forward(const dpt__layer_t *l, const float *params, const float *x, float *y,
                              size_t batch)
{
    (void)params;
    size_t n = batch * l->out;
    for (size_t i = 0; i < n; i++) {
        union {
            float f;
            int32_t i;
        } u = {x[i]};
        u.i &= -(int32_t)(u.i > 0);
        y[i] = u.f;
    }
}

static void dpt__relu_backward(const dpt__layer_t *l, const float *params, float *grads,
                               const float *x, const float *y, const float *dy, float *dx,
                               size_t batch, unsigned mode)
{
    (void)params, (void)grads, (void)x;
    if (!dx)
        return;
    size_t n = batch * l->out;
    int add = !(mode & DPT__STORE_DX);
    for (size_t i = 0; i < n; i++) {
        union {
            float f;
            int32_t i;
        } uy = {y[i]}, ud = {dy[i]};
        ud.i &= -(int32_t)(uy.i != 0);
        dx[i] = add ? dx[i] + ud.f : ud.f;
    }
}

/* The loop is compiled for AVX2 and for the baseline (nn_impl.h). */
DPT__NN_CLONES
static void dpt__tanh_vec(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = dpt__tanhf(x[i]);
}

static void dpt__tanh_forward(const dpt__layer_t *l, const float *params, const float *x, float *y,
                              size_t batch)
{
    (void)params;
    dpt__tanh_vec(x, y, batch * l->out);
}

/* dx (+)= dy * (1 - y^2), the factor as one fused multiply-add. */
DPT__NN_CLONES
static void dpt__tanh_grad(const float *y, const float *dy, float *dx, size_t n, int add)
{
    if (add)
        for (size_t i = 0; i < n; i++)
            dx[i] += dy[i] * fmaf(-y[i], y[i], 1.0f);
    else
        for (size_t i = 0; i < n; i++)
            dx[i] = dy[i] * fmaf(-y[i], y[i], 1.0f);
}

static void dpt__tanh_backward(const dpt__layer_t *l, const float *params, float *grads,
                               const float *x, const float *y, const float *dy, float *dx,
                               size_t batch, unsigned mode)
{
    (void)params, (void)grads, (void)x;
    if (dx)
        dpt__tanh_grad(y, dy, dx, batch * l->out, !(mode & DPT__STORE_DX));
}

/* A linear layer followed by ReLU or tanh, in one go: the product without
 * the bias (beta = 0, so no bias rows are copied in and read back), then
 * y = f(z + b) in one pass. z + b has the bits of the bias-then-beta = 1
 * product when K fits one chunk of the kernel (dpt/gemm.h: every element is
 * acc + c); for longer K the bias is added after the last chunk instead of
 * before the first, a fixed order either way. z, the linear layer's buffer,
 * is left without the bias: nothing reads it (the activation's backward uses
 * its output y, the linear layer's its input x). */
static void dpt__bias_relu(const dpt__layer_t *l, const float *b, const float *z, float *y,
                           size_t batch)
{
    for (size_t r = 0; r < batch; r++) {
        const float *zr = z + r * l->out;
        float *yr = y + r * l->out;
        for (size_t o = 0; o < l->out; o++) {
            union {
                float f;
                int32_t i;
            } u = {zr[o] + b[o]};
            u.i &= -(int32_t)(u.i > 0);
            yr[o] = u.f;
        }
    }
}

DPT__NN_CLONES
static void dpt__bias_tanh_rows(const float *b, const float *z, float *y, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t o = 0; o < n; o++)
            y[r * n + o] = dpt__tanhf(z[r * n + o] + b[o]);
}

static void dpt__bias_tanh(const dpt__layer_t *l, const float *b, const float *z, float *y,
                           size_t batch)
{
    dpt__bias_tanh_rows(b, z, y, batch, l->out);
}

/* y = act(z + b), act DPT_LAYER_RELU or DPT_LAYER_TANH. */
static void dpt__bias_act(const dpt__layer_t *l, int act, const float *b, const float *z, float *y,
                          size_t batch)
{
    if (act == DPT_LAYER_RELU)
        dpt__bias_relu(l, b, z, y, batch);
    else
        dpt__bias_tanh(l, b, z, y, batch);
}

/* Indexed by dpt_layer_kind_t; the order follows DPT_LAYER_LIST. */
static const dpt__layer_ops_t *const dpt__layer_ops[DPT_LAYER_COUNT] = {
    [DPT_LAYER_LINEAR] =
        &(const dpt__layer_ops_t){"linear", 1, dpt__linear_forward, dpt__linear_backward},
    [DPT_LAYER_RELU] = &(const dpt__layer_ops_t){"relu", 0, dpt__relu_forward, dpt__relu_backward},
    [DPT_LAYER_TANH] = &(const dpt__layer_ops_t){"tanh", 0, dpt__tanh_forward, dpt__tanh_backward},
    [DPT_LAYER_CONV2D] = &dpt__seq_conv2d_ops,
    [DPT_LAYER_MAXPOOL2D] = &dpt__seq_maxpool_ops,
    [DPT_LAYER_AVGPOOL2D] = &dpt__seq_avgpool_ops,
    [DPT_LAYER_FLATTEN] = &dpt__seq_flatten_ops,
    [DPT_LAYER_DROPOUT] = &dpt__seq_dropout_ops,
    [DPT_LAYER_BATCHNORM] = &dpt__seq_batchnorm_ops,
};

static const char *const dpt__layer_names[] = {
#define DPT__LAYER_NAME(sym, name) name,
    DPT_LAYER_LIST(DPT__LAYER_NAME)
#undef DPT__LAYER_NAME
};

static const char *const dpt__init_names[] = {
#define DPT__INIT_NAME(sym, name) name,
    DPT_INIT_LIST(DPT__INIT_NAME)
#undef DPT__INIT_NAME
};

const char *dpt_layer_kind_name(dpt_layer_kind_t kind)
{
    return (unsigned)kind < DPT_LAYER_COUNT ? dpt__layer_names[kind] : "unknown";
}

const char *dpt_init_name(dpt_init_t init)
{
    return (unsigned)init < DPT_INIT_COUNT ? dpt__init_names[init] : "unknown";
}

int dpt_layer_kind_parse(const char *name, dpt_layer_kind_t *kind)
{
    for (int i = 0; i < DPT_LAYER_COUNT; i++)
        if (strcmp(name, dpt__layer_names[i]) == 0) {
            *kind = (dpt_layer_kind_t)i;
            return DPT_OK;
        }
    return dpt_error(DPT_EINVAL,
                     "unknown layer kind \"%s\" (known: linear, relu, tanh, conv2d, maxpool2d, "
                     "avgpool2d, flatten, dropout, batchnorm)",
                     name);
}

int dpt_init_parse(const char *name, dpt_init_t *init)
{
    for (int i = 0; i < DPT_INIT_COUNT; i++)
        if (strcmp(name, dpt__init_names[i]) == 0) {
            *init = (dpt_init_t)i;
            return DPT_OK;
        }
    return dpt_error(DPT_EINVAL,
                     "unknown initialisation \"%s\" (known: default, uniform, normal, orthogonal)",
                     name);
}

struct dpt_seq {
    dpt__layer_t *layers;
    size_t nlayers;
    size_t in_dim, out_dim, max_batch, max_width;
    dpt_shape_t in_shape, out_shape;
    float *ws;            /* the convolutions' workspace (shared: they run one at a time) */
    dpt__noise_t noise;   /* the dropout layers' state */
    float **act;          /* act[i] = output of layer i, [max_batch, layers[i].out] */
    float *dbuf[2];       /* ping-pong input-gradient buffers [max_batch, max_width] */
    const float *x;       /* input of the last forward (borrowed) */
    size_t batch;         /* rows of the last forward, 0 = none */
    dpt_grad_hook_t hook; /* called after each linear layer's backward, or NULL */
    void *hook_user;
    /* Acting (nn_impl.h: dpt__seq_act_begin): the linear layers' weights
     * transposed, for products of a few rows, while act_params is the
     * arena they were copied from. */
    float *wt;
    const float *act_params;
};

void dpt_seq_destroy(dpt_seq_t *s)
{
    if (!s)
        return;
    if (s->act)
        for (size_t i = 0; i < s->nlayers; i++)
            dpt_free_aligned(s->act[i]);
    if (s->layers)
        for (size_t i = 0; i < s->nlayers; i++) {
            free(s->layers[i].idx);
            dpt_free_aligned(s->layers[i].bn);
        }
    free(s->act);
    dpt_free_aligned(s->wt);
    dpt_free_aligned(s->ws);
    dpt_free_aligned(s->dbuf[0]);
    dpt_free_aligned(s->dbuf[1]);
    free(s->layers);
    free(s);
}

static float *dpt__alloc_floats(size_t rows, size_t cols)
{
    size_t n, bytes;
    if (dpt_mul_size(rows, cols, &n) || dpt_mul_size(n, sizeof(float), &bytes))
        return NULL;
    return dpt_alloc_aligned(bytes);
}

/* A shape as text for messages: "[32, 14, 14]". */
static const char *dpt__shape_text(dpt_shape_t sh, char *buf, size_t size)
{
    snprintf(buf, size, "[%zu, %zu, %zu]", sh.c, sh.h, sh.w);
    return buf;
}

/* Layer i's output shape on input `in` (l: its geometry, may be scratch). */
static int dpt__layer_shape(size_t i, size_t n, const dpt_layer_spec_t *sp, dpt_shape_t in,
                            dpt__layer_t *l, dpt_shape_t *out)
{
    char ib[80];
    const char *kind = dpt_layer_kind_name(sp->kind);
    if ((unsigned)sp->kind >= DPT_LAYER_COUNT)
        return dpt_error(DPT_EINVAL, "layer %zu of %zu: unknown kind %d", i + 1, n, (int)sp->kind);
    int params = sp->kind == DPT_LAYER_LINEAR || sp->kind == DPT_LAYER_CONV2D;
    if (params && (unsigned)sp->init >= DPT_INIT_COUNT)
        return dpt_error(DPT_EINVAL, "layer %zu of %zu (%s): unknown init %d", i + 1, n, kind,
                         (int)sp->init);
    size_t feats;
    if (dpt_mul_size(in.c, in.h, &feats) || dpt_mul_size(feats, in.w, &feats))
        return dpt_error(DPT_EOVERFLOW, "layer %zu of %zu (%s): input %s overflows", i + 1, n, kind,
                         dpt__shape_text(in, ib, sizeof ib));
    switch (sp->kind) {
    case DPT_LAYER_LINEAR:
        if (sp->out == 0)
            return dpt_error(DPT_EINVAL, "layer %zu of %zu (linear): output size is 0", i + 1, n);
        if (in.h != 1 || in.w != 1)
            return dpt_error(DPT_EINVAL,
                             "layer %zu of %zu (linear) on input %s: the input is an image; put a "
                             "flatten layer before it",
                             i + 1, n, dpt__shape_text(in, ib, sizeof ib));
        *out = (dpt_shape_t){sp->out, 1, 1};
        return DPT_OK;
    case DPT_LAYER_CONV2D:
    case DPT_LAYER_MAXPOOL2D:
    case DPT_LAYER_AVGPOOL2D: {
        int rc = dpt__seq_conv_geometry(sp, in, l, out);
        if (rc) {
            char why[512];
            snprintf(why, sizeof why, "%s", dpt_last_error());
            char desc[160];
            dpt_layer_describe(sp, desc, sizeof desc);
            return dpt_error(rc, "layer %zu of %zu (%s) on input %s: %s", i + 1, n, desc,
                             dpt__shape_text(in, ib, sizeof ib), why);
        }
        return DPT_OK;
    }
    case DPT_LAYER_FLATTEN: *out = (dpt_shape_t){feats, 1, 1}; return DPT_OK;
    case DPT_LAYER_DROPOUT:
        if (!(sp->rate >= 0.0f && sp->rate < 1.0f))
            return dpt_error(DPT_EINVAL, "layer %zu of %zu (dropout): rate %g is not in [0, 1)",
                             i + 1, n, (double)sp->rate);
        *out = in;
        return DPT_OK;
    case DPT_LAYER_BATCHNORM:
        if (!(sp->rate >= 0.0f && sp->rate <= 1.0f))
            return dpt_error(DPT_EINVAL,
                             "layer %zu of %zu (batchnorm): momentum %g is not in [0, 1]", i + 1, n,
                             (double)sp->rate);
        if (!(sp->gain >= 0.0f && sp->gain <= 1.0f))
            return dpt_error(DPT_EINVAL, "layer %zu of %zu (batchnorm): eps %g is not in [0, 1]",
                             i + 1, n, (double)sp->gain);
        *out = in;
        return DPT_OK;
    default: *out = in; return DPT_OK;
    }
}

int dpt_layers_shapes(dpt_shape_t in, const dpt_layer_spec_t *layers, size_t nlayers,
                      dpt_shape_t *shapes)
{
    if (!layers || nlayers == 0)
        return dpt_error(DPT_EINVAL, "sequential model: no layers");
    if (in.c == 0 || in.h == 0 || in.w == 0)
        return dpt_error(DPT_EINVAL, "sequential model: input size is 0 ([%zu, %zu, %zu])", in.c,
                         in.h, in.w);
    dpt_shape_t cur = in;
    for (size_t i = 0; i < nlayers; i++) {
        dpt__layer_t scratch;
        dpt_shape_t next;
        int rc = dpt__layer_shape(i, nlayers, &layers[i], cur, &scratch, &next);
        if (rc)
            return rc;
        if (shapes)
            shapes[i] = next;
        cur = next;
    }
    return DPT_OK;
}

/* Adds layer l's weight and bias (layer i) to the table; batchnorm's are
 * gamma and beta, then its running mean and variance. */
static int dpt__layer_vars(dpt__layer_t *l, size_t i, dpt_vartable_t *table, const char *prefix)
{
    char name[DPT_VAR_NAME_MAX + 32];
    if (l->spec.kind == DPT_LAYER_BATCHNORM) {
        size_t cshape[1] = {l->ishape.c};
        static const char *const what[4] = {"weight", "bias", "running_mean", "running_var"};
        size_t *offs[4] = {&l->w_off, &l->b_off, &l->rm_off, &l->rv_off};
        l->var = table->nvars;
        l->nvars = 4;
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof name, "%s%zu.%s", prefix, i, what[k]);
            int rc = dpt_vartable_add(table, name, 1, cshape, offs[k]);
            if (rc)
                return rc;
        }
        return DPT_OK;
    }
    l->nvars = 2;
    size_t wshape[4] = {l->out, l->in}, bshape[1] = {l->out};
    int ndim = 2;
    if (l->spec.kind == DPT_LAYER_CONV2D) {
        wshape[0] = bshape[0] = l->cv.out_c;
        wshape[1] = l->cv.in_c, wshape[2] = l->cv.kh, wshape[3] = l->cv.kw;
        ndim = 4;
    }
    l->var = table->nvars;
    snprintf(name, sizeof name, "%s%zu.weight", prefix, i);
    int rc = dpt_vartable_add(table, name, ndim, wshape, &l->w_off);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "%s%zu.bias", prefix, i);
    return dpt_vartable_add(table, name, 1, bshape, &l->b_off);
}

int dpt_seq_create(dpt_seq_t **out, size_t in_dim, const dpt_layer_spec_t *layers, size_t nlayers,
                   size_t max_batch, dpt_vartable_t *table, const char *prefix)
{
    return dpt_seq_create_shaped(out, (dpt_shape_t){in_dim, 1, 1}, layers, nlayers, max_batch,
                                 table, prefix);
}

int dpt_seq_create_shaped(dpt_seq_t **out, dpt_shape_t in, const dpt_layer_spec_t *layers,
                          size_t nlayers, size_t max_batch, dpt_vartable_t *table,
                          const char *prefix)
{
    *out = NULL;
    int rc = dpt_layers_shapes(in, layers, nlayers, NULL);
    if (rc)
        return rc;
    if (max_batch == 0)
        return dpt_error(DPT_EINVAL, "sequential model: max_batch is 0");
    if (!table)
        return dpt_error(DPT_EINVAL, "sequential model: no variable table given");
    if (!prefix)
        prefix = "";
    dpt_seq_t *s = calloc(1, sizeof *s);
    if (!s)
        return dpt_error(DPT_ENOMEM, "sequential model: cannot allocate");
    s->layers = calloc(nlayers, sizeof *s->layers);
    s->act = calloc(nlayers, sizeof *s->act);
    if (!s->layers || !s->act) {
        dpt_seq_destroy(s);
        return dpt_error(DPT_ENOMEM, "sequential model: cannot allocate %zu layers", nlayers);
    }
    s->nlayers = nlayers;
    s->in_shape = in;
    s->in_dim = in.c * in.h * in.w;
    s->max_batch = max_batch;
    size_t width = s->in_dim, max_width = width, ws = 0;
    dpt_shape_t cur = in;
    for (size_t i = 0; i < nlayers; i++) {
        dpt__layer_t *l = &s->layers[i];
        l->spec = layers[i];
        l->ishape = cur;
        l->in = width;
        if ((rc = dpt__layer_shape(i, nlayers, &layers[i], cur, l, &l->oshape)) != 0)
            goto fail;
        cur = l->oshape;
        l->out = cur.c * cur.h * cur.w;
        if (dpt__layer_ops[l->spec.kind]->has_params &&
            (rc = dpt__layer_vars(l, i, table, prefix)) != 0)
            goto fail;
        if (l->spec.kind == DPT_LAYER_CONV2D) {
            size_t f;
            if ((rc = dpt_conv2d_workspace(&l->cv, &f)) != 0)
                goto fail;
            ws = f > ws ? f : ws;
        }
        if (l->spec.kind == DPT_LAYER_BATCHNORM && !(l->bn = dpt__alloc_floats(3, cur.c))) {
            rc = dpt_error(DPT_ENOMEM, "layer %zu: cannot allocate batch statistics", i);
            goto fail;
        }
        if (l->spec.kind == DPT_LAYER_MAXPOOL2D && dpt__maxpool2d_has_idx(&l->pool) &&
            !(l->idx = calloc(max_batch * l->out, sizeof *l->idx))) {
            rc = dpt_error(DPT_ENOMEM, "layer %zu: cannot allocate pooling choices", i);
            goto fail;
        }
        width = l->out;
        if (width > max_width)
            max_width = width;
        s->act[i] = dpt__alloc_floats(max_batch, l->out);
        if (!s->act[i]) {
            rc = dpt_error(DPT_ENOMEM, "layer %zu: cannot allocate activations for %zu rows", i,
                           max_batch);
            goto fail;
        }
    }
    s->out_dim = width;
    s->out_shape = cur;
    s->max_width = max_width;
    s->dbuf[0] = dpt__alloc_floats(max_batch, max_width);
    s->dbuf[1] = dpt__alloc_floats(max_batch, max_width);
    if (ws && !(s->ws = dpt__alloc_floats(ws, 1))) {
        rc = dpt_error(DPT_ENOMEM, "sequential model: cannot allocate %zu floats of workspace", ws);
        goto fail;
    }
    for (size_t i = 0; i < nlayers; i++) {
        s->layers[i].ws = s->ws;
        s->layers[i].noise = &s->noise;
        s->layers[i].pos = i;
    }
    if (!s->dbuf[0] || !s->dbuf[1]) {
        rc = dpt_error(DPT_ENOMEM, "sequential model: cannot allocate gradient buffers");
        goto fail;
    }
    *out = s;
    return DPT_OK;
fail:
    dpt_seq_destroy(s);
    return rc;
}

dpt_shape_t dpt_seq_in_shape(const dpt_seq_t *s)
{
    return s->in_shape;
}

dpt_shape_t dpt_seq_out_shape(const dpt_seq_t *s)
{
    return s->out_shape;
}

size_t dpt_seq_in_dim(const dpt_seq_t *s)
{
    return s->in_dim;
}
size_t dpt_seq_out_dim(const dpt_seq_t *s)
{
    return s->out_dim;
}
size_t dpt_seq_max_batch(const dpt_seq_t *s)
{
    return s->max_batch;
}

/* Orthonormalises the rows of a [rows, cols] matrix (rows <= cols) in place
 * by modified Gram–Schmidt in double. A row that becomes (numerically) zero
 * is redrawn — impossible in practice with Gaussian input, but cheap. */
void dpt__orthonormal_rows(double *m, size_t rows, size_t cols, dpt_rng_t *rng)
{
    for (size_t i = 0; i < rows; i++) {
        double *ri = m + i * cols;
        for (int attempt = 0; attempt < 8; attempt++) {
            for (size_t j = 0; j < i; j++) {
                const double *rj = m + j * cols;
                double d = 0.0;
                for (size_t c = 0; c < cols; c++)
                    d += ri[c] * rj[c];
                for (size_t c = 0; c < cols; c++)
                    ri[c] -= d * rj[c];
            }
            double n = 0.0;
            for (size_t c = 0; c < cols; c++)
                n += ri[c] * ri[c];
            n = sqrt(n);
            if (n > 1e-10) {
                for (size_t c = 0; c < cols; c++)
                    ri[c] /= n;
                break;
            }
            for (size_t c = 0; c < cols; c++)
                ri[c] = dpt_rng_normal(rng);
        }
    }
}

/* The weights of a linear or conv2d layer: W as [O, I] with I its fan-in
 * (C*kh*kw for a convolution, whose W [O, C, kh, kw] is that matrix). */
static void dpt__init_linear(const dpt__layer_t *l, float *params, dpt_rng_t *rng)
{
    float *w = params + l->w_off, *b = params + l->b_off;
    size_t O = l->out, I = l->in;
    if (l->spec.kind == DPT_LAYER_CONV2D)
        O = l->cv.out_c, I = l->cv.in_c * l->cv.kh * l->cv.kw;
    size_t n = O * I;
    float gain = l->spec.gain;
    switch (l->spec.init) {
    case DPT_INIT_DEFAULT: {
        float bound = 1.0f / sqrtf((float)I);
        dpt_rng_fill_uniform(rng, w, n, -bound, bound);
        dpt_rng_fill_uniform(rng, b, O, -bound, bound);
        return;
    }
    case DPT_INIT_UNIFORM: dpt_rng_fill_uniform(rng, w, n, -gain, gain); break;
    case DPT_INIT_NORMAL: dpt_rng_fill_normal(rng, w, n, 0.0f, gain); break;
    case DPT_INIT_ORTHOGONAL: {
        /* Work on the orientation with fewer vectors than their length. */
        size_t rows = O <= I ? O : I;
        size_t cols = O <= I ? I : O;
        double *m = malloc(n * sizeof *m);
        if (!m) {
            /* Out of memory for the scratch: fall back to a scaled normal
             * init rather than leaving the weights zero. */
            dpt_rng_fill_normal(rng, w, n, 0.0f, gain / sqrtf((float)I));
            break;
        }
        for (size_t i = 0; i < n; i++)
            m[i] = dpt_rng_normal(rng);
        dpt__orthonormal_rows(m, rows, cols, rng);
        for (size_t i = 0; i < rows; i++)
            for (size_t c = 0; c < cols; c++) {
                float v = (float)((double)gain * m[i * cols + c]);
                if (O <= I)
                    w[i * I + c] = v; /* rows of W */
                else
                    w[c * I + i] = v; /* columns of W */
            }
        free(m);
        break;
    }
    default: break;
    }
    dpt_vec_zero(b, O);
}

void dpt_seq_init_params(const dpt_seq_t *s, float *params, dpt_rng_t *rng)
{
    for (size_t i = 0; i < s->nlayers; i++) {
        const dpt__layer_t *l = &s->layers[i];
        if (l->spec.kind == DPT_LAYER_BATCHNORM) {
            /* No draws: the stream goes on as without the layer. */
            for (size_t c = 0; c < l->ishape.c; c++) {
                params[l->w_off + c] = 1.0f;
                params[l->b_off + c] = 0.0f;
                params[l->rm_off + c] = 0.0f;
                params[l->rv_off + c] = 1.0f;
            }
        } else if (dpt__layer_ops[l->spec.kind]->has_params) {
            dpt__init_linear(l, params, rng);
        }
    }
}

size_t dpt_seq_running(const dpt_seq_t *s, unsigned char *flags)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nlayers; i++) {
        const dpt__layer_t *l = &s->layers[i];
        if (l->spec.kind != DPT_LAYER_BATCHNORM)
            continue;
        if (flags)
            flags[l->var + 2] = flags[l->var + 3] = 1;
        n += 2;
    }
    return n;
}

/* The activation fused after linear layer i (the next layer's kind, ReLU or
 * tanh), or -1. */
static int dpt__fused_act(const dpt_seq_t *s, size_t i)
{
    if (s->layers[i].spec.kind != DPT_LAYER_LINEAR || i + 1 >= s->nlayers)
        return -1;
    dpt_layer_kind_t next = s->layers[i + 1].spec.kind;
    return next == DPT_LAYER_RELU || next == DPT_LAYER_TANH ? (int)next : -1;
}

/* 1 when layer i is a ReLU followed by a 2x2 max pooling that keeps its
 * choices, below another layer: the two run as pooling then ReLU on the
 * pooled values (a quarter of the work, no ReLU output kept). The bits are
 * the same both ways: max and ReLU commute, the choice of a window whose
 * maximum is positive is the same among x and ReLU(x) (the other values
 * are below it in both), and a window whose maximum is not positive passes
 * no gradient either way. */
static int dpt__relu_pool(const dpt_seq_t *s, size_t i)
{
    return i > 0 && i + 1 < s->nlayers && s->layers[i].spec.kind == DPT_LAYER_RELU &&
           s->layers[i + 1].spec.kind == DPT_LAYER_MAXPOOL2D && s->layers[i + 1].idx;
}

int dpt_seq_forward(dpt_seq_t *s, const float *params, const float *x, size_t batch,
                    const float **y)
{
    s->batch = 0;
    if (batch == 0 || batch > s->max_batch)
        return dpt_error(DPT_EINVAL, "sequential model: batch of %zu rows (allowed 1..%zu)", batch,
                         s->max_batch);
    if (!dpt_vec_all_finite(x, batch * s->in_dim)) {
        size_t i = dpt_vec_first_nonfinite(x, batch * s->in_dim);
        return dpt_error(DPT_ENUMERIC, "sequential model: input row %zu column %zu is %g",
                         i / s->in_dim, i % s->in_dim, (double)x[i]);
    }
    const float *in = x;
    int acting = s->act_params == params;
    for (size_t i = 0; i < s->nlayers; i++) {
        const dpt__layer_t *l = &s->layers[i];
        int act = dpt__fused_act(s, i);
        if (dpt__relu_pool(s, i)) {
            const dpt__layer_t *p = &s->layers[++i];
            (void)dpt__maxpool2d_forward_idx(&p->pool, s->act[i], p->idx, in, batch);
            dpt__relu_forward(p, params, s->act[i], s->act[i], batch);
            in = s->act[i];
            continue;
        }
        if (l->spec.kind != DPT_LAYER_LINEAR || (act < 0 && !acting)) {
            dpt__layer_ops[l->spec.kind]->forward(l, params, in, s->act[i], batch);
            in = s->act[i];
            continue;
        }
        /* A linear layer: acting on a few rows, the product with the
         * transposed copy (the same bits); the bias then goes in with the
         * fused activation, or with the product when there is none. */
        const float *b = params + l->b_off;
        if (acting && dpt__gemm_small_ok(batch, l->in))
            dpt__gemm_small(batch, l->out, l->in, in, l->in, s->wt + l->wt_off,
                            dpt__gemm_small_ld(l->out), act >= 0 ? NULL : b, s->act[i], l->out);
        else if (act >= 0)
            dpt_gemm(0, 1, batch, l->out, l->in, 1.0f, in, l->in, params + l->w_off, l->in, 0.0f,
                     s->act[i], l->out);
        else
            dpt__layer_ops[l->spec.kind]->forward(l, params, in, s->act[i], batch);
        if (act >= 0)
            dpt__bias_act(l, act, b, s->act[i], s->act[i + 1], batch);
        in = s->act[act >= 0 ? ++i : i];
    }
    s->x = x;
    s->batch = batch;
    *y = in;
    return DPT_OK;
}

int dpt_seq_backward_ex(dpt_seq_t *s, const float *params, float *grads, const float *dy, float *dx,
                        int store_grads)
{
    if (s->batch == 0)
        return dpt_error(DPT_ESTATE, "sequential model: backward without a forward pass");
    size_t batch = s->batch;
    const float *g = dy;
    unsigned gmode = store_grads ? DPT__STORE_GRADS : 0u;
    for (size_t i = s->nlayers; i-- > 0;) {
        const dpt__layer_t *l = &s->layers[i];
        if (i >= 2 && dpt__relu_pool(s, i - 1)) {
            /* The pooled gradient masked by the ReLU, into
             * the ReLU's unused output buffer, then routed to the choices:
             * the stored input gradient of the pair. */
            float *masked = s->act[i - 1], *ldx = s->dbuf[(i - 1) & 1];
            dpt__relu_backward(l, params, grads, NULL, s->act[i], g, masked, batch, DPT__STORE_DX);
            (void)dpt__maxpool2d_backward_store_idx(&l->pool, ldx, masked, l->idx, batch);
            g = ldx;
            i--;
            continue;
        }
        const float *lx = i ? s->act[i - 1] : s->x;
        /* The caller's input gradient (or NULL) accumulates; the stack's own
         * buffers between layers are overwritten, so they need no zeroing. */
        float *ldx = i ? s->dbuf[i & 1] : dx;
        unsigned mode = gmode | (i ? DPT__STORE_DX : 0u);
        dpt__layer_ops[l->spec.kind]->backward(l, params, grads, lx, s->act[i], g, ldx, batch,
                                               mode);
        /* The layer's parameter gradients are final: the layers below
         * write only their own. */
        if (s->hook && dpt__layer_ops[l->spec.kind]->has_params)
            s->hook(s->hook_user, l->var, l->var + l->nvars);
        g = ldx;
    }
    return DPT_OK;
}

int dpt__seq_act_begin(dpt_seq_t *s, const float *params)
{
    s->act_params = NULL;
    if (!s->wt) {
        size_t total = 0, t;
        for (size_t i = 0; i < s->nlayers; i++) {
            dpt__layer_t *l = &s->layers[i];
            if (l->spec.kind != DPT_LAYER_LINEAR)
                continue;
            l->wt_off = total;
            if (dpt_mul_size(l->in, dpt__gemm_small_ld(l->out), &t) || total + t < total)
                return dpt_error(DPT_EOVERFLOW, "sequential model: transposed weights overflow");
            total += t;
        }
        if (total == 0 || dpt_mul_size(total, sizeof(float), &t) || !(s->wt = dpt_alloc_aligned(t)))
            return dpt_error(DPT_ENOMEM, "sequential model: cannot allocate %zu transposed weights",
                             total);
    }
    for (size_t i = 0; i < s->nlayers; i++) {
        const dpt__layer_t *l = &s->layers[i];
        if (l->spec.kind != DPT_LAYER_LINEAR)
            continue;
        size_t ld = dpt__gemm_small_ld(l->out);
        const float *w = params + l->w_off;
        float *wt = s->wt + l->wt_off;
        for (size_t p = 0; p < l->in; p++)
            for (size_t j = 0; j < ld; j++)
                wt[p * ld + j] = j < l->out ? w[j * l->in + p] : 0.0f;
    }
    s->act_params = params;
    return DPT_OK;
}

void dpt__seq_act_end(dpt_seq_t *s)
{
    s->act_params = NULL;
}

void dpt_seq_set_dropout(dpt_seq_t *s, int train, uint64_t seed, const int32_t *keys)
{
    s->noise.train = train != 0;
    s->noise.seed = seed;
    s->noise.keys = keys;
}

void dpt_seq_set_grad_hook(dpt_seq_t *s, dpt_grad_hook_t hook, void *user)
{
    s->hook = hook;
    s->hook_user = hook ? user : NULL;
}

int dpt_seq_backward(dpt_seq_t *s, const float *params, float *grads, const float *dy, float *dx)
{
    return dpt_seq_backward_ex(s, params, grads, dy, dx, 0);
}
