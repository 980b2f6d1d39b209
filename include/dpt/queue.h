/*
 * dpt/queue.h — a bounded blocking queue of pointers.
 *
 * Producers push, consumers pop; push blocks while the queue is full and pop
 * while it is empty, each for at most a timeout. Closing the queue wakes
 * everyone: later pushes fail with DPT_ECLOSED, pops drain what is left and
 * then fail with DPT_ECLOSED. The learner pipeline (samplers → learner,
 * loader threads ↔ tower stacks) is built on it.
 *
 * The queue stores the pointers only; who owns the pointed-to items is the
 * caller's protocol (typically: ownership travels with the item).
 */
#ifndef DPT_QUEUE_H
#define DPT_QUEUE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_queue dpt_queue_t;

/* Wait forever (timeout argument of push/pop). */
#define DPT_WAIT_FOREVER (-1.0)

/* Creates a queue holding at most `capacity` (> 0) items. Errors:
 * DPT_EINVAL, DPT_ENOMEM, DPT_ETHREAD (mutex/condvar init failed). */
int dpt_queue_create(dpt_queue_t **q, size_t capacity);
/* Frees the queue. No thread may be using it. NULL is a no-op. */
void dpt_queue_destroy(dpt_queue_t *q);

/* Appends `item` (any pointer, NULL allowed), waiting up to `timeout_s`
 * seconds for room (0: do not wait; DPT_WAIT_FOREVER: no limit). Errors:
 * DPT_ETIMEDOUT (still full), DPT_ECLOSED (closed before or while waiting). */
int dpt_queue_push(dpt_queue_t *q, void *item, double timeout_s);
/* Removes the oldest item into *item, waiting up to `timeout_s` seconds.
 * Errors: DPT_ETIMEDOUT (still empty), DPT_ECLOSED (closed and empty). */
int dpt_queue_pop(dpt_queue_t *q, void **item, double timeout_s);
/* Closes the queue and wakes every waiting thread. Idempotent. */
void dpt_queue_close(dpt_queue_t *q);

/* Number of items now in the queue (a snapshot). */
size_t dpt_queue_size(dpt_queue_t *q);
size_t dpt_queue_capacity(const dpt_queue_t *q);
int dpt_queue_is_closed(dpt_queue_t *q);

#ifdef __cplusplus
}
#endif
#endif /* DPT_QUEUE_H */
