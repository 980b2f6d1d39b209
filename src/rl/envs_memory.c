/*
 * Memory tasks: envs a policy without memory cannot solve, to test recurrent
 * or frame-stacking policies. StatelessCartPole-v1 (CartPole without the
 * velocities) shares CartPole's code in envs_classic.c; this file holds
 * RepeatPrevious-v0.
 *
 * RepeatPrevious-v0 (parameters num_tokens = N, k): at every time t = 0, 1,
 * ... of an episode the env shows a token x_t, drawn uniformly from 0..N-1
 * by the env's own stream, as a one-hot observation of N floats (x_0 at
 * reset, x_{t+1} after step t+1). The action taken on seeing x_t (one of N)
 * should repeat x_{t-k}, the token shown k steps earlier:
 *   reward  +1 when it does, -1 when it does not, and 0 while t < k (no token
 *           was shown that long ago; k = 0 asks for the current token)
 *   episode never terminates; truncated after 100 steps (the runner's limit)
 * so the best return is 100 - k (the class's reward_threshold) and a random
 * policy's expected return is (100 - k)(2/N - 1): 0 for N = 2.
 */
#include "dpt/env.h"

#define RP_EPISODE_STEPS 100
#define RP_DEFAULT_TOKENS 2
#define RP_DEFAULT_K 2
#define RP_STR_(x) #x
#define RP_STR(x) RP_STR_(x)

typedef struct repeat_state {
    uint32_t num_tokens; /* the parameters, kept by init */
    uint32_t k;
    uint32_t t;      /* steps taken in this episode */
    uint32_t seen[]; /* the last k + 1 tokens: x_u at seen[u % (k + 1)] */
} repeat_state_t;

/* The state for a given k: the ring holds x_{t-k} .. x_t. */
#define RP_STATE_SIZE(k) (sizeof(repeat_state_t) + ((size_t)(k) + 1) * sizeof(uint32_t))

enum { RP_PARAM_NUM_TOKENS, RP_PARAM_K, RP_PARAM_COUNT };

static const dpt_env_param_t dpt__repeat_params[RP_PARAM_COUNT] = {
    [RP_PARAM_NUM_TOKENS] = {"num_tokens", DPT_ENV_PARAM_INT, RP_STR(RP_DEFAULT_TOKENS), 2, 1024,
                             "distinct tokens: the one-hot observation's size and the actions"},
    [RP_PARAM_K] = {"k", DPT_ENV_PARAM_INT, RP_STR(RP_DEFAULT_K), 0, RP_EPISODE_STEPS - 1,
                    "how many steps back the token to repeat was shown"},
};

/* The values are in range (the library parsed them); nothing to refuse. */
static int dpt__repeat_configure(dpt_env_class_t *cls, const dpt_env_value_t *values, char *why,
                                 size_t why_size)
{
    (void)why, (void)why_size;
    size_t n = (size_t)values[RP_PARAM_NUM_TOKENS].i, k = (size_t)values[RP_PARAM_K].i;
    cls->obs_dim = n;
    cls->num_actions = n;
    cls->state_size = RP_STATE_SIZE(k);
    cls->reward_threshold = (double)(RP_EPISODE_STEPS - k);
    return 0;
}

static void dpt__repeat_init(void *state, const dpt_env_value_t *values)
{
    repeat_state_t *s = state;
    s->num_tokens = (uint32_t)values[RP_PARAM_NUM_TOKENS].i;
    s->k = (uint32_t)values[RP_PARAM_K].i;
}

/* Draws x_t, remembers it and writes its one-hot observation. */
static void dpt__repeat_show(repeat_state_t *s, dpt_rng_t *rng, float *obs)
{
    uint32_t token = dpt_rng_below(rng, s->num_tokens);
    s->seen[s->t % (s->k + 1)] = token;
    for (uint32_t i = 0; i < s->num_tokens; i++)
        obs[i] = 0.0f;
    obs[token] = 1.0f;
}

static void dpt__repeat_reset(void *state, dpt_rng_t *rng, float *obs)
{
    repeat_state_t *s = state;
    s->t = 0;
    dpt__repeat_show(s, rng, obs);
}

static void dpt__repeat_step(void *state, const void *action, dpt_rng_t *rng, float *obs,
                             float *reward, int *terminated)
{
    repeat_state_t *s = state;
    uint32_t a = (uint32_t) * (const int32_t *)action; /* in range: the runner checked it */
    float r = 0.0f;
    if (s->t >= s->k)
        r = a == s->seen[(s->t - s->k) % (s->k + 1)] ? 1.0f : -1.0f;
    /* x_{t+1} takes the slot of x_{t-k}, which was just read. */
    s->t++;
    dpt__repeat_show(s, rng, obs);
    *reward = r;
    *terminated = 0;
}

const dpt_env_class_t dpt__env_repeat_previous_v0 = {
    .name = "RepeatPrevious-v0",
    .obs_dim = RP_DEFAULT_TOKENS,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = RP_DEFAULT_TOKENS,
    .max_episode_steps = RP_EPISODE_STEPS,
    .reward_threshold = RP_EPISODE_STEPS - RP_DEFAULT_K,
    .state_size = RP_STATE_SIZE(RP_DEFAULT_K),
    .params = dpt__repeat_params,
    .num_params = RP_PARAM_COUNT,
    .configure = dpt__repeat_configure,
    .init = dpt__repeat_init,
    .reset = dpt__repeat_reset,
    .step = dpt__repeat_step,
};
