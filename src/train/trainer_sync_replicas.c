/*
 * The sync_replicas job as a trainer (dpt/train.h): supervised training
 * through a sync-replicas parameter service (dpt/sync_replicas.h) with
 * total_num_replicas worker threads, replicas_to_aggregate of whose
 * gradients make each update; one iterate() per epoch (the steps of one
 * pass over the training set at batch_size rows per update).
 *
 * Data: Fashion-MNIST, CSV or spirals with the supervised job's MLP, or
 * "bags": bags of bags_ids ids drawn (Zipf-like: id i with weight
 * 1 / (i + 1)^1.1) from a vocabulary of bags_vocab ids, each id i carrying a
 * hidden value u_i ~ N(0, 1) and each bag the target y = mean of its ids'
 * u_i. The model pools an embedding table [bags_vocab, embedding_dim] over
 * the bag (mean) and regresses y with an MLP of `hidden`; the table's
 * gradients are row-sparse and travel as (indices, rows).
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
#include "train_internal.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SRT_EVAL_BATCH 1000
#define SRT_MAX_WORKERS 32
#define SRT_MAX_PS 8
#define SRT_ZIPF 1.1

/* Metric names (static storage) of each worker and service. */
static const char *const srt_worker_metric[SRT_MAX_WORKERS] = {
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
static const char *const srt_ps_metric[SRT_MAX_PS] = {
    "info/sync_replicas/ps_bytes/ps0", "info/sync_replicas/ps_bytes/ps1",
    "info/sync_replicas/ps_bytes/ps2", "info/sync_replicas/ps_bytes/ps3",
    "info/sync_replicas/ps_bytes/ps4", "info/sync_replicas/ps_bytes/ps5",
    "info/sync_replicas/ps_bytes/ps6", "info/sync_replicas/ps_bytes/ps7",
};

/* Where this process's part of the job runs. */
typedef enum srt_role {
    SRT_LOCAL,   /* service and worker threads in one process */
    SRT_SERVICE, /* under mpirun, rank 0: the chief service (tokens, the run's loop and files) */
    SRT_SHARD,   /* under mpirun, ranks 1 .. num_ps - 1: the other services */
    SRT_WORKER   /* under mpirun, ranks num_ps ..: one worker each */
} srt_role_t;

/* Messages between the service (rank 0) and its worker ranks. A worker
 * asks for a step (TOKEN) and is told GO {step, chunk, shuffle position,
 * finish}; asks for the variables (FETCH {n, ids[n]}: the bags' rows it
 * needs) and gets PARAMS {dense variables packed in table order, rows
 * [n, E]}; pushes PUSH {local step, n, loss, correct, dense gradient
 * packed, ids[n], rows [n, E]}; reports its own failure (FAIL, a message)
 * and, told to finish, says BYE. Native byte order: the ranks run the same
 * build. */
#define SRT_TAG_TOKEN 101
#define SRT_TAG_GO 102
#define SRT_TAG_FETCH 103
#define SRT_TAG_PARAMS 104
#define SRT_TAG_PUSH 105
#define SRT_TAG_FAIL 106
#define SRT_TAG_BYE 107
/* rank 0 to the other services (num_ps > 1): GATHER {min step} asks for
 * the variables it keeps, with their optimizer slots and EMA, once its
 * global step reached min step (the answer: GATHERED {optimizer step, then
 * the floats}); SCATTER {global step, optimizer step, floats} sets them (a
 * resumed run); FINISH ends it. */
#define SRT_TAG_GATHER 108
#define SRT_TAG_GATHERED 109
#define SRT_TAG_SCATTER 110
#define SRT_TAG_FINISH 111
#define SRT_GO_WORDS 4

typedef struct srt srt_t;

typedef struct srt_worker {
    srt_t *t;
    int id;
    pthread_t th;
    int lost;
    dpt_mlp_t *mlp; /* MLP datasets */
    dpt_seq_t *seq; /* bags: the MLP over the pooled embedding */
    dpt_arena_t params, grads;
    float *x, *y; /* the batch: features [b, dim] or pooled embeddings [b, E]; targets */
    int32_t *labels;
    /* bags */
    int64_t *ids, *uniq;   /* [b * L] the batch's ids (local numbers), its distinct ids */
    size_t *offsets;       /* [b + 1] */
    float *rows, *dpooled; /* [b * L, E] fetched rows; [b, E] */
    float *dy;
    dpt_sparse_rows_t grad_rows;
    /* this epoch */
    double loss, correct;
    uint64_t rows_used, pushes, accepted, rows_touched;
    int rc;
    char err[384];
} srt_worker_t;

struct srt {
    int bags;
    char where[DPT_CONFIG_STR_MAX + 32];
    char layers_text[160];
    dpt_layer_spec_t layers[DPT__SUP_MAX_LAYERS];
    size_t nlayers;
    dpt_layer_kind_t act;
    dpt_loss_kind_t loss;
    dpt_dataset_t train, test; /* MLP datasets */
    size_t dim, ydim, classes, rows;
    /* bags */
    size_t vocab, edim, nids, test_rows;
    int64_t *train_ids, *test_ids; /* [rows * nids] */
    float *train_y, *test_y;
    dpt_vartable_t table; /* bags: embedding.weight, then mlp.* */
    const dpt_vartable_t *vars;
    dpt_mlp_t *eval_mlp;
    dpt_seq_t *eval_seq;
    float *eval_pooled;
    dpt_sr_t *sr;
    int N, R, num_ps, lost;
    size_t batch, b, nchunks;
    uint64_t steps_per_epoch, epochs, epoch, samples;
    size_t *perm;
    dpt_rng_t shuffle_rng;
    int shuffle;
    srt_worker_t *w; /* [nw]: N threads (local), one (a worker rank), none (the service) */
    int nw;
    srt_role_t role;
    dpt_comm_t *comm;   /* under mpirun: rank 0 and the workers */
    size_t dense_count; /* floats of the dense variables (packed, in table order) */
    int P;              /* services (num_ps); under mpirun ranks 0 .. P - 1 */
    int svc;            /* this rank's service, or -1 (a worker, or local) */
    int *place;         /* [nvars] the service of each variable */
    size_t *svc_dense;  /* [P] floats of the dense variables of each service */
    size_t *svc_all;    /* [P] floats of all the variables of each service */
    void **fmsg;        /* [N] a worker's fetch waiting for this service's step */
    size_t *fmsg_n;
    uint64_t cur_step; /* a worker: the step of the gradient under way */
    double timeout_s;
    /* The service's view of its worker ranks (SRT_SERVICE). */
    unsigned char *pending, *need_start, *rlost;
    unsigned char *told, *byed; /* rank 0: told to finish; said BYE */
    uint64_t *assigned;         /* gradients assigned to each this session */
    double *rloss, *rcorrect;
    uint64_t *rrows, *rpushes;
    float *pack;        /* [dense_count + max rows * E] a message's floats */
    unsigned char *msg; /* a GO or PUSH being built */
    size_t msg_cap;
    dpt_sparse_rows_t in_rows; /* a remote push's sparse rows */
    dpt_arena_t in_grads;      /* a remote push's dense gradient, table layout */
    uint64_t shuffle_pos;      /* the epoch's shuffle position (sent in GO) */
    char remote_err[320];
    /* Counters of the run before this process's service (restored from a
     * checkpoint; the service counts from 0). */
    uint64_t base_stale, *base_contrib; /* [N] */
    char contrib_text[SRT_MAX_WORKERS * 21];
    int straggler;
    double straggler_s;
    float ema_decay;
    int eval_ema; /* evaluate() scores the EMA */
};

static void srt_worker_free(srt_worker_t *w)
{
    dpt_mlp_destroy(w->mlp);
    dpt_seq_destroy(w->seq);
    dpt_arena_deinit(&w->params);
    dpt_arena_deinit(&w->grads);
    free(w->x);
    free(w->y);
    free(w->labels);
    free(w->ids);
    free(w->uniq);
    free(w->offsets);
    free(w->rows);
    free(w->dpooled);
    free(w->dy);
    dpt_sparse_rows_deinit(&w->grad_rows);
}

static void srt_remote_finish(srt_t *t);

static void srt_destroy(void *self)
{
    srt_t *t = self;
    if (!t)
        return;
    if (t->role == SRT_SERVICE)
        srt_remote_finish(t);
    if (t->w)
        for (int i = 0; i < t->nw; i++)
            srt_worker_free(&t->w[i]);
    free(t->place);
    free(t->svc_dense);
    free(t->svc_all);
    if (t->fmsg)
        for (int i = 0; i < t->N; i++)
            free(t->fmsg[i]);
    free(t->fmsg);
    free(t->fmsg_n);
    free(t->pending);
    free(t->told);
    free(t->byed);
    free(t->need_start);
    free(t->rlost);
    free(t->assigned);
    free(t->rloss);
    free(t->rcorrect);
    free(t->rrows);
    free(t->rpushes);
    free(t->pack);
    free(t->msg);
    dpt_sparse_rows_deinit(&t->in_rows);
    dpt_arena_deinit(&t->in_grads);
    free(t->w);
    free(t->base_contrib);
    dpt_sr_destroy(t->sr);
    dpt_mlp_destroy(t->eval_mlp);
    dpt_seq_destroy(t->eval_seq);
    free(t->eval_pooled);
    dpt_dataset_deinit(&t->train);
    dpt_dataset_deinit(&t->test);
    free(t->train_ids);
    free(t->test_ids);
    free(t->train_y);
    free(t->test_y);
    dpt_vartable_deinit(&t->table);
    free(t->perm);
    free(t);
}

/* ---- the bags task ---------------------------------------------------------- */

/* Draws the bags of both splits and their targets from the seed. */
static int srt_bags_make(srt_t *t, uint64_t seed)
{
    size_t V = t->vocab, L = t->nids, n = t->rows, m = t->test_rows;
    size_t cells;
    if (dpt_mul_size(n + m, L, &cells) != 0 || cells > ((size_t)-1) / sizeof(int64_t))
        return dpt_error(DPT_EOVERFLOW, "bags: %zu bags of %zu ids overflow", n + m, L);
    double *cdf = malloc(V * sizeof *cdf);
    float *u = malloc(V * sizeof *u);
    t->train_ids = malloc(n * L * sizeof(int64_t));
    t->test_ids = malloc(m * L * sizeof(int64_t));
    t->train_y = malloc(n * sizeof(float));
    t->test_y = malloc(m * sizeof(float));
    int rc = DPT_OK;
    if (!cdf || !u || !t->train_ids || !t->test_ids || !t->train_y || !t->test_y) {
        rc = dpt_error(DPT_ENOMEM, "bags: cannot allocate %zu bags of %zu ids", n + m, L);
        goto done;
    }
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_DATA);
    double total = 0.0;
    for (size_t i = 0; i < V; i++) {
        total += pow((double)(i + 1), -SRT_ZIPF);
        cdf[i] = total;
        u[i] = (float)dpt_rng_normal(&rng);
    }
    for (int split = 0; split < 2; split++) {
        size_t rows = split ? m : n;
        int64_t *ids = split ? t->test_ids : t->train_ids;
        float *y = split ? t->test_y : t->train_y;
        for (size_t r = 0; r < rows; r++) {
            double s = 0.0;
            for (size_t j = 0; j < L; j++) {
                double q = dpt_rng_uniform_double(&rng) * total;
                size_t lo = 0, hi = V - 1;
                while (lo < hi) {
                    size_t mid = lo + (hi - lo) / 2;
                    if (cdf[mid] < q)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                ids[r * L + j] = (int64_t)lo;
                s += (double)u[lo];
            }
            y[r] = (float)(s / (double)L);
        }
    }
done:
    free(cdf);
    free(u);
    return rc;
}

/* The bags model: embedding.weight [V, E], then an MLP of E inputs and one
 * output with names "mlp.<i>.weight" / ".bias". */
static int srt_bags_model(const dpt_config_t *c, size_t vocab, size_t edim, size_t max_batch,
                          dpt_vartable_t *table, dpt_seq_t **seq, dpt_layer_spec_t *layers,
                          size_t *nlayers, dpt_layer_kind_t *act, char *text, size_t size)
{
    dpt_vartable_init(table);
    size_t shape[2] = {vocab, edim};
    int rc = dpt_vartable_add(table, "embedding.weight", 2, shape, NULL);
    if (!rc)
        rc = dpt__sup_layers(c, edim, 1, layers, nlayers, act, text, size);
    if (!rc)
        rc = dpt_seq_create(seq, edim, layers, *nlayers, max_batch, table, "mlp.");
    return rc;
}

/* Mean squared error (and absolute error, R^2) of the bags model on the
 * test bags, with the table and MLP in `params`. */
static int srt_bags_eval(dpt_seq_t *seq, float *pooled, const float *params,
                         const dpt_vartable_t *table, const int64_t *ids, const float *y,
                         size_t rows, size_t L, dpt_eval_result_t *out)
{
    const dpt_var_t *ev = &table->vars[0];
    size_t V = ev->shape[0], E = ev->shape[1];
    size_t offsets[SRT_EVAL_BATCH + 1];
    double se = 0.0, ae = 0.0, mean = 0.0, tot = 0.0;
    for (size_t r = 0; r < rows; r++)
        mean += (double)y[r];
    mean /= (double)rows;
    for (size_t r = 0; r < rows; r++)
        tot += ((double)y[r] - mean) * ((double)y[r] - mean);
    for (size_t r0 = 0; r0 < rows; r0 += SRT_EVAL_BATCH) {
        size_t n = rows - r0 < SRT_EVAL_BATCH ? rows - r0 : SRT_EVAL_BATCH;
        for (size_t j = 0; j <= n; j++)
            offsets[j] = j * L;
        int rc = dpt_embedding_bag_forward(params + ev->offset, V, E, ids + r0 * L, offsets, n,
                                           DPT_EMBED_MEAN, pooled);
        const float *pred;
        if (!rc)
            rc = dpt_seq_forward(seq, params, pooled, n, &pred);
        if (rc)
            return rc;
        for (size_t j = 0; j < n; j++) {
            double e = (double)pred[j] - (double)y[r0 + j];
            se += e * e;
            ae += fabs(e);
        }
    }
    out->count = rows;
    out->loss = se / (double)rows;
    out->rmse = sqrt(se / (double)rows);
    out->mae = ae / (double)rows;
    out->r2 = tot > 0.0 ? 1.0 - se / tot : (double)NAN;
    return DPT_OK;
}

/* ---- building ---------------------------------------------------------------- */

/* Another instance of the bags model's MLP (for a worker or evaluation),
 * laid out as in t->table. */
static int srt_bags_seq(const srt_t *t, size_t max_batch, dpt_seq_t **seq)
{
    dpt_vartable_t scratch;
    dpt_vartable_init(&scratch);
    size_t shape[2] = {t->vocab, t->edim};
    int rc = dpt_vartable_add(&scratch, "embedding.weight", 2, shape, NULL);
    if (!rc)
        rc = dpt_seq_create(seq, t->edim, t->layers, t->nlayers, max_batch, &scratch, "mlp.");
    dpt_vartable_deinit(&scratch);
    return rc;
}

static int srt_worker_build(srt_t *t, srt_worker_t *w)
{
    size_t b = t->b, n = t->vars->total;
    int rc;
    if ((rc = dpt_arena_init(&w->params, n)) != 0 || (rc = dpt_arena_init(&w->grads, n)) != 0)
        return rc;
    if (t->bags) {
        if ((rc = srt_bags_seq(t, b, &w->seq)) != 0)
            return rc;
        size_t L = t->nids, E = t->edim;
        w->ids = malloc(b * L * sizeof(int64_t));
        w->uniq = malloc(b * L * sizeof(int64_t));
        w->offsets = malloc((b + 1) * sizeof(size_t));
        w->rows = malloc(b * L * E * sizeof(float));
        w->x = malloc(b * E * sizeof(float));
        w->dpooled = malloc(b * E * sizeof(float));
        w->y = malloc(b * sizeof(float));
        w->dy = malloc(b * sizeof(float));
        if (!w->ids || !w->uniq || !w->offsets || !w->rows || !w->x || !w->dpooled || !w->y ||
            !w->dy)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate worker %d", w->id);
        return dpt_sparse_rows_init(&w->grad_rows, E, b * L);
    }
    if ((rc = dpt_mlp_create(&w->mlp, t->dim, t->layers, t->nlayers, t->loss, b)) != 0)
        return rc;
    w->x = malloc(b * t->dim * sizeof(float));
    if (t->ydim)
        w->y = malloc(b * t->ydim * sizeof(float));
    else
        w->labels = malloc(b * sizeof(int32_t));
    if (!w->x || !(w->y || w->labels))
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate worker %d", w->id);
    return DPT_OK;
}

static int srt_service(srt_t *t, const dpt_config_t *c)
{
    dpt_sr_config_t sc = dpt_sr_defaults();
    dpt_optim_kind_t kind;
    int rc;
    if ((rc = dpt_optim_kind_parse(DPT_CS(c, optimizer), &kind)) != 0 ||
        (rc = dpt_schedule_kind_parse(DPT_CS(c, lr_schedule), &sc.schedule.kind)) != 0)
        return rc;
    sc.optim = dpt_optim_defaults(kind);
    sc.optim.momentum = (float)DPT_CF(c, momentum);
    sc.optim.nesterov = kind == DPT_OPTIM_MOMENTUM ? (int)DPT_CI(c, nesterov) : 0;
    sc.optim.eps = (float)DPT_CF(c, adam_eps);
    sc.optim.weight_decay = (float)DPT_CF(c, weight_decay);
    sc.schedule.lr0 = (float)DPT_CF(c, lr);
    sc.schedule.lr_end = (float)DPT_CF(c, lr_end);
    sc.schedule.total_steps = t->epochs * t->steps_per_epoch;
    sc.grad_clip = DPT_CF(c, grad_clip);
    sc.vars = t->vars;
    sc.replicas_to_aggregate = t->R;
    sc.total_num_replicas = t->N;
    sc.num_ps = t->num_ps;
    sc.ema_decay = t->ema_decay;
    sc.timeout_s = DPT_CF(c, comm_timeout_s);
    unsigned char sparse[2 * DPT__SUP_MAX_LAYERS + 1] = {0};
    if (t->bags) {
        if (t->vars->nvars > sizeof sparse)
            return dpt_error(DPT_EINVAL, "sync_replicas: the bags model has too many variables");
        sparse[0] = 1;
        sc.sparse = sparse;
    }
    unsigned char *owned = NULL;
    if (t->svc >= 0 && t->P > 1) {
        /* One of several services in separate processes: it keeps the
         * variables placed on it; rank 0's hands out the tokens. */
        owned = calloc(t->vars->nvars, 1);
        if (!owned)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the service");
        for (size_t i = 0; i < t->vars->nvars; i++)
            owned[i] = t->place[i] == t->svc;
        sc.owned = owned;
        sc.no_tokens = t->svc > 0;
    }
    rc = dpt_sr_create(&t->sr, &sc);
    free(owned);
    if (rc)
        return rc;
    dpt_rng_t init;
    dpt_rng_init(&init, (uint64_t)DPT_CI(c, seed), 0, 0, DPT_RNG_INIT);
    float *p = dpt_sr_params(t->sr);
    if (t->bags) {
        /* The table as PyTorch's nn.Embedding starts it, N(0, 1) scaled to
         * the width; then the MLP. */
        const dpt_var_t *ev = &t->vars->vars[0];
        dpt_rng_fill_normal(&init, p + ev->offset, ev->count, 0.0f, 1.0f / sqrtf((float)t->edim));
        dpt_seq_init_params(t->eval_seq, p, &init);
    } else {
        dpt_mlp_init_params(t->eval_mlp, p, &init);
    }
    dpt_sr_reset_ema(t->sr);
    dpt_sr_set_global_step(t->sr, 0);
    return DPT_OK;
}

static int srt_build(srt_t *t, const dpt_config_t *c)
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
    if (t->bags) {
        if ((rc = srt_bags_model(c, t->vocab, t->edim, t->b, &t->table, &t->eval_seq, t->layers,
                                 &t->nlayers, &t->act, t->layers_text, sizeof t->layers_text)) != 0)
            return rc;
        /* Evaluation reuses the workers' batch size. */
        dpt_seq_destroy(t->eval_seq);
        t->eval_seq = NULL;
        if ((rc = srt_bags_seq(t, SRT_EVAL_BATCH, &t->eval_seq)) != 0)
            return rc;
        t->eval_pooled = malloc(SRT_EVAL_BATCH * t->edim * sizeof(float));
        if (!t->eval_pooled)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the evaluation");
        t->vars = &t->table;
    } else {
        if ((rc = dpt__sup_layers(c, t->dim, t->ydim ? t->ydim : t->classes, t->layers, &t->nlayers,
                                  &t->act, t->layers_text, sizeof t->layers_text)) != 0 ||
            (rc = dpt_mlp_create(&t->eval_mlp, t->dim, t->layers, t->nlayers, t->loss,
                                 SRT_EVAL_BATCH)) != 0)
            return rc;
        t->vars = dpt_mlp_vars(t->eval_mlp);
    }
    for (size_t i = 0; i < t->vars->nvars; i++)
        if (!(t->bags && i == 0))
            t->dense_count += t->vars->vars[i].count;
    /* Where each variable lives: every rank computes the same placement. */
    size_t nv = t->vars->nvars;
    t->P = t->role == SRT_LOCAL ? 1 : t->num_ps;
    t->place = calloc(nv, sizeof(int));
    t->svc_dense = calloc((size_t)t->P, sizeof(size_t));
    t->svc_all = calloc((size_t)t->P, sizeof(size_t));
    uint64_t *vb = calloc(nv, sizeof(uint64_t));
    if (!t->place || !t->svc_dense || !t->svc_all || !vb) {
        free(vb);
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the placement");
    }
    for (size_t i = 0; i < nv; i++)
        vb[i] = (uint64_t)t->vars->vars[i].count * sizeof(float);
    rc = dpt_sr_place(vb, nv, t->P, t->place, NULL);
    free(vb);
    if (rc)
        return rc;
    for (size_t i = 0; i < nv; i++) {
        size_t n = t->vars->vars[i].count;
        t->svc_all[t->place[i]] += n;
        if (!(t->bags && i == 0))
            t->svc_dense[t->place[i]] += n;
    }
    t->timeout_s = DPT_CF(c, comm_timeout_s);
    if (t->role != SRT_WORKER && (rc = srt_service(t, c)) != 0)
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
        if ((rc = srt_worker_build(t, &t->w[i])) != 0)
            return rc;
    }
    if (t->role != SRT_LOCAL) {
        size_t N = (size_t)t->N, maxrows = t->bags ? t->b * t->nids : 0;
        size_t floats = t->dense_count + maxrows * t->edim;
        t->msg_cap = 64 + floats * sizeof(float) + maxrows * sizeof(int64_t);
        t->pack = malloc(floats * sizeof(float) + 64);
        t->msg = malloc(t->msg_cap);
        t->pending = calloc(N, 1);
        t->told = calloc(N, 1);
        t->byed = calloc(N, 1);
        t->need_start = calloc(N, 1);
        t->rlost = calloc(N, 1);
        t->assigned = calloc(N, sizeof(uint64_t));
        t->rloss = calloc(N, sizeof(double));
        t->rcorrect = calloc(N, sizeof(double));
        t->rrows = calloc(N, sizeof(uint64_t));
        t->rpushes = calloc(N, sizeof(uint64_t));
        t->fmsg = calloc(N, sizeof(void *));
        t->fmsg_n = calloc(N, sizeof(size_t));
        if (!t->pack || !t->msg || !t->pending || !t->told || !t->byed || !t->need_start ||
            !t->rlost || !t->assigned || !t->rloss || !t->rcorrect || !t->rrows || !t->rpushes ||
            !t->fmsg || !t->fmsg_n)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the message buffers");
        if (t->role != SRT_WORKER &&
            ((rc = dpt_arena_init(&t->in_grads, t->vars->total)) != 0 ||
             (t->bags && (rc = dpt_sparse_rows_init(&t->in_rows, t->edim, maxrows)) != 0)))
            return rc;
    }
    dpt_rng_init(&t->shuffle_rng, (uint64_t)DPT_CI(c, seed), 0, 0, DPT_RNG_SHUFFLE);
    return DPT_OK;
}

/* The trainer of config c in a role (the comm of the ranks when not local). */
static int srt_new(srt_t **out, const dpt_config_t *c, const dpt_trainer_env_t *env,
                   srt_role_t role, dpt_comm_t *comm)
{
    *out = NULL;
    srt_t *t = calloc(1, sizeof *t);
    if (!t)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the trainer");
    int rc;
    t->role = role;
    t->comm = comm;
    t->svc = role == SRT_SERVICE ? 0 : role == SRT_SHARD ? dpt_comm_rank(comm) : -1;
    t->straggler = env && env->straggler_delay_s > 0 ? env->straggler_worker : -1;
    t->straggler_s = env ? env->straggler_delay_s : 0.0;
    t->bags = strcmp(DPT_CS(c, dataset), "bags") == 0;
    if (t->bags) {
        t->loss = DPT_LOSS_MSE;
        t->vocab = (size_t)DPT_CI(c, bags_vocab);
        t->edim = (size_t)DPT_CI(c, embedding_dim);
        t->nids = (size_t)DPT_CI(c, bags_ids);
        t->rows = (size_t)DPT_CI(c, bags_rows);
        t->test_rows = t->rows / 10 ? t->rows / 10 : 1;
        t->ydim = 1;
        snprintf(t->where, sizeof t->where, "seed %" PRId64, DPT_CI(c, seed));
        rc = srt_bags_make(t, (uint64_t)DPT_CI(c, seed));
    } else {
        t->loss = (dpt_loss_kind_t)DPT_CI(c, loss);
        rc = dpt__sup_load(c, &t->train, &t->test, t->where, sizeof t->where);
        t->dim = t->train.dim;
        t->ydim = t->train.target_dim;
        t->classes = (size_t)t->train.num_classes;
        t->rows = t->train.rows;
    }
    if (!rc)
        rc = srt_build(t, c);
    if (rc) {
        t->role = SRT_LOCAL; /* a half-built service tells its workers nothing */
        srt_destroy(t);
        return rc;
    }
    *out = t;
    return DPT_OK;
}

static int srt_create(void **out, const dpt_config_t *c, const dpt_trainer_env_t *env)
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
    srt_t *t;
    int rc = srt_new(&t, c, env, role, role == SRT_SERVICE ? env->comm : NULL);
    *out = t;
    return rc;
}

/* ---- one gradient --------------------------------------------------------------- */

static int srt_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Packing of the variables of service k (all services when k < 0), in
 * table order: the dense ones only, or all (with the table). */
static size_t srt_pack(const srt_t *t, int k, int dense_only, const float *full, float *packed)
{
    size_t n = 0;
    for (size_t i = 0; i < t->vars->nvars; i++) {
        const dpt_var_t *v = &t->vars->vars[i];
        if ((k >= 0 && t->place[i] != k) || (dense_only && t->bags && i == 0))
            continue;
        memcpy(packed + n, full + v->offset, v->count * sizeof(float));
        n += v->count;
    }
    return n;
}

static size_t srt_unpack(const srt_t *t, int k, int dense_only, const float *packed, float *full)
{
    size_t n = 0;
    for (size_t i = 0; i < t->vars->nvars; i++) {
        const dpt_var_t *v = &t->vars->vars[i];
        if ((k >= 0 && t->place[i] != k) || (dense_only && t->bags && i == 0))
            continue;
        memcpy(full + v->offset, packed + n, v->count * sizeof(float));
        n += v->count;
    }
    return n;
}

/* 1 when service k keeps the embedding table (bags). */
static int srt_has_table(const srt_t *t, int k)
{
    return t->bags && t->place[0] == k;
}

/* Receives one message of `tag` from `src` into *buf (malloc'd, the
 * caller frees) checking its size when want > 0. */
static int srt_recv(srt_t *t, int src, int tag, void **buf, size_t *n, size_t want,
                    const char *what)
{
    int rc = dpt_comm_recv(t->comm, src, tag, t->timeout_s, buf, n, NULL, NULL);
    if (rc == DPT_ETIMEDOUT)
        return dpt_error(rc, "sync_replicas: no %s from rank %d within comm_timeout_s = %g s", what,
                         src, t->timeout_s);
    if (rc)
        return rc;
    if (want && *n != want) {
        free(*buf);
        *buf = NULL;
        return dpt_error(DPT_EFORMAT, "sync_replicas: a %s of %zu bytes from rank %d, expected %zu",
                         what, *n, src, want);
    }
    return DPT_OK;
}

/* The variables worker w needs: the dense ones into w->params and, for
 * bags, rows ids[0..n) of the table into w->rows. From the service of this
 * process, or from rank 0's. */
static int srt_fetch(srt_worker_t *w, const int64_t *ids, size_t n)
{
    srt_t *t = w->t;
    int rc;
    if (t->role == SRT_LOCAL) {
        rc = dpt_sr_fetch(t->sr, w->params.data);
        if (!rc && t->bags)
            rc = dpt_sr_fetch_rows(t->sr, 0, ids, n, w->rows);
        return rc;
    }
    /* FETCH {min step, n, ids} to every service (the ids to the one with
     * the table), then their PARAMS; a service answers once its global step
     * reached the step this gradient is for. */
    size_t E = t->edim;
    for (int k = 0; k < t->P; k++) {
        uint64_t head[2] = {t->cur_step, srt_has_table(t, k) ? (uint64_t)n : 0};
        memcpy(t->msg, head, sizeof head);
        if (head[1])
            memcpy(t->msg + sizeof head, ids, n * sizeof(int64_t));
        if ((rc = dpt_comm_send(t->comm, k, SRT_TAG_FETCH, t->msg,
                                sizeof head + head[1] * sizeof(int64_t))) != 0)
            return rc;
    }
    for (int k = 0; k < t->P; k++) {
        size_t rows = srt_has_table(t, k) ? n : 0;
        void *buf = NULL;
        size_t got = 0;
        if ((rc = srt_recv(t, k, SRT_TAG_PARAMS, &buf, &got,
                           (t->svc_dense[k] + rows * E) * sizeof(float),
                           "reply with the variables")) != 0)
            return rc;
        memcpy(t->pack, buf, got);
        free(buf);
        srt_unpack(t, k, 1, t->pack, w->params.data);
        if (rows)
            memcpy(w->rows, t->pack + t->svc_dense[k], rows * E * sizeof(float));
    }
    return DPT_OK;
}

/* Worker w's gradient on chunk `chunk` of the epoch's order, at the
 * variables it fetched. Fills w->grads (dense) and w->grad_rows (bags). */
static int srt_grad(srt_worker_t *w, size_t chunk, double *loss, double *correct)
{
    srt_t *t = w->t;
    size_t b = t->b;
    const size_t *rows = t->perm + chunk * b;
    int rc;
    if (!t->bags) {
        if ((rc = srt_fetch(w, NULL, 0)) != 0)
            return rc;
        size_t dim = t->dim, yd = t->ydim;
        for (size_t i = 0; i < b; i++) {
            size_t r = rows[i];
            memcpy(w->x + i * dim, t->train.x + r * dim, dim * sizeof(float));
            if (yd)
                memcpy(w->y + i * yd, t->train.targets + r * yd, yd * sizeof(float));
            else
                w->labels[i] = t->train.labels[r];
        }
        dpt_batch_t batch = dpt__sup_batch(b, dim, w->x, w->labels, w->y, yd);
        dpt_model_t m = dpt_mlp_model(w->mlp);
        dpt_loss_out_t o;
        if ((rc = m.loss_grad(m.ctx, w->params.data, w->grads.data, &batch, &o)) != 0)
            return rc;
        *loss = o.loss;
        *correct = o.correct;
        return DPT_OK;
    }
    /* Bags: the distinct ids of the batch, their rows fetched, the batch
     * renumbered into them. */
    size_t L = t->nids, E = t->edim, n = b * L;
    for (size_t i = 0; i < b; i++) {
        memcpy(w->uniq + i * L, t->train_ids + rows[i] * L, L * sizeof(int64_t));
        w->y[i] = t->train_y[rows[i]];
        w->offsets[i] = i * L;
    }
    w->offsets[b] = n;
    memcpy(w->ids, w->uniq, n * sizeof(int64_t));
    qsort(w->uniq, n, sizeof(int64_t), srt_cmp_i64);
    size_t u = 0;
    for (size_t k = 0; k < n; k++)
        if (u == 0 || w->uniq[u - 1] != w->uniq[k])
            w->uniq[u++] = w->uniq[k];
    for (size_t k = 0; k < n; k++) {
        const int64_t *hit = bsearch(&w->ids[k], w->uniq, u, sizeof(int64_t), srt_cmp_i64);
        w->ids[k] = hit - w->uniq;
    }
    w->rows_touched += u;
    if ((rc = srt_fetch(w, w->uniq, u)) != 0 ||
        (rc = dpt_embedding_bag_forward(w->rows, u, E, w->ids, w->offsets, b, DPT_EMBED_MEAN,
                                        w->x)) != 0)
        return rc;
    const float *pred;
    double l;
    if ((rc = dpt_seq_forward(w->seq, w->params.data, w->x, b, &pred)) != 0)
        return rc;
    dpt_vec_zero(w->dy, b);
    if ((rc = dpt_loss_mse(pred, w->y, b, 1, w->dy, &l)) != 0)
        return rc;
    dpt_vec_zero(w->dpooled, b * E);
    if ((rc = dpt_seq_backward_ex(w->seq, w->params.data, w->grads.data, w->dy, w->dpooled, 1)) !=
        0)
        return rc;
    dpt_sparse_rows_clear(&w->grad_rows);
    if ((rc = dpt_embedding_bag_backward(E, w->ids, w->offsets, b, DPT_EMBED_MEAN, w->dpooled,
                                         &w->grad_rows)) != 0)
        return rc;
    for (size_t k = 0; k < w->grad_rows.n; k++)
        w->grad_rows.indices[k] = w->uniq[w->grad_rows.indices[k]];
    if ((rc = dpt_sparse_rows_coalesce(&w->grad_rows)) != 0)
        return rc;
    *loss = l;
    *correct = 0.0;
    return DPT_OK;
}

static void *srt_worker_main(void *arg)
{
    srt_worker_t *w = arg;
    srt_t *t = w->t;
    uint64_t local = dpt_sr_global_step(t->sr);
    const dpt_sparse_rows_t *list[1] = {&w->grad_rows};
    int rc = DPT_OK;
    for (uint64_t k = 0;; k++) {
        size_t chunk = (size_t)((k * (uint64_t)t->N + (uint64_t)w->id) % t->nchunks);
        double loss = 0.0, correct = 0.0;
        int accepted = 0;
        if ((rc = srt_grad(w, chunk, &loss, &correct)) != 0)
            break;
        if (w->id == t->straggler) {
            struct timespec ts;
            ts.tv_sec = (time_t)t->straggler_s;
            ts.tv_nsec = (long)((t->straggler_s - (double)ts.tv_sec) * 1e9);
            nanosleep(&ts, NULL);
        }
        rc = dpt_sr_push(t->sr, w->id, local, w->grads.data, t->bags ? list : NULL, &accepted);
        if (rc)
            break;
        w->pushes++;
        if (accepted) {
            w->accepted++;
            w->loss += loss * (double)t->b;
            w->correct += correct;
            w->rows_used += t->b;
        }
        if ((rc = dpt_sr_take_token(t->sr, w->id, &local)) != 0)
            break;
    }
    if (rc == DPT_ECLOSED) {
        rc = DPT_OK;
    } else {
        snprintf(w->err, sizeof w->err, "%s", dpt_last_error());
        /* This engine goes on without a failed worker while enough remain
         * (if not, the service wakes the others with the reason). */
        dpt_sr_worker_lost(t->sr, w->id);
    }
    w->rc = rc;
    return NULL;
}

/* ---- epochs ----------------------------------------------------------------------- */

/* Test-set figures of `params` into out (loss; accuracy or regression). */
static int srt_eval_params(srt_t *t, const float *params, dpt_eval_result_t *out)
{
    out->count = 0;
    out->mean_return = out->mean_length = out->loss = out->accuracy = NAN;
    out->rmse = out->mae = out->r2 = NAN;
    out->stochastic = 0;
    if (t->bags)
        return srt_bags_eval(t->eval_seq, t->eval_pooled, params, t->vars, t->test_ids, t->test_y,
                             t->test_rows, t->nids, out);
    dpt_batch_t tb = dpt__sup_batch(t->test.rows, t->test.dim, t->test.x, t->test.labels,
                                    t->test.targets, t->test.target_dim);
    dpt_loss_out_t o;
    int rc = dpt_mlp_evaluate(t->eval_mlp, params, &tb, &o);
    if (rc)
        return rc;
    out->count = t->test.rows;
    out->loss = o.loss;
    if (!t->ydim) {
        out->accuracy = o.correct / (double)t->test.rows;
        return DPT_OK;
    }
    return dpt__sup_regress(t->eval_mlp, params, &t->test, &out->rmse, &out->mae, &out->r2);
}

/* Starts the workers that are not lost and waits for all of them. */
static int srt_run_workers(srt_t *t)
{
    int started = 0, rc = DPT_OK;
    for (int i = 0; i < t->N; i++) {
        srt_worker_t *w = &t->w[i];
        w->loss = w->correct = 0.0;
        w->rows_used = w->pushes = w->accepted = w->rows_touched = 0;
        w->rc = 0;
        w->err[0] = '\0';
        if (w->lost)
            continue;
        if (pthread_create(&w->th, NULL, srt_worker_main, w) != 0) {
            rc = dpt_error(DPT_ETHREAD, "sync_replicas: cannot start worker %d", i);
            dpt_sr_close(t->sr);
            break;
        }
        started = i + 1;
    }
    for (int i = 0; i < started; i++)
        if (!t->w[i].lost)
            pthread_join(t->w[i].th, NULL);
    return rc;
}

/* The epoch's order: the rows shuffled from shuffle position pos. */
static void srt_perm(srt_t *t, uint64_t pos)
{
    for (size_t i = 0; i < t->rows; i++)
        t->perm[i] = i;
    dpt_rng_seek(&t->shuffle_rng, pos);
    if (t->shuffle)
        dpt_rng_shuffle(&t->shuffle_rng, t->perm, t->rows);
}

/* ---- the service of worker ranks (mpirun) ----------------------------------------- */

/* Tells worker w to compute its next gradient at `step` (or to finish). */
static int srt_go(srt_t *t, int w, uint64_t step, int finish)
{
    uint64_t *go = malloc(SRT_GO_WORDS * sizeof *go);
    if (!go)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer worker %d", w);
    go[0] = step;
    go[1] = 0;
    go[2] = t->shuffle_pos;
    go[3] = (uint64_t)finish;
    if (!finish) {
        go[1] = (t->assigned[w] * (uint64_t)t->N + (uint64_t)w) % t->nchunks;
        t->assigned[w]++;
    }
    /* Replies never wait for the worker: one stopped (SIGSTOP) must not
     * stop the service. */
    return dpt_comm_send_async(t->comm, w + t->P, SRT_TAG_GO, go, SRT_GO_WORDS * sizeof *go);
}

/* Answers worker w's fetch {min step, n, ids} with this service's dense
 * variables and the rows asked for. Returns 1 when the service's global
 * step has not reached min step yet (the fetch waits), else 0 or an
 * error. */
static int srt_answer_fetch(srt_t *t, int w, const unsigned char *m, size_t n)
{
    uint64_t head[2];
    size_t E = t->edim;
    if (n < sizeof head || (memcpy(head, m, sizeof head), n != sizeof head + head[1] * 8) ||
        head[1] > t->b * t->nids || (head[1] && !srt_has_table(t, t->svc)))
        return dpt_error(DPT_EFORMAT, "sync_replicas: a malformed fetch from rank %d", w + t->P);
    if (dpt_sr_global_step(t->sr) < head[0])
        return 1;
    uint64_t k = head[1];
    int rc = dpt_sr_fetch(t->sr, t->in_grads.data);
    if (rc)
        return rc;
    size_t dense = srt_pack(t, t->svc, 1, t->in_grads.data, t->pack);
    if (k) {
        int64_t *ids = malloc(k * sizeof *ids);
        if (!ids)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a fetch");
        memcpy(ids, m + sizeof head, k * sizeof *ids);
        rc = dpt_sr_fetch_rows(t->sr, 0, ids, k, t->pack + dense);
        free(ids);
        if (rc)
            return rc;
    }
    size_t bytes = (dense + k * E) * sizeof(float);
    void *reply = malloc(bytes ? bytes : 1);
    if (!reply)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a fetch");
    memcpy(reply, t->pack, bytes);
    return dpt_comm_send_async(t->comm, w + t->P, SRT_TAG_PARAMS, reply, bytes);
}

/* Answers the fetches that waited for the global step. */
static int srt_answer_waiting(srt_t *t)
{
    for (int w = 0; w < t->N; w++) {
        if (!t->fmsg[w])
            continue;
        int rc = srt_answer_fetch(t, w, t->fmsg[w], t->fmsg_n[w]);
        if (rc == 1)
            continue;
        free(t->fmsg[w]);
        t->fmsg[w] = NULL;
        if (rc)
            return rc;
    }
    return DPT_OK;
}

/* Worker w is out (its gradient or its env failed): told to finish at
 * once (it says BYE and ends with exit 0), left out of the steps; the
 * service fails when fewer than R workers remain. */
static int srt_lose(srt_t *t, int w)
{
    if (t->rlost[w])
        return DPT_OK;
    t->rlost[w] = 1;
    free(t->fmsg[w]);
    t->fmsg[w] = NULL;
    t->pending[w] = 0;
    int rc = t->svc == 0 && !t->told[w] ? srt_go(t, w, 0, 1) : DPT_OK;
    t->told[w] = 1;
    int lost = dpt_sr_worker_lost(t->sr, w);
    return rc ? rc : lost;
}

/* One message of worker w (rank w + P) to this service. */
static int srt_serve(srt_t *t, int w, int tag, const unsigned char *m, size_t n)
{
    size_t E = t->edim;
    int rc;
    switch (tag) {
    case SRT_TAG_TOKEN:
        if (t->need_start[w]) {
            /* Its first step of the session: the global step (the chief's
             * init), no token. */
            t->need_start[w] = 0;
            return srt_go(t, w, dpt_sr_global_step(t->sr), 0);
        }
        t->pending[w] = 1;
        return DPT_OK;
    case SRT_TAG_FETCH: {
        rc = srt_answer_fetch(t, w, m, n);
        if (rc != 1)
            return rc;
        /* Not at that step yet: kept until it is (one fetch per worker). */
        void *copy = malloc(n);
        if (!copy)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot keep a fetch");
        memcpy(copy, m, n);
        free(t->fmsg[w]);
        t->fmsg[w] = copy;
        t->fmsg_n[w] = n;
        return DPT_OK;
    }
    case SRT_TAG_PUSH: {
        uint64_t local, k;
        double loss, correct;
        if (n < 32)
            return dpt_error(DPT_EFORMAT, "sync_replicas: a malformed push from rank %d", w + t->P);
        memcpy(&local, m, 8);
        memcpy(&k, m + 8, 8);
        memcpy(&loss, m + 16, 8);
        memcpy(&correct, m + 24, 8);
        size_t dense = t->svc_dense[t->svc];
        size_t want = 32 + dense * sizeof(float) + k * (sizeof(int64_t) + E * 4);
        if (n != want || (!srt_has_table(t, t->svc) && k) || k > t->b * t->nids)
            return dpt_error(DPT_EFORMAT, "sync_replicas: a push of %zu bytes from rank %d", n,
                             w + t->P);
        const unsigned char *p = m + 32;
        memcpy(t->pack, p, dense * sizeof(float));
        srt_unpack(t, t->svc, 1, t->pack, t->in_grads.data);
        p += dense * sizeof(float);
        const dpt_sparse_rows_t *list[1] = {&t->in_rows};
        if (t->bags) {
            /* (empty on a service without the table, which ignores it) */
            dpt_sparse_rows_clear(&t->in_rows);
            for (uint64_t j = 0; j < k; j++) {
                int64_t id;
                float *row;
                memcpy(&id, p + j * sizeof(int64_t), sizeof id);
                if ((rc = dpt_sparse_rows_add(&t->in_rows, id, NULL, &row)) != 0)
                    return rc;
                memcpy(row, p + k * sizeof(int64_t) + j * E * sizeof(float), E * sizeof(float));
            }
        }
        int accepted = 0;
        rc = dpt_sr_push(t->sr, w, local, t->in_grads.data, t->bags ? list : NULL, &accepted);
        dpt_sr_stats_t st;
        dpt_sr_get_stats(t->sr, &st);
        if ((rc == DPT_EINVAL || rc == DPT_ENUMERIC) && !st.failed) {
            /* That worker's gradient is bad (not the service): it is lost,
             * the others go on. */
            snprintf(t->remote_err, sizeof t->remote_err, "worker %d (rank %d): %s", w, w + t->P,
                     dpt_last_error());
            return srt_lose(t, w);
        }
        if (rc)
            return rc;
        t->rpushes[w]++;
        t->w[w].rows_touched += k;
        if (accepted) {
            t->rloss[w] += loss * (double)t->b;
            t->rcorrect[w] += correct;
            t->rrows[w] += t->b;
        }
        return DPT_OK;
    }
    case SRT_TAG_FAIL:
        snprintf(t->remote_err, sizeof t->remote_err, "worker %d (rank %d): %.*s", w, w + t->P,
                 (int)(n < 280 ? n : 280), (const char *)m);
        return srt_lose(t, w);
    case SRT_TAG_BYE: t->byed[w] = 1; return DPT_OK;
    default: return DPT_OK; /* a late message of a finished exchange */
    }
}

/* One session of the service for its worker ranks: until the global step
 * reaches `until`, answer every message; tokens go to workers that wait
 * for one as soon as the service has one for them. */
static int srt_remote_session(srt_t *t, uint64_t until)
{
    int rc = dpt_sr_begin(t->sr, -1, until);
    for (int w = 0; !rc && w < t->N; w++) {
        t->assigned[w] = 0;
        t->rloss[w] = t->rcorrect[w] = 0.0;
        t->rrows[w] = t->rpushes[w] = 0;
        t->w[w].rows_touched = 0;
        t->need_start[w] = !t->rlost[w];
        if (t->pending[w] && !t->rlost[w]) {
            t->pending[w] = 0;
            t->need_start[w] = 0;
            rc = srt_go(t, w, dpt_sr_global_step(t->sr), 0);
        }
    }
    while (!rc && dpt_sr_global_step(t->sr) < until) {
        void *m = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        rc = dpt_comm_recv(t->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, t->timeout_s, &m, &n,
                           &src, &tag);
        if (rc == DPT_ETIMEDOUT)
            rc = dpt_error(rc,
                           "sync_replicas: no worker rank sent anything for comm_timeout_s = %g s "
                           "(global step %" PRIu64 ", session until %" PRIu64 ")",
                           t->timeout_s, dpt_sr_global_step(t->sr), until);
        if (!rc && src >= t->P && src < t->P + t->N &&
            (!t->rlost[src - t->P] || tag == SRT_TAG_BYE))
            rc = srt_serve(t, src - t->P, tag, m, n);
        free(m);
        if (!rc)
            rc = srt_answer_waiting(t);
        for (int w = 0; !rc && w < t->N; w++) {
            uint64_t step;
            if (!t->pending[w] || t->rlost[w])
                continue;
            int got = dpt_sr_poll_token(t->sr, w, &step);
            if (got < 0)
                rc = got;
            else if (got) {
                t->pending[w] = 0;
                rc = srt_go(t, w, step, 0);
            }
        }
    }
    return rc;
}

/* The end of the run: every worker rank is told to finish; the service
 * answers fetches until each has said BYE (a worker stopped or gone is
 * waited for at most comm_timeout_s in all). Best effort: nothing to
 * report to. */
static void srt_remote_finish(srt_t *t)
{
    int left = 0;
    if (!t->comm || !t->told || !t->byed)
        return;
    for (int w = 0; w < t->N; w++) {
        if (!t->told[w] && srt_go(t, w, 0, 1) == DPT_OK)
            t->told[w] = 1;
        if (t->told[w] && !t->byed[w])
            left++;
    }
    double until = dpt_now() + t->timeout_s;
    while (left > 0 && dpt_now() < until) {
        void *m = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        if (dpt_comm_recv(t->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, until - dpt_now(), &m, &n,
                          &src, &tag) != DPT_OK)
            break;
        int w = src - t->P;
        if (w >= 0 && w < t->N && !t->byed[w]) {
            if (tag == SRT_TAG_BYE) {
                t->byed[w] = 1;
                left--;
            } else if (tag == SRT_TAG_FETCH && !t->rlost[w]) {
                srt_serve(t, w, tag, m, n);
            }
        }
        free(m);
    }
    /* The other services answered the workers' last fetches meanwhile. */
    for (int k = 1; k < t->P; k++)
        dpt_comm_send_async(t->comm, k, SRT_TAG_FINISH, NULL, 0);
}

/* ---- several services (num_ps > 1 under mpirun) -------------------------------------- */

/* The floats a service exchanges with rank 0 in GATHERED and SCATTER: its
 * variables, then their EMA (with ema_decay), then each optimizer slot. */
static size_t srt_state_floats(const srt_t *t, int k)
{
    int slots = dpt_optim_num_slots(dpt_sr_optimizer(t->sr));
    return t->svc_all[k] * (size_t)(1 + (t->ema_decay > 0.0f) + slots);
}

static void srt_state_pack(srt_t *t, int k, float *out)
{
    dpt_optim_t *o = dpt_sr_optimizer(t->sr);
    size_t n = srt_pack(t, k, 0, dpt_sr_params(t->sr), out);
    if (t->ema_decay > 0.0f)
        n += srt_pack(t, k, 0, dpt_sr_ema(t->sr), out + n);
    for (int j = 0; j < dpt_optim_num_slots(o); j++)
        n += srt_pack(t, k, 0, dpt_optim_slot(o, j), out + n);
}

static void srt_state_unpack(srt_t *t, int k, const float *in)
{
    dpt_optim_t *o = dpt_sr_optimizer(t->sr);
    size_t n = srt_unpack(t, k, 0, in, dpt_sr_params(t->sr));
    if (t->ema_decay > 0.0f)
        n += srt_unpack(t, k, 0, in + n, dpt_sr_ema(t->sr));
    for (int j = 0; j < dpt_optim_num_slots(o); j++)
        n += srt_unpack(t, k, 0, in + n, dpt_optim_slot(o, j));
}

/* Rank 0: the other services' variables (and EMA and slots) once each
 * reached global step `min`, into rank 0's copy of the whole table. */
static int srt_gather(srt_t *t, uint64_t min)
{
    int rc = DPT_OK;
    for (int k = 1; !rc && k < t->P; k++)
        rc = dpt_comm_send(t->comm, k, SRT_TAG_GATHER, &min, sizeof min);
    for (int k = 1; !rc && k < t->P; k++) {
        void *m = NULL;
        size_t n = 0;
        rc = srt_recv(t, k, SRT_TAG_GATHERED, &m, &n, 8 + srt_state_floats(t, k) * sizeof(float),
                      "variables of a service");
        if (!rc)
            srt_state_unpack(t, k, (const float *)((const unsigned char *)m + 8));
        free(m);
    }
    return rc;
}

/* Rank 0 after a restore: every other service gets its part and the step. */
static int srt_scatter(srt_t *t)
{
    for (int k = 1; k < t->P; k++) {
        size_t bytes = 16 + srt_state_floats(t, k) * sizeof(float);
        unsigned char *m = malloc(bytes);
        if (!m)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot send a service its state");
        uint64_t head[2] = {dpt_sr_global_step(t->sr), dpt_optim_get_t(dpt_sr_optimizer(t->sr))};
        memcpy(m, head, sizeof head);
        srt_state_pack(t, k, (float *)(m + 16));
        int rc = dpt_comm_send(t->comm, k, SRT_TAG_SCATTER, m, bytes);
        free(m);
        if (rc)
            return rc;
    }
    return DPT_OK;
}

/* Ranks 1 .. num_ps - 1: a service of the variables placed on it, for the
 * whole run: the workers' pushes and fetches, rank 0's gathers and
 * scatters, until rank 0 says FINISH. */
static int srt_shard_loop(srt_t *t)
{
    int rc = dpt_sr_begin(t->sr, -1, UINT64_MAX);
    int gather = 0;
    uint64_t gather_min = 0;
    size_t state = srt_state_floats(t, t->svc);
    while (!rc) {
        void *m = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        rc = dpt_comm_recv(t->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, t->timeout_s, &m, &n,
                           &src, &tag);
        if (rc == DPT_ETIMEDOUT)
            rc = dpt_error(rc,
                           "sync_replicas: service %d (rank %d) heard nothing for comm_timeout_s = "
                           "%g s",
                           t->svc, t->svc, t->timeout_s);
        if (rc)
            break;
        if (src == 0 && tag == SRT_TAG_FINISH) {
            free(m);
            return DPT_OK;
        } else if (src == 0 && tag == SRT_TAG_GATHER && n == 8) {
            memcpy(&gather_min, m, 8);
            gather = 1;
        } else if (src == 0 && tag == SRT_TAG_SCATTER && n == 16 + state * sizeof(float)) {
            uint64_t head[2];
            memcpy(head, m, sizeof head);
            srt_state_unpack(t, t->svc, (const float *)((const unsigned char *)m + 16));
            dpt_optim_set_t(dpt_sr_optimizer(t->sr), head[1]);
            dpt_sr_set_global_step(t->sr, head[0]);
            rc = dpt_sr_begin(t->sr, -1, UINT64_MAX);
        } else if (src == 0) {
            rc = dpt_error(DPT_EFORMAT,
                           "sync_replicas: service %d: a malformed message (tag %d) "
                           "from rank 0",
                           t->svc, tag);
        } else if (src >= t->P && src < t->P + t->N && !t->rlost[src - t->P]) {
            rc = srt_serve(t, src - t->P, tag, m, n);
        }
        free(m);
        if (!rc)
            rc = srt_answer_waiting(t);
        if (!rc && gather && dpt_sr_global_step(t->sr) >= gather_min) {
            size_t bytes = 8 + state * sizeof(float);
            unsigned char *out = malloc(bytes);
            if (!out)
                return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a gather");
            uint64_t ot = dpt_optim_get_t(dpt_sr_optimizer(t->sr));
            memcpy(out, &ot, 8);
            srt_state_pack(t, t->svc, (float *)(out + 8));
            rc = dpt_comm_send_async(t->comm, 0, SRT_TAG_GATHERED, out, bytes);
            gather = 0;
        }
    }
    return rc;
}

static int srt_iterate(void *self, dpt_train_result_t *r)
{
    srt_t *t = self;
    if (t->epoch >= t->epochs)
        return dpt_error(DPT_ESTATE, "sync_replicas: all %" PRIu64 " epochs are done", t->epochs);
    double t0 = dpt_now();
    /* Worker ranks rebuild the epoch's order from this position. */
    t->shuffle_pos = dpt_rng_tell(&t->shuffle_rng);
    srt_perm(t, t->shuffle_pos);
    dpt_sr_stats_t s0, s1;
    dpt_sr_get_stats(t->sr, &s0);
    uint64_t until = s0.global_step + t->steps_per_epoch;
    int rc, lost_before = 0;
    for (int i = 0; i < t->N && t->rlost; i++)
        lost_before += t->rlost[i];
    if (t->role == SRT_SERVICE) {
        rc = srt_remote_session(t, until);
        /* The other services' variables, for evaluation and checkpoints. */
        if (!rc && t->P > 1)
            rc = srt_gather(t, until);
        if (rc && t->remote_err[0])
            return dpt_error(rc, "%s (%s)", dpt_last_error(), t->remote_err);
        if (rc)
            return rc;
    } else if ((rc = dpt_sr_begin(t->sr, -1, until)) != 0 || (rc = srt_run_workers(t)) != 0) {
        return rc;
    }
    double train_time = dpt_now() - t0;
    dpt_sr_get_stats(t->sr, &s1);
    /* Workers that failed this epoch are lost for good; the epoch stands
     * when the service still made every step. */
    int first_failed = -1, newly_lost = 0;
    if (t->role == SRT_SERVICE) {
        int lost_now = 0;
        for (int i = 0; i < t->N; i++)
            lost_now += t->rlost[i];
        newly_lost = lost_now - lost_before;
        t->lost += newly_lost;
        for (int i = 0; i < t->N; i++) {
            t->w[i].loss = t->rloss[i];
            t->w[i].correct = t->rcorrect[i];
            t->w[i].rows_used = t->rrows[i];
            t->w[i].pushes = t->rpushes[i];
        }
    }
    for (int i = 0; i < t->nw; i++) {
        srt_worker_t *w = &t->w[i];
        if (w->lost || w->rc == 0)
            continue;
        w->lost = 1;
        t->lost++;
        newly_lost++;
        /* The worker that failed on its own, not one woken by the
         * service's failure (DPT_ECOMM "workers were lost"). */
        if (first_failed < 0 || (t->w[first_failed].rc == DPT_ECOMM && w->rc != DPT_ECOMM))
            first_failed = i;
    }
    if (s1.global_step < until) {
        if (first_failed >= 0)
            return dpt_error(t->w[first_failed].rc, "sync_replicas: worker %d failed: %s",
                             first_failed, t->w[first_failed].err);
        return dpt_error(DPT_ESTATE,
                         "sync_replicas: the epoch ended at global step %" PRIu64
                         " before step %" PRIu64,
                         s1.global_step, until);
    }
    r->note[0] = '\0';
    if (newly_lost && t->role == SRT_SERVICE)
        snprintf(r->note, sizeof r->note, "a worker failed, left out (%d of %d lost): %.120s",
                 t->lost, t->N, t->remote_err);
    else if (newly_lost)
        snprintf(r->note, sizeof r->note,
                 "worker %d failed, left out (%d of %d lost, R = %d go on): %.60s", first_failed,
                 t->lost, t->N, t->R, t->w[first_failed].err);
    else if (t->epoch == 0 && t->num_ps > 1) {
        uint64_t pb[SRT_MAX_PS];
        dpt_sr_placement(t->sr, NULL, pb);
        size_t len = (size_t)snprintf(r->note, sizeof r->note, "placement (bytes per service):");
        for (int k = 0; k < t->num_ps && len < sizeof r->note; k++)
            len +=
                (size_t)snprintf(r->note + len, sizeof r->note - len, " ps%d %" PRIu64, k, pb[k]);
    }
    double loss = 0.0, hits = 0.0;
    uint64_t used = 0, pushes = 0, touched = 0;
    for (int i = 0; i < t->N; i++) {
        loss += t->w[i].loss;
        hits += t->w[i].correct;
        used += t->w[i].rows_used;
        pushes += t->w[i].pushes;
        touched += t->w[i].rows_touched;
    }
    t->samples += used;
    t->epoch++;
    double te = dpt_now();
    dpt_eval_result_t ev, eva;
    if ((rc = srt_eval_params(t, dpt_sr_params(t->sr), &ev)) != 0)
        return rc;
    if (t->ema_decay > 0.0f && (rc = srt_eval_params(t, dpt_sr_ema(t->sr), &eva)) != 0)
        return rc;
    double eval_time = dpt_now() - te;
    uint64_t steps = s1.global_step - s0.global_step;
    uint64_t tokens = s1.tokens_taken - s0.tokens_taken;
    double train_loss = used ? loss / (double)used : (double)NAN;
    double rate = train_time > 0 ? (double)used / train_time : 0.0;

    r->iteration = t->epoch;
    r->timesteps_total = t->samples;
    r->progress = (double)t->epoch / (double)t->epochs;
    r->finished = t->epoch >= t->epochs;
    r->reward_mean = NAN;
    r->episodes_in_window = 0;
    if (t->ydim)
        snprintf(r->line, sizeof r->line,
                 "epoch %" PRIu64 "/%" PRIu64 "  step %" PRIu64 "  train loss %.4f  test loss "
                 "%.4f rmse %.4f r2 %.4f  stale %" PRIu64 "  %.0f samples/s",
                 t->epoch, t->epochs, s1.global_step, train_loss, ev.loss, ev.rmse, ev.r2,
                 t->base_stale + s1.stale_dropped, rate);
    else
        snprintf(r->line, sizeof r->line,
                 "epoch %" PRIu64 "/%" PRIu64 "  step %" PRIu64 "  train loss %.4f acc %.4f  "
                 "test loss %.4f acc %.4f  stale %" PRIu64 "  %.0f samples/s",
                 t->epoch, t->epochs, s1.global_step, train_loss,
                 used ? hits / (double)used : (double)NAN, ev.loss, ev.accuracy,
                 t->base_stale + s1.stale_dropped, rate);
    r->nmetrics = 0;
    dpt_train_result_add(r, "training_iteration", (double)t->epoch);
    dpt_train_result_add(r, "epoch", (double)t->epoch);
    dpt_train_result_add(r, "samples_total", (double)t->samples);
    dpt_train_result_add(r, "steps_total", (double)s1.global_step);
    dpt_train_result_add(r, "global_step", (double)s1.global_step);
    dpt_train_result_add(r, "train_loss", train_loss);
    if (!t->ydim)
        dpt_train_result_add(r, "train_accuracy", used ? hits / (double)used : (double)NAN);
    dpt_train_result_add(r, "test_loss", ev.loss);
    if (t->ydim) {
        dpt_train_result_add(r, "test_rmse", ev.rmse);
        dpt_train_result_add(r, "test_mae", ev.mae);
        dpt_train_result_add(r, "test_r2", ev.r2);
    } else {
        dpt_train_result_add(r, "test_accuracy", ev.accuracy);
    }
    if (t->ema_decay > 0.0f) {
        dpt_train_result_add(r, "test_loss_ema", eva.loss);
        dpt_train_result_add(r, t->ydim ? "test_r2_ema" : "test_accuracy_ema",
                             t->ydim ? eva.r2 : eva.accuracy);
    }
    dpt_train_result_add(r, "stale_gradients_dropped", (double)(t->base_stale + s1.stale_dropped));
    dpt_train_result_add(r, "workers_lost", (double)t->lost);
    dpt_train_result_add(r, "token_wait_ms",
                         tokens ? (s1.token_wait_s - s0.token_wait_s) * 1e3 / (double)tokens : 0.0);
    dpt_train_result_add(r, "bytes_pushed_per_step",
                         steps ? (double)(s1.bytes_pushed - s0.bytes_pushed) / (double)steps : 0.0);
    dpt_train_result_add(r, "step_time_ms", steps ? train_time * 1e3 / (double)steps : 0.0);
    if (t->bags && (t->role == SRT_LOCAL || srt_has_table(t, 0))) {
        dpt_train_result_add(r, "info/sync_replicas/rows_touched_per_push",
                             pushes ? (double)touched / (double)pushes : 0.0);
        dpt_train_result_add(r, "info/sync_replicas/rows_touched_per_step",
                             steps ? (double)(s1.sparse_rows_applied - s0.sparse_rows_applied) /
                                         (double)steps
                                   : 0.0);
        dpt_train_result_add(
            r, "info/sync_replicas/sparse_rows_pushed_per_step",
            steps ? (double)(s1.sparse_rows_pushed - s0.sparse_rows_pushed) / (double)steps : 0.0);
        dpt_train_result_add(r, "info/sync_replicas/sparse_bytes_per_step",
                             steps ? (double)(s1.sparse_bytes_pushed - s0.sparse_bytes_pushed) /
                                         (double)steps
                                   : 0.0);
    }
    dpt_train_result_add(r, "info/sync_replicas/grad_norm", s1.last_grad_norm);
    for (int i = 0; i < t->N; i++)
        dpt_train_result_add(r, srt_worker_metric[i],
                             (double)(t->base_contrib[i] + dpt_sr_worker_contributed(t->sr, i)));
    uint64_t pb[SRT_MAX_PS];
    dpt_sr_placement(t->sr, NULL, pb);
    for (int k = 0; k < t->num_ps; k++)
        dpt_train_result_add(r, srt_ps_metric[k], (double)pb[k]);
    dpt_train_result_add(r, "samples_per_s", rate);
    dpt_train_result_add(r, "time_this_iter_s", dpt_now() - t0);
    dpt_train_result_add(r, "timing_breakdown/train_time_ms", train_time * 1e3);
    dpt_train_result_add(r, "timing_breakdown/eval_time_ms", eval_time * 1e3);
    return DPT_OK;
}

/* ---- checkpoints ------------------------------------------------------------------ */

static int srt_checkpoint(void *self, dpt_safetensors_writer_t *w)
{
    srt_t *t = self;
    if (!w)
        return DPT_OK;
    int rc = dpt__optim_ckpt_save(w, t->vars, dpt_sr_params(t->sr), dpt_sr_optimizer(t->sr));
    if (!rc && t->ema_decay > 0.0f)
        rc = dpt_safetensors_add_arena(w, "ema.", t->vars, dpt_sr_ema(t->sr), t->vars->total);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "global_step", dpt_sr_global_step(t->sr));
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "shuffle_rng", dpt_rng_tell(&t->shuffle_rng));
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "samples_total", t->samples);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "workers_lost", (uint64_t)t->lost);
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

static int srt_restore(void *self, const dpt_safetensors_t *st)
{
    srt_t *t = self;
    dpt_optim_t *opt = dpt_sr_optimizer(t->sr);
    uint64_t pos, samples, step, epoch;
    int rc;
    if ((rc = dpt_safetensors_meta_u64(st, "shuffle_rng", &pos)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "samples_total", &samples)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "global_step", &step)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "training_iteration", &epoch)) != 0)
        return rc;
    if (epoch > t->epochs)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s is at epoch %" PRIu64 ", past epochs = %" PRIu64,
                         dpt_safetensors_path(st), epoch, t->epochs);
    uint64_t stale = 0, lost = 0;
    uint64_t contrib[SRT_MAX_WORKERS] = {0};
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
    dpt__optim_ckpt_t ck;
    if ((rc = dpt__optim_ckpt_load(st, t->vars, opt, &ck)) != 0)
        return rc;
    dpt_arena_t ema = {0};
    if (t->ema_decay > 0.0f &&
        ((rc = dpt_arena_init(&ema, t->vars->total)) != 0 ||
         (rc = dpt_safetensors_load_arena(st, "ema.", t->vars, ema.data, ema.count)) != 0)) {
        dpt_arena_deinit(&ema);
        dpt__optim_ckpt_free(&ck);
        return rc;
    }
    memcpy(dpt_sr_params(t->sr), ck.data, ck.count * sizeof(float));
    dpt__optim_ckpt_apply(&ck, opt);
    dpt__optim_ckpt_free(&ck);
    if (ema.data)
        memcpy(dpt_sr_ema(t->sr), ema.data, ema.count * sizeof(float));
    dpt_arena_deinit(&ema);
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
    /* Lost workers are history: this process starts all of its threads. */
    t->lost = (int)lost;
    if (t->role == SRT_SERVICE && t->P > 1)
        return srt_scatter(t);
    return DPT_OK;
}

static const dpt_vartable_t *srt_vars(void *self)
{
    srt_t *t = self;
    return t->vars;
}

static int srt_get_weights(void *self, float *out, size_t count)
{
    srt_t *t = self;
    if (count != t->vars->total)
        return dpt_error(DPT_EINVAL, "sync_replicas: weights of %zu floats, the model has %zu",
                         count, t->vars->total);
    memcpy(out, dpt_sr_params(t->sr), count * sizeof(float));
    return DPT_OK;
}

static int srt_evaluate(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    (void)episodes, (void)seed; /* the test set is fixed */
    srt_t *t = self;
    return srt_eval_params(t, t->eval_ema ? dpt_sr_ema(t->sr) : dpt_sr_params(t->sr), out);
}

static int srt_describe(void *self, dpt_safetensors_writer_t *w)
{
    srt_t *t = self;
    char ema[96];
    snprintf(ema, sizeof ema, "%s", "none");
    if (t->ema_decay > 0.0f)
        snprintf(ema, sizeof ema, "decay %g: tensors ema.<variable>, updated after each step",
                 (double)t->ema_decay);
    int rc;
    if ((rc = dpt_safetensors_set_meta(w, "dataset", t->bags ? "bags" : "")) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "data_location", t->where)) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "loss", dpt_loss_kind_name(t->loss))) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "layers", t->layers_text)) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "activation", dpt_layer_kind_name(t->act))) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "ema", ema)) != 0 ||
        (rc = dpt_safetensors_set_meta_u64(w, "replicas_to_aggregate", (uint64_t)t->R)) != 0 ||
        (rc = dpt_safetensors_set_meta_u64(w, "total_num_replicas", (uint64_t)t->N)) != 0)
        return rc;
    if (t->bags) {
        if ((rc = dpt_safetensors_set_meta_u64(w, "vocab", t->vocab)) != 0 ||
            (rc = dpt_safetensors_set_meta_u64(w, "embedding_dim", t->edim)) != 0 ||
            (rc = dpt_safetensors_set_meta_u64(w, "bag_ids", t->nids)) != 0)
            return rc;
        return dpt_safetensors_set_meta_u64(w, "num_targets", 1);
    }
    if ((rc = dpt_safetensors_set_meta_u64(w, "input_dim", t->dim)) != 0)
        return rc;
    if (t->ydim)
        return dpt_safetensors_set_meta_u64(w, "num_targets", t->ydim);
    return dpt_safetensors_set_meta_u64(w, "num_classes", t->classes);
}

static int srt_eval_checkpoint(const dpt_config_t *c, const dpt_safetensors_t *st, size_t episodes,
                               uint64_t seed, dpt_eval_result_t *out)
{
    if (strcmp(DPT_CS(c, dataset), "bags") != 0)
        return dpt__sup_eval_checkpoint(c, st, episodes, seed, out);
    /* Bags: the test bags come from the run's seed; the model from the
     * config it carries. */
    srt_t *t = calloc(1, sizeof *t);
    if (!t)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the evaluation");
    t->vocab = (size_t)DPT_CI(c, bags_vocab);
    t->edim = (size_t)DPT_CI(c, embedding_dim);
    t->nids = (size_t)DPT_CI(c, bags_ids);
    t->rows = (size_t)DPT_CI(c, bags_rows);
    t->test_rows = t->rows / 10 ? t->rows / 10 : 1;
    dpt_arena_t p = {0};
    int rc = srt_bags_make(t, (uint64_t)DPT_CI(c, seed));
    if (!rc)
        rc = srt_bags_model(c, t->vocab, t->edim, SRT_EVAL_BATCH, &t->table, &t->eval_seq,
                            t->layers, &t->nlayers, &t->act, t->layers_text, sizeof t->layers_text);
    t->vars = &t->table;
    t->eval_pooled = rc ? NULL : malloc(SRT_EVAL_BATCH * t->edim * sizeof(float));
    if (!rc && !t->eval_pooled)
        rc = dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the evaluation");
    if (!rc)
        rc = dpt_arena_init(&p, t->table.total);
    if (!rc)
        rc = dpt_safetensors_load_arena(st, DPT_CI(c, eval_ema) ? "ema." : "params.", &t->table,
                                        p.data, p.count);
    if (!rc)
        rc = srt_bags_eval(t->eval_seq, t->eval_pooled, p.data, &t->table, t->test_ids, t->test_y,
                           t->test_rows, t->nids, out);
    if (!rc) {
        out->mean_return = out->mean_length = out->accuracy = NAN;
        out->stochastic = 0;
    }
    dpt_arena_deinit(&p);
    srt_destroy(t);
    return rc;
}

/* ---- a worker rank (mpirun) ------------------------------------------------------- */

int dpt__sr_mpi_check(const dpt_config_t *c, int world)
{
    long long P = (long long)DPT_CI(c, num_ps), N = (long long)DPT_CI(c, total_num_replicas);
    if (P > SRT_MAX_PS)
        return dpt_error(DPT_EINVAL, "num_ps = %lld: at most %d services", P, SRT_MAX_PS);
    if (P + N != world)
        return dpt_error(DPT_EINVAL,
                         "num_ps = %lld and total_num_replicas = %lld: under mpirun the first "
                         "num_ps ranks are the services and every other rank one worker, so "
                         "they must add up to the %d ranks",
                         P, N, world);
    if (P > 1 && DPT_CF(c, grad_clip) > 0.0)
        return dpt_error(DPT_EINVAL,
                         "grad_clip = %g with num_ps = %lld under mpirun: each service would "
                         "clip only its part of the gradient; use grad_clip = 0 or one service",
                         DPT_CF(c, grad_clip), P);
    return DPT_OK;
}

/* Waits for the service's word to finish, answering nothing (a worker that
 * failed, or one whose gradients are no longer wanted). */
static int srt_wait_finish(srt_t *t)
{
    for (;;) {
        void *m = NULL;
        size_t n = 0;
        int rc = srt_recv(t, 0, SRT_TAG_GO, &m, &n, SRT_GO_WORDS * 8, "word from the service");
        uint64_t go[SRT_GO_WORDS];
        if (!rc)
            memcpy(go, m, sizeof go);
        free(m);
        if (rc)
            return rc;
        if (go[3])
            return dpt_comm_send(t->comm, 0, SRT_TAG_BYE, NULL, 0);
    }
}

static int srt_worker_loop(srt_t *t)
{
    srt_worker_t *w = &t->w[0];
    uint64_t pos = UINT64_MAX;
    size_t E = t->edim;
    int rc = dpt_comm_send(t->comm, 0, SRT_TAG_TOKEN, NULL, 0);
    while (!rc) {
        void *m = NULL;
        size_t n = 0;
        uint64_t go[SRT_GO_WORDS];
        if ((rc = srt_recv(t, 0, SRT_TAG_GO, &m, &n, sizeof go, "word from the service")) != 0)
            break;
        memcpy(go, m, sizeof go);
        free(m);
        if (go[3])
            return dpt_comm_send(t->comm, 0, SRT_TAG_BYE, NULL, 0);
        if (go[2] != pos) {
            pos = go[2];
            srt_perm(t, pos);
        }
        double loss = 0.0, correct = 0.0;
        t->cur_step = go[0];
        if ((rc = srt_grad(w, (size_t)go[1], &loss, &correct)) != 0) {
            /* This worker is out; the service decides whether the others
             * go on. */
            const char *e = dpt_last_error();
            rc = dpt_comm_send(t->comm, 0, SRT_TAG_FAIL, e, strlen(e) + 1);
            return rc ? rc : srt_wait_finish(t);
        }
        /* PUSH to every service: its dense part, and the sparse rows to
         * the one with the table. */
        for (int ks = 0; !rc && ks < t->P; ks++) {
            uint64_t k = srt_has_table(t, ks) ? w->grad_rows.n : 0;
            unsigned char *p = t->msg;
            memcpy(p, &go[0], 8);
            memcpy(p + 8, &k, 8);
            memcpy(p + 16, &loss, 8);
            memcpy(p + 24, &correct, 8);
            p += 32;
            size_t dense = srt_pack(t, ks, 1, w->grads.data, t->pack);
            memcpy(p, t->pack, dense * sizeof(float));
            p += dense * sizeof(float);
            if (k) {
                memcpy(p, w->grad_rows.indices, k * sizeof(int64_t));
                p += k * sizeof(int64_t);
                memcpy(p, w->grad_rows.values, k * E * sizeof(float));
                p += k * E * sizeof(float);
            }
            rc = dpt_comm_send(t->comm, ks, SRT_TAG_PUSH, t->msg, (size_t)(p - t->msg));
        }
        if (rc)
            break;
        rc = dpt_comm_send(t->comm, 0, SRT_TAG_TOKEN, NULL, 0);
    }
    return rc;
}

int dpt__sr_mpi_worker(const dpt_config_t *c, dpt_comm_t *comm,
                       const volatile sig_atomic_t *stop_flag)
{
    /* A signal stops the run at rank 0, which then tells every worker. */
    (void)stop_flag;
    srt_t *t;
    int shard = dpt_comm_rank(comm) < (int)DPT_CI(c, num_ps);
    int rc = srt_new(&t, c, NULL, shard ? SRT_SHARD : SRT_WORKER, comm);
    if (rc)
        return rc;
    rc = shard ? srt_shard_loop(t) : srt_worker_loop(t);
    srt_destroy(t);
    return rc;
}

static const dpt_trainer_ops_t srt_ops = {
    .job = DPT_JOB_SYNC_REPLICAS,
    .create = srt_create,
    .destroy = srt_destroy,
    .iterate = srt_iterate,
    .checkpoint = srt_checkpoint,
    .restore = srt_restore,
    .vars = srt_vars,
    .get_weights = srt_get_weights,
    .evaluate = srt_evaluate,
    .describe = srt_describe,
    .eval_checkpoint = srt_eval_checkpoint,
};

/* ---- the job ---------------------------------------------------------------------- */

static int srt_check(const dpt_config_t *c)
{
    int64_t b = DPT_CI(c, batch_size), d = DPT_CI(c, replicas_to_aggregate);
    if (b % d)
        return dpt_error(DPT_EINVAL,
                         "batch_size %lld must be divisible by replicas_to_aggregate %lld",
                         (long long)b, (long long)d);
    return DPT_OK;
}

/* The bags task is a regression: its loss, when not given, is mse. */
static int srt_fill(dpt_config_t *c)
{
    if (DPT_CI(c, dataset) != DPT_DATASET_BAGS || dpt_config_given(c, DPT_CFG_loss))
        return DPT_OK;
    return dpt__config_assign(c, DPT_CFG_loss, "mse", "default");
}

static size_t srt_threads(const dpt_config_t *c)
{
    return (size_t)DPT_CI(c, total_num_replicas);
}

/* Rank 0 is the first service and runs the loop alone; the other ranks are
 * the other services and the workers until rank 0 says the run is over. */
static int srt_plan(const dpt_config_t *c, int world, dpt__mpi_plan_t *p)
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
    .ops = &srt_ops,
    .keys = DPT_JOB_SYNC_REPLICAS,
    .check = srt_check,
    .fill = srt_fill,
    .threads = srt_threads,
    .plan = srt_plan,
};
