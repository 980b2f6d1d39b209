/* Optimizers over flat arenas, global-norm clipping, learning-rate schedules. */
#include "dpt/optim.h"
#include "dpt/arena.h"
#include "dpt/status.h"
#include "core/clones.h"
#include "optim/optim_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct dpt_optim {
    dpt_optim_config_t cfg;
    size_t count;
    int nslots;
    dpt_arena_t slot[2];
    uint64_t t;
    /* The marked variables (dpt_optim_set_no_grad, dpt_optim_set_running):
     * nskip disjoint [lo, hi) ranges in increasing order (touching ranges of
     * one kind merged); run[r] is 1 for a range of running statistics, 0 for
     * one without a gradient. skip_count and run_count: their floats. The
     * marks per variable (nmarked entries of the table last given) are kept
     * to rebuild the ranges when either kind changes. */
    size_t (*skip)[2];
    unsigned char *run;
    size_t nskip, skip_count, run_count;
    size_t (*var_range)[2];
    unsigned char *var_mark; /* bit 0: no gradient, bit 1: running */
    size_t nmarked;
};

static const struct {
    const char *name;
    int slots;
} dpt__optim_info[DPT_OPTIM_COUNT] = {
#define DPT__OPTIM_INFO(sym, name, slots) [sym] = {name, slots},
    DPT_OPTIM_LIST(DPT__OPTIM_INFO)
#undef DPT__OPTIM_INFO
};

static const char *const dpt__schedule_names[DPT_SCHEDULE_COUNT] = {
#define DPT__SCHED_NAME(sym, name) [sym] = name,
    DPT_SCHEDULE_LIST(DPT__SCHED_NAME)
#undef DPT__SCHED_NAME
};

dpt_optim_config_t dpt_optim_defaults(dpt_optim_kind_t kind)
{
    dpt_optim_config_t c = {
        .kind = kind,
        .momentum = 0.9f,
        .nesterov = 0,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = 0.0f,
    };
    return c;
}

const char *dpt_optim_kind_name(dpt_optim_kind_t kind)
{
    return (unsigned)kind < DPT_OPTIM_COUNT ? dpt__optim_info[kind].name : "unknown";
}

int dpt_optim_kind_parse(const char *name, dpt_optim_kind_t *kind)
{
    for (int i = 0; i < DPT_OPTIM_COUNT; i++)
        if (strcmp(name, dpt__optim_info[i].name) == 0) {
            *kind = (dpt_optim_kind_t)i;
            return DPT_OK;
        }
    return dpt_error(DPT_EINVAL, "unknown optimizer \"%s\" (known: sgd, momentum, adam, adamw)",
                     name);
}

int dpt_optim_create(dpt_optim_t **out, const dpt_optim_config_t *cfg, size_t count)
{
    *out = NULL;
    if ((unsigned)cfg->kind >= DPT_OPTIM_COUNT)
        return dpt_error(DPT_EINVAL, "optimizer: unknown kind %d", (int)cfg->kind);
    const char *name = dpt__optim_info[cfg->kind].name;
    if (!(cfg->weight_decay >= 0.0f) || !isfinite(cfg->weight_decay))
        return dpt_error(DPT_EINVAL, "optimizer %s: weight decay %g must be >= 0", name,
                         (double)cfg->weight_decay);
    if (cfg->kind == DPT_OPTIM_MOMENTUM && !(cfg->momentum >= 0.0f && cfg->momentum < 1.0f))
        return dpt_error(DPT_EINVAL, "optimizer momentum: momentum %g is outside [0, 1)",
                         (double)cfg->momentum);
    if (cfg->nesterov && cfg->kind != DPT_OPTIM_MOMENTUM)
        return dpt_error(DPT_EINVAL, "optimizer %s: nesterov needs the momentum optimizer", name);
    if (cfg->kind == DPT_OPTIM_ADAM || cfg->kind == DPT_OPTIM_ADAMW) {
        if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f) ||
            !(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f))
            return dpt_error(DPT_EINVAL, "optimizer %s: betas (%g, %g) must be in [0, 1)", name,
                             (double)cfg->beta1, (double)cfg->beta2);
        if (!(cfg->eps > 0.0f))
            return dpt_error(DPT_EINVAL, "optimizer %s: eps %g must be > 0", name,
                             (double)cfg->eps);
    }
    dpt_optim_t *o = calloc(1, sizeof *o);
    if (!o)
        return dpt_error(DPT_ENOMEM, "optimizer: cannot allocate");
    o->cfg = *cfg;
    o->count = count;
    o->nslots = dpt__optim_info[cfg->kind].slots;
    for (int s = 0; s < o->nslots; s++) {
        int rc = dpt_arena_init(&o->slot[s], count);
        if (rc) {
            dpt_optim_destroy(o);
            return rc;
        }
    }
    *out = o;
    return DPT_OK;
}

void dpt_optim_destroy(dpt_optim_t *o)
{
    if (!o)
        return;
    dpt_arena_deinit(&o->slot[0]);
    dpt_arena_deinit(&o->slot[1]);
    free(o->skip);
    free(o->run);
    free(o->var_range);
    free(o->var_mark);
    free(o);
}

/* Adam's loop over [lo, hi), compiled per vector width (core/clones.h):
 * elementwise, the same operations in every clone. */
DPT__CLONES
static void dpt__adam_range(const float *p, float *out, const float *g, float *m, float *v,
                            size_t lo, size_t hi, dpt__adam_coef_t k, float s)
{
    for (size_t i = lo; i < hi; i++)
        out[i] = dpt__adam_elem(p[i], g[i] * s, &m[i], &v[i], &k);
}

/* The rule on [lo, hi), every element (no marks looked at). */
static void dpt__optim_apply(dpt_optim_t *o, const float *p, float *out, const float *g, size_t lo,
                             size_t hi, uint64_t t, float lr, float s)
{
    const dpt_optim_config_t *c = &o->cfg;
    float wd = c->weight_decay;
    switch (c->kind) {
    case DPT_OPTIM_SGD:
        for (size_t i = lo; i < hi; i++)
            out[i] = dpt__sgd_elem(p[i], g[i] * s, lr, wd);
        break;
    case DPT_OPTIM_MOMENTUM: {
        float *v = o->slot[0].data, mu = c->momentum;
        int nesterov = c->nesterov;
        for (size_t i = lo; i < hi; i++)
            out[i] = dpt__momentum_elem(p[i], g[i] * s, &v[i], mu, lr, wd, nesterov);
        break;
    }
    case DPT_OPTIM_ADAM:
    case DPT_OPTIM_ADAMW: {
        float *m = o->slot[0].data, *v = o->slot[1].data;
        dpt__adam_range(p, out, g, m, v, lo, hi, dpt__adam_coef(c, t, lr), s);
        break;
    }
    default: break;
    }
}

/* The first marked range that ends after i (o->nskip when none). */
static size_t dpt__optim_skip_from(const dpt_optim_t *o, size_t i)
{
    size_t a = 0, b = o->nskip;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (o->skip[mid][1] <= i)
            a = mid + 1;
        else
            b = mid;
    }
    return a;
}

void dpt__optim_update_scaled(dpt_optim_t *o, const float *p, float *out, const float *g, size_t lo,
                              size_t hi, uint64_t t, float lr, float s)
{
    if (hi > o->count)
        hi = o->count;
    if (lo >= hi)
        return;
    /* The unmarked runs get the rule, each element as in one whole pass
     * (the rules are elementwise); the variables without a gradient stay as
     * they are, and the running statistics take their update as it is
     * (p + g: not scaled, no learning rate, no decay, no slots). */
    size_t at = lo;
    for (size_t r = o->nskip ? dpt__optim_skip_from(o, lo) : 0; r < o->nskip && at < hi; r++) {
        size_t a = o->skip[r][0] > at ? o->skip[r][0] : at;
        size_t b = o->skip[r][1] < hi ? o->skip[r][1] : hi;
        if (a >= hi)
            break;
        if (at < a)
            dpt__optim_apply(o, p, out, g, at, a, t, lr, s);
        if (o->run[r])
            for (size_t i = a; i < b; i++)
                out[i] = p[i] + g[i];
        else if (out != p)
            memcpy(out + a, p + a, (b - a) * sizeof *out);
        at = b;
    }
    if (at < hi)
        dpt__optim_apply(o, p, out, g, at, hi, t, lr, s);
}

/* The ranges from the marks per variable: a variable both without a
 * gradient and running is left alone (no gradient wins). */
static int dpt__optim_rebuild(dpt_optim_t *o)
{
    size_t n = 0, count = 0, rcount = 0;
    for (size_t i = 0; i < o->nmarked; i++)
        n += o->var_mark[i] != 0 && o->var_range[i][1] > o->var_range[i][0];
    size_t(*skip)[2] = n ? malloc(n * sizeof *skip) : NULL;
    unsigned char *run = n ? malloc(n) : NULL;
    if (n && (!skip || !run)) {
        free(skip);
        free(run);
        return dpt_error(DPT_ENOMEM, "optimizer: cannot allocate %zu marks", n);
    }
    n = 0;
    /* Table order is offset order; touching ranges of one kind merge. */
    for (size_t i = 0; i < o->nmarked; i++) {
        size_t lo = o->var_range[i][0], hi = o->var_range[i][1];
        if (!o->var_mark[i] || hi == lo)
            continue;
        unsigned char kind = (o->var_mark[i] & 1u) ? 0 : 1;
        if (n && skip[n - 1][1] >= lo && run[n - 1] == kind) {
            skip[n - 1][1] = hi;
        } else {
            skip[n][0] = lo;
            skip[n][1] = hi;
            run[n++] = kind;
        }
    }
    for (size_t r = 0; r < n; r++) {
        count += skip[r][1] - skip[r][0];
        if (run[r])
            rcount += skip[r][1] - skip[r][0];
    }
    free(o->skip);
    free(o->run);
    o->skip = n ? skip : NULL;
    o->run = n ? run : NULL;
    if (!n) {
        free(skip);
        free(run);
    }
    o->nskip = n;
    o->skip_count = count - rcount;
    o->run_count = rcount;
    return DPT_OK;
}

/* Sets mark bit `bit` of every variable of `vars` flagged in `flags`
 * (NULL: clears that bit everywhere), then rebuilds the ranges. */
static int dpt__optim_mark(dpt_optim_t *o, const struct dpt_vartable *vars,
                           const unsigned char *flags, unsigned bit)
{
    if (flags && vars->total > o->count)
        return dpt_error(DPT_EINVAL,
                         "optimizer: a table of %zu floats marked on an optimizer of %zu",
                         vars->total, o->count);
    if (flags && o->nmarked && o->nmarked != vars->nvars)
        return dpt_error(DPT_EINVAL, "optimizer: a table of %zu variables marked after one of %zu",
                         vars->nvars, o->nmarked);
    if (flags && !o->nmarked && vars->nvars) {
        o->var_range = malloc(vars->nvars * sizeof *o->var_range);
        o->var_mark = calloc(vars->nvars, 1);
        if (!o->var_range || !o->var_mark) {
            free(o->var_range);
            free(o->var_mark);
            o->var_range = NULL;
            o->var_mark = NULL;
            return dpt_error(DPT_ENOMEM, "optimizer: cannot allocate %zu marks", vars->nvars);
        }
        o->nmarked = vars->nvars;
    }
    /* Undone when the rebuild fails: the earlier marks are kept. */
    unsigned char *old = o->nmarked ? malloc(o->nmarked) : NULL;
    if (o->nmarked && !old)
        return dpt_error(DPT_ENOMEM, "optimizer: cannot allocate %zu marks", o->nmarked);
    if (old)
        memcpy(old, o->var_mark, o->nmarked);
    for (size_t i = 0; i < o->nmarked; i++) {
        if (flags) {
            const dpt_var_t *v = &vars->vars[i];
            o->var_range[i][0] = v->offset;
            o->var_range[i][1] = v->offset + v->count;
        }
        o->var_mark[i] = (unsigned char)((o->var_mark[i] & ~bit) | (flags && flags[i] ? bit : 0u));
    }
    int rc = dpt__optim_rebuild(o);
    if (rc && old)
        memcpy(o->var_mark, old, o->nmarked);
    free(old);
    return rc;
}

int dpt_optim_set_no_grad(dpt_optim_t *o, const struct dpt_vartable *vars,
                          const unsigned char *no_grad)
{
    return dpt__optim_mark(o, vars, no_grad, 1u);
}

int dpt_optim_set_running(dpt_optim_t *o, const struct dpt_vartable *vars,
                          const unsigned char *running)
{
    return dpt__optim_mark(o, vars, running, 2u);
}

size_t dpt_optim_running_count(const dpt_optim_t *o)
{
    return o->run_count;
}

double dpt_optim_running_sumsq(const dpt_optim_t *o, const float *grads, size_t lo, size_t hi)
{
    double sq = 0.0;
    if (hi > o->count)
        hi = o->count;
    if (!o->run_count || lo >= hi)
        return 0.0;
    for (size_t r = dpt__optim_skip_from(o, lo); r < o->nskip; r++) {
        size_t a = o->skip[r][0] > lo ? o->skip[r][0] : lo;
        size_t b = o->skip[r][1] < hi ? o->skip[r][1] : hi;
        if (a >= hi)
            break;
        if (o->run[r])
            for (size_t i = a; i < b; i++)
                sq += (double)grads[i] * (double)grads[i];
    }
    return sq;
}

double dpt_optim_sumsq_less_running(const dpt_optim_t *o, double sumsq, const float *grads,
                                    size_t lo, size_t hi)
{
    /* A sum that is not finite stays as it is: the callers refuse a step
     * whose norm is not finite, and a NaN or an infinity anywhere in the
     * gradient (the running part included) must still do so; inf - inf
     * and the comparison below would turn it into 0. */
    if (!o->run_count || !isfinite(sumsq))
        return sumsq;
    double d = sumsq - dpt_optim_running_sumsq(o, grads, lo, hi);
    return d > 0.0 ? d : 0.0;
}

void dpt_optim_scale_running(const dpt_optim_t *o, float *grads, size_t lo, size_t hi, float f)
{
    if (hi > o->count)
        hi = o->count;
    if (f == 1.0f || lo >= hi || !o->run_count)
        return;
    for (size_t r = dpt__optim_skip_from(o, lo); r < o->nskip; r++) {
        size_t a = o->skip[r][0] > lo ? o->skip[r][0] : lo;
        size_t b = o->skip[r][1] < hi ? o->skip[r][1] : hi;
        if (a >= hi)
            break;
        if (o->run[r])
            dpt_vec_scale(grads + a, b - a, f);
    }
}

void dpt_optim_scale_grads(const dpt_optim_t *o, float *grads, size_t lo, size_t hi, float f)
{
    if (hi > o->count)
        hi = o->count;
    if (f == 1.0f || lo >= hi)
        return;
    size_t at = lo;
    for (size_t r = o->run_count ? dpt__optim_skip_from(o, lo) : o->nskip; r < o->nskip; r++) {
        size_t a = o->skip[r][0] > at ? o->skip[r][0] : at;
        size_t b = o->skip[r][1] < hi ? o->skip[r][1] : hi;
        if (a >= hi)
            break;
        if (!o->run[r])
            continue;
        if (at < a)
            dpt_vec_scale(grads + at, a - at, f);
        at = b;
    }
    if (at < hi)
        dpt_vec_scale(grads + at, hi - at, f);
}

int dpt_optim_no_grad(const dpt_optim_t *o, size_t i)
{
    size_t r = o->nskip ? dpt__optim_skip_from(o, i) : 0;
    return r < o->nskip && o->skip[r][0] <= i && !o->run[r];
}

int dpt_optim_running(const dpt_optim_t *o, size_t i)
{
    size_t r = o->nskip ? dpt__optim_skip_from(o, i) : 0;
    return r < o->nskip && o->skip[r][0] <= i && o->run[r];
}

size_t dpt_optim_no_grad_count(const dpt_optim_t *o)
{
    return o->skip_count;
}

void dpt_optim_zero_no_grad(const dpt_optim_t *o, float *grads, size_t lo, size_t hi)
{
    if (hi > o->count)
        hi = o->count;
    for (size_t r = o->nskip ? dpt__optim_skip_from(o, lo) : 0; r < o->nskip; r++) {
        size_t a = o->skip[r][0] > lo ? o->skip[r][0] : lo;
        size_t b = o->skip[r][1] < hi ? o->skip[r][1] : hi;
        if (a >= hi)
            break;
        if (!o->run[r] && a < b)
            memset(grads + a, 0, (b - a) * sizeof *grads);
    }
}

void dpt_optim_update_into(dpt_optim_t *o, const float *p, float *out, const float *g, size_t lo,
                           size_t hi, uint64_t t, float lr)
{
    /* g * 1 is g, bit for bit. */
    dpt__optim_update_scaled(o, p, out, g, lo, hi, t, lr, 1.0f);
}

void dpt_optim_update(dpt_optim_t *o, float *p, const float *g, size_t lo, size_t hi, uint64_t t,
                      float lr)
{
    dpt_optim_update_into(o, p, p, g, lo, hi, t, lr);
}

void dpt_optim_step(dpt_optim_t *o, float *params, const float *grads, float lr)
{
    o->t++;
    dpt_optim_update(o, params, grads, 0, o->count, o->t, lr);
}

uint64_t dpt_optim_get_t(const dpt_optim_t *o)
{
    return o->t;
}
void dpt_optim_set_t(dpt_optim_t *o, uint64_t t)
{
    o->t = t;
}
int dpt_optim_num_slots(const dpt_optim_t *o)
{
    return o->nslots;
}
size_t dpt_optim_count(const dpt_optim_t *o)
{
    return o->count;
}
const dpt_optim_config_t *dpt_optim_config(const dpt_optim_t *o)
{
    return &o->cfg;
}

const char *dpt_optim_slot_name(const dpt_optim_t *o, int slot)
{
    static const char *const adam[2] = {"m", "v"};
    if (slot < 0 || slot >= o->nslots)
        return NULL;
    return o->cfg.kind == DPT_OPTIM_MOMENTUM ? "momentum" : adam[slot];
}

float *dpt_optim_slot(dpt_optim_t *o, int slot)
{
    if (slot < 0 || slot >= o->nslots)
        return NULL;
    return o->slot[slot].data;
}

float dpt_clip_factor(double norm, double max_norm)
{
    if (max_norm > 0.0 && norm > max_norm)
        return (float)(max_norm / (norm + 1e-6));
    return 1.0f;
}

double dpt_clip_global_norm(float *grads, size_t n, double max_norm)
{
    double norm = sqrt(dpt_vec_sumsq(grads, n));
    float f = dpt_clip_factor(norm, max_norm);
    if (f != 1.0f)
        dpt_vec_scale(grads, n, f);
    return norm;
}

float dpt_schedule_lr(const dpt_schedule_t *s, uint64_t step)
{
    if (s->kind != DPT_SCHEDULE_LINEAR || s->total_steps == 0)
        return s->lr0;
    double frac = step >= s->total_steps ? 1.0 : (double)step / (double)s->total_steps;
    return (float)((double)s->lr0 + ((double)s->lr_end - (double)s->lr0) * frac);
}

const char *dpt_schedule_kind_name(dpt_schedule_kind_t kind)
{
    return (unsigned)kind < DPT_SCHEDULE_COUNT ? dpt__schedule_names[kind] : "unknown";
}

int dpt_schedule_kind_parse(const char *name, dpt_schedule_kind_t *kind)
{
    for (int i = 0; i < DPT_SCHEDULE_COUNT; i++)
        if (strcmp(name, dpt__schedule_names[i]) == 0) {
            *kind = (dpt_schedule_kind_t)i;
            return DPT_OK;
        }
    return dpt_error(DPT_EINVAL, "unknown learning-rate schedule \"%s\" (known: constant, linear)",
                     name);
}
