/*
 * `dpt train`, `dpt eval`, `dpt init` and `dpt demo`: argument parsing,
 * printing and exit codes over dpt/train.h. No training logic lives here.
 */
#define _GNU_SOURCE /* sigaction */
#include "cli.h"
#include "dpt/dpt.h"
#include "dpt/env.h"
#include "dpt/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A failed rank above 0 under a launcher: the launcher ends the whole job
 * as soon as one rank exits with an error, so a rank that ended first could
 * have rank 0 killed before its report (the failure they share, or the
 * rank that failed) is out. It waits (at most 5 s) for rank 0 to print and
 * exit, which ends this process too. */
static void dpt__train_let_rank0_report(void)
{
    fflush(stdout);
    fflush(stderr);
    struct timespec ts = {0, 50 * 1000 * 1000};
    for (int i = 0; i < 100; i++)
        nanosleep(&ts, NULL);
}

/* ---- signals ------------------------------------------------------------------- */

/* First SIGINT/SIGTERM: ask the run to stop after this iteration (it
 * writes a checkpoint). Second: leave at once; every file on disk is a
 * complete one (they are written by rename), so nothing saved is lost. */
static volatile sig_atomic_t dpt__stop_flag;
static volatile sig_atomic_t dpt__stop_signal;

static void dpt__on_signal(int sig)
{
    int saved = errno;
    /* Atomic stores: the handler may run on any of the run's threads while
     * the others read the flag (core/stopflag.h). */
    if (__atomic_load_n(&dpt__stop_flag, __ATOMIC_RELAXED))
        _exit(128 + sig);
    __atomic_store_n(&dpt__stop_signal, sig, __ATOMIC_RELAXED);
    __atomic_store_n(&dpt__stop_flag, 1, __ATOMIC_RELAXED);
    errno = saved;
}

static void dpt__install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = dpt__on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Output that can no longer be written (a closed pipe: mpirun stops
     * forwarding the ranks' output when it is told to end the job) must not
     * end the process between a checkpoint and its exit code. */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}

/* ---- dpt train -------------------------------------------------------------------- */

typedef struct train_ui {
    int quiet;
    dpt_progress_t progress;
    dpt_job_t job;
} train_ui_t;

static void train_print_end(train_ui_t *ui, const dpt_run_event_t *ev)
{
    const dpt_train_result_t *r = ev->result;
    double secs = ev->elapsed_s;
    if (!DPT_JOB_IS_RL(ui->job)) {
        double acc = dpt_train_result_get(r, "test_accuracy");
        double rmse = dpt_train_result_get(r, "test_rmse");
        if (isfinite(rmse))
            printf("dpt train: test rmse %.4f, r2 %.4f after %llu epochs; this run %.1f s "
                   "(%.0f samples/s overall)\n",
                   rmse, dpt_train_result_get(r, "test_r2"), (unsigned long long)r->iteration, secs,
                   secs > 0 ? (double)ev->timesteps_this_run / secs : 0.0);
        else if (isfinite(acc))
            printf("dpt train: test accuracy %.4f after %llu epochs; this run %.1f s "
                   "(%.0f samples/s overall)\n",
                   acc, (unsigned long long)r->iteration, secs,
                   secs > 0 ? (double)ev->timesteps_this_run / secs : 0.0);
    } else if (ev->timesteps_this_run > 0) {
        printf("dpt train: %llu env steps in %.2f s (%.0f steps/s); return %.1f (mean of last "
               "100 episodes), %.1f (last 20)\n",
               (unsigned long long)ev->timesteps_this_run, secs,
               secs > 0 ? (double)ev->timesteps_this_run / secs : 0.0, r->reward_mean,
               dpt_train_result_get(r, "episode_reward_mean_last20"));
    }
    if (ev->eval && DPT_JOB_IS_RL(ui->job))
        printf("evaluation: %s policy, %zu episodes: mean return %.1f, mean length %.1f\n",
               ev->eval->stochastic ? "stochastic" : "greedy", ev->eval->count,
               ev->eval->mean_return, ev->eval->mean_length);
    printf("dpt train: %s after iteration %llu; run directory %s\n", ev->text,
           (unsigned long long)r->iteration, ev->dir);
}

/* Joining the MPI world is stuck (another rank stopped or dead): nothing
 * can return from a blocked MPI_Init, so the process ends here. */
static void train_on_stall(void *user, const char *what)
{
    (void)user;
    fflush(stdout);
    fprintf(stderr, "dpt train: %s\n", what);
    _exit(DPT_EXIT_FAIL);
}

static void train_on_event(void *user, const dpt_run_event_t *ev)
{
    train_ui_t *ui = user;
    switch (ev->kind) {
    case DPT_RUN_START:
        if (!ui->quiet)
            printf("dpt train: %s\n", ev->text);
        break;
    case DPT_RUN_NOTE: fprintf(stderr, "dpt train: %s\n", ev->text); break;
    case DPT_RUN_RESULT:
        dpt_progress_update(&ui->progress, ev->result->line, ev->result->progress,
                            !DPT_JOB_IS_RL(ui->job));
        break;
    case DPT_RUN_END:
        dpt_progress_done(&ui->progress);
        if (!ui->quiet)
            train_print_end(ui, ev);
        break;
    }
}

/* Keys grouped by job, from the library's table. */
static void train_print_keys(FILE *f)
{
    for (int j = 0; j < DPT_JOB_COUNT; j++) {
        fprintf(f, "\nkeys of job = %s (%s):\n", dpt_job_name((dpt_job_t)j),
                dpt_job_summary((dpt_job_t)j));
        for (int k = 0; k < DPT_CFG_COUNT; k++) {
            const dpt_config_key_info_t *ki = dpt_config_key_info((dpt_config_key_t)k);
            if (!(ki->jobs & (1u << j)))
                continue;
            char type[200];
            if (ki->type == DPT_CFG_T_ENUM)
                snprintf(type, sizeof type, "%s", ki->choices);
            else if (ki->type == DPT_CFG_T_INT || ki->type == DPT_CFG_T_FLOAT)
                snprintf(type, sizeof type, "%s in [%.15g, %.15g]", dpt_config_type_name(ki->type),
                         ki->min, ki->max);
            else
                snprintf(type, sizeof type, "%s", dpt_config_type_name(ki->type));
            const char *def = dpt_config_default((dpt_config_key_t)k, (dpt_job_t)j);
            fprintf(f, "  %-24s %s (default %s)%s\n  %-24s %s\n", ki->name, type,
                    def[0] ? def : "\"\"",
                    (ki->flags & DPT_CFG_RESUMABLE) ? ", may change on "
                                                      "resume"
                                                    : "",
                    "", ki->help);
        }
    }
}

/* The built-in envs and the parameters each takes, from their classes. */
static void train_print_envs(FILE *f)
{
    fprintf(f, "\nbuilt-in envs (env = NAME) and their parameters (" DPT_CONFIG_ENV_PREFIX
               "NAME = value):\n");
    for (size_t i = 0; i < dpt_env_count(); i++) {
        const dpt_env_class_t *cls = dpt_env_get(i);
        int discrete = cls->action_kind == DPT_ACTION_DISCRETE;
        fprintf(f, "  %-24s obs_dim %zu, %s %zu, time limit %u%s\n", cls->name, cls->obs_dim,
                discrete ? "actions" : "action_dim", discrete ? cls->num_actions : cls->action_dim,
                cls->max_episode_steps, cls->num_params ? "" : "; no parameters");
        for (size_t j = 0; j < cls->num_params; j++) {
            const dpt_env_param_t *p = &cls->params[j];
            char type[128];
            if (p->type == DPT_ENV_PARAM_INT || p->type == DPT_ENV_PARAM_FLOAT)
                snprintf(type, sizeof type, "%s in [%.15g, %.15g]",
                         dpt_env_param_type_name(p->type), p->min, p->max);
            else
                snprintf(type, sizeof type, "%s", dpt_env_param_type_name(p->type));
            fprintf(f, "    " DPT_CONFIG_ENV_PREFIX "%-13s %s (default %s)\n    %-24s %s\n",
                    p->name, type, p->def, "", p->help ? p->help : "");
        }
    }
}

static int train_usage(FILE *f, int code)
{
    fprintf(f, "usage: dpt train CONFIG [--set key=value]... [--quiet]\n"
               "       dpt train CONFIG --seeds LIST [--parallel N] [--set key=value]...\n"
               "       dpt train --resume DIR [--set key=value]... [--quiet]\n\n"
               "Trains what CONFIG describes (job = supervised | ppo | ddppo | appo | impala)\n"
               "into a new run "
               "directory (output_dir, or runs/JOB-ENV_OR_DATASET-TIMESTAMP): config.conf,\n"
               "result.jsonl, progress.csv and checkpoints/. A fresh run refuses a non-empty\n"
               "directory. --resume DIR continues DIR from its newest valid checkpoint with its\n"
               "saved config; --set may then change only the keys marked \"may change on\n"
               "resume\" below. Ctrl-C (SIGINT) or SIGTERM: the current iteration finishes, a\n"
               "checkpoint is written, exit 130 or 143; a second signal exits at once.\n"
               "Exit codes: 0 done, 1 runtime failure, 2 bad usage, config or input (a bad\n"
               "checkpoint, run directory or dataset).\n"
               "DD-PPO across processes: mpirun -np N dpt train CONFIG (every rank the same\n"
               "command; rank 0 writes the files). `dpt init JOB` writes a starter config.\n"
               "--seeds 1,2,3 (or 1-5): one run per seed, in OUTPUT_DIR/seed-S (or a new\n"
               "runs/JOB-ENV-seeds-TIMESTAMP/seed-S), N at a time (default: as many as the\n"
               "cores hold given each run's threads), then one line per seed and a summary:\n"
               "final return (or test accuracy) mean +- std and interquartile mean; steps and\n"
               "time to stop_reward, over the runs that ran to their end (Ctrl-C stops the runs\n"
               "under way and starts no other).\n"
               "RL jobs: `" DPT_CONFIG_ENV_PREFIX "NAME = value` (in CONFIG, or --set) sets "
               "parameter NAME of\nthe env (built-in: listed at the end; a plug-in: its own); "
               "config.conf of the run\nlists every parameter, defaults included.\n");
    train_print_keys(f);
    train_print_envs(f);
    return code;
}

/* ---- --seeds ---------------------------------------------------------------------- */

/* Parses "1,2,3" or "1-5" (or a mix) into a malloc'ed list; exit code. */
static int train_parse_seeds(const char *text, uint64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    const char *p = text;
    while (*p) {
        char *end;
        if (*p < '0' || *p > '9')
            goto bad;
        unsigned long long a = strtoull(p, &end, 10), b = a;
        if (*end == '-') {
            if (end[1] < '0' || end[1] > '9')
                goto bad;
            b = strtoull(end + 1, &end, 10);
        }
        if (b < a || b > 4294967295ull || b - a >= 10000 || (*end && *end != ','))
            goto bad;
        for (unsigned long long v = a; v <= b; v++) {
            if (*n == cap) {
                cap = cap ? 2 * cap : 8;
                uint64_t *nl = realloc(*out, cap * sizeof *nl);
                if (!nl) {
                    fprintf(stderr, "dpt train: out of memory\n");
                    free(*out);
                    *out = NULL;
                    return DPT_EXIT_FAIL;
                }
                *out = nl;
            }
            (*out)[(*n)++] = v;
        }
        p = *end ? end + 1 : end;
        if (*end && !*p)
            goto bad;
    }
    if (*n)
        return DPT_EXIT_OK;
bad:
    fprintf(stderr,
            "dpt train: --seeds expects seeds in [0, 4294967295] as a list and ranges, "
            "e.g. 1,2,3 or 1-5, got \"%.60s\"\n",
            text);
    free(*out);
    *out = NULL;
    return DPT_EXIT_USAGE;
}

static void seeds_on_event(void *user, const dpt_run_event_t *ev)
{
    (void)user;
    if (ev->kind == DPT_RUN_START)
        printf("dpt train: %s\n", ev->text);
    else if (ev->kind == DPT_RUN_NOTE)
        fprintf(stderr, "dpt train: %s: %s\n", ev->dir, ev->text);
    else if (ev->kind == DPT_RUN_END)
        printf("dpt train: %s: %s after iteration %llu\n", ev->dir, ev->text,
               (unsigned long long)ev->result->iteration);
    fflush(stdout);
}

/* Runs every seed and prints one line per seed and the summary. */
static int train_seeds(const dpt_config_t *c, const uint64_t *seeds, size_t n, uint64_t parallel)
{
    dpt_seed_run_t *runs = calloc(n, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "dpt train: out of memory\n");
        return DPT_EXIT_FAIL;
    }
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.on_event = seeds_on_event;
    o.stop_flag = &dpt__stop_flag;
    int rc = dpt_train_seeds(c, seeds, n, (size_t)parallel, &o, runs);
    size_t ran = 0;
    for (size_t i = 0; i < n; i++)
        ran += runs[i].status != DPT_OK || runs[i].started;
    if (rc && !ran) {
        /* refused before any run started */
        fprintf(stderr, "dpt train: %s\n", dpt_last_error());
        free(runs);
        return dpt_cli_exit_code(rc);
    }
    int rl = DPT_JOB_IS_RL(dpt_config_job(c));
    printf("\n%-10s %-7s %12s %12s %10s %14s  %s\n", "seed", "status", rl ? "return" : "accuracy",
           "steps", "time_s", "to_target", "run directory");
    for (size_t i = 0; i < n; i++) {
        const dpt_seed_run_t *r = &runs[i];
        char target[48] = "-";
        if (r->reached)
            snprintf(target, sizeof target, "%llu in %.1fs", (unsigned long long)r->steps_to_target,
                     r->time_to_target_s);
        /* A run stopped by the request ended early: its figures are not
         * final ones; a run not started has none. */
        const char *status = r->status                      ? "failed"
                             : !r->started                  ? "not run"
                             : r->reason == DPT_RUN_STOPPED ? "stopped"
                                                            : "ok";
        printf("%-10llu %-7s %12.4g %12llu %10.1f %14s  %s\n", (unsigned long long)r->seed, status,
               r->final, (unsigned long long)r->timesteps, r->time_s, target,
               r->started ? r->dir : "-");
        if (r->status)
            fprintf(stderr, "dpt train: seed %llu: %s\n", (unsigned long long)r->seed, r->error);
    }
    dpt_seeds_summary_t sum;
    dpt_seeds_summarize(runs, n, &sum);
    if (sum.ok)
        printf("%s over %zu of %zu seeds: mean %.4g +- %.4g (std), interquartile mean %.4g\n",
               rl ? "final return" : "test accuracy", sum.ok, sum.runs, sum.mean, sum.std, sum.iqm);
    else
        printf("%s: none of %zu seeds ran to its end\n", rl ? "final return" : "test accuracy",
               sum.runs);
    if (sum.stopped || sum.not_started)
        printf("left out after the stop request: %zu run%s stopped before %s end, %zu not "
               "started\n",
               sum.stopped, sum.stopped == 1 ? "" : "s", sum.stopped == 1 ? "its" : "their",
               sum.not_started);
    if (rl && dpt_config_float(c, DPT_CFG_stop_reward) != 0.0 && sum.reached)
        printf("stop_reward %g reached by %zu of %zu seeds; median %.0f steps, %.2f s to it\n",
               dpt_config_float(c, DPT_CFG_stop_reward), sum.reached, sum.runs,
               sum.median_steps_to_target, sum.median_time_to_target_s);
    else if (rl && dpt_config_float(c, DPT_CFG_stop_reward) != 0.0)
        printf("stop_reward %g reached by none of %zu seeds\n",
               dpt_config_float(c, DPT_CFG_stop_reward), sum.runs);
    int code = rc ? dpt_cli_exit_code(rc) : DPT_EXIT_OK;
    int stopsig = __atomic_load_n(&dpt__stop_signal, __ATOMIC_RELAXED);
    if (!rc && (sum.stopped || sum.not_started))
        code = 128 + (stopsig ? stopsig : SIGTERM);
    free(runs);
    return code;
}

int dpt_cmd_train(int argc, char **argv)
{
    const char *config_path = NULL, *resume_dir = NULL;
    train_ui_t ui;
    memset(&ui, 0, sizeof ui);
    dpt_config_t *c = NULL;
    int rc = dpt_config_create(&c);
    if (rc) {
        fprintf(stderr, "dpt train: %s\n", dpt_last_error());
        return DPT_EXIT_FAIL;
    }
    int code = DPT_EXIT_USAGE;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int nsets = 0;
    uint64_t *seeds = NULL, parallel = 0;
    size_t nseeds = 0;
    if (!sets) {
        fprintf(stderr, "dpt train: out of memory\n");
        code = DPT_EXIT_FAIL;
        goto out;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            code = train_usage(stdout, DPT_EXIT_OK);
            goto out;
        }
        if (!strcmp(argv[i], "--quiet")) {
            ui.quiet = 1;
        } else if (!strcmp(argv[i], "--seeds") || !strcmp(argv[i], "--parallel")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dpt train: %s needs a value\n", argv[i]);
                goto out;
            }
            const char *opt = argv[i], *val = argv[++i];
            if (!strcmp(opt, "--parallel")) {
                if (dpt_cli_parse_u64("train", opt, val, 1, 256, &parallel))
                    goto out;
            } else {
                free(seeds);
                if ((code = train_parse_seeds(val, &seeds, &nseeds)) != DPT_EXIT_OK)
                    goto out;
                code = DPT_EXIT_USAGE;
            }
        } else if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--resume")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dpt train: %s needs a value\n", argv[i]);
                goto out;
            }
            if (argv[i][2] == 's')
                sets[nsets++] = argv[++i];
            else
                resume_dir = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "dpt train: unknown option \"%s\" (try dpt train --help)\n", argv[i]);
            goto out;
        } else if (!config_path) {
            config_path = argv[i];
        } else {
            fprintf(stderr, "dpt train: unexpected argument \"%s\"\n", argv[i]);
            goto out;
        }
    }
    if (!config_path && !resume_dir) {
        fprintf(stderr, "dpt train: a CONFIG file or --resume DIR is required\n");
        code = train_usage(stderr, DPT_EXIT_USAGE);
        goto out;
    }
    if (config_path && resume_dir) {
        fprintf(stderr, "dpt train: give CONFIG or --resume DIR, not both (a resumed run uses "
                        "its saved config; change keys with --set)\n");
        goto out;
    }
    /* Under a launcher a bad config goes to the run, which compares it
     * with the other ranks' starts so that it is printed once. */
    int world, start_error = 0;
    char start_text[1024] = "";
    dpt_cli_launcher_rank(&world);
    if (config_path && (rc = dpt_config_load(c, config_path)) != 0)
        start_error = rc;
    for (int i = 0; !start_error && i < nsets; i++)
        start_error = dpt_config_set(c, sets[i]);
    if (start_error && (world == 1 || seeds)) {
        fprintf(stderr, "dpt train: %s\n", dpt_last_error());
        goto out;
    }
    if (start_error)
        snprintf(start_text, sizeof start_text, "%s", dpt_last_error());
    ui.job = dpt_config_job(c);
    if (seeds && resume_dir) {
        fprintf(stderr, "dpt train: --seeds starts new runs; resume each run directory on its "
                        "own\n");
        goto out;
    }
    if (parallel && !seeds) {
        fprintf(stderr, "dpt train: --parallel goes with --seeds\n");
        goto out;
    }
    if (seeds) {
        dpt__install_signals();
        code = train_seeds(c, seeds, nseeds, parallel);
        goto out;
    }
    if (resume_dir) {
        /* The job comes from the run's own config. */
        char path[4200];
        dpt_config_t *saved;
        snprintf(path, sizeof path, "%s/config.conf", resume_dir);
        if (dpt_config_create(&saved) == 0) {
            if (dpt_config_load(saved, path) == 0)
                ui.job = dpt_config_job(saved);
            dpt_config_destroy(saved);
        }
    }
    dpt_progress_init(&ui.progress, ui.quiet);
    dpt__install_signals();
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.resume_dir = resume_dir;
    o.on_event = train_on_event;
    o.user = &ui;
    o.stop_flag = &dpt__stop_flag;
    o.on_stall = train_on_stall;
    o.start_error = start_error;
    o.start_error_text = start_text;
    dpt_run_reason_t why;
    rc = dpt_train_run(c, &o, &why);
    if (rc) {
        dpt_progress_done(&ui.progress);
        if (!dpt_train_error_shared()) /* else rank 0 prints it */
            fprintf(stderr, "dpt train: %s\n", dpt_last_error());
        if (dpt_cli_launcher_rank(&world) > 0)
            dpt__train_let_rank0_report();
        code = dpt_cli_exit_code(rc);
        /* Under mpirun a failed run leaves MPI up when a peer may hang:
         * end every rank of the job rather than wait for it. */
        if (dpt_comm_mpi_initialized()) {
            fflush(stdout);
            fflush(stderr);
            dpt_comm_mpi_abort(code);
        }
    } else {
        /* Stopped at another rank's request (a signal that reached it
         * alone): as for SIGTERM. */
        int sig = __atomic_load_n(&dpt__stop_signal, __ATOMIC_RELAXED);
        sig = sig ? sig : SIGTERM;
        code = why == DPT_RUN_STOPPED ? 128 + sig : DPT_EXIT_OK;
        /* MPI left up after a success: a rank did not answer the end of the
         * run (reported as a note) and MPI_Finalize would wait for it. */
        if (dpt_comm_mpi_initialized()) {
            fflush(stdout);
            fflush(stderr);
            dpt_comm_mpi_abort(code);
        }
    }
out:
    free(sets);
    free(seeds);
    dpt_config_destroy(c);
    return code;
}

/* ---- dpt eval --------------------------------------------------------------------- */

static int eval_usage(FILE *f, int code)
{
    fprintf(f, "usage: dpt eval CHECKPOINT|RUN_DIR [--episodes N] [--seed S] [--stochastic]\n"
               "                [--set key=value]... [--json]\n\n"
               "Evaluates a checkpoint written by dpt train (a run directory: its newest valid\n"
               "checkpoint) with no config file: the model, env or dataset come from the\n"
               "checkpoint. Supervised: loss and accuracy on the test set (--set data_dir=...\n"
               "or test_csv=... when the data moved). RL: the mean return of N greedy episodes\n"
               "(default: the run's eval_episodes) on envs seeded from S (default: the run's\n"
               "seed); --stochastic samples the actions from the policy instead (a stream of\n"
               "the same seed; the same as --set eval_stochastic=true). --json prints one JSON\n"
               "object.\n");
    return code;
}

int dpt_cmd_eval(int argc, char **argv)
{
    const char *target = NULL;
    uint64_t episodes = 0, seed = UINT64_MAX;
    int json = 0, nsets = 0;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    if (!sets)
        return DPT_EXIT_FAIL;
    int code = DPT_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            code = eval_usage(stdout, DPT_EXIT_OK);
            goto out;
        }
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--stochastic")) {
            sets[nsets++] = "eval_stochastic=true";
        } else if (!strcmp(argv[i], "--episodes") || !strcmp(argv[i], "--seed") ||
                   !strcmp(argv[i], "--set")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dpt eval: %s needs a value\n", argv[i]);
                goto out;
            }
            const char *opt = argv[i], *val = argv[++i];
            if (!strcmp(opt, "--set"))
                sets[nsets++] = val;
            else if (!strcmp(opt, "--episodes") &&
                     dpt_cli_parse_u64("eval", opt, val, 1, 1000000, &episodes))
                goto out;
            else if (!strcmp(opt, "--seed") &&
                     dpt_cli_parse_u64("eval", opt, val, 0, 4294967295u, &seed))
                goto out;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "dpt eval: unknown option \"%s\" (try dpt eval --help)\n", argv[i]);
            goto out;
        } else if (!target) {
            target = argv[i];
        } else {
            fprintf(stderr,
                    "dpt eval: unexpected argument \"%s\" (a checkpoint carries its "
                    "config; change keys with --set)\n",
                    argv[i]);
            goto out;
        }
    }
    if (!target) {
        code = eval_usage(stderr, DPT_EXIT_USAGE);
        goto out;
    }
    dpt_eval_result_t r;
    char path[4200];
    dpt_job_t job;
    int rc = dpt_eval_checkpoint(target, sets, (size_t)nsets, (size_t)episodes, seed, &r, path,
                                 sizeof path, &job);
    if (rc) {
        fprintf(stderr, "dpt eval: %s\n", dpt_last_error());
        code = dpt_cli_exit_code(rc);
        goto out;
    }
    int regress = !DPT_JOB_IS_RL(job) && !isnan(r.rmse);
    if (json && regress)
        printf("{\"checkpoint\":\"%s\",\"job\":\"%s\",\"samples\":%zu,\"loss\":%.17g,"
               "\"rmse\":%.17g,\"mae\":%.17g,\"r2\":%.17g}\n",
               path, dpt_job_name(job), r.count, r.loss, r.rmse, r.mae, r.r2);
    else if (json && !DPT_JOB_IS_RL(job))
        printf("{\"checkpoint\":\"%s\",\"job\":\"%s\",\"samples\":%zu,\"loss\":%.17g,"
               "\"accuracy\":%.17g}\n",
               path, dpt_job_name(job), r.count, r.loss, r.accuracy);
    else if (json)
        printf("{\"checkpoint\":\"%s\",\"job\":\"%s\",\"episodes\":%zu,\"mean_return\":%.17g,"
               "\"mean_length\":%.17g,\"stochastic\":%s}\n",
               path, dpt_job_name(job), r.count, r.mean_return, r.mean_length,
               r.stochastic ? "true" : "false");
    else if (regress)
        printf("%s: %zu test samples, loss %.4f, rmse %.4f, mae %.4f, r2 %.4f\n", path, r.count,
               r.loss, r.rmse, r.mae, r.r2);
    else if (!DPT_JOB_IS_RL(job))
        printf("%s: %zu test samples, loss %.4f, accuracy %.4f\n", path, r.count, r.loss,
               r.accuracy);
    else
        printf("%s: %s policy, %zu episodes: mean return %.2f, mean length %.1f\n", path,
               r.stochastic ? "stochastic" : "greedy", r.count, r.mean_return, r.mean_length);
    code = DPT_EXIT_OK;
out:
    free(sets);
    return code;
}

/* ---- dpt init ---------------------------------------------------------------------- */

int dpt_cmd_init(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: dpt init JOB [FILE]\n\nWrites a commented starter config for JOB "
               "(supervised, ppo, ddppo, appo, impala): every key\nof the job with its default and "
               "meaning. "
               "Without FILE it goes to standard output;\nan existing FILE is not "
               "overwritten.\n");
        return DPT_EXIT_OK;
    }
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: dpt init JOB [FILE]\n");
        return DPT_EXIT_USAGE;
    }
    dpt_job_t job;
    if (dpt_job_parse(argv[1], &job) != 0) {
        fprintf(stderr, "dpt init: %s\n", dpt_last_error());
        return DPT_EXIT_USAGE;
    }
    size_t n = dpt_config_format_starter(job, NULL, 0);
    char *text = malloc(n + 1);
    if (!text)
        return DPT_EXIT_FAIL;
    dpt_config_format_starter(job, text, n + 1);
    int code = DPT_EXIT_OK;
    if (argc == 2) {
        fputs(text, stdout);
    } else {
        FILE *f = fopen(argv[2], "wx"); /* never overwrite */
        if (!f) {
            struct stat sb;
            int exists = stat(argv[2], &sb) == 0;
            fprintf(stderr, "dpt init: %s: %s\n", argv[2],
                    exists ? "exists; not overwritten" : "cannot create");
            code = exists ? DPT_EXIT_USAGE : DPT_EXIT_FAIL;
        } else {
            int bad = fputs(text, f) < 0;
            if (fclose(f) != 0 || bad) {
                fprintf(stderr, "dpt init: writing %s failed\n", argv[2]);
                code = DPT_EXIT_FAIL;
            } else {
                printf("dpt init: wrote %s (job %s); train with: dpt train %s\n", argv[2], argv[1],
                       argv[2]);
            }
        }
    }
    free(text);
    return code;
}

/* ---- dpt demo ---------------------------------------------------------------------- */

/* Two interleaved spirals through the supervised trainer: a task no linear
 * model solves, in a couple of seconds, with no data to download. */
int dpt_cmd_demo(int argc, char **argv)
{
    uint64_t seed = 1, epochs = 60;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: dpt demo [--seed N] [--epochs N] [--quiet]\n\n"
                   "Trains an MLP 2-64-64-2 (tanh, softmax cross-entropy, Adam) on two\n"
                   "interleaved spirals (the built-in dataset = spirals of the supervised job)\n"
                   "and prints the test accuracy every 10 epochs. Writes no files.\n");
            return DPT_EXIT_OK;
        }
        if ((!strcmp(argv[i], "--seed") || !strcmp(argv[i], "--epochs")) && i + 1 < argc) {
            int is_seed = argv[i][2] == 's';
            if (dpt_cli_parse_u64("demo", argv[i], argv[i + 1], is_seed ? 0 : 1,
                                  is_seed ? 4294967295u : 100000, is_seed ? &seed : &epochs))
                return DPT_EXIT_USAGE;
            i++;
        } else if (!strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else {
            fprintf(stderr, "dpt demo: unknown argument \"%s\" (try --help)\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }
    char s_seed[64], s_epochs[64];
    snprintf(s_seed, sizeof s_seed, "seed=%llu", (unsigned long long)seed);
    snprintf(s_epochs, sizeof s_epochs, "epochs=%llu", (unsigned long long)epochs);
    const char *sets[] = {"job=supervised", "dataset=spirals",
                          "hidden=64,64",   "activation=tanh",
                          "batch_size=128", "num_devices=1",
                          "lr=0.01",        "lr_schedule=linear",
                          "lr_end=0.001",   s_seed,
                          s_epochs};
    dpt_config_t *c = NULL;
    dpt_trainer_t *t = NULL;
    int rc = dpt_config_create(&c);
    for (size_t i = 0; !rc && i < sizeof sets / sizeof sets[0]; i++)
        rc = dpt_config_set(c, sets[i]);
    if (!rc)
        rc = dpt_config_finalize(c);
    if (!rc)
        rc = dpt_trainer_create(&t, c, NULL);
    dpt_train_result_t r;
    memset(&r, 0, sizeof r);
    if (!rc && !quiet)
        printf("dpt demo: two spirals, MLP 2-64-64-2 tanh, Adam, gemm %s\n",
               dpt_gemm_describe(dpt_gemm_get_backend()));
    while (!rc && !r.finished) {
        rc = dpt_trainer_iterate(t, &r);
        if (!rc && !quiet && (r.iteration % 10 == 0 || r.iteration == 1 || r.finished))
            printf("%s\n", r.line);
    }
    if (!rc)
        printf("dpt demo: test accuracy %.1f%% after %llu epochs\n",
               100.0 * dpt_train_result_get(&r, "test_accuracy"), (unsigned long long)r.iteration);
    else
        fprintf(stderr, "dpt demo: %s\n", dpt_last_error());
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    return dpt_cli_exit_code(rc);
}
