/*
 * Runs (dpt/train.h): the loop every job shares. Run directories, config.conf,
 * metrics, checkpoints and their rotation, resume, stop conditions, stop
 * requests, and the start of a job under mpirun.
 *
 * Order of a start, so that a bad input never costs saved data: the config
 * is validated (and, under MPI, compared across ranks), the trainer is
 * built (datasets read, envs created), and only then is the run directory
 * touched. A fresh run writes config.conf once, atomically; a resumed run
 * never rewrites it.
 */
#define _GNU_SOURCE /* strdup */
#include "core/io.h"
#include "dpt/comm.h"
#include "dpt/dpt.h"
#include "dpt/gemm.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "dpt/train.h"
#include "train_internal.h"

#include <ctype.h>
#include <pthread.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const dpt__reason_texts[DPT_RUN_REASON_COUNT] = {
#define DPT__REASON_TEXT(sym, text) [sym] = text,
    DPT_RUN_REASON_LIST(DPT__REASON_TEXT)
#undef DPT__REASON_TEXT
};

const char *dpt_run_reason_text(dpt_run_reason_t reason)
{
    return (unsigned)reason < DPT_RUN_REASON_COUNT ? dpt__reason_texts[reason] : "unknown";
}

/* Longest run directory name: paths of its files must fit in PATH_MAX. */
#define DPT__DIR_MAX 3072

typedef struct dpt__run {
    const dpt_run_options_t *o;
    dpt_config_t *cfg;
    char dir[DPT__DIR_MAX];
    int rank, world;
    int created;         /* rank 0 made the directory in this start */
    uint64_t iterations; /* iterations done by this process */
    dpt_comm_t *mpi;     /* one handle per process, world > 1 */
    int solo;            /* sync_replicas: rank 0 runs the loop alone (the other
                          * ranks are its workers, outside the loop) */
    dpt_trainer_t *t;
    dpt__metrics_t metrics;
    int metrics_open;
    double time_offset, start;
    uint64_t ts_start;
    double best;    /* best evaluation return so far (-inf: none) */
    char note[192]; /* the last iteration note reported */
} dpt__run_t;

static void dpt__emit(dpt__run_t *r, dpt_run_event_t *ev)
{
    if (r->rank != 0 || !r->o || !r->o->on_event)
        return;
    ev->dir = r->dir;
    ev->elapsed_s = dpt_now() - r->start;
    r->o->on_event(r->o->user, ev);
}

static void dpt__note(dpt__run_t *r, const char *text)
{
    dpt_run_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DPT_RUN_NOTE;
    ev.text = text;
    dpt__emit(r, &ev);
}

/* ---- checkpoints in a run directory -------------------------------------------- */

static void dpt__ckpt_path(const char *dir, uint64_t it, char *out, size_t n)
{
    snprintf(out, n, "%s/checkpoints/checkpoint-%08llu.safetensors", dir, (unsigned long long)it);
}

static int dpt__cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The checkpoint iterations in dir/checkpoints, newest first (*its is
 * malloc'ed; NULL with 0 when there are none). */
static int dpt__list_checkpoints(const char *dir, uint64_t **its, size_t *n)
{
    *its = NULL;
    *n = 0;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/checkpoints", dir);
    DIR *d = opendir(path);
    if (!d)
        return DPT_OK;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long long it;
        int used = 0;
        if (sscanf(e->d_name, "checkpoint-%llu.safetensors%n", &it, &used) != 1 ||
            e->d_name[used] != '\0')
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *nb = realloc(*its, cap * sizeof *nb);
            if (!nb) {
                closedir(d);
                free(*its);
                *its = NULL;
                *n = 0;
                return dpt_error(DPT_ENOMEM, "cannot list %s", path);
            }
            *its = nb;
        }
        (*its)[(*n)++] = it;
    }
    closedir(d);
    if (*n)
        qsort(*its, *n, sizeof **its, dpt__cmp_desc);
    return DPT_OK;
}

/* Loads the newest checkpoint of dir that validates; corrupt newer ones
 * are reported through note (may be NULL) and skipped. *st is NULL when
 * there is none. */
int dpt__find_checkpoint(const char *dir, dpt_safetensors_t **st,
                         void (*note)(void *ctx, const char *text), void *ctx)
{
    *st = NULL;
    uint64_t *its;
    size_t n;
    int rc = dpt__list_checkpoints(dir, &its, &n);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX], msg[PATH_MAX + 600];
        dpt__ckpt_path(dir, its[i], path, sizeof path);
        rc = dpt_safetensors_load(st, path);
        if (rc == 0)
            break;
        if (rc == DPT_ENOMEM)
            break;
        snprintf(msg, sizeof msg, "skipping checkpoint %s: %s", path, dpt_last_error());
        if (note)
            note(ctx, msg);
        rc = DPT_OK;
    }
    free(its);
    return rc;
}

static void dpt__note_cb(void *ctx, const char *text)
{
    dpt__note(ctx, text);
}

/* Keeps the keep newest of this run's checkpoints up to `current`; never
 * touches a checkpoint numbered above it (one this run has not written). */
static int dpt__rotate(const char *dir, uint64_t current, uint64_t keep)
{
    uint64_t *its;
    size_t n;
    int rc = dpt__list_checkpoints(dir, &its, &n);
    if (rc)
        return rc;
    uint64_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (its[i] > current)
            continue;
        if (++kept <= keep)
            continue;
        char path[PATH_MAX];
        dpt__ckpt_path(dir, its[i], path, sizeof path);
        if (unlink(path) != 0 && errno != ENOENT) {
            rc = dpt_error(DPT_EIO, "cannot remove old checkpoint %s: %s", path, strerror(errno));
            break;
        }
    }
    free(its);
    return rc;
}

/* ---- the run directory ------------------------------------------------------------ */

/* 1 when dir has no entry but . and .. (or does not exist). */
static int dpt__dir_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT;
    struct dirent *e;
    int empty = 1;
    /* What a start killed before writing config.conf leaves (a temporary)
     * does not count; a fresh start removes it. */
    while (empty && (e = readdir(d)) != NULL)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || strstr(e->d_name, ".tmp-");
    closedir(d);
    return empty;
}

/* The name part of runs/JOB-NAME-TIME: the env (a plug-in's file name
 * without .so) or the dataset. */
void dpt__run_label(const dpt_config_t *c, char *out, size_t n)
{
    const char *s = dpt_config_applies(c, DPT_CFG_env) ? dpt_config_str(c, DPT_CFG_env)
                                                       : dpt_config_str(c, DPT_CFG_dataset);
    const char *slash = strrchr(s, '/');
    if (slash)
        s = slash + 1;
    snprintf(out, n, "%s", s);
    char *so = strstr(out, ".so");
    if (so && so != out)
        *so = '\0';
    for (char *p = out; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.'))
            *p = '_';
}

/* Rank 0: makes the directory of a fresh run. An explicit output_dir must be
 * missing or empty; the default is a new runs/JOB-LABEL-TIMESTAMP, made with
 * mkdir so two runs started in the same second get -2, -3, ... */
static int dpt__make_run_dir(dpt__run_t *r)
{
    const char *given = dpt_config_str(r->cfg, DPT_CFG_output_dir);
    if (given[0]) {
        if (strlen(given) >= sizeof r->dir)
            return dpt_error(DPT_EINVAL, "output_dir is longer than %d characters",
                             DPT__DIR_MAX - 1);
        snprintf(r->dir, sizeof r->dir, "%s", given);
        struct stat sb;
        if (stat(given, &sb) == 0) {
            if (!S_ISDIR(sb.st_mode))
                return dpt_error(DPT_EINVAL, "output_dir %s exists and is not a directory", given);
            if (!dpt__dir_empty(given))
                return dpt_error(DPT_EINVAL,
                                 "output_dir %s is not empty: continue that run with "
                                 "`dpt train --resume %s`, or choose another output_dir",
                                 given, given);
            dpt__remove_temporaries(given);
            return DPT_OK;
        }
        int rc = dpt__mkdirs(given);
        if (!rc)
            r->created = 1;
        return rc;
    }
    char label[128], stamp[32], base[256];
    dpt__run_label(r->cfg, label, sizeof label);
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tmv);
    snprintf(base, sizeof base, "runs/%s-%s-%s", dpt_job_name(dpt_config_job(r->cfg)), label,
             stamp);
    int rc = dpt__mkdirs("runs");
    if (rc)
        return rc;
    for (int k = 1; k < 1000; k++) {
        if (k == 1)
            snprintf(r->dir, sizeof r->dir, "%s", base);
        else
            snprintf(r->dir, sizeof r->dir, "%s-%d", base, k);
        if (dpt__io_mkdir(r->dir, 0777) == 0) {
            r->created = 1;
            return DPT_OK;
        }
        if (errno != EEXIST)
            return dpt_error(DPT_EIO, "cannot create run directory %s: %s", r->dir,
                             strerror(errno));
    }
    return dpt_error(DPT_EIO, "cannot find a free run directory name for %s", base);
}

/* Undoes a fresh start that failed before its first iteration: only what
 * this start wrote, and the directory if this start made it. */
static void dpt__remove_fresh(dpt__run_t *r)
{
    static const char *const files[] = {"config.conf", "result.jsonl", "progress.csv"};
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", r->dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/checkpoints", r->dir);
    rmdir(path);
    if (r->created)
        rmdir(r->dir);
}

/* ---- across ranks ------------------------------------------------------------------ */

/* The things every rank must agree on, as 64-bit hashes: each key but
 * output_dir and tensorboard_dir (rank 0 alone writes), the env_config
 * entries, then the build and the launch. */
enum {
    DPT__AGREE_ENV_CONFIG = DPT_CFG_COUNT,
    DPT__AGREE_VERSION,
    DPT__AGREE_GEMM,
    DPT__AGREE_RESUME,
    DPT__AGREE_COUNT
};

static uint64_t dpt__hash_str(const char *s)
{
    return dpt_fnv1a64(DPT_FNV1A64_INIT, s, strlen(s));
}

static const char *dpt__agree_name(int i)
{
    switch (i) {
    case DPT__AGREE_ENV_CONFIG: return "env_config";
    case DPT__AGREE_VERSION: return "dpt version";
    case DPT__AGREE_GEMM: return "GEMM kernel";
    case DPT__AGREE_RESUME: return "--resume directory";
    default: return dpt_config_key_info((dpt_config_key_t)i)->name;
    }
}

/* All-gathers the hashes (16 bits per float, exact) and fails on every rank
 * when any differs from rank 0's; rank 0's message names each key and rank. */
static int dpt__agree(dpt__run_t *r, const char *resume_dir)
{
    size_t nf = (size_t)DPT__AGREE_COUNT * 4;
    float *mine = malloc(nf * sizeof *mine);
    float *all = malloc(nf * (size_t)r->world * sizeof *all);
    if (!mine || !all) {
        free(mine);
        free(all);
        return dpt_error(DPT_ENOMEM, "cannot allocate the config comparison");
    }
    for (int i = 0; i < DPT__AGREE_COUNT; i++) {
        uint64_t h;
        if (i == DPT__AGREE_VERSION)
            h = dpt__hash_str(dpt_version());
        else if (i == DPT__AGREE_GEMM)
            h = dpt__hash_str(dpt_gemm_describe(dpt_gemm_get_backend()));
        else if (i == DPT__AGREE_RESUME)
            h = dpt__hash_str(resume_dir ? resume_dir : "");
        else if (i == DPT__AGREE_ENV_CONFIG)
            h = dpt__config_env_hash(r->cfg);
        else
            h = i == DPT_CFG_output_dir || i == DPT_CFG_tensorboard_dir
                    ? 0
                    : dpt_config_key_hash(r->cfg, (dpt_config_key_t)i);
        for (int q = 0; q < 4; q++)
            mine[4 * i + q] = (float)((h >> (16 * q)) & 0xffff);
    }
    int rc = dpt_comm_allgather(r->mpi, mine, nf, all);
    if (rc) {
        free(mine);
        free(all);
        return rc;
    }
    char msg[1024] = "";
    int differ = 0;
    for (int i = 0; i < DPT__AGREE_COUNT; i++)
        for (int q = 1; q < r->world; q++)
            if (memcmp(all + 4 * i, all + (size_t)q * nf + 4 * i, 4 * sizeof(float)) != 0) {
                size_t len = strlen(msg);
                if (differ++ < 12)
                    snprintf(msg + len, sizeof msg - len, "%s%s (rank %d)", len ? ", " : "",
                             dpt__agree_name(i), q);
            }
    free(mine);
    free(all);
    if (differ && r->rank != 0)
        return dpt_error(DPT_EINVAL,
                         "rank %d: the ranks were started with different "
                         "configurations (rank 0 names them)",
                         r->rank);
    if (differ)
        return dpt_error(DPT_EINVAL,
                         "the ranks were started with different configurations; "
                         "differing from rank 0: %s%s",
                         msg, differ > 12 ? ", ..." : "");
    return DPT_OK;
}

/* 1 when any rank asks to stop (the flag is read once per iteration, so
 * every rank stops after the same iteration). */
static int dpt__stop_requested(dpt__run_t *r, int *rc)
{
    float f = (r->o && r->o->stop_flag && *r->o->stop_flag) ? 1.0f : 0.0f;
    *rc = DPT_OK;
    if (r->mpi && !r->solo)
        *rc = dpt_comm_allreduce(r->mpi, &f, 1, DPT_REDUCE_SUM);
    return f > 0.0f;
}

/* ---- stop conditions ------------------------------------------------------------- */

/* Why the run should stop after an iteration with these numbers (0 = go on). */
static int dpt__should_stop(const dpt_config_t *c, uint64_t iteration, int finished, double reward,
                            size_t episodes, dpt_run_reason_t *why)
{
    uint64_t stop_iters = (uint64_t)dpt_config_int(c, DPT_CFG_stop_iters);
    if (finished) {
        *why = DPT_RUN_DONE;
        return 1;
    }
    if (stop_iters && iteration >= stop_iters) {
        *why = DPT_RUN_STOP_ITERS;
        return 1;
    }
    if (dpt_config_applies(c, DPT_CFG_stop_reward)) {
        double target = dpt_config_float(c, DPT_CFG_stop_reward);
        /* "Solved": the window of recent episodes is full enough to trust. */
        if (target != 0.0 && episodes >= 20 && reward >= target) {
            *why = DPT_RUN_STOP_REWARD;
            return 1;
        }
    }
    return 0;
}

/* Whether a checkpoint's counters already complete the job as configured
 * now (a raised total_timesteps or epochs reopens it). */
static int dpt__job_complete(const dpt_config_t *c, uint64_t iteration, uint64_t timesteps)
{
    if (dpt_config_applies(c, DPT_CFG_total_timesteps))
        return timesteps >= (uint64_t)dpt_config_int(c, DPT_CFG_total_timesteps);
    if (dpt_config_applies(c, DPT_CFG_epochs))
        return iteration >= (uint64_t)dpt_config_int(c, DPT_CFG_epochs);
    return 0;
}

/* ---- checkpoint of the run ------------------------------------------------------- */

static int dpt__save(dpt__run_t *r, const dpt_train_result_t *res, double time_total,
                     const dpt_run_reason_t *why, int best)
{
    dpt_safetensors_writer_t *w = NULL;
    int rc = DPT_OK;
    if (r->rank == 0 && (rc = dpt_safetensors_writer_create(&w)) != 0)
        return rc;
    /* Collective: every rank takes part, rank 0 writes. */
    rc = dpt_trainer_checkpoint(r->t, w);
    if (rc || r->rank != 0)
        goto out;
    char buf[64], path[PATH_MAX];
    snprintf(buf, sizeof buf, "%.17g", time_total);
    if ((rc = dpt_safetensors_set_meta(w, "time_total_s", buf)) != 0)
        goto out;
    snprintf(buf, sizeof buf, "%.17g", isfinite(res->reward_mean) ? res->reward_mean : 0.0);
    if ((rc = dpt_safetensors_set_meta(w, "episode_reward_mean", buf)) != 0 ||
        (rc = dpt_safetensors_set_meta_u64(w, "episodes_in_window", res->episodes_in_window)) !=
            0 ||
        (rc = dpt_safetensors_set_meta(w, "stop_reason", why ? dpt_run_reason_text(*why) : "")) !=
            0)
        goto out;
    if (isfinite(r->best)) {
        snprintf(buf, sizeof buf, "%.17g", r->best);
        if ((rc = dpt_safetensors_set_meta(w, "evaluation_best_return", buf)) != 0)
            goto out;
    }
    snprintf(path, sizeof path, "%s/checkpoints", r->dir);
    if ((rc = dpt__mkdirs(path)) != 0)
        goto out;
    dpt__ckpt_path(r->dir, res->iteration, path, sizeof path);
    if ((rc = dpt_safetensors_save(w, path)) != 0)
        goto out;
    if (best) {
        snprintf(path, sizeof path, "%s/checkpoints/best.safetensors", r->dir);
        if ((rc = dpt_safetensors_save(w, path)) != 0)
            goto out;
    }
    rc = dpt__rotate(r->dir, res->iteration,
                     (uint64_t)dpt_config_int(r->cfg, DPT_CFG_keep_checkpoints));
out:
    dpt_safetensors_writer_destroy(w);
    return rc;
}

/* ---- evaluation during training ------------------------------------------------------ */

/* Every evaluation_interval iterations: the greedy policy over
 * evaluation_episodes episodes, on every rank (the same weights and seed
 * give the same figures, so the ranks agree on the best without a message).
 * Adds evaluation/... metrics to res (NAN between evaluations, so the CSV
 * columns stay fixed); *improved when it beat every earlier one. */
static int dpt__evaluate_during(dpt__run_t *r, dpt_train_result_t *res, int *improved)
{
    *improved = 0;
    if (!dpt_config_applies(r->cfg, DPT_CFG_evaluation_interval))
        return DPT_OK;
    uint64_t every = (uint64_t)dpt_config_int(r->cfg, DPT_CFG_evaluation_interval);
    if (every == 0)
        return DPT_OK;
    dpt_eval_result_t ev;
    ev.mean_return = ev.mean_length = (double)NAN;
    ev.count = 0;
    if (res->iteration % every == 0) {
        int rc =
            dpt_trainer_evaluate(r->t, (size_t)dpt_config_int(r->cfg, DPT_CFG_evaluation_episodes),
                                 (uint64_t)dpt_config_int(r->cfg, DPT_CFG_seed), &ev);
        if (rc)
            return rc;
        if (!isfinite(r->best) || ev.mean_return > r->best) {
            r->best = ev.mean_return;
            *improved = 1;
        }
    }
    dpt_train_result_add(res, "evaluation/episode_reward_mean", ev.mean_return);
    dpt_train_result_add(res, "evaluation/episode_len_mean", ev.mean_length);
    dpt_train_result_add(res, "evaluation/episodes", ev.count ? (double)ev.count : (double)NAN);
    dpt_train_result_add(res, "evaluation/best_episode_reward_mean", r->best);
    return DPT_OK;
}

/* ---- resume -------------------------------------------------------------------------- */

/* Appends "env_config.NAME (x, now y)" to msg for each entry whose value
 * differs between `a` and `b` ("(none)" where one has no such entry); counts
 * them in *n, with dpt__compare's other differences (the first 8 listed). */
static void dpt__compare_env(const dpt_config_t *a, const dpt_config_t *b, char *msg, size_t size,
                             int *n)
{
    /* The names of a, then those only b has. */
    for (int pass = 0; pass < 2; pass++) {
        const dpt_config_t *from = pass ? b : a;
        for (size_t i = 0; i < dpt_config_env_count(from); i++) {
            const char *name = dpt_config_env_name(from, i);
            const char *x = dpt_config_env_get(a, name), *y = dpt_config_env_get(b, name);
            if ((pass && x) || (x && y && strcmp(x, y) == 0))
                continue;
            size_t len = strlen(msg);
            if ((*n)++ < 8)
                snprintf(msg + len, size - len, "%s" DPT_CONFIG_ENV_PREFIX "%s (%.60s, now %.60s)",
                         len ? "; " : "", name, x ? x : "(none)", y ? y : "(none)");
        }
    }
}

/* Keys of `a` and `b` whose values differ, limited to those without
 * `allowed` flags, and the env_config entries that differ; DPT_EINVAL listing
 * them. */
static int dpt__compare(const dpt_config_t *a, const dpt_config_t *b, unsigned allowed,
                        const char *what)
{
    char msg[1024] = "";
    int n = 0;
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        const dpt_config_key_info_t *ki = dpt_config_key_info((dpt_config_key_t)k);
        if ((ki->flags & allowed) || !dpt_config_applies(a, (dpt_config_key_t)k))
            continue;
        const char *x = dpt_config_str(a, (dpt_config_key_t)k);
        const char *y = dpt_config_str(b, (dpt_config_key_t)k);
        if (strcmp(x, y) == 0)
            continue;
        size_t len = strlen(msg);
        if (n++ < 8)
            snprintf(msg + len, sizeof msg - len, "%s%s (%.60s, now %.60s)", len ? "; " : "",
                     ki->name, x, y);
    }
    if (dpt_config_applies(a, DPT_CFG_env))
        dpt__compare_env(a, b, msg, sizeof msg, &n);
    if (n)
        return dpt_error(DPT_EINVAL,
                         "%s: %s%s. Only stop conditions, checkpoint and "
                         "evaluation settings, timeouts and data locations may change when a "
                         "run is resumed",
                         what, msg, n > 8 ? "; ..." : "");
    return DPT_OK;
}

/* Appends one line per changed key to dir/overrides.log. */
static int dpt__record_overrides(const dpt__run_t *r, const dpt_config_t *saved, uint64_t iteration)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/overrides.log", r->dir);
    FILE *f = NULL;
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        if (!dpt_config_applies(r->cfg, (dpt_config_key_t)k))
            continue;
        const char *was = dpt_config_str(saved, (dpt_config_key_t)k);
        const char *now = dpt_config_str(r->cfg, (dpt_config_key_t)k);
        if (strcmp(was, now) == 0)
            continue;
        if (!f && !(f = dpt__io_fopen(path, "a")))
            return dpt_error(DPT_EIO, "cannot write %s: %s", path, strerror(errno));
        fprintf(f, "resumed after iteration %llu: %s = %s (was %s)\n",
                (unsigned long long)iteration, dpt_config_key_info((dpt_config_key_t)k)->name, now,
                was);
    }
    if (!f)
        return DPT_OK;
    int bad = dpt__io_fflush(f) != 0 || dpt__io_fsync(fileno(f)) != 0;
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad)
        return dpt_error(DPT_EIO, "cannot write %s: %s", path, strerror(e));
    return DPT_OK;
}

/* Builds r->cfg for a resume: the run's config.conf, checked against the
 * checkpoint's own copy, with the overrides of `given` (resumable keys
 * only). *st is the checkpoint to restore. */
static int dpt__resume_config(dpt__run_t *r, const char *dir, const dpt_config_t *given,
                              dpt_safetensors_t **st, dpt_config_t **saved_out)
{
    dpt_config_t *saved = NULL, *ck = NULL;
    char path[PATH_MAX];
    int rc;
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    snprintf(path, sizeof path, "%s/config.conf", dir);
    if ((rc = dpt_config_create(&saved)) != 0)
        return rc;
    /* dpt 0.1 wrote every key of every job under this first line; its runs
     * carry no run metadata and cannot continue here. */
    FILE *f = fopen(path, "r");
    char first[80] = "";
    if (f) {
        if (!fgets(first, sizeof first, f))
            first[0] = '\0';
        fclose(f);
    }
    if (strncmp(first, "# dpt configuration used by this run (every key)", 48) == 0) {
        rc = dpt_error(DPT_EINVAL,
                       "--resume %s: this run was made by dpt 0.1, whose run "
                       "directories and checkpoints 0.2 cannot continue; continue it with dpt "
                       "0.1, or start a new run",
                       dir);
        goto out;
    }
    if ((rc = dpt_config_load(saved, path)) != 0) {
        if (rc == DPT_ENOENT)
            rc = dpt_error(DPT_EINVAL, "--resume %s: not a run directory (%s)", dir,
                           dpt_last_error());
        goto out;
    }
    if ((rc = dpt_config_finalize(saved)) != 0) {
        rc = dpt_error(DPT_EINVAL, "%s: %s", path, dpt_last_error());
        goto out;
    }
    if ((rc = dpt__find_checkpoint(dir, st, dpt__note_cb, r)) != 0)
        goto out;
    /* Stopped before its first checkpoint: the run starts over from its
     * config.conf (nothing else was saved). Checkpoints that are all
     * corrupt are another matter: the run's history would be lost. */
    if (!*st) {
        uint64_t *its;
        size_t n;
        if ((rc = dpt__list_checkpoints(dir, &its, &n)) != 0)
            goto out;
        free(its);
        if (n) {
            rc = dpt_error(DPT_ENOENT, "--resume %s: no valid checkpoint in %s/checkpoints", dir,
                           dir);
            goto out;
        }
    }
    const char *text = *st ? dpt_safetensors_meta(*st, "config") : NULL;
    if (*st && !text) {
        rc = dpt_error(DPT_EINVAL,
                       "--resume %s: checkpoint %s was written by dpt before 0.2 "
                       "(no run metadata); continue it with that version, or start a new run",
                       dir, dpt_safetensors_path(*st));
        goto out;
    }
    if (*st) {
        if ((rc = dpt_config_create(&ck)) != 0 ||
            (rc = dpt__config_load_text(ck, text, dpt_safetensors_path(*st))) != 0 ||
            (rc = dpt_config_finalize(ck)) != 0)
            goto out;
        snprintf(path, sizeof path, "%s/config.conf differs from checkpoint %s", dir,
                 dpt_safetensors_path(*st));
        if ((rc = dpt__compare(ck, saved, DPT_CFG_RESUMABLE, path)) != 0)
            goto out;
    }
    if ((rc = dpt_config_clone(&r->cfg, saved)) != 0)
        goto out;
    if (given) {
        if (dpt_config_given(given, DPT_CFG_job) &&
            dpt_config_job(given) != dpt_config_job(saved)) {
            rc =
                dpt_error(DPT_EINVAL, "--resume %s: the run is job %s, not %s", dir,
                          dpt_job_name(dpt_config_job(saved)), dpt_job_name(dpt_config_job(given)));
            goto out;
        }
        if ((rc = dpt__config_apply_overrides(r->cfg, given)) != 0 ||
            (rc = dpt_config_finalize(r->cfg)) != 0)
            goto out;
        if ((rc = dpt__compare(saved, r->cfg, DPT_CFG_RESUMABLE,
                               "--resume: these keys cannot change")) != 0)
            goto out;
    }
    *saved_out = saved;
    saved = NULL;
out:
    dpt_config_destroy(saved);
    dpt_config_destroy(ck);
    return rc;
}

/* ---- joining the MPI world ------------------------------------------------------------ */

/* A watchdog over the blocking steps of joining MPI (MPI_Init, the
 * communicators' creation), which no timeout of ours covers: past
 * timeout_s it reports the stall through on_stall, which ends the process. */
typedef struct dpt__watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int done, started;
    double timeout_s;
    int rank, world;
    const dpt_run_options_t *o;
} dpt__watchdog_t;

static void *dpt__watchdog_main(void *arg)
{
    dpt__watchdog_t *w = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double end = (double)until.tv_sec + until.tv_nsec * 1e-9 + w->timeout_s;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&w->mu);
    int timed_out = 0;
    while (!w->done && !timed_out)
        timed_out = pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0;
    int stalled = !w->done;
    pthread_mutex_unlock(&w->mu);
    if (stalled) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "rank %d: joining the MPI world of %d ranks did not complete within "
                 "comm_timeout_s = %g s: another rank is stopped, dead or was never started",
                 w->rank, w->world, w->timeout_s);
        w->o->on_stall(w->o->user, msg);
    }
    return NULL;
}

static void dpt__watchdog_start(dpt__watchdog_t *w, const dpt__run_t *r, double timeout_s)
{
    memset(w, 0, sizeof *w);
    if (!r->o || !r->o->on_stall || timeout_s <= 0)
        return;
    w->timeout_s = timeout_s;
    w->rank = r->rank;
    w->world = r->world;
    w->o = r->o;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->started = pthread_create(&w->thread, NULL, dpt__watchdog_main, w) == 0;
    if (!w->started) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
    }
}

static void dpt__watchdog_stop(dpt__watchdog_t *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->started = 0;
}

/* ---- the run ------------------------------------------------------------------------ */

static void dpt__run_release(dpt__run_t *r)
{
    if (r->metrics_open)
        dpt__metrics_close(&r->metrics);
    dpt_trainer_destroy(r->t);
    dpt_comm_destroy(r->mpi);
    dpt_config_destroy(r->cfg);
}

/* Keeps the first failure's message while later clean-up runs. */
static int dpt__fail(int rc, const char *what)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dpt_last_error());
    return what ? dpt_error(rc, "%s: %s", what, msg) : dpt_error(rc, "%s", msg);
}

int dpt_train_run(const dpt_config_t *cfg_in, const dpt_run_options_t *o, dpt_run_reason_t *reason)
{
    dpt__run_t r;
    memset(&r, 0, sizeof r);
    r.best = -(double)INFINITY;
    r.o = o;
    r.start = dpt_now();
    r.world = dpt__mpi_world_size();
    r.rank = r.world > 1 ? dpt__mpi_rank() : 0;
    const char *resume_dir = o ? o->resume_dir : NULL;
    dpt_safetensors_t *st = NULL;
    dpt_config_t *saved = NULL;
    dpt_run_reason_t why = DPT_RUN_DONE;
    int rc, mpi_inited = 0, mpi_clean = 0;
    if (reason)
        *reason = DPT_RUN_DONE;
    if (resume_dir && strlen(resume_dir) >= DPT__DIR_MAX)
        return dpt_error(DPT_EINVAL, "--resume: directory name longer than %d characters",
                         DPT__DIR_MAX - 1);

    /* 1. The config: validated before anything else happens. */
    if (resume_dir) {
        rc = dpt__resume_config(&r, resume_dir, cfg_in, &st, &saved);
    } else if (!cfg_in) {
        rc = dpt_error(DPT_EINVAL, "a fresh run needs a config");
    } else {
        rc = dpt_config_clone(&r.cfg, cfg_in);
        if (!rc)
            rc = dpt_config_finalize(r.cfg);
    }
    /* The env's parameters are checked now, and the defaults of those not
     * given written into the config, so every rank compares them and
     * config.conf names them. */
    if (!rc)
        rc = dpt__config_resolve_env(r.cfg);
    if (rc)
        goto out;
    dpt_job_t job = dpt_config_job(r.cfg);

    /* 2. Under mpirun: join the world and agree on the config. */
    if (r.world > 1) {
        if (job == DPT_JOB_PPO) {
            rc = dpt_error(DPT_EINVAL, "job ppo does not run under mpirun (one sampler in one "
                                       "process); use job = ddppo to train across processes");
            goto out;
        }
        if (job == DPT_JOB_SUPERVISED &&
            (dpt_towers_mode_t)dpt_config_int(r.cfg, DPT_CFG_towers_mode) == DPT_TOWERS_ASYNC) {
            rc = dpt_error(DPT_EINVAL,
                           "towers_mode = async does not run under mpirun: its devices apply "
                           "their updates without waiting for each other, so the ranks' weights "
                           "would drift apart; set towers_mode = ps or replicated (the ranks "
                           "then average their gradients at every step)");
            goto out;
        }
        /* Only DD-PPO with several worker threads calls MPI from threads
         * other than this one (hier), and the supervised job's towers when
         * they all-reduce gradient buckets (from their communication
         * thread, one thread at a time); otherwise the towers call it from
         * their device 0, this thread. */
        int threads = job == DPT_JOB_DDPPO ? (int)dpt_config_int(r.cfg, DPT_CFG_num_workers) : 1;
        if (job == DPT_JOB_SUPERVISED && dpt_config_int(r.cfg, DPT_CFG_bucket_bytes) > 0)
            threads = 2;
        dpt__watchdog_t watch;
        dpt__watchdog_start(&watch, &r, dpt_config_float(r.cfg, DPT_CFG_comm_timeout_s));
        rc = dpt_comm_mpi_init(NULL, NULL,
                               threads > 1 ? DPT_COMM_MPI_SERIALIZED : DPT_COMM_MPI_FUNNELED);
        mpi_inited = rc == 0;
        dpt_comm_mpi_options_t mo;
        dpt_comm_mpi_options_init(&mo);
        mo.timeout_s = dpt_config_float(r.cfg, DPT_CFG_comm_timeout_s);
        mo.algorithm = (dpt_comm_algorithm_t)dpt_config_int(r.cfg, DPT_CFG_allreduce_algorithm);
        if (!rc)
            rc = dpt_comm_mpi_create(&r.mpi, &mo);
        dpt__watchdog_stop(&watch);
        if (rc)
            goto out;
        if ((rc = dpt__agree(&r, resume_dir)) != 0) {
            /* Every rank saw the difference: they all leave cleanly. */
            mpi_clean = 1;
            goto out;
        }
        /* sync_replicas: rank 0 is the parameter service and runs the
         * loop (files, checkpoints, metrics) alone; every other rank is one
         * of its workers until the service says the run is over. */
        if (job == DPT_JOB_SYNC_REPLICAS) {
            if ((rc = dpt__sr_mpi_check(r.cfg, r.world)) != 0) {
                mpi_clean = 1; /* every rank refuses the same config */
                goto out;
            }
            if (r.rank > 0) {
                rc = dpt__sr_mpi_worker(r.cfg, r.mpi, o ? o->stop_flag : NULL);
                if (rc == DPT_OK && reason)
                    *reason = DPT_RUN_DONE;
                goto out;
            }
            r.solo = 1;
        }
        /* appo, impala: rank 0 learns and runs the loop alone; every other
         * rank is a sampler until rank 0 says stop. */
        if (job == DPT_JOB_APPO || job == DPT_JOB_IMPALA) {
            if (r.rank > 0) {
                rc = dpt__appo_mpi_sampler(r.cfg, r.mpi);
                goto out;
            }
            r.solo = 1;
        }
    }

    /* 3. The trainer (datasets, envs, threads) before the directory. */
    dpt_trainer_env_t env;
    memset(&env, 0, sizeof env);
    env.use_mpi = r.world > 1;
    env.stop_flag = o ? o->stop_flag : NULL;
    env.comm = r.mpi; /* NULL in one process */
    if ((rc = dpt_trainer_create(&r.t, r.cfg, &env)) != 0)
        goto out;
    uint64_t it0 = 0, ts0 = 0;
    if (st) {
        if ((rc = dpt_trainer_restore(r.t, st)) != 0)
            goto out;
        const char *tt = dpt_safetensors_meta(st, "time_total_s");
        r.time_offset = tt ? strtod(tt, NULL) : 0.0;
        const char *eb = dpt_safetensors_meta(st, "evaluation_best_return");
        if (eb)
            r.best = strtod(eb, NULL);
        dpt_safetensors_meta_u64(st, "training_iteration", &it0);
        dpt_safetensors_meta_u64(st, "timesteps_total", &ts0);
    }
    r.ts_start = ts0;

    /* 4. The directory (rank 0 writes every file). */
    if (r.rank == 0) {
        char path[PATH_MAX];
        if (!resume_dir) {
            if ((rc = dpt__make_run_dir(&r)) != 0)
                goto out;
            snprintf(path, sizeof path, "%s/config.conf", r.dir);
            if ((rc = dpt_config_save(r.cfg, path)) != 0 ||
                (rc = dpt__metrics_open(&r.metrics, r.dir, 0, r.cfg)) != 0) {
                rc = dpt__fail(rc, NULL);
                dpt__remove_fresh(&r);
                goto out;
            }
        } else {
            snprintf(path, sizeof path, "%s/checkpoints", r.dir);
            int removed = dpt__remove_temporaries(r.dir) + dpt__remove_temporaries(path);
            if (removed) {
                char msg[128];
                snprintf(msg, sizeof msg, "removed %d temporary file%s of an interrupted write",
                         removed, removed > 1 ? "s" : "");
                dpt__note(&r, msg);
            }
            if ((rc = dpt__record_overrides(&r, saved, it0)) != 0 ||
                (rc = dpt__metrics_truncate(r.dir, r.cfg, it0, ts0)) != 0 ||
                (rc = dpt__metrics_open(&r.metrics, r.dir, 1, r.cfg)) != 0)
                goto out;
        }
        r.metrics_open = 1;
    }
    {
        char text[PATH_MAX + 256];
        dpt_run_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = DPT_RUN_START;
        ev.resumed = resume_dir != NULL;
        if (resume_dir && st)
            snprintf(text, sizeof text, "resuming %s from iteration %llu (%s)", r.dir,
                     (unsigned long long)it0, dpt_safetensors_path(st));
        else if (resume_dir)
            snprintf(text, sizeof text,
                     "resuming %s from the start: it has no checkpoint yet (stopped before its "
                     "first)",
                     r.dir);
        else
            snprintf(text, sizeof text, "run directory %s", r.dir);
        ev.text = text;
        dpt__emit(&r, &ev);
    }

    /* 5. A resumed run that is already complete does no work. */
    dpt_train_result_t res;
    memset(&res, 0, sizeof res);
    res.iteration = it0;
    res.timesteps_total = ts0;
    res.reward_mean = (double)NAN;
    if (st) {
        const char *rm = dpt_safetensors_meta(st, "episode_reward_mean");
        uint64_t ew = 0;
        dpt_safetensors_meta_u64(st, "episodes_in_window", &ew);
        res.reward_mean = rm ? strtod(rm, NULL) : (double)NAN;
        res.episodes_in_window = (size_t)ew;
        if (dpt__should_stop(r.cfg, it0, dpt__job_complete(r.cfg, it0, ts0), res.reward_mean,
                             res.episodes_in_window, &why)) {
            why = DPT_RUN_ALREADY_DONE;
            goto end;
        }
    }
    dpt_safetensors_destroy(st);
    st = NULL;

    /* 6. The loop. */
    uint64_t every = (uint64_t)dpt_config_int(r.cfg, DPT_CFG_checkpoint_every);
    for (;;) {
        if ((rc = dpt_trainer_iterate(r.t, &res)) != 0)
            goto out;
        r.iterations++;
        if (res.note[0] && strcmp(res.note, r.note) != 0) {
            snprintf(r.note, sizeof r.note, "%s", res.note);
            dpt__note(&r, r.note);
        }
        int improved;
        if ((rc = dpt__evaluate_during(&r, &res, &improved)) != 0)
            goto out;
        double total = r.time_offset + (dpt_now() - r.start);
        dpt_train_result_add(&res, "time_total_s", total);
        if (r.metrics_open && (rc = dpt__metrics_write(&r.metrics, res.metrics, res.nmetrics)))
            goto out;
        dpt_run_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = DPT_RUN_RESULT;
        ev.result = &res;
        ev.timesteps_this_run = res.timesteps_total - r.ts_start;
        dpt__emit(&r, &ev);
        int stop = dpt__should_stop(r.cfg, res.iteration, res.finished, res.reward_mean,
                                    res.episodes_in_window, &why);
        int sig = dpt__stop_requested(&r, &rc);
        if (rc)
            goto out;
        if (sig && !stop) {
            stop = 1;
            why = DPT_RUN_STOPPED;
        }
        if (stop || improved || (every && res.iteration % every == 0)) {
            if ((rc = dpt__save(&r, &res, total, stop ? &why : NULL, improved)) != 0)
                goto out;
        }
        if (stop)
            break;
    }

end : {
    /* 7. The end: a greedy evaluation for RL jobs (rank 0). */
    dpt_eval_result_t ev_res;
    int evaluated = 0;
    if (r.rank == 0 && dpt_config_applies(r.cfg, DPT_CFG_eval_episodes) &&
        dpt_config_int(r.cfg, DPT_CFG_eval_episodes) > 0 && why != DPT_RUN_STOPPED) {
        if ((rc = dpt_trainer_evaluate(r.t, (size_t)dpt_config_int(r.cfg, DPT_CFG_eval_episodes),
                                       (uint64_t)dpt_config_int(r.cfg, DPT_CFG_seed), &ev_res)))
            goto out;
        evaluated = 1;
    }
    dpt_run_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DPT_RUN_END;
    ev.text = dpt_run_reason_text(why);
    ev.result = &res;
    ev.eval = evaluated ? &ev_res : NULL;
    ev.resumed = resume_dir != NULL;
    ev.timesteps_this_run = res.timesteps_total - r.ts_start;
    dpt__emit(&r, &ev);
    if (reason)
        *reason = why;
    rc = DPT_OK;
}

out:
    if (rc) {
        rc = dpt__fail(rc, NULL);
        if (r.rank == 0 && !resume_dir && r.iterations == 0 && r.dir[0] && r.metrics_open) {
            dpt__metrics_close(&r.metrics);
            r.metrics_open = 0;
            dpt__remove_fresh(&r);
        }
    }
    dpt_safetensors_destroy(st);
    dpt_config_destroy(saved);
    if (rc && mpi_inited && !mpi_clean) {
        /* A failed communicator may still be written by MPI: keep it. */
        r.mpi = NULL;
    }
    dpt__run_release(&r);
    /* After a failure another rank may be stopped or still inside a
     * collective, and MPI_Finalize would wait for it: MPI stays initialized
     * and the caller ends the job (dpt_comm_mpi_abort; the command does). */
    if (mpi_inited && (rc == DPT_OK || mpi_clean))
        dpt_comm_mpi_finalize();
    return rc;
}
