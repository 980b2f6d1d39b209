/* Sample batches: column descriptors, lookups and row views. */
#include "dpt/batch.h"
#include "dpt/status.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dpt__dtypes[DPT_DTYPE_COUNT] = {
#define DPT__DTYPE_INFO(sym, name, size) [sym] = {name, size},
    DPT_DTYPE_LIST(DPT__DTYPE_INFO)
#undef DPT__DTYPE_INFO
};

const char *dpt_dtype_name(dpt_dtype_t t)
{
    return (unsigned)t < DPT_DTYPE_COUNT ? dpt__dtypes[t].name : "unknown";
}

size_t dpt_dtype_size(dpt_dtype_t t)
{
    return (unsigned)t < DPT_DTYPE_COUNT ? dpt__dtypes[t].size : 0;
}

void dpt_batch_init(dpt_batch_t *b, size_t rows)
{
    memset(b, 0, sizeof *b);
    b->rows = rows;
}

int dpt_batch_add(dpt_batch_t *b, const char *name, dpt_dtype_t dtype, size_t width,
                  int per_sequence, void *data)
{
    if (!name || !name[0] || strlen(name) >= DPT_COLUMN_NAME_MAX)
        return dpt_error(DPT_EINVAL, "batch: column name \"%s\" is empty or longer than %d bytes",
                         name ? name : "", DPT_COLUMN_NAME_MAX - 1);
    if (dpt_batch_find(b, name))
        return dpt_error(DPT_EINVAL, "batch: column \"%s\" is already present", name);
    if (b->ncols == DPT_BATCH_MAX_COLUMNS)
        return dpt_error(DPT_EINVAL, "batch: column \"%s\" exceeds the limit of %d columns", name,
                         DPT_BATCH_MAX_COLUMNS);
    if ((unsigned)dtype >= DPT_DTYPE_COUNT)
        return dpt_error(DPT_EINVAL, "batch: column \"%s\" has an unknown type %d", name,
                         (int)dtype);
    if (width == 0)
        return dpt_error(DPT_EINVAL, "batch: column \"%s\" has width 0", name);
    if (!data && b->rows > 0)
        return dpt_error(DPT_EINVAL, "batch: column \"%s\" has no data", name);
    dpt_column_t *c = &b->cols[b->ncols++];
    memset(c, 0, sizeof *c);
    strcpy(c->name, name);
    c->dtype = dtype;
    c->width = width;
    c->per_sequence = per_sequence ? 1 : 0;
    c->data = data;
    return DPT_OK;
}

size_t dpt_batch_sequences(const dpt_batch_t *b)
{
    return b->seq_len ? b->rows / b->seq_len : b->rows;
}

const dpt_column_t *dpt_batch_find(const dpt_batch_t *b, const char *name)
{
    for (size_t i = 0; i < b->ncols; i++)
        if (strcmp(b->cols[i].name, name) == 0)
            return &b->cols[i];
    return NULL;
}

const void *dpt_batch_get(const dpt_batch_t *b, const char *who, const char *name,
                          dpt_dtype_t dtype, size_t width, size_t *width_out)
{
    const dpt_column_t *c = dpt_batch_find(b, name);
    if (!c) {
        dpt_error(DPT_EINVAL, "%s: batch has no column \"%s\"", who, name);
        return NULL;
    }
    if (c->dtype != dtype) {
        dpt_error(DPT_EINVAL, "%s: column \"%s\" is %s, expected %s", who, name,
                  dpt_dtype_name(c->dtype), dpt_dtype_name(dtype));
        return NULL;
    }
    if (width && c->width != width) {
        dpt_error(DPT_EINVAL, "%s: column \"%s\" has width %zu, the model expects %zu", who, name,
                  c->width, width);
        return NULL;
    }
    if (width_out)
        *width_out = c->width;
    return c->data;
}

int dpt_batch_view(const dpt_batch_t *src, size_t row0, size_t rows, dpt_batch_t *view)
{
    if (row0 > src->rows || rows > src->rows - row0)
        return dpt_error(DPT_EINVAL, "batch view: rows [%zu, %zu) outside a batch of %zu rows",
                         row0, row0 + rows, src->rows);
    if (src->seq_len && (row0 % src->seq_len || rows % src->seq_len))
        return dpt_error(DPT_EINVAL,
                         "batch view: rows [%zu, %zu) would split sequences of %zu rows", row0,
                         row0 + rows, src->seq_len);
    *view = *src;
    view->rows = rows;
    size_t seq0 = src->seq_len ? row0 / src->seq_len : row0;
    for (size_t i = 0; i < src->ncols; i++) {
        dpt_column_t *c = &view->cols[i];
        size_t first = c->per_sequence ? seq0 : row0;
        c->data = (char *)c->data + first * c->width * dpt_dtype_size(c->dtype);
    }
    return DPT_OK;
}

int dpt_batch_check_layout(const dpt_batch_t *b, const dpt_batch_t *layout)
{
    for (size_t i = 0; i < layout->ncols; i++) {
        const dpt_column_t *want = &layout->cols[i];
        const dpt_column_t *have = dpt_batch_find(b, want->name);
        if (!have)
            return dpt_error(DPT_EINVAL, "batch has no column \"%s\"", want->name);
        if (have->dtype != want->dtype || have->width != want->width ||
            have->per_sequence != want->per_sequence)
            return dpt_error(DPT_EINVAL, "column \"%s\" is %s x %zu%s, expected %s x %zu%s",
                             want->name, dpt_dtype_name(have->dtype), have->width,
                             have->per_sequence ? " per sequence" : "", dpt_dtype_name(want->dtype),
                             want->width, want->per_sequence ? " per sequence" : "");
    }
    for (size_t i = 0; i < b->ncols; i++)
        if (!dpt_batch_find(layout, b->cols[i].name))
            return dpt_error(DPT_EINVAL, "batch has an unexpected column \"%s\"", b->cols[i].name);
    return DPT_OK;
}
