/*
 * The supervised job across MPI ranks (run by CTest under mpirun -np 2 and
 * -np 3) through the trainer interface (dpt/train.h, job = supervised,
 * env.comm = a communicator over MPI_COMM_WORLD), on the built-in spirals:
 *  - every rank ends with bitwise-identical weights (checksums gathered
 *    here) and the same metrics;
 *  - the training is that of one process with one device and the same
 *    batch size: the same batches, steps, samples and learning rates
 *    exactly; the weights and losses within float rounding (the ranks
 *    average per-rank mean gradients where one process takes one mean);
 *  - a checkpoint written by rank 0 (the others pass no writer) and
 *    restored on every rank continues bitwise as the uninterrupted run;
 *  - a batch size the ranks do not divide and a world without a
 *    communicator are refused (DPT_EINVAL).
 * (Several devices per rank: mpi_supervised_devices.c.)
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

/* A finalized supervised config of the spirals with the given extra
 * "key=value" settings (NULL-terminated); NULL with the message printed
 * when a key is refused. batch_size 48 divides among 2 and 3 ranks. */
static dpt_config_t *cfg_make(const char *first, ...)
{
    static const char *const base[] = {"job=supervised",
                                       "dataset=spirals",
                                       "spirals_points=512",
                                       "hidden=32,32",
                                       "activation=tanh",
                                       "lr=0.01",
                                       "lr_end=0.001",
                                       "lr_schedule=linear",
                                       "batch_size=48",
                                       "num_devices=1",
                                       "epochs=4"};
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

static double max_rel_diff(const float *a, const float *b, size_t n)
{
    return dpt_test_max_rel_diff(a, b, n, 1e-2);
}

static double metric(const dpt_train_result_t *r, const char *name)
{
    return dpt_train_result_get(r, name);
}

static void test_ranks_identical_and_like_one_process(void)
{
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    dpt_config_t *c = cfg_make(NULL);
    REQUIRE(c);
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = comm};
    dpt_trainer_t *t = NULL, *one = NULL, *fresh = NULL;
    dpt_train_result_t r, r1;
    REQUIRE_OK(dpt_trainer_create(&t, c, &env));
    /* The reference: this process alone, one device, the same batches. */
    REQUIRE_OK(dpt_trainer_create(&one, c, NULL));
    REQUIRE_OK(dpt_trainer_create(&fresh, c, NULL));
    for (int i = 0; i < 4; i++) {
        REQUIRE_OK(dpt_trainer_iterate(t, &r));
        REQUIRE_OK(dpt_trainer_iterate(one, &r1));
        /* The same batches: counters, drops and the schedule are exact. */
        CHECK(r.iteration == r1.iteration && r.timesteps_total == r1.timesteps_total);
        CHECK(metric(&r, "samples_total") == metric(&r1, "samples_total"));
        CHECK(metric(&r, "steps_total") == metric(&r1, "steps_total"));
        CHECK(metric(&r, "rows_dropped") == metric(&r1, "rows_dropped"));
        CHECK(metric(&r, "lr") == metric(&r1, "lr"));
    }
    CHECK(r.finished && r.timesteps_total == 4 * 480);
    CHECK(metric(&r, "rows_dropped") == 32.0 && metric(&r, "steps_total") == 40.0);
    size_t n, n1, n0;
    float *w = dpt_test_weights(t, &n), *w1 = dpt_test_weights(one, &n1),
          *w0 = dpt_test_weights(fresh, &n0);
    REQUIRE(w && w1 && w0 && n == n1 && n == n0);
    /* Bitwise the same weights and metrics on every rank. */
    CHECK(same_on_all_ranks(w, n * sizeof(float)));
    double mv[4] = {metric(&r, "train_loss"), metric(&r, "train_accuracy"), metric(&r, "test_loss"),
                    metric(&r, "test_accuracy")};
    CHECK(same_on_all_ranks(mv, sizeof mv));
    /* Within float rounding of one process; far from the initial weights. */
    double d = max_rel_diff(w, w1, n), moved = max_rel_diff(w0, w1, n);
    double dl = fabs(mv[0] - metric(&r1, "train_loss"));
    double dt = fabs(mv[2] - metric(&r1, "test_loss"));
    if (rank == 0)
        printf("%d ranks: weights within %.3g (relative) of one process, train loss %.6f vs "
               "%.6f, test loss %.6f vs %.6f, test accuracy %.4f vs %.4f; training moved "
               "them by %.3g\n",
               size, d, mv[0], metric(&r1, "train_loss"), mv[2], metric(&r1, "test_loss"), mv[3],
               metric(&r1, "test_accuracy"), moved);
    CHECK(d < 1e-4);
    CHECK(moved > 1e-1);
    CHECK(dl < 1e-5 && dt < 1e-5);
    CHECK(fabs(mv[3] - metric(&r1, "test_accuracy")) <= 2.0 / 128.0);
    /* evaluate() on every rank scores the same weights the same way. */
    dpt_eval_result_t e;
    CHECK_OK(dpt_trainer_evaluate(t, 0, 0, &e));
    CHECK(e.count == 128 && e.loss == mv[2]);
    free(w), free(w1), free(w0);
    dpt_trainer_destroy(fresh);
    dpt_trainer_destroy(one);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
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
    CHECK(dpt_test_same_metrics(&ra, &rb)); /* every metric but the timings */
    CHECK(same_on_all_ranks(wb, n * sizeof(float)));
    if (rank == 0)
        printf("checkpoint by rank 0, restored on %d ranks: resumed bitwise (test accuracy "
               "%.4f)\n",
               dpt_comm_size(comm), metric(&rb, "test_accuracy"));
    free(wa), free(wb);
    dpt_trainer_destroy(b);
    dpt_trainer_destroy(a);
    dpt_config_destroy(c);
    CHECK_OK(dpt_comm_barrier(comm));
    if (rank == 0)
        remove(path);
}

static void test_refused_layouts(void)
{
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = comm};
    dpt_trainer_t *t = NULL;
    /* 49 rows a batch: divisible by neither 2 nor 3 ranks. */
    dpt_config_t *c = cfg_make("batch_size=49", NULL);
    REQUIRE(c);
    CHECK_ERR(dpt_trainer_create(&t, c, &env), DPT_EINVAL, "batch_size 49 must be divisible by");
    CHECK(strstr(dpt_last_error(), "ranks") != NULL);
    dpt_config_destroy(c);
    c = cfg_make(NULL);
    REQUIRE(c);
    /* use_mpi needs the communicator (rank and world come from it). */
    env.comm = NULL;
    CHECK_ERR(dpt_trainer_create(&t, c, &env), DPT_EINVAL, "needs the ranks' communicator");
    CHECK(t == NULL);
    dpt_config_destroy(c);
}

#endif /* DPT_HAVE_MPI */

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc, (void)argv;
    DPT_TEST_SKIP("built without MPI");
#else
    /* As dpt_train_run: the one device of each rank runs on this thread. */
    if (dpt_test_mpi_begin(&argc, &argv, DPT_COMM_MPI_FUNNELED, "dpt_mpi_supervised", &comm, path,
                           sizeof path) != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_ranks_identical_and_like_one_process),
        DPT_TEST(test_checkpoint_rank0_resume_bitwise),
        DPT_TEST(test_refused_layouts),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_mpi_end(comm);
    return rc;
#endif
}
