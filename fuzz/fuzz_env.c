/*
 * fuzz_env — the validation of what a plug-in env class reports
 * (dpt_env_class_check), and the vectorized runner on a class it accepts.
 * A class is built from the input (an adversarial plug-in could report any
 * of these values): name, obs_dim, action kind, num_actions, action_dim,
 * bounds (raw float bits: NaN, infinities), max_episode_steps,
 * reward_threshold (raw double bits), state_size, and whether reset and step
 * are set. When the check accepts the class and its state is small, a
 * runner of 1..3 envs is created, reset and stepped with actions from the
 * input (out-of-range ones must be refused), its state saved and loaded
 * back, and the rest of the input loaded as a saved state (which must be
 * refused or accepted without harm).
 */
#include "fuzz_common.h"

#include <math.h>

#include "dpt/env.h"
#include "dpt/status.h"

typedef struct {
    const uint8_t *p;
    size_t n;
} reader_t;

static uint64_t take(reader_t *r, size_t bytes)
{
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; i++) {
        uint8_t b = 0;
        if (r->n) {
            b = *r->p++;
            r->n--;
        }
        v |= (uint64_t)b << (8 * i);
    }
    return v;
}

/* Sizes: small values mostly, with the edges reachable. */
static size_t take_size(reader_t *r)
{
    uint8_t sel = (uint8_t)take(r, 1);
    switch (sel >> 6) {
    case 0: return sel & 63;
    case 1: return (size_t)take(r, 2);
    case 2: return (size_t)take(r, 4);
    default: return (size_t)take(r, 8);
    }
}

static size_t g_obs_dim;

/* The env: its state is a step counter in the first byte (when it has one);
 * it ends an episode every few steps. */
static void env_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)rng;
    for (size_t i = 0; i < g_obs_dim; i++)
        obs[i] = 0.0f;
    (void)state;
}

static void env_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                     int *terminated)
{
    (void)rng;
    (void)action;
    for (size_t i = 0; i < g_obs_dim; i++)
        obs[i] = (float)i;
    *reward = 1.0f;
    *terminated = 0;
    (void)state;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader_t r = {data, size};
    dpt_env_class_t cls;
    memset(&cls, 0, sizeof cls);

    char name[80];
    size_t name_len = (size_t)take(&r, 1) % sizeof name;
    for (size_t i = 0; i < name_len; i++)
        name[i] = (char)take(&r, 1);
    name[name_len] = '\0';
    uint8_t flags = (uint8_t)take(&r, 1);
    cls.name = (flags & 1) ? NULL : name;
    cls.obs_dim = take_size(&r);
    cls.action_kind = (dpt_action_kind_t)(take(&r, 1) % 4);
    cls.num_actions = take_size(&r);
    cls.action_dim = take_size(&r);
    for (int k = 0; k < DPT_ENV_MAX_DIM && (flags & 2); k++) {
        uint32_t lo = (uint32_t)take(&r, 4), hi = (uint32_t)take(&r, 4);
        memcpy(&cls.action_low[k], &lo, sizeof lo);
        memcpy(&cls.action_high[k], &hi, sizeof hi);
    }
    if (!(flags & 2))
        for (int k = 0; k < DPT_ENV_MAX_DIM; k++) {
            cls.action_low[k] = -(float)(take(&r, 1) % 4);
            cls.action_high[k] = (float)(take(&r, 1) % 4);
        }
    cls.max_episode_steps = (uint32_t)take(&r, 1);
    uint64_t rt = take(&r, 8);
    if (flags & 4)
        memcpy(&cls.reward_threshold, &rt, sizeof rt);
    cls.state_size = take_size(&r);
    cls.reset = (flags & 8) ? NULL : env_reset;
    cls.step = (flags & 16) ? NULL : env_step;

    int rc = dpt_env_class_check(&cls);
    if (rc != 0 || cls.state_size > 4096) {
        dpt_error_clear();
        return 0;
    }
    /* Accepted: the rules of env.h hold. */
    if (!cls.name || strlen(cls.name) < 1 || strlen(cls.name) > 63 || cls.obs_dim < 1 ||
        cls.obs_dim > DPT_ENV_MAX_DIM || !cls.reset || !cls.step || !isfinite(cls.reward_threshold))
        abort();
    if (cls.action_kind == DPT_ACTION_BOX) {
        if (cls.action_dim < 1 || cls.action_dim > DPT_ENV_MAX_DIM)
            abort();
        for (size_t k = 0; k < cls.action_dim; k++)
            if (!(cls.action_low[k] <= cls.action_high[k]) || !isfinite(cls.action_low[k]) ||
                !isfinite(cls.action_high[k]))
                abort();
    } else if (cls.action_kind != DPT_ACTION_DISCRETE || cls.num_actions < 1 ||
               cls.num_actions > INT32_MAX) {
        abort();
    }

    g_obs_dim = cls.obs_dim;
    size_t nenv = 1 + (size_t)take(&r, 1) % 3;
    dpt_vecenv_t *v = NULL;
    if (dpt_vecenv_create(&v, &cls, nenv, take(&r, 8), 0) != 0)
        abort();
    float obs[3 * DPT_ENV_MAX_DIM], final_obs[3 * DPT_ENV_MAX_DIM], rewards[3];
    uint8_t term[3], trunc[3];
    int32_t iact[3];
    float bact[3 * DPT_ENV_MAX_DIM];
    if (dpt_vecenv_step(v, iact, obs, rewards, term, trunc, NULL) != DPT_ESTATE)
        abort();
    dpt_vecenv_reset(v, obs);
    size_t steps = (size_t)take(&r, 1) % 16;
    for (size_t s = 0; s < steps; s++) {
        const void *act;
        if (cls.action_kind == DPT_ACTION_DISCRETE) {
            for (size_t i = 0; i < nenv; i++)
                iact[i] = (int32_t)take(&r, 4);
            act = iact;
        } else {
            for (size_t i = 0; i < nenv * cls.action_dim; i++) {
                uint32_t b = (uint32_t)take(&r, 4);
                memcpy(&bact[i], &b, sizeof b);
            }
            act = bact;
        }
        (void)dpt_vecenv_step(v, act, obs, rewards, term, trunc, final_obs);
    }
    double returns[8];
    uint32_t lengths[8];
    size_t dropped;
    (void)dpt_vecenv_pop_episodes(v, returns, lengths, 8, &dropped);

    size_t bytes = dpt_vecenv_state_bytes(v);
    void *buf = malloc(bytes);
    if (!buf)
        abort();
    if (dpt_vecenv_save_state(v, buf, bytes) != 0 || dpt_vecenv_load_state(v, buf, bytes) != 0)
        abort();
    /* The rest of the input as a saved state, and as the saved state with
     * its payload overwritten by the input (the header stays valid). */
    (void)dpt_vecenv_load_state(v, r.p, r.n);
    if (bytes > 128) {
        size_t k = r.n < bytes - 128 ? r.n : bytes - 128;
        if (k)
            memcpy((uint8_t *)buf + 128, r.p, k);
        (void)dpt_vecenv_load_state(v, buf, bytes);
    }
    free(buf);
    dpt_vecenv_destroy(v);
    dpt_error_clear();
    return 0;
}
