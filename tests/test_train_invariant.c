/*
 * reduction_order = invariant through the trainer API (dpt/train.h): a
 * checkpoint records its order and a trainer in the other order refuses it,
 * naming both, and stays as it was (supervised, ppo, ddppo; a checkpoint
 * without the record is read as the fast order); ddppo resumed with another
 * number of workers (the same envs in all) holds the same weights as the
 * saved workers, and refuses a checkpoint whose worker states are damaged.
 * The bitwise comparisons across layouts run through `dpt train` in
 * tests/invariant_test.sh.
 */
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt_test_train.h"

#include "dpt/checkpoint.h"
#include "dpt/train.h"

#include <stdarg.h>
#include <string.h>

static char tmpdir[256];

static dpt_config_t *cfg_make(const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    dpt_config_t *c = dpt_test_config_va(NULL, 0, first, ap);
    va_end(ap);
    return c;
}

/* t's checkpoint saved as tmpdir/name and loaded back. */
static int save_load(dpt_trainer_t *t, const char *name, dpt_safetensors_t **st)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    int rc = dpt_test_checkpoint(t, path, 1);
    return rc ? rc : dpt_safetensors_load(st, path);
}

/* A copy of src as tmpdir/name without metadata key `drop` (NULL: none),
 * with blob `cut` (NULL: none) cut to half its bytes (flip = 0) or with
 * its byte 20 from the end flipped (flip = 1: inside the last env runner's
 * state), loaded back. */
static int rewrite(const dpt_safetensors_t *src, const char *name, const char *drop,
                   const char *cut, int flip, dpt_safetensors_t **out)
{
    unsigned char *copy = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    dpt_safetensors_writer_t *w;
    int rc = dpt_safetensors_writer_create(&w);
    for (size_t i = 0; !rc && i < dpt_safetensors_count(src); i++) {
        const dpt_safetensors_tensor_t *x = dpt_safetensors_tensor(src, i);
        size_t shape[DPT_SAFETENSORS_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        const void *data = x->data;
        if (cut && strcmp(x->name, cut) == 0 && !flip)
            shape[0] /= 2; /* a blob is a one-dimensional tensor of bytes */
        if (cut && strcmp(x->name, cut) == 0 && flip && x->bytes > 20 &&
            (copy = malloc(x->bytes)) != NULL) {
            memcpy(copy, x->data, x->bytes);
            copy[x->bytes - 20] ^= 0x5a;
            data = copy;
        }
        rc = dpt_safetensors_add(w, x->name, x->dtype, x->ndim, shape, data);
    }
    for (size_t i = 0; !rc && i < dpt_safetensors_meta_count(src); i++) {
        const char *k, *v;
        rc = dpt_safetensors_meta_at(src, i, &k, &v);
        if (!rc && strncmp(k, "dpt.", 4) != 0 && (!drop || strcmp(k, drop) != 0))
            rc = dpt_safetensors_set_meta(w, k, v);
    }
    if (!rc)
        rc = dpt_safetensors_save(w, path);
    dpt_safetensors_writer_destroy(w);
    free(copy);
    return rc ? rc : dpt_safetensors_load(out, path);
}

static int same_weights(dpt_trainer_t *a, dpt_trainer_t *b)
{
    size_t n;
    float *wa = dpt_test_weights(a, &n), *wb = dpt_test_weights(b, NULL);
    int same = wa && wb && memcmp(wa, wb, n * sizeof(float)) == 0;
    free(wa);
    free(wb);
    return same;
}

/* The job's two orders: a checkpoint of each refused by a trainer of the
 * other, which keeps its weights; without the record a checkpoint counts as
 * fast. */
static void check_orders(const char *job, const char *const *sets, size_t nsets)
{
    const char *base[8] = {job};
    for (size_t i = 0; i < nsets; i++)
        base[i + 1] = sets[i];
    dpt_config_t *cf, *ci;
    const char *inv[] = {"reduction_order=invariant"};
    REQUIRE_OK(dpt_test_config(&cf, base, nsets + 1, NULL, 0));
    REQUIRE_OK(dpt_test_config(&ci, base, nsets + 1, inv, 1));
    dpt_trainer_t *f, *i, *f2;
    REQUIRE_OK(dpt_trainer_create(&f, cf, NULL));
    REQUIRE_OK(dpt_trainer_create(&i, ci, NULL));
    REQUIRE_OK(dpt_trainer_create(&f2, cf, NULL));
    dpt_train_result_t r;
    REQUIRE_OK(dpt_trainer_iterate(f, &r));
    REQUIRE_OK(dpt_trainer_iterate(i, &r));
    dpt_safetensors_t *sf = NULL, *si = NULL, *bare = NULL;
    char nf[64], ni[64], nb[64];
    snprintf(nf, sizeof nf, "%s_fast.safetensors", job + 4);
    snprintf(ni, sizeof ni, "%s_inv.safetensors", job + 4);
    snprintf(nb, sizeof nb, "%s_bare.safetensors", job + 4);
    REQUIRE_OK(save_load(f, nf, &sf));
    REQUIRE_OK(save_load(i, ni, &si));
    float *before = dpt_test_weights(f2, NULL);
    CHECK_ERR(dpt_trainer_restore(f2, si), DPT_EINVAL, "trained in the invariant order");
    CHECK_ERR(dpt_trainer_restore(i, sf), DPT_EINVAL, "trained in the fast order");
    float *after = dpt_test_weights(f2, NULL);
    CHECK(before && after && memcmp(before, after, dpt_trainer_vars(f2)->total * 4) == 0);
    /* No record: the fast order (checkpoints from before the key). */
    REQUIRE_OK(rewrite(sf, nb, "reduction_chunk", NULL, 0, &bare));
    CHECK_OK(dpt_trainer_restore(f2, bare));
    CHECK(same_weights(f, f2));
    free(before);
    free(after);
    dpt_safetensors_destroy(sf);
    dpt_safetensors_destroy(si);
    dpt_safetensors_destroy(bare);
    dpt_trainer_destroy(f);
    dpt_trainer_destroy(i);
    dpt_trainer_destroy(f2);
    dpt_config_destroy(cf);
    dpt_config_destroy(ci);
}

static void test_orders_in_checkpoints(void)
{
    const char *sup[] = {"dataset=spirals", "spirals_points=256", "hidden=8", "batch_size=32",
                         "epochs=2"};
    check_orders("job=supervised", sup, 5);
    const char *ppo[] = {"env=CartPole-v1", "num_envs_per_worker=4", "rollout_fragment_length=16",
                         "sgd_minibatch_size=32", "total_timesteps=256"};
    check_orders("job=ppo", ppo, 5);
    const char *ddppo[] = {"env=CartPole-v1",       "num_workers=2",
                           "num_envs_per_worker=2", "rollout_fragment_length=16",
                           "sgd_minibatch_size=32", "sync_frac=1",
                           "total_timesteps=256"};
    check_orders("job=ddppo", ddppo, 7);
}

/* ddppo in the invariant order: 2 workers x 4 envs saved, restored by 4 x 2
 * (the same weights, and the next iteration runs); a checkpoint whose
 * worker state is cut short is refused and the trainer keeps its weights. */
static void test_ddppo_other_workers(void)
{
    dpt_config_t *c24 =
        cfg_make("job=ddppo", "env=CartPole-v1", "num_workers=2", "num_envs_per_worker=4",
                 "rollout_fragment_length=16", "sgd_minibatch_size=32", "sync_frac=1",
                 "total_timesteps=512", "reduction_chunk=8", "reduction_order=invariant", NULL);
    dpt_config_t *c42 =
        cfg_make("job=ddppo", "env=CartPole-v1", "num_workers=4", "num_envs_per_worker=2",
                 "rollout_fragment_length=16", "sgd_minibatch_size=32", "sync_frac=1",
                 "total_timesteps=512", "reduction_chunk=8", "reduction_order=invariant", NULL);
    REQUIRE(c24 && c42);
    dpt_trainer_t *a, *b, *c;
    REQUIRE_OK(dpt_trainer_create(&a, c24, NULL));
    REQUIRE_OK(dpt_trainer_create(&b, c42, NULL));
    REQUIRE_OK(dpt_trainer_create(&c, c42, NULL));
    dpt_train_result_t r;
    REQUIRE_OK(dpt_trainer_iterate(a, &r));
    dpt_safetensors_t *st = NULL, *cut = NULL;
    REQUIRE_OK(save_load(a, "dd24.safetensors", &st));
    CHECK_OK(dpt_trainer_restore(b, st));
    CHECK(same_weights(a, b));
    CHECK_OK(dpt_trainer_iterate(a, &r));
    CHECK_OK(dpt_trainer_iterate(b, &r));
    CHECK(same_weights(a, b)); /* the same rollouts on the same envs */
    float *before = dpt_test_weights(c, NULL);
    for (int flip = 0; flip < 2; flip++) {
        REQUIRE_OK(rewrite(st, "dd24_bad.safetensors", NULL, "worker.1", flip, &cut));
        int rc = dpt_trainer_restore(c, cut);
        printf("  a %s worker state: %s: %s\n", flip ? "damaged" : "cut", dpt_status_name(rc),
               rc ? dpt_last_error() : "");
        CHECK(rc == DPT_EFORMAT);
        CHECK(strstr(dpt_last_error(), flip ? "not a valid state" : "not a saved rollout"));
        float *after = dpt_test_weights(c, NULL);
        CHECK(before && after && memcmp(before, after, dpt_trainer_vars(c)->total * 4) == 0);
        free(after);
        dpt_safetensors_destroy(cut);
        cut = NULL;
    }
    free(before);
    dpt_safetensors_destroy(st);
    dpt_trainer_destroy(a);
    dpt_trainer_destroy(b);
    dpt_trainer_destroy(c);
    dpt_config_destroy(c24);
    dpt_config_destroy(c42);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_inv") != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_orders_in_checkpoints),
        DPT_TEST(test_ddppo_other_workers),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
