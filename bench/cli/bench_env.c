/*
 * dpt bench env — raw stepping throughput of the vectorized env runner.
 *
 * One thread steps `envs` envs of a class through dpt_vecenv_step (with
 * auto-reset and a final_obs buffer, as a trainer uses it) for `steps` env
 * steps per run; the figure is env steps per second, the median of `reps`
 * runs after one warm-up run, by the wall clock and per second of the
 * thread's CPU time (the latter leaves out time the thread was not running,
 * so it stays meaningful on a shared machine). The actions are drawn before the clock starts
 * (uniform over the discrete actions or the box) into a table of 256 rounds
 * that the timed loop cycles through, so the policy costs nothing.
 */
#include "../../tools/cli.h"
#include "dpt/env.h"
#include "dpt/rng.h"
#include "dpt/stats.h"
#include "dpt/status.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Declared in cli.h as well once `dpt bench env` is wired into tools/dpt.c. */
int dpt_bench_env(int argc, char **argv);

#define BE_ROUNDS 256 /* rounds of pre-drawn actions, cycled */

typedef struct be_args {
    const char *env; /* NULL = every built-in */
    size_t envs;
    uint64_t steps;
    int reps;
    int json;
} be_args_t;

typedef struct be_result {
    double steps_per_s; /* median, wall clock */
    double min_sps, max_sps;
    double cpu_steps_per_s; /* median, per second of this thread's CPU time */
    uint64_t episodes;      /* in the timed runs */
    uint64_t steps;         /* in the timed runs */
} be_result_t;

/* This thread's CPU time in seconds: on a shared machine, steps per CPU
 * second measure the code, steps per wall second also the contention. */
static double be_cpu_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs the benchmark for one class; 0 or a DPT_E code (message set). */
static int be_run(const be_args_t *a, const dpt_env_class_t *cls, be_result_t *res)
{
    dpt_vecenv_t *v = NULL;
    float *obs = NULL, *final_obs = NULL, *rewards = NULL, *fact = NULL;
    int32_t *iact = NULL;
    uint8_t *term = NULL, *trunc = NULL;
    double *rates = NULL, *cpu_rates = NULL;
    int rc = dpt_vecenv_create(&v, cls, a->envs, 1, 0);
    if (rc)
        return rc;
    const size_t n = a->envs, od = cls->obs_dim;
    const int box = cls->action_kind == DPT_ACTION_BOX;
    const size_t ad = box ? cls->action_dim : 1;
    obs = malloc(n * od * sizeof *obs);
    final_obs = malloc(n * od * sizeof *final_obs);
    rewards = malloc(n * sizeof *rewards);
    term = malloc(n);
    trunc = malloc(n);
    rates = malloc((size_t)a->reps * sizeof *rates);
    cpu_rates = malloc((size_t)a->reps * sizeof *cpu_rates);
    if (box)
        fact = malloc(BE_ROUNDS * n * ad * sizeof *fact);
    else
        iact = malloc(BE_ROUNDS * n * sizeof *iact);
    if (!obs || !final_obs || !rewards || !term || !trunc || !rates || !cpu_rates ||
        (!fact && !iact)) {
        rc = dpt_error(DPT_ENOMEM, "bench env: out of memory for %zu envs", n);
        goto out;
    }
    dpt_rng_t r;
    dpt_rng_init(&r, 1, 0, 0, DPT_RNG_ACTION);
    for (size_t j = 0; j < BE_ROUNDS * n; j++) {
        if (box)
            for (size_t k = 0; k < ad; k++)
                fact[j * ad + k] = cls->action_low[k] +
                                   (cls->action_high[k] - cls->action_low[k]) * dpt_rng_uniform(&r);
        else
            iact[j] = (int32_t)dpt_rng_below(&r, (uint32_t)cls->num_actions);
    }
    const uint64_t rounds = (a->steps + n - 1) / n;
    dpt_vecenv_reset(v, obs);
    uint64_t steps0 = 0, eps0 = 0;
    for (int rep = -1; rep < a->reps; rep++) { /* rep -1 is the warm-up */
        if (rep == 0) {
            steps0 = dpt_vecenv_total_steps(v);
            eps0 = dpt_vecenv_total_episodes(v);
        }
        double t0 = dpt_now(), c0 = be_cpu_now();
        for (uint64_t k = 0; k < rounds; k++) {
            size_t row = (size_t)(k % BE_ROUNDS) * n;
            const void *act = box ? (const void *)(fact + row * ad) : (const void *)(iact + row);
            rc = dpt_vecenv_step(v, act, obs, rewards, term, trunc, final_obs);
            if (rc)
                goto out;
        }
        double dt = dpt_now() - t0, dc = be_cpu_now() - c0;
        if (rep >= 0) {
            rates[rep] = (double)(rounds * n) / dt;
            cpu_rates[rep] = dc > 0 ? (double)(rounds * n) / dc : 0.0;
        }
        /* Stats are not what is measured; keep the ring from overflowing. */
        dpt_vecenv_pop_episodes(v, NULL, NULL, SIZE_MAX, NULL);
    }
    res->steps = dpt_vecenv_total_steps(v) - steps0;
    res->episodes = dpt_vecenv_total_episodes(v) - eps0;
    res->steps_per_s = dpt_median(rates, (size_t)a->reps); /* sorts rates */
    res->min_sps = rates[0];
    res->max_sps = rates[a->reps - 1];
    res->cpu_steps_per_s = dpt_median(cpu_rates, (size_t)a->reps);
out:
    free(obs), free(final_obs), free(rewards), free(term), free(trunc);
    free(rates), free(cpu_rates), free(fact), free(iact);
    dpt_vecenv_destroy(v);
    return rc;
}

static int be_usage(FILE *f, int code)
{
    fprintf(f, "usage: dpt bench env [--env NAME] [--envs N] [--steps N] [--reps N] [--json]\n\n"
               "Steps N envs of a built-in class in one thread through the vectorized runner\n"
               "(auto-reset, final_obs) with random actions drawn before the clock starts, and\n"
               "reports env steps per second (median of the runs after one warm-up), by the\n"
               "wall clock and per second of the thread's CPU time (steps/cpu_s: the figure\n"
               "that does not depend on other load on the machine).\n"
               "Default: every built-in env, 16 envs, 4194304 env steps per run, 5 runs.\n"
               "envs:");
    for (size_t i = 0; i < dpt_env_count(); i++)
        fprintf(f, " %s", dpt_env_get(i)->name);
    fprintf(f, "\n");
    return code;
}

static int be_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!s[0] || s[0] == '-')
        return -1;
    unsigned long long x = strtoull(s, &end, 10);
    if (*end)
        return -1;
    *out = (uint64_t)x;
    return 0;
}

int dpt_bench_env(int argc, char **argv)
{
    be_args_t a = {NULL, 16, 4194304, 5, 0};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        uint64_t x = 0;
        if (!strcmp(o, "--help") || !strcmp(o, "-h"))
            return be_usage(stdout, DPT_EXIT_OK);
        if (!strcmp(o, "--json")) {
            a.json = 1;
        } else if (i + 1 < argc && !strcmp(o, "--env")) {
            a.env = argv[++i];
        } else if (i + 1 < argc && !strcmp(o, "--envs")) {
            if (be_parse_u64(argv[++i], &x) || x < 1 || x > 1000000) {
                fprintf(stderr, "dpt bench env: --envs must be 1..1000000\n");
                return DPT_EXIT_USAGE;
            }
            a.envs = (size_t)x;
        } else if (i + 1 < argc && !strcmp(o, "--steps")) {
            if (be_parse_u64(argv[++i], &x) || x < 1 || x > (uint64_t)1e12) {
                fprintf(stderr, "dpt bench env: --steps must be 1..1e12\n");
                return DPT_EXIT_USAGE;
            }
            a.steps = x;
        } else if (i + 1 < argc && !strcmp(o, "--reps")) {
            if (be_parse_u64(argv[++i], &x) || x < 1 || x > 1000) {
                fprintf(stderr, "dpt bench env: --reps must be 1..1000\n");
                return DPT_EXIT_USAGE;
            }
            a.reps = (int)x;
        } else {
            fprintf(stderr, "dpt bench env: unknown or incomplete option \"%s\"\n", o);
            return be_usage(stderr, DPT_EXIT_USAGE);
        }
    }
    const dpt_env_class_t *only = NULL;
    if (a.env && !(only = dpt_env_find(a.env))) {
        fprintf(stderr, "dpt bench env: %s\n", dpt_last_error());
        return DPT_EXIT_USAGE;
    }
    if (!a.json) {
        printf("# dpt bench env: 1 thread, %zu envs, %" PRIu64 " env steps per run, median of "
               "%d runs, random actions\n# command: dpt bench",
               a.envs, (uint64_t)((a.steps + a.envs - 1) / a.envs * a.envs), a.reps);
        for (int i = 0; i < argc; i++)
            printf(" %s", argv[i]);
        printf("\n%-15s %6s %12s %8s %12s %12s %14s %8s\n", "env", "envs", "steps/s", "ns/step",
               "min steps/s", "max steps/s", "steps/cpu_s", "mean_len");
    }
    int rc = DPT_EXIT_OK;
    for (size_t e = 0; e < dpt_env_count(); e++) {
        const dpt_env_class_t *cls = dpt_env_get(e);
        if (only && cls != only)
            continue;
        be_result_t r;
        memset(&r, 0, sizeof r);
        if (be_run(&a, cls, &r)) {
            fprintf(stderr, "dpt bench env: %s: %s\n", cls->name, dpt_last_error());
            rc = DPT_EXIT_FAIL;
            continue;
        }
        double mean_len = r.episodes ? (double)r.steps / (double)r.episodes : 0.0;
        if (a.json)
            printf("{\"env\":\"%s\",\"envs\":%zu,\"steps_per_run\":%" PRIu64 ",\"runs\":%d,"
                   "\"env_steps_per_s\":%.0f,\"ns_per_step\":%.2f,\"min_steps_per_s\":%.0f,"
                   "\"max_steps_per_s\":%.0f,\"env_steps_per_cpu_s\":%.0f,"
                   "\"mean_episode_len\":%.1f}\n",
                   cls->name, a.envs, r.steps / (uint64_t)a.reps, a.reps, r.steps_per_s,
                   1e9 / r.steps_per_s, r.min_sps, r.max_sps, r.cpu_steps_per_s, mean_len);
        else
            printf("%-15s %6zu %12.0f %8.2f %12.0f %12.0f %14.0f %8.1f\n", cls->name, a.envs,
                   r.steps_per_s, 1e9 / r.steps_per_s, r.min_sps, r.max_sps, r.cpu_steps_per_s,
                   mean_len);
        fflush(stdout);
    }
    return rc;
}
