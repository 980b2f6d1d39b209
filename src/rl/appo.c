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
 */
#include "dpt/arena.h"
#include "dpt/comm.h"
#include "dpt/learner.h"
#include "dpt/queue.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "appo_internal.h"
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

/* A train batch: seqs sequences of T + 1 rows (T steps of one env, then
 * the observation after them), the weights versions that sampled them, and
 * the episodes that ended while it filled. */
typedef struct dpt__tb {
    int policy;               /* the policy whose envs sampled it */
    int stack;                /* the tower stack a loader loaded it into; -1: none */
    size_t seqs;              /* sequences filled so far */
    int passes;               /* updates taken on it */
    double version_sum;       /* sum over its sequences of the sampling weights' version */
    float *obs;               /* [seqs (T + 1), obs_dim] */
    void *act;                /* [seqs (T + 1), act_w] */
    float *logp, *rew, *disc; /* [seqs (T + 1)] */
    size_t episodes;
    double ret[DPT__EPISODE_WINDOW];
    uint32_t len[DPT__EPISODE_WINDOW];
} dpt__tb_t;

/* The envs of a sampler that one policy steps (all of them with one
 * policy), with that policy's weights, and the policy's batch it fills. */
typedef struct dpt__group {
    dpt__rollout_t ro;
    dpt_policy_t *actor;
    dpt_arena_t params;
    uint64_t version; /* of params; UINT64_MAX: none yet */
    dpt__tb_t *tb;    /* the batch it fills */
} dpt__group_t;

typedef struct dpt__sampler {
    struct dpt_appo *a;
    int index;
    pthread_t thread;
    int started;
    atomic_int running;   /* 0 once its thread function returned */
    dpt__group_t *groups; /* one per policy, in the order of the policies */
    int rc;               /* its error, once it stopped on one (valid once `failed` is set) */
    char err[256];
    atomic_int failed;
} dpt__sampler_t;

/* A policy of the run. A trained one has its learner model and towers
 * engine (weights and optimizer); one not trained only its weights. */
typedef struct dpt__pol {
    int train;
    dpt_policy_t *learner; /* the towers' model (trained), or a table of the weights */
    dpt_towers_t *towers;  /* NULL when not trained */
    /* the published weights, under wmu */
    dpt_arena_t pub;
    uint64_t pub_version;
    /* under mu: its updates, its learner results since the last report,
     * its newest episodes */
    uint64_t updates;
    dpt__rl_learn_stats_t ls_sum;
    uint64_t ls_count, updates_rep;
    double ret_window[DPT__EPISODE_WINDOW];
    size_t wcount, wnext;
    /* checkpoints */
    dpt_arena_t ck_params;
    dpt_optim_t *ck_opt; /* NULL when not trained */
    uint64_t ck_updates;
    /* loader threads (K > 1 stacks): its idle stacks, as stack + 1 */
    dpt_queue_t *idle;
} dpt__pol_t;

/* A loader thread (RLlib's _MultiGPULoaderThread): batch from the
 * inqueue -> an idle stack of its policy -> dpt_towers_load_direct -> the
 * learner's queue of loaded stacks. */
typedef struct dpt__loader {
    struct dpt_appo *a;
    int index;
    pthread_t thread;
    int started;
    int rc; /* its error (valid once `failed` is set) */
    char err[256];
    atomic_int failed;
} dpt__loader_t;

struct dpt_appo {
    dpt_rl_config_t cfg;
    const dpt_env_class_t *cls;
    size_t T, od, aw, seqs; /* steps per fragment, obs and action widths, sequences per batch */
    int nsamplers;
    dpt__sampler_t *samplers;
    dpt_learner_t *learner_thread;
    atomic_int stop;
    int stuck; /* a sampler was left running in its env (dpt__appo_stop) */

    /* K > 1 tower stacks: the samplers' batches wait in sample_q for the
     * loaders, and the learner's inqueue holds loaded stacks; lmu guards the
     * loaders' figures */
    int K;
    dpt_queue_t *sample_q;
    dpt__loader_t *loaders;
    int nloaders;
    pthread_mutex_t lmu;
    double loader_load_s, loader_wait_s;
    uint64_t loads;
    /* the policies (cfg.policies); wmu guards their published weights */
    pthread_mutex_t wmu;
    dpt__pol_t *pols;
    int npols, main; /* main: the first trained policy (dpt_rl_policies_main) */

    /* mu guards the policies' learners and the counters below */
    int lstarted;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled once timesteps reaches wake_at */
    uint64_t wake_at;  /* what dpt_appo_train waits for (0: nobody waits) */
    uint64_t updates, timesteps, timesteps_sampled, episodes_total;
    double lag_sum, lag_count, load_s;
    double ret_window[DPT__EPISODE_WINDOW];
    uint32_t len_window[DPT__EPISODE_WINDOW];
    size_t wcount, wnext;
    uint64_t episodes_iter;
    /* the learner's results since the last report (dpt_appo_train) */
    dpt__rl_learn_stats_t ls_sum;
    uint64_t ls_count;
    struct { /* the counters at the last report */
        double t, load_s, loader_load_s, loader_wait_s;
        uint64_t timesteps, updates, loads;
    } rep;
    /* under mpirun (dpt_appo_create_mpi): rank 0 learns, the others sample */
    dpt_comm_t *comm;
    int rank, nranks;
    uint64_t sent_version; /* the weights last sent to the sampler ranks */
    dpt__tb_t *held;       /* a received batch waiting for room in the inqueue */
    int finished;          /* rank 0 told the samplers to stop */
    /* checkpoints */
    uint64_t ck_head[5];
    uint64_t iteration;
};

static void dpt__tb_free(dpt__tb_t *b)
{
    if (!b)
        return;
    free(b->obs);
    free(b->act);
    free(b->logp);
    free(b->rew);
    free(b->disc);
    free(b);
}

static dpt__tb_t *dpt__tb_new(const struct dpt_appo *a)
{
    dpt__tb_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    size_t rows = a->seqs * (a->T + 1);
    b->obs = calloc(rows * a->od, sizeof(float));
    b->act = calloc(rows * a->aw, 4);
    b->logp = calloc(rows, sizeof(float));
    b->rew = calloc(rows, sizeof(float));
    b->disc = calloc(rows, sizeof(float));
    b->stack = -1;
    if (!b->obs || !b->act || !b->logp || !b->rew || !b->disc) {
        dpt__tb_free(b);
        return NULL;
    }
    return b;
}

/* Env i's fragment of the rollout's last collect() (time-major) as
 * sequence b->seqs of the batch: its T steps, then its current observation
 * in the bootstrap row. */
static void dpt__tb_add(dpt__tb_t *b, const dpt__rollout_t *ro, size_t i, double gamma,
                        uint64_t version)
{
    size_t T = ro->T, N = ro->N, od = ro->obs_dim, aw = ro->act_w, L = T + 1, r0 = b->seqs * L;
    for (size_t t = 0; t < T; t++) {
        size_t k = t * N + i, r = r0 + t;
        memcpy(b->obs + r * od, ro->obs + k * od, od * sizeof(float));
        memcpy((char *)b->act + r * aw * 4, (const char *)ro->actions + k * aw * 4, aw * 4);
        b->logp[r] = ro->logp[k];
        b->rew[r] = ro->rewards[k];
        b->disc[r] = ro->dones[k] ? 0.0f : (float)gamma;
    }
    memcpy(b->obs + (r0 + T) * od, ro->cur_obs + i * od, od * sizeof(float));
    b->seqs++;
    b->version_sum += (double)version;
}

/* The episodes that ended in the rollout's last collect() (the newest of
 * its window), added to the batch (the newest DPT__EPISODE_WINDOW kept). */
static void dpt__tb_episodes(dpt__tb_t *b, const dpt__rollout_t *ro)
{
    size_t e =
        ro->episodes_this_iter < DPT__EPISODE_WINDOW ? ro->episodes_this_iter : DPT__EPISODE_WINDOW;
    for (size_t j = 0; j < e; j++) {
        size_t idx = (ro->wnext + DPT__EPISODE_WINDOW - e + j) % DPT__EPISODE_WINDOW;
        if (b->episodes == DPT__EPISODE_WINDOW) {
            memmove(b->ret, b->ret + 1, (DPT__EPISODE_WINDOW - 1) * sizeof b->ret[0]);
            memmove(b->len, b->len + 1, (DPT__EPISODE_WINDOW - 1) * sizeof b->len[0]);
            b->episodes--;
        }
        b->ret[b->episodes] = ro->ret_window[idx];
        b->len[b->episodes] = ro->len_window[idx];
        b->episodes++;
    }
}

static void dpt__appo_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A full train batch into the learner's inqueue: the learner's own queue
 * with one tower stack, the loaders' with several. */
static int dpt__appo_push(struct dpt_appo *a, dpt__tb_t *tb, double timeout_s)
{
    return a->K > 1 ? dpt_queue_push(a->sample_q, tb, timeout_s)
                    : dpt_learner_push(a->learner_thread, tb, timeout_s);
}

/* ---- sample batches between ranks (mpirun) ---------------------------------------- */

/* Messages: a sampler rank sends BATCH (a train batch) and, on an env
 * error, FAIL {code, message}; rank 0 sends WEIGHTS {version, floats} and
 * STOP, answered by BYE. */
#define DPT__APPO_TAG_BATCH 201
#define DPT__APPO_TAG_WEIGHTS 202
#define DPT__APPO_TAG_STOP 203
#define DPT__APPO_TAG_BYE 204
#define DPT__APPO_TAG_FAIL 205

/* The bytes of a full batch: {seqs, episodes, version_sum}, obs, actions,
 * logp, rewards, discounts, then the episodes' returns and lengths. */
static size_t dpt__tb_bytes(const struct dpt_appo *a, size_t episodes)
{
    size_t rows = a->seqs * (a->T + 1);
    return 24 + rows * (a->od + a->aw + 3) * 4 + episodes * (sizeof(double) + sizeof(uint32_t));
}

static void dpt__tb_pack(const struct dpt_appo *a, const dpt__tb_t *b, unsigned char *p)
{
    size_t rows = a->seqs * (a->T + 1);
    uint64_t head[2] = {b->seqs, b->episodes};
    memcpy(p, head, 16);
    memcpy(p + 16, &b->version_sum, 8);
    p += 24;
    memcpy(p, b->obs, rows * a->od * 4);
    p += rows * a->od * 4;
    memcpy(p, b->act, rows * a->aw * 4);
    p += rows * a->aw * 4;
    memcpy(p, b->logp, rows * 4);
    memcpy(p + rows * 4, b->rew, rows * 4);
    memcpy(p + 2 * rows * 4, b->disc, rows * 4);
    p += 3 * rows * 4;
    memcpy(p, b->ret, b->episodes * sizeof(double));
    memcpy(p + b->episodes * sizeof(double), b->len, b->episodes * sizeof(uint32_t));
}

/* A batch from its bytes; DPT_EFORMAT when they are not one. */
static int dpt__tb_unpack(const struct dpt_appo *a, const unsigned char *p, size_t n, int src,
                          dpt__tb_t **out)
{
    uint64_t head[2];
    *out = NULL;
    if (n < 24 || (memcpy(head, p, 16), head[0] != a->seqs) || head[1] > DPT__EPISODE_WINDOW ||
        n != dpt__tb_bytes(a, (size_t)head[1]))
        return dpt_error(DPT_EFORMAT,
                         "appo: a sample batch of %zu bytes from rank %d does not "
                         "match this run's sizes",
                         n, src);
    dpt__tb_t *b = dpt__tb_new(a);
    if (!b)
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate a train batch");
    size_t rows = a->seqs * (a->T + 1);
    b->seqs = (size_t)head[0];
    b->episodes = (size_t)head[1];
    memcpy(&b->version_sum, p + 16, 8);
    p += 24;
    memcpy(b->obs, p, rows * a->od * 4);
    p += rows * a->od * 4;
    memcpy(b->act, p, rows * a->aw * 4);
    p += rows * a->aw * 4;
    memcpy(b->logp, p, rows * 4);
    memcpy(b->rew, p + rows * 4, rows * 4);
    memcpy(b->disc, p + 2 * rows * 4, rows * 4);
    p += 3 * rows * 4;
    memcpy(b->ret, p, b->episodes * sizeof(double));
    memcpy(b->len, p + b->episodes * sizeof(double), b->episodes * sizeof(uint32_t));
    *out = b;
    return DPT_OK;
}

/* A sampler rank: its full batch to rank 0 (the send waits while rank 0,
 * its inqueue full, does not take it). */
static int dpt__sampler_send(dpt__sampler_t *s, dpt__group_t *g)
{
    struct dpt_appo *a = s->a;
    size_t n = dpt__tb_bytes(a, g->tb->episodes);
    unsigned char *m = malloc(n);
    if (!m)
        return dpt_error(DPT_ENOMEM, "appo sampler: cannot allocate a message");
    dpt__tb_pack(a, g->tb, m);
    int rc = dpt_comm_send(a->comm, 0, DPT__APPO_TAG_BATCH, m, n);
    free(m);
    dpt__tb_free(g->tb);
    g->tb = NULL;
    return rc;
}

/* A sampler rank, between fragments: takes rank 0's newest weights and
 * notices STOP (DPT_ECLOSED). With wait set, waits for a message first
 * (no weights yet). Under mpirun a run has one policy. */
static int dpt__sampler_poll(dpt__sampler_t *s, int wait)
{
    struct dpt_appo *a = s->a;
    dpt__group_t *g = &s->groups[0];
    for (;;) {
        int flag = 0, tag = -1, rc;
        if (wait) {
            flag = 1;
        } else if ((rc = dpt_comm_probe(a->comm, 0, DPT_COMM_ANY_TAG, &flag, NULL, &tag, NULL)) !=
                   0) {
            return rc;
        }
        if (!flag)
            return DPT_OK;
        void *m = NULL;
        size_t n = 0;
        rc = dpt_comm_recv(a->comm, 0, DPT_COMM_ANY_TAG, a->cfg.comm_timeout_s, &m, &n, NULL, &tag);
        if (rc == DPT_ETIMEDOUT)
            return dpt_error(rc,
                             "appo sampler (rank %d): no word from the learner (rank 0) for "
                             "comm_timeout_s = %g s",
                             a->rank, a->cfg.comm_timeout_s);
        if (rc)
            return rc;
        wait = 0;
        if (tag == DPT__APPO_TAG_STOP) {
            free(m);
            return DPT_ECLOSED;
        }
        if (tag == DPT__APPO_TAG_WEIGHTS && n == 8 + g->params.count * sizeof(float)) {
            memcpy(&g->version, m, 8);
            memcpy(g->params.data, (unsigned char *)m + 8, g->params.count * sizeof(float));
        }
        free(m);
    }
}

/* Rank 0: the newest weights to every sampler rank (without waiting for
 * them), then the next sample batch into the learner's inqueue: one held
 * since the inqueue was full, or one received within wait_s. */
static int dpt__appo_pump(struct dpt_appo *a, double wait_s)
{
    int rc = DPT_OK;
    dpt__pol_t *pol = &a->pols[0]; /* under mpirun a run has one policy */
    pthread_mutex_lock(&a->wmu);
    if (pol->pub_version != a->sent_version) {
        size_t n = 8 + pol->pub.count * sizeof(float);
        for (int r = 1; !rc && r < a->nranks; r++) {
            unsigned char *m = malloc(n);
            if (!m) {
                rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate the weights message");
                break;
            }
            memcpy(m, &pol->pub_version, 8);
            memcpy(m + 8, pol->pub.data, pol->pub.count * sizeof(float));
            rc = dpt_comm_send_async(a->comm, r, DPT__APPO_TAG_WEIGHTS, m, n);
        }
        a->sent_version = pol->pub_version;
    }
    pthread_mutex_unlock(&a->wmu);
    if (rc)
        return rc;
    if (!a->held) {
        void *m = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        rc = dpt_comm_recv(a->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, wait_s, &m, &n, &src,
                           &tag);
        if (rc == DPT_ETIMEDOUT)
            return DPT_OK; /* the learner's queue timeout decides when that is too long */
        if (rc)
            return rc;
        if (tag == DPT__APPO_TAG_BATCH) {
            rc = dpt__tb_unpack(a, m, n, src, &a->held);
        } else if (tag == DPT__APPO_TAG_FAIL) {
            int code = DPT_EIO, off = 0;
            if (n > 0)
                ((char *)m)[n - 1] = '\0';
            if (!m || sscanf(m, "%d %n", &code, &off) < 1 || code >= 0)
                code = DPT_EIO;
            rc = dpt_error(code, "appo sampler (rank %d): %s", src, m ? (char *)m + off : "");
        }
        free(m);
        if (rc || !a->held)
            return rc;
        wait_s = 0.0;
    }
    rc = dpt__appo_push(a, a->held, wait_s);
    if (rc == DPT_OK)
        a->held = NULL;
    return rc == DPT_ETIMEDOUT ? DPT_OK : rc;
}

/* Rank 0 at the end: every sampler rank is told to stop; with wait set,
 * their last batches are taken (and dropped) until each said goodbye, for
 * at most comm_timeout_s. */
static void dpt__appo_finish(struct dpt_appo *a, int wait)
{
    if (!a->comm || a->rank != 0 || a->finished)
        return;
    a->finished = 1;
    int left = 0;
    for (int r = 1; r < a->nranks; r++)
        if (dpt_comm_send_async(a->comm, r, DPT__APPO_TAG_STOP, NULL, 0) == DPT_OK)
            left++;
    double until = dpt_now() + a->cfg.comm_timeout_s;
    while (wait && left > 0 && dpt_now() < until) {
        void *m = NULL;
        size_t n = 0;
        int tag = -1;
        if (dpt_comm_recv(a->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, until - dpt_now(), &m, &n,
                          NULL, &tag) != DPT_OK)
            break;
        free(m);
        if (tag == DPT__APPO_TAG_BYE || tag == DPT__APPO_TAG_FAIL)
            left--;
    }
}

/* ---- samplers ------------------------------------------------------------------ */

/* Pushes a full batch into the learner's inqueue, waiting while it is full
 * (waking now and then to see whether the run is stopping). */
static int dpt__sampler_push(dpt__sampler_t *s, dpt__group_t *g)
{
    struct dpt_appo *a = s->a;
    for (;;) {
        int rc = dpt__appo_push(a, g->tb, 0.2);
        if (rc == DPT_OK) {
            g->tb = NULL;
            return DPT_OK;
        }
        if (rc != DPT_ETIMEDOUT || atomic_load(&a->stop))
            return atomic_load(&a->stop) || rc == DPT_ECLOSED ? DPT_ECLOSED : rc;
    }
}

static void *dpt__sampler_main(void *arg)
{
    dpt__sampler_t *s = arg;
    struct dpt_appo *a = s->a;
    const dpt_rl_config_t *c = &a->cfg;
    int rc = DPT_OK;
    while (!rc && !atomic_load(&a->stop)) {
        if (a->comm) {
            if ((rc = dpt__sampler_poll(s, s->groups[0].version == UINT64_MAX)) != 0)
                break;
        } else {
            pthread_mutex_lock(&a->wmu);
            for (int p = 0; p < a->npols; p++) {
                dpt__group_t *g = &s->groups[p];
                if (a->pols[p].pub_version != g->version || g->version == UINT64_MAX) {
                    memcpy(g->params.data, a->pols[p].pub.data,
                           a->pols[p].pub.count * sizeof(float));
                    g->version = a->pols[p].pub_version;
                }
            }
            pthread_mutex_unlock(&a->wmu);
        }
        /* Each policy's envs take their T steps with its weights, one group
         * after the other; a fragment goes to its policy's batch. */
        for (int p = 0; !rc && p < a->npols; p++) {
            dpt__group_t *g = &s->groups[p];
            if ((rc = dpt__rollout_collect(&g->ro, g->actor, g->params.data, c->gamma, 1.0,
                                           c->reward_scale, a->T, NULL, NULL)) != 0)
                break;
            for (size_t i = 0; !rc && i < g->ro.N; i++) {
                if (!g->tb && !(g->tb = dpt__tb_new(a))) {
                    rc = dpt_error(DPT_ENOMEM, "appo sampler %d: cannot allocate a train batch",
                                   s->index);
                    break;
                }
                g->tb->policy = p;
                if (i == 0)
                    dpt__tb_episodes(g->tb, &g->ro);
                dpt__tb_add(g->tb, &g->ro, i, c->gamma, g->version);
                if (g->tb->seqs == a->seqs)
                    rc = a->comm ? dpt__sampler_send(s, g) : dpt__sampler_push(s, g);
            }
        }
    }
    if (rc == DPT_ECLOSED)
        rc = DPT_OK; /* the run is stopping */
    if (rc) {
        s->rc = rc;
        snprintf(s->err, sizeof s->err, "%s", dpt_last_error());
        atomic_store(&s->failed, 1); /* publishes rc and err */
        /* No more batches will come from here: the learner must not wait
         * for them. Closing its inqueue ends it once it has drained it. */
        dpt_queue_close(dpt_learner_inqueue(a->learner_thread));
    }
    atomic_store(&s->running, 0);
    return NULL;
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

/* ---- the learner's step ------------------------------------------------------------ */

/* The first loader thread that stopped on an error, or 0. */
static int dpt__loaders_failed(struct dpt_appo *a)
{
    for (int k = 0; k < a->nloaders; k++)
        if (atomic_load(&a->loaders[k].failed))
            return dpt_error(a->loaders[k].rc, "appo loader %d failed: %s", k, a->loaders[k].err);
    return DPT_OK;
}

static int dpt__learner_check(void *ctx)
{
    int rc = dpt__samplers_failed(ctx);
    return rc ? rc : dpt__loaders_failed(ctx);
}

/* ---- loader threads (K > 1 tower stacks) ----------------------------------------- */

atomic_int dpt__appo_test_loader_fail_at;

static void dpt__learner_release(void *ctx, void *item);

/* Waits for an item of q, waking now and then to see whether the run is
 * stopping (DPT_ECLOSED then, as for a closed queue). *waited adds the time
 * it waited. */
static int dpt__loader_pop(struct dpt_appo *a, dpt_queue_t *q, void **item, double *waited)
{
    double t0 = dpt_now();
    int rc;
    do
        rc = atomic_load(&a->stop) ? DPT_ECLOSED : dpt_queue_pop(q, item, 0.2);
    while (rc == DPT_ETIMEDOUT);
    if (waited)
        *waited += dpt_now() - t0;
    return rc;
}

/* One batch: a trained policy's into an idle stack of its towers (on this
 * thread: dpt_towers_load_direct, while the learner steps on other
 * stacks), then to the learner; a batch of a policy not trained goes to
 * the learner as it is (it counts its steps and episodes). */
static int dpt__loader_one(dpt__loader_t *l, dpt__tb_t *tb, double waited)
{
    struct dpt_appo *a = l->a;
    dpt__pol_t *pol = &a->pols[tb->policy];
    double load_s = 0.0;
    int rc = DPT_OK;
    if (pol->train) {
        void *k = NULL;
        if ((rc = dpt__loader_pop(a, pol->idle, &k, NULL)) != 0) {
            dpt__tb_free(tb);
            return rc;
        }
        int stack = (int)(uintptr_t)k - 1;
        if (atomic_load(&dpt__appo_test_loader_fail_at) > 0 &&
            atomic_fetch_sub(&dpt__appo_test_loader_fail_at, 1) == 1)
            rc = dpt_error(DPT_EIO, "appo loader %d: injected failure (test hook)", l->index);
        dpt_batch_t b;
        if (!rc)
            rc = dpt_vtrace_batch(&b, a->cls, a->seqs, a->T, tb->obs, tb->act, tb->logp, tb->rew,
                                  tb->disc);
        double t0 = dpt_now();
        dpt_towers_load_info_t li;
        if (!rc)
            rc = dpt_towers_load_direct(pol->towers, stack, &b, 0, &li);
        load_s = dpt_now() - t0;
        if (rc) {
            (void)dpt_queue_push(pol->idle, k, 0.0);
            dpt__tb_free(tb);
            return rc;
        }
        tb->stack = stack;
    }
    pthread_mutex_lock(&a->lmu);
    a->loader_load_s += load_s;
    a->loader_wait_s += waited;
    a->loads++;
    pthread_mutex_unlock(&a->lmu);
    do
        rc = atomic_load(&a->stop) ? DPT_ECLOSED : dpt_learner_push(a->learner_thread, tb, 0.2);
    while (rc == DPT_ETIMEDOUT);
    if (rc)
        dpt__learner_release(a, tb); /* the learner has ended: the stack is idle again */
    return rc;
}

static void *dpt__loader_main(void *arg)
{
    dpt__loader_t *l = arg;
    struct dpt_appo *a = l->a;
    int rc = DPT_OK;
    while (!rc) {
        void *item = NULL;
        double waited = 0.0;
        if ((rc = dpt__loader_pop(a, a->sample_q, &item, &waited)) == 0)
            rc = dpt__loader_one(l, item, waited);
    }
    if (rc != DPT_ECLOSED) {
        l->rc = rc;
        snprintf(l->err, sizeof l->err, "%s", dpt_last_error());
        atomic_store(&l->failed, 1); /* publishes rc and err */
        /* The learner must not wait for stacks that will not come: closing
         * its inqueue ends it once drained, and its check names this error. */
        dpt_queue_close(dpt_learner_inqueue(a->learner_thread));
    }
    return NULL;
}

/* A batch's last pass is done: its stack (loader threads) becomes idle
 * again. The idle queue holds every stack, so the push never waits; after
 * the stop it is closed and the stack is not needed any more. */
static void dpt__learner_release(void *ctx, void *item)
{
    struct dpt_appo *a = ctx;
    dpt__tb_t *tb = item;
    if (tb && tb->stack >= 0)
        (void)dpt_queue_push(a->pols[tb->policy].idle, (void *)(uintptr_t)(tb->stack + 1), 0.0);
    dpt__tb_free(tb);
}

/* One update on a batch of a trained policy: load it into the policy's
 * towers (they hold one batch at a time), take a step, publish the
 * weights when it is time. A batch of a policy not trained takes no
 * update. The first pass counts the batch's env steps, episodes and (for
 * a trained policy) policy lag. */
static int dpt__learner_step(void *ctx, void *item, dpt_learner_result_t *res)
{
    struct dpt_appo *a = ctx;
    dpt__tb_t *tb = item;
    const dpt_rl_config_t *c = &a->cfg;
    dpt__pol_t *pol = &a->pols[tb->policy];
    pthread_mutex_lock(&a->mu);
    if (c->total_timesteps && a->timesteps >= c->total_timesteps) {
        /* Done: the rest is not trained on (the run ends at this count). */
        pthread_mutex_unlock(&a->mu);
        return DPT_OK;
    }
    int rc = DPT_OK;
    dpt_towers_stats_t st;
    if (pol->train) {
        int stack = tb->stack;
        if (stack < 0) {
            /* One stack: the learner loads the batch itself. */
            dpt_batch_t b;
            rc = dpt_vtrace_batch(&b, a->cls, a->seqs, a->T, tb->obs, tb->act, tb->logp, tb->rew,
                                  tb->disc);
            double t0 = dpt_now();
            dpt_towers_load_info_t li;
            if (!rc)
                rc = dpt_towers_load(pol->towers, 0, &b, &li);
            a->load_s += dpt_now() - t0;
            stack = 0;
        }
        float lr = dpt__rl_lr(c, a->timesteps);
        if (!rc)
            rc = dpt_towers_optimize(pol->towers, stack, 0, lr, &st);
        if (rc) {
            pthread_mutex_unlock(&a->mu);
            return rc;
        }
        a->updates++;
        pol->updates++;
        if (pol->updates % (uint64_t)c->broadcast_interval == 0) {
            pthread_mutex_lock(&a->wmu);
            rc = dpt_towers_get_weights(pol->towers, pol->pub.data, pol->pub.count);
            pol->pub_version = pol->updates;
            pthread_mutex_unlock(&a->wmu);
        }
    }
    if (tb->passes++ == 0) {
        uint64_t steps = (uint64_t)(a->seqs * a->T);
        res->env_steps = res->agent_steps = steps;
        a->timesteps += steps;
        a->timesteps_sampled += steps;
        if (pol->train) {
            a->lag_sum += (double)(pol->updates - 1) * (double)tb->seqs - tb->version_sum;
            a->lag_count += (double)tb->seqs;
        }
        for (size_t j = 0; j < tb->episodes; j++) {
            pol->ret_window[pol->wnext] = tb->ret[j];
            pol->wnext = (pol->wnext + 1) % DPT__EPISODE_WINDOW;
            if (pol->wcount < DPT__EPISODE_WINDOW)
                pol->wcount++;
            a->ret_window[a->wnext] = tb->ret[j];
            a->len_window[a->wnext] = tb->len[j];
            a->wnext = (a->wnext + 1) % DPT__EPISODE_WINDOW;
            if (a->wcount < DPT__EPISODE_WINDOW)
                a->wcount++;
        }
        a->episodes_total += tb->episodes;
        a->episodes_iter += tb->episodes;
    }
    if (pol->train) {
        dpt__rl_learn_stats_t *sums[2] = {&a->ls_sum, &pol->ls_sum};
        for (int k = 0; k < 2; k++) {
            sums[k]->policy_loss += st.extra[DPT_PPO_STAT_POLICY_LOSS];
            sums[k]->vf_loss += st.extra[DPT_PPO_STAT_VF_LOSS];
            sums[k]->entropy += st.extra[DPT_PPO_STAT_ENTROPY];
            sums[k]->kl += st.extra[DPT_PPO_STAT_KL];
            sums[k]->clipfrac += st.extra[DPT_PPO_STAT_CLIPFRAC];
            sums[k]->grad_norm += st.grad_norm;
        }
        a->ls_count++;
        pol->ls_count++;
    }
    /* Only the update that completes the caller's iteration wakes it: a
     * wake-up per update would cost the learner's core a context switch. */
    if (a->wake_at && a->timesteps >= a->wake_at) {
        a->wake_at = 0;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
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
    dpt__appo_finish(a, 0);
    if (a->learner_thread) {
        dpt_learner_stop(a->learner_thread);
        if (a->lstarted)
            (void)dpt_learner_join(a->learner_thread);
    }
    /* The loaders see the stop within 0.2 s wherever they wait. */
    for (int k = 0; k < a->nloaders; k++)
        if (a->loaders[k].started) {
            pthread_join(a->loaders[k].thread, NULL);
            a->loaders[k].started = 0;
        }
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
}

int dpt_appo_stop(dpt_appo_t *a)
{
    if (!a)
        return 0;
    /* A run that ended well lets its sampler ranks finish their last send
     * (after a failure the samplers were told at once, without waiting). */
    dpt__appo_finish(a, 1);
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
    dpt__tb_free(a->held);
    if (a->sample_q) {
        void *item;
        dpt_queue_close(a->sample_q);
        while (dpt_queue_pop(a->sample_q, &item, 0.0) == DPT_OK)
            dpt__tb_free(item);
        dpt_queue_destroy(a->sample_q);
    }
    free(a->loaders);
    for (int k = 0; a->samplers && k < a->nsamplers; k++) {
        dpt__sampler_t *s = &a->samplers[k];
        for (int p = 0; s->groups && p < a->npols; p++) {
            dpt__rollout_deinit(&s->groups[p].ro);
            dpt_policy_destroy(s->groups[p].actor);
            dpt_arena_deinit(&s->groups[p].params);
            dpt__tb_free(s->groups[p].tb);
        }
        free(s->groups);
    }
    free(a->samplers);
    for (int p = 0; a->pols && p < a->npols; p++) {
        dpt__pol_t *pol = &a->pols[p];
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

/* The engine with `nsamplers` samplers numbered from `first` (their env
 * seeds' stream index). */
static int dpt__appo_new(dpt_appo_t **out, const dpt_env_class_t *cls, const dpt_rl_config_t *cfg,
                         int nsamplers, int first)
{
    *out = NULL;
    size_t T = cfg->rollout_fragment_length;
    const dpt_rl_policies_t *pl = &cfg->policies;
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
    if (cfg->num_sgd_iter < 1 || cfg->broadcast_interval < 1)
        return dpt_error(DPT_EINVAL, "appo: num_sgd_iter and broadcast_interval must be >= 1");
    if (pl->count < 1 || pl->count > DPT_RL_MAX_POLICIES ||
        (pl->mapping_len && pl->mapping_len != cfg->num_envs))
        return dpt_error(DPT_EINVAL,
                         "appo: the policies (%d) or their mapping do not fit "
                         "num_envs_per_worker",
                         pl->count);
    size_t in_group[DPT_RL_MAX_POLICIES] = {0};
    int ntrain = 0;
    for (size_t i = 0; i < cfg->num_envs; i++)
        in_group[dpt_rl_policy_of_env(pl, i)]++;
    for (int p = 0; p < pl->count; p++) {
        ntrain += pl->train[p] != 0;
        if (in_group[p] == 0)
            return dpt_error(DPT_EINVAL, "appo: policy %s steps none of the %zu envs of a sampler",
                             pl->name[p], cfg->num_envs);
    }
    if (ntrain == 0)
        return dpt_error(DPT_EINVAL, "appo: no policy to train");
    dpt_appo_t *a = calloc(1, sizeof *a);
    if (!a)
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate");
    pthread_mutex_init(&a->wmu, NULL);
    pthread_mutex_init(&a->lmu, NULL);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->cfg = *cfg;
    a->cls = cls;
    a->sent_version = UINT64_MAX;
    a->T = T;
    a->seqs = seqs;
    a->od = cls->obs_dim;
    a->aw = cls->action_kind == DPT_ACTION_DISCRETE ? 1 : cls->action_dim;
    a->nsamplers = nsamplers;
    a->npols = pl->count;
    a->main = dpt_rl_policies_main(pl);
    a->K = cfg->tower_stacks > 1 ? cfg->tower_stacks : 1;
    a->nloaders = a->K > 1 ? (cfg->load_threads > 1 ? cfg->load_threads : 1) : 0;
    size_t rows = seqs * (T + 1);
    int rc;
    a->samplers = calloc(nsamplers > 0 ? (size_t)nsamplers : 1, sizeof *a->samplers);
    a->pols = calloc((size_t)a->npols, sizeof *a->pols);
    if (!a->samplers || !a->pols) {
        rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate %d samplers and %d policies",
                       a->nsamplers, a->npols);
        goto fail;
    }
    dpt_learner_options_t lo;
    dpt_learner_options_init(&lo);
    lo.learner_queue_size = cfg->learner_queue_size;
    lo.learner_queue_timeout = cfg->learner_queue_timeout;
    lo.minibatch_buffer_size = cfg->minibatch_buffer_size;
    lo.num_sgd_iter = cfg->num_sgd_iter;
    lo.step = dpt__learner_step;
    lo.release = dpt__learner_release;
    lo.check = dpt__learner_check;
    lo.ctx = a;
    if ((rc = dpt_learner_create(&a->learner_thread, &lo)) != 0)
        goto fail;
    if (a->K > 1) {
        /* RLlib's multi-GPU learner: the samplers' batches wait in the
         * loaders' inqueue; the learner's own queue holds loaded stacks. */
        if (cfg->minibatch_buffer_size > (size_t)a->K) {
            rc =
                dpt_error(DPT_EINVAL, "appo: minibatch_buffer_size %zu exceeds the %d tower stacks",
                          cfg->minibatch_buffer_size, a->K);
            goto fail;
        }
        if ((rc = dpt_queue_create(&a->sample_q, cfg->learner_queue_size)) != 0)
            goto fail;
        if (!(a->loaders = calloc((size_t)a->nloaders, sizeof *a->loaders))) {
            rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate %d loaders", a->nloaders);
            goto fail;
        }
        for (int k = 0; k < a->nloaders; k++) {
            a->loaders[k].a = a;
            a->loaders[k].index = k;
        }
    }
    dpt_vtrace_loss_params_t hp = {
        .impala = cfg->impala,
        .clip_param = cfg->loss.clip_param,
        .vf_coef = cfg->loss.vf_coef,
        .ent_coef = cfg->loss.ent_coef,
        .clip_rho = cfg->vtrace_clip_rho,
        .clip_pg_rho = cfg->vtrace_clip_pg_rho,
    };
    dpt_towers_config_t tc = dpt__rl_towers_config(cfg, rows / D, rows);
    tc.num_stacks = a->K;
    size_t n = 0;
    /* Policy p's initial weights draw from stream (seed, 0, p): the one
     * policy of a default run starts as it always did. */
    for (int p = 0; p < a->npols; p++) {
        dpt__pol_t *pol = &a->pols[p];
        pol->train = pl->train[p];
        if ((rc = dpt_policy_create_ex(&pol->learner, cls, &cfg->policy,
                                       pol->train ? rows / D : 1)) != 0)
            goto fail;
        n = dpt_policy_vars(pol->learner)->total;
        if ((rc = dpt_arena_init(&pol->pub, n)) != 0 ||
            (rc = dpt_arena_init(&pol->ck_params, n)) != 0)
            goto fail;
        dpt_rng_t init;
        dpt_rng_init(&init, cfg->seed, 0, (uint32_t)p, DPT_RNG_INIT);
        dpt_policy_init_params(pol->learner, pol->pub.data, &init);
        if (!pol->train)
            continue;
        dpt_model_t model = dpt_policy_vtrace_model(pol->learner, &hp);
        dpt_batch_t lay;
        if ((rc = dpt_vtrace_batch(&lay, cls, 0, T, NULL, NULL, NULL, NULL, NULL)) != 0 ||
            (rc = dpt_towers_create(&pol->towers, &model, &lay, &tc)) != 0 ||
            (rc = dpt_towers_set_weights(pol->towers, pol->pub.data, n)) != 0 ||
            (rc = dpt_optim_create(&pol->ck_opt, &tc.optim, n)) != 0)
            goto fail;
        if (a->K > 1) {
            if ((rc = dpt_queue_create(&pol->idle, (size_t)a->K)) != 0)
                goto fail;
            for (int k = 0; k < a->K; k++)
                (void)dpt_queue_push(pol->idle, (void *)(uintptr_t)(k + 1), 0.0);
        }
    }
    /* Sampler k's envs of policy p draw from the env streams of index
     * k * npolicies + p: with one policy, k's as they always did. */
    for (int k = 0; k < a->nsamplers; k++) {
        dpt__sampler_t *s = &a->samplers[k];
        s->a = a;
        s->index = first + k;
        if (!(s->groups = calloc((size_t)a->npols, sizeof *s->groups))) {
            rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate sampler %d", k);
            goto fail;
        }
        for (int p = 0; p < a->npols; p++) {
            dpt__group_t *g = &s->groups[p];
            uint32_t stream = (uint32_t)s->index * (uint32_t)a->npols + (uint32_t)p;
            g->version = UINT64_MAX;
            if ((rc = dpt__rollout_init(&g->ro, cls, in_group[p], T, cfg->seed, stream, 0)) != 0 ||
                (rc = dpt_policy_create_ex(&g->actor, cls, &cfg->policy, in_group[p])) != 0 ||
                (rc = dpt_arena_init(&g->params, n)) != 0)
                goto fail;
        }
    }
    *out = a;
    return DPT_OK;
fail:
    dpt_appo_destroy(a);
    return rc;
}

int dpt_appo_create(dpt_appo_t **out, const dpt_env_class_t *cls, const dpt_rl_config_t *cfg)
{
    return dpt__appo_new(out, cls, cfg, cfg->num_workers, 0);
}

int dpt_appo_create_mpi(dpt_appo_t **out, const dpt_env_class_t *cls, const dpt_rl_config_t *cfg,
                        dpt_comm_t *comm)
{
    *out = NULL;
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    if (size < 2)
        return dpt_error(DPT_EINVAL, "appo: a world of %d rank has no sampler rank", size);
    if (cfg->num_workers != 1)
        return dpt_error(DPT_EINVAL,
                         "num_workers = %d: under mpirun every rank but rank 0 (the learner) "
                         "is one sampler; set num_workers = 1",
                         cfg->num_workers);
    if (cfg->policies.count != 1)
        return dpt_error(DPT_EINVAL,
                         "policies: %d policies under mpirun are not supported yet (one "
                         "policy, or one process)",
                         cfg->policies.count);
    int rc = dpt__appo_new(out, cls, cfg, rank == 0 ? 0 : 1, rank - 1);
    if (rc)
        return rc;
    (*out)->comm = comm;
    (*out)->rank = rank;
    (*out)->nranks = size;
    return DPT_OK;
}

int dpt_appo_run_sampler(dpt_appo_t *a)
{
    if (!a->comm || a->rank == 0 || a->nsamplers != 1)
        return dpt_error(DPT_ESTATE, "appo: dpt_appo_run_sampler is for a sampler rank");
    dpt__sampler_t *s = &a->samplers[0];
    atomic_store(&s->running, 1);
    dpt__sampler_main(s);
    if (!atomic_load(&s->failed))
        return dpt_comm_send(a->comm, 0, DPT__APPO_TAG_BYE, NULL, 0);
    /* Rank 0 ends the run with this error; wait for its word (or the end of
     * the job) so that the error is reported once, by rank 0. */
    char msg[300];
    int n = snprintf(msg, sizeof msg, "%d %s", s->rc, s->err);
    if (dpt_comm_send(a->comm, 0, DPT__APPO_TAG_FAIL, msg, (size_t)n + 1) == DPT_OK) {
        void *m = NULL;
        size_t got = 0;
        int tag = -1;
        while (dpt_comm_recv(a->comm, 0, DPT_COMM_ANY_TAG, a->cfg.comm_timeout_s, &m, &got, NULL,
                             &tag) == DPT_OK) {
            free(m);
            m = NULL;
            if (tag == DPT__APPO_TAG_STOP)
                break;
        }
    }
    return dpt_error(s->rc, "%s", s->err);
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
    dpt__pol_t *pol = &a->pols[policy];
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
        if (pthread_create(&a->loaders[k].thread, NULL, dpt__loader_main, &a->loaders[k]) != 0) {
            dpt__appo_stop(a);
            return dpt_error(DPT_ETHREAD, "appo: cannot start loader thread %d", k);
        }
        a->loaders[k].started = 1;
    }
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
    return DPT_OK;
}

/* Why the learner cannot go on: a sampler's error, the learner's own, or
 * a learner that ended (its inqueue closed); 0 while it trains. */
static int dpt__appo_health(dpt_appo_t *a)
{
    int rc = dpt__samplers_failed(a);
    if (!rc)
        rc = dpt__loaders_failed(a);
    if (!rc)
        rc = dpt_learner_check(a->learner_thread);
    if (!rc && !dpt_learner_running(a->learner_thread))
        rc = dpt_error(DPT_ESTATE, "appo: the learner thread ended");
    return rc;
}

int dpt_appo_train(dpt_appo_t *a, dpt_rl_result_t *res, dpt_appo_stats_t *as)
{
    memset(res, 0, sizeof *res);
    memset(as, 0, sizeof *as);
    const dpt_rl_config_t *c = &a->cfg;
    if (a->stuck || atomic_load(&a->stop))
        return dpt_error(DPT_ESTATE, "appo: the engine has stopped");
    pthread_mutex_lock(&a->mu);
    /* The learner goes on between two calls: an iteration reports what it
     * did since the last report (and when it reached total_timesteps
     * meanwhile, only reports). */
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
    uint64_t start = a->rep.timesteps, target = start + c->steps_per_iteration;
    if (c->total_timesteps && target > c->total_timesteps)
        target = c->total_timesteps;
    pthread_mutex_unlock(&a->mu);
    int rc = a->lstarted ? DPT_OK : dpt__appo_start(a);
    if (rc)
        return rc;
    pthread_mutex_lock(&a->mu);
    while (a->timesteps < target) {
        pthread_mutex_unlock(&a->mu);
        /* The learner's results: nothing to add (the step keeps the
         * figures), but its outqueue must not fill up. */
        dpt_learner_result_t lr;
        while (dpt_learner_pop_result(a->learner_thread, &lr, 0.0) == DPT_OK)
            ;
        if ((rc = dpt__appo_health(a)) != 0) {
            dpt__appo_stop(a);
            return rc;
        }
        pthread_mutex_lock(&a->mu);
        if (a->timesteps >= target)
            break;
        if (a->comm) {
            /* Rank 0 under mpirun: the sampler ranks' batches come in here. */
            pthread_mutex_unlock(&a->mu);
            if ((rc = dpt__appo_pump(a, 0.05)) != 0) {
                dpt__appo_stop(a);
                return rc;
            }
            pthread_mutex_lock(&a->mu);
            continue;
        }
        /* Woken when the learner reaches the target; the time limit bounds
         * the health checks and drains the learner's results often enough
         * that their queue (1024 records) never fills: a full one would stop
         * the learner until this thread woke (at 5,000 updates a second,
         * 200 ms of waits stalled a third of the learner's time). */
        a->wake_at = target;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 10000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&a->cv, &a->mu, &until);
    }
    a->wake_at = 0;
    double t1 = dpt_now(), wall = t1 - a->rep.t;
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
    res->iteration_time_s = wall;
    res->env_steps_per_s = wall > 0.0 ? (double)res->timesteps_this_iter / wall : 0.0;
    dpt_learner_stats_t ls;
    dpt_learner_get_stats(a->learner_thread, &ls);
    as->updates = a->updates - a->rep.updates;
    as->timesteps_sampled = a->timesteps_sampled;
    as->policy_lag = a->lag_count > 0.0 ? a->lag_sum / a->lag_count : 0.0;
    as->learner_utilization = ls.learner_utilization;
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
    for (int p = 0; p < a->npols; p++) {
        dpt__pol_t *pol = &a->pols[p];
        dpt_appo_policy_stats_t *ps = &as->policy[p];
        double pinv = pol->ls_count ? 1.0 / (double)pol->ls_count : 0.0;
        ps->trained = pol->train;
        ps->updates = pol->updates - pol->updates_rep;
        ps->policy_loss = pol->ls_sum.policy_loss * pinv;
        ps->vf_loss = pol->ls_sum.vf_loss * pinv;
        ps->entropy = pol->ls_sum.entropy * pinv;
        ps->kl = pol->ls_sum.kl * pinv;
        ps->clipfrac = pol->ls_sum.clipfrac * pinv;
        ps->grad_norm = pol->ls_sum.grad_norm * pinv;
        double sum = 0.0;
        for (size_t j = 0; j < pol->wcount; j++)
            sum += pol->ret_window[j];
        ps->episodes_in_window = pol->wcount;
        ps->reward_mean = pol->wcount ? sum / (double)pol->wcount : (double)NAN;
        pol->updates_rep = pol->updates;
        memset(&pol->ls_sum, 0, sizeof pol->ls_sum);
        pol->ls_count = 0;
    }
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

/* ---- checkpoints ------------------------------------------------------------------ */

#define DPT__APPO_MAGIC UINT64_C(0x6470746170706f31) /* "dptappo1" */

/* "policy.<name>." (several policies), or "" (one: the plain layout). */
static void dpt__appo_ns(const dpt_appo_t *a, int p, char *buf, size_t size)
{
    if (a->npols == 1)
        buf[0] = '\0';
    else
        snprintf(buf, size, DPT_RL_POLICY_NS_FMT, a->cfg.policies.name[p]);
}

/* The comma-separated names of the policies (train: of those trained). */
static void dpt__appo_names(const dpt_appo_t *a, int train, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int p = 0; p < a->npols && len < size; p++)
        if (!train || a->pols[p].train)
            len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? "," : "",
                                    a->cfg.policies.name[p]);
}

/* Checkpoint names in a run of several policies: metadata "appo.policies"
 * and "appo.policies_to_train" (comma-separated names), and under
 * "policy.<name>." each policy's "params." (and for a trained one its
 * optimizer, "optim_step" and "updates"). One policy: the plain layout. */
#define DPT__APPO_NS_MAX (DPT_RL_POLICY_NAME_MAX + 16)
#define DPT__APPO_NAMES_MAX (DPT_RL_MAX_POLICIES * DPT_RL_POLICY_NAME_MAX)

int dpt_appo_checkpoint(dpt_appo_t *a, dpt_safetensors_writer_t *w)
{
    /* A copy of the weights and the optimizers taken between two updates:
     * the learner goes on while the writer saves. */
    pthread_mutex_lock(&a->mu);
    int rc = DPT_OK;
    for (int p = 0; !rc && p < a->npols; p++) {
        dpt__pol_t *pol = &a->pols[p];
        if (!pol->train) {
            pthread_mutex_lock(&a->wmu);
            memcpy(pol->ck_params.data, pol->pub.data, pol->pub.count * sizeof(float));
            pthread_mutex_unlock(&a->wmu);
            continue;
        }
        rc = dpt_towers_get_weights(pol->towers, pol->ck_params.data, pol->ck_params.count);
        dpt_optim_t *opt = dpt_towers_optimizer(pol->towers);
        for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++)
            memcpy(dpt_optim_slot(pol->ck_opt, k), dpt_optim_slot(opt, k),
                   pol->ck_params.count * sizeof(float));
        dpt_optim_set_t(pol->ck_opt, dpt_optim_get_t(opt));
        pol->ck_updates = pol->updates;
    }
    a->ck_head[0] = DPT__APPO_MAGIC;
    a->ck_head[1] = a->iteration;
    a->ck_head[2] = a->timesteps;
    a->ck_head[3] = a->updates;
    a->ck_head[4] = a->episodes_total;
    pthread_mutex_unlock(&a->mu);
    for (int p = 0; !rc && p < a->npols; p++) {
        dpt__pol_t *pol = &a->pols[p];
        const dpt_vartable_t *vars = dpt_policy_vars(pol->learner);
        char ns[DPT__APPO_NS_MAX], name[DPT__APPO_NS_MAX + 16];
        dpt__appo_ns(a, p, ns, sizeof ns);
        if (pol->train) {
            rc = dpt__optim_ckpt_save_ns(w, ns, vars, pol->ck_params.data, pol->ck_opt);
            snprintf(name, sizeof name, "%supdates", ns);
            if (!rc && a->npols > 1)
                rc = dpt_safetensors_set_meta_u64(w, name, pol->ck_updates);
        } else {
            snprintf(name, sizeof name, "%sparams.", ns);
            rc =
                dpt_safetensors_add_arena(w, name, vars, pol->ck_params.data, pol->ck_params.count);
        }
    }
    if (!rc && a->npols > 1) {
        char names[DPT__APPO_NAMES_MAX];
        dpt__appo_names(a, 0, names, sizeof names);
        rc = dpt_safetensors_set_meta(w, "appo.policies", names);
        dpt__appo_names(a, 1, names, sizeof names);
        if (!rc)
            rc = dpt_safetensors_set_meta(w, "appo.policies_to_train", names);
    }
    if (!rc)
        rc = dpt_safetensors_add_blob(w, "appo.state", a->ck_head, sizeof a->ck_head);
    return rc;
}

/* The checkpoint's policies must be this run's: the same names, the same
 * ones trained. */
static int dpt__appo_check_policies(const dpt_appo_t *a, const dpt_safetensors_t *st)
{
    const char *path = dpt_safetensors_path(st);
    const char *have = dpt_safetensors_meta(st, "appo.policies");
    const char *have_train = dpt_safetensors_meta(st, "appo.policies_to_train");
    char want[DPT__APPO_NAMES_MAX], want_train[DPT__APPO_NAMES_MAX];
    dpt__appo_names(a, 0, want, sizeof want);
    dpt__appo_names(a, 1, want_train, sizeof want_train);
    if (a->npols == 1 && !have)
        return DPT_OK; /* the plain layout of one policy */
    if (!have)
        return dpt_error(DPT_EFORMAT, "checkpoint %s holds one policy; this run has policies = %s",
                         path, want);
    if (strcmp(have, want) != 0)
        return dpt_error(DPT_EFORMAT, "checkpoint %s holds policies %s; this run has policies = %s",
                         path, have, want);
    if (!have_train || strcmp(have_train, want_train) != 0)
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s trains policies %s; this run has policies_to_train = %s",
                         path, have_train ? have_train : "(none given)", want_train);
    return DPT_OK;
}

int dpt_appo_restore(dpt_appo_t *a, const dpt_safetensors_t *st)
{
    if (a->lstarted)
        return dpt_error(DPT_ESTATE, "appo: restore before training starts");
    const void *blob;
    size_t bytes;
    uint64_t head[5];
    int rc = dpt__appo_check_policies(a, st);
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
    if (rc)
        return rc;
    /* All or nothing: every policy is read and checked before any is
     * changed. */
    dpt__optim_ckpt_t *ck = calloc((size_t)a->npols, sizeof *ck);
    uint64_t *updates = calloc((size_t)a->npols, sizeof *updates);
    if (!ck || !updates) {
        free(ck);
        free(updates);
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate the restore of %d policies", a->npols);
    }
    for (int p = 0; !rc && p < a->npols; p++) {
        dpt__pol_t *pol = &a->pols[p];
        const dpt_vartable_t *vars = dpt_policy_vars(pol->learner);
        char ns[DPT__APPO_NS_MAX], name[DPT__APPO_NS_MAX + 16];
        dpt__appo_ns(a, p, ns, sizeof ns);
        if (pol->train) {
            rc = dpt__optim_ckpt_load_ns(st, ns, vars, dpt_towers_optimizer(pol->towers), &ck[p]);
            snprintf(name, sizeof name, "%supdates", ns);
            updates[p] = head[3];
            if (!rc && a->npols > 1)
                rc = dpt_safetensors_meta_u64(st, name, &updates[p]);
            continue;
        }
        /* Not trained: the weights alone, in a buffer as the others'. */
        if (!(ck[p].data = calloc(pol->pub.count ? pol->pub.count : 1, sizeof(float)))) {
            rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate the restore of policy %s",
                           a->cfg.policies.name[p]);
            break;
        }
        ck[p].count = pol->pub.count;
        snprintf(name, sizeof name, "%sparams.", ns);
        rc = dpt_safetensors_load_arena(st, name, vars, ck[p].data, ck[p].count);
    }
    for (int p = 0; !rc && p < a->npols; p++) {
        dpt__pol_t *pol = &a->pols[p];
        if (pol->train) {
            rc = dpt_towers_set_weights(pol->towers, ck[p].data, ck[p].count);
            if (!rc) {
                dpt_optim_t *opt = dpt_towers_optimizer(pol->towers);
                dpt__optim_ckpt_apply(&ck[p], opt);
                rc = dpt_towers_set_optimizer_state(pol->towers, opt);
            }
            pol->updates = updates[p];
            pol->pub_version = updates[p];
        }
        memcpy(pol->pub.data, ck[p].data, ck[p].count * sizeof(float));
    }
    if (!rc) {
        a->iteration = head[1];
        a->timesteps = head[2];
        a->updates = head[3];
        a->episodes_total = head[4];
    }
    for (int p = 0; p < a->npols; p++)
        dpt__optim_ckpt_free(&ck[p]);
    free(ck);
    free(updates);
    return rc;
}
