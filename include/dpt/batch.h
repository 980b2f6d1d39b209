/*
 * dpt/batch.h — sample batches: named columns over a number of rows.
 *
 * A batch is a small descriptor (no allocation) of borrowed column arrays:
 * each column has a name, a type (float32 or int32), a width (values per
 * row) and row-major data. Supervised models read "x" and "label" or "y";
 * the RL trainers fill "obs", "actions", "advantages" and so on; users add
 * their own columns.
 *
 * Sequences (recurrent models): with seq_len > 0 the rows are grouped into
 * rows / seq_len sequences of seq_len rows each (padded by the producer), and
 * columns marked per_sequence hold one row per sequence (e.g. the initial
 * RNN state, or "seq_lens" with each sequence's real length). Engines never
 * split a sequence across devices or minibatches.
 */
#ifndef DPT_BATCH_H
#define DPT_BATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_BATCH_MAX_COLUMNS 16
#define DPT_COLUMN_NAME_MAX 32

#define DPT_DTYPE_LIST(X)    \
    X(DPT_F32, "float32", 4) \
    X(DPT_I32, "int32", 4)

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_dtype {
#define DPT__DTYPE_ENUM(sym, name, size) sym,
    DPT_DTYPE_LIST(DPT__DTYPE_ENUM)
#undef DPT__DTYPE_ENUM
    DPT_DTYPE_COUNT
} dpt_dtype_t;
/* clang-format on */

/* "float32" / "int32"; bytes per value (0 for unknown types). */
const char *dpt_dtype_name(dpt_dtype_t t);
size_t dpt_dtype_size(dpt_dtype_t t);

typedef struct dpt_column {
    char name[DPT_COLUMN_NAME_MAX];
    dpt_dtype_t dtype;
    size_t width;     /* values per row (> 0) */
    int per_sequence; /* 1: one row per sequence; 0: one row per sample */
    void *data;       /* borrowed: [rows or sequences, width] */
} dpt_column_t;

typedef struct dpt_batch {
    size_t rows;    /* samples */
    size_t seq_len; /* 0: no sequences; else rows is a multiple of seq_len */
    size_t ncols;
    dpt_column_t cols[DPT_BATCH_MAX_COLUMNS];
} dpt_batch_t;

/* Starts an empty batch of `rows` rows (seq_len 0). */
void dpt_batch_init(dpt_batch_t *b, size_t rows);

/* Adds a column. Errors (DPT_EINVAL, naming the column): empty or too long
 * name, duplicate name, width 0, unknown dtype, NULL data with rows > 0,
 * too many columns. */
int dpt_batch_add(dpt_batch_t *b, const char *name, dpt_dtype_t dtype, size_t width,
                  int per_sequence, void *data);

/* Number of sequences (rows / seq_len), or rows when there are none. */
size_t dpt_batch_sequences(const dpt_batch_t *b);

/* The column called `name`, or NULL. */
const dpt_column_t *dpt_batch_find(const dpt_batch_t *b, const char *name);

/* Typed lookup with checks: returns the data of column `name` when it exists
 * with the given dtype and width (width 0 accepts any and writes the actual
 * width to *width_out when not NULL). Otherwise NULL with a dpt_error()
 * message ("batch has no column \"label\"", "column \"x\" has width 5, the
 * model expects 4", ...) that `who` (e.g. "mlp") prefixes. */
const void *dpt_batch_get(const dpt_batch_t *b, const char *who, const char *name,
                          dpt_dtype_t dtype, size_t width, size_t *width_out);

/* A view of rows [row0, row0 + rows) of `src` (no copy): per-sample columns
 * are offset by row0, per-sequence ones by row0 / seq_len. With sequences,
 * row0 and rows must be multiples of seq_len. Errors: DPT_EINVAL. */
int dpt_batch_view(const dpt_batch_t *src, size_t row0, size_t rows, dpt_batch_t *view);

/* Checks that the column names, types and widths of `b` equal those of
 * `layout` (order-independent). DPT_EINVAL names the first difference. */
int dpt_batch_check_layout(const dpt_batch_t *b, const dpt_batch_t *layout);

#ifdef __cplusplus
}
#endif
#endif /* DPT_BATCH_H */
