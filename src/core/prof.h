/*
 * Internal side of dpt/profile.h: the phase boundaries the library marks.
 *   dpt__prof_bind(slot)  the calling thread charges slot `slot` from now on
 *                         (-1: nothing); device threads bind at start
 *   dpt__prof_start()     starts this thread's clock without charging (the
 *                         start of a device job: the idle time before it
 *                         is nobody's)
 *   dpt__prof_lap(phase)  charges the time since this thread's previous
 *                         mark to `phase`
 */
#ifndef DPT_CORE_PROF_H
#define DPT_CORE_PROF_H

#include "dpt/profile.h"

#include <stdatomic.h>

extern atomic_int dpt__prof_on;

void dpt__prof_bind(int slot);
void dpt__prof_start_slow(void);
void dpt__prof_lap_slow(int phase);

static inline void dpt__prof_start(void)
{
    if (atomic_load_explicit(&dpt__prof_on, memory_order_relaxed))
        dpt__prof_start_slow();
}

static inline void dpt__prof_lap(int phase)
{
    if (atomic_load_explicit(&dpt__prof_on, memory_order_relaxed))
        dpt__prof_lap_slow(phase);
}

#endif
