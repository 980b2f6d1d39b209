/*
 * dpt bench towers — training throughput of the towers engine.
 *
 * Model: MLP 784-512-512-10 (ReLU, softmax cross-entropy; --hidden sets the
 * hidden layers), plain SGD, on random data, minibatch of `batch` rows
 * split across the devices. For each
 * mode and device count it reports samples/s (median of repeated timed
 * runs), the scaling over one device (median of the per-round ratios), and
 * the fraction of the machine's FLOP limit: training costs ~6 x weights
 * FLOPs per sample (forward 2x, backward 4x); the limit is (devices) x the
 * single-thread GFLOP/s of the largest layer's forward GEMM at the
 * per-device batch, measured in the same run with the GEMM backend dpt uses.
 */
#include "../../tools/cli.h"
#include "dpt/dpt.h"
#include "dpt/towers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BT_IN 784
#define BT_HIDDEN 512 /* default: two hidden layers of this width */
#define BT_OUT 10
#define BT_MAX_HIDDEN 4
#define BT_ROUNDS_DEFAULT 7
#define BT_ROUNDS_MAX 101

typedef struct bt_args {
    size_t batch;
    int max_devices;
    double seconds;
    int rounds;
    int per_round;
    int json;
    int modes[DPT_TOWERS_MODE_COUNT];
    size_t hidden[BT_MAX_HIDDEN];
    int nhidden;
    size_t gemm_k, gemm_n; /* the largest layer: inputs, outputs */
    size_t chunk;          /* --invariant CHUNK: each configuration also in the invariant order */
} bt_args_t;

/* Median of v[0..n) (n <= BT_ROUNDS_MAX); v keeps its order. */
static double bt_median(const double *in, int n)
{
    double v[BT_ROUNDS_MAX];
    memcpy(v, in, (size_t)n * sizeof *v);
    return dpt_median(v, (size_t)n);
}

/* One timing of Y[rows, n] = X[rows, k] W^T (the largest layer's forward)
 * on this thread: GFLOP/s over at least `secs` seconds. */
static double bt_gemm_once(const float *x, const float *w, float *y, size_t rows, size_t k,
                           size_t n, double secs)
{
    double flop = 2.0 * (double)rows * (double)k * (double)n;
    int iters = 0;
    double t0 = dpt_now(), dt;
    do {
        dpt_gemm(0, 1, rows, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
        iters++;
        dt = dpt_now() - t0;
    } while (dt < secs);
    return flop * iters / dt * 1e-9;
}

/* One configuration: an engine with its data loaded, and its timings. */
typedef struct bt_cfg {
    dpt_towers_mode_t mode;
    int devices;
    size_t chunk; /* > 0: the count-invariant reduction, chunks of this many rows */
    dpt_mlp_t *mlp;
    dpt_towers_t *t;
    dpt_towers_load_info_t li;
    size_t step;
    double rates[BT_ROUNDS_MAX], gemm[BT_ROUNDS_MAX];
} bt_cfg_t;

static void bt_cfg_free(bt_cfg_t *c)
{
    dpt_towers_destroy(c->t);
    dpt_mlp_destroy(c->mlp);
}

static int bt_cfg_setup(bt_cfg_t *c, const bt_args_t *a, const float *x, const int32_t *y,
                        size_t rows)
{
    dpt_layer_spec_t layers[2 * BT_MAX_HIDDEN + 1];
    int nl = 0;
    for (int h = 0; h < a->nhidden; h++) {
        layers[nl++] = (dpt_layer_spec_t){
            .kind = DPT_LAYER_LINEAR, .out = a->hidden[h], .init = DPT_INIT_DEFAULT, .gain = 0};
        layers[nl++] = (dpt_layer_spec_t){.kind = DPT_LAYER_RELU, .out = 0, .init = 0, .gain = 0};
    }
    layers[nl++] = (dpt_layer_spec_t){
        .kind = DPT_LAYER_LINEAR, .out = BT_OUT, .init = DPT_INIT_DEFAULT, .gain = 0};
    /* (invariant: the model is called on one chunk at a time) */
    size_t pdb = c->chunk ? c->chunk : a->batch / (size_t)c->devices;
    int rc = dpt_mlp_create(&c->mlp, BT_IN, layers, (size_t)nl, DPT_LOSS_SOFTMAX_XENT, pdb);
    if (rc)
        return rc;
    dpt_model_t model = dpt_mlp_model(c->mlp);
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.mode = c->mode;
    tc.num_devices = c->devices;
    tc.max_per_device_batch_size = pdb;
    tc.max_load_rows = rows;
    tc.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
    tc.chunk_rows = c->chunk;
    tc.global_batch = c->chunk ? a->batch : 0;
    dpt_batch_t lay;
    dpt_batch_init(&lay, 0);
    dpt_batch_add(&lay, DPT_MLP_X, DPT_F32, BT_IN, 0, NULL);
    dpt_batch_add(&lay, DPT_MLP_LABEL, DPT_I32, 1, 0, NULL);
    if ((rc = dpt_towers_create(&c->t, &model, &lay, &tc)) != 0)
        return rc;
    float *w = calloc(model.vars->total, sizeof *w);
    if (!w)
        return dpt_error(DPT_ENOMEM, "bench: out of memory");
    dpt_rng_t r;
    dpt_rng_init(&r, 1, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(c->mlp, w, &r);
    dpt_batch_t b;
    dpt_batch_init(&b, rows);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, BT_IN, 0, (void *)(uintptr_t)x);
    dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, (void *)(uintptr_t)y);
    rc = dpt_towers_set_weights(c->t, w, model.vars->total);
    free(w);
    if (!rc)
        rc = dpt_towers_load(c->t, 0, &b, &c->li);
    for (int i = 0; !rc && i < 5; i++) /* warm-up: first touches, caches */
        rc = dpt_towers_optimize(c->t, 0, (c->step++ % c->li.steps) * c->li.per_device_batch, 0.01f,
                                 NULL);
    return rc;
}

/* Samples/s over about `secs` seconds. */
static int bt_cfg_time(bt_cfg_t *c, double secs, double *rate)
{
    size_t n = 0;
    double t0 = dpt_now(), dt;
    do {
        int rc = dpt_towers_optimize(c->t, 0, (c->step++ % c->li.steps) * c->li.per_device_batch,
                                     0.01f, NULL);
        if (rc)
            return rc;
        n++;
        dt = dpt_now() - t0;
    } while (dt < secs);
    *rate = (double)(n * c->li.minibatch) / dt;
    return DPT_OK;
}

static int bt_usage(FILE *f, int code)
{
    fprintf(f,
            "usage: dpt bench towers [--batch N] [--devices N] [--seconds S] [--rounds R] "
            "[--mode ps|replicated|async]... [--gemm portable|cblas] [--hidden LIST] "
            "[--invariant CHUNK] [--per-round] [--json]\n\n"
            "Trains an MLP %d-%d-%d-%d (ReLU, softmax cross-entropy, SGD) on random data\n"
            "and reports samples/s for 1..N devices per mode (default: batch 256, N = 2,\n"
            "all modes, 5 s per configuration). The configurations take turns for R\n"
            "rounds (default %d, at most %d) of S/R seconds each; figures are medians\n"
            "over the rounds; --per-round also prints every round's samples/s.\n"
            "--hidden sets the hidden layers (comma-separated widths, 1 to %d layers;\n"
            "e.g. 256,128 is the Fashion-MNIST example's MLP).\n"
            "--invariant CHUNK adds every ps and replicated configuration again in the\n"
            "count-invariant reduction order (chunks of CHUNK rows, dpt/towers.h), right\n"
            "after its fast twin in every round; its cost column is the median over the\n"
            "rounds of 1 - (its samples/s / its twin's).\n"
            "Under mpirun, --backend mpi measures instead how much of the gradients'\n"
            "all-reduce the buckets hide behind the backward pass (--backend mpi --help).\n",
            BT_IN, BT_HIDDEN, BT_HIDDEN, BT_OUT, BT_ROUNDS_DEFAULT, BT_ROUNDS_MAX, BT_MAX_HIDDEN);
    return code;
}

int dpt_bench_towers(int argc, char **argv)
{
    bt_args_t a = {256, 2, 5.0, BT_ROUNDS_DEFAULT, 0, 0, {0}, {BT_HIDDEN, BT_HIDDEN}, 2, 0, 0, 0};
    int any_mode = 0;
    /* Across MPI ranks: the overlap of the gradient buckets' all-reduce
     * with the backward pass (bench_towers_mpi.c), its own options. */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--backend")) {
            if (!strcmp(argv[i + 1], "mpi"))
                return dpt__bench_towers_mpi(argc, argv);
            fprintf(stderr, "dpt bench towers: --backend %s: only mpi is known\n", argv[i + 1]);
            return DPT_EXIT_USAGE;
        }
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h"))
            return bt_usage(stdout, DPT_EXIT_OK);
        if (!strcmp(o, "--json")) {
            a.json = 1;
        } else if (!strcmp(o, "--per-round")) {
            a.per_round = 1;
        } else if (i + 1 < argc && !strcmp(o, "--batch")) {
            a.batch = strtoul(argv[++i], NULL, 10);
        } else if (i + 1 < argc && !strcmp(o, "--devices")) {
            a.max_devices = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(o, "--seconds")) {
            a.seconds = atof(argv[++i]);
        } else if (i + 1 < argc && !strcmp(o, "--hidden")) {
            const char *v = argv[++i];
            a.nhidden = 0;
            while (*v) {
                char *end;
                unsigned long h = strtoul(v, &end, 10);
                if (end == v || h < 1 || h > 65536 || a.nhidden == BT_MAX_HIDDEN ||
                    (*end != ',' && *end != '\0')) {
                    fprintf(stderr,
                            "dpt bench towers: --hidden %s: expected 1 to %d widths in "
                            "1..65536, comma-separated\n",
                            argv[i], BT_MAX_HIDDEN);
                    return DPT_EXIT_USAGE;
                }
                a.hidden[a.nhidden++] = h;
                v = *end ? end + 1 : end;
            }
            if (a.nhidden == 0) {
                fprintf(stderr, "dpt bench towers: --hidden needs at least one width\n");
                return DPT_EXIT_USAGE;
            }
        } else if (i + 1 < argc && !strcmp(o, "--invariant")) {
            a.chunk = strtoul(argv[++i], NULL, 10);
            if (a.chunk < 1) {
                fprintf(stderr, "dpt bench towers: --invariant needs a chunk of >= 1 rows\n");
                return DPT_EXIT_USAGE;
            }
        } else if (i + 1 < argc && !strcmp(o, "--rounds")) {
            a.rounds = atoi(argv[++i]);
        } else if (i + 1 < argc && !strcmp(o, "--gemm")) {
            const char *b = argv[++i];
            int rc = !strcmp(b, "cblas") ? dpt_gemm_set_backend(DPT_GEMM_CBLAS)
                     : !strcmp(b, "portable")
                         ? dpt_gemm_set_backend(DPT_GEMM_PORTABLE)
                         : dpt_error(DPT_EINVAL, "unknown GEMM backend \"%s\"", b);
            if (rc) {
                fprintf(stderr, "dpt bench towers: --gemm: %s\n", dpt_last_error());
                return DPT_EXIT_USAGE;
            }
        } else if (i + 1 < argc && !strcmp(o, "--mode")) {
            dpt_towers_mode_t m;
            if (dpt_towers_mode_parse(argv[++i], &m)) {
                fprintf(stderr, "dpt bench towers: %s\n", dpt_last_error());
                return DPT_EXIT_USAGE;
            }
            a.modes[m] = 1;
            any_mode = 1;
        } else {
            fprintf(stderr, "dpt bench towers: unknown or incomplete option \"%s\"\n", o);
            return bt_usage(stderr, DPT_EXIT_USAGE);
        }
    }
    if (a.batch < 1 || a.max_devices < 1 || a.max_devices > 64 || !(a.seconds > 0) ||
        a.batch % (size_t)a.max_devices || a.rounds < 1 || a.rounds > BT_ROUNDS_MAX) {
        fprintf(stderr,
                "dpt bench towers: need batch >= 1 divisible by devices (1..64), "
                "seconds > 0, rounds 1..%d\n",
                BT_ROUNDS_MAX);
        return DPT_EXIT_USAGE;
    }
    if (!any_mode)
        for (int m = 0; m < DPT_TOWERS_MODE_COUNT; m++)
            a.modes[m] = 1;

    size_t rows = a.batch * 8;
    float *x = malloc(rows * BT_IN * sizeof *x);
    int32_t *y = malloc(rows * sizeof *y);
    if (!x || !y) {
        free(x), free(y);
        fprintf(stderr, "dpt bench towers: out of memory\n");
        return DPT_EXIT_FAIL;
    }
    dpt_rng_t r;
    dpt_rng_init(&r, 2, 0, 0, DPT_RNG_DATA);
    dpt_rng_fill_normal(&r, x, rows * BT_IN, 0.0f, 1.0f);
    for (size_t i = 0; i < rows; i++)
        y[i] = (int32_t)dpt_rng_below(&r, BT_OUT);
    double weights = 0.0;
    char shape[128];
    size_t len = (size_t)snprintf(shape, sizeof shape, "%d", BT_IN);
    for (int h = 0; h <= a.nhidden; h++) {
        size_t in = h ? a.hidden[h - 1] : BT_IN, out = h < a.nhidden ? a.hidden[h] : BT_OUT;
        weights += (double)in * (double)out + (double)out;
        if ((double)in * (double)out > (double)a.gemm_k * (double)a.gemm_n) {
            a.gemm_k = in;
            a.gemm_n = out;
        }
        if (len < sizeof shape)
            len += (size_t)snprintf(shape + len, sizeof shape - len, "-%zu", out);
    }
    double flop_per_sample = 6.0 * weights;
    if (!a.json) {
        printf("# dpt bench towers: MLP %s (%.0f weights), batch %zu, gemm %s\n", shape, weights,
               a.batch, dpt_gemm_describe(dpt_gemm_get_backend()));
        printf("# command:");
        for (int i = 0; i < argc; i++)
            printf(" %s", argv[i]);
        printf("\n# scaling: median over rounds of (samples/s / 1-device samples/s of the same\n"
               "# round); med_ratio: ratio of the medians of samples/s\n");
        printf("%-11s %-9s %7s %6s %12s %8s %9s %9s %10s %7s\n", "mode", "order", "devices",
               "batch", "samples/s", "scaling", "med_ratio", "gemm_gf", "flop_frac", "cost");
    }
    /* Every configuration is set up first, then timed in turns: each round
     * measures the GEMM speed and every configuration once, so a slow moment
     * of this shared machine hits all of them, and the medians are compared. */
    int rc = DPT_EXIT_OK;
    bt_cfg_t cfgs[DPT_TOWERS_MODE_COUNT * 64 * 2];
    int ncfg = 0;
    memset(cfgs, 0, sizeof cfgs);
    for (int m = 0; m < DPT_TOWERS_MODE_COUNT; m++)
        for (int d = 1; a.modes[m] && d <= a.max_devices; d++)
            for (int inv = 0; inv < (a.chunk && m != DPT_TOWERS_ASYNC ? 2 : 1); inv++) {
                if (a.batch % (size_t)d)
                    continue;
                bt_cfg_t *c = &cfgs[ncfg++];
                c->mode = (dpt_towers_mode_t)m;
                c->devices = d;
                c->chunk = inv ? a.chunk : 0;
                if (bt_cfg_setup(c, &a, x, y, rows) != 0) {
                    fprintf(stderr, "dpt bench towers: %s with %d devices%s: %s\n",
                            dpt_towers_mode_name(c->mode), d, inv ? " (invariant)" : "",
                            dpt_last_error());
                    rc = DPT_EXIT_FAIL;
                    goto out;
                }
            }
    float *gx = dpt_alloc_aligned(a.batch * a.gemm_k * sizeof(float));
    float *gw = dpt_alloc_aligned(a.gemm_n * a.gemm_k * sizeof(float));
    float *gy = dpt_alloc_aligned(a.batch * a.gemm_n * sizeof(float));
    if (!gx || !gw || !gy) {
        rc = DPT_EXIT_FAIL;
        goto out_gemm;
    }
    dpt_rng_fill_uniform(&r, gx, a.batch * a.gemm_k, -1, 1);
    dpt_rng_fill_uniform(&r, gw, a.gemm_n * a.gemm_k, -1, 1);
    double slice = a.seconds / a.rounds;
    for (int rep = 0; rep < a.rounds; rep++)
        for (int k = 0; k < ncfg; k++) {
            bt_cfg_t *c = &cfgs[k];
            c->gemm[rep] =
                bt_gemm_once(gx, gw, gy, a.batch / (size_t)c->devices, a.gemm_k, a.gemm_n, 0.05);
            if (bt_cfg_time(c, slice, &c->rates[rep]) != 0) {
                fprintf(stderr, "dpt bench towers: %s\n", dpt_last_error());
                rc = DPT_EXIT_FAIL;
                goto out_gemm;
            }
        }
    if (a.per_round && !a.json)
        for (int k = 0; k < ncfg; k++) {
            printf("# rounds, %s, %s, %d device(s), samples/s:", dpt_towers_mode_name(cfgs[k].mode),
                   cfgs[k].chunk ? "invariant" : "fast", cfgs[k].devices);
            for (int q = 0; q < a.rounds; q++)
                printf(" %.0f", cfgs[k].rates[q]);
            printf("\n");
        }
    for (int k = 0; k < ncfg; k++) {
        bt_cfg_t *c = &cfgs[k];
        /* The 1-device configuration of the same mode and order, and (for
         * an invariant one) its fast twin, which ran just before it. */
        const bt_cfg_t *one = NULL, *twin = c->chunk ? &cfgs[k - 1] : NULL;
        for (int j = 0; j < ncfg; j++)
            if (cfgs[j].mode == c->mode && cfgs[j].chunk == c->chunk && cfgs[j].devices == 1)
                one = &cfgs[j];
        /* Scaling from the rounds: in each round this configuration ran
         * right after the 1-device one of its mode, so their ratio is taken
         * round by round (a slow minute of the machine hits both) and the
         * median of those ratios is reported. */
        double ratio[BT_ROUNDS_MAX];
        for (int q = 0; q < a.rounds; q++)
            ratio[q] = one && one->rates[q] > 0 ? c->rates[q] / one->rates[q] : 0.0;
        double scaling = bt_median(ratio, a.rounds);
        double cost = 0.0;
        if (twin) {
            for (int q = 0; q < a.rounds; q++)
                ratio[q] = twin->rates[q] > 0 ? 1.0 - c->rates[q] / twin->rates[q] : 0.0;
            cost = bt_median(ratio, a.rounds);
        }
        const char *order = c->chunk ? "invariant" : "fast";
        char costs[16] = "-";
        if (twin)
            snprintf(costs, sizeof costs, "%.1f%%", 100.0 * cost);

        double sps = bt_median(c->rates, a.rounds), gf = bt_median(c->gemm, a.rounds);
        double frac = gf > 0 ? sps * flop_per_sample / (c->devices * gf * 1e9) : 0.0;
        double of_medians = one ? sps / bt_median(one->rates, a.rounds) : 0.0;
        const char *mode = dpt_towers_mode_name(c->mode);
        if (a.json)
            printf("{\"mode\":\"%s\",\"order\":\"%s\",\"chunk\":%zu,\"devices\":%d,"
                   "\"batch\":%zu,\"samples_per_s\":%.1f,\"scaling\":%.3f,"
                   "\"scaling_of_medians\":%.3f,\"gemm_gflops_per_core\":%.2f,"
                   "\"flop_fraction\":%.4f,\"invariant_cost\":%.4f}\n",
                   mode, order, c->chunk, c->devices, a.batch, sps, scaling, of_medians, gf, frac,
                   cost);
        else
            printf("%-11s %-9s %7d %6zu %12.0f %8.2f %9.2f %9.1f %10.3f %7s\n", mode, order,
                   c->devices, a.batch, sps, scaling, of_medians, gf, frac, costs);
    }
out_gemm:
    dpt_free_aligned(gx);
    dpt_free_aligned(gw);
    dpt_free_aligned(gy);
out:
    for (int k = 0; k < ncfg; k++)
        bt_cfg_free(&cfgs[k]);
    free(x);
    free(y);
    return rc;
}
