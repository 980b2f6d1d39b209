/*
 * Tests of point-to-point messages on the threads backend (dpt_comm_send,
 * dpt_comm_recv, dpt_comm_probe): round trips, order per sender and tag,
 * any-source receives from several senders, a 64 MiB payload, empty
 * payloads, probe, timeouts (with no sender), argument errors, and a
 * participant's abort waking a blocked receiver.
 *
 * Workers count failures in their own slot (dpt_test_threads.h); the main
 * thread reports them after joining.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt_test.h"
#include "dpt_test_threads.h"

#if defined(__SANITIZE_THREAD__)
#define BIG_BYTES ((size_t)8 << 20) /* TSan checks every byte a memcpy touches */
#else
#define BIG_BYTES ((size_t)64 << 20)
#endif

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Receives one message and checks its sender, tag and size; returns the
 * payload (caller frees) or NULL after recording the failure. */
static void *wrecv(worker_t *w, int source, int tag, int want_source, int want_tag,
                   size_t want_bytes)
{
    void *data = NULL;
    size_t n = 0;
    int src = -2, tg = -2;
    int rc = dpt_comm_recv(w->comm, source, tag, DPT_COMM_TIMEOUT_DEFAULT, &data, &n, &src, &tg);
    if (rc != 0) {
        werr(w, "recv failed", "dpt_comm_recv", rc);
        return NULL;
    }
    if (src != want_source || tg != want_tag || n != want_bytes) {
        char got[120];
        snprintf(got, sizeof got, "source %d tag %d %zu bytes, expected %d, %d, %zu", src, tg, n,
                 want_source, want_tag, want_bytes);
        werr(w, "wrong message", got, 0);
    }
    return data;
}

/* ---- round trip --------------------------------------------------------- */

typedef struct simple_ctx {
    worker_fn fn;
} simple_ctx_t;

static void round_trip_worker(worker_t *w)
{
    static const char ping[] = "ping from rank 0", pong[] = "pong from rank 1";
    for (int k = 0; k < 3; k++) {
        if (w->rank == 0) {
            WCHECK_OK(w, dpt_comm_send(w->comm, 1, 5, ping, sizeof ping));
            char *reply = wrecv(w, 1, 6, 1, 6, sizeof pong);
            if (reply != NULL && memcmp(reply, pong, sizeof pong) != 0)
                werr(w, "wrong payload", reply, 0);
            free(reply);
        } else {
            char *got = wrecv(w, 0, 5, 0, 5, sizeof ping);
            if (got != NULL && memcmp(got, ping, sizeof ping) != 0)
                werr(w, "wrong payload", got, 0);
            free(got);
            WCHECK_OK(w, dpt_comm_send(w->comm, 0, 6, pong, sizeof pong));
        }
    }
    /* the largest tag is valid */
    if (w->rank == 0) {
        WCHECK_OK(w, dpt_comm_send(w->comm, 1, DPT_COMM_TAG_MAX, ping, 4));
    } else {
        free(wrecv(w, DPT_COMM_ANY_SOURCE, DPT_COMM_TAG_MAX, 0, DPT_COMM_TAG_MAX, 4));
    }
    /* collectives still work alongside */
    WCHECK_OK(w, dpt_comm_barrier(w->comm));
}

static void test_round_trip(void)
{
    simple_ctx_t c = {.fn = round_trip_worker};
    worker_t *w = run_group(2, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "round trip") == 0);
        free(w);
    }
}

/* ---- order ---------------------------------------------------------------- */

#define NORDER 1000

/* Rank 0 sends NORDER messages with tag 1 interleaved with NORDER with tag
 * 2, each holding its index; rank 1 takes all of tag 2 first, then those of
 * tag 1: each tag's come in send order. Then the same pattern received with
 * DPT_COMM_ANY_TAG: send order across both tags. */
static void order_worker(worker_t *w)
{
    for (int pass = 0; pass < 2; pass++) {
        if (w->rank == 0) {
            for (int i = 0; i < NORDER; i++) {
                int v[2] = {i, 1};
                WCHECK_OK(w, dpt_comm_send(w->comm, 1, 1, v, sizeof v));
                v[1] = 2;
                WCHECK_OK(w, dpt_comm_send(w->comm, 1, 2, v, sizeof v));
            }
            continue;
        }
        int tags[2] = {2, 1};
        for (int k = 0; k < 2 * NORDER; k++) {
            int tag = pass == 0 ? tags[k / NORDER] : DPT_COMM_ANY_TAG;
            int want_i = pass == 0 ? k % NORDER : k / 2;
            int want_tag = pass == 0 ? tag : 1 + k % 2;
            int *v = wrecv(w, 0, tag, 0, want_tag, 2 * sizeof(int));
            if (v != NULL && (v[0] != want_i || v[1] != want_tag)) {
                char got[64];
                snprintf(got, sizeof got, "message %d of tag %d, expected %d of tag %d", v[0], v[1],
                         want_i, want_tag);
                werr(w, "out of order", got, 0);
            }
            free(v);
        }
    }
}

static void test_order(void)
{
    simple_ctx_t c = {.fn = order_worker};
    worker_t *w = run_group(2, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "order") == 0);
        free(w);
    }
}

/* ---- any source -------------------------------------------------------- */

#define NANY 200

/* Ranks 1..3 each send NANY numbered messages with tag 7 to rank 0, which
 * receives 3 * NANY from any source: every sender's arrive in order, and
 * all arrive. */
static void any_source_worker(worker_t *w)
{
    int P = dpt_comm_size(w->comm);
    if (w->rank != 0) {
        for (int i = 0; i < NANY; i++) {
            int v[2] = {w->rank, i};
            WCHECK_OK(w, dpt_comm_send(w->comm, 0, 7, v, sizeof v));
        }
        return;
    }
    int next[8] = {0};
    for (int k = 0; k < (P - 1) * NANY; k++) {
        void *data = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        int rc = dpt_comm_recv(w->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, 5.0, &data, &n, &src,
                               &tag);
        if (rc != 0) {
            werr(w, "recv failed", "any source", rc);
            return;
        }
        const int *v = data;
        if (n != sizeof(int) * 2 || tag != 7 || src < 1 || src >= P || v[0] != src ||
            v[1] != next[src]) {
            char got[96];
            snprintf(got, sizeof got, "source %d tag %d: message %d of rank %d, expected %d", src,
                     tag, n == 8 ? v[1] : -1, n == 8 ? v[0] : -1,
                     src >= 1 && src < P ? next[src] : -1);
            werr(w, "wrong message", got, 0);
        } else {
            next[src]++;
        }
        free(data);
    }
    for (int q = 1; q < P; q++)
        if (next[q] != NANY)
            werr(w, "messages missing", "any source", 0);
}

static void test_any_source(void)
{
    simple_ctx_t c = {.fn = any_source_worker};
    worker_t *w = run_group(4, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 4, "any source") == 0);
        free(w);
    }
}

/* ---- payload sizes -------------------------------------------------------- */

static unsigned char pattern(size_t i)
{
    return (unsigned char)((i * 2654435761u) >> 13);
}

/* A BIG_BYTES payload (int and float columns as a caller would serialize
 * them are just bytes here), then an empty one, each way. */
static void sizes_worker(worker_t *w)
{
    int peer = 1 - w->rank;
    unsigned char *big = malloc(BIG_BYTES);
    if (big == NULL)
        abort();
    for (size_t i = 0; i < BIG_BYTES; i++)
        big[i] = pattern(i + (size_t)w->rank);
    WCHECK_OK(w, dpt_comm_send(w->comm, peer, 3, big, BIG_BYTES));
    memset(big, 0, BIG_BYTES); /* the copy was taken: the buffer is the caller's again */
    unsigned char *got = wrecv(w, peer, 3, peer, 3, BIG_BYTES);
    if (got != NULL) {
        size_t bad = 0;
        for (size_t i = 0; i < BIG_BYTES; i++)
            bad += got[i] != pattern(i + (size_t)peer);
        if (bad)
            werr(w, "large payload differs", "64 MiB", 0);
    }
    free(got);
    free(big);

    WCHECK_OK(w, dpt_comm_send(w->comm, peer, 0, NULL, 0));
    char c = 'x';
    WCHECK_OK(w, dpt_comm_send(w->comm, peer, 0, &c, 0)); /* a pointer with 0 bytes: fine */
    for (int k = 0; k < 2; k++) {
        void *data = &c;
        size_t n = 99;
        WCHECK_OK(w, dpt_comm_recv(w->comm, peer, 0, 5.0, &data, &n, NULL, NULL));
        if (data != NULL || n != 0)
            werr(w, "empty message not NULL, 0", "recv", 0);
    }
}

static void test_payload_sizes(void)
{
    simple_ctx_t c = {.fn = sizes_worker};
    worker_t *w = run_group(2, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "sizes") == 0);
        free(w);
    }
}

/* ---- probe ---------------------------------------------------------------- */

static void probe_worker(worker_t *w)
{
    int flag = -1, src = -2, tag = -2;
    size_t n = 99;
    if (w->rank == 1) {
        WCHECK_OK(w, dpt_comm_barrier(w->comm)); /* rank 0 probed an empty box */
        WCHECK_OK(w, dpt_comm_send(w->comm, 0, 9, "abcdef", 6));
        WCHECK_OK(w, dpt_comm_send(w->comm, 0, 4, "xy", 2));
        WCHECK_OK(w, dpt_comm_barrier(w->comm));
        return;
    }
    WCHECK_OK(
        w, dpt_comm_probe(w->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, &src, &tag, &n));
    if (flag != 0 || src != -1 || tag != -1 || n != 0)
        werr(w, "probe of an empty mailbox", "flag 0, -1, -1, 0 expected", 0);
    WCHECK_OK(w, dpt_comm_barrier(w->comm));
    WCHECK_OK(w, dpt_comm_barrier(w->comm)); /* both messages are in */
    WCHECK_OK(
        w, dpt_comm_probe(w->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, &src, &tag, &n));
    if (flag != 1 || src != 1 || tag != 9 || n != 6)
        werr(w, "probe(any, any)", "expected rank 1, tag 9, 6 bytes", 0);
    WCHECK_OK(w, dpt_comm_probe(w->comm, 1, 4, &flag, NULL, NULL, &n));
    if (flag != 1 || n != 2)
        werr(w, "probe(1, 4)", "expected 2 bytes", 0);
    WCHECK_OK(w, dpt_comm_probe(w->comm, 1, 5, &flag, &src, &tag, NULL));
    if (flag != 0 || src != -1 || tag != -1)
        werr(w, "probe(1, 5)", "expected nothing", 0);
    /* probing does not consume: a recv with the probed source and tag gets it */
    free(wrecv(w, 1, 9, 1, 9, 6));
    WCHECK_OK(
        w, dpt_comm_probe(w->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, &src, &tag, &n));
    if (flag != 1 || tag != 4)
        werr(w, "probe after recv", "expected the tag 4 message", 0);
    free(wrecv(w, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, 1, 4, 2));
    WCHECK_OK(
        w, dpt_comm_probe(w->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, NULL, NULL, NULL));
    if (flag != 0)
        werr(w, "probe of an emptied mailbox", "expected nothing", 0);
}

static void test_probe(void)
{
    simple_ctx_t c = {.fn = probe_worker};
    worker_t *w = run_group(2, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "probe") == 0);
        free(w);
    }
}

/* ---- timeouts --------------------------------------------------------------- */

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank 1 never sends. Rank 0: a recv with 0.2 s fails with DPT_ETIMEDOUT
 * naming the peer and the tag after 0.2 s, without spinning; 0 s fails at
 * once; the default (the group's 0.3 s) after 0.3 s. The communicator
 * stays usable: a round trip follows. */
static void timeout_worker(worker_t *w)
{
    if (w->rank == 0) {
        void *data = &w;
        size_t n = 7;
        int src = 5, tag = 5;
        double t0 = dpt_now(), c0 = thread_cpu_s();
        dpt_error_clear();
        int rc = dpt_comm_recv(w->comm, 1, 3, 0.2, &data, &n, &src, &tag);
        double t = dpt_now() - t0, cpu = thread_cpu_s() - c0;
        if (rc != DPT_ETIMEDOUT ||
            !strstr(dpt_last_error(), "comm rank 0: recv from rank 1 with tag "
                                      "3 timed out after"))
            werr(w, "expected DPT_ETIMEDOUT naming rank 1 and tag 3", "recv 0.2 s", rc);
        if (data != NULL || n != 0 || src != -1 || tag != -1)
            werr(w, "outputs not reset", "recv 0.2 s", 0);
        if (t < 0.2 || t > 1.5)
            werr(w, "timeout of 0.2 s not kept", "recv 0.2 s", 0);
        if (cpu > 0.05)
            werr(w, "the wait used the CPU", "recv 0.2 s", 0);

        t0 = dpt_now();
        rc = dpt_comm_recv(w->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, 0.0, &data, &n, NULL,
                           NULL);
        if (rc != DPT_ETIMEDOUT || !strstr(dpt_last_error(), "recv from any rank with any tag"))
            werr(w, "expected DPT_ETIMEDOUT", "recv 0 s", rc);
        if (dpt_now() - t0 > 0.1)
            werr(w, "a 0 s timeout waited", "recv 0 s", 0);

        t0 = dpt_now();
        rc = dpt_comm_recv(w->comm, 1, 3, DPT_COMM_TIMEOUT_DEFAULT, &data, &n, NULL, NULL);
        t = dpt_now() - t0;
        if (rc != DPT_ETIMEDOUT || t < 0.3 || t > 1.5)
            werr(w, "expected DPT_ETIMEDOUT after the group's 0.3 s", "recv default", rc);
    }
    /* Usable afterwards: a round trip. (Rank 1 waits for it with a recv of
     * its own timeout: a barrier would time out while rank 0 is busy.) */
    if (w->rank == 1) {
        void *go = NULL;
        size_t n = 0;
        WCHECK_OK(w, dpt_comm_recv(w->comm, 0, 1, 10.0, &go, &n, NULL, NULL));
        free(go);
        WCHECK_OK(w, dpt_comm_send(w->comm, 0, 3, "late", 4));
    } else {
        WCHECK_OK(w, dpt_comm_send(w->comm, 1, 1, "go", 2));
        free(wrecv(w, 1, 3, 1, 3, 4));
    }
}

static void test_recv_timeout(void)
{
    simple_ctx_t c = {.fn = timeout_worker};
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 0.3;
    double t0 = dpt_now();
    worker_t *w = run_group(2, &opt, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "timeout") == 0);
        free(w);
    }
    CHECK(dpt_now() - t0 < 5.0);
}

/* A receiver waiting 300 ms for a message blocks instead of spinning. */
static void blocking_worker(worker_t *w)
{
    if (w->rank == 1) {
        nap_ms(300);
        WCHECK_OK(w, dpt_comm_send(w->comm, 0, 1, "now", 3));
        return;
    }
    double c0 = thread_cpu_s(), t0 = dpt_now();
    free(wrecv(w, 1, 1, 1, 1, 3));
    w->elapsed = thread_cpu_s() - c0;
    if (dpt_now() - t0 < 0.25)
        werr(w, "did not wait for the message", "recv", 0);
}

static void test_recv_blocks(void)
{
    simple_ctx_t c = {.fn = blocking_worker};
    worker_t *w = run_group(2, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "blocking") == 0);
        CHECK(w[0].elapsed < 0.05);
        free(w);
    }
}

/* ---- abort ------------------------------------------------------------------ */

/* Rank 0 waits (60 s timeout) for a message that never comes; rank 1 has
 * sent it one with another tag; rank 2 aborts after 50 ms. Rank 0's recv
 * fails at once with the abort's code and reason; every later send, recv
 * and probe fails the same way, on every rank. */
static void abort_worker(worker_t *w)
{
    double t0 = dpt_now();
    void *data = NULL;
    size_t n = 0;
    int flag = 0, rc;
    if (w->rank == 1)
        WCHECK_OK(w, dpt_comm_send(w->comm, 0, 2, "queued", 6));
    if (w->rank == 2) {
        nap_ms(50);
        rc = dpt_comm_abort(w->comm, "sampler crashed");
        if (rc != DPT_ECOMM)
            werr(w, "expected DPT_ECOMM", "abort", rc);
    } else if (w->rank == 0) {
        rc = dpt_comm_recv(w->comm, DPT_COMM_ANY_SOURCE, 1, 60.0, &data, &n, NULL, NULL);
        w->elapsed = dpt_now() - t0;
        if (rc != DPT_ECOMM || !strstr(dpt_last_error(), "rank 2: sampler crashed") ||
            !strstr(dpt_last_error(), "recv from any rank with tag 1"))
            werr(w, "expected DPT_ECOMM with the reason", "blocked recv", rc);
    } else {
        nap_ms(100);
    }
    /* failed for good: the queued message is not delivered either */
    if (w->rank == 0 &&
        (rc = dpt_comm_recv(w->comm, 1, 2, 60.0, &data, &n, NULL, NULL)) != DPT_ECOMM)
        werr(w, "expected DPT_ECOMM", "recv after the abort", rc);
    if (w->rank != 2 && (rc = dpt_comm_probe(w->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag,
                                             NULL, NULL, NULL)) != DPT_ECOMM)
        werr(w, "expected DPT_ECOMM", "probe after the abort", rc);
    rc = dpt_comm_send(w->comm, w->rank == 0 ? 1 : 0, 1, "x", 1);
    if (rc != DPT_ECOMM || !strstr(dpt_last_error(), "sampler crashed"))
        werr(w, "expected DPT_ECOMM", "send after the abort", rc);
}

static void test_abort_wakes_recv(void)
{
    simple_ctx_t c = {.fn = abort_worker};
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 60.0;
    worker_t *w = run_group(3, &opt, &c, NULL);
    if (w) {
        CHECK(report(w, 3, "abort") == 0);
        CHECK(w[0].elapsed < 2.0);
        free(w);
    }
}

/* A collective that times out fails the group: a recv waiting meanwhile
 * fails with the timeout's code. Rank 2 never arrives at the barrier. */
static void failed_group_worker(worker_t *w)
{
    if (w->rank == 0) {
        int rc = dpt_comm_barrier(w->comm);
        if (rc != DPT_ETIMEDOUT)
            werr(w, "expected DPT_ETIMEDOUT", "barrier", rc);
        return;
    }
    void *data = NULL;
    size_t n = 0;
    int rc = dpt_comm_recv(w->comm, 0, 0, 30.0, &data, &n, NULL, NULL);
    if (rc != DPT_ETIMEDOUT || !strstr(dpt_last_error(), "group failed earlier"))
        werr(w, "expected the barrier's DPT_ETIMEDOUT", "recv", rc);
}

static void test_failed_group_fails_recv(void)
{
    simple_ctx_t c = {.fn = failed_group_worker};
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 0.2;
    int absent[3] = {0, 0, 1};
    double t0 = dpt_now();
    worker_t *w = run_group(3, &opt, &c, absent);
    if (w) {
        CHECK(report(w, 3, "failed group") == 0);
        free(w);
    }
    CHECK(dpt_now() - t0 < 5.0);
}

/* ---- with a pending iallreduce; messages never received ------------------- */

static void pending_worker(worker_t *w)
{
    float buf[16];
    for (int i = 0; i < 16; i++)
        buf[i] = (float)(i + w->rank);
    dpt_comm_request_t req;
    WCHECK_OK(w, dpt_comm_iallreduce(w->comm, buf, 16, DPT_REDUCE_SUM, &req));
    int peer = 1 - w->rank;
    WCHECK_OK(w, dpt_comm_send(w->comm, peer, 1, &w->rank, sizeof w->rank));
    int *v = wrecv(w, peer, 1, peer, 1, sizeof(int));
    if (v != NULL && *v != peer)
        werr(w, "wrong payload", "recv", 0);
    free(v);
    WCHECK_OK(w, dpt_comm_wait(&req));
    for (int i = 0; i < 16; i++)
        if (buf[i] != (float)(2 * i + 1))
            werr(w, "wrong sum", "iallreduce", 0);
    /* left in the peer's mailbox: freed with the group */
    WCHECK_OK(w, dpt_comm_send(w->comm, peer, 2, buf, sizeof buf));
}

static void test_pending_iallreduce_and_leftovers(void)
{
    simple_ctx_t c = {.fn = pending_worker};
    worker_t *w = run_group(2, NULL, &c, NULL);
    if (w) {
        CHECK(report(w, 2, "pending") == 0);
        free(w);
    }
}

/* ---- argument errors ---------------------------------------------------------- */

static void test_bad_arguments(void)
{
    dpt_comm_threads_group_t *g = NULL;
    dpt_comm_t *c = NULL, *one = NULL;
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    opt.timeout_s = 5.0;
    REQUIRE_OK(dpt_comm_threads_group_create(&g, 3, &opt));
    REQUIRE_OK(dpt_comm_threads_join(g, 1, &c));
    char b[4] = "abc";
    void *data = b;
    size_t n = 5;
    int flag = 7, src = 7, tag = 7;

    CHECK_ERR(dpt_comm_send(NULL, 0, 0, b, 3), DPT_EINVAL, "send on a NULL communicator");
    CHECK_ERR(dpt_comm_send(c, 1, 0, b, 3), DPT_EINVAL, "comm rank 1: send: dest 1 is this rank");
    CHECK_ERR(dpt_comm_send(c, 3, 0, b, 3), DPT_EINVAL, "send: dest 3 is not in [0, 3)");
    CHECK_ERR(dpt_comm_send(c, -1, 0, b, 3), DPT_EINVAL, "dest -1 is not in [0, 3)");
    CHECK_ERR(dpt_comm_send(c, 0, -1, b, 3), DPT_EINVAL, "send: tag -1 is not in [0, 32767]");
    CHECK_ERR(dpt_comm_send(c, 0, DPT_COMM_TAG_MAX + 1, b, 3), DPT_EINVAL, "tag 32768");
    CHECK_ERR(dpt_comm_send(c, 0, 0, NULL, 3), DPT_EINVAL, "send: data is NULL with count 3");

    CHECK_ERR(dpt_comm_recv(NULL, 0, 0, 1.0, &data, &n, &src, &tag), DPT_EINVAL,
              "recv on a NULL communicator");
    CHECK(data == NULL && n == 0 && src == -1 && tag == -1);
    CHECK_ERR(dpt_comm_recv(c, 1, 0, 1.0, &data, &n, NULL, NULL), DPT_EINVAL,
              "recv: source 1 is this rank");
    CHECK_ERR(dpt_comm_recv(c, 3, 0, 1.0, &data, &n, NULL, NULL), DPT_EINVAL,
              "source 3 is not in [0, 3) nor DPT_COMM_ANY_SOURCE");
    CHECK_ERR(dpt_comm_recv(c, -2, 0, 1.0, &data, &n, NULL, NULL), DPT_EINVAL, "source -2");
    CHECK_ERR(dpt_comm_recv(c, 0, -2, 1.0, &data, &n, NULL, NULL), DPT_EINVAL,
              "tag -2 is not in [0, 32767] nor DPT_COMM_ANY_TAG");
    CHECK_ERR(dpt_comm_recv(c, 0, DPT_COMM_TAG_MAX + 1, 1.0, &data, &n, NULL, NULL), DPT_EINVAL,
              "tag 32768");
    CHECK_ERR(dpt_comm_recv(c, 0, 0, 1.0, NULL, &n, NULL, NULL), DPT_EINVAL,
              "data and nbytes must not be NULL");
    CHECK_ERR(dpt_comm_recv(c, 0, 0, 1.0, &data, NULL, NULL, NULL), DPT_EINVAL,
              "data and nbytes must not be NULL");
    CHECK_ERR(dpt_comm_recv(c, 0, 0, NAN, &data, &n, NULL, NULL), DPT_EINVAL, "timeout_s nan");
    CHECK_ERR(dpt_comm_recv(c, 0, 0, INFINITY, &data, &n, NULL, NULL), DPT_EINVAL, "timeout_s inf");

    flag = src = tag = 7;
    n = 5;
    CHECK_ERR(dpt_comm_probe(NULL, 0, 0, &flag, &src, &tag, &n), DPT_EINVAL,
              "probe on a NULL communicator");
    CHECK(flag == 0 && src == -1 && tag == -1 && n == 0);
    CHECK_ERR(dpt_comm_probe(c, 0, 0, NULL, NULL, NULL, NULL), DPT_EINVAL,
              "probe: flag must not be NULL");
    CHECK_ERR(dpt_comm_probe(c, 1, 0, &flag, NULL, NULL, NULL), DPT_EINVAL,
              "probe: source 1 is this rank");
    CHECK_ERR(dpt_comm_probe(c, 5, 0, &flag, NULL, NULL, NULL), DPT_EINVAL, "source 5");
    CHECK_ERR(dpt_comm_probe(c, 0, DPT_COMM_TAG_MAX + 1, &flag, NULL, NULL, NULL), DPT_EINVAL,
              "tag 32768");

    /* send_async takes its buffer even when it refuses (ASan: no leak) */
    CHECK_ERR(dpt_comm_send_async(NULL, 0, 0, malloc(3), 3), DPT_EINVAL, "NULL communicator");
    CHECK_ERR(dpt_comm_send_async(c, 1, 0, malloc(3), 3), DPT_EINVAL, "dest 1 is this rank");
    CHECK_ERR(dpt_comm_send_async(c, 0, -1, malloc(3), 3), DPT_EINVAL, "tag -1");
    CHECK_ERR(dpt_comm_send_async(c, 0, 0, NULL, 3), DPT_EINVAL, "data is NULL with count 3");

    /* the handle is still fine: a message to rank 0, which has not joined,
     * waits in its mailbox and is freed with the group */
    CHECK_OK(dpt_comm_send(c, 0, 0, b, 3));
    char *copy = malloc(3);
    REQUIRE(copy != NULL);
    memcpy(copy, "xy", 3);
    CHECK_OK(dpt_comm_send_async(c, 0, 1, copy, 3));
    CHECK_OK(dpt_comm_probe(c, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, NULL, NULL, NULL));
    CHECK(flag == 0);
    dpt_comm_destroy(c);
    dpt_comm_threads_group_destroy(g);

    /* a group of one has nobody to talk to */
    REQUIRE_OK(dpt_comm_threads_group_create(&g, 1, &opt));
    REQUIRE_OK(dpt_comm_threads_join(g, 0, &one));
    CHECK_ERR(dpt_comm_send(one, 0, 0, b, 3), DPT_EINVAL, "dest 0 is this rank");
    CHECK_ERR(dpt_comm_recv(one, 0, 0, 1.0, &data, &n, NULL, NULL), DPT_EINVAL,
              "source 0 is this rank");
    dpt_comm_destroy(one);
    dpt_comm_threads_group_destroy(g);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_bad_arguments),
        DPT_TEST(test_round_trip),
        DPT_TEST(test_order),
        DPT_TEST(test_any_source),
        DPT_TEST(test_payload_sizes),
        DPT_TEST(test_probe),
        DPT_TEST(test_recv_timeout),
        DPT_TEST(test_recv_blocks),
        DPT_TEST(test_abort_wakes_recv),
        DPT_TEST(test_failed_group_fails_recv),
        DPT_TEST(test_pending_iallreduce_and_leftovers),
    };
    return DPT_TEST_RUN(cases);
}
