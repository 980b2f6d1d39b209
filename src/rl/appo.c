/*
 * APPO and IMPALA (see rl_trainers.h) on the learner thread of
 * dpt/learner.h: sampler threads cut their rollouts into train batches and
 * push them into the learner's inqueue; the learner thread takes them
 * through its minibatch buffer (num_sgd_iter passes each) and trains with
 * the V-trace loss (dpt_policy_vtrace_model) on the towers engine,
 * publishing its weights to the samplers every broadcast_interval updates.
 *
 *   sampler k:  [weights v] -> collect T steps of its N envs -> N sequences
 *               of T steps + a bootstrap row, tagged v -> its train batch;
 *               a full batch (train_batch_size / T sequences) -> inqueue
 *   learner:    inqueue -> minibatch buffer -> load -> one update per pass
 *               -> publish every broadcast_interval updates
 *
 * The caller's dpt_appo_train() waits until the learner has trained
 * steps_per_iteration more env steps and reports what happened since the
 * last report. Checkpoints hold the weights, the optimizer and the
 * counters (the envs and the queue are not saved: an asynchronous run is
 * not bitwise reproducible, and a resumed one starts its samplers afresh).
 *
 * The engine's files are listed in appo_internal.h.
 */
#include "dpt/stats.h"
#include "dpt/status.h"
#include "appo_internal.h"
#include "env_internal.h"
#include "core/clock.h"
#include "core/stopflag.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void dpt__appo_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Seconds a stopping sampler gets to finish the env step it is in. */
#define DPT__APPO_JOIN_S 5.0

/* Stops every thread. A sampler still inside an env step after
 * DPT__APPO_JOIN_S (a hung env) is detached, and the engine is then never
 * freed (a->stuck): the thread may still touch it when the step returns.
 * A thread that cannot be joined or detached (pthread says no: not
 * expected) is taken as still running, with the same consequence. */
static void dpt__appo_stop(dpt_appo_t *a)
{
    atomic_store(&a->stop, 1);
    (void)dpt__appo_finish(a, 0); /* a failed STOP: that rank is gone already */
    if (a->learner_thread) {
        dpt_learner_stop(a->learner_thread);
        if (a->lstarted)
            (void)dpt_learner_join(a->learner_thread);
    }
    /* The loaders see the stop within 0.2 s wherever they wait. */
    for (int k = 0; k < a->nloaders; k++)
        if (a->loaders[k].started) {
            if (pthread_join(a->loaders[k].thread, NULL) != 0)
                a->stuck = 1;
            a->loaders[k].started = 0;
        }
    double deadline = dpt_now() + DPT__APPO_JOIN_S;
    for (int k = 0; k < a->nsamplers; k++) {
        dpt__appo_sampler_t *s = &a->samplers[k];
        if (!s->started)
            continue;
        while (atomic_load(&s->running) && dpt_now() < deadline)
            dpt__appo_sleep(0.01);
        if (atomic_load(&s->running)) {
            (void)pthread_detach(s->thread); /* a failure leaves it as stuck */
            a->stuck = 1;
        } else if (pthread_join(s->thread, NULL) != 0) {
            a->stuck = 1;
        }
        s->started = 0;
    }
}

int dpt_appo_stop(dpt_appo_t *a)
{
    if (!a)
        return 0;
    /* A run that ended well lets its sampler ranks finish their last send
     * (after a failure the samplers were told at once, without waiting);
     * dpt_appo_end is the way to learn whether they all answered. */
    (void)dpt__appo_finish(a, 1);
    dpt__appo_stop(a);
    return a->stuck;
}

void dpt_appo_destroy(dpt_appo_t *a)
{
    if (!a)
        return;
    dpt_appo_stop(a);
    if (a->stuck)
        return;                             /* a detached sampler may still use it */
    dpt_learner_destroy(a->learner_thread); /* releases the batches it holds */
    dpt__appo_tb_free(a->held);
    dpt__msg_deinit(&a->in);
    dpt__msg_deinit(&a->out);
    free(a->peers);
    free(a->sampler_ranks);
    if (a->sample_q) {
        void *item;
        dpt_queue_close(a->sample_q);
        while (dpt_queue_pop(a->sample_q, &item, 0.0) == DPT_OK)
            dpt__appo_tb_free(item);
        dpt_queue_destroy(a->sample_q);
    }
    free(a->loaders);
    for (int k = 0; a->samplers && k < a->nsamplers; k++) {
        dpt__appo_sampler_t *s = &a->samplers[k];
        for (int p = 0; s->groups && p < a->npols; p++) {
            dpt__rollout_deinit(&s->groups[p].ro);
            dpt_policy_destroy(s->groups[p].actor);
            dpt_arena_deinit(&s->groups[p].params);
            dpt__appo_tb_free(s->groups[p].tb);
        }
        free(s->groups);
    }
    free(a->samplers);
    for (int p = 0; a->pols && p < a->npols; p++) {
        dpt__appo_pol_t *pol = &a->pols[p];
        dpt_towers_destroy(pol->towers);
        dpt_policy_destroy(pol->learner);
        dpt_arena_deinit(&pol->pub);
        dpt_arena_deinit(&pol->ck_params);
        dpt_optim_destroy(pol->ck_opt);
        dpt_queue_destroy(pol->idle);
    }
    free(a->pols);
    pthread_mutex_destroy(&a->lmu);
    pthread_mutex_destroy(&a->wmu);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

/* The config's rules for an APPO/IMPALA run. in_group[p] gets the number
 * of a sampler's envs that policy p steps. */
static int dpt__appo_check_config(const dpt_appo_config_t *cfg,
                                  size_t in_group[DPT_RL_MAX_POLICIES])
{
    size_t T = cfg->common.rollout_fragment_length;
    const dpt_rl_policies_t *pl = &cfg->policies;
    if (cfg->common.policy.use_lstm)
        return dpt_error(DPT_EINVAL, "appo: recurrent policies (use_lstm) are not supported");
    if (cfg->num_workers < 1 || cfg->common.num_envs < 1 || T < 1)
        return dpt_error(DPT_EINVAL, "appo: num_workers, num_envs_per_worker and "
                                     "rollout_fragment_length must be >= 1");
    if (cfg->train_batch_size < T || cfg->train_batch_size % T)
        return dpt_error(DPT_EINVAL,
                         "appo: train_batch_size %zu must be a positive multiple of "
                         "rollout_fragment_length %zu",
                         cfg->train_batch_size, T);
    size_t seqs = cfg->train_batch_size / T, D = (size_t)cfg->towers.num_devices;
    if (D < 1 || seqs < D || seqs % D)
        return dpt_error(DPT_EINVAL,
                         "appo: the %zu fragments of a train batch must be at least and "
                         "divisible by num_devices %zu",
                         seqs, D);
    if (cfg->common.num_sgd_iter < 1 || cfg->broadcast_interval < 1)
        return dpt_error(DPT_EINVAL, "appo: num_sgd_iter and broadcast_interval must be >= 1");
    if (pl->count < 1 || pl->count > DPT_RL_MAX_POLICIES ||
        (pl->mapping_len && pl->mapping_len != cfg->common.num_envs))
        return dpt_error(DPT_EINVAL,
                         "appo: the policies (%d) or their mapping do not fit "
                         "num_envs_per_worker",
                         pl->count);
    int ntrain = 0;
    memset(in_group, 0, DPT_RL_MAX_POLICIES * sizeof in_group[0]);
    for (size_t i = 0; i < cfg->common.num_envs; i++)
        in_group[dpt__rl_policy_of_env(pl, i)]++;
    for (int p = 0; p < pl->count; p++) {
        ntrain += pl->train[p] != 0;
        if (in_group[p] == 0)
            return dpt_error(DPT_EINVAL, "appo: policy %s steps none of the %zu envs of a sampler",
                             pl->name[p], cfg->common.num_envs);
    }
    if (ntrain == 0)
        return dpt_error(DPT_EINVAL, "appo: no policy to train");
    return DPT_OK;
}

/* The learner thread and, with K > 1 tower stacks, the loaders' inqueue
 * and the loaders. */
static int dpt__appo_new_learner(dpt_appo_t *a)
{
    const dpt_appo_config_t *cfg = &a->cfg;
    dpt_learner_options_t lo;
    dpt_learner_options_init(&lo);
    lo.learner_queue_size = cfg->learner_queue_size;
    lo.learner_queue_timeout = cfg->learner_queue_timeout;
    /* RLlib: the learner thread gives every batch num_sgd_iter passes; the
     * multi-GPU learner's buffer holds its K stacks and ramps the passes up
     * from 1. */
    lo.minibatch_buffer_size = a->K > 1 ? (size_t)a->K : cfg->minibatch_buffer_size;
    lo.num_sgd_iter = cfg->common.num_sgd_iter;
    lo.init_num_passes = cfg->init_num_passes ? cfg->init_num_passes
                         : a->K > 1           ? 1
                                              : cfg->common.num_sgd_iter;
    if (cfg->result_queue_size)
        lo.result_queue_size = cfg->result_queue_size;
    lo.step = dpt__appo_learner_step;
    lo.release = dpt__appo_learner_release;
    lo.check = dpt__appo_learner_check;
    lo.ctx = a;
    int rc = dpt_learner_create(&a->learner_thread, &lo);
    if (rc || a->K == 1)
        return rc;
    /* RLlib's multi-GPU learner: the samplers' batches wait in the
     * loaders' inqueue; the learner's own queue holds loaded stacks. */
    if ((rc = dpt_queue_create(&a->sample_q, cfg->learner_queue_size)) != 0)
        return rc;
    if (!(a->loaders = calloc((size_t)a->nloaders, sizeof *a->loaders)))
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate %d loaders", a->nloaders);
    for (int k = 0; k < a->nloaders; k++) {
        a->loaders[k].a = a;
        a->loaders[k].index = k;
    }
    return DPT_OK;
}

/* Policy p: its learner model and published weights and, when it is
 * trained, its towers (tc), its checkpoint optimizer and (K > 1) its idle
 * stacks. Its initial weights draw from stream (seed, 0, p): the one
 * policy of a default run starts as it always did. */
static int dpt__appo_new_policy(dpt_appo_t *a, int p, const dpt_towers_config_t *tc)
{
    const dpt_appo_config_t *cfg = &a->cfg;
    size_t rows = a->seqs * (a->T + 1), D = (size_t)cfg->towers.num_devices;
    dpt__appo_pol_t *pol = &a->pols[p];
    pol->train = cfg->policies.train[p];
    int rc =
        dpt_policy_create_ex(&pol->learner, a->cls, &cfg->common.policy, pol->train ? rows / D : 1);
    if (rc)
        return rc;
    size_t n = dpt_policy_vars(pol->learner)->total;
    if ((rc = dpt_arena_init(&pol->pub, n)) != 0 || (rc = dpt_arena_init(&pol->ck_params, n)) != 0)
        return rc;
    dpt_rng_t init;
    dpt_rng_init(&init, cfg->common.seed, 0, (uint32_t)p, DPT_RNG_INIT);
    dpt_policy_init_params(pol->learner, pol->pub.data, &init);
    if (!pol->train)
        return DPT_OK;
    dpt_model_t model = dpt_policy_vtrace_model(pol->learner, &cfg->loss);
    dpt_batch_t lay;
    dpt_towers_config_t ptc = *tc;
    unsigned char frozen[DPT__RL_MAX_VARS];
    if ((rc = dpt_vtrace_batch(&lay, a->cls, 0, a->T, NULL, NULL, NULL, NULL, NULL)) != 0 ||
        (rc = dpt__rl_frozen(&cfg->common, pol->learner, frozen, &ptc)) != 0 ||
        (rc = dpt_towers_create(&pol->towers, &model, &lay, &ptc)) != 0 ||
        (rc = dpt_towers_set_weights(pol->towers, pol->pub.data, n)) != 0 ||
        (rc = dpt_optim_create(&pol->ck_opt, &tc->optim, n)) != 0)
        return rc;
    if (a->K > 1) {
        if ((rc = dpt_queue_create(&pol->idle, (size_t)a->K)) != 0)
            return rc;
        for (int k = 0; k < a->K; k++)
            (void)dpt_queue_push(pol->idle, (void *)(uintptr_t)(k + 1), 0.0);
    }
    return DPT_OK;
}

/* Sampler k (numbered first + k): one group of envs per policy. Its envs
 * of policy p draw from the env streams of index index * npolicies + p:
 * with one policy, the sampler's as they always did. */
static int dpt__appo_new_sampler(dpt_appo_t *a, int k, int first,
                                 const size_t in_group[DPT_RL_MAX_POLICIES])
{
    const dpt_appo_config_t *cfg = &a->cfg;
    dpt__appo_sampler_t *s = &a->samplers[k];
    s->a = a;
    s->index = first + k;
    if (!(s->groups = calloc((size_t)a->npols, sizeof *s->groups)))
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate sampler %d", k);
    for (int p = 0; p < a->npols; p++) {
        dpt__appo_group_t *g = &s->groups[p];
        uint32_t stream = (uint32_t)s->index * (uint32_t)a->npols + (uint32_t)p;
        int rc;
        g->version = UINT64_MAX;
        if ((rc = dpt__rollout_init(&g->ro, a->cls, in_group[p], a->T, cfg->common.seed, stream,
                                    0)) != 0 ||
            (rc = dpt_policy_create_ex(&g->actor, a->cls, &cfg->common.policy, in_group[p])) != 0 ||
            (rc = dpt_arena_init(&g->params, a->pols[p].pub.count)) != 0)
            return rc;
        if (dpt__ext_of(a->cls)) /* the sampler steps on between iterations */
            dpt__ext_runs_on(dpt__ext_of(a->cls));
    }
    return DPT_OK;
}

/* The engine's mutexes, and its condition variable on the monotonic clock
 * (dpt__appo_wait's deadlines). On a failure none is left initialised. */
static int dpt__appo_init_sync(dpt_appo_t *a)
{
    if (pthread_mutex_init(&a->wmu, NULL) != 0)
        goto fail_wmu;
    if (pthread_mutex_init(&a->lmu, NULL) != 0)
        goto fail_lmu;
    if (pthread_mutex_init(&a->mu, NULL) != 0)
        goto fail_mu;
    if (dpt__cond_init_monotonic(&a->cv) != 0)
        goto fail_cv;
    return DPT_OK;

fail_cv:
    pthread_mutex_destroy(&a->mu);
fail_mu:
    pthread_mutex_destroy(&a->lmu);
fail_lmu:
    pthread_mutex_destroy(&a->wmu);
fail_wmu:
    return dpt_error(DPT_ETHREAD, "appo: cannot initialise its mutexes or condition variable");
}

int dpt__appo_new(dpt_appo_t **out, const dpt_env_class_t *cls, const dpt_appo_config_t *cfg,
                  int nsamplers, int first)
{
    *out = NULL;
    size_t in_group[DPT_RL_MAX_POLICIES];
    int rc = dpt__appo_check_config(cfg, in_group);
    if (rc)
        return rc;
    dpt_appo_t *a = calloc(1, sizeof *a);
    if (!a)
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate");
    if ((rc = dpt__appo_init_sync(a)) != 0) {
        free(a);
        return rc;
    }
    a->cfg = *cfg;
    a->cls = cls;
    dpt__msg_init(&a->in);
    dpt__msg_init(&a->out);
    a->T = cfg->common.rollout_fragment_length;
    a->seqs = cfg->train_batch_size / a->T;
    a->od = cls->obs_dim;
    a->aw = cls->action_kind == DPT_ACTION_DISCRETE ? 1 : cls->action_dim;
    a->nsamplers = nsamplers;
    a->npols = cfg->policies.count;
    a->main = dpt__rl_policies_main(&cfg->policies);
    a->K = cfg->tower_stacks > 1 ? cfg->tower_stacks : 1;
    a->nloaders = a->K > 1 ? (cfg->load_threads > 1 ? cfg->load_threads : 1) : 0;
    a->samplers = calloc(nsamplers > 0 ? (size_t)nsamplers : 1, sizeof *a->samplers);
    a->pols = calloc((size_t)a->npols, sizeof *a->pols);
    if (!a->samplers || !a->pols) {
        rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate %d samplers and %d policies",
                       a->nsamplers, a->npols);
        goto fail;
    }
    if ((rc = dpt__appo_new_learner(a)) != 0)
        goto fail;
    size_t rows = a->seqs * (a->T + 1);
    dpt_towers_config_t tc = dpt__rl_towers_config(&cfg->common, &cfg->towers,
                                                   rows / (size_t)cfg->towers.num_devices, rows);
    tc.num_stacks = a->K;
    for (int p = 0; p < a->npols; p++)
        if ((rc = dpt__appo_new_policy(a, p, &tc)) != 0)
            goto fail;
    for (int k = 0; k < a->nsamplers; k++)
        if ((rc = dpt__appo_new_sampler(a, k, first, in_group)) != 0)
            goto fail;
    *out = a;
    return DPT_OK;
fail:
    dpt_appo_destroy(a);
    return rc;
}

int dpt_appo_create(dpt_appo_t **out, const dpt_env_class_t *cls, const dpt_appo_config_t *cfg)
{
    return dpt__appo_new(out, cls, cfg, cfg->num_workers, 0);
}

dpt_policy_t *dpt_appo_policy(dpt_appo_t *a)
{
    return a->pols[a->main].learner;
}

int dpt_appo_get_weights(dpt_appo_t *a, float *out, size_t count)
{
    return dpt_appo_get_policy_weights(a, a->main, out, count);
}

int dpt_appo_get_policy_weights(dpt_appo_t *a, int policy, float *out, size_t count)
{
    if (policy < 0 || policy >= a->npols)
        return dpt_error(DPT_EINVAL, "appo: no policy %d (the run has %d)", policy, a->npols);
    dpt__appo_pol_t *pol = &a->pols[policy];
    if (!pol->train) {
        /* Its weights never change after the start. */
        if (count != pol->pub.count)
            return dpt_error(DPT_EINVAL, "appo: %zu weights asked for, policy %s has %zu", count,
                             a->cfg.policies.name[policy], pol->pub.count);
        pthread_mutex_lock(&a->wmu);
        memcpy(out, pol->pub.data, count * sizeof(float));
        pthread_mutex_unlock(&a->wmu);
        return DPT_OK;
    }
    pthread_mutex_lock(&a->mu);
    int rc = dpt_towers_get_weights(pol->towers, out, count);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int dpt_appo_set_weights(dpt_appo_t *a, const float *in, size_t count)
{
    dpt__appo_pol_t *pol = &a->pols[a->main];
    /* Between two of the learner's updates; the samplers take them with
     * the next broadcast (or at the start, from pub). */
    pthread_mutex_lock(&a->mu);
    int rc = dpt_towers_set_weights(pol->towers, in, count);
    if (!rc) {
        pthread_mutex_lock(&a->wmu);
        memcpy(pol->pub.data, in, count * sizeof(float));
        pthread_mutex_unlock(&a->wmu);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void dpt_appo_set_stop_flag(dpt_appo_t *a, const volatile sig_atomic_t *flag)
{
    a->stop_flag = flag;
}

uint64_t dpt_appo_iteration(const dpt_appo_t *a)
{
    return a->iteration;
}

/* Starts the learner and the samplers (first iteration). */
static int dpt__appo_start(dpt_appo_t *a)
{
    atomic_store(&a->stop, 0);
    int rc = dpt_learner_start(a->learner_thread);
    if (rc)
        return rc;
    a->lstarted = 1;
    for (int k = 0; k < a->nloaders; k++) {
        if (pthread_create(&a->loaders[k].thread, NULL, dpt__appo_loader_main, &a->loaders[k]) !=
            0) {
            dpt__appo_stop(a);
            return dpt_error(DPT_ETHREAD, "appo: cannot start loader thread %d", k);
        }
        a->loaders[k].started = 1;
    }
    for (int k = 0; k < a->nsamplers; k++) {
        dpt__appo_sampler_t *s = &a->samplers[k];
        atomic_store(&s->running, 1);
        if (pthread_create(&s->thread, NULL, dpt__appo_sampler_main, s) != 0) {
            atomic_store(&s->running, 0);
            dpt__appo_stop(a);
            return dpt_error(DPT_ETHREAD, "appo: cannot start sampler thread %d", k);
        }
        s->started = 1;
    }
    return DPT_OK;
}

/* Why the learner cannot go on: a sampler's error, the learner's own, or
 * a learner that ended (its inqueue closed); 0 while it trains. */
static int dpt__appo_health(dpt_appo_t *a)
{
    int rc = dpt__appo_samplers_failed(a);
    if (!rc)
        rc = dpt__appo_loaders_failed(a);
    if (!rc)
        rc = dpt_learner_check(a->learner_thread);
    if (!rc && !dpt_learner_running(a->learner_thread))
        rc = dpt_error(DPT_ESTATE, "appo: the learner thread ended");
    return rc;
}

/* Opens an iteration (mu held): the first one takes the counters as they
 * are for its report's start. Returns the env steps at the last report;
 * *target gets the count the iteration waits for. */
static uint64_t dpt__appo_begin(dpt_appo_t *a, uint64_t *target)
{
    const dpt_appo_config_t *c = &a->cfg;
    if (!a->lstarted) {
        a->rep.t = dpt_now();
        a->rep.timesteps = a->timesteps;
        a->rep.updates = a->updates;
        a->rep.load_s = a->load_s;
        pthread_mutex_lock(&a->lmu);
        a->rep.loader_load_s = a->loader_load_s;
        a->rep.loader_wait_s = a->loader_wait_s;
        a->rep.loads = a->loads;
        pthread_mutex_unlock(&a->lmu);
        for (int p = 0; p < a->npols; p++)
            a->pols[p].updates_rep = a->pols[p].updates;
    }
    uint64_t start = a->rep.timesteps;
    *target = start + c->steps_per_iteration;
    if (c->common.total_timesteps && *target > c->common.total_timesteps)
        *target = c->common.total_timesteps;
    return start;
}

/* Waits until the learner has trained `target` env steps, draining its
 * results and checking the health of every thread meanwhile; rank 0 under
 * mpirun pumps the sampler ranks' batches in. Called with mu held, and
 * returns with it held, on an error too. */
static int dpt__appo_wait(dpt_appo_t *a, uint64_t target)
{
    while (a->timesteps < target) {
        pthread_mutex_unlock(&a->mu);
        /* The learner's results: nothing to add (the step keeps the
         * figures), but its outqueue must not fill up. */
        dpt_learner_result_t lr;
        while (dpt_learner_pop_result(a->learner_thread, &lr, 0.0) == DPT_OK)
            ;
        int rc = dpt__appo_health(a);
        pthread_mutex_lock(&a->mu);
        if (rc)
            return rc;
        /* A stop request ends the iteration with what it has: the run then
         * checkpoints and ends, without waiting for samplers that may be
         * stopped. */
        if (a->timesteps >= target || dpt__stop_flag_set(a->stop_flag) || a->stop_asked_by)
            break;
        if (a->comm) {
            /* Rank 0 under mpirun: the sampler ranks' batches come in here. */
            pthread_mutex_unlock(&a->mu);
            rc = dpt__appo_pump(a, 0.05);
            pthread_mutex_lock(&a->mu);
            if (rc)
                return rc;
            continue;
        }
        /* Woken when the learner reaches the target; the time limit bounds
         * the health checks and drains the learner's results often enough
         * that their queue (1024 records) never fills: a full one would stop
         * the learner until this thread woke (at 5,000 updates a second,
         * 200 ms of waits stalled a third of the learner's time). */
        a->wake_at = target;
        struct timespec until = dpt__deadline(0.01);
        int w = pthread_cond_timedwait(&a->cv, &a->mu, &until);
        if (w != 0 && w != ETIMEDOUT)
            return dpt_error(DPT_ETHREAD, "appo: waiting for the learner failed (%d)", w);
    }
    return DPT_OK;
}

/* The iteration's results (mu held): env steps and episodes since the
 * last report (start: its env steps), the newest episodes, the mean
 * learner results. */
static void dpt__appo_report(dpt_appo_t *a, uint64_t start, double wall, dpt_rl_result_t *res)
{
    a->iteration++;
    res->iteration = a->iteration;
    res->timesteps_total = a->timesteps;
    res->timesteps_this_iter = a->timesteps - start;
    res->episodes_total = a->episodes_total;
    res->episodes_this_iter = a->episodes_iter;
    res->counters = a->counters;
    dpt__rl_result_episodes(res, &a->window);
    double inv = a->ls_count ? 1.0 / (double)a->ls_count : 0.0;
    res->policy_loss = a->ls_sum.policy_loss * inv;
    res->vf_loss = a->ls_sum.vf_loss * inv;
    res->entropy = a->ls_sum.entropy * inv;
    res->kl = a->ls_sum.kl * inv;
    res->clipfrac = a->ls_sum.clipfrac * inv;
    res->grad_norm = a->ls_sum.grad_norm * inv;
    res->cur_lr = dpt__rl_lr(&a->cfg.common, a->timesteps);
    res->iteration_time_s = wall;
    res->env_steps_per_s = wall > 0.0 ? (double)res->timesteps_this_iter / wall : 0.0;
}

/* Policy p's figures since the last report (mu held), which then start
 * the next one. */
static void dpt__appo_report_policy(dpt_appo_t *a, int p, dpt_appo_policy_stats_t *ps)
{
    dpt__appo_pol_t *pol = &a->pols[p];
    double pinv = pol->ls_count ? 1.0 / (double)pol->ls_count : 0.0;
    ps->trained = pol->train;
    ps->updates = pol->updates - pol->updates_rep;
    ps->policy_loss = pol->ls_sum.policy_loss * pinv;
    ps->vf_loss = pol->ls_sum.vf_loss * pinv;
    ps->entropy = pol->ls_sum.entropy * pinv;
    ps->kl = pol->ls_sum.kl * pinv;
    ps->clipfrac = pol->ls_sum.clipfrac * pinv;
    ps->grad_norm = pol->ls_sum.grad_norm * pinv;
    dpt__episode_stats_t es;
    dpt__episode_window_stats(&pol->window, &es);
    ps->episodes_in_window = es.count;
    ps->reward_mean = es.count ? es.reward_mean : (double)NAN;
    pol->updates_rep = pol->updates;
    memset(&pol->ls_sum, 0, sizeof pol->ls_sum);
    pol->ls_count = 0;
}

/* The engine's figures since the last report (mu held): the learner's,
 * the loaders' (whose counters then start the next report) and each
 * policy's. */
static void dpt__appo_report_stats(dpt_appo_t *a, dpt_appo_stats_t *as)
{
    dpt_learner_stats_t ls;
    dpt_learner_get_stats(a->learner_thread, &ls);
    as->updates = a->updates - a->rep.updates;
    as->policy_lag = a->lag_count > 0.0 ? a->lag_sum / a->lag_count : 0.0;
    as->learner_utilization = ls.learner_utilization;
    as->batches_taken = a->batches_taken;
    as->passes_scheduled = a->passes_scheduled;
    as->broadcasts = a->broadcasts;
    as->dequeue_time_ms = ls.learner_dequeue_time_ms;
    as->grad_time_ms = ls.learner_grad_time_ms;
    as->load_time_ms = as->updates ? (a->load_s - a->rep.load_s) * 1e3 / (double)as->updates : 0.0;
    if (a->K > 1) {
        /* RLlib's multi-GPU figures: the loaders' per load, the learner's
         * wait for a loaded stack. */
        pthread_mutex_lock(&a->lmu);
        uint64_t loads = a->loads - a->rep.loads;
        double per = loads ? 1e3 / (double)loads : 0.0;
        as->load_time_ms = (a->loader_load_s - a->rep.loader_load_s) * per;
        as->dequeue_time_ms = (a->loader_wait_s - a->rep.loader_wait_s) * per;
        a->rep.loader_load_s = a->loader_load_s;
        a->rep.loader_wait_s = a->loader_wait_s;
        a->rep.loads = a->loads;
        pthread_mutex_unlock(&a->lmu);
        as->load_wait_time_ms = ls.learner_dequeue_time_ms;
    }
    as->queue_count = (uint64_t)ls.size_count;
    as->queue_mean = ls.size_mean;
    as->queue_std = ls.size_std;
    memcpy(as->queue_quantiles, ls.size_quantiles, sizeof as->queue_quantiles);
    as->npolicies = a->npols;
    for (int p = 0; p < a->npols; p++)
        dpt__appo_report_policy(a, p, &as->policy[p]);
}

int dpt_appo_train(dpt_appo_t *a, dpt_rl_result_t *res, dpt_appo_stats_t *as)
{
    memset(res, 0, sizeof *res);
    memset(as, 0, sizeof *as);
    if (a->stuck || atomic_load(&a->stop))
        return dpt_error(DPT_ESTATE, "appo: the engine has stopped");
    /* The learner goes on between two calls: an iteration reports what it
     * did since the last report (and when it reached total_timesteps
     * meanwhile, only reports). */
    uint64_t target;
    pthread_mutex_lock(&a->mu);
    uint64_t start = dpt__appo_begin(a, &target);
    pthread_mutex_unlock(&a->mu);
    int rc = a->lstarted ? DPT_OK : dpt__appo_start(a);
    if (rc)
        return rc;
    pthread_mutex_lock(&a->mu);
    if ((rc = dpt__appo_wait(a, target)) != 0) {
        pthread_mutex_unlock(&a->mu);
        dpt__appo_stop(a);
        return rc;
    }
    a->wake_at = 0;
    double t1 = dpt_now();
    dpt__appo_report(a, start, t1 - a->rep.t, res);
    dpt__appo_report_stats(a, as);
    res->learn_time_s = as->grad_time_ms * 1e-3 * (double)as->updates;
    res->sample_time_s = as->dequeue_time_ms * 1e-3 * (double)as->updates;
    /* The next iteration starts here. */
    a->rep.t = t1;
    a->rep.timesteps = a->timesteps;
    a->rep.updates = a->updates;
    a->rep.load_s = a->load_s;
    a->lag_sum = a->lag_count = 0.0;
    a->episodes_iter = 0;
    memset(&a->ls_sum, 0, sizeof a->ls_sum);
    a->ls_count = 0;
    pthread_mutex_unlock(&a->mu);
    return DPT_OK;
}
