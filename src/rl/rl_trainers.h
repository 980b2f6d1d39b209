/*
 * src/rl/rl_trainers.h — internal: the PPO, DD-PPO and APPO/IMPALA engines
 * and their settings. The trainers of the layer above (src/train: jobs ppo,
 * ddppo, appo and impala) build each engine's config from theirs
 * (src/train/rl_internal.h); this layer knows nothing of configs, jobs or
 * trainers. Not installed; tests include it for the lower-level DD-PPO
 * hooks.
 *
 * Settings: every engine's config embeds dpt_rl_common_config_t (`common`);
 * PPO and DD-PPO add dpt_ppo_learn_config_t (`learn`), PPO and APPO
 * dpt_rl_towers_config_t (`towers`), and each engine its own fields.
 *
 * PPO and DD-PPO sample fixed-length fragments from vectorized C environments, compute
 * GAE(lambda) advantages (bootstrapping from the value of the last
 * observation when an episode is truncated), and run num_sgd_iter epochs of
 * shuffled minibatches of the PPO loss (dpt/rl.h) with Adam and global-norm
 * clipping, the learning rate optionally annealed linearly to 0 over
 * total_timesteps. Advantages are standardized per minibatch (CleanRL), per
 * batch (RLlib) or not at all (normalize_advantages).
 *
 *  - PPO (dpt_ppo_*): one sampler, learning through the towers engine: the
 *    batch is shuffled once, loaded once, and every epoch visits its
 *    minibatches in a new random order (DESIGN.md 3.1).
 *  - DD-PPO (dpt_ddppo_*): no central learner. Each worker (a thread on the
 *    threads collective backend, or an MPI rank) samples
 *    rollout_fragment_length x num_envs steps with its own envs and learns
 *    as PPO does (shuffle once, load once, epochs of shuffled minibatches),
 *    on a one-device towers engine over the workers' communicator: each
 *    minibatch's gradient is all-reduced with every other worker's
 *    (weighted by the rows each worker actually collected) and every worker
 *    applies the identical update, so all workers keep identical weights.
 *    Every worker takes the same number of steps, floor(rollout_fragment_length
 *    x num_envs / sgd_minibatch_size) per epoch, with smaller minibatches
 *    when it was preempted. Stragglers:
 *    once more than sync_frac of the workers have finished collecting, the
 *    others stop early, but every worker collects at least 25% of its
 *    fragment (DD-PPO paper, section 4).
 *
 * APPO and IMPALA: see appo.c. What the engines share is in rl_engine.h,
 * their rollouts in rollout.h, the window of recent episodes in
 * episode_window.h.
 *
 * The engines never print; each iteration fills a dpt_rl_result_t that the
 * trainers turn into RLlib's metric names (src/train/rl_common.c).
 */
#ifndef DPT_RL_TRAINERS_H
#define DPT_RL_TRAINERS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "dpt/checkpoint.h"
#include "dpt/comm.h"
#include "dpt/env.h"
#include "dpt/rl.h"
#include "dpt/towers.h"

/* The policies of an APPO or IMPALA run (keys policies, policies_to_train,
 * policy_mapping; docs/RL.md). Every policy has the architecture of
 * policy_hidden. The default: one policy, "default_policy", trained. */
#define DPT_RL_MAX_POLICIES 8
#define DPT_RL_POLICY_NAME_MAX 64 /* bytes with the terminating 0 */
/* Most envs an explicit policy mapping can name (the config layer checks
 * that its longest value fits: one entry per two bytes). */
#define DPT_RL_MAX_MAPPED_ENVS 512
typedef struct dpt_rl_policies {
    int count; /* 1..DPT_RL_MAX_POLICIES */
    char name[DPT_RL_MAX_POLICIES][DPT_RL_POLICY_NAME_MAX];
    unsigned char train[DPT_RL_MAX_POLICIES]; /* 1: the learner updates it */
    size_t mapping_len;                       /* 0: round robin; else num_envs entries of map */
    /* env i of each sampler -> policy map[i] */
    unsigned char map[DPT_RL_MAX_MAPPED_ENVS];
} dpt_rl_policies_t;

/* The policy that steps env i of a sampler. */
static inline int dpt__rl_policy_of_env(const dpt_rl_policies_t *p, size_t i)
{
    return p->mapping_len ? (int)p->map[i] : (int)(i % (size_t)p->count);
}

/* The policy the trainer evaluates, exports and reports the weights of:
 * the first of policies_to_train (in the order of policies). */
static inline int dpt__rl_policies_main(const dpt_rl_policies_t *p)
{
    for (int k = 0; k < p->count; k++)
        if (p->train[k])
            return k;
    return 0;
}

/* The checkpoint names of policy `name` in a run of several policies start
 * with "policy.<name>." (then "params.", "optim.m." ... as in
 * optim/optim_ckpt.h); a run of one policy keeps the plain names. */
#define DPT_RL_POLICY_NS_FMT "policy.%s."

/* The settings every RL engine takes; each engine's config embeds them as
 * `common` (src/train fills them from a finalized config: rl_internal.h). */
typedef struct dpt_rl_common_config {
    uint64_t seed;
    size_t num_envs;                /* envs per sampler / worker */
    size_t rollout_fragment_length; /* steps per env per iteration */
    int num_sgd_iter;               /* epochs per batch (APPO: updates on each train batch) */
    double gamma;
    float lr;
    int anneal_lr; /* linear decay to 0 over total_timesteps */
    float adam_eps;
    double grad_clip;         /* 0 = off */
    float reward_scale;       /* rewards are multiplied by this for learning (1 = off);
                               * episode returns are reported unscaled */
    dpt_policy_spec_t policy; /* hidden sizes, the LSTM (use_lstm, max_seq_len:
                               * the training sequences' length) */
    uint64_t total_timesteps; /* for annealing (all workers together) */
    double comm_timeout_s;    /* collectives (replicated towers, DD-PPO threads) */
    dpt_comm_algorithm_t allreduce_algorithm; /* of those collectives */
    const char *frozen; /* the learner's variables without a gradient (key frozen:
                         * dpt_vartable_select's list); NULL or "" = none; borrowed,
                         * read while the engine is created */
} dpt_rl_common_config_t;

/* PPO's learning settings, shared by PPO and DD-PPO. */
typedef struct dpt_ppo_learn_config {
    size_t sgd_minibatch_size; /* rows per minibatch (per worker in DD-PPO) */
    double lambda;             /* GAE */
    dpt_ppo_loss_params_t loss;
    dpt_adv_norm_t normalize_advantages;
} dpt_ppo_learn_config_t;

/* A learner on a towers engine of several devices (PPO, APPO). */
typedef struct dpt_rl_towers_config {
    int num_devices; /* towers */
    dpt_towers_mode_t towers_mode;
    int reduce_sum;    /* sum the devices' gradients instead of averaging */
    float async_scale; /* async: gradient scale; 0 = 1 / num_devices */
    size_t chunk_rows; /* > 0: the count-invariant reduction (dpt/towers.h) in chunks of this
                        * many rows, and per-env action streams; 0 = the fast order */
} dpt_rl_towers_config_t;

/* job = ppo. */
typedef struct dpt_ppo_config {
    dpt_rl_common_config_t common;
    dpt_ppo_learn_config_t learn;
    dpt_rl_towers_config_t towers;
} dpt_ppo_config_t;

/* job = ddppo: every worker learns on a one-device replicated towers
 * engine over the workers' communicator. */
typedef struct dpt_ddppo_config {
    dpt_rl_common_config_t common;
    dpt_ppo_learn_config_t learn;
    double sync_frac;        /* preemption threshold; >= 1 disables it */
    int check_weights_every; /* identical-weights check period; 0 = off */
    size_t chunk_rows;       /* > 0: the invariant order (ddppo_invariant.c): envs keyed by
                              * global index, global minibatches of sgd_minibatch_size rows in
                              * chunks of this many; needs sync_frac >= 1 and a feed-forward
                              * policy; 0 = the fast order */
} dpt_ddppo_config_t;

/* job = appo and job = impala (loss.impala). */
typedef struct dpt_appo_config {
    dpt_rl_common_config_t common; /* policy: no LSTM */
    dpt_rl_towers_config_t towers;
    dpt_vtrace_loss_params_t loss; /* impala: IMPALA's policy gradient, no clip_param;
                                    * 0: APPO's clipped surrogate */
    int num_workers;               /* sampler threads */
    size_t train_batch_size;       /* env steps per learner update (whole fragments) */
    size_t learner_queue_size;     /* sample batches in the learner's queue */
    double learner_queue_timeout;  /* seconds */
    size_t minibatch_buffer_size;  /* train batches the learner cycles through (K = 1; with
                                    * K > 1 the buffer holds the K stacks, as RLlib's) */
    int init_num_passes;           /* a first batch's passes, growing by one per batch up to
                                    * num_sgd_iter; 0: RLlib's, 1 with K > 1 (the multi-GPU
                                    * learner's ramp), num_sgd_iter with K = 1 */
    size_t result_queue_size;      /* the learner's results waiting to be read (0: 1024) */
    int broadcast_interval;        /* learner updates between weight publications */
    int tower_stacks;              /* K: above 1, loader threads fill the stacks */
    int load_threads;              /* loader threads (K > 1) */
    uint64_t steps_per_iteration;  /* env steps trained per reported iteration */
    dpt_rl_policies_t policies;
} dpt_appo_config_t;

/* RLlib's step counters of a run (num_env_steps_sampled, ...): cumulative
 * over the run, resumes included (each engine saves them in its checkpoint
 * metadata under those names). An env step steps one agent here (an env of
 * several policies maps each env to one policy), so the agent counters
 * equal the env counters. PPO and DD-PPO count each iteration's batch once
 * as trained (its epochs do not multiply it): trained = sampled. APPO and
 * IMPALA count every learner pass a policy trained on: with num_sgd_iter
 * passes over each batch, trained is about num_sgd_iter x sampled. */
typedef struct dpt_rl_counters {
    uint64_t env_steps_sampled, env_steps_trained;
    uint64_t agent_steps_sampled, agent_steps_trained;
} dpt_rl_counters_t;

/* What an iteration did; for DD-PPO, aggregated over every worker. */
typedef struct dpt_rl_result {
    uint64_t iteration;
    uint64_t timesteps_total, timesteps_this_iter;
    uint64_t episodes_total, episodes_this_iter;
    double episode_reward_mean, episode_reward_min, episode_reward_max, episode_len_mean;
    double episode_reward_mean_20; /* mean of the last 20 episodes (CleanRL's criterion) */
    size_t episodes_in_window;     /* episodes behind the means (<= 100) */
    double policy_loss, vf_loss, entropy, kl, clipfrac, grad_norm, vf_explained_var, cur_lr;
    double sample_time_s, learn_time_s, iteration_time_s;
    double env_steps_per_s;     /* timesteps_this_iter / iteration_time_s */
    uint64_t preempted_workers; /* DD-PPO: workers stopped early this iteration */
    uint64_t rows_min;          /* DD-PPO: fewest rows any worker collected */
    dpt_rl_counters_t counters; /* the run's counters after this iteration */
    /* Recurrent policies: sequences made of the batch, the padding rows
     * among them and the rows the towers left out of the load (whole
     * sequences: see dpt/towers.h); for DD-PPO summed over workers. */
    uint64_t sequences, rows_padded, rows_dropped;
    char note[192]; /* non-empty when a rule changed the request (e.g. the
                     * towers raised the minibatch to one sequence) */
} dpt_rl_result_t;

/* ---- PPO on towers ------------------------------------------------------------ */

typedef struct dpt_ppo dpt_ppo_t;

/* Creates the trainer for envs of class `cls` (borrowed). The minibatch
 * order buffer is sized here from the config (rows / sgd_minibatch_size
 * minibatches per epoch), so no batch size is capped. Errors: DPT_EINVAL
 * naming the bad field (e.g. a minibatch larger than the batch), and those
 * of the towers engine. */
int dpt_ppo_create(dpt_ppo_t **ppo, const dpt_env_class_t *cls, const dpt_ppo_config_t *cfg);
void dpt_ppo_destroy(dpt_ppo_t *ppo);
/* One iteration: sample, compute advantages, learn. */
int dpt_ppo_train(dpt_ppo_t *ppo, dpt_rl_result_t *result);
dpt_policy_t *dpt_ppo_policy(dpt_ppo_t *ppo);
/* Copies the current parameters out (count = the policy's table total). */
int dpt_ppo_get_weights(dpt_ppo_t *ppo, float *out, size_t count);
/* Replaces the towers' parameters (the optimizer's state is kept). */
int dpt_ppo_set_weights(dpt_ppo_t *ppo, const float *in, size_t count);

/* Adds the trainer's complete state to a checkpoint writer: parameters
 * ("params." + variable), Adam's moments ("optim.m.", "optim.v."), a blob
 * "ppo.state" (envs, RNG positions, the iteration and timestep counters)
 * and metadata "optim_step" and the run's step counters
 * (dpt_rl_counters_t: "num_env_steps_sampled", ...). Data is borrowed
 * until the writer saves; do not train in between. */
int dpt_ppo_checkpoint(dpt_ppo_t *ppo, dpt_safetensors_writer_t *w);
/* Restores what dpt_ppo_checkpoint wrote, so training continues exactly as
 * if never interrupted (step counters the checkpoint lacks are its
 * timestep counter). Errors name the checkpoint and the mismatch; on
 * error the trainer is unchanged. */
int dpt_ppo_restore(dpt_ppo_t *ppo, const dpt_safetensors_t *st);
uint64_t dpt_ppo_iteration(const dpt_ppo_t *ppo);

/* Per-minibatch advantage normalization for a batch laid out as the towers
 * load it: `devices` contiguous slices of `rows_per_device` rows; the
 * minibatch at offset o (a multiple of `per_device`) is rows o..o+per_device
 * of every slice. Each minibatch is standardized over all its rows (every
 * device's), as dpt_normalize() would standardize them gathered. */
void dpt__rl_normalize_minibatches(float *adv, size_t devices, size_t rows_per_device,
                                   size_t per_device);
/* The same over the rows whose mask is not 0 (sequence batches: padding
 * is left out of the mean and deviation, and left as it is); mask NULL is
 * dpt__rl_normalize_minibatches, bit for bit. */
void dpt__rl_normalize_minibatches_masked(float *adv, const uint8_t *mask, size_t devices,
                                          size_t rows_per_device, size_t per_device);

/* ---- APPO and IMPALA ------------------------------------------------------------- */

typedef struct dpt_appo dpt_appo_t;

/* One policy's part of an iteration (several policies: docs/RL.md). */
typedef struct dpt_appo_policy_stats {
    int trained;      /* in policies_to_train */
    uint64_t updates; /* its optimizer steps this iteration */
    /* means over its updates this iteration (0 without any) */
    double policy_loss, vf_loss, entropy, kl, clipfrac, grad_norm;
    double reward_mean;        /* mean return of its newest episodes; NaN without any */
    size_t episodes_in_window; /* behind reward_mean (<= 100) */
} dpt_appo_policy_stats_t;

/* What the learner did in an iteration, beside dpt_rl_result_t (RLlib's
 * names in the metrics: docs/RL.md). */
typedef struct dpt_appo_stats {
    uint64_t updates;           /* optimizer steps this iteration */
    double policy_lag;          /* mean learner updates between a fragment's weights and
                                 * the update that took it */
    double learner_utilization; /* share of the learner thread's time in its steps */
    /* Since the engine was created, of the trained policies' batches: those
     * the learner took and the passes it scheduled for them (the sum of
     * their TTLs); scheduled - updates are the passes still owed. */
    uint64_t batches_taken, passes_scheduled;
    /* Weight publications to the samplers since the engine was created (one
     * every broadcast_interval updates of a trained policy; RLlib's
     * num_weight_broadcasts). */
    uint64_t broadcasts;
    /* Mean ms per update: waiting for and taking a batch (the minibatch
     * buffer's get) and the whole step (over the learner thread's last 50
     * updates), and loading the batch into the towers (this iteration).
     * With tower_stacks > 1 (loader threads), RLlib's multi-GPU learner's
     * figures instead, means over this iteration's loads: dequeue_time_ms
     * a loader's wait for a batch from the inqueue, load_time_ms a load;
     * and load_wait_time_ms the learner's wait for a loaded stack (the
     * buffer's get, over its last 50 updates; 0 with one stack). */
    double dequeue_time_ms, load_time_ms, grad_time_ms, load_wait_time_ms;
    uint64_t queue_count;                                /* queue-size samples (<= 50) */
    double queue_mean, queue_std, queue_quantiles[5];    /* 0, 10, 50, 90, 100% */
    int npolicies;                                       /* cfg.policies.count */
    dpt_appo_policy_stats_t policy[DPT_RL_MAX_POLICIES]; /* [npolicies], in their order */
} dpt_appo_stats_t;

/* Creates the engine of job appo or impala (cfg->impala) for envs of class
 * `cls` (borrowed): num_workers samplers of num_envs envs each, the learner
 * on the towers engine. No thread runs until the first dpt_appo_train.
 * Errors: DPT_EINVAL naming the setting, DPT_ENOMEM, those of the towers. */
int dpt_appo_create(dpt_appo_t **a, const dpt_env_class_t *cls, const dpt_appo_config_t *cfg);
/* The same under mpirun: comm's rank 0 is the learner (no local samplers;
 * sample batches come from the other ranks); every other rank is one
 * sampler (num_workers must be 1) whose only call is
 * dpt_appo_run_sampler. comm is borrowed until destroy. Errors as
 * dpt_appo_create's, DPT_EINVAL (num_workers != 1, a world of one). */
int dpt_appo_create_mpi(dpt_appo_t **a, const dpt_env_class_t *cls, const dpt_appo_config_t *cfg,
                        dpt_comm_t *comm);
/* A sampler rank's whole part of the run: collects fragments with the
 * newest weights rank 0 sent, sends each full train batch to rank 0 (waiting
 * while rank 0's queue is full), until rank 0 says stop (DPT_OK). An env
 * error is sent to rank 0 (which ends the run with it) and returned.
 * Silence from rank 0 for comm_timeout_s is DPT_ETIMEDOUT. */
int dpt_appo_run_sampler(dpt_appo_t *a);
/* Rank 0 under mpirun, after its last iteration: STOP to every sampler rank,
 * then each one's goodbye (their last batches are dropped), waiting at most
 * comm_timeout_s. DPT_ETIMEDOUT naming the ranks that did not answer
 * ("rank 2 did not answer the end of the run ..."), or a communication
 * error. Once: later calls, and calls on another engine, return 0
 * (dpt_appo_stop then tells the sampler ranks nothing more). */
int dpt_appo_end(dpt_appo_t *a);
/* Rank 0 under mpirun: the first sampler rank that asked to stop the run (a
 * signal that reached that rank alone; dpt_appo_train then returned the
 * iteration so far), or 0. */
int dpt_appo_stop_asked(const dpt_appo_t *a);
/* Stops every thread. A sampler still inside an env step 5 s later (a
 * hung env) is left running, detached: then this returns 1, the engine is
 * never freed, and the caller must keep the env class (and its plug-in)
 * alive too. Otherwise 0. */
int dpt_appo_stop(dpt_appo_t *a);
/* Stops (as dpt_appo_stop) and frees. NULL is a no-op. */
void dpt_appo_destroy(dpt_appo_t *a);
/* One iteration: starts the threads on the first call, then waits until the
 * learner has trained steps_per_iteration more env steps (or reached
 * total_timesteps). A sampler or learner failure (an env error, the queue
 * timeout) stops every thread and is returned with its message. */
int dpt_appo_train(dpt_appo_t *a, dpt_rl_result_t *res, dpt_appo_stats_t *stats);
/* The run's stop request (borrowed; NULL: none): once *flag is set,
 * dpt_appo_train returns the iteration so far instead of waiting for
 * steps_per_iteration more env steps (a stopped sampler rank then cannot
 * hold the end of the run back). On a sampler rank, the flag makes it ask
 * rank 0 to stop the run (dpt_appo_stop_asked). */
void dpt_appo_set_stop_flag(dpt_appo_t *a, const volatile sig_atomic_t *flag);
/* The main policy's learner model (dpt__rl_policies_main; every policy has
 * its table). */
dpt_policy_t *dpt_appo_policy(dpt_appo_t *a);
/* The learner's current weights (of the main policy,
 * dpt__rl_policies_main). */
int dpt_appo_get_weights(dpt_appo_t *a, float *out, size_t count);
/* Replaces the trained policy's parameters (the learner's towers, and the
 * copy the samplers read); the optimizer's state is kept. */
int dpt_appo_set_weights(dpt_appo_t *a, const float *in, size_t count);
/* The current weights of policy `policy` (an index into cfg.policies):
 * the learner's for a trained one, the initial (or restored) ones for one
 * not trained. DPT_EINVAL for a bad index or count. */
int dpt_appo_get_policy_weights(dpt_appo_t *a, int policy, float *out, size_t count);
uint64_t dpt_appo_iteration(const dpt_appo_t *a);
/* Adds the weights, the optimizer and the counters (blob "appo.state", and
 * the run's step counters as metadata, dpt_rl_counters_t) to w, copied
 * between two learner updates (the learner goes on meanwhile). */
int dpt_appo_checkpoint(dpt_appo_t *a, dpt_safetensors_writer_t *w);
/* Restores what dpt_appo_checkpoint wrote; only before the first
 * dpt_appo_train (step counters the checkpoint lacks are its timestep
 * counter). Samplers start from the restored weights with fresh envs. On
 * error the engine is unchanged. */
int dpt_appo_restore(dpt_appo_t *a, const dpt_safetensors_t *st);

/* ---- DD-PPO workers ---------------------------------------------------------------- */

/* Shared by the DD-PPO workers of one process to count who has finished
 * collecting (the straggler rule). Workers in other processes are counted
 * through the collective: see dpt_ddppo_worker_create. */
typedef struct dpt_ddppo_shared dpt_ddppo_shared_t;
int dpt_ddppo_shared_create(dpt_ddppo_shared_t **s, int workers_in_process);
void dpt_ddppo_shared_destroy(dpt_ddppo_shared_t *s);

typedef struct dpt_ddppo dpt_ddppo_t;

/* Creates worker `dpt_comm_rank(comm)` of `dpt_comm_size(comm)`. `comm`
 * (borrowed) carries the gradients; `shared` (borrowed, may be NULL) lets
 * workers in this process preempt each other; with MPI ranks preemption
 * applies among the threads of each process only. Every worker starts from
 * rank 0's initial weights (broadcast). Errors: DPT_EINVAL, e.g.
 * "train_batch_size is derived for DD-PPO" is the caller's to report;
 * here: minibatch larger than the fragment, etc. Collective: every worker
 * must call it. */
int dpt_ddppo_worker_create(dpt_ddppo_t **w, const dpt_env_class_t *cls,
                            const dpt_ddppo_config_t *cfg, dpt_comm_t *comm,
                            dpt_ddppo_shared_t *shared);
void dpt_ddppo_worker_destroy(dpt_ddppo_t *w);
/* One iteration on every worker (collective). Every worker gets the same
 * aggregated result. */
int dpt_ddppo_worker_train(dpt_ddppo_t *w, dpt_rl_result_t *result);
dpt_policy_t *dpt_ddppo_policy(dpt_ddppo_t *w);
/* This worker's parameters (identical on every worker). */
const float *dpt_ddppo_weights(const dpt_ddppo_t *w);
/* Replaces this worker's parameters (its towers and the copy it acts
 * with); the optimizer's state is kept. */
int dpt_ddppo_set_weights(dpt_ddppo_t *w, const float *in, size_t count);
/* Collective: DPT_ECOMM naming the first worker whose weights differ. */
int dpt_ddppo_check_weights(dpt_ddppo_t *w);

/* Checkpointing DD-PPO: the parameters and optimizer state are identical on
 * every worker; each worker adds its own envs/RNG state as bytes.
 * dpt_ddppo_checkpoint_common adds "params.", "optim.m.", "optim.v.",
 * "optim_step", the worker count "workers" and the run's step counters
 * (dpt_rl_counters_t, the same on every worker; those a checkpoint lacks
 * are read as its timestep counter) (call it for one worker);
 * state_bytes/save_state give one worker's private state (the same size on
 * every worker, with its iteration and timestep counters), stored by the
 * caller as "worker.<rank>". */
int dpt_ddppo_checkpoint_common(dpt_ddppo_t *w, dpt_safetensors_writer_t *wr);
size_t dpt_ddppo_state_bytes(const dpt_ddppo_t *w);
int dpt_ddppo_save_state(const dpt_ddppo_t *w, void *buf, size_t bytes);
/* Restores the common part from `st` and this worker's private bytes
 * (validates everything first; on error the worker is unchanged). */
int dpt_ddppo_restore(dpt_ddppo_t *w, const dpt_safetensors_t *st, const void *buf, size_t bytes);
/* The same in two steps, so that workers can agree before any changes:
 * prepare validates everything (worker count, sizes, the parameter and
 * optimizer tensors, the step counters, the private state) and keeps the
 * loaded values;
 * commit applies them (cannot fail); abort drops them. buf must stay valid
 * until commit or abort. */
int dpt__ddppo_restore_prepare(dpt_ddppo_t *w, const dpt_safetensors_t *st, const void *buf,
                               size_t bytes);
void dpt__ddppo_restore_commit(dpt_ddppo_t *w);
void dpt__ddppo_restore_abort(dpt_ddppo_t *w);
/* In the invariant order (cfg.chunk_rows > 0), a checkpoint written by
 * another number of workers with the same envs in all (workers x
 * num_envs_per_worker): this worker's private state made from the saved
 * workers' states, its envs [rank n, (rank + 1) n) taken from whichever
 * worker held them (dpt__rollout_state_pick), into *out (malloc'ed,
 * dpt_ddppo_state_bytes(w) bytes) for dpt__ddppo_restore_prepare. The
 * run's counters and streams are the same on every worker of that order;
 * the episode counts and saved worker 0's window of recent episodes go to
 * worker 0 (dpt__rollout_state_pick). *out is NULL when the checkpoint has this run's workers (use
 * "worker.<rank>" as it is). Errors: DPT_EINVAL (the fast order, other
 * envs in all), DPT_EFORMAT, DPT_ENOMEM. */
int dpt_ddppo_compose_state(dpt_ddppo_t *w, const dpt_safetensors_t *st, void **out);
uint64_t dpt_ddppo_iteration(const dpt_ddppo_t *w);

/* The per-worker batch-size rule: a worker that was not preempted must hold
 * exactly `expected` rows; a preempted one at least a quarter of it.
 * DPT_ESTATE with a message naming the worker and both sizes otherwise. */
int dpt_ddppo_check_batch(int worker, size_t rows, size_t expected, int preempted);

/* Mean return of `episodes` episodes of `policy` with `params` on fresh
 * envs of the policy's class seeded from `seed` (for evaluation printouts);
 * also the mean length. The actions are the greedy ones, or with
 * `stochastic` sampled from the policy with a stream of the same seed. */
int dpt_rl_evaluate(dpt_policy_t *policy, const float *params, uint64_t seed, size_t episodes,
                    int stochastic, double *mean_return, double *mean_length);

/* Acting with one arena for a while (a rollout): between begin and end,
 * dpt_policy_act*() and dpt_policy_value*() with that `params` and a few
 * rows run the heads on transposed copies of their weights (nn_impl.h:
 * dpt__seq_act_begin; the same bits). The arena must not change in
 * between. Begin fails only for memory (then nothing changes). */
int dpt__policy_act_begin(dpt_policy_t *p, const float *params);
void dpt__policy_act_end(dpt_policy_t *p);

/* The hidden layer sizes of a policy: copies them into out
 * (DPT_POLICY_MAX_HIDDEN entries) and returns how many there are. */
int dpt__policy_hidden(const dpt_policy_t *p, size_t *out);
/* The observation's shape a policy's encoder reads (policy_encoder.c). */
dpt_shape_t dpt__policy_obs_shape(const dpt_policy_t *p);

#endif /* DPT_RL_TRAINERS_H */
