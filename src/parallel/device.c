/*
 * CPU device pool: persistent workers waiting on a job generation counter.
 *
 * Device 0 is the calling thread: run() executes device 0's share itself,
 * so a one-device pool costs no thread hand-off at all, and N devices cost
 * N - 1 wake-ups. Devices 1..N-1 are persistent workers. Protocol (all
 * under `mu`): run() stores the job, bumps `generation` and broadcasts
 * `go`; each worker runs the job once per generation, stores its status,
 * and the last one to finish signals `done`. Workers sleep on the
 * condition variable between jobs, so idle devices burn no CPU.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include "dpt/device.h"
#include "dpt/status.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct dpt__worker {
    dpt_device_pool_t *pool;
    int index;
    pthread_t thread;
    int started;
    int rc;
    char msg[512];
} dpt__worker_t;

struct dpt_device_pool {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t go;
    pthread_cond_t done;
    unsigned long generation;
    int remaining;
    int stop;
    dpt_device_fn fn;
    void *arg;
    dpt__worker_t *workers;
};

static void *dpt__worker_main(void *p)
{
    dpt__worker_t *w = p;
    dpt_device_pool_t *pool = w->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (pool->generation == seen && !pool->stop)
            pthread_cond_wait(&pool->go, &pool->mu);
        if (pool->stop)
            break;
        seen = pool->generation;
        dpt_device_fn fn = pool->fn;
        void *arg = pool->arg;
        pthread_mutex_unlock(&pool->mu);

        dpt_error_clear();
        int rc = fn(arg, w->index);
        w->rc = rc;
        if (rc)
            snprintf(w->msg, sizeof w->msg, "%s", dpt_last_error());

        pthread_mutex_lock(&pool->mu);
        if (--pool->remaining == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

void dpt_device_pool_destroy(dpt_device_pool_t *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->go);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n; i++)
        if (pool->workers[i].started)
            pthread_join(pool->workers[i].thread, NULL);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->go);
    pthread_mutex_destroy(&pool->mu);
    free(pool->workers);
    free(pool);
}

int dpt_device_pool_create(dpt_device_pool_t **out, int n, int pin)
{
    *out = NULL;
    if (n < 1)
        return dpt_error(DPT_EINVAL, "device pool: %d devices (need >= 1)", n);
    dpt_device_pool_t *pool = calloc(1, sizeof *pool);
    if (!pool)
        return dpt_error(DPT_ENOMEM, "device pool: cannot allocate");
    pool->workers = calloc((size_t)n, sizeof *pool->workers);
    if (!pool->workers) {
        free(pool);
        return dpt_error(DPT_ENOMEM, "device pool: cannot allocate %d workers", n);
    }
    if (pthread_mutex_init(&pool->mu, NULL) || pthread_cond_init(&pool->go, NULL) ||
        pthread_cond_init(&pool->done, NULL)) {
        free(pool->workers);
        free(pool);
        return dpt_error(DPT_ETHREAD, "device pool: cannot initialise synchronisation");
    }
    pool->n = n;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        cpus = 1;
    pool->workers[0].pool = pool; /* device 0 runs on the caller's thread */
    for (int i = 1; i < n; i++) {
        dpt__worker_t *w = &pool->workers[i];
        w->pool = pool;
        w->index = i;
        if (pthread_create(&w->thread, NULL, dpt__worker_main, w) != 0) {
            dpt_device_pool_destroy(pool);
            return dpt_error(DPT_ETHREAD, "device pool: cannot start the thread of device %d", i);
        }
        w->started = 1;
        if (pin) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET((int)(i % cpus), &set);
            (void)pthread_setaffinity_np(w->thread, sizeof set, &set); /* best effort */
        }
    }
    *out = pool;
    return DPT_OK;
}

int dpt_device_pool_size(const dpt_device_pool_t *pool)
{
    return pool->n;
}

dpt_device_kind_t dpt_device_pool_kind(const dpt_device_pool_t *pool, int device)
{
    (void)pool, (void)device;
    return DPT_DEVICE_CPU;
}

int dpt_device_pool_run(dpt_device_pool_t *pool, dpt_device_fn fn, void *arg)
{
    if (pool->n > 1) {
        pthread_mutex_lock(&pool->mu);
        pool->fn = fn;
        pool->arg = arg;
        pool->remaining = pool->n - 1;
        pool->generation++;
        pthread_cond_broadcast(&pool->go);
        pthread_mutex_unlock(&pool->mu);
    }
    /* Device 0's share, on this thread; its message is kept like the
     * workers' so the report below can name the device. */
    dpt__worker_t *w0 = &pool->workers[0];
    dpt_error_clear();
    w0->rc = fn(arg, 0);
    if (w0->rc)
        snprintf(w0->msg, sizeof w0->msg, "%s", dpt_last_error());
    if (pool->n > 1) {
        pthread_mutex_lock(&pool->mu);
        while (pool->remaining > 0)
            pthread_cond_wait(&pool->done, &pool->mu);
        pthread_mutex_unlock(&pool->mu);
    }
    for (int i = 0; i < pool->n; i++)
        if (pool->workers[i].rc) {
            return dpt_error(pool->workers[i].rc, "device %d: %s", i, pool->workers[i].msg);
        }
    return DPT_OK;
}
