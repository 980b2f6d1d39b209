/*
 * Internal: the one spin-wait of dpt. Used where a thread waits for others
 * that are about to arrive (towers' barriers, the device pool, the threads
 * collectives): a short spin avoids a futex sleep and wake-up (tens of
 * microseconds on these VMs) when the wait is short; after `spin_s` the
 * caller blocks on its condition variable, so no core burns for long.
 *
 * The spin executes a pause instruction between checks, or sched_yield()
 * when the waiters outnumber the CPUs (`yield`: the waiter then hands its
 * CPU to the thread it waits for). The clock is read every 64 rounds (every
 * 8 when yielding): it costs about 20 ns.
 */
#ifndef DPT_CORE_SPIN_H
#define DPT_CORE_SPIN_H

#include "dpt/stats.h"

#include <sched.h>

static inline void dpt__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins until done(ctx) returns non-zero (then returns 1) or about spin_s
 * seconds have passed (then returns 0, with *t0 the time the spin started,
 * by dpt_now(), for the caller's own timeout). */
static inline int dpt__spin_until(int (*done)(void *ctx), void *ctx, double spin_s, int yield,
                                  double *t0)
{
    double start = 0.0;
    for (unsigned it = 1;; it++) {
        if (done(ctx))
            return 1;
        if (yield)
            sched_yield();
        else
            dpt__cpu_relax();
        if ((it & (yield ? 7u : 63u)) == 0) {
            double now = dpt_now();
            if (start == 0.0) {
                start = now;
            } else if (now - start >= spin_s) {
                if (t0)
                    *t0 = start;
                return 0;
            }
        }
    }
}

#endif
