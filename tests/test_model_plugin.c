/*
 * Model plug-ins (dpt/nn.h, key model of the supervised job), with the
 * example plug-in examples/custom_model/linear_model.c: it trains as a
 * classifier and as a regressor, its checkpoints evaluate, and broken
 * plug-ins are refused with the file and the reason.
 *
 * usage: test_model_plugin LINEAR_PLUGIN BROKEN_ABI_PLUGIN OTHER_SO
 */
#include "dpt/dpt.h"
#include "dpt/train.h"
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt_test_train.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *plugin, *broken, *other;
static char scratch[PATH_MAX / 4];

/* n rows of (x0, x1, label, y) with label = [x0 + x1 / 2 > 0] and
 * y = 2 x0 - x1 + 0.5, from a fixed LCG. */
static int write_data(const char *path, int n, uint64_t *state)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "x0,x1,label,y\n");
    for (int i = 0; i < n; i++) {
        double x[2];
        for (int k = 0; k < 2; k++) {
            *state = *state * 6364136223846793005u + 1442695040888963407u;
            x[k] = (double)(*state >> 40) / 16777216.0 * 2.0 - 1.0;
        }
        fprintf(f, "%.6f,%.6f,%d,%.6f\n", x[0], x[1], x[0] + 0.5 * x[1] > 0.0,
                2.0 * x[0] - x[1] + 0.5);
    }
    return fclose(f);
}

static void test_trains(void)
{
    char train[PATH_MAX], test[PATH_MAX], kv[4][PATH_MAX + 32];
    snprintf(train, sizeof train, "%s/train.csv", scratch);
    snprintf(test, sizeof test, "%s/test.csv", scratch);
    uint64_t st = 7;
    REQUIRE(write_data(train, 800, &st) == 0 && write_data(test, 200, &st) == 0);
    snprintf(kv[0], sizeof kv[0], "train_csv=%s", train);
    snprintf(kv[1], sizeof kv[1], "test_csv=%s", test);
    snprintf(kv[2], sizeof kv[2], "model=%s", plugin);
    static const char *const base[] = {"job=supervised", "dataset=csv",   "epochs=30",
                                       "batch_size=32",  "num_devices=2", "lr=0.05"};
    for (int reg = 0; reg < 2; reg++) {
        const char *sets[] = {kv[0], kv[1], kv[2], reg ? "loss=mse" : "label_column=label",
                              reg ? "target_columns=y" : "label_column=label"};
        /* Classification reads label and ignores y: a feature then. Keep
         * the two features only by naming the label; for regression the
         * label column is a third feature. */
        dpt_config_t *c = NULL;
        REQUIRE_OK(dpt_test_config(&c, base, sizeof base / sizeof *base, sets, 5));
        dpt_trainer_t *t = NULL;
        REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
        dpt_train_result_t r;
        int rc;
        do
            rc = dpt_trainer_iterate(t, &r);
        while (!rc && !r.finished);
        CHECK_OK(rc);
        double acc = dpt_train_result_get(&r, "test_accuracy");
        double rmse = dpt_train_result_get(&r, "test_rmse");
        printf("     %s: test accuracy %.4f, rmse %.4f\n", reg ? "regression" : "classification",
               acc, rmse);
        if (reg)
            CHECK(rmse < 0.05);
        else
            CHECK(acc > 0.9);
        /* The checkpoint names the plug-in and evaluates through it. */
        char ck[PATH_MAX + 32];
        snprintf(ck, sizeof ck, "%s/ck%d.safetensors", scratch, reg);
        REQUIRE_OK(dpt_test_checkpoint(t, ck, 1));
        dpt_safetensors_t *sf = NULL;
        REQUIRE_OK(dpt_safetensors_load(&sf, ck));
        const char *name = dpt_safetensors_meta(sf, "model");
        CHECK(name && strcmp(name, "linear") == 0);
        CHECK(dpt_safetensors_find(sf, "params.weight") != NULL);
        dpt_eval_result_t want, got;
        CHECK_OK(dpt_trainer_evaluate(t, 0, 0, &want));
        CHECK_OK(dpt_trainer_ops(DPT_JOB_SUPERVISED)->eval_checkpoint(c, sf, 0, 0, &got));
        CHECK(got.count == 200 && got.loss == want.loss);
        CHECK(reg ? got.rmse == want.rmse : got.accuracy == want.accuracy);
        dpt_safetensors_destroy(sf);
        dpt_trainer_destroy(t);
        dpt_config_destroy(c);
    }
}

static void test_refused(void)
{
    const dpt_model_plugin_t *p = NULL;
    CHECK_OK(dpt_model_plugin_load(plugin, &p));
    CHECK(p && strcmp(p->name, "linear") == 0);
    CHECK_ERR(dpt_model_plugin_load("/nonexistent/libnone.so", &p), DPT_EINVAL,
              "model plug-in /nonexistent/libnone.so");
    CHECK(p == NULL);
    CHECK_ERR(dpt_model_plugin_load(broken, &p), DPT_EINVAL,
              "was built for model ABI 3, this dpt has 2");
    CHECK_ERR(dpt_model_plugin_load(other, &p), DPT_EINVAL,
              "does not export dpt_model_plugin_abi()");
    CHECK_ERR(dpt_model_plugin_load("", &p), DPT_EINVAL, "no path");
    /* Through a config: the trainer reports the plug-in's error (exit 2). */
    char kv[PATH_MAX + 32];
    snprintf(kv, sizeof kv, "model=%s", broken);
    static const char *const base[] = {"job=supervised", "dataset=spirals", "spirals_points=64",
                                       "num_devices=1"};
    const char *sets[] = {kv};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, base, 4, sets, 1));
    dpt_trainer_t *t = NULL;
    CHECK_ERR(dpt_trainer_create(&t, c, NULL), DPT_EINVAL, "model ABI");
    CHECK(t == NULL);
    dpt_config_destroy(c);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: test_model_plugin LINEAR BROKEN OTHER\n");
        return 2;
    }
    plugin = argv[1], broken = argv[2], other = argv[3];
    if (dpt_test_mkdtemp(scratch, sizeof scratch, "dpt_model_plugin") != 0)
        return 1;
    static const dpt_test_case_t cases[] = {DPT_TEST(test_trains), DPT_TEST(test_refused)};
    int rc = DPT_TEST_RUN(cases);
    if (rc == 0)
        dpt_test_rm_tree(scratch);
    return rc;
}
