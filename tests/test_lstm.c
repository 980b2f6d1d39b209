/*
 * lstm: gradients against finite differences, padding masks, state carried
 * across calls, initialisation, and every error path of dpt/lstm.h.
 *
 * Gradient checks use the objective
 *     J = sum r_y . y + sum r_h . h_n + sum r_c . c_n
 * with fixed random weights r, so that dy = r_y, dh_n = r_h, dc_n = r_c. The
 * analytic gradient of dpt's backward is compared two ways:
 *  - with central differences of a reference LSTM written below in double
 *    (libm's exp and tanh, step 1e-6): their truncation and rounding errors
 *    are ~1e-9, so what is measured is the float error of dpt's backward
 *    (~1e-7 when written). Tolerance 2e-5 for the relative error of each
 *    variable's gradient, ||analytic - numeric|| / max(||analytic||,
 *    ||numeric||), and for every element's error over the variable's
 *    largest gradient;
 *  - with central differences of dpt's own float forward (step 1e-2, J
 *    summed in double), as tests/test_nn.c checks the other layers:
 *    tolerance 2e-3 relative.
 * dpt's forward is also compared with the reference's (1e-5 absolute).
 */
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/lstm.h"
#include "dpt/rng.h"

#include <stdint.h>

#define REF_TOL 2e-5
#define REF_EPS 1e-6
#define FD_TOL 2e-3
#define FD_H 1e-2f
#define FWD_TOL 1e-5

/* The ENOMEM test asks for an impossible allocation; under the address and
 * thread sanitizers that must return NULL (as it does without them) instead
 * of aborting. ASan then prints a warning for each failed allocation, which
 * is expected. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature) /* clang before it defined the GCC macros */
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#elif __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#if defined(TEST_ASAN)
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}
#elif defined(TEST_TSAN)
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "allocator_may_return_null=1";
}
#endif

/* ---- the reference, in double -------------------------------------------- */

typedef struct shape {
    size_t in, hid, batch, len;
} shape_t;

static double ref_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* The formulas of dpt/lstm.h, step by step, in double. y [T, B, H] (may be
 * NULL), hn and cn [B, H] start as h0 and c0. */
static void ref_forward(const shape_t *s, const double *wih, const double *whh, const double *bias,
                        const double *x, const uint8_t *mask, const double *h0, const double *c0,
                        double *y, double *hn, double *cn)
{
    const size_t H = s->hid, I = s->in, B = s->batch;
    double *z = malloc(4 * H * sizeof *z);
    if (!z)
        abort();
    memcpy(hn, h0, B * H * sizeof *hn);
    memcpy(cn, c0, B * H * sizeof *cn);
    for (size_t t = 0; t < s->len; t++)
        for (size_t b = 0; b < B; b++) {
            size_t r = t * B + b;
            double *h = hn + b * H, *c = cn + b * H, *yr = y ? y + r * H : NULL;
            if (mask && !mask[r]) {
                for (size_t j = 0; yr && j < H; j++)
                    yr[j] = 0.0;
                continue;
            }
            for (size_t k = 0; k < 4 * H; k++) {
                double a = bias[k];
                for (size_t i = 0; i < I; i++)
                    a += wih[k * I + i] * x[r * I + i];
                for (size_t j = 0; j < H; j++)
                    a += whh[k * H + j] * h[j];
                z[k] = a;
            }
            for (size_t j = 0; j < H; j++) {
                double gi = ref_sigmoid(z[j]), gf = ref_sigmoid(z[H + j]);
                double gg = tanh(z[2 * H + j]), go = ref_sigmoid(z[3 * H + j]);
                c[j] = gf * c[j] + gi * gg;
                h[j] = go * tanh(c[j]);
                if (yr)
                    yr[j] = h[j];
            }
        }
    free(z);
}

/* ---- a problem: a layer, its inputs in float and double, the weights r ---- */

enum { V_WIH, V_WHH, V_BIAS, V_X, V_H0, V_C0, V_COUNT };
static const char *const v_names[V_COUNT] = {"weight_ih", "weight_hh", "bias", "x", "h0", "c0"};

typedef struct prob {
    shape_t s;
    const uint8_t *mask; /* [T, B] or NULL (borrowed) */
    dpt_vartable_t table;
    dpt_lstm_t *l;
    dpt_arena_t p, g;
    float *f[V_COUNT];  /* the float values dpt sees (parameters inside p) */
    float *df[V_COUNT]; /* dpt's gradients (parameters inside g) */
    double *d[V_COUNT]; /* double copies for the reference */
    size_t n[V_COUNT];
    float *ry, *rh, *rc; /* [T, B, H], [B, H], [B, H] */
    float *y, *hn, *cn;  /* dpt's outputs */
} prob_t;

static void prob_free(prob_t *q)
{
    dpt_lstm_destroy(q->l);
    dpt_vartable_deinit(&q->table);
    dpt_arena_deinit(&q->p);
    dpt_arena_deinit(&q->g);
    for (int v = V_X; v < V_COUNT; v++)
        free(q->f[v]), free(q->df[v]);
    for (int v = 0; v < V_COUNT; v++)
        free(q->d[v]);
    free(q->ry), free(q->rh), free(q->rc), free(q->y), free(q->hn), free(q->cn);
    memset(q, 0, sizeof *q);
}

/* Sets up a layer of shape s (created for max_batch, max_len) with random
 * parameters, inputs, initial state and objective weights. Returns 0. */
static int prob_init(prob_t *q, shape_t s, size_t max_batch, size_t max_len, const uint8_t *mask,
                     uint32_t seed)
{
    memset(q, 0, sizeof *q);
    q->s = s;
    q->mask = mask;
    dpt_vartable_init(&q->table);
    int rc = dpt_lstm_create(&q->l, s.in, s.hid, max_batch, max_len, &q->table, "rnn.");
    if (rc)
        return rc;
    if ((rc = dpt_arena_init(&q->p, q->table.total)) != 0 ||
        (rc = dpt_arena_init(&q->g, q->table.total)) != 0)
        return rc;
    const size_t H = s.hid, B = s.batch, T = s.len;
    q->n[V_WIH] = 4 * H * s.in;
    q->n[V_WHH] = 4 * H * H;
    q->n[V_BIAS] = 4 * H;
    q->n[V_X] = T * B * s.in;
    q->n[V_H0] = q->n[V_C0] = B * H;
    for (int v = V_WIH; v <= V_BIAS; v++) {
        char name[64];
        snprintf(name, sizeof name, "rnn.%s", v_names[v]);
        const dpt_var_t *var = dpt_vartable_find(&q->table, name);
        if (!var || var->count != q->n[v])
            return DPT_EINVAL;
        q->f[v] = q->p.data + var->offset;
        q->df[v] = q->g.data + var->offset;
    }
    for (int v = V_X; v < V_COUNT; v++) {
        q->f[v] = malloc(q->n[v] * sizeof(float));
        q->df[v] = calloc(q->n[v], sizeof(float));
        if (!q->f[v] || !q->df[v])
            return DPT_ENOMEM;
    }
    for (int v = 0; v < V_COUNT; v++)
        if (!(q->d[v] = malloc(q->n[v] * sizeof(double))))
            return DPT_ENOMEM;
    q->ry = malloc(T * B * H * sizeof(float));
    q->rh = malloc(B * H * sizeof(float));
    q->rc = malloc(B * H * sizeof(float));
    q->y = malloc(T * B * H * sizeof(float));
    q->hn = malloc(B * H * sizeof(float));
    q->cn = malloc(B * H * sizeof(float));
    if (!q->ry || !q->rh || !q->rc || !q->y || !q->hn || !q->cn)
        return DPT_ENOMEM;
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_TEST);
    /* Parameters of a scale that keeps the gates away from saturation. */
    float ws = 1.0f / sqrtf((float)(s.in + H));
    dpt_rng_fill_uniform(&rng, q->f[V_WIH], q->n[V_WIH], -2 * ws, 2 * ws);
    dpt_rng_fill_uniform(&rng, q->f[V_WHH], q->n[V_WHH], -2 * ws, 2 * ws);
    dpt_rng_fill_uniform(&rng, q->f[V_BIAS], q->n[V_BIAS], -0.5f, 0.5f);
    dpt_rng_fill_uniform(&rng, q->f[V_X], q->n[V_X], -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, q->f[V_H0], q->n[V_H0], -0.5f, 0.5f);
    dpt_rng_fill_uniform(&rng, q->f[V_C0], q->n[V_C0], -0.5f, 0.5f);
    dpt_rng_fill_uniform(&rng, q->ry, T * B * H, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, q->rh, B * H, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, q->rc, B * H, -1.0f, 1.0f);
    for (int v = 0; v < V_COUNT; v++)
        for (size_t i = 0; i < q->n[v]; i++)
            q->d[v][i] = (double)q->f[v][i];
    return DPT_OK;
}

/* J of the reference at the double values. */
static double prob_ref_j(const prob_t *q, double *y, double *hn, double *cn)
{
    const size_t H = q->s.hid, B = q->s.batch, T = q->s.len;
    ref_forward(&q->s, q->d[V_WIH], q->d[V_WHH], q->d[V_BIAS], q->d[V_X], q->mask, q->d[V_H0],
                q->d[V_C0], y, hn, cn);
    double j = 0.0;
    for (size_t i = 0; i < T * B * H; i++)
        j += (double)q->ry[i] * y[i];
    for (size_t i = 0; i < B * H; i++)
        j += (double)q->rh[i] * hn[i] + (double)q->rc[i] * cn[i];
    return j;
}

/* dpt's forward at the float values. */
static int prob_dpt_forward(prob_t *q)
{
    return dpt_lstm_forward(q->l, q->p.data, q->f[V_X], q->s.len, q->s.batch, q->mask, q->f[V_H0],
                            q->f[V_C0], q->y, q->hn, q->cn);
}

/* J of dpt's forward, in double (NAN on an error). */
static double prob_dpt_j(prob_t *q)
{
    const size_t H = q->s.hid, B = q->s.batch, T = q->s.len;
    if (prob_dpt_forward(q) != 0)
        return NAN;
    double j = 0.0;
    for (size_t i = 0; i < T * B * H; i++)
        j += (double)q->ry[i] * (double)q->y[i];
    for (size_t i = 0; i < B * H; i++)
        j += (double)q->rh[i] * (double)q->hn[i] + (double)q->rc[i] * (double)q->cn[i];
    return j;
}

/* dpt's forward and backward into zeroed gradients. */
static int prob_dpt_grad(prob_t *q)
{
    dpt_vec_zero(q->g.data, q->table.total);
    for (int v = V_X; v < V_COUNT; v++)
        dpt_vec_zero(q->df[v], q->n[v]);
    int rc = prob_dpt_forward(q);
    if (rc)
        return rc;
    return dpt_lstm_backward(q->l, q->p.data, q->g.data, q->ry, q->rh, q->rc, q->df[V_X],
                             q->df[V_H0], q->df[V_C0]);
}

static double rel_err(const float *a, const double *num, size_t n)
{
    double d = 0.0, na = 0.0, nn = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - num[i]) * ((double)a[i] - num[i]);
        na += (double)a[i] * (double)a[i];
        nn += num[i] * num[i];
    }
    double s = sqrt(na > nn ? na : nn);
    return s > 0.0 ? sqrt(d) / s : sqrt(d);
}

/* The largest |a - num| over the largest |num| (or 1e-3 when smaller). */
static double elem_err(const float *a, const double *num, size_t n)
{
    double m = 0.0, big = 1e-3;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs((double)a[i] - num[i]));
        big = fmax(big, fabs(num[i]));
    }
    return m / big;
}

/* Checks dpt's forward and gradients against the double reference. */
static void check_against_ref(shape_t s, size_t max_batch, size_t max_len, const uint8_t *mask,
                              uint32_t seed)
{
    prob_t q;
    int rc = prob_init(&q, s, max_batch, max_len, mask, seed);
    if (rc)
        fprintf(stderr, "setup: %s: %s\n", dpt_status_name(rc), dpt_last_error());
    REQUIRE(rc == 0);
    const size_t H = s.hid, B = s.batch, T = s.len;
    double *y = malloc(T * B * H * sizeof *y), *hn = malloc(B * H * sizeof *hn);
    double *cn = malloc(B * H * sizeof *cn);
    size_t most = 0;
    for (int v = 0; v < V_COUNT; v++)
        most = q.n[v] > most ? q.n[v] : most;
    double *num = malloc(most * sizeof *num);
    REQUIRE(y && hn && cn && num);
    REQUIRE_OK(prob_dpt_grad(&q));

    /* Forward against the reference. */
    prob_ref_j(&q, y, hn, cn);
    double fe = 0.0;
    for (size_t i = 0; i < T * B * H; i++)
        fe = fmax(fe, fabs((double)q.y[i] - y[i]));
    for (size_t i = 0; i < B * H; i++)
        fe = fmax(fe, fmax(fabs((double)q.hn[i] - hn[i]), fabs((double)q.cn[i] - cn[i])));
    if (fe > FWD_TOL)
        fprintf(stderr, "I=%zu H=%zu B=%zu T=%zu: forward differs from the reference by %.3g\n",
                s.in, H, B, T, fe);
    CHECK(fe <= FWD_TOL);

    /* Every gradient against central differences of the reference. */
    for (int v = 0; v < V_COUNT; v++) {
        for (size_t i = 0; i < q.n[v]; i++) {
            double save = q.d[v][i];
            q.d[v][i] = save + REF_EPS;
            double jp = prob_ref_j(&q, y, hn, cn);
            q.d[v][i] = save - REF_EPS;
            double jm = prob_ref_j(&q, y, hn, cn);
            q.d[v][i] = save;
            num[i] = (jp - jm) / (2.0 * REF_EPS);
        }
        double e = rel_err(q.df[v], num, q.n[v]), ee = elem_err(q.df[v], num, q.n[v]);
        if (e > REF_TOL || ee > REF_TOL)
            fprintf(stderr,
                    "I=%zu H=%zu B=%zu T=%zu: gradient of %s: relative error %.3g, largest "
                    "element error %.3g\n",
                    s.in, H, B, T, v_names[v], e, ee);
        CHECK(e <= REF_TOL);
        CHECK(ee <= REF_TOL);
    }
    free(y), free(hn), free(cn), free(num);
    prob_free(&q);
}

/* A [T, B] mask from per-sequence lengths (valid steps first). */
static uint8_t *mask_of_lengths(const size_t *lens, size_t batch, size_t len)
{
    uint8_t *m = malloc(batch * len);
    if (!m)
        abort();
    for (size_t t = 0; t < len; t++)
        for (size_t b = 0; b < batch; b++)
            m[t * batch + b] = t < lens[b];
    return m;
}

static void test_gradcheck_sizes(void)
{
    /* in, hid, batch, len; created for exactly these sizes */
    check_against_ref((shape_t){3, 4, 2, 5}, 2, 5, NULL, 1);
    check_against_ref((shape_t){1, 1, 1, 1}, 1, 1, NULL, 2); /* one step, one sequence */
    check_against_ref((shape_t){2, 5, 3, 1}, 3, 1, NULL, 3); /* one step */
    check_against_ref((shape_t){4, 3, 1, 6}, 1, 6, NULL, 4); /* one sequence */
    /* Fewer sequences and steps than the layer was created for. */
    check_against_ref((shape_t){4, 3, 2, 4}, 5, 9, NULL, 5);
    /* A cell size that is no multiple of a vector width. */
    check_against_ref((shape_t){5, 17, 3, 4}, 3, 4, NULL, 6);
}

static void test_gradcheck_padded(void)
{
    /* Trailing padding, with a sequence of length 0 (the state only passes
     * through) and one of the full length. */
    size_t lens1[4] = {6, 3, 1, 0};
    uint8_t *m1 = mask_of_lengths(lens1, 4, 6);
    check_against_ref((shape_t){3, 4, 4, 6}, 4, 6, m1, 7);
    /* Every sequence shorter than the batch's steps: the last steps are
     * padding everywhere (and skipped by the layer). */
    size_t lens2[3] = {2, 3, 1};
    uint8_t *m2 = mask_of_lengths(lens2, 3, 5);
    check_against_ref((shape_t){2, 6, 3, 5}, 4, 8, m2, 8);
    /* One sequence of one valid step among padding. */
    size_t lens3[1] = {1};
    uint8_t *m3 = mask_of_lengths(lens3, 1, 4);
    check_against_ref((shape_t){3, 2, 1, 4}, 1, 4, m3, 9);
    /* Padding in the middle, a step where every sequence is padded, and
     * mask values other than 1 that count as valid. */
    static const uint8_t m4[5 * 3] = {1, 1, 0, 0, 7, 1, 0, 0, 0, 1, 255, 0, 1, 0, 1};
    check_against_ref((shape_t){3, 5, 3, 5}, 3, 5, m4, 10);
    free(m1), free(m2), free(m3);
}

/* Central differences of dpt's own float forward (with its fast tanh). */
static void test_gradcheck_float(void)
{
    size_t lens[3] = {5, 2, 4};
    uint8_t *mask = mask_of_lengths(lens, 3, 5);
    prob_t q;
    REQUIRE_OK(prob_init(&q, (shape_t){3, 6, 3, 5}, 3, 5, mask, 11));
    REQUIRE_OK(prob_dpt_grad(&q));
    size_t most = 0;
    for (int v = 0; v < V_COUNT; v++)
        most = q.n[v] > most ? q.n[v] : most;
    double *num = malloc(most * sizeof *num);
    REQUIRE(num);
    for (int v = 0; v < V_COUNT; v++) {
        for (size_t i = 0; i < q.n[v]; i++) {
            float save = q.f[v][i];
            q.f[v][i] = save + FD_H;
            double jp = prob_dpt_j(&q);
            q.f[v][i] = save - FD_H;
            double jm = prob_dpt_j(&q);
            q.f[v][i] = save;
            num[i] = (jp - jm) / (2.0 * (double)FD_H);
        }
        double e = rel_err(q.df[v], num, q.n[v]);
        if (e > FD_TOL)
            fprintf(stderr, "gradient of %s: relative error %.3g\n", v_names[v], e);
        CHECK(e <= FD_TOL);
    }
    free(num);
    free(mask);
    prob_free(&q);
}

/* Copies of every gradient dpt produced, to compare runs. */
typedef struct snap {
    float *g, *y, *hn, *cn, *dx, *dh0, *dc0;
} snap_t;

static void snap_take(snap_t *sn, const prob_t *q)
{
    const size_t H = q->s.hid, B = q->s.batch, T = q->s.len;
    sn->g = malloc(q->table.total * sizeof(float));
    sn->y = malloc(T * B * H * sizeof(float));
    sn->hn = malloc(B * H * sizeof(float));
    sn->cn = malloc(B * H * sizeof(float));
    sn->dx = malloc(q->n[V_X] * sizeof(float));
    sn->dh0 = malloc(B * H * sizeof(float));
    sn->dc0 = malloc(B * H * sizeof(float));
    if (!sn->g || !sn->y || !sn->hn || !sn->cn || !sn->dx || !sn->dh0 || !sn->dc0)
        abort();
    memcpy(sn->g, q->g.data, q->table.total * sizeof(float));
    memcpy(sn->y, q->y, T * B * H * sizeof(float));
    memcpy(sn->hn, q->hn, B * H * sizeof(float));
    memcpy(sn->cn, q->cn, B * H * sizeof(float));
    memcpy(sn->dx, q->df[V_X], q->n[V_X] * sizeof(float));
    memcpy(sn->dh0, q->df[V_H0], B * H * sizeof(float));
    memcpy(sn->dc0, q->df[V_C0], B * H * sizeof(float));
}

static void snap_free(snap_t *sn)
{
    free(sn->g), free(sn->y), free(sn->hn), free(sn->cn), free(sn->dx), free(sn->dh0);
    free(sn->dc0);
}

/* Number of i < n with a[i] != b[i] (as values: -0 == +0). */
static size_t count_diff(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += a[i] != b[i];
    return d;
}

static void test_masked_steps(void)
{
    enum { I = 3, H = 5, B = 3, T = 6 };
    size_t lens[B] = {6, 2, 4};
    uint8_t *mask = mask_of_lengths(lens, B, T);
    prob_t q;
    REQUIRE_OK(prob_init(&q, (shape_t){I, H, B, T}, B, T, mask, 21));
    REQUIRE_OK(prob_dpt_grad(&q));
    snap_t a;
    snap_take(&a, &q);

    /* Outputs of padded steps are zero, their input gradients are zero,
     * and the final state of a short sequence is its last valid output. */
    size_t nonzero = 0;
    for (size_t t = 0; t < T; t++)
        for (size_t b = 0; b < B; b++)
            if (!mask[t * B + b]) {
                for (size_t j = 0; j < H; j++)
                    nonzero += q.y[(t * B + b) * H + j] != 0.0f;
                for (size_t i = 0; i < I; i++)
                    nonzero += q.df[V_X][(t * B + b) * I + i] != 0.0f;
            }
    CHECK(nonzero == 0);
    for (size_t b = 0; b < B; b++)
        CHECK(count_diff(q.hn + b * H, q.y + ((lens[b] - 1) * B + b) * H, H) == 0);

    /* New inputs at the padded steps, and NaN in dy there: nothing changes,
     * bit for bit. */
    dpt_rng_t rng;
    dpt_rng_init(&rng, 22, 0, 0, DPT_RNG_TEST);
    for (size_t t = 0; t < T; t++)
        for (size_t b = 0; b < B; b++)
            if (!mask[t * B + b]) {
                dpt_rng_fill_uniform(&rng, q.f[V_X] + (t * B + b) * I, I, -100.0f, 100.0f);
                for (size_t j = 0; j < H; j++)
                    q.ry[(t * B + b) * H + j] = NAN;
            }
    REQUIRE_OK(prob_dpt_grad(&q));
    CHECK(count_diff(a.g, q.g.data, q.table.total) == 0);
    CHECK(count_diff(a.y, q.y, (size_t)T * B * H) == 0);
    CHECK(count_diff(a.hn, q.hn, (size_t)B * H) == 0);
    CHECK(count_diff(a.cn, q.cn, (size_t)B * H) == 0);
    CHECK(count_diff(a.dx, q.df[V_X], q.n[V_X]) == 0);
    CHECK(count_diff(a.dh0, q.df[V_H0], (size_t)B * H) == 0);
    CHECK(count_diff(a.dc0, q.df[V_C0], (size_t)B * H) == 0);

    /* A sequence that is all padding passes its state and its state's
     * gradient through unchanged. */
    size_t lens0[B] = {3, 0, 1};
    uint8_t *mask0 = mask_of_lengths(lens0, B, T);
    q.mask = mask0;
    REQUIRE_OK(prob_dpt_grad(&q));
    CHECK(count_diff(q.hn + H, q.f[V_H0] + H, H) == 0);
    CHECK(count_diff(q.cn + H, q.f[V_C0] + H, H) == 0);
    CHECK(count_diff(q.df[V_H0] + H, q.rh + H, H) == 0);
    CHECK(count_diff(q.df[V_C0] + H, q.rc + H, H) == 0);
    free(mask0);
    snap_free(&a);
    free(mask);
    prob_free(&q);
}

/* Two halves with the state carried equal the whole sequence, forward and
 * backward (the second half's dh0, dc0 are the first half's dh_n, dc_n). */
static void test_carried_state(void)
{
    enum { I = 4, H = 6, B = 3, T = 7, T1 = 3, T2 = T - T1 };
    size_t lens[B] = {7, 5, 2}; /* padding in the second half, and all of it for one */
    uint8_t *mask = mask_of_lengths(lens, B, T);
    prob_t q;
    REQUIRE_OK(prob_init(&q, (shape_t){I, H, B, T}, B, T, mask, 31));
    REQUIRE_OK(prob_dpt_grad(&q));

    dpt_vartable_t t1, t2;
    dpt_vartable_init(&t1);
    dpt_vartable_init(&t2);
    dpt_lstm_t *l1 = NULL, *l2 = NULL;
    REQUIRE_OK(dpt_lstm_create(&l1, I, H, B, T1, &t1, "rnn."));
    REQUIRE_OK(dpt_lstm_create(&l2, I, H, B, T2, &t2, "rnn."));
    REQUIRE(dpt_vartable_equal(&t1, &q.table) && dpt_vartable_equal(&t2, &q.table));
    dpt_arena_t g;
    REQUIRE_OK(dpt_arena_init(&g, q.table.total));
    float *y = malloc((size_t)T * B * H * sizeof *y), *h = malloc((size_t)B * H * sizeof *h);
    float *c = malloc((size_t)B * H * sizeof *c), *dx = calloc((size_t)T * B * I, sizeof *dx);
    float *dh = calloc((size_t)B * H, sizeof *dh), *dc = calloc((size_t)B * H, sizeof *dc);
    float *dh0 = calloc((size_t)B * H, sizeof *dh0), *dc0 = calloc((size_t)B * H, sizeof *dc0);
    REQUIRE(y && h && c && dx && dh && dc && dh0 && dc0);
    const float *x = q.f[V_X];
    /* h and c are the state in place: the first half's output is the second
     * half's input. */
    REQUIRE_OK(dpt_lstm_forward(l1, q.p.data, x, T1, B, mask, q.f[V_H0], q.f[V_C0], y, h, c));
    REQUIRE_OK(dpt_lstm_forward(l2, q.p.data, x + T1 * B * I, T2, B, mask + T1 * B, h, c,
                                y + T1 * B * H, h, c));
    CHECK(dpt_test_max_rel_diff(y, q.y, (size_t)T * B * H, 1.0) <= 1e-6);
    CHECK(dpt_test_max_rel_diff(h, q.hn, (size_t)B * H, 1.0) <= 1e-6);
    CHECK(dpt_test_max_rel_diff(c, q.cn, (size_t)B * H, 1.0) <= 1e-6);

    REQUIRE_OK(dpt_lstm_backward(l2, q.p.data, g.data, q.ry + T1 * B * H, q.rh, q.rc,
                                 dx + T1 * B * I, dh, dc));
    REQUIRE_OK(dpt_lstm_backward(l1, q.p.data, g.data, q.ry, dh, dc, dx, dh0, dc0));
    CHECK(dpt_test_max_rel_diff(g.data, q.g.data, q.table.total, 1e-2) <= 1e-5);
    CHECK(dpt_test_max_rel_diff(dx, q.df[V_X], q.n[V_X], 1e-2) <= 1e-5);
    CHECK(dpt_test_max_rel_diff(dh0, q.df[V_H0], (size_t)B * H, 1e-2) <= 1e-5);
    CHECK(dpt_test_max_rel_diff(dc0, q.df[V_C0], (size_t)B * H, 1e-2) <= 1e-5);

    free(y), free(h), free(c), free(dx), free(dh), free(dc), free(dh0), free(dc0);
    dpt_arena_deinit(&g);
    dpt_lstm_destroy(l1);
    dpt_lstm_destroy(l2);
    dpt_vartable_deinit(&t1);
    dpt_vartable_deinit(&t2);
    free(mask);
    prob_free(&q);
}

/* NULL state, gradients and outputs mean zeros / not wanted; backward
 * accumulates into every gradient. */
static void test_optional_args_and_accumulation(void)
{
    enum { I = 2, H = 4, B = 2, T = 3 };
    prob_t q;
    REQUIRE_OK(prob_init(&q, (shape_t){I, H, B, T}, B, T, NULL, 41));
    dpt_vec_zero(q.f[V_H0], (size_t)B * H);
    dpt_vec_zero(q.f[V_C0], (size_t)B * H);
    REQUIRE_OK(prob_dpt_grad(&q));
    snap_t a;
    snap_take(&a, &q);

    /* h0 = c0 = NULL is the zero state; NULL outputs are skipped. */
    float *y = malloc((size_t)T * B * H * sizeof *y), *hn = malloc((size_t)B * H * sizeof *hn);
    REQUIRE(y && hn);
    REQUIRE_OK(dpt_lstm_forward(q.l, q.p.data, q.f[V_X], T, B, NULL, NULL, NULL, y, NULL, NULL));
    CHECK(count_diff(y, a.y, (size_t)T * B * H) == 0);
    REQUIRE_OK(dpt_lstm_forward(q.l, q.p.data, q.f[V_X], T, B, NULL, NULL, NULL, NULL, hn, NULL));
    CHECK(count_diff(hn, a.hn, (size_t)B * H) == 0);

    /* Backward accumulates: a second pass (after a new forward) doubles
     * everything; NULL gradient outputs are left alone. */
    REQUIRE_OK(dpt_lstm_forward(q.l, q.p.data, q.f[V_X], T, B, NULL, NULL, NULL, NULL, NULL, NULL));
    REQUIRE_OK(dpt_lstm_backward(q.l, q.p.data, q.g.data, q.ry, q.rh, q.rc, q.df[V_X], q.df[V_H0],
                                 q.df[V_C0]));
    size_t bad = 0;
    for (size_t i = 0; i < q.table.total; i++)
        bad += fabsf(q.g.data[i] - 2.0f * a.g[i]) > 1e-6f * fmaxf(1.0f, fabsf(a.g[i]));
    for (size_t i = 0; i < q.n[V_X]; i++)
        bad += fabsf(q.df[V_X][i] - 2.0f * a.dx[i]) > 1e-6f * fmaxf(1.0f, fabsf(a.dx[i]));
    for (size_t i = 0; i < (size_t)B * H; i++)
        bad += fabsf(q.df[V_H0][i] - 2.0f * a.dh0[i]) > 1e-6f * fmaxf(1.0f, fabsf(a.dh0[i])) ||
               fabsf(q.df[V_C0][i] - 2.0f * a.dc0[i]) > 1e-6f * fmaxf(1.0f, fabsf(a.dc0[i]));
    CHECK(bad == 0);

    /* dy = NULL: only the final state carries a gradient; dh_n = dc_n =
     * NULL as well leaves every gradient at zero. */
    prob_t r;
    REQUIRE_OK(prob_init(&r, (shape_t){I, H, B, T}, B, T, NULL, 41));
    dpt_vec_zero(r.ry, (size_t)T * B * H);
    REQUIRE_OK(prob_dpt_grad(&r));
    REQUIRE_OK(dpt_lstm_forward(q.l, r.p.data, r.f[V_X], T, B, NULL, r.f[V_H0], r.f[V_C0], NULL,
                                NULL, NULL));
    dpt_vec_zero(q.g.data, q.table.total);
    REQUIRE_OK(dpt_lstm_backward(q.l, r.p.data, q.g.data, NULL, r.rh, r.rc, NULL, NULL, NULL));
    CHECK(count_diff(q.g.data, r.g.data, q.table.total) == 0);
    REQUIRE_OK(dpt_lstm_forward(q.l, r.p.data, r.f[V_X], T, B, NULL, r.f[V_H0], r.f[V_C0], NULL,
                                NULL, NULL));
    dpt_vec_zero(q.g.data, q.table.total);
    REQUIRE_OK(dpt_lstm_backward(q.l, r.p.data, q.g.data, NULL, NULL, NULL, NULL, NULL, NULL));
    CHECK(dpt_vec_sumsq(q.g.data, q.table.total) == 0.0);

    free(y), free(hn);
    snap_free(&a);
    prob_free(&r);
    prob_free(&q);
}

static void test_layout_and_init(void)
{
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    size_t shape[1] = {3};
    REQUIRE_OK(dpt_vartable_add(&t, "other", 1, shape, NULL)); /* a table already in use */
    dpt_lstm_t *l = NULL;
    enum { I = 5, H = 8 };
    REQUIRE_OK(dpt_lstm_create(&l, I, H, 4, 10, &t, "pi.lstm."));
    CHECK(dpt_lstm_in_dim(l) == I && dpt_lstm_hidden(l) == H);
    CHECK(dpt_lstm_max_batch(l) == 4 && dpt_lstm_max_seq_len(l) == 10);
    const dpt_var_t *wih = dpt_vartable_find(&t, "pi.lstm.weight_ih");
    const dpt_var_t *whh = dpt_vartable_find(&t, "pi.lstm.weight_hh");
    const dpt_var_t *b = dpt_vartable_find(&t, "pi.lstm.bias");
    REQUIRE(wih && whh && b && t.nvars == 4);
    CHECK(wih->ndim == 2 && wih->shape[0] == 4 * H && wih->shape[1] == I);
    CHECK(whh->ndim == 2 && whh->shape[0] == 4 * H && whh->shape[1] == H);
    CHECK(b->ndim == 1 && b->shape[0] == 4 * H);

    dpt_arena_t p, p2;
    REQUIRE_OK(dpt_arena_init(&p, t.total));
    REQUIRE_OK(dpt_arena_init(&p2, t.total));
    dpt_rng_t rng;
    dpt_rng_init(&rng, 5, 0, 0, DPT_RNG_INIT);
    dpt_lstm_init_params(l, p.data, &rng);
    dpt_rng_init(&rng, 5, 0, 0, DPT_RNG_INIT);
    dpt_lstm_init_params(l, p2.data, &rng);
    CHECK(count_diff(p.data, p2.data, t.total) == 0); /* deterministic */
    CHECK(p.data[0] == 0.0f && p.data[1] == 0.0f);    /* other variables untouched */

    /* Bias: 1 for the forget gate (rows H..2H), 0 elsewhere. */
    for (size_t j = 0; j < 4 * H; j++)
        CHECK(p.data[b->offset + j] == (j >= H && j < 2 * H ? 1.0f : 0.0f));
    /* weight_ih within +-1/sqrt(H), not all zero. */
    double bound = 1.0 / sqrt((double)H), s = 0.0;
    for (size_t i = 0; i < wih->count; i++) {
        CHECK(fabs((double)p.data[wih->offset + i]) <= bound);
        s += fabs((double)p.data[wih->offset + i]);
    }
    CHECK(s / (double)wih->count > 0.25 * bound);
    /* Each gate's block of weight_hh is orthogonal: W W^T = I. */
    double worst = 0.0;
    for (size_t gate = 0; gate < 4; gate++) {
        const float *w = p.data + whh->offset + gate * H * H;
        for (size_t i = 0; i < H; i++)
            for (size_t k = 0; k < H; k++) {
                double d = 0.0;
                for (size_t j = 0; j < H; j++)
                    d += (double)w[i * H + j] * (double)w[k * H + j];
                worst = fmax(worst, fabs(d - (i == k ? 1.0 : 0.0)));
            }
    }
    CHECK(worst < 1e-5);
    dpt_arena_deinit(&p);
    dpt_arena_deinit(&p2);
    dpt_lstm_destroy(l);
    dpt_lstm_destroy(NULL); /* a no-op */

    /* NULL prefix: bare names. */
    dpt_vartable_t t2;
    dpt_vartable_init(&t2);
    REQUIRE_OK(dpt_lstm_create(&l, 1, 1, 1, 1, &t2, NULL));
    CHECK(dpt_vartable_find(&t2, "weight_ih") && dpt_vartable_find(&t2, "bias"));
    dpt_lstm_destroy(l);
    dpt_vartable_deinit(&t2);
    dpt_vartable_deinit(&t);
}

static void test_errors(void)
{
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_lstm_t *l = (dpt_lstm_t *)&t; /* must come back NULL on failure */
    const size_t big = (size_t)-1;

    /* create */
    CHECK_ERR(dpt_lstm_create(NULL, 2, 3, 4, 5, &t, ""), DPT_EINVAL, "lstm");
    CHECK_ERR(dpt_lstm_create(&l, 2, 3, 4, 5, NULL, ""), DPT_EINVAL, "table");
    CHECK(l == NULL);
    CHECK_ERR(dpt_lstm_create(&l, 0, 3, 4, 5, &t, ""), DPT_EINVAL, "input size 0");
    CHECK_ERR(dpt_lstm_create(&l, 2, 0, 4, 5, &t, ""), DPT_EINVAL, "cell size 0");
    CHECK_ERR(dpt_lstm_create(&l, 2, 3, 0, 5, &t, ""), DPT_EINVAL, "max_batch 0");
    CHECK_ERR(dpt_lstm_create(&l, 2, 3, 4, 0, &t, ""), DPT_EINVAL, "max_seq_len 0");
    CHECK_ERR(dpt_lstm_create(&l, 2, big / 2, 4, 5, &t, ""), DPT_EOVERFLOW, "overflow");
    CHECK_ERR(dpt_lstm_create(&l, big / 8, 3, 4, 5, &t, ""), DPT_EOVERFLOW, "overflow");
    CHECK_ERR(dpt_lstm_create(&l, 2, 3, 4, big, &t, ""), DPT_EOVERFLOW, "overflow");
    CHECK_ERR(dpt_lstm_create(&l, 2, 3, big / 2, 5, &t, ""), DPT_EOVERFLOW, "overflow");
    CHECK_ERR(dpt_lstm_create(&l, 2, 1 << 20, 1 << 20, 1 << 20, &t, ""), DPT_EOVERFLOW, "overflow");
    char longp[DPT_VAR_NAME_MAX];
    memset(longp, 'p', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    CHECK_ERR(dpt_lstm_create(&l, 2, 3, 4, 5, &t, longp), DPT_EINVAL, "longer than");
    CHECK(t.nvars == 0);
    /* 2^60 bytes of caches: more than any address space, without overflow. */
    CHECK_ERR(dpt_lstm_create(&l, 1, 1, 1, (size_t)1 << 56, &t, ""), DPT_ENOMEM, "caches");
    CHECK(l == NULL && t.nvars == 0);
    REQUIRE_OK(dpt_lstm_create(&l, 2, 3, 4, 5, &t, "a."));
    dpt_lstm_t *l2 = NULL;
    CHECK_ERR(dpt_lstm_create(&l2, 2, 3, 4, 5, &t, "a."), DPT_EINVAL, "already");
    CHECK(l2 == NULL && t.nvars == 3);

    /* forward */
    dpt_arena_t p, g;
    REQUIRE_OK(dpt_arena_init(&p, t.total));
    REQUIRE_OK(dpt_arena_init(&g, t.total));
    float x[5 * 4 * 2] = {0}, s[4 * 3] = {0}, y[5 * 4 * 3];
    CHECK_ERR(dpt_lstm_forward(NULL, p.data, x, 5, 4, NULL, NULL, NULL, y, NULL, NULL), DPT_EINVAL,
              "no layer");
    CHECK_ERR(dpt_lstm_forward(l, NULL, x, 5, 4, NULL, NULL, NULL, y, NULL, NULL), DPT_EINVAL,
              "parameters");
    CHECK_ERR(dpt_lstm_forward(l, p.data, NULL, 5, 4, NULL, NULL, NULL, y, NULL, NULL), DPT_EINVAL,
              "input");
    CHECK_ERR(dpt_lstm_forward(l, p.data, x, 5, 0, NULL, NULL, NULL, y, NULL, NULL), DPT_EINVAL,
              "batch of 0");
    CHECK_ERR(dpt_lstm_forward(l, p.data, x, 5, 5, NULL, NULL, NULL, y, NULL, NULL), DPT_EINVAL,
              "allowed 1..4");
    CHECK_ERR(dpt_lstm_forward(l, p.data, x, 0, 4, NULL, NULL, NULL, y, NULL, NULL), DPT_EINVAL,
              "0 steps");
    CHECK_ERR(dpt_lstm_forward(l, p.data, x, 6, 4, NULL, NULL, NULL, y, NULL, NULL), DPT_EINVAL,
              "allowed 1..5");
    x[(2 * 4 + 3) * 2 + 1] = NAN;
    CHECK_ERR(dpt_lstm_forward(l, p.data, x, 5, 4, NULL, NULL, NULL, y, NULL, NULL), DPT_ENUMERIC,
              "step 2, sequence 3, column 1");
    x[(2 * 4 + 3) * 2 + 1] = 0.0f;
    s[1 * 3 + 2] = INFINITY;
    CHECK_ERR(dpt_lstm_forward(l, p.data, x, 5, 4, NULL, s, NULL, y, NULL, NULL), DPT_ENUMERIC,
              "h0 of sequence 1, column 2");
    CHECK_ERR(dpt_lstm_forward(l, p.data, x, 5, 4, NULL, NULL, s, y, NULL, NULL), DPT_ENUMERIC,
              "c0 of sequence 1, column 2");
    s[1 * 3 + 2] = 0.0f;

    /* backward: without a forward, after a failed forward, twice */
    dpt_lstm_t *fresh = NULL;
    dpt_vartable_t t3;
    dpt_vartable_init(&t3);
    REQUIRE_OK(dpt_lstm_create(&fresh, 2, 3, 4, 5, &t3, ""));
    CHECK_ERR(dpt_lstm_backward(fresh, p.data, g.data, NULL, NULL, NULL, NULL, NULL, NULL),
              DPT_ESTATE, "no forward");
    CHECK_ERR(dpt_lstm_backward(l, p.data, g.data, NULL, NULL, NULL, NULL, NULL, NULL), DPT_ESTATE,
              "no forward");
    REQUIRE_OK(dpt_lstm_forward(l, p.data, x, 5, 4, NULL, NULL, NULL, y, NULL, NULL));
    CHECK_ERR(dpt_lstm_backward(NULL, p.data, g.data, NULL, NULL, NULL, NULL, NULL, NULL),
              DPT_EINVAL, "no layer");
    CHECK_ERR(dpt_lstm_backward(l, NULL, g.data, NULL, NULL, NULL, NULL, NULL, NULL), DPT_EINVAL,
              "parameters");
    CHECK_ERR(dpt_lstm_backward(l, p.data, NULL, NULL, NULL, NULL, NULL, NULL, NULL), DPT_EINVAL,
              "gradient arena");
    CHECK_OK(dpt_lstm_backward(l, p.data, g.data, NULL, NULL, NULL, NULL, NULL, NULL));
    CHECK_ERR(dpt_lstm_backward(l, p.data, g.data, NULL, NULL, NULL, NULL, NULL, NULL), DPT_ESTATE,
              "one backward per forward");
    /* A failed forward drops the cached one. */
    REQUIRE_OK(dpt_lstm_forward(l, p.data, x, 5, 4, NULL, NULL, NULL, y, NULL, NULL));
    CHECK_ERR(dpt_lstm_forward(l, p.data, x, 5, 9, NULL, NULL, NULL, y, NULL, NULL), DPT_EINVAL,
              "batch");
    CHECK_ERR(dpt_lstm_backward(l, p.data, g.data, NULL, NULL, NULL, NULL, NULL, NULL), DPT_ESTATE,
              "no forward");

    dpt_lstm_destroy(fresh);
    dpt_vartable_deinit(&t3);
    dpt_arena_deinit(&p);
    dpt_arena_deinit(&g);
    dpt_lstm_destroy(l);
    dpt_vartable_deinit(&t);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_gradcheck_sizes), DPT_TEST(test_gradcheck_padded),
        DPT_TEST(test_gradcheck_float), DPT_TEST(test_masked_steps),
        DPT_TEST(test_carried_state),   DPT_TEST(test_optional_args_and_accumulation),
        DPT_TEST(test_layout_and_init), DPT_TEST(test_errors),
    };
    return DPT_TEST_RUN(cases);
}
