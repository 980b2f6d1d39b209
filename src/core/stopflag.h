/*
 * Internal: reading a stop flag (dpt_run_options_t.stop_flag and the like)
 * that a signal handler sets while other threads run. The load is atomic,
 * so that it is one for race detectors too (a signal may be handled on any
 * thread of the process); the writer stores 1 with a plain or an atomic
 * store (the dpt command's handler uses an atomic one).
 */
#ifndef DPT_CORE_STOPFLAG_H
#define DPT_CORE_STOPFLAG_H

#include <signal.h>

/* 1 when flag is not NULL and set. */
static inline int dpt__stop_flag_set(const volatile sig_atomic_t *flag)
{
    return flag != NULL && __atomic_load_n(flag, __ATOMIC_RELAXED) != 0;
}

#endif
