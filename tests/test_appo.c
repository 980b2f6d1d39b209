/*
 * APPO and IMPALA (V-trace itself: test_vtrace.c): the jobs' config rules,
 * a short CartPole run of each, checkpoint and restore, and the failures
 * that must end a run (a sampler's env error, a sampler stuck in its env).
 *
 * usage: test_appo [FAULT_ENV_PLUGIN]  (the failure cases need the plug-in)
 */
#include "dpt/rl.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "dpt/train.h"
#include "dpt_test.h"
#include "dpt_test_train.h"
#include "rl/appo_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fault_plugin;

/* ---- config ---- */

static const char *const appo_base[] = {
    "job=appo",
    "env=CartPole-v1",
    "num_workers=1",
    "num_envs_per_worker=4",
    "rollout_fragment_length=50",
    "train_batch_size=500",
    "total_timesteps=300000",
    "min_sample_timesteps_per_iteration=20000",
    "checkpoint_every=0",
};
#define NBASE (sizeof appo_base / sizeof appo_base[0])

static void test_config_rules(void)
{
    dpt_config_t *c = NULL;
    const char *frag[] = {"train_batch_size=520"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, frag, 1), DPT_EINVAL,
              "train_batch_size 520 must be a positive multiple of rollout_fragment_length 50");
    const char *dev[] = {"num_devices=3"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, dev, 1), DPT_EINVAL,
              "divisible by num_devices 3");
    const char *few[] = {"num_devices=2", "train_batch_size=50"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, few, 2), DPT_EINVAL,
              "at least and divisible by num_devices 2");
    const char *mb[] = {"sgd_minibatch_size=64"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, mb, 1), DPT_EINVAL,
              "key sgd_minibatch_size does not apply to job appo");
    const char *lstm[] = {"use_lstm=true"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, lstm, 1), DPT_EINVAL,
              "key use_lstm does not apply to job appo");
    const char *clip[] = {"job=impala", "clip_param=0.3"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, clip, 2), DPT_EINVAL,
              "key clip_param does not apply to job impala");
    const char *q[] = {"learner_queue_size=0"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, q, 1), DPT_EINVAL, "learner_queue_size");
    CHECK(c == NULL);
    dpt_job_t job;
    CHECK_OK(dpt_job_parse("impala", &job));
    CHECK(job == DPT_JOB_IMPALA);
    CHECK_ERR(dpt_job_parse("a3c", &job), DPT_EINVAL,
              "known: supervised, ppo, ddppo, appo, impala");
    /* The defaults of the job: RLlib's IMPALA settings where it has them. */
    REQUIRE_OK(dpt_test_config(&c, appo_base, 1, NULL, 0));
    CHECK(dpt_config_int(c, DPT_CFG_train_batch_size) == 500);
    CHECK(dpt_config_int(c, DPT_CFG_learner_queue_size) == 16);
    CHECK(dpt_config_float(c, DPT_CFG_learner_queue_timeout) == 300.0);
    CHECK(dpt_config_float(c, DPT_CFG_vtrace_clip_rho_threshold) == 1.0);
    dpt_config_destroy(c);
}

/* ---- runs ---- */

/* Trains cfg to its end; the last result in *last. */
static int run_to_end(dpt_trainer_t *t, dpt_train_result_t *last)
{
    int rc;
    do
        rc = dpt_trainer_iterate(t, last);
    while (!rc && !last->finished);
    return rc;
}

static double metric(const dpt_train_result_t *r, const char *name)
{
    for (size_t i = 0; i < r->nmetrics; i++)
        if (strcmp(r->metrics[i].name, name) == 0)
            return r->metrics[i].value;
    return NAN;
}

/* run_to_end, adding metric `name` of every iteration into *sum. */
static int run_summing(dpt_trainer_t *t, dpt_train_result_t *last, const char *name, double *sum)
{
    int rc;
    do {
        rc = dpt_trainer_iterate(t, last);
        if (!rc)
            *sum += metric(last, name);
    } while (!rc && !last->finished);
    return rc;
}

/* The CI smoke bar: a mean return >= 150 within 300k steps, for both jobs;
 * then the learner's metrics are there and sensible. */
static void test_cartpole_smoke(void)
{
    /* A short queue bounds the policy lag whatever the relative speed of
     * the sampler and the learner (sanitizer builds slow them unevenly). */
    static const char *const sets[3][4] = {
        {"job=appo", "learner_queue_size=2", "num_multi_gpu_tower_stacks=1",
         "num_data_load_threads=1"},
        {"job=impala", "learner_queue_size=2", "num_multi_gpu_tower_stacks=1",
         "num_data_load_threads=1"},
        /* The loader threads' pipeline learns as well. */
        {"job=appo", "learner_queue_size=2", "num_multi_gpu_tower_stacks=2",
         "num_data_load_threads=2"}};
    for (int j = 0; j < 3; j++) {
        dpt_config_t *c = NULL;
        REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, sets[j], 4));
        dpt_trainer_t *t = NULL;
        REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
        dpt_train_result_t r;
        /* "Reaches": the best mean return of 100 episodes at the end of an
         * iteration (every 20k steps), up to 300k steps. */
        double best = -1e30;
        int rc;
        do {
            rc = dpt_trainer_iterate(t, &r);
            if (!rc && r.episodes_in_window >= 100 && r.reward_mean > best)
                best = r.reward_mean;
        } while (!rc && !r.finished);
        CHECK_OK(rc);
        printf("     %s%s: best return %.1f, %.1f after %llu steps, policy lag %.2f, learner "
               "utilization "
               "%.2f, queue mean %.2f\n",
               sets[j][0] + 4, j == 2 ? " (2 stacks, 2 loaders)" : "", best, r.reward_mean,
               (unsigned long long)r.timesteps_total, metric(&r, "info/policy_lag"),
               metric(&r, "info/learner_utilization"), metric(&r, "info/learner_queue/size_mean"));
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
        /* Instrumented code changes the timing the learning depends on: the
         * plain build holds the bar, a sanitizer build checks the rest. */
        printf("     (sanitizer build: the return bar is the plain build's)\n");
#else
        CHECK(best >= 150.0);
#endif
        CHECK(r.timesteps_total == 300000); /* the learner stops at total_timesteps */
        CHECK(metric(&r, "info/policy_lag") >= 0.0);
        double u = metric(&r, "info/learner_utilization");
        CHECK(u > 0.0 && u <= 1.0);
        CHECK(metric(&r, "info/learner_queue/size_count") >= 1.0);
        CHECK(metric(&r, "info/learner_queue/size_quantiles_100") <= 16.0);
        CHECK(metric(&r, "num_env_steps_sampled") >= (double)r.timesteps_total);
        dpt_trainer_destroy(t);
        dpt_config_destroy(c);
    }
}

/* num_sgd_iter passes over every batch through a minibatch buffer of two:
 * twice the updates of one pass, each batch's steps counted once. */
static void test_passes(void)
{
    const char *sets[] = {"num_sgd_iter=2", "minibatch_buffer_size=2", "total_timesteps=40000"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, sets, 3));
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    double updates = 0.0;
    CHECK_OK(run_summing(t, &r, "info/num_updates_this_iter", &updates));
    CHECK(r.timesteps_total == 40000);
    /* The learner's own counts: 80 batches of 500 steps, each scheduled for
     * both passes (RLlib's learner thread: no ramp); the passes still owed
     * when the run had its steps are those of the buffer's two slots. */
    double taken = metric(&r, "info/learner_batches_taken");
    double sched = metric(&r, "info/learner_passes_scheduled");
    printf("     %.0f updates, %.0f batches, %.0f passes scheduled for %llu steps\n", updates,
           taken, sched, (unsigned long long)r.timesteps_total);
    CHECK(taken == 80.0 && sched == 160.0);
    CHECK(updates <= sched && sched - updates <= 2.0 * 2.0);
    /* broadcast_interval = 1: the weights went out after every update. */
    CHECK(metric(&r, "info/num_weight_broadcasts") == updates);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

/* broadcast_interval = 4: the learner publishes its weights after every
 * 4th update, counted by the learner itself. */
static void test_broadcast_interval(void)
{
    const char *sets[] = {"broadcast_interval=4", "total_timesteps=20000"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, sets, 2));
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    double updates = 0.0;
    CHECK_OK(run_summing(t, &r, "info/num_updates_this_iter", &updates));
    double b = metric(&r, "info/num_weight_broadcasts");
    printf("     %.0f updates, %.0f weight broadcasts\n", updates, b);
    CHECK(updates >= 4.0 && b == floor(updates / 4.0));
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

/* Several tower stacks and loader threads (RLlib's multi-GPU learner):
 * the config rules, the passes of test_passes through a buffer of two
 * loaded stacks out of three, the loaders' figures, two policies, and a
 * loader that dies ending the job with its error. */
static void test_tower_stacks(void)
{
    dpt_config_t *c = NULL;
    const char *big[] = {"num_multi_gpu_tower_stacks=2", "minibatch_buffer_size=2"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, big, 2), DPT_EINVAL,
              "minibatch_buffer_size does not apply with num_multi_gpu_tower_stacks = 2");
    const char *init[] = {"num_sgd_iter=2", "init_num_passes=3"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, init, 2), DPT_EINVAL,
              "init_num_passes = 3 exceeds num_sgd_iter = 2");
    const char *loaders[] = {"num_data_load_threads=2"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, loaders, 1), DPT_EINVAL,
              "num_data_load_threads = 2 needs num_multi_gpu_tower_stacks > 1");
    const char *zero[] = {"num_multi_gpu_tower_stacks=0"};
    CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, zero, 1), DPT_EINVAL,
              "num_multi_gpu_tower_stacks");
    CHECK(c == NULL);

    const char *sets[] = {"num_sgd_iter=2", "minibatch_buffer_size=2", "total_timesteps=40000",
                          "num_multi_gpu_tower_stacks=3", "num_data_load_threads=2"};
    const char *stack_sets[] = {"num_sgd_iter=2", "total_timesteps=40000",
                                "num_multi_gpu_tower_stacks=3", "num_data_load_threads=2"};
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, stack_sets, 4));
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    double updates = 0.0;
    CHECK_OK(run_summing(t, &r, "info/num_updates_this_iter", &updates));
    CHECK(r.timesteps_total == 40000);
    double load = metric(&r, "timing_breakdown/learner_load_time_ms");
    double wait = metric(&r, "timing_breakdown/learner_load_wait_time_ms");
    double deq = metric(&r, "timing_breakdown/learner_dequeue_time_ms");
    double taken = metric(&r, "info/learner_batches_taken");
    double sched = metric(&r, "info/learner_passes_scheduled");
    printf("     3 stacks, 2 loaders: %.0f updates, %.0f batches, %.0f passes scheduled for %llu "
           "steps; load %.4f ms, load wait %.4f ms, dequeue %.4f ms\n",
           updates, taken, sched, (unsigned long long)r.timesteps_total, load, wait, deq);
    /* RLlib's multi-GPU learner: a buffer of the 3 stacks, the passes
     * ramping from 1 to num_sgd_iter = 2 (1, 2, 2, ...: 2 x 80 - 1); the
     * passes owed at the end are those of the 3 stacks. */
    CHECK(taken == 80.0 && sched == 159.0);
    CHECK(updates <= sched && sched - updates <= 3.0 * 2.0);
    CHECK(load > 0.0 && isfinite(load));
    CHECK(wait >= 0.0 && isfinite(wait));
    CHECK(deq >= 0.0 && isfinite(deq));
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);

    /* One stack: no load-wait figure (the learner loads each batch itself). */
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, sets, 3));
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK(isnan(metric(&r, "timing_breakdown/learner_load_wait_time_ms")));
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);

    /* Two policies, one trained, through the loaders. */
    const char *two[] = {"policies=a,b", "policies_to_train=a", "total_timesteps=20000",
                         "num_multi_gpu_tower_stacks=2", "num_data_load_threads=2"};
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, two, 5));
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    double a_updates = 0.0;
    CHECK_OK(run_summing(t, &r, "info/learner/a/num_updates_this_iter", &a_updates));
    CHECK(r.timesteps_total == 20000);
    /* One pass a batch: policy a took one update per batch of its that the
     * learner took, none owed (the learner's own counts, not the clock). */
    taken = metric(&r, "info/learner_batches_taken");
    CHECK(taken >= 1.0 && a_updates == taken);
    CHECK(metric(&r, "info/learner_passes_scheduled") == taken);
    CHECK(isfinite(metric(&r, "policy_reward_mean/b")));
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);

    /* A loader dies: the job ends with its error, promptly. */
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, sets + 3, 2));
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    atomic_store(&dpt__appo_test_loader_fail_at, 5);
    double t0 = dpt_now();
    int rc = run_to_end(t, &r);
    double took = dpt_now() - t0;
    atomic_store(&dpt__appo_test_loader_fail_at, 0);
    CHECK(rc == DPT_EIO);
    CHECK(strstr(dpt_last_error(), "appo loader") != NULL);
    CHECK(strstr(dpt_last_error(), "injected failure (test hook)") != NULL);
    printf("     dying loader: %s (after %.2f s)\n", dpt_last_error(), took);
    /* (no bound on the time: a loaded machine may take longer; a hang is
     * what the test runner's timeout catches) */
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

/* A checkpoint restores the weights, the optimizer step and the counters;
 * training goes on from there. */
static void test_checkpoint_restore(void)
{
    /* The learner goes on between two calls (and while the checkpoint is
     * written): a total far away keeps the next iteration's target (20k
     * steps past the checkpoint's count) from being cut by it. */
    const char *sets[] = {"total_timesteps=100000000"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, sets, 1));
    dpt_trainer_t *t = NULL, *u = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK(r.iteration == 1 && r.timesteps_total >= 20000);
    char path[] = "test_appo_ckpt.safetensors";
    CHECK_OK(dpt_test_checkpoint(t, path, 1));
    size_t n;
    float *w = dpt_test_weights(t, &n);
    REQUIRE(w != NULL);
    uint64_t steps = r.timesteps_total;
    /* The saved weights are those of the moment of the checkpoint: the
     * learner keeps training, so compare with the file, not with t. */
    dpt_safetensors_t *st = NULL;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    REQUIRE_OK(dpt_trainer_create(&u, c, NULL));
    CHECK_OK(dpt_trainer_restore(u, st));
    float *w2 = dpt_test_weights(u, NULL);
    REQUIRE(w2 != NULL);
    float *saved = calloc(n, sizeof *saved); /* zeros in the table's padding, as the towers */
    REQUIRE(saved != NULL);
    CHECK_OK(dpt_safetensors_load_arena(st, "params.", dpt_trainer_vars(u), saved, n));
    CHECK(memcmp(w2, saved, n * sizeof *saved) == 0);
    /* One policy: the plain layout, as before there were several. */
    CHECK(dpt_safetensors_meta(st, "appo.policies") == NULL);
    CHECK(dpt_safetensors_find(st, "optim.m.actor.0.weight") != NULL);
    CHECK(dpt_safetensors_meta(st, "optim_step") != NULL);
    CHECK_OK(dpt_trainer_iterate(u, &r));
    CHECK(r.iteration == 2 && r.timesteps_total >= steps + 20000);
    dpt_safetensors_destroy(st);
    free(w);
    free(w2);
    free(saved);
    dpt_trainer_destroy(u);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    remove(path);
}

/* ---- several policies ---- */

/* The keys policies, policies_to_train and policy_mapping: each mistake is
 * DPT_EINVAL (exit 2) naming its key. */
static void test_policies_config(void)
{
    dpt_config_t *c = NULL;
    static const struct {
        const char *sets[3];
        const char *needle;
    } bad[] = {
        {{"policies=a,a"}, "policies = \"a,a\": policy \"a\" is named twice"},
        {{"policies="}, "policies: empty list"},
        {{"policies=a,,b"}, "policies = \"a,,b\": an empty policy name"},
        {{"policies=a,"}, "policies = \"a,\": an empty policy name"},
        {{"policies=a b"}, "policies = \"a b\": a blank inside a policy name"},
        {{"policies=a.b"}, "policies = \"a.b\": policy names are letters, digits, _ and -"},
        {{"policies=round_robin"}, "round_robin is policy_mapping's word"},
        {{"policies=a,b", "policies_to_train=c"},
         "policies_to_train: unknown policy \"c\" (policies: a, b)"},
        {{"policies=a,b", "policies_to_train=a,a"},
         "policies_to_train = \"a,a\": policy \"a\" is named twice"},
        {{"policies=a,b", "policy_mapping=a,c,a,b"},
         "policy_mapping: unknown policy \"c\" (policies: a, b)"},
        {{"policies=a,b", "policy_mapping=a,b"},
         "policy_mapping lists 2 policies: an explicit mapping names the policy of each of the "
         "num_envs_per_worker = 4 envs"},
        {{"policies=a,b", "policy_mapping=a,a,a,a"},
         "policy_mapping = a,a,a,a: policy \"b\" steps none of the num_envs_per_worker = 4 envs"},
        {{"policies=a,b,c,d,e"},
         "policy_mapping = round_robin: policy \"e\" steps none of the num_envs_per_worker = 4"},
        {{"policies=a,b,c,d,e,f,g,h,i"}, "policies = \"a,b,c,d,e,f,g,h,i\": more than 8 policies"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = 0;
        while (n < 3 && bad[i].sets[n])
            n++;
        CHECK_ERR(dpt_test_config(&c, appo_base, NBASE, bad[i].sets, n), DPT_EINVAL, bad[i].needle);
        CHECK(c == NULL);
    }
    /* The defaults: one policy, trained, round robin. */
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, NULL, 0));
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_policies), "default_policy") == 0);
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_policies_to_train), "") == 0);
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_policy_mapping), "round_robin") == 0);
    dpt_config_destroy(c);
    const char *ok[] = {"policies= a , b ", "policy_mapping=b,a,a,b", "policies_to_train=b"};
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, ok, 3));
    dpt_config_destroy(c);
}

/* The tensors whose names start with prefix are equal in both files (and
 * there is at least one); *differ (when not NULL) instead counts those that
 * differ, and then equality is not checked. */
static size_t compare_tensors(const dpt_safetensors_t *x, const dpt_safetensors_t *y,
                              const char *prefix, size_t *differ)
{
    size_t n = 0, plen = strlen(prefix);
    for (size_t i = 0; i < dpt_safetensors_count(x); i++) {
        const dpt_safetensors_tensor_t *tx = dpt_safetensors_tensor(x, i);
        if (strncmp(tx->name, prefix, plen) != 0)
            continue;
        const dpt_safetensors_tensor_t *ty = dpt_safetensors_find(y, tx->name);
        CHECK(ty != NULL);
        if (!ty)
            continue;
        n++;
        int same = tx->bytes == ty->bytes && memcmp(tx->data, ty->data, tx->bytes) == 0;
        if (differ)
            *differ += !same;
        else if (!same) {
            fprintf(stderr, "     tensor %s differs\n", tx->name);
            CHECK(same);
        }
    }
    return n;
}

/* Two policies side by side, one trained: the learner updates a, b keeps
 * its initial weights bitwise (and still samples: its episodes count);
 * the metrics are per policy; the checkpoint names both and a resume
 * restores both. */
static void test_two_policies(void)
{
    const char *sets[] = {"policies=a,b", "policies_to_train=a", "total_timesteps=60000",
                          "learner_queue_size=2"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, sets, 4));
    dpt_trainer_t *t = NULL, *u = NULL, *v = NULL;
    const char *init = "test_appo_pol_init.safetensors", *path = "test_appo_pol.safetensors",
               *again = "test_appo_pol_again.safetensors";
    /* The initial weights: a checkpoint before any training. */
    REQUIRE_OK(dpt_trainer_create(&u, c, NULL));
    CHECK_OK(dpt_test_checkpoint(u, init, 1));
    dpt_trainer_destroy(u);
    u = NULL;

    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    for (int i = 0; i < 2; i++)
        CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK(r.iteration == 2 && r.timesteps_total >= 40000);
    CHECK(isfinite(metric(&r, "info/learner/a/policy_loss")));
    CHECK(isfinite(metric(&r, "info/learner/a/cur_lr")));
    CHECK(metric(&r, "info/learner/a/num_updates_this_iter") > 0.0);
    CHECK(isnan(metric(&r, "info/learner/b/policy_loss"))); /* absent: not trained */
    CHECK(isnan(metric(&r, "info/learner/default_policy/policy_loss")));
    /* Both sample: each has finished episodes. */
    CHECK(isfinite(metric(&r, "policy_reward_mean/a")));
    CHECK(isfinite(metric(&r, "policy_reward_mean/b")));
    printf("     two policies: a %.1f (updates %.0f), b %.1f (not trained)\n",
           metric(&r, "policy_reward_mean/a"), metric(&r, "info/learner/a/num_updates_this_iter"),
           metric(&r, "policy_reward_mean/b"));
    CHECK_OK(dpt_test_checkpoint(t, path, 1));

    dpt_safetensors_t *st0 = NULL, *st = NULL, *st2 = NULL;
    size_t differ = 0;
    REQUIRE_OK(dpt_safetensors_load(&st0, init));
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    /* Self-describing: the names, each policy's tensors under its prefix,
     * no plain "params." and no optimizer for b. */
    CHECK(dpt_safetensors_meta(st, "appo.policies") != NULL &&
          strcmp(dpt_safetensors_meta(st, "appo.policies"), "a,b") == 0);
    CHECK(dpt_safetensors_meta(st, "appo.policies_to_train") != NULL &&
          strcmp(dpt_safetensors_meta(st, "appo.policies_to_train"), "a") == 0);
    CHECK(compare_tensors(st, st0, "params.", NULL) == 0);
    CHECK(compare_tensors(st, st0, "policy.b.optim.", NULL) == 0);
    differ = 0;
    CHECK(compare_tensors(st, st0, "policy.a.optim.m.", &differ) > 0);
    /* b unchanged bitwise; a changed. */
    CHECK(compare_tensors(st, st0, "policy.b.params.", NULL) > 0);
    differ = 0;
    CHECK(compare_tensors(st, st0, "policy.a.params.", &differ) > 0);
    CHECK(differ > 0);
    /* The two policies start from different weights. */
    size_t n;
    float *wa = dpt_test_weights(t, &n), *wb = calloc(n, sizeof *wb);
    REQUIRE(wa != NULL && wb != NULL);
    CHECK_OK(dpt_safetensors_load_arena(st0, "policy.b.params.", dpt_trainer_vars(t), wb, n));
    float *wa0 = calloc(n, sizeof *wa0);
    REQUIRE(wa0 != NULL);
    CHECK_OK(dpt_safetensors_load_arena(st0, "policy.a.params.", dpt_trainer_vars(t), wa0, n));
    CHECK(memcmp(wa0, wb, n * sizeof *wb) != 0);
    dpt_trainer_destroy(t);

    /* Resume: every policy, its optimizer and the counters come back (a
     * checkpoint of the restored engine is the file, tensor for tensor). */
    REQUIRE_OK(dpt_trainer_create(&v, c, NULL));
    CHECK_OK(dpt_trainer_restore(v, st));
    CHECK_OK(dpt_test_checkpoint(v, again, 1));
    REQUIRE_OK(dpt_safetensors_load(&st2, again));
    CHECK(compare_tensors(st, st2, "", NULL) == dpt_safetensors_count(st));
    CHECK(dpt_safetensors_count(st) == dpt_safetensors_count(st2));
    uint64_t up = 0, up2 = 1;
    CHECK_OK(dpt_safetensors_meta_u64(st, "policy.a.updates", &up));
    CHECK_OK(dpt_safetensors_meta_u64(st2, "policy.a.updates", &up2));
    CHECK(up == up2 && up > 0);
    CHECK_OK(dpt_trainer_iterate(v, &r));
    CHECK(r.iteration == 3 && r.timesteps_total == 60000);
    dpt_trainer_destroy(v);

    /* A checkpoint of two policies does not restore into a run of one, nor
     * into one that trains other policies, and the reverse. */
    dpt_config_t *c1 = NULL, *c2 = NULL;
    const char *other[] = {"policies=a,b", "total_timesteps=60000"};
    REQUIRE_OK(dpt_test_config(&c1, appo_base, NBASE, NULL, 0));
    REQUIRE_OK(dpt_test_config(&c2, appo_base, NBASE, other, 2));
    REQUIRE_OK(dpt_trainer_create(&u, c1, NULL));
    CHECK_ERR(dpt_trainer_restore(u, st), DPT_EFORMAT,
              "holds policies a,b; this run has policies = default_policy");
    CHECK_OK(dpt_test_checkpoint(u, again, 1));
    dpt_trainer_destroy(u);
    dpt_safetensors_destroy(st2);
    REQUIRE_OK(dpt_safetensors_load(&st2, again));
    REQUIRE_OK(dpt_trainer_create(&u, c2, NULL));
    CHECK_ERR(dpt_trainer_restore(u, st), DPT_EFORMAT,
              "trains policies a; this run has policies_to_train = a,b");
    CHECK_ERR(dpt_trainer_restore(u, st2), DPT_EFORMAT,
              "holds one policy; this run has policies = a,b");
    dpt_trainer_destroy(u);

    dpt_safetensors_destroy(st0);
    dpt_safetensors_destroy(st);
    dpt_safetensors_destroy(st2);
    free(wa);
    free(wa0);
    free(wb);
    dpt_config_destroy(c);
    dpt_config_destroy(c1);
    dpt_config_destroy(c2);
    remove(init);
    remove(path);
    remove(again);
}

/* A sampler's env fails (a NaN reward): the job ends with the sampler's
 * error. A sampler stuck inside its env: the learner's queue timeout ends
 * it, naming the queue. */
static void test_sampler_failures(void)
{
    if (!fault_plugin) {
        printf("     no fault plug-in given: skipped\n");
        return;
    }
    char env[1100];
    snprintf(env, sizeof env, "env=%s", fault_plugin);
    const char *sets[] = {env,
                          "num_envs_per_worker=2",
                          "rollout_fragment_length=10",
                          "train_batch_size=20",
                          "min_sample_timesteps_per_iteration=100",
                          "learner_queue_timeout=1"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, appo_base, NBASE, sets, 6));
    dpt_trainer_t *t = NULL;
    dpt_train_result_t r;

    setenv("DPT_TEST_FAIL_AT", "500", 1);
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    int rc = run_to_end(t, &r);
    CHECK(rc == DPT_EINVAL); /* a bad env is the user's input: exit 2 */
    CHECK(strstr(dpt_last_error(), "appo sampler 0 failed") != NULL);
    CHECK(strstr(dpt_last_error(), "reward") != NULL);
    printf("     env failure: %s\n", dpt_last_error());
    dpt_trainer_destroy(t);
    unsetenv("DPT_TEST_FAIL_AT");

    setenv("DPT_TEST_HANG_AT", "1500", 1);
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    double t0 = dpt_now();
    rc = run_to_end(t, &r);
    double took = dpt_now() - t0;
    CHECK(rc == DPT_ETIMEDOUT);
    CHECK(strstr(dpt_last_error(), "learner inqueue") != NULL);
    CHECK(strstr(dpt_last_error(), "learner_queue_timeout") != NULL);
    printf("     stuck sampler: %s (after %.1f s)\n", dpt_last_error(), took);
    /* (the queue timeout ended it; no bound on the wall time) */
    /* The stuck sampler's thread is left behind (its engine is not freed). */
    dpt_trainer_destroy(t);
    unsetenv("DPT_TEST_HANG_AT");
    dpt_config_destroy(c);
}

int main(int argc, char **argv)
{
    fault_plugin = argc > 1 ? argv[1] : NULL;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_config_rules),
        DPT_TEST(test_cartpole_smoke),
        DPT_TEST(test_passes),
        DPT_TEST(test_broadcast_interval),
        DPT_TEST(test_checkpoint_restore),
        DPT_TEST(test_policies_config),
        DPT_TEST(test_two_policies),
        DPT_TEST(test_tower_stacks),
        DPT_TEST(test_sampler_failures),
    };
    return DPT_TEST_RUN(cases);
}
