/*
 * Steps Corridor-v0 (corridor_env.c) with random actions through the
 * vectorized runner and prints episode statistics, then does the same with
 * the "always right" policy to show what a trained agent should reach.
 *
 *   example_custom_env [num_envs] [steps]
 */
#include <dpt/env.h>
#include <dpt/status.h>

#include <stdio.h>
#include <stdlib.h>

extern const dpt_env_class_t corridor_v0; /* corridor_env.c */

static int run(const char *label, int random_policy, size_t n, long steps)
{
    const dpt_env_class_t *cls = &corridor_v0;
    dpt_vecenv_t *v = NULL;
    int rc = dpt_env_class_check(cls);
    if (rc == 0)
        rc = dpt_vecenv_create(&v, cls, n, 1, 0);
    if (rc) {
        fprintf(stderr, "example_custom_env: %s: %s\n", dpt_strerror(rc), dpt_last_error());
        return 1;
    }
    float *obs = malloc(n * cls->obs_dim * sizeof *obs);
    float *rew = malloc(n * sizeof *rew);
    uint8_t *term = malloc(n), *trunc = malloc(n);
    int32_t *act = malloc(n * sizeof *act);
    if (!obs || !rew || !term || !trunc || !act) {
        fprintf(stderr, "example_custom_env: out of memory\n");
        rc = 1;
        goto out;
    }
    dpt_rng_t policy_rng;
    dpt_rng_init(&policy_rng, 1, 0, 0, DPT_RNG_ACTION);
    dpt_vecenv_reset(v, obs);
    double sum_ret = 0.0, sum_len = 0.0;
    size_t episodes = 0, reached = 0;
    for (long t = 0; t < steps; t++) {
        for (size_t i = 0; i < n; i++)
            act[i] = random_policy ? (int32_t)dpt_rng_below(&policy_rng, 2) : 1;
        if ((rc = dpt_vecenv_step(v, act, obs, rew, term, trunc, NULL)) != 0) {
            fprintf(stderr, "example_custom_env: %s\n", dpt_last_error());
            rc = 1;
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            reached += term[i];
        double r[64];
        uint32_t len[64];
        size_t got;
        while ((got = dpt_vecenv_pop_episodes(v, r, len, 64, NULL)) > 0)
            for (size_t e = 0; e < got; e++, episodes++) {
                sum_ret += r[e];
                sum_len += len[e];
            }
    }
    printf("%-13s %zu envs x %ld steps: %zu episodes, %.1f%% reached the goal, "
           "mean return %.3f, mean length %.1f (solved at %.2f)\n",
           label, n, steps, episodes, episodes ? 100.0 * (double)reached / (double)episodes : 0.0,
           episodes ? sum_ret / (double)episodes : 0.0, episodes ? sum_len / (double)episodes : 0.0,
           cls->reward_threshold);
out:
    free(obs), free(rew), free(term), free(trunc), free(act);
    dpt_vecenv_destroy(v);
    return rc;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 8;
    long steps = argc > 2 ? strtol(argv[2], NULL, 10) : 2000;
    if (n < 1 || steps < 1) {
        fprintf(stderr, "usage: example_custom_env [num_envs >= 1] [steps >= 1]\n");
        return 2;
    }
    if (run("random:", 1, n, steps) || run("always right:", 0, n, steps))
        return 1;
    return 0;
}
