/*
 * The RL jobs: PPO on towers (job = ppo) and DD-PPO (job = ddppo) with
 * worker threads, MPI ranks (mpirun -np N, one worker per rank when
 * num_workers = 1) or both (hier: num_workers threads per rank).
 * Metrics use RLlib's names; only global rank 0 writes them.
 */
#include "cli.h"
#include "train.h"
#include "dpt/dpt.h"
#include "dpt/trainer.h"
#include "dpt_config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dpt_mpi_world_size(void);

/* Built-in name, or the path of a plug-in exporting DPT_ENV_PLUGIN_SYMBOL. */
const dpt_env_class_t *dpt_cli_find_env(const char *name)
{
    if (!strchr(name, '/') && !strstr(name, ".so"))
        return dpt_env_find(name);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        dpt_error(DPT_ENOENT, "env plug-in %s: %s", name, dlerror());
        return NULL;
    }
    union {
        void *p;
        const dpt_env_class_t *(*fn)(void);
    } sym;
    sym.p = dlsym(h, DPT_ENV_PLUGIN_SYMBOL);
    if (!sym.p) {
        dpt_error(DPT_EINVAL, "env plug-in %s does not export %s()", name, DPT_ENV_PLUGIN_SYMBOL);
        return NULL;
    }
    const dpt_env_class_t *cls = sym.fn();
    if (!cls || dpt_env_class_check(cls) != 0) {
        if (!cls)
            dpt_error(DPT_EINVAL, "env plug-in %s returned no class", name);
        return NULL;
    }
    return cls; /* the library stays loaded for the life of the process */
}

static int rl_config(const dpt_config_t *c, dpt_rl_config_t *r)
{
    *r = dpt_rl_defaults();
    r->seed = (uint64_t)CFG_I(c, seed);
    r->num_envs = (size_t)CFG_I(c, num_envs_per_worker);
    r->rollout_fragment_length = (size_t)CFG_I(c, rollout_fragment_length);
    r->sgd_minibatch_size = (size_t)CFG_I(c, sgd_minibatch_size);
    r->num_sgd_iter = (int)CFG_I(c, num_sgd_iter);
    r->gamma = CFG_F(c, gamma);
    r->lambda = CFG_F(c, lambda);
    r->loss.clip_param = (float)CFG_F(c, clip_param);
    r->loss.vf_clip_param = (float)CFG_F(c, vf_clip_param);
    r->loss.vf_coef = (float)CFG_F(c, vf_loss_coeff);
    r->loss.ent_coef = (float)CFG_F(c, entropy_coeff);
    r->lr = (float)CFG_F(c, lr);
    r->anneal_lr = CFG_I(c, lr_schedule) == 1;
    r->adam_eps = (float)CFG_F(c, adam_eps);
    r->grad_clip = CFG_F(c, grad_clip);
    r->normalize_advantages = (int)CFG_I(c, normalize_advantages);
    r->reward_scale = (float)CFG_F(c, reward_scale);
    int nh = dpt_config_parse_sizes(CFG_S(c, policy_hidden), r->hidden, DPT_POLICY_MAX_HIDDEN);
    if (nh < 0)
        return dpt_error(DPT_EINVAL, "policy_hidden: %s", dpt_last_error());
    r->nhidden = nh;
    r->total_timesteps = (uint64_t)CFG_I(c, total_timesteps);
    r->num_devices = (int)CFG_I(c, num_devices);
    r->towers_mode = (dpt_towers_mode_t)CFG_I(c, towers_mode);
    r->sync_frac = CFG_F(c, sync_frac);
    r->check_weights_every = (int)CFG_I(c, check_weights_every);
    /* PPO: train_batch_size, when set, must be what the sampler collects. */
    if (CFG_I(c, job) == 1 && CFG_I(c, train_batch_size) != 0 &&
        (size_t)CFG_I(c, train_batch_size) != r->num_envs * r->rollout_fragment_length)
        return dpt_error(DPT_EINVAL, "train_batch_size %lld must equal num_envs_per_worker x "
                         "rollout_fragment_length = %zu", (long long)CFG_I(c, train_batch_size),
                         r->num_envs * r->rollout_fragment_length);
    return DPT_OK;
}

static int rl_metrics(dpt_run_t *run, const dpt_rl_result_t *r, double total, int ddppo)
{
    if (!run->metrics_open)
        return DPT_OK;
    dpt_metrics_t *m = &run->metrics;
    dpt_metrics_begin(m);
    dpt_metrics_add(m, "training_iteration", (double)r->iteration);
    dpt_metrics_add(m, "timesteps_total", (double)r->timesteps_total);
    dpt_metrics_add(m, "timesteps_this_iter", (double)r->timesteps_this_iter);
    dpt_metrics_add(m, "episodes_total", (double)r->episodes_total);
    dpt_metrics_add(m, "episodes_this_iter", (double)r->episodes_this_iter);
    dpt_metrics_add(m, "episode_reward_mean", r->episode_reward_mean);
    dpt_metrics_add(m, "episode_reward_min", r->episode_reward_min);
    dpt_metrics_add(m, "episode_reward_max", r->episode_reward_max);
    dpt_metrics_add(m, "episode_len_mean", r->episode_len_mean);
    dpt_metrics_add(m, "episode_reward_mean_last20", r->episode_reward_mean_20);
    dpt_metrics_add(m, "env_steps_per_s", r->env_steps_per_s);
    dpt_metrics_add(m, "time_this_iter_s", r->iteration_time_s);
    dpt_metrics_add(m, "time_total_s", total);
    dpt_metrics_add(m, "info/learner/default_policy/cur_lr", r->cur_lr);
    dpt_metrics_add(m, "info/learner/default_policy/policy_loss", r->policy_loss);
    dpt_metrics_add(m, "info/learner/default_policy/vf_loss", r->vf_loss);
    dpt_metrics_add(m, "info/learner/default_policy/entropy", r->entropy);
    dpt_metrics_add(m, "info/learner/default_policy/kl", r->kl);
    dpt_metrics_add(m, "info/learner/default_policy/clip_fraction", r->clipfrac);
    dpt_metrics_add(m, "info/learner/default_policy/grad_gnorm", r->grad_norm);
    dpt_metrics_add(m, "info/learner/default_policy/vf_explained_var", r->vf_explained_var);
    if (ddppo) {
        dpt_metrics_add(m, "info/preempted_workers", (double)r->preempted_workers);
        dpt_metrics_add(m, "info/min_worker_rows", (double)r->rows_min);
    }
    dpt_metrics_add(m, "timing_breakdown/sample_time_ms", r->sample_time_s * 1e3);
    dpt_metrics_add(m, "timing_breakdown/learn_time_ms", r->learn_time_s * 1e3);
    return dpt_metrics_end(m);
}

static void rl_progress(dpt_run_t *run, const dpt_rl_result_t *r, int force)
{
    char line[256];
    snprintf(line, sizeof line, "iter %llu  steps %llu/%llu  return %.1f (last 20: %.1f)  "
             "%.0f steps/s", (unsigned long long)r->iteration,
             (unsigned long long)r->timesteps_total,
             (unsigned long long)CFG_I(&run->cfg, total_timesteps), r->episode_reward_mean,
             r->episode_reward_mean_20, r->env_steps_per_s);
    dpt_progress_update(&run->progress, line,
                        (double)r->timesteps_total / (double)CFG_I(&run->cfg, total_timesteps),
                        force);
}

static int rl_done(const dpt_run_t *run, const dpt_rl_result_t *r)
{
    double stop = CFG_F(&run->cfg, stop_reward);
    uint64_t iters = (uint64_t)CFG_I(&run->cfg, stop_iters);
    if (r->timesteps_total >= (uint64_t)CFG_I(&run->cfg, total_timesteps) ||
        (iters && r->iteration >= iters))
        return 1;
    /* "Solved": the window of recent episodes is full enough to trust. */
    return stop != 0.0 && r->episodes_in_window >= 20 && r->episode_reward_mean >= stop;
}

static void rl_print_eval(dpt_run_t *run, dpt_policy_t *policy, const float *params,
                          const dpt_rl_result_t *r, double secs)
{
    size_t n = (size_t)CFG_I(&run->cfg, eval_episodes);
    double ret = 0.0, len = 0.0;
    if (run->quiet)
        return;
    printf("dpt train: %llu env steps in %.2f s (%.0f steps/s); return %.1f (mean of last "
           "100 episodes), %.1f (last 20)\n",
           (unsigned long long)r->timesteps_total, secs,
           secs > 0 ? (double)r->timesteps_total / secs : 0.0, r->episode_reward_mean,
           r->episode_reward_mean_20);
    if (n == 0)
        return;
    int rc = dpt_rl_evaluate(policy, params, (uint64_t)CFG_I(&run->cfg, seed), n, &ret, &len);
    if (rc)
        fprintf(stderr, "dpt train: evaluation: %s\n", dpt_last_error());
    else
        printf("evaluation: greedy policy, %zu episodes of %s: mean return %.1f, mean length "
               "%.1f\n", n, dpt_policy_env_class(policy)->name, ret, len);
}

/* ---- PPO ----------------------------------------------------------------------- */

static int rl_ppo(dpt_run_t *run, const dpt_env_class_t *cls, const dpt_rl_config_t *rc_cfg)
{
    dpt_ppo_t *ppo;
    int rc = dpt_ppo_create(&ppo, cls, rc_cfg);
    if (rc)
        return dpt_run_fail("ppo", rc);
    int code = DPT_EXIT_FAIL;
    float *w = NULL;
    if (run->ckpt && (rc = dpt_ppo_restore(ppo, run->ckpt)) != 0) {
        code = dpt_run_fail("resume", rc);
        goto out;
    }
    if ((rc = dpt_run_open_metrics(run, dpt_ppo_iteration(ppo))) != 0) {
        code = dpt_run_fail("metrics", rc);
        goto out;
    }
    dpt_rl_result_t r;
    memset(&r, 0, sizeof r);
    double start = dpt_now();
    uint64_t every = (uint64_t)CFG_I(&run->cfg, checkpoint_every);
    int done = 0;
    while (!done) {
        if ((rc = dpt_ppo_train(ppo, &r)) != 0) {
            code = dpt_run_fail("training", rc);
            goto out;
        }
        double total = run->time_offset + dpt_now() - start;
        done = rl_done(run, &r);
        if ((rc = rl_metrics(run, &r, total, 0)) != 0) {
            code = dpt_run_fail("metrics", rc);
            goto out;
        }
        rl_progress(run, &r, done);
        if ((every && r.iteration % every == 0) || done) {
            dpt_safetensors_writer_t *wr;
            if ((rc = dpt_safetensors_writer_create(&wr)) == 0) {
                rc = dpt_ppo_checkpoint(ppo, wr);
                if (!rc)
                    rc = dpt_run_save_checkpoint(run, wr, r.iteration, total);
                dpt_safetensors_writer_destroy(wr);
            }
            if (rc) {
                code = dpt_run_fail("checkpoint", rc);
                goto out;
            }
        }
    }
    dpt_progress_done(&run->progress);
    size_t n = dpt_policy_vars(dpt_ppo_policy(ppo))->total;
    w = malloc(n * sizeof *w);
    if (!w || dpt_ppo_get_weights(ppo, w, n) != 0) {
        code = dpt_run_fail("weights", w ? DPT_EINVAL : DPT_ENOMEM);
        goto out;
    }
    rl_print_eval(run, dpt_ppo_policy(ppo), w, &r, dpt_now() - start);
    code = DPT_EXIT_OK;
out:
    free(w);
    dpt_ppo_destroy(ppo);
    return code;
}

/* ---- DD-PPO ---------------------------------------------------------------------- */

typedef struct dd_shared {
    dpt_run_t *run;
    const dpt_env_class_t *cls;
    dpt_rl_config_t cfg;
    dpt_ddppo_shared_t *shared;
    double start;
    float *gather;      /* rank 0: all workers' states */
    size_t state_floats;
} dd_shared_t;

typedef struct dd_thread {
    dd_shared_t *sh;
    dpt_comm_t *comm;
    pthread_t thread;
    int rc;
    char msg[512];
} dd_thread_t;

/* Collective checkpoint: every worker contributes its private state through
 * an all-gather; global rank 0 writes the file. */
static int dd_checkpoint(dd_thread_t *t, dpt_ddppo_t *w, uint64_t iteration, double total)
{
    dd_shared_t *sh = t->sh;
    size_t bytes = dpt_ddppo_state_bytes(w);
    size_t nf = (bytes + 3) / 4;
    int rank = dpt_comm_rank(t->comm), size = dpt_comm_size(t->comm);
    float *mine = calloc(nf, sizeof(float));
    float *all = calloc(nf * (size_t)size, sizeof(float));
    int rc = (!mine || !all) ? dpt_error(DPT_ENOMEM, "checkpoint: cannot allocate") : 0;
    if (!rc)
        rc = dpt_ddppo_save_state(w, mine, bytes);
    /* Every worker must enter the all-gather, even after a local failure,
     * or the others would wait for it until the collective times out. */
    int grc = dpt_comm_allgather(t->comm, mine ? mine : all, mine ? nf : 0, all);
    if (!rc)
        rc = grc;
    if (!rc && rank == 0) {
        dpt_safetensors_writer_t *wr;
        if ((rc = dpt_safetensors_writer_create(&wr)) == 0) {
            rc = dpt_ddppo_checkpoint_common(w, wr);
            for (int r = 0; !rc && r < size; r++) {
                char name[32];
                snprintf(name, sizeof name, "worker.%d", r);
                rc = dpt_safetensors_add_blob(wr, name, all + (size_t)r * nf, bytes);
            }
            if (!rc)
                rc = dpt_run_save_checkpoint(sh->run, wr, iteration, total);
            dpt_safetensors_writer_destroy(wr);
        }
    }
    free(mine);
    free(all);
    return rc;
}

static void *dd_main(void *arg)
{
    dd_thread_t *t = arg;
    dd_shared_t *sh = t->sh;
    dpt_run_t *run = sh->run;
    int rank = dpt_comm_rank(t->comm);
    dpt_ddppo_t *w = NULL;
    int rc = dpt_ddppo_worker_create(&w, sh->cls, &sh->cfg, t->comm, sh->shared);
    if (!rc && run->ckpt) {
        char name[32];
        const void *blob;
        size_t bytes;
        snprintf(name, sizeof name, "worker.%d", rank);
        rc = dpt_safetensors_get_blob(run->ckpt, name, &blob, &bytes);
        if (!rc)
            rc = dpt_ddppo_restore(w, run->ckpt, blob, bytes);
    }
    if (!rc && rank == 0)
        rc = dpt_run_open_metrics(run, dpt_ddppo_iteration(w));
    dpt_rl_result_t r;
    memset(&r, 0, sizeof r);
    uint64_t every = (uint64_t)CFG_I(&run->cfg, checkpoint_every);
    int done = 0;
    while (!rc && !done) {
        if ((rc = dpt_ddppo_worker_train(w, &r)) != 0)
            break;
        double total = run->time_offset + dpt_now() - sh->start;
        done = rl_done(run, &r); /* the same on every worker: r is aggregated */
        if (rank == 0) {
            if ((rc = rl_metrics(run, &r, total, 1)) != 0)
                break;
            rl_progress(run, &r, done);
        }
        if ((every && r.iteration % every == 0) || done)
            rc = dd_checkpoint(t, w, r.iteration, total);
    }
    if (!rc)
        rc = dpt_ddppo_check_weights(w);
    if (!rc && rank == 0) {
        dpt_progress_done(&run->progress);
        if (!run->quiet)
            printf("dpt train: %d DD-PPO workers hold identical weights (checked)\n",
                   dpt_comm_size(t->comm));
        rl_print_eval(run, dpt_ddppo_policy(w), dpt_ddppo_weights(w), &r,
                      dpt_now() - sh->start);
    }
    if (rc)
        snprintf(t->msg, sizeof t->msg, "%s", dpt_last_error());
    t->rc = rc;
    dpt_ddppo_worker_destroy(w);
    return NULL;
}

static int rl_ddppo(dpt_run_t *run, const dpt_env_class_t *cls, const dpt_rl_config_t *cfg)
{
    int T = (int)CFG_I(&run->cfg, num_workers);
    int world = dpt_mpi_world_size();
    dd_shared_t sh;
    memset(&sh, 0, sizeof sh);
    sh.run = run;
    sh.cls = cls;
    sh.cfg = *cfg;
    /* Annealing counts every worker's steps. */
    dd_thread_t *th = calloc((size_t)T, sizeof *th);
    if (!th)
        return dpt_run_fail("ddppo", DPT_ENOMEM);
    int rc, code = DPT_EXIT_FAIL;
    dpt_comm_threads_group_t *tg = NULL;
    dpt_comm_hier_group_t *hg = NULL;
    int mpi = world > 1;
    if (mpi) {
        if ((rc = dpt_comm_mpi_init(NULL, NULL, T > 1 ? DPT_COMM_MPI_SERIALIZED
                                                      : DPT_COMM_MPI_FUNNELED)) != 0) {
            code = dpt_run_fail("MPI", rc);
            goto out;
        }
        if (T == 1) {
            dpt_comm_mpi_options_t mo;
            dpt_comm_mpi_options_init(&mo);
            rc = dpt_comm_mpi_create(&th[0].comm, &mo);
        } else {
            dpt_comm_hier_options_t ho;
            dpt_comm_hier_options_init(&ho);
            rc = dpt_comm_hier_group_create(&hg, T, &ho);
            for (int i = 0; !rc && i < T; i++)
                rc = dpt_comm_hier_join(hg, i, &th[i].comm);
        }
    } else {
        rc = dpt_comm_threads_group_create(&tg, T, NULL);
        for (int i = 0; !rc && i < T; i++)
            rc = dpt_comm_threads_join(tg, i, &th[i].comm);
    }
    if (!rc)
        rc = dpt_ddppo_shared_create(&sh.shared, T);
    if (rc) {
        code = dpt_run_fail("collectives", rc);
        goto out;
    }
    if (run->rank == 0 && !run->quiet)
        printf("dpt train: DD-PPO on %s, %d workers (%d process%s x %d thread%s), %zu envs and "
               "%zu steps per worker per iteration\n",
               cls->name, T * world, world, world > 1 ? "es" : "", T, T > 1 ? "s" : "",
               cfg->num_envs, cfg->rollout_fragment_length);
    sh.start = dpt_now();
    int started = 0;
    for (int i = 0; i < T; i++) {
        th[i].sh = &sh;
        if (pthread_create(&th[i].thread, NULL, dd_main, &th[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i].thread, NULL);
    code = DPT_EXIT_OK;
    if (started < T) {
        fprintf(stderr, "dpt train: cannot start worker threads\n");
        code = DPT_EXIT_FAIL;
    }
    for (int i = 0; i < started; i++)
        if (th[i].rc) {
            fprintf(stderr, "dpt train: worker %d: %s: %s\n", i, dpt_strerror(th[i].rc),
                    th[i].msg);
            code = DPT_EXIT_FAIL;
            break;
        }
out:
    for (int i = 0; i < T; i++)
        dpt_comm_destroy(th[i].comm);
    dpt_comm_threads_group_destroy(tg);
    dpt_comm_hier_group_destroy(hg);
    dpt_ddppo_shared_destroy(sh.shared);
    free(th);
    if (mpi)
        dpt_comm_mpi_finalize();
    return code;
}

int dpt_job_rl(dpt_run_t *run)
{
    const dpt_env_class_t *cls = dpt_cli_find_env(CFG_S(&run->cfg, env));
    if (!cls) {
        fprintf(stderr, "dpt train: env: %s\n", dpt_last_error());
        return DPT_EXIT_USAGE;
    }
    dpt_rl_config_t rc_cfg;
    int rc = rl_config(&run->cfg, &rc_cfg);
    if (rc) {
        fprintf(stderr, "dpt train: %s\n", dpt_last_error());
        return DPT_EXIT_USAGE;
    }
    return CFG_I(&run->cfg, job) == 1 ? rl_ppo(run, cls, &rc_cfg) : rl_ddppo(run, cls, &rc_cfg);
}
