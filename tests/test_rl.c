/*
 * rl: GAE against values computed by hand, the PPO loss and its gradient by
 * finite differences (categorical and Gaussian policies), policy acting,
 * advantage normalisation and explained variance.
 */
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/env.h"
#include "dpt/rl.h"

#include <math.h>
#include <string.h>

static void noop_reset(void *s, dpt_rng_t *r, float *obs)
{
    (void)s, (void)r;
    obs[0] = obs[1] = obs[2] = 0.0f;
}

static void noop_step(void *s, const void *a, dpt_rng_t *r, float *obs, float *rew, int *term)
{
    (void)s, (void)a, (void)r;
    obs[0] = obs[1] = obs[2] = 0.0f;
    *rew = 0.0f;
    *term = 0;
}

static dpt_env_class_t discrete_cls(void)
{
    dpt_env_class_t c;
    memset(&c, 0, sizeof c);
    c.name = "Test-Discrete";
    c.obs_dim = 3;
    c.action_kind = DPT_ACTION_DISCRETE;
    c.num_actions = 3;
    c.state_size = 8;
    c.reset = noop_reset;
    c.step = noop_step;
    return c;
}

static dpt_env_class_t box_cls(void)
{
    dpt_env_class_t c = discrete_cls();
    c.name = "Test-Box";
    c.action_kind = DPT_ACTION_BOX;
    c.num_actions = 0;
    c.action_dim = 2;
    static const float lo[2] = {-2.0f, -2.0f}, hi[2] = {2.0f, 2.0f};
    c.action_low = lo;
    c.action_high = hi;
    return c;
}

/* By hand, one env, T = 3, gamma 0.5, lambda 0.5:
 *   r = (1, 2, 3), V = (0.5, 1, 1.5), done at t = 1, V_last = 4.
 *   t=2: delta = 3 + 0.5*4 - 1.5 = 3.5; A = 3.5
 *   t=1: done: delta = 2 - 1 = 1; A = 1
 *   t=0: delta = 1 + 0.5*1 - 0.5 = 1; A = 1 + 0.25*1 = 1.25 */
static void test_gae_by_hand(void)
{
    const float r[3] = {1, 2, 3}, v[3] = {0.5f, 1, 1.5f}, last[1] = {4};
    const uint8_t d[3] = {0, 1, 0};
    float a[3], ret[3];
    dpt_gae(r, v, d, last, 3, 1, 0.5, 0.5, a, ret);
    CHECK_CLOSE(a[2], 3.5, 1e-7);
    CHECK_CLOSE(a[1], 1.0, 1e-7);
    CHECK_CLOSE(a[0], 1.25, 1e-7);
    CHECK_CLOSE(ret[0], 1.75, 1e-7);
    CHECK_CLOSE(ret[2], 5.0, 1e-7);
    /* Two envs, time-major layout; env 1 never ends; lambda = 1 gives
     * discounted returns minus values: gamma 0.9, r = 1 each step, V = 0,
     * V_last = 10: R_1 = 1 + 9 = 10, R_0 = 1 + 0.9 * 10 = 10. */
    const float r2[4] = {0, 1, 0, 1}, v2[4] = {0, 0, 0, 0}, last2[2] = {0, 10};
    const uint8_t d2[4] = {0, 0, 0, 0};
    float a2[4], ret2[4];
    dpt_gae(r2, v2, d2, last2, 2, 2, 0.9, 1.0, a2, ret2);
    CHECK_CLOSE(ret2[3], 10.0, 1e-6);
    CHECK_CLOSE(ret2[1], 10.0, 1e-6);
    CHECK(ret2[0] == 0.0f && ret2[2] == 0.0f);
}

static void test_normalize_and_ev(void)
{
    float x[4] = {1, 2, 3, 4};
    dpt_normalize(x, 4);
    double m = 0, s = 0;
    for (int i = 0; i < 4; i++)
        m += (double)x[i];
    for (int i = 0; i < 4; i++)
        s += (double)x[i] * (double)x[i];
    CHECK(fabs(m) < 1e-6);
    CHECK_CLOSE(s / 4, 1.0, 1e-6);
    const float ret[4] = {1, 2, 3, 4}, good[4] = {1, 2, 3, 4}, zero[4] = {0, 0, 0, 0};
    CHECK_CLOSE(dpt_explained_variance(good, ret, 4), 1.0, 1e-12);
    CHECK_CLOSE(dpt_explained_variance(zero, ret, 4), 0.0, 1e-12);
    const float flat[4] = {2, 2, 2, 2};
    CHECK(dpt_explained_variance(zero, flat, 4) == 0.0);
}

typedef struct {
    dpt_policy_t *p;
    dpt_model_t m;
    dpt_batch_t b;
} ppo_case_t;

static double ppo_loss_at(ppo_case_t *c, const float *params, float *scratch_grad, size_t n)
{
    dpt_loss_out_t out;
    dpt_vec_zero(scratch_grad, n);
    if (c->m.loss_grad(c->m.ctx, params, scratch_grad, &c->b, &out))
        return NAN;
    return out.loss;
}

/* network: an encoder in the model language on the 3 observation values
 * (as [3, 1, 1]), or NULL for none. */
static void check_ppo_gradient(const dpt_env_class_t *cls, const char *network)
{
    enum { B = 8 };
    dpt_policy_spec_t spec = {.hidden = {5, 4}, .nhidden = 2};
    if (network)
        REQUIRE_OK(
            dpt_network_parse(network, spec.encoder, DPT_NETWORK_MAX_LAYERS, &spec.nencoder));
    ppo_case_t c;
    REQUIRE_OK(dpt_policy_create_ex(&c.p, cls, &spec, B));
    dpt_ppo_loss_params_t hp = {0.2f, 0.2f, 0.5f, 0.05f};
    c.m = dpt_policy_ppo_model(c.p, &hp);
    size_t n = c.m.vars->total;
    dpt_arena_t p, g, g2;
    REQUIRE_OK(dpt_arena_init(&p, n));
    REQUIRE_OK(dpt_arena_init(&g, n));
    REQUIRE_OK(dpt_arena_init(&g2, n));
    dpt_rng_t rng;
    dpt_rng_init(&rng, 4, 0, 0, DPT_RNG_TEST);
    dpt_policy_init_params(c.p, p.data, &rng);
    /* Larger weights than PPO's init so every term has a visible gradient. */
    for (size_t i = 0; i < n; i++)
        p.data[i] += 0.3f * (dpt_rng_uniform(&rng) - 0.5f);
    float obs[B * 3], logp[B], adv[B], ret[B], val[B], cur_logp[B], cur_v[B];
    float fact[B * 2];
    int32_t iact[B];
    dpt_rng_fill_uniform(&rng, obs, B * 3, -1, 1);
    void *acts = cls->action_kind == DPT_ACTION_DISCRETE ? (void *)iact : (void *)fact;
    REQUIRE_OK(dpt_policy_act(c.p, p.data, obs, B, &rng, acts, cur_logp, cur_v));
    /* Behaviour log-probs and old values: half near the current ones (not
     * clipped), half far (clipped), away from the kinks. */
    for (int i = 0; i < B; i++) {
        float off = (i % 2) ? 0.05f : 0.6f;
        logp[i] = cur_logp[i] + ((i % 4) < 2 ? off : -off);
        val[i] = cur_v[i] + ((i % 3) ? 0.05f : -0.7f);
        adv[i] = (i % 2 ? 1.0f : -1.0f) * (0.5f + (float)i * 0.1f);
        ret[i] = cur_v[i] + (float)(i - 4) * 0.3f;
    }
    REQUIRE_OK(dpt_ppo_batch(&c.b, cls, B, obs, acts, logp, adv, ret, val));
    dpt_loss_out_t out;
    REQUIRE_OK(c.m.loss_grad(c.m.ctx, p.data, g.data, &c.b, &out));
    CHECK(out.rows == B);
    CHECK(out.extra[DPT_PPO_STAT_CLIPFRAC] > 0.2 && out.extra[DPT_PPO_STAT_CLIPFRAC] < 0.8);
    CHECK(out.extra[DPT_PPO_STAT_KL] > 0.0);
    CHECK(out.extra[DPT_PPO_STAT_ENTROPY] > 0.0 || cls->action_kind == DPT_ACTION_BOX);
    CHECK_CLOSE(out.loss,
                out.extra[DPT_PPO_STAT_POLICY_LOSS] - 0.05 * out.extra[DPT_PPO_STAT_ENTROPY] +
                    0.5 * out.extra[DPT_PPO_STAT_VF_LOSS],
                1e-7);
    /* The model stores its gradient: a second call over NaN-filled grads
     * writes every element of every variable (not the padding between
     * them), with the bits of the call over zeros. */
    CHECK(c.m.flags & DPT_MODEL_STORES_GRADS);
    for (size_t i = 0; i < n; i++)
        g2.data[i] = NAN;
    REQUIRE_OK(c.m.loss_grad(c.m.ctx, p.data, g2.data, &c.b, &out));
    for (size_t v = 0; v < c.m.vars->nvars; v++) {
        const dpt_var_t *var = &c.m.vars->vars[v];
        CHECK(memcmp(g.data + var->offset, g2.data + var->offset, var->count * sizeof *g.data) ==
              0);
    }
    double *num = malloc(n * sizeof *num);
    REQUIRE(num);
    const float h = 1e-2f;
    for (size_t i = 0; i < n; i++) {
        float s = p.data[i];
        p.data[i] = s + h;
        double fp = ppo_loss_at(&c, p.data, g2.data, n);
        p.data[i] = s - h;
        double fm = ppo_loss_at(&c, p.data, g2.data, n);
        p.data[i] = s;
        num[i] = (fp - fm) / (2.0 * (double)h);
    }
    double d = 0, na = 0, nn = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)g.data[i] - num[i]) * ((double)g.data[i] - num[i]);
        na += (double)g.data[i] * (double)g.data[i];
        nn += num[i] * num[i];
    }
    double rel = sqrt(d) / sqrt(fmax(na, nn));
    printf("%s%s%s: ppo gradient relative error %.2e (|g| = %.3g)\n", cls->name,
           network ? ", encoder " : "", network ? network : "", rel, sqrt(na));
    CHECK(rel < 3e-3);
    CHECK(na > 1e-6);
    /* Every encoder variable gets a gradient. */
    for (size_t v = 0; network && v < c.m.vars->nvars; v++) {
        const dpt_var_t *var = &c.m.vars->vars[v];
        if (strncmp(var->name, "encoder.", 8) == 0)
            CHECK(dpt_vec_sumsq(g.data + var->offset, var->count) > 1e-12);
    }
    CHECK(!network || strcmp(c.m.vars->vars[0].name, "encoder.0.weight") == 0);
    free(num);
    dpt_arena_deinit(&p);
    dpt_arena_deinit(&g);
    dpt_arena_deinit(&g2);
    dpt_policy_destroy(c.p);
}

static void test_ppo_gradient_categorical(void)
{
    dpt_env_class_t c = discrete_cls();
    check_ppo_gradient(&c, NULL);
    check_ppo_gradient(&c, "dense(6) tanh dense(4) tanh");
    check_ppo_gradient(&c, "conv(4,k=1) tanh avgpool(1) flatten dense(3) tanh");
}

static void test_ppo_gradient_gaussian(void)
{
    dpt_env_class_t c = box_cls();
    check_ppo_gradient(&c, NULL);
    check_ppo_gradient(&c, "dense(6) tanh");
}

static void test_policy_layout_and_act(void)
{
    dpt_env_class_t cls = box_cls();
    const size_t hidden[2] = {64, 64};
    dpt_policy_t *p;
    REQUIRE_OK(dpt_policy_create(&p, &cls, hidden, 2, 16));
    const dpt_vartable_t *v = dpt_policy_vars(p);
    CHECK(dpt_vartable_find(v, "actor.0.weight") != NULL);
    CHECK(dpt_vartable_find(v, "actor.4.weight")->shape[0] == 2);
    CHECK(dpt_vartable_find(v, "critic.4.weight")->shape[0] == 1);
    CHECK(dpt_vartable_find(v, "log_std")->count == 2);
    dpt_arena_t a;
    REQUIRE_OK(dpt_arena_init(&a, v->total));
    dpt_rng_t rng;
    dpt_rng_init(&rng, 1, 0, 0, DPT_RNG_INIT);
    dpt_policy_init_params(p, a.data, &rng);
    /* Actor output layer: orthogonal rows scaled by 0.01. */
    const dpt_var_t *w = dpt_vartable_find(v, "actor.4.weight");
    double norm0 = dpt_vec_sumsq(a.data + w->offset, 64);
    CHECK_CLOSE(sqrt(norm0), 0.01, 1e-5);
    float obs[4 * 3] = {0}, act[4 * 2], lp[4], val[4];
    REQUIRE_OK(dpt_policy_act(p, a.data, obs, 4, NULL, act, lp, val));
    CHECK(act[0] == act[2]); /* greedy: the mean, the same for equal obs */
    REQUIRE_OK(dpt_policy_act(p, a.data, obs, 4, &rng, act, lp, val));
    CHECK(act[0] != act[2]);
    obs[1] = NAN;
    CHECK_ERR(dpt_policy_act(p, a.data, obs, 4, &rng, act, lp, val), DPT_ENUMERIC, "row 0");
    CHECK_ERR(dpt_policy_act(p, a.data, obs, 17, &rng, act, lp, val), DPT_EINVAL, "17 rows");
    dpt_policy_t *q = NULL;
    CHECK_ERR(dpt_policy_create(&q, &cls, hidden, 0, 16), DPT_EINVAL, "hidden");
    const size_t zero[1] = {0};
    CHECK_ERR(dpt_policy_create(&q, &cls, zero, 1, 16), DPT_EINVAL, "size 0");
    dpt_arena_deinit(&a);
    dpt_policy_destroy(p);
}

static void test_ppo_bad_batch(void)
{
    dpt_env_class_t cls = discrete_cls();
    const size_t hidden[1] = {8};
    dpt_policy_t *p;
    REQUIRE_OK(dpt_policy_create(&p, &cls, hidden, 1, 4));
    dpt_ppo_loss_params_t hp = {0.2f, 0.0f, 0.5f, 0.0f};
    dpt_model_t m = dpt_policy_ppo_model(p, &hp);
    dpt_arena_t a, g;
    REQUIRE_OK(dpt_arena_init(&a, m.vars->total));
    REQUIRE_OK(dpt_arena_init(&g, m.vars->total));
    float obs[12] = {0}, f[4] = {0};
    int32_t act[4] = {0, 1, 2, 3};
    dpt_batch_t b;
    REQUIRE_OK(dpt_ppo_batch(&b, &cls, 4, obs, act, f, f, f, f));
    dpt_loss_out_t out;
    CHECK_ERR(m.loss_grad(m.ctx, a.data, g.data, &b, &out), DPT_EINVAL, "action 3 in row 3");
    act[3] = 0;
    CHECK_OK(m.loss_grad(m.ctx, a.data, g.data, &b, &out));
    dpt_batch_init(&b, 4);
    dpt_batch_add(&b, DPT_PPO_COL_OBS, DPT_F32, 3, 0, obs);
    CHECK_ERR(m.loss_grad(m.ctx, a.data, g.data, &b, &out), DPT_EINVAL, "no column \"actions\"");
    dpt_arena_deinit(&a);
    dpt_arena_deinit(&g);
    dpt_policy_destroy(p);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_gae_by_hand),
        DPT_TEST(test_normalize_and_ev),
        DPT_TEST(test_ppo_gradient_categorical),
        DPT_TEST(test_ppo_gradient_gaussian),
        DPT_TEST(test_policy_layout_and_act),
        DPT_TEST(test_ppo_bad_batch),
    };
    return DPT_TEST_RUN(cases);
}
