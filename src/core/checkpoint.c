/* Checkpoints: the safetensors writer with its atomic save, and the arena
 * helpers on both sides. The reader and its JSON parser are in
 * safetensors.c. */
#include "dpt/checkpoint.h"
#include "dpt/status.h"
#include "io.h"
#include "safetensors_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKS_PREFIX "fnv1a64:"
#define CKS_DIGITS 16

typedef struct wtensor {
    char *name;
    dpt_st_dtype_t dtype;
    int ndim;
    size_t shape[DPT_SAFETENSORS_MAX_DIMS];
    size_t bytes;
    const void *data; /* borrowed */
} wtensor_t;

typedef struct wmeta {
    char *key;
    char *value;
} wmeta_t;

struct dpt_safetensors_writer {
    wtensor_t *t;
    size_t n, cap;
    wmeta_t *m;
    size_t nm, capm;
};

static const struct {
    const char *name;
    size_t size;
} dtype_info[DPT_ST_DTYPE_COUNT] = {
#define DPT__ST_DTYPE_INFO(sym, name, size) {name, size},
    DPT_SAFETENSORS_DTYPE_LIST(DPT__ST_DTYPE_INFO)
#undef DPT__ST_DTYPE_INFO
};

const char *dpt_safetensors_dtype_name(dpt_st_dtype_t dtype)
{
    return (unsigned)dtype < DPT_ST_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

size_t dpt_safetensors_dtype_size(dpt_st_dtype_t dtype)
{
    return (unsigned)dtype < DPT_ST_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* 1 when s is well-formed UTF-8 (no overlong forms, no surrogates), so the
 * header stays valid JSON for every reader. */
static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, min = 0x10000, c &= 0x07;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            c = (c << 6) | (s[i + k] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

int dpt_safetensors_writer_create(dpt_safetensors_writer_t **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return dpt_error(DPT_ENOMEM, "checkpoint writer: out of memory");
    return DPT_OK;
}

void dpt_safetensors_writer_destroy(dpt_safetensors_writer_t *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (size_t i = 0; i < w->nm; i++) {
        free(w->m[i].key);
        free(w->m[i].value);
    }
    free(w->t);
    free(w->m);
    free(w);
}

/* Grows an array of `size`-byte elements to hold at least n + 1. */
static int grow(void **p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return DPT_OK;
    size_t ncap = *cap ? *cap * 2 : 16, bytes;
    if (ncap <= n || dpt_mul_size(ncap, size, &bytes) != 0)
        return DPT_EOVERFLOW;
    void *q = realloc(*p, bytes);
    if (!q)
        return DPT_ENOMEM;
    *p = q;
    *cap = ncap;
    return DPT_OK;
}

static int add_named(dpt_safetensors_writer_t *w, char *name, dpt_st_dtype_t dtype, int ndim,
                     const size_t *shape, const void *data)
{
    /* `name` is owned here: freed on failure. */
    int rc = DPT_OK;
    if ((unsigned)dtype >= DPT_ST_DTYPE_COUNT) {
        rc = dpt_error(DPT_EINVAL, "checkpoint writer: tensor %s: unknown dtype %d", name,
                       (int)dtype);
        goto fail;
    }
    if (ndim < 0 || ndim > DPT_SAFETENSORS_MAX_DIMS || (ndim > 0 && !shape)) {
        rc = dpt_error(DPT_EINVAL, "checkpoint writer: tensor %s: ndim %d is outside 0..%d", name,
                       ndim, DPT_SAFETENSORS_MAX_DIMS);
        goto fail;
    }
    if (name[0] == '\0' || strcmp(name, "__metadata__") == 0 ||
        !utf8_valid((const unsigned char *)name, strlen(name))) {
        rc = dpt_error(DPT_EINVAL, "checkpoint writer: invalid tensor name \"%s\"", name);
        goto fail;
    }
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            rc = dpt_error(DPT_EINVAL, "checkpoint writer: tensor %s added twice", name);
            goto fail;
        }
    size_t bytes = dtype_info[dtype].size;
    for (int d = 0; d < ndim; d++)
        if (dpt_mul_size(bytes, shape[d], &bytes) != 0) {
            rc = dpt_error(DPT_EOVERFLOW, "checkpoint writer: tensor %s: size overflows", name);
            goto fail;
        }
    if (bytes > 0 && !data) {
        rc = dpt_error(DPT_EINVAL, "checkpoint writer: tensor %s: NULL data", name);
        goto fail;
    }
    rc = grow((void **)&w->t, &w->cap, w->n, sizeof *w->t);
    if (rc < 0) {
        rc = dpt_error(rc, "checkpoint writer: tensor %s: out of memory", name);
        goto fail;
    }
    wtensor_t *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->bytes = bytes;
    t->data = data;
    return DPT_OK;
fail:
    free(name);
    return rc;
}

int dpt_safetensors_add(dpt_safetensors_writer_t *w, const char *name, dpt_st_dtype_t dtype,
                        int ndim, const size_t *shape, const void *data)
{
    if (!name)
        return dpt_error(DPT_EINVAL, "checkpoint writer: NULL tensor name");
    char *copy = dup_str(name);
    if (!copy)
        return dpt_error(DPT_ENOMEM, "checkpoint writer: out of memory");
    return add_named(w, copy, dtype, ndim, shape, data);
}

int dpt_safetensors_add_blob(dpt_safetensors_writer_t *w, const char *name, const void *data,
                             size_t bytes)
{
    return dpt_safetensors_add(w, name, DPT_ST_U8, 1, &bytes, data);
}

int dpt_safetensors_add_arena(dpt_safetensors_writer_t *w, const char *prefix,
                              const dpt_vartable_t *table, const float *data, size_t count)
{
    if (!prefix)
        prefix = "";
    if (count < table->total || (table->total > 0 && !data))
        return dpt_error(DPT_EINVAL,
                         "checkpoint writer: arena %s has %zu floats, its table needs %zu", prefix,
                         data ? count : 0, table->total);
    size_t plen = strlen(prefix), n0 = w->n;
    int rc = DPT_OK;
    for (size_t i = 0; i < table->nvars && rc == DPT_OK; i++) {
        const dpt_var_t *v = &table->vars[i];
        size_t vlen = strlen(v->name);
        char *name = malloc(plen + vlen + 1);
        if (!name) {
            rc = dpt_error(DPT_ENOMEM, "checkpoint writer: out of memory");
            break;
        }
        memcpy(name, prefix, plen);
        memcpy(name + plen, v->name, vlen + 1);
        rc = add_named(w, name, DPT_ST_F32, v->ndim, v->shape, data + v->offset);
    }
    if (rc < 0) {
        /* All or nothing: drop the variables added by this call. */
        while (w->n > n0)
            free(w->t[--w->n].name);
    }
    return rc;
}

static int set_meta(dpt_safetensors_writer_t *w, const char *key, const char *value)
{
    if (!key || key[0] == '\0' || !value)
        return dpt_error(DPT_EINVAL, "checkpoint writer: empty metadata key or NULL value");
    if (!utf8_valid((const unsigned char *)key, strlen(key)) ||
        !utf8_valid((const unsigned char *)value, strlen(value)))
        return dpt_error(DPT_EINVAL, "checkpoint writer: metadata %s is not valid UTF-8", key);
    char *v = dup_str(value);
    if (!v)
        return dpt_error(DPT_ENOMEM, "checkpoint writer: out of memory");
    for (size_t i = 0; i < w->nm; i++)
        if (strcmp(w->m[i].key, key) == 0) {
            free(w->m[i].value);
            w->m[i].value = v;
            return DPT_OK;
        }
    char *k = dup_str(key);
    int rc = k ? grow((void **)&w->m, &w->capm, w->nm, sizeof *w->m) : DPT_ENOMEM;
    if (rc < 0) {
        free(k);
        free(v);
        return dpt_error(rc, "checkpoint writer: out of memory");
    }
    w->m[w->nm].key = k;
    w->m[w->nm].value = v;
    w->nm++;
    return DPT_OK;
}

int dpt_safetensors_set_meta(dpt_safetensors_writer_t *w, const char *key, const char *value)
{
    if (key && strncmp(key, "dpt.", 4) == 0)
        return dpt_error(DPT_EINVAL, "checkpoint writer: metadata key %s is reserved", key);
    return set_meta(w, key, value);
}

int dpt_safetensors_set_meta_u64(dpt_safetensors_writer_t *w, const char *key, uint64_t value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, value);
    return dpt_safetensors_set_meta(w, key, buf);
}

/* ---- header text ----------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int failed;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (n > b->cap - b->len) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap - b->len < n) {
            if (ncap > ((size_t)-1) / 2) {
                b->failed = 1;
                return;
            }
            ncap *= 2;
        }
        char *q = realloc(b->p, ncap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void sb_puts(sbuf_t *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_u64(sbuf_t *b, uint64_t v)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%" PRIu64, v);
    sb_put(b, buf, (size_t)n);
}

/* A JSON string: quotes, backslashes and control characters escaped;
 * other bytes (valid UTF-8, checked when added) copied. */
static void sb_json_string(sbuf_t *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            sb_put(b, e, 2);
        } else if (*p < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 1;
}

/* Feeds a tensor's bytes, in little-endian order, to the hash and, when
 * fd >= 0, to the file. Big-endian hosts go through a swapped staging
 * buffer. Returns 0 or an errno value. */
static int write_all(int fd, const void *p, size_t n)
{
    return dpt__io_write(fd, p, n) == 0 ? 0 : errno;
}

static int emit_tensor(const wtensor_t *t, int fd, uint64_t *h)
{
    size_t es = dtype_info[t->dtype].size;
    if (t->bytes == 0)
        return 0;
    if (es == 1 || host_is_little_endian()) {
        if (h)
            *h = dpt_fnv1a64(*h, t->data, t->bytes);
        return fd >= 0 ? write_all(fd, t->data, t->bytes) : 0;
    }
    unsigned char stage[1 << 14];
    const unsigned char *src = t->data;
    for (size_t off = 0; off < t->bytes; off += sizeof stage) {
        size_t n = t->bytes - off < sizeof stage ? t->bytes - off : sizeof stage;
        for (size_t i = 0; i < n; i += es)
            for (size_t k = 0; k < es; k++)
                stage[i + k] = src[off + i + es - 1 - k];
        if (h)
            *h = dpt_fnv1a64(*h, stage, n);
        if (fd >= 0) {
            int e = write_all(fd, stage, n);
            if (e)
                return e;
        }
    }
    return 0;
}

/* Builds the header (padded) in *b, the tensor order in `order`, and
 * returns the position of the checksum digits in *cks_pos. */
static int build_header(const dpt_safetensors_writer_t *w, size_t *order, sbuf_t *b,
                        size_t *cks_pos)
{
    size_t k = 0;
    static const size_t sizes[] = {8, 4, 2, 1};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t i = 0; i < w->n; i++)
            if (dtype_info[w->t[i].dtype].size == sizes[s])
                order[k++] = i;
    if (k != w->n)
        abort(); /* a dtype with a size not listed above */

    sb_puts(b, "{\"__metadata__\":{\"dpt.checksum\":\"" CKS_PREFIX);
    *cks_pos = b->len;
    sb_puts(b, "0000000000000000\",\"dpt.format\":\"1\"");
    for (size_t i = 0; i < w->nm; i++) {
        sb_puts(b, ",");
        sb_json_string(b, w->m[i].key);
        sb_puts(b, ":");
        sb_json_string(b, w->m[i].value);
    }
    sb_puts(b, "}");
    uint64_t off = 0;
    for (size_t j = 0; j < w->n; j++) {
        const wtensor_t *t = &w->t[order[j]];
        sb_puts(b, ",");
        sb_json_string(b, t->name);
        sb_puts(b, ":{\"dtype\":\"");
        sb_puts(b, dtype_info[t->dtype].name);
        sb_puts(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d)
                sb_puts(b, ",");
            sb_u64(b, t->shape[d]);
        }
        sb_puts(b, "],\"data_offsets\":[");
        sb_u64(b, off);
        sb_puts(b, ",");
        if (t->bytes > UINT64_MAX - off)
            return DPT_EOVERFLOW;
        off += t->bytes;
        sb_u64(b, off);
        sb_puts(b, "]}");
    }
    sb_puts(b, "}");
    while (!b->failed && b->len % 8 != 0)
        sb_puts(b, " ");
    return b->failed ? DPT_ENOMEM : DPT_OK;
}

/* The directory part of `path` ("." when there is none), in buf. */
static int dir_of(const char *path, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return snprintf(buf, size, ".") < (int)size ? 0 : -1;
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n + 1 > size)
        return -1;
    memcpy(buf, path, n);
    buf[n] = '\0';
    return 0;
}

int dpt_safetensors_save(const dpt_safetensors_writer_t *w, const char *path)
{
    static atomic_uint counter;
    int rc = DPT_OK, fd = -1;
    sbuf_t hdr = {0};
    char *tmp = NULL;
    size_t *order = malloc((w->n ? w->n : 1) * sizeof *order);
    if (!order) {
        rc = dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
        goto fail;
    }
    size_t cks_pos;
    rc = build_header(w, order, &hdr, &cks_pos);
    if (rc < 0) {
        rc = dpt_error(rc, "checkpoint %s: the header does not fit in memory", path);
        goto fail;
    }

    /* Checksum over the whole file with the digits as '0' (as built). */
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    uint64_t h = dpt_fnv1a64(DPT_FNV1A64_INIT, len8, 8);
    h = dpt_fnv1a64(h, hdr.p, hdr.len);
    for (size_t j = 0; j < w->n; j++)
        emit_tensor(&w->t[order[j]], -1, &h);
    char digits[CKS_DIGITS + 1];
    snprintf(digits, sizeof digits, "%016" PRIx64, h);
    memcpy(hdr.p + cks_pos, digits, CKS_DIGITS);

    /* A temporary name in the same directory, so rename() is atomic. */
    size_t tlen = strlen(path) + 64;
    tmp = malloc(tlen);
    if (!tmp) {
        rc = dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
        goto fail;
    }
    for (int attempt = 0; fd < 0; attempt++) {
        snprintf(tmp, tlen, "%s.tmp-%ld-%u", path, (long)getpid(), atomic_fetch_add(&counter, 1u));
        fd = dpt__io_open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && (errno != EEXIST || attempt >= 100)) {
            rc = dpt_error(DPT_EIO, "checkpoint %s: cannot create temporary file %s: %s", path, tmp,
                           strerror(errno));
            free(tmp);
            tmp = NULL; /* nothing to remove */
            goto fail;
        }
    }
    int e = write_all(fd, len8, 8);
    if (!e)
        e = write_all(fd, hdr.p, hdr.len);
    for (size_t j = 0; j < w->n && !e; j++)
        e = emit_tensor(&w->t[order[j]], fd, NULL);
    if (e) {
        rc = dpt_error(DPT_EIO, "checkpoint %s: writing %s failed: %s", path, tmp, strerror(e));
        goto fail;
    }
    if (dpt__io_fsync(fd) != 0) {
        rc =
            dpt_error(DPT_EIO, "checkpoint %s: fsync of %s failed: %s", path, tmp, strerror(errno));
        goto fail;
    }
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0) {
        rc = dpt_error(DPT_EIO, "checkpoint %s: closing %s failed: %s", path, tmp, strerror(errno));
        goto fail;
    }
    if (dpt__io_rename(tmp, path) != 0) {
        rc = dpt_error(DPT_EIO, "checkpoint %s: cannot rename %s over it: %s", path, tmp,
                       strerror(errno));
        goto fail;
    }
    free(tmp);
    tmp = NULL;

    /* Make the rename itself durable. Filesystems that cannot fsync a
     * directory say EINVAL; that is not an error of ours, and neither is a
     * directory we may write but not open (mode -wx): the file is in place. */
    char dir[4096];
    if (dir_of(path, dir, sizeof dir) == 0) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            int bad = dpt__io_fsync(dfd) != 0 && errno != EINVAL && errno != EROFS;
            int err = errno;
            close(dfd);
            if (bad) {
                rc = dpt_error(DPT_EIO, "checkpoint %s: fsync of directory %s failed: %s", path,
                               dir, strerror(err));
                goto fail;
            }
        }
    }
    free(hdr.p);
    free(order);
    return DPT_OK;

fail:
    if (fd >= 0)
        close(fd);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    free(hdr.p);
    free(order);
    return rc;
}

/* ---- arena helpers (reading side) ------------------------------------ */

static void fmt_shape(char *buf, size_t size, int ndim, const size_t *shape)
{
    size_t len = 0;
    len += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && len < size; d++)
        len += (size_t)snprintf(buf + len, size - len, d ? ", %zu" : "%zu", shape[d]);
    if (len < size)
        snprintf(buf + len, size - len, "]");
}

int dpt_safetensors_get(const dpt_safetensors_t *st, const char *name, dpt_st_dtype_t dtype,
                        int ndim, const size_t *shape, const dpt_safetensors_tensor_t **out)
{
    const char *path = dpt_safetensors_path(st);
    const dpt_safetensors_tensor_t *t = dpt_safetensors_find(st, name);
    *out = NULL;
    if (!t)
        return dpt_error(DPT_ENOENT, "checkpoint %s: no tensor \"%s\"", path, name);
    if (t->dtype != dtype)
        return dpt_error(DPT_EINVAL, "checkpoint %s: tensor %s has dtype %s, expected %s", path,
                         name, dpt_safetensors_dtype_name(t->dtype),
                         dpt_safetensors_dtype_name(dtype));
    if (shape) {
        int same = t->ndim == ndim;
        for (int d = 0; same && d < ndim; d++)
            same = t->shape[d] == shape[d];
        if (!same) {
            char a[160], b[160];
            fmt_shape(a, sizeof a, t->ndim, t->shape);
            fmt_shape(b, sizeof b, ndim, shape);
            return dpt_error(DPT_EINVAL, "checkpoint %s: tensor %s has shape %s, expected %s", path,
                             name, a, b);
        }
    }
    *out = t;
    return DPT_OK;
}

int dpt_safetensors_get_blob(const dpt_safetensors_t *st, const char *name, const void **data,
                             size_t *bytes)
{
    const dpt_safetensors_tensor_t *t;
    int rc = dpt_safetensors_get(st, name, DPT_ST_U8, 0, NULL, &t);
    if (rc < 0)
        return rc;
    if (t->ndim != 1)
        return dpt_error(DPT_EINVAL, "checkpoint %s: tensor %s has %d dimensions, a blob has 1",
                         dpt_safetensors_path(st), name, t->ndim);
    *data = t->data;
    *bytes = t->bytes;
    return DPT_OK;
}

int dpt_safetensors_load_arena(const dpt_safetensors_t *st, const char *prefix,
                               const dpt_vartable_t *table, float *data, size_t count)
{
    const char *path = dpt_safetensors_path(st);
    if (!prefix)
        prefix = "";
    if (data && count < table->total)
        return dpt_error(DPT_EINVAL, "checkpoint %s: arena %s has %zu floats, its table needs %zu",
                         path, prefix, count, table->total);
    size_t plen = strlen(prefix);
    char name[DPT_VAR_NAME_MAX + 256];
    if (plen + DPT_VAR_NAME_MAX > sizeof name)
        return dpt_error(DPT_EINVAL, "checkpoint %s: prefix %s is too long", path, prefix);

    /* Check everything first, so a mismatch leaves the arena unchanged. */
    for (size_t i = 0; i < table->nvars; i++) {
        const dpt_var_t *v = &table->vars[i];
        snprintf(name, sizeof name, "%s%s", prefix, v->name);
        const dpt_safetensors_tensor_t *t = dpt_safetensors_find(st, name);
        if (!t)
            return dpt_error(DPT_ENOENT, "checkpoint %s: variable %s (tensor %s) is missing", path,
                             v->name, name);
        if (t->dtype != DPT_ST_F32)
            return dpt_error(DPT_EINVAL, "checkpoint %s: variable %s has dtype %s, expected F32",
                             path, v->name, dpt_safetensors_dtype_name(t->dtype));
        int same = t->ndim == v->ndim;
        for (int d = 0; same && d < v->ndim; d++)
            same = t->shape[d] == v->shape[d];
        if (!same) {
            char a[160], b[160];
            fmt_shape(a, sizeof a, t->ndim, t->shape);
            fmt_shape(b, sizeof b, v->ndim, v->shape);
            return dpt_error(DPT_EINVAL,
                             "checkpoint %s: variable %s has shape %s, the model has %s", path,
                             v->name, a, b);
        }
    }
    size_t n = dpt_safetensors_count(st);
    for (size_t i = 0; i < n; i++) {
        const dpt_safetensors_tensor_t *t = dpt_safetensors_tensor(st, i);
        if (strncmp(t->name, prefix, plen) == 0 && !dpt_vartable_find(table, t->name + plen))
            return dpt_error(DPT_EINVAL, "checkpoint %s: tensor %s is not a variable of the model",
                             path, t->name);
    }
    if (!data)
        return DPT_OK; /* checked only */
    /* Copied a slice at a time, each slice's pages of a mapped file given
     * back as it is done: a large checkpoint never sits in memory beside
     * the arena it fills. */
    const size_t slice = (size_t)4 << 20;
    for (size_t i = 0; i < table->nvars; i++) {
        const dpt_var_t *v = &table->vars[i];
        snprintf(name, sizeof name, "%s%s", prefix, v->name);
        const dpt_safetensors_tensor_t *t = dpt_safetensors_find(st, name);
        const unsigned char *src = t->data;
        unsigned char *dst = (unsigned char *)(data + v->offset);
        for (size_t at = 0; at < t->bytes; at += slice) {
            size_t len = t->bytes - at < slice ? t->bytes - at : slice;
            memcpy(dst + at, src + at, len);
            dpt__safetensors_release(st, src + at, len);
        }
    }
    return DPT_OK;
}
