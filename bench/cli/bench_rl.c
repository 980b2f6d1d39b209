/*
 * dpt bench ppo    — wall time of PPO with CleanRL's CartPole settings for
 *                    a fixed number of env steps (default 500k), per seed,
 *                    with the return reached (mean of the last 20 episodes).
 * dpt bench ddppo  — env steps per second of DD-PPO on CartPole with 1..N
 *                    worker threads (each with the same envs per worker), and
 *                    the scaling over one worker.
 * Figures are medians of repeated runs, printed with the command line.
 *
 * dpt bench ppo --profile also prints where the time went (dpt/profile.h):
 * per optimizer step and device, each phase of the learn step; per
 * iteration, env stepping against the policy's forward pass while
 * sampling; with the analytic FLOPs of each phase and their share of the
 * peak measured in the same run by a one-thread GEMM.
 */
#include "../../tools/cli.h"
#include "dpt/dpt.h"
#include "dpt/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FLOPs of CartPole's 64-64 tanh actor (2 logits) and critic (1 value)
 * per row: forward, and backward without the gradient of the input. */
typedef struct br_flops {
    double fwd, bwd;
} br_flops_t;

static br_flops_t br_mlp_flops(size_t in, const size_t *hidden, size_t nh, size_t out)
{
    br_flops_t f = {0.0, 0.0};
    size_t a = in;
    for (size_t i = 0; i <= nh; i++) {
        size_t b = i < nh ? hidden[i] : out;
        double mm = 2.0 * (double)a * (double)b;
        f.fwd += mm;
        f.bwd += i == 0 ? mm : 2.0 * mm; /* dW, and dX past the first layer */
        a = b;
    }
    return f;
}

/* GFLOP/s of one thread's GEMM at 512^3 with the current backend: the
 * median of 9 timed calls after a warm-up (tools/cli.h). */
double dpt__bench_gemm_peak(void)
{
    const size_t n = 512;
    float *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b),
          *c = malloc(n * n * sizeof *c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return 0.0;
    }
    for (size_t i = 0; i < n * n; i++) {
        a[i] = (float)(i % 7) * 0.125f;
        b[i] = (float)(i % 5) * 0.25f;
    }
    double t[9];
    dpt_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < 9; r++) {
        double t0 = dpt_now();
        dpt_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = dpt_now() - t0;
    }
    free(a), free(b), free(c);
    double med = dpt_median(t, 9);
    return med > 0.0 ? 2.0 * (double)n * n * n / med * 1e-9 : 0.0;
}

/* The phases of one optimizer step, in the order they run. */
static const dpt_profile_phase_t br_learn_phases[] = {
    DPT_PROF_DISPATCH,   DPT_PROF_FORWARD, DPT_PROF_LOSS,        DPT_PROF_BACKWARD,
    DPT_PROF_WAIT_GRADS, DPT_PROF_REDUCE,  DPT_PROF_WAIT_REDUCE, DPT_PROF_NORM,
    DPT_PROF_CLIP,       DPT_PROF_APPLY,   DPT_PROF_JOIN,        DPT_PROF_LEARN_OTHER};
static const dpt_profile_phase_t br_iter_phases[] = {
    DPT_PROF_ENV_STEP, DPT_PROF_ACT, DPT_PROF_SAMPLE_OTHER, DPT_PROF_BATCH, DPT_PROF_OUTSIDE};

/* Prints the profile of `devices` slots, summed over the runs since the
 * last reset: `steps` optimizer steps and `iters` iterations of `rows`
 * env steps in all, minibatches of `mb` rows. */
static void br_print_profile(const char *slot, const dpt_profile_t *p, int devices, double steps,
                             double iters, double rows, double mb, double wall)
{
    static const size_t hid[2] = {64, 64};
    br_flops_t act = br_mlp_flops(4, hid, 2, 2), val = br_mlp_flops(4, hid, 2, 1);
    double fwd_row = act.fwd + val.fwd, bwd_row = act.bwd + val.bwd;
    double peak = dpt__bench_gemm_peak();
    printf("\n# profile: %d %s(s); %.0f optimizer steps of %.0f rows in all, %.0f iterations "
           "of %.0f env steps",
           devices, slot[0] == 'w' ? "worker" : "device", steps, mb, iters,
           rows / (iters > 0 ? iters : 1));
    if (wall > 0.0)
        printf("; wall %.2f s", wall);
    printf("\n");
    printf("# peak: one-thread GEMM 512^3 with %s: %.1f GFLOP/s per core\n",
           dpt_gemm_describe(dpt_gemm_get_backend()), peak);
    char hd[32];
    printf("%-13s", "per step");
    for (int d = 0; d < devices; d++)
        printf("  %8s", (snprintf(hd, sizeof hd, "%s%d_us", slot, d), hd));
    printf("  %9s  %8s  %7s\n", "MFLOP", "GFLOP/s", "%peak");
    double learn_us = 0.0, flop_step = (fwd_row + bwd_row) * mb;
    for (size_t i = 0; i < sizeof br_learn_phases / sizeof *br_learn_phases; i++) {
        int ph = br_learn_phases[i];
        double worst = 0.0;
        printf("%-13s", dpt_profile_phase_name(ph));
        for (int d = 0; d < devices; d++) {
            double us = steps > 0 ? p[d].seconds[ph] / steps * 1e6 : 0.0;
            worst = us > worst ? us : worst;
            printf("  %8.2f", us);
        }
        learn_us += steps > 0 ? p[0].seconds[ph] / steps * 1e6 : 0.0;
        double fl = ph == DPT_PROF_FORWARD    ? fwd_row * mb
                    : ph == DPT_PROF_BACKWARD ? bwd_row * mb
                                              : 0.0;
        if (fl > 0.0 && worst > 0.0)
            printf("  %9.3f  %8.1f  %6.1f%%\n", fl * 1e-6, fl / worst * 1e-3,
                   100.0 * fl / worst * 1e-3 / devices / peak);
        else
            printf("\n");
    }
    printf("%-13s  %8.2f", "step (dev0)", learn_us);
    for (int d = 1; d < devices; d++)
        printf("  %8s", "");
    printf("  %9.3f  %8.1f  %6.1f%%\n", flop_step * 1e-6, flop_step / learn_us * 1e-3,
           100.0 * flop_step / learn_us * 1e-3 / devices / peak);
    printf("\n%-13s  %10s  %10s  %9s  %8s  %7s\n", "per iteration", "dev0_ms", "total_s", "MFLOP",
           "GFLOP/s", "%peak");
    double rows_it = iters > 0 ? rows / iters : 0.0;
    for (size_t i = 0; i < sizeof br_iter_phases / sizeof *br_iter_phases; i++) {
        int ph = br_iter_phases[i];
        double ms = iters > 0 ? p[0].seconds[ph] / iters * 1e3 : 0.0;
        printf("%-13s  %10.3f  %10.3f", dpt_profile_phase_name(ph), ms, p[0].seconds[ph]);
        double fl = ph == DPT_PROF_ACT ? fwd_row * rows_it : 0.0;
        if (fl > 0.0 && ms > 0.0)
            printf("  %9.3f  %8.1f  %6.1f%%\n", fl * 1e-6, fl / ms * 1e-6,
                   100.0 * fl / ms * 1e-6 / peak);
        else
            printf("\n");
    }
    double learn_s = 0.0, sample_s = 0.0;
    for (size_t i = 0; i < sizeof br_learn_phases / sizeof *br_learn_phases; i++)
        learn_s += p[0].seconds[br_learn_phases[i]];
    learn_s += p[0].seconds[DPT_PROF_BATCH];
    sample_s = p[0].seconds[DPT_PROF_ENV_STEP] + p[0].seconds[DPT_PROF_ACT] +
               p[0].seconds[DPT_PROF_SAMPLE_OTHER];
    double learn_flop = flop_step * steps;
    printf("\nsampling %.3f s, learning %.3f s (batch + steps), outside %.3f s; learn phase "
           "%.1f GFLOP/s = %.1f%% of %d x %.1f GFLOP/s\n",
           sample_s, learn_s, p[0].seconds[DPT_PROF_OUTSIDE], learn_flop / learn_s * 1e-9,
           100.0 * learn_flop / learn_s * 1e-9 / devices / peak, devices, peak);
}

/* A trainer from "key=value" settings. */
static int br_trainer(dpt_trainer_t **t, const char *const *sets, size_t n)
{
    dpt_config_t *c;
    int rc = dpt_config_create(&c);
    for (size_t i = 0; !rc && i < n; i++)
        rc = dpt_config_set(c, sets[i]);
    if (!rc)
        rc = dpt_config_finalize(c);
    if (!rc)
        rc = dpt_trainer_create(t, c, NULL);
    dpt_config_destroy(c);
    return rc;
}

static void br_command(int argc, char **argv)
{
    printf("# command: dpt bench");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
}

/* What one PPO run gave. */
typedef struct br_ppo_run {
    double wall, learn, sample, solve_s, last20;
    uint64_t steps, solve_steps; /* solve_steps 0: not solved */
    double iters;
    long devices;
} br_ppo_run_t;

typedef struct br_ppo_opts {
    const char *config; /* NULL: CleanRL's settings (the built-in defaults) */
    const char *sets[32];
    int nsets;
    long steps; /* 0: the config's total_timesteps */
    int until_solved;
} br_ppo_opts_t;

/* One run: PPO on CartPole-v1 (or the config) with `seed` and `devices`
 * (0: the config's).
 * Solved: the first iteration after which the mean of the last 20 episodes
 * is >= 475, timed from the start of training. */
static int br_ppo_once(const br_ppo_opts_t *o, long seed, long devices, br_ppo_run_t *out)
{
    memset(out, 0, sizeof *out);
    char set_seed[64], set_steps[64], set_dev[64];
    snprintf(set_seed, sizeof set_seed, "seed=%ld", seed);
    snprintf(set_steps, sizeof set_steps, "total_timesteps=%ld", o->steps);
    snprintf(set_dev, sizeof set_dev, "num_devices=%ld", devices);
    dpt_config_t *c;
    int rc = dpt_config_create(&c);
    if (!rc && o->config)
        rc = dpt_config_load(c, o->config);
    if (!rc && !o->config)
        rc = dpt_config_set(c, "job=ppo");
    if (!rc && !o->config)
        rc = dpt_config_set(c, "env=CartPole-v1");
    for (int i = 0; !rc && i < o->nsets; i++)
        rc = dpt_config_set(c, o->sets[i]);
    if (!rc)
        rc = dpt_config_set(c, set_seed);
    if (!rc && o->steps > 0)
        rc = dpt_config_set(c, set_steps);
    if (!rc && devices > 0)
        rc = dpt_config_set(c, set_dev);
    if (!rc)
        rc = dpt_config_finalize(c);
    if (!rc && devices <= 0)
        devices = (long)dpt_config_int(c, dpt_config_key_find("num_devices"));
    out->devices = devices;
    dpt_trainer_t *t = NULL;
    if (!rc)
        rc = dpt_trainer_create(&t, c, NULL);
    dpt_config_destroy(c);
    dpt_train_result_t r;
    memset(&r, 0, sizeof r);
    double t0 = dpt_now();
    while (!rc && !r.finished) {
        rc = dpt_trainer_iterate(t, &r);
        if (rc)
            break;
        out->iters += 1.0;
        out->learn += dpt_train_result_get(&r, "timing_breakdown/learn_time_ms") * 1e-3;
        out->sample += dpt_train_result_get(&r, "timing_breakdown/sample_time_ms") * 1e-3;
        double l20 = dpt_train_result_get(&r, "episode_reward_mean_last20");
        if (!out->solve_steps && l20 >= 475.0) {
            out->solve_s = dpt_now() - t0;
            out->solve_steps = r.timesteps_total;
            if (o->until_solved)
                break;
        }
    }
    out->wall = dpt_now() - t0;
    out->steps = r.timesteps_total;
    out->last20 = dpt_train_result_get(&r, "episode_reward_mean_last20");
    dpt_trainer_destroy(t);
    return rc;
}

static void br_ppo_line(int json, long seed, long devices, const br_ppo_run_t *x)
{
    if (json) {
        printf("{\"bench\":\"ppo\",\"seed\":%ld,\"devices\":%ld,\"steps\":%llu,\"wall_s\":%.3f,"
               "\"learn_s\":%.3f,\"sample_s\":%.3f,\"steps_per_s\":%.0f,\"return_last20\":%.1f,"
               "\"solve_s\":%.3f,\"solve_steps\":%llu}\n",
               seed, devices, (unsigned long long)x->steps, x->wall, x->learn, x->sample,
               (double)x->steps / x->wall, x->last20, x->solve_steps ? x->solve_s : -1.0,
               (unsigned long long)x->solve_steps);
    } else {
        printf("%-5ld %4ld %9llu %8.3f %8.3f %8.3f %11.0f %8.1f", seed, devices,
               (unsigned long long)x->steps, x->wall, x->learn, x->sample,
               (double)x->steps / x->wall, x->last20);
        if (x->solve_steps)
            printf(" %8.3f %9llu\n", x->solve_s, (unsigned long long)x->solve_steps);
        else
            printf(" %8s %9s\n", "-", "-");
    }
    fflush(stdout);
}

/* The median solve time of n runs (unsolved ones count as never). */
static void br_print_solves(const char *what, double *s, size_t n, int solved)
{
    double m = dpt_median(s, n);
    if (m < 1e29)
        printf("%s: median solve time %.3f s; %d of %zu runs solved (last-20 mean >= 475)\n", what,
               m, solved, n);
    else
        printf("%s: median solve time: not solved in most runs; %d of %zu runs solved (last-20 "
               "mean >= 475)\n",
               what, solved, n);
}

int dpt_bench_ppo(int argc, char **argv)
{
    long seeds = 3, devices = 0, pairs = 0;
    int json = 0, profile = 0;
    br_ppo_opts_t o = {NULL, {0}, 0, 500000, 0};
    int steps_given = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: dpt bench ppo [--steps N] [--seeds N] [--devices N] [--pairs N]\n"
                   "                     [--config FILE] [--set KEY=VALUE]... [--until-solved]\n"
                   "                     [--profile] [--json]\n\n"
                   "PPO on CartPole-v1 with CleanRL's settings (4 envs x 128 steps, 4\n"
                   "minibatches, 4 epochs, lr 2.5e-4 annealed, 64-64 tanh), or the --config file\n"
                   "(its total_timesteps unless --steps): per run the wall time, the learn and\n"
                   "sample phases (result.jsonl's timing), env steps/s, the last-20 return, and\n"
                   "when solved (last-20 mean >= 475, timed from the start of training).\n"
                   "--pairs N: N rounds of 1 device against --devices (default 2), seed = round,\n"
                   "the two taking turns to go first; medians and the median per-round ratios.\n"
                   "--until-solved: each run stops when solved.\n"
                   "--profile: then the time of each phase per optimizer step and device,\n"
                   "and of sampling per iteration, with FLOPs and the share of one-thread GEMM\n"
                   "peak (summed over the runs; not with --pairs).\n");
            return DPT_EXIT_OK;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            o.steps = atol(argv[++i]);
            steps_given = 1;
        } else if (!strcmp(argv[i], "--seeds") && i + 1 < argc) {
            seeds = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            devices = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--pairs") && i + 1 < argc) {
            pairs = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            o.config = argv[++i];
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (o.nsets == (int)(sizeof o.sets / sizeof o.sets[0])) {
                fprintf(stderr, "dpt bench ppo: at most 32 --set\n");
                return DPT_EXIT_USAGE;
            }
            o.sets[o.nsets++] = argv[++i];
        } else if (!strcmp(argv[i], "--until-solved")) {
            o.until_solved = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--profile")) {
            profile = 1;
        } else {
            fprintf(stderr, "dpt bench ppo: unknown option \"%s\"\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }
    if (o.config && !steps_given)
        o.steps = 0;
    if (pairs && devices == 0)
        devices = 2;
    if (!o.config && devices == 0)
        devices = 1;
    if ((steps_given && o.steps < 512) || seeds < 1 || seeds > 100 || devices < 0 || devices > 64 ||
        pairs < 0 || pairs > 100 || (profile && (pairs || o.config || o.nsets))) {
        fprintf(stderr, "dpt bench ppo: need --steps >= 512, 1 <= --seeds <= 100, "
                        "1 <= --devices <= 64, 0 <= --pairs <= 100; --profile (whose FLOPs are "
                        "those of CleanRL's settings) takes no --pairs, --config or --set\n");
        return DPT_EXIT_USAGE;
    }
    if (!json) {
        br_command(argc, argv);
        printf("%-5s %4s %9s %8s %8s %8s %11s %8s %8s %9s\n", "seed", "dev", "steps", "wall_s",
               "learn_s", "sample_s", "steps/s", "last20", "solve_s", "solve_at");
    }
    if (pairs) {
        static br_ppo_run_t a[100], b[100];
        double wall_ratio[100], learn_ratio[100], w1[100], w2[100], s1[100], s2[100];
        int solved1 = 0, solved2 = 0;
        for (long k = 0; k < pairs; k++) {
            long seed = k + 1;
            for (int turn = 0; turn < 2; turn++) {
                int second = (turn + (int)k) % 2; /* odd rounds: the D-device run first */
                br_ppo_run_t *x = second ? &b[k] : &a[k];
                long dev = second ? devices : 1;
                if (br_ppo_once(&o, seed, dev, x) != 0) {
                    fprintf(stderr, "dpt bench ppo: %s\n", dpt_last_error());
                    return DPT_EXIT_FAIL;
                }
                br_ppo_line(json, seed, dev, x);
            }
            wall_ratio[k] = b[k].wall / a[k].wall;
            learn_ratio[k] = a[k].learn / b[k].learn;
            w1[k] = a[k].wall;
            w2[k] = b[k].wall;
            s1[k] = a[k].solve_steps ? a[k].solve_s : 1e30;
            s2[k] = b[k].solve_steps ? b[k].solve_s : 1e30;
            solved1 += a[k].solve_steps != 0;
            solved2 += b[k].solve_steps != 0;
        }
        size_t n = (size_t)pairs;
        if (!json) {
            printf("%ld pairs: median wall 1 device %.3f s, %ld devices %.3f s; median per-pair "
                   "wall ratio (%ld / 1) %.3f; median per-pair learn-phase speedup %.3f\n",
                   pairs, dpt_median(w1, n), devices, dpt_median(w2, n), devices,
                   dpt_median(wall_ratio, n), dpt_median(learn_ratio, n));
            br_print_solves("1 device", s1, n, solved1);
            char what[32];
            snprintf(what, sizeof what, "%ld devices", devices);
            br_print_solves(what, s2, n, solved2);
        }
        return DPT_EXIT_OK;
    }
    double times[100], solves[100], prof_steps = 0.0, prof_iters = 0.0, prof_rows = 0.0,
                                    prof_wall = 0.0;
    int solved = 0;
    if (profile) {
        dpt_profile_reset();
        dpt_profile_enable(1);
    }
    for (long s = 1; s <= seeds; s++) {
        br_ppo_run_t x;
        if (br_ppo_once(&o, s, devices, &x) != 0) {
            fprintf(stderr, "dpt bench ppo: %s\n", dpt_last_error());
            return DPT_EXIT_FAIL;
        }
        prof_iters += x.iters;
        prof_rows += (double)x.steps;
        prof_wall += x.wall;
        times[s - 1] = x.wall;
        solves[s - 1] = x.solve_steps ? x.solve_s : 1e30;
        solved += x.solve_steps != 0;
        br_ppo_line(json, s, x.devices, &x);
    }
    if (!json) {
        printf("median wall time %.3f s\n", dpt_median(times, (size_t)seeds));
        br_print_solves("all", solves, (size_t)seeds, solved);
    }
    if (profile) {
        dpt_profile_enable(0);
        static dpt_profile_t p[64];
        for (int d = 0; d < devices; d++)
            dpt_profile_get(d, &p[d]);
        /* One apply per device per optimizer step. */
        prof_steps = (double)p[0].count[DPT_PROF_APPLY];
        br_print_profile("dev", p, (int)devices, prof_steps, prof_iters, prof_rows, 128.0,
                         prof_wall);
    }
    return DPT_EXIT_OK;
}

/* ---- DD-PPO scaling ------------------------------------------------------------ */

/* Env steps/s of DD-PPO with `workers` threads over `iterations` iterations
 * after two warm-up ones; -1 on failure. */
static double br_dd_once(int workers, int iterations, int envs)
{
    char set_w[64], set_e[64];
    snprintf(set_w, sizeof set_w, "num_workers=%d", workers);
    snprintf(set_e, sizeof set_e, "num_envs_per_worker=%d", envs);
    /* CleanRL's learning settings per worker; no preemption, no weight
     * check: raw scaling. */
    const char *sets[] = {"job=ddppo",
                          "env=CartPole-v1",
                          set_w,
                          set_e,
                          "rollout_fragment_length=128",
                          "sgd_minibatch_size=128",
                          "num_sgd_iter=4",
                          "sync_frac=1",
                          "check_weights_every=0",
                          "total_timesteps=1000000000000"};
    dpt_trainer_t *t = NULL;
    dpt_train_result_t r;
    memset(&r, 0, sizeof r);
    int rc = br_trainer(&t, sets, sizeof sets / sizeof sets[0]);
    double t0 = 0.0;
    uint64_t s0 = 0;
    for (int i = 0; !rc && i < iterations + 2; i++) {
        if (i == 2) {
            t0 = dpt_now();
            s0 = r.timesteps_total;
        }
        rc = dpt_trainer_iterate(t, &r);
    }
    double v = rc ? -1.0 : (double)(r.timesteps_total - s0) / (dpt_now() - t0);
    dpt_trainer_destroy(t);
    return v;
}

int dpt_bench_ddppo(int argc, char **argv)
{
    int max_workers = 2, iterations = 100, reps = 5, envs = 4, json = 0, profile = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: dpt bench ddppo [--workers N] [--iterations N] [--reps N] [--envs N] "
                   "[--profile] [--json]\n\nDD-PPO on CartPole-v1 with 1..N worker threads "
                   "(each --envs envs x 128 steps per\niteration, CleanRL's learning settings): "
                   "env steps/s and scaling. The worker\ncounts take turns, --reps rounds; the "
                   "scaling is the median of each round's ratio\nto one worker. --profile: the "
                   "time of each phase per optimizer step and worker.\n");
            return DPT_EXIT_OK;
        } else if (!strcmp(argv[i], "--workers") && i + 1 < argc) {
            max_workers = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) {
            iterations = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--envs") && i + 1 < argc) {
            envs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--profile")) {
            profile = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            fprintf(stderr, "dpt bench ddppo: unknown option \"%s\"\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }
    if (max_workers < 1 || max_workers > 16 || iterations < 1 || reps < 1 || reps > 99 ||
        envs < 1) {
        fprintf(stderr, "dpt bench ddppo: need 1 <= --workers <= 16, --iterations >= 1, "
                        "1 <= --reps <= 99, --envs >= 1\n");
        return DPT_EXIT_USAGE;
    }
    if (!json)
        br_command(argc, argv);
    static double v[16][99];
    static dpt_profile_t acc[16][16];
    memset(acc, 0, sizeof acc);
    if (profile)
        dpt_profile_enable(1);
    for (int r = 0; r < reps; r++)
        for (int w = 1; w <= max_workers; w++) {
            dpt_profile_reset();
            v[w - 1][r] = br_dd_once(w, iterations, envs);
            if (v[w - 1][r] < 0) {
                fprintf(stderr, "dpt bench ddppo: %s\n", dpt_last_error());
                return DPT_EXIT_FAIL;
            }
            for (int k = 0; profile && k < w; k++) {
                dpt_profile_t p;
                dpt_profile_get(k, &p);
                for (int ph = 0; ph < DPT_PROF_PHASES; ph++) {
                    acc[w - 1][k].seconds[ph] += p.seconds[ph];
                    acc[w - 1][k].count[ph] += p.count[ph];
                }
            }
        }
    dpt_profile_enable(0);
    if (!json)
        printf("%-8s %14s %8s   (runs, in round order)\n", "workers", "env_steps/s", "scaling");
    for (int w = 1; w <= max_workers; w++) {
        double runs[99], ratio[99];
        for (int r = 0; r < reps; r++) {
            runs[r] = v[w - 1][r];
            ratio[r] = v[w - 1][r] / v[0][r];
        }
        double med = dpt_median(runs, (size_t)reps), sc = dpt_median(ratio, (size_t)reps);
        if (json) {
            printf("{\"bench\":\"ddppo\",\"workers\":%d,\"envs_per_worker\":%d,"
                   "\"env_steps_per_s\":%.0f,\"scaling\":%.3f}\n",
                   w, envs, med, sc);
        } else {
            printf("%-8d %14.0f %8.2f   (", w, med, sc);
            for (int r = 0; r < reps; r++)
                printf("%s%.0f", r ? " " : "", v[w - 1][r]);
            printf(")\n");
        }
    }
    for (int w = 1; profile && !json && w <= max_workers; w++) {
        double iters = (double)reps * (iterations + 2);
        br_print_profile("w", acc[w - 1], w, (double)acc[w - 1][0].count[DPT_PROF_APPLY], iters,
                         iters * 128.0 * envs * w, 128.0 * w, 0.0);
    }
    fflush(stdout);
    return DPT_EXIT_OK;
}
