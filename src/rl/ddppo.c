/*
 * DD-PPO workers (see rl_trainers.h).
 *
 * Each worker owns a one-device towers engine (dpt/towers.h) over the
 * workers' communicator, in replicated mode with weight_rows: per
 * minibatch the engine computes the worker's mean gradient g_w over its n_w
 * rows, and one all-reduce of (n_w g_w, n_w) gives every worker
 * sum_w n_w g_w / sum_w n_w, the gradient of the mean over all rows
 * whatever each worker collected; every worker then clips and applies Adam
 * identically, so the copies stay bitwise equal (the all-reduce result is
 * bitwise the same on every participant).
 *
 * One iteration, as PPO's (ppo.c): sample, GAE, normalize advantages (per
 * batch before the shuffle, or per minibatch after it), shuffle the rows
 * once, load them once into the towers, then num_sgd_iter epochs, each
 * visiting the minibatches in a fresh random order from the worker's own
 * stream.
 *
 * Minibatch plan: every worker takes the same number of steps per epoch,
 * M = floor(fragment x envs / sgd_minibatch_size), so the collectives match
 * even when a preempted worker holds fewer rows. The load fixes the rows per
 * minibatch to min(sgd_minibatch_size, floor(rows / M)) (dpt_towers_load_ex):
 * sgd_minibatch_size for a worker that collected its whole fragment, fewer
 * for a preempted one, which then may hold more than M minibatches; each
 * epoch visits M of them, the first M of a fresh permutation. Rows past the
 * last whole minibatch (rows mod minibatch) are not loaded.
 */
#include "rl_trainers.h"
#include "core/prof.h"
#include "dpt/arena.h"
#include "dpt/optim.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "optim/optim_ckpt.h"
#include "ddppo_invariant.h"
#include "parallel/reduction.h"
#include "rl_engine.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
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
    ST_ROWS,
    ST_EPIS_THIS,
    ST_EPIS_TOTAL,
    ST_WIN_COUNT,
    ST_WIN_RET,
    ST_WIN_LEN,
    ST_N20,
    ST_RET20,
    ST_PG,
    ST_VF,
    ST_ENT,
    ST_KL,
    ST_CLIP,
    ST_GNORM,
    ST_STEPS,
    ST_EV,
    ST_PREEMPTED,
    ST_SEQS,
    ST_PADDED,
    ST_DROPPED,
    ST_COUNT
};

struct dpt_ddppo {
    dpt_ddppo_config_t cfg;
    const dpt_env_class_t *cls;
    dpt_comm_t *comm;
    dpt_ddppo_shared_t *shared;
    int rank, size;
    dpt__rollout_t ro;
    dpt_policy_t *actor;   /* acting copy */
    dpt_policy_t *learner; /* the model the towers train */
    dpt_towers_t *towers;
    dpt_arena_t params;    /* the towers' weights, copied out after each learning
                                  * phase: the actor samples with them, checkpoints and
                                  * the identical-weights check read them */
    size_t nparams;        /* table total */
    size_t L;              /* recurrent: steps per sequence; 0 = feed-forward */
    size_t *perm;          /* [rows or sequences]: the iteration's order */
    size_t *order;         /* [rows or sequences]: one epoch's minibatch order (a
                                  * load holds at most one minibatch per row) */
    dpt__chunk_t *chunks;  /* recurrent: the sequences of an iteration */
    dpt__rl_batch_t batch; /* the shuffled copy of the batch that is loaded */
    dpt_rng_t shuffle_rng;
    uint64_t iteration, timesteps, finished_base;
    uint64_t local_iters;       /* iterations run by this process (preemption counter base) */
    dpt_rl_counters_t counters; /* of every worker: each batch counts once as sampled and
                                 * trained */
    float minmax[4];            /* this worker's [-min, max] and a spare pair */
    float *gathered;            /* [size * 4] */
    dpt__ddppo_inv_t inv;       /* the invariant order's global batch (cfg.chunk_rows > 0) */
    /* A restore validated by dpt__ddppo_restore_prepare, not yet applied. */
    dpt__optim_ckpt_t restore_ck; /* params and optimizer state; data NULL when none */
    uint64_t restore_head[4];
    dpt_rl_counters_t restore_counters;
    const void *restore_buf;
    size_t restore_bytes;
};

void dpt_ddppo_worker_destroy(dpt_ddppo_t *w)
{
    if (!w)
        return;
    dpt_towers_destroy(w->towers);
    dpt__rollout_deinit(&w->ro);
    dpt_policy_destroy(w->actor);
    dpt_policy_destroy(w->learner);
    dpt_arena_deinit(&w->params);
    free(w->perm);
    free(w->order);
    free(w->chunks);
    dpt__rl_batch_deinit(&w->batch);
    free(w->gathered);
    dpt__ddppo_inv_deinit(&w->inv);
    dpt__optim_ckpt_free(&w->restore_ck);
    free(w);
}

int dpt_ddppo_check_batch(int worker, size_t rows, size_t expected, int preempted)
{
    if (!preempted && rows != expected)
        return dpt_error(DPT_ESTATE,
                         "ddppo worker %d: batch has %zu rows, expected rollout_fragment_length "
                         "x num_envs_per_worker = %zu",
                         worker, rows, expected);
    if (preempted && (rows * 4 < expected || rows > expected))
        return dpt_error(DPT_ESTATE,
                         "ddppo worker %d: preempted batch has %zu rows, expected between 25%% "
                         "of %zu and %zu",
                         worker, rows, expected, expected);
    return DPT_OK;
}

int dpt_ddppo_worker_create(dpt_ddppo_t **out, const dpt_env_class_t *cls,
                            const dpt_ddppo_config_t *cfg, dpt_comm_t *comm,
                            dpt_ddppo_shared_t *shared)
{
    *out = NULL;
    size_t rows = cfg->common.num_envs * cfg->common.rollout_fragment_length;
    /* (invariant: sgd_minibatch_size is global, checked against every
     * worker's rows) */
    int rc = dpt__rl_check_config(&cfg->common, &cfg->learn,
                                  cfg->chunk_rows ? rows * (size_t)dpt_comm_size(comm) : rows);
    if (rc)
        return rc;
    size_t chunk = cfg->chunk_rows;
    if (chunk && (cfg->sync_frac < 1.0 || cfg->common.policy.use_lstm))
        return dpt_error(DPT_EINVAL, "ddppo: the invariant order (chunk_rows) needs sync_frac = 1 "
                                     "(preemption cuts rollouts by timing) and a feed-forward "
                                     "policy");
    if (cfg->sync_frac < 1.0 && cfg->learn.sgd_minibatch_size < 4)
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
    size_t mb = cfg->learn.sgd_minibatch_size;
    w->L = cfg->common.policy.use_lstm ? cfg->common.policy.max_seq_len : 0;
    if ((rc = dpt__rollout_init(
             &w->ro, cls, cfg->common.num_envs, cfg->common.rollout_fragment_length,
             cfg->common.seed, (uint32_t)w->rank,
             cfg->common.policy.use_lstm ? cfg->common.policy.lstm_cell_size : 0)) != 0 ||
        (chunk && (rc = dpt__rollout_env_streams(
                       &w->ro, cfg->common.seed,
                       (uint32_t)((size_t)w->rank * cfg->common.num_envs))) != 0) ||
        (rc = dpt__rl_policies(cls, &cfg->common, chunk ? chunk : mb, &w->actor, &w->learner)) != 0)
        goto fail;
    /* A recurrent batch is padded to whole sequences: at most one per step,
     * L rows each; a minibatch holds at least one. */
    size_t seqs = w->L ? dpt__rollout_max_chunks(&w->ro) : 0, load_rows = rows;
    if (w->L && dpt_mul_size(seqs, w->L, &load_rows)) {
        rc = dpt_error(DPT_EOVERFLOW, "ddppo: %zu sequences of %zu steps overflow", seqs, w->L);
        goto fail;
    }
    if (w->L && mb < w->L)
        mb = w->L;
    if (chunk) {
        /* Invariant: this worker's share of every global minibatch, at most
         * ceil(K / workers) chunks of each. */
        size_t K = mb / chunk, most = (K + (size_t)w->size - 1) / (size_t)w->size * chunk;
        load_rows = rows * (size_t)w->size / mb * most;
    }
    w->nparams = dpt_policy_vars(w->actor)->total;
    if ((rc = dpt_arena_init(&w->params, w->nparams)) != 0)
        goto fail;
    dpt_model_t model = dpt_policy_ppo_model(w->learner, &cfg->learn.loss);
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.num_devices = 1;
    tc.mode = DPT_TOWERS_REPLICATED;
    tc.max_per_device_batch_size = chunk ? chunk : mb;
    tc.max_load_rows = load_rows;
    tc.chunk_rows = chunk;
    tc.global_batch = chunk ? mb : 0;
    tc.grad_clip = cfg->common.grad_clip;
    tc.optim = dpt_optim_defaults(DPT_OPTIM_ADAM);
    tc.optim.eps = cfg->common.adam_eps;
    tc.comm = comm;
    tc.weight_rows = chunk ? 0 : 1; /* (invariant: every chunk has its rows) */
    tc.check_every = 0;             /* check_weights_every is the workers' check */
    dpt_batch_t lay;
    unsigned char frozen[DPT__RL_MAX_VARS];
    if ((rc = dpt__rl_layout(w->learner, &lay)) != 0 ||
        (rc = dpt__rl_frozen(&cfg->common, w->learner, frozen, &tc)) != 0 ||
        (rc = dpt_towers_create(&w->towers, &model, &lay, &tc)) != 0 ||
        (rc = dpt__rl_batch_init(&w->batch, &w->ro, load_rows, seqs)) != 0)
        goto fail;
    size_t nperm = w->L ? seqs : rows;
    w->perm = malloc(nperm * sizeof *w->perm);
    /* (invariant: a load may hold more minibatches than this worker has rows) */
    w->order = malloc((nperm > load_rows ? nperm : load_rows) * sizeof *w->order);
    w->chunks = w->L ? malloc(seqs * sizeof *w->chunks) : NULL;
    w->gathered = malloc((size_t)w->size * 4 * sizeof(float));
    if (!w->perm || !w->order || (w->L && !w->chunks) || !w->gathered) {
        rc = dpt_error(DPT_ENOMEM, "ddppo: cannot allocate the batch of %zu rows", load_rows);
        goto fail;
    }
    /* Every worker starts from rank 0's initial weights. */
    dpt_rng_t init;
    dpt_rng_init(&init, cfg->common.seed, 0, 0, DPT_RNG_INIT);
    dpt_policy_init_params(w->actor, w->params.data, &init);
    if ((rc = dpt_comm_broadcast(comm, w->params.data, w->nparams, 0)) != 0 ||
        (rc = dpt_towers_set_weights(w->towers, w->params.data, w->nparams)) != 0)
        goto fail;
    /* Invariant: every worker shuffles the global batch the same way. */
    dpt_rng_init(&w->shuffle_rng, cfg->common.seed, chunk ? 0 : (uint32_t)w->rank, 0,
                 DPT_RNG_SHUFFLE);
    if (chunk && (rc = dpt__ddppo_inv_init(&w->inv, &w->ro, w->size, mb, w->towers)) != 0)
        goto fail;
    *out = w;
    return DPT_OK;
fail:
    dpt_ddppo_worker_destroy(w);
    return rc;
}

dpt_policy_t *dpt_ddppo_policy(dpt_ddppo_t *w)
{
    return w->actor;
}
const float *dpt_ddppo_weights(const dpt_ddppo_t *w)
{
    return w->params.data;
}

int dpt_ddppo_set_weights(dpt_ddppo_t *w, const float *in, size_t count)
{
    int rc = dpt_towers_set_weights(w->towers, in, count);
    if (!rc)
        memcpy(w->params.data, in, count * sizeof(float));
    return rc;
}

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

/* One iteration's figures over every worker into res: sums in one
 * all-reduce, extremes through an all-gather of (-min, max, rows). */
static int dpt__ddppo_aggregate(dpt_ddppo_t *w, size_t rows, int preempted, size_t nseq,
                                const dpt_towers_load_info_t *li, const dpt__rl_learn_stats_t *ls,
                                double ev, dpt_rl_result_t *res)
{
    int rc;
    dpt__episode_stats_t es;
    dpt__episode_window_stats(&w->ro.window, &es);
    double wm = es.reward_mean, wmin = es.reward_min, wmax = es.reward_max, wl = es.len_mean;
    double w20 = es.reward_mean_20;
    size_t wc = es.count;
    float st[ST_COUNT + 15] = {0};
    st[ST_ROWS] = (float)rows;
    st[ST_EPIS_THIS] = (float)w->ro.episodes_this_iter;
    st[ST_EPIS_TOTAL] = (float)w->ro.episodes_total;
    st[ST_WIN_COUNT] = (float)wc;
    st[ST_WIN_RET] = (float)(wm * (double)wc);
    st[ST_WIN_LEN] = (float)(wl * (double)wc);
    st[ST_N20] = wc ? (float)(wc < 20 ? wc : 20) : 0.0f;
    st[ST_RET20] = (float)(w20 * (double)st[ST_N20]);
    st[ST_PG] = (float)ls->policy_loss;
    st[ST_VF] = (float)ls->vf_loss;
    st[ST_ENT] = (float)ls->entropy;
    st[ST_KL] = (float)ls->kl;
    st[ST_CLIP] = (float)ls->clipfrac;
    st[ST_GNORM] = (float)ls->grad_norm;
    st[ST_EV] = (float)ev;
    st[ST_PREEMPTED] = (float)preempted;
    st[ST_SEQS] = (float)nseq;
    st[ST_PADDED] = (float)(w->L ? nseq * w->L - rows : 0);
    st[ST_DROPPED] = (float)(w->L ? li->rows_dropped : 0);
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
    w->counters.env_steps_sampled += total_rows;
    w->counters.env_steps_trained += total_rows;
    w->counters.agent_steps_sampled += total_rows;
    w->counters.agent_steps_trained += total_rows;
    res->counters = w->counters;
    double P = (double)w->size, cnt = (double)st[ST_WIN_COUNT];
    res->iteration = w->iteration;
    res->timesteps_total = w->timesteps;
    res->timesteps_this_iter = total_rows;
    res->episodes_this_iter = (uint64_t)st[ST_EPIS_THIS];
    res->episodes_total = (uint64_t)st[ST_EPIS_TOTAL];
    res->episodes_in_window = (size_t)cnt;
    res->episode_reward_mean = cnt > 0 ? (double)st[ST_WIN_RET] / cnt : 0.0;
    res->episode_len_mean = cnt > 0 ? (double)st[ST_WIN_LEN] / cnt : 0.0;
    res->episode_reward_mean_20 = st[ST_N20] > 0 ? (double)st[ST_RET20] / (double)st[ST_N20] : 0.0;
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
    res->sequences = (uint64_t)st[ST_SEQS];
    res->rows_padded = (uint64_t)st[ST_PADDED];
    res->rows_dropped = (uint64_t)st[ST_DROPPED];
    return DPT_OK;
}

int dpt_ddppo_worker_train(dpt_ddppo_t *w, dpt_rl_result_t *res)
{
    const dpt_ddppo_config_t *c = &w->cfg;
    memset(res, 0, sizeof *res);
    dpt__prof_lap(DPT_PROF_OUTSIDE);
    double t0 = dpt_now();
    size_t T = c->common.rollout_fragment_length, N = c->common.num_envs, expected = T * N;
    /* Preemption cuts fragments short, and a recurrent batch's sequences
     * depend on where: recurrent workers always collect whole fragments. */
    int preempt = w->shared && c->sync_frac < 1.0 && w->size > 1 && !w->L;
    /* The shared counter counts arrivals since this process started (not
     * since the run started: a resumed run has a fresh counter). */
    w->finished_base = w->local_iters * (w->shared ? (uint64_t)w->shared->workers : 0);
    w->local_iters++;
    size_t min_steps = preempt ? (T + 3) / 4 : T;
    int rc = dpt__rollout_collect(&w->ro, w->actor, w->params.data, c->common.gamma,
                                  c->learn.lambda, c->common.reward_scale, min_steps,
                                  preempt ? dpt__ddppo_should_stop : NULL, w);
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
    dpt_batch_t b;
    size_t nseq = 0, nmb, pdb;
    dpt_towers_load_info_t plan, li;
    if (c->chunk_rows) {
        if ((rc = dpt__ddppo_inv_batch(&w->inv, &w->ro, w->comm, w->learner,
                                       c->learn.normalize_advantages, &w->shuffle_rng, &w->batch,
                                       &b)) != 0 ||
            (rc = dpt_towers_load(w->towers, 0, &b, &li)) != 0)
            return rc;
        nmb = li.steps;
        pdb = li.per_device_batch;
        goto learn;
    }
    if (c->learn.normalize_advantages == DPT_ADV_NORM_BATCH)
        dpt_normalize(w->ro.adv, rows);
    if ((rc = dpt__rl_make_batch(&w->ro, w->learner, w->L, &w->shuffle_rng, w->perm, w->chunks,
                                 &w->batch, &b, &nseq)) != 0)
        return rc;
    /* The same count of minibatches on every worker (it depends on the
     * config only); the size is capped by the learner's batch.
     *  - rows: a preempted worker (>= 25% of its rows, and
     *    sgd_minibatch_size >= 4) still has >= 1 row per minibatch.
     *  - sequences: every worker has at least N ceil(T / L) of them (more
     *    where episodes end), q = max(1, sgd_minibatch_size / L) per
     *    minibatch, fewer when a worker holds fewer than one count's worth.
     * Minibatch membership is fixed by the load (one device: minibatch k is
     * rows [k pdb, (k+1) pdb)), so each is normalized over its own rows
     * (real steps) before it. */
    if (!w->L) {
        nmb = expected / c->learn.sgd_minibatch_size;
        pdb = rows / nmb < c->learn.sgd_minibatch_size ? rows / nmb : c->learn.sgd_minibatch_size;
    } else {
        size_t q = c->learn.sgd_minibatch_size / w->L, least = N * ((T + w->L - 1) / w->L);
        q = q ? q : 1;
        nmb = least / q ? least / q : 1;
        pdb = (nseq / nmb < q ? nseq / nmb : q) * w->L;
    }
    if ((rc = dpt_towers_plan(w->towers, &b, pdb, &plan)) != 0)
        return rc;
    if (c->learn.normalize_advantages == DPT_ADV_NORM_MINIBATCH)
        dpt__rl_normalize_minibatches_masked(w->batch.adv, w->L ? w->batch.mask : NULL, 1,
                                             plan.rows_loaded, pdb);
    dpt__prof_lap(DPT_PROF_BATCH);
    if ((rc = dpt_towers_load_ex(w->towers, 0, &b, pdb, &li)) != 0)
        return rc;
    if (li.rows_loaded != plan.rows_loaded || li.per_device_batch != pdb || li.steps < nmb)
        return dpt_error(DPT_ESTATE,
                         "ddppo worker %d: the towers loaded %zu rows in %zu "
                         "minibatches of %zu; expected %zu rows in at least %zu minibatches of "
                         "%zu",
                         w->rank, li.rows_loaded, li.steps, li.per_device_batch, plan.rows_loaded,
                         nmb, pdb);
learn:;
    float lr = dpt__rl_lr(&c->common, w->timesteps);
    /* Every epoch shuffles all li.steps minibatches and visits the first
     * nmb: this worker's loss terms; the norm of the all-reduced gradient. */
    dpt__rl_learn_stats_t ls;
    if ((rc = dpt__rl_learn(w->towers, c->common.num_sgd_iter, li.steps, nmb, pdb, lr,
                            &w->shuffle_rng, w->order, &ls)) != 0)
        return rc;
    if ((rc = dpt_towers_get_weights(w->towers, w->params.data, w->nparams)) != 0)
        return rc;
    double t2 = dpt_now();
    if ((rc = dpt__ddppo_aggregate(w, rows, preempted, nseq, &li, &ls, ev, res)) != 0)
        return rc;
    if (w->L && c->learn.sgd_minibatch_size < w->L)
        snprintf(res->note, sizeof res->note,
                 "sgd_minibatch_size %zu is shorter than a sequence (max_seq_len %zu); "
                 "raised to %zu rows (one sequence per minibatch)",
                 c->learn.sgd_minibatch_size, w->L, w->L);
    res->cur_lr = lr;
    dpt__prof_lap(DPT_PROF_LEARN_OTHER);
    double t3 = dpt_now();
    res->sample_time_s = t1 - t0;
    res->learn_time_s = t2 - t1;
    res->iteration_time_s = t3 - t0;
    res->env_steps_per_s = (double)res->timesteps_this_iter / (t3 - t0);
    if (c->check_weights_every > 0 && w->iteration % (uint64_t)c->check_weights_every == 0)
        return dpt_ddppo_check_weights(w);
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
    int rc = dpt__optim_ckpt_save(wr, dpt_policy_vars(w->actor), w->params.data,
                                  dpt_towers_optimizer(w->towers));
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(wr, "workers", (uint64_t)w->size);
    if (!rc)
        rc = dpt__reduction_save(wr, w->cfg.chunk_rows);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(wr, "envs_total",
                                          (uint64_t)w->cfg.common.num_envs * (uint64_t)w->size);
    if (!rc)
        rc = dpt__rl_counters_save(wr, &w->counters);
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
    dpt__optim_ckpt_free(&w->restore_ck);
    w->restore_buf = NULL;
    w->restore_bytes = 0;
}

int dpt__ddppo_restore_prepare(dpt_ddppo_t *w, const dpt_safetensors_t *st, const void *buf,
                               size_t bytes)
{
    dpt__ddppo_restore_abort(w);
    uint64_t workers = 0, head[4] = {0};
    int rc = dpt__reduction_check(st, w->cfg.chunk_rows);
    if (!rc)
        rc = dpt_safetensors_meta_u64(st, "workers", &workers);
    /* (the invariant order takes another count: dpt_ddppo_compose_state) */
    if (!rc && workers != (uint64_t)w->size && !w->cfg.chunk_rows)
        rc = dpt_error(DPT_EINVAL,
                       "checkpoint %s was written by %llu DD-PPO workers, this run "
                       "has %d",
                       dpt_safetensors_path(st), (unsigned long long)workers, w->size);
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
    dpt_rl_counters_t counters;
    if (!rc)
        rc = dpt__rl_counters_load(st, head[2], &counters);
    dpt__optim_ckpt_t ck = {0};
    if (!rc)
        rc = dpt__optim_ckpt_load(st, dpt_policy_vars(w->actor), dpt_towers_optimizer(w->towers),
                                  &ck);
    /* The towers refuse non-finite weights: refused here, commit cannot fail. */
    if (!rc && !dpt_vec_all_finite(ck.data, ck.count)) {
        size_t i = dpt_vec_first_nonfinite(ck.data, ck.count);
        rc = dpt_error(DPT_EFORMAT, "checkpoint %s: parameter %zu is %g", dpt_safetensors_path(st),
                       i, (double)ck.data[i]);
    }
    if (rc) {
        dpt__optim_ckpt_free(&ck);
        return rc;
    }
    w->restore_ck = ck;
    memcpy(w->restore_head, head, sizeof head);
    w->restore_counters = counters;
    w->restore_buf = buf;
    w->restore_bytes = bytes;
    return DPT_OK;
}

int dpt_ddppo_compose_state(dpt_ddppo_t *w, const dpt_safetensors_t *st, void **out)
{
    *out = NULL;
    uint64_t old = 0;
    int rc = dpt__reduction_check(st, w->cfg.chunk_rows);
    if (!rc)
        rc = dpt_safetensors_meta_u64(st, "workers", &old);
    if (rc)
        return rc;
    size_t n = w->cfg.common.num_envs, E = n * (size_t)w->size;
    uint64_t saved = E; /* (checkpoints before the key: the sizes check it below) */
    if (dpt_safetensors_meta(st, "envs_total") &&
        (rc = dpt_safetensors_meta_u64(st, "envs_total", &saved)) != 0)
        return rc;
    if (saved != E)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s was written by %llu DD-PPO workers with %llu envs in all; "
                         "this run has %d workers of %zu envs = %zu (%s)",
                         dpt_safetensors_path(st), (unsigned long long)old,
                         (unsigned long long)saved, w->size, n, E,
                         w->cfg.chunk_rows ? "a resume in the invariant order may change the "
                                             "workers, not the envs in all"
                                           : "the envs cannot change on resume");
    if (old == (uint64_t)w->size)
        return DPT_OK;
    if (!w->cfg.chunk_rows)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s was written by %llu DD-PPO workers, this run has %d "
                         "(only reduction_order = invariant takes another count, with the same "
                         "envs in all)",
                         dpt_safetensors_path(st), (unsigned long long)old, w->size);
    if (old == 0 || old > DPT__ROLLOUT_PICK_MAX || E % old)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s: %llu DD-PPO workers for %zu envs (at most %d workers, "
                         "each with the same number of envs)",
                         dpt_safetensors_path(st), (unsigned long long)old, E,
                         DPT__ROLLOUT_PICK_MAX);
    const void *src[DPT__ROLLOUT_PICK_MAX];
    size_t bytes[DPT__ROLLOUT_PICK_MAX];
    for (uint64_t q = 0; q < old; q++) {
        char name[32];
        snprintf(name, sizeof name, "worker.%llu", (unsigned long long)q);
        if ((rc = dpt_safetensors_get_blob(st, name, &src[q], &bytes[q])) != 0)
            return rc;
        uint64_t magic;
        if (bytes[q] < 4 * sizeof(uint64_t) ||
            (memcpy(&magic, src[q], sizeof magic), magic != DPT__DDPPO_MAGIC))
            return dpt_error(DPT_EFORMAT, "checkpoint %s: %s is not a DD-PPO worker state",
                             dpt_safetensors_path(st), name);
        src[q] = (const char *)src[q] + 4 * sizeof(uint64_t);
        bytes[q] -= 4 * sizeof(uint64_t);
    }
    size_t total = dpt_ddppo_state_bytes(w), hb = 4 * sizeof(uint64_t);
    char *buf = malloc(total);
    if (!buf)
        return dpt_error(DPT_ENOMEM, "ddppo: cannot allocate a worker state of %zu bytes", total);
    /* The head (iteration, timesteps, the shuffle's position) is the same
     * on every worker of the invariant order: worker 0's. */
    memcpy(buf, (const char *)src[0] - hb, hb);
    rc = dpt__rollout_state_pick(&w->ro, src, bytes, (size_t)old, E / old, (size_t)w->rank * n,
                                 buf + hb, total - hb);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dpt_last_error());
        free(buf);
        return dpt_error(rc, "checkpoint %s: %s", dpt_safetensors_path(st), msg);
    }
    *out = buf;
    return DPT_OK;
}

void dpt__ddppo_restore_commit(dpt_ddppo_t *w)
{
    if (!w->restore_ck.data)
        return;
    size_t n = w->nparams, hb = sizeof w->restore_head;
    /* prepare checked the state, so this load cannot fail. */
    if (dpt__rollout_load_state(&w->ro, (const char *)w->restore_buf + hb, w->restore_bytes - hb) !=
        0)
        abort();
    const float *tmp = w->restore_ck.data;
    memcpy(w->params.data, tmp, n * sizeof(float));
    dpt_optim_t *opt = dpt_towers_optimizer(w->towers);
    dpt__optim_ckpt_apply(&w->restore_ck, opt);
    /* Finite weights of the right count (prepare checked), the towers' own
     * optimizer: neither call can fail. */
    if (dpt_towers_set_weights(w->towers, tmp, n) != 0 ||
        dpt_towers_set_optimizer_state(w->towers, opt) != 0)
        abort();
    w->iteration = w->restore_head[1];
    w->timesteps = w->restore_head[2];
    w->counters = w->restore_counters;
    dpt_rng_seek(&w->shuffle_rng, w->restore_head[3]);
    dpt__ddppo_restore_abort(w);
}

int dpt_ddppo_restore(dpt_ddppo_t *w, const dpt_safetensors_t *st, const void *buf, size_t bytes)
{
    int rc = dpt__ddppo_restore_prepare(w, st, buf, bytes);
    if (!rc)
        dpt__ddppo_restore_commit(w);
    return rc;
}
