/*
 * Internal to src/rl: the policy's state (policy.c) and its encoder
 * (policy_encoder.c). Not installed.
 */
#ifndef DPT_POLICY_IMPL_H
#define DPT_POLICY_IMPL_H

#include "dpt/lstm.h"
#include "nn/nn_impl.h"
#include "dpt/nn.h"
#include "dpt/rl.h"
#include "rl_trainers.h"

#include <stddef.h>
#include <stdint.h>

struct dpt_policy {
    const dpt_env_class_t *cls;
    dpt_policy_spec_t spec;
    dpt_vartable_t vars;
    dpt_seq_t *enc;   /* the encoder (spec.nencoder > 0), in front of the rest */
    dpt_lstm_t *lstm; /* recurrent: in front of the actor and the critic */
    dpt_seq_t *actor, *critic;
    size_t enc_dim; /* features a row the encoder gives (obs_dim without one) */
    float *denc;    /* encoder: the gradient of its output [max_batch, enc_dim] */
    float *dx;      /* encoder and LSTM: the LSTM's input gradient [max_batch, in_dim] */
    float *xobs; /* encoder and LSTM: the observations, padded rows zeroed [max_batch, obs_dim] */
    size_t max_batch, out_dim, log_std_off;
    size_t act_w;   /* values per action row: 1 (int32) or action_dim (float) */
    size_t in_dim;  /* recurrent: the LSTM's input size I */
    size_t max_seq; /* recurrent: sequences per call (max_batch / max_seq_len) */
    int discrete;
    dpt_ppo_loss_params_t hp;
    dpt_vtrace_loss_params_t vt; /* the V-trace model's (dpt_policy_vtrace_model) */
    /* scratch, [max_batch] or [max_batch, out_dim] */
    float *logp, *ent, *dlogp, *dent, *dz, *dv, *values;
    /* recurrent scratch, time-major: x [max_batch, I], y and dy
     * [max_batch, H], the loss's columns and the mask [max_batch] */
    float *x, *y, *dy, *tm_logp, *tm_adv, *tm_ret, *tm_val;
    void *tm_act;
    uint8_t *mask;
    /* discrete: what the loss's log-probabilities leave for its backward */
    dpt__categorical_cache_t cat;
};

/* The encoder of p's spec (when it has one) into p->enc, on the class's
 * observation shape, its variables appended to p->vars; p->enc_dim its
 * output size (the observation size without one). DPT_EINVAL naming the
 * layer and the shapes, DPT_ENOMEM. */
/* dpt_policy_act() of a feed-forward policy with one stream per row: row
 * i's action is drawn from rngs[i] (the invariant order's per-env
 * streams), the same bits whichever rows share the call. */
int dpt__policy_act_rows(dpt_policy_t *p, const float *params, const float *obs, size_t n,
                         dpt_rng_t *rngs, void *actions, float *logp, float *values);

int dpt__policy_encoder_create(dpt_policy_t *p, size_t max_batch);
/* The encoder's output for n observation rows into *e (obs itself
 * without an encoder). */
int dpt__policy_encode(dpt_policy_t *p, const float *params, const float *obs, size_t n,
                       const float **e);
/* The encoder's backward for the last encode, from de [n, enc_dim]; its
 * parameter gradients stored (store) or added. No-op without an encoder. */
int dpt__policy_encoder_backward(dpt_policy_t *p, const float *params, float *grads,
                                 const float *de, int store);

#endif
