/*
 * Internal to src/train/: the supervised task of the jobs that train a
 * model on a dataset (supervised, sync_replicas). Not installed.
 *
 * A task is data + a model, built in one place from a config for training
 * (both splits), or from a checkpoint's config and metadata for
 * eval_checkpoint (the test split; the model's sizes from the metadata).
 * Both trainers and both eval_checkpoints go through it:
 *
 *     config ──► dpt__task_init ──► data (DPT_DATASET_LIST)
 *                                   model adapter (dpt__model_ops_t)
 *                       │
 *                       ├─► dpt__net_init (one instance per max batch: the
 *                       │   towers', a worker's, the evaluation's)
 *                       ├─► dpt__net_evaluate (the test set)
 *                       └─► dpt__task_describe (checkpoint metadata)
 *
 *   task.c         data, optimizer settings, epoch results, checkpoint
 *                  position, metadata, eval_checkpoint
 *   task_models.c  the model adapters: mlp (keys hidden, activation, or
 *                  the layers of key network) and plugin (key model,
 *                  dpt/nn.h's dpt_model_plugin_t)
 *   task_bags.c    the synthetic bags data and their embedding model
 *
 * A new dataset is one line in DPT_DATASET_LIST (dpt/train.h) and a case of
 * the loader in task.c; a new kind of model is one adapter (a
 * dpt__model_ops_t) and one case of dpt__task_adapter (task.c).
 */
#ifndef DPT_TRAIN_TASK_H
#define DPT_TRAIN_TASK_H

#include "dpt/checkpoint.h"
#include "dpt/dataset.h"
#include "dpt/nn.h"
#include "dpt/optim.h"
#include "dpt/train.h"
#include "train_internal.h"

#include <stddef.h>
#include <stdint.h>

/* Rows per chunk of a test-set evaluation. The chunking sets the order in
 * which the loss is summed, so a trainer and eval_checkpoint agree bitwise
 * because both use it. */
#define DPT__TASK_EVAL_BATCH 1000
/* Layers of the model: the MLP of keys hidden and activation, or a
 * network's layers and the output layer. */
#define DPT__TASK_MAX_LAYERS                                                        \
    (2 * DPT__MAX_HIDDEN + 1 > DPT_NETWORK_MAX_LAYERS + 1 ? 2 * DPT__MAX_HIDDEN + 1 \
                                                          : DPT_NETWORK_MAX_LAYERS + 1)

typedef struct dpt__task dpt__task_t;
typedef struct dpt__net dpt__net_t;

/* The bags data (dataset = bags): bags of `nids` ids drawn from a
 * vocabulary of `vocab` ids, one target each (task_bags.c). */
typedef struct dpt__bags {
    size_t vocab, nids, rows, test_rows; /* V, L, training bags, test bags */
    int64_t *train_ids, *test_ids;       /* [rows * L], [test_rows * L] */
    float *train_y, *test_y;             /* [rows], [test_rows] */
} dpt__bags_t;

/* A model adapter: one kind of model, described by the task (its sizes
 * fixed at dpt__task_init) and instanced for a maximum batch. A later kind
 * (a `network` of layers) is one more table and one more case of
 * dpt__task_adapter (task.c). */
typedef struct dpt__model_ops {
    const char *name;
    /* Fills the task's model description from config c (t's data and loss
     * are set). DPT_EINVAL naming the keys. */
    int (*setup)(dpt__task_t *t, const dpt_config_t *c);
    /* One instance for up to max_batch rows into n (zeroed): n->model gets
     * the variable table (the task's layout) and, for a model the towers or
     * a worker train directly, its loss_grad. */
    int (*create)(const dpt__task_t *t, size_t max_batch, dpt__net_t *n);
    void (*destroy)(dpt__net_t *n);
    /* The initial weights into params (the table's layout). */
    void (*init_params)(dpt__net_t *n, float *params, dpt_rng_t *rng);
    /* The test-set figures of params (the fields of out that apply; the
     * caller set the others to NaN). */
    int (*evaluate)(dpt__net_t *n, const float *params, dpt_eval_result_t *out);
    /* The model's own checkpoint metadata ("layers", "model", ...). */
    int (*describe)(const dpt__task_t *t, dpt_safetensors_writer_t *w);
} dpt__model_ops_t;

extern const dpt__model_ops_t dpt__model_mlp;
extern const dpt__model_ops_t dpt__model_plugin;
extern const dpt__model_ops_t dpt__model_bags;

/* One instance of a task's model (caller's storage; zeroed is empty). */
struct dpt__net {
    const dpt__task_t *task; /* borrowed */
    const dpt__model_ops_t *ops;
    dpt_model_t model; /* vars always; ctx, loss_grad for mlp and plugin */
    size_t max_batch;
    void *impl; /* the adapter's instance: a dpt_mlp_t, a plug-in's handle, ... */
    /* NULL, or one flag per variable of model.vars: 1 = running statistics
     * (batchnorm; dpt_optim_set_running), owned by the adapter. */
    unsigned char *running;
};

struct dpt__task {
    dpt_dataset_id_t dataset;
    char where[DPT_CONFIG_STR_MAX + 32]; /* where the data come from (messages, metadata) */
    dpt_loss_kind_t loss;
    /* The data: train (empty when built for eval_checkpoint) and test for
     * fashion_mnist, csv and spirals; bags for bags. */
    dpt_dataset_t train, test;
    dpt__bags_t bags;
    size_t in_dim;        /* features a row (the embedding width for bags) */
    dpt_shape_t in_shape; /* a row's shape: [1, 28, 28] for IDX images, [in_dim, 1, 1] else */
    size_t outputs;       /* the model's outputs: classes, or targets */
    size_t ydim;          /* targets a row; 0 when classifying */
    size_t rows;          /* training rows (0 when built for eval_checkpoint) */
    /* The model. */
    const dpt__model_ops_t *model;
    size_t hidden[DPT__MAX_HIDDEN];
    int nhidden;
    dpt_layer_kind_t act;
    dpt_layer_spec_t layers[DPT__TASK_MAX_LAYERS]; /* mlp, and bags' MLP */
    size_t nlayers;
    char network[DPT_CONFIG_STR_MAX];             /* key network ("": the MLP of hidden) */
    uint64_t seed;                                /* key seed (the dropout masks') */
    char layers_text[16 * (DPT__MAX_HIDDEN + 2)]; /* "784,256,128,10" */
    const dpt_model_plugin_t *plugin;             /* plugin (loaded once, never unloaded) */
    char plugin_path[DPT_CONFIG_STR_MAX];
    size_t edim;          /* bags: the embedding width */
    dpt_vartable_t table; /* bags: embedding.weight, then mlp.* */
};

/* The task of config c into t (zeroed by it): the data of key dataset and
 * the model its keys describe. st NULL: for training, both splits. st a
 * checkpoint: for its evaluation, the test split only, with the class or
 * target count and the input size taken from st's metadata and checked
 * against the data (DPT_EINVAL naming the checkpoint; DPT_EFORMAT when the
 * metadata lack them). dpt__task_deinit frees t (also half built). */
int dpt__task_init(dpt__task_t *t, const dpt_config_t *c, const dpt_safetensors_t *st);
void dpt__task_deinit(dpt__task_t *t);
/* The dataset's name ("spirals"), static storage. */
const char *dpt__task_dataset_name(dpt_dataset_id_t id);

/* An instance of t's model for up to max_batch rows (t borrowed until
 * dpt__net_deinit, which is safe on a zeroed or half-built n). */
int dpt__net_init(dpt__net_t *n, const dpt__task_t *t, size_t max_batch);
void dpt__net_deinit(dpt__net_t *n);
/* The initial weights of the task's model (the stream DPT_RNG_INIT). */
void dpt__net_init_params(dpt__net_t *n, float *params, dpt_rng_t *rng);
/* The test-set figures of params: count, loss, and accuracy or (regression)
 * rmse, mae and r2; the others NaN. n should be made for
 * DPT__TASK_EVAL_BATCH rows. */
int dpt__net_evaluate(dpt__net_t *n, const float *params, dpt_eval_result_t *out);

/* A model batch of `rows` rows: features x [rows, dim], and labels [rows]
 * (ydim 0) or targets y [rows, ydim] (borrowed; NULL for a layout of 0
 * rows), and when keys is not NULL the rows' dropout keys [rows, 2]
 * (DPT_MLP_ROW: the epoch and the row's position in the epoch's order). */
dpt_batch_t dpt__task_batch(size_t rows, size_t dim, float *x, int32_t *labels, float *y,
                            size_t ydim, int32_t *keys);

/* The task's checkpoint metadata: dataset, data_location, loss, input_dim
 * (not bags), num_classes or num_targets, then the adapter's. */
int dpt__task_describe(const dpt__task_t *t, dpt_safetensors_writer_t *w);

/* eval_checkpoint of both jobs: the task rebuilt from config c and st's
 * metadata, the weights of st under `prefix` ("params." or "ema."), the
 * test-set figures into out. */
int dpt__task_eval_checkpoint(const dpt_config_t *c, const dpt_safetensors_t *st,
                              const char *prefix, dpt_eval_result_t *out);

/* The optimizer and learning-rate schedule of config c (keys optimizer,
 * momentum, nesterov for momentum only, adam_eps, weight_decay,
 * lr_schedule, lr, lr_end); s->total_steps is the caller's. */
int dpt__task_optim(const dpt_config_t *c, dpt_optim_config_t *o, dpt_schedule_t *s);

/* ---- epochs ---- */

/* The shuffled order of an epoch: perm = 0 .. rows - 1, shuffled from the
 * stream's position when shuffle is on. */
void dpt__task_order(size_t *perm, size_t rows, dpt_rng_t *rng, int shuffle);
/* An epoch's result, common part: r's counters (iteration = epoch,
 * timesteps_total = samples), r->nmetrics = 0, then the metrics
 * training_iteration, epoch, samples_total, steps_total. */
void dpt__task_result_begin(dpt_train_result_t *r, uint64_t epoch, uint64_t epochs,
                            uint64_t samples, uint64_t steps);
/* The scores: train_loss, train_accuracy (classifying), test_loss, and
 * test_accuracy or test_rmse, test_mae, test_r2. */
void dpt__task_result_scores(dpt_train_result_t *r, const dpt__task_t *t, double train_loss,
                             double train_acc, const dpt_eval_result_t *test);
/* The timings: samples_per_s, time_this_iter_s (since t0),
 * timing_breakdown/train_time_ms and eval_time_ms. */
void dpt__task_result_end(dpt_train_result_t *r, uint64_t used, double t0, double train_time,
                          double eval_time);

/* ---- checkpoints ---- */

/* The position of a run on a task: metadata shuffle_rng and samples_total. */
int dpt__task_save_pos(dpt_safetensors_writer_t *w, const dpt_rng_t *shuffle, uint64_t samples);
/* Reads them and training_iteration from st (*epoch), refusing a
 * checkpoint past `epochs` (DPT_EINVAL). Changes nothing else. */
int dpt__task_read_pos(const dpt_safetensors_t *st, uint64_t epochs, uint64_t *shuffle_pos,
                       uint64_t *samples, uint64_t *epoch);

/* The layers of keys hidden and activation on t->in_dim inputs and
 * t->outputs outputs into t->layers, t->layers_text (task_models.c; the
 * mlp adapter's, and the bags adapter's MLP). */
int dpt__task_mlp_spec(dpt__task_t *t, const dpt_config_t *c);

/* ---- task_bags.c ---- */

/* Draws the bags of both splits (b->rows and b->test_rows bags of b->nids
 * ids from b->vocab) and their targets from the seed. dpt__bags_deinit
 * frees them. */
int dpt__bags_make(dpt__bags_t *b, uint64_t seed);
void dpt__bags_deinit(dpt__bags_t *b);
/* The MLP over the pooled embedding of a bags instance (borrowed): a
 * worker's gradient pools the rows it fetched itself (sr_workers.c). */
dpt_seq_t *dpt__bags_seq(const dpt__net_t *n);

#endif
