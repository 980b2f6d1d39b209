/*
 * Internal: fixed-length rollouts shared by the PPO and DD-PPO trainers.
 * Buffers are time-major [T, N] so the first `steps` rows of a shortened
 * (preempted) rollout are contiguous.
 */
#ifndef DPT_RL_ROLLOUT_H
#define DPT_RL_ROLLOUT_H

#include "dpt/env.h"
#include "dpt/rl.h"
#include "dpt/optim.h"
#include "rl_trainers.h"

#define DPT__EPISODE_WINDOW 100

typedef struct dpt__rollout {
    const dpt_env_class_t *cls;
    dpt_vecenv_t *env;
    size_t T, N, obs_dim, act_w;
    int discrete;
    float *obs;    /* [T*N, obs_dim] observation the action was taken on */
    void *actions; /* [T*N, act_w] int32 or float */
    float *logp, *values, *rewards, *adv, *returns; /* [T*N] */
    uint8_t *dones;                                 /* [T*N] */
    float *cur_obs;                                 /* [N, obs_dim] */
    float *final_obs;                               /* [N, obs_dim] */
    float *boot_obs, *boot_v;                       /* [N, obs_dim], [N] truncation scratch */
    float *step_rew;                                /* [N] */
    uint8_t *term, *trunc;
    float *last_values; /* [N] */
    size_t steps;       /* steps collected by the last collect() */
    dpt_rng_t act_rng;
    /* recent episodes */
    double ret_window[DPT__EPISODE_WINDOW];
    uint32_t len_window[DPT__EPISODE_WINDOW];
    size_t wcount, wnext;
    uint64_t episodes_total, episodes_this_iter;
} dpt__rollout_t;

int dpt__rollout_init(dpt__rollout_t *r, const dpt_env_class_t *cls, size_t num_envs, size_t T,
                      uint64_t seed, uint32_t rank);
void dpt__rollout_deinit(dpt__rollout_t *r);

/* Collects up to T steps with `policy` at `params`. After min_steps steps,
 * should_stop(ctx) (may be NULL) is asked before each further step. Then
 * computes last_values, GAE (advantages, returns) over the collected steps,
 * and folds finished episodes into the window. */
int dpt__rollout_collect(dpt__rollout_t *r, dpt_policy_t *policy, const float *params, double gamma,
                         double lambda, float reward_scale, size_t min_steps,
                         int (*should_stop)(void *ctx), void *ctx);

/* Copies rollout rows idx[0..n) into PPO batch buffers (each with room for
 * n rows): observations, actions, behaviour log-probs, advantages, returns
 * and value predictions. */
void dpt__rollout_gather(const dpt__rollout_t *r, const size_t *idx, size_t n, float *obs,
                         void *actions, float *logp, float *adv, float *returns, float *values);

/* Means over the episode window: all (<= 100) and the last 20. */
void dpt__rollout_episode_stats(const dpt__rollout_t *r, double *mean, double *min, double *max,
                                double *len_mean, double *mean20, size_t *count);

/* The rollout's resumable state (env states, RNG position, current
 * observations, episode window and counters) as bytes. */
size_t dpt__rollout_state_bytes(const dpt__rollout_t *r);
int dpt__rollout_save_state(const dpt__rollout_t *r, void *buf, size_t bytes);
int dpt__rollout_load_state(dpt__rollout_t *r, const void *buf, size_t bytes);
/* Every check of dpt__rollout_load_state, changing nothing. */
int dpt__rollout_check_state(const dpt__rollout_t *r, const void *buf, size_t bytes);
/* Every check of dpt_vecenv_load_state, changing nothing (src/rl/env.c). */
int dpt__vecenv_check_state(const dpt_vecenv_t *v, const void *buf, size_t bytes);

/* Shared by both trainers: config validation (rows_per_batch = rows one
 * worker/sampler collects) and the learning rate of an iteration that starts
 * after `done` env steps (linear annealing to 0 when enabled). */
int dpt__rl_check_config(const dpt_rl_config_t *c, size_t rows_per_batch);
float dpt__rl_lr(const dpt_rl_config_t *c, uint64_t done);

/* The loss terms of a learning phase, each averaged over its steps. */
typedef struct dpt__rl_learn_stats {
    double policy_loss, vf_loss, entropy, kl, clipfrac, grad_norm;
} dpt__rl_learn_stats_t;

/* The learning phase of both trainers, after a load into tower stack 0 of
 * `loaded` minibatches of `per_device` rows per device: `epochs` epochs,
 * each shuffling the order of all `loaded` minibatches with rng (order:
 * [loaded], scratch) and taking optimizer steps on the first `visit` of
 * them (visit <= loaded) at learning rate lr. Errors: those of
 * dpt_towers_optimize (the phase stops at the failed step). */
int dpt__rl_learn(dpt_towers_t *towers, int epochs, size_t loaded, size_t visit, size_t per_device,
                  float lr, dpt_rng_t *rng, size_t *order, dpt__rl_learn_stats_t *out);

#endif
