/*
 * 2-D convolution (dpt/conv.h): forward, input gradient, weight and bias
 * gradients, on NCHW batches.
 *
 * The passes are products with dpt's own GEMM on unrolled windows
 * ("im2col"). With K = C*kh*kw, P = OH*OW and a block of nb images:
 *
 *     col  [K, nb*P]   col[(c*kh + u)*kw + v, n*P + i*OW + j] =
 *                          x[n, c, i*sh + u - pt, j*sw + v - pl]  (0 outside)
 *     fwd  Y  [O, nb*P] = W [O, K] · col                 then y[n, o, p] = Y[o, n*P + p] + b[o]
 *     dX   dcol [K, nb*P] = W^T · dY [O, nb*P]           then dx += col2im(dcol)
 *     dW   dW [O, K]    += dY · col^T                    (k = nb*P: the batch is the sum)
 *
 * Blocks of several images make the products wide enough for the GEMM's
 * micro-tiles when one image is small (MinAtar: P = 100, K = 16); nb is a
 * function of the geometry only (dpt__conv2d_images). With nb = 1 the
 * products read and write the caller's arrays directly (dy and y of one
 * image are already [O, P]); with nb > 1, Y and dY go through a copy in the
 * workspace.
 *
 * Determinism. Every element of Y and dcol is one GEMM dot product over K
 * (or O), the same wherever its image sits in a block, so the forward
 * output and the input gradient of an image do not depend on the batch or
 * its split; the bias is added after the product (not as its initial C),
 * for that reason. dW sums the batch block by block in order, db image by
 * image; neither depends on anything but the inputs and the geometry.
 *
 * A direct forward kernel (stride 1: the padded image, four output
 * channels at a time over a flattened plane) is kept beside it for the
 * measurements in docs/CONV.md; the choice between the two is made by
 * shape (dpt__conv2d_path).
 */
#include "conv_impl.h"
#include "dpt/arena.h"
#include "dpt/conv.h"
#include "dpt/gemm.h"
#include "dpt/status.h"
#include "nn_impl.h"

#include <stdatomic.h>
#include <string.h>

/* Columns of one block: K * nb * P stays within this many floats (256 KiB,
 * half of a core's L2 on the machines measured) unless one image alone is
 * larger; at most DPT__CONV_MAX_IMAGES images. */
#define DPT__CONV_COL_FLOATS 65536
#define DPT__CONV_MAX_IMAGES 64
/* The direct kernel's tile: output channels and plane positions per step,
 * held in registers (4 x 64 floats: 16 AVX-512 or 32 AVX2 registers). */
#define DPT__CONV_DIRECT_O 4
#define DPT__CONV_DIRECT_Q 64

/* Sizes derived from a checked geometry. */
typedef struct conv_geom {
    size_t c, h, w, o, kh, kw, sh, sw, pt, pl;
    size_t oh, ow;
    size_t k;  /* C*kh*kw: the reduction of the forward product */
    size_t p;  /* OH*OW: output positions of one image */
    size_t nb; /* images per block */
} conv_geom_t;

/* Rounds n floats up to a multiple of 16 (64 bytes). */
static size_t round16(size_t n)
{
    return (n + 15) / 16 * 16;
}

int dpt__conv_axis_check(const char *what, const char *axis, size_t in, size_t k, size_t s,
                         size_t lo, size_t hi)
{
    if (in == 0 || k == 0 || s == 0)
        return dpt_error(DPT_EINVAL,
                         "%s: %s: input %zu, kernel %zu, stride %zu (each must be >= 1)", what,
                         axis, in, k, s);
    if (lo >= k || hi >= k)
        return dpt_error(DPT_EINVAL,
                         "%s: %s: padding %zu and %zu must each be smaller than the kernel (%zu)",
                         what, axis, lo, hi, k);
    if (in > ((size_t)-1 - lo - hi) / 4)
        return dpt_error(DPT_EOVERFLOW, "%s: %s: input %zu is too large", what, axis, in);
    if (in + lo + hi < k)
        return dpt_error(DPT_EINVAL, "%s: %s: padded input %zu is smaller than the kernel %zu",
                         what, axis, in + lo + hi, k);
    return DPT_OK;
}

/* a * b * c * d without overflow, or DPT_EOVERFLOW. */
static int mul4(size_t a, size_t b, size_t c, size_t d, size_t *out)
{
    size_t ab, abc;
    if (dpt_mul_size(a, b, &ab) || dpt_mul_size(ab, c, &abc) || dpt_mul_size(abc, d, out))
        return DPT_EOVERFLOW;
    return DPT_OK;
}

int dpt_conv2d_check(const dpt_conv2d_t *cv)
{
    if (!cv)
        return dpt_error(DPT_EINVAL, "conv2d: no geometry given");
    if (cv->in_c == 0 || cv->out_c == 0)
        return dpt_error(DPT_EINVAL,
                         "conv2d: %zu input and %zu output channels (each must be >= 1)", cv->in_c,
                         cv->out_c);
    int rc = dpt__conv_axis_check("conv2d", "height", cv->in_h, cv->kh, cv->stride_h, cv->pad_top,
                                  cv->pad_bottom);
    if (rc == 0)
        rc = dpt__conv_axis_check("conv2d", "width", cv->in_w, cv->kw, cv->stride_w, cv->pad_left,
                                  cv->pad_right);
    if (rc != 0)
        return rc;
    /* Every size the kernels compute, checked once: the weights, a padded
     * image, and the workspace's regions for a full block of images
     * (OH*OW <= Hp*Wp bounds the columns of every region). */
    size_t hp = cv->in_h + cv->pad_top + cv->pad_bottom,
           wp = cv->in_w + cv->pad_left + cv->pad_right;
    size_t k, plane, rows, n;
    if (mul4(cv->in_c, cv->kh, cv->kw, 1, &k) || mul4(hp, wp, 1, 1, &plane) ||
        mul4(cv->out_c, k, sizeof(float), 1, &n) || k > ((size_t)-1 - cv->out_c - cv->in_c) / 2 ||
        mul4(2 * k + cv->out_c + cv->in_c, 1, 1, 1, &rows) ||
        mul4(rows + 16, plane + DPT__CONV_DIRECT_Q, DPT__CONV_MAX_IMAGES, 4 * sizeof(float), &n) ||
        mul4(k, cv->out_c, 4 * sizeof(float), 4, &n))
        return dpt_error(DPT_EOVERFLOW, "conv2d: sizes overflow (%zu x %zu x %zu -> %zu channels)",
                         cv->in_c, cv->in_h, cv->in_w, cv->out_c);
    return DPT_OK;
}

size_t dpt_conv2d_out_h(const dpt_conv2d_t *cv)
{
    return dpt__conv_axis_out(cv->in_h, cv->kh, cv->stride_h, cv->pad_top, cv->pad_bottom);
}

size_t dpt_conv2d_out_w(const dpt_conv2d_t *cv)
{
    return dpt__conv_axis_out(cv->in_w, cv->kw, cv->stride_w, cv->pad_left, cv->pad_right);
}

/* XLA's SAME padding along one axis. */
static void same_axis(size_t in, size_t k, size_t s, size_t *lo, size_t *hi)
{
    size_t out = s ? (in + s - 1) / s : 0;
    size_t need = out ? (out - 1) * s + k : 0;
    size_t total = need > in ? need - in : 0;
    *lo = total / 2;
    *hi = total - *lo;
}

int dpt_conv2d_same(dpt_conv2d_t *cv)
{
    if (!cv)
        return dpt_error(DPT_EINVAL, "conv2d: no geometry given");
    same_axis(cv->in_h, cv->kh, cv->stride_h, &cv->pad_top, &cv->pad_bottom);
    same_axis(cv->in_w, cv->kw, cv->stride_w, &cv->pad_left, &cv->pad_right);
    return dpt_conv2d_check(cv);
}

/* Images per block when each block's product has `rows` rows (or reduces
 * over them) and P columns per image. */
static size_t images_for(size_t rows, size_t p)
{
    size_t nb = DPT__CONV_COL_FLOATS / (rows * p);
    return nb < 1 ? 1 : nb > DPT__CONV_MAX_IMAGES ? DPT__CONV_MAX_IMAGES : nb;
}

size_t dpt__conv2d_images(const dpt_conv2d_t *cv)
{
    return images_for(cv->in_c * cv->kh * cv->kw, dpt_conv2d_out_h(cv) * dpt_conv2d_out_w(cv));
}

/* The forward pass's blocks also keep Y [O, nb*P] within the bound: it is
 * written by the GEMM and read back at once (MinAtar's forward ran 2.4x
 * faster with 20 images per block than with 40). Its outputs do not depend
 * on the block size. */
static size_t forward_images(const conv_geom_t *g)
{
    size_t nb = images_for(g->o > g->k ? g->o : g->k, g->p);
    return nb < g->nb ? nb : g->nb;
}

static conv_geom_t geom_of(const dpt_conv2d_t *cv)
{
    conv_geom_t g = {
        .c = cv->in_c,
        .h = cv->in_h,
        .w = cv->in_w,
        .o = cv->out_c,
        .kh = cv->kh,
        .kw = cv->kw,
        .sh = cv->stride_h,
        .sw = cv->stride_w,
        .pt = cv->pad_top,
        .pl = cv->pad_left,
        .oh = dpt_conv2d_out_h(cv),
        .ow = dpt_conv2d_out_w(cv),
    };
    g.k = g.c * g.kh * g.kw;
    g.p = g.oh * g.ow;
    g.nb = dpt__conv2d_images(cv);
    return g;
}

/* The direct kernel's padded image: C planes of (H + pt + pb) x (W + pl +
 * pr), plus one tile of slack that the last plane's tiles may read. */
static size_t direct_floats(const dpt_conv2d_t *cv)
{
    size_t hp = cv->in_h + cv->pad_top + cv->pad_bottom,
           wp = cv->in_w + cv->pad_left + cv->pad_right;
    return round16(cv->in_c * hp * wp + DPT__CONV_DIRECT_Q);
}

/* The im2col workspace: col [K, nb*P], dcol [K, nb*P], Y or dY [O, nb*P],
 * and dW^T [K, O] of a block. */
static size_t im2col_floats(const conv_geom_t *g)
{
    size_t cols = g->nb * g->p;
    return 2 * round16(g->k * cols) + round16(g->o * cols) + round16(g->k * g->o);
}

int dpt_conv2d_workspace(const dpt_conv2d_t *cv, size_t *floats)
{
    int rc = dpt_conv2d_check(cv);
    if (rc != 0)
        return rc;
    if (!floats)
        return dpt_error(DPT_EINVAL, "conv2d: no place for the workspace size given");
    conv_geom_t g = geom_of(cv);
    size_t a = im2col_floats(&g), b = direct_floats(cv);
    *floats = a > b ? a : b;
    return DPT_OK;
}

/* ---- paths ------------------------------------------------------------- */

static atomic_int forced_path = DPT__CONV_AUTO;

void dpt__conv2d_set_path(dpt__conv_path_t path)
{
    atomic_store(&forced_path, (int)path);
}

const char *dpt__conv_path_name(dpt__conv_path_t path)
{
    switch (path) {
#define DPT__CONV_PATH_NAME(sym, name) \
    case sym: return name;
        DPT__CONV_PATH_LIST(DPT__CONV_PATH_NAME)
#undef DPT__CONV_PATH_NAME
    default: return "unknown";
    }
}

/* im2col + GEMM everywhere unless forced: it was the faster forward at
 * every shape measured (docs/CONV.md); the direct kernel serves stride 1. */
dpt__conv_path_t dpt__conv2d_path(const dpt_conv2d_t *cv)
{
    int f = atomic_load_explicit(&forced_path, memory_order_relaxed);
    if (f == DPT__CONV_DIRECT && cv->stride_h == 1 && cv->stride_w == 1)
        return DPT__CONV_DIRECT;
    return DPT__CONV_IM2COL;
}

/* ---- im2col and col2im --------------------------------------------------- */

/* d[j] = src[(j - j0) * s] for j in [j0, j1), 0 elsewhere in [0, ow).
 * Rows are short (10 to 28 floats at the shapes dpt trains), where calls
 * to memcpy and memset cost more than the copy: plain loops instead. */
static inline void copy_row(float *restrict d, const float *restrict src, size_t s, size_t j0,
                            size_t j1, size_t ow)
{
    for (size_t j = 0; j < j0; j++)
        d[j] = 0.0f;
    if (s == 1)
        for (size_t j = j0; j < j1; j++)
            d[j] = src[j - j0];
    else
        for (size_t j = j0; j < j1; j++)
            d[j] = src[(j - j0) * s];
    for (size_t j = j1; j < ow; j++)
        d[j] = 0.0f;
}

/* Unrolls the windows of `nimg` images starting at x into col [K, ld]
 * (image n's columns start at n*P). */
DPT__NN_CLONES
static void im2col(const conv_geom_t *g, const float *x, size_t nimg, float *col, size_t ld)
{
    for (size_t c = 0; c < g->c; c++) {
        for (size_t u = 0; u < g->kh; u++) {
            size_t i0, i1;
            dpt__conv_axis_range(g->h, g->oh, g->sh, u, g->pt, &i0, &i1);
            for (size_t v = 0; v < g->kw; v++) {
                size_t j0, j1;
                dpt__conv_axis_range(g->w, g->ow, g->sw, v, g->pl, &j0, &j1);
                float *row = col + ((c * g->kh + u) * g->kw + v) * ld;
                for (size_t n = 0; n < nimg; n++) {
                    const float *xc = x + (n * g->c + c) * g->h * g->w;
                    float *dst = row + n * g->p;
                    memset(dst, 0, i0 * g->ow * sizeof(float));
                    for (size_t i = i0; i < i1; i++) {
                        /* The first tap inside the image: j0*sw + v - pl >= 0. */
                        const float *src =
                            j0 < j1 ? xc + (i * g->sh + u - g->pt) * g->w + (j0 * g->sw + v - g->pl)
                                    : xc;
                        copy_row(dst + i * g->ow, src, g->sw, j0, j1, g->ow);
                    }
                    memset(dst + i1 * g->ow, 0, (g->oh - i1) * g->ow * sizeof(float));
                }
            }
        }
    }
}

/* dst[j] += src[j], j < n. */
DPT__NN_CLONES
static void add_row(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t j = 0; j < n; j++)
        dst[j] += src[j];
}

/* dx += the windows of dcol [K, ld] folded back onto `nimg` images: each
 * element of dx receives its (u, v) taps in increasing order. */
static void col2im(const conv_geom_t *g, float *dx, size_t nimg, const float *dcol, size_t ld)
{
    for (size_t c = 0; c < g->c; c++) {
        for (size_t u = 0; u < g->kh; u++) {
            size_t i0, i1;
            dpt__conv_axis_range(g->h, g->oh, g->sh, u, g->pt, &i0, &i1);
            for (size_t v = 0; v < g->kw; v++) {
                size_t j0, j1;
                dpt__conv_axis_range(g->w, g->ow, g->sw, v, g->pl, &j0, &j1);
                const float *row = dcol + ((c * g->kh + u) * g->kw + v) * ld;
                for (size_t n = 0; n < nimg; n++) {
                    float *xc = dx + (n * g->c + c) * g->h * g->w;
                    const float *s = row + n * g->p;
                    for (size_t i = i0; i < i1 && j0 < j1; i++) {
                        float *d = xc + (i * g->sh + u - g->pt) * g->w + (j0 * g->sw + v - g->pl);
                        const float *sr = s + i * g->ow + j0;
                        if (g->sw == 1)
                            add_row(d, sr, j1 - j0);
                        else
                            for (size_t j = 0; j < j1 - j0; j++)
                                d[j * g->sw] += sr[j];
                    }
                }
            }
        }
    }
}

/* y[o, p] = t[o, p] (+ b[o]) for one image: t [O, ldt], y [O, P]. With
 * t == y it only adds the bias. */
DPT__NN_CLONES
static void store_bias(float *y, const float *t, size_t ldt, const float *b, size_t o, size_t p)
{
    for (size_t r = 0; r < o; r++) {
        float *yr = y + r * p;
        const float *tr = t + r * ldt;
        float br = b ? b[r] : 0.0f;
        if (b)
            for (size_t j = 0; j < p; j++)
                yr[j] = tr[j] + br;
        else if (yr != tr)
            memcpy(yr, tr, p * sizeof(float));
    }
}

/* The sum of x[0..n) in 16 lanes (lane l takes x[l], x[l + 16], ...),
 * folded pairwise: a fixed order that vectorises. */
DPT__NN_CLONES
static float lane_sum(const float *x, size_t n)
{
    float lane[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t l = 0; l < 16; l++)
            lane[l] += x[i + l];
    for (size_t l = 0; i + l < n; l++)
        lane[l] += x[i + l];
    for (size_t half = 8; half > 0; half /= 2)
        for (size_t l = 0; l < half; l++)
            lane[l] += lane[l + half];
    return lane[0];
}

/* ---- the direct forward kernel ------------------------------------------ */

/* Copies image x [C, H, W] into xp [C, Hp, Wp] with zero borders. */
static void pad_image(const conv_geom_t *g, size_t hp, size_t wp, const float *x, float *xp)
{
    for (size_t c = 0; c < g->c; c++) {
        float *pc = xp + c * hp * wp;
        memset(pc, 0, g->pt * wp * sizeof(float));
        for (size_t i = 0; i < g->h; i++) {
            float *d = pc + (g->pt + i) * wp;
            memset(d, 0, g->pl * sizeof(float));
            memcpy(d + g->pl, x + (c * g->h + i) * g->w, g->w * sizeof(float));
            memset(d + g->pl + g->w, 0, (wp - g->pl - g->w) * sizeof(float));
        }
        memset(pc + (g->pt + g->h) * wp, 0, (hp - g->pt - g->h) * wp * sizeof(float));
    }
}

/* Four output channels of one tile of DPT__CONV_DIRECT_Q positions of the
 * flattened padded plane (position q = i*Wp + j; j >= OW are discarded):
 * acc[t][q] = sum over (c, u, v) in order of w[t, c, u, v] * xp[c, u, v + q]. */
static inline void direct_tile(float acc[DPT__CONV_DIRECT_O][DPT__CONV_DIRECT_Q], const float *xp,
                               size_t plane, size_t wp, const float *w, size_t ldw, size_t nt,
                               const conv_geom_t *g)
{
    memset(acc, 0, sizeof(float) * DPT__CONV_DIRECT_O * DPT__CONV_DIRECT_Q);
    for (size_t c = 0; c < g->c; c++) {
        for (size_t u = 0; u < g->kh; u++) {
            for (size_t v = 0; v < g->kw; v++) {
                const float *xs = xp + c * plane + u * wp + v;
                size_t r = (c * g->kh + u) * g->kw + v;
                float w0 = w[r], w1 = nt > 1 ? w[ldw + r] : 0.0f;
                float w2 = nt > 2 ? w[2 * ldw + r] : 0.0f, w3 = nt > 3 ? w[3 * ldw + r] : 0.0f;
                for (size_t q = 0; q < DPT__CONV_DIRECT_Q; q++) {
                    float xv = xs[q];
                    acc[0][q] += w0 * xv;
                    acc[1][q] += w1 * xv;
                    acc[2][q] += w2 * xv;
                    acc[3][q] += w3 * xv;
                }
            }
        }
    }
}

DPT__NN_CLONES
static void direct_forward(const conv_geom_t *g, const dpt_conv2d_t *cv, float *y, const float *x,
                           const float *w, const float *b, size_t batch, float *ws)
{
    size_t hp = g->h + cv->pad_top + cv->pad_bottom, wp = g->w + cv->pad_left + cv->pad_right;
    size_t plane = hp * wp, len = (g->oh - 1) * wp + g->ow;
    float acc[DPT__CONV_DIRECT_O][DPT__CONV_DIRECT_Q];
    memset(ws + g->c * plane, 0, DPT__CONV_DIRECT_Q * sizeof(float));
    for (size_t n = 0; n < batch; n++) {
        pad_image(g, hp, wp, x + n * g->c * g->h * g->w, ws);
        float *yn = y + n * g->o * g->p;
        for (size_t q0 = 0; q0 < len; q0 += DPT__CONV_DIRECT_Q) {
            for (size_t o0 = 0; o0 < g->o; o0 += DPT__CONV_DIRECT_O) {
                size_t nt = g->o - o0 < DPT__CONV_DIRECT_O ? g->o - o0 : DPT__CONV_DIRECT_O;
                direct_tile(acc, ws + q0, plane, wp, w + o0 * g->k, g->k, nt, g);
                for (size_t t = 0; t < nt; t++) {
                    float bt = b ? b[o0 + t] : 0.0f;
                    for (size_t q = q0; q < len && q < q0 + DPT__CONV_DIRECT_Q; q++) {
                        size_t i = q / wp, j = q % wp;
                        if (j < g->ow)
                            yn[(o0 + t) * g->p + i * g->ow + j] =
                                b ? acc[t][q - q0] + bt : acc[t][q - q0];
                    }
                }
            }
        }
    }
}

/* ---- forward and backward ---------------------------------------------- */

int dpt_conv2d_forward(const dpt_conv2d_t *cv, float *y, const float *x, const float *w,
                       const float *b, size_t batch, float *ws)
{
    int rc = dpt_conv2d_check(cv);
    if (rc != 0)
        return rc;
    if (batch == 0)
        return DPT_OK;
    if (!y || !x || !w || !ws)
        return dpt_error(DPT_EINVAL, "conv2d: forward: y, x, w and the workspace are required");
    conv_geom_t g = geom_of(cv);
    if (dpt__conv2d_path(cv) == DPT__CONV_DIRECT) {
        direct_forward(&g, cv, y, x, w, b, batch, ws);
        return DPT_OK;
    }
    float *col = ws, *tmp = ws + 2 * round16(g.k * g.nb * g.p);
    size_t nb = forward_images(&g);
    for (size_t n0 = 0; n0 < batch; n0 += nb) {
        size_t nimg = batch - n0 < nb ? batch - n0 : nb, ld = nimg * g.p;
        float *yb = y + n0 * g.o * g.p;
        im2col(&g, x + n0 * g.c * g.h * g.w, nimg, col, ld);
        /* One image: the product is already y's layout. */
        float *out = nimg == 1 ? yb : tmp;
        dpt_gemm(0, 0, g.o, ld, g.k, 1.0f, w, g.k, col, ld, 0.0f, out, ld);
        for (size_t n = 0; n < nimg; n++)
            store_bias(yb + n * g.o * g.p, out + n * g.p, ld, b, g.o, g.p);
    }
    return DPT_OK;
}

/* Copies dy of `nimg` images [nimg, O, P] into t [O, nimg*P]. */
static void gather_dy(const conv_geom_t *g, float *t, const float *dy, size_t nimg)
{
    size_t ld = nimg * g->p;
    for (size_t n = 0; n < nimg; n++)
        for (size_t o = 0; o < g->o; o++)
            memcpy(t + o * ld + n * g->p, dy + (n * g->o + o) * g->p, g->p * sizeof(float));
}

/* dw [O, K] += dY [O, ld] · col^T of one block. The GEMM packs its B
 * operand transposed (both operands hold the block's ld columns as rows);
 * the smaller of dY and col should be that operand: with O < K the block's
 * product is computed as its transpose dwt [K, O] = col · dY^T and added
 * to dw transposed. Which way is a function of the geometry. */
static void dw_block(const conv_geom_t *g, float *dw, const float *dym, const float *col, size_t ld,
                     float *dwt)
{
    if (g->o >= g->k) {
        dpt_gemm(0, 1, g->o, g->k, ld, 1.0f, dym, ld, col, ld, 1.0f, dw, g->k);
        return;
    }
    dpt_gemm(0, 1, g->k, g->o, ld, 1.0f, col, ld, dym, ld, 0.0f, dwt, g->o);
    for (size_t o = 0; o < g->o; o++)
        for (size_t k = 0; k < g->k; k++)
            dw[o * g->k + k] += dwt[k * g->o + o];
}

int dpt_conv2d_backward(const dpt_conv2d_t *cv, float *dx, float *dw, float *db, const float *dy,
                        const float *x, const float *w, size_t batch, float *ws)
{
    int rc = dpt_conv2d_check(cv);
    if (rc != 0)
        return rc;
    if (batch == 0 || (!dx && !dw && !db))
        return DPT_OK;
    if (!dy || !ws || (dw && !x) || (dx && !w))
        return dpt_error(DPT_EINVAL,
                         "conv2d: backward: dy, the workspace, x (for dw) and w (for dx) are "
                         "required");
    conv_geom_t g = geom_of(cv);
    size_t colsz = round16(g.k * g.nb * g.p);
    float *col = ws, *dcol = ws + colsz, *tmp = ws + 2 * colsz;
    float *dwt = tmp + round16(g.o * g.nb * g.p);
    for (size_t n0 = 0; n0 < batch; n0 += g.nb) {
        size_t nimg = batch - n0 < g.nb ? batch - n0 : g.nb, ld = nimg * g.p;
        const float *dyb = dy + n0 * g.o * g.p;
        if (db)
            for (size_t n = 0; n < nimg; n++)
                for (size_t o = 0; o < g.o; o++)
                    db[o] += lane_sum(dyb + (n * g.o + o) * g.p, g.p);
        if (!dw && !dx)
            continue;
        /* dY of the block as one [O, nimg*P] matrix. */
        const float *dym = dyb;
        if (nimg > 1) {
            gather_dy(&g, tmp, dyb, nimg);
            dym = tmp;
        }
        if (dw) {
            im2col(&g, x + n0 * g.c * g.h * g.w, nimg, col, ld);
            dw_block(&g, dw, dym, col, ld, dwt);
        }
        if (dx) {
            dpt_gemm(1, 0, g.k, ld, g.o, 1.0f, w, g.k, dym, ld, 0.0f, dcol, ld);
            col2im(&g, dx + n0 * g.c * g.h * g.w, nimg, dcol, ld);
        }
    }
    return DPT_OK;
}

void dpt_conv_nhwc_to_nchw(float *dst, const float *src, size_t batch, size_t h, size_t w, size_t c)
{
    size_t hw = h * w;
    for (size_t n = 0; n < batch; n++) {
        const float *s = src + n * hw * c;
        float *d = dst + n * hw * c;
        for (size_t p = 0; p < hw; p++)
            for (size_t k = 0; k < c; k++)
                d[k * hw + p] = s[p * c + k];
    }
}
