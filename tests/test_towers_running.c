/*
 * towers with running statistics (cfg.running; dpt/towers.h, "Running
 * statistics"): the built-in MLP conv(3,k=3,pad=1) batchnorm relu flatten
 * dense(3) on [2, 4, 4] inputs, softmax cross-entropy.
 *
 * Every step is checked against the towers' own updates computed here: a
 * separate MLP runs each device's rows of the step (training mode, from the
 * weights before the step) and the towers' gradients are combined as the
 * engine does, (g0 + g1) * 0.5f. The running mean and variance then equal
 * the values before plus that average, bit for bit (ps with 1 device, ps
 * mirrored and two-pass, replicated, an external communicator of one
 * participant with and without gradient buckets: with two towers every
 * order of the sum is g0 + g1, and halving is exact), and within 1e-6 in
 * any case. The reported norm is that of the other variables'
 * average only. With a tiny grad_clip the running statistics still move by
 * the whole average while the other variables move by lr * grad_clip. The
 * fused SGD update of ps is never used. async applies a tower's update
 * scaled by async_scale but never clipped (1 device: bit for bit) and runs
 * with 2 devices.
 * A gradient that holds a NaN or an infinity (in the running statistics'
 * update or elsewhere) still refuses the step in every mode, as without
 * running statistics.
 */
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/comm.h"
#include "dpt/nn.h"
#include "dpt/optim.h"
#include "dpt/rng.h"
#include "dpt/towers.h"
#include "parallel/towers_impl.h" /* dpt__towers_mirror_max, params_next */

#include <stdint.h>

enum { IN = 32, OUT = 3, ROWS = 16, M = 4, MAXP = 512 };
static const dpt_shape_t in_shape = {2, 4, 4};
static dpt_layer_spec_t layers[8];
static size_t nlayers;
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

typedef struct run_case {
    const char *what;
    dpt_towers_mode_t mode;
    int devices;
    int sgd;      /* SGD without weight decay (else Adam with it) */
    int two_pass; /* ps: not mirrored */
    int comm;     /* an external communicator of one participant */
    size_t bucket_bytes;
    double clip;
    float async_scale;
    int bitwise; /* the running statistics bit for bit */
} run_case_t;

/* The towers' gradients of one step from weights w: device d's rows
 * [d * rpd + off, + pdb), each by the reference MLP; their mean into avg
 * as the engine combines them. */
static int tower_average(dpt_mlp_t *ref, const float *w, size_t count, int devices, size_t rpd,
                         size_t pdb, size_t off, float *avg)
{
    dpt_model_t model = dpt_mlp_model(ref);
    float g[2][MAXP];
    for (int d = 0; d < devices; d++) {
        size_t row0 = (size_t)d * rpd + off;
        dpt_batch_t b = xy(pdb, data_x + row0 * IN, data_y + row0);
        dpt_loss_out_t out;
        memset(g[d], 0, sizeof g[d]);
        int rc = model.loss_grad(model.ctx, w, g[d], &b, &out);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < count; i++)
        avg[i] = devices == 2 ? (g[0][i] + g[1][i]) * 0.5f : g[0][i];
    return DPT_OK;
}

/* The steps of one pass over the loaded rows, each checked. */
static void run_steps(dpt_towers_t *t, dpt_mlp_t *mlp, dpt_mlp_t *ref, const run_case_t *k)
{
    const dpt_vartable_t *vars = dpt_mlp_vars(mlp);
    size_t count = vars->total;
    const dpt_var_t *rm = &vars->vars[4], *rv = &vars->vars[5];
    REQUIRE(strcmp(rm->name, "1.running_mean") == 0 && strcmp(rv->name, "1.running_var") == 0);
    /* 1 for the elements of the running statistics. */
    unsigned char is_run[MAXP] = {0};
    for (size_t i = rm->offset; i < rm->offset + rm->count; i++)
        is_run[i] = 1;
    for (size_t i = rv->offset; i < rv->offset + rv->count; i++)
        is_run[i] = 1;
    /* The fused SGD update would not add the running updates as they are. */
    CHECK(t->params_next.data == NULL);
    CHECK(t->mirrored == (k->mode == DPT_TOWERS_PS && k->devices > 1 && !k->two_pass && !k->comm));
    if (k->bucket_bytes)
        CHECK(dpt_towers_buckets(t) > 1);
    else
        CHECK(dpt_towers_buckets(t) == 0);
    CHECK(dpt_optim_running_count(dpt_towers_optimizer(t)) == 6);
    /* Initial weights, the running statistics away from 0 and 1. */
    float w[MAXP] = {0}, before[MAXP], after[MAXP], avg[MAXP];
    dpt_rng_t rng;
    dpt_rng_init(&rng, 5, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(mlp, w, &rng);
    for (size_t ch = 0; ch < 3; ch++) {
        w[rm->offset + ch] = 0.1f * (float)ch - 0.1f;
        w[rv->offset + ch] = 0.5f + 0.4f * (float)ch;
    }
    REQUIRE_OK(dpt_towers_set_weights(t, w, count));
    dpt_batch_t b = xy(ROWS, data_x, data_y);
    dpt_towers_load_info_t info;
    REQUIRE_OK(dpt_towers_load(t, 0, &b, &info));
    REQUIRE(info.per_device_batch == M && info.rows_per_device == ROWS / (size_t)k->devices);
    float lr = k->clip > 0.0 ? 1.0f : 0.05f;
    int async2 = k->mode == DPT_TOWERS_ASYNC && k->devices > 1;
    for (size_t off = 0; off < info.rows_per_device; off += info.per_device_batch) {
        REQUIRE_OK(dpt_towers_get_weights(t, before, count));
        REQUIRE_OK(tower_average(ref, before, count, k->devices, info.rows_per_device,
                                 info.per_device_batch, off, avg));
        dpt_towers_stats_t st;
        REQUIRE_OK(dpt_towers_optimize(t, 0, off, lr, &st));
        REQUIRE_OK(dpt_towers_get_weights(t, after, count));
        /* The running statistics: before + the towers' average update,
         * whatever the clip or the learning rate (async: times its scale). */
        float rscale = k->mode != DPT_TOWERS_ASYNC ? 1.0f
                       : k->async_scale > 0.0f     ? k->async_scale
                                                   : 1.0f / (float)k->devices;
        int bits = 1, moved = 0;
        double worst = 0.0, sq = 0.0, sq_all = 0.0, dsq = 0.0;
        for (size_t i = 0; i < count; i++) {
            double a2 = (double)avg[i] * (double)avg[i];
            sq_all += a2;
            if (!is_run[i]) {
                double d = (double)after[i] - (double)before[i];
                sq += a2;
                dsq += d * d;
                continue;
            }
            float want = before[i] + (rscale == 1.0f ? avg[i] : avg[i] * rscale);
            bits &= memcmp(&after[i], &want, sizeof want) == 0;
            moved |= after[i] != before[i];
            worst = fmax(worst, fabs((double)after[i] - (double)want) / fmax(1.0, fabs(want)));
        }
        CHECK(moved && isfinite(worst) && st.grad_norm > 0.0);
        if (async2)
            continue; /* the towers apply their updates as they come */
        if (!(worst < 1e-6) || (k->bitwise && !bits))
            fprintf(stderr, "%s, offset %zu: running statistics %g from the average%s\n", k->what,
                    off, worst, bits ? "" : " (not bitwise)");
        CHECK(worst < 1e-6);
        if (k->bitwise)
            CHECK(bits);
        /* The norm: the other variables' average gradient only. */
        double want_norm = sqrt(sq);
        CHECK_CLOSE(st.grad_norm, want_norm, 1e-9);
        CHECK(sqrt(sq_all) > want_norm * (1.0 + 1e-4)); /* the running updates would count */
        if (k->clip > 0.0) {
            /* Clipped (SGD): the other variables move by lr * clip. */
            CHECK(want_norm > 10.0 * k->clip);
            CHECK_CLOSE(sqrt(dsq) / (double)lr, k->clip, 1e-2 * k->clip);
        } else {
            CHECK(dsq > 0.0);
        }
    }
    printf("towers %s: the running statistics moved by the towers' average update\n", k->what);
}

static void check_case(const run_case_t *k)
{
    dpt_mlp_t *mlp = NULL, *ref = NULL;
    dpt_comm_threads_group_t *group = NULL;
    dpt_comm_t *comm = NULL;
    dpt_towers_t *t = NULL;
    unsigned char running[8] = {0};
    size_t saved = dpt__towers_mirror_max;
    int rc = dpt_mlp_create_shaped(&mlp, in_shape, layers, nlayers, DPT_LOSS_SOFTMAX_XENT, M);
    if (!rc)
        rc = dpt_mlp_create_shaped(&ref, in_shape, layers, nlayers, DPT_LOSS_SOFTMAX_XENT, M);
    CHECK_OK(rc);
    if (!rc) {
        const dpt_vartable_t *vars = dpt_mlp_vars(mlp);
        CHECK(vars->total <= MAXP && vars->nvars == 8);
        CHECK(dpt_mlp_running(mlp, running) == 2 && running[4] && running[5]);
        if (vars->total > MAXP || vars->nvars != 8)
            rc = DPT_EINVAL;
    }
    if (!rc && k->comm) {
        dpt_comm_threads_options_t o;
        dpt_comm_threads_options_init(&o);
        rc = dpt_comm_threads_group_create(&group, 1, &o);
        if (!rc)
            rc = dpt_comm_threads_join(group, 0, &comm);
        CHECK_OK(rc);
    }
    if (!rc) {
        dpt_model_t model = dpt_mlp_model(mlp);
        dpt_towers_config_t c = dpt_towers_defaults();
        c.mode = k->mode;
        c.num_devices = k->devices;
        c.max_per_device_batch_size = M;
        c.max_load_rows = ROWS;
        c.grad_clip = k->clip;
        c.optim = dpt_optim_defaults(k->sgd ? DPT_OPTIM_SGD : DPT_OPTIM_ADAM);
        c.optim.weight_decay = k->sgd ? 0.0f : 0.01f;
        c.async_scale = k->async_scale;
        c.check_every = k->mode == DPT_TOWERS_REPLICATED ? 1 : 0;
        c.running = running;
        c.comm = comm;
        c.bucket_bytes = k->bucket_bytes;
        dpt_batch_t lay = xy(0, NULL, NULL);
        dpt__towers_mirror_max = k->two_pass ? 0 : saved;
        rc = dpt_towers_create(&t, &model, &lay, &c);
        dpt__towers_mirror_max = saved;
        CHECK_OK(rc);
    }
    if (!rc)
        run_steps(t, mlp, ref, k);
    dpt_towers_destroy(t);
    dpt_comm_destroy(comm);
    if (group)
        dpt_comm_threads_group_destroy(group);
    dpt_mlp_destroy(mlp);
    dpt_mlp_destroy(ref);
}

static void test_modes(void)
{
    static const run_case_t cases[] = {
        {"ps, 1 device, adam", DPT_TOWERS_PS, 1, 0, 0, 0, 0, 0.0, 0.0f, 1},
        {"ps mirrored, 2 devices, adam", DPT_TOWERS_PS, 2, 0, 0, 0, 0, 0.0, 0.0f, 1},
        {"ps two-pass, 2 devices, adam", DPT_TOWERS_PS, 2, 0, 1, 0, 0, 0.0, 0.0f, 1},
        {"ps two-pass, 2 devices, sgd (no fused update)", DPT_TOWERS_PS, 2, 1, 1, 0, 0, 0.0, 0.0f,
         1},
        {"replicated, 2 devices, adam", DPT_TOWERS_REPLICATED, 2, 0, 0, 0, 0, 0.0, 0.0f, 1},
        {"comm of 1, ps, 2 devices, adam", DPT_TOWERS_PS, 2, 0, 0, 1, 0, 0.0, 0.0f, 1},
        {"comm of 1, replicated, 2 devices, sgd", DPT_TOWERS_REPLICATED, 2, 1, 0, 1, 0, 0.0, 0.0f,
         1},
        {"comm of 1, ps, 1 device, buckets", DPT_TOWERS_PS, 1, 0, 0, 1, 64, 0.0, 0.0f, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
}

static void test_clip(void)
{
    static const run_case_t cases[] = {
        {"ps, 1 device, clip 1e-3", DPT_TOWERS_PS, 1, 1, 0, 0, 0, 1e-3, 0.0f, 1},
        {"ps mirrored, 2 devices, clip 1e-3", DPT_TOWERS_PS, 2, 1, 0, 0, 0, 1e-3, 0.0f, 1},
        {"ps two-pass, 2 devices, clip 1e-3", DPT_TOWERS_PS, 2, 1, 1, 0, 0, 1e-3, 0.0f, 1},
        {"replicated, 2 devices, clip 1e-3", DPT_TOWERS_REPLICATED, 2, 1, 0, 0, 0, 1e-3, 0.0f, 1},
        {"comm of 1, ps, 2 devices, clip 1e-3", DPT_TOWERS_PS, 2, 1, 0, 1, 0, 1e-3, 0.0f, 1},
        {"comm of 1, ps, 1 device, buckets, clip 1e-3", DPT_TOWERS_PS, 1, 1, 0, 1, 64, 1e-3, 0.0f,
         1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
}

static void test_async(void)
{
    static const run_case_t cases[] = {
        /* One device: the update is the tower's own, not scaled by 0.5. */
        {"async, 1 device, async_scale 0.5", DPT_TOWERS_ASYNC, 1, 1, 0, 0, 0, 0.0, 0.5f, 1},
        {"async, 1 device, clip 1e-3", DPT_TOWERS_ASYNC, 1, 1, 0, 0, 0, 1e-3, 0.0f, 1},
        {"async, 2 devices", DPT_TOWERS_ASYNC, 2, 0, 0, 0, 0, 0.0, 0.0f, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
}

/* ---- a gradient that is not finite ------------------------------------------------ */

/* A model of two variables, w [4] and the running statistics s [2], whose
 * loss is finite but whose gradient holds a NaN (in w, or in s's update)
 * or an infinity. */
typedef struct bad_model {
    dpt_vartable_t vars;
    int where; /* 0: NaN in w, 1: NaN in s, 2: +inf in w and in s */
} bad_model_t;

static int bad_loss_grad(void *ctx, const float *params, float *grads, const dpt_batch_t *batch,
                         dpt_loss_out_t *out)
{
    const bad_model_t *m = ctx;
    (void)params;
    size_t w = m->vars.vars[0].offset, s = m->vars.vars[1].offset;
    for (size_t i = 0; i < 4; i++)
        grads[w + i] += 0.25f;
    grads[s] += 0.5f;
    grads[s + 1] -= 0.5f;
    if (m->where == 0)
        grads[w + 1] = NAN;
    else if (m->where == 1)
        grads[s + 1] = NAN;
    else
        grads[w + 2] = grads[s] = INFINITY;
    out->loss = 1.0;
    out->correct = 0.0;
    out->rows = batch->rows;
    return DPT_OK;
}

static void test_nonfinite_refused(void)
{
    static const struct {
        dpt_towers_mode_t mode;
        int devices, two_pass;
        double clip;
    } modes[] = {{DPT_TOWERS_PS, 1, 0, 0.0},         {DPT_TOWERS_PS, 2, 0, 0.0},
                 {DPT_TOWERS_PS, 2, 1, 0.0},         {DPT_TOWERS_PS, 2, 1, 1.0},
                 {DPT_TOWERS_REPLICATED, 2, 0, 0.0}, {DPT_TOWERS_ASYNC, 1, 0, 0.0}};
    size_t saved = dpt__towers_mirror_max;
    bad_model_t m;
    dpt_vartable_init(&m.vars);
    size_t four = 4, two = 2;
    REQUIRE_OK(dpt_vartable_add(&m.vars, "w", 1, &four, NULL));
    REQUIRE_OK(dpt_vartable_add(&m.vars, "s", 1, &two, NULL));
    const unsigned char running[2] = {0, 1};
    float x[8] = {0}, w0[64], w1[64];
    for (size_t i = 0; i < m.vars.total; i++)
        w0[i] = 0.5f;
    for (int where = 0; where < 3; where++)
        for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++)
            for (int marked = 0; marked < 2; marked++) {
                m.where = where;
                dpt_model_t model = {
                    .vars = &m.vars, .ctx = &m, .max_batch = 4, .loss_grad = bad_loss_grad};
                dpt_towers_config_t c = dpt_towers_defaults();
                c.mode = modes[k].mode;
                c.num_devices = modes[k].devices;
                c.max_per_device_batch_size = 4;
                c.max_load_rows = 8;
                c.grad_clip = modes[k].clip;
                c.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
                c.check_every = 0;
                c.running = marked ? running : NULL;
                dpt_batch_t lay, b;
                dpt_batch_init(&lay, 0);
                dpt_batch_add(&lay, "x", DPT_F32, 1, 0, NULL);
                dpt_batch_init(&b, 8);
                dpt_batch_add(&b, "x", DPT_F32, 1, 0, x);
                dpt__towers_mirror_max = modes[k].two_pass ? 0 : saved;
                dpt_towers_t *t = NULL;
                int rc = dpt_towers_create(&t, &model, &lay, &c);
                dpt__towers_mirror_max = saved;
                REQUIRE_OK(rc);
                dpt_towers_load_info_t info;
                dpt_towers_stats_t st;
                CHECK_OK(dpt_towers_set_weights(t, w0, m.vars.total));
                CHECK_OK(dpt_towers_load(t, 0, &b, &info));
                /* Refused: nothing applied, the running statistics too. */
                rc = dpt_towers_optimize(t, 0, 0, 0.1f, &st);
                CHECK_OK(dpt_towers_get_weights(t, w1, m.vars.total));
                int same = memcmp(w0, w1, m.vars.total * sizeof(float)) == 0;
                if (rc != DPT_ENUMERIC || !same)
                    fprintf(stderr,
                            "mode %s, %d devices%s, clip %g, %s in %s, %s: step returned %s, "
                            "weights %s\n",
                            dpt_towers_mode_name(modes[k].mode), modes[k].devices,
                            modes[k].two_pass ? " (two-pass)" : "", modes[k].clip,
                            where == 2 ? "inf" : "NaN",
                            where == 0   ? "w"
                            : where == 1 ? "s"
                                         : "both",
                            marked ? "s running" : "no marks", dpt_status_name(rc),
                            same ? "unchanged" : "changed");
                CHECK(rc == DPT_ENUMERIC && same);
                dpt_towers_destroy(t);
            }
    dpt_vartable_deinit(&m.vars);
}

int main(void)
{
    if (dpt_network_parse("conv(3,k=3,pad=1) batchnorm relu flatten dense(3)", layers, 8,
                          &nlayers) != 0) {
        fprintf(stderr, "%s\n", dpt_last_error());
        return 1;
    }
    dpt_rng_t r;
    dpt_rng_init(&r, 99, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, data_x, ROWS * IN, -1.0f, 1.0f);
    for (int i = 0; i < ROWS; i++)
        data_y[i] = (int32_t)dpt_rng_below(&r, OUT);
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_modes),
        DPT_TEST(test_clip),
        DPT_TEST(test_async),
        DPT_TEST(test_nonfinite_refused),
    };
    return DPT_TEST_RUN(cases);
}
