/*
 * dpt/learner.h — the asynchronous learner: a minibatch buffer and a
 * learner thread (RLlib's MinibatchBuffer and LearnerThread, for APPO and
 * IMPALA).
 *
 * Producers (sampler threads, or loader threads that fill tower stacks)
 * push items into the learner's bounded inqueue; a background thread takes
 * them through a minibatch buffer, which hands each item out for several
 * passes, and calls the owner's step function on each; every successful
 * step puts a result (env steps, agent steps, a few statistics) into an
 * outqueue that the owner pops.
 *
 *   producers --push--> inqueue --> minibatch buffer --> step(item)
 *                       (bounded)   (size slots, TTLs)      |
 *   owner <--pop_result-- outqueue <------------------------+
 *
 * Items are opaque pointers; who owns them is the caller's protocol. With a
 * release function, the learner hands every item it accepted back through
 * it exactly once: after the step of its last pass, or, for items still
 * queued or held when the learner is destroyed, from dpt_learner_destroy().
 *
 * Minibatch buffer: a ring of `size` slots, each holding an item and a
 * time-to-live (TTL, the passes left). One get():
 *   1. if the current slot's TTL is 0, it takes the next item from the
 *      source (waiting at most timeout_s) and gives it TTL = ttl, the
 *      current initial TTL; then, if ttl < num_passes, ttl grows by one;
 *   2. it returns the slot's item and decrements its TTL; `released` is 1
 *      when the TTL reached 0 (the item's last pass: the buffer forgets it
 *      and refills the slot on a later get);
 *   3. it moves to the next slot (cyclically).
 * ttl starts at init_num_passes, so the first items get fewer passes while
 * the buffer warms up: with size 1, init 1 and num_passes 4, items 1, 2, 3
 * come out 1, 2 and 3 times, every later item 4 times. A get whose source
 * times out or fails changes nothing, so it can be retried.
 *
 * Learner thread, one step (RLlib's order):
 *   check()                      the owner's health check, when given
 *   item, released = get()       timed: learner_dequeue_time_ms
 *   step(item, &result)          timed: learner_grad_time_ms
 *   release(item) if released
 *   statistics, and the inqueue's size -> the size window
 *   result -> outqueue
 * (RLlib samples the size after the put; here the statistics come first,
 * so that they cover every step whose result the owner has popped.)
 * It ends when stopped, when its inqueue is closed and drained (a clean
 * end, status 0), or on an error (a failing check or step function, no item
 * within learner_queue_timeout, a full outqueue for as long); then it
 * closes its queues, so blocked producers and dpt_learner_pop_result()
 * wake up, and dpt_learner_join() and dpt_learner_check() report the error
 * with its message on the calling thread.
 *
 * Several devices: loader threads take a batch from the samplers and an
 * idle tower stack, load the one into the other and push the stack to the
 * learner; the step function optimizes on the stack, release() puts it back
 * on the idle list, and check() reports a loader that died. The learner's
 * passes over a stack then reuse the loaded data.
 *
 * Threads: push and pop_result may be called from any threads; start,
 * join and destroy from the owner's thread; stop from any thread, the step
 * function included; join never from the step function.
 */
#ifndef DPT_LEARNER_H
#define DPT_LEARNER_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/queue.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- minibatch buffer ---------------------------------------------------- */

/* Where a minibatch buffer takes items: stores the next one in *item,
 * waiting at most timeout_s seconds (DPT_WAIT_FOREVER: no limit). Returns 0,
 * DPT_ETIMEDOUT, DPT_ECLOSED (no more items) or another DPT_E... code, with
 * a message (dpt_error). */
typedef int (*dpt_minibatch_source_fn)(void *ctx, void **item, double timeout_s);

/* The source for a dpt_queue_t (pass the queue as ctx): dpt_queue_pop(). */
int dpt_minibatch_queue_source(void *queue, void **item, double timeout_s);

typedef struct dpt_minibatch_buffer dpt_minibatch_buffer_t;

/* Creates a buffer of `size` (>= 1) slots, giving items at most num_passes
 * (>= 1, RLlib's num_sgd_iter) passes, starting at init_num_passes (1 ..
 * num_passes). Each refill waits at most timeout_s seconds (>= 0, or
 * DPT_WAIT_FOREVER) for source(source_ctx, ...); source_ctx is borrowed.
 * Errors: DPT_EINVAL naming the argument, DPT_EOVERFLOW, DPT_ENOMEM. */
int dpt_minibatch_buffer_create(dpt_minibatch_buffer_t **b, size_t size, int num_passes,
                                int init_num_passes, double timeout_s,
                                dpt_minibatch_source_fn source, void *source_ctx);
/* Frees the buffer (not the items it still holds: see drain). NULL is a
 * no-op. */
void dpt_minibatch_buffer_destroy(dpt_minibatch_buffer_t *b);

/* One pass (the steps in the header comment): *item is the item, *released
 * is 1 on its last pass, 0 otherwise. Errors (nothing changed): those of
 * the source, with its message after "minibatch buffer: ". Not
 * thread-safe: one caller at a time. */
int dpt_minibatch_buffer_get(dpt_minibatch_buffer_t *b, void **item, int *released);

/* Moves the items still held (TTL > 0) into items[0..n), in the order a
 * get() would reach their slots, and empties those slots; returns n
 * (<= size; `items` has room for size pointers). For handing items back
 * when the buffer is no longer used. */
size_t dpt_minibatch_buffer_drain(dpt_minibatch_buffer_t *b, void **items);

/* The slot count, and the TTL the next refill will give (for tests and
 * reports). */
size_t dpt_minibatch_buffer_size(const dpt_minibatch_buffer_t *b);
int dpt_minibatch_buffer_next_ttl(const dpt_minibatch_buffer_t *b);

/* ---- learner thread -------------------------------------------------------- */

/* Numbers per result a step function may report (loss terms, grad norm...). */
#define DPT_LEARNER_MAX_STATS 8
/* Samples kept by the learner's windows (queue sizes, step times). */
#define DPT_LEARNER_WINDOW 50

/* One step's result: what the outqueue carries. */
typedef struct dpt_learner_result {
    /* Set by the learner: the step's number (1 for the first), 1 when
     * this was the item's last pass, and, on an item's first pass (`first`
     * = 1, it was just taken from the inqueue), the passes it gets (its
     * TTL in the minibatch buffer; 0 on later passes). */
    uint64_t step;
    int released;
    int first;
    int passes;
    /* Set by the step function: env steps and agent steps trained on (equal
     * with one agent per env), and up to DPT_LEARNER_MAX_STATS numbers of
     * its own (loss terms, grad norm...) in stats[0..nstats). */
    uint64_t env_steps;
    uint64_t agent_steps;
    int nstats;
    double stats[DPT_LEARNER_MAX_STATS];
} dpt_learner_result_t;

/* The owner's learning step on `item` (borrowed; valid until released).
 * `res` comes zeroed except for step, released, first and passes. Returns 0, or a DPT_E...
 * code with a message (dpt_error), which ends the learner. Runs on the
 * learner thread. */
typedef int (*dpt_learner_step_fn)(void *ctx, void *item, dpt_learner_result_t *res);
/* Hands an item back (see the header comment). Must not fail. */
typedef void (*dpt_learner_release_fn)(void *ctx, void *item);
/* A health check before each step (e.g. "are the loader threads alive?"):
 * 0, or a DPT_E... code with a message, which ends the learner. */
typedef int (*dpt_learner_check_fn)(void *ctx);

typedef struct dpt_learner_options {
    /* Inqueue capacity; default 16. */
    size_t learner_queue_size;
    /* Seconds (> 0, finite) the learner waits for an item, or for room in
     * the outqueue, before it fails; default 300. */
    double learner_queue_timeout;
    /* Slots of the minibatch buffer; default 1. */
    size_t minibatch_buffer_size;
    /* Passes per item (num_passes); default 1. */
    int num_sgd_iter;
    /* Passes of the first item, 1..num_sgd_iter; 0 (the default) means
     * num_sgd_iter, as RLlib's learner thread. */
    int init_num_passes;
    /* Outqueue capacity; default 1024. */
    size_t result_queue_size;
    /* The step function (required), release and check (optional), and the
     * ctx passed to all three (borrowed). */
    dpt_learner_step_fn step;
    dpt_learner_release_fn release;
    dpt_learner_check_fn check;
    void *ctx;
} dpt_learner_options_t;

/* The learner's statistics (RLlib's names). Times are means over the last
 * DPT_LEARNER_WINDOW steps; size_* describe the inqueue's size sampled after
 * each of those steps (the numbers RLlib reports as learner_queue). */
typedef struct dpt_learner_stats {
    uint64_t num_steps;           /* steps trained */
    uint64_t env_steps_trained;   /* sum of the results' env_steps */
    uint64_t agent_steps_trained; /* sum of the results' agent_steps */
    /* Mean ms in get() (waiting for and taking an item) and in the step
     * function. */
    double learner_dequeue_time_ms;
    double learner_grad_time_ms;
    /* Time in the step function / time since the start (until the end,
     * once ended), 0..1. */
    double learner_utilization;
    /* The size window: samples (<= DPT_LEARNER_WINDOW), mean, population
     * standard deviation, and the 0, 10, 50, 90 and 100 % quantiles
     * (interpolated linearly; 0 without samples). */
    size_t size_count;
    double size_mean;
    double size_std;
    double size_quantiles[5];
} dpt_learner_stats_t;

typedef struct dpt_learner dpt_learner_t;

/* Fills *opt with the defaults (step, release, check and ctx NULL). */
void dpt_learner_options_init(dpt_learner_options_t *opt);

/* Creates a learner (its queues, buffer and windows; no thread yet) from
 * *opt (copied). Errors: DPT_EINVAL naming the option, DPT_EOVERFLOW,
 * DPT_ENOMEM, DPT_ETHREAD. */
int dpt_learner_create(dpt_learner_t **l, const dpt_learner_options_t *opt);
/* Stops and joins a running learner, hands every item still queued or held
 * to release() (when given), and frees everything. NULL is a no-op. */
void dpt_learner_destroy(dpt_learner_t *l);

/* Starts the learner thread. Errors: DPT_ESTATE (started or stopped
 * before), DPT_ETHREAD. */
int dpt_learner_start(dpt_learner_t *l);

/* Puts an item into the inqueue, waiting at most timeout_s seconds (0: do
 * not wait; DPT_WAIT_FOREVER) while it is full. On success the learner
 * owns the item (see release); on failure the caller still does. Errors:
 * DPT_ETIMEDOUT (still full), DPT_ECLOSED (the learner stopped, ended or
 * failed; the message says which). */
int dpt_learner_push(dpt_learner_t *l, void *item, double timeout_s);

/* The inqueue itself (borrowed; valid until dpt_learner_destroy), for
 * producers that push with dpt_queue_push() or close it to say that no more
 * items will come (the learner then steps on what is queued and ends). */
dpt_queue_t *dpt_learner_inqueue(dpt_learner_t *l);

/* Takes the oldest result into *res, waiting at most timeout_s seconds.
 * Errors: DPT_ETIMEDOUT (none yet); once the learner has ended and its
 * results are all taken, its error when it failed, DPT_ECLOSED when it
 * ended cleanly. */
int dpt_learner_pop_result(dpt_learner_t *l, dpt_learner_result_t *res, double timeout_s);

/* Asks the learner to stop: it finishes the step under way (if any; its
 * result is delivered when the outqueue has room), takes no further item,
 * and ends with status 0. The inqueue is closed (pushes fail with
 * DPT_ECLOSED); items left in it stay there for the owner to pop, or for
 * destroy to release. Returns at once; idempotent; valid before start (the
 * learner then never starts). */
void dpt_learner_stop(dpt_learner_t *l);

/* Waits for the learner thread to end and returns its status: 0 (stopped,
 * or its inqueue closed and drained) or its error, with the message set on
 * the calling thread ("learner: ..."). Repeatable. Errors: DPT_ESTATE (not
 * started), the learner's error. */
int dpt_learner_join(dpt_learner_t *l);

/* Health check for the owner, without waiting: 0 while the learner runs or
 * after a clean end (or before start), its error (with the message) once it
 * has failed. */
int dpt_learner_check(dpt_learner_t *l);

/* 1 while the learner thread runs (started and not yet ended), else 0. */
int dpt_learner_running(dpt_learner_t *l);

/* A snapshot of the statistics (consistent: taken under the learner's
 * lock). */
void dpt_learner_get_stats(dpt_learner_t *l, dpt_learner_stats_t *st);

#ifdef __cplusplus
}
#endif
#endif /* DPT_LEARNER_H */
