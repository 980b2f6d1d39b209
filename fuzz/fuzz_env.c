/*
 * fuzz_env — the validation of what a plug-in env class reports
 * (dpt_env_class_check), configured classes (dpt_env_class_create), and the
 * vectorized runner on a class it accepts. A class is built from the input
 * (an adversarial plug-in could report any of these values): name, obs_dim,
 * action kind, num_actions, action_dim, bounds (raw float bits: NaN,
 * infinities), max_episode_steps, reward_threshold (raw double bits),
 * state_size, whether reset, step, configure and init are set, and up to 4
 * parameter declarations (type, name, default text, range). When the check
 * accepts the class, it is configured with up to 3 name/value texts from the
 * input; when that succeeds and the sizes are small, a runner of 1..3 envs is
 * created, reset and stepped with actions from the input (out-of-range ones
 * must be refused), its state saved and loaded back, and the rest of the
 * input loaded as a saved state (which must be refused or accepted without
 * harm).
 *
 * Input layout (missing bytes read as 0):
 *   [name_len u8][name][flags u8][obs_dim][kind u8][num_actions][action_dim]
 *   [8 bounds: flags & 2 ? raw f32 pairs : u8 pairs][max_episode_steps u8]
 *   [reward_threshold 8][state_size][num_params u8]
 *   num_params (at most 4) x [type u8][name_len u8][name][def_len u8][def][min i8][max i8]
 *   [nset u8] (at most 3) x [param index u8][text_len u8][text]
 *   [nenv u8][seed 8][steps u8][actions...][a saved state...]
 * where a size is [sel u8] and, by sel >> 6, nothing (sel & 63), 2, 4 or 8
 * bytes. flags: 1 name NULL, 2 raw bounds, 4 raw reward_threshold, 8 no
 * reset, 16 no step, 32 params NULL, 64 configure, 128 init.
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

/* A string of up to 255 bytes from the input into buf [256]. */
static char *take_text(reader_t *r, char *buf)
{
    size_t len = (size_t)take(r, 1);
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)take(r, 1);
    buf[len] = '\0';
    return buf;
}

/* The runner's callbacks write obs_dim values: the configured class's. */
static size_t g_obs_dim;

/* configure: obs_dim from the first parameter when it is an int, and
 * obs_shape {v, 2, 2} when the second is an int v > 0 (any values: the check
 * afterwards must refuse bad ones); refuses when a bool parameter is true. */
static int env_configure(dpt_env_class_t *cls, const dpt_env_value_t *values, char *why,
                         size_t why_size)
{
    for (size_t j = 0; j < cls->num_params; j++)
        if (cls->params[j].type == DPT_ENV_PARAM_BOOL && values[j].i) {
            snprintf(why, why_size, "parameter %s is set", cls->params[j].name);
            return 1;
        }
    if (cls->num_params && cls->params[0].type == DPT_ENV_PARAM_INT)
        cls->obs_dim = (size_t)values[0].i;
    if (cls->num_params > 1 && cls->params[1].type == DPT_ENV_PARAM_INT && values[1].i > 0)
        cls->obs_shape = (dpt_shape_t){(size_t)values[1].i, 2, 2};
    return 0;
}

/* init: marks the first byte of a state that has one. */
static size_t g_state_size;

static void env_init(void *state, const dpt_env_value_t *values)
{
    (void)values;
    if (g_state_size)
        ((uint8_t *)state)[0] = 1;
}

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

/* The rules of env.h hold for an accepted class. */
static void check_accepted(const dpt_env_class_t *cls)
{
    if (!cls->name || strlen(cls->name) < 1 || strlen(cls->name) > 63 || cls->obs_dim < 1 ||
        cls->obs_dim > DPT_ENV_DIM_LIMIT || !cls->reset || !cls->step ||
        !isfinite(cls->reward_threshold) || cls->num_params > DPT_ENV_PARAMS_LIMIT ||
        (cls->num_params && !cls->params))
        abort();
    dpt_shape_t s = cls->obs_shape;
    if ((s.c || s.h || s.w) &&
        (!s.c || !s.h || !s.w || s.c > cls->obs_dim || s.c * s.h * s.w != cls->obs_dim))
        abort();
    if (cls->action_kind == DPT_ACTION_BOX) {
        if (cls->action_dim < 1 || cls->action_dim > DPT_ENV_DIM_LIMIT || !cls->action_low ||
            !cls->action_high)
            abort();
        for (size_t k = 0; k < cls->action_dim; k++)
            if (!(cls->action_low[k] <= cls->action_high[k]) || !isfinite(cls->action_low[k]) ||
                !isfinite(cls->action_high[k]))
                abort();
    } else if (cls->action_kind != DPT_ACTION_DISCRETE || cls->num_actions < 1 ||
               cls->num_actions > INT32_MAX) {
        abort();
    }
    for (size_t j = 0; j < cls->num_params; j++) {
        const dpt_env_param_t *p = &cls->params[j];
        dpt_env_value_t v;
        if (!p->name || !p->name[0] || strlen(p->name) > 63 || !p->def ||
            dpt_env_param_parse(p, p->def, &v) != 0)
            abort();
        for (size_t i = 0; i < j; i++)
            if (strcmp(cls->params[i].name, p->name) == 0)
                abort();
    }
}

/* The runner over an accepted (configured) class with small sizes. */
static void run(const dpt_env_class_t *cls, reader_t *r)
{
    g_obs_dim = cls->obs_dim;
    g_state_size = cls->state_size;
    size_t nenv = 1 + (size_t)take(r, 1) % 3;
    size_t ad = cls->action_kind == DPT_ACTION_BOX ? cls->action_dim : 1;
    dpt_vecenv_t *v = NULL;
    if (dpt_vecenv_create(&v, cls, nenv, take(r, 8), 0) != 0)
        abort();
    float *obs = malloc(nenv * cls->obs_dim * sizeof *obs);
    float *final_obs = malloc(nenv * cls->obs_dim * sizeof *final_obs);
    float *bact = malloc(nenv * ad * sizeof *bact);
    float rewards[3];
    uint8_t term[3], trunc[3];
    int32_t iact[3] = {0, 0, 0};
    if (!obs || !final_obs || !bact)
        abort();
    if (dpt_vecenv_step(v, iact, obs, rewards, term, trunc, NULL) != DPT_ESTATE)
        abort();
    dpt_vecenv_reset(v, obs);
    size_t steps = (size_t)take(r, 1) % 16;
    for (size_t s = 0; s < steps; s++) {
        const void *act;
        if (cls->action_kind == DPT_ACTION_DISCRETE) {
            for (size_t i = 0; i < nenv; i++)
                iact[i] = (int32_t)take(r, 4);
            act = iact;
        } else {
            for (size_t i = 0; i < nenv * ad; i++) {
                uint32_t b = (uint32_t)take(r, 4);
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
    (void)dpt_vecenv_load_state(v, r->p, r->n);
    if (bytes > 128) {
        size_t k = r->n < bytes - 128 ? r->n : bytes - 128;
        if (k)
            memcpy((uint8_t *)buf + 128, r->p, k);
        (void)dpt_vecenv_load_state(v, buf, bytes);
    }
    free(buf);
    free(obs);
    free(final_obs);
    free(bact);
    dpt_vecenv_destroy(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader_t r = {data, size};
    dpt_env_class_t cls;
    memset(&cls, 0, sizeof cls);

    char name[256];
    take_text(&r, name);
    uint8_t flags = (uint8_t)take(&r, 1);
    cls.name = (flags & 1) ? NULL : name;
    cls.obs_dim = take_size(&r);
    cls.action_kind = (dpt_action_kind_t)(take(&r, 1) % 4);
    cls.num_actions = take_size(&r);
    cls.action_dim = take_size(&r);
    /* Bounds for the first 8 dimensions from the input, repeated beyond (a
     * plug-in's arrays hold action_dim values). */
    float lo8[8], hi8[8];
    for (int k = 0; k < 8; k++) {
        if (flags & 2) {
            uint32_t lo = (uint32_t)take(&r, 4), hi = (uint32_t)take(&r, 4);
            memcpy(&lo8[k], &lo, sizeof lo);
            memcpy(&hi8[k], &hi, sizeof hi);
        } else {
            lo8[k] = -(float)(take(&r, 1) % 4);
            hi8[k] = (float)(take(&r, 1) % 4);
        }
    }
    float *low = NULL, *high = NULL;
    if (cls.action_kind == DPT_ACTION_BOX && cls.action_dim <= 4096) {
        size_t n = cls.action_dim ? cls.action_dim : 1;
        low = malloc(n * sizeof *low);
        high = malloc(n * sizeof *high);
        if (!low || !high)
            abort();
        for (size_t k = 0; k < n; k++) {
            low[k] = lo8[k % 8];
            high[k] = hi8[k % 8];
        }
        cls.action_low = low;
        cls.action_high = high;
    } else if (cls.action_kind == DPT_ACTION_BOX) {
        cls.action_dim = 0; /* no arrays that large here: the check must refuse */
    }
    cls.max_episode_steps = (uint32_t)take(&r, 1);
    uint64_t rt = take(&r, 8);
    if (flags & 4)
        memcpy(&cls.reward_threshold, &rt, sizeof rt);
    cls.state_size = take_size(&r);
    cls.reset = (flags & 8) ? NULL : env_reset;
    cls.step = (flags & 16) ? NULL : env_step;
    cls.configure = (flags & 64) ? env_configure : NULL;
    cls.init = (flags & 128) ? env_init : NULL;

    dpt_env_param_t params[4];
    char pnames[4][256], pdefs[4][256];
    size_t np = (size_t)take(&r, 1);
    for (size_t j = 0; j < np && j < 4; j++) {
        params[j].type = (dpt_env_param_type_t)(take(&r, 1) % 5);
        params[j].name = take_text(&r, pnames[j]);
        params[j].def = take_text(&r, pdefs[j]);
        params[j].min = (double)(int8_t)take(&r, 1);
        params[j].max = (double)(int8_t)take(&r, 1);
        params[j].help = NULL;
    }
    /* More than 4 declared: only with params NULL (a lying plug-in). */
    cls.num_params = (flags & 32) ? np : (np < 4 ? np : 4);
    cls.params = (flags & 32) ? NULL : params;

    size_t nset = (size_t)take(&r, 1) % 4;
    const char *names[3], *texts[3];
    char tbuf[3][256];
    for (size_t i = 0; i < nset; i++) {
        size_t j = (size_t)take(&r, 1) % 5; /* 4: a name no parameter has */
        names[i] = j < cls.num_params && cls.params ? cls.params[j].name : "no_such_name";
        texts[i] = take_text(&r, tbuf[i]);
    }

    g_obs_dim = cls.obs_dim;
    g_state_size = cls.state_size;
    if (dpt_env_class_check(&cls) == 0) {
        check_accepted(&cls);
        dpt_env_class_t *made = NULL;
        if (dpt_env_class_create(&made, &cls, names, texts, nset) == 0) {
            if (!made || !made->values || made->name != cls.name ||
                made->num_params != cls.num_params || dpt_env_class_check(made) != 0)
                abort();
            check_accepted(made);
            size_t ad = made->action_kind == DPT_ACTION_BOX ? made->action_dim : 1;
            if (made->state_size <= 4096 && made->obs_dim <= 4096 && ad <= 4096)
                run(made, &r);
            dpt_env_class_destroy(made);
        } else if (made) {
            abort();
        }
        /* The class as written runs at its defaults. */
        if (cls.state_size <= 4096 && cls.obs_dim <= 4096 &&
            (cls.action_kind != DPT_ACTION_BOX || cls.action_dim <= 4096))
            run(&cls, &r);
    }
    free(low);
    free(high);
    dpt_error_clear();
    return 0;
}
