/*
 * The sync_replicas job's token rules and defaults through the trainer
 * (threads): with N = R = 4 and worker 3 a straggler slower than
 * comm_timeout_s, `sync_replicas_tokens = fifo` makes every step of the
 * epoch (the other workers take its tokens, as TensorFlow's queue lets
 * them), and `strict` ends the epoch with an error naming worker 3.
 * Setting replicas_to_aggregate alone gives N = R; N < R set explicitly is
 * allowed and noted; too few init_tokens are refused naming both keys;
 * replica_grad_clip bounds what each worker pushes.
 */
#include "dpt/dpt.h"
#include "dpt_test.h"
#include "dpt_test_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SR_BASE                                                                                 \
    "job=sync_replicas", "dataset=spirals", "spirals_points=512", "hidden=16", "batch_size=64", \
        "epochs=2"

static const char *metric_name(const dpt_train_result_t *r, const char *name, double *out)
{
    for (size_t i = 0; i < r->nmetrics; i++)
        if (strcmp(r->metrics[i].name, name) == 0) {
            *out = r->metrics[i].value;
            return name;
        }
    return NULL;
}

/* One epoch with worker 3 sleeping `delay_s` before each push. */
static int straggled_epoch(const char *tokens, double delay_s, dpt_train_result_t *r)
{
    char set[64];
    snprintf(set, sizeof set, "sync_replicas_tokens=%s", tokens);
    static const char *const base[] = {SR_BASE, "replicas_to_aggregate=4", "comm_timeout_s=0.2"};
    const char *const sets[] = {set};
    dpt_config_t *c = NULL;
    int rc = dpt_test_config(&c, base, sizeof base / sizeof base[0], sets, 1);
    if (rc)
        return rc;
    dpt_trainer_env_t env;
    memset(&env, 0, sizeof env);
    env.straggler_worker = 3;
    env.straggler_delay_s = delay_s;
    dpt_trainer_t *t = NULL;
    rc = dpt_trainer_create(&t, c, &env);
    if (!rc)
        rc = dpt_trainer_iterate(t, r);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    return rc;
}

static void test_fifo_goes_past_a_straggler(void)
{
    dpt_train_result_t r;
    /* The straggler computes its first gradient (no token needed) and then
     * sleeps far longer than the epoch's 8 steps take: it holds no token,
     * so the others carry its share. (A worker that holds a token while it
     * is slow stalls TensorFlow's queue too: the step waits for that
     * token's gradient.) */
    REQUIRE_OK(straggled_epoch("fifo", 3.0, &r));
    double step = -1, w0 = -1, w3 = -1;                          /* w0: shown */
    CHECK(metric_name(&r, "global_step", &step) && step == 8.0); /* 512 / 64 */
    CHECK(metric_name(&r, "info/sync_replicas/batches_contributed/w0", &w0));
    CHECK(metric_name(&r, "info/sync_replicas/batches_contributed/w3", &w3));
    /* The straggler's one gradient came after the session; the others
     * carried its share (32 gradients in 8 steps). */
    printf("     contributions: w0 %.0f, w3 %.0f\n", w0, w3);
    CHECK(w3 <= 1.0); /* (which fast worker carried how much is timing) */
    double sum = 0;
    for (int w = 0; w < 4; w++) {
        char name[64];
        double v = 0;
        snprintf(name, sizeof name, "info/sync_replicas/batches_contributed/w%d", w);
        CHECK(metric_name(&r, name, &v));
        sum += v;
    }
    CHECK(sum == 32.0);
}

static void test_strict_names_the_stuck_worker(void)
{
    dpt_train_result_t r;
    CHECK_ERR(straggled_epoch("strict", 1.0, &r), DPT_ETIMEDOUT, "waits for worker 3");
}

static void test_defaults_and_refusals(void)
{
    static const char *const base[] = {SR_BASE};
    dpt_config_t *c = NULL;
    const char *r4[] = {"replicas_to_aggregate=4"};
    REQUIRE_OK(dpt_test_config(&c, base, sizeof base / sizeof base[0], r4, 1));
    CHECK(dpt_config_int(c, DPT_CFG_total_num_replicas) == 4);
    dpt_config_destroy(c);
    /* N < R given explicitly: allowed, and the first result says what it
     * means. */
    const char *few[] = {"replicas_to_aggregate=4", "total_num_replicas=2"};
    REQUIRE_OK(dpt_test_config(&c, base, sizeof base / sizeof base[0], few, 2));
    dpt_trainer_t *t = NULL;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK(strstr(r.note, "total_num_replicas = 2 < replicas_to_aggregate = 4") != NULL);
    double step = 0;
    CHECK(metric_name(&r, "global_step", &step) && step == 8.0);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    /* Initial tokens: fewer than R - N are refused, naming both keys. */
    const char *bad[] = {"replicas_to_aggregate=4", "total_num_replicas=2", "init_tokens=1"};
    CHECK_ERR(dpt_test_config(&c, base, sizeof base / sizeof base[0], bad, 3), DPT_EINVAL,
              "init_tokens = 1 are too few");
    CHECK(strstr(dpt_last_error(), "total_num_replicas = 2") != NULL);
}

/* replica_grad_clip: a tiny bound makes every pushed gradient tiny, so the
 * weights barely move; the run is still bitwise reproducible (N = R). */
static void test_replica_clip(void)
{
    static const char *const base[] = {SR_BASE, "optimizer=sgd", "lr=1"};
    const char *clip[] = {"replica_grad_clip=1e-6"};
    float *w[3] = {NULL, NULL, NULL};
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        dpt_config_t *c = NULL;
        REQUIRE_OK(dpt_test_config(&c, base, sizeof base / sizeof base[0], clip, k ? 1 : 0));
        dpt_trainer_t *t = NULL;
        REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
        n = dpt_trainer_vars(t)->total;
        w[k] = calloc(n, sizeof(float));
        float *w0 = calloc(n, sizeof(float));
        REQUIRE(w[k] && w0);
        CHECK_OK(dpt_trainer_get_weights(t, w0, n));
        dpt_train_result_t r;
        CHECK_OK(dpt_trainer_iterate(t, &r));
        CHECK_OK(dpt_trainer_get_weights(t, w[k], n));
        /* w[k] - w0: SGD at lr 1 moves by the averaged (clipped) gradient. */
        for (size_t i = 0; i < n; i++)
            w[k][i] -= w0[i];
        free(w0);
        dpt_trainer_destroy(t);
        dpt_config_destroy(c);
    }
    double moved[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n; i++)
            moved[k] += (double)w[k][i] * (double)w[k][i];
    /* 8 steps of at most 1e-6 each: the clipped runs moved at most 8e-6. */
    CHECK(moved[0] > 1e-4 && sqrt(moved[1]) <= 8e-6 * 1.0001);
    CHECK(memcmp(w[1], w[2], n * sizeof(float)) == 0);
    for (int k = 0; k < 3; k++)
        free(w[k]);
}

int main(void)
{
    static const dpt_test_case_t tests[] = {
        DPT_TEST(test_fifo_goes_past_a_straggler),
        DPT_TEST(test_strict_names_the_stuck_worker),
        DPT_TEST(test_defaults_and_refusals),
        DPT_TEST(test_replica_clip),
    };
    return DPT_TEST_RUN(tests);
}
