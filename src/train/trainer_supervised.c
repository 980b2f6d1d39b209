/*
 * The supervised job as a trainer (dpt/train.h): the model of a task
 * (task.h: an MLP or a model plug-in over Fashion-MNIST IDX files, CSV
 * files, or two spirals made from the seed) trained on towers, one
 * iterate() per epoch, evaluated on the test set after each epoch,
 * checkpointed and resumable bitwise.
 *
 * Every random choice has its own stream of the seed: the initial weights
 * (DPT_RNG_INIT), each epoch's order (DPT_RNG_SHUFFLE, whose position is
 * checkpointed) and the spirals (DPT_RNG_DATA). So a run resumed from a
 * checkpoint continues exactly as an uninterrupted one.
 *
 * Across P processes (dpt_trainer_env_t.comm of size P > 1, e.g. under
 * mpirun): data parallel over P ranks x D = num_devices devices. Every rank
 * reads the whole dataset and draws the same streams, so all ranks start
 * from the same weights and shuffle each epoch identically; rank r takes
 * rows [r B/P, (r+1) B/P) of every batch of B = batch_size rows, and its
 * device d rows [d B/(P D), (d+1) B/(P D)) of that share, through a
 * D-device towers engine over the communicator: the devices combine their
 * gradients in the towers mode (ps or replicated), one all-reduce per step
 * averages them over the ranks, and every rank applies the same update, so
 * the weights stay identical (checked after every epoch). The loss and
 * accuracy of an epoch are summed over the ranks; every rank evaluates the
 * test set itself (the same weights, the same numbers); the state to
 * checkpoint is the same on every rank, and rank 0 (the one with a writer)
 * writes it.
 */
#include "dpt/dataset.h"
#include "dpt/dpt.h"
#include "dpt/towers.h"
#include "optim/optim_ckpt.h"
#include "parallel/reduction.h"
#include "task.h"
#include "train_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sup {
    dpt__task_t task;           /* the data and the model's description */
    dpt__net_t net;             /* the towers' model (per-device batches) */
    dpt__net_t eval;            /* the same layout, DPT__TASK_EVAL_BATCH rows */
    const dpt_vartable_t *vars; /* the model's table */
    dpt_towers_t *towers;
    /* The current weights, copied out of the towers for evaluation and
     * checkpoints: a checkpoint's "params." tensors borrow it until the
     * writer is saved. */
    dpt_arena_t params;
    float *xs;     /* the epoch's shuffled copy of the training set [rows, dim] */
    int32_t *ys;   /* [rows] labels (classification) */
    int32_t *keys; /* [rows, 2] the rows' dropout keys: the epoch, the position in its order */
    float *yt;     /* [rows, target_dim] targets (regression) */
    size_t *perm;
    dpt_rng_t shuffle_rng;
    dpt_schedule_t sched;
    int shuffle;
    size_t batch;     /* batch_size: rows per step over all ranks and devices */
    size_t chunk;     /* reduction_order = invariant: reduction_chunk; else 0 */
    dpt_comm_t *comm; /* the ranks' communicator when there are several; else NULL */
    int rank, nranks; /* 0 and 1 in one process */
    uint64_t epochs;
    uint64_t epoch, samples, steps; /* done so far (checkpointed) */
} sup_t;

/* One epoch's rows as this rank loads them (see dpt__sup_load_epoch). */
typedef struct sup_epoch {
    size_t nbatches, batch; /* over all ranks */
    size_t dropped;         /* rows of the set no step uses */
    dpt_towers_load_info_t li;
} sup_epoch_t;

static void dpt__sup_destroy(void *self)
{
    sup_t *s = self;
    if (!s)
        return;
    dpt_towers_destroy(s->towers);
    dpt__net_deinit(&s->net);
    dpt__net_deinit(&s->eval);
    dpt_arena_deinit(&s->params);
    dpt__task_deinit(&s->task);
    free(s->xs);
    free(s->keys);
    free(s->ys);
    free(s->yt);
    free(s->perm);
    free(s);
}

/* batch_size against the ranks, the devices and the training rows. */
static int dpt__sup_check_layout(const sup_t *s, size_t batch, int devices)
{
    size_t rows = s->task.rows, ranks = (size_t)s->nranks;
    const char *name = dpt__task_dataset_name(s->task.dataset);
    if (s->chunk) {
        /* (batch_size is a multiple of reduction_chunk: dpt__sup_check) */
        if (batch / s->chunk < ranks * (size_t)devices)
            return dpt_error(DPT_EINVAL,
                             "batch_size %zu holds %zu chunks of reduction_chunk %zu rows, fewer "
                             "than the %zu ranks x num_devices %d: every device needs a chunk",
                             batch, batch / s->chunk, s->chunk, ranks, devices);
        if (rows < batch)
            return dpt_error(DPT_EINVAL,
                             "the %s training set has %zu rows, fewer than batch_size %zu "
                             "(reduction_order = invariant keeps every batch whole)",
                             name, rows, batch);
        return DPT_OK;
    }
    if (ranks > 1) {
        if (batch % (ranks * (size_t)devices))
            return dpt_error(DPT_EINVAL,
                             "batch_size %zu must be divisible by the %zu ranks x num_devices "
                             "%d (each device trains on batch_size / (ranks x num_devices) rows "
                             "of every batch)",
                             batch, ranks, devices);
        if (rows < ranks * (size_t)devices)
            return dpt_error(DPT_EINVAL,
                             "the %s training set has %zu rows, fewer than the "
                             "%zu ranks x num_devices %d",
                             name, rows, ranks, devices);
    }
    if (batch % (size_t)devices)
        return dpt_error(DPT_EINVAL, "batch_size %zu must be divisible by num_devices %d", batch,
                         devices);
    if (rows < (size_t)devices)
        return dpt_error(DPT_EINVAL,
                         "the %s training set has %zu rows, fewer than "
                         "num_devices %d",
                         name, rows, devices);
    return DPT_OK;
}

/* The towers' settings of config c for per-device batches of pdb rows. */
static int dpt__sup_towers_config(sup_t *s, const dpt_config_t *c, size_t pdb,
                                  dpt_towers_config_t *tc)
{
    *tc = dpt_towers_defaults();
    int rc;
    if ((rc = dpt_towers_mode_parse(DPT_CS(c, towers_mode), &tc->mode)) != 0 ||
        (rc = dpt__task_optim(c, &tc->optim, &s->sched)) != 0)
        return rc;
    tc->num_devices = (int)DPT_CI(c, num_devices);
    tc->max_per_device_batch_size = pdb;
    tc->max_load_rows = s->task.rows;
    tc->grad_clip = DPT_CF(c, grad_clip);
    tc->comm_timeout_s = DPT_CF(c, comm_timeout_s);
    /* Enum keys' values are the enums' values (their lists make the choices). */
    tc->comm_algorithm = (dpt_comm_algorithm_t)DPT_CI(c, allreduce_algorithm);
    tc->reduce_sum = (dpt_reduce_op_t)DPT_CI(c, reduce_op) == DPT_REDUCE_SUM;
    tc->async_scale = (float)DPT_CF(c, async_scale);
    tc->comm = s->comm;
    tc->bucket_bytes = (size_t)DPT_CI(c, bucket_bytes);
    tc->chunk_rows = s->chunk;
    tc->global_batch = s->chunk ? s->batch : 0;
    return DPT_OK;
}

/* The epoch buffers: a shuffled copy of the training set. */
static int dpt__sup_epoch_buffers(sup_t *s)
{
    size_t rows = s->task.rows, dim = s->task.in_dim, ydim = s->task.ydim;
    if (dim && rows > ((size_t)-1) / sizeof(float) / dim)
        return dpt_error(DPT_EOVERFLOW,
                         "the %s training set: %zu rows of %zu features "
                         "overflow the size",
                         dpt__task_dataset_name(s->task.dataset), rows, dim);
    if (ydim && rows > ((size_t)-1) / sizeof(float) / ydim)
        return dpt_error(DPT_EOVERFLOW, "the training set: %zu rows of %zu targets overflow", rows,
                         ydim);
    s->xs = malloc(rows * dim * sizeof(float));
    s->ys = ydim ? NULL : malloc(rows * sizeof(int32_t));
    s->yt = ydim ? malloc(rows * ydim * sizeof(float)) : NULL;
    s->perm = malloc(rows * sizeof(size_t));
    s->keys = malloc(rows * 2 * sizeof(int32_t));
    if (!s->xs || !(s->ys || s->yt) || !s->perm || !s->keys)
        return dpt_error(DPT_ENOMEM, "supervised: cannot allocate the epoch buffers (%zu rows)",
                         rows);
    return DPT_OK;
}

/* The model, the towers and the epoch buffers (the task is built). */
static int dpt__sup_build(sup_t *s, const dpt_config_t *c)
{
    int rc;
    int devices = (int)DPT_CI(c, num_devices);
    size_t batch = (size_t)DPT_CI(c, batch_size), rows = s->task.rows;
    if ((rc = dpt__sup_check_layout(s, batch, devices)) != 0)
        return rc;
    s->batch = batch;
    /* Invariant: the model is called on one chunk at a time. */
    size_t pdb = s->chunk ? s->chunk : batch / (size_t)devices / (size_t)s->nranks;
    dpt_towers_config_t tc;
    if ((rc = dpt__sup_towers_config(s, c, pdb, &tc)) != 0 ||
        (rc = dpt__net_init(&s->net, &s->task, pdb)) != 0 ||
        (rc = dpt__net_init(&s->eval, &s->task, DPT__TASK_EVAL_BATCH)) != 0)
        return rc;
    s->vars = s->net.model.vars;
    int32_t nokeys[2] = {0, 0};
    dpt_batch_t lay = dpt__task_batch(0, s->task.in_dim, NULL, NULL, NULL, s->task.ydim, nokeys);
    unsigned char *frozen;
    if ((rc = dpt__train_frozen(c, s->vars, &frozen)) != 0)
        return rc;
    tc.no_grad = frozen;
    tc.running = s->net.running;
    rc = dpt_towers_create(&s->towers, &s->net.model, &lay, &tc);
    free(frozen);
    if (rc)
        return rc;
    size_t n = s->vars->total;
    if ((rc = dpt_arena_init(&s->params, n)) != 0)
        return rc;
    uint64_t seed = (uint64_t)DPT_CI(c, seed);
    dpt_rng_t init;
    dpt_rng_init(&init, seed, 0, 0, DPT_RNG_INIT);
    dpt__net_init_params(&s->net, s->params.data, &init);
    dpt_rng_init(&s->shuffle_rng, seed, 0, 0, DPT_RNG_SHUFFLE);
    if ((rc = dpt__sup_epoch_buffers(s)) != 0)
        return rc;
    /* Steps per epoch as the towers take them: rows / batch_size, or one
     * smaller step when the training set is smaller than a batch. */
    uint64_t steps_per_epoch = rows >= batch ? rows / batch : 1;
    s->epochs = (uint64_t)DPT_CI(c, epochs);
    s->sched.total_steps = s->epochs * steps_per_epoch;
    s->shuffle = (int)DPT_CI(c, shuffle);
    return dpt_towers_set_weights(s->towers, s->params.data, n);
}

static int dpt__sup_create(void **out, const dpt_config_t *c, const dpt_trainer_env_t *env)
{
    *out = NULL;
    dpt_comm_t *comm = env ? env->comm : NULL;
    sup_t *s = calloc(1, sizeof *s);
    if (!s)
        return dpt_error(DPT_ENOMEM, "supervised: cannot allocate the trainer");
    s->nranks = 1;
    /* A communicator of one participant changes nothing: the one-process
     * path (and its numbers) is kept. */
    if (comm && dpt_comm_size(comm) > 1) {
        s->comm = comm;
        s->rank = dpt_comm_rank(comm);
        s->nranks = dpt_comm_size(comm);
    }
    if ((dpt_reduction_order_t)DPT_CI(c, reduction_order) == DPT_REDUCTION_INVARIANT)
        s->chunk = (size_t)DPT_CI(c, reduction_chunk);
    int rc = dpt__task_init(&s->task, c, NULL);
    if (!rc)
        rc = dpt__sup_build(s, c);
    if (rc) {
        dpt__sup_destroy(s);
        return rc;
    }
    *out = s;
    return DPT_OK;
}

/* The test-set figures of the towers' current weights (copied into
 * s->params on the way). */
static int dpt__sup_eval(sup_t *s, dpt_eval_result_t *out)
{
    int rc = dpt_towers_get_weights(s->towers, s->params.data, s->params.count);
    if (rc)
        return rc;
    return dpt__net_evaluate(&s->eval, s->params.data, out);
}

/* The epoch's order, and this rank's rows of it loaded into the towers.
 * One process: the whole shuffled set, split by the towers. Several ranks:
 * the batches are those of one process with one device: batch_size rows,
 * or one smaller batch (a multiple of ranks x devices) when the set is
 * smaller. This rank takes its share of every batch, and its device d the
 * d-th part of that share: the towers give device d the d-th 1/D of the
 * loaded rows, so those hold device d's part of every batch, batch after
 * batch, and step k uses batch k everywhere. */
static int dpt__sup_load_epoch(sup_t *s, sup_epoch_t *e)
{
    const dpt_dataset_t *d = &s->task.train;
    size_t rows = d->rows, dim = d->dim, ydim = d->target_dim;
    /* Each epoch's order depends only on the stream position, so a resumed
     * run shuffles exactly as an uninterrupted one. */
    dpt__task_order(s->perm, rows, &s->shuffle_rng, s->shuffle);
    size_t share = 0, pdb = 0, take = rows, row0 = 0;
    e->nbatches = rows;
    e->batch = rows;
    if (s->chunk) {
        /* Invariant: batch k is positions [k B, (k + 1) B) of the order
         * whatever the counts; this rank loads its rows of each, batch
         * after batch, and the towers give each device its chunks. */
        int rc = dpt_towers_share(s->towers, &row0, &share);
        if (rc)
            return rc;
        e->batch = s->batch;
        e->nbatches = rows / s->batch;
        take = e->nbatches * share;
    } else if (s->nranks > 1) {
        size_t P = (size_t)s->nranks, D = (size_t)dpt_towers_get_config(s->towers)->num_devices;
        e->batch = rows >= s->batch ? s->batch : rows - rows % (P * D);
        e->nbatches = rows >= s->batch ? rows / s->batch : 1;
        share = e->batch / P;
        pdb = share / D;
        take = e->nbatches * share;
    }
    for (size_t i = 0; i < take; i++) {
        size_t pos = i; /* the row's position in the epoch's order */
        if (s->chunk) {
            pos = (i / share) * e->batch + row0 + i % share;
        } else if (s->nranks > 1) {
            size_t dev = i / (e->nbatches * pdb), k = i % (e->nbatches * pdb);
            pos = (k / pdb) * e->batch + (size_t)s->rank * share + dev * pdb + k % pdb;
        }
        size_t src = s->perm[pos];
        s->keys[2 * i] = (int32_t)(uint32_t)s->epoch;
        s->keys[2 * i + 1] = (int32_t)(uint32_t)pos;
        memcpy(s->xs + i * dim, d->x + src * dim, dim * sizeof(float));
        if (s->yt)
            memcpy(s->yt + i * ydim, d->targets + src * ydim, ydim * sizeof(float));
        else
            s->ys[i] = d->labels[src];
    }
    dpt_batch_t b = dpt__task_batch(take, dim, s->xs, s->ys, s->yt, ydim, s->keys);
    if (s->chunk) /* (its minibatch is batch_size: no per-device size to give) */
        pdb = 0;
    int rc = dpt_towers_load_ex(s->towers, 0, &b, pdb, &e->li);
    if (rc)
        return rc;
    e->dropped = s->nranks > 1 || s->chunk ? rows - e->nbatches * e->batch : e->li.rows_dropped;
    return DPT_OK;
}

/* The epoch's steps; *loss, *hits and *used sum the figures of every
 * rank's rows. */
static int dpt__sup_train_steps(sup_t *s, const sup_epoch_t *e, double *loss, double *hits,
                                size_t *used)
{
    int rc;
    *loss = *hits = 0.0;
    *used = 0;
    for (size_t k = 0; k < e->li.steps; k++) {
        dpt_towers_stats_t st;
        float lr = dpt_schedule_lr(&s->sched, s->steps);
        if ((rc = dpt_towers_optimize(s->towers, 0, k * e->li.per_device_batch, lr, &st)) != 0)
            return rc;
        s->steps++;
        *loss += st.loss * (double)st.rows;
        *hits += st.correct;
        *used += st.rows;
    }
    if (!s->comm)
        return DPT_OK;
    /* The epoch's figures over every rank's rows (the same on all). */
    float sums[2] = {(float)*loss, (float)*hits};
    if ((rc = dpt_comm_allreduce(s->comm, sums, 2, DPT_REDUCE_SUM)) != 0)
        return rc;
    *loss = (double)sums[0];
    *hits = (double)sums[1];
    *used = e->nbatches * e->batch;
    /* Every rank's weights and optimizer state are the same bits (a
     * collective: every rank checks after the same epoch). */
    return dpt_towers_check_replicas(s->towers);
}

/* One epoch. A failure inside it (a refused step) leaves the trainer part
 * way through the epoch; a checkpoint restores a consistent state. */
static int dpt__sup_iterate(void *self, dpt_train_result_t *r)
{
    sup_t *s = self;
    if (s->epoch >= s->epochs)
        return dpt_error(DPT_ESTATE, "supervised: all %" PRIu64 " epochs are done", s->epochs);
    double t0 = dpt_now();
    sup_epoch_t e;
    double loss, hits;
    size_t used;
    int rc = dpt__sup_load_epoch(s, &e);
    if (rc)
        return rc;
    double tl = dpt_now();
    if ((rc = dpt__sup_train_steps(s, &e, &loss, &hits, &used)) != 0)
        return rc;
    double train_time = dpt_now() - tl;
    s->samples += used;
    s->epoch++;
    double te = dpt_now();
    dpt_eval_result_t test;
    if ((rc = dpt__sup_eval(s, &test)) != 0)
        return rc;
    double eval_time = dpt_now() - te;
    double train_loss = used ? loss / (double)used : (double)NAN;
    double train_acc = used ? hits / (double)used : (double)NAN;
    double rate = train_time > 0 ? (double)used / train_time : 0.0;
    if (s->task.ydim)
        snprintf(r->line, sizeof r->line,
                 "epoch %" PRIu64 "/%" PRIu64 "  train loss %.4f  test loss %.4f rmse %.4f "
                 "mae %.4f r2 %.4f  %.0f samples/s",
                 s->epoch, s->epochs, train_loss, test.loss, test.rmse, test.mae, test.r2, rate);
    else
        snprintf(r->line, sizeof r->line,
                 "epoch %" PRIu64 "/%" PRIu64 "  train loss %.4f acc %.4f  test loss %.4f acc "
                 "%.4f  %.0f samples/s",
                 s->epoch, s->epochs, train_loss, train_acc, test.loss, test.accuracy, rate);
    dpt__task_result_begin(r, s->epoch, s->epochs, s->samples, s->steps);
    dpt__task_result_scores(r, &s->task, train_loss, train_acc, &test);
    dpt_train_result_add(r, "lr", (double)dpt_schedule_lr(&s->sched, s->steps));
    dpt_train_result_add(r, "rows_dropped", (double)e.dropped);
    dpt__task_result_end(r, used, t0, train_time, eval_time);
    return DPT_OK;
}

static int dpt__sup_checkpoint(void *self, dpt_safetensors_writer_t *w)
{
    sup_t *s = self;
    if (!w)
        return DPT_OK;
    int rc = dpt_towers_get_weights(s->towers, s->params.data, s->params.count);
    if (!rc)
        rc = dpt__optim_ckpt_save(w, s->vars, s->params.data, dpt_towers_optimizer(s->towers));
    if (!rc)
        rc = dpt__task_save_pos(w, &s->shuffle_rng, s->samples);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "steps_total", s->steps);
    /* The chunk size of an invariant run (0: the fast order): a resume
     * with other device or rank counts continues bitwise with it. */
    if (!rc)
        rc = dpt__reduction_save(w, s->chunk);
    return rc;
}

static int dpt__sup_restore(void *self, const dpt_safetensors_t *st)
{
    sup_t *s = self;
    dpt_optim_t *opt = dpt_towers_optimizer(s->towers);
    uint64_t pos, samples, steps, epoch;
    int rc;
    if ((rc = dpt__task_read_pos(st, s->epochs, &pos, &samples, &epoch)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "steps_total", &steps)) != 0)
        return rc;
    if ((rc = dpt__reduction_check(st, s->chunk)) != 0)
        return rc;
    /* Read every tensor into scratch before changing anything, so a
     * checkpoint that does not fit leaves the trainer as it was. */
    dpt__optim_ckpt_t ck;
    if ((rc = dpt__optim_ckpt_load(st, s->vars, opt, &ck)) != 0)
        return rc;
    /* From here nothing can fail on a valid trainer: the sizes and the
     * optimizer kind are the towers' own. */
    rc = dpt_towers_set_weights(s->towers, ck.data, ck.count);
    if (!rc) {
        dpt__optim_ckpt_apply(&ck, opt);
        rc = dpt_towers_set_optimizer_state(s->towers, opt);
    }
    dpt__optim_ckpt_free(&ck);
    if (rc)
        return rc;
    dpt_rng_seek(&s->shuffle_rng, pos);
    s->samples = samples;
    s->steps = steps;
    s->epoch = epoch;
    return DPT_OK;
}

static const dpt_vartable_t *dpt__sup_vars(void *self)
{
    sup_t *s = self;
    return s->vars;
}

static int dpt__sup_get_weights(void *self, float *out, size_t count)
{
    sup_t *s = self;
    return dpt_towers_get_weights(s->towers, out, count);
}

static int dpt__sup_set_weights(void *self, const float *in, size_t count)
{
    sup_t *s = self;
    return dpt_towers_set_weights(s->towers, in, count);
}

static int dpt__sup_evaluate(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    (void)episodes, (void)seed; /* the test set is fixed */
    return dpt__sup_eval(self, out);
}

static int dpt__sup_describe(void *self, dpt_safetensors_writer_t *w)
{
    sup_t *s = self;
    return dpt__task_describe(&s->task, w);
}

static int dpt__sup_eval_checkpoint(const dpt_config_t *c, const dpt_safetensors_t *st,
                                    size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    (void)episodes, (void)seed; /* the test set is fixed */
    return dpt__task_eval_checkpoint(c, st, "params.", out);
}

static const dpt_trainer_ops_t dpt__sup_ops = {
    .job = DPT_JOB_SUPERVISED,
    .create = dpt__sup_create,
    .destroy = dpt__sup_destroy,
    .iterate = dpt__sup_iterate,
    .checkpoint = dpt__sup_checkpoint,
    .restore = dpt__sup_restore,
    .vars = dpt__sup_vars,
    .get_weights = dpt__sup_get_weights,
    .set_weights = dpt__sup_set_weights,
    .evaluate = dpt__sup_evaluate,
    .describe = dpt__sup_describe,
    .eval_checkpoint = dpt__sup_eval_checkpoint,
};

/* ---- the job ------------------------------------------------------------------ */

static int dpt__sup_check(const dpt_config_t *c)
{
    int64_t b = DPT_CI(c, batch_size), d = DPT_CI(c, num_devices);
    if ((dpt_reduction_order_t)DPT_CI(c, reduction_order) == DPT_REDUCTION_INVARIANT)
        return dpt__config_reduction_check(c, b, "batch_size", d, "num_devices");
    if (b % d)
        return dpt_error(DPT_EINVAL, "batch_size %lld must be divisible by num_devices %lld",
                         (long long)b, (long long)d);
    return DPT_OK;
}

static size_t dpt__sup_threads(const dpt_config_t *c)
{
    return (size_t)DPT_CI(c, num_devices);
}

static int dpt__sup_plan(const dpt_config_t *c, int world, dpt__mpi_plan_t *p)
{
    (void)world;
    if ((dpt_towers_mode_t)DPT_CI(c, towers_mode) == DPT_TOWERS_ASYNC)
        return dpt_error(DPT_EINVAL,
                         "towers_mode = async does not run under mpirun: its devices apply "
                         "their updates without waiting for each other, so the ranks' weights "
                         "would drift apart; set towers_mode = ps or replicated (the ranks "
                         "then average their gradients at every step)");
    /* The towers all-reduce gradient buckets from their communication
     * thread (one thread at a time) when bucket_bytes > 0; otherwise from
     * their device 0, the caller's thread. */
    p->mpi_threads = DPT_CI(c, bucket_bytes) > 0 ? 2 : 1;
    return DPT_OK;
}

const dpt__job_t dpt__supervised_job = {
    .id = DPT_JOB_SUPERVISED,
    .ops = &dpt__sup_ops,
    .keys = DPT_JOB_SUPERVISED,
    .check = dpt__sup_check,
    .threads = dpt__sup_threads,
    .plan = dpt__sup_plan,
};
