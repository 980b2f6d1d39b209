/*
 * The sync-replicas parameter service: staleness, tokens in both regimes,
 * the initial-tokens rule, worker-order sums, sparse accumulation against
 * the dense equivalent, lazy Adam, EMA, placement, misuse errors, lost
 * workers, timeouts, and threaded runs (bitwise without backups; going on
 * past a straggler and a dead backup with them).
 */
#include "dpt/dpt.h"
#include "dpt/sync_replicas.h"
#include "dpt_test.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* A table of one vector "w" [n] (and, with rows > 0, a table "emb"
 * [rows, dim]). */
static void make_table(dpt_vartable_t *t, size_t n, size_t rows, size_t dim)
{
    dpt_vartable_init(t);
    size_t s1[1] = {n};
    dpt_vartable_add(t, "w", 1, s1, NULL);
    if (rows) {
        size_t s2[2] = {rows, dim};
        dpt_vartable_add(t, "emb", 2, s2, NULL);
    }
}

static dpt_sr_config_t sgd_config(const dpt_vartable_t *t, int R, int N, float lr)
{
    dpt_sr_config_t c = dpt_sr_defaults();
    c.vars = t;
    c.replicas_to_aggregate = R;
    c.total_num_replicas = N;
    c.schedule.lr0 = lr;
    return c;
}

static void test_misuse(void)
{
    dpt_vartable_t empty, t;
    dpt_vartable_init(&empty);
    make_table(&t, 4, 0, 0);
    dpt_sr_t *sr = NULL;
    dpt_sr_config_t c = sgd_config(&empty, 1, 1, 0.1f);
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "no variables");
    c.vars = NULL;
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "no variables");
    c = sgd_config(&t, 0, 1, 0.1f);
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "replicas_to_aggregate = 0");
    c = sgd_config(&t, 1, 0, 0.1f);
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "total_num_replicas = 0");
    c = sgd_config(&t, 1, 1, 0.1f);
    c.num_ps = 0;
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "num_ps");
    c = sgd_config(&t, 1, 1, 0.1f);
    c.ema_decay = 1.0f;
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "ema_decay");
    c = sgd_config(&t, 1, 1, 0.1f);
    c.grad_clip = -1;
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "grad_clip");
    unsigned char sp[1] = {1};
    c = sgd_config(&t, 1, 1, 0.1f);
    c.sparse = sp;
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "marked sparse");
    c = sgd_config(&t, 4, 2, 0.1f);
    c.optim.momentum = 2.0f;
    c.optim.kind = DPT_OPTIM_MOMENTUM;
    CHECK(dpt_sr_create(&sr, &c) == DPT_EINVAL);
    CHECK(sr == NULL);

    c = sgd_config(&t, 4, 2, 0.1f);
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    float g[16] = {0}, p[16];
    uint64_t step;
    /* Nothing works before the update exists. */
    CHECK_ERR(dpt_sr_take_token(sr, 0, &step), DPT_ESTATE, "tokens requested before the update");
    CHECK_ERR(dpt_sr_push(sr, 0, 0, g, NULL, NULL), DPT_ESTATE, "before the update exists");
    CHECK_ERR(dpt_sr_fetch(sr, p), DPT_ESTATE, "before the update exists");
    CHECK_ERR(dpt_sr_begin(sr, -1, 10), DPT_ESTATE, "no global step");
    dpt_sr_set_global_step(sr, 0);
    CHECK_ERR(dpt_sr_begin(sr, 1, 10), DPT_EINVAL, "too few for the first step");
    CHECK_ERR(dpt_sr_begin(sr, -1, 0), DPT_EINVAL, "nothing to do");
    REQUIRE_OK(dpt_sr_begin(sr, 2, 10));
    CHECK_ERR(dpt_sr_push(sr, 2, 0, g, NULL, NULL), DPT_EINVAL, "workers are 0..1");
    CHECK_ERR(dpt_sr_take_token(sr, -1, &step), DPT_EINVAL, "worker -1");
    g[3] = NAN;
    CHECK_ERR(dpt_sr_push(sr, 1, 0, g, NULL, NULL), DPT_ENUMERIC, "element 3");
    dpt_sr_stats_t st;
    dpt_sr_get_stats(sr, &st);
    CHECK(st.pushes == 0);
    CHECK_ERR(dpt_sr_fetch_rows(sr, 0, NULL, 0, p), DPT_EINVAL, "not a sparse variable");
    dpt_sr_close(sr);
    CHECK(dpt_sr_take_token(sr, 0, &step) == DPT_ECLOSED);
    dpt_sr_destroy(sr);
    dpt_sr_destroy(NULL);
    dpt_vartable_deinit(&t);
    dpt_vartable_deinit(&empty);
}

/* N = 3 workers, R = 2: two fresh gradients make a step, the third is
 * stale; tokens are max(N, R) = 3 per step. */
static void test_staleness_and_tokens_backups(void)
{
    dpt_vartable_t t;
    make_table(&t, 2, 0, 0);
    dpt_sr_config_t c = sgd_config(&t, 2, 3, 1.0f);
    dpt_sr_t *sr;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    dpt_sr_set_global_step(sr, 0);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 100));
    dpt_sr_stats_t st;
    dpt_sr_get_stats(sr, &st);
    CHECK(st.tokens_enqueued == 0 && st.tokens_available == 0);
    float g0[16] = {2, 4}, g1[16] = {4, 8}, g2[16] = {100, 100};
    int acc = -1;
    CHECK_OK(dpt_sr_push(sr, 0, 0, g0, NULL, &acc));
    CHECK(acc == 1);
    CHECK(dpt_sr_global_step(sr) == 0);
    CHECK_OK(dpt_sr_push(sr, 1, 0, g1, NULL, &acc));
    CHECK(acc == 1);
    CHECK(dpt_sr_global_step(sr) == 1);
    CHECK_OK(dpt_sr_push(sr, 2, 0, g2, NULL, &acc));
    CHECK(acc == 0);
    dpt_sr_get_stats(sr, &st);
    CHECK(st.stale_dropped == 1);
    CHECK(st.pushes == 3);
    CHECK(st.tokens_enqueued == 3 && st.tokens_available == 3 && st.tokens_taken == 0);
    CHECK(st.bytes_pushed == 3 * 2 * sizeof(float));
    CHECK(st.bytes_last_step == 2 * 2 * sizeof(float));
    /* p = 0 - 1.0 * (g0 + g1) / 2 */
    float p[16];
    CHECK_OK(dpt_sr_fetch(sr, p));
    CHECK(p[0] == -3.0f && p[1] == -6.0f);
    uint64_t step = 99;
    for (int w = 0; w < 3; w++) {
        CHECK_OK(dpt_sr_take_token(sr, w, &step));
        CHECK(step == 1);
    }
    dpt_sr_get_stats(sr, &st);
    CHECK(st.tokens_taken == 3 && st.tokens_available == 0);
    CHECK(dpt_sr_worker_contributed(sr, 0) == 1 && dpt_sr_worker_contributed(sr, 1) == 1 &&
          dpt_sr_worker_contributed(sr, 2) == 0);
    /* A push older than the global step is stale however few came in. */
    CHECK_OK(dpt_sr_push(sr, 2, 0, g2, NULL, &acc));
    CHECK(acc == 0);
    dpt_sr_get_stats(sr, &st);
    CHECK(st.stale_dropped == 2);
    dpt_sr_destroy(sr);
    dpt_vartable_deinit(&t);
}

/* N = 2 workers, R = 4: R - N = 2 initial tokens let each worker push twice
 * for the first step; each step then enqueues max(N, R) = 4 tokens. */
static void test_tokens_fewer_replicas(void)
{
    dpt_vartable_t t;
    make_table(&t, 1, 0, 0);
    dpt_sr_config_t c = sgd_config(&t, 4, 2, 1.0f);
    dpt_sr_t *sr;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    dpt_sr_set_global_step(sr, 5);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 100));
    dpt_sr_stats_t st;
    dpt_sr_get_stats(sr, &st);
    CHECK(st.tokens_enqueued == 2 && st.tokens_available == 2);
    float g[16] = {1};
    uint64_t s0 = 0, s1 = 0;
    CHECK_OK(dpt_sr_push(sr, 0, 5, g, NULL, NULL));
    CHECK_OK(dpt_sr_take_token(sr, 0, &s0));
    CHECK_OK(dpt_sr_push(sr, 1, 5, g, NULL, NULL));
    CHECK_OK(dpt_sr_take_token(sr, 1, &s1));
    CHECK(s0 == 5 && s1 == 5);
    CHECK_OK(dpt_sr_push(sr, 0, s0, g, NULL, NULL));
    CHECK(dpt_sr_global_step(sr) == 5);
    CHECK_OK(dpt_sr_push(sr, 1, s1, g, NULL, NULL));
    CHECK(dpt_sr_global_step(sr) == 6);
    dpt_sr_get_stats(sr, &st);
    CHECK(st.tokens_enqueued == 2 + 4 && st.tokens_taken == 2 && st.tokens_available == 4);
    CHECK(dpt_sr_worker_contributed(sr, 0) == 2 && dpt_sr_worker_contributed(sr, 1) == 2);
    /* Exactly enough initial tokens is allowed; more too. */
    dpt_sr_close(sr);
    CHECK_OK(dpt_sr_begin(sr, 7, 100));
    dpt_sr_get_stats(sr, &st);
    CHECK(st.tokens_available == 7);
    CHECK_OK(dpt_sr_take_token(sr, 0, &s0));
    CHECK(s0 == 6);
    dpt_sr_destroy(sr);
    dpt_vartable_deinit(&t);
}

/* The sum runs in worker order whatever the arrival order: values whose
 * float sum depends on the order give the same bits either way. */
static void test_worker_order_sum(void)
{
    dpt_vartable_t t;
    make_table(&t, 1, 0, 0);
    const float v[3] = {1e8f, 1.0f, -1e8f};
    const int orders[2][3] = {{0, 1, 2}, {2, 1, 0}};
    float out[2];
    for (int o = 0; o < 2; o++) {
        dpt_sr_config_t c = sgd_config(&t, 3, 3, 1.0f);
        dpt_sr_t *sr;
        REQUIRE_OK(dpt_sr_create(&sr, &c));
        dpt_sr_set_global_step(sr, 0);
        REQUIRE_OK(dpt_sr_begin(sr, -1, 10));
        for (int k = 0; k < 3; k++) {
            int w = orders[o][k];
            float g[16] = {v[w]};
            CHECK_OK(dpt_sr_push(sr, w, 0, g, NULL, NULL));
        }
        float p[16];
        CHECK_OK(dpt_sr_fetch(sr, p));
        out[o] = p[0];
        dpt_sr_destroy(sr);
    }
    float expect = -(((v[0] + v[1]) + v[2]) * (1.0f / 3.0f));
    CHECK(out[0] == expect && out[1] == expect);
    dpt_vartable_deinit(&t);
}

/* Random sparse gradients with repeated rows: a service that keeps them
 * sparse ends bitwise where one fed their dense equivalents does (SGD,
 * momentum, Nesterov), and lazy Adam touches only the rows pushed. */
static void fill_rows(dpt_sparse_rows_t *s, dpt_rng_t *rng, size_t rows, size_t n)
{
    dpt_sparse_rows_clear(s);
    for (size_t k = 0; k < n; k++) {
        float *r;
        dpt_sparse_rows_add(s, (int64_t)(dpt_rng_below(rng, (uint32_t)rows)), NULL, &r);
        for (size_t j = 0; j < s->dim; j++)
            r[j] = dpt_rng_uniform(rng) * 2.0f - 1.0f;
    }
}

static void test_sparse_equals_dense(void)
{
    const size_t rows = 50, dim = 3;
    dpt_vartable_t t;
    make_table(&t, 5, rows, dim);
    const dpt_var_t *ev = dpt_vartable_find(&t, "emb");
    unsigned char sp[2] = {0, 1};
    dpt_optim_kind_t kinds[3] = {DPT_OPTIM_SGD, DPT_OPTIM_MOMENTUM, DPT_OPTIM_MOMENTUM};
    for (int k = 0; k < 3; k++) {
        dpt_sr_config_t c = sgd_config(&t, 3, 3, 0.05f);
        c.optim = dpt_optim_defaults(kinds[k]);
        c.optim.nesterov = k == 2;
        c.optim.weight_decay = k == 1 ? 0.01f : 0.0f;
        c.grad_clip = 0.5;
        dpt_sr_t *a, *b;
        REQUIRE_OK(dpt_sr_create(&a, &c));
        c.sparse = sp;
        REQUIRE_OK(dpt_sr_create(&b, &c));
        dpt_rng_t rng;
        dpt_rng_init(&rng, 7, 0, 0, 0);
        for (size_t i = 0; i < t.total; i++)
            dpt_sr_params(a)[i] = dpt_sr_params(b)[i] =
                (float)dpt_rng_uniform(&rng) *
                (i < ev->offset || i >= ev->offset + ev->count ? 0.0f : 1.0f);
        dpt_sr_set_global_step(a, 0);
        dpt_sr_set_global_step(b, 0);
        REQUIRE_OK(dpt_sr_begin(a, -1, 100));
        REQUIRE_OK(dpt_sr_begin(b, -1, 100));
        dpt_arena_t dense;
        REQUIRE_OK(dpt_arena_init(&dense, t.total));
        dpt_sparse_rows_t s;
        REQUIRE_OK(dpt_sparse_rows_init(&s, dim, 0));
        for (uint64_t step = 0; step < 4; step++)
            for (int w = 2; w >= 0; w--) {
                fill_rows(&s, &rng, rows, 20);
                dpt_vec_zero(dense.data, t.total);
                for (size_t i = 0; i < 5; i++)
                    dense.data[i] = (float)dpt_rng_uniform(&rng);
                REQUIRE_OK(dpt_sparse_rows_densify_add(&s, dense.data + ev->offset, rows));
                const dpt_sparse_rows_t *list[1] = {&s};
                CHECK_OK(dpt_sr_push(a, w, step, dense.data, NULL, NULL));
                CHECK_OK(dpt_sr_push(b, w, step, dense.data, list, NULL));
            }
        CHECK(dpt_sr_global_step(a) == 4 && dpt_sr_global_step(b) == 4);
        CHECK(memcmp(dpt_sr_params(a), dpt_sr_params(b), t.total * sizeof(float)) == 0);
        dpt_sr_stats_t sa, sb;
        dpt_sr_get_stats(a, &sa);
        dpt_sr_get_stats(b, &sb);
        CHECK(sa.last_grad_norm == sb.last_grad_norm);
        /* The wire carries the rows, not the table. */
        CHECK(sb.bytes_pushed == 12 * (5 * 4 + 20 * (8 + 4 * dim)));
        CHECK(sa.bytes_pushed == 12 * (t.vars[0].count + ev->count) * 4);
        float got[6];
        int64_t idx[2] = {0, (int64_t)rows - 1};
        CHECK_OK(dpt_sr_fetch_rows(b, 1, idx, 2, got));
        CHECK(memcmp(got, dpt_sr_params(b) + ev->offset, dim * sizeof(float)) == 0);
        CHECK(memcmp(got + dim, dpt_sr_params(b) + ev->offset + (rows - 1) * dim,
                     dim * sizeof(float)) == 0);
        idx[1] = (int64_t)rows;
        CHECK_ERR(dpt_sr_fetch_rows(b, 1, idx, 2, got), DPT_EINVAL, "has 50 rows");
        /* Wrong width and out-of-range rows are refused, naming the variable. */
        dpt_sparse_rows_t bad;
        REQUIRE_OK(dpt_sparse_rows_init(&bad, dim + 1, 0));
        const dpt_sparse_rows_t *bl[1] = {&bad};
        CHECK_ERR(dpt_sr_push(b, 0, 4, dense.data, bl, NULL), DPT_EINVAL, "emb");
        CHECK_ERR(dpt_sr_push(b, 0, 4, dense.data, NULL, NULL), DPT_EINVAL, "no sparse gradient");
        dpt_sparse_rows_deinit(&bad);
        dpt_sparse_rows_clear(&s);
        dpt_sparse_rows_add(&s, (int64_t)rows, NULL, NULL);
        const dpt_sparse_rows_t *ol[1] = {&s};
        CHECK(dpt_sr_push(b, 0, 4, dense.data, ol, NULL) == DPT_EINVAL);
        dpt_sparse_rows_deinit(&s);
        dpt_arena_deinit(&dense);
        dpt_sr_destroy(a);
        dpt_sr_destroy(b);
    }
    dpt_vartable_deinit(&t);
}

/* Lazy Adam through the service: rows never pushed keep their values. */
static void test_sparse_lazy_adam(void)
{
    const size_t rows = 20, dim = 2;
    dpt_vartable_t t;
    make_table(&t, 1, rows, dim);
    const dpt_var_t *ev = dpt_vartable_find(&t, "emb");
    unsigned char sp[2] = {0, 1};
    dpt_sr_config_t c = sgd_config(&t, 1, 1, 0.1f);
    c.optim = dpt_optim_defaults(DPT_OPTIM_ADAM);
    c.sparse = sp;
    dpt_sr_t *sr;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    float *p = dpt_sr_params(sr);
    for (size_t i = 0; i < ev->count; i++)
        p[ev->offset + i] = 1.0f;
    dpt_sr_set_global_step(sr, 0);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 100));
    dpt_sparse_rows_t s;
    REQUIRE_OK(dpt_sparse_rows_init(&s, dim, 0));
    float one[2] = {0.5f, -0.5f};
    dpt_sparse_rows_add(&s, 3, one, NULL);
    const dpt_sparse_rows_t *list[1] = {&s};
    float g[64] = {0};
    /* Two steps on row 3: Adam's first steps move by lr each. */
    CHECK_OK(dpt_sr_push(sr, 0, 0, g, list, NULL));
    CHECK_OK(dpt_sr_push(sr, 0, 1, g, list, NULL));
    /* m_t / (1 - b1^t) = g and sqrt(v_t / (1 - b2^t)) = |g| for a constant g. */
    CHECK_CLOSE(p[ev->offset + 3 * dim], 1.0 - 2 * 0.1, 1e-5);
    CHECK_CLOSE(p[ev->offset + 3 * dim + 1], 1.0 + 2 * 0.1, 1e-5);
    for (size_t r = 0; r < rows; r++)
        if (r != 3)
            CHECK(p[ev->offset + r * dim] == 1.0f && p[ev->offset + r * dim + 1] == 1.0f);
    float *m = dpt_optim_slot(dpt_sr_optimizer(sr), 0);
    CHECK(m[ev->offset] == 0.0f && m[ev->offset + 3 * dim] != 0.0f);
    dpt_sparse_rows_deinit(&s);
    dpt_sr_destroy(sr);
    dpt_vartable_deinit(&t);
}

/* EMA after two SGD steps, by hand: p0 = 1, g = 1 then 2, lr = 0.5,
 * decay 0.5: p = 0.5 then -0.5; ema = 0.5*1 + 0.5*0.5 = 0.75, then
 * 0.5*0.75 + 0.5*(-0.5) = 0.125. */
static void test_ema(void)
{
    dpt_vartable_t t;
    make_table(&t, 1, 0, 0);
    dpt_sr_config_t c = sgd_config(&t, 1, 1, 0.5f);
    c.ema_decay = 0.5f;
    dpt_sr_t *sr;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    dpt_sr_params(sr)[0] = 1.0f;
    dpt_sr_reset_ema(sr);
    CHECK(dpt_sr_ema(sr)[0] == 1.0f);
    dpt_sr_set_global_step(sr, 0);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 100));
    float g[16] = {1.0f};
    CHECK_OK(dpt_sr_push(sr, 0, 0, g, NULL, NULL));
    CHECK(dpt_sr_params(sr)[0] == 0.5f && dpt_sr_ema(sr)[0] == 0.75f);
    g[0] = 2.0f;
    CHECK_OK(dpt_sr_push(sr, 0, 1, g, NULL, NULL));
    CHECK(dpt_sr_params(sr)[0] == -0.5f && dpt_sr_ema(sr)[0] == 0.125f);
    dpt_sr_destroy(sr);
    /* Without ema_decay there is no EMA. */
    c.ema_decay = 0.0f;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    CHECK(dpt_sr_ema(sr) == NULL);
    dpt_sr_reset_ema(sr);
    dpt_sr_destroy(sr);
    dpt_vartable_deinit(&t);
}

/* tensorpack's least-loaded rule on a known table. */
static void test_placement(void)
{
    const uint64_t bytes[5] = {400, 100, 300, 200, 50};
    int out[5];
    uint64_t load[2];
    CHECK_OK(dpt_sr_place(bytes, 5, 2, out, load));
    CHECK(out[0] == 0 && out[1] == 1 && out[2] == 1 && out[3] == 0 && out[4] == 1);
    CHECK(load[0] == 600 && load[1] == 450);
    int three[5];
    uint64_t l3[3];
    CHECK_OK(dpt_sr_place(bytes, 5, 3, three, l3));
    CHECK(three[0] == 0 && three[1] == 1 && three[2] == 2 && three[3] == 1 && three[4] == 1);
    CHECK(l3[0] == 400 && l3[1] == 350 && l3[2] == 300);
    CHECK_ERR(dpt_sr_place(bytes, 5, 0, out, load), DPT_EINVAL, "num_ps = 0");
    /* The service places its own table the same way. */
    dpt_vartable_t t;
    make_table(&t, 100, 10, 16);
    dpt_sr_config_t c = sgd_config(&t, 1, 1, 0.1f);
    c.num_ps = 2;
    dpt_sr_t *sr;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    int pl[2];
    uint64_t pb[2];
    CHECK(dpt_sr_placement(sr, pl, pb) == 2);
    CHECK(pl[0] == 0 && pl[1] == 1 && pb[0] == 400 && pb[1] == 640);
    dpt_sr_destroy(sr);
    dpt_vartable_deinit(&t);
}

static void test_token_timeout_and_lost(void)
{
    dpt_vartable_t t;
    make_table(&t, 1, 0, 0);
    dpt_sr_config_t c = sgd_config(&t, 2, 3, 0.1f);
    c.timeout_s = 0.05;
    dpt_sr_t *sr;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    dpt_sr_set_global_step(sr, 0);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 10));
    float g[16] = {1};
    CHECK_OK(dpt_sr_push(sr, 0, 0, g, NULL, NULL));
    uint64_t step;
    CHECK_ERR(dpt_sr_take_token(sr, 0, &step), DPT_ETIMEDOUT,
              "global step 0 waits for workers 1, 2");
    CHECK_ERR(dpt_sr_take_token(sr, 0, &step), DPT_ETIMEDOUT, "1 of 2 gradients");
    /* One lost worker of three is a backup gone: still 2 = R. */
    CHECK_OK(dpt_sr_worker_lost(sr, 2));
    CHECK_ERR(dpt_sr_push(sr, 2, 0, g, NULL, NULL), DPT_EINVAL, "marked lost");
    CHECK_OK(dpt_sr_push(sr, 1, 0, g, NULL, NULL));
    CHECK_OK(dpt_sr_take_token(sr, 0, &step));
    CHECK(step == 1);
    /* A second one leaves fewer than R: the service fails. */
    CHECK_ERR(dpt_sr_worker_lost(sr, 1), DPT_ECOMM, "fewer than replicas_to_aggregate = 2");
    CHECK_ERR(dpt_sr_take_token(sr, 0, &step), DPT_ECOMM, "2 of 3 workers were lost");
    CHECK_ERR(dpt_sr_push(sr, 0, 1, g, NULL, NULL), DPT_ECOMM, "were lost");
    dpt_sr_stats_t st;
    dpt_sr_get_stats(sr, &st);
    CHECK(st.workers_lost == 2);
    dpt_sr_destroy(sr);
    dpt_vartable_deinit(&t);
}

/* Threaded workers on a linear regression y = x . w* (the gradient of
 * worker w at step s from its own deterministic batch). */
#define TW_DIM 8
typedef struct tw_run {
    dpt_sr_t *sr;
    int workers;
    int slow_worker; /* -1: none */
    double slow_s;   /* its extra time per step */
    int late;        /* it also waits until the others made its step (backups) */
    int die_worker;  /* -1: none; else it is gone once the global step reaches die_at */
    int die_at;
    atomic_int died; /* the dying worker is gone: the others may pass its steps */
    uint64_t until;
    int rc[8];
} tw_run_t;

typedef struct tw_arg {
    tw_run_t *run;
    int id;
} tw_arg_t;

static void tw_grad(const float *w, int worker, uint64_t step, float *g)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, 11, (uint32_t)worker, (uint32_t)step, 0);
    for (int i = 0; i < TW_DIM; i++)
        g[i] = 0.0f;
    for (int b = 0; b < 16; b++) {
        float x[TW_DIM], y = 0.0f, pred = 0.0f;
        for (int i = 0; i < TW_DIM; i++) {
            x[i] = dpt_rng_uniform(&rng) * 2.0f - 1.0f;
            y += x[i] * (float)(i + 1);
            pred += x[i] * w[i];
        }
        for (int i = 0; i < TW_DIM; i++)
            g[i] += (pred - y) * x[i] / 16.0f;
    }
}

static void *tw_main(void *p)
{
    tw_arg_t *a = p;
    tw_run_t *r = a->run;
    float w[16], g[16] = {0};
    uint64_t local = dpt_sr_global_step(r->sr);
    int rc = 0;
    for (;;) {
        if ((rc = dpt_sr_fetch(r->sr, w)) != 0)
            break;
        tw_grad(w, a->id, local, g);
        if (a->id == r->slow_worker) {
            /* The straggler pushes only once the others made the step
             * without it (or the run ended), so its gradient is stale
             * whatever the load of the machine: the test asserts what the
             * service did, not what the clock allowed. It also waits while
             * the dying worker is alive, so that it takes none of the tokens
             * that worker needs for its pushes. */
            struct timespec ts = {0, (long)(r->slow_s * 1e9)};
            nanosleep(&ts, NULL);
            while (r->late && dpt_sr_global_step(r->sr) < r->until &&
                   (dpt_sr_global_step(r->sr) <= local ||
                    (r->die_worker >= 0 && !atomic_load(&r->died))))
                nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        /* The dying worker is gone once the global step reaches die_at;
         * the others wait at step die_at + 10 until it is, so it is lost
         * during the run on any machine (not after it), and it only pushes
         * while they still make steps (it never holds one up). */
        if (a->id == r->die_worker && dpt_sr_global_step(r->sr) >= (uint64_t)r->die_at) {
            rc = dpt_sr_worker_lost(r->sr, a->id);
            atomic_store(&r->died, 1);
            break;
        }
        while (r->die_worker >= 0 && a->id != r->die_worker && local >= (uint64_t)r->die_at + 10 &&
               !atomic_load(&r->died))
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        if ((rc = dpt_sr_push(r->sr, a->id, local, g, NULL, NULL)) != 0)
            break;
        if ((rc = dpt_sr_take_token(r->sr, a->id, &local)) != 0)
            break;
    }
    r->rc[a->id] = rc == DPT_ECLOSED ? 0 : rc;
    return NULL;
}

static void tw_go(tw_run_t *r)
{
    pthread_t th[8];
    tw_arg_t args[8];
    REQUIRE_OK(dpt_sr_begin(r->sr, -1, r->until));
    for (int i = 0; i < r->workers; i++) {
        args[i] = (tw_arg_t){r, i};
        REQUIRE(pthread_create(&th[i], NULL, tw_main, &args[i]) == 0);
    }
    for (int i = 0; i < r->workers; i++)
        pthread_join(th[i], NULL);
}

static dpt_sr_t *tw_service(dpt_vartable_t *t, int R, int N)
{
    dpt_sr_config_t c = sgd_config(t, R, N, 0.1f);
    c.optim = dpt_optim_defaults(DPT_OPTIM_MOMENTUM);
    c.timeout_s = 30;
    dpt_sr_t *sr = NULL;
    if (dpt_sr_create(&sr, &c) != 0)
        return NULL;
    dpt_sr_set_global_step(sr, 0);
    return sr;
}

static void test_threads_bitwise_without_backups(void)
{
    dpt_vartable_t t;
    make_table(&t, TW_DIM, 0, 0);
    float first[TW_DIM];
    for (int rep = 0; rep < 3; rep++) {
        dpt_sr_t *sr = tw_service(&t, 4, 4);
        REQUIRE(sr);
        tw_run_t r = {.sr = sr,
                      .workers = 4,
                      .slow_worker = rep == 2 ? 1 : -1,
                      .slow_s = 0.001,
                      .die_worker = -1,
                      .until = 60};
        tw_go(&r);
        for (int i = 0; i < 4; i++)
            CHECK_OK(r.rc[i]);
        CHECK(dpt_sr_global_step(sr) == 60);
        dpt_sr_stats_t st;
        dpt_sr_get_stats(sr, &st);
        CHECK(st.stale_dropped == 0);
        for (int i = 0; i < 4; i++)
            CHECK(dpt_sr_worker_contributed(sr, i) == 60);
        const float *p = dpt_sr_params(sr);
        if (rep == 0)
            memcpy(first, p, sizeof first);
        else
            CHECK(memcmp(first, p, sizeof first) == 0);
        /* It learned: w -> (1, ..., 8). */
        CHECK(fabs((double)p[7] - 8.0) < 1.0);
        /* A second session goes on from the global step. */
        if (rep == 0) {
            r.until = 80;
            tw_go(&r);
            CHECK(dpt_sr_global_step(sr) == 80);
            float two[TW_DIM];
            memcpy(two, p, sizeof two);
            dpt_sr_t *one = tw_service(&t, 4, 4);
            REQUIRE(one);
            r.sr = one;
            r.until = 80;
            tw_go(&r);
            CHECK(memcmp(two, dpt_sr_params(one), sizeof two) == 0);
            if (memcmp(two, dpt_sr_params(one), sizeof two) != 0)
                fprintf(stderr, "two sessions %.9g, one %.9g\n", (double)two[0],
                        (double)dpt_sr_params(one)[0]);
            dpt_sr_destroy(one);
        }
        dpt_sr_destroy(sr);
    }
    dpt_vartable_deinit(&t);
}

/* With a backup, a slow worker and a worker that dies do not stop the
 * steps: R = 2 of N = 4, worker 3 slow, worker 2 gone at global step 3. */
static void test_threads_backup_straggler_and_death(void)
{
    dpt_vartable_t t;
    make_table(&t, TW_DIM, 0, 0);
    dpt_sr_t *sr = tw_service(&t, 2, 4);
    REQUIRE(sr);
    tw_run_t r = {.sr = sr,
                  .workers = 4,
                  .slow_worker = 3,
                  .slow_s = 0.02,
                  .late = 1,
                  .die_worker = 2,
                  .die_at = 3,
                  .until = 100};
    double t0 = dpt_now();
    tw_go(&r);
    double took = dpt_now() - t0;
    for (int i = 0; i < 4; i++)
        CHECK_OK(r.rc[i]);
    CHECK(dpt_sr_global_step(sr) == 100);
    dpt_sr_stats_t st;
    dpt_sr_get_stats(sr, &st);
    CHECK(st.workers_lost == 1);
    /* The straggler's gradients arrived late and were dropped: it made
     * fewer steps than a worker that was on time. */
    CHECK(dpt_sr_worker_contributed(sr, 3) < dpt_sr_worker_contributed(sr, 0));
    CHECK(st.stale_dropped > 0);
    CHECK(took < 60.0);
    CHECK(fabs((double)dpt_sr_params(sr)[7] - 8.0) < 1.0);
    dpt_sr_destroy(sr);
    dpt_vartable_deinit(&t);
}

/* TensorFlow's token queue (tokens = fifo), N = R = 2, worker 1 stuck
 * after its first push is never made: worker 0 alone carries the steps, a
 * sequence derived by hand from TF's rules (R initial tokens at the global
 * step, max(N, R) tokens per step, FIFO, stale gradients dropped at the
 * accumulator):
 *   push g@0 (1/2) | token 0 | push g@0 (2/2: step 1, tokens [0, 1, 1])
 *   token 0 (an initial one) | push g@0: stale | token 1 | push g@1 (1/2)
 *   token 1 | push g@1 (2/2: step 2, tokens [2, 2]).
 * Under strict, worker 0 gets no token after its first push (none is newer
 * than the step it pushed) and its timeout names worker 1. */
static void test_tokens_fifo_stuck_worker(void)
{
    dpt_vartable_t t;
    make_table(&t, 1, 0, 0);
    dpt_sr_config_t c = sgd_config(&t, 2, 2, 1.0f);
    c.tokens = DPT_SR_TOKENS_FIFO;
    c.init_tokens = 2; /* R, TensorFlow's get_init_tokens_op default */
    c.timeout_s = 0.05;
    dpt_sr_t *sr;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    dpt_sr_set_global_step(sr, 0);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 100));
    float g[1] = {1.0f};
    int acc = -1;
    uint64_t step = 99;
    CHECK_OK(dpt_sr_push(sr, 0, 0, g, NULL, &acc));
    CHECK(acc == 1 && dpt_sr_global_step(sr) == 0);
    CHECK_OK(dpt_sr_take_token(sr, 0, &step));
    CHECK(step == 0);
    CHECK_OK(dpt_sr_push(sr, 0, step, g, NULL, &acc));
    CHECK(acc == 1 && dpt_sr_global_step(sr) == 1);
    CHECK_OK(dpt_sr_take_token(sr, 0, &step));
    CHECK(step == 0); /* the second initial token: FIFO, not dropped */
    CHECK_OK(dpt_sr_push(sr, 0, step, g, NULL, &acc));
    CHECK(acc == 0); /* stale */
    CHECK_OK(dpt_sr_take_token(sr, 0, &step));
    CHECK(step == 1);
    CHECK_OK(dpt_sr_push(sr, 0, step, g, NULL, &acc));
    CHECK(acc == 1 && dpt_sr_global_step(sr) == 1);
    CHECK_OK(dpt_sr_take_token(sr, 0, &step));
    CHECK(step == 1); /* worker 1's token of step 1 */
    CHECK_OK(dpt_sr_push(sr, 0, step, g, NULL, &acc));
    CHECK(acc == 1 && dpt_sr_global_step(sr) == 2);
    dpt_sr_stats_t st;
    dpt_sr_get_stats(sr, &st);
    CHECK(st.stale_dropped == 1 && st.tokens_dropped == 0);
    CHECK(st.tokens_taken == 4 && st.tokens_available == 2);
    CHECK(dpt_sr_worker_contributed(sr, 0) == 4 && dpt_sr_worker_contributed(sr, 1) == 0);
    dpt_sr_destroy(sr);

    c.tokens = DPT_SR_TOKENS_STRICT;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    dpt_sr_set_global_step(sr, 0);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 100));
    CHECK_OK(dpt_sr_push(sr, 0, 0, g, NULL, &acc));
    CHECK_ERR(dpt_sr_take_token(sr, 0, &step), DPT_ETIMEDOUT,
              "global step 0 waits for worker 1 (no gradient of it");
    CHECK(strstr(dpt_last_error(), "worker 0 waited for a token") != NULL);
    dpt_sr_destroy(sr);
    /* Strict, N = 3, R = 2: a token left over from step 1 is dropped when
     * worker 2 looks at global step 2 (it would only make a stale
     * gradient), and the worker gets a step-2 token. */
    c = sgd_config(&t, 2, 3, 1.0f);
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    dpt_sr_set_global_step(sr, 0);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 100));
    for (uint64_t s = 0; s < 2; s++)
        for (int w = 0; w < 2; w++) {
            if (s > 0) {
                CHECK_OK(dpt_sr_take_token(sr, w, &step));
                CHECK(step == s);
            }
            CHECK_OK(dpt_sr_push(sr, w, s, g, NULL, &acc));
            CHECK(acc == 1);
        }
    CHECK(dpt_sr_global_step(sr) == 2);
    CHECK_OK(dpt_sr_take_token(sr, 2, &step));
    CHECK(step == 2);
    dpt_sr_get_stats(sr, &st);
    CHECK(st.tokens_dropped == 1 && st.tokens_available == 2);
    dpt_sr_destroy(sr);
    /* A config with an unknown rule is refused. */
    c.tokens = 7;
    CHECK_ERR(dpt_sr_create(&sr, &c), DPT_EINVAL, "tokens = 7");
    dpt_vartable_deinit(&t);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_misuse),
        DPT_TEST(test_staleness_and_tokens_backups),
        DPT_TEST(test_tokens_fewer_replicas),
        DPT_TEST(test_tokens_fifo_stuck_worker),
        DPT_TEST(test_worker_order_sum),
        DPT_TEST(test_sparse_equals_dense),
        DPT_TEST(test_sparse_lazy_adam),
        DPT_TEST(test_ema),
        DPT_TEST(test_placement),
        DPT_TEST(test_token_timeout_and_lost),
        DPT_TEST(test_threads_bitwise_without_backups),
        DPT_TEST(test_threads_backup_straggler_and_death),
    };
    return DPT_TEST_RUN(cases);
}
