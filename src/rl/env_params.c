/*
 * Env parameters (dpt/env.h): their declarations, parsing, and configured
 * classes.
 *
 * A configured class is one allocation, so dpt_env_class_destroy is one
 * free():
 *
 *   [struct dpt__env_owned: the class copy, values [num_params]][texts]
 *
 * The texts are the values as given (or the defaults), NUL-terminated, in
 * parameter order; each value's `s` points at its own.
 */
#include "env_internal.h"
#include "dpt/arena.h"
#include "dpt/checkpoint.h"
#include "dpt/status.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dpt__env_param_type_names[DPT_ENV_PARAM_TYPE_COUNT] = {
#define DPT__EPT_NAME(sym, name) [sym] = name,
    DPT_ENV_PARAM_TYPE_LIST(DPT__EPT_NAME)
#undef DPT__EPT_NAME
};

/* Longest parameter name, with its NUL. */
#define DPT__PARAM_NAME_CAP 64

const char *dpt_env_param_type_name(dpt_env_param_type_t type)
{
    return (unsigned)type < DPT_ENV_PARAM_TYPE_COUNT ? dpt__env_param_type_names[type] : "?";
}

const dpt_env_param_t *dpt_env_param_find(const dpt_env_class_t *cls, const char *name)
{
    if (!cls || !name || !cls->params)
        return NULL;
    for (size_t j = 0; j < cls->num_params; j++)
        if (cls->params[j].name && strcmp(cls->params[j].name, name) == 0)
            return &cls->params[j];
    return NULL;
}

/* 1 for 1..63 bytes of ASCII letters, digits and '_' (no locale). */
static int dpt__env_param_name_ok(const char *name)
{
    size_t n = 0;
    for (; name[n]; n++) {
        char ch = name[n];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_';
        if (!ok || n + 1 >= DPT__PARAM_NAME_CAP)
            return 0;
    }
    return n > 0;
}

static int dpt__env_param_is_blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

int dpt_env_param_parse(const dpt_env_param_t *p, const char *text, dpt_env_value_t *out)
{
    if (!p || !p->name || !out)
        return dpt_error(DPT_EINVAL, "dpt_env_param_parse: parameter or output is NULL");
    const char *nm = p->name;
    if (!text)
        return dpt_error(DPT_EINVAL, "%s: the value is NULL", nm);
    memset(out, 0, sizeof *out);
    out->s = text;
    char *end;
    /* strtoll and strtod skip leading blanks; a value does not have any. */
    int blank = text[0] == '\0' || dpt__env_param_is_blank(text[0]);
    switch (p->type) {
    case DPT_ENV_PARAM_INT: {
        errno = 0;
        long long x = blank ? 0 : strtoll(text, &end, 10);
        if (blank || errno || *end)
            return dpt_error(DPT_EINVAL, "%s expects an integer, got \"%.60s\"", nm, text);
        if ((double)x < p->min || (double)x > p->max)
            return dpt_error(DPT_EINVAL, "%s = %lld is out of range [%.15g, %.15g]", nm, x, p->min,
                             p->max);
        out->i = x;
        return DPT_OK;
    }
    case DPT_ENV_PARAM_FLOAT: {
        errno = 0;
        double x = blank ? 0.0 : strtod(text, &end);
        if (blank || errno || *end || !isfinite(x))
            return dpt_error(DPT_EINVAL, "%s expects a finite number, got \"%.60s\"", nm, text);
        if (x < p->min || x > p->max)
            return dpt_error(DPT_EINVAL, "%s = %.17g is out of range [%.15g, %.15g]", nm, x, p->min,
                             p->max);
        out->f = x;
        return DPT_OK;
    }
    case DPT_ENV_PARAM_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "1"))
            out->i = 1;
        else if (!strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "0"))
            out->i = 0;
        else
            return dpt_error(DPT_EINVAL, "%s expects true or false, got \"%.60s\"", nm, text);
        return DPT_OK;
    case DPT_ENV_PARAM_STRING:
        for (const char *c = text; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                return dpt_error(DPT_EINVAL, "%s: the value contains a control character", nm);
        return DPT_OK;
    default:
        return dpt_error(DPT_EINVAL, "%s has type %d, not a dpt_env_param_type_t", nm,
                         (int)p->type);
    }
}

/* 1 when v could be a parsed value of p. */
static int dpt__env_param_value_ok(const dpt_env_param_t *p, const dpt_env_value_t *v)
{
    switch (p->type) {
    case DPT_ENV_PARAM_INT: return (double)v->i >= p->min && (double)v->i <= p->max;
    case DPT_ENV_PARAM_FLOAT: return isfinite(v->f) && v->f >= p->min && v->f <= p->max;
    case DPT_ENV_PARAM_BOOL: return v->i == 0 || v->i == 1;
    case DPT_ENV_PARAM_STRING: return v->s != NULL;
    default: return 0;
    }
}

int dpt__env_params_check(const dpt_env_class_t *cls)
{
    const char *nm = cls->name;
    size_t np = cls->num_params;
    if (np > DPT_ENV_PARAMS_LIMIT)
        return dpt_error(DPT_EINVAL, "env class \"%s\": num_params is %zu, at most %d", nm, np,
                         DPT_ENV_PARAMS_LIMIT);
    if (np && !cls->params)
        return dpt_error(DPT_EINVAL, "env class \"%s\": num_params is %zu but params is NULL", nm,
                         np);
    for (size_t j = 0; j < np; j++) {
        const dpt_env_param_t *p = &cls->params[j];
        if (!p->name || !dpt__env_param_name_ok(p->name))
            return dpt_error(DPT_EINVAL,
                             "env class \"%s\": parameter #%zu needs a name of 1..%d letters, "
                             "digits or '_'",
                             nm, j, DPT__PARAM_NAME_CAP - 1);
        /* Quadratic, over at most DPT_ENV_PARAMS_LIMIT declared names. */
        for (size_t i = 0; i < j; i++)
            if (strcmp(cls->params[i].name, p->name) == 0)
                return dpt_error(DPT_EINVAL, "env class \"%s\": parameter %s is declared twice", nm,
                                 p->name);
        if ((unsigned)p->type >= DPT_ENV_PARAM_TYPE_COUNT)
            return dpt_error(DPT_EINVAL,
                             "env class \"%s\": parameter %s has type %d, not a "
                             "dpt_env_param_type_t",
                             nm, p->name, (int)p->type);
        int ranged = p->type == DPT_ENV_PARAM_INT || p->type == DPT_ENV_PARAM_FLOAT;
        if (ranged && (!isfinite(p->min) || !isfinite(p->max) || !(p->min <= p->max)))
            return dpt_error(DPT_EINVAL,
                             "env class \"%s\": parameter %s has the range [%g, %g]; it must be "
                             "finite with min <= max",
                             nm, p->name, p->min, p->max);
        if (!p->def)
            return dpt_error(DPT_EINVAL, "env class \"%s\": parameter %s has no default", nm,
                             p->name);
        dpt_env_value_t v;
        if (dpt_env_param_parse(p, p->def, &v) != 0)
            return dpt_error(DPT_EINVAL, "env class \"%s\": the default of parameter %s: %s", nm,
                             p->name, dpt_last_error());
        if (cls->values && !dpt__env_param_value_ok(p, &cls->values[j]))
            return dpt_error(DPT_EINVAL,
                             "env class \"%s\": values[%zu] is not a valid %s value of "
                             "parameter %s",
                             nm, j, dpt_env_param_type_name(p->type), p->name);
    }
    return DPT_OK;
}

void dpt__env_param_list(const dpt_env_class_t *cls, char *buf, size_t size)
{
    if (size == 0)
        return;
    if (cls->num_params == 0) {
        snprintf(buf, size, "it takes no parameters");
        return;
    }
    size_t len = 0;
    for (size_t j = 0; j < cls->num_params; j++) {
        int w = snprintf(buf + len, size - len, "%s%s",
                         j ? ", " : "its parameters: ", cls->params[j].name);
        if (w < 0 || (size_t)w >= size - len) {
            /* Cut: end with "..." when there is room for it. */
            if (size >= 4)
                memcpy(buf + size - 4, "...", 4);
            return;
        }
        len += (size_t)w;
    }
}

uint32_t dpt__env_values_digest(const dpt_env_class_t *cls, const dpt_env_value_t *values)
{
    if (cls->num_params == 0 || !values)
        return 0;
    uint64_t h = DPT_FNV1A64_INIT;
    for (size_t j = 0; j < cls->num_params; j++) {
        const dpt_env_param_t *p = &cls->params[j];
        const dpt_env_value_t *v = &values[j];
        /* The canonical text of the value, so "03" and "3" agree. */
        char num[64];
        const char *text = num;
        switch (p->type) {
        case DPT_ENV_PARAM_INT: snprintf(num, sizeof num, "%" PRId64, v->i); break;
        case DPT_ENV_PARAM_FLOAT: snprintf(num, sizeof num, "%.17g", v->f); break;
        case DPT_ENV_PARAM_BOOL: text = v->i ? "1" : "0"; break;
        default: text = v->s ? v->s : ""; break;
        }
        h = dpt_fnv1a64(h, p->name, strlen(p->name));
        h = dpt_fnv1a64(h, "=", 1);
        h = dpt_fnv1a64(h, text, strlen(text));
        h = dpt_fnv1a64(h, "\n", 1);
    }
    uint32_t d = (uint32_t)(h ^ (h >> 32));
    return d ? d : 1u;
}

typedef struct dpt__env_owned {
    dpt_env_class_t cls; /* first: the pointer handed out is the allocation's */
    dpt_env_value_t values[];
} dpt__env_owned_t;

int dpt__env_configure(dpt_env_class_t **out, const dpt_env_class_t *cls, const char *const *names,
                       const char *const *texts, size_t n)
{
    *out = NULL;
    const char *nm = cls->name;
    const size_t np = cls->num_params;
    if (n && (!names || !texts))
        return dpt_error(DPT_EINVAL, "env \"%s\": %zu parameters but no names or values", nm, n);
    /* pick[j]: the text parameter j takes (given, else its default). */
    const char **pick = np ? calloc(np, sizeof *pick) : NULL;
    if (np && !pick)
        return dpt_error(DPT_ENOMEM, "env \"%s\": cannot allocate %zu parameters", nm, np);
    dpt__env_owned_t *o = NULL;
    int rc = DPT_OK;
    for (size_t i = 0; i < n; i++) {
        if (!names[i] || !texts[i]) {
            rc = dpt_error(DPT_EINVAL, "env \"%s\": parameter #%zu has no name or no value", nm, i);
            goto done;
        }
        const dpt_env_param_t *p = dpt_env_param_find(cls, names[i]);
        if (!p) {
            char list[256];
            dpt__env_param_list(cls, list, sizeof list);
            rc = dpt_error(DPT_EINVAL, "env \"%s\" has no parameter \"%.63s\" (%s)", nm, names[i],
                           list);
            goto done;
        }
        size_t j = (size_t)(p - cls->params);
        if (pick[j]) {
            rc = dpt_error(DPT_EINVAL, "env \"%s\": parameter %s is given twice", nm, p->name);
            goto done;
        }
        pick[j] = texts[i];
    }
    size_t bytes = 0, text_bytes = 0;
    for (size_t j = 0; j < np; j++) {
        if (!pick[j])
            pick[j] = cls->params[j].def;
        size_t len = strlen(pick[j]) + 1;
        if (len > SIZE_MAX - text_bytes) {
            rc = dpt_error(DPT_EOVERFLOW, "env \"%s\": the parameter values overflow", nm);
            goto done;
        }
        text_bytes += len;
    }
    if (dpt_mul_size(np, sizeof(dpt_env_value_t), &bytes) != 0 ||
        bytes > SIZE_MAX - sizeof(dpt__env_owned_t) - text_bytes) {
        rc = dpt_error(DPT_EOVERFLOW, "env \"%s\": the parameter values overflow", nm);
        goto done;
    }
    bytes += sizeof(dpt__env_owned_t) + text_bytes;
    if (!(o = calloc(1, bytes))) {
        rc = dpt_error(DPT_ENOMEM, "env \"%s\": cannot allocate its configured class", nm);
        goto done;
    }
    char *text = (char *)(o->values + np);
    for (size_t j = 0; j < np; j++) {
        size_t len = strlen(pick[j]) + 1;
        memcpy(text, pick[j], len);
        if (dpt_env_param_parse(&cls->params[j], text, &o->values[j]) != 0) {
            rc = dpt_error(DPT_EINVAL, "env \"%s\": %s", nm, dpt_last_error());
            goto done;
        }
        text += len;
    }
    o->cls = *cls;
    /* Never NULL, even without parameters: a class with values is a
     * configured one (dpt_env_class_check does not configure it again). */
    o->cls.values = o->values;
    if (cls->configure) {
        dpt_env_class_t c = o->cls;
        char why[256] = "";
        int refused = cls->configure(&c, o->values, why, sizeof why);
        why[sizeof why - 1] = '\0';
        if (refused) {
            rc = dpt_error(DPT_EINVAL, "env \"%s\" refuses these parameters: %s", nm,
                           why[0] ? why : "(no reason given)");
            goto done;
        }
        /* Only what configure may change is taken from its copy. */
        o->cls.obs_dim = c.obs_dim;
        o->cls.obs_shape = c.obs_shape;
        o->cls.action_kind = c.action_kind;
        o->cls.num_actions = c.num_actions;
        o->cls.action_dim = c.action_dim;
        o->cls.action_low = c.action_low;
        o->cls.action_high = c.action_high;
        o->cls.max_episode_steps = c.max_episode_steps;
        o->cls.reward_threshold = c.reward_threshold;
        o->cls.state_size = c.state_size;
    }
    if (dpt_env_class_check(&o->cls) != 0) {
        rc = dpt_error(DPT_EINVAL, "env \"%s\" as configured: %s", nm, dpt_last_error());
        goto done;
    }
    *out = &o->cls;
    o = NULL;
done:
    free(o);
    free(pick);
    return rc;
}

int dpt_env_class_create(dpt_env_class_t **out, const dpt_env_class_t *cls,
                         const char *const *names, const char *const *texts, size_t n)
{
    if (!out)
        return dpt_error(DPT_EINVAL, "dpt_env_class_create: output pointer is NULL");
    *out = NULL;
    int rc = dpt_env_class_check(cls);
    if (rc)
        return rc;
    return dpt__env_configure(out, cls, names, texts, n);
}

void dpt_env_class_destroy(dpt_env_class_t *cls)
{
    free(cls);
}
