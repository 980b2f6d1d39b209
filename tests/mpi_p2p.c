/*
 * Tests of point-to-point messages on the MPI backend, run by CTest under
 * `mpirun -np 2` and `-np 3` (skipped when the build has no MPI): round
 * trips with every rank, order per sender and tag, any-source receives, a
 * 64 MiB payload (8 MiB under TSan; also to a receiver that comes late), empty payloads,
 * probe, messages and collectives side by side (ring's own point-to-point
 * messages included), timeouts of recv (the communicator stays usable) and
 * of send (it fails, and a rank waiting in recv hears of it), a collective's
 * timeout report naming a rank that waits in recv, argument errors, and
 * hier's DPT_ENOTSUP.
 *
 * Set DPT_TEST_P2P_HUGE=1 to also send a payload past INT_MAX bytes (about
 * 2 GiB on each of two ranks; left out otherwise and reported as skipped).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt_config.h"
#include "dpt_test.h"

#if DPT_HAVE_MPI

static dpt_comm_t *g_comm; /* default options */
static int g_rank, g_size;

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static unsigned char pattern(size_t i, int salt)
{
    return (unsigned char)(((i + (size_t)salt * 977u) * 2654435761u) >> 13);
}

/* Receives one message and checks its sender, tag and size; returns the
 * payload (caller frees) or NULL. */
static void *recv_one(dpt_comm_t *c, int source, int tag, int want_source, int want_tag,
                      size_t want_bytes)
{
    void *data = NULL;
    size_t n = 0;
    int src = -2, tg = -2;
    int rc = dpt_comm_recv(c, source, tag, 30.0, &data, &n, &src, &tg);
    CHECK_OK(rc);
    CHECK(src == want_source && tg == want_tag && n == want_bytes);
    if (rc == 0 && !(src == want_source && tg == want_tag && n == want_bytes))
        fprintf(stderr, "  rank %d: got source %d tag %d %zu bytes, expected %d, %d, %zu\n", g_rank,
                src, tg, n, want_source, want_tag, want_bytes);
    return data;
}

/* Rank 0 and every other rank exchange a message, three times. */
static void test_round_trip(void)
{
    char msg[64], want[64];
    for (int k = 0; k < 3; k++) {
        if (g_rank == 0) {
            for (int q = 1; q < g_size; q++) {
                snprintf(msg, sizeof msg, "ping %d to rank %d", k, q);
                CHECK_OK(dpt_comm_send(g_comm, q, 5, msg, strlen(msg) + 1));
            }
            for (int q = 1; q < g_size; q++) {
                snprintf(want, sizeof want, "pong %d from rank %d", k, q);
                char *got = recv_one(g_comm, q, 6, q, 6, strlen(want) + 1);
                CHECK(got != NULL && strcmp(got, want) == 0);
                free(got);
            }
        } else {
            snprintf(want, sizeof want, "ping %d to rank %d", k, g_rank);
            char *got = recv_one(g_comm, 0, 5, 0, 5, strlen(want) + 1);
            CHECK(got != NULL && strcmp(got, want) == 0);
            free(got);
            snprintf(msg, sizeof msg, "pong %d from rank %d", k, g_rank);
            CHECK_OK(dpt_comm_send(g_comm, 0, 6, msg, strlen(msg) + 1));
        }
    }
    /* the largest tag */
    if (g_rank == 1)
        CHECK_OK(dpt_comm_send(g_comm, 0, DPT_COMM_TAG_MAX, "max", 4));
    if (g_rank == 0)
        free(recv_one(g_comm, 1, DPT_COMM_ANY_TAG, 1, DPT_COMM_TAG_MAX, 4));
    CHECK_OK(dpt_comm_barrier(g_comm));
}

#define NORDER 500

/* Every rank q > 0 sends NORDER messages with tag 1 interleaved with NORDER
 * with tag 2; rank 0 takes, per sender, all of tag 2 first, then tag 1:
 * each tag's in send order. Then again, received with any tag from any
 * source: per sender in send order across both tags. */
static void test_order(void)
{
    for (int pass = 0; pass < 2; pass++) {
        if (g_rank != 0) {
            for (int i = 0; i < NORDER; i++) {
                int v[3] = {g_rank, i, 1};
                CHECK_OK(dpt_comm_send(g_comm, 0, 1, v, sizeof v));
                v[2] = 2;
                CHECK_OK(dpt_comm_send(g_comm, 0, 2, v, sizeof v));
            }
        } else if (pass == 0) {
            int bad = 0;
            for (int q = 1; q < g_size; q++) {
                for (int k = 0; k < 2 * NORDER; k++) {
                    int tag = k < NORDER ? 2 : 1;
                    int *v = recv_one(g_comm, q, tag, q, tag, 3 * sizeof(int));
                    bad += v == NULL || v[0] != q || v[1] != k % NORDER || v[2] != tag;
                    free(v);
                }
            }
            CHECK(bad == 0);
        } else {
            int next[16] = {0}, bad = 0;
            for (int k = 0; k < 2 * NORDER * (g_size - 1); k++) {
                void *data = NULL;
                size_t n = 0;
                int src = -1, tag = -1;
                CHECK_OK(dpt_comm_recv(g_comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, 30.0, &data,
                                       &n, &src, &tag));
                const int *v = data;
                if (n != 3 * sizeof(int) || src < 1 || src >= g_size || v[0] != src) {
                    bad++;
                } else {
                    int i = next[src] / 2, t = 1 + next[src] % 2;
                    bad += v[1] != i || v[2] != t || tag != t;
                    next[src]++;
                }
                free(data);
            }
            CHECK(bad == 0);
            for (int q = 1; q < g_size; q++)
                CHECK(next[q] == 2 * NORDER);
        }
        CHECK_OK(dpt_comm_barrier(g_comm));
    }
}

#if defined(__SANITIZE_THREAD__)
#define BIG ((size_t)8 << 20) /* TSan checks every byte the loops below touch */
#else
#define BIG ((size_t)64 << 20)
#endif

/* BIG bytes from rank 0 to rank 1 and back (one direction at a time: a large
 * send waits for its receiver), then again with the receiver 200 ms late;
 * then empty messages. */
static void test_payload_sizes(void)
{
    if (g_rank <= 1) {
        int peer = 1 - g_rank;
        unsigned char *big = malloc(BIG);
        REQUIRE(big != NULL);
        for (size_t i = 0; i < BIG; i++)
            big[i] = pattern(i, g_rank);
        for (int late = 0; late < 2; late++) {
            double t0 = dpt_now();
            for (int dir = 0; dir < 2; dir++) {
                if (g_rank == dir) {
                    CHECK_OK(dpt_comm_send(g_comm, peer, 3, big, BIG));
                } else {
                    if (late)
                        nap_ms(200);
                    unsigned char *got = recv_one(g_comm, peer, 3, peer, 3, BIG);
                    size_t bad = 0;
                    for (size_t i = 0; got != NULL && i < BIG; i++)
                        bad += got[i] != pattern(i, peer);
                    CHECK(got != NULL && bad == 0);
                    free(got);
                }
            }
            if (g_rank == 0)
                printf("  %zu MiB each way%s: %.3f s\n", BIG >> 20,
                       late ? ", receiver 200 ms late" : "", dpt_now() - t0);
        }
        free(big);
        CHECK_OK(dpt_comm_send(g_comm, peer, 0, NULL, 0));
        void *data = &peer;
        size_t n = 9;
        CHECK_OK(dpt_comm_recv(g_comm, peer, 0, 30.0, &data, &n, NULL, NULL));
        CHECK(data == NULL && n == 0);
    }
    CHECK_OK(dpt_comm_barrier(g_comm));
}

/* Rank 1 sends two messages to rank 0, which probes for them (without
 * waiting, so in a loop: delivery takes a moment) and then receives them. */
static void test_probe(void)
{
    int flag = -1, src = -2, tag = -2;
    size_t n = 99;
    if (g_rank == 0) {
        CHECK_OK(
            dpt_comm_probe(g_comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, &src, &tag, &n));
        CHECK(flag == 0 && src == -1 && tag == -1 && n == 0);
    }
    CHECK_OK(dpt_comm_barrier(g_comm));
    if (g_rank == 1) {
        CHECK_OK(dpt_comm_send(g_comm, 0, 9, "abcdef", 6));
        CHECK_OK(dpt_comm_send(g_comm, 0, 4, "xy", 2));
    } else if (g_rank == 0) {
        double end = dpt_now() + 10.0;
        do {
            CHECK_OK(dpt_comm_probe(g_comm, 1, 4, &flag, &src, &tag, &n));
            if (!flag)
                nap_ms(1);
        } while (!flag && dpt_now() < end);
        CHECK(flag == 1 && src == 1 && tag == 4 && n == 2);
        CHECK_OK(
            dpt_comm_probe(g_comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, &src, &tag, &n));
        CHECK(flag == 1 && src == 1 && tag == 9 && n == 6); /* the first one sent */
        CHECK_OK(dpt_comm_probe(g_comm, 1, 5, &flag, NULL, NULL, NULL));
        CHECK(flag == 0);
        char *a = recv_one(g_comm, 1, 9, 1, 9, 6);
        CHECK(a != NULL && memcmp(a, "abcdef", 6) == 0);
        free(a);
        char *b = recv_one(g_comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, 1, 4, 2);
        CHECK(b != NULL && memcmp(b, "xy", 2) == 0);
        free(b);
        CHECK_OK(
            dpt_comm_probe(g_comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, NULL, NULL, NULL));
        CHECK(flag == 0);
    }
    CHECK_OK(dpt_comm_barrier(g_comm));
}

/* Messages and collectives side by side: a message with tag 21 (the tag of
 * ring's reduce-scatter messages, on another communicator) waits while the
 * ranks run a ring allreduce and an iallreduce; neither takes the other's
 * messages. */
static void test_beside_collectives(void)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.algorithm = DPT_ALLREDUCE_RING;
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_mpi_create(&c, &opt));
    int P = g_size, r = g_rank, flag = 1;
    CHECK_OK(dpt_comm_barrier(c));
    CHECK_OK(dpt_comm_probe(c, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, &flag, NULL, NULL, NULL));
    CHECK(flag == 0); /* create's and the barrier's own exchanges are not messages */
    CHECK_OK(dpt_comm_barrier(c));
    int v = 1000 + r;
    CHECK_OK(dpt_comm_send(c, (r + 1) % P, 21, &v, sizeof v));
    float buf[1000];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 1000; i++)
            buf[i] = (float)(i + r);
        if (k == 0) {
            CHECK_OK(dpt_comm_allreduce(c, buf, 1000, DPT_REDUCE_SUM));
        } else {
            /* and messages while an iallreduce is pending */
            dpt_comm_request_t req;
            CHECK_OK(dpt_comm_iallreduce(c, buf, 1000, DPT_REDUCE_SUM, &req));
            int left = (r + P - 1) % P;
            int *got = recv_one(c, left, 21, left, 21, sizeof(int));
            CHECK(got != NULL && *got == 1000 + left);
            free(got);
            CHECK_OK(dpt_comm_wait(&req));
        }
        int bad = 0;
        for (int i = 0; i < 1000; i++)
            bad += buf[i] != (float)(P * i + P * (P - 1) / 2);
        CHECK(bad == 0);
    }
    CHECK_OK(dpt_comm_barrier(c));
    dpt_comm_destroy(c);
}

/* Rank 1 never sends: rank 0's recv with 0.2 s fails with DPT_ETIMEDOUT
 * naming the peer and the tag; 0 s fails at once; the communicator's own
 * timeout (0.3 s) applies by default. The communicator stays usable. */
static void test_recv_timeout(void)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.timeout_s = 0.3;
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_mpi_create(&c, &opt));
    if (g_rank == 0) {
        void *data = &opt;
        size_t n = 3;
        int src = 4, tag = 4;
        double t0 = dpt_now();
        CHECK_ERR(dpt_comm_recv(c, 1, 3, 0.2, &data, &n, &src, &tag), DPT_ETIMEDOUT,
                  "comm rank 0: recv from rank 1 with tag 3 timed out after");
        double t = dpt_now() - t0;
        CHECK(t >= 0.2 && t < 1.5);
        CHECK(data == NULL && n == 0 && src == -1 && tag == -1);
        t0 = dpt_now();
        CHECK_ERR(
            dpt_comm_recv(c, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, 0.0, &data, &n, NULL, NULL),
            DPT_ETIMEDOUT, "recv from any rank with any tag timed out");
        CHECK(dpt_now() - t0 < 0.1);
        t0 = dpt_now();
        CHECK_ERR(dpt_comm_recv(c, 1, 3, DPT_COMM_TIMEOUT_DEFAULT, &data, &n, NULL, NULL),
                  DPT_ETIMEDOUT, "stays usable");
        t = dpt_now() - t0;
        CHECK(t >= 0.3 && t < 1.5);
        CHECK_OK(dpt_comm_send(c, 1, 1, "go", 2));
        free(recv_one(c, 1, 3, 1, 3, 4));
    } else if (g_rank == 1) {
        void *go = NULL;
        size_t n = 0;
        CHECK_OK(dpt_comm_recv(c, 0, 1, 10.0, &go, &n, NULL, NULL));
        free(go);
        CHECK_OK(dpt_comm_send(c, 0, 3, "late", 4));
    }
    /* still usable for collectives (everybody is here now) */
    CHECK_OK(dpt_comm_barrier(g_comm));
    CHECK_OK(dpt_comm_barrier(c));
    dpt_comm_destroy(c);
}

/* A large send that nobody receives (timeout 0.5 s) fails with
 * DPT_ETIMEDOUT naming the destination, and the communicator is failed;
 * rank 1, waiting meanwhile in a recv for another tag, hears of it at once
 * through the failure notice. The data stays valid (static): MPI may still
 * read it. */
static unsigned char g_unsent[1 << 20];

static void test_send_timeout(void)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.timeout_s = 0.5;
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_mpi_create(&c, &opt));
    void *data = NULL;
    size_t n = 0;
    if (g_rank == 0) {
        double t0 = dpt_now();
        CHECK_ERR(dpt_comm_send(c, 1, 4, g_unsent, sizeof g_unsent), DPT_ETIMEDOUT,
                  "send of 1048576 bytes to rank 1 with tag 4 timed out after 0.5 s: rank 1 did "
                  "not receive it");
        CHECK(dpt_now() - t0 < 2.0);
        CHECK_ERR(dpt_comm_recv(c, 1, 4, 1.0, &data, &n, NULL, NULL), DPT_ETIMEDOUT,
                  "failed earlier");
        CHECK_ERR(dpt_comm_barrier(c), DPT_ETIMEDOUT, "failed earlier");
    } else if (g_rank == 1) {
        double t0 = dpt_now();
        CHECK_ERR(dpt_comm_recv(c, 0, 99, 10.0, &data, &n, NULL, NULL), DPT_ETIMEDOUT,
                  "recv from rank 0 with tag 99 aborted: rank 0 failed: send of 1048576 bytes");
        CHECK(dpt_now() - t0 < 3.0);
        int flag = 0;
        CHECK_ERR(dpt_comm_probe(c, 0, 4, &flag, NULL, NULL, NULL), DPT_ETIMEDOUT,
                  "failed earlier");
    }
    dpt_comm_destroy(c);
    CHECK_OK(dpt_comm_barrier(g_comm));
}

/* Asynchronous sends: rank 0 sends a 1 MiB message (past the eager limit)
 * that rank 1 takes only 1 s later, without waiting for it, and the send
 * returns at once; many small ones after it arrive in order; a bad
 * destination is refused (the buffer is freed: the sanitizer build checks
 * that nothing leaks). A handle with a message nobody ever takes can
 * still be destroyed. */
static void test_send_async(void)
{
    const size_t big = (size_t)1 << 20;
    if (g_rank == 0) {
        unsigned char *b = malloc(big);
        REQUIRE(b != NULL);
        for (size_t i = 0; i < big; i++)
            b[i] = pattern(i, 3);
        double t0 = dpt_now();
        CHECK_OK(dpt_comm_send_async(g_comm, 1, 21, b, big));
        for (int k = 0; k < 50; k++) {
            int *v = malloc(sizeof *v);
            REQUIRE(v != NULL);
            *v = k;
            CHECK_OK(dpt_comm_send_async(g_comm, 1, 22, v, sizeof *v));
        }
        CHECK(dpt_now() - t0 < 0.5);
        CHECK_OK(dpt_comm_send_async(g_comm, 1, 23, NULL, 0));
        CHECK_ERR(dpt_comm_send_async(g_comm, g_size, 1, malloc(8), 8), DPT_EINVAL, "dest");
        CHECK_ERR(dpt_comm_send_async(g_comm, 0, 1, malloc(8), 8), DPT_EINVAL, "this rank");
        CHECK_ERR(dpt_comm_send_async(g_comm, 1, -2, malloc(8), 8), DPT_EINVAL, "tag");
    } else if (g_rank == 1) {
        nap_ms(1000);
        unsigned char *got = recv_one(g_comm, 0, 21, 0, 21, big);
        size_t bad = 0;
        for (size_t i = 0; got && i < big; i++)
            bad += got[i] != pattern(i, 3);
        CHECK(got != NULL && bad == 0);
        free(got);
        for (int k = 0; k < 50; k++) {
            int *v = recv_one(g_comm, 0, 22, 0, 22, sizeof(int));
            CHECK(v != NULL && *v == k);
            free(v);
        }
        free(recv_one(g_comm, 0, 23, 0, 23, 0));
    }
    CHECK_OK(dpt_comm_barrier(g_comm));
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_mpi_create(&c, NULL));
    if (g_rank == 0) {
        void *never = malloc(big);
        REQUIRE(never != NULL);
        memset(never, 1, big);
        CHECK_OK(dpt_comm_send_async(c, 1, 24, never, big));
    }
    CHECK_OK(dpt_comm_barrier(g_comm));
    dpt_comm_destroy(c);
    CHECK_OK(dpt_comm_barrier(g_comm));
}

/* Rank 0's allreduce times out while rank 1 waits in a recv: the report
 * says where rank 1 is, and rank 1's recv ends with rank 0's failure. */
static void test_report_names_recv(void)
{
    dpt_comm_mpi_options_t opt;
    dpt_comm_mpi_options_init(&opt);
    opt.timeout_s = 0.5;
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_mpi_create(&c, &opt));
    static float buf[4]; /* MPI may write into it later */
    void *data = NULL;
    size_t n = 0;
    if (g_rank == 0) {
        CHECK_ERR(dpt_comm_allreduce(c, buf, 4, DPT_REDUCE_SUM), DPT_ETIMEDOUT,
                  "rank 1 (in recv from rank 0 with tag 5)");
    } else if (g_rank == 1) {
        CHECK_ERR(dpt_comm_recv(c, 0, 5, 10.0, &data, &n, NULL, NULL), DPT_ETIMEDOUT,
                  "recv from rank 0 with tag 5 aborted: rank 0 failed: allreduce #1");
    }
    dpt_comm_destroy(c);
    CHECK_OK(dpt_comm_barrier(g_comm));
}

static void test_bad_arguments(void)
{
    char b[4] = "abc";
    void *data = b;
    size_t n = 5;
    int flag = 3;
    int P = g_size, r = g_rank, other = (r + 1) % P;
    CHECK_ERR(dpt_comm_send(g_comm, r, 0, b, 3), DPT_EINVAL, "is this rank");
    CHECK_ERR(dpt_comm_send(g_comm, P, 0, b, 3), DPT_EINVAL, "is not in [0, ");
    CHECK_ERR(dpt_comm_send(g_comm, other, -1, b, 3), DPT_EINVAL, "tag -1");
    CHECK_ERR(dpt_comm_send(g_comm, other, DPT_COMM_TAG_MAX + 1, b, 3), DPT_EINVAL, "tag 32768");
    CHECK_ERR(dpt_comm_send(g_comm, other, 0, NULL, 3), DPT_EINVAL, "data is NULL");
    /* past the largest payload: refused before data is read */
    CHECK_ERR(dpt_comm_send(g_comm, other, 0, b, ((size_t)1 << 60) + 1), DPT_EOVERFLOW,
              "bytes per message");
    CHECK_ERR(dpt_comm_recv(g_comm, r, 0, 1.0, &data, &n, NULL, NULL), DPT_EINVAL, "this rank");
    CHECK_ERR(dpt_comm_recv(g_comm, -5, 0, 1.0, &data, &n, NULL, NULL), DPT_EINVAL, "source -5");
    CHECK_ERR(dpt_comm_recv(g_comm, other, -3, 1.0, &data, &n, NULL, NULL), DPT_EINVAL, "tag -3");
    CHECK_ERR(dpt_comm_recv(g_comm, other, 0, NAN, &data, &n, NULL, NULL), DPT_EINVAL, "timeout_s");
    CHECK_ERR(dpt_comm_recv(g_comm, other, 0, 1.0, NULL, &n, NULL, NULL), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_comm_probe(g_comm, other, 0, NULL, NULL, NULL, NULL), DPT_EINVAL, "flag");
    CHECK_ERR(dpt_comm_probe(g_comm, P, 0, &flag, NULL, NULL, NULL), DPT_EINVAL, "source");
    /* the communicator is unharmed */
    CHECK_OK(dpt_comm_barrier(g_comm));
}

/* hier: not supported, with the reason. */
static void test_hier_not_supported(void)
{
    dpt_comm_hier_group_t *g = NULL;
    dpt_comm_t *c = NULL;
    REQUIRE_OK(dpt_comm_hier_group_create(&g, 1, NULL));
    REQUIRE_OK(dpt_comm_hier_join(g, 0, &c));
    void *data = NULL;
    size_t n = 0;
    int flag = 0, other = (g_rank + 1) % g_size;
    char want[128];
    snprintf(want, sizeof want,
             "comm hier rank %d: send: point-to-point messages are not supported: only thread 0",
             g_rank);
    CHECK_ERR(dpt_comm_send(c, other, 0, "x", 1), DPT_ENOTSUP, want);
    CHECK_ERR(dpt_comm_send_async(c, other, 0, malloc(1), 1), DPT_ENOTSUP, "not supported");
    CHECK_ERR(dpt_comm_recv(c, other, 0, 1.0, &data, &n, NULL, NULL), DPT_ENOTSUP, "not supported");
    CHECK_ERR(dpt_comm_probe(c, other, 0, &flag, NULL, NULL, NULL), DPT_ENOTSUP, "not supported");
    dpt_comm_destroy(c);
    dpt_comm_hier_group_destroy(g);
}

/* A payload past INT_MAX bytes travels as one message of a derived
 * datatype. */
static void test_huge_payload(void)
{
    const char *env = getenv("DPT_TEST_P2P_HUGE");
    if (env == NULL || strcmp(env, "1") != 0) {
        if (g_rank == 0)
            printf("  skipped: a payload past INT_MAX bytes (set DPT_TEST_P2P_HUGE=1; needs "
                   "about 4.2 GiB of memory)\n");
        return;
    }
    size_t nb = (size_t)INT32_MAX + 12345;
    if (g_rank == 0) {
        unsigned char *big = malloc(nb);
        REQUIRE(big != NULL);
        for (size_t i = 0; i < nb; i++)
            big[i] = pattern(i, 7);
        double t0 = dpt_now();
        CHECK_OK(dpt_comm_send(g_comm, 1, 8, big, nb));
        printf("  %zu bytes sent in %.2f s\n", nb, dpt_now() - t0);
        free(big);
    } else if (g_rank == 1) {
        int flag = 0;
        size_t n = 0;
        double end = dpt_now() + 30.0;
        while (!flag && dpt_now() < end) {
            CHECK_OK(dpt_comm_probe(g_comm, 0, 8, &flag, NULL, NULL, &n));
            nap_ms(1);
        }
        CHECK(flag == 1 && n == nb);
        unsigned char *got = recv_one(g_comm, 0, 8, 0, 8, nb);
        size_t bad = 0;
        for (size_t i = 0; got != NULL && i < nb; i++)
            bad += got[i] != pattern(i, 7);
        CHECK(got != NULL && bad == 0);
        free(got);
    }
    CHECK_OK(dpt_comm_barrier(g_comm));
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc;
    (void)argv;
    DPT_TEST_SKIP("this build has no MPI");
#else
    int rc = dpt_comm_mpi_init(&argc, &argv, DPT_COMM_MPI_FUNNELED);
    if (rc < 0) {
        fprintf(stderr, "dpt_comm_mpi_init: %s\n", dpt_last_error());
        return 1;
    }
    if (dpt_comm_mpi_create(&g_comm, NULL) < 0) {
        fprintf(stderr, "dpt_comm_mpi_create: %s\n", dpt_last_error());
        return 1;
    }
    g_rank = dpt_comm_rank(g_comm);
    g_size = dpt_comm_size(g_comm);
    if (g_size < 2) {
        fprintf(stderr, "mpi_p2p: run under mpirun with at least 2 ranks\n");
        return 1;
    }
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_bad_arguments),
        DPT_TEST(test_round_trip),
        DPT_TEST(test_order),
        DPT_TEST(test_payload_sizes),
        DPT_TEST(test_probe),
        DPT_TEST(test_beside_collectives),
        DPT_TEST(test_recv_timeout),
        DPT_TEST(test_send_timeout),
        DPT_TEST(test_send_async),
        DPT_TEST(test_report_names_recv),
        DPT_TEST(test_hier_not_supported),
        DPT_TEST(test_huge_payload),
    };
    rc = DPT_TEST_RUN(cases);
    dpt_comm_destroy(g_comm);
    dpt_comm_mpi_finalize();
    return rc;
#endif
}
