/*
 * norm: batch normalization and dropout kernels (dpt/norm.h).
 *
 * Batch normalization against naive reference loops in double on the same
 * values, over every shape N = 1..7, C = 1..5, S in {1, 9, 25}: forward
 * outputs and statistics, and gradients accumulated onto nonzero values,
 * within FWD_TOL of the largest reference value (float rounding of the
 * outputs is ~1e-7; the saved statistics are floats, which moves xhat by
 * about 1e-7 relative).
 *
 * Gradient checks: the gradient of J = sum(r * y) that dpt's backward gives
 * (dy = r) against central differences (J(v + e) - J(v - e)) / 2e of the
 * reference forward in double, e = 1e-6, for every element of x, gamma and
 * beta, in training mode (the statistics depend on x) and in evaluation
 * mode. The error is ||analytic - numeric|| / ||numeric|| or the largest
 * element error over the largest numeric element, the worse of the two,
 * within GRAD_TOL. Most cases are near 5e-8; the worst, 3.4e-6, is N*S = 2
 * in training mode, where dx nearly cancels (two values normalize to
 * about -1 and 1 whatever they are) and float rounding of the terms shows.
 *
 * Dropout: the fraction dropped over 10^6 elements within 0.01 of p (the
 * standard deviation of that fraction is below 5e-4, so 0.01 is over 20 of
 * them and the seeds are fixed), the mask against the documented Philox
 * mapping, bitwise equality between one call and the same rows split in two
 * calls, p = 0 as the identity, the backward against the forward's mask.
 */
#include "dpt_test.h"

#include <stdint.h>

#include "dpt/arena.h"
#include "dpt/norm.h"
#include "dpt/rng.h"

#define FWD_TOL 2e-6
#define GRAD_TOL 1e-5
#define FD_EPS 1e-6

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
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p)
        abort();
    return p;
}

static void to_double(double *d, const float *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = (double)f[i];
}

static void fill(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_TEST);
    dpt_rng_fill_uniform(&rng, x, n, lo, hi);
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

/* ---- reference batch normalization in double ----------------------------- */

/* Per-channel mean and biased variance of x [N, C, S]. */
static void ref_stats(const dpt_batchnorm_t *bn, size_t batch, const double *x, double *mean,
                      double *var)
{
    size_t C = bn->channels, S = bn->spatial;
    double n = (double)(batch * S);
    for (size_t c = 0; c < C; c++) {
        double s = 0.0, q = 0.0;
        for (size_t i = 0; i < batch; i++)
            for (size_t p = 0; p < S; p++)
                s += x[(i * C + c) * S + p];
        for (size_t i = 0; i < batch; i++)
            for (size_t p = 0; p < S; p++) {
                double d = x[(i * C + c) * S + p] - s / n;
                q += d * d;
            }
        mean[c] = s / n;
        var[c] = q / n;
    }
}

/* y = g * (x - mean) / sqrt(var + eps) + b, with the batch's statistics
 * (train) or rm, rv; mean and var receive the statistics used. g and b may
 * be NULL (1 and 0). */
static void ref_bn_forward(const dpt_batchnorm_t *bn, size_t batch, int train, const double *x,
                           const double *g, const double *b, const double *rm, const double *rv,
                           double *y, double *mean, double *var)
{
    size_t C = bn->channels, S = bn->spatial;
    if (train)
        ref_stats(bn, batch, x, mean, var);
    else
        for (size_t c = 0; c < C; c++)
            mean[c] = rm[c], var[c] = rv[c];
    for (size_t i = 0; i < batch; i++)
        for (size_t c = 0; c < C; c++)
            for (size_t p = 0; p < S; p++) {
                size_t e = (i * C + c) * S + p;
                double xhat = (x[e] - mean[c]) / sqrt(var[c] + (double)bn->eps);
                y[e] = (g ? g[c] : 1.0) * xhat + (b ? b[c] : 0.0);
            }
}

/* Accumulates dx, dg, db (each may be NULL) for dy, by the textbook
 * formulas: in training mode
 *   dx = g / sigma * (dy - mean(dy) - xhat * mean(dy * xhat)),
 * in evaluation mode dx = g / sigma * dy. */
static void ref_bn_backward(const dpt_batchnorm_t *bn, size_t batch, int train, const double *x,
                            const double *g, const double *rm, const double *rv, const double *dy,
                            double *dx, double *dg, double *db)
{
    size_t C = bn->channels, S = bn->spatial;
    double *mean = dalloc(C), *var = dalloc(C), n = (double)(batch * S);
    if (train)
        ref_stats(bn, batch, x, mean, var);
    for (size_t c = 0; c < C; c++) {
        double m = train ? mean[c] : rm[c],
               sigma = sqrt((train ? var[c] : rv[c]) + (double)bn->eps);
        double sdy = 0.0, sdyx = 0.0;
        for (size_t i = 0; i < batch; i++)
            for (size_t p = 0; p < S; p++) {
                size_t e = (i * C + c) * S + p;
                sdy += dy[e];
                sdyx += dy[e] * (x[e] - m) / sigma;
            }
        if (db)
            db[c] += sdy;
        if (dg)
            dg[c] += sdyx;
        if (!dx)
            continue;
        double gc = g ? g[c] : 1.0;
        for (size_t i = 0; i < batch; i++)
            for (size_t p = 0; p < S; p++) {
                size_t e = (i * C + c) * S + p;
                double xhat = (x[e] - m) / sigma;
                dx[e] +=
                    train ? gc / sigma * (dy[e] - sdy / n - xhat * sdyx / n) : gc / sigma * dy[e];
            }
    }
    free(mean), free(var);
}

/* The largest error of the reference checks, printed at the end. */
static double ref_worst;

/* ---- one batch normalization problem -------------------------------------- */

typedef struct bn_prob {
    dpt_batchnorm_t bn;
    size_t batch, n; /* N, N*C*S */
    int affine;      /* gamma and beta given (else NULL) */
    float *x, *y, *dy, *g, *b, *rm, *rv, *mean, *invstd, *var, *dx, *dg, *db;
    double *xd, *yd, *dyd, *gd, *bd, *rmd, *rvd, *meand, *vard;
} bn_prob_t;

static void bn_prob_init(bn_prob_t *q, size_t batch, size_t C, size_t S, float eps, int affine,
                         uint64_t seed)
{
    memset(q, 0, sizeof *q);
    q->bn = (dpt_batchnorm_t){C, S, eps};
    q->batch = batch;
    q->n = batch * C * S;
    q->affine = affine;
    q->x = falloc(q->n), q->y = falloc(q->n), q->dy = falloc(q->n), q->dx = falloc(q->n);
    q->g = falloc(C), q->b = falloc(C), q->rm = falloc(C), q->rv = falloc(C);
    q->mean = falloc(C), q->invstd = falloc(C), q->var = falloc(C);
    q->dg = falloc(C), q->db = falloc(C);
    q->xd = dalloc(q->n), q->yd = dalloc(q->n), q->dyd = dalloc(q->n);
    q->gd = dalloc(C), q->bd = dalloc(C), q->rmd = dalloc(C), q->rvd = dalloc(C);
    q->meand = dalloc(C), q->vard = dalloc(C);
    /* x with a per-channel offset and scale, so that the means are not 0. */
    fill(q->x, q->n, -1.0f, 1.0f, seed);
    for (size_t i = 0; i < q->n; i++)
        q->x[i] = q->x[i] * (float)(1 + (i / S) % C) + 0.5f * (float)((i / S) % C);
    fill(q->dy, q->n, -1.0f, 1.0f, seed + 1);
    fill(q->g, C, 0.5f, 1.5f, seed + 2);
    fill(q->b, C, -0.5f, 0.5f, seed + 3);
    fill(q->rm, C, -0.5f, 0.5f, seed + 4);
    fill(q->rv, C, 0.2f, 2.0f, seed + 5);
    to_double(q->xd, q->x, q->n);
    to_double(q->dyd, q->dy, q->n);
    to_double(q->gd, q->g, C);
    to_double(q->bd, q->b, C);
    to_double(q->rmd, q->rm, C);
    to_double(q->rvd, q->rv, C);
}

static void bn_prob_free(bn_prob_t *q)
{
    float *f[] = {q->x,  q->y,    q->dy,     q->dx,  q->g,  q->b, q->rm,
                  q->rv, q->mean, q->invstd, q->var, q->dg, q->db};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        dpt_free_aligned(f[i]);
    double *d[] = {q->xd, q->yd, q->dyd, q->gd, q->bd, q->rmd, q->rvd, q->meand, q->vard};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        free(d[i]);
}

static const float *gam(const bn_prob_t *q)
{
    return q->affine ? q->g : NULL;
}
static const float *bet(const bn_prob_t *q)
{
    return q->affine ? q->b : NULL;
}
static const double *gamd(const bn_prob_t *q)
{
    return q->affine ? q->gd : NULL;
}
static const double *betd(const bn_prob_t *q)
{
    return q->affine ? q->bd : NULL;
}

/* dpt's forward of one mode. */
static int bn_forward(bn_prob_t *q, int train)
{
    if (train)
        return dpt_batchnorm_forward_train(&q->bn, q->y, q->mean, q->invstd, q->var, q->x, gam(q),
                                           bet(q), q->batch);
    return dpt_batchnorm_forward_eval(&q->bn, q->y, q->x, q->rm, q->rv, gam(q), bet(q), q->batch);
}

/* dpt's backward of one mode (after bn_forward in training mode). */
static int bn_backward(bn_prob_t *q, int train, float *dx, float *dg, float *db)
{
    if (train)
        return dpt_batchnorm_backward_train(&q->bn, dx, dg, db, q->dy, q->x, q->mean, q->invstd,
                                            gam(q), q->batch);
    return dpt_batchnorm_backward_eval(&q->bn, dx, dg, db, q->dy, q->x, q->rm, q->rv, gam(q),
                                       q->batch);
}

/* Forward, statistics and gradients (onto values in [-1, 1]) against the
 * reference. */
static void check_bn_ref(size_t batch, size_t C, size_t S, int train, int affine, uint64_t seed)
{
    bn_prob_t q;
    bn_prob_init(&q, batch, C, S, 1e-5f, affine, seed);
    double worst = 0.0, e;
    REQUIRE_OK(bn_forward(&q, train));
    ref_bn_forward(&q.bn, batch, train, q.xd, gamd(&q), betd(&q), q.rmd, q.rvd, q.yd, q.meand,
                   q.vard);
    e = max_err(q.y, q.yd, q.n);
    worst = fmax(worst, e);
    if (train) {
        double *inv = dalloc(C);
        for (size_t c = 0; c < C; c++)
            inv[c] = 1.0 / sqrt(q.vard[c] + (double)q.bn.eps);
        /* invstd relative to itself: it reaches 1/sqrt(eps) for N*S = 1. */
        for (size_t c = 0; c < C; c++)
            worst = fmax(worst, fabs((double)q.invstd[c] - inv[c]) / inv[c]);
        worst = fmax(worst, max_err(q.mean, q.meand, C));
        worst = fmax(worst, max_err(q.var, q.vard, C));
        free(inv);
    }
    fill(q.dx, q.n, -1.0f, 1.0f, seed + 10);
    fill(q.dg, C, -1.0f, 1.0f, seed + 11);
    fill(q.db, C, -1.0f, 1.0f, seed + 12);
    double *dxr = dalloc(q.n), *dgr = dalloc(C), *dbr = dalloc(C);
    to_double(dxr, q.dx, q.n);
    to_double(dgr, q.dg, C);
    to_double(dbr, q.db, C);
    REQUIRE_OK(bn_backward(&q, train, q.dx, q.dg, q.db));
    ref_bn_backward(&q.bn, batch, train, q.xd, gamd(&q), q.rmd, q.rvd, q.dyd, dxr, dgr, dbr);
    worst = fmax(worst, max_err(q.dx, dxr, q.n));
    worst = fmax(worst, max_err(q.dg, dgr, C));
    worst = fmax(worst, max_err(q.db, dbr, C));
    if (worst > FWD_TOL)
        fprintf(stderr, "  %s N=%zu C=%zu S=%zu affine %d: error %.3g\n", train ? "train" : "eval",
                batch, C, S, affine, worst);
    CHECK(worst <= FWD_TOL);
    ref_worst = fmax(ref_worst, worst);
    free(dxr), free(dgr), free(dbr);
    bn_prob_free(&q);
}

/* ---- batch normalization tests -------------------------------------------- */

static void test_bn_reference(void)
{
    static const size_t spatial[] = {1, 9, 25};
    uint64_t seed = 100;
    ref_worst = 0.0;
    for (size_t batch = 1; batch <= 7; batch++)
        for (size_t c = 1; c <= 5; c++)
            for (size_t si = 0; si < 3; si++)
                for (int train = 0; train < 2; train++)
                    check_bn_ref(batch, c, spatial[si], train, (batch + c) % 3 != 0, seed++);
    printf("  largest error against the reference: %.3g (tolerance %.3g)\n", ref_worst, FWD_TOL);
}

/* J = sum(r * y) of the reference forward in double. */
static double bn_j(bn_prob_t *q, int train)
{
    ref_bn_forward(&q->bn, q->batch, train, q->xd, q->gd, q->bd, q->rmd, q->rvd, q->yd, q->meand,
                   q->vard);
    double j = 0.0;
    for (size_t i = 0; i < q->n; i++)
        j += q->dyd[i] * q->yd[i];
    return j;
}

static void numeric(bn_prob_t *q, int train, double *v, size_t n, double *out)
{
    for (size_t i = 0; i < n; i++) {
        double save = v[i];
        v[i] = save + FD_EPS;
        double jp = bn_j(q, train);
        v[i] = save - FD_EPS;
        double jm = bn_j(q, train);
        v[i] = save;
        out[i] = (jp - jm) / (2.0 * FD_EPS);
    }
}

/* The largest gradient error, printed at the end. */
static double grad_worst;

/* dpt's gradients of J against central differences of the reference. */
static void check_bn_fd(size_t batch, size_t C, size_t S, int train, uint64_t seed)
{
    bn_prob_t q;
    bn_prob_init(&q, batch, C, S, 1e-3f, 1, seed);
    REQUIRE_OK(bn_forward(&q, train));
    dpt_vec_zero(q.dx, q.n), dpt_vec_zero(q.dg, C), dpt_vec_zero(q.db, C);
    REQUIRE_OK(bn_backward(&q, train, q.dx, q.dg, q.db));
    double *num = dalloc(q.n);
    numeric(&q, train, q.xd, q.n, num);
    double ex = grad_err(q.dx, num, q.n);
    numeric(&q, train, q.gd, C, num);
    double eg = grad_err(q.dg, num, C);
    numeric(&q, train, q.bd, C, num);
    double eb = grad_err(q.db, num, C);
    if (ex > GRAD_TOL || eg > GRAD_TOL || eb > GRAD_TOL)
        fprintf(stderr, "  %s N=%zu C=%zu S=%zu: gradient errors dx %.3g dgamma %.3g dbeta %.3g\n",
                train ? "train" : "eval", batch, C, S, ex, eg, eb);
    CHECK(ex <= GRAD_TOL);
    CHECK(eg <= GRAD_TOL);
    CHECK(eb <= GRAD_TOL);
    grad_worst = fmax(grad_worst, fmax(ex, fmax(eg, eb)));
    free(num);
    bn_prob_free(&q);
}

static void test_bn_gradcheck(void)
{
    static const size_t shapes[][3] = {{3, 2, 9}, {5, 3, 1},  {2, 4, 25}, {1, 2, 9},
                                       {7, 5, 1}, {4, 1, 25}, {2, 1, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int train = 0; train < 2; train++)
            check_bn_fd(shapes[i][0], shapes[i][1], shapes[i][2], train,
                        300 + 2 * i + (size_t)train);
    printf("  largest gradient error: %.3g (tolerance %.3g)\n", grad_worst, GRAD_TOL);
}

/* A gradient alone (the others NULL, the arrays it does not need NULL too)
 * gives the bits of the call that computes all three; all NULL is a no-op. */
static void test_bn_partial(void)
{
    for (int train = 0; train < 2; train++) {
        bn_prob_t q;
        size_t C = 3;
        bn_prob_init(&q, 4, C, 9, 1e-5f, 1, 400 + (uint64_t)train);
        REQUIRE_OK(bn_forward(&q, train));
        float *dx = falloc(q.n), *dg = falloc(C), *db = falloc(C);
        fill(q.dx, q.n, -1.0f, 1.0f, 410), fill(q.dg, C, -1.0f, 1.0f, 411);
        fill(q.db, C, -1.0f, 1.0f, 412);
        memcpy(dx, q.dx, q.n * sizeof(float)), memcpy(dg, q.dg, C * sizeof(float));
        memcpy(db, q.db, C * sizeof(float));
        REQUIRE_OK(bn_backward(&q, train, q.dx, q.dg, q.db));
        if (train) {
            REQUIRE_OK(dpt_batchnorm_backward_train(&q.bn, dx, NULL, NULL, q.dy, q.x, q.mean,
                                                    q.invstd, q.g, 4));
            REQUIRE_OK(dpt_batchnorm_backward_train(&q.bn, NULL, dg, NULL, q.dy, q.x, q.mean,
                                                    q.invstd, NULL, 4));
            REQUIRE_OK(dpt_batchnorm_backward_train(&q.bn, NULL, NULL, db, q.dy, NULL, NULL, NULL,
                                                    NULL, 4));
            CHECK_OK(dpt_batchnorm_backward_train(&q.bn, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                                  NULL, 4));
        } else {
            REQUIRE_OK(
                dpt_batchnorm_backward_eval(&q.bn, dx, NULL, NULL, q.dy, NULL, NULL, q.rv, q.g, 4));
            REQUIRE_OK(
                dpt_batchnorm_backward_eval(&q.bn, NULL, dg, NULL, q.dy, q.x, q.rm, q.rv, NULL, 4));
            REQUIRE_OK(dpt_batchnorm_backward_eval(&q.bn, NULL, NULL, db, q.dy, NULL, NULL, NULL,
                                                   NULL, 4));
            CHECK_OK(dpt_batchnorm_backward_eval(&q.bn, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                                 NULL, 4));
        }
        CHECK(memcmp(dx, q.dx, q.n * sizeof(float)) == 0);
        CHECK(memcmp(dg, q.dg, C * sizeof(float)) == 0);
        CHECK(memcmp(db, q.db, C * sizeof(float)) == 0);
        /* An empty batch computes nothing and needs no arrays. */
        CHECK_OK(dpt_batchnorm_backward_train(&q.bn, dx, dg, db, NULL, NULL, NULL, NULL, NULL, 0));
        CHECK_OK(dpt_batchnorm_forward_eval(&q.bn, NULL, NULL, NULL, NULL, NULL, NULL, 0));
        CHECK(memcmp(dx, q.dx, q.n * sizeof(float)) == 0);

        /* In place (y = x) gives the bits of a separate output. */
        float *xy = falloc(q.n), *mean = falloc(C), *invstd = falloc(C);
        memcpy(xy, q.x, q.n * sizeof(float));
        if (train)
            REQUIRE_OK(dpt_batchnorm_forward_train(&q.bn, xy, mean, invstd, NULL, xy, q.g, q.b, 4));
        else
            REQUIRE_OK(dpt_batchnorm_forward_eval(&q.bn, xy, xy, q.rm, q.rv, q.g, q.b, 4));
        CHECK(memcmp(xy, q.y, q.n * sizeof(float)) == 0);
        if (train) {
            CHECK(memcmp(mean, q.mean, C * sizeof(float)) == 0);
            CHECK(memcmp(invstd, q.invstd, C * sizeof(float)) == 0);
        }
        dpt_free_aligned(dx), dpt_free_aligned(dg), dpt_free_aligned(db);
        dpt_free_aligned(xy), dpt_free_aligned(mean), dpt_free_aligned(invstd);
        bn_prob_free(&q);
    }
}

/* One batch normalization of x with a large mean: the two-pass variance
 * keeps its digits where E[x^2] - mean^2 in float would lose them all. */
static void test_bn_large_mean(void)
{
    dpt_batchnorm_t bn = {1, 8, 1e-5f};
    float x[16], y[16], mean, invstd, var;
    for (size_t i = 0; i < 16; i++)
        x[i] = 1000.0f + (i % 2 ? 0.25f : -0.25f);
    REQUIRE_OK(dpt_batchnorm_forward_train(&bn, y, &mean, &invstd, &var, x, NULL, NULL, 2));
    CHECK(mean == 1000.0f);
    CHECK(var == 0.0625f);
    CHECK_CLOSE(y[0], -0.25 / sqrt(0.0625 + 1e-5), 1e-6);
    CHECK_CLOSE(y[1], 0.25 / sqrt(0.0625 + 1e-5), 1e-6);
    /* N*S == 1: var 0, y = beta, dx = 0. */
    bn = (dpt_batchnorm_t){2, 1, 1e-5f};
    float x1[2] = {3.0f, -7.0f}, y1[2], m1[2], k1[2], v1[2], g[2] = {2.0f, 3.0f};
    float b[2] = {0.5f, -0.5f}, dy[2] = {1.0f, -2.0f}, dx[2] = {0.0f, 0.0f};
    REQUIRE_OK(dpt_batchnorm_forward_train(&bn, y1, m1, k1, v1, x1, g, b, 1));
    CHECK(y1[0] == 0.5f && y1[1] == -0.5f && v1[0] == 0.0f && v1[1] == 0.0f);
    CHECK(m1[0] == 3.0f && m1[1] == -7.0f);
    REQUIRE_OK(dpt_batchnorm_backward_train(&bn, dx, NULL, NULL, dy, x1, m1, k1, g, 1));
    CHECK(dx[0] == 0.0f && dx[1] == 0.0f);
}

static void test_bn_running(void)
{
    dpt_batchnorm_t bn = {3, 4, 1e-5f};
    float rm[3] = {0.0f, 1.0f, -2.0f}, rv[3] = {1.0f, 0.5f, 2.0f};
    const float mean[3] = {1.0f, -1.0f, 0.5f}, var[3] = {0.25f, 4.0f, 1.0f};
    REQUIRE_OK(dpt_batchnorm_update_running(&bn, rm, rv, mean, var, 10, 0.1f));
    double m = (double)0.1f;
    CHECK_CLOSE(rm[0], 0.9 * 0.0 + m * 1.0, 1e-6);
    CHECK_CLOSE(rm[1], (1.0 - m) * 1.0 + m * -1.0, 1e-6);
    CHECK_CLOSE(rm[2], (1.0 - m) * -2.0 + m * 0.5, 1e-6);
    CHECK_CLOSE(rv[0], (1.0 - m) * 1.0 + m * 0.25 * 10.0 / 9.0, 1e-6);
    CHECK_CLOSE(rv[1], (1.0 - m) * 0.5 + m * 4.0 * 10.0 / 9.0, 1e-6);
    CHECK_CLOSE(rv[2], (1.0 - m) * 2.0 + m * 1.0 * 10.0 / 9.0, 1e-6);
    /* count 1: var as it is; momentum 1: the batch's statistics only. */
    REQUIRE_OK(dpt_batchnorm_update_running(&bn, rm, rv, mean, var, 1, 1.0f));
    for (size_t c = 0; c < 3; c++)
        CHECK(rm[c] == mean[c] && rv[c] == var[c]);

    /* From a training forward: the running variance after momentum 1 is the
     * unbiased variance of the batch (sum of squares over n - 1). */
    bn_prob_t q;
    bn_prob_init(&q, 5, 3, 9, 1e-5f, 1, 500);
    REQUIRE_OK(bn_forward(&q, 1));
    REQUIRE_OK(dpt_batchnorm_update_running(&q.bn, q.rm, q.rv, q.mean, q.var, 5 * 9, 1.0f));
    ref_stats(&q.bn, 5, q.xd, q.meand, q.vard);
    for (size_t c = 0; c < 3; c++) {
        CHECK_CLOSE(q.rm[c], q.meand[c], 1e-6);
        CHECK_CLOSE(q.rv[c], q.vard[c] * 45.0 / 44.0, 1e-6);
    }
    bn_prob_free(&q);
}

/* Parts of a batch (one of them empty) pooled by combine_stats against the
 * statistics of the whole batch. */
static void test_bn_combine(void)
{
    static const size_t rows[] = {3, 0, 5, 1, 2}; /* 11 samples */
    enum { K = 5, N = 11, C = 3, S = 9 };
    bn_prob_t q;
    bn_prob_init(&q, N, C, S, 1e-5f, 0, 600);
    float means[K * C], vars[K * C], mean[C], var[C], *scratch = falloc(q.n);
    float invstd[C];
    size_t counts[K], total = 0, n0 = 0;
    for (size_t k = 0; k < K; k++) {
        counts[k] = rows[k] * S;
        for (size_t c = 0; c < C; c++)
            means[k * C + c] = vars[k * C + c] = NAN; /* read only when count > 0 */
        if (rows[k])
            REQUIRE_OK(dpt_batchnorm_forward_train(&q.bn, scratch, means + k * C, invstd,
                                                   vars + k * C, q.x + n0 * C * S, NULL, NULL,
                                                   rows[k]));
        n0 += rows[k];
    }
    REQUIRE_OK(dpt_batchnorm_combine_stats(&q.bn, mean, var, &total, means, vars, counts, K));
    CHECK(total == (size_t)N * S);
    ref_stats(&q.bn, N, q.xd, q.meand, q.vard);
    double em = max_err(mean, q.meand, C), ev = max_err(var, q.vard, C);
    printf("  pooled against whole-batch statistics: mean %.3g, variance %.3g\n", em, ev);
    CHECK(em <= 1e-6);
    CHECK(ev <= 1e-6);
    /* In place into the first part's rows: the same bits. */
    REQUIRE_OK(dpt_batchnorm_combine_stats(&q.bn, means, vars, NULL, means, vars, counts, K));
    CHECK(memcmp(means, mean, sizeof mean) == 0);
    CHECK(memcmp(vars, var, sizeof var) == 0);
    /* One part is returned as it is. */
    size_t one = 7;
    REQUIRE_OK(dpt_batchnorm_combine_stats(&q.bn, mean, var, &total, means, vars, &one, 1));
    CHECK(memcmp(means, mean, sizeof mean) == 0);
    CHECK(memcmp(vars, var, sizeof var) == 0);
    CHECK(total == 7);
    dpt_free_aligned(scratch);
    bn_prob_free(&q);
}

/* ---- dropout tests -------------------------------------------------------- */

/* The factor of element (R, j) by the mapping documented in dpt/norm.h,
 * written out from the generator's primitives. */
static float doc_factor(float p, uint64_t seed, uint64_t step, uint64_t grow, size_t j)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_DROPOUT);
    uint32_t ctr[4] = {(uint32_t)(j / 4), (uint32_t)grow, (uint32_t)step, (uint32_t)(step >> 32)};
    uint32_t w[4];
    dpt_philox4x32_10(ctr, rng.key, w);
    double t = floor((double)p * 4294967296.0);
    return (double)w[j % 4] < t ? 0.0f : (float)(1.0 / (1.0 - (double)p));
}

static void test_dropout_fraction(void)
{
    static const float ps[] = {0.1f, 0.5f, 0.9f};
    size_t rows = 1000, cols = 1000, n = rows * cols;
    float *x = falloc(n), *y = falloc(n);
    uint8_t *mask = malloc(n);
    REQUIRE(mask != NULL);
    fill(x, n, 0.5f, 1.5f, 700); /* never 0: a zero output means dropped */
    for (size_t k = 0; k < 3; k++) {
        float p = ps[k], s = (float)(1.0 / (1.0 - (double)p));
        REQUIRE_OK(dpt_dropout_forward(y, mask, x, rows, cols, p, 42, 7 + k, 0));
        size_t dropped = 0, bad = 0;
        for (size_t i = 0; i < n; i++) {
            dropped += mask[i] == 0;
            bad += mask[i] ? y[i] != x[i] * s : y[i] != 0.0f;
            bad += mask[i] > 1;
        }
        double frac = (double)dropped / (double)n;
        printf("  p = %.1f: dropped %.5f\n", (double)p, frac);
        CHECK(fabs(frac - (double)p) < 0.01);
        CHECK(bad == 0);
    }
    dpt_free_aligned(x), dpt_free_aligned(y), free(mask);
}

/* Every element against the documented mapping, with a row index above 2^31
 * and a step above 2^32 (so that every word of the counter matters). */
static void test_dropout_mapping(void)
{
    size_t rows = 5, cols = 11;
    float x[55], y[55];
    uint8_t mask[55];
    for (size_t i = 0; i < 55; i++)
        x[i] = 1.0f + (float)i;
    uint64_t seed = 0x123456789abcdefull, step = ((uint64_t)3 << 32) + 17;
    uint64_t off = ((uint64_t)1 << 31) + 5;
    REQUIRE_OK(dpt_dropout_forward(y, mask, x, rows, cols, 0.375f, seed, step, off));
    size_t bad = 0, dropped = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++) {
            float f = doc_factor(0.375f, seed, step, off + r, j);
            bad += y[r * cols + j] != x[r * cols + j] * f || mask[r * cols + j] != (f != 0.0f);
            dropped += f == 0.0f;
        }
    CHECK(bad == 0);
    CHECK(dropped > 0 && dropped < 55);
    /* The last row allowed: row_offset + rows == 2^32. */
    REQUIRE_OK(
        dpt_dropout_forward(y, mask, x, 1, cols, 0.375f, seed, step, ((uint64_t)1 << 32) - 1));
    bad = 0;
    for (size_t j = 0; j < cols; j++)
        bad += y[j] != x[j] * doc_factor(0.375f, seed, step, ((uint64_t)1 << 32) - 1, j);
    CHECK(bad == 0);
}

/* A batch computed as one call and as two calls on its halves (the second
 * with its row offset) gives the same bits; a row's mask does not depend on
 * the number of columns after it; a new step or seed gives a new mask. */
static void test_dropout_split(void)
{
    size_t rows = 37, cols = 13, n = rows * cols, half = 17;
    float *x = falloc(n), *y1 = falloc(n), *y2 = falloc(n), *wide = falloc(rows * 20);
    uint8_t m1[37 * 13], m2[37 * 13];
    fill(x, n, -1.0f, 1.0f, 800);
    uint64_t base = 1000;
    REQUIRE_OK(dpt_dropout_forward(y1, m1, x, rows, cols, 0.3f, 9, 4, base));
    REQUIRE_OK(dpt_dropout_forward(y2, m2, x, half, cols, 0.3f, 9, 4, base));
    REQUIRE_OK(dpt_dropout_forward(y2 + half * cols, m2 + half * cols, x + half * cols, rows - half,
                                   cols, 0.3f, 9, 4, base + half));
    CHECK(memcmp(y1, y2, n * sizeof(float)) == 0);
    CHECK(memcmp(m1, m2, n) == 0);
    /* Row by row, in reverse order. */
    for (size_t r = rows; r-- > 0;)
        REQUIRE_OK(
            dpt_dropout_forward(y2 + r * cols, NULL, x + r * cols, 1, cols, 0.3f, 9, 4, base + r));
    CHECK(memcmp(y1, y2, n * sizeof(float)) == 0);
    /* The backward pass split the same way. */
    float *d1 = falloc(n), *d2 = falloc(n);
    fill(d1, n, -1.0f, 1.0f, 801);
    memcpy(d2, d1, n * sizeof(float));
    REQUIRE_OK(dpt_dropout_backward(d1, x, rows, cols, 0.3f, 9, 4, base));
    REQUIRE_OK(dpt_dropout_backward(d2 + half * cols, x + half * cols, rows - half, cols, 0.3f, 9,
                                    4, base + half));
    REQUIRE_OK(dpt_dropout_backward(d2, x, half, cols, 0.3f, 9, 4, base));
    CHECK(memcmp(d1, d2, n * sizeof(float)) == 0);
    /* Wider rows: the first 13 columns keep their mask. */
    uint8_t *mw = malloc(rows * 20);
    REQUIRE(mw != NULL);
    for (size_t i = 0; i < rows * 20; i++)
        wide[i] = 1.0f;
    REQUIRE_OK(dpt_dropout_forward(wide, mw, wide, rows, 20, 0.3f, 9, 4, base));
    size_t bad = 0;
    for (size_t r = 0; r < rows; r++)
        bad += memcmp(mw + r * 20, m1 + r * cols, cols) != 0;
    CHECK(bad == 0);
    /* Another step, another seed, another offset: other masks. */
    REQUIRE_OK(dpt_dropout_forward(y2, m2, x, rows, cols, 0.3f, 9, 5, base));
    CHECK(memcmp(m1, m2, n) != 0);
    REQUIRE_OK(dpt_dropout_forward(y2, m2, x, rows, cols, 0.3f, 10, 4, base));
    CHECK(memcmp(m1, m2, n) != 0);
    REQUIRE_OK(dpt_dropout_forward(y2, m2, x, rows, cols, 0.3f, 9, 4, base + 1));
    CHECK(memcmp(m1, m2, n) != 0);
    CHECK(memcmp(m1 + cols, m2, (rows - 1) * cols) == 0); /* shifted by one row */
    dpt_free_aligned(x), dpt_free_aligned(y1), dpt_free_aligned(y2), dpt_free_aligned(wide);
    dpt_free_aligned(d1), dpt_free_aligned(d2), free(mw);
}

static void test_dropout_identity(void)
{
    float x[7] = {1.5f, -0.0f, NAN, INFINITY, -3.25f, 1e-40f, 7.0f}, y[7], dx[7], dy[7];
    uint8_t mask[7];
    memset(mask, 7, sizeof mask);
    REQUIRE_OK(dpt_dropout_forward(y, mask, x, 1, 7, 0.0f, 1, 2, 3));
    CHECK(memcmp(y, x, sizeof x) == 0);
    size_t bad = 0;
    for (size_t i = 0; i < 7; i++)
        bad += mask[i] != 1;
    CHECK(bad == 0);
    REQUIRE_OK(dpt_dropout_forward(x, NULL, x, 7, 1, 0.0f, 1, 2, 3)); /* in place */
    CHECK(memcmp(y, x, sizeof x) == 0);
    for (size_t i = 0; i < 7; i++)
        dx[i] = (float)i, dy[i] = 0.5f * (float)i - 1.0f;
    REQUIRE_OK(dpt_dropout_backward(dx, dy, 7, 1, 0.0f, 1, 2, 3));
    bad = 0;
    for (size_t i = 0; i < 7; i++)
        bad += dx[i] != (float)i + (0.5f * (float)i - 1.0f);
    CHECK(bad == 0);
}

/* The backward pass uses the forward's mask: dx += dy * f, f = s where the
 * mask kept the element; onto nonzero values; dx NULL is a no-op. In place
 * forward gives the bits of a separate output. */
static void test_dropout_backward(void)
{
    size_t rows = 9, cols = 21, n = rows * cols;
    float *x = falloc(n), *y = falloc(n), *dy = falloc(n), *dx = falloc(n), *dx0 = falloc(n);
    uint8_t *mask = malloc(n);
    REQUIRE(mask != NULL);
    fill(x, n, -1.0f, 1.0f, 900);
    fill(dy, n, -1.0f, 1.0f, 901);
    fill(dx0, n, -1.0f, 1.0f, 902);
    float p = 0.45f, s = (float)(1.0 / (1.0 - (double)p));
    REQUIRE_OK(dpt_dropout_forward(y, mask, x, rows, cols, p, 5, 6, 70));
    memcpy(dx, dx0, n * sizeof(float));
    REQUIRE_OK(dpt_dropout_backward(dx, dy, rows, cols, p, 5, 6, 70));
    size_t bad = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        bad += dx[i] != dx0[i] + dy[i] * (mask[i] ? s : 0.0f);
        kept += mask[i];
    }
    CHECK(bad == 0);
    CHECK(kept > 0 && kept < n);
    CHECK_OK(dpt_dropout_backward(NULL, dy, rows, cols, p, 5, 6, 70));
    memcpy(dx, x, n * sizeof(float));
    REQUIRE_OK(dpt_dropout_forward(dx, NULL, dx, rows, cols, p, 5, 6, 70));
    CHECK(memcmp(dx, y, n * sizeof(float)) == 0);
    /* Empty calls do nothing and need no arrays. */
    CHECK_OK(dpt_dropout_forward(NULL, NULL, NULL, 0, cols, p, 5, 6, 70));
    CHECK_OK(dpt_dropout_forward(NULL, NULL, NULL, rows, 0, p, 5, 6, 70));
    CHECK_OK(dpt_dropout_backward(NULL, NULL, 0, 0, p, 5, 6, 70));
    dpt_free_aligned(x), dpt_free_aligned(y), dpt_free_aligned(dy), dpt_free_aligned(dx);
    dpt_free_aligned(dx0), free(mask);
}

/* ---- errors --------------------------------------------------------------- */

static void test_bn_errors(void)
{
    dpt_batchnorm_t bn = {2, 3, 1e-5f}, bad;
    float a[12] = {0}, c[2] = {1.0f, 1.0f}, keep[12];
    size_t counts[2] = {3, 3};
    CHECK_OK(dpt_batchnorm_check(&bn));
    CHECK_ERR(dpt_batchnorm_check(NULL), DPT_EINVAL, "descriptor");
    bad = (dpt_batchnorm_t){0, 3, 1e-5f};
    CHECK_ERR(dpt_batchnorm_check(&bad), DPT_EINVAL, "channels");
    bad = (dpt_batchnorm_t){2, 0, 1e-5f};
    CHECK_ERR(dpt_batchnorm_check(&bad), DPT_EINVAL, "spatial");
    static const float eps[] = {0.0f, -1e-5f, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++) {
        bad = (dpt_batchnorm_t){2, 3, eps[i]};
        CHECK_ERR(dpt_batchnorm_check(&bad), DPT_EINVAL, "eps");
        /* Every function checks its descriptor. */
        CHECK_ERR(dpt_batchnorm_forward_train(&bad, a, c, c, c, a, NULL, NULL, 2), DPT_EINVAL,
                  "eps");
        CHECK_ERR(dpt_batchnorm_forward_eval(&bad, a, a, c, c, NULL, NULL, 2), DPT_EINVAL, "eps");
        CHECK_ERR(dpt_batchnorm_backward_train(&bad, a, c, c, a, a, c, c, NULL, 2), DPT_EINVAL,
                  "eps");
        CHECK_ERR(dpt_batchnorm_backward_eval(&bad, a, c, c, a, a, c, c, NULL, 2), DPT_EINVAL,
                  "eps");
        CHECK_ERR(dpt_batchnorm_update_running(&bad, c, c, c, c, 6, 0.1f), DPT_EINVAL, "eps");
        CHECK_ERR(dpt_batchnorm_combine_stats(&bad, c, c, NULL, c, c, counts, 1), DPT_EINVAL,
                  "eps");
    }
    bad = (dpt_batchnorm_t){SIZE_MAX / 2, 3, 1e-5f};
    CHECK_ERR(dpt_batchnorm_check(&bad), DPT_EOVERFLOW, "overflow");
    bad = (dpt_batchnorm_t){SIZE_MAX / 8, 2, 1e-5f};
    CHECK_ERR(dpt_batchnorm_forward_eval(&bad, a, a, c, c, NULL, NULL, 8), DPT_EOVERFLOW,
              "overflow");

    /* Batch 0 has no statistics; NULL arrays, nothing written. */
    memcpy(keep, a, sizeof a);
    CHECK_ERR(dpt_batchnorm_forward_train(&bn, a, c, c, NULL, a, NULL, NULL, 0), DPT_EINVAL,
              "batch 0");
    CHECK_ERR(dpt_batchnorm_forward_train(&bn, NULL, c, c, NULL, a, NULL, NULL, 2), DPT_EINVAL,
              "required");
    CHECK_ERR(dpt_batchnorm_forward_train(&bn, a, NULL, c, NULL, a, NULL, NULL, 2), DPT_EINVAL,
              "mean");
    CHECK_ERR(dpt_batchnorm_forward_train(&bn, a, c, NULL, NULL, a, NULL, NULL, 2), DPT_EINVAL,
              "invstd");
    CHECK_ERR(dpt_batchnorm_forward_train(&bn, a, c, c, NULL, NULL, NULL, NULL, 2), DPT_EINVAL,
              "required");
    CHECK_ERR(dpt_batchnorm_forward_eval(&bn, a, a, NULL, c, NULL, NULL, 2), DPT_EINVAL,
              "running_mean");
    CHECK_ERR(dpt_batchnorm_forward_eval(&bn, a, a, c, NULL, NULL, NULL, 2), DPT_EINVAL,
              "running_var");
    CHECK_ERR(dpt_batchnorm_forward_eval(&bn, NULL, a, c, c, NULL, NULL, 2), DPT_EINVAL,
              "required");
    CHECK_ERR(dpt_batchnorm_backward_train(&bn, a, NULL, NULL, NULL, a, c, c, NULL, 2), DPT_EINVAL,
              "dy");
    CHECK_ERR(dpt_batchnorm_backward_train(&bn, a, NULL, NULL, a, NULL, c, c, NULL, 2), DPT_EINVAL,
              "required");
    CHECK_ERR(dpt_batchnorm_backward_train(&bn, NULL, c, NULL, a, a, NULL, c, NULL, 2), DPT_EINVAL,
              "mean");
    CHECK_ERR(dpt_batchnorm_backward_train(&bn, NULL, c, NULL, a, a, c, NULL, NULL, 2), DPT_EINVAL,
              "invstd");
    CHECK_ERR(dpt_batchnorm_backward_eval(&bn, NULL, NULL, c, NULL, NULL, NULL, NULL, NULL, 2),
              DPT_EINVAL, "dy");
    CHECK_ERR(dpt_batchnorm_backward_eval(&bn, a, NULL, NULL, a, NULL, NULL, NULL, NULL, 2),
              DPT_EINVAL, "running_var");
    CHECK_ERR(dpt_batchnorm_backward_eval(&bn, NULL, c, NULL, a, a, NULL, c, NULL, 2), DPT_EINVAL,
              "running_mean");
    CHECK_ERR(dpt_batchnorm_backward_eval(&bn, NULL, c, NULL, a, NULL, c, c, NULL, 2), DPT_EINVAL,
              "x");
    CHECK(memcmp(keep, a, sizeof a) == 0);

    /* Running statistics. */
    CHECK_ERR(dpt_batchnorm_update_running(&bn, NULL, c, c, c, 6, 0.1f), DPT_EINVAL, "required");
    CHECK_ERR(dpt_batchnorm_update_running(&bn, c, c, c, NULL, 6, 0.1f), DPT_EINVAL, "required");
    CHECK_ERR(dpt_batchnorm_update_running(&bn, c, c, c, c, 0, 0.1f), DPT_EINVAL, "count");
    static const float mom[] = {0.0f, -0.1f, 1.5f, NAN, INFINITY};
    for (size_t i = 0; i < 5; i++)
        CHECK_ERR(dpt_batchnorm_update_running(&bn, c, c, c, c, 6, mom[i]), DPT_EINVAL, "momentum");
    CHECK(c[0] == 1.0f && c[1] == 1.0f);

    /* Combining statistics. */
    float m[2], v[2], pm[4] = {0}, pv[4] = {1, 1, 1, 1};
    size_t zero[2] = {0, 0}, huge[2] = {SIZE_MAX, 2};
    CHECK_ERR(dpt_batchnorm_combine_stats(&bn, m, v, NULL, pm, pv, counts, 0), DPT_EINVAL, "parts");
    CHECK_ERR(dpt_batchnorm_combine_stats(&bn, NULL, v, NULL, pm, pv, counts, 2), DPT_EINVAL,
              "required");
    CHECK_ERR(dpt_batchnorm_combine_stats(&bn, m, v, NULL, pm, NULL, counts, 2), DPT_EINVAL,
              "required");
    CHECK_ERR(dpt_batchnorm_combine_stats(&bn, m, v, NULL, pm, pv, NULL, 2), DPT_EINVAL,
              "required");
    CHECK_ERR(dpt_batchnorm_combine_stats(&bn, m, v, NULL, pm, pv, zero, 2), DPT_EINVAL, "count 0");
    CHECK_ERR(dpt_batchnorm_combine_stats(&bn, m, v, NULL, pm, pv, huge, 2), DPT_EOVERFLOW,
              "overflow");
    CHECK_ERR(dpt_batchnorm_combine_stats(&bn, m, v, NULL, pm, pv, counts, SIZE_MAX), DPT_EOVERFLOW,
              "overflow");
}

static void test_dropout_errors(void)
{
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {0}, keep[8];
    memcpy(keep, y, sizeof y);
    static const float ps[] = {-0.1f, 1.0f, 1.5f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        CHECK_ERR(dpt_dropout_forward(y, NULL, x, 2, 4, ps[i], 1, 1, 0), DPT_EINVAL, "p =");
        CHECK_ERR(dpt_dropout_backward(y, x, 2, 4, ps[i], 1, 1, 0), DPT_EINVAL, "p =");
        /* Checked even when there is nothing to do. */
        CHECK_ERR(dpt_dropout_forward(NULL, NULL, NULL, 0, 0, ps[i], 1, 1, 0), DPT_EINVAL, "p =");
    }
    CHECK_ERR(dpt_dropout_forward(NULL, NULL, x, 2, 4, 0.5f, 1, 1, 0), DPT_EINVAL, "required");
    CHECK_ERR(dpt_dropout_forward(y, NULL, NULL, 2, 4, 0.5f, 1, 1, 0), DPT_EINVAL, "required");
    CHECK_ERR(dpt_dropout_forward(y, NULL, NULL, 2, 4, 0.0f, 1, 1, 0), DPT_EINVAL, "required");
    CHECK_ERR(dpt_dropout_backward(y, NULL, 2, 4, 0.5f, 1, 1, 0), DPT_EINVAL, "dy");
    CHECK_ERR(dpt_dropout_forward(y, NULL, x, 2, 4, 0.5f, 1, 1, ((uint64_t)1 << 32) - 1),
              DPT_EINVAL, "row_offset");
    CHECK_ERR(dpt_dropout_backward(y, x, 1, 4, 0.5f, 1, 1, (uint64_t)1 << 32), DPT_EINVAL,
              "row_offset");
    CHECK_ERR(dpt_dropout_forward(y, NULL, x, 2, 4, 0.5f, 1, 1, UINT64_MAX), DPT_EINVAL,
              "row_offset");
    CHECK_ERR(dpt_dropout_forward(y, NULL, x, SIZE_MAX / 2, 4, 0.5f, 1, 1, 0), DPT_EOVERFLOW,
              "overflow");
    if (SIZE_MAX / 4 > ((size_t)1 << 32)) { /* 64-bit size_t: a row too wide */
        size_t wide = (size_t)((uint64_t)1 << 34) + 1;
        CHECK_ERR(dpt_dropout_forward(y, NULL, x, 1, wide, 0.5f, 1, 1, 0), DPT_EINVAL, "cols");
        CHECK_ERR(dpt_dropout_backward(y, x, 1, wide, 0.5f, 1, 1, 0), DPT_EINVAL, "cols");
    }
    CHECK(memcmp(keep, y, sizeof y) == 0);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_bn_reference),     DPT_TEST(test_bn_gradcheck),
        DPT_TEST(test_bn_partial),       DPT_TEST(test_bn_large_mean),
        DPT_TEST(test_bn_running),       DPT_TEST(test_bn_combine),
        DPT_TEST(test_dropout_fraction), DPT_TEST(test_dropout_mapping),
        DPT_TEST(test_dropout_split),    DPT_TEST(test_dropout_identity),
        DPT_TEST(test_dropout_backward), DPT_TEST(test_bn_errors),
        DPT_TEST(test_dropout_errors),
    };
    return DPT_TEST_RUN(cases);
}
