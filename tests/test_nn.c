/*
 * nn: finite-difference gradient checks for every layer, loss and
 * distribution; initialisations; the MLP trained end to end; bad input.
 *
 * Gradient checks use central differences (f(p+h) - f(p-h)) / 2h on float
 * parameters with h = 1e-2 (smooth functions) and sums of the objective in
 * double. Float rounding then contributes ~1e-5 relative error and the
 * O(h^2) truncation ~1e-4, so the stated tolerance is a relative error
 * ||analytic - numeric|| / max(||analytic||, ||numeric||) below 2e-3.
 */
#include "dpt_test.h"

#include <float.h>

#include "dpt/arena.h"
#include "dpt/nn.h"
#include "dpt/optim.h"
#include "dpt/rng.h"
#include "nn/nn_impl.h"

#define GRAD_TOL 2e-3
#define PI 3.14159265358979323846
#define FD_H 1e-2f

/* A classification batch over borrowed arrays: "x" [rows, xdim], "label". */
static dpt_batch_t xy_batch(size_t rows, const float *x, size_t xdim, const int32_t *labels)
{
    dpt_batch_t b;
    dpt_batch_init(&b, rows);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, xdim, 0, (void *)(uintptr_t)x);
    if (labels)
        dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, (void *)(uintptr_t)labels);
    return b;
}

static double rel_err(const float *a, const double *n, size_t count)
{
    double d = 0.0, na = 0.0, nn = 0.0;
    for (size_t i = 0; i < count; i++) {
        d += ((double)a[i] - n[i]) * ((double)a[i] - n[i]);
        na += (double)a[i] * (double)a[i];
        nn += n[i] * n[i];
    }
    double s = sqrt(na > nn ? na : nn);
    return s > 0.0 ? sqrt(d) / s : sqrt(d);
}

/* Objective for layer checks: f = sum_i r_i * y_i over the stack's output. */
typedef struct {
    dpt_seq_t *seq;
    float *params;
    float *x;
    size_t batch;
    const float *r;
} seq_obj_t;

static double seq_f(seq_obj_t *o)
{
    const float *y;
    if (dpt_seq_forward(o->seq, o->params, o->x, o->batch, &y) != 0)
        return NAN;
    double f = 0.0;
    for (size_t i = 0; i < o->batch * dpt_seq_out_dim(o->seq); i++)
        f += (double)o->r[i] * (double)y[i];
    return f;
}

static double numeric_grad(seq_obj_t *o, float *v, size_t n, double *out, float h)
{
    for (size_t i = 0; i < n; i++) {
        float save = v[i];
        v[i] = save + h;
        double fp = seq_f(o);
        v[i] = save - h;
        double fm = seq_f(o);
        v[i] = save;
        out[i] = (fp - fm) / (2.0 * (double)h);
    }
    return 0.0;
}

static void check_stack(const dpt_layer_spec_t *layers, size_t nlayers, size_t in, size_t batch,
                        float h, double tol)
{
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    REQUIRE_OK(dpt_seq_create(&seq, in, layers, nlayers, batch, &t, "net."));
    size_t out = dpt_seq_out_dim(seq);
    dpt_arena_t p, g;
    REQUIRE_OK(dpt_arena_init(&p, t.total));
    REQUIRE_OK(dpt_arena_init(&g, t.total));
    dpt_rng_t rng;
    dpt_rng_init(&rng, 11, 0, (uint32_t)nlayers, DPT_RNG_TEST);
    dpt_seq_init_params(seq, p.data, &rng);
    float *x = malloc(batch * in * sizeof *x), *dx = calloc(batch * in, sizeof *dx);
    float *r = malloc(batch * out * sizeof *r);
    double *num = malloc((t.total > batch * in ? t.total : batch * in) * sizeof *num);
    REQUIRE(x && dx && r && num);
    dpt_rng_fill_uniform(&rng, x, batch * in, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, r, batch * out, -1.0f, 1.0f);
    seq_obj_t o = {seq, p.data, x, batch, r};
    const float *y;
    REQUIRE_OK(dpt_seq_forward(seq, p.data, x, batch, &y));
    REQUIRE_OK(dpt_seq_backward(seq, p.data, g.data, r, dx));
    /* Padding between variables must stay zero in the gradient arena. */
    for (size_t v = 0; v < t.nvars; v++) {
        numeric_grad(&o, p.data + t.vars[v].offset, t.vars[v].count, num, h);
        double e = rel_err(g.data + t.vars[v].offset, num, t.vars[v].count);
        if (e > tol)
            fprintf(stderr, "variable %s: relative error %.3g\n", t.vars[v].name, e);
        CHECK(e <= tol);
    }
    numeric_grad(&o, x, batch * in, num, h);
    double ex = rel_err(dx, num, batch * in);
    if (ex > tol)
        fprintf(stderr, "input gradient: relative error %.3g\n", ex);
    CHECK(ex <= tol);

    /* Backward accumulates: a second pass doubles the gradients. */
    float g0 = g.data[t.vars[0].offset];
    REQUIRE_OK(dpt_seq_forward(seq, p.data, x, batch, &y));
    REQUIRE_OK(dpt_seq_backward(seq, p.data, g.data, r, NULL));
    CHECK_CLOSE(g.data[t.vars[0].offset], 2.0f * g0, 1e-5);

    /* Stored gradients (dpt_seq_backward_ex with store_grads): the same bits
     * as accumulating into zeros, whatever the arena held before; padding
     * is not written; the input gradient still accumulates. */
    dpt_arena_t g2;
    REQUIRE_OK(dpt_arena_init(&g2, t.total));
    for (size_t i = 0; i < t.total; i++)
        g2.data[i] = 1e30f;
    float *dx2 = malloc(batch * in * sizeof *dx2);
    REQUIRE(dx2);
    for (size_t i = 0; i < batch * in; i++)
        dx2[i] = 0.5f;
    dpt_vec_zero(g.data, t.total);
    dpt_vec_zero(dx, batch * in);
    REQUIRE_OK(dpt_seq_forward(seq, p.data, x, batch, &y));
    REQUIRE_OK(dpt_seq_backward(seq, p.data, g.data, r, dx));
    REQUIRE_OK(dpt_seq_forward(seq, p.data, x, batch, &y));
    REQUIRE_OK(dpt_seq_backward_ex(seq, p.data, g2.data, r, dx2, 1));
    size_t same = 0, count = 0;
    for (size_t v = 0; v < t.nvars; v++)
        for (size_t i = 0; i < t.vars[v].count; i++, count++)
            same += g2.data[t.vars[v].offset + i] == g.data[t.vars[v].offset + i];
    CHECK(same == count);
    if (t.nvars > 0 && t.vars[0].offset + t.vars[0].count < t.vars[1 % t.nvars].offset)
        CHECK(g2.data[t.vars[0].offset + t.vars[0].count] == 1e30f); /* padding untouched */
    for (size_t i = 0; i < batch * in; i++)
        CHECK_CLOSE(dx2[i], dx[i] + 0.5f, 1e-6);
    free(dx2);
    dpt_arena_deinit(&g2);
    free(x), free(dx), free(r), free(num);
    dpt_arena_deinit(&p);
    dpt_arena_deinit(&g);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
}

static void test_gradcheck_linear(void)
{
    const dpt_layer_spec_t l[] = {
        {.kind = DPT_LAYER_LINEAR, .out = 5, .init = DPT_INIT_DEFAULT, .gain = 0}};
    check_stack(l, 1, 4, 3, FD_H, GRAD_TOL);
}

static void test_gradcheck_tanh(void)
{
    const dpt_layer_spec_t l[] = {
        {.kind = DPT_LAYER_LINEAR, .out = 6, .init = DPT_INIT_NORMAL, .gain = 0.7f},
        {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
        {.kind = DPT_LAYER_LINEAR, .out = 3, .init = DPT_INIT_ORTHOGONAL, .gain = 1.0f},
        {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0}};
    check_stack(l, 4, 5, 4, FD_H, GRAD_TOL);
}

/* The inline tanh against double tanh over floats in [-12, 12] (every
 * 61st bit pattern, both signs, the ends of the clamp), and the tanh layer
 * (vectorised clone of this machine) against the inline one compiled here
 * without clones: fmaf() is one rounding everywhere, so the bits agree. */
static void test_tanh_accuracy(void)
{
    double worst = 0.0;
    size_t above = 0;
    for (uint32_t bits = 0x0d000000u; bits <= 0x41400000u; bits += 61) { /* 4e-31 .. 12 */
        union {
            uint32_t u;
            float f;
        } v = {bits};
        for (int sign = 0; sign < 2; sign++) {
            float x = sign ? -v.f : v.f;
            double want = tanh((double)x), got = (double)dpt__tanhf(x);
            above += fabs(got) > 1.0;
            double e = fabs(got - want) / fabs(want);
            worst = e > worst ? e : worst;
        }
    }
    if (worst > 3e-7)
        fprintf(stderr, "tanh: worst relative error %.3g\n", worst);
    CHECK(worst <= 3e-7);
    CHECK(above == 0);
    CHECK(dpt__tanhf(0.0f) == 0.0f && !signbit(dpt__tanhf(0.0f)));
    CHECK(signbit(dpt__tanhf(-0.0f)));
    CHECK(dpt__tanhf(9.0f) == 1.0f && dpt__tanhf(1e30f) == 1.0f && dpt__tanhf(-INFINITY) == -1.0f);

    enum { ROWS = 7, COLS = 45 }; /* odd sizes: vector bodies and tails */
    const dpt_layer_spec_t l[] = {{.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0}};
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    REQUIRE_OK(dpt_seq_create(&seq, COLS, l, 1, ROWS, &t, "t."));
    float x[ROWS * COLS], dy[ROWS * COLS], dx[ROWS * COLS] = {0};
    dpt_rng_t rng;
    dpt_rng_init(&rng, 3, 0, 0, DPT_RNG_TEST);
    dpt_rng_fill_uniform(&rng, x, ROWS * COLS, -10.0f, 10.0f);
    dpt_rng_fill_uniform(&rng, dy, ROWS * COLS, -1.0f, 1.0f);
    const float *y;
    REQUIRE_OK(dpt_seq_forward(seq, NULL, x, ROWS, &y));
    REQUIRE_OK(dpt_seq_backward_ex(seq, NULL, NULL, dy, dx, 0));
    size_t same = 0;
    for (size_t i = 0; i < ROWS * COLS; i++) {
        float g = dy[i] * fmaf(-y[i], y[i], 1.0f);
        float want = dpt__tanhf(x[i]);
        same += memcmp(&y[i], &want, sizeof want) == 0 && dx[i] == g; /* dx: 0 + g */
    }
    CHECK(same == ROWS * COLS);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
}

/* Distance in units in the last place of `want`. */
static double ulps(double got, double want)
{
    if (got == want)
        return 0.0;
    return fabs(got - want) / (nextafter(fabs(want), INFINITY) - fabs(want));
}

/* The losses' inline exp (x <= 0) and log (x > 0) against libm's, on draws
 * over each range, and their edges. */
static void test_exp_log_accuracy(void)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, 9, 0, 0, DPT_RNG_TEST);
    double we = 0.0, wl = 0.0;
    const double spans[] = {1e-6, 1.0, 40.0, 708.0};
    for (int i = 0; i < 400000; i++) {
        double u = dpt_rng_uniform_double(&rng), v = dpt_rng_uniform_double(&rng);
        double x = -u * spans[i % 4];
        double e = ulps(dpt__exp_nonpos(x), exp(x));
        we = e > we ? e : we;
        double y =
            i % 2 ? 1.0 + v * (i % 4 == 1 ? 1e-6 : 100.0) : ldexp(0.5 + v, (i % 2000) - 1000);
        double l = ulps(dpt__log_pos(y), log(y));
        wl = l > wl ? l : wl;
    }
    if (we > 1.0 || wl > 2.0)
        fprintf(stderr, "exp: worst %.3g ulp, log: worst %.3g ulp\n", we, wl);
    CHECK(we <= 1.0);
    CHECK(wl <= 2.0);
    CHECK(dpt__exp_nonpos(0.0) == 1.0 && dpt__exp_nonpos(-0.0) == 1.0);
    CHECK(dpt__exp_nonpos(-708.0) > 0.0 && dpt__exp_nonpos(-708.5) == 0.0);
    CHECK(dpt__exp_nonpos(-1e300) == 0.0 && dpt__exp_nonpos(-INFINITY) == 0.0);
    CHECK(dpt__log_pos(1.0) == 0.0 && dpt__log_pos(2.0) == log(2.0));
    CHECK(ulps(dpt__log_pos(DBL_MAX), log(DBL_MAX)) <= 1.0);
    CHECK(ulps(dpt__log_pos(DBL_MIN), log(DBL_MIN)) <= 1.0);
}

static void test_gradcheck_relu(void)
{
    /* ReLU has kinks: a smaller step keeps differences off them (a kink
     * inside [p-h, p+h] would be the only way to fail) with a looser
     * tolerance for the larger float rounding of a small h. */
    const dpt_layer_spec_t l[] = {
        {.kind = DPT_LAYER_LINEAR, .out = 7, .init = DPT_INIT_DEFAULT, .gain = 0},
        {.kind = DPT_LAYER_RELU, .out = 0, .init = 0, .gain = 0},
        {.kind = DPT_LAYER_LINEAR, .out = 2, .init = DPT_INIT_DEFAULT, .gain = 0}};
    check_stack(l, 3, 3, 5, 1e-3f, 1e-2);
}

static void test_gradcheck_softmax_xent(void)
{
    enum { B = 4, C = 5 };
    dpt_rng_t rng;
    dpt_rng_init(&rng, 5, 0, 0, DPT_RNG_TEST);
    float z[B * C], dz[B * C] = {0};
    double num[B * C], loss;
    int32_t y[B] = {0, 4, 2, 2};
    dpt_rng_fill_uniform(&rng, z, B * C, -3.0f, 3.0f);
    size_t correct;
    REQUIRE_OK(dpt_loss_softmax_xent(z, y, B, C, dz, &loss, &correct));
    CHECK(correct <= B);
    for (size_t i = 0; i < B * C; i++) {
        float s = z[i];
        double lp, lm;
        z[i] = s + FD_H;
        dpt_loss_softmax_xent(z, y, B, C, NULL, &lp, NULL);
        z[i] = s - FD_H;
        dpt_loss_softmax_xent(z, y, B, C, NULL, &lm, NULL);
        z[i] = s;
        num[i] = (lp - lm) / (2.0 * (double)FD_H);
    }
    CHECK(rel_err(dz, num, B * C) <= GRAD_TOL);
    /* Value by hand: uniform logits over C classes give log C. */
    float zero[2 * C] = {0};
    int32_t y2[2] = {1, 3};
    REQUIRE_OK(dpt_loss_softmax_xent(zero, y2, 2, C, NULL, &loss, NULL));
    CHECK_CLOSE(loss, log((double)C), 1e-7);
    /* Huge logits stay finite (log-sum-exp around the maximum). */
    float big[2] = {1000.0f, -1000.0f};
    int32_t y1[1] = {1};
    REQUIRE_OK(dpt_loss_softmax_xent(big, y1, 1, 2, NULL, &loss, NULL));
    CHECK_CLOSE(loss, 2000.0, 1e-6);
}

static void test_gradcheck_mse(void)
{
    enum { B = 3, D = 2 };
    float y[B * D] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 3.0f};
    float t[B * D] = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f, 0.0f};
    float dy[B * D] = {0};
    double loss, num[B * D];
    REQUIRE_OK(dpt_loss_mse(y, t, B, D, dy, &loss));
    /* By hand: squared errors 0.25 + 4 + 0 + 1 + 0.25 + 9 = 14.5 over 6. */
    CHECK_CLOSE(loss, 14.5 / 6.0, 1e-12);
    CHECK_CLOSE(dy[1], 2.0 * -2.0 / 6.0, 1e-7);
    for (size_t i = 0; i < B * D; i++) {
        float s = y[i];
        double lp, lm;
        y[i] = s + FD_H;
        dpt_loss_mse(y, t, B, D, NULL, &lp);
        y[i] = s - FD_H;
        dpt_loss_mse(y, t, B, D, NULL, &lm);
        y[i] = s;
        num[i] = (lp - lm) / (2.0 * (double)FD_H);
    }
    CHECK(rel_err(dy, num, B * D) <= GRAD_TOL);
}

static void test_gradcheck_huber(void)
{
    enum { B = 3, D = 2 };
    /* Differences -0.5 (quadratic part), 2 and -3 (linear), 0.25, 0, 1. */
    float y[B * D] = {0.5f, 3.0f, -1.0f, 0.25f, 1.0f, 2.0f};
    float t[B * D] = {1.0f, 1.0f, 2.0f, 0.0f, 1.0f, 1.0f};
    float dy[B * D] = {0};
    double loss, num[B * D];
    REQUIRE_OK(dpt_loss_huber(y, t, B, D, 1.0, dy, &loss));
    /* By hand: 0.125 + 1.5 + 2.5 + 0.03125 + 0 + 0.5 over 6. */
    CHECK_CLOSE(loss, (0.125 + 1.5 + 2.5 + 0.03125 + 0.0 + 0.5) / 6.0, 1e-12);
    CHECK_CLOSE(dy[0], -0.5 / 6.0, 1e-7);
    CHECK_CLOSE(dy[1], 1.0 / 6.0, 1e-7);
    CHECK_CLOSE(dy[2], -1.0 / 6.0, 1e-7);
    for (size_t i = 0; i < B * D; i++) {
        float s = y[i];
        double lp, lm;
        y[i] = s + FD_H;
        dpt_loss_huber(y, t, B, D, 1.0, NULL, &lp);
        y[i] = s - FD_H;
        dpt_loss_huber(y, t, B, D, 1.0, NULL, &lm);
        y[i] = s;
        num[i] = (lp - lm) / (2.0 * (double)FD_H);
    }
    CHECK(rel_err(dy, num, B * D) <= GRAD_TOL);
    /* A larger delta keeps every difference quadratic: half the MSE. */
    double mse, big;
    REQUIRE_OK(dpt_loss_mse(y, t, B, D, NULL, &mse));
    REQUIRE_OK(dpt_loss_huber(y, t, B, D, 10.0, NULL, &big));
    CHECK_CLOSE(big, mse / 2.0, 1e-12);
    CHECK_ERR(dpt_loss_huber(y, t, B, D, 0.0, NULL, &big), DPT_EINVAL, "delta 0");
    CHECK_ERR(dpt_loss_huber(y, t, 0, D, 1.0, NULL, &big), DPT_EINVAL, "0 rows");
    y[3] = NAN;
    CHECK_ERR(dpt_loss_huber(y, t, B, D, 1.0, NULL, &big), DPT_ENUMERIC, "huber loss prediction");
}

/* f = sum_b c1_b logp_b + c2_b H_b for a categorical over logits. */
static double cat_f(const float *z, size_t b, size_t k, const int32_t *a, const float *c1,
                    const float *c2)
{
    float lp[8], h[8];
    dpt_categorical_logp(z, b, k, a, lp, h);
    double f = 0.0;
    for (size_t i = 0; i < b; i++)
        f += (double)c1[i] * (double)lp[i] + (double)c2[i] * (double)h[i];
    return f;
}

static void test_gradcheck_categorical(void)
{
    enum { B = 3, K = 4 };
    dpt_rng_t rng;
    dpt_rng_init(&rng, 6, 0, 0, DPT_RNG_TEST);
    float z[B * K], dz[B * K] = {0}, c1[B], c2[B];
    double num[B * K];
    int32_t a[B] = {3, 0, 1};
    dpt_rng_fill_uniform(&rng, z, B * K, -2.0f, 2.0f);
    dpt_rng_fill_uniform(&rng, c1, B, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, c2, B, -1.0f, 1.0f);
    dpt_categorical_backward(z, B, K, a, c1, c2, dz);
    for (size_t i = 0; i < B * K; i++) {
        float s = z[i];
        z[i] = s + FD_H;
        double fp = cat_f(z, B, K, a, c1, c2);
        z[i] = s - FD_H;
        double fm = cat_f(z, B, K, a, c1, c2);
        z[i] = s;
        num[i] = (fp - fm) / (2.0 * (double)FD_H);
    }
    CHECK(rel_err(dz, num, B * K) <= GRAD_TOL);
    /* By hand: uniform logits over 4 actions: logp = -log 4, H = log 4. */
    float u[K] = {0.5f, 0.5f, 0.5f, 0.5f}, lp, h;
    int32_t a0[1] = {2};
    REQUIRE_OK(dpt_categorical_logp(u, 1, K, a0, &lp, &h));
    CHECK_CLOSE(lp, -log(4.0), 1e-6);
    CHECK_CLOSE(h, log(4.0), 1e-6);
    /* Sampling follows the probabilities and reports the matching logp. */
    float zz[2] = {0.0f, (float)log(3.0)}; /* p = (0.25, 0.75) */
    int ones = 0;
    for (int i = 0; i < 4000; i++) {
        int32_t act;
        float l;
        REQUIRE_OK(dpt_categorical_sample(zz, 1, 2, &rng, &act, &l));
        ones += act;
        CHECK_CLOSE(l, act ? log(0.75) : log(0.25), 1e-6);
    }
    CHECK(abs(ones - 3000) < 150);
    int32_t am;
    dpt_categorical_argmax(zz, 1, 2, &am);
    CHECK(am == 1);
}

/* The PPO loss's cached form (passes over the whole batch, vectorised)
 * gives the bits of the public row-by-row functions: logp, entropy, the
 * backward, and the logp reported by sampling. Logits spread over +-800
 * put some probabilities below exp's normal range. */
static void test_categorical_cache_is_rowwise(void)
{
    enum { B = 13, KMAX = 5 };
    dpt_rng_t rng;
    dpt_rng_init(&rng, 8, 0, 0, DPT_RNG_TEST);
    for (size_t k = 1; k <= KMAX; k++) {
        float z[B * KMAX], c1[B], c2[B], lp0[B], h0[B], lp1[B], h1[B];
        float dz0[B * KMAX] = {0}, dz1[B * KMAX] = {0};
        double lse[B], hc[B], pc[B * KMAX];
        int32_t a[B];
        dpt_rng_fill_uniform(&rng, z, B * k, k == 3 ? -800.0f : -4.0f, k == 3 ? 800.0f : 4.0f);
        dpt_rng_fill_uniform(&rng, c1, B, -1.0f, 1.0f);
        dpt_rng_fill_uniform(&rng, c2, B, -1.0f, 1.0f);
        for (size_t b = 0; b < B; b++)
            a[b] = (int32_t)((b * 7) % k);
        dpt__categorical_cache_t cache = {lse, hc, pc};
        REQUIRE_OK(dpt_categorical_logp(z, B, k, a, lp0, h0));
        REQUIRE_OK(dpt__categorical_logp_ex(z, B, k, a, lp1, h1, &cache));
        CHECK(memcmp(lp0, lp1, sizeof lp0) == 0 && memcmp(h0, h1, sizeof h0) == 0);
        dpt_categorical_backward(z, B, k, a, c1, c2, dz0);
        dpt__categorical_backward_ex(z, B, k, a, c1, c2, dz1, &cache);
        CHECK(memcmp(dz0, dz1, B * k * sizeof(float)) == 0);
        int32_t act[B];
        float lps[B], lpa[B];
        REQUIRE_OK(dpt_categorical_sample(z, B, k, &rng, act, lps));
        REQUIRE_OK(dpt_categorical_logp(z, B, k, act, lpa, NULL));
        CHECK(memcmp(lps, lpa, sizeof lps) == 0);
        for (size_t b = 0; b < B; b++)
            CHECK(isfinite(h0[b]) && h0[b] >= -1e-6f && isfinite(lp0[b]) && lp0[b] <= 0.0f);
    }
}

static double gauss_f(const float *mu, const float *ls, size_t b, size_t d, const float *a,
                      const float *c1, const float *c2)
{
    float lp[8], h[8];
    dpt_gaussian_logp(mu, ls, b, d, a, lp, h);
    double f = 0.0;
    for (size_t i = 0; i < b; i++)
        f += (double)c1[i] * (double)lp[i] + (double)c2[i] * (double)h[i];
    return f;
}

static void test_gradcheck_gaussian(void)
{
    enum { B = 3, D = 2 };
    dpt_rng_t rng;
    dpt_rng_init(&rng, 8, 0, 0, DPT_RNG_TEST);
    float mu[B * D], ls[D] = {-0.3f, 0.4f}, a[B * D], c1[B], c2[B];
    float dmu[B * D] = {0}, dls[D] = {0};
    double num_mu[B * D], num_ls[D];
    dpt_rng_fill_uniform(&rng, mu, B * D, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, a, B * D, -1.5f, 1.5f);
    dpt_rng_fill_uniform(&rng, c1, B, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, c2, B, -1.0f, 1.0f);
    dpt_gaussian_backward(mu, ls, B, D, a, c1, c2, dmu, dls);
    for (size_t i = 0; i < B * D; i++) {
        float s = mu[i];
        mu[i] = s + FD_H;
        double fp = gauss_f(mu, ls, B, D, a, c1, c2);
        mu[i] = s - FD_H;
        double fm = gauss_f(mu, ls, B, D, a, c1, c2);
        mu[i] = s;
        num_mu[i] = (fp - fm) / (2.0 * (double)FD_H);
    }
    for (size_t i = 0; i < D; i++) {
        float s = ls[i];
        ls[i] = s + FD_H;
        double fp = gauss_f(mu, ls, B, D, a, c1, c2);
        ls[i] = s - FD_H;
        double fm = gauss_f(mu, ls, B, D, a, c1, c2);
        ls[i] = s;
        num_ls[i] = (fp - fm) / (2.0 * (double)FD_H);
    }
    CHECK(rel_err(dmu, num_mu, B * D) <= GRAD_TOL);
    CHECK(rel_err(dls, num_ls, D) <= GRAD_TOL);
    /* By hand: standard normal in 1-D at a = 1: logp = -1/2 - log(2 pi)/2,
     * H = (1 + log(2 pi))/2. */
    float m0 = 0.0f, s0 = 0.0f, a1 = 1.0f, lp, h;
    REQUIRE_OK(dpt_gaussian_logp(&m0, &s0, 1, 1, &a1, &lp, &h));
    CHECK_CLOSE(lp, -0.5 - 0.5 * log(2.0 * PI), 1e-6);
    CHECK_CLOSE(h, 0.5 * (1.0 + log(2.0 * PI)), 1e-6);
    /* Samples have the requested mean and spread, and consistent logp. */
    float m2 = 2.0f, s2 = (float)log(0.5), act, l;
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < 4000; i++) {
        dpt_gaussian_sample(&m2, &s2, 1, 1, &rng, &act, &l);
        sum += (double)act;
        sq += ((double)act - 2.0) * ((double)act - 2.0);
        float l2;
        dpt_gaussian_logp(&m2, &s2, 1, 1, &act, &l2, NULL);
        CHECK_CLOSE(l, l2, 1e-4);
    }
    CHECK(fabs(sum / 4000 - 2.0) < 0.05);
    CHECK(fabs(sqrt(sq / 4000) - 0.5) < 0.03);
}

static void test_orthogonal_init(void)
{
    /* Wide (O < I): rows orthonormal times gain. Tall (O > I): columns. */
    const size_t shapes[2][2] = {{4, 9}, {9, 4}};
    for (int s = 0; s < 2; s++) {
        size_t o = shapes[s][0], in = shapes[s][1];
        dpt_layer_spec_t l = {
            .kind = DPT_LAYER_LINEAR, .out = o, .init = DPT_INIT_ORTHOGONAL, .gain = 1.5f};
        dpt_vartable_t t;
        dpt_vartable_init(&t);
        dpt_seq_t *seq;
        REQUIRE_OK(dpt_seq_create(&seq, in, &l, 1, 1, &t, NULL));
        dpt_arena_t p;
        REQUIRE_OK(dpt_arena_init(&p, t.total));
        dpt_rng_t rng;
        dpt_rng_init(&rng, 1, 0, 0, DPT_RNG_INIT);
        dpt_seq_init_params(seq, p.data, &rng);
        const float *w = p.data + dpt_vartable_find(&t, "0.weight")->offset;
        const float *b = p.data + dpt_vartable_find(&t, "0.bias")->offset;
        size_t nvec = o < in ? o : in;
        for (size_t i = 0; i < nvec; i++)
            for (size_t j = 0; j < nvec; j++) {
                double d = 0.0;
                for (size_t k = 0; k < (o < in ? in : o); k++) {
                    double wi = o < in ? (double)w[i * in + k] : (double)w[k * in + i];
                    double wj = o < in ? (double)w[j * in + k] : (double)w[k * in + j];
                    d += wi * wj;
                }
                CHECK(fabs(d - (i == j ? 2.25 : 0.0)) < 1e-5);
            }
        for (size_t i = 0; i < o; i++)
            CHECK(b[i] == 0.0f);
        dpt_arena_deinit(&p);
        dpt_seq_destroy(seq);
        dpt_vartable_deinit(&t);
    }
}

static void test_names(void)
{
    dpt_layer_kind_t k;
    dpt_init_t i;
    CHECK_OK(dpt_layer_kind_parse("tanh", &k));
    CHECK(k == DPT_LAYER_TANH);
    CHECK(strcmp(dpt_layer_kind_name(DPT_LAYER_RELU), "relu") == 0);
    CHECK_ERR(dpt_layer_kind_parse("sigmoid", &k), DPT_EINVAL, "sigmoid");
    CHECK_OK(dpt_init_parse("orthogonal", &i));
    CHECK(i == DPT_INIT_ORTHOGONAL);
    CHECK_ERR(dpt_init_parse("xavier", &i), DPT_EINVAL, "xavier");
    CHECK(strcmp(dpt_loss_kind_name(DPT_LOSS_MSE), "mse") == 0);
    CHECK(strcmp(dpt_init_name(DPT_INIT_COUNT), "unknown") == 0);
}

/* Two interleaved spirals: not linearly separable. */
static void spirals(dpt_rng_t *rng, size_t n, float *x, int32_t *y)
{
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i & 1);
        double r = 0.05 + 0.95 * dpt_rng_uniform_double(rng);
        double t = 3.0 * PI * r + c * PI;
        x[2 * i] = (float)(r * cos(t));
        x[2 * i + 1] = (float)(r * sin(t));
        y[i] = c;
    }
}

/* The MLP learns the spirals to >= 95% test accuracy (a linear model gets
 * ~50%), deterministically: two runs give bitwise-identical weights. */
static void train_spirals(float *final_params, size_t *nparams, double *acc)
{
    enum { NTR = 2048, NTE = 512, BATCH = 64, EPOCHS = 40 };
    static float x[(NTR + NTE) * 2];
    static int32_t y[NTR + NTE];
    dpt_rng_t rng;
    dpt_rng_init(&rng, 21, 0, 0, DPT_RNG_DATA);
    spirals(&rng, NTR + NTE, x, y);
    const dpt_layer_spec_t l[] = {
        {.kind = DPT_LAYER_LINEAR, .out = 48, .init = DPT_INIT_DEFAULT, .gain = 0},
        {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
        {.kind = DPT_LAYER_LINEAR, .out = 48, .init = DPT_INIT_DEFAULT, .gain = 0},
        {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
        {.kind = DPT_LAYER_LINEAR, .out = 2, .init = DPT_INIT_DEFAULT, .gain = 0}};
    dpt_mlp_t *m;
    REQUIRE_OK(dpt_mlp_create(&m, 2, l, 5, DPT_LOSS_SOFTMAX_XENT, BATCH));
    size_t n = dpt_mlp_vars(m)->total;
    dpt_arena_t p, g;
    REQUIRE_OK(dpt_arena_init(&p, n));
    REQUIRE_OK(dpt_arena_init(&g, n));
    dpt_rng_init(&rng, 21, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(m, p.data, &rng);
    dpt_optim_config_t oc = dpt_optim_defaults(DPT_OPTIM_ADAM);
    dpt_optim_t *opt;
    REQUIRE_OK(dpt_optim_create(&opt, &oc, n));
    dpt_model_t model = dpt_mlp_model(m);
    for (int e = 0; e < EPOCHS; e++)
        for (size_t s = 0; s < NTR / BATCH; s++) {
            dpt_batch_t b = xy_batch(BATCH, x + 2 * s * BATCH, 2, y + s * BATCH);
            dpt_loss_out_t out;
            dpt_vec_zero(g.data, n);
            REQUIRE_OK(model.loss_grad(model.ctx, p.data, g.data, &b, &out));
            dpt_optim_step(opt, p.data, g.data, 1e-2f);
        }
    dpt_batch_t tb = xy_batch(NTE, x + 2 * NTR, 2, y + NTR);
    dpt_loss_out_t test;
    REQUIRE_OK(dpt_mlp_evaluate(m, p.data, &tb, &test));
    *acc = test.correct / NTE;
    *nparams = n;
    memcpy(final_params, p.data, n * sizeof(float));
    dpt_optim_destroy(opt);
    dpt_arena_deinit(&p);
    dpt_arena_deinit(&g);
    dpt_mlp_destroy(m);
}

static void test_mlp_learns_spirals(void)
{
    static float p1[4096], p2[4096];
    size_t n1 = 0, n2 = 0;
    double acc1 = 0.0, acc2 = 0.0;
    train_spirals(p1, &n1, &acc1);
    train_spirals(p2, &n2, &acc2);
    printf("spirals test accuracy %.3f\n", acc1);
    CHECK(acc1 >= 0.95);
    CHECK(n1 == n2 && n1 > 0 && memcmp(p1, p2, n1 * sizeof(float)) == 0);
}

static void test_bad_input(void)
{
    const dpt_layer_spec_t l[] = {
        {.kind = DPT_LAYER_LINEAR, .out = 3, .init = DPT_INIT_DEFAULT, .gain = 0},
        {.kind = DPT_LAYER_RELU, .out = 0, .init = 0, .gain = 0}};
    dpt_mlp_t *m = NULL;
    CHECK_ERR(dpt_mlp_create(&m, 4, l, 0, DPT_LOSS_SOFTMAX_XENT, 8), DPT_EINVAL, "no layers");
    CHECK_ERR(dpt_mlp_create(&m, 0, l, 2, DPT_LOSS_SOFTMAX_XENT, 8), DPT_EINVAL, "input size");
    CHECK_ERR(dpt_mlp_create(&m, 4, l, 2, DPT_LOSS_SOFTMAX_XENT, 0), DPT_EINVAL, "max_batch");
    CHECK_ERR(dpt_mlp_create(&m, 4, l, 2, (dpt_loss_kind_t)9, 8), DPT_EINVAL, "loss");
    const dpt_layer_spec_t bad0[] = {
        {.kind = DPT_LAYER_LINEAR, .out = 0, .init = DPT_INIT_DEFAULT, .gain = 0}};
    CHECK_ERR(dpt_mlp_create(&m, 4, bad0, 1, DPT_LOSS_MSE, 8), DPT_EINVAL, "output size is 0");
    const dpt_layer_spec_t badk[] = {{.kind = (dpt_layer_kind_t)42, .out = 3}};
    CHECK_ERR(dpt_mlp_create(&m, 4, badk, 1, DPT_LOSS_MSE, 8), DPT_EINVAL, "unknown kind");
    const dpt_layer_spec_t one[] = {
        {.kind = DPT_LAYER_LINEAR, .out = 1, .init = DPT_INIT_DEFAULT, .gain = 0}};
    CHECK_ERR(dpt_mlp_create(&m, 4, one, 1, DPT_LOSS_SOFTMAX_XENT, 8), DPT_EINVAL, ">= 2");
    CHECK(m == NULL);

    REQUIRE_OK(dpt_mlp_create(&m, 4, l, 2, DPT_LOSS_SOFTMAX_XENT, 8));
    size_t n = dpt_mlp_vars(m)->total;
    dpt_arena_t p, g;
    REQUIRE_OK(dpt_arena_init(&p, n));
    REQUIRE_OK(dpt_arena_init(&g, n));
    float x[8 * 5] = {0};
    int32_t y[9] = {0, 1, 2, 0, 1, 2, 0, 1, 2};
    dpt_loss_out_t out;
    dpt_batch_t b = xy_batch(2, x, 5, y);
    CHECK_ERR(dpt_mlp_loss_grad(m, p.data, g.data, &b, &out), DPT_EINVAL,
              "column \"x\" has width 5, the model expects 4");
    b = xy_batch(0, x, 4, y);
    CHECK_ERR(dpt_mlp_loss_grad(m, p.data, g.data, &b, &out), DPT_EINVAL, "empty");
    b = xy_batch(9, x, 4, y);
    CHECK_ERR(dpt_mlp_loss_grad(m, p.data, g.data, &b, &out), DPT_EINVAL, "max_batch");
    b = xy_batch(2, x, 4, NULL);
    CHECK_ERR(dpt_mlp_loss_grad(m, p.data, g.data, &b, &out), DPT_EINVAL, "no column \"label\"");
    float fl[2] = {0, 1};
    dpt_batch_add(&b, DPT_MLP_LABEL, DPT_F32, 1, 0, fl);
    CHECK_ERR(dpt_mlp_loss_grad(m, p.data, g.data, &b, &out), DPT_EINVAL,
              "is float32, expected int32");
    int32_t bad_labels[2] = {1, 3};
    b = xy_batch(2, x, 4, bad_labels);
    CHECK_ERR(dpt_mlp_loss_grad(m, p.data, g.data, &b, &out), DPT_EINVAL, "label 3 in row 1");
    b = xy_batch(2, x, 4, y);
    x[6] = NAN;
    CHECK_ERR(dpt_mlp_loss_grad(m, p.data, g.data, &b, &out), DPT_ENUMERIC, "row 1 column 2");
    x[6] = 0.0f;
    CHECK(dpt_vec_sumsq(g.data, n) == 0.0); /* failed calls left no gradient */
    CHECK_OK(dpt_mlp_loss_grad(m, p.data, g.data, &b, &out));
    CHECK(out.rows == 2);

    /* The sequential stack's own checks. */
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq;
    REQUIRE_OK(dpt_seq_create(&seq, 4, l, 2, 8, &t, "a."));
    CHECK_ERR(dpt_seq_backward(seq, p.data, g.data, x, NULL), DPT_ESTATE, "without a forward");
    const float *yy;
    CHECK_ERR(dpt_seq_forward(seq, p.data, x, 0, &yy), DPT_EINVAL, "0 rows");
    dpt_seq_t *seq2 = NULL;
    CHECK_ERR(dpt_seq_create(&seq2, 4, l, 2, 8, &t, "a."), DPT_EINVAL, "already");
    CHECK_ERR(dpt_seq_create(&seq2, 4, l, 2, 8, NULL, "a."), DPT_EINVAL, "table");
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);

    /* Losses and distributions. */
    double loss;
    float z[4] = {0, 0, INFINITY, 0};
    CHECK_ERR(dpt_loss_softmax_xent(z, y, 2, 2, NULL, &loss, NULL), DPT_ENUMERIC, "row 1");
    CHECK_ERR(dpt_loss_softmax_xent(z, y, 0, 2, NULL, &loss, NULL), DPT_EINVAL, "0 rows");
    CHECK_ERR(dpt_loss_mse(z, x, 2, 2, NULL, &loss), DPT_ENUMERIC, "prediction");
    CHECK_ERR(dpt_loss_mse(x, z, 2, 2, NULL, &loss), DPT_ENUMERIC, "target");
    CHECK_ERR(dpt_loss_mse(x, x, 2, 0, NULL, &loss), DPT_EINVAL, "0 columns");
    float lp[2];
    int32_t acts[2] = {0, 5};
    CHECK_ERR(dpt_categorical_logp(x, 2, 2, acts, lp, NULL), DPT_EINVAL, "action 5 in row 1");
    CHECK_ERR(dpt_categorical_logp(z, 2, 2, y, lp, NULL), DPT_ENUMERIC, "logits");
    dpt_rng_t rng;
    dpt_rng_init(&rng, 1, 0, 0, DPT_RNG_TEST);
    CHECK_ERR(dpt_categorical_sample(z, 2, 2, &rng, acts, lp), DPT_ENUMERIC, "logits");
    float ls[2] = {0, NAN};
    CHECK_ERR(dpt_gaussian_logp(x, ls, 1, 2, x, lp, NULL), DPT_ENUMERIC, "log_std");
    CHECK_ERR(dpt_gaussian_logp(x, ls, 0, 2, x, lp, NULL), DPT_EINVAL, "0 rows");

    dpt_arena_deinit(&p);
    dpt_arena_deinit(&g);
    dpt_mlp_destroy(m);
    dpt_mlp_destroy(NULL);
    dpt_seq_destroy(NULL);
}

static void test_mse_head_and_replicate(void)
{
    const dpt_layer_spec_t l[] = {
        {.kind = DPT_LAYER_LINEAR, .out = 2, .init = DPT_INIT_DEFAULT, .gain = 0}};
    dpt_mlp_t *m;
    REQUIRE_OK(dpt_mlp_create(&m, 3, l, 1, DPT_LOSS_MSE, 4));
    dpt_model_t model = dpt_mlp_model(m);
    void *copy = NULL;
    REQUIRE_OK(model.replicate(model.ctx, &copy));
    CHECK(dpt_vartable_equal(dpt_mlp_vars(copy), model.vars));
    size_t n = model.vars->total;
    dpt_arena_t p, g1, g2;
    REQUIRE_OK(dpt_arena_init(&p, n));
    REQUIRE_OK(dpt_arena_init(&g1, n));
    REQUIRE_OK(dpt_arena_init(&g2, n));
    dpt_rng_t rng;
    dpt_rng_init(&rng, 3, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(m, p.data, &rng);
    float x[12], t[8];
    dpt_rng_fill_uniform(&rng, x, 12, -1, 1);
    dpt_rng_fill_uniform(&rng, t, 8, -1, 1);
    dpt_batch_t b = xy_batch(4, x, 3, NULL);
    dpt_batch_add(&b, DPT_MLP_Y, DPT_F32, 2, 0, t);
    dpt_loss_out_t o1, o2;
    REQUIRE_OK(model.loss_grad(model.ctx, p.data, g1.data, &b, &o1));
    REQUIRE_OK(model.loss_grad(copy, p.data, g2.data, &b, &o2));
    CHECK(o1.loss == o2.loss);
    CHECK(memcmp(g1.data, g2.data, n * sizeof(float)) == 0);
    b.cols[1].width = 3;
    CHECK_ERR(model.loss_grad(model.ctx, p.data, g1.data, &b, &o1), DPT_EINVAL, "width 3");
    model.release(copy);
    dpt_arena_deinit(&p);
    dpt_arena_deinit(&g1);
    dpt_arena_deinit(&g2);
    dpt_mlp_destroy(m);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_gradcheck_linear),
        DPT_TEST(test_gradcheck_tanh),
        DPT_TEST(test_tanh_accuracy),
        DPT_TEST(test_exp_log_accuracy),
        DPT_TEST(test_gradcheck_relu),
        DPT_TEST(test_gradcheck_softmax_xent),
        DPT_TEST(test_gradcheck_mse),
        DPT_TEST(test_gradcheck_categorical),
        DPT_TEST(test_categorical_cache_is_rowwise),
        DPT_TEST(test_gradcheck_gaussian),
        DPT_TEST(test_orthogonal_init),
        DPT_TEST(test_names),
        DPT_TEST(test_mlp_learns_spirals),
        DPT_TEST(test_bad_input),
        DPT_TEST(test_mse_head_and_replicate),
        DPT_TEST(test_gradcheck_huber),
    };
    return DPT_TEST_RUN(cases);
}
