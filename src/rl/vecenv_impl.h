/*
 * Internal to the vectorized runner: its struct, shared by the runner
 * (src/rl/env.c) and its saved state (src/rl/env_state.c). Layout and
 * invariants: src/rl/env.c.
 */
#ifndef DPT_RL_VECENV_IMPL_H
#define DPT_RL_VECENV_IMPL_H

#include "dpt/env.h"

#include <stddef.h>
#include <stdint.h>

/* The longest class name, with its NUL (a saved state holds it). */
#define DPT__ENV_NAME_CAP 64
#define DPT__EP_CAP 4096u /* a power of two: ring indices are masked */
#define DPT__ALIGN 64u

struct dpt_vecenv {
    const dpt_env_class_t *cls;    /* borrowed */
    dpt_env_class_t *own;          /* cls at its defaults, for a class as written with parameters */
    const dpt_env_value_t *values; /* what init got: cls's, or own's; NULL when neither */
    uint32_t values_digest;        /* of values, in the saved state's header */
    size_t n;
    uint64_t seed;
    uint32_t rank;
    uint32_t first;        /* env i's stream is (seed, rank, first + i, DPT_RNG_ENV): 0, or
                            * the global index of env 0 (dpt__vecenv_set_first) */
    int started;           /* 1 after the first dpt_vecenv_reset */
    size_t stride;         /* bytes between state blocks (multiple of 16) */
    unsigned char *states; /* [n * stride] */
    dpt_rng_t *rngs;       /* [n] */
    uint32_t *t;           /* [n] current episode lengths */
    double *ret;           /* [n] current episode returns */
    double *ep_ret;        /* [DPT__EP_CAP] finished episodes (ring) */
    uint32_t *ep_len;      /* [DPT__EP_CAP] */
    size_t ep_head, ep_count;
    size_t ep_dropped;  /* dropped since the last pop */
    float *act;         /* [action_dim] clipped box action (1 for discrete) */
    float *obs_scratch; /* [obs_dim] for dpt_vecenv_reset(v, NULL) */
    int trusted;        /* a built-in class's code: its observations need no finite check */
    uint64_t total_steps, total_episodes;
    size_t state_bytes;  /* size of a saved state */
    struct dpt_ext *ext; /* an external env's (dpt/extenv.h), or NULL */
    int ext_fresh;       /* its episodes start anew: the caller's reset is due */
};

/* Keys env i's stream by its global index first + i (rank 0) from the
 * start: the streams at position 0, the states made anew by the class's
 * init; call dpt_vecenv_reset() after it. A saved state keeps rank 0 and
 * the loading runner keys by its own first. The invariant reduction order's
 * DD-PPO workers use it, so an env's randomness does not depend on which
 * worker steps it. */
void dpt__vecenv_set_first(dpt_vecenv_t *v, uint32_t first);

/* The saved state of v's n envs when they are envs [first, first + n) of
 * the nsrc runners saved in src (per envs each, in order; each a valid
 * state of per envs of v's class), into out (dpt_vecenv_state_bytes(v)
 * bytes): as v would save them, the header from the source of env `first`,
 * the runners' totals (steps, episodes) summed into the runner of first = 0
 * and 0 in the others (the workers' figures add them up). A DD-PPO run in the invariant order resumed with
 * another number of workers gives each worker its envs this way. Errors:
 * DPT_EINVAL (sizes), DPT_EFORMAT (a source that is not a valid state). The
 * result is then checked and loaded as any saved state. */
int dpt__vecenv_state_pick(const dpt_vecenv_t *v, const void *const *src, size_t nsrc, size_t per,
                           size_t first, void *out, size_t out_bytes);

#define DPT__STATE_HEADER 128u
#define DPT__STATE_MAGIC "dptvenv\0"
#define DPT__STATE_VERSION 1u
#define DPT__STATE_BOM 0x01020304u
/* Per env in a saved state: rng position (8), t (4), return (8), state;
 * after the envs the two u64 counters. */
#define DPT__STATE_PER_ENV 20u
#define DPT__STATE_TAIL 16u

#endif
