/*
 * job = appo and job = impala: the asynchronous engine of src/rl/appo.c
 * (sampler threads, a learner thread, V-trace) behind the trainer
 * interface of dpt/train.h.
 */
#include "dpt/arena.h"
#include "core/intern.h"
#include "dpt/comm.h"
#include "dpt/status.h"
#include "rl_internal.h"
#include "train_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dpt__appo_trainer {
    const dpt_config_t *cfg; /* borrowed: the trainer's own copy, valid until destroy */
    dpt_appo_config_t rc;
    dpt_env_class_t *env; /* the configured env; the engine borrows it */
    dpt_appo_t *appo;
    dpt_arena_t eval_params; /* the current weights, for evaluate() */
    /* The per-policy metrics' names (interned: dpt_metric_t borrows them as
     * static storage): the learner's, then "num_updates_this_iter" and
     * "policy_reward_mean/<p>". */
    const char *names[DPT_RL_MAX_POLICIES][DPT__RL_LEARNER_METRICS + 2];
} dpt__appo_trainer_t;

/* Every metric of an iteration fits in a result: the one-policy metrics (at
 * most 48) and DPT__RL_LEARNER_METRICS + 2 per policy. */
_Static_assert(48 + DPT_RL_MAX_POLICIES * (DPT__RL_LEARNER_METRICS + 2) <= DPT_TRAIN_MAX_METRICS,
               "the metrics of the most policies must fit in a dpt_train_result_t");

int dpt__appo_config_from(const dpt_config_t *c, dpt_appo_config_t *out)
{
    memset(out, 0, sizeof *out);
    dpt_job_t job = dpt_config_job(c);
    if (job != DPT_JOB_APPO && job != DPT_JOB_IMPALA)
        return dpt__rl_job_error(c, "appo");
    int rc = dpt__rl_common_from(c, &out->common);
    if (!rc)
        rc = dpt__rl_towers_from(c, &out->towers);
    if (!rc)
        rc = dpt__rl_policies_from(c, &out->policies);
    if (rc)
        return rc;
    out->loss.impala = job == DPT_JOB_IMPALA;
    /* IMPALA's policy gradient has no ratio clip (the key is APPO's). */
    if (dpt_config_applies(c, DPT_CFG_clip_param))
        out->loss.clip_param = (float)DPT_CF(c, clip_param);
    out->loss.vf_coef = (float)DPT_CF(c, vf_loss_coeff);
    out->loss.ent_coef = (float)DPT_CF(c, entropy_coeff);
    out->loss.clip_rho = (float)DPT_CF(c, vtrace_clip_rho_threshold);
    out->loss.clip_pg_rho = (float)DPT_CF(c, vtrace_clip_pg_rho_threshold);
    out->num_workers = (int)DPT_CI(c, num_workers);
    out->train_batch_size = (size_t)DPT_CI(c, train_batch_size);
    out->learner_queue_size = (size_t)DPT_CI(c, learner_queue_size);
    out->learner_queue_timeout = DPT_CF(c, learner_queue_timeout);
    out->minibatch_buffer_size = (size_t)DPT_CI(c, minibatch_buffer_size);
    out->init_num_passes = (int)DPT_CI(c, init_num_passes);
    out->result_queue_size = (size_t)DPT_CI(c, learner_result_queue_size);
    out->broadcast_interval = (int)DPT_CI(c, broadcast_interval);
    out->tower_stacks = (int)DPT_CI(c, num_multi_gpu_tower_stacks);
    out->load_threads = (int)DPT_CI(c, num_data_load_threads);
    out->steps_per_iteration = (uint64_t)DPT_CI(c, min_sample_timesteps_per_iteration);
    return DPT_OK;
}

static void dpt__appo_destroy(void *self)
{
    dpt__appo_trainer_t *t = self;
    if (!t)
        return;
    /* A sampler stuck in its env keeps the engine and the env class. */
    int stuck = dpt_appo_stop(t->appo);
    dpt_appo_destroy(t->appo);
    if (!stuck)
        dpt_env_class_destroy(t->env);
    dpt_arena_deinit(&t->eval_params);
    free(t);
}

static int dpt__appo_create(void **self, const dpt_config_t *cfg, const dpt_trainer_env_t *env)
{
    *self = NULL;
    const char *job = dpt_job_name(dpt_config_job(cfg));
    /* Under mpirun dpt_train_run hands rank 0 (the learner) the ranks'
     * communicator; the other ranks run dpt__appo_role. */
    dpt_comm_t *comm = NULL;
    if (env && env->comm && dpt_comm_size(env->comm) > 1) {
        if (dpt_comm_rank(env->comm) != 0)
            return dpt_error(DPT_EINVAL,
                             "%s under mpirun runs through dpt_train_run (rank 0 learns, the "
                             "other ranks sample)",
                             job);
        comm = env->comm;
    }
    dpt__appo_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return dpt_error(DPT_ENOMEM, "%s: cannot allocate the trainer", job);
    t->cfg = cfg;
    int rc = dpt__appo_config_from(cfg, &t->rc);
    for (int p = 0; !rc && p < t->rc.policies.count; p++) {
        const char *name = t->rc.policies.name[p];
        char buf[2][DPT_RL_POLICY_NAME_MAX + 48];
        snprintf(buf[0], sizeof buf[0], "info/learner/%s/num_updates_this_iter", name);
        snprintf(buf[1], sizeof buf[1], "policy_reward_mean/%s", name);
        rc = dpt__rl_learner_metric_names(name, t->names[p]);
        for (int k = 0; !rc && k < 2; k++)
            if (!(t->names[p][DPT__RL_LEARNER_METRICS + k] = dpt__intern(buf[k])))
                rc = DPT_ENOMEM;
    }
    if (!rc)
        rc = dpt__rl_make_env_for(cfg, env, &t->env);
    if (!rc)
        rc = comm ? dpt_appo_create_mpi(&t->appo, t->env, &t->rc, comm)
                  : dpt_appo_create(&t->appo, t->env, &t->rc);
    if (!rc) {
        dpt_appo_set_stop_flag(t->appo, env ? env->stop_flag : NULL);
        rc = dpt_arena_init(&t->eval_params, dpt_policy_vars(dpt_appo_policy(t->appo))->total);
    }
    if (rc) {
        dpt__appo_destroy(t);
        return rc;
    }
    *self = t;
    return DPT_OK;
}

/* A sampler rank's whole part of the run under mpirun (rank 0 learns):
 * DPT_OK once rank 0 said stop, or the error (an env's, sent to rank 0
 * first; rank 0's silence). Rank 0 decides when the samplers stop. */
static int dpt__appo_role(const dpt_config_t *cfg, dpt_comm_t *comm,
                          const volatile sig_atomic_t *stop_flag)
{
    dpt_appo_config_t rc_cfg;
    dpt_env_class_t *env = NULL;
    dpt_appo_t *a = NULL;
    int rc = dpt__appo_config_from(cfg, &rc_cfg);
    if (!rc)
        rc = dpt__rl_make_env(cfg, &env);
    if (!rc)
        rc = dpt_appo_create_mpi(&a, env, &rc_cfg, comm);
    if (!rc) {
        dpt_appo_set_stop_flag(a, stop_flag); /* it asks rank 0 to stop the run */
        rc = dpt_appo_run_sampler(a);
    }
    int stuck = dpt_appo_stop(a);
    dpt_appo_destroy(a);
    if (!stuck)
        dpt_env_class_destroy(env);
    return rc;
}

static int dpt__appo_iterate(void *self, dpt_train_result_t *r)
{
    dpt__appo_trainer_t *t = self;
    dpt_rl_result_t rr;
    dpt_appo_stats_t as;
    int rc = dpt_appo_train(t->appo, &rr, &as);
    if (rc)
        return rc;
    /* One policy: its figures where they always were (with the default
     * name, info/learner/default_policy/...); several: each trained
     * policy's under its name, below. */
    const dpt_rl_policies_t *pl = &t->rc.policies;
    dpt__rl_fill_result(&rr, t->rc.common.total_timesteps, 0, pl->count == 1 ? t->names[0] : NULL,
                        r);
    /* The learner's own figures, under the names of RLlib's learner thread
     * (the step counters are dpt__rl_fill_result's, as every RL job's). */
    dpt_train_result_add(r, "info/num_updates_this_iter", (double)as.updates);
    dpt_train_result_add(r, "info/policy_lag", as.policy_lag);
    dpt_train_result_add(r, "info/learner_utilization", as.learner_utilization);
    dpt_train_result_add(r, "info/learner_batches_taken", (double)as.batches_taken);
    dpt_train_result_add(r, "info/learner_passes_scheduled", (double)as.passes_scheduled);
    dpt_train_result_add(r, "info/num_weight_broadcasts", (double)as.broadcasts);
    dpt_train_result_add(r, "timing_breakdown/learner_dequeue_time_ms", as.dequeue_time_ms);
    dpt_train_result_add(r, "timing_breakdown/learner_load_time_ms", as.load_time_ms);
    dpt_train_result_add(r, "timing_breakdown/learner_grad_time_ms", as.grad_time_ms);
    if (t->rc.tower_stacks > 1)
        dpt_train_result_add(r, "timing_breakdown/learner_load_wait_time_ms", as.load_wait_time_ms);
    dpt_train_result_add(r, "info/learner_queue/size_count", (double)as.queue_count);
    dpt_train_result_add(r, "info/learner_queue/size_mean", as.queue_mean);
    dpt_train_result_add(r, "info/learner_queue/size_std", as.queue_std);
    static const char *const q[5] = {
        "info/learner_queue/size_quantiles_0", "info/learner_queue/size_quantiles_10",
        "info/learner_queue/size_quantiles_50", "info/learner_queue/size_quantiles_90",
        "info/learner_queue/size_quantiles_100"};
    for (int i = 0; i < 5; i++)
        dpt_train_result_add(r, q[i], as.queue_quantiles[i]);
    for (int p = 0; pl->count > 1 && p < as.npolicies; p++) {
        if (as.policy[p].trained) {
            dpt__rl_add_learner_metrics(r, t->names[p], rr.cur_lr, &as.policy[p],
                                        rr.vf_explained_var);
            dpt_train_result_add(r, t->names[p][DPT__RL_LEARNER_METRICS],
                                 (double)as.policy[p].updates);
        }
        /* RLlib's per-policy return (null before its first episode). */
        dpt_train_result_add(r, t->names[p][DPT__RL_LEARNER_METRICS + 1], as.policy[p].reward_mean);
    }
    int asker = dpt_appo_stop_asked(t->appo);
    if (asker) {
        r->stop_requested = 1;
        snprintf(r->note, sizeof r->note, "sampler rank %d asked to stop the run", asker);
    }
    return DPT_OK;
}

static int dpt__appo_checkpoint(void *self, dpt_safetensors_writer_t *w)
{
    dpt__appo_trainer_t *t = self;
    return w ? dpt_appo_checkpoint(t->appo, w) : DPT_OK;
}

static int dpt__appo_restore(void *self, const dpt_safetensors_t *st)
{
    dpt__appo_trainer_t *t = self;
    return dpt_appo_restore(t->appo, st);
}

static const dpt_vartable_t *dpt__appo_vars(void *self)
{
    dpt__appo_trainer_t *t = self;
    return dpt_policy_vars(dpt_appo_policy(t->appo));
}

static int dpt__appo_get_weights(void *self, float *out, size_t count)
{
    dpt__appo_trainer_t *t = self;
    return dpt_appo_get_weights(t->appo, out, count);
}

static int dpt__appo_set_weights(void *self, const float *in, size_t count)
{
    dpt__appo_trainer_t *t = self;
    return dpt_appo_set_weights(t->appo, in, count);
}

static int dpt__appo_evaluate(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    dpt__appo_trainer_t *t = self;
    int rc = dpt_appo_get_weights(t->appo, t->eval_params.data, t->eval_params.count);
    if (rc)
        return rc;
    /* A policy of its own: the learner's is the towers' model. */
    dpt_policy_t *pol = NULL;
    rc = dpt_policy_create_ex(&pol, t->env, &t->rc.common.policy, 1);
    if (!rc)
        rc = dpt__rl_evaluate_into(pol, t->eval_params.data, episodes, seed,
                                   (int)DPT_CI(t->cfg, eval_stochastic), out);
    dpt_policy_destroy(pol);
    return rc;
}

static int dpt__appo_describe(void *self, dpt_safetensors_writer_t *w)
{
    dpt__appo_trainer_t *t = self;
    return dpt__describe_policy(w, dpt_appo_policy(t->appo), t->cfg);
}

/* The two jobs share the engine; cfg->loss.impala picks the loss. */
#define DPT__APPO_OPS(JOB)                                                          \
    {                                                                               \
        .job = (JOB), .create = dpt__appo_create, .destroy = dpt__appo_destroy,     \
        .iterate = dpt__appo_iterate, .checkpoint = dpt__appo_checkpoint,           \
        .restore = dpt__appo_restore, .vars = dpt__appo_vars,                       \
        .get_weights = dpt__appo_get_weights, .set_weights = dpt__appo_set_weights, \
        .evaluate = dpt__appo_evaluate, .describe = dpt__appo_describe,             \
        .eval_checkpoint = dpt__rl_eval_checkpoint,                                 \
    }

static const dpt_trainer_ops_t dpt__appo_ops = DPT__APPO_OPS(DPT_JOB_APPO);
static const dpt_trainer_ops_t dpt__appo_impala_ops = DPT__APPO_OPS(DPT_JOB_IMPALA);

static int dpt__appo_check(const dpt_config_t *c)
{
    /* The learner trains on whole fragments (V-trace runs along each one),
     * split across its devices by fragments. */
    int64_t frag = DPT_CI(c, rollout_fragment_length);
    int64_t tb = DPT_CI(c, train_batch_size), d = DPT_CI(c, num_devices);
    if (tb < frag || tb % frag)
        return dpt_error(DPT_EINVAL,
                         "train_batch_size %lld must be a positive multiple of "
                         "rollout_fragment_length %lld (the learner trains on whole "
                         "fragments)",
                         (long long)tb, (long long)frag);
    if (tb / frag < d || (tb / frag) % d)
        return dpt_error(DPT_EINVAL,
                         "train_batch_size %lld holds %lld fragments of %lld steps: that must "
                         "be at least and divisible by num_devices %lld (each device trains "
                         "on whole fragments)",
                         (long long)tb, (long long)(tb / frag), (long long)frag, (long long)d);
    int64_t stacks = DPT_CI(c, num_multi_gpu_tower_stacks);
    if (stacks > 1 && dpt_config_given(c, DPT_CFG_minibatch_buffer_size))
        return dpt_error(DPT_EINVAL,
                         "minibatch_buffer_size does not apply with num_multi_gpu_tower_stacks "
                         "= %lld: the learner's buffer holds the %lld stacks (RLlib's "
                         "multi-GPU learner)",
                         (long long)stacks, (long long)stacks);
    if (DPT_CI(c, init_num_passes) > DPT_CI(c, num_sgd_iter))
        return dpt_error(DPT_EINVAL, "init_num_passes = %lld exceeds num_sgd_iter = %lld",
                         (long long)DPT_CI(c, init_num_passes), (long long)DPT_CI(c, num_sgd_iter));
    if (stacks == 1 && DPT_CI(c, num_data_load_threads) > 1)
        return dpt_error(DPT_EINVAL,
                         "num_data_load_threads = %lld needs num_multi_gpu_tower_stacks > 1 "
                         "(with one stack the learner loads each batch itself)",
                         (long long)DPT_CI(c, num_data_load_threads));
    dpt_rl_policies_t pol;
    return dpt__rl_policies_from(c, &pol);
}

static size_t dpt__appo_threads(const dpt_config_t *c)
{
    return (size_t)DPT_CI(c, num_devices);
}

/* Rank 0, after the loop: the sampler ranks' STOP and goodbye. */
static int dpt__appo_end_roles(void *self)
{
    dpt__appo_trainer_t *t = self;
    return dpt_appo_end(t->appo);
}

/* Rank 0 learns and runs the loop alone; every other rank is a sampler
 * until rank 0 says stop. */
static int dpt__appo_plan(const dpt_config_t *c, int world, dpt__mpi_plan_t *p)
{
    (void)c;
    (void)world;
    p->mpi_threads = 1;
    p->role = dpt__appo_role;
    return DPT_OK;
}

const dpt__job_t dpt__appo_job = {
    .id = DPT_JOB_APPO,
    .ops = &dpt__appo_ops,
    .keys = DPT_JOB_APPO,
    .check = dpt__appo_check,
    .threads = dpt__appo_threads,
    .plan = dpt__appo_plan,
    .end = dpt__appo_end_roles,
};

const dpt__job_t dpt__impala_job = {
    .id = DPT_JOB_IMPALA,
    .ops = &dpt__appo_impala_ops,
    .keys = DPT_JOB_IMPALA,
    .check = dpt__appo_check,
    .threads = dpt__appo_threads,
    .plan = dpt__appo_plan,
    .end = dpt__appo_end_roles,
};
