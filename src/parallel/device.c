/*
 * CPU device pool: persistent workers waiting on a job generation counter
 * (spinning briefly, then sleeping: see sync.h).
 *
 * Device 0 is the calling thread: run() executes device 0's share itself,
 * so a one-device pool costs no thread hand-off at all, and N devices cost
 * N - 1 wake-ups. Devices 1..N-1 are persistent workers. Protocol: run()
 * stores the job, bumps `job_gen` and notifies; each worker runs the job
 * once per generation, stores its status, and the last one to finish bumps
 * `done_gen`. Idle workers spin for at most 50 us, then sleep.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include "dpt/device.h"
#include "dpt/status.h"
#include "core/prof.h"
#include "sync.h"

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
    dpt__barrier_t sync;   /* spin-then-sleep waits on the counters below */
    atomic_uint job_gen;   /* bumped once per job (and to stop) */
    atomic_uint done_gen;  /* bumped when the last worker finishes a job */
    atomic_uint remaining; /* workers still running the current job */
    atomic_int stop;
    int sync_ready;
    dpt_device_fn fn; /* the job: written before job_gen is bumped */
    void *arg;
    dpt__worker_t *workers;
};

static void *dpt__worker_main(void *p)
{
    dpt__worker_t *w = p;
    dpt_device_pool_t *pool = w->pool;
    unsigned seen = 0;
    dpt__prof_bind(w->index);
    for (;;) {
        dpt__wait_change(&pool->sync, &pool->job_gen, seen);
        seen = atomic_load(&pool->job_gen);
        if (atomic_load(&pool->stop))
            break;
        dpt_error_clear();
        dpt__prof_start();
        int rc = pool->fn(pool->arg, w->index);
        w->rc = rc;
        if (rc)
            snprintf(w->msg, sizeof w->msg, "%s", dpt_last_error());
        if (atomic_fetch_sub(&pool->remaining, 1) == 1) {
            atomic_fetch_add(&pool->done_gen, 1);
            dpt__notify(&pool->sync);
        }
    }
    return NULL;
}

void dpt_device_pool_destroy(dpt_device_pool_t *pool)
{
    if (!pool)
        return;
    if (pool->sync_ready) {
        atomic_store(&pool->stop, 1);
        atomic_fetch_add(&pool->job_gen, 1);
        dpt__notify(&pool->sync);
        for (int i = 0; i < pool->n; i++)
            if (pool->workers[i].started)
                pthread_join(pool->workers[i].thread, NULL);
        dpt__barrier_destroy(&pool->sync);
    }
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
    atomic_init(&pool->job_gen, 0);
    atomic_init(&pool->done_gen, 0);
    atomic_init(&pool->remaining, 0);
    atomic_init(&pool->stop, 0);
    if (dpt__barrier_init(&pool->sync, (unsigned)n, -1) != 0) {
        free(pool->workers);
        free(pool);
        return dpt_error(DPT_ETHREAD, "device pool: cannot initialise synchronisation");
    }
    pool->sync_ready = 1;
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
    unsigned done = atomic_load(&pool->done_gen);
    if (pool->n > 1) {
        pool->fn = fn;
        pool->arg = arg;
        atomic_store(&pool->remaining, (unsigned)(pool->n - 1));
        atomic_fetch_add(&pool->job_gen, 1);
        dpt__notify(&pool->sync);
    }
    /* Device 0's share, on this thread; its message is kept like the
     * workers' so the report below can name the device. */
    dpt__worker_t *w0 = &pool->workers[0];
    dpt_error_clear();
    dpt__prof_lap(DPT_PROF_DISPATCH);
    w0->rc = fn(arg, 0);
    if (w0->rc)
        snprintf(w0->msg, sizeof w0->msg, "%s", dpt_last_error());
    if (pool->n > 1)
        dpt__wait_change(&pool->sync, &pool->done_gen, done);
    dpt__prof_lap(DPT_PROF_JOIN);
    for (int i = 0; i < pool->n; i++)
        if (pool->workers[i].rc)
            return dpt_error(pool->workers[i].rc, "device %d: %s", i, pool->workers[i].msg);
    return DPT_OK;
}
