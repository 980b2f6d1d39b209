/* The safetensors reader: validation of the whole file, loading and the
 * accessors. The header's JSON parser is in safetensors_header.c, the
 * writer in checkpoint.c. */
#define _GNU_SOURCE /* madvise */
#include "dpt/checkpoint.h"
#include "dpt/status.h"
#include "io.h"
#include "safetensors_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Data sections of at least this many bytes are mapped, not read. */
#define DPT__SAFETENSORS_MAP_MIN ((size_t)1 << 20)

#define CKS_PREFIX "fnv1a64:"
#define CKS_PREFIX_LEN 8
#define CKS_DIGITS 16

uint64_t dpt_fnv1a64(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

void dpt_safetensors_destroy(dpt_safetensors_t *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++) {
        free(st->e[i].name);
        free(st->e[i].dtype_str);
        free(st->e[i].copy);
    }
    for (size_t i = 0; i < st->nm; i++) {
        free(st->m[i].key);
        free(st->m[i].value);
    }
    free(st->e);
    free(st->m);
    free(st->by_name);
    if (st->map)
        munmap(st->map, st->map_bytes);
    else
        dpt_free_aligned(st->data);
    free(st->path);
    free(st);
}

/* ---- validation ------------------------------------------------------ */

static int fits_size(uint64_t v)
{
#if SIZE_MAX < UINT64_MAX
    return v <= SIZE_MAX;
#else
    (void)v;
    return 1;
#endif
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 1;
}

static int cmp_offsets(const void *a, const void *b)
{
    const entry_t *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* qsort has no context argument; the name index sorts pointers instead. */
static int cmp_name_ptr(const void *a, const void *b)
{
    const entry_t *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int verify_checksum(dpt_safetensors_t *st, const unsigned char *hdr, size_t n,
                           const unsigned char len8[8], size_t pos, size_t len)
{
    const char *path = st->path;
    const char *value = dpt_safetensors_meta(st, "dpt.checksum");
    /* The value must be exactly "fnv1a64:" + 16 lowercase hex digits, as
     * written, without escapes (so the raw bytes are the value). */
    int ok = len == CKS_PREFIX_LEN + CKS_DIGITS && strlen(value) == len &&
             memcmp(value, CKS_PREFIX, CKS_PREFIX_LEN) == 0;
    for (size_t k = CKS_PREFIX_LEN; ok && k < len; k++)
        ok = (value[k] >= '0' && value[k] <= '9') || (value[k] >= 'a' && value[k] <= 'f');
    if (!ok)
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: dpt.checksum \"%.40s\" is not fnv1a64:<16 hex digits>",
                         path, value);
    uint64_t want = strtoull(value + CKS_PREFIX_LEN, NULL, 16);
    size_t digits = pos + CKS_PREFIX_LEN;
    static const char zeros[CKS_DIGITS] = "0000000000000000";
    uint64_t h = dpt_fnv1a64(DPT_FNV1A64_INIT, len8, 8);
    h = dpt_fnv1a64(h, hdr, digits);
    h = dpt_fnv1a64(h, zeros, CKS_DIGITS);
    h = dpt_fnv1a64(h, hdr + digits + CKS_DIGITS, n - digits - CKS_DIGITS);
    h = dpt_fnv1a64(h, st->data, st->data_bytes);
    if (h != want) {
        /* Say "truncated" when that is the likely story. */
        uint64_t need = 0;
        for (size_t i = 0; i < st->n; i++)
            if (st->e[i].end > need)
                need = st->e[i].end;
        if (need > st->data_bytes)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: the file is truncated: the tensors need %" PRIu64
                             " bytes of data, it has %zu (checksum mismatch)",
                             path, need, st->data_bytes);
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: checksum mismatch (the file says %016" PRIx64
                         ", its contents give %016" PRIx64 "): the file is corrupted",
                         path, want, h);
    }
    return DPT_OK;
}

static int validate_tensors(dpt_safetensors_t *st)
{
    const char *path = st->path;
    for (size_t i = 0; i < st->n; i++) {
        entry_t *e = &st->e[i];
        int found = 0;
        for (int d = 0; d < DPT_ST_DTYPE_COUNT; d++)
            if (strcmp(e->dtype_str, dpt_safetensors_dtype_name((dpt_st_dtype_t)d)) == 0) {
                e->pub.dtype = (dpt_st_dtype_t)d;
                found = 1;
            }
        if (!found)
            return dpt_error(DPT_ENOTSUP,
                             "checkpoint %s: tensor %s has dtype \"%.16s\", which dpt does not "
                             "read (F32, I32, U8, I64, F64)",
                             path, e->name, e->dtype_str);
        size_t es = dpt_safetensors_dtype_size(e->pub.dtype), count = 1;
        for (int d = 0; d < e->ndim; d++)
            if (!fits_size(e->shape[d]) || dpt_mul_size(count, (size_t)e->shape[d], &count) != 0)
                return dpt_error(DPT_EFORMAT, "checkpoint %s: tensor %s: shape overflows", path,
                                 e->name);
        size_t bytes;
        if (dpt_mul_size(count, es, &bytes) != 0)
            return dpt_error(DPT_EFORMAT, "checkpoint %s: tensor %s: shape overflows", path,
                             e->name);
        if (e->end < e->begin)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
                             "] end before they begin",
                             path, e->name, e->begin, e->end);
        if (e->end - e->begin != bytes)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: tensor %s: shape and dtype give %zu bytes, "
                             "data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                             path, e->name, bytes, e->begin, e->end, e->end - e->begin);
        if (e->end > st->data_bytes)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
                             "] run past the end of the data section (%zu bytes): the file is "
                             "truncated or corrupted",
                             path, e->name, e->begin, e->end, st->data_bytes);
        e->pub.ndim = e->ndim;
        for (int d = 0; d < e->ndim; d++)
            e->pub.shape[d] = (size_t)e->shape[d];
        e->pub.count = count;
        e->pub.bytes = bytes;
    }

    /* File order, then no gap, no overlap and full coverage. */
    if (st->n > 1)
        qsort(st->e, st->n, sizeof *st->e, cmp_offsets);
    uint64_t pos = 0;
    for (size_t i = 0; i < st->n; i++) {
        entry_t *e = &st->e[i];
        if (e->begin > pos)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: bytes %" PRIu64 "..%" PRIu64
                             " of the data section belong to no tensor",
                             path, pos, e->begin);
        if (e->begin < pos)
            return dpt_error(DPT_EFORMAT, "checkpoint %s: tensor %s overlaps the tensor before it",
                             path, e->name);
        pos = e->end;
    }
    if (pos != st->data_bytes)
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: the tensors cover %" PRIu64
                         " bytes, the data section has %zu",
                         path, pos, st->data_bytes);

    /* Names: sorted index, duplicates refused. */
    entry_t **idx = malloc((st->n ? st->n : 1) * sizeof *idx);
    st->by_name = malloc((st->n ? st->n : 1) * sizeof *st->by_name);
    if (!idx || !st->by_name) {
        free(idx);
        return dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
    }
    for (size_t i = 0; i < st->n; i++)
        idx[i] = &st->e[i];
    if (st->n > 1)
        qsort(idx, st->n, sizeof *idx, cmp_name_ptr);
    for (size_t i = 0; i < st->n; i++) {
        st->by_name[i] = (size_t)(idx[i] - st->e);
        if (i > 0 && strcmp(idx[i]->name, idx[i - 1]->name) == 0) {
            int rc = dpt_error(DPT_EFORMAT, "checkpoint %s: tensor %s appears twice", path,
                               idx[i]->name);
            free(idx);
            return rc;
        }
    }
    free(idx);

    /* Data pointers: host byte order, aligned to the element size. */
    int le = host_is_little_endian();
    for (size_t i = 0; i < st->n; i++) {
        entry_t *e = &st->e[i];
        size_t es = dpt_safetensors_dtype_size(e->pub.dtype);
        unsigned char *src = st->data + e->begin;
        e->pub.name = e->name;
        if (e->pub.bytes == 0) {
            e->pub.data = src;
            continue;
        }
        if ((uintptr_t)src % es != 0) {
            e->copy = malloc(e->pub.bytes);
            if (!e->copy)
                return dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
            memcpy(e->copy, src, e->pub.bytes);
            src = e->copy;
        }
        if (!le && es > 1)
            for (size_t k = 0; k < e->pub.bytes; k += es)
                for (size_t a = 0, b = es - 1; a < b; a++, b--) {
                    unsigned char t = src[k + a];
                    src[k + a] = src[k + b];
                    src[k + b] = t;
                }
        e->pub.data = src;
    }
    return DPT_OK;
}

/* ---- load ------------------------------------------------------------ */

static int read_exact(FILE *f, void *buf, size_t n)
{
    return n == 0 || fread(buf, 1, n, f) == n;
}

int dpt_safetensors_load(dpt_safetensors_t **out, const char *path)
{
    int rc = DPT_OK;
    FILE *f = NULL;
    unsigned char *hdr = NULL;
    *out = NULL;
    dpt_safetensors_t *st = calloc(1, sizeof *st);
    if (!st || !(st->path = malloc(strlen(path) + 1))) {
        free(st);
        return dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
    }
    memcpy(st->path, path, strlen(path) + 1);

    f = fopen(path, "rb");
    if (!f) {
        rc = errno == ENOENT ? dpt_error(DPT_ENOENT, "checkpoint %s: no such file", path)
                             : dpt_error(dpt__io_read_status(errno),
                                         "checkpoint %s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = S_ISDIR(sb.st_mode)
                 ? dpt_error(DPT_EINVAL, "checkpoint %s: a directory, not a checkpoint file", path)
                 : dpt_error(DPT_EINVAL, "checkpoint %s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s: the file has %" PRIu64 " bytes, fewer than the 8-byte "
                       "header length: truncated, or not a safetensors file",
                       path, size);
        goto fail;
    }
    unsigned char len8[8];
    if (!read_exact(f, len8, 8))
        goto read_error;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len8[i];
    if (n == 0 || n > DPT_SAFETENSORS_MAX_HEADER) {
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s: header length %" PRIu64 " is %s: not a safetensors file, "
                       "or a corrupted one",
                       path, n, n == 0 ? "zero" : "over the 100 MiB limit");
        goto fail;
    }
    if (n > size - 8) {
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s: header length %" PRIu64 " runs past the end of the file "
                       "(%" PRIu64 " bytes): the file is truncated or corrupted",
                       path, n, size);
        goto fail;
    }
    hdr = malloc((size_t)n);
    if (!hdr) {
        rc = dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
        goto fail;
    }
    if (!read_exact(f, hdr, (size_t)n))
        goto read_error;
    if (!fits_size(size - 8 - n)) {
        rc = dpt_error(DPT_EOVERFLOW, "checkpoint %s: too large for this machine", path);
        goto fail;
    }
    st->data_bytes = (size_t)(size - 8 - n);
    /* The data of a large file, on a little-endian host (nothing to swap in
     * place), is the file mapped read-only: after the validation below its
     * pages are given back, and a reader's copies take them from the page
     * cache again, so the file is not held in memory while, say, the
     * trainer it restores is built. Elsewhere, or when mapping fails: read. */
    if (st->data_bytes >= DPT__SAFETENSORS_MAP_MIN && host_is_little_endian() && fits_size(size)) {
        void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
        if (map != MAP_FAILED) {
            st->map = map;
            st->map_bytes = (size_t)size;
            st->data = st->map + 8 + n;
        }
    }
    if (st->data_bytes > 0 && !st->map) {
        st->data = dpt_alloc_aligned(st->data_bytes);
        if (!st->data) {
            rc = dpt_error(DPT_ENOMEM, "checkpoint %s: cannot allocate %zu bytes", path,
                           st->data_bytes);
            goto fail;
        }
        if (!read_exact(f, st->data, st->data_bytes))
            goto read_error;
    }
    fclose(f);
    f = NULL;

    size_t cks_pos = 0, cks_len = 0;
    rc = dpt__safetensors_parse_header(st, hdr, (size_t)n, &cks_pos, &cks_len);
    if (rc < 0)
        goto fail;
    /* The checksum comes before the other checks, so that a corrupted file
     * is reported as such rather than as an odd dtype or shape. A dpt file
     * (one with dpt.format) must carry it. */
    if (dpt_safetensors_meta(st, "dpt.checksum")) {
        rc = verify_checksum(st, hdr, (size_t)n, len8, cks_pos, cks_len);
        if (rc < 0)
            goto fail;
    } else if (dpt_safetensors_meta(st, "dpt.format")) {
        rc = dpt_error(DPT_EFORMAT, "checkpoint %s: dpt.format is set but dpt.checksum is missing",
                       path);
        goto fail;
    }
    rc = validate_tensors(st);
    if (rc < 0)
        goto fail;
    const char *fmt = dpt_safetensors_meta(st, "dpt.format");
    if (fmt && strcmp(fmt, "1") != 0) {
        rc = dpt_error(DPT_ENOTSUP,
                       "checkpoint %s: dpt.format \"%.16s\" is not supported by this build "
                       "(it reads format 1)",
                       path, fmt);
        goto fail;
    }
    free(hdr);
    if (st->map)
        madvise(st->map, st->map_bytes, MADV_DONTNEED);
    *out = st;
    return DPT_OK;

read_error:
    rc = ferror(f) ? dpt_error(DPT_EIO, "checkpoint %s: read error: %s", path, strerror(errno))
                   : dpt_error(DPT_EIO, "checkpoint %s: the file shrank while being read", path);
fail:
    if (f)
        fclose(f);
    free(hdr);
    dpt_safetensors_destroy(st);
    return rc;
}

void dpt__safetensors_release(const dpt_safetensors_t *st, const void *p, size_t n)
{
    if (!st->map || n == 0)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) / page * page, b = ((uintptr_t)p + n) / page * page;
    if (a >= (uintptr_t)st->map && b <= (uintptr_t)st->map + st->map_bytes && a < b)
        madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
}

/* ---- accessors ------------------------------------------------------- */

const char *dpt_safetensors_path(const dpt_safetensors_t *st)
{
    return st->path;
}

size_t dpt_safetensors_count(const dpt_safetensors_t *st)
{
    return st->n;
}

const dpt_safetensors_tensor_t *dpt_safetensors_tensor(const dpt_safetensors_t *st, size_t i)
{
    return i < st->n ? &st->e[i].pub : NULL;
}

const dpt_safetensors_tensor_t *dpt_safetensors_find(const dpt_safetensors_t *st, const char *name)
{
    size_t lo = 0, hi = st->n;
    if (!st->by_name)
        return NULL;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const entry_t *e = &st->e[st->by_name[mid]];
        int c = strcmp(name, e->name);
        if (c == 0)
            return &e->pub;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *dpt_safetensors_meta(const dpt_safetensors_t *st, const char *key)
{
    for (size_t i = 0; i < st->nm; i++)
        if (strcmp(st->m[i].key, key) == 0)
            return st->m[i].value;
    return NULL;
}

size_t dpt_safetensors_meta_count(const dpt_safetensors_t *st)
{
    return st->nm;
}

int dpt_safetensors_meta_at(const dpt_safetensors_t *st, size_t i, const char **key,
                            const char **value)
{
    if (i >= st->nm)
        return dpt_error(DPT_EINVAL, "checkpoint %s: metadata index %zu out of range (%zu)",
                         st->path, i, st->nm);
    *key = st->m[i].key;
    *value = st->m[i].value;
    return DPT_OK;
}

int dpt_safetensors_meta_u64(const dpt_safetensors_t *st, const char *key, uint64_t *value)
{
    const char *s = dpt_safetensors_meta(st, key);
    if (!s)
        return dpt_error(DPT_ENOENT, "checkpoint %s: no metadata \"%s\"", st->path, key);
    uint64_t v = 0;
    int ok = s[0] != '\0';
    for (const char *c = s; ok && *c; c++) {
        unsigned d = (unsigned)(*c - '0');
        ok = *c >= '0' && *c <= '9' && v <= (UINT64_MAX - d) / 10;
        v = v * 10 + d;
    }
    if (!ok)
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: metadata %s = \"%.40s\" is not an unsigned 64-bit "
                         "integer",
                         st->path, key, s);
    *value = v;
    return DPT_OK;
}
