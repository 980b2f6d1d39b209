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
 * median of 9 timed calls after a warm-up. */
static double br_gemm_peak(void)
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
    double peak = br_gemm_peak();
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

int dpt_bench_ppo(int argc, char **argv)
{
    long steps = 500000, seeds = 3, devices = 1;
    int json = 0, profile = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: dpt bench ppo [--steps N] [--seeds N] [--devices N] [--profile] "
                   "[--json]\n\n"
                   "PPO on CartPole-v1 with CleanRL's settings (4 envs x 128 steps, 4\n"
                   "minibatches, 4 epochs, lr 2.5e-4 annealed, 64-64 tanh): wall time per seed.\n"
                   "--profile: then the time of each phase per optimizer step and device,\n"
                   "and of sampling per iteration, with FLOPs and the share of one-thread GEMM\n"
                   "peak (summed over the seeds).\n");
            return DPT_EXIT_OK;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--seeds") && i + 1 < argc) {
            seeds = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            devices = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--profile")) {
            profile = 1;
        } else {
            fprintf(stderr, "dpt bench ppo: unknown option \"%s\"\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }
    if (steps < 512 || seeds < 1 || seeds > 100 || devices < 1 || devices > 64) {
        fprintf(stderr, "dpt bench ppo: need --steps >= 512, 1 <= --seeds <= 100, "
                        "1 <= --devices <= 64\n");
        return DPT_EXIT_USAGE;
    }
    double times[100], prof_steps = 0.0, prof_iters = 0.0, prof_rows = 0.0, prof_wall = 0.0;
    int solved = 0;
    if (profile) {
        dpt_profile_reset();
        dpt_profile_enable(1);
    }
    if (!json) {
        br_command(argc, argv);
        printf("%-6s %10s %10s %12s %14s\n", "seed", "steps", "wall_s", "steps_per_s",
               "return_last20");
    }
    for (long s = 1; s <= seeds; s++) {
        char set_seed[64], set_steps[64], set_dev[64];
        snprintf(set_seed, sizeof set_seed, "seed=%ld", s);
        snprintf(set_steps, sizeof set_steps, "total_timesteps=%ld", steps);
        snprintf(set_dev, sizeof set_dev, "num_devices=%ld", devices);
        const char *sets[] = {"job=ppo", "env=CartPole-v1", set_seed, set_steps, set_dev};
        dpt_trainer_t *t = NULL;
        dpt_train_result_t r;
        memset(&r, 0, sizeof r);
        double t0 = 0.0;
        int rc = br_trainer(&t, sets, sizeof sets / sizeof sets[0]);
        if (!rc)
            t0 = dpt_now();
        while (!rc && !r.finished) {
            rc = dpt_trainer_iterate(t, &r);
            prof_iters += 1.0;
        }
        double dt = dpt_now() - t0;
        prof_rows += (double)r.timesteps_total;
        prof_wall += dt;
        dpt_trainer_destroy(t);
        if (rc) {
            fprintf(stderr, "dpt bench ppo: %s\n", dpt_last_error());
            return DPT_EXIT_FAIL;
        }
        double last20 = dpt_train_result_get(&r, "episode_reward_mean_last20");
        times[s - 1] = dt;
        solved += last20 >= 475.0;
        if (json)
            printf("{\"bench\":\"ppo\",\"seed\":%ld,\"steps\":%llu,\"wall_s\":%.3f,"
                   "\"steps_per_s\":%.0f,\"return_last20\":%.1f}\n",
                   s, (unsigned long long)r.timesteps_total, dt, (double)r.timesteps_total / dt,
                   last20);
        else
            printf("%-6ld %10llu %10.2f %12.0f %14.1f\n", s, (unsigned long long)r.timesteps_total,
                   dt, (double)r.timesteps_total / dt, last20);
        fflush(stdout);
    }
    if (!json)
        printf("median wall time %.2f s; %d of %ld seeds reached a last-20 return >= 475\n",
               dpt_median(times, (size_t)seeds), solved, seeds);
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
