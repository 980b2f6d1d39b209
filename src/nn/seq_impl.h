/*
 * Internal to src/nn: the layers of a sequential stack (seq.c) and the
 * image layers' ops (seq_conv.c). Not installed.
 */
#ifndef DPT_SEQ_IMPL_H
#define DPT_SEQ_IMPL_H

#include "dpt/conv.h"
#include "dpt/nn.h"

#include <stddef.h>
#include <stdint.h>

/* The dropout state of a stack (dpt_seq_set_dropout). */
typedef struct dpt__noise {
    int train;
    uint64_t seed;
    const int32_t *keys; /* [B, 2] or NULL */
} dpt__noise_t;

typedef struct dpt__layer {
    dpt_layer_spec_t spec;
    dpt_shape_t ishape, oshape; /* one sample in and out */
    size_t in, out;             /* features in and out (c*h*w) */
    size_t w_off;               /* linear, conv2d: offset of W in the arena */
    size_t b_off;               /* linear, conv2d: offset of b [out channels] */
    size_t var;                 /* linear, conv2d: table index of W (b is var + 1) */
    size_t wt_off;              /* linear: offset of W^T in the seq's acting copy */
    dpt_conv2d_t cv;            /* conv2d: its geometry */
    dpt_pool2d_t pool;          /* pooling: its geometry */
    float *ws;                  /* conv2d: the stack's shared workspace */
    const dpt__noise_t *noise;  /* dropout: the stack's state */
    size_t pos;                 /* the layer's position in the stack */
    int32_t *idx;               /* maxpool2d 2x2: the forward's choices [max_batch, out]
                                 * (dpt__pool_choice_t) */
    size_t nvars;               /* variables of the layer in the table (from var) */
    size_t rm_off, rv_off;      /* batchnorm: running mean and variance (gamma: w_off,
                                 * beta: b_off) */
    float *bn;                  /* batchnorm: the last training forward's mean, invstd and
                                 * biased variance [3, C] */
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

/* The image layers (seq_conv.c) and batch normalization (seq_norm.c). */
extern const dpt__layer_ops_t dpt__seq_conv2d_ops, dpt__seq_maxpool_ops, dpt__seq_avgpool_ops,
    dpt__seq_flatten_ops, dpt__seq_dropout_ops, dpt__seq_batchnorm_ops;

/* A batchnorm layer's momentum and eps (its spec's rate and gain; 0 gives
 * PyTorch's defaults, 0.1 and 1e-5). */
float dpt__seq_bn_momentum(const dpt_layer_spec_t *sp);
float dpt__seq_bn_eps(const dpt_layer_spec_t *sp);

/* The geometry of an image layer on input shape in, from its spec, into
 * l->cv or l->pool, and its output shape into *out. DPT_EINVAL or
 * DPT_EOVERFLOW with the geometry's message (the caller names the layer). */
int dpt__seq_conv_geometry(const dpt_layer_spec_t *spec, dpt_shape_t in, dpt__layer_t *l,
                           dpt_shape_t *out);

#endif
