/*
 * dpt/rl.h — actor-critic policies, GAE, V-trace and the PPO loss.
 *
 * A policy is two MLPs over the observation, sharing one parameter arena:
 * an actor (tanh hidden layers, output = logits for discrete actions or the
 * mean for box actions, plus a state-independent "log_std" vector) and a
 * critic (tanh hidden layers, one output: the state value). Initialisation
 * is the usual one for PPO: orthogonal, gain sqrt(2) for hidden layers,
 * 0.01 for the actor's output, 1 for the critic's, zero biases, log_std 0.
 *
 * A recurrent policy (spec.use_lstm) puts one LSTM layer (dpt/lstm.h, cell
 * size H) in front of both MLPs, which then read the LSTM's output instead
 * of the observation (RLlib's use_lstm with the value function on the same
 * torso). The LSTM's input at step t of an episode is
 *   x_t = [obs_t, prev action, prev reward]
 * where the previous action (one-hot for discrete actions, the action
 * vector for box actions) and the previous (unscaled) reward are appended
 * only when lstm_use_prev_action / lstm_use_prev_reward are set, and are 0
 * at the first step of an episode; the reward is the env's, times
 * spec.prev_reward_scale. The state (h, c), [H] each, starts at 0
 * in every episode; while acting, the caller carries it from step to step
 * (dpt_policy_act_state). Variables: "lstm.weight_ih" [4H, I],
 * "lstm.weight_hh" [4H, H], "lstm.bias" [4H] (PyTorch's nn.LSTM layout,
 * gates i, f, g, o; see dpt/lstm.h), then the actor's and critic's as for a
 * feed-forward policy, with input size H.
 *
 * The PPO loss is exposed as a dpt_model_t, so the towers engine and the
 * DD-PPO workers train it like any other model. It reads these batch
 * columns (DPT_PPO_COL_*): obs [obs_dim] f32, actions (i32 [1] or f32
 * [action_dim]), logp [1] (behaviour log-prob), advantages [1], returns [1],
 * values [1] (value predictions at sampling time, for value clipping).
 *
 * A recurrent policy trains on sequence batches (dpt/batch.h, seq_len = L):
 * rows s L .. s L + L - 1 are the steps of sequence s, padded at the end,
 * and these columns come in addition (dpt_ppo_batch_seq):
 *   seq_lens [1] i32, per sequence: its real steps (1..L); rows past them
 *            are padding and count for nothing
 *   state_in_0, state_in_1 [H] f32, per sequence: the LSTM's h and c before
 *            the sequence's first step (as they were while sampling)
 *   prev_actions (i32 [1], -1 for none, or f32 [action_dim]), prev_rewards
 *            [1] f32 (the env's rewards): only when the policy reads them
 * The LSTM runs over each sequence from its state; every mean below is then
 * over the batch's valid (unpadded) steps, and dpt_loss_out_t.rows is their
 * number (the towers engine weights statistics, and DD-PPO gradients, by
 * it). Padded rows get no gradient.
 *
 *   ratio   = exp(logp_new - logp_old)
 *   L_pi    = mean(max(-A ratio, -A clip(ratio, 1 - eps, 1 + eps)))
 *   L_v     = 0.5 mean(max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2))
 *             (or 0.5 mean((V - R)^2) when c = 0)
 *   L       = L_pi - ent_coef * mean(H) + vf_coef * L_v
 * Reported extra statistics (dpt_loss_out_t.extra[DPT_PPO_STAT_*]): L_pi,
 * L_v, mean entropy, approx KL = mean((ratio - 1) - log ratio), clip
 * fraction = mean(|ratio - 1| > eps).
 */
#ifndef DPT_RL_H
#define DPT_RL_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/batch.h"
#include "dpt/env.h"
#include "dpt/nn.h"
#include "dpt/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_PPO_COL_OBS "obs"
#define DPT_PPO_COL_ACTIONS "actions"
#define DPT_PPO_COL_LOGP "logp"
#define DPT_PPO_COL_ADV "advantages"
#define DPT_PPO_COL_RETURNS "returns"
#define DPT_PPO_COL_VALUES "values"
/* Sequence batches of recurrent policies (RLlib's names). */
#define DPT_PPO_COL_SEQ_LENS "seq_lens"
#define DPT_PPO_COL_STATE_H "state_in_0"
#define DPT_PPO_COL_STATE_C "state_in_1"
#define DPT_PPO_COL_PREV_ACTIONS "prev_actions"
#define DPT_PPO_COL_PREV_REWARDS "prev_rewards"

enum {
    DPT_PPO_STAT_POLICY_LOSS = 0,
    DPT_PPO_STAT_VF_LOSS = 1,
    DPT_PPO_STAT_ENTROPY = 2,
    DPT_PPO_STAT_KL = 3,
    DPT_PPO_STAT_CLIPFRAC = 4,
};

#define DPT_POLICY_MAX_HIDDEN 4

/* PPO loss hyper-parameters. */
typedef struct dpt_ppo_loss_params {
    float clip_param;    /* eps, e.g. 0.2 */
    float vf_clip_param; /* c; 0 disables value clipping */
    float vf_coef;       /* e.g. 0.5 */
    float ent_coef;      /* e.g. 0.01 */
} dpt_ppo_loss_params_t;

typedef struct dpt_policy dpt_policy_t;

/* The shape of a policy. */
typedef struct dpt_policy_spec {
    size_t hidden[DPT_POLICY_MAX_HIDDEN]; /* actor and critic hidden sizes */
    int nhidden;                          /* 1..DPT_POLICY_MAX_HIDDEN */
    int use_lstm;                         /* 1: an LSTM in front of both MLPs */
    size_t lstm_cell_size;                /* H (use_lstm) */
    int lstm_use_prev_action;             /* append the previous action to x_t */
    int lstm_use_prev_reward;             /* append the previous reward to x_t */
    float prev_reward_scale;              /* the appended reward is the env's times
                                           * this (the learner's reward_scale);
                                           * 0 means 1 */
    size_t max_seq_len;                   /* use_lstm: steps per training sequence,
                                           * 1 for a policy that only acts */
    /* A shared encoder (the training key `network`): a sequential stack
     * (dpt/nn.h) on the observation, shaped as obs_shape, whose output
     * feeds the LSTM or, without one, both the actor and the critic in
     * place of the observation. Its variables are "encoder.<i>.weight"
     * and ".bias", before the others. nencoder 0: none (the heads read the
     * observation, as before). */
    size_t nencoder;
    dpt_layer_spec_t encoder[DPT_NETWORK_MAX_LAYERS];
    dpt_shape_t obs_shape; /* the observation's shape; zero: the class's (dpt_env_obs_shape) */
} dpt_policy_spec_t;

/* Creates a policy for environments of class `cls` (borrowed) with the given
 * hidden sizes (1..DPT_POLICY_MAX_HIDDEN layers) for batches of at most
 * max_batch rows, owning its variable table. Errors: DPT_EINVAL, DPT_ENOMEM. */
int dpt_policy_create(dpt_policy_t **p, const dpt_env_class_t *cls, const size_t *hidden,
                      int nhidden, size_t max_batch);
/* The same from a spec (copied). A recurrent policy takes calls of at most
 * max_batch rows: acting on up to max_batch envs at once, or training on
 * up to max_batch / max_seq_len sequences of max_seq_len steps (max_batch
 * must be a multiple of max_seq_len). Errors: DPT_EINVAL naming the field,
 * DPT_EOVERFLOW, DPT_ENOMEM. */
int dpt_policy_create_ex(dpt_policy_t **p, const dpt_env_class_t *cls,
                         const dpt_policy_spec_t *spec, size_t max_batch);
void dpt_policy_destroy(dpt_policy_t *p);
const dpt_vartable_t *dpt_policy_vars(const dpt_policy_t *p);
const dpt_env_class_t *dpt_policy_env_class(const dpt_policy_t *p);
size_t dpt_policy_max_batch(const dpt_policy_t *p);
/* The spec the policy was made from (borrowed). */
const dpt_policy_spec_t *dpt_policy_spec(const dpt_policy_t *p);
/* Floats of one env's recurrent state: H for h and H for c (0 when the
 * policy is not recurrent). */
size_t dpt_policy_state_size(const dpt_policy_t *p);
/* Writes the initial parameters into `params` (an arena of the table's size). */
void dpt_policy_init_params(const dpt_policy_t *p, float *params, dpt_rng_t *rng);

/* Acts on obs [n, obs_dim] (n <= max_batch): samples actions from `rng`, or
 * takes the greedy action (arg-max / mean) when rng is NULL. Writes actions
 * ([n] int32 or [n, action_dim] float), and when not NULL logp [n] and
 * values [n]. A recurrent policy acts from the zero state (the first step
 * of an episode); dpt_policy_act_state carries a state. Errors:
 * DPT_EINVAL, DPT_ENUMERIC (non-finite observation). */
int dpt_policy_act(dpt_policy_t *p, const float *params, const float *obs, size_t n, dpt_rng_t *rng,
                   void *actions, float *logp, float *values);
/* Critic only: values [n] of obs [n, obs_dim] (from the zero state). */
int dpt_policy_value(dpt_policy_t *p, const float *params, const float *obs, size_t n,
                     float *values);

/* What a recurrent policy carries from one step of n envs to the next
 * (caller owns every array; NULL means zeros, or no previous actions). A
 * feed-forward policy ignores it. */
typedef struct dpt_policy_state {
    float *h, *c;              /* [n, H]: the LSTM state before the step */
    const void *prev_actions;  /* [n] int32 (-1: none) or [n, action_dim] float */
    const float *prev_rewards; /* [n] the env's rewards */
} dpt_policy_state_t;

/* dpt_policy_act for one step of n envs from `state` (NULL: zeros):
 * afterwards state->h and state->c (when not NULL) hold the state after
 * the step, to pass with the next observation. The previous actions and
 * rewards are the caller's to update (and to zero, with h and c, when an
 * episode starts). */
int dpt_policy_act_state(dpt_policy_t *p, const float *params, const float *obs,
                         const dpt_policy_state_t *state, size_t n, dpt_rng_t *rng, void *actions,
                         float *logp, float *values);
/* Values [n] of obs after `state` (NULL: zeros), which is not changed: the
 * value of an observation the policy will not act on (bootstrapping). */
int dpt_policy_value_state(dpt_policy_t *p, const float *params, const float *obs,
                           const dpt_policy_state_t *state, size_t n, float *values);

/* The PPO loss over this policy as a trainable model. The returned model
 * borrows `p` (its replicate() creates an equal policy per device). Without
 * an LSTM its loss_grad stores the gradient into every element of grads
 * (DPT_MODEL_STORES_GRADS, dpt/nn.h); with one it adds to grads. */
dpt_model_t dpt_policy_ppo_model(dpt_policy_t *p, const dpt_ppo_loss_params_t *hp);

/* ---- V-trace (APPO and IMPALA) ------------------------------------------------
 *
 * A V-trace batch holds fragments of T consecutive steps of one env, each
 * followed by a bootstrap row: sequences of T + 1 rows (seq_len), so the
 * towers never split a fragment. Step rows carry the observation, the
 * action, the behaviour policy's log-probability of it, the reward and the
 * discount (gamma, or 0 where the episode ended: terminated, or truncated
 * with the bootstrap value already added to the reward); the bootstrap row
 * carries the observation after the last step (its other columns are not
 * read). The loss computes, from the current weights, V-trace targets
 * (dpt_vtrace below; c-bar = 1 as in RLlib) along each fragment
 * and trains on the T step rows:
 *   APPO:   the PPO clipped surrogate of the ratio pi / mu with the V-trace
 *           policy-gradient advantages
 *   IMPALA: -A log pi (A = the advantages, their importance weights clipped
 *           at clip_pg_rho)
 * plus vf_coef * 0.5 (V - vs)^2 and minus ent_coef times the entropy, each
 * the mean over the step rows. The advantages and targets are constants
 * for the gradient. Recurrent policies are not supported. */
#define DPT_VTRACE_COL_REWARDS "rewards"
#define DPT_VTRACE_COL_DISCOUNTS "discounts"

typedef struct dpt_vtrace_loss_params {
    int impala;        /* 1: IMPALA's -A log pi; 0: APPO's clipped surrogate */
    float clip_param;  /* APPO's ratio clip, e.g. 0.2 */
    float vf_coef;     /* e.g. 0.5 */
    float ent_coef;    /* e.g. 0.01 */
    float clip_rho;    /* rho-bar of the value targets, e.g. 1 */
    float clip_pg_rho; /* clip of the advantages' importance weights, e.g. 1 */
} dpt_vtrace_loss_params_t;

/* The V-trace loss over this policy as a trainable model (borrows p). Its
 * loss_grad stores the gradient (DPT_MODEL_STORES_GRADS). */
dpt_model_t dpt_policy_vtrace_model(dpt_policy_t *p, const dpt_vtrace_loss_params_t *hp);
/* A V-trace batch of `fragments` fragments of T steps over caller-owned
 * arrays of fragments * (T + 1) rows. Errors: DPT_EINVAL (T = 0, too many
 * rows, or a column error). */
int dpt_vtrace_batch(dpt_batch_t *b, const dpt_env_class_t *cls, size_t fragments, size_t T,
                     float *obs, void *actions, float *logp, float *rewards, float *discounts);

/* Adds the PPO columns to a batch over caller-owned arrays (rows each). */
int dpt_ppo_batch(dpt_batch_t *b, const dpt_env_class_t *cls, size_t rows, float *obs,
                  void *actions, float *logp, float *adv, float *returns, float *values);
/* Makes a batch of dpt_ppo_batch() a sequence batch for the recurrent
 * policy p: sets seq_len and adds seq_lens [rows / seq_len], state_in_0 and
 * state_in_1 [rows / seq_len, H], and prev_actions / prev_rewards [rows]
 * when p reads them (those pointers are ignored otherwise). Errors:
 * DPT_EINVAL (p not recurrent, rows not a multiple of seq_len, seq_len 0). */
int dpt_ppo_batch_seq(dpt_batch_t *b, const dpt_policy_t *p, size_t seq_len, int32_t *seq_lens,
                      float *state_h, float *state_c, void *prev_actions, float *prev_rewards);

/*
 * Generalized advantage estimation over a rollout of T steps x N envs
 * (arrays [T, N], time-major). dones[t, i] = 1 when env i's episode ended
 * at step t (terminated or truncated); for a truncation the caller has
 * already added gamma * V(final observation) to rewards[t, i]. last_values
 * [N] are the values of the observations after the last step.
 *   delta_t = r_t + gamma V_{t+1} (1 - done_t) - V_t
 *   A_t     = delta_t + gamma lambda (1 - done_t) A_{t+1}
 *   R_t     = A_t + V_t
 * where V_T = last_values. Sums in double.
 */
void dpt_gae(const float *rewards, const float *values, const uint8_t *dones,
             const float *last_values, size_t T, size_t N, double gamma, double lambda,
             float *advantages, float *returns);

/*
 * V-trace targets (Espeholt et al. 2018, IMPALA) for a fragment of T steps x
 * N envs (arrays [T, N], time-major, as rollouts are laid out), as RLlib's
 * APPO and IMPALA compute them (lambda = 1, c clipped at 1). Inputs:
 * behaviour_logp and target_logp, the log-probabilities of the actions taken
 * under the policy that sampled them (mu) and the one being trained (pi);
 * rewards; values V(x_t) under pi; discounts gamma_t = gamma (1 - done_t)
 * (0 where an episode ended at step t, so nothing flows across the end;
 * each in [0, 1]); bootstrap_values [N], V(x_T) of the observations after the
 * last step. With V_T = bootstrap_values:
 *   rho_t     = exp(target_logp_t - behaviour_logp_t)
 *   rhobar_t  = min(clip_rho_threshold, rho_t),  c_t = min(1, rho_t)
 *   delta_t   = rhobar_t (r_t + gamma_t V_{t+1} - V_t)
 *   vs_t      = V_t + delta_t + gamma_t c_t (vs_{t+1} - V_{t+1}),  vs_T = V_T
 *             = V_t + sum_{k=t}^{T-1} (prod_{i=t}^{k-1} gamma_i c_i) delta_k
 *   pg_adv_t  = min(clip_pg_rho_threshold, rho_t) (r_t + gamma_t vs_{t+1} - V_t)
 * Thresholds must be > 0; INFINITY means no clipping. Sums in double.
 * Outputs vs and pg_advantages [T, N] must not overlap the inputs; after
 * an error their contents are unspecified. Errors: DPT_EINVAL (NULL array,
 * T or N 0, a threshold not > 0, a discount outside [0, 1]), DPT_EOVERFLOW
 * (T N), DPT_ENUMERIC (a non-finite input, or an output beyond the float
 * range, named with its step and env).
 */
int dpt_vtrace(const float *behaviour_logp, const float *target_logp, const float *rewards,
               const float *values, const float *discounts, const float *bootstrap_values, size_t T,
               size_t N, double clip_rho_threshold, double clip_pg_rho_threshold, float *vs,
               float *pg_advantages);

/* How PPO and DD-PPO standardize advantages (dpt_train's key
 * normalize_advantages). */
#define DPT_ADV_NORM_LIST(X)                                                     \
    X(DPT_ADV_NORM_MINIBATCH, "minibatch") /* each minibatch over its rows */    \
    X(DPT_ADV_NORM_BATCH, "batch")         /* the whole batch of an iteration */ \
    X(DPT_ADV_NORM_OFF, "off")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_adv_norm {
#define DPT__ADV_NORM_ENUM(sym, name) sym,
    DPT_ADV_NORM_LIST(DPT__ADV_NORM_ENUM)
#undef DPT__ADV_NORM_ENUM
    DPT_ADV_NORM_COUNT
} dpt_adv_norm_t;
/* clang-format on */

/* Normalises x[0..n) to zero mean and unit standard deviation
 * (x - mean) / (std + 1e-8), population std, sums in double. */
void dpt_normalize(float *x, size_t n);

/* 1 - Var(returns - values) / Var(returns) (RLlib's vf_explained_var);
 * 0 when Var(returns) is 0. */
double dpt_explained_variance(const float *values, const float *returns, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* DPT_RL_H */
