/*
 * trainers (dpt/train.h, job = ppo and job = ddppo): PPO learns CartPole,
 * repeats bitwise, resumes bitwise from a checkpoint (weights and the next
 * result's metrics), runs more than 4096 minibatches an iteration, and
 * normalizes advantages per minibatch; DD-PPO with 2 worker threads
 * standardizes each worker's batch by default, resumes bitwise and runs a
 * batch that is not a multiple of the minibatch (the configuration that
 * once overflowed its buffers); checkpoints describe the
 * model and evaluate without a trainer; a restore that one worker refuses
 * changes no worker; config and create errors.
 * Lower-level DD-PPO hooks (src/rl/rl_trainers.h): workers keep identical
 * weights and repeat bitwise, straggler preemption with a slow worker, the
 * per-worker batch-size rule.
 */
#include "dpt_test.h"
#include "dpt_test_train.h"

#include "dpt/checkpoint.h"
#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt/train.h"
#include "rl/rl_trainers.h"
#include "train/rl_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

static void tmp_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

/* A finalized config of `job` with the given overrides. */
static int make_cfg(dpt_config_t **out, const char *job, const char *const *sets, size_t n)
{
    char line[128];
    snprintf(line, sizeof line, "job=%s", job);
    const char *const base[] = {line};
    return dpt_test_config(out, base, 1, sets, n);
}

#define NSETS(a) (sizeof(a) / sizeof((a)[0]))

static int same_results(const dpt_train_result_t *a, const dpt_train_result_t *b)
{
    return a->iteration == b->iteration && a->timesteps_total == b->timesteps_total &&
           a->nmetrics == b->nmetrics && a->episodes_in_window == b->episodes_in_window &&
           memcmp(&a->reward_mean, &b->reward_mean, sizeof a->reward_mean) == 0 &&
           dpt_test_same_metrics(a, b);
}

/* ---- PPO ------------------------------------------------------------------------ */

static void test_ppo_learns_cartpole(void)
{
    static const char *const sets[] = {"env=CartPole-v1", "total_timesteps=40960"};
    dpt_config_t *c;
    REQUIRE_OK(make_cfg(&c, "ppo", sets, NSETS(sets)));
    dpt_trainer_t *t;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t first, r;
    REQUIRE_OK(dpt_trainer_iterate(t, &first));
    CHECK(!first.finished && first.iteration == 1 && first.timesteps_total == 512);
    do
        REQUIRE_OK(dpt_trainer_iterate(t, &r));
    while (!r.finished);
    printf("ppo: return %.1f after 1 iteration, %.1f after %llu steps\n", first.reward_mean,
           r.reward_mean, (unsigned long long)r.timesteps_total);
    printf("ppo: %s\n", r.line);
    /* A random policy averages ~22; CleanRL's settings pass 100 well before
     * 40k steps. */
    CHECK(first.reward_mean < 40.0);
    CHECK(r.reward_mean > 100.0);
    CHECK(r.iteration == 80 && r.timesteps_total == 40960 && r.progress == 1.0);
    CHECK(r.episodes_in_window == 100);
    CHECK(dpt_train_result_get(&r, "timesteps_this_iter") == 512.0);
    double lr = dpt_train_result_get(&r, "info/learner/default_policy/cur_lr");
    CHECK(lr < 0.00025 && lr > 0.0);
    double ent = dpt_train_result_get(&r, "info/learner/default_policy/entropy");
    CHECK(ent > 0.0 && ent < 0.7);
    /* The 0.1 command's names and order, without time_total_s (the run's),
     * then RLlib's step counters. */
    static const char *const names[] = {"training_iteration",
                                        "timesteps_total",
                                        "timesteps_this_iter",
                                        "episodes_total",
                                        "episodes_this_iter",
                                        "episode_reward_mean",
                                        "episode_reward_min",
                                        "episode_reward_max",
                                        "episode_len_mean",
                                        "episode_reward_mean_last20",
                                        "env_steps_per_s",
                                        "time_this_iter_s",
                                        "info/learner/default_policy/cur_lr",
                                        "info/learner/default_policy/policy_loss",
                                        "info/learner/default_policy/vf_loss",
                                        "info/learner/default_policy/entropy",
                                        "info/learner/default_policy/kl",
                                        "info/learner/default_policy/clip_fraction",
                                        "info/learner/default_policy/grad_gnorm",
                                        "info/learner/default_policy/vf_explained_var",
                                        "timing_breakdown/sample_time_ms",
                                        "timing_breakdown/learn_time_ms",
                                        "num_env_steps_sampled",
                                        "num_env_steps_trained",
                                        "num_agent_steps_sampled",
                                        "num_agent_steps_trained"};
    CHECK(r.nmetrics == NSETS(names));
    for (size_t i = 0; i < r.nmetrics && i < NSETS(names); i++)
        CHECK(strcmp(r.metrics[i].name, names[i]) == 0);
    CHECK(strncmp(r.line, "iter 80  steps 40960/40960  return ", 35) == 0);
    CHECK(strstr(r.line, "steps/s") != NULL);
    dpt_eval_result_t ev;
    REQUIRE_OK(dpt_trainer_evaluate(t, 5, 7, &ev));
    printf("ppo: greedy evaluation, 5 episodes: mean return %.1f\n", ev.mean_return);
    CHECK(ev.count == 5 && ev.mean_return > 100.0 && ev.mean_length == ev.mean_return);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

static void test_ppo_config_and_create_errors(void)
{
    dpt_config_t *c;
    static const char *const big_mb[] = {"sgd_minibatch_size=1024"};
    CHECK_ERR(make_cfg(&c, "ppo", big_mb, 1), DPT_EINVAL, "sgd_minibatch_size 1024");
    static const char *const three[] = {"num_devices=3"};
    CHECK_ERR(make_cfg(&c, "ppo", three, 1), DPT_EINVAL, "divisible by num_devices 3");
    static const char *const norm[] = {"normalize_advantages=sometimes"};
    CHECK_ERR(make_cfg(&c, "ppo", norm, 1), DPT_EINVAL, "minibatch|batch|off");
    static const char *const five[] = {"policy_hidden=8,8,8,8,8"};
    CHECK_ERR(make_cfg(&c, "ppo", five, 1), DPT_EINVAL, "more than 4 layers");
    dpt_trainer_t *t;
    static const char *const noenv[] = {"env=NoSuchEnv-v0"};
    REQUIRE_OK(make_cfg(&c, "ppo", noenv, 1));
    CHECK_ERR(dpt_trainer_create(&t, c, NULL), DPT_EINVAL, "env = NoSuchEnv-v0");
    dpt_config_destroy(c);
    static const char *const noplugin[] = {"env=/nonexistent/libnoenv.so"};
    REQUIRE_OK(make_cfg(&c, "ddppo", noplugin, 1));
    CHECK_ERR(dpt_trainer_create(&t, c, NULL), DPT_EINVAL, "env plug-in /nonexistent/libnoenv.so");
    dpt_config_destroy(c);
    /* PPO refuses a world of several processes, which it learns from the
     * communicator it is handed (here one of two participants; PPO refuses
     * before any collective). */
    REQUIRE_OK(make_cfg(&c, "ppo", NULL, 0));
    dpt_comm_threads_group_t *g = NULL;
    dpt_comm_t *two = NULL;
    REQUIRE_OK(dpt_comm_threads_group_create(&g, 2, NULL));
    REQUIRE_OK(dpt_comm_threads_join(g, 0, &two));
    dpt_trainer_env_t env = {.use_mpi = 1, .comm = two};
    CHECK_ERR(dpt_trainer_create(&t, c, &env), DPT_EINVAL, "ppo does not run under mpirun");
    /* use_mpi without a communicator is refused for every job. */
    env.comm = NULL;
    CHECK_ERR(dpt_trainer_create(&t, c, &env), DPT_EINVAL, "needs the ranks' communicator");
    dpt_comm_destroy(two);
    dpt_comm_threads_group_destroy(g);
    dpt_config_destroy(c);
}

/* Two runs of the same config hold the same weights, bitwise (2 towers). */
static void test_ppo_bitwise_repeatable(void)
{
    static const char *const sets[] = {"num_devices=2", "total_timesteps=5120"};
    dpt_config_t *c;
    REQUIRE_OK(make_cfg(&c, "ppo", sets, NSETS(sets)));
    float *w[2] = {NULL, NULL};
    size_t n = 0;
    dpt_train_result_t r[2];
    for (int k = 0; k < 2; k++) {
        dpt_trainer_t *t;
        REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
        for (int i = 0; i < 5; i++)
            CHECK_OK(dpt_trainer_iterate(t, &r[k]));
        w[k] = dpt_test_weights(t, &n);
        dpt_trainer_destroy(t);
    }
    REQUIRE(w[0] && w[1]);
    CHECK(memcmp(w[0], w[1], n * sizeof(float)) == 0);
    CHECK(same_results(&r[0], &r[1]));
    free(w[0]);
    free(w[1]);
    dpt_config_destroy(c);
}

/* N iterations, checkpoint, M more; a fresh trainer restored from the
 * checkpoint runs the same M iterations: the weights and the last result
 * must equal the uninterrupted run's, bitwise. */
static void resume_bitwise(const char *job, const char *const *sets, size_t nsets, int N, int M,
                           const char *file)
{
    dpt_config_t *c;
    char path[512];
    tmp_path(path, sizeof path, file);
    REQUIRE_OK(make_cfg(&c, job, sets, nsets));
    dpt_trainer_t *a = NULL, *b = NULL;
    dpt_safetensors_t *st = NULL;
    float *wa = NULL, *wb = NULL;
    size_t n = 0, nb = 0;
    dpt_train_result_t ra, rb;
    REQUIRE_OK(dpt_trainer_create(&a, c, NULL));
    for (int i = 0; i < N; i++)
        REQUIRE_OK(dpt_trainer_iterate(a, &ra));
    REQUIRE_OK(dpt_test_checkpoint(a, path, 1));
    for (int i = 0; i < M; i++)
        REQUIRE_OK(dpt_trainer_iterate(a, &ra));
    wa = dpt_test_weights(a, &n);
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    REQUIRE_OK(dpt_trainer_create(&b, c, NULL));
    REQUIRE_OK(dpt_trainer_restore(b, st));
    for (int i = 0; i < M; i++)
        REQUIRE_OK(dpt_trainer_iterate(b, &rb));
    wb = dpt_test_weights(b, &nb);
    REQUIRE(wa && wb && n == nb);
    CHECK(memcmp(wa, wb, n * sizeof(float)) == 0);
    CHECK(ra.iteration == (uint64_t)(N + M) && rb.iteration == ra.iteration);
    CHECK(same_results(&ra, &rb));
    printf("%s: resumed after %d iterations; after %d more the weights and metrics match "
           "(return %.2f)\n",
           job, N, M, rb.reward_mean);
    dpt_safetensors_destroy(st);
    dpt_trainer_destroy(a);
    dpt_trainer_destroy(b);
    free(wa);
    free(wb);
    dpt_config_destroy(c);
    remove(path);
}

static void test_ppo_resume_bitwise(void)
{
    static const char *const sets[] = {"total_timesteps=10240"};
    resume_bitwise("ppo", sets, NSETS(sets), 4, 4, "ppo.safetensors");
}

/* Several devices: each steps its own envs (rl/rollout.h); still bitwise
 * on resume, and with ranges of different sizes (4 envs on 3 devices)
 * two runs agree. */
static void test_ppo_devices_resume_bitwise(void)
{
    static const char *const sets[] = {"num_devices=2", "total_timesteps=10240"};
    resume_bitwise("ppo", sets, NSETS(sets), 3, 3, "ppo2.safetensors");
    static const char *const three[] = {"num_devices=3", "sgd_minibatch_size=96",
                                        "total_timesteps=10240"};
    resume_bitwise("ppo", three, NSETS(three), 2, 2, "ppo3.safetensors");
}

static void test_ddppo_resume_bitwise(void)
{
    static const char *const sets[] = {
        "num_workers=2",         "num_envs_per_worker=2", "rollout_fragment_length=64",
        "sgd_minibatch_size=32", "num_sgd_iter=2",        "sync_frac=1",
        "total_timesteps=4096",  "check_weights_every=2"};
    resume_bitwise("ddppo", sets, NSETS(sets), 3, 3, "ddppo.safetensors");
}

/* More than 4096 minibatches in an iteration (the old fixed order[4096]
 * silently dropped the rest): every one of them is an optimizer step. */
static void test_ppo_more_than_4096_minibatches(void)
{
    static const char *const sets[] = {"num_envs_per_worker=1", "rollout_fragment_length=8192",
                                       "sgd_minibatch_size=1", "num_sgd_iter=1",
                                       "total_timesteps=81920"};
    dpt_config_t *c;
    char path[512];
    tmp_path(path, sizeof path, "mb.safetensors");
    REQUIRE_OK(make_cfg(&c, "ppo", sets, NSETS(sets)));
    dpt_trainer_t *t;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK_OK(dpt_test_checkpoint(t, path, 1));
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    uint64_t steps = 0;
    CHECK_OK(dpt_safetensors_meta_u64(st, "optim_step", &steps));
    printf("ppo: 8192 rows, minibatches of 1: %llu optimizer steps\n", (unsigned long long)steps);
    CHECK(steps == 8192);
    dpt_safetensors_destroy(st);
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
    remove(path);
}

/* Each minibatch (rows o..o+pdb of every device's slice) is standardized
 * over its own rows; with one device it is dpt_normalize() of each
 * contiguous minibatch, bit for bit. */
static void test_normalize_minibatches(void)
{
    enum { D = 2, RPD = 12, PDB = 4 };
    float x[D * RPD], y[D * RPD];
    dpt_rng_t rng;
    dpt_rng_init(&rng, 3, 0, 0, DPT_RNG_INIT);
    for (size_t i = 0; i < D * RPD; i++)
        x[i] = 5.0f * dpt_rng_uniform(&rng) + (float)(i % RPD) * 3.0f - 7.0f;
    memcpy(y, x, sizeof x);
    dpt__rl_normalize_minibatches(x, D, RPD, PDB);
    for (size_t o = 0; o < RPD; o += PDB) {
        double m = 0.0, s = 0.0;
        for (size_t d = 0; d < D; d++)
            for (size_t k = 0; k < PDB; k++)
                m += (double)x[d * RPD + o + k];
        m /= D * PDB;
        for (size_t d = 0; d < D; d++)
            for (size_t k = 0; k < PDB; k++)
                s += ((double)x[d * RPD + o + k] - m) * ((double)x[d * RPD + o + k] - m);
        CHECK(fabs(m) < 1e-6);
        CHECK(fabs(sqrt(s / (D * PDB)) - 1.0) < 1e-5);
    }
    /* One device: the same as dpt_normalize over each minibatch. */
    memcpy(x, y, sizeof x);
    dpt__rl_normalize_minibatches(x, 1, D * RPD, PDB);
    for (size_t o = 0; o < D * RPD; o += PDB)
        dpt_normalize(y + o, PDB);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

/* The three normalizations run and train differently. */
static void test_ppo_normalization_modes(void)
{
    static const char *const modes[3] = {"normalize_advantages=minibatch",
                                         "normalize_advantages=batch", "normalize_advantages=off"};
    float *w[3] = {NULL, NULL, NULL};
    size_t n = 0;
    for (int m = 0; m < 3; m++) {
        dpt_config_t *c;
        const char *sets[2] = {modes[m], "num_devices=2"};
        REQUIRE_OK(make_cfg(&c, "ppo", sets, 2));
        dpt_trainer_t *t;
        REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
        dpt_train_result_t r;
        for (int i = 0; i < 2; i++)
            CHECK_OK(dpt_trainer_iterate(t, &r));
        w[m] = dpt_test_weights(t, &n);
        dpt_trainer_destroy(t);
        dpt_config_destroy(c);
    }
    REQUIRE(w[0] && w[1] && w[2]);
    CHECK(memcmp(w[0], w[1], n * sizeof(float)) != 0);
    CHECK(memcmp(w[0], w[2], n * sizeof(float)) != 0);
    CHECK(memcmp(w[1], w[2], n * sizeof(float)) != 0);
    for (int m = 0; m < 3; m++)
        free(w[m]);
}

/* ---- DD-PPO through the trainer --------------------------------------------------- */

/* DD-PPO's default is the seed's, each worker's whole batch: bitwise the
 * run that asks for normalize_advantages = batch, not the per-minibatch
 * one. */
static void test_ddppo_default_normalization(void)
{
    static const char *const modes[3] = {NULL, "normalize_advantages=batch",
                                         "normalize_advantages=minibatch"};
    float *w[3] = {NULL, NULL, NULL};
    size_t n = 0;
    for (int m = 0; m < 3; m++) {
        dpt_config_t *c;
        const char *sets[] = {
            "num_workers=2",         "num_envs_per_worker=2", "rollout_fragment_length=32",
            "sgd_minibatch_size=16", "sync_frac=1",           modes[m]};
        /* modes[0]: the default (the key left out) */
        REQUIRE_OK(make_cfg(&c, "ddppo", sets, NSETS(sets) - (m == 0)));
        dpt_trainer_t *t;
        REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
        dpt_train_result_t r;
        for (int i = 0; i < 2; i++)
            CHECK_OK(dpt_trainer_iterate(t, &r));
        w[m] = dpt_test_weights(t, &n);
        dpt_trainer_destroy(t);
        dpt_config_destroy(c);
    }
    REQUIRE(w[0] && w[1] && w[2]);
    CHECK(memcmp(w[0], w[1], n * sizeof(float)) == 0);
    CHECK(memcmp(w[0], w[2], n * sizeof(float)) != 0);
    for (int m = 0; m < 3; m++)
        free(w[m]);
}

/* 100 steps x 5 envs = 500 rows a worker, minibatches of 128: 3 minibatches
 * of 128 rows (116 rows left over each epoch). The old plan made them
 * 500 / 3 = 166 rows, past the 128-row buffers (ASan: heap overflow). */
static void test_ddppo_batch_not_multiple_of_minibatch(void)
{
    static const char *const sets[] = {"rollout_fragment_length=100", "num_envs_per_worker=5",
                                       "sgd_minibatch_size=128", "num_workers=2", "num_sgd_iter=2"};
    dpt_config_t *c;
    REQUIRE_OK(make_cfg(&c, "ddppo", sets, NSETS(sets)));
    dpt_trainer_t *t;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    for (int i = 0; i < 2; i++)
        CHECK_OK(dpt_trainer_iterate(t, &r));
    CHECK(r.iteration == 2 && r.timesteps_total == 2000);
    CHECK(dpt_train_result_get(&r, "info/min_worker_rows") == 500.0);
    CHECK(dpt_train_result_get(&r, "info/preempted_workers") == 0.0);
    CHECK(r.nmetrics == 28); /* ppo's 22, DD-PPO's 2, the 4 step counters */
    dpt_trainer_destroy(t);
    dpt_config_destroy(c);
}

/* A checkpoint describes its model; it evaluates with no trainer; a
 * DD-PPO checkpoint refuses a different worker count and another job. */
static void test_checkpoint_metadata_and_eval(void)
{
    char path[512];
    tmp_path(path, sizeof path, "meta.safetensors");
    static const char *const sets[] = {"num_workers=2", "policy_hidden=32,16",
                                       "num_envs_per_worker=2", "rollout_fragment_length=32",
                                       "sgd_minibatch_size=16"};
    dpt_config_t *c, *c3, *cp;
    REQUIRE_OK(make_cfg(&c, "ddppo", sets, NSETS(sets)));
    dpt_trainer_t *t, *t3, *tp;
    REQUIRE_OK(dpt_trainer_create(&t, c, NULL));
    dpt_train_result_t r;
    REQUIRE_OK(dpt_trainer_iterate(t, &r));
    REQUIRE_OK(dpt_test_checkpoint(t, path, 1));
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    const char *m;
    CHECK((m = dpt_safetensors_meta(st, "env")) && strcmp(m, "CartPole-v1") == 0);
    CHECK((m = dpt_safetensors_meta(st, "obs_dim")) && strcmp(m, "4") == 0);
    CHECK((m = dpt_safetensors_meta(st, "action_kind")) && strcmp(m, "discrete") == 0);
    CHECK((m = dpt_safetensors_meta(st, "num_actions")) && strcmp(m, "2") == 0);
    CHECK((m = dpt_safetensors_meta(st, "policy_hidden")) && strcmp(m, "32,16") == 0);
    CHECK((m = dpt_safetensors_meta(st, "workers")) && strcmp(m, "2") == 0);
    CHECK((m = dpt_safetensors_meta(st, "job")) && strcmp(m, "ddppo") == 0);
    CHECK(dpt_safetensors_find(st, "worker.0") && dpt_safetensors_find(st, "worker.1"));
    dpt_eval_result_t ev;
    memset(&ev, 0, sizeof ev);
    CHECK_OK(dpt_trainer_ops(DPT_JOB_DDPPO)->eval_checkpoint(c, st, 0, 5, &ev));
    CHECK(ev.count == 10 && ev.mean_return > 0.0); /* eval_episodes = 10 */
    /* The same weights evaluated by the trainer give the same numbers. */
    dpt_eval_result_t ev2;
    CHECK_OK(dpt_trainer_evaluate(t, 10, 5, &ev2));
    CHECK(ev2.count == 10 && ev2.mean_return == ev.mean_return);
    /* Three workers cannot take two workers' states. */
    static const char *const sets3[] = {"num_workers=3", "policy_hidden=32,16",
                                        "num_envs_per_worker=2", "rollout_fragment_length=32",
                                        "sgd_minibatch_size=16"};
    REQUIRE_OK(make_cfg(&c3, "ddppo", sets3, NSETS(sets3)));
    REQUIRE_OK(dpt_trainer_create(&t3, c3, NULL));
    CHECK_ERR(dpt_trainer_restore(t3, st), DPT_EINVAL,
              "written by 2 DD-PPO workers, this run has 3");
    /* A failed restore changed nothing: t3 still trains. */
    CHECK_OK(dpt_trainer_iterate(t3, &r));
    CHECK(r.iteration == 1);
    static const char *const ppo_sets[] = {"policy_hidden=32,16"};
    REQUIRE_OK(make_cfg(&cp, "ppo", ppo_sets, 1));
    REQUIRE_OK(dpt_trainer_create(&tp, cp, NULL));
    CHECK_ERR(dpt_trainer_restore(tp, st), DPT_EINVAL, "is a ddppo checkpoint");
    dpt_trainer_destroy(tp);
    dpt_trainer_destroy(t3);
    dpt_trainer_destroy(t);
    dpt_safetensors_destroy(st);
    dpt_config_destroy(cp);
    dpt_config_destroy(c3);
    dpt_config_destroy(c);
    remove(path);
}

/* Copies checkpoint `src` to `dst` with the last byte of tensor `blob`
 * flipped (the envs' checksummed payload of a worker's state). */
static int copy_corrupted(const char *src, const char *dst, const char *blob)
{
    dpt_safetensors_t *st;
    dpt_safetensors_writer_t *w;
    int rc = dpt_safetensors_load(&st, src);
    if (rc)
        return rc;
    if ((rc = dpt_safetensors_writer_create(&w)) != 0) {
        dpt_safetensors_destroy(st);
        return rc;
    }
    unsigned char *bad = NULL;
    for (size_t i = 0; !rc && i < dpt_safetensors_count(st); i++) {
        const dpt_safetensors_tensor_t *x = dpt_safetensors_tensor(st, i);
        const void *data = x->data;
        if (strcmp(x->name, blob) == 0) {
            bad = malloc(x->bytes);
            if (!bad)
                rc = DPT_ENOMEM;
            else {
                memcpy(bad, x->data, x->bytes);
                bad[x->bytes - 1] ^= 0x5a;
                data = bad;
            }
        }
        if (!rc)
            rc = dpt_safetensors_add(w, x->name, x->dtype, x->ndim, x->shape, data);
    }
    for (size_t i = 0; !rc && i < dpt_safetensors_meta_count(st); i++) {
        const char *k, *v;
        rc = dpt_safetensors_meta_at(st, i, &k, &v);
        if (!rc && strncmp(k, "dpt.", 4) != 0)
            rc = dpt_safetensors_set_meta(w, k, v);
    }
    if (!rc)
        rc = bad ? dpt_safetensors_save(w, dst) : DPT_ENOENT;
    free(bad);
    dpt_safetensors_writer_destroy(w);
    dpt_safetensors_destroy(st);
    return rc;
}

/* One worker cannot restore (its envs' state is corrupt) while the other
 * can: the restore fails with that worker's error and index, and neither
 * worker changed: the trainer goes on exactly as an untouched twin. */
static void test_ddppo_restore_refused_by_one_worker(void)
{
    static const char *const sets[] = {"num_workers=2", "num_envs_per_worker=2",
                                       "rollout_fragment_length=32", "sgd_minibatch_size=16",
                                       "sync_frac=1"};
    char good[512], bad[512];
    tmp_path(good, sizeof good, "good.safetensors");
    tmp_path(bad, sizeof bad, "bad.safetensors");
    dpt_config_t *c;
    REQUIRE_OK(make_cfg(&c, "ddppo", sets, NSETS(sets)));
    dpt_trainer_t *a, *b, *twin;
    dpt_train_result_t r, rt;
    REQUIRE_OK(dpt_trainer_create(&a, c, NULL));
    for (int i = 0; i < 2; i++)
        REQUIRE_OK(dpt_trainer_iterate(a, &r));
    REQUIRE_OK(dpt_test_checkpoint(a, good, 1));
    REQUIRE_OK(copy_corrupted(good, bad, "worker.1"));
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, bad));
    REQUIRE_OK(dpt_trainer_create(&b, c, NULL));
    REQUIRE_OK(dpt_trainer_create(&twin, c, NULL));
    REQUIRE_OK(dpt_trainer_iterate(b, &r));
    REQUIRE_OK(dpt_trainer_iterate(twin, &rt));
    CHECK_ERR(dpt_trainer_restore(b, st), DPT_EFORMAT, "ddppo worker 1: ");
    CHECK(strstr(dpt_last_error(), "checksum") != NULL);
    printf("refused restore: %s\n", dpt_last_error());
    REQUIRE_OK(dpt_trainer_iterate(b, &r));
    REQUIRE_OK(dpt_trainer_iterate(twin, &rt));
    size_t n, nt;
    float *wb = dpt_test_weights(b, &n), *wt = dpt_test_weights(twin, &nt);
    REQUIRE(wb && wt && n == nt);
    CHECK(memcmp(wb, wt, n * sizeof(float)) == 0);
    CHECK(r.iteration == 2 && same_results(&r, &rt));
    free(wb);
    free(wt);
    dpt_safetensors_destroy(st);
    dpt_trainer_destroy(twin);
    dpt_trainer_destroy(b);
    dpt_trainer_destroy(a);
    dpt_config_destroy(c);
    remove(good);
    remove(bad);
}

/* ---- DD-PPO workers on threads (the internal hooks) ------------------------------- */

enum { MAXW = 4 };

typedef struct dd_run {
    int workers, iterations;
    dpt_ddppo_config_t cfg;
    const dpt_env_class_t *cls;
    dpt_comm_threads_group_t *group;
    dpt_ddppo_shared_t *shared;
    float *weights[MAXW];
    size_t nweights;
    int rc[MAXW];
    dpt_rl_result_t last[MAXW];
    uint64_t preempted;
} dd_run_t;

typedef struct {
    dd_run_t *run;
    int rank;
} dd_arg_t;

/* Marks the slow worker's thread; the slow env reads it. */
static _Thread_local int slow_thread;

static void *dd_worker(void *p)
{
    dd_arg_t *a = p;
    dd_run_t *run = a->run;
    dpt_comm_t *comm = NULL;
    dpt_ddppo_t *w = NULL;
    int rc = dpt_comm_threads_join(run->group, a->rank, &comm);
    slow_thread = a->rank == run->workers - 1;
    if (!rc)
        rc = dpt_ddppo_worker_create(&w, run->cls, &run->cfg, comm, run->shared);
    for (int i = 0; !rc && i < run->iterations; i++) {
        rc = dpt_ddppo_worker_train(w, &run->last[a->rank]);
        if (!rc && a->rank == 0)
            run->preempted += run->last[0].preempted_workers;
    }
    if (!rc)
        rc = dpt_ddppo_check_weights(w);
    if (!rc) {
        size_t n = dpt_policy_vars(dpt_ddppo_policy(w))->total;
        if (a->rank == 0)
            run->nweights = n; /* one writer; read after the join */
        run->weights[a->rank] = malloc(n * sizeof(float));
        if (run->weights[a->rank])
            memcpy(run->weights[a->rank], dpt_ddppo_weights(w), n * sizeof(float));
    }
    if (rc)
        fprintf(stderr, "worker %d: %s\n", a->rank, dpt_last_error());
    run->rc[a->rank] = rc;
    dpt_ddppo_worker_destroy(w);
    dpt_comm_destroy(comm);
    return NULL;
}

static int dd_go(dd_run_t *run)
{
    if (dpt_comm_threads_group_create(&run->group, run->workers, NULL) ||
        dpt_ddppo_shared_create(&run->shared, run->workers))
        return -1;
    pthread_t th[MAXW];
    dd_arg_t args[MAXW];
    for (int i = 0; i < run->workers; i++) {
        args[i] = (dd_arg_t){run, i};
        pthread_create(&th[i], NULL, dd_worker, &args[i]);
    }
    for (int i = 0; i < run->workers; i++)
        pthread_join(th[i], NULL);
    dpt_ddppo_shared_destroy(run->shared);
    dpt_comm_threads_group_destroy(run->group);
    for (int i = 0; i < run->workers; i++)
        if (run->rc[i])
            return run->rc[i];
    return 0;
}

static void dd_free(dd_run_t *run)
{
    for (int i = 0; i < MAXW; i++)
        free(run->weights[i]);
}

/* DD-PPO workers with PPO's settings (CleanRL's CartPole), without
 * preemption or weight checks. */
static int ppo_settings_for_ddppo(dpt_ddppo_config_t *cfg)
{
    dpt_ppo_config_t p;
    int rc = dpt__ppo_defaults(&p);
    memset(cfg, 0, sizeof *cfg);
    cfg->common = p.common;
    cfg->learn = p.learn;
    cfg->sync_frac = 1.0;
    cfg->check_weights_every = 0;
    return rc;
}

static void test_ddppo_threads_identical_and_repeatable(void)
{
    dd_run_t a, b;
    memset(&a, 0, sizeof a);
    a.workers = 2;
    a.iterations = 60;
    a.cls = dpt_env_find("CartPole-v1");
    REQUIRE_OK(ppo_settings_for_ddppo(&a.cfg));
    a.cfg.common.num_envs = 2;
    a.cfg.common.total_timesteps = 60 * 2 * 256;
    a.cfg.check_weights_every = 7;
    a.cfg.sync_frac = 0.6;
    b = a;
    REQUIRE_OK(dd_go(&a));
    REQUIRE_OK(dd_go(&b));
    REQUIRE(a.weights[0] && a.weights[1] && b.weights[0]);
    CHECK(memcmp(a.weights[0], a.weights[1], a.nweights * sizeof(float)) == 0);
    CHECK(memcmp(a.weights[0], b.weights[0], a.nweights * sizeof(float)) == 0);
    /* Every worker got the same aggregated result. */
    CHECK(a.last[0].timesteps_total == a.last[1].timesteps_total);
    CHECK(a.last[0].episode_reward_mean == a.last[1].episode_reward_mean);
    CHECK(a.last[0].timesteps_total == 60 * 512);
    printf("ddppo 2 threads: return %.1f after %llu steps\n", a.last[0].episode_reward_mean,
           (unsigned long long)a.last[0].timesteps_total);
    /* Random play averages ~22; 60 iterations of 8 global minibatches
     * clearly improve it. */
    CHECK(a.last[0].episode_reward_mean > 40.0);
    dd_free(&a);
    dd_free(&b);
}

/* A CartPole whose steps take 0.3 ms on the slow worker's thread. */
static dpt_env_class_t slow_cartpole;

static void slow_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                      int *terminated)
{
    if (slow_thread) {
        struct timespec ts = {0, 300000};
        nanosleep(&ts, NULL);
    }
    dpt_env_find("CartPole-v1")->step(state, action, rng, obs, reward, terminated);
}

static void test_ddppo_preempts_straggler(void)
{
    slow_cartpole = *dpt_env_find("CartPole-v1");
    slow_cartpole.name = "SlowCartPole";
    slow_cartpole.step = slow_step;
    dd_run_t a;
    memset(&a, 0, sizeof a);
    a.workers = 3;
    a.iterations = 3;
    a.cls = &slow_cartpole;
    REQUIRE_OK(ppo_settings_for_ddppo(&a.cfg));
    a.cfg.common.num_envs = 1;
    a.cfg.common.rollout_fragment_length = 128;
    a.cfg.learn.sgd_minibatch_size = 32;
    a.cfg.sync_frac = 0.6; /* 2 of 3 finished (0.67 > 0.6): the third stops */
    REQUIRE_OK(dd_go(&a));
    printf("preempted workers over 3 iterations: %llu; fewest rows %llu\n",
           (unsigned long long)a.preempted, (unsigned long long)a.last[0].rows_min);
    CHECK(a.preempted >= 2);
    CHECK(a.last[0].rows_min >= 32 && a.last[0].rows_min < 128); /* >= 25% of 128 */
    CHECK(memcmp(a.weights[0], a.weights[2], a.nweights * sizeof(float)) == 0);
    dd_free(&a);
}

static void test_ddppo_batch_rule(void)
{
    CHECK_OK(dpt_ddppo_check_batch(0, 512, 512, 0));
    CHECK_ERR(dpt_ddppo_check_batch(3, 500, 512, 0), DPT_ESTATE,
              "ddppo worker 3: batch has 500 rows, expected rollout_fragment_length x "
              "num_envs_per_worker = 512");
    CHECK_OK(dpt_ddppo_check_batch(1, 128, 512, 1));
    CHECK_ERR(dpt_ddppo_check_batch(1, 100, 512, 1), DPT_ESTATE, "between 25% of 512");
}

/* The engine settings come from the key table: PPO's are CleanRL's. */
static void test_rl_defaults_from_key_table(void)
{
    dpt_ppo_config_t p;
    dpt_ddppo_config_t d;
    REQUIRE_OK(dpt__ppo_defaults(&p));
    CHECK(p.common.num_envs == 4 && p.common.rollout_fragment_length == 128 &&
          p.learn.sgd_minibatch_size == 128);
    CHECK(p.common.num_sgd_iter == 4 && p.common.lr == 2.5e-4f && p.common.anneal_lr &&
          p.common.adam_eps == 1e-5f);
    CHECK(p.common.grad_clip == 0.5 && p.learn.normalize_advantages == DPT_ADV_NORM_MINIBATCH);
    CHECK(p.common.policy.nhidden == 2 && p.common.policy.hidden[0] == 64 &&
          p.common.policy.hidden[1] == 64);
    CHECK(p.towers.num_devices == 1 && p.towers.towers_mode == DPT_TOWERS_PS &&
          p.common.total_timesteps == 500000);
    CHECK(p.towers.reduce_sum == 0 && p.towers.async_scale == 0.0f &&
          p.common.allreduce_algorithm == DPT_ALLREDUCE_AUTO);
    REQUIRE_OK(dpt__ddppo_defaults(&d));
    CHECK(d.common.allreduce_algorithm == DPT_ALLREDUCE_AUTO);
    CHECK(d.common.num_envs == 5 && d.common.rollout_fragment_length == 100 &&
          d.learn.sgd_minibatch_size == 50);
    CHECK(d.common.num_sgd_iter == 10 && d.sync_frac == 0.6 && d.check_weights_every == 10);
    CHECK(d.learn.normalize_advantages == DPT_ADV_NORM_BATCH); /* the seed's: each worker's batch */
    /* Each job's settings come from a config of that job. */
    dpt_config_t *c;
    REQUIRE_OK(dpt__rl_default_config(DPT_JOB_SUPERVISED, &c));
    CHECK_ERR(dpt__ppo_config_from(c, &p), DPT_EINVAL, "job supervised");
    dpt_config_destroy(c);
    REQUIRE_OK(dpt__rl_default_config(DPT_JOB_PPO, &c));
    CHECK_ERR(dpt__ddppo_config_from(c, &d), DPT_EINVAL, "ddppo engine's settings");
    dpt_config_destroy(c);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_trainer") != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_rl_defaults_from_key_table),
        DPT_TEST(test_ppo_learns_cartpole),
        DPT_TEST(test_ppo_config_and_create_errors),
        DPT_TEST(test_ppo_bitwise_repeatable),
        DPT_TEST(test_ppo_resume_bitwise),
        DPT_TEST(test_ppo_devices_resume_bitwise),
        DPT_TEST(test_ppo_more_than_4096_minibatches),
        DPT_TEST(test_normalize_minibatches),
        DPT_TEST(test_ppo_normalization_modes),
        DPT_TEST(test_ddppo_default_normalization),
        DPT_TEST(test_ddppo_batch_not_multiple_of_minibatch),
        DPT_TEST(test_ddppo_resume_bitwise),
        DPT_TEST(test_checkpoint_metadata_and_eval),
        DPT_TEST(test_ddppo_restore_refused_by_one_worker),
        DPT_TEST(test_ddppo_threads_identical_and_repeatable),
        DPT_TEST(test_ddppo_preempts_straggler),
        DPT_TEST(test_ddppo_batch_rule),
    };
    int rc = DPT_TEST_RUN(cases);
    rmdir(tmpdir);
    return rc;
}
