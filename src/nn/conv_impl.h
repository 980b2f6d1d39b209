/*
 * Internal: helpers shared by the convolution (conv.c) and pooling (pool.c)
 * kernels, and the hooks the tests and the benchmark use. Not installed.
 */
#ifndef DPT_NN_CONV_IMPL_H
#define DPT_NN_CONV_IMPL_H

#include "dpt/conv.h"

#include <stddef.h>
#include <stdint.h>

/* Checks one spatial axis of a convolution or pooling geometry: in, k and
 * s >= 1, lo < k and hi < k, in + lo + hi >= k, and in + lo + hi without
 * overflow. `what` ("conv2d", "pool2d") and `axis` ("height", "width")
 * name it in the message. Returns 0 or DPT_EINVAL / DPT_EOVERFLOW. */
int dpt__conv_axis_check(const char *what, const char *axis, size_t in, size_t k, size_t s,
                         size_t lo, size_t hi);

/* Output size along an axis that passed dpt__conv_axis_check(). */
static inline size_t dpt__conv_axis_out(size_t in, size_t k, size_t s, size_t lo, size_t hi)
{
    return (in + lo + hi - k) / s + 1;
}

/* The range [*j0, *j1) of outputs j < out whose tap at offset u of the
 * window, j*s + u - lo, falls inside [0, in) (empty: *j0 == *j1). */
static inline void dpt__conv_axis_range(size_t in, size_t out, size_t s, size_t u, size_t lo,
                                        size_t *j0, size_t *j1)
{
    size_t a = u >= lo ? 0 : (lo - u + s - 1) / s;
    /* j*s + u - lo <= in - 1  <=>  j*s <= in - 1 + lo - u */
    size_t b = in + lo <= u ? 0 : (in - 1 + lo - u) / s + 1;
    b = b < out ? b : out;
    *j0 = a < b ? a : b;
    *j1 = b;
}

/* The convolution's ways of computing a pass (dpt__conv2d_set_path). */
#define DPT__CONV_PATH_LIST(X)    \
    X(DPT__CONV_AUTO, "auto")     \
    X(DPT__CONV_IM2COL, "im2col") \
    X(DPT__CONV_DIRECT, "direct")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt__conv_path {
#define DPT__CONV_PATH_ENUM(sym, name) sym,
    DPT__CONV_PATH_LIST(DPT__CONV_PATH_ENUM)
#undef DPT__CONV_PATH_ENUM
    DPT__CONV_PATH_COUNT
} dpt__conv_path_t;
/* clang-format on */

/* Benchmark and test hook: forces the forward pass of every convolution
 * onto one path (DPT__CONV_AUTO: the choice by shape, the default).
 * Process-wide; not meant to be changed while other threads run kernels.
 * The paths round differently, so a forced path changes the bits. */
void dpt__conv2d_set_path(dpt__conv_path_t path);

/* The path the forward pass of `cv` takes now, and its name. */
dpt__conv_path_t dpt__conv2d_path(const dpt_conv2d_t *cv);
const char *dpt__conv_path_name(dpt__conv_path_t path);

/* Images whose columns one product covers (a function of the geometry
 * only; the last block of a batch may hold fewer). */
size_t dpt__conv2d_images(const dpt_conv2d_t *cv);

/* dpt_maxpool2d_backward() that STORES dx (every element written: dy
 * where chosen, 0 elsewhere) instead of adding to it. */
int dpt__maxpool2d_backward_store(const dpt_pool2d_t *p, float *dx, const float *dy, const float *x,
                                  size_t batch);

/* A window's choice, 0..3 (as wide as a float: the forward's loop
 * vectorises over floats, not over bytes, which would need rows of 64). */
typedef int32_t dpt__pool_choice_t;

/* Max pooling that keeps each window's choice (0..3) in idx [N, C, OH,
 * OW] for dpt__maxpool2d_backward_store_idx(), which then needs no input:
 * for 2x2 windows of stride 2 without padding on an even input
 * (dpt__maxpool2d_has_idx()); other geometries: dpt_maxpool2d_forward(),
 * idx untouched. The same outputs and gradients as the functions without. */
int dpt__maxpool2d_has_idx(const dpt_pool2d_t *p);
int dpt__maxpool2d_forward_idx(const dpt_pool2d_t *p, float *y, dpt__pool_choice_t *idx,
                               const float *x, size_t batch);
int dpt__maxpool2d_backward_store_idx(const dpt_pool2d_t *p, float *dx, const float *dy,
                                      const dpt__pool_choice_t *idx, size_t batch);

#endif
