/*
 * Row-sparse gradients (index, row) and their application by the optimizers
 * without densifying them: exact SGD and momentum, lazy Adam.
 */
#include "dpt/arena.h"
#include "dpt/optim.h"
#include "dpt/status.h"
#include "optim/optim_impl.h"

#include <stdlib.h>
#include <string.h>

/* Rows allocated by the first add to an empty gradient. */
#define DPT__SPARSE_MIN_CAP 16

int dpt_sparse_rows_init(dpt_sparse_rows_t *s, size_t dim, size_t cap)
{
    memset(s, 0, sizeof *s);
    if (dim == 0)
        return dpt_error(DPT_EINVAL, "sparse rows: dim must be > 0");
    s->dim = dim;
    int rc = dpt_sparse_rows_reserve(s, cap);
    if (rc)
        memset(s, 0, sizeof *s);
    return rc;
}

void dpt_sparse_rows_deinit(dpt_sparse_rows_t *s)
{
    if (!s)
        return;
    free(s->indices);
    free(s->values);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}

void dpt_sparse_rows_clear(dpt_sparse_rows_t *s)
{
    s->n = 0;
}

int dpt_sparse_rows_reserve(dpt_sparse_rows_t *s, size_t cap)
{
    if (s->dim == 0)
        return dpt_error(DPT_EINVAL, "sparse rows: not initialised (dim 0)");
    if (cap <= s->cap)
        return DPT_OK;
    size_t floats, vbytes, ibytes;
    if (dpt_mul_size(cap, s->dim, &floats) || dpt_mul_size(floats, sizeof(float), &vbytes) ||
        dpt_mul_size(cap, sizeof(int64_t), &ibytes))
        return dpt_error(DPT_EOVERFLOW, "sparse rows: %zu rows of %zu floats overflow size_t", cap,
                         s->dim);
    /* Each array is only replaced once its reallocation succeeded, and cap
     * grows only when both did, so a failure leaves a consistent gradient. */
    int64_t *idx = realloc(s->indices, ibytes);
    if (!idx)
        return dpt_error(DPT_ENOMEM, "sparse rows: cannot allocate %zu indices", cap);
    s->indices = idx;
    float *val = realloc(s->values, vbytes);
    if (!val)
        return dpt_error(DPT_ENOMEM, "sparse rows: cannot allocate %zu rows of %zu floats", cap,
                         s->dim);
    s->values = val;
    s->cap = cap;
    return DPT_OK;
}

int dpt__sparse_rows_grow(dpt_sparse_rows_t *s, size_t more)
{
    if (more > (size_t)-1 - s->n)
        return dpt_error(DPT_EOVERFLOW, "sparse rows: %zu + %zu rows overflow size_t", s->n, more);
    size_t need = s->n + more;
    if (need <= s->cap)
        return DPT_OK;
    size_t cap = s->cap < DPT__SPARSE_MIN_CAP ? DPT__SPARSE_MIN_CAP : s->cap;
    while (cap < need)
        cap = cap > (size_t)-1 / 2 ? need : cap * 2;
    return dpt_sparse_rows_reserve(s, cap);
}

int dpt_sparse_rows_add(dpt_sparse_rows_t *s, int64_t index, const float *row, float **out)
{
    int rc = dpt__sparse_rows_grow(s, 1);
    if (rc)
        return rc;
    float *dst = s->values + s->n * s->dim;
    if (row)
        memcpy(dst, row, s->dim * sizeof(float));
    else
        memset(dst, 0, s->dim * sizeof(float));
    s->indices[s->n++] = index;
    if (out)
        *out = dst;
    return DPT_OK;
}

int dpt_sparse_rows_append(dpt_sparse_rows_t *dst, const dpt_sparse_rows_t *src, float scale)
{
    if (src->dim != dst->dim)
        return dpt_error(DPT_EINVAL, "sparse rows: appending rows of %zu floats to rows of %zu",
                         src->dim, dst->dim);
    size_t n = src->n; /* read before growing: dst may be src */
    if (n == 0)
        return DPT_OK; /* (an empty src may have no arrays to copy from) */
    int rc = dpt__sparse_rows_grow(dst, n);
    if (rc)
        return rc;
    size_t dim = dst->dim;
    memcpy(dst->indices + dst->n, src->indices, n * sizeof(int64_t));
    float *out = dst->values + dst->n * dim;
    const float *in = src->values;
    if (scale == 1.0f)
        memcpy(out, in, n * dim * sizeof(float));
    else
        for (size_t i = 0; i < n * dim; i++)
            out[i] = scale * in[i];
    dst->n += n;
    return DPT_OK;
}

/* Stable bottom-up merge sort of the positions pos[0, n) by index; tmp has n
 * entries. Returns the array that holds the result (pos or tmp). */
static size_t *dpt__sort_positions(const int64_t *idx, size_t *pos, size_t *tmp, size_t n)
{
    size_t *a = pos, *b = tmp;
    for (size_t w = 1; w<n; w = w> n / 2 ? n : 2 * w) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = w < n - lo ? lo + w : n;
            size_t hi = w < n - mid ? mid + w : n;
            size_t i = lo, j = mid, k = lo;
            /* Ties take the left run first: that is what keeps it stable. */
            while (i < mid && j < hi)
                b[k++] = idx[a[j]] < idx[a[i]] ? a[j++] : a[i++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < hi)
                b[k++] = a[j++];
        }
        size_t *t = a;
        a = b;
        b = t;
    }
    return a;
}

int dpt_sparse_rows_coalesce(dpt_sparse_rows_t *s)
{
    size_t n = s->n, dim = s->dim;
    if (n == 0)
        return DPT_OK;
    int64_t *idx = s->indices;
    float *val = s->values;
    int sorted = 1;
    for (size_t k = 1; k < n && sorted; k++)
        sorted = idx[k - 1] <= idx[k];
    if (!sorted) {
        if (n > s->scratch_cap) {
            size_t pbytes, rbytes;
            if (dpt_mul_size(n, 2 * sizeof(size_t), &pbytes) ||
                dpt_mul_size(dim, sizeof(float), &rbytes) || pbytes > (size_t)-1 - rbytes)
                return dpt_error(DPT_EOVERFLOW, "sparse rows: coalescing scratch of %zu rows", n);
            size_t *scr = malloc(pbytes + rbytes);
            if (!scr)
                return dpt_error(DPT_ENOMEM, "sparse rows: cannot allocate a scratch of %zu rows",
                                 n);
            free(s->scratch);
            s->scratch = scr;
            s->scratch_cap = n;
            /* Just past the 2 n positions: suitably aligned for floats. */
            s->scratch_row = (float *)(void *)(scr + 2 * n);
        }
        size_t *pos = s->scratch, *tmp = s->scratch + s->scratch_cap;
        for (size_t k = 0; k < n; k++)
            pos[k] = k;
        size_t *perm = dpt__sort_positions(idx, pos, tmp, n);
        /* Apply the permutation in place, cycle by cycle: sorted slot k takes
         * the row that was at perm[k]. A finished slot is marked (size_t)-1. */
        const size_t done = (size_t)-1;
        float *row = s->scratch_row;
        for (size_t k = 0; k < n; k++) {
            if (perm[k] == done)
                continue;
            if (perm[k] == k) {
                perm[k] = done;
                continue;
            }
            int64_t first_idx = idx[k];
            memcpy(row, val + k * dim, dim * sizeof(float));
            size_t j = k;
            for (;;) {
                size_t from = perm[j];
                perm[j] = done;
                if (from == k) {
                    idx[j] = first_idx;
                    memcpy(val + j * dim, row, dim * sizeof(float));
                    break;
                }
                idx[j] = idx[from];
                memcpy(val + j * dim, val + from * dim, dim * sizeof(float));
                j = from;
            }
        }
    }
    /* Sum the runs of equal indices into their first slot, compacting
     * forward (the write slot never passes the read slot). Each sum starts
     * from +0, as densifying into zeros does. */
    size_t w = 0;
    for (size_t r = 0; r < n; r++) {
        const float *x = val + r * dim;
        if (w > 0 && idx[w - 1] == idx[r]) {
            float *y = val + (w - 1) * dim;
            for (size_t j = 0; j < dim; j++)
                y[j] += x[j];
        } else {
            float *y = val + w * dim;
            for (size_t j = 0; j < dim; j++)
                y[j] = 0.0f + x[j];
            idx[w++] = idx[r];
        }
    }
    s->n = w;
    return DPT_OK;
}

int dpt_sparse_rows_check(const dpt_sparse_rows_t *s, size_t rows)
{
    for (size_t k = 0; k < s->n; k++) {
        int64_t i = s->indices[k];
        if (i < 0 || (uint64_t)i >= rows)
            return dpt_error(DPT_EINVAL,
                             "sparse rows: index %lld at position %zu is outside [0, %zu)",
                             (long long)i, k, rows);
    }
    return DPT_OK;
}

int dpt_sparse_rows_densify_add(const dpt_sparse_rows_t *s, float *dense, size_t rows)
{
    int rc = dpt_sparse_rows_check(s, rows);
    if (rc)
        return rc;
    size_t dim = s->dim;
    for (size_t k = 0; k < s->n; k++) {
        float *y = dense + (size_t)s->indices[k] * dim;
        const float *x = s->values + k * dim;
        for (size_t j = 0; j < dim; j++)
            y[j] += x[j];
    }
    return DPT_OK;
}

size_t dpt_sparse_rows_bytes(const dpt_sparse_rows_t *s)
{
    return s->n * (sizeof(int64_t) + sizeof(float) * s->dim);
}

int dpt_optim_update_sparse(dpt_optim_t *opt, float *params, size_t offset, size_t rows,
                            const dpt_sparse_rows_t *g, uint64_t t, float lr)
{
    size_t dim = g->dim, count = dpt_optim_count(opt), span;
    if (dim == 0)
        return dpt_error(DPT_EINVAL, "sparse update: the gradient is not initialised (dim 0)");
    if (t == 0)
        return dpt_error(DPT_EINVAL, "sparse update: step t must be >= 1");
    if (dpt_mul_size(rows, dim, &span) || offset > count || span > count - offset)
        return dpt_error(DPT_EINVAL,
                         "sparse update: %zu rows of %zu floats at offset %zu exceed the "
                         "optimizer's %zu floats",
                         rows, dim, offset, count);
    const int64_t *idx = g->indices;
    for (size_t k = 0; k < g->n; k++) {
        if (idx[k] < 0 || (uint64_t)idx[k] >= rows)
            return dpt_error(DPT_EINVAL,
                             "sparse update: index %lld at position %zu is outside [0, %zu)",
                             (long long)idx[k], k, rows);
        if (k > 0 && idx[k] <= idx[k - 1])
            return dpt_error(DPT_EINVAL,
                             "sparse update: index %lld at position %zu follows %lld: the "
                             "gradient is not coalesced",
                             (long long)idx[k], k, (long long)idx[k - 1]);
    }
    if (span == 0 || dpt_optim_no_grad(opt, offset))
        return DPT_OK; /* no rows (then g has none either), or no gradient */
    const dpt_optim_config_t *c = dpt_optim_config(opt);
    float wd = c->weight_decay;
    float *p = params + offset;
    switch (c->kind) {
    case DPT_OPTIM_SGD:
        if (wd == 0.0f) {
            for (size_t k = 0; k < g->n; k++) {
                float *pr = p + (size_t)idx[k] * dim;
                const float *gr = g->values + k * dim;
                for (size_t j = 0; j < dim; j++)
                    pr[j] = dpt__sgd_elem(pr[j], gr[j], lr, wd);
            }
            break;
        }
        /* Weight decay moves every row: one pass over the variable, with the
         * gradient's rows met in order (they are sorted). */
        for (size_t r = 0, k = 0; r < rows; r++) {
            float *pr = p + r * dim;
            if (k < g->n && (size_t)idx[k] == r) {
                const float *gr = g->values + k++ * dim;
                for (size_t j = 0; j < dim; j++)
                    pr[j] = dpt__sgd_elem(pr[j], gr[j], lr, wd);
            } else {
                for (size_t j = 0; j < dim; j++)
                    pr[j] = dpt__sgd_elem(pr[j], 0.0f, lr, wd);
            }
        }
        break;
    case DPT_OPTIM_MOMENTUM: {
        /* Exact: untouched rows take the dense rule with a zero gradient (the
         * same +0 the densified gradient holds there). */
        float *v = dpt_optim_slot(opt, 0) + offset, mu = c->momentum;
        int nesterov = c->nesterov;
        for (size_t r = 0, k = 0; r < rows; r++) {
            float *pr = p + r * dim, *vr = v + r * dim;
            if (k < g->n && (size_t)idx[k] == r) {
                const float *gr = g->values + k++ * dim;
                for (size_t j = 0; j < dim; j++)
                    pr[j] = dpt__momentum_elem(pr[j], gr[j], &vr[j], mu, lr, wd, nesterov);
            } else {
                for (size_t j = 0; j < dim; j++)
                    pr[j] = dpt__momentum_elem(pr[j], 0.0f, &vr[j], mu, lr, wd, nesterov);
            }
        }
        break;
    }
    case DPT_OPTIM_ADAM:
    case DPT_OPTIM_ADAMW: {
        /* Lazy: only the touched rows, with the global step's bias
         * correction. */
        float *m = dpt_optim_slot(opt, 0) + offset, *v = dpt_optim_slot(opt, 1) + offset;
        dpt__adam_coef_t kc = dpt__adam_coef(c, t, lr);
        for (size_t k = 0; k < g->n; k++) {
            size_t o = (size_t)idx[k] * dim;
            const float *gr = g->values + k * dim;
            for (size_t j = 0; j < dim; j++)
                p[o + j] = dpt__adam_elem(p[o + j], gr[j], &m[o + j], &v[o + j], &kc);
        }
        break;
    }
    default: return dpt_error(DPT_EINVAL, "sparse update: unknown optimizer kind %d", (int)c->kind);
    }
    return DPT_OK;
}
