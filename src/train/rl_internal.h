/*
 * Internal to src/train/: what the RL trainers share (src/train/rl_common.c)
 * and the engine settings of each RL job, made by the job's own file
 * (trainer_ppo.c, trainer_ddppo.c, trainer_appo.c). Not installed; tests
 * include it for those settings.
 */
#ifndef DPT_TRAIN_RL_INTERNAL_H
#define DPT_TRAIN_RL_INTERNAL_H

#include "dpt/train.h"
#include "rl/rl_trainers.h"

#include <stddef.h>
#include <stdint.h>

/* An explicit policy_mapping holds at most one entry per two bytes of the
 * value. */
_Static_assert(DPT_CONFIG_STR_MAX / 2 <= DPT_RL_MAX_MAPPED_ENVS,
               "the longest policy_mapping must fit dpt_rl_policies_t.map");

/* dpt__find_env() with its status: DPT_EINVAL for an unknown built-in
 * name or a plug-in without a valid class, DPT_ENOENT for a plug-in that
 * cannot be loaded. */
int dpt__rl_find_env(const char *name, const dpt_env_class_t **out);

/* The env of cfg (finalized): the class its `env` names, configured with its
 * env_config entries (dpt__config_env_class). *out is caller-owned
 * (dpt_env_class_destroy). */
int dpt__rl_make_env(const dpt_config_t *cfg, dpt_env_class_t **out);
/* The env a trainer runs: the external env of `env` when it has one (the
 * config's env must then name it, "external:NAME", with no env_config),
 * else the config's (dpt__rl_make_env). env may be NULL. */
int dpt__rl_make_env_for(const dpt_config_t *cfg, const dpt_trainer_env_t *env,
                         dpt_env_class_t **out);

/* ---- engine settings ------------------------------------------------------------ */

/* The parts of the engines' settings (src/rl/rl_trainers.h) that several
 * jobs share, from a finalized config; the key table is the only source of
 * defaults. Common: every RL job's (the LSTM only where its keys apply);
 * DPT_EINVAL when the config is not finalized, or naming policy_hidden with
 * more than DPT_POLICY_MAX_HIDDEN layers. PPO learn: ppo's and ddppo's.
 * Towers: ppo's and appo's (DPT_EINVAL for a bad towers_mode). */
int dpt__rl_common_from(const dpt_config_t *c, dpt_rl_common_config_t *out);
void dpt__rl_ppo_learn_from(const dpt_config_t *c, dpt_ppo_learn_config_t *out);
int dpt__rl_towers_from(const dpt_config_t *c, dpt_rl_towers_config_t *out);
/* DPT_EINVAL: the `engine` engine's settings asked of a config of another
 * job. */
int dpt__rl_job_error(const dpt_config_t *c, const char *engine);
/* A config with only job set, finalized (caller owns it:
 * dpt_config_destroy). Errors: DPT_ENOMEM, those of dpt_config_set. */
int dpt__rl_default_config(dpt_job_t job, dpt_config_t **out);

/* Each job's engine settings from a finalized config of that job (errors:
 * those above, DPT_EINVAL for a config of another job), and the key table's
 * defaults of the job as engine settings (a config with only job set):
 * ppo's are CleanRL's CartPole settings. In the jobs' files. */
int dpt__ppo_config_from(const dpt_config_t *c, dpt_ppo_config_t *out);
int dpt__ppo_defaults(dpt_ppo_config_t *out);
int dpt__ddppo_config_from(const dpt_config_t *c, dpt_ddppo_config_t *out);
int dpt__ddppo_defaults(dpt_ddppo_config_t *out);
/* job = appo or impala (loss.impala). */
int dpt__appo_config_from(const dpt_config_t *c, dpt_appo_config_t *out);

/* The policies of cfg (keys policies, policies_to_train, policy_mapping;
 * where those keys do not apply (jobs other than appo and impala), the
 * default: one policy, "default_policy", trained). DPT_EINVAL naming the key: an empty list or
 * name, a name that is not letters, digits, _ and -, a name given twice,
 * more than DPT_RL_MAX_POLICIES, an unknown policy in policies_to_train or
 * policy_mapping, an explicit mapping whose length is not
 * num_envs_per_worker, a policy that steps no env. */
int dpt__rl_policies_from(const dpt_config_t *cfg, dpt_rl_policies_t *out);

/* The rule PPO and DD-PPO share: sgd_minibatch_size at most the rows of a
 * batch (rollout_fragment_length x num_envs_per_worker); `whose` qualifies
 * the batch in the message (" worker's" or ""). DPT_EINVAL. */
int dpt__rl_check_minibatch(const dpt_config_t *c, const char *whose);

/* The names of the learner's metrics of one policy,
 * info/learner/<policy>/{cur_lr, policy_loss, vf_loss, entropy, kl,
 * clip_fraction, grad_gnorm, vf_explained_var}: static storage, as
 * dpt_metric_t borrows them (made ones are interned, core/intern.h);
 * dpt__rl_default_learner_names are those of "default_policy". The
 * function returns 0 or DPT_ENOMEM. */
#define DPT__RL_LEARNER_METRICS 8
extern const char *const dpt__rl_default_learner_names[DPT__RL_LEARNER_METRICS];
int dpt__rl_learner_metric_names(const char *policy, const char *names[DPT__RL_LEARNER_METRICS]);
/* Adds the learner's figures ls (and cur_lr, vf_explained_var) to r under
 * names (DPT__RL_LEARNER_METRICS of them, static storage). */
void dpt__rl_add_learner_metrics(dpt_train_result_t *r, const char *const *names, double cur_lr,
                                 const dpt_appo_policy_stats_t *ls, double vf_explained_var);

/* Fills r from one iteration's engine result: the counters, progress and
 * finished against total_timesteps, the window's mean return, a progress
 * line, and the metrics under RLlib's names (time_total_s excepted: the run
 * adds it). ddppo adds info/preempted_workers and info/min_worker_rows.
 * The learner's figures go under learner_names (borrowed; NULL: the caller
 * adds them, one policy at a time). */
void dpt__rl_fill_result(const dpt_rl_result_t *rr, uint64_t total_timesteps, int ddppo,
                         const char *const *learner_names, dpt_train_result_t *r);

/* Runs `episodes` episodes of `policy` at `params` seeded from `seed`
 * (greedy, or sampled with `stochastic`: the config's eval_stochastic) into
 * out (count, mean_return, mean_length); 0 episodes leave out as it is. */
int dpt__rl_evaluate_into(dpt_policy_t *policy, const float *params, size_t episodes, uint64_t seed,
                          int stochastic, dpt_eval_result_t *out);

/* dpt_trainer_ops_t.eval_checkpoint of every RL job: the policy from cfg's
 * env, policy_hidden and LSTM keys, "params." from st (several policies: the main
 * policy's, "policy.<name>.params."), greedy episodes (0 = cfg's
 * eval_episodes). */
int dpt__rl_eval_checkpoint(const dpt_config_t *cfg, const dpt_safetensors_t *st, size_t episodes,
                            uint64_t seed, dpt_eval_result_t *out);

#endif
