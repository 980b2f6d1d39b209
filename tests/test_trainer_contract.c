/*
 * The trainer contract (dpt/train.h), the same sequence for every job of
 * DPT_JOB_LIST on threads: create, iterate, checkpoint, restore into a fresh
 * trainer, iterate both again and compare, evaluate the checkpoint with no
 * trainer, check that the checkpoint describes itself (job, dataset or
 * env, model), and give a fresh trainer another's weights (set_weights).
 *
 * Synchronous jobs continue bitwise: the restored trainer's next iterations
 * give the weights and the metrics of the uninterrupted one. appo and impala
 * learn asynchronously (a learner thread fed by sampler threads), so what
 * they keep is what docs/CHECKPOINTS.md states: the weights, optimizer state
 * and counters of the checkpoint; their later iterations are not compared.
 * Every RL job's checkpoint keeps RLlib's step counters, and the restored
 * trainer counts on from them.
 * (Under mpirun the same contract is run through `dpt train` by
 * tests/mpi_contract_test.sh.)
 */
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt_test_train.h"
#include "dpt/checkpoint.h"
#include "dpt/status.h"
#include "dpt/train.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[PATH_MAX / 2];

typedef struct job_case {
    const char *sets[16]; /* NULL-terminated */
    int bitwise;          /* the continuation after a restore is bitwise */
    const char *model;    /* a metadata key that describes the model */
} job_case_t;

#define SPIRALS "dataset=spirals", "spirals_points=256", "hidden=16,16", "batch_size=32"
#define CARTPOLE "env=CartPole-v1", "policy_hidden=16,16"

static const job_case_t cases[DPT_JOB_COUNT] = {
    [DPT_JOB_SUPERVISED] = {{"job=supervised", SPIRALS, "num_devices=2", "epochs=10"}, 1, "layers"},
    [DPT_JOB_PPO] = {{"job=ppo", CARTPOLE, "num_envs_per_worker=4", "rollout_fragment_length=32",
                      "sgd_minibatch_size=32", "num_sgd_iter=2", "num_devices=2"},
                     1,
                     "policy_hidden"},
    [DPT_JOB_DDPPO] = {{"job=ddppo", CARTPOLE, "num_workers=2", "num_envs_per_worker=2",
                        "rollout_fragment_length=32", "sgd_minibatch_size=16", "num_sgd_iter=2"},
                       1,
                       "policy_hidden"},
    [DPT_JOB_APPO] = {{"job=appo", CARTPOLE, "num_workers=1", "num_envs_per_worker=2",
                       "rollout_fragment_length=25", "train_batch_size=50",
                       "min_sample_timesteps_per_iteration=200", "total_timesteps=1000000"},
                      0,
                      "policy_hidden"},
    [DPT_JOB_IMPALA] = {{"job=impala", CARTPOLE, "num_workers=1", "num_envs_per_worker=2",
                         "rollout_fragment_length=25", "train_batch_size=50",
                         "min_sample_timesteps_per_iteration=200", "total_timesteps=1000000"},
                        0,
                        "policy_hidden"},
    [DPT_JOB_SYNC_REPLICAS] = {{"job=sync_replicas", SPIRALS, "total_num_replicas=2",
                                "replicas_to_aggregate=2", "epochs=10"},
                               1,
                               "layers"},
};

static dpt_config_t *case_config(const job_case_t *jc)
{
    size_t n = 0;
    while (n < 16 && jc->sets[n])
        n++;
    dpt_config_t *c = NULL;
    if (dpt_test_config(&c, jc->sets, n, NULL, 0) != 0)
        fprintf(stderr, "config: %s\n", dpt_last_error());
    return c;
}

/* 1 when the trainer's weights are the checkpoint's "params." tensors. */
static int weights_are_checkpoint(dpt_trainer_t *t, const dpt_safetensors_t *st)
{
    float *w = dpt_test_weights(t, NULL);
    if (!w)
        return 0;
    const dpt_vartable_t *vars = dpt_trainer_vars(t);
    int same = 1;
    for (size_t i = 0; same && i < vars->nvars; i++) {
        char name[DPT_VAR_NAME_MAX + 16];
        snprintf(name, sizeof name, "params.%s", vars->vars[i].name);
        const dpt_safetensors_tensor_t *x = dpt_safetensors_find(st, name);
        same = x &&
               memcmp(x->data, w + vars->vars[i].offset, vars->vars[i].count * sizeof(float)) == 0;
    }
    free(w);
    return same;
}

/* set_weights: a fresh trainer given a's weights holds them and evaluates
 * as a does; bad input changes nothing. sync_replicas refuses it. */
static void set_weights_part(dpt_job_t job, const dpt_config_t *c, dpt_trainer_t *a)
{
    dpt_trainer_t *f = NULL;
    REQUIRE_OK(dpt_trainer_create(&f, c, NULL));
    size_t n;
    float *wa = dpt_test_weights(a, &n), *w0 = dpt_test_weights(f, NULL);
    REQUIRE(wa && w0);
    if (job == DPT_JOB_SYNC_REPLICAS) {
        CHECK_ERR(dpt_trainer_set_weights(f, wa, n), DPT_ENOTSUP, "restore a checkpoint");
        goto out;
    }
    CHECK_ERR(dpt_trainer_set_weights(f, wa, n - 1), DPT_EINVAL, "the model has");
    CHECK_ERR(dpt_trainer_set_weights(f, NULL, n), DPT_EINVAL, "set_weights of 0 floats");
    const dpt_var_t *last = &dpt_trainer_vars(f)->vars[dpt_trainer_vars(f)->nvars - 1];
    size_t at = last->count - 1;
    float keep = wa[last->offset + at];
    wa[last->offset + at] = NAN;
    char want[DPT_VAR_NAME_MAX + 48];
    snprintf(want, sizeof want, "%s[%zu] is nan; nothing changed", last->name, at);
    CHECK_ERR(dpt_trainer_set_weights(f, wa, n), DPT_ENUMERIC, want);
    wa[last->offset + at] = keep;
    if (last->offset + last->count < n) { /* the table's padding at the end */
        wa[n - 1] = INFINITY;
        snprintf(want, sizeof want, "(padding after %s) is inf", last->name);
        CHECK_ERR(dpt_trainer_set_weights(f, wa, n), DPT_ENUMERIC, want);
        wa[n - 1] = 0.0f;
    }
    float *now = dpt_test_weights(f, NULL);
    CHECK(now && memcmp(now, w0, n * sizeof *now) == 0);
    free(now);

    CHECK_OK(dpt_trainer_set_weights(f, wa, n));
    now = dpt_test_weights(f, NULL);
    CHECK(now && memcmp(now, wa, n * sizeof *now) == 0);
    free(now);
    /* a's own evaluation, for the jobs whose weights change only in
     * iterate(); appo and impala learn between calls, so another fresh
     * trainer given the same weights stands in for a. */
    dpt_trainer_t *g = a;
    if (job == DPT_JOB_APPO || job == DPT_JOB_IMPALA) {
        REQUIRE_OK(dpt_trainer_create(&g, c, NULL));
        CHECK_OK(dpt_trainer_set_weights(g, wa, n));
    }
    dpt_eval_result_t ea, ef;
    CHECK_OK(dpt_trainer_evaluate(g, 3, 11, &ea));
    CHECK_OK(dpt_trainer_evaluate(f, 3, 11, &ef));
    if (g != a)
        dpt_trainer_destroy(g);
    CHECK(ea.count == ef.count);
    if (DPT_JOB_IS_RL(job))
        CHECK(ea.mean_return == ef.mean_return && ea.mean_length == ef.mean_length);
    else
        CHECK(ea.loss == ef.loss && ea.accuracy == ef.accuracy);
    /* It trains on from them. */
    dpt_train_result_t r;
    CHECK_OK(dpt_trainer_iterate(f, &r));
out:
    free(wa);
    free(w0);
    dpt_trainer_destroy(f);
}

static void contract(dpt_job_t job)
{
    const job_case_t *jc = &cases[job];
    dpt_config_t *c = case_config(jc);
    REQUIRE(c);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.safetensors", tmpdir, dpt_job_name(job));
    dpt_trainer_t *a = NULL, *b = NULL;
    dpt_train_result_t ra, rb;
    REQUIRE_OK(dpt_trainer_create(&a, c, NULL));
    for (int i = 0; i < 2; i++)
        REQUIRE_OK(dpt_trainer_iterate(a, &ra));
    REQUIRE_OK(dpt_test_checkpoint(a, path, 1));
    dpt_safetensors_t *st = NULL;
    REQUIRE_OK(dpt_safetensors_load(&st, path));

    /* Restored into a fresh trainer: the checkpoint's weights and counters. */
    REQUIRE_OK(dpt_trainer_create(&b, c, NULL));
    REQUIRE_OK(dpt_trainer_restore(b, st));
    CHECK(weights_are_checkpoint(b, st));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(dpt_trainer_iterate(b, &rb));
        if (jc->bitwise)
            CHECK_OK(dpt_trainer_iterate(a, &ra));
    }
    CHECK(rb.iteration == 4);
    set_weights_part(job, c, b);
    /* RL jobs: RLlib's step counters, kept by the checkpoint and continued
     * by the restored trainer (tests/test_rl_counters.c: how each job
     * counts). */
    static const char *const counters[4] = {"num_env_steps_sampled", "num_env_steps_trained",
                                            "num_agent_steps_sampled", "num_agent_steps_trained"};
    for (int k = 0; DPT_JOB_IS_RL(job) && k < 4; k++) {
        uint64_t saved = 0;
        CHECK_OK(dpt_safetensors_meta_u64(st, counters[k], &saved));
        CHECK(saved > 0 && dpt_train_result_get(&rb, counters[k]) > (double)saved);
    }
    if (jc->bitwise) {
        size_t n;
        float *wa = dpt_test_weights(a, &n), *wb = dpt_test_weights(b, NULL);
        REQUIRE(wa && wb);
        CHECK(memcmp(wa, wb, n * sizeof *wa) == 0);
        CHECK(ra.timesteps_total == rb.timesteps_total);
        CHECK(dpt_test_same_metrics(&ra, &rb));
        free(wa);
        free(wb);
    }

    /* It describes itself. */
    const char *data_key = DPT_JOB_IS_RL(job) ? "env" : "dataset";
    const char *want_data = DPT_JOB_IS_RL(job) ? "CartPole-v1" : "spirals";
    const char *job_meta = dpt_safetensors_meta(st, "job");
    const char *data = dpt_safetensors_meta(st, data_key);
    const char *model = dpt_safetensors_meta(st, jc->model);
    CHECK(job_meta && strcmp(job_meta, dpt_job_name(job)) == 0);
    CHECK(data && strcmp(data, want_data) == 0);
    CHECK(model && model[0]);
    CHECK(dpt_safetensors_meta(st, "config") != NULL);

    /* And evaluates with no trainer and no config. */
    dpt_eval_result_t ev;
    dpt_job_t got;
    CHECK_OK(dpt_eval_checkpoint(path, NULL, 0, 2, 1, &ev, NULL, 0, &got));
    CHECK(got == job);
    CHECK(DPT_JOB_IS_RL(job) ? ev.count == 2 && isfinite(ev.mean_return)
                             : isfinite(ev.accuracy) && ev.accuracy >= 0.0);
    dpt_safetensors_destroy(st);
    dpt_trainer_destroy(a);
    dpt_trainer_destroy(b);
    dpt_config_destroy(c);
    remove(path);
}

static void test_supervised(void)
{
    contract(DPT_JOB_SUPERVISED);
}
static void test_ppo(void)
{
    contract(DPT_JOB_PPO);
}
static void test_ddppo(void)
{
    contract(DPT_JOB_DDPPO);
}
static void test_appo(void)
{
    contract(DPT_JOB_APPO);
}
static void test_impala(void)
{
    contract(DPT_JOB_IMPALA);
}
static void test_sync_replicas(void)
{
    contract(DPT_JOB_SYNC_REPLICAS);
}

/* Every job of the list has a case here: a new job cannot skip the
 * contract. */
static void test_every_job_has_a_case(void)
{
    for (int j = 0; j < DPT_JOB_COUNT; j++)
        CHECK(cases[j].sets[0] != NULL && cases[j].model != NULL);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_contract") != 0)
        return 1;
    static const dpt_test_case_t tests[] = {
        DPT_TEST(test_every_job_has_a_case),
        DPT_TEST(test_supervised),
        DPT_TEST(test_ppo),
        DPT_TEST(test_ddppo),
        DPT_TEST(test_appo),
        DPT_TEST(test_impala),
        DPT_TEST(test_sync_replicas),
    };
    int rc = DPT_TEST_RUN(tests);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
