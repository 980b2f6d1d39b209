/*
 * The caller's side of an external env for the tests (dpt/extenv.h):
 * CartPole-v1's own C code stepped in the test's loop, with the streams the
 * runner would give it (seed, rank, env i) and its time limit, so a trainer
 * on the external env must end where one on the built-in env ends.
 */
#ifndef DPT_TEST_EXTENV_H
#define DPT_TEST_EXTENV_H

#include "dpt/env.h"
#include "dpt/extenv.h"
#include "dpt/status.h"
#include "dpt/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NENVS 4
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The caller's envs: CartPole-v1's code, its own loop. */
typedef struct envs {
    const dpt_env_class_t *cls;
    size_t n, od;
    unsigned char *states;
    dpt_rng_t rngs[NENVS];
    uint32_t t[NENVS];
    float obs[NENVS * 4], final_obs[NENVS * 4], rew[NENVS];
    uint8_t term[NENVS], trunc[NENVS];
    size_t resets, steps;
    float poison; /* 0, or a value put in env 1's reward at the next step */
} envs_t;

static inline void envs_init(envs_t *e, uint64_t seed, uint32_t rank)
{
    memset(e, 0, sizeof *e);
    e->cls = dpt_env_find("CartPole-v1");
    e->n = NENVS;
    e->od = e->cls->obs_dim;
    e->states = calloc(NENVS, 64 + e->cls->state_size);
    for (size_t i = 0; i < NENVS; i++)
        dpt_rng_init(&e->rngs[i], seed, rank, (uint32_t)i, DPT_RNG_ENV);
}

static inline void *envs_state(envs_t *e, size_t i)
{
    return e->states + i * (64 + e->cls->state_size);
}

static inline void envs_reset(envs_t *e)
{
    for (size_t i = 0; i < e->n; i++) {
        e->cls->reset(envs_state(e, i), &e->rngs[i], e->obs + i * e->od);
        e->t[i] = 0;
    }
    e->resets++;
}

static inline void envs_step(envs_t *e, const int32_t *a)
{
    for (size_t i = 0; i < e->n; i++) {
        float *o = e->obs + i * e->od;
        int term = 0;
        e->cls->step(envs_state(e, i), &a[i], &e->rngs[i], o, &e->rew[i], &term);
        e->t[i]++;
        int trunc = !term && e->t[i] >= e->cls->max_episode_steps;
        e->term[i] = (uint8_t)term;
        e->trunc[i] = (uint8_t)trunc;
        if (term || trunc) {
            memcpy(e->final_obs + i * e->od, o, e->od * sizeof *o);
            e->cls->reset(envs_state(e, i), &e->rngs[i], o);
            e->t[i] = 0;
        }
    }
    if (e->poison != 0.0f) {
        e->rew[1] = e->poison;
        e->poison = 0.0f;
    }
    e->steps++;
}

/* One iteration of t, served by e. */
static inline int serve(dpt_ext_t *x, dpt_trainer_t *t, envs_t *e, dpt_train_result_t *r)
{
    int rc = dpt_ext_iterate_begin(x, t, r);
    if (rc)
        return rc;
    for (;;) {
        const void *actions = NULL;
        int what = dpt_ext_poll(x, &actions);
        if (what == DPT_EXT_RESET) {
            envs_reset(e);
            rc = dpt_ext_reset(x, e->obs);
        } else if (what == DPT_EXT_STEP) {
            envs_step(e, actions);
            rc = dpt_ext_step(x, e->obs, e->rew, e->term, e->trunc, e->final_obs);
        } else {
            break;
        }
        if (rc)
            break;
    }
    int erc = dpt_ext_iterate_end(x);
    return rc ? rc : erc;
}

/* CartPole-v1's spaces as an external env states them. */
static inline dpt_env_class_t cartpole_spaces(void)
{
    dpt_env_class_t s = *dpt_env_find("CartPole-v1");
    s.name = "CartPole";
    s.reset = NULL;
    s.step = NULL;
    s.init = NULL;
    s.configure = NULL;
    s.state_size = 0;
    s.max_episode_steps = 0;
    return s;
}

static inline dpt_ext_t *cartpole_ext(size_t n)
{
    dpt_env_class_t spaces = cartpole_spaces();
    dpt_ext_t *x = NULL;
    if (dpt_ext_create(&x, &spaces, n) != 0)
        fprintf(stderr, "dpt_ext_create: %s\n", dpt_last_error());
    return x;
}

#endif
