/*
 * The synthetic "bags" task (dataset = bags, the sync_replicas job): bags
 * of bags_ids ids drawn (Zipf-like: id i with weight 1 / (i + 1)^1.1) from a
 * vocabulary of bags_vocab ids, each id i carrying a hidden value
 * u_i ~ N(0, 1) and each bag the target y = mean of its ids' u_i. The model
 * (the adapter dpt__model_bags) pools an embedding table
 * [bags_vocab, embedding_dim] over the bag (mean) and regresses y with an
 * MLP of `hidden`; the table's gradients are row-sparse (sr_workers.c).
 */
#include "task.h"

#include "dpt/dpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BAGS_ZIPF 1.1

/* Draws the bags of both splits and their targets from the seed. */
int dpt__bags_make(dpt__bags_t *b, uint64_t seed)
{
    size_t V = b->vocab, L = b->nids, n = b->rows, m = b->test_rows;
    size_t cells;
    if (dpt_mul_size(n + m, L, &cells) != 0 || cells > ((size_t)-1) / sizeof(int64_t))
        return dpt_error(DPT_EOVERFLOW, "bags: %zu bags of %zu ids overflow", n + m, L);
    double *cdf = malloc(V * sizeof *cdf);
    float *u = malloc(V * sizeof *u);
    b->train_ids = malloc(n * L * sizeof(int64_t));
    b->test_ids = malloc(m * L * sizeof(int64_t));
    b->train_y = malloc(n * sizeof(float));
    b->test_y = malloc(m * sizeof(float));
    int rc = DPT_OK;
    if (!cdf || !u || !b->train_ids || !b->test_ids || !b->train_y || !b->test_y) {
        rc = dpt_error(DPT_ENOMEM, "bags: cannot allocate %zu bags of %zu ids", n + m, L);
        goto done;
    }
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_DATA);
    double total = 0.0;
    for (size_t i = 0; i < V; i++) {
        total += pow((double)(i + 1), -BAGS_ZIPF);
        cdf[i] = total;
        u[i] = (float)dpt_rng_normal(&rng);
    }
    for (int split = 0; split < 2; split++) {
        size_t rows = split ? m : n;
        int64_t *ids = split ? b->test_ids : b->train_ids;
        float *y = split ? b->test_y : b->train_y;
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

void dpt__bags_deinit(dpt__bags_t *b)
{
    free(b->train_ids);
    free(b->test_ids);
    free(b->train_y);
    free(b->test_y);
    b->train_ids = b->test_ids = NULL;
    b->train_y = b->test_y = NULL;
}

/* ---- the adapter -------------------------------------------------------------- */

/* The embedding table's variable at the head of a table. */
static int dpt__bags_table_head(const dpt__task_t *t, dpt_vartable_t *table)
{
    dpt_vartable_init(table);
    size_t shape[2] = {t->bags.vocab, t->edim};
    return dpt_vartable_add(table, "embedding.weight", 2, shape, NULL);
}

/* The model: embedding.weight [V, E], then an MLP of E inputs and one
 * output with names "mlp.<i>.weight" / ".bias"; always the mse loss. */
static int dpt__bags_setup(dpt__task_t *t, const dpt_config_t *c)
{
    t->loss = DPT_LOSS_MSE;
    t->edim = (size_t)DPT_CI(c, embedding_dim);
    t->in_dim = t->edim;
    t->outputs = 1;
    int rc = dpt__task_mlp_spec(t, c);
    if (rc)
        return rc;
    /* The table's layout: the MLP's variables follow the embedding. */
    dpt_seq_t *seq = NULL;
    if ((rc = dpt__bags_table_head(t, &t->table)) != 0 ||
        (rc = dpt_seq_create(&seq, t->edim, t->layers, t->nlayers, 1, &t->table, "mlp.")) != 0)
        return rc;
    dpt_seq_destroy(seq);
    return DPT_OK;
}

/* An instance: the MLP laid out as in t->table (its own table is scratch),
 * and the evaluation's pooled rows. */
typedef struct bags_net {
    dpt_seq_t *seq;  /* the MLP over the pooled embedding */
    float *pooled;   /* [max_batch, E] */
    size_t *offsets; /* [max_batch + 1] */
} bags_net_t;

static int dpt__bags_create(const dpt__task_t *t, size_t max_batch, dpt__net_t *n)
{
    bags_net_t *b = calloc(1, sizeof *b);
    if (!b)
        return dpt_error(DPT_ENOMEM, "bags: cannot allocate a model");
    n->impl = b;
    dpt_vartable_t scratch;
    int rc = dpt__bags_table_head(t, &scratch);
    if (!rc)
        rc = dpt_seq_create(&b->seq, t->edim, t->layers, t->nlayers, max_batch, &scratch, "mlp.");
    dpt_vartable_deinit(&scratch);
    if (rc)
        return rc;
    n->model.vars = &t->table;
    n->model.max_batch = max_batch;
    b->pooled = malloc(max_batch * t->edim * sizeof(float));
    b->offsets = malloc((max_batch + 1) * sizeof(size_t));
    if (!b->pooled || !b->offsets)
        return dpt_error(DPT_ENOMEM, "bags: cannot allocate a model of %zu rows", max_batch);
    return DPT_OK;
}

static void dpt__bags_destroy(dpt__net_t *n)
{
    bags_net_t *b = n->impl;
    if (!b)
        return;
    dpt_seq_destroy(b->seq);
    free(b->pooled);
    free(b->offsets);
    free(b);
}

dpt_seq_t *dpt__bags_seq(const dpt__net_t *n)
{
    const bags_net_t *b = n->impl;
    return b->seq;
}

/* The table as PyTorch's nn.Embedding starts it, N(0, 1) scaled to the
 * width; then the MLP. */
static void dpt__bags_init_params(dpt__net_t *n, float *params, dpt_rng_t *rng)
{
    const dpt__task_t *t = n->task;
    const dpt_var_t *ev = &t->table.vars[0];
    dpt_rng_fill_normal(rng, params + ev->offset, ev->count, 0.0f, 1.0f / sqrtf((float)t->edim));
    dpt_seq_init_params(dpt__bags_seq(n), params, rng);
}

/* Mean squared error (and absolute error, R^2) on the test bags. */
static int dpt__bags_evaluate(dpt__net_t *n, const float *params, dpt_eval_result_t *out)
{
    const dpt__task_t *t = n->task;
    const dpt__bags_t *b = &t->bags;
    bags_net_t *net = n->impl;
    const dpt_var_t *ev = &t->table.vars[0];
    size_t V = ev->shape[0], E = ev->shape[1], L = b->nids, rows = b->test_rows;
    const float *y = b->test_y;
    double se = 0.0, ae = 0.0, mean = 0.0, tot = 0.0;
    for (size_t r = 0; r < rows; r++)
        mean += (double)y[r];
    mean /= (double)rows;
    for (size_t r = 0; r < rows; r++)
        tot += ((double)y[r] - mean) * ((double)y[r] - mean);
    for (size_t r0 = 0; r0 < rows; r0 += n->max_batch) {
        size_t m = rows - r0 < n->max_batch ? rows - r0 : n->max_batch;
        for (size_t j = 0; j <= m; j++)
            net->offsets[j] = j * L;
        int rc = dpt_embedding_bag_forward(params + ev->offset, V, E, b->test_ids + r0 * L,
                                           net->offsets, m, DPT_EMBED_MEAN, net->pooled);
        const float *pred;
        if (!rc)
            rc = dpt_seq_forward(net->seq, params, net->pooled, m, &pred);
        if (rc)
            return rc;
        for (size_t j = 0; j < m; j++) {
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

static int dpt__bags_describe(const dpt__task_t *t, dpt_safetensors_writer_t *w)
{
    int rc;
    if ((rc = dpt_safetensors_set_meta(w, "layers", t->layers_text)) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "activation", dpt_layer_kind_name(t->act))) != 0 ||
        (rc = dpt_safetensors_set_meta_u64(w, "vocab", t->bags.vocab)) != 0 ||
        (rc = dpt_safetensors_set_meta_u64(w, "embedding_dim", t->edim)) != 0)
        return rc;
    return dpt_safetensors_set_meta_u64(w, "bag_ids", t->bags.nids);
}

const dpt__model_ops_t dpt__model_bags = {
    .name = "bags",
    .setup = dpt__bags_setup,
    .create = dpt__bags_create,
    .destroy = dpt__bags_destroy,
    .init_params = dpt__bags_init_params,
    .evaluate = dpt__bags_evaluate,
    .describe = dpt__bags_describe,
};
