/*
 * `dpt demo`: trains an MLP to separate two interleaved spirals — a task no
 * linear model can solve — and reports train/test accuracy per epoch. Every
 * random choice (data, init, shuffling) comes from dpt's RNG streams, so the
 * output is the same on every run with the same --seed.
 */
#include "cli.h"
#include "dpt/dpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEMO_HIDDEN 64
#define DEMO_BATCH 128

/* Two spirals: class c, radius r in (0, 1], angle 3.5 pi r + c pi, plus noise. */
static void demo_spirals(dpt_rng_t *rng, size_t n, float *x, int32_t *y)
{
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i & 1);
        double r = 0.05 + 0.95 * dpt_rng_uniform_double(rng);
        double t = 3.5 * 3.14159265358979 * r + c * 3.14159265358979;
        x[2 * i] = (float)(r * cos(t) + 0.02 * dpt_rng_normal(rng));
        x[2 * i + 1] = (float)(r * sin(t) + 0.02 * dpt_rng_normal(rng));
        y[i] = c;
    }
}

static int demo_fail(int rc, const char *what)
{
    fprintf(stderr, "dpt demo: %s: %s: %s\n", what, dpt_strerror(rc), dpt_last_error());
    return DPT_EXIT_FAIL;
}

int dpt_cmd_demo(int argc, char **argv)
{
    unsigned long long seed = 1;
    int epochs = 60, quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: dpt demo [--seed N] [--epochs N] [--quiet]\n\n"
                   "Trains an MLP 2-%d-%d-2 (tanh, softmax cross-entropy, Adam) on two\n"
                   "interleaved spirals and prints accuracy per epoch.\n",
                   DEMO_HIDDEN, DEMO_HIDDEN);
            return DPT_EXIT_OK;
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--epochs") == 0 && i + 1 < argc) {
            epochs = atoi(argv[++i]);
            if (epochs < 1) {
                fprintf(stderr, "dpt demo: --epochs must be >= 1\n");
                return DPT_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else {
            fprintf(stderr, "dpt demo: unknown argument \"%s\" (try --help)\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }

    enum { NTRAIN = 4096, NTEST = 1024 };
    int exit_code = DPT_EXIT_FAIL, rc;
    float *x = malloc((NTRAIN + NTEST) * 2 * sizeof *x);
    int32_t *y = malloc((NTRAIN + NTEST) * sizeof *y);
    float *bx = malloc(DEMO_BATCH * 2 * sizeof *bx);
    int32_t *by = malloc(DEMO_BATCH * sizeof *by);
    size_t *perm = malloc(NTRAIN * sizeof *perm);
    dpt_mlp_t *mlp = NULL;
    dpt_optim_t *opt = NULL;
    dpt_arena_t params = {0}, grads = {0};
    if (!x || !y || !bx || !by || !perm) {
        fprintf(stderr, "dpt demo: out of memory\n");
        goto done;
    }
    dpt_rng_t data_rng, init_rng, shuf_rng;
    dpt_rng_init(&data_rng, seed, 0, 0, DPT_RNG_DATA);
    dpt_rng_init(&init_rng, seed, 0, 0, DPT_RNG_INIT);
    dpt_rng_init(&shuf_rng, seed, 0, 0, DPT_RNG_SHUFFLE);
    demo_spirals(&data_rng, NTRAIN + NTEST, x, y);

    const dpt_layer_spec_t layers[] = {
        {DPT_LAYER_LINEAR, DEMO_HIDDEN, DPT_INIT_DEFAULT, 0.0f},
        {DPT_LAYER_TANH, 0, DPT_INIT_DEFAULT, 0.0f},
        {DPT_LAYER_LINEAR, DEMO_HIDDEN, DPT_INIT_DEFAULT, 0.0f},
        {DPT_LAYER_TANH, 0, DPT_INIT_DEFAULT, 0.0f},
        {DPT_LAYER_LINEAR, 2, DPT_INIT_DEFAULT, 0.0f},
    };
    if ((rc = dpt_mlp_create(&mlp, 2, layers, 5, DPT_LOSS_SOFTMAX_XENT, DEMO_BATCH)) != 0) {
        demo_fail(rc, "creating the model");
        goto done;
    }
    const dpt_vartable_t *vars = dpt_mlp_vars(mlp);
    if ((rc = dpt_arena_init(&params, vars->total)) || (rc = dpt_arena_init(&grads, vars->total))) {
        demo_fail(rc, "allocating parameters");
        goto done;
    }
    dpt_mlp_init_params(mlp, params.data, &init_rng);
    dpt_optim_config_t oc = dpt_optim_defaults(DPT_OPTIM_ADAM);
    if ((rc = dpt_optim_create(&opt, &oc, vars->total)) != 0) {
        demo_fail(rc, "creating the optimizer");
        goto done;
    }
    size_t steps_per_epoch = NTRAIN / DEMO_BATCH;
    dpt_schedule_t sched = {DPT_SCHEDULE_LINEAR, 1e-2f, 1e-3f,
                            (uint64_t)epochs * steps_per_epoch};
    if (!quiet)
        printf("dpt demo: two spirals, %d train / %d test points, MLP 2-%d-%d-2 tanh, "
               "%zu parameters, gemm %s\n",
               NTRAIN, NTEST, DEMO_HIDDEN, DEMO_HIDDEN, vars->total,
               dpt_gemm_describe(dpt_gemm_get_backend()));
    for (size_t i = 0; i < NTRAIN; i++)
        perm[i] = i;
    double t0 = dpt_now();
    dpt_loss_out_t test = {0};
    for (int epoch = 1; epoch <= epochs; epoch++) {
        dpt_rng_shuffle(&shuf_rng, perm, NTRAIN);
        double loss_sum = 0.0, hits = 0.0;
        for (size_t s = 0; s < steps_per_epoch; s++) {
            for (size_t r = 0; r < DEMO_BATCH; r++) {
                size_t src = perm[s * DEMO_BATCH + r];
                bx[2 * r] = x[2 * src];
                bx[2 * r + 1] = x[2 * src + 1];
                by[r] = y[src];
            }
            dpt_batch_t b;
            dpt_batch_init(&b, DEMO_BATCH);
            dpt_batch_add(&b, DPT_MLP_X, DPT_F32, 2, 0, bx);
            dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, by);
            dpt_loss_out_t out;
            dpt_vec_zero(grads.data, grads.count);
            if ((rc = dpt_mlp_loss_grad(mlp, params.data, grads.data, &b, &out)) != 0) {
                demo_fail(rc, "training step");
                goto done;
            }
            float lr = dpt_schedule_lr(&sched, dpt_optim_get_t(opt));
            dpt_optim_step(opt, params.data, grads.data, lr);
            loss_sum += out.loss;
            hits += out.correct;
        }
        dpt_batch_t tb;
        dpt_batch_init(&tb, NTEST);
        dpt_batch_add(&tb, DPT_MLP_X, DPT_F32, 2, 0, x + 2 * NTRAIN);
        dpt_batch_add(&tb, DPT_MLP_LABEL, DPT_I32, 1, 0, y + NTRAIN);
        if ((rc = dpt_mlp_evaluate(mlp, params.data, &tb, &test)) != 0) {
            demo_fail(rc, "evaluation");
            goto done;
        }
        if (!quiet && (epoch % 10 == 0 || epoch == 1 || epoch == epochs))
            printf("epoch %3d  train loss %.4f  train acc %5.1f%%  test loss %.4f  test acc "
                   "%5.1f%%  %.2f s\n",
                   epoch, loss_sum / (double)steps_per_epoch,
                   100.0 * hits / (double)(steps_per_epoch * DEMO_BATCH), test.loss,
                   100.0 * test.correct / (double)NTEST, dpt_now() - t0);
    }
    double secs = dpt_now() - t0;
    printf("dpt demo: test accuracy %.1f%% after %d epochs (%.0f samples/s, %.2f s)\n",
           100.0 * test.correct / (double)NTEST, epochs,
           (double)epochs * (double)(steps_per_epoch * DEMO_BATCH) / secs, secs);
    exit_code = DPT_EXIT_OK;
done:
    dpt_optim_destroy(opt);
    dpt_arena_deinit(&params);
    dpt_arena_deinit(&grads);
    dpt_mlp_destroy(mlp);
    free(x);
    free(y);
    free(bx);
    free(by);
    free(perm);
    return exit_code;
}
