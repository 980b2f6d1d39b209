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
#include "dpt/stats.h"
#include "dpt/status.h"
#include "dpt/train.h"
#include "rl/env_internal.h"
#include "train_internal.h"
#include "core/stopflag.h"

#include <ctype.h>
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

static const char *const dpt__run_reason_texts[DPT_RUN_REASON_COUNT] = {
#define DPT__REASON_TEXT(sym, text) [sym] = text,
    DPT_RUN_REASON_LIST(DPT__REASON_TEXT)
#undef DPT__REASON_TEXT
};

const char *dpt_run_reason_text(dpt_run_reason_t reason)
{
    return (unsigned)reason < DPT_RUN_REASON_COUNT ? dpt__run_reason_texts[reason] : "unknown";
}

/* Longest run directory name: paths of its files must fit in PATH_MAX. */
#define DPT__DIR_MAX 3072

typedef struct dpt__run {
    const dpt_run_options_t *o;
    dpt_config_t *cfg;
    char dir[DPT__DIR_MAX];
    const char *resume_dir; /* borrowed from o; NULL for a fresh run */
    dpt__launch_t launch;   /* rank, world, the ranks' communicator */
    int created;            /* rank 0 made the directory in this start */
    uint64_t iterations;    /* iterations done by this process */
    dpt_safetensors_t *st;  /* the checkpoint a resume starts from */
    dpt_config_t *saved;    /* a resumed run's config.conf */
    uint64_t it0;           /* training_iteration of st (0: none) */
    dpt_trainer_t *t;
    dpt__metrics_t metrics;
    int metrics_open;
    double time_offset, start;
    uint64_t ts_start;
    double best;    /* best evaluation return so far (-inf: none) */
    char note[192]; /* the last iteration note reported */
} dpt__run_t;

static void dpt__run_emit(dpt__run_t *r, dpt_run_event_t *ev)
{
    if (r->launch.rank != 0 || !r->o || !r->o->on_event)
        return;
    ev->dir = r->dir;
    ev->elapsed_s = dpt_now() - r->start;
    r->o->on_event(r->o->user, ev);
}

static void dpt__run_note(dpt__run_t *r, const char *text)
{
    dpt_run_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DPT_RUN_NOTE;
    ev.text = text;
    dpt__run_emit(r, &ev);
}

/* ---- checkpoints in a run directory -------------------------------------------- */

static void dpt__run_ckpt_path(const char *dir, uint64_t it, char *out, size_t n)
{
    snprintf(out, n, "%s/checkpoints/checkpoint-%08llu.safetensors", dir, (unsigned long long)it);
}

static int dpt__run_cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int dpt__list_checkpoints(const char *dir, uint64_t **its, size_t *n)
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
        qsort(*its, *n, sizeof **its, dpt__run_cmp_desc);
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
        dpt__run_ckpt_path(dir, its[i], path, sizeof path);
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

static void dpt__run_note_cb(void *ctx, const char *text)
{
    dpt__run_note(ctx, text);
}

/* Keeps the keep newest of this run's checkpoints up to `current`; never
 * touches a checkpoint numbered above it (one this run has not written). */
static int dpt__run_rotate(const char *dir, uint64_t current, uint64_t keep)
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
        dpt__run_ckpt_path(dir, its[i], path, sizeof path);
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
static int dpt__run_dir_empty(const char *dir)
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
 * without .so; a built-in's name, a slash made '_') or the dataset. */
void dpt__run_label(const dpt_config_t *c, char *out, size_t n)
{
    const char *s = dpt_config_applies(c, DPT_CFG_env) ? dpt_config_str(c, DPT_CFG_env)
                                                       : dpt_config_str(c, DPT_CFG_dataset);
    const char *slash = strrchr(s, '/');
    if (slash && !dpt__env_is_builtin(s)) /* MinAtar/Breakout-v1 gives MinAtar_Breakout-v1 */
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
static int dpt__run_make_dir(dpt__run_t *r)
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
            if (!dpt__run_dir_empty(given))
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
static void dpt__run_remove_fresh(dpt__run_t *r)
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

/* 1 when any rank asks to stop (the flag is read once per iteration, so
 * every rank stops after the same iteration); a rank that runs a role asks
 * through the trainer (res->stop_requested). */
static int dpt__run_stop_requested(dpt__run_t *r, const dpt_train_result_t *res, int *rc)
{
    float f = (r->o && dpt__stop_flag_set(r->o->stop_flag)) || res->stop_requested ? 1.0f : 0.0f;
    *rc = DPT_OK;
    if (r->launch.comm && !r->launch.alone)
        *rc = dpt_comm_allreduce(r->launch.comm, &f, 1, DPT_REDUCE_SUM);
    return f > 0.0f;
}

/* ---- stop conditions ------------------------------------------------------------- */

/* Why the run should stop after an iteration with these numbers (0 = go on). */
static int dpt__run_should_stop(const dpt_config_t *c, uint64_t iteration, int finished,
                                double reward, size_t episodes, dpt_run_reason_t *why)
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
static int dpt__run_job_complete(const dpt_config_t *c, uint64_t iteration, uint64_t timesteps)
{
    if (dpt_config_applies(c, DPT_CFG_total_timesteps))
        return timesteps >= (uint64_t)dpt_config_int(c, DPT_CFG_total_timesteps);
    if (dpt_config_applies(c, DPT_CFG_epochs))
        return iteration >= (uint64_t)dpt_config_int(c, DPT_CFG_epochs);
    return 0;
}

/* ---- checkpoint of the run ------------------------------------------------------- */

static int dpt__run_save(dpt__run_t *r, const dpt_train_result_t *res, double time_total,
                         const dpt_run_reason_t *why, int best)
{
    dpt_safetensors_writer_t *w = NULL;
    int rc = DPT_OK;
    if (r->launch.rank == 0 && (rc = dpt_safetensors_writer_create(&w)) != 0)
        return rc;
    /* Collective: every rank takes part, rank 0 writes. */
    rc = dpt_trainer_checkpoint(r->t, w);
    if (rc || r->launch.rank != 0)
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
    dpt__run_ckpt_path(r->dir, res->iteration, path, sizeof path);
    if ((rc = dpt_safetensors_save(w, path)) != 0)
        goto out;
    if (best) {
        snprintf(path, sizeof path, "%s/checkpoints/best.safetensors", r->dir);
        if ((rc = dpt_safetensors_save(w, path)) != 0)
            goto out;
    }
    rc = dpt__run_rotate(r->dir, res->iteration,
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
static int dpt__run_evaluate_during(dpt__run_t *r, dpt_train_result_t *res, int *improved)
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

/* ---- the phases of a run ----------------------------------------------------------- */

/* Whether this thread's last run failed in a way rank 0 reports. */
static _Thread_local int dpt__run_error_shared;

int dpt_train_error_shared(void)
{
    return dpt__run_error_shared;
}

/* Keeps the first failure's message while later clean-up runs. */
static int dpt__run_fail(int rc, const char *what)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dpt_last_error());
    return what ? dpt_error(rc, "%s: %s", what, msg) : dpt_error(rc, "%s", msg);
}

/* 1. The config, validated before anything else happens: the given one, or
 * for a resume the run's own with the resumable overrides. The env's
 * parameters are checked too, and the defaults of those not given written
 * into the config, so every rank compares them and config.conf names them. */
static int dpt__run_config(dpt__run_t *r, const dpt_config_t *cfg_in)
{
    int rc;
    if (r->resume_dir) {
        if (strlen(r->resume_dir) >= sizeof r->dir)
            return dpt_error(DPT_EINVAL, "--resume: directory name longer than %d characters",
                             DPT__DIR_MAX - 1);
        snprintf(r->dir, sizeof r->dir, "%s", r->resume_dir);
        rc = dpt__resume_config(r->resume_dir, cfg_in, &r->cfg, &r->st, &r->saved, dpt__run_note_cb,
                                r);
    } else if (!cfg_in) {
        rc = dpt_error(DPT_EINVAL, "a fresh run needs a config");
    } else {
        rc = dpt_config_clone(&r->cfg, cfg_in);
        if (!rc)
            rc = dpt_config_finalize(r->cfg);
    }
    return rc ? rc : dpt__config_resolve_env(r->cfg);
}

/* 3. The trainer (datasets, envs, threads) before the directory, restored
 * from the checkpoint of a resume. */
static int dpt__run_trainer(dpt__run_t *r)
{
    dpt_trainer_env_t env;
    memset(&env, 0, sizeof env);
    env.use_mpi = r->launch.comm != NULL;
    env.stop_flag = r->o ? r->o->stop_flag : NULL;
    env.comm = r->launch.comm; /* NULL in one process */
    int rc = dpt_trainer_create(&r->t, r->cfg, &env);
    if (rc || !r->st)
        return rc;
    if ((rc = dpt_trainer_restore(r->t, r->st)) != 0)
        return rc;
    const char *tt = dpt_safetensors_meta(r->st, "time_total_s");
    r->time_offset = tt ? strtod(tt, NULL) : 0.0;
    const char *eb = dpt_safetensors_meta(r->st, "evaluation_best_return");
    if (eb)
        r->best = strtod(eb, NULL);
    dpt_safetensors_meta_u64(r->st, "training_iteration", &r->it0);
    dpt_safetensors_meta_u64(r->st, "timesteps_total", &r->ts_start);
    return DPT_OK;
}

/* Rank 0, resuming: removes what an interrupted write left, records the
 * overrides and cuts the metrics back to the checkpoint. */
static int dpt__run_reopen_dir(dpt__run_t *r)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/checkpoints", r->dir);
    int removed = dpt__remove_temporaries(r->dir) + dpt__remove_temporaries(path);
    if (removed) {
        char msg[128];
        snprintf(msg, sizeof msg, "removed %d temporary file%s of an interrupted write", removed,
                 removed > 1 ? "s" : "");
        dpt__run_note(r, msg);
    }
    int rc = dpt__record_overrides(r->dir, r->cfg, r->saved, r->it0);
    if (!rc)
        rc = dpt__metrics_truncate(r->dir, r->cfg, r->it0, r->ts_start);
    if (!rc)
        rc = dpt__metrics_open(&r->metrics, r->dir, 1, r->cfg);
    return rc;
}

/* 4. The directory (rank 0 writes every file), then the start event. */
static int dpt__run_dir(dpt__run_t *r)
{
    int rc = DPT_OK;
    if (r->launch.rank == 0 && !r->resume_dir) {
        char path[PATH_MAX];
        if ((rc = dpt__run_make_dir(r)) != 0)
            return rc;
        snprintf(path, sizeof path, "%s/config.conf", r->dir);
        if ((rc = dpt_config_save(r->cfg, path)) != 0 ||
            (rc = dpt__metrics_open(&r->metrics, r->dir, 0, r->cfg)) != 0) {
            rc = dpt__run_fail(rc, NULL);
            dpt__run_remove_fresh(r);
            return rc;
        }
    } else if (r->launch.rank == 0 && (rc = dpt__run_reopen_dir(r)) != 0) {
        return rc;
    }
    r->metrics_open = r->launch.rank == 0;
    char text[PATH_MAX + 256];
    dpt_run_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DPT_RUN_START;
    ev.resumed = r->resume_dir != NULL;
    if (r->resume_dir && r->st)
        snprintf(text, sizeof text, "resuming %s from iteration %llu (%s)", r->dir,
                 (unsigned long long)r->it0, dpt_safetensors_path(r->st));
    else if (r->resume_dir)
        snprintf(text, sizeof text,
                 "resuming %s from the start: it has no checkpoint yet (stopped before its "
                 "first)",
                 r->dir);
    else
        snprintf(text, sizeof text, "run directory %s", r->dir);
    ev.text = text;
    dpt__run_emit(r, &ev);
    return DPT_OK;
}

/* One iteration, its metrics and event; *stop (and *why) when the run
 * ends after it. */
static int dpt__run_one(dpt__run_t *r, dpt_train_result_t *res, int *stop, dpt_run_reason_t *why)
{
    int rc = dpt_trainer_iterate(r->t, res);
    if (rc)
        return rc;
    r->iterations++;
    if (res->note[0] && strcmp(res->note, r->note) != 0) {
        snprintf(r->note, sizeof r->note, "%s", res->note);
        dpt__run_note(r, r->note);
    }
    int improved;
    if ((rc = dpt__run_evaluate_during(r, res, &improved)) != 0)
        return rc;
    double total = r->time_offset + (dpt_now() - r->start);
    dpt_train_result_add(res, "time_total_s", total);
    if (r->metrics_open && (rc = dpt__metrics_write(&r->metrics, res->metrics, res->nmetrics)))
        return rc;
    dpt_run_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DPT_RUN_RESULT;
    ev.result = res;
    ev.timesteps_this_run = res->timesteps_total - r->ts_start;
    dpt__run_emit(r, &ev);
    *stop = dpt__run_should_stop(r->cfg, res->iteration, res->finished, res->reward_mean,
                                 res->episodes_in_window, why);
    int sig = dpt__run_stop_requested(r, res, &rc);
    if (rc)
        return rc;
    if (sig && !*stop) {
        *stop = 1;
        *why = DPT_RUN_STOPPED;
    }
    uint64_t every = (uint64_t)dpt_config_int(r->cfg, DPT_CFG_checkpoint_every);
    if (*stop || improved || (every && res->iteration % every == 0))
        rc = dpt__run_save(r, res, total, *stop ? why : NULL, improved);
    return rc;
}

/* 5. The loop; a resumed run that is already complete does no work. */
static int dpt__run_loop(dpt__run_t *r, dpt_train_result_t *res, dpt_run_reason_t *why)
{
    memset(res, 0, sizeof *res);
    res->iteration = r->it0;
    res->timesteps_total = r->ts_start;
    res->reward_mean = (double)NAN;
    if (r->st) {
        const char *rm = dpt_safetensors_meta(r->st, "episode_reward_mean");
        uint64_t ew = 0;
        dpt_safetensors_meta_u64(r->st, "episodes_in_window", &ew);
        res->reward_mean = rm ? strtod(rm, NULL) : (double)NAN;
        res->episodes_in_window = (size_t)ew;
        if (dpt__run_should_stop(r->cfg, r->it0, dpt__run_job_complete(r->cfg, r->it0, r->ts_start),
                                 res->reward_mean, res->episodes_in_window, why)) {
            *why = DPT_RUN_ALREADY_DONE;
            return DPT_OK;
        }
    }
    dpt_safetensors_destroy(r->st);
    r->st = NULL;
    int rc, stop = 0;
    while (!stop)
        if ((rc = dpt__run_one(r, res, &stop, why)) != 0)
            return rc;
    return DPT_OK;
}

/* 5b. Rank 0 of a job whose other ranks run a role ends their part (before
 * the evaluation, which they would wait through). A rank that does not
 * answer fails the run, except after a stop request or for a job that
 * abandons such ranks (end_abandons): then the run keeps its outcome (its
 * files are written) and the failure is reported as a note. Either way MPI
 * cannot be finalized (it would wait for that rank). */
static int dpt__run_end_roles(dpt__run_t *r, dpt_run_reason_t why)
{
    if (!r->launch.alone || r->launch.rank != 0)
        return DPT_OK;
    int rc = dpt__trainer_end(r->t);
    if (!rc)
        return DPT_OK;
    r->launch.lost = 1;
    int stopped = why == DPT_RUN_STOPPED;
    if (!stopped && !dpt__trainer_end_abandons(r->t))
        return rc;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s: %s",
             stopped ? "after the stop request" : "warning: the work is done, abandoning the rest",
             dpt_last_error());
    dpt__run_note(r, msg);
    return DPT_OK;
}

/* 6. The end: a greedy evaluation for RL jobs (rank 0), and the end event. */
static int dpt__run_finish(dpt__run_t *r, const dpt_train_result_t *res, dpt_run_reason_t why)
{
    dpt_eval_result_t ev_res;
    int evaluated = 0;
    if (r->launch.rank == 0 && dpt_config_applies(r->cfg, DPT_CFG_eval_episodes) &&
        dpt_config_int(r->cfg, DPT_CFG_eval_episodes) > 0 && why != DPT_RUN_STOPPED) {
        int rc = dpt_trainer_evaluate(r->t, (size_t)dpt_config_int(r->cfg, DPT_CFG_eval_episodes),
                                      (uint64_t)dpt_config_int(r->cfg, DPT_CFG_seed), &ev_res);
        if (rc)
            return rc;
        evaluated = 1;
    }
    dpt_run_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = DPT_RUN_END;
    ev.text = dpt_run_reason_text(why);
    ev.result = res;
    ev.eval = evaluated ? &ev_res : NULL;
    ev.resumed = r->resume_dir != NULL;
    ev.timesteps_this_run = res->timesteps_total - r->ts_start;
    dpt__run_emit(r, &ev);
    return DPT_OK;
}

/* Releases everything; a fresh start that failed before its first
 * iteration leaves no directory behind. */
static int dpt__run_close(dpt__run_t *r, int rc)
{
    if (rc) {
        rc = dpt__run_fail(rc, NULL);
        if (r->launch.rank == 0 && !r->resume_dir && r->iterations == 0 && r->dir[0] &&
            r->metrics_open) {
            dpt__metrics_close(&r->metrics);
            r->metrics_open = 0;
            dpt__run_remove_fresh(r);
        }
    }
    if (r->metrics_open)
        dpt__metrics_close(&r->metrics);
    dpt_trainer_destroy(r->t);
    dpt_safetensors_destroy(r->st);
    dpt_config_destroy(r->saved);
    dpt_config_destroy(r->cfg);
    dpt__launch_end(&r->launch, rc);
    dpt__run_error_shared = rc && r->launch.shared;
    return rc;
}

/* config -> launch (world, agreement, roles) -> trainer -> run directory
 * -> loop -> end of the roles -> finish, each phase a call that names no
 * job. */
int dpt_train_run(const dpt_config_t *cfg_in, const dpt_run_options_t *o, dpt_run_reason_t *reason)
{
    dpt__run_t r;
    memset(&r, 0, sizeof r);
    r.best = -(double)INFINITY;
    r.o = o;
    r.start = dpt_now();
    r.resume_dir = o ? o->resume_dir : NULL;
    dpt__launch_init(&r.launch);
    dpt_run_reason_t why = DPT_RUN_DONE;
    dpt_train_result_t res;
    if (reason)
        *reason = DPT_RUN_DONE;
    int rc = o && o->start_error
                 ? dpt_error(o->start_error, "%s",
                             o->start_error_text ? o->start_error_text : "the run cannot start")
                 : dpt__run_config(&r, cfg_in);
    rc = dpt__launch_join(&r.launch, rc ? NULL : r.cfg, r.resume_dir, o, rc);
    if (!rc && r.launch.role) { /* this rank is not a trainer */
        rc = dpt__launch_role(&r.launch, r.cfg, o);
        if (!rc && reason && o && dpt__stop_flag_set(o->stop_flag))
            *reason = DPT_RUN_STOPPED; /* it asked rank 0 to stop the run */
        return dpt__run_close(&r, rc);
    }
    if (!rc)
        rc = dpt__run_trainer(&r);
    if (!rc)
        rc = dpt__run_dir(&r);
    if (!rc)
        rc = dpt__run_loop(&r, &res, &why);
    if (!rc)
        rc = dpt__run_end_roles(&r, why);
    if (!rc)
        rc = dpt__run_finish(&r, &res, why);
    if (!rc && reason)
        *reason = why;
    return dpt__run_close(&r, rc);
}
