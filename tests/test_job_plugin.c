/*
 * A seventh job, compiled into this test only: "counter", whose model is one
 * variable that each iteration moves by a fixed step. It plugs in the way
 * every job does (docs/ARCHITECTURE.md): its own file (this one) with its
 * trainer ops and descriptor, and one table entry, here through the test
 * hook dpt__job_register_test, so DPT_JOB_LIST, the enum and --help stay as
 * they are. The test runs it through dpt_train_run: the config names it,
 * its own check refuses a bad value, the run writes checkpoints, a resume
 * continues from them, and its seeds run side by side.
 */
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt/checkpoint.h"
#include "dpt/status.h"
#include "dpt/train.h"
#include "train/train_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[PATH_MAX / 2];

/* ---- the job: its own file in the library (here, the test) ---------------------- */

typedef struct counter {
    const dpt_config_t *cfg; /* borrowed: the trainer's copy */
    dpt_vartable_t vars;
    dpt_arena_t w; /* one variable "w" of 4 floats */
    uint64_t iteration, epochs;
} counter_t;

static void counter_destroy(void *self)
{
    counter_t *t = self;
    if (!t)
        return;
    dpt_arena_deinit(&t->w);
    dpt_vartable_deinit(&t->vars);
    free(t);
}

static int counter_create(void **out, const dpt_config_t *c, const dpt_trainer_env_t *env)
{
    (void)env;
    *out = NULL;
    counter_t *t = calloc(1, sizeof *t);
    if (!t)
        return dpt_error(DPT_ENOMEM, "counter: cannot allocate");
    t->cfg = c;
    t->epochs = (uint64_t)dpt_config_int(c, DPT_CFG_epochs);
    dpt_vartable_init(&t->vars);
    size_t shape[1] = {4};
    int rc = dpt_vartable_add(&t->vars, "w", 1, shape, NULL);
    if (!rc)
        rc = dpt_arena_init(&t->w, t->vars.total);
    if (rc) {
        counter_destroy(t);
        return rc;
    }
    for (size_t i = 0; i < 4; i++)
        t->w.data[i] = (float)dpt_config_int(c, DPT_CFG_seed) + (float)i;
    *out = t;
    return DPT_OK;
}

static int counter_iterate(void *self, dpt_train_result_t *r)
{
    counter_t *t = self;
    float step = (float)dpt_config_float(t->cfg, DPT_CFG_lr);
    for (size_t i = 0; i < 4; i++)
        t->w.data[i] += step;
    t->iteration++;
    r->iteration = t->iteration;
    r->timesteps_total = t->iteration;
    r->finished = t->iteration >= t->epochs;
    dpt_train_result_add(r, "training_iteration", (double)t->iteration);
    dpt_train_result_add(r, "w0", (double)t->w.data[0]);
    return DPT_OK;
}

static int counter_checkpoint(void *self, dpt_safetensors_writer_t *w)
{
    counter_t *t = self;
    if (!w)
        return DPT_OK;
    return dpt_safetensors_add_arena(w, "params.", &t->vars, t->w.data, t->w.count);
}

static int counter_load(counter_t *t, const dpt_safetensors_t *st)
{
    const dpt_safetensors_tensor_t *x;
    size_t shape[1] = {4};
    int rc = dpt_safetensors_get(st, "params.w", DPT_ST_F32, 1, shape, &x);
    if (rc)
        return rc;
    memcpy(t->w.data, x->data, 4 * sizeof(float));
    return DPT_OK;
}

static int counter_restore(void *self, const dpt_safetensors_t *st)
{
    counter_t *t = self;
    int rc = counter_load(t, st);
    if (!rc)
        rc = dpt_safetensors_meta_u64(st, "training_iteration", &t->iteration);
    return rc;
}

static const dpt_vartable_t *counter_vars(void *self)
{
    return &((counter_t *)self)->vars;
}

static int counter_get_weights(void *self, float *out, size_t count)
{
    counter_t *t = self;
    if (count < t->w.count)
        return dpt_error(DPT_EINVAL, "counter: %zu floats, need %zu", count, t->w.count);
    memcpy(out, t->w.data, t->w.count * sizeof *out);
    return DPT_OK;
}

static int counter_evaluate(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    (void)episodes;
    (void)seed;
    out->loss = ((counter_t *)self)->w.data[0];
    return DPT_OK;
}

static int counter_describe(void *self, dpt_safetensors_writer_t *w)
{
    (void)self;
    return dpt_safetensors_set_meta(w, "dataset", "none");
}

static int counter_eval_checkpoint(const dpt_config_t *c, const dpt_safetensors_t *st,
                                   size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    void *t;
    int rc = counter_create(&t, c, NULL);
    if (!rc)
        rc = counter_load(t, st);
    if (!rc)
        rc = counter_evaluate(t, episodes, seed, out);
    counter_destroy(t);
    return rc;
}

static const dpt_trainer_ops_t counter_ops = {
    .job = DPT_JOB_COUNT,
    .create = counter_create,
    .destroy = counter_destroy,
    .iterate = counter_iterate,
    .checkpoint = counter_checkpoint,
    .restore = counter_restore,
    .vars = counter_vars,
    .get_weights = counter_get_weights,
    .evaluate = counter_evaluate,
    .describe = counter_describe,
    .eval_checkpoint = counter_eval_checkpoint,
};

/* Its own rule between keys, checked by dpt_config_finalize. */
static int counter_check(const dpt_config_t *c)
{
    if (dpt_config_float(c, DPT_CFG_lr) >= 1.0)
        return dpt_error(DPT_EINVAL,
                         "counter: lr = %g must be below 1 (the step of each iteration)",
                         dpt_config_float(c, DPT_CFG_lr));
    return DPT_OK;
}

static size_t counter_threads(const dpt_config_t *c)
{
    (void)c;
    return 1;
}

static const dpt__job_t counter_job = {
    .id = DPT_JOB_COUNT,
    .name = "counter",
    .summary = "a test job: one variable moved by lr each iteration",
    .ops = &counter_ops,
    .keys = DPT_JOB_SUPERVISED, /* its keys and defaults (epochs, lr, seed) */
    .check = counter_check,
    .threads = counter_threads,
};

/* ---- the test --------------------------------------------------------------------- */

static dpt_config_t *counter_config(const char *dir, const char *extra)
{
    dpt_config_t *c = NULL;
    char kv[PATH_MAX + 32];
    if (dpt_config_create(&c) || dpt_config_set(c, "job=counter") ||
        dpt_config_set(c, "epochs=4") || dpt_config_set(c, "lr=0.25")) {
        dpt_config_destroy(c);
        return NULL;
    }
    snprintf(kv, sizeof kv, "output_dir=%s", dir);
    if (dpt_config_set(c, kv) || (extra && dpt_config_set(c, extra))) {
        dpt_config_destroy(c);
        return NULL;
    }
    return c;
}

/* w[0] of the newest checkpoint of run directory dir (NAN when none). */
static float newest_w0(const char *dir, uint64_t *iteration)
{
    dpt_safetensors_t *st = NULL;
    float w0 = (float)NAN;
    if (dpt__find_checkpoint(dir, &st, NULL, NULL) != 0 || !st)
        return w0;
    const dpt_safetensors_tensor_t *x = dpt_safetensors_find(st, "params.w");
    if (x)
        memcpy(&w0, x->data, sizeof w0);
    dpt_safetensors_meta_u64(st, "training_iteration", iteration);
    dpt_safetensors_destroy(st);
    return w0;
}

static void test_unregistered_job_is_unknown(void)
{
    dpt_config_t *c;
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_ERR(dpt_config_set(c, "job=counter"), DPT_EINVAL, "job must be one of");
    dpt_config_destroy(c);
    CHECK(strcmp(dpt_job_name(DPT_JOB_COUNT), "unknown") == 0);
}

static void test_register_rules(void)
{
    dpt__job_t bad = counter_job;
    bad.id = DPT_JOB_PPO;
    CHECK_ERR(dpt__job_register_test(&bad), DPT_EINVAL, "test job needs id DPT_JOB_COUNT");
    bad = counter_job;
    bad.name = "ppo";
    CHECK_ERR(dpt__job_register_test(&bad), DPT_EINVAL, "a new name");
    REQUIRE_OK(dpt__job_register_test(&counter_job));
    CHECK(strcmp(dpt_job_name(DPT_JOB_COUNT), "counter") == 0);
    dpt_job_t j;
    CHECK_OK(dpt_job_parse("counter", &j));
    CHECK(j == DPT_JOB_COUNT);
}

static void test_its_check_runs(void)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/bad", tmpdir);
    dpt_config_t *c = counter_config(dir, "lr=2");
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "counter: lr = 2 must be below 1");
    dpt_config_destroy(c);
    /* A key its keys do not have is refused, naming the job. */
    c = counter_config(dir, "env=CartPole-v1");
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "does not apply to job counter");
    dpt_config_destroy(c);
}

static void test_runs_and_resumes(void)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/run", tmpdir);
    /* Stopped after 2 of its 4 epochs... */
    dpt_config_t *c = counter_config(dir, "seed=3");
    REQUIRE(c);
    REQUIRE_OK(dpt_config_set(c, "stop_iters=2"));
    dpt_run_reason_t why;
    REQUIRE_OK(dpt_train_run(c, NULL, &why));
    CHECK(why == DPT_RUN_STOP_ITERS);
    uint64_t it = 0;
    CHECK(newest_w0(dir, &it) == 3.0f + 2 * 0.25f);
    CHECK(it == 2);
    dpt_config_destroy(c);
    /* ...the checkpoint names the job, and eval_checkpoint rebuilds its
     * model from it... */
    dpt_eval_result_t ev;
    char used[PATH_MAX];
    dpt_job_t job;
    CHECK_OK(dpt_eval_checkpoint(dir, NULL, 0, 0, 0, &ev, used, sizeof used, &job));
    CHECK(job == DPT_JOB_COUNT);
    CHECK(ev.loss == 3.5);
    /* ...and resumed, it continues from the checkpoint to its end. */
    dpt_config_t *more;
    REQUIRE_OK(dpt_config_create(&more));
    REQUIRE_OK(dpt_config_set(more, "stop_iters=0"));
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.resume_dir = dir;
    CHECK_OK(dpt_train_run(more, &o, &why));
    CHECK(why == DPT_RUN_DONE);
    CHECK(newest_w0(dir, &it) == 3.0f + 4 * 0.25f);
    CHECK(it == 4);
    dpt_config_destroy(more);
    dpt_test_rm_tree(dir);
}

static void test_seeds_side_by_side(void)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/seeds", tmpdir);
    dpt_config_t *c = counter_config(dir, NULL);
    REQUIRE(c);
    uint64_t seeds[2] = {1, 2};
    dpt_seed_run_t runs[2];
    CHECK_OK(dpt_train_seeds(c, seeds, 2, 2, NULL, runs));
    CHECK(runs[0].status == DPT_OK && runs[1].status == DPT_OK);
    CHECK(runs[0].iterations == 4 && runs[1].iterations == 4);
    dpt_config_destroy(c);
    dpt_test_rm_tree(dir);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_job_plugin") != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_unregistered_job_is_unknown),
        DPT_TEST(test_register_rules),
        DPT_TEST(test_its_check_runs),
        DPT_TEST(test_runs_and_resumes),
        DPT_TEST(test_seeds_side_by_side),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
