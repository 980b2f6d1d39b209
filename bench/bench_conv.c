/*
 * bench_conv — GFLOP/s of the convolution kernels (dpt/conv.h) at the
 * shapes dpt trains, on one thread.
 *
 *     bench_conv [--repeats N] [--min-ms MS] [--path auto|im2col|direct]
 *
 * Shapes: MinAtar's first layer (batch 512, 4x10x10 -> 32 filters 2x2,
 * stride 1, 'same': one extra row and column at the bottom and right) and a
 * LeNet-like Fashion-MNIST network (batch 256, 1x28x28 -> 32 filters 3x3
 * pad 1; then 32x14x14 -> 64 filters 3x3 pad 1). For each, three passes:
 *     fwd  y = conv(x, w) + b
 *     dX   dx += input gradient              (dpt_conv2d_backward, dx only)
 *     dW   dw += weight gradient, db += bias gradient (dw and db only)
 * each counted as 2*N*O*OH*OW*C*kh*kw flops (the bias is not counted). A
 * figure is the median of `repeats` timed runs, each repeating the pass
 * until it lasts at least `min-ms` milliseconds. --path forces the forward
 * pass onto one path (the backward passes always run im2col). The output
 * names the command, the CPU, the GEMM kernel in use and each shape's path.
 */
#include "dpt/arena.h"
#include "dpt/conv.h"
#include "dpt/gemm.h"
#include "dpt/rng.h"
#include "dpt/stats.h"
#include "nn/conv_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    const char *name;
    size_t batch;
    dpt_conv2d_t cv;
} shape_t;

/* Padding of the MinAtar shape is set by dpt_conv2d_same(). */
static shape_t shapes[] = {
    {"minatar 4x10x10->32 k2 same", 512, {4, 10, 10, 32, 2, 2, 1, 1, 0, 0, 0, 0}},
    {"lenet1 1x28x28->32 k3 p1", 256, {1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1}},
    {"lenet2 32x14x14->64 k3 p1", 256, {32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1}},
};

enum { PASS_FWD, PASS_DX, PASS_DW, PASS_COUNT };
static const char *const pass_names[PASS_COUNT] = {"fwd", "dX", "dW"};

typedef struct bufs {
    float *x, *w, *b, *y, *dy, *dx, *dw, *db, *ws;
} bufs_t;

static int run(const shape_t *s, const bufs_t *m, int pass, long calls)
{
    int rc = 0;
    for (long i = 0; i < calls && rc == 0; i++) {
        switch (pass) {
        case PASS_FWD:
            rc = dpt_conv2d_forward(&s->cv, m->y, m->x, m->w, m->b, s->batch, m->ws);
            break;
        case PASS_DX:
            rc = dpt_conv2d_backward(&s->cv, m->dx, NULL, NULL, m->dy, NULL, m->w, s->batch, m->ws);
            break;
        default:
            rc =
                dpt_conv2d_backward(&s->cv, NULL, m->dw, m->db, m->dy, m->x, NULL, s->batch, m->ws);
        }
    }
    return rc;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Seconds per call: the median of `repeats` runs of >= min_s seconds. */
static double time_pass(const shape_t *s, const bufs_t *m, int pass, int repeats, double min_s)
{
    if (run(s, m, pass, 1) != 0)
        return -1.0;
    long calls = 1;
    for (;;) {
        double t0 = dpt_now();
        run(s, m, pass, calls);
        if (dpt_now() - t0 >= min_s)
            break;
        calls *= 2;
    }
    double t[64];
    for (int r = 0; r < repeats; r++) {
        double t0 = dpt_now();
        run(s, m, pass, calls);
        t[r] = (dpt_now() - t0) / (double)calls;
    }
    qsort(t, (size_t)repeats, sizeof t[0], cmp_double);
    return t[repeats / 2];
}

static void cpu_model(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c += c[1] == ' ' ? 2 : 1;
                c[strcspn(c, "\n")] = '\0';
                snprintf(out, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

static float *buf(size_t n, dpt_rng_t *rng)
{
    float *p = dpt_alloc_aligned(n * sizeof(float));
    if (p)
        dpt_rng_fill_uniform(rng, p, n, -1.0f, 1.0f);
    return p;
}

int main(int argc, char **argv)
{
    int repeats = 5;
    double min_ms = 100.0;
    dpt__conv_path_t path = DPT__CONV_AUTO;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (strcmp(argv[i], "--min-ms") == 0 && i + 1 < argc)
            min_ms = atof(argv[++i]);
        else if (strcmp(argv[i], "--path") == 0 && i + 1 < argc) {
            const char *p = argv[++i];
            path = DPT__CONV_PATH_COUNT;
            for (int k = 0; k < DPT__CONV_PATH_COUNT; k++)
                if (strcmp(p, dpt__conv_path_name((dpt__conv_path_t)k)) == 0)
                    path = (dpt__conv_path_t)k;
            if (path == DPT__CONV_PATH_COUNT) {
                fprintf(stderr, "bench_conv: unknown path %s\n", p);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_conv [--repeats N] [--min-ms MS] "
                            "[--path auto|im2col|direct]\n");
            return 2;
        }
    }
    if (repeats < 1 || repeats > 64 || min_ms <= 0.0) {
        fprintf(stderr, "bench_conv: --repeats must be in [1, 64] and --min-ms > 0\n");
        return 2;
    }
    dpt__conv2d_set_path(path);
    char cpu[256], command[1024];
    cpu_model(cpu, sizeof cpu);
    size_t len = 0;
    command[0] = '\0';
    for (int i = 0; i < argc && len < sizeof command; i++)
        len += (size_t)snprintf(command + len, sizeof command - len, "%s%s", i ? " " : "", argv[i]);
    printf("# %s\n# cpu: %s\n# gemm: %s\n", command, cpu,
           dpt_gemm_describe(dpt_gemm_get_backend()));
    printf("# GFLOP/s (2*N*O*OH*OW*C*kh*kw per pass), median of %d runs of >= %g ms, one thread\n",
           repeats, min_ms);
    printf("%-28s %-7s %6s %9s %9s %9s %9s\n", "shape", "path", "images", "fwd", "dX", "dW",
           "dW/fwd");
    dpt_rng_t rng;
    dpt_rng_init(&rng, 1, 0, 0, DPT_RNG_TEST);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        shape_t *s = &shapes[si];
        size_t nws;
        if (si == 0 && dpt_conv2d_same(&s->cv) != 0)
            return 1;
        if (dpt_conv2d_workspace(&s->cv, &nws) != 0)
            return 1;
        size_t oh = dpt_conv2d_out_h(&s->cv), ow = dpt_conv2d_out_w(&s->cv);
        size_t nx = s->batch * s->cv.in_c * s->cv.in_h * s->cv.in_w;
        size_t ny = s->batch * s->cv.out_c * oh * ow;
        size_t nw = s->cv.out_c * s->cv.in_c * s->cv.kh * s->cv.kw;
        bufs_t m = {buf(nx, &rng), buf(nw, &rng),          buf(s->cv.out_c, &rng),
                    buf(ny, &rng), buf(ny, &rng),          buf(nx, &rng),
                    buf(nw, &rng), buf(s->cv.out_c, &rng), buf(nws, &rng)};
        if (!m.x || !m.w || !m.b || !m.y || !m.dy || !m.dx || !m.dw || !m.db || !m.ws) {
            fprintf(stderr, "bench_conv: out of memory\n");
            return 1;
        }
        double flops = 2.0 * (double)ny * (double)(s->cv.in_c * s->cv.kh * s->cv.kw);
        double g[PASS_COUNT];
        for (int p = 0; p < PASS_COUNT; p++) {
            double t = time_pass(s, &m, p, repeats, min_ms * 1e-3);
            if (t <= 0.0) {
                fprintf(stderr, "bench_conv: %s %s failed\n", s->name, pass_names[p]);
                return 1;
            }
            g[p] = flops / t * 1e-9;
        }
        printf("%-28s %-7s %6zu %9.2f %9.2f %9.2f %9.2f\n", s->name,
               dpt__conv_path_name(dpt__conv2d_path(&s->cv)), dpt__conv2d_images(&s->cv),
               g[PASS_FWD], g[PASS_DX], g[PASS_DW], g[PASS_DW] / g[PASS_FWD]);
        dpt_free_aligned(m.x), dpt_free_aligned(m.w), dpt_free_aligned(m.b);
        dpt_free_aligned(m.y), dpt_free_aligned(m.dy), dpt_free_aligned(m.dx);
        dpt_free_aligned(m.dw), dpt_free_aligned(m.db), dpt_free_aligned(m.ws);
    }
    return 0;
}
