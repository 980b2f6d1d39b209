/* core: status codes, RNG streams, arenas and the variable table, windows. */
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/dpt.h"
#include "dpt/rng.h"
#include "dpt/stats.h"
#include "core/intern.h" /* process-lifetime names */

#include <float.h>
#include <math.h>
#include <stdint.h>

static void test_status_strings(void)
{
    CHECK(strcmp(dpt_strerror(DPT_OK), "success") == 0);
    CHECK(strcmp(dpt_strerror(DPT_EINVAL), "invalid argument") == 0);
    CHECK(strcmp(dpt_strerror(12345), "unknown error") == 0);
    CHECK(strcmp(dpt_status_name(DPT_ETIMEDOUT), "DPT_ETIMEDOUT") == 0);
    CHECK(dpt_error(DPT_EIO, "file %s: %d bytes", "x.bin", 3) == DPT_EIO);
    CHECK(strcmp(dpt_last_error(), "file x.bin: 3 bytes") == 0);
    dpt_error_clear();
    CHECK(dpt_last_error()[0] == '\0');
    /* Long messages are truncated, not overflowed. */
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    dpt_error(DPT_EINVAL, "%s", big);
    CHECK(strlen(dpt_last_error()) == 511);
}

/* Known-answer vectors for Philox4x32-10 published with Random123
 * (kat_vectors): counter, key -> output. */
static void test_philox_known_answers(void)
{
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        dpt_philox4x32_10(kat[i], kat[i] + 4, out);
        for (int j = 0; j < 4; j++)
            CHECK(out[j] == kat[i][6 + j]);
    }
}

static void test_rng_same_key_same_sequence(void)
{
    dpt_rng_t a, b;
    dpt_rng_init(&a, 42, 1, 2, DPT_RNG_INIT);
    dpt_rng_init(&b, 42, 1, 2, DPT_RNG_INIT);
    for (int i = 0; i < 1000; i++)
        CHECK(dpt_rng_u32(&a) == dpt_rng_u32(&b));
}

static void test_rng_tell_seek(void)
{
    dpt_rng_t a, b;
    dpt_rng_init(&a, 7, 0, 3, DPT_RNG_SHUFFLE);
    for (int i = 0; i < 13; i++)
        (void)dpt_rng_u32(&a);
    uint64_t pos = dpt_rng_tell(&a);
    CHECK(pos == 13);
    uint32_t expect[20];
    for (int i = 0; i < 20; i++)
        expect[i] = dpt_rng_u32(&a);
    dpt_rng_init(&b, 7, 0, 3, DPT_RNG_SHUFFLE);
    dpt_rng_seek(&b, pos);
    CHECK(dpt_rng_tell(&b) == pos);
    for (int i = 0; i < 20; i++)
        CHECK(dpt_rng_u32(&b) == expect[i]);
    dpt_rng_seek(&b, 0);
    dpt_rng_t c;
    dpt_rng_init(&c, 7, 0, 3, DPT_RNG_SHUFFLE);
    CHECK(dpt_rng_u32(&b) == dpt_rng_u32(&c));
}

/* Different tuples must give unrelated streams: the fraction of equal bits
 * between two streams is ~1/2, and their correlation is ~0. */
static void test_rng_streams_independent(void)
{
    const uint32_t tuples[][4] = {
        {1, 0, 0, 1}, {2, 0, 0, 1}, {1, 1, 0, 1}, {1, 0, 1, 1}, {1, 0, 0, 2}};
    enum { N = 20000 };
    static double u[5][N];
    for (int s = 0; s < 5; s++) {
        dpt_rng_t r;
        dpt_rng_init(&r, tuples[s][0], tuples[s][1], tuples[s][2], tuples[s][3]);
        for (int i = 0; i < N; i++)
            u[s][i] = dpt_rng_uniform_double(&r);
    }
    for (int s = 0; s < 5; s++) {
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < N; i++)
            mean += u[s][i];
        mean /= N;
        for (int i = 0; i < N; i++)
            var += (u[s][i] - mean) * (u[s][i] - mean);
        var /= N;
        /* U(0,1): mean 1/2 (sd of the mean 0.002), variance 1/12. */
        CHECK(fabs(mean - 0.5) < 0.01);
        CHECK(fabs(var - 1.0 / 12.0) < 0.005);
        for (int t = s + 1; t < 5; t++) {
            double cov = 0.0;
            for (int i = 0; i < N; i++)
                cov += (u[s][i] - 0.5) * (u[t][i] - 0.5);
            double corr = cov / N * 12.0;
            /* sd of the correlation estimate ~ 1/sqrt(N) = 0.007 */
            CHECK(fabs(corr) < 0.04);
        }
    }
}

static void test_rng_distributions(void)
{
    dpt_rng_t r;
    dpt_rng_init(&r, 3, 0, 0, DPT_RNG_TEST);
    enum { N = 50000 };
    double s = 0.0, s2 = 0.0;
    for (int i = 0; i < N; i++) {
        double z = dpt_rng_normal(&r);
        s += z;
        s2 += z * z;
    }
    CHECK(fabs(s / N) < 0.03);
    CHECK(fabs(s2 / N - 1.0) < 0.03);

    float buf[1001];
    dpt_rng_fill_normal(&r, buf, 1001, 5.0f, 0.5f);
    double m = 0.0;
    for (int i = 0; i < 1001; i++)
        m += (double)buf[i];
    CHECK(fabs(m / 1001 - 5.0) < 0.1);

    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint32_t v = dpt_rng_below(&r, 7);
        REQUIRE(v < 7);
        counts[v]++;
    }
    for (int k = 0; k < 7; k++)
        CHECK(abs(counts[k] - 10000) < 500);
    CHECK(dpt_rng_below(&r, 0) == 0);

    const float w[4] = {1.0f, 0.0f, 3.0f, 0.0f};
    int cc[4] = {0};
    for (int i = 0; i < 40000; i++)
        cc[dpt_rng_categorical(&r, w, 4)]++;
    CHECK(cc[1] == 0 && cc[3] == 0);
    CHECK(abs(cc[0] - 10000) < 600);
    CHECK(abs(cc[2] - 30000) < 600);
    const float zero[2] = {0.0f, 0.0f};
    CHECK(dpt_rng_categorical(&r, zero, 2) == 0);

    float f = dpt_rng_uniform(&r);
    CHECK(f >= 0.0f && f < 1.0f);

    size_t idx[100];
    for (size_t i = 0; i < 100; i++)
        idx[i] = i;
    dpt_rng_shuffle(&r, idx, 100);
    int seen[100] = {0}, moved = 0;
    for (size_t i = 0; i < 100; i++) {
        seen[idx[i]]++;
        moved += idx[i] != i;
    }
    for (int i = 0; i < 100; i++)
        CHECK(seen[i] == 1);
    CHECK(moved > 80);
}

static void test_vartable(void)
{
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    size_t off = 99;
    size_t s1[2] = {3, 5}, s2[1] = {7}, s3[1] = {0};
    REQUIRE_OK(dpt_vartable_add(&t, "w", 2, s1, &off));
    CHECK(off == 0);
    REQUIRE_OK(dpt_vartable_add(&t, "b", 1, s2, &off));
    CHECK(off == 16); /* 15 floats rounded up to a 64-byte boundary */
    CHECK(t.total == 32);
    CHECK(dpt_vartable_find(&t, "b")->count == 7);
    CHECK(dpt_vartable_find(&t, "nope") == NULL);
    CHECK_ERR(dpt_vartable_add(&t, "w", 1, s2, NULL), DPT_EINVAL, "already");
    CHECK_ERR(dpt_vartable_add(&t, "z", 1, s3, NULL), DPT_EINVAL, "dimension 0 is 0");
    CHECK_ERR(dpt_vartable_add(&t, "", 1, s2, NULL), DPT_EINVAL, "empty");
    CHECK_ERR(dpt_vartable_add(&t, "q", 0, s2, NULL), DPT_EINVAL, "dimensions");
    size_t huge[2] = {(size_t)1 << 40, (size_t)1 << 40};
    CHECK_ERR(dpt_vartable_add(&t, "h", 2, huge, NULL), DPT_EOVERFLOW, "overflow");
    char longname[100];
    memset(longname, 'n', 99);
    longname[99] = '\0';
    CHECK_ERR(dpt_vartable_add(&t, longname, 1, s2, NULL), DPT_EINVAL, "longer");
    CHECK(t.nvars == 2);

    dpt_vartable_t c;
    dpt_vartable_init(&c);
    REQUIRE_OK(dpt_vartable_copy(&c, &t));
    CHECK(dpt_vartable_equal(&c, &t));
    REQUIRE_OK(dpt_vartable_add(&c, "extra", 1, s2, NULL));
    CHECK(!dpt_vartable_equal(&c, &t));
    dpt_vartable_deinit(&c);
    dpt_vartable_deinit(&t);
    dpt_vartable_deinit(&t); /* twice is safe */
}

static void test_arena(void)
{
    dpt_arena_t a;
    REQUIRE_OK(dpt_arena_init(&a, 1000));
    CHECK(((uintptr_t)a.data % DPT_ARENA_ALIGN) == 0);
    CHECK(dpt_vec_sumsq(a.data, a.count) == 0.0);
    for (size_t i = 0; i < a.count; i++)
        a.data[i] = (float)i;
    CHECK(dpt_vec_sumsq(a.data, 4) == 0.0 + 1.0 + 4.0 + 9.0);
    CHECK(dpt_vec_dot(a.data, a.data, 3) == 5.0);
    uint64_t h1 = dpt_vec_checksum(a.data, a.count);
    a.data[500] = -a.data[500];
    CHECK(dpt_vec_checksum(a.data, a.count) != h1);
    a.data[500] = -a.data[500];
    CHECK(dpt_vec_checksum(a.data, a.count) == h1);
    dpt_vec_scale(a.data, 4, 2.0f);
    CHECK(a.data[3] == 6.0f);
    dpt_vec_axpy(a.data, a.data + 10, 2, 0.5f);
    CHECK(a.data[0] == 5.0f && a.data[1] == 7.5f);
    CHECK(dpt_vec_all_finite(a.data, a.count));
    a.data[777] = NAN;
    CHECK(!dpt_vec_all_finite(a.data, a.count));
    CHECK(dpt_vec_first_nonfinite(a.data, a.count) == 777);
    a.data[777] = -INFINITY;
    CHECK(!dpt_vec_all_finite(a.data, a.count));
    dpt_vec_zero(a.data, a.count);
    CHECK(dpt_vec_all_finite(a.data, a.count));
    /* The extremes of the finite range pass; each non-finite kind fails, in
     * the vector body and in the tail of an odd length. */
    a.data[1] = FLT_MAX, a.data[2] = -FLT_MAX, a.data[3] = FLT_MIN / 4.0f, a.data[4] = -0.0f;
    CHECK(dpt_vec_all_finite(a.data, 13));
    const float bad[] = {INFINITY, -INFINITY, NAN, -NAN};
    for (int k = 0; k < 4; k++)
        for (size_t at = 0; at < 13; at += 6) {
            float keep = a.data[at];
            a.data[at] = bad[k];
            CHECK(!dpt_vec_all_finite(a.data, 13));
            CHECK(dpt_vec_first_nonfinite(a.data, 13) == at);
            a.data[at] = keep;
        }
    CHECK(dpt_vec_all_finite(a.data, 13));
    dpt_arena_deinit(&a);
    dpt_arena_deinit(&a);

    /* A large arena (huge-page path) and the zero-size and overflow cases. */
    REQUIRE_OK(dpt_arena_init(&a, (size_t)3 << 20));
    CHECK(a.data[((size_t)3 << 20) - 1] == 0.0f);
    dpt_arena_deinit(&a);
    REQUIRE_OK(dpt_arena_init(&a, 0));
    CHECK(a.data == NULL);
    CHECK_ERR(dpt_arena_init(&a, ((size_t)-1) / 2), DPT_EOVERFLOW, "overflow");
    size_t out;
    CHECK(dpt_mul_size((size_t)-1, 2, &out) == DPT_EOVERFLOW);
    CHECK(dpt_mul_size(3, 4, &out) == 0 && out == 12);
}

static void test_window(void)
{
    dpt_window_t w;
    CHECK_ERR(dpt_window_init(&w, 0), DPT_EINVAL, "capacity");
    REQUIRE_OK(dpt_window_init(&w, 4));
    CHECK(dpt_window_mean(&w) == 0.0 && dpt_window_quantile(&w, 0.5) == 0.0);
    for (int i = 1; i <= 6; i++)
        dpt_window_push(&w, i); /* keeps 3, 4, 5, 6 */
    CHECK(w.count == 4 && w.total == 6);
    CHECK(dpt_window_mean(&w) == 4.5);
    CHECK(dpt_window_min(&w) == 3.0);
    CHECK(dpt_window_max(&w) == 6.0);
    CHECK_CLOSE(dpt_window_std(&w), sqrt(1.25), 1e-12);
    CHECK(dpt_window_quantile(&w, 0.5) == 4.5);
    CHECK(dpt_window_quantile(&w, 0.0) == 3.0);
    CHECK(dpt_window_quantile(&w, 1.0) == 6.0);
    CHECK(dpt_window_quantile(&w, 2.0) == 6.0);
    CHECK_CLOSE(dpt_window_quantile(&w, 0.25), 3.75, 1e-12);
    dpt_window_clear(&w);
    CHECK(w.count == 0);
    dpt_window_deinit(&w);
    double t0 = dpt_now(), t1 = dpt_now();
    CHECK(t1 >= t0);
}

static void test_batch(void)
{
    float x[6 * 2];
    int32_t lab[6], st[3 * 4];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i;
    for (int i = 0; i < 6; i++)
        lab[i] = i;
    dpt_batch_t b;
    dpt_batch_init(&b, 6);
    REQUIRE_OK(dpt_batch_add(&b, "x", DPT_F32, 2, 0, x));
    REQUIRE_OK(dpt_batch_add(&b, "label", DPT_I32, 1, 0, lab));
    CHECK_ERR(dpt_batch_add(&b, "x", DPT_F32, 2, 0, x), DPT_EINVAL, "already");
    CHECK_ERR(dpt_batch_add(&b, "w", DPT_F32, 0, 0, x), DPT_EINVAL, "width 0");
    CHECK_ERR(dpt_batch_add(&b, "w", DPT_F32, 1, 0, NULL), DPT_EINVAL, "no data");
    CHECK_ERR(dpt_batch_add(&b, "", DPT_F32, 1, 0, x), DPT_EINVAL, "empty");
    CHECK_ERR(dpt_batch_add(&b, "w", (dpt_dtype_t)7, 1, 0, x), DPT_EINVAL, "unknown type");
    CHECK(dpt_batch_sequences(&b) == 6);
    CHECK(dpt_batch_get(&b, "t", "x", DPT_F32, 2, NULL) == x);
    size_t w = 0;
    CHECK(dpt_batch_get(&b, "t", "label", DPT_I32, 0, &w) == lab && w == 1);
    dpt_error_clear();
    CHECK(dpt_batch_get(&b, "t", "x", DPT_I32, 2, NULL) == NULL);
    CHECK(strstr(dpt_last_error(), "t: column \"x\" is float32, expected int32") != NULL);
    CHECK(dpt_batch_get(&b, "t", "x", DPT_F32, 3, NULL) == NULL);
    CHECK(strstr(dpt_last_error(), "width 2") != NULL);
    CHECK(dpt_batch_get(&b, "t", "obs", DPT_F32, 3, NULL) == NULL);
    CHECK(strstr(dpt_last_error(), "no column \"obs\"") != NULL);
    dpt_batch_t v;
    REQUIRE_OK(dpt_batch_view(&b, 2, 3, &v));
    CHECK(v.rows == 3);
    CHECK(((const float *)dpt_batch_find(&v, "x")->data)[0] == 4.0f);
    CHECK(((const int32_t *)dpt_batch_find(&v, "label")->data)[2] == 4);
    CHECK_ERR(dpt_batch_view(&b, 4, 3, &v), DPT_EINVAL, "outside");
    CHECK_OK(dpt_batch_check_layout(&v, &b));

    /* Sequences of 2 rows with one state row per sequence. */
    b.seq_len = 2;
    for (int i = 0; i < 12; i++)
        st[i] = 100 + i;
    REQUIRE_OK(dpt_batch_add(&b, "state", DPT_I32, 4, 1, st));
    CHECK(dpt_batch_sequences(&b) == 3);
    REQUIRE_OK(dpt_batch_view(&b, 2, 4, &v));
    CHECK(((const int32_t *)dpt_batch_find(&v, "state")->data)[0] == 104);
    CHECK(((const float *)dpt_batch_find(&v, "x")->data)[0] == 4.0f);
    CHECK_ERR(dpt_batch_view(&b, 1, 2, &v), DPT_EINVAL, "split sequences");
    dpt_batch_t other;
    dpt_batch_init(&other, 6);
    REQUIRE_OK(dpt_batch_add(&other, "x", DPT_F32, 3, 0, x));
    CHECK_ERR(dpt_batch_check_layout(&other, &b), DPT_EINVAL, "column \"x\" is float32 x 3");
    dpt_batch_init(&other, 6);
    REQUIRE_OK(dpt_batch_add(&other, "x", DPT_F32, 2, 0, x));
    CHECK_ERR(dpt_batch_check_layout(&other, &b), DPT_EINVAL, "no column \"label\"");
    CHECK_ERR(dpt_batch_check_layout(&b, &other), DPT_EINVAL, "unexpected column");
    CHECK(strcmp(dpt_dtype_name(DPT_I32), "int32") == 0 && dpt_dtype_size(DPT_F32) == 4);
}

static void test_features(void)
{
    CHECK(strcmp(dpt_version(), "") != 0);
    for (int f = 0; f < DPT_FEATURE_COUNT; f++) {
        CHECK(strcmp(dpt_feature_name((dpt_feature_t)f), "unknown") != 0);
        int h = dpt_has_feature((dpt_feature_t)f);
        CHECK(h == 0 || h == 1);
    }
    CHECK(dpt_has_feature(DPT_FEATURE_COUNT) == 0);
    CHECK(strcmp(dpt_feature_name(DPT_FEATURE_COUNT), "unknown") == 0);
}

/* Interned names (core/intern.h): equal strings share one copy, which
 * outlives the buffer it came from; the table grows past its first size. */
static void test_intern(void)
{
    char buf[64];
    snprintf(buf, sizeof buf, "info/learner/%s/kl", "a");
    const char *a = dpt__intern(buf);
    REQUIRE(a != NULL);
    snprintf(buf, sizeof buf, "something else");
    CHECK(!strcmp(a, "info/learner/a/kl"));
    CHECK(dpt__intern("info/learner/a/kl") == a);
    const char *first[100];
    for (int i = 0; i < 100; i++) {
        snprintf(buf, sizeof buf, "name %d", i);
        first[i] = dpt__intern(buf);
    }
    int same = 1;
    for (int i = 0; i < 100; i++) {
        snprintf(buf, sizeof buf, "name %d", i);
        same &= dpt__intern(buf) == first[i] && !strcmp(first[i], buf);
    }
    CHECK(same);
    CHECK(dpt__intern("info/learner/a/kl") == a);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_status_strings),
        DPT_TEST(test_philox_known_answers),
        DPT_TEST(test_rng_same_key_same_sequence),
        DPT_TEST(test_rng_tell_seek),
        DPT_TEST(test_rng_streams_independent),
        DPT_TEST(test_rng_distributions),
        DPT_TEST(test_vartable),
        DPT_TEST(test_arena),
        DPT_TEST(test_window),
        DPT_TEST(test_features),
        DPT_TEST(test_batch),
        DPT_TEST(test_intern),
    };
    return DPT_TEST_RUN(cases);
}
