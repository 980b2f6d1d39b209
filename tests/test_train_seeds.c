/*
 * dpt_train_seeds' arguments and dpt_seeds_summarize's figures (the runs
 * themselves are tested through the command in tests/cli_test.sh).
 */
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt_test_train.h"

#include <limits.h>
#include <math.h>
#include <sys/stat.h>

static void test_summary(void)
{
    dpt_seed_run_t r[5];
    memset(r, 0, sizeof r);
    const double finals[5] = {10.0, 500.0, 200.0, 300.0, 100.0};
    for (int i = 0; i < 5; i++) {
        r[i].seed = (uint64_t)i;
        r[i].started = 1;
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

    /* Runs a stop request ended early, and runs it kept from starting, are
     * counted as such and left out of every figure. */
    r[0].final = 10.0;
    r[1].reason = DPT_RUN_STOPPED; /* its return 500 is not a final one */
    r[2].started = 0;
    r[2].final = (double)NAN;
    dpt_seeds_summarize(r, 5, &s);
    CHECK(s.runs == 5 && s.ok == 2 && s.stopped == 1 && s.not_started == 1);
    CHECK(fabs(s.mean - 155.0) < 1e-12 && s.reached == 1); /* 10 and 300 */
}

/* Sets the stop flag at the first result of any run, as a signal would. */
static volatile sig_atomic_t seeds_stop_flag;
static void seeds_stop_on_result(void *user, const dpt_run_event_t *ev)
{
    (void)user;
    if (ev->kind == DPT_RUN_RESULT)
        seeds_stop_flag = 1;
}

/* After a stop request no run starts: one run at a time, a stop at the
 * first run's first iteration stops it (a checkpoint of that iteration)
 * and leaves the other seeds without a directory. */
static void test_stop_starts_nothing(void)
{
    char dir[PATH_MAX], set_dir[PATH_MAX + 16], path[PATH_MAX + 64];
    REQUIRE(dpt_test_mkdtemp(dir, sizeof dir, "seeds_stop") == 0);
    snprintf(set_dir, sizeof set_dir, "output_dir=%s/runs", dir);
    static const char *const base[] = {"job=ppo", "env=CartPole-v1", "total_timesteps=100000000",
                                       "checkpoint_every=0", "eval_episodes=0"};
    const char *sets[] = {set_dir};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, base, 5, sets, 1));
    uint64_t seeds[3] = {1, 2, 3};
    dpt_seed_run_t runs[3];
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.stop_flag = &seeds_stop_flag;
    o.on_event = seeds_stop_on_result;
    seeds_stop_flag = 0;
    CHECK_OK(dpt_train_seeds(c, seeds, 3, 1, &o, runs));
    CHECK(runs[0].started && runs[0].status == DPT_OK && runs[0].reason == DPT_RUN_STOPPED &&
          runs[0].iterations == 1);
    CHECK(!runs[1].started && !runs[2].started && !runs[1].dir[0] && !runs[2].dir[0]);
    struct stat sb;
    snprintf(path, sizeof path, "%s/runs/seed-1/checkpoints/checkpoint-00000001.safetensors", dir);
    CHECK(stat(path, &sb) == 0);
    snprintf(path, sizeof path, "%s/runs/seed-2", dir);
    CHECK(stat(path, &sb) != 0);
    dpt_seeds_summary_t s;
    dpt_seeds_summarize(runs, 3, &s);
    CHECK(s.ok == 0 && s.stopped == 1 && s.not_started == 2 && isnan(s.mean));
    dpt_config_destroy(c);
    dpt_test_rm_tree(dir);
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
        DPT_TEST(test_stop_starts_nothing),
    };
    return DPT_TEST_RUN(cases);
}
