/*
 * Gradient buckets of the towers engine (dpt/towers.h, "Gradient
 * buckets"): the bucket plan on a table whose variable sizes do not divide
 * the bucket size (which variables land in which bucket, last variable
 * first, float ranges and sizes), the tracking of finished variables, the
 * MLP's gradient hook (reverse layer order, gradients final when
 * reported), and engines over a threads communicator with 2 and 3
 * participants: bucket_bytes small (several buckets, all-reduced from the
 * communication thread during the backward pass) gives bitwise the weights,
 * norms and losses of bucket_bytes = 0 (one all-reduce), in ps and
 * replicated mode, with SGD and with Adam and clipping, and repeats
 * bitwise, and so do frozen variables (zeroed after the buckets' all-reduce
 * instead of before the one all-reduce); a step that fails on one
 * participant is refused by all; a failed
 * communicator's error comes back from the communication thread; the
 * fallbacks (several devices, no hook, weight_rows, one bucket) keep one
 * all-reduce; a model whose set_grad_hook fails fails create.
 */
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/comm.h"
#include "dpt/nn.h"
#include "dpt/optim.h"
#include "dpt/rng.h"
#include "dpt/towers.h"
#include "parallel/buckets.h"
#include "parallel/towers_impl.h" /* t->bk: was the overlap path taken */

#include <math.h>
#include <pthread.h>
#include <stdint.h>

/* ---- the plan ------------------------------------------------------------ */

/* Variables of 100, 40, 300, 7, 1000 and 5 floats: offsets 0, 112, 160,
 * 464, 480, 1488 (multiples of 16), total 1504. */
static void make_table(dpt_vartable_t *t)
{
    static const size_t sizes[6] = {100, 40, 300, 7, 1000, 5};
    static const char *const names[6] = {"a", "b", "c", "d", "e", "f"};
    dpt_vartable_init(t);
    for (int i = 0; i < 6; i++) {
        size_t off;
        REQUIRE_OK(dpt_vartable_add(t, names[i], 1, &sizes[i], &off));
    }
    REQUIRE(t->total == 1504 && t->vars[4].offset == 480);
}

typedef struct want {
    size_t var_lo, var_hi, lo, hi;
} want_t;

static void check_plan(const dpt_vartable_t *t, size_t bytes, const want_t *w, size_t n)
{
    dpt__bucket_plan_t p;
    REQUIRE_OK(dpt__bucket_plan_init(&p, t, bytes));
    CHECK(p.n == n);
    for (size_t k = 0; k < n && k < p.n; k++) {
        const dpt__bucket_t *b = &p.b[k];
        if (b->var_lo != w[k].var_lo || b->var_hi != w[k].var_hi || b->lo != w[k].lo ||
            b->hi != w[k].hi)
            fprintf(stderr, "bucket_bytes %zu, bucket %zu: vars [%zu, %zu) floats [%zu, %zu)\n",
                    bytes, k, b->var_lo, b->var_hi, b->lo, b->hi);
        CHECK(b->var_lo == w[k].var_lo && b->var_hi == w[k].var_hi);
        CHECK(b->lo == w[k].lo && b->hi == w[k].hi);
        /* Reverse order, tiling the arena: each bucket ends where the one
         * before it in the plan starts. */
        CHECK(k == 0 ? b->hi == t->total : b->hi == p.b[k - 1].lo);
    }
    if (p.n)
        CHECK(p.b[p.n - 1].lo == 0);
    dpt__bucket_plan_deinit(&p);
}

static void test_plan_boundaries(void)
{
    dpt_vartable_t t;
    make_table(&t);
    /* 1200 bytes = 300 floats: f alone (e does not fit beside it), e
     * (1008 floats with padding) alone, d alone (c does not fit beside it),
     * c (304 floats, over the size) alone, then a and b (160 floats). */
    const want_t w1200[] = {
        {5, 6, 1488, 1504}, {4, 5, 480, 1488}, {3, 4, 464, 480}, {2, 3, 160, 464}, {0, 2, 0, 160}};
    check_plan(&t, 1200, w1200, 5);
    /* 2000 bytes = 500 floats: f; e; then d, c, b, a together (480). */
    const want_t w2000[] = {{5, 6, 1488, 1504}, {4, 5, 480, 1488}, {0, 4, 0, 480}};
    check_plan(&t, 2000, w2000, 3);
    /* 1 byte: every variable its own bucket, last first. */
    const want_t w1[] = {{5, 6, 1488, 1504}, {4, 5, 480, 1488}, {3, 4, 464, 480},
                         {2, 3, 160, 464},   {1, 2, 112, 160},  {0, 1, 0, 112}};
    check_plan(&t, 1, w1, 6);
    /* 0, or a size over the whole arena: one bucket. */
    const want_t all[] = {{0, 6, 0, 1504}};
    check_plan(&t, 0, all, 1);
    check_plan(&t, 1504 * 4, all, 1);
    /* Just under the whole arena: variable 0 alone at the end. */
    const want_t two[] = {{1, 6, 112, 1504}, {0, 1, 0, 112}};
    check_plan(&t, 1504 * 4 - 1, two, 2);
    dpt_vartable_deinit(&t);
}

static void test_track(void)
{
    dpt_vartable_t t;
    make_table(&t);
    dpt__bucket_plan_t p;
    dpt__bucket_track_t tr;
    REQUIRE_OK(dpt__bucket_plan_init(&p, &t, 1200));
    REQUIRE_OK(dpt__bucket_track_init(&tr, t.nvars));
    CHECK(dpt__bucket_track_mark(&tr, &p, 5, 6) == 1);
    CHECK(dpt__bucket_track_mark(&tr, &p, 3, 4) == 1); /* e is not done: d waits */
    CHECK(dpt__bucket_track_mark(&tr, &p, 4, 5) == 3);
    CHECK(dpt__bucket_track_mark(&tr, &p, 0, 1) == 3); /* b is not done */
    CHECK(dpt__bucket_track_mark(&tr, &p, 1, 9) == 5); /* indices past the table ignored */
    dpt__bucket_track_reset(&tr);
    CHECK(dpt__bucket_track_mark(&tr, &p, 2, 3) == 0);
    dpt__bucket_track_deinit(&tr);
    dpt__bucket_plan_deinit(&p);
    dpt_vartable_deinit(&t);
}

/* ---- the MLP's hook --------------------------------------------------------- */

enum { IN = 6, OUT = 3, ROWS = 48, MAXP = 3 };

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

typedef struct hook_log {
    size_t lo[8], hi[8];
    int n;
    const float *grads;
    float *snap; /* the reported variables' gradients when reported */
    const dpt_vartable_t *vars;
} hook_log_t;

static void log_hook(void *user, size_t lo, size_t hi)
{
    hook_log_t *h = user;
    if (h->n < 8) {
        h->lo[h->n] = lo;
        h->hi[h->n] = hi;
    }
    h->n++;
    for (size_t v = lo; v < hi; v++) {
        const dpt_var_t *var = &h->vars->vars[v];
        memcpy(h->snap + var->offset, h->grads + var->offset, var->count * sizeof(float));
    }
}

static void test_mlp_hook(void)
{
    dpt_mlp_t *mlp;
    REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 16));
    dpt_model_t m = dpt_mlp_model(mlp);
    REQUIRE(m.set_grad_hook != NULL && m.vars->nvars == 6);
    size_t n = m.vars->total;
    float *p = calloc(n, sizeof *p), *g = calloc(n, sizeof *g), *snap = calloc(n, sizeof *snap);
    REQUIRE(p && g && snap);
    dpt_rng_t r;
    dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(mlp, p, &r);
    hook_log_t h = {.grads = g, .snap = snap, .vars = m.vars};
    REQUIRE_OK(m.set_grad_hook(m.ctx, log_hook, &h));
    dpt_batch_t b = xy(16, data_x, data_y);
    dpt_loss_out_t out;
    REQUIRE_OK(m.loss_grad(m.ctx, p, g, &b, &out));
    /* Last linear layer first: (4.weight, 4.bias), (2.*), (0.*). */
    CHECK(h.n == 3);
    CHECK(h.lo[0] == 4 && h.hi[0] == 6 && h.lo[1] == 2 && h.hi[1] == 4 && h.lo[2] == 0 &&
          h.hi[2] == 2);
    /* What was reported was final. */
    for (size_t v = 0; v < 6; v++) {
        const dpt_var_t *var = &m.vars->vars[v];
        CHECK(memcmp(snap + var->offset, g + var->offset, var->count * sizeof(float)) == 0);
    }
    /* Removed: no more calls. */
    REQUIRE_OK(m.set_grad_hook(m.ctx, NULL, NULL));
    REQUIRE_OK(m.loss_grad(m.ctx, p, g, &b, &out));
    CHECK(h.n == 3);
    free(p), free(g), free(snap);
    dpt_mlp_destroy(mlp);
}

/* ---- engines over a threads communicator ------------------------------------ */

typedef struct part {
    dpt_comm_threads_group_t *group;
    int rank, nparts;
    dpt_towers_mode_t mode;
    int sgd, devices, weight_rows, no_hook;
    size_t bucket_bytes;
    int bad_step;                 /* 1-based step whose data is NaN on participant 1; 0 = none */
    const unsigned char *no_grad; /* the towers' variables without a gradient, or NULL */
    /* results */
    float w[1024];
    size_t nbuckets; /* 0: no overlap (one all-reduce) */
    double norm, loss;
    int rc, bad_rc, moved;
    char msg[512], bad_msg[512];
} part_t;

static int hookless_loss_grad(void *ctx, const float *params, float *grads,
                              const dpt_batch_t *batch, dpt_loss_out_t *out)
{
    return dpt_mlp_loss_grad(ctx, params, grads, batch, out);
}

/* Participant `rank` holds rows [rank * 16, rank * 16 + 16) and trains
 * 2 passes of 4 steps of 4 rows. */
static void *part_main(void *arg)
{
    part_t *p = arg;
    dpt_comm_t *comm = NULL;
    dpt_mlp_t *mlp = NULL;
    dpt_towers_t *t = NULL;
    float x[16 * IN];
    memcpy(x, data_x + (size_t)p->rank * 16 * IN, sizeof x);
    int rc = dpt_comm_threads_join(p->group, p->rank, &comm);
    if (!rc)
        rc = dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 8);
    size_t count = 0;
    if (!rc) {
        dpt_model_t model = dpt_mlp_model(mlp);
        if (p->no_hook) {
            model.loss_grad = hookless_loss_grad;
            model.flags = 0;
            model.set_grad_hook = NULL;
        }
        dpt_towers_config_t c = dpt_towers_defaults();
        c.mode = p->mode;
        c.num_devices = p->devices;
        c.max_per_device_batch_size = 4;
        c.max_load_rows = 16;
        c.grad_clip = p->sgd ? 0.0 : 0.5;
        c.optim = dpt_optim_defaults(p->sgd ? DPT_OPTIM_SGD : DPT_OPTIM_ADAM);
        c.check_every = 3;
        c.weight_rows = p->weight_rows;
        c.bucket_bytes = p->bucket_bytes;
        c.no_grad = p->no_grad;
        c.comm = comm;
        dpt_batch_t lay = xy(0, NULL, NULL);
        count = model.vars->total;
        rc = dpt_towers_create(&t, &model, &lay, &c);
    }
    if (!rc) {
        p->nbuckets = t->bk ? t->bk->plan.n : 0;
        dpt_rng_t r;
        dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
        dpt_mlp_init_params(mlp, p->w, &r);
        rc = dpt_towers_set_weights(t, p->w, count);
    }
    dpt_batch_t b = xy(16, x, data_y + (size_t)p->rank * 16);
    dpt_towers_load_info_t li;
    if (!rc)
        rc = dpt_towers_load_ex(t, 0, &b, 4 / (size_t)p->devices, &li);
    int step = 0;
    for (int pass = 0; !rc && pass < 2; pass++)
        for (size_t off = 0; !rc && off < li.rows_per_device; off += li.per_device_batch) {
            dpt_towers_stats_t st;
            if (++step == p->bad_step) {
                float before[1024], after[1024];
                if (p->rank == 1) {
                    x[(off + 0) * IN] = NAN;
                    rc = dpt_towers_load_ex(t, 0, &b, 4 / (size_t)p->devices, &li);
                }
                if (!rc)
                    rc = dpt_towers_get_weights(t, before, count);
                if (rc)
                    break;
                p->bad_rc = dpt_towers_optimize(t, 0, off, 0.05f, &st);
                snprintf(p->bad_msg, sizeof p->bad_msg, "%s", dpt_last_error());
                if ((rc = dpt_towers_get_weights(t, after, count)) != 0)
                    break;
                p->moved = memcmp(before, after, count * sizeof(float)) != 0;
                if (p->rank == 1) {
                    memcpy(x, data_x + (size_t)p->rank * 16 * IN, sizeof x);
                    if ((rc = dpt_towers_load_ex(t, 0, &b, 4 / (size_t)p->devices, &li)) != 0)
                        break;
                }
            }
            rc = dpt_towers_optimize(t, 0, off, 0.05f, &st);
            p->norm = st.grad_norm;
            p->loss = st.loss;
        }
    if (!rc)
        rc = dpt_towers_get_weights(t, p->w, count);
    if (rc)
        snprintf(p->msg, sizeof p->msg, "%s", dpt_last_error());
    p->rc = rc;
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    dpt_comm_destroy(comm);
    return NULL;
}

/* n participants with the settings of parts[0] (rank set here). */
static int run_parts(part_t *parts, int n)
{
    dpt_comm_threads_group_t *g;
    dpt_comm_threads_options_t o;
    dpt_comm_threads_options_init(&o);
    o.timeout_s = 60.0;
    if (dpt_comm_threads_group_create(&g, n, &o) != 0)
        return -1;
    pthread_t th[MAXP];
    int started = 0;
    for (int i = 1; i < n; i++)
        parts[i] = parts[0]; /* before any participant runs */
    for (int i = 0; i < n; i++) {
        parts[i].group = g;
        parts[i].rank = i;
        parts[i].nparts = n;
        if (pthread_create(&th[i], NULL, part_main, &parts[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    dpt_comm_threads_group_destroy(g);
    for (int i = 0; i < n; i++)
        if (parts[i].rc)
            fprintf(stderr, "participant %d: %s\n", i, parts[i].msg);
    return started == n ? 0 : -1;
}

/* The MLP's 448 floats in 300-byte buckets: {2.weight, 2.bias} (64
 * floats), {1.bias}, {1.weight} (256 floats, over the size), {0.bias},
 * {0.weight}. */
#define SMALL_BUCKETS 300
#define NBUCKETS 5

static void test_buckets_bitwise(void)
{
    static part_t a[MAXP], b[MAXP], c[MAXP];
    for (int np = 2; np <= 3; np++)
        for (int sgd = 0; sgd < 2; sgd++)
            for (int m = 0; m < 2; m++) {
                dpt_towers_mode_t mode = m ? DPT_TOWERS_REPLICATED : DPT_TOWERS_PS;
                part_t base = {.mode = mode, .sgd = sgd, .devices = 1};
                a[0] = base; /* one all-reduce */
                b[0] = base;
                b[0].bucket_bytes = SMALL_BUCKETS;
                REQUIRE(run_parts(a, np) == 0);
                REQUIRE(run_parts(b, np) == 0);
                c[0] = b[0];
                REQUIRE(run_parts(c, np) == 0);
                for (int i = 0; i < np; i++) {
                    CHECK(a[i].rc == 0 && b[i].rc == 0 && c[i].rc == 0);
                    CHECK(a[i].nbuckets == 0 && b[i].nbuckets == NBUCKETS);
                    CHECK(memcmp(a[i].w, b[i].w, sizeof a[i].w) == 0);
                    CHECK(memcmp(b[i].w, c[i].w, sizeof b[i].w) == 0);
                    CHECK(memcmp(a[0].w, a[i].w, sizeof a[i].w) == 0);
                    CHECK(a[i].norm == b[i].norm && a[i].loss == b[i].loss);
                    CHECK(b[i].norm == c[i].norm && b[i].loss == c[i].loss);
                }
                CHECK(a[0].norm > 0.0);
                printf("%d participants, %s, %s: %d buckets of <= %d bytes give the bits of one "
                       "all-reduce (norm %.9g), twice\n",
                       np, dpt_towers_mode_name(mode), sgd ? "sgd" : "adam + clip", NBUCKETS,
                       SMALL_BUCKETS, a[0].norm);
            }
}

/* Frozen variables (the middle layer, in buckets of its own): zeroed after
 * the buckets' all-reduce instead of before the one all-reduce, the same
 * bits either way: the frozen layer keeps its initial weights, the norm
 * leaves it out. */
static void test_buckets_frozen(void)
{
    static part_t a[MAXP], b[MAXP], none[MAXP];
    static const unsigned char mask[6] = {0, 0, 1, 1, 0, 0};
    for (int m = 0; m < 2; m++) {
        dpt_towers_mode_t mode = m ? DPT_TOWERS_REPLICATED : DPT_TOWERS_PS;
        a[0] = (part_t){.mode = mode, .devices = 1, .no_grad = mask};
        b[0] = a[0];
        b[0].bucket_bytes = SMALL_BUCKETS;
        none[0] = b[0];
        none[0].no_grad = NULL;
        REQUIRE(run_parts(a, 2) == 0 && run_parts(b, 2) == 0 && run_parts(none, 2) == 0);
        float w0[1024];
        dpt_mlp_t *mlp;
        REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 8));
        const dpt_vartable_t *vt = dpt_mlp_vars(mlp);
        dpt_rng_t r;
        dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
        dpt_mlp_init_params(mlp, w0, &r);
        size_t lo = vt->vars[2].offset, hi = vt->vars[3].offset + vt->vars[3].count;
        size_t n0 = vt->vars[0].count;
        for (int i = 0; i < 2; i++) {
            CHECK(a[i].rc == 0 && b[i].rc == 0 && b[i].nbuckets == NBUCKETS);
            CHECK(memcmp(a[i].w, b[i].w, sizeof a[i].w) == 0);
            CHECK(a[i].norm == b[i].norm && a[i].loss == b[i].loss);
            CHECK(memcmp(b[i].w + lo, w0 + lo, (hi - lo) * sizeof(float)) == 0);
            CHECK(memcmp(b[i].w, w0, n0 * sizeof(float)) != 0);
            CHECK(memcmp(none[i].w + lo, w0 + lo, (hi - lo) * sizeof(float)) != 0);
        }
        dpt_mlp_destroy(mlp);
        printf("%s, frozen layer 2: buckets give the bits of one all-reduce (norm %.9g, %.9g "
               "unfrozen)\n",
               dpt_towers_mode_name(mode), b[0].norm, none[0].norm);
    }
}

/* Participant 1's data is NaN at step 3: its forward fails before any
 * bucket is released, the others have released theirs from the hook; all
 * of them refuse the step, nothing moves, the next steps run and the
 * weights end equal. */
static void test_buckets_failure_refused_everywhere(void)
{
    static part_t p[MAXP];
    p[0] =
        (part_t){.mode = DPT_TOWERS_PS, .devices = 1, .bucket_bytes = SMALL_BUCKETS, .bad_step = 3};
    REQUIRE(run_parts(p, MAXP) == 0);
    for (int i = 0; i < MAXP; i++) {
        CHECK(p[i].rc == 0 && p[i].nbuckets == NBUCKETS && !p[i].moved);
        CHECK(memcmp(p[0].w, p[i].w, sizeof p[i].w) == 0);
    }
    CHECK(p[1].bad_rc == DPT_ENUMERIC);
    CHECK(p[0].bad_rc == DPT_ECOMM && strstr(p[0].bad_msg, "another participant"));
    CHECK(p[2].bad_rc == DPT_ECOMM);
    printf("refused with buckets: participant 1: %s; participant 0: %s\n", p[1].bad_msg,
           p[0].bad_msg);
}

/* The communication thread's failure comes back from optimize(). */
static void test_buckets_failed_communicator(void)
{
    dpt_comm_threads_group_t *g;
    dpt_comm_t *c0, *c1;
    REQUIRE_OK(dpt_comm_threads_group_create(&g, 2, NULL));
    REQUIRE_OK(dpt_comm_threads_join(g, 0, &c0));
    REQUIRE_OK(dpt_comm_threads_join(g, 1, &c1));
    CHECK(dpt_comm_abort(c1, "participant 1 is gone") == DPT_ECOMM);
    dpt_mlp_t *mlp;
    REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 8));
    dpt_model_t model = dpt_mlp_model(mlp);
    dpt_batch_t lay = xy(0, NULL, NULL);
    dpt_towers_t *t;
    dpt_towers_config_t c = dpt_towers_defaults();
    c.max_per_device_batch_size = 4;
    c.max_load_rows = 8;
    c.bucket_bytes = SMALL_BUCKETS;
    c.comm = c0;
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    REQUIRE(t->bk && t->bk->plan.n == NBUCKETS);
    float before[1024] = {0}, after[1024]; /* the padding stays 0 */
    size_t count = model.vars->total;
    dpt_rng_t r;
    dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(mlp, before, &r);
    REQUIRE_OK(dpt_towers_set_weights(t, before, count));
    dpt_batch_t b = xy(8, data_x, data_y);
    dpt_towers_load_info_t li;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK_ERR(dpt_towers_optimize(t, 0, 0, 0.01f, NULL), DPT_ECOMM, "participant 1 is gone");
    CHECK(dpt_towers_steps(t) == 0);
    REQUIRE_OK(dpt_towers_get_weights(t, after, count));
    CHECK(memcmp(before, after, count * sizeof(float)) == 0);
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    dpt_comm_destroy(c0);
    dpt_comm_destroy(c1);
    dpt_comm_threads_group_destroy(g);
}

/* Several devices, a model without the hook, weight_rows, or a size that
 * makes one bucket: one all-reduce after the backward pass, and the bits
 * of bucket_bytes = 0. */
static void test_fallbacks(void)
{
    static part_t a[2], b[2];
    const part_t cases[] = {
        {.mode = DPT_TOWERS_PS, .sgd = 1, .devices = 2},
        {.mode = DPT_TOWERS_PS, .sgd = 1, .devices = 1, .no_hook = 1},
        {.mode = DPT_TOWERS_PS, .sgd = 1, .devices = 1, .weight_rows = 1},
        {.mode = DPT_TOWERS_PS, .sgd = 1, .devices = 1, .bucket_bytes = 1 << 20},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        a[0] = cases[k];
        a[0].bucket_bytes = 0;
        b[0] = cases[k];
        if (!b[0].bucket_bytes)
            b[0].bucket_bytes = SMALL_BUCKETS;
        REQUIRE(run_parts(a, 2) == 0);
        REQUIRE(run_parts(b, 2) == 0);
        for (int i = 0; i < 2; i++) {
            CHECK(a[i].rc == 0 && b[i].rc == 0);
            CHECK(b[i].nbuckets == 0);
            CHECK(memcmp(a[i].w, b[i].w, sizeof a[i].w) == 0);
        }
    }
}

/* A model whose set_grad_hook fails: create returns its error (the
 * communication thread already started is joined on the way out). */
static int failing_set_hook(void *ctx, dpt_grad_hook_t hook, void *user)
{
    (void)ctx, (void)user;
    return hook ? dpt_error(DPT_ENOTSUP, "this model cannot report its gradients") : DPT_OK;
}

static void test_hook_error(void)
{
    dpt_comm_threads_group_t *g;
    dpt_comm_t *c0;
    REQUIRE_OK(dpt_comm_threads_group_create(&g, 1, NULL));
    REQUIRE_OK(dpt_comm_threads_join(g, 0, &c0));
    dpt_mlp_t *mlp;
    REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 8));
    dpt_model_t model = dpt_mlp_model(mlp);
    model.set_grad_hook = failing_set_hook;
    dpt_batch_t lay = xy(0, NULL, NULL);
    dpt_towers_t *t = NULL;
    dpt_towers_config_t c = dpt_towers_defaults();
    c.max_per_device_batch_size = 4;
    c.max_load_rows = 8;
    c.bucket_bytes = SMALL_BUCKETS;
    c.comm = c0;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_ENOTSUP, "cannot report its gradients");
    CHECK(t == NULL);
    /* Without buckets the hook is never asked for. */
    c.bucket_bytes = 0;
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    CHECK(dpt_towers_buckets(t) == 0);
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    dpt_comm_destroy(c0);
    dpt_comm_threads_group_destroy(g);
}

int main(void)
{
    dpt_rng_t r;
    dpt_rng_init(&r, 99, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, data_x, ROWS * IN, -1.0f, 1.0f);
    for (int i = 0; i < ROWS; i++)
        data_y[i] = (int32_t)dpt_rng_below(&r, OUT);
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_plan_boundaries),
        DPT_TEST(test_track),
        DPT_TEST(test_mlp_hook),
        DPT_TEST(test_buckets_bitwise),
        DPT_TEST(test_buckets_frozen),
        DPT_TEST(test_buckets_failure_refused_everywhere),
        DPT_TEST(test_buckets_failed_communicator),
        DPT_TEST(test_fallbacks),
        DPT_TEST(test_hook_error),
    };
    return DPT_TEST_RUN(cases);
}
