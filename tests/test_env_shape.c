/* Observation shapes of env classes (obs_shape in dpt/env.h): the class
 * check's rule (c*h*w == obs_dim, all zero for a flat observation),
 * dpt_env_obs_shape() for flat and image classes, configure changing the
 * shape, and the Shaped-v0 plug-in (tests/env_shaped_plugin.c, its path the
 * first argument) loaded through a config, configured and run. */
#include "dpt_test.h"

#include "dpt/env.h"
#include "dpt/train.h"

#include <stdint.h>

static void flat_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)state, (void)rng;
    for (size_t k = 0; k < 24; k++)
        obs[k] = 0.0f;
}

static void flat_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                      int *terminated)
{
    (void)action;
    flat_reset(state, rng, obs);
    *reward = 0.0f;
    *terminated = 0;
}

static dpt_env_class_t grid_class(void)
{
    dpt_env_class_t c = {0};
    c.name = "Grid-v0";
    c.obs_dim = 24;
    c.action_kind = DPT_ACTION_DISCRETE;
    c.num_actions = 2;
    c.reset = flat_reset;
    c.step = flat_step;
    return c;
}

static int shape_is(dpt_shape_t s, size_t c, size_t h, size_t w)
{
    return s.c == c && s.h == h && s.w == w;
}

static void test_check_rule(void)
{
    dpt_env_class_t c = grid_class();
    CHECK_OK(dpt_env_class_check(&c)); /* {0, 0, 0}: flat */
    c.obs_shape = (dpt_shape_t){2, 3, 4};
    CHECK_OK(dpt_env_class_check(&c));
    c.obs_shape = (dpt_shape_t){24, 1, 1};
    CHECK_OK(dpt_env_class_check(&c));
    c.obs_shape = (dpt_shape_t){2, 3, 5};
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL,
              "env class \"Grid-v0\": obs_shape [2, 3, 5] holds 30 values, its obs_dim is 24");
    c.obs_shape = (dpt_shape_t){1, 1, 1};
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "obs_shape [1, 1, 1] holds 1 values");
    c.obs_shape = (dpt_shape_t){0, 3, 8};
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL,
              "\"Grid-v0\": obs_shape [0, 3, 8] has a zero dimension");
    c.obs_shape = (dpt_shape_t){24, 1, 0};
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "has a zero dimension");
    c.obs_shape = (dpt_shape_t){SIZE_MAX, 2, 2};
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "overflows; its obs_dim is 24");
    c.obs_shape = (dpt_shape_t){(SIZE_MAX >> 2) + 1, 4, 1}; /* wraps to 0 unchecked */
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "overflows");

    /* The runner and the contract check go through the same rule. */
    c.obs_shape = (dpt_shape_t){4, 3, 4};
    dpt_vecenv_t *v = NULL;
    CHECK_ERR(dpt_vecenv_create(&v, &c, 1, 1, 0), DPT_EINVAL, "holds 48 values");
    CHECK(v == NULL);
    dpt_env_check_report_t r;
    CHECK_OK(dpt_env_check_contract(&c, 1, 10, &r));
    CHECK(r.count == 1 && r.violated[DPT_ENV_RULE_CLASS]);
    CHECK(strstr(r.violations[0].message, "obs_shape [4, 3, 4]") != NULL);
    c.obs_shape = (dpt_shape_t){2, 3, 4};
    CHECK_OK(dpt_env_check_contract(&c, 1, 100, &r));
    CHECK(r.count == 0);
}

static void test_accessor(void)
{
    dpt_env_class_t c = grid_class();
    CHECK(shape_is(dpt_env_obs_shape(&c), 24, 1, 1));
    c.obs_shape = (dpt_shape_t){2, 3, 4};
    CHECK(shape_is(dpt_env_obs_shape(&c), 2, 3, 4));
    c.obs_shape = (dpt_shape_t){24, 1, 1};
    CHECK(shape_is(dpt_env_obs_shape(&c), 24, 1, 1));
    CHECK(shape_is(dpt_env_obs_shape(NULL), 0, 0, 0));
    /* The built-in envs are flat but MinAtar's, [channels, 10, 10]. */
    size_t images = 0;
    for (size_t i = 0; i < dpt_env_count(); i++) {
        const dpt_env_class_t *b = dpt_env_get(i);
        if (strncmp(b->name, "MinAtar/", 8) == 0) {
            images++;
            CHECK(shape_is(dpt_env_obs_shape(b), b->obs_dim / 100, 10, 10));
            CHECK(b->obs_dim % 100 == 0);
        } else {
            CHECK(shape_is(dpt_env_obs_shape(b), b->obs_dim, 1, 1));
        }
    }
    CHECK(images == 10);
}

/* A class whose parameter `size` makes a size x size image of 2 channels
 * (configure changes obs_dim and obs_shape); `mode` 1 makes it change
 * obs_dim alone, a configuration the check refuses. */
static const dpt_env_param_t grid_params[] = {
    {"size", DPT_ENV_PARAM_INT, "2", 1, 16, "image side"},
    {"mode", DPT_ENV_PARAM_INT, "0", 0, 1, "1: a broken configure"},
};

static int grid_configure(dpt_env_class_t *cls, const dpt_env_value_t *values, char *why,
                          size_t why_size)
{
    (void)why, (void)why_size;
    size_t n = (size_t)values[0].i;
    cls->obs_dim = 2 * n * n;
    if (values[1].i == 0)
        cls->obs_shape = (dpt_shape_t){2, n, n};
    /* Fields configure may not change are restored afterwards. */
    cls->num_params = 0;
    return 0;
}

static void test_configure(void)
{
    dpt_env_class_t c = grid_class();
    c.obs_dim = 8;
    c.obs_shape = (dpt_shape_t){2, 2, 2};
    c.params = grid_params;
    c.num_params = 2;
    c.configure = grid_configure;
    CHECK_OK(dpt_env_class_check(&c));

    dpt_env_class_t *made = NULL;
    const char *names[] = {"size", "mode"}, *texts[] = {"5", "1"};
    REQUIRE_OK(dpt_env_class_create(&made, &c, names, texts, 1));
    CHECK(made->obs_dim == 50);
    CHECK(shape_is(made->obs_shape, 2, 5, 5));
    CHECK(shape_is(dpt_env_obs_shape(made), 2, 5, 5));
    CHECK(made->num_params == 2);
    CHECK_OK(dpt_env_class_check(made));
    dpt_env_class_destroy(made);

    /* obs_dim changed and the shape left as it was: refused, naming both. */
    made = (dpt_env_class_t *)&made;
    CHECK_ERR(dpt_env_class_create(&made, &c, names, texts, 2), DPT_EINVAL,
              "env \"Grid-v0\" as configured: env class \"Grid-v0\": obs_shape [2, 2, 2] holds 8 "
              "values, its obs_dim is 50");
    CHECK(made == NULL);

    /* A class as written must be its configuration at the defaults. */
    c.obs_shape = (dpt_shape_t){8, 1, 1};
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "its obs_shape differs");
    c.obs_shape = (dpt_shape_t){0, 0, 0};
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "its obs_shape differs");
}

static const char *shaped_plugin;

/* The plug-in's configured class through a config (env = path), as
 * `dpt train` and dpt.gym make it; NULL on error (the message printed). */
static dpt_env_class_t *shaped_make(const char *extra)
{
    char env[1100];
    snprintf(env, sizeof env, "env=%s", shaped_plugin);
    dpt_config_t *cfg = NULL;
    dpt_env_class_t *cls = NULL;
    int rc = dpt_config_create(&cfg);
    if (!rc)
        rc = dpt_config_set(cfg, "job=ppo");
    if (!rc)
        rc = dpt_config_set(cfg, env);
    if (!rc && extra)
        rc = dpt_config_set(cfg, extra);
    if (!rc)
        rc = dpt_config_finalize(cfg);
    if (!rc)
        rc = dpt_config_make_env(cfg, &cls);
    if (rc)
        fprintf(stderr, "Shaped-v0 plug-in: %s\n", dpt_last_error());
    dpt_config_destroy(cfg);
    return cls;
}

static void test_plugin(void)
{
    if (!shaped_plugin) {
        printf("     no shaped plug-in given: skipped\n");
        return;
    }
    dpt_env_class_t *cls = shaped_make(NULL);
    REQUIRE(cls != NULL);
    CHECK(strcmp(cls->name, "Shaped-v0") == 0);
    CHECK(cls->obs_dim == 24);
    CHECK(shape_is(dpt_env_obs_shape(cls), 2, 3, 4));
    dpt_env_check_report_t r;
    CHECK_OK(dpt_env_check_contract(cls, 7, 200, &r));
    CHECK(r.count == 0);

    /* Observations in NCHW order: value (c, y, x) at (c*h + y)*w + x. */
    dpt_vecenv_t *v = NULL;
    REQUIRE_OK(dpt_vecenv_create(&v, cls, 2, 1, 0));
    float obs[2 * 24], rew[2];
    uint8_t term[2], trunc[2];
    int32_t act[2] = {0, 1};
    dpt_vecenv_reset(v, obs);
    CHECK(obs[(1 * 3 + 2) * 4 + 3] == 123.0f && obs[24 + 5] == 11.0f);
    CHECK_OK(dpt_vecenv_step(v, act, obs, rew, term, trunc, NULL));
    CHECK(obs[(1 * 3 + 2) * 4 + 3] == 1123.0f && rew[0] == 1.0f && rew[1] == 0.0f);
    dpt_vecenv_destroy(v);
    dpt_env_class_destroy(cls);

    /* env_config.channels reaches configure, which reshapes the image. */
    cls = shaped_make("env_config.channels=5");
    REQUIRE(cls != NULL);
    CHECK(cls->obs_dim == 60);
    CHECK(shape_is(dpt_env_obs_shape(cls), 5, 3, 4));
    dpt_env_class_destroy(cls);
}

/* A PPO trainer on the Shaped-v0 plug-in whose policy has `network`
 * (NULL: refused with the message `want`). */
static dpt_trainer_t *shaped_ppo(const char *network, const char *want)
{
    char env[1100], net[256];
    snprintf(env, sizeof env, "env=%s", shaped_plugin);
    snprintf(net, sizeof net, "network=%s", network);
    const char *sets[] = {"job=ppo",
                          env,
                          net,
                          "num_envs_per_worker=4",
                          "rollout_fragment_length=16",
                          "train_batch_size=64",
                          "sgd_minibatch_size=32",
                          "num_sgd_iter=2",
                          "total_timesteps=256"};
    dpt_config_t *cfg = NULL;
    dpt_trainer_t *t = NULL;
    int rc = dpt_config_create(&cfg);
    for (size_t i = 0; !rc && i < sizeof sets / sizeof sets[0]; i++)
        rc = dpt_config_set(cfg, sets[i]);
    if (!rc)
        rc = dpt_config_finalize(cfg);
    if (!rc && want) {
        CHECK_ERR(dpt_trainer_create(&t, cfg, NULL), DPT_EINVAL, want);
    } else if (!rc) {
        rc = dpt_trainer_create(&t, cfg, NULL);
    }
    if (rc)
        fprintf(stderr, "shaped ppo: %s\n", dpt_last_error());
    dpt_config_destroy(cfg);
    return t;
}

/* The class's image shape reaches the policy's encoder: a convolution over
 * the [2, 3, 4] observations trains, and one that does not fit them is
 * refused naming the env, the shape and the layer. */
static void test_conv_policy(void)
{
    if (!shaped_plugin) {
        printf("     no shaped plug-in given: skipped\n");
        return;
    }
    dpt_trainer_t *t = shaped_ppo("conv(4,k=2) relu flatten dense(8) tanh", NULL);
    REQUIRE(t != NULL);
    const dpt_vartable_t *vars = dpt_trainer_vars(t);
    const dpt_var_t *w0 = dpt_vartable_find(vars, "encoder.0.weight");
    REQUIRE(w0 != NULL);
    CHECK(w0->ndim == 4 && w0->shape[0] == 4 && w0->shape[1] == 2 && w0->shape[2] == 2);
    const dpt_var_t *a0 = dpt_vartable_find(vars, "actor.0.weight");
    CHECK(a0 && a0->shape[1] == 8);
    dpt_train_result_t r;
    CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK(r.timesteps_total == 128);
    dpt_trainer_destroy(t);
    CHECK(shaped_ppo("conv(4,k=4)", "network on the observations of Shaped-v0, shape [2, 3, 4]: "
                                    "layer 1 of 1") == NULL);
}

int main(int argc, char **argv)
{
    shaped_plugin = argc > 1 ? argv[1] : NULL;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_check_rule), DPT_TEST(test_accessor),    DPT_TEST(test_configure),
        DPT_TEST(test_plugin),     DPT_TEST(test_conv_policy),
    };
    return DPT_TEST_RUN(cases);
}
