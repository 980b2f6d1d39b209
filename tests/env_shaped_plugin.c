/*
 * Shaped-v0: an env plug-in whose observation is an image (obs_shape), for
 * test_env_shape and the Python tests (dpt.gym's (C, H, W) spaces).
 *   parameter   channels (int in [1, 8], default 2): configure sets obs_dim
 *               and obs_shape {channels, 3, 4}
 *   observation value (c, y, x) = 100 c + 10 y + x + 1000 t, with t the
 *               steps taken in the episode, at obs[(c*3 + y)*4 + x] (NCHW):
 *               a reader can tell a misplaced value from its number
 *   actions     4 (discrete); reward 1 for action 0, else 0
 *   episode     never terminates; truncated after 5 steps
 */
#include <dpt/env.h>

#define SHAPED_H 3
#define SHAPED_W 4
#define SHAPED_DEFAULT_C 2

typedef struct shaped_state {
    unsigned channels;
    unsigned t;
} shaped_state_t;

static const dpt_env_param_t shaped_params[] = {
    {"channels", DPT_ENV_PARAM_INT, "2", 1, 8, "image channels"},
};

static int shaped_configure(dpt_env_class_t *cls, const dpt_env_value_t *values, char *why,
                            size_t why_size)
{
    (void)why, (void)why_size;
    size_t c = (size_t)values[0].i;
    cls->obs_shape = (dpt_shape_t){c, SHAPED_H, SHAPED_W};
    cls->obs_dim = c * SHAPED_H * SHAPED_W;
    return 0;
}

static void shaped_init(void *state, const dpt_env_value_t *values)
{
    shaped_state_t *s = state;
    s->channels = (unsigned)values[0].i;
}

static void shaped_observe(const shaped_state_t *s, float *obs)
{
    for (unsigned c = 0; c < s->channels; c++)
        for (unsigned y = 0; y < SHAPED_H; y++)
            for (unsigned x = 0; x < SHAPED_W; x++)
                obs[(c * SHAPED_H + y) * SHAPED_W + x] =
                    (float)(100 * c + 10 * y + x + 1000 * s->t);
}

static void shaped_reset(void *state, dpt_rng_t *rng, float *obs)
{
    shaped_state_t *s = state;
    (void)rng;
    s->t = 0;
    shaped_observe(s, obs);
}

static void shaped_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                        int *terminated)
{
    shaped_state_t *s = state;
    (void)rng;
    s->t++;
    *reward = *(const int32_t *)action == 0 ? 1.0f : 0.0f;
    *terminated = 0;
    shaped_observe(s, obs);
}

static const dpt_env_class_t shaped_v0 = {
    .name = "Shaped-v0",
    .obs_dim = SHAPED_DEFAULT_C * SHAPED_H * SHAPED_W,
    .obs_shape = {SHAPED_DEFAULT_C, SHAPED_H, SHAPED_W},
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 4,
    .max_episode_steps = 5,
    .state_size = sizeof(shaped_state_t),
    .params = shaped_params,
    .num_params = 1,
    .configure = shaped_configure,
    .init = shaped_init,
    .reset = shaped_reset,
    .step = shaped_step,
};

DPT_ENV_PLUGIN(shaped_v0);
