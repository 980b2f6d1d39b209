/*
 * Gradient buckets across MPI ranks (run by CTest under mpirun -np 2 and
 * -np 3, and over TCP): each rank is a one-device towers engine over an MPI
 * communicator, and its gradients go in 300-byte buckets (5 of them for
 * this MLP) all-reduced by the engine's communication thread while the
 * backward pass runs (MPI_THREAD_SERIALIZED):
 *  - with the tree algorithm (whose order does not depend on the message
 *    size), and with any algorithm on 2 ranks (a + b = b + a), the weights,
 *    norms and losses are bitwise those of one all-reduce
 *    (bucket_bytes = 0); with native or auto on 3 ranks the MPI library
 *    may choose another algorithm for a bucket's size than for the whole
 *    gradient (dpt's auto table does, by size), so they are compared
 *    within 1e-4 (relative, floored at 1e-2: float rounding grown over a
 *    few to twenty steps) and whether they are bitwise is printed;
 *  - a second run repeats the first bitwise, on every algorithm, and every
 *    rank ends with the same weights;
 *  - the supervised job with bucket_bytes = 1024 against 0 (the key of the
 *    config, through the trainer): the same rule.
 */
#include "dpt_config.h"
#include "dpt_test.h"
#include "dpt_test_train.h"

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/comm.h"
#include "dpt/nn.h"
#include "dpt/optim.h"
#include "dpt/rng.h"
#include "dpt/towers.h"
#include "dpt/train.h"
#include "parallel/towers_impl.h" /* t->bk: was the overlap path taken */

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#if DPT_HAVE_MPI
static dpt_comm_t *comm; /* MPI_COMM_WORLD, algorithm auto */
static char path[512];

enum { IN = 6, OUT = 3, ROWS = 16, NB = 5 };

static const dpt_layer_spec_t layers[] = {
    {.kind = DPT_LAYER_LINEAR, .out = 16, .init = DPT_INIT_DEFAULT, .gain = 0},
    {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
    {.kind = DPT_LAYER_LINEAR, .out = 16, .init = DPT_INIT_DEFAULT, .gain = 0},
    {.kind = DPT_LAYER_TANH, .out = 0, .init = 0, .gain = 0},
    {.kind = DPT_LAYER_LINEAR, .out = OUT, .init = DPT_INIT_DEFAULT, .gain = 0}};

static dpt_batch_t xy(size_t rows, float *x, int32_t *y)
{
    dpt_batch_t b;
    dpt_batch_init(&b, rows);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, IN, 0, x);
    dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, y);
    return b;
}

typedef struct run {
    float w[1024];
    double norm, loss;
    size_t nbuckets;
} run_t;

/* Two passes of 4 steps of 4 rows on this rank's 16 rows (its own stream
 * of the data generator), from the same initial weights on every rank. */
static int train(dpt_comm_t *c, int sgd, dpt_towers_mode_t mode, size_t bucket_bytes, run_t *out)
{
    float x[ROWS * IN];
    int32_t y[ROWS];
    dpt_rng_t r;
    dpt_rng_init(&r, 99, (uint64_t)dpt_comm_rank(c), 0, DPT_RNG_DATA);
    dpt_rng_fill_uniform(&r, x, ROWS * IN, -1.0f, 1.0f);
    for (int i = 0; i < ROWS; i++)
        y[i] = (int32_t)dpt_rng_below(&r, OUT);
    dpt_mlp_t *mlp = NULL;
    dpt_towers_t *t = NULL;
    int rc = dpt_mlp_create(&mlp, IN, layers, 5, DPT_LOSS_SOFTMAX_XENT, 4);
    if (!rc) {
        dpt_model_t model = dpt_mlp_model(mlp);
        dpt_towers_config_t tc = dpt_towers_defaults();
        tc.mode = mode;
        tc.max_per_device_batch_size = 4;
        tc.max_load_rows = ROWS;
        tc.grad_clip = sgd ? 0.0 : 0.5;
        tc.optim = dpt_optim_defaults(sgd ? DPT_OPTIM_SGD : DPT_OPTIM_ADAM);
        tc.check_every = 4;
        tc.bucket_bytes = bucket_bytes;
        tc.comm = c;
        dpt_batch_t lay = xy(0, NULL, NULL);
        rc = dpt_towers_create(&t, &model, &lay, &tc);
    }
    size_t count = 0;
    if (!rc) {
        out->nbuckets = t->bk ? t->bk->plan.n : 0;
        count = dpt_mlp_vars(mlp)->total;
        dpt_rng_init(&r, 5, 0, 0, DPT_RNG_INIT);
        dpt_mlp_init_params(mlp, out->w, &r);
        rc = count <= 1024 ? dpt_towers_set_weights(t, out->w, count) : DPT_EINVAL;
    }
    dpt_batch_t b = xy(ROWS, x, y);
    dpt_towers_load_info_t li;
    if (!rc)
        rc = dpt_towers_load(t, 0, &b, &li);
    for (int pass = 0; !rc && pass < 2; pass++)
        for (size_t off = 0; !rc && off < li.rows_per_device; off += li.per_device_batch) {
            dpt_towers_stats_t st;
            rc = dpt_towers_optimize(t, 0, off, 0.05f, &st);
            out->norm = st.grad_norm;
            out->loss = st.loss;
        }
    if (!rc)
        rc = dpt_towers_get_weights(t, out->w, count);
    dpt_towers_destroy(t);
    dpt_mlp_destroy(mlp);
    return rc;
}

/* Relative differences with a floor of 1e-2 on the reference (weights
 * near zero), as the other MPI tests compare with one process. */
static double max_rel(const float *a, const float *b, size_t n)
{
    return dpt_test_max_rel_diff(a, b, n, 1e-2);
}

static void test_buckets_like_one_allreduce(void)
{
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    static const dpt_comm_algorithm_t algos[] = {DPT_ALLREDUCE_TREE, DPT_ALLREDUCE_NATIVE,
                                                 DPT_ALLREDUCE_AUTO};
    static const char *const names[] = {"tree", "native", "auto"};
    static run_t one, bk, again;
    for (int a = 0; a < 3; a++) {
        dpt_comm_mpi_options_t o;
        dpt_comm_mpi_options_init(&o);
        o.algorithm = algos[a];
        o.timeout_s = 60.0;
        dpt_comm_t *c;
        REQUIRE_OK(dpt_comm_mpi_create(&c, &o));
        for (int sgd = 0; sgd < 2; sgd++)
            for (int m = 0; m < 2; m++) {
                dpt_towers_mode_t mode = m ? DPT_TOWERS_REPLICATED : DPT_TOWERS_PS;
                memset(&one, 0, sizeof one);
                memset(&bk, 0, sizeof bk);
                memset(&again, 0, sizeof again);
                REQUIRE_OK(train(c, sgd, mode, 0, &one));
                REQUIRE_OK(train(c, sgd, mode, 300, &bk));
                REQUIRE_OK(train(c, sgd, mode, 300, &again));
                CHECK(one.nbuckets == 0 && bk.nbuckets == NB);
                int same = memcmp(one.w, bk.w, sizeof one.w) == 0 && one.norm == bk.norm &&
                           one.loss == bk.loss;
                double d = max_rel(bk.w, one.w, sizeof one.w / sizeof(float));
                if (algos[a] == DPT_ALLREDUCE_TREE || size == 2)
                    CHECK(same);
                else
                    CHECK(d <= 1e-4);
                CHECK(memcmp(bk.w, again.w, sizeof bk.w) == 0 && bk.norm == again.norm);
                CHECK(dpt_test_same_on_all_ranks(c,
                                                 dpt_fnv1a64(DPT_FNV1A64_INIT, bk.w, sizeof bk.w)));
                if (rank == 0)
                    printf("%d ranks, %s, %s, %s: %d buckets vs one all-reduce: %s (max "
                           "relative difference %.3g); repeat bitwise\n",
                           size, names[a], dpt_towers_mode_name(mode), sgd ? "sgd" : "adam + clip",
                           NB, same ? "bitwise equal" : "within rounding", d);
            }
        dpt_comm_destroy(c);
    }
}

/* The supervised job's key, through the trainer: spirals, hidden 32,32
 * (1,218 floats), one device per rank, 1024-byte buckets against 0. */
static float *train_job(const char *buckets, size_t *n)
{
    static const char *const base[] = {"job=supervised", "dataset=spirals", "spirals_points=256",
                                       "hidden=32,32",   "activation=tanh", "lr=0.01",
                                       "batch_size=24",  "num_devices=1",   "epochs=2"};
    dpt_config_t *c = NULL;
    const char *sets[1] = {buckets};
    if (dpt_test_config(&c, base, sizeof base / sizeof base[0], sets, 1) != 0) {
        fprintf(stderr, "config: %s\n", dpt_last_error());
        return NULL;
    }
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = comm};
    dpt_trainer_t *t = NULL;
    dpt_train_result_t r;
    int rc = dpt_trainer_create(&t, c, &env);
    for (int i = 0; !rc && i < 2; i++)
        rc = dpt_trainer_iterate(t, &r);
    CHECK_OK(rc);
    float *w = rc ? NULL : dpt_test_weights(t, n);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    return w;
}

static void test_job_key(void)
{
    int size = dpt_comm_size(comm);
    size_t n0 = 0, n1 = 0, n2 = 0;
    float *w0 = train_job("bucket_bytes=0", &n0), *w1 = train_job("bucket_bytes=1024", &n1),
          *w2 = train_job("bucket_bytes=1024", &n2);
    REQUIRE(w0 && w1 && w2 && n0 == n1 && n1 == n2);
    int same = memcmp(w0, w1, n0 * sizeof(float)) == 0;
    double d = max_rel(w1, w0, n0);
    if (size == 2)
        CHECK(same);
    else
        CHECK(d <= 1e-4);
    CHECK(memcmp(w1, w2, n1 * sizeof(float)) == 0);
    CHECK(dpt_test_same_on_all_ranks(comm, dpt_fnv1a64(DPT_FNV1A64_INIT, w1, n1 * sizeof(float))));
    if (dpt_comm_rank(comm) == 0)
        printf("supervised job, %d ranks: bucket_bytes = 1024 vs 0: %s (max relative difference "
               "%.3g); repeat bitwise\n",
               size, same ? "bitwise equal" : "within rounding", d);
    free(w0), free(w1), free(w2);
}
#endif

int main(int argc, char **argv)
{
#if !DPT_HAVE_MPI
    (void)argc, (void)argv;
    DPT_TEST_SKIP("built without MPI");
#else
    /* The towers' communication thread calls MPI during steps, this thread
     * between them. */
    if (dpt_test_mpi_begin(&argc, &argv, DPT_COMM_MPI_SERIALIZED, "dpt_mpi_buckets", &comm, path,
                           sizeof path) != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_buckets_like_one_allreduce),
        DPT_TEST(test_job_key),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_mpi_end(comm);
    return rc;
#endif
}
