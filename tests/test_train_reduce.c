/*
 * The keys that choose how gradients combine: reduce_op, async_scale and
 * allreduce_algorithm (dpt/train.h), through the supervised and PPO
 * trainers.
 *
 * With plain SGD an update is w - lr * g, and scaling by 2 is exact in
 * binary floating point, so the documented meanings can be checked
 * bitwise:
 *   reduce_op = sum   g = g_0 + g_1 (2 devices): the same weights as avg
 *                     (g = (g_0 + g_1) / 2) with twice the learning rate
 *   async_scale = s   each device applies s * g_d: with 1 device (async is
 *                     deterministic then) s = 0.5 equals the default (1 / 1)
 *                     at half the learning rate
 * allreduce_algorithm reaches the replicated towers' group: with 2 devices
 * every algorithm adds each element once (the same bits); with 3, ring and
 * native add in different orders (different bits, close weights).
 */
#include "dpt_test.h"
#include "dpt_test_train.h"

#include "dpt/train.h"
#include "train/rl_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A finalized supervised config: the small spirals task with plain SGD, plus
 * the given "key=value" strings (NULL-terminated). */
static dpt_config_t *cfg_make(const char *first, ...)
{
    static const char *const base[] = {
        "job=supervised",  "dataset=spirals", "spirals_points=512",   "hidden=32,32",
        "activation=tanh", "optimizer=sgd",   "lr_schedule=constant", "epochs=2"};
    va_list ap;
    va_start(ap, first);
    dpt_config_t *c = dpt_test_config_va(base, sizeof base / sizeof base[0], first, ap);
    va_end(ap);
    return c;
}

/* The weights after two epochs of the config (caller frees); NULL on
 * failure (reported). */
static float *train(dpt_config_t *c, size_t *n)
{
    dpt_trainer_t *t = NULL;
    float *w = NULL;
    if (c == NULL)
        return NULL;
    CHECK_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    int rc = t ? dpt_trainer_iterate(t, &r) : -1;
    if (rc == 0)
        rc = dpt_trainer_iterate(t, &r);
    CHECK(rc == 0);
    if (rc == 0)
        w = dpt_test_weights(t, n);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    return w;
}

static int same(const float *a, const float *b, size_t n)
{
    return a && b && memcmp(a, b, n * sizeof(float)) == 0;
}

static void test_reduce_op(void)
{
    const char *modes[] = {"towers_mode=ps", "towers_mode=replicated"};
    for (int m = 0; m < 2; m++) {
        size_t n = 0;
        float *avg =
            train(cfg_make(modes[m], "num_devices=2", "batch_size=32", "lr=0.02", NULL), &n);
        float *sum = train(
            cfg_make(modes[m], "num_devices=2", "batch_size=32", "lr=0.01", "reduce_op=sum", NULL),
            NULL);
        float *sum2 = train(
            cfg_make(modes[m], "num_devices=2", "batch_size=32", "lr=0.02", "reduce_op=sum", NULL),
            NULL);
        CHECK(n > 0 && same(avg, sum, n));   /* sum at lr / 2 = avg at lr */
        CHECK(n > 0 && !same(avg, sum2, n)); /* sum at lr is another update */
        free(avg);
        free(sum);
        free(sum2);
    }
}

static void test_async_scale(void)
{
    size_t n = 0;
    const char *base[] = {"towers_mode=async", "num_devices=1", "batch_size=16"};
    float *dflt = train(cfg_make(base[0], base[1], base[2], "lr=0.01", NULL), &n);
    float *half =
        train(cfg_make(base[0], base[1], base[2], "lr=0.02", "async_scale=0.5", NULL), NULL);
    float *quarter =
        train(cfg_make(base[0], base[1], base[2], "lr=0.02", "async_scale=0.25", NULL), NULL);
    CHECK(n > 0 && same(dflt, half, n));     /* 0.5 g at 2 lr = 1 g at lr */
    CHECK(n > 0 && !same(dflt, quarter, n)); /* 0.25 g at 2 lr = 0.5 g at lr */
    free(dflt);
    free(half);
    free(quarter);
}

static void test_allreduce_algorithm(void)
{
    const char *algos[] = {"allreduce_algorithm=native", "allreduce_algorithm=ring",
                           "allreduce_algorithm=tree", "allreduce_algorithm=hier",
                           "allreduce_algorithm=auto"};
    size_t n = 0;
    float *w2[5], *w3[5];
    for (int a = 0; a < 5; a++) {
        w2[a] = train(cfg_make("towers_mode=replicated", "num_devices=2", "batch_size=32",
                               "lr=0.02", algos[a], NULL),
                      &n);
        w3[a] = train(cfg_make("towers_mode=replicated", "num_devices=3", "batch_size=48",
                               "lr=0.02", algos[a], NULL),
                      &n);
    }
    for (int a = 1; a < 5; a++)
        CHECK(n > 0 && same(w2[0], w2[a], n));
    /* 3 devices: ring adds in another order than native (hier and auto are
     * native on threads, tree is (g_0 + g_2) + g_1) */
    CHECK(n > 0 && !same(w3[0], w3[1], n) && !same(w3[0], w3[2], n));
    CHECK(n > 0 && same(w3[0], w3[3], n) && same(w3[0], w3[4], n));
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; w3[0] && w3[1] && i < n; i++) {
        diff = fmax(diff, fabs((double)w3[0][i] - (double)w3[1][i]));
        norm = fmax(norm, fabs((double)w3[0][i]));
    }
    CHECK(diff < 1e-4 * norm);
    for (int a = 0; a < 5; a++) {
        free(w2[a]);
        free(w3[a]);
    }
}

static void test_keys(void)
{
    dpt_config_t *c = NULL;
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_OK(dpt_config_set(c, "job=supervised"));
    CHECK_ERR(dpt_config_set(c, "reduce_op=max"), DPT_EINVAL, "sum|avg");
    CHECK_ERR(dpt_config_set(c, "allreduce_algorithm=butterfly"), DPT_EINVAL,
              "auto|native|ring|tree|hier");
    CHECK_ERR(dpt_config_set(c, "async_scale=-1"), DPT_EINVAL, "async_scale");
    CHECK_OK(dpt_config_set(c, "async_scale=0.5"));
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "async_scale = 0.5 applies to towers_mode");
    dpt_config_destroy(c);

    REQUIRE_OK(dpt_config_create(&c));
    CHECK_OK(dpt_config_set(c, "job=ppo"));
    CHECK_OK(dpt_config_set(c, "towers_mode=async"));
    CHECK_OK(dpt_config_set(c, "reduce_op=sum"));
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "reduce_op = sum does not apply");
    dpt_config_destroy(c);

    REQUIRE_OK(dpt_config_create(&c));
    CHECK_OK(dpt_config_set(c, "job=ddppo"));
    CHECK_OK(dpt_config_set(c, "reduce_op=sum"));
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "reduce_op does not apply to job ddppo");
    dpt_config_destroy(c);

    /* PPO's engine settings carry them */
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_OK(dpt_config_set(c, "job=ppo"));
    CHECK_OK(dpt_config_set(c, "num_devices=2"));
    CHECK_OK(dpt_config_set(c, "towers_mode=async"));
    CHECK_OK(dpt_config_set(c, "async_scale=0.25"));
    CHECK_OK(dpt_config_set(c, "allreduce_algorithm=tree"));
    REQUIRE_OK(dpt_config_finalize(c));
    dpt_ppo_config_t rc;
    CHECK_OK(dpt__ppo_config_from(c, &rc));
    CHECK(rc.towers.async_scale == 0.25f && rc.towers.reduce_sum == 0);
    CHECK(rc.common.allreduce_algorithm == DPT_ALLREDUCE_TREE);
    dpt_config_destroy(c);
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_OK(dpt_config_set(c, "job=ppo"));
    CHECK_OK(dpt_config_set(c, "reduce_op=sum"));
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK_OK(dpt__ppo_config_from(c, &rc));
    CHECK(rc.towers.reduce_sum == 1);
    dpt_config_destroy(c);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_keys),
        DPT_TEST(test_reduce_op),
        DPT_TEST(test_async_scale),
        DPT_TEST(test_allreduce_algorithm),
    };
    return DPT_TEST_RUN(cases);
}
