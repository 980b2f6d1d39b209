/*
 * The configuration of every job, from one key table (dpt/train.h): files,
 * overrides, per-job defaults, applicability, paths, text and digests; and
 * the env_config lines (their list is kept by config_env.c).
 */
#define _GNU_SOURCE /* realpath with a NULL buffer is POSIX; getline too */
#include "core/io.h"
#include "dpt/train.h"
#include "dpt/rl.h"
#include "dpt/status.h"
#include "rl/env_internal.h"
#include "train_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the key table ------------------------------------------------------------ */

static const dpt_config_key_info_t dpt__config_keys[DPT_CFG_COUNT] = {
#define DPT__CFG_INFO(name, type, jobs, flags, def, lo, hi, choices, help) \
    {#name, DPT_CFG_T_##type, jobs, flags, def, lo, hi, choices, help},
    DPT_CONFIG_KEYS(DPT__CFG_INFO)
#undef DPT__CFG_INFO
};

typedef struct dpt__job_default {
    dpt_job_t job;
    dpt_config_key_t key;
    const char *value;
} dpt__job_default_t;

static const dpt__job_default_t dpt__config_job_defaults[] = {
#define DPT__JOB_DEF(job, key, value) {job, DPT_CFG_##key, value},
    DPT_CONFIG_JOB_DEFAULTS(DPT__JOB_DEF)
#undef DPT__JOB_DEF
};

static const char *const dpt__config_type_names[] = {"int", "float", "string", "bool", "choice"};

const dpt_config_key_info_t *dpt_config_key_info(dpt_config_key_t k)
{
    return (unsigned)k < DPT_CFG_COUNT ? &dpt__config_keys[k] : NULL;
}

const char *dpt_config_type_name(dpt_config_type_t type)
{
    return (unsigned)type <= DPT_CFG_T_ENUM ? dpt__config_type_names[type] : "?";
}

int dpt_config_key_find(const char *name)
{
    for (int k = 0; k < DPT_CFG_COUNT; k++)
        if (strcmp(dpt__config_keys[k].name, name) == 0)
            return k;
    return -1;
}

const char *dpt_config_default(dpt_config_key_t k, dpt_job_t job)
{
    if ((unsigned)k >= DPT_CFG_COUNT)
        return "";
    const dpt__job_t *d = dpt__job_get(job);
    if (d)
        job = d->keys;
    for (size_t i = 0; i < sizeof dpt__config_job_defaults / sizeof dpt__config_job_defaults[0];
         i++)
        if (dpt__config_job_defaults[i].job == job && dpt__config_job_defaults[i].key == k)
            return dpt__config_job_defaults[i].value;
    return dpt__config_keys[k].def;
}

/* ---- values ------------------------------------------------------------------ */

typedef struct dpt__value {
    int64_t i;                  /* INT, BOOL, ENUM (index into choices) */
    double f;                   /* FLOAT */
    char s[DPT_CONFIG_STR_MAX]; /* the value's text */
    int given;                  /* from a file or dpt_config_set */
    int from_file;              /* given in the file (paths resolve against it) */
    int saved;                  /* read back from a run's record (dpt__config_mark_saved) */
} dpt__value_t;

struct dpt_config {
    dpt__value_t v[DPT_CFG_COUNT];
    dpt__env_entries_t envc; /* env_config entries */
    char source[PATH_MAX];
    int finalized;
};

int dpt_config_create(dpt_config_t **out)
{
    *out = NULL;
    dpt_config_t *c = calloc(1, sizeof *c);
    if (!c)
        return dpt_error(DPT_ENOMEM, "config: cannot allocate");
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        /* A default that does not parse is a bug in the table itself. */
        if (dpt__config_assign(c, (dpt_config_key_t)k, dpt__config_keys[k].def, "default") != 0)
            abort();
    }
    *out = c;
    return DPT_OK;
}

void dpt_config_destroy(dpt_config_t *c)
{
    if (!c)
        return;
    dpt__env_entries_free(&c->envc);
    free(c);
}

int dpt_config_clone(dpt_config_t **out, const dpt_config_t *c)
{
    dpt_config_t *d = malloc(sizeof *d);
    *out = NULL;
    if (!d)
        return dpt_error(DPT_ENOMEM, "config: cannot allocate");
    memcpy(d, c, sizeof *c);
    if (dpt__env_entries_copy(&d->envc, &c->envc) != 0) {
        free(d);
        return DPT_ENOMEM;
    }
    *out = d;
    return DPT_OK;
}

/* Copies `s` into `dst` (size n) with control and non-ASCII bytes shown
 * as \xNN, so a message never echoes raw binary. */
static const char *dpt__config_printable(char *dst, size_t n, const char *s, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f)
            dst[o++] = (char)ch;
        else
            o += (size_t)snprintf(dst + o, n - o, "\\x%02x", ch);
    }
    if (o + 5 >= n && n > 4)
        memcpy(dst + n - 4, "...", 4), o = n - 1;
    dst[o < n ? o : n - 1] = '\0';
    return dst;
}

/* Levenshtein distance, for "did you mean" (keys are short). */
static size_t dpt__config_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return (size_t)-1;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof *prev);
    }
    return prev[lb];
}

/* 1 when `abbr` abbreviates `name`: same first letter, its letters in
 * `name` in order ("lr" of "learning_rate"). */
static int dpt__config_abbreviates(const char *abbr, const char *name)
{
    if (strlen(abbr) < 2 || abbr[0] != name[0] || strlen(abbr) >= strlen(name))
        return 0;
    for (; *name && *abbr; name++)
        if (*name == *abbr)
            abbr++;
    return *abbr == '\0';
}

static const char *dpt__config_closest_key(const char *name)
{
    size_t best = (size_t)-1;
    const char *found = dpt__config_keys[0].name;
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        size_t d = dpt__config_edit_distance(name, dpt__config_keys[k].name);
        if (dpt__config_abbreviates(dpt__config_keys[k].name, name) && d > 1)
            d = 1;
        if (d < best) {
            best = d;
            found = dpt__config_keys[k].name;
        }
    }
    return found;
}

/* Index of `value` among '|'-separated choices, or -1. */
static int dpt__config_choice_index(const char *choices, const char *value)
{
    int idx = 0;
    size_t n = strlen(value);
    for (const char *p = choices; *p; idx++) {
        const char *end = strchr(p, '|');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0)
            return idx;
        if (!end)
            break;
        p = end + 1;
    }
    return -1;
}

/* The rules of a string value (its length is the caller's to check). */
static int dpt__config_check_text(const char *text, const char *prefix, const char *name,
                                  const char *shown, const char *where)
{
    for (const char *p = text; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return dpt_error(DPT_EINVAL, "%s: %s%s contains a control character: \"%s\"", where,
                             prefix, name, shown);
    /* '#' starts a comment in a config file, so such a value given with
     * dpt_config_set would not survive dpt_config_format (the config a run
     * directory and a checkpoint keep): refuse it everywhere. */
    if (strchr(text, '#'))
        return dpt_error(DPT_EINVAL,
                         "%s: %s%s contains '#', which starts a comment in a config: \"%s\"", where,
                         prefix, name, shown);
    return DPT_OK;
}

int dpt__config_assign(dpt_config_t *c, dpt_config_key_t k, const char *text, const char *where)
{
    const dpt_config_key_info_t *ki = &dpt__config_keys[k];
    dpt__value_t *v = &c->v[k];
    char shown[160];
    char *end;
    if (strlen(text) >= DPT_CONFIG_STR_MAX)
        return dpt_error(DPT_EINVAL, "%s: value of %s is longer than %d characters", where,
                         ki->name, DPT_CONFIG_STR_MAX - 1);
    dpt__config_printable(shown, sizeof shown, text, strlen(text));
    switch (ki->type) {
    case DPT_CFG_T_INT: {
        errno = 0;
        long long x = strtoll(text, &end, 10);
        if (errno || end == text || *end)
            return dpt_error(DPT_EINVAL, "%s: %s expects an integer, got \"%s\"", where, ki->name,
                             shown);
        if ((double)x < ki->min || (double)x > ki->max)
            return dpt_error(DPT_EINVAL, "%s: %s = %lld is out of range [%.15g, %.15g]", where,
                             ki->name, x, ki->min, ki->max);
        v->i = x;
        break;
    }
    case DPT_CFG_T_FLOAT: {
        errno = 0;
        double x = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(x))
            return dpt_error(DPT_EINVAL, "%s: %s expects a number, got \"%s\"", where, ki->name,
                             shown);
        if (x < ki->min || x > ki->max)
            return dpt_error(DPT_EINVAL, "%s: %s = %g is out of range [%g, %g]", where, ki->name, x,
                             ki->min, ki->max);
        v->f = x;
        break;
    }
    case DPT_CFG_T_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "1"))
            v->i = 1;
        else if (!strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "0"))
            v->i = 0;
        else
            return dpt_error(DPT_EINVAL, "%s: %s expects true or false, got \"%s\"", where,
                             ki->name, shown);
        break;
    case DPT_CFG_T_ENUM: {
        /* The job key also knows a job registered by the tests. */
        int idx =
            k == DPT_CFG_job ? dpt__job_find(text) : dpt__config_choice_index(ki->choices, text);
        if (idx < 0)
            return dpt_error(DPT_EINVAL, "%s: %s must be one of %s, got \"%s\"", where, ki->name,
                             ki->choices, shown);
        v->i = idx;
        break;
    }
    case DPT_CFG_T_STR: {
        int rc = dpt__config_check_text(text, ki->name, "", shown, where);
        if (rc)
            return rc;
        break;
    }
    }
    /* The parameters filled in for one env are not another env's. */
    if (k == DPT_CFG_env && strcmp(v->s, text) != 0)
        dpt__env_entries_drop_defaults(&c->envc);
    snprintf(v->s, sizeof v->s, "%s", text);
    c->finalized = 0;
    return DPT_OK;
}

/* ---- env_config entries ------------------------------------------------------ */

/* `env_config.NAME = value` from a file line or an override. */
static int dpt__config_apply_env_entry(dpt_config_t *c, const char *key, const char *val,
                                       const char *where, int from_file)
{
    const char *name = key + strlen(DPT_CONFIG_ENV_PREFIX);
    char shown[160];
    if (!dpt__env_entries_name_ok(name))
        return dpt_error(DPT_EINVAL,
                         "%s: \"%s\": after " DPT_CONFIG_ENV_PREFIX " comes a parameter name of "
                         "1..63 letters, digits or '_'",
                         where, dpt__config_printable(shown, sizeof shown, key, strlen(key)));
    if (strlen(val) >= DPT_CONFIG_STR_MAX)
        return dpt_error(DPT_EINVAL, "%s: value of %s is longer than %d characters", where, key,
                         DPT_CONFIG_STR_MAX - 1);
    dpt__config_printable(shown, sizeof shown, val, strlen(val));
    int rc = dpt__config_check_text(val, DPT_CONFIG_ENV_PREFIX, name, shown, where);
    if (rc)
        return rc;
    int found;
    size_t at = dpt__env_entries_find(&c->envc, name, &found);
    if (from_file && found && c->envc.e[at].given && c->envc.e[at].from_file)
        return dpt_error(DPT_EINVAL, "%s: duplicate key \"%s\"", where, key);
    if ((rc = dpt__env_entries_put(&c->envc, name, val, where, 1, from_file)) != 0)
        return rc;
    c->finalized = 0;
    return DPT_OK;
}

size_t dpt_config_env_count(const dpt_config_t *c)
{
    return c->envc.n;
}

const char *dpt_config_env_name(const dpt_config_t *c, size_t i)
{
    return i < c->envc.n ? c->envc.e[i].name : NULL;
}

const char *dpt_config_env_value(const dpt_config_t *c, size_t i)
{
    return i < c->envc.n ? c->envc.e[i].value : NULL;
}

const char *dpt_config_env_get(const dpt_config_t *c, const char *name)
{
    int found;
    size_t at = dpt__env_entries_find(&c->envc, name, &found);
    return found ? c->envc.e[at].value : NULL;
}

int dpt__config_env_class(const dpt_config_t *c, const dpt_env_class_t *cls, dpt_env_class_t **out)
{
    return dpt__env_entries_configure(&c->envc, cls, out);
}

int dpt__config_env_fill(dpt_config_t *c, const dpt_env_class_t *cls)
{
    return dpt__env_entries_fill(&c->envc, cls);
}

static char *dpt__config_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* One "key = value" (comment already removed). */
static int dpt__config_apply_line(dpt_config_t *c, char *line, const char *where, int from_file)
{
    char shown[160];
    char *eq = strchr(line, '=');
    if (!eq)
        return dpt_error(DPT_EINVAL, "%s: expected \"key = value\", got \"%s\"", where,
                         dpt__config_printable(shown, sizeof shown, line, strlen(line)));
    *eq = '\0';
    char *key = dpt__config_trim(line), *val = dpt__config_trim(eq + 1);
    if (!*key)
        return dpt_error(DPT_EINVAL, "%s: missing key before '='", where);
    if (strncmp(key, DPT_CONFIG_ENV_PREFIX, strlen(DPT_CONFIG_ENV_PREFIX)) == 0)
        return dpt__config_apply_env_entry(c, key, val, where, from_file);
    int k = dpt_config_key_find(key);
    if (k < 0)
        return dpt_error(DPT_EINVAL, "%s: unknown key \"%s\" (did you mean \"%s\"?)", where,
                         dpt__config_printable(shown, sizeof shown, key, strlen(key)),
                         dpt__config_closest_key(key));
    if (from_file && c->v[k].given && c->v[k].from_file)
        return dpt_error(DPT_EINVAL, "%s: duplicate key \"%s\"", where, key);
    int rc = dpt__config_assign(c, (dpt_config_key_t)k, val, where);
    if (rc)
        return rc;
    c->v[k].given = 1;
    c->v[k].from_file = from_file;
    c->v[k].saved = 0;
    return DPT_OK;
}

/* Reads `key = value` lines from f; `name` prefixes messages. */
static int dpt__config_read(dpt_config_t *c, FILE *f, const char *name)
{
    char *line = NULL, where[PATH_MAX + 32];
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = DPT_OK;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        snprintf(where, sizeof where, "%s:%d", name, lineno);
        /* The comment goes first, so a long or odd comment is harmless. */
        char *hash = memchr(line, '#', (size_t)len);
        size_t keep = hash ? (size_t)(hash - line) : (size_t)len;
        for (size_t i = 0; i < keep; i++) {
            unsigned char ch = (unsigned char)line[i];
            if ((ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') || ch == 0x7f) {
                rc = dpt_error(DPT_EINVAL,
                               "%s: byte %zu is a control character (0x%02x); a "
                               "config is a text file of `key = value` lines",
                               where, i + 1, ch);
                break;
            }
        }
        if (rc)
            break;
        line[keep] = '\0';
        if (keep > DPT_CONFIG_STR_MAX + 64) {
            rc = dpt_error(DPT_EINVAL, "%s: line longer than %d characters", where,
                           DPT_CONFIG_STR_MAX + 64);
            break;
        }
        char *s = dpt__config_trim(line);
        if (!*s)
            continue;
        if ((rc = dpt__config_apply_line(c, s, where, 1)) != 0)
            break;
    }
    if (!rc && ferror(f))
        rc = dpt_error(DPT_EIO, "config %s: read error", name);
    free(line);
    return rc;
}

int dpt_config_load(dpt_config_t *c, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return dpt_error(dpt__io_read_status(errno), "config %s: cannot open: %s", path,
                         strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return dpt_error(DPT_EINVAL, "config %s: not a regular file (%s)", path,
                         S_ISDIR(sb.st_mode) ? "a directory" : "a special file");
    FILE *f = fopen(path, "r");
    if (!f)
        return dpt_error(dpt__io_read_status(errno), "config %s: cannot open: %s", path,
                         strerror(errno));
    int rc = dpt__config_read(c, f, path);
    fclose(f);
    if (!rc)
        snprintf(c->source, sizeof c->source, "%s", path);
    return rc;
}

int dpt__config_load_text(dpt_config_t *c, const char *text, const char *name)
{
    if (!text[0])
        return DPT_OK;
    FILE *f = fmemopen((void *)(uintptr_t)text, strlen(text), "r");
    if (!f)
        return dpt_error(DPT_ENOMEM, "config %s: cannot open the text", name);
    int rc = dpt__config_read(c, f, name);
    fclose(f);
    if (!rc)
        dpt__config_mark_saved(c);
    return rc;
}

void dpt__config_mark_saved(dpt_config_t *c)
{
    for (int k = 0; k < DPT_CFG_COUNT; k++)
        c->v[k].saved = c->v[k].given;
}

int dpt__config_user_set(const dpt_config_t *c, dpt_config_key_t k)
{
    if ((unsigned)k >= DPT_CFG_COUNT || !c->v[k].given || c->v[k].saved)
        return 0;
    const dpt_config_key_info_t *ki = &dpt__config_keys[k];
    const char *def = dpt_config_default(k, dpt_config_job(c));
    switch (ki->type) {
    case DPT_CFG_T_INT: return c->v[k].i != strtoll(def, NULL, 10);
    case DPT_CFG_T_FLOAT: return c->v[k].f != strtod(def, NULL);
    case DPT_CFG_T_BOOL: return c->v[k].i != (strcmp(def, "true") == 0);
    case DPT_CFG_T_ENUM: return c->v[k].i != dpt__config_choice_index(ki->choices, def);
    default: return strcmp(c->v[k].s, def) != 0;
    }
}

int dpt_config_set(dpt_config_t *c, const char *assignment)
{
    char where[300], shown[200];
    snprintf(where, sizeof where, "--set %s",
             dpt__config_printable(shown, sizeof shown, assignment, strlen(assignment)));
    size_t n = strlen(assignment);
    if (n >= DPT_CONFIG_STR_MAX + 64)
        return dpt_error(DPT_EINVAL, "%s: assignment too long", where);
    char *buf = malloc(n + 1);
    if (!buf)
        return dpt_error(DPT_ENOMEM, "config: cannot allocate");
    memcpy(buf, assignment, n + 1);
    int rc = dpt__config_apply_line(c, dpt__config_trim(buf), where, 0);
    free(buf);
    return rc;
}

/* ---- finalize ---------------------------------------------------------------- */

dpt_job_t dpt_config_job(const dpt_config_t *c)
{
    return (dpt_job_t)c->v[DPT_CFG_job].i;
}

int dpt_config_applies(const dpt_config_t *c, dpt_config_key_t k)
{
    return (unsigned)k < DPT_CFG_COUNT &&
           (dpt__config_keys[k].jobs & dpt__job_keys_bit(dpt_config_job(c))) != 0;
}

void dpt__jobs_text(unsigned mask, char *buf, size_t n)
{
    buf[0] = '\0';
    for (int j = 0; j < DPT_JOB_COUNT; j++)
        if (mask & (1u << j)) {
            size_t len = strlen(buf);
            snprintf(buf + len, n - len, "%s%s", len ? ", " : "", dpt_job_name((dpt_job_t)j));
        }
}

/* A path-valued key: is its value a path (plug-in envs name a file)? */
static int dpt__config_is_path_key(const dpt_config_t *c, dpt_config_key_t k)
{
    const char *s = c->v[k].s;
    if (!s[0])
        return 0;
    if (k == DPT_CFG_env) /* a built-in or external name first, otherwise a path */
        return !dpt__env_is_builtin(s) && strncmp(s, "external:", 9) != 0 &&
               (strchr(s, '/') != NULL || strstr(s, ".so") != NULL);
    if (k == DPT_CFG_tensorboard_dir)
        return strcmp(s, "off") != 0;
    return k == DPT_CFG_train_csv || k == DPT_CFG_test_csv || k == DPT_CFG_data_dir ||
           k == DPT_CFG_model;
}

/* Removes "." and ".." components and repeated slashes from an absolute
 * path, in place, without touching the filesystem (the file may not exist
 * yet). */
static void dpt__config_normalize_path(char *p)
{
    char *out = p, *in = p;
    while (*in) {
        while (*in == '/')
            in++;
        char *end = strchr(in, '/');
        size_t len = end ? (size_t)(end - in) : strlen(in);
        if (len == 0)
            break;
        if (len == 1 && in[0] == '.') {
            /* skip */
        } else if (len == 2 && in[0] == '.' && in[1] == '.') {
            while (out > p && *--out != '/')
                ;
        } else {
            *out++ = '/';
            memmove(out, in, len);
            out += len;
        }
        in += len;
    }
    if (out == p)
        *out++ = '/';
    *out = '\0';
}

/* Makes a relative path absolute: an input's against the config file's
 * directory when it came from the file, an output's (tensorboard_dir, as
 * output_dir) and any given with --set against the working directory. */
static int dpt__config_resolve_path(dpt_config_t *c, dpt_config_key_t k)
{
    dpt__value_t *v = &c->v[k];
    if (v->s[0] == '/')
        return DPT_OK;
    char base[PATH_MAX], joined[PATH_MAX + DPT_CONFIG_STR_MAX + 2];
    if (v->from_file && c->source[0] && k != DPT_CFG_tensorboard_dir) {
        snprintf(base, sizeof base, "%s", c->source);
        char *slash = strrchr(base, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(base, sizeof base, ".");
    } else {
        snprintf(base, sizeof base, ".");
    }
    char *abs = realpath(base, NULL);
    if (!abs)
        return dpt_error(DPT_EINVAL, "%s = %s: cannot resolve directory %s: %s",
                         dpt__config_keys[k].name, v->s, base, strerror(errno));
    snprintf(joined, sizeof joined, "%s/%s", abs, v->s);
    free(abs);
    /* "a/../b" becomes "b" (lexically: the file may not exist yet, and then
     * the error that follows names what was looked for). */
    dpt__config_normalize_path(joined);
    size_t jlen = strlen(joined);
    if (jlen >= DPT_CONFIG_STR_MAX)
        return dpt_error(DPT_EINVAL, "%s: the resolved path is longer than %d characters",
                         dpt__config_keys[k].name, DPT_CONFIG_STR_MAX - 1);
    /* "a /" normalizes to ".../a ": a value ending in a blank would lose it
     * when the formatted config is read again (values are trimmed). */
    if (jlen > 0 && isspace((unsigned char)joined[jlen - 1]))
        return dpt_error(DPT_EINVAL, "%s = %s: the path ends in a blank once resolved (\"%s\")",
                         dpt__config_keys[k].name, v->s, joined);
    memcpy(v->s, joined, jlen + 1);
    return DPT_OK;
}

int dpt_config_finalize(dpt_config_t *c)
{
    if (c->finalized)
        return DPT_OK;
    dpt_job_t job = dpt_config_job(c);
    const dpt__job_t *desc = dpt__job_get(job);
    if (!desc)
        return dpt_error(DPT_EINVAL, "config: unknown job %d", (int)job);
    char jobs[64];
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        dpt__value_t *v = &c->v[k];
        if (!(dpt__config_keys[k].jobs & dpt__job_keys_bit(job))) {
            if (!v->given)
                continue;
            int rc = desc->refuse_key ? desc->refuse_key(c, (dpt_config_key_t)k) : DPT_OK;
            if (rc)
                return rc;
            dpt__jobs_text(dpt__config_keys[k].jobs, jobs, sizeof jobs);
            return dpt_error(DPT_EINVAL, "key %s does not apply to job %s (it is used by: %s)",
                             dpt__config_keys[k].name, dpt_job_name(job), jobs);
        }
        if (!v->given) {
            int rc = dpt__config_assign(c, (dpt_config_key_t)k,
                                        dpt_config_default((dpt_config_key_t)k, job), "default");
            if (rc)
                return rc;
        }
    }
    if (desc->fill) {
        int rc = desc->fill(c);
        if (rc)
            return rc;
    }
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        if (!(dpt__config_keys[k].jobs & dpt__job_keys_bit(job)) ||
            !dpt__config_is_path_key(c, (dpt_config_key_t)k))
            continue;
        int rc = dpt__config_resolve_path(c, (dpt_config_key_t)k);
        if (rc)
            return rc;
    }
    if (!(dpt__config_keys[DPT_CFG_env].jobs & dpt__job_keys_bit(job)))
        for (size_t i = 0; i < c->envc.n; i++)
            if (c->envc.e[i].given) {
                dpt__jobs_text(dpt__config_keys[DPT_CFG_env].jobs, jobs, sizeof jobs);
                return dpt_error(DPT_EINVAL,
                                 "key " DPT_CONFIG_ENV_PREFIX "%s does not apply to job %s (it is "
                                 "used by: %s)",
                                 c->envc.e[i].name, dpt_job_name(job), jobs);
            }
    int rc = dpt__config_rules(c);
    if (rc)
        return rc;
    c->finalized = 1;
    return DPT_OK;
}

int dpt_config_finalized(const dpt_config_t *c)
{
    return c->finalized;
}

/* ---- typed access -------------------------------------------------------------- */

int64_t dpt_config_int(const dpt_config_t *c, dpt_config_key_t k)
{
    if ((unsigned)k >= DPT_CFG_COUNT || dpt__config_keys[k].type == DPT_CFG_T_FLOAT ||
        dpt__config_keys[k].type == DPT_CFG_T_STR)
        abort();
    return c->v[k].i;
}

double dpt_config_float(const dpt_config_t *c, dpt_config_key_t k)
{
    if ((unsigned)k >= DPT_CFG_COUNT || dpt__config_keys[k].type != DPT_CFG_T_FLOAT)
        abort();
    return c->v[k].f;
}

const char *dpt_config_str(const dpt_config_t *c, dpt_config_key_t k)
{
    if ((unsigned)k >= DPT_CFG_COUNT)
        abort();
    return c->v[k].s;
}

int dpt_config_given(const dpt_config_t *c, dpt_config_key_t k)
{
    return (unsigned)k < DPT_CFG_COUNT && c->v[k].given;
}

const char *dpt_config_source(const dpt_config_t *c)
{
    return c->source;
}

int dpt__config_sizes(const dpt_config_t *c, dpt_config_key_t k, size_t *out, int max)
{
    const char *s = c->v[k].s;
    const char *name = dpt__config_keys[k].name;
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 1 || x > 1000000)
            return dpt_error(DPT_EINVAL,
                             "%s = \"%s\": expected comma-separated integers in "
                             "[1, 1000000]",
                             name, s);
        if (n == max)
            return dpt_error(DPT_EINVAL, "%s = \"%s\": more than %d layers", name, s, max);
        out[n++] = (size_t)x;
        while (isspace((unsigned char)*end))
            end++;
        if (*end == ',')
            end++;
        else if (*end)
            return dpt_error(DPT_EINVAL, "%s = \"%s\": unexpected \"%s\"", name, s, end);
        while (isspace((unsigned char)*end))
            end++;
        p = end;
    }
    if (n == 0)
        return dpt_error(DPT_EINVAL, "%s: empty list", name);
    return n;
}

/* ---- text and digests ------------------------------------------------------------ */

#define DPT__APPEND(buf, size, len, ...)                                     \
    do {                                                                     \
        int w_ = snprintf((len) < (size) ? (buf) + (len) : NULL,             \
                          (len) < (size) ? (size) - (len) : 0, __VA_ARGS__); \
        if (w_ > 0)                                                          \
            (len) += (size_t)w_;                                             \
    } while (0)

size_t dpt_config_format(const dpt_config_t *c, char *buf, size_t size)
{
    size_t len = 0;
    dpt_job_t job = dpt_config_job(c);
    if (size)
        buf[0] = '\0';
    DPT__APPEND(buf, size, len, "# dpt run configuration: job %s (the keys of this job)\n",
                dpt_job_name(job));
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        if (!(dpt__config_keys[k].jobs & dpt__job_keys_bit(job)))
            continue;
        DPT__APPEND(buf, size, len, "%s = %s\n", dpt__config_keys[k].name, c->v[k].s);
        if (k == DPT_CFG_env)
            for (size_t i = 0; i < c->envc.n; i++)
                DPT__APPEND(buf, size, len, DPT_CONFIG_ENV_PREFIX "%s = %s\n", c->envc.e[i].name,
                            c->envc.e[i].value);
    }
    return len;
}

size_t dpt_config_format_starter(dpt_job_t job, char *buf, size_t size)
{
    size_t len = 0;
    if (size)
        buf[0] = '\0';
    DPT__APPEND(buf, size, len,
                "# A dpt config for job %s: %s.\n"
                "# Every key of the job is listed with its default; change what you need\n"
                "# and delete the rest. Train with: dpt train THIS_FILE\n\n"
                "job = %s\n",
                dpt_job_name(job), dpt_job_summary(job), dpt_job_name(job));
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        const dpt_config_key_info_t *ki = &dpt__config_keys[k];
        if (k == DPT_CFG_job || !(ki->jobs & dpt__job_keys_bit(job)))
            continue;
        char type[200];
        if (ki->type == DPT_CFG_T_ENUM)
            snprintf(type, sizeof type, "one of %s", ki->choices);
        else if (ki->type == DPT_CFG_T_INT || ki->type == DPT_CFG_T_FLOAT)
            snprintf(type, sizeof type, "%s in [%.15g, %.15g]", dpt__config_type_names[ki->type],
                     ki->min, ki->max);
        else
            snprintf(type, sizeof type, "%s", dpt__config_type_names[ki->type]);
        DPT__APPEND(buf, size, len, "\n# %s (%s)\n%s = %s\n", ki->help, type, ki->name,
                    dpt_config_default((dpt_config_key_t)k, job));
        if (k == DPT_CFG_env)
            DPT__APPEND(buf, size, len,
                        "\n# Parameters of the env, one line each: " DPT_CONFIG_ENV_PREFIX
                        "NAME = value\n# (the built-in envs' parameters: dpt train --help)\n");
    }
    return len;
}

int dpt_config_save(const dpt_config_t *c, const char *path)
{
    size_t n = dpt_config_format(c, NULL, 0);
    char *text = malloc(n + 1);
    if (!text)
        return dpt_error(DPT_ENOMEM, "config: cannot allocate");
    dpt_config_format(c, text, n + 1);
    int rc = dpt__write_file_atomic(path, text, n);
    free(text);
    return rc;
}

uint64_t dpt_config_key_hash(const dpt_config_t *c, dpt_config_key_t k)
{
    if ((unsigned)k >= DPT_CFG_COUNT || !dpt_config_applies(c, k))
        return 0;
    uint64_t h =
        dpt_fnv1a64(DPT_FNV1A64_INIT, dpt__config_keys[k].name, strlen(dpt__config_keys[k].name));
    h = dpt_fnv1a64(h, "=", 1);
    h = dpt_fnv1a64(h, c->v[k].s, strlen(c->v[k].s));
    return dpt_fnv1a64(h, "\n", 1);
}

uint64_t dpt__config_env_hash(const dpt_config_t *c)
{
    return dpt_config_applies(c, DPT_CFG_env) ? dpt__env_entries_hash(&c->envc) : 0;
}

uint64_t dpt_config_digest(const dpt_config_t *c, unsigned skip_flags)
{
    uint64_t h = DPT_FNV1A64_INIT;
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        if (dpt__config_keys[k].flags & skip_flags)
            continue;
        uint64_t kh = dpt_config_key_hash(c, (dpt_config_key_t)k);
        h = dpt_fnv1a64(h, &kh, sizeof kh);
    }
    /* Without entries the digest is what it was before env_config existed. */
    uint64_t eh = dpt__config_env_hash(c);
    if (eh)
        h = dpt_fnv1a64(h, &eh, sizeof eh);
    return h;
}

int dpt__config_apply_overrides(dpt_config_t *dst, const dpt_config_t *overrides)
{
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        if (!overrides->v[k].given)
            continue;
        int rc = dpt__config_assign(dst, (dpt_config_key_t)k, overrides->v[k].s, "--set");
        if (rc)
            return rc;
        dst->v[k].given = 1;
        dst->v[k].from_file = 0;
        dst->v[k].saved = 0;
    }
    for (size_t i = 0; i < overrides->envc.n; i++) {
        const dpt__env_entry_t *e = &overrides->envc.e[i];
        if (!e->given)
            continue;
        int rc = dpt__env_entries_put(&dst->envc, e->name, e->value, e->where, 1, 0);
        if (rc)
            return rc;
    }
    dst->finalized = 0;
    return DPT_OK;
}
