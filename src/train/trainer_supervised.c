/*
 * The supervised job as a trainer (dpt/train.h): an MLP classifier trained
 * on towers over a dataset (Fashion-MNIST IDX files, CSV files, or two
 * spirals made from the seed), one iterate() per epoch, evaluated on the
 * test set after each epoch, checkpointed and resumable bitwise.
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
#include "train_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* config.c's cross-check allows at most 8 hidden sizes. */
#define SUP_MAX_HIDDEN DPT__MAX_HIDDEN
#define SUP_MAX_LAYERS (2 * SUP_MAX_HIDDEN + 1)
/* Rows per chunk of a test-set evaluation. The chunking sets the order in
 * which the loss is summed, so the trainer and eval_checkpoint must use the
 * same value to agree bitwise (and it is the CLI's old value). */
#define SUP_EVAL_BATCH 1000

/* The choices of the `dataset` key, in the key table's order. */
#define SUP_DATASET_LIST(X)               \
    X(SUP_FASHION_MNIST, "fashion_mnist") \
    X(SUP_CSV, "csv")                     \
    X(SUP_SPIRALS, "spirals")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum sup_dataset {
#define SUP__DATASET_ENUM(sym, name) sym,
    SUP_DATASET_LIST(SUP__DATASET_ENUM)
#undef SUP__DATASET_ENUM
    SUP_DATASET_COUNT
} sup_dataset_t;
/* clang-format on */

static const char *const sup_dataset_names[SUP_DATASET_COUNT] = {
#define SUP__DATASET_NAME(sym, name) [sym] = name,
    SUP_DATASET_LIST(SUP__DATASET_NAME)
#undef SUP__DATASET_NAME
};

/* The model a config describes: hidden linear layers each followed by the
 * activation, then a linear output of `classes`. */
typedef struct sup_spec {
    size_t hidden[SUP_MAX_HIDDEN];
    int nhidden;
    dpt_layer_kind_t act;
    dpt_layer_spec_t layers[SUP_MAX_LAYERS];
    size_t nlayers;
} sup_spec_t;

typedef struct sup {
    sup_dataset_t dataset;
    char data_location[DPT_CONFIG_STR_MAX + 32];
    sup_spec_t spec;
    dpt_dataset_t train, test;
    dpt_mlp_t *mlp;      /* the towers' model (per-device batches) */
    dpt_mlp_t *eval_mlp; /* the same layout, SUP_EVAL_BATCH rows */
    /* or a model plug-in (key model): its towers' and evaluation instances */
    const dpt_model_plugin_t *plugin;
    void *ph, *eph;
    dpt_model_t pmodel, epmodel;
    char model_path[DPT_CONFIG_STR_MAX];
    const dpt_vartable_t *vars; /* the model's table */
    dpt_towers_t *towers;
    /* The current weights, copied out of the towers for evaluation and
     * checkpoints: a checkpoint's "params." tensors borrow it until the
     * writer is saved. */
    dpt_arena_t params;
    float *xs;            /* the epoch's shuffled copy of the training set [rows, dim] */
    int32_t *ys;          /* [rows] labels (classification) */
    float *yt;            /* [rows, target_dim] targets (regression) */
    dpt_loss_kind_t loss; /* DPT_LOSS_SOFTMAX_XENT, or a regression loss */
    size_t *perm;
    dpt_rng_t shuffle_rng;
    dpt_schedule_t sched;
    int shuffle;
    size_t batch;     /* batch_size: rows per step over all ranks and devices */
    dpt_comm_t *comm; /* the ranks' communicator when there are several; else NULL */
    int rank, nranks; /* 0 and 1 in one process */
    uint64_t epochs;
    uint64_t epoch, samples, steps; /* done so far (checkpointed) */
} sup_t;

/* A model's forward pass for evaluation (dpt_model_plugin_t.predict). */
typedef int (*sup_predict_fn)(void *handle, const float *params, const float *x, size_t rows,
                              const float **y);

static int sup_mlp_predict(void *handle, const float *params, const float *x, size_t rows,
                           const float **y)
{
    return dpt_mlp_predict(handle, params, x, rows, y);
}

static int sup_dataset_parse(const char *name, sup_dataset_t *out)
{
    for (int i = 0; i < SUP_DATASET_COUNT; i++)
        if (strcmp(name, sup_dataset_names[i]) == 0) {
            *out = (sup_dataset_t)i;
            return DPT_OK;
        }
    return dpt_error(DPT_EINVAL, "dataset = %s: unknown (known: fashion_mnist, csv, spirals)",
                     name);
}

/* Fills m from the config's hidden and activation, with `classes` outputs. */
static int sup_spec(const dpt_config_t *c, size_t classes, sup_spec_t *m)
{
    memset(m, 0, sizeof *m);
    int nh = dpt__config_sizes(c, DPT_CFG_hidden, m->hidden, SUP_MAX_HIDDEN);
    if (nh < 0)
        return nh;
    int rc = dpt_layer_kind_parse(DPT_CS(c, activation), &m->act);
    if (rc)
        return rc;
    m->nhidden = nh;
    for (int i = 0; i < nh; i++) {
        m->layers[m->nlayers++] =
            (dpt_layer_spec_t){DPT_LAYER_LINEAR, m->hidden[i], DPT_INIT_DEFAULT, 0};
        m->layers[m->nlayers++] = (dpt_layer_spec_t){m->act, 0, DPT_INIT_DEFAULT, 0};
    }
    m->layers[m->nlayers++] = (dpt_layer_spec_t){DPT_LAYER_LINEAR, classes, DPT_INIT_DEFAULT, 0};
    return DPT_OK;
}

/* "784,256,128,10": input, hidden and output sizes. */
static void sup_layers_text(const sup_spec_t *m, size_t in_dim, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "%zu", in_dim);
    for (int i = 0; i < m->nhidden && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, ",%zu", m->hidden[i]);
    if (len < size)
        snprintf(buf + len, size - len, ",%zu", m->layers[m->nlayers - 1].out);
}

/* The mean test loss (and, classifying, the correct count) of a model that
 * only predicts: the loss head applied to its outputs, chunk by chunk. */
static int sup_predict_loss(sup_predict_fn predict, void *h, const float *params,
                            const dpt_dataset_t *d, dpt_loss_kind_t loss, dpt_loss_out_t *out)
{
    memset(out, 0, sizeof *out);
    double sum = 0.0, correct = 0.0;
    size_t k = d->target_dim;
    for (size_t r0 = 0; r0 < d->rows; r0 += SUP_EVAL_BATCH) {
        size_t m = d->rows - r0 < SUP_EVAL_BATCH ? d->rows - r0 : SUP_EVAL_BATCH, hits = 0;
        const float *y;
        double l;
        int rc = predict(h, params, d->x + r0 * d->dim, m, &y);
        if (!rc && loss == DPT_LOSS_SOFTMAX_XENT)
            rc = dpt_loss_softmax_xent(y, d->labels + r0, m, (size_t)d->num_classes, NULL, &l,
                                       &hits);
        else if (!rc && loss == DPT_LOSS_HUBER)
            rc = dpt_loss_huber(y, d->targets + r0 * k, m, k, 1.0, NULL, &l);
        else if (!rc)
            rc = dpt_loss_mse(y, d->targets + r0 * k, m, k, NULL, &l);
        if (rc)
            return rc;
        sum += l * (double)m;
        correct += (double)hits;
    }
    out->loss = sum / (double)d->rows;
    out->correct = correct;
    out->rows = d->rows;
    return DPT_OK;
}

/* A plug-in instance (key model) for in_dim features, `outputs` outputs
 * and max_batch rows; *plugin is loaded on the first call. */
static int sup_plugin_instance(const dpt_config_t *c, size_t in_dim, size_t outputs,
                               dpt_loss_kind_t loss, size_t max_batch,
                               const dpt_model_plugin_t **plugin, dpt_model_t *model, void **handle)
{
    *handle = NULL;
    int rc = *plugin ? DPT_OK : dpt_model_plugin_load(DPT_CS(c, model), plugin);
    if (rc)
        return rc;
    dpt_model_spec_t spec = {in_dim, outputs, loss, max_batch};
    memset(model, 0, sizeof *model);
    if ((rc = (*plugin)->create(&spec, model, handle)) != 0)
        return dpt_error(rc, "model plug-in %s (%s): %s", DPT_CS(c, model), (*plugin)->name,
                         dpt_last_error());
    if (!model->vars || !model->loss_grad || model->max_batch < max_batch) {
        (*plugin)->destroy(*handle);
        *handle = NULL;
        return dpt_error(DPT_EINVAL,
                         "model plug-in %s (%s): its model lacks a variable table or loss_grad, "
                         "or takes fewer than %zu rows",
                         DPT_CS(c, model), (*plugin)->name, max_batch);
    }
    return DPT_OK;
}

/* Loads the data of config c. train may be NULL (only the test split is
 * read; spirals are generated whole and the training part dropped). With
 * train NULL and a CSV file, `classes` bounds the test labels; otherwise
 * the test labels must fit the training set's classes. */
static int sup_load_data(const dpt_config_t *c, sup_dataset_t kind, dpt_dataset_t *train,
                         dpt_dataset_t *test, int classes)
{
    int rc;
    memset(test, 0, sizeof *test);
    if (kind == SUP_FASHION_MNIST) {
        if (train && (rc = dpt_dataset_load_mnist(train, DPT_CS(c, data_dir), DPT_SPLIT_TRAIN)))
            return rc;
        return dpt_dataset_load_mnist(test, DPT_CS(c, data_dir), DPT_SPLIT_TEST);
    }
    if (kind == SUP_SPIRALS) {
        size_t points = (size_t)DPT_CI(c, spirals_points);
        dpt_dataset_t tmp;
        rc = dpt_dataset_make_spirals(train ? train : &tmp, test, points, points / 4,
                                      (uint64_t)DPT_CI(c, seed));
        if (!rc && !train)
            dpt_dataset_deinit(&tmp);
        return rc;
    }
    dpt_csv_options_t o = {0};
    o.header = 1;
    o.label_name = DPT_CS(c, label_column);
    if (DPT_CS(c, target_columns)[0])
        o.target_names = DPT_CS(c, target_columns);
    if (!DPT_CS(c, test_csv)[0] || (train && !DPT_CS(c, train_csv)[0]))
        return dpt_error(DPT_EINVAL, "dataset = csv needs train_csv and test_csv");
    if (train) {
        if ((rc = dpt_dataset_load_csv(train, DPT_CS(c, train_csv), &o)) != 0)
            return rc;
        classes = train->num_classes;
    }
    o.num_classes = classes;
    if ((rc = dpt_dataset_load_csv(test, DPT_CS(c, test_csv), &o)) != 0)
        return rc;
    if (train && test->dim != train->dim)
        return dpt_error(DPT_EINVAL, "dataset %s has %zu features, %s has %zu", DPT_CS(c, test_csv),
                         test->dim, DPT_CS(c, train_csv), train->dim);
    if (train && test->target_dim != train->target_dim)
        return dpt_error(DPT_EINVAL, "dataset %s has %zu targets, %s has %zu", DPT_CS(c, test_csv),
                         test->target_dim, DPT_CS(c, train_csv), train->target_dim);
    return DPT_OK;
}

/* Where the test data of config c come from, for messages and metadata. */
static void sup_data_location(const dpt_config_t *c, sup_dataset_t kind, char *buf, size_t size)
{
    if (kind == SUP_FASHION_MNIST)
        snprintf(buf, size, "%s", DPT_CS(c, data_dir));
    else if (kind == SUP_CSV)
        snprintf(buf, size, "%s", DPT_CS(c, test_csv));
    else
        snprintf(buf, size, "seed %" PRId64, DPT_CI(c, seed));
}

static void sup_destroy(void *self)
{
    sup_t *s = self;
    if (!s)
        return;
    dpt_towers_destroy(s->towers);
    dpt_mlp_destroy(s->mlp);
    dpt_mlp_destroy(s->eval_mlp);
    if (s->plugin) {
        s->plugin->destroy(s->ph);
        s->plugin->destroy(s->eph);
    }
    dpt_arena_deinit(&s->params);
    dpt_dataset_deinit(&s->train);
    dpt_dataset_deinit(&s->test);
    free(s->xs);
    free(s->ys);
    free(s->yt);
    free(s->perm);
    free(s);
}

/* The model's batch of `rows` samples: features x [rows, dim] and labels
 * [rows] (classification) or targets y [rows, ydim] (regression, ydim > 0)
 * (borrowed; NULL for a layout of 0 rows). */
static dpt_batch_t sup_batch(size_t rows, size_t dim, float *x, int32_t *labels, float *y,
                             size_t ydim)
{
    dpt_batch_t b;
    dpt_batch_init(&b, rows);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, dim, 0, x);
    if (ydim)
        dpt_batch_add(&b, DPT_MLP_Y, DPT_F32, ydim, 0, y);
    else
        dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, labels);
    return b;
}

/* A dataset's batch (its labels or targets). */
static dpt_batch_t sup_data_batch(const dpt_dataset_t *d)
{
    return sup_batch(d->rows, d->dim, d->x, d->labels, d->targets, d->target_dim);
}

/* Regression figures of a model over a test set: root mean squared error
 * and mean absolute error over every target value, and R^2 per target
 * column averaged over the columns (scikit-learn's r2_score). */
typedef struct sup_regress {
    double rmse, mae, r2;
} sup_regress_t;

static int sup_regress_eval(sup_predict_fn predict, void *h, const float *params,
                            const dpt_dataset_t *d, sup_regress_t *out)
{
    size_t k = d->target_dim, n = d->rows;
    double *mean = calloc(2 * k, sizeof *mean), *ss_res = mean + k;
    if (!mean)
        return dpt_error(DPT_ENOMEM, "regression metrics: out of memory");
    double se = 0.0, ae = 0.0;
    int rc = DPT_OK;
    for (size_t i = 0; i < n * k; i++)
        mean[i % k] += (double)d->targets[i];
    for (size_t j = 0; j < k; j++)
        mean[j] /= (double)n;
    for (size_t r0 = 0; r0 < n && !rc; r0 += SUP_EVAL_BATCH) {
        size_t m = n - r0 < SUP_EVAL_BATCH ? n - r0 : SUP_EVAL_BATCH;
        const float *y;
        if ((rc = predict(h, params, d->x + r0 * d->dim, m, &y)) != 0)
            break;
        for (size_t i = 0; i < m * k; i++) {
            double e = (double)y[i] - (double)d->targets[r0 * k + i];
            se += e * e;
            ae += fabs(e);
            ss_res[i % k] += e * e;
        }
    }
    if (!rc) {
        double r2 = 0.0;
        for (size_t j = 0; j < k; j++) {
            double ss_tot = 0.0;
            for (size_t i = 0; i < n; i++) {
                double e = (double)d->targets[i * k + j] - mean[j];
                ss_tot += e * e;
            }
            /* A constant column: 1 when predicted exactly, else 0 (as
             * scikit-learn). */
            r2 += ss_tot > 0.0 ? 1.0 - ss_res[j] / ss_tot : (ss_res[j] == 0.0 ? 1.0 : 0.0);
        }
        out->rmse = sqrt(se / (double)(n * k));
        out->mae = ae / (double)(n * k);
        out->r2 = r2 / (double)k;
    }
    free(mean);
    return rc;
}

/* The model, the towers and the epoch buffers (the data are loaded). */
static int sup_build(sup_t *s, const dpt_config_t *c)
{
    int rc;
    size_t rows = s->train.rows, dim = s->train.dim, ydim = s->train.target_dim;
    s->loss = (dpt_loss_kind_t)DPT_CI(c, loss); /* the key's choices are the loss list */
    size_t outputs = ydim ? ydim : (size_t)s->train.num_classes;
    if ((rc = sup_spec(c, outputs, &s->spec)) != 0)
        return rc;
    int devices = (int)DPT_CI(c, num_devices);
    size_t batch = (size_t)DPT_CI(c, batch_size);
    size_t ranks = (size_t)s->nranks;
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
                             sup_dataset_names[s->dataset], rows, ranks, devices);
    }
    if (batch % (size_t)devices)
        return dpt_error(DPT_EINVAL, "batch_size %zu must be divisible by num_devices %d", batch,
                         devices);
    if (rows < (size_t)devices)
        return dpt_error(DPT_EINVAL,
                         "the %s training set has %zu rows, fewer than "
                         "num_devices %d",
                         sup_dataset_names[s->dataset], rows, devices);
    s->batch = batch;
    size_t pdb = batch / (size_t)devices / ranks;
    dpt_towers_config_t tc = dpt_towers_defaults();
    dpt_optim_kind_t kind;
    if ((rc = dpt_towers_mode_parse(DPT_CS(c, towers_mode), &tc.mode)) != 0 ||
        (rc = dpt_optim_kind_parse(DPT_CS(c, optimizer), &kind)) != 0 ||
        (rc = dpt_schedule_kind_parse(DPT_CS(c, lr_schedule), &s->sched.kind)) != 0)
        return rc;
    tc.num_devices = devices;
    tc.max_per_device_batch_size = pdb;
    tc.max_load_rows = rows;
    tc.grad_clip = DPT_CF(c, grad_clip);
    tc.comm_timeout_s = DPT_CF(c, comm_timeout_s);
    /* Enum keys' values are the enums' values (their lists make the choices). */
    tc.comm_algorithm = (dpt_comm_algorithm_t)DPT_CI(c, allreduce_algorithm);
    tc.reduce_sum = (dpt_reduce_op_t)DPT_CI(c, reduce_op) == DPT_REDUCE_SUM;
    tc.async_scale = (float)DPT_CF(c, async_scale);
    tc.comm = s->comm;
    tc.bucket_bytes = (size_t)DPT_CI(c, bucket_bytes);
    tc.optim = dpt_optim_defaults(kind);
    tc.optim.momentum = (float)DPT_CF(c, momentum);
    tc.optim.nesterov = (int)DPT_CI(c, nesterov);
    tc.optim.eps = (float)DPT_CF(c, adam_eps);
    tc.optim.weight_decay = (float)DPT_CF(c, weight_decay);
    /* nesterov is a momentum setting; the other optimizers refuse it. */
    if (tc.optim.kind != DPT_OPTIM_MOMENTUM)
        tc.optim.nesterov = 0;
    dpt_model_t model;
    if (DPT_CS(c, model)[0]) {
        if ((rc = sup_plugin_instance(c, dim, outputs, s->loss, pdb, &s->plugin, &s->pmodel,
                                      &s->ph)) != 0 ||
            (rc = sup_plugin_instance(c, dim, outputs, s->loss, SUP_EVAL_BATCH, &s->plugin,
                                      &s->epmodel, &s->eph)) != 0)
            return rc;
        model = s->pmodel;
        snprintf(s->model_path, sizeof s->model_path, "%s", DPT_CS(c, model));
    } else {
        if ((rc = dpt_mlp_create(&s->mlp, dim, s->spec.layers, s->spec.nlayers, s->loss, pdb)) !=
                0 ||
            (rc = dpt_mlp_create(&s->eval_mlp, dim, s->spec.layers, s->spec.nlayers, s->loss,
                                 SUP_EVAL_BATCH)) != 0)
            return rc;
        model = dpt_mlp_model(s->mlp);
    }
    s->vars = model.vars;
    dpt_batch_t lay = sup_batch(0, dim, NULL, NULL, NULL, ydim);
    if ((rc = dpt_towers_create(&s->towers, &model, &lay, &tc)) != 0)
        return rc;
    size_t n = model.vars->total;
    if ((rc = dpt_arena_init(&s->params, n)) != 0)
        return rc;
    uint64_t seed = (uint64_t)DPT_CI(c, seed);
    dpt_rng_t init;
    dpt_rng_init(&init, seed, 0, 0, DPT_RNG_INIT);
    if (s->plugin)
        s->plugin->init_params(s->ph, s->params.data, &init);
    else
        dpt_mlp_init_params(s->mlp, s->params.data, &init);
    dpt_rng_init(&s->shuffle_rng, seed, 0, 0, DPT_RNG_SHUFFLE);
    if (dim && rows > ((size_t)-1) / sizeof(float) / dim)
        return dpt_error(DPT_EOVERFLOW,
                         "the %s training set: %zu rows of %zu features "
                         "overflow the size",
                         sup_dataset_names[s->dataset], rows, dim);
    if (ydim && rows > ((size_t)-1) / sizeof(float) / ydim)
        return dpt_error(DPT_EOVERFLOW, "the training set: %zu rows of %zu targets overflow", rows,
                         ydim);
    s->xs = malloc(rows * dim * sizeof(float));
    s->ys = ydim ? NULL : malloc(rows * sizeof(int32_t));
    s->yt = ydim ? malloc(rows * ydim * sizeof(float)) : NULL;
    s->perm = malloc(rows * sizeof(size_t));
    if (!s->xs || !(s->ys || s->yt) || !s->perm)
        return dpt_error(DPT_ENOMEM, "supervised: cannot allocate the epoch buffers (%zu rows)",
                         rows);
    /* Steps per epoch as the towers take them: rows / batch_size, or one
     * smaller step when the training set is smaller than a batch. */
    uint64_t steps_per_epoch = rows >= batch ? rows / batch : 1;
    s->epochs = (uint64_t)DPT_CI(c, epochs);
    s->sched.lr0 = (float)DPT_CF(c, lr);
    s->sched.lr_end = (float)DPT_CF(c, lr_end);
    s->sched.total_steps = s->epochs * steps_per_epoch;
    s->shuffle = (int)DPT_CI(c, shuffle);
    return dpt_towers_set_weights(s->towers, s->params.data, n);
}

static int sup_create(void **out, const dpt_config_t *c, const dpt_trainer_env_t *env)
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
    int rc = sup_dataset_parse(DPT_CS(c, dataset), &s->dataset);
    if (rc)
        goto fail;
    sup_data_location(c, s->dataset, s->data_location, sizeof s->data_location);
    if ((rc = sup_load_data(c, s->dataset, &s->train, &s->test, 0)) != 0 ||
        (rc = sup_build(s, c)) != 0)
        goto fail;
    *out = s;
    return DPT_OK;
fail:
    sup_destroy(s);
    return rc;
}

/* Test-set loss and accuracy of the towers' current weights (copied into
 * s->params on the way). */
static int sup_eval(sup_t *s, dpt_loss_out_t *out)
{
    int rc = dpt_towers_get_weights(s->towers, s->params.data, s->params.count);
    if (rc)
        return rc;
    if (s->plugin)
        return sup_predict_loss(s->plugin->predict, s->eph, s->params.data, &s->test, s->loss, out);
    dpt_batch_t tb = sup_data_batch(&s->test);
    return dpt_mlp_evaluate(s->eval_mlp, s->params.data, &tb, out);
}

/* One epoch. A failure inside it (a refused step) leaves the trainer part
 * way through the epoch; a checkpoint restores a consistent state. */
static int sup_iterate(void *self, dpt_train_result_t *r)
{
    sup_t *s = self;
    if (s->epoch >= s->epochs)
        return dpt_error(DPT_ESTATE, "supervised: all %" PRIu64 " epochs are done", s->epochs);
    double t0 = dpt_now();
    size_t rows = s->train.rows, dim = s->train.dim, ydim = s->train.target_dim;
    /* Each epoch's order depends only on the stream position, so a resumed
     * run shuffles exactly as an uninterrupted one. */
    for (size_t i = 0; i < rows; i++)
        s->perm[i] = i;
    if (s->shuffle)
        dpt_rng_shuffle(&s->shuffle_rng, s->perm, rows);
    /* One process: the whole shuffled set, split by the towers. Several
     * ranks: the batches are those of one process with one device:
     * batch_size rows, or one smaller batch (a multiple of ranks x devices)
     * when the set is smaller. This rank takes its share of every batch,
     * and its device d the d-th part of that share: the towers give device
     * d the d-th 1/D of the loaded rows, so those hold device d's part of
     * every batch, batch after batch, and step k uses batch k everywhere. */
    size_t nbatches = rows, share = 0, pdb = 0, batch = rows, take = rows;
    if (s->nranks > 1) {
        size_t P = (size_t)s->nranks, D = (size_t)dpt_towers_get_config(s->towers)->num_devices;
        batch = rows >= s->batch ? s->batch : rows - rows % (P * D);
        nbatches = rows >= s->batch ? rows / s->batch : 1;
        share = batch / P;
        pdb = share / D;
        take = nbatches * share;
    }
    for (size_t i = 0; i < take; i++) {
        size_t src = s->perm[i];
        if (s->nranks > 1) {
            size_t dev = i / (nbatches * pdb), k = i % (nbatches * pdb);
            src = s->perm[(k / pdb) * batch + (size_t)s->rank * share + dev * pdb + k % pdb];
        }
        memcpy(s->xs + i * dim, s->train.x + src * dim, dim * sizeof(float));
        if (s->yt)
            memcpy(s->yt + i * ydim, s->train.targets + src * ydim, ydim * sizeof(float));
        else
            s->ys[i] = s->train.labels[src];
    }
    dpt_batch_t b = sup_batch(take, dim, s->xs, s->ys, s->yt, ydim);
    dpt_towers_load_info_t li;
    int rc = dpt_towers_load_ex(s->towers, 0, &b, pdb, &li);
    if (rc)
        return rc;
    size_t dropped = s->nranks > 1 ? rows - nbatches * batch : li.rows_dropped;
    double loss = 0.0, hits = 0.0;
    size_t used = 0;
    double tl = dpt_now();
    for (size_t k = 0; k < li.steps; k++) {
        dpt_towers_stats_t st;
        float lr = dpt_schedule_lr(&s->sched, s->steps);
        if ((rc = dpt_towers_optimize(s->towers, 0, k * li.per_device_batch, lr, &st)) != 0)
            return rc;
        s->steps++;
        loss += st.loss * (double)st.rows;
        hits += st.correct;
        used += st.rows;
    }
    double train_time = dpt_now() - tl;
    if (s->comm) {
        /* The epoch's figures over every rank's rows (the same on all). */
        float sums[2] = {(float)loss, (float)hits};
        if ((rc = dpt_comm_allreduce(s->comm, sums, 2, DPT_REDUCE_SUM)) != 0)
            return rc;
        loss = (double)sums[0];
        hits = (double)sums[1];
        used = nbatches * batch;
        /* Every rank's weights and optimizer state are the same bits (a
         * collective: every rank checks after the same epoch). */
        if ((rc = dpt_towers_check_replicas(s->towers)) != 0)
            return rc;
    }
    s->samples += used;
    s->epoch++;
    double te = dpt_now();
    dpt_loss_out_t test;
    if ((rc = sup_eval(s, &test)) != 0)
        return rc;
    sup_regress_t reg = {NAN, NAN, NAN};
    if (ydim && (rc = sup_regress_eval(s->plugin ? s->plugin->predict : sup_mlp_predict,
                                       s->plugin ? s->eph : (void *)s->eval_mlp, s->params.data,
                                       &s->test, &reg)) != 0)
        return rc;
    double eval_time = dpt_now() - te;
    double train_loss = used ? loss / (double)used : (double)NAN;
    double train_acc = used ? hits / (double)used : (double)NAN;
    double test_acc = test.correct / (double)s->test.rows;
    double rate = train_time > 0 ? (double)used / train_time : 0.0;

    r->iteration = s->epoch;
    r->timesteps_total = s->samples;
    r->progress = (double)s->epoch / (double)s->epochs;
    r->finished = s->epoch >= s->epochs;
    r->reward_mean = NAN;
    r->episodes_in_window = 0;
    if (ydim)
        snprintf(r->line, sizeof r->line,
                 "epoch %" PRIu64 "/%" PRIu64 "  train loss %.4f  test loss %.4f rmse %.4f "
                 "mae %.4f r2 %.4f  %.0f samples/s",
                 s->epoch, s->epochs, train_loss, test.loss, reg.rmse, reg.mae, reg.r2, rate);
    else
        snprintf(r->line, sizeof r->line,
                 "epoch %" PRIu64 "/%" PRIu64 "  train loss %.4f acc %.4f  test loss %.4f acc "
                 "%.4f  %.0f samples/s",
                 s->epoch, s->epochs, train_loss, train_acc, test.loss, test_acc, rate);
    r->nmetrics = 0;
    dpt_train_result_add(r, "training_iteration", (double)s->epoch);
    dpt_train_result_add(r, "epoch", (double)s->epoch);
    dpt_train_result_add(r, "samples_total", (double)s->samples);
    dpt_train_result_add(r, "steps_total", (double)s->steps);
    dpt_train_result_add(r, "train_loss", train_loss);
    if (ydim) {
        dpt_train_result_add(r, "test_loss", test.loss);
        dpt_train_result_add(r, "test_rmse", reg.rmse);
        dpt_train_result_add(r, "test_mae", reg.mae);
        dpt_train_result_add(r, "test_r2", reg.r2);
    } else {
        dpt_train_result_add(r, "train_accuracy", train_acc);
        dpt_train_result_add(r, "test_loss", test.loss);
        dpt_train_result_add(r, "test_accuracy", test_acc);
    }
    dpt_train_result_add(r, "lr", (double)dpt_schedule_lr(&s->sched, s->steps));
    dpt_train_result_add(r, "rows_dropped", (double)dropped);
    dpt_train_result_add(r, "samples_per_s", rate);
    dpt_train_result_add(r, "time_this_iter_s", dpt_now() - t0);
    dpt_train_result_add(r, "timing_breakdown/train_time_ms", train_time * 1e3);
    dpt_train_result_add(r, "timing_breakdown/eval_time_ms", eval_time * 1e3);
    return DPT_OK;
}

static int sup_checkpoint(void *self, dpt_safetensors_writer_t *w)
{
    sup_t *s = self;
    if (!w)
        return DPT_OK;
    int rc = dpt_towers_get_weights(s->towers, s->params.data, s->params.count);
    if (!rc)
        rc = dpt__optim_ckpt_save(w, s->vars, s->params.data, dpt_towers_optimizer(s->towers));
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "shuffle_rng", dpt_rng_tell(&s->shuffle_rng));
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "samples_total", s->samples);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "steps_total", s->steps);
    return rc;
}

static int sup_restore(void *self, const dpt_safetensors_t *st)
{
    sup_t *s = self;
    dpt_optim_t *opt = dpt_towers_optimizer(s->towers);
    uint64_t pos, samples, steps, epoch;
    int rc;
    if ((rc = dpt_safetensors_meta_u64(st, "shuffle_rng", &pos)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "samples_total", &samples)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "steps_total", &steps)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "training_iteration", &epoch)) != 0)
        return rc;
    if (epoch > s->epochs)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s is at epoch %" PRIu64 ", past epochs = %" PRIu64,
                         dpt_safetensors_path(st), epoch, s->epochs);
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

static const dpt_vartable_t *sup_vars(void *self)
{
    sup_t *s = self;
    return s->vars;
}

static int sup_get_weights(void *self, float *out, size_t count)
{
    sup_t *s = self;
    return dpt_towers_get_weights(s->towers, out, count);
}

static int sup_evaluate(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    (void)episodes, (void)seed; /* the test set is fixed */
    sup_t *s = self;
    out->count = 0;
    out->mean_return = out->mean_length = out->loss = out->accuracy = NAN;
    out->rmse = out->mae = out->r2 = NAN;
    dpt_loss_out_t o;
    int rc = sup_eval(s, &o);
    if (rc)
        return rc;
    out->count = s->test.rows;
    out->loss = o.loss;
    if (!s->test.target_dim) {
        out->accuracy = o.correct / (double)s->test.rows;
        return DPT_OK;
    }
    sup_regress_t reg;
    if ((rc = sup_regress_eval(s->plugin ? s->plugin->predict : sup_mlp_predict,
                               s->plugin ? s->eph : (void *)s->eval_mlp, s->params.data, &s->test,
                               &reg)) != 0)
        return rc;
    out->rmse = reg.rmse;
    out->mae = reg.mae;
    out->r2 = reg.r2;
    return DPT_OK;
}

static int sup_describe(void *self, dpt_safetensors_writer_t *w)
{
    sup_t *s = self;
    char layers[16 * (SUP_MAX_HIDDEN + 2)];
    sup_layers_text(&s->spec, s->train.dim, layers, sizeof layers);
    int rc;
    if ((rc = dpt_safetensors_set_meta(w, "dataset", sup_dataset_names[s->dataset])) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "data_location", s->data_location)) != 0 ||
        (rc = dpt_safetensors_set_meta_u64(w, "input_dim", s->train.dim)) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "loss", dpt_loss_kind_name(s->loss))) != 0 ||
        (rc = s->plugin ? dpt_safetensors_set_meta(w, "model", s->plugin->name)
                        : dpt_safetensors_set_meta(w, "layers", layers)) != 0 ||
        (s->plugin && (rc = dpt_safetensors_set_meta(w, "model_path", s->model_path)) != 0))
        return rc;
    if (s->train.target_dim)
        rc = dpt_safetensors_set_meta_u64(w, "num_targets", (uint64_t)s->train.target_dim);
    else
        rc = dpt_safetensors_set_meta_u64(w, "num_classes", (uint64_t)s->train.num_classes);
    if (rc)
        return rc;
    return dpt_safetensors_set_meta(w, "activation", dpt_layer_kind_name(s->spec.act));
}

/* The number of classes of a checkpoint's model: its "num_classes"
 * metadata, or else the rows of its output layer's weight. */
static int sup_ckpt_classes(const dpt_safetensors_t *st, const sup_spec_t *m, size_t *classes)
{
    uint64_t k = 0;
    int rc = dpt_safetensors_meta_u64(st, "num_classes", &k);
    if (rc == DPT_OK) {
        if (k < 1 || k > 1000000)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: num_classes = %" PRIu64 " is out of range",
                             dpt_safetensors_path(st), k);
        *classes = (size_t)k;
        return DPT_OK;
    }
    if (rc != DPT_ENOENT)
        return rc;
    char name[64];
    snprintf(name, sizeof name, "params.%zu.weight", m->nlayers - 1);
    const dpt_safetensors_tensor_t *out_w = dpt_safetensors_find(st, name);
    if (!out_w || out_w->ndim != 2 || out_w->shape[0] < 1)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s does not match the config's model (%d "
                         "hidden layers): it has no num_classes metadata and no 2-D output "
                         "layer %s",
                         dpt_safetensors_path(st), m->nhidden, name);
    *classes = out_w->shape[0];
    return DPT_OK;
}

/* The weights a checkpoint's evaluation reads: "params.", or the moving
 * average "ema." of a sync_replicas run with eval_ema. */
static const char *sup_weights_prefix(const dpt_config_t *c)
{
    return dpt_config_applies(c, DPT_CFG_eval_ema) && DPT_CI(c, eval_ema) ? "ema." : "params.";
}

static int sup_eval_checkpoint(const dpt_config_t *c, const dpt_safetensors_t *st, size_t episodes,
                               uint64_t seed, dpt_eval_result_t *out)
{
    (void)episodes, (void)seed; /* the test set is fixed */
    const char *path = dpt_safetensors_path(st);
    out->count = 0;
    out->mean_return = out->mean_length = out->loss = out->accuracy = NAN;
    out->rmse = out->mae = out->r2 = NAN;
    dpt_dataset_t test;
    memset(&test, 0, sizeof test);
    dpt_mlp_t *mlp = NULL;
    const dpt_model_plugin_t *plug = NULL;
    void *ph = NULL;
    dpt_arena_t p = {0};
    sup_spec_t m;
    sup_dataset_t kind = SUP_FASHION_MNIST;
    size_t classes = 0;
    char where[DPT_CONFIG_STR_MAX + 32];
    int rc;
    dpt_loss_kind_t loss = (dpt_loss_kind_t)DPT_CI(c, loss);
    int regress = loss != DPT_LOSS_SOFTMAX_XENT;
    if ((rc = sup_dataset_parse(DPT_CS(c, dataset), &kind)) != 0 ||
        (rc = sup_spec(c, 1, &m)) != 0 || (!regress && (rc = sup_ckpt_classes(st, &m, &classes))))
        goto done;
    sup_data_location(c, kind, where, sizeof where);
    if ((rc = sup_load_data(c, kind, NULL, &test, (int)classes)) != 0)
        goto done;
    if (regress) {
        uint64_t k = 0;
        if (dpt_safetensors_meta_u64(st, "num_targets", &k) == DPT_OK && k != test.target_dim) {
            rc = dpt_error(DPT_EINVAL,
                           "checkpoint %s predicts %" PRIu64 " targets, the test data "
                           "(%s) have %zu",
                           path, k, where, test.target_dim);
            goto done;
        }
        classes = test.target_dim;
    }
    m.layers[m.nlayers - 1].out = classes;
    if (!regress && (size_t)test.num_classes > classes) {
        rc = dpt_error(DPT_EINVAL, "checkpoint %s has %zu classes, the %s test data (%s) have %d",
                       path, classes, sup_dataset_names[kind], where, test.num_classes);
        goto done;
    }
    uint64_t in_dim = 0;
    if (dpt_safetensors_meta_u64(st, "input_dim", &in_dim) == DPT_OK && in_dim != test.dim) {
        rc = dpt_error(DPT_EINVAL,
                       "checkpoint %s takes %" PRIu64 " features, the %s test data "
                       "(%s) have %zu",
                       path, in_dim, sup_dataset_names[kind], where, test.dim);
        goto done;
    }
    const dpt_vartable_t *vars;
    if (DPT_CS(c, model)[0]) {
        dpt_model_t pm;
        if ((rc = sup_plugin_instance(c, test.dim, classes, loss, SUP_EVAL_BATCH, &plug, &pm,
                                      &ph)) != 0)
            goto done;
        vars = pm.vars;
    } else {
        if ((rc = dpt_mlp_create(&mlp, test.dim, m.layers, m.nlayers, loss, SUP_EVAL_BATCH)) != 0)
            goto done;
        vars = dpt_mlp_vars(mlp);
    }
    if ((rc = dpt_arena_init(&p, vars->total)) != 0 ||
        (rc = dpt_safetensors_load_arena(st, sup_weights_prefix(c), vars, p.data, p.count)) != 0)
        goto done;
    dpt_batch_t b = sup_data_batch(&test);
    dpt_loss_out_t o;
    if ((rc = plug ? sup_predict_loss(plug->predict, ph, p.data, &test, loss, &o)
                   : dpt_mlp_evaluate(mlp, p.data, &b, &o)) != 0)
        goto done;
    out->count = test.rows;
    out->loss = o.loss;
    if (regress) {
        sup_regress_t reg;
        if ((rc = sup_regress_eval(plug ? plug->predict : sup_mlp_predict, plug ? ph : (void *)mlp,
                                   p.data, &test, &reg)) != 0)
            goto done;
        out->rmse = reg.rmse;
        out->mae = reg.mae;
        out->r2 = reg.r2;
    } else {
        out->accuracy = o.correct / (double)test.rows;
    }
done:
    dpt_arena_deinit(&p);
    dpt_mlp_destroy(mlp);
    if (plug)
        plug->destroy(ph);
    dpt_dataset_deinit(&test);
    return rc;
}

static const dpt_trainer_ops_t sup_ops = {
    .job = DPT_JOB_SUPERVISED,
    .create = sup_create,
    .destroy = sup_destroy,
    .iterate = sup_iterate,
    .checkpoint = sup_checkpoint,
    .restore = sup_restore,
    .vars = sup_vars,
    .get_weights = sup_get_weights,
    .evaluate = sup_evaluate,
    .describe = sup_describe,
    .eval_checkpoint = sup_eval_checkpoint,
};

/* ---- the job ------------------------------------------------------------------ */

static int sup_check(const dpt_config_t *c)
{
    int64_t b = DPT_CI(c, batch_size), d = DPT_CI(c, num_devices);
    if (b % d)
        return dpt_error(DPT_EINVAL, "batch_size %lld must be divisible by num_devices %lld",
                         (long long)b, (long long)d);
    return DPT_OK;
}

static size_t sup_threads(const dpt_config_t *c)
{
    return (size_t)DPT_CI(c, num_devices);
}

static int sup_plan(const dpt_config_t *c, int world, dpt__mpi_plan_t *p)
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
    .ops = &sup_ops,
    .keys = DPT_JOB_SUPERVISED,
    .check = sup_check,
    .threads = sup_threads,
    .plan = sup_plan,
};

/* ---- shared with the sync_replicas trainer (train_internal.h) ---------------- */

int dpt__sup_load(const dpt_config_t *c, dpt_dataset_t *train, dpt_dataset_t *test, char *where,
                  size_t size)
{
    sup_dataset_t kind = SUP_FASHION_MNIST;
    int rc = sup_dataset_parse(DPT_CS(c, dataset), &kind);
    if (rc)
        return rc;
    sup_data_location(c, kind, where, size);
    memset(train, 0, sizeof *train);
    return sup_load_data(c, kind, train, test, 0);
}

int dpt__sup_layers(const dpt_config_t *c, size_t in_dim, size_t outputs, dpt_layer_spec_t *layers,
                    size_t *nlayers, dpt_layer_kind_t *act, char *text, size_t size)
{
    sup_spec_t m;
    int rc = sup_spec(c, outputs, &m);
    if (rc)
        return rc;
    memcpy(layers, m.layers, m.nlayers * sizeof *layers);
    *nlayers = m.nlayers;
    *act = m.act;
    sup_layers_text(&m, in_dim, text, size);
    return DPT_OK;
}

dpt_batch_t dpt__sup_batch(size_t rows, size_t dim, float *x, int32_t *labels, float *y,
                           size_t ydim)
{
    return sup_batch(rows, dim, x, labels, y, ydim);
}

int dpt__sup_regress(dpt_mlp_t *mlp, const float *params, const dpt_dataset_t *test, double *rmse,
                     double *mae, double *r2)
{
    sup_regress_t reg = {NAN, NAN, NAN};
    int rc = sup_regress_eval(sup_mlp_predict, mlp, params, test, &reg);
    *rmse = reg.rmse;
    *mae = reg.mae;
    *r2 = reg.r2;
    return rc;
}

int dpt__sup_eval_checkpoint(const dpt_config_t *c, const dpt_safetensors_t *st, size_t episodes,
                             uint64_t seed, dpt_eval_result_t *out)
{
    return sup_eval_checkpoint(c, st, episodes, seed, out);
}
