/*
 * job = ppo: the PPO engine (src/rl/ppo.c: one sampler, learning through
 * the towers engine) behind the trainer interface of dpt/train.h.
 */
#include "dpt/arena.h"
#include "dpt/status.h"
#include "rl_internal.h"
#include "train_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct dpt__ppo_trainer {
    const dpt_config_t *cfg; /* borrowed: the trainer's own copy, valid until destroy */
    dpt_ppo_config_t rc;
    dpt_env_class_t *env; /* the configured env; the engine borrows it */
    dpt_ppo_t *ppo;
    dpt_arena_t eval_params; /* the current weights, for evaluate() */
} dpt__ppo_trainer_t;

static void dpt__ppo_destroy(void *self)
{
    dpt__ppo_trainer_t *t = self;
    if (!t)
        return;
    dpt_ppo_destroy(t->ppo);
    dpt_env_class_destroy(t->env);
    dpt_arena_deinit(&t->eval_params);
    free(t);
}

/* One sampler feeds one set of towers: several processes would each train
 * their own model and write the same run directory. */
static int dpt__ppo_plan(const dpt_config_t *c, int world, dpt__mpi_plan_t *p)
{
    (void)c;
    (void)world;
    (void)p;
    return dpt_error(DPT_EINVAL, "ppo does not run under mpirun (one sampler, one "
                                 "process); use job = ddppo to train across processes");
}

int dpt__ppo_config_from(const dpt_config_t *c, dpt_ppo_config_t *out)
{
    memset(out, 0, sizeof *out);
    if (dpt_config_job(c) != DPT_JOB_PPO)
        return dpt__rl_job_error(c, "ppo");
    int rc = dpt__rl_common_from(c, &out->common);
    if (!rc)
        rc = dpt__rl_towers_from(c, &out->towers);
    dpt__rl_ppo_learn_from(c, &out->learn);
    return rc;
}

int dpt__ppo_defaults(dpt_ppo_config_t *out)
{
    dpt_config_t *c;
    int rc = dpt__rl_default_config(DPT_JOB_PPO, &c);
    if (!rc)
        rc = dpt__ppo_config_from(c, out);
    dpt_config_destroy(c);
    out->common.frozen = NULL; /* it pointed into c; the defaults freeze nothing */
    return rc;
}

static int dpt__ppo_create(void **self, const dpt_config_t *cfg, const dpt_trainer_env_t *env)
{
    *self = NULL;
    if (env && env->comm && dpt_comm_size(env->comm) > 1)
        return dpt__ppo_plan(cfg, dpt_comm_size(env->comm), NULL);
    dpt__ppo_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return dpt_error(DPT_ENOMEM, "ppo: cannot allocate the trainer");
    t->cfg = cfg;
    int rc = dpt__ppo_config_from(cfg, &t->rc);
    if (!rc)
        rc = dpt__rl_make_env_for(cfg, env, &t->env);
    if (!rc)
        rc = dpt_ppo_create(&t->ppo, t->env, &t->rc);
    if (!rc)
        rc = dpt_arena_init(&t->eval_params, dpt_policy_vars(dpt_ppo_policy(t->ppo))->total);
    if (rc) {
        dpt__ppo_destroy(t);
        return rc;
    }
    *self = t;
    return DPT_OK;
}

static int dpt__ppo_iterate(void *self, dpt_train_result_t *r)
{
    dpt__ppo_trainer_t *t = self;
    dpt_rl_result_t rr;
    int rc = dpt_ppo_train(t->ppo, &rr);
    if (rc)
        return rc;
    dpt__rl_fill_result(&rr, t->rc.common.total_timesteps, 0, dpt__rl_default_learner_names, r);
    return DPT_OK;
}

static int dpt__ppo_checkpoint(void *self, dpt_safetensors_writer_t *w)
{
    dpt__ppo_trainer_t *t = self;
    /* One process: only a writer's owner has anything to do. */
    return w ? dpt_ppo_checkpoint(t->ppo, w) : DPT_OK;
}

static int dpt__ppo_restore(void *self, const dpt_safetensors_t *st)
{
    dpt__ppo_trainer_t *t = self;
    return dpt_ppo_restore(t->ppo, st);
}

static const dpt_vartable_t *dpt__ppo_vars(void *self)
{
    dpt__ppo_trainer_t *t = self;
    return dpt_policy_vars(dpt_ppo_policy(t->ppo));
}

static int dpt__ppo_get_weights(void *self, float *out, size_t count)
{
    dpt__ppo_trainer_t *t = self;
    return dpt_ppo_get_weights(t->ppo, out, count);
}

static int dpt__ppo_set_weights(void *self, const float *in, size_t count)
{
    dpt__ppo_trainer_t *t = self;
    return dpt_ppo_set_weights(t->ppo, in, count);
}

static int dpt__ppo_evaluate(void *self, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    dpt__ppo_trainer_t *t = self;
    int rc = dpt_ppo_get_weights(t->ppo, t->eval_params.data, t->eval_params.count);
    if (rc)
        return rc;
    return dpt__rl_evaluate_into(dpt_ppo_policy(t->ppo), t->eval_params.data, episodes, seed,
                                 (int)DPT_CI(t->cfg, eval_stochastic), out);
}

static int dpt__ppo_describe(void *self, dpt_safetensors_writer_t *w)
{
    dpt__ppo_trainer_t *t = self;
    return dpt__describe_policy(w, dpt_ppo_policy(t->ppo), t->cfg);
}

static const dpt_trainer_ops_t dpt__ppo_ops = {
    .job = DPT_JOB_PPO,
    .create = dpt__ppo_create,
    .destroy = dpt__ppo_destroy,
    .iterate = dpt__ppo_iterate,
    .checkpoint = dpt__ppo_checkpoint,
    .restore = dpt__ppo_restore,
    .vars = dpt__ppo_vars,
    .get_weights = dpt__ppo_get_weights,
    .set_weights = dpt__ppo_set_weights,
    .evaluate = dpt__ppo_evaluate,
    .describe = dpt__ppo_describe,
    .eval_checkpoint = dpt__rl_eval_checkpoint,
};

static int dpt__ppo_check(const dpt_config_t *c)
{
    int rc = dpt__rl_check_minibatch(c, "");
    if (rc)
        return rc;
    int64_t rows = DPT_CI(c, num_envs_per_worker) * DPT_CI(c, rollout_fragment_length);
    int64_t tb = DPT_CI(c, train_batch_size), mb = DPT_CI(c, sgd_minibatch_size);
    if (tb != 0 && tb != rows)
        return dpt_error(DPT_EINVAL,
                         "train_batch_size %lld must equal num_envs_per_worker x "
                         "rollout_fragment_length = %lld (or be left out)",
                         (long long)tb, (long long)rows);
    if ((dpt_reduction_order_t)DPT_CI(c, reduction_order) == DPT_REDUCTION_INVARIANT) {
        if (DPT_CI(c, use_lstm))
            return dpt_error(DPT_EINVAL, "reduction_order = invariant takes feed-forward policies "
                                         "(use_lstm = false)");
        return dpt__config_reduction_check(c, mb, "sgd_minibatch_size", DPT_CI(c, num_devices),
                                           "num_devices");
    }
    int64_t d = DPT_CI(c, num_devices);
    if (mb % d)
        return dpt_error(DPT_EINVAL,
                         "sgd_minibatch_size %lld must be divisible by "
                         "num_devices %lld",
                         (long long)mb, (long long)d);
    return DPT_OK;
}

static size_t dpt__ppo_threads(const dpt_config_t *c)
{
    return (size_t)DPT_CI(c, num_devices);
}

const dpt__job_t dpt__ppo_job = {
    .id = DPT_JOB_PPO,
    .ops = &dpt__ppo_ops,
    .keys = DPT_JOB_PPO,
    .check = dpt__ppo_check,
    .threads = dpt__ppo_threads,
    .plan = dpt__ppo_plan,
};
