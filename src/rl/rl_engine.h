/*
 * Internal: what the RL engines share (src/rl/rl_engine.c). PPO and DD-PPO
 * share the iteration's batch and learning phase; PPO and APPO the towers
 * settings of their learners; every engine the learning rate of an
 * iteration. Not installed.
 */
#ifndef DPT_RL_ENGINE_H
#define DPT_RL_ENGINE_H

#include "dpt/towers.h"
#include "rl_trainers.h"
#include "rollout.h"

/* The rules PPO and DD-PPO share (rows_per_batch: the rows one
 * worker/sampler collects). DPT_EINVAL naming the setting. */
int dpt__rl_check_config(const dpt_rl_common_config_t *c, const dpt_ppo_learn_config_t *l,
                         size_t rows_per_batch);
/* The towers settings of PPO's and APPO's learners: the devices, mode and
 * reduction of t, c's clip, Adam and collectives, per_device rows per step,
 * load_rows per load. */
dpt_towers_config_t dpt__rl_towers_config(const dpt_rl_common_config_t *c,
                                          const dpt_rl_towers_config_t *t, size_t per_device,
                                          size_t load_rows);
/* Most variables a policy has (the towers' no_grad flags of a learner). */
#define DPT__RL_MAX_VARS 64
/* The learner's variables that c->frozen names, one flag each in no_grad
 * (room for DPT__RL_MAX_VARS), made tc's no_grad when any is frozen.
 * Errors: DPT_EINVAL "frozen: ..." naming the entry that matches no
 * variable (dpt_vartable_select). */
int dpt__rl_frozen(const dpt_rl_common_config_t *c, const dpt_policy_t *learner,
                   unsigned char *no_grad, dpt_towers_config_t *tc);
/* The learning rate of an iteration that starts after `done` env steps
 * (linear annealing to 0 over total_timesteps when enabled). */
float dpt__rl_lr(const dpt_rl_common_config_t *c, uint64_t done);

/* The run's step counters (dpt_rl_counters_t) into checkpoint metadata
 * num_env_steps_sampled, num_env_steps_trained, num_agent_steps_sampled
 * and num_agent_steps_trained. Errors: those of the writer. */
int dpt__rl_counters_save(dpt_safetensors_writer_t *w, const dpt_rl_counters_t *c);
/* Reads them back from st into *c; a counter the checkpoint lacks (one
 * written before dpt kept them) is `timesteps`, the checkpoint's env steps.
 * Errors (c unchanged): DPT_EFORMAT naming the file and the key of a value
 * that is not a count. */
int dpt__rl_counters_load(const dpt_safetensors_t *st, uint64_t timesteps, dpt_rl_counters_t *c);

/* res's episode figures (the means, extremes and count) from window w. */
void dpt__rl_result_episodes(dpt_rl_result_t *res, const dpt__episode_window_t *w);

/* The acting and the learning policy of a config: the actor steps
 * num_envs envs at a time, the learner takes per_device rows per call
 * (recurrent: whole sequences, at least one). Errors: those of
 * dpt_policy_create_ex. */
int dpt__rl_policies(const dpt_env_class_t *cls, const dpt_rl_common_config_t *c, size_t per_device,
                     dpt_policy_t **actor, dpt_policy_t **learner);
/* The towers' batch layout for the learner (sequence columns when it is
 * recurrent). */
int dpt__rl_layout(const dpt_policy_t *learner, dpt_batch_t *lay);
/* The iteration's batch of ro's last collect(), shuffled with rng into bb
 * and described by b: rows in a random order (L == 0), or the rollout cut
 * into sequences of L steps (*nseq of them, chunks and perm with room for
 * dpt__rollout_max_chunks) in a random order, padded. perm: scratch of the
 * rows or sequences. */
int dpt__rl_make_batch(dpt__rollout_t *ro, const dpt_policy_t *learner, size_t L, dpt_rng_t *rng,
                       size_t *perm, dpt__chunk_t *chunks, dpt__rl_batch_t *bb, dpt_batch_t *b,
                       size_t *nseq);

/* The loss terms of a learning phase, each averaged over its steps. */
typedef struct dpt__rl_learn_stats {
    double policy_loss, vf_loss, entropy, kl, clipfrac, grad_norm;
} dpt__rl_learn_stats_t;

/* The learning phase of PPO and DD-PPO, after a load into tower stack 0 of
 * `loaded` minibatches of `per_device` rows per device: `epochs` epochs,
 * each shuffling the order of all `loaded` minibatches with rng (order:
 * [loaded], scratch) and taking optimizer steps on the first `visit` of
 * them (visit <= loaded) at learning rate lr. Errors: those of
 * dpt_towers_optimize (the phase stops at the failed step). */
int dpt__rl_learn(dpt_towers_t *towers, int epochs, size_t loaded, size_t visit, size_t per_device,
                  float lr, dpt_rng_t *rng, size_t *order, dpt__rl_learn_stats_t *out);

#endif
