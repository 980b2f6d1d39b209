/*
 * The MinAtar games (Young & Tian 2019), shared between src/rl/minatar.c
 * (the env classes, sticky actions, observations) and the game files
 * (minatar_games.c, minatar_seaquest.c).
 *
 * Each game is a state struct that starts with mn_common_t, a reset and an
 * act function. act(state, a, rng) takes a full action (0..5: no-op, left,
 * up, right, down, fire, in the package's order), advances one frame and
 * returns the reward, setting common.terminal; obs(state, out) writes the
 * whole [channels, 10, 10] observation (mn_clear, then the cells that are 1). A game file ends with
 * MN_CLASSES, which defines its two env classes.
 *
 * Random draws: every draw comes from the env's own stream, in the order the
 * package's numpy generator is called:
 *   the sticky-action draw (the wrapper's rand()): dpt_rng_u32 / 2^32;
 *   the games' rand(): mn_rand, dpt_rng_uniform_double;
 *   the games' randint(lo, hi): mn_randint, lo + dpt_rng_below(hi - lo);
 * so a test that hands the package generators answering its calls from
 * dpt's stream the same way replays the C env exactly.
 */
#ifndef DPT_MINATAR_IMPL_H
#define DPT_MINATAR_IMPL_H

#include "dpt/env.h"
#include "dpt/rng.h"
#include "core/clones.h"

#include <stdint.h>

#define MN_SIZE 10 /* the grid is MN_SIZE x MN_SIZE */

/* The package's action ids. */
enum { MN_NOOP, MN_LEFT, MN_UP, MN_RIGHT, MN_DOWN, MN_FIRE, MN_NUM_ACTIONS };

/* The part of every game's state that the wrapper owns. */
typedef struct mn_common {
    uint64_t sticky;     /* env_config.sticky_action_prob p as ceil(p * 2^32) */
    int32_t ramping;     /* env_config.difficulty_ramping */
    int32_t last_action; /* the last full action taken; kept across episodes, as the package does */
    int32_t terminal;
    int32_t ramp_index; /* difficulty level reached (0 in Breakout and Freeway) */
} mn_common_t;

static inline double mn_rand(dpt_rng_t *rng)
{
    return dpt_rng_uniform_double(rng);
}

static inline int mn_randint(dpt_rng_t *rng, int lo, int hi)
{
    return lo + (int)dpt_rng_below(rng, (uint32_t)(hi - lo));
}

/* Sets (ch, y, x) of a [c, 10, 10] observation. */
static inline void mn_set(float *obs, int ch, int y, int x)
{
    obs[(ch * MN_SIZE + y) * MN_SIZE + x] = 1.0f;
}

/* A game's obs function: compiled for AVX-512, AVX2 and the baseline
 * (DPT__CLONES), with loops of zero stores kept as loops: glibc's memset of
 * these sizes (1.6-4 KB) takes `rep stosb`, slower on AMD's cores than the
 * clone's wide stores. */
#if defined(__GNUC__) && !defined(__clang__)
#define MN_OBS_FN DPT__CLONES __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define MN_OBS_FN DPT__CLONES
#endif

/* Zeroes planes [first, first + count) of an observation (in an MN_OBS_FN). */
#define MN_CLEAR(obs, first, count)                                     \
    do {                                                                \
        float *mn_p_ = (obs) + (first)*MN_SIZE * MN_SIZE;               \
        for (int mn_i_ = 0; mn_i_ < (count)*MN_SIZE * MN_SIZE; mn_i_++) \
            mn_p_[mn_i_] = 0.0f;                                        \
    } while (0)

/* Writes channel ch of a [c, 10, 10] observation from a 10x10 grid of 0/1
 * bytes (a conversion the compiler vectorises, unlike a branch per cell). */
static inline void mn_plane(float *obs, int ch, const uint8_t grid[MN_SIZE][MN_SIZE])
{
    float *out = obs + ch * MN_SIZE * MN_SIZE;
    const uint8_t *in = &grid[0][0];
    for (int i = 0; i < MN_SIZE * MN_SIZE; i++)
        out[i] = (float)in[i];
}

/* One game's functions and channels. */
typedef struct mn_game {
    int channels;
    void (*reset)(void *state, dpt_rng_t *rng);
    float (*act)(void *state, int action, dpt_rng_t *rng);
    void (*obs)(const void *state, float *out);
} mn_game_t;

/* ---- the env classes (minatar.c) ------------------------------------------ */

#define MN_OBS(channels) (MN_SIZE * MN_SIZE * (size_t)(channels))

enum { MN_PARAM_STICKY, MN_PARAM_RAMPING, MN_PARAM_MAX_STEPS, MN_PARAM_COUNT };

extern const dpt_env_param_t dpt__mn_params[MN_PARAM_COUNT];
int dpt__mn_configure(dpt_env_class_t *cls, const dpt_env_value_t *values, char *why,
                      size_t why_size);
void dpt__mn_init(void *state, const dpt_env_value_t *values);
void dpt__mn_reset(const mn_game_t *g, void *state, dpt_rng_t *rng, float *obs);
void dpt__mn_step(const mn_game_t *g, const int8_t *actions, void *state, const void *action,
                  dpt_rng_t *rng, float *obs, float *reward, int *terminated);

/* The full action set (v0's). */
#define MN_ALL_ACTIONS                                      \
    {                                                       \
        MN_NOOP, MN_LEFT, MN_UP, MN_RIGHT, MN_DOWN, MN_FIRE \
    }

/* One env class, sym, named id: game g (an mn_game_t) with its state type
 * and action set (an int8_t array of full actions). */
#define MN_CLASS(sym, id, g, channels, state_type, actions)                             \
    static void sym##_reset(void *state, dpt_rng_t *rng, float *obs)                    \
    {                                                                                   \
        dpt__mn_reset(&g, state, rng, obs);                                             \
    }                                                                                   \
    static void sym##_step(void *state, const void *action, dpt_rng_t *rng, float *obs, \
                           float *reward, int *terminated)                              \
    {                                                                                   \
        dpt__mn_step(&g, actions, state, action, rng, obs, reward, terminated);         \
    }                                                                                   \
    const dpt_env_class_t sym = {                                                       \
        .name = id,                                                                     \
        .obs_dim = MN_OBS(channels),                                                    \
        .obs_shape = {channels, MN_SIZE, MN_SIZE},                                      \
        .action_kind = DPT_ACTION_DISCRETE,                                             \
        .num_actions = sizeof actions,                                                  \
        .state_size = sizeof(state_type),                                               \
        .params = dpt__mn_params,                                                       \
        .num_params = MN_PARAM_COUNT,                                                   \
        .configure = dpt__mn_configure,                                                 \
        .init = dpt__mn_init,                                                           \
        .reset = sym##_reset,                                                           \
        .step = sym##_step,                                                             \
    };

/* A game's two classes: "MinAtar/<title>-v0" (all actions) and -v1 (the
 * minimal set, an int8_t array). */
#define MN_CLASSES(v0, v1, title, g, channels, state_type, minimal)             \
    static const int8_t v0##_actions[] = MN_ALL_ACTIONS;                        \
    MN_CLASS(v0, "MinAtar/" title "-v0", g, channels, state_type, v0##_actions) \
    MN_CLASS(v1, "MinAtar/" title "-v1", g, channels, state_type, minimal)

#endif /* DPT_MINATAR_IMPL_H */
