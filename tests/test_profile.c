/*
 * The phase profiler (dpt/profile.h): a PPO run with two devices charges
 * every learn-step phase on both devices once per optimizer step and the
 * sampling phases on slot 0; the phases of slot 0 cover the run's wall
 * time; nothing is charged while it is off; bad slots are refused.
 */
#include "dpt_test.h"

#include "dpt/profile.h"
#include "dpt/stats.h"
#include "dpt/train.h"

static int run_ppo(int iterations, double *wall)
{
    double t0 = dpt_now();
    dpt_config_t *c;
    int rc = dpt_config_create(&c);
    const char *sets[] = {"job=ppo",
                          "env=CartPole-v1",
                          "num_devices=2",
                          "num_envs_per_worker=4",
                          "rollout_fragment_length=64",
                          "sgd_minibatch_size=64",
                          "num_sgd_iter=2",
                          "total_timesteps=100000"};
    for (size_t i = 0; !rc && i < sizeof sets / sizeof *sets; i++)
        rc = dpt_config_set(c, sets[i]);
    if (!rc)
        rc = dpt_config_finalize(c);
    dpt_trainer_t *t = NULL;
    if (!rc)
        rc = dpt_trainer_create(&t, c, NULL);
    dpt_config_destroy(c);
    dpt_train_result_t r;
    for (int i = 0; !rc && i < iterations; i++)
        rc = dpt_trainer_iterate(t, &r);
    *wall = dpt_now() - t0;
    dpt_trainer_destroy(t);
    return rc;
}

static void test_ppo_phases(void)
{
    dpt_profile_reset();
    dpt_profile_enable(1);
    CHECK(dpt_profile_enabled() == 1);
    double wall;
    int rc = run_ppo(3, &wall);
    dpt_profile_enable(0);
    CHECK(dpt_profile_enabled() == 0);
    REQUIRE(rc == 0);
    /* 3 iterations x 2 epochs x 4 minibatches of 64 rows (256 rows). */
    const uint64_t steps = 3 * 2 * 4;
    dpt_profile_t p[2];
    REQUIRE(dpt_profile_get(0, &p[0]) == 0);
    REQUIRE(dpt_profile_get(1, &p[1]) == 0);
    /* The model is small: ps mode mirrors, with one barrier per step, and
     * the clipping goes into the update. */
    CHECK(p[0].count[DPT_PROF_WAIT_REDUCE] == 0 && p[0].count[DPT_PROF_CLIP] == 0);
    static const dpt_profile_phase_t per_step[] = {
        DPT_PROF_FORWARD, DPT_PROF_LOSS, DPT_PROF_BACKWARD, DPT_PROF_WAIT_GRADS,
        DPT_PROF_REDUCE,  DPT_PROF_NORM, DPT_PROF_APPLY};
    /* (The model's phases once more: the towers check its gradient set
     * before the first step; zeroing the gradient is charged to backward
     * too.) */
    for (size_t i = 0; i < sizeof per_step / sizeof *per_step; i++)
        for (int d = 0; d < 2; d++) {
            int model = per_step[i] <= DPT_PROF_BACKWARD;
            if (model)
                CHECK(p[d].count[per_step[i]] >= steps + 1);
            else
                CHECK(p[d].count[per_step[i]] == steps);
            CHECK(p[d].seconds[per_step[i]] >= 0.0);
        }
    CHECK(p[0].seconds[DPT_PROF_FORWARD] > 0.0 && p[1].seconds[DPT_PROF_BACKWARD] > 0.0);
    /* Sampling: each device steps its own envs (2 of the 4), 3 x 64 steps;
     * the batch is made on slot 0. */
    for (int d = 0; d < 2; d++) {
        CHECK(p[d].count[DPT_PROF_ACT] == 3 * 64);
        CHECK(p[d].count[DPT_PROF_ENV_STEP] == 3 * 64);
    }
    CHECK(p[0].count[DPT_PROF_BATCH] > 0);
    /* Slot 0's charges are consecutive laps of one clock from enable on:
     * together they are at most the wall time of the trainer's life, and
     * most of it. */
    double sum = 0.0;
    for (int ph = 0; ph < DPT_PROF_PHASES; ph++)
        sum += p[0].seconds[ph];
    CHECK(sum <= wall * 1.01 + 1e-4);
    CHECK(sum >= wall * 0.5);
    /* Off: nothing is charged. */
    dpt_profile_reset();
    REQUIRE(run_ppo(1, &wall) == 0);
    REQUIRE(dpt_profile_get(0, &p[0]) == 0);
    for (int ph = 0; ph < DPT_PROF_PHASES; ph++)
        CHECK(p[0].count[ph] == 0 && p[0].seconds[ph] == 0.0);
}

static void test_errors_and_names(void)
{
    dpt_profile_t p;
    CHECK(dpt_profile_get(-1, &p) == DPT_EINVAL);
    CHECK(strstr(dpt_last_error(), "slot -1") != NULL);
    CHECK(dpt_profile_get(DPT_PROFILE_SLOTS, &p) == DPT_EINVAL);
    CHECK(!strcmp(dpt_profile_phase_name(DPT_PROF_FORWARD), "forward"));
    CHECK(!strcmp(dpt_profile_phase_name(DPT_PROF_WAIT_GRADS), "wait_grads"));
    CHECK(!strcmp(dpt_profile_phase_name(DPT_PROF_PHASES), "?"));
    CHECK(!strcmp(dpt_profile_phase_name(-1), "?"));
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_ppo_phases),
        DPT_TEST(test_errors_and_names),
    };
    return DPT_TEST_RUN(cases);
}
