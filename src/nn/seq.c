/*
 * Layers and sequential stacks.
 *
 * Each layer kind is one entry of a const ops table (name, parameter
 * tensors, output size, init, forward, backward); the stack walks the table.
 * Activations are kept per layer for the backward pass; input gradients go
 * through two ping-pong buffers. Everything is sized at create.
 */
#include "dpt/gemm.h"
#include "dpt/nn.h"
#include "dpt/status.h"
#include "gemm_impl.h"
#include "nn_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dpt__layer {
    dpt_layer_spec_t spec;
    size_t in, out; /* features in and out */
    size_t w_off;   /* linear: offset of W [out, in] in the arena */
    size_t b_off;   /* linear: offset of b [out] */
    size_t var;     /* linear: table index of W (b is var + 1) */
    size_t wt_off;  /* linear: offset of W^T in the seq's acting copy */
} dpt__layer_t;

/* Backward modes: what a layer stores rather than adds to. */
#define DPT__STORE_GRADS 1u
#define DPT__STORE_DX 2u

typedef struct dpt__layer_ops {
    const char *name;
    int has_params;
    /* y [B, out] = f(x [B, in]) */
    void (*forward)(const dpt__layer_t *l, const float *params, const float *x, float *y,
                    size_t batch);
    /* grads += dL/dparams and dx [B, in] += dL/dx (dx may be NULL); with
     * DPT__STORE_GRADS in `mode` the parameter gradients are stored instead
     * of added, with DPT__STORE_DX the input gradient is. */
    void (*backward)(const dpt__layer_t *l, const float *params, float *grads, const float *x,
                     const float *y, const float *dy, float *dx, size_t batch, unsigned mode);
} dpt__layer_ops_t;

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
static const dpt__layer_ops_t dpt__layer_ops[DPT_LAYER_COUNT] = {
    [DPT_LAYER_LINEAR] = {"linear", 1, dpt__linear_forward, dpt__linear_backward},
    [DPT_LAYER_RELU] = {"relu", 0, dpt__relu_forward, dpt__relu_backward},
    [DPT_LAYER_TANH] = {"tanh", 0, dpt__tanh_forward, dpt__tanh_backward},
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
    return dpt_error(DPT_EINVAL, "unknown layer kind \"%s\" (known: linear, relu, tanh)", name);
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
    free(s->act);
    dpt_free_aligned(s->wt);
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

int dpt_seq_create(dpt_seq_t **out, size_t in_dim, const dpt_layer_spec_t *layers, size_t nlayers,
                   size_t max_batch, dpt_vartable_t *table, const char *prefix)
{
    *out = NULL;
    if (!layers || nlayers == 0)
        return dpt_error(DPT_EINVAL, "sequential model: no layers");
    if (in_dim == 0)
        return dpt_error(DPT_EINVAL, "sequential model: input size is 0");
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
    s->in_dim = in_dim;
    s->max_batch = max_batch;
    size_t width = in_dim, max_width = in_dim;
    int rc = DPT_OK;
    for (size_t i = 0; i < nlayers; i++) {
        dpt__layer_t *l = &s->layers[i];
        l->spec = layers[i];
        l->in = width;
        if ((unsigned)l->spec.kind >= DPT_LAYER_COUNT) {
            rc = dpt_error(DPT_EINVAL, "layer %zu: unknown kind %d", i, (int)l->spec.kind);
            goto fail;
        }
        if (l->spec.kind == DPT_LAYER_LINEAR) {
            if (l->spec.out == 0) {
                rc = dpt_error(DPT_EINVAL, "layer %zu (linear): output size is 0", i);
                goto fail;
            }
            if ((unsigned)l->spec.init >= DPT_INIT_COUNT) {
                rc = dpt_error(DPT_EINVAL, "layer %zu (linear): unknown init %d", i,
                               (int)l->spec.init);
                goto fail;
            }
            l->out = l->spec.out;
            char name[DPT_VAR_NAME_MAX + 32];
            size_t wshape[2] = {l->out, l->in}, bshape[1] = {l->out};
            l->var = table->nvars;
            snprintf(name, sizeof name, "%s%zu.weight", prefix, i);
            if ((rc = dpt_vartable_add(table, name, 2, wshape, &l->w_off)) != 0)
                goto fail;
            snprintf(name, sizeof name, "%s%zu.bias", prefix, i);
            if ((rc = dpt_vartable_add(table, name, 1, bshape, &l->b_off)) != 0)
                goto fail;
        } else {
            l->out = l->in;
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
    s->max_width = max_width;
    s->dbuf[0] = dpt__alloc_floats(max_batch, max_width);
    s->dbuf[1] = dpt__alloc_floats(max_batch, max_width);
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

static void dpt__init_linear(const dpt__layer_t *l, float *params, dpt_rng_t *rng)
{
    float *w = params + l->w_off, *b = params + l->b_off;
    size_t n = l->out * l->in;
    float gain = l->spec.gain;
    switch (l->spec.init) {
    case DPT_INIT_DEFAULT: {
        float bound = 1.0f / sqrtf((float)l->in);
        dpt_rng_fill_uniform(rng, w, n, -bound, bound);
        dpt_rng_fill_uniform(rng, b, l->out, -bound, bound);
        return;
    }
    case DPT_INIT_UNIFORM: dpt_rng_fill_uniform(rng, w, n, -gain, gain); break;
    case DPT_INIT_NORMAL: dpt_rng_fill_normal(rng, w, n, 0.0f, gain); break;
    case DPT_INIT_ORTHOGONAL: {
        /* Work on the orientation with fewer vectors than their length. */
        size_t rows = l->out <= l->in ? l->out : l->in;
        size_t cols = l->out <= l->in ? l->in : l->out;
        double *m = malloc(n * sizeof *m);
        if (!m) {
            /* Out of memory for the scratch: fall back to a scaled normal
             * init rather than leaving the weights zero. */
            dpt_rng_fill_normal(rng, w, n, 0.0f, gain / sqrtf((float)l->in));
            break;
        }
        for (size_t i = 0; i < n; i++)
            m[i] = dpt_rng_normal(rng);
        dpt__orthonormal_rows(m, rows, cols, rng);
        for (size_t i = 0; i < rows; i++)
            for (size_t c = 0; c < cols; c++) {
                float v = (float)((double)gain * m[i * cols + c]);
                if (l->out <= l->in)
                    w[i * l->in + c] = v; /* rows of W */
                else
                    w[c * l->in + i] = v; /* columns of W */
            }
        free(m);
        break;
    }
    default: break;
    }
    dpt_vec_zero(b, l->out);
}

void dpt_seq_init_params(const dpt_seq_t *s, float *params, dpt_rng_t *rng)
{
    for (size_t i = 0; i < s->nlayers; i++)
        if (s->layers[i].spec.kind == DPT_LAYER_LINEAR)
            dpt__init_linear(&s->layers[i], params, rng);
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
        if (l->spec.kind != DPT_LAYER_LINEAR || (act < 0 && !acting)) {
            dpt__layer_ops[l->spec.kind].forward(l, params, in, s->act[i], batch);
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
            dpt__layer_ops[l->spec.kind].forward(l, params, in, s->act[i], batch);
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
        const float *lx = i ? s->act[i - 1] : s->x;
        /* The caller's input gradient (or NULL) accumulates; the stack's own
         * buffers between layers are overwritten, so they need no zeroing. */
        float *ldx = i ? s->dbuf[i & 1] : dx;
        unsigned mode = gmode | (i ? DPT__STORE_DX : 0u);
        dpt__layer_ops[l->spec.kind].backward(l, params, grads, lx, s->act[i], g, ldx, batch, mode);
        /* The layer's parameter gradients are final: the layers below
         * write only their own. */
        if (s->hook && dpt__layer_ops[l->spec.kind].has_params)
            s->hook(s->hook_user, l->var, l->var + 2);
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

void dpt_seq_set_grad_hook(dpt_seq_t *s, dpt_grad_hook_t hook, void *user)
{
    s->hook = hook;
    s->hook_user = hook ? user : NULL;
}

int dpt_seq_backward(dpt_seq_t *s, const float *params, float *grads, const float *dy, float *dx)
{
    return dpt_seq_backward_ex(s, params, grads, dy, dx, 0);
}
