/* The bounded blocking queue: order, timeouts, close, and many producers and
 * consumers at once (run under the thread sanitizer by `make tsan`). */
#include "dpt_test.h"

#include "dpt/queue.h"
#include "dpt/stats.h"

#include <pthread.h>
#include <stdint.h>

static void test_fifo_and_capacity(void)
{
    dpt_queue_t *q;
    REQUIRE_OK(dpt_queue_create(&q, 3));
    CHECK(dpt_queue_capacity(q) == 3);
    for (intptr_t i = 1; i <= 3; i++)
        CHECK_OK(dpt_queue_push(q, (void *)i, 0));
    CHECK(dpt_queue_size(q) == 3);
    CHECK_ERR(dpt_queue_push(q, (void *)4, 0), DPT_ETIMEDOUT, "full");
    void *v;
    for (intptr_t i = 1; i <= 3; i++) {
        CHECK_OK(dpt_queue_pop(q, &v, 0));
        CHECK((intptr_t)v == i);
    }
    CHECK_ERR(dpt_queue_pop(q, &v, 0), DPT_ETIMEDOUT, "empty");
    /* Wrap around the ring several times. */
    for (intptr_t i = 0; i < 10; i++) {
        CHECK_OK(dpt_queue_push(q, (void *)i, 0));
        CHECK_OK(dpt_queue_pop(q, &v, 0));
        CHECK((intptr_t)v == i);
    }
    dpt_queue_destroy(q);
    dpt_queue_destroy(NULL);
    CHECK_ERR(dpt_queue_create(&q, 0), DPT_EINVAL, "capacity");
    CHECK(q == NULL);
}

static void test_timeouts(void)
{
    dpt_queue_t *q;
    REQUIRE_OK(dpt_queue_create(&q, 1));
    void *v;
    double t0 = dpt_now();
    CHECK_ERR(dpt_queue_pop(q, &v, 0.05), DPT_ETIMEDOUT, "empty");
    double dt = dpt_now() - t0;
    CHECK(dt >= 0.045 && dt < 2.0);
    CHECK_OK(dpt_queue_push(q, NULL, 0.05));
    t0 = dpt_now();
    CHECK_ERR(dpt_queue_push(q, NULL, 0.05), DPT_ETIMEDOUT, "full");
    dt = dpt_now() - t0;
    CHECK(dt >= 0.045 && dt < 2.0);
    dpt_queue_destroy(q);
}

static void *closer(void *arg)
{
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    dpt_queue_close(arg);
    return NULL;
}

static void test_close(void)
{
    dpt_queue_t *q;
    REQUIRE_OK(dpt_queue_create(&q, 2));
    CHECK_OK(dpt_queue_push(q, (void *)1, 0));
    dpt_queue_close(q);
    dpt_queue_close(q); /* idempotent */
    CHECK(dpt_queue_is_closed(q));
    CHECK_ERR(dpt_queue_push(q, (void *)2, 0), DPT_ECLOSED, "closed");
    void *v = NULL;
    CHECK_OK(dpt_queue_pop(q, &v, 0)); /* drains what is left */
    CHECK((intptr_t)v == 1);
    CHECK_ERR(dpt_queue_pop(q, &v, DPT_WAIT_FOREVER), DPT_ECLOSED, "closed");
    dpt_queue_destroy(q);

    /* A consumer blocked forever is woken by close. */
    REQUIRE_OK(dpt_queue_create(&q, 2));
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, closer, q) == 0);
    double t0 = dpt_now();
    CHECK_ERR(dpt_queue_pop(q, &v, DPT_WAIT_FOREVER), DPT_ECLOSED, "closed");
    CHECK(dpt_now() - t0 < 5.0);
    pthread_join(th, NULL);
    dpt_queue_destroy(q);

    /* A producer blocked on a full queue is woken by close too. */
    REQUIRE_OK(dpt_queue_create(&q, 1));
    CHECK_OK(dpt_queue_push(q, NULL, 0));
    REQUIRE(pthread_create(&th, NULL, closer, q) == 0);
    CHECK_ERR(dpt_queue_push(q, NULL, 10.0), DPT_ECLOSED, "closed");
    pthread_join(th, NULL);
    dpt_queue_destroy(q);
}

enum { PRODUCERS = 4, CONSUMERS = 3, PER_PRODUCER = 5000 };

typedef struct {
    dpt_queue_t *q;
    int id;
    long long sum;
    long count;
    int errors;
} worker_t;

static void *producer(void *arg)
{
    worker_t *w = arg;
    for (intptr_t i = 0; i < PER_PRODUCER; i++) {
        intptr_t item = (intptr_t)w->id * 1000000 + i + 1;
        if (dpt_queue_push(w->q, (void *)item, 30.0) != 0)
            w->errors++;
    }
    return NULL;
}

static void *consumer(void *arg)
{
    worker_t *w = arg;
    for (;;) {
        void *v;
        int rc = dpt_queue_pop(w->q, &v, 30.0);
        if (rc == DPT_ECLOSED)
            break;
        if (rc != 0) {
            w->errors++;
            break;
        }
        w->sum += (intptr_t)v;
        w->count++;
    }
    return NULL;
}

static void test_concurrent(void)
{
    dpt_queue_t *q;
    REQUIRE_OK(dpt_queue_create(&q, 16));
    pthread_t pt[PRODUCERS], ct[CONSUMERS];
    worker_t pw[PRODUCERS], cw[CONSUMERS];
    memset(pw, 0, sizeof pw);
    memset(cw, 0, sizeof cw);
    for (int i = 0; i < CONSUMERS; i++) {
        cw[i].q = q;
        REQUIRE(pthread_create(&ct[i], NULL, consumer, &cw[i]) == 0);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        pw[i].q = q;
        pw[i].id = i;
        REQUIRE(pthread_create(&pt[i], NULL, producer, &pw[i]) == 0);
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(pt[i], NULL);
    dpt_queue_close(q);
    long long sum = 0, expect = 0;
    long count = 0;
    int errors = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        pthread_join(ct[i], NULL);
        sum += cw[i].sum;
        count += cw[i].count;
        errors += cw[i].errors;
    }
    for (int i = 0; i < PRODUCERS; i++) {
        errors += pw[i].errors;
        for (long long k = 1; k <= PER_PRODUCER; k++)
            expect += (long long)i * 1000000 + k;
    }
    CHECK(errors == 0);
    CHECK(count == (long)PRODUCERS * PER_PRODUCER);
    CHECK(sum == expect);
    dpt_queue_destroy(q);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_fifo_and_capacity),
        DPT_TEST(test_timeouts),
        DPT_TEST(test_close),
        DPT_TEST(test_concurrent),
    };
    return DPT_TEST_RUN(cases);
}
