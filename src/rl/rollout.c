/* Rollout collection with truncation bootstrapping; see rollout.h. */
#include "rollout.h"
#include "dpt/arena.h"
#include "dpt/status.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

void dpt__rollout_deinit(dpt__rollout_t *r)
{
    dpt_vecenv_destroy(r->env);
    free(r->obs);
    free(r->actions);
    free(r->logp);
    free(r->values);
    free(r->rewards);
    free(r->adv);
    free(r->returns);
    free(r->dones);
    free(r->cur_obs);
    free(r->final_obs);
    free(r->boot_obs);
    free(r->boot_v);
    free(r->step_rew);
    free(r->term);
    free(r->trunc);
    free(r->last_values);
    memset(r, 0, sizeof *r);
}

int dpt__rollout_init(dpt__rollout_t *r, const dpt_env_class_t *cls, size_t num_envs, size_t T,
                      uint64_t seed, uint32_t rank)
{
    memset(r, 0, sizeof *r);
    if (num_envs == 0 || T == 0)
        return dpt_error(DPT_EINVAL, "rollout: %zu envs x %zu steps", num_envs, T);
    int rc = dpt_vecenv_create(&r->env, cls, num_envs, seed, rank);
    if (rc)
        return rc;
    r->cls = cls;
    r->T = T;
    r->N = num_envs;
    r->obs_dim = cls->obs_dim;
    r->discrete = cls->action_kind == DPT_ACTION_DISCRETE;
    r->act_w = r->discrete ? 1 : cls->action_dim;
    /* The observation buffers scale with the env's obs_dim: sized from it,
     * every product checked. */
    size_t rows, obs_rows, act_rows, env_obs;
    if (dpt_mul_size(T, num_envs, &rows) || dpt_mul_size(rows, r->obs_dim, &obs_rows) ||
        dpt_mul_size(rows, r->act_w, &act_rows) || dpt_mul_size(num_envs, r->obs_dim, &env_obs)) {
        dpt__rollout_deinit(r);
        return dpt_error(DPT_EOVERFLOW, "rollout: %zu x %zu rows of %zu observations overflow", T,
                         num_envs, cls->obs_dim);
    }
    r->obs = calloc(obs_rows, sizeof(float));
    r->actions = calloc(act_rows, 4);
    r->logp = calloc(rows, sizeof(float));
    r->values = calloc(rows, sizeof(float));
    r->rewards = calloc(rows, sizeof(float));
    r->adv = calloc(rows, sizeof(float));
    r->returns = calloc(rows, sizeof(float));
    r->dones = calloc(rows, 1);
    r->cur_obs = calloc(env_obs, sizeof(float));
    r->final_obs = calloc(env_obs, sizeof(float));
    r->boot_obs = calloc(env_obs, sizeof(float));
    r->boot_v = calloc(num_envs, sizeof(float));
    r->step_rew = calloc(num_envs, sizeof(float));
    r->term = calloc(num_envs, 1);
    r->trunc = calloc(num_envs, 1);
    r->last_values = calloc(num_envs, sizeof(float));
    if (!r->obs || !r->actions || !r->logp || !r->values || !r->rewards || !r->adv || !r->returns ||
        !r->dones || !r->cur_obs || !r->final_obs || !r->boot_obs || !r->boot_v || !r->step_rew ||
        !r->term || !r->trunc || !r->last_values) {
        dpt__rollout_deinit(r);
        return dpt_error(DPT_ENOMEM, "rollout: cannot allocate %zu rows", rows);
    }
    dpt_rng_init(&r->act_rng, seed, rank, 0, DPT_RNG_ACTION);
    dpt_vecenv_reset(r->env, r->cur_obs);
    return DPT_OK;
}

int dpt__rollout_collect(dpt__rollout_t *r, dpt_policy_t *policy, const float *params, double gamma,
                         double lambda, float reward_scale, size_t min_steps,
                         int (*should_stop)(void *ctx), void *ctx)
{
    size_t N = r->N, od = r->obs_dim, aw = r->act_w;
    int rc;
    r->steps = 0;
    for (size_t t = 0; t < r->T; t++) {
        if (t >= min_steps && should_stop && should_stop(ctx))
            break;
        size_t k = t * N;
        float *obs_t = r->obs + k * od;
        memcpy(obs_t, r->cur_obs, N * od * sizeof(float));
        void *act_t = (char *)r->actions + k * aw * 4;
        if ((rc = dpt_policy_act(policy, params, obs_t, N, &r->act_rng, act_t, r->logp + k,
                                 r->values + k)) != 0)
            return rc;
        if ((rc = dpt_vecenv_step(r->env, act_t, r->cur_obs, r->step_rew, r->term, r->trunc,
                                  r->final_obs)) != 0)
            return rc;
        /* Truncated, not terminated: the episode would have gone on, so its
         * last reward is credited with the value of where it stopped. */
        size_t nb = 0;
        for (size_t i = 0; i < N; i++)
            if (r->trunc[i] && !r->term[i])
                memcpy(r->boot_obs + (nb++) * od, r->final_obs + i * od, od * sizeof(float));
        if (nb && (rc = dpt_policy_value(policy, params, r->boot_obs, nb, r->boot_v)) != 0)
            return rc;
        nb = 0;
        for (size_t i = 0; i < N; i++) {
            float rew = r->step_rew[i] * reward_scale;
            if (r->trunc[i] && !r->term[i])
                rew += (float)(gamma * (double)r->boot_v[nb++]);
            r->rewards[k + i] = rew;
            r->dones[k + i] = (uint8_t)(r->term[i] | r->trunc[i]);
        }
        r->steps = t + 1;
    }
    if ((rc = dpt_policy_value(policy, params, r->cur_obs, N, r->last_values)) != 0)
        return rc;
    dpt_gae(r->rewards, r->values, r->dones, r->last_values, r->steps, N, gamma, lambda, r->adv,
            r->returns);
    double rets[64];
    uint32_t lens[64];
    size_t got;
    r->episodes_this_iter = 0;
    while ((got = dpt_vecenv_pop_episodes(r->env, rets, lens, 64, NULL)) > 0) {
        for (size_t e = 0; e < got; e++) {
            r->ret_window[r->wnext] = rets[e];
            r->len_window[r->wnext] = lens[e];
            r->wnext = (r->wnext + 1) % DPT__EPISODE_WINDOW;
            if (r->wcount < DPT__EPISODE_WINDOW)
                r->wcount++;
        }
        r->episodes_this_iter += got;
        r->episodes_total += got;
    }
    return DPT_OK;
}

void dpt__rollout_gather(const dpt__rollout_t *r, const size_t *idx, size_t n, float *obs,
                         void *actions, float *logp, float *adv, float *returns, float *values)
{
    size_t od = r->obs_dim, ab = r->act_w * 4; /* int32 and float are both 4 bytes */
    for (size_t i = 0; i < n; i++) {
        size_t s = idx[i];
        memcpy(obs + i * od, r->obs + s * od, od * sizeof(float));
        memcpy((char *)actions + i * ab, (const char *)r->actions + s * ab, ab);
        logp[i] = r->logp[s];
        adv[i] = r->adv[s];
        returns[i] = r->returns[s];
        values[i] = r->values[s];
    }
}

void dpt__rollout_episode_stats(const dpt__rollout_t *r, double *mean, double *min, double *max,
                                double *len_mean, double *mean20, size_t *count)
{
    double s = 0.0, l = 0.0, lo = DBL_MAX, hi = -DBL_MAX, s20 = 0.0;
    size_t n20 = 0;
    for (size_t j = 0; j < r->wcount; j++) {
        /* j-th most recent */
        size_t idx = (r->wnext + DPT__EPISODE_WINDOW - 1 - j) % DPT__EPISODE_WINDOW;
        double v = r->ret_window[idx];
        s += v;
        l += r->len_window[idx];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        if (j < 20) {
            s20 += v;
            n20++;
        }
    }
    *count = r->wcount;
    *mean = r->wcount ? s / (double)r->wcount : 0.0;
    *len_mean = r->wcount ? l / (double)r->wcount : 0.0;
    *min = r->wcount ? lo : 0.0;
    *max = r->wcount ? hi : 0.0;
    *mean20 = n20 ? s20 / (double)n20 : 0.0;
}

/* Layout: [u64 magic][u64 act_rng position][u64 wcount][u64 wnext]
 * [u64 episodes_total][double ret_window[100]][u32 len_window[100]]
 * [float cur_obs[N * obs_dim]][vecenv state]. */
#define DPT__ROLLOUT_MAGIC UINT64_C(0x647074726f6c6c31) /* "dptroll1" */

static size_t dpt__rollout_fixed_bytes(const dpt__rollout_t *r)
{
    return 5 * sizeof(uint64_t) + sizeof r->ret_window + sizeof r->len_window +
           r->N * r->obs_dim * sizeof(float);
}

size_t dpt__rollout_state_bytes(const dpt__rollout_t *r)
{
    return dpt__rollout_fixed_bytes(r) + dpt_vecenv_state_bytes(r->env);
}

int dpt__rollout_save_state(const dpt__rollout_t *r, void *buf, size_t bytes)
{
    if (bytes != dpt__rollout_state_bytes(r))
        return dpt_error(DPT_EINVAL, "rollout state: %zu bytes given, %zu needed", bytes,
                         dpt__rollout_state_bytes(r));
    char *p = buf;
    uint64_t head[5] = {DPT__ROLLOUT_MAGIC, dpt_rng_tell(&r->act_rng), r->wcount, r->wnext,
                        r->episodes_total};
    memcpy(p, head, sizeof head);
    p += sizeof head;
    memcpy(p, r->ret_window, sizeof r->ret_window);
    p += sizeof r->ret_window;
    memcpy(p, r->len_window, sizeof r->len_window);
    p += sizeof r->len_window;
    memcpy(p, r->cur_obs, r->N * r->obs_dim * sizeof(float));
    p += r->N * r->obs_dim * sizeof(float);
    return dpt_vecenv_save_state(r->env, p, dpt_vecenv_state_bytes(r->env));
}

int dpt__rollout_check_state(const dpt__rollout_t *r, const void *buf, size_t bytes)
{
    if (bytes != dpt__rollout_state_bytes(r))
        return dpt_error(DPT_EFORMAT,
                         "rollout state: %zu bytes, this configuration needs %zu "
                         "(different envs or observation size?)",
                         bytes, dpt__rollout_state_bytes(r));
    uint64_t head[5];
    memcpy(head, buf, sizeof head);
    if (head[0] != DPT__ROLLOUT_MAGIC || head[2] > DPT__EPISODE_WINDOW ||
        head[3] >= DPT__EPISODE_WINDOW)
        return dpt_error(DPT_EFORMAT, "rollout state: bad header");
    return dpt__vecenv_check_state(r->env, (const char *)buf + dpt__rollout_fixed_bytes(r),
                                   dpt_vecenv_state_bytes(r->env));
}

int dpt__rollout_load_state(dpt__rollout_t *r, const void *buf, size_t bytes)
{
    int rc = dpt__rollout_check_state(r, buf, bytes);
    if (rc)
        return rc;
    /* Checked: neither the env load nor the rest can fail from here on. */
    const char *p = buf;
    uint64_t head[5];
    memcpy(head, p, sizeof head);
    p += sizeof head;
    if ((rc = dpt_vecenv_load_state(r->env, (const char *)buf + dpt__rollout_fixed_bytes(r),
                                    dpt_vecenv_state_bytes(r->env))) != 0)
        return rc;
    dpt_rng_seek(&r->act_rng, head[1]);
    r->wcount = (size_t)head[2];
    r->wnext = (size_t)head[3];
    r->episodes_total = head[4];
    memcpy(r->ret_window, p, sizeof r->ret_window);
    p += sizeof r->ret_window;
    memcpy(r->len_window, p, sizeof r->len_window);
    p += sizeof r->len_window;
    memcpy(r->cur_obs, p, r->N * r->obs_dim * sizeof(float));
    return DPT_OK;
}
