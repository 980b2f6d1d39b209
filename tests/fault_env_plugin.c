/*
 * An env plug-in that fails on purpose (tests/fault_dist_test.sh): a
 * one-step-per-episode bandit whose reward turns NaN at the Nth step taken
 * in the process (all its envs and threads together), N from the variable
 * DPT_TEST_FAIL_AT (unset or 0: never). dpt must stop the whole job on it
 * — the worker thread or the rank that stepped it, and every other one —
 * with the env's error, and never hang. With DPT_TEST_HANG_AT = N instead,
 * the Nth step never returns (a sampler stuck in its env: the learner's
 * queue timeout must end the job).
 */
#include <dpt/env.h>

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_ullong steps;

static void fault_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)state, (void)rng;
    obs[0] = 1.0f;
}

static void fault_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                       int *terminated)
{
    (void)state, (void)rng;
    const char *s = getenv("DPT_TEST_FAIL_AT");
    unsigned long long fail_at = s ? strtoull(s, NULL, 10) : 0;
    unsigned long long n = atomic_fetch_add(&steps, 1) + 1;
    const char *h = getenv("DPT_TEST_HANG_AT");
    if (h && strtoull(h, NULL, 10) == n)
        for (;;)
            pause();
    obs[0] = 1.0f;
    *reward = (fail_at && n == fail_at) ? NAN : (float)(*(const int32_t *)action);
    *terminated = 0;
}

static const dpt_env_class_t fault_class = {
    .name = "Fault-v0",
    .obs_dim = 1,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 2,
    .max_episode_steps = 10,
    .state_size = 1,
    .reset = fault_reset,
    .step = fault_step,
};

DPT_ENV_PLUGIN(fault_class);
