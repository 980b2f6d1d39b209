/*
 * Internal to the env module (src/rl/env.c, src/rl/env_params.c) and to the
 * config code that reports env_config errors. Not installed.
 */
#ifndef DPT_RL_ENV_INTERNAL_H
#define DPT_RL_ENV_INTERNAL_H

#include "dpt/env.h"

#include <stddef.h>
#include <stdint.h>

/* 1 if name is a built-in class's name. The rule for `env`: a built-in name
 * first (MinAtar's contain a slash), otherwise a plug-in path when it has a
 * slash or ".so". Sets no error. */
int dpt__env_is_builtin(const char *name);

/* The checks of dpt_env_class_check on cls->params and cls->values (the
 * declarations, their defaults, and the values when set). */
int dpt__env_params_check(const dpt_env_class_t *cls);

/* "its parameters: a, b" or "it takes no parameters" into buf [size]
 * (truncated with "..." when long). */
void dpt__env_param_list(const dpt_env_class_t *cls, char *buf, size_t size);

/* A digest of the parameter values (name=value of each, canonical text),
 * for saved runner states: 0 for a class without parameters, never 0
 * otherwise. */
uint32_t dpt__env_values_digest(const dpt_env_class_t *cls, const dpt_env_value_t *values);

/* dpt_env_class_create without checking cls first (the caller did). */
int dpt__env_configure(dpt_env_class_t **out, const dpt_env_class_t *cls, const char *const *names,
                       const char *const *texts, size_t n);

/* Parallel stepping of disjoint env ranges (PPO's devices each step their
 * own envs): dpt_vecenv_step for the envs [lo, hi) only, touching nothing
 * outside their rows and state, so threads may step disjoint ranges at
 * once. A finished episode is not recorded: its return and length go to
 * ep_ret[i], ep_len[i] (the rows of the envs whose terminated or truncated
 * flag is set), and the steps are not counted; the caller records both
 * afterwards, in the order a whole-runner step would have, with
 * dpt__vecenv_record(v, steps, ret, len, episode) (episode 0: only count
 * the steps). act: scratch for a clipped box action [action_dim]. Errors
 * as for dpt_vecenv_step (actions checked for the range), DPT_EINVAL for a
 * range out of [0, n). */
int dpt__vecenv_step_range(dpt_vecenv_t *v, size_t lo, size_t hi, const void *actions, float *obs,
                           float *rewards, uint8_t *terminated, uint8_t *truncated,
                           float *final_obs, float *act, double *ep_ret, uint32_t *ep_len);
void dpt__vecenv_record(dpt_vecenv_t *v, size_t steps, double ret, uint32_t len, int episode);

/* ---- external envs (dpt/extenv.h; extenv.c) ---------------------------------------
 * A trainer given an external env runs on a class whose reset and step are
 * markers: the runner sees it with dpt__ext_of and exchanges whole vectors
 * with the caller instead of stepping envs. */
struct dpt_ext;
/* The external env behind cls, or NULL for any other class. */
struct dpt_ext *dpt__ext_of(const dpt_env_class_t *cls);
/* The trainer's copy of x's class (dpt_env_class_destroy frees it). */
int dpt__ext_class(struct dpt_ext *x, dpt_env_class_t **out);
/* A runner of n envs takes x (one at a time; n must be x's). */
int dpt__ext_bind(struct dpt_ext *x, size_t n);
void dpt__ext_unbind(struct dpt_ext *x);
/* The runner that holds x steps between iterations too (an appo or impala
 * sampler thread): dpt_ext_restart is refused. */
void dpt__ext_runs_on(struct dpt_ext *x);
/* While on, a runner's wait for the caller ends at once with DPT_ECLOSED:
 * dpt_trainer_destroy turns it on around the job's destroy, so that a
 * sampler waiting between iterations (appo) stops; off again after, so the
 * external env serves the next trainer. */
void dpt__ext_cancel(struct dpt_ext *x, int on);
/* 1 (once) when the caller asked for new episodes (dpt_ext_restart). */
int dpt__ext_take_restart(struct dpt_ext *x);
/* Ask the caller for every env's first observation / one step of every
 * env, and wait for the answer (DPT_ECLOSED once the caller closed x). */
int dpt__ext_exchange_reset(struct dpt_ext *x, float *obs);
int dpt__ext_exchange_step(struct dpt_ext *x, const void *actions, float *obs, float *rewards,
                           uint8_t *terminated, uint8_t *truncated, float *final_obs);
/* For a runner of an external env whose episodes start anew (created,
 * reset, or loaded from a saved state): asks the caller for the first
 * observations into obs [n x obs_dim] and returns 1; 0 for any other
 * runner, or one already started; < 0 on error. Runners call it before
 * acting on their current observations. */
int dpt__vecenv_sync(dpt_vecenv_t *v, float *obs);

#endif
