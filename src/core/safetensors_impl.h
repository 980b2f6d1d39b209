/*
 * Internal: the safetensors reader's state, shared by safetensors.c
 * (validation, load, accessors) and safetensors_header.c (the JSON parser
 * for the header). Not installed; nothing outside src/core includes it.
 */
#ifndef DPT_CORE_SAFETENSORS_IMPL_H
#define DPT_CORE_SAFETENSORS_IMPL_H

#include "dpt/checkpoint.h"

#include <stddef.h>
#include <stdint.h>

/* One tensor as the header describes it. name, dtype_str and copy are owned
 * by the entry and freed by dpt_safetensors_destroy. */
typedef struct entry {
    dpt_safetensors_tensor_t pub;
    char *name;
    char *dtype_str; /* as written, until resolved */
    uint64_t shape[DPT_SAFETENSORS_MAX_DIMS];
    int ndim;
    uint64_t begin, end;
    void *copy; /* aligned copy when the file's offset is misaligned */
} entry_t;

/* One "__metadata__" entry; key and value are owned, freed by
 * dpt_safetensors_destroy. */
typedef struct meta {
    char *key;
    char *value;
} meta_t;

/* The reader (opaque in dpt/checkpoint.h). e and m grow while the header is
 * parsed (cap and capm are their capacities); by_name and data are filled
 * in by dpt_safetensors_load. Everything is owned by the reader. */
struct dpt_safetensors {
    char *path;
    entry_t *e; /* in file order after validation */
    size_t n, cap;
    size_t *by_name; /* indices into e, sorted by name */
    meta_t *m;
    size_t nm, capm;
    unsigned char *data; /* the data section: 64-byte aligned, or in map */
    size_t data_bytes;
    unsigned char *map; /* the whole file mapped read-only, or NULL (data is owned) */
    size_t map_bytes;
};

/* Gives back the memory of the data section's bytes [p, p + n) (whole pages
 * inside it) when the data is a mapping of the file: the next read of them
 * comes from the file again (the page cache), so a large tensor copied out
 * (dpt_safetensors_load_arena) does not stay resident twice. A no-op for
 * owned data. */
void dpt__safetensors_release(const dpt_safetensors_t *st, const void *p, size_t n);

/* Parses the header JSON (the n bytes at hdr, borrowed; they follow the
 * 8-byte length in the file) into st, whose path must be set: tensors are
 * appended to st->e in header order (name, dtype_str, shape, ndim, begin,
 * end) and "__metadata__" entries to st->m. dtypes, sizes and offsets are
 * left to the validation in safetensors.c. If "dpt.checksum" is present,
 * *cks_pos and *cks_len receive the position and length of its value in hdr
 * (the raw bytes between the quotes); otherwise they are left unchanged.
 * Returns 0, DPT_EFORMAT (the message gives the byte position) or
 * DPT_ENOMEM; on failure st holds what was parsed so far and is safe to
 * pass to dpt_safetensors_destroy. */
int dpt__safetensors_parse_header(dpt_safetensors_t *st, const unsigned char *hdr, size_t n,
                                  size_t *cks_pos, size_t *cks_len);

#endif
