/*
 * Internal: condition variables on the monotonic clock and their deadlines,
 * so that a timed wait is not stretched or cut by a wall-clock jump. Used by
 * the queue, the collectives' threads backend and the sync-replicas service.
 */
#ifndef DPT_CORE_CLOCK_H
#define DPT_CORE_CLOCK_H

#include <pthread.h>
#include <time.h>

/* pthread_cond_init with CLOCK_MONOTONIC. Returns 0 or an errno value. */
int dpt__cond_init_monotonic(pthread_cond_t *c);

/* The CLOCK_MONOTONIC time timeout_s (>= 0) seconds from now, for
 * pthread_cond_timedwait on a condition made by dpt__cond_init_monotonic. */
struct timespec dpt__deadline(double timeout_s);

#endif
