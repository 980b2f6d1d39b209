/*
 * dpt/train.h — training: jobs, their configuration, the trainer interface
 * every job implements, and runs (run directories, metrics, checkpoints,
 * resume, launch over threads and MPI).
 *
 * Three layers, each usable on its own:
 *
 *  1. Configuration (dpt_config_*). One key table (DPT_CONFIG_KEYS below)
 *     defines every key once: name, type, range or choices, the jobs it
 *     applies to, its default, and help text; DPT_CONFIG_JOB_DEFAULTS
 *     overrides the default for one job (PPO uses CleanRL's settings,
 *     DD-PPO the seed's DD-PPO keys, supervised its own). A config file is
 *     `key = value` lines with `#` comments; dpt_config_set() applies
 *     `key=value` overrides. Besides the table's keys, `env_config.NAME =
 *     value` sets parameter NAME of the RL jobs' env (see
 *     DPT_CONFIG_ENV_PREFIX). dpt_config_finalize() fills every key the job
 *     uses with that job's default when it was not given, and refuses a key
 *     that does not apply to the job (naming both). The command's parser,
 *     `dpt train --help`, `dpt init` and validation all read this table.
 *
 *  2. Trainers (dpt_trainer_*). A trainer owns one job's model, optimizer
 *     state, RNG positions, envs or dataset cursor, and its own threads
 *     and communicators. iterate() does one unit of work (an epoch for the
 *     jobs that train on data, an iteration for the RL jobs) and fills one
 *     result; checkpoint()/restore() carry everything needed to continue
 *     bitwise as if never interrupted; weights() and evaluate() give the
 *     current model. A new engine is a new dpt_trainer_ops_t and its
 *     job's descriptor in one file (src/train/), listed in DPT_JOB_LIST
 *     and the job table: the run's loop (below) is the only loop, and it
 *     names no job (docs/ARCHITECTURE.md).
 *
 *  3. Runs (dpt_train_run). The loop every job shares: a run directory
 *     (never reused by a fresh run), config.conf written once atomically,
 *     result.jsonl, progress.csv and TensorBoard event files (tensorboard_dir;
 *     docs/TRAINING.md), checkpoints with rotation, resume from
 *     the newest valid checkpoint, stop conditions, stop requests (signals),
 *     and launch under mpirun (rank 0 writes files). It never prints: events
 *     go to a callback.
 *
 * Typical embedding (errors elided; examples/embed_train.c is complete):
 *
 *     dpt_config_t *c;
 *     dpt_config_create(&c);
 *     dpt_config_set(c, "job=ppo");
 *     dpt_config_set(c, "env=CartPole-v1");
 *     dpt_config_finalize(c);
 *     dpt_trainer_t *t;
 *     dpt_trainer_create(&t, c, NULL);
 *     dpt_train_result_t r;
 *     do dpt_trainer_iterate(t, &r); while (!r.finished);
 *     dpt_trainer_destroy(t);
 *     dpt_config_destroy(c);
 *
 * Errors: every function returns 0 or a negative DPT_E... code with a
 * message in dpt_last_error() naming the input and the problem. DPT_EINVAL
 * is a bad config or argument (the command exits 2), anything else a
 * runtime failure (exit 1).
 */
#ifndef DPT_TRAIN_H
#define DPT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include <signal.h>

#include "dpt/arena.h"
#include "dpt/checkpoint.h"
#include "dpt/comm.h"
#include "dpt/env.h"
#include "dpt/optim.h"
#include "dpt/rl.h"
#include "dpt/towers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- jobs ------------------------------------------------------------------ */

/* X(symbol, name, summary) */
#define DPT_JOB_LIST(X)                                                                          \
    X(DPT_JOB_SUPERVISED, "supervised", "supervised classification of a dataset on towers")      \
    X(DPT_JOB_PPO, "ppo", "PPO on the towers engine (one sampler)")                              \
    X(DPT_JOB_DDPPO, "ddppo", "decentralized DD-PPO over worker threads and MPI ranks")          \
    X(DPT_JOB_APPO, "appo", "asynchronous PPO: sampler threads feed a learner thread (V-trace)") \
    X(DPT_JOB_IMPALA, "impala", "IMPALA: sampler threads feed a learner thread (V-trace)")       \
    X(DPT_JOB_SYNC_REPLICAS, "sync_replicas",                                                    \
      "supervised training through a sync-replicas parameter service with backup workers")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_job {
#define DPT__JOB_ENUM(sym, name, summary) sym,
    DPT_JOB_LIST(DPT__JOB_ENUM)
#undef DPT__JOB_ENUM
    DPT_JOB_COUNT
} dpt_job_t;
/* clang-format on */

/* "supervised", "ppo", "ddppo"; "unknown" otherwise. */
const char *dpt_job_name(dpt_job_t job);
/* One-line description of a job; "" for an unknown value. */
const char *dpt_job_summary(dpt_job_t job);
/* Parses a job name. DPT_EINVAL listing the jobs otherwise. */
int dpt_job_parse(const char *name, dpt_job_t *job);

/* ---- configuration ------------------------------------------------------------ */

/* Which jobs a key applies to (bit i = job i). */
#define DPT_JOBS_SUP (1u << DPT_JOB_SUPERVISED)
#define DPT_JOBS_PPO (1u << DPT_JOB_PPO)
#define DPT_JOBS_DDPPO (1u << DPT_JOB_DDPPO)
#define DPT_JOBS_APPO (1u << DPT_JOB_APPO)
#define DPT_JOBS_IMPALA (1u << DPT_JOB_IMPALA)
#define DPT_JOBS_SR (1u << DPT_JOB_SYNC_REPLICAS)
#define DPT_JOBS_ASYNC (DPT_JOBS_APPO | DPT_JOBS_IMPALA)
#define DPT_JOBS_ONPOLICY (DPT_JOBS_PPO | DPT_JOBS_DDPPO)
#define DPT_JOBS_RL (DPT_JOBS_ONPOLICY | DPT_JOBS_ASYNC)
#define DPT_JOBS_TOWERS (DPT_JOBS_SUP | DPT_JOBS_PPO | DPT_JOBS_ASYNC)
/* 1 when job is a reinforcement-learning job (its progress is in env
 * steps and episode returns), 0 for the jobs that train on a dataset. */
#define DPT_JOB_IS_RL(job) ((DPT_JOBS_RL >> (unsigned)(job)) & 1u)
/* The jobs that train a model on a dataset (supervised, sync_replicas). */
#define DPT_JOBS_DATA (DPT_JOBS_SUP | DPT_JOBS_SR)
#define DPT_JOBS_ALL (DPT_JOBS_DATA | DPT_JOBS_RL)

/* The choices of an enum key, made from the list that defines the enum
 * ("a|b|c"), so a name is written once. */
#define DPT__CHOICE2(sym, name) "|" name
#define DPT__CHOICE3(sym, name, x) "|" name
#define DPT_CHOICES_JOB (DPT_JOB_LIST(DPT__CHOICE3) + 1)
#define DPT_CHOICES_OPTIM (DPT_OPTIM_LIST(DPT__CHOICE3) + 1)
#define DPT_CHOICES_SCHEDULE (DPT_SCHEDULE_LIST(DPT__CHOICE2) + 1)
#define DPT_CHOICES_LOSS (DPT_LOSS_LIST(DPT__CHOICE2) + 1)
#define DPT_CHOICES_TOWERS_MODE (DPT_TOWERS_MODE_LIST(DPT__CHOICE2) + 1)
#define DPT__CHOICE_VAL(sym, val, name) "|" name
#define DPT_CHOICES_REDUCE_OP (DPT_REDUCE_OP_LIST(DPT__CHOICE_VAL) + 1)
#define DPT_CHOICES_ALLREDUCE (DPT_COMM_ALGORITHM_LIST(DPT__CHOICE_VAL) + 1)

/* The values of the key reduction_order (docs/TRAINING.md, "Reduction
 * order"): fast sums each device's rows and then the devices' sums (the
 * bits follow the device and rank counts); invariant adds fixed chunks of
 * reduction_chunk rows by one tree (dpt/towers.h, "Count-invariant
 * reduction"), the same bits for any count. */
#define DPT_REDUCTION_ORDER_LIST(X) \
    X(DPT_REDUCTION_FAST, "fast")   \
    X(DPT_REDUCTION_INVARIANT, "invariant")

/* clang-format off */
typedef enum dpt_reduction_order {
#define DPT__RORDER_ENUM(sym, name) sym,
    DPT_REDUCTION_ORDER_LIST(DPT__RORDER_ENUM)
#undef DPT__RORDER_ENUM
} dpt_reduction_order_t;
/* clang-format on */
#define DPT_CHOICES_REDUCTION_ORDER (DPT_REDUCTION_ORDER_LIST(DPT__CHOICE2) + 1)

/* The datasets of the jobs that train on data (key dataset):
 * X(symbol, name, the jobs that train on it). */
#define DPT_DATASET_LIST(X)                                      \
    X(DPT_DATASET_FASHION_MNIST, "fashion_mnist", DPT_JOBS_DATA) \
    X(DPT_DATASET_CSV, "csv", DPT_JOBS_DATA)                     \
    X(DPT_DATASET_SPIRALS, "spirals", DPT_JOBS_DATA)             \
    X(DPT_DATASET_BAGS, "bags", DPT_JOBS_SR)

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_dataset_id {
#define DPT__DATASET_ENUM(sym, name, jobs) sym,
    DPT_DATASET_LIST(DPT__DATASET_ENUM)
#undef DPT__DATASET_ENUM
    DPT_DATASET_COUNT
} dpt_dataset_id_t;
/* clang-format on */
#define DPT_CHOICES_DATASET (DPT_DATASET_LIST(DPT__CHOICE3) + 1)

/* The choices of normalize_advantages: dpt_adv_norm_t (dpt/rl.h). */
#define DPT_CHOICES_ADV_NORM (DPT_ADV_NORM_LIST(DPT__CHOICE2) + 1)

/* Keys that may change when a run is resumed: stop conditions, checkpoint
 * and evaluation settings, timeouts, where the data lives, the frozen
 * variables. Every other key must equal the run's saved value
 * (docs/TRAINING.md). */
#define DPT_CFG_RESUMABLE 1u
/* Keys that do not change the numbers a run computes (left out of the
 * cross-rank and resume comparisons). */
#define DPT_CFG_BOOKKEEPING 2u

/* X(name, type, jobs, flags, default, min, max, choices, help)
 * types: INT (int64), FLOAT (double), STR, BOOL (true/false, yes/no, 1/0),
 * ENUM (one of `choices`, separated by '|'). min/max bound INT and FLOAT. */
#define DPT_CONFIG_KEYS(X)                                                                         \
    X(job, ENUM, DPT_JOBS_ALL, 0, "supervised", 0, 0, DPT_CHOICES_JOB,                             \
      "what to train: supervised classification, PPO, decentralized DD-PPO, or asynchronous APPO " \
      "or IMPALA")                                                                                 \
    X(seed, INT, DPT_JOBS_ALL, 0, "1", 0, 4294967295.0, "", "random seed of every stream")         \
    X(output_dir, STR, DPT_JOBS_ALL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "", 0, 0, "",        \
      "run directory (empty: a new runs/JOB-ENV_OR_DATASET-TIMESTAMP); a fresh run refuses a "     \
      "non-empty one")                                                                             \
    X(tensorboard_dir, STR, DPT_JOBS_ALL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "", 0, 0, "",   \
      "where TensorBoard event files of the metrics go (empty: the run directory; a relative "     \
      "path: from the working directory; off: none)")                                              \
    X(checkpoint_every, INT, DPT_JOBS_ALL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "1", 0, 1e9,   \
      "", "write a checkpoint every N iterations (0 = only at the end)")                           \
    X(keep_checkpoints, INT, DPT_JOBS_ALL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "3", 1, 1000,  \
      "", "how many of this run's newest checkpoints to keep")                                     \
    X(stop_iters, INT, DPT_JOBS_ALL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "0", 0, 1e12, "",    \
      "stop once training_iteration reaches this (0 = off); schedules still span epochs or "       \
      "total_timesteps")                                                                           \
    X(comm_timeout_s, FLOAT, DPT_JOBS_ALL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "300", 0.01,   \
      1e6, "", "seconds a participant waits for the others in a collective before failing")        \
    /* supervised */                                                                               \
    X(dataset, ENUM, DPT_JOBS_DATA, 0, "fashion_mnist", 0, 0, DPT_CHOICES_DATASET,                 \
      "data: Fashion-MNIST IDX files, CSV files, two interleaved spirals made from the seed, or "  \
      "(sync_replicas) bags of ids from a large vocabulary whose target is a hidden function of "  \
      "the ids, learned through an embedding table with sparse gradients")                         \
    X(data_dir, STR, DPT_JOBS_DATA, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING,                       \
      "/usr/share/datasets/fashion-mnist", 0, 0, "", "fashion_mnist: directory of the IDX files")  \
    X(train_csv, STR, DPT_JOBS_DATA, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "", 0, 0, "",        \
      "csv: training file (relative to the config file)")                                          \
    X(test_csv, STR, DPT_JOBS_DATA, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "", 0, 0, "",         \
      "csv: test file (relative to the config file)")                                              \
    X(label_column, STR, DPT_JOBS_DATA, 0, "label", 0, 0, "", "csv: name of the label column")     \
    X(loss, ENUM, DPT_JOBS_DATA, 0, "softmax_xent", 0, 0, DPT_CHOICES_LOSS,                        \
      "softmax_xent: classify the label; mse or huber (delta 1): regress the target_columns")      \
    X(target_columns, STR, DPT_JOBS_DATA, 0, "", 0, 0, "",                                         \
      "csv with loss = mse or huber: the target columns' names, comma-separated (the other "       \
      "columns are the features)")                                                                 \
    X(hidden, STR, DPT_JOBS_DATA, 0, "256,128", 0, 0, "", "hidden layer sizes, comma-separated")   \
    X(model, STR, DPT_JOBS_SUP, 0, "", 0, 0, "",                                                   \
      "a model plug-in (path of a .so made with DPT_MODEL_PLUGIN, relative to the config file) "   \
      "instead of the built-in MLP of hidden and activation")                                      \
    X(activation, ENUM, DPT_JOBS_DATA, 0, "relu", 0, 0, "relu|tanh", "hidden activation")          \
    X(network, STR, DPT_JOBS_DATA | DPT_JOBS_RL, 0, "", 0, 0, "",                                  \
      "layers in the model language (docs/MODELS.md), e.g. conv(32,k=3,pad=1) relu maxpool(2) "    \
      "flatten dense(128) relu: supervised and sync_replicas, the model instead of hidden and "    \
      "activation (the output layer is added); RL jobs, an encoder of the observation under the "  \
      "actor and critic of policy_hidden")                                                         \
    X(epochs, INT, DPT_JOBS_DATA, 0, "10", 1, 1e6, "", "passes over the training set")             \
    X(batch_size, INT, DPT_JOBS_DATA, 0, "128", 1, 1e6, "",                                        \
      "minibatch rows per step (all devices)")                                                     \
    X(optimizer, ENUM, DPT_JOBS_DATA, 0, "adam", 0, 0, DPT_CHOICES_OPTIM, "optimizer")             \
    X(lr_end, FLOAT, DPT_JOBS_DATA, 0, "0", 0, 10, "",                                             \
      "final learning rate of the linear schedule")                                                \
    X(momentum, FLOAT, DPT_JOBS_DATA, 0, "0.9", 0, 0.999999, "", "momentum coefficient")           \
    X(nesterov, BOOL, DPT_JOBS_DATA, 0, "false", 0, 0, "", "Nesterov momentum")                    \
    X(weight_decay, FLOAT, DPT_JOBS_DATA, 0, "0", 0, 10, "",                                       \
      "weight decay (L2, or decoupled for adamw)")                                                 \
    X(shuffle, BOOL, DPT_JOBS_DATA, 0, "true", 0, 0, "", "shuffle the training set every epoch")   \
    X(spirals_points, INT, DPT_JOBS_DATA, 0, "4096", 16, 1e7, "",                                  \
      "spirals: training points (plus a quarter as many test points)")                             \
    /* sync_replicas */                                                                            \
    X(replicas_to_aggregate, INT, DPT_JOBS_SR, 0, "2", 1, 32, "",                                  \
      "gradients averaged into one update; total_num_replicas above it makes backup workers "      \
      "whose late gradients are dropped as stale")                                                 \
    X(total_num_replicas, INT, DPT_JOBS_SR, 0, "0", 0, 32, "",                                     \
      "workers computing gradients, each on batch_size / replicas_to_aggregate rows (0 = "         \
      "replicas_to_aggregate; below it each worker computes several gradients a step)")            \
    X(sync_replicas_tokens, ENUM, DPT_JOBS_SR, 0, "strict", 0, 0, "strict|fifo",                   \
      "how tokens go to workers: strict (at most one gradient per worker and step when N >= R; "   \
      "N = R is bitwise reproducible) or fifo (TensorFlow's queue: a fast worker may take "        \
      "another's token)")                                                                          \
    X(init_tokens, INT, DPT_JOBS_SR, 0, "-1", -1, 1e6, "",                                         \
      "tokens each session starts with (-1 = replicas_to_aggregate, TensorFlow's default; at "     \
      "least replicas_to_aggregate - total_num_replicas)")                                         \
    X(replica_grad_clip, FLOAT, DPT_JOBS_SR, 0, "0", 0, 1e30, "",                                  \
      "clip each worker's gradient to this global norm before it is pushed (0 = off; grad_clip "   \
      "clips the averaged one)")                                                                   \
    X(num_ps, INT, DPT_JOBS_SR, 0, "1", 1, 32, "",                                                 \
      "parameter services the variables are placed on (each to the least loaded by bytes)")        \
    X(ema_decay, FLOAT, DPT_JOBS_SR, 0, "0", 0, 0.999999, "",                                      \
      "exponential moving average of the variables after each step (0 = off); evaluated and "      \
      "saved beside them")                                                                         \
    X(eval_ema, BOOL, DPT_JOBS_SR, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "false", 0, 0, "",     \
      "dpt eval (and dpt_trainer_evaluate) score the moving average of the variables (needs "      \
      "ema_decay > 0) instead of the variables")                                                   \
    X(test_interval, INT, DPT_JOBS_SR, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "1", 0, 1e9, "",   \
      "epochs between test-set evaluations (0 = the last epoch only; the last is always "          \
      "evaluated); under mpirun with num_ps > 1 each one gathers the model to rank 0")             \
    X(embedding_dim, INT, DPT_JOBS_SR, 0, "64", 1, 4096, "", "bags: width of the embedding table") \
    X(bags_vocab, INT, DPT_JOBS_SR, 0, "100000", 2, 1e8, "",                                       \
      "bags: ids in the vocabulary (rows of the embedding table)")                                 \
    X(bags_ids, INT, DPT_JOBS_SR, 0, "8", 1, 1024, "", "bags: ids per bag")                        \
    X(bags_rows, INT, DPT_JOBS_SR, 0, "100000", 16, 1e8, "",                                       \
      "bags: training bags (and a tenth as many test bags)")                                       \
    /* shared by supervised and RL */                                                              \
    X(lr, FLOAT, DPT_JOBS_ALL, 0, "0.001", 0, 10, "", "learning rate")                             \
    X(lr_schedule, ENUM, DPT_JOBS_ALL, 0, "constant", 0, 0, DPT_CHOICES_SCHEDULE,                  \
      "learning-rate schedule: linear decays to lr_end (supervised) or to 0 at total_timesteps "   \
      "(RL)")                                                                                      \
    X(adam_eps, FLOAT, DPT_JOBS_ALL, 0, "1e-8", 1e-30, 1, "", "Adam epsilon")                      \
    X(grad_clip, FLOAT, DPT_JOBS_ALL, 0, "0", 0, 1e9, "",                                          \
      "global-norm gradient clipping (0 = off)")                                                   \
    X(frozen, STR, DPT_JOBS_ALL, DPT_CFG_RESUMABLE, "", 0, 0, "",                                  \
      "variables the optimizer leaves alone, comma-separated: names, or prefixes that end where "  \
      "a part of a name ends (e.g. 0, actor. or actor.0.weight); their weights and optimizer "     \
      "slots stay bitwise as they are and grad_clip leaves them out")                              \
    X(towers_mode, ENUM, DPT_JOBS_TOWERS, 0, "ps", 0, 0, DPT_CHOICES_TOWERS_MODE,                  \
      "how tower gradients combine")                                                               \
    X(num_devices, INT, DPT_JOBS_TOWERS, 0, "2", 1, 256, "",                                       \
      "towers (CPU threads) per process; appo and impala: the learner's")                          \
    X(reduce_op, ENUM, DPT_JOBS_TOWERS, 0, "avg", 0, 0, DPT_CHOICES_REDUCE_OP,                     \
      "how the devices' (and ranks') gradients combine before the update: avg (their mean) or "    \
      "sum; not for towers_mode = async")                                                          \
    X(reduction_order, ENUM, DPT_JOBS_SUP | DPT_JOBS_ONPOLICY, 0, "fast", 0, 0,                    \
      DPT_CHOICES_REDUCTION_ORDER,                                                                 \
      "how gradients are added: fast (each device its rows, then the devices and ranks) or "       \
      "invariant (fixed chunks of reduction_chunk rows added by one tree over the chunks, and "    \
      "ppo: each env's own action stream: the same weights for any num_devices and number of "     \
      "ranks, and a resume may change them; docs/TRAINING.md)")                                    \
    X(reduction_chunk, INT, DPT_JOBS_SUP | DPT_JOBS_ONPOLICY, 0, "16", 1, 1e6, "",                 \
      "reduction_order = invariant: rows per chunk (batch_size, or sgd_minibatch_size, must be a " \
      "multiple of it, with at least one chunk per device of every rank)")                         \
    X(async_scale, FLOAT, DPT_JOBS_TOWERS, 0, "0", 0, 1e6, "",                                     \
      "towers_mode = async: each device's gradient is multiplied by this before it applies it "    \
      "(0 = 1 / num_devices)")                                                                     \
    X(allreduce_algorithm, ENUM, DPT_JOBS_SUP | DPT_JOBS_RL, 0, "auto", 0, 0,                      \
      DPT_CHOICES_ALLREDUCE,                                                                       \
      "allreduce algorithm of the gradients (replicated towers, ranks, DD-PPO workers); auto "     \
      "chooses by message size and layout (docs/COLLECTIVES.md)")                                  \
    X(bucket_bytes, INT, DPT_JOBS_SUP, 0, "26214400", 0, 1e12, "",                                 \
      "under mpirun with num_devices = 1: gradients are all-reduced in buckets of about this "     \
      "many "                                                                                      \
      "bytes, last layer first, each as soon as the backward pass has finished it (0 = one "       \
      "all-reduce after the backward pass)")                                                       \
    /* reinforcement learning */                                                                   \
    X(env, STR, DPT_JOBS_RL, 0, "CartPole-v1", 0, 0, "",                                           \
      "environment: a built-in name, or the path of a plug-in .so (relative to the config file)")  \
    X(num_workers, INT, DPT_JOBS_DDPPO | DPT_JOBS_ASYNC, 0, "2", 1, 1024, "",                      \
      "worker threads per process (ddppo), sampler threads (appo, impala)")                        \
    X(num_envs_per_worker, INT, DPT_JOBS_RL, 0, "4", 1, 65536, "",                                 \
      "envs stepped by the sampler (ppo) or by each worker (ddppo)")                               \
    X(rollout_fragment_length, INT, DPT_JOBS_RL, 0, "128", 1, 1e7, "",                             \
      "steps per env per iteration")                                                               \
    X(train_batch_size, INT, DPT_JOBS_PPO | DPT_JOBS_ASYNC, 0, "0", 0, 1e9, "",                    \
      "ppo: rows per iteration (0 = rollout_fragment_length x num_envs_per_worker, the only "      \
      "value allowed); appo, impala: env steps per learner update (whole fragments)")              \
    X(sgd_minibatch_size, INT, DPT_JOBS_ONPOLICY, 0, "128", 1, 1e9, "",                            \
      "rows per SGD minibatch (all devices; per worker for ddppo, over all workers with "          \
      "reduction_order = invariant)")                                                              \
    X(num_sgd_iter, INT, DPT_JOBS_RL, 0, "4", 1, 1000, "",                                         \
      "epochs over each batch; appo, impala: updates on each train batch")                         \
    X(total_timesteps, INT, DPT_JOBS_RL, DPT_CFG_RESUMABLE, "500000", 1, 1e12, "",                 \
      "env steps to train for (all workers); the linear schedule spans them")                      \
    X(stop_reward, FLOAT, DPT_JOBS_RL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "0", -1e30, 1e30,  \
      "", "stop once episode_reward_mean over >= 20 episodes reaches this (0 = off)")              \
    X(gamma, FLOAT, DPT_JOBS_RL, 0, "0.99", 0, 1, "", "discount factor")                           \
    X(lambda, FLOAT, DPT_JOBS_ONPOLICY, 0, "0.95", 0, 1, "", "GAE lambda")                         \
    X(clip_param, FLOAT, DPT_JOBS_ONPOLICY | DPT_JOBS_APPO, 0, "0.2", 0, 10, "",                   \
      "PPO ratio clip (appo: of the surrogate on V-trace advantages)")                             \
    X(vf_clip_param, FLOAT, DPT_JOBS_ONPOLICY, 0, "0.2", 0, 1e9, "", "value clip (0 = off)")       \
    X(vf_loss_coeff, FLOAT, DPT_JOBS_RL, 0, "0.5", 0, 1e6, "", "value loss coefficient")           \
    X(entropy_coeff, FLOAT, DPT_JOBS_RL, 0, "0.01", 0, 1e6, "", "entropy bonus coefficient")       \
    X(reward_scale, FLOAT, DPT_JOBS_RL, 0, "1", 1e-9, 1e9, "",                                     \
      "multiply rewards by this for learning (returns are reported unscaled)")                     \
    X(normalize_advantages, ENUM, DPT_JOBS_ONPOLICY, 0, "minibatch", 0, 0, DPT_CHOICES_ADV_NORM,   \
      "standardize advantages over each minibatch (CleanRL), over the whole batch (ddppo: each "   \
      "worker's own batch), or not")                                                               \
    X(policy_hidden, STR, DPT_JOBS_RL, 0, "64,64", 0, 0, "", "actor and critic hidden sizes")      \
    X(use_lstm, BOOL, DPT_JOBS_ONPOLICY, 0, "false", 0, 0, "",                                     \
      "put an LSTM in front of the actor and critic (a recurrent policy; RLlib's use_lstm)")       \
    X(lstm_cell_size, INT, DPT_JOBS_ONPOLICY, 0, "64", 1, 65536, "",                               \
      "use_lstm: the LSTM's cell size")                                                            \
    X(lstm_use_prev_action, BOOL, DPT_JOBS_ONPOLICY, 0, "false", 0, 0, "",                         \
      "use_lstm: feed the previous action (one-hot if discrete) to the LSTM")                      \
    X(lstm_use_prev_reward, BOOL, DPT_JOBS_ONPOLICY, 0, "false", 0, 0, "",                         \
      "use_lstm: feed the previous reward (times reward_scale) to the LSTM")                       \
    X(max_seq_len, INT, DPT_JOBS_ONPOLICY, 0, "20", 1, 100000, "",                                 \
      "use_lstm: steps per training sequence (rollouts are cut at episode ends and every "         \
      "max_seq_len steps, then padded)")                                                           \
    /* appo and impala */                                                                          \
    X(learner_queue_size, INT, DPT_JOBS_ASYNC, 0, "16", 1, 1e6, "",                                \
      "sample batches the learner's queue holds; samplers block while it is full")                 \
    X(learner_queue_timeout, FLOAT, DPT_JOBS_ASYNC, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING,       \
      "300", 0.01, 1e6, "", "seconds the learner waits for a sample batch before the job fails")   \
    X(minibatch_buffer_size, INT, DPT_JOBS_ASYNC, 0, "1", 1, 1e4, "",                              \
      "train batches the learner cycles through, each used num_sgd_iter times (RLlib's "           \
      "minibatch buffer; with num_multi_gpu_tower_stacks > 1 the buffer holds the stacks)")        \
    X(num_multi_gpu_tower_stacks, INT, DPT_JOBS_ASYNC, 0, "1", 1, 64, "",                          \
      "the learner's tower stacks (RLlib's); above 1, loader threads load train batches into "     \
      "idle stacks while the learner steps on loaded ones, through a buffer of the stacks")        \
    X(init_num_passes, INT, DPT_JOBS_ASYNC, 0, "0", 0, 1e4, "",                                    \
      "passes of the learner's first batch, one more per batch up to num_sgd_iter (0 = RLlib's: "  \
      "1 with num_multi_gpu_tower_stacks > 1, num_sgd_iter with one stack)")                       \
    X(learner_result_queue_size, INT, DPT_JOBS_ASYNC, 0, "1024", 1, 1e7, "",                       \
      "the learner's results waiting to be read (its outqueue; the learner waits while it is "     \
      "full)")                                                                                     \
    X(num_data_load_threads, INT, DPT_JOBS_ASYNC, 0, "1", 1, 64, "",                               \
      "loader threads filling the tower stacks (needs num_multi_gpu_tower_stacks > 1)")            \
    X(broadcast_interval, INT, DPT_JOBS_ASYNC, 0, "1", 1, 1e6, "",                                 \
      "learner updates between two publications of the weights to the samplers")                   \
    X(policies, STR, DPT_JOBS_ASYNC, 0, "default_policy", 0, 0, "",                                \
      "the policies, comma-separated names of letters, digits, _ and - (at most 8, all of "        \
      "policy_hidden); each env acts with its policy's weights (policy_mapping)")                  \
    X(policies_to_train, STR, DPT_JOBS_ASYNC, 0, "", 0, 0, "",                                     \
      "the policies the learner updates, comma-separated (empty: all); the others keep their "     \
      "initial weights and still sample")                                                          \
    X(policy_mapping, STR, DPT_JOBS_ASYNC, 0, "round_robin", 0, 0, "",                             \
      "which policy steps each env of a sampler: round_robin (env i: policies[i mod the count]) "  \
      "or num_envs_per_worker comma-separated policy names (env i: the i-th)")                     \
    X(vtrace_clip_rho_threshold, FLOAT, DPT_JOBS_ASYNC, 0, "1", 0, 1e9, "",                        \
      "V-trace: the importance weights rho of the value targets are clipped at this")              \
    X(vtrace_clip_pg_rho_threshold, FLOAT, DPT_JOBS_ASYNC, 0, "1", 0, 1e9, "",                     \
      "V-trace: the importance weights of the policy-gradient advantages are clipped at this")     \
    X(min_sample_timesteps_per_iteration, INT, DPT_JOBS_ASYNC,                                     \
      DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "10000", 1, 1e12, "",                               \
      "env steps the learner trains on per reported iteration")                                    \
    X(sync_frac, FLOAT, DPT_JOBS_DDPPO, 0, "0.6", 0, 1, "",                                        \
      "preempt stragglers once this fraction of workers finished collecting (1 = off)")            \
    X(check_weights_every, INT, DPT_JOBS_DDPPO, DPT_CFG_BOOKKEEPING, "10", 0, 1e9, "",             \
      "verify that workers hold identical weights every N iterations (0 = off)")                   \
    X(eval_stochastic, BOOL, DPT_JOBS_RL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "false", 0, 0,  \
      "",                                                                                          \
      "evaluations sample their actions from the policy (seeded) instead of taking the greedy "    \
      "one")                                                                                       \
    X(eval_episodes, INT, DPT_JOBS_RL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "10", 0, 1e6, "",  \
      "episodes of the greedy policy evaluated at the end of a run")                               \
    X(evaluation_interval, INT, DPT_JOBS_RL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "0", 0, 1e9, \
      "",                                                                                          \
      "evaluate the greedy policy every N iterations (0 = never): metrics under "                  \
      "evaluation/, the best kept as checkpoints/best.safetensors")                                \
    X(evaluation_episodes, INT, DPT_JOBS_RL, DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING, "10", 1,     \
      1e6, "", "episodes of each evaluation during training")

/* Per-job defaults that differ from the table's: X(job, key, value). */
#define DPT_CONFIG_JOB_DEFAULTS(X)                   \
    X(DPT_JOB_PPO, lr, "0.00025")                    \
    X(DPT_JOB_PPO, lr_schedule, "linear")            \
    X(DPT_JOB_PPO, adam_eps, "1e-5")                 \
    X(DPT_JOB_PPO, grad_clip, "0.5")                 \
    X(DPT_JOB_PPO, num_devices, "1")                 \
    X(DPT_JOB_PPO, checkpoint_every, "100")          \
    X(DPT_JOB_DDPPO, lr, "0.00025")                  \
    X(DPT_JOB_DDPPO, lr_schedule, "linear")          \
    X(DPT_JOB_DDPPO, adam_eps, "1e-5")               \
    X(DPT_JOB_DDPPO, grad_clip, "0.5")               \
    X(DPT_JOB_DDPPO, checkpoint_every, "50")         \
    X(DPT_JOB_DDPPO, rollout_fragment_length, "100") \
    X(DPT_JOB_DDPPO, num_envs_per_worker, "5")       \
    X(DPT_JOB_DDPPO, sgd_minibatch_size, "50")       \
    X(DPT_JOB_DDPPO, num_sgd_iter, "10")             \
    X(DPT_JOB_DDPPO, normalize_advantages, "batch")  \
    X(DPT_JOB_APPO, lr, "0.0005")                    \
    X(DPT_JOB_APPO, grad_clip, "40")                 \
    X(DPT_JOB_APPO, num_devices, "1")                \
    X(DPT_JOB_APPO, num_workers, "1")                \
    X(DPT_JOB_APPO, rollout_fragment_length, "50")   \
    X(DPT_JOB_APPO, train_batch_size, "500")         \
    X(DPT_JOB_APPO, num_sgd_iter, "1")               \
    X(DPT_JOB_APPO, checkpoint_every, "10")          \
    X(DPT_JOB_APPO, total_timesteps, "1000000")      \
    X(DPT_JOB_IMPALA, lr, "0.0005")                  \
    X(DPT_JOB_IMPALA, grad_clip, "40")               \
    X(DPT_JOB_IMPALA, num_devices, "1")              \
    X(DPT_JOB_IMPALA, num_workers, "1")              \
    X(DPT_JOB_IMPALA, rollout_fragment_length, "50") \
    X(DPT_JOB_IMPALA, train_batch_size, "500")       \
    X(DPT_JOB_IMPALA, num_sgd_iter, "1")             \
    X(DPT_JOB_IMPALA, checkpoint_every, "10")        \
    X(DPT_JOB_IMPALA, total_timesteps, "1000000")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_config_key {
#define DPT__CFG_ENUM(name, type, jobs, flags, def, lo, hi, choices, help) DPT_CFG_##name,
    DPT_CONFIG_KEYS(DPT__CFG_ENUM)
#undef DPT__CFG_ENUM
    DPT_CFG_COUNT
} dpt_config_key_t;
/* clang-format on */

typedef enum dpt_config_type {
    DPT_CFG_T_INT,
    DPT_CFG_T_FLOAT,
    DPT_CFG_T_STR,
    DPT_CFG_T_BOOL,
    DPT_CFG_T_ENUM
} dpt_config_type_t;

/* Longest value of a key, in bytes, with the terminating NUL. */
#define DPT_CONFIG_STR_MAX 1024

/* What the table says about one key (static storage). */
typedef struct dpt_config_key_info {
    const char *name;
    dpt_config_type_t type;
    unsigned jobs;       /* DPT_JOBS_... mask */
    unsigned flags;      /* DPT_CFG_RESUMABLE, DPT_CFG_BOOKKEEPING */
    const char *def;     /* the table's default; dpt_config_default() gives a job's */
    double min, max;     /* INT and FLOAT */
    const char *choices; /* ENUM: "a|b|c" */
    const char *help;
} dpt_config_key_info_t;

/* Table entry of key k; NULL when k is out of range. */
const dpt_config_key_info_t *dpt_config_key_info(dpt_config_key_t k);
/* The key called `name`, or -1. */
int dpt_config_key_find(const char *name);
/* The default of key k for `job` (the table's, or the job's override). */
const char *dpt_config_default(dpt_config_key_t k, dpt_job_t job);
/* "int", "float", "string", "bool", "choice". */
const char *dpt_config_type_name(dpt_config_type_t type);

/* A configuration: one value per key, and the env_config entries. Opaque;
 * caller owns. */
typedef struct dpt_config dpt_config_t;

/* Keys `env_config.NAME` (NAME: 1..63 letters, digits or '_') set parameter
 * NAME of the env of the RL jobs, built-in or plug-in (dpt/env.h:
 * dpt_env_param_t); any number of them. Reading a file or dpt_config_set
 * checks only the form (a name, a value as for a string key); the env checks
 * names, types and ranges when the run or trainer loads it, before anything
 * is written: an unknown name or a bad value is DPT_EINVAL naming the key,
 * the env and the problem. A run then adds every parameter not given with
 * its default, so config.conf and checkpoints name every value. Entries are
 * kept in name order; none may change on resume. */
#define DPT_CONFIG_ENV_PREFIX "env_config."

/* Every key starts at the table's default, nothing marked as given.
 * Errors: DPT_ENOMEM. */
int dpt_config_create(dpt_config_t **c);
void dpt_config_destroy(dpt_config_t *c);
/* A deep copy. Errors: DPT_ENOMEM. */
int dpt_config_clone(dpt_config_t **out, const dpt_config_t *c);

/* Reads a config file: `key = value` lines, `#` starts a comment. Paths in
 * path-valued keys (env when it names a plug-in, train_csv, test_csv,
 * data_dir) are later resolved relative to this file's directory;
 * tensorboard_dir (an output, as output_dir) relative to the working
 * directory.
 * Errors naming "FILE:LINE": DPT_ENOENT (missing file, a path through a
 * file), DPT_EIO (the system failed to read it), DPT_EINVAL (a
 * directory or non-regular file, a NUL byte or other control character, a
 * value longer than DPT_CONFIG_STR_MAX - 1, syntax, unknown key with the
 * closest valid key, duplicate key, bad type or range). */
int dpt_config_load(dpt_config_t *c, const char *path);
/* Applies "key=value" (an override given after the file). Errors as for
 * dpt_config_load, prefixed "--set key=value". */
int dpt_config_set(dpt_config_t *c, const char *assignment);

/* Completes the config for its job: keys not given take the job's
 * default; a key given that does not apply to the job is DPT_EINVAL
 * ("key hidden does not apply to job ppo (it is a supervised key)");
 * cross-key rules are checked (batch_size divisible by num_devices,
 * train_batch_size consistent, sgd_minibatch_size within the batch, ...);
 * relative paths are resolved against the config file's directory, or the
 * working directory for tensorboard_dir (paths become absolute, so a run
 * resumes and evaluates from any directory). Idempotent. Required before a trainer or run uses it. */
int dpt_config_finalize(dpt_config_t *c);
/* 1 once finalized (and not changed since). */
int dpt_config_finalized(const dpt_config_t *c);

/* Typed values. Asking for the wrong type is a broken invariant (abort). */
int64_t dpt_config_int(const dpt_config_t *c, dpt_config_key_t k);     /* INT, BOOL, ENUM index */
double dpt_config_float(const dpt_config_t *c, dpt_config_key_t k);    /* FLOAT */
const char *dpt_config_str(const dpt_config_t *c, dpt_config_key_t k); /* any: the value's text */
/* 1 when the key was given in a file or by dpt_config_set. */
int dpt_config_given(const dpt_config_t *c, dpt_config_key_t k);
/* The job (valid for any config; the table's default until `job` is set). */
dpt_job_t dpt_config_job(const dpt_config_t *c);
/* 1 when key k applies to the config's job. */
int dpt_config_applies(const dpt_config_t *c, dpt_config_key_t k);
/* The file the config was read from ("" if none). */
const char *dpt_config_source(const dpt_config_t *c);
/* The env_config entries: how many, and the i-th one's NAME (without the
 * prefix) and value text, in name order (NULL past the end); the value of
 * NAME, or NULL when there is no such entry. Strings are borrowed: valid
 * until the config changes or is destroyed. */
size_t dpt_config_env_count(const dpt_config_t *c);
const char *dpt_config_env_name(const dpt_config_t *c, size_t i);
const char *dpt_config_env_value(const dpt_config_t *c, size_t i);
const char *dpt_config_env_get(const dpt_config_t *c, const char *name);

/* The config as text: a comment line, then `key = value` for every key of
 * its job, in table order, with the env_config entries after `env`. Returns the text's length; writes at most `size`
 * bytes including the NUL (like snprintf). */
size_t dpt_config_format(const dpt_config_t *c, char *buf, size_t size);
/* Writes dpt_config_format() to `path` atomically (temporary file, fsync,
 * rename). Errors: DPT_EIO with the path and reason, DPT_ENOMEM. */
int dpt_config_save(const dpt_config_t *c, const char *path);
/* A commented starter config for `job` (every key with its default and
 * help) into buf, snprintf-style. */
size_t dpt_config_format_starter(dpt_job_t job, char *buf, size_t size);

/* 64-bit FNV-1a of "name=value\n" of key k (0 when k does not apply to the
 * job), and of every key whose flags do not include `skip_flags` and of the
 * env_config entries (never skipped). Used to compare configs across ranks
 * and against a checkpoint. */
uint64_t dpt_config_key_hash(const dpt_config_t *c, dpt_config_key_t k);
uint64_t dpt_config_digest(const dpt_config_t *c, unsigned skip_flags);

/* ---- trainers --------------------------------------------------------------- */

/* One named number of a result. Names follow RLlib's where they mean the
 * same ("episode_reward_mean", "info/learner/default_policy/policy_loss",
 * "timing_breakdown/sample_time_ms"); '/' nests them in result.jsonl. */
typedef struct dpt_metric {
    const char *name; /* static storage */
    double value;
} dpt_metric_t;

#define DPT_TRAIN_MAX_METRICS 128

/* What one iterate() did. */
typedef struct dpt_train_result {
    uint64_t iteration;        /* training_iteration: iterations done in the run so far */
    uint64_t timesteps_total;  /* env steps (RL) or training samples (supervised) so far */
    double progress;           /* fraction of the job's length done, in [0, 1] */
    int finished;              /* 1 when the job's length (epochs or total_timesteps) is done */
    int stop_requested;        /* 1 when a rank that runs a role of this trainer under mpirun
                                * (an APPO sampler, a sync_replicas worker or service) was
                                * asked to stop, by a signal that reached that rank alone:
                                * dpt_train_run stops after this iteration as it does for
                                * its own stop_flag */
    double reward_mean;        /* RL: episode_reward_mean over the window; NAN otherwise */
    size_t episodes_in_window; /* RL: episodes behind reward_mean (<= 100) */
    char line[256];            /* one line for a progress display */
    char note[192];            /* "" or something the user should know (a rule changed
                                * what the config asked for, e.g. a minibatch raised to
                                * one sequence per device); dpt_train_run reports it as a
                                * DPT_RUN_NOTE when it differs from the last one */
    size_t nmetrics;
    dpt_metric_t metrics[DPT_TRAIN_MAX_METRICS]; /* in the same order every iteration */
} dpt_train_result_t;

/* Appends a metric to r (ignored past DPT_TRAIN_MAX_METRICS). */
void dpt_train_result_add(dpt_train_result_t *r, const char *name, double value);
/* The value of metric `name` in r, or NAN. */
double dpt_train_result_get(const dpt_train_result_t *r, const char *name);

/* What evaluate() measured. */
typedef struct dpt_eval_result {
    size_t count;         /* episodes (RL) or test samples (supervised) */
    double mean_return;   /* RL: mean episode return; supervised: NAN */
    double mean_length;   /* RL: mean episode length */
    double loss;          /* supervised: mean test loss; RL: NAN */
    double accuracy;      /* supervised classification: test accuracy; else NAN */
    double rmse, mae, r2; /* supervised regression (loss mse or huber): test root mean
                           * squared error, mean absolute error, R^2; else NAN */
    int stochastic;       /* RL: 1 when the actions were sampled (eval_stochastic), 0 greedy */
} dpt_eval_result_t;

typedef struct dpt_trainer dpt_trainer_t;

/* Where a trainer runs. Caller's storage; zero it (or use NULL) for the
 * defaults: a single process with the job's own threads.
 *
 * A trainer learns its rank and the number of processes from `comm` alone
 * (never from the launcher's environment): with no communicator, or one of
 * a single participant, it is one process. What each job does with a
 * communicator of several processes (rank r of P):
 *   supervised     data-parallel over the ranks: each rank its share of every
 *                  batch, split among its towers; gradients all-reduced over
 *                  comm from the thread that calls the trainer; the same
 *                  weights on every rank.
 *   ppo            refuses (one sampler, one process): DPT_EINVAL.
 *   ddppo          every rank a trainer; comm tells it to span the ranks, and
 *                  it builds its workers' own communicators (MPI, or threads x
 *                  MPI with several worker threads) beside it.
 *   appo, impala   rank 0 only (the learner; its samplers are the other
 *                  ranks, run by dpt_train_run): DPT_EINVAL on another rank.
 *   sync_replicas  rank 0 only (the first service, running the loop; the
 *                  other services and the workers are the other ranks, run by
 *                  dpt_train_run): DPT_EINVAL on another rank.
 * Changed in 0.2.x: ranks came from the launcher's environment when use_mpi
 * was set, and ddppo ignored comm (docs/CHANGES.md). */
typedef struct dpt_trainer_env {
    /* Kept for callers of 0.2: 1 states that comm is set. use_mpi = 1 with
     * comm NULL is refused (DPT_EINVAL) rather than read as one process. */
    int use_mpi;
    /* The run's stop request (dpt_run_options_t), for trainers that want
     * to cut a long iteration short; may be NULL. The run loop agrees on it
     * across ranks between iterations. */
    const volatile sig_atomic_t *stop_flag;
    /* The process-level communicator across the MPI ranks (one participant
     * per process; borrowed, valid until the trainer is destroyed); NULL for
     * one process. dpt_train_run passes the run's (dpt_comm_mpi_create). */
    dpt_comm_t *comm;
    /* sync_replicas, for benchmarks of stragglers: when straggler_delay_s
     * > 0, worker straggler_worker sleeps that long before each push of a
     * gradient. */
    int straggler_worker;
    double straggler_delay_s;
    /* An external env (dpt/extenv.h): the caller steps the envs; the
     * config's env must be "external:NAME". ppo, ddppo (num_workers 1) and
     * appo/impala (num_workers 1), one process; NULL: the config's env. */
    struct dpt_ext *ext;
} dpt_trainer_env_t;

/* The operations a job implements. self is the job's own state. Every
 * operation is called from one thread (the process's main thread); under
 * MPI every rank calls each one in the same order (they are collective for
 * multi-process jobs). */
typedef struct dpt_trainer_ops {
    dpt_job_t job;
    /* Builds everything from a finalized config. Validates first. */
    int (*create)(void **self, const dpt_config_t *cfg, const dpt_trainer_env_t *env);
    void (*destroy)(void *self);
    /* One unit of work; fills *r completely (nmetrics from 0). */
    int (*iterate)(void *self, dpt_train_result_t *r);
    /* Adds parameters, optimizer slots and private state to w (rank 0's
     * writer; other ranks pass NULL and only take part). Data added is
     * borrowed until the caller saves w; no iterate() in between. */
    int (*checkpoint)(void *self, dpt_safetensors_writer_t *w);
    /* Restores what checkpoint() wrote; on error the trainer is unchanged. */
    int (*restore)(void *self, const dpt_safetensors_t *st);
    /* The model's variable table (borrowed, valid until destroy). */
    const dpt_vartable_t *(*vars)(void *self);
    /* Copies the current parameters (table total floats) into out. */
    int (*get_weights)(void *self, float *out, size_t count);
    /* Replaces the parameters with `in` (table total floats, finite:
     * dpt_trainer_set_weights checked both); the optimizer's state and
     * the counters are kept. Collective for multi-process jobs (every rank
     * passes the same weights). NULL when the job cannot (the wrapper
     * returns DPT_ENOTSUP). */
    int (*set_weights)(void *self, const float *in, size_t count);
    /* Evaluates the current parameters: RL runs `episodes` greedy episodes
     * on fresh envs seeded from `seed`; supervised scores the test set. */
    int (*evaluate)(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out);
    /* Adds metadata that describes the model and data (env name and
     * spaces, layer sizes, dataset...) so a checkpoint loads with no
     * config. */
    int (*describe)(void *self, dpt_safetensors_writer_t *w);
    /* Evaluates a checkpoint of this job without a trainer (no training
     * data, no worker threads): builds the model from cfg (the config the
     * checkpoint carries, with the user's overrides; finalized), loads
     * "params." from st, and measures as evaluate() does. */
    int (*eval_checkpoint)(const dpt_config_t *cfg, const dpt_safetensors_t *st, size_t episodes,
                           uint64_t seed, dpt_eval_result_t *out);
} dpt_trainer_ops_t;

/* The ops of a job (static storage); NULL for an unknown job. */
const dpt_trainer_ops_t *dpt_trainer_ops(dpt_job_t job);

/* Creates the trainer of cfg's job (cfg must be finalized; it is copied).
 * env may be NULL. Errors: DPT_EINVAL naming the key or input, DPT_ENOENT
 * (a dataset or plug-in file), DPT_ENOMEM, DPT_ETHREAD, DPT_ECOMM. */
int dpt_trainer_create(dpt_trainer_t **t, const dpt_config_t *cfg, const dpt_trainer_env_t *env);
void dpt_trainer_destroy(dpt_trainer_t *t);
int dpt_trainer_iterate(dpt_trainer_t *t, dpt_train_result_t *r);
/* Adds the whole trainer state and its self-description (model metadata,
 * the config text under "config", job, dpt version, GEMM kernel, CPU
 * features, counters) to w. Collective (see dpt_trainer_ops_t). */
int dpt_trainer_checkpoint(dpt_trainer_t *t, dpt_safetensors_writer_t *w);
int dpt_trainer_restore(dpt_trainer_t *t, const dpt_safetensors_t *st);
const dpt_vartable_t *dpt_trainer_vars(dpt_trainer_t *t);
int dpt_trainer_get_weights(dpt_trainer_t *t, float *out, size_t count);
/* Replaces the model's parameters with `in` (count = dpt_trainer_vars(t)->total
 * floats, laid out as the table says: e.g. another trainer's
 * dpt_trainer_get_weights); the optimizer's state, the counters and the
 * envs are kept, so the next iterate() trains from these weights and
 * evaluate() measures them. ppo, ddppo (collective: every rank the same
 * weights; a rank whose input is refused fails at once, the others when
 * the comparison times out, comm_timeout_s), supervised, and appo/impala (its trained policy; samplers act
 * with the new weights from the learner's next broadcast, or from the start
 * when set before the first iterate). Errors: DPT_EINVAL (count differs),
 * DPT_ENUMERIC (a weight is not finite: the message names the variable and
 * index; nothing changed), DPT_ENOTSUP (sync_replicas, whose parameters
 * live in its services). */
int dpt_trainer_set_weights(dpt_trainer_t *t, const float *in, size_t count);
int dpt_trainer_evaluate(dpt_trainer_t *t, size_t episodes, uint64_t seed, dpt_eval_result_t *out);
/* The trainer's config (finalized; borrowed). */
const dpt_config_t *dpt_trainer_config(const dpt_trainer_t *t);
/* This process's rank in the trainer's communicator (dpt_trainer_env_t.comm);
 * 0 without one. */
int dpt_trainer_rank(const dpt_trainer_t *t);

/* ---- evaluation of a saved model -------------------------------------------- */

/* Evaluates a checkpoint (a file, or a run directory: its newest valid
 * checkpoint) with no config file: the model, env or dataset come from the
 * checkpoint's metadata; `overrides` (may be NULL, else n "key=value"
 * strings) change keys such as data_dir or test_csv. episodes 0 = the
 * saved eval_episodes; seed UINT64_MAX = the run's seed. *path_out (may be NULL) receives the checkpoint
 * read. Errors: DPT_ENOENT, DPT_EFORMAT (not a dpt checkpoint, or one
 * written before dpt 0.2 without metadata: the message says so), DPT_EINVAL
 * (bad override). */
int dpt_eval_checkpoint(const char *path, const char *const *overrides, size_t n, size_t episodes,
                        uint64_t seed, dpt_eval_result_t *out, char *path_out, size_t path_size,
                        dpt_job_t *job_out);

/* ---- runs ------------------------------------------------------------------- */

/* What a run reports while it goes. */
typedef enum dpt_run_event_kind {
    DPT_RUN_START,  /* dir chosen (and created, or resumed); text: a description */
    DPT_RUN_RESULT, /* one iteration: result */
    DPT_RUN_NOTE,   /* something the user should know (a skipped corrupt checkpoint, ...) */
    DPT_RUN_END     /* text: the stop reason; eval: the final evaluation (RL) */
} dpt_run_event_kind_t;

typedef struct dpt_run_event {
    dpt_run_event_kind_t kind;
    const char *dir; /* the run directory */
    const char *text;
    const dpt_train_result_t *result; /* DPT_RUN_RESULT, and the last one at DPT_RUN_END */
    const dpt_eval_result_t *eval;    /* DPT_RUN_END when an evaluation ran */
    double elapsed_s;                 /* wall time of this process's part of the run */
    uint64_t timesteps_this_run;      /* timesteps done by this process's part */
    int resumed;
} dpt_run_event_t;

typedef struct dpt_run_options {
    /* Continue the run in this directory from its newest valid
     * checkpoint, with its saved config.conf (the config passed to
     * dpt_train_run then only carries overrides of resumable keys; NULL is
     * allowed). NULL: a fresh run. */
    const char *resume_dir;
    /* Called on rank 0 only (may be NULL). */
    void (*on_event)(void *user, const dpt_run_event_t *ev);
    void *user;
    /* Set (to non-zero) by a signal handler to ask the run to stop after
     * the current iteration with a checkpoint; may be NULL. (The type a
     * signal handler may write; the run reads it once per iteration and
     * never waits on it.) Under mpirun a flag set on any rank stops every
     * rank: a rank that runs a role (an APPO sampler, a sync_replicas
     * worker or service) asks rank 0, which stops after its iteration and
     * ends the roles; that rank's run then returns DPT_RUN_STOPPED. */
    const volatile sig_atomic_t *stop_flag;
    /* Under mpirun: called, from a watchdog thread, when joining the MPI
     * world (MPI_Init and the run's communicators) has not completed
     * within comm_timeout_s — another rank is stopped, dead or was never
     * started. MPI has no way back from a blocked MPI_Init, so the run
     * cannot return an error: the callee reports `what` (a sentence naming
     * the rank and the timeout; valid during the call) and ends the
     * process (the dpt command prints it and exits 1). May be NULL: the
     * join then waits as long as MPI does. */
    void (*on_stall)(void *user, const char *what);
    /* A failure the caller met before the run, in this process (a config
     * file that did not load, a bad override): its status (a negative
     * DPT_E... code) and message; 0 for none. Without a launcher
     * dpt_train_run returns it as it is. Under one, the run still joins the
     * other ranks, which compare how each started, so that a failure every
     * rank shares is reported once (dpt_train_error_shared). */
    int start_error;
    const char *start_error_text;
} dpt_run_options_t;

/* 1 when the last dpt_train_run of this thread failed, under a launcher, in
 * a way rank 0 reports for it (the same failure as rank 0's, or one rank 0
 * names), so that a command prints the failure once; 0 otherwise (print
 * it). */
int dpt_train_error_shared(void);

/* Why a run ended (dpt_train_run's *reason). */
#define DPT_RUN_REASON_LIST(X)                    \
    X(DPT_RUN_DONE, "finished")                   \
    X(DPT_RUN_STOP_ITERS, "reached stop_iters")   \
    X(DPT_RUN_STOP_REWARD, "reached stop_reward") \
    X(DPT_RUN_STOPPED, "stopped by a signal")     \
    X(DPT_RUN_ALREADY_DONE, "already finished; nothing to do")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_run_reason {
#define DPT__RUN_REASON_ENUM(sym, text) sym,
    DPT_RUN_REASON_LIST(DPT__RUN_REASON_ENUM)
#undef DPT__RUN_REASON_ENUM
    DPT_RUN_REASON_COUNT
} dpt_run_reason_t;
/* clang-format on */

const char *dpt_run_reason_text(dpt_run_reason_t reason);

/* Runs a whole job: validates, chooses and creates the run directory
 * (rank 0), builds the trainer, resumes when asked, iterates until a stop
 * condition, writes metrics and checkpoints, evaluates at the end (RL,
 * eval_episodes), and reports through options->on_event. cfg need not be
 * finalized (it is copied and finalized here). Under mpirun (the world has
 * more than one process) MPI is initialized and every rank must call this
 * with the same config: the ranks compare their configs first and refuse
 * to start when they differ (DPT_EINVAL naming the keys).
 * Nothing is written before the config is validated and the trainer built;
 * a fresh run refuses a non-empty directory (DPT_EINVAL, naming
 * --resume); a start that fails removes the directory it created.
 * Collectives time out after comm_timeout_s. Under MPI, a failure other
 * than the ranks' config comparison leaves MPI initialized (another rank
 * may be stopped or inside a collective, and MPI_Finalize would wait for
 * it): the caller then ends the job with dpt_comm_mpi_abort().
 * Errors: DPT_EINVAL (usage: exit 2) and runtime errors (exit 1). */
int dpt_train_run(const dpt_config_t *cfg, const dpt_run_options_t *options,
                  dpt_run_reason_t *reason);

/* ---- the env of a config ------------------------------------------------------ */

/* The env class an RL config trains on (finalized config of job ppo or
 * ddppo): the built-in or plug-in `env` configured with its env_config.*
 * entries. *out is the caller's (dpt_env_class_destroy). DPT_EINVAL naming
 * the env and the entry for an unknown, mistyped or out-of-range value, or
 * for a config of another job; DPT_ENOENT for an unknown env. */
int dpt_config_make_env(const dpt_config_t *cfg, dpt_env_class_t **out);

/* ---- several seeds ---------------------------------------------------------- */

/* One run of dpt_train_seeds: how it ended and what it reached. */
typedef struct dpt_seed_run {
    uint64_t seed;
    int started; /* 0: never started (a stop request came first) */
    int status;  /* DPT_OK, or the run's error (message in `error`) */
    char error[512];
    char dir[4096]; /* its run directory ("" when none was made) */
    dpt_run_reason_t reason;
    uint64_t iterations; /* training_iteration at the end */
    uint64_t timesteps;  /* env steps (RL) or samples (supervised) at the end */
    double final;        /* RL: episode_reward_mean at the end; supervised:
                          * test_accuracy; NAN when there was no result */
    double time_s;       /* wall time of the run */
    int reached;         /* RL with stop_reward set: 1 once the mean return
                          * over >= 20 episodes reached it */
    uint64_t steps_to_target;
    double time_to_target_s;
} dpt_seed_run_t;

/* Runs cfg once per seed (the key `seed` set to seeds[i]), `parallel` runs
 * at a time (0: as many as the cores hold, given each run's threads:
 * num_workers for ddppo, num_devices otherwise). Each run gets its own
 * directory: OUTPUT_DIR/seed-S when output_dir is set, else a new
 * runs/JOB-LABEL-seedS-TIME. options (may be NULL): resume_dir must be NULL;
 * stop_flag stops every run (reason DPT_RUN_STOPPED, after a checkpoint)
 * and, once set, no other run starts (started 0); on_event gets every
 * run's events, one at a time (ev->dir tells the runs apart). runs[i]
 * describes seeds[i] (n entries, caller's storage). A run that fails does
 * not stop the others.
 * Not under mpirun. Returns DPT_OK when every run succeeded, else the
 * first failed run's status with "seed S: its message"; DPT_EINVAL for bad
 * arguments (no seeds, a repeated seed, resume_dir, under mpirun). */
int dpt_train_seeds(const dpt_config_t *cfg, const uint64_t *seeds, size_t n, size_t parallel,
                    const dpt_run_options_t *options, dpt_seed_run_t *runs);

/* What several seeds reached: over the runs that succeeded and ran to their
 * end (ok of them), the mean, standard deviation (n - 1) and interquartile
 * mean (the mean of the middle half: floor(ok/4) runs cut off each end) of
 * `final`; and over those of them that reached stop_reward (reached), the
 * median steps and time to it (NAN when none did). Runs stopped by a stop
 * request before their end (stopped) and runs never started (not_started)
 * are left out of every figure: a stopped run's last return is not a final
 * one. */
typedef struct dpt_seeds_summary {
    size_t runs, ok, reached;
    size_t stopped, not_started;
    double mean, std, iqm;
    double median_steps_to_target, median_time_to_target_s;
} dpt_seeds_summary_t;

void dpt_seeds_summarize(const dpt_seed_run_t *runs, size_t n, dpt_seeds_summary_t *out);

/* ---- metrics of a run -------------------------------------------------------- */

/* The rows of a run's result.jsonl as columns: one per metric name found in
 * any row, in order of first appearance, named as the run wrote it (nested
 * objects joined with '/': "info/learner/default_policy/policy_loss"). */
typedef struct dpt_metrics_table {
    size_t rows, cols;
    char **names;    /* cols names (owned by the table) */
    double **values; /* values[c][r]: metric c of row r, NAN where the row holds null or
                      * lacks it (owned by the table) */
} dpt_metrics_table_t;

/* Reads result.jsonl: `path` names the file or a run directory holding it.
 * Values are numbers, null or nested objects (what dpt writes); a last line
 * without its newline (cut by a kill) is left out, blank lines are skipped.
 * *out is the caller's until dpt_metrics_destroy (NULL on failure).
 * Errors: DPT_ENOENT (no such file, or a directory without result.jsonl),
 * DPT_EFORMAT naming the file, line and byte (not a JSON object of
 * numbers, nulls and objects; a name longer than 511 bytes; nesting deeper
 * than 32), DPT_EIO, DPT_ENOMEM. */
int dpt_metrics_load(dpt_metrics_table_t **out, const char *path);
/* Frees a table; NULL is a no-op. */
void dpt_metrics_destroy(dpt_metrics_table_t *t);
/* The column called `name` (t->rows values; borrowed from t), or NULL. */
const double *dpt_metrics_column(const dpt_metrics_table_t *t, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* DPT_TRAIN_H */
