/*
 * RLlib's step counters in every RL job (num_env_steps_sampled,
 * num_env_steps_trained, num_agent_steps_sampled, num_agent_steps_trained;
 * docs/RL.md):
 *  - PPO and DD-PPO count each iteration's batch once as trained, however
 *    many epochs go over it: trained = sampled = timesteps_total, exactly
 *    (DD-PPO: every worker's steps);
 *  - APPO with num_sgd_iter = 3 counts every learner pass: trained is
 *    3 x sampled but for the passes still owed to the batches in the
 *    learner's minibatch buffer, and exactly its updates x
 *    train_batch_size; a policy not trained samples but trains nothing;
 *  - the four are consecutive metrics, in that order, agent = env;
 *  - checkpoints keep them (metadata under the same names) and a restored
 *    trainer continues them; a checkpoint without them (an older dpt's) is
 *    read as sampled = trained = its timestep counter; a value that is not
 *    a count is refused (DPT_EFORMAT) and the trainer is unchanged.
 * Every bound is on the engines' own counters; nothing depends on timing.
 */
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt_test_train.h"

#include "dpt/checkpoint.h"
#include "dpt/status.h"
#include "dpt/train.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[PATH_MAX / 2];

static const char *const counter_names[4] = {"num_env_steps_sampled", "num_env_steps_trained",
                                             "num_agent_steps_sampled", "num_agent_steps_trained"};

typedef struct counters {
    double sampled, trained; /* env steps; the agent counters must equal them */
} counters_t;

/* The counters of r; CHECKs that the four are consecutive metrics in
 * counter_names' order, and that agent steps equal env steps. */
static counters_t counters_of(const dpt_train_result_t *r)
{
    counters_t c = {-1.0, -1.0};
    size_t at = r->nmetrics;
    for (size_t i = 0; i < r->nmetrics; i++)
        if (strcmp(r->metrics[i].name, counter_names[0]) == 0)
            at = i;
    CHECK(at + 4 <= r->nmetrics);
    if (at + 4 > r->nmetrics)
        return c;
    for (int k = 1; k < 4; k++)
        CHECK(strcmp(r->metrics[at + (size_t)k].name, counter_names[k]) == 0);
    c.sampled = r->metrics[at].value;
    c.trained = r->metrics[at + 1].value;
    CHECK(r->metrics[at + 2].value == c.sampled);
    CHECK(r->metrics[at + 3].value == c.trained);
    return c;
}

/* Metadata `key` of st as a number (-1 when absent or malformed). */
static double meta_count(const dpt_safetensors_t *st, const char *key)
{
    uint64_t v = 0;
    return dpt_safetensors_meta_u64(st, key, &v) ? -1.0 : (double)v;
}

/* Copies checkpoint src to tmpdir/name without the four counters (drop)
 * and with metadata key = value (key NULL: none), as a checkpoint of an
 * older dpt or a damaged one. */
static int rewrite(const char *src, const char *name, int drop, const char *key, const char *value,
                   char *path, size_t size)
{
    snprintf(path, size, "%s/%s", tmpdir, name);
    dpt_safetensors_t *st = NULL;
    dpt_safetensors_writer_t *w = NULL;
    int rc = dpt_safetensors_load(&st, src);
    if (!rc)
        rc = dpt_safetensors_writer_create(&w);
    for (size_t i = 0; !rc && i < dpt_safetensors_count(st); i++) {
        const dpt_safetensors_tensor_t *x = dpt_safetensors_tensor(st, i);
        rc = dpt_safetensors_add(w, x->name, x->dtype, x->ndim, x->shape, x->data);
    }
    for (size_t i = 0; !rc && i < dpt_safetensors_meta_count(st); i++) {
        const char *k, *v;
        int counter = 0;
        rc = dpt_safetensors_meta_at(st, i, &k, &v);
        for (int j = 0; !rc && j < 4; j++)
            counter |= strcmp(k, counter_names[j]) == 0;
        if (!rc && strncmp(k, "dpt.", 4) != 0 && !(drop && counter) &&
            !(key && strcmp(k, key) == 0))
            rc = dpt_safetensors_set_meta(w, k, v);
    }
    if (!rc && key)
        rc = dpt_safetensors_set_meta(w, key, value);
    if (!rc)
        rc = dpt_safetensors_save(w, path);
    dpt_safetensors_writer_destroy(w);
    dpt_safetensors_destroy(st);
    return rc;
}

/* A fresh trainer of c restored from the checkpoint at path, one
 * iteration on, into *r. */
static int restored_iteration(const dpt_config_t *c, const char *path, dpt_train_result_t *r)
{
    dpt_safetensors_t *st = NULL;
    dpt_trainer_t *t = NULL;
    int rc = dpt_safetensors_load(&st, path);
    if (!rc)
        rc = dpt_trainer_create(&t, c, NULL);
    if (!rc)
        rc = dpt_trainer_restore(t, st);
    if (!rc)
        rc = dpt_trainer_iterate(t, r);
    dpt_trainer_destroy(t);
    dpt_safetensors_destroy(st);
    return rc;
}

/* ---- PPO and DD-PPO: trained = sampled, exactly ------------------------------------ */

/* Three iterations of `rows` env steps (all workers') each, num_sgd_iter
 * = 3; a checkpoint after the second. */
static void synchronous_job(const char *job, const char *const *sets, size_t nsets, double rows)
{
    char line[64], path[PATH_MAX], old[PATH_MAX], moved[PATH_MAX], bad[PATH_MAX];
    snprintf(line, sizeof line, "job=%s", job);
    const char *const base[] = {line, "env=CartPole-v1", "policy_hidden=16,16", "num_sgd_iter=3",
                                "total_timesteps=100000"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, base, 5, sets, nsets));
    snprintf(path, sizeof path, "%s/%s.safetensors", tmpdir, job);
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r, third;
    for (int i = 1; i <= 3; i++) {
        REQUIRE_OK(dpt_trainer_iterate(t, &r));
        counters_t k = counters_of(&r);
        /* Each batch counts once, whatever num_sgd_iter. */
        CHECK(k.sampled == rows * i && k.trained == k.sampled);
        CHECK((double)r.timesteps_total == k.sampled);
        if (i == 2)
            REQUIRE_OK(dpt_test_checkpoint(t, path, 1));
    }
    third = r;
    dpt_trainer_destroy(t);

    /* The checkpoint holds them; a restored trainer continues them (and the
     * whole result: the job resumes bitwise). */
    dpt_safetensors_t *st = NULL;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    for (int k = 0; k < 4; k++)
        CHECK(meta_count(st, counter_names[k]) == 2 * rows);
    dpt_safetensors_destroy(st);
    REQUIRE_OK(restored_iteration(c, path, &r));
    CHECK(counters_of(&r).sampled == 3 * rows && counters_of(&r).trained == 3 * rows);
    CHECK(dpt_test_same_metrics(&r, &third));

    /* Counters the checkpoint holds are read, not derived from its steps. */
    REQUIRE_OK(rewrite(path, "moved.safetensors", 0, "num_env_steps_trained", "7000", moved,
                       sizeof moved));
    REQUIRE_OK(restored_iteration(c, moved, &r));
    CHECK(r.timesteps_total == (uint64_t)(3 * rows));
    CHECK(dpt_train_result_get(&r, "num_env_steps_trained") == 7000 + rows);
    CHECK(dpt_train_result_get(&r, "num_agent_steps_trained") == 3 * rows);

    /* An older dpt's checkpoint: sampled = trained = its steps. */
    REQUIRE_OK(rewrite(path, "old.safetensors", 1, NULL, NULL, old, sizeof old));
    REQUIRE_OK(dpt_safetensors_load(&st, old));
    CHECK(dpt_safetensors_meta(st, counter_names[0]) == NULL);
    dpt_safetensors_destroy(st);
    REQUIRE_OK(restored_iteration(c, old, &r));
    CHECK(counters_of(&r).sampled == 3 * rows && counters_of(&r).trained == 3 * rows);

    /* Not a count: refused, and the trainer is as it was (fresh). */
    REQUIRE_OK(
        rewrite(path, "bad.safetensors", 0, "num_agent_steps_sampled", "12x", bad, sizeof bad));
    REQUIRE_OK(dpt_safetensors_load(&st, bad));
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    CHECK_ERR(dpt_trainer_restore(t, st), DPT_EFORMAT,
              "metadata num_agent_steps_sampled = \"12x\" is not an unsigned 64-bit integer");
    printf("     %s: refused: %s\n", job, dpt_last_error());
    CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK(r.iteration == 1 && counters_of(&r).sampled == rows && counters_of(&r).trained == rows);
    dpt_trainer_destroy(t);
    dpt_safetensors_destroy(st);
    dpt_config_destroy(c);
}

static void test_ppo_trained_equals_sampled(void)
{
    static const char *const sets[] = {"num_envs_per_worker=2", "rollout_fragment_length=32",
                                       "sgd_minibatch_size=16"};
    synchronous_job("ppo", sets, 3, 64.0);
}

/* Two workers: every worker's steps (2 x 2 envs x 32 steps). */
static void test_ddppo_trained_equals_sampled(void)
{
    static const char *const sets[] = {"num_workers=2", "num_envs_per_worker=2",
                                       "rollout_fragment_length=32", "sgd_minibatch_size=16",
                                       "sync_frac=1"};
    synchronous_job("ddppo", sets, 5, 128.0);
}

/* ---- APPO: every learner pass ------------------------------------------------------ */

enum { APPO_B = 50, APPO_PASSES = 3, APPO_BUFFER = 2 };

static const char *const appo_base[] = {"job=appo",
                                        "env=CartPole-v1",
                                        "policy_hidden=16,16",
                                        "num_workers=1",
                                        "num_envs_per_worker=2",
                                        "rollout_fragment_length=25",
                                        "train_batch_size=50",
                                        "num_sgd_iter=3",
                                        "minibatch_buffer_size=2",
                                        "min_sample_timesteps_per_iteration=500"};
#define APPO_NBASE (sizeof appo_base / sizeof appo_base[0])

/* The bound of the learner's passes. A batch counts as sampled on its
 * first pass and as trained on each of its APPO_PASSES passes (the
 * minibatch buffer gives every batch all of them: init_num_passes is
 * num_sgd_iter). The batches whose passes are not all done are those in
 * the buffer, at most APPO_BUFFER, each with at least one pass done, so
 *     0 <= APPO_PASSES x sampled - trained <= (APPO_PASSES - 1) x APPO_BUFFER x B.
 * The learner's step takes both counts with its update, under one lock,
 * and every update trains on one batch: trained = updates x B exactly. */
static void check_passes(counters_t k, double owed_before)
{
    double owed = APPO_PASSES * k.sampled - k.trained - owed_before;
    CHECK(owed >= 0.0 && owed <= (APPO_PASSES - 1) * APPO_BUFFER * APPO_B);
    if (!(owed >= 0.0 && owed <= (APPO_PASSES - 1) * APPO_BUFFER * APPO_B))
        fprintf(stderr, "sampled %.0f trained %.0f owed %.0f\n", k.sampled, k.trained, owed);
}

static void test_appo_counts_every_pass(void)
{
    const char *sets[] = {"total_timesteps=3000"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, appo_base, APPO_NBASE, sets, 1));
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    double updates = 0.0;
    counters_t k = {0.0, 0.0};
    int iterations = 0;
    do {
        REQUIRE_OK(dpt_trainer_iterate(t, &r));
        updates += dpt_train_result_get(&r, "info/num_updates_this_iter");
        k = counters_of(&r);
        CHECK(k.sampled == (double)r.timesteps_total);
        CHECK(k.trained == updates * APPO_B);
        check_passes(k, 0.0);
        iterations++;
    } while (!r.finished && iterations < 100);
    CHECK(r.finished && k.sampled == 3000.0);
    printf("     appo: %d iterations, sampled %.0f, trained %.0f (%.0f updates)\n", iterations,
           k.sampled, k.trained, updates);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

/* The checkpoint's counters are one snapshot of the learner's (taken with
 * its steps and updates); a restored trainer continues from them, and an
 * older checkpoint's are its steps. The passes owed at the checkpoint are
 * not made up after it (the buffer is not saved). */
static void test_appo_counters_restored(void)
{
    /* Far from the end, so no iteration is cut by total_timesteps. */
    const char *sets[] = {"total_timesteps=100000000"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, appo_base, APPO_NBASE, sets, 1));
    char path[PATH_MAX], old[PATH_MAX];
    snprintf(path, sizeof path, "%s/appo.safetensors", tmpdir);
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    REQUIRE_OK(dpt_trainer_iterate(t, &r));
    REQUIRE_OK(dpt_test_checkpoint(t, path, 1));
    dpt_trainer_destroy(t);
    dpt_safetensors_t *st = NULL;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    counters_t ck = {meta_count(st, counter_names[0]), meta_count(st, counter_names[1])};
    CHECK(meta_count(st, counter_names[2]) == ck.sampled);
    CHECK(meta_count(st, counter_names[3]) == ck.trained);
    dpt_safetensors_destroy(st);
    /* The learner went on after the report, up to the checkpoint. */
    CHECK(ck.sampled >= (double)r.timesteps_total);
    check_passes(ck, 0.0);
    double owed = APPO_PASSES * ck.sampled - ck.trained;

    REQUIRE_OK(restored_iteration(c, path, &r));
    counters_t k = counters_of(&r);
    double updates = dpt_train_result_get(&r, "info/num_updates_this_iter");
    CHECK(k.sampled == (double)r.timesteps_total && k.sampled >= ck.sampled + 500);
    CHECK(k.trained == ck.trained + updates * APPO_B);
    check_passes(k, owed);

    /* An older checkpoint: both counters start at its steps. */
    REQUIRE_OK(rewrite(path, "appo_old.safetensors", 1, NULL, NULL, old, sizeof old));
    REQUIRE_OK(restored_iteration(c, old, &r));
    k = counters_of(&r);
    updates = dpt_train_result_get(&r, "info/num_updates_this_iter");
    CHECK(k.sampled == (double)r.timesteps_total);
    CHECK(k.trained == ck.sampled + updates * APPO_B);
    dpt_config_destroy(c);
}

/* Two policies, one trained: both sample; only the trained one's batches
 * count as trained (one pass each). */
static void test_appo_untrained_policy(void)
{
    const char *sets[] = {"policies=a,b", "policies_to_train=a", "num_sgd_iter=1",
                          "total_timesteps=2000"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, appo_base, APPO_NBASE, sets, 4));
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    double updates = 0.0;
    int iterations = 0;
    do {
        REQUIRE_OK(dpt_trainer_iterate(t, &r));
        updates += dpt_train_result_get(&r, "info/learner/a/num_updates_this_iter");
        iterations++;
    } while (!r.finished && iterations < 100);
    counters_t k = counters_of(&r);
    CHECK(k.sampled == 2000.0 && k.sampled == (double)r.timesteps_total);
    CHECK(k.trained == updates * APPO_B && k.trained < k.sampled && updates > 0.0);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_counters") != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_ppo_trained_equals_sampled), DPT_TEST(test_ddppo_trained_equals_sampled),
        DPT_TEST(test_appo_counts_every_pass),     DPT_TEST(test_appo_counters_restored),
        DPT_TEST(test_appo_untrained_policy),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
