/*
 * The env_config entries of a config (dpt/train.h, DPT_CONFIG_ENV_PREFIX): a
 * list kept in name order, so lookups are binary searches and the text and
 * hash of a config do not depend on the order the entries were given in.
 * config.c parses the lines and owns the list; this file keeps it and checks
 * it against an env class.
 */
#include "dpt/checkpoint.h"
#include "dpt/env.h"
#include "dpt/status.h"
#include "rl/env_internal.h"
#include "train_internal.h"

#include <stdlib.h>
#include <string.h>

/* A copy of an entry's strings in one allocation, into *e (the flags are the
 * caller's). */
static int dpt__env_entries_init(dpt__env_entry_t *e, const char *name, const char *value,
                                 const char *where)
{
    size_t ln = strlen(name) + 1, lv = strlen(value) + 1, lw = strlen(where) + 1;
    char *b = malloc(ln + lv + lw);
    if (!b)
        return dpt_error(DPT_ENOMEM, "config: cannot allocate env_config.%s", name);
    e->name = memcpy(b, name, ln);
    e->value = memcpy(b + ln, value, lv);
    e->where = memcpy(b + ln + lv, where, lw);
    return DPT_OK;
}

void dpt__env_entries_free(dpt__env_entries_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].name);
    free(l->e);
    memset(l, 0, sizeof *l);
}

int dpt__env_entries_copy(dpt__env_entries_t *dst, const dpt__env_entries_t *src)
{
    memset(dst, 0, sizeof *dst);
    if (src->n == 0)
        return DPT_OK;
    if (!(dst->e = calloc(src->n, sizeof *dst->e)))
        return dpt_error(DPT_ENOMEM, "config: cannot allocate %zu env_config entries", src->n);
    dst->cap = src->n;
    for (; dst->n < src->n; dst->n++) {
        const dpt__env_entry_t *e = &src->e[dst->n];
        dpt__env_entry_t *f = &dst->e[dst->n];
        *f = *e;
        if (dpt__env_entries_init(f, e->name, e->value, e->where) != 0) {
            dpt__env_entries_free(dst);
            return DPT_ENOMEM;
        }
    }
    return DPT_OK;
}

size_t dpt__env_entries_find(const dpt__env_entries_t *l, const char *name, int *found)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strcmp(l->e[mid].name, name);
        if (cmp == 0) {
            *found = 1;
            return mid;
        }
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

int dpt__env_entries_put(dpt__env_entries_t *l, const char *name, const char *value,
                         const char *where, int given, int from_file)
{
    int found;
    size_t at = dpt__env_entries_find(l, name, &found);
    dpt__env_entry_t e = {0};
    int rc = dpt__env_entries_init(&e, name, value, where);
    if (rc)
        return rc;
    e.given = given;
    e.from_file = from_file;
    if (found) {
        free(l->e[at].name);
        l->e[at] = e;
        return DPT_OK;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        dpt__env_entry_t *grown = NULL;
        if (cap <= SIZE_MAX / sizeof *grown)
            grown = realloc(l->e, cap * sizeof *grown);
        if (!grown) {
            free(e.name);
            return dpt_error(DPT_ENOMEM, "config: cannot allocate %zu env_config entries", cap);
        }
        l->e = grown;
        l->cap = cap;
    }
    memmove(l->e + at + 1, l->e + at, (l->n - at) * sizeof *l->e);
    l->e[at] = e;
    l->n++;
    return DPT_OK;
}

void dpt__env_entries_drop_defaults(dpt__env_entries_t *l)
{
    size_t kept = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->e[i].given)
            l->e[kept++] = l->e[i];
        else
            free(l->e[i].name);
    }
    l->n = kept;
}

int dpt__env_entries_name_ok(const char *name)
{
    size_t n = 0;
    for (; name[n]; n++) {
        char ch = name[n];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_') ||
            n >= 63)
            return 0;
    }
    return n > 0;
}

uint64_t dpt__env_entries_hash(const dpt__env_entries_t *l)
{
    if (l->n == 0)
        return 0;
    uint64_t h = DPT_FNV1A64_INIT;
    for (size_t i = 0; i < l->n; i++) {
        const dpt__env_entry_t *e = &l->e[i];
        h = dpt_fnv1a64(h, DPT_CONFIG_ENV_PREFIX, strlen(DPT_CONFIG_ENV_PREFIX));
        h = dpt_fnv1a64(h, e->name, strlen(e->name));
        h = dpt_fnv1a64(h, "=", 1);
        h = dpt_fnv1a64(h, e->value, strlen(e->value));
        h = dpt_fnv1a64(h, "\n", 1);
    }
    return h;
}

int dpt__env_entries_configure(const dpt__env_entries_t *l, const dpt_env_class_t *cls,
                               dpt_env_class_t **out)
{
    *out = NULL;
    /* Each entry first, so the message names its key and where it was given. */
    for (size_t i = 0; i < l->n; i++) {
        const dpt__env_entry_t *e = &l->e[i];
        const dpt_env_param_t *p = dpt_env_param_find(cls, e->name);
        if (!p) {
            char list[256];
            dpt__env_param_list(cls, list, sizeof list);
            return dpt_error(DPT_EINVAL,
                             "%s: " DPT_CONFIG_ENV_PREFIX "%s: env \"%s\" has no such parameter "
                             "(%s)",
                             e->where, e->name, cls->name, list);
        }
        dpt_env_value_t v;
        if (dpt_env_param_parse(p, e->value, &v) != 0)
            return dpt_error(DPT_EINVAL, "%s: " DPT_CONFIG_ENV_PREFIX "%s (env \"%s\")", e->where,
                             dpt_last_error(), cls->name);
    }
    const char **names = NULL, **texts = NULL;
    if (l->n) {
        names = malloc(l->n * sizeof *names);
        texts = malloc(l->n * sizeof *texts);
    }
    int rc;
    if (l->n && (!names || !texts)) {
        rc = dpt_error(DPT_ENOMEM, "config: cannot allocate %zu env_config entries", l->n);
    } else {
        for (size_t i = 0; i < l->n; i++) {
            names[i] = l->e[i].name;
            texts[i] = l->e[i].value;
        }
        /* What is left: configure's refusal of a combination of values. */
        rc = dpt_env_class_create(out, cls, names, texts, l->n);
        if (rc == DPT_EINVAL)
            rc = dpt_error(rc, "env_config: %s", dpt_last_error());
    }
    free(names);
    free(texts);
    return rc;
}

int dpt__env_entries_fill(dpt__env_entries_t *l, const dpt_env_class_t *cls)
{
    for (size_t j = 0; j < cls->num_params; j++) {
        const dpt_env_param_t *p = &cls->params[j];
        int found;
        (void)dpt__env_entries_find(l, p->name, &found);
        if (found)
            continue;
        int rc = dpt__env_entries_put(l, p->name, p->def, "default", 0, 0);
        if (rc)
            return rc;
    }
    return DPT_OK;
}
