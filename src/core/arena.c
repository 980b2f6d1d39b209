/* Arenas, aligned allocation and the variable table. */
#include "core/clones.h"
#include "dpt/arena.h"
#include "dpt/checkpoint.h"
#include "dpt/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Above this size an allocation asks for transparent huge pages: a fresh
 * 4 KiB page costs ~10 us to touch on these VMs, a 2 MiB page far less. */
#define DPT_HUGE_THRESHOLD ((size_t)2 << 20)

int dpt_mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > ((size_t)-1) / a)
        return DPT_EOVERFLOW;
    *out = a * b;
    return DPT_OK;
}

void *dpt_alloc_aligned(size_t bytes)
{
    if (bytes == 0 || bytes > ((size_t)-1) - DPT_ARENA_ALIGN)
        return NULL;
    size_t align = bytes >= DPT_HUGE_THRESHOLD ? DPT_HUGE_THRESHOLD : DPT_ARENA_ALIGN;
    size_t rounded = (bytes + align - 1) / align * align;
    void *p = NULL;
    if (posix_memalign(&p, align, rounded) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (rounded >= DPT_HUGE_THRESHOLD)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint; failure is harmless */
#endif
    /* memset both zeroes and pre-touches every page. */
    memset(p, 0, rounded);
    return p;
}

void dpt_free_aligned(void *p)
{
    free(p);
}

int dpt_arena_init(dpt_arena_t *a, size_t count)
{
    a->data = NULL;
    a->count = 0;
    if (count == 0)
        return DPT_OK;
    size_t bytes;
    if (dpt_mul_size(count, sizeof(float), &bytes) != 0)
        return dpt_error(DPT_EOVERFLOW, "arena: %zu floats overflow the address space", count);
    a->data = dpt_alloc_aligned(bytes);
    if (!a->data)
        return dpt_error(DPT_ENOMEM, "arena: cannot allocate %zu floats (%zu bytes)", count, bytes);
    a->count = count;
    return DPT_OK;
}

void dpt_arena_deinit(dpt_arena_t *a)
{
    if (!a)
        return;
    dpt_free_aligned(a->data);
    a->data = NULL;
    a->count = 0;
}

void dpt_vartable_init(dpt_vartable_t *t)
{
    memset(t, 0, sizeof *t);
}

void dpt_vartable_deinit(dpt_vartable_t *t)
{
    if (!t)
        return;
    free(t->vars);
    memset(t, 0, sizeof *t);
}

int dpt_vartable_add(dpt_vartable_t *t, const char *name, int ndim, const size_t *shape,
                     size_t *offset)
{
    if (!name || name[0] == '\0')
        return dpt_error(DPT_EINVAL, "variable table: empty variable name");
    if (strlen(name) >= DPT_VAR_NAME_MAX)
        return dpt_error(DPT_EINVAL, "variable table: name \"%.40s...\" is longer than %d bytes",
                         name, DPT_VAR_NAME_MAX - 1);
    if (ndim < 1 || ndim > DPT_VAR_MAX_DIMS)
        return dpt_error(DPT_EINVAL, "variable \"%s\": %d dimensions (allowed 1..%d)", name, ndim,
                         DPT_VAR_MAX_DIMS);
    if (dpt_vartable_find(t, name))
        return dpt_error(DPT_EINVAL, "variable \"%s\" is already in the table", name);
    size_t count = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return dpt_error(DPT_EINVAL, "variable \"%s\": dimension %d is 0", name, d);
        if (dpt_mul_size(count, shape[d], &count) != 0)
            return dpt_error(DPT_EOVERFLOW, "variable \"%s\": shape overflows size_t", name);
    }
    size_t off =
        (t->total + DPT_VAR_ALIGN_FLOATS - 1) / DPT_VAR_ALIGN_FLOATS * DPT_VAR_ALIGN_FLOATS;
    if (off < t->total || off > ((size_t)-1) - count - DPT_VAR_ALIGN_FLOATS)
        return dpt_error(DPT_EOVERFLOW, "variable \"%s\": table size overflows size_t", name);
    if (t->nvars == t->cap) {
        size_t ncap = t->cap ? 2 * t->cap : 8;
        dpt_var_t *nv = realloc(t->vars, ncap * sizeof *nv);
        if (!nv)
            return dpt_error(DPT_ENOMEM, "variable table: cannot grow to %zu entries", ncap);
        t->vars = nv;
        t->cap = ncap;
    }
    dpt_var_t *v = &t->vars[t->nvars++];
    memset(v, 0, sizeof *v);
    strcpy(v->name, name);
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        v->shape[d] = shape[d];
    v->offset = off;
    v->count = count;
    /* The total is padded too, so consecutive tables could be concatenated
     * and every arena ends on an aligned boundary. */
    t->total =
        (off + count + DPT_VAR_ALIGN_FLOATS - 1) / DPT_VAR_ALIGN_FLOATS * DPT_VAR_ALIGN_FLOATS;
    if (offset)
        *offset = off;
    return DPT_OK;
}

const dpt_var_t *dpt_vartable_find(const dpt_vartable_t *t, const char *name)
{
    for (size_t i = 0; i < t->nvars; i++)
        if (strcmp(t->vars[i].name, name) == 0)
            return &t->vars[i];
    return NULL;
}

int dpt_vartable_copy(dpt_vartable_t *dst, const dpt_vartable_t *src)
{
    dpt_vartable_deinit(dst);
    if (src->nvars == 0)
        return DPT_OK;
    dst->vars = malloc(src->nvars * sizeof *dst->vars);
    if (!dst->vars)
        return dpt_error(DPT_ENOMEM, "variable table: cannot copy %zu entries", src->nvars);
    memcpy(dst->vars, src->vars, src->nvars * sizeof *dst->vars);
    dst->nvars = dst->cap = src->nvars;
    dst->total = src->total;
    return DPT_OK;
}

int dpt_vartable_equal(const dpt_vartable_t *a, const dpt_vartable_t *b)
{
    if (a->nvars != b->nvars || a->total != b->total)
        return 0;
    for (size_t i = 0; i < a->nvars; i++) {
        const dpt_var_t *x = &a->vars[i], *y = &b->vars[i];
        if (strcmp(x->name, y->name) != 0 || x->ndim != y->ndim || x->offset != y->offset ||
            x->count != y->count)
            return 0;
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d])
                return 0;
    }
    return 1;
}

/* 1 when entry e (len bytes) matches the name n (dpt_vartable_select). */
static int dpt__vartable_entry_matches(const char *e, size_t len, const char *n)
{
    if (strncmp(n, e, len) != 0)
        return 0;
    char next = n[len], last = e[len - 1];
    return next == '\0' || last == '.' || last == '/' || next == '.' || next == '/';
}

/* "a, b, c, ... (N in all)": the table's first names, for an error. */
static void dpt__vartable_some_names(const dpt_vartable_t *t, char *buf, size_t size)
{
    buf[0] = '\0';
    for (size_t i = 0; i < t->nvars && i < 8; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, size - len, "%s%s", i ? ", " : "", t->vars[i].name);
    }
    size_t len = strlen(buf);
    if (t->nvars > 8)
        snprintf(buf + len, size - len, ", ... (%zu in all)", t->nvars);
    else if (t->nvars == 0)
        snprintf(buf, size, "none");
}

int dpt_vartable_select(const dpt_vartable_t *t, const char *list, unsigned char *mask,
                        size_t *count)
{
    if (t->nvars)
        memset(mask, 0, t->nvars);
    if (count)
        *count = 0;
    size_t selected = 0;
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        int hits = 0;
        for (size_t i = 0; len && len < DPT_VAR_NAME_MAX && i < t->nvars; i++)
            if (dpt__vartable_entry_matches(p, len, t->vars[i].name)) {
                hits++;
                selected += !mask[i];
                mask[i] = 1;
            }
        if (len && !hits) {
            char names[8 * DPT_VAR_NAME_MAX + 32];
            dpt__vartable_some_names(t, names, sizeof names);
            if (t->nvars)
                memset(mask, 0, t->nvars);
            return dpt_error(DPT_EINVAL,
                             "\"%.*s\" matches no variable (an entry is a name, or a prefix "
                             "of names up to a '.' or '/'; the variables: %s)",
                             (int)(len < 200 ? len : 200), p, names);
        }
        p = end ? end + 1 : p + strlen(p);
    }
    if (count)
        *count = selected;
    return DPT_OK;
}

void dpt_vec_zero(float *x, size_t n)
{
    if (n)
        memset(x, 0, n * sizeof *x);
}

void dpt_vec_copy(float *dst, const float *src, size_t n)
{
    if (n && dst != src)
        memmove(dst, src, n * sizeof *dst);
}

DPT__CLONES
void dpt_vec_scale(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

DPT__CLONES
void dpt_vec_axpy(float *y, const float *x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* Eight interleaved double accumulators (element i goes to lane i % 8),
 * combined pairwise in a fixed order: the result depends only on the data,
 * and the loop vectorises without any reassociation by the compiler. */
#define DPT__LANES 8

static double dpt__combine(const double *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

DPT__CLONES
double dpt_vec_sumsq(const float *x, size_t n)
{
    double acc[DPT__LANES] = {0};
    size_t i = 0;
    for (; i + DPT__LANES <= n; i += DPT__LANES)
        for (int j = 0; j < DPT__LANES; j++)
            acc[j] += (double)x[i + (size_t)j] * (double)x[i + (size_t)j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += (double)x[i] * (double)x[i];
    return dpt__combine(acc);
}

DPT__CLONES
double dpt_vec_dot(const float *x, const float *y, size_t n)
{
    double acc[DPT__LANES] = {0};
    size_t i = 0;
    for (; i + DPT__LANES <= n; i += DPT__LANES)
        for (int j = 0; j < DPT__LANES; j++)
            acc[j] += (double)x[i + (size_t)j] * (double)y[i + (size_t)j];
    for (int j = 0; i < n; i++, j++)
        acc[j] += (double)x[i] * (double)y[i];
    return dpt__combine(acc);
}

size_t dpt_vec_first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

DPT__CLONES
int dpt_vec_all_finite(const float *x, size_t n)
{
    /* A float is NaN or infinite iff its exponent bits are all ones. An OR
     * of the per-element tests is an exact, order-free integer reduction
     * that vectorises (mask, compare, or), unlike a float sum or a branch
     * per element. */
    const uint32_t expo = 0x7f800000u;
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        bad |= (uint32_t)((bits & expo) == expo);
    }
    return bad == 0;
}

uint64_t dpt_vec_checksum(const float *x, size_t n)
{
    return dpt_fnv1a64(DPT_FNV1A64_INIT, x, n * sizeof(float));
}
