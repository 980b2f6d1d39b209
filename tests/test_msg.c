/*
 * The protocols' message module (src/comm/msg.h) over the threads backend:
 * fields round-trip little-endian, a short or foreign message is a clear
 * error naming the sender, FAIL carries a peer's error, and the STOP/BYE
 * handshake names the peers that do not answer.
 */
#include "dpt_test.h"
#include "comm/msg.h"
#include "dpt/comm.h"
#include "dpt/status.h"

#include <math.h>
#include <string.h>

static dpt_comm_threads_group_t *group;
static dpt_comm_t *rank[3];

static void setup(void)
{
    dpt_comm_threads_options_t o;
    dpt_comm_threads_options_init(&o);
    o.timeout_s = 5.0;
    REQUIRE_OK(dpt_comm_threads_group_create(&group, 3, &o));
    for (int r = 0; r < 3; r++)
        REQUIRE_OK(dpt_comm_threads_join(group, r, &rank[r]));
}

static void teardown(void)
{
    for (int r = 0; r < 3; r++)
        dpt_comm_destroy(rank[r]);
    dpt_comm_threads_group_destroy(group);
}

static void test_fields_round_trip(void)
{
    setup();
    dpt__msg_t m, in;
    dpt__msg_init(&m);
    dpt__msg_init(&in);
    float f[3] = {1.5f, -0.0f, NAN};
    dpt__msg_begin(&m, DPT__MSG_PROTO_TEST, DPT__MSG_FIRST);
    dpt__msg_put_u8(&m, 7);
    dpt__msg_put_u32(&m, 0xdeadbeefu);
    dpt__msg_put_u64(&m, 0x0123456789abcdefull);
    dpt__msg_put_f64(&m, -2.25);
    dpt__msg_put_f32s(&m, f, 3);
    dpt__msg_put_str(&m, "hello");
    /* The wire is little-endian whatever the host: u32 after the header
     * and the u8. */
    CHECK(m.buf[9] == 0xef && m.buf[12] == 0xde);
    CHECK_OK(dpt__msg_send(rank[1], 0, &m));
    CHECK_OK(dpt__msg_recv(rank[0], 1, DPT__MSG_PROTO_TEST, -1, 5.0, &in));
    CHECK(in.src == 1 && in.kind == DPT__MSG_FIRST);
    CHECK(dpt__msg_get_u8(&in) == 7);
    CHECK(dpt__msg_get_u32(&in) == 0xdeadbeefu);
    CHECK(dpt__msg_get_u64(&in) == 0x0123456789abcdefull);
    CHECK(dpt__msg_get_f64(&in) == -2.25);
    float g[3];
    dpt__msg_get_f32s(&in, g, 3);
    CHECK(memcmp(f, g, sizeof f) == 0);
    char s[3];
    dpt__msg_get_str(&in, s, sizeof s); /* cut to fit */
    CHECK(strcmp(s, "he") == 0);
    CHECK_OK(dpt__msg_check(&in, 1, "a test message"));
    /* Reading past the end is an error, not a read out of bounds. */
    CHECK(dpt__msg_get_u64(&in) == 0);
    CHECK_ERR(dpt__msg_check(&in, 0, "a test message"), DPT_EPROTO,
              "a test message from rank 1: the message");
    dpt__msg_deinit(&m);
    dpt__msg_deinit(&in);
    teardown();
}

static void test_foreign_and_short(void)
{
    setup();
    dpt__msg_t in;
    dpt__msg_init(&in);
    /* Bytes without the header, on the protocol's tag. */
    CHECK_OK(
        dpt_comm_send(rank[2], 0, DPT__MSG_TAG(DPT__MSG_PROTO_TEST, DPT__MSG_FIRST), "xyz", 3));
    CHECK_ERR(dpt__msg_recv(rank[0], 2, DPT__MSG_PROTO_TEST, DPT__MSG_FIRST, 5.0, &in), DPT_EPROTO,
              "rank 2 sent a message (tag");
    /* Another header version. */
    dpt__msg_t m;
    dpt__msg_init(&m);
    dpt__msg_begin(&m, DPT__MSG_PROTO_TEST, DPT__MSG_FIRST);
    m.buf[4] = 9;
    CHECK_OK(dpt__msg_send(rank[2], 0, &m));
    CHECK_ERR(dpt__msg_recv(rank[0], 2, DPT__MSG_PROTO_TEST, DPT__MSG_FIRST, 5.0, &in), DPT_EPROTO,
              "speaks message version 9");
    /* Another protocol's message is not taken by an any-kind receive. */
    dpt__msg_begin(&m, DPT__MSG_PROTO_SR, DPT__MSG_FIRST);
    CHECK_OK(dpt__msg_send(rank[2], 0, &m));
    CHECK_ERR(dpt__msg_recv(rank[0], 2, DPT__MSG_PROTO_TEST, -1, 0.05, &in), DPT_ETIMEDOUT, "");
    dpt__msg_deinit(&m);
    dpt__msg_deinit(&in);
    teardown();
}

static void test_fail_carries_the_error(void)
{
    setup();
    dpt__msg_t in;
    dpt__msg_init(&in);
    CHECK_OK(dpt__msg_send_fail(rank[2], 0, DPT__MSG_PROTO_TEST, DPT_EIO, "env step failed"));
    CHECK_OK(dpt__msg_recv(rank[0], DPT_COMM_ANY_SOURCE, DPT__MSG_PROTO_TEST, -1, 5.0, &in));
    CHECK(in.kind == DPT__MSG_FAIL);
    CHECK_ERR(dpt__msg_error(&in), DPT_EIO, "rank 2: env step failed");
    dpt__msg_deinit(&in);
    teardown();
}

static void test_stop_handshake(void)
{
    setup();
    int peers[2] = {1, 2};
    dpt__msg_t in;
    dpt__msg_init(&in);
    /* Rank 1 answers (after a message the handshake drops), rank 2 is
     * silent: it is named. */
    CHECK_OK(dpt__msg_send_fail(rank[1], 0, DPT__MSG_PROTO_TEST, DPT_EIO, "late"));
    CHECK_OK(dpt__msg_send_bye(rank[1], 0, DPT__MSG_PROTO_TEST));
    CHECK_ERR(dpt__msg_stop_all(rank[0], DPT__MSG_PROTO_TEST, peers, 2, 0.2), DPT_ETIMEDOUT,
              "rank 2 did not answer");
    /* Both got their STOP. */
    CHECK_OK(dpt__msg_recv(rank[1], 0, DPT__MSG_PROTO_TEST, DPT__MSG_STOP, 5.0, &in));
    CHECK_OK(dpt__msg_recv(rank[2], 0, DPT__MSG_PROTO_TEST, DPT__MSG_STOP, 5.0, &in));
    /* Both answer: the handshake completes. */
    CHECK_OK(dpt__msg_send_bye(rank[1], 0, DPT__MSG_PROTO_TEST));
    CHECK_OK(dpt__msg_send_bye(rank[2], 0, DPT__MSG_PROTO_TEST));
    CHECK_OK(dpt__msg_stop_all(rank[0], DPT__MSG_PROTO_TEST, peers, 2, 5.0));
    /* Neither answers: both named. */
    CHECK_OK(dpt__msg_recv(rank[1], 0, DPT__MSG_PROTO_TEST, DPT__MSG_STOP, 5.0, &in));
    CHECK_OK(dpt__msg_recv(rank[2], 0, DPT__MSG_PROTO_TEST, DPT__MSG_STOP, 5.0, &in));
    CHECK_ERR(dpt__msg_stop_all(rank[0], DPT__MSG_PROTO_TEST, peers, 2, 0.05), DPT_ETIMEDOUT,
              "ranks 1, 2 did not answer");
    CHECK_OK(dpt__msg_recv(rank[1], 0, DPT__MSG_PROTO_TEST, DPT__MSG_STOP, 5.0, &in));
    CHECK_OK(dpt__msg_recv(rank[2], 0, DPT__MSG_PROTO_TEST, DPT__MSG_STOP, 5.0, &in));
    dpt__msg_deinit(&in);
    teardown();
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_fields_round_trip),
        DPT_TEST(test_foreign_and_short),
        DPT_TEST(test_fail_carries_the_error),
        DPT_TEST(test_stop_handshake),
    };
    return DPT_TEST_RUN(cases);
}
