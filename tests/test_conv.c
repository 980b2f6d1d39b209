/*
 * conv: 2-D convolution and pooling against naive reference loops in
 * double, gradients against central differences, bitwise reproducibility.
 *
 * Reference checks: dpt's float forward and backward (input, weight and
 * bias gradients, accumulated onto nonzero values) against plain loops in
 * double on the same values, within FWD_TOL relative to the largest output
 * (float rounding of sums of a few hundred products is ~1e-6).
 *
 * Gradient checks: the gradient of J = sum(r * y) that dpt's backward gives
 * (dy = r) against central differences (J(v + e) - J(v - e)) / 2e of the
 * reference forward in double, e = 1e-6, for every element of x, w and b.
 * Convolution and average pooling are linear, so the differences are exact
 * up to double rounding; max pooling is piecewise linear and the inputs are
 * random, so no element sits within e of a tie. The tolerance GRAD_TOL is
 * on ||analytic - numeric|| / ||numeric|| and on the largest element error
 * over the largest numeric element; float analytic gradients reach ~1e-6.
 * One more check differentiates dpt's own float forward (h = 1e-2).
 */
#include "dpt_test.h"

#include <pthread.h>
#include <stdint.h>

#include "dpt/arena.h"
#include "dpt/conv.h"
#include "dpt/rng.h"
#include "nn/conv_impl.h"

#define FWD_TOL 1e-5
#define GRAD_TOL 2e-5
#define FD_EPS 1e-6
#define FD_H 1e-2f
#define FD_FLOAT_TOL 2e-3

/* ---- helpers ------------------------------------------------------------- */

static float *falloc(size_t n)
{
    float *p = dpt_alloc_aligned((n ? n : 1) * sizeof(float));
    if (!p)
        abort();
    return p;
}

static double *dalloc(size_t n)
{
    double *p = malloc((n ? n : 1) * sizeof(double));
    if (!p)
        abort();
    return p;
}

static void to_double(double *d, const float *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = (double)f[i];
}

/* max |a - b| / max(1, max |b|) */
static double max_err(const float *a, const double *b, size_t n)
{
    double m = 0.0, big = 1.0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs(b[i]));
    }
    return m / big;
}

/* ||a - n|| / ||n|| and the largest element error over the largest |n|,
 * the worse of the two. */
static double grad_err(const float *a, const double *num, size_t count)
{
    double d = 0.0, nn = 0.0, m = 0.0, big = 0.0;
    for (size_t i = 0; i < count; i++) {
        double e = (double)a[i] - num[i];
        d += e * e;
        nn += num[i] * num[i];
        m = fmax(m, fabs(e));
        big = fmax(big, fabs(num[i]));
    }
    if (nn == 0.0)
        return sqrt(d);
    return fmax(sqrt(d / nn), m / big);
}

static size_t conv_nx(const dpt_conv2d_t *cv, size_t batch)
{
    return batch * cv->in_c * cv->in_h * cv->in_w;
}
static size_t conv_ny(const dpt_conv2d_t *cv, size_t batch)
{
    return batch * cv->out_c * dpt_conv2d_out_h(cv) * dpt_conv2d_out_w(cv);
}
static size_t conv_nw(const dpt_conv2d_t *cv)
{
    return cv->out_c * cv->in_c * cv->kh * cv->kw;
}

/* ---- reference convolution in double ------------------------------------ */

/* The input index of output i's tap u along an axis, or -1 outside. */
static long tap(size_t i, size_t s, size_t u, size_t lo, size_t in)
{
    long t = (long)(i * s + u) - (long)lo;
    return t >= 0 && t < (long)in ? t : -1;
}

static void ref_conv_forward(const dpt_conv2d_t *cv, size_t batch, const double *x, const double *w,
                             const double *b, double *y)
{
    size_t oh = dpt_conv2d_out_h(cv), ow = dpt_conv2d_out_w(cv);
    size_t C = cv->in_c, H = cv->in_h, W = cv->in_w;
    for (size_t n = 0; n < batch; n++)
        for (size_t o = 0; o < cv->out_c; o++)
            for (size_t i = 0; i < oh; i++)
                for (size_t j = 0; j < ow; j++) {
                    double s = b ? b[o] : 0.0;
                    for (size_t c = 0; c < C; c++)
                        for (size_t u = 0; u < cv->kh; u++)
                            for (size_t v = 0; v < cv->kw; v++) {
                                long ih = tap(i, cv->stride_h, u, cv->pad_top, H);
                                long iw = tap(j, cv->stride_w, v, cv->pad_left, W);
                                if (ih < 0 || iw < 0)
                                    continue;
                                s += w[((o * C + c) * cv->kh + u) * cv->kw + v] *
                                     x[((n * C + c) * H + (size_t)ih) * W + (size_t)iw];
                            }
                    y[((n * cv->out_c + o) * oh + i) * ow + j] = s;
                }
}

/* Accumulates the three gradients (any may be NULL). */
static void ref_conv_backward(const dpt_conv2d_t *cv, size_t batch, const double *x,
                              const double *w, const double *dy, double *dx, double *dw, double *db)
{
    size_t oh = dpt_conv2d_out_h(cv), ow = dpt_conv2d_out_w(cv);
    size_t C = cv->in_c, H = cv->in_h, W = cv->in_w;
    for (size_t n = 0; n < batch; n++)
        for (size_t o = 0; o < cv->out_c; o++)
            for (size_t i = 0; i < oh; i++)
                for (size_t j = 0; j < ow; j++) {
                    double g = dy[((n * cv->out_c + o) * oh + i) * ow + j];
                    if (db)
                        db[o] += g;
                    for (size_t c = 0; c < C; c++)
                        for (size_t u = 0; u < cv->kh; u++)
                            for (size_t v = 0; v < cv->kw; v++) {
                                long ih = tap(i, cv->stride_h, u, cv->pad_top, H);
                                long iw = tap(j, cv->stride_w, v, cv->pad_left, W);
                                if (ih < 0 || iw < 0)
                                    continue;
                                size_t xi = ((n * C + c) * H + (size_t)ih) * W + (size_t)iw;
                                size_t wi = ((o * C + c) * cv->kh + u) * cv->kw + v;
                                if (dx)
                                    dx[xi] += w[wi] * g;
                                if (dw)
                                    dw[wi] += x[xi] * g;
                            }
                }
}

/* ---- one convolution problem --------------------------------------------- */

typedef struct conv_prob {
    dpt_conv2d_t cv;
    size_t batch, nx, nw, ny, nws;
    int bias;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db, *ws;
    double *xd, *wd, *bd, *yd, *dyd;
} conv_prob_t;

static void conv_prob_init(conv_prob_t *q, dpt_conv2d_t cv, size_t batch, int bias, uint32_t seed)
{
    memset(q, 0, sizeof *q);
    q->cv = cv;
    q->batch = batch;
    q->bias = bias;
    q->nx = conv_nx(&cv, batch);
    q->nw = conv_nw(&cv);
    q->ny = conv_ny(&cv, batch);
    if (dpt_conv2d_workspace(&cv, &q->nws) != 0)
        abort();
    q->x = falloc(q->nx), q->dx = falloc(q->nx);
    q->w = falloc(q->nw), q->dw = falloc(q->nw);
    q->b = falloc(cv.out_c), q->db = falloc(cv.out_c);
    q->y = falloc(q->ny), q->dy = falloc(q->ny);
    q->ws = falloc(q->nws);
    q->xd = dalloc(q->nx), q->wd = dalloc(q->nw), q->bd = dalloc(cv.out_c);
    q->yd = dalloc(q->ny), q->dyd = dalloc(q->ny);
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_TEST);
    dpt_rng_fill_uniform(&rng, q->x, q->nx, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, q->w, q->nw, -0.5f, 0.5f);
    dpt_rng_fill_uniform(&rng, q->b, cv.out_c, -0.5f, 0.5f);
    dpt_rng_fill_uniform(&rng, q->dy, q->ny, -1.0f, 1.0f);
    /* NaN in the workspace: nothing may read it before writing it. */
    for (size_t i = 0; i < q->nws; i++)
        q->ws[i] = NAN;
    to_double(q->xd, q->x, q->nx);
    to_double(q->wd, q->w, q->nw);
    to_double(q->bd, q->b, cv.out_c);
    to_double(q->dyd, q->dy, q->ny);
}

static void conv_prob_free(conv_prob_t *q)
{
    dpt_free_aligned(q->x), dpt_free_aligned(q->dx), dpt_free_aligned(q->w);
    dpt_free_aligned(q->dw), dpt_free_aligned(q->b), dpt_free_aligned(q->db);
    dpt_free_aligned(q->y), dpt_free_aligned(q->dy), dpt_free_aligned(q->ws);
    free(q->xd), free(q->wd), free(q->bd), free(q->yd), free(q->dyd);
}

static void describe(const dpt_conv2d_t *cv, size_t batch)
{
    fprintf(stderr,
            "  conv N=%zu C=%zu %zux%zu -> O=%zu, kernel %zux%zu, stride %zux%zu, pad t%zu b%zu "
            "l%zu r%zu\n",
            batch, cv->in_c, cv->in_h, cv->in_w, cv->out_c, cv->kh, cv->kw, cv->stride_h,
            cv->stride_w, cv->pad_top, cv->pad_bottom, cv->pad_left, cv->pad_right);
}

/* Forward and the three gradients against the reference loops; the
 * gradients accumulate onto values already there. */
static void check_conv_ref(dpt_conv2d_t cv, size_t batch, int bias, uint32_t seed)
{
    conv_prob_t q;
    REQUIRE_OK(dpt_conv2d_check(&cv));
    conv_prob_init(&q, cv, batch, bias, seed);
    size_t O = cv.out_c;
    REQUIRE_OK(dpt_conv2d_forward(&cv, q.y, q.x, q.w, bias ? q.b : NULL, batch, q.ws));
    ref_conv_forward(&cv, batch, q.xd, q.wd, bias ? q.bd : NULL, q.yd);
    double ef = max_err(q.y, q.yd, q.ny);

    /* Gradients start from values in [-1, 1]. */
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 1, 0, DPT_RNG_TEST);
    dpt_rng_fill_uniform(&rng, q.dx, q.nx, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, q.dw, q.nw, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, q.db, O, -1.0f, 1.0f);
    double *dxr = dalloc(q.nx), *dwr = dalloc(q.nw), *dbr = dalloc(O);
    to_double(dxr, q.dx, q.nx);
    to_double(dwr, q.dw, q.nw);
    to_double(dbr, q.db, O);
    REQUIRE_OK(dpt_conv2d_backward(&cv, q.dx, q.dw, q.db, q.dy, q.x, q.w, batch, q.ws));
    ref_conv_backward(&cv, batch, q.xd, q.wd, q.dyd, dxr, dwr, dbr);
    double ex = max_err(q.dx, dxr, q.nx), ew = max_err(q.dw, dwr, q.nw);
    double eb = max_err(q.db, dbr, O);
    if (ef > FWD_TOL || ex > FWD_TOL || ew > FWD_TOL || eb > FWD_TOL) {
        describe(&cv, batch);
        fprintf(stderr, "  path %s: errors y %.3g dx %.3g dw %.3g db %.3g\n",
                dpt__conv_path_name(dpt__conv2d_path(&cv)), ef, ex, ew, eb);
    }
    CHECK(ef <= FWD_TOL);
    CHECK(ex <= FWD_TOL);
    CHECK(ew <= FWD_TOL);
    CHECK(eb <= FWD_TOL);
    free(dxr), free(dwr), free(dbr);
    conv_prob_free(&q);
}

/* J = sum(r * y) of the reference forward in double. */
static double conv_j(const conv_prob_t *q)
{
    ref_conv_forward(&q->cv, q->batch, q->xd, q->wd, q->bias ? q->bd : NULL, q->yd);
    double j = 0.0;
    for (size_t i = 0; i < q->ny; i++)
        j += q->dyd[i] * q->yd[i];
    return j;
}

static void numeric(conv_prob_t *q, double *v, size_t n, double *out)
{
    for (size_t i = 0; i < n; i++) {
        double save = v[i];
        v[i] = save + FD_EPS;
        double jp = conv_j(q);
        v[i] = save - FD_EPS;
        double jm = conv_j(q);
        v[i] = save;
        out[i] = (jp - jm) / (2.0 * FD_EPS);
    }
}

/* dpt's gradients of J against central differences in double. */
static void check_conv_fd(dpt_conv2d_t cv, size_t batch, uint32_t seed)
{
    conv_prob_t q;
    REQUIRE_OK(dpt_conv2d_check(&cv));
    conv_prob_init(&q, cv, batch, 1, seed);
    dpt_vec_zero(q.dx, q.nx);
    dpt_vec_zero(q.dw, q.nw);
    dpt_vec_zero(q.db, cv.out_c);
    REQUIRE_OK(dpt_conv2d_backward(&cv, q.dx, q.dw, q.db, q.dy, q.x, q.w, batch, q.ws));
    size_t most = q.nx > q.nw ? q.nx : q.nw;
    double *num = dalloc(most);
    numeric(&q, q.xd, q.nx, num);
    double ex = grad_err(q.dx, num, q.nx);
    numeric(&q, q.wd, q.nw, num);
    double ew = grad_err(q.dw, num, q.nw);
    numeric(&q, q.bd, cv.out_c, num);
    double eb = grad_err(q.db, num, cv.out_c);
    if (ex > GRAD_TOL || ew > GRAD_TOL || eb > GRAD_TOL) {
        describe(&cv, batch);
        fprintf(stderr, "  gradient errors: dx %.3g dw %.3g db %.3g\n", ex, ew, eb);
    }
    CHECK(ex <= GRAD_TOL);
    CHECK(ew <= GRAD_TOL);
    CHECK(eb <= GRAD_TOL);
    free(num);
    conv_prob_free(&q);
}

/* A geometry: C, H, W -> O, kernel, stride, padding top, bottom, left, right. */
static dpt_conv2d_t conv_of(size_t c, size_t h, size_t w, size_t o, size_t kh, size_t kw, size_t sh,
                            size_t sw, size_t pt, size_t pb, size_t pl, size_t pr)
{
    return (dpt_conv2d_t){c, h, w, o, kh, kw, sh, sw, pt, pb, pl, pr};
}

/* The modes every check runs: stride 1 and 2, no, symmetric and asymmetric
 * padding, odd sizes (5x7 images, a 3x2 kernel), 'same' of an even kernel. */
static const struct {
    dpt_conv2d_t cv;
    size_t batch;
} conv_cases[] = {
    {{3, 5, 7, 4, 3, 2, 1, 1, 0, 0, 0, 0}, 2}, /* odd sizes, no padding */
    {{3, 5, 7, 4, 3, 2, 1, 1, 1, 1, 1, 1}, 2}, /* symmetric padding */
    {{3, 5, 7, 4, 3, 2, 1, 1, 0, 2, 1, 0}, 2}, /* asymmetric padding */
    {{3, 5, 7, 4, 3, 2, 2, 2, 1, 1, 1, 1}, 3}, /* stride 2 */
    {{2, 7, 5, 3, 3, 3, 2, 1, 2, 0, 1, 2}, 2}, /* stride 2 x 1, asymmetric */
    {{4, 6, 6, 5, 2, 2, 1, 1, 0, 1, 0, 1}, 2}, /* 'same' of 2x2 (MinAtar) */
    {{1, 8, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1}, 2}, /* one input channel, 3x3 pad 1 */
    {{3, 4, 5, 2, 1, 1, 1, 1, 0, 0, 0, 0}, 2}, /* 1x1 */
    {{2, 3, 4, 3, 3, 4, 1, 1, 0, 0, 0, 0}, 2}, /* kernel = image: 1x1 output */
    {{2, 5, 5, 3, 4, 4, 3, 3, 3, 3, 3, 3}, 2}, /* stride > 1, padding k-1 */
};
#define NCASES (sizeof conv_cases / sizeof conv_cases[0])

/* ---- convolution tests ---------------------------------------------------- */

static void test_conv_reference(void)
{
    for (size_t i = 0; i < NCASES; i++) {
        check_conv_ref(conv_cases[i].cv, conv_cases[i].batch, 1, (uint32_t)(100 + i));
        check_conv_ref(conv_cases[i].cv, 1, 0, (uint32_t)(200 + i));
    }
    /* Batches spanning several blocks of images, the last of them short
     * (64 + 6) or of one image (64 + 1), and the two benchmark shapes. */
    dpt_conv2d_t odd = conv_of(3, 5, 7, 4, 3, 2, 1, 1, 1, 0, 0, 1);
    CHECK(dpt__conv2d_images(&odd) > 1 && dpt__conv2d_images(&odd) < 70);
    check_conv_ref(odd, 70, 1, 300);
    check_conv_ref(odd, 65, 1, 301);
    check_conv_ref(conv_of(4, 10, 10, 32, 2, 2, 1, 1, 0, 1, 0, 1), 45, 1, 302);
    check_conv_ref(conv_of(32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1), 3, 1, 303);
    check_conv_ref(conv_of(1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1), 5, 1, 304);
}

static void test_conv_direct(void)
{
    /* The direct forward (stride 1) against the same reference. */
    dpt__conv2d_set_path(DPT__CONV_DIRECT);
    for (size_t i = 0; i < NCASES; i++) {
        if (conv_cases[i].cv.stride_h != 1 || conv_cases[i].cv.stride_w != 1)
            continue;
        CHECK(dpt__conv2d_path(&conv_cases[i].cv) == DPT__CONV_DIRECT);
        check_conv_ref(conv_cases[i].cv, conv_cases[i].batch, 1, (uint32_t)(400 + i));
    }
    check_conv_ref(conv_of(4, 10, 10, 32, 2, 2, 1, 1, 0, 1, 0, 1), 3, 1, 410);
    check_conv_ref(conv_of(32, 14, 14, 7, 3, 3, 1, 1, 1, 1, 1, 1), 2, 0, 411);
    /* Stride 2 falls back to im2col. */
    CHECK(dpt__conv2d_path(&conv_cases[3].cv) == DPT__CONV_IM2COL);
    dpt__conv2d_set_path(DPT__CONV_AUTO);
}

static void test_conv_gradcheck(void)
{
    for (size_t i = 0; i < NCASES; i++)
        check_conv_fd(conv_cases[i].cv, conv_cases[i].batch, (uint32_t)(500 + i));
}

/* Central differences of dpt's own float forward. */
static void test_conv_gradcheck_float(void)
{
    dpt_conv2d_t cv = conv_of(3, 5, 7, 4, 3, 2, 2, 1, 1, 0, 0, 1);
    conv_prob_t q;
    conv_prob_init(&q, cv, 2, 1, 600);
    dpt_vec_zero(q.dx, q.nx);
    dpt_vec_zero(q.dw, q.nw);
    dpt_vec_zero(q.db, cv.out_c);
    REQUIRE_OK(dpt_conv2d_backward(&cv, q.dx, q.dw, q.db, q.dy, q.x, q.w, 2, q.ws));
    float *vars[3] = {q.x, q.w, q.b}, *grads[3] = {q.dx, q.dw, q.db};
    size_t counts[3] = {q.nx, q.nw, cv.out_c};
    double *num = dalloc(q.nx);
    for (int v = 0; v < 3; v++) {
        for (size_t i = 0; i < counts[v]; i++) {
            double jv[2];
            for (int s = 0; s < 2; s++) {
                float save = vars[v][i];
                vars[v][i] = save + (s ? -FD_H : FD_H);
                REQUIRE_OK(dpt_conv2d_forward(&cv, q.y, q.x, q.w, q.b, 2, q.ws));
                vars[v][i] = save;
                jv[s] = 0.0;
                for (size_t k = 0; k < q.ny; k++)
                    jv[s] += (double)q.dy[k] * (double)q.y[k];
            }
            num[i] = (jv[0] - jv[1]) / (2.0 * (double)FD_H);
        }
        double e = grad_err(grads[v], num, counts[v]);
        if (e > FD_FLOAT_TOL)
            fprintf(stderr, "  variable %d: relative error %.3g\n", v, e);
        CHECK(e <= FD_FLOAT_TOL);
    }
    free(num);
    conv_prob_free(&q);
}

/* A NULL gradient is not computed; x and w are only needed for dw and dx. */
static void test_conv_partial(void)
{
    dpt_conv2d_t cv = conv_of(3, 5, 7, 4, 3, 2, 1, 2, 1, 1, 0, 1);
    conv_prob_t q;
    conv_prob_init(&q, cv, 3, 1, 700);
    float *dx = falloc(q.nx), *dw = falloc(q.nw), *db = falloc(4);
    dpt_vec_zero(q.dx, q.nx), dpt_vec_zero(q.dw, q.nw), dpt_vec_zero(q.db, 4);
    dpt_vec_zero(dx, q.nx), dpt_vec_zero(dw, q.nw), dpt_vec_zero(db, 4);
    REQUIRE_OK(dpt_conv2d_backward(&cv, q.dx, q.dw, q.db, q.dy, q.x, q.w, 3, q.ws));
    REQUIRE_OK(dpt_conv2d_backward(&cv, dx, NULL, NULL, q.dy, NULL, q.w, 3, q.ws));
    REQUIRE_OK(dpt_conv2d_backward(&cv, NULL, dw, NULL, q.dy, q.x, NULL, 3, q.ws));
    REQUIRE_OK(dpt_conv2d_backward(&cv, NULL, NULL, db, q.dy, NULL, NULL, 3, q.ws));
    CHECK(memcmp(dx, q.dx, q.nx * sizeof(float)) == 0);
    CHECK(memcmp(dw, q.dw, q.nw * sizeof(float)) == 0);
    CHECK(memcmp(db, q.db, 4 * sizeof(float)) == 0);
    dpt_free_aligned(dx), dpt_free_aligned(dw), dpt_free_aligned(db);
    conv_prob_free(&q);
}

/* The forward output and the input gradient of an image do not depend on
 * the rest of the batch: one call on 70 images gives the bits of 70 calls
 * on one image each; the weight gradient is the same bits on every call. */
static void test_conv_bitwise(void)
{
    dpt_conv2d_t cv = conv_of(3, 5, 7, 4, 3, 2, 1, 1, 1, 0, 0, 1);
    size_t batch = 70;
    conv_prob_t q;
    conv_prob_init(&q, cv, batch, 1, 800);
    size_t xi = q.nx / batch, yi = q.ny / batch;
    float *y1 = falloc(q.ny), *dx1 = falloc(q.nx), *dw1 = falloc(q.nw), *db1 = falloc(4);
    dpt_vec_zero(q.dx, q.nx), dpt_vec_zero(dx1, q.nx);
    REQUIRE_OK(dpt_conv2d_forward(&cv, q.y, q.x, q.w, q.b, batch, q.ws));
    REQUIRE_OK(dpt_conv2d_backward(&cv, q.dx, NULL, NULL, q.dy, NULL, q.w, batch, q.ws));
    for (size_t n = 0; n < batch; n++) {
        REQUIRE_OK(dpt_conv2d_forward(&cv, y1 + n * yi, q.x + n * xi, q.w, q.b, 1, q.ws));
        REQUIRE_OK(
            dpt_conv2d_backward(&cv, dx1 + n * xi, NULL, NULL, q.dy + n * yi, NULL, q.w, 1, q.ws));
    }
    CHECK(memcmp(y1, q.y, q.ny * sizeof(float)) == 0);
    CHECK(memcmp(dx1, q.dx, q.nx * sizeof(float)) == 0);
    for (int rep = 0; rep < 2; rep++) {
        float *gw = rep ? dw1 : q.dw, *gb = rep ? db1 : q.db;
        dpt_vec_zero(gw, q.nw), dpt_vec_zero(gb, 4);
        REQUIRE_OK(dpt_conv2d_backward(&cv, NULL, gw, gb, q.dy, q.x, NULL, batch, q.ws));
    }
    CHECK(memcmp(dw1, q.dw, q.nw * sizeof(float)) == 0);
    CHECK(memcmp(db1, q.db, 4 * sizeof(float)) == 0);
    dpt_free_aligned(y1), dpt_free_aligned(dx1), dpt_free_aligned(dw1), dpt_free_aligned(db1);
    conv_prob_free(&q);
}

/* The same pass on two threads at once gives the bits of the main thread. */
typedef struct thread_job {
    conv_prob_t *q;
    float *y, *dx, *dw, *db, *ws;
    int rc;
} thread_job_t;

static void *thread_pass(void *arg)
{
    thread_job_t *j = arg;
    conv_prob_t *q = j->q;
    j->rc = dpt_conv2d_forward(&q->cv, j->y, q->x, q->w, q->b, q->batch, j->ws);
    if (j->rc == 0)
        j->rc =
            dpt_conv2d_backward(&q->cv, j->dx, j->dw, j->db, q->dy, q->x, q->w, q->batch, j->ws);
    return NULL;
}

static void test_conv_threads(void)
{
    conv_prob_t q;
    conv_prob_init(&q, conv_of(4, 10, 10, 32, 2, 2, 1, 1, 0, 1, 0, 1), 40, 1, 900);
    thread_job_t jobs[3];
    for (int t = 0; t < 3; t++) {
        jobs[t] = (thread_job_t){
            &q, falloc(q.ny), falloc(q.nx), falloc(q.nw), falloc(32), falloc(q.nws), -1};
        dpt_vec_zero(jobs[t].dx, q.nx), dpt_vec_zero(jobs[t].dw, q.nw);
        dpt_vec_zero(jobs[t].db, 32);
    }
    thread_pass(&jobs[0]);
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        REQUIRE(pthread_create(&th[t], NULL, thread_pass, &jobs[t + 1]) == 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (int t = 1; t < 3; t++) {
        CHECK(jobs[t].rc == 0);
        CHECK(memcmp(jobs[t].y, jobs[0].y, q.ny * sizeof(float)) == 0);
        CHECK(memcmp(jobs[t].dx, jobs[0].dx, q.nx * sizeof(float)) == 0);
        CHECK(memcmp(jobs[t].dw, jobs[0].dw, q.nw * sizeof(float)) == 0);
        CHECK(memcmp(jobs[t].db, jobs[0].db, 32 * sizeof(float)) == 0);
    }
    for (int t = 0; t < 3; t++) {
        dpt_free_aligned(jobs[t].y), dpt_free_aligned(jobs[t].dx), dpt_free_aligned(jobs[t].dw);
        dpt_free_aligned(jobs[t].db), dpt_free_aligned(jobs[t].ws);
    }
    conv_prob_free(&q);
}

static void test_conv_geometry(void)
{
    /* 'same': PyTorch/XLA put the extra row and column at the bottom and
     * right for an even kernel. */
    dpt_conv2d_t cv = conv_of(4, 10, 10, 32, 2, 2, 1, 1, 9, 9, 9, 9);
    REQUIRE_OK(dpt_conv2d_same(&cv));
    CHECK(cv.pad_top == 0 && cv.pad_bottom == 1 && cv.pad_left == 0 && cv.pad_right == 1);
    CHECK(dpt_conv2d_out_h(&cv) == 10 && dpt_conv2d_out_w(&cv) == 10);
    cv = conv_of(1, 28, 28, 32, 3, 3, 1, 1, 0, 0, 0, 0);
    REQUIRE_OK(dpt_conv2d_same(&cv));
    CHECK(cv.pad_top == 1 && cv.pad_bottom == 1 && cv.pad_left == 1 && cv.pad_right == 1);
    cv = conv_of(1, 6, 5, 1, 3, 3, 2, 2, 0, 0, 0, 0);
    REQUIRE_OK(dpt_conv2d_same(&cv));
    CHECK(cv.pad_top == 0 && cv.pad_bottom == 1 && cv.pad_left == 1 && cv.pad_right == 1);
    CHECK(dpt_conv2d_out_h(&cv) == 3 && dpt_conv2d_out_w(&cv) == 3);
    cv = conv_of(3, 5, 7, 4, 3, 2, 2, 3, 1, 0, 0, 1);
    REQUIRE_OK(dpt_conv2d_check(&cv));
    CHECK(dpt_conv2d_out_h(&cv) == 2 && dpt_conv2d_out_w(&cv) == 3);

    /* Refused geometries, each naming its problem. */
    CHECK_ERR(dpt_conv2d_check(NULL), DPT_EINVAL, "geometry");
    cv = conv_of(0, 5, 5, 1, 3, 3, 1, 1, 0, 0, 0, 0);
    CHECK_ERR(dpt_conv2d_check(&cv), DPT_EINVAL, "channels");
    cv = conv_of(1, 5, 5, 1, 3, 3, 0, 1, 0, 0, 0, 0);
    CHECK_ERR(dpt_conv2d_check(&cv), DPT_EINVAL, "stride");
    cv = conv_of(1, 5, 5, 1, 3, 3, 1, 1, 0, 0, 3, 0);
    CHECK_ERR(dpt_conv2d_check(&cv), DPT_EINVAL, "padding");
    cv = conv_of(1, 2, 5, 1, 4, 3, 1, 1, 1, 0, 0, 0);
    CHECK_ERR(dpt_conv2d_check(&cv), DPT_EINVAL, "smaller than the kernel");
    cv = conv_of(SIZE_MAX / 2, 1000, 1000, 1, 1, 1, 1, 1, 0, 0, 0, 0);
    CHECK_ERR(dpt_conv2d_check(&cv), DPT_EOVERFLOW, "overflow");
    cv = conv_of(1, 5, 5, 1, 3, 3, 1, 1, 0, 0, 0, 0);
    float buf[32] = {0};
    CHECK_ERR(dpt_conv2d_forward(&cv, NULL, buf, buf, NULL, 1, buf), DPT_EINVAL, "required");
    CHECK_OK(dpt_conv2d_forward(&cv, NULL, NULL, NULL, NULL, 0, NULL)); /* empty batch */
    CHECK_ERR(dpt_conv2d_backward(&cv, NULL, buf, NULL, buf, NULL, buf, 1, buf), DPT_EINVAL,
              "required");
}

static void test_nhwc_to_nchw(void)
{
    /* 2 images of 2x3 pixels with 2 channels: value = n*100 + c*10 + p. */
    float src[2 * 6 * 2], dst[2 * 2 * 6];
    for (size_t n = 0; n < 2; n++)
        for (size_t p = 0; p < 6; p++)
            for (size_t c = 0; c < 2; c++)
                src[(n * 6 + p) * 2 + c] = (float)(n * 100 + c * 10 + p);
    dpt_conv_nhwc_to_nchw(dst, src, 2, 2, 3, 2);
    size_t bad = 0;
    for (size_t n = 0; n < 2; n++)
        for (size_t c = 0; c < 2; c++)
            for (size_t p = 0; p < 6; p++)
                bad += dst[(n * 2 + c) * 6 + p] != (float)(n * 100 + c * 10 + p);
    CHECK(bad == 0);
}

/* ---- pooling ----------------------------------------------------------------- */

typedef enum { POOL_MAX, POOL_AVG } pool_kind_t;

/* The reference window of output (i, j): every element of the padded
 * window inside the image. Max: the largest (first among equals); average:
 * the sum over d. Backward accumulates into dx. */
static void ref_pool(const dpt_pool2d_t *p, pool_kind_t kind, size_t batch, const double *x,
                     double *y, const double *dy, double *dx)
{
    size_t oh = dpt_pool2d_out_h(p), ow = dpt_pool2d_out_w(p), H = p->in_h, W = p->in_w;
    for (size_t pl = 0; pl < batch * p->channels; pl++)
        for (size_t i = 0; i < oh; i++)
            for (size_t j = 0; j < ow; j++) {
                double best = -INFINITY, sum = 0.0;
                size_t arg = 0, cnt = 0;
                for (size_t u = 0; u < p->kh; u++)
                    for (size_t v = 0; v < p->kw; v++) {
                        long ih = tap(i, p->stride_h, u, p->pad_top, H);
                        long iw = tap(j, p->stride_w, v, p->pad_left, W);
                        if (ih < 0 || iw < 0)
                            continue;
                        size_t e = (pl * H + (size_t)ih) * W + (size_t)iw;
                        if (cnt == 0 || x[e] > best)
                            best = x[e], arg = e;
                        sum += x[e];
                        cnt++;
                    }
                double d = p->count_pad ? (double)(p->kh * p->kw) : (double)cnt;
                size_t oi = (pl * oh + i) * ow + j;
                if (y)
                    y[oi] = kind == POOL_MAX ? best : sum / d;
                if (!dx)
                    continue;
                if (kind == POOL_MAX) {
                    dx[arg] += dy[oi];
                    continue;
                }
                for (size_t u = 0; u < p->kh; u++)
                    for (size_t v = 0; v < p->kw; v++) {
                        long ih = tap(i, p->stride_h, u, p->pad_top, H);
                        long iw = tap(j, p->stride_w, v, p->pad_left, W);
                        if (ih >= 0 && iw >= 0)
                            dx[(pl * H + (size_t)ih) * W + (size_t)iw] += dy[oi] / d;
                    }
            }
}

static int pool_fwd(const dpt_pool2d_t *p, pool_kind_t kind, float *y, const float *x, size_t n)
{
    return kind == POOL_MAX ? dpt_maxpool2d_forward(p, y, x, n) : dpt_avgpool2d_forward(p, y, x, n);
}

static int pool_bwd(const dpt_pool2d_t *p, pool_kind_t kind, float *dx, const float *dy,
                    const float *x, size_t n)
{
    return kind == POOL_MAX ? dpt_maxpool2d_backward(p, dx, dy, x, n)
                            : dpt_avgpool2d_backward(p, dx, dy, n);
}

static void check_pool(dpt_pool2d_t p, pool_kind_t kind, size_t batch, uint32_t seed)
{
    REQUIRE_OK(dpt_pool2d_check(&p));
    size_t nx = batch * p.channels * p.in_h * p.in_w;
    size_t ny = batch * p.channels * dpt_pool2d_out_h(&p) * dpt_pool2d_out_w(&p);
    float *x = falloc(nx), *dx = falloc(nx), *y = falloc(ny), *dy = falloc(ny);
    double *xd = dalloc(nx), *dxd = dalloc(nx), *yd = dalloc(ny), *dyd = dalloc(ny);
    double *num = dalloc(nx);
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_TEST);
    dpt_rng_fill_uniform(&rng, x, nx, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, dy, ny, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, dx, nx, -1.0f, 1.0f);
    to_double(xd, x, nx);
    to_double(dyd, dy, ny);
    to_double(dxd, dx, nx);
    REQUIRE_OK(pool_fwd(&p, kind, y, x, batch));
    ref_pool(&p, kind, batch, xd, yd, NULL, NULL);
    double ef = max_err(y, yd, ny);
    /* Backward onto nonzero values, against the reference. */
    REQUIRE_OK(pool_bwd(&p, kind, dx, dy, x, batch));
    ref_pool(&p, kind, batch, xd, NULL, dyd, dxd);
    double eb = max_err(dx, dxd, nx);
    /* From zero, against central differences of the reference. */
    dpt_vec_zero(dx, nx);
    REQUIRE_OK(pool_bwd(&p, kind, dx, dy, x, batch));
    for (size_t i = 0; i < nx; i++) {
        double jv[2], save = xd[i];
        for (int s = 0; s < 2; s++) {
            xd[i] = save + (s ? -FD_EPS : FD_EPS);
            ref_pool(&p, kind, batch, xd, yd, NULL, NULL);
            jv[s] = 0.0;
            for (size_t k = 0; k < ny; k++)
                jv[s] += dyd[k] * yd[k];
        }
        xd[i] = save;
        num[i] = (jv[0] - jv[1]) / (2.0 * FD_EPS);
    }
    double eg = grad_err(dx, num, nx);
    if (ef > FWD_TOL || eb > FWD_TOL || eg > GRAD_TOL)
        fprintf(stderr,
                "  %s pool N=%zu C=%zu %zux%zu, window %zux%zu, stride %zux%zu, pad t%zu b%zu "
                "l%zu r%zu, count_pad %d: errors y %.3g dx %.3g gradient %.3g\n",
                kind == POOL_MAX ? "max" : "avg", batch, p.channels, p.in_h, p.in_w, p.kh, p.kw,
                p.stride_h, p.stride_w, p.pad_top, p.pad_bottom, p.pad_left, p.pad_right,
                p.count_pad, ef, eb, eg);
    CHECK(ef <= FWD_TOL);
    CHECK(eb <= FWD_TOL);
    CHECK(eg <= GRAD_TOL);
    dpt_free_aligned(x), dpt_free_aligned(dx), dpt_free_aligned(y), dpt_free_aligned(dy);
    free(xd), free(dxd), free(yd), free(dyd), free(num);
}

static const dpt_pool2d_t pool_cases[] = {
    {3, 6, 8, 2, 2, 2, 2, 0, 0, 0, 0, 1}, /* 2x2 stride 2 (LeNet) */
    {3, 5, 7, 2, 2, 2, 2, 0, 0, 0, 0, 1}, /* odd sizes: last row/column dropped */
    {2, 5, 7, 3, 2, 1, 1, 0, 0, 0, 0, 1}, /* overlapping windows, 3x2 */
    {2, 5, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1}, /* symmetric padding */
    {2, 5, 7, 3, 3, 2, 2, 1, 1, 1, 1, 0}, /* symmetric padding, in-image divisor */
    {2, 5, 7, 3, 2, 2, 1, 0, 2, 1, 0, 1}, /* asymmetric padding */
    {2, 5, 7, 3, 2, 2, 1, 0, 2, 1, 0, 0}, /* asymmetric padding, in-image divisor */
    {1, 4, 4, 4, 4, 1, 1, 0, 0, 0, 0, 1}, /* global pooling */
};

static void test_pool(void)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++) {
        check_pool(pool_cases[i], POOL_MAX, 2, (uint32_t)(1000 + i));
        check_pool(pool_cases[i], POOL_AVG, 2, (uint32_t)(1100 + i));
    }
}

/* The storing max backward the layers use: bitwise the accumulating one
 * onto zeros, for the 2x2 fast path (even sizes: every element written)
 * and the others (odd sizes, other windows), ties and NaNs included. */
static void test_maxpool_store(void)
{
    static const dpt_pool2d_t cases[] = {
        {3, 6, 8, 2, 2, 2, 2, 0, 0, 0, 0, 1},
        {2, 5, 7, 2, 2, 2, 2, 0, 0, 0, 0, 1},
        {2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dpt_pool2d_t p = cases[k];
        size_t n = 2, in = n * p.channels * p.in_h * p.in_w;
        size_t out = n * p.channels * dpt_pool2d_out_h(&p) * dpt_pool2d_out_w(&p);
        float *x = falloc(in), *dy = falloc(out), *a = falloc(in), *b = falloc(in);
        dpt_rng_t rng;
        dpt_rng_init(&rng, 5 + k, 0, 0, 0);
        for (size_t i = 0; i < in; i++) /* few distinct values: many ties */
            x[i] = (float)(dpt_rng_below(&rng, 4)) - 1.5f;
        x[3] = NAN, x[in - 2] = -0.0f, x[in - 1] = 0.0f;
        dpt_rng_fill_uniform(&rng, dy, out, -1.0f, 1.0f);
        memset(a, 0, in * sizeof *a);
        for (size_t i = 0; i < in; i++)
            b[i] = 7.0f; /* garbage: stored over */
        REQUIRE_OK(dpt_maxpool2d_backward(&p, a, dy, x, n));
        REQUIRE_OK(dpt__maxpool2d_backward_store(&p, b, dy, x, n));
        CHECK(memcmp(a, b, in * sizeof *a) == 0);
        /* With the forward's choices kept (2x2 on even sizes only). */
        CHECK(dpt__maxpool2d_has_idx(&p) == (k == 0));
        if (dpt__maxpool2d_has_idx(&p)) {
            float *y1 = falloc(out), *y2 = falloc(out);
            dpt__pool_choice_t *idx = malloc(out * sizeof *idx);
            REQUIRE(idx);
            REQUIRE_OK(dpt_maxpool2d_forward(&p, y1, x, n));
            REQUIRE_OK(dpt__maxpool2d_forward_idx(&p, y2, idx, x, n));
            CHECK(memcmp(y1, y2, out * sizeof *y1) == 0);
            for (size_t i = 0; i < in; i++)
                b[i] = 7.0f;
            REQUIRE_OK(dpt__maxpool2d_backward_store_idx(&p, b, dy, idx, n));
            CHECK(memcmp(a, b, in * sizeof *a) == 0);
            free(idx);
            dpt_free_aligned(y1), dpt_free_aligned(y2);
        } else {
            CHECK_ERR(
                dpt__maxpool2d_backward_store_idx(&p, b, dy, (const dpt__pool_choice_t *)dy, n),
                DPT_EINVAL, "no choices");
        }
        dpt_free_aligned(x), dpt_free_aligned(dy), dpt_free_aligned(a), dpt_free_aligned(b);
    }
}

static void test_pool_ties_nan(void)
{
    /* One 2x2 window of equal values: the first takes the gradient. */
    dpt_pool2d_t p = {1, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1};
    float x[4] = {0.5f, 0.5f, 0.5f, 0.5f}, y[1], dy[1] = {3.0f}, dx[4] = {0};
    REQUIRE_OK(dpt_maxpool2d_forward(&p, y, x, 1));
    REQUIRE_OK(dpt_maxpool2d_backward(&p, dx, dy, x, 1));
    CHECK(y[0] == 0.5f && dx[0] == 3.0f && dx[1] == 0.0f && dx[2] == 0.0f && dx[3] == 0.0f);
    /* A NaN wins and takes the gradient. */
    float xn[4] = {1.0f, NAN, 2.0f, NAN}, dxn[4] = {0};
    REQUIRE_OK(dpt_maxpool2d_forward(&p, y, xn, 1));
    REQUIRE_OK(dpt_maxpool2d_backward(&p, dxn, dy, xn, 1));
    CHECK(isnan(y[0]) && dxn[1] == 3.0f && dxn[0] == 0.0f && dxn[2] == 0.0f && dxn[3] == 0.0f);
    /* Padding is never the maximum, even when every value is negative. */
    dpt_pool2d_t pp = {1, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1};
    float xm[4] = {-4.0f, -3.0f, -2.0f, -1.0f}, ym[9];
    REQUIRE_OK(dpt_maxpool2d_forward(&pp, ym, xm, 1));
    CHECK(ym[0] == -4.0f && ym[4] == -1.0f && ym[8] == -1.0f);
    /* Refused geometries. */
    dpt_pool2d_t bad = {1, 4, 4, 2, 2, 2, 2, 2, 0, 0, 0, 1};
    CHECK_ERR(dpt_pool2d_check(&bad), DPT_EINVAL, "padding");
    bad = (dpt_pool2d_t){0, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0, 1};
    CHECK_ERR(dpt_pool2d_check(&bad), DPT_EINVAL, "channels");
    CHECK_ERR(dpt_maxpool2d_forward(&p, NULL, x, 1), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_maxpool2d_backward(&p, dx, dy, NULL, 1), DPT_EINVAL, "NULL");
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_conv_reference), DPT_TEST(test_conv_direct),
        DPT_TEST(test_conv_gradcheck), DPT_TEST(test_conv_gradcheck_float),
        DPT_TEST(test_conv_partial),   DPT_TEST(test_conv_bitwise),
        DPT_TEST(test_conv_threads),   DPT_TEST(test_conv_geometry),
        DPT_TEST(test_nhwc_to_nchw),   DPT_TEST(test_pool),
        DPT_TEST(test_pool_ties_nan),  DPT_TEST(test_maxpool_store),
    };
    return DPT_TEST_RUN(cases);
}
