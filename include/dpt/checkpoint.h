/*
 * dpt/checkpoint.h — checkpoints in the safetensors format.
 *
 * A checkpoint is one safetensors file (the format of Hugging Face's
 * `safetensors` package, so Python tools can read dpt's weights):
 *
 *     [8 bytes]  N, the header length, unsigned 64-bit little-endian
 *     [N bytes]  JSON header, padded with spaces to a multiple of 8:
 *                {"__metadata__": {"key": "value", ...},
 *                 "name": {"dtype": "F32", "shape": [5, 3],
 *                          "data_offsets": [begin, end]}, ...}
 *     [rest]     the data section: every tensor's raw little-endian values,
 *                row-major; offsets are relative to the start of the data
 *                section, and the tensors cover it without gaps or overlap.
 *
 * dpt adds two metadata keys: "dpt.format" = "1" and "dpt.checksum" =
 * "fnv1a64:<16 lowercase hex digits>", the 64-bit FNV-1a hash of the whole
 * file in which those 16 digits are read as sixteen '0' characters. So any
 * changed byte — in the length, the header or the data — is detected.
 * docs/CHECKPOINTS.md describes the layout, the tensor names dpt uses and how
 * to read a checkpoint from Python.
 *
 * Writing (dpt_safetensors_writer_*): describe the tensors (borrowed data
 * pointers) and the metadata, then dpt_safetensors_save() writes the file
 * atomically: a temporary file in the target's directory, fflush + fsync,
 * rename over the target, fsync of the directory. On failure the previous
 * file at the path is untouched and the temporary file is removed.
 *
 * Reading (dpt_safetensors_load): the whole file is read and validated before
 * the call returns — header length, JSON syntax (a strict parser for the
 * subset safetensors uses), dtypes, shapes against byte sizes, offsets
 * (in bounds, no overlap, no gap, file size), the checksum when present (and
 * required when "dpt.format" is present), duplicate names. Every error names
 * the file and the problem: "checkpoint run/ckpt-3.safetensors: checksum
 * mismatch ...".
 *
 * Typical use (errors elided):
 *
 *     dpt_safetensors_writer_t *w;
 *     dpt_safetensors_writer_create(&w);
 *     dpt_safetensors_add_arena(w, "params.", &table, params, table.total);
 *     dpt_safetensors_set_meta_u64(w, "iteration", it);
 *     dpt_safetensors_save(w, "run/ckpt-3.safetensors");
 *     dpt_safetensors_writer_destroy(w);
 *
 *     dpt_safetensors_t *st;
 *     if (dpt_safetensors_load(&st, path) == 0 &&
 *         dpt_safetensors_load_arena(st, "params.", &table, params, table.total) == 0) ...
 *     dpt_safetensors_destroy(st);
 *
 * Not thread-safe per object; different objects may be used from different
 * threads.
 */
#ifndef DPT_CHECKPOINT_H
#define DPT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/arena.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_SAFETENSORS_MAX_DIMS 8
/* Largest header accepted on load (the Python package's limit too). */
#define DPT_SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20)

/* Element types: symbol, safetensors name, bytes per element. */
#define DPT_SAFETENSORS_DTYPE_LIST(X) \
    X(DPT_ST_F32, "F32", 4)           \
    X(DPT_ST_I32, "I32", 4)           \
    X(DPT_ST_U8, "U8", 1)             \
    X(DPT_ST_I64, "I64", 8)           \
    X(DPT_ST_F64, "F64", 8)

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_st_dtype {
#define DPT__ST_DTYPE_ENUM(sym, name, size) sym,
    DPT_SAFETENSORS_DTYPE_LIST(DPT__ST_DTYPE_ENUM)
#undef DPT__ST_DTYPE_ENUM
    DPT_ST_DTYPE_COUNT
} dpt_st_dtype_t;
/* clang-format on */

/* "F32", "I32", ...; "?" for an unknown value. */
const char *dpt_safetensors_dtype_name(dpt_st_dtype_t dtype);
/* Bytes per element; 0 for an unknown value. */
size_t dpt_safetensors_dtype_size(dpt_st_dtype_t dtype);

/* ---- writing -------------------------------------------------------- */

typedef struct dpt_safetensors_writer dpt_safetensors_writer_t;

/* Creates an empty writer in *out (caller owns; free with
 * dpt_safetensors_writer_destroy). Errors: DPT_ENOMEM. */
int dpt_safetensors_writer_create(dpt_safetensors_writer_t **out);
/* Frees the writer (not the borrowed tensor data); NULL is a no-op. */
void dpt_safetensors_writer_destroy(dpt_safetensors_writer_t *w);

/* Adds a tensor. `name` and `shape` are copied; `data` (the row-major
 * values in host byte order, product(shape) * dtype size bytes) is borrowed
 * and must stay valid and unchanged until dpt_safetensors_save() returns.
 * ndim may be 0 (a scalar, one element). A zero dimension gives an empty
 * tensor (data may then be NULL).
 * Errors (DPT_EINVAL, naming the tensor): NULL or empty name, a name that
 * is not valid UTF-8, the reserved name "__metadata__", a duplicate name,
 * unknown dtype, ndim outside 0..DPT_SAFETENSORS_MAX_DIMS, NULL data for a
 * non-empty tensor; DPT_EOVERFLOW (the byte size overflows); DPT_ENOMEM. */
int dpt_safetensors_add(dpt_safetensors_writer_t *w, const char *name, dpt_st_dtype_t dtype,
                        int ndim, const size_t *shape, const void *data);

/* Adds an opaque byte blob (RNG positions, env state, ...) as a 1-D U8
 * tensor of `bytes` elements. Same rules and errors as dpt_safetensors_add. */
int dpt_safetensors_add_blob(dpt_safetensors_writer_t *w, const char *name, const void *data,
                             size_t bytes);

/* Adds every variable of `table` as an F32 tensor named prefix + variable
 * name (e.g. "params." + "0.weight"), with the variable's shape, taken from
 * the float arena `data` laid out by the table (borrowed; the padding between
 * variables is not stored). `count` is the arena's length in floats.
 * All or nothing: on failure none of the table's variables is added.
 * Errors: DPT_EINVAL (count < table->total, NULL data, a duplicate name),
 * DPT_ENOMEM. */
int dpt_safetensors_add_arena(dpt_safetensors_writer_t *w, const char *prefix,
                              const dpt_vartable_t *table, const float *data, size_t count);

/* Sets metadata `key` to the string `value` (both copied; setting a key
 * again replaces its value). Keys starting with "dpt." are reserved for the
 * format ("dpt.checksum", "dpt.format"). Errors: DPT_EINVAL (empty or
 * reserved key, NULL value, key or value not valid UTF-8), DPT_ENOMEM. */
int dpt_safetensors_set_meta(dpt_safetensors_writer_t *w, const char *key, const char *value);
/* Sets metadata `key` to the decimal text of `value` (JSON numbers lose
 * precision past 2^53 in many readers, so 64-bit counters are strings). */
int dpt_safetensors_set_meta_u64(dpt_safetensors_writer_t *w, const char *key, uint64_t value);

/* Writes the file atomically (see the top of this header). The tensors are
 * stored largest element size first, in the order added within a size, so
 * every tensor's offset is a multiple of its element size. The writer is not
 * changed and can save again.
 * Errors: DPT_EIO (with the path and the system's reason: directory missing
 * or not writable, disk full, rename refused, ...), DPT_EOVERFLOW,
 * DPT_ENOMEM. On failure the file previously at `path`, if any, is
 * unchanged and no temporary file is left behind — with one exception: when
 * only the final fsync of the directory fails, the new file is already in
 * place (but the rename may not survive a power cut).
 * `path` should name a regular file: a symbolic link at `path` is replaced
 * by the file, not followed. */
int dpt_safetensors_save(const dpt_safetensors_writer_t *w, const char *path);

/* ---- reading -------------------------------------------------------- */

typedef struct dpt_safetensors dpt_safetensors_t;

/* One tensor of a loaded file. All pointers are valid until
 * dpt_safetensors_destroy(). */
typedef struct dpt_safetensors_tensor {
    const char *name;
    dpt_st_dtype_t dtype;
    int ndim;
    size_t shape[DPT_SAFETENSORS_MAX_DIMS];
    size_t count;     /* elements: product of the shape (1 for ndim 0) */
    size_t bytes;     /* count * dtype size */
    const void *data; /* values in host byte order, aligned to the element size */
} dpt_safetensors_tensor_t;

/* Reads and validates the file at `path` into *out (caller owns; free with
 * dpt_safetensors_destroy). On failure *out is NULL.
 * A large file's data (1 MiB or more, on a little-endian host) is mapped
 * read-only rather than read: the tensors' pointers stay valid until
 * destroy, and its pages are read from the file as they are used, so the
 * file must not be changed or cut short in place meanwhile (dpt never
 * does: it writes a new file and renames it over the old one, which leaves
 * the mapped file as it was).
 * Errors: DPT_ENOENT (no such file), DPT_EINVAL (not a regular file, a path
 * that cannot be opened for another reason than the system's), DPT_EIO (a
 * read error), DPT_EFORMAT (anything malformed or corrupted: short file, bad header
 * length, JSON syntax, shape/offset/size inconsistencies, duplicate names,
 * checksum mismatch), DPT_ENOTSUP (a dtype dpt does not read, e.g. BF16, or a
 * newer "dpt.format"), DPT_ENOMEM. */
int dpt_safetensors_load(dpt_safetensors_t **out, const char *path);
/* Frees everything; NULL is a no-op. */
void dpt_safetensors_destroy(dpt_safetensors_t *st);

/* The path given to load (a copy; valid until destroy). */
const char *dpt_safetensors_path(const dpt_safetensors_t *st);

/* Number of tensors, and tensor i (0 <= i < count) in file order (by
 * offset); NULL when i is out of range. */
size_t dpt_safetensors_count(const dpt_safetensors_t *st);
const dpt_safetensors_tensor_t *dpt_safetensors_tensor(const dpt_safetensors_t *st, size_t i);

/* The tensor called `name`, or NULL (no error message). O(log n). */
const dpt_safetensors_tensor_t *dpt_safetensors_find(const dpt_safetensors_t *st, const char *name);

/* Checked lookup: the tensor `name` must exist with `dtype` and, when
 * `shape` is not NULL, exactly `ndim` dimensions equal to `shape`. On
 * success *out is the tensor. Errors: DPT_ENOENT ("checkpoint P: no tensor
 * \"x\""), DPT_EINVAL ("checkpoint P: tensor x has shape [4, 3], expected
 * [5, 3]" / "has dtype I32, expected F32"). */
int dpt_safetensors_get(const dpt_safetensors_t *st, const char *name, dpt_st_dtype_t dtype,
                        int ndim, const size_t *shape, const dpt_safetensors_tensor_t **out);

/* A blob written by dpt_safetensors_add_blob: *data (borrowed, valid until
 * destroy) and *bytes. Errors: DPT_ENOENT, DPT_EINVAL (not a 1-D U8
 * tensor). */
int dpt_safetensors_get_blob(const dpt_safetensors_t *st, const char *name, const void **data,
                             size_t *bytes);

/* Copies the variables of `table` from the tensors prefix + name into the
 * arena `data` (`count` floats, laid out by the table; padding untouched).
 * Every variable must exist as an F32 tensor of exactly its shape, and every
 * tensor whose name starts with `prefix` must be a variable of the table.
 * Nothing is copied unless everything matches; with data NULL (count
 * ignored) nothing is copied, everything is checked.
 * Errors: DPT_ENOENT ("checkpoint P: variable 0.weight (tensor
 * params.0.weight) is missing"), DPT_EINVAL ("checkpoint P: variable
 * 0.weight has shape [4, 3], the model has [5, 3]", wrong dtype, a tensor
 * that is not a variable, count < table->total with data). */
int dpt_safetensors_load_arena(const dpt_safetensors_t *st, const char *prefix,
                               const dpt_vartable_t *table, float *data, size_t count);

/* The metadata value of `key`, or NULL when absent. Valid until destroy. */
const char *dpt_safetensors_meta(const dpt_safetensors_t *st, const char *key);
/* Number of metadata entries, and entry i (key and value, borrowed);
 * DPT_EINVAL when i is out of range. */
size_t dpt_safetensors_meta_count(const dpt_safetensors_t *st);
int dpt_safetensors_meta_at(const dpt_safetensors_t *st, size_t i, const char **key,
                            const char **value);
/* Parses metadata `key` as an unsigned decimal integer (digits only, no sign
 * or spaces, at most UINT64_MAX). Errors: DPT_ENOENT (absent), DPT_EFORMAT
 * (not such a number), both naming the file and key. */
int dpt_safetensors_meta_u64(const dpt_safetensors_t *st, const char *key, uint64_t *value);

/* 64-bit FNV-1a of `n` bytes continuing from `h` (start with
 * DPT_FNV1A64_INIT). Exposed for tests and tools. */
#define DPT_FNV1A64_INIT UINT64_C(0xcbf29ce484222325)
uint64_t dpt_fnv1a64(uint64_t h, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* DPT_CHECKPOINT_H */
