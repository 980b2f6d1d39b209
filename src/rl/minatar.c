/*
 * The MinAtar env classes: the five games of minatar_games.c and
 * minatar_seaquest.c under the ids the minatar package registers with
 * Gymnasium, "MinAtar/<Game>-v0" (all six actions) and "-v1" (the game's
 * minimal action set, in the package's order).
 *
 * What the package's wrapper does, and this file too: an action is mapped to
 * the full action set; with probability sticky_action_prob (one draw every
 * step, before the game's own) the previous full action is repeated
 * instead, and the previous action survives the end of an episode (it starts
 * as no-op when the env is created). The observation is the package's
 * (10, 10, channels) booleans as [channels, 10, 10] floats 0/1. There is no
 * time limit unless env_config.max_episode_steps sets one.
 *
 * The classes themselves are defined in the game files (MN_CLASSES), where
 * each game's state size is known.
 */
#include "dpt/env.h"
#include "minatar_impl.h"

#include <math.h>

const dpt_env_param_t dpt__mn_params[MN_PARAM_COUNT] = {
    [MN_PARAM_STICKY] = {"sticky_action_prob", DPT_ENV_PARAM_FLOAT, "0.1", 0, 1,
                         "probability that the previous action is repeated instead"},
    [MN_PARAM_RAMPING] = {"difficulty_ramping", DPT_ENV_PARAM_BOOL, "true", 0, 0,
                          "the game speeds up as it goes on (Asterix, Seaquest, Space Invaders)"},
    [MN_PARAM_MAX_STEPS] = {"max_episode_steps", DPT_ENV_PARAM_INT, "0", 0, 1e9,
                            "truncate episodes after this many steps; 0 = never (the package's)"},
};

int dpt__mn_configure(dpt_env_class_t *cls, const dpt_env_value_t *values, char *why,
                      size_t why_size)
{
    (void)why, (void)why_size;
    cls->max_episode_steps = (uint32_t)values[MN_PARAM_MAX_STEPS].i;
    return 0;
}

void dpt__mn_init(void *state, const dpt_env_value_t *values)
{
    mn_common_t *c = state;
    /* u < p with u = w / 2^32 (w: 32 random bits) is w < p * 2^32, exactly
     * (scaling by 2^32 is exact), that is w < ceil(p * 2^32). */
    c->sticky = (uint64_t)ceil(values[MN_PARAM_STICKY].f * 4294967296.0);
    c->ramping = (int32_t)values[MN_PARAM_RAMPING].i;
    c->last_action = MN_NOOP;
}

void dpt__mn_reset(const mn_game_t *g, void *state, dpt_rng_t *rng, float *obs)
{
    g->reset(state, rng);
    g->obs(state, obs);
}

void dpt__mn_step(const mn_game_t *g, const int8_t *actions, void *state, const void *action,
                  dpt_rng_t *rng, float *obs, float *reward, int *terminated)
{
    mn_common_t *c = state;
    int a = actions[*(const int32_t *)action]; /* in range: the runner checked it */
    if (dpt_rng_u32(rng) < c->sticky)          /* one word: the package's rand() < p, see init */
        a = c->last_action;
    c->last_action = a;
    *reward = g->act(state, a, rng);
    *terminated = c->terminal != 0;
    g->obs(state, obs);
}
