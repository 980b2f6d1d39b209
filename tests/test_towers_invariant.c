/*
 * tests/test_towers_invariant.c — the towers engine's count-invariant
 * reduction (dpt/towers.h, "Count-invariant reduction"): the same weights,
 * bit for bit, for 1 to 4 devices, for ps (one copy and mirrored) and
 * replicated, and for participants of a threads communicator (2 x 2
 * devices, 3 x 1, 4 x 1, 3 x 2); the fast order gives other bits (so the
 * comparisons can tell); the gradient against a float64 reference; the
 * config's rules and a failing chunk.
 */
#include "dpt_test.h"
#include "dpt/comm.h"
#include "dpt/nn.h"
#include "dpt/rng.h"
#include "dpt/status.h"
#include "dpt/towers.h"
#include "parallel/towers_impl.h" /* dpt__towers_mirror_max */

#include <math.h>
#include <pthread.h>
#include <stdint.h>

/* 3 minibatches of B = 40 rows, chunks of C = 4: K = 10 chunks, which 3
 * devices split 4, 3, 3 and 4 devices 3, 3, 2, 2. */
enum { IN = 6, OUT = 3, B = 40, C = 4, STEPS = 3, ROWS = B * STEPS, MAXP = 4 };

static const dpt_layer_spec_t layers[] = {
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

/* One training run's setting. */
typedef struct run {
    dpt_towers_mode_t mode;
    int devices, parts; /* per participant; participants (1: no communicator) */
    size_t chunk;       /* 0: the fast order */
    int passes;
    /* per participant (threads) */
    dpt_comm_threads_group_t *group;
    int rank;
    float w[512];
    size_t count;
    int rc;
    char msg[400];
} run_t;

/* Trains: Adam with clipping at a bound the steps exceed (so the norm
 * matters), `passes` passes over the 3 minibatches in the order 2, 0, 1. */
static void *run_main(void *arg)
{
    run_t *r = arg;
    dpt_comm_t *comm = NULL;
    dpt_mlp_t *mlp = NULL;
    dpt_towers_t *t = NULL;
    float xs[ROWS * IN];
    int32_t ys[ROWS];
    int rc = r->group ? dpt_comm_threads_join(r->group, r->rank, &comm) : 0;
    if (!rc)
        rc = dpt_mlp_create(&mlp, IN, layers, 3, DPT_LOSS_SOFTMAX_XENT, B);
    dpt_model_t model;
    if (!rc) {
        model = dpt_mlp_model(mlp);
        r->count = model.vars->total;
        dpt_towers_config_t c = dpt_towers_defaults();
        c.mode = r->mode;
        c.num_devices = r->devices;
        c.max_per_device_batch_size = r->chunk ? r->chunk : B / (size_t)(r->devices * r->parts);
        c.max_load_rows = ROWS;
        c.grad_clip = 0.3;
        c.check_every = 1;
        c.comm = comm;
        c.chunk_rows = r->chunk;
        c.global_batch = r->chunk ? B : 0;
        dpt_batch_t lay = xy(0, NULL, NULL);
        rc = r->count <= 512 ? dpt_towers_create(&t, &model, &lay, &c)
                             : dpt_error(DPT_EINVAL, "%zu weights: the test keeps 512", r->count);
    }
    if (!rc) {
        dpt_rng_t g;
        dpt_rng_init(&g, 5, 0, 0, DPT_RNG_INIT);
        dpt_mlp_init_params(mlp, r->w, &g);
        rc = dpt_towers_set_weights(t, r->w, r->count);
    }
    /* This participant's rows of every minibatch. Invariant: its share of
     * each, minibatch after minibatch. Fast: device d's part of every
     * minibatch, device after device (a device holds a contiguous slice of
     * the load), so that the fast runs train on the same minibatches. */
    size_t row0 = 0, share = B, n = 0;
    if (!rc && r->chunk)
        rc = dpt_towers_share(t, &row0, &share);
    size_t G = (size_t)(r->devices * r->parts), part = B / G;
    for (int d = 0; !rc && d < (r->chunk ? 1 : r->devices); d++)
        for (size_t m = 0; m < STEPS; m++) {
            size_t from = r->chunk
                              ? m * B + row0
                              : m * B + ((size_t)r->rank * (size_t)r->devices + (size_t)d) * part;
            size_t len = r->chunk ? share : part;
            memcpy(xs + n * IN, data_x + from * IN, len * IN * sizeof(float));
            memcpy(ys + n, data_y + from, len * sizeof(int32_t));
            n += len;
        }
    dpt_batch_t b = xy(n, xs, ys);
    dpt_towers_load_info_t li;
    if (!rc)
        rc = dpt_towers_load(t, 0, &b, &li);
    if (!rc && li.steps != STEPS)
        rc = dpt_error(DPT_ESTATE, "%zu steps loaded, not %d", li.steps, STEPS);
    static const size_t order[STEPS] = {2, 0, 1};
    for (int p = 0; !rc && p < r->passes; p++)
        for (int k = 0; !rc && k < STEPS; k++) {
            dpt_towers_stats_t st;
            rc = dpt_towers_optimize(t, 0, order[k] * li.per_device_batch, 0.01f, &st);
        }
    if (!rc)
        rc = dpt_towers_get_weights(t, r->w, r->count);
    if (rc)
        snprintf(r->msg, sizeof r->msg, "%s", dpt_last_error());
    r->rc = rc;
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    dpt_comm_destroy(comm);
    return NULL;
}

/* Runs the setting (its participants on threads); the weights of
 * participant 0 into w, and that every participant holds the same bits. */
static int train(dpt_towers_mode_t mode, int devices, int parts, size_t chunk, float *w,
                 size_t *count)
{
    static run_t runs[MAXP];
    dpt_comm_threads_group_t *g = NULL;
    if (parts > 1) {
        dpt_comm_threads_options_t o;
        dpt_comm_threads_options_init(&o);
        o.timeout_s = 60.0;
        int rc = dpt_comm_threads_group_create(&g, parts, &o);
        if (rc)
            return rc;
    }
    pthread_t th[MAXP];
    for (int i = 0; i < parts; i++) {
        memset(&runs[i], 0, sizeof runs[i]);
        runs[i] = (run_t){.mode = mode,
                          .devices = devices,
                          .parts = parts,
                          .chunk = chunk,
                          .passes = 2,
                          .group = g,
                          .rank = i};
        if (parts > 1 && pthread_create(&th[i], NULL, run_main, &runs[i]) != 0)
            abort(); /* (the threads already started would wait forever) */
    }
    if (parts == 1)
        run_main(&runs[0]);
    for (int i = 0; parts > 1 && i < parts; i++)
        pthread_join(th[i], NULL);
    dpt_comm_threads_group_destroy(g);
    int rc = 0;
    for (int i = 0; i < parts; i++) {
        if (runs[i].rc) {
            fprintf(stderr, "  participant %d of %d x %d: %s\n", i, parts, devices, runs[i].msg);
            rc = runs[i].rc;
        } else if (memcmp(runs[i].w, runs[0].w, runs[0].count * sizeof(float)) != 0) {
            fprintf(stderr, "  participant %d's weights differ from participant 0's\n", i);
            rc = DPT_ESTATE;
        }
    }
    memcpy(w, runs[0].w, runs[0].count * sizeof(float));
    *count = runs[0].count;
    return rc;
}

static void test_devices_and_participants(void)
{
    float ref[512], got[512];
    size_t n = 0, n2 = 0;
    REQUIRE_OK(train(DPT_TOWERS_PS, 1, 1, C, ref, &n));
    static const struct {
        dpt_towers_mode_t mode;
        int devices, parts;
        int mirror; /* ps: mirrored copies (the default at this size) or one shared copy */
    } cases[] = {
        {DPT_TOWERS_PS, 2, 1, 1},         {DPT_TOWERS_PS, 3, 1, 1},
        {DPT_TOWERS_PS, 4, 1, 1},         {DPT_TOWERS_PS, 2, 1, 0},
        {DPT_TOWERS_PS, 3, 1, 0},         {DPT_TOWERS_REPLICATED, 1, 1, 1},
        {DPT_TOWERS_REPLICATED, 3, 1, 1}, {DPT_TOWERS_REPLICATED, 4, 1, 1},
        {DPT_TOWERS_PS, 1, 2, 1},         {DPT_TOWERS_PS, 2, 2, 1},
        {DPT_TOWERS_REPLICATED, 2, 2, 1}, {DPT_TOWERS_PS, 1, 3, 1},
        {DPT_TOWERS_PS, 1, 4, 1},         {DPT_TOWERS_REPLICATED, 2, 3, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dpt__towers_mirror_max = cases[i].mirror ? DPT_TOWERS_MIRROR_MAX : 0;
        int rc = train(cases[i].mode, cases[i].devices, cases[i].parts, C, got, &n2);
        dpt__towers_mirror_max = DPT_TOWERS_MIRROR_MAX;
        int same = rc == 0 && n2 == n && memcmp(got, ref, n * sizeof(float)) == 0;
        printf("  %-10s %d participant(s) x %d device(s)%s: %s\n",
               dpt_towers_mode_name(cases[i].mode), cases[i].parts, cases[i].devices,
               cases[i].mirror ? "" : " (one copy)", same ? "bitwise equal" : "DIFFERENT");
        CHECK(same);
    }
}

/* The fast order: 2 devices against 1 differ (in the last bits), so the
 * comparisons above can tell an invariant sum from a lucky one. */
static void test_fast_order_differs(void)
{
    float one[512], two[512], three[512];
    size_t n, n2, n3;
    REQUIRE_OK(train(DPT_TOWERS_PS, 1, 1, 0, one, &n));
    REQUIRE_OK(train(DPT_TOWERS_PS, 2, 1, 0, two, &n2));
    REQUIRE_OK(train(DPT_TOWERS_PS, 1, 2, 0, three, &n3));
    double diff = dpt_test_max_rel_diff(one, two, n, 1e-3);
    printf("  fast order, 1 against 2 devices: max relative difference %.3g\n", diff);
    CHECK(memcmp(one, two, n * sizeof(float)) != 0);
    CHECK(memcmp(one, three, n * sizeof(float)) != 0);
    CHECK(diff < 1e-3); /* the same training, summed in another order */
}

/* ---- the gradient against float64 ------------------------------------------ */

enum { GROWS = 4096, GCHUNK = 32 };
static float gx[GROWS * IN];
static int32_t gy[GROWS];

/* The gradient of one step from zero weights: one linear layer, softmax
 * cross-entropy, SGD with lr 1 (new weights = -gradient, exactly). */
static int one_step_gradient(int devices, size_t chunk, float *g, size_t *count,
                             const dpt_vartable_t **vars_out, dpt_mlp_t **keep)
{
    static const dpt_layer_spec_t lin[] = {
        {.kind = DPT_LAYER_LINEAR, .out = OUT, .init = DPT_INIT_DEFAULT, .gain = 0}};
    dpt_mlp_t *mlp;
    int rc = dpt_mlp_create(&mlp, IN, lin, 1, DPT_LOSS_SOFTMAX_XENT, GROWS);
    if (rc)
        return rc;
    dpt_model_t model = dpt_mlp_model(mlp);
    dpt_towers_config_t c = dpt_towers_defaults();
    c.num_devices = devices;
    c.max_per_device_batch_size = chunk ? chunk : GROWS / (size_t)devices;
    c.max_load_rows = GROWS;
    c.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
    c.chunk_rows = chunk;
    c.global_batch = chunk ? GROWS : 0;
    dpt_batch_t lay = xy(0, NULL, NULL);
    dpt_towers_t *t;
    if ((rc = dpt_towers_create(&t, &model, &lay, &c)) != 0) {
        dpt_mlp_destroy(mlp);
        return rc;
    }
    *count = model.vars->total;
    float zero[64] = {0};
    dpt_batch_t b = xy(GROWS, gx, gy);
    dpt_towers_load_info_t li;
    dpt_towers_stats_t st;
    if (!(rc = dpt_towers_set_weights(t, zero, *count)) && !(rc = dpt_towers_load(t, 0, &b, &li)) &&
        !(rc = dpt_towers_optimize(t, 0, 0, 1.0f, &st)))
        rc = dpt_towers_get_weights(t, g, *count);
    for (size_t i = 0; i < *count; i++)
        g[i] = -g[i];
    dpt_towers_destroy(t);
    *vars_out = model.vars;
    *keep = mlp;
    return rc;
}

static void test_float64_reference(void)
{
    dpt_rng_t r;
    dpt_rng_init(&r, 7, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, gx, GROWS * IN, -1.0f, 1.0f);
    for (int i = 0; i < GROWS; i++)
        gy[i] = (int32_t)dpt_rng_below(&r, OUT);
    float fast[64], inv[64];
    size_t n, n2;
    const dpt_vartable_t *vars;
    dpt_mlp_t *m1, *m2;
    REQUIRE_OK(one_step_gradient(2, 0, fast, &n, &vars, &m1));
    REQUIRE_OK(one_step_gradient(2, GCHUNK, inv, &n2, &vars, &m2));
    REQUIRE(n == n2 && n <= 64);
    /* float64: at zero weights every class has probability 1/OUT, so the
     * gradient of the mean loss is mean over rows of (1/OUT - [y = o]) x_i
     * for the weight [o, i] and of (1/OUT - [y = o]) for the bias [o]. */
    double ref[64] = {0};
    const dpt_var_t *wv = NULL, *bv = NULL;
    for (size_t v = 0; v < vars->nvars; v++) {
        if (vars->vars[v].ndim == 2)
            wv = &vars->vars[v];
        else
            bv = &vars->vars[v];
    }
    REQUIRE(wv && bv && wv->shape[0] == OUT && wv->shape[1] == IN);
    for (size_t row = 0; row < GROWS; row++)
        for (int o = 0; o < OUT; o++) {
            double d = 1.0 / OUT - (gy[row] == o ? 1.0 : 0.0);
            for (int i = 0; i < IN; i++)
                ref[wv->offset + (size_t)o * IN + (size_t)i] +=
                    d * (double)gx[row * IN + (size_t)i];
            ref[bv->offset + (size_t)o] += d;
        }
    double err_fast = 0.0, err_inv = 0.0, top = 0.0;
    for (size_t i = 0; i < n; i++)
        top = fmax(top, fabs(ref[i] / GROWS));
    for (size_t i = 0; i < n; i++) {
        double want = ref[i] / GROWS, den = fmax(fabs(want), 1e-3 * top);
        if (den == 0.0)
            continue;
        err_fast = fmax(err_fast, fabs((double)fast[i] - want) / den);
        err_inv = fmax(err_inv, fabs((double)inv[i] - want) / den);
    }
    printf("  worst relative error against float64 (%d rows, 2 devices): fast %.3g, invariant "
           "(chunks of %d) %.3g\n",
           GROWS, err_fast, GCHUNK, err_inv);
    CHECK(err_fast > 0.0);
    CHECK(err_inv <= 2.0 * err_fast);
    dpt_mlp_destroy(m1);
    dpt_mlp_destroy(m2);
}

/* ---- rules and failures ------------------------------------------------------ */

static void test_config_errors(void)
{
    dpt_mlp_t *mlp;
    REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 3, DPT_LOSS_SOFTMAX_XENT, B));
    dpt_model_t model = dpt_mlp_model(mlp);
    dpt_batch_t lay = xy(0, NULL, NULL);
    dpt_towers_t *t = NULL;
    dpt_towers_config_t c = dpt_towers_defaults();
    c.num_devices = 2;
    c.max_per_device_batch_size = B;
    c.max_load_rows = ROWS;
    c.chunk_rows = C;
    c.global_batch = B;
    c.mode = DPT_TOWERS_ASYNC;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "async");
    c.mode = DPT_TOWERS_PS;
    c.reduce_sum = 1;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "reduce_sum");
    c.reduce_sum = 0;
    c.global_batch = B + 1;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "not a positive multiple");
    c.global_batch = C;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "every device needs a chunk");
    c.global_batch = B;
    c.max_per_device_batch_size = C - 1;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "exceeds");
    c.max_per_device_batch_size = B;
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    dpt_batch_t small = xy(B - 1, data_x, data_y);
    dpt_towers_load_info_t li;
    CHECK_ERR(dpt_towers_load(t, 0, &small, &li), DPT_EINVAL, "fewer than");
    dpt_batch_t b = xy(B + 5, data_x, data_y);
    CHECK_ERR(dpt_towers_load_ex(t, 0, &b, 4, &li), DPT_EINVAL, "per_device_batch");
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK(li.steps == 1 && li.rows_loaded == B && li.rows_dropped == 5);
    CHECK(li.per_device_batch == (size_t)(B / C + 1) / 2 * C && li.minibatch == B);
    size_t row0, rows;
    CHECK_OK(dpt_towers_share(t, &row0, &rows));
    CHECK(row0 == 0 && rows == B);
    /* A chunk whose loss is not finite refuses the step on every device:
     * the weights stay, the error names the chunk. */
    float before[512], after[512];
    size_t n = model.vars->total;
    REQUIRE(n <= 512);
    float xbad[(B + 5) * IN];
    memcpy(xbad, data_x, sizeof xbad);
    xbad[(6 * C) * IN] = NAN; /* chunk 6, device 1's */
    dpt_batch_t bad = xy(B + 5, xbad, data_y);
    REQUIRE_OK(dpt_towers_load(t, 0, &bad, &li));
    REQUIRE_OK(dpt_towers_get_weights(t, before, n));
    dpt_towers_stats_t st;
    CHECK_ERR(dpt_towers_optimize(t, 0, 0, 0.01f, &st), DPT_ENUMERIC, "device 1");
    REQUIRE_OK(dpt_towers_get_weights(t, after, n));
    CHECK(memcmp(before, after, n * sizeof(float)) == 0);
    dpt_towers_destroy(t);
    /* Without chunk_rows there is no share to ask for. */
    c.chunk_rows = 0;
    c.global_batch = 0;
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    CHECK_ERR(dpt_towers_share(t, &row0, &rows), DPT_EINVAL, "chunk_rows");
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
}

/* ---- a failing chunk -------------------------------------------------------- */

/* A model of one weight w whose loss is the mean of w x over the rows (no
 * input checks: an infinite x gives an infinite loss). */
static int mean_loss_grad(void *ctx, const float *params, float *grads, const dpt_batch_t *b,
                          dpt_loss_out_t *out)
{
    (void)ctx;
    const float *x = dpt_batch_get(b, "mean", "x", DPT_F32, 1, NULL);
    if (!x)
        return DPT_EINVAL;
    double sum = 0.0;
    for (size_t i = 0; i < b->rows; i++)
        sum += (double)x[i];
    grads[0] = (float)(sum / (double)b->rows);
    out->loss = (double)params[0] * sum / (double)b->rows;
    out->rows = b->rows;
    return DPT_OK;
}

enum { FROWS = 2 * B };
static float fx[MAXP][FROWS];

typedef struct fail_part {
    dpt_comm_threads_group_t *group;
    int rank, parts;
    int rc, rc_next;
    char msg[400];
    float before, after;
} fail_part_t;

/* One participant of `parts` (a threads communicator when parts > 1) with
 * 2 devices: a step on minibatch 0, where participant parts - 1 holds an
 * infinite row in chunk 6, then a step on minibatch 1. */
static void *fail_main(void *arg)
{
    fail_part_t *p = arg;
    dpt_vartable_t vars;
    dpt_vartable_init(&vars);
    size_t one[1] = {1};
    dpt_comm_t *comm = NULL;
    dpt_towers_t *t = NULL;
    int rc = dpt_vartable_add(&vars, "w", 1, one, NULL);
    if (!rc && p->group)
        rc = dpt_comm_threads_join(p->group, p->rank, &comm);
    dpt_model_t model = {.vars = &vars, .loss_grad = mean_loss_grad};
    dpt_batch_t lay;
    dpt_batch_init(&lay, 0);
    dpt_batch_add(&lay, "x", DPT_F32, 1, 0, NULL);
    dpt_towers_config_t c = dpt_towers_defaults();
    c.num_devices = 2;
    c.max_per_device_batch_size = C;
    c.max_load_rows = FROWS;
    c.chunk_rows = C;
    c.global_batch = B;
    c.comm = comm;
    c.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
    if (!rc)
        rc = dpt_towers_create(&t, &model, &lay, &c);
    size_t row0 = 0, share = 0;
    if (!rc)
        rc = dpt_towers_share(t, &row0, &share);
    float *x = fx[p->rank], w0[DPT_VAR_ALIGN_FLOATS] = {0.5f}, w1[DPT_VAR_ALIGN_FLOATS];
    for (size_t m = 0, j = 0; !rc && m < 2; m++)
        for (size_t i = 0; i < share; i++, j++) {
            size_t g = m * B + row0 + i; /* the row's place in the global batch */
            x[j] = g == 6 * C ? INFINITY : (float)(g % 7) * 0.25f;
        }
    dpt_batch_t b;
    dpt_batch_init(&b, 2 * share);
    dpt_batch_add(&b, "x", DPT_F32, 1, 0, x);
    dpt_towers_load_info_t li;
    dpt_towers_stats_t st;
    if (!rc && !(rc = dpt_towers_set_weights(t, w0, vars.total)) &&
        !(rc = dpt_towers_load(t, 0, &b, &li))) {
        p->rc = dpt_towers_optimize(t, 0, 0, 0.1f, &st);
        snprintf(p->msg, sizeof p->msg, "%s", dpt_last_error());
        dpt_towers_get_weights(t, w1, vars.total);
        p->before = w0[0];
        p->after = w1[0];
        p->rc_next = dpt_towers_optimize(t, 0, li.per_device_batch, 0.1f, &st);
    } else {
        p->rc = p->rc_next = rc ? rc : -1;
        snprintf(p->msg, sizeof p->msg, "%s", dpt_last_error());
    }
    dpt_towers_destroy(t);
    dpt_comm_destroy(comm);
    dpt_vartable_deinit(&vars);
    return NULL;
}

/* A chunk whose loss is not finite refuses the step on every device and,
 * over a communicator, on every participant (the one that failed names the
 * chunk, the others name it); nothing moves, and the next step runs. */
static void test_failed_chunk(void)
{
    for (int parts = 1; parts <= 2; parts++) {
        fail_part_t p[MAXP];
        memset(p, 0, sizeof p);
        dpt_comm_threads_group_t *g = NULL;
        if (parts > 1) {
            dpt_comm_threads_options_t o;
            dpt_comm_threads_options_init(&o);
            o.timeout_s = 60.0;
            REQUIRE_OK(dpt_comm_threads_group_create(&g, parts, &o));
        }
        pthread_t th[MAXP];
        for (int i = 0; i < parts; i++) {
            p[i] = (fail_part_t){.group = g, .rank = i, .parts = parts};
            if (parts > 1)
                REQUIRE(pthread_create(&th[i], NULL, fail_main, &p[i]) == 0);
        }
        if (parts == 1)
            fail_main(&p[0]);
        for (int i = 0; parts > 1 && i < parts; i++)
            pthread_join(th[i], NULL);
        dpt_comm_threads_group_destroy(g);
        for (int i = 0; i < parts; i++) {
            /* chunk 6 is the last participant's (with 2: chunks 5..9) */
            int holder = i == parts - 1;
            printf("  %d participant(s), participant %d: %s: %s\n", parts, i,
                   dpt_status_name(p[i].rc), p[i].msg);
            CHECK(p[i].rc == (holder ? DPT_ENUMERIC : DPT_ECOMM));
            CHECK(strstr(p[i].msg, holder ? "chunk 6" : "participant 1") != NULL);
            CHECK(p[i].after == p[i].before);
            CHECK(p[i].rc_next == DPT_OK);
        }
    }
}

int main(void)
{
    dpt_rng_t r;
    dpt_rng_init(&r, 99, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, data_x, ROWS * IN, -1.0f, 1.0f);
    for (int i = 0; i < ROWS; i++)
        data_y[i] = (int32_t)dpt_rng_below(&r, OUT);
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_devices_and_participants),
        DPT_TEST(test_fast_order_differs),
        DPT_TEST(test_float64_reference),
        DPT_TEST(test_config_errors),
        DPT_TEST(test_failed_chunk),
    };
    return DPT_TEST_RUN(cases);
}
