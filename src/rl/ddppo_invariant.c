/*
 * DD-PPO in the invariant reduction order (rl_trainers.h, ddppo.c): the
 * iteration's batch is the same whatever the number of workers.
 *
 * The E = P n envs (P workers of n envs) are keyed by their global index
 * (dpt__rollout_env_streams), so env g's steps are the same bits whichever
 * worker steps it. After the collect and GAE (per env), every worker sends
 * its T x n rows to every other (dpt_comm_allgather) and lays them out as
 * one rollout of T steps of E envs, row t E + g; every worker then shuffles
 * that global batch with the same stream (keyed by the seed alone),
 * normalizes the advantages over the whole batch or over each global
 * minibatch of sgd_minibatch_size rows, and loads its share of every
 * minibatch (dpt_towers_share) into towers that add fixed chunks by one tree
 * (dpt/towers.h). Every worker holds the whole batch for a moment: E T rows
 * of the observation width.
 */
#include "ddppo_invariant.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "rl_engine.h"

#include <stdlib.h>
#include <string.h>

void dpt__ddppo_inv_deinit(dpt__ddppo_inv_t *v)
{
    dpt_free_aligned(v->send);
    dpt_free_aligned(v->recv);
    free(v->glob.obs);
    free(v->glob.actions);
    free(v->glob.logp);
    free(v->glob.adv);
    free(v->glob.returns);
    free(v->glob.values);
    free(v->perm);
    dpt__rl_batch_deinit(&v->gbatch);
    memset(v, 0, sizeof *v);
}

int dpt__ddppo_inv_init(dpt__ddppo_inv_t *v, const dpt__rollout_t *ro, int workers,
                        size_t minibatch, const dpt_towers_t *towers)
{
    memset(v, 0, sizeof *v);
    v->n = ro->N;
    v->T = ro->T;
    v->E = ro->N * (size_t)workers;
    v->workers = (size_t)workers;
    v->B = minibatch;
    size_t rows = v->E * v->T, od = ro->obs_dim, aw = ro->act_w;
    if (rows < minibatch)
        return dpt_error(DPT_EINVAL,
                         "ddppo: sgd_minibatch_size %zu exceeds the %zu rows of all %zu workers' "
                         "batches (the invariant order's minibatches are global)",
                         minibatch, rows, v->workers);
    v->steps = rows / minibatch;
    int rc = dpt_towers_share(towers, &v->row0, &v->share);
    if (rc)
        return rc;
    v->width = od + aw + 4;
    size_t mine = v->n * v->T * v->width, bytes;
    if (dpt_mul_size(mine * v->workers, sizeof(float), &bytes))
        return dpt_error(DPT_EOVERFLOW, "ddppo: %zu rows of %zu floats overflow", rows, v->width);
    v->glob = *ro; /* the class, sizes and flags; the arrays are replaced */
    v->glob.N = v->E;
    v->glob.steps = v->T;
    v->glob.obs = calloc(rows * od, sizeof(float));
    v->glob.actions = calloc(rows * aw, 4);
    v->glob.logp = calloc(rows, sizeof(float));
    v->glob.adv = calloc(rows, sizeof(float));
    v->glob.returns = calloc(rows, sizeof(float));
    v->glob.values = calloc(rows, sizeof(float));
    v->perm = malloc(rows * sizeof *v->perm);
    v->send = dpt_alloc_aligned(mine * sizeof(float));
    v->recv = dpt_alloc_aligned(bytes);
    if (!v->glob.obs || !v->glob.actions || !v->glob.logp || !v->glob.adv || !v->glob.returns ||
        !v->glob.values || !v->perm || !v->send || !v->recv)
        return dpt_error(DPT_ENOMEM, "ddppo: cannot allocate the global batch of %zu rows", rows);
    return dpt__rl_batch_init(&v->gbatch, ro, rows, 0);
}

/* Row k of this worker's rollout into the message, and back. The action's
 * 4 bytes travel in a float's place, unchanged. */
static void dpt__ddppo_inv_pack(const dpt__rollout_t *ro, size_t k, float *m)
{
    size_t od = ro->obs_dim, aw = ro->act_w;
    memcpy(m, ro->obs + k * od, od * sizeof(float));
    memcpy(m + od, (const char *)ro->actions + k * aw * 4, aw * 4);
    m[od + aw] = ro->logp[k];
    m[od + aw + 1] = ro->adv[k];
    m[od + aw + 2] = ro->returns[k];
    m[od + aw + 3] = ro->values[k];
}

static void dpt__ddppo_inv_unpack(dpt__ddppo_inv_t *v, size_t g, const float *m)
{
    dpt__rollout_t *r = &v->glob;
    size_t od = r->obs_dim, aw = r->act_w;
    memcpy(r->obs + g * od, m, od * sizeof(float));
    memcpy((char *)r->actions + g * aw * 4, m + od, aw * 4);
    r->logp[g] = m[od + aw];
    r->adv[g] = m[od + aw + 1];
    r->returns[g] = m[od + aw + 2];
    r->values[g] = m[od + aw + 3];
}

int dpt__ddppo_inv_batch(dpt__ddppo_inv_t *v, const dpt__rollout_t *ro, dpt_comm_t *comm,
                         const dpt_policy_t *learner, dpt_adv_norm_t norm, dpt_rng_t *shuffle,
                         dpt__rl_batch_t *mine, dpt_batch_t *b)
{
    size_t n = v->n, T = v->T, E = v->E, od = ro->obs_dim, aw = ro->act_w;
    for (size_t k = 0; k < T * n; k++)
        dpt__ddppo_inv_pack(ro, k, v->send + k * v->width);
    int rc = dpt_comm_allgather(comm, v->send, T * n * v->width, v->recv);
    if (rc)
        return rc;
    /* Worker q's row t n + i is env q n + i's step t: global row t E + q n + i. */
    for (size_t q = 0; q < v->workers; q++)
        for (size_t k = 0; k < T * n; k++)
            dpt__ddppo_inv_unpack(v, (k / n) * E + q * n + k % n,
                                  v->recv + (q * T * n + k) * v->width);
    size_t rows = E * T, nseq;
    if (norm == DPT_ADV_NORM_BATCH)
        dpt_normalize(v->glob.adv, rows);
    dpt_batch_t gb;
    if ((rc = dpt__rl_make_batch(&v->glob, learner, 0, shuffle, v->perm, NULL, &v->gbatch, &gb,
                                 &nseq)) != 0)
        return rc;
    if (norm == DPT_ADV_NORM_MINIBATCH)
        dpt__rl_normalize_minibatches(v->gbatch.adv, 1, v->steps * v->B, v->B);
    /* This worker's rows of every minibatch, minibatch after minibatch. */
    const dpt__rl_batch_t *g = &v->gbatch;
    for (size_t m = 0, j = 0; m < v->steps; m++)
        for (size_t i = 0; i < v->share; i++, j++) {
            size_t s = m * v->B + v->row0 + i;
            memcpy(mine->obs + j * od, g->obs + s * od, od * sizeof(float));
            memcpy((char *)mine->act + j * aw * 4, (const char *)g->act + s * aw * 4, aw * 4);
            mine->logp[j] = g->logp[s];
            mine->adv[j] = g->adv[s];
            mine->ret[j] = g->ret[s];
            mine->val[j] = g->val[s];
        }
    return dpt_ppo_batch(b, dpt_policy_env_class(learner), v->steps * v->share, mine->obs,
                         mine->act, mine->logp, mine->adv, mine->ret, mine->val);
}
