/*
 * The supervised job across MPI ranks with two devices per rank (run by
 * CTest under mpirun -np 2 and -np 3, and over TCP): P ranks x 2 towers
 * train one model, through the trainer interface (dpt/train.h, job =
 * supervised, env.comm = a communicator over MPI_COMM_WORLD), on the
 * built-in spirals:
 *  - two runs end with bitwise-identical weights and metrics, and every
 *    rank holds the same weights (checksums gathered here), in ps and in
 *    replicated mode (which give the same bits: the same sums, the same
 *    update);
 *  - the training is that of one process with one device and the same
 *    batch size: the same batches, steps, samples and learning rates
 *    exactly; the weights and losses within float rounding;
 *  - a checkpoint written by rank 0 and restored on every rank continues
 *    bitwise as the uninterrupted run (replicated: every replica's
 *    optimizer state is restored);
 *  - async towers, a batch size the devices divide but the ranks x devices
 *    do not, and a training set smaller than ranks x devices are refused
 *    (DPT_EINVAL);
 *  - ranks whose weights differ fail the check after the epoch (DPT_ECOMM).
 */
#include "dpt_config.h"
#include "dpt_test.h"
#include "dpt_test_train.h"

#include "dpt/arena.h"
#include "dpt/checkpoint.h"
#include "dpt/comm.h"
#include "dpt/train.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#if DPT_HAVE_MPI
static dpt_comm_t *comm; /* the test's communicator over MPI_COMM_WORLD */
static char path[512];   /* the checkpoint, the same on every rank */

/* A finalized supervised config of the spirals, two devices per rank, with
 * the given extra "key=value" settings (NULL-terminated); NULL with the
 * message printed when a key is refused. batch_size 48 divides among 2 x 2
 * and 3 x 2 towers. */
static dpt_config_t *cfg_make(const char *first, ...)
{
    static const char *const base[] = {"job=supervised", "dataset=spirals",    "spirals_points=512",
                                       "hidden=32,32",   "activation=tanh",    "lr=0.01",
                                       "lr_end=0.001",   "lr_schedule=linear", "batch_size=48",
                                       "num_devices=2",  "grad_clip=1",        "epochs=4"};
    va_list ap;
    va_start(ap, first);
    dpt_config_t *c = dpt_test_config_va(base, sizeof base / sizeof base[0], first, ap);
    va_end(ap);
    return c;
}

/* 1 when every rank's buffer has the same fingerprint as this rank's. */
static int same_on_all_ranks(const void *buf, size_t bytes)
{
    return dpt_test_same_on_all_ranks(comm, dpt_fnv1a64(DPT_FNV1A64_INIT, buf, bytes));
}

static double metric(const dpt_train_result_t *r, const char *name)
{
    return dpt_train_result_get(r, name);
}

/* Four epochs of config c across the ranks: the weights (caller frees) and
 * the last result; NULL when a call failed (the failure is counted). */
static float *train_ranks(const dpt_config_t *c, dpt_train_result_t *r, size_t *n)
{
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = comm};
    dpt_trainer_t *t = NULL;
    int rc = dpt_trainer_create(&t, c, &env);
    for (int i = 0; !rc && i < 4; i++)
        rc = dpt_trainer_iterate(t, r);
    CHECK_OK(rc);
    float *w = rc ? NULL : dpt_test_weights(t, n);
    dpt_trainer_destroy(t);
    return w;
}

static void test_repeat_bitwise_and_like_one_process(void)
{
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    float *ps = NULL;
    size_t n = 0;
    for (int m = 0; m < 2; m++) {
        const char *mode = m ? "towers_mode=replicated" : "towers_mode=ps";
        dpt_config_t *c = cfg_make(mode, NULL), *c1 = cfg_make(mode, "num_devices=1", NULL);
        REQUIRE(c && c1);
        dpt_train_result_t ra, rb, r1;
        size_t na = 0, nb = 0, n1 = 0;
        float *wa = train_ranks(c, &ra, &na), *wb = train_ranks(c, &rb, &nb);
        REQUIRE(wa && wb && na == nb);
        /* Two runs: the same bits, and the same bits on every rank. */
        CHECK(memcmp(wa, wb, na * sizeof(float)) == 0);
        CHECK(dpt_test_same_metrics(&ra, &rb));
        CHECK(same_on_all_ranks(wa, na * sizeof(float)));
        double mv[4] = {metric(&ra, "train_loss"), metric(&ra, "train_accuracy"),
                        metric(&ra, "test_loss"), metric(&ra, "test_accuracy")};
        CHECK(same_on_all_ranks(mv, sizeof mv));
        /* The reference: this process alone, one device, the same batches. */
        dpt_trainer_t *one = NULL;
        REQUIRE_OK(dpt_trainer_create(&one, c1, NULL));
        for (int i = 0; i < 4; i++)
            REQUIRE_OK(dpt_trainer_iterate(one, &r1));
        float *w1 = dpt_test_weights(one, &n1);
        REQUIRE(w1 && n1 == na);
        CHECK(ra.finished && ra.timesteps_total == r1.timesteps_total);
        CHECK(metric(&ra, "steps_total") == metric(&r1, "steps_total"));
        CHECK(metric(&ra, "rows_dropped") == metric(&r1, "rows_dropped"));
        CHECK(metric(&ra, "lr") == metric(&r1, "lr"));
        double d = dpt_test_max_rel_diff(wa, w1, na, 1e-2);
        double dl = fabs(mv[0] - metric(&r1, "train_loss"));
        double dt = fabs(mv[2] - metric(&r1, "test_loss"));
        if (rank == 0)
            printf("%d ranks x 2 devices, %s: two runs bitwise equal; weights within %.3g "
                   "(relative) of one process with one device, train loss %.6f vs %.6f, test "
                   "accuracy %.4f vs %.4f\n",
                   size, mode, d, mv[0], metric(&r1, "train_loss"), mv[3],
                   metric(&r1, "test_accuracy"));
        CHECK(d < 1e-4);
        CHECK(dl < 1e-5 && dt < 1e-5);
        /* ps and replicated: the same sums and the same update. */
        if (!ps) {
            ps = wa;
            n = na;
            wa = NULL;
        } else {
            CHECK(n == na && memcmp(ps, wa, n * sizeof(float)) == 0);
        }
        free(wa), free(wb), free(w1);
        dpt_trainer_destroy(one);
        dpt_config_destroy(c);
        dpt_config_destroy(c1);
    }
    free(ps);
}

/* Two epochs, a checkpoint written by rank 0 alone, two more; a fresh
 * trainer on every rank restored from the file runs the same two: the
 * weights and the last metrics equal the uninterrupted run's, bitwise. */
static void test_checkpoint_rank0_resume_bitwise(void)
{
    int rank = dpt_comm_rank(comm);
    dpt_config_t *c = cfg_make("optimizer=momentum", "towers_mode=replicated", NULL);
    REQUIRE(c);
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = comm};
    dpt_trainer_t *a = NULL, *b = NULL;
    dpt_train_result_t ra, rb;
    REQUIRE_OK(dpt_trainer_create(&a, c, &env));
    for (int i = 0; i < 2; i++)
        REQUIRE_OK(dpt_trainer_iterate(a, &ra));
    CHECK_OK(dpt_test_checkpoint(a, path, rank == 0));
    REQUIRE_OK(dpt_comm_barrier(comm));
    for (int i = 0; i < 2; i++)
        REQUIRE_OK(dpt_trainer_iterate(a, &ra));
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    REQUIRE_OK(dpt_trainer_create(&b, c, &env));
    REQUIRE_OK(dpt_trainer_restore(b, st));
    dpt_safetensors_destroy(st);
    for (int i = 0; i < 2; i++)
        REQUIRE_OK(dpt_trainer_iterate(b, &rb));
    size_t n, nb;
    float *wa = dpt_test_weights(a, &n), *wb = dpt_test_weights(b, &nb);
    REQUIRE(wa && wb && n == nb);
    CHECK(memcmp(wa, wb, n * sizeof(float)) == 0);
    CHECK(rb.iteration == 4 && rb.finished && rb.timesteps_total == ra.timesteps_total);
    CHECK(dpt_test_same_metrics(&ra, &rb));
    CHECK(same_on_all_ranks(wb, n * sizeof(float)));
    if (rank == 0)
        printf("checkpoint by rank 0, restored on %d ranks x 2 devices: resumed bitwise (test "
               "accuracy %.4f)\n",
               dpt_comm_size(comm), metric(&rb, "test_accuracy"));
    free(wa), free(wb);
    dpt_trainer_destroy(b);
    dpt_trainer_destroy(a);
    dpt_config_destroy(c);
    CHECK_OK(dpt_comm_barrier(comm));
    if (rank == 0)
        remove(path);
}

static void test_refused(void)
{
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = comm};
    dpt_trainer_t *t = NULL;
    dpt_config_t *c = cfg_make("towers_mode=async", NULL);
    REQUIRE(c);
    CHECK_ERR(dpt_trainer_create(&t, c, &env), DPT_EINVAL,
              "mode async does not run over an external communicator");
    dpt_config_destroy(c);
    /* 20 rows a batch: divisible by 4 devices, not by 2 or 3 ranks x 4. */
    c = cfg_make("num_devices=4", "batch_size=20", NULL);
    REQUIRE(c);
    CHECK_ERR(dpt_trainer_create(&t, c, &env), DPT_EINVAL, "batch_size 20 must be divisible by");
    CHECK(strstr(dpt_last_error(), "ranks x num_devices 4") != NULL);
    dpt_config_destroy(c);
    /* 16 training rows for 2 x 16 or 3 x 16 devices. */
    c = cfg_make("spirals_points=16", "num_devices=16", "batch_size=96", NULL);
    REQUIRE(c);
    CHECK_ERR(dpt_trainer_create(&t, c, &env), DPT_EINVAL, "training set has 16 rows");
    CHECK(strstr(dpt_last_error(), "ranks x num_devices 16") != NULL);
    CHECK(t == NULL);
    dpt_config_destroy(c);
}

/* Rank 1 alone goes back to an earlier checkpoint: the ranks still make
 * the same calls, and the check after the next epoch fails on every rank
 * naming the difference. Last: the trainers are left diverged. */
static void test_diverged_ranks_detected(void)
{
    int rank = dpt_comm_rank(comm);
    dpt_config_t *c = cfg_make(NULL);
    REQUIRE(c);
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = comm};
    dpt_trainer_t *t = NULL;
    dpt_train_result_t r;
    REQUIRE_OK(dpt_trainer_create(&t, c, &env));
    REQUIRE_OK(dpt_trainer_iterate(t, &r));
    CHECK_OK(dpt_test_checkpoint(t, path, rank == 0));
    REQUIRE_OK(dpt_comm_barrier(comm));
    REQUIRE_OK(dpt_trainer_iterate(t, &r));
    if (rank == 1) {
        dpt_safetensors_t *st;
        REQUIRE_OK(dpt_safetensors_load(&st, path));
        REQUIRE_OK(dpt_trainer_restore(t, st));
        dpt_safetensors_destroy(st);
    }
    CHECK_ERR(dpt_trainer_iterate(t, &r), DPT_ECOMM, "participants' parameters differ");
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    CHECK_OK(dpt_comm_barrier(comm));
    if (rank == 0)
        remove(path);
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc, (void)argv;
    DPT_TEST_SKIP("built without MPI");
#else
    /* As dpt_train_run: device 0 of each rank's towers, the only one that
     * calls MPI, runs on this thread. */
    if (dpt_test_mpi_begin(&argc, &argv, DPT_COMM_MPI_FUNNELED, "dpt_mpi_supervised_devices", &comm,
                           path, sizeof path) != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_repeat_bitwise_and_like_one_process),
        DPT_TEST(test_checkpoint_rank0_resume_bitwise),
        DPT_TEST(test_refused),
        DPT_TEST(test_diverged_ranks_detected),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_mpi_end(comm);
    return rc;
#endif
}
