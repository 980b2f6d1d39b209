/*
 * Training from your own program through dpt/train.h alone: PPO on
 * CartPole-v1 with CleanRL's settings (the ppo job's defaults).
 *   embed_train [TOTAL_TIMESTEPS]      (default 500000; the tests pass a cap)
 */
#include <dpt/train.h>
#include <dpt/status.h>

#include <stdio.h>

static int fail(const char *what)
{
    fprintf(stderr, "embed_train: %s: %s\n", what, dpt_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    char steps[64];
    snprintf(steps, sizeof steps, "total_timesteps=%s", argc > 1 ? argv[1] : "500000");
    dpt_config_t *cfg;
    if (dpt_config_create(&cfg) || dpt_config_set(cfg, "job=ppo") ||
        dpt_config_set(cfg, "env=CartPole-v1") || dpt_config_set(cfg, steps) ||
        dpt_config_finalize(cfg))
        return fail("config");
    dpt_trainer_t *t;
    if (dpt_trainer_create(&t, cfg, NULL))
        return fail("trainer");
    dpt_train_result_t r;
    do {
        if (dpt_trainer_iterate(t, &r))
            return fail("iterate");
        if (r.iteration % 100 == 0 || r.finished)
            printf("%s\n", r.line);
    } while (!r.finished);
    dpt_eval_result_t e;
    if (dpt_trainer_evaluate(t, 20, 7, &e))
        return fail("evaluate");
    printf("after %llu steps: mean return %.1f (last 100 episodes), greedy %.1f over %zu "
           "episodes\n",
           (unsigned long long)r.timesteps_total, r.reward_mean, e.mean_return, e.count);
    dpt_trainer_destroy(t);
    dpt_config_destroy(cfg);
    return 0;
}
