/*
 * Env plug-ins that each break one rule of the env contract, for
 * tests/check_env_test.sh: built with -DBROKEN=N.
 *   1 determinism     rewards from libc's rand(), not the env's rng
 *   2 state-in-block  the observation counts steps in a global variable
 *   3 writes-obs      step leaves observation[2] unwritten
 *   4 finite          a NaN reward at the 50th step of an episode
 *   5 in-bounds       step writes one value past the observation
 */
#include <dpt/env.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static unsigned long long global_steps; /* BROKEN 2 keeps its state here */

static void broken_reset(void *state, dpt_rng_t *rng, float *obs)
{
    uint32_t *t = state;
    *t = 0;
    obs[0] = dpt_rng_uniform(rng);
    obs[1] = 0.0f;
    obs[2] = 0.0f;
}

static void broken_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                        int *terminated)
{
    uint32_t *t = state;
    ++*t;
    global_steps++;
    obs[0] = dpt_rng_uniform(rng);
    obs[1] = (float)*(const int32_t *)action;
#if BROKEN != 3
    obs[2] = (float)*t;
#endif
    *reward = 1.0f;
    *terminated = 0;
#if BROKEN == 1
    *reward = (float)(rand() % 2);
#elif BROKEN == 2
    obs[2] = (float)(global_steps % 1000);
#elif BROKEN == 4
    if (*t == 50)
        *reward = NAN;
#elif BROKEN == 5
    obs[3] = 1.0f;
#endif
}

static const dpt_env_class_t broken_class = {
    .name = "Broken-v0",
    .obs_dim = 3,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 2,
    .max_episode_steps = BROKEN == 2 ? 0 : 200,
    .state_size = sizeof(uint32_t),
    .reset = broken_reset,
    .step = broken_step,
};

DPT_ENV_PLUGIN(broken_class);
