/*
 * The trainer interface (dpt/train.h): dispatch to a job's ops, and the
 * self-description every checkpoint carries.
 */
#include "dpt/dpt.h"
#include "dpt/gemm.h"
#include "dpt/status.h"
#include "dpt/train.h"
#include "dpt_config.h"
#include "train_internal.h"
#include "rl/env_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dpt_trainer {
    const dpt_trainer_ops_t *ops;
    void *self;
    dpt_config_t *cfg;
    dpt_trainer_env_t env;
    uint64_t iteration, timesteps; /* of the last result (or the restored checkpoint) */
};

void dpt_train_result_add(dpt_train_result_t *r, const char *name, double value)
{
    if (r->nmetrics < DPT_TRAIN_MAX_METRICS) {
        r->metrics[r->nmetrics].name = name;
        r->metrics[r->nmetrics].value = value;
        r->nmetrics++;
    }
}

double dpt_train_result_get(const dpt_train_result_t *r, const char *name)
{
    for (size_t i = 0; i < r->nmetrics; i++)
        if (strcmp(r->metrics[i].name, name) == 0)
            return r->metrics[i].value;
    return NAN;
}

int dpt_trainer_create(dpt_trainer_t **out, const dpt_config_t *cfg, const dpt_trainer_env_t *env)
{
    *out = NULL;
    if (!dpt_config_finalized(cfg))
        return dpt_error(DPT_EINVAL, "trainer: the config is not finalized "
                                     "(call dpt_config_finalize first)");
    const dpt_trainer_ops_t *ops = dpt_trainer_ops(dpt_config_job(cfg));
    if (!ops)
        return dpt_error(DPT_EINVAL, "trainer: unknown job %d", (int)dpt_config_job(cfg));
    /* Rank and world come from the communicator alone. */
    if (env && env->use_mpi && !env->comm)
        return dpt_error(DPT_EINVAL,
                         "trainer: use_mpi = 1 needs the ranks' communicator in "
                         "dpt_trainer_env_t.comm (dpt_comm_mpi_create; dpt_train_run passes it)");
    if (env && env->ext && !DPT_JOB_IS_RL(ops->job))
        return dpt_error(DPT_EINVAL,
                         "job %s has no env: an external env is for ppo, ddppo, "
                         "appo and impala",
                         dpt_job_name(ops->job));
    dpt_trainer_t *t = calloc(1, sizeof *t);
    if (!t)
        return dpt_error(DPT_ENOMEM, "trainer: cannot allocate");
    int rc = dpt_config_clone(&t->cfg, cfg);
    if (rc) {
        free(t);
        return rc;
    }
    /* The trainer's copy names every env parameter (defaults included), so
     * its checkpoints rebuild the same env. (An external env has none: the
     * job checks that the config names it.) */
    if ((!env || !env->ext) && (rc = dpt__config_resolve_env(t->cfg)) != 0) {
        dpt_config_destroy(t->cfg);
        free(t);
        return rc;
    }
    if (env)
        t->env = *env;
    t->ops = ops;
    if ((rc = ops->create(&t->self, t->cfg, &t->env)) != 0) {
        dpt_config_destroy(t->cfg);
        free(t);
        return rc;
    }
    *out = t;
    return DPT_OK;
}

void dpt_trainer_destroy(dpt_trainer_t *t)
{
    if (!t)
        return;
    /* A runner of an external env may wait for the caller (an appo
     * sampler between iterations): it ends with DPT_ECLOSED. */
    if (t->env.ext)
        dpt__ext_cancel(t->env.ext, 1);
    if (t->self)
        t->ops->destroy(t->self);
    if (t->env.ext)
        dpt__ext_cancel(t->env.ext, 0);
    dpt_config_destroy(t->cfg);
    free(t);
}

int dpt__trainer_end(dpt_trainer_t *t)
{
    const dpt__job_t *job = dpt__job_get(t->ops->job);
    return job && job->end ? job->end(t->self) : DPT_OK;
}

int dpt__trainer_end_abandons(const dpt_trainer_t *t)
{
    const dpt__job_t *job = dpt__job_get(t->ops->job);
    return job && job->end_abandons;
}

int dpt_trainer_iterate(dpt_trainer_t *t, dpt_train_result_t *r)
{
    memset(r, 0, sizeof *r);
    r->reward_mean = NAN;
    int rc = t->ops->iterate(t->self, r);
    if (rc)
        return rc;
    t->iteration = r->iteration;
    t->timesteps = r->timesteps_total;
    return DPT_OK;
}

int dpt__train_frozen(const dpt_config_t *c, const dpt_vartable_t *vars, unsigned char **mask)
{
    *mask = NULL;
    if (!dpt_config_applies(c, DPT_CFG_frozen) || !DPT_CS(c, frozen)[0])
        return DPT_OK;
    unsigned char *m = malloc(vars->nvars ? vars->nvars : 1);
    if (!m)
        return dpt_error(DPT_ENOMEM, "frozen: cannot allocate %zu flags", vars->nvars);
    int rc = dpt_vartable_select(vars, DPT_CS(c, frozen), m, NULL);
    if (rc) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", dpt_last_error());
        free(m);
        return dpt_error(rc, "frozen: %s", msg);
    }
    *mask = m;
    return DPT_OK;
}

/* Metadata "frozen": the names of the variables the key frozen selects,
 * comma-separated in table order ("" when none). */
static int dpt__trainer_frozen_meta(dpt_trainer_t *t, dpt_safetensors_writer_t *w)
{
    const dpt_vartable_t *vars = t->ops->vars ? t->ops->vars(t->self) : NULL;
    unsigned char *mask = NULL;
    int rc = vars ? dpt__train_frozen(t->cfg, vars, &mask) : DPT_OK;
    if (rc || !mask)
        return rc ? rc : dpt_safetensors_set_meta(w, "frozen", "");
    size_t len = 1;
    for (size_t i = 0; i < vars->nvars; i++)
        len += mask[i] ? strlen(vars->vars[i].name) + 1 : 0;
    char *text = malloc(len);
    if (text) {
        text[0] = '\0';
        for (size_t i = 0, at = 0; i < vars->nvars; i++)
            if (mask[i])
                at += (size_t)snprintf(text + at, len - at, "%s%s", at ? "," : "",
                                       vars->vars[i].name);
        rc = dpt_safetensors_set_meta(w, "frozen", text);
    } else {
        rc = dpt_error(DPT_ENOMEM, "checkpoint: cannot allocate the frozen variables' names");
    }
    free(text);
    free(mask);
    return rc;
}

/* "avx2,fma,avx512f": the instruction-set extensions this CPU reports
 * that dpt's kernels care about. */
static void dpt__trainer_cpu_flags(char *buf, size_t n)
{
    buf[0] = '\0';
#if defined(__x86_64__) || defined(__i386__)
    static const struct {
        const char *name;
        int on;
    } f[] = {{"sse4.2", 0}, {"avx", 0}, {"avx2", 0}, {"fma", 0}, {"avx512f", 0}};
    int on[5];
    __builtin_cpu_init();
    on[0] = __builtin_cpu_supports("sse4.2");
    on[1] = __builtin_cpu_supports("avx");
    on[2] = __builtin_cpu_supports("avx2");
    on[3] = __builtin_cpu_supports("fma");
    on[4] = __builtin_cpu_supports("avx512f");
    for (size_t i = 0; i < 5; i++)
        if (on[i]) {
            size_t len = strlen(buf);
            snprintf(buf + len, n - len, "%s%s", len ? "," : "", f[i].name);
        }
#else
    snprintf(buf, n, "unknown");
#endif
}

int dpt_trainer_checkpoint(dpt_trainer_t *t, dpt_safetensors_writer_t *w)
{
    int rc = t->ops->checkpoint(t->self, w);
    if (rc || !w)
        return rc;
    if ((rc = t->ops->describe(t->self, w)) != 0 || (rc = dpt__trainer_frozen_meta(t, w)) != 0)
        return rc;
    size_t n = dpt_config_format(t->cfg, NULL, 0);
    char *text = malloc(n + 1);
    if (!text)
        return dpt_error(DPT_ENOMEM, "checkpoint: cannot allocate the config text");
    dpt_config_format(t->cfg, text, n + 1);
    char feats[64] = "", cpu[96];
    for (int f = 0; f < DPT_FEATURE_COUNT; f++)
        if (dpt_has_feature((dpt_feature_t)f)) {
            size_t len = strlen(feats);
            snprintf(feats + len, sizeof feats - len, "%s%s", len ? "," : "",
                     dpt_feature_name((dpt_feature_t)f));
        }
    dpt__trainer_cpu_flags(cpu, sizeof cpu);
    if ((rc = dpt_safetensors_set_meta(w, "config", text)) == 0 &&
        (rc = dpt_safetensors_set_meta(w, "job", dpt_job_name(t->ops->job))) == 0 &&
        (rc = dpt_safetensors_set_meta(w, "dpt_version", dpt_version())) == 0 &&
        (rc = dpt_safetensors_set_meta(w, "dpt_commit", DPT_COMMIT)) == 0 &&
        (rc = dpt_safetensors_set_meta(w, "features", feats)) == 0 &&
        (rc = dpt_safetensors_set_meta(w, "gemm", dpt_gemm_describe(dpt_gemm_get_backend()))) ==
            0 &&
        (rc = dpt_safetensors_set_meta(w, "cpu_flags", cpu)) == 0 &&
        (rc = dpt_safetensors_set_meta_u64(w, "training_iteration", t->iteration)) == 0)
        rc = dpt_safetensors_set_meta_u64(w, "timesteps_total", t->timesteps);
    free(text);
    return rc;
}

int dpt_trainer_restore(dpt_trainer_t *t, const dpt_safetensors_t *st)
{
    const char *job = dpt_safetensors_meta(st, "job");
    if (!job || !dpt_safetensors_meta(st, "config"))
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s has no dpt run metadata (written by dpt "
                         "before 0.2, or not by dpt train)",
                         dpt_safetensors_path(st));
    if (strcmp(job, dpt_job_name(t->ops->job)) != 0)
        return dpt_error(DPT_EINVAL, "checkpoint %s is a %s checkpoint, this trainer is %s",
                         dpt_safetensors_path(st), job, dpt_job_name(t->ops->job));
    uint64_t it = 0, ts = 0;
    int rc = dpt_safetensors_meta_u64(st, "training_iteration", &it);
    if (!rc)
        rc = dpt_safetensors_meta_u64(st, "timesteps_total", &ts);
    if (!rc)
        rc = t->ops->restore(t->self, st);
    if (rc)
        return rc;
    t->iteration = it;
    t->timesteps = ts;
    return DPT_OK;
}

const dpt_vartable_t *dpt_trainer_vars(dpt_trainer_t *t)
{
    return t->ops->vars(t->self);
}

int dpt_trainer_get_weights(dpt_trainer_t *t, float *out, size_t count)
{
    return t->ops->get_weights(t->self, out, count);
}

int dpt_trainer_set_weights(dpt_trainer_t *t, const float *in, size_t count)
{
    const dpt_vartable_t *vars = t->ops->vars(t->self);
    if (!t->ops->set_weights)
        return dpt_error(DPT_ENOTSUP,
                         "%s: set_weights is not supported (the parameters live in its services); "
                         "restore a checkpoint instead",
                         dpt_job_name(t->ops->job));
    if (!in || count != vars->total)
        return dpt_error(DPT_EINVAL, "%s: set_weights of %zu floats, the model has %zu",
                         dpt_job_name(t->ops->job), in ? count : 0, vars->total);
    for (size_t i = 0; i < count; i++) {
        if (isfinite(in[i]))
            continue;
        /* Name the variable (or the padding after one) it falls in. */
        const dpt_var_t *var = NULL;
        for (size_t v = 0; v < vars->nvars && vars->vars[v].offset <= i; v++)
            var = &vars->vars[v];
        if (var && i < var->offset + var->count)
            return dpt_error(DPT_ENUMERIC, "%s: set_weights: %s[%zu] is %g; nothing changed",
                             dpt_job_name(t->ops->job), var->name, i - var->offset, (double)in[i]);
        return dpt_error(DPT_ENUMERIC,
                         "%s: set_weights: float %zu (padding after %s) is %g; nothing changed",
                         dpt_job_name(t->ops->job), i, var ? var->name : "nothing", (double)in[i]);
    }
    return t->ops->set_weights(t->self, in, count);
}

int dpt_trainer_evaluate(dpt_trainer_t *t, size_t episodes, uint64_t seed, dpt_eval_result_t *out)
{
    out->count = 0;
    out->stochastic = 0;
    out->mean_return = out->mean_length = out->loss = out->accuracy = NAN;
    out->rmse = out->mae = out->r2 = NAN;
    return t->ops->evaluate(t->self, episodes, seed, out);
}

const dpt_config_t *dpt_trainer_config(const dpt_trainer_t *t)
{
    return t->cfg;
}

int dpt_trainer_rank(const dpt_trainer_t *t)
{
    return t->env.comm ? dpt_comm_rank(t->env.comm) : 0;
}
