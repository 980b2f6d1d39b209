/*
 * Internal to src/optim: the update of one element by each rule, shared by
 * the dense slice update (optim.c) and the row-sparse one (optim_sparse.c),
 * so that both run the same float operations in the same order and the sparse
 * SGD and momentum updates are bitwise those of the dense update with the
 * densified gradient; and the growth of a row-sparse gradient, which the
 * embedding bag's backward (src/nn/embedding.c) shares. Not installed.
 */
#ifndef DPT_OPTIM_IMPL_H
#define DPT_OPTIM_IMPL_H

#include "dpt/optim.h"

#include <math.h>
#include <stdint.h>

/* sgd: p - lr (g + wd p) */
static inline float dpt__sgd_elem(float p, float g, float lr, float wd)
{
    return p - lr * (g + wd * p);
}

/* momentum: g' = g + wd p; v = mu v + g'; returns p - lr v, or with
 * Nesterov p - lr (g' + mu v). *v is updated. */
static inline float dpt__momentum_elem(float p, float g, float *v, float mu, float lr, float wd,
                                       int nesterov)
{
    float gi = g + wd * p;
    float vi = mu * *v + gi;
    *v = vi;
    return p - lr * (nesterov ? gi + mu * vi : vi);
}

/* Adam's constants for one step t (>= 1; 0 is taken as 1). */
typedef struct dpt__adam_coef {
    float b1, b2, eps, lr, wd;
    float inv_bc1, inv_sqrt_bc2; /* 1 / (1 - b1^t), 1 / sqrt(1 - b2^t) */
    int decoupled;               /* adamw */
} dpt__adam_coef_t;

static inline dpt__adam_coef_t dpt__adam_coef(const dpt_optim_config_t *c, uint64_t t, float lr)
{
    dpt__adam_coef_t k;
    if (t == 0)
        t = 1;
    /* Bias corrections in double: 1 - b^t loses digits in float for
     * b2 = 0.999 and small t. */
    float bc1 = (float)(1.0 - pow((double)c->beta1, (double)t));
    float bc2 = (float)(1.0 - pow((double)c->beta2, (double)t));
    k.b1 = c->beta1;
    k.b2 = c->beta2;
    k.eps = c->eps;
    k.lr = lr;
    k.wd = c->weight_decay;
    k.inv_bc1 = 1.0f / bc1;
    k.inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
    k.decoupled = c->kind == DPT_OPTIM_ADAMW;
    return k;
}

/* adam / adamw (see dpt/optim.h): updates *m and *v, returns the new p. */
static inline float dpt__adam_elem(float p, float g, float *m, float *v, const dpt__adam_coef_t *k)
{
    float gi = k->decoupled ? g : g + k->wd * p;
    float mi = k->b1 * *m + (1.0f - k->b1) * gi;
    float vi = k->b2 * *v + (1.0f - k->b2) * gi * gi;
    *m = mi;
    *v = vi;
    if (k->decoupled)
        p -= k->lr * k->wd * p;
    return p - k->lr * (mi * k->inv_bc1) / (sqrtf(vi) * k->inv_sqrt_bc2 + k->eps);
}

/* Makes room for `more` rows after the s->n present, growing the capacity
 * geometrically (at least 16 rows, then doubling), so that appending rows
 * one call at a time costs amortised O(1) per row. Errors: those of
 * dpt_sparse_rows_reserve(), DPT_EOVERFLOW when n + more overflows. */
int dpt__sparse_rows_grow(dpt_sparse_rows_t *s, size_t more);

/* dpt_optim_update_into() on the gradient times s (each element multiplied
 * by s in float before the rule, as if the gradient had been scaled in
 * place first: the same bits), without writing the gradient: the clipping
 * of a gradient that other threads may still be reading. */
void dpt__optim_update_scaled(dpt_optim_t *o, const float *p, float *out, const float *g, size_t lo,
                              size_t hi, uint64_t t, float lr, float s);

#endif /* DPT_OPTIM_IMPL_H */
