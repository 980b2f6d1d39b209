/* Dataset readers: IDX (MNIST format) and CSV, plain or gzipped; the spirals
 * generator. */
#include "dpt/dataset.h"
#include "dpt/arena.h"
#include "dpt/rng.h"
#include "dpt/status.h"

#include "dpt_config.h"
#include "io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if DPT_HAVE_ZLIB
#include <zlib.h>
#endif

void dpt_dataset_deinit(dpt_dataset_t *ds)
{
    if (!ds)
        return;
    free(ds->x);
    free(ds->labels);
    free(ds->targets);
    memset(ds, 0, sizeof *ds);
}

/* ---- reading a whole file, gunzipping when it is gzipped ---------------- */

typedef struct blob {
    unsigned char *p; /* len bytes + a terminating zero (for the CSV parser) */
    size_t len;
    int gz; /* 1 when the file was gzipped */
} blob_t;

#if DPT_HAVE_ZLIB
static int read_gz(const char *path, size_t file_size, blob_t *b)
{
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return dpt_error(errno ? dpt__io_read_status(errno) : DPT_EIO,
                         "dataset %s: cannot open: %s", path,
                         errno ? strerror(errno) : "zlib failed");
    /* Start at 4x the compressed size (MNIST images compress about 2-10x)
     * and double. */
    size_t cap = file_size < ((size_t)1 << 28) ? file_size * 4 + 4096 : file_size, len = 0;
    unsigned char *p = malloc(cap + 1);
    int rc = DPT_OK;
    if (!p) {
        rc = dpt_error(DPT_ENOMEM, "dataset %s: out of memory", path);
        goto done;
    }
    for (;;) {
        if (len == cap) {
            if (cap > ((size_t)-1 - 1) / 2) {
                rc = dpt_error(DPT_EOVERFLOW, "dataset %s: decompressed data too large", path);
                goto done;
            }
            unsigned char *q = realloc(p, cap * 2 + 1);
            if (!q) {
                rc = dpt_error(DPT_ENOMEM, "dataset %s: out of memory", path);
                goto done;
            }
            p = q;
            cap *= 2;
        }
        size_t want = cap - len > (1u << 30) ? (1u << 30) : cap - len;
        int k = gzread(gz, p + len, (unsigned)want);
        if (k < 0)
            break; /* reported below through gzerror */
        if (k == 0)
            break;
        len += (size_t)k;
    }
    int err = Z_OK;
    const char *msg = gzerror(gz, &err);
    if (err == Z_BUF_ERROR) {
        rc = dpt_error(DPT_EFORMAT,
                       "dataset %s: the gzip data ends early (after %zu decompressed bytes): the "
                       "file is truncated",
                       path, len);
    } else if (err == Z_ERRNO) {
        rc = dpt_error(DPT_EIO, "dataset %s: read error: %s", path, strerror(errno));
    } else if (err != Z_OK && err != Z_STREAM_END) {
        rc = dpt_error(DPT_EFORMAT, "dataset %s: corrupted gzip data: %s", path,
                       msg ? msg : "unknown zlib error");
    }
done:
    gzclose(gz);
    if (rc < 0) {
        free(p);
        return rc;
    }
    p[len] = 0;
    b->p = p;
    b->len = len;
    b->gz = 1;
    return DPT_OK;
}
#endif

static int read_file(const char *path, blob_t *b)
{
    memset(b, 0, sizeof *b);
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? dpt_error(DPT_ENOENT, "dataset %s: no such file", path)
                               : dpt_error(dpt__io_read_status(errno),
                                           "dataset %s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return dpt_error(DPT_EINVAL, "dataset %s: not a regular file", path);
    }
    if ((unsigned long long)sb.st_size >= (unsigned long long)((size_t)-1)) {
        fclose(f);
        return dpt_error(DPT_EOVERFLOW, "dataset %s: too large for this machine", path);
    }
    size_t size = (size_t)sb.st_size;
    unsigned char magic[2] = {0, 0};
    size_t got = fread(magic, 1, 2, f);
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        fclose(f);
#if DPT_HAVE_ZLIB
        return read_gz(path, size, b);
#else
        return dpt_error(DPT_ENOTSUP,
                         "dataset %s: the file is gzipped and this build has no zlib (install "
                         "zlib1g-dev and rebuild, or gunzip the file)",
                         path);
#endif
    }
    unsigned char *p = malloc(size + 1);
    if (!p) {
        fclose(f);
        return dpt_error(DPT_ENOMEM, "dataset %s: cannot allocate %zu bytes", path, size);
    }
    memcpy(p, magic, got);
    size_t len = got + (size > got ? fread(p + got, 1, size - got, f) : 0);
    int bad = ferror(f);
    fclose(f);
    if (bad || len != size) {
        free(p);
        return dpt_error(DPT_EIO, "dataset %s: read error (%zu of %zu bytes)", path, len, size);
    }
    p[len] = 0;
    b->p = p;
    b->len = len;
    return DPT_OK;
}

/* ---- IDX ---------------------------------------------------------------- */

typedef struct idx {
    int ndim;
    size_t dims[4];
    size_t count;              /* product of dims[1..] */
    const unsigned char *data; /* dims[0] * count bytes */
} idx_t;

/* Parses an unsigned-byte IDX file with min_dim..max_dim dimensions. */
static int parse_idx(const char *path, const blob_t *b, const char *what, int min_dim, int max_dim,
                     unsigned expect_magic, idx_t *out)
{
    const unsigned char *p = b->p;
    const char *has = b->gz ? "decompresses to" : "has";
    if (b->len < 4)
        return dpt_error(DPT_EFORMAT,
                         "dataset %s: the file %s %zu bytes, too few for an IDX header", path, has,
                         b->len);
    unsigned magic = (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
    if (p[0] != 0 || p[1] != 0 || p[3] == 0)
        return dpt_error(DPT_EFORMAT,
                         "dataset %s: bad magic number 0x%08x: not an IDX %s file (expected "
                         "0x%08x)",
                         path, magic, what, expect_magic);
    if (p[2] != 0x08) {
        static const unsigned char types[] = {0x09, 0x0b, 0x0c, 0x0d, 0x0e};
        if (memchr(types, p[2], sizeof types))
            return dpt_error(DPT_ENOTSUP,
                             "dataset %s: IDX element type 0x%02x is not supported (dpt reads "
                             "unsigned bytes, type 0x08)",
                             path, p[2]);
        return dpt_error(DPT_EFORMAT,
                         "dataset %s: bad magic number 0x%08x: not an IDX %s file (expected "
                         "0x%08x)",
                         path, magic, what, expect_magic);
    }
    int ndim = p[3];
    if (ndim < min_dim || ndim > max_dim)
        return dpt_error(DPT_EFORMAT,
                         "dataset %s: magic number 0x%08x gives %d dimensions; an IDX %s file "
                         "has %s (magic 0x%08x)",
                         path, magic, ndim, what, min_dim == max_dim ? "1" : "2 to 4",
                         expect_magic);
    size_t head = 4 + 4 * (size_t)ndim;
    if (b->len < head)
        return dpt_error(DPT_EFORMAT,
                         "dataset %s: the file %s %zu bytes, too few for the %d dimension sizes "
                         "of its header: truncated",
                         path, has, b->len, ndim);
    size_t total = 1;
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        const unsigned char *q = p + 4 + 4 * d;
        out->dims[d] =
            (size_t)((uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3]);
        if (out->dims[d] == 0)
            return dpt_error(DPT_EFORMAT, "dataset %s: dimension %d of the header is 0", path, d);
        if (dpt_mul_size(total, out->dims[d], &total) != 0 || total > ((size_t)-1) - head)
            return dpt_error(DPT_EOVERFLOW, "dataset %s: the header's sizes overflow", path);
    }
    out->count = total / out->dims[0];
    if (b->len != head + total) {
        char shape[96];
        if (ndim == 3)
            snprintf(shape, sizeof shape, "%zu images of %zux%zu", out->dims[0], out->dims[1],
                     out->dims[2]);
        else if (ndim == 1)
            snprintf(shape, sizeof shape, "%zu %ss", out->dims[0], what);
        else
            snprintf(shape, sizeof shape, "%zu samples of %zu values", out->dims[0], out->count);
        return dpt_error(DPT_EFORMAT,
                         "dataset %s: the header says %s (%zu bytes), the file %s %zu bytes: %s",
                         path, shape, head + total, has, b->len,
                         b->len < head + total ? "truncated" : "extra data at the end");
    }
    out->data = p + head;
    return DPT_OK;
}

/* Stores labels, checking the range (see dataset.h). */
static int check_label(const char *path, const char *where, long long v, int num_classes)
{
    if (v < 0)
        return dpt_error(DPT_EFORMAT, "dataset %s: %slabel %lld is negative", path, where, v);
    if (num_classes > 0 && v >= num_classes)
        return dpt_error(DPT_EFORMAT, "dataset %s: %slabel %lld is out of range for %d classes",
                         path, where, v, num_classes);
    if (num_classes == 0 && v > 255)
        return dpt_error(DPT_EFORMAT,
                         "dataset %s: %slabel %lld is over 255 (pass num_classes to allow more "
                         "classes)",
                         path, where, v);
    return DPT_OK;
}

int dpt_dataset_load_idx(dpt_dataset_t *ds, const char *images_path, const char *labels_path,
                         int num_classes)
{
    blob_t bi = {0}, bl = {0};
    idx_t ii = {0}, il = {0};
    int rc;
    memset(ds, 0, sizeof *ds);
    if (num_classes < 0)
        return dpt_error(DPT_EINVAL, "dataset %s: num_classes %d is negative", labels_path,
                         num_classes);
    if ((rc = read_file(images_path, &bi)) < 0 ||
        (rc = parse_idx(images_path, &bi, "images", 2, 4, 0x803, &ii)) < 0 ||
        (rc = read_file(labels_path, &bl)) < 0 ||
        (rc = parse_idx(labels_path, &bl, "label", 1, 1, 0x801, &il)) < 0)
        goto fail;
    if (ii.dims[0] != il.dims[0]) {
        rc = dpt_error(DPT_EFORMAT, "dataset: %s has %zu images but %s has %zu labels", images_path,
                       ii.dims[0], labels_path, il.dims[0]);
        goto fail;
    }
    size_t rows = ii.dims[0], dim = ii.count, nx;
    if (dpt_mul_size(rows, dim, &nx) != 0 || dpt_mul_size(nx, sizeof(float), &nx) != 0) {
        rc = dpt_error(DPT_EOVERFLOW, "dataset %s: too large", images_path);
        goto fail;
    }
    int maxl = 0;
    for (size_t i = 0; i < rows; i++) {
        char where[48];
        snprintf(where, sizeof where, "sample %zu: ", i);
        if ((rc = check_label(labels_path, where, il.data[i], num_classes)) < 0)
            goto fail;
        if (il.data[i] > maxl)
            maxl = il.data[i];
    }
    ds->x = malloc(nx);
    ds->labels = malloc(rows * sizeof *ds->labels);
    if (!ds->x || !ds->labels) {
        rc = dpt_error(DPT_ENOMEM, "dataset %s: cannot allocate %zu bytes", images_path, nx);
        goto fail;
    }
    for (size_t i = 0; i < rows * dim; i++)
        ds->x[i] = (float)ii.data[i] / 255.0f;
    for (size_t i = 0; i < rows; i++)
        ds->labels[i] = il.data[i];
    ds->rows = rows;
    ds->dim = dim;
    ds->num_classes = num_classes > 0 ? num_classes : maxl + 1;
    if (ii.ndim == 3) {
        ds->height = ii.dims[1];
        ds->width = ii.dims[2];
    }
    free(bi.p);
    free(bl.p);
    return DPT_OK;
fail:
    free(bi.p);
    free(bl.p);
    dpt_dataset_deinit(ds);
    return rc;
}

/* ---- CSV ---------------------------------------------------------------- */

static int is_blank(int c)
{
    return c == ' ' || c == '\t';
}

/* Trims blanks in place: returns the start, writes a zero after the end. */
static char *trim(char *s, char *end)
{
    while (s < end && is_blank((unsigned char)*s))
        s++;
    while (end > s && is_blank((unsigned char)end[-1]))
        end--;
    *end = '\0';
    return s;
}

/* Splits [line, end) at `delim` in place (zero-terminating each trimmed
 * cell); returns the number of cells, storing at most `max` starts. */
static size_t split_cells(char *line, char *end, char delim, char **cells, size_t max)
{
    size_t n = 0;
    char *s = line;
    for (;;) {
        char *d = memchr(s, delim, (size_t)(end - s));
        char *e = d ? d : end;
        char *c = trim(s, e);
        if (n < max)
            cells[n] = c;
        n++;
        if (!d)
            return n;
        s = d + 1;
    }
}

static size_t count_cells(const char *line, const char *end, char delim)
{
    size_t n = 1;
    for (const char *c = line; c < end; c++)
        n += *c == delim;
    return n;
}

typedef struct csv_state {
    const char *path;
    size_t ncols;
    size_t label_col;
    size_t rows, cap;
    float *x;
    int32_t *labels;
    int maxl;
    /* Regression: role[c] = 0 for a feature, k + 1 for target k; the
     * feature and target counts. role NULL: classification. */
    size_t *role;
    size_t nfeat, ntarget;
    float *y;
} csv_state_t;

static int csv_grow(csv_state_t *s)
{
    if (s->rows < s->cap)
        return DPT_OK;
    size_t ncap = s->cap ? s->cap * 2 : 1024, bytes, ybytes = 0;
    if (dpt_mul_size(ncap, s->nfeat, &bytes) != 0 ||
        dpt_mul_size(bytes, sizeof(float), &bytes) != 0 ||
        dpt_mul_size(ncap, s->ntarget * sizeof(float), &ybytes) != 0)
        return dpt_error(DPT_EOVERFLOW, "dataset %s: too large", s->path);
    float *x = realloc(s->x, bytes);
    if (!x)
        return dpt_error(DPT_ENOMEM, "dataset %s: out of memory", s->path);
    s->x = x;
    if (s->role) {
        float *y = realloc(s->y, ybytes);
        if (!y)
            return dpt_error(DPT_ENOMEM, "dataset %s: out of memory", s->path);
        s->y = y;
        s->cap = ncap;
        return DPT_OK;
    }
    int32_t *l = realloc(s->labels, ncap * sizeof *l);
    if (!l)
        return dpt_error(DPT_ENOMEM, "dataset %s: out of memory", s->path);
    s->labels = l;
    s->cap = ncap;
    return DPT_OK;
}

static int csv_row(csv_state_t *s, char **cells, size_t lineno, int num_classes)
{
    int rc = csv_grow(s);
    if (rc < 0)
        return rc;
    float *row = s->x + s->rows * s->nfeat;
    float *yrow = s->role ? s->y + s->rows * s->ntarget : NULL;
    size_t k = 0;
    for (size_t c = 0; c < s->ncols; c++) {
        const char *cell = cells[c];
        char *end;
        if (cell[0] == '\0')
            return dpt_error(DPT_EFORMAT, "dataset %s: line %zu, column %zu: empty cell", s->path,
                             lineno, c + 1);
        if (!s->role && c == s->label_col) {
            errno = 0;
            long long v = strtoll(cell, &end, 10);
            if (*end != '\0' || errno == ERANGE)
                return dpt_error(DPT_EFORMAT,
                                 "dataset %s: line %zu, column %zu: label \"%.40s\" is not an "
                                 "integer",
                                 s->path, lineno, c + 1, cell);
            char where[64];
            snprintf(where, sizeof where, "line %zu, column %zu: ", lineno, c + 1);
            if ((rc = check_label(s->path, where, v, num_classes)) < 0)
                return rc;
            s->labels[s->rows] = (int32_t)v;
            if (v > s->maxl)
                s->maxl = (int)v;
            continue;
        }
        double v = strtod(cell, &end);
        if (*end != '\0')
            return dpt_error(DPT_EFORMAT,
                             "dataset %s: line %zu, column %zu: \"%.40s\" is not a number", s->path,
                             lineno, c + 1, cell);
        float f = (float)v;
        if (!isfinite(f))
            return dpt_error(DPT_EFORMAT,
                             "dataset %s: line %zu, column %zu: \"%.40s\" is not a finite float",
                             s->path, lineno, c + 1, cell);
        if (s->role && s->role[c])
            yrow[s->role[c] - 1] = f;
        else
            row[k++] = f;
    }
    s->rows++;
    return DPT_OK;
}

/* Strips one pair of double quotes around a header name, in place. */
static char *csv_unquote(char *name)
{
    size_t len = strlen(name);
    if (len >= 2 && name[0] == '"' && name[len - 1] == '"') {
        name[len - 1] = '\0';
        name++;
    }
    return name;
}

/* Regression: marks the header's columns named in `names` (comma-separated)
 * as targets, in the order named; the others are features. */
static int csv_targets(csv_state_t *s, char **cells, const char *names, size_t lineno)
{
    s->role = calloc(s->ncols, sizeof *s->role);
    if (!s->role)
        return dpt_error(DPT_ENOMEM, "dataset %s: out of memory", s->path);
    for (size_t c = 0; c < s->ncols; c++)
        cells[c] = csv_unquote(cells[c]);
    const char *p = names;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && is_blank((unsigned char)*p))
            p++, len--;
        while (len && is_blank((unsigned char)p[len - 1]))
            len--;
        size_t c = 0;
        while (c < s->ncols && !(len && strlen(cells[c]) == len && !strncmp(cells[c], p, len)))
            c++;
        if (c == s->ncols)
            return dpt_error(DPT_EINVAL,
                             "dataset %s: the header (line %zu) has no target column \"%.*s\"",
                             s->path, lineno, (int)len, p);
        if (s->role[c])
            return dpt_error(DPT_EINVAL, "dataset %s: target column \"%.*s\" is named twice",
                             s->path, (int)len, p);
        s->role[c] = ++s->ntarget;
        if (!comma)
            break;
        p = comma + 1;
    }
    s->nfeat = s->ncols - s->ntarget;
    if (s->nfeat == 0)
        return dpt_error(DPT_EFORMAT,
                         "dataset %s: every column is a target: no feature column is left",
                         s->path);
    return DPT_OK;
}

int dpt_dataset_load_csv(dpt_dataset_t *ds, const char *path, const dpt_csv_options_t *opt)
{
    static const dpt_csv_options_t defaults = {0, NULL, 0, 0, 0, NULL};
    if (!opt)
        opt = &defaults;
    char delim = opt->delimiter ? opt->delimiter : ',';
    blob_t b;
    char **cells = NULL;
    csv_state_t s = {path, 0, 0, 0, 0, NULL, NULL, 0, NULL, 0, 0, NULL};
    int rc;
    memset(ds, 0, sizeof *ds);
    if (opt->num_classes < 0)
        return dpt_error(DPT_EINVAL, "dataset %s: num_classes %d is negative", path,
                         opt->num_classes);
    if (opt->target_names && !opt->header)
        return dpt_error(DPT_EINVAL,
                         "dataset %s: the target columns are chosen by name (\"%s\") but the "
                         "options say there is no header line",
                         path, opt->target_names);
    if (opt->label_name && !opt->header && !opt->target_names)
        return dpt_error(DPT_EINVAL,
                         "dataset %s: the label column is chosen by name (\"%s\") but the "
                         "options say there is no header line",
                         path, opt->label_name);
    if ((rc = read_file(path, &b)) < 0)
        return rc;
    if (memchr(b.p, '\0', b.len)) {
        rc = dpt_error(DPT_EFORMAT, "dataset %s: the file contains a zero byte: not a text file",
                       path);
        goto fail;
    }
    char *p = (char *)b.p, *end = p + b.len;
    size_t lineno = 0, first_line = 0;
    int have_layout = 0;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        lineno++;
        if (le > p && le[-1] == '\r')
            le--;
        char *q = p;
        while (q < le && is_blank((unsigned char)*q))
            q++;
        if (q == le || *q == '#') {
            p = next;
            continue;
        }
        size_t n = count_cells(p, le, delim);
        if (!have_layout) {
            have_layout = 1;
            first_line = lineno;
            s.ncols = n;
            cells = malloc(n * sizeof *cells);
            if (!cells) {
                rc = dpt_error(DPT_ENOMEM, "dataset %s: out of memory", path);
                goto fail;
            }
            if (n < 2) {
                rc = dpt_error(DPT_EFORMAT,
                               "dataset %s: line %zu has 1 column; a dataset needs a label "
                               "column and at least one feature column",
                               path, lineno);
                goto fail;
            }
            long idx = opt->label_index;
            if (opt->target_names) {
                split_cells(p, le, delim, cells, n);
                if ((rc = csv_targets(&s, cells, opt->target_names, lineno)) != 0)
                    goto fail;
                p = next;
                continue;
            }
            if (opt->header) {
                split_cells(p, le, delim, cells, n);
                if (opt->label_name) {
                    idx = -1;
                    for (size_t c = 0; c < n && idx < 0; c++) {
                        char *name = cells[c];
                        size_t len = strlen(name);
                        if (len >= 2 && name[0] == '"' && name[len - 1] == '"') {
                            name[len - 1] = '\0';
                            name++;
                        }
                        if (strcmp(name, opt->label_name) == 0)
                            idx = (long)c;
                    }
                    if (idx < 0) {
                        rc = dpt_error(DPT_EINVAL,
                                       "dataset %s: the header (line %zu) has no column \"%s\"",
                                       path, lineno, opt->label_name);
                        goto fail;
                    }
                }
            }
            if (idx < 0)
                idx += (long)n;
            if (idx < 0 || (size_t)idx >= n) {
                rc = dpt_error(DPT_EINVAL,
                               "dataset %s: label column %ld is out of range: line %zu has %zu "
                               "columns",
                               path, opt->label_index, lineno, n);
                goto fail;
            }
            s.label_col = (size_t)idx;
            s.nfeat = n - 1;
            if (opt->header) {
                p = next;
                continue;
            }
        }
        if (n != s.ncols) {
            rc = dpt_error(DPT_EFORMAT,
                           "dataset %s: line %zu has %zu cells, expected %zu (as line %zu)", path,
                           lineno, n, s.ncols, first_line);
            goto fail;
        }
        split_cells(p, le, delim, cells, n);
        if ((rc = csv_row(&s, cells, lineno, opt->num_classes)) < 0)
            goto fail;
        p = next;
    }
    if (s.rows == 0) {
        rc = dpt_error(DPT_EFORMAT, "dataset %s: no data lines", path);
        goto fail;
    }
    ds->rows = s.rows;
    ds->dim = s.nfeat;
    ds->x = s.x;
    if (s.role) {
        ds->targets = s.y;
        ds->target_dim = s.ntarget;
    } else {
        ds->labels = s.labels;
        ds->num_classes = opt->num_classes > 0 ? opt->num_classes : s.maxl + 1;
    }
    free(s.role);
    free(cells);
    free(b.p);
    return DPT_OK;
fail:
    free(s.x);
    free(s.labels);
    free(s.y);
    free(s.role);
    free(cells);
    free(b.p);
    return rc;
}

/* ---- MNIST-format directories ------------------------------------------- */

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int dpt_dataset_find_mnist(dpt_mnist_files_t *files, const char *dir)
{
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    char *out[4] = {files->train_images, files->train_labels, files->test_images,
                    files->test_labels};
    const size_t size = sizeof files->train_images;
    struct stat sb;
    if (!dir)
        dir = DPT_FASHION_MNIST_DIR;
    memset(files, 0, sizeof *files);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return dpt_error(DPT_ENOENT,
                         "dataset directory %s does not exist (Fashion-MNIST on Debian: apt-get "
                         "install dataset-fashion-mnist, files in " DPT_FASHION_MNIST_DIR ")",
                         dir);
    int gz_only = -1; /* first file that exists only gzipped */
    for (int i = 0; i < 4; i++) {
        int n = snprintf(out[i], size, "%s/%s", dir, names[i]);
        if (n < 0 || (size_t)n + 3 >= size)
            return dpt_error(DPT_EINVAL,
                             "dataset directory: path too long (%zu bytes, at most %zu): %s",
                             strlen(dir), size - 5 - strlen(names[i]), dir);
        if (file_exists(out[i]))
            continue;
        memcpy(out[i] + n, ".gz", 4);
        if (!file_exists(out[i]))
            return dpt_error(DPT_ENOENT, "dataset directory %s: %s[.gz] is missing", dir, names[i]);
        if (gz_only < 0)
            gz_only = i;
    }
    /* A missing file is reported before a missing zlib. */
    if (!DPT_HAVE_ZLIB && gz_only >= 0)
        return dpt_error(DPT_ENOTSUP,
                         "dataset directory %s: %s.gz is gzipped and this build has no zlib "
                         "(install zlib1g-dev and rebuild, or gunzip the files)",
                         dir, names[gz_only]);
    return DPT_OK;
}

int dpt_dataset_load_mnist(dpt_dataset_t *ds, const char *dir, dpt_split_t split)
{
    dpt_mnist_files_t *f = malloc(sizeof *f);
    int rc;
    memset(ds, 0, sizeof *ds);
    if (!f)
        return dpt_error(DPT_ENOMEM, "dataset: out of memory");
    rc = dpt_dataset_find_mnist(f, dir);
    if (rc == DPT_OK && split == DPT_SPLIT_TEST)
        rc = dpt_dataset_load_idx(ds, f->test_images, f->test_labels, 10);
    else if (rc == DPT_OK)
        rc = dpt_dataset_load_idx(ds, f->train_images, f->train_labels, 10);
    free(f);
    return rc;
}

/* ---- two spirals ------------------------------------------------------------ */

/* Allocates a dataset of `rows` 2-D points of 2 classes. */
static int spirals_alloc(dpt_dataset_t *ds, size_t rows)
{
    memset(ds, 0, sizeof *ds);
    if (rows > ((size_t)-1) / (2 * sizeof(float)))
        return dpt_error(DPT_EOVERFLOW, "dataset spirals: %zu points overflow the size", rows);
    ds->x = malloc(rows * 2 * sizeof(float));
    ds->labels = malloc(rows * sizeof(int32_t));
    if (!ds->x || !ds->labels) {
        dpt_dataset_deinit(ds);
        return dpt_error(DPT_ENOMEM, "dataset spirals: cannot allocate %zu points", rows);
    }
    ds->rows = rows;
    ds->dim = 2;
    ds->num_classes = 2;
    return DPT_OK;
}

int dpt_dataset_make_spirals(dpt_dataset_t *train, dpt_dataset_t *test, size_t train_points,
                             size_t test_points, uint64_t seed)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    if (train_points == 0 || test_points == 0)
        return dpt_error(DPT_EINVAL,
                         "dataset spirals: %zu training and %zu test points (both "
                         "must be at least 1)",
                         train_points, test_points);
    if (train_points > (size_t)-1 - test_points)
        return dpt_error(DPT_EOVERFLOW, "dataset spirals: %zu + %zu points overflow the size",
                         train_points, test_points);
    int rc = spirals_alloc(train, train_points);
    if (rc == DPT_OK && (rc = spirals_alloc(test, test_points)) != DPT_OK)
        dpt_dataset_deinit(train);
    if (rc)
        return rc;
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, DPT_RNG_DATA);
    /* One stream and one index over both parts, as `dpt demo` drew them,
     * so its data (4096 + 1024 points) are reproduced exactly. The pi
     * literal is the demo's too: M_PI would move the points by an ulp. */
    for (size_t i = 0; i < train_points + test_points; i++) {
        dpt_dataset_t *ds = i < train_points ? train : test;
        size_t j = i < train_points ? i : i - train_points;
        int c = (int)(i & 1);
        double r = 0.05 + 0.95 * dpt_rng_uniform_double(&rng);
        double t = 3.5 * 3.14159265358979 * r + c * 3.14159265358979;
        ds->x[2 * j] = (float)(r * cos(t) + 0.02 * dpt_rng_normal(&rng));
        ds->x[2 * j + 1] = (float)(r * sin(t) + 0.02 * dpt_rng_normal(&rng));
        ds->labels[j] = c;
    }
    return DPT_OK;
}
