/* Config files, --set overrides and the key table's help. */
#include "config.h"
#include "dpt/status.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dpt__key_info {
    const char *name;
    dpt_config_type_t type;
    const char *def;
    double lo, hi;
    const char *choices;
    const char *help;
} dpt__key_info_t;

static const dpt__key_info_t dpt__keys[DPT_CFG_COUNT] = {
#define DPT__CFG_INFO(name, type, def, lo, hi, choices, help) \
    {#name, DPT_CFG_T_##type, def, lo, hi, choices, help},
    DPT_CONFIG_KEYS(DPT__CFG_INFO)
#undef DPT__CFG_INFO
};

static const char *const dpt__type_names[] = {"int", "float", "string", "bool", "choice"};

const char *dpt_config_key_name(dpt_config_key_t k)
{
    return (unsigned)k < DPT_CFG_COUNT ? dpt__keys[k].name : "unknown";
}

/* Levenshtein distance, for "did you mean" (keys are short). */
static size_t dpt__edit_distance(const char *a, const char *b)
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

static int dpt__find_key(const char *name)
{
    for (int k = 0; k < DPT_CFG_COUNT; k++)
        if (strcmp(dpt__keys[k].name, name) == 0)
            return k;
    return -1;
}

/* 1 when `abbr` is an abbreviation of `name`: same first letter and its
 * letters appear in `name` in order ("lr" of "learning_rate"). */
static int dpt__abbreviates(const char *abbr, const char *name)
{
    if (strlen(abbr) < 2 || abbr[0] != name[0] || strlen(abbr) >= strlen(name))
        return 0;
    for (; *name && *abbr; name++)
        if (*name == *abbr)
            abbr++;
    return *abbr == '\0';
}

static const char *dpt__closest_key(const char *name)
{
    size_t best = (size_t)-1;
    const char *found = dpt__keys[0].name;
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        size_t d = dpt__edit_distance(name, dpt__keys[k].name);
        if (dpt__abbreviates(dpt__keys[k].name, name) && d > 1)
            d = 1;
        if (d < best) {
            best = d;
            found = dpt__keys[k].name;
        }
    }
    return found;
}

/* Index of `value` among '|'-separated choices, or -1. */
static int dpt__choice_index(const char *choices, const char *value)
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

/* Parses `text` into key k. `where` prefixes messages ("file:3" or "--set"). */
static int dpt__assign(dpt_config_t *c, int k, const char *text, const char *where)
{
    const dpt__key_info_t *ki = &dpt__keys[k];
    dpt_config_value_t *v = &c->v[k];
    char *end;
    if (strlen(text) >= DPT_CONFIG_STR_MAX)
        return dpt_error(DPT_EINVAL, "%s: value of %s is longer than %d characters", where,
                         ki->name, DPT_CONFIG_STR_MAX - 1);
    switch (ki->type) {
    case DPT_CFG_T_INT: {
        errno = 0;
        long long x = strtoll(text, &end, 10);
        if (errno || end == text || *end)
            return dpt_error(DPT_EINVAL, "%s: %s expects an integer, got \"%s\"", where, ki->name,
                             text);
        if ((double)x < ki->lo || (double)x > ki->hi)
            return dpt_error(DPT_EINVAL, "%s: %s = %lld is out of range [%.15g, %.15g]", where,
                             ki->name, x, ki->lo, ki->hi);
        v->i = x;
        break;
    }
    case DPT_CFG_T_FLOAT: {
        errno = 0;
        double x = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(x))
            return dpt_error(DPT_EINVAL, "%s: %s expects a number, got \"%s\"", where, ki->name,
                             text);
        if (x < ki->lo || x > ki->hi)
            return dpt_error(DPT_EINVAL, "%s: %s = %g is out of range [%g, %g]", where, ki->name,
                             x, ki->lo, ki->hi);
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
                             ki->name, text);
        break;
    case DPT_CFG_T_ENUM: {
        int idx = dpt__choice_index(ki->choices, text);
        if (idx < 0)
            return dpt_error(DPT_EINVAL, "%s: %s must be one of %s, got \"%s\"", where, ki->name,
                             ki->choices, text);
        v->i = idx;
        break;
    }
    case DPT_CFG_T_STR:
        break;
    }
    snprintf(v->s, sizeof v->s, "%s", text);
    return DPT_OK;
}

void dpt_config_defaults(dpt_config_t *c)
{
    memset(c, 0, sizeof *c);
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        /* A default that does not parse is a bug in the key table itself:
         * a broken invariant, not an input error. */
        if (dpt__assign(c, k, dpt__keys[k].def, "default") != 0)
            abort();
        c->v[k].set = 0;
    }
}

static char *dpt__trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* One "key = value" (comments already removed). */
static int dpt__apply_line(dpt_config_t *c, char *line, const char *where, int from_file)
{
    char *eq = strchr(line, '=');
    if (!eq)
        return dpt_error(DPT_EINVAL, "%s: expected \"key = value\", got \"%s\"", where, line);
    *eq = '\0';
    char *key = dpt__trim(line), *val = dpt__trim(eq + 1);
    if (!*key)
        return dpt_error(DPT_EINVAL, "%s: missing key before '='", where);
    int k = dpt__find_key(key);
    if (k < 0)
        return dpt_error(DPT_EINVAL, "%s: unknown key \"%s\" (did you mean \"%s\"?)", where, key,
                         dpt__closest_key(key));
    if (from_file && c->v[k].set)
        return dpt_error(DPT_EINVAL, "%s: duplicate key \"%s\"", where, key);
    int rc = dpt__assign(c, k, val, where);
    if (rc)
        return rc;
    c->v[k].set = 1;
    return DPT_OK;
}

int dpt_config_load(dpt_config_t *c, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return dpt_error(DPT_ENOENT, "config %s: cannot open: %s", path, strerror(errno));
    char line[1024], where[600];
    int lineno = 0, rc = DPT_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            rc = dpt_error(DPT_EINVAL, "%s: line longer than %zu characters", where,
                           sizeof line - 2);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = dpt__trim(line);
        if (!*s)
            continue;
        if ((rc = dpt__apply_line(c, s, where, 1)) != 0)
            break;
    }
    if (!rc && ferror(f))
        rc = dpt_error(DPT_EIO, "config %s: read error", path);
    fclose(f);
    if (!rc)
        snprintf(c->source, sizeof c->source, "%s", path);
    return rc;
}

int dpt_config_set(dpt_config_t *c, const char *assignment)
{
    char buf[1024];
    if (strlen(assignment) >= sizeof buf)
        return dpt_error(DPT_EINVAL, "--set: assignment too long");
    strcpy(buf, assignment);
    char where[300];
    snprintf(where, sizeof where, "--set %.200s", assignment);
    return dpt__apply_line(c, dpt__trim(buf), where, 0);
}

int dpt_config_save(const dpt_config_t *c, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return dpt_error(DPT_EIO, "config %s: cannot write: %s", path, strerror(errno));
    fprintf(f, "# dpt configuration used by this run (every key)\n");
    for (int k = 0; k < DPT_CFG_COUNT; k++)
        fprintf(f, "%s = %s\n", dpt__keys[k].name, c->v[k].s);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return dpt_error(DPT_EIO, "config %s: write failed", path);
    return DPT_OK;
}

uint64_t dpt_config_digest(const dpt_config_t *c)
{
    /* Keys that do not change the numbers of a run. */
    static const int ignored[] = {DPT_CFG_output_dir, DPT_CFG_checkpoint_every,
                                  DPT_CFG_keep_checkpoints, DPT_CFG_total_timesteps,
                                  DPT_CFG_stop_reward, DPT_CFG_stop_iters, DPT_CFG_eval_episodes,
                                  DPT_CFG_data_dir};
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        int skip = 0;
        for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
            skip |= ignored[i] == k;
        if (skip)
            continue;
        for (const char *p = dpt__keys[k].name; *p; p++)
            h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
        h = (h ^ '=') * 0x100000001b3ull;
        for (const char *p = c->v[k].s; *p; p++)
            h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
        h = (h ^ '\n') * 0x100000001b3ull;
    }
    return h;
}

void dpt_config_print_help(void *file)
{
    FILE *f = file;
    fprintf(f, "config keys (key = value in the file, or --set key=value):\n");
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        const dpt__key_info_t *ki = &dpt__keys[k];
        char type[160];
        if (ki->type == DPT_CFG_T_ENUM)
            snprintf(type, sizeof type, "%s", ki->choices);
        else if (ki->type == DPT_CFG_T_INT || ki->type == DPT_CFG_T_FLOAT)
            snprintf(type, sizeof type, "%s in [%g, %g]", dpt__type_names[ki->type], ki->lo,
                     ki->hi);
        else
            snprintf(type, sizeof type, "%s", dpt__type_names[ki->type]);
        fprintf(f, "  %-24s %s (default %s)\n  %-24s %s\n", ki->name, type,
                ki->def[0] ? ki->def : "\"\"", "", ki->help);
    }
}

int dpt_config_parse_sizes(const char *s, size_t *out, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 1 || x > 1000000)
            return dpt_error(DPT_EINVAL, "sizes \"%s\": expected comma-separated positive integers",
                             s);
        if (n == max)
            return dpt_error(DPT_EINVAL, "sizes \"%s\": more than %d entries", s, max);
        out[n++] = (size_t)x;
        while (isspace((unsigned char)*end))
            end++;
        if (*end == ',')
            end++;
        else if (*end)
            return dpt_error(DPT_EINVAL, "sizes \"%s\": unexpected \"%s\"", s, end);
        while (isspace((unsigned char)*end))
            end++;
        p = end;
    }
    if (n == 0)
        return dpt_error(DPT_EINVAL, "sizes: empty list");
    return n;
}
