/*
 * The key `frozen` through the trainers (dpt/train.h): in every job that
 * has a model (supervised with Adam and weight decay, and with SGD; PPO on
 * two devices; DD-PPO's two workers; APPO; sync_replicas) the frozen
 * variables keep their initial weights and zero optimizer slots bitwise
 * while the others move, and checkpoints name them (metadata "frozen"); an
 * entry that matches no variable is refused by every job (DPT_EINVAL,
 * naming it and the model's variables); a run restored under another
 * `frozen` list goes on with that list (allowed), and one restored under
 * the same list goes on bitwise.
 */
#include "dpt_test.h"
#include "dpt_test_train.h"

#include "dpt/arena.h"
#include "dpt/checkpoint.h"
#include "dpt/train.h"

#include <stdlib.h>
#include <string.h>

static char tmpdir[256];

#define NSETS(a) (sizeof(a) / sizeof((a)[0]))

#define SUP_BASE                                                                                \
    "job=supervised", "dataset=spirals", "spirals_points=512", "hidden=16,16", "batch_size=64", \
        "epochs=3", "num_devices=2", "weight_decay=0.01"
#define PPO_BASE                                                                         \
    "job=ppo", "env=CartPole-v1", "num_envs_per_worker=4", "rollout_fragment_length=32", \
        "sgd_minibatch_size=64", "num_devices=2", "total_timesteps=4096", "checkpoint_every=0"
#define DDPPO_BASE                                                                              \
    "job=ddppo", "env=CartPole-v1", "num_workers=2", "num_envs_per_worker=2",                   \
        "rollout_fragment_length=32", "sgd_minibatch_size=32", "num_sgd_iter=2", "sync_frac=1", \
        "total_timesteps=4096", "checkpoint_every=0"
#define APPO_BASE                                                                       \
    "job=appo", "env=CartPole-v1", "num_workers=1", "num_envs_per_worker=4",            \
        "rollout_fragment_length=50", "train_batch_size=200", "total_timesteps=100000", \
        "min_sample_timesteps_per_iteration=1000", "checkpoint_every=0"
#define SR_BASE                                                                                 \
    "job=sync_replicas", "dataset=spirals", "spirals_points=512", "hidden=16", "batch_size=64", \
        "epochs=2", "optimizer=adam", "weight_decay=0.01", "ema_decay=0.9"

/* A trainer of the settings base (n of them) and `frozen = list`. */
static int make_trainer(dpt_trainer_t **t, dpt_config_t **c, const char *const *base, size_t n,
                        const char *list)
{
    char set[160];
    snprintf(set, sizeof set, "frozen=%s", list);
    const char *const sets[] = {set};
    *t = NULL;
    int rc = dpt_test_config(c, base, n, sets, 1);
    if (!rc && (rc = dpt_trainer_create(t, *c, NULL)) != 0) {
        dpt_config_destroy(*c);
        *c = NULL;
    }
    return rc;
}

static void free_trainer(dpt_trainer_t *t, dpt_config_t *c)
{
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

/* The parameters and the first two slots ("optim.m." and "optim.v.", or
 * zeros where absent) of t's checkpoint, saved to `name`; and its
 * metadata "frozen" into meta. */
typedef struct state {
    float *p, *m, *v;
    char meta[256];
} state_t;

static int save_and_load(dpt_trainer_t *t, const char *name, state_t *s)
{
    const dpt_vartable_t *vars = dpt_trainer_vars(t);
    size_t n = vars->total;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", tmpdir, name);
    s->p = calloc(n, sizeof(float));
    s->m = calloc(n, sizeof(float));
    s->v = calloc(n, sizeof(float));
    if (!s->p || !s->m || !s->v)
        return DPT_ENOMEM;
    int rc = dpt_test_checkpoint(t, path, 1);
    dpt_safetensors_t *st = NULL;
    if (!rc)
        rc = dpt_safetensors_load(&st, path);
    if (!rc)
        rc = dpt_safetensors_load_arena(st, "params.", vars, s->p, n);
    /* Adam's moments (the RL jobs and these configs use Adam). */
    if (!rc)
        rc = dpt_safetensors_load_arena(st, "optim.m.", vars, s->m, n);
    if (!rc)
        rc = dpt_safetensors_load_arena(st, "optim.v.", vars, s->v, n);
    const char *meta = st ? dpt_safetensors_meta(st, "frozen") : NULL;
    snprintf(s->meta, sizeof s->meta, "%s", meta ? meta : "(none)");
    dpt_safetensors_destroy(st);
    return rc;
}

static void free_state(state_t *s)
{
    free(s->p), free(s->m), free(s->v);
}

static int same(const float *a, const float *b, const dpt_var_t *v)
{
    return memcmp(a + v->offset, b + v->offset, v->count * sizeof(float)) == 0;
}

/* The variables of `list` kept w0 and zero slots in s; every other one
 * moved from w0. Returns the number of frozen variables. */
static size_t check_frozen(const dpt_vartable_t *vars, const char *list, const float *w0,
                           const state_t *s)
{
    unsigned char *mask = calloc(vars->nvars, 1);
    float *zero = calloc(vars->total, sizeof(float));
    size_t n = 0;
    if (!mask || !zero || dpt_vartable_select(vars, list, mask, &n) != 0) {
        CHECK(!"select");
        n = 0;
    }
    for (size_t i = 0; mask && zero && i < vars->nvars; i++) {
        const dpt_var_t *v = &vars->vars[i];
        int kept = same(s->p, w0, v), still = same(s->m, zero, v) && same(s->v, zero, v);
        if (mask[i] ? !(kept && still) : (kept || still)) {
            fprintf(stderr, "frozen = %s: variable %s: weights %s, slots %s\n", list, v->name,
                    kept ? "kept" : "moved", still ? "zero" : "moved");
            CHECK(0);
        }
    }
    free(mask);
    free(zero);
    return n;
}

/* One job: initial weights, `iters` iterations, then the checkpoint. */
static void run_job(const char *what, const char *const *base, size_t nbase, const char *list,
                    const char *want_meta, int iters)
{
    dpt_trainer_t *t;
    dpt_config_t *c;
    REQUIRE_OK(make_trainer(&t, &c, base, nbase, list));
    float *w0 = dpt_test_weights(t, NULL);
    REQUIRE(w0);
    dpt_train_result_t r;
    for (int i = 0; i < iters; i++)
        REQUIRE_OK(dpt_trainer_iterate(t, &r));
    state_t s;
    REQUIRE_OK(save_and_load(t, what, &s));
    size_t n = check_frozen(dpt_trainer_vars(t), list, w0, &s);
    CHECK(n > 0);
    CHECK(strcmp(s.meta, want_meta) == 0);
    printf("%s: frozen = %s keeps %zu variables bitwise (\"%s\"), the others moved\n", what, list,
           n, s.meta);
    free_state(&s);
    free(w0);
    free_trainer(t, c);
}

static void test_supervised_adam_weight_decay(void)
{
    static const char *const base[] = {SUP_BASE};
    run_job("supervised", base, NSETS(base), "2", "2.weight,2.bias", 2);
    static const char *const one[] = {SUP_BASE, "num_devices=1", "towers_mode=replicated"};
    run_job("supervised_replicated", one, NSETS(one), "0.weight,4", "0.weight,4.weight,4.bias", 1);
}

/* SGD with weight decay and no clipping (the ps step that would fuse the
 * update): no slots, the weights alone. */
static void test_supervised_sgd(void)
{
    static const char *const base[] = {SUP_BASE, "optimizer=sgd", "num_devices=1"};
    dpt_trainer_t *t;
    dpt_config_t *c;
    REQUIRE_OK(make_trainer(&t, &c, base, NSETS(base), "0"));
    float *w0 = dpt_test_weights(t, NULL);
    REQUIRE(w0);
    dpt_train_result_t r;
    REQUIRE_OK(dpt_trainer_iterate(t, &r));
    size_t n;
    float *w1 = dpt_test_weights(t, &n);
    REQUIRE(w1);
    const dpt_vartable_t *vars = dpt_trainer_vars(t);
    CHECK(same(w1, w0, &vars->vars[0]) && same(w1, w0, &vars->vars[1]));
    CHECK(!same(w1, w0, &vars->vars[2]) && !same(w1, w0, &vars->vars[5]));
    free(w0), free(w1);
    free_trainer(t, c);
}

static void test_rl_jobs(void)
{
    static const char *const ppo[] = {PPO_BASE};
    run_job("ppo", ppo, NSETS(ppo), "actor.0", "actor.0.weight,actor.0.bias", 2);
    static const char *const ddppo[] = {DDPPO_BASE};
    run_job("ddppo", ddppo, NSETS(ddppo), "critic",
            "critic.0.weight,critic.0.bias,"
            "critic.2.weight,critic.2.bias,critic.4.weight,critic.4.bias",
            2);
    static const char *const appo[] = {APPO_BASE};
    run_job("appo", appo, NSETS(appo), "actor.2.weight", "actor.2.weight", 1);
}

static void test_sync_replicas_job(void)
{
    static const char *const base[] = {SR_BASE};
    run_job("sync_replicas", base, NSETS(base), "0", "0.weight,0.bias", 1);
}

/* Every job refuses an entry that matches nothing, naming it and the
 * model's variables. */
static void test_unknown_entry(void)
{
    static const char *const sup[] = {SUP_BASE}, *const ppo[] = {PPO_BASE};
    static const char *const ddppo[] = {DDPPO_BASE}, *const appo[] = {APPO_BASE};
    static const char *const impala[] = {APPO_BASE, "job=impala"}, *const sr[] = {SR_BASE};
    static const struct {
        const char *const *base;
        size_t n;
        const char *list, *names;
    } cases[] = {
        {sup, NSETS(sup), "2,nope.", "0.weight, 0.bias, 2.weight"},
        {ppo, NSETS(ppo), "actor.0.w", "actor.0.weight, actor.0.bias"},
        {ddppo, NSETS(ddppo), "actor.0.w", "actor.0.weight"},
        {appo, NSETS(appo), "actor.0.w", "actor.0.weight"},
        {impala, NSETS(impala), "actor.0.w", "actor.0.weight"},
        {sr, NSETS(sr), "2,nope.", "0.weight, 0.bias, 2.weight"},
    };
    for (size_t k = 0; k < NSETS(cases); k++) {
        dpt_trainer_t *t = NULL;
        dpt_config_t *c = NULL;
        const char *entry =
            strrchr(cases[k].list, ',') ? strrchr(cases[k].list, ',') + 1 : cases[k].list;
        char needle[64];
        snprintf(needle, sizeof needle, "frozen: \"%s\" matches no variable", entry);
        CHECK_ERR(make_trainer(&t, &c, cases[k].base, cases[k].n, cases[k].list), DPT_EINVAL,
                  needle);
        CHECK(strstr(dpt_last_error(), cases[k].names) != NULL);
        CHECK(t == NULL && c == NULL);
        printf("%s\n", dpt_last_error());
    }
}

/* Restored under another list: the run goes on with the new one (a
 * variable frozen before moves now, a newly frozen one stays at the
 * checkpoint's values). Restored under the same list: bitwise the run that
 * was not stopped. */
static void test_restore_with_another_list(void)
{
    static const char *const base[] = {SUP_BASE};
    char path[512];
    snprintf(path, sizeof path, "%s/sup_one.safetensors", tmpdir);
    dpt_trainer_t *a, *b, *full;
    dpt_config_t *ca, *cb, *cfull;
    dpt_train_result_t r;
    /* The run that is not stopped: two epochs. */
    REQUIRE_OK(make_trainer(&full, &cfull, base, NSETS(base), "2"));
    REQUIRE_OK(dpt_trainer_iterate(full, &r));
    REQUIRE_OK(dpt_trainer_iterate(full, &r));
    float *wfull = dpt_test_weights(full, NULL);
    REQUIRE(wfull);
    /* One epoch and a checkpoint. */
    REQUIRE_OK(make_trainer(&a, &ca, base, NSETS(base), "2"));
    REQUIRE_OK(dpt_trainer_iterate(a, &r));
    REQUIRE_OK(dpt_test_checkpoint(a, path, 1));
    float *w1 = dpt_test_weights(a, NULL);
    REQUIRE(w1);
    const dpt_vartable_t *vars = dpt_trainer_vars(a);
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    /* The same list: bitwise the run that went on. */
    REQUIRE_OK(make_trainer(&b, &cb, base, NSETS(base), "2"));
    REQUIRE_OK(dpt_trainer_restore(b, st));
    REQUIRE_OK(dpt_trainer_iterate(b, &r));
    float *wb = dpt_test_weights(b, NULL);
    REQUIRE(wb);
    CHECK(memcmp(wb, wfull, vars->total * sizeof(float)) == 0);
    free(wb);
    free_trainer(b, cb);
    /* Another list: layer 0 frozen from here on, layer 2 trained again. */
    REQUIRE_OK(make_trainer(&b, &cb, base, NSETS(base), "0"));
    REQUIRE_OK(dpt_trainer_restore(b, st));
    REQUIRE_OK(dpt_trainer_iterate(b, &r));
    state_t s;
    REQUIRE_OK(save_and_load(b, "sup_other", &s));
    const dpt_var_t *l0 = dpt_vartable_find(vars, "0.weight"),
                    *l2 = dpt_vartable_find(vars, "2.weight");
    REQUIRE(l0 && l2);
    CHECK(same(s.p, w1, l0) && !same(s.p, w1, l2));
    CHECK(!same(s.p, wfull, l2));
    CHECK(strcmp(s.meta, "0.weight,0.bias") == 0);
    free_state(&s);
    dpt_safetensors_destroy(st);
    free(w1), free(wfull);
    free_trainer(b, cb);
    free_trainer(a, ca);
    free_trainer(full, cfull);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_frozen") != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_supervised_adam_weight_decay),
        DPT_TEST(test_supervised_sgd),
        DPT_TEST(test_rl_jobs),
        DPT_TEST(test_sync_replicas_job),
        DPT_TEST(test_unknown_entry),
        DPT_TEST(test_restore_with_another_list),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
