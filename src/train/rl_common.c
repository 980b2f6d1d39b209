/*
 * What the RL trainers (ppo, ddppo, appo, impala) share: finding an env
 * (built-in or plug-in) and configuring it with the config's env_config
 * entries, the parts of the engines' settings that several jobs have (each
 * job's file assembles its engine's config from them), results under
 * RLlib's metric names, the policy's self-description, and evaluation of a
 * checkpoint.
 */
#include "dpt/arena.h"
#include "core/intern.h"
#include "dpt/env.h"
#include "dpt/extenv.h"
#include "dpt/rl.h"
#include "dpt/status.h"
#include "rl/env_internal.h"
#include "rl_internal.h"
#include "train_internal.h"

#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- envs ---------------------------------------------------------------------- */

int dpt__rl_find_env(const char *name, const dpt_env_class_t **out)
{
    *out = NULL;
    if (strncmp(name, DPT_EXT_ENV_PREFIX, strlen(DPT_EXT_ENV_PREFIX)) == 0)
        return dpt_error(DPT_EINVAL,
                         "env = %s: an external env, stepped by the program that trained it "
                         "(dpt/extenv.h; from Python, dpt.Trainer(config, env=...)); nothing "
                         "here can make it. Evaluate with that env: from Python, "
                         "policy = dpt.load(CHECKPOINT) and policy.predict(obs) in its loop "
                         "(docs/PYTHON.md)",
                         name);
    /* The rule config finalize uses to resolve plug-in paths: a built-in
     * name first, otherwise a path when it has a slash or ".so". */
    if (dpt__env_is_builtin(name) || (!strchr(name, '/') && !strstr(name, ".so"))) {
        const dpt_env_class_t *cls = dpt_env_find(name);
        if (!cls)
            return dpt_error(DPT_EINVAL, "env = %s: %s", name, dpt_last_error());
        *out = cls;
        return DPT_OK;
    }
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* The config names a plug-in that cannot be loaded: a config error
         * (exit 2), like an unknown built-in name. */
        const char *why = dlerror();
        if (access(name, F_OK) != 0) /* say what else the name could have meant */
            return dpt_error(DPT_EINVAL,
                             "env plug-in %s: no such file, and no built-in env has that name "
                             "(dpt check-env --help lists them)",
                             name);
        return dpt_error(DPT_EINVAL, "env plug-in %s: %s", name, why ? why : "cannot load");
    }
    /* ISO C has no cast from an object pointer to a function pointer. */
    union {
        void *p;
        int (*fn)(void);
    } abi;
    union {
        void *p;
        const dpt_env_class_t *(*fn)(void);
    } sym;
    /* The ABI number first: a plug-in built against other headers may lay
     * out dpt_env_class_t differently, so nothing else of it is touched.
     * One without the function predates the numbering (ABI 0). */
    abi.p = dlsym(h, DPT_ENV_PLUGIN_ABI_SYMBOL);
    int plugin_abi = abi.p ? abi.fn() : 0;
    if (plugin_abi != DPT_ENV_ABI_VERSION) {
        dlclose(h);
        return dpt_error(DPT_EINVAL,
                         "env plug-in %s was built for env ABI %d, this dpt has %d; rebuild it "
                         "against this dpt's headers%s",
                         name, plugin_abi, DPT_ENV_ABI_VERSION,
                         abi.p ? ""
                               : " (it does not export " DPT_ENV_PLUGIN_ABI_SYMBOL "(): "
                                 "end the env file with DPT_ENV_PLUGIN(class))");
    }
    sym.p = dlsym(h, DPT_ENV_PLUGIN_SYMBOL);
    if (!sym.p) {
        dlclose(h);
        return dpt_error(DPT_EINVAL, "env plug-in %s does not export %s()", name,
                         DPT_ENV_PLUGIN_SYMBOL);
    }
    const dpt_env_class_t *cls = sym.fn();
    int rc = cls ? dpt_env_class_check(cls) : DPT_EINVAL;
    if (rc) {
        if (cls)
            rc = dpt_error(rc, "env plug-in %s: %s", name, dpt_last_error());
        else
            rc = dpt_error(DPT_EINVAL, "env plug-in %s returned no class", name);
        dlclose(h);
        return rc;
    }
    /* The library stays loaded for the life of the process: the class, its
     * name and its callbacks live in it. */
    *out = cls;
    return DPT_OK;
}

const struct dpt_env_class *dpt__find_env(const char *name)
{
    const dpt_env_class_t *cls;
    return dpt__rl_find_env(name, &cls) ? NULL : cls;
}

int dpt__rl_make_env(const dpt_config_t *cfg, dpt_env_class_t **out)
{
    const dpt_env_class_t *cls;
    *out = NULL;
    int rc = dpt__rl_find_env(DPT_CS(cfg, env), &cls);
    return rc ? rc : dpt__config_env_class(cfg, cls, out);
}

int dpt__rl_make_env_for(const dpt_config_t *cfg, const dpt_trainer_env_t *env,
                         dpt_env_class_t **out)
{
    *out = NULL;
    if (!env || !env->ext)
        return dpt__rl_make_env(cfg, out);
    dpt_env_class_t *cls = NULL;
    int rc = dpt__ext_class(env->ext, &cls);
    if (rc)
        return rc;
    if (strcmp(DPT_CS(cfg, env), cls->name) != 0)
        rc = dpt_error(DPT_EINVAL,
                       "env = %s: the trainer was given the external env %s (set env = %s)",
                       DPT_CS(cfg, env), cls->name, cls->name);
    else if (dpt_config_applies(cfg, DPT_CFG_num_workers) && DPT_CI(cfg, num_workers) != 1)
        rc = dpt_error(DPT_EINVAL,
                       "num_workers = %lld: an external env serves one runner, the caller's "
                       "loop (set num_workers = 1)",
                       (long long)DPT_CI(cfg, num_workers));
    else if (dpt_config_env_count(cfg) > 0)
        rc = dpt_error(DPT_EINVAL, "env_config.%s: the external env %s takes no parameters",
                       dpt_config_env_name(cfg, 0), cls->name);
    if (rc) {
        dpt_env_class_destroy(cls);
        return rc;
    }
    *out = cls;
    return DPT_OK;
}

int dpt_config_make_env(const dpt_config_t *cfg, dpt_env_class_t **out)
{
    if (!cfg || !out)
        return dpt_error(DPT_EINVAL, "dpt_config_make_env: cfg and out must not be NULL");
    *out = NULL;
    if (!dpt_config_applies(cfg, DPT_CFG_env))
        return dpt_error(DPT_EINVAL, "job %s has no env (the RL jobs do)",
                         dpt_job_name(dpt_config_job(cfg)));
    return dpt__rl_make_env(cfg, out);
}

int dpt__config_resolve_env(dpt_config_t *c)
{
    if (!dpt_config_applies(c, DPT_CFG_env))
        return DPT_OK;
    const dpt_env_class_t *cls;
    dpt_env_class_t *made;
    int rc = dpt__rl_find_env(DPT_CS(c, env), &cls);
    /* The given entries are checked (and configure run) before the defaults
     * join them, so a refusal names what the user wrote. */
    if (!rc)
        rc = dpt__config_env_class(c, cls, &made);
    if (rc)
        return rc;
    dpt_env_class_destroy(made);
    return dpt__config_env_fill(c, cls);
}

/* ---- settings ------------------------------------------------------------------- */

/* The next comma-separated name of list `s` of key `key` at *pos (blanks
 * around it skipped) into name; 0 at the end of the list, 1 for a name,
 * DPT_EINVAL for an empty or malformed one. */
static int dpt__rl_next_name(const char *key, const char *s, size_t *pos, char *name)
{
    size_t i = *pos;
    if (!s[i])
        return 0;
    while (s[i] == ' ' || s[i] == '\t')
        i++;
    size_t b = i;
    while (s[i] && s[i] != ',' && s[i] != ' ' && s[i] != '\t')
        i++;
    size_t e = i;
    while (s[i] == ' ' || s[i] == '\t')
        i++;
    if (s[i] && s[i] != ',')
        return dpt_error(DPT_EINVAL, "%s = \"%s\": a blank inside a policy name", key, s);
    if (e == b)
        return dpt_error(DPT_EINVAL, "%s = \"%s\": an empty policy name", key, s);
    if (e - b >= DPT_RL_POLICY_NAME_MAX)
        return dpt_error(DPT_EINVAL, "%s = \"%s\": a policy name longer than %d bytes", key, s,
                         DPT_RL_POLICY_NAME_MAX - 1);
    for (size_t k = b; k < e; k++)
        if (!isalnum((unsigned char)s[k]) && s[k] != '_' && s[k] != '-')
            return dpt_error(DPT_EINVAL,
                             "%s = \"%s\": policy names are letters, digits, _ and - (\"%.*s\")",
                             key, s, (int)(e - b), s + b);
    memcpy(name, s + b, e - b);
    name[e - b] = '\0';
    *pos = s[i] == ',' ? i + 1 : i;
    if (s[i] == ',' && !s[i + 1])
        return dpt_error(DPT_EINVAL, "%s = \"%s\": an empty policy name", key, s);
    return 1;
}

/* The index of policy `name` of key `key`'s list, or DPT_EINVAL naming
 * the key and the known policies. */
static int dpt__rl_find_policy(const dpt_rl_policies_t *p, const char *key, const char *name)
{
    for (int k = 0; k < p->count; k++)
        if (strcmp(p->name[k], name) == 0)
            return k;
    char known[DPT_CONFIG_STR_MAX];
    size_t len = 0;
    known[0] = '\0';
    for (int k = 0; k < p->count && len < sizeof known; k++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", k ? ", " : "", p->name[k]);
    return dpt_error(DPT_EINVAL, "%s: unknown policy \"%s\" (policies: %s)", key, name, known);
}

int dpt__rl_policies_from(const dpt_config_t *c, dpt_rl_policies_t *out)
{
    memset(out, 0, sizeof *out);
    if (!dpt_config_applies(c, DPT_CFG_policies)) {
        out->count = 1;
        snprintf(out->name[0], sizeof out->name[0], "default_policy");
        out->train[0] = 1;
        return DPT_OK;
    }
    char name[DPT_RL_POLICY_NAME_MAX];
    const char *s = DPT_CS(c, policies);
    size_t pos = 0;
    int rc;
    while ((rc = dpt__rl_next_name("policies", s, &pos, name)) == 1) {
        if (strcmp(name, "round_robin") == 0)
            return dpt_error(DPT_EINVAL,
                             "policies = \"%s\": round_robin is policy_mapping's word, not a "
                             "policy name",
                             s);
        for (int k = 0; k < out->count; k++)
            if (strcmp(out->name[k], name) == 0)
                return dpt_error(DPT_EINVAL, "policies = \"%s\": policy \"%s\" is named twice", s,
                                 name);
        if (out->count == DPT_RL_MAX_POLICIES)
            return dpt_error(DPT_EINVAL, "policies = \"%s\": more than %d policies", s,
                             DPT_RL_MAX_POLICIES);
        memcpy(out->name[out->count++], name, sizeof name);
    }
    if (rc < 0)
        return rc;
    if (out->count == 0)
        return dpt_error(DPT_EINVAL, "policies: empty list (at least one policy name)");
    s = DPT_CS(c, policies_to_train);
    pos = 0;
    int any = 0;
    while ((rc = dpt__rl_next_name("policies_to_train", s, &pos, name)) == 1) {
        int k = dpt__rl_find_policy(out, "policies_to_train", name);
        if (k < 0)
            return k;
        if (out->train[k])
            return dpt_error(DPT_EINVAL, "policies_to_train = \"%s\": policy \"%s\" is named twice",
                             s, name);
        out->train[k] = 1;
        any = 1;
    }
    if (rc < 0)
        return rc;
    if (!any)
        memset(out->train, 1, (size_t)out->count);
    s = DPT_CS(c, policy_mapping);
    size_t envs = (size_t)DPT_CI(c, num_envs_per_worker);
    if (strcmp(s, "round_robin") != 0) {
        pos = 0;
        while ((rc = dpt__rl_next_name("policy_mapping", s, &pos, name)) == 1) {
            int k = dpt__rl_find_policy(out, "policy_mapping", name);
            if (k < 0)
                return k;
            out->map[out->mapping_len++] = (unsigned char)k;
        }
        if (rc < 0)
            return rc;
        if (out->mapping_len != envs)
            return dpt_error(DPT_EINVAL,
                             "policy_mapping lists %zu policies: an explicit mapping names the "
                             "policy of each of the num_envs_per_worker = %zu envs (or write "
                             "round_robin)",
                             out->mapping_len, envs);
    }
    for (int k = 0; k < out->count; k++) {
        size_t n = 0;
        for (size_t i = 0; i < envs; i++)
            n += dpt__rl_policy_of_env(out, i) == k;
        if (n == 0)
            return dpt_error(DPT_EINVAL,
                             "policy_mapping = %s: policy \"%s\" steps none of the "
                             "num_envs_per_worker = %zu envs",
                             s, out->name[k], envs);
    }
    return DPT_OK;
}

int dpt__rl_common_from(const dpt_config_t *c, dpt_rl_common_config_t *out)
{
    memset(out, 0, sizeof *out);
    if (!dpt_config_finalized(c))
        return dpt_error(DPT_EINVAL, "rl: the config is not finalized");
    out->seed = (uint64_t)DPT_CI(c, seed);
    out->num_envs = (size_t)DPT_CI(c, num_envs_per_worker);
    out->rollout_fragment_length = (size_t)DPT_CI(c, rollout_fragment_length);
    out->num_sgd_iter = (int)DPT_CI(c, num_sgd_iter);
    out->gamma = DPT_CF(c, gamma);
    out->lr = (float)DPT_CF(c, lr);
    /* Enum keys' choices come from the enums' own lists: the index is the
     * enum value. */
    out->anneal_lr = (dpt_schedule_kind_t)DPT_CI(c, lr_schedule) == DPT_SCHEDULE_LINEAR;
    out->adam_eps = (float)DPT_CF(c, adam_eps);
    out->grad_clip = DPT_CF(c, grad_clip);
    out->reward_scale = (float)DPT_CF(c, reward_scale);
    int nh = dpt__config_sizes(c, DPT_CFG_policy_hidden, out->policy.hidden, DPT_POLICY_MAX_HIDDEN);
    if (nh < 0)
        return nh;
    out->policy.nhidden = nh;
    /* The encoder of key network (its syntax was checked with the config;
     * its shapes are checked against the env's observation by the policy). */
    if (DPT_CS(c, network)[0]) {
        int rc = dpt_network_parse(DPT_CS(c, network), out->policy.encoder, DPT_NETWORK_MAX_LAYERS,
                                   &out->policy.nencoder);
        if (rc)
            return rc;
    }
    /* The LSTM keys apply to the jobs that train recurrent policies. */
    out->policy.use_lstm = dpt_config_applies(c, DPT_CFG_use_lstm) ? (int)DPT_CI(c, use_lstm) : 0;
    if (out->policy.use_lstm) {
        out->policy.lstm_cell_size = (size_t)DPT_CI(c, lstm_cell_size);
        out->policy.lstm_use_prev_action = (int)DPT_CI(c, lstm_use_prev_action);
        out->policy.lstm_use_prev_reward = (int)DPT_CI(c, lstm_use_prev_reward);
        out->policy.max_seq_len = (size_t)DPT_CI(c, max_seq_len);
        out->policy.prev_reward_scale = (float)DPT_CF(c, reward_scale);
    }
    out->total_timesteps = (uint64_t)DPT_CI(c, total_timesteps);
    out->comm_timeout_s = DPT_CF(c, comm_timeout_s);
    out->allreduce_algorithm = (dpt_comm_algorithm_t)DPT_CI(c, allreduce_algorithm);
    out->frozen = DPT_CS(c, frozen);
    return DPT_OK;
}

void dpt__rl_ppo_learn_from(const dpt_config_t *c, dpt_ppo_learn_config_t *out)
{
    memset(out, 0, sizeof *out);
    out->sgd_minibatch_size = (size_t)DPT_CI(c, sgd_minibatch_size);
    out->lambda = DPT_CF(c, lambda);
    out->loss.clip_param = (float)DPT_CF(c, clip_param);
    out->loss.vf_clip_param = (float)DPT_CF(c, vf_clip_param);
    out->loss.vf_coef = (float)DPT_CF(c, vf_loss_coeff);
    out->loss.ent_coef = (float)DPT_CF(c, entropy_coeff);
    out->normalize_advantages = (dpt_adv_norm_t)DPT_CI(c, normalize_advantages);
}

int dpt__rl_towers_from(const dpt_config_t *c, dpt_rl_towers_config_t *out)
{
    memset(out, 0, sizeof *out);
    out->num_devices = (int)DPT_CI(c, num_devices);
    int rc = dpt_towers_mode_parse(DPT_CS(c, towers_mode), &out->towers_mode);
    if (rc)
        return rc;
    out->reduce_sum = (dpt_reduce_op_t)DPT_CI(c, reduce_op) == DPT_REDUCE_SUM;
    out->async_scale = (float)DPT_CF(c, async_scale);
    if (dpt_config_applies(c, DPT_CFG_reduction_order) &&
        (dpt_reduction_order_t)DPT_CI(c, reduction_order) == DPT_REDUCTION_INVARIANT)
        out->chunk_rows = (size_t)DPT_CI(c, reduction_chunk);
    return DPT_OK;
}

int dpt__rl_job_error(const dpt_config_t *c, const char *engine)
{
    return dpt_error(DPT_EINVAL, "rl: the %s engine's settings asked of a config of job %s", engine,
                     dpt_job_name(dpt_config_job(c)));
}

int dpt__rl_default_config(dpt_job_t job, dpt_config_t **out)
{
    *out = NULL;
    dpt_config_t *c;
    int rc = dpt_config_create(&c);
    if (rc)
        return rc;
    char set[32];
    snprintf(set, sizeof set, "job=%s", dpt_job_name(job));
    if ((rc = dpt_config_set(c, set)) == 0 && (rc = dpt_config_finalize(c)) == 0) {
        *out = c;
        return DPT_OK;
    }
    dpt_config_destroy(c);
    return rc;
}

/* ---- results -------------------------------------------------------------------- */

/* The learner's figures, in the order of result.jsonl. */
static const char *const dpt__rl_learner_what[DPT__RL_LEARNER_METRICS] = {
    "cur_lr", "policy_loss",   "vf_loss",    "entropy",
    "kl",     "clip_fraction", "grad_gnorm", "vf_explained_var"};

const char *const dpt__rl_default_learner_names[DPT__RL_LEARNER_METRICS] = {
    "info/learner/default_policy/cur_lr",     "info/learner/default_policy/policy_loss",
    "info/learner/default_policy/vf_loss",    "info/learner/default_policy/entropy",
    "info/learner/default_policy/kl",         "info/learner/default_policy/clip_fraction",
    "info/learner/default_policy/grad_gnorm", "info/learner/default_policy/vf_explained_var"};

int dpt__rl_learner_metric_names(const char *policy, const char *names[DPT__RL_LEARNER_METRICS])
{
    for (int k = 0; k < DPT__RL_LEARNER_METRICS; k++) {
        char buf[DPT_RL_POLICY_NAME_MAX + 48];
        snprintf(buf, sizeof buf, "info/learner/%s/%s", policy, dpt__rl_learner_what[k]);
        if (!(names[k] = dpt__intern(buf)))
            return DPT_ENOMEM;
    }
    return DPT_OK;
}

void dpt__rl_add_learner_metrics(dpt_train_result_t *r, const char *const *names, double cur_lr,
                                 const dpt_appo_policy_stats_t *ls, double vf_explained_var)
{
    double v[DPT__RL_LEARNER_METRICS] = {cur_lr, ls->policy_loss, ls->vf_loss,   ls->entropy,
                                         ls->kl, ls->clipfrac,    ls->grad_norm, vf_explained_var};
    for (int k = 0; k < DPT__RL_LEARNER_METRICS; k++)
        dpt_train_result_add(r, names[k], v[k]);
}

void dpt__rl_fill_result(const dpt_rl_result_t *rr, uint64_t total_timesteps, int ddppo,
                         const char *const *learner_names, dpt_train_result_t *r)
{
    r->iteration = rr->iteration;
    r->timesteps_total = rr->timesteps_total;
    double p = total_timesteps ? (double)rr->timesteps_total / (double)total_timesteps : 1.0;
    r->progress = p < 1.0 ? p : 1.0;
    r->finished = rr->timesteps_total >= total_timesteps;
    r->reward_mean = rr->episode_reward_mean;
    r->episodes_in_window = rr->episodes_in_window;
    snprintf(r->line, sizeof r->line,
             "iter %llu  steps %llu/%llu  return %.1f (last 20: %.1f)  %.0f steps/s",
             (unsigned long long)rr->iteration, (unsigned long long)rr->timesteps_total,
             (unsigned long long)total_timesteps, rr->episode_reward_mean,
             rr->episode_reward_mean_20, rr->env_steps_per_s);
    /* The names and order of the 0.1 command's result.jsonl; time_total_s
     * is the run's to add. */
    dpt_train_result_add(r, "training_iteration", (double)rr->iteration);
    dpt_train_result_add(r, "timesteps_total", (double)rr->timesteps_total);
    dpt_train_result_add(r, "timesteps_this_iter", (double)rr->timesteps_this_iter);
    dpt_train_result_add(r, "episodes_total", (double)rr->episodes_total);
    dpt_train_result_add(r, "episodes_this_iter", (double)rr->episodes_this_iter);
    dpt_train_result_add(r, "episode_reward_mean", rr->episode_reward_mean);
    dpt_train_result_add(r, "episode_reward_min", rr->episode_reward_min);
    dpt_train_result_add(r, "episode_reward_max", rr->episode_reward_max);
    dpt_train_result_add(r, "episode_len_mean", rr->episode_len_mean);
    dpt_train_result_add(r, "episode_reward_mean_last20", rr->episode_reward_mean_20);
    dpt_train_result_add(r, "env_steps_per_s", rr->env_steps_per_s);
    dpt_train_result_add(r, "time_this_iter_s", rr->iteration_time_s);
    if (learner_names) {
        dpt_appo_policy_stats_t ls = {.policy_loss = rr->policy_loss,
                                      .vf_loss = rr->vf_loss,
                                      .entropy = rr->entropy,
                                      .kl = rr->kl,
                                      .clipfrac = rr->clipfrac,
                                      .grad_norm = rr->grad_norm};
        dpt__rl_add_learner_metrics(r, learner_names, rr->cur_lr, &ls, rr->vf_explained_var);
    }
    if (ddppo) {
        dpt_train_result_add(r, "info/preempted_workers", (double)rr->preempted_workers);
        dpt_train_result_add(r, "info/min_worker_rows", (double)rr->rows_min);
    }
    if (rr->sequences) {
        /* Recurrent policies: how the batch was cut and what the towers
         * left out (docs/RL.md). */
        dpt_train_result_add(r, "info/num_sequences", (double)rr->sequences);
        dpt_train_result_add(r, "info/rows_padded", (double)rr->rows_padded);
        dpt_train_result_add(r, "info/rows_dropped", (double)rr->rows_dropped);
    }
    snprintf(r->note, sizeof r->note, "%s", rr->note);
    dpt_train_result_add(r, "timing_breakdown/sample_time_ms", rr->sample_time_s * 1e3);
    dpt_train_result_add(r, "timing_breakdown/learn_time_ms", rr->learn_time_s * 1e3);
    /* RLlib's step counters, cumulative over the run (rl_trainers.h: how
     * each engine counts). */
    dpt_train_result_add(r, "num_env_steps_sampled", (double)rr->counters.env_steps_sampled);
    dpt_train_result_add(r, "num_env_steps_trained", (double)rr->counters.env_steps_trained);
    dpt_train_result_add(r, "num_agent_steps_sampled", (double)rr->counters.agent_steps_sampled);
    dpt_train_result_add(r, "num_agent_steps_trained", (double)rr->counters.agent_steps_trained);
}

/* ---- description and evaluation --------------------------------------------------- */

/* "k=3,num_tokens=2": the config's env_config entries (empty without any),
 * into a new string (caller frees); NULL when out of memory. */
static char *dpt__rl_env_config_text(const dpt_config_t *cfg)
{
    size_t n = dpt_config_env_count(cfg), bytes = 1;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(dpt_config_env_name(cfg, i)) + strlen(dpt_config_env_value(cfg, i)) + 2;
    char *text = malloc(bytes), *p = text;
    if (!text)
        return NULL;
    *p = '\0';
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s%s=%s", i ? "," : "", dpt_config_env_name(cfg, i),
                     dpt_config_env_value(cfg, i));
    return text;
}

int dpt__describe_policy(dpt_safetensors_writer_t *w, const struct dpt_policy *policy,
                         const dpt_config_t *cfg)
{
    const dpt_env_class_t *cls = dpt_policy_env_class(policy);
    size_t hidden[DPT_POLICY_MAX_HIDDEN];
    int nh = dpt__policy_hidden(policy, hidden);
    char sizes[DPT_POLICY_MAX_HIDDEN * 12] = "";
    for (int i = 0; i < nh; i++) {
        size_t len = strlen(sizes);
        snprintf(sizes + len, sizeof sizes - len, "%s%zu", i ? "," : "", hidden[i]);
    }
    int discrete = cls->action_kind == DPT_ACTION_DISCRETE;
    char *env_config = dpt__rl_env_config_text(cfg);
    if (!env_config)
        return dpt_error(DPT_ENOMEM, "checkpoint: cannot allocate the env_config text");
    int rc = dpt_safetensors_set_meta(w, "env", DPT_CS(cfg, env));
    if (!rc)
        rc = dpt_safetensors_set_meta(w, "env_config", env_config);
    free(env_config);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "obs_dim", cls->obs_dim);
    if (!rc)
        rc = dpt_safetensors_set_meta(w, "action_kind", discrete ? "discrete" : "continuous");
    if (!rc)
        rc = discrete ? dpt_safetensors_set_meta_u64(w, "num_actions", cls->num_actions)
                      : dpt_safetensors_set_meta_u64(w, "action_dim", cls->action_dim);
    if (!rc)
        rc = dpt_safetensors_set_meta(w, "policy_hidden", sizes);
    /* The recurrent part and the encoder, so a reader rebuilds the policy
     * from the file alone (docs/CHECKPOINTS.md). */
    const dpt_policy_spec_t *sp = dpt_policy_spec(policy);
    if (!rc && sp->nencoder) {
        dpt_shape_t sh = dpt__policy_obs_shape(policy);
        char shape[96];
        snprintf(shape, sizeof shape, "%zu,%zu,%zu", sh.c, sh.h, sh.w);
        rc = dpt_safetensors_set_meta(w, "network", DPT_CS(cfg, network));
        if (!rc)
            rc = dpt_safetensors_set_meta(w, "obs_shape", shape);
    }
    if (!rc)
        rc = dpt_safetensors_set_meta(w, "use_lstm", sp->use_lstm ? "true" : "false");
    if (!rc && sp->use_lstm) {
        rc = dpt_safetensors_set_meta_u64(w, "lstm_cell_size", sp->lstm_cell_size);
        if (!rc)
            rc = dpt_safetensors_set_meta(w, "lstm_use_prev_action",
                                          sp->lstm_use_prev_action ? "true" : "false");
        if (!rc)
            rc = dpt_safetensors_set_meta(w, "lstm_use_prev_reward",
                                          sp->lstm_use_prev_reward ? "true" : "false");
        /* The previous reward is fed times this: reward_scale. */
        char scale[32];
        snprintf(scale, sizeof scale, "%.9g", (double)sp->prev_reward_scale);
        if (!rc && sp->lstm_use_prev_reward)
            rc = dpt_safetensors_set_meta(w, "lstm_prev_reward_scale", scale);
    }
    return rc;
}

int dpt__rl_evaluate_into(dpt_policy_t *policy, const float *params, size_t episodes, uint64_t seed,
                          int stochastic, dpt_eval_result_t *out)
{
    if (episodes == 0)
        return DPT_OK;
    double ret, len;
    int rc = dpt_rl_evaluate(policy, params, seed, episodes, stochastic, &ret, &len);
    if (rc)
        return rc;
    out->count = episodes;
    out->stochastic = stochastic != 0;
    out->mean_return = ret;
    out->mean_length = len;
    return DPT_OK;
}

int dpt__rl_eval_checkpoint(const dpt_config_t *cfg, const dpt_safetensors_t *st, size_t episodes,
                            uint64_t seed, dpt_eval_result_t *out)
{
    dpt_rl_common_config_t common;
    dpt_rl_policies_t pl;
    dpt_env_class_t *cls = NULL;
    /* The env as trained: the checkpoint's config carries its env_config
     * entries (every parameter, defaults included), and --set may change
     * them. */
    int rc = dpt__rl_common_from(cfg, &common);
    if (!rc)
        rc = dpt__rl_policies_from(cfg, &pl);
    if (!rc)
        rc = dpt__rl_make_env(cfg, &cls);
    if (rc)
        return rc;
    dpt_policy_t *pol = NULL;
    dpt_arena_t p = {0};
    /* One env at a time: a recurrent policy steps sequences of one. */
    dpt_policy_spec_t spec = common.policy;
    if (spec.use_lstm)
        spec.max_seq_len = 1;
    /* Several policies (appo, impala): the main one's weights. */
    char prefix[DPT_RL_POLICY_NAME_MAX + 24] = "params.";
    if (pl.count > 1)
        snprintf(prefix, sizeof prefix, DPT_RL_POLICY_NS_FMT "params.",
                 pl.name[dpt__rl_policies_main(&pl)]);
    if ((rc = dpt_policy_create_ex(&pol, cls, &spec, 1)) != 0 ||
        (rc = dpt_arena_init(&p, dpt_policy_vars(pol)->total)) != 0 ||
        (rc = dpt_safetensors_load_arena(st, prefix, dpt_policy_vars(pol), p.data, p.count)) != 0)
        goto cleanup;
    if (episodes == 0)
        episodes = (size_t)DPT_CI(cfg, eval_episodes);
    rc = dpt__rl_evaluate_into(pol, p.data, episodes, seed, (int)DPT_CI(cfg, eval_stochastic), out);
cleanup:
    dpt_arena_deinit(&p);
    dpt_policy_destroy(pol);
    dpt_env_class_destroy(cls);
    return rc;
}

int dpt__rl_check_minibatch(const dpt_config_t *c, const char *whose)
{
    int64_t envs = DPT_CI(c, num_envs_per_worker), frag = DPT_CI(c, rollout_fragment_length);
    int64_t rows = envs * frag, mb = DPT_CI(c, sgd_minibatch_size);
    if (mb > rows)
        return dpt_error(DPT_EINVAL,
                         "sgd_minibatch_size %lld exceeds the %lld rows of a%s batch "
                         "(rollout_fragment_length %lld x num_envs_per_worker %lld)",
                         (long long)mb, (long long)rows, whose, (long long)frag, (long long)envs);
    return DPT_OK;
}
