/*
 * `dpt plot RUN_DIR... [--metric M] [--x timesteps|iteration|time]
 *  [--band minmax|std] [-o FILE.svg]`: learning curves of run directories.
 *
 * Runs whose config.conf files differ only in `seed` and bookkeeping keys
 * (output_dir, tensorboard_dir, checkpoint, stop, evaluation and timeout
 * settings: keys that do not change what a run computes) form one group, drawn as the mean of
 * its runs with a band (min to max, or -+ one standard deviation). The runs
 * of a group need not share x values (time, or DD-PPO's steps): each run is
 * interpolated linearly onto the union of the group's x values, and a point
 * averages the runs whose range covers it.
 */
#include "cli.h"
#include "plot.h"

#include "dpt/status.h"
#include "dpt/train.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* X(symbol, name, RL column, RL label, supervised column, supervised label) */
#define PLOT_X_LIST(X)                                                                       \
    X(PLOT_X_TIMESTEPS, "timesteps", "timesteps_total", "env steps (timesteps_total)",       \
      "samples_total", "training samples (samples_total)")                                   \
    X(PLOT_X_ITERATION, "iteration", "training_iteration", "iteration (training_iteration)", \
      "training_iteration", "epoch (training_iteration)")                                    \
    X(PLOT_X_TIME, "time", "time_total_s", "seconds (time_total_s)", "time_total_s",         \
      "seconds (time_total_s)")

/* X(symbol, name, legend text) */
#define PLOT_BAND_LIST(X)                                     \
    X(PLOT_BAND_MINMAX, "minmax", "min to max over the runs") \
    X(PLOT_BAND_STD, "std", "mean -+ one standard deviation (n - 1)")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum plot_x {
#define PLOT__X_ENUM(sym, name, rc, rl, sc, sl) sym,
    PLOT_X_LIST(PLOT__X_ENUM)
#undef PLOT__X_ENUM
    PLOT_X_COUNT
} plot_x_t;

typedef enum plot_band {
#define PLOT__BAND_ENUM(sym, name, text) sym,
    PLOT_BAND_LIST(PLOT__BAND_ENUM)
#undef PLOT__BAND_ENUM
    PLOT_BAND_COUNT
} plot_band_t;
/* clang-format on */

typedef struct plot_x_info {
    const char *name, *rl_column, *rl_label, *sup_column, *sup_label;
} plot_x_info_t;

static const plot_x_info_t plot_xs[PLOT_X_COUNT] = {
#define PLOT__X_INFO(sym, name, rc, rl, sc, sl) [sym] = {name, rc, rl, sc, sl},
    PLOT_X_LIST(PLOT__X_INFO)
#undef PLOT__X_INFO
};

static const char *const plot_band_names[PLOT_BAND_COUNT] = {
#define PLOT__BAND_NAME(sym, name, text) [sym] = name,
    PLOT_BAND_LIST(PLOT__BAND_NAME)
#undef PLOT__BAND_NAME
};

static const char *const plot_band_texts[PLOT_BAND_COUNT] = {
#define PLOT__BAND_TEXT(sym, name, text) [sym] = text,
    PLOT_BAND_LIST(PLOT__BAND_TEXT)
#undef PLOT__BAND_TEXT
};

/* Most points of a curve: a longer union of x values is thinned evenly. */
#define PLOT_MAX_POINTS 600

typedef struct plot_run {
    char dir[PATH_MAX];
    dpt_config_t *cfg;
    dpt_metrics_table_t *m;
    size_t group;
    size_t n;      /* points with a finite x and y */
    double *x, *y; /* n each, by increasing x (one allocation at x) */
} plot_run_t;

typedef struct plot_runs {
    plot_run_t *v;
    size_t n, cap;
} plot_runs_t;

static int plot_usage(FILE *f, int code)
{
    fprintf(f, "usage: dpt plot RUN_DIR... [--metric M] [--x timesteps|iteration|time]\n"
               "                [--band minmax|std] [-o FILE.svg]\n\n"
               "Draws the learning curves of runs as an SVG file (default plot.svg; -o - writes\n"
               "to standard output). Each RUN_DIR is a run directory, or a folder of run\n"
               "directories (the OUTPUT_DIR of `dpt train --seeds`). Runs whose config.conf\n"
               "differ only in seed and bookkeeping keys (output_dir, tensorboard_dir,\n"
               "checkpoint, stop, evaluation and timeout settings) are one group: one color,\n"
               "the mean over its runs as a line and a band of min to max (--band std: mean\n"
               "-+ one standard deviation). --metric names a column of result.jsonl, nested\n"
               "names joined with '/' (default: episode_reward_mean for RL jobs, test_accuracy\n"
               "for supervised).\n"
               "--x: env steps or training samples (default for RL), iterations (default for\n"
               "supervised: epochs) or seconds.\n"
               "Exit codes: 0 written, 1 the file could not be written, 2 bad usage or input.\n");
    return code;
}

/* ---- the runs ------------------------------------------------------------------- */

static int plot_is_file(const char *dir, const char *name)
{
    char path[PATH_MAX];
    struct stat sb;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return 0;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int plot_add_run(plot_runs_t *runs, const char *dir)
{
    if (runs->n == runs->cap) {
        size_t cap = runs->cap ? 2 * runs->cap : 8;
        plot_run_t *v = realloc(runs->v, cap * sizeof *v);
        if (!v) {
            fprintf(stderr, "dpt plot: out of memory\n");
            return DPT_EXIT_FAIL;
        }
        runs->v = v;
        runs->cap = cap;
    }
    plot_run_t *r = &runs->v[runs->n];
    memset(r, 0, sizeof *r);
    if ((size_t)snprintf(r->dir, sizeof r->dir, "%s", dir) >= sizeof r->dir) {
        fprintf(stderr, "dpt plot: %.100s...: path too long\n", dir);
        return DPT_EXIT_USAGE;
    }
    runs->n++;
    return DPT_EXIT_OK;
}

static int plot_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A run directory, or the run directories inside a folder (in name order). */
static int plot_collect(plot_runs_t *runs, const char *arg)
{
    struct stat sb;
    if (stat(arg, &sb) != 0) {
        fprintf(stderr, "dpt plot: %s: %s\n", arg, strerror(errno));
        return DPT_EXIT_USAGE;
    }
    if (!S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "dpt plot: %s is not a directory (give run directories)\n", arg);
        return DPT_EXIT_USAGE;
    }
    if (plot_is_file(arg, "result.jsonl") || plot_is_file(arg, "config.conf"))
        return plot_add_run(runs, arg);
    DIR *d = opendir(arg);
    if (!d) {
        fprintf(stderr, "dpt plot: %s: %s\n", arg, strerror(errno));
        return DPT_EXIT_USAGE;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int code = DPT_EXIT_OK;
    struct dirent *e;
    while (!code && (e = readdir(d)) != NULL) {
        char sub[PATH_MAX];
        if (e->d_name[0] == '.' ||
            (size_t)snprintf(sub, sizeof sub, "%s/%s", arg, e->d_name) >= sizeof sub ||
            !plot_is_file(sub, "result.jsonl"))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                code = DPT_EXIT_FAIL;
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(sub)))
            code = DPT_EXIT_FAIL;
        else
            n++;
    }
    closedir(d);
    if (code == DPT_EXIT_FAIL)
        fprintf(stderr, "dpt plot: out of memory\n");
    if (!code && n == 0) {
        fprintf(stderr, "dpt plot: %s is not a run directory (no result.jsonl) and holds none\n",
                arg);
        code = DPT_EXIT_USAGE;
    }
    if (n)
        qsort(names, n, sizeof *names, plot_cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (!code)
            code = plot_add_run(runs, names[i]);
        free(names[i]);
    }
    free(names);
    return code;
}

/* Reads a run's config.conf and result.jsonl. */
static int plot_load(plot_run_t *r)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.conf", r->dir);
    int rc = dpt_config_create(&r->cfg);
    if (!rc && !plot_is_file(r->dir, "config.conf"))
        rc = dpt_error(DPT_ENOENT, "%s has no config.conf (not a run directory)", r->dir);
    if (!rc)
        rc = dpt_config_load(r->cfg, path);
    if (!rc)
        rc = dpt_metrics_load(&r->m, r->dir);
    if (!rc && r->m->rows == 0)
        rc = dpt_error(DPT_EINVAL, "%s/result.jsonl has no rows yet", r->dir);
    if (rc) {
        fprintf(stderr, "dpt plot: %s\n", dpt_last_error());
        return dpt_cli_exit_code(rc);
    }
    return DPT_EXIT_OK;
}

static void plot_release(plot_runs_t *runs)
{
    for (size_t i = 0; i < runs->n; i++) {
        dpt_config_destroy(runs->v[i].cfg);
        dpt_metrics_destroy(runs->v[i].m);
        free(runs->v[i].x);
    }
    free(runs->v);
}

/* ---- series --------------------------------------------------------------------- */

typedef struct plot_point {
    double x, y;
} plot_point_t;

static int plot_cmp_point(const void *a, const void *b)
{
    double x = ((const plot_point_t *)a)->x, y = ((const plot_point_t *)b)->x;
    return x < y ? -1 : x > y;
}

/* The run's finite (x, y) pairs of the two columns, by increasing x. */
static int plot_series(plot_run_t *r, const double *xs, const double *ys)
{
    size_t rows = r->m->rows;
    plot_point_t *p = malloc(rows * sizeof *p);
    r->x = malloc(2 * rows * sizeof *r->x);
    if (!p || !r->x) {
        free(p);
        fprintf(stderr, "dpt plot: out of memory\n");
        return DPT_EXIT_FAIL;
    }
    r->y = r->x + rows;
    r->n = 0;
    for (size_t i = 0; i < rows; i++)
        if (isfinite(xs[i]) && isfinite(ys[i]))
            p[r->n++] = (plot_point_t){xs[i], ys[i]};
    qsort(p, r->n, sizeof *p, plot_cmp_point);
    for (size_t i = 0; i < r->n; i++) {
        r->x[i] = p[i].x;
        r->y[i] = p[i].y;
    }
    free(p);
    return DPT_EXIT_OK;
}

/* The run's value at x, linear between its points; NAN outside its range. */
static double plot_at(const plot_run_t *r, double x)
{
    if (r->n == 0 || x < r->x[0] || x > r->x[r->n - 1])
        return (double)NAN;
    size_t lo = 0, hi = r->n - 1;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->x[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    if (r->x[lo] == x || hi == lo)
        return r->y[lo];
    if (r->x[hi] == x)
        return r->y[hi];
    double t = (x - r->x[lo]) / (r->x[hi] - r->x[lo]);
    return r->y[lo] + t * (r->y[hi] - r->y[lo]);
}

static int plot_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The curve of group g: mean and band over its runs on the union of their
 * x values. */
static int plot_curve_of(const plot_runs_t *runs, size_t g, plot_band_t band, plot_curve_t *c)
{
    size_t total = 0;
    for (size_t i = 0; i < runs->n; i++)
        if (runs->v[i].group == g)
            total += runs->v[i].n;
    double *all = malloc((total ? total : 1) * sizeof *all);
    if (!all)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < runs->n; i++)
        if (runs->v[i].group == g) {
            memcpy(all + k, runs->v[i].x, runs->v[i].n * sizeof *all);
            k += runs->v[i].n;
        }
    qsort(all, total, sizeof *all, plot_cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < total; i++)
        if (u == 0 || all[i] != all[u - 1])
            all[u++] = all[i];
    size_t n = u > PLOT_MAX_POINTS ? PLOT_MAX_POINTS : u;
    c->x = malloc((n ? 4 * n : 1) * sizeof *c->x);
    if (!c->x) {
        free(all);
        return -1;
    }
    c->mean = c->x + n;
    c->lo = c->x + 2 * n;
    c->hi = c->x + 3 * n;
    c->n = 0;
    for (size_t j = 0; j < n; j++) {
        /* Evenly thinned, first and last kept. */
        double x = all[n == u ? j : (size_t)((double)j * (double)(u - 1) / (double)(n - 1))];
        double sum = 0.0, sq = 0.0, mn = INFINITY, mx = -INFINITY;
        size_t cnt = 0;
        for (size_t i = 0; i < runs->n; i++) {
            if (runs->v[i].group != g)
                continue;
            double y = plot_at(&runs->v[i], x);
            if (isnan(y))
                continue;
            sum += y;
            mn = fmin(mn, y);
            mx = fmax(mx, y);
            cnt++;
        }
        if (!cnt)
            continue;
        double mean = sum / (double)cnt;
        for (size_t i = 0; i < runs->n; i++) {
            double y = runs->v[i].group == g ? plot_at(&runs->v[i], x) : (double)NAN;
            if (!isnan(y))
                sq += (y - mean) * (y - mean);
        }
        double sd = cnt > 1 ? sqrt(sq / (double)(cnt - 1)) : 0.0;
        size_t at = c->n++;
        c->x[at] = x;
        c->mean[at] = mean;
        c->lo[at] = band == PLOT_BAND_STD ? mean - sd : mn;
        c->hi[at] = band == PLOT_BAND_STD ? mean + sd : mx;
    }
    free(all);
    return 0;
}

/* ---- groups and labels ------------------------------------------------------------ */

/* Keys that tell groups apart: all but the seed and the bookkeeping keys.
 * The data's locations are bookkeeping to a resume (the data may move) but
 * other data is another experiment. */
static int plot_key_counts(dpt_config_key_t k)
{
    if (k == DPT_CFG_seed)
        return 0;
    if (!(dpt_config_key_info(k)->flags & DPT_CFG_BOOKKEEPING))
        return 1;
    return k == DPT_CFG_data_dir || k == DPT_CFG_train_csv || k == DPT_CFG_test_csv;
}

static int plot_same_group(const dpt_config_t *a, const dpt_config_t *b)
{
    for (int k = 0; k < DPT_CFG_COUNT; k++)
        if (plot_key_counts((dpt_config_key_t)k) && dpt_config_key_hash(a, (dpt_config_key_t)k) !=
                                                        dpt_config_key_hash(b, (dpt_config_key_t)k))
            return 0;
    return 1;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
plot_append(char *buf, size_t size, const char *fmt, ...)
{
    size_t len = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    if (len < size)
        vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

/* Legend text of group g: the keys whose values differ between groups (or
 * the job and its env or dataset when there is one group), then the seeds. */
static void plot_label(const plot_runs_t *runs, const size_t *first, size_t ngroups, size_t g,
                       char *out, size_t size)
{
    const dpt_config_t *c = runs->v[first[g]].cfg;
    out[0] = '\0';
    for (int k = 0; ngroups > 1 && k < DPT_CFG_COUNT; k++) {
        if (!plot_key_counts((dpt_config_key_t)k))
            continue;
        int differs = 0;
        for (size_t h = 0; h < ngroups && !differs; h++)
            differs = dpt_config_key_hash(runs->v[first[h]].cfg, (dpt_config_key_t)k) !=
                      dpt_config_key_hash(c, (dpt_config_key_t)k);
        if (differs)
            plot_append(out, size, "%s%s=%s", out[0] ? " " : "",
                        dpt_config_key_info((dpt_config_key_t)k)->name,
                        dpt_config_applies(c, (dpt_config_key_t)k)
                            ? dpt_config_str(c, (dpt_config_key_t)k)
                            : "-");
    }
    if (!out[0]) {
        int rl = dpt_config_applies(c, DPT_CFG_env);
        const char *what = dpt_config_str(c, rl ? DPT_CFG_env : DPT_CFG_dataset);
        const char *slash = strrchr(what, '/');
        plot_append(out, size, "%s %s", dpt_job_name(dpt_config_job(c)), slash ? slash + 1 : what);
    }
    size_t n = 0;
    for (size_t i = 0; i < runs->n; i++)
        n += runs->v[i].group == g;
    plot_append(out, size, " (%s ", n > 1 ? "seeds" : "seed");
    size_t shown = 0;
    for (size_t i = 0; i < runs->n; i++) {
        if (runs->v[i].group != g)
            continue;
        if (shown++ == 8) {
            plot_append(out, size, ", ...");
            break;
        }
        plot_append(out, size, "%s%s", shown > 1 ? ", " : "",
                    dpt_config_str(runs->v[i].cfg, DPT_CFG_seed));
    }
    plot_append(out, size, ")");
}

/* ---- the command -------------------------------------------------------------------- */

typedef struct plot_args {
    const char *metric, *out;
    int x;    /* plot_x_t, or -1 for the job's default */
    int band; /* plot_band_t */
} plot_args_t;

static int plot_choice(const char *opt, const char *val, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcmp(val, names[i]) == 0) {
            *out = i;
            return DPT_EXIT_OK;
        }
    fprintf(stderr, "dpt plot: %s must be one of", opt);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s %s", i ? "," : "", names[i]);
    fprintf(stderr, "; got \"%s\"\n", val);
    return DPT_EXIT_USAGE;
}

/* Checks that every run has the metric; else lists the first one's. */
static int plot_check_metric(const plot_runs_t *runs, const char *metric)
{
    for (size_t i = 0; i < runs->n; i++) {
        const dpt_metrics_table_t *m = runs->v[i].m;
        if (dpt_metrics_column(m, metric))
            continue;
        fprintf(stderr, "dpt plot: %s has no metric \"%s\"; its metrics:", runs->v[i].dir, metric);
        for (size_t c = 0; c < m->cols; c++)
            fprintf(stderr, "%s %s", c ? "," : "", m->names[c]);
        fprintf(stderr, "\n");
        return DPT_EXIT_USAGE;
    }
    return DPT_EXIT_OK;
}

static int plot_draw(plot_runs_t *runs, const plot_args_t *a)
{
    dpt_job_t job = dpt_config_job(runs->v[0].cfg);
    int sup = !DPT_JOB_IS_RL(job);
    const char *metric = a->metric ? a->metric : sup ? "test_accuracy" : "episode_reward_mean";
    plot_x_t x = a->x >= 0 ? (plot_x_t)a->x : sup ? PLOT_X_ITERATION : PLOT_X_TIMESTEPS;
    int code = plot_check_metric(runs, metric);
    if (code)
        return code;
    /* Groups, in the order of their first run. */
    size_t *first = malloc(runs->n * sizeof *first), ngroups = 0;
    plot_curve_t *curves = calloc(runs->n, sizeof *curves);
    if (!first || !curves) {
        free(first);
        free(curves);
        fprintf(stderr, "dpt plot: out of memory\n");
        return DPT_EXIT_FAIL;
    }
    for (size_t i = 0; i < runs->n && !code; i++) {
        plot_run_t *r = &runs->v[i];
        size_t g = 0;
        while (g < ngroups && !plot_same_group(runs->v[first[g]].cfg, r->cfg))
            g++;
        if (g == ngroups)
            first[ngroups++] = i;
        r->group = g;
        int rsup = !DPT_JOB_IS_RL(dpt_config_job(r->cfg));
        const char *xcol = rsup ? plot_xs[x].sup_column : plot_xs[x].rl_column;
        const double *xs = dpt_metrics_column(r->m, xcol);
        if (!xs) {
            fprintf(stderr, "dpt plot: %s has no column %s for --x %s\n", r->dir, xcol,
                    plot_xs[x].name);
            code = DPT_EXIT_USAGE;
            break;
        }
        code = plot_series(r, xs, dpt_metrics_column(r->m, metric));
        if (!code && r->n == 0)
            fprintf(stderr, "dpt plot: %s: no value of %s yet; left out\n", r->dir, metric);
    }
    size_t points = 0;
    for (size_t g = 0; g < ngroups && !code; g++) {
        if (plot_curve_of(runs, g, (plot_band_t)a->band, &curves[g]) != 0) {
            fprintf(stderr, "dpt plot: out of memory\n");
            code = DPT_EXIT_FAIL;
            break;
        }
        plot_label(runs, first, ngroups, g, curves[g].label, sizeof curves[g].label);
        points += curves[g].n;
    }
    if (!code && points == 0) {
        fprintf(stderr, "dpt plot: no run has a value of %s yet\n", metric);
        code = DPT_EXIT_USAGE;
    }
    if (!code) {
        plot_chart_t chart = {metric, sup ? plot_xs[x].sup_label : plot_xs[x].rl_label,
                              metric, plot_band_texts[a->band],
                              curves, ngroups};
        int to_stdout = strcmp(a->out, "-") == 0;
        FILE *f = to_stdout ? stdout : fopen(a->out, "w");
        int bad = !f || plot_svg_write(f, &chart) != 0;
        if (f && !to_stdout && fclose(f) != 0)
            bad = 1;
        if (bad) {
            fprintf(stderr, "dpt plot: cannot write %s: %s\n", a->out, strerror(errno));
            code = DPT_EXIT_FAIL;
        } else {
            fprintf(to_stdout ? stderr : stdout, "dpt plot: %s of %zu run%s in %zu group%s -> %s\n",
                    metric, runs->n, runs->n > 1 ? "s" : "", ngroups, ngroups > 1 ? "s" : "",
                    a->out);
        }
    }
    for (size_t g = 0; g < runs->n; g++)
        free(curves[g].x);
    free(curves);
    free(first);
    return code;
}

int dpt_cmd_plot(int argc, char **argv)
{
    plot_args_t a = {NULL, "plot.svg", -1, PLOT_BAND_MINMAX};
    plot_runs_t runs = {0};
    const char *xnames[PLOT_X_COUNT];
    for (int i = 0; i < PLOT_X_COUNT; i++)
        xnames[i] = plot_xs[i].name;
    int code = DPT_EXIT_OK;
    for (int i = 1; i < argc && !code; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            plot_release(&runs);
            return plot_usage(stdout, DPT_EXIT_OK);
        }
        int takes = !strcmp(arg, "--metric") || !strcmp(arg, "--x") || !strcmp(arg, "--band") ||
                    !strcmp(arg, "-o");
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "dpt plot: %s needs a value\n", arg);
            code = DPT_EXIT_USAGE;
        } else if (!strcmp(arg, "--metric")) {
            a.metric = argv[++i];
        } else if (!strcmp(arg, "-o")) {
            a.out = argv[++i];
        } else if (!strcmp(arg, "--x")) {
            code = plot_choice(arg, argv[++i], xnames, PLOT_X_COUNT, &a.x);
        } else if (!strcmp(arg, "--band")) {
            code = plot_choice(arg, argv[++i], plot_band_names, PLOT_BAND_COUNT, &a.band);
        } else if (arg[0] == '-' && arg[1]) {
            fprintf(stderr, "dpt plot: unknown option \"%s\" (try `dpt plot --help`)\n", arg);
            code = DPT_EXIT_USAGE;
        } else {
            code = plot_collect(&runs, arg);
        }
    }
    if (!code && runs.n == 0) {
        fprintf(stderr, "dpt plot: give at least one run directory\n");
        plot_usage(stderr, DPT_EXIT_USAGE);
        code = DPT_EXIT_USAGE;
    }
    for (size_t i = 0; i < runs.n && !code; i++)
        code = plot_load(&runs.v[i]);
    if (!code)
        code = plot_draw(&runs, &a);
    plot_release(&runs);
    return code;
}
