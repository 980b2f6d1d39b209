/*
 * The configuration of dpt/train.h: per-job defaults from the one key
 * table, keys that do not apply to a job, files (comments, control
 * characters, directories), overrides, path resolution, text round trips,
 * starter configs and digests; env_config entries.
 */
#define _GNU_SOURCE /* realpath, mkdtemp */
#include "dpt_test.h"
#include "dpt_test_files.h"

#include "dpt/env.h"
#include "dpt/rl.h"
#include "dpt/train.h"
#include "train/train_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static dpt_config_t *make(const char *const *sets, size_t n)
{
    dpt_config_t *c;
    if (dpt_config_create(&c) != 0)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (dpt_config_set(c, sets[i]) != 0) {
            dpt_config_destroy(c);
            return NULL;
        }
    return c;
}

static void write_file(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(text, 1, n, f) == n);
    fclose(f);
}

static void test_job_defaults(void)
{
    const char *ppo[] = {"job=ppo"};
    dpt_config_t *c = make(ppo, 1);
    REQUIRE(c);
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK(dpt_config_job(c) == DPT_JOB_PPO);
    /* CleanRL's settings, not the supervised job's. */
    CHECK(dpt_config_float(c, DPT_CFG_lr) == 0.00025);
    CHECK(dpt_config_float(c, DPT_CFG_grad_clip) == 0.5);
    CHECK(dpt_config_float(c, DPT_CFG_adam_eps) == 1e-5);
    CHECK(dpt_config_int(c, DPT_CFG_num_devices) == 1);
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_lr_schedule), "linear") == 0);
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_normalize_advantages), "minibatch") == 0);
    CHECK(!dpt_config_applies(c, DPT_CFG_hidden) && dpt_config_applies(c, DPT_CFG_policy_hidden));
    dpt_config_destroy(c);

    const char *dd[] = {"job=ddppo"};
    c = make(dd, 1);
    REQUIRE(c);
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK(dpt_config_int(c, DPT_CFG_rollout_fragment_length) == 100);
    CHECK(dpt_config_int(c, DPT_CFG_num_envs_per_worker) == 5);
    CHECK(dpt_config_int(c, DPT_CFG_sgd_minibatch_size) == 50);
    CHECK(dpt_config_int(c, DPT_CFG_num_sgd_iter) == 10);
    CHECK(dpt_config_float(c, DPT_CFG_lr) == 0.00025);
    /* The seed's: each worker standardizes its whole batch. */
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_normalize_advantages), "batch") == 0);
    dpt_config_destroy(c);

    const char *sup[] = {"job=supervised"};
    c = make(sup, 1);
    REQUIRE(c);
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK(dpt_config_float(c, DPT_CFG_lr) == 0.001);
    CHECK(dpt_config_int(c, DPT_CFG_num_devices) == 2);
    CHECK(strcmp(dpt_config_default(DPT_CFG_lr, DPT_JOB_SUPERVISED), "0.001") == 0);
    dpt_config_destroy(c);

    /* A given value wins over the job's default, and a later job change
     * re-derives the defaults of keys that were not given. */
    const char *given[] = {"job=ppo", "lr=0.5"};
    c = make(given, 2);
    REQUIRE(c);
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK(dpt_config_float(c, DPT_CFG_lr) == 0.5);
    REQUIRE_OK(dpt_config_set(c, "job=ddppo"));
    CHECK(!dpt_config_finalized(c));
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK(dpt_config_int(c, DPT_CFG_num_sgd_iter) == 10 && dpt_config_float(c, DPT_CFG_lr) == 0.5);
    dpt_config_destroy(c);
}

static void test_keys_of_other_jobs(void)
{
    const char *a[] = {"job=ppo", "hidden=32"};
    dpt_config_t *c = make(a, 2);
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "key hidden does not apply to job ppo");
    dpt_config_destroy(c);
    const char *b[] = {"job=supervised", "num_workers=2"};
    c = make(b, 2);
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "used by: ddppo");
    dpt_config_destroy(c);
    const char *d[] = {"job=ddppo", "train_batch_size=500"};
    c = make(d, 2);
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "train_batch_size is derived for ddppo");
    dpt_config_destroy(c);
    /* Cross-key rules. */
    const char *e[] = {"job=supervised", "batch_size=33"};
    c = make(e, 2);
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "divisible by num_devices");
    dpt_config_destroy(c);
    const char *f[] = {"job=ppo", "sgd_minibatch_size=4096"};
    c = make(f, 2);
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "sgd_minibatch_size 4096 exceeds the 512 rows");
    dpt_config_destroy(c);
    const char *g[] = {"job=ppo", "policy_hidden=64,0"};
    c = make(g, 2);
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "policy_hidden = \"64,0\"");
    dpt_config_destroy(c);
    const char *h[] = {"job=ppo", "train_batch_size=100"};
    c = make(h, 2);
    REQUIRE(c);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "must equal num_envs_per_worker");
    dpt_config_destroy(c);
    /* A trainer refuses a config that was not finalized. */
    const char *i[] = {"job=ppo"};
    c = make(i, 1);
    REQUIRE(c);
    dpt_trainer_t *t;
    CHECK_ERR(dpt_trainer_create(&t, c, NULL), DPT_EINVAL, "not finalized");
    dpt_config_destroy(c);
}

/* A key that matters only when another key enables it is refused, naming
 * both, when the user set it (not at its default) while that key is off;
 * a run's saved record, which names every key, is not. */
static void test_keys_that_need_another(void)
{
    static const struct {
        const char *sets[3];
        const char *msg;
    } refused[] = {
        {{"job=ppo", "lstm_use_prev_action=true", "use_lstm=false"},
         "lstm_use_prev_action = true is used only with use_lstm = true (use_lstm = false)"},
        {{"job=ddppo", "max_seq_len=8", NULL}, "max_seq_len = 8 is used only with use_lstm = true"},
        {{"job=supervised", "lr_end=0.001", NULL},
         "lr_end = 0.001 is used only with lr_schedule = linear (lr_schedule = constant)"},
        {{"job=sync_replicas", "nesterov=true", "optimizer=adam"},
         "nesterov = true is used only with optimizer = momentum (optimizer = adam)"},
        {{"job=supervised", "optimizer=sgd", "adam_eps=1e-6"},
         "adam_eps = 1e-6 is used only with optimizer = adam or adamw (optimizer = sgd)"},
        {{"job=supervised", "dataset=spirals", "data_dir=/data"},
         "data_dir = /data is used only with dataset = fashion_mnist (dataset = spirals)"},
        {{"job=sync_replicas", "bags_vocab=500", NULL},
         "bags_vocab = 500 is used only with dataset = bags (dataset = fashion_mnist)"},
        {{"job=ppo", "evaluation_episodes=3", NULL},
         "evaluation_episodes = 3 is used only with evaluation_interval > 0"},
        {{"job=supervised", "model=/x.so", "hidden=8"},
         "hidden = 8 sizes the built-in MLP, which model = /x.so replaces"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        dpt_config_t *c = make(refused[i].sets, refused[i].sets[2] ? 3 : 2);
        REQUIRE(c);
        CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, refused[i].msg);
        dpt_config_destroy(c);
    }
    static const char *const accepted[][3] = {
        {"job=ppo", "lstm_use_prev_action=false", "use_lstm=false"}, /* the default */
        {"job=ppo", "use_lstm=true", "lstm_cell_size=8"},
        {"job=supervised", "lr_schedule=linear", "lr_end=0.001"},
        {"job=supervised", "dataset=spirals", "data_dir=/usr/share/datasets/fashion-mnist"},
        {"job=ppo", "evaluation_interval=2", "evaluation_episodes=3"},
    };
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        dpt_config_t *c = make(accepted[i], 3);
        REQUIRE(c);
        CHECK_OK(dpt_config_finalize(c));
        dpt_config_destroy(c);
    }
    /* A run's record (a checkpoint's config) is not refused; what the user
     * sets over it is. */
    dpt_config_t *c;
    REQUIRE_OK(dpt_config_create(&c));
    REQUIRE_OK(dpt__config_load_text(c, "job = ppo\nuse_lstm = false\nlstm_cell_size = 8\n", "ck"));
    CHECK_OK(dpt_config_finalize(c));
    REQUIRE_OK(dpt_config_set(c, "lstm_cell_size=16"));
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "lstm_cell_size = 16 is used only with");
    dpt_config_destroy(c);
    /* A starter config read as the user's file: every key at its default. */
    char dir[PATH_MAX], path[PATH_MAX + 16];
    REQUIRE(dpt_test_mkdtemp(dir, sizeof dir, "cfg_need") == 0);
    snprintf(path, sizeof path, "%s/s.conf", dir);
    for (int j = 0; j < DPT_JOB_COUNT; j++) {
        size_t n = dpt_config_format_starter((dpt_job_t)j, NULL, 0);
        char *text = malloc(n + 1);
        REQUIRE(text);
        dpt_config_format_starter((dpt_job_t)j, text, n + 1);
        write_file(path, text, n);
        free(text);
        REQUIRE_OK(dpt_config_create(&c));
        CHECK_OK(dpt_config_load(c, path));
        CHECK_OK(dpt_config_finalize(c));
        dpt_config_destroy(c);
    }
    dpt_test_rm_tree(dir);
}

static void test_values(void)
{
    dpt_config_t *c;
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_ERR(dpt_config_set(c, "lr=abc"), DPT_EINVAL, "lr expects a number");
    CHECK_ERR(dpt_config_set(c, "gamma=1.5"), DPT_EINVAL, "out of range");
    CHECK_ERR(dpt_config_set(c, "seed=-1"), DPT_EINVAL, "out of range");
    CHECK_ERR(dpt_config_set(c, "epochs=1e3"), DPT_EINVAL, "expects an integer");
    CHECK_ERR(dpt_config_set(c, "shuffle=maybe"), DPT_EINVAL, "expects true or false");
    CHECK_ERR(dpt_config_set(c, "towers_mode=mirror"), DPT_EINVAL, "ps|replicated|async");
    CHECK_ERR(dpt_config_set(c, "learning_rate=1"), DPT_EINVAL, "did you mean \"lr\"");
    CHECK_ERR(dpt_config_set(c, "novalue"), DPT_EINVAL, "expected \"key = value\"");
    CHECK_ERR(dpt_config_set(c, "=3"), DPT_EINVAL, "missing key");
    CHECK_ERR(dpt_config_set(c, "env=Cart\x01Pole"), DPT_EINVAL, "control character");
    char big[DPT_CONFIG_STR_MAX + 16];
    memset(big, 'a', sizeof big);
    memcpy(big, "env=", 4);
    big[sizeof big - 1] = '\0';
    CHECK_ERR(dpt_config_set(c, big), DPT_EINVAL, "longer than");
    REQUIRE_OK(dpt_config_set(c, "  shuffle =  no  "));
    CHECK(dpt_config_int(c, DPT_CFG_shuffle) == 0 && dpt_config_given(c, DPT_CFG_shuffle));
    CHECK(!dpt_config_given(c, DPT_CFG_lr));
    dpt_config_destroy(c);
}

static void test_files(void)
{
    char dir[] = "/tmp/dpt_cfg_XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[PATH_MAX], sub[PATH_MAX];
    dpt_config_t *c;

    /* Comments may be long and hold anything; keys may not repeat. */
    snprintf(path, sizeof path, "%s/a.conf", dir);
    char text[4000];
    size_t n = (size_t)snprintf(text, sizeof text, "job = ppo  # trailing\n# ");
    memset(text + n, 'x', 3000);
    n += 3000;
    n += (size_t)snprintf(text + n, sizeof text - n, "\n\n  gamma = 0.9\n");
    write_file(path, text, n);
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_OK(dpt_config_load(c, path));
    CHECK(dpt_config_float(c, DPT_CFG_gamma) == 0.9);
    CHECK(strcmp(dpt_config_source(c), path) == 0);
    dpt_config_destroy(c);

    write_file(path, "lr = 1\nlr = 2\n", 14);
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_ERR(dpt_config_load(c, path), DPT_EINVAL, "a.conf:2: duplicate key \"lr\"");
    dpt_config_destroy(c);

    write_file(path, "job = ppo\nenv = a\0b\n", 20);
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_ERR(dpt_config_load(c, path), DPT_EINVAL,
              "a.conf:2: byte 8 is a control character (0x00)");
    dpt_config_destroy(c);

    REQUIRE_OK(dpt_config_create(&c));
    CHECK_ERR(dpt_config_load(c, dir), DPT_EINVAL, "not a regular file (a directory)");
    snprintf(sub, sizeof sub, "%s/none.conf", dir);
    CHECK_ERR(dpt_config_load(c, sub), DPT_ENOENT, "none.conf: cannot open");
    dpt_config_destroy(c);

    /* Paths from a file resolve against the file's directory; from --set,
     * against the working directory. */
    snprintf(sub, sizeof sub, "%s/sub", dir);
    REQUIRE(mkdir(sub, 0777) == 0);
    snprintf(path, sizeof path, "%s/sub/b.conf", dir);
    const char *b = "job = supervised\ndataset = csv\ntrain_csv = ../train.csv\ntest_csv = t.csv\n";
    write_file(path, b, strlen(b));
    REQUIRE_OK(dpt_config_create(&c));
    REQUIRE_OK(dpt_config_load(c, path));
    REQUIRE_OK(dpt_config_finalize(c));
    char want[PATH_MAX + 32], *real = realpath(dir, NULL);
    REQUIRE(real);
    snprintf(want, sizeof want, "%s/train.csv", real);
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_train_csv), want) == 0);
    snprintf(want, sizeof want, "%s/sub/t.csv", real);
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_test_csv), want) == 0);
    REQUIRE_OK(dpt_config_set(c, "test_csv=rel.csv"));
    REQUIRE_OK(dpt_config_finalize(c));
    char cwd[PATH_MAX];
    REQUIRE(getcwd(cwd, sizeof cwd));
    char *rcwd = realpath(cwd, NULL);
    REQUIRE(rcwd);
    snprintf(want, sizeof want, "%s/rel.csv", rcwd);
    CHECK(strcmp(dpt_config_str(c, DPT_CFG_test_csv), want) == 0);
    free(rcwd);

    /* The saved text lists the job's keys only and reads back equal. */
    snprintf(path, sizeof path, "%s/saved.conf", dir);
    REQUIRE_OK(dpt_config_save(c, path));
    dpt_config_t *d;
    REQUIRE_OK(dpt_config_create(&d));
    REQUIRE_OK(dpt_config_load(d, path));
    REQUIRE_OK(dpt_config_finalize(d));
    CHECK(dpt_config_digest(c, 0) == dpt_config_digest(d, 0));
    size_t len = dpt_config_format(c, NULL, 0);
    char *t = malloc(len + 1);
    REQUIRE(t);
    CHECK(dpt_config_format(c, t, len + 1) == len && strlen(t) == len);
    CHECK(strstr(t, "\nhidden = ") && !strstr(t, "\npolicy_hidden") && !strstr(t, "\nenv ="));
    /* snprintf-style truncation. */
    char small[16];
    CHECK(dpt_config_format(c, small, sizeof small) == len && strlen(small) == 15);
    free(t);
    dpt_config_destroy(d);
    dpt_config_destroy(c);
    free(real);
    dpt_test_rm_tree(dir);
}

static void test_starter_and_digest(void)
{
    for (int j = 0; j < DPT_JOB_COUNT; j++) {
        size_t n = dpt_config_format_starter((dpt_job_t)j, NULL, 0);
        char *text = malloc(n + 1);
        REQUIRE(text);
        dpt_config_format_starter((dpt_job_t)j, text, n + 1);
        /* A starter config loads and finalizes as it is. */
        dpt_config_t *c;
        REQUIRE_OK(dpt_config_create(&c));
        CHECK_OK(dpt__config_load_text(c, text, "starter"));
        CHECK_OK(dpt_config_finalize(c));
        CHECK(dpt_config_job(c) == (dpt_job_t)j);
        dpt_config_destroy(c);
        free(text);
    }
    const char *a[] = {"job=ppo"}, *b[] = {"job=ppo", "seed=2"}, *d[] = {"job=ppo", "stop_iters=5"};
    dpt_config_t *x = make(a, 1), *y = make(b, 2), *z = make(d, 2);
    REQUIRE(x && y && z);
    REQUIRE_OK(dpt_config_finalize(x));
    REQUIRE_OK(dpt_config_finalize(y));
    REQUIRE_OK(dpt_config_finalize(z));
    CHECK(dpt_config_digest(x, 0) != dpt_config_digest(y, 0));
    CHECK(dpt_config_key_hash(x, DPT_CFG_seed) != dpt_config_key_hash(y, DPT_CFG_seed));
    CHECK(dpt_config_key_hash(x, DPT_CFG_lr) == dpt_config_key_hash(y, DPT_CFG_lr));
    CHECK(dpt_config_key_hash(x, DPT_CFG_hidden) == 0); /* not a ppo key */
    /* Bookkeeping keys are left out when asked. */
    CHECK(dpt_config_digest(x, 0) != dpt_config_digest(z, 0));
    CHECK(dpt_config_digest(x, DPT_CFG_BOOKKEEPING) == dpt_config_digest(z, DPT_CFG_BOOKKEEPING));
    /* Overrides copy only the given keys. */
    REQUIRE_OK(dpt__config_apply_overrides(x, z));
    REQUIRE_OK(dpt_config_finalize(x));
    CHECK(dpt_config_int(x, DPT_CFG_stop_iters) == 5 && dpt_config_int(x, DPT_CFG_seed) == 1);
    dpt_config_destroy(x);
    dpt_config_destroy(y);
    dpt_config_destroy(z);
    dpt_job_t job;
    CHECK_OK(dpt_job_parse("ddppo", &job));
    CHECK(job == DPT_JOB_DDPPO && strcmp(dpt_job_name(job), "ddppo") == 0);
    CHECK_ERR(dpt_job_parse("sarsa", &job), DPT_EINVAL, "unknown job \"sarsa\"");
    CHECK(strcmp(dpt_job_name((dpt_job_t)99), "unknown") == 0);
    CHECK(dpt_config_key_find("lr") == DPT_CFG_lr && dpt_config_key_find("nope") == -1);
    CHECK(dpt_config_key_info((dpt_config_key_t)DPT_CFG_COUNT) == NULL);
    CHECK(dpt_trainer_ops((dpt_job_t)99) == NULL);
    for (int j = 0; j < DPT_JOB_COUNT; j++)
        CHECK(dpt_trainer_ops((dpt_job_t)j) && dpt_trainer_ops((dpt_job_t)j)->job == (dpt_job_t)j);
}

/* The text of c (caller frees). */
static char *format(const dpt_config_t *c)
{
    size_t n = dpt_config_format(c, NULL, 0);
    char *text = malloc(n + 1);
    if (text)
        dpt_config_format(c, text, n + 1);
    return text;
}

/* env_config.NAME = value: the form is checked when read; names and values
 * against the env when it is resolved, which fills in the defaults; the
 * entries are in the text, the digest, clones and overrides. */
static void test_env_config(void)
{
    const char *sets[] = {"job=ppo", "env=RepeatPrevious-v0", "env_config.k = 3"};
    dpt_config_t *c = make(sets, 3), *d;
    REQUIRE(c != NULL);
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK(dpt_config_env_count(c) == 1 && strcmp(dpt_config_env_name(c, 0), "k") == 0);
    CHECK(strcmp(dpt_config_env_value(c, 0), "3") == 0 && dpt_config_env_name(c, 1) == NULL);
    CHECK(dpt_config_env_value(c, 1) == NULL && dpt_config_env_get(c, "num_tokens") == NULL);
    CHECK(strcmp(dpt_config_env_get(c, "k"), "3") == 0);

    /* The form: a name of letters, digits and '_', a value as for a string. */
    CHECK_ERR(dpt_config_set(c, "env_config.=3"), DPT_EINVAL,
              "--set env_config.=3: \"env_config.\": after env_config. comes a parameter name");
    CHECK_ERR(dpt_config_set(c, "env_config.a.b=3"), DPT_EINVAL, "1..63 letters, digits or '_'");
    CHECK_ERR(dpt_config_set(c, "env_config.k=1#2"), DPT_EINVAL, "env_config.k contains '#'");
    char big[1100] = "env_config.k=";
    memset(big + 13, '7', 1030);
    big[1043] = '\0';
    CHECK_ERR(dpt_config_set(c, big), DPT_EINVAL, "value of env_config.k is longer than 1023");
    char longname[100] = "env_config.";
    memset(longname + 11, 'n', 64);
    memcpy(longname + 75, "=1", 3);
    CHECK_ERR(dpt_config_set(c, longname), DPT_EINVAL, "after env_config. comes a parameter name");
    CHECK(dpt_config_finalized(c)); /* refused sets change nothing */

    /* Resolving fills in the defaults and keeps the config finalized. */
    uint64_t before = dpt_config_digest(c, 0);
    REQUIRE_OK(dpt__config_resolve_env(c));
    CHECK(dpt_config_finalized(c) && dpt_config_env_count(c) == 2);
    CHECK(strcmp(dpt_config_env_get(c, "num_tokens"), "2") == 0);
    CHECK(strcmp(dpt_config_env_get(c, "k"), "3") == 0);
    CHECK(dpt_config_digest(c, 0) != before);
    char *text = format(c);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\nenv = RepeatPrevious-v0\nenv_config.k = 3\nenv_config.num_tokens = 2\n"));
    /* The text loads back to the same digest (what a resume relies on). */
    REQUIRE_OK(dpt_config_create(&d));
    CHECK_OK(dpt__config_load_text(d, text, "saved.conf"));
    CHECK_OK(dpt_config_finalize(d));
    CHECK(dpt_config_digest(d, 0) == dpt_config_digest(c, 0));
    CHECK(dpt__config_env_hash(d) == dpt__config_env_hash(c) && dpt__config_env_hash(c) != 0);
    dpt_config_destroy(d);
    free(text);
    /* Another value, another digest; the table's keys hash as before. */
    d = make(sets, 3);
    REQUIRE(d != NULL);
    REQUIRE_OK(dpt_config_set(d, "env_config.k=4"));
    REQUIRE_OK(dpt_config_set(d, "env_config.num_tokens=2"));
    REQUIRE_OK(dpt_config_finalize(d));
    CHECK(dpt_config_digest(d, 0) != dpt_config_digest(c, 0));
    unsigned skip = DPT_CFG_RESUMABLE | DPT_CFG_BOOKKEEPING; /* env_config is neither */
    CHECK(dpt_config_digest(d, skip) != dpt_config_digest(c, skip));
    CHECK(dpt_config_key_hash(d, DPT_CFG_env) == dpt_config_key_hash(c, DPT_CFG_env));
    dpt_config_destroy(d);
    /* A clone owns its entries. */
    REQUIRE_OK(dpt_config_clone(&d, c));
    dpt_config_destroy(c);
    CHECK(dpt_config_env_count(d) == 2 && strcmp(dpt_config_env_get(d, "k"), "3") == 0);

    /* Another env drops the defaults filled in for the first; what was
     * given stays, and is then checked against the new env. */
    REQUIRE_OK(dpt_config_set(d, "env=CartPole-v1"));
    CHECK(dpt_config_env_count(d) == 1);
    REQUIRE_OK(dpt_config_finalize(d));
    CHECK_ERR(dpt__config_resolve_env(d), DPT_EINVAL,
              "--set env_config.k = 3: env_config.k: env \"CartPole-v1\" has no such parameter "
              "(it takes no parameters)");
    dpt_config_destroy(d);

    /* Unknown names, bad types and ranges: the key, the env and the
     * problem, where it was given. */
    struct {
        const char *set, *err;
    } bad[] = {
        {"env_config.kk=1", "--set env_config.kk=1: env_config.kk: env \"RepeatPrevious-v0\" has "
                            "no such parameter (its parameters: num_tokens, k)"},
        {"env_config.k=two", "--set env_config.k=two: env_config.k expects an integer, got "
                             "\"two\" (env \"RepeatPrevious-v0\")"},
        {"env_config.k=100", "--set env_config.k=100: env_config.k = 100 is out of range [0, 99] "
                             "(env \"RepeatPrevious-v0\")"},
        {"env_config.num_tokens=1", "env_config.num_tokens = 1 is out of range [2, 1024]"},
        {"env_config.k=", "env_config.k expects an integer, got \"\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = make(sets, 2);
        REQUIRE(c != NULL);
        REQUIRE_OK(dpt_config_set(c, bad[i].set));
        REQUIRE_OK(dpt_config_finalize(c)); /* the form is fine */
        CHECK_ERR(dpt__config_resolve_env(c), DPT_EINVAL, bad[i].err);
        dpt_trainer_t *t = (dpt_trainer_t *)&t;
        CHECK_ERR(dpt_trainer_create(&t, c, NULL), DPT_EINVAL, bad[i].err);
        CHECK(t == NULL);
        dpt_config_destroy(c);
    }
    /* An unknown env is reported first. */
    const char *noenv[] = {"job=ddppo", "env=NoSuchEnv-v0", "env_config.k=1"};
    c = make(noenv, 3);
    REQUIRE(c != NULL);
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK_ERR(dpt__config_resolve_env(c), DPT_EINVAL, "env = NoSuchEnv-v0: unknown env");
    dpt_config_destroy(c);

    /* In a file: duplicates are refused, and errors name the line. */
    char dir[] = "/tmp/dpt_envcfg_XXXXXX", path[PATH_MAX];
    REQUIRE(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/e.conf", dir);
    const char dup[] = "job = ppo\nenv_config.k = 1\nenv_config.k = 2\n";
    write_file(path, dup, sizeof dup - 1);
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_ERR(dpt_config_load(c, path), DPT_EINVAL, "e.conf:3: duplicate key \"env_config.k\"");
    dpt_config_destroy(c);
    const char one[] = "job = ppo\nenv = RepeatPrevious-v0\n\nenv_config.num_tokens = 1.5 # x\n";
    write_file(path, one, sizeof one - 1);
    REQUIRE_OK(dpt_config_create(&c));
    REQUIRE_OK(dpt_config_load(c, path));
    REQUIRE_OK(dpt_config_set(c, "env_config.k=1")); /* --set after the file */
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK_ERR(dpt__config_resolve_env(c), DPT_EINVAL,
              "e.conf:4: env_config.num_tokens expects an integer, got \"1.5\"");
    /* A --set replaces a value from the file. */
    REQUIRE_OK(dpt_config_set(c, "env_config.num_tokens=3"));
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK_OK(dpt__config_resolve_env(c));
    CHECK(strcmp(dpt_config_env_get(c, "num_tokens"), "3") == 0);
    dpt_config_destroy(c);
    dpt_test_rm_tree(dir);

    /* A job without an env refuses the keys. */
    const char *sup[] = {"job=supervised", "env_config.k=1"};
    c = make(sup, 2);
    REQUIRE(c != NULL);
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL,
              "key env_config.k does not apply to job supervised (it is used by: ppo, ddppo, appo, "
              "impala)");
    CHECK(dpt__config_env_hash(c) == 0);
    dpt_config_destroy(c);

    /* Overrides carry the given entries. */
    const char *o[] = {"env_config.num_tokens=4"};
    c = make(sets, 3);
    d = make(o, 1);
    REQUIRE(c && d);
    REQUIRE_OK(dpt__config_apply_overrides(c, d));
    REQUIRE_OK(dpt_config_finalize(c));
    CHECK(strcmp(dpt_config_env_get(c, "num_tokens"), "4") == 0);
    CHECK(strcmp(dpt_config_env_get(c, "k"), "3") == 0);
    dpt_config_destroy(d);

    /* A trainer's env gets the values: 4 tokens, 4 policy inputs. */
    dpt_trainer_t *t;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    const dpt_config_t *tc = dpt_trainer_config(t);
    CHECK(dpt_config_env_count(tc) == 2 && strcmp(dpt_config_env_get(tc, "num_tokens"), "4") == 0);
    const char *names[] = {"num_tokens"}, *values[] = {"4"};
    dpt_env_class_t *env;
    REQUIRE_OK(dpt_env_class_create(&env, dpt_env_find("RepeatPrevious-v0"), names, values, 1));
    size_t hidden[2] = {64, 64};
    dpt_policy_t *p;
    REQUIRE_OK(dpt_policy_create(&p, env, hidden, 2, 1));
    CHECK(dpt_trainer_vars(t)->total == dpt_policy_vars(p)->total);
    dpt_policy_destroy(p);
    dpt_env_class_destroy(env);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

static void test_atomic_file(void)
{
    char dir[] = "/tmp/dpt_atomic_XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[PATH_MAX], bad[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/f.txt", dir);
    REQUIRE_OK(dpt__write_file_atomic(path, "one", 3));
    REQUIRE_OK(dpt__write_file_atomic(path, "two!", 4));
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    char buf[8] = {0};
    CHECK(fread(buf, 1, sizeof buf, f) == 4 && strcmp(buf, "two!") == 0);
    fclose(f);
    snprintf(bad, sizeof bad, "%s/no/such/dir/f.txt", dir);
    CHECK_ERR(dpt__write_file_atomic(bad, "x", 1), DPT_EIO, "no/such/dir/f.txt");
    /* Leftover temporaries are found and removed; other files stay. */
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/f.txt.tmp-123", dir);
    write_file(tmp, "x", 1);
    CHECK(dpt__remove_temporaries(dir) == 1);
    CHECK(access(tmp, F_OK) != 0 && access(path, F_OK) == 0);
    snprintf(bad, sizeof bad, "%s/a/b/c", dir);
    CHECK_OK(dpt__mkdirs(bad));
    CHECK_ERR(dpt__mkdirs(""), DPT_EINVAL, "empty directory name");
    dpt_test_rm_tree(dir);
}

/* Found by fuzz/fuzz_config: a value with '#' given by dpt_config_set was
 * accepted, but the text dpt_config_format writes (the config of a run
 * directory and of a checkpoint) then read it as a comment, so the reloaded
 * config differed. Replays the reduced input (its --set lines), and checks
 * that what is accepted comes back with the same digest. */
static void test_fuzz_regressions(void)
{
    static const char *const lines[] = {"job = ppo", "env = ../build/e#x", "seed = 1"};
    dpt_config_t *c, *r;
    REQUIRE_OK(dpt_config_create(&c));
    REQUIRE_OK(dpt_config_set(c, lines[0]));
    CHECK_ERR(dpt_config_set(c, lines[1]), DPT_EINVAL, "contains '#'");
    CHECK_ERR(dpt_config_set(c, "output_dir=runs/#1"), DPT_EINVAL, "starts a comment");
    REQUIRE_OK(dpt_config_set(c, lines[2]));
    /* The second input: "env = ../m //" resolved to ".../m " (a trailing
     * blank the reader trims). */
    REQUIRE_OK(dpt_config_set(c, "env = ../m //"));
    CHECK_ERR(dpt_config_finalize(c), DPT_EINVAL, "ends in a blank");
    REQUIRE_OK(dpt_config_set(c, "env = ../build/examples/libcorridor_env.so"));
    REQUIRE_OK(dpt_config_finalize(c));
    size_t n = dpt_config_format(c, NULL, 0);
    char *text = malloc(n + 1);
    REQUIRE(text != NULL);
    CHECK(dpt_config_format(c, text, n + 1) == n);
    REQUIRE_OK(dpt_config_create(&r));
    CHECK_OK(dpt__config_load_text(r, text, "roundtrip"));
    CHECK_OK(dpt_config_finalize(r));
    CHECK(dpt_config_digest(r, 0) == dpt_config_digest(c, 0));
    CHECK(strcmp(dpt_config_str(r, DPT_CFG_env), dpt_config_str(c, DPT_CFG_env)) == 0);
    dpt_config_destroy(r);
    dpt_config_destroy(c);
    free(text);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_job_defaults),
        DPT_TEST(test_keys_of_other_jobs),
        DPT_TEST(test_values),
        DPT_TEST(test_files),
        DPT_TEST(test_starter_and_digest),
        DPT_TEST(test_env_config),
        DPT_TEST(test_atomic_file),
        DPT_TEST(test_fuzz_regressions),
        DPT_TEST(test_keys_that_need_another),
    };
    return DPT_TEST_RUN(cases);
}
