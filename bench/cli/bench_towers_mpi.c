/*
 * dpt bench towers --backend mpi — how much of the gradients' all-reduce
 * the towers' gradient buckets hide behind the backward pass, under
 * mpirun (one device per rank; dpt/towers.h, "Gradient buckets").
 *
 * Model: an MLP of L linear layers of W x W (ReLU between them, softmax
 * cross-entropy over W classes; default 8 layers of 1024), plain SGD, no
 * clipping, B rows per rank per step, random data. Four measurements
 * take turns for R rounds of S steps each (so a slow moment of this shared
 * machine hits all of them); each figure is the median over the steps of
 * rank 0's per-step times:
 *   compute    an engine without a communicator: forward, backward, update
 *   allreduce  an all-reduce alone of the step's gradient (all floats + 1)
 *              on the same communicator, every rank at once
 *   step       the engine over MPI with bucket_bytes: buckets all-reduced
 *              by the communication thread during the backward pass
 *   step_one   the same with bucket_bytes 0: one all-reduce after backward
 *   hidden     1 - (step - compute) / allreduce: the share of the
 *              all-reduce that did not add to the step
 */
#include "../../tools/cli.h"
#include "dpt/dpt.h"
#include "dpt/towers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BM_MAX_LAYERS 64

typedef struct bm_args {
    int layers, rounds, steps;
    size_t width, batch, bucket_bytes;
} bm_args_t;

typedef struct bm_engine {
    dpt_mlp_t *mlp;
    dpt_towers_t *t;
    dpt_towers_load_info_t li;
    size_t step;
} bm_engine_t;

static void bm_engine_free(bm_engine_t *e)
{
    dpt_towers_destroy(e->t);
    dpt_mlp_destroy(e->mlp);
}

static int bm_engine_setup(bm_engine_t *e, const bm_args_t *a, dpt_comm_t *comm,
                           size_t bucket_bytes, const dpt_batch_t *data)
{
    dpt_layer_spec_t layers[2 * BM_MAX_LAYERS];
    int nl = 0;
    for (int l = 0; l < a->layers; l++) {
        if (l)
            layers[nl++] =
                (dpt_layer_spec_t){.kind = DPT_LAYER_RELU, .out = 0, .init = 0, .gain = 0};
        layers[nl++] = (dpt_layer_spec_t){
            .kind = DPT_LAYER_LINEAR, .out = a->width, .init = DPT_INIT_DEFAULT, .gain = 0};
    }
    int rc = dpt_mlp_create(&e->mlp, a->width, layers, (size_t)nl, DPT_LOSS_SOFTMAX_XENT, a->batch);
    if (rc)
        return rc;
    dpt_model_t model = dpt_mlp_model(e->mlp);
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.max_per_device_batch_size = a->batch;
    tc.max_load_rows = data->rows;
    tc.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
    tc.check_every = 0;
    tc.comm = comm;
    tc.bucket_bytes = bucket_bytes;
    dpt_batch_t lay = *data;
    lay.rows = 0;
    if ((rc = dpt_towers_create(&e->t, &model, &lay, &tc)) != 0)
        return rc;
    size_t n = model.vars->total;
    float *w = calloc(n, sizeof *w);
    if (!w)
        return dpt_error(DPT_ENOMEM, "bench: out of memory");
    dpt_rng_t r;
    dpt_rng_init(&r, 1, 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(e->mlp, w, &r);
    rc = dpt_towers_set_weights(e->t, w, n);
    free(w);
    if (!rc)
        rc = dpt_towers_load(e->t, 0, data, &e->li);
    for (int i = 0; !rc && i < 2; i++) /* warm-up: first touches, caches */
        rc = dpt_towers_optimize(e->t, 0, (e->step++ % e->li.steps) * e->li.per_device_batch,
                                 0.001f, NULL);
    return rc;
}

/* One timed step of an engine (seconds in *dt). */
static int bm_engine_step(bm_engine_t *e, double *dt)
{
    double t0 = dpt_now();
    int rc = dpt_towers_optimize(e->t, 0, (e->step++ % e->li.steps) * e->li.per_device_batch,
                                 0.001f, NULL);
    *dt = dpt_now() - t0;
    return rc;
}

static int bm_usage(FILE *f, int code)
{
    fprintf(f, "usage: mpirun -np P dpt bench towers --backend mpi [--layers L] [--width W]\n"
               "       [--batch B] [--bucket-bytes N] [--rounds R] [--steps S]\n\n"
               "Under mpirun, one device per rank: an MLP of L linear layers of W x W\n"
               "(default 8 of 1024; ReLU; softmax cross-entropy over W classes; SGD, no\n"
               "clipping), B rows per rank per step (default 64), gradient buckets of N\n"
               "bytes (default 10485760: two 1024 x 1024 layers each, 4 buckets). Prints\n"
               "the median step time with buckets, without the all-reduce (compute only),\n"
               "with one all-reduce after the backward pass, the all-reduce alone, and the\n"
               "hidden share 1 - (step - compute) / allreduce; R rounds (default 5) of S\n"
               "steps (default 4) of each, in turns.\n");
    return code;
}

int dpt__bench_towers_mpi(int argc, char **argv)
{
    bm_args_t a = {8, 5, 4, 1024, 64, 10485760};
    int known = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h"))
            return bm_usage(stdout, DPT_EXIT_OK);
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(o, "--backend"))
            ;
        else if (v && !strcmp(o, "--layers"))
            a.layers = atoi(v);
        else if (v && !strcmp(o, "--width"))
            a.width = strtoul(v, NULL, 10);
        else if (v && !strcmp(o, "--batch"))
            a.batch = strtoul(v, NULL, 10);
        else if (v && !strcmp(o, "--bucket-bytes"))
            a.bucket_bytes = strtoul(v, NULL, 10);
        else if (v && !strcmp(o, "--rounds"))
            a.rounds = atoi(v);
        else if (v && !strcmp(o, "--steps"))
            a.steps = atoi(v);
        else
            known = 0;
        if (!known) {
            fprintf(stderr, "dpt bench towers --backend mpi: unknown or incomplete option \"%s\"\n",
                    o);
            return bm_usage(stderr, DPT_EXIT_USAGE);
        }
        i++;
    }
    if (a.layers < 1 || a.layers > BM_MAX_LAYERS || a.width < 2 || a.width > 65536 || a.batch < 1 ||
        a.rounds < 1 || a.rounds > 1000 || a.steps < 1 || a.steps > 1000) {
        fprintf(stderr,
                "dpt bench towers --backend mpi: need layers 1..%d, width 2..65536, "
                "batch >= 1, rounds and steps 1..1000\n",
                BM_MAX_LAYERS);
        return DPT_EXIT_USAGE;
    }
    int rc = dpt_comm_mpi_init(NULL, NULL, DPT_COMM_MPI_SERIALIZED);
    dpt_comm_t *comm = NULL;
    if (!rc) {
        dpt_comm_mpi_options_t mo;
        dpt_comm_mpi_options_init(&mo);
        rc = dpt_comm_mpi_create(&comm, &mo);
    }
    if (rc) {
        fprintf(stderr, "dpt bench towers: %s: %s\n", dpt_strerror(rc), dpt_last_error());
        dpt_comm_mpi_finalize();
        return DPT_EXIT_FAIL;
    }
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    size_t rows = a.batch * 2, n = (size_t)a.rounds * (size_t)a.steps;
    float *x = malloc(rows * a.width * sizeof *x), *g = NULL;
    int32_t *y = malloc(rows * sizeof *y);
    double *tc = calloc(n, sizeof *tc), *ta = calloc(n, sizeof *ta), *ts = calloc(n, sizeof *ts),
           *t1 = calloc(n, sizeof *t1);
    bm_engine_t ec = {0}, es = {0}, e1 = {0};
    int code = DPT_EXIT_FAIL;
    if (!x || !y || !tc || !ta || !ts || !t1) {
        rc = dpt_error(DPT_ENOMEM, "bench: out of memory");
        goto out;
    }
    dpt_rng_t r;
    dpt_rng_init(&r, 2, (uint64_t)rank, 0, DPT_RNG_DATA);
    dpt_rng_fill_normal(&r, x, rows * a.width, 0.0f, 1.0f);
    for (size_t i = 0; i < rows; i++)
        y[i] = (int32_t)dpt_rng_below(&r, (uint32_t)a.width);
    dpt_batch_t data;
    dpt_batch_init(&data, rows);
    dpt_batch_add(&data, DPT_MLP_X, DPT_F32, a.width, 0, x);
    dpt_batch_add(&data, DPT_MLP_LABEL, DPT_I32, 1, 0, y);
    if ((rc = bm_engine_setup(&ec, &a, NULL, 0, &data)) != 0 ||
        (rc = bm_engine_setup(&es, &a, comm, a.bucket_bytes, &data)) != 0 ||
        (rc = bm_engine_setup(&e1, &a, comm, 0, &data)) != 0)
        goto out;
    size_t count = dpt_mlp_vars(es.mlp)->total + 1;
    if (!(g = dpt_alloc_aligned(count * sizeof *g))) {
        rc = dpt_error(DPT_ENOMEM, "bench: out of memory for %zu floats", count);
        goto out;
    }
    dpt_rng_fill_uniform(&r, g, count, -1.0f, 1.0f);
    for (int round = 0; round < a.rounds; round++) {
        size_t k0 = (size_t)round * (size_t)a.steps;
        if ((rc = dpt_comm_barrier(comm)) != 0)
            goto out;
        for (int s = 0; !rc && s < a.steps; s++)
            rc = bm_engine_step(&ec, &tc[k0 + (size_t)s]);
        if (!rc)
            rc = dpt_comm_barrier(comm);
        for (int s = 0; !rc && s < a.steps; s++) {
            double t0 = dpt_now();
            rc = dpt_comm_allreduce(comm, g, count, DPT_REDUCE_AVG);
            ta[k0 + (size_t)s] = dpt_now() - t0;
        }
        if (!rc)
            rc = dpt_comm_barrier(comm);
        for (int s = 0; !rc && s < a.steps; s++)
            rc = bm_engine_step(&es, &ts[k0 + (size_t)s]);
        if (!rc)
            rc = dpt_comm_barrier(comm);
        for (int s = 0; !rc && s < a.steps; s++)
            rc = bm_engine_step(&e1, &t1[k0 + (size_t)s]);
        if (rc)
            goto out;
    }
    code = DPT_EXIT_OK;
    if (rank == 0) {
        double c = dpt_median(tc, n), ar = dpt_median(ta, n), st = dpt_median(ts, n),
               s1 = dpt_median(t1, n);
        double hidden = ar > 0 ? 1.0 - (st - c) / ar : 0.0;
        printf("# dpt bench towers --backend mpi: %d ranks, MLP of %d layers of %zu x %zu "
               "(%zu floats), batch %zu per rank, SGD, grad_clip 0, gemm %s\n",
               size, a.layers, a.width, a.width, count - 1, a.batch,
               dpt_gemm_describe(dpt_gemm_get_backend()));
        printf("# command:");
        for (int i = 0; i < argc; i++)
            printf(" %s", argv[i]);
        printf("\n# bucket_bytes %zu: %zu buckets; medians over %d rounds x %d steps of rank 0\n",
               a.bucket_bytes, dpt_towers_buckets(es.t), a.rounds, a.steps);
        printf("step (buckets)           %9.2f ms\n", st * 1e3);
        printf("compute-only step        %9.2f ms\n", c * 1e3);
        printf("allreduce-only           %9.2f ms\n", ar * 1e3);
        printf("step (one all-reduce)    %9.2f ms\n", s1 * 1e3);
        printf("hidden share             %9.1f %%   (1 - (step - compute) / allreduce)\n",
               hidden * 100.0);
        printf("hidden share, one        %9.1f %%   (the same with one all-reduce)\n",
               ar > 0 ? (1.0 - (s1 - c) / ar) * 100.0 : 0.0);
    }
out:
    if (rc) {
        fprintf(stderr, "dpt bench towers: rank %d: %s: %s\n", rank, dpt_strerror(rc),
                dpt_last_error());
        code = DPT_EXIT_FAIL;
    }
    bm_engine_free(&ec);
    bm_engine_free(&es);
    bm_engine_free(&e1);
    dpt_free_aligned(g);
    free(x), free(y), free(tc), free(ta), free(ts), free(t1);
    dpt_comm_destroy(comm);
    if (rc)
        dpt_comm_mpi_abort(DPT_EXIT_FAIL);
    dpt_comm_mpi_finalize();
    return code;
}
