/*
 * Internal to src/train/: what the PPO and DD-PPO trainers share
 * (src/train/rl_common.c). Not installed.
 */
#ifndef DPT_TRAIN_RL_INTERNAL_H
#define DPT_TRAIN_RL_INTERNAL_H

#include "dpt/train.h"
#include "rl/rl_trainers.h"

#include <stddef.h>
#include <stdint.h>

/* dpt__find_env() with its status: DPT_EINVAL for an unknown built-in
 * name or a plug-in without a valid class, DPT_ENOENT for a plug-in that
 * cannot be loaded. */
int dpt__rl_find_env(const char *name, const dpt_env_class_t **out);

/* The env of cfg (finalized): the class its `env` names, configured with its
 * env_config entries (dpt__config_env_class). *out is caller-owned
 * (dpt_env_class_destroy). */
int dpt__rl_make_env(const dpt_config_t *cfg, dpt_env_class_t **out);

/* Fills r from one iteration's engine result: the counters, progress and
 * finished against total_timesteps, the window's mean return, a progress
 * line, and the metrics under RLlib's names (time_total_s excepted: the run
 * adds it). ddppo adds info/preempted_workers and info/min_worker_rows. */
void dpt__rl_fill_result(const dpt_rl_result_t *rr, uint64_t total_timesteps, int ddppo,
                         dpt_train_result_t *r);

/* Runs `episodes` episodes of `policy` at `params` seeded from `seed`
 * (greedy, or sampled with `stochastic`: the config's eval_stochastic) into
 * out (count, mean_return, mean_length); 0 episodes leave out as it is. */
int dpt__rl_evaluate_into(dpt_policy_t *policy, const float *params, size_t episodes, uint64_t seed,
                          int stochastic, dpt_eval_result_t *out);

/* dpt_trainer_ops_t.eval_checkpoint of both RL jobs: the policy from cfg's
 * env and policy_hidden, "params." from st, greedy episodes (0 = cfg's
 * eval_episodes). */
int dpt__rl_eval_checkpoint(const dpt_config_t *cfg, const dpt_safetensors_t *st, size_t episodes,
                            uint64_t seed, dpt_eval_result_t *out);

#endif
