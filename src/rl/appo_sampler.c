/*
 * APPO/IMPALA sampler threads (appo_internal.h): each steps its envs T
 * steps at a time with the newest published weights of their policies and
 * cuts the fragments into train batches, which go to the learner's
 * inqueue (threads) or to rank 0 (a sampler rank under mpirun).
 */
#include "dpt/status.h"
#include "appo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- train batches ---------------------------------------------------------------- */

void dpt__appo_tb_free(dpt__appo_tb_t *b)
{
    if (!b)
        return;
    free(b->obs);
    free(b->act);
    free(b->logp);
    free(b->rew);
    free(b->disc);
    free(b);
}

dpt__appo_tb_t *dpt__appo_tb_new(const struct dpt_appo *a)
{
    dpt__appo_tb_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    size_t rows = a->seqs * (a->T + 1);
    b->obs = calloc(rows * a->od, sizeof(float));
    b->act = calloc(rows * a->aw, 4);
    b->logp = calloc(rows, sizeof(float));
    b->rew = calloc(rows, sizeof(float));
    b->disc = calloc(rows, sizeof(float));
    b->stack = -1;
    if (!b->obs || !b->act || !b->logp || !b->rew || !b->disc) {
        dpt__appo_tb_free(b);
        return NULL;
    }
    return b;
}

/* Env i's fragment of the rollout's last collect() (time-major) as
 * sequence b->seqs of the batch: its T steps, then its current observation
 * in the bootstrap row. */
static void dpt__appo_tb_add(dpt__appo_tb_t *b, const dpt__rollout_t *ro, size_t i, double gamma,
                             uint64_t version)
{
    size_t T = ro->T, N = ro->N, od = ro->obs_dim, aw = ro->act_w, L = T + 1, r0 = b->seqs * L;
    for (size_t t = 0; t < T; t++) {
        size_t k = t * N + i, r = r0 + t;
        memcpy(b->obs + r * od, ro->obs + k * od, od * sizeof(float));
        memcpy((char *)b->act + r * aw * 4, (const char *)ro->actions + k * aw * 4, aw * 4);
        b->logp[r] = ro->logp[k];
        b->rew[r] = ro->rewards[k];
        b->disc[r] = ro->dones[k] ? 0.0f : (float)gamma;
    }
    memcpy(b->obs + (r0 + T) * od, ro->cur_obs + i * od, od * sizeof(float));
    b->seqs++;
    b->version_sum += (double)version;
}

/* The episodes that ended in the rollout's last collect() (the newest of
 * its window), added to the batch (the newest DPT__EPISODE_WINDOW kept). */
static void dpt__appo_tb_episodes(dpt__appo_tb_t *b, const dpt__rollout_t *ro)
{
    size_t e =
        ro->episodes_this_iter < DPT__EPISODE_WINDOW ? ro->episodes_this_iter : DPT__EPISODE_WINDOW;
    dpt__episode_window_append_newest(&ro->window, e, b->ret, b->len, &b->episodes);
}

/* A full train batch into the learner's inqueue: the learner's own queue
 * with one tower stack, the loaders' with several. */
int dpt__appo_push(struct dpt_appo *a, dpt__appo_tb_t *tb, double timeout_s)
{
    return a->K > 1 ? dpt_queue_push(a->sample_q, tb, timeout_s)
                    : dpt_learner_push(a->learner_thread, tb, timeout_s);
}

/* ---- sampler threads ------------------------------------------------------------ */

/* Pushes a full batch into the learner's inqueue, waiting while it is full
 * (waking now and then to see whether the run is stopping). */
static int dpt__appo_sampler_push(dpt__appo_sampler_t *s, dpt__appo_group_t *g)
{
    struct dpt_appo *a = s->a;
    for (;;) {
        int rc = dpt__appo_push(a, g->tb, 0.2);
        if (rc == DPT_OK) {
            g->tb = NULL;
            return DPT_OK;
        }
        if (rc != DPT_ETIMEDOUT || atomic_load(&a->stop))
            return atomic_load(&a->stop) || rc == DPT_ECLOSED ? DPT_ECLOSED : rc;
    }
}

void *dpt__appo_sampler_main(void *arg)
{
    dpt__appo_sampler_t *s = arg;
    struct dpt_appo *a = s->a;
    const dpt_appo_config_t *c = &a->cfg;
    int rc = DPT_OK;
    int env_closed = 0; /* an external env's caller closed it: a failure */
    while (!rc && !atomic_load(&a->stop)) {
        if (a->comm) {
            if ((rc = dpt__appo_sampler_poll(s, s->groups[0].version == UINT64_MAX)) != 0)
                break;
        } else {
            pthread_mutex_lock(&a->wmu);
            for (int p = 0; p < a->npols; p++) {
                dpt__appo_group_t *g = &s->groups[p];
                if (a->pols[p].pub_version != g->version || g->version == UINT64_MAX) {
                    memcpy(g->params.data, a->pols[p].pub.data,
                           a->pols[p].pub.count * sizeof(float));
                    g->version = a->pols[p].pub_version;
                }
            }
            pthread_mutex_unlock(&a->wmu);
        }
        /* Each policy's envs take their T steps with its weights, one group
         * after the other; a fragment goes to its policy's batch. */
        for (int p = 0; !rc && p < a->npols; p++) {
            dpt__appo_group_t *g = &s->groups[p];
            if ((rc = dpt__rollout_collect(&g->ro, g->actor, g->params.data, c->common.gamma, 1.0,
                                           c->common.reward_scale, a->T, NULL, NULL)) != 0) {
                /* DPT_ECLOSED from the runner is an external env's caller
                 * leaving: the learner must not wait for this sampler. */
                env_closed = rc == DPT_ECLOSED && !atomic_load(&a->stop);
                break;
            }
            for (size_t i = 0; !rc && i < g->ro.N; i++) {
                if (!g->tb && !(g->tb = dpt__appo_tb_new(a))) {
                    rc = dpt_error(DPT_ENOMEM, "appo sampler %d: cannot allocate a train batch",
                                   s->index);
                    break;
                }
                g->tb->policy = p;
                if (i == 0)
                    dpt__appo_tb_episodes(g->tb, &g->ro);
                dpt__appo_tb_add(g->tb, &g->ro, i, c->common.gamma, g->version);
                if (g->tb->seqs == a->seqs)
                    rc = a->comm ? dpt__appo_sampler_send(s, g) : dpt__appo_sampler_push(s, g);
            }
        }
    }
    if (rc == DPT_ECLOSED && !env_closed)
        rc = DPT_OK; /* the run is stopping */
    if (rc) {
        s->rc = rc;
        snprintf(s->err, sizeof s->err, "%s", dpt_last_error());
        atomic_store(&s->failed, 1); /* publishes rc and err */
        /* No more batches will come from here: the learner must not wait
         * for them. Closing its inqueue ends it once it has drained it. */
        dpt_queue_close(dpt_learner_inqueue(a->learner_thread));
    }
    atomic_store(&s->running, 0);
    return NULL;
}

/* The first sampler that stopped on an error, or 0. */
int dpt__appo_samplers_failed(struct dpt_appo *a)
{
    for (int k = 0; k < a->nsamplers; k++)
        if (atomic_load(&a->samplers[k].failed))
            return dpt_error(a->samplers[k].rc, "appo sampler %d failed: %s", k,
                             a->samplers[k].err);
    return DPT_OK;
}
