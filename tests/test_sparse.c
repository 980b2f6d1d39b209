/* sparse: row-sparse gradients (coalescing is bitwise the densified sum),
 * the embedding bag (values, finite-difference gradients), the sparse
 * optimizer updates (SGD and momentum bitwise equal to the dense update on
 * the densified gradient, lazy Adam against a double-precision reference of
 * its definition) and every error path. */
#include "dpt_test.h"

#include "dpt/nn.h"
#include "dpt/optim.h"
#include "dpt/rng.h"

#include <stdint.h>
#include <string.h>

/* Appends n random rows with indices in [0, rows) (so with many repeats).
 * Values span seven decades, so the order of a sum shows in its bits, and
 * one in sixteen is -0 (which densifying turns into +0). */
static int add_random(dpt_sparse_rows_t *s, dpt_rng_t *rng, size_t n, size_t rows)
{
    static const float decade[7] = {1e-3f, 1e-2f, 1e-1f, 1.0f, 1e1f, 1e2f, 1e3f};
    for (size_t k = 0; k < n; k++) {
        float *row;
        int rc = dpt_sparse_rows_add(s, (int64_t)dpt_rng_below(rng, (uint32_t)rows), NULL, &row);
        if (rc)
            return rc;
        for (size_t j = 0; j < s->dim; j++)
            row[j] = dpt_rng_below(rng, 16) == 0
                         ? -0.0f
                         : (dpt_rng_uniform(rng) - 0.5f) * decade[dpt_rng_below(rng, 7)];
    }
    return DPT_OK;
}

/* A copy of src (caller deinits). */
static int copy_rows(dpt_sparse_rows_t *dst, const dpt_sparse_rows_t *src)
{
    int rc = dpt_sparse_rows_init(dst, src->dim, 0);
    return rc ? rc : dpt_sparse_rows_append(dst, src, 1.0f);
}

static void test_rows_basic(void)
{
    dpt_sparse_rows_t z;
    memset(&z, 0, sizeof z);
    dpt_sparse_rows_clear(&z);
    dpt_sparse_rows_deinit(&z); /* safe on zeroed */
    dpt_sparse_rows_deinit(NULL);
    CHECK(dpt_sparse_rows_bytes(&z) == 0);

    dpt_sparse_rows_t s;
    REQUIRE_OK(dpt_sparse_rows_init(&s, 3, 0));
    CHECK(s.dim == 3 && s.n == 0 && s.cap == 0);
    float *row = NULL;
    CHECK_OK(dpt_sparse_rows_add(&s, 7, NULL, &row));
    REQUIRE(row != NULL && s.n == 1);
    CHECK(row[0] == 0.0f && row[1] == 0.0f && row[2] == 0.0f);
    const float x[3] = {1.0f, -2.0f, 3.5f};
    CHECK_OK(dpt_sparse_rows_add(&s, -4, x, NULL)); /* indices are checked later */
    REQUIRE(s.n == 2);
    CHECK(s.indices[0] == 7 && s.indices[1] == -4);
    CHECK(memcmp(s.values + 3, x, sizeof x) == 0);
    CHECK(dpt_sparse_rows_bytes(&s) == 2 * (8 + 4 * 3));
    for (int i = 0; i < 100; i++)
        CHECK_OK(dpt_sparse_rows_add(&s, i, x, NULL));
    CHECK(s.n == 102 && s.cap >= 102);
    size_t cap = s.cap;
    dpt_sparse_rows_clear(&s);
    CHECK(s.n == 0 && s.cap == cap && dpt_sparse_rows_bytes(&s) == 0);
    CHECK_OK(dpt_sparse_rows_reserve(&s, 5)); /* never shrinks */
    CHECK(s.cap == cap);
    CHECK_OK(dpt_sparse_rows_reserve(&s, cap + 1000));
    CHECK(s.cap == cap + 1000);
    dpt_sparse_rows_deinit(&s);
    CHECK(s.dim == 0 && s.n == 0 && s.cap == 0 && s.indices == NULL && s.values == NULL);

    REQUIRE_OK(dpt_sparse_rows_init(&s, 2, 10));
    CHECK(s.cap == 10 && s.n == 0);
    dpt_sparse_rows_deinit(&s);
}

/* Coalescing gives, row by row, bitwise what densifying in append order
 * gives, for several appends of random rows with many repeats. */
static void test_coalesce_bitwise(void)
{
    enum { DIM = 5, ROWS = 23 };
    dpt_rng_t rng;
    dpt_rng_init(&rng, 3, 0, 0, DPT_RNG_TEST);
    static const size_t sizes[4] = {100, 37, 1, 250};
    static const float scales[4] = {1.0f, 0.5f, -3.0f, 1.0f};
    for (int round = 0; round < 3; round++) {
        dpt_sparse_rows_t s, part, c;
        REQUIRE_OK(dpt_sparse_rows_init(&s, DIM, 0));
        REQUIRE_OK(dpt_sparse_rows_init(&part, DIM, 0));
        for (int a = 0; a < 4; a++) {
            dpt_sparse_rows_clear(&part);
            REQUIRE_OK(add_random(&part, &rng, sizes[a] * (size_t)(round + 1), ROWS));
            REQUIRE_OK(dpt_sparse_rows_append(&s, &part, scales[a]));
        }
        float dense[ROWS * DIM] = {0}, again[ROWS * DIM] = {0};
        REQUIRE_OK(dpt_sparse_rows_densify_add(&s, dense, ROWS));
        REQUIRE_OK(copy_rows(&c, &s));
        REQUIRE_OK(dpt_sparse_rows_coalesce(&c));
        size_t distinct = 0;
        for (size_t r = 0; r < ROWS; r++) {
            int seen = 0;
            for (size_t k = 0; k < s.n && !seen; k++)
                seen = s.indices[k] == (int64_t)r;
            distinct += (size_t)seen;
        }
        CHECK(c.n == distinct);
        for (size_t k = 0; k < c.n; k++) {
            CHECK(k == 0 || c.indices[k] > c.indices[k - 1]);
            CHECK(memcmp(c.values + k * DIM, dense + (size_t)c.indices[k] * DIM,
                         DIM * sizeof(float)) == 0);
        }
        REQUIRE_OK(dpt_sparse_rows_densify_add(&c, again, ROWS));
        CHECK(memcmp(dense, again, sizeof dense) == 0);
        /* Coalescing a coalesced gradient changes nothing. */
        dpt_sparse_rows_t c2;
        REQUIRE_OK(copy_rows(&c2, &c));
        REQUIRE_OK(dpt_sparse_rows_coalesce(&c2));
        CHECK(c2.n == c.n && memcmp(c2.indices, c.indices, c.n * sizeof(int64_t)) == 0 &&
              memcmp(c2.values, c.values, c.n * DIM * sizeof(float)) == 0);
        dpt_sparse_rows_deinit(&c2);
        dpt_sparse_rows_deinit(&c);
        dpt_sparse_rows_deinit(&part);
        dpt_sparse_rows_deinit(&s);
    }

    /* Already sorted with repeats (no permutation needed), a lone -0 that
     * becomes +0 as in the densified gradient, and an empty gradient. */
    dpt_sparse_rows_t s;
    REQUIRE_OK(dpt_sparse_rows_init(&s, 1, 0));
    const float one = 1.0f, big = 1e8f, mone = -1e8f, nzero = -0.0f;
    CHECK_OK(dpt_sparse_rows_coalesce(&s));
    CHECK(s.n == 0);
    CHECK_OK(dpt_sparse_rows_add(&s, 0, &nzero, NULL));
    CHECK_OK(dpt_sparse_rows_add(&s, 2, &big, NULL));
    CHECK_OK(dpt_sparse_rows_add(&s, 2, &one, NULL));
    CHECK_OK(dpt_sparse_rows_add(&s, 2, &mone, NULL));
    CHECK_OK(dpt_sparse_rows_coalesce(&s));
    REQUIRE(s.n == 2);
    CHECK(s.indices[0] == 0 && s.values[0] == 0.0f && !signbit(s.values[0]));
    /* (1e8 + 1) - 1e8 is 0 in float, left to right; 1 in another order. */
    CHECK(s.indices[1] == 2 && s.values[1] == 0.0f);
    /* The same rows in the opposite order of appearance sum to 1. */
    dpt_sparse_rows_clear(&s);
    CHECK_OK(dpt_sparse_rows_add(&s, 2, &mone, NULL));
    CHECK_OK(dpt_sparse_rows_add(&s, 0, &one, NULL));
    CHECK_OK(dpt_sparse_rows_add(&s, 2, &big, NULL));
    CHECK_OK(dpt_sparse_rows_add(&s, 2, &one, NULL));
    CHECK_OK(dpt_sparse_rows_coalesce(&s));
    REQUIRE(s.n == 2);
    CHECK(s.indices[0] == 0 && s.values[0] == 1.0f);
    CHECK(s.indices[1] == 2 && s.values[1] == 1.0f);
    dpt_sparse_rows_deinit(&s);
}

static void test_append_scale(void)
{
    dpt_sparse_rows_t src, dst;
    REQUIRE_OK(dpt_sparse_rows_init(&src, 2, 0));
    REQUIRE_OK(dpt_sparse_rows_init(&dst, 2, 0));
    const float a[2] = {1.0f, -3.0f}, b[2] = {0.25f, 8.0f}, c[2] = {5.0f, 6.0f};
    CHECK_OK(dpt_sparse_rows_add(&src, 4, a, NULL));
    CHECK_OK(dpt_sparse_rows_add(&src, 1, b, NULL));
    CHECK_OK(dpt_sparse_rows_add(&dst, 9, c, NULL));
    CHECK_OK(dpt_sparse_rows_append(&dst, &src, 0.5f));
    REQUIRE(dst.n == 3);
    CHECK(dst.indices[0] == 9 && dst.indices[1] == 4 && dst.indices[2] == 1);
    CHECK(dst.values[0] == 5.0f && dst.values[1] == 6.0f);
    CHECK(dst.values[2] == 0.5f && dst.values[3] == -1.5f);
    CHECK(dst.values[4] == 0.125f && dst.values[5] == 4.0f);
    CHECK(src.n == 2 && src.values[0] == 1.0f); /* src unchanged */
    /* Onto itself: the rows doubled. */
    CHECK_OK(dpt_sparse_rows_append(&dst, &dst, 1.0f));
    REQUIRE(dst.n == 6);
    CHECK(memcmp(dst.indices + 3, dst.indices, 3 * sizeof(int64_t)) == 0);
    CHECK(memcmp(dst.values + 6, dst.values, 6 * sizeof(float)) == 0);
    CHECK_OK(dpt_sparse_rows_append(&dst, &dst, -2.0f));
    REQUIRE(dst.n == 12);
    CHECK(dst.values[12] == -10.0f && dst.indices[6] == 9);
    dpt_sparse_rows_t empty;
    REQUIRE_OK(dpt_sparse_rows_init(&empty, 2, 0));
    CHECK_OK(dpt_sparse_rows_append(&dst, &empty, 3.0f));
    CHECK(dst.n == 12);
    dpt_sparse_rows_deinit(&empty);
    dpt_sparse_rows_deinit(&dst);
    dpt_sparse_rows_deinit(&src);
}

static void test_rows_errors(void)
{
    dpt_sparse_rows_t s;
    CHECK_ERR(dpt_sparse_rows_init(&s, 0, 4), DPT_EINVAL, "dim");
    CHECK(s.dim == 0 && s.values == NULL);
    CHECK_ERR(dpt_sparse_rows_reserve(&s, 4), DPT_EINVAL, "not initialised");
    CHECK_ERR(dpt_sparse_rows_add(&s, 0, NULL, NULL), DPT_EINVAL, "not initialised");
    CHECK_ERR(dpt_sparse_rows_init(&s, SIZE_MAX / 2, 4), DPT_EOVERFLOW, "overflow");
    CHECK(s.dim == 0 && s.cap == 0);

    REQUIRE_OK(dpt_sparse_rows_init(&s, 4, 0));
    CHECK_ERR(dpt_sparse_rows_reserve(&s, SIZE_MAX), DPT_EOVERFLOW, "overflow");
    CHECK_ERR(dpt_sparse_rows_reserve(&s, SIZE_MAX / 8), DPT_EOVERFLOW, "overflow");
    CHECK(s.cap == 0 && s.n == 0);

    /* n + more rows overflowing size_t (a forged count: nothing is read). */
    dpt_sparse_rows_t huge;
    memset(&huge, 0, sizeof huge);
    huge.dim = 4;
    huge.n = huge.cap = SIZE_MAX;
    const float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    CHECK_OK(dpt_sparse_rows_add(&s, 1, x, NULL));
    CHECK_ERR(dpt_sparse_rows_append(&huge, &s, 1.0f), DPT_EOVERFLOW, "overflow");
    CHECK_ERR(dpt_sparse_rows_add(&huge, 0, x, NULL), DPT_EOVERFLOW, "overflow");

    dpt_sparse_rows_t other;
    REQUIRE_OK(dpt_sparse_rows_init(&other, 3, 0));
    CHECK_ERR(dpt_sparse_rows_append(&other, &s, 1.0f), DPT_EINVAL, "rows of 4 floats");
    CHECK(other.n == 0);
    dpt_sparse_rows_deinit(&other);

    CHECK_OK(dpt_sparse_rows_add(&s, 0, x, NULL));
    CHECK_OK(dpt_sparse_rows_add(&s, -1, x, NULL));
    CHECK_OK(dpt_sparse_rows_add(&s, 5, x, NULL));
    CHECK_ERR(dpt_sparse_rows_check(&s, 5), DPT_EINVAL, "index -1 at position 2");
    s.indices[2] = 4;
    CHECK_ERR(dpt_sparse_rows_check(&s, 5), DPT_EINVAL, "index 5 at position 3");
    CHECK_OK(dpt_sparse_rows_check(&s, 6));
    float dense[5 * 4] = {0}, zeros[5 * 4] = {0};
    CHECK_ERR(dpt_sparse_rows_densify_add(&s, dense, 5), DPT_EINVAL, "index 5");
    CHECK(memcmp(dense, zeros, sizeof dense) == 0); /* nothing added */
    dpt_sparse_rows_deinit(&s);
}

static void test_embedding_forward(void)
{
    const float table[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t ids[4] = {0, 2, 2, 3};
    const size_t offsets[4] = {0, 3, 3, 4}; /* {0, 2, 2}, {}, {3} */
    float out[3 * 2];
    for (int i = 0; i < 6; i++)
        out[i] = NAN; /* every element is written, empty bags too */
    CHECK_OK(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 3, DPT_EMBED_SUM, out));
    const float sum[6] = {11, 14, 0, 0, 7, 8};
    CHECK(memcmp(out, sum, sizeof out) == 0);
    CHECK_OK(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 3, DPT_EMBED_MEAN, out));
    const float mean[6] = {11.0f / 3.0f, 14.0f / 3.0f, 0, 0, 7, 8};
    CHECK(memcmp(out, mean, sizeof out) == 0);
    /* No bags. */
    CHECK_OK(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 0, DPT_EMBED_SUM, out));

    dpt_embed_mode_t m;
    CHECK_OK(dpt_embed_mode_parse("mean", &m));
    CHECK(m == DPT_EMBED_MEAN);
    CHECK_OK(dpt_embed_mode_parse("sum", &m));
    CHECK(m == DPT_EMBED_SUM);
    CHECK(strcmp(dpt_embed_mode_name(DPT_EMBED_MEAN), "mean") == 0);
    CHECK(strcmp(dpt_embed_mode_name((dpt_embed_mode_t)9), "unknown") == 0);
}

/* L(table) = sum_b sum_k w[b, k] out[b, k], in double. */
static double bag_loss(const float *table, size_t vocab, size_t dim, const int64_t *ids,
                       const size_t *offsets, size_t bags, dpt_embed_mode_t mode, const float *w,
                       float *out)
{
    if (dpt_embedding_bag_forward(table, vocab, dim, ids, offsets, bags, mode, out) != 0)
        return NAN;
    double l = 0.0;
    for (size_t i = 0; i < bags * dim; i++)
        l += (double)w[i] * (double)out[i];
    return l;
}

/* Central differences against the backward's densified rows, for both
 * modes, with empty bags (first, middle and last), repeated ids within a bag
 * and across bags, and an id no bag names. The loss is linear in the table,
 * so a large step (0.25, exact in float) leaves only rounding: the relative
 * tolerance is 1e-6. */
static void test_embedding_grad(void)
{
    enum { V = 7, D = 3, B = 6, NIDS = 10 };
    const int64_t ids[NIDS] = {1, 1, 4, 0, 6, 6, 6, 2, 3, 1}; /* no 5 */
    const size_t offsets[B + 1] = {0, 0, 3, 4, 8, 10, 10};
    dpt_rng_t rng;
    dpt_rng_init(&rng, 5, 0, 0, DPT_RNG_TEST);
    float table[V * D], w[B * D], out[B * D];
    dpt_rng_fill_uniform(&rng, table, V * D, -1.0f, 1.0f);
    dpt_rng_fill_uniform(&rng, w, B * D, -1.0f, 1.0f);
    for (int mode = 0; mode < DPT_EMBED_MODE_COUNT; mode++) {
        dpt_embed_mode_t md = (dpt_embed_mode_t)mode;
        dpt_sparse_rows_t g;
        REQUIRE_OK(dpt_sparse_rows_init(&g, D, 0));
        const float keep[D] = {0.5f, -0.5f, 2.0f};
        CHECK_OK(dpt_sparse_rows_add(&g, 5, keep, NULL)); /* backward appends after it */
        CHECK_OK(dpt_embedding_bag_backward(D, ids, offsets, B, md, w, &g));
        REQUIRE(g.n == 1 + NIDS);
        CHECK(g.indices[0] == 5 && memcmp(g.values, keep, sizeof keep) == 0);
        for (size_t j = 0; j < NIDS; j++)
            CHECK(g.indices[1 + j] == ids[j]); /* one row per occurrence, in order */
        float dense[V * D] = {0};
        g.indices[0] = 0;
        g.values[0] = g.values[1] = g.values[2] = 0.0f; /* drop the kept row */
        REQUIRE_OK(dpt_sparse_rows_densify_add(&g, dense, V));
        double worst = 0.0;
        const float h = 0.25f;
        for (size_t e = 0; e < V * D; e++) {
            float t0 = table[e];
            table[e] = t0 + h;
            double lp = bag_loss(table, V, D, ids, offsets, B, md, w, out);
            table[e] = t0 - h;
            double lm = bag_loss(table, V, D, ids, offsets, B, md, w, out);
            table[e] = t0;
            double num = (lp - lm) / (2.0 * (double)h);
            double err = fabs(num - (double)dense[e]) / fmax(1e-3, fabs(num));
            if (err > worst)
                worst = err;
        }
        if (!(worst < 1e-6))
            fprintf(stderr, "embedding bag %s: gradient relative error %g\n",
                    dpt_embed_mode_name(md), worst);
        CHECK(worst < 1e-6);
        for (size_t k = 0; k < D; k++)
            CHECK(dense[5 * D + k] == 0.0f); /* id 5 is in no bag */
        dpt_sparse_rows_deinit(&g);
    }
}

static void test_embedding_errors(void)
{
    const float table[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t ids[4] = {0, 2, 4, 3};
    size_t offsets[4] = {0, 1, 3, 4};
    float out[3 * 2], sentinel[3 * 2];
    for (int i = 0; i < 6; i++)
        out[i] = sentinel[i] = -7.0f;
    CHECK_ERR(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 3, DPT_EMBED_SUM, out),
              DPT_EINVAL, "id 4 of bag 1 (position 2)");
    ids[2] = -1;
    CHECK_ERR(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 3, DPT_EMBED_MEAN, out),
              DPT_EINVAL, "id -1 of bag 1");
    ids[2] = 1;
    CHECK_ERR(dpt_embedding_bag_forward(table, 0, 2, ids, offsets, 3, DPT_EMBED_SUM, out),
              DPT_EINVAL, "id 0 of bag 0");
    CHECK_ERR(dpt_embedding_bag_forward(table, 4, 0, ids, offsets, 3, DPT_EMBED_SUM, out),
              DPT_EINVAL, "dim");
    CHECK_ERR(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 3, (dpt_embed_mode_t)5, out),
              DPT_EINVAL, "mode");
    offsets[0] = 1;
    CHECK_ERR(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 3, DPT_EMBED_SUM, out),
              DPT_EINVAL, "offsets[0]");
    offsets[0] = 0;
    offsets[2] = 0;
    CHECK_ERR(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 3, DPT_EMBED_SUM, out),
              DPT_EINVAL, "bag 1 ends");
    CHECK(memcmp(out, sentinel, sizeof out) == 0); /* nothing written */
    offsets[2] = 3;
    CHECK_OK(dpt_embedding_bag_forward(table, 4, 2, ids, offsets, 3, DPT_EMBED_SUM, out));

    dpt_sparse_rows_t g;
    REQUIRE_OK(dpt_sparse_rows_init(&g, 3, 0));
    CHECK_ERR(dpt_embedding_bag_backward(2, ids, offsets, 3, DPT_EMBED_SUM, out, &g), DPT_EINVAL,
              "rows of 3 floats");
    dpt_sparse_rows_deinit(&g);
    REQUIRE_OK(dpt_sparse_rows_init(&g, 2, 0));
    ids[3] = -2;
    CHECK_ERR(dpt_embedding_bag_backward(2, ids, offsets, 3, DPT_EMBED_MEAN, out, &g), DPT_EINVAL,
              "id -2 of bag 2");
    ids[3] = 3;
    offsets[1] = 2;
    offsets[2] = 1;
    CHECK_ERR(dpt_embedding_bag_backward(2, ids, offsets, 3, DPT_EMBED_SUM, out, &g), DPT_EINVAL,
              "bag 1 ends");
    offsets[1] = 1;
    offsets[2] = 3;
    CHECK_ERR(dpt_embedding_bag_backward(2, ids, offsets, 3, (dpt_embed_mode_t)-1, out, &g),
              DPT_EINVAL, "mode");
    CHECK(g.n == 0); /* nothing appended */
    CHECK_OK(dpt_embedding_bag_backward(2, ids, offsets, 3, DPT_EMBED_SUM, out, &g));
    CHECK(g.n == 4);
    dpt_sparse_rows_deinit(&g);
    dpt_sparse_rows_t zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    CHECK_ERR(dpt_embedding_bag_backward(0, ids, offsets, 3, DPT_EMBED_SUM, out, &zeroed),
              DPT_EINVAL, "dim");

    dpt_embed_mode_t m = DPT_EMBED_SUM;
    CHECK_ERR(dpt_embed_mode_parse("max", &m), DPT_EINVAL, "max");
    CHECK(m == DPT_EMBED_SUM);
}

static dpt_optim_t *make(dpt_optim_kind_t kind, float wd, int nesterov, size_t n)
{
    dpt_optim_config_t c = dpt_optim_defaults(kind);
    c.weight_decay = wd;
    c.nesterov = nesterov;
    dpt_optim_t *o = NULL;
    if (dpt_optim_create(&o, &c, n) != 0)
        return NULL;
    return o;
}

/* The variable of the update tests: ROWS x DIM floats at float offset OFF of
 * an arena that has other values before and after it. */
enum { OFF = 16, ROWS = 31, DIM = 4, TAIL = 5, COUNT = OFF + ROWS * DIM + TAIL };

/* Random parameters, with some zeros and -0 (signed zeros must match too). */
static void fill_params(float *p, dpt_rng_t *rng)
{
    dpt_rng_fill_uniform(rng, p, COUNT, -1.0f, 1.0f);
    for (size_t i = 0; i < COUNT; i += 9)
        p[i] = (i / 9) % 2 ? 0.0f : -0.0f;
}

/* SGD and momentum (plain, Nesterov; with and without weight decay): the
 * sparse update is bitwise dpt_optim_update() on the densified gradient, in
 * the parameters and the momentum slot, over several steps (one with an
 * empty gradient). Without weight decay, SGD leaves untouched rows alone. */
static void test_sgd_momentum_bitwise(void)
{
    static const struct {
        dpt_optim_kind_t kind;
        float wd;
        int nesterov;
    } cfgs[] = {
        {DPT_OPTIM_SGD, 0.0f, 0},      {DPT_OPTIM_SGD, 0.01f, 0},
        {DPT_OPTIM_MOMENTUM, 0.0f, 0}, {DPT_OPTIM_MOMENTUM, 0.01f, 0},
        {DPT_OPTIM_MOMENTUM, 0.0f, 1}, {DPT_OPTIM_MOMENTUM, 0.01f, 1},
    };
    static const size_t nrows[5] = {12, 40, 0, 3, 25};
    static const float lrs[5] = {0.1f, 0.05f, 0.2f, 0.01f, 0.3f};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        dpt_optim_t *a = make(cfgs[ci].kind, cfgs[ci].wd, cfgs[ci].nesterov, COUNT);
        dpt_optim_t *b = make(cfgs[ci].kind, cfgs[ci].wd, cfgs[ci].nesterov, COUNT);
        REQUIRE(a && b);
        dpt_rng_t rng;
        dpt_rng_init(&rng, 7, 0, (uint32_t)ci, DPT_RNG_TEST);
        float pa[COUNT], pb[COUNT], before[COUNT], gd[COUNT];
        fill_params(pa, &rng);
        memcpy(pb, pa, sizeof pa);
        dpt_sparse_rows_t g, c;
        REQUIRE_OK(dpt_sparse_rows_init(&g, DIM, 0));
        for (uint64_t t = 1; t <= 5; t++) {
            dpt_sparse_rows_clear(&g);
            REQUIRE_OK(add_random(&g, &rng, nrows[t - 1], ROWS));
            memset(gd, 0, sizeof gd);
            REQUIRE_OK(dpt_sparse_rows_densify_add(&g, gd + OFF, ROWS));
            REQUIRE_OK(copy_rows(&c, &g));
            REQUIRE_OK(dpt_sparse_rows_coalesce(&c));
            memcpy(before, pb, sizeof pb);
            dpt_optim_update(a, pa, gd, OFF, OFF + ROWS * DIM, t, lrs[t - 1]);
            CHECK_OK(dpt_optim_update_sparse(b, pb, OFF, ROWS, &c, t, lrs[t - 1]));
            CHECK(memcmp(pa, pb, sizeof pa) == 0);
            if (cfgs[ci].kind == DPT_OPTIM_MOMENTUM)
                CHECK(memcmp(dpt_optim_slot(a, 0), dpt_optim_slot(b, 0), COUNT * sizeof(float)) ==
                      0);
            /* Outside the variable nothing moves. */
            CHECK(memcmp(pb, before, OFF * sizeof(float)) == 0);
            CHECK(memcmp(pb + OFF + ROWS * DIM, before + OFF + ROWS * DIM, TAIL * sizeof(float)) ==
                  0);
            if (cfgs[ci].kind == DPT_OPTIM_SGD && cfgs[ci].wd == 0.0f) {
                size_t k = 0;
                for (size_t r = 0; r < ROWS; r++) {
                    if (k < c.n && c.indices[k] == (int64_t)r) {
                        k++;
                        continue;
                    }
                    CHECK(memcmp(pb + OFF + r * DIM, before + OFF + r * DIM, DIM * sizeof(float)) ==
                          0);
                }
            }
            dpt_sparse_rows_deinit(&c);
        }
        dpt_sparse_rows_deinit(&g);
        dpt_optim_destroy(a);
        dpt_optim_destroy(b);
    }
}

/* Lazy Adam (adam with and without L2, adamw with decoupled decay) over
 * steps touching different rows: against a double-precision reference of
 * the definition in dpt/optim.h (gradients summed in double), within a
 * relative 1e-6; untouched rows' p, m and v bitwise unchanged; touched rows
 * bitwise what dpt_optim_update() does to those rows; the last row, never
 * touched, keeps its initial p and zero moments. */
static void test_lazy_adam(void)
{
    static const struct {
        dpt_optim_kind_t kind;
        float wd;
    } cfgs[] = {{DPT_OPTIM_ADAM, 0.0f}, {DPT_OPTIM_ADAM, 0.01f}, {DPT_OPTIM_ADAMW, 0.01f}};
    static const size_t nrows[6] = {5, 9, 1, 20, 3, 14};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        dpt_optim_t *b = make(cfgs[ci].kind, cfgs[ci].wd, 0, COUNT);
        dpt_optim_t *d = make(cfgs[ci].kind, cfgs[ci].wd, 0, COUNT);
        REQUIRE(b && d);
        const dpt_optim_config_t *cfg = dpt_optim_config(b);
        double b1 = (double)cfg->beta1, b2 = (double)cfg->beta2, eps = (double)cfg->eps;
        double wd = (double)cfg->weight_decay;
        int decoupled = cfg->kind == DPT_OPTIM_ADAMW;
        dpt_rng_t rng;
        dpt_rng_init(&rng, 9, 0, (uint32_t)ci, DPT_RNG_TEST);
        float pb[COUNT], pd[COUNT], p0[COUNT], gd[COUNT];
        float pprev[COUNT], mprev[COUNT], vprev[COUNT];
        fill_params(pb, &rng);
        memcpy(pd, pb, sizeof pb);
        memcpy(p0, pb, sizeof pb);
        double rp[ROWS * DIM], rm[ROWS * DIM] = {0}, rv[ROWS * DIM] = {0};
        for (size_t i = 0; i < ROWS * DIM; i++)
            rp[i] = (double)pb[OFF + i];
        float *mb = dpt_optim_slot(b, 0), *vb = dpt_optim_slot(b, 1);
        dpt_sparse_rows_t g, c;
        REQUIRE_OK(dpt_sparse_rows_init(&g, DIM, 0));
        double worst_p = 0.0, worst_m = 0.0, worst_v = 0.0;
        for (uint64_t t = 1; t <= 6; t++) {
            float lr = 0.01f * (float)t;
            dpt_sparse_rows_clear(&g);
            REQUIRE_OK(add_random(&g, &rng, nrows[t - 1], ROWS - 1)); /* never the last row */
            REQUIRE_OK(copy_rows(&c, &g));
            REQUIRE_OK(dpt_sparse_rows_coalesce(&c));
            memcpy(pprev, pb, sizeof pb);
            memcpy(mprev, mb, sizeof mprev);
            memcpy(vprev, vb, sizeof vprev);
            CHECK_OK(dpt_optim_update_sparse(b, pb, OFF, ROWS, &c, t, lr));

            /* The dense rule on the touched rows only. */
            memset(gd, 0, sizeof gd);
            REQUIRE_OK(dpt_sparse_rows_densify_add(&c, gd + OFF, ROWS));
            for (size_t k = 0; k < c.n; k++) {
                size_t lo = OFF + (size_t)c.indices[k] * DIM;
                dpt_optim_update(d, pd, gd, lo, lo + DIM, t, lr);
            }
            CHECK(memcmp(pb, pd, sizeof pb) == 0);
            CHECK(memcmp(mb, dpt_optim_slot(d, 0), COUNT * sizeof(float)) == 0);
            CHECK(memcmp(vb, dpt_optim_slot(d, 1), COUNT * sizeof(float)) == 0);

            /* The reference: the definition in double, gradients summed in
             * double from the uncoalesced rows. */
            double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
            size_t k = 0;
            for (size_t r = 0; r < ROWS; r++) {
                size_t o = r * DIM, a = OFF + o;
                if (!(k < c.n && c.indices[k] == (int64_t)r)) {
                    CHECK(memcmp(pb + a, pprev + a, DIM * sizeof(float)) == 0);
                    CHECK(memcmp(mb + a, mprev + a, DIM * sizeof(float)) == 0);
                    CHECK(memcmp(vb + a, vprev + a, DIM * sizeof(float)) == 0);
                    continue;
                }
                k++;
                for (size_t j = 0; j < DIM; j++) {
                    double gsum = 0.0;
                    for (size_t q = 0; q < g.n; q++)
                        if (g.indices[q] == (int64_t)r)
                            gsum += (double)g.values[q * DIM + j];
                    double gp = decoupled ? gsum : gsum + wd * rp[o + j];
                    rm[o + j] = b1 * rm[o + j] + (1.0 - b1) * gp;
                    rv[o + j] = b2 * rv[o + j] + (1.0 - b2) * gp * gp;
                    if (decoupled)
                        rp[o + j] -= (double)lr * wd * rp[o + j];
                    rp[o + j] -= (double)lr * (rm[o + j] / bc1) / (sqrt(rv[o + j] / bc2) + eps);
                }
            }
            for (size_t i = 0; i < ROWS * DIM; i++) {
                worst_p = fmax(worst_p, fabs((double)pb[OFF + i] - rp[i]) / fmax(1.0, fabs(rp[i])));
                worst_m =
                    fmax(worst_m, fabs((double)mb[OFF + i] - rm[i]) / fmax(1e-3, fabs(rm[i])));
                worst_v =
                    fmax(worst_v, fabs((double)vb[OFF + i] - rv[i]) / fmax(1e-6, fabs(rv[i])));
            }
            dpt_sparse_rows_deinit(&c);
        }
        if (!(worst_p < 1e-6 && worst_m < 1e-6 && worst_v < 1e-6))
            fprintf(stderr, "lazy %s wd %g: relative errors p %g m %g v %g\n",
                    dpt_optim_kind_name(cfgs[ci].kind), (double)cfgs[ci].wd, worst_p, worst_m,
                    worst_v);
        CHECK(worst_p < 1e-6 && worst_m < 1e-6 && worst_v < 1e-6);
        /* The never-touched last row and everything outside the variable. */
        size_t last = OFF + (ROWS - 1) * DIM;
        CHECK(memcmp(pb + last, p0 + last, DIM * sizeof(float)) == 0);
        for (size_t j = 0; j < DIM; j++)
            CHECK(mb[last + j] == 0.0f && vb[last + j] == 0.0f);
        CHECK(memcmp(pb, p0, OFF * sizeof(float)) == 0);
        dpt_sparse_rows_deinit(&g);
        dpt_optim_destroy(b);
        dpt_optim_destroy(d);
    }
}

static void test_update_sparse_errors(void)
{
    enum { N = 40 };
    dpt_optim_t *o = make(DPT_OPTIM_MOMENTUM, 0.01f, 0, N);
    REQUIRE(o);
    float p[N], keep[N];
    for (int i = 0; i < N; i++)
        p[i] = keep[i] = (float)i;
    dpt_sparse_rows_t g;
    REQUIRE_OK(dpt_sparse_rows_init(&g, 4, 0));
    const float x[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    CHECK_OK(dpt_sparse_rows_add(&g, 1, x, NULL));
    CHECK_OK(dpt_sparse_rows_add(&g, 3, x, NULL));
    CHECK_OK(dpt_sparse_rows_add(&g, 3, x, NULL));
    CHECK_ERR(dpt_optim_update_sparse(o, p, 0, 5, &g, 1, 0.1f), DPT_EINVAL,
              "index 3 at position 2 follows 3");
    g.indices[2] = 2;
    CHECK_ERR(dpt_optim_update_sparse(o, p, 0, 5, &g, 1, 0.1f), DPT_EINVAL, "not coalesced");
    g.indices[2] = 5;
    CHECK_ERR(dpt_optim_update_sparse(o, p, 0, 5, &g, 1, 0.1f), DPT_EINVAL,
              "index 5 at position 2 is outside [0, 5)");
    g.indices[0] = -1;
    g.indices[2] = 4;
    CHECK_ERR(dpt_optim_update_sparse(o, p, 0, 5, &g, 1, 0.1f), DPT_EINVAL, "index -1");
    g.indices[0] = 1;
    CHECK_ERR(dpt_optim_update_sparse(o, p, 24, 5, &g, 1, 0.1f), DPT_EINVAL, "exceed");
    CHECK_ERR(dpt_optim_update_sparse(o, p, 41, 0, &g, 1, 0.1f), DPT_EINVAL, "exceed");
    CHECK_ERR(dpt_optim_update_sparse(o, p, 0, SIZE_MAX / 2, &g, 1, 0.1f), DPT_EINVAL, "exceed");
    CHECK_ERR(dpt_optim_update_sparse(o, p, 0, 5, &g, 0, 0.1f), DPT_EINVAL, "t must be");
    dpt_sparse_rows_t zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    CHECK_ERR(dpt_optim_update_sparse(o, p, 0, 5, &zeroed, 1, 0.1f), DPT_EINVAL, "dim");
    /* Nothing was written by any of them. */
    CHECK(memcmp(p, keep, sizeof p) == 0);
    for (int i = 0; i < N; i++)
        CHECK(dpt_optim_slot(o, 0)[i] == 0.0f);
    /* A variable of no rows, and the arena's last rows. */
    dpt_sparse_rows_clear(&g);
    CHECK_OK(dpt_optim_update_sparse(o, p, N, 0, &g, 1, 0.1f));
    CHECK(memcmp(p, keep, sizeof p) == 0);
    CHECK_OK(dpt_sparse_rows_add(&g, 4, x, NULL));
    CHECK_OK(dpt_optim_update_sparse(o, p, 20, 5, &g, 1, 0.1f));
    CHECK(p[36] != keep[36] && p[19] == keep[19]);
    dpt_sparse_rows_deinit(&g);
    dpt_optim_destroy(o);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_rows_basic),        DPT_TEST(test_coalesce_bitwise),
        DPT_TEST(test_append_scale),      DPT_TEST(test_rows_errors),
        DPT_TEST(test_embedding_forward), DPT_TEST(test_embedding_grad),
        DPT_TEST(test_embedding_errors),  DPT_TEST(test_sgd_momentum_bitwise),
        DPT_TEST(test_lazy_adam),         DPT_TEST(test_update_sparse_errors),
    };
    return DPT_TEST_RUN(cases);
}
