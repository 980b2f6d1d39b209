/* The env contract, checked by running an env (dpt_env_check_contract; the
 * `dpt check-env` command). */
#include "dpt/checkpoint.h"
#include "dpt/env.h"
#include "dpt/stats.h"
#include "dpt/status.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dpt__envcheck_rule_names[DPT_ENV_RULE_COUNT] = {
#define DPT__RULE_NAME(sym, name, text) name,
    DPT_ENV_RULE_LIST(DPT__RULE_NAME)
#undef DPT__RULE_NAME
};
static const char *const dpt__envcheck_rule_texts[DPT_ENV_RULE_COUNT] = {
#define DPT__RULE_TEXT(sym, name, text) text,
    DPT_ENV_RULE_LIST(DPT__RULE_TEXT)
#undef DPT__RULE_TEXT
};

const char *dpt_env_rule_name(dpt_env_rule_t rule)
{
    return (unsigned)rule < DPT_ENV_RULE_COUNT ? dpt__envcheck_rule_names[rule] : "?";
}

const char *dpt_env_rule_text(dpt_env_rule_t rule)
{
    return (unsigned)rule < DPT_ENV_RULE_COUNT ? dpt__envcheck_rule_texts[rule] : "?";
}

/* A value no env writes by chance, and the guard bytes around buffers. */
#define DPT__UNWRITTEN (-1.2345678e33f)
#define DPT__GUARD 64
#define DPT__GUARD_BYTE 0xA5

/* Records the first violation of a rule. */
static void dpt__envcheck_violate(dpt_env_check_report_t *r, dpt_env_rule_t rule, uint64_t step,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void dpt__envcheck_violate(dpt_env_check_report_t *r, dpt_env_rule_t rule, uint64_t step,
                                  const char *fmt, ...)
{
    if (r->violated[rule])
        return;
    r->violated[rule] = 1;
    dpt_env_violation_t *v = &r->violations[r->count++];
    v->rule = rule;
    v->step = step;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->message, sizeof v->message, fmt, ap);
    va_end(ap);
}

/* One env run directly through the class, inside guarded buffers. */
typedef struct dpt__probe {
    const dpt_env_class_t *cls;
    unsigned char *state; /* DPT__GUARD | state_size | DPT__GUARD */
    float *obs;           /* obs_dim + DPT__GUARD floats */
    void *action;
    dpt_rng_t rng, act_rng;
    uint64_t t;     /* steps of this episode */
    uint64_t steps; /* steps in all */
} dpt__probe_t;

static int dpt__envcheck_probe_init(dpt__probe_t *p, const dpt_env_class_t *cls, uint64_t seed)
{
    memset(p, 0, sizeof p[0]);
    p->cls = cls;
    size_t adim = cls->action_kind == DPT_ACTION_BOX ? cls->action_dim : 1;
    p->state = malloc(cls->state_size + 2 * DPT__GUARD);
    p->obs = malloc((cls->obs_dim + DPT__GUARD) * sizeof(float));
    p->action = malloc(adim * sizeof(float) + sizeof(int32_t));
    if (!p->state || !p->obs || !p->action)
        return dpt_error(DPT_ENOMEM, "env \"%s\": check: out of memory", cls->name);
    memset(p->state, DPT__GUARD_BYTE, cls->state_size + 2 * DPT__GUARD);
    memset(p->state + DPT__GUARD, 0, cls->state_size);
    dpt_rng_init(&p->rng, seed, 0x43484b31u, 0, DPT_RNG_ENV);
    dpt_rng_init(&p->act_rng, seed, 0x43484b32u, 0, DPT_RNG_ENV);
    if (cls->init)
        cls->init(p->state + DPT__GUARD, cls->values);
    return DPT_OK;
}

static void dpt__envcheck_probe_free(dpt__probe_t *p)
{
    free(p->state);
    free(p->obs);
    free(p->action);
}

/* Checks what a reset or step wrote; `what` names the call. */
static void dpt__envcheck_probe_inspect(dpt__probe_t *p, dpt_env_check_report_t *r,
                                        const char *what, const float *reward)
{
    const dpt_env_class_t *cls = p->cls;
    for (size_t k = 0; k < cls->obs_dim; k++)
        if (p->obs[k] == DPT__UNWRITTEN) {
            dpt__envcheck_violate(r, DPT_ENV_RULE_WRITES_OBS, p->steps,
                                  "%s did not write observation[%zu] (of %zu)", what, k,
                                  cls->obs_dim);
            break;
        }
    for (size_t k = 0; k < DPT__GUARD; k++)
        if (p->obs[cls->obs_dim + k] != DPT__UNWRITTEN) {
            dpt__envcheck_violate(r, DPT_ENV_RULE_IN_BOUNDS, p->steps,
                                  "%s wrote observation[%zu], past its %zu values", what,
                                  cls->obs_dim + k, cls->obs_dim);
            break;
        }
    const unsigned char *s = p->state;
    for (size_t k = 0; k < DPT__GUARD; k++)
        if (s[k] != DPT__GUARD_BYTE || s[DPT__GUARD + cls->state_size + k] != DPT__GUARD_BYTE) {
            dpt__envcheck_violate(r, DPT_ENV_RULE_IN_BOUNDS, p->steps,
                                  "%s wrote outside its state block of %zu bytes", what,
                                  cls->state_size);
            break;
        }
    for (size_t k = 0; k < cls->obs_dim; k++)
        if (!isfinite(p->obs[k]) && p->obs[k] != DPT__UNWRITTEN) {
            dpt__envcheck_violate(r, DPT_ENV_RULE_FINITE, p->steps, "%s gave observation[%zu] = %g",
                                  what, k, (double)p->obs[k]);
            break;
        }
    if (reward && !isfinite(*reward))
        dpt__envcheck_violate(r, DPT_ENV_RULE_FINITE, p->steps, "%s gave reward %g", what,
                              (double)*reward);
}

static void dpt__envcheck_probe_reset(dpt__probe_t *p, dpt_env_check_report_t *r)
{
    for (size_t k = 0; k < p->cls->obs_dim + DPT__GUARD; k++)
        p->obs[k] = DPT__UNWRITTEN;
    p->cls->reset(p->state + DPT__GUARD, &p->rng, p->obs);
    p->t = 0;
    dpt__envcheck_probe_inspect(p, r, "reset", NULL);
}

/* One step with a random action (reset after an episode's end); its
 * reward and terminated flag. */
static void dpt__envcheck_probe_step(dpt__probe_t *p, dpt_env_check_report_t *r, float *reward,
                                     int *term)
{
    const dpt_env_class_t *cls = p->cls;
    if (cls->action_kind == DPT_ACTION_DISCRETE) {
        int32_t a = (int32_t)dpt_rng_below(&p->act_rng, (uint32_t)cls->num_actions);
        memcpy(p->action, &a, sizeof a);
    } else {
        float *a = p->action;
        for (size_t k = 0; k < cls->action_dim; k++) {
            float u = dpt_rng_uniform(&p->act_rng);
            a[k] = cls->action_low[k] + u * (cls->action_high[k] - cls->action_low[k]);
        }
    }
    for (size_t k = 0; k < cls->obs_dim + DPT__GUARD; k++)
        p->obs[k] = DPT__UNWRITTEN;
    *reward = 0.0f;
    *term = 0;
    cls->step(p->state + DPT__GUARD, p->action, &p->rng, p->obs, reward, term);
    p->steps++;
    p->t++;
    dpt__envcheck_probe_inspect(p, r, "step", reward);
    if (*term || (cls->max_episode_steps && p->t >= cls->max_episode_steps)) {
        r->episodes++;
        dpt__envcheck_probe_reset(p, r);
    }
}

/* A fingerprint of what a step gave. */
static uint64_t dpt__envcheck_step_hash(const dpt__probe_t *p, float reward, int term)
{
    uint64_t h = dpt_fnv1a64(DPT_FNV1A64_INIT, p->obs, p->cls->obs_dim * sizeof(float));
    h = dpt_fnv1a64(h, &reward, sizeof reward);
    return dpt_fnv1a64(h, &term, sizeof term);
}

int dpt_env_check_contract(const dpt_env_class_t *cls, uint64_t seed, uint64_t steps,
                           dpt_env_check_report_t *out)
{
    if (!cls || !out || steps == 0)
        return dpt_error(DPT_EINVAL, "dpt_env_check_contract: needs a class, a report and steps");
    memset(out, 0, sizeof *out);
    if (dpt_env_class_check(cls) != 0) {
        dpt__envcheck_violate(out, DPT_ENV_RULE_CLASS, 0, "%s", dpt_last_error());
        return DPT_OK;
    }
    uint64_t *trace = malloc(steps * sizeof *trace);
    if (!trace)
        return dpt_error(DPT_ENOMEM, "env \"%s\": check: out of memory", cls->name);
    dpt__probe_t a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    int rc = dpt__envcheck_probe_init(&a, cls, seed);
    if (!rc)
        rc = dpt__envcheck_probe_init(&b, cls, seed);
    unsigned char *snap = rc ? NULL : malloc(cls->state_size + 1);
    if (!rc && !snap)
        rc = dpt_error(DPT_ENOMEM, "env \"%s\": check: out of memory", cls->name);
    if (rc)
        goto out;

    /* Run A: every call inspected; a copy of its state taken halfway. */
    uint64_t half = steps / 2, snap_t = 0;
    dpt_rng_t snap_rng, snap_act;
    float rew;
    int term;
    dpt__envcheck_probe_reset(&a, out);
    for (uint64_t i = 0; i < steps; i++) {
        if (i == half) {
            memcpy(snap, a.state + DPT__GUARD, cls->state_size);
            snap_rng = a.rng;
            snap_act = a.act_rng;
            snap_t = a.t;
        }
        dpt__envcheck_probe_step(&a, out, &rew, &term);
        trace[i] = dpt__envcheck_step_hash(&a, rew, term);
    }
    out->steps = steps;

    /* Run B from the same seed: the same episodes, step for step. */
    dpt_env_check_report_t quiet;
    memset(&quiet, 0, sizeof quiet);
    dpt__envcheck_probe_reset(&b, &quiet);
    for (uint64_t i = 0; i < steps; i++) {
        dpt__envcheck_probe_step(&b, &quiet, &rew, &term);
        if (dpt__envcheck_step_hash(&b, rew, term) != trace[i]) {
            dpt__envcheck_violate(
                out, DPT_ENV_RULE_DETERMINISM, i + 1,
                "a second run with the same seed and actions differs at step %llu "
                "(state outside the seeded rng: rand(), time, a global?)",
                (unsigned long long)(i + 1));
            break;
        }
    }

    /* From the copy of A's state halfway: the rest of A's steps. */
    if (!out->violated[DPT_ENV_RULE_DETERMINISM] && half < steps) {
        memcpy(b.state + DPT__GUARD, snap, cls->state_size);
        b.rng = snap_rng;
        b.act_rng = snap_act;
        b.t = snap_t;
        for (uint64_t i = half; i < steps; i++) {
            dpt__envcheck_probe_step(&b, &quiet, &rew, &term);
            if (dpt__envcheck_step_hash(&b, rew, term) != trace[i]) {
                dpt__envcheck_violate(
                    out, DPT_ENV_RULE_STATE, i + 1,
                    "a copy of the state block at step %llu continues differently "
                    "from step %llu (some state is kept outside the block)",
                    (unsigned long long)half, (unsigned long long)(i + 1));
                break;
            }
        }
    }

    /* Speed: a runner of 8 envs (its own checks included), about 0.2 s. */
    if (out->count == 0) {
        dpt_vecenv_t *v;
        size_t n = 8, od = cls->obs_dim;
        size_t ad = cls->action_kind == DPT_ACTION_BOX ? cls->action_dim : 1;
        if ((rc = dpt_vecenv_create(&v, cls, n, seed, 0)) != 0)
            goto out;
        float *o = malloc(n * od * sizeof *o), *rw = malloc(n * sizeof *rw);
        unsigned char *flags = malloc(2 * n);
        void *acts = malloc(n * ad * sizeof(float));
        if (!o || !rw || !flags || !acts) {
            rc = dpt_error(DPT_ENOMEM, "env \"%s\": check: out of memory", cls->name);
        } else {
            memset(acts, 0, n * ad * sizeof(float)); /* action 0; box: 0 clipped */
            dpt_vecenv_reset(v, o);
            double t0 = dpt_now(), t = 0.0;
            uint64_t done = 0;
            while (!rc && (t = dpt_now() - t0) < 0.2) {
                for (int k = 0; !rc && k < 64; k++)
                    rc = dpt_vecenv_step(v, acts, o, rw, flags, flags + n, NULL);
                done += 64 * n;
            }
            if (rc) {
                dpt__envcheck_violate(out, DPT_ENV_RULE_FINITE, done, "%s", dpt_last_error());
                rc = DPT_OK;
            }
            out->steps_per_s = t > 0.0 ? (double)done / t : 0.0;
        }
        free(o);
        free(rw);
        free(flags);
        free(acts);
        dpt_vecenv_destroy(v);
    }
out:
    free(snap);
    free(trace);
    dpt__envcheck_probe_free(&a);
    dpt__envcheck_probe_free(&b);
    return rc;
}
