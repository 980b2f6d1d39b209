/*
 * External envs (dpt/extenv.h): a rendezvous between the trainer's runner,
 * which asks for a reset or a step and waits, and the caller, which polls
 * for the request and answers it. One mutex and one condition variable;
 * the answer is copied straight into the runner's buffers.
 *
 * The trainer sees an env class whose reset and step are markers (never
 * called): the runner (env.c) recognises it with dpt__ext_of() and
 * exchanges whole vectors with the caller instead of stepping envs.
 */
#include "dpt/extenv.h"
#include "dpt/arena.h"
#include "dpt/status.h"
#include "env_internal.h"
#include "extenv_impl.h"

#include "core/spin.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The trainer's copy of the class (one allocation, dpt_env_class_destroy
 * frees it). */
typedef struct dpt__ext_class {
    dpt_env_class_t cls;
    dpt_ext_t *x;
} dpt__ext_class_t;

static void dpt__ext_reset_marker(void *state, dpt_rng_t *rng, float *obs)
{
    (void)state, (void)rng, (void)obs;
}

static void dpt__ext_step_marker(void *state, const void *action, dpt_rng_t *rng, float *obs,
                                 float *reward, int *terminated)
{
    (void)state, (void)action, (void)rng, (void)obs, (void)reward, (void)terminated;
}

dpt_ext_t *dpt__ext_of(const dpt_env_class_t *cls)
{
    return cls && cls->step == dpt__ext_step_marker ? ((const dpt__ext_class_t *)cls)->x : NULL;
}

int dpt__ext_class(dpt_ext_t *x, dpt_env_class_t **out)
{
    dpt__ext_class_t *c = malloc(sizeof *c);
    if (!c)
        return dpt_error(DPT_ENOMEM, "env %s: cannot allocate its class", x->cls.name);
    c->cls = x->cls;
    c->x = x;
    *out = &c->cls;
    return DPT_OK;
}

int dpt_ext_create(dpt_ext_t **out, const dpt_env_class_t *spaces, size_t num_envs)
{
    if (!out || !spaces)
        return dpt_error(DPT_EINVAL, "dpt_ext_create: out and spaces must not be NULL");
    *out = NULL;
    const char *nm = spaces->name ? spaces->name : "";
    size_t len = strlen(nm);
    if (len == 0 || len + strlen(DPT_EXT_ENV_PREFIX) >= DPT__EXT_NAME_MAX)
        return dpt_error(DPT_EINVAL, "external env \"%.40s\": a name of 1..%zu characters", nm,
                         DPT__EXT_NAME_MAX - 1 - strlen(DPT_EXT_ENV_PREFIX));
    if (spaces->reset || spaces->step || spaces->init || spaces->configure || spaces->state_size ||
        spaces->num_params || spaces->params || spaces->values)
        return dpt_error(DPT_EINVAL,
                         "external env \"%s\": the spaces are a class without functions, state "
                         "or parameters (the caller steps the envs)",
                         nm);
    if (spaces->max_episode_steps)
        return dpt_error(DPT_EINVAL,
                         "external env \"%s\": max_episode_steps must be 0 (the caller "
                         "truncates episodes)",
                         nm);
    if (num_envs == 0 || num_envs > UINT32_MAX)
        return dpt_error(DPT_EINVAL, "external env \"%s\": %zu envs, must be 1..%u", nm, num_envs,
                         UINT32_MAX);
    dpt_ext_t *x = calloc(1, sizeof *x);
    if (!x)
        return dpt_error(DPT_ENOMEM, "external env \"%s\": cannot allocate it", nm);
    snprintf(x->name, sizeof x->name, "%s%s", DPT_EXT_ENV_PREFIX, nm);
    x->cls = *spaces;
    x->cls.name = x->name;
    x->cls.reset = dpt__ext_reset_marker;
    x->cls.step = dpt__ext_step_marker;
    x->n = num_envs;
    x->yield = sysconf(_SC_NPROCESSORS_ONLN) < 2;
    int rc = dpt_env_class_check(&x->cls);
    int box = spaces->action_kind == DPT_ACTION_BOX;
    if (!rc) {
        x->od = spaces->obs_dim;
        x->ad = box ? spaces->action_dim : 1;
        size_t bytes;
        if (dpt_mul_size(num_envs, x->ad * sizeof(float), &bytes) || !(x->clipped = malloc(bytes)))
            rc = dpt_error(DPT_ENOMEM, "external env \"%s\": cannot allocate %zu actions", nm,
                           num_envs);
    }
    if (!rc && box) {
        x->low = malloc(x->ad * sizeof(float));
        x->high = malloc(x->ad * sizeof(float));
        if (!x->low || !x->high)
            rc = dpt_error(DPT_ENOMEM, "external env \"%s\": cannot allocate its bounds", nm);
        else {
            memcpy(x->low, spaces->action_low, x->ad * sizeof(float));
            memcpy(x->high, spaces->action_high, x->ad * sizeof(float));
            x->cls.action_low = x->low;
            x->cls.action_high = x->high;
        }
    }
    if (!rc && pthread_mutex_init(&x->mu, NULL) != 0)
        rc = dpt_error(DPT_ETHREAD, "external env \"%s\": cannot create a mutex", nm);
    if (!rc && pthread_cond_init(&x->cv, NULL) != 0) {
        pthread_mutex_destroy(&x->mu);
        rc = dpt_error(DPT_ETHREAD, "external env \"%s\": cannot create a condition", nm);
    }
    if (rc) {
        free(x->clipped);
        free(x->low);
        free(x->high);
        free(x);
        return rc;
    }
    *out = x;
    return DPT_OK;
}

void dpt_ext_destroy(dpt_ext_t *x)
{
    if (!x)
        return;
    if (x->running) {
        dpt_ext_close(x);
        pthread_join(x->th, NULL);
        x->running = 0;
    }
    pthread_mutex_lock(&x->mu);
    int bound = x->bound;
    pthread_mutex_unlock(&x->mu);
    if (bound) /* a trainer still holds it: a leak rather than a dangling pointer */
        return;
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x->clipped);
    free(x->low);
    free(x->high);
    free(x);
}

size_t dpt_ext_num_envs(const dpt_ext_t *x)
{
    return x->n;
}

void dpt_ext_close(dpt_ext_t *x)
{
    pthread_mutex_lock(&x->mu);
    x->closed = 1;
    dpt__ext_changed(x);
    pthread_mutex_unlock(&x->mu);
}

/* ---- waiting ---------------------------------------------------------------------- */

/* How long a waiter spins before it sleeps: about the time of a Python env's
 * step (a Gymnasium CartPole takes 10-30 us), longer than a policy's act. */
#define DPT__EXT_SPIN_S 200e-6

void dpt__ext_changed(dpt_ext_t *x)
{
    __atomic_store_n(&x->seq, x->seq + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&x->cv);
}

typedef struct dpt__ext_spin {
    const dpt_ext_t *x;
    unsigned seen;
} dpt__ext_spin_t;

static int dpt__ext_moved(void *ctx)
{
    const dpt__ext_spin_t *s = ctx;
    return __atomic_load_n(&s->x->seq, __ATOMIC_ACQUIRE) != s->seen;
}

void dpt__ext_wait(dpt_ext_t *x, int (*cond)(const dpt_ext_t *x))
{
    if (cond(x))
        return;
    dpt__ext_spin_t s = {x, x->seq};
    pthread_mutex_unlock(&x->mu);
    double t0;
    (void)dpt__spin_until(dpt__ext_moved, &s, DPT__EXT_SPIN_S, x->yield, &t0);
    pthread_mutex_lock(&x->mu);
    while (!cond(x))
        pthread_cond_wait(&x->cv, &x->mu);
}

/* ---- the runner's side ------------------------------------------------------------ */

int dpt_ext_restart(dpt_ext_t *x)
{
    if (x->running)
        return dpt_error(DPT_ESTATE, "env %s: dpt_ext_restart during an iteration", x->cls.name);
    pthread_mutex_lock(&x->mu);
    int runs_on = x->runs_on;
    if (!runs_on)
        x->restart = 1;
    pthread_mutex_unlock(&x->mu);
    if (runs_on)
        return dpt_error(DPT_ESTATE,
                         "env %s: dpt_ext_restart: the trainer's sampler (appo, impala) runs "
                         "between iterations, stepping these envs: they cannot start anew; use "
                         "other envs for anything else",
                         x->cls.name);
    return DPT_OK;
}

int dpt__ext_take_restart(dpt_ext_t *x)
{
    pthread_mutex_lock(&x->mu);
    int r = x->restart;
    x->restart = 0;
    pthread_mutex_unlock(&x->mu);
    return r;
}

void dpt__ext_cancel(dpt_ext_t *x, int on)
{
    pthread_mutex_lock(&x->mu);
    x->cancel = on;
    dpt__ext_changed(x);
    pthread_mutex_unlock(&x->mu);
}

int dpt__ext_bind(dpt_ext_t *x, size_t n)
{
    int rc = DPT_OK;
    pthread_mutex_lock(&x->mu);
    if (x->bound)
        rc = dpt_error(DPT_EINVAL,
                       "env %s: an external env serves one runner (ddppo and appo take "
                       "num_workers = 1 with it; evaluate with the caller's env)",
                       x->cls.name);
    else if (n != x->n)
        rc = dpt_error(DPT_EINVAL,
                       "env %s: the trainer runs %zu envs, the external env has %zu "
                       "(num_envs_per_worker must be %zu)",
                       x->cls.name, n, x->n, x->n);
    else
        x->bound = 1;
    pthread_mutex_unlock(&x->mu);
    return rc;
}

void dpt__ext_runs_on(dpt_ext_t *x)
{
    pthread_mutex_lock(&x->mu);
    x->runs_on = 1;
    pthread_mutex_unlock(&x->mu);
}

void dpt__ext_unbind(dpt_ext_t *x)
{
    pthread_mutex_lock(&x->mu);
    x->bound = 0;
    x->runs_on = 0;
    pthread_mutex_unlock(&x->mu);
}

static int dpt__ext_answered(const dpt_ext_t *x)
{
    return x->answered || x->closed || x->cancel;
}

/* Posts a request and waits for its answer (or a close). */
static int dpt__ext_request(dpt_ext_t *x, int req)
{
    pthread_mutex_lock(&x->mu);
    x->req = req;
    x->answered = 0;
    dpt__ext_changed(x);
    dpt__ext_wait(x, dpt__ext_answered);
    int ok = x->answered;
    x->req = 0;
    pthread_mutex_unlock(&x->mu);
    return ok ? DPT_OK
              : dpt_error(DPT_ECLOSED, "env %s: the caller closed the external env", x->cls.name);
}

int dpt__ext_exchange_reset(dpt_ext_t *x, float *obs)
{
    x->obs = obs;
    return dpt__ext_request(x, DPT_EXT_RESET);
}

int dpt__ext_exchange_step(dpt_ext_t *x, const void *actions, float *obs, float *rewards,
                           uint8_t *terminated, uint8_t *truncated, float *final_obs)
{
    if (x->cls.action_kind == DPT_ACTION_BOX) {
        /* ClipAction, as the runner does for its own envs. */
        const float *a = actions;
        for (size_t i = 0; i < x->n; i++)
            for (size_t k = 0; k < x->ad; k++) {
                float v = a[i * x->ad + k], l = x->low[k], h = x->high[k];
                x->clipped[i * x->ad + k] = v < l ? l : (v > h ? h : v);
            }
        actions = x->clipped;
    }
    x->actions = actions;
    x->obs = obs;
    x->rew = rewards;
    x->term = terminated;
    x->trunc = truncated;
    x->final_obs = final_obs;
    return dpt__ext_request(x, DPT_EXT_STEP);
}

/* ---- the caller's side ------------------------------------------------------------ */

/* The iteration has ended, or the runner waits for the caller (once
 * closed, the iteration can only end). */
static int dpt__ext_wanted(const dpt_ext_t *x)
{
    return x->ended || (!x->closed && x->req && !x->answered);
}

int dpt_ext_poll(dpt_ext_t *x, const void **actions)
{
    if (!x->running)
        return dpt_error(DPT_ESTATE, "env %s: dpt_ext_poll with no iteration begun", x->cls.name);
    pthread_mutex_lock(&x->mu);
    dpt__ext_wait(x, dpt__ext_wanted);
    int what = x->ended ? DPT_EXT_DONE : x->req;
    if (actions)
        *actions = what == DPT_EXT_STEP ? x->actions : NULL;
    pthread_mutex_unlock(&x->mu);
    return what;
}

/* Takes the pending request `req` (DPT_ESTATE when another or none). */
static int dpt__ext_take(dpt_ext_t *x, int req, const char *fn)
{
    pthread_mutex_lock(&x->mu);
    if (x->closed || x->cancel) {
        pthread_mutex_unlock(&x->mu);
        return dpt_error(DPT_ESTATE, "env %s: %s after dpt_ext_close", x->cls.name, fn);
    }
    if (x->req == req && !x->answered)
        return DPT_OK; /* locked */
    int pending = x->req && !x->answered ? x->req : 0;
    pthread_mutex_unlock(&x->mu);
    return dpt_error(DPT_ESTATE, "env %s: %s, but the trainer asked for %s", x->cls.name, fn,
                     pending == DPT_EXT_RESET  ? "a reset"
                     : pending == DPT_EXT_STEP ? "a step"
                                               : "nothing (dpt_ext_poll first)");
}

static void dpt__ext_answer(dpt_ext_t *x)
{
    x->answered = 1;
    dpt__ext_changed(x);
    pthread_mutex_unlock(&x->mu);
}

int dpt_ext_reset(dpt_ext_t *x, const float *obs)
{
    if (!obs)
        return dpt_error(DPT_EINVAL, "env %s: dpt_ext_reset: obs is NULL", x->cls.name);
    int rc = dpt__ext_take(x, DPT_EXT_RESET, "dpt_ext_reset");
    if (rc)
        return rc;
    memcpy(x->obs, obs, x->n * x->od * sizeof(float));
    dpt__ext_answer(x);
    return DPT_OK;
}

int dpt_ext_step(dpt_ext_t *x, const float *obs, const float *rewards, const uint8_t *terminated,
                 const uint8_t *truncated, const float *final_obs)
{
    if (!obs || !rewards || !terminated || !truncated)
        return dpt_error(DPT_EINVAL,
                         "env %s: dpt_ext_step needs obs, rewards, terminated and truncated",
                         x->cls.name);
    if (!final_obs)
        for (size_t i = 0; i < x->n; i++)
            if (truncated[i] && !terminated[i])
                return dpt_error(DPT_EINVAL,
                                 "env %s #%zu: truncated, and no final observation was given "
                                 "(final_obs is NULL)",
                                 x->cls.name, i);
    int rc = dpt__ext_take(x, DPT_EXT_STEP, "dpt_ext_step");
    if (rc)
        return rc;
    size_t od = x->od;
    memcpy(x->obs, obs, x->n * od * sizeof(float));
    memcpy(x->rew, rewards, x->n * sizeof(float));
    for (size_t i = 0; i < x->n; i++) {
        int term = terminated[i] != 0, trunc = truncated[i] != 0 && !term;
        x->term[i] = (uint8_t)term;
        x->trunc[i] = (uint8_t)trunc;
        if (x->final_obs && (term || trunc))
            memcpy(x->final_obs + i * od, final_obs ? final_obs + i * od : obs + i * od,
                   od * sizeof(float));
    }
    dpt__ext_answer(x);
    return DPT_OK;
}
