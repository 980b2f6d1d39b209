/*
 * The sync_replicas job as a trainer (dpt/train.h): supervised training
 * through a sync-replicas parameter service (dpt/sync_replicas.h) with
 * total_num_replicas worker threads, replicas_to_aggregate of whose
 * gradients make each update; one iterate() per epoch (the steps of one
 * pass over the training set at batch_size rows per update).
 *
 * Data and model: the supervised task's (task.h): Fashion-MNIST, CSV or
 * spirals with the MLP of keys hidden and activation, or "bags"
 * (task_bags.c), whose model pools an embedding table
 * [bags_vocab, embedding_dim] over each bag and regresses its target with
 * an MLP; the table's gradients are row-sparse and travel as
 * (indices, rows).
 *
 * Which rows a worker trains on: the epoch's shuffled order is cut into
 * chunks of b = batch_size / replicas_to_aggregate rows; a worker's k-th
 * gradient of the epoch uses chunk (k N + w) mod chunks. With N == R every
 * step s of the epoch takes chunks s N .. s N + N - 1 (one per worker), the
 * service sums them in worker order, and a run is bitwise reproducible;
 * with backup workers it is not (which gradients arrive in time depends on
 * timing). Each epoch begins a session of the service (every worker starts
 * from the global step, fresh tokens), so a resumed run starts the epoch as
 * an uninterrupted one does.
 *
 * A worker whose gradient step fails is marked lost: the steps go on while
 * replicas_to_aggregate workers remain (the failure is reported as a note
 * and in the metrics); with fewer the epoch fails with the worker's error.
 */
#include "dpt/dpt.h"
#include "dpt/stats.h"
#include "dpt/sync_replicas.h"
#include "optim/optim_ckpt.h"
#include "sr_internal.h"
#include "train_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Metric names (static storage) of each worker and service. */
static const char *const dpt__srt_worker_metric[SRT_MAX_WORKERS] = {
    "info/sync_replicas/batches_contributed/w0",  "info/sync_replicas/batches_contributed/w1",
    "info/sync_replicas/batches_contributed/w2",  "info/sync_replicas/batches_contributed/w3",
    "info/sync_replicas/batches_contributed/w4",  "info/sync_replicas/batches_contributed/w5",
    "info/sync_replicas/batches_contributed/w6",  "info/sync_replicas/batches_contributed/w7",
    "info/sync_replicas/batches_contributed/w8",  "info/sync_replicas/batches_contributed/w9",
    "info/sync_replicas/batches_contributed/w10", "info/sync_replicas/batches_contributed/w11",
    "info/sync_replicas/batches_contributed/w12", "info/sync_replicas/batches_contributed/w13",
    "info/sync_replicas/batches_contributed/w14", "info/sync_replicas/batches_contributed/w15",
    "info/sync_replicas/batches_contributed/w16", "info/sync_replicas/batches_contributed/w17",
    "info/sync_replicas/batches_contributed/w18", "info/sync_replicas/batches_contributed/w19",
    "info/sync_replicas/batches_contributed/w20", "info/sync_replicas/batches_contributed/w21",
    "info/sync_replicas/batches_contributed/w22", "info/sync_replicas/batches_contributed/w23",
    "info/sync_replicas/batches_contributed/w24", "info/sync_replicas/batches_contributed/w25",
    "info/sync_replicas/batches_contributed/w26", "info/sync_replicas/batches_contributed/w27",
    "info/sync_replicas/batches_contributed/w28", "info/sync_replicas/batches_contributed/w29",
    "info/sync_replicas/batches_contributed/w30", "info/sync_replicas/batches_contributed/w31",
};
static const char *const dpt__srt_ps_metric[SRT_MAX_PS] = {
    "info/sync_replicas/ps_bytes/ps0", "info/sync_replicas/ps_bytes/ps1",
    "info/sync_replicas/ps_bytes/ps2", "info/sync_replicas/ps_bytes/ps3",
    "info/sync_replicas/ps_bytes/ps4", "info/sync_replicas/ps_bytes/ps5",
    "info/sync_replicas/ps_bytes/ps6", "info/sync_replicas/ps_bytes/ps7",
};

static void dpt__srt_destroy(void *self)
{
    srt_t *t = self;
    if (!t)
        return;
    /* The end of the run for the other ranks; the run's own error stays. */
    if (t->role == SRT_SERVICE && t->srv && !t->ended) {
        char keep[512];
        snprintf(keep, sizeof keep, "%s", dpt_last_error());
        if (dpt_sr_server_stop(t->srv) != 0 && keep[0])
            dpt_error(DPT_ECOMM, "%s", keep);
    }
    if (t->w) {
        dpt__sr_pool_stop(t);
        for (int i = 0; i < t->nw; i++) {
            dpt__sr_worker_free(&t->w[i]);
            dpt_sr_client_destroy(t->w[i].c);
        }
    }
    free(t->place);
    free(t->frozen);
    free(t->w);
    free(t->base_contrib);
    if (t->srv)
        dpt_sr_server_destroy(t->srv); /* and its engine, t->sr */
    else
        dpt_sr_destroy(t->sr);
    dpt__net_deinit(&t->eval);
    dpt__task_deinit(&t->task);
    free(t->perm);
    free(t);
}

/* ---- building ---------------------------------------------------------------- */

/* The service's config from c (every rank computes the same); sparse
 * (one flag per variable) is the caller's storage. */
static int dpt__srt_service_config(srt_t *t, const dpt_config_t *c, dpt_sr_config_t *out,
                                   unsigned char *sparse, size_t nsparse)
{
    dpt_sr_config_t sc = dpt_sr_defaults();
    int rc = dpt__task_optim(c, &sc.optim, &sc.schedule);
    if (rc)
        return rc;
    sc.schedule.total_steps = t->epochs * t->steps_per_epoch;
    sc.grad_clip = DPT_CF(c, grad_clip);
    sc.vars = t->vars;
    sc.replicas_to_aggregate = t->R;
    sc.total_num_replicas = t->N;
    sc.num_ps = t->num_ps;
    sc.ema_decay = t->ema_decay;
    sc.timeout_s = DPT_CF(c, comm_timeout_s);
    /* strict|fifo, in the engine's order */
    sc.tokens = DPT_CI(c, sync_replicas_tokens) ? DPT_SR_TOKENS_FIFO : DPT_SR_TOKENS_STRICT;
    sc.init_tokens = DPT_CI(c, init_tokens) < 0 ? (int64_t)t->R : DPT_CI(c, init_tokens);
    sc.no_grad = t->frozen;
    sc.running = t->eval.running; /* the same table as every worker's */
    memset(sparse, 0, nsparse);
    if (t->bags) {
        if (t->vars->nvars > nsparse)
            return dpt_error(DPT_EINVAL, "sync_replicas: the bags model has too many variables");
        sparse[0] = 1;
        sc.sparse = sparse;
    }
    *out = sc;
    return DPT_OK;
}

/* This process's service: the engine of the local workers, or a service
 * rank (dpt/sync_replicas_remote.h; rank 0 hands out the tokens), with the
 * variables initialised from the seed. */
static int dpt__srt_service(srt_t *t, const dpt_config_t *c)
{
    unsigned char sparse[2 * DPT__TASK_MAX_LAYERS + 1];
    dpt_sr_remote_config_t rc_ = {.nfigures = SRT_NFIGURES};
    int rc = dpt__srt_service_config(t, c, &rc_.sr, sparse, sizeof sparse);
    if (rc)
        return rc;
    if (t->role == SRT_LOCAL) {
        rc = dpt_sr_create(&t->sr, &rc_.sr);
    } else {
        rc = dpt_sr_server_create(&t->srv, &rc_, t->comm);
        t->sr = rc ? NULL : dpt_sr_server_engine(t->srv);
    }
    if (rc)
        return rc;
    dpt_rng_t init;
    dpt_rng_init(&init, (uint64_t)DPT_CI(c, seed), 0, 0, DPT_RNG_INIT);
    dpt__net_init_params(&t->eval, dpt_sr_params(t->sr), &init);
    dpt_sr_reset_ema(t->sr);
    dpt_sr_set_global_step(t->sr, 0);
    return DPT_OK;
}

/* 1 when service k keeps the embedding table (bags). */
int dpt__sr_has_table(const srt_t *t, int k)
{
    return t->bags && t->place[0] == k;
}

/* Worker w's client: this process's engine, or the services' ranks. */
static int dpt__srt_client(srt_t *t, const dpt_config_t *c, srt_worker_t *w)
{
    if (t->role == SRT_LOCAL)
        return dpt_sr_client_create_local(&w->c, t->sr, w->id);
    unsigned char sparse[2 * DPT__TASK_MAX_LAYERS + 1];
    dpt_sr_remote_config_t rc_ = {.nfigures = SRT_NFIGURES};
    int rc = dpt__srt_service_config(t, c, &rc_.sr, sparse, sizeof sparse);
    return rc ? rc : dpt_sr_client_create_remote(&w->c, &rc_, t->comm);
}

static int dpt__srt_build(srt_t *t, const dpt_config_t *c)
{
    int rc;
    t->N = (int)DPT_CI(c, total_num_replicas);
    t->R = (int)DPT_CI(c, replicas_to_aggregate);
    t->num_ps = (int)DPT_CI(c, num_ps);
    if (t->num_ps > SRT_MAX_PS)
        return dpt_error(DPT_EINVAL, "num_ps = %d: at most %d services", t->num_ps, SRT_MAX_PS);
    t->ema_decay = (float)DPT_CF(c, ema_decay);
    t->eval_ema = (int)DPT_CI(c, eval_ema);
    t->batch = (size_t)DPT_CI(c, batch_size);
    t->b = t->batch / (size_t)t->R;
    t->epochs = (uint64_t)DPT_CI(c, epochs);
    t->shuffle = (int)DPT_CI(c, shuffle);
    if (t->rows < t->batch)
        return dpt_error(DPT_EINVAL,
                         "the training set has %zu rows, fewer than batch_size %zu (one update "
                         "takes batch_size rows)",
                         t->rows, t->batch);
    t->nchunks = t->rows / t->b;
    t->steps_per_epoch = t->rows / t->batch;
    if ((rc = dpt__net_init(&t->eval, &t->task, DPT__TASK_EVAL_BATCH)) != 0)
        return rc;
    t->vars = t->eval.model.vars;
    if ((rc = dpt__train_frozen(c, t->vars, &t->frozen)) != 0)
        return rc;
    /* Where each variable lives: every rank computes the same placement. */
    size_t nv = t->vars->nvars;
    t->P = t->role == SRT_LOCAL ? 1 : t->num_ps;
    t->place = calloc(nv, sizeof(int));
    uint64_t *vb = calloc(nv, sizeof(uint64_t));
    if (!t->place || !vb) {
        free(vb);
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the placement");
    }
    for (size_t i = 0; i < nv; i++)
        vb[i] = (uint64_t)t->vars->vars[i].count * sizeof(float);
    rc = dpt_sr_place(vb, nv, t->P, t->place, NULL);
    free(vb);
    if (rc)
        return rc;
    t->timeout_s = DPT_CF(c, comm_timeout_s);
    t->test_interval = (uint64_t)DPT_CI(c, test_interval);
    t->replica_clip = DPT_CF(c, replica_grad_clip);
    t->gathered_at = UINT64_MAX;
    if (t->role != SRT_WORKER && (rc = dpt__srt_service(t, c)) != 0)
        return rc;
    /* Local: N worker threads; a worker rank: its one worker; the service
     * of worker ranks: none. */
    t->nw = t->role == SRT_LOCAL ? t->N : t->role == SRT_WORKER ? 1 : 0;
    t->w = calloc((size_t)t->N, sizeof *t->w);
    t->base_contrib = calloc((size_t)t->N, sizeof(uint64_t));
    t->perm = malloc(t->rows * sizeof(size_t));
    if (!t->w || !t->base_contrib || !t->perm)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate %d workers", t->N);
    for (int i = 0; i < t->nw; i++) {
        t->w[i].t = t;
        t->w[i].id = t->role == SRT_WORKER ? dpt_comm_rank(t->comm) - t->P : i;
        if ((rc = dpt__sr_worker_build(t, &t->w[i])) != 0 ||
            (rc = dpt__srt_client(t, c, &t->w[i])) != 0)
            return rc;
    }
    if (t->role == SRT_LOCAL && (rc = dpt__sr_pool_start(t)) != 0)
        return rc;
    dpt_rng_init(&t->shuffle_rng, (uint64_t)DPT_CI(c, seed), 0, 0, DPT_RNG_SHUFFLE);
    return DPT_OK;
}

/* The trainer of config c in a role (the comm of the ranks when not local). */
static int dpt__srt_new(srt_t **out, const dpt_config_t *c, const dpt_trainer_env_t *env,
                        srt_role_t role, dpt_comm_t *comm)
{
    *out = NULL;
    srt_t *t = calloc(1, sizeof *t);
    if (!t)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the trainer");
    int rc;
    t->role = role;
    t->comm = comm;
    t->straggler = env && env->straggler_delay_s > 0 ? env->straggler_worker : -1;
    t->straggler_s = env ? env->straggler_delay_s : 0.0;
    rc = dpt__task_init(&t->task, c, NULL);
    t->bags = t->task.dataset == DPT_DATASET_BAGS;
    t->rows = t->task.rows;
    t->edim = t->task.edim;
    t->nids = t->task.bags.nids;
    if (!rc)
        rc = dpt__srt_build(t, c);
    if (rc) {
        t->role = SRT_LOCAL; /* a half-built service tells its workers nothing */
        dpt__srt_destroy(t);
        return rc;
    }
    *out = t;
    return DPT_OK;
}

static int dpt__srt_create(void **out, const dpt_config_t *c, const dpt_trainer_env_t *env)
{
    *out = NULL;
    srt_role_t role = SRT_LOCAL;
    if (env && env->comm && dpt_comm_size(env->comm) > 1) {
        /* dpt_train_run hands rank 0 the ranks' communicator; the other
         * ranks run dpt__sr_mpi_worker instead of a trainer. */
        if (dpt_comm_rank(env->comm) != 0)
            return dpt_error(DPT_EINVAL,
                             "job sync_replicas under mpirun runs through dpt_train_run "
                             "(rank 0 is the service, the other ranks its workers)");
        int rc = dpt__sr_mpi_check(c, dpt_comm_size(env->comm));
        if (rc)
            return rc;
        role = SRT_SERVICE;
    }
    srt_t *t = NULL;
    int rc = dpt__srt_new(&t, c, env, role, role == SRT_SERVICE ? env->comm : NULL);
    if (!rc && t && t->srv && env)
        dpt_sr_server_set_stop_flag(t->srv, env->stop_flag);
    *out = t;
    return rc;
}

/* ---- epochs ----------------------------------------------------------------------- */

/* Rank 0 with several services: every service's state (variables, EMA,
 * optimizer slots) of the global step, gathered once per step when an
 * evaluation, a checkpoint or the weights need it (never as a part of
 * the steps). */
static int dpt__srt_gather(srt_t *t)
{
    if (t->role != SRT_SERVICE || t->P <= 1)
        return DPT_OK;
    uint64_t step = dpt_sr_global_step(t->sr);
    if (t->gathered_at == step)
        return DPT_OK;
    int rc = dpt_sr_server_gather(t->srv, step);
    if (rc)
        return rc;
    t->gathered_at = step;
    t->gathers++;
    return DPT_OK;
}

/* Test-set figures of `params` into out (loss; accuracy or regression). */
static int dpt__srt_eval_params(srt_t *t, const float *params, dpt_eval_result_t *out)
{
    return dpt__net_evaluate(&t->eval, params, out);
}

/* The figures of an epoch without a test-set evaluation. */
static void dpt__srt_no_eval(dpt_eval_result_t *out)
{
    memset(out, 0, sizeof *out);
    out->mean_return = out->mean_length = out->loss = out->accuracy = (double)NAN;
    out->rmse = out->mae = out->r2 = (double)NAN;
}

/* One epoch's figures, gathered for its result. */
typedef struct srt_epoch {
    double t0, train_time, eval_time;
    dpt_sr_stats_t s0, s1; /* the service before and after the epoch */
    uint64_t until;        /* the global step the epoch ends at */
    int newly_lost, first_failed;
    int partial;       /* stopped within the epoch (a worker silent) */
    char why[320];     /* then: the session's reason */
    double loss, hits; /* over the workers' accepted gradients */
    uint64_t used, pushes, touched;
    dpt_eval_result_t ev, eva; /* the test set: variables, EMA */
} srt_epoch_t;

/* The epoch's steps: a session of this process's service with its worker
 * threads, or with the worker ranks. */
static int dpt__srt_train_epoch(srt_t *t, uint64_t until)
{
    int rc;
    if (t->role == SRT_SERVICE)
        return dpt_sr_server_session(t->srv, until, t->shuffle_pos, t->part);
    if ((rc = dpt_sr_begin(t->sr, -1, until)) != 0)
        return rc;
    return dpt__sr_run_workers(t);
}

/* Workers that failed this epoch are lost for good (e->newly_lost; of the
 * threads, e->first_failed: the one that failed first on its own). The
 * service's counters of worker ranks become the workers' figures. */
static void dpt__srt_settle_workers(srt_t *t, int lost_before, srt_epoch_t *e)
{
    e->first_failed = -1;
    e->newly_lost = 0;
    if (t->role == SRT_SERVICE) {
        int lost_now = 0;
        for (int i = 0; i < t->N; i++) {
            dpt_sr_worker_info_t in;
            dpt_sr_server_worker(t->srv, i, &in);
            lost_now += in.lost;
            t->w[i].loss = in.figures[SRT_FIG_LOSS];
            t->w[i].correct = in.figures[SRT_FIG_HITS];
            t->w[i].rows_used = in.accepted * t->b;
            t->w[i].pushes = in.pushes;
            t->w[i].rows_touched = in.rows;
        }
        e->newly_lost = lost_now - lost_before;
        t->lost += e->newly_lost;
    }
    for (int i = 0; i < t->nw; i++) {
        srt_worker_t *w = &t->w[i];
        if (w->lost || w->rc == 0)
            continue;
        w->lost = 1;
        t->lost++;
        e->newly_lost++;
        /* The worker that failed on its own, not one woken by the
         * service's failure (DPT_ECOMM "workers were lost"). */
        if (e->first_failed < 0 || (t->w[e->first_failed].rc == DPT_ECOMM && w->rc != DPT_ECOMM))
            e->first_failed = i;
    }
}

/* The result's note: a stop within the epoch, a rank that asked to stop,
 * a worker lost this epoch, or the first epoch's placement over several
 * services. */
static void dpt__srt_note(const srt_t *t, const srt_epoch_t *e, dpt_train_result_t *r)
{
    r->note[0] = '\0';
    int asker = t->srv ? dpt_sr_server_stop_asked(t->srv) : -1;
    if (e->partial) {
        /* "stopped ... : <the session's reason, cut to fit>" */
        int len = t->part ? snprintf(r->note, sizeof r->note,
                                     "stopped within epoch %" PRIu64 " after %" PRIu64
                                     " of its %" PRIu64 " steps, their checkpoint written: ",
                                     t->epoch + 1, t->part, t->steps_per_epoch)
                          : snprintf(r->note, sizeof r->note,
                                     "stopped before the first step of epoch %" PRIu64 ": ",
                                     t->epoch + 1);
        if (len > 0 && (size_t)len < sizeof r->note) {
            size_t n = strlen(e->why), room = sizeof r->note - (size_t)len - 1;
            n = n < room ? n : room;
            memcpy(r->note + len, e->why, n);
            r->note[(size_t)len + n] = '\0';
        }
    } else if (asker >= 0)
        snprintf(r->note, sizeof r->note, "rank %d asked to stop the run", asker);
    else if (e->newly_lost && t->role == SRT_SERVICE)
        snprintf(r->note, sizeof r->note, "a worker failed, left out (%d of %d lost): %.120s",
                 t->lost, t->N, dpt_sr_server_lost_reason(t->srv));
    else if (e->newly_lost)
        snprintf(r->note, sizeof r->note,
                 "worker %d failed, left out (%d of %d lost, R = %d go on): %.60s", e->first_failed,
                 t->lost, t->N, t->R, t->w[e->first_failed].err);
    else if (t->its == 1 && t->N < t->R)
        snprintf(r->note, sizeof r->note,
                 "total_num_replicas = %d < replicas_to_aggregate = %d: each update averages %d "
                 "gradients of %d workers, so workers compute several gradients a step",
                 t->N, t->R, t->R, t->N);
    else if (t->its == 1 && t->num_ps > 1) {
        uint64_t pb[SRT_MAX_PS];
        dpt_sr_placement(t->sr, NULL, pb);
        size_t len = (size_t)snprintf(r->note, sizeof r->note, "placement (bytes per service):");
        for (int k = 0; k < t->num_ps && len < sizeof r->note; k++)
            len +=
                (size_t)snprintf(r->note + len, sizeof r->note - len, " ps%d %" PRIu64, k, pb[k]);
    }
}

/* The workers' figures of the epoch summed in worker order. */
static void dpt__srt_sum_workers(const srt_t *t, srt_epoch_t *e)
{
    e->loss = e->hits = 0.0;
    e->used = e->pushes = e->touched = 0;
    for (int i = 0; i < t->N; i++) {
        e->loss += t->w[i].loss;
        e->hits += t->w[i].correct;
        e->used += t->w[i].rows_used;
        e->pushes += t->w[i].pushes;
        e->touched += t->w[i].rows_touched;
    }
}

/* The result's counters and progress line. */
static void dpt__srt_line(const srt_t *t, const srt_epoch_t *e, dpt_train_result_t *r)
{
    const dpt_sr_stats_t *s1 = &e->s1;
    double train_loss = e->used ? e->loss / (double)e->used : (double)NAN;
    double rate = e->train_time > 0 ? (double)e->used / e->train_time : 0.0;
    if (t->task.ydim)
        snprintf(r->line, sizeof r->line,
                 "epoch %" PRIu64 "/%" PRIu64 "  step %" PRIu64 "  train loss %.4f  test loss "
                 "%.4f rmse %.4f r2 %.4f  stale %" PRIu64 "  %.0f samples/s",
                 t->epoch, t->epochs, s1->global_step, train_loss, e->ev.loss, e->ev.rmse, e->ev.r2,
                 t->base_stale + s1->stale_dropped, rate);
    else
        snprintf(r->line, sizeof r->line,
                 "epoch %" PRIu64 "/%" PRIu64 "  step %" PRIu64 "  train loss %.4f acc %.4f  "
                 "test loss %.4f acc %.4f  stale %" PRIu64 "  %.0f samples/s",
                 t->epoch, t->epochs, s1->global_step, train_loss,
                 e->used ? e->hits / (double)e->used : (double)NAN, e->ev.loss, e->ev.accuracy,
                 t->base_stale + s1->stale_dropped, rate);
}

/* The bags task's figures of sparse rows (where the table is kept). */
static void dpt__srt_sparse_metrics(const srt_epoch_t *e, uint64_t steps, dpt_train_result_t *r)
{
    const dpt_sr_stats_t *s0 = &e->s0, *s1 = &e->s1;
    dpt_train_result_add(r, "info/sync_replicas/rows_touched_per_push",
                         e->pushes ? (double)e->touched / (double)e->pushes : 0.0);
    dpt_train_result_add(
        r, "info/sync_replicas/rows_touched_per_step",
        steps ? (double)(s1->sparse_rows_applied - s0->sparse_rows_applied) / (double)steps : 0.0);
    dpt_train_result_add(
        r, "info/sync_replicas/sparse_rows_pushed_per_step",
        steps ? (double)(s1->sparse_rows_pushed - s0->sparse_rows_pushed) / (double)steps : 0.0);
    dpt_train_result_add(
        r, "info/sync_replicas/sparse_bytes_per_step",
        steps ? (double)(s1->sparse_bytes_pushed - s0->sparse_bytes_pushed) / (double)steps : 0.0);
}

/* The result's metrics, in the order the run writes them. */
static void dpt__srt_metrics(const srt_t *t, const srt_epoch_t *e, dpt_train_result_t *r)
{
    const dpt_sr_stats_t *s0 = &e->s0, *s1 = &e->s1;
    uint64_t steps = s1->global_step - s0->global_step;
    uint64_t tokens = s1->tokens_taken - s0->tokens_taken;
    double train_loss = e->used ? e->loss / (double)e->used : (double)NAN;
    double train_acc = e->used ? e->hits / (double)e->used : (double)NAN;
    int ydim = t->task.ydim > 0;
    dpt__task_result_begin(r, t->epoch, t->epochs, t->samples, s1->global_step);
    dpt_train_result_add(r, "global_step", (double)s1->global_step);
    dpt__task_result_scores(r, &t->task, train_loss, train_acc, &e->ev);
    if (t->ema_decay > 0.0f) {
        dpt_train_result_add(r, "test_loss_ema", e->eva.loss);
        dpt_train_result_add(r, ydim ? "test_r2_ema" : "test_accuracy_ema",
                             ydim ? e->eva.r2 : e->eva.accuracy);
    }
    dpt_train_result_add(r, "stale_gradients_dropped", (double)(t->base_stale + s1->stale_dropped));
    dpt_train_result_add(r, "workers_lost", (double)t->lost);
    dpt_train_result_add(r, "token_wait_ms",
                         tokens ? (s1->token_wait_s - s0->token_wait_s) * 1e3 / (double)tokens
                                : 0.0);
    dpt_train_result_add(r, "bytes_pushed_per_step",
                         steps ? (double)(s1->bytes_pushed - s0->bytes_pushed) / (double)steps
                               : 0.0);
    dpt_train_result_add(r, "step_time_ms", steps ? e->train_time * 1e3 / (double)steps : 0.0);
    if (t->bags && (t->role == SRT_LOCAL || dpt__sr_has_table(t, 0)))
        dpt__srt_sparse_metrics(e, steps, r);
    dpt_train_result_add(r, "info/sync_replicas/grad_norm", s1->last_grad_norm);
    for (int i = 0; i < t->N; i++)
        dpt_train_result_add(r, dpt__srt_worker_metric[i],
                             (double)(t->base_contrib[i] + dpt_sr_worker_contributed(t->sr, i)));
    uint64_t pb[SRT_MAX_PS];
    dpt_sr_placement(t->sr, NULL, pb);
    for (int k = 0; k < t->num_ps; k++)
        dpt_train_result_add(r, dpt__srt_ps_metric[k], (double)pb[k]);
    if (t->num_ps > 1) /* rank 0 under mpirun: the model gathered from the services */
        dpt_train_result_add(r, "info/sync_replicas/model_gathers", (double)t->gathers);
    dpt__task_result_end(r, e->used, e->t0, e->train_time, e->eval_time);
}

/* After a session: the epoch is done, stopped within (rank 0 under
 * mpirun with one service: the state of the step reached is the
 * checkpoint's, t->part its steps), or failed. */
static int dpt__srt_settle_epoch(srt_t *t, int rc, srt_epoch_t *e)
{
    if (rc == DPT_ECLOSED && t->role == SRT_SERVICE) {
        if (t->P > 1)
            return dpt_error(rc,
                             "%s; the model is split over num_ps = %d services, whose steps may "
                             "differ, so no checkpoint is written (the last one stands)",
                             dpt_last_error(), t->P);
        snprintf(e->why, sizeof e->why, "%s", dpt_last_error());
        e->partial = 1;
        rc = DPT_OK;
    }
    if (rc)
        return rc;
    dpt_sr_get_stats(t->sr, &e->s1);
    if (e->partial) {
        t->part = e->s1.global_step - (e->until - t->steps_per_epoch);
        dpt_rng_seek(&t->shuffle_rng, t->shuffle_pos); /* the epoch is not over */
        return DPT_OK;
    }
    t->part = 0;
    return DPT_OK;
}

/* One epoch: 1. the epoch's order, 2. its steps, 3. the workers lost,
 * 4. the epoch stands when the service made every step (or stops within
 * it), 5. the test set, 6. the result. */
static int dpt__srt_iterate(void *self, dpt_train_result_t *r)
{
    srt_t *t = self;
    if (t->epoch >= t->epochs)
        return dpt_error(DPT_ESTATE, "sync_replicas: all %" PRIu64 " epochs are done", t->epochs);
    srt_epoch_t e;
    memset(&e, 0, sizeof e);
    e.t0 = dpt_now();
    /* Worker ranks rebuild the epoch's order from this position. */
    t->shuffle_pos = dpt_rng_tell(&t->shuffle_rng);
    dpt__sr_perm(t, t->shuffle_pos);
    dpt_sr_get_stats(t->sr, &e.s0);
    e.until = e.s0.global_step - t->part + t->steps_per_epoch;
    int rc, lost_before = 0;
    for (int i = 0; i < t->N && t->srv; i++) {
        dpt_sr_worker_info_t in;
        dpt_sr_server_worker(t->srv, i, &in);
        lost_before += in.lost;
    }
    if ((rc = dpt__srt_settle_epoch(t, dpt__srt_train_epoch(t, e.until), &e)) != 0)
        return rc;
    e.train_time = dpt_now() - e.t0;
    dpt__srt_settle_workers(t, lost_before, &e);
    r->stop_requested = t->srv && dpt_sr_server_stop_asked(t->srv) >= 0;
    if (!e.partial && e.s1.global_step < e.until) {
        if (e.first_failed >= 0)
            return dpt_error(t->w[e.first_failed].rc, "sync_replicas: worker %d failed: %s",
                             e.first_failed, t->w[e.first_failed].err);
        return dpt_error(DPT_ESTATE,
                         "sync_replicas: the epoch ended at global step %" PRIu64
                         " before step %" PRIu64,
                         e.s1.global_step, e.until);
    }
    t->its++;
    dpt__srt_note(t, &e, r);
    dpt__srt_sum_workers(t, &e);
    t->samples += e.used;
    t->epoch += !e.partial;
    double te = dpt_now();
    dpt__srt_no_eval(&e.ev);
    dpt__srt_no_eval(&e.eva);
    int test = !e.partial &&
               (t->epoch == t->epochs || (t->test_interval && t->epoch % t->test_interval == 0));
    if (test && (rc = dpt__srt_gather(t)) != 0)
        return rc;
    if (test && (rc = dpt__srt_eval_params(t, dpt_sr_params(t->sr), &e.ev)) != 0)
        return rc;
    if (test && t->ema_decay > 0.0f &&
        (rc = dpt__srt_eval_params(t, dpt_sr_ema(t->sr), &e.eva)) != 0)
        return rc;
    e.eval_time = dpt_now() - te;
    dpt__srt_line(t, &e, r);
    dpt__srt_metrics(t, &e, r);
    return DPT_OK;
}

/* ---- checkpoints ------------------------------------------------------------------ */

static int dpt__srt_checkpoint(void *self, dpt_safetensors_writer_t *w)
{
    srt_t *t = self;
    if (!w)
        return DPT_OK;
    int rc = dpt__srt_gather(t);
    if (!rc)
        rc = dpt__optim_ckpt_save(w, t->vars, dpt_sr_params(t->sr), dpt_sr_optimizer(t->sr));
    if (!rc && t->ema_decay > 0.0f)
        rc = dpt_safetensors_add_arena(w, "ema.", t->vars, dpt_sr_ema(t->sr), t->vars->total);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "global_step", dpt_sr_global_step(t->sr));
    if (!rc)
        rc = dpt__task_save_pos(w, &t->shuffle_rng, t->samples);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "workers_lost", (uint64_t)t->lost);
    if (!rc && t->part) /* a stop within the epoch: its steps done */
        rc = dpt_safetensors_set_meta_u64(w, "epoch_steps_done", t->part);
    dpt_sr_stats_t st;
    dpt_sr_get_stats(t->sr, &st);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "stale_gradients_dropped",
                                          t->base_stale + st.stale_dropped);
    /* Fresh gradients per worker, "n0,n1,...": the text is the writer's
     * copy (set_meta copies). */
    size_t len = 0;
    for (int i = 0; i < t->N && len < sizeof t->contrib_text; i++)
        len += (size_t)snprintf(t->contrib_text + len, sizeof t->contrib_text - len, "%s%" PRIu64,
                                i ? "," : "",
                                t->base_contrib[i] + dpt_sr_worker_contributed(t->sr, i));
    if (!rc)
        rc = dpt_safetensors_set_meta(w, "batches_contributed", t->contrib_text);
    return rc;
}

static int dpt__srt_restore(void *self, const dpt_safetensors_t *st)
{
    srt_t *t = self;
    dpt_optim_t *opt = dpt_sr_optimizer(t->sr);
    uint64_t pos, samples, step, epoch;
    int rc;
    if ((rc = dpt__task_read_pos(st, t->epochs, &pos, &samples, &epoch)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "global_step", &step)) != 0)
        return rc;
    uint64_t stale = 0, lost = 0, part = 0;
    uint64_t contrib[SRT_MAX_WORKERS] = {0};
    if (dpt_safetensors_meta(st, "epoch_steps_done") &&
        (rc = dpt_safetensors_meta_u64(st, "epoch_steps_done", &part)) != 0)
        return rc;
    if (part >= t->steps_per_epoch || (part && epoch >= t->epochs))
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: epoch_steps_done = %" PRIu64 " in an epoch of %" PRIu64
                         " steps at epoch %" PRIu64 " of %" PRIu64,
                         dpt_safetensors_path(st), part, t->steps_per_epoch, epoch, t->epochs);
    const char *text = dpt_safetensors_meta(st, "batches_contributed");
    if ((rc = dpt_safetensors_meta_u64(st, "stale_gradients_dropped", &stale)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "workers_lost", &lost)) != 0)
        return rc;
    for (int i = 0; i < t->N; i++) {
        char *end = NULL;
        contrib[i] = text ? strtoull(text, &end, 10) : 0;
        if (!text || end == text || (*end != ',' && *end != '\0') ||
            (*end == '\0' && i != t->N - 1))
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: batches_contributed does not list %d workers",
                             dpt_safetensors_path(st), t->N);
        text = *end ? end + 1 : end;
    }
    /* Everything checked before anything changes, then the tensors go
     * straight into the service: no copy of the model (an embedding table
     * can be most of the memory) beside the checkpoint and the service. */
    if ((rc = dpt__optim_ckpt_check(st, t->vars, opt)) != 0 ||
        (t->ema_decay > 0.0f &&
         (rc = dpt_safetensors_load_arena(st, "ema.", t->vars, NULL, 0)) != 0) ||
        (rc = dpt__optim_ckpt_restore(st, t->vars, dpt_sr_params(t->sr), opt)) != 0 ||
        (t->ema_decay > 0.0f && (rc = dpt_safetensors_load_arena(
                                     st, "ema.", t->vars, dpt_sr_ema(t->sr), t->vars->total)) != 0))
        return rc;
    dpt_sr_set_global_step(t->sr, step);
    /* Counted anew by this service from here. */
    dpt_sr_stats_t now;
    dpt_sr_get_stats(t->sr, &now);
    t->base_stale = stale - now.stale_dropped;
    for (int i = 0; i < t->N; i++)
        t->base_contrib[i] = contrib[i] - dpt_sr_worker_contributed(t->sr, i);
    dpt_rng_seek(&t->shuffle_rng, pos);
    t->samples = samples;
    t->epoch = epoch;
    t->part = part;
    /* Lost workers are history: this process starts all of its threads. */
    t->lost = (int)lost;
    if (t->role != SRT_SERVICE || t->P <= 1)
        return DPT_OK;
    t->gathered_at = step; /* rank 0 holds every service's state */
    return dpt_sr_server_scatter(t->srv);
}

static const dpt_vartable_t *dpt__srt_vars(void *self)
{
    srt_t *t = self;
    return t->vars;
}

static int dpt__srt_get_weights(void *self, float *out, size_t count)
{
    srt_t *t = self;
    if (count != t->vars->total)
        return dpt_error(DPT_EINVAL, "sync_replicas: weights of %zu floats, the model has %zu",
                         count, t->vars->total);
    int rc = dpt__srt_gather(t);
    if (!rc)
        memcpy(out, dpt_sr_params(t->sr), count * sizeof(float));
    return rc;
}

static int dpt__srt_evaluate(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    (void)episodes, (void)seed; /* the test set is fixed */
    srt_t *t = self;
    int rc = dpt__srt_gather(t);
    return rc ? rc
              : dpt__srt_eval_params(t, t->eval_ema ? dpt_sr_ema(t->sr) : dpt_sr_params(t->sr),
                                     out);
}

static int dpt__srt_describe(void *self, dpt_safetensors_writer_t *w)
{
    srt_t *t = self;
    char ema[96];
    snprintf(ema, sizeof ema, "%s", "none");
    if (t->ema_decay > 0.0f)
        snprintf(ema, sizeof ema, "decay %g: tensors ema.<variable>, updated after each step",
                 (double)t->ema_decay);
    int rc;
    if ((rc = dpt__task_describe(&t->task, w)) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "ema", ema)) != 0 ||
        (rc = dpt_safetensors_set_meta_u64(w, "replicas_to_aggregate", (uint64_t)t->R)) != 0)
        return rc;
    return dpt_safetensors_set_meta_u64(w, "total_num_replicas", (uint64_t)t->N);
}

static int dpt__srt_eval_checkpoint(const dpt_config_t *c, const dpt_safetensors_t *st,
                                    size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    (void)episodes, (void)seed; /* the test set is fixed (bags: drawn from the run's seed) */
    return dpt__task_eval_checkpoint(c, st, DPT_CI(c, eval_ema) ? "ema." : "params.", out);
}

/* ---- a worker rank (mpirun) ------------------------------------------------------- */

int dpt__sr_mpi_worker(const dpt_config_t *c, dpt_comm_t *comm,
                       const volatile sig_atomic_t *stop_flag)
{
    /* Rank 0 stops the run and tells every worker; a signal here asks it
     * to. */
    srt_t *t = NULL;
    int shard = dpt_comm_rank(comm) < (int)DPT_CI(c, num_ps);
    int rc = dpt__srt_new(&t, c, NULL, shard ? SRT_SHARD : SRT_WORKER, comm);
    if (rc || !t)
        return rc;
    t->stop_flag = stop_flag;
    if (shard)
        dpt_sr_server_set_stop_flag(t->srv, stop_flag);
    rc = shard ? dpt_sr_server_serve(t->srv) : dpt__sr_work(&t->w[0]);
    dpt__srt_destroy(t);
    return rc;
}

static const dpt_trainer_ops_t dpt__srt_ops = {
    .job = DPT_JOB_SYNC_REPLICAS,
    .create = dpt__srt_create,
    .destroy = dpt__srt_destroy,
    .iterate = dpt__srt_iterate,
    .checkpoint = dpt__srt_checkpoint,
    .restore = dpt__srt_restore,
    .vars = dpt__srt_vars,
    .get_weights = dpt__srt_get_weights,
    .evaluate = dpt__srt_evaluate,
    .describe = dpt__srt_describe,
    .eval_checkpoint = dpt__srt_eval_checkpoint,
};

/* ---- the job ---------------------------------------------------------------------- */

static int dpt__srt_check(const dpt_config_t *c)
{
    int64_t b = DPT_CI(c, batch_size), d = DPT_CI(c, replicas_to_aggregate);
    int64_t n = DPT_CI(c, total_num_replicas), k = DPT_CI(c, init_tokens);
    if (b % d)
        return dpt_error(DPT_EINVAL,
                         "batch_size %lld must be divisible by replicas_to_aggregate %lld",
                         (long long)b, (long long)d);
    if (k >= 0 && k < d - n)
        return dpt_error(DPT_EINVAL,
                         "init_tokens = %lld are too few for the first step: "
                         "total_num_replicas = %lld workers must push replicas_to_aggregate = "
                         "%lld gradients, which needs at least %lld",
                         (long long)k, (long long)n, (long long)d, (long long)(d - n));
    return DPT_OK;
}

/* total_num_replicas, when not given (0), is replicas_to_aggregate
 * (TensorFlow's default); the bags task is a regression: its loss, when not
 * given, is mse. */
static int dpt__srt_fill(dpt_config_t *c)
{
    if (DPT_CI(c, total_num_replicas) == 0) {
        char n[24];
        snprintf(n, sizeof n, "%lld", (long long)DPT_CI(c, replicas_to_aggregate));
        int rc = dpt__config_assign(c, DPT_CFG_total_num_replicas, n, "default");
        if (rc)
            return rc;
    }
    if (DPT_CI(c, dataset) != DPT_DATASET_BAGS || dpt_config_given(c, DPT_CFG_loss))
        return DPT_OK;
    return dpt__config_assign(c, DPT_CFG_loss, "mse", "default");
}

static size_t dpt__srt_threads(const dpt_config_t *c)
{
    return (size_t)DPT_CI(c, total_num_replicas);
}

/* Rank 0 is the first service and runs the loop alone; the other ranks are
 * the other services and the workers until rank 0 says the run is over. */
/* Rank 0, after the loop: the other ranks' part ends (each worker's and
 * service's goodbye within comm_timeout_s; the error names those that did
 * not answer). */
static int dpt__srt_end(void *self)
{
    srt_t *t = self;
    if (t->role != SRT_SERVICE || !t->srv || t->ended)
        return DPT_OK;
    t->ended = 1;
    return dpt_sr_server_stop(t->srv);
}

static int dpt__srt_plan(const dpt_config_t *c, int world, dpt__mpi_plan_t *p)
{
    int rc = dpt__sr_mpi_check(c, world);
    if (rc)
        return rc;
    p->mpi_threads = 1;
    p->role = dpt__sr_mpi_worker;
    return DPT_OK;
}

const dpt__job_t dpt__sync_replicas_job = {
    .id = DPT_JOB_SYNC_REPLICAS,
    .ops = &dpt__srt_ops,
    .keys = DPT_JOB_SYNC_REPLICAS,
    .check = dpt__srt_check,
    .fill = dpt__srt_fill,
    .threads = dpt__srt_threads,
    .plan = dpt__srt_plan,
    .end = dpt__srt_end,
    .end_abandons = 1, /* a backup held back at the end must not fail a finished run */
};
