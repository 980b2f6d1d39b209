/*
 * Internal to the external envs (dpt/extenv.h): the state shared by the
 * exchange (src/rl/extenv.c, which the runner calls) and the iteration's
 * thread (src/train/extenv_iterate.c, which calls the trainer). Two files,
 * so that a program that links only envs from the static library does not
 * pull the trainers in.
 */
#ifndef DPT_RL_EXTENV_IMPL_H
#define DPT_RL_EXTENV_IMPL_H

#include "dpt/extenv.h"

#include <pthread.h>

#define DPT__EXT_NAME_MAX 64

struct dpt_ext {
    dpt_env_class_t cls; /* name "external:NAME"; reset/step are the markers */
    char name[DPT__EXT_NAME_MAX];
    float *low, *high; /* box bounds (owned) */
    size_t n, od, ad;  /* envs, obs floats, action width (1 for discrete) */
    float *clipped;    /* [n * ad] box actions clipped for the caller */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Bumped (an atomic store, under mu) at every change below, with a
     * broadcast of cv: a waiter spins on it briefly before sleeping on cv
     * (dpt__ext_wait), since the other side usually answers within
     * microseconds and a futex sleep and wake-up cost tens of them. */
    unsigned seq;
    int yield; /* one CPU: spin with sched_yield */
    int closed;
    int cancel;  /* its trainer is being destroyed: waits end (DPT_ECLOSED) */
    int restart; /* the caller asked for new episodes (dpt_ext_restart) */
    int bound;   /* a runner uses it */
    int runs_on; /* that runner steps between iterations (an appo sampler) */
    /* The runner's request and where the answer goes. */
    int req; /* 0, DPT_EXT_RESET or DPT_EXT_STEP */
    int answered;
    const void *actions;
    float *obs, *rew, *final_obs;
    uint8_t *term, *trunc;
    /* The iteration on x's thread. */
    pthread_t th;
    int running, ended;
    dpt_trainer_t *t;
    dpt_train_result_t *r;
    int it_rc;
    char it_err[512];
};

/* Under x->mu: publishes a change (seq, broadcast). */
void dpt__ext_changed(dpt_ext_t *x);
/* Under x->mu: waits until cond(x) holds (spinning first, the lock
 * released while spinning). */
void dpt__ext_wait(dpt_ext_t *x, int (*cond)(const dpt_ext_t *x));

#endif
