/*
 * dpt/rl.h — actor-critic policies, GAE and the PPO loss.
 *
 * A policy is two MLPs over the observation, sharing one parameter arena:
 * an actor (tanh hidden layers, output = logits for discrete actions or the
 * mean for box actions, plus a state-independent "log_std" vector) and a
 * critic (tanh hidden layers, one output: the state value). Initialisation
 * is the usual one for PPO: orthogonal, gain sqrt(2) for hidden layers,
 * 0.01 for the actor's output, 1 for the critic's, zero biases, log_std 0.
 *
 * The PPO loss is exposed as a dpt_model_t, so the towers engine and the
 * DD-PPO workers train it like any other model. It reads these batch
 * columns (DPT_PPO_COL_*): obs [obs_dim] f32, actions (i32 [1] or f32
 * [action_dim]), logp [1] (behaviour log-prob), advantages [1], returns [1],
 * values [1] (value predictions at sampling time, for value clipping).
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

/* Creates a policy for environments of class `cls` (borrowed) with the given
 * hidden sizes (1..DPT_POLICY_MAX_HIDDEN layers) for batches of at most
 * max_batch rows, owning its variable table. Errors: DPT_EINVAL, DPT_ENOMEM. */
int dpt_policy_create(dpt_policy_t **p, const dpt_env_class_t *cls, const size_t *hidden,
                      int nhidden, size_t max_batch);
void dpt_policy_destroy(dpt_policy_t *p);
const dpt_vartable_t *dpt_policy_vars(const dpt_policy_t *p);
const dpt_env_class_t *dpt_policy_env_class(const dpt_policy_t *p);
size_t dpt_policy_max_batch(const dpt_policy_t *p);
/* Writes the initial parameters into `params` (an arena of the table's size). */
void dpt_policy_init_params(const dpt_policy_t *p, float *params, dpt_rng_t *rng);

/* Acts on obs [n, obs_dim] (n <= max_batch): samples actions from `rng`, or
 * takes the greedy action (arg-max / mean) when rng is NULL. Writes actions
 * ([n] int32 or [n, action_dim] float), and when not NULL logp [n] and
 * values [n]. Errors: DPT_EINVAL, DPT_ENUMERIC (non-finite observation). */
int dpt_policy_act(dpt_policy_t *p, const float *params, const float *obs, size_t n, dpt_rng_t *rng,
                   void *actions, float *logp, float *values);
/* Critic only: values [n] of obs [n, obs_dim]. */
int dpt_policy_value(dpt_policy_t *p, const float *params, const float *obs, size_t n,
                     float *values);

/* The PPO loss over this policy as a trainable model. The returned model
 * borrows `p` (its replicate() creates an equal policy per device). */
dpt_model_t dpt_policy_ppo_model(dpt_policy_t *p, const dpt_ppo_loss_params_t *hp);

/* Adds the PPO columns to a batch over caller-owned arrays (rows each). */
int dpt_ppo_batch(dpt_batch_t *b, const dpt_env_class_t *cls, size_t rows, float *obs,
                  void *actions, float *logp, float *adv, float *returns, float *values);

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
