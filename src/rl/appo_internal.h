/*
 * Test hooks of the APPO/IMPALA engine (src/rl/appo.c). Internal: tests
 * include it; the library itself never sets them.
 */
#ifndef DPT_RL_APPO_INTERNAL_H
#define DPT_RL_APPO_INTERNAL_H

#include <stdatomic.h>

/* When > 0, counts down once per batch a loader thread is about to load
 * (num_multi_gpu_tower_stacks > 1); the loader that brings it to 0 fails
 * with DPT_EIO "appo loader K: injected failure (test hook)", as a loader
 * whose load failed would. 0 (the default): no effect. */
extern atomic_int dpt__appo_test_loader_fail_at;

#endif /* DPT_RL_APPO_INTERNAL_H */
