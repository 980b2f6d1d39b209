/*
 * tools/config.h — the configuration of `dpt train`.
 *
 * One table (DPT_CONFIG_KEYS) lists every key: name, type, default, range or
 * choices, and meaning. It generates the key enum, the parser's lookup, the
 * defaults and `dpt train --help`. A config file is `key = value` lines with
 * `#` comments; `--set key=value` overrides a value after the file is read.
 * Unknown keys are errors naming the closest valid key; values are type- and
 * range-checked with the file name and line in the message.
 */
#ifndef DPT_TOOLS_CONFIG_H
#define DPT_TOOLS_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* X(name, type, default, min, max, choices, help)
 * types: INT (int64), FLOAT (double), STR, BOOL (true/false/1/0/yes/no),
 * ENUM (one of `choices`, separated by '|'). min/max apply to INT/FLOAT. */
#define DPT_CONFIG_KEYS(X)                                                                       \
    X(job, ENUM, "supervised", 0, 0, "supervised|ppo|ddppo",                                     \
      "what to train: supervised classification, PPO, or decentralized DD-PPO")                 \
    X(seed, INT, "1", 0, 4294967295.0, "", "random seed of every stream in the run")            \
    X(output_dir, STR, "runs/dpt", 0, 0, "", "directory for result.jsonl, progress.csv, config and checkpoints") \
    X(checkpoint_every, INT, "1", 0, 1e9, "", "write a checkpoint every N iterations (0 = only at the end)") \
    X(keep_checkpoints, INT, "3", 1, 1000, "", "how many recent checkpoints to keep")           \
    /* supervised */                                                                             \
    X(dataset, ENUM, "fashion_mnist", 0, 0, "fashion_mnist|csv", "supervised data source")     \
    X(data_dir, STR, "/usr/share/datasets/fashion-mnist", 0, 0, "", "directory of the IDX files (Fashion-MNIST)") \
    X(train_csv, STR, "", 0, 0, "", "csv dataset: training file")                               \
    X(test_csv, STR, "", 0, 0, "", "csv dataset: test file")                                    \
    X(label_column, STR, "label", 0, 0, "", "csv dataset: name of the integer label column")    \
    X(hidden, STR, "256,128", 0, 0, "", "hidden layer sizes, comma-separated")                  \
    X(activation, ENUM, "relu", 0, 0, "relu|tanh", "hidden activation")                        \
    X(epochs, INT, "10", 1, 1e6, "", "supervised: passes over the training set")                \
    X(batch_size, INT, "128", 1, 1e6, "", "supervised: minibatch rows per step (all devices)") \
    X(optimizer, ENUM, "adam", 0, 0, "sgd|momentum|adam|adamw", "optimizer")                   \
    X(lr, FLOAT, "0.001", 0, 10, "", "learning rate")                                          \
    X(lr_schedule, ENUM, "constant", 0, 0, "constant|linear", "learning-rate schedule (linear decays to lr_end)") \
    X(lr_end, FLOAT, "0", 0, 10, "", "final learning rate of the linear schedule")              \
    X(momentum, FLOAT, "0.9", 0, 0.999999, "", "momentum coefficient")                         \
    X(nesterov, BOOL, "false", 0, 0, "", "Nesterov momentum")                                   \
    X(adam_eps, FLOAT, "1e-8", 1e-30, 1, "", "Adam epsilon")                                   \
    X(weight_decay, FLOAT, "0", 0, 10, "", "weight decay (L2, or decoupled for adamw)")        \
    X(grad_clip, FLOAT, "0", 0, 1e9, "", "global-norm gradient clipping (0 = off)")            \
    X(towers_mode, ENUM, "ps", 0, 0, "ps|replicated|async", "how tower gradients combine")     \
    X(num_devices, INT, "2", 1, 256, "", "towers (CPU threads) per process")                   \
    X(shuffle, BOOL, "true", 0, 0, "", "supervised: shuffle the training set every epoch")      \
    /* reinforcement learning */                                                                 \
    X(env, STR, "CartPole-v1", 0, 0, "", "environment name (built-in) or the path of a plug-in (.so)") \
    X(num_workers, INT, "2", 1, 1024, "", "ddppo: worker threads per process")                 \
    X(num_envs_per_worker, INT, "4", 1, 65536, "", "envs stepped by each worker")               \
    X(rollout_fragment_length, INT, "128", 1, 1e7, "", "steps per env per iteration")          \
    X(train_batch_size, INT, "0", 0, 1e9, "", "ppo: rows per iteration (0 = fragment x envs); ddppo derives it and refuses it") \
    X(sgd_minibatch_size, INT, "128", 1, 1e9, "", "rows per SGD minibatch (per worker for ddppo)") \
    X(num_sgd_iter, INT, "4", 1, 1000, "", "epochs over each batch")                           \
    X(total_timesteps, INT, "500000", 1, 1e12, "", "env steps to train for (all workers)")     \
    X(stop_iters, INT, "0", 0, 1e12, "", "stop once training_iteration reaches this (0 = off); schedules still span epochs / total_timesteps") \
    X(stop_reward, FLOAT, "0", -1e30, 1e30, "", "stop once episode_reward_mean reaches this (0 = off)") \
    X(gamma, FLOAT, "0.99", 0, 1, "", "discount factor")                                       \
    X(lambda, FLOAT, "0.95", 0, 1, "", "GAE lambda")                                            \
    X(clip_param, FLOAT, "0.2", 0, 10, "", "PPO ratio clip")                                    \
    X(vf_clip_param, FLOAT, "0.2", 0, 1e9, "", "value clip (0 = off)")                        \
    X(vf_loss_coeff, FLOAT, "0.5", 0, 1e6, "", "value loss coefficient")                      \
    X(entropy_coeff, FLOAT, "0.01", 0, 1e6, "", "entropy bonus coefficient")                  \
    X(reward_scale, FLOAT, "1", 1e-9, 1e9, "", "multiply rewards by this for learning (returns are reported unscaled)") \
    X(normalize_advantages, BOOL, "true", 0, 0, "", "normalize advantages per minibatch")       \
    X(policy_hidden, STR, "64,64", 0, 0, "", "actor and critic hidden sizes")                 \
    X(sync_frac, FLOAT, "0.6", 0, 1, "", "ddppo: preempt stragglers once this fraction of workers finished collecting (1 = off)") \
    X(check_weights_every, INT, "10", 0, 1e9, "", "ddppo: verify identical weights every N iterations (0 = off)") \
    X(eval_episodes, INT, "10", 0, 1e6, "", "episodes of the greedy policy evaluated at the end")

typedef enum dpt_config_key {
#define DPT__CFG_ENUM(name, type, def, lo, hi, choices, help) DPT_CFG_##name,
    DPT_CONFIG_KEYS(DPT__CFG_ENUM)
#undef DPT__CFG_ENUM
    DPT_CFG_COUNT
} dpt_config_key_t;

typedef enum { DPT_CFG_T_INT, DPT_CFG_T_FLOAT, DPT_CFG_T_STR, DPT_CFG_T_BOOL, DPT_CFG_T_ENUM } dpt_config_type_t;

#define DPT_CONFIG_STR_MAX 256

typedef struct dpt_config_value {
    int64_t i;                 /* INT, BOOL, ENUM (index into choices) */
    double f;                  /* FLOAT */
    char s[DPT_CONFIG_STR_MAX]; /* STR and ENUM (the name) */
    int set;                   /* given in a file or by --set (not a default) */
} dpt_config_value_t;

typedef struct dpt_config {
    dpt_config_value_t v[DPT_CFG_COUNT];
    char source[DPT_CONFIG_STR_MAX]; /* the config file read, if any */
} dpt_config_t;

/* Fills every key with its default. */
void dpt_config_defaults(dpt_config_t *c);
/* Reads a config file. Errors (DPT_ENOENT, DPT_EINVAL with "FILE:LINE: ..."):
 * missing file, syntax, unknown key (naming the closest), duplicate key,
 * bad type or range. */
int dpt_config_load(dpt_config_t *c, const char *path);
/* Applies "key=value" (from --set). */
int dpt_config_set(dpt_config_t *c, const char *assignment);
/* Writes the full config (every key) as a config file. */
int dpt_config_save(const dpt_config_t *c, const char *path);
/* A digest of the values that change results (everything but output and
 * checkpoint bookkeeping and stop conditions), for resume checks. */
uint64_t dpt_config_digest(const dpt_config_t *c);
/* Prints every key with type, default and meaning. */
void dpt_config_print_help(void *file);

const char *dpt_config_key_name(dpt_config_key_t k);

#define CFG_I(c, key) ((c)->v[DPT_CFG_##key].i)
#define CFG_F(c, key) ((c)->v[DPT_CFG_##key].f)
#define CFG_S(c, key) ((c)->v[DPT_CFG_##key].s)
#define CFG_SET(c, key) ((c)->v[DPT_CFG_##key].set)

/* Parses a comma-separated list of positive sizes ("256,128") into out
 * (at most max entries); returns the count or a negative DPT_E... code. */
int dpt_config_parse_sizes(const char *s, size_t *out, int max);

#endif
