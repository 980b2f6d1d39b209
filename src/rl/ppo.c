/*
 * PPO on the towers engine (see rl_trainers.h). One iteration:
 *   sample T x N steps -> GAE -> shuffle rows once -> normalise advantages
 *   (per minibatch, or over the batch) -> load into tower stack 0 ->
 *   num_sgd_iter epochs, each visiting the minibatches in a fresh random
 *   order.
 */
#include "rl_trainers.h"
#include "dpt/arena.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "optim/optim_ckpt.h"
#include "rollout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct dpt_ppo {
    dpt_rl_config_t cfg;
    const dpt_env_class_t *cls;
    dpt__rollout_t ro;
    dpt_policy_t *actor;   /* acting copy */
    dpt_policy_t *learner; /* the model the towers train */
    dpt_towers_t *towers;
    dpt_arena_t params; /* weights used for sampling */
    size_t rows;        /* T * N */
    size_t *perm;
    size_t *order;          /* [max_minibatches]: one epoch's minibatch order */
    size_t max_minibatches; /* rows / sgd_minibatch_size: a load's most */
    /* shuffled copy of the batch that is loaded */
    float *obs, *logp, *adv, *ret, *val;
    void *act;
    dpt_rng_t shuffle_rng;
    uint64_t iteration, timesteps;
    void *blob; /* checkpoint state, kept so a writer can borrow it */
    size_t blob_bytes;
};

void dpt_ppo_destroy(dpt_ppo_t *p)
{
    if (!p)
        return;
    dpt_towers_destroy(p->towers);
    dpt_policy_destroy(p->learner);
    dpt_policy_destroy(p->actor);
    dpt__rollout_deinit(&p->ro);
    dpt_arena_deinit(&p->params);
    free(p->perm);
    free(p->order);
    free(p->obs);
    free(p->logp);
    free(p->adv);
    free(p->ret);
    free(p->val);
    free(p->act);
    free(p->blob);
    free(p);
}

int dpt__rl_check_config(const dpt_rl_config_t *c, size_t rows_per_batch)
{
    if (c->num_envs < 1 || c->rollout_fragment_length < 1)
        return dpt_error(DPT_EINVAL, "rl: num_envs and rollout_fragment_length must be >= 1");
    if (c->sgd_minibatch_size < 1 || c->sgd_minibatch_size > rows_per_batch)
        return dpt_error(DPT_EINVAL,
                         "rl: sgd_minibatch_size %zu must be in [1, %zu] (the rows of a batch)",
                         c->sgd_minibatch_size, rows_per_batch);
    if (c->num_sgd_iter < 1)
        return dpt_error(DPT_EINVAL, "rl: num_sgd_iter must be >= 1");
    if (!(c->gamma >= 0.0 && c->gamma <= 1.0) || !(c->lambda >= 0.0 && c->lambda <= 1.0))
        return dpt_error(DPT_EINVAL, "rl: gamma and lambda must be in [0, 1]");
    if (!(c->lr >= 0.0f) || !(c->adam_eps > 0.0f))
        return dpt_error(DPT_EINVAL, "rl: lr must be >= 0 and adam_eps > 0");
    if (!(c->reward_scale > 0.0f) || !isfinite(c->reward_scale))
        return dpt_error(DPT_EINVAL, "rl: reward_scale must be a positive number");
    return DPT_OK;
}

int dpt_ppo_create(dpt_ppo_t **out, const dpt_env_class_t *cls, const dpt_rl_config_t *cfg)
{
    *out = NULL;
    size_t rows = cfg->num_envs * cfg->rollout_fragment_length;
    int rc = dpt__rl_check_config(cfg, rows);
    if (rc)
        return rc;
    if (cfg->num_devices < 1 || cfg->sgd_minibatch_size % (size_t)cfg->num_devices)
        return dpt_error(DPT_EINVAL,
                         "ppo: sgd_minibatch_size %zu must be divisible by "
                         "num_devices %d",
                         cfg->sgd_minibatch_size, cfg->num_devices);
    dpt_ppo_t *p = calloc(1, sizeof *p);
    if (!p)
        return dpt_error(DPT_ENOMEM, "ppo: cannot allocate");
    p->cfg = *cfg;
    p->cls = cls;
    p->rows = rows;
    size_t pdb = cfg->sgd_minibatch_size / (size_t)cfg->num_devices;
    if ((rc = dpt__rollout_init(&p->ro, cls, cfg->num_envs, cfg->rollout_fragment_length, cfg->seed,
                                0)) != 0 ||
        (rc = dpt_policy_create(&p->actor, cls, cfg->hidden, cfg->nhidden, cfg->num_envs)) != 0 ||
        (rc = dpt_policy_create(&p->learner, cls, cfg->hidden, cfg->nhidden, pdb)) != 0)
        goto fail;
    size_t n = dpt_policy_vars(p->actor)->total;
    if ((rc = dpt_arena_init(&p->params, n)) != 0)
        goto fail;
    dpt_rng_t init;
    dpt_rng_init(&init, cfg->seed, 0, 0, DPT_RNG_INIT);
    dpt_policy_init_params(p->actor, p->params.data, &init);
    dpt_model_t model = dpt_policy_ppo_model(p->learner, &cfg->loss);
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.num_devices = cfg->num_devices;
    tc.mode = cfg->towers_mode;
    tc.max_per_device_batch_size = pdb;
    tc.max_load_rows = rows;
    tc.grad_clip = cfg->grad_clip;
    tc.comm_timeout_s = cfg->comm_timeout_s;
    tc.comm_algorithm = cfg->allreduce_algorithm;
    tc.reduce_sum = cfg->reduce_sum;
    tc.async_scale = cfg->async_scale;
    tc.optim = dpt_optim_defaults(DPT_OPTIM_ADAM);
    tc.optim.eps = cfg->adam_eps;
    dpt_batch_t lay;
    if ((rc = dpt_ppo_batch(&lay, cls, 0, NULL, NULL, NULL, NULL, NULL, NULL)) != 0 ||
        (rc = dpt_towers_create(&p->towers, &model, &lay, &tc)) != 0 ||
        (rc = dpt_towers_set_weights(p->towers, p->params.data, n)) != 0)
        goto fail;
    /* The towers keep whole minibatches of sgd_minibatch_size rows, so a
     * load never holds more than rows / sgd_minibatch_size of them. */
    p->max_minibatches = rows / cfg->sgd_minibatch_size;
    p->perm = malloc(rows * sizeof *p->perm);
    p->order = malloc(p->max_minibatches * sizeof *p->order);
    p->obs = malloc(rows * cls->obs_dim * sizeof(float));
    p->act = malloc(rows * p->ro.act_w * 4);
    p->logp = malloc(rows * sizeof(float));
    p->adv = malloc(rows * sizeof(float));
    p->ret = malloc(rows * sizeof(float));
    p->val = malloc(rows * sizeof(float));
    if (!p->perm || !p->order || !p->obs || !p->act || !p->logp || !p->adv || !p->ret || !p->val) {
        rc = dpt_error(DPT_ENOMEM, "ppo: cannot allocate the batch of %zu rows", rows);
        goto fail;
    }
    dpt_rng_init(&p->shuffle_rng, cfg->seed, 0, 0, DPT_RNG_SHUFFLE);
    *out = p;
    return DPT_OK;
fail:
    dpt_ppo_destroy(p);
    return rc;
}

dpt_policy_t *dpt_ppo_policy(dpt_ppo_t *p)
{
    return p->actor;
}

int dpt_ppo_get_weights(dpt_ppo_t *p, float *out, size_t count)
{
    return dpt_towers_get_weights(p->towers, out, count);
}

/* The learning rate of an iteration that starts after `done` env steps. */
float dpt__rl_lr(const dpt_rl_config_t *c, uint64_t done)
{
    if (!c->anneal_lr || c->total_timesteps == 0)
        return c->lr;
    double frac = 1.0 - (double)done / (double)c->total_timesteps;
    return (float)((double)c->lr * (frac > 0.0 ? frac : 0.0));
}

int dpt_ppo_train(dpt_ppo_t *p, dpt_rl_result_t *res)
{
    const dpt_rl_config_t *c = &p->cfg;
    memset(res, 0, sizeof *res);
    double t0 = dpt_now();
    size_t n = p->params.count;
    int rc = dpt_towers_get_weights(p->towers, p->params.data, n);
    if (rc)
        return rc;
    if ((rc = dpt__rollout_collect(&p->ro, p->actor, p->params.data, c->gamma, c->lambda,
                                   c->reward_scale, c->rollout_fragment_length, NULL, NULL)) != 0)
        return rc;
    double t1 = dpt_now();
    size_t rows = p->rows;
    res->vf_explained_var = dpt_explained_variance(p->ro.values, p->ro.returns, rows);
    if (c->normalize_advantages == DPT_ADV_NORM_BATCH)
        dpt_normalize(p->ro.adv, rows);
    /* Shuffle the rows once; the epochs then permute whole minibatches. */
    for (size_t i = 0; i < rows; i++)
        p->perm[i] = i;
    dpt_rng_shuffle(&p->shuffle_rng, p->perm, rows);
    dpt__rollout_gather(&p->ro, p->perm, rows, p->obs, p->act, p->logp, p->adv, p->ret, p->val);
    /* The towers keep the first `keep` rows, device d holding rows
     * [d keep/D, (d+1) keep/D); minibatch membership is fixed here, so each
     * minibatch is normalized over all its rows before the load. */
    size_t D = (size_t)c->num_devices, mb = c->sgd_minibatch_size, pdb = mb / D;
    size_t keep = rows - rows % mb;
    if (c->normalize_advantages == DPT_ADV_NORM_MINIBATCH)
        dpt__rl_normalize_minibatches(p->adv, D, keep / D, pdb);
    dpt_batch_t b;
    dpt_towers_load_info_t li;
    if ((rc = dpt_ppo_batch(&b, p->cls, rows, p->obs, p->act, p->logp, p->adv, p->ret, p->val)) !=
            0 ||
        (rc = dpt_towers_load(p->towers, 0, &b, &li)) != 0)
        return rc;
    if (li.rows_loaded != keep || li.per_device_batch != pdb || li.steps > p->max_minibatches)
        return dpt_error(DPT_ESTATE,
                         "ppo: the towers loaded %zu rows in %zu minibatches of %zu "
                         "rows per device; expected %zu rows in minibatches of %zu",
                         li.rows_loaded, li.steps, li.per_device_batch, keep, pdb);
    float lr = dpt__rl_lr(c, p->timesteps);
    dpt__rl_learn_stats_t ls;
    if ((rc = dpt__rl_learn(p->towers, c->num_sgd_iter, li.steps, li.steps, li.per_device_batch, lr,
                            &p->shuffle_rng, p->order, &ls)) != 0)
        return rc;
    double t2 = dpt_now();
    p->iteration++;
    p->timesteps += rows;
    res->iteration = p->iteration;
    res->timesteps_total = p->timesteps;
    res->timesteps_this_iter = rows;
    res->episodes_total = p->ro.episodes_total;
    res->episodes_this_iter = p->ro.episodes_this_iter;
    dpt__rollout_episode_stats(&p->ro, &res->episode_reward_mean, &res->episode_reward_min,
                               &res->episode_reward_max, &res->episode_len_mean,
                               &res->episode_reward_mean_20, &res->episodes_in_window);
    res->policy_loss = ls.policy_loss;
    res->vf_loss = ls.vf_loss;
    res->entropy = ls.entropy;
    res->kl = ls.kl;
    res->clipfrac = ls.clipfrac;
    res->grad_norm = ls.grad_norm;
    res->cur_lr = lr;
    res->sample_time_s = t1 - t0;
    res->learn_time_s = t2 - t1;
    res->iteration_time_s = t2 - t0;
    res->env_steps_per_s = (double)rows / (t2 - t0);
    res->rows_min = rows;
    return DPT_OK;
}

int dpt__rl_learn(dpt_towers_t *towers, int epochs, size_t loaded, size_t visit, size_t per_device,
                  float lr, dpt_rng_t *rng, size_t *order, dpt__rl_learn_stats_t *out)
{
    double sums[6] = {0};
    size_t nsteps = 0;
    memset(out, 0, sizeof *out);
    for (int e = 0; e < epochs; e++) {
        for (size_t j = 0; j < loaded; j++)
            order[j] = j;
        dpt_rng_shuffle(rng, order, loaded);
        for (size_t j = 0; j < visit; j++) {
            dpt_towers_stats_t st;
            int rc = dpt_towers_optimize(towers, 0, order[j] * per_device, lr, &st);
            if (rc)
                return rc;
            sums[0] += st.extra[DPT_PPO_STAT_POLICY_LOSS];
            sums[1] += st.extra[DPT_PPO_STAT_VF_LOSS];
            sums[2] += st.extra[DPT_PPO_STAT_ENTROPY];
            sums[3] += st.extra[DPT_PPO_STAT_KL];
            sums[4] += st.extra[DPT_PPO_STAT_CLIPFRAC];
            sums[5] += st.grad_norm;
            nsteps++;
        }
    }
    double inv = nsteps ? 1.0 / (double)nsteps : 0.0;
    out->policy_loss = sums[0] * inv;
    out->vf_loss = sums[1] * inv;
    out->entropy = sums[2] * inv;
    out->kl = sums[3] * inv;
    out->clipfrac = sums[4] * inv;
    out->grad_norm = sums[5] * inv;
    return DPT_OK;
}

void dpt__rl_normalize_minibatches(float *adv, size_t devices, size_t rows_per_device,
                                   size_t per_device)
{
    size_t n = devices * per_device;
    if (n == 0)
        return;
    /* The sums run device by device, row by row: with one device this is
     * dpt_normalize() of each contiguous minibatch, bit for bit. */
    for (size_t o = 0; o + per_device <= rows_per_device; o += per_device) {
        double m = 0.0, s = 0.0;
        for (size_t d = 0; d < devices; d++)
            for (size_t k = 0; k < per_device; k++)
                m += (double)adv[d * rows_per_device + o + k];
        m /= (double)n;
        for (size_t d = 0; d < devices; d++)
            for (size_t k = 0; k < per_device; k++) {
                double x = (double)adv[d * rows_per_device + o + k] - m;
                s += x * x;
            }
        double sd = sqrt(s / (double)n) + 1e-8;
        for (size_t d = 0; d < devices; d++)
            for (size_t k = 0; k < per_device; k++) {
                float *x = &adv[d * rows_per_device + o + k];
                *x = (float)(((double)*x - m) / sd);
            }
    }
}

/* ---- checkpoints ------------------------------------------------------------------ */

#define DPT__PPO_MAGIC UINT64_C(0x64707470706f3031) /* "dptppo01" */

uint64_t dpt_ppo_iteration(const dpt_ppo_t *p)
{
    return p->iteration;
}

int dpt_ppo_checkpoint(dpt_ppo_t *p, dpt_safetensors_writer_t *w)
{
    const dpt_vartable_t *vars = dpt_policy_vars(p->actor);
    int rc = dpt_towers_get_weights(p->towers, p->params.data, p->params.count);
    if (rc)
        return rc;
    size_t bytes = 4 * sizeof(uint64_t) + dpt__rollout_state_bytes(&p->ro);
    if (bytes > p->blob_bytes) {
        void *nb = realloc(p->blob, bytes);
        if (!nb)
            return dpt_error(DPT_ENOMEM, "ppo checkpoint: cannot allocate %zu bytes", bytes);
        p->blob = nb;
        p->blob_bytes = bytes;
    }
    uint64_t head[4] = {DPT__PPO_MAGIC, p->iteration, p->timesteps, dpt_rng_tell(&p->shuffle_rng)};
    memcpy(p->blob, head, sizeof head);
    if ((rc = dpt__rollout_save_state(&p->ro, (char *)p->blob + sizeof head,
                                      bytes - sizeof head)) != 0 ||
        (rc = dpt__optim_ckpt_save(w, vars, p->params.data, dpt_towers_optimizer(p->towers))) !=
            0 ||
        (rc = dpt_safetensors_add_blob(w, "ppo.state", p->blob, bytes)) != 0)
        return rc;
    return DPT_OK;
}

int dpt_ppo_restore(dpt_ppo_t *p, const dpt_safetensors_t *st)
{
    dpt_optim_t *opt = dpt_towers_optimizer(p->towers);
    dpt__optim_ckpt_t ck;
    const void *blob;
    size_t bytes;
    int rc = dpt__optim_ckpt_load(st, dpt_policy_vars(p->actor), opt, &ck);
    if (!rc)
        rc = dpt_safetensors_get_blob(st, "ppo.state", &blob, &bytes);
    uint64_t head[4] = {0};
    if (!rc && bytes != 4 * sizeof(uint64_t) + dpt__rollout_state_bytes(&p->ro))
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s: ppo.state has %zu bytes, this "
                       "configuration needs %zu",
                       dpt_safetensors_path(st), bytes,
                       4 * sizeof(uint64_t) + dpt__rollout_state_bytes(&p->ro));
    if (!rc) {
        memcpy(head, blob, sizeof head);
        if (head[0] != DPT__PPO_MAGIC)
            rc = dpt_error(DPT_EFORMAT, "checkpoint %s: ppo.state is not a PPO state",
                           dpt_safetensors_path(st));
    }
    /* Everything validated: from here on the trainer changes. */
    if (!rc)
        rc = dpt__rollout_load_state(&p->ro, (const char *)blob + sizeof head, bytes - sizeof head);
    if (!rc)
        rc = dpt_towers_set_weights(p->towers, ck.data, ck.count);
    if (!rc) {
        dpt__optim_ckpt_apply(&ck, opt);
        rc = dpt_towers_set_optimizer_state(p->towers, opt);
    }
    if (!rc) {
        p->iteration = head[1];
        p->timesteps = head[2];
        dpt_rng_seek(&p->shuffle_rng, head[3]);
    }
    dpt__optim_ckpt_free(&ck);
    return rc;
}
