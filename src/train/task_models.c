/*
 * The model adapters of the supervised task (task.h) for row data:
 *   mlp     hidden linear layers of key hidden, each followed by the
 *           activation, then a linear output of the task's outputs;
 *   plugin  a model plug-in of key model (dpt/nn.h, dpt_model_plugin_t).
 * Both score a test set the same way: the loss head over all rows, then,
 * for a regression, rmse, mae and r2 from the predictions chunk by chunk.
 */
#include "task.h"

#include "dpt/dpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The layers of keys hidden and activation on t->in_dim inputs with
 * t->outputs outputs, and their sizes as text. Shared with the bags
 * adapter (its MLP over the pooled embedding). */
int dpt__task_mlp_spec(dpt__task_t *t, const dpt_config_t *c)
{
    int nh = dpt__config_sizes(c, DPT_CFG_hidden, t->hidden, DPT__MAX_HIDDEN);
    if (nh < 0)
        return nh;
    int rc = dpt_layer_kind_parse(DPT_CS(c, activation), &t->act);
    if (rc)
        return rc;
    t->nhidden = nh;
    t->nlayers = 0;
    for (int i = 0; i < nh; i++) {
        t->layers[t->nlayers++] = (dpt_layer_spec_t){
            .kind = DPT_LAYER_LINEAR, .out = t->hidden[i], .init = DPT_INIT_DEFAULT, .gain = 0};
        t->layers[t->nlayers++] = (dpt_layer_spec_t){.kind = t->act};
    }
    t->layers[t->nlayers++] = (dpt_layer_spec_t){
        .kind = DPT_LAYER_LINEAR, .out = t->outputs, .init = DPT_INIT_DEFAULT, .gain = 0};
    size_t size = sizeof t->layers_text;
    size_t len = (size_t)snprintf(t->layers_text, size, "%zu", t->in_dim);
    for (int i = 0; i < nh && len < size; i++)
        len += (size_t)snprintf(t->layers_text + len, size - len, ",%zu", t->hidden[i]);
    if (len < size)
        snprintf(t->layers_text + len, size - len, ",%zu", t->outputs);
    return DPT_OK;
}

/* ---- scoring ------------------------------------------------------------------ */

/* A model's forward pass for evaluation (dpt_model_plugin_t.predict). */
typedef int (*task_predict_fn)(void *handle, const float *params, const float *x, size_t rows,
                               const float **y);

static int dpt__task_mlp_predict(void *handle, const float *params, const float *x, size_t rows,
                                 const float **y)
{
    return dpt_mlp_predict(handle, params, x, rows, y);
}

/* The mean test loss (and, classifying, the correct count) of a model that
 * only predicts: the loss head applied to its outputs, chunk by chunk. */
static int dpt__task_predict_loss(task_predict_fn predict, void *h, const float *params,
                                  const dpt_dataset_t *d, dpt_loss_kind_t loss, dpt_loss_out_t *out)
{
    memset(out, 0, sizeof *out);
    double sum = 0.0, correct = 0.0;
    size_t k = d->target_dim;
    for (size_t r0 = 0; r0 < d->rows; r0 += DPT__TASK_EVAL_BATCH) {
        size_t m = d->rows - r0 < DPT__TASK_EVAL_BATCH ? d->rows - r0 : DPT__TASK_EVAL_BATCH;
        size_t hits = 0;
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

/* Regression figures of a model over a test set: root mean squared error
 * and mean absolute error over every target value, and R^2 per target
 * column averaged over the columns (scikit-learn's r2_score). */
static int dpt__task_regress(task_predict_fn predict, void *h, const float *params,
                             const dpt_dataset_t *d, dpt_eval_result_t *out)
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
    for (size_t r0 = 0; r0 < n && !rc; r0 += DPT__TASK_EVAL_BATCH) {
        size_t m = n - r0 < DPT__TASK_EVAL_BATCH ? n - r0 : DPT__TASK_EVAL_BATCH;
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

/* out from a test loss: the count and loss, then the accuracy or the
 * regression figures. */
static int dpt__task_scores(const dpt_loss_out_t *o, task_predict_fn predict, void *h,
                            const float *params, const dpt_dataset_t *d, dpt_eval_result_t *out)
{
    out->count = d->rows;
    out->loss = o->loss;
    if (!d->target_dim) {
        out->accuracy = o->correct / (double)d->rows;
        return DPT_OK;
    }
    return dpt__task_regress(predict, h, params, d, out);
}

/* ---- mlp ---------------------------------------------------------------------- */

/* The layers of key network, then the output layer (dense of the task's
 * outputs), checked against the data's shape. */
static int dpt__task_network_spec(dpt__task_t *t, const dpt_config_t *c)
{
    snprintf(t->network, sizeof t->network, "%s", DPT_CS(c, network));
    size_t n = 0;
    char why[512];
    int rc = dpt_network_parse(t->network, t->layers, DPT_NETWORK_MAX_LAYERS, &n);
    if (!rc) {
        t->layers[n++] = (dpt_layer_spec_t){.kind = DPT_LAYER_LINEAR, .out = t->outputs};
        t->nlayers = n;
        rc = dpt_layers_shapes(t->in_shape, t->layers, n, NULL);
    }
    if (!rc)
        return DPT_OK;
    snprintf(why, sizeof why, "%s", dpt_last_error());
    const dpt_shape_t *s = &t->in_shape;
    return dpt_error(rc,
                     "network on the %s rows of shape [%zu, %zu, %zu] (%zu outputs added "
                     "as a last dense layer): %s",
                     dpt__task_dataset_name(t->dataset), s->c, s->h, s->w, t->outputs, why);
}

static int dpt__task_mlp_setup(dpt__task_t *t, const dpt_config_t *c)
{
    if (DPT_CS(c, network)[0])
        return dpt__task_network_spec(t, c);
    return dpt__task_mlp_spec(t, c);
}

static int dpt__task_mlp_create(const dpt__task_t *t, size_t max_batch, dpt__net_t *n)
{
    dpt_mlp_t *mlp = NULL;
    dpt_shape_t in = t->network[0] ? t->in_shape : (dpt_shape_t){t->in_dim, 1, 1};
    int rc = dpt_mlp_create_shaped(&mlp, in, t->layers, t->nlayers, t->loss, max_batch);
    if (rc)
        return rc;
    dpt_mlp_set_seed(mlp, t->seed);
    n->impl = mlp;
    n->model = dpt_mlp_model(mlp);
    if (dpt_mlp_running(mlp, NULL)) {
        n->running = calloc(dpt_mlp_vars(mlp)->nvars, 1);
        if (!n->running)
            return dpt_error(DPT_ENOMEM, "model: cannot allocate the running-statistics flags");
        dpt_mlp_running(mlp, n->running);
    }
    return DPT_OK;
}

static void dpt__task_mlp_destroy(dpt__net_t *n)
{
    free(n->running);
    n->running = NULL;
    dpt_mlp_destroy(n->impl);
}

static void dpt__task_mlp_init_params(dpt__net_t *n, float *params, dpt_rng_t *rng)
{
    dpt_mlp_init_params(n->impl, params, rng);
}

static int dpt__task_mlp_evaluate(dpt__net_t *n, const float *params, dpt_eval_result_t *out)
{
    const dpt_dataset_t *d = &n->task->test;
    dpt_batch_t b =
        dpt__task_batch(d->rows, d->dim, d->x, d->labels, d->targets, d->target_dim, NULL);
    dpt_loss_out_t o;
    int rc = dpt_mlp_evaluate(n->impl, params, &b, &o);
    if (rc)
        return rc;
    return dpt__task_scores(&o, dpt__task_mlp_predict, n->impl, params, d, out);
}

static int dpt__task_mlp_describe(const dpt__task_t *t, dpt_safetensors_writer_t *w)
{
    if (t->network[0]) {
        char shape[96];
        snprintf(shape, sizeof shape, "%zu,%zu,%zu", t->in_shape.c, t->in_shape.h, t->in_shape.w);
        int rc = dpt_safetensors_set_meta(w, "network", t->network);
        return rc ? rc : dpt_safetensors_set_meta(w, "input_shape", shape);
    }
    int rc = dpt_safetensors_set_meta(w, "layers", t->layers_text);
    if (!rc)
        rc = dpt_safetensors_set_meta(w, "activation", dpt_layer_kind_name(t->act));
    return rc;
}

const dpt__model_ops_t dpt__model_mlp = {
    .name = "mlp",
    .setup = dpt__task_mlp_setup,
    .create = dpt__task_mlp_create,
    .destroy = dpt__task_mlp_destroy,
    .init_params = dpt__task_mlp_init_params,
    .evaluate = dpt__task_mlp_evaluate,
    .describe = dpt__task_mlp_describe,
};

/* ---- plugin ------------------------------------------------------------------- */

static int dpt__task_plugin_setup(dpt__task_t *t, const dpt_config_t *c)
{
    snprintf(t->plugin_path, sizeof t->plugin_path, "%s", DPT_CS(c, model));
    /* The activation is written in the metadata, as for the MLP. */
    int rc = dpt_layer_kind_parse(DPT_CS(c, activation), &t->act);
    if (!rc)
        rc = dpt_model_plugin_load(t->plugin_path, &t->plugin);
    return rc;
}

static int dpt__task_plugin_create(const dpt__task_t *t, size_t max_batch, dpt__net_t *n)
{
    dpt_model_spec_t spec = {t->in_dim, t->outputs, t->loss, max_batch};
    int rc = t->plugin->create(&spec, &n->model, &n->impl);
    if (rc) {
        n->impl = NULL;
        return dpt_error(rc, "model plug-in %s (%s): %s", t->plugin_path, t->plugin->name,
                         dpt_last_error());
    }
    if (!n->model.vars || !n->model.loss_grad || n->model.max_batch < max_batch)
        return dpt_error(DPT_EINVAL,
                         "model plug-in %s (%s): its model lacks a variable table or loss_grad, "
                         "or takes fewer than %zu rows",
                         t->plugin_path, t->plugin->name, max_batch);
    return DPT_OK;
}

static void dpt__task_plugin_destroy(dpt__net_t *n)
{
    if (n->impl)
        n->task->plugin->destroy(n->impl);
}

static void dpt__task_plugin_init_params(dpt__net_t *n, float *params, dpt_rng_t *rng)
{
    n->task->plugin->init_params(n->impl, params, rng);
}

static int dpt__task_plugin_evaluate(dpt__net_t *n, const float *params, dpt_eval_result_t *out)
{
    const dpt__task_t *t = n->task;
    dpt_loss_out_t o;
    int rc = dpt__task_predict_loss(t->plugin->predict, n->impl, params, &t->test, t->loss, &o);
    if (rc)
        return rc;
    return dpt__task_scores(&o, t->plugin->predict, n->impl, params, &t->test, out);
}

static int dpt__task_plugin_describe(const dpt__task_t *t, dpt_safetensors_writer_t *w)
{
    int rc;
    if ((rc = dpt_safetensors_set_meta(w, "model", t->plugin->name)) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "model_path", t->plugin_path)) != 0)
        return rc;
    return dpt_safetensors_set_meta(w, "activation", dpt_layer_kind_name(t->act));
}

const dpt__model_ops_t dpt__model_plugin = {
    .name = "plugin",
    .setup = dpt__task_plugin_setup,
    .create = dpt__task_plugin_create,
    .destroy = dpt__task_plugin_destroy,
    .init_params = dpt__task_plugin_init_params,
    .evaluate = dpt__task_plugin_evaluate,
    .describe = dpt__task_plugin_describe,
};
