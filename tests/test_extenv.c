/*
 * External envs (dpt/extenv.h): the caller steps the envs, the trainer acts
 * and learns. The caller here steps CartPole-v1's own code with the streams
 * the runner would have given it (seed, rank 0, env i), truncating at 500
 * steps as the runner does, so a trainer on the external env must end
 * bitwise where the same trainer on the built-in env ends: ppo and ddppo.
 * appo learns from the caller as its sampler. Then every refusal: bad
 * spaces, a config that does not name the env, envs of the wrong count,
 * a second runner, requests answered out of turn, non-finite values, a
 * close in the middle of an iteration, and evaluating without the caller.
 */
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt_test_train.h"
#include "dpt_test_extenv.h"
#include "dpt/checkpoint.h"
#include "dpt/extenv.h"
#include "dpt/status.h"
#include "dpt/train.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[PATH_MAX / 2];

#define SMALL "num_envs_per_worker=4", "rollout_fragment_length=32", "policy_hidden=16,16"

/* The same job on the built-in env and on the external one served by the
 * same code: the same weights, results and episodes. */
static void same_as_builtin(const char *job, const char *extra)
{
    const char *base[] = {job, SMALL, "sgd_minibatch_size=32", "num_sgd_iter=2", "seed=5", extra};
    dpt_config_t *cb = NULL, *ce = NULL;
    const char *bsets[] = {"env=CartPole-v1"}, *esets[] = {"env=external:CartPole"};
    REQUIRE_OK(dpt_test_config(&cb, base, COUNT(base), bsets, 1));
    REQUIRE_OK(dpt_test_config(&ce, base, COUNT(base), esets, 1));
    dpt_ext_t *x = cartpole_ext(NENVS);
    REQUIRE(x);
    dpt_trainer_env_t te = {.ext = x};
    dpt_trainer_t *tb = NULL, *tx = NULL;
    REQUIRE_OK(dpt_trainer_create(&tb, cb, NULL));
    REQUIRE_OK(dpt_trainer_create(&tx, ce, &te));
    envs_t e;
    envs_init(&e, 5, 0);
    dpt_train_result_t rb, rx;
    for (int i = 0; i < 6; i++) {
        REQUIRE_OK(dpt_trainer_iterate(tb, &rb));
        REQUIRE_OK(serve(x, tx, &e, &rx));
        CHECK(rb.timesteps_total == rx.timesteps_total);
        CHECK(rb.episodes_in_window == rx.episodes_in_window);
        CHECK(rb.reward_mean == rx.reward_mean || (isnan(rb.reward_mean) && isnan(rx.reward_mean)));
        CHECK(dpt_test_same_metrics(&rb, &rx));
    }
    CHECK(e.resets == 1 && e.steps == 6 * 32);
    CHECK(rx.episodes_in_window > 0);
    size_t n;
    float *wb = dpt_test_weights(tb, &n), *wx = dpt_test_weights(tx, NULL);
    REQUIRE(wb && wx);
    CHECK(memcmp(wb, wx, n * sizeof *wb) == 0);

    /* A checkpoint keeps the learner; the restored trainer asks the caller
     * for a reset (new episodes) and trains on. */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ext.safetensors", tmpdir);
    REQUIRE_OK(dpt_test_checkpoint(tx, path, 1));
    dpt_safetensors_t *st = NULL;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    CHECK(strcmp(dpt_safetensors_meta(st, "env"), "external:CartPole") == 0);
    dpt_trainer_destroy(tx);
    tx = NULL;
    REQUIRE_OK(dpt_trainer_create(&tx, ce, &te));
    REQUIRE_OK(dpt_trainer_restore(tx, st));
    float *wr = dpt_test_weights(tx, NULL);
    CHECK(wr && memcmp(wr, wx, n * sizeof *wr) == 0);
    size_t resets = e.resets;
    REQUIRE_OK(serve(x, tx, &e, &rx));
    CHECK(e.resets == resets + 1);
    /* The caller asks for new episodes itself. */
    CHECK_OK(dpt_ext_restart(x));
    REQUIRE_OK(serve(x, tx, &e, &rx));
    CHECK(e.resets == resets + 2);
    REQUIRE_OK(serve(x, tx, &e, &rx));
    CHECK(e.resets == resets + 2);
    CHECK(rx.iteration == 9 && rx.timesteps_total == 9 * 32 * NENVS);
    /* Without the caller nothing makes the env: dpt eval says so. */
    dpt_eval_result_t ev;
    CHECK_ERR(dpt_eval_checkpoint(path, NULL, 0, 2, 1, &ev, NULL, 0, NULL), DPT_EINVAL,
              "an external env, stepped by the program that trained it");
    /* Nor does the trainer's own evaluation. */
    CHECK_ERR(dpt_trainer_evaluate(tx, 2, 1, &ev), DPT_EINVAL, "serves one runner");
    free(wr);
    free(wb);
    free(wx);
    dpt_safetensors_destroy(st);
    dpt_trainer_destroy(tb);
    dpt_trainer_destroy(tx);
    dpt_ext_destroy(x);
    dpt_config_destroy(cb);
    dpt_config_destroy(ce);
    free(e.states);
    remove(path);
}

static void test_ppo_is_bitwise_the_builtin_run(void)
{
    same_as_builtin("job=ppo", "num_devices=1");
}

/* Two devices: the built-in run steps a share of its envs on each (its own
 * stream of actions per device); the external one acts on all at once and
 * learns on both. Same config, same answer. */
static void test_ppo_two_devices_repeats_bitwise(void)
{
    float *w[2] = {NULL, NULL};
    size_t n = 0;
    for (int k = 0; k < 2; k++) {
        dpt_config_t *c = NULL;
        const char *sets[] = {"job=ppo", "env=external:CartPole", SMALL, "sgd_minibatch_size=32",
                              "num_devices=2"};
        REQUIRE_OK(dpt_test_config(&c, sets, COUNT(sets), NULL, 0));
        dpt_ext_t *x = cartpole_ext(NENVS);
        REQUIRE(x);
        dpt_trainer_env_t te = {.ext = x};
        dpt_trainer_t *t = NULL;
        REQUIRE_OK(dpt_trainer_create(&t, c, &te));
        envs_t e;
        envs_init(&e, 1, 0);
        dpt_train_result_t r;
        for (int i = 0; i < 4; i++)
            REQUIRE_OK(serve(x, t, &e, &r));
        w[k] = dpt_test_weights(t, &n);
        dpt_trainer_destroy(t);
        dpt_ext_destroy(x);
        dpt_config_destroy(c);
        free(e.states);
    }
    REQUIRE(w[0] && w[1]);
    CHECK(memcmp(w[0], w[1], n * sizeof(float)) == 0);
    free(w[0]);
    free(w[1]);
}

static void test_ddppo_is_bitwise_the_builtin_run(void)
{
    same_as_builtin("job=ddppo", "num_workers=1");
}

static void test_appo_learns_from_the_caller(void)
{
    const char *sets[] = {"job=appo",
                          "env=external:CartPole",
                          SMALL,
                          "num_workers=1",
                          "rollout_fragment_length=25",
                          "train_batch_size=100",
                          "min_sample_timesteps_per_iteration=400",
                          "total_timesteps=100000"};
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_test_config(&c, sets, COUNT(sets), NULL, 0));
    dpt_ext_t *x = cartpole_ext(NENVS);
    REQUIRE(x);
    dpt_trainer_env_t te = {.ext = x};
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, &te));
    envs_t e;
    envs_init(&e, 1, 0);
    dpt_train_result_t r;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(serve(x, t, &e, &r));
        CHECK(r.iteration == (uint64_t)i + 1 && r.timesteps_total >= (uint64_t)(i + 1) * 400);
    }
    CHECK(e.resets == 1 && e.steps * NENVS >= 1200);
    CHECK(dpt_train_result_get(&r, "info/num_updates_this_iter") > 0);
    /* The sampler steps on between iterations: its envs cannot start anew. */
    CHECK_ERR(dpt_ext_restart(x), DPT_ESTATE, "runs between iterations");
    /* The caller leaves half-way: the iteration ends, never waits for
     * batches that cannot come. It fails with the sampler's error, unless
     * the learner already held the batches it needed (the sampler runs
     * ahead between iterations): both are right, a hang is not. */
    REQUIRE_OK(dpt_ext_iterate_begin(x, t, &r));
    const void *a;
    int what = dpt_ext_poll(x, &a); /* DONE when the held batches sufficed */
    CHECK(what == DPT_EXT_STEP || what == DPT_EXT_DONE);
    dpt_ext_close(x);
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_DONE);
    int erc = dpt_ext_iterate_end(x);
    CHECK(erc == DPT_OK ||
          (erc == DPT_ECLOSED && strstr(dpt_last_error(), "the caller closed the external env")));
    CHECK_ERR(dpt_ext_iterate_begin(x, t, &r), DPT_ESTATE, "closed");
    /* The sampler waits for the caller between iterations; destroying the
     * trainer ends it. */
    dpt_trainer_destroy(t);
    dpt_ext_destroy(x);
    dpt_config_destroy(c);
    free(e.states);
}

static void test_spaces_are_checked(void)
{
    dpt_env_class_t s = cartpole_spaces();
    dpt_ext_t *x = NULL;
    s.state_size = 16;
    CHECK_ERR(dpt_ext_create(&x, &s, 4), DPT_EINVAL, "a class without functions");
    s.state_size = 0;
    CHECK_ERR(dpt_ext_create(&x, &s, 0), DPT_EINVAL, "0 envs");
    s.max_episode_steps = 500;
    CHECK_ERR(dpt_ext_create(&x, &s, 4), DPT_EINVAL, "max_episode_steps must be 0");
    s.max_episode_steps = 0;
    s.name = "";
    CHECK_ERR(dpt_ext_create(&x, &s, 4), DPT_EINVAL, "a name of 1..");
    s.name = "CartPole";
    s.obs_dim = 0;
    CHECK_ERR(dpt_ext_create(&x, &s, 4), DPT_EINVAL, "obs_dim is 0");
    CHECK_ERR(dpt_ext_create(&x, NULL, 4), DPT_EINVAL, "must not be NULL");
    CHECK(x == NULL);
    dpt_ext_destroy(NULL);
}

static void test_trainer_refusals(void)
{
    dpt_ext_t *x = cartpole_ext(NENVS);
    REQUIRE(x);
    dpt_trainer_env_t te = {.ext = x};
    dpt_trainer_t *t = NULL;
    dpt_config_t *c = NULL;
    const char *wrong[] = {"job=ppo", "env=CartPole-v1", SMALL};
    REQUIRE_OK(dpt_test_config(&c, wrong, COUNT(wrong), NULL, 0));
    CHECK_ERR(dpt_trainer_create(&t, c, &te), DPT_EINVAL, "(set env = external:CartPole)");
    dpt_config_destroy(c);
    const char *params[] = {"job=ppo", "env=external:CartPole", SMALL, "env_config.k=3"};
    REQUIRE_OK(dpt_test_config(&c, params, COUNT(params), NULL, 0));
    CHECK_ERR(dpt_trainer_create(&t, c, &te), DPT_EINVAL, "env_config.k: the external env");
    dpt_config_destroy(c);
    const char *count[] = {"job=ppo", "env=external:CartPole", SMALL, "num_envs_per_worker=8"};
    REQUIRE_OK(dpt_test_config(&c, count, COUNT(count), NULL, 0));
    CHECK_ERR(dpt_trainer_create(&t, c, &te), DPT_EINVAL, "num_envs_per_worker must be 4");
    dpt_config_destroy(c);
    const char *two[] = {"job=ddppo", "env=external:CartPole", SMALL, "num_workers=2",
                         "sgd_minibatch_size=32"};
    REQUIRE_OK(dpt_test_config(&c, two, COUNT(two), NULL, 0));
    CHECK_ERR(dpt_trainer_create(&t, c, &te), DPT_EINVAL, "num_workers = 2: an external env");
    dpt_config_destroy(c);
    const char *appo[] = {"job=appo", "env=external:CartPole", SMALL, "num_workers=2",
                          "train_batch_size=64"};
    REQUIRE_OK(dpt_test_config(&c, appo, COUNT(appo), NULL, 0));
    CHECK_ERR(dpt_trainer_create(&t, c, &te), DPT_EINVAL, "num_workers = 2: an external env");
    dpt_config_destroy(c);
    const char *sup[] = {"job=supervised", "dataset=spirals"};
    REQUIRE_OK(dpt_test_config(&c, sup, COUNT(sup), NULL, 0));
    CHECK_ERR(dpt_trainer_create(&t, c, &te), DPT_EINVAL, "job supervised has no env");
    dpt_config_destroy(c);
    /* Without the caller's env the name makes nothing. */
    const char *none[] = {"job=ppo", "env=external:CartPole", SMALL};
    REQUIRE_OK(dpt_test_config(&c, none, COUNT(none), NULL, 0));
    CHECK_ERR(dpt_trainer_create(&t, c, NULL), DPT_EINVAL, "nothing here can make it");
    CHECK(t == NULL);
    dpt_config_destroy(c);
    dpt_ext_destroy(x);
}

/* A ppo trainer on x (caller's storage for its config). */
static dpt_trainer_t *ppo_on(dpt_ext_t *x, dpt_config_t **c)
{
    const char *sets[] = {"job=ppo", "env=external:CartPole", SMALL, "sgd_minibatch_size=32"};
    dpt_trainer_env_t te = {.ext = x};
    dpt_trainer_t *t = NULL;
    if (dpt_test_config(c, sets, COUNT(sets), NULL, 0) != 0 || dpt_trainer_create(&t, *c, &te) != 0)
        fprintf(stderr, "ppo_on: %s\n", dpt_last_error());
    return t;
}

static void test_requests_out_of_turn(void)
{
    dpt_ext_t *x = cartpole_ext(NENVS);
    REQUIRE(x);
    dpt_config_t *c = NULL;
    dpt_trainer_t *t = ppo_on(x, &c);
    REQUIRE(t);
    envs_t e;
    envs_init(&e, 1, 0);
    dpt_train_result_t r;
    const void *a;
    CHECK_ERR(dpt_ext_poll(x, &a), DPT_ESTATE, "no iteration begun");
    CHECK_ERR(dpt_ext_iterate_end(x), DPT_ESTATE, "no iteration begun");
    REQUIRE_OK(dpt_ext_iterate_begin(x, t, &r));
    CHECK_ERR(dpt_ext_iterate_begin(x, t, &r), DPT_ESTATE, "an iteration is running");
    CHECK_ERR(dpt_ext_restart(x), DPT_ESTATE, "during an iteration");
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_RESET && a == NULL);
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_RESET); /* polling again asks again */
    CHECK_ERR(dpt_ext_step(x, e.obs, e.rew, e.term, e.trunc, e.final_obs), DPT_ESTATE,
              "the trainer asked for a reset");
    CHECK_ERR(dpt_ext_reset(x, NULL), DPT_EINVAL, "obs is NULL");
    envs_reset(&e);
    CHECK_OK(dpt_ext_reset(x, e.obs));
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_STEP && a != NULL);
    CHECK_ERR(dpt_ext_reset(x, e.obs), DPT_ESTATE, "the trainer asked for a step");
    memset(e.trunc, 0, sizeof e.trunc);
    e.trunc[2] = 1;
    CHECK_ERR(dpt_ext_step(x, e.obs, e.rew, e.term, e.trunc, NULL), DPT_EINVAL,
              "#2: truncated, and no final observation");
    CHECK_ERR(dpt_ext_step(x, e.obs, NULL, e.term, e.trunc, e.final_obs), DPT_EINVAL,
              "needs obs, rewards");
    /* A non-finite reward fails the iteration, naming the env. */
    envs_step(&e, a);
    e.rew[1] = NAN;
    CHECK_OK(dpt_ext_step(x, e.obs, e.rew, e.term, e.trunc, e.final_obs));
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_DONE);
    CHECK_ERR(dpt_ext_iterate_end(x), DPT_EINVAL, "#1: step 1 of its episode returned reward nan");
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);

    /* A non-finite observation, in a fresh trainer. */
    t = ppo_on(x, &c);
    REQUIRE(t);
    REQUIRE_OK(dpt_ext_iterate_begin(x, t, &r));
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_RESET);
    envs_reset(&e);
    e.obs[3 * 4 + 2] = INFINITY;
    CHECK_OK(dpt_ext_reset(x, e.obs));
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_DONE);
    CHECK_ERR(dpt_ext_iterate_end(x), DPT_EINVAL, "#3: reset returned observation[2] = inf");
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    dpt_ext_destroy(x);
    free(e.states);
}

static void test_close_ends_an_iteration(void)
{
    dpt_ext_t *x = cartpole_ext(NENVS);
    REQUIRE(x);
    dpt_config_t *c = NULL;
    dpt_trainer_t *t = ppo_on(x, &c);
    REQUIRE(t);
    envs_t e;
    envs_init(&e, 1, 0);
    dpt_train_result_t r;
    const void *a;
    REQUIRE_OK(dpt_ext_iterate_begin(x, t, &r));
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_RESET);
    envs_reset(&e);
    CHECK_OK(dpt_ext_reset(x, e.obs));
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_STEP);
    dpt_ext_close(x); /* the caller stops half-way */
    CHECK_ERR(dpt_ext_step(x, e.obs, e.rew, e.term, e.trunc, e.final_obs), DPT_ESTATE,
              "dpt_ext_step after dpt_ext_close");
    CHECK(dpt_ext_poll(x, &a) == DPT_EXT_DONE);
    CHECK_ERR(dpt_ext_iterate_end(x), DPT_ECLOSED, "the caller closed the external env");
    CHECK_ERR(dpt_ext_iterate_begin(x, t, &r), DPT_ESTATE, "closed");
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    dpt_ext_destroy(x);
    free(e.states);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_extenv") != 0)
        return 1;
    static const dpt_test_case_t tests[] = {
        DPT_TEST(test_ppo_is_bitwise_the_builtin_run),
        DPT_TEST(test_ppo_two_devices_repeats_bitwise),
        DPT_TEST(test_ddppo_is_bitwise_the_builtin_run),
        DPT_TEST(test_appo_learns_from_the_caller),
        DPT_TEST(test_spaces_are_checked),
        DPT_TEST(test_trainer_refusals),
        DPT_TEST(test_requests_out_of_turn),
        DPT_TEST(test_close_ends_an_iteration),
    };
    int rc = DPT_TEST_RUN(tests);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
