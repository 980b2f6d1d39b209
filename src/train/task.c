/*
 * The supervised task (task.h): the data of key dataset, the model adapter
 * its keys choose, and what the supervised and sync_replicas trainers
 * share around them: optimizer settings, epoch results, the checkpoint's
 * position and metadata, and the evaluation of a checkpoint.
 */
#include "task.h"

#include "dpt/dpt.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dpt__task_dataset_names[DPT_DATASET_COUNT] = {
#define TASK__DATASET_NAME(sym, name, jobs) [sym] = name,
    DPT_DATASET_LIST(TASK__DATASET_NAME)
#undef TASK__DATASET_NAME
};

const char *dpt__task_dataset_name(dpt_dataset_id_t id)
{
    return (unsigned)id < DPT_DATASET_COUNT ? dpt__task_dataset_names[id] : "unknown";
}

/* The adapter of config c's model: the bags embedding model for the bags
 * data, a plug-in when key model names one, else the MLP of keys hidden
 * and activation. */
static const dpt__model_ops_t *dpt__task_adapter(const dpt_config_t *c, dpt_dataset_id_t id)
{
    if (id == DPT_DATASET_BAGS)
        return &dpt__model_bags;
    if (dpt_config_applies(c, DPT_CFG_model) && DPT_CS(c, model)[0])
        return &dpt__model_plugin;
    return &dpt__model_mlp;
}

/* The CSV files of config c. With train NULL, `classes` bounds the test
 * labels; otherwise the test labels must fit the training set's classes. */
static int dpt__task_load_csv(const dpt_config_t *c, dpt_dataset_t *train, dpt_dataset_t *test,
                              int classes)
{
    dpt_csv_options_t o = {0};
    int rc;
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

/* The bags of config c (both splits: the test bags follow the training
 * bags in the seed's stream). */
static int dpt__task_load_bags(dpt__task_t *t, const dpt_config_t *c)
{
    dpt__bags_t *b = &t->bags;
    b->vocab = (size_t)DPT_CI(c, bags_vocab);
    b->nids = (size_t)DPT_CI(c, bags_ids);
    b->rows = (size_t)DPT_CI(c, bags_rows);
    b->test_rows = b->rows / 10 ? b->rows / 10 : 1;
    t->ydim = 1;
    return dpt__bags_make(b, (uint64_t)DPT_CI(c, seed));
}

/* The data of config c into t (the training split too when `train`);
 * `classes` bounds the test labels of a CSV file without its training
 * split. */
static int dpt__task_load(dpt__task_t *t, const dpt_config_t *c, int train, int classes)
{
    dpt_dataset_t tmp;
    size_t points = (size_t)DPT_CI(c, spirals_points);
    int rc;
    switch (t->dataset) {
    case DPT_DATASET_FASHION_MNIST:
        snprintf(t->where, sizeof t->where, "%s", DPT_CS(c, data_dir));
        if (train &&
            (rc = dpt_dataset_load_mnist(&t->train, DPT_CS(c, data_dir), DPT_SPLIT_TRAIN)) != 0)
            return rc;
        return dpt_dataset_load_mnist(&t->test, DPT_CS(c, data_dir), DPT_SPLIT_TEST);
    case DPT_DATASET_CSV:
        snprintf(t->where, sizeof t->where, "%s", DPT_CS(c, test_csv));
        return dpt__task_load_csv(c, train ? &t->train : NULL, &t->test, classes);
    case DPT_DATASET_SPIRALS:
        /* Generated whole: without the training split it is dropped. */
        snprintf(t->where, sizeof t->where, "seed %" PRId64, DPT_CI(c, seed));
        rc = dpt_dataset_make_spirals(train ? &t->train : &tmp, &t->test, points, points / 4,
                                      (uint64_t)DPT_CI(c, seed));
        if (!rc && !train)
            dpt_dataset_deinit(&tmp);
        return rc;
    case DPT_DATASET_BAGS:
        snprintf(t->where, sizeof t->where, "seed %" PRId64, DPT_CI(c, seed));
        return dpt__task_load_bags(t, c);
    default: return dpt_error(DPT_EINVAL, "dataset = %s: unknown", DPT_CS(c, dataset));
    }
}

/* A checkpoint's metadata `key` (a count in [1, 1e6]); DPT_EFORMAT when
 * it lacks it. */
static int dpt__task_meta_count(const dpt_safetensors_t *st, const char *key, size_t *out)
{
    uint64_t v = 0;
    int rc = dpt_safetensors_meta_u64(st, key, &v);
    if (rc == DPT_ENOENT)
        return dpt_error(DPT_EFORMAT, "checkpoint %s has no %s metadata: its model is not known",
                         dpt_safetensors_path(st), key);
    if (rc)
        return rc;
    if (v < 1 || v > 1000000)
        return dpt_error(DPT_EFORMAT, "checkpoint %s: %s = %" PRIu64 " is out of range",
                         dpt_safetensors_path(st), key, v);
    *out = (size_t)v;
    return DPT_OK;
}

/* The shape of a row of d: IDX images keep theirs (channels from the
 * row's size), other data are flat. */
static dpt_shape_t dpt__task_shape(const dpt_dataset_t *d)
{
    if (d->height && d->width && d->dim % (d->height * d->width) == 0)
        return (dpt_shape_t){d->dim / (d->height * d->width), d->height, d->width};
    return (dpt_shape_t){d->dim, 1, 1};
}

/* For the evaluation of st: its test data and the sizes of its model
 * (checked in the order: outputs, then inputs). */
static int dpt__task_load_for(dpt__task_t *t, const dpt_config_t *c, const dpt_safetensors_t *st)
{
    const char *path = dpt_safetensors_path(st), *name = dpt__task_dataset_names[t->dataset];
    size_t classes = 0, in_dim = 0;
    int bags = t->dataset == DPT_DATASET_BAGS;
    int rc;
    if (!bags && t->loss == DPT_LOSS_SOFTMAX_XENT &&
        (rc = dpt__task_meta_count(st, "num_classes", &classes)) != 0)
        return rc;
    if ((rc = dpt__task_load(t, c, 0, (int)classes)) != 0)
        return rc;
    if (!bags) {
        t->in_dim = t->test.dim;
        t->in_shape = dpt__task_shape(&t->test);
        t->ydim = t->test.target_dim;
    }
    if (t->ydim) {
        if ((rc = dpt__task_meta_count(st, "num_targets", &t->outputs)) != 0)
            return rc;
        if (t->outputs != t->ydim)
            return dpt_error(DPT_EINVAL,
                             "checkpoint %s predicts %zu targets, the test data (%s) have %zu",
                             path, t->outputs, t->where, t->ydim);
    } else {
        if ((size_t)t->test.num_classes > classes)
            return dpt_error(DPT_EINVAL,
                             "checkpoint %s has %zu classes, the %s test data (%s) have %d", path,
                             classes, name, t->where, t->test.num_classes);
        t->outputs = classes;
    }
    if (bags)
        return DPT_OK;
    if ((rc = dpt__task_meta_count(st, "input_dim", &in_dim)) != 0)
        return rc;
    if (in_dim != t->test.dim)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s takes %zu features, the %s test data (%s) have %zu", path,
                         in_dim, name, t->where, t->test.dim);
    return DPT_OK;
}

int dpt__task_init(dpt__task_t *t, const dpt_config_t *c, const dpt_safetensors_t *st)
{
    memset(t, 0, sizeof *t);
    t->dataset = (dpt_dataset_id_t)DPT_CI(c, dataset); /* the key's choices are the list */
    if ((unsigned)t->dataset >= DPT_DATASET_COUNT)
        return dpt_error(DPT_EINVAL, "dataset = %s: unknown", DPT_CS(c, dataset));
    t->loss = (dpt_loss_kind_t)DPT_CI(c, loss); /* the key's choices are the loss list */
    t->seed = (uint64_t)DPT_CI(c, seed);
    t->model = dpt__task_adapter(c, t->dataset);
    int rc;
    if (st) {
        rc = dpt__task_load_for(t, c, st);
    } else {
        rc = dpt__task_load(t, c, 1, 0);
        if (!rc && t->dataset != DPT_DATASET_BAGS) {
            t->in_dim = t->train.dim;
            t->in_shape = dpt__task_shape(&t->train);
            t->ydim = t->train.target_dim;
            t->rows = t->train.rows;
            t->outputs = t->ydim ? t->ydim : (size_t)t->train.num_classes;
        }
    }
    if (!rc && t->dataset == DPT_DATASET_BAGS && !st)
        t->rows = t->bags.rows;
    if (rc)
        return rc;
    return t->model->setup(t, c);
}

void dpt__task_deinit(dpt__task_t *t)
{
    dpt_dataset_deinit(&t->train);
    dpt_dataset_deinit(&t->test);
    dpt__bags_deinit(&t->bags);
    dpt_vartable_deinit(&t->table);
    memset(t, 0, sizeof *t);
}

/* ---- instances ---------------------------------------------------------------- */

int dpt__net_init(dpt__net_t *n, const dpt__task_t *t, size_t max_batch)
{
    memset(n, 0, sizeof *n);
    n->task = t;
    n->ops = t->model;
    n->max_batch = max_batch;
    return n->ops->create(t, max_batch, n);
}

void dpt__net_deinit(dpt__net_t *n)
{
    if (n->ops)
        n->ops->destroy(n);
    memset(n, 0, sizeof *n);
}

void dpt__net_init_params(dpt__net_t *n, float *params, dpt_rng_t *rng)
{
    n->ops->init_params(n, params, rng);
}

int dpt__net_evaluate(dpt__net_t *n, const float *params, dpt_eval_result_t *out)
{
    out->count = 0;
    out->mean_return = out->mean_length = out->loss = out->accuracy = NAN;
    out->rmse = out->mae = out->r2 = NAN;
    out->stochastic = 0;
    return n->ops->evaluate(n, params, out);
}

dpt_batch_t dpt__task_batch(size_t rows, size_t dim, float *x, int32_t *labels, float *y,
                            size_t ydim, int32_t *keys)
{
    dpt_batch_t b;
    dpt_batch_init(&b, rows);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, dim, 0, x);
    if (ydim)
        dpt_batch_add(&b, DPT_MLP_Y, DPT_F32, ydim, 0, y);
    else
        dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, labels);
    if (keys)
        dpt_batch_add(&b, DPT_MLP_ROW, DPT_I32, 2, 0, keys);
    return b;
}

/* ---- metadata and eval_checkpoint ------------------------------------------------ */

int dpt__task_describe(const dpt__task_t *t, dpt_safetensors_writer_t *w)
{
    int rc;
    if ((rc = dpt_safetensors_set_meta(w, "dataset", dpt__task_dataset_names[t->dataset])) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "data_location", t->where)) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "loss", dpt_loss_kind_name(t->loss))) != 0)
        return rc;
    if (t->dataset != DPT_DATASET_BAGS &&
        (rc = dpt_safetensors_set_meta_u64(w, "input_dim", t->in_dim)) != 0)
        return rc;
    if (t->ydim)
        rc = dpt_safetensors_set_meta_u64(w, "num_targets", t->ydim);
    else
        rc = dpt_safetensors_set_meta_u64(w, "num_classes", t->outputs);
    if (rc)
        return rc;
    return t->model->describe(t, w);
}

int dpt__task_eval_checkpoint(const dpt_config_t *c, const dpt_safetensors_t *st,
                              const char *prefix, dpt_eval_result_t *out)
{
    dpt__task_t t;
    dpt__net_t n;
    dpt_arena_t p = {0};
    memset(&n, 0, sizeof n);
    out->count = 0;
    out->mean_return = out->mean_length = out->loss = out->accuracy = NAN;
    out->rmse = out->mae = out->r2 = NAN;
    out->stochastic = 0;
    int rc = dpt__task_init(&t, c, st);
    if (!rc)
        rc = dpt__net_init(&n, &t, DPT__TASK_EVAL_BATCH);
    if (!rc)
        rc = dpt_arena_init(&p, n.model.vars->total);
    if (!rc)
        rc = dpt_safetensors_load_arena(st, prefix, n.model.vars, p.data, p.count);
    if (!rc)
        rc = dpt__net_evaluate(&n, p.data, out);
    dpt_arena_deinit(&p);
    dpt__net_deinit(&n);
    dpt__task_deinit(&t);
    return rc;
}

/* ---- optimizer ------------------------------------------------------------------ */

int dpt__task_optim(const dpt_config_t *c, dpt_optim_config_t *o, dpt_schedule_t *s)
{
    dpt_optim_kind_t kind;
    int rc;
    if ((rc = dpt_optim_kind_parse(DPT_CS(c, optimizer), &kind)) != 0 ||
        (rc = dpt_schedule_kind_parse(DPT_CS(c, lr_schedule), &s->kind)) != 0)
        return rc;
    *o = dpt_optim_defaults(kind);
    o->momentum = (float)DPT_CF(c, momentum);
    /* nesterov is a momentum setting; the other optimizers refuse it. */
    o->nesterov = kind == DPT_OPTIM_MOMENTUM ? (int)DPT_CI(c, nesterov) : 0;
    o->eps = (float)DPT_CF(c, adam_eps);
    o->weight_decay = (float)DPT_CF(c, weight_decay);
    s->lr0 = (float)DPT_CF(c, lr);
    s->lr_end = (float)DPT_CF(c, lr_end);
    return DPT_OK;
}

/* ---- epochs --------------------------------------------------------------------- */

void dpt__task_order(size_t *perm, size_t rows, dpt_rng_t *rng, int shuffle)
{
    for (size_t i = 0; i < rows; i++)
        perm[i] = i;
    if (shuffle)
        dpt_rng_shuffle(rng, perm, rows);
}

void dpt__task_result_begin(dpt_train_result_t *r, uint64_t epoch, uint64_t epochs,
                            uint64_t samples, uint64_t steps)
{
    r->iteration = epoch;
    r->timesteps_total = samples;
    r->progress = (double)epoch / (double)epochs;
    r->finished = epoch >= epochs;
    r->reward_mean = NAN;
    r->episodes_in_window = 0;
    r->nmetrics = 0;
    dpt_train_result_add(r, "training_iteration", (double)epoch);
    dpt_train_result_add(r, "epoch", (double)epoch);
    dpt_train_result_add(r, "samples_total", (double)samples);
    dpt_train_result_add(r, "steps_total", (double)steps);
}

void dpt__task_result_scores(dpt_train_result_t *r, const dpt__task_t *t, double train_loss,
                             double train_acc, const dpt_eval_result_t *test)
{
    dpt_train_result_add(r, "train_loss", train_loss);
    if (!t->ydim)
        dpt_train_result_add(r, "train_accuracy", train_acc);
    dpt_train_result_add(r, "test_loss", test->loss);
    if (t->ydim) {
        dpt_train_result_add(r, "test_rmse", test->rmse);
        dpt_train_result_add(r, "test_mae", test->mae);
        dpt_train_result_add(r, "test_r2", test->r2);
    } else {
        dpt_train_result_add(r, "test_accuracy", test->accuracy);
    }
}

void dpt__task_result_end(dpt_train_result_t *r, uint64_t used, double t0, double train_time,
                          double eval_time)
{
    dpt_train_result_add(r, "samples_per_s", train_time > 0 ? (double)used / train_time : 0.0);
    dpt_train_result_add(r, "time_this_iter_s", dpt_now() - t0);
    dpt_train_result_add(r, "timing_breakdown/train_time_ms", train_time * 1e3);
    dpt_train_result_add(r, "timing_breakdown/eval_time_ms", eval_time * 1e3);
}

/* ---- checkpoints ---------------------------------------------------------------- */

int dpt__task_save_pos(dpt_safetensors_writer_t *w, const dpt_rng_t *shuffle, uint64_t samples)
{
    int rc = dpt_safetensors_set_meta_u64(w, "shuffle_rng", dpt_rng_tell(shuffle));
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "samples_total", samples);
    return rc;
}

int dpt__task_read_pos(const dpt_safetensors_t *st, uint64_t epochs, uint64_t *shuffle_pos,
                       uint64_t *samples, uint64_t *epoch)
{
    int rc;
    if ((rc = dpt_safetensors_meta_u64(st, "shuffle_rng", shuffle_pos)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "samples_total", samples)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "training_iteration", epoch)) != 0)
        return rc;
    if (*epoch > epochs)
        return dpt_error(DPT_EINVAL,
                         "checkpoint %s is at epoch %" PRIu64 ", past epochs = %" PRIu64,
                         dpt_safetensors_path(st), *epoch, epochs);
    return DPT_OK;
}
