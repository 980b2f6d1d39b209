/*
 * dpt/profile.h — where the time of a training step goes.
 *
 * A process-wide, off-by-default phase profiler. While it is enabled, the
 * library's PPO path charges wall time to the phases below, per device:
 * device d of a towers engine (and the thread that called
 * dpt_profile_enable(), which runs device 0 and the sampling) each own one
 * slot; DD-PPO's worker w charges slot w (device 0 of its own engine).
 * Every charge is "the time since this thread's previous charge", so the
 * phases of a slot add up to that thread's busy time. Other threads
 * (APPO's samplers and learner) are not profiled, and several engines
 * whose device threads share an index (DD-PPO workers with num_devices >
 * 1) would share slots: profile one engine at a time. When disabled, the
 * cost is one relaxed atomic load per phase boundary.
 *
 * Reading a slot while its thread is still charging it is a data race: read
 * between training calls (after they returned), as `dpt bench ppo
 * --profile` does.
 */
#ifndef DPT_PROFILE_H
#define DPT_PROFILE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The phases: symbol, name printed by the benchmark.
 *   env_step      stepping the envs while sampling
 *   act           the policy's forward pass while sampling (actions, values)
 *   sample_other  the rest of sampling: bootstrap values, GAE, episode stats
 *   batch         shuffling and gathering the batch, advantage normalization,
 *                 loading it into the towers
 *   dispatch      starting a step on the devices and combining their
 *                 statistics afterwards (the calling thread)
 *   forward       the model's forward pass (towers)
 *   loss          the loss and its gradient at the outputs
 *   backward      the model's backward pass
 *   wait_grads    waiting at the barrier after every device's backward pass
 *   reduce        combining the towers' gradients (with the sum of squares)
 *   wait_reduce   waiting at the barrier after the reduction
 *   norm          the global norm from the slices' sums
 *   clip          scaling the gradient by the clip factor (the mirrored ps
 *                 step multiplies inside apply instead)
 *   apply         the optimizer's update
 *   join          device 0 waiting for the other devices to finish the step
 *   learn_other   the learn loop's own work between steps (minibatch order,
 *                 statistics)
 *   outside       between two iterations: the caller's own work (results,
 *                 files, checkpoints) */
#define DPT_PROFILE_PHASE_LIST(X)            \
    X(DPT_PROF_ENV_STEP, "env_step")         \
    X(DPT_PROF_ACT, "act")                   \
    X(DPT_PROF_SAMPLE_OTHER, "sample_other") \
    X(DPT_PROF_BATCH, "batch")               \
    X(DPT_PROF_DISPATCH, "dispatch")         \
    X(DPT_PROF_FORWARD, "forward")           \
    X(DPT_PROF_LOSS, "loss")                 \
    X(DPT_PROF_BACKWARD, "backward")         \
    X(DPT_PROF_WAIT_GRADS, "wait_grads")     \
    X(DPT_PROF_REDUCE, "reduce")             \
    X(DPT_PROF_WAIT_REDUCE, "wait_reduce")   \
    X(DPT_PROF_NORM, "norm")                 \
    X(DPT_PROF_CLIP, "clip")                 \
    X(DPT_PROF_APPLY, "apply")               \
    X(DPT_PROF_JOIN, "join")                 \
    X(DPT_PROF_LEARN_OTHER, "learn_other")   \
    X(DPT_PROF_OUTSIDE, "outside")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_profile_phase {
#define DPT__PROF_ENUM(sym, name) sym,
    DPT_PROFILE_PHASE_LIST(DPT__PROF_ENUM)
#undef DPT__PROF_ENUM
    DPT_PROF_PHASES
} dpt_profile_phase_t;
/* clang-format on */

/* The most slots (devices) the profiler keeps; devices past it are not
 * profiled. */
#define DPT_PROFILE_SLOTS 64

/* One slot's totals since the last reset. */
typedef struct dpt_profile {
    double seconds[DPT_PROF_PHASES]; /* wall time charged to each phase */
    uint64_t count[DPT_PROF_PHASES]; /* how many times it was charged */
} dpt_profile_t;

/* Turns the profiler on (1) or off (0). Turning it on makes the calling
 * thread slot 0 (it should be the thread that drives the training: device
 * 0 of the towers runs on it). Totals are kept: see dpt_profile_reset(). */
void dpt_profile_enable(int on);
/* 1 while enabled. */
int dpt_profile_enabled(void);
/* Zeroes every slot. Call while no profiled thread is working. */
void dpt_profile_reset(void);
/* Copies slot `slot` into *out. Returns 0, or DPT_EINVAL when slot is out
 * of [0, DPT_PROFILE_SLOTS). */
int dpt_profile_get(int slot, dpt_profile_t *out);
/* The phase's name ("forward", ...), or "?" out of range. */
const char *dpt_profile_phase_name(int phase);

#ifdef __cplusplus
}
#endif
#endif
