/*
 * Corridor-v0 — an environment written outside the library, against the
 * public header <dpt/env.h> only. It is the whole recipe for a new env:
 * a state struct, reset() and step(), and a dpt_env_class_t describing them.
 *
 * The agent stands in a corridor of CORRIDOR_LEN cells and must walk to the
 * goal in the rightmost cell.
 *   actions      0 = step left, 1 = step right (discrete, 2 actions); with
 *                probability CORRIDOR_SLIP the step goes the other way
 *   observation  [position / (len - 1), distance to the goal / (len - 1),
 *                 1 if against the left wall else 0]
 *   reward       -0.01 per step, +1 on the step that reaches the goal
 *   terminated   when the goal is reached
 *   truncated    after 100 steps (the runner's time limit)
 *   reset        the position is uniform over the left half of the corridor
 * The best policy (always right) from the middle of the left half takes
 * ~12 steps and returns about 0.88; a random walk rarely gets there in time.
 *
 * Built into a program, the class is the variable `corridor_v0`. Built as a
 * shared library (README.md), the functions DPT_ENV_PLUGIN() defines at the
 * end hand it to `dpt train` with `env = path/to/libcorridor_env.so`, after
 * the loader checked the env ABI it was compiled for (dpt/env.h).
 */
#include <dpt/env.h>

#define CORRIDOR_LEN 16
#define CORRIDOR_SLIP 0.1f

typedef struct corridor_state {
    int pos; /* 0 .. CORRIDOR_LEN - 1 */
} corridor_state_t;

static void corridor_obs(const corridor_state_t *s, float *obs)
{
    obs[0] = (float)s->pos / (CORRIDOR_LEN - 1);
    obs[1] = (float)(CORRIDOR_LEN - 1 - s->pos) / (CORRIDOR_LEN - 1);
    obs[2] = s->pos == 0 ? 1.0f : 0.0f;
}

/* The state block is the runner's (zeroed before the first reset); the RNG
 * is this env's own stream, so runs are reproducible from the seed. */
static void corridor_reset(void *state, dpt_rng_t *rng, float *obs)
{
    corridor_state_t *s = state;
    s->pos = (int)dpt_rng_below(rng, CORRIDOR_LEN / 2);
    corridor_obs(s, obs);
}

/* The runner has already checked that the action is 0 or 1. */
static void corridor_step(void *state, const void *action, dpt_rng_t *rng, float *obs,
                          float *reward, int *terminated)
{
    corridor_state_t *s = state;
    int dir = *(const int32_t *)action == 1 ? 1 : -1;
    if (dpt_rng_uniform(rng) < CORRIDOR_SLIP)
        dir = -dir;
    s->pos += dir;
    if (s->pos < 0)
        s->pos = 0;
    int done = s->pos >= CORRIDOR_LEN - 1;
    *reward = done ? 1.0f : -0.01f;
    *terminated = done;
    corridor_obs(s, obs);
}

/* The class: everything the runner and the trainers need to know. */
const dpt_env_class_t corridor_v0 = {
    .name = "Corridor-v0",
    .obs_dim = 3,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 2,
    .max_episode_steps = 100,
    .reward_threshold = 0.8,
    .state_size = sizeof(corridor_state_t),
    .reset = corridor_reset,
    .step = corridor_step,
};

/* The plug-in entry points (dpt_env_plugin() and the env ABI number the
 * loader checks), defined by the macro of dpt/env.h. */
DPT_ENV_PLUGIN(corridor_v0);
