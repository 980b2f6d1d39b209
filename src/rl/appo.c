/*
 * APPO and IMPALA (see rl_trainers.h): sampler threads feed a learner
 * thread through a bounded queue; the learner trains with the V-trace loss
 * (dpt_policy_vtrace_model) on the towers engine and publishes its weights
 * to the samplers every broadcast_interval updates.
 *
 *   sampler k:  [weights v] -> collect T steps of its N envs -> fragment
 *               (N sequences of T steps + a bootstrap row, tagged v) -> queue
 *   learner:    queue -> pending sequences -> a train batch of
 *               train_batch_size / T sequences -> load -> num_sgd_iter
 *               updates -> publish every broadcast_interval updates
 *
 * The caller's dpt_appo_train() only waits for the learner to have trained
 * steps_per_iteration more steps and reports what happened meanwhile.
 * Checkpoints hold the weights, the optimizer and the counters (the envs
 * and the queue are not saved: an asynchronous run is not bitwise
 * reproducible, and a resumed one starts its samplers afresh).
 */
#include "dpt/arena.h"
#include "dpt/queue.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "optim/optim_ckpt.h"
#include "rl_trainers.h"
#include "rollout.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A sampler's fragment: n sequences of T + 1 rows (T steps of one env, then
 * the observation after them), and the episodes that ended in it. */
typedef struct dpt__frag {
    size_t n;
    uint64_t version;         /* the learner update that made the weights it was sampled with */
    float *obs;               /* [n (T + 1), obs_dim] */
    void *act;                /* [n (T + 1), act_w] */
    float *logp, *rew, *disc; /* [n (T + 1)] */
    size_t episodes;
    double ret[DPT__EPISODE_WINDOW];
    uint32_t len[DPT__EPISODE_WINDOW];
} dpt__frag_t;

typedef struct dpt__sampler {
    struct dpt_appo *a;
    int index;
    pthread_t thread;
    int started;
    atomic_int running; /* 0 once its thread function returned */
    dpt__rollout_t ro;
    dpt_policy_t *actor;
    dpt_arena_t params;
    uint64_t version;
    int rc; /* its error, once it stopped on one (valid once `failed` is set) */
    char err[256];
    atomic_int failed;
} dpt__sampler_t;

struct dpt_appo {
    dpt_rl_config_t cfg;
    const dpt_env_class_t *cls;
    size_t T, od, aw, seqs; /* steps per fragment, obs and action widths, sequences per batch */
    int nsamplers;
    dpt__sampler_t *samplers;
    dpt_queue_t *queue;
    atomic_int stop;
    int stuck; /* a sampler was left running in its env (dpt__appo_stop) */

    /* the published weights */
    pthread_mutex_t wmu;
    dpt_arena_t pub;
    uint64_t pub_version;

    /* the learner */
    dpt_policy_t *learner;
    dpt_towers_t *towers;
    pthread_t lthread;
    int lstarted;
    pthread_mutex_t mu; /* the fields below, and the towers while a step runs */
    pthread_cond_t cv;
    int lrc;
    char lerr[256];
    float *bobs, *blogp, *brew, *bdisc; /* the train batch being filled */
    void *bact;
    size_t bfill;         /* sequences in it */
    dpt__frag_t *partial; /* a fragment whose sequences are only partly taken */
    size_t partial_next;
    uint64_t updates, timesteps, timesteps_sampled, episodes_total;
    double lag_sum;
    uint64_t lag_count;
    double t_dequeue, t_load, t_grad;
    struct { /* the counters at the last report */
        double t, grad, load, dequeue;
        uint64_t timesteps, updates;
    } rep;
    dpt__rl_learn_stats_t ls_sum;
    uint64_t ls_count;
    dpt_window_t qsize;
    double ret_window[DPT__EPISODE_WINDOW];
    uint32_t len_window[DPT__EPISODE_WINDOW];
    size_t wcount, wnext;
    uint64_t episodes_iter;
    /* checkpoints */
    dpt_arena_t ck_params;
    dpt_optim_t *ck_opt;
    uint64_t ck_head[5];
    uint64_t iteration;
};

static void dpt__frag_free(dpt__frag_t *f)
{
    if (!f)
        return;
    free(f->obs);
    free(f->act);
    free(f->logp);
    free(f->rew);
    free(f->disc);
    free(f);
}

static dpt__frag_t *dpt__frag_new(size_t n, size_t T, size_t od, size_t aw)
{
    dpt__frag_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    size_t rows = n * (T + 1);
    f->n = n;
    f->obs = calloc(rows * od, sizeof(float));
    f->act = calloc(rows * aw, 4);
    f->logp = calloc(rows, sizeof(float));
    f->rew = calloc(rows, sizeof(float));
    f->disc = calloc(rows, sizeof(float));
    if (!f->obs || !f->act || !f->logp || !f->rew || !f->disc) {
        dpt__frag_free(f);
        return NULL;
    }
    return f;
}

/* The rollout's last collect() as a fragment: env i's T steps become
 * sequence i (the rollout is time-major), then its current observation. */
static void dpt__frag_fill(dpt__frag_t *f, const dpt__rollout_t *ro, double gamma)
{
    size_t T = ro->T, N = ro->N, od = ro->obs_dim, aw = ro->act_w, L = T + 1;
    for (size_t i = 0; i < N; i++) {
        for (size_t t = 0; t < T; t++) {
            size_t k = t * N + i, r = i * L + t;
            memcpy(f->obs + r * od, ro->obs + k * od, od * sizeof(float));
            memcpy((char *)f->act + r * aw * 4, (const char *)ro->actions + k * aw * 4, aw * 4);
            f->logp[r] = ro->logp[k];
            f->rew[r] = ro->rewards[k];
            f->disc[r] = ro->dones[k] ? 0.0f : (float)gamma;
        }
        size_t r = i * L + T;
        memcpy(f->obs + r * od, ro->cur_obs + i * od, od * sizeof(float));
    }
    /* The episodes that ended in this fragment: the newest of the window. */
    size_t e =
        ro->episodes_this_iter < DPT__EPISODE_WINDOW ? ro->episodes_this_iter : DPT__EPISODE_WINDOW;
    f->episodes = e;
    for (size_t j = 0; j < e; j++) {
        size_t idx = (ro->wnext + DPT__EPISODE_WINDOW - e + j) % DPT__EPISODE_WINDOW;
        f->ret[j] = ro->ret_window[idx];
        f->len[j] = ro->len_window[idx];
    }
}

static void dpt__appo_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- samplers ------------------------------------------------------------------ */

static void *dpt__sampler_main(void *arg)
{
    dpt__sampler_t *s = arg;
    struct dpt_appo *a = s->a;
    const dpt_rl_config_t *c = &a->cfg;
    int rc = DPT_OK;
    while (!atomic_load(&a->stop)) {
        pthread_mutex_lock(&a->wmu);
        if (a->pub_version != s->version || s->version == UINT64_MAX) {
            memcpy(s->params.data, a->pub.data, a->pub.count * sizeof(float));
            s->version = a->pub_version;
        }
        pthread_mutex_unlock(&a->wmu);
        if ((rc = dpt__rollout_collect(&s->ro, s->actor, s->params.data, c->gamma, 1.0,
                                       c->reward_scale, a->T, NULL, NULL)) != 0)
            break;
        dpt__frag_t *f = dpt__frag_new(a->cfg.num_envs, a->T, a->od, a->aw);
        if (!f) {
            rc = dpt_error(DPT_ENOMEM, "appo sampler %d: cannot allocate a fragment", s->index);
            break;
        }
        dpt__frag_fill(f, &s->ro, c->gamma);
        f->version = s->version;
        /* Blocks while the queue is full; wakes up now and then to see
         * whether the run is stopping. */
        for (;;) {
            rc = dpt_queue_push(a->queue, f, 0.2);
            if (rc != DPT_ETIMEDOUT || atomic_load(&a->stop))
                break;
        }
        if (rc) {
            dpt__frag_free(f);
            if (rc == DPT_ECLOSED || atomic_load(&a->stop))
                rc = DPT_OK;
            break;
        }
    }
    if (rc) {
        s->rc = rc;
        snprintf(s->err, sizeof s->err, "%s", dpt_last_error());
        atomic_store(&s->failed, 1); /* publishes rc and err */
    }
    atomic_store(&s->running, 0);
    return NULL;
}

/* ---- the learner ------------------------------------------------------------------ */

/* Fails the learner with rc and the current error message. */
static int dpt__learner_fail(struct dpt_appo *a, int rc)
{
    pthread_mutex_lock(&a->mu);
    if (!a->lrc) {
        a->lrc = rc;
        snprintf(a->lerr, sizeof a->lerr, "%s", dpt_last_error());
    }
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* The first sampler that stopped on an error, or 0. */
static int dpt__samplers_failed(struct dpt_appo *a)
{
    for (int k = 0; k < a->nsamplers; k++)
        if (atomic_load(&a->samplers[k].failed))
            return dpt_error(a->samplers[k].rc, "appo sampler %d failed: %s", k,
                             a->samplers[k].err);
    return DPT_OK;
}

/* Takes sequences from fragments until the train batch is full. */
static int dpt__learner_fill(struct dpt_appo *a)
{
    size_t L = a->T + 1, od = a->od, aw = a->aw;
    while (a->bfill < a->seqs) {
        if (!a->partial) {
            double t0 = dpt_now();
            void *item = NULL;
            int rc;
            /* Short waits, so a failed sampler or a stop is noticed. */
            for (;;) {
                rc = dpt_queue_pop(a->queue, &item, 0.2);
                if (rc != DPT_ETIMEDOUT || atomic_load(&a->stop))
                    break;
                if ((rc = dpt__samplers_failed(a)) != 0)
                    return rc;
                if (dpt_now() - t0 >= a->cfg.learner_queue_timeout)
                    return dpt_error(DPT_ETIMEDOUT,
                                     "appo learner: no sample batch arrived in the learner queue "
                                     "for %g s (learner_queue_timeout): the samplers are stuck "
                                     "or gone",
                                     a->cfg.learner_queue_timeout);
            }
            if (rc)
                return atomic_load(&a->stop) ? DPT_ECLOSED : rc;
            dpt__frag_t *f = item;
            pthread_mutex_lock(&a->mu);
            a->t_dequeue += dpt_now() - t0;
            dpt_window_push(&a->qsize, (double)dpt_queue_size(a->queue));
            a->timesteps_sampled += f->n * a->T;
            for (size_t j = 0; j < f->episodes; j++) {
                a->ret_window[a->wnext] = f->ret[j];
                a->len_window[a->wnext] = f->len[j];
                a->wnext = (a->wnext + 1) % DPT__EPISODE_WINDOW;
                if (a->wcount < DPT__EPISODE_WINDOW)
                    a->wcount++;
            }
            a->episodes_total += f->episodes;
            a->episodes_iter += f->episodes;
            a->lag_sum += (double)(a->updates - f->version) * (double)f->n;
            a->lag_count += f->n;
            pthread_mutex_unlock(&a->mu);
            a->partial = f;
            a->partial_next = 0;
        }
        dpt__frag_t *f = a->partial;
        while (a->partial_next < f->n && a->bfill < a->seqs) {
            size_t src = a->partial_next * L, dst = a->bfill * L;
            memcpy(a->bobs + dst * od, f->obs + src * od, L * od * sizeof(float));
            memcpy((char *)a->bact + dst * aw * 4, (char *)f->act + src * aw * 4, L * aw * 4);
            memcpy(a->blogp + dst, f->logp + src, L * sizeof(float));
            memcpy(a->brew + dst, f->rew + src, L * sizeof(float));
            memcpy(a->bdisc + dst, f->disc + src, L * sizeof(float));
            a->partial_next++;
            a->bfill++;
        }
        if (a->partial_next == f->n) {
            dpt__frag_free(f);
            a->partial = NULL;
        }
    }
    return DPT_OK;
}

/* Loads the full train batch and takes num_sgd_iter updates on it. */
static int dpt__learner_step(struct dpt_appo *a)
{
    const dpt_rl_config_t *c = &a->cfg;
    dpt_batch_t b;
    int rc =
        dpt_vtrace_batch(&b, a->cls, a->seqs, a->T, a->bobs, a->bact, a->blogp, a->brew, a->bdisc);
    if (rc)
        return rc;
    pthread_mutex_lock(&a->mu);
    double t0 = dpt_now();
    dpt_towers_load_info_t li;
    rc = dpt_towers_load(a->towers, 0, &b, &li);
    double t1 = dpt_now();
    a->t_load += t1 - t0;
    float lr = dpt__rl_lr(c, a->timesteps);
    for (int e = 0; !rc && e < c->num_sgd_iter; e++) {
        dpt_towers_stats_t st;
        rc = dpt_towers_optimize(a->towers, 0, 0, lr, &st);
        if (rc)
            break;
        a->ls_sum.policy_loss += st.extra[DPT_PPO_STAT_POLICY_LOSS];
        a->ls_sum.vf_loss += st.extra[DPT_PPO_STAT_VF_LOSS];
        a->ls_sum.entropy += st.extra[DPT_PPO_STAT_ENTROPY];
        a->ls_sum.kl += st.extra[DPT_PPO_STAT_KL];
        a->ls_sum.clipfrac += st.extra[DPT_PPO_STAT_CLIPFRAC];
        a->ls_sum.grad_norm += st.grad_norm;
        a->ls_count++;
        a->updates++;
        if (a->updates % (uint64_t)c->broadcast_interval == 0) {
            pthread_mutex_lock(&a->wmu);
            rc = dpt_towers_get_weights(a->towers, a->pub.data, a->pub.count);
            a->pub_version = a->updates;
            pthread_mutex_unlock(&a->wmu);
        }
    }
    a->t_grad += dpt_now() - t1;
    if (!rc)
        a->timesteps += a->seqs * a->T;
    a->bfill = 0;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static void *dpt__learner_main(void *arg)
{
    struct dpt_appo *a = arg;
    uint64_t total = a->cfg.total_timesteps;
    while (!atomic_load(&a->stop)) {
        pthread_mutex_lock(&a->mu);
        int done = total && a->timesteps >= total;
        pthread_mutex_unlock(&a->mu);
        if (done) {
            /* Nothing more to train: idle until the engine stops. */
            dpt__appo_sleep(0.01);
            continue;
        }
        int rc = dpt__learner_fill(a);
        if (rc == DPT_ECLOSED && atomic_load(&a->stop))
            break;
        if (!rc)
            rc = dpt__learner_step(a);
        if (rc) {
            dpt__learner_fail(a, rc);
            break;
        }
    }
    return NULL;
}

/* ---- the engine -------------------------------------------------------------------- */

/* Seconds a stopping sampler gets to finish the env step it is in. */
#define DPT__APPO_JOIN_S 5.0

/* Stops every thread. A sampler still inside an env step after
 * DPT__APPO_JOIN_S (a hung env) is detached, and the engine is then never
 * freed (a->stuck): the thread may still touch it when the step returns. */
static void dpt__appo_stop(dpt_appo_t *a)
{
    atomic_store(&a->stop, 1);
    if (a->queue)
        dpt_queue_close(a->queue);
    if (a->lstarted)
        pthread_join(a->lthread, NULL);
    a->lstarted = 0;
    double deadline = dpt_now() + DPT__APPO_JOIN_S;
    for (int k = 0; k < a->nsamplers; k++) {
        dpt__sampler_t *s = &a->samplers[k];
        if (!s->started)
            continue;
        while (atomic_load(&s->running) && dpt_now() < deadline)
            dpt__appo_sleep(0.01);
        if (atomic_load(&s->running)) {
            pthread_detach(s->thread);
            a->stuck = 1;
        } else {
            pthread_join(s->thread, NULL);
        }
        s->started = 0;
    }
    if (a->stuck)
        return;
    void *item;
    while (a->queue && dpt_queue_pop(a->queue, &item, 0) == DPT_OK)
        dpt__frag_free(item);
    dpt__frag_free(a->partial);
    a->partial = NULL;
}

int dpt_appo_stop(dpt_appo_t *a)
{
    if (!a)
        return 0;
    dpt__appo_stop(a);
    return a->stuck;
}

void dpt_appo_destroy(dpt_appo_t *a)
{
    if (!a)
        return;
    dpt__appo_stop(a);
    if (a->stuck)
        return; /* a detached sampler may still use it */
    for (int k = 0; k < a->nsamplers; k++) {
        dpt__rollout_deinit(&a->samplers[k].ro);
        dpt_policy_destroy(a->samplers[k].actor);
        dpt_arena_deinit(&a->samplers[k].params);
    }
    free(a->samplers);
    dpt_queue_destroy(a->queue);
    dpt_towers_destroy(a->towers);
    dpt_policy_destroy(a->learner);
    dpt_arena_deinit(&a->pub);
    dpt_arena_deinit(&a->ck_params);
    dpt_optim_destroy(a->ck_opt);
    dpt_window_deinit(&a->qsize);
    free(a->bobs);
    free(a->bact);
    free(a->blogp);
    free(a->brew);
    free(a->bdisc);
    pthread_mutex_destroy(&a->wmu);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

int dpt_appo_create(dpt_appo_t **out, const dpt_env_class_t *cls, const dpt_rl_config_t *cfg)
{
    *out = NULL;
    size_t T = cfg->rollout_fragment_length;
    if (cfg->policy.use_lstm)
        return dpt_error(DPT_EINVAL, "appo: recurrent policies (use_lstm) are not supported");
    if (cfg->num_workers < 1 || cfg->num_envs < 1 || T < 1)
        return dpt_error(DPT_EINVAL, "appo: num_workers, num_envs_per_worker and "
                                     "rollout_fragment_length must be >= 1");
    if (cfg->train_batch_size < T || cfg->train_batch_size % T)
        return dpt_error(DPT_EINVAL,
                         "appo: train_batch_size %zu must be a positive multiple of "
                         "rollout_fragment_length %zu",
                         cfg->train_batch_size, T);
    size_t seqs = cfg->train_batch_size / T, D = (size_t)cfg->num_devices;
    if (D < 1 || seqs < D || seqs % D)
        return dpt_error(DPT_EINVAL,
                         "appo: the %zu fragments of a train batch must be at least and "
                         "divisible by num_devices %zu",
                         seqs, D);
    if (cfg->num_sgd_iter < 1 || cfg->broadcast_interval < 1 || cfg->learner_queue_size < 1 ||
        !(cfg->learner_queue_timeout > 0.0))
        return dpt_error(DPT_EINVAL, "appo: num_sgd_iter, broadcast_interval, "
                                     "learner_queue_size and learner_queue_timeout must be > 0");
    dpt_appo_t *a = calloc(1, sizeof *a);
    if (!a)
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate");
    pthread_mutex_init(&a->wmu, NULL);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->cfg = *cfg;
    a->cls = cls;
    a->T = T;
    a->seqs = seqs;
    a->od = cls->obs_dim;
    a->aw = cls->action_kind == DPT_ACTION_DISCRETE ? 1 : cls->action_dim;
    a->nsamplers = cfg->num_workers;
    size_t L = T + 1, rows = seqs * L;
    int rc;
    a->samplers = calloc((size_t)a->nsamplers, sizeof *a->samplers);
    a->bobs = calloc(rows * a->od, sizeof(float));
    a->bact = calloc(rows * a->aw, 4);
    a->blogp = calloc(rows, sizeof(float));
    a->brew = calloc(rows, sizeof(float));
    a->bdisc = calloc(rows, sizeof(float));
    if (!a->samplers || !a->bobs || !a->bact || !a->blogp || !a->brew || !a->bdisc) {
        rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate a train batch of %zu rows", rows);
        goto fail;
    }
    if ((rc = dpt_queue_create(&a->queue, cfg->learner_queue_size)) != 0 ||
        (rc = dpt_window_init(&a->qsize, 50)) != 0 ||
        (rc = dpt_policy_create_ex(&a->learner, cls, &cfg->policy, rows / D)) != 0)
        goto fail;
    size_t n = dpt_policy_vars(a->learner)->total;
    if ((rc = dpt_arena_init(&a->pub, n)) != 0 || (rc = dpt_arena_init(&a->ck_params, n)) != 0)
        goto fail;
    dpt_rng_t init;
    dpt_rng_init(&init, cfg->seed, 0, 0, DPT_RNG_INIT);
    dpt_policy_init_params(a->learner, a->pub.data, &init);
    for (int k = 0; k < a->nsamplers; k++) {
        dpt__sampler_t *s = &a->samplers[k];
        s->a = a;
        s->index = k;
        s->version = UINT64_MAX;
        if ((rc = dpt__rollout_init(&s->ro, cls, cfg->num_envs, T, cfg->seed, (uint32_t)k, 0)) !=
                0 ||
            (rc = dpt_policy_create_ex(&s->actor, cls, &cfg->policy, cfg->num_envs)) != 0 ||
            (rc = dpt_arena_init(&s->params, n)) != 0)
            goto fail;
    }
    dpt_vtrace_loss_params_t hp = {
        .impala = cfg->impala,
        .clip_param = cfg->loss.clip_param,
        .vf_coef = cfg->loss.vf_coef,
        .ent_coef = cfg->loss.ent_coef,
        .clip_rho = cfg->vtrace_clip_rho,
        .clip_pg_rho = cfg->vtrace_clip_pg_rho,
    };
    dpt_model_t model = dpt_policy_vtrace_model(a->learner, &hp);
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.num_devices = cfg->num_devices;
    tc.mode = cfg->towers_mode;
    tc.max_per_device_batch_size = rows / D;
    tc.max_load_rows = rows;
    tc.grad_clip = cfg->grad_clip;
    tc.comm_timeout_s = cfg->comm_timeout_s;
    tc.comm_algorithm = cfg->allreduce_algorithm;
    tc.reduce_sum = cfg->reduce_sum;
    tc.async_scale = cfg->async_scale;
    tc.optim = dpt_optim_defaults(DPT_OPTIM_ADAM);
    tc.optim.eps = cfg->adam_eps;
    dpt_batch_t lay;
    if ((rc = dpt_vtrace_batch(&lay, cls, 0, T, NULL, NULL, NULL, NULL, NULL)) != 0 ||
        (rc = dpt_towers_create(&a->towers, &model, &lay, &tc)) != 0 ||
        (rc = dpt_towers_set_weights(a->towers, a->pub.data, n)) != 0 ||
        (rc = dpt_optim_create(&a->ck_opt, &tc.optim, n)) != 0)
        goto fail;
    *out = a;
    return DPT_OK;
fail:
    dpt_appo_destroy(a);
    return rc;
}

dpt_policy_t *dpt_appo_policy(dpt_appo_t *a)
{
    return a->learner;
}

int dpt_appo_get_weights(dpt_appo_t *a, float *out, size_t count)
{
    pthread_mutex_lock(&a->mu);
    int rc = dpt_towers_get_weights(a->towers, out, count);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

uint64_t dpt_appo_iteration(const dpt_appo_t *a)
{
    return a->iteration;
}

/* Starts the samplers and the learner (first iteration). */
static int dpt__appo_start(dpt_appo_t *a)
{
    atomic_store(&a->stop, 0);
    for (int k = 0; k < a->nsamplers; k++) {
        dpt__sampler_t *s = &a->samplers[k];
        atomic_store(&s->running, 1);
        if (pthread_create(&s->thread, NULL, dpt__sampler_main, s) != 0) {
            atomic_store(&s->running, 0);
            dpt__appo_stop(a);
            return dpt_error(DPT_ETHREAD, "appo: cannot start sampler thread %d", k);
        }
        s->started = 1;
    }
    if (pthread_create(&a->lthread, NULL, dpt__learner_main, a) != 0) {
        dpt__appo_stop(a);
        return dpt_error(DPT_ETHREAD, "appo: cannot start the learner thread");
    }
    a->lstarted = 1;
    return DPT_OK;
}

int dpt_appo_train(dpt_appo_t *a, dpt_rl_result_t *res, dpt_appo_stats_t *as)
{
    memset(res, 0, sizeof *res);
    memset(as, 0, sizeof *as);
    const dpt_rl_config_t *c = &a->cfg;
    pthread_mutex_lock(&a->mu);
    /* The learner goes on between two calls: an iteration reports what it
     * did since the last report (and when it reached total_timesteps
     * meanwhile, only reports). */
    if (!a->lstarted) {
        a->rep.t = dpt_now();
        a->rep.timesteps = a->timesteps;
        a->rep.updates = a->updates;
    }
    double t0 = a->rep.t;
    uint64_t start = a->rep.timesteps, start_updates = a->rep.updates;
    double grad0 = a->rep.grad, load0 = a->rep.load, deq0 = a->rep.dequeue;
    uint64_t target = start + c->steps_per_iteration;
    if (c->total_timesteps && target > c->total_timesteps)
        target = c->total_timesteps;
    pthread_mutex_unlock(&a->mu);
    int rc = a->lstarted ? DPT_OK : dpt__appo_start(a);
    if (rc)
        return rc;
    pthread_mutex_lock(&a->mu);
    while (!a->lrc && a->timesteps < target) {
        /* Woken by every update; the time limit only bounds a missed one. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&a->cv, &a->mu, &until);
    }
    rc = a->lrc;
    if (rc) {
        pthread_mutex_unlock(&a->mu);
        dpt__appo_stop(a);
        return dpt_error(rc, "%s", a->lerr);
    }
    double t1 = dpt_now(), wall = t1 - t0;
    a->iteration++;
    res->iteration = a->iteration;
    res->timesteps_total = a->timesteps;
    res->timesteps_this_iter = a->timesteps - start;
    res->episodes_total = a->episodes_total;
    res->episodes_this_iter = a->episodes_iter;
    /* The window of the newest episodes, as the rollout keeps it. */
    dpt__rollout_t w;
    memset(&w, 0, sizeof w);
    memcpy(w.ret_window, a->ret_window, sizeof w.ret_window);
    memcpy(w.len_window, a->len_window, sizeof w.len_window);
    w.wcount = a->wcount;
    w.wnext = a->wnext;
    dpt__rollout_episode_stats(&w, &res->episode_reward_mean, &res->episode_reward_min,
                               &res->episode_reward_max, &res->episode_len_mean,
                               &res->episode_reward_mean_20, &res->episodes_in_window);
    double inv = a->ls_count ? 1.0 / (double)a->ls_count : 0.0;
    res->policy_loss = a->ls_sum.policy_loss * inv;
    res->vf_loss = a->ls_sum.vf_loss * inv;
    res->entropy = a->ls_sum.entropy * inv;
    res->kl = a->ls_sum.kl * inv;
    res->clipfrac = a->ls_sum.clipfrac * inv;
    res->grad_norm = a->ls_sum.grad_norm * inv;
    res->cur_lr = dpt__rl_lr(c, a->timesteps);
    res->learn_time_s = a->t_grad - grad0 + a->t_load - load0;
    res->sample_time_s = a->t_dequeue - deq0;
    res->iteration_time_s = wall;
    res->env_steps_per_s = wall > 0.0 ? (double)res->timesteps_this_iter / wall : 0.0;
    as->updates = a->updates - start_updates;
    as->timesteps_sampled = a->timesteps_sampled;
    as->policy_lag = a->lag_count ? a->lag_sum / (double)a->lag_count : 0.0;
    as->learner_utilization = wall > 0.0 ? (a->t_grad - grad0) / wall : 0.0;
    as->dequeue_time_ms = (a->t_dequeue - deq0) * 1e3;
    as->load_time_ms = (a->t_load - load0) * 1e3;
    as->grad_time_ms = (a->t_grad - grad0) * 1e3;
    as->queue_count = (uint64_t)a->qsize.count;
    as->queue_mean = dpt_window_mean(&a->qsize);
    as->queue_std = dpt_window_std(&a->qsize);
    static const double qs[5] = {0.0, 0.1, 0.5, 0.9, 1.0};
    for (int i = 0; i < 5; i++)
        as->queue_quantiles[i] = as->queue_count ? dpt_window_quantile(&a->qsize, qs[i]) : 0.0;
    /* The next iteration starts here. */
    a->rep.t = t1;
    a->rep.timesteps = a->timesteps;
    a->rep.updates = a->updates;
    a->rep.grad = a->t_grad;
    a->rep.load = a->t_load;
    a->rep.dequeue = a->t_dequeue;
    a->lag_sum = 0.0;
    a->lag_count = 0;
    a->episodes_iter = 0;
    memset(&a->ls_sum, 0, sizeof a->ls_sum);
    a->ls_count = 0;
    pthread_mutex_unlock(&a->mu);
    return DPT_OK;
}

/* ---- checkpoints ------------------------------------------------------------------ */

#define DPT__APPO_MAGIC UINT64_C(0x6470746170706f31) /* "dptappo1" */

int dpt_appo_checkpoint(dpt_appo_t *a, dpt_safetensors_writer_t *w)
{
    /* A copy of the weights and the optimizer taken between two updates:
     * the learner goes on while the writer saves. */
    pthread_mutex_lock(&a->mu);
    int rc = dpt_towers_get_weights(a->towers, a->ck_params.data, a->ck_params.count);
    dpt_optim_t *opt = dpt_towers_optimizer(a->towers);
    for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++)
        memcpy(dpt_optim_slot(a->ck_opt, k), dpt_optim_slot(opt, k),
               a->ck_params.count * sizeof(float));
    dpt_optim_set_t(a->ck_opt, dpt_optim_get_t(opt));
    a->ck_head[0] = DPT__APPO_MAGIC;
    a->ck_head[1] = a->iteration;
    a->ck_head[2] = a->timesteps;
    a->ck_head[3] = a->updates;
    a->ck_head[4] = a->episodes_total;
    pthread_mutex_unlock(&a->mu);
    if (!rc)
        rc = dpt__optim_ckpt_save(w, dpt_policy_vars(a->learner), a->ck_params.data, a->ck_opt);
    if (!rc)
        rc = dpt_safetensors_add_blob(w, "appo.state", a->ck_head, sizeof a->ck_head);
    return rc;
}

int dpt_appo_restore(dpt_appo_t *a, const dpt_safetensors_t *st)
{
    if (a->lstarted)
        return dpt_error(DPT_ESTATE, "appo: restore before training starts");
    dpt_optim_t *opt = dpt_towers_optimizer(a->towers);
    dpt__optim_ckpt_t ck;
    const void *blob;
    size_t bytes;
    uint64_t head[5];
    int rc = dpt__optim_ckpt_load(st, dpt_policy_vars(a->learner), opt, &ck);
    if (!rc)
        rc = dpt_safetensors_get_blob(st, "appo.state", &blob, &bytes);
    if (!rc && bytes != sizeof head)
        rc = dpt_error(DPT_EFORMAT, "checkpoint %s: appo.state has %zu bytes, expected %zu",
                       dpt_safetensors_path(st), bytes, sizeof head);
    if (!rc) {
        memcpy(head, blob, sizeof head);
        if (head[0] != DPT__APPO_MAGIC)
            rc = dpt_error(DPT_EFORMAT, "checkpoint %s: appo.state is not an APPO state",
                           dpt_safetensors_path(st));
    }
    if (!rc)
        rc = dpt_towers_set_weights(a->towers, ck.data, ck.count);
    if (!rc) {
        dpt__optim_ckpt_apply(&ck, opt);
        rc = dpt_towers_set_optimizer_state(a->towers, opt);
    }
    if (!rc) {
        memcpy(a->pub.data, ck.data, ck.count * sizeof(float));
        a->iteration = head[1];
        a->timesteps = head[2];
        a->updates = head[3];
        a->pub_version = head[3];
        a->episodes_total = head[4];
    }
    dpt__optim_ckpt_free(&ck);
    return rc;
}
