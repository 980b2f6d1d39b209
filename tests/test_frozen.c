/*
 * Variables without a gradient, below the trainers: selecting variables by
 * name (dpt_vartable_select: names, prefixes at a part's end, spaces, an
 * entry that matches nothing named with the table's names); the
 * optimizer's marks (dpt_optim_set_no_grad) for every rule with weight
 * decay: marked variables and their slots stay bitwise, the others move
 * bitwise as without marks, whole steps and slices alike, update_into
 * copies them, a zero gradient on an unmarked variable still moves Adam's
 * moments, sparse updates, zeroing, errors; the towers engine in ps
 * (mirrored, two-pass, the would-be fused SGD), replicated and async
 * modes: the frozen layer and its slots stay, the norm leaves it out; and
 * the sync-replicas service: a frozen variable is neither accumulated
 * (a NaN gradient of it is ignored) nor applied, its EMA stays.
 *
 * Running statistics (dpt_optim_set_running) beside those marks, for every
 * rule with weight decay: a running variable takes p + g bit for bit
 * (whole steps, slices, update_into, the clip factor of the mirrored
 * step), one marked both ways stays (no gradient wins), the others move
 * bitwise as without marks, the slots of the marked ones stay; NULL clears
 * either kind; the sums of squares of the running part and of the rest,
 * never below 0; scaling and zeroing that leave the running elements
 * alone; tables of another variable count refused in either order, the
 * earlier marks kept.
 */
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/nn.h"
#include "dpt/optim.h"
#include "dpt/rng.h"
#include "dpt/sync_replicas.h"
#include "dpt/towers.h"
#include "optim/optim_impl.h"     /* dpt__optim_update_scaled */
#include "parallel/towers_impl.h" /* dpt__towers_mirror_max, params_next */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- selecting variables by name ------------------------------------------------- */

static void add_var(dpt_vartable_t *t, const char *name, size_t n)
{
    REQUIRE_OK(dpt_vartable_add(t, name, 1, &n, NULL));
}

static size_t selected(const dpt_vartable_t *t, const char *list, unsigned char *mask)
{
    size_t n = 99;
    if (dpt_vartable_select(t, list, mask, &n) != 0)
        return 99;
    return n;
}

static void test_select(void)
{
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    add_var(&t, "actor.0.weight", 4);
    add_var(&t, "actor.0.bias", 2);
    add_var(&t, "actor.01.bias", 2);
    add_var(&t, "critic.0.weight", 3);
    add_var(&t, "log_std", 1);
    add_var(&t, "net/l1.w", 5);
    unsigned char m[6];
    CHECK(selected(&t, "actor.0", m) == 2 && m[0] && m[1] && !m[2] && !m[3]);
    CHECK(selected(&t, "actor.0.", m) == 2 && m[0] && m[1] && !m[2]);
    CHECK(selected(&t, "actor", m) == 3 && m[0] && m[1] && m[2] && !m[3]);
    CHECK(selected(&t, "actor.", m) == 3 && m[2] && !m[4]);
    CHECK(selected(&t, " log_std , critic.0.weight ,,", m) == 2 && m[3] && m[4] && !m[0]);
    CHECK(selected(&t, "net/", m) == 1 && m[5]);
    CHECK(selected(&t, "net", m) == 1 && m[5]);
    CHECK(selected(&t, "net/l1", m) == 1 && m[5]);
    CHECK(selected(&t, "actor.0.bias,actor.0", m) == 2); /* counted once */
    CHECK(selected(&t, "", m) == 0 && !m[0] && !m[5]);
    CHECK(selected(&t, NULL, m) == 0);
    CHECK(selected(&t, " , ", m) == 0);
    /* Entries that match nothing: named, with the table's names; no mark
     * is left. */
    CHECK_ERR(dpt_vartable_select(&t, "log_std,actor.0.w", m, NULL), DPT_EINVAL,
              "\"actor.0.w\" matches no variable");
    CHECK(!m[4]);
    CHECK_ERR(dpt_vartable_select(&t, "log", m, NULL), DPT_EINVAL,
              "the variables: actor.0.weight, actor.0.bias, actor.01.bias, critic.0.weight, "
              "log_std, net/l1.w)");
    CHECK_ERR(dpt_vartable_select(&t, "actor.0.weightx", m, NULL), DPT_EINVAL, "actor.0.weightx");
    char big[200];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK_ERR(dpt_vartable_select(&t, big, m, NULL), DPT_EINVAL, "matches no variable");
    /* Many variables: the first eight and the count. */
    dpt_vartable_t many;
    dpt_vartable_init(&many);
    for (int i = 0; i < 12; i++) {
        char name[16];
        snprintf(name, sizeof name, "v%d", i);
        add_var(&many, name, 1);
    }
    unsigned char mm[12];
    CHECK_ERR(dpt_vartable_select(&many, "w", mm, NULL), DPT_EINVAL, "v7, ... (12 in all)");
    CHECK(selected(&many, "v1", mm) == 1 && mm[1] && !mm[10]);
    dpt_vartable_deinit(&many);
    dpt_vartable_deinit(&t);
}

/* ---- the optimizer's marks ------------------------------------------------------- */

/* a [5], b [20] (marked), c [3]: offsets 0, 16, 48; 51 floats. */
static void abc_table(dpt_vartable_t *t)
{
    dpt_vartable_init(t);
    add_var(t, "a", 5);
    add_var(t, "b", 20);
    add_var(t, "c", 3);
}

static dpt_optim_t *make_opt(dpt_optim_kind_t kind, int nesterov, size_t n)
{
    dpt_optim_config_t c = dpt_optim_defaults(kind);
    c.weight_decay = 0.1f;
    c.nesterov = nesterov;
    dpt_optim_t *o = NULL;
    return dpt_optim_create(&o, &c, n) == 0 ? o : NULL;
}

/* Slots filled with values that are not 0, so that "stays" means "does
 * not decay" too. */
static void fill_slots(dpt_optim_t *o, size_t n)
{
    for (int s = 0; s < dpt_optim_num_slots(o); s++)
        for (size_t i = 0; i < n; i++)
            dpt_optim_slot(o, s)[i] = 0.01f * (float)(i + 1) * (float)(s + 1);
}

static int same_range(const float *x, const float *y, size_t lo, size_t hi)
{
    return memcmp(x + lo, y + lo, (hi - lo) * sizeof *x) == 0;
}

static void test_marks_every_rule(void)
{
    static const struct {
        dpt_optim_kind_t kind;
        int nesterov;
    } rules[] = {{DPT_OPTIM_SGD, 0},
                 {DPT_OPTIM_MOMENTUM, 0},
                 {DPT_OPTIM_MOMENTUM, 1},
                 {DPT_OPTIM_ADAM, 0},
                 {DPT_OPTIM_ADAMW, 0}};
    dpt_vartable_t t;
    abc_table(&t);
    size_t n = t.total;
    const unsigned char mark[3] = {0, 1, 0};
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
        dpt_optim_t *o = make_opt(rules[k].kind, rules[k].nesterov, n);
        dpt_optim_t *ref = make_opt(rules[k].kind, rules[k].nesterov, n);
        REQUIRE(o && ref);
        REQUIRE_OK(dpt_optim_set_no_grad(o, &t, mark));
        CHECK(dpt_optim_no_grad_count(o) == 20);
        CHECK(!dpt_optim_no_grad(o, 15) && dpt_optim_no_grad(o, 16) && dpt_optim_no_grad(o, 35) &&
              !dpt_optim_no_grad(o, 36) && !dpt_optim_no_grad(o, 48));
        fill_slots(o, n);
        fill_slots(ref, n);
        float p[64], q[64], p0[64], g[64], s0[2][64];
        dpt_rng_t r;
        dpt_rng_init(&r, 3, 0, 0, DPT_RNG_DATA);
        dpt_rng_fill_uniform(&r, p, n, -1.0f, 1.0f);
        memcpy(q, p, sizeof p);
        memcpy(p0, p, sizeof p);
        for (int s = 0; s < dpt_optim_num_slots(o); s++)
            memcpy(s0[s], dpt_optim_slot(o, s), n * sizeof(float));
        /* Three whole steps, then three in slices that cut the marked
         * variable (the step number given, as the towers do). */
        for (int step = 0; step < 6; step++) {
            dpt_rng_fill_uniform(&r, g, n, -1.0f, 1.0f); /* b's gradient too: ignored */
            if (step < 3) {
                dpt_optim_step(o, p, g, 0.05f);
                dpt_optim_step(ref, q, g, 0.05f);
                continue;
            }
            uint64_t tt = (uint64_t)step + 1;
            const size_t cuts[] = {0, 7, 20, 40, n};
            for (int c = 0; c < 4; c++)
                dpt_optim_update(o, p, g, cuts[c], cuts[c + 1], tt, 0.05f);
            dpt_optim_update(ref, q, g, 0, n, tt, 0.05f);
        }
        /* a and c as without marks, bit for bit; b and its slots as they
         * were. */
        CHECK(same_range(p, q, 0, 5) && same_range(p, q, 48, 51));
        CHECK(!same_range(p, p0, 0, 5) && !same_range(p, p0, 48, 51));
        CHECK(same_range(p, p0, 16, 36));
        for (int s = 0; s < dpt_optim_num_slots(o); s++) {
            CHECK(same_range(dpt_optim_slot(o, s), s0[s], 16, 36));
            CHECK(same_range(dpt_optim_slot(o, s), dpt_optim_slot(ref, s), 0, 5));
            CHECK(!same_range(dpt_optim_slot(o, s), s0[s], 0, 5));
        }
        /* update_into: marked values copied from params, params untouched. */
        float out[64], before[64];
        memset(out, 0, sizeof out);
        memcpy(before, p, sizeof p);
        dpt_optim_update_into(o, p, out, g, 0, n, 7, 0.05f);
        CHECK(same_range(p, before, 0, n));
        CHECK(same_range(out, p, 16, 36) && !same_range(out, p, 0, 5));
        /* Unmarked again: b moves. */
        REQUIRE_OK(dpt_optim_set_no_grad(o, &t, NULL));
        CHECK(dpt_optim_no_grad_count(o) == 0 && !dpt_optim_no_grad(o, 16));
        dpt_optim_update(o, p, g, 0, n, 8, 0.05f);
        CHECK(!same_range(p, before, 16, 36));
        dpt_optim_destroy(o);
        dpt_optim_destroy(ref);
    }
    dpt_vartable_deinit(&t);
}

/* A zero gradient is a gradient: Adam's moments decay and the weights move;
 * a marked variable's do not. */
static void test_zero_gradient_still_moves(void)
{
    dpt_vartable_t t;
    abc_table(&t);
    size_t n = t.total;
    dpt_optim_t *o = make_opt(DPT_OPTIM_ADAM, 0, n);
    REQUIRE(o);
    float p[64], g[64];
    for (size_t i = 0; i < n; i++)
        p[i] = 0.5f, g[i] = 0.25f;
    dpt_optim_step(o, p, g, 0.01f);
    const unsigned char mark[3] = {0, 1, 0};
    REQUIRE_OK(dpt_optim_set_no_grad(o, &t, mark));
    float p1[64], m1[64], v1[64];
    memcpy(p1, p, sizeof p);
    memcpy(m1, dpt_optim_slot(o, 0), n * sizeof(float));
    memcpy(v1, dpt_optim_slot(o, 1), n * sizeof(float));
    memset(g, 0, sizeof g);
    dpt_optim_step(o, p, g, 0.01f);
    const float *m = dpt_optim_slot(o, 0), *v = dpt_optim_slot(o, 1);
    /* a: m = 0.9 m, v = 0.999 v (with L2 0.1 p added to the zero gradient,
     * still nothing like a skip), and p moves. */
    CHECK(m[0] != m1[0] && v[0] != v1[0] && p[0] != p1[0]);
    CHECK(m[49] != m1[49] && p[49] != p1[49]);
    CHECK(same_range(p, p1, 16, 36) && same_range(m, m1, 16, 36) && same_range(v, v1, 16, 36));
    /* Without weight decay the same holds: the moments decay toward 0. */
    dpt_optim_config_t c = dpt_optim_defaults(DPT_OPTIM_ADAM);
    dpt_optim_t *o2;
    REQUIRE_OK(dpt_optim_create(&o2, &c, n));
    for (size_t i = 0; i < n; i++)
        g[i] = 0.25f;
    dpt_optim_step(o2, p, g, 0.01f);
    float mb = dpt_optim_slot(o2, 0)[0], pb = p[0];
    memset(g, 0, sizeof g);
    dpt_optim_step(o2, p, g, 0.01f);
    CHECK(dpt_optim_slot(o2, 0)[0] == 0.9f * mb && p[0] < pb);
    dpt_optim_destroy(o2);
    dpt_optim_destroy(o);
    dpt_vartable_deinit(&t);
}

static void test_marks_sparse_zero_and_errors(void)
{
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    add_var(&t, "w", 3);
    size_t shape[2] = {4, 8};
    REQUIRE_OK(dpt_vartable_add(&t, "emb", 2, shape, NULL));
    size_t n = t.total, off = t.vars[1].offset;
    dpt_optim_t *o = make_opt(DPT_OPTIM_MOMENTUM, 0, n);
    REQUIRE(o);
    fill_slots(o, n);
    const unsigned char mark[2] = {0, 1};
    REQUIRE_OK(dpt_optim_set_no_grad(o, &t, mark));
    float p[64], p0[64], v0[64];
    for (size_t i = 0; i < n; i++)
        p[i] = 1.0f;
    memcpy(p0, p, sizeof p);
    memcpy(v0, dpt_optim_slot(o, 0), n * sizeof(float));
    dpt_sparse_rows_t g;
    REQUIRE_OK(dpt_sparse_rows_init(&g, 8, 0));
    REQUIRE_OK(dpt_sparse_rows_add(&g, 2, NULL, NULL));
    g.values[3] = 1.0f;
    REQUIRE_OK(dpt_optim_update_sparse(o, p, off, 4, &g, 1, 0.1f));
    CHECK(memcmp(p, p0, n * sizeof(float)) == 0);
    CHECK(memcmp(dpt_optim_slot(o, 0), v0, n * sizeof(float)) == 0);
    /* The checks still run on a marked variable. */
    g.indices[0] = 4;
    CHECK_ERR(dpt_optim_update_sparse(o, p, off, 4, &g, 1, 0.1f), DPT_EINVAL, "index 4");
    /* Unmarked, the same rows move. */
    g.indices[0] = 2;
    REQUIRE_OK(dpt_optim_set_no_grad(o, &t, NULL));
    REQUIRE_OK(dpt_optim_update_sparse(o, p, off, 4, &g, 1, 0.1f));
    CHECK(p[off + 2 * 8 + 3] != 1.0f);
    dpt_sparse_rows_deinit(&g);
    /* Zeroing: only the marked elements, and only inside [lo, hi). */
    REQUIRE_OK(dpt_optim_set_no_grad(o, &t, mark));
    float z[64];
    for (size_t i = 0; i < n; i++)
        z[i] = 2.0f;
    dpt_optim_zero_no_grad(o, z, 0, off + 5);
    CHECK(z[0] == 2.0f && z[2] == 2.0f && z[off] == 0.0f && z[off + 4] == 0.0f &&
          z[off + 5] == 2.0f);
    dpt_optim_zero_no_grad(o, z, 0, 1000); /* hi cut to the count */
    CHECK(z[off + 31] == 0.0f && z[1] == 2.0f);
    /* A table larger than the optimizer is refused; the marks stay. */
    dpt_vartable_t big;
    dpt_vartable_init(&big);
    add_var(&big, "x", 1000);
    const unsigned char one[1] = {1};
    CHECK_ERR(dpt_optim_set_no_grad(o, &big, one), DPT_EINVAL, "a table of");
    CHECK(dpt_optim_no_grad(o, off) && dpt_optim_no_grad_count(o) == 32);
    dpt_vartable_deinit(&big);
    dpt_optim_destroy(o);
    dpt_vartable_deinit(&t);
}

/* ---- running statistics ---------------------------------------------------------- */

/* abc_table and d [7]: offsets 0, 16, 48, 64; 80 floats (padded). b is running
 * statistics, d has no gradient, c is marked both ways (no gradient wins). */
static void abcd_table(dpt_vartable_t *t)
{
    abc_table(t);
    add_var(t, "d", 7);
}

static const unsigned char run_mark[4] = {0, 1, 1, 0}, ng_mark[4] = {0, 0, 1, 1};

/* 1 for the elements the rule moves: a and the padding. */
static int plain(const dpt_vartable_t *t, size_t i)
{
    for (size_t v = 1; v < 4; v++)
        if (i >= t->vars[v].offset && i < t->vars[v].offset + t->vars[v].count)
            return 0;
    return 1;
}

/* After an update from `before` with gradient g: b holds before + g bit for
 * bit, c and d are unchanged, the plain elements equal `ref`'s. */
static int running_step_ok(const dpt_vartable_t *t, const float *p, const float *before,
                           const float *g, const float *ref)
{
    int ok = 1;
    for (size_t i = 0; i < t->total; i++) {
        float want = plain(t, i) ? ref[i] : i < 36 ? before[i] + g[i] : before[i];
        ok &= memcmp(&p[i], &want, sizeof want) == 0;
    }
    return ok;
}

static void test_running_every_rule(void)
{
    static const struct {
        dpt_optim_kind_t kind;
        int nesterov;
    } rules[] = {{DPT_OPTIM_SGD, 0},
                 {DPT_OPTIM_MOMENTUM, 0},
                 {DPT_OPTIM_MOMENTUM, 1},
                 {DPT_OPTIM_ADAM, 0},
                 {DPT_OPTIM_ADAMW, 0}};
    dpt_vartable_t t;
    abcd_table(&t);
    size_t n = t.total;
    REQUIRE(n == 80 && t.vars[1].offset == 16 && t.vars[2].offset == 48 && t.vars[3].offset == 64);
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++) {
        dpt_optim_t *o = make_opt(rules[k].kind, rules[k].nesterov, n);
        dpt_optim_t *ref = make_opt(rules[k].kind, rules[k].nesterov, n);
        REQUIRE(o && ref);
        REQUIRE_OK(dpt_optim_set_running(o, &t, run_mark));
        REQUIRE_OK(dpt_optim_set_no_grad(o, &t, ng_mark));
        CHECK(dpt_optim_running_count(o) == 20 && dpt_optim_no_grad_count(o) == 10);
        CHECK(!dpt_optim_running(o, 15) && dpt_optim_running(o, 16) && dpt_optim_running(o, 35) &&
              !dpt_optim_running(o, 36) && !dpt_optim_running(o, 48) && !dpt_optim_running(o, 64));
        CHECK(!dpt_optim_no_grad(o, 16) && dpt_optim_no_grad(o, 48) && dpt_optim_no_grad(o, 50) &&
              !dpt_optim_no_grad(o, 51) && dpt_optim_no_grad(o, 64) && dpt_optim_no_grad(o, 70));
        fill_slots(o, n);
        fill_slots(ref, n);
        float p[80], q[80], g[80], before[80], s0[2][80];
        dpt_rng_t r;
        dpt_rng_init(&r, 7, 0, 0, DPT_RNG_DATA);
        dpt_rng_fill_uniform(&r, p, n, -1.0f, 1.0f);
        memcpy(q, p, sizeof p);
        for (int s = 0; s < dpt_optim_num_slots(o); s++)
            memcpy(s0[s], dpt_optim_slot(o, s), n * sizeof(float));
        /* Three whole steps, then three in slices that cut b, c and d. */
        for (int step = 0; step < 6; step++) {
            dpt_rng_fill_uniform(&r, g, n, -1.0f, 1.0f);
            memcpy(before, p, sizeof p);
            if (step < 3) {
                dpt_optim_step(o, p, g, 0.05f);
                dpt_optim_step(ref, q, g, 0.05f);
            } else {
                uint64_t tt = (uint64_t)step + 1;
                const size_t cuts[] = {0, 7, 20, 40, 50, 66, n};
                for (int c = 0; c < 6; c++)
                    dpt_optim_update(o, p, g, cuts[c], cuts[c + 1], tt, 0.05f);
                dpt_optim_update(ref, q, g, 0, n, tt, 0.05f);
            }
            CHECK(running_step_ok(&t, p, before, g, q));
        }
        /* The slots of b, c and d as they were; a's as without marks. */
        for (int s = 0; s < dpt_optim_num_slots(o); s++) {
            CHECK(same_range(dpt_optim_slot(o, s), s0[s], 16, 36));
            CHECK(same_range(dpt_optim_slot(o, s), s0[s], 48, 51));
            CHECK(same_range(dpt_optim_slot(o, s), s0[s], 64, 71));
            CHECK(same_range(dpt_optim_slot(o, s), dpt_optim_slot(ref, s), 0, 5));
            CHECK(!same_range(dpt_optim_slot(o, s), s0[s], 0, 5));
        }
        /* update_into: b gets p + g, c and d are copied; params untouched. */
        float out[80], qout[80];
        memset(out, 0, sizeof out);
        memcpy(before, p, sizeof p);
        dpt_optim_update_into(o, p, out, g, 0, n, 7, 0.05f);
        dpt_optim_update_into(ref, q, qout, g, 0, n, 7, 0.05f);
        CHECK(same_range(p, before, 0, n));
        CHECK(running_step_ok(&t, out, p, g, qout));
        /* The clip factor of the towers' mirrored step: the running
         * elements take g as it is. */
        dpt__optim_update_scaled(o, p, out, g, 0, n, 8, 0.05f, 0.25f);
        dpt__optim_update_scaled(ref, q, qout, g, 0, n, 8, 0.05f, 0.25f);
        CHECK(running_step_ok(&t, out, p, g, qout));
        /* NULL clears the running marks: b gets the rule, c still has no
         * gradient; then the no-gradient marks too: c and d move. */
        REQUIRE_OK(dpt_optim_set_running(o, &t, NULL));
        CHECK(dpt_optim_running_count(o) == 0 && !dpt_optim_running(o, 16));
        CHECK(dpt_optim_no_grad_count(o) == 10 && dpt_optim_no_grad(o, 48));
        memcpy(before, p, sizeof p);
        dpt_optim_update(o, p, g, 0, n, 9, 0.05f);
        int b_plus_g = 1;
        for (size_t i = 16; i < 36; i++)
            b_plus_g &= p[i] == before[i] + g[i];
        CHECK(!b_plus_g && !same_range(p, before, 16, 36));
        CHECK(same_range(p, before, 48, 51) && same_range(p, before, 64, 71));
        REQUIRE_OK(dpt_optim_set_no_grad(o, &t, NULL));
        CHECK(dpt_optim_no_grad_count(o) == 0 && !dpt_optim_no_grad(o, 48));
        memcpy(before, p, sizeof p);
        dpt_optim_update(o, p, g, 0, n, 10, 0.05f);
        CHECK(!same_range(p, before, 48, 51) && !same_range(p, before, 64, 71));
        dpt_optim_destroy(o);
        dpt_optim_destroy(ref);
    }
    dpt_vartable_deinit(&t);
}

static void test_running_norm_scale_zero_errors(void)
{
    dpt_vartable_t t;
    abcd_table(&t);
    size_t n = t.total;
    dpt_optim_t *o = make_opt(DPT_OPTIM_ADAM, 0, n);
    REQUIRE(o);
    float g[80], h[80], want[80];
    dpt_rng_t r;
    dpt_rng_init(&r, 9, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, g, n, -2.0f, 2.0f);
    /* Nothing running: no part, the sum as given. */
    CHECK(dpt_optim_running_sumsq(o, g, 0, n) == 0.0);
    CHECK(dpt_optim_sumsq_less_running(o, 3.25, g, 0, n) == 3.25);
    REQUIRE_OK(dpt_optim_set_running(o, &t, run_mark));
    REQUIRE_OK(dpt_optim_set_no_grad(o, &t, ng_mark));
    /* Sums of squares: the running part in index order; the rest. */
    double all = 0.0, run = 0.0, rest = 0.0, part = 0.0;
    for (size_t i = 0; i < n; i++) {
        double sq = (double)g[i] * (double)g[i];
        all += sq;
        if (i >= 16 && i < 36)
            run += sq;
        else
            rest += sq;
        if (i >= 20 && i < 36)
            part += sq;
    }
    CHECK(dpt_optim_running_sumsq(o, g, 0, n) == run);
    CHECK(dpt_optim_running_sumsq(o, g, 20, 40) == part);
    CHECK(dpt_optim_running_sumsq(o, g, 0, 1000) == run); /* hi cut to the count */
    CHECK(dpt_optim_running_sumsq(o, g, 36, n) == 0.0);
    double less = dpt_optim_sumsq_less_running(o, all, g, 0, n);
    CHECK(fabs(less - rest) <= 1e-12 * rest);
    /* Never below 0. */
    CHECK(dpt_optim_sumsq_less_running(o, 0.0, g, 0, n) == 0.0);
    CHECK(dpt_optim_sumsq_less_running(o, 0.5 * run, g, 0, n) == 0.0);
    CHECK(dpt_optim_sumsq_less_running(o, run, g, 0, n) == 0.0);
    /* A sum that is not finite stays so (the step is then refused). */
    CHECK(isnan(dpt_optim_sumsq_less_running(o, NAN, g, 0, n)));
    CHECK(dpt_optim_sumsq_less_running(o, INFINITY, g, 0, n) == (double)INFINITY);
    h[0] = g[20];
    g[20] = INFINITY; /* the running part infinite too: inf - inf is not 0 */
    CHECK(dpt_optim_sumsq_less_running(o, INFINITY, g, 0, n) == (double)INFINITY);
    g[20] = NAN;
    CHECK(isnan(dpt_optim_sumsq_less_running(o, NAN, g, 0, n)));
    g[20] = h[0];
    /* Scaling: every element but the running ones, as dpt_vec_scale. */
    memcpy(h, g, sizeof g);
    memcpy(want, g, sizeof g);
    dpt_optim_scale_grads(o, h, 0, n, 0.3f);
    dpt_vec_scale(want, 16, 0.3f);
    dpt_vec_scale(want + 36, n - 36, 0.3f);
    CHECK(memcmp(h, want, n * sizeof(float)) == 0);
    /* Slices that cut b; f = 1 changes nothing. */
    memcpy(h, g, sizeof g);
    memcpy(want, g, sizeof g);
    dpt_optim_scale_grads(o, h, 10, 30, 0.3f);
    dpt_vec_scale(want + 10, 6, 0.3f);
    CHECK(memcmp(h, want, n * sizeof(float)) == 0);
    memcpy(h, g, sizeof g);
    memcpy(want, g, sizeof g);
    dpt_optim_scale_grads(o, h, 20, 60, 0.3f);
    dpt_vec_scale(want + 36, 24, 0.3f);
    CHECK(memcmp(h, want, n * sizeof(float)) == 0);
    memcpy(h, g, sizeof g);
    dpt_optim_scale_grads(o, h, 0, n, 1.0f);
    CHECK(memcmp(h, g, n * sizeof(float)) == 0);
    /* Zeroing: the variables without a gradient (c, d), not the running
     * ones; only inside [lo, hi). */
    memcpy(h, g, sizeof g);
    dpt_optim_zero_no_grad(o, h, 0, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        ok &= h[i] == ((i >= 48 && i < 51) || (i >= 64 && i < 71) ? 0.0f : g[i]);
    CHECK(ok);
    memcpy(h, g, sizeof g);
    dpt_optim_zero_no_grad(o, h, 20, 50);
    ok = 1;
    for (size_t i = 0; i < n; i++)
        ok &= h[i] == (i >= 48 && i < 50 ? 0.0f : g[i]);
    CHECK(ok);
    /* A table of another variable count is refused by either call; the
     * marks stay and still work. */
    dpt_vartable_t t2;
    dpt_vartable_init(&t2);
    add_var(&t2, "x", 4);
    add_var(&t2, "y", 4);
    const unsigned char two[2] = {1, 1};
    CHECK_ERR(dpt_optim_set_running(o, &t2, two), DPT_EINVAL,
              "a table of 2 variables marked after one of 4");
    CHECK_ERR(dpt_optim_set_no_grad(o, &t2, two), DPT_EINVAL, "a table of 2 variables");
    CHECK(dpt_optim_running_count(o) == 20 && dpt_optim_no_grad_count(o) == 10);
    CHECK(dpt_optim_running(o, 16) && !dpt_optim_running(o, 0) && dpt_optim_no_grad(o, 64));
    float p[80], before[80];
    dpt_rng_fill_uniform(&r, p, n, -1.0f, 1.0f);
    memcpy(before, p, sizeof p);
    dpt_optim_step(o, p, g, 0.01f);
    int b_ok = 1;
    for (size_t i = 16; i < 36; i++)
        b_ok &= p[i] == before[i] + g[i];
    CHECK(b_ok && same_range(p, before, 48, 51) && same_range(p, before, 64, 71));
    CHECK(!same_range(p, before, 0, 5));
    /* A table larger than the optimizer. */
    dpt_vartable_t big;
    dpt_vartable_init(&big);
    add_var(&big, "x", 1000);
    const unsigned char one[1] = {1};
    CHECK_ERR(dpt_optim_set_running(o, &big, one), DPT_EINVAL,
              "floats marked on an optimizer of 80");
    CHECK(dpt_optim_running_count(o) == 20);
    dpt_vartable_deinit(&big);
    /* The other order: running marks first, then another count. */
    dpt_optim_t *o2 = make_opt(DPT_OPTIM_SGD, 0, n);
    REQUIRE(o2);
    REQUIRE_OK(dpt_optim_set_running(o2, &t2, two));
    CHECK(dpt_optim_running_count(o2) == 8 && dpt_optim_running(o2, 16));
    CHECK_ERR(dpt_optim_set_no_grad(o2, &t, ng_mark), DPT_EINVAL,
              "a table of 4 variables marked after one of 2");
    CHECK(dpt_optim_running_count(o2) == 8 && dpt_optim_no_grad_count(o2) == 0);
    dpt_optim_destroy(o2);
    dpt_vartable_deinit(&t2);
    dpt_optim_destroy(o);
    dpt_vartable_deinit(&t);
}

/* ---- the towers engine ----------------------------------------------------------- */

enum { IN = 6, OUT = 3, ROWS = 48, MB = 12 };
static const dpt_layer_spec_t layers[] = {
    {.kind = DPT_LAYER_LINEAR, .out = 16, .init = DPT_INIT_DEFAULT, .gain = 0},
    {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
    {.kind = DPT_LAYER_LINEAR, .out = 16, .init = DPT_INIT_DEFAULT, .gain = 0},
    {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
    {.kind = DPT_LAYER_LINEAR, .out = OUT, .init = DPT_INIT_DEFAULT, .gain = 0}};
static float data_x[ROWS * IN];
static int32_t data_y[ROWS];

static dpt_batch_t xy(size_t rows, float *x, int32_t *y)
{
    dpt_batch_t b;
    dpt_batch_init(&b, rows);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, IN, 0, x);
    dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, y);
    return b;
}

typedef struct tower_run {
    dpt_towers_mode_t mode;
    int devices, sgd;
    double clip;
    const char *frozen;
    /* results */
    float w0[512], w[512], slots[2][512];
    double first_norm;
    int nslots, fused;
    size_t count;
    dpt_vartable_t vars;
} tower_run_t;

/* Two passes over the data; the frozen variables named by r->frozen. */
static int run_towers(tower_run_t *r)
{
    dpt_mlp_t *mlp;
    int rc = dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB);
    if (rc)
        return rc;
    dpt_model_t model = dpt_mlp_model(mlp);
    unsigned char mask[8];
    dpt_towers_config_t c = dpt_towers_defaults();
    c.mode = r->mode;
    c.num_devices = r->devices;
    c.max_per_device_batch_size = MB / (size_t)r->devices;
    c.max_load_rows = ROWS;
    c.grad_clip = r->clip;
    c.optim = dpt_optim_defaults(r->sgd ? DPT_OPTIM_SGD : DPT_OPTIM_ADAM);
    c.optim.weight_decay = 0.05f;
    c.check_every = 1;
    dpt_towers_t *t = NULL;
    dpt_vartable_copy(&r->vars, model.vars);
    if ((rc = dpt_vartable_select(model.vars, r->frozen, mask, NULL)) != 0)
        goto out;
    c.no_grad = r->frozen ? mask : NULL;
    dpt_batch_t lay = xy(0, NULL, NULL);
    if ((rc = dpt_towers_create(&t, &model, &lay, &c)) != 0)
        goto out;
    r->count = model.vars->total;
    r->fused = t->params_next.data != NULL;
    dpt_rng_t rng;
    dpt_rng_init(&rng, 5, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(mlp, r->w0, &rng);
    if ((rc = dpt_towers_set_weights(t, r->w0, r->count)) != 0)
        goto out;
    dpt_batch_t b = xy(ROWS, data_x, data_y);
    dpt_towers_load_info_t info;
    if ((rc = dpt_towers_load(t, 0, &b, &info)) != 0)
        goto out;
    for (int pass = 0; pass < 2; pass++)
        for (size_t off = 0; off < info.rows_per_device; off += info.per_device_batch) {
            dpt_towers_stats_t st;
            if ((rc = dpt_towers_optimize(t, 0, off, 0.02f, &st)) != 0)
                goto out;
            if (pass == 0 && off == 0)
                r->first_norm = st.grad_norm;
        }
    if ((rc = dpt_towers_get_weights(t, r->w, r->count)) != 0)
        goto out;
    dpt_optim_t *o = dpt_towers_optimizer(t);
    r->nslots = dpt_optim_num_slots(o);
    for (int s = 0; s < r->nslots; s++)
        memcpy(r->slots[s], dpt_optim_slot(o, s), r->count * sizeof(float));
out:
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    return rc;
}

/* The norm of the first step's gradient (rows [0, MB) over the devices'
 * slices) without the variables of mask: by hand, one device. */
static double hand_norm(const tower_run_t *r, const unsigned char *mask)
{
    dpt_mlp_t *mlp;
    if (dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB) != 0)
        return -1.0;
    float g[512] = {0}, x[MB * IN];
    int32_t y[MB];
    size_t rpd = ROWS / (size_t)r->devices, pdb = MB / (size_t)r->devices;
    for (int d = 0; d < r->devices; d++)
        for (size_t i = 0; i < pdb; i++) {
            memcpy(x + ((size_t)d * pdb + i) * IN, data_x + ((size_t)d * rpd + i) * IN,
                   IN * sizeof(float));
            y[(size_t)d * pdb + i] = data_y[(size_t)d * rpd + i];
        }
    dpt_batch_t b = xy(MB, x, y);
    dpt_loss_out_t out;
    double sq = -1.0;
    if (dpt_mlp_loss_grad(mlp, r->w0, g, &b, &out) == 0) {
        sq = 0.0;
        for (size_t v = 0; v < r->vars.nvars; v++)
            for (size_t j = 0; !mask[v] && j < r->vars.vars[v].count; j++)
                sq += (double)g[r->vars.vars[v].offset + j] * (double)g[r->vars.vars[v].offset + j];
    }
    dpt_mlp_destroy(mlp);
    return sq < 0.0 ? sq : sqrt(sq);
}

static void check_tower_run(tower_run_t *r, const char *what)
{
    REQUIRE_OK(run_towers(r));
    const dpt_var_t *fw = dpt_vartable_find(&r->vars, "2.weight");
    const dpt_var_t *fb = dpt_vartable_find(&r->vars, "2.bias");
    const dpt_var_t *other = dpt_vartable_find(&r->vars, "0.weight");
    REQUIRE(fw && fb && other);
    size_t lo = fw->offset, hi = fb->offset + fb->count;
    CHECK(same_range(r->w, r->w0, lo, hi));
    CHECK(!same_range(r->w, r->w0, other->offset, other->offset + other->count));
    for (int s = 0; s < r->nslots; s++) {
        float zero[512] = {0};
        CHECK(same_range(r->slots[s], zero, lo, hi));
        CHECK(!same_range(r->slots[s], zero, other->offset, other->offset + other->count));
    }
    CHECK(!r->fused);
    /* The first step's norm leaves the frozen layer out (one device: the
     * gradient is the model's own; several: the mean of the towers'). */
    if (r->devices == 1) {
        unsigned char mask[6] = {0, 0, 1, 1, 0, 0}, none[6] = {0};
        double want = hand_norm(r, mask), all = hand_norm(r, none);
        CHECK_CLOSE(r->first_norm, want, 1e-6);
        CHECK(all > want * 1.0001);
    }
    printf("towers %s: the frozen layer 2 and its slots unchanged after 8 steps (first norm "
           "%.6g)\n",
           what, r->first_norm);
    dpt_vartable_deinit(&r->vars);
}

static void test_towers_modes(void)
{
    static tower_run_t r;
    size_t saved = dpt__towers_mirror_max;
    static const struct {
        dpt_towers_mode_t mode;
        int devices, sgd, two_pass;
        double clip;
        const char *what;
    } cases[] = {
        {DPT_TOWERS_PS, 1, 0, 0, 0.5, "ps, 1 device, adam + clip"},
        {DPT_TOWERS_PS, 2, 0, 0, 0.5, "ps mirrored, 2 devices"},
        {DPT_TOWERS_PS, 2, 0, 1, 0.5, "ps two-pass, 2 devices"},
        {DPT_TOWERS_PS, 2, 1, 1, 0.0, "ps, sgd without clip (no fused update)"},
        {DPT_TOWERS_PS, 1, 1, 1, 0.0, "ps, 1 device, sgd"},
        {DPT_TOWERS_REPLICATED, 2, 0, 0, 0.5, "replicated, 2 devices"},
        {DPT_TOWERS_ASYNC, 2, 0, 0, 0.5, "async, 2 devices"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memset(&r, 0, sizeof r);
        r.mode = cases[k].mode;
        r.devices = cases[k].devices;
        r.sgd = cases[k].sgd;
        r.clip = cases[k].clip;
        r.frozen = "2";
        dpt__towers_mirror_max = cases[k].two_pass ? 0 : saved;
        check_tower_run(&r, cases[k].what);
    }
    /* Without marks the SGD step is the fused one, as before. */
    memset(&r, 0, sizeof r);
    r.mode = DPT_TOWERS_PS;
    r.devices = 2;
    r.sgd = 1;
    dpt__towers_mirror_max = 0;
    REQUIRE_OK(run_towers(&r));
    CHECK(r.fused);
    dpt_vartable_deinit(&r.vars);
    dpt__towers_mirror_max = saved;
}

/* ---- the sync-replicas service --------------------------------------------------- */

static void test_sync_replicas_service(void)
{
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    add_var(&t, "w", 4);
    add_var(&t, "frozen", 4);
    const unsigned char mark[2] = {0, 1};
    dpt_sr_config_t c = dpt_sr_defaults();
    c.vars = &t;
    c.optim = dpt_optim_defaults(DPT_OPTIM_ADAM);
    c.optim.weight_decay = 0.1f;
    c.ema_decay = 0.5f;
    c.grad_clip = 1.0;
    c.no_grad = mark;
    dpt_sr_t *sr;
    REQUIRE_OK(dpt_sr_create(&sr, &c));
    float *p = dpt_sr_params(sr);
    for (size_t i = 0; i < t.total; i++)
        p[i] = 1.0f + (float)i;
    dpt_sr_reset_ema(sr);
    float p0[32], e0[32];
    memcpy(p0, p, t.total * sizeof(float));
    memcpy(e0, dpt_sr_ema(sr), t.total * sizeof(float));
    dpt_sr_set_global_step(sr, 0);
    REQUIRE_OK(dpt_sr_begin(sr, -1, 3));
    float g[32];
    for (uint64_t step = 0; step < 3; step++) {
        for (size_t i = 0; i < t.total; i++)
            g[i] = 0.5f;
        /* The frozen variable's gradient is ignored, even a NaN, and
         * counts for nothing in the norm. */
        g[t.vars[1].offset] = step == 1 ? NAN : 1e6f;
        int accepted = 0;
        REQUIRE_OK(dpt_sr_push(sr, 0, step, g, NULL, &accepted));
        CHECK(accepted == 1);
    }
    dpt_sr_stats_t st;
    dpt_sr_get_stats(sr, &st);
    CHECK(st.global_step == 3 && st.failed == 0);
    CHECK_CLOSE(st.last_grad_norm, 1.0, 1e-9); /* sqrt(4 x 0.25) */
    const dpt_var_t *w = &t.vars[0], *f = &t.vars[1];
    CHECK(same_range(p, p0, f->offset, f->offset + f->count));
    CHECK(same_range(dpt_sr_ema(sr), e0, f->offset, f->offset + f->count));
    CHECK(!same_range(p, p0, w->offset, w->offset + w->count));
    CHECK(!same_range(dpt_sr_ema(sr), e0, w->offset, w->offset + w->count));
    dpt_optim_t *o = dpt_sr_optimizer(sr);
    CHECK(dpt_optim_no_grad(o, f->offset) && !dpt_optim_no_grad(o, w->offset));
    float zero[32] = {0}; /* indexed like the table (t.total <= 32) */
    CHECK(same_range(dpt_optim_slot(o, 0), zero, f->offset, f->offset + f->count) &&
          same_range(dpt_optim_slot(o, 1), zero, f->offset, f->offset + f->count));
    /* Fetched like any other. */
    float out[32];
    REQUIRE_OK(dpt_sr_fetch(sr, out));
    CHECK(same_range(out, p0, f->offset, f->offset + f->count));
    dpt_sr_destroy(sr);
    dpt_vartable_deinit(&t);
}

int main(void)
{
    dpt_rng_t r;
    dpt_rng_init(&r, 99, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, data_x, ROWS * IN, -1.0f, 1.0f);
    for (int i = 0; i < ROWS; i++)
        data_y[i] = (int32_t)dpt_rng_below(&r, OUT);
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_select),
        DPT_TEST(test_marks_every_rule),
        DPT_TEST(test_zero_gradient_still_moves),
        DPT_TEST(test_marks_sparse_zero_and_errors),
        DPT_TEST(test_running_every_rule),
        DPT_TEST(test_running_norm_scale_zero_errors),
        DPT_TEST(test_towers_modes),
        DPT_TEST(test_sync_replicas_service),
    };
    return DPT_TEST_RUN(cases);
}
