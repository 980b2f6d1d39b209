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
#include "episode_window.h"

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
    /* Recurrent policies (H > 0): what each env carries into its next step
     * (zeros at an episode's start), and what every step started from. */
    size_t H;               /* the LSTM's cell size; 0 = a feed-forward policy */
    float *h, *c;           /* [N, H] */
    void *prev_act;         /* [N, act_w] the env's last action */
    float *prev_rew;        /* [N] its last reward (the env's) */
    float *step_h, *step_c; /* [T*N, H] the state before each step */
    void *step_prev_act;    /* [T*N, act_w] */
    float *step_prev_rew;   /* [T*N] */
    float *boot_h, *boot_c; /* [N, H] truncation scratch */
    void *boot_pa;          /* [N, act_w] */
    float *boot_pr;         /* [N] */
    dpt_rng_t act_rng;
    /* Sampling on several devices (dpt__rollout_init_devices): a stream per
     * device, derived from act_rng at each collect; the episodes finished
     * at each step, [T*N] (rows where dones is set); box-action scratch
     * [devices * act_w]. */
    int devices;
    dpt_rng_t *dev_rng;
    double *dev_ep_ret;
    uint32_t *dev_ep_len;
    float *dev_act;
    /* Per-env action streams (dpt__rollout_env_streams; the invariant
     * order): env i draws from env_rng[i], re-keyed at each collect from
     * act_rng and its global index env_first + i; NULL otherwise. */
    dpt_rng_t *env_rng;
    uint32_t env_first;
    dpt__episode_window_t window; /* recent episodes */
    uint64_t episodes_total, episodes_this_iter;
} dpt__rollout_t;

/* lstm_cell_size: the cell size H of a recurrent policy that will collect
 * (its state is carried per env and recorded per step), 0 otherwise. */
int dpt__rollout_init(dpt__rollout_t *r, const dpt_env_class_t *cls, size_t num_envs, size_t T,
                      uint64_t seed, uint32_t rank, size_t lstm_cell_size);
void dpt__rollout_deinit(dpt__rollout_t *r);

/* Collects up to T steps with `policy` at `params`. After min_steps steps,
 * should_stop(ctx) (may be NULL) is asked before each further step. Then
 * computes last_values, GAE (advantages, returns) over the collected steps,
 * and folds finished episodes into the window. A recurrent policy acts
 * from each env's carried state, which starts at zero with every episode;
 * bootstrapped values (truncations, the last observation) are taken from
 * the state the env would carry. */
int dpt__rollout_collect(dpt__rollout_t *r, dpt_policy_t *policy, const float *params, double gamma,
                         double lambda, float reward_scale, size_t min_steps,
                         int (*should_stop)(void *ctx), void *ctx);

/* Prepares collecting on `devices` (>= 1) devices at once: each steps its
 * own contiguous range of the envs and runs its own policy on them
 * (feed-forward policies). Errors: DPT_EINVAL (a recurrent rollout),
 * DPT_ENOMEM. */
int dpt__rollout_init_devices(dpt__rollout_t *r, int devices);

/* Keys every env by its global index first + i (feed-forward policies
 * only), right after init: its env stream (dpt__vecenv_set_first; the envs
 * are reset anew) and its own action stream: act_rng is keyed by the seed
 * alone (rank 0), one number is drawn from it at each collect, and env i's
 * actions come from the stream keyed by that number and its global index,
 * so an env's steps do not depend on which device or worker steps it, nor on
 * how many there are. The checkpointed act_rng position is all they need.
 * Errors: DPT_EINVAL (a recurrent rollout), DPT_ENOMEM. */
int dpt__rollout_env_streams(dpt__rollout_t *r, uint64_t seed, uint32_t first);

/* dpt__rollout_collect (T steps, no early stop) with the envs split into
 * r->devices ranges (range d: envs [N d / D, N (d + 1) / D)), device d
 * stepping range d with policies[d] and its own action stream: run(runner,
 * fn, arg) calls fn(arg, d) on every device at once (dpt_towers_run). The
 * streams are drawn from act_rng at the start, so a run is reproducible
 * for a given device count, and the checkpointed state is act_rng's as
 * with one device. Episodes are recorded in the order one stepping thread
 * would record them. */
int dpt__rollout_collect_devices(
    dpt__rollout_t *r, dpt_policy_t *const *policies, const float *params, double gamma,
    double lambda, float reward_scale,
    int (*run)(void *runner, int (*fn)(void *arg, int device), void *arg), void *runner);

/* The buffers of a PPO batch as it is loaded into the towers: the rows of
 * dpt_ppo_batch(), and for recurrent policies the sequence columns of
 * dpt_ppo_batch_seq() plus a mask (1 = a real step, 0 = padding). */
typedef struct dpt__rl_batch {
    size_t cap_rows, cap_seqs;
    float *obs, *logp, *adv, *ret, *val; /* [cap_rows] (obs: x obs_dim) */
    void *act;                           /* [cap_rows, act_w] */
    int32_t *seq_lens;                   /* [cap_seqs] */
    float *h0, *c0;                      /* [cap_seqs, H] */
    void *prev_act;                      /* [cap_rows, act_w] */
    float *prev_rew;                     /* [cap_rows] */
    uint8_t *mask;                       /* [cap_rows] */
} dpt__rl_batch_t;

/* Buffers for `rows` rows of r's envs, and with r->H > 0 for `seqs`
 * sequences. Errors: DPT_ENOMEM, DPT_EOVERFLOW. */
int dpt__rl_batch_init(dpt__rl_batch_t *b, const dpt__rollout_t *r, size_t rows, size_t seqs);
void dpt__rl_batch_deinit(dpt__rl_batch_t *b);

/* Copies rollout rows idx[0..n) into the batch's first n rows:
 * observations, actions, behaviour log-probs, advantages, returns and
 * value predictions. */
void dpt__rollout_gather(const dpt__rollout_t *r, const size_t *idx, size_t n, dpt__rl_batch_t *b);

/* One sequence of a recurrent rollout: env's steps t0 .. t0 + len - 1. */
typedef struct dpt__chunk {
    uint32_t env, t0, len;
} dpt__chunk_t;

/* Most sequences dpt__rollout_chunk can make of T x N steps: every step
 * its own (one-step episodes). */
size_t dpt__rollout_max_chunks(const dpt__rollout_t *r);

/* Cuts the last collect()'s steps into sequences of at most L steps: each
 * env's steps are cut where an episode ends, at the fragment's start and
 * end, and after every L steps of an episode (RLlib's chop_into_sequences).
 * Writes them to out (room for dpt__rollout_max_chunks), env by env in
 * time order, and returns how many. */
size_t dpt__rollout_chunk(const dpt__rollout_t *r, size_t L, dpt__chunk_t *out);

/* Copies sequences chunks[order[0..n)] into the batch's first n sequences
 * of L rows: sequence s takes rows s L .. s L + L - 1, its steps first,
 * then padding rows (zeros; mask 0); seq_lens, h0, c0 (the state before its
 * first step), prev_act and prev_rew as the policy saw them. */
void dpt__rollout_gather_seq(const dpt__rollout_t *r, const dpt__chunk_t *chunks,
                             const size_t *order, size_t n, size_t L, dpt__rl_batch_t *b);

/* The rollout's resumable state (env states, RNG position, current
 * observations, episode window and counters) as bytes. */
size_t dpt__rollout_state_bytes(const dpt__rollout_t *r);
int dpt__rollout_save_state(const dpt__rollout_t *r, void *buf, size_t bytes);
int dpt__rollout_load_state(dpt__rollout_t *r, const void *buf, size_t bytes);
/* The saved state of r's N envs when they are envs [first, first + N) of
 * the nsrc rollouts saved in src (bytes[q] each, per envs each, in order;
 * feed-forward only): the action stream's position of the first; the
 * episode count summed over the saved rollouts and saved rollout 0's window
 * of recent episodes for the rollout of first = 0, none for the others (the
 * workers' figures add them up); each env's observation and runner state
 * from its own; into out (dpt__rollout_state_bytes(r) bytes). A DD-PPO run in the
 * invariant order resumed with another number of workers gives each its
 * envs this way; the result is checked and loaded as any saved state.
 * Errors: DPT_EINVAL (also: more than DPT__ROLLOUT_PICK_MAX sources),
 * DPT_EFORMAT. */
#define DPT__ROLLOUT_PICK_MAX 256 /* the most saved rollouts dpt__rollout_state_pick reads */
int dpt__rollout_state_pick(const dpt__rollout_t *r, const void *const *src, const size_t *bytes,
                            size_t nsrc, size_t per, size_t first, void *out, size_t out_bytes);

/* Every check of dpt__rollout_load_state, changing nothing. */
int dpt__rollout_check_state(const dpt__rollout_t *r, const void *buf, size_t bytes);
/* Every check of dpt_vecenv_load_state, changing nothing (src/rl/env.c). */
int dpt__vecenv_check_state(const dpt_vecenv_t *v, const void *buf, size_t bytes);

#endif
