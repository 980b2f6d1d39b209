/*
 * dpt/conv.h — 2-D convolution and pooling kernels.
 *
 * Layout: NCHW. A batch of images is [N, C, H, W] in row-major order
 * (batch, channels, height, width: element (n, c, h, w) at
 * ((n*C + c)*H + h)*W + w), as PyTorch stores it. Convolution weights are
 * [O, C, kh, kw] and the bias [O], also as PyTorch's nn.Conv2d, so its
 * state dicts map without reordering. Inputs stored NHWC (channels last, as
 * TensorFlow and most environments give them) are converted once at the
 * input boundary with dpt_conv_nhwc_to_nchw().
 *
 * Flatten is a no-op: an NCHW batch [N, C, H, W] is, in the same memory, the
 * row-major matrix [N, C*H*W] that a linear layer reads, with features in
 * PyTorch's nn.Flatten order (c, then h, then w), so no copy or kernel is
 * needed between the last convolution or pooling and a dense layer.
 *
 * Conventions (llm.c's, as in dpt/nn.h): a descriptor first, then outputs,
 * then inputs; forward functions write their outputs; backward functions
 * ACCUMULATE (+=) into every gradient they produce (the caller zeroes them);
 * a gradient pointer that is NULL is not computed. Every pointer is
 * borrowed for the duration of the call. The kernels run on the calling
 * thread only and never allocate: a caller that wants several threads
 * splits the batch and sums the weight gradients in a fixed order. Equal
 * inputs give bitwise equal outputs, whatever the thread; the forward
 * output and the input gradient of an image do not depend on the other
 * images of the batch nor on how the batch is split.
 *
 * Output size, per spatial axis with input size H, kernel k, stride s and
 * padding p_lo (top or left) and p_hi (bottom or right):
 *     OH = (H + p_lo + p_hi - k) / s + 1      (integer division)
 * The two sides may differ, so the 'same' padding of an even kernel
 * (PyTorch's padding='same', XLA's SAME: the extra row and column go to the
 * bottom and right) is expressible; dpt_conv2d_same() computes it.
 *
 * Errors: functions return 0 or a negative DPT_E... code with a message
 * (dpt_last_error()); nothing is written unless the checks pass.
 */
#ifndef DPT_CONV_H
#define DPT_CONV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Convolution                                                              */

/* The geometry of a convolution, without the batch size. */
typedef struct dpt_conv2d {
    size_t in_c, in_h, in_w;   /* C, H, W: one input image */
    size_t out_c;              /* O: output channels (filters) */
    size_t kh, kw;             /* kernel height and width */
    size_t stride_h, stride_w; /* >= 1 */
    size_t pad_top, pad_bottom, pad_left, pad_right;
} dpt_conv2d_t;

/* Checks a geometry: every size >= 1, the padded input at least as large
 * as the kernel, each padding smaller than the kernel along its axis (a
 * window of padding only is refused), and no size overflow. Returns 0,
 * DPT_EINVAL or DPT_EOVERFLOW with a message naming the field. */
int dpt_conv2d_check(const dpt_conv2d_t *cv);

/* Output height and width (OH, OW) of a checked geometry. */
size_t dpt_conv2d_out_h(const dpt_conv2d_t *cv);
size_t dpt_conv2d_out_w(const dpt_conv2d_t *cv);

/* Sets the padding of *cv to 'same' for its kernel and strides (XLA's SAME,
 * and PyTorch's padding='same' at stride 1): along each axis
 *     total = max((ceil(H / s) - 1) * s + k - H, 0),
 *     p_lo = total / 2,  p_hi = total - p_lo
 * so OH = ceil(H / s). Returns dpt_conv2d_check() of the result. */
int dpt_conv2d_same(dpt_conv2d_t *cv);

/* Floats of scratch memory the forward and backward passes of this geometry
 * need, for any batch size (the caller allocates it once, 64-byte aligned
 * preferably, and may share it between layers run one after the other).
 * Returns 0 or the errors of dpt_conv2d_check(). */
int dpt_conv2d_workspace(const dpt_conv2d_t *cv, size_t *floats);

/* Forward:
 *     y[n, o, i, j] = b[o] + sum_{c, u, v} w[o, c, u, v] * x[n, c, i*sh + u - pt, j*sw + v - pl]
 * with x = 0 outside the image (zero padding).
 *   y   [N, O, OH, OW]   output
 *   x   [N, C, H, W]
 *   w   [O, C, kh, kw]
 *   b   [O], or NULL for no bias
 *   ws  dpt_conv2d_workspace() floats
 * N = batch may be 0 (nothing is done). Errors: those of dpt_conv2d_check(),
 * DPT_EINVAL for a NULL array. */
int dpt_conv2d_forward(const dpt_conv2d_t *cv, float *y, const float *x, const float *w,
                       const float *b, size_t batch, float *ws);

/* Backward, for dy = dL/dy [N, O, OH, OW]; ACCUMULATES
 *   dx [N, C, H, W]    += sum over the windows that read x[n, c, h, w] of w * dy
 *   dw [O, C, kh, kw]  += sum_{n, i, j} dy[n, o, i, j] * x[n, c, i*sh + u - pt, j*sw + v - pl]
 *   db [O]             += sum_{n, i, j} dy[n, o, i, j]
 * Each of dx, dw, db may be NULL (not computed); x is only read when dw is
 * wanted and w only when dx is (either may then be NULL). ws as in forward.
 * The weight and bias gradients sum the batch in a fixed order (images in
 * blocks whose size depends only on the geometry), so they are reproducible
 * bit for bit. Errors: as dpt_conv2d_forward(). */
int dpt_conv2d_backward(const dpt_conv2d_t *cv, float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w, size_t batch, float *ws);

/* Converts a batch from NHWC [N, H, W, C] (src) to NCHW [N, C, H, W] (dst);
 * the arrays must not overlap. */
void dpt_conv_nhwc_to_nchw(float *dst, const float *src, size_t batch, size_t h, size_t w,
                           size_t c);

/* ------------------------------------------------------------------------ */
/* Pooling                                                                  */

/* The geometry of a max or average pooling, without the batch size. Each
 * channel is pooled on its own; the output has the input's channels. */
typedef struct dpt_pool2d {
    size_t channels, in_h, in_w; /* C, H, W: one input image */
    size_t kh, kw;               /* window */
    size_t stride_h, stride_w;   /* >= 1 (PyTorch's default is the window) */
    size_t pad_top, pad_bottom, pad_left, pad_right;
    /* Average pooling's divisor: nonzero divides every window by kh*kw,
     * counting padding as zeros (PyTorch's count_include_pad=True, its
     * default); 0 divides by the number of the window's elements inside the
     * image (count_include_pad=False; TensorFlow's SAME average pooling).
     * Max pooling ignores it. */
    int count_pad;
} dpt_pool2d_t;

/* Checks a geometry as dpt_conv2d_check() does (padding smaller than the
 * window, so every window holds at least one element of the image). */
int dpt_pool2d_check(const dpt_pool2d_t *p);

/* Output height and width of a checked geometry (the formula at the top). */
size_t dpt_pool2d_out_h(const dpt_pool2d_t *p);
size_t dpt_pool2d_out_w(const dpt_pool2d_t *p);

/* Max pooling, padding counting as -infinity (never chosen):
 *     y[n, c, i, j] = max over the window's elements of x
 * The first element (in row-major window order) holding the maximum is the
 * one chosen; a NaN in a window wins over numbers (the first NaN).
 *   y [N, C, OH, OW], x [N, C, H, W].
 * Errors: those of dpt_pool2d_check(), DPT_EINVAL for a NULL array. */
int dpt_maxpool2d_forward(const dpt_pool2d_t *p, float *y, const float *x, size_t batch);

/* Max pooling's backward: dx[chosen element] += dy[n, c, i, j] for every
 * window, the chosen element found again from x exactly as forward finds
 * it (no index buffer to keep). dx [N, C, H, W] (accumulated), dy
 * [N, C, OH, OW], x the forward's input. */
int dpt_maxpool2d_backward(const dpt_pool2d_t *p, float *dx, const float *dy, const float *x,
                           size_t batch);

/* Average pooling:
 *     y[n, c, i, j] = (sum of the window's elements inside the image) / d
 * with d = kh*kw (count_pad != 0) or the number of those elements
 * (count_pad == 0). y [N, C, OH, OW], x [N, C, H, W]. */
int dpt_avgpool2d_forward(const dpt_pool2d_t *p, float *y, const float *x, size_t batch);

/* Average pooling's backward: dx[e] += dy[n, c, i, j] / d for every element
 * e inside the image of every window. dx [N, C, H, W] (accumulated), dy
 * [N, C, OH, OW]. */
int dpt_avgpool2d_backward(const dpt_pool2d_t *p, float *dx, const float *dy, size_t batch);

#ifdef __cplusplus
}
#endif
#endif /* DPT_CONV_H */
