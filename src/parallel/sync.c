/* Spin-then-sleep barrier and change notification (see sync.h). */
#include "sync.h"
#include "dpt/status.h"

#include "core/spin.h"

#include <unistd.h>

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

typedef struct dpt__change {
    atomic_uint *word;
    unsigned old;
} dpt__change_t;

static int dpt__changed(void *ctx)
{
    const dpt__change_t *c = ctx;
    return atomic_load(c->word) != c->old;
}

void dpt__wait_change(dpt__barrier_t *b, atomic_uint *word, unsigned old)
{
    dpt__change_t c = {word, old};
    if (dpt__spin_until(dpt__changed, &c, (double)b->spin_ns * 1e-9, 0, NULL))
        return;
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
