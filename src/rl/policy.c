/*
 * Actor-critic policies and the PPO loss (see dpt/rl.h for the formulas).
 * The actor and the critic are two sequential stacks appended to one
 * variable table, so one arena holds the whole policy and the towers
 * engine, checkpoints and all-reduces treat it as a single vector.
 */
#include "dpt/rl.h"
#include "dpt/arena.h"
#include "dpt/status.h"
#include "rl_trainers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct dpt_policy {
    const dpt_env_class_t *cls;
    dpt_vartable_t vars;
    dpt_seq_t *actor, *critic;
    size_t hidden[DPT_POLICY_MAX_HIDDEN];
    int nhidden;
    size_t max_batch, out_dim, log_std_off;
    int discrete;
    dpt_ppo_loss_params_t hp;
    /* scratch, [max_batch] or [max_batch, out_dim] */
    float *logp, *ent, *dlogp, *dent, *dz, *dv, *values;
};

void dpt_policy_destroy(dpt_policy_t *p)
{
    if (!p)
        return;
    dpt_seq_destroy(p->actor);
    dpt_seq_destroy(p->critic);
    dpt_vartable_deinit(&p->vars);
    free(p->logp);
    free(p->ent);
    free(p->dlogp);
    free(p->dent);
    free(p->dz);
    free(p->dv);
    free(p->values);
    free(p);
}

int dpt_policy_create(dpt_policy_t **out, const dpt_env_class_t *cls, const size_t *hidden,
                      int nhidden, size_t max_batch)
{
    *out = NULL;
    int rc = dpt_env_class_check(cls);
    if (rc)
        return rc;
    if (nhidden < 1 || nhidden > DPT_POLICY_MAX_HIDDEN)
        return dpt_error(DPT_EINVAL, "policy: %d hidden layers (allowed 1..%d)", nhidden,
                         DPT_POLICY_MAX_HIDDEN);
    if (max_batch == 0)
        return dpt_error(DPT_EINVAL, "policy: max_batch is 0");
    dpt_policy_t *p = calloc(1, sizeof *p);
    if (!p)
        return dpt_error(DPT_ENOMEM, "policy: cannot allocate");
    dpt_vartable_init(&p->vars);
    p->cls = cls;
    p->nhidden = nhidden;
    p->max_batch = max_batch;
    p->discrete = cls->action_kind == DPT_ACTION_DISCRETE;
    p->out_dim = p->discrete ? cls->num_actions : cls->action_dim;
    dpt_layer_spec_t layers[2 * DPT_POLICY_MAX_HIDDEN + 1];
    int nl = 0;
    for (int i = 0; i < nhidden; i++) {
        if (hidden[i] == 0) {
            rc = dpt_error(DPT_EINVAL, "policy: hidden layer %d has size 0", i);
            goto fail;
        }
        p->hidden[i] = hidden[i];
        layers[nl++] =
            (dpt_layer_spec_t){DPT_LAYER_LINEAR, hidden[i], DPT_INIT_ORTHOGONAL, (float)sqrt(2.0)};
        layers[nl++] = (dpt_layer_spec_t){DPT_LAYER_TANH, 0, DPT_INIT_DEFAULT, 0.0f};
    }
    layers[nl] = (dpt_layer_spec_t){DPT_LAYER_LINEAR, p->out_dim, DPT_INIT_ORTHOGONAL, 0.01f};
    if ((rc = dpt_seq_create(&p->actor, cls->obs_dim, layers, (size_t)nl + 1, max_batch, &p->vars,
                             "actor.")) != 0)
        goto fail;
    layers[nl] = (dpt_layer_spec_t){DPT_LAYER_LINEAR, 1, DPT_INIT_ORTHOGONAL, 1.0f};
    if ((rc = dpt_seq_create(&p->critic, cls->obs_dim, layers, (size_t)nl + 1, max_batch, &p->vars,
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
    p->dz = calloc(max_batch * p->out_dim, sizeof(float));
    if (!p->logp || !p->ent || !p->dlogp || !p->dent || !p->dv || !p->values || !p->dz) {
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

int dpt__policy_hidden(const dpt_policy_t *p, size_t *out)
{
    memcpy(out, p->hidden, (size_t)p->nhidden * sizeof *out);
    return p->nhidden;
}

void dpt_policy_init_params(const dpt_policy_t *p, float *params, dpt_rng_t *rng)
{
    dpt_seq_init_params(p->actor, params, rng);
    dpt_seq_init_params(p->critic, params, rng);
    if (!p->discrete)
        dpt_vec_zero(params + p->log_std_off, p->out_dim);
}

int dpt_policy_value(dpt_policy_t *p, const float *params, const float *obs, size_t n,
                     float *values)
{
    const float *v;
    int rc = dpt_seq_forward(p->critic, params, obs, n, &v);
    if (rc)
        return rc;
    memcpy(values, v, n * sizeof(float));
    return DPT_OK;
}

int dpt_policy_act(dpt_policy_t *p, const float *params, const float *obs, size_t n, dpt_rng_t *rng,
                   void *actions, float *logp, float *values)
{
    const float *z;
    int rc = dpt_seq_forward(p->actor, params, obs, n, &z);
    if (rc)
        return rc;
    if (p->discrete) {
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
    if (rc)
        return rc;
    return values ? dpt_policy_value(p, params, obs, n, values) : DPT_OK;
}

/* ---- the PPO loss ----------------------------------------------------------- */

typedef struct dpt__ppo_cols {
    const float *obs, *logp_old, *adv, *ret, *v_old;
    const void *actions;
} dpt__ppo_cols_t;

static int dpt__ppo_columns(const dpt_policy_t *p, const dpt_batch_t *b, dpt__ppo_cols_t *c)
{
    memset(c, 0, sizeof *c);
    if (b->rows == 0 || b->rows > p->max_batch)
        return dpt_error(DPT_EINVAL, "ppo loss: batch of %zu rows (allowed 1..%zu)", b->rows,
                         p->max_batch);
    /* Looked up in order, so the message names the first missing column. */
    if (!(c->obs = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_OBS, DPT_F32, p->cls->obs_dim, NULL)))
        return DPT_EINVAL;
    c->actions = p->discrete
                     ? dpt_batch_get(b, "ppo loss", DPT_PPO_COL_ACTIONS, DPT_I32, 1, NULL)
                     : dpt_batch_get(b, "ppo loss", DPT_PPO_COL_ACTIONS, DPT_F32, p->out_dim, NULL);
    if (!c->actions ||
        !(c->logp_old = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_LOGP, DPT_F32, 1, NULL)) ||
        !(c->adv = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_ADV, DPT_F32, 1, NULL)) ||
        !(c->ret = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_RETURNS, DPT_F32, 1, NULL)) ||
        !(c->v_old = dpt_batch_get(b, "ppo loss", DPT_PPO_COL_VALUES, DPT_F32, 1, NULL)))
        return DPT_EINVAL;
    return DPT_OK;
}

static int dpt__ppo_loss_grad(void *ctx, const float *params, float *grads, const dpt_batch_t *b,
                              dpt_loss_out_t *out)
{
    dpt_policy_t *p = ctx;
    dpt__ppo_cols_t c;
    int rc = dpt__ppo_columns(p, b, &c);
    if (rc)
        return rc;
    size_t B = b->rows, K = p->out_dim;
    const float *z, *v;
    if ((rc = dpt_seq_forward(p->actor, params, c.obs, B, &z)) != 0 ||
        (rc = dpt_seq_forward(p->critic, params, c.obs, B, &v)) != 0)
        return rc;
    const float *ls = p->discrete ? NULL : params + p->log_std_off;
    rc = p->discrete ? dpt_categorical_logp(z, B, K, c.actions, p->logp, p->ent)
                     : dpt_gaussian_logp(z, ls, B, K, c.actions, p->logp, p->ent);
    if (rc)
        return rc;
    const dpt_ppo_loss_params_t *hp = &p->hp;
    double inv_b = 1.0 / (double)B, eps = hp->clip_param, vc = hp->vf_clip_param;
    double pg = 0.0, vl = 0.0, ent = 0.0, kl = 0.0, clipped = 0.0;
    for (size_t i = 0; i < B; i++) {
        double lr = (double)p->logp[i] - (double)c.logp_old[i];
        double ratio = exp(lr), a = (double)c.adv[i];
        double rc_ratio = ratio < 1.0 - eps ? 1.0 - eps : (ratio > 1.0 + eps ? 1.0 + eps : ratio);
        double l1 = -a * ratio, l2 = -a * rc_ratio;
        /* d/dlogp of max(l1, l2): the unclipped branch when it is the max
         * (ties included); the clipped branch is constant in logp when the
         * ratio is clipped, and equals l1 otherwise. */
        double dlp = l1 >= l2 ? -a * ratio : (rc_ratio == ratio ? -a * ratio : 0.0);
        pg += (l1 >= l2 ? l1 : l2);
        p->dlogp[i] = (float)(dlp * inv_b);
        p->dent[i] = (float)(-(double)hp->ent_coef * inv_b);
        ent += (double)p->ent[i];
        kl += (ratio - 1.0) - lr;
        clipped += fabs(ratio - 1.0) > eps;
        double vi = (double)v[i], R = (double)c.ret[i], d1 = vi - R;
        double dv;
        if (vc > 0.0) {
            double vo = (double)c.v_old[i], diff = vi - vo;
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
        dpt_categorical_backward(z, B, K, c.actions, p->dlogp, p->dent, p->dz);
    else
        dpt_gaussian_backward(z, ls, B, K, c.actions, p->dlogp, p->dent, p->dz,
                              grads + p->log_std_off);
    if ((rc = dpt_seq_backward(p->actor, params, grads, p->dz, NULL)) != 0 ||
        (rc = dpt_seq_backward(p->critic, params, grads, p->dv, NULL)) != 0)
        return rc;
    double loss = pg - (double)hp->ent_coef * ent + (double)hp->vf_coef * vl;
    if (!isfinite(loss))
        return dpt_error(DPT_ENUMERIC, "ppo loss is %g (policy %g, value %g, entropy %g)", loss, pg,
                         vl, ent);
    if (out) {
        memset(out, 0, sizeof *out);
        out->loss = loss;
        out->rows = B;
        out->extra[DPT_PPO_STAT_POLICY_LOSS] = pg;
        out->extra[DPT_PPO_STAT_VF_LOSS] = vl;
        out->extra[DPT_PPO_STAT_ENTROPY] = ent;
        out->extra[DPT_PPO_STAT_KL] = kl;
        out->extra[DPT_PPO_STAT_CLIPFRAC] = clipped;
    }
    return DPT_OK;
}

static int dpt__ppo_replicate(void *ctx, void **copy)
{
    const dpt_policy_t *p = ctx;
    dpt_policy_t *r;
    int rc = dpt_policy_create(&r, p->cls, p->hidden, p->nhidden, p->max_batch);
    if (rc) {
        *copy = NULL;
        return rc;
    }
    r->hp = p->hp;
    *copy = r;
    return DPT_OK;
}

static void dpt__ppo_release(void *copy)
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
        .loss_grad = dpt__ppo_loss_grad,
        .replicate = dpt__ppo_replicate,
        .release = dpt__ppo_release,
    };
    return m;
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
