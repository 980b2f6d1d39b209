/*
 * Reading result.jsonl back (dpt_metrics_load, dpt/train.h): the JSON that
 * metrics.c writes — one object per line whose values are numbers, null or
 * nested objects — into one column per flattened name.
 */
#define _GNU_SOURCE /* getline */
#include "core/io.h"
#include "dpt/status.h"
#include "dpt/train.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DPT__NAME_MAX 512
#define DPT__DEPTH_MAX 32

typedef struct dpt__loader {
    dpt_metrics_table_t *t;
    size_t cap_rows, cap_cols;
    size_t hint; /* the column after the last one set: rows repeat their order */
    const char *path;
    size_t line;
    const char *s; /* the line being parsed */
    size_t i;
    char name[DPT__NAME_MAX];
} dpt__loader_t;

static int dpt__metrics_load_bad(dpt__loader_t *L, const char *what)
{
    return dpt_error(DPT_EFORMAT, "%s:%zu: byte %zu: %s", L->path, L->line, L->i + 1, what);
}

static void dpt__metrics_load_ws(dpt__loader_t *L)
{
    while (L->s[L->i] == ' ' || L->s[L->i] == '\t' || L->s[L->i] == '\r' || L->s[L->i] == '\n')
        L->i++;
}

/* The column called L->name, made when new (NAN for the rows before). */
static int dpt__metrics_load_column(dpt__loader_t *L, size_t *col)
{
    dpt_metrics_table_t *t = L->t;
    if (L->hint < t->cols && strcmp(t->names[L->hint], L->name) == 0) {
        *col = L->hint;
        return DPT_OK;
    }
    for (size_t c = 0; c < t->cols; c++)
        if (strcmp(t->names[c], L->name) == 0) {
            *col = c;
            return DPT_OK;
        }
    if (t->cols == L->cap_cols) {
        size_t cap = L->cap_cols ? 2 * L->cap_cols : 32;
        char **names = realloc(t->names, cap * sizeof *names);
        if (names)
            t->names = names;
        double **values = names ? realloc(t->values, cap * sizeof *values) : NULL;
        if (!values)
            return dpt_error(DPT_ENOMEM, "%s: out of memory", L->path);
        t->values = values;
        L->cap_cols = cap;
    }
    /* Rows are made room for before they are parsed: cap_rows > rows. */
    size_t c = t->cols;
    t->names[c] = strdup(L->name);
    t->values[c] = malloc(L->cap_rows * sizeof **t->values);
    if (!t->names[c] || !t->values[c]) {
        free(t->names[c]);
        free(t->values[c]);
        return dpt_error(DPT_ENOMEM, "%s: out of memory", L->path);
    }
    for (size_t r = 0; r <= t->rows; r++)
        t->values[c][r] = (double)NAN;
    t->cols++;
    *col = c;
    return DPT_OK;
}

static int dpt__metrics_load_set(dpt__loader_t *L, double v)
{
    size_t c = 0;
    int rc = dpt__metrics_load_column(L, &c);
    if (rc)
        return rc;
    L->t->values[c][L->t->rows] = v;
    L->hint = c + 1;
    return DPT_OK;
}

/* A string at L->i into L->name from byte `at` on; the escapes a name can
 * need (\" \\ \/ and the control characters). */
static int dpt__metrics_load_string(dpt__loader_t *L, size_t at)
{
    if (L->s[L->i] != '"')
        return dpt__metrics_load_bad(L, "expected a quoted name");
    L->i++;
    size_t o = at;
    for (;;) {
        char ch = L->s[L->i];
        if (ch == '\0')
            return dpt__metrics_load_bad(L, "unterminated string");
        L->i++;
        if (ch == '"')
            break;
        if (ch == '\\') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *e = L->s[L->i] ? strchr(from, L->s[L->i]) : NULL;
            if (!e)
                return dpt__metrics_load_bad(L, "unsupported escape in a name");
            ch = to[e - from];
            L->i++;
        }
        if (o + 1 >= DPT__NAME_MAX)
            return dpt__metrics_load_bad(L, "name longer than 511 bytes");
        L->name[o++] = ch;
    }
    L->name[o] = '\0';
    return DPT_OK;
}

/* An object at L->i whose members are named L->name[0..at) + "/" + key. */
static int dpt__metrics_load_object(dpt__loader_t *L, size_t at, int depth)
{
    if (depth > DPT__DEPTH_MAX)
        return dpt__metrics_load_bad(L, "objects nested deeper than 32");
    if (L->s[L->i] != '{')
        return dpt__metrics_load_bad(L, "expected '{'");
    L->i++;
    dpt__metrics_load_ws(L);
    if (L->s[L->i] == '}') {
        L->i++;
        return DPT_OK;
    }
    for (;;) {
        size_t start = at;
        if (at) {
            if (at + 1 >= DPT__NAME_MAX)
                return dpt__metrics_load_bad(L, "name longer than 511 bytes");
            L->name[at] = '/';
            start = at + 1;
        }
        int rc = dpt__metrics_load_string(L, start);
        if (rc)
            return rc;
        dpt__metrics_load_ws(L);
        if (L->s[L->i] != ':')
            return dpt__metrics_load_bad(L, "expected ':'");
        L->i++;
        dpt__metrics_load_ws(L);
        char ch = L->s[L->i];
        if (ch == '{') {
            rc = dpt__metrics_load_object(L, strlen(L->name), depth + 1);
        } else if (strncmp(L->s + L->i, "null", 4) == 0) {
            L->i += 4;
            rc = dpt__metrics_load_set(L, (double)NAN);
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            char *end;
            errno = 0;
            double v = strtod(L->s + L->i, &end);
            /* strtod also takes "0x1p3", "infinity" and "nan": not JSON. */
            size_t len = (size_t)(end - (L->s + L->i));
            if (len == 0 || strcspn(L->s + L->i, "xXiInN") < len || !isfinite(v))
                return dpt__metrics_load_bad(L, "bad number");
            L->i += len;
            rc = dpt__metrics_load_set(L, v);
        } else {
            return dpt__metrics_load_bad(L, "expected a number, null or an object");
        }
        if (rc)
            return rc;
        dpt__metrics_load_ws(L);
        if (L->s[L->i] == ',') {
            L->i++;
            dpt__metrics_load_ws(L);
            continue;
        }
        if (L->s[L->i] == '}') {
            L->i++;
            return DPT_OK;
        }
        return dpt__metrics_load_bad(L, "expected ',' or '}'");
    }
}

/* Room for one more row in every column. */
static int dpt__metrics_load_grow_rows(dpt__loader_t *L)
{
    dpt_metrics_table_t *t = L->t;
    if (t->rows < L->cap_rows)
        return DPT_OK;
    size_t cap = L->cap_rows ? 2 * L->cap_rows : 64;
    if (cap > SIZE_MAX / sizeof(double))
        return dpt_error(DPT_ENOMEM, "%s: too many rows", L->path);
    for (size_t c = 0; c < t->cols; c++) {
        double *v = realloc(t->values[c], cap * sizeof *v);
        if (!v)
            return dpt_error(DPT_ENOMEM, "%s: out of memory", L->path);
        t->values[c] = v;
    }
    L->cap_rows = cap;
    return DPT_OK;
}

static int dpt__metrics_load_file(dpt__loader_t *L, FILE *f)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = DPT_OK;
    while (!rc && (len = getline(&line, &cap, f)) > 0) {
        L->line++;
        if (line[len - 1] != '\n')
            break; /* cut by a kill: not a row */
        if (strlen(line) != (size_t)len) {
            L->i = strlen(line);
            L->s = line;
            rc = dpt__metrics_load_bad(L, "NUL byte");
            break;
        }
        L->s = line;
        L->i = 0;
        dpt__metrics_load_ws(L);
        if (!line[L->i])
            continue;
        if ((rc = dpt__metrics_load_grow_rows(L)) != 0)
            break;
        dpt_metrics_table_t *t = L->t;
        for (size_t c = 0; c < t->cols; c++)
            t->values[c][t->rows] = (double)NAN;
        L->hint = 0;
        L->name[0] = '\0';
        if ((rc = dpt__metrics_load_object(L, 0, 1)) != 0)
            break;
        dpt__metrics_load_ws(L);
        if (line[L->i]) {
            rc = dpt__metrics_load_bad(L, "text after the object");
            break;
        }
        t->rows++;
    }
    if (!rc && ferror(f))
        rc = dpt_error(DPT_EIO, "%s: read error", L->path);
    free(line);
    return rc;
}

void dpt_metrics_destroy(dpt_metrics_table_t *t)
{
    if (!t)
        return;
    for (size_t c = 0; c < t->cols; c++) {
        free(t->names[c]);
        free(t->values[c]);
    }
    free(t->names);
    free(t->values);
    free(t);
}

int dpt_metrics_load(dpt_metrics_table_t **out, const char *path)
{
    *out = NULL;
    char file[PATH_MAX];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if ((size_t)snprintf(file, sizeof file, "%s/result.jsonl", path) >= sizeof file)
            return dpt_error(DPT_EINVAL, "%s: path too long", path);
        if (stat(file, &sb) != 0)
            return dpt_error(DPT_ENOENT,
                             "%s has no result.jsonl (not a run directory, or a run that "
                             "stopped before its first iteration)",
                             path);
    } else if ((size_t)snprintf(file, sizeof file, "%s", path) >= sizeof file) {
        return dpt_error(DPT_EINVAL, "%s: path too long", path);
    }
    FILE *f = fopen(file, "r");
    if (!f)
        return dpt_error(dpt__io_read_status(errno), "cannot open %s: %s", file, strerror(errno));
    dpt__loader_t L;
    memset(&L, 0, sizeof L);
    L.path = file;
    L.t = calloc(1, sizeof *L.t);
    int rc = L.t ? dpt__metrics_load_file(&L, f) : dpt_error(DPT_ENOMEM, "%s: out of memory", file);
    fclose(f);
    if (rc) {
        dpt_metrics_destroy(L.t);
        return rc;
    }
    *out = L.t;
    return DPT_OK;
}

const double *dpt_metrics_column(const dpt_metrics_table_t *t, const char *name)
{
    for (size_t c = 0; t && c < t->cols; c++)
        if (strcmp(t->names[c], name) == 0)
            return t->values[c];
    return NULL;
}
