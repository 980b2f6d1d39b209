/* Several seeds of one config, side by side (dpt_train_seeds). */
#include "core/io.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "dpt/train.h"
#include "train_internal.h"
#include "core/stopflag.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct dpt__seeds dpt__seeds_t;

/* One run and what its events showed. */
typedef struct dpt__seed_job {
    dpt__seeds_t *all;
    dpt_seed_run_t *out;
    dpt_config_t *cfg;
    double target; /* stop_reward, 0 = none */
    double start;
} dpt__seed_job_t;

struct dpt__seeds {
    pthread_mutex_t mu; /* hands out runs; serializes the caller's events */
    size_t next, n;
    dpt__seed_job_t *jobs;
    const dpt_run_options_t *user;
};

static void dpt__seeds_event(void *ctx, const dpt_run_event_t *ev)
{
    dpt__seed_job_t *j = ctx;
    dpt_seed_run_t *o = j->out;
    if (ev->dir && !o->dir[0])
        snprintf(o->dir, sizeof o->dir, "%s", ev->dir);
    const dpt_train_result_t *r = ev->result;
    if (r) {
        o->iterations = r->iteration;
        o->timesteps = r->timesteps_total;
        /* RL: the return; classification: the test accuracy; regression:
         * the test rmse. */
        o->final = r->reward_mean;
        if (!isfinite(o->final))
            o->final = dpt_train_result_get(r, "test_accuracy");
        if (!isfinite(o->final))
            o->final = dpt_train_result_get(r, "test_rmse");
        if (ev->kind == DPT_RUN_RESULT && j->target != 0.0 && !o->reached &&
            r->episodes_in_window >= 20 && r->reward_mean >= j->target) {
            o->reached = 1;
            o->steps_to_target = r->timesteps_total;
            o->time_to_target_s = dpt_now() - j->start;
        }
    }
    const dpt_run_options_t *u = j->all->user;
    if (u && u->on_event) {
        pthread_mutex_lock(&j->all->mu);
        u->on_event(u->user, ev);
        pthread_mutex_unlock(&j->all->mu);
    }
}

static void dpt__seeds_one(dpt__seed_job_t *j)
{
    const dpt_run_options_t *u = j->all->user;
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.on_event = dpt__seeds_event;
    o.user = j;
    o.stop_flag = u ? u->stop_flag : NULL;
    j->out->started = 1;
    j->start = dpt_now();
    int rc = dpt_train_run(j->cfg, &o, &j->out->reason);
    j->out->time_s = dpt_now() - j->start;
    j->out->status = rc;
    if (rc)
        snprintf(j->out->error, sizeof j->out->error, "%s", dpt_last_error());
}

static void *dpt__seeds_worker(void *arg)
{
    dpt__seeds_t *s = arg;
    const volatile sig_atomic_t *stop = s->user ? s->user->stop_flag : NULL;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        /* After a stop request no run starts: the runs under way stop, the
         * others stay not started. */
        size_t i = s->next < s->n && !dpt__stop_flag_set(stop) ? s->next++ : s->n;
        pthread_mutex_unlock(&s->mu);
        if (i == s->n)
            return NULL;
        dpt__seeds_one(&s->jobs[i]);
    }
}

/* Threads one run of cfg keeps busy. */
static size_t dpt__seeds_run_threads(const dpt_config_t *c)
{
    const dpt__job_t *job = dpt__job_get(dpt_config_job(c));
    return job && job->threads ? job->threads(c) : 1;
}

/* The folder of the runs when the config names none:
 * runs/JOB-LABEL-seeds-TIME (-2, -3, ... when taken). */
static int dpt__seeds_base(const dpt_config_t *c, char *out, size_t n)
{
    char label[128], stamp[32], base[256];
    dpt__run_label(c, label, sizeof label);
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tmv);
    snprintf(base, sizeof base, "runs/%s-%s-seeds-%s", dpt_job_name(dpt_config_job(c)), label,
             stamp);
    int rc = dpt__mkdirs("runs");
    if (rc)
        return rc;
    for (int k = 1; k < 1000; k++) {
        if (k == 1)
            snprintf(out, n, "%s", base);
        else
            snprintf(out, n, "%s-%d", base, k);
        if (dpt__io_mkdir(out, 0777) == 0)
            return DPT_OK;
        if (errno != EEXIST)
            return dpt_error(DPT_EIO, "cannot create directory %s: %s", out, strerror(errno));
    }
    return dpt_error(DPT_EIO, "cannot find a free directory name for %s", base);
}

int dpt_train_seeds(const dpt_config_t *cfg, const uint64_t *seeds, size_t n, size_t parallel,
                    const dpt_run_options_t *options, dpt_seed_run_t *runs)
{
    if (!cfg || !seeds || !runs || n == 0)
        return dpt_error(DPT_EINVAL, "dpt_train_seeds: needs a config and at least one seed");
    if (options && options->resume_dir)
        return dpt_error(DPT_EINVAL,
                         "--seeds starts new runs; resume each run directory on its own");
    if (dpt__mpi_world_size() > 1)
        return dpt_error(DPT_EINVAL, "--seeds does not run under mpirun: start one job per seed");
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < i; k++)
            if (seeds[i] == seeds[k])
                return dpt_error(DPT_EINVAL, "--seeds: seed %llu is given twice",
                                 (unsigned long long)seeds[i]);
    memset(runs, 0, n * sizeof *runs);
    dpt__seeds_t s;
    memset(&s, 0, sizeof s);
    s.n = n;
    s.user = options;
    s.jobs = calloc(n, sizeof *s.jobs);
    dpt_config_t *base = NULL;
    int rc =
        s.jobs ? dpt_config_clone(&base, cfg) : dpt_error(DPT_ENOMEM, "--seeds: out of memory");
    if (!rc)
        rc = dpt_config_finalize(base);
    char dir[PATH_MAX / 2];
    if (!rc) {
        const char *given = dpt_config_str(base, DPT_CFG_output_dir);
        if (given[0]) {
            if (strlen(given) >= sizeof dir)
                rc = dpt_error(DPT_EINVAL, "output_dir is too long");
            else
                snprintf(dir, sizeof dir, "%s", given);
        }
    }
    /* Every run's config before anything is written. */
    for (size_t i = 0; !rc && i < n; i++) {
        char kv[PATH_MAX];
        runs[i].seed = seeds[i];
        runs[i].final = (double)NAN;
        s.jobs[i].all = &s;
        s.jobs[i].out = &runs[i];
        snprintf(kv, sizeof kv, "seed=%llu", (unsigned long long)seeds[i]);
        if ((rc = dpt_config_clone(&s.jobs[i].cfg, base)) != 0 ||
            (rc = dpt_config_set(s.jobs[i].cfg, kv)) != 0 ||
            (rc = dpt_config_finalize(s.jobs[i].cfg)) != 0)
            break;
        if (dpt_config_applies(base, DPT_CFG_stop_reward))
            s.jobs[i].target = dpt_config_float(base, DPT_CFG_stop_reward);
    }
    if (!rc && !dpt_config_str(base, DPT_CFG_output_dir)[0])
        rc = dpt__seeds_base(base, dir, sizeof dir);
    /* A tensorboard_dir is one run's, as output_dir: each seed gets its own
     * folder of it (TensorBoard shows each folder as a run). */
    const char *tb = dpt_config_str(base, DPT_CFG_tensorboard_dir);
    int tb_split = tb[0] && strcmp(tb, "off") != 0;
    for (size_t i = 0; !rc && i < n; i++) {
        char kv[PATH_MAX];
        snprintf(kv, sizeof kv, "output_dir=%s/seed-%llu", dir, (unsigned long long)seeds[i]);
        rc = dpt_config_set(s.jobs[i].cfg, kv);
        if (!rc && tb_split) {
            snprintf(kv, sizeof kv, "tensorboard_dir=%s/seed-%llu", tb,
                     (unsigned long long)seeds[i]);
            rc = dpt_config_set(s.jobs[i].cfg, kv);
        }
        if (!rc)
            rc = dpt_config_finalize(s.jobs[i].cfg);
    }
    if (!rc) {
        size_t threads = dpt__seeds_run_threads(base);
        if (parallel == 0) {
            long cpus = sysconf(_SC_NPROCESSORS_ONLN);
            parallel = cpus > 0 ? (size_t)cpus / (threads ? threads : 1) : 1;
        }
        if (parallel < 1)
            parallel = 1;
        if (parallel > n)
            parallel = n;
        if (pthread_mutex_init(&s.mu, NULL) != 0)
            rc = dpt_error(DPT_ETHREAD, "--seeds: cannot create a mutex");
    }
    if (!rc) {
        pthread_t *th = calloc(parallel, sizeof *th);
        size_t started = 0;
        if (th)
            for (; started + 1 < parallel; started++)
                if (pthread_create(&th[started], NULL, dpt__seeds_worker, &s) != 0)
                    break;
        dpt__seeds_worker(&s); /* this thread runs seeds too */
        for (size_t k = 0; k < started; k++)
            pthread_join(th[k], NULL);
        free(th);
        pthread_mutex_destroy(&s.mu);
        for (size_t i = 0; i < n && !rc; i++)
            if (runs[i].status)
                rc = dpt_error(runs[i].status, "seed %llu: %s", (unsigned long long)runs[i].seed,
                               runs[i].error);
    }
    for (size_t i = 0; s.jobs && i < n; i++)
        dpt_config_destroy(s.jobs[i].cfg);
    free(s.jobs);
    dpt_config_destroy(base);
    return rc;
}

static int dpt__seeds_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void dpt_seeds_summarize(const dpt_seed_run_t *runs, size_t n, dpt_seeds_summary_t *out)
{
    memset(out, 0, sizeof *out);
    out->runs = n;
    out->mean = out->std = out->iqm = (double)NAN;
    out->median_steps_to_target = out->median_time_to_target_s = (double)NAN;
    double *v = n ? malloc(3 * n * sizeof *v) : NULL;
    if (!v)
        return;
    double *steps = v + n, *times = v + 2 * n;
    for (size_t i = 0; i < n; i++) {
        int stopped = runs[i].reason == DPT_RUN_STOPPED;
        out->not_started += runs[i].status == DPT_OK && !runs[i].started;
        out->stopped += runs[i].status == DPT_OK && runs[i].started && stopped;
        if (runs[i].status != DPT_OK || !runs[i].started || stopped)
            continue;
        if (isfinite(runs[i].final))
            v[out->ok++] = runs[i].final;
        if (runs[i].reached) {
            steps[out->reached] = (double)runs[i].steps_to_target;
            times[out->reached++] = runs[i].time_to_target_s;
        }
    }
    if (out->ok) {
        double sum = 0.0, sq = 0.0;
        for (size_t i = 0; i < out->ok; i++)
            sum += v[i];
        out->mean = sum / (double)out->ok;
        for (size_t i = 0; i < out->ok; i++)
            sq += (v[i] - out->mean) * (v[i] - out->mean);
        out->std = out->ok > 1 ? sqrt(sq / (double)(out->ok - 1)) : 0.0;
        qsort(v, out->ok, sizeof *v, dpt__seeds_cmp_double);
        size_t cut = out->ok / 4;
        double mid = 0.0;
        for (size_t i = cut; i < out->ok - cut; i++)
            mid += v[i];
        out->iqm = mid / (double)(out->ok - 2 * cut);
    }
    if (out->reached) {
        out->median_steps_to_target = dpt_median(steps, out->reached);
        out->median_time_to_target_s = dpt_median(times, out->reached);
    }
    free(v);
}
