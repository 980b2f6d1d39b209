/*
 * Internal: a reusable barrier that spins briefly, then sleeps.
 *
 * Devices meet several times per training step; a pthread barrier always
 * goes through the kernel (futex wake-ups cost tens of microseconds on these
 * VMs), which is most of a small model's step. Here a waiter spins on a
 * generation counter for up to `spin_ns` (with a pause instruction), then
 * blocks on a condition variable; the last arrival bumps the generation and
 * wakes sleepers only when there are any. No core burns indefinitely.
 *
 * Correctness of the sleep: a waiter announces itself (sleepers++) and then
 * re-reads the generation; the releaser bumps the generation and then reads
 * sleepers. Both are sequentially consistent, so at least one of them sees
 * the other's write: either the waiter does not sleep, or the releaser takes
 * the lock and broadcasts (and the waiter checks the generation under that
 * same lock before waiting).
 */
#ifndef DPT_PARALLEL_SYNC_H
#define DPT_PARALLEL_SYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct dpt__barrier {
    unsigned n;
    atomic_uint arrived;
    atomic_uint generation;
    atomic_uint sleepers;
    int64_t spin_ns;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} dpt__barrier_t;

/* n participants; spin_ns < 0 picks 50 us when n <= online CPUs, else 2 us.
 * Returns 0 or DPT_ETHREAD. */
int dpt__barrier_init(dpt__barrier_t *b, unsigned n, int64_t spin_ns);
void dpt__barrier_destroy(dpt__barrier_t *b);
void dpt__barrier_wait(dpt__barrier_t *b);

/* Waits until *word != old: spins up to spin_ns, then sleeps on b's
 * condition variable (whoever changes *word must call dpt__barrier_notify
 * with the same b). Used for "a new job is ready" in the device pool. */
void dpt__wait_change(dpt__barrier_t *b, atomic_uint *word, unsigned old);
void dpt__notify(dpt__barrier_t *b);

#endif
