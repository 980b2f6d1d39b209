/*
 * Bounded blocking queue: a ring buffer under one mutex with two condition
 * variables (not_full for producers, not_empty for consumers). Timed waits
 * use CLOCK_MONOTONIC so wall-clock jumps do not stretch timeouts.
 */
#include "core/clock.h"
#include "dpt/queue.h"
#include "dpt/status.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct dpt_queue {
    pthread_mutex_t mu;
    pthread_cond_t not_full;
    pthread_cond_t not_empty;
    void **items;
    size_t capacity;
    size_t head; /* oldest item */
    size_t count;
    int closed;
};

int dpt_queue_create(dpt_queue_t **out, size_t capacity)
{
    *out = NULL;
    if (capacity == 0)
        return dpt_error(DPT_EINVAL, "queue: capacity must be > 0");
    if (capacity > ((size_t)-1) / sizeof(void *))
        return dpt_error(DPT_EOVERFLOW, "queue: capacity %zu is too large", capacity);
    dpt_queue_t *q = calloc(1, sizeof *q);
    if (!q)
        return dpt_error(DPT_ENOMEM, "queue: cannot allocate");
    q->items = calloc(capacity, sizeof(void *));
    if (!q->items)
        goto fail_items;
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        goto fail_mutex;
    if (dpt__cond_init_monotonic(&q->not_full) != 0)
        goto fail_not_full;
    if (dpt__cond_init_monotonic(&q->not_empty) != 0)
        goto fail_not_empty;
    q->capacity = capacity;
    *out = q;
    return DPT_OK;

fail_not_empty:
    pthread_cond_destroy(&q->not_full);
fail_not_full:
    pthread_mutex_destroy(&q->mu);
fail_mutex:
    free(q->items);
    free(q);
    return dpt_error(DPT_ETHREAD, "queue: cannot initialise its mutex or condition variables");
fail_items:
    free(q);
    return dpt_error(DPT_ENOMEM, "queue: cannot allocate %zu slots", capacity);
}

void dpt_queue_destroy(dpt_queue_t *q)
{
    if (!q)
        return;
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    pthread_mutex_destroy(&q->mu);
    free(q->items);
    free(q);
}

/* Waits on `c` until `ready(q)` holds, the queue closes or the deadline
 * passes. Called and returns with the mutex held. Returns 0 when ready. */
static int dpt__wait(dpt_queue_t *q, pthread_cond_t *c, int (*ready)(const dpt_queue_t *),
                     double timeout_s)
{
    if (ready(q) || q->closed)
        return 0;
    if (timeout_s == 0.0)
        return DPT_ETIMEDOUT;
    /* Timeouts past ~30 years are treated as forever (avoids time_t overflow). */
    int forever = timeout_s < 0.0 || timeout_s > 1e9;
    struct timespec deadline = forever ? (struct timespec){0, 0} : dpt__deadline(timeout_s);
    while (!ready(q) && !q->closed) {
        int rc =
            forever ? pthread_cond_wait(c, &q->mu) : pthread_cond_timedwait(c, &q->mu, &deadline);
        if (rc == ETIMEDOUT)
            return (ready(q) || q->closed) ? 0 : DPT_ETIMEDOUT;
    }
    return 0;
}

static int dpt__has_room(const dpt_queue_t *q)
{
    return q->count < q->capacity;
}
static int dpt__has_item(const dpt_queue_t *q)
{
    return q->count > 0;
}

int dpt_queue_push(dpt_queue_t *q, void *item, double timeout_s)
{
    pthread_mutex_lock(&q->mu);
    int rc = dpt__wait(q, &q->not_full, dpt__has_room, timeout_s);
    if (rc == 0 && q->closed)
        rc = DPT_ECLOSED;
    if (rc == 0) {
        q->items[(q->head + q->count) % q->capacity] = item;
        q->count++;
        pthread_cond_signal(&q->not_empty);
    }
    pthread_mutex_unlock(&q->mu);
    if (rc == DPT_ECLOSED)
        return dpt_error(rc, "queue: push on a closed queue");
    if (rc == DPT_ETIMEDOUT)
        return dpt_error(rc, "queue: still full (%zu items) after %.3f s", q->capacity, timeout_s);
    return rc;
}

int dpt_queue_pop(dpt_queue_t *q, void **item, double timeout_s)
{
    pthread_mutex_lock(&q->mu);
    int rc = dpt__wait(q, &q->not_empty, dpt__has_item, timeout_s);
    if (rc == 0 && q->count == 0)
        rc = DPT_ECLOSED; /* closed and drained */
    if (rc == 0) {
        *item = q->items[q->head];
        q->head = (q->head + 1) % q->capacity;
        q->count--;
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->mu);
    if (rc == DPT_ECLOSED)
        return dpt_error(rc, "queue: pop on a closed, empty queue");
    if (rc == DPT_ETIMEDOUT)
        return dpt_error(rc, "queue: still empty after %.3f s", timeout_s);
    return rc;
}

void dpt_queue_close(dpt_queue_t *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_full);
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

size_t dpt_queue_size(dpt_queue_t *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->count;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t dpt_queue_capacity(const dpt_queue_t *q)
{
    return q->capacity;
}

int dpt_queue_is_closed(dpt_queue_t *q)
{
    pthread_mutex_lock(&q->mu);
    int c = q->closed;
    pthread_mutex_unlock(&q->mu);
    return c;
}
