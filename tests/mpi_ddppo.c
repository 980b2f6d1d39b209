/*
 * DD-PPO across MPI ranks (run by CTest under mpirun -np 2 and -np 3)
 * through the trainer interface (dpt/train.h, job = ddppo, use_mpi = 1):
 * one worker per rank (the mpi backend) and two worker threads per rank
 * (hier). Every rank must end with bitwise-identical weights (checked by
 * the trainer's own check and by checksums gathered here over the test's
 * own communicator); a checkpoint written collectively (rank 0 writes)
 * restores on every rank into a fresh trainer that then continues exactly
 * as the uninterrupted one. With an external env (dpt/extenv.h), each rank
 * serving CartPole-v1's code in its own loop, the run is bitwise the run on
 * the built-in env.
 */
#include "dpt_config.h"
#include "dpt_test.h"
#include "dpt_test_train.h"
#include "dpt_test_extenv.h"

#include "dpt/arena.h"
#include "dpt/checkpoint.h"
#include "dpt/comm.h"
#include "dpt/train.h"

#include <stdlib.h>
#include <unistd.h>

#if DPT_HAVE_MPI
static dpt_comm_t *comm; /* the test's own communicator over MPI_COMM_WORLD */
static char path[512];   /* the checkpoint, the same on every rank */

static int make_cfg(dpt_config_t **out, int workers)
{
    static const char *const sets[] = {"job=ddppo",
                                       "env=CartPole-v1",
                                       "num_envs_per_worker=2",
                                       "rollout_fragment_length=64",
                                       "sgd_minibatch_size=32",
                                       "num_sgd_iter=2",
                                       "sync_frac=1",
                                       "check_weights_every=3",
                                       "total_timesteps=100000"};
    char line[64];
    snprintf(line, sizeof line, "num_workers=%d", workers);
    const char *const extra[] = {line};
    return dpt_test_config(out, sets, sizeof sets / sizeof sets[0], extra, 1);
}

/* 1 when every rank's weights have the same checksum as this rank's. */
static int same_on_all_ranks(const float *w, size_t n, uint64_t *h)
{
    *h = dpt_vec_checksum(w, n);
    return dpt_test_same_on_all_ranks(comm, *h);
}

static void ddppo_over_mpi(int workers)
{
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    dpt_config_t *c;
    REQUIRE_OK(make_cfg(&c, workers));
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = comm};
    dpt_trainer_t *t = NULL, *t2 = NULL;
    dpt_train_result_t r, r2;
    REQUIRE_OK(dpt_trainer_create(&t, c, &env));
    for (int i = 0; i < 4; i++)
        REQUIRE_OK(dpt_trainer_iterate(t, &r));
    uint64_t per_iter = 2 * 64 * (uint64_t)workers * (uint64_t)size;
    CHECK(r.iteration == 4 && r.timesteps_total == 4 * per_iter);
    size_t n;
    uint64_t h;
    float *w = dpt_test_weights(t, &n);
    REQUIRE(w);
    CHECK(same_on_all_ranks(w, n, &h));
    free(w);

    /* Collective checkpoint: rank 0 writes the file, the others take part. */
    CHECK_OK(dpt_test_checkpoint(t, path, rank == 0));
    REQUIRE_OK(dpt_comm_barrier(comm));
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    const char *m = dpt_safetensors_meta(st, "workers");
    char want[16];
    snprintf(want, sizeof want, "%d", workers * size);
    CHECK(m && strcmp(m, want) == 0);
    REQUIRE_OK(dpt_trainer_create(&t2, c, &env));
    REQUIRE_OK(dpt_trainer_restore(t2, st));
    dpt_safetensors_destroy(st);
    /* Both continue: the restored trainer follows the original bitwise. */
    for (int i = 0; i < 2; i++) {
        REQUIRE_OK(dpt_trainer_iterate(t, &r));
        REQUIRE_OK(dpt_trainer_iterate(t2, &r2));
    }
    size_t n2;
    float *wa = dpt_test_weights(t, &n), *wb = dpt_test_weights(t2, &n2);
    REQUIRE(wa && wb && n == n2);
    CHECK(memcmp(wa, wb, n * sizeof(float)) == 0);
    CHECK(r2.iteration == 6 && r2.timesteps_total == r.timesteps_total);
    CHECK(memcmp(&r.reward_mean, &r2.reward_mean, sizeof r.reward_mean) == 0);
    CHECK(same_on_all_ranks(wb, n, &h));
    if (rank == 0)
        printf("%d ranks x %d worker%s: identical weights (checksum %016llx), return %.1f; "
               "resumed bitwise\n",
               size, workers, workers > 1 ? "s" : "", (unsigned long long)h, r2.reward_mean);
    free(wa);
    free(wb);
    dpt_trainer_destroy(t2);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    CHECK_OK(dpt_comm_barrier(comm));
    if (rank == 0)
        remove(path);
}

static void test_ddppo_mpi_one_worker_per_rank(void)
{
    ddppo_over_mpi(1);
}

static void test_ddppo_hier_two_workers_per_rank(void)
{
    ddppo_over_mpi(2);
}

/* One worker per process, each serving its envs in the caller's loop: the
 * same weights on every rank, and the same as the built-in env's run. */
static void test_ddppo_mpi_external_env(void)
{
    int rank = dpt_comm_rank(comm);
    const char *base[] = {"job=ddppo",
                          "num_workers=1",
                          "num_envs_per_worker=4",
                          "rollout_fragment_length=32",
                          "sgd_minibatch_size=32",
                          "num_sgd_iter=2",
                          "seed=3"};
    const char *bsets[] = {"env=CartPole-v1"}, *esets[] = {"env=external:CartPole"};
    dpt_config_t *cb = NULL, *ce = NULL;
    REQUIRE_OK(dpt_test_config(&cb, base, COUNT(base), bsets, 1));
    REQUIRE_OK(dpt_test_config(&ce, base, COUNT(base), esets, 1));
    dpt_ext_t *x = cartpole_ext(NENVS);
    REQUIRE(x);
    dpt_trainer_env_t eb = {.use_mpi = 1, .comm = comm},
                      ee = {.use_mpi = 1, .comm = comm, .ext = x};
    dpt_trainer_t *tb = NULL, *tx = NULL;
    REQUIRE_OK(dpt_trainer_create(&tb, cb, &eb));
    REQUIRE_OK(dpt_trainer_create(&tx, ce, &ee));
    envs_t e;
    envs_init(&e, 3, (uint32_t)rank);
    dpt_train_result_t rb, rx;
    for (int i = 0; i < 4; i++) {
        REQUIRE_OK(dpt_trainer_iterate(tb, &rb));
        REQUIRE_OK(serve(x, tx, &e, &rx));
        CHECK(rb.timesteps_total == rx.timesteps_total);
        CHECK(dpt_test_same_metrics(&rb, &rx));
    }
    size_t n;
    uint64_t h;
    float *wb = dpt_test_weights(tb, &n), *wx = dpt_test_weights(tx, NULL);
    REQUIRE(wb && wx);
    CHECK(memcmp(wb, wx, n * sizeof *wb) == 0);
    CHECK(same_on_all_ranks(wx, n, &h));
    if (rank == 0)
        printf("external env, %d ranks: the built-in run's weights (checksum %016llx)\n",
               dpt_comm_size(comm), (unsigned long long)h);
    free(wb);
    free(wx);
    dpt_trainer_destroy(tb);
    dpt_trainer_destroy(tx);
    dpt_ext_destroy(x);
    dpt_config_destroy(cb);
    dpt_config_destroy(ce);
    free(e.states);
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc, (void)argv;
    DPT_TEST_SKIP("built without MPI");
#else
    if (dpt_test_mpi_begin(&argc, &argv, DPT_COMM_MPI_SERIALIZED, "dpt_mpi_ddppo", &comm, path,
                           sizeof path) != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_ddppo_mpi_one_worker_per_rank),
        DPT_TEST(test_ddppo_hier_two_workers_per_rank),
        DPT_TEST(test_ddppo_mpi_external_env),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_mpi_end(comm);
    return rc;
#endif
}
