/*
 * job = ddppo: the DD-PPO workers (src/rl/ddppo.c) of one process behind
 * the trainer interface of dpt/train.h.
 *
 * The trainer owns num_workers workers and their communicator:
 *   no MPI (or a world of one process)  threads backend, num_workers participants
 *   MPI, num_workers == 1                mpi backend, one worker per process
 *   MPI, num_workers > 1                 hier backend, num_workers threads per process
 * Worker 0 runs on the calling thread, so the thread that initialized MPI
 * is the only one that calls it (hier's thread 0; FUNNELED suffices).
 * Workers 1..T-1 are the persistent threads of a device pool (dpt/device.h,
 * the pool the towers use): each command is one job of the pool, worker i
 * on device i, and the pool returns when the last worker is done; the
 * caller then collects every worker's outcome.
 *
 * A worker that fails never leaves the others blocked: it aborts the
 * workers' communicator (dpt_comm_abort), and otherwise the collectives time
 * out after comm_timeout_s, so every command ends and its first failure is
 * reported with the worker's index.
 */
#include "dpt/arena.h"
#include "core/prof.h"
#include "dpt/comm.h"
#include "dpt/device.h"
#include "dpt/status.h"
#include "rl_internal.h"
#include "train_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum dpt__ddppo_cmd {
    DPT__DDPPO_CREATE,
    DPT__DDPPO_ITERATE,
    DPT__DDPPO_CHECKPOINT,
    DPT__DDPPO_RESTORE,
    DPT__DDPPO_SET_WEIGHTS
} dpt__ddppo_cmd_t;

struct dpt__ddppo_trainer;

typedef struct dpt__ddppo_worker {
    struct dpt__ddppo_trainer *d;
    int index; /* thread of this process, 0..T-1 */
    dpt_comm_t *comm;
    dpt_ddppo_t *w;
    /* The outcome of the last command: written by the worker, read by the
     * caller once the pool's run has returned. */
    int rc;
    int peer_only; /* failed only because another worker did */
    char msg[512]; /* dpt_last_error() is per thread: a copy */
    dpt_rl_result_t res;
    float *state;    /* checkpoint: this worker's private state [state_floats] */
    float *gathered; /* checkpoint: every worker's [size * state_floats]; worker 0's
                         * is borrowed by the writer until it saves */
} dpt__ddppo_worker_t;

typedef struct dpt__ddppo_trainer {
    const dpt_config_t *cfg; /* borrowed: the trainer's own copy, valid until destroy */
    dpt_ddppo_config_t rc;
    dpt_env_class_t *cls; /* the configured env; workers borrow it */
    int T;                /* workers in this process */
    int size;             /* workers in the run (all processes) */
    dpt_comm_threads_group_t *tg;
    dpt_comm_hier_group_t *hg;
    dpt_ddppo_shared_t *shared;
    dpt__ddppo_worker_t *wk; /* [T] */
    /* The workers' threads: worker i runs on device i of the pool (worker
     * 0 on the calling thread), one command at a time. */
    dpt_device_pool_t *pool;
    dpt__ddppo_cmd_t cmd; /* the command in flight */
    /* Arguments of the command in flight (read-only for the workers). */
    dpt_safetensors_writer_t *writer;
    const dpt_safetensors_t *st;
    const float *weights_in; /* set_weights: the new parameters [nparams] */
    size_t state_bytes, state_floats;
} dpt__ddppo_trainer_t;

/* ---- one worker's part of each command ------------------------------------------- */

/* Collective checkpoint: the weights are compared (so the saved parameters
 * are every worker's), then every worker's private state is all-gathered
 * and global rank 0 adds the common part and one blob per worker. */
static int dpt__ddppo_checkpoint_part(dpt__ddppo_worker_t *wk)
{
    dpt__ddppo_trainer_t *d = wk->d;
    size_t nf = d->state_floats;
    /* Both buffers were allocated at create: nothing here fails before the
     * all-gather but the comparison, which is itself collective. */
    int rc = dpt_ddppo_check_weights(wk->w);
    if (rc)
        return rc;
    rc = dpt_ddppo_save_state(wk->w, wk->state, d->state_bytes);
    /* Every worker enters the all-gather, even after a local failure, or
     * the others would wait for it until the collective times out. */
    int grc = dpt_comm_allgather(wk->comm, wk->state, nf, wk->gathered);
    if (!rc)
        rc = grc;
    if (rc || !d->writer || dpt_comm_rank(wk->comm) != 0)
        return rc;
    rc = dpt_ddppo_checkpoint_common(wk->w, d->writer);
    for (int r = 0; !rc && r < d->size; r++) {
        char name[32];
        snprintf(name, sizeof name, "worker.%d", r);
        rc = dpt_safetensors_add_blob(d->writer, name, wk->gathered + (size_t)r * nf,
                                      d->state_bytes);
    }
    return rc;
}

/* Every worker validates its part first; one all-reduce tells all whether
 * every worker of every process can restore, and only then do they apply
 * it, so a failed restore changes no worker. */
static int dpt__ddppo_restore_part(dpt__ddppo_worker_t *wk)
{
    dpt__ddppo_trainer_t *d = wk->d;
    char name[32];
    const void *blob = NULL;
    size_t bytes = 0;
    snprintf(name, sizeof name, "worker.%d", dpt_comm_rank(wk->comm));
    /* The invariant order resumed with another number of workers: this
     * worker's state made from the saved ones. */
    void *composed = NULL;
    int rc = dpt_ddppo_compose_state(wk->w, d->st, &composed);
    if (!rc && composed) {
        blob = composed;
        bytes = dpt_ddppo_state_bytes(wk->w);
    } else if (!rc) {
        rc = dpt_safetensors_get_blob(d->st, name, &blob, &bytes);
    }
    if (!rc)
        rc = dpt__ddppo_restore_prepare(wk->w, d->st, blob, bytes);
    float failed = rc ? 1.0f : 0.0f;
    int grc = dpt_comm_allreduce(wk->comm, &failed, 1, DPT_REDUCE_SUM);
    if (!rc && grc)
        rc = grc;
    if (!rc && failed > 0.0f) {
        wk->peer_only = 1;
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s: another worker cannot restore from it "
                       "(its process reports why); nothing was restored",
                       dpt_safetensors_path(d->st));
    }
    if (rc)
        dpt__ddppo_restore_abort(wk->w);
    else
        dpt__ddppo_restore_commit(wk->w);
    free(composed);
    return rc;
}

static void dpt__ddppo_do(dpt__ddppo_worker_t *wk, dpt__ddppo_cmd_t cmd)
{
    dpt__ddppo_trainer_t *d = wk->d;
    int rc = DPT_OK;
    wk->peer_only = 0;
    switch (cmd) {
    case DPT__DDPPO_CREATE:
        rc = dpt_ddppo_worker_create(&wk->w, d->cls, &d->rc, wk->comm, d->shared);
        break;
    case DPT__DDPPO_ITERATE:
        rc = dpt_ddppo_worker_train(wk->w, &wk->res);
        /* A worker whose own step failed makes the others' steps fail with
         * DPT_ECOMM (dpt/towers.h) or time out: report its error first. */
        wk->peer_only = rc == DPT_ECOMM || rc == DPT_ETIMEDOUT;
        break;
    case DPT__DDPPO_CHECKPOINT: rc = dpt__ddppo_checkpoint_part(wk); break;
    case DPT__DDPPO_RESTORE: rc = dpt__ddppo_restore_part(wk); break;
    case DPT__DDPPO_SET_WEIGHTS:
        rc = dpt_ddppo_set_weights(wk->w, d->weights_in,
                                   dpt_policy_vars(dpt_ddppo_policy(wk->w))->total);
        /* Every rank passed the same weights: checked as a checkpoint does
         * (every worker enters the comparison, even after a failure). */
        {
            int crc = dpt_ddppo_check_weights(wk->w);
            if (!rc)
                rc = crc;
        }
        break;
    }
    wk->rc = rc;
    if (rc)
        snprintf(wk->msg, sizeof wk->msg, "%s", dpt_last_error());
    /* A worker's own failure in its part of create or iterate releases
     * the others at once instead of after comm_timeout_s (threads, and the
     * threads of this process on hier; MPI ranks learn of it when the
     * command ends the job). Checkpoint and restore agree on failures in a
     * collective every worker enters. */
    if (rc && !wk->peer_only && wk->comm && (cmd == DPT__DDPPO_CREATE || cmd == DPT__DDPPO_ITERATE))
        (void)dpt_comm_abort(wk->comm, wk->msg);
}

static int dpt__ddppo_pool_job(void *arg, int device)
{
    dpt__ddppo_trainer_t *d = arg;
    dpt__ddppo_do(&d->wk[device], d->cmd);
    return DPT_OK; /* the worker's outcome is in its slot */
}

/* Runs cmd on every worker (worker 0 here, the others on the pool's
 * threads) and returns the first failure: a worker's own error before one
 * that only reports another worker's. */
static int dpt__ddppo_run(dpt__ddppo_trainer_t *d, dpt__ddppo_cmd_t cmd)
{
    d->cmd = cmd;
    int rc = dpt_device_pool_run(d->pool, dpt__ddppo_pool_job, d);
    if (rc)
        return rc;
    const dpt__ddppo_worker_t *bad = NULL;
    for (int pass = 0; pass < 2 && !bad; pass++)
        for (int i = 0; i < d->T && !bad; i++)
            if (d->wk[i].rc && (pass == 1 || !d->wk[i].peer_only))
                bad = &d->wk[i];
    if (!bad)
        return DPT_OK;
    return dpt_error(bad->rc, "ddppo worker %d: %s",
                     bad->comm ? dpt_comm_rank(bad->comm) : bad->index, bad->msg);
}

/* ---- trainer ops ----------------------------------------------------------------- */

static void dpt__ddppo_destroy(void *self)
{
    dpt__ddppo_trainer_t *d = self;
    if (!d)
        return;
    dpt_device_pool_destroy(d->pool); /* joins the workers' threads */
    for (int i = 0; d->wk && i < d->T; i++) {
        dpt_ddppo_worker_destroy(d->wk[i].w);
        /* Handles go before their group; MPI calls stay on this thread. */
        dpt_comm_destroy(d->wk[i].comm);
        free(d->wk[i].state);
        free(d->wk[i].gathered);
    }
    dpt_comm_threads_group_destroy(d->tg);
    dpt_comm_hier_group_destroy(d->hg);
    dpt_ddppo_shared_destroy(d->shared);
    free(d->wk);
    dpt_env_class_destroy(d->cls);
    free(d);
}

/* The communicator of every worker of this process (see the table at the
 * top of this file). */
static int dpt__ddppo_comms(dpt__ddppo_trainer_t *d, int mpi)
{
    int rc;
    if (mpi && d->T == 1) {
        dpt_comm_mpi_options_t mo;
        dpt_comm_mpi_options_init(&mo);
        mo.timeout_s = d->rc.common.comm_timeout_s;
        mo.algorithm = d->rc.common.allreduce_algorithm;
        return dpt_comm_mpi_create(&d->wk[0].comm, &mo);
    }
    if (mpi) {
        dpt_comm_hier_options_t ho;
        dpt_comm_hier_options_init(&ho);
        ho.threads.timeout_s = d->rc.common.comm_timeout_s;
        ho.mpi.timeout_s = d->rc.common.comm_timeout_s;
        ho.mpi.algorithm = d->rc.common.allreduce_algorithm;
        rc = dpt_comm_hier_group_create(&d->hg, d->T, &ho);
        for (int i = 0; !rc && i < d->T; i++)
            rc = dpt_comm_hier_join(d->hg, i, &d->wk[i].comm);
        return rc;
    }
    dpt_comm_threads_options_t to;
    dpt_comm_threads_options_init(&to);
    to.timeout_s = d->rc.common.comm_timeout_s;
    to.algorithm = d->rc.common.allreduce_algorithm;
    rc = dpt_comm_threads_group_create(&d->tg, d->T, &to);
    for (int i = 0; !rc && i < d->T; i++)
        rc = dpt_comm_threads_join(d->tg, i, &d->wk[i].comm);
    return rc;
}

int dpt__ddppo_config_from(const dpt_config_t *c, dpt_ddppo_config_t *out)
{
    memset(out, 0, sizeof *out);
    if (dpt_config_job(c) != DPT_JOB_DDPPO)
        return dpt__rl_job_error(c, "ddppo");
    dpt__rl_ppo_learn_from(c, &out->learn);
    out->sync_frac = DPT_CF(c, sync_frac);
    out->check_weights_every = (int)DPT_CI(c, check_weights_every);
    if ((dpt_reduction_order_t)DPT_CI(c, reduction_order) == DPT_REDUCTION_INVARIANT)
        out->chunk_rows = (size_t)DPT_CI(c, reduction_chunk);
    return dpt__rl_common_from(c, &out->common);
}

int dpt__ddppo_defaults(dpt_ddppo_config_t *out)
{
    dpt_config_t *c;
    int rc = dpt__rl_default_config(DPT_JOB_DDPPO, &c);
    if (!rc)
        rc = dpt__ddppo_config_from(c, out);
    dpt_config_destroy(c);
    out->common.frozen = NULL; /* it pointed into c; the defaults freeze nothing */
    return rc;
}

static int dpt__ddppo_create(void **self, const dpt_config_t *cfg, const dpt_trainer_env_t *env)
{
    *self = NULL;
    dpt__ddppo_trainer_t *d = calloc(1, sizeof *d);
    if (!d)
        return dpt_error(DPT_ENOMEM, "ddppo: cannot allocate the trainer");
    d->cfg = cfg;
    int rc = dpt__ddppo_config_from(cfg, &d->rc);
    if (!rc)
        rc = dpt__rl_make_env_for(cfg, env, &d->cls);
    if (rc)
        goto fail;
    d->T = (int)DPT_CI(cfg, num_workers);
    d->wk = calloc((size_t)d->T, sizeof *d->wk);
    if (!d->wk) {
        rc = dpt_error(DPT_ENOMEM, "ddppo: cannot allocate %d workers", d->T);
        goto fail;
    }
    for (int i = 0; i < d->T; i++) {
        d->wk[i].d = d;
        d->wk[i].index = i;
    }
    /* Over several processes the workers' communicators span the ranks
     * (built here, beside the run's, which DD-PPO does not use itself). */
    int mpi = env && env->comm && dpt_comm_size(env->comm) > 1;
    if ((rc = dpt__ddppo_comms(d, mpi)) != 0 ||
        (rc = dpt_ddppo_shared_create(&d->shared, d->T)) != 0)
        goto fail;
    d->size = dpt_comm_size(d->wk[0].comm);
    if ((rc = dpt_device_pool_create(&d->pool, d->T, 0)) != 0 ||
        (rc = dpt__ddppo_run(d, DPT__DDPPO_CREATE)) != 0)
        goto fail;
    d->state_bytes = dpt_ddppo_state_bytes(d->wk[0].w);
    d->state_floats = (d->state_bytes + sizeof(float) - 1) / sizeof(float);
    size_t all;
    if (dpt_mul_size(d->state_floats, (size_t)d->size, &all)) {
        rc = dpt_error(DPT_EOVERFLOW, "ddppo: %d workers' checkpoint states overflow", d->size);
        goto fail;
    }
    for (int i = 0; i < d->T; i++) {
        dpt__ddppo_worker_t *wk = &d->wk[i];
        wk->state = calloc(d->state_floats, sizeof(float));
        wk->gathered = calloc(all, sizeof(float));
        if (!wk->state || !wk->gathered) {
            rc = dpt_error(DPT_ENOMEM,
                           "ddppo: cannot allocate the checkpoint states of %d "
                           "workers (%zu floats)",
                           d->size, all);
            goto fail;
        }
    }
    *self = d;
    return DPT_OK;
fail:
    dpt__ddppo_destroy(d);
    return rc;
}

static int dpt__ddppo_iterate(void *self, dpt_train_result_t *r)
{
    dpt__ddppo_trainer_t *d = self;
    int rc = dpt__ddppo_run(d, DPT__DDPPO_ITERATE);
    if (rc)
        return rc;
    /* Every worker holds the same aggregated result. */
    dpt__rl_fill_result(&d->wk[0].res, d->rc.common.total_timesteps, 1,
                        dpt__rl_default_learner_names, r);
    return DPT_OK;
}

static int dpt__ddppo_checkpoint(void *self, dpt_safetensors_writer_t *w)
{
    dpt__ddppo_trainer_t *d = self;
    d->writer = w;
    int rc = dpt__ddppo_run(d, DPT__DDPPO_CHECKPOINT);
    d->writer = NULL;
    return rc;
}

static int dpt__ddppo_restore(void *self, const dpt_safetensors_t *st)
{
    dpt__ddppo_trainer_t *d = self;
    /* Checked before any collective: every process reads the same file, so
     * all of them return here together. */
    uint64_t workers = 0;
    int rc = dpt_safetensors_meta_u64(st, "workers", &workers);
    if (rc)
        return rc;
    /* (the invariant order takes another count with the same envs in all:
     * each worker then checks and composes its part) */
    if (workers != (uint64_t)d->size && !d->rc.chunk_rows)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s was written by %llu DD-PPO workers, this "
                         "run has %d (num_workers x processes)",
                         dpt_safetensors_path(st), (unsigned long long)workers, d->size);
    d->st = st;
    rc = dpt__ddppo_run(d, DPT__DDPPO_RESTORE);
    d->st = NULL;
    return rc;
}

static const dpt_vartable_t *dpt__ddppo_vars(void *self)
{
    dpt__ddppo_trainer_t *d = self;
    return dpt_policy_vars(dpt_ddppo_policy(d->wk[0].w));
}

static int dpt__ddppo_get_weights(void *self, float *out, size_t count)
{
    dpt__ddppo_trainer_t *d = self;
    size_t n = dpt__ddppo_vars(self)->total;
    if (count != n)
        return dpt_error(DPT_EINVAL, "ddppo weights: %zu floats asked, the policy has %zu", count,
                         n);
    memcpy(out, dpt_ddppo_weights(d->wk[0].w), n * sizeof(float));
    return DPT_OK;
}

static int dpt__ddppo_set_weights(void *self, const float *in, size_t count)
{
    dpt__ddppo_trainer_t *d = self;
    (void)count; /* checked against the table by dpt_trainer_set_weights */
    d->weights_in = in;
    int rc = dpt__ddppo_run(d, DPT__DDPPO_SET_WEIGHTS);
    d->weights_in = NULL;
    return rc;
}

static int dpt__ddppo_evaluate(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    dpt__ddppo_trainer_t *d = self;
    /* The workers are idle between commands: worker 0's policy is free. */
    return dpt__rl_evaluate_into(dpt_ddppo_policy(d->wk[0].w), dpt_ddppo_weights(d->wk[0].w),
                                 episodes, seed, (int)DPT_CI(d->cfg, eval_stochastic), out);
}

static int dpt__ddppo_describe(void *self, dpt_safetensors_writer_t *w)
{
    dpt__ddppo_trainer_t *d = self;
    int rc = dpt__describe_policy(w, dpt_ddppo_policy(d->wk[0].w), d->cfg);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "workers", (uint64_t)d->size);
    return rc;
}

static const dpt_trainer_ops_t dpt__ddppo_ops = {
    .job = DPT_JOB_DDPPO,
    .create = dpt__ddppo_create,
    .destroy = dpt__ddppo_destroy,
    .iterate = dpt__ddppo_iterate,
    .checkpoint = dpt__ddppo_checkpoint,
    .restore = dpt__ddppo_restore,
    .vars = dpt__ddppo_vars,
    .get_weights = dpt__ddppo_get_weights,
    .set_weights = dpt__ddppo_set_weights,
    .evaluate = dpt__ddppo_evaluate,
    .describe = dpt__ddppo_describe,
    .eval_checkpoint = dpt__rl_eval_checkpoint,
};

static int dpt__ddppo_check(const dpt_config_t *c)
{
    if ((dpt_reduction_order_t)DPT_CI(c, reduction_order) == DPT_REDUCTION_INVARIANT) {
        /* sgd_minibatch_size is global then: it is checked against every
         * worker's rows when the workers are made. */
        if (DPT_CF(c, sync_frac) < 1.0 || DPT_CI(c, use_lstm))
            return dpt_error(DPT_EINVAL,
                             "reduction_order = invariant needs sync_frac = 1 (preemption cuts "
                             "rollouts by timing) and use_lstm = false (sync_frac = %g, use_lstm = "
                             "%s)",
                             DPT_CF(c, sync_frac), DPT_CI(c, use_lstm) ? "true" : "false");
        return dpt__config_reduction_check(c, DPT_CI(c, sgd_minibatch_size), "sgd_minibatch_size",
                                           DPT_CI(c, num_workers), "num_workers");
    }
    int rc = dpt__rl_check_minibatch(c, " worker's");
    if (!rc && DPT_CF(c, sync_frac) < 1.0 && DPT_CI(c, sgd_minibatch_size) < 4)
        rc = dpt_error(DPT_EINVAL, "sgd_minibatch_size must be >= 4 when sync_frac < 1 (a "
                                   "preempted worker may hold a quarter of its rows)");
    return rc;
}

static int dpt__ddppo_refuse_key(const dpt_config_t *c, dpt_config_key_t k)
{
    (void)c;
    if (k == DPT_CFG_train_batch_size)
        return dpt_error(DPT_EINVAL,
                         "train_batch_size is derived for ddppo (rollout_fragment_length "
                         "x num_envs_per_worker per worker); remove it from the config");
    return DPT_OK;
}

static size_t dpt__ddppo_threads(const dpt_config_t *c)
{
    return (size_t)DPT_CI(c, num_workers);
}

/* Every rank is a trainer. With several worker threads the hierarchical
 * communicator's leader (worker 0, the calling thread) alone calls MPI, so
 * FUNNELED would do; SERIALIZED is asked for them as it always was. */
static int dpt__ddppo_plan(const dpt_config_t *c, int world, dpt__mpi_plan_t *p)
{
    (void)world;
    p->mpi_threads = (int)DPT_CI(c, num_workers);
    return DPT_OK;
}

const dpt__job_t dpt__ddppo_job = {
    .id = DPT_JOB_DDPPO,
    .ops = &dpt__ddppo_ops,
    .keys = DPT_JOB_DDPPO,
    .check = dpt__ddppo_check,
    .refuse_key = dpt__ddppo_refuse_key,
    .threads = dpt__ddppo_threads,
    .plan = dpt__ddppo_plan,
};
