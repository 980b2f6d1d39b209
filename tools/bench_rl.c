/*
 * dpt bench ppo    — wall time of PPO with CleanRL's CartPole settings for
 *                    a fixed number of env steps (default 500k), per seed,
 *                    with the return reached (mean of the last 20 episodes).
 * dpt bench ddppo  — env steps per second of DD-PPO on CartPole with 1..N
 *                    worker threads (each with the same envs per worker), and
 *                    the scaling over one worker.
 * Figures are medians of repeated runs, printed with the command line.
 */
#include "cli.h"
#include "dpt/comm.h"
#include "dpt/dpt.h"
#include "dpt/trainer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int br_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double br_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, br_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
    const dpt_env_class_t *cls = dpt_env_find("CartPole-v1");
    double times[100];
    int solved = 0;
    if (!json) {
        br_command(argc, argv);
        printf("%-6s %10s %10s %12s %14s\n", "seed", "steps", "wall_s", "steps_per_s",
               "return_last20");
    }
    for (long s = 1; s <= seeds; s++) {
        dpt_rl_config_t c = dpt_rl_defaults();
        c.seed = (uint64_t)s;
        c.total_timesteps = (uint64_t)steps;
        c.num_devices = (int)devices;
        dpt_ppo_t *p;
        if (dpt_ppo_create(&p, cls, &c)) {
            fprintf(stderr, "dpt bench ppo: %s\n", dpt_last_error());
            return DPT_EXIT_FAIL;
        }
        dpt_rl_result_t r;
        double t0 = dpt_now();
        do {
            if (dpt_ppo_train(p, &r)) {
                fprintf(stderr, "dpt bench ppo: %s\n", dpt_last_error());
                dpt_ppo_destroy(p);
                return DPT_EXIT_FAIL;
            }
        } while (r.timesteps_total < (uint64_t)steps);
        double dt = dpt_now() - t0;
        dpt_ppo_destroy(p);
        times[s - 1] = dt;
        solved += r.episode_reward_mean_20 >= 475.0;
        if (json)
            printf("{\"bench\":\"ppo\",\"seed\":%ld,\"steps\":%llu,\"wall_s\":%.3f,"
                   "\"steps_per_s\":%.0f,\"return_last20\":%.1f}\n",
                   s, (unsigned long long)r.timesteps_total, dt,
                   (double)r.timesteps_total / dt, r.episode_reward_mean_20);
        else
            printf("%-6ld %10llu %10.2f %12.0f %14.1f\n", s,
                   (unsigned long long)r.timesteps_total, dt, (double)r.timesteps_total / dt,
                   r.episode_reward_mean_20);
        fflush(stdout);
    }
    if (!json)
        printf("median wall time %.2f s; %d of %ld seeds reached a last-20 return >= 475\n",
               br_median(times, (int)seeds), solved, seeds);
    return DPT_EXIT_OK;
}

/* ---- DD-PPO scaling ------------------------------------------------------------ */

typedef struct br_dd {
    dpt_comm_threads_group_t *group;
    dpt_ddppo_shared_t *shared;
    dpt_rl_config_t cfg;
    int iterations;
    int rc;
    double steps_per_s;
} br_dd_t;

typedef struct {
    br_dd_t *b;
    int rank;
} br_arg_t;

static void *br_worker(void *p)
{
    br_arg_t *a = p;
    dpt_comm_t *comm = NULL;
    dpt_ddppo_t *w = NULL;
    int rc = dpt_comm_threads_join(a->b->group, a->rank, &comm);
    if (!rc)
        rc = dpt_ddppo_worker_create(&w, dpt_env_find("CartPole-v1"), &a->b->cfg, comm,
                                     a->b->shared);
    dpt_rl_result_t r;
    double t0 = 0.0;
    uint64_t s0 = 0;
    for (int i = 0; !rc && i < a->b->iterations + 2; i++) {
        if (i == 2) { /* two warm-up iterations */
            t0 = dpt_now();
            s0 = r.timesteps_total;
        }
        rc = dpt_ddppo_worker_train(w, &r);
    }
    if (!rc && a->rank == 0)
        a->b->steps_per_s = (double)(r.timesteps_total - s0) / (dpt_now() - t0);
    if (rc)
        a->b->rc = rc;
    dpt_ddppo_worker_destroy(w);
    dpt_comm_destroy(comm);
    return NULL;
}

static double br_dd_once(int workers, int iterations, int envs)
{
    br_dd_t b;
    memset(&b, 0, sizeof b);
    b.cfg = dpt_rl_defaults();
    b.cfg.num_envs = (size_t)envs;
    b.cfg.sync_frac = 1.0; /* measure raw scaling, no preemption */
    b.cfg.check_weights_every = 0;
    b.iterations = iterations;
    if (dpt_comm_threads_group_create(&b.group, workers, NULL) ||
        dpt_ddppo_shared_create(&b.shared, workers))
        return -1.0;
    pthread_t th[64];
    br_arg_t args[64];
    for (int i = 0; i < workers; i++) {
        args[i] = (br_arg_t){&b, i};
        pthread_create(&th[i], NULL, br_worker, &args[i]);
    }
    for (int i = 0; i < workers; i++)
        pthread_join(th[i], NULL);
    dpt_ddppo_shared_destroy(b.shared);
    dpt_comm_threads_group_destroy(b.group);
    return b.rc ? -1.0 : b.steps_per_s;
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
        double med = br_median(v, reps);
        if (w == 1)
            one = med;
        if (json) {
            printf("{\"bench\":\"ddppo\",\"workers\":%d,\"envs_per_worker\":%d,"
                   "\"env_steps_per_s\":%.0f,\"scaling\":%.3f}\n", w, envs, med, med / one);
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
