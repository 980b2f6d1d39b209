/*
 * What the RL engines share (rl_engine.h): the rules and the learning
 * phase of PPO and DD-PPO, the towers settings of PPO's and APPO's
 * learners, the learning rate schedule, per-minibatch advantage
 * normalization, the evaluation episodes of every RL job, the checkpoint
 * metadata of the run's step counters and the learner's frozen variables.
 */
#include "rl_engine.h"
#include "dpt/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dpt__rl_check_config(const dpt_rl_common_config_t *c, const dpt_ppo_learn_config_t *l,
                         size_t rows_per_batch)
{
    if (c->num_envs < 1 || c->rollout_fragment_length < 1)
        return dpt_error(DPT_EINVAL, "rl: num_envs and rollout_fragment_length must be >= 1");
    if (l->sgd_minibatch_size < 1 || l->sgd_minibatch_size > rows_per_batch)
        return dpt_error(DPT_EINVAL,
                         "rl: sgd_minibatch_size %zu must be in [1, %zu] (the rows of a batch)",
                         l->sgd_minibatch_size, rows_per_batch);
    if (c->num_sgd_iter < 1)
        return dpt_error(DPT_EINVAL, "rl: num_sgd_iter must be >= 1");
    if (!(c->gamma >= 0.0 && c->gamma <= 1.0) || !(l->lambda >= 0.0 && l->lambda <= 1.0))
        return dpt_error(DPT_EINVAL, "rl: gamma and lambda must be in [0, 1]");
    if (!(c->lr >= 0.0f) || !(c->adam_eps > 0.0f))
        return dpt_error(DPT_EINVAL, "rl: lr must be >= 0 and adam_eps > 0");
    if (!(c->reward_scale > 0.0f) || !isfinite(c->reward_scale))
        return dpt_error(DPT_EINVAL, "rl: reward_scale must be a positive number");
    return DPT_OK;
}

int dpt__rl_policies(const dpt_env_class_t *cls, const dpt_rl_common_config_t *cfg,
                     size_t per_device, dpt_policy_t **actor, dpt_policy_t **learner)
{
    *actor = *learner = NULL;
    dpt_policy_spec_t act = cfg->policy, learn = cfg->policy;
    size_t rows = per_device;
    if (learn.use_lstm) {
        /* Acting is one step of every env at a time; training takes whole
         * sequences, at least one per device (the towers' raise). */
        size_t L = learn.max_seq_len, q = per_device / L;
        act.max_seq_len = 1;
        rows = (q ? q : 1) * L;
    }
    int rc = dpt_policy_create_ex(actor, cls, &act, cfg->num_envs);
    if (!rc)
        rc = dpt_policy_create_ex(learner, cls, &learn, rows);
    return rc;
}

int dpt__rl_layout(const dpt_policy_t *learner, dpt_batch_t *lay)
{
    const dpt_policy_spec_t *sp = dpt_policy_spec(learner);
    int rc =
        dpt_ppo_batch(lay, dpt_policy_env_class(learner), 0, NULL, NULL, NULL, NULL, NULL, NULL);
    if (!rc && sp->use_lstm)
        rc = dpt_ppo_batch_seq(lay, learner, sp->max_seq_len, NULL, NULL, NULL, NULL, NULL);
    return rc;
}

dpt_towers_config_t dpt__rl_towers_config(const dpt_rl_common_config_t *cfg,
                                          const dpt_rl_towers_config_t *t, size_t per_device,
                                          size_t load_rows)
{
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.num_devices = t->num_devices;
    tc.mode = t->towers_mode;
    tc.max_per_device_batch_size = per_device;
    tc.max_load_rows = load_rows;
    tc.grad_clip = cfg->grad_clip;
    tc.comm_timeout_s = cfg->comm_timeout_s;
    tc.comm_algorithm = cfg->allreduce_algorithm;
    tc.reduce_sum = t->reduce_sum;
    tc.async_scale = t->async_scale;
    tc.optim = dpt_optim_defaults(DPT_OPTIM_ADAM);
    tc.optim.eps = cfg->adam_eps;
    return tc;
}

int dpt__rl_frozen(const dpt_rl_common_config_t *c, const dpt_policy_t *learner,
                   unsigned char *no_grad, dpt_towers_config_t *tc)
{
    if (!c->frozen || !c->frozen[0])
        return DPT_OK;
    const dpt_vartable_t *vars = dpt_policy_vars(learner);
    /* Two MLPs of at most DPT_POLICY_MAX_HIDDEN + 1 linear layers, the
     * LSTM's 3 variables and log_std: unreachable today, kept for the
     * buffer's sake. */
    _Static_assert(DPT__RL_MAX_VARS >= 4 * (DPT_POLICY_MAX_HIDDEN + 1) + 4, "DPT__RL_MAX_VARS");
    if (vars->nvars > DPT__RL_MAX_VARS)
        return dpt_error(DPT_EINVAL, "frozen: the policy has %zu variables, more than %d",
                         vars->nvars, DPT__RL_MAX_VARS);
    int rc = dpt_vartable_select(vars, c->frozen, no_grad, NULL);
    if (rc) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", dpt_last_error());
        return dpt_error(rc, "frozen: %s", msg);
    }
    tc->no_grad = no_grad;
    return DPT_OK;
}

float dpt__rl_lr(const dpt_rl_common_config_t *c, uint64_t done)
{
    if (!c->anneal_lr || c->total_timesteps == 0)
        return c->lr;
    double frac = 1.0 - (double)done / (double)c->total_timesteps;
    return (float)((double)c->lr * (frac > 0.0 ? frac : 0.0));
}

void dpt__rl_result_episodes(dpt_rl_result_t *res, const dpt__episode_window_t *w)
{
    dpt__episode_stats_t es;
    dpt__episode_window_stats(w, &es);
    res->episode_reward_mean = es.reward_mean;
    res->episode_reward_min = es.reward_min;
    res->episode_reward_max = es.reward_max;
    res->episode_len_mean = es.len_mean;
    res->episode_reward_mean_20 = es.reward_mean_20;
    res->episodes_in_window = es.count;
}

/* The checkpoint metadata keys of dpt_rl_counters_t's fields, in order:
 * RLlib's names. */
static const char *const dpt__rl_counter_keys[4] = {
    "num_env_steps_sampled", "num_env_steps_trained", "num_agent_steps_sampled",
    "num_agent_steps_trained"};

int dpt__rl_counters_save(dpt_safetensors_writer_t *w, const dpt_rl_counters_t *c)
{
    const uint64_t v[4] = {c->env_steps_sampled, c->env_steps_trained, c->agent_steps_sampled,
                           c->agent_steps_trained};
    int rc = DPT_OK;
    for (int k = 0; !rc && k < 4; k++)
        rc = dpt_safetensors_set_meta_u64(w, dpt__rl_counter_keys[k], v[k]);
    return rc;
}

int dpt__rl_counters_load(const dpt_safetensors_t *st, uint64_t timesteps, dpt_rl_counters_t *c)
{
    uint64_t v[4];
    for (int k = 0; k < 4; k++) {
        v[k] = timesteps;
        if (!dpt_safetensors_meta(st, dpt__rl_counter_keys[k]))
            continue; /* written before dpt kept the counters */
        int rc = dpt_safetensors_meta_u64(st, dpt__rl_counter_keys[k], &v[k]);
        if (rc)
            return rc;
    }
    c->env_steps_sampled = v[0];
    c->env_steps_trained = v[1];
    c->agent_steps_sampled = v[2];
    c->agent_steps_trained = v[3];
    return DPT_OK;
}

int dpt__rl_make_batch(dpt__rollout_t *ro, const dpt_policy_t *learner, size_t L, dpt_rng_t *rng,
                       size_t *perm, dpt__chunk_t *chunks, dpt__rl_batch_t *bb, dpt_batch_t *b,
                       size_t *nseq)
{
    size_t rows = ro->steps * ro->N;
    *nseq = 0;
    if (!L) {
        /* Shuffle the rows once; the epochs then permute whole minibatches. */
        for (size_t i = 0; i < rows; i++)
            perm[i] = i;
        dpt_rng_shuffle(rng, perm, rows);
        dpt__rollout_gather(ro, perm, rows, bb);
        return dpt_ppo_batch(b, dpt_policy_env_class(learner), rows, bb->obs, bb->act, bb->logp,
                             bb->adv, bb->ret, bb->val);
    }
    /* Sequences instead of rows: cut, shuffle whole sequences, pad. */
    size_t n = dpt__rollout_chunk(ro, L, chunks);
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    dpt_rng_shuffle(rng, perm, n);
    dpt__rollout_gather_seq(ro, chunks, perm, n, L, bb);
    *nseq = n;
    int rc = dpt_ppo_batch(b, dpt_policy_env_class(learner), n * L, bb->obs, bb->act, bb->logp,
                           bb->adv, bb->ret, bb->val);
    return rc ? rc
              : dpt_ppo_batch_seq(b, learner, L, bb->seq_lens, bb->h0, bb->c0, bb->prev_act,
                                  bb->prev_rew);
}

int dpt__rl_learn(dpt_towers_t *towers, int epochs, size_t loaded, size_t visit, size_t per_device,
                  float lr, dpt_rng_t *rng, size_t *order, dpt__rl_learn_stats_t *out)
{
    double sums[6] = {0};
    size_t nsteps = 0;
    memset(out, 0, sizeof *out);
    for (int e = 0; e < epochs; e++) {
        for (size_t j = 0; j < loaded; j++)
            order[j] = j;
        dpt_rng_shuffle(rng, order, loaded);
        for (size_t j = 0; j < visit; j++) {
            dpt_towers_stats_t st;
            int rc = dpt_towers_optimize(towers, 0, order[j] * per_device, lr, &st);
            if (rc)
                return rc;
            sums[0] += st.extra[DPT_PPO_STAT_POLICY_LOSS];
            sums[1] += st.extra[DPT_PPO_STAT_VF_LOSS];
            sums[2] += st.extra[DPT_PPO_STAT_ENTROPY];
            sums[3] += st.extra[DPT_PPO_STAT_KL];
            sums[4] += st.extra[DPT_PPO_STAT_CLIPFRAC];
            sums[5] += st.grad_norm;
            nsteps++;
        }
    }
    double inv = nsteps ? 1.0 / (double)nsteps : 0.0;
    out->policy_loss = sums[0] * inv;
    out->vf_loss = sums[1] * inv;
    out->entropy = sums[2] * inv;
    out->kl = sums[3] * inv;
    out->clipfrac = sums[4] * inv;
    out->grad_norm = sums[5] * inv;
    return DPT_OK;
}

void dpt__rl_normalize_minibatches(float *adv, size_t devices, size_t rows_per_device,
                                   size_t per_device)
{
    dpt__rl_normalize_minibatches_masked(adv, NULL, devices, rows_per_device, per_device);
}

void dpt__rl_normalize_minibatches_masked(float *adv, const uint8_t *mask, size_t devices,
                                          size_t rows_per_device, size_t per_device)
{
    if (devices * per_device == 0)
        return;
    /* The sums run device by device, row by row: with one device and no
     * mask this is dpt_normalize() of each contiguous minibatch, bit for
     * bit. */
    for (size_t o = 0; o + per_device <= rows_per_device; o += per_device) {
        double m = 0.0, s = 0.0, n = 0.0;
        for (size_t d = 0; d < devices; d++)
            for (size_t k = 0; k < per_device; k++) {
                size_t i = d * rows_per_device + o + k;
                if (!mask || mask[i]) {
                    m += (double)adv[i];
                    n += 1.0;
                }
            }
        if (n == 0.0)
            continue;
        m /= n;
        for (size_t d = 0; d < devices; d++)
            for (size_t k = 0; k < per_device; k++) {
                size_t i = d * rows_per_device + o + k;
                if (!mask || mask[i]) {
                    double x = (double)adv[i] - m;
                    s += x * x;
                }
            }
        double sd = sqrt(s / n) + 1e-8;
        for (size_t d = 0; d < devices; d++)
            for (size_t k = 0; k < per_device; k++) {
                size_t i = d * rows_per_device + o + k;
                if (!mask || mask[i])
                    adv[i] = (float)(((double)adv[i] - m) / sd);
            }
    }
}

int dpt_rl_evaluate(dpt_policy_t *policy, const float *params, uint64_t seed, size_t episodes,
                    int stochastic, double *mean_return, double *mean_length)
{
    *mean_return = *mean_length = 0.0;
    if (episodes == 0)
        return DPT_OK;
    const dpt_env_class_t *cls = dpt_policy_env_class(policy);
    dpt_vecenv_t *env;
    /* Evaluation envs use their own rank so they never replay training envs. */
    int rc = dpt_vecenv_create(&env, cls, 1, seed, 0x45564131u);
    if (rc)
        return rc;
    /* One env: the observation, the action and the previous action
     * (action_dim floats each for box actions) and a recurrent policy's
     * state, in one buffer (the class check bounds the dims, so the sums
     * cannot overflow). */
    int discrete = cls->action_kind == DPT_ACTION_DISCRETE;
    size_t ad = discrete ? 0 : cls->action_dim, ss = dpt_policy_state_size(policy);
    float *obs = calloc(cls->obs_dim + 2 * ad + ss, sizeof *obs);
    if (!obs) {
        dpt_vecenv_destroy(env);
        return dpt_error(DPT_ENOMEM, "evaluation: cannot allocate the observation of \"%s\"",
                         cls->name);
    }
    float *fact = obs + cls->obs_dim, *prev_fact = fact + ad, *h = prev_fact + ad;
    float rew, prev_rew = 0.0f;
    int32_t iact, prev_iact = -1;
    void *act = discrete ? (void *)&iact : (void *)fact;
    uint8_t term, trunc;
    double sum_r = 0.0, sum_l = 0.0;
    size_t done = 0;
    /* A recurrent policy carries its state (and previous action and
     * reward) from step to step, from zeros at every episode's start. */
    dpt_policy_state_t st = {h, h + ss / 2, discrete ? (void *)&prev_iact : (void *)prev_fact,
                             &prev_rew};
    /* Sampled actions come from their own stream (the evaluation envs'
     * rank), so the same seed gives the same episodes. */
    dpt_rng_t act_rng;
    dpt_rng_init(&act_rng, seed, 0x45564131u, 0, DPT_RNG_ACTION);
    dpt_vecenv_reset(env, obs);
    while (done < episodes) {
        if ((rc = dpt_policy_act_state(policy, params, obs, ss ? &st : NULL, 1,
                                       stochastic ? &act_rng : NULL, act, NULL, NULL)) != 0 ||
            (rc = dpt_vecenv_step(env, act, obs, &rew, &term, &trunc, NULL)) != 0)
            break;
        if (ss && (term || trunc)) {
            dpt_vec_zero(h, ss);
            prev_iact = -1;
            dpt_vec_zero(prev_fact, ad);
            prev_rew = 0.0f;
        } else if (ss) {
            prev_iact = iact;
            memcpy(prev_fact, fact, ad * sizeof *fact);
            prev_rew = rew;
        }
        double r;
        uint32_t l;
        while (done < episodes && dpt_vecenv_pop_episodes(env, &r, &l, 1, NULL) == 1) {
            sum_r += r;
            sum_l += l;
            done++;
        }
    }
    dpt_vecenv_destroy(env);
    free(obs);
    if (rc)
        return rc;
    *mean_return = sum_r / (double)episodes;
    *mean_length = sum_l / (double)episodes;
    return DPT_OK;
}
