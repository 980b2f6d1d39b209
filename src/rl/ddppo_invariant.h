/*
 * DD-PPO's batch in the invariant reduction order (ddppo_invariant.c). Not
 * installed.
 */
#ifndef DPT_RL_DDPPO_INVARIANT_H
#define DPT_RL_DDPPO_INVARIANT_H

#include "dpt/comm.h"
#include "dpt/towers.h"
#include "rl_trainers.h"
#include "rollout.h"

#include <stddef.h>

typedef struct dpt__ddppo_inv {
    size_t n, T, E, workers; /* this worker's envs, steps, all envs, workers */
    size_t B, steps;         /* global minibatch rows; minibatches per batch */
    size_t row0, share;      /* this worker's rows of each minibatch */
    size_t width;            /* floats per row in the messages */
    float *send, *recv;      /* [T n width], [workers T n width] */
    dpt__rollout_t glob;     /* the global rollout: T steps of E envs (its arrays only) */
    size_t *perm;            /* [E T] */
    dpt__rl_batch_t gbatch;  /* the shuffled global batch */
} dpt__ddppo_inv_t;

/* For a worker of `workers` whose rollout is `ro` (keyed by global env
 * index), with global minibatches of `minibatch` rows on `towers` (made
 * with chunk_rows). Its share of a load is steps x share rows: the
 * caller's batch holds that many. Errors: DPT_EINVAL (a minibatch larger
 * than the global batch), DPT_ENOMEM, DPT_EOVERFLOW. */
int dpt__ddppo_inv_init(dpt__ddppo_inv_t *v, const dpt__rollout_t *ro, int workers,
                        size_t minibatch, const dpt_towers_t *towers);
void dpt__ddppo_inv_deinit(dpt__ddppo_inv_t *v);

/* The iteration's batch (collective over comm): every worker's rollout
 * gathered, shuffled with `shuffle` (the same stream on every worker),
 * advantages normalized per `norm`, and this worker's share of every
 * minibatch copied into `mine` and described by *b for the load. */
int dpt__ddppo_inv_batch(dpt__ddppo_inv_t *v, const dpt__rollout_t *ro, dpt_comm_t *comm,
                         const dpt_policy_t *learner, dpt_adv_norm_t norm, dpt_rng_t *shuffle,
                         dpt__rl_batch_t *mine, dpt_batch_t *b);

#endif /* DPT_RL_DDPPO_INVARIANT_H */
