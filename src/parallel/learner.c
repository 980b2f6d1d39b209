/*
 * The minibatch buffer and the learner thread (dpt/learner.h).
 *
 * Results travel through two queues of pointers to a fixed array of result
 * records, so the outqueue never allocates: `free_slots` starts with every
 * record; the learner takes one, fills it and pushes it to `out`; the owner
 * pops it from `out`, copies it and gives it back to `free_slots`. A record
 * belongs to whoever popped it last, and the queues' mutex orders the
 * writes before the reads.
 *
 * Lock order: `mu` (state, error, statistics) is never held while calling
 * into a queue, a callback or another lock.
 */
#include "dpt/learner.h"
#include "dpt/arena.h"
#include "dpt/stats.h"
#include "dpt/status.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The message a failed callback left, or the code's description when it
 * set none. */
static const char *dpt__why(int rc)
{
    return dpt_last_error()[0] ? dpt_last_error() : dpt_strerror(rc);
}

/* ---- minibatch buffer ---------------------------------------------------- */

struct dpt_minibatch_buffer {
    dpt_minibatch_source_fn source;
    void *source_ctx;
    double timeout_s;
    size_t size;
    size_t idx;   /* the slot the next get() uses */
    int max_ttl;  /* num_passes */
    int cur_ttl;  /* the TTL the next refill gives */
    void **items; /* [size] */
    int *ttl;     /* [size] passes left; 0: empty */
    int refilled; /* the last get() took a new item, with this TTL: */
    int refill_ttl;
};

int dpt_minibatch_queue_source(void *queue, void **item, double timeout_s)
{
    return dpt_queue_pop(queue, item, timeout_s);
}

int dpt_minibatch_buffer_create(dpt_minibatch_buffer_t **out, size_t size, int num_passes,
                                int init_num_passes, double timeout_s,
                                dpt_minibatch_source_fn source, void *source_ctx)
{
    *out = NULL;
    if (size == 0)
        return dpt_error(DPT_EINVAL, "minibatch buffer: size must be >= 1");
    if (num_passes < 1)
        return dpt_error(DPT_EINVAL, "minibatch buffer: num_passes is %d, must be >= 1",
                         num_passes);
    if (init_num_passes < 1 || init_num_passes > num_passes)
        return dpt_error(DPT_EINVAL,
                         "minibatch buffer: init_num_passes is %d, must be in [1, num_passes = %d]",
                         init_num_passes, num_passes);
    if (isnan(timeout_s) || (timeout_s < 0.0 && timeout_s != DPT_WAIT_FOREVER))
        return dpt_error(DPT_EINVAL,
                         "minibatch buffer: timeout %g s must be >= 0 or DPT_WAIT_FOREVER",
                         timeout_s);
    if (!source)
        return dpt_error(DPT_EINVAL, "minibatch buffer: no source function");
    size_t bytes;
    if (dpt_mul_size(size, sizeof(void *) + sizeof(int), &bytes) != 0)
        return dpt_error(DPT_EOVERFLOW, "minibatch buffer: size %zu is too large", size);
    dpt_minibatch_buffer_t *b = calloc(1, sizeof *b);
    if (!b)
        return dpt_error(DPT_ENOMEM, "minibatch buffer: cannot allocate");
    b->items = calloc(size, sizeof *b->items);
    b->ttl = calloc(size, sizeof *b->ttl);
    if (!b->items || !b->ttl) {
        dpt_minibatch_buffer_destroy(b);
        return dpt_error(DPT_ENOMEM, "minibatch buffer: cannot allocate %zu slots", size);
    }
    b->source = source;
    b->source_ctx = source_ctx;
    b->timeout_s = timeout_s;
    b->size = size;
    b->max_ttl = num_passes;
    b->cur_ttl = init_num_passes;
    *out = b;
    return DPT_OK;
}

void dpt_minibatch_buffer_destroy(dpt_minibatch_buffer_t *b)
{
    if (!b)
        return;
    free(b->items);
    free(b->ttl);
    free(b);
}

int dpt_minibatch_buffer_get(dpt_minibatch_buffer_t *b, void **item, int *released)
{
    size_t i = b->idx;
    b->refilled = 0;
    if (b->ttl[i] <= 0) {
        /* Refill. The source runs first, so a failure leaves the buffer as
         * it was and the call can be retried. */
        void *it = NULL;
        dpt_error_clear();
        int rc = b->source(b->source_ctx, &it, b->timeout_s);
        if (rc != 0)
            return dpt_error(rc, "minibatch buffer: %s", dpt__why(rc));
        b->items[i] = it;
        b->ttl[i] = b->cur_ttl;
        b->refilled = 1;
        b->refill_ttl = b->cur_ttl;
        if (b->cur_ttl < b->max_ttl)
            b->cur_ttl++;
    }
    *item = b->items[i];
    b->ttl[i]--;
    *released = b->ttl[i] <= 0;
    if (*released)
        b->items[i] = NULL;
    b->idx = (i + 1) % b->size;
    return DPT_OK;
}

size_t dpt_minibatch_buffer_drain(dpt_minibatch_buffer_t *b, void **items)
{
    size_t n = 0;
    for (size_t k = 0; k < b->size; k++) {
        size_t i = (b->idx + k) % b->size;
        if (b->ttl[i] > 0) {
            items[n++] = b->items[i];
            b->items[i] = NULL;
            b->ttl[i] = 0;
        }
    }
    return n;
}

size_t dpt_minibatch_buffer_size(const dpt_minibatch_buffer_t *b)
{
    return b->size;
}

int dpt_minibatch_buffer_next_ttl(const dpt_minibatch_buffer_t *b)
{
    return b->cur_ttl;
}

/* ---- learner thread -------------------------------------------------------- */

enum { DPT__LEARNER_NEW, DPT__LEARNER_RUNNING, DPT__LEARNER_ENDED };

struct dpt_learner {
    dpt_learner_options_t opt;
    dpt_queue_t *inqueue;
    dpt_queue_t *out;              /* filled result records, oldest first */
    dpt_queue_t *free_slots;       /* result records the learner may fill */
    dpt_learner_result_t *results; /* [result_queue_size] */
    dpt_minibatch_buffer_t *mb;    /* used by the learner thread only */
    void **drained;                /* [minibatch_buffer_size], for destroy */
    pthread_t thread;
    int thread_started; /* owner's thread only */
    int joined;         /* owner's thread only */
    atomic_int stop;

    pthread_mutex_t mu; /* guards everything below */
    int mu_ready;
    int state; /* DPT__LEARNER_* */
    int rc;    /* the learner's status once ended */
    char msg[512];
    double t_start, t_end;
    uint64_t num_steps, env_steps, agent_steps;
    double grad_total_s;
    dpt_window_t dequeue_ms, grad_ms, qsize;
};

void dpt_learner_options_init(dpt_learner_options_t *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->learner_queue_size = 16;
    opt->learner_queue_timeout = 300.0;
    opt->minibatch_buffer_size = 1;
    opt->num_sgd_iter = 1;
    opt->init_num_passes = 0;
    opt->result_queue_size = 1024;
}

int dpt_learner_create(dpt_learner_t **out, const dpt_learner_options_t *opt)
{
    *out = NULL;
    if (!opt->step)
        return dpt_error(DPT_EINVAL, "learner: no step function");
    if (opt->learner_queue_size == 0)
        return dpt_error(DPT_EINVAL, "learner: learner_queue_size must be >= 1");
    if (!(opt->learner_queue_timeout > 0.0) || isinf(opt->learner_queue_timeout))
        return dpt_error(DPT_EINVAL,
                         "learner: learner_queue_timeout is %g s, must be > 0 and finite",
                         opt->learner_queue_timeout);
    if (opt->result_queue_size == 0)
        return dpt_error(DPT_EINVAL, "learner: result_queue_size must be >= 1");
    if (opt->minibatch_buffer_size == 0)
        return dpt_error(DPT_EINVAL, "learner: minibatch_buffer_size must be >= 1");
    if (opt->num_sgd_iter < 1)
        return dpt_error(DPT_EINVAL, "learner: num_sgd_iter is %d, must be >= 1",
                         opt->num_sgd_iter);
    int init = opt->init_num_passes ? opt->init_num_passes : opt->num_sgd_iter;
    if (init < 1 || init > opt->num_sgd_iter)
        return dpt_error(DPT_EINVAL,
                         "learner: init_num_passes is %d, must be in [1, num_sgd_iter = %d] "
                         "(or 0 for num_sgd_iter)",
                         opt->init_num_passes, opt->num_sgd_iter);

    dpt_learner_t *l = calloc(1, sizeof *l);
    if (!l)
        return dpt_error(DPT_ENOMEM, "learner: cannot allocate");
    l->opt = *opt;
    atomic_init(&l->stop, 0);
    int rc;
    if (pthread_mutex_init(&l->mu, NULL) != 0) {
        rc = dpt_error(DPT_ETHREAD, "learner: cannot initialise its mutex");
        goto fail;
    }
    l->mu_ready = 1;
    if ((rc = dpt_queue_create(&l->inqueue, opt->learner_queue_size)) != 0 ||
        (rc = dpt_queue_create(&l->out, opt->result_queue_size)) != 0 ||
        (rc = dpt_queue_create(&l->free_slots, opt->result_queue_size)) != 0) {
        rc = dpt_error(rc, "learner: %s", dpt_last_error());
        goto fail;
    }
    l->results = calloc(opt->result_queue_size, sizeof *l->results);
    l->drained = calloc(opt->minibatch_buffer_size, sizeof *l->drained);
    if (!l->results || !l->drained) {
        rc = dpt_error(DPT_ENOMEM, "learner: cannot allocate %zu result records",
                       opt->result_queue_size);
        goto fail;
    }
    for (size_t i = 0; i < opt->result_queue_size; i++)
        if (dpt_queue_push(l->free_slots, &l->results[i], 0) != 0)
            abort(); /* the queue was made with room for every record */
    if ((rc = dpt_minibatch_buffer_create(&l->mb, opt->minibatch_buffer_size, opt->num_sgd_iter,
                                          init, opt->learner_queue_timeout,
                                          dpt_minibatch_queue_source, l->inqueue)) != 0) {
        rc = dpt_error(rc, "learner: %s", dpt_last_error());
        goto fail;
    }
    if ((rc = dpt_window_init(&l->dequeue_ms, DPT_LEARNER_WINDOW)) != 0 ||
        (rc = dpt_window_init(&l->grad_ms, DPT_LEARNER_WINDOW)) != 0 ||
        (rc = dpt_window_init(&l->qsize, DPT_LEARNER_WINDOW)) != 0) {
        rc = dpt_error(rc, "learner: %s", dpt_last_error());
        goto fail;
    }
    *out = l;
    return DPT_OK;

fail:
    dpt_learner_destroy(l);
    return rc;
}

/* Ends the learner thread with status rc (message: msg when rc != 0) and
 * wakes everyone who waits on it. */
static void dpt__learner_end(dpt_learner_t *l, int rc, const char *msg)
{
    pthread_mutex_lock(&l->mu);
    l->rc = rc;
    if (rc)
        snprintf(l->msg, sizeof l->msg, "%s", msg);
    l->state = DPT__LEARNER_ENDED;
    l->t_end = dpt_now();
    pthread_mutex_unlock(&l->mu);
    dpt_queue_close(l->inqueue);
    dpt_queue_close(l->free_slots);
    dpt_queue_close(l->out);
}

static void *dpt__learner_main(void *arg)
{
    dpt_learner_t *l = arg;
    const dpt_learner_options_t *o = &l->opt;
    char msg[512] = "";
    int rc = 0;
    while (!atomic_load(&l->stop)) {
        if (o->check) {
            dpt_error_clear();
            if ((rc = o->check(o->ctx)) != 0) {
                snprintf(msg, sizeof msg, "learner: health check failed: %s", dpt__why(rc));
                break;
            }
        }
        double t0 = dpt_now();
        void *item = NULL;
        int released = 0;
        rc = dpt_minibatch_buffer_get(l->mb, &item, &released);
        double t1 = dpt_now();
        if (rc == DPT_ECLOSED) { /* stopped, or the producers closed the inqueue */
            rc = 0;
            break;
        }
        if (rc == DPT_ETIMEDOUT) {
            snprintf(msg, sizeof msg,
                     "learner: no item arrived in the learner inqueue within "
                     "learner_queue_timeout = %g s",
                     o->learner_queue_timeout);
            break;
        }
        if (rc != 0) {
            snprintf(msg, sizeof msg, "learner: %s", dpt_last_error());
            break;
        }

        pthread_mutex_lock(&l->mu);
        uint64_t step = l->num_steps + 1;
        pthread_mutex_unlock(&l->mu);
        dpt_learner_result_t res;
        memset(&res, 0, sizeof res);
        res.step = step;
        res.released = released;
        res.first = l->mb->refilled;
        res.passes = l->mb->refilled ? l->mb->refill_ttl : 0;
        dpt_error_clear();
        rc = o->step(o->ctx, item, &res);
        double t2 = dpt_now();
        if (rc == 0 && (res.nstats < 0 || res.nstats > DPT_LEARNER_MAX_STATS))
            rc = dpt_error(DPT_EINVAL, "result has nstats = %d, must be in [0, %d]", res.nstats,
                           DPT_LEARNER_MAX_STATS);
        if (rc != 0)
            snprintf(msg, sizeof msg, "learner: step %llu: %s", (unsigned long long)step,
                     dpt__why(rc));
        /* The item's last pass is over, stepped or not: hand it back. */
        if (released && o->release)
            o->release(o->ctx, item);
        if (rc != 0)
            break;

        /* Statistics first, so that they include every step whose result
         * the owner has popped. */
        double qs = (double)dpt_queue_size(l->inqueue);
        pthread_mutex_lock(&l->mu);
        l->num_steps = step;
        l->env_steps += res.env_steps;
        l->agent_steps += res.agent_steps;
        l->grad_total_s += t2 - t1;
        dpt_window_push(&l->dequeue_ms, 1e3 * (t1 - t0));
        dpt_window_push(&l->grad_ms, 1e3 * (t2 - t1));
        dpt_window_push(&l->qsize, qs);
        pthread_mutex_unlock(&l->mu);

        void *slot = NULL;
        rc = dpt_queue_pop(l->free_slots, &slot, o->learner_queue_timeout);
        if (rc == DPT_ECLOSED) { /* stopped while waiting for room */
            rc = 0;
            break;
        }
        if (rc != 0) {
            snprintf(msg, sizeof msg,
                     "learner: the result queue stayed full (%zu results) for "
                     "learner_queue_timeout = %g s; pop results with dpt_learner_pop_result()",
                     o->result_queue_size, o->learner_queue_timeout);
            break;
        }
        memcpy(slot, &res, sizeof res);
        /* Cannot fail: `out` has room for every record and is closed only
         * by dpt__learner_end, on this thread. */
        if (dpt_queue_push(l->out, slot, 0) != 0)
            abort();
    }
    dpt__learner_end(l, rc, msg);
    return NULL;
}

int dpt_learner_start(dpt_learner_t *l)
{
    if (l->thread_started || atomic_load(&l->stop))
        return dpt_error(DPT_ESTATE, "learner: %s",
                         l->thread_started ? "already started" : "stopped before it started");
    pthread_mutex_lock(&l->mu);
    l->state = DPT__LEARNER_RUNNING;
    l->t_start = dpt_now();
    pthread_mutex_unlock(&l->mu);
    if (pthread_create(&l->thread, NULL, dpt__learner_main, l) != 0) {
        pthread_mutex_lock(&l->mu);
        l->state = DPT__LEARNER_NEW;
        pthread_mutex_unlock(&l->mu);
        return dpt_error(DPT_ETHREAD, "learner: cannot start its thread");
    }
    l->thread_started = 1;
    return DPT_OK;
}

/* The learner's error on the calling thread: its code, after the message. */
static int dpt__learner_status(dpt_learner_t *l)
{
    pthread_mutex_lock(&l->mu);
    int rc = l->state == DPT__LEARNER_ENDED ? l->rc : 0;
    char msg[sizeof l->msg];
    memcpy(msg, l->msg, sizeof msg);
    pthread_mutex_unlock(&l->mu);
    return rc ? dpt_error(rc, "%s", msg) : DPT_OK;
}

int dpt_learner_push(dpt_learner_t *l, void *item, double timeout_s)
{
    int rc = dpt_queue_push(l->inqueue, item, timeout_s);
    if (rc == DPT_ETIMEDOUT)
        return dpt_error(rc, "learner: the learner inqueue is still full (%zu items) after %g s",
                         l->opt.learner_queue_size, timeout_s);
    if (rc == DPT_ECLOSED) {
        int lrc = dpt__learner_status(l);
        if (lrc)
            return dpt_error(DPT_ECLOSED, "learner: not accepting items, it failed: %s",
                             dpt_last_error());
        return dpt_error(DPT_ECLOSED, "learner: not accepting items (stopped, or its inqueue "
                                      "was closed)");
    }
    return rc;
}

dpt_queue_t *dpt_learner_inqueue(dpt_learner_t *l)
{
    return l->inqueue;
}

int dpt_learner_pop_result(dpt_learner_t *l, dpt_learner_result_t *res, double timeout_s)
{
    void *slot = NULL;
    int rc = dpt_queue_pop(l->out, &slot, timeout_s);
    if (rc == DPT_ETIMEDOUT)
        return dpt_error(rc, "learner: no result within %g s", timeout_s);
    if (rc == DPT_ECLOSED) {
        rc = dpt__learner_status(l);
        return rc ? rc : dpt_error(DPT_ECLOSED, "learner: ended, no more results");
    }
    memcpy(res, slot, sizeof *res);
    /* Once the learner has ended (free_slots closed) the record is no
     * longer needed; the check keeps a failing push from leaving an error
     * message behind a success. */
    if (!dpt_queue_is_closed(l->free_slots))
        (void)dpt_queue_push(l->free_slots, slot, 0);
    return DPT_OK;
}

void dpt_learner_stop(dpt_learner_t *l)
{
    atomic_store(&l->stop, 1);
    /* Wakes the thread wherever it waits: for an item, or for room in the
     * outqueue. The outqueue itself stays open until the thread ends, so
     * the result of a step under way still arrives. */
    dpt_queue_close(l->inqueue);
    dpt_queue_close(l->free_slots);
    pthread_mutex_lock(&l->mu);
    int never_started = l->state == DPT__LEARNER_NEW;
    pthread_mutex_unlock(&l->mu);
    if (never_started)
        dpt_queue_close(l->out);
}

int dpt_learner_join(dpt_learner_t *l)
{
    if (!l->thread_started)
        return dpt_error(DPT_ESTATE, "learner: join before start");
    if (!l->joined) {
        if (pthread_join(l->thread, NULL) != 0)
            return dpt_error(DPT_ETHREAD, "learner: cannot join its thread");
        l->joined = 1;
    }
    return dpt__learner_status(l);
}

int dpt_learner_check(dpt_learner_t *l)
{
    return dpt__learner_status(l);
}

int dpt_learner_running(dpt_learner_t *l)
{
    pthread_mutex_lock(&l->mu);
    int r = l->state == DPT__LEARNER_RUNNING;
    pthread_mutex_unlock(&l->mu);
    return r;
}

void dpt_learner_get_stats(dpt_learner_t *l, dpt_learner_stats_t *st)
{
    static const double levels[5] = {0.0, 0.1, 0.5, 0.9, 1.0};
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&l->mu);
    st->num_steps = l->num_steps;
    st->env_steps_trained = l->env_steps;
    st->agent_steps_trained = l->agent_steps;
    st->learner_dequeue_time_ms = dpt_window_mean(&l->dequeue_ms);
    st->learner_grad_time_ms = dpt_window_mean(&l->grad_ms);
    if (l->state != DPT__LEARNER_NEW) {
        double end = l->state == DPT__LEARNER_ENDED ? l->t_end : dpt_now();
        double wall = end - l->t_start;
        st->learner_utilization = wall > 0.0 ? fmin(1.0, l->grad_total_s / wall) : 0.0;
    }
    st->size_count = l->qsize.count;
    st->size_mean = dpt_window_mean(&l->qsize);
    st->size_std = dpt_window_std(&l->qsize);
    for (int i = 0; i < 5; i++)
        st->size_quantiles[i] = dpt_window_quantile(&l->qsize, levels[i]);
    pthread_mutex_unlock(&l->mu);
}

void dpt_learner_destroy(dpt_learner_t *l)
{
    if (!l)
        return;
    if (l->thread_started) {
        dpt_learner_stop(l);
        if (!l->joined)
            pthread_join(l->thread, NULL);
    }
    /* Hand back what the learner still owns: items held by the buffer,
     * then those left in the inqueue (closed here, so the pops drain it). */
    if (l->opt.release && l->mb && l->drained) {
        size_t n = dpt_minibatch_buffer_drain(l->mb, l->drained);
        for (size_t i = 0; i < n; i++)
            l->opt.release(l->opt.ctx, l->drained[i]);
    }
    if (l->opt.release && l->inqueue) {
        dpt_queue_close(l->inqueue);
        void *item;
        /* Size first: the last pop would overwrite the caller's error
         * message (destroy also runs on create's failure path). */
        while (dpt_queue_size(l->inqueue) > 0 && dpt_queue_pop(l->inqueue, &item, 0) == 0)
            l->opt.release(l->opt.ctx, item);
    }
    dpt_minibatch_buffer_destroy(l->mb);
    dpt_window_deinit(&l->dequeue_ms);
    dpt_window_deinit(&l->grad_ms);
    dpt_window_deinit(&l->qsize);
    free(l->drained);
    free(l->results);
    dpt_queue_destroy(l->free_slots);
    dpt_queue_destroy(l->out);
    dpt_queue_destroy(l->inqueue);
    if (l->mu_ready)
        pthread_mutex_destroy(&l->mu);
    free(l);
}
