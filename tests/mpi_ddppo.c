/*
 * DD-PPO across MPI ranks (run by CTest under mpirun -np 2 and -np 3): one
 * worker per rank on the mpi backend trains CartPole; every rank must end
 * with bitwise-identical weights (checked by the trainer's own check and by
 * comparing checksums gathered here), and the aggregated results must agree.
 */
#include "dpt_config.h"
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/comm.h"
#include "dpt/trainer.h"

#if DPT_HAVE_MPI
static dpt_comm_t *comm;

static void test_ddppo_mpi_identical_weights(void)
{
    dpt_rl_config_t c = dpt_rl_defaults();
    c.num_envs = 2;
    c.total_timesteps = 20 * 256 * (uint64_t)dpt_comm_size(comm);
    c.check_weights_every = 5;
    dpt_ddppo_t *w;
    REQUIRE_OK(dpt_ddppo_worker_create(&w, dpt_env_find("CartPole-v1"), &c, comm, NULL));
    dpt_rl_result_t r;
    for (int i = 0; i < 20; i++)
        REQUIRE_OK(dpt_ddppo_worker_train(w, &r));
    CHECK_OK(dpt_ddppo_check_weights(w));
    size_t n = dpt_policy_vars(dpt_ddppo_policy(w))->total;
    uint64_t h = dpt_vec_checksum(dpt_ddppo_weights(w), n);
    float mine[4] = {(float)(h & 0xffff), (float)((h >> 16) & 0xffff), (float)((h >> 32) & 0xffff),
                     (float)(r.episode_reward_mean)};
    float all[4 * 8];
    int size = dpt_comm_size(comm);
    REQUIRE(size <= 8);
    REQUIRE_OK(dpt_comm_allgather(comm, mine, 4, all));
    for (int k = 1; k < size; k++)
        CHECK(memcmp(all, all + 4 * k, sizeof mine) == 0);
    CHECK(r.timesteps_total == 20 * 256 * (uint64_t)size);
    if (dpt_comm_rank(comm) == 0)
        printf("%d ranks: identical weights (checksum %016llx), return %.1f\n", size,
               (unsigned long long)h, r.episode_reward_mean);
    dpt_ddppo_worker_destroy(w);
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc, (void)argv;
    DPT_TEST_SKIP("built without MPI");
#else
    if (dpt_comm_mpi_init(&argc, &argv, DPT_COMM_MPI_FUNNELED) != 0) {
        fprintf(stderr, "MPI init: %s\n", dpt_last_error());
        return 1;
    }
    dpt_comm_mpi_options_t o;
    dpt_comm_mpi_options_init(&o);
    if (dpt_comm_mpi_create(&comm, &o) != 0) {
        fprintf(stderr, "MPI comm: %s\n", dpt_last_error());
        return 1;
    }
    static const dpt_test_case_t cases[] = {DPT_TEST(test_ddppo_mpi_identical_weights)};
    int rc = DPT_TEST_RUN(cases);
    dpt_comm_destroy(comm);
    dpt_comm_mpi_finalize();
    return rc;
#endif
}
