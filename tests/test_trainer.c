/*
 * trainers: a short PPO run on CartPole clearly improves the return; DD-PPO
 * with 2 worker threads keeps bitwise-identical weights, repeats bitwise, and
 * learns; the per-worker batch-size rule; straggler preemption with a slow
 * worker; configuration errors.
 */
#include "dpt_test.h"

#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt/trainer.h"

#include <pthread.h>
#include <time.h>

static void test_ppo_improves_cartpole(void)
{
    const dpt_env_class_t *cls = dpt_env_find("CartPole-v1");
    REQUIRE(cls);
    dpt_rl_config_t c = dpt_rl_defaults();
    c.total_timesteps = 40960;
    dpt_ppo_t *p;
    REQUIRE_OK(dpt_ppo_create(&p, cls, &c));
    dpt_rl_result_t r, first;
    REQUIRE_OK(dpt_ppo_train(p, &first));
    do
        REQUIRE_OK(dpt_ppo_train(p, &r));
    while (r.timesteps_total < c.total_timesteps);
    printf("ppo: return %.1f after 1 iteration, %.1f after %llu steps\n",
           first.episode_reward_mean, r.episode_reward_mean,
           (unsigned long long)r.timesteps_total);
    /* A random policy averages ~22; CleanRL's settings pass 100 well before
     * 40k steps. */
    CHECK(first.episode_reward_mean < 40.0);
    CHECK(r.episode_reward_mean > 100.0);
    CHECK(r.iteration == 80 && r.timesteps_this_iter == 512);
    CHECK(r.cur_lr < (double)c.lr && r.cur_lr > 0.0);
    CHECK(r.entropy > 0.0 && r.entropy < 0.7);
    dpt_ppo_destroy(p);

    dpt_rl_config_t bad = dpt_rl_defaults();
    bad.sgd_minibatch_size = 1024;
    CHECK_ERR(dpt_ppo_create(&p, cls, &bad), DPT_EINVAL, "sgd_minibatch_size 1024");
    bad = dpt_rl_defaults();
    bad.num_devices = 3;
    CHECK_ERR(dpt_ppo_create(&p, cls, &bad), DPT_EINVAL, "divisible by num_devices 3");
}

/* ---- DD-PPO on threads --------------------------------------------------- */

enum { MAXW = 4 };

typedef struct dd_run {
    int workers, iterations;
    dpt_rl_config_t cfg;
    const dpt_env_class_t *cls;
    dpt_comm_threads_group_t *group;
    dpt_ddppo_shared_t *shared;
    float *weights[MAXW];
    size_t nweights;
    int rc[MAXW];
    dpt_rl_result_t last[MAXW];
    uint64_t preempted;
} dd_run_t;

typedef struct {
    dd_run_t *run;
    int rank;
} dd_arg_t;

/* Marks the slow worker's thread; the slow env reads it. */
static _Thread_local int slow_thread;

static void *dd_worker(void *p)
{
    dd_arg_t *a = p;
    dd_run_t *run = a->run;
    dpt_comm_t *comm = NULL;
    dpt_ddppo_t *w = NULL;
    int rc = dpt_comm_threads_join(run->group, a->rank, &comm);
    slow_thread = a->rank == run->workers - 1;
    if (!rc)
        rc = dpt_ddppo_worker_create(&w, run->cls, &run->cfg, comm, run->shared);
    for (int i = 0; !rc && i < run->iterations; i++) {
        rc = dpt_ddppo_worker_train(w, &run->last[a->rank]);
        if (!rc && a->rank == 0)
            run->preempted += run->last[0].preempted_workers;
    }
    if (!rc)
        rc = dpt_ddppo_check_weights(w);
    if (!rc) {
        size_t n = dpt_policy_vars(dpt_ddppo_policy(w))->total;
        if (a->rank == 0)
            run->nweights = n; /* one writer; read after the join */
        run->weights[a->rank] = malloc(n * sizeof(float));
        if (run->weights[a->rank])
            memcpy(run->weights[a->rank], dpt_ddppo_weights(w), n * sizeof(float));
    }
    if (rc)
        fprintf(stderr, "worker %d: %s\n", a->rank, dpt_last_error());
    run->rc[a->rank] = rc;
    dpt_ddppo_worker_destroy(w);
    dpt_comm_destroy(comm);
    return NULL;
}

static int dd_go(dd_run_t *run)
{
    if (dpt_comm_threads_group_create(&run->group, run->workers, NULL) ||
        dpt_ddppo_shared_create(&run->shared, run->workers))
        return -1;
    pthread_t th[MAXW];
    dd_arg_t args[MAXW];
    for (int i = 0; i < run->workers; i++) {
        args[i] = (dd_arg_t){run, i};
        pthread_create(&th[i], NULL, dd_worker, &args[i]);
    }
    for (int i = 0; i < run->workers; i++)
        pthread_join(th[i], NULL);
    dpt_ddppo_shared_destroy(run->shared);
    dpt_comm_threads_group_destroy(run->group);
    for (int i = 0; i < run->workers; i++)
        if (run->rc[i])
            return run->rc[i];
    return 0;
}

static void dd_free(dd_run_t *run)
{
    for (int i = 0; i < MAXW; i++)
        free(run->weights[i]);
}

static void test_ddppo_threads_identical_and_repeatable(void)
{
    dd_run_t a, b;
    memset(&a, 0, sizeof a);
    a.workers = 2;
    a.iterations = 60;
    a.cls = dpt_env_find("CartPole-v1");
    a.cfg = dpt_rl_defaults();
    a.cfg.num_envs = 2;
    a.cfg.total_timesteps = 60 * 2 * 256;
    a.cfg.check_weights_every = 7;
    b = a;
    REQUIRE_OK(dd_go(&a));
    REQUIRE_OK(dd_go(&b));
    REQUIRE(a.weights[0] && a.weights[1] && b.weights[0]);
    CHECK(memcmp(a.weights[0], a.weights[1], a.nweights * sizeof(float)) == 0);
    CHECK(memcmp(a.weights[0], b.weights[0], a.nweights * sizeof(float)) == 0);
    /* Every worker got the same aggregated result. */
    CHECK(a.last[0].timesteps_total == a.last[1].timesteps_total);
    CHECK(a.last[0].episode_reward_mean == a.last[1].episode_reward_mean);
    CHECK(a.last[0].timesteps_total == 60 * 512);
    printf("ddppo 2 threads: return %.1f after %llu steps\n", a.last[0].episode_reward_mean,
           (unsigned long long)a.last[0].timesteps_total);
    /* Random play averages ~22; 60 iterations of 8 global minibatches
     * clearly improve it. */
    CHECK(a.last[0].episode_reward_mean > 40.0);
    dd_free(&a);
    dd_free(&b);
}

/* A CartPole whose steps take 0.3 ms on the slow worker's thread. */
static dpt_env_class_t slow_cartpole;

static void slow_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                      int *terminated)
{
    if (slow_thread) {
        struct timespec ts = {0, 300000};
        nanosleep(&ts, NULL);
    }
    dpt_env_find("CartPole-v1")->step(state, action, rng, obs, reward, terminated);
}

static void test_ddppo_preempts_straggler(void)
{
    slow_cartpole = *dpt_env_find("CartPole-v1");
    slow_cartpole.name = "SlowCartPole";
    slow_cartpole.step = slow_step;
    dd_run_t a;
    memset(&a, 0, sizeof a);
    a.workers = 3;
    a.iterations = 3;
    a.cls = &slow_cartpole;
    a.cfg = dpt_rl_defaults();
    a.cfg.num_envs = 1;
    a.cfg.rollout_fragment_length = 128;
    a.cfg.sgd_minibatch_size = 32;
    a.cfg.sync_frac = 0.6; /* 2 of 3 finished (0.67 > 0.6): the third stops */
    REQUIRE_OK(dd_go(&a));
    printf("preempted workers over 3 iterations: %llu; fewest rows %llu\n",
           (unsigned long long)a.preempted, (unsigned long long)a.last[0].rows_min);
    CHECK(a.preempted >= 2);
    CHECK(a.last[0].rows_min >= 32 && a.last[0].rows_min < 128); /* >= 25% of 128 */
    CHECK(memcmp(a.weights[0], a.weights[2], a.nweights * sizeof(float)) == 0);
    dd_free(&a);
}

static void test_ddppo_batch_rule(void)
{
    CHECK_OK(dpt_ddppo_check_batch(0, 512, 512, 0));
    CHECK_ERR(dpt_ddppo_check_batch(3, 500, 512, 0), DPT_ESTATE,
              "ddppo worker 3: batch has 500 rows, expected rollout_fragment_length x "
              "num_envs_per_worker = 512");
    CHECK_OK(dpt_ddppo_check_batch(1, 128, 512, 1));
    CHECK_ERR(dpt_ddppo_check_batch(1, 100, 512, 1), DPT_ESTATE, "between 25% of 512");
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_ppo_improves_cartpole),
        DPT_TEST(test_ddppo_threads_identical_and_repeatable),
        DPT_TEST(test_ddppo_preempts_straggler),
        DPT_TEST(test_ddppo_batch_rule),
    };
    return DPT_TEST_RUN(cases);
}
