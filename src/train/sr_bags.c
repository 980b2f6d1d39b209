/*
 * The sync_replicas job's synthetic "bags" task: bags of bags_ids ids drawn
 * (Zipf-like: id i with weight 1 / (i + 1)^1.1) from a vocabulary of
 * bags_vocab ids, each id i carrying a hidden value u_i ~ N(0, 1) and each
 * bag the target y = mean of its ids' u_i. The model pools an embedding
 * table [bags_vocab, embedding_dim] over the bag (mean) and regresses y with
 * an MLP of `hidden`; the table's gradients are row-sparse.
 */
#include "sr_internal.h"

#include <math.h>
#include <stdlib.h>

#define SRT_ZIPF 1.1

/* Draws the bags of both splits and their targets from the seed. */
int dpt__sr_bags_make(srt_t *t, uint64_t seed)
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
int dpt__sr_bags_model(const dpt_config_t *c, size_t vocab, size_t edim, size_t max_batch,
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
int dpt__sr_bags_eval(dpt_seq_t *seq, float *pooled, const float *params,
                      const dpt_vartable_t *table, const int64_t *ids, const float *y, size_t rows,
                      size_t L, dpt_eval_result_t *out)
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

/* Another instance of the bags model's MLP (for a worker or evaluation),
 * laid out as in t->table. */
int dpt__sr_bags_seq(const srt_t *t, size_t max_batch, dpt_seq_t **seq)
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
