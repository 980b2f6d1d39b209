/*
 * DD-PPO workers (see rl_trainers.h).
 *
 * Each worker keeps a full copy of the policy and of Adam's state. Per
 * minibatch it computes the mean gradient g_w over its n_w rows, scales it
 * to the sum n_w g_w, appends n_w, and one all-reduce (sum) gives every
 * worker sum_w n_w g_w and sum_w n_w: the gradient of the mean over all
 * rows, whatever each worker collected. Every worker then clips and steps
 * identically, so the replicas stay bitwise equal (the all-reduce result is
 * bitwise the same on every participant).
 *
 * Minibatch plan: every worker runs the same number of minibatches per
 * epoch, M = floor(fragment x envs / sgd_minibatch_size), so the
 * collectives match even when a preempted worker holds fewer rows. A
 * minibatch has min(sgd_minibatch_size, floor(rows / M)) rows: never more
 * than the buffers hold, and smaller for a preempted worker. Rows left over
 * (rows - M x minibatch) are not visited in that epoch; every epoch
 * reshuffles, so they differ from epoch to epoch.
 */
#include "rl_trainers.h"
#include "dpt/arena.h"
#include "dpt/optim.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "rollout.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct dpt_ddppo_shared {
    int workers;
    atomic_uint_fast64_t finished; /* arrivals, over all iterations */
};

int dpt_ddppo_shared_create(dpt_ddppo_shared_t **out, int workers_in_process)
{
    *out = NULL;
    if (workers_in_process < 1)
        return dpt_error(DPT_EINVAL, "ddppo: %d workers in a process", workers_in_process);
    dpt_ddppo_shared_t *s = calloc(1, sizeof *s);
    if (!s)
        return dpt_error(DPT_ENOMEM, "ddppo: cannot allocate shared state");
    s->workers = workers_in_process;
    atomic_init(&s->finished, 0);
    *out = s;
    return DPT_OK;
}

void dpt_ddppo_shared_destroy(dpt_ddppo_shared_t *s)
{
    free(s);
}

/* Statistics summed over workers in one all-reduce, then normalised. */
enum {
    ST_ROWS, ST_EPIS_THIS, ST_EPIS_TOTAL, ST_WIN_COUNT, ST_WIN_RET, ST_WIN_LEN, ST_N20,
    ST_RET20, ST_PG, ST_VF, ST_ENT, ST_KL, ST_CLIP, ST_GNORM, ST_STEPS, ST_EV, ST_PREEMPTED,
    ST_COUNT
};

struct dpt_ddppo {
    dpt_rl_config_t cfg;
    const dpt_env_class_t *cls;
    dpt_comm_t *comm;
    dpt_ddppo_shared_t *shared;
    int rank, size;
    dpt__rollout_t ro;
    dpt_policy_t *actor, *learner;
    dpt_model_t model;
    dpt_arena_t params, grads;   /* grads has room for the row count after the table */
    size_t nparams;              /* table total */
    dpt_optim_t *opt;
    size_t *perm;
    float *mb_obs, *mb_logp, *mb_adv, *mb_ret, *mb_val;
    void *mb_act;
    dpt_rng_t shuffle_rng;
    uint64_t iteration, timesteps, finished_base;
    uint64_t local_iters;        /* iterations run by this process (preemption counter base) */
    float minmax[4];             /* this worker's [-min, max] and a spare pair */
    float *gathered;             /* [size * 4] */
    /* A restore validated by dpt__ddppo_restore_prepare, not yet applied. */
    float *restore_arenas;       /* [3 * nparams]: params, m, v; NULL when none */
    uint64_t restore_t, restore_head[4];
    const void *restore_buf;
    size_t restore_bytes;
};

void dpt_ddppo_worker_destroy(dpt_ddppo_t *w)
{
    if (!w)
        return;
    dpt__rollout_deinit(&w->ro);
    dpt_policy_destroy(w->actor);
    dpt_policy_destroy(w->learner);
    dpt_arena_deinit(&w->params);
    dpt_arena_deinit(&w->grads);
    dpt_optim_destroy(w->opt);
    free(w->perm);
    free(w->mb_obs);
    free(w->mb_logp);
    free(w->mb_adv);
    free(w->mb_ret);
    free(w->mb_val);
    free(w->mb_act);
    free(w->gathered);
    free(w->restore_arenas);
    free(w);
}

int dpt_ddppo_check_batch(int worker, size_t rows, size_t expected, int preempted)
{
    if (!preempted && rows != expected)
        return dpt_error(DPT_ESTATE,
                         "ddppo worker %d: batch has %zu rows, expected rollout_fragment_length "
                         "x num_envs_per_worker = %zu", worker, rows, expected);
    if (preempted && (rows * 4 < expected || rows > expected))
        return dpt_error(DPT_ESTATE,
                         "ddppo worker %d: preempted batch has %zu rows, expected between 25%% "
                         "of %zu and %zu", worker, rows, expected, expected);
    return DPT_OK;
}

int dpt_ddppo_worker_create(dpt_ddppo_t **out, const dpt_env_class_t *cls,
                            const dpt_rl_config_t *cfg, dpt_comm_t *comm,
                            dpt_ddppo_shared_t *shared)
{
    *out = NULL;
    size_t rows = cfg->num_envs * cfg->rollout_fragment_length;
    int rc = dpt__rl_check_config(cfg, rows);
    if (rc)
        return rc;
    if (cfg->sync_frac < 1.0 && cfg->sgd_minibatch_size < 4)
        return dpt_error(DPT_EINVAL, "ddppo: sgd_minibatch_size must be >= 4 with preemption "
                         "(a worker may hold a quarter of its rows)");
    dpt_ddppo_t *w = calloc(1, sizeof *w);
    if (!w)
        return dpt_error(DPT_ENOMEM, "ddppo: cannot allocate");
    w->cfg = *cfg;
    w->cls = cls;
    w->comm = comm;
    w->shared = shared;
    w->rank = dpt_comm_rank(comm);
    w->size = dpt_comm_size(comm);
    size_t mb = cfg->sgd_minibatch_size;
    if ((rc = dpt__rollout_init(&w->ro, cls, cfg->num_envs, cfg->rollout_fragment_length,
                                cfg->seed, (uint32_t)w->rank)) != 0 ||
        (rc = dpt_policy_create(&w->actor, cls, cfg->hidden, cfg->nhidden, cfg->num_envs)) != 0 ||
        (rc = dpt_policy_create(&w->learner, cls, cfg->hidden, cfg->nhidden, mb)) != 0)
        goto fail;
    w->model = dpt_policy_ppo_model(w->learner, &cfg->loss);
    w->nparams = w->model.vars->total;
    dpt_optim_config_t oc = dpt_optim_defaults(DPT_OPTIM_ADAM);
    oc.eps = cfg->adam_eps;
    if ((rc = dpt_arena_init(&w->params, w->nparams)) != 0 ||
        (rc = dpt_arena_init(&w->grads, w->nparams + DPT_VAR_ALIGN_FLOATS)) != 0 ||
        (rc = dpt_optim_create(&w->opt, &oc, w->nparams)) != 0)
        goto fail;
    size_t od = cls->obs_dim, aw = w->ro.act_w;
    w->perm = malloc(rows * sizeof *w->perm);
    w->mb_obs = malloc(mb * od * sizeof(float));
    w->mb_act = malloc(mb * aw * 4);
    w->mb_logp = malloc(mb * sizeof(float));
    w->mb_adv = malloc(mb * sizeof(float));
    w->mb_ret = malloc(mb * sizeof(float));
    w->mb_val = malloc(mb * sizeof(float));
    w->gathered = malloc((size_t)w->size * 4 * sizeof(float));
    if (!w->perm || !w->mb_obs || !w->mb_act || !w->mb_logp || !w->mb_adv || !w->mb_ret ||
        !w->mb_val || !w->gathered) {
        rc = dpt_error(DPT_ENOMEM, "ddppo: cannot allocate minibatch buffers");
        goto fail;
    }
    /* Every worker starts from rank 0's initial weights. */
    dpt_rng_t init;
    dpt_rng_init(&init, cfg->seed, 0, 0, DPT_RNG_INIT);
    dpt_policy_init_params(w->actor, w->params.data, &init);
    if ((rc = dpt_comm_broadcast(comm, w->params.data, w->nparams, 0)) != 0)
        goto fail;
    dpt_rng_init(&w->shuffle_rng, cfg->seed, (uint32_t)w->rank, 0, DPT_RNG_SHUFFLE);
    *out = w;
    return DPT_OK;
fail:
    dpt_ddppo_worker_destroy(w);
    return rc;
}

dpt_policy_t *dpt_ddppo_policy(dpt_ddppo_t *w) { return w->actor; }
const float *dpt_ddppo_weights(const dpt_ddppo_t *w) { return w->params.data; }

int dpt_ddppo_check_weights(dpt_ddppo_t *w)
{
    int rc = dpt_comm_check_equal(w->comm, w->params.data, w->nparams);
    if (rc == DPT_ECOMM)
        return dpt_error(DPT_ECOMM, "ddppo: workers' weights differ after iteration %llu: %s",
                         (unsigned long long)w->iteration, dpt_last_error());
    return rc;
}

/* The straggler rule: stop once more than sync_frac of this process's
 * workers have finished collecting in this iteration. */
static int dpt__ddppo_should_stop(void *ctx)
{
    dpt_ddppo_t *w = ctx;
    uint64_t done = atomic_load(&w->shared->finished) - w->finished_base;
    return (double)done > w->cfg.sync_frac * (double)w->shared->workers;
}

int dpt_ddppo_worker_train(dpt_ddppo_t *w, dpt_rl_result_t *res)
{
    const dpt_rl_config_t *c = &w->cfg;
    memset(res, 0, sizeof *res);
    double t0 = dpt_now();
    size_t T = c->rollout_fragment_length, N = c->num_envs, expected = T * N;
    int preempt = w->shared && c->sync_frac < 1.0 && w->size > 1;
    /* The shared counter counts arrivals since this process started (not
     * since the run started: a resumed run has a fresh counter). */
    w->finished_base = w->local_iters * (w->shared ? (uint64_t)w->shared->workers : 0);
    w->local_iters++;
    size_t min_steps = preempt ? (T + 3) / 4 : T;
    int rc = dpt__rollout_collect(&w->ro, w->actor, w->params.data, c->gamma, c->lambda,
                                  c->reward_scale, min_steps, preempt ? dpt__ddppo_should_stop : NULL, w);
    if (w->shared)
        atomic_fetch_add(&w->shared->finished, 1);
    if (rc)
        return rc;
    size_t rows = w->ro.steps * N;
    int preempted = w->ro.steps < T;
    if ((rc = dpt_ddppo_check_batch(w->rank, rows, expected, preempted)) != 0)
        return rc;
    double t1 = dpt_now();
    double ev = dpt_explained_variance(w->ro.values, w->ro.returns, rows);
    if (c->normalize_advantages == DPT_RL_ADV_BATCH)
        dpt_normalize(w->ro.adv, rows);
    /* The same count on every worker (it depends on the config only); the
     * size is capped by the buffers, and a preempted worker (>= 25% of its
     * rows, and sgd_minibatch_size >= 4) still has >= 1 row per minibatch. */
    size_t nmb = expected / c->sgd_minibatch_size;
    size_t mbs = rows / nmb < c->sgd_minibatch_size ? rows / nmb : c->sgd_minibatch_size;
    float lr = dpt__rl_lr(c, w->timesteps);
    double sums[6] = {0};
    size_t nsteps = 0;
    dpt_batch_t b;
    if ((rc = dpt_ppo_batch(&b, w->cls, mbs, w->mb_obs, w->mb_act, w->mb_logp, w->mb_adv,
                            w->mb_ret, w->mb_val)) != 0)
        return rc;
    for (size_t i = 0; i < rows; i++)
        w->perm[i] = i;
    for (int e = 0; e < c->num_sgd_iter; e++) {
        dpt_rng_shuffle(&w->shuffle_rng, w->perm, rows);
        for (size_t j = 0; j < nmb; j++) {
            dpt__rollout_gather(&w->ro, w->perm + j * mbs, mbs, w->mb_obs, w->mb_act,
                                w->mb_logp, w->mb_adv, w->mb_ret, w->mb_val);
            if (c->normalize_advantages == DPT_RL_ADV_MINIBATCH)
                dpt_normalize(w->mb_adv, mbs);
            dpt_loss_out_t out;
            float *g = w->grads.data;
            dpt_vec_zero(g, w->grads.count);
            if ((rc = w->model.loss_grad(w->model.ctx, w->params.data, g, &b, &out)) != 0)
                return rc;
            dpt_vec_scale(g, w->nparams, (float)mbs);
            g[w->nparams] = (float)mbs;
            if ((rc = dpt_comm_allreduce(w->comm, g, w->grads.count, DPT_REDUCE_SUM)) != 0)
                return rc;
            dpt_vec_scale(g, w->nparams, 1.0f / g[w->nparams]);
            double norm = dpt_clip_global_norm(g, w->nparams, c->grad_clip);
            if (!isfinite(norm))
                return dpt_error(DPT_ENUMERIC, "ddppo worker %d: gradient norm is %g", w->rank,
                                 norm);
            dpt_optim_step(w->opt, w->params.data, g, lr);
            sums[0] += out.extra[DPT_PPO_STAT_POLICY_LOSS];
            sums[1] += out.extra[DPT_PPO_STAT_VF_LOSS];
            sums[2] += out.extra[DPT_PPO_STAT_ENTROPY];
            sums[3] += out.extra[DPT_PPO_STAT_KL];
            sums[4] += out.extra[DPT_PPO_STAT_CLIPFRAC];
            sums[5] += norm;
            nsteps++;
        }
    }
    double t2 = dpt_now();
    /* Aggregate statistics over workers: sums in one all-reduce, extremes
     * through an all-gather of (-min, max, rows). */
    double wm, wmin, wmax, wl, w20;
    size_t wc;
    dpt__rollout_episode_stats(&w->ro, &wm, &wmin, &wmax, &wl, &w20, &wc);
    float st[ST_COUNT + 15] = {0};
    st[ST_ROWS] = (float)rows;
    st[ST_EPIS_THIS] = (float)w->ro.episodes_this_iter;
    st[ST_EPIS_TOTAL] = (float)w->ro.episodes_total;
    st[ST_WIN_COUNT] = (float)wc;
    st[ST_WIN_RET] = (float)(wm * (double)wc);
    st[ST_WIN_LEN] = (float)(wl * (double)wc);
    st[ST_N20] = wc ? (float)(wc < 20 ? wc : 20) : 0.0f;
    st[ST_RET20] = (float)(w20 * (double)st[ST_N20]);
    double inv = nsteps ? 1.0 / (double)nsteps : 0.0;
    st[ST_PG] = (float)(sums[0] * inv);
    st[ST_VF] = (float)(sums[1] * inv);
    st[ST_ENT] = (float)(sums[2] * inv);
    st[ST_KL] = (float)(sums[3] * inv);
    st[ST_CLIP] = (float)(sums[4] * inv);
    st[ST_GNORM] = (float)(sums[5] * inv);
    st[ST_EV] = (float)ev;
    st[ST_PREEMPTED] = (float)preempted;
    if ((rc = dpt_comm_allreduce(w->comm, st, ST_COUNT, DPT_REDUCE_SUM)) != 0)
        return rc;
    w->minmax[0] = wc ? (float)-wmin : -FLT_MAX;
    w->minmax[1] = wc ? (float)wmax : -FLT_MAX;
    w->minmax[2] = (float)rows;
    w->minmax[3] = 0.0f;
    if ((rc = dpt_comm_allgather(w->comm, w->minmax, 4, w->gathered)) != 0)
        return rc;
    double gmin = DBL_MAX, gmax = -DBL_MAX, rmin = DBL_MAX;
    for (int r = 0; r < w->size; r++) {
        const float *m = w->gathered + (size_t)r * 4;
        if (m[0] > -FLT_MAX) {
            gmin = fmin(gmin, -(double)m[0]);
            gmax = fmax(gmax, (double)m[1]);
        }
        rmin = fmin(rmin, (double)m[2]);
    }
    w->iteration++;
    uint64_t total_rows = (uint64_t)st[ST_ROWS];
    w->timesteps += total_rows;
    double P = (double)w->size, cnt = (double)st[ST_WIN_COUNT];
    res->iteration = w->iteration;
    res->timesteps_total = w->timesteps;
    res->timesteps_this_iter = total_rows;
    res->episodes_this_iter = (uint64_t)st[ST_EPIS_THIS];
    res->episodes_total = (uint64_t)st[ST_EPIS_TOTAL];
    res->episodes_in_window = (size_t)cnt;
    res->episode_reward_mean = cnt > 0 ? (double)st[ST_WIN_RET] / cnt : 0.0;
    res->episode_len_mean = cnt > 0 ? (double)st[ST_WIN_LEN] / cnt : 0.0;
    res->episode_reward_mean_20 =
        st[ST_N20] > 0 ? (double)st[ST_RET20] / (double)st[ST_N20] : 0.0;
    res->episode_reward_min = gmin < DBL_MAX ? gmin : 0.0;
    res->episode_reward_max = gmax > -DBL_MAX ? gmax : 0.0;
    res->policy_loss = (double)st[ST_PG] / P;
    res->vf_loss = (double)st[ST_VF] / P;
    res->entropy = (double)st[ST_ENT] / P;
    res->kl = (double)st[ST_KL] / P;
    res->clipfrac = (double)st[ST_CLIP] / P;
    res->grad_norm = (double)st[ST_GNORM] / P;
    res->vf_explained_var = (double)st[ST_EV] / P;
    res->preempted_workers = (uint64_t)st[ST_PREEMPTED];
    res->rows_min = (uint64_t)rmin;
    res->cur_lr = lr;
    double t3 = dpt_now();
    res->sample_time_s = t1 - t0;
    res->learn_time_s = t2 - t1;
    res->iteration_time_s = t3 - t0;
    res->env_steps_per_s = (double)total_rows / (t3 - t0);
    if (c->check_weights_every > 0 && w->iteration % (uint64_t)c->check_weights_every == 0)
        return dpt_ddppo_check_weights(w);
    return DPT_OK;
}

int dpt_rl_evaluate(dpt_policy_t *policy, const float *params, uint64_t seed, size_t episodes,
                    double *mean_return, double *mean_length)
{
    *mean_return = *mean_length = 0.0;
    if (episodes == 0)
        return DPT_OK;
    const dpt_env_class_t *cls = dpt_policy_env_class(policy);
    dpt_vecenv_t *env;
    /* Evaluation envs use their own rank so they never replay training envs. */
    int rc = dpt_vecenv_create(&env, cls, 1, seed, 0x45564131u);
    if (rc)
        return rc;
    float obs[DPT_ENV_MAX_DIM], rew;
    int32_t iact;
    float fact[DPT_ENV_MAX_DIM];
    void *act = cls->action_kind == DPT_ACTION_DISCRETE ? (void *)&iact : (void *)fact;
    uint8_t term, trunc;
    double sum_r = 0.0, sum_l = 0.0;
    size_t done = 0;
    dpt_vecenv_reset(env, obs);
    while (done < episodes) {
        if ((rc = dpt_policy_act(policy, params, obs, 1, NULL, act, NULL, NULL)) != 0 ||
            (rc = dpt_vecenv_step(env, act, obs, &rew, &term, &trunc, NULL)) != 0)
            break;
        double r;
        uint32_t l;
        while (done < episodes && dpt_vecenv_pop_episodes(env, &r, &l, 1, NULL) == 1) {
            sum_r += r;
            sum_l += l;
            done++;
        }
    }
    dpt_vecenv_destroy(env);
    if (rc)
        return rc;
    *mean_return = sum_r / (double)episodes;
    *mean_length = sum_l / (double)episodes;
    return DPT_OK;
}

/* ---- checkpoints ------------------------------------------------------------------ */

#define DPT__DDPPO_MAGIC UINT64_C(0x6470746464707031) /* "dptddpp1" */

uint64_t dpt_ddppo_iteration(const dpt_ddppo_t *w)
{
    return w->iteration;
}

int dpt_ddppo_checkpoint_common(dpt_ddppo_t *w, dpt_safetensors_writer_t *wr)
{
    const dpt_vartable_t *vars = w->model.vars;
    int rc = dpt_safetensors_add_arena(wr, "params.", vars, w->params.data, w->nparams);
    if (!rc)
        rc = dpt__rl_add_optim(wr, w->opt, vars);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(wr, "workers", (uint64_t)w->size);
    return rc;
}

size_t dpt_ddppo_state_bytes(const dpt_ddppo_t *w)
{
    return 4 * sizeof(uint64_t) + dpt__rollout_state_bytes(&w->ro);
}

int dpt_ddppo_save_state(const dpt_ddppo_t *w, void *buf, size_t bytes)
{
    if (bytes != dpt_ddppo_state_bytes(w))
        return dpt_error(DPT_EINVAL, "ddppo state: %zu bytes given, %zu needed", bytes,
                         dpt_ddppo_state_bytes(w));
    uint64_t head[4] = {DPT__DDPPO_MAGIC, w->iteration, w->timesteps,
                        dpt_rng_tell(&w->shuffle_rng)};
    memcpy(buf, head, sizeof head);
    return dpt__rollout_save_state(&w->ro, (char *)buf + sizeof head, bytes - sizeof head);
}

void dpt__ddppo_restore_abort(dpt_ddppo_t *w)
{
    free(w->restore_arenas);
    w->restore_arenas = NULL;
    w->restore_buf = NULL;
    w->restore_bytes = 0;
}

int dpt__ddppo_restore_prepare(dpt_ddppo_t *w, const dpt_safetensors_t *st, const void *buf,
                               size_t bytes)
{
    dpt__ddppo_restore_abort(w);
    const dpt_vartable_t *vars = w->model.vars;
    size_t n = w->nparams;
    uint64_t workers = 0, head[4] = {0};
    int rc = dpt_safetensors_meta_u64(st, "workers", &workers);
    if (!rc && workers != (uint64_t)w->size)
        rc = dpt_error(DPT_EINVAL, "checkpoint %s was written by %llu DD-PPO workers, this run "
                       "has %d", dpt_safetensors_path(st), (unsigned long long)workers, w->size);
    if (!rc && bytes != dpt_ddppo_state_bytes(w))
        rc = dpt_error(DPT_EFORMAT, "checkpoint %s: worker %d state has %zu bytes, expected %zu",
                       dpt_safetensors_path(st), w->rank, bytes, dpt_ddppo_state_bytes(w));
    if (!rc) {
        memcpy(head, buf, sizeof head);
        if (head[0] != DPT__DDPPO_MAGIC)
            rc = dpt_error(DPT_EFORMAT, "checkpoint %s: worker %d state is not a DD-PPO state",
                           dpt_safetensors_path(st), w->rank);
    }
    if (!rc && (rc = dpt__rollout_check_state(&w->ro, (const char *)buf + sizeof head,
                                              bytes - sizeof head)) != 0)
        rc = dpt_error(rc, "checkpoint %s: worker %d: %s", dpt_safetensors_path(st), w->rank,
                       dpt_last_error());
    float *tmp = rc ? NULL : calloc(3 * n, sizeof(float));
    if (!rc && !tmp)
        rc = dpt_error(DPT_ENOMEM, "ddppo restore: cannot allocate");
    uint64_t t = 0;
    if (!rc)
        rc = dpt__rl_load_arenas(st, vars, tmp, tmp + n, tmp + 2 * n, &t);
    if (rc) {
        free(tmp);
        return rc;
    }
    w->restore_arenas = tmp;
    w->restore_t = t;
    memcpy(w->restore_head, head, sizeof head);
    w->restore_buf = buf;
    w->restore_bytes = bytes;
    return DPT_OK;
}

void dpt__ddppo_restore_commit(dpt_ddppo_t *w)
{
    if (!w->restore_arenas)
        return;
    size_t n = w->nparams, hb = sizeof w->restore_head;
    /* prepare checked the state, so this load cannot fail. */
    if (dpt__rollout_load_state(&w->ro, (const char *)w->restore_buf + hb,
                                w->restore_bytes - hb) != 0)
        abort();
    const float *tmp = w->restore_arenas;
    memcpy(w->params.data, tmp, n * sizeof(float));
    memcpy(dpt_optim_slot(w->opt, 0), tmp + n, n * sizeof(float));
    memcpy(dpt_optim_slot(w->opt, 1), tmp + 2 * n, n * sizeof(float));
    dpt_optim_set_t(w->opt, w->restore_t);
    w->iteration = w->restore_head[1];
    w->timesteps = w->restore_head[2];
    dpt_rng_seek(&w->shuffle_rng, w->restore_head[3]);
    dpt__ddppo_restore_abort(w);
}

int dpt_ddppo_restore(dpt_ddppo_t *w, const dpt_safetensors_t *st, const void *buf,
                      size_t bytes)
{
    int rc = dpt__ddppo_restore_prepare(w, st, buf, bytes);
    if (!rc)
        dpt__ddppo_restore_commit(w);
    return rc;
}
