/*
 * The env registry, class checks and the vectorized runner (see dpt/env.h).
 *
 * Runner layout: one 64-byte-aligned allocation holds the runner struct and
 * every per-env array, each starting on its own 64-byte boundary:
 *
 *   [struct dpt_vecenv][states: n x stride][rngs: n][t: n][ret: n]
 *   [episode ring: 4096 returns, 4096 lengths][box action scratch: action_dim]
 *   [obs scratch: obs_dim]
 *
 * `stride` is state_size rounded up to 16 bytes (the alignment of any C
 * object), so each env's state block is correctly aligned for the user's
 * struct. Nothing is allocated after create: step and reset only write into
 * this block and into the caller's buffers.
 *
 * Invariants:
 *   - t[i] is the length of env i's current episode; after a step that ends
 *     an episode the env is reset at once, so 0 <= t[i] < max_episode_steps
 *     (when there is a limit) between calls.
 *   - ret[i] is the sum of the rewards of the current episode, in double,
 *     added in step order.
 *   - The episode ring holds `ep_count` finished episodes starting at
 *     `ep_head` (oldest first); a push into a full ring drops the oldest.
 */
#include "env_internal.h"
#include "vecenv_impl.h"
#include "dpt/checkpoint.h"
#include "dpt/arena.h"
#include "dpt/status.h"
#include "rollout.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- registry ------------------------------------------------------------ */

/* The built-in classes (defined in envs_classic.c, envs_memory.c and the
 * MinAtar files minatar_games.c and minatar_seaquest.c), in listing order. */
#define DPT_ENV_BUILTIN_LIST(X)           \
    X(dpt__env_cartpole_v1)               \
    X(dpt__env_acrobot_v1)                \
    X(dpt__env_mountaincar_v0)            \
    X(dpt__env_pendulum_v1)               \
    X(dpt__env_stateless_cartpole_v1)     \
    X(dpt__env_repeat_previous_v0)        \
    X(dpt__env_minatar_asterix_v0)        \
    X(dpt__env_minatar_asterix_v1)        \
    X(dpt__env_minatar_breakout_v0)       \
    X(dpt__env_minatar_breakout_v1)       \
    X(dpt__env_minatar_freeway_v0)        \
    X(dpt__env_minatar_freeway_v1)        \
    X(dpt__env_minatar_seaquest_v0)       \
    X(dpt__env_minatar_seaquest_v1)       \
    X(dpt__env_minatar_space_invaders_v0) \
    X(dpt__env_minatar_space_invaders_v1)

#define DPT__ENV_DECL(sym) extern const dpt_env_class_t sym;
DPT_ENV_BUILTIN_LIST(DPT__ENV_DECL)
#undef DPT__ENV_DECL

static const dpt_env_class_t *const dpt__env_builtins[] = {
#define DPT__ENV_PTR(sym) &sym,
    DPT_ENV_BUILTIN_LIST(DPT__ENV_PTR)
#undef DPT__ENV_PTR
};

#define DPT__ENV_NBUILTIN (sizeof dpt__env_builtins / sizeof dpt__env_builtins[0])

size_t dpt_env_count(void)
{
    return DPT__ENV_NBUILTIN;
}

const dpt_env_class_t *dpt_env_get(size_t i)
{
    return i < DPT__ENV_NBUILTIN ? dpt__env_builtins[i] : NULL;
}

int dpt__env_is_builtin(const char *name)
{
    for (size_t i = 0; name && i < DPT__ENV_NBUILTIN; i++)
        if (strcmp(dpt__env_builtins[i]->name, name) == 0)
            return 1;
    return 0;
}

/* 1 if cls runs a built-in class's code (the class itself or a configured
 * copy of it): its observations are finite by construction (tests/test_env.c,
 * the MinAtar exactness test), so the runner skips their finite check, which
 * costs as much as a MinAtar step. Rewards are still checked. */
static int dpt__env_builtin_code(const dpt_env_class_t *cls)
{
    for (size_t i = 0; i < DPT__ENV_NBUILTIN; i++)
        if (strcmp(dpt__env_builtins[i]->name, cls->name) == 0)
            return dpt__env_builtins[i]->step == cls->step &&
                   dpt__env_builtins[i]->reset == cls->reset;
    return 0;
}

const dpt_env_class_t *dpt_env_find(const char *name)
{
    if (name)
        for (size_t i = 0; i < DPT__ENV_NBUILTIN; i++)
            if (strcmp(dpt__env_builtins[i]->name, name) == 0)
                return dpt__env_builtins[i];
    char list[768];
    size_t len = 0;
    list[0] = '\0';
    for (size_t i = 0; i < DPT__ENV_NBUILTIN && len < sizeof list; i++) {
        int w = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                         dpt__env_builtins[i]->name);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    dpt_error(DPT_ENOENT, "unknown env \"%s\" (built-in envs: %s)", name ? name : "(null)", list);
    return NULL;
}

/* The first field configure may change that differs between a and b, or
 * NULL when they agree. */
static const char *dpt__env_differs(const dpt_env_class_t *a, const dpt_env_class_t *b)
{
    if (a->obs_dim != b->obs_dim)
        return "obs_dim";
    if (a->obs_shape.c != b->obs_shape.c || a->obs_shape.h != b->obs_shape.h ||
        a->obs_shape.w != b->obs_shape.w)
        return "obs_shape";
    if (a->action_kind != b->action_kind)
        return "action_kind";
    if (a->action_kind == DPT_ACTION_DISCRETE && a->num_actions != b->num_actions)
        return "num_actions";
    if (a->action_kind == DPT_ACTION_BOX) {
        if (a->action_dim != b->action_dim)
            return "action_dim";
        for (size_t k = 0; k < a->action_dim; k++)
            if (a->action_low[k] != b->action_low[k] || a->action_high[k] != b->action_high[k])
                return "action bounds";
    }
    if (a->max_episode_steps != b->max_episode_steps)
        return "max_episode_steps";
    if (a->reward_threshold != b->reward_threshold)
        return "reward_threshold";
    if (a->state_size != b->state_size)
        return "state_size";
    return NULL;
}

static int dpt__env_shape_is_flat(dpt_shape_t s)
{
    return s.c == 0 && s.h == 0 && s.w == 0;
}

/* obs_shape: all zero (flat), or an image of exactly obs_dim values. */
static int dpt__env_check_shape(const dpt_env_class_t *cls)
{
    dpt_shape_t s = cls->obs_shape;
    if (dpt__env_shape_is_flat(s))
        return DPT_OK;
    if (s.c == 0 || s.h == 0 || s.w == 0)
        return dpt_error(DPT_EINVAL,
                         "env class \"%s\": obs_shape [%zu, %zu, %zu] has a zero dimension (leave "
                         "all three 0 for a flat observation of obs_dim %zu)",
                         cls->name, s.c, s.h, s.w, cls->obs_dim);
    size_t hw, chw;
    if (dpt_mul_size(s.h, s.w, &hw) != 0 || dpt_mul_size(s.c, hw, &chw) != 0)
        return dpt_error(DPT_EINVAL,
                         "env class \"%s\": obs_shape [%zu, %zu, %zu] overflows; its obs_dim is "
                         "%zu",
                         cls->name, s.c, s.h, s.w, cls->obs_dim);
    if (chw != cls->obs_dim)
        return dpt_error(DPT_EINVAL,
                         "env class \"%s\": obs_shape [%zu, %zu, %zu] holds %zu values, its "
                         "obs_dim is %zu (c*h*w must equal obs_dim)",
                         cls->name, s.c, s.h, s.w, chw, cls->obs_dim);
    return DPT_OK;
}

dpt_shape_t dpt_env_obs_shape(const dpt_env_class_t *cls)
{
    if (!cls)
        return (dpt_shape_t){0, 0, 0};
    if (dpt__env_shape_is_flat(cls->obs_shape))
        return (dpt_shape_t){cls->obs_dim, 1, 1};
    return cls->obs_shape;
}

int dpt_env_class_check(const dpt_env_class_t *cls)
{
    if (!cls)
        return dpt_error(DPT_EINVAL, "env class is NULL");
    if (!cls->name || !cls->name[0])
        return dpt_error(DPT_EINVAL, "env class: name is missing");
    const char *nm = cls->name;
    if (strlen(nm) >= DPT__ENV_NAME_CAP)
        return dpt_error(DPT_EINVAL, "env class \"%.40s...\": name is longer than %d bytes", nm,
                         DPT__ENV_NAME_CAP - 1);
    if (cls->obs_dim < 1 || cls->obs_dim > DPT_ENV_DIM_LIMIT)
        return dpt_error(DPT_EINVAL, "env class \"%s\": obs_dim is %zu, must be 1..%zu", nm,
                         cls->obs_dim, DPT_ENV_DIM_LIMIT);
    int rc = dpt__env_check_shape(cls);
    if (rc)
        return rc;
    switch (cls->action_kind) {
    case DPT_ACTION_DISCRETE:
        if (cls->num_actions < 1 || cls->num_actions > (size_t)INT32_MAX)
            return dpt_error(DPT_EINVAL, "env class \"%s\": num_actions is %zu, must be 1..%d", nm,
                             cls->num_actions, INT32_MAX);
        break;
    case DPT_ACTION_BOX:
        if (cls->action_dim < 1 || cls->action_dim > DPT_ENV_DIM_LIMIT)
            return dpt_error(DPT_EINVAL, "env class \"%s\": action_dim is %zu, must be 1..%zu", nm,
                             cls->action_dim, DPT_ENV_DIM_LIMIT);
        if (!cls->action_low || !cls->action_high)
            return dpt_error(DPT_EINVAL,
                             "env class \"%s\": a box action needs action_low and action_high", nm);
        for (size_t k = 0; k < cls->action_dim; k++) {
            float lo = cls->action_low[k], hi = cls->action_high[k];
            if (!isfinite(lo) || !isfinite(hi) || !(lo <= hi))
                return dpt_error(DPT_EINVAL,
                                 "env class \"%s\": action bounds [%g, %g] of dimension %zu must "
                                 "be finite with action_low <= action_high",
                                 nm, (double)lo, (double)hi, k);
        }
        break;
    default:
        return dpt_error(DPT_EINVAL, "env class \"%s\": action_kind %d is not a dpt_action_kind_t",
                         nm, (int)cls->action_kind);
    }
    if (cls->state_size > ((size_t)1 << 30))
        return dpt_error(DPT_EINVAL, "env class \"%s\": state_size is %zu bytes, at most 1 GiB", nm,
                         cls->state_size);
    if (!isfinite(cls->reward_threshold))
        return dpt_error(DPT_EINVAL, "env class \"%s\": reward_threshold is not finite", nm);
    if (!cls->reset)
        return dpt_error(DPT_EINVAL, "env class \"%s\": reset is NULL", nm);
    if (!cls->step)
        return dpt_error(DPT_EINVAL, "env class \"%s\": step is NULL", nm);
    rc = dpt__env_params_check(cls);
    if (rc || !cls->configure || cls->values)
        return rc;
    /* A class as written runs with its defaults (dpt_vecenv_create gives
     * init the default values), so its dims must be configure's for them. */
    dpt_env_class_t *d;
    if ((rc = dpt__env_configure(&d, cls, NULL, NULL, 0)) != 0)
        return rc;
    const char *differs = dpt__env_differs(cls, d);
    dpt_env_class_destroy(d);
    if (differs)
        return dpt_error(DPT_EINVAL,
                         "env class \"%s\": as written it is not the env at its default "
                         "parameters: its %s differs from what configure makes of them",
                         nm, differs);
    return DPT_OK;
}

/* ---- the runner ----------------------------------------------------------- */

static size_t dpt__env_round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Adds `count` elements of `elem` bytes at the next aligned offset of *off;
 * returns the element's offset, or SIZE_MAX on overflow. */
static size_t dpt__env_carve(size_t *off, size_t count, size_t elem)
{
    size_t bytes;
    if (*off == SIZE_MAX || dpt_mul_size(count, elem, &bytes) != 0 ||
        bytes > SIZE_MAX - DPT__ALIGN - *off) {
        *off = SIZE_MAX;
        return SIZE_MAX;
    }
    size_t at = *off;
    *off = dpt__env_round_up(at + bytes, DPT__ALIGN);
    return at;
}

int dpt_vecenv_create(dpt_vecenv_t **out, const dpt_env_class_t *cls, size_t n, uint64_t seed,
                      uint32_t rank)
{
    if (!out)
        return dpt_error(DPT_EINVAL, "dpt_vecenv_create: output pointer is NULL");
    *out = NULL;
    int rc = dpt_env_class_check(cls);
    if (rc)
        return rc;
    if (n == 0)
        return dpt_error(DPT_EINVAL, "env \"%s\": the runner needs at least one env", cls->name);
    if (n > UINT32_MAX)
        return dpt_error(DPT_EINVAL, "env \"%s\": %zu envs, at most %u (RNG stream index)",
                         cls->name, n, UINT32_MAX);
    size_t stride = dpt__env_round_up(cls->state_size ? cls->state_size : 1, 16);
    size_t off = dpt__env_round_up(sizeof(struct dpt_vecenv), DPT__ALIGN);
    size_t o_states = dpt__env_carve(&off, n, stride);
    size_t o_rngs = dpt__env_carve(&off, n, sizeof(dpt_rng_t));
    size_t o_t = dpt__env_carve(&off, n, sizeof(uint32_t));
    size_t o_ret = dpt__env_carve(&off, n, sizeof(double));
    size_t o_epr = dpt__env_carve(&off, DPT__EP_CAP, sizeof(double));
    size_t o_epl = dpt__env_carve(&off, DPT__EP_CAP, sizeof(uint32_t));
    size_t act_dim = cls->action_kind == DPT_ACTION_BOX ? cls->action_dim : 1;
    size_t o_act = dpt__env_carve(&off, act_dim, sizeof(float));
    size_t o_obs = dpt__env_carve(&off, cls->obs_dim, sizeof(float));
    size_t per_env = DPT__STATE_PER_ENV + cls->state_size, sbytes;
    if (off == SIZE_MAX || dpt_mul_size(n, per_env, &sbytes) != 0 ||
        sbytes > SIZE_MAX - DPT__STATE_HEADER - DPT__STATE_TAIL)
        return dpt_error(DPT_EOVERFLOW,
                         "env \"%s\": %zu envs of %zu bytes overflow the address "
                         "space",
                         cls->name, n, cls->state_size);
    /* A class as written with parameters (or an init) runs at its defaults. */
    dpt_env_class_t *own = NULL;
    const dpt_env_value_t *values = cls->values;
    if (!values && (cls->num_params || cls->init)) {
        if ((rc = dpt__env_configure(&own, cls, NULL, NULL, 0)) != 0)
            return rc;
        values = own->values;
    }
    unsigned char *base = dpt_alloc_aligned(off);
    if (!base) {
        dpt_env_class_destroy(own);
        return dpt_error(DPT_ENOMEM, "env \"%s\": cannot allocate %zu bytes for %zu envs",
                         cls->name, off, n);
    }
    dpt_vecenv_t *v = (dpt_vecenv_t *)base;
    v->cls = cls;
    v->own = own;
    v->trusted = dpt__env_builtin_code(cls);
    v->values = values;
    v->values_digest = dpt__env_values_digest(cls, values);
    v->n = n;
    v->seed = seed;
    v->rank = rank;
    v->first = 0;
    v->stride = stride;
    v->states = base + o_states;
    v->rngs = (dpt_rng_t *)(base + o_rngs);
    v->t = (uint32_t *)(base + o_t);
    v->ret = (double *)(base + o_ret);
    v->ep_ret = (double *)(base + o_epr);
    v->ep_len = (uint32_t *)(base + o_epl);
    v->act = (float *)(base + o_act);
    v->obs_scratch = (float *)(base + o_obs);
    v->state_bytes = DPT__STATE_HEADER + sbytes + DPT__STATE_TAIL;
    for (size_t i = 0; i < n; i++)
        dpt_rng_init(&v->rngs[i], seed, rank, v->first + (uint32_t)i, DPT_RNG_ENV);
    /* The states are zeroed (dpt_alloc_aligned); init sees them so. */
    if (cls->init)
        for (size_t i = 0; i < n; i++)
            cls->init(v->states + i * stride, values);
    v->ext = dpt__ext_of(cls);
    if (v->ext && (rc = dpt__ext_bind(v->ext, n)) != 0) {
        v->ext = NULL;
        dpt_vecenv_destroy(v);
        return rc;
    }
    v->ext_fresh = v->ext != NULL;
    *out = v;
    return DPT_OK;
}

void dpt_vecenv_destroy(dpt_vecenv_t *v)
{
    if (!v)
        return;
    if (v->ext)
        dpt__ext_unbind(v->ext);
    dpt_env_class_destroy(v->own);
    dpt_free_aligned(v);
}

size_t dpt_vecenv_size(const dpt_vecenv_t *v)
{
    return v->n;
}

const dpt_env_class_t *dpt_vecenv_class(const dpt_vecenv_t *v)
{
    return v->cls;
}

void dpt__vecenv_set_first(dpt_vecenv_t *v, uint32_t first)
{
    v->rank = 0;
    v->first = first;
    for (size_t i = 0; i < v->n; i++) {
        dpt_rng_init(&v->rngs[i], v->seed, 0, first + (uint32_t)i, DPT_RNG_ENV);
        memset(v->states + i * v->stride, 0, v->stride);
        if (v->cls->init)
            v->cls->init(v->states + i * v->stride, v->values);
    }
}

void dpt_vecenv_reset(dpt_vecenv_t *v, float *obs)
{
    const dpt_env_class_t *cls = v->cls;
    if (v->ext) {
        /* The caller resets its envs when the runner next needs them
         * (dpt__vecenv_sync): nothing here may wait for it. */
        if (obs)
            memset(obs, 0, v->n * cls->obs_dim * sizeof(float));
        memset(v->t, 0, v->n * sizeof *v->t);
        memset(v->ret, 0, v->n * sizeof *v->ret);
        v->ext_fresh = 1;
        v->started = 1;
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        float *o = obs ? obs + i * cls->obs_dim : v->obs_scratch;
        cls->reset(v->states + i * v->stride, &v->rngs[i], o);
        v->t[i] = 0;
        v->ret[i] = 0.0;
    }
    v->started = 1;
}

static void dpt__env_ep_push(dpt_vecenv_t *v, double ret, uint32_t len)
{
    if (v->ep_count == DPT__EP_CAP) {
        v->ep_head = (v->ep_head + 1) & (DPT__EP_CAP - 1);
        v->ep_count--;
        v->ep_dropped++;
    }
    size_t at = (v->ep_head + v->ep_count) & (DPT__EP_CAP - 1);
    v->ep_ret[at] = ret;
    v->ep_len[at] = len;
    v->ep_count++;
    v->total_episodes++;
}

/* Checks the actions of the active envs (every env when active is NULL)
 * before any env steps, so a bad batch changes nothing. */
static int dpt__env_check_actions(const dpt_vecenv_t *v, size_t lo, size_t hi,
                                  const uint8_t *active, const void *actions)
{
    const dpt_env_class_t *cls = v->cls;
    if (cls->action_kind == DPT_ACTION_DISCRETE) {
        const int32_t *a = actions;
        uint32_t na = (uint32_t)cls->num_actions;
        uint32_t bad = 0;
        /* One unsigned compare catches negatives too; the loops have no early
         * exit so they vectorize, and the rare failure is located afterwards. */
        if (active)
            for (size_t i = lo; i < hi; i++)
                bad |= ((uint32_t)a[i] >= na) & (active[i] != 0);
        else
            for (size_t i = lo; i < hi; i++)
                bad |= (uint32_t)a[i] >= na;
        if (bad)
            for (size_t i = lo; i < hi; i++)
                if ((uint32_t)a[i] >= na && (!active || active[i]))
                    return dpt_error(DPT_EINVAL,
                                     "env \"%s\" #%zu: action %" PRId32 " is out of range "
                                     "[0, %zu); no env was stepped",
                                     cls->name, i, a[i], cls->num_actions);
    } else {
        const float *a = actions;
        size_t total = hi * cls->action_dim;
        for (size_t j = lo * cls->action_dim; j < total; j++)
            if (!isfinite(a[j]) && (!active || active[j / cls->action_dim]))
                return dpt_error(DPT_EINVAL,
                                 "env \"%s\" #%zu: action[%zu] is %g (not finite); no env was "
                                 "stepped",
                                 cls->name, j / cls->action_dim, j % cls->action_dim, (double)a[j]);
    }
    return DPT_OK;
}

/* The error of an env whose step (t >= 1) or automatic reset (t = 0) gave
 * a non-finite reward or observation. Envs before #i have stepped: the
 * runner is not to be used after it. */
static int dpt__env_bad_step(const dpt_vecenv_t *v, size_t i, uint32_t t, float r, const float *o)
{
    const dpt_env_class_t *cls = v->cls;
    if (!isfinite(r))
        return dpt_error(DPT_EINVAL,
                         "env \"%s\" #%zu: step %" PRIu32 " of its episode returned reward %g "
                         "(not finite)",
                         cls->name, i, t, (double)r);
    size_t k = dpt_vec_first_nonfinite(o, cls->obs_dim);
    if (t == 0)
        return dpt_error(DPT_EINVAL,
                         "env \"%s\" #%zu: reset returned observation[%zu] = %g (not finite)",
                         cls->name, i, k, (double)o[k]);
    return dpt_error(DPT_EINVAL,
                     "env \"%s\" #%zu: step %" PRIu32 " of its episode returned observation[%zu] "
                     "= %g (not finite)",
                     cls->name, i, t, k, (double)o[k]);
}

int dpt__vecenv_sync(dpt_vecenv_t *v, float *obs)
{
    if (!v->ext)
        return 0;
    if (dpt__ext_take_restart(v->ext)) {
        /* The caller reset its envs on its own: the episodes under way
         * end here, unrecorded. */
        v->ext_fresh = 1;
    }
    if (!v->ext_fresh)
        return 0;
    int rc = dpt__ext_exchange_reset(v->ext, obs);
    if (rc)
        return rc;
    size_t od = v->cls->obs_dim;
    for (size_t i = 0; i < v->n; i++) {
        if (!dpt_vec_all_finite(obs + i * od, od))
            return dpt__env_bad_step(v, i, 0, 0.0f, obs + i * od);
        v->t[i] = 0;
        v->ret[i] = 0.0;
    }
    v->ext_fresh = 0;
    return 1;
}

/* One step of every env of an external env: the caller steps them. */
static int dpt__env_step_ext(dpt_vecenv_t *v, const void *actions, float *obs, float *rewards,
                             uint8_t *terminated, uint8_t *truncated, float *final_obs)
{
    const size_t od = v->cls->obs_dim;
    if (v->ext_fresh)
        return dpt_error(DPT_ESTATE, "env \"%s\": a step before the caller's reset", v->cls->name);
    int rc =
        dpt__ext_exchange_step(v->ext, actions, obs, rewards, terminated, truncated, final_obs);
    if (rc)
        return rc;
    for (size_t i = 0; i < v->n; i++) {
        float r = rewards[i];
        uint32_t t = v->t[i] + 1;
        int done = terminated[i] | truncated[i];
        const float *o = obs + i * od;
        if (!isfinite(r))
            return dpt__env_bad_step(v, i, t, r, o);
        if (!dpt_vec_all_finite(o, od)) /* after an ended episode: the next one's first */
            return dpt__env_bad_step(v, i, done ? 0 : t, r, o);
        if (final_obs && truncated[i] && !dpt_vec_all_finite(final_obs + i * od, od))
            return dpt__env_bad_step(v, i, t, r, final_obs + i * od);
        double ret = v->ret[i] + (double)r;
        if (done) {
            dpt__env_ep_push(v, ret, t);
            t = 0;
            ret = 0.0;
        }
        v->t[i] = t;
        v->ret[i] = ret;
    }
    v->total_steps += v->n;
    return DPT_OK;
}

int dpt_vecenv_step(dpt_vecenv_t *v, const void *actions, float *obs, float *rewards,
                    uint8_t *terminated, uint8_t *truncated, float *final_obs)
{
    return dpt_vecenv_step_masked(v, NULL, actions, obs, rewards, terminated, truncated, final_obs);
}

/* Steps the active envs of [lo, hi) (all buffers indexed by env over the
 * whole runner). A finished episode goes to the runner's record, or, when
 * ep_ret is not NULL, to ep_ret[i] and ep_len[i] (the caller records it).
 * act: scratch for a clipped box action [action_dim]. Returns the number of
 * envs stepped in *stepped (not added to the total). */
static int dpt__env_step_envs(dpt_vecenv_t *v, size_t lo, size_t hi, const uint8_t *active,
                              const void *actions, float *obs, float *rewards, uint8_t *terminated,
                              uint8_t *truncated, float *final_obs, float *act, double *ep_ret,
                              uint32_t *ep_len, size_t *stepped_out)
{
    const dpt_env_class_t *cls = v->cls;
    const size_t od = cls->obs_dim, stride = v->stride;
    const uint32_t limit = cls->max_episode_steps;
    const int box = cls->action_kind == DPT_ACTION_BOX;
    const size_t ad = box ? cls->action_dim : 1;
    void (*const step)(void *, const void *, dpt_rng_t *, float *, float *, int *) = cls->step;
    unsigned char *state = v->states + lo * stride;
    size_t stepped = 0;
    *stepped_out = 0;
    for (size_t i = lo; i < hi; i++, state += stride) {
        if (active && !active[i])
            continue;
        stepped++;
        const void *a;
        if (box) {
            /* ClipAction: clip into the runner's scratch, never the caller's. */
            const float *src = (const float *)actions + i * ad;
            for (size_t k = 0; k < ad; k++) {
                float x = src[k], l = cls->action_low[k], h = cls->action_high[k];
                act[k] = x < l ? l : (x > h ? h : x);
            }
            a = act;
        } else {
            a = (const int32_t *)actions + i;
        }
        float *o = obs + i * od;
        float r = 0.0f;
        int term = 0;
        step(state, a, &v->rngs[i], o, &r, &term);
        uint32_t t = v->t[i] + 1;
        /* An env's numbers feed the gradients: a NaN or an infinity would
         * reach the weights (and every checkpoint after) unnoticed. */
        if (!isfinite(r) || (!v->trusted && !dpt_vec_all_finite(o, od)))
            return dpt__env_bad_step(v, i, t, r, o);
        double ret = v->ret[i] + (double)r;
        /* Terminated and truncated are exclusive: a time limit reached on a
         * terminal step is reported as terminated (no bootstrapping). */
        int trunc = !term & (limit != 0) & (t >= limit);
        rewards[i] = r;
        terminated[i] = (uint8_t)(term != 0);
        truncated[i] = (uint8_t)trunc;
        if (term | trunc) {
            if (ep_ret) {
                ep_ret[i] = ret;
                ep_len[i] = t;
            } else {
                dpt__env_ep_push(v, ret, t);
            }
            if (final_obs)
                memcpy(final_obs + i * od, o, od * sizeof *o);
            cls->reset(state, &v->rngs[i], o);
            if (!v->trusted && !dpt_vec_all_finite(o, od))
                return dpt__env_bad_step(v, i, 0, 0.0f, o);
            t = 0;
            ret = 0.0;
        }
        v->t[i] = t;
        v->ret[i] = ret;
        *stepped_out = stepped;
    }
    return DPT_OK;
}

int dpt__vecenv_step_range(dpt_vecenv_t *v, size_t lo, size_t hi, const void *actions, float *obs,
                           float *rewards, uint8_t *terminated, uint8_t *truncated,
                           float *final_obs, float *act, double *ep_ret, uint32_t *ep_len)
{
    if (!v->started)
        return dpt_error(DPT_ESTATE, "env \"%s\": dpt_vecenv_step before dpt_vecenv_reset",
                         v->cls->name);
    if (lo > hi || hi > v->n)
        return dpt_error(DPT_EINVAL, "env \"%s\": envs [%zu, %zu) of %zu", v->cls->name, lo, hi,
                         v->n);
    if (v->ext)
        return dpt_error(DPT_EINVAL, "env \"%s\": an external env steps all its envs at once",
                         v->cls->name);
    int rc = dpt__env_check_actions(v, lo, hi, NULL, actions);
    size_t stepped;
    return rc ? rc
              : dpt__env_step_envs(v, lo, hi, NULL, actions, obs, rewards, terminated, truncated,
                                   final_obs, act, ep_ret, ep_len, &stepped);
}

void dpt__vecenv_record(dpt_vecenv_t *v, size_t steps, double ret, uint32_t len, int episode)
{
    v->total_steps += steps;
    if (episode)
        dpt__env_ep_push(v, ret, len);
}

int dpt_vecenv_step_masked(dpt_vecenv_t *v, const uint8_t *active, const void *actions, float *obs,
                           float *rewards, uint8_t *terminated, uint8_t *truncated,
                           float *final_obs)
{
    if (!v)
        return dpt_error(DPT_EINVAL, "dpt_vecenv_step: runner is NULL");
    const dpt_env_class_t *cls = v->cls;
    if (!actions || !obs || !rewards || !terminated || !truncated)
        return dpt_error(DPT_EINVAL,
                         "env \"%s\": dpt_vecenv_step needs actions, obs, rewards, "
                         "terminated and truncated buffers",
                         cls->name);
    if (!v->started)
        return dpt_error(DPT_ESTATE, "env \"%s\": dpt_vecenv_step before dpt_vecenv_reset",
                         cls->name);
    int rc = dpt__env_check_actions(v, 0, v->n, active, actions);
    if (rc)
        return rc;
    if (v->ext) {
        if (active)
            return dpt_error(DPT_EINVAL, "env \"%s\": an external env steps all its envs at once",
                             cls->name);
        return dpt__env_step_ext(v, actions, obs, rewards, terminated, truncated, final_obs);
    }
    size_t stepped = 0;
    rc = dpt__env_step_envs(v, 0, v->n, active, actions, obs, rewards, terminated, truncated,
                            final_obs, v->act, NULL, NULL, &stepped);
    if (rc)
        return rc;
    v->total_steps += stepped;
    return DPT_OK;
}

void *dpt_vecenv_env_state(dpt_vecenv_t *v, size_t i)
{
    return v && i < v->n ? v->states + i * v->stride : NULL;
}

size_t dpt_vecenv_pop_episodes(dpt_vecenv_t *v, double *returns, uint32_t *lengths, size_t max,
                               size_t *dropped)
{
    size_t k = v->ep_count < max ? v->ep_count : max;
    for (size_t j = 0; j < k; j++) {
        size_t at = (v->ep_head + j) & (DPT__EP_CAP - 1);
        if (returns)
            returns[j] = v->ep_ret[at];
        if (lengths)
            lengths[j] = v->ep_len[at];
    }
    v->ep_head = (v->ep_head + k) & (DPT__EP_CAP - 1);
    v->ep_count -= k;
    if (dropped)
        *dropped = v->ep_dropped;
    v->ep_dropped = 0;
    return k;
}

uint64_t dpt_vecenv_total_steps(const dpt_vecenv_t *v)
{
    return v->total_steps;
}

uint64_t dpt_vecenv_total_episodes(const dpt_vecenv_t *v)
{
    return v->total_episodes;
}
