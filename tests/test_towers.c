/*
 * towers: equivalence with one device on the whole minibatch (ps and
 * replicated, 1-4 devices), bitwise repeatability, load rules (and fixed
 * per-device batches), multi-pass reuse, stack independence, async
 * convergence, the gradient-set check and bad input; engines over an
 * external communicator (participant threads): equal to replicated towers
 * bitwise, several devices per participant (like one device on the whole
 * minibatches, bitwise repeatable, ps and replicated alike), row-weighted
 * means with unequal rows, failures refused by every participant, the
 * collective replica check, and configuration errors.
 */
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/comm.h"
#include "dpt/nn.h"
#include "dpt/optim.h"
#include "dpt/rng.h"
#include "dpt/towers.h"
#include "parallel/towers_impl.h" /* a replica changed behind the engine's back */

#include <pthread.h>
#include <stdint.h>

enum { IN = 6, OUT = 3, ROWS = 48, MB = 12 };

/* Towers against one device on the whole minibatch: the gradients are the
 * same sums in another order, about 1e-7 apart, and Adam's normalised step
 * over 8-12 updates lets that grow to 2e-5 (relative, floor 1e-3) with the
 * present kernels. A real fault (a device's rows left out, a wrong weight)
 * gives 1e-2 and more (the unweighted-average check below gives ~12). */
#define EQUIV_TOL 5e-5

static const dpt_layer_spec_t layers[] = {
    {.kind = DPT_LAYER_LINEAR, .out = 16, .init = DPT_INIT_DEFAULT, .gain = 0},
    {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
    {.kind = DPT_LAYER_LINEAR, .out = 16, .init = DPT_INIT_DEFAULT, .gain = 0},
    {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
    {.kind = DPT_LAYER_LINEAR, .out = OUT, .init = DPT_INIT_DEFAULT, .gain = 0}};

static float data_x[ROWS * IN];
static int32_t data_y[ROWS];

static void make_data(void)
{
    dpt_rng_t r;
    dpt_rng_init(&r, 99, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, data_x, ROWS * IN, -1.0f, 1.0f);
    for (int i = 0; i < ROWS; i++)
        data_y[i] = (int32_t)dpt_rng_below(&r, OUT);
}

static dpt_batch_t xy(size_t rows, float *x, int32_t *y)
{
    dpt_batch_t b;
    dpt_batch_init(&b, rows);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, IN, 0, x);
    dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, y);
    return b;
}

static dpt_batch_t layout(void)
{
    return xy(0, NULL, NULL);
}

/* The comparisons with one device run twice: Adam with clipping (the
 * two-pass ps step) and plain SGD without clipping (the fused one). */
static int use_sgd;
static double clip_override; /* > 0: the clip bound instead of the default */

static dpt_towers_config_t config(dpt_towers_mode_t mode, int n, size_t m)
{
    dpt_towers_config_t c = dpt_towers_defaults();
    c.mode = mode;
    c.num_devices = n;
    c.max_per_device_batch_size = m;
    c.max_load_rows = ROWS;
    c.grad_clip = clip_override > 0.0 ? clip_override : (use_sgd ? 0.0 : 0.5);
    c.optim = dpt_optim_defaults(use_sgd ? DPT_OPTIM_SGD : DPT_OPTIM_ADAM);
    return c;
}

/* Trains with the towers engine: one load, `passes` passes in order. */
static int run_towers(dpt_towers_mode_t mode, int n, int passes, float *w, size_t count)
{
    dpt_mlp_t *mlp;
    int rc = dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB);
    if (rc)
        return rc;
    dpt_model_t model = dpt_mlp_model(mlp);
    dpt_towers_config_t c = config(mode, n, MB / (size_t)n);
    dpt_batch_t lay = layout();
    dpt_towers_t *t;
    if ((rc = dpt_towers_create(&t, &model, &lay, &c)) != 0)
        goto out_mlp;
    dpt_rng_t r;
    dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(mlp, w, &r);
    if ((rc = dpt_towers_set_weights(t, w, count)) != 0)
        goto out;
    dpt_batch_t b = xy(ROWS, data_x, data_y);
    dpt_towers_load_info_t info;
    if ((rc = dpt_towers_load(t, 0, &b, &info)) != 0)
        goto out;
    for (int p = 0; p < passes; p++)
        for (size_t off = 0; off < info.rows_per_device; off += info.per_device_batch) {
            dpt_towers_stats_t st;
            if ((rc = dpt_towers_optimize(t, 0, off, use_sgd ? 0.1f : 0.01f, &st)) != 0)
                goto out;
        }
    rc = dpt_towers_check_replicas(t);
    if (!rc)
        rc = dpt_towers_get_weights(t, w, count);
out:
    dpt_towers_destroy(t);
out_mlp:
    dpt_mlp_destroy(mlp);
    return rc;
}

/* The same training on one "device" by hand: step k uses the rows the n
 * devices would hold at offset k*pdb, all in one loss_grad call. */
static void run_reference(int n, int passes, float *w, size_t count)
{
    dpt_mlp_t *mlp;
    REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB));
    dpt_rng_t r;
    dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(mlp, w, &r);
    dpt_arena_t g;
    REQUIRE_OK(dpt_arena_init(&g, count));
    dpt_optim_config_t oc = dpt_optim_defaults(use_sgd ? DPT_OPTIM_SGD : DPT_OPTIM_ADAM);
    dpt_optim_t *opt;
    REQUIRE_OK(dpt_optim_create(&opt, &oc, count));
    size_t rpd = ROWS / (size_t)n, pdb = MB / (size_t)n;
    float x[MB * IN];
    int32_t y[MB];
    for (int p = 0; p < passes; p++)
        for (size_t off = 0; off < rpd; off += pdb) {
            size_t k = 0;
            for (int d = 0; d < n; d++)
                for (size_t j = 0; j < pdb; j++, k++) {
                    size_t src = (size_t)d * rpd + off + j;
                    memcpy(x + k * IN, data_x + src * IN, IN * sizeof(float));
                    y[k] = data_y[src];
                }
            dpt_batch_t b = xy(MB, x, y);
            dpt_loss_out_t out;
            dpt_vec_zero(g.data, count);
            REQUIRE_OK(dpt_mlp_loss_grad(mlp, w, g.data, &b, &out));
            if (!use_sgd)
                dpt_clip_global_norm(g.data, count, 0.5);
            dpt_optim_step(opt, w, g.data, use_sgd ? 0.1f : 0.01f);
        }
    dpt_optim_destroy(opt);
    dpt_arena_deinit(&g);
    dpt_mlp_destroy(mlp);
}

static size_t nparams(void)
{
    dpt_mlp_t *mlp;
    if (dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB))
        return 0;
    size_t n = dpt_mlp_vars(mlp)->total;
    dpt_mlp_destroy(mlp);
    return n;
}

static double max_rel_diff(const float *a, const float *b, size_t n)
{
    return dpt_test_max_rel_diff(a, b, n, 1e-3);
}

static void check_mode_matches_reference(dpt_towers_mode_t mode)
{
    size_t count = nparams();
    REQUIRE(count > 0);
    float *w = calloc(count, sizeof *w), *w2 = calloc(count, sizeof *w2);
    float *ref = calloc(count, sizeof *ref);
    REQUIRE(w && w2 && ref);
    for (int n = 1; n <= 4; n++) {
        run_reference(n, 3, ref, count);
        REQUIRE_OK(run_towers(mode, n, 3, w, count));
        double d = max_rel_diff(w, ref, count);
        if (d > EQUIV_TOL) {
            fprintf(stderr, "%s with %d devices: max relative difference %.3g\n",
                    dpt_towers_mode_name(mode), n, d);
            for (size_t i = 0; i < count; i++)
                if (fabs((double)w[i] - (double)ref[i]) > 1e-3) {
                    fprintf(stderr, "  first difference at %zu: %g vs reference %g\n", i,
                            (double)w[i], (double)ref[i]);
                    break;
                }
        }
        CHECK(d <= EQUIV_TOL);
        /* The reference moved the weights: the comparison is not vacuous. */
        float *init = w2;
        dpt_mlp_t *mlp;
        REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB));
        dpt_rng_t r;
        dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
        dpt_mlp_init_params(mlp, init, &r);
        dpt_mlp_destroy(mlp);
        CHECK(max_rel_diff(init, ref, count) > 1e-2);
        /* Same run, same device count: bitwise identical. */
        REQUIRE_OK(run_towers(mode, n, 3, w2, count));
        CHECK(memcmp(w, w2, count * sizeof(float)) == 0);
    }
    free(w), free(w2), free(ref);
}

static void test_ps_matches_single_device(void)
{
    check_mode_matches_reference(DPT_TOWERS_PS);
    use_sgd = 1;
    check_mode_matches_reference(DPT_TOWERS_PS);
    use_sgd = 0;
}

/* ps with SGD: the fused update (no clipping) and the two-pass one (a clip
 * bound that is never reached) give bitwise the same weights. */
static void test_ps_fused_update_is_two_pass(void)
{
    size_t count = nparams();
    REQUIRE(count > 0);
    float *a = calloc(count, sizeof *a), *b = calloc(count, sizeof *b);
    REQUIRE(a && b);
    use_sgd = 1;
    for (int n = 1; n <= 3; n++) {
        REQUIRE_OK(run_towers(DPT_TOWERS_PS, n, 2, a, count));
        clip_override = 1e30;
        REQUIRE_OK(run_towers(DPT_TOWERS_PS, n, 2, b, count));
        clip_override = 0.0;
        CHECK(memcmp(a, b, count * sizeof(float)) == 0);
    }
    use_sgd = 0;
    free(a), free(b);
}

/* ps: the mirrored step (every device updates its own copy) and the
 * sliced one give bitwise the same weights, with Adam and clipping and
 * with plain SGD, for 2..4 devices; and a run resumed into a new engine
 * from the weights and optimizer state continues exactly (the state reaches
 * every copy). */
static void test_ps_mirrored_is_sliced(void)
{
    size_t count = nparams();
    REQUIRE(count > 0 && count <= DPT_TOWERS_MIRROR_MAX);
    float *a = calloc(count, sizeof *a), *b = calloc(count, sizeof *b);
    REQUIRE(a && b);
    for (use_sgd = 0; use_sgd <= 1; use_sgd++)
        for (int n = 2; n <= 4; n++) {
            REQUIRE_OK(run_towers(DPT_TOWERS_PS, n, 3, a, count));
            dpt__towers_mirror_max = 0;
            int rc = run_towers(DPT_TOWERS_PS, n, 3, b, count);
            dpt__towers_mirror_max = DPT_TOWERS_MIRROR_MAX;
            REQUIRE_OK(rc);
            CHECK(memcmp(a, b, count * sizeof(float)) == 0);
        }
    use_sgd = 0;
    /* Resume: 2 passes in one engine against 1 + 1 across two. */
    dpt_mlp_t *mlp;
    REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB));
    dpt_model_t model = dpt_mlp_model(mlp);
    dpt_towers_config_t c = config(DPT_TOWERS_PS, 2, MB / 2);
    dpt_batch_t lay = layout(), data = xy(ROWS, data_x, data_y);
    dpt_towers_t *t[3];
    for (int k = 0; k < 3; k++)
        REQUIRE_OK(dpt_towers_create(&t[k], &model, &lay, &c));
    dpt_rng_t r;
    dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(mlp, a, &r);
    dpt_towers_load_info_t info;
    for (int k = 0; k < 3; k++) {
        REQUIRE_OK(dpt_towers_set_weights(t[k], a, count));
        REQUIRE_OK(dpt_towers_load(t[k], 0, &data, &info));
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t off = 0; off < info.rows_per_device; off += info.per_device_batch) {
            dpt_towers_stats_t st;
            REQUIRE_OK(dpt_towers_optimize(t[0], 0, off, 0.01f, &st));
            REQUIRE_OK(dpt_towers_optimize(t[pass ? 2 : 1], 0, off, 0.01f, &st));
            if (pass == 0 && off + info.per_device_batch >= info.rows_per_device) {
                REQUIRE_OK(dpt_towers_get_weights(t[1], b, count));
                REQUIRE_OK(dpt_towers_set_weights(t[2], b, count));
                REQUIRE_OK(dpt_towers_set_optimizer_state(t[2], dpt_towers_optimizer(t[1])));
            }
        }
    REQUIRE_OK(dpt_towers_get_weights(t[0], a, count));
    REQUIRE_OK(dpt_towers_get_weights(t[2], b, count));
    CHECK(memcmp(a, b, count * sizeof(float)) == 0);
    for (int k = 0; k < 3; k++)
        dpt_towers_destroy(t[k]);
    dpt_mlp_destroy(mlp);
    free(a), free(b);
}

static void test_replicated_matches_single_device(void)
{
    check_mode_matches_reference(DPT_TOWERS_REPLICATED);
}

static dpt_towers_t *make_towers(dpt_mlp_t **mlp, dpt_towers_config_t c, size_t seq_len,
                                 int with_state)
{
    if (dpt_mlp_create(mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 64))
        return NULL;
    dpt_model_t model = dpt_mlp_model(*mlp);
    dpt_batch_t lay = layout();
    lay.seq_len = seq_len;
    if (with_state)
        dpt_batch_add(&lay, "state", DPT_F32, 2, 1, NULL);
    dpt_towers_t *t = NULL;
    if (dpt_towers_create(&t, &model, &lay, &c)) {
        fprintf(stderr, "create: %s\n", dpt_last_error());
        dpt_mlp_destroy(*mlp);
        return NULL;
    }
    return t;
}

static void test_load_rules(void)
{
    dpt_mlp_t *mlp;
    dpt_towers_config_t c = config(DPT_TOWERS_PS, 3, 4);
    dpt_towers_t *t = make_towers(&mlp, c, 0, 0);
    REQUIRE(t);
    dpt_towers_load_info_t li;
    /* 40 rows, minibatch 12: keep 36, drop 4, 12 per device, 3 steps. */
    dpt_batch_t b = xy(40, data_x, data_y);
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK(li.minibatch == 12 && li.rows_loaded == 36 && li.rows_dropped == 4);
    CHECK(li.rows_per_device == 12 && li.per_device_batch == 4 && li.steps == 3);
    CHECK(li.warning[0] == '\0');
    /* 10 rows < minibatch: shrink to 9 (largest multiple of 3), drop 1. */
    b = xy(10, data_x, data_y);
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK(li.minibatch == 9 && li.rows_loaded == 9 && li.rows_dropped == 1);
    CHECK(li.per_device_batch == 3 && li.steps == 1);
    /* Fewer rows than devices. */
    b = xy(2, data_x, data_y);
    CHECK_ERR(dpt_towers_load(t, 0, &b, &li), DPT_EINVAL, "2 rows for 3 devices");
    b = xy(0, data_x, data_y);
    CHECK_ERR(dpt_towers_load(t, 0, &b, &li), DPT_EINVAL, "0 rows");
    b = xy(ROWS + 1, data_x, data_y);
    CHECK_ERR(dpt_towers_load(t, 0, &b, &li), DPT_EINVAL, "max_load_rows");
    /* Offsets must be multiples of the per-device batch inside the slice. */
    b = xy(36, data_x, data_y);
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK_ERR(dpt_towers_optimize(t, 0, 2, 0.01f, NULL), DPT_EINVAL, "offset 2");
    CHECK_ERR(dpt_towers_optimize(t, 0, 12, 0.01f, NULL), DPT_EINVAL, "offset 12");
    CHECK_ERR(dpt_towers_optimize(t, 1, 0, 0.01f, NULL), DPT_EINVAL, "stack 1");
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
}

static void test_sequence_rules(void)
{
    static float state[ROWS * 2];
    dpt_mlp_t *mlp;
    /* 2 devices, M = 8 rows, sequences of 4: 2 sequences per device per step. */
    dpt_towers_config_t c = config(DPT_TOWERS_PS, 2, 8);
    dpt_towers_t *t = make_towers(&mlp, c, 4, 1);
    REQUIRE(t);
    dpt_towers_load_info_t li;
    dpt_batch_t b = xy(40, data_x, data_y); /* 10 sequences */
    b.seq_len = 4;
    REQUIRE_OK(dpt_batch_add(&b, "state", DPT_F32, 2, 1, state));
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    /* 4 sequences per minibatch: keep 8 (32 rows), drop 2 sequences. */
    CHECK(li.minibatch == 16 && li.rows_loaded == 32 && li.rows_dropped == 8);
    CHECK(li.per_device_batch == 8 && li.rows_per_device == 16);
    CHECK(li.warning[0] == '\0');
    /* 3 sequences: shrink to 2 (one per device). */
    b.rows = 12;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK(li.minibatch == 8 && li.rows_loaded == 8 && li.rows_dropped == 4);
    /* 1 sequence for 2 devices: the error says what to change. */
    b.rows = 4;
    CHECK_ERR(dpt_towers_load(t, 0, &b, &li), DPT_EINVAL, "raise the minibatch size");
    /* Rows that are not whole sequences. */
    b.rows = 10;
    CHECK_ERR(dpt_towers_load(t, 0, &b, &li), DPT_EINVAL, "not whole sequences");
    /* Another sequence length than the layout's. */
    b.rows = 40;
    b.seq_len = 8;
    CHECK_ERR(dpt_towers_load(t, 0, &b, &li), DPT_EINVAL, "sequence length 8");
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);

    /* M = 2 rows per device < sequence length 4: raised, with a warning. */
    c = config(DPT_TOWERS_PS, 2, 2);
    t = make_towers(&mlp, c, 4, 1);
    REQUIRE(t);
    b.seq_len = 4;
    b.rows = 40;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK(li.per_device_batch == 4 && li.minibatch == 8);
    CHECK(strstr(li.warning, "raised to 8 rows") != NULL);
    CHECK_OK(dpt_towers_optimize(t, 0, 4, 0.01f, NULL));
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
}

/* Passes in shuffled order over one load equal the same minibatches loaded
 * one at a time; and loading stack 1 does not disturb stack 0. */
static void test_reuse_and_stacks(void)
{
    size_t count = nparams();
    float *w0 = calloc(count, sizeof *w0), *wa = calloc(count, sizeof *wa);
    float *wb = calloc(count, sizeof *wb);
    REQUIRE(w0 && wa && wb);
    dpt_rng_t r;
    dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
    dpt_towers_config_t c = config(DPT_TOWERS_PS, 2, 6);
    c.num_stacks = 2;
    dpt_mlp_t *mlp, *mlp2;
    dpt_towers_t *ta = make_towers(&mlp, c, 0, 0);
    dpt_towers_t *tb = make_towers(&mlp2, c, 0, 0);
    REQUIRE(ta && tb);
    dpt_mlp_init_params(mlp, w0, &r);
    REQUIRE_OK(dpt_towers_set_weights(ta, w0, count));
    REQUIRE_OK(dpt_towers_set_weights(tb, w0, count));
    dpt_towers_load_info_t li;
    dpt_batch_t b = xy(ROWS, data_x, data_y);
    REQUIRE_OK(dpt_towers_load(ta, 0, &b, &li)); /* 24 rows per device, 4 steps */
    REQUIRE(li.steps == 4);
    /* Stack 1 of `ta` gets other data; stack 0 must not notice. */
    static float other_x[ROWS * IN];
    static int32_t other_y[ROWS];
    for (int i = 0; i < ROWS * IN; i++)
        other_x[i] = -data_x[i];
    for (int i = 0; i < ROWS; i++)
        other_y[i] = (data_y[i] + 1) % OUT;
    dpt_batch_t ob = xy(ROWS, other_x, other_y);
    REQUIRE_OK(dpt_towers_load(ta, 1, &ob, &li));

    size_t order[4] = {0, 1, 2, 3};
    dpt_rng_t sh;
    dpt_rng_init(&sh, 1, 0, 0, DPT_RNG_SHUFFLE);
    float x[12 * IN];
    int32_t y[12];
    for (int pass = 0; pass < 3; pass++) {
        dpt_rng_shuffle(&sh, order, 4);
        for (int k = 0; k < 4; k++) {
            size_t off = order[k] * 6;
            REQUIRE_OK(dpt_towers_optimize(ta, 0, off, 0.01f, NULL));
            /* tb: load exactly this minibatch (device 0's rows, then
             * device 1's), then step on it. */
            for (int d = 0; d < 2; d++)
                for (int j = 0; j < 6; j++) {
                    size_t src = (size_t)d * 24 + off + (size_t)j, dst = (size_t)d * 6 + (size_t)j;
                    memcpy(x + dst * IN, data_x + src * IN, IN * sizeof(float));
                    y[dst] = data_y[src];
                }
            dpt_batch_t mb = xy(12, x, y);
            REQUIRE_OK(dpt_towers_load(tb, 0, &mb, &li));
            REQUIRE_OK(dpt_towers_optimize(tb, 0, 0, 0.01f, NULL));
        }
    }
    REQUIRE_OK(dpt_towers_get_weights(ta, wa, count));
    REQUIRE_OK(dpt_towers_get_weights(tb, wb, count));
    CHECK(memcmp(wa, wb, count * sizeof(float)) == 0);
    CHECK(memcmp(wa, w0, count * sizeof(float)) != 0);
    CHECK(dpt_towers_steps(ta) == 12);
    dpt_towers_destroy(ta);
    dpt_towers_destroy(tb);
    dpt_mlp_destroy(mlp);
    dpt_mlp_destroy(mlp2);
    free(w0), free(wa), free(wb);
}

/* A loader thread: loads `loads` batches into stack 1 with
 * dpt_towers_load_direct while the main thread steps on stack 0. */
typedef struct direct_loader {
    dpt_towers_t *t;
    const dpt_batch_t *b;
    int loads, rc;
} direct_loader_t;

static void *direct_loader_main(void *arg)
{
    direct_loader_t *l = arg;
    for (int i = 0; !l->rc && i < l->loads; i++) {
        dpt_towers_load_info_t li;
        l->rc = dpt_towers_load_direct(l->t, 1, l->b, 0, &li);
    }
    return NULL;
}

/* dpt_towers_load_direct: the same stack as the device pool's load (the
 * steps on it give bitwise the same weights), its errors, and loads of
 * stack 1 from another thread while steps run on stack 0 leave those steps
 * as they were (under TSan: no race). */
static void test_load_direct(void)
{
    size_t count = nparams();
    float *w0 = calloc(count, sizeof *w0), *wa = calloc(count, sizeof *wa);
    float *wb = calloc(count, sizeof *wb);
    REQUIRE(w0 && wa && wb);
    dpt_rng_t r;
    dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
    dpt_towers_config_t c = config(DPT_TOWERS_PS, 2, 6);
    c.num_stacks = 2;
    dpt_mlp_t *mlp, *mlp2;
    dpt_towers_t *ta = make_towers(&mlp, c, 0, 0);
    dpt_towers_t *tb = make_towers(&mlp2, c, 0, 0);
    REQUIRE(ta && tb);
    dpt_mlp_init_params(mlp, w0, &r);
    REQUIRE_OK(dpt_towers_set_weights(ta, w0, count));
    REQUIRE_OK(dpt_towers_set_weights(tb, w0, count));
    dpt_batch_t b = xy(ROWS, data_x, data_y);
    dpt_towers_load_info_t la, lb;
    REQUIRE_OK(dpt_towers_load(ta, 0, &b, &la));
    REQUIRE_OK(dpt_towers_load_direct(tb, 0, &b, 0, &lb));
    CHECK(memcmp(&la, &lb, sizeof la) == 0);
    CHECK_ERR(dpt_towers_load_direct(tb, 2, &b, 0, &lb), DPT_EINVAL, "stack 2 out of range [0, 2)");
    dpt_batch_t empty = xy(0, data_x, data_y);
    CHECK_ERR(dpt_towers_load_direct(tb, 1, &empty, 0, &lb), DPT_EINVAL, "0 rows");
    static float other_x[ROWS * IN];
    static int32_t other_y[ROWS];
    for (int i = 0; i < ROWS * IN; i++)
        other_x[i] = -data_x[i];
    for (int i = 0; i < ROWS; i++)
        other_y[i] = (data_y[i] + 1) % OUT;
    dpt_batch_t ob = xy(ROWS, other_x, other_y);
    direct_loader_t l = {tb, &ob, 50, 0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, direct_loader_main, &l) == 0);
    for (int pass = 0; pass < 5; pass++)
        for (size_t k = 0; k < la.steps; k++) {
            REQUIRE_OK(dpt_towers_optimize(ta, 0, k * la.per_device_batch, 0.01f, NULL));
            CHECK_OK(dpt_towers_optimize(tb, 0, k * lb.per_device_batch, 0.01f, NULL));
        }
    pthread_join(th, NULL);
    CHECK_OK(l.rc);
    REQUIRE_OK(dpt_towers_get_weights(ta, wa, count));
    REQUIRE_OK(dpt_towers_get_weights(tb, wb, count));
    CHECK(memcmp(wa, wb, count * sizeof(float)) == 0);
    CHECK(memcmp(wa, w0, count * sizeof(float)) != 0);
    /* Stack 1 holds the other data: a step on it changes the weights. */
    CHECK_OK(dpt_towers_optimize(tb, 1, 0, 0.01f, NULL));
    REQUIRE_OK(dpt_towers_get_weights(tb, wb, count));
    CHECK(memcmp(wa, wb, count * sizeof(float)) != 0);
    dpt_towers_destroy(ta);
    dpt_towers_destroy(tb);
    dpt_mlp_destroy(mlp);
    dpt_mlp_destroy(mlp2);
    free(w0), free(wa), free(wb);
}

/* async: two towers applying their own updates still learn a separable
 * problem (labels from the sign of a linear function). */
static void test_async_learns(void)
{
    enum { N = 1024 };
    static float x[N * IN];
    static int32_t y[N];
    dpt_rng_t r;
    dpt_rng_init(&r, 8, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, x, N * IN, -1, 1);
    for (int i = 0; i < N; i++) {
        float s = x[i * IN] + 0.5f * x[i * IN + 1] - x[i * IN + 2];
        y[i] = s > 0.3f ? 2 : (s < -0.3f ? 0 : 1);
    }
    dpt_mlp_t *mlp;
    if (dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 32))
        REQUIRE(0);
    dpt_model_t model = dpt_mlp_model(mlp);
    dpt_towers_config_t c = config(DPT_TOWERS_ASYNC, 2, 32);
    c.max_load_rows = N;
    c.grad_clip = 0.0;
    dpt_batch_t lay = layout();
    dpt_towers_t *t;
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    size_t count = model.vars->total;
    float *w = calloc(count, sizeof *w);
    dpt_rng_init(&r, 8, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(mlp, w, &r);
    REQUIRE_OK(dpt_towers_set_weights(t, w, count));
    dpt_batch_t b;
    dpt_batch_init(&b, N);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, IN, 0, x);
    dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, y);
    dpt_towers_load_info_t li;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    dpt_towers_stats_t st = {0};
    double first = -1.0, last_epoch = 0.0;
    for (int e = 0; e < 30; e++) {
        last_epoch = 0.0;
        for (size_t off = 0; off < li.rows_per_device; off += li.per_device_batch) {
            REQUIRE_OK(dpt_towers_optimize(t, 0, off, 0.01f, &st));
            if (first < 0)
                first = st.loss;
            last_epoch += st.loss / (double)li.steps;
        }
    }
    printf("async: first loss %.3f, last epoch mean loss %.3f\n", first, last_epoch);
    CHECK(last_epoch < 0.25); /* target: from ~1.1 (chance) to below 0.25 */
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    free(w);
}

/* A user-defined model (no replicate, thread-safe): least squares
 * y = a.x + b, with a "skip" switch used by the gradient-set test. */
typedef struct {
    dpt_vartable_t vars;
    int skip_bias_on_copy;
    int copies;
} linreg_t;

typedef struct {
    linreg_t *base;
    int skip_bias;
} linreg_copy_t;

static int linreg_loss_grad(void *ctx, const float *params, float *grads, const dpt_batch_t *b,
                            dpt_loss_out_t *out)
{
    linreg_copy_t *self = ctx;
    const float *x = dpt_batch_get(b, "linreg", "x", DPT_F32, 2, NULL);
    const float *y = dpt_batch_get(b, "linreg", "y", DPT_F32, 1, NULL);
    if (!x || !y)
        return DPT_EINVAL;
    double loss = 0.0;
    for (size_t i = 0; i < b->rows; i++) {
        double pred = (double)params[0] * (double)x[2 * i] +
                      (double)params[1] * (double)x[2 * i + 1] + (double)params[16];
        double e = pred - (double)y[i];
        loss += e * e / (double)b->rows;
        grads[0] += (float)(2.0 * e * (double)x[2 * i] / (double)b->rows);
        grads[1] += (float)(2.0 * e * (double)x[2 * i + 1] / (double)b->rows);
        if (!self->skip_bias)
            grads[16] += (float)(2.0 * e / (double)b->rows);
    }
    if (y[0] > 1e30f)
        loss = NAN; /* lets the test provoke a NaN loss */
    if (y[0] < -1e30f)
        grads[0] = INFINITY; /* and a finite loss with an infinite gradient */
    out->loss = loss;
    out->rows = b->rows;
    return DPT_OK;
}

static int linreg_replicate(void *ctx, void **copy)
{
    linreg_copy_t *base = ctx;
    linreg_copy_t *c = calloc(1, sizeof *c);
    if (!c)
        return DPT_ENOMEM;
    c->base = base->base;
    c->skip_bias = base->base->skip_bias_on_copy && base->base->copies++ == 0;
    *copy = c;
    return DPT_OK;
}

/* lr's table (a: 2 floats at offset 0, b: 1 at offset 16) and the model
 * over it, with base as its context. */
static int linreg_init(linreg_t *lr, linreg_copy_t *base, dpt_model_t *model)
{
    memset(lr, 0, sizeof *lr);
    dpt_vartable_init(&lr->vars);
    size_t s2[1] = {2}, s1[1] = {1};
    int rc = dpt_vartable_add(&lr->vars, "a", 1, s2, NULL);
    if (!rc)
        rc = dpt_vartable_add(&lr->vars, "b", 1, s1, NULL);
    *base = (linreg_copy_t){lr, 0};
    *model = (dpt_model_t){.vars = &lr->vars, .ctx = base, .loss_grad = linreg_loss_grad};
    return rc;
}

static void test_user_model_and_gradsets(void)
{
    linreg_t lr;
    linreg_copy_t base;
    dpt_model_t model;
    REQUIRE_OK(linreg_init(&lr, &base, &model));
    enum { N = 64 };
    static float x[N * 2], y[N];
    for (int i = 0; i < N; i++) {
        x[2 * i] = (float)(i % 8) / 8.0f;
        x[2 * i + 1] = (float)(i / 8) / 8.0f;
        y[i] = 2.0f * x[2 * i] - x[2 * i + 1] + 0.5f;
    }
    dpt_batch_t lay;
    dpt_batch_init(&lay, 0);
    dpt_batch_add(&lay, "x", DPT_F32, 2, 0, NULL);
    dpt_batch_add(&lay, "y", DPT_F32, 1, 0, NULL);
    dpt_batch_t b;
    dpt_batch_init(&b, N);
    dpt_batch_add(&b, "x", DPT_F32, 2, 0, x);
    dpt_batch_add(&b, "y", DPT_F32, 1, 0, y);

    /* Shared context (no replicate): trains to the exact solution. */
    dpt_towers_config_t c = dpt_towers_defaults();
    c.num_devices = 2;
    c.max_per_device_batch_size = 16;
    c.max_load_rows = N;
    c.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
    dpt_towers_t *t;
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    dpt_towers_load_info_t li;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    dpt_towers_stats_t st;
    for (int e = 0; e < 400; e++)
        for (size_t off = 0; off < li.rows_per_device; off += li.per_device_batch)
            REQUIRE_OK(dpt_towers_optimize(t, 0, off, 0.3f, &st));
    float w[32];
    REQUIRE_OK(dpt_towers_get_weights(t, w, lr.vars.total));
    CHECK(fabs((double)w[0] - 2.0) < 1e-3 && fabs((double)w[1] + 1.0) < 1e-3 &&
          fabs((double)w[16] - 0.5) < 1e-3);
    CHECK(st.loss < 1e-6);

    /* A NaN loss is refused and leaves the weights untouched. */
    float saved = y[0];
    y[0] = 1e38f;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    float before[32], after[32];
    REQUIRE_OK(dpt_towers_get_weights(t, before, lr.vars.total));
    CHECK_ERR(dpt_towers_optimize(t, 0, 0, 0.3f, &st), DPT_ENUMERIC, "device 0: loss is nan");
    REQUIRE_OK(dpt_towers_get_weights(t, after, lr.vars.total));
    CHECK(memcmp(before, after, lr.vars.total * sizeof(float)) == 0);
    /* So is an infinite gradient under a finite loss, in the fused ps step
     * (SGD, no clipping) and in the two-pass one (clipping on); a good step
     * afterwards moves the weights again. */
    y[0] = -1e38f;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK_ERR(dpt_towers_optimize(t, 0, 0, 0.3f, &st), DPT_ENUMERIC,
              "gradient norm is inf; step refused");
    REQUIRE_OK(dpt_towers_get_weights(t, after, lr.vars.total));
    CHECK(memcmp(before, after, lr.vars.total * sizeof(float)) == 0);
    y[0] = saved;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    REQUIRE_OK(dpt_towers_optimize(t, 0, 0, 0.3f, &st));
    REQUIRE_OK(dpt_towers_get_weights(t, after, lr.vars.total));
    CHECK(memcmp(before, after, lr.vars.total * sizeof(float)) != 0);
    {
        dpt_towers_config_t cc = c;
        cc.grad_clip = 1.0;
        dpt_towers_t *t2;
        REQUIRE_OK(dpt_towers_create(&t2, &model, &lay, &cc));
        REQUIRE_OK(dpt_towers_set_weights(t2, before, lr.vars.total));
        y[0] = -1e38f;
        REQUIRE_OK(dpt_towers_load(t2, 0, &b, &li));
        CHECK_ERR(dpt_towers_optimize(t2, 0, 0, 0.3f, &st), DPT_ENUMERIC,
                  "gradient norm is inf; step refused");
        REQUIRE_OK(dpt_towers_get_weights(t2, after, lr.vars.total));
        CHECK(memcmp(before, after, lr.vars.total * sizeof(float)) == 0);
        y[0] = saved;
        dpt_towers_destroy(t2);
    }
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    /* Wrong columns and bad weights. */
    dpt_batch_t bad;
    dpt_batch_init(&bad, N);
    dpt_batch_add(&bad, "x", DPT_F32, 2, 0, x);
    CHECK_ERR(dpt_towers_load(t, 0, &bad, &li), DPT_EINVAL, "no column \"y\"");
    dpt_batch_add(&bad, "z", DPT_F32, 1, 0, y);
    CHECK_ERR(dpt_towers_load(t, 0, &bad, &li), DPT_EINVAL, "no column \"y\"");
    before[1] = NAN;
    CHECK_ERR(dpt_towers_set_weights(t, before, lr.vars.total), DPT_ENUMERIC, "weight 1");
    CHECK_ERR(dpt_towers_set_weights(t, before, 3), DPT_EINVAL, "3 weights");
    dpt_towers_destroy(t);

    /* Replicas where device 1 never writes "b": the check names it. */
    lr.skip_bias_on_copy = 1;
    model.replicate = linreg_replicate;
    model.release = free;
    c.mode = DPT_TOWERS_REPLICATED;
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    CHECK_ERR(dpt_towers_optimize(t, 0, 0, 0.1f, &st), DPT_EINVAL,
              "only device 0 has [b]; only device 1 has []");
    dpt_towers_destroy(t);
    dpt_vartable_deinit(&lr.vars);
}

static void test_bad_config(void)
{
    dpt_mlp_t *mlp;
    REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 8));
    dpt_model_t model = dpt_mlp_model(mlp);
    dpt_batch_t lay = layout();
    dpt_towers_t *t = NULL;
    dpt_towers_config_t c = config(DPT_TOWERS_PS, 0, 4);
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "num_devices");
    c = config(DPT_TOWERS_PS, 2, 16);
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "max_batch 8");
    c = config(DPT_TOWERS_PS, 2, 0);
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "max_per_device_batch_size");
    c = config((dpt_towers_mode_t)9, 2, 4);
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "mode");
    c = config(DPT_TOWERS_PS, 2, 4);
    c.num_stacks = 0;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "num_stacks");
    c = config(DPT_TOWERS_PS, 2, 4);
    c.optim.eps = -1.0f;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "eps");
    dpt_batch_t empty;
    dpt_batch_init(&empty, 0);
    c = config(DPT_TOWERS_PS, 2, 4);
    CHECK_ERR(dpt_towers_create(&t, &model, &empty, &c), DPT_EINVAL, "no columns");
    CHECK(t == NULL);
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    CHECK_ERR(dpt_towers_optimize(t, 0, 0, 0.1f, NULL), DPT_ESTATE, "no data loaded");
    dpt_towers_mode_t m;
    CHECK_OK(dpt_towers_mode_parse("replicated", &m));
    CHECK(m == DPT_TOWERS_REPLICATED);
    CHECK_ERR(dpt_towers_mode_parse("sync", &m), DPT_EINVAL, "sync");
    dpt_towers_destroy(t);
    dpt_towers_destroy(NULL);
    dpt_mlp_destroy(mlp);
}

/* ---- fixed per-device batches (dpt_towers_load_ex) ----------------------------- */

static void test_load_ex_rules(void)
{
    dpt_mlp_t *mlp;
    dpt_towers_config_t c = config(DPT_TOWERS_PS, 3, 4);
    dpt_towers_t *t = make_towers(&mlp, c, 0, 0);
    REQUIRE(t);
    dpt_towers_load_info_t li;
    /* 40 rows, 3 rows per device: minibatch 9, keep 36, 4 steps. */
    dpt_batch_t b = xy(40, data_x, data_y);
    REQUIRE_OK(dpt_towers_load_ex(t, 0, &b, 3, &li));
    CHECK(li.minibatch == 9 && li.rows_loaded == 36 && li.rows_dropped == 4);
    CHECK(li.rows_per_device == 12 && li.per_device_batch == 3 && li.steps == 4);
    CHECK_OK(dpt_towers_optimize(t, 0, 9, 0.01f, NULL));
    CHECK_ERR(dpt_towers_optimize(t, 0, 4, 0.01f, NULL), DPT_EINVAL, "offset 4");
    /* 0: the rules of dpt_towers_load (minibatch 12). */
    REQUIRE_OK(dpt_towers_load_ex(t, 0, &b, 0, &li));
    CHECK(li.minibatch == 12 && li.rows_loaded == 36 && li.steps == 3);
    /* Never shrunk: fewer rows than one minibatch is an error... */
    b = xy(8, data_x, data_y);
    CHECK_ERR(dpt_towers_load_ex(t, 0, &b, 3, &li), DPT_EINVAL,
              "8 rows are fewer than one minibatch of 9");
    /* ...and so is more than the engine's per-device maximum. */
    b = xy(40, data_x, data_y);
    CHECK_ERR(dpt_towers_load_ex(t, 0, &b, 5, &li), DPT_EINVAL,
              "per_device_batch 5 exceeds max_per_device_batch_size 4");
    CHECK_ERR(dpt_towers_load_ex(t, 2, &b, 3, &li), DPT_EINVAL, "stack 2");
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);

    /* Sequences of 4, 2 devices, M = 8: per_device_batch 4 is one sequence
     * per device per step. */
    static float state[ROWS * 2];
    c = config(DPT_TOWERS_PS, 2, 8);
    t = make_towers(&mlp, c, 4, 1);
    REQUIRE(t);
    b = xy(40, data_x, data_y); /* 10 sequences */
    b.seq_len = 4;
    REQUIRE_OK(dpt_batch_add(&b, "state", DPT_F32, 2, 1, state));
    REQUIRE_OK(dpt_towers_load_ex(t, 0, &b, 4, &li));
    CHECK(li.minibatch == 8 && li.rows_loaded == 40 && li.rows_dropped == 0);
    CHECK(li.per_device_batch == 4 && li.rows_per_device == 20 && li.steps == 5);
    CHECK_ERR(dpt_towers_load_ex(t, 0, &b, 6, &li), DPT_EINVAL,
              "per_device_batch 6 is not a whole number of sequences of 4");
    b.rows = 12; /* 3 sequences, 4 per minibatch */
    CHECK_ERR(dpt_towers_load_ex(t, 0, &b, 8, &li), DPT_EINVAL,
              "3 sequences are fewer than one minibatch of 4");
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
}

/* ---- engines over an external communicator ------------------------------------------ */

enum { MAXP = 3 };

/* One participant: its own model, an engine (cfg.num_devices devices) over
 * its handle of a threads group, its own rows. Results are checked by the
 * main thread (the CHECK counters are not thread-safe). */
typedef struct part {
    dpt_comm_threads_group_t *group;
    int rank;
    dpt_towers_config_t cfg; /* comm is set by the thread */
    float *x;                /* [rows * IN] (read only) */
    int32_t *y;
    size_t rows, pdb; /* rows loaded, rows per step (0: the load rules) */
    int passes;
    int bad_step; /* > 0: before step bad_step (1-based), the rows are
                               * reloaded with a NaN in this participant's first row
                               * (when poison), then restored */
    int poison;
    int poison_device; /* the device whose rows get the NaN */
    float *w;          /* out: the final weights */
    int rc, bad_rc, check_rc, corrupt_rc;
    int local_rc; /* replicated, several devices: the check after participant 1's
                   * replica 1 changed */
    char msg[512], bad_msg[512], local_msg[512];
    uint64_t steps;
    double grad_norm; /* of the last step */
    double loss;      /* of the last step: this participant's own */
} part_t;

static void *part_main(void *arg)
{
    part_t *p = arg;
    dpt_comm_t *comm = NULL;
    dpt_mlp_t *mlp = NULL;
    dpt_towers_t *t = NULL;
    float *xbad = NULL;
    size_t count = 0;
    int rc = dpt_comm_threads_join(p->group, p->rank, &comm);
    if (!rc)
        rc = dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB);
    if (!rc) {
        dpt_model_t model = dpt_mlp_model(mlp);
        dpt_towers_config_t c = p->cfg;
        c.comm = comm;
        dpt_batch_t lay = layout();
        count = model.vars->total;
        rc = dpt_towers_create(&t, &model, &lay, &c);
    }
    if (!rc) {
        dpt_rng_t r;
        dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
        dpt_mlp_init_params(mlp, p->w, &r);
        rc = dpt_towers_set_weights(t, p->w, count);
    }
    dpt_batch_t b = xy(p->rows, p->x, p->y);
    dpt_towers_load_info_t li;
    if (!rc)
        rc = dpt_towers_load_ex(t, 0, &b, p->pdb, &li);
    int step = 0;
    for (int pass = 0; !rc && pass < p->passes; pass++)
        for (size_t off = 0; !rc && off < li.rows_per_device; off += li.per_device_batch) {
            dpt_towers_stats_t st;
            if (++step == p->bad_step) {
                /* A step that fails on one participant: every one refuses it,
                 * the weights stay, and the next step runs everywhere. */
                if (p->poison) {
                    xbad = malloc(p->rows * IN * sizeof(float));
                    if (!xbad) {
                        rc = DPT_ENOMEM;
                        break;
                    }
                    memcpy(xbad, p->x, p->rows * IN * sizeof(float));
                    xbad[((size_t)p->poison_device * li.rows_per_device + off) * IN] = NAN;
                    dpt_batch_t bb = xy(p->rows, xbad, p->y);
                    if ((rc = dpt_towers_load_ex(t, 0, &bb, p->pdb, &li)) != 0)
                        break;
                }
                float before[1024], after[1024];
                if (count > 1024 || dpt_towers_get_weights(t, before, count) != 0) {
                    rc = DPT_ESTATE;
                    break;
                }
                p->bad_rc = dpt_towers_optimize(t, 0, off, use_sgd ? 0.1f : 0.01f, &st);
                snprintf(p->bad_msg, sizeof p->bad_msg, "%s", dpt_last_error());
                if (dpt_towers_get_weights(t, after, count) != 0 ||
                    memcmp(before, after, count * sizeof(float)) != 0)
                    p->bad_rc = 1; /* not a status: "the weights moved" */
                if (p->poison && (rc = dpt_towers_load_ex(t, 0, &b, p->pdb, &li)) != 0)
                    break;
            }
            rc = dpt_towers_optimize(t, 0, off, use_sgd ? 0.1f : 0.01f, &st);
            p->grad_norm = st.grad_norm;
            p->loss = st.loss;
        }
    if (!rc) {
        rc = dpt_towers_get_weights(t, p->w, count);
        p->steps = dpt_towers_steps(t);
    }
    /* The collective replica check: equal, then one participant's copy
     * perturbed (each participant calls it, as it must). */
    if (!rc) {
        p->check_rc = dpt_towers_check_replicas(t);
        if (p->rank == 1) {
            float w2[1024];
            if (count <= 1024 && dpt_towers_get_weights(t, w2, count) == 0) {
                w2[0] += 1.0f;
                dpt_towers_set_weights(t, w2, count);
            }
        }
        p->corrupt_rc = dpt_towers_check_replicas(t);
        /* One replica of participant 1 differs from its tower 0: that one
         * reports it, and the collective check still runs everywhere. */
        if (p->cfg.mode == DPT_TOWERS_REPLICATED && p->cfg.num_devices > 1) {
            if (p->rank == 1)
                t->towers[1].params[0] += 1.0f;
            p->local_rc = dpt_towers_check_replicas(t);
            snprintf(p->local_msg, sizeof p->local_msg, "%s", dpt_last_error());
        }
    }
    if (rc)
        snprintf(p->msg, sizeof p->msg, "%s", dpt_last_error());
    p->rc = rc;
    free(xbad);
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    dpt_comm_destroy(comm);
    return NULL;
}

/* Runs n participants on threads; 0 when every one finished (failures are
 * in parts[i].rc and .msg). */
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
    for (int i = 0; i < n; i++) {
        parts[i].group = g;
        parts[i].rank = i;
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

/* Two participants, each a 1-device engine on the rows one device of a
 * 2-device engine would hold, average over a threads communicator: the
 * same gradients, the same (g0 + g1) / 2, the same norm over the whole
 * arena and the same update as replicated towers with 2 devices, so the
 * weights are bitwise those (and within EQUIV_TOL of one device on the whole
 * minibatches); the participants end bitwise equal to each other. */
static void test_comm_equals_replicated_towers(void)
{
    size_t count = nparams();
    REQUIRE(count > 0 && count <= 1024);
    float *repl = calloc(count, sizeof *repl), *ref = calloc(count, sizeof *ref);
    float *w0 = calloc(count, sizeof *w0), *w1 = calloc(count, sizeof *w1);
    REQUIRE(repl && ref && w0 && w1);
    for (int sgd = 0; sgd < 2; sgd++) {
        use_sgd = sgd;
        REQUIRE_OK(run_towers(DPT_TOWERS_REPLICATED, 2, 3, repl, count));
        run_reference(2, 3, ref, count);
        for (int m = 0; m < 2; m++) {
            dpt_towers_mode_t mode = m ? DPT_TOWERS_REPLICATED : DPT_TOWERS_PS;
            part_t parts[2];
            memset(parts, 0, sizeof parts);
            float *ws[2] = {w0, w1};
            for (int i = 0; i < 2; i++) {
                parts[i].cfg = config(mode, 1, MB / 2);
                parts[i].cfg.max_load_rows = ROWS / 2;
                parts[i].cfg.check_every = 2; /* the collective check, every 2 steps */
                parts[i].x = data_x + (size_t)i * (ROWS / 2) * IN;
                parts[i].y = data_y + (size_t)i * (ROWS / 2);
                parts[i].rows = ROWS / 2;
                parts[i].passes = 3;
                parts[i].w = ws[i];
            }
            REQUIRE(run_parts(parts, 2) == 0);
            CHECK(parts[0].rc == 0 && parts[1].rc == 0);
            CHECK(parts[0].steps == 12 && parts[1].steps == 12);
            CHECK(memcmp(w0, w1, count * sizeof(float)) == 0);
            CHECK(memcmp(w0, repl, count * sizeof(float)) == 0);
            CHECK(max_rel_diff(w0, ref, count) <= EQUIV_TOL);
            /* The norm is the reduced gradient's; the loss each one's own. */
            CHECK(parts[0].grad_norm == parts[1].grad_norm && parts[0].grad_norm > 0.0);
            CHECK(parts[0].loss != parts[1].loss);
            CHECK_OK(parts[0].check_rc);
            CHECK_OK(parts[1].check_rc);
            CHECK(parts[0].corrupt_rc == DPT_ECOMM && parts[1].corrupt_rc == DPT_ECOMM);
            if (memcmp(w0, repl, count * sizeof(float)) != 0)
                fprintf(stderr,
                        "%s, %s over a communicator: max relative difference to "
                        "replicated towers %.3g\n",
                        sgd ? "sgd" : "adam", dpt_towers_mode_name(mode),
                        max_rel_diff(w0, repl, count));
        }
    }
    use_sgd = 0;
    free(repl), free(ref), free(w0), free(w1);
}

/* Two participants of two devices each, over a threads communicator:
 * participant p's device d holds the rows device 2p + d of a 4-device
 * engine would, so the training is one device's on the same minibatches
 * (within float rounding: the mean of the participants' means of their
 * devices' means); the participants end bitwise equal, a second run repeats
 * the first bitwise, and ps and replicated give the same bits (the same
 * sums, the same update). */
static void test_comm_several_devices(void)
{
    size_t count = nparams();
    REQUIRE(count > 0 && count <= 1024);
    float *ref = calloc(count, sizeof *ref), *w0 = calloc(count, sizeof *w0);
    float *w1 = calloc(count, sizeof *w1), *first = calloc(count, sizeof *first);
    REQUIRE(ref && w0 && w1 && first);
    for (int sgd = 0; sgd < 2; sgd++) {
        use_sgd = sgd;
        run_reference(4, 3, ref, count);
        for (int run = 0; run < 3; run++) {
            /* ps, ps again, replicated */
            dpt_towers_mode_t mode = run == 2 ? DPT_TOWERS_REPLICATED : DPT_TOWERS_PS;
            part_t parts[2];
            memset(parts, 0, sizeof parts);
            float *ws[2] = {w0, w1};
            for (int i = 0; i < 2; i++) {
                parts[i].cfg = config(mode, 2, MB / 4);
                parts[i].cfg.max_load_rows = ROWS / 2;
                parts[i].cfg.check_every = 3;
                parts[i].x = data_x + (size_t)i * (ROWS / 2) * IN;
                parts[i].y = data_y + (size_t)i * (ROWS / 2);
                parts[i].rows = ROWS / 2;
                parts[i].passes = 3;
                parts[i].w = ws[i];
            }
            REQUIRE(run_parts(parts, 2) == 0);
            CHECK(parts[0].rc == 0 && parts[1].rc == 0);
            CHECK(parts[0].steps == 12 && parts[1].steps == 12);
            CHECK(memcmp(w0, w1, count * sizeof(float)) == 0);
            double d = max_rel_diff(w0, ref, count);
            if (d > EQUIV_TOL)
                fprintf(stderr, "%s, %s, 2 x 2 devices: max relative difference %.3g\n",
                        sgd ? "sgd" : "adam", dpt_towers_mode_name(mode), d);
            CHECK(d <= EQUIV_TOL);
            if (run == 0)
                memcpy(first, w0, count * sizeof(float));
            else
                CHECK(memcmp(first, w0, count * sizeof(float)) == 0);
            CHECK(parts[0].grad_norm == parts[1].grad_norm && parts[0].grad_norm > 0.0);
            CHECK_OK(parts[0].check_rc);
            CHECK_OK(parts[1].check_rc);
            CHECK(parts[0].corrupt_rc == DPT_ECOMM && parts[1].corrupt_rc == DPT_ECOMM);
            if (mode == DPT_TOWERS_REPLICATED) {
                CHECK(parts[1].local_rc == DPT_ESTATE &&
                      strstr(parts[1].local_msg, "replica 1's parameters differ"));
                CHECK(parts[0].local_rc == DPT_ECOMM);
            }
        }
    }
    use_sgd = 0;
    free(ref), free(w0), free(w1), free(first);
}

/* weight_rows: participant 0 holds 8 rows per step, participant 1 holds 4
 * (the same 3 steps), with 1 or 2 devices each: the step follows the mean
 * gradient of all 12 rows, as one engine on those 12-row minibatches does
 * (within float rounding). Plain averaging of the two means does not (the
 * check is not vacuous). */
static void test_comm_weight_rows(void)
{
    enum { S = 3, R0 = 8, R1 = 4 };
    size_t count = nparams();
    REQUIRE(count > 0 && count <= 1024);
    float *ref = calloc(count, sizeof *ref), *w0 = calloc(count, sizeof *w0);
    float *w1 = calloc(count, sizeof *w1), *avg = calloc(count, sizeof *avg);
    REQUIRE(ref && w0 && w1 && avg);
    for (int D = 1; D <= 2; D++) {
        /* Participant 0: rows [0, 24), participant 1: rows [24, 36), each
         * split into D equal parts, one per device; step k uses rows
         * [8k/D, 8k/D + 8/D) of each of participant 0's parts and
         * [4k/D, 4k/D + 4/D) of each of participant 1's. */
        for (int weighted = 1; weighted >= 0; weighted--) {
            part_t parts[2];
            memset(parts, 0, sizeof parts);
            for (int i = 0; i < 2; i++) {
                parts[i].cfg = config(DPT_TOWERS_REPLICATED, D, MB);
                parts[i].cfg.weight_rows = weighted;
                parts[i].passes = 2;
            }
            parts[0].x = data_x, parts[0].y = data_y, parts[0].rows = S * R0;
            parts[0].pdb = R0 / (size_t)D;
            parts[1].x = data_x + S * R0 * IN, parts[1].y = data_y + S * R0;
            parts[1].rows = S * R1, parts[1].pdb = R1 / (size_t)D;
            parts[0].w = weighted ? w0 : avg;
            parts[1].w = w1;
            REQUIRE(run_parts(parts, 2) == 0);
            CHECK(parts[0].rc == 0 && parts[1].rc == 0);
            CHECK(parts[0].steps == 2 * S && parts[1].steps == 2 * S);
            CHECK(memcmp(parts[0].w, w1, count * sizeof(float)) == 0);
        }
        /* The reference: one engine, one device, minibatches of 12 rows. */
        static float x[S * (R0 + R1) * IN];
        static int32_t y[S * (R0 + R1)];
        const size_t base[2] = {0, S * R0}, held[2] = {R0, R1};
        size_t k = 0;
        for (size_t st = 0; st < S; st++)
            for (int p = 0; p < 2; p++) {
                size_t pdb = held[p] / (size_t)D, part = S * held[p] / (size_t)D;
                for (int d = 0; d < D; d++)
                    for (size_t j = 0; j < pdb; j++, k++) {
                        size_t src = base[p] + (size_t)d * part + st * pdb + j;
                        memcpy(x + k * IN, data_x + src * IN, IN * sizeof(float));
                        y[k] = data_y[src];
                    }
            }
        dpt_mlp_t *mlp;
        REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, MB));
        dpt_model_t model = dpt_mlp_model(mlp);
        dpt_towers_config_t c = config(DPT_TOWERS_REPLICATED, 1, MB);
        dpt_batch_t lay = layout();
        dpt_towers_t *t;
        REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
        dpt_rng_t r;
        dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
        dpt_mlp_init_params(mlp, ref, &r);
        REQUIRE_OK(dpt_towers_set_weights(t, ref, count));
        dpt_batch_t b = xy(S * (R0 + R1), x, y);
        dpt_towers_load_info_t li;
        REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
        REQUIRE(li.steps == S && li.per_device_batch == R0 + R1);
        for (int pass = 0; pass < 2; pass++)
            for (size_t off = 0; off < li.rows_per_device; off += li.per_device_batch)
                REQUIRE_OK(dpt_towers_optimize(t, 0, off, 0.01f, NULL));
        REQUIRE_OK(dpt_towers_get_weights(t, ref, count));
        double d = max_rel_diff(w0, ref, count), da = max_rel_diff(avg, ref, count);
        printf("weight_rows, %d device%s each: max relative difference to one engine on all "
               "rows %.3g (unweighted average: %.3g)\n",
               D, D > 1 ? "s" : "", d, da);
        CHECK(d <= EQUIV_TOL);
        CHECK(da > 100 * EQUIV_TOL);
        dpt_towers_destroy(t);
        dpt_mlp_destroy(mlp);
    }
    free(ref), free(w0), free(w1), free(avg);
}

/* A NaN in one participant's rows (the model refuses it), on its last
 * device, with 1 and 2 devices per participant: that participant reports
 * its own error (naming the device), the others DPT_ECOMM; nobody's weights
 * move, and the next steps run on every participant (they stay in step and
 * bitwise equal). */
static void test_comm_failure_refused_everywhere(void)
{
    size_t count = nparams();
    REQUIRE(count > 0 && count <= 1024);
    for (int D = 1; D <= 2; D++) {
        float *w[MAXP];
        part_t parts[MAXP];
        memset(parts, 0, sizeof parts);
        for (int i = 0; i < MAXP; i++) {
            REQUIRE((w[i] = calloc(count, sizeof(float))) != NULL);
            parts[i].cfg = config(DPT_TOWERS_PS, D, 4 / (size_t)D);
            parts[i].x = data_x + (size_t)i * 16 * IN;
            parts[i].y = data_y + (size_t)i * 16;
            parts[i].rows = 16;
            parts[i].passes = 2;
            parts[i].bad_step = 3;
            parts[i].poison = i == 1;
            parts[i].poison_device = D - 1;
            parts[i].w = w[i];
        }
        REQUIRE(run_parts(parts, MAXP) == 0);
        for (int i = 0; i < MAXP; i++) {
            CHECK(parts[i].rc == 0);
            CHECK(parts[i].steps == 8); /* the refused step does not count */
        }
        char dev[32];
        snprintf(dev, sizeof dev, "device %d: ", D - 1);
        CHECK(parts[1].bad_rc == DPT_ENUMERIC && strstr(parts[1].bad_msg, "is nan") &&
              strstr(parts[1].bad_msg, dev));
        CHECK(parts[0].bad_rc == DPT_ECOMM && strstr(parts[0].bad_msg, "another participant"));
        CHECK(parts[2].bad_rc == DPT_ECOMM && strstr(parts[2].bad_msg, "step refused"));
        CHECK(memcmp(w[0], w[1], count * sizeof(float)) == 0);
        CHECK(memcmp(w[0], w[2], count * sizeof(float)) == 0);
        printf("refused (%d device%s each): participant 1: %s; participant 0: %s\n", D,
               D > 1 ? "s" : "", parts[1].bad_msg, parts[0].bad_msg);
        for (int i = 0; i < MAXP; i++)
            free(w[i]);
    }
}

/* A finite loss with an infinite gradient on one participant (the linreg
 * model's switch), with 1 and 2 devices per participant: the reduced
 * gradient is infinite on every participant, so every one refuses the step
 * with DPT_ENUMERIC and nothing moves. */
typedef struct inf_part {
    dpt_comm_threads_group_t *group;
    int rank, devices;
    dpt_model_t model;
    int rc, bad_rc, moved;
    char msg[512], bad_msg[512];
} inf_part_t;

static void *inf_part_main(void *arg)
{
    inf_part_t *p = arg;
    enum { N = 16 };
    float x[N * 2], y[N], before[32], after[32];
    for (int i = 0; i < N; i++) {
        x[2 * i] = (float)i / N;
        x[2 * i + 1] = 1.0f - (float)i / N;
        y[i] = x[2 * i] - x[2 * i + 1];
    }
    dpt_comm_t *comm = NULL;
    dpt_towers_t *t = NULL;
    dpt_batch_t lay, b;
    dpt_batch_init(&lay, 0);
    dpt_batch_add(&lay, "x", DPT_F32, 2, 0, NULL);
    dpt_batch_add(&lay, "y", DPT_F32, 1, 0, NULL);
    dpt_batch_init(&b, N);
    dpt_batch_add(&b, "x", DPT_F32, 2, 0, x);
    dpt_batch_add(&b, "y", DPT_F32, 1, 0, y);
    dpt_towers_config_t c = dpt_towers_defaults();
    c.num_devices = p->devices;
    c.max_per_device_batch_size = N;
    c.max_load_rows = N;
    c.grad_clip = 1.0;
    size_t count = p->model.vars->total;
    dpt_towers_load_info_t li;
    int rc = dpt_comm_threads_join(p->group, p->rank, &comm);
    c.comm = comm;
    if (!rc)
        rc = dpt_towers_create(&t, &p->model, &lay, &c);
    if (!rc) {
        memset(before, 0, sizeof before);
        rc = dpt_towers_set_weights(t, before, count);
    }
    if (!rc && p->rank == 1)
        y[0] = -1e38f;
    if (!rc)
        rc = dpt_towers_load(t, 0, &b, &li);
    if (!rc) {
        p->bad_rc = dpt_towers_optimize(t, 0, 0, 0.1f, NULL);
        snprintf(p->bad_msg, sizeof p->bad_msg, "%s", dpt_last_error());
        rc = dpt_towers_get_weights(t, after, count);
        p->moved = memcmp(before, after, count * sizeof(float)) != 0;
    }
    y[0] = x[0] - x[1];
    if (!rc)
        rc = dpt_towers_load(t, 0, &b, &li);
    if (!rc)
        rc = dpt_towers_optimize(t, 0, 0, 0.1f, NULL);
    if (rc)
        snprintf(p->msg, sizeof p->msg, "%s", dpt_last_error());
    p->rc = rc;
    dpt_towers_destroy(t);
    dpt_comm_destroy(comm);
    return NULL;
}

static void test_comm_infinite_norm_refused_everywhere(void)
{
    linreg_t lr;
    linreg_copy_t base;
    dpt_model_t model;
    REQUIRE_OK(linreg_init(&lr, &base, &model));
    for (int D = 1; D <= 2; D++) {
        dpt_comm_threads_group_t *g;
        REQUIRE_OK(dpt_comm_threads_group_create(&g, 2, NULL));
        inf_part_t parts[2];
        memset(parts, 0, sizeof parts);
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            parts[i].group = g;
            parts[i].rank = i;
            parts[i].devices = D;
            parts[i].model = model;
            REQUIRE(pthread_create(&th[i], NULL, inf_part_main, &parts[i]) == 0);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        dpt_comm_threads_group_destroy(g);
        for (int i = 0; i < 2; i++) {
            if (parts[i].rc)
                fprintf(stderr, "participant %d: %s\n", i, parts[i].msg);
            CHECK(parts[i].rc == 0);
            CHECK(parts[i].bad_rc == DPT_ENUMERIC &&
                  strstr(parts[i].bad_msg, "gradient norm is inf; step refused"));
            CHECK(!parts[i].moved);
        }
    }
    dpt_vartable_deinit(&lr.vars);
}

/* The all-reduce itself fails (the other participant declared itself
 * failed, dpt_comm_abort), with 1 and 2 devices: the step returns the
 * communicator's error and nothing moves. */
static void test_comm_failed_communicator(void)
{
    size_t count = nparams();
    REQUIRE(count > 0 && count <= 1024);
    for (int D = 1; D <= 2; D++) {
        dpt_comm_threads_group_t *g;
        dpt_comm_t *c0, *c1;
        REQUIRE_OK(dpt_comm_threads_group_create(&g, 2, NULL));
        REQUIRE_OK(dpt_comm_threads_join(g, 0, &c0));
        REQUIRE_OK(dpt_comm_threads_join(g, 1, &c1));
        CHECK(dpt_comm_abort(c1, "participant 1 is gone") == DPT_ECOMM);
        dpt_mlp_t *mlp;
        REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 8));
        dpt_model_t model = dpt_mlp_model(mlp);
        dpt_batch_t lay = layout();
        dpt_towers_t *t;
        dpt_towers_config_t c = config(D == 1 ? DPT_TOWERS_PS : DPT_TOWERS_REPLICATED, D, 4);
        c.comm = c0;
        REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
        float before[1024] = {0}, after[1024]; /* the padding stays 0 */
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
}

static void test_comm_config_errors(void)
{
    dpt_comm_threads_group_t *g;
    dpt_comm_t *comm;
    REQUIRE_OK(dpt_comm_threads_group_create(&g, 1, NULL));
    REQUIRE_OK(dpt_comm_threads_join(g, 0, &comm));
    dpt_mlp_t *mlp;
    REQUIRE_OK(dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 8));
    dpt_model_t model = dpt_mlp_model(mlp);
    dpt_batch_t lay = layout();
    dpt_towers_t *t = NULL;
    dpt_towers_config_t c;
    for (int n = 1; n <= 2; n++) {
        c = config(DPT_TOWERS_ASYNC, n, 4);
        c.comm = comm;
        CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL,
                  "mode async does not run over an external communicator");
        CHECK(strstr(dpt_last_error(), "use ps or replicated") != NULL);
    }
    c = config(DPT_TOWERS_REPLICATED, 1, 4);
    c.comm = comm;
    c.weight_rows = 1;
    c.reduce_sum = 1;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL, "reduce_sum");
    c = config(DPT_TOWERS_PS, 2, 4);
    c.weight_rows = 1;
    CHECK_ERR(dpt_towers_create(&t, &model, &lay, &c), DPT_EINVAL,
              "weight_rows needs an external communicator");
    CHECK(t == NULL);
    /* One participant: a valid engine that trains alone. */
    c = config(DPT_TOWERS_PS, 1, 4);
    c.comm = comm;
    c.weight_rows = 1;
    REQUIRE_OK(dpt_towers_create(&t, &model, &lay, &c));
    dpt_batch_t b = xy(8, data_x, data_y);
    dpt_towers_load_info_t li;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &li));
    dpt_towers_stats_t st;
    CHECK_OK(dpt_towers_optimize(t, 0, 4, 0.01f, &st));
    CHECK(st.rows == 4 && st.grad_norm > 0.0);
    CHECK_OK(dpt_towers_check_replicas(t));
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    dpt_comm_destroy(comm);
    dpt_comm_threads_group_destroy(g);
}

int main(void)
{
    make_data();
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_ps_matches_single_device),
        DPT_TEST(test_ps_fused_update_is_two_pass),
        DPT_TEST(test_ps_mirrored_is_sliced),
        DPT_TEST(test_replicated_matches_single_device),
        DPT_TEST(test_load_rules),
        DPT_TEST(test_sequence_rules),
        DPT_TEST(test_reuse_and_stacks),
        DPT_TEST(test_load_direct),
        DPT_TEST(test_async_learns),
        DPT_TEST(test_user_model_and_gradsets),
        DPT_TEST(test_bad_config),
        DPT_TEST(test_load_ex_rules),
        DPT_TEST(test_comm_equals_replicated_towers),
        DPT_TEST(test_comm_several_devices),
        DPT_TEST(test_comm_weight_rows),
        DPT_TEST(test_comm_failure_refused_everywhere),
        DPT_TEST(test_comm_infinite_norm_refused_everywhere),
        DPT_TEST(test_comm_failed_communicator),
        DPT_TEST(test_comm_config_errors),
    };
    return DPT_TEST_RUN(cases);
}
