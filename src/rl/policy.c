/*
 * Actor-critic policies and the PPO loss (see dpt/rl.h for the formulas).
 * The actor and the critic are two sequential stacks appended to one
 * variable table (after the LSTM's variables in a recurrent policy), so one
 * arena holds the whole policy and the towers engine, checkpoints and
 * all-reduces treat it as a single vector.
 */
#include "dpt/rl.h"
#include "core/prof.h"
#include "nn/nn_impl.h"
#include "dpt/arena.h"
#include "dpt/lstm.h"
#include "dpt/status.h"
#include "policy_impl.h"
#include "rl_trainers.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void dpt_policy_destroy(dpt_policy_t *p)
{
    if (!p)
        return;
    dpt_seq_destroy(p->enc);
    free(p->denc);
    free(p->dx);
    free(p->xobs);
    dpt_lstm_destroy(p->lstm);
    dpt_seq_destroy(p->actor);
    dpt_seq_destroy(p->critic);
    dpt_vartable_deinit(&p->vars);
    free(p->cat.lse);
    free(p->cat.h);
    free(p->cat.p);
    free(p->logp);
    free(p->ent);
    free(p->dlogp);
    free(p->dent);
    free(p->dz);
    free(p->dv);
    free(p->values);
    free(p->x);
    free(p->y);
    free(p->dy);
    free(p->tm_logp);
    free(p->tm_adv);
    free(p->tm_ret);
    free(p->tm_val);
    free(p->tm_act);
    free(p->mask);
    free(p);
}

int dpt_policy_create(dpt_policy_t **out, const dpt_env_class_t *cls, const size_t *hidden,
                      int nhidden, size_t max_batch)
{
    dpt_policy_spec_t spec;
    memset(&spec, 0, sizeof spec);
    *out = NULL;
    if (nhidden < 1 || nhidden > DPT_POLICY_MAX_HIDDEN)
        return dpt_error(DPT_EINVAL, "policy: %d hidden layers (allowed 1..%d)", nhidden,
                         DPT_POLICY_MAX_HIDDEN);
    memcpy(spec.hidden, hidden, (size_t)nhidden * sizeof *hidden);
    spec.nhidden = nhidden;
    return dpt_policy_create_ex(out, cls, &spec, max_batch);
}

/* Checks a spec and works out the LSTM's input size. */
static int dpt__policy_check_spec(const dpt_env_class_t *cls, const dpt_policy_spec_t *s,
                                  size_t max_batch, size_t *in_dim)
{
    if (s->nhidden < 1 || s->nhidden > DPT_POLICY_MAX_HIDDEN)
        return dpt_error(DPT_EINVAL, "policy: %d hidden layers (allowed 1..%d)", s->nhidden,
                         DPT_POLICY_MAX_HIDDEN);
    for (int i = 0; i < s->nhidden; i++)
        if (s->hidden[i] == 0)
            return dpt_error(DPT_EINVAL, "policy: hidden layer %d has size 0", i);
    if (max_batch == 0)
        return dpt_error(DPT_EINVAL, "policy: max_batch is 0");
    *in_dim = cls->obs_dim;
    if (!s->use_lstm)
        return DPT_OK;
    if (s->lstm_cell_size == 0 || s->max_seq_len == 0)
        return dpt_error(DPT_EINVAL, "policy: lstm_cell_size %zu and max_seq_len %zu must be >= 1",
                         s->lstm_cell_size, s->max_seq_len);
    if (max_batch % s->max_seq_len)
        return dpt_error(DPT_EINVAL,
                         "policy: max_batch %zu is not a whole number of sequences of %zu steps",
                         max_batch, s->max_seq_len);
    int discrete = cls->action_kind == DPT_ACTION_DISCRETE;
    size_t aw = discrete ? cls->num_actions : cls->action_dim;
    if (s->lstm_use_prev_action && aw > SIZE_MAX - *in_dim - 1)
        return dpt_error(DPT_EOVERFLOW, "policy: the LSTM's input size overflows");
    *in_dim += (s->lstm_use_prev_action ? aw : 0) + (s->lstm_use_prev_reward ? 1 : 0);
    return DPT_OK;
}

/* calloc of n items of `size` bytes, n = a * b checked. */
static void *dpt__policy_calloc2(size_t a, size_t b, size_t size)
{
    size_t n;
    return dpt_mul_size(a, b, &n) ? NULL : calloc(n ? n : 1, size);
}

int dpt_policy_create_ex(dpt_policy_t **out, const dpt_env_class_t *cls,
                         const dpt_policy_spec_t *spec, size_t max_batch)
{
    *out = NULL;
    if (!spec)
        return dpt_error(DPT_EINVAL, "policy: no spec given");
    int rc = dpt_env_class_check(cls);
    if (rc)
        return rc;
    size_t in_dim = 0;
    if ((rc = dpt__policy_check_spec(cls, spec, max_batch, &in_dim)) != 0)
        return rc;
    dpt_policy_t *p = calloc(1, sizeof *p);
    if (!p)
        return dpt_error(DPT_ENOMEM, "policy: cannot allocate");
    dpt_vartable_init(&p->vars);
    p->cls = cls;
    p->spec = *spec;
    if (!spec->use_lstm) {
        p->spec.lstm_cell_size = 0;
        p->spec.max_seq_len = 0;
        p->spec.lstm_use_prev_action = p->spec.lstm_use_prev_reward = 0;
    }
    if (p->spec.prev_reward_scale == 0.0f)
        p->spec.prev_reward_scale = 1.0f;
    p->max_batch = max_batch;
    p->discrete = cls->action_kind == DPT_ACTION_DISCRETE;
    p->out_dim = p->discrete ? cls->num_actions : cls->action_dim;
    p->act_w = p->discrete ? 1 : cls->action_dim;
    if ((rc = dpt__policy_encoder_create(p, max_batch)) != 0)
        goto fail;
    /* The LSTM reads the encoder's output in place of the observation. */
    p->in_dim = in_dim - cls->obs_dim + p->enc_dim;
    in_dim = p->in_dim;
    size_t feat = p->enc_dim, H = p->spec.lstm_cell_size;
    if (spec->use_lstm) {
        p->max_seq = max_batch / spec->max_seq_len;
        if ((rc = dpt_lstm_create(&p->lstm, in_dim, H, p->max_seq, spec->max_seq_len, &p->vars,
                                  "lstm.")) != 0)
            goto fail;
        feat = H;
    }
    dpt_layer_spec_t layers[2 * DPT_POLICY_MAX_HIDDEN + 1];
    int nl = 0;
    for (int i = 0; i < spec->nhidden; i++) {
        layers[nl++] = (dpt_layer_spec_t){.kind = DPT_LAYER_LINEAR,
                                          .out = spec->hidden[i],
                                          .init = DPT_INIT_ORTHOGONAL,
                                          .gain = (float)sqrt(2.0)};
        layers[nl++] = (dpt_layer_spec_t){
            .kind = DPT_LAYER_TANH, .out = 0, .init = DPT_INIT_DEFAULT, .gain = 0.0f};
    }
    layers[nl] = (dpt_layer_spec_t){
        .kind = DPT_LAYER_LINEAR, .out = p->out_dim, .init = DPT_INIT_ORTHOGONAL, .gain = 0.01f};
    if ((rc = dpt_seq_create(&p->actor, feat, layers, (size_t)nl + 1, max_batch, &p->vars,
                             "actor.")) != 0)
        goto fail;
    layers[nl] = (dpt_layer_spec_t){
        .kind = DPT_LAYER_LINEAR, .out = 1, .init = DPT_INIT_ORTHOGONAL, .gain = 1.0f};
    if ((rc = dpt_seq_create(&p->critic, feat, layers, (size_t)nl + 1, max_batch, &p->vars,
                             "critic.")) != 0)
        goto fail;
    if (!p->discrete) {
        size_t shape[1] = {p->out_dim};
        if ((rc = dpt_vartable_add(&p->vars, "log_std", 1, shape, &p->log_std_off)) != 0)
            goto fail;
    }
    p->logp = calloc(max_batch, sizeof(float));
    p->ent = calloc(max_batch, sizeof(float));
    p->dlogp = calloc(max_batch, sizeof(float));
    p->dent = calloc(max_batch, sizeof(float));
    p->dv = calloc(max_batch, sizeof(float));
    p->values = calloc(max_batch, sizeof(float));
    p->dz = dpt__policy_calloc2(max_batch, p->out_dim, sizeof(float));
    /* tm_adv, tm_ret and mask also hold the V-trace loss's targets. */
    p->tm_adv = calloc(max_batch, sizeof(float));
    p->tm_ret = calloc(max_batch, sizeof(float));
    p->mask = calloc(max_batch, 1);
    int ok = p->logp && p->ent && p->dlogp && p->dent && p->dv && p->values && p->dz && p->tm_adv &&
             p->tm_ret && p->mask;
    if (ok && p->discrete) {
        p->cat.lse = calloc(max_batch, sizeof(double));
        p->cat.h = calloc(max_batch, sizeof(double));
        p->cat.p = dpt__policy_calloc2(max_batch, p->out_dim, sizeof(double));
        ok = p->cat.lse && p->cat.h && p->cat.p;
    }
    if (ok && p->lstm) {
        p->x = dpt__policy_calloc2(max_batch, in_dim, sizeof(float));
        p->y = dpt__policy_calloc2(max_batch, H, sizeof(float));
        p->dy = dpt__policy_calloc2(max_batch, H, sizeof(float));
        p->tm_logp = calloc(max_batch, sizeof(float));
        p->tm_val = calloc(max_batch, sizeof(float));
        p->tm_act = dpt__policy_calloc2(max_batch, p->act_w, 4);
        ok = p->x && p->y && p->dy && p->tm_logp && p->tm_val && p->tm_act;
        if (ok && p->enc) {
            p->dx = dpt__policy_calloc2(max_batch, in_dim, sizeof(float));
            p->xobs = dpt__policy_calloc2(max_batch, cls->obs_dim, sizeof(float));
            ok = p->dx && p->xobs;
        }
    }
    if (!ok) {
        rc = dpt_error(DPT_ENOMEM, "policy: cannot allocate scratch for %zu rows", max_batch);
        goto fail;
    }
    p->hp = (dpt_ppo_loss_params_t){0.2f, 0.2f, 0.5f, 0.01f};
    *out = p;
    return DPT_OK;
fail:
    dpt_policy_destroy(p);
    return rc;
}

const dpt_vartable_t *dpt_policy_vars(const dpt_policy_t *p)
{
    return &p->vars;
}
const dpt_env_class_t *dpt_policy_env_class(const dpt_policy_t *p)
{
    return p->cls;
}
size_t dpt_policy_max_batch(const dpt_policy_t *p)
{
    return p->max_batch;
}
const dpt_policy_spec_t *dpt_policy_spec(const dpt_policy_t *p)
{
    return &p->spec;
}
size_t dpt_policy_state_size(const dpt_policy_t *p)
{
    return 2 * p->spec.lstm_cell_size;
}

int dpt__policy_hidden(const dpt_policy_t *p, size_t *out)
{
    memcpy(out, p->spec.hidden, (size_t)p->spec.nhidden * sizeof *out);
    return p->spec.nhidden;
}

void dpt_policy_init_params(const dpt_policy_t *p, float *params, dpt_rng_t *rng)
{
    if (p->enc)
        dpt_seq_init_params(p->enc, params, rng);
    if (p->lstm)
        dpt_lstm_init_params(p->lstm, params, rng);
    dpt_seq_init_params(p->actor, params, rng);
    dpt_seq_init_params(p->critic, params, rng);
    if (!p->discrete)
        dpt_vec_zero(params + p->log_std_off, p->out_dim);
}

/* One row of the LSTM's input: [obs, prev action, prev reward] (the last
 * two when the spec asks for them; obs is the encoder's output with an
 * encoder). prev_action points at the row's action (NULL: none, zeros),
 * prev_reward at its reward (NULL: 0). */
static int dpt__policy_input(const dpt_policy_t *p, float *x, const float *obs,
                             const void *prev_action, const float *prev_reward)
{
    size_t od = p->enc_dim;
    memcpy(x, obs, od * sizeof(float));
    x += od;
    if (p->spec.lstm_use_prev_action) {
        dpt_vec_zero(x, p->out_dim);
        if (prev_action && p->discrete) {
            /* -1: none (an episode's first step), all zeros. */
            int32_t a = *(const int32_t *)prev_action;
            if (a < -1 || a >= (int64_t)p->out_dim)
                return dpt_error(DPT_EINVAL,
                                 "policy: previous action %d out of range [0, %zu) (-1: none)",
                                 (int)a, p->out_dim);
            if (a >= 0)
                x[a] = 1.0f;
        } else if (prev_action) {
            memcpy(x, prev_action, p->out_dim * sizeof(float));
        }
        x += p->out_dim;
    }
    if (p->spec.lstm_use_prev_reward)
        *x = prev_reward ? *prev_reward * p->spec.prev_reward_scale : 0.0f;
    return DPT_OK;
}

/* The features the heads read for one step of n envs: the observations,
 * or the LSTM's output from `st` (written back to st->h, st->c when
 * keep). */
static int dpt__policy_features(dpt_policy_t *p, const float *params, const float *obs,
                                const dpt_policy_state_t *st, size_t n, int keep,
                                const float **feat)
{
    if (p->lstm && (n == 0 || n > p->max_seq))
        return dpt_error(DPT_EINVAL, "policy: %zu rows (allowed 1..%zu)", n, p->max_seq);
    int rc = dpt__policy_encode(p, params, obs, n, feat);
    if (rc || !p->lstm)
        return rc;
    obs = *feat;
    size_t od = p->enc_dim, I = p->in_dim, ab = p->act_w * 4;
    const char *pa = st ? st->prev_actions : NULL;
    const float *pr = st ? st->prev_rewards : NULL;
    for (size_t i = 0; i < n; i++) {
        rc = dpt__policy_input(p, p->x + i * I, obs + i * od, pa ? pa + i * ab : NULL,
                               pr ? pr + i : NULL);
        if (rc)
            return rc;
    }
    float *h = st ? st->h : NULL, *c = st ? st->c : NULL;
    rc = dpt_lstm_forward(p->lstm, params, p->x, 1, n, NULL, h, c, p->y, keep ? h : NULL,
                          keep ? c : NULL);
    if (rc)
        return rc;
    *feat = p->y;
    return DPT_OK;
}

int dpt__policy_act_begin(dpt_policy_t *p, const float *params)
{
    int rc = dpt__seq_act_begin(p->actor, params);
    if (!rc && (rc = dpt__seq_act_begin(p->critic, params)) != 0)
        dpt__seq_act_end(p->actor);
    return rc;
}

void dpt__policy_act_end(dpt_policy_t *p)
{
    dpt__seq_act_end(p->actor);
    dpt__seq_act_end(p->critic);
}

int dpt_policy_value_state(dpt_policy_t *p, const float *params, const float *obs,
                           const dpt_policy_state_t *state, size_t n, float *values)
{
    const float *feat, *v;
    int rc = dpt__policy_features(p, params, obs, state, n, 0, &feat);
    if (!rc)
        rc = dpt_seq_forward(p->critic, params, feat, n, &v);
    if (rc)
        return rc;
    memcpy(values, v, n * sizeof(float));
    return DPT_OK;
}

int dpt_policy_value(dpt_policy_t *p, const float *params, const float *obs, size_t n,
                     float *values)
{
    return dpt_policy_value_state(p, params, obs, NULL, n, values);
}

/* Actions of rows [0, n) of the actor's outputs z, row i's drawn from
 * rngs[i], and their logp (may be NULL). */
static int dpt__policy_sample_rows(const dpt_policy_t *p, const float *params, const float *z,
                                   size_t n, dpt_rng_t *rngs, void *actions, float *logp)
{
    size_t k = p->out_dim;
    int rc = DPT_OK;
    for (size_t i = 0; !rc && i < n; i++) {
        if (p->discrete)
            rc = dpt_categorical_sample(z + i * k, 1, k, &rngs[i], (int32_t *)actions + i,
                                        logp ? logp + i : NULL);
        else
            dpt_gaussian_sample(z + i * k, params + p->log_std_off, 1, k, &rngs[i],
                                (float *)actions + i * k, logp ? logp + i : NULL);
    }
    return rc;
}

/* dpt_policy_act_state(), or with rngs (not NULL) row i's action drawn
 * from rngs[i] (dpt__policy_act_rows). */
static int dpt__policy_act(dpt_policy_t *p, const float *params, const float *obs,
                           const dpt_policy_state_t *state, size_t n, dpt_rng_t *rng,
                           dpt_rng_t *rngs, void *actions, float *logp, float *values)
{
    const float *feat, *z;
    int rc = dpt__policy_features(p, params, obs, state, n, 1, &feat);
    if (!rc)
        rc = dpt_seq_forward(p->actor, params, feat, n, &z);
    if (rc)
        return rc;
    if (rngs) {
        rc = dpt__policy_sample_rows(p, params, z, n, rngs, actions, logp);
    } else if (p->discrete) {
        if (rng)
            rc = dpt_categorical_sample(z, n, p->out_dim, rng, actions, logp);
        else {
            dpt_categorical_argmax(z, n, p->out_dim, actions);
            if (logp)
                rc = dpt_categorical_logp(z, n, p->out_dim, actions, logp, NULL);
        }
    } else {
        const float *ls = params + p->log_std_off;
        if (rng)
            dpt_gaussian_sample(z, ls, n, p->out_dim, rng, actions, logp);
        else {
            memcpy(actions, z, n * p->out_dim * sizeof(float));
            if (logp)
                rc = dpt_gaussian_logp(z, ls, n, p->out_dim, actions, logp, NULL);
        }
    }
    if (rc || !values)
        return rc;
    const float *v;
    if ((rc = dpt_seq_forward(p->critic, params, feat, n, &v)) != 0)
        return rc;
    memcpy(values, v, n * sizeof(float));
    return DPT_OK;
}

int dpt_policy_act_state(dpt_policy_t *p, const float *params, const float *obs,
                         const dpt_policy_state_t *state, size_t n, dpt_rng_t *rng, void *actions,
                         float *logp, float *values)
{
    return dpt__policy_act(p, params, obs, state, n, rng, NULL, actions, logp, values);
}

int dpt__policy_act_rows(dpt_policy_t *p, const float *params, const float *obs, size_t n,
                         dpt_rng_t *rngs, void *actions, float *logp, float *values)
{
    return dpt__policy_act(p, params, obs, NULL, n, NULL, rngs, actions, logp, values);
}

int dpt_policy_act(dpt_policy_t *p, const float *params, const float *obs, size_t n, dpt_rng_t *rng,
                   void *actions, float *logp, float *values)
{
    return dpt_policy_act_state(p, params, obs, NULL, n, rng, actions, logp, values);
}

/* ---- the PPO loss ----------------------------------------------------------- */

/* The loss's per-row inputs, in the order of the rows the heads see. */
typedef struct dpt__ppo_cols {
    const float *obs, *logp_old, *adv, *ret, *v_old;
    const void *actions;
} dpt__ppo_cols_t;

/* The recurrent columns of a sequence batch. */
typedef struct dpt__ppo_seq_cols {
    const int32_t *seq_lens;
    const float *h0, *c0, *prev_rewards;
    const void *prev_actions;
} dpt__ppo_seq_cols_t;

static int dpt__policy_ppo_columns(const dpt_policy_t *p, const dpt_batch_t *b, dpt__ppo_cols_t *c,
                                   dpt__ppo_seq_cols_t *sc)
{
    memset(c, 0, sizeof *c);
    memset(sc, 0, sizeof *sc);
    if (b->rows == 0 || b->rows > p->max_batch)
        return dpt_error(DPT_EINVAL, "ppo loss: batch of %zu rows (allowed 1..%zu)", b->rows,
                         p->max_batch);
    /* Looked up in order, so the message names the first missing column. */
    if (!(c->obs = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_OBS, DPT_F32, p->cls->obs_dim, NULL)))
        return DPT_EINVAL;
    dpt_dtype_t at = p->discrete ? DPT_I32 : DPT_F32;
    c->actions = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_ACTIONS, at, p->act_w, NULL);
    if (!c->actions ||
        !(c->logp_old = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_LOGP, DPT_F32, 1, NULL)) ||
        !(c->adv = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_ADV, DPT_F32, 1, NULL)) ||
        !(c->ret = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_RETURNS, DPT_F32, 1, NULL)) ||
        !(c->v_old = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_VALUES, DPT_F32, 1, NULL)))
        return DPT_EINVAL;
    if (!p->lstm)
        return DPT_OK;
    size_t L = b->seq_len, H = p->spec.lstm_cell_size;
    if (L == 0 || L > p->spec.max_seq_len || b->rows % L || b->rows / L > p->max_seq)
        return dpt_error(DPT_EINVAL,
                         "ppo loss: a recurrent policy needs sequences of 1..%zu steps, at most "
                         "%zu of them (the batch has %zu rows, seq_len %zu)",
                         p->spec.max_seq_len, p->max_seq, b->rows, L);
    if (!(sc->seq_lens = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_SEQ_LENS, DPT_I32, 1, NULL)) ||
        !(sc->h0 = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_STATE_H, DPT_F32, H, NULL)) ||
        !(sc->c0 = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_STATE_C, DPT_F32, H, NULL)))
        return DPT_EINVAL;
    if (p->spec.lstm_use_prev_action &&
        !(sc->prev_actions =
              dpt_batch_get(b, "ppo loss", DPT_PPO_COL_PREV_ACTIONS, at, p->act_w, NULL)))
        return DPT_EINVAL;
    if (p->spec.lstm_use_prev_reward &&
        !(sc->prev_rewards =
              dpt_batch_get(b, "ppo loss", DPT_PPO_COL_PREV_REWARDS, DPT_F32, 1, NULL)))
        return DPT_EINVAL;
    for (size_t s = 0; s < b->rows / L; s++)
        if (sc->seq_lens[s] < 1 || (size_t)sc->seq_lens[s] > L)
            return dpt_error(DPT_EINVAL, "ppo loss: sequence %zu has length %d (allowed 1..%zu)", s,
                             (int)sc->seq_lens[s], L);
    return DPT_OK;
}

/* The V-trace columns of a fragment batch (dpt_vtrace_batch): sequences of
 * L = T + 1 rows, T steps and the bootstrap row. */
typedef struct dpt__vtrace_cols {
    const float *rewards, *discounts;
    size_t L;
} dpt__vtrace_cols_t;

/* The V-trace targets of every fragment of B rows (dpt_vtrace on its T
 * steps, the bootstrap row's value as V(x_T)) from the values v and
 * log-probabilities p->logp of this forward and the behaviour
 * log-probabilities blogp: value targets into p->tm_ret, advantages into
 * p->tm_adv, and p->mask marking the steps (the bootstrap row is 0).
 * p->dlogp holds the log-ratios meanwhile (the loss overwrites it). */
static int dpt__policy_vtrace_targets(dpt_policy_t *p, const float *v, const float *blogp,
                                      const dpt__vtrace_cols_t *vt, size_t B)
{
    size_t L = vt->L, T = L - 1;
    for (size_t s = 0; s + L <= B; s += L) {
        int rc = dpt_vtrace(blogp + s, p->logp + s, vt->rewards + s, v + s, vt->discounts + s,
                            v + s + T, T, 1, (double)p->vt.clip_rho, (double)p->vt.clip_pg_rho,
                            p->tm_ret + s, p->tm_adv + s);
        if (rc)
            return dpt_error(rc, "vtrace loss: fragment %zu: %s", s / L, dpt_last_error());
        memset(p->mask + s, 1, T);
        p->mask[s + T] = 0;
        p->tm_adv[s + T] = 0.0f;
        p->tm_ret[s + T] = v[s + T];
    }
    return DPT_OK;
}

/*
 * The PPO loss over B rows whose heads read feat [B, F] (the observations,
 * or the LSTM's outputs). Rows with mask[i] == 0 (mask NULL: none) are
 * padding: they are left out of every mean (over the `valid` other rows)
 * and get no gradient. Accumulates the parameters' gradient into grads and,
 * when dfeat is not NULL, the features' gradient into dfeat [B, F]. With
 * `store` (a policy without an LSTM: the heads own every parameter) the
 * gradient is stored instead, each element written once, so the engine
 * need not zero grads first (DPT_MODEL_STORES_GRADS).
 */
static int dpt__policy_ppo_core(dpt_policy_t *p, const float *params, float *grads,
                                const float *feat, size_t B, const dpt__ppo_cols_t *c,
                                const uint8_t *mask, size_t valid, float *dfeat,
                                dpt_loss_out_t *out, const dpt__vtrace_cols_t *vt, int store)
{
    size_t K = p->out_dim;
    const float *z, *v;
    int rc;
    if ((rc = dpt_seq_forward(p->actor, params, feat, B, &z)) != 0 ||
        (rc = dpt_seq_forward(p->critic, params, feat, B, &v)) != 0)
        return rc;
    dpt__prof_lap(DPT_PROF_FORWARD);
    const float *ls = p->discrete ? NULL : params + p->log_std_off;
    rc = p->discrete ? dpt__categorical_logp_ex(z, B, K, c->actions, p->logp, p->ent, &p->cat)
                     : dpt_gaussian_logp(z, ls, B, K, c->actions, p->logp, p->ent);
    if (rc)
        return rc;
    /* V-trace: the advantages and value targets come from this forward's
     * values and log-probabilities (constants for the gradient). */
    dpt__ppo_cols_t vcols;
    int impala = 0;
    if (vt) {
        if ((rc = dpt__policy_vtrace_targets(p, v, c->logp_old, vt, B)) != 0)
            return rc;
        vcols = *c;
        vcols.adv = p->tm_adv;
        vcols.ret = p->tm_ret;
        c = &vcols;
        mask = p->mask;
        impala = p->vt.impala;
    }
    const dpt_ppo_loss_params_t *hp = &p->hp;
    double inv_b = 1.0 / (double)valid, eps = hp->clip_param, vc = hp->vf_clip_param;
    double pg = 0.0, vl = 0.0, ent = 0.0, kl = 0.0, clipped = 0.0;
    for (size_t i = 0; i < B; i++) {
        if (mask && !mask[i]) {
            p->dlogp[i] = p->dent[i] = p->dv[i] = 0.0f;
            continue;
        }
        double lr = (double)p->logp[i] - (double)c->logp_old[i];
        double ratio = exp(lr), a = (double)c->adv[i];
        double rc_ratio = ratio < 1.0 - eps ? 1.0 - eps : (ratio > 1.0 + eps ? 1.0 + eps : ratio);
        double l1 = -a * ratio, l2 = -a * rc_ratio;
        /* d/dlogp of max(l1, l2): the unclipped branch when it is the max
         * (ties included); the clipped branch is constant in logp when the
         * ratio is clipped, and equals l1 otherwise. */
        double dlp = l1 >= l2 ? -a * ratio : (rc_ratio == ratio ? -a * ratio : 0.0);
        double term = l1 >= l2 ? l1 : l2;
        if (impala) { /* IMPALA's policy gradient: -A log pi (A carries the clipped rho) */
            term = -a * (double)p->logp[i];
            dlp = -a;
        }
        pg += term;
        p->dlogp[i] = (float)(dlp * inv_b);
        p->dent[i] = (float)(-(double)hp->ent_coef * inv_b);
        ent += (double)p->ent[i];
        kl += (ratio - 1.0) - lr;
        clipped += fabs(ratio - 1.0) > eps;
        double vi = (double)v[i], R = (double)c->ret[i], d1 = vi - R;
        double dv;
        if (vc > 0.0) {
            double vo = (double)c->v_old[i], diff = vi - vo;
            double vcl = vo + (diff < -vc ? -vc : (diff > vc ? vc : diff)), d2 = vcl - R;
            if (d1 * d1 >= d2 * d2) {
                vl += 0.5 * d1 * d1;
                dv = d1;
            } else {
                vl += 0.5 * d2 * d2;
                dv = (diff > -vc && diff < vc) ? d2 : 0.0;
            }
        } else {
            vl += 0.5 * d1 * d1;
            dv = d1;
        }
        p->dv[i] = (float)((double)hp->vf_coef * dv * inv_b);
    }
    pg *= inv_b, vl *= inv_b, ent *= inv_b, kl *= inv_b, clipped *= inv_b;
    /* Actor: through the distribution into the logits/mean (and log_std). */
    dpt_vec_zero(p->dz, B * K);
    if (p->discrete)
        dpt__categorical_backward_ex(z, B, K, c->actions, p->dlogp, p->dent, p->dz, &p->cat);
    else {
        if (store)
            dpt_vec_zero(grads + p->log_std_off, K);
        dpt_gaussian_backward(z, ls, B, K, c->actions, p->dlogp, p->dent, p->dz,
                              grads + p->log_std_off);
    }
    dpt__prof_lap(DPT_PROF_LOSS);
    if ((rc = dpt_seq_backward_ex(p->actor, params, grads, p->dz, dfeat, store)) != 0 ||
        (rc = dpt_seq_backward_ex(p->critic, params, grads, p->dv, dfeat, store)) != 0)
        return rc;
    dpt__prof_lap(DPT_PROF_BACKWARD);
    double loss = pg - (double)hp->ent_coef * ent + (double)hp->vf_coef * vl;
    if (!isfinite(loss))
        return dpt_error(DPT_ENUMERIC, "ppo loss is %g (policy %g, value %g, entropy %g)", loss, pg,
                         vl, ent);
    if (out) {
        memset(out, 0, sizeof *out);
        out->loss = loss;
        out->rows = valid;
        out->extra[DPT_PPO_STAT_POLICY_LOSS] = pg;
        out->extra[DPT_PPO_STAT_VF_LOSS] = vl;
        out->extra[DPT_PPO_STAT_ENTROPY] = ent;
        out->extra[DPT_PPO_STAT_KL] = kl;
        out->extra[DPT_PPO_STAT_CLIPFRAC] = clipped;
    }
    return DPT_OK;
}

/*
 * A sequence batch holds S sequences of L rows each, sequence-major (row
 * s L + t is step t of sequence s); the LSTM wants time-major rows
 * (t S + s). The inputs and the loss's columns are gathered time-major
 * once, the padded steps zeroed (their values in the batch may be anything
 * finite or not, and their actions anything), and the loss then runs over
 * the LSTM's outputs in that order: the heads and the loss do not care
 * about the order of rows.
 */
static int dpt__policy_ppo_loss_grad_seq(dpt_policy_t *p, const float *params, float *grads,
                                         const dpt_batch_t *b, const dpt__ppo_cols_t *c,
                                         const dpt__ppo_seq_cols_t *sc, dpt_loss_out_t *out)
{
    size_t L = b->seq_len, S = b->rows / L, B = b->rows, I = p->in_dim;
    size_t H = p->spec.lstm_cell_size, od = p->enc_dim, ab = p->act_w * 4;
    size_t valid = 0;
    const char *pa = sc->prev_actions;
    const float *obs = c->obs;
    int rc;
    if (p->enc) {
        /* The encoder runs on every row in the batch's order; a padded
         * step's observation may be anything, so it reads zeros there. */
        size_t ow = p->cls->obs_dim;
        for (size_t r = 0; r < B; r++) {
            if (r % L < (size_t)sc->seq_lens[r / L])
                memcpy(p->xobs + r * ow, c->obs + r * ow, ow * sizeof(float));
            else
                dpt_vec_zero(p->xobs + r * ow, ow);
        }
        if ((rc = dpt__policy_encode(p, params, p->xobs, B, &obs)) != 0)
            return rc;
    }
    for (size_t s = 0; s < S; s++)
        for (size_t t = 0; t < L; t++) {
            size_t r = s * L + t, k = t * S + s;
            char *act = (char *)p->tm_act + k * ab;
            if (t >= (size_t)sc->seq_lens[s]) {
                p->mask[k] = 0;
                dpt_vec_zero(p->x + k * I, I);
                memset(act, 0, ab);
                p->tm_logp[k] = p->tm_adv[k] = p->tm_ret[k] = p->tm_val[k] = 0.0f;
                continue;
            }
            rc = dpt__policy_input(p, p->x + k * I, obs + r * od, pa ? pa + r * ab : NULL,
                                   sc->prev_rewards ? sc->prev_rewards + r : NULL);
            if (rc)
                return dpt_error(rc, "ppo loss: row %zu: %s", r, dpt_last_error());
            p->mask[k] = 1;
            memcpy(act, (const char *)c->actions + r * ab, ab);
            p->tm_logp[k] = c->logp_old[r];
            p->tm_adv[k] = c->adv[r];
            p->tm_ret[k] = c->ret[r];
            p->tm_val[k] = c->v_old[r];
            valid++;
        }
    rc = dpt_lstm_forward(p->lstm, params, p->x, L, S, p->mask, sc->h0, sc->c0, p->y, NULL, NULL);
    if (rc)
        return rc;
    dpt__ppo_cols_t tm = {NULL, p->tm_logp, p->tm_adv, p->tm_ret, p->tm_val, p->tm_act};
    dpt_vec_zero(p->dy, B * H);
    if ((rc = dpt__policy_ppo_core(p, params, grads, p->y, B, &tm, p->mask, valid, p->dy, out, NULL,
                                   0)) != 0)
        return rc;
    if (p->enc)
        dpt_vec_zero(p->dx, B * I);
    if ((rc = dpt_lstm_backward(p->lstm, params, grads, p->dy, NULL, NULL, p->enc ? p->dx : NULL,
                                NULL, NULL)) != 0 ||
        !p->enc)
        return rc;
    /* The input gradient's observation part, back in the batch's order. */
    for (size_t s = 0; s < S; s++)
        for (size_t t = 0; t < L; t++) {
            float *de = p->denc + (s * L + t) * od;
            if (t < (size_t)sc->seq_lens[s])
                memcpy(de, p->dx + (t * S + s) * I, od * sizeof(float));
            else
                dpt_vec_zero(de, od);
        }
    return dpt__policy_encoder_backward(p, params, grads, p->denc, 0);
}

/* The loss of a batch of single steps through the encoder (when there is
 * one), the heads' input gradient back into it; gradients stored. */
static int dpt__policy_core_encoded(dpt_policy_t *p, const float *params, float *grads,
                                    const dpt__ppo_cols_t *c, size_t B, size_t valid,
                                    dpt_loss_out_t *out, const dpt__vtrace_cols_t *vt)
{
    const float *feat;
    int rc = dpt__policy_encode(p, params, c->obs, B, &feat);
    if (rc)
        return rc;
    if (p->enc)
        dpt_vec_zero(p->denc, B * p->enc_dim);
    if ((rc = dpt__policy_ppo_core(p, params, grads, feat, B, c, NULL, valid,
                                   p->enc ? p->denc : NULL, out, vt, 1)) != 0)
        return rc;
    return dpt__policy_encoder_backward(p, params, grads, p->denc, 1);
}

static int dpt__policy_ppo_loss_grad(void *ctx, const float *params, float *grads,
                                     const dpt_batch_t *b, dpt_loss_out_t *out)
{
    dpt_policy_t *p = ctx;
    dpt__ppo_cols_t c;
    dpt__ppo_seq_cols_t sc;
    int rc = dpt__policy_ppo_columns(p, b, &c, &sc);
    if (rc)
        return rc;
    if (p->lstm)
        return dpt__policy_ppo_loss_grad_seq(p, params, grads, b, &c, &sc, out);
    return dpt__policy_core_encoded(p, params, grads, &c, b->rows, b->rows, out, NULL);
}

static int dpt__policy_ppo_replicate(void *ctx, void **copy)
{
    const dpt_policy_t *p = ctx;
    dpt_policy_t *r;
    int rc = dpt_policy_create_ex(&r, p->cls, &p->spec, p->max_batch);
    if (rc) {
        *copy = NULL;
        return rc;
    }
    r->hp = p->hp;
    r->vt = p->vt;
    *copy = r;
    return DPT_OK;
}

static void dpt__policy_ppo_release(void *copy)
{
    dpt_policy_destroy(copy);
}

dpt_model_t dpt_policy_ppo_model(dpt_policy_t *p, const dpt_ppo_loss_params_t *hp)
{
    p->hp = *hp;
    dpt_model_t m = {
        .vars = &p->vars,
        .ctx = p,
        .max_batch = p->max_batch,
        .loss_grad = dpt__policy_ppo_loss_grad,
        .replicate = dpt__policy_ppo_replicate,
        .release = dpt__policy_ppo_release,
        .flags = p->lstm ? 0u : DPT_MODEL_STORES_GRADS,
    };
    return m;
}

/* ---- the V-trace loss (APPO, IMPALA) --------------------------------------------- */

static int dpt__policy_vtrace_loss_grad(void *ctx, const float *params, float *grads,
                                        const dpt_batch_t *b, dpt_loss_out_t *out)
{
    dpt_policy_t *p = ctx;
    if (p->lstm)
        return dpt_error(DPT_EINVAL, "vtrace loss: recurrent policies are not supported");
    if (b->rows == 0 || b->rows > p->max_batch)
        return dpt_error(DPT_EINVAL, "vtrace loss: batch of %zu rows (allowed 1..%zu)", b->rows,
                         p->max_batch);
    size_t L = b->seq_len;
    if (L < 2 || b->rows % L)
        return dpt_error(DPT_EINVAL,
                         "vtrace loss: the batch must be fragments of T steps plus a bootstrap "
                         "row (seq_len >= 2; it has %zu rows, seq_len %zu)",
                         b->rows, L);
    dpt__ppo_cols_t c = {0};
    dpt__vtrace_cols_t vt = {.L = L};
    const char *who = "vtrace loss";
    dpt_dtype_t at = p->discrete ? DPT_I32 : DPT_F32;
    if (!(c.obs = dpt_batch_get(b, who, DPT_PPO_COL_OBS, DPT_F32, p->cls->obs_dim, NULL)) ||
        !(c.actions = dpt_batch_get(b, who, DPT_PPO_COL_ACTIONS, at, p->act_w, NULL)) ||
        !(c.logp_old = dpt_batch_get(b, who, DPT_PPO_COL_LOGP, DPT_F32, 1, NULL)) ||
        !(vt.rewards = dpt_batch_get(b, who, DPT_VTRACE_COL_REWARDS, DPT_F32, 1, NULL)) ||
        !(vt.discounts = dpt_batch_get(b, who, DPT_VTRACE_COL_DISCOUNTS, DPT_F32, 1, NULL)))
        return DPT_EINVAL;
    size_t valid = b->rows / L * (L - 1);
    return dpt__policy_core_encoded(p, params, grads, &c, b->rows, valid, out, &vt);
}

dpt_model_t dpt_policy_vtrace_model(dpt_policy_t *p, const dpt_vtrace_loss_params_t *hp)
{
    p->vt = *hp;
    /* The shared core's PPO settings: APPO's clip, no value clipping. */
    p->hp = (dpt_ppo_loss_params_t){hp->impala ? 0.0f : hp->clip_param, 0.0f, hp->vf_coef,
                                    hp->ent_coef};
    dpt_model_t m = {
        .vars = &p->vars,
        .ctx = p,
        .max_batch = p->max_batch,
        .loss_grad = dpt__policy_vtrace_loss_grad,
        .replicate = dpt__policy_ppo_replicate,
        .release = dpt__policy_ppo_release,
        .flags = DPT_MODEL_STORES_GRADS, /* no LSTM (refused by the loss) */
    };
    return m;
}
