/*
 * dpt bench appo — APPO and IMPALA per seed: env steps/s, the learner's
 * utilization and load share, policy lag, when the run first reached the
 * target return and what it ended at.
 * dpt bench appo --vs-ppo — env steps/s of APPO against synchronous PPO with
 * the same network, fragment and minibatch sizes and the same updates per
 * env step, the two run in turns; medians and their ratio.
 */
#include "../../tools/cli.h"
#include "dpt/dpt.h"
#include "dpt/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A config file of --vs-ppo (NULL: the built-in CartPole settings); set by
 * the option parser. */
static const char *ba_ppo_file, *ba_appo_file;

/* A trainer from "key=value" settings: the config file `file` (when not
 * NULL), base[0..nbase), then extra. */
static int ba_trainer(dpt_trainer_t **t, const char *file, const char *const *base, size_t nbase,
                      const char *const *extra, size_t nextra)
{
    dpt_config_t *c;
    int rc = dpt_config_create(&c);
    if (!rc && file)
        rc = dpt_config_load(c, file);
    for (size_t i = 0; !rc && i < nbase; i++)
        rc = dpt_config_set(c, base[i]);
    for (size_t i = 0; !rc && i < nextra; i++)
        rc = dpt_config_set(c, extra[i]);
    if (!rc)
        rc = dpt_config_finalize(c);
    if (!rc)
        rc = dpt_trainer_create(t, c, NULL);
    dpt_config_destroy(c);
    return rc;
}

/* What one run did. */
typedef struct ba_run {
    double wall_s, steps_per_s, utilization, load_share, lag, final;
    double solve_steps, solve_s; /* NAN: never reached the target */
    unsigned long long steps;
} ba_run_t;

/* Trains to the end (or to stop once solved when stop_at_solve), recording
 * the learner's figures of every iteration. */
static int ba_run(const char *file, const char *const *sets, size_t n, const char *const *extra,
                  size_t nextra, double target, ba_run_t *out)
{
    dpt_trainer_t *t = NULL;
    memset(out, 0, sizeof *out);
    out->solve_steps = out->solve_s = NAN;
    int rc = ba_trainer(&t, file, sets, n, extra, nextra);
    if (rc)
        return rc;
    dpt_train_result_t r;
    memset(&r, 0, sizeof r);
    double t0 = dpt_now(), util = 0.0, grad = 0.0, load = 0.0, lag = 0.0;
    int iters = 0;
    while (!rc && !r.finished) {
        rc = dpt_trainer_iterate(t, &r);
        if (rc)
            break;
        iters++;
        double u = dpt_train_result_get(&r, "info/learner_utilization");
        util += isnan(u) ? 0.0 : u;
        double g = dpt_train_result_get(&r, "timing_breakdown/learner_grad_time_ms");
        double l = dpt_train_result_get(&r, "timing_breakdown/learner_load_time_ms");
        grad += isnan(g) ? 0.0 : g;
        load += isnan(l) ? 0.0 : l;
        double pl = dpt_train_result_get(&r, "info/policy_lag");
        lag += isnan(pl) ? 0.0 : pl;
        /* "Reached": the mean of a full window of 100 episodes. */
        if (isnan(out->solve_steps) && r.episodes_in_window >= 100 && r.reward_mean >= target) {
            out->solve_steps = (double)r.timesteps_total;
            out->solve_s = dpt_now() - t0;
        }
    }
    out->wall_s = dpt_now() - t0;
    dpt_trainer_destroy(t);
    if (rc)
        return rc;
    out->steps = (unsigned long long)r.timesteps_total;
    out->steps_per_s = (double)r.timesteps_total / out->wall_s;
    out->utilization = iters ? util / iters : 0.0;
    out->load_share = grad > 0.0 ? load / grad : 0.0;
    out->lag = iters ? lag / iters : 0.0;
    out->final = r.reward_mean;
    return DPT_OK;
}

static void ba_command(int argc, char **argv)
{
    printf("# command: dpt bench");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
}

/* APPO against PPO: CleanRL's CartPole sizes for both (fragments of 128
 * steps of 4 envs, minibatches of 128 rows, 4 passes: PPO's 4 epochs of 4
 * minibatches per 512 steps are APPO's 4 updates on each 128-step batch),
 * lr 2.5e-4, clip 0.5, 64-64 tanh; one sampler thread and one device. With
 * --ppo-config and --appo-config, those files instead (e.g. the MinAtar
 * examples), each run for the same steps without checkpoints or evaluation
 * episodes. Both report the mean return of their last 100 episodes. */
static int ba_vs_ppo(int argc, char **argv, long reps, long steps, int json)
{
    char set_steps[64];
    snprintf(set_steps, sizeof set_steps, "total_timesteps=%ld", steps);
    const char *ppo[] = {"job=ppo", "env=CartPole-v1", "num_devices=1", set_steps,
                         "checkpoint_every=0"};
    const char *files[] = {set_steps, "checkpoint_every=0", "eval_episodes=0",
                           "evaluation_interval=1000000000"};
    const int from_files = ba_ppo_file != NULL;
    const char *appo[] = {"job=appo",
                          "env=CartPole-v1",
                          "num_workers=1",
                          "num_devices=1",
                          "num_envs_per_worker=4",
                          "rollout_fragment_length=128",
                          "train_batch_size=128",
                          "num_sgd_iter=4",
                          "lr=0.00025",
                          "adam_eps=1e-5",
                          "grad_clip=0.5",
                          "min_sample_timesteps_per_iteration=50000",
                          set_steps,
                          "checkpoint_every=0"};
    double a[64], p[64], lag[64], util[64], ret_p[64], ret_a[64];
    if (!json) {
        ba_command(argc, argv);
        if (from_files)
            printf("# PPO: %s; APPO: %s; %ld steps each\n", ba_ppo_file, ba_appo_file, steps);
        else
            printf("# APPO: 1 sampler thread x 4 envs, fragments of 128, train batches of 128, "
                   "4 updates each; PPO: CleanRL's settings, num_devices = 1\n");
        printf("%-5s %14s %14s %8s %10s %12s %11s %11s\n", "rep", "ppo_steps/s", "appo_steps/s",
               "ratio", "appo_lag", "appo_util", "ppo_return", "appo_return");
    }
    const size_t nfiles = sizeof files / sizeof files[0];
    for (long k = 0; k < reps; k++) {
        ba_run_t rp, ra;
        int rc = from_files ? ba_run(ba_ppo_file, files, nfiles, NULL, 0, 1e30, &rp)
                            : ba_run(NULL, ppo, sizeof ppo / sizeof ppo[0], NULL, 0, 1e30, &rp);
        if (!rc)
            rc = from_files ? ba_run(ba_appo_file, files, nfiles, NULL, 0, 1e30, &ra)
                            : ba_run(NULL, appo, sizeof appo / sizeof appo[0], NULL, 0, 1e30, &ra);
        if (rc) {
            fprintf(stderr, "dpt bench appo: %s\n", dpt_last_error());
            return DPT_EXIT_FAIL;
        }
        p[k] = rp.steps_per_s;
        a[k] = ra.steps_per_s;
        lag[k] = ra.lag;
        util[k] = ra.utilization;
        ret_p[k] = rp.final;
        ret_a[k] = ra.final;
        if (json)
            printf("{\"bench\":\"appo_vs_ppo\",\"rep\":%ld,\"ppo_steps_per_s\":%.0f,"
                   "\"appo_steps_per_s\":%.0f,\"ratio\":%.3f,\"appo_policy_lag\":%.2f,"
                   "\"appo_learner_utilization\":%.3f,\"ppo_return\":%.3f,"
                   "\"appo_return\":%.3f}\n",
                   k + 1, p[k], a[k], a[k] / p[k], lag[k], util[k], ret_p[k], ret_a[k]);
        else
            printf("%-5ld %14.0f %14.0f %8.2f %10.1f %12.2f %11.2f %11.2f\n", k + 1, p[k], a[k],
                   a[k] / p[k], lag[k], util[k], ret_p[k], ret_a[k]);
        fflush(stdout);
    }
    double mp = dpt_median(p, (size_t)reps), ma = dpt_median(a, (size_t)reps);
    double rpm = dpt_median(ret_p, (size_t)reps), ram = dpt_median(ret_a, (size_t)reps);
    if (!json)
        printf("median: ppo %.0f, appo %.0f env steps/s: appo/ppo %.2f; return ppo %.2f, appo "
               "%.2f: appo/ppo %.3f\n",
               mp, ma, ma / mp, rpm, ram, rpm != 0.0 ? ram / rpm : (double)NAN);
    return DPT_EXIT_OK;
}

int dpt_bench_appo(int argc, char **argv)
{
    long seeds = 3, steps = 0, reps = 5;
    const char *env = "CartPole-v1";
    double target = NAN;
    int json = 0, vs_ppo = 0, nsets = 0;
    const char *sets[16];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf(
                "usage: dpt bench appo [--env CartPole-v1|Acrobot-v1] [--seeds N] [--steps N]\n"
                "                      [--target R] [--set KEY=VALUE]... [--json]\n"
                "       dpt bench appo --vs-ppo [--reps N] [--steps N] [--json]\n"
                "                      [--ppo-config FILE --appo-config FILE]\n\n"
                "APPO and IMPALA (APPO only on Acrobot) with the settings of\n"
                "examples/cartpole_appo.conf, per seed: env steps/s, learner utilization,\n"
                "load time over gradient time, policy lag, the steps and seconds until the\n"
                "mean return of 100 episodes first reached the target (475 on CartPole,\n"
                "-100 on Acrobot) and the final return. Steps: 1M (CartPole), 2M (Acrobot).\n"
                "--vs-ppo: env steps/s of APPO and of synchronous PPO with the same sizes\n"
                "(CleanRL's), in turns, --reps times (default 5), 500k steps each, and the\n"
                "mean return of each run's last 100 episodes. --ppo-config and --appo-config\n"
                "(both) run those config files instead (e.g. examples/minatar_breakout_ppo.conf\n"
                "and examples/minatar_breakout_appo.conf), without checkpoints or evaluation.\n"
                "--set: a key of the config over the example's (up to 16).\n");
            return DPT_EXIT_OK;
        } else if (!strcmp(argv[i], "--seeds") && i + 1 < argc) {
            seeds = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--env") && i + 1 < argc) {
            env = argv[++i];
        } else if (!strcmp(argv[i], "--target") && i + 1 < argc) {
            target = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (nsets == 16) {
                fprintf(stderr, "dpt bench appo: at most 16 --set\n");
                return DPT_EXIT_USAGE;
            }
            sets[nsets++] = argv[++i];
        } else if (!strcmp(argv[i], "--ppo-config") && i + 1 < argc) {
            ba_ppo_file = argv[++i];
        } else if (!strcmp(argv[i], "--appo-config") && i + 1 < argc) {
            ba_appo_file = argv[++i];
        } else if (!strcmp(argv[i], "--vs-ppo")) {
            vs_ppo = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            fprintf(stderr, "dpt bench appo: unknown option \"%s\"\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }
    int acrobot = !strcmp(env, "Acrobot-v1");
    if ((!acrobot && strcmp(env, "CartPole-v1")) || seeds < 1 || seeds > 100 || reps < 1 ||
        reps > 64 || steps < 0) {
        fprintf(stderr, "dpt bench appo: need --env CartPole-v1 or Acrobot-v1, 1 <= --seeds <= "
                        "100, 1 <= --reps <= 64, --steps >= 0\n");
        return DPT_EXIT_USAGE;
    }
    if ((ba_ppo_file != NULL) != (ba_appo_file != NULL) || (ba_ppo_file && !vs_ppo)) {
        fprintf(stderr, "dpt bench appo: --ppo-config and --appo-config go together, with "
                        "--vs-ppo\n");
        return DPT_EXIT_USAGE;
    }
    if (vs_ppo)
        return ba_vs_ppo(argc, argv, reps, steps ? steps : 500000, json);
    if (!steps)
        steps = acrobot ? 2000000 : 1000000;
    if (isnan(target))
        target = acrobot ? -100.0 : 475.0;
    char set_env[64], set_steps[64];
    snprintf(set_env, sizeof set_env, "env=%s", env);
    snprintf(set_steps, sizeof set_steps, "total_timesteps=%ld", steps);
    /* examples/cartpole_appo.conf */
    const char *base[] = {"env=CartPole-v1",
                          "num_workers=1",
                          "num_envs_per_worker=4",
                          "rollout_fragment_length=50",
                          "train_batch_size=500",
                          "num_sgd_iter=1",
                          "lr=0.0005",
                          "grad_clip=40",
                          "min_sample_timesteps_per_iteration=20000",
                          "learner_queue_size=1",
                          "checkpoint_every=0",
                          set_env,
                          set_steps};
    static const char *const jobs[] = {"job=appo", "job=impala"};
    if (!json) {
        ba_command(argc, argv);
        printf("%-7s %-5s %10s %8s %11s %6s %8s %8s %11s %10s %8s\n", "job", "seed", "steps",
               "wall_s", "steps/s", "util", "load/grad", "lag", "solve_steps", "solve_s", "final");
    }
    int reached[2] = {0, 0};
    for (int j = 0; j < (acrobot ? 1 : 2); j++) {
        for (long s = 1; s <= seeds; s++) {
            char set_seed[32];
            snprintf(set_seed, sizeof set_seed, "seed=%ld", s);
            const char *extra[18] = {jobs[j], set_seed};
            for (int k = 0; k < nsets; k++)
                extra[2 + k] = sets[k];
            ba_run_t r;
            int rc = ba_run(NULL, base, sizeof base / sizeof base[0], extra, 2 + (size_t)nsets,
                            target, &r);
            if (rc) {
                fprintf(stderr, "dpt bench appo: %s\n", dpt_last_error());
                return DPT_EXIT_FAIL;
            }
            reached[j] += !isnan(r.solve_steps);
            if (json)
                printf("{\"bench\":\"appo\",\"job\":\"%s\",\"env\":\"%s\",\"seed\":%ld,"
                       "\"steps\":%llu,\"wall_s\":%.3f,\"steps_per_s\":%.0f,"
                       "\"learner_utilization\":%.3f,\"load_over_grad\":%.4f,"
                       "\"policy_lag\":%.2f,\"solve_steps\":%.0f,\"solve_s\":%.3f,"
                       "\"final_return\":%.1f}\n",
                       jobs[j] + 4, env, s, r.steps, r.wall_s, r.steps_per_s, r.utilization,
                       r.load_share, r.lag, isnan(r.solve_steps) ? -1.0 : r.solve_steps,
                       isnan(r.solve_s) ? -1.0 : r.solve_s, r.final);
            else
                printf("%-7s %-5ld %10llu %8.2f %11.0f %6.2f %8.3f %8.2f %11.0f %10.2f %8.1f\n",
                       jobs[j] + 4, s, r.steps, r.wall_s, r.steps_per_s, r.utilization,
                       r.load_share, r.lag, isnan(r.solve_steps) ? -1.0 : r.solve_steps,
                       isnan(r.solve_s) ? -1.0 : r.solve_s, r.final);
            fflush(stdout);
        }
    }
    if (!json)
        for (int j = 0; j < (acrobot ? 1 : 2); j++)
            printf("%s: %d of %ld seeds reached %g (mean of 100 episodes) within %ld steps\n",
                   jobs[j] + 4, reached[j], seeds, target, steps);
    return DPT_EXIT_OK;
}
