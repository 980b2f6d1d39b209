/*
 * network: the model language (dpt_network_parse, dpt_layer_describe),
 * layer shapes (dpt_layers_shapes) and sequential stacks of image layers
 * (conv2d, pooling, flatten in dpt_seq / dpt_mlp).
 *
 * A stack's forward and backward are checked bitwise against the same
 * dpt/conv.h kernels called one after the other (the kernels themselves are
 * checked against double references and finite differences in test_conv),
 * and its gradients against central differences of its own forward: in
 * double around float weights, J = sum(r * y) with r fixed, h = 1e-2 on
 * a smooth stack (tanh and average pooling), every weight, bias and input.
 * The batchnorm layer's own checks are in test_seq_norm (its parse errors
 * and descriptions are here with the other layers').
 */
#include "dpt_test.h"

#include <stdint.h>

#include "dpt/arena.h"
#include "dpt/conv.h"
#include "dpt/nn.h"
#include "dpt/rng.h"

#define LENET                                                                            \
    "conv(32,k=3,pad=1) relu maxpool(2) conv(64, k=3, pad=1) relu maxpool(2)\n flatten " \
    "dense(128) "                                                                        \
    "relu"

static float *falloc(size_t n)
{
    float *p = dpt_alloc_aligned((n ? n : 1) * sizeof(float));
    if (!p)
        abort();
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

static void fill(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    dpt_rng_t r;
    dpt_rng_init(&r, seed, 0, 0, 0);
    dpt_rng_fill_uniform(&r, x, n, lo, hi);
}

/* ---- the language ----------------------------------------------------------- */

static void test_parse_lenet(void)
{
    dpt_layer_spec_t l[DPT_NETWORK_MAX_LAYERS];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse(LENET, l, DPT_NETWORK_MAX_LAYERS, &n));
    REQUIRE(n == 9);
    CHECK(l[0].kind == DPT_LAYER_CONV2D && l[0].out == 32 && l[0].kh == 3 && l[0].kw == 3);
    CHECK(l[0].pad_top == 1 && l[0].pad_bottom == 1 && l[0].pad_left == 1 && l[0].pad_right == 1);
    CHECK(l[0].stride_h == 0 && l[0].init == DPT_INIT_DEFAULT && !l[0].pad_same);
    CHECK(l[1].kind == DPT_LAYER_RELU);
    CHECK(l[2].kind == DPT_LAYER_MAXPOOL2D && l[2].kh == 2 && l[2].kw == 2);
    CHECK(l[3].kind == DPT_LAYER_CONV2D && l[3].out == 64);
    CHECK(l[6].kind == DPT_LAYER_FLATTEN);
    CHECK(l[7].kind == DPT_LAYER_LINEAR && l[7].out == 128);
    CHECK(l[8].kind == DPT_LAYER_RELU);
}

static void test_parse_forms(void)
{
    dpt_layer_spec_t l[8];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse("conv2d(8, 2x3, stride=2x1, pad=same, init=orthogonal) "
                                 "avgpool2d(3x2,stride=1,pad=1x0,count_pad=0) linear(4,init=normal,"
                                 "gain=0.5) tanh() flatten()",
                                 l, 8, &n));
    REQUIRE(n == 5);
    CHECK(l[0].kind == DPT_LAYER_CONV2D && l[0].out == 8 && l[0].kh == 2 && l[0].kw == 3);
    CHECK(l[0].stride_h == 2 && l[0].stride_w == 1 && l[0].pad_same);
    CHECK(l[0].init == DPT_INIT_ORTHOGONAL && l[0].gain == 1.0f);
    CHECK(l[1].kind == DPT_LAYER_AVGPOOL2D && l[1].kh == 3 && l[1].kw == 2 && l[1].stride_h == 1);
    CHECK(l[1].pad_top == 1 && l[1].pad_bottom == 1 && l[1].pad_left == 0 && !l[1].count_pad);
    CHECK(l[2].kind == DPT_LAYER_LINEAR && l[2].init == DPT_INIT_NORMAL && l[2].gain == 0.5f);
    CHECK(l[3].kind == DPT_LAYER_TANH && l[4].kind == DPT_LAYER_FLATTEN);
    /* The default count_pad is PyTorch's. */
    REQUIRE_OK(dpt_network_parse("avgpool(2)", l, 8, &n));
    CHECK(n == 1 && l[0].count_pad == 1 && l[0].stride_h == 0);
    /* describe, then parse again: the same layers. */
    const char *texts[] = {"conv(8,k=2x3,stride=2x1,pad=same,init=orthogonal,gain=2)",
                           "maxpool(3,stride=2,pad=1)",
                           "avgpool(2,count_pad=0)",
                           "dense(7)",
                           "flatten",
                           "relu",
                           "dropout(0.25)",
                           "dropout(p=0)",
                           "batchnorm",
                           "bn(momentum=0.25,eps=0.01)",
                           "batchnorm(eps=0.5)"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        dpt_layer_spec_t a, b;
        char buf[200];
        size_t na = 0, nb = 0;
        REQUIRE_OK(dpt_network_parse(texts[i], &a, 1, &na));
        dpt_layer_describe(&a, buf, sizeof buf);
        REQUIRE_OK(dpt_network_parse(buf, &b, 1, &nb));
        CHECK(na == 1 && nb == 1 && a.kind == b.kind && a.out == b.out && a.kh == b.kh);
        CHECK(a.kw == b.kw && a.pad_same == b.pad_same && a.pad_top == b.pad_top);
        CHECK(a.pad_left == b.pad_left && a.init == b.init && a.gain == b.gain);
        CHECK(a.count_pad == b.count_pad && a.rate == b.rate);
        CHECK((a.stride_h ? a.stride_h : (a.kind == DPT_LAYER_CONV2D ? 1 : a.kh)) == b.stride_h);
    }
    char small[8];
    dpt_layer_describe(&l[0], small, sizeof small);
    CHECK(strlen(small) == 7);
}

static void test_parse_errors(void)
{
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"", "empty"},
        {"  \n ", "empty"},
        {"relu foo", "network layer 2 \"foo\": unknown layer"},
        {"conv", "conv needs arguments"},
        {"dense", "dense needs arguments"},
        {"maxpool", "maxpool needs arguments"},
        {"conv(32)", "kernel size is missing"},
        {"conv(k=3)", "output size is missing"},
        {"maxpool(stride=2)", "window size is missing"},
        {"conv(0,k=3)", "out = \"0\" is not an integer"},
        {"conv(32,k=0)", "k = \"0\""},
        {"conv(32,k=3,bar=1)", "unknown argument \"bar\" (conv takes: out k stride pad init gain)"},
        {"conv(32,k=3,k=3)", "argument k given twice"},
        {"conv(32,3,k=3)", "argument k given twice"},
        {"conv(32,k=3", "no closing parenthesis"},
        {"conv(32,,k=3)", "empty argument"},
        {"conv(32,k=3,)", "empty argument"},
        {"dense(12)x", "unexpected \"x\""},
        {"relu(1)", "too many positional arguments (relu takes 0)"},
        {"dense(1,2)", "too many positional"},
        {"conv(k=3,32)", "positional argument after a named one"},
        {"maxpool(2,stride=0)", "stride = \"0\""},
        {"dense(1a)", "out = \"1a\""},
        {"dense(99999999999)", "is not an integer"},
        {"conv(4,k=3x)", "k = \"\""},
        {"conv(4,k=3,pad=-1)", "pad = \"-1\""},
        {"conv(4,k=3,init=foo)", "init = \"foo\" is not one of"},
        {"conv(4,k=3,gain=-1)", "gain = \"-1\""},
        {"conv(4,k=3,gain=abc)", "gain = \"abc\""},
        {"avgpool(2,count_pad=2)", "count_pad must be 0 or 1"},
        {"maxpool(2,count_pad=1)", "unknown argument \"count_pad\""},
        {"relu ( ) tanh(())", "a parenthesis inside"},
        {"relu )", "expected a layer name"},
        {"dense(=3)", "unknown argument \"\""},
        {"dropout", "dropout needs arguments, e.g. dropout(0.5)"},
        {"dropout()", "the rate is missing"},
        {"dropout(1)", "p = \"1\" is not a probability in [0, 1)"},
        {"dropout(-0.5)", "p = \"-0.5\""},
        {"dropout(0.5,p=0.1)", "argument p given twice"},
        {"bnx", "unknown layer (known: conv, maxpool, avgpool, dense, dropout, batchnorm,"},
        {"relu batchnorm(0.1)",
         "network layer 2 \"batchnorm(0.1)\": too many positional arguments (batchnorm takes 0)"},
        {"bn(momentum=0)", "network layer 1 \"bn(momentum=0)\": momentum = \"0\" is not a number "
                           "in (0, 1]"},
        {"relu relu batchnorm(momentum=1.5)",
         "network layer 3 \"batchnorm(momentum=1.5)\": momentum = \"1.5\" is not a number"},
        {"batchnorm(eps=abc)",
         "network layer 1 \"batchnorm(eps=abc)\": eps = \"abc\" is not a number in (0, 1]"},
        {"batchnorm(eps=0)", "eps = \"0\""},
        {"bn(eps=-1e-5)", "eps = \"-1e-5\""},
        {"bn(eps=)", "eps = \"\""},
        {"bn(momentum=nan)", "momentum = \"nan\""},
        {"batchnorm(p=0.1)", "network layer 1 \"batchnorm(p=0.1)\": unknown argument \"p\" "
                             "(batchnorm takes: momentum eps)"},
        {"bn(momentum=0.1,momentum=0.2)", "argument momentum given twice"},
    };
    dpt_layer_spec_t l[4];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 99;
        CHECK_ERR(dpt_network_parse(cases[i].text, l, 4, &n), DPT_EINVAL, cases[i].needle);
        CHECK(n == 99);
    }
    size_t n = 0;
    CHECK_ERR(dpt_network_parse("relu relu relu relu relu", l, 4, &n), DPT_EINVAL,
              "network layer 5 \"relu\": more than 4 layers");
    CHECK_ERR(dpt_network_parse(NULL, l, 4, &n), DPT_EINVAL, "NULL");
    /* A long layer is quoted shortened. */
    char text[400] = "conv(";
    for (int i = 0; i < 60; i++)
        strcat(text, "1,");
    strcat(text, "1)");
    CHECK_ERR(dpt_network_parse(text, l, 4, &n), DPT_EINVAL, "...\"");
}

/* ---- shapes ---------------------------------------------------------------------- */

static void test_shapes(void)
{
    dpt_layer_spec_t l[DPT_NETWORK_MAX_LAYERS];
    dpt_shape_t s[DPT_NETWORK_MAX_LAYERS];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse(LENET, l, DPT_NETWORK_MAX_LAYERS, &n));
    REQUIRE_OK(dpt_layers_shapes((dpt_shape_t){1, 28, 28}, l, n, s));
    CHECK(s[0].c == 32 && s[0].h == 28 && s[0].w == 28);
    CHECK(s[2].c == 32 && s[2].h == 14 && s[2].w == 14);
    CHECK(s[5].c == 64 && s[5].h == 7 && s[5].w == 7);
    CHECK(s[6].c == 3136 && s[6].h == 1 && s[6].w == 1);
    CHECK(s[8].c == 128 && s[8].h == 1);
    /* MinAtar's policy body: 2x2 SAME then 2x2 average pooling. */
    REQUIRE_OK(dpt_network_parse("conv(32,k=2,pad=same) relu avgpool(2) flatten", l, 8, &n));
    REQUIRE_OK(dpt_layers_shapes((dpt_shape_t){4, 10, 10}, l, n, s));
    CHECK(s[0].c == 32 && s[0].h == 10 && s[0].w == 10 && s[2].h == 5 && s[3].c == 800);
    /* Errors name the layer, its position and the input shape. */
    REQUIRE_OK(dpt_network_parse("conv(8,k=3) relu dense(4)", l, 8, &n));
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){1, 28, 28}, l, n, NULL), DPT_EINVAL,
              "layer 3 of 3 (linear) on input [8, 26, 26]: the input is an image; put a flatten");
    REQUIRE_OK(dpt_network_parse("maxpool(2) conv(8,k=5)", l, 8, &n));
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){2, 6, 6}, l, n, NULL), DPT_EINVAL,
              "layer 2 of 2 (conv(8,k=5x5,stride=1x1,pad=0x0)) on input [2, 3, 3]");
    REQUIRE_OK(dpt_network_parse("maxpool(3,pad=3)", l, 8, &n));
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){2, 6, 6}, l, n, NULL), DPT_EINVAL,
              "layer 1 of 1 (maxpool(3x3,stride=3x3,pad=3x3)) on input [2, 6, 6]");
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){0, 6, 6}, l, n, NULL), DPT_EINVAL, "input size is 0");
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){1, 6, 6}, l, 0, NULL), DPT_EINVAL, "no layers");
    dpt_layer_spec_t bad = {.kind = DPT_LAYER_CONV2D, .out = 2, .kh = 1, .kw = 1, .init = 9};
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){1, 6, 6}, &bad, 1, NULL), DPT_EINVAL,
              "unknown init 9");
    bad = (dpt_layer_spec_t){.kind = DPT_LAYER_CONV2D, .out = 0, .kh = 1, .kw = 1};
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){1, 6, 6}, &bad, 1, NULL), DPT_EINVAL,
              "0 output channels");
    bad = (dpt_layer_spec_t){.kind = DPT_LAYER_FLATTEN};
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){SIZE_MAX / 2, 6, 6}, &bad, 1, NULL), DPT_EOVERFLOW,
              "overflows");
    bad = (dpt_layer_spec_t){.kind = DPT_LAYER_DROPOUT, .rate = 1.0f};
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){1, 6, 6}, &bad, 1, NULL), DPT_EINVAL,
              "layer 1 of 1 (dropout): rate 1 is not in [0, 1)");
    bad = (dpt_layer_spec_t){.kind = (dpt_layer_kind_t)77};
    CHECK_ERR(dpt_layers_shapes((dpt_shape_t){1, 6, 6}, &bad, 1, NULL), DPT_EINVAL,
              "unknown kind 77");
    /* The stack refuses what the shapes refuse. */
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    CHECK_ERR(dpt_seq_create_shaped(&seq, (dpt_shape_t){2, 6, 6}, l, n, 4, &t, ""), DPT_EINVAL,
              "layer 1 of 1");
    CHECK(seq == NULL && t.nvars == 0);
    dpt_vartable_deinit(&t);
}

/* ---- stacks -------------------------------------------------------------------- */

/* The stack used against the kernels: every image layer, odd sizes. */
#define CHAIN_NET                                                                             \
    "conv(5,k=3,stride=2,pad=same) relu maxpool(3,stride=2,pad=1) conv(4,k=2,pad=same) tanh " \
    "avgpool(2,count_pad=0) flatten dense(3)"

typedef struct chain {
    dpt_conv2d_t c1, c2;
    dpt_pool2d_t p1, p2;
} chain_t;

static void test_seq_matches_kernels(void)
{
    enum { B = 5, C = 3, H = 11, W = 9 };
    dpt_layer_spec_t l[8];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse(CHAIN_NET, l, 8, &n));
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    REQUIRE_OK(dpt_seq_create_shaped(&seq, (dpt_shape_t){C, H, W}, l, n, B, &t, "net."));
    dpt_shape_t os = dpt_seq_out_shape(seq), is = dpt_seq_in_shape(seq);
    CHECK(os.c == 3 && os.h == 1 && is.c == C && is.h == H && is.w == W);
    CHECK(dpt_seq_in_dim(seq) == C * H * W && dpt_seq_out_dim(seq) == 3);
    CHECK(t.nvars == 6 && strcmp(t.vars[0].name, "net.0.weight") == 0 && t.vars[0].ndim == 4);
    CHECK(strcmp(t.vars[2].name, "net.3.weight") == 0 &&
          strcmp(t.vars[4].name, "net.7.weight") == 0);
    /* The same geometry, by hand. */
    chain_t g = {{C, H, W, 5, 3, 3, 2, 2, 0, 0, 0, 0},
                 {5, 3, 3, 4, 2, 2, 1, 1, 0, 0, 0, 0},
                 {5, 6, 5, 3, 3, 2, 2, 1, 1, 1, 1, 0},
                 {4, 3, 3, 2, 2, 2, 2, 0, 0, 0, 0, 0}};
    REQUIRE_OK(dpt_conv2d_same(&g.c1));
    REQUIRE(dpt_conv2d_out_h(&g.c1) == 6 && dpt_conv2d_out_w(&g.c1) == 5);
    REQUIRE_OK(dpt_pool2d_check(&g.p1));
    REQUIRE(dpt_pool2d_out_h(&g.p1) == 3 && dpt_pool2d_out_w(&g.p1) == 3);
    g.c2.in_h = 3, g.c2.in_w = 3;
    REQUIRE_OK(dpt_conv2d_same(&g.c2));
    REQUIRE_OK(dpt_pool2d_check(&g.p2));
    size_t ws1, ws2;
    REQUIRE_OK(dpt_conv2d_workspace(&g.c1, &ws1));
    REQUIRE_OK(dpt_conv2d_workspace(&g.c2, &ws2));
    float *ws = falloc(ws1 > ws2 ? ws1 : ws2);
    float *p = falloc(t.total), *gr = falloc(t.total), *g2 = falloc(t.total);
    dpt_rng_t rng;
    dpt_rng_init(&rng, 3, 0, 0, 0);
    dpt_seq_init_params(seq, p, &rng);
    float *x = falloc(B * C * H * W);
    fill(x, B * C * H * W, 7, -1.0f, 1.0f);
    const float *y;
    REQUIRE_OK(dpt_seq_forward(seq, p, x, B, &y));
    /* The forward by hand. */
    size_t o0 = t.vars[0].offset, o1 = t.vars[1].offset, o2 = t.vars[2].offset;
    size_t o3 = t.vars[3].offset, o4 = t.vars[4].offset, o5 = t.vars[5].offset;
    float *a0 = falloc(B * 150), *a1 = falloc(B * 150), *a2 = falloc(B * 45), *a3 = falloc(B * 36);
    float *a4 = falloc(B * 36), *a5 = falloc(B * 4), *a7 = falloc(B * 3);
    REQUIRE_OK(dpt_conv2d_forward(&g.c1, a0, x, p + o0, p + o1, B, ws));
    for (size_t i = 0; i < B * 150; i++)
        a1[i] = a0[i] > 0.0f ? a0[i] : 0.0f;
    REQUIRE_OK(dpt_maxpool2d_forward(&g.p1, a2, a1, B));
    REQUIRE_OK(dpt_conv2d_forward(&g.c2, a3, a2, p + o2, p + o3, B, ws));
    /* tanh: the stack's own (not libm's), so take its output from a tanh stack. */
    {
        dpt_layer_spec_t th = {.kind = DPT_LAYER_TANH};
        dpt_vartable_t t2;
        dpt_vartable_init(&t2);
        dpt_seq_t *s2 = NULL;
        const float *ty;
        REQUIRE_OK(dpt_seq_create(&s2, 36, &th, 1, B, &t2, ""));
        REQUIRE_OK(dpt_seq_forward(s2, NULL, a3, B, &ty));
        memcpy(a4, ty, B * 36 * sizeof(float));
        dpt_seq_destroy(s2);
        dpt_vartable_deinit(&t2);
    }
    REQUIRE_OK(dpt_avgpool2d_forward(&g.p2, a5, a4, B));
    for (size_t r = 0; r < B; r++)
        for (size_t o = 0; o < 3; o++) {
            float s = p[o5 + o];
            for (size_t k = 0; k < 4; k++)
                s += a5[r * 4 + k] * p[o4 + o * 4 + k];
            a7[r * 3 + o] = s;
        }
    double fd = dpt_test_max_rel_diff(y, a7, B * 3, 1.0);
    if (!(fd < 1e-5))
        fprintf(stderr, "forward: relative difference %g\n", fd);
    CHECK(fd < 1e-5); /* the dense layer: the GEMM's order */
    /* Backward: the parameter gradients stored over garbage equal those
     * accumulated onto zeros, bit for bit; the input gradient accumulates. */
    float *dy = falloc(B * 3), *dx = falloc(B * C * H * W), *dx2 = falloc(B * C * H * W);
    fill(dy, B * 3, 11, -1.0f, 1.0f);
    fill(gr, t.total, 13, -5.0f, 5.0f); /* garbage: stored over */
    REQUIRE_OK(dpt_seq_backward_ex(seq, p, gr, dy, dx, 1));
    REQUIRE_OK(dpt_seq_backward(seq, p, g2, dy, dx2));
    int same_g = 1; /* == : a stored -0 is an added +0; the padding is not written */
    for (size_t v = 0; v < t.nvars; v++)
        for (size_t i = t.vars[v].offset; i < t.vars[v].offset + t.vars[v].count; i++)
            same_g &= gr[i] == g2[i];
    CHECK(same_g);
    CHECK(memcmp(dx, dx2, (size_t)B * C * H * W * sizeof(float)) == 0);
    REQUIRE_OK(dpt_seq_backward(seq, p, g2, dy, dx2));
    double twice = 0.0;
    for (size_t v = 0; v < t.nvars; v++)
        for (size_t i = t.vars[v].offset; i < t.vars[v].offset + t.vars[v].count; i++)
            twice = fmax(twice, fabs((double)g2[i] - 2.0 * (double)gr[i]));
    CHECK(twice < 1e-5);
    /* The conv weight gradient of the first layer by hand from the stack's
     * own dy of that layer is not reachable; check the bias gradient sums
     * instead: d b_last = sum of dy over rows. */
    for (size_t o = 0; o < 3; o++) {
        float s = 0.0f;
        for (size_t r = 0; r < B; r++)
            s += dy[r * 3 + o];
        CHECK_CLOSE(gr[o5 + o], s, 1e-6);
    }
    /* One row at a time: the same outputs bit for bit. */
    float *y1 = falloc(B * 3);
    memcpy(y1, y, B * 3 * sizeof(float));
    int same = 1;
    for (size_t r = 0; r < B; r++) {
        const float *yr;
        REQUIRE_OK(dpt_seq_forward(seq, p, x + r * C * H * W, 1, &yr));
        same &= memcmp(yr, y1 + r * 3, 3 * sizeof(float)) == 0;
    }
    CHECK(same);
    free(NULL);
    dpt_free_aligned(ws), dpt_free_aligned(p), dpt_free_aligned(gr), dpt_free_aligned(g2);
    dpt_free_aligned(x), dpt_free_aligned(a0), dpt_free_aligned(a1), dpt_free_aligned(a2);
    dpt_free_aligned(a3), dpt_free_aligned(a4), dpt_free_aligned(a5), dpt_free_aligned(a7);
    dpt_free_aligned(dy), dpt_free_aligned(dx), dpt_free_aligned(dx2), dpt_free_aligned(y1);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
}

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

/* train: dropout layers draw their masks (fixed by the rows' keys, so
 * the function differentiated is the same at every evaluation). */
static void gradcheck(const char *net, dpt_shape_t in, size_t b, int train)
{
    dpt_layer_spec_t l[16];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse(net, l, 16, &n));
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    REQUIRE_OK(dpt_seq_create_shaped(&seq, in, l, n, b, &t, ""));
    const int32_t keys[8] = {3, 10, 3, 11, 3, 12, 3, 13};
    REQUIRE(b <= 4);
    dpt_seq_set_dropout(seq, train, 99, keys);
    size_t ni = dpt_seq_in_dim(seq) * b, no = dpt_seq_out_dim(seq) * b;
    float *p = falloc(t.total), *g = falloc(t.total), *x = falloc(ni), *dx = falloc(ni);
    float *r = falloc(no);
    dpt_rng_t rng;
    dpt_rng_init(&rng, 5, 0, 0, 0);
    dpt_seq_init_params(seq, p, &rng);
    fill(x, ni, 17, -1.0f, 1.0f);
    fill(r, no, 19, -1.0f, 1.0f);
    const float *y;
    REQUIRE_OK(dpt_seq_forward(seq, p, x, b, &y));
    REQUIRE_OK(dpt_seq_backward(seq, p, g, r, dx));
    /* Central differences of the float forward, h = 1e-2: tanh and
     * averages are smooth, so the error is O(h^2) plus float rounding. */
    const float h = 1e-2f;
    double num2 = 0.0, err2 = 0.0;
    for (int which = 0; which < 2; which++) {
        float *v = which ? x : p, *an = which ? dx : g;
        size_t nv = which ? ni : t.total;
        for (size_t i = 0; i < nv; i++) {
            float keep = v[i];
            v[i] = keep + h;
            double jp = objective(seq, p, x, r, b);
            v[i] = keep - h;
            double jm = objective(seq, p, x, r, b);
            v[i] = keep;
            double d = (jp - jm) / (2.0 * (double)h), e = (double)an[i] - d;
            num2 += d * d;
            err2 += e * e;
        }
    }
    double rel = sqrt(err2 / num2);
    if (!(rel < 2e-3))
        fprintf(stderr, "gradcheck %s: relative error %g\n", net, rel);
    CHECK(rel < 2e-3);
    dpt_free_aligned(p), dpt_free_aligned(g), dpt_free_aligned(x), dpt_free_aligned(dx);
    dpt_free_aligned(r);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
}

static void test_gradcheck(void)
{
    gradcheck("conv(3,k=3,stride=2,pad=same) tanh avgpool(2,stride=1,pad=1) conv(2,k=2x1) tanh "
              "flatten dense(4) tanh dense(2)",
              (dpt_shape_t){2, 7, 5}, 3, 0);
    gradcheck("conv(4,k=3,pad=1,init=orthogonal,gain=0.8) tanh avgpool(3,stride=2,count_pad=0) "
              "flatten dense(3)",
              (dpt_shape_t){1, 9, 9}, 2, 0);
    /* Max pooling: piecewise linear, random inputs hold no ties within h. */
    gradcheck("conv(3,k=2) maxpool(2,stride=1) flatten dense(2)", (dpt_shape_t){2, 5, 5}, 2, 0);
    /* Dropout, training (masks drawn) and evaluation (the identity). */
    gradcheck("conv(3,k=3) tanh dropout(0.4) flatten dense(4) tanh dropout(0.3) dense(2)",
              (dpt_shape_t){1, 5, 5}, 3, 1);
    gradcheck("dense(5) tanh dropout(0.5) dense(2)", (dpt_shape_t){4, 1, 1}, 4, 0);
}

/* Hooks report every layer with parameters, last first; the default init
 * of a convolution is PyTorch's U(+-1/sqrt(C*kh*kw)). */
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

static void test_hook_init_mlp(void)
{
    dpt_layer_spec_t l[8];
    size_t n = 0;
    REQUIRE_OK(dpt_network_parse("conv(6,k=3) relu maxpool(2) flatten dense(4)", l, 8, &n));
    dpt_mlp_t *m = NULL;
    REQUIRE_OK(dpt_mlp_create_shaped(&m, (dpt_shape_t){2, 8, 8}, l, n, DPT_LOSS_SOFTMAX_XENT, 4));
    const dpt_vartable_t *t = dpt_mlp_vars(m);
    REQUIRE(t->nvars == 4);
    float *p = falloc(t->total), *g = falloc(t->total);
    dpt_rng_t rng;
    dpt_rng_init(&rng, 1, 0, 0, 0);
    dpt_mlp_init_params(m, p, &rng);
    float bound = 1.0f / sqrtf(18.0f), mx = 0.0f;
    for (size_t i = 0; i < 6 * 18 + 6; i++)
        mx = fmaxf(mx, fabsf(p[i]));
    CHECK(mx <= bound && mx > 0.8f * bound);
    dpt_model_t model = dpt_mlp_model(m);
    hooks_t h = {{0}, {0}, 0};
    REQUIRE_OK(model.set_grad_hook(model.ctx, hook_fn, &h));
    float x[4 * 128];
    int32_t lab[4] = {0, 1, 2, 3};
    fill(x, 4 * 128, 23, 0.0f, 1.0f);
    dpt_batch_t b;
    dpt_batch_init(&b, 4);
    REQUIRE_OK(dpt_batch_add(&b, DPT_MLP_X, DPT_F32, 128, 0, x));
    REQUIRE_OK(dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, lab));
    dpt_loss_out_t o;
    REQUIRE_OK(model.loss_grad(model.ctx, p, g, &b, &o));
    CHECK(h.n == 2 && h.lo[0] == 2 && h.hi[0] == 4 && h.lo[1] == 0 && h.hi[1] == 2);
    /* A replica computes the same loss and gradient. */
    void *copy = NULL;
    REQUIRE_OK(model.replicate(model.ctx, &copy));
    float *g2 = falloc(t->total);
    dpt_loss_out_t o2;
    REQUIRE_OK(model.loss_grad(copy, p, g2, &b, &o2));
    CHECK(o2.loss == o.loss && memcmp(g, g2, t->total * sizeof(float)) == 0);
    model.release(copy);
    /* A wrong input width is refused by the batch check. */
    dpt_batch_t bad;
    dpt_batch_init(&bad, 4);
    REQUIRE_OK(dpt_batch_add(&bad, DPT_MLP_X, DPT_F32, 64, 0, x));
    REQUIRE_OK(dpt_batch_add(&bad, DPT_MLP_LABEL, DPT_I32, 1, 0, lab));
    CHECK_ERR(model.loss_grad(model.ctx, p, g, &bad, &o), DPT_EINVAL, "x");
    dpt_free_aligned(p), dpt_free_aligned(g), dpt_free_aligned(g2);
    dpt_mlp_destroy(m);
}

/* Dropout: the identity in evaluation; in training a mask per row keyed
 * by the row's key alone (the same whatever the batch holds), inverted
 * (kept values scaled by 1/(1-p)), applied again by the backward. */
static void test_dropout(void)
{
    enum { B = 6, F = 1000 };
    dpt_layer_spec_t l = {.kind = DPT_LAYER_DROPOUT, .rate = 0.5f};
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    dpt_seq_t *seq = NULL;
    REQUIRE_OK(dpt_seq_create(&seq, F, &l, 1, B, &t, ""));
    CHECK(t.nvars == 0);
    float *x = falloc(B * F), *y = falloc(B * F), *dx = falloc(B * F), *dy = falloc(B * F);
    fill(x, B * F, 31, 0.5f, 1.5f);
    fill(dy, B * F, 37, -1.0f, 1.0f);
    const float *out;
    REQUIRE_OK(dpt_seq_forward(seq, NULL, x, B, &out)); /* evaluation by default */
    CHECK(memcmp(out, x, B * F * sizeof(float)) == 0);
    int32_t keys[2 * B];
    for (int r = 0; r < B; r++)
        keys[2 * r] = 4, keys[2 * r + 1] = 100 + r;
    dpt_seq_set_dropout(seq, 1, 5, keys);
    REQUIRE_OK(dpt_seq_forward(seq, NULL, x, B, &out));
    memcpy(y, out, B * F * sizeof(float));
    size_t zeros = 0;
    int scaled = 1;
    for (size_t i = 0; i < (size_t)B * F; i++) {
        zeros += y[i] == 0.0f;
        scaled &= y[i] == 0.0f || y[i] == x[i] * 2.0f;
    }
    CHECK(zeros > B * F * 4 / 10 && zeros < B * F * 6 / 10 && scaled);
    REQUIRE_OK(dpt_seq_backward(seq, NULL, NULL, dy, dx));
    int masked = 1;
    for (size_t i = 0; i < (size_t)B * F; i++)
        masked &= dx[i] == (y[i] == 0.0f ? 0.0f : dy[i] * 2.0f);
    CHECK(masked);
    /* Row by row with its own key: the same bits. */
    int same = 1;
    for (int r = 0; r < B; r++) {
        dpt_seq_set_dropout(seq, 1, 5, keys + 2 * r);
        REQUIRE_OK(dpt_seq_forward(seq, NULL, x + r * F, 1, &out));
        same &= memcmp(out, y + r * F, F * sizeof(float)) == 0;
    }
    CHECK(same);
    /* Another pass, another seed or another row: other masks. */
    keys[0] = 5;
    dpt_seq_set_dropout(seq, 1, 5, keys);
    REQUIRE_OK(dpt_seq_forward(seq, NULL, x, 1, &out));
    CHECK(memcmp(out, y, F * sizeof(float)) != 0);
    keys[0] = 4;
    dpt_seq_set_dropout(seq, 1, 6, keys);
    REQUIRE_OK(dpt_seq_forward(seq, NULL, x, 1, &out));
    CHECK(memcmp(out, y, F * sizeof(float)) != 0);
    dpt_seq_set_dropout(seq, 1, 5, keys + 2);
    REQUIRE_OK(dpt_seq_forward(seq, NULL, x, 1, &out));
    CHECK(memcmp(out, y, F * sizeof(float)) != 0);
    /* Without keys: rows 0 .. B-1 of pass 0; evaluation again. */
    dpt_seq_set_dropout(seq, 1, 5, NULL);
    REQUIRE_OK(dpt_seq_forward(seq, NULL, x, B, &out));
    CHECK(memcmp(out, y, F * sizeof(float)) != 0);
    dpt_seq_set_dropout(seq, 0, 5, keys);
    REQUIRE_OK(dpt_seq_forward(seq, NULL, x, B, &out));
    CHECK(memcmp(out, x, B * F * sizeof(float)) == 0);
    dpt_free_aligned(x), dpt_free_aligned(y), dpt_free_aligned(dx), dpt_free_aligned(dy);
    dpt_seq_destroy(seq);
    dpt_vartable_deinit(&t);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_parse_lenet),         DPT_TEST(test_parse_forms),
        DPT_TEST(test_parse_errors),        DPT_TEST(test_shapes),
        DPT_TEST(test_seq_matches_kernels), DPT_TEST(test_gradcheck),
        DPT_TEST(test_hook_init_mlp),       DPT_TEST(test_dropout),
    };
    return dpt_test_main(cases, sizeof cases / sizeof cases[0]);
}
