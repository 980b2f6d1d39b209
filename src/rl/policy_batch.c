/*
 * The training batches of the policy losses (dpt_ppo_batch,
 * dpt_ppo_batch_seq, dpt_vtrace_batch) and the advantage helpers (dpt_gae,
 * dpt_normalize, dpt_explained_variance) of dpt/rl.h.
 */
#include "dpt/arena.h"
#include "dpt/rl.h"
#include "dpt/status.h"
#include "policy_impl.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

int dpt_vtrace_batch(dpt_batch_t *b, const dpt_env_class_t *cls, size_t fragments, size_t T,
                     float *obs, void *actions, float *logp, float *rewards, float *discounts)
{
    size_t rows;
    if (T == 0 || dpt_mul_size(fragments, T + 1, &rows))
        return dpt_error(DPT_EINVAL, "vtrace batch: %zu fragments of %zu steps", fragments, T);
    int discrete = cls->action_kind == DPT_ACTION_DISCRETE;
    dpt_batch_init(b, rows);
    b->seq_len = T + 1;
    int rc = dpt_batch_add(b, DPT_PPO_COL_OBS, DPT_F32, cls->obs_dim, 0, obs);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_ACTIONS, discrete ? DPT_I32 : DPT_F32,
                           discrete ? 1 : cls->action_dim, 0, actions);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_LOGP, DPT_F32, 1, 0, logp);
    if (!rc)
        rc = dpt_batch_add(b, DPT_VTRACE_COL_REWARDS, DPT_F32, 1, 0, rewards);
    if (!rc)
        rc = dpt_batch_add(b, DPT_VTRACE_COL_DISCOUNTS, DPT_F32, 1, 0, discounts);
    return rc;
}

int dpt_ppo_batch(dpt_batch_t *b, const dpt_env_class_t *cls, size_t rows, float *obs,
                  void *actions, float *logp, float *adv, float *returns, float *values)
{
    dpt_batch_init(b, rows);
    int discrete = cls->action_kind == DPT_ACTION_DISCRETE;
    int rc = dpt_batch_add(b, DPT_PPO_COL_OBS, DPT_F32, cls->obs_dim, 0, obs);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_ACTIONS, discrete ? DPT_I32 : DPT_F32,
                           discrete ? 1 : cls->action_dim, 0, actions);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_LOGP, DPT_F32, 1, 0, logp);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_ADV, DPT_F32, 1, 0, adv);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_RETURNS, DPT_F32, 1, 0, returns);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_VALUES, DPT_F32, 1, 0, values);
    return rc;
}

int dpt_ppo_batch_seq(dpt_batch_t *b, const dpt_policy_t *p, size_t seq_len, int32_t *seq_lens,
                      float *state_h, float *state_c, void *prev_actions, float *prev_rewards)
{
    if (!p->lstm)
        return dpt_error(DPT_EINVAL, "ppo batch: the policy is not recurrent");
    if (seq_len == 0 || b->rows % seq_len)
        return dpt_error(DPT_EINVAL, "ppo batch: %zu rows are not whole sequences of %zu", b->rows,
                         seq_len);
    b->seq_len = seq_len;
    size_t H = p->spec.lstm_cell_size;
    int rc = dpt_batch_add(b, DPT_PPO_COL_SEQ_LENS, DPT_I32, 1, 1, seq_lens);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_STATE_H, DPT_F32, H, 1, state_h);
    if (!rc)
        rc = dpt_batch_add(b, DPT_PPO_COL_STATE_C, DPT_F32, H, 1, state_c);
    if (!rc && p->spec.lstm_use_prev_action)
        rc = dpt_batch_add(b, DPT_PPO_COL_PREV_ACTIONS, p->discrete ? DPT_I32 : DPT_F32, p->act_w,
                           0, prev_actions);
    if (!rc && p->spec.lstm_use_prev_reward)
        rc = dpt_batch_add(b, DPT_PPO_COL_PREV_REWARDS, DPT_F32, 1, 0, prev_rewards);
    return rc;
}

/* ---- advantages ---------------------------------------------------------------- */

void dpt_gae(const float *rewards, const float *values, const uint8_t *dones,
             const float *last_values, size_t T, size_t N, double gamma, double lambda,
             float *advantages, float *returns)
{
    for (size_t i = 0; i < N; i++) {
        double next_adv = 0.0, next_v = (double)last_values[i];
        for (size_t t = T; t-- > 0;) {
            size_t k = t * N + i;
            double keep = dones[k] ? 0.0 : 1.0;
            double delta = (double)rewards[k] + gamma * next_v * keep - (double)values[k];
            double a = delta + gamma * lambda * keep * next_adv;
            advantages[k] = (float)a;
            returns[k] = (float)(a + (double)values[k]);
            next_adv = a;
            next_v = (double)values[k];
        }
    }
}

void dpt_normalize(float *x, size_t n)
{
    if (n == 0)
        return;
    double m = 0.0, s = 0.0;
    for (size_t i = 0; i < n; i++)
        m += (double)x[i];
    m /= (double)n;
    for (size_t i = 0; i < n; i++)
        s += ((double)x[i] - m) * ((double)x[i] - m);
    double sd = sqrt(s / (double)n) + 1e-8;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(((double)x[i] - m) / sd);
}

double dpt_explained_variance(const float *values, const float *returns, size_t n)
{
    if (n == 0)
        return 0.0;
    double mr = 0.0, md = 0.0;
    for (size_t i = 0; i < n; i++) {
        mr += (double)returns[i];
        md += (double)returns[i] - (double)values[i];
    }
    mr /= (double)n;
    md /= (double)n;
    double vr = 0.0, vd = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = (double)returns[i] - mr, d = (double)returns[i] - (double)values[i] - md;
        vr += r * r;
        vd += d * d;
    }
    return vr > 0.0 ? 1.0 - vd / vr : 0.0;
}
