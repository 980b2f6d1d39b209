/*
 * Embedding bags: forward gathers and sums (or averages) table rows; the
 * backward emits the table's gradient as row-sparse (index, row) pairs and
 * never densifies it.
 */
#include "dpt/nn.h"
#include "dpt/status.h"
#include "optim/optim_impl.h"

#include <stdint.h>
#include <string.h>

static const char *const dpt__embed_mode_names[] = {
#define DPT__EMBED_NAME(sym, name) name,
    DPT_EMBED_MODE_LIST(DPT__EMBED_NAME)
#undef DPT__EMBED_NAME
};

const char *dpt_embed_mode_name(dpt_embed_mode_t mode)
{
    return (unsigned)mode < DPT_EMBED_MODE_COUNT ? dpt__embed_mode_names[mode] : "unknown";
}

int dpt_embed_mode_parse(const char *name, dpt_embed_mode_t *mode)
{
    for (int i = 0; i < DPT_EMBED_MODE_COUNT; i++)
        if (strcmp(name, dpt__embed_mode_names[i]) == 0) {
            *mode = (dpt_embed_mode_t)i;
            return DPT_OK;
        }
    return dpt_error(DPT_EINVAL, "unknown embedding bag mode \"%s\" (known: sum, mean)", name);
}

/* The checks forward and backward share: dim, mode, offsets, and ids
 * against [0, vocab), or with vocab == SIZE_MAX only that they are not
 * negative (the backward does not know the table's size). */
static int dpt__embed_check(const char *what, size_t vocab, size_t dim, const int64_t *ids,
                            const size_t *offsets, size_t bags, dpt_embed_mode_t mode)
{
    if (dim == 0)
        return dpt_error(DPT_EINVAL, "embedding bag %s: dim must be > 0", what);
    if ((unsigned)mode >= DPT_EMBED_MODE_COUNT)
        return dpt_error(DPT_EINVAL, "embedding bag %s: unknown mode %d", what, (int)mode);
    if (offsets[0] != 0)
        return dpt_error(DPT_EINVAL, "embedding bag %s: offsets[0] is %zu, must be 0", what,
                         offsets[0]);
    for (size_t b = 0; b < bags; b++) {
        if (offsets[b + 1] < offsets[b])
            return dpt_error(DPT_EINVAL,
                             "embedding bag %s: bag %zu ends at offset %zu before it starts (%zu)",
                             what, b, offsets[b + 1], offsets[b]);
        for (size_t j = offsets[b]; j < offsets[b + 1]; j++) {
            int64_t id = ids[j];
            if (id < 0 || (uint64_t)id >= vocab) {
                if (vocab == SIZE_MAX)
                    return dpt_error(DPT_EINVAL,
                                     "embedding bag %s: id %lld of bag %zu (position %zu) is "
                                     "negative",
                                     what, (long long)id, b, j);
                return dpt_error(DPT_EINVAL,
                                 "embedding bag %s: id %lld of bag %zu (position %zu) is outside "
                                 "[0, %zu)",
                                 what, (long long)id, b, j, vocab);
            }
        }
    }
    return DPT_OK;
}

int dpt_embedding_bag_forward(const float *table, size_t vocab, size_t dim, const int64_t *ids,
                              const size_t *offsets, size_t bags, dpt_embed_mode_t mode, float *out)
{
    int rc = dpt__embed_check("forward", vocab, dim, ids, offsets, bags, mode);
    if (rc)
        return rc;
    for (size_t b = 0; b < bags; b++) {
        float *y = out + b * dim;
        memset(y, 0, dim * sizeof(float));
        for (size_t j = offsets[b]; j < offsets[b + 1]; j++) {
            const float *x = table + (size_t)ids[j] * dim;
            for (size_t k = 0; k < dim; k++)
                y[k] += x[k];
        }
        size_t len = offsets[b + 1] - offsets[b];
        if (mode == DPT_EMBED_MEAN && len > 0)
            for (size_t k = 0; k < dim; k++)
                y[k] /= (float)len;
    }
    return DPT_OK;
}

int dpt_embedding_bag_backward(size_t dim, const int64_t *ids, const size_t *offsets, size_t bags,
                               dpt_embed_mode_t mode, const float *dout, dpt_sparse_rows_t *grad)
{
    if (grad->dim != dim)
        return dpt_error(DPT_EINVAL,
                         "embedding bag backward: the gradient has rows of %zu floats, not %zu",
                         grad->dim, dim);
    int rc = dpt__embed_check("backward", SIZE_MAX, dim, ids, offsets, bags, mode);
    if (rc)
        return rc;
    /* All rows at once, so that a failure appends nothing. */
    if ((rc = dpt__sparse_rows_grow(grad, offsets[bags])))
        return rc;
    for (size_t b = 0; b < bags; b++) {
        const float *dy = dout + b * dim;
        size_t len = offsets[b + 1] - offsets[b];
        for (size_t j = offsets[b]; j < offsets[b + 1]; j++) {
            float *row;
            rc = dpt_sparse_rows_add(grad, ids[j], NULL, &row);
            if (rc)
                return rc; /* not reached: the room was reserved above */
            if (mode == DPT_EMBED_MEAN)
                for (size_t k = 0; k < dim; k++)
                    row[k] = dy[k] / (float)len;
            else
                memcpy(row, dy, dim * sizeof(float));
        }
    }
    return DPT_OK;
}
