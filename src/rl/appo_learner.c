/*
 * The learner side of APPO/IMPALA (appo_internal.h): the step and release
 * callbacks of the learner thread (dpt/learner.h) and, with K > 1 tower
 * stacks, the loader threads that load batches into idle stacks while the
 * learner steps on loaded ones.
 */
#include "dpt/stats.h"
#include "dpt/status.h"
#include "appo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- health --------------------------------------------------------------------- */

/* The first loader thread that stopped on an error, or 0. */
int dpt__appo_loaders_failed(struct dpt_appo *a)
{
    for (int k = 0; k < a->nloaders; k++)
        if (atomic_load(&a->loaders[k].failed))
            return dpt_error(a->loaders[k].rc, "appo loader %d failed: %s", k, a->loaders[k].err);
    return DPT_OK;
}

int dpt__appo_learner_check(void *ctx)
{
    int rc = dpt__appo_samplers_failed(ctx);
    return rc ? rc : dpt__appo_loaders_failed(ctx);
}

/* ---- loader threads (K > 1 tower stacks) ----------------------------------------- */

atomic_int dpt__appo_test_loader_fail_at;

/* Waits for an item of q, waking now and then to see whether the run is
 * stopping (DPT_ECLOSED then, as for a closed queue). *waited adds the time
 * it waited. */
static int dpt__appo_loader_pop(struct dpt_appo *a, dpt_queue_t *q, void **item, double *waited)
{
    double t0 = dpt_now();
    int rc;
    do
        rc = atomic_load(&a->stop) ? DPT_ECLOSED : dpt_queue_pop(q, item, 0.2);
    while (rc == DPT_ETIMEDOUT);
    if (waited)
        *waited += dpt_now() - t0;
    return rc;
}

/* One batch: a trained policy's into an idle stack of its towers (on this
 * thread: dpt_towers_load_direct, while the learner steps on other
 * stacks), then to the learner; a batch of a policy not trained goes to
 * the learner as it is (it counts its steps and episodes). */
static int dpt__appo_loader_one(dpt__appo_loader_t *l, dpt__appo_tb_t *tb, double waited)
{
    struct dpt_appo *a = l->a;
    dpt__appo_pol_t *pol = &a->pols[tb->policy];
    double load_s = 0.0;
    int rc = DPT_OK;
    if (pol->train) {
        void *k = NULL;
        if ((rc = dpt__appo_loader_pop(a, pol->idle, &k, NULL)) != 0) {
            dpt__appo_tb_free(tb);
            return rc;
        }
        int stack = (int)(uintptr_t)k - 1;
        if (atomic_load(&dpt__appo_test_loader_fail_at) > 0 &&
            atomic_fetch_sub(&dpt__appo_test_loader_fail_at, 1) == 1)
            rc = dpt_error(DPT_EIO, "appo loader %d: injected failure (test hook)", l->index);
        dpt_batch_t b;
        if (!rc)
            rc = dpt_vtrace_batch(&b, a->cls, a->seqs, a->T, tb->obs, tb->act, tb->logp, tb->rew,
                                  tb->disc);
        double t0 = dpt_now();
        dpt_towers_load_info_t li;
        if (!rc)
            rc = dpt_towers_load_direct(pol->towers, stack, &b, 0, &li);
        load_s = dpt_now() - t0;
        if (rc) {
            (void)dpt_queue_push(pol->idle, k, 0.0);
            dpt__appo_tb_free(tb);
            return rc;
        }
        tb->stack = stack;
    }
    pthread_mutex_lock(&a->lmu);
    a->loader_load_s += load_s;
    a->loader_wait_s += waited;
    a->loads++;
    pthread_mutex_unlock(&a->lmu);
    do
        rc = atomic_load(&a->stop) ? DPT_ECLOSED : dpt_learner_push(a->learner_thread, tb, 0.2);
    while (rc == DPT_ETIMEDOUT);
    if (rc)
        dpt__appo_learner_release(a, tb); /* the learner has ended: the stack is idle again */
    return rc;
}

void *dpt__appo_loader_main(void *arg)
{
    dpt__appo_loader_t *l = arg;
    struct dpt_appo *a = l->a;
    int rc = DPT_OK;
    while (!rc) {
        void *item = NULL;
        double waited = 0.0;
        if ((rc = dpt__appo_loader_pop(a, a->sample_q, &item, &waited)) == 0)
            rc = dpt__appo_loader_one(l, item, waited);
    }
    if (rc != DPT_ECLOSED) {
        l->rc = rc;
        snprintf(l->err, sizeof l->err, "%s", dpt_last_error());
        atomic_store(&l->failed, 1); /* publishes rc and err */
        /* The learner must not wait for stacks that will not come: closing
         * its inqueue ends it once drained, and its check names this error. */
        dpt_queue_close(dpt_learner_inqueue(a->learner_thread));
    }
    return NULL;
}

/* ---- the learner thread's callbacks ---------------------------------------------- */

/* A batch's last pass is done: its stack (loader threads) becomes idle
 * again. The idle queue holds every stack, so the push never waits; after
 * the stop it is closed and the stack is not needed any more. */
void dpt__appo_learner_release(void *ctx, void *item)
{
    struct dpt_appo *a = ctx;
    dpt__appo_tb_t *tb = item;
    if (tb && tb->stack >= 0)
        (void)dpt_queue_push(a->pols[tb->policy].idle, (void *)(uintptr_t)(tb->stack + 1), 0.0);
    dpt__appo_tb_free(tb);
}

/* One update on a batch of a trained policy: load it into the policy's
 * towers (they hold one batch at a time), take a step, publish the
 * weights when it is time. A batch of a policy not trained takes no
 * update. Every update counts the batch's steps as trained (the result's
 * env and agent steps); the first pass counts them as sampled, with its
 * episodes and (for a trained policy) policy lag. */
int dpt__appo_learner_step(void *ctx, void *item, dpt_learner_result_t *res)
{
    struct dpt_appo *a = ctx;
    dpt__appo_tb_t *tb = item;
    const dpt_appo_config_t *c = &a->cfg;
    dpt__appo_pol_t *pol = &a->pols[tb->policy];
    pthread_mutex_lock(&a->mu);
    if (c->common.total_timesteps && a->timesteps >= c->common.total_timesteps) {
        /* Done: the rest is not trained on (the run ends at this count). */
        pthread_mutex_unlock(&a->mu);
        return DPT_OK;
    }
    int rc = DPT_OK;
    dpt_towers_stats_t st;
    if (pol->train) {
        int stack = tb->stack;
        if (stack < 0) {
            /* One stack: the learner loads the batch itself. */
            dpt_batch_t b;
            rc = dpt_vtrace_batch(&b, a->cls, a->seqs, a->T, tb->obs, tb->act, tb->logp, tb->rew,
                                  tb->disc);
            double t0 = dpt_now();
            dpt_towers_load_info_t li;
            if (!rc)
                rc = dpt_towers_load(pol->towers, 0, &b, &li);
            a->load_s += dpt_now() - t0;
            stack = 0;
        }
        float lr = dpt__rl_lr(&c->common, a->timesteps);
        if (!rc)
            rc = dpt_towers_optimize(pol->towers, stack, 0, lr, &st);
        if (rc) {
            pthread_mutex_unlock(&a->mu);
            return rc;
        }
        a->updates++;
        pol->updates++;
        if (res->first) { /* a trained policy's batch, just taken */
            a->batches_taken++;
            a->passes_scheduled += (uint64_t)res->passes;
        }
        if (pol->updates % (uint64_t)c->broadcast_interval == 0) {
            pthread_mutex_lock(&a->wmu);
            rc = dpt_towers_get_weights(pol->towers, pol->pub.data, pol->pub.count);
            pol->pub_version = pol->updates;
            pthread_mutex_unlock(&a->wmu);
            a->broadcasts++;
        }
    }
    uint64_t steps = (uint64_t)(a->seqs * a->T);
    if (pol->train) {
        res->env_steps = res->agent_steps = steps;
        a->counters.env_steps_trained += steps;
        a->counters.agent_steps_trained += steps;
    }
    if (tb->passes++ == 0) {
        a->timesteps += steps;
        a->counters.env_steps_sampled += steps;
        a->counters.agent_steps_sampled += steps;
        if (pol->train) {
            a->lag_sum += (double)(pol->updates - 1) * (double)tb->seqs - tb->version_sum;
            a->lag_count += (double)tb->seqs;
        }
        for (size_t j = 0; j < tb->episodes; j++) {
            dpt__episode_window_push(&pol->window, tb->ret[j], tb->len[j]);
            dpt__episode_window_push(&a->window, tb->ret[j], tb->len[j]);
        }
        a->episodes_total += tb->episodes;
        a->episodes_iter += tb->episodes;
    }
    if (pol->train) {
        dpt__rl_learn_stats_t *sums[2] = {&a->ls_sum, &pol->ls_sum};
        for (int k = 0; k < 2; k++) {
            sums[k]->policy_loss += st.extra[DPT_PPO_STAT_POLICY_LOSS];
            sums[k]->vf_loss += st.extra[DPT_PPO_STAT_VF_LOSS];
            sums[k]->entropy += st.extra[DPT_PPO_STAT_ENTROPY];
            sums[k]->kl += st.extra[DPT_PPO_STAT_KL];
            sums[k]->clipfrac += st.extra[DPT_PPO_STAT_CLIPFRAC];
            sums[k]->grad_norm += st.grad_norm;
        }
        a->ls_count++;
        pol->ls_count++;
    }
    /* Only the update that completes the caller's iteration wakes it: a
     * wake-up per update would cost the learner's core a context switch. */
    if (a->wake_at && a->timesteps >= a->wake_at) {
        a->wake_at = 0;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}
