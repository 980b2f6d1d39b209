/* The minibatch buffer (exact TTL sequences, timeouts, drain, arguments)
 * and the learner thread (order, results, statistics, timeouts, failures,
 * stop, back-pressure); run under the thread sanitizer by `make tsan`. */
#include "dpt_test.h"

#include "dpt/learner.h"
#include "dpt/stats.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- minibatch buffer ---------------------------------------------------- */

/* A source of items 1, 2, 3, ... (as pointers). */
static int counting_source(void *ctx, void **item, double timeout_s)
{
    (void)timeout_s;
    intptr_t *next = ctx;
    *item = (void *)++*next;
    return 0;
}

typedef struct pass {
    int id, released;
} pass_t;

/* Runs n gets on a fresh buffer fed 1, 2, 3, ... and compares each (item,
 * released) with want. */
static void check_sequence(size_t size, int init, int passes, const pass_t *want, size_t n)
{
    intptr_t next = 0;
    dpt_minibatch_buffer_t *b;
    REQUIRE_OK(dpt_minibatch_buffer_create(&b, size, passes, init, 0, counting_source, &next));
    for (size_t k = 0; k < n; k++) {
        void *item = NULL;
        int rel = -1;
        CHECK_OK(dpt_minibatch_buffer_get(b, &item, &rel));
        if ((intptr_t)item != want[k].id || rel != want[k].released) {
            fprintf(stderr, "  size %zu init %d passes %d: get %zu gave (%d, %d), want (%d, %d)\n",
                    size, init, passes, k + 1, (int)(intptr_t)item, rel, want[k].id,
                    want[k].released);
            CHECK(0);
            break;
        }
    }
    dpt_minibatch_buffer_destroy(b);
}

/* The sequences below follow the rules by hand. ttl: the TTL the next
 * refill gives; [a:2, b:1]: slot contents with their TTLs after the get;
 * R: released. Notation per get: (item, released).
 *
 * size 1, init 1, num_passes 4:
 *   get 1: slot empty, refill item 1 with TTL 1 (ttl -> 2); TTL 1 -> 0: (1, R)
 *   get 2: refill item 2, TTL 2 (ttl -> 3); 2 -> 1: (2, -)
 *   get 3: 1 -> 0: (2, R)
 *   get 4: refill item 3, TTL 3 (ttl -> 4): (3, -)  gets 5, 6: (3, -) (3, R)
 *   get 7: refill item 4, TTL 4 (ttl stays 4): (4, -) (4, -) (4, -) (4, R)
 *   get 11: item 5, TTL 4: (5, -) (5, -) (5, -) (5, R)                      */
static const pass_t seq_s1_i1[] = {{1, 1}, {2, 0}, {2, 1}, {3, 0}, {3, 0}, {3, 1}, {4, 0},
                                   {4, 0}, {4, 0}, {4, 1}, {5, 0}, {5, 0}, {5, 0}, {5, 1}};

/* size 2, init 1, num_passes 4 (slots s0, s1; the current one alternates):
 *   get 1 (s0): refill 1, TTL 1 (ttl 2) -> 0: (1, R)        [s0 empty, s1 empty]
 *   get 2 (s1): refill 2, TTL 2 (ttl 3) -> 1: (2, -)        [s0 -, s1 2:1]
 *   get 3 (s0): refill 3, TTL 3 (ttl 4) -> 2: (3, -)        [3:2, 2:1]
 *   get 4 (s1): 2: 1 -> 0: (2, R)                           [3:2, -]
 *   get 5 (s0): 3: 2 -> 1: (3, -)                           [3:1, -]
 *   get 6 (s1): refill 4, TTL 4 -> 3: (4, -)                [3:1, 4:3]
 *   get 7 (s0): 3: 1 -> 0: (3, R)                           [-, 4:3]
 *   get 8 (s1): (4, -) 4:2
 *   get 9 (s0): refill 5, TTL 4 -> 3: (5, -)                [5:3, 4:2]
 *   gets 10..13: (4, -) 4:1, (5, -) 5:2, (4, R), (5, -) 5:1
 *   get 14 (s1): refill 6, TTL 4 -> 3: (6, -)               [5:1, 6:3]
 *   gets 15..20: (5, R), (6, -) 6:2, refill 7 (7, -) 7:3, (6, -) 6:1,
 *                (7, -) 7:2, (6, R)                                           */
static const pass_t seq_s2_i1[] = {{1, 1}, {2, 0}, {3, 0}, {2, 1}, {3, 0}, {4, 0}, {3, 1},
                                   {4, 0}, {5, 0}, {4, 0}, {5, 0}, {4, 1}, {5, 0}, {6, 0},
                                   {5, 1}, {6, 0}, {7, 0}, {6, 0}, {7, 0}, {6, 1}};

/* size 1, init 4, num_passes 4: every item TTL 4 from the start, so four
 * passes each, the fourth released. */
static const pass_t seq_s1_i4[] = {{1, 0}, {1, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 0},
                                   {2, 0}, {2, 1}, {3, 0}, {3, 0}, {3, 0}, {3, 1}};

/* size 2, init 4, num_passes 4: items 1 and 2 fill s0 and s1 with TTL 4
 * and alternate (1, -) (2, -) three times, then (1, R) (2, R); items 3 and
 * 4 take the slots over the same way. */
static const pass_t seq_s2_i4[] = {{1, 0}, {2, 0}, {1, 0}, {2, 0}, {1, 0}, {2, 0}, {1, 1}, {2, 1},
                                   {3, 0}, {4, 0}, {3, 0}, {4, 0}, {3, 0}, {4, 0}, {3, 1}, {4, 1}};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static void test_minibatch_ttl_sequences(void)
{
    check_sequence(1, 1, 4, seq_s1_i1, NELEM(seq_s1_i1));
    check_sequence(2, 1, 4, seq_s2_i1, NELEM(seq_s2_i1));
    check_sequence(1, 4, 4, seq_s1_i4, NELEM(seq_s1_i4));
    check_sequence(2, 4, 4, seq_s2_i4, NELEM(seq_s2_i4));
    /* One pass: every item once, released at once (the plain inqueue). */
    static const pass_t once[] = {{1, 1}, {2, 1}, {3, 1}};
    check_sequence(1, 1, 1, once, NELEM(once));
    check_sequence(3, 1, 1, once, NELEM(once));

    /* The initial TTL grows by one per refill, up to num_passes. */
    intptr_t next = 0;
    dpt_minibatch_buffer_t *b;
    REQUIRE_OK(dpt_minibatch_buffer_create(&b, 1, 3, 1, 0, counting_source, &next));
    CHECK(dpt_minibatch_buffer_size(b) == 1);
    CHECK(dpt_minibatch_buffer_next_ttl(b) == 1);
    void *item;
    int rel;
    int want_ttl[] = {2, 3, 3, 3, 3, 3, 3};
    for (int k = 0; k < 7; k++) {
        CHECK_OK(dpt_minibatch_buffer_get(b, &item, &rel));
        CHECK(dpt_minibatch_buffer_next_ttl(b) == want_ttl[k]);
    }
    dpt_minibatch_buffer_destroy(b);
    dpt_minibatch_buffer_destroy(NULL);
}

/* The same sequence through a dpt_queue_t source. */
static void test_minibatch_queue_source(void)
{
    dpt_queue_t *q;
    REQUIRE_OK(dpt_queue_create(&q, 8));
    for (intptr_t i = 1; i <= 7; i++)
        REQUIRE_OK(dpt_queue_push(q, (void *)i, 0));
    dpt_minibatch_buffer_t *b;
    REQUIRE_OK(dpt_minibatch_buffer_create(&b, 2, 4, 1, 1.0, dpt_minibatch_queue_source, q));
    for (size_t k = 0; k < NELEM(seq_s2_i1); k++) {
        void *item;
        int rel;
        CHECK_OK(dpt_minibatch_buffer_get(b, &item, &rel));
        CHECK((intptr_t)item == seq_s2_i1[k].id && rel == seq_s2_i1[k].released);
    }
    CHECK(dpt_queue_size(q) == 0);
    dpt_minibatch_buffer_destroy(b);
    dpt_queue_destroy(q);
}

static int failing_source(void *ctx, void **item, double timeout_s)
{
    (void)item, (void)timeout_s;
    int *mode = ctx;
    if (*mode == 1)
        return dpt_error(DPT_EIO, "sampler 3 lost its env");
    return DPT_ECOMM; /* no message */
}

static void test_minibatch_source_errors(void)
{
    dpt_queue_t *q;
    REQUIRE_OK(dpt_queue_create(&q, 2));
    dpt_minibatch_buffer_t *b;
    REQUIRE_OK(dpt_minibatch_buffer_create(&b, 1, 2, 2, 0.05, dpt_minibatch_queue_source, q));
    void *item = NULL;
    int rel = -1;
    /* An empty source times out after the timeout, changing nothing. */
    double t0 = dpt_now();
    CHECK_ERR(dpt_minibatch_buffer_get(b, &item, &rel), DPT_ETIMEDOUT,
              "minibatch buffer: queue: still empty");
    double dt = dpt_now() - t0;
    CHECK(dt >= 0.045 && dt < 5.0);
    CHECK(dpt_minibatch_buffer_next_ttl(b) == 2);
    /* The retry takes the item with the TTL it would have had. */
    CHECK_OK(dpt_queue_push(q, (void *)42, 0));
    CHECK_OK(dpt_minibatch_buffer_get(b, &item, &rel));
    CHECK((intptr_t)item == 42 && rel == 0);
    CHECK_OK(dpt_minibatch_buffer_get(b, &item, &rel));
    CHECK((intptr_t)item == 42 && rel == 1);
    /* A closed, drained source says so. */
    dpt_queue_close(q);
    CHECK_ERR(dpt_minibatch_buffer_get(b, &item, &rel), DPT_ECLOSED, "closed");
    dpt_minibatch_buffer_destroy(b);
    dpt_queue_destroy(q);

    /* A callback source's error and message come through; without a
     * message, the code's description does. */
    int mode = 1;
    REQUIRE_OK(dpt_minibatch_buffer_create(&b, 2, 1, 1, DPT_WAIT_FOREVER, failing_source, &mode));
    CHECK_ERR(dpt_minibatch_buffer_get(b, &item, &rel), DPT_EIO,
              "minibatch buffer: sampler 3 lost its env");
    mode = 2;
    CHECK_ERR(dpt_minibatch_buffer_get(b, &item, &rel), DPT_ECOMM,
              "minibatch buffer: communication failure");
    dpt_minibatch_buffer_destroy(b);
}

static void test_minibatch_drain(void)
{
    intptr_t next = 0;
    dpt_minibatch_buffer_t *b;
    REQUIRE_OK(dpt_minibatch_buffer_create(&b, 3, 2, 2, 0, counting_source, &next));
    void *items[3], *item;
    int rel;
    CHECK(dpt_minibatch_buffer_drain(b, items) == 0);
    /* Gets: s0 <- 1 (1:1), s1 <- 2 (2:1), s2 <- 3 (3:1), s0 (1, R). Held:
     * 2 and 3; the next get would use s1, so the order is 2, 3. */
    for (int k = 0; k < 4; k++)
        CHECK_OK(dpt_minibatch_buffer_get(b, &item, &rel));
    CHECK((intptr_t)item == 1 && rel == 1);
    REQUIRE(dpt_minibatch_buffer_drain(b, items) == 2);
    CHECK((intptr_t)items[0] == 2 && (intptr_t)items[1] == 3);
    CHECK(dpt_minibatch_buffer_drain(b, items) == 0);
    /* Emptied slots refill: the next get (s1) takes item 4. */
    CHECK_OK(dpt_minibatch_buffer_get(b, &item, &rel));
    CHECK((intptr_t)item == 4 && rel == 0);
    dpt_minibatch_buffer_destroy(b);
}

static void test_minibatch_invalid(void)
{
    intptr_t next = 0;
    dpt_minibatch_buffer_t *b = (dpt_minibatch_buffer_t *)&next;
    CHECK_ERR(dpt_minibatch_buffer_create(&b, 0, 1, 1, 0, counting_source, &next), DPT_EINVAL,
              "size must be >= 1");
    CHECK(b == NULL);
    CHECK_ERR(dpt_minibatch_buffer_create(&b, 1, 0, 1, 0, counting_source, &next), DPT_EINVAL,
              "num_passes is 0");
    CHECK_ERR(dpt_minibatch_buffer_create(&b, 1, 2, 0, 0, counting_source, &next), DPT_EINVAL,
              "init_num_passes is 0");
    CHECK_ERR(dpt_minibatch_buffer_create(&b, 1, 2, 3, 0, counting_source, &next), DPT_EINVAL,
              "init_num_passes is 3, must be in [1, num_passes = 2]");
    CHECK_ERR(dpt_minibatch_buffer_create(&b, 1, 2, 1, NAN, counting_source, &next), DPT_EINVAL,
              "timeout");
    CHECK_ERR(dpt_minibatch_buffer_create(&b, 1, 2, 1, -2.0, counting_source, &next), DPT_EINVAL,
              "timeout");
    CHECK_ERR(dpt_minibatch_buffer_create(&b, 1, 2, 1, 0, NULL, &next), DPT_EINVAL,
              "no source function");
    CHECK_ERR(dpt_minibatch_buffer_create(&b, SIZE_MAX / 2, 2, 1, 0, counting_source, &next),
              DPT_EOVERFLOW, "too large");
    CHECK(b == NULL);
}

/* ---- learner thread -------------------------------------------------------- */

enum { MAX_LOG = 256 };

/* The step function's context. The learner thread writes log, released
 * and steps; the test reads them after joining (or through results). */
typedef struct ctx {
    intptr_t log[MAX_LOG]; /* items in the order they were stepped */
    int nlog;
    int sleep_ms;
    intptr_t fail_on;  /* fail when stepping this item (0: never) */
    int check_fail_at; /* the health check fails at this call (0: never) */
    int checks;
    atomic_int released[MAX_LOG]; /* release() calls per item id */
    atomic_int stop_self;         /* the step function calls dpt_learner_stop */
    dpt_learner_t *learner;
} ctx_t;

static int step_fn(void *arg, void *item, dpt_learner_result_t *res)
{
    ctx_t *c = arg;
    intptr_t id = (intptr_t)item;
    if (c->nlog < MAX_LOG)
        c->log[c->nlog++] = id;
    if (c->sleep_ms)
        sleep_ms(c->sleep_ms);
    if (id == c->fail_on)
        return dpt_error(DPT_EIO, "cannot read batch %d", (int)id);
    if (id == -1) {
        res->nstats = DPT_LEARNER_MAX_STATS + 1;
        return 0;
    }
    if (atomic_load(&c->stop_self))
        dpt_learner_stop(c->learner);
    res->env_steps = (uint64_t)id * 10;
    res->agent_steps = (uint64_t)id * 20;
    res->nstats = 2;
    res->stats[0] = (double)id;
    res->stats[1] = 0.5;
    return 0;
}

static void release_fn(void *arg, void *item)
{
    ctx_t *c = arg;
    intptr_t id = (intptr_t)item;
    if (id >= 0 && id < MAX_LOG)
        atomic_fetch_add(&c->released[id], 1);
}

static int check_fn(void *arg)
{
    ctx_t *c = arg;
    if (++c->checks == c->check_fail_at)
        return dpt_error(DPT_ETHREAD, "loader thread 2 died");
    return 0;
}

static dpt_learner_options_t options(ctx_t *c)
{
    dpt_learner_options_t o;
    dpt_learner_options_init(&o);
    o.step = step_fn;
    o.release = release_fn;
    o.ctx = c;
    return o;
}

static void test_learner_defaults(void)
{
    dpt_learner_options_t o;
    dpt_learner_options_init(&o);
    CHECK(o.learner_queue_size == 16);
    CHECK(o.learner_queue_timeout == 300.0);
    CHECK(o.minibatch_buffer_size == 1);
    CHECK(o.num_sgd_iter == 1);
    CHECK(o.init_num_passes == 0);
    CHECK(o.step == NULL && o.release == NULL && o.check == NULL);
}

/* Items pushed before the start are stepped in order, one result each,
 * and the inqueue's size after each step is known: 9, 8, ..., 0. */
static void test_learner_flow_and_stats(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    c.sleep_ms = 2;
    dpt_learner_options_t o = options(&c);
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    CHECK(!dpt_learner_running(l));
    CHECK_OK(dpt_learner_check(l));
    for (intptr_t i = 1; i <= 10; i++)
        CHECK_OK(dpt_learner_push(l, (void *)i, 0));
    REQUIRE_OK(dpt_learner_start(l));
    for (uint64_t k = 1; k <= 10; k++) {
        dpt_learner_result_t r;
        REQUIRE_OK(dpt_learner_pop_result(l, &r, 30.0));
        CHECK(r.step == k);
        CHECK(r.released == 1);
        CHECK(r.env_steps == k * 10 && r.agent_steps == k * 20);
        CHECK(r.nstats == 2 && r.stats[0] == (double)k && r.stats[1] == 0.5);
    }
    CHECK(dpt_learner_running(l));
    CHECK_OK(dpt_learner_check(l));
    dpt_learner_stats_t st;
    dpt_learner_get_stats(l, &st);
    CHECK(st.num_steps == 10);
    CHECK(st.env_steps_trained == 550 && st.agent_steps_trained == 1100);
    CHECK(st.size_count == 10);
    CHECK_CLOSE(st.size_mean, 4.5, 1e-12);
    CHECK_CLOSE(st.size_std, sqrt(8.25), 1e-12);
    const double q[5] = {0.0, 0.9, 4.5, 8.1, 9.0};
    for (int i = 0; i < 5; i++)
        CHECK_CLOSE(st.size_quantiles[i], q[i], 1e-12);
    CHECK(st.learner_grad_time_ms >= 1.9 && st.learner_grad_time_ms < 1000.0);
    CHECK(st.learner_dequeue_time_ms >= 0.0 && st.learner_dequeue_time_ms < 1000.0);
    CHECK(st.learner_utilization > 0.0 && st.learner_utilization <= 1.0);

    dpt_learner_stop(l);
    CHECK_OK(dpt_learner_join(l));
    CHECK_OK(dpt_learner_join(l)); /* repeatable */
    CHECK(!dpt_learner_running(l));
    dpt_learner_result_t r;
    CHECK_ERR(dpt_learner_pop_result(l, &r, 1.0), DPT_ECLOSED, "ended");
    CHECK_ERR(dpt_learner_push(l, (void *)11, 0), DPT_ECLOSED, "stopped");
    REQUIRE(c.nlog == 10);
    for (int i = 0; i < 10; i++)
        CHECK(c.log[i] == i + 1);
    for (int i = 1; i <= 10; i++)
        CHECK(atomic_load(&c.released[i]) == 1);
    dpt_learner_destroy(l);
    dpt_learner_destroy(NULL);
}

/* The size window keeps the last 50 samples: 60 items queued before the
 * start leave samples 59 .. 0, of which 49 .. 0 are kept. */
static void test_learner_size_window(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    dpt_learner_options_t o = options(&c);
    o.learner_queue_size = 64;
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    for (intptr_t i = 1; i <= 60; i++)
        CHECK_OK(dpt_learner_push(l, (void *)i, 0));
    REQUIRE_OK(dpt_learner_start(l));
    dpt_learner_result_t r;
    for (int k = 0; k < 60; k++)
        REQUIRE_OK(dpt_learner_pop_result(l, &r, 30.0));
    dpt_learner_stats_t st;
    dpt_learner_get_stats(l, &st);
    CHECK(st.num_steps == 60);
    CHECK(st.size_count == DPT_LEARNER_WINDOW);
    CHECK_CLOSE(st.size_mean, 24.5, 1e-12);
    CHECK_CLOSE(st.size_quantiles[0], 0.0, 1e-12);
    CHECK_CLOSE(st.size_quantiles[4], 49.0, 1e-12);
    dpt_learner_destroy(l); /* stops and joins a running learner */
}

/* num_sgd_iter passes per item through the minibatch buffer; release()
 * once per item, after its last pass, or at destroy for items never
 * finished. */
static void test_learner_passes_and_release(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    dpt_learner_options_t o = options(&c);
    o.minibatch_buffer_size = 2;
    o.num_sgd_iter = 4;
    o.init_num_passes = 1;
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    for (intptr_t i = 1; i <= 7; i++)
        CHECK_OK(dpt_learner_push(l, (void *)i, 0));
    REQUIRE_OK(dpt_learner_start(l));
    /* The learner's sequence is the buffer's (size 2, init 1, passes 4). */
    for (size_t k = 0; k < NELEM(seq_s2_i1); k++) {
        dpt_learner_result_t r;
        REQUIRE_OK(dpt_learner_pop_result(l, &r, 30.0));
        CHECK(r.step == k + 1);
        CHECK(r.stats[0] == (double)seq_s2_i1[k].id);
        CHECK(r.released == seq_s2_i1[k].released);
    }
    dpt_learner_stop(l);
    CHECK_OK(dpt_learner_join(l));
    /* The thread may have taken one more step after the 20 popped (when
     * it got an item before seeing the stop): its log says which. */
    REQUIRE(c.nlog >= 20 && c.nlog <= 21);
    for (int k = 0; k < 20; k++)
        CHECK(c.log[k] == seq_s2_i1[k].id);
    /* Items 1 to 6 had their last pass; 7 is still held by the buffer. */
    for (int i = 1; i <= 6; i++)
        CHECK(atomic_load(&c.released[i]) == 1);
    CHECK(atomic_load(&c.released[7]) == 0);
    dpt_learner_destroy(l);
    CHECK(atomic_load(&c.released[7]) == 1);
}

static void test_learner_queue_timeout(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    dpt_learner_options_t o = options(&c);
    o.learner_queue_timeout = 0.1;
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    REQUIRE_OK(dpt_learner_start(l));
    double t0 = dpt_now();
    CHECK_ERR(dpt_learner_join(l), DPT_ETIMEDOUT,
              "learner: no item arrived in the learner inqueue within learner_queue_timeout = "
              "0.1 s");
    double dt = dpt_now() - t0;
    CHECK(dt >= 0.09 && dt < 10.0);
    CHECK_ERR(dpt_learner_check(l), DPT_ETIMEDOUT, "learner_queue_timeout = 0.1 s");
    dpt_learner_result_t r;
    CHECK_ERR(dpt_learner_pop_result(l, &r, 1.0), DPT_ETIMEDOUT, "learner inqueue");
    CHECK_ERR(dpt_learner_push(l, (void *)1, 1.0), DPT_ECLOSED, "it failed: learner: no item");
    dpt_learner_destroy(l);
}

/* A failing step ends the learner: join, check and pop_result report the
 * step's error; the results before it arrive; the failing item is still
 * released; items left queued are released at destroy. */
static void test_learner_step_failure(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    c.fail_on = 3;
    dpt_learner_options_t o = options(&c);
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    for (intptr_t i = 1; i <= 5; i++)
        CHECK_OK(dpt_learner_push(l, (void *)i, 0));
    REQUIRE_OK(dpt_learner_start(l));
    dpt_learner_result_t r;
    CHECK_OK(dpt_learner_pop_result(l, &r, 30.0));
    CHECK(r.step == 1);
    CHECK_OK(dpt_learner_pop_result(l, &r, 30.0));
    CHECK(r.step == 2);
    CHECK_ERR(dpt_learner_pop_result(l, &r, 30.0), DPT_EIO, "learner: step 3: cannot read batch 3");
    CHECK_ERR(dpt_learner_join(l), DPT_EIO, "cannot read batch 3");
    CHECK_ERR(dpt_learner_check(l), DPT_EIO, "step 3");
    CHECK(!dpt_learner_running(l));
    dpt_learner_stats_t st;
    dpt_learner_get_stats(l, &st);
    CHECK(st.num_steps == 2);
    CHECK(atomic_load(&c.released[3]) == 1);
    CHECK(atomic_load(&c.released[4]) == 0);
    dpt_learner_destroy(l);
    CHECK(atomic_load(&c.released[4]) == 1 && atomic_load(&c.released[5]) == 1);

    /* A result with too many stats is an error of the step too. */
    memset(&c, 0, sizeof c);
    REQUIRE_OK(dpt_learner_create(&l, &o));
    CHECK_OK(dpt_learner_push(l, (void *)(intptr_t)-1, 0));
    REQUIRE_OK(dpt_learner_start(l));
    CHECK_ERR(dpt_learner_join(l), DPT_EINVAL, "step 1: result has nstats = 9");
    dpt_learner_destroy(l);
}

static void test_learner_health_check(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    c.check_fail_at = 3;
    dpt_learner_options_t o = options(&c);
    o.check = check_fn;
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    for (intptr_t i = 1; i <= 4; i++)
        CHECK_OK(dpt_learner_push(l, (void *)i, 0));
    REQUIRE_OK(dpt_learner_start(l));
    CHECK_ERR(dpt_learner_join(l), DPT_ETHREAD,
              "learner: health check failed: loader thread 2 died");
    CHECK(c.nlog == 2);
    dpt_learner_destroy(l);
    CHECK(atomic_load(&c.released[3]) == 1 && atomic_load(&c.released[4]) == 1);
}

static void *stopper(void *arg)
{
    sleep_ms(50);
    dpt_learner_stop(arg);
    return NULL;
}

/* Stopping a learner that waits on an empty inqueue (timeout 300 s) ends
 * it at once, from another thread or from the step function itself. */
static void test_learner_stop_while_blocked(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    dpt_learner_options_t o = options(&c);
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    REQUIRE_OK(dpt_learner_start(l));
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, stopper, l) == 0);
    double t0 = dpt_now();
    CHECK_OK(dpt_learner_join(l));
    double dt = dpt_now() - t0;
    CHECK(dt < 5.0);
    pthread_join(th, NULL);
    dpt_learner_result_t r;
    CHECK_ERR(dpt_learner_pop_result(l, &r, 0), DPT_ECLOSED, "ended");
    dpt_learner_destroy(l);

    /* Stopped by its own step function: that step's result still arrives;
     * nothing else is stepped. */
    memset(&c, 0, sizeof c);
    atomic_store(&c.stop_self, 1);
    REQUIRE_OK(dpt_learner_create(&l, &o));
    c.learner = l;
    CHECK_OK(dpt_learner_push(l, (void *)1, 0));
    CHECK_OK(dpt_learner_push(l, (void *)2, 0));
    REQUIRE_OK(dpt_learner_start(l));
    CHECK_OK(dpt_learner_join(l));
    CHECK(c.nlog == 1);
    CHECK_OK(dpt_learner_pop_result(l, &r, 1.0));
    CHECK(r.step == 1);
    CHECK_ERR(dpt_learner_pop_result(l, &r, 1.0), DPT_ECLOSED, "ended");
    dpt_learner_destroy(l);
    CHECK(atomic_load(&c.released[2]) == 1); /* left in the inqueue */

    /* Stopped before it started: it never starts, pop_result does not wait. */
    REQUIRE_OK(dpt_learner_create(&l, &o));
    dpt_learner_stop(l);
    dpt_learner_stop(l);
    CHECK_ERR(dpt_learner_start(l), DPT_ESTATE, "stopped before it started");
    CHECK_ERR(dpt_learner_pop_result(l, &r, 30.0), DPT_ECLOSED, "ended");
    CHECK_ERR(dpt_learner_join(l), DPT_ESTATE, "join before start");
    dpt_learner_destroy(l);
}

typedef struct producer {
    dpt_learner_t *l;
    intptr_t item;
    double timeout_s;
    int rc;
    double elapsed;
} producer_t;

static void *producer_main(void *arg)
{
    producer_t *p = arg;
    double t0 = dpt_now();
    p->rc = dpt_learner_push(p->l, (void *)p->item, p->timeout_s);
    p->elapsed = dpt_now() - t0;
    return NULL;
}

/* Producers block while the inqueue is full: a push with a timeout fails
 * with DPT_ETIMEDOUT after it; a blocked producer goes on when the learner
 * takes an item, and fails with DPT_ECLOSED when the learner stops. */
static void test_learner_backpressure(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    dpt_learner_options_t o = options(&c);
    o.learner_queue_size = 2;
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    CHECK_OK(dpt_learner_push(l, (void *)1, 0));
    CHECK_OK(dpt_learner_push(l, (void *)2, 0));
    double t0 = dpt_now();
    CHECK_ERR(dpt_learner_push(l, (void *)3, 0.05), DPT_ETIMEDOUT,
              "learner inqueue is still full (2 items) after 0.05 s");
    double dt = dpt_now() - t0;
    CHECK(dt >= 0.045 && dt < 5.0);
    CHECK(dpt_queue_size(dpt_learner_inqueue(l)) == 2);

    /* A producer that waits; the learner's first step makes room. */
    producer_t p = {l, 3, 30.0, -100, 0.0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, producer_main, &p) == 0);
    sleep_ms(50);
    REQUIRE_OK(dpt_learner_start(l));
    pthread_join(th, NULL);
    CHECK_OK(p.rc);
    dpt_learner_result_t r;
    for (int k = 1; k <= 3; k++) {
        REQUIRE_OK(dpt_learner_pop_result(l, &r, 30.0));
        CHECK(r.stats[0] == (double)k);
    }
    dpt_learner_stop(l);
    CHECK_OK(dpt_learner_join(l));
    dpt_learner_destroy(l);

    /* A producer blocked on a full inqueue is woken by stop. */
    memset(&c, 0, sizeof c);
    REQUIRE_OK(dpt_learner_create(&l, &o));
    CHECK_OK(dpt_learner_push(l, (void *)1, 0));
    CHECK_OK(dpt_learner_push(l, (void *)2, 0));
    producer_t q = {l, 3, 300.0, -100, 0.0};
    REQUIRE(pthread_create(&th, NULL, producer_main, &q) == 0);
    sleep_ms(50);
    dpt_learner_stop(l);
    pthread_join(th, NULL);
    CHECK(q.rc == DPT_ECLOSED);
    CHECK(q.elapsed < 5.0);
    dpt_learner_destroy(l);
    CHECK(atomic_load(&c.released[1]) == 1 && atomic_load(&c.released[2]) == 1);
    CHECK(atomic_load(&c.released[3]) == 0); /* never accepted: the producer's */
}

/* Producers close the inqueue: the learner steps on what is queued and ends
 * cleanly. */
static void test_learner_input_closed(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    dpt_learner_options_t o = options(&c);
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    REQUIRE_OK(dpt_learner_start(l));
    for (intptr_t i = 1; i <= 3; i++)
        CHECK_OK(dpt_queue_push(dpt_learner_inqueue(l), (void *)i, 30.0));
    dpt_queue_close(dpt_learner_inqueue(l));
    CHECK_OK(dpt_learner_join(l));
    dpt_learner_result_t r;
    for (int k = 1; k <= 3; k++) {
        CHECK_OK(dpt_learner_pop_result(l, &r, 1.0));
        CHECK(r.step == (uint64_t)k);
    }
    CHECK_ERR(dpt_learner_pop_result(l, &r, 1.0), DPT_ECLOSED, "no more results");
    CHECK_ERR(dpt_learner_push(l, (void *)4, 0), DPT_ECLOSED, "inqueue was closed");
    dpt_learner_destroy(l);
}

/* An owner that never pops results: the learner fails after
 * learner_queue_timeout with the outqueue full. Popping in time keeps it
 * going. */
static void test_learner_result_queue_full(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    dpt_learner_options_t o = options(&c);
    o.result_queue_size = 2;
    o.learner_queue_timeout = 0.1;
    dpt_learner_t *l;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    for (intptr_t i = 1; i <= 3; i++)
        CHECK_OK(dpt_learner_push(l, (void *)i, 0));
    REQUIRE_OK(dpt_learner_start(l));
    CHECK_ERR(dpt_learner_join(l), DPT_ETIMEDOUT,
              "the result queue stayed full (2 results) for learner_queue_timeout = 0.1 s");
    dpt_learner_result_t r;
    CHECK_OK(dpt_learner_pop_result(l, &r, 0));
    CHECK_OK(dpt_learner_pop_result(l, &r, 0));
    CHECK(r.step == 2);
    CHECK_ERR(dpt_learner_pop_result(l, &r, 0), DPT_ETIMEDOUT, "result queue stayed full");
    dpt_learner_destroy(l);

    /* 40 items through a 2-record outqueue, popped as they come. */
    memset(&c, 0, sizeof c);
    o.learner_queue_timeout = 30.0;
    REQUIRE_OK(dpt_learner_create(&l, &o));
    REQUIRE_OK(dpt_learner_start(l));
    for (intptr_t i = 1; i <= 40; i++) {
        CHECK_OK(dpt_learner_push(l, (void *)i, 30.0));
        if (i >= 2) {
            REQUIRE_OK(dpt_learner_pop_result(l, &r, 30.0));
            CHECK(r.step == (uint64_t)(i - 1));
        }
    }
    REQUIRE_OK(dpt_learner_pop_result(l, &r, 30.0));
    CHECK(r.step == 40);
    dpt_learner_stop(l);
    CHECK_OK(dpt_learner_join(l));
    dpt_learner_destroy(l);
}

static void test_learner_invalid(void)
{
    static ctx_t c;
    memset(&c, 0, sizeof c);
    dpt_learner_t *l = (dpt_learner_t *)&c;
    dpt_learner_options_t o = options(&c);
    o.step = NULL;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "no step function");
    CHECK(l == NULL);
    o = options(&c);
    o.learner_queue_size = 0;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "learner_queue_size");
    o = options(&c);
    o.learner_queue_timeout = 0;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "learner_queue_timeout is 0 s");
    o.learner_queue_timeout = NAN;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "learner_queue_timeout");
    o.learner_queue_timeout = INFINITY;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "finite");
    o = options(&c);
    o.result_queue_size = 0;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "result_queue_size");
    o = options(&c);
    o.minibatch_buffer_size = 0;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "minibatch_buffer_size");
    o = options(&c);
    o.num_sgd_iter = 0;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "num_sgd_iter is 0");
    o = options(&c);
    o.num_sgd_iter = 2;
    o.init_num_passes = 3;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "init_num_passes is 3");
    o.init_num_passes = -1;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EINVAL, "init_num_passes is -1");
    o = options(&c);
    o.learner_queue_size = SIZE_MAX;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EOVERFLOW, "learner: queue: capacity");
    o = options(&c);
    o.result_queue_size = SIZE_MAX;
    CHECK_ERR(dpt_learner_create(&l, &o), DPT_EOVERFLOW, "learner: queue: capacity");
    CHECK(l == NULL);

    /* States. */
    o = options(&c);
    REQUIRE_OK(dpt_learner_create(&l, &o));
    CHECK_ERR(dpt_learner_join(l), DPT_ESTATE, "join before start");
    REQUIRE_OK(dpt_learner_start(l));
    CHECK_ERR(dpt_learner_start(l), DPT_ESTATE, "already started");
    dpt_learner_result_t r;
    CHECK_ERR(dpt_learner_pop_result(l, &r, 0.01), DPT_ETIMEDOUT, "no result within");
    dpt_learner_destroy(l);
    /* Never started: destroy releases what was pushed. */
    REQUIRE_OK(dpt_learner_create(&l, &o));
    CHECK_OK(dpt_learner_push(l, (void *)9, 0));
    dpt_learner_destroy(l);
    CHECK(atomic_load(&c.released[9]) == 1);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_minibatch_ttl_sequences),
        DPT_TEST(test_minibatch_queue_source),
        DPT_TEST(test_minibatch_source_errors),
        DPT_TEST(test_minibatch_drain),
        DPT_TEST(test_minibatch_invalid),
        DPT_TEST(test_learner_defaults),
        DPT_TEST(test_learner_flow_and_stats),
        DPT_TEST(test_learner_size_window),
        DPT_TEST(test_learner_passes_and_release),
        DPT_TEST(test_learner_queue_timeout),
        DPT_TEST(test_learner_step_failure),
        DPT_TEST(test_learner_health_check),
        DPT_TEST(test_learner_stop_while_blocked),
        DPT_TEST(test_learner_backpressure),
        DPT_TEST(test_learner_input_closed),
        DPT_TEST(test_learner_result_queue_full),
        DPT_TEST(test_learner_invalid),
    };
    return DPT_TEST_RUN(cases);
}
