/* optim: each rule against values computed by hand, slices equal whole
 * steps, clipping, schedules, bad configurations. */
#include "dpt_test.h"

#include "dpt/optim.h"

#include <string.h>

static dpt_optim_t *make(dpt_optim_kind_t kind, float wd, int nesterov, size_t n)
{
    dpt_optim_config_t c = dpt_optim_defaults(kind);
    c.weight_decay = wd;
    c.nesterov = nesterov;
    dpt_optim_t *o = NULL;
    if (dpt_optim_create(&o, &c, n) != 0)
        return NULL;
    return o;
}

static void test_sgd(void)
{
    dpt_optim_t *o = make(DPT_OPTIM_SGD, 0.1f, 0, 2);
    REQUIRE(o);
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, 0.25f};
    dpt_optim_step(o, p, g, 0.1f);
    /* p - lr (g + wd p): 1 - 0.1 (0.5 + 0.1) = 0.94; -2 - 0.1 (0.25 - 0.2) = -2.005 */
    CHECK_CLOSE(p[0], 0.94, 1e-6);
    CHECK_CLOSE(p[1], -2.005, 1e-6);
    CHECK(dpt_optim_num_slots(o) == 0 && dpt_optim_slot(o, 0) == NULL);
    CHECK(dpt_optim_slot_name(o, 0) == NULL);
    CHECK(dpt_optim_get_t(o) == 1);
    /* update_into leaves the input alone and writes the same values. */
    float p2[2] = {1.0f, -2.0f}, out[2] = {0.0f, 0.0f};
    dpt_optim_update_into(o, p2, out, g, 0, 2, 2, 0.1f);
    CHECK(p2[0] == 1.0f && p2[1] == -2.0f);
    CHECK(out[0] == p[0] && out[1] == p[1]);
    dpt_optim_destroy(o);
}

static void test_momentum(void)
{
    dpt_optim_t *o = make(DPT_OPTIM_MOMENTUM, 0.0f, 0, 1);
    REQUIRE(o);
    float p = 1.0f, g = 1.0f;
    dpt_optim_step(o, &p, &g, 0.1f); /* v = 1, p = 0.9 */
    CHECK_CLOSE(p, 0.9, 1e-6);
    dpt_optim_step(o, &p, &g, 0.1f); /* v = 0.9 + 1 = 1.9, p = 0.71 */
    CHECK_CLOSE(p, 0.71, 1e-6);
    CHECK_CLOSE(dpt_optim_slot(o, 0)[0], 1.9, 1e-6);
    dpt_optim_destroy(o);

    o = make(DPT_OPTIM_MOMENTUM, 0.0f, 1, 1);
    REQUIRE(o);
    p = 1.0f;
    dpt_optim_step(o, &p, &g, 0.1f); /* v = 1, p -= 0.1 (1 + 0.9) = 0.81 */
    CHECK_CLOSE(p, 0.81, 1e-6);
    dpt_optim_step(o, &p, &g, 0.1f); /* v = 1.9, p -= 0.1 (1 + 1.71) = 0.539 */
    CHECK_CLOSE(p, 0.539, 1e-6);
    dpt_optim_destroy(o);
}

static void test_adam(void)
{
    /* Step 1 of Adam moves every parameter by lr * sign(g) (bias-corrected
     * m/sqrt(v) = g/|g|), up to eps. Step 2 with g2: m = 0.9*0.1 g1 + 0.1 g2
     * etc.; computed here in double as a reference. */
    dpt_optim_t *o = make(DPT_OPTIM_ADAM, 0.0f, 0, 2);
    REQUIRE(o);
    float p[2] = {1.0f, 1.0f}, g[2] = {0.3f, -2.0f};
    dpt_optim_step(o, p, g, 0.01f);
    CHECK_CLOSE(p[0], 0.99, 1e-6);
    CHECK_CLOSE(p[1], 1.01, 1e-6);
    float g2[2] = {0.1f, 1.0f};
    dpt_optim_step(o, p, g2, 0.01f);
    for (int i = 0; i < 2; i++) {
        double m = 0.9 * (0.1 * (double)g[i]) + 0.1 * (double)g2[i];
        double v =
            0.999 * (0.001 * (double)g[i] * (double)g[i]) + 0.001 * (double)g2[i] * (double)g2[i];
        double mh = m / (1 - 0.81), vh = v / (1 - 0.999 * 0.999);
        double expect = (i == 0 ? 0.99 : 1.01) - 0.01 * mh / (sqrt(vh) + 1e-8);
        CHECK_CLOSE(p[i], expect, 1e-6);
    }
    dpt_optim_destroy(o);

    /* Adam's L2 decay enters the moments; AdamW's does not. With g = 0:
     * adam moves by lr * sign(wd p) = lr; adamw by lr * wd * p only. */
    o = make(DPT_OPTIM_ADAM, 0.5f, 0, 1);
    REQUIRE(o);
    float q = 2.0f, zero = 0.0f;
    dpt_optim_step(o, &q, &zero, 0.01f);
    CHECK_CLOSE(q, 1.99, 1e-6);
    dpt_optim_destroy(o);
    o = make(DPT_OPTIM_ADAMW, 0.5f, 0, 1);
    REQUIRE(o);
    q = 2.0f;
    dpt_optim_step(o, &q, &zero, 0.01f);
    CHECK_CLOSE(q, 2.0 - 0.01 * 0.5 * 2.0, 1e-6);
    CHECK(dpt_optim_num_slots(o) == 2);
    CHECK(!strcmp(dpt_optim_slot_name(o, 0), "m") && !strcmp(dpt_optim_slot_name(o, 1), "v"));
    CHECK(dpt_optim_slot_name(o, 2) == NULL && dpt_optim_slot_name(o, -1) == NULL);
    dpt_optim_destroy(o);
    o = make(DPT_OPTIM_MOMENTUM, 0.0f, 0, 1);
    REQUIRE(o);
    CHECK(!strcmp(dpt_optim_slot_name(o, 0), "momentum") && dpt_optim_slot_name(o, 1) == NULL);
    dpt_optim_destroy(o);
}

/* Updating disjoint slices with an explicit t equals whole steps. */
static void test_slices_equal_whole(void)
{
    enum { N = 103 };
    dpt_optim_t *a = make(DPT_OPTIM_ADAM, 0.01f, 0, N), *b = make(DPT_OPTIM_ADAM, 0.01f, 0, N);
    REQUIRE(a && b);
    float pa[N], pb[N], g[N];
    for (int i = 0; i < N; i++) {
        pa[i] = pb[i] = (float)i * 0.01f;
        g[i] = (float)((i * 37) % 11) - 5.0f;
    }
    for (uint64_t t = 1; t <= 3; t++) {
        dpt_optim_step(a, pa, g, 0.001f);
        dpt_optim_update(b, pb, g, 0, 40, t, 0.001f);
        dpt_optim_update(b, pb, g, 40, N, t, 0.001f);
        dpt_optim_set_t(b, t);
    }
    CHECK(memcmp(pa, pb, sizeof pa) == 0);
    CHECK(dpt_optim_get_t(b) == 3 && dpt_optim_count(b) == N);
    dpt_optim_destroy(a);
    dpt_optim_destroy(b);
}

static void test_clip(void)
{
    float g[3] = {3.0f, 4.0f, 0.0f};
    double n = dpt_clip_global_norm(g, 3, 10.0);
    CHECK(n == 5.0);
    CHECK(g[0] == 3.0f); /* under the limit: unchanged */
    n = dpt_clip_global_norm(g, 3, 1.0);
    CHECK(n == 5.0);
    CHECK_CLOSE(g[0], 0.6, 1e-6);
    CHECK_CLOSE(g[1], 0.8, 1e-6);
    CHECK_CLOSE(sqrt(3.0 * 0.0 + (double)(g[0] * g[0] + g[1] * g[1])), 1.0, 1e-6);
    CHECK(dpt_clip_factor(5.0, 0.0) == 1.0f); /* 0 disables clipping */
}

static void test_schedules(void)
{
    dpt_schedule_t c = {DPT_SCHEDULE_CONSTANT, 0.1f, 0.0f, 100};
    CHECK(dpt_schedule_lr(&c, 0) == 0.1f && dpt_schedule_lr(&c, 1000) == 0.1f);
    dpt_schedule_t l = {DPT_SCHEDULE_LINEAR, 2.5e-4f, 0.0f, 100};
    CHECK(dpt_schedule_lr(&l, 0) == 2.5e-4f);
    CHECK_CLOSE(dpt_schedule_lr(&l, 25), 1.875e-4, 1e-9);
    CHECK(dpt_schedule_lr(&l, 100) == 0.0f);
    CHECK(dpt_schedule_lr(&l, 500) == 0.0f);
    dpt_schedule_kind_t k;
    CHECK_OK(dpt_schedule_kind_parse("linear", &k));
    CHECK(k == DPT_SCHEDULE_LINEAR);
    CHECK_ERR(dpt_schedule_kind_parse("cosine", &k), DPT_EINVAL, "cosine");
    CHECK(strcmp(dpt_schedule_kind_name(DPT_SCHEDULE_CONSTANT), "constant") == 0);
}

static void test_bad_config(void)
{
    dpt_optim_t *o = NULL;
    dpt_optim_config_t c = dpt_optim_defaults(DPT_OPTIM_MOMENTUM);
    c.momentum = 1.0f;
    CHECK_ERR(dpt_optim_create(&o, &c, 4), DPT_EINVAL, "momentum");
    c = dpt_optim_defaults(DPT_OPTIM_ADAM);
    c.beta2 = 1.5f;
    CHECK_ERR(dpt_optim_create(&o, &c, 4), DPT_EINVAL, "betas");
    c = dpt_optim_defaults(DPT_OPTIM_ADAM);
    c.eps = 0.0f;
    CHECK_ERR(dpt_optim_create(&o, &c, 4), DPT_EINVAL, "eps");
    c.eps = 1e-8f;
    c.weight_decay = -1.0f;
    CHECK_ERR(dpt_optim_create(&o, &c, 4), DPT_EINVAL, "weight decay");
    c = dpt_optim_defaults(DPT_OPTIM_SGD);
    c.nesterov = 1;
    CHECK_ERR(dpt_optim_create(&o, &c, 4), DPT_EINVAL, "nesterov");
    c.kind = (dpt_optim_kind_t)17;
    CHECK_ERR(dpt_optim_create(&o, &c, 4), DPT_EINVAL, "unknown");
    CHECK(o == NULL);
    dpt_optim_kind_t k;
    CHECK_OK(dpt_optim_kind_parse("adamw", &k));
    CHECK(k == DPT_OPTIM_ADAMW);
    CHECK_ERR(dpt_optim_kind_parse("rmsprop", &k), DPT_EINVAL, "rmsprop");
    CHECK(strcmp(dpt_optim_kind_name(DPT_OPTIM_SGD), "sgd") == 0);
    dpt_optim_destroy(NULL);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_sgd),        DPT_TEST(test_momentum),
        DPT_TEST(test_adam),       DPT_TEST(test_slices_equal_whole),
        DPT_TEST(test_clip),       DPT_TEST(test_schedules),
        DPT_TEST(test_bad_config),
    };
    return DPT_TEST_RUN(cases);
}
