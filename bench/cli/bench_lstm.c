/*
 * dpt bench lstm — forward + backward time of the LSTM layer (dpt/lstm.h).
 *
 * One iteration is what a training step does with the layer: zero the
 * gradient arena, forward over `batch` sequences of `seq` steps (every step
 * valid, a given initial state), backward with a gradient for every step's
 * output, into the weight gradients and dx. With --threads N the batch is
 * split into N contiguous slices, each thread runs its own layer on its
 * slice into its own gradient arena (data parallelism, as towers use it),
 * and thread 0 then sums the arenas in a fixed order; an iteration is timed
 * from waking the other threads to the end of that sum. The threads wait
 * on a condition variable between iterations (no spinning).
 *
 * Every iteration is timed on its own; the configurations (cell sizes) take
 * turns in rounds so that a slow moment of a shared machine hits all of
 * them, and the figures are the median and minimum over all iterations.
 * GFLOP/s counts the GEMMs only: 6 * T * B * 4H * (I + H) per iteration
 * (forward 2x, backward 4x the multiply-adds), from the median time.
 */
#include "../../tools/cli.h"
#include "dpt/dpt.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BL_MAX_HIDDEN 8
#define BL_MAX_THREADS 64
#define BL_ROUNDS 5
#define BL_WARMUP 3

typedef struct bl_args {
    size_t batch, seq, in;
    size_t hidden[BL_MAX_HIDDEN];
    int nhidden;
    int threads;
    double seconds;
    int json;
} bl_args_t;

struct bl_cfg;

/* One thread's share: a layer over its slice, its gradients and buffers. */
typedef struct bl_worker {
    struct bl_cfg *cfg;
    int index;
    size_t batch; /* sequences of this slice */
    dpt_lstm_t *lstm;
    dpt_vartable_t table;
    dpt_arena_t grads;
    float *x, *dx, *h0, *c0, *y, *dy;
    int rc;
    char err[256];
    pthread_t thread;
    int started;
} bl_worker_t;

/* One cell size: the shared parameters, the workers, the timings. */
typedef struct bl_cfg {
    const bl_args_t *a;
    size_t hidden;
    dpt_arena_t params;
    bl_worker_t w[BL_MAX_THREADS];
    /* Thread 0 starts iteration `gen` and waits until `done` threads of the
     * others finished it; `stop` ends them. All under `mu`. */
    pthread_mutex_t mu;
    pthread_cond_t go, finished;
    int sync_ready;
    uint64_t gen;
    int done, stop;
    double fwd_s;  /* thread 0's forward time of the last iteration */
    double *times; /* seconds per iteration */
    double *fwd;   /* seconds per forward (thread 0) */
    size_t n, cap; /* iterations recorded */
} bl_cfg_t;

/* Forward + backward of one worker's slice. */
static int bl_step(bl_worker_t *w)
{
    bl_cfg_t *c = w->cfg;
    const bl_args_t *a = c->a;
    dpt_vec_zero(w->grads.data, w->grads.count);
    dpt_vec_zero(w->dx, a->seq * w->batch * a->in);
    double t0 = dpt_now();
    int rc = dpt_lstm_forward(w->lstm, c->params.data, w->x, a->seq, w->batch, NULL, w->h0, w->c0,
                              w->y, NULL, NULL);
    if (w->index == 0)
        c->fwd_s = dpt_now() - t0;
    if (!rc)
        rc = dpt_lstm_backward(w->lstm, c->params.data, w->grads.data, w->dy, NULL, NULL, w->dx,
                               NULL, NULL);
    if (rc && !w->rc) {
        w->rc = rc;
        snprintf(w->err, sizeof w->err, "%s", dpt_last_error());
    }
    return rc;
}

static void *bl_worker_main(void *arg)
{
    bl_worker_t *w = arg;
    bl_cfg_t *c = w->cfg;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (c->gen == seen && !c->stop)
            pthread_cond_wait(&c->go, &c->mu);
        int stop = c->stop;
        seen = c->gen;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            return NULL;
        bl_step(w);
        pthread_mutex_lock(&c->mu);
        c->done++;
        pthread_cond_signal(&c->finished);
        pthread_mutex_unlock(&c->mu);
    }
}

/* One timed iteration over all workers; 0 or a DPT_E code. */
static int bl_iterate(bl_cfg_t *c, int record)
{
    int nt = c->a->threads;
    double t0 = dpt_now();
    if (nt > 1) {
        pthread_mutex_lock(&c->mu);
        c->gen++;
        c->done = 0;
        pthread_cond_broadcast(&c->go);
        pthread_mutex_unlock(&c->mu);
    }
    bl_step(&c->w[0]);
    if (nt > 1) {
        pthread_mutex_lock(&c->mu);
        while (c->done < nt - 1)
            pthread_cond_wait(&c->finished, &c->mu);
        pthread_mutex_unlock(&c->mu);
        for (int k = 1; k < nt; k++) /* fixed order */
            dpt_vec_axpy(c->w[0].grads.data, c->w[k].grads.data, c->w[0].grads.count, 1.0f);
    }
    double dt = dpt_now() - t0;
    for (int k = 0; k < nt; k++)
        if (c->w[k].rc)
            return dpt_error(c->w[k].rc, "thread %d: %s", k, c->w[k].err);
    if (record) {
        if (c->n == c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 1024;
            double *t = realloc(c->times, cap * sizeof *t);
            if (!t)
                return dpt_error(DPT_ENOMEM, "bench lstm: out of memory for timings");
            c->times = t;
            double *f = realloc(c->fwd, cap * sizeof *f);
            if (!f)
                return dpt_error(DPT_ENOMEM, "bench lstm: out of memory for timings");
            c->fwd = f;
            c->cap = cap;
        }
        c->times[c->n] = dt;
        c->fwd[c->n++] = c->fwd_s;
    }
    return DPT_OK;
}

static void bl_cfg_free(bl_cfg_t *c)
{
    int nt = c->a ? c->a->threads : 0;
    if (c->sync_ready) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->go);
        pthread_mutex_unlock(&c->mu);
        for (int k = 1; k < nt; k++)
            if (c->w[k].started)
                pthread_join(c->w[k].thread, NULL);
        pthread_cond_destroy(&c->go);
        pthread_cond_destroy(&c->finished);
        pthread_mutex_destroy(&c->mu);
    }
    for (int k = 0; k < nt; k++) {
        bl_worker_t *w = &c->w[k];
        dpt_lstm_destroy(w->lstm);
        dpt_vartable_deinit(&w->table);
        dpt_arena_deinit(&w->grads);
        free(w->x), free(w->dx), free(w->h0), free(w->c0), free(w->y), free(w->dy);
    }
    dpt_arena_deinit(&c->params);
    free(c->times);
    free(c->fwd);
}

static float *bl_random(dpt_rng_t *r, size_t n, float lo, float hi)
{
    float *v = malloc(n * sizeof *v);
    if (v)
        dpt_rng_fill_uniform(r, v, n, lo, hi);
    return v;
}

/* Creates the layers, the data and the threads of one cell size. */
static int bl_cfg_setup(bl_cfg_t *c, const bl_args_t *a, size_t hidden)
{
    memset(c, 0, sizeof *c);
    c->a = a;
    c->hidden = hidden;
    const int nt = a->threads;
    dpt_rng_t r;
    dpt_rng_init(&r, 3, 0, (uint32_t)hidden, DPT_RNG_DATA);
    for (int k = 0; k < nt; k++) {
        bl_worker_t *w = &c->w[k];
        w->cfg = c;
        w->index = k;
        w->batch = a->batch / (size_t)nt;
        dpt_vartable_init(&w->table);
        int rc = dpt_lstm_create(&w->lstm, a->in, hidden, w->batch, a->seq, &w->table, "lstm.");
        if (rc)
            return rc;
        if ((rc = dpt_arena_init(&w->grads, w->table.total)) != 0)
            return rc;
        size_t rows = a->seq * w->batch;
        w->x = bl_random(&r, rows * a->in, -1.0f, 1.0f);
        w->dy = bl_random(&r, rows * hidden, -1.0f, 1.0f);
        w->h0 = bl_random(&r, w->batch * hidden, -0.5f, 0.5f);
        w->c0 = bl_random(&r, w->batch * hidden, -0.5f, 0.5f);
        w->dx = malloc(rows * a->in * sizeof *w->dx);
        w->y = malloc(rows * hidden * sizeof *w->y);
        if (!w->x || !w->dy || !w->h0 || !w->c0 || !w->dx || !w->y)
            return dpt_error(DPT_ENOMEM, "bench lstm: out of memory");
    }
    int rc = dpt_arena_init(&c->params, c->w[0].table.total);
    if (rc)
        return rc;
    dpt_rng_t ri;
    dpt_rng_init(&ri, 1, 0, 0, DPT_RNG_INIT);
    dpt_lstm_init_params(c->w[0].lstm, c->params.data, &ri);
    if (nt > 1) {
        if (pthread_mutex_init(&c->mu, NULL) != 0)
            return dpt_error(DPT_ETHREAD, "bench lstm: cannot create a mutex");
        if (pthread_cond_init(&c->go, NULL) != 0) {
            pthread_mutex_destroy(&c->mu);
            return dpt_error(DPT_ETHREAD, "bench lstm: cannot create a condition variable");
        }
        if (pthread_cond_init(&c->finished, NULL) != 0) {
            pthread_cond_destroy(&c->go);
            pthread_mutex_destroy(&c->mu);
            return dpt_error(DPT_ETHREAD, "bench lstm: cannot create a condition variable");
        }
        c->sync_ready = 1;
        for (int k = 1; k < nt; k++) {
            if (pthread_create(&c->w[k].thread, NULL, bl_worker_main, &c->w[k]) != 0)
                return dpt_error(DPT_ETHREAD, "bench lstm: cannot start thread %d", k);
            c->w[k].started = 1;
        }
    }
    for (int i = 0; i < BL_WARMUP; i++)
        if ((rc = bl_iterate(c, 0)) != 0)
            return rc;
    return DPT_OK;
}

static int bl_usage(FILE *f, int code)
{
    fprintf(f,
            "usage: dpt bench lstm [--hidden H]... [--batch B] [--seq T] [--input I]\n"
            "                      [--threads N] [--seconds S] [--gemm portable|cblas] [--json]\n\n"
            "Times forward + backward of the LSTM layer (dpt/lstm.h): B sequences of T steps\n"
            "of I inputs, H cells, gradients of every output, into the weight gradients and\n"
            "dx (default: B 64, T 20, I 16, H 64 and 256, 1 thread, 4 s in all). With N\n"
            "threads each runs its own layer on B/N sequences and the gradients are summed.\n"
            "Cell sizes take turns in %d rounds; the figures are the median and minimum\n"
            "over every iteration, and GFLOP/s = 6 T B 4H (I + H) / median (GEMMs only).\n",
            BL_ROUNDS);
    return code;
}

int dpt_bench_lstm(int argc, char **argv)
{
    bl_args_t a = {64, 20, 16, {0}, 0, 1, 4.0, 0};
    const char *cmd = "bench lstm";
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        uint64_t v = 0;
        if (!strcmp(o, "--help") || !strcmp(o, "-h"))
            return bl_usage(stdout, DPT_EXIT_OK);
        if (!strcmp(o, "--json")) {
            a.json = 1;
        } else if (i + 1 < argc && !strcmp(o, "--hidden")) {
            if (dpt_cli_parse_u64(cmd, o, argv[++i], 1, 4096, &v))
                return DPT_EXIT_USAGE;
            if (a.nhidden == BL_MAX_HIDDEN) {
                fprintf(stderr, "dpt bench lstm: at most %d --hidden sizes\n", BL_MAX_HIDDEN);
                return DPT_EXIT_USAGE;
            }
            a.hidden[a.nhidden++] = (size_t)v;
        } else if (i + 1 < argc && !strcmp(o, "--batch")) {
            if (dpt_cli_parse_u64(cmd, o, argv[++i], 1, 65536, &v))
                return DPT_EXIT_USAGE;
            a.batch = (size_t)v;
        } else if (i + 1 < argc && !strcmp(o, "--seq")) {
            if (dpt_cli_parse_u64(cmd, o, argv[++i], 1, 100000, &v))
                return DPT_EXIT_USAGE;
            a.seq = (size_t)v;
        } else if (i + 1 < argc && !strcmp(o, "--input")) {
            if (dpt_cli_parse_u64(cmd, o, argv[++i], 1, 65536, &v))
                return DPT_EXIT_USAGE;
            a.in = (size_t)v;
        } else if (i + 1 < argc && !strcmp(o, "--threads")) {
            if (dpt_cli_parse_u64(cmd, o, argv[++i], 1, BL_MAX_THREADS, &v))
                return DPT_EXIT_USAGE;
            a.threads = (int)v;
        } else if (i + 1 < argc && !strcmp(o, "--seconds")) {
            char *end;
            a.seconds = strtod(argv[++i], &end);
            if (*end || !(a.seconds > 0) || a.seconds > 3600) {
                fprintf(stderr, "dpt bench lstm: --seconds expects a number in (0, 3600]\n");
                return DPT_EXIT_USAGE;
            }
        } else if (i + 1 < argc && !strcmp(o, "--gemm")) {
            dpt_gemm_backend_t b = DPT_GEMM_BACKEND_COUNT;
            for (int k = 0; k < DPT_GEMM_BACKEND_COUNT; k++)
                if (!strcmp(argv[i + 1], dpt_gemm_backend_name((dpt_gemm_backend_t)k)))
                    b = (dpt_gemm_backend_t)k;
            i++;
            if (b == DPT_GEMM_BACKEND_COUNT || dpt_gemm_set_backend(b) != 0) {
                fprintf(stderr, "dpt bench lstm: --gemm: \"%s\" is not a backend of this build\n",
                        argv[i]);
                return DPT_EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "dpt bench lstm: unknown or incomplete option \"%s\"\n", o);
            return bl_usage(stderr, DPT_EXIT_USAGE);
        }
    }
    if (a.nhidden == 0) {
        a.hidden[0] = 64;
        a.hidden[1] = 256;
        a.nhidden = 2;
    }
    if (a.batch % (size_t)a.threads) {
        fprintf(stderr, "dpt bench lstm: the batch (%zu) must be a multiple of --threads (%d)\n",
                a.batch, a.threads);
        return DPT_EXIT_USAGE;
    }
    const char *gemm = dpt_gemm_describe(dpt_gemm_get_backend());
    if (!a.json) {
        printf("# dpt bench lstm: batch %zu, seq %zu, input %zu, %d thread(s), gemm %s\n", a.batch,
               a.seq, a.in, a.threads, gemm);
        printf("# command: dpt bench");
        for (int i = 0; i < argc; i++)
            printf(" %s", argv[i]);
        printf("\n# ms per forward + backward (median, min over iterations); fwd_ms: the forward\n"
               "# alone; GFLOP/s = 6 T B 4H (I + H) / median (GEMMs only)\n");
        printf("%7s %6s %5s %6s %8s %7s %10s %9s %9s %8s\n", "hidden", "batch", "seq", "input",
               "threads", "iters", "median_ms", "min_ms", "fwd_ms", "gflops");
    }
    bl_cfg_t *cfgs = calloc((size_t)a.nhidden, sizeof *cfgs);
    if (!cfgs) {
        fprintf(stderr, "dpt bench lstm: out of memory\n");
        return DPT_EXIT_FAIL;
    }
    int rc = DPT_EXIT_OK, ncfg = 0;
    for (; ncfg < a.nhidden; ncfg++)
        if (bl_cfg_setup(&cfgs[ncfg], &a, a.hidden[ncfg]) != 0) {
            fprintf(stderr, "dpt bench lstm: hidden %zu: %s\n", a.hidden[ncfg], dpt_last_error());
            ncfg++;
            rc = DPT_EXIT_FAIL;
            goto out;
        }
    double slice = a.seconds / (BL_ROUNDS * a.nhidden);
    for (int round = 0; round < BL_ROUNDS; round++)
        for (int k = 0; k < ncfg; k++) {
            double t0 = dpt_now();
            do {
                if (bl_iterate(&cfgs[k], 1) != 0) {
                    fprintf(stderr, "dpt bench lstm: %s\n", dpt_last_error());
                    rc = DPT_EXIT_FAIL;
                    goto out;
                }
            } while (dpt_now() - t0 < slice);
        }
    for (int k = 0; k < ncfg; k++) {
        bl_cfg_t *c = &cfgs[k];
        double med = dpt_median(c->times, c->n); /* sorts */
        double lo = c->times[0], fwd = dpt_median(c->fwd, c->n);
        double h = (double)c->hidden;
        double flop = 6.0 * (double)a.seq * (double)a.batch * 4.0 * h * ((double)a.in + h);
        double gf = flop / med * 1e-9;
        if (a.json)
            printf("{\"hidden\":%zu,\"batch\":%zu,\"seq\":%zu,\"input\":%zu,\"threads\":%d,"
                   "\"iters\":%zu,\"median_ms\":%.4f,\"min_ms\":%.4f,\"fwd_ms\":%.4f,"
                   "\"gflops\":%.2f,\"gemm\":\"%s\"}\n",
                   c->hidden, a.batch, a.seq, a.in, a.threads, c->n, med * 1e3, lo * 1e3, fwd * 1e3,
                   gf, gemm);
        else
            printf("%7zu %6zu %5zu %6zu %8d %7zu %10.3f %9.3f %9.3f %8.2f\n", c->hidden, a.batch,
                   a.seq, a.in, a.threads, c->n, med * 1e3, lo * 1e3, fwd * 1e3, gf);
    }
out:
    for (int k = 0; k < ncfg; k++)
        bl_cfg_free(&cfgs[k]);
    free(cfgs);
    return rc;
}
