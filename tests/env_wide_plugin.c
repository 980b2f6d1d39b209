/*
 * Wide-v0: an env plug-in with dims past the 32 that env ABI 1 allowed and
 * with env_config parameters (cli_test.sh trains and evaluates it).
 *   parameters  obs_dim (int, default 100) and scale (float, default 1)
 *   observation obs_dim values uniform in [-1, 1), fresh every step
 *   action      WIDE_ACTIONS floats in [-1, 1] (box)
 *   reward      -scale * mean over k of (a_k - o_k)^2, with o the observation
 *               the action was taken on (o_{k mod obs_dim} when obs_dim is
 *               smaller): copying the observation earns 0
 *   episode     never terminates; truncated after 20 steps
 */
#include <dpt/env.h>

#define WIDE_ACTIONS 40
#define WIDE_DEFAULT_OBS 100

#define WIDE_R4(x) x, x, x, x
#define WIDE_R20(x) WIDE_R4(x), WIDE_R4(x), WIDE_R4(x), WIDE_R4(x), WIDE_R4(x)
static const float wide_low[WIDE_ACTIONS] = {WIDE_R20(-1.0f), WIDE_R20(-1.0f)};
static const float wide_high[WIDE_ACTIONS] = {WIDE_R20(1.0f), WIDE_R20(1.0f)};

typedef struct wide_state {
    unsigned obs_dim;
    float scale;
    float target[WIDE_ACTIONS]; /* what the next action should be */
} wide_state_t;

enum { WIDE_PARAM_OBS_DIM, WIDE_PARAM_SCALE, WIDE_PARAM_COUNT };

static const dpt_env_param_t wide_params[WIDE_PARAM_COUNT] = {
    [WIDE_PARAM_OBS_DIM] = {"obs_dim", DPT_ENV_PARAM_INT, "100", 1, 4096, "observation size"},
    [WIDE_PARAM_SCALE] = {"scale", DPT_ENV_PARAM_FLOAT, "1", 0.001, 1000, "reward scale"},
};

static int wide_configure(dpt_env_class_t *cls, const dpt_env_value_t *values, char *why,
                          size_t why_size)
{
    (void)why, (void)why_size;
    cls->obs_dim = (size_t)values[WIDE_PARAM_OBS_DIM].i;
    return 0;
}

static void wide_init(void *state, const dpt_env_value_t *values)
{
    wide_state_t *s = state;
    s->obs_dim = (unsigned)values[WIDE_PARAM_OBS_DIM].i;
    s->scale = (float)values[WIDE_PARAM_SCALE].f;
}

static void wide_observe(wide_state_t *s, dpt_rng_t *rng, float *obs)
{
    for (unsigned i = 0; i < s->obs_dim; i++)
        obs[i] = 2.0f * dpt_rng_uniform(rng) - 1.0f;
    for (unsigned k = 0; k < WIDE_ACTIONS; k++)
        s->target[k] = obs[k % s->obs_dim];
}

static void wide_reset(void *state, dpt_rng_t *rng, float *obs)
{
    wide_observe(state, rng, obs);
}

static void wide_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                      int *terminated)
{
    wide_state_t *s = state;
    const float *a = action;
    float sum = 0.0f;
    for (unsigned k = 0; k < WIDE_ACTIONS; k++)
        sum += (a[k] - s->target[k]) * (a[k] - s->target[k]);
    *reward = -s->scale * sum / WIDE_ACTIONS;
    *terminated = 0;
    wide_observe(s, rng, obs);
}

static const dpt_env_class_t wide_v0 = {
    .name = "Wide-v0",
    .obs_dim = WIDE_DEFAULT_OBS,
    .action_kind = DPT_ACTION_BOX,
    .action_dim = WIDE_ACTIONS,
    .action_low = wide_low,
    .action_high = wide_high,
    .max_episode_steps = 20,
    .state_size = sizeof(wide_state_t),
    .params = wide_params,
    .num_params = WIDE_PARAM_COUNT,
    .configure = wide_configure,
    .init = wide_init,
    .reset = wide_reset,
    .step = wide_step,
};

DPT_ENV_PLUGIN(wide_v0);
