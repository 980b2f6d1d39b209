/*
 * dpt/device.h — devices: where a tower's work runs.
 *
 * A device pool owns N devices: device 0 is the thread that calls
 * dpt_device_pool_run() (so one device costs no thread hand-off), devices
 * 1..N-1 are persistent worker threads created once. The engine hands the
 * pool a job — one function called as fn(arg, device) on every device at
 * once — and dpt_device_pool_run() returns when every device has finished
 * it (fork–join). Today every device is a CPU thread, optionally
 * pinned to a core; the number of devices may exceed the number of cores
 * (tests use that). A GPU device would add a kind here without changing the
 * engines, which only see "device i runs this job".
 */
#ifndef DPT_DEVICE_H
#define DPT_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_DEVICE_KIND_LIST(X) X(DPT_DEVICE_CPU, "cpu")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_device_kind {
#define DPT__DEVICE_ENUM(sym, name) sym,
    DPT_DEVICE_KIND_LIST(DPT__DEVICE_ENUM)
#undef DPT__DEVICE_ENUM
    DPT_DEVICE_KIND_COUNT
} dpt_device_kind_t;
/* clang-format on */

typedef struct dpt_device_pool dpt_device_pool_t;

/* A job: runs on device `device` (0..N-1) and returns 0 or a DPT_E... code
 * (with a dpt_error() message, which the pool carries back to the caller). */
typedef int (*dpt_device_fn)(void *arg, int device);

/* Creates `n` (>= 1) CPU devices. With pin != 0, worker device i (i >= 1)
 * is pinned to CPU i mod (online CPUs) (a failure to pin is not an error;
 * device 0 is the caller's thread and keeps its affinity). Errors:
 * DPT_EINVAL, DPT_ENOMEM, DPT_ETHREAD. */
int dpt_device_pool_create(dpt_device_pool_t **pool, int n, int pin);
/* Stops and joins the threads. NULL is a no-op. No job may be running. */
void dpt_device_pool_destroy(dpt_device_pool_t *pool);

int dpt_device_pool_size(const dpt_device_pool_t *pool);
dpt_device_kind_t dpt_device_pool_kind(const dpt_device_pool_t *pool, int device);

/* Runs fn(arg, i) on every device i and waits for all. Returns 0 when every
 * device returned 0; otherwise the code of the lowest-numbered failing
 * device, with its message prefixed by "device i: " as this thread's
 * dpt_last_error(). Not reentrant: one job at a time per pool. */
int dpt_device_pool_run(dpt_device_pool_t *pool, dpt_device_fn fn, void *arg);

#ifdef __cplusplus
}
#endif
#endif /* DPT_DEVICE_H */
