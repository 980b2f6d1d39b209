/*
 * dpt_train_seeds' arguments and dpt_seeds_summarize's figures (the runs
 * themselves are tested through the command in tests/cli_test.sh).
 */
#include "dpt_test.h"
#include "dpt_test_train.h"

#include <math.h>

static void test_summary(void)
{
    dpt_seed_run_t r[5];
    memset(r, 0, sizeof r);
    const double finals[5] = {10.0, 500.0, 200.0, 300.0, 100.0};
    for (int i = 0; i < 5; i++) {
        r[i].seed = (uint64_t)i;
        r[i].final = finals[i];
    }
    r[1].reached = 1, r[1].steps_to_target = 3000, r[1].time_to_target_s = 3.0;
    r[3].reached = 1, r[3].steps_to_target = 1000, r[3].time_to_target_s = 1.0;
    r[4].status = DPT_EIO; /* failed: counted in runs only */
    r[4].reached = 1, r[4].steps_to_target = 1;
    dpt_seeds_summary_t s;
    dpt_seeds_summarize(r, 5, &s);
    CHECK(s.runs == 5 && s.ok == 4 && s.reached == 2);
    /* 10, 200, 300, 500: mean 252.5, iqm cuts one each end: (200 + 300) / 2 */
    CHECK(fabs(s.mean - 252.5) < 1e-12);
    CHECK(fabs(s.iqm - 250.0) < 1e-12);
    double var = (242.5 * 242.5 + 52.5 * 52.5 + 47.5 * 47.5 + 247.5 * 247.5) / 3.0;
    CHECK(fabs(s.std - sqrt(var)) < 1e-9);
    CHECK(s.median_steps_to_target == 2000.0 && s.median_time_to_target_s == 2.0);

    /* Three runs: nothing cut; one run: std 0; none reached: NAN. */
    dpt_seeds_summarize(r, 1, &s);
    CHECK(s.ok == 1 && s.mean == 10.0 && s.std == 0.0 && s.iqm == 10.0);
    CHECK(s.reached == 0 && isnan(s.median_steps_to_target));
    r[0].final = (double)NAN; /* no result */
    dpt_seeds_summarize(r, 1, &s);
    CHECK(s.ok == 0 && isnan(s.mean) && isnan(s.iqm));
    dpt_seeds_summarize(r, 0, &s);
    CHECK(s.runs == 0 && isnan(s.mean));
}

static void test_bad_arguments(void)
{
    dpt_config_t *c = NULL;
    static const char *const base[] = {"job=ppo", "env=CartPole-v1"};
    REQUIRE_OK(dpt_test_config(&c, base, 2, NULL, 0));
    uint64_t seeds[2] = {3, 3};
    dpt_seed_run_t runs[2];
    CHECK_ERR(dpt_train_seeds(NULL, seeds, 1, 0, NULL, runs), DPT_EINVAL, "at least one seed");
    CHECK_ERR(dpt_train_seeds(c, seeds, 0, 0, NULL, runs), DPT_EINVAL, "at least one seed");
    CHECK_ERR(dpt_train_seeds(c, NULL, 1, 0, NULL, runs), DPT_EINVAL, "at least one seed");
    CHECK_ERR(dpt_train_seeds(c, seeds, 1, 0, NULL, NULL), DPT_EINVAL, "at least one seed");
    CHECK_ERR(dpt_train_seeds(c, seeds, 2, 0, NULL, runs), DPT_EINVAL, "seed 3 is given twice");
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.resume_dir = "somewhere";
    CHECK_ERR(dpt_train_seeds(c, seeds, 1, 0, &o, runs), DPT_EINVAL, "resume each run");
    dpt_config_destroy(c);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_summary),
        DPT_TEST(test_bad_arguments),
    };
    return DPT_TEST_RUN(cases);
}
