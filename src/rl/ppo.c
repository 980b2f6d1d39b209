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
#include "parallel/reduction.h"
#include "env_internal.h"
#include "core/prof.h"
#include "rl_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dpt_ppo {
    dpt_ppo_config_t cfg;
    const dpt_env_class_t *cls;
    dpt__rollout_t ro;
    dpt_policy_t *actor;   /* acting copy */
    dpt_policy_t **actors; /* feed-forward, several devices: device d's acting copy
                              (actors[0] = actor) */
    dpt_policy_t *learner; /* the model the towers train */
    dpt_towers_t *towers;
    dpt_arena_t params;    /* weights used for sampling */
    size_t rows;           /* T * N */
    size_t L;              /* recurrent: steps per sequence; 0 = feed-forward */
    size_t *perm;          /* [rows, or the most sequences]: the batch's order */
    size_t *order;         /* one epoch's minibatch order */
    dpt__chunk_t *chunks;  /* recurrent: the sequences of an iteration */
    dpt__rl_batch_t batch; /* the shuffled copy of the batch that is loaded */
    dpt_rng_t shuffle_rng;
    uint64_t iteration, timesteps;
    dpt_rl_counters_t counters; /* every batch counts once as sampled and trained */
    void *blob;                 /* checkpoint state, kept so a writer can borrow it */
    size_t blob_bytes;
};

void dpt_ppo_destroy(dpt_ppo_t *p)
{
    if (!p)
        return;
    dpt_towers_destroy(p->towers);
    dpt_policy_destroy(p->learner);
    for (int d = 1; p->actors && d < p->cfg.towers.num_devices; d++)
        dpt_policy_destroy(p->actors[d]);
    free(p->actors);
    dpt_policy_destroy(p->actor);
    dpt__rollout_deinit(&p->ro);
    dpt_arena_deinit(&p->params);
    dpt__rl_batch_deinit(&p->batch);
    free(p->perm);
    free(p->order);
    free(p->chunks);
    free(p->blob);
    free(p);
}

int dpt_ppo_create(dpt_ppo_t **out, const dpt_env_class_t *cls, const dpt_ppo_config_t *cfg)
{
    *out = NULL;
    size_t rows = cfg->common.num_envs * cfg->common.rollout_fragment_length;
    int rc = dpt__rl_check_config(&cfg->common, &cfg->learn, rows);
    if (rc)
        return rc;
    size_t chunk = cfg->towers.chunk_rows;
    if (chunk && cfg->common.policy.use_lstm)
        return dpt_error(DPT_EINVAL, "ppo: the invariant order (chunk_rows) takes feed-forward "
                                     "policies");
    if (cfg->towers.num_devices < 1 ||
        (!chunk && cfg->learn.sgd_minibatch_size % (size_t)cfg->towers.num_devices))
        return dpt_error(DPT_EINVAL,
                         "ppo: sgd_minibatch_size %zu must be divisible by "
                         "num_devices %d",
                         cfg->learn.sgd_minibatch_size, cfg->towers.num_devices);
    dpt_ppo_t *p = calloc(1, sizeof *p);
    if (!p)
        return dpt_error(DPT_ENOMEM, "ppo: cannot allocate");
    p->cfg = *cfg;
    p->cls = cls;
    p->rows = rows;
    p->L = cfg->common.policy.use_lstm ? cfg->common.policy.max_seq_len : 0;
    /* (invariant: the learner is called on one chunk at a time) */
    size_t pdb = chunk ? chunk : cfg->learn.sgd_minibatch_size / (size_t)cfg->towers.num_devices;
    if ((rc = dpt__rollout_init(&p->ro, cls, cfg->common.num_envs,
                                cfg->common.rollout_fragment_length, cfg->common.seed, 0,
                                cfg->common.policy.use_lstm ? cfg->common.policy.lstm_cell_size
                                                            : 0)) != 0 ||
        (rc = dpt__rl_policies(cls, &cfg->common, pdb, &p->actor, &p->learner)) != 0)
        goto fail;
    size_t n = dpt_policy_vars(p->actor)->total;
    if ((rc = dpt_arena_init(&p->params, n)) != 0)
        goto fail;
    dpt_rng_t init;
    dpt_rng_init(&init, cfg->common.seed, 0, 0, DPT_RNG_INIT);
    dpt_policy_init_params(p->actor, p->params.data, &init);
    /* A recurrent batch is padded to whole sequences: at most one per step
     * (every episode one step long), L rows each. */
    size_t seqs = p->L ? dpt__rollout_max_chunks(&p->ro) : 0, load_rows = rows;
    if (p->L && dpt_mul_size(seqs, p->L, &load_rows)) {
        rc = dpt_error(DPT_EOVERFLOW, "ppo: %zu sequences of %zu steps overflow", seqs, p->L);
        goto fail;
    }
    dpt_model_t model = dpt_policy_ppo_model(p->learner, &cfg->learn.loss);
    dpt_towers_config_t tc = dpt__rl_towers_config(&cfg->common, &cfg->towers, pdb, load_rows);
    tc.chunk_rows = chunk;
    tc.global_batch = chunk ? cfg->learn.sgd_minibatch_size : 0;
    /* Invariant: each env's actions from its own stream, whichever device
     * steps it. */
    if (chunk && (rc = dpt__rollout_env_streams(&p->ro, cfg->common.seed, 0)) != 0)
        goto fail;
    dpt_batch_t lay;
    unsigned char frozen[DPT__RL_MAX_VARS];
    if ((rc = dpt__rl_layout(p->learner, &lay)) != 0 ||
        (rc = dpt__rl_frozen(&cfg->common, p->learner, frozen, &tc)) != 0 ||
        (rc = dpt_towers_create(&p->towers, &model, &lay, &tc)) != 0 ||
        (rc = dpt_towers_set_weights(p->towers, p->params.data, n)) != 0 ||
        (rc = dpt__rl_batch_init(&p->batch, &p->ro, load_rows, seqs)) != 0)
        goto fail;
    /* The order buffers: a load never holds more minibatches than rows /
     * sgd_minibatch_size, or with sequences than sequences. */
    size_t nperm = p->L ? seqs : rows, nmb = p->L ? seqs : rows / cfg->learn.sgd_minibatch_size;
    p->perm = malloc(nperm * sizeof *p->perm);
    p->order = malloc((nmb ? nmb : 1) * sizeof *p->order);
    p->chunks = p->L ? malloc(seqs * sizeof *p->chunks) : NULL;
    if (!p->perm || !p->order || (p->L && !p->chunks)) {
        rc = dpt_error(DPT_ENOMEM, "ppo: cannot allocate the batch of %zu rows", load_rows);
        goto fail;
    }
    /* Several devices, feed-forward: each device steps its own envs with
     * its own copy of the policy (dpt__rollout_collect_devices). */
    if (cfg->towers.num_devices > 1 && !p->L && !dpt__ext_of(cls)) {
        p->actors = calloc((size_t)cfg->towers.num_devices, sizeof *p->actors);
        if (!p->actors) {
            rc = dpt_error(DPT_ENOMEM, "ppo: cannot allocate %d acting policies",
                           cfg->towers.num_devices);
            goto fail;
        }
        p->actors[0] = p->actor;
        for (int d = 1; d < cfg->towers.num_devices; d++)
            if ((rc = dpt_policy_create_ex(&p->actors[d], cls, dpt_policy_spec(p->actor),
                                           cfg->common.num_envs)) != 0)
                goto fail;
        if ((rc = dpt__rollout_init_devices(&p->ro, cfg->towers.num_devices)) != 0)
            goto fail;
    }
    dpt_rng_init(&p->shuffle_rng, cfg->common.seed, 0, 0, DPT_RNG_SHUFFLE);
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

int dpt_ppo_set_weights(dpt_ppo_t *p, const float *in, size_t count)
{
    return dpt_towers_set_weights(p->towers, in, count);
}

/* dpt_towers_run for the rollout's device-parallel collect. */
static int dpt__ppo_run_devices(void *towers, int (*fn)(void *arg, int device), void *arg)
{
    return dpt_towers_run(towers, fn, arg);
}

int dpt_ppo_train(dpt_ppo_t *p, dpt_rl_result_t *res)
{
    const dpt_ppo_config_t *c = &p->cfg;
    memset(res, 0, sizeof *res);
    dpt__prof_lap(DPT_PROF_OUTSIDE);
    double t0 = dpt_now();
    size_t n = p->params.count;
    int rc = dpt_towers_get_weights(p->towers, p->params.data, n);
    if (rc)
        return rc;
    if (p->actors)
        rc = dpt__rollout_collect_devices(&p->ro, p->actors, p->params.data, c->common.gamma,
                                          c->learn.lambda, c->common.reward_scale,
                                          dpt__ppo_run_devices, p->towers);
    else
        rc = dpt__rollout_collect(&p->ro, p->actor, p->params.data, c->common.gamma,
                                  c->learn.lambda, c->common.reward_scale,
                                  c->common.rollout_fragment_length, NULL, NULL);
    if (rc)
        return rc;
    double t1 = dpt_now();
    size_t rows = p->rows;
    res->vf_explained_var = dpt_explained_variance(p->ro.values, p->ro.returns, rows);
    if (c->learn.normalize_advantages == DPT_ADV_NORM_BATCH)
        dpt_normalize(p->ro.adv, rows);
    dpt_batch_t b;
    size_t nseq;
    if ((rc = dpt__rl_make_batch(&p->ro, p->learner, p->L, &p->shuffle_rng, p->perm, p->chunks,
                                 &p->batch, &b, &nseq)) != 0)
        return rc;
    /* The towers keep the first rows_loaded rows (whole minibatches, whole
     * sequences), device d holding rows [d R/D, (d+1) R/D); minibatch
     * membership is fixed here, so each minibatch is normalized over all
     * its rows (its real steps) before the load. */
    dpt_towers_load_info_t plan, li;
    if ((rc = dpt_towers_plan(p->towers, &b, 0, &plan)) != 0)
        return rc;
    /* (invariant: minibatch k is rows [k B, (k + 1) B) of the batch) */
    if (c->learn.normalize_advantages == DPT_ADV_NORM_MINIBATCH && c->towers.chunk_rows)
        dpt__rl_normalize_minibatches(p->batch.adv, 1, plan.rows_loaded, plan.minibatch);
    else if (c->learn.normalize_advantages == DPT_ADV_NORM_MINIBATCH)
        dpt__rl_normalize_minibatches_masked(p->batch.adv, p->L ? p->batch.mask : NULL,
                                             (size_t)c->towers.num_devices, plan.rows_per_device,
                                             plan.per_device_batch);
    dpt__prof_lap(DPT_PROF_BATCH);
    if ((rc = dpt_towers_load(p->towers, 0, &b, &li)) != 0)
        return rc;
    size_t cap = p->L ? nseq : rows / c->learn.sgd_minibatch_size;
    if (li.rows_loaded != plan.rows_loaded || li.per_device_batch != plan.per_device_batch ||
        li.steps > cap)
        return dpt_error(DPT_ESTATE,
                         "ppo: the towers loaded %zu rows in %zu minibatches of %zu "
                         "rows per device; expected %zu rows in minibatches of %zu",
                         li.rows_loaded, li.steps, li.per_device_batch, plan.rows_loaded,
                         plan.per_device_batch);
    float lr = dpt__rl_lr(&c->common, p->timesteps);
    dpt__rl_learn_stats_t ls;
    if ((rc = dpt__rl_learn(p->towers, c->common.num_sgd_iter, li.steps, li.steps,
                            li.per_device_batch, lr, &p->shuffle_rng, p->order, &ls)) != 0)
        return rc;
    double t2 = dpt_now();
    p->iteration++;
    p->timesteps += rows;
    p->counters.env_steps_sampled += rows;
    p->counters.env_steps_trained += rows;
    p->counters.agent_steps_sampled += rows;
    p->counters.agent_steps_trained += rows;
    res->iteration = p->iteration;
    res->timesteps_total = p->timesteps;
    res->timesteps_this_iter = rows;
    res->episodes_total = p->ro.episodes_total;
    res->episodes_this_iter = p->ro.episodes_this_iter;
    dpt__rl_result_episodes(res, &p->ro.window);
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
    res->counters = p->counters;
    if (p->L) {
        res->sequences = nseq;
        res->rows_padded = nseq * p->L - rows;
        res->rows_dropped = li.rows_dropped;
    }
    snprintf(res->note, sizeof res->note, "%s", li.warning);
    dpt__prof_lap(DPT_PROF_LEARN_OTHER);
    return DPT_OK;
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
        (rc = dpt_safetensors_add_blob(w, "ppo.state", p->blob, bytes)) != 0 ||
        (rc = dpt__rl_counters_save(w, &p->counters)) != 0 ||
        (rc = dpt__reduction_save(w, p->cfg.towers.chunk_rows)) != 0)
        return rc;
    return DPT_OK;
}

int dpt_ppo_restore(dpt_ppo_t *p, const dpt_safetensors_t *st)
{
    dpt_optim_t *opt = dpt_towers_optimizer(p->towers);
    dpt__optim_ckpt_t ck;
    const void *blob;
    size_t bytes;
    int rc = dpt__reduction_check(st, p->cfg.towers.chunk_rows);
    if (rc)
        return rc;
    rc = dpt__optim_ckpt_load(st, dpt_policy_vars(p->actor), opt, &ck);
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
    dpt_rl_counters_t counters;
    if (!rc)
        rc = dpt__rl_counters_load(st, head[2], &counters);
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
        p->counters = counters;
        dpt_rng_seek(&p->shuffle_rng, head[3]);
    }
    dpt__optim_ckpt_free(&ck);
    return rc;
}
