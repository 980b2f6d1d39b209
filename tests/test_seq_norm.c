/*
 * seq_norm: the batchnorm layer of a sequential stack (src/nn/seq_norm.c).
 *
 * The model language (batchnorm and bn, momentum= and eps=, the text
 * described back and parsed again), shapes and the specs refused; forward
 * and backward against a double reference on odd shapes (an image, flat
 * rows, n = N*H*W of 1 and 2), in training (batch statistics) and in
 * evaluation (running statistics), with the running statistics' updates
 * m * (mean - running_mean) and m * (var * n / (n - 1) - running_var)
 * written into their gradient slots; the backward stored over garbage and
 * accumulated onto earlier values; central differences of the float
 * forward through conv -> batchnorm -> relu/tanh -> flatten -> dense
 * (J = sum(r * y), r fixed) for every weight but the running statistics
 * and every input; the initial values, which take no random draws; the
 * flags of dpt_seq_running() and the gradient hook's variable ranges.
 */
#include "dpt_test.h"

#include <stdint.h>

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/nn.h"
#include "dpt/rng.h"

static float *falloc(size_t n)
{
    float *p = dpt_alloc_aligned((n ? n : 1) * sizeof(float));
    if (!p)
        abort();
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

static double *dalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p)
        abort();
    return p;
}

static void fill(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    dpt_rng_t r;
    dpt_rng_init(&r, seed, 0, 0, 0);
    dpt_rng_fill_uniform(&r, x, n, lo, hi);
}

/* The largest |a[i] - b[i]| / max(scale, |b[i]|) against a double reference. */
static double max_diff(const float *a, const double *b, size_t n, double scale)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(scale, fabs(b[i]));
        m = d > m || d != d ? d : m;
    }
    return m;
}

/* ---- the language ----------------------------------------------------------- */

static void test_parse_describe(void)
{
    static const struct {
        const char *text;
        float rate, gain;
        const char *described;
    } cases[] = {
        {"bn", 0.0f, 0.0f, "batchnorm"},
        {"batchnorm", 0.0f, 0.0f, "batchnorm"},
        {"bn ( )", 0.0f, 0.0f, "batchnorm"},
        {"batchnorm(momentum=0.2)", 0.2f, 0.0f, "batchnorm(momentum=0.200000003)"},
        {"batchnorm(eps=0.001, momentum=0.5)", 0.5f, 0.001f,
         "batchnorm(momentum=0.5,eps=0.00100000005)"},
        {"bn(eps=1)", 0.0f, 1.0f, "batchnorm(eps=1)"},
        {"bn(momentum=1)", 1.0f, 0.0f, "batchnorm(momentum=1)"},
        {"bn( eps = 2e-5 )", 0.0f, 2e-5f, "batchnorm(eps=1.99999995e-05)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dpt_layer_spec_t a, b;
        size_t na = 0, nb = 0;
        char buf[96];
        REQUIRE_OK(dpt_network_parse(cases[i].text, &a, 1, &na));
        CHECK(na == 1 && a.kind == DPT_LAYER_BATCHNORM);
        CHECK(a.rate == cases[i].rate && a.gain == cases[i].gain);
        dpt_layer_describe(&a, buf, sizeof buf);
        if (strcmp(buf, cases[i].described) != 0)
            fprintf(stderr, "%s described as %s\n", cases[i].text, buf);
        CHECK(strcmp(buf, cases[i].described) == 0);
        /* Described, then parsed again: the same spec. */
        REQUIRE_OK(dpt_network_parse(buf, &b, 1, &nb));
        CHECK(nb == 1 && b.kind == a.kind && b.rate == a.rate && b.gain == a.gain);
    }
    /* In a network, between other layers. */
    dpt_layer_spec_t l[8];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse("conv(4,k=3) bn relu batchnorm(momentum=0.3) flatten dense(2)", l,
                                 8, &n));
    CHECK(n == 6 && l[0].kind == DPT_LAYER_CONV2D && l[1].kind == DPT_LAYER_BATCHNORM);
    CHECK(l[1].rate == 0.0f && l[1].gain == 0.0f && l[2].kind == DPT_LAYER_RELU);
    CHECK(l[3].kind == DPT_LAYER_BATCHNORM && l[3].rate == 0.3f && l[3].gain == 0.0f);
    CHECK(l[4].kind == DPT_LAYER_FLATTEN && l[5].kind == DPT_LAYER_LINEAR && l[5].out == 2);
    dpt_layer_kind_t k = DPT_LAYER_RELU;
    CHECK(dpt_layer_kind_parse("batchnorm", &k) == 0 && k == DPT_LAYER_BATCHNORM);
    CHECK(strcmp(dpt_layer_kind_name(DPT_LAYER_BATCHNORM), "batchnorm") == 0);
    /* A short buffer: cut, terminated. */
    char small[10];
    dpt_layer_describe(&l[3], small, sizeof small);
    CHECK(strlen(small) == 9 && strncmp(small, "batchnorm", 9) == 0);
}

/* ---- shapes and variables ---------------------------------------------------- */

static void test_shapes_and_vars(void)
{
    dpt_layer_spec_t l[8];
    dpt_shape_t s[8];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse("conv(4,k=3) bn relu flatten batchnorm(momentum=0.3) dense(2)", l,
                                 8, &n));
    REQUIRE_OK(dpt_layers_shapes((dpt_shape_t){2, 6, 6}, l, n, s));
    CHECK(s[0].c == 4 && s[0].h == 4 && s[0].w == 4);
    CHECK(s[1].c == 4 && s[1].h == 4 && s[1].w == 4);
    CHECK(s[3].c == 64 && s[3].h == 1 && s[3].w == 1);
    CHECK(s[4].c == 64 && s[4].h == 1 && s[4].w == 1 && s[5].c == 2);
    /* Specs built by hand: momentum in [0, 1] (0: the default), eps >= 0;
     * the message names the layer. */
    dpt_layer_spec_t bad[3] = {{.kind = DPT_LAYER_RELU},
                               {.kind = DPT_LAYER_BATCHNORM, .rate = 1.5f},
                               {.kind = DPT_LAYER_RELU}};
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){3, 2, 2}, bad, 3, NULL), DPT_EINVAL,
              "layer 2 of 3 (batchnorm): momentum 1.5 is not in [0, 1]");
    bad[1].rate = -0.25f;
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){3, 2, 2}, bad, 3, NULL), DPT_EINVAL,
              "layer 2 of 3 (batchnorm): momentum -0.25 is not in [0, 1]");
    bad[1].rate = NAN;
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){3, 2, 2}, bad, 3, NULL), DPT_EINVAL,
              "layer 2 of 3 (batchnorm): momentum");
    bad[1].rate = 0.0f;
    bad[1].gain = -1.0f;
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){3, 2, 2}, bad, 3, NULL), DPT_EINVAL,
              "layer 2 of 3 (batchnorm): eps -1 is not in [0, 1]");
    bad[1].gain = INFINITY;
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){3, 2, 2}, bad, 3, NULL), DPT_EINVAL, "eps inf");
    bad[1].gain = 2.0f;
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){3, 2, 2}, bad, 3, NULL), DPT_EINVAL,
              "eps 2 is not in [0, 1]");
    bad[1].rate = 1.0f;
    bad[1].gain = 0.0f;
    CHECK_OK(dpt_layers_shapes((dpt_shape_t){3, 2, 2}, bad, 3, s));
    CHECK(s[1].c == 3 && s[1].h == 2 && s[1].w == 2);
    /* The stack refuses what the shapes refuse, adding no variable. */
    bad[1].rate = 2.0f;
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    CHECK_ERR(dpt_seq_create_shaped(&seq, (dpt_shape_t){3, 2, 2}, bad, 3, 4, &t, ""), DPT_EINVAL,
              "layer 2 of 3 (batchnorm)");
    CHECK(seq == NULL && t.nvars == 0);
    /* Four variables [C] per layer: gamma, beta, running mean and variance. */
    REQUIRE_OK(dpt_seq_create_shaped(&seq, (dpt_shape_t){2, 6, 6}, l, n, 4, &t, "net."));
    static const char *const names[] = {
        "net.0.weight",       "net.0.bias",        "net.1.weight", "net.1.bias",
        "net.1.running_mean", "net.1.running_var", "net.4.weight", "net.4.bias",
        "net.4.running_mean", "net.4.running_var", "net.5.weight", "net.5.bias"};
    REQUIRE(t.nvars == 12);
    for (size_t v = 0; v < 12; v++)
        CHECK(strcmp(t.vars[v].name, names[v]) == 0);
    for (size_t v = 2; v < 6; v++)
        CHECK(t.vars[v].ndim == 1 && t.vars[v].shape[0] == 4 && t.vars[v].count == 4);
    for (size_t v = 6; v < 10; v++)
        CHECK(t.vars[v].ndim == 1 && t.vars[v].shape[0] == 64 && t.vars[v].count == 64);
    CHECK(t.vars[10].shape[0] == 2 && t.vars[10].shape[1] == 64);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
}

/* ---- forward and backward against a double reference -------------------------------- */

/* One batchnorm layer on x [N, C, S] in double: y, and for dy the input
 * gradient, dgamma, dbeta and the running statistics' updates (0 outside
 * training). */
typedef struct bn_ref {
    double *y, *dx, *dg, *db, *um, *uv;
} bn_ref_t;

static void bn_reference(size_t N, size_t C, size_t S, double eps, double m, int train,
                         const float *x, const float *dy, const float *gamma, const float *beta,
                         const float *rm, const float *rv, bn_ref_t *o)
{
    double n = (double)(N * S);
    for (size_t c = 0; c < C; c++) {
        double mean = 0.0, var = 0.0, sdy = 0.0, sdyx = 0.0;
        double g = (double)gamma[c], b = (double)beta[c];
        for (size_t r = 0; r < N; r++)
            for (size_t s = 0; s < S; s++)
                mean += (double)x[(r * C + c) * S + s];
        mean /= n;
        for (size_t r = 0; r < N; r++)
            for (size_t s = 0; s < S; s++) {
                double d = (double)x[(r * C + c) * S + s] - mean;
                var += d * d;
            }
        var /= n;
        double mu = train ? mean : (double)rm[c];
        double k = 1.0 / sqrt((train ? var : (double)rv[c]) + eps);
        for (size_t r = 0; r < N; r++)
            for (size_t s = 0; s < S; s++) {
                size_t i = (r * C + c) * S + s;
                double xh = ((double)x[i] - mu) * k;
                o->y[i] = g * xh + b;
                sdy += (double)dy[i];
                sdyx += (double)dy[i] * xh;
            }
        o->dg[c] = sdyx;
        o->db[c] = sdy;
        for (size_t r = 0; r < N; r++)
            for (size_t s = 0; s < S; s++) {
                size_t i = (r * C + c) * S + s;
                double xh = ((double)x[i] - mu) * k, d = (double)dy[i];
                o->dx[i] = train ? g * k * (d - sdy / n - xh * sdyx / n) : g * k * d;
            }
        o->um[c] = train ? m * (mean - (double)rm[c]) : 0.0;
        o->uv[c] = train ? m * (var * (n > 1.0 ? n / (n - 1.0) : 1.0) - (double)rv[c]) : 0.0;
    }
}

/* Checks the layer alone (input shape `in`, batch N, spec rate and gain)
 * against the reference, with gamma, beta and the running statistics away
 * from their initial values. */
static void bn_case(dpt_shape_t in, size_t N, float rate, float gain, int train, uint64_t seed)
{
    dpt_layer_spec_t l = {.kind = DPT_LAYER_BATCHNORM, .rate = rate, .gain = gain};
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    REQUIRE_OK(dpt_seq_create_shaped(&seq, in, &l, 1, N, &t, "bn."));
    REQUIRE(t.nvars == 4);
    size_t C = in.c, S = in.h * in.w, F = C * S, T = t.total;
    size_t og = t.vars[0].offset, ob = t.vars[1].offset;
    size_t om = t.vars[2].offset, ov = t.vars[3].offset;
    float *p = falloc(T), *x = falloc(N * F), *dy = falloc(N * F);
    fill(p, T, seed, -0.5f, 0.5f);
    for (size_t c = 0; c < C; c++) {
        p[og + c] += 1.0f; /* gamma in [0.5, 1.5] */
        p[ov + c] += 1.0f; /* running variance in [0.5, 1.5] */
    }
    /* Channels of other means and spreads. */
    fill(x, N * F, seed + 1, -1.0f, 1.0f);
    for (size_t i = 0; i < N * F; i++) {
        size_t c = (i / S) % C;
        x[i] = x[i] * (1.0f + 0.3f * (float)c) + 0.5f * (float)c - 0.3f;
    }
    fill(dy, N * F, seed + 2, -1.0f, 1.0f);
    double m = rate > 0.0f ? (double)rate : (double)0.1f;
    double eps = gain > 0.0f ? (double)gain : (double)1e-5f;
    bn_ref_t ref = {dalloc(N * F), dalloc(N * F), dalloc(C), dalloc(C), dalloc(C), dalloc(C)};
    bn_reference(N, C, S, eps, m, train, x, dy, p + og, p + ob, p + om, p + ov, &ref);
    dpt_seq_set_dropout(seq, train, 0, NULL);
    const float *y;
    REQUIRE_OK(dpt_seq_forward(seq, p, x, N, &y));
    double dfy = max_diff(y, ref.y, N * F, 1.0);
    /* Stored over garbage (the input gradient of the first layer adds). */
    float *g = falloc(T), *dx = falloc(N * F);
    fill(g, T, seed + 3, -5.0f, 5.0f);
    REQUIRE_OK(dpt_seq_backward_ex(seq, p, g, dy, dx, 1));
    double dfx = max_diff(dx, ref.dx, N * F, 1.0);
    double dfg = max_diff(g + og, ref.dg, C, 1.0), dfb = max_diff(g + ob, ref.db, C, 1.0);
    double dfm = max_diff(g + om, ref.um, C, 1.0), dfv = max_diff(g + ov, ref.uv, C, 1.0);
    if (!(dfy < 1e-6 && dfx < 2e-6 && dfg < 2e-6 && dfb < 2e-6 && dfm < 1e-6 && dfv < 1e-6))
        fprintf(stderr,
                "batchnorm [%zu,%zu,%zu] x %zu, %s: y %g, dx %g, dgamma %g, dbeta %g, running "
                "mean %g, running var %g\n",
                in.c, in.h, in.w, N, train ? "training" : "evaluation", dfy, dfx, dfg, dfb, dfm,
                dfv);
    CHECK(dfy < 1e-6);
    CHECK(dfx < 2e-6);
    CHECK(dfg < 2e-6 && dfb < 2e-6);
    CHECK(dfm < 1e-6 && dfv < 1e-6);
    /* Without the input gradient: the same parameter gradients. */
    float *g3 = falloc(T);
    fill(g3, T, seed + 6, -5.0f, 5.0f);
    REQUIRE_OK(dpt_seq_backward_ex(seq, p, g3, dy, NULL, 1));
    int same = 1;
    for (size_t v = 0; v < 4; v++)
        same &= memcmp(g3 + t.vars[v].offset, g + t.vars[v].offset, C * sizeof(float)) == 0;
    CHECK(same);
    dpt_free_aligned(g3);
    int zero_updates = 1;
    for (size_t c = 0; c < C; c++)
        zero_updates &= g[om + c] == 0.0f && g[ov + c] == 0.0f;
    CHECK(train ? !zero_updates : zero_updates);
    /* Accumulated onto earlier values: those plus the stored ones (the
     * running statistics' slots get 0 added outside training: bitwise). */
    float *g2 = falloc(T), *g0 = falloc(T), *dx2 = falloc(N * F), *dx0 = falloc(N * F);
    fill(g2, T, seed + 4, -1.0f, 1.0f);
    fill(dx2, N * F, seed + 5, -1.0f, 1.0f);
    memcpy(g0, g2, T * sizeof(float));
    memcpy(dx0, dx2, N * F * sizeof(float));
    REQUIRE_OK(dpt_seq_backward(seq, p, g2, dy, dx2));
    double acc = 0.0;
    for (size_t v = 0; v < 4; v++)
        for (size_t i = t.vars[v].offset; i < t.vars[v].offset + C; i++)
            acc = fmax(acc, fabs((double)g2[i] - ((double)g0[i] + (double)g[i])));
    for (size_t i = 0; i < N * F; i++)
        acc = fmax(acc, fabs((double)dx2[i] - ((double)dx0[i] + (double)dx[i])));
    CHECK(acc < 2e-6);
    if (!train)
        CHECK(memcmp(g2 + om, g0 + om, C * sizeof(float)) == 0 &&
              memcmp(g2 + ov, g0 + ov, C * sizeof(float)) == 0);
    /* Training reads no running statistic; evaluation does. */
    float *y1 = falloc(N * F);
    memcpy(y1, y, N * F * sizeof(float));
    p[om] += 0.25f;
    p[ov + C - 1] += 0.5f;
    REQUIRE_OK(dpt_seq_forward(seq, p, x, N, &y));
    CHECK(train ? memcmp(y, y1, N * F * sizeof(float)) == 0
                : memcmp(y, y1, N * F * sizeof(float)) != 0);
    free(ref.y), free(ref.dx), free(ref.dg), free(ref.db), free(ref.um), free(ref.uv);
    dpt_free_aligned(p), dpt_free_aligned(x), dpt_free_aligned(dy), dpt_free_aligned(g);
    dpt_free_aligned(dx), dpt_free_aligned(g2), dpt_free_aligned(g0), dpt_free_aligned(dx2);
    dpt_free_aligned(dx0), dpt_free_aligned(y1);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
}

static void test_against_reference(void)
{
    for (int train = 1; train >= 0; train--) {
        /* An image: statistics per channel over N*H*W = 105 values. */
        bn_case((dpt_shape_t){3, 5, 7}, 3, 0.0f, 0.0f, train, 100);
        /* Flat rows: per feature over the batch (n = 4: unbias 4/3), with
         * momentum and eps given. */
        bn_case((dpt_shape_t){5, 1, 1}, 4, 0.3f, 0.05f, train, 200);
        /* One row of one value per channel: n == 1, variance 0, y = beta
         * and the variance's update uses it as it is. */
        bn_case((dpt_shape_t){5, 1, 1}, 1, 0.0f, 0.0f, train, 300);
        /* n == 2: unbias 2. */
        bn_case((dpt_shape_t){4, 1, 1}, 2, 0.0f, 0.0f, train, 400);
        /* One image: the statistics over its positions; momentum 1 (the
         * running values become the batch's). */
        bn_case((dpt_shape_t){2, 3, 2}, 1, 1.0f, 0.0f, train, 500);
    }
}

/* ---- gradient check ------------------------------------------------------------ */

/* J = sum(r * y) of the stack at params p and input x, in double. */
static double objective(dpt_seq_t *s, const float *p, const float *x, const float *r, size_t b)
{
    const float *y;
    if (dpt_seq_forward(s, p, x, b, &y))
        return NAN;
    double j = 0.0;
    for (size_t i = 0; i < b * dpt_seq_out_dim(s); i++)
        j += (double)r[i] * (double)y[i];
    return j;
}

/* Central differences (h) of the float forward against the backward for
 * every weight but the running statistics and every input; the running
 * statistics' slots hold updates, not derivatives: in training the forward
 * does not read them (J does not move), in evaluation it does, and the
 * backward leaves their slots 0. */
static void bn_gradcheck(const char *net, dpt_shape_t in, size_t b, int train, float h)
{
    dpt_layer_spec_t l[16];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse(net, l, 16, &n));
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    REQUIRE_OK(dpt_seq_create_shaped(&seq, in, l, n, b, &t, ""));
    unsigned char run[32] = {0};
    REQUIRE(t.nvars <= 32);
    REQUIRE(dpt_seq_running(seq, run) >= 2);
    dpt_seq_set_dropout(seq, train, 0, NULL);
    size_t ni = dpt_seq_in_dim(seq) * b, no = dpt_seq_out_dim(seq) * b;
    float *p = falloc(t.total), *g = falloc(t.total), *x = falloc(ni), *dx = falloc(ni);
    float *r = falloc(no);
    dpt_rng_t rng;
    dpt_rng_init(&rng, 5, 0, 0, 0);
    dpt_seq_init_params(seq, p, &rng);
    /* gamma, beta and the running statistics away from 1, 0, 0, 1. */
    for (size_t v = 0; v + 3 < t.nvars; v++) {
        if (!run[v + 2] || !run[v + 3] || run[v])
            continue;
        const dpt_var_t *vv = t.vars;
        for (size_t c = 0; c < vv[v].count; c++) {
            p[vv[v].offset + c] = 1.0f + 0.1f * (float)((int)(c % 5) - 2);
            p[vv[v + 1].offset + c] = 0.05f * (float)((int)(c % 3) - 1);
            p[vv[v + 2].offset + c] = 0.1f * (float)((int)(c % 4) - 1);
            p[vv[v + 3].offset + c] = 0.7f + 0.2f * (float)(c % 3);
        }
        v += 3;
    }
    fill(x, ni, 17, -1.0f, 1.0f);
    fill(r, no, 19, -1.0f, 1.0f);
    const float *y;
    REQUIRE_OK(dpt_seq_forward(seq, p, x, b, &y));
    REQUIRE_OK(dpt_seq_backward(seq, p, g, r, dx));
    double num2 = 0.0, err2 = 0.0;
    int running_moves = 0, running_slots_zero = 1;
    for (int which = 0; which < 2; which++) {
        float *v = which ? x : p, *an = which ? dx : g;
        for (size_t k = 0; k < (which ? 1 : t.nvars); k++) {
            size_t lo = which ? 0 : t.vars[k].offset, hi = which ? ni : lo + t.vars[k].count;
            int is_run = !which && run[k];
            for (size_t i = lo; i < hi; i++) {
                float keep = v[i];
                v[i] = keep + h;
                double jp = objective(seq, p, x, r, b);
                v[i] = keep - h;
                double jm = objective(seq, p, x, r, b);
                v[i] = keep;
                double d = (jp - jm) / (2.0 * (double)h);
                if (is_run) {
                    running_moves |= jp != jm;
                    running_slots_zero &= an[i] == 0.0f;
                    continue;
                }
                double e = (double)an[i] - d;
                num2 += d * d;
                err2 += e * e;
            }
        }
    }
    double rel = sqrt(err2 / num2);
    if (!(rel < 2e-3))
        fprintf(stderr, "gradcheck %s (%s): relative error %g\n", net,
                train ? "training" : "evaluation", rel);
    CHECK(rel < 2e-3);
    CHECK(train ? !running_moves : running_moves);
    if (!train)
        CHECK(running_slots_zero);
    dpt_free_aligned(p), dpt_free_aligned(g), dpt_free_aligned(x), dpt_free_aligned(dx);
    dpt_free_aligned(r);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
}

static void test_gradcheck(void)
{
    for (int train = 1; train >= 0; train--) {
        bn_gradcheck("conv(3,k=3,pad=1) batchnorm tanh flatten dense(4)", (dpt_shape_t){2, 5, 4}, 3,
                     train, 1e-3f);
        bn_gradcheck("conv(3,k=3,pad=1) bn(momentum=0.5,eps=0.01) relu flatten dense(3)",
                     (dpt_shape_t){2, 5, 4}, 3, train, 1e-3f);
        /* Flat rows: per feature; two batchnorm layers. */
        bn_gradcheck("dense(6) bn tanh dense(5) bn dense(2)", (dpt_shape_t){4, 1, 1}, 4, train,
                     1e-3f);
    }
}

/* ---- initial values, flags, hook ----------------------------------------------- */

static void test_init_no_draws(void)
{
    dpt_layer_spec_t la[8], lb[8];
    size_t na = 0, nb = 0;
    REQUIRE_OK(dpt_network_parse("bn conv(3,k=3) batchnorm(momentum=0.5) relu flatten bn dense(4)",
                                 la, 8, &na));
    REQUIRE_OK(dpt_network_parse("conv(3,k=3) relu flatten dense(4)", lb, 8, &nb));
    dpt_vartable_t ta, tb;
    dpt_vartable_init(&ta);
    dpt_vartable_init(&tb);
    dpt_seq_t *a = NULL, *b = NULL;
    REQUIRE_OK(dpt_seq_create_shaped(&a, (dpt_shape_t){2, 6, 6}, la, na, 2, &ta, ""));
    REQUIRE_OK(dpt_seq_create_shaped(&b, (dpt_shape_t){2, 6, 6}, lb, nb, 2, &tb, ""));
    float *pa = falloc(ta.total), *pb = falloc(tb.total);
    for (size_t i = 0; i < ta.total; i++)
        pa[i] = 7.0f; /* garbage: every value is written */
    dpt_rng_t ra, rb;
    dpt_rng_init(&ra, 11, 0, 0, DPT_RNG_INIT);
    dpt_rng_init(&rb, 11, 0, 0, DPT_RNG_INIT);
    dpt_seq_init_params(a, pa, &ra);
    dpt_seq_init_params(b, pb, &rb);
    CHECK(dpt_rng_tell(&ra) == dpt_rng_tell(&rb));
    /* The conv and dense layers as without the batchnorm layers. */
    static const char *const same[4][2] = {{"1.weight", "0.weight"},
                                           {"1.bias", "0.bias"},
                                           {"6.weight", "3.weight"},
                                           {"6.bias", "3.bias"}};
    for (int k = 0; k < 4; k++) {
        const dpt_var_t *va = dpt_vartable_find(&ta, same[k][0]);
        const dpt_var_t *vb = dpt_vartable_find(&tb, same[k][1]);
        REQUIRE(va && vb && va->count == vb->count);
        CHECK(memcmp(pa + va->offset, pb + vb->offset, va->count * sizeof(float)) == 0);
    }
    /* gamma 1, beta 0, running mean 0, running variance 1. */
    static const char *const bn[3] = {"0.", "2.", "5."};
    static const char *const what[4] = {"weight", "bias", "running_mean", "running_var"};
    static const float want[4] = {1.0f, 0.0f, 0.0f, 1.0f};
    static const size_t channels[3] = {2, 3, 48};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) {
            char name[32];
            snprintf(name, sizeof name, "%s%s", bn[i], what[k]);
            const dpt_var_t *v = dpt_vartable_find(&ta, name);
            REQUIRE(v && v->count == channels[i]);
            int ok = 1;
            for (size_t c = 0; c < v->count; c++)
                ok &= pa[v->offset + c] == want[k];
            CHECK(ok);
        }
    dpt_free_aligned(pa), dpt_free_aligned(pb);
    dpt_seq_destroy(a);
    dpt_seq_destroy(b);
    dpt_vartable_deinit(&ta);
    dpt_vartable_deinit(&tb);
}

typedef struct hooks {
    size_t lo[8], hi[8], n;
} hooks_t;

static void hook_fn(void *user, size_t lo, size_t hi)
{
    hooks_t *h = user;
    if (h->n < 8)
        h->lo[h->n] = lo, h->hi[h->n] = hi;
    h->n++;
}

static void test_running_flags_and_hook(void)
{
    dpt_layer_spec_t l[8];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse("conv(3,k=3) bn relu flatten batchnorm dense(4)", l, 8, &n));
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    REQUIRE_OK(dpt_seq_create_shaped(&seq, (dpt_shape_t){2, 5, 5}, l, n, 4, &t, "m/"));
    REQUIRE(t.nvars == 12);
    unsigned char f[12];
    memset(f, 0, sizeof f);
    f[0] = 7; /* the other flags are left as they are */
    CHECK(dpt_seq_running(seq, NULL) == 4);
    CHECK(dpt_seq_running(seq, f) == 4);
    for (size_t v = 0; v < 12; v++) {
        int want = v == 4 || v == 5 || v == 8 || v == 9;
        CHECK(f[v] == (v == 0 ? 7 : want));
        if (want)
            CHECK(strstr(t.vars[v].name, ".running_") != NULL);
    }
    /* Without batchnorm: none, nothing written. */
    dpt_layer_spec_t lin = {.kind = DPT_LAYER_LINEAR, .out = 3};
    dpt_vartable_t t2;
    dpt_vartable_init(&t2);
    dpt_seq_t *s2 = NULL;
    REQUIRE_OK(dpt_seq_create(&s2, 5, &lin, 1, 2, &t2, ""));
    unsigned char f2[2] = {0, 0};
    CHECK(dpt_seq_running(s2, f2) == 0 && f2[0] == 0 && f2[1] == 0);
    dpt_seq_destroy(s2);
    dpt_vartable_deinit(&t2);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
    /* The MLP: its table's flags; the hook reports the four variables of
     * a batchnorm layer at once, last layer first. */
    dpt_mlp_t *m = NULL;
    REQUIRE_OK(dpt_mlp_create_shaped(&m, (dpt_shape_t){2, 5, 5}, l, n, DPT_LOSS_SOFTMAX_XENT, 4));
    memset(f, 0, sizeof f);
    CHECK(dpt_mlp_running(m, f) == 4 && f[4] && f[5] && f[8] && f[9] && !f[2] && !f[10]);
    const dpt_vartable_t *mt = dpt_mlp_vars(m);
    REQUIRE(mt->nvars == 12);
    float *p = falloc(mt->total), *g = falloc(mt->total);
    dpt_rng_t rng;
    dpt_rng_init(&rng, 1, 0, 0, 0);
    dpt_mlp_init_params(m, p, &rng);
    dpt_model_t model = dpt_mlp_model(m);
    hooks_t h = {{0}, {0}, 0};
    REQUIRE_OK(model.set_grad_hook(model.ctx, hook_fn, &h));
    float x[4 * 50];
    int32_t lab[4] = {0, 1, 2, 3};
    fill(x, 4 * 50, 23, 0.0f, 1.0f);
    dpt_batch_t b;
    dpt_batch_init(&b, 4);
    REQUIRE_OK(dpt_batch_add(&b, DPT_MLP_X, DPT_F32, 50, 0, x));
    REQUIRE_OK(dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, lab));
    dpt_loss_out_t o;
    REQUIRE_OK(model.loss_grad(model.ctx, p, g, &b, &o));
    CHECK(h.n == 4);
    CHECK(h.lo[0] == 10 && h.hi[0] == 12 && h.lo[1] == 6 && h.hi[1] == 10);
    CHECK(h.lo[2] == 2 && h.hi[2] == 6 && h.lo[3] == 0 && h.hi[3] == 2);
    /* Training: the running statistics' slots hold updates (not 0);
     * the batch of a loss_grad is normalized with its own statistics. */
    const dpt_var_t *rv = &mt->vars[5];
    int moved = 0;
    for (size_t c = 0; c < rv->count; c++)
        moved |= g[rv->offset + c] != 0.0f;
    CHECK(moved);
    dpt_free_aligned(p), dpt_free_aligned(g);
    dpt_mlp_destroy(m);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_parse_describe),    DPT_TEST(test_shapes_and_vars),
        DPT_TEST(test_against_reference), DPT_TEST(test_gradcheck),
        DPT_TEST(test_init_no_draws),     DPT_TEST(test_running_flags_and_hook),
    };
    return DPT_TEST_RUN(cases);
}
