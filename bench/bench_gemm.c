/*
 * bench_gemm — GFLOP/s of each GEMM backend built in, at the shapes dpt
 * trains, on one thread.
 *
 *     bench_gemm [--json] [--repeats N] [--min-ms MS] [--net NAME] [--batch B]
 *
 * For a dense layer `in -> out` with weights W [out, in] and a batch of B rows,
 * the three products of a training step are
 *     fwd  Y  = X · W^T      m = B,   n = out, k = in   (beta = 0)
 *     dW   dW += dY^T · X    m = out, n = in,  k = B    (beta = 1)
 *     dX   dX = dY · W       m = B,   n = in,  k = out  (beta = 0)
 * Each figure is 2*m*n*k flops per call divided by the time per call, the
 * median of `repeats` timed runs, each run repeating the call until it lasts
 * at least `min-ms` milliseconds; the backends alternate run by run. A last
 * table adds up, per network and batch, the time of all its products (the
 * GEMM time of one training step). Plain text by default; --json prints one
 * JSON object per line (a header object, one per shape, the load average at
 * the end, one per step total). --net and --batch keep only the layers of one
 * network (mlp, ppo) and one batch size, for quick before/after comparisons.
 */
#include "dpt/gemm.h"
#include "dpt/stats.h"
#include "dpt_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer {
    const char *net;
    size_t in, out;
    size_t batches[3]; /* zero-terminated when shorter */
} layer_t;

/* The MLP on MNIST-sized inputs and the PPO policy/value network. */
static const layer_t layers[] = {
    {"mlp", 784, 512, {64, 128, 256}}, {"mlp", 512, 512, {64, 128, 256}},
    {"mlp", 512, 10, {64, 128, 256}},  {"ppo", 4, 64, {128, 512, 0}},
    {"ppo", 64, 64, {128, 512, 0}},    {"ppo", 64, 2, {128, 512, 0}},
};

typedef struct product {
    const char *name;
    int ta, tb;
    size_t m, n, k, lda, ldb, ldc;
    float beta;
} product_t;

static product_t make_product(int which, size_t batch, size_t in, size_t out)
{
    switch (which) {
    case 0: return (product_t){"fwd", 0, 1, batch, out, in, in, in, out, 0.0f};
    case 1: return (product_t){"dW", 1, 0, out, in, batch, out, in, in, 1.0f};
    default: return (product_t){"dX", 0, 0, batch, in, out, out, in, in, 0.0f};
    }
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

#define MAX_REPEATS 101

static void call(dpt_gemm_backend_t backend, const product_t *p, const float *a, const float *b,
                 float *c, long calls)
{
    for (long i = 0; i < calls; i++)
        dpt_gemm_ex(backend, p->ta, p->tb, p->m, p->n, p->k, 1.0f, a, p->lda, b, p->ldb, p->beta, c,
                    p->ldc);
}

/* Number of calls that make a run of at least min_s seconds, after a warm-up
 * call (which allocates the workspace and faults in the pages). */
static long calibrate(dpt_gemm_backend_t backend, const product_t *p, const float *a,
                      const float *b, float *c, double min_s)
{
    call(backend, p, a, b, c, 1);
    long calls = 1;
    for (;;) {
        double t0 = dpt_now();
        call(backend, p, a, b, c, calls);
        double dt = dpt_now() - t0;
        if (dt >= min_s)
            return calls;
        long next = dt > 0.0 ? (long)(1.2 * min_s / dt * (double)calls) + 1 : calls * 10;
        calls = next > calls * 10 ? calls * 10 : next;
    }
}

/* Median GFLOP/s of each backend over `repeats` runs of at least min_s
 * seconds. The backends take turns run by run, so that a slow phase of the
 * machine (other jobs, frequency changes) hits all of them alike. */
static void measure(const dpt_gemm_backend_t *backends, int nb, const product_t *p, const float *a,
                    const float *b, float *c, int repeats, double min_s, double *gflops)
{
    double flops = 2.0 * (double)p->m * (double)p->n * (double)p->k;
    long calls[DPT_GEMM_BACKEND_COUNT];
    double rates[DPT_GEMM_BACKEND_COUNT][MAX_REPEATS];
    for (int i = 0; i < nb; i++)
        calls[i] = calibrate(backends[i], p, a, b, c, min_s);
    for (int r = 0; r < repeats; r++) {
        for (int i = 0; i < nb; i++) {
            double t0 = dpt_now();
            call(backends[i], p, a, b, c, calls[i]);
            double dt = dpt_now() - t0;
            rates[i][r] = flops * (double)calls[i] / dt * 1e-9;
        }
    }
    for (int i = 0; i < nb; i++) {
        qsort(rates[i], (size_t)repeats, sizeof(double), cmp_double);
        gflops[i] = repeats % 2 ? rates[i][repeats / 2]
                                : 0.5 * (rates[i][repeats / 2 - 1] + rates[i][repeats / 2]);
    }
}

static float *random_matrix(size_t count, unsigned *seed)
{
    float *x = malloc((count ? count : 1) * sizeof(float));
    if (!x)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = (float)(*seed >> 8) / 16777216.0f - 0.5f;
    }
    return x;
}

/* Writes s as a JSON string (the describe strings are plain ASCII). */
static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        if ((unsigned char)*s >= 0x20)
            putchar(*s);
    }
    putchar('"');
}

/* The 1-minute load average from /proc/loadavg, or -1 where there is none:
 * printed with the figures because other jobs on the machine lower them. */
static double load_average(void)
{
    double load = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1)
            load = -1.0;
        fclose(f);
    }
    return load;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_gemm [--json] [--repeats N] [--min-ms MS] [--net NAME] [--batch B]\n"
            "  --json        one JSON object per line\n"
            "  --repeats N   timed runs per figure, median reported (default 7, max %d)\n"
            "  --min-ms MS   minimum length of one timed run (default 50)\n"
            "  --net NAME    only this network's layers (mlp or ppo)\n"
            "  --batch B     only this batch size\n",
            MAX_REPEATS);
}

int main(int argc, char **argv)
{
    int json = 0, repeats = 7;
    double min_ms = 50.0;
    const char *only_net = NULL;
    long only_batch = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
            repeats = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--min-ms") == 0 && i + 1 < argc) {
            min_ms = atof(argv[++i]);
        } else if (strcmp(argv[i], "--net") == 0 && i + 1 < argc) {
            only_net = argv[++i];
        } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            only_batch = atol(argv[++i]);
            if (only_batch <= 0) {
                usage(stderr);
                return 2;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (repeats < 1 || repeats > MAX_REPEATS || !(min_ms > 0.0)) {
        usage(stderr);
        return 2;
    }

    size_t matched = 0;
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++)
        for (size_t bi = 0; bi < 3 && layers[l].batches[bi]; bi++)
            matched += (!only_net || strcmp(only_net, layers[l].net) == 0) &&
                       (!only_batch || layers[l].batches[bi] == (size_t)only_batch);
    if (matched == 0) {
        char b[32] = "any";
        if (only_batch)
            snprintf(b, sizeof b, "%ld", only_batch);
        fprintf(stderr, "bench_gemm: no layer of net %s at batch %s (nets: mlp, ppo)\n",
                only_net ? only_net : "any", b);
        return 2;
    }

    /* The command that made the figures, with the one environment variable
     * that changes them (OpenBLAS' kernel choice). */
    char command[1024];
    size_t len = 0;
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    command[0] = '\0';
    if (coretype)
        len += (size_t)snprintf(command, sizeof command, "OPENBLAS_CORETYPE=%s ", coretype);
    for (int i = 0; i < argc && len < sizeof command; i++)
        len += (size_t)snprintf(command + len, sizeof command - len, "%s%s", i ? " " : "", argv[i]);

    dpt_gemm_backend_t backends[DPT_GEMM_BACKEND_COUNT];
    int nb = 0;
    for (int be = 0; be < DPT_GEMM_BACKEND_COUNT; be++) {
        if (be == DPT_GEMM_CBLAS && !DPT_HAVE_CBLAS)
            continue;
        backends[nb++] = (dpt_gemm_backend_t)be;
    }

    if (json) {
        printf("{\"command\":");
        json_string(command);
        printf(",\"repeats\":%d,\"min_ms\":%g,\"default\":\"%s\",\"load_start\":%.2f", repeats,
               min_ms, dpt_gemm_backend_name(dpt_gemm_get_backend()), load_average());
        for (int i = 0; i < nb; i++) {
            printf(",\"%s\":", dpt_gemm_backend_name(backends[i]));
            json_string(dpt_gemm_describe(backends[i]));
        }
        printf("}\n");
    } else {
        printf("# %s\n", command);
        for (int i = 0; i < nb; i++)
            printf("# %-8s %s\n", dpt_gemm_backend_name(backends[i]),
                   dpt_gemm_describe(backends[i]));
        printf("# default backend: %s\n", dpt_gemm_backend_name(dpt_gemm_get_backend()));
        printf("# load average (1 min) at start: %.2f\n", load_average());
        printf("# GFLOP/s (2*m*n*k per call), median of %d runs of >= %g ms, one thread;\n"
               "# ratio = portable speed / cblas speed (> 1: portable is faster)\n",
               repeats, min_ms);
        printf("%-4s %-8s %5s %-3s %5s %5s %5s", "net", "layer", "batch", "op", "m", "n", "k");
        for (int i = 0; i < nb; i++)
            printf(" %9s", dpt_gemm_backend_name(backends[i]));
        if (nb == 2)
            printf(" %9s", "ratio");
        printf("\n");
    }
    fflush(stdout);

    /* Time of all products of all layers of a network at one batch size:
     * what one training step spends in GEMM (the first layer's dX included,
     * although a trainer can skip it). */
    typedef struct step_total {
        const char *net;
        size_t batch;
        double seconds[DPT_GEMM_BACKEND_COUNT];
    } step_total_t;
    step_total_t totals[16];
    size_t ntotals = 0;

    unsigned seed = 12345u;
    for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
        const layer_t *ly = &layers[l];
        if (only_net && strcmp(only_net, ly->net) != 0)
            continue;
        for (size_t bi = 0; bi < 3 && ly->batches[bi]; bi++) {
            if (only_batch && ly->batches[bi] != (size_t)only_batch)
                continue;
            for (int which = 0; which < 3; which++) {
                product_t p = make_product(which, ly->batches[bi], ly->in, ly->out);
                float *a = random_matrix((p.ta ? p.k : p.m) * p.lda, &seed);
                float *b = random_matrix((p.tb ? p.n : p.k) * p.ldb, &seed);
                float *c = random_matrix(p.m * p.ldc, &seed);
                if (!a || !b || !c) {
                    fprintf(stderr, "bench_gemm: out of memory\n");
                    return 1;
                }
                double rate[DPT_GEMM_BACKEND_COUNT];
                measure(backends, nb, &p, a, b, c, repeats, min_ms * 1e-3, rate);
                step_total_t *tot = NULL;
                for (size_t t = 0; t < ntotals; t++)
                    if (strcmp(totals[t].net, ly->net) == 0 && totals[t].batch == ly->batches[bi])
                        tot = &totals[t];
                if (!tot && ntotals < sizeof totals / sizeof totals[0]) {
                    tot = &totals[ntotals++];
                    memset(tot, 0, sizeof *tot);
                    tot->net = ly->net;
                    tot->batch = ly->batches[bi];
                }
                for (int i = 0; tot && i < nb; i++)
                    tot->seconds[i] += 2e-9 * (double)p.m * (double)p.n * (double)p.k / rate[i];
                char name[32];
                snprintf(name, sizeof name, "%zux%zu", ly->in, ly->out);
                if (json) {
                    printf("{\"net\":\"%s\",\"layer\":\"%s\",\"batch\":%zu,\"op\":\"%s\","
                           "\"m\":%zu,\"n\":%zu,\"k\":%zu",
                           ly->net, name, ly->batches[bi], p.name, p.m, p.n, p.k);
                    for (int i = 0; i < nb; i++)
                        printf(",\"%s\":%.3f", dpt_gemm_backend_name(backends[i]), rate[i]);
                    printf("}\n");
                } else {
                    printf("%-4s %-8s %5zu %-3s %5zu %5zu %5zu", ly->net, name, ly->batches[bi],
                           p.name, p.m, p.n, p.k);
                    for (int i = 0; i < nb; i++)
                        printf(" %9.2f", rate[i]);
                    if (nb == 2)
                        printf(" %9.2f", rate[0] / rate[1]);
                    printf("\n");
                }
                fflush(stdout);
                free(a);
                free(b);
                free(c);
            }
        }
    }
    if (json)
        printf("{\"load_end\":%.2f}\n", load_average());
    else
        printf("# load average (1 min) at end: %.2f\n", load_average());
    if (!json)
        printf("# GEMM time of one training step (every product of every layer), microseconds\n"
               "%-4s %5s",
               "net", "batch");
    for (int i = 0; !json && i < nb; i++)
        printf(" %9s", dpt_gemm_backend_name(backends[i]));
    if (!json)
        printf(nb == 2 ? " %9s\n" : "\n", "ratio");
    for (size_t t = 0; t < ntotals; t++) {
        if (json) {
            printf("{\"net\":\"%s\",\"batch\":%zu,\"op\":\"step\"", totals[t].net, totals[t].batch);
            for (int i = 0; i < nb; i++)
                printf(",\"%s_us\":%.2f", dpt_gemm_backend_name(backends[i]),
                       totals[t].seconds[i] * 1e6);
            printf("}\n");
        } else {
            printf("%-4s %5zu", totals[t].net, totals[t].batch);
            for (int i = 0; i < nb; i++)
                printf(" %9.1f", totals[t].seconds[i] * 1e6);
            if (nb == 2)
                printf(" %9.2f", totals[t].seconds[1] / totals[t].seconds[0]);
            printf("\n");
        }
    }
    return 0;
}
