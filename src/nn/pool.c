/*
 * Max and average pooling (dpt/conv.h) on NCHW batches.
 *
 * Each (image, channel) plane is pooled on its own, window by window in
 * row-major order. A window is clipped to the image first (padding never
 * takes part: it is -infinity for max and zero for average), so the loops
 * only visit the window's elements inside the image. The geometry check
 * keeps each padding below the window, so every clipped window is non-empty.
 *
 * Max pooling keeps no index buffer: the backward pass finds each window's
 * chosen element again with the same function the forward used
 * (window_argmax), so both agree bit for bit, ties and NaNs included.
 */
#include "conv_impl.h"
#include "nn_impl.h"
#include "dpt/conv.h"
#include "dpt/status.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A window clipped to the image: rows [r0, r1), columns [c0, c1). */
typedef struct window {
    size_t r0, r1, c0, c1;
} window_t;

/* Sizes derived from a checked geometry. */
typedef struct pool_geom {
    size_t h, w, oh, ow, kh, kw, sh, sw, pt, pl;
    size_t planes; /* batch * channels */
} pool_geom_t;

int dpt_pool2d_check(const dpt_pool2d_t *p)
{
    if (!p)
        return dpt_error(DPT_EINVAL, "pool2d: no geometry given");
    if (p->channels == 0)
        return dpt_error(DPT_EINVAL, "pool2d: 0 channels (must be >= 1)");
    int rc = dpt__conv_axis_check("pool2d", "height", p->in_h, p->kh, p->stride_h, p->pad_top,
                                  p->pad_bottom);
    if (rc == 0)
        rc = dpt__conv_axis_check("pool2d", "width", p->in_w, p->kw, p->stride_w, p->pad_left,
                                  p->pad_right);
    return rc;
}

size_t dpt_pool2d_out_h(const dpt_pool2d_t *p)
{
    return dpt__conv_axis_out(p->in_h, p->kh, p->stride_h, p->pad_top, p->pad_bottom);
}

size_t dpt_pool2d_out_w(const dpt_pool2d_t *p)
{
    return dpt__conv_axis_out(p->in_w, p->kw, p->stride_w, p->pad_left, p->pad_right);
}

/* Checks the geometry and the arrays; fills *g. */
static int pool_begin(const dpt_pool2d_t *p, const char *what, const void *a, const void *b,
                      size_t batch, pool_geom_t *g)
{
    int rc = dpt_pool2d_check(p);
    if (rc != 0)
        return rc;
    if (batch > 0 && (!a || !b))
        return dpt_error(DPT_EINVAL, "pool2d: %s: an array is NULL", what);
    *g = (pool_geom_t){
        .h = p->in_h,
        .w = p->in_w,
        .oh = dpt_pool2d_out_h(p),
        .ow = dpt_pool2d_out_w(p),
        .kh = p->kh,
        .kw = p->kw,
        .sh = p->stride_h,
        .sw = p->stride_w,
        .pt = p->pad_top,
        .pl = p->pad_left,
        .planes = batch * p->channels,
    };
    return DPT_OK;
}

/* Output (i, j)'s window, clipped to the image. The padding is below the
 * window on each side, so i*sh + kh > pt and the window is never empty. */
static window_t window_at(const pool_geom_t *g, size_t i, size_t j)
{
    size_t rs = i * g->sh, cs = j * g->sw;
    window_t win = {
        .r0 = rs >= g->pt ? rs - g->pt : 0,
        .r1 = rs + g->kh - g->pt,
        .c0 = cs >= g->pl ? cs - g->pl : 0,
        .c1 = cs + g->kw - g->pl,
    };
    win.r1 = win.r1 < g->h ? win.r1 : g->h;
    win.c1 = win.c1 < g->w ? win.c1 : g->w;
    return win;
}

/* Index in the plane of the window's largest element: the first in
 * row-major order among equals; the first NaN when there is one. */
static size_t window_argmax(const float *x, size_t w, window_t win)
{
    size_t best = win.r0 * w + win.c0;
    float m = x[best];
    for (size_t r = win.r0; r < win.r1; r++) {
        for (size_t c = win.c0; c < win.c1; c++) {
            float v = x[r * w + c];
            if (v > m || (isnan(v) && !isnan(m))) {
                m = v;
                best = r * w + c;
            }
        }
    }
    return best;
}

/* Always inlined: a call left in a loop stops its vectorisation. */
#if defined(__GNUC__)
#define POOL_INLINE static inline __attribute__((always_inline))
#else
#define POOL_INLINE static inline
#endif

/*
 * The usual pooling, 2x2 windows of stride 2 without padding, on one pair
 * of rows at a time, without branches so that it vectorises: the choice of
 * window_argmax (the first largest in row-major order, the first NaN when
 * there is one) made on integer keys that order floats as the comparisons
 * do: a NaN is above every number, -0 equals +0, and otherwise the key of
 * a float orders like its value (the bits, with the magnitude bits of
 * negatives flipped). Strictly greater keys replace the choice, so equals
 * keep the first, as the float comparisons do.
 */
POOL_INLINE int32_t pool_key(float v)
{
    int32_t b;
    memcpy(&b, &v, sizeof b);
    int32_t mag = b & 0x7fffffff;
    int32_t k = b ^ ((b >> 31) & 0x7fffffff);
    k = mag == 0 ? 0 : k;
    return mag > 0x7f800000 ? INT32_MAX : k;
}

/* The window of output j of a row pair (r0, r1): which of its four
 * elements is chosen, 0..3 in row-major order. */
POOL_INLINE int32_t pool_pick4(const float *restrict r0, const float *restrict r1, size_t j)
{
    int32_t best = 0, m = pool_key(r0[2 * j]), k = pool_key(r0[2 * j + 1]);
    best = k > m ? 1 : best, m = k > m ? k : m;
    k = pool_key(r1[2 * j]);
    best = k > m ? 2 : best, m = k > m ? k : m;
    k = pool_key(r1[2 * j + 1]);
    return k > m ? 3 : best;
}

/* Window j of a row pair gets g at its choice c (0..3) and 0 elsewhere,
 * with integer masks (a float select here is not if-converted). */
static inline void store_choice(float *restrict d0, float *restrict d1, size_t j, uint32_t c,
                                float gf)
{
    uint32_t g;
    memcpy(&g, &gf, sizeof g);
    uint32_t v0 = g & -(uint32_t)(c == 0), v1 = g & -(uint32_t)(c == 1);
    uint32_t v2 = g & -(uint32_t)(c == 2), v3 = g & -(uint32_t)(c == 3);
    memcpy(&d0[2 * j], &v0, sizeof v0);
    memcpy(&d0[2 * j + 1], &v1, sizeof v1);
    memcpy(&d1[2 * j], &v2, sizeof v2);
    memcpy(&d1[2 * j + 1], &v3, sizeof v3);
}

/* Blocks of a row's outputs handled as one vector of fixed length. */
#define POOL_BLOCK 8

/* The end of the whole blocks that cover a row of ow outputs, with `room`
 * outputs from the row's first to the end of the arrays: ow rounded up to
 * blocks where there is room, else the blocks that fit. */
static inline size_t pool_blocks_end(size_t ow, size_t room)
{
    size_t up = (ow + POOL_BLOCK - 1) / POOL_BLOCK * POOL_BLOCK;
    return up <= room ? up : room / POOL_BLOCK * POOL_BLOCK;
}

/*
 * The forward of q row pairs that also keeps each window's choice: row
 * pair k is x[2k*2ow, (2k+2)*2ow), its outputs y[k*ow, (k+1)*ow). Rows of a
 * few outputs (Fashion-MNIST's 14 and 7) would leave the vectorised loop
 * to scalar tails; instead each row runs in whole blocks of POOL_BLOCK
 * outputs, the last block of a row running past its end into the inputs
 * and outputs of the row pairs after it, which those rows then overwrite
 * (rows go in order). A block that would pass the end of the arrays is
 * done one output at a time: nothing outside them is read or written.
 */
/* Outputs [0, n) of a row pair (r0, r1), with their choices. */
DPT__NN_CLONES
static void maxpool_2x2_row_idx(float *restrict y, dpt__pool_choice_t *restrict idx,
                                const float *restrict r0, const float *restrict r1, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        int32_t c = pool_pick4(r0, r1, j);
        float a = r0[2 * j], b = r0[2 * j + 1], d = r1[2 * j], e = r1[2 * j + 1];
        y[j] = c == 0 ? a : c == 1 ? b : c == 2 ? d : e;
        idx[j] = c;
    }
}

static void maxpool_2x2_idx_rows(float *y, dpt__pool_choice_t *idx, const float *x, size_t q,
                                 size_t ow)
{
    for (size_t k = 0; k < q; k++) {
        const float *r0 = x + 4 * k * ow, *r1 = r0 + 2 * ow;
        size_t end = pool_blocks_end(ow, (q - k) * ow);
        maxpool_2x2_row_idx(y + k * ow, idx + k * ow, r0, r1, end);
        if (end < ow)
            maxpool_2x2_row_idx(y + k * ow + end, idx + k * ow + end, r0 + 2 * end, r1 + 2 * end,
                                ow - end);
    }
}

/* One row of a pair's gradient, outputs [0, n): dr[2j + h] = g[j] where
 * the choice c[j] is `row` * 2 + h, else 0. */
DPT__NN_CLONES
static void maxpool_2x2_row_store(float *restrict dr, const float *restrict g,
                                  const dpt__pool_choice_t *restrict c, size_t n, uint32_t row)
{
    for (size_t j = 0; j < n; j++) {
        uint32_t b, cj = (uint32_t)c[j];
        memcpy(&b, &g[j], sizeof b);
        uint32_t v0 = b & -(uint32_t)(cj == 2 * row), v1 = b & -(uint32_t)(cj == 2 * row + 1);
        memcpy(&dr[2 * j], &v0, sizeof v0);
        memcpy(&dr[2 * j + 1], &v1, sizeof v1);
    }
}

/* The storing backward of q row pairs from the forward's choices, in
 * blocks as the forward: a block past a row's end writes gradient that
 * comes later in dx, which its own row then overwrites; so the top row of
 * a pair goes before its bottom row. */
static void maxpool_2x2_idx_rows_store(float *dx, const float *dy, const dpt__pool_choice_t *idx,
                                       size_t q, size_t ow)
{
    for (size_t k = 0; k < q; k++) {
        size_t end = pool_blocks_end(ow, (q - k) * ow);
        const float *g = dy + k * ow;
        const dpt__pool_choice_t *c = idx + k * ow;
        for (uint32_t row = 0; row < 2; row++) {
            float *dr = dx + 4 * k * ow + row * 2 * ow;
            maxpool_2x2_row_store(dr, g, c, end, row);
            if (end < ow)
                maxpool_2x2_row_store(dr + 2 * end, g + end, c + end, ow - end, row);
        }
    }
}

DPT__NN_CLONES
static void maxpool_2x2_rows(float *restrict y, const float *restrict r0, const float *restrict r1,
                             size_t ow)
{
    for (size_t j = 0; j < ow; j++) {
        int32_t c = pool_pick4(r0, r1, j);
        float a = r0[2 * j], b = r0[2 * j + 1], d = r1[2 * j], e = r1[2 * j + 1];
        y[j] = c == 0 ? a : c == 1 ? b : c == 2 ? d : e;
    }
}

/* The same, storing: dx gets dy where chosen and 0 elsewhere (a layer's
 * own gradient buffer needs no zeroing first). */
DPT__NN_CLONES
static void maxpool_2x2_rows_store(float *restrict d0, float *restrict d1, const float *restrict dy,
                                   const float *restrict r0, const float *restrict r1, size_t ow)
{
    for (size_t j = 0; j < ow; j++)
        store_choice(d0, d1, j, (uint32_t)pool_pick4(r0, r1, j), dy[j]);
}

DPT__NN_CLONES
static void maxpool_2x2_rows_back(float *restrict d0, float *restrict d1, const float *restrict dy,
                                  const float *restrict r0, const float *restrict r1, size_t ow)
{
    for (size_t j = 0; j < ow; j++) {
        int32_t c = pool_pick4(r0, r1, j);
        float g = dy[j];
        /* Only the chosen element changes (an unchosen -0 stays -0). */
        d0[2 * j] = c == 0 ? d0[2 * j] + g : d0[2 * j];
        d0[2 * j + 1] = c == 1 ? d0[2 * j + 1] + g : d0[2 * j + 1];
        d1[2 * j] = c == 2 ? d1[2 * j] + g : d1[2 * j];
        d1[2 * j + 1] = c == 3 ? d1[2 * j + 1] + g : d1[2 * j + 1];
    }
}

static int is_2x2(const pool_geom_t *g)
{
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->pt == 0 && g->pl == 0 &&
           2 * g->oh <= g->h && 2 * g->ow <= g->w;
}

int dpt_maxpool2d_forward(const dpt_pool2d_t *p, float *y, const float *x, size_t batch)
{
    pool_geom_t g;
    int rc = pool_begin(p, "max forward", y, x, batch, &g);
    if (rc != 0)
        return rc;
    int two = is_2x2(&g);
    for (size_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        float *yp = y + pl * g.oh * g.ow;
        for (size_t i = 0; i < g.oh; i++) {
            if (two) {
                const float *r0 = xp + 2 * i * g.w;
                maxpool_2x2_rows(yp + i * g.ow, r0, r0 + g.w, g.ow);
                continue;
            }
            for (size_t j = 0; j < g.ow; j++)
                yp[i * g.ow + j] = xp[window_argmax(xp, g.w, window_at(&g, i, j))];
        }
    }
    return DPT_OK;
}

int dpt_maxpool2d_backward(const dpt_pool2d_t *p, float *dx, const float *dy, const float *x,
                           size_t batch)
{
    pool_geom_t g;
    int rc = pool_begin(p, "max backward", dx, dy, batch, &g);
    if (rc != 0)
        return rc;
    if (batch > 0 && !x)
        return dpt_error(DPT_EINVAL, "pool2d: max backward: x (the forward's input) is NULL");
    for (size_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        const float *dyp = dy + pl * g.oh * g.ow;
        float *dxp = dx + pl * g.h * g.w;
        int two = is_2x2(&g);
        for (size_t i = 0; i < g.oh; i++) {
            if (two) {
                const float *r0 = xp + 2 * i * g.w;
                float *d0 = dxp + 2 * i * g.w;
                maxpool_2x2_rows_back(d0, d0 + g.w, dyp + i * g.ow, r0, r0 + g.w, g.ow);
                continue;
            }
            for (size_t j = 0; j < g.ow; j++)
                dxp[window_argmax(xp, g.w, window_at(&g, i, j))] += dyp[i * g.ow + j];
        }
    }
    return DPT_OK;
}

int dpt__maxpool2d_has_idx(const dpt_pool2d_t *p)
{
    pool_geom_t g;
    if (pool_begin(p, "max", p, p, 0, &g) != 0)
        return 0;
    return is_2x2(&g) && g.h == 2 * g.oh && g.w == 2 * g.ow;
}

int dpt__maxpool2d_forward_idx(const dpt_pool2d_t *p, float *y, dpt__pool_choice_t *idx,
                               const float *x, size_t batch)
{
    if (!dpt__maxpool2d_has_idx(p))
        return dpt_maxpool2d_forward(p, y, x, batch);
    pool_geom_t g = {0};
    int rc = pool_begin(p, "max forward", y, x, batch, &g);
    if (rc != 0)
        return rc;
    maxpool_2x2_idx_rows(y, idx, x, g.planes * g.oh, g.ow);
    return DPT_OK;
}

int dpt__maxpool2d_backward_store_idx(const dpt_pool2d_t *p, float *dx, const float *dy,
                                      const dpt__pool_choice_t *idx, size_t batch)
{
    pool_geom_t g = {0};
    int rc = pool_begin(p, "max backward", dx, dy, batch, &g);
    if (rc != 0)
        return rc;
    if (!dpt__maxpool2d_has_idx(p))
        return dpt_error(DPT_EINVAL, "pool2d: max backward: no choices for this geometry");
    maxpool_2x2_idx_rows_store(dx, dy, idx, g.planes * g.oh, g.ow);
    return DPT_OK;
}

int dpt__maxpool2d_backward_store(const dpt_pool2d_t *p, float *dx, const float *dy, const float *x,
                                  size_t batch)
{
    pool_geom_t g;
    int rc = pool_begin(p, "max backward", dx, dy, batch, &g);
    if (rc != 0)
        return rc;
    if (!is_2x2(&g) || g.h != 2 * g.oh || g.w != 2 * g.ow) {
        memset(dx, 0, g.planes * g.h * g.w * sizeof *dx);
        return dpt_maxpool2d_backward(p, dx, dy, x, batch);
    }
    /* Every element of dx is in one window: each is written once. */
    for (size_t q = 0; q < g.planes * g.oh; q++) {
        const float *r0 = x + 2 * q * g.w;
        float *d0 = dx + 2 * q * g.w;
        maxpool_2x2_rows_store(d0, d0 + g.w, dy + q * g.ow, r0, r0 + g.w, g.ow);
    }
    return DPT_OK;
}

/* The divisor of a window: kh*kw, or its elements inside the image. */
static float window_divisor(const dpt_pool2d_t *p, window_t win)
{
    if (p->count_pad)
        return (float)(p->kh * p->kw);
    return (float)((win.r1 - win.r0) * (win.c1 - win.c0));
}

int dpt_avgpool2d_forward(const dpt_pool2d_t *p, float *y, const float *x, size_t batch)
{
    pool_geom_t g;
    int rc = pool_begin(p, "average forward", y, x, batch, &g);
    if (rc != 0)
        return rc;
    for (size_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        float *yp = y + pl * g.oh * g.ow;
        for (size_t i = 0; i < g.oh; i++) {
            for (size_t j = 0; j < g.ow; j++) {
                window_t win = window_at(&g, i, j);
                float s = 0.0f;
                for (size_t r = win.r0; r < win.r1; r++)
                    for (size_t c = win.c0; c < win.c1; c++)
                        s += xp[r * g.w + c];
                yp[i * g.ow + j] = s / window_divisor(p, win);
            }
        }
    }
    return DPT_OK;
}

int dpt_avgpool2d_backward(const dpt_pool2d_t *p, float *dx, const float *dy, size_t batch)
{
    pool_geom_t g;
    int rc = pool_begin(p, "average backward", dx, dy, batch, &g);
    if (rc != 0)
        return rc;
    for (size_t pl = 0; pl < g.planes; pl++) {
        const float *dyp = dy + pl * g.oh * g.ow;
        float *dxp = dx + pl * g.h * g.w;
        for (size_t i = 0; i < g.oh; i++) {
            for (size_t j = 0; j < g.ow; j++) {
                window_t win = window_at(&g, i, j);
                float d = dyp[i * g.ow + j] / window_divisor(p, win);
                for (size_t r = win.r0; r < win.r1; r++)
                    for (size_t c = win.c0; c < win.c1; c++)
                        dxp[r * g.w + c] += d;
            }
        }
    }
    return DPT_OK;
}
