/* Spin-then-sleep barrier and change notification (see sync.h). */
#include "sync.h"
#include "dpt/status.h"

#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DPT__PAUSE() _mm_pause()
#else
#define DPT__PAUSE() ((void)0)
#endif

static int64_t dpt__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int dpt__barrier_init(dpt__barrier_t *b, unsigned n, int64_t spin_ns)
{
    b->n = n;
    atomic_init(&b->arrived, 0);
    atomic_init(&b->generation, 0);
    atomic_init(&b->sleepers, 0);
    if (spin_ns < 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        spin_ns = (long)n <= (cpus > 0 ? cpus : 1) ? 50000 : 2000;
    }
    b->spin_ns = spin_ns;
    if (pthread_mutex_init(&b->mu, NULL) != 0)
        return dpt_error(DPT_ETHREAD, "barrier: cannot create a mutex");
    if (pthread_cond_init(&b->cv, NULL) != 0) {
        pthread_mutex_destroy(&b->mu);
        return dpt_error(DPT_ETHREAD, "barrier: cannot create a condition variable");
    }
    return DPT_OK;
}

void dpt__barrier_destroy(dpt__barrier_t *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

void dpt__notify(dpt__barrier_t *b)
{
    if (atomic_load(&b->sleepers) > 0) {
        pthread_mutex_lock(&b->mu);
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
}

void dpt__wait_change(dpt__barrier_t *b, atomic_uint *word, unsigned old)
{
    if (atomic_load(word) != old)
        return;
    int64_t deadline = dpt__now_ns() + b->spin_ns;
    for (unsigned i = 0;; i++) {
        if (atomic_load(word) != old)
            return;
        DPT__PAUSE();
        /* Reading the clock costs ~20 ns: look at it every 64 spins. */
        if ((i & 63) == 63 && dpt__now_ns() > deadline)
            break;
    }
    pthread_mutex_lock(&b->mu);
    atomic_fetch_add(&b->sleepers, 1);
    while (atomic_load(word) == old)
        pthread_cond_wait(&b->cv, &b->mu);
    atomic_fetch_sub(&b->sleepers, 1);
    pthread_mutex_unlock(&b->mu);
}

void dpt__barrier_wait(dpt__barrier_t *b)
{
    if (b->n <= 1)
        return;
    unsigned gen = atomic_load(&b->generation);
    if (atomic_fetch_add(&b->arrived, 1) + 1 == b->n) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->generation, 1);
        dpt__notify(b);
        return;
    }
    dpt__wait_change(b, &b->generation, gen);
}
