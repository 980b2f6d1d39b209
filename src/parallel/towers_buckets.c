/*
 * Gradient buckets of the towers engine with an external communicator:
 * the communication thread and the model hook that feeds it (dpt/towers.h,
 * "Gradient buckets"; the state is dpt__bucketer_t in towers_impl.h).
 *
 *   device 0 (loss_grad)          communication thread
 *   backward of the last layer
 *     hook: bucket 0 ready  --->  allreduce bucket 0
 *   backward of the layer below   (runs meanwhile)
 *     hook: bucket 1 ready  --->  allreduce bucket 1
 *   ...
 *   loss_grad returns; slot set
 *   finish: release the rest --->  allreduce the rest, then the slot
 *   wait until all reduced   <---  reduced == plan.n + 1
 *
 * The items are reduced one at a time in a fixed order, each by the same
 * collective as any other call of that size, so the results do not depend
 * on when the hook fired. Only the communication thread uses the
 * communicator during a step; outside steps device 0's thread does
 * (replica checks), so MPI needs MPI_THREAD_SERIALIZED.
 */
#include "dpt/status.h"
#include "towers_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *dpt__buckets_main(void *arg)
{
    dpt_towers_t *t = arg;
    dpt__bucketer_t *bk = t->bk;
    pthread_mutex_lock(&bk->mu);
    for (;;) {
        while (!bk->quit && bk->reduced >= bk->released)
            pthread_cond_wait(&bk->cv, &bk->mu);
        if (bk->quit)
            break;
        size_t k = bk->reduced;
        float *buf = bk->buf;
        dpt_reduce_op_t op = bk->op;
        pthread_mutex_unlock(&bk->mu);
        size_t lo = k < bk->plan.n ? bk->plan.b[k].lo : t->nparams;
        size_t count = k < bk->plan.n ? bk->plan.b[k].hi - lo : 1;
        /* After a failure the communicator is failed and later calls
         * return at once: every item is still counted, so finish returns. */
        int rc = dpt_comm_allreduce(t->cfg.comm, buf + lo, count, op);
        pthread_mutex_lock(&bk->mu);
        if (rc && !bk->rc) {
            bk->rc = rc;
            snprintf(bk->msg, sizeof bk->msg, "%s", dpt_last_error());
        }
        bk->reduced++;
        pthread_cond_broadcast(&bk->cv);
    }
    pthread_mutex_unlock(&bk->mu);
    return NULL;
}

/* The model's hook (device 0's thread, inside loss_grad). */
static void dpt__buckets_hook(void *user, size_t var_lo, size_t var_hi)
{
    dpt_towers_t *t = user;
    dpt__bucketer_t *bk = t->bk;
    if (!bk->active)
        return; /* the gradient-set check, or a call outside a step */
    size_t ready = dpt__bucket_track_mark(&bk->track, &bk->plan, var_lo, var_hi);
    if (ready <= bk->released_seen)
        return;
    bk->released_seen = ready;
    pthread_mutex_lock(&bk->mu);
    bk->released = ready;
    pthread_cond_broadcast(&bk->cv);
    pthread_mutex_unlock(&bk->mu);
}

int dpt__buckets_create(dpt_towers_t *t)
{
    const dpt_towers_config_t *c = &t->cfg;
    /* Overlap needs the hook and one device (with several, the devices
     * combine their gradients after every backward pass ends); weight_rows
     * scales the gradient after the backward pass. */
    if (!c->comm || c->bucket_bytes == 0 || c->chunk_rows || c->num_devices != 1 ||
        c->weight_rows || !t->model.set_grad_hook)
        return DPT_OK;
    dpt__bucketer_t *bk = calloc(1, sizeof *bk);
    if (!bk)
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate the bucket state");
    t->bk = bk;
    int rc = dpt__bucket_plan_init(&bk->plan, t->model.vars, c->bucket_bytes);
    if (rc)
        return rc;
    if (bk->plan.n < 2) {
        /* One bucket: the plain all-reduce after the backward pass. */
        dpt__buckets_destroy(t);
        return DPT_OK;
    }
    if ((rc = dpt__bucket_track_init(&bk->track, t->model.vars->nvars)) != 0)
        return rc;
    if (pthread_mutex_init(&bk->mu, NULL) != 0)
        return dpt_error(DPT_ETHREAD, "towers: cannot create the bucket lock");
    if (pthread_cond_init(&bk->cv, NULL) != 0) {
        pthread_mutex_destroy(&bk->mu);
        return dpt_error(DPT_ETHREAD, "towers: cannot create the bucket condition");
    }
    bk->sync_ready = 1;
    if (pthread_create(&bk->thread, NULL, dpt__buckets_main, t) != 0)
        return dpt_error(DPT_ETHREAD, "towers: cannot start the communication thread");
    bk->thread_started = 1;
    if ((rc = t->model.set_grad_hook(t->towers[0].ctx, dpt__buckets_hook, t)) != 0)
        return rc;
    return DPT_OK;
}

void dpt__buckets_destroy(dpt_towers_t *t)
{
    dpt__bucketer_t *bk = t->bk;
    if (!bk)
        return;
    if (bk->thread_started) {
        t->model.set_grad_hook(t->towers[0].ctx, NULL, NULL);
        pthread_mutex_lock(&bk->mu);
        bk->quit = 1;
        pthread_cond_broadcast(&bk->cv);
        pthread_mutex_unlock(&bk->mu);
        pthread_join(bk->thread, NULL);
    }
    if (bk->sync_ready) {
        pthread_cond_destroy(&bk->cv);
        pthread_mutex_destroy(&bk->mu);
    }
    dpt__bucket_track_deinit(&bk->track);
    dpt__bucket_plan_deinit(&bk->plan);
    free(bk);
    t->bk = NULL;
}

void dpt__buckets_begin(dpt_towers_t *t, float *buf, dpt_reduce_op_t op)
{
    dpt__bucketer_t *bk = t->bk;
    dpt__bucket_track_reset(&bk->track);
    bk->released_seen = 0;
    /* The thread is idle: the last step's finish saw every item reduced. */
    pthread_mutex_lock(&bk->mu);
    bk->buf = buf;
    bk->op = op;
    bk->released = bk->reduced = 0;
    bk->rc = 0;
    pthread_mutex_unlock(&bk->mu);
    bk->active = 1;
}

int dpt__buckets_finish(dpt_towers_t *t)
{
    dpt__bucketer_t *bk = t->bk;
    bk->active = 0;
    size_t items = bk->plan.n + 1;
    pthread_mutex_lock(&bk->mu);
    bk->released = items;
    pthread_cond_broadcast(&bk->cv);
    /* Not a busy wait: the thread signals after each item, and each
     * all-reduce has the communicator's timeout. */
    while (bk->reduced < items)
        pthread_cond_wait(&bk->cv, &bk->mu);
    int rc = bk->rc;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", bk->msg);
    pthread_mutex_unlock(&bk->mu);
    return rc ? dpt_error(rc, "%s", msg) : DPT_OK;
}
