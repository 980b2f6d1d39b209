/*
 * dpt bench ppo    — wall time of PPO with CleanRL's CartPole settings for
 *                    a fixed number of env steps (default 500k), per seed,
 *                    with the return reached (mean of the last 20 episodes).
 * dpt bench ddppo  — env steps per second of DD-PPO on CartPole with 1..N
 *                    worker threads (each with the same envs per worker), and
 *                    the scaling over one worker.
 * Figures are medians of repeated runs, printed with the command line.
 */
#include "../../tools/cli.h"
#include "dpt/dpt.h"
#include "dpt/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: dpt bench ppo [--steps N] [--seeds N] [--devices N] [--json]\n\n"
                   "PPO on CartPole-v1 with CleanRL's settings (4 envs x 128 steps, 4\n"
                   "minibatches, 4 epochs, lr 2.5e-4 annealed, 64-64 tanh): wall time per seed.\n");
            return DPT_EXIT_OK;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--seeds") && i + 1 < argc) {
            seeds = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            devices = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
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
    double times[100];
    int solved = 0;
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
        while (!rc && !r.finished)
            rc = dpt_trainer_iterate(t, &r);
        double dt = dpt_now() - t0;
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
    int max_workers = 2, iterations = 100, reps = 5, envs = 4, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: dpt bench ddppo [--workers N] [--iterations N] [--reps N] [--envs N] "
                   "[--json]\n\nDD-PPO on CartPole-v1 with 1..N worker threads (each --envs "
                   "envs x 128 steps per\niteration, CleanRL's learning settings): env steps/s "
                   "and scaling, median of --reps runs.\n");
            return DPT_EXIT_OK;
        } else if (!strcmp(argv[i], "--workers") && i + 1 < argc) {
            max_workers = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) {
            iterations = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--envs") && i + 1 < argc) {
            envs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            fprintf(stderr, "dpt bench ddppo: unknown option \"%s\"\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }
    if (max_workers < 1 || max_workers > 64 || iterations < 1 || reps < 1 || reps > 99 ||
        envs < 1) {
        fprintf(stderr, "dpt bench ddppo: bad option values\n");
        return DPT_EXIT_USAGE;
    }
    if (!json) {
        br_command(argc, argv);
        printf("%-8s %14s %8s   (runs)\n", "workers", "env_steps/s", "scaling");
    }
    double one = 0.0;
    for (int w = 1; w <= max_workers; w++) {
        double v[99];
        for (int r = 0; r < reps; r++) {
            v[r] = br_dd_once(w, iterations, envs);
            if (v[r] < 0) {
                fprintf(stderr, "dpt bench ddppo: %s\n", dpt_last_error());
                return DPT_EXIT_FAIL;
            }
        }
        double runs[99];
        memcpy(runs, v, (size_t)reps * sizeof *v);
        double med = dpt_median(v, (size_t)reps);
        if (w == 1)
            one = med;
        if (json) {
            printf("{\"bench\":\"ddppo\",\"workers\":%d,\"envs_per_worker\":%d,"
                   "\"env_steps_per_s\":%.0f,\"scaling\":%.3f}\n",
                   w, envs, med, med / one);
        } else {
            printf("%-8d %14.0f %8.2f   (", w, med, med / one);
            for (int r = 0; r < reps; r++)
                printf("%s%.0f", r ? " " : "", runs[r]);
            printf(")\n");
        }
        fflush(stdout);
    }
    return DPT_EXIT_OK;
}
