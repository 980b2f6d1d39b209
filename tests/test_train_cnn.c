/*
 * The supervised and sync_replicas jobs with a `network` of image layers on
 * IDX images (dataset = fashion_mnist read from a directory this test
 * writes: small 12x12 images of four bar patterns, one per class, at
 * random places on noise). Checks: the CNN learns them; two runs are
 * bitwise the same; a run checkpointed and resumed ends bitwise as the run
 * without a stop; the checkpoint carries the network and input shape and
 * is evaluated from its own metadata; towers in replicated mode and the
 * sync_replicas service train it; the network's errors (shape, syntax,
 * conflicting keys) are refused naming the layer.
 */
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt_test_train.h"

#include "dpt/checkpoint.h"
#include "dpt/train.h"

#include <stdarg.h>
#include <stdint.h>

#define SIDE 12
#define NTRAIN 384
#define NTEST 96
#define NET                                                                         \
    "network=conv(6,k=3,pad=1) relu maxpool(2) conv(8,k=3,stride=2,pad=same) tanh " \
    "avgpool(3) flatten dense(16) relu dropout(0.3)"

/* Learns the bars in 4 epochs; NET, with strides, SAME padding and
 * average pooling, is for the bitwise checks (it learns them more slowly). */
#define NET_LEARN "network=conv(8,k=3,pad=1) relu maxpool(2) flatten dense(32) relu"

static char tmpdir[256];
static char set_dir[300];

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* n images of class i % 4: a horizontal, vertical, diagonal or
 * anti-diagonal bar of bright pixels at a random place, on dim noise. */
static int write_split(const char *img_name, const char *lab_name, uint32_t n, uint64_t seed)
{
    size_t ni = 16 + (size_t)n * SIDE * SIDE, nl = 8 + n;
    unsigned char *im = malloc(ni), *lb = malloc(nl);
    if (!im || !lb)
        abort();
    put_be32(im, 0x803), put_be32(im + 4, n), put_be32(im + 8, SIDE), put_be32(im + 12, SIDE);
    put_be32(lb, 0x801), put_be32(lb + 4, n);
    uint64_t s = seed;
    for (uint32_t k = 0; k < n; k++) {
        unsigned char *px = im + 16 + (size_t)k * SIDE * SIDE;
        int cls = (int)(k % 4);
        lb[8 + k] = (unsigned char)cls;
        for (int i = 0; i < SIDE * SIDE; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            px[i] = (unsigned char)((s >> 33) % 60);
        }
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int a = 2 + (int)((s >> 33) % (SIDE - 4)), b = 2 + (int)((s >> 40) % (SIDE - 4));
        for (int d = -2; d <= 2; d++) {
            int r = cls == 0 ? a : a + d, c = cls == 1 ? b : (cls == 3 ? b - d : b + d);
            px[r * SIDE + c] = 250;
        }
    }
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/%s", tmpdir, img_name);
    snprintf(p2, sizeof p2, "%s/%s", tmpdir, lab_name);
    int rc = dpt_test_spill(p1, im, ni) || dpt_test_spill(p2, lb, nl);
    free(im);
    free(lb);
    return rc;
}

static dpt_config_t *cfg(const char *job, const char *first, ...)
{
    const char *base[] = {job,       "dataset=fashion_mnist", set_dir, "batch_size=32",
                          "lr=0.01", "optimizer=adam"};
    va_list ap;
    va_start(ap, first);
    dpt_config_t *c = dpt_test_config_va(base, 6, first, ap);
    va_end(ap);
    return c;
}

static int iterate_n(dpt_trainer_t *t, int n, dpt_train_result_t *r)
{
    for (int i = 0; i < n; i++) {
        int rc = dpt_trainer_iterate(t, r);
        if (rc)
            return rc;
    }
    return 0;
}

static int same_weights(dpt_trainer_t *a, dpt_trainer_t *b)
{
    size_t na = 0, nb = 0;
    float *wa = dpt_test_weights(a, &na), *wb = dpt_test_weights(b, &nb);
    int same = wa && wb && na == nb && memcmp(wa, wb, na * sizeof(float)) == 0;
    free(wa);
    free(wb);
    return same;
}

static void test_learns_and_repeats(void)
{
    dpt_config_t *c = cfg("job=supervised", NET_LEARN, "epochs=4", "num_devices=2", NULL);
    REQUIRE(c);
    dpt_trainer_t *a, *b;
    REQUIRE_OK(dpt_trainer_create(&a, c, NULL));
    REQUIRE_OK(dpt_trainer_create(&b, c, NULL));
    dpt_train_result_t ra, rb;
    CHECK_OK(iterate_n(a, 4, &ra));
    CHECK_OK(iterate_n(b, 4, &rb));
    CHECK(same_weights(a, b));
    double acc = dpt_train_result_get(&ra, "test_accuracy");
    if (!(acc >= 0.9))
        fprintf(stderr, "test accuracy %g after 4 epochs\n", acc);
    CHECK(acc >= 0.9);
    CHECK(dpt_train_result_get(&rb, "test_accuracy") == acc);
    /* The checkpoint: the network and the shape in the metadata, the conv
     * weights as [O, C, kh, kw], evaluated from the config it carries. */
    char path[512];
    snprintf(path, sizeof path, "%s/cnn.safetensors", tmpdir);
    REQUIRE_OK(dpt_test_checkpoint(a, path, 1));
    dpt_safetensors_t *st = NULL;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    const char *net = dpt_safetensors_meta(st, "network");
    CHECK(net && strcmp(net, NET_LEARN + strlen("network=")) == 0);
    const char *shape = dpt_safetensors_meta(st, "input_shape");
    CHECK(shape && strcmp(shape, "1,12,12") == 0);
    CHECK(dpt_safetensors_meta(st, "layers") == NULL);
    const dpt_safetensors_tensor_t *w0 = dpt_safetensors_find(st, "params.0.weight");
    CHECK(w0 && w0->ndim == 4 && w0->shape[0] == 8 && w0->shape[1] == 1 && w0->shape[3] == 3);
    CHECK(dpt_safetensors_find(st, "params.6.weight") != NULL); /* the added output layer */
    dpt_eval_result_t want, got;
    REQUIRE_OK(dpt_trainer_evaluate(a, 0, 0, &want));
    CHECK_OK(dpt_trainer_ops(DPT_JOB_SUPERVISED)->eval_checkpoint(c, st, 0, 0, &got));
    CHECK(got.count == NTEST && got.loss == want.loss && got.accuracy == want.accuracy);
    dpt_safetensors_destroy(st);
    dpt_trainer_destroy(a);
    dpt_trainer_destroy(b);
    dpt_config_destroy(c);
}

static void test_resume_bitwise(void)
{
    static const char *const modes[] = {"towers_mode=ps", "towers_mode=replicated"};
    for (size_t m = 0; m < 2; m++) {
        dpt_config_t *c = cfg("job=supervised", NET, "epochs=3", "num_devices=2", modes[m], NULL);
        REQUIRE(c);
        dpt_trainer_t *whole, *first, *second;
        dpt_train_result_t rw, r1, r2;
        REQUIRE_OK(dpt_trainer_create(&whole, c, NULL));
        REQUIRE_OK(dpt_trainer_create(&first, c, NULL));
        REQUIRE_OK(dpt_trainer_create(&second, c, NULL));
        CHECK_OK(iterate_n(whole, 3, &rw));
        CHECK_OK(iterate_n(first, 1, &r1));
        char path[512];
        snprintf(path, sizeof path, "%s/resume.safetensors", tmpdir);
        REQUIRE_OK(dpt_test_checkpoint(first, path, 1));
        dpt_safetensors_t *st = NULL;
        REQUIRE_OK(dpt_safetensors_load(&st, path));
        CHECK_OK(dpt_trainer_restore(second, st));
        CHECK_OK(iterate_n(second, 2, &r2));
        CHECK(same_weights(whole, second));
        CHECK(dpt_test_same_metrics(&r2, &rw));
        dpt_safetensors_destroy(st);
        dpt_trainer_destroy(whole);
        dpt_trainer_destroy(first);
        dpt_trainer_destroy(second);
        dpt_config_destroy(c);
    }
}

/* Dropout draws masks in training (another run than without it), keyed
 * by the rows' positions in the epoch: ps and replicated towers give the
 * same training loss; evaluation does not drop. */
static void test_dropout(void)
{
    dpt_config_t *with =
        cfg("job=supervised", NET_LEARN " dropout(0.5)", "epochs=1", "num_devices=2", NULL);
    dpt_config_t *without = cfg("job=supervised", NET_LEARN, "epochs=1", "num_devices=2", NULL);
    dpt_config_t *repl = cfg("job=supervised", NET_LEARN " dropout(0.5)", "epochs=1",
                             "num_devices=2", "towers_mode=replicated", NULL);
    REQUIRE(with && without && repl);
    dpt_trainer_t *a, *b, *c;
    REQUIRE_OK(dpt_trainer_create(&a, with, NULL));
    REQUIRE_OK(dpt_trainer_create(&b, without, NULL));
    REQUIRE_OK(dpt_trainer_create(&c, repl, NULL));
    dpt_train_result_t ra, rb, rc;
    CHECK_OK(iterate_n(a, 1, &ra));
    CHECK_OK(iterate_n(b, 1, &rb));
    CHECK_OK(iterate_n(c, 1, &rc));
    CHECK(dpt_train_result_get(&ra, "train_loss") != dpt_train_result_get(&rb, "train_loss"));
    CHECK(dpt_train_result_get(&ra, "train_loss") == dpt_train_result_get(&rc, "train_loss"));
    /* The test figures of a's weights, evaluated twice: no mask, the same. */
    dpt_eval_result_t e1, e2;
    CHECK_OK(dpt_trainer_evaluate(a, 0, 0, &e1));
    CHECK_OK(dpt_trainer_evaluate(a, 0, 0, &e2));
    CHECK(e1.loss == e2.loss && e1.loss == dpt_train_result_get(&ra, "test_loss"));
    dpt_trainer_destroy(a);
    dpt_trainer_destroy(b);
    dpt_trainer_destroy(c);
    dpt_config_destroy(with);
    dpt_config_destroy(without);
    dpt_config_destroy(repl);
}

static void test_sync_replicas(void)
{
    dpt_config_t *c = cfg("job=sync_replicas", NET_LEARN, "epochs=6", "total_num_replicas=2",
                          "replicas_to_aggregate=2", NULL);
    REQUIRE(c);
    dpt_trainer_t *t;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    CHECK_OK(iterate_n(t, 6, &r));
    double acc = dpt_train_result_get(&r, "test_accuracy");
    if (!(acc >= 0.85))
        fprintf(stderr, "sync_replicas: test accuracy %g after 6 epochs\n", acc);
    CHECK(acc >= 0.85);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

static void test_errors(void)
{
    dpt_trainer_t *t = NULL;
    /* A dense layer on an image: refused when the data's shape is known. */
    dpt_config_t *c = cfg("job=supervised", "network=conv(4,k=3) relu dense(8)", NULL);
    REQUIRE(c);
    CHECK_ERR(dpt_trainer_create(&t, c, NULL), DPT_EINVAL,
              "layer 3 of 4 (linear) on input [4, 10, 10]: the input is an image");
    CHECK(t == NULL);
    dpt_config_destroy(c);
    c = cfg("job=supervised", "network=conv(4,k=13)", NULL);
    REQUIRE(c);
    CHECK_ERR(dpt_trainer_create(&t, c, NULL), DPT_EINVAL, "on input [1, 12, 12]");
    dpt_config_destroy(c);
    /* Syntax and conflicting keys: refused when the config is finalized. */
    static const struct {
        const char *set, *other, *needle;
    } bad[] = {
        {"network=conv(4,k=3) maxpool(2,foo=1)", NULL,
         "network: network layer 2 \"maxpool(2,foo=1)\": unknown argument \"foo\""},
        {"network=relu", "hidden=8", "hidden sizes the built-in MLP, which network replaces"},
        {"network=relu", "activation=tanh", "activation sizes the built-in MLP"},
        {"network=relu", "model=libx.so", "both describe the model: keep one"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dpt_config_t *k = NULL;
        REQUIRE_OK(dpt_config_create(&k));
        CHECK_OK(dpt_config_set(k, "job=supervised"));
        CHECK_OK(dpt_config_set(k, bad[i].set));
        if (bad[i].other)
            CHECK_OK(dpt_config_set(k, bad[i].other));
        CHECK_ERR(dpt_config_finalize(k), DPT_EINVAL, bad[i].needle);
        dpt_config_destroy(k);
    }
    dpt_config_t *k = NULL;
    REQUIRE_OK(dpt_config_create(&k));
    CHECK_OK(dpt_config_set(k, "job=sync_replicas"));
    CHECK_OK(dpt_config_set(k, "dataset=bags"));
    CHECK_OK(dpt_config_set(k, "network=relu"));
    CHECK_ERR(dpt_config_finalize(k), DPT_EINVAL, "network does not apply to dataset = bags");
    dpt_config_destroy(k);
    REQUIRE_OK(dpt_config_create(&k));
    CHECK_OK(dpt_config_set(k, "job=ppo"));
    CHECK_OK(dpt_config_set(k, "network=dense(4) relu dropout(0.5)"));
    CHECK_ERR(dpt_config_finalize(k), DPT_EINVAL,
              "network: layer 3 is dropout, which the RL jobs do not take");
    dpt_config_destroy(k);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_cnn") != 0)
        return 1;
    snprintf(set_dir, sizeof set_dir, "data_dir=%s", tmpdir);
    if (write_split("train-images-idx3-ubyte", "train-labels-idx1-ubyte", NTRAIN, 1) ||
        write_split("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", NTEST, 2))
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_learns_and_repeats), DPT_TEST(test_resume_bitwise), DPT_TEST(test_dropout),
        DPT_TEST(test_sync_replicas),      DPT_TEST(test_errors),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
