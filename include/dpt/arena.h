/*
 * dpt/arena.h — flat float arenas and the variable table.
 *
 * A model's parameters live in one contiguous, 64-byte-aligned float buffer
 * (an arena); gradients and every optimizer slot use arenas of the same
 * layout. The variable table names the pieces: {name, shape, offset, count}.
 * Each variable starts on a 64-byte boundary (offsets are multiples of 16
 * floats); the padding between variables is kept at zero, so whole-arena
 * loops (zeroing, clipping, reducing, applying, checksums) need no table.
 *
 * Arenas are allocated once, pre-touched (first touch of a page is expensive
 * on virtual machines) and reused; large ones ask for transparent huge pages.
 */
#ifndef DPT_ARENA_H
#define DPT_ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_ARENA_ALIGN 64      /* bytes */
#define DPT_VAR_ALIGN_FLOATS 16 /* variable offsets are multiples of this */
#define DPT_VAR_NAME_MAX 64     /* including the terminating zero */
#define DPT_VAR_MAX_DIMS 4

/* One variable of a table. */
typedef struct dpt_var {
    char name[DPT_VAR_NAME_MAX];    /* unique within the table, e.g. "fc1.weight" */
    int ndim;                       /* 1..DPT_VAR_MAX_DIMS */
    size_t shape[DPT_VAR_MAX_DIMS]; /* row-major shape, shape[ndim..] unused */
    size_t offset;                  /* first float, a multiple of DPT_VAR_ALIGN_FLOATS */
    size_t count;                   /* product of the shape */
} dpt_var_t;

/* The layout of an arena: an ordered list of variables. The struct is the
 * caller's; the list is owned by the table until dpt_vartable_deinit(). */
typedef struct dpt_vartable {
    dpt_var_t *vars; /* nvars entries (owned) */
    size_t nvars;
    size_t cap;
    size_t total; /* floats an arena needs for this layout (with padding) */
} dpt_vartable_t;

/* Starts an empty table. Never fails. */
void dpt_vartable_init(dpt_vartable_t *t);
/* Frees the list; safe on a zeroed table. */
void dpt_vartable_deinit(dpt_vartable_t *t);
/* Appends a variable; its offset is written to *offset when not NULL.
 * Errors: DPT_EINVAL (empty or too long name, duplicate name, ndim out of
 * range, a zero dimension), DPT_EOVERFLOW (sizes overflow size_t),
 * DPT_ENOMEM. */
int dpt_vartable_add(dpt_vartable_t *t, const char *name, int ndim, const size_t *shape,
                     size_t *offset);
/* Looks a variable up by name; NULL when absent. Borrowed pointer, valid
 * until the table changes. */
const dpt_var_t *dpt_vartable_find(const dpt_vartable_t *t, const char *name);
/* Copies `src` into `dst` (dst is deinitialised first). */
int dpt_vartable_copy(dpt_vartable_t *dst, const dpt_vartable_t *src);
/* 1 when both tables have the same names, shapes and offsets in order. */
int dpt_vartable_equal(const dpt_vartable_t *a, const dpt_vartable_t *b);
/* Selects variables by name: `list` is comma-separated entries (spaces
 * around each ignored, empty ones skipped), each the name of a variable or
 * a prefix of names that ends where a name's part ends: entry E matches
 * name N when N == E, or when N starts with E and E ends in '.' or '/' or
 * N goes on with '.' or '/' ("actor" and "actor." match "actor.0.weight";
 * "actor.0" matches "actor.0.bias" but not "actor.01.bias"). Sets mask[i]
 * (t->nvars entries) to 1 for each variable some entry matches, 0 for the
 * others; *count (when not NULL) gets the number selected. NULL or "" selects
 * none. Errors: DPT_EINVAL naming the first entry that matches no variable,
 * or that is longer than a name can be, and listing the table's first
 * names (mask is then all 0). */
int dpt_vartable_select(const dpt_vartable_t *t, const char *list, unsigned char *mask,
                        size_t *count);

/* A float arena. The struct is the caller's; `data` is owned by the arena. */
typedef struct dpt_arena {
    float *data; /* count floats, 64-byte aligned, zeroed at init (owned) */
    size_t count;
} dpt_arena_t;

/* Allocates `count` zeroed, pre-touched floats (count 0 gives data == NULL).
 * Errors: DPT_EOVERFLOW, DPT_ENOMEM. */
int dpt_arena_init(dpt_arena_t *a, size_t count);
/* Frees the buffer; safe on a zeroed or already deinitialised arena. */
void dpt_arena_deinit(dpt_arena_t *a);

/* Aligned allocation used by arenas and other long-lived buffers: `bytes`
 * rounded up to the alignment, zeroed, pre-touched, with transparent huge
 * pages requested for large sizes. NULL on failure or bytes == 0. Free with
 * dpt_free_aligned(). */
void *dpt_alloc_aligned(size_t bytes);
void dpt_free_aligned(void *p);
/* Overflow-checked a * b; returns 0 and writes *out, or DPT_EOVERFLOW. */
int dpt_mul_size(size_t a, size_t b, size_t *out);

/* Vector helpers over float arrays (and so over whole arenas). Sums are
 * accumulated in double in a fixed order (eight interleaved partial sums,
 * then combined pairwise), so they are deterministic. */
void dpt_vec_zero(float *x, size_t n);
void dpt_vec_copy(float *dst, const float *src, size_t n);
void dpt_vec_scale(float *x, size_t n, float s);
/* y += a * x */
void dpt_vec_axpy(float *y, const float *x, size_t n, float a);
/* sum of x[i]^2 in double */
double dpt_vec_sumsq(const float *x, size_t n);
/* sum of x[i] * y[i] in double */
double dpt_vec_dot(const float *x, const float *y, size_t n);
/* 1 when every value is finite, 0 when there is a NaN or infinity. */
int dpt_vec_all_finite(const float *x, size_t n);
/* Index of the first non-finite value, or n when all are finite. */
size_t dpt_vec_first_nonfinite(const float *x, size_t n);
/* 64-bit FNV-1a hash of the bit patterns: equal iff (with overwhelming
 * probability) bitwise-identical contents. Used for replica checks. */
uint64_t dpt_vec_checksum(const float *x, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* DPT_ARENA_H */
