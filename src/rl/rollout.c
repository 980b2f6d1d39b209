/* Rollout collection with truncation bootstrapping; see rollout.h. */
#include "rollout.h"
#include "rl_trainers.h"
#include "core/prof.h"
#include "dpt/arena.h"
#include "dpt/status.h"
#include "env_internal.h"
#include "policy_impl.h"
#include "vecenv_impl.h"

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
    free(r->h);
    free(r->c);
    free(r->prev_act);
    free(r->prev_rew);
    free(r->step_h);
    free(r->step_c);
    free(r->step_prev_act);
    free(r->step_prev_rew);
    free(r->boot_h);
    free(r->boot_c);
    free(r->boot_pa);
    free(r->boot_pr);
    free(r->dev_rng);
    free(r->env_rng);
    free(r->dev_ep_ret);
    free(r->dev_ep_len);
    free(r->dev_act);
    memset(r, 0, sizeof *r);
}

/* calloc of a * b items of `size` bytes, the product checked. */
static void *dpt__rollout_calloc2(size_t a, size_t b, size_t size)
{
    size_t n;
    return dpt_mul_size(a, b, &n) ? NULL : calloc(n ? n : 1, size);
}

/* Row i of an action array says "no action": -1 for discrete actions
 * (dpt_policy_state_t), zeros for box actions. */
static void dpt__rollout_no_action(const dpt__rollout_t *r, void *actions, size_t i)
{
    if (r->discrete)
        ((int32_t *)actions)[i] = -1;
    else
        memset((char *)actions + i * r->act_w * 4, 0, r->act_w * 4);
}

/* The recurrent buffers (r->H > 0): carried [N, .] and recorded [T*N, .]. */
static int dpt__rollout_init_rnn(dpt__rollout_t *r, size_t rows)
{
    size_t N = r->N, H = r->H, aw = r->act_w;
    r->h = dpt__rollout_calloc2(N, H, sizeof(float));
    r->c = dpt__rollout_calloc2(N, H, sizeof(float));
    r->prev_act = dpt__rollout_calloc2(N, aw, 4);
    r->prev_rew = calloc(N, sizeof(float));
    r->step_h = dpt__rollout_calloc2(rows, H, sizeof(float));
    r->step_c = dpt__rollout_calloc2(rows, H, sizeof(float));
    r->step_prev_act = dpt__rollout_calloc2(rows, aw, 4);
    r->step_prev_rew = calloc(rows, sizeof(float));
    r->boot_h = dpt__rollout_calloc2(N, H, sizeof(float));
    r->boot_c = dpt__rollout_calloc2(N, H, sizeof(float));
    r->boot_pa = dpt__rollout_calloc2(N, aw, 4);
    r->boot_pr = calloc(N, sizeof(float));
    if (!r->h || !r->c || !r->prev_act || !r->prev_rew || !r->step_h || !r->step_c ||
        !r->step_prev_act || !r->step_prev_rew || !r->boot_h || !r->boot_c || !r->boot_pa ||
        !r->boot_pr)
        return dpt_error(DPT_ENOMEM, "rollout: cannot allocate the recurrent state of %zu rows",
                         rows);
    for (size_t i = 0; i < N; i++)
        dpt__rollout_no_action(r, r->prev_act, i);
    return DPT_OK;
}

int dpt__rollout_init(dpt__rollout_t *r, const dpt_env_class_t *cls, size_t num_envs, size_t T,
                      uint64_t seed, uint32_t rank, size_t lstm_cell_size)
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
    r->H = lstm_cell_size;
    if (r->H && (rc = dpt__rollout_init_rnn(r, rows)) != 0) {
        dpt__rollout_deinit(r);
        return rc;
    }
    dpt_rng_init(&r->act_rng, seed, rank, 0, DPT_RNG_ACTION);
    dpt_vecenv_reset(r->env, r->cur_obs);
    return DPT_OK;
}

/* Copies row i of an [n, aw] action array (4-byte values). */
static void dpt__rollout_copy_action(void *dst, size_t di, const void *src, size_t si, size_t aw)
{
    memcpy((char *)dst + di * aw * 4, (const char *)src + si * aw * 4, aw * 4);
}

static void dpt__rollout_finish(dpt__rollout_t *r, double gamma, double lambda);

static int dpt__rollout_collect_steps(dpt__rollout_t *r, dpt_policy_t *policy, const float *params,
                                      double gamma, double lambda, float reward_scale,
                                      size_t min_steps, int (*should_stop)(void *ctx), void *ctx)
{
    size_t N = r->N, od = r->obs_dim, aw = r->act_w, H = r->H;
    int rc;
    if (H && dpt_policy_state_size(policy) != 2 * H)
        return dpt_error(DPT_EINVAL, "rollout: made for an LSTM of %zu cells, the policy has %zu",
                         H, dpt_policy_state_size(policy) / 2);
    /* The envs' carried state; the caller's step overwrites h and c. */
    dpt_policy_state_t carry = {r->h, r->c, r->prev_act, r->prev_rew};
    dpt_policy_state_t boot = {r->boot_h, r->boot_c, r->boot_pa, r->boot_pr};
    r->steps = 0;
    /* An external env's episodes start here when they start anew (the
     * caller resets its envs): a recurrent policy's carry with them. */
    if ((rc = dpt__vecenv_sync(r->env, r->cur_obs)) < 0)
        return rc;
    if (rc > 0 && H) {
        dpt_vec_zero(r->h, N * H);
        dpt_vec_zero(r->c, N * H);
        dpt_vec_zero(r->prev_rew, N);
        for (size_t i = 0; i < N; i++)
            dpt__rollout_no_action(r, r->prev_act, i);
    }
    for (size_t t = 0; t < r->T; t++) {
        if (t >= min_steps && should_stop && should_stop(ctx))
            break;
        size_t k = t * N;
        float *obs_t = r->obs + k * od;
        memcpy(obs_t, r->cur_obs, N * od * sizeof(float));
        void *act_t = (char *)r->actions + k * aw * 4;
        if (H) {
            memcpy(r->step_h + k * H, r->h, N * H * sizeof(float));
            memcpy(r->step_c + k * H, r->c, N * H * sizeof(float));
            memcpy((char *)r->step_prev_act + k * aw * 4, r->prev_act, N * aw * 4);
            memcpy(r->step_prev_rew + k, r->prev_rew, N * sizeof(float));
        }
        dpt__prof_lap(DPT_PROF_SAMPLE_OTHER);
        if (r->env_rng)
            rc = dpt__policy_act_rows(policy, params, obs_t, N, r->env_rng, act_t, r->logp + k,
                                      r->values + k);
        else
            rc = dpt_policy_act_state(policy, params, obs_t, H ? &carry : NULL, N, &r->act_rng,
                                      act_t, r->logp + k, r->values + k);
        if (rc)
            return rc;
        dpt__prof_lap(DPT_PROF_ACT);
        if ((rc = dpt_vecenv_step(r->env, act_t, r->cur_obs, r->step_rew, r->term, r->trunc,
                                  r->final_obs)) != 0)
            return rc;
        dpt__prof_lap(DPT_PROF_ENV_STEP);
        /* Truncated, not terminated: the episode would have gone on, so its
         * last reward is credited with the value of where it stopped (for a
         * recurrent policy, after the state the step left and with this
         * step's action and reward as the previous ones). */
        size_t nb = 0;
        for (size_t i = 0; i < N; i++) {
            if (!r->trunc[i] || r->term[i])
                continue;
            memcpy(r->boot_obs + nb * od, r->final_obs + i * od, od * sizeof(float));
            if (H) {
                memcpy(r->boot_h + nb * H, r->h + i * H, H * sizeof(float));
                memcpy(r->boot_c + nb * H, r->c + i * H, H * sizeof(float));
                dpt__rollout_copy_action(r->boot_pa, nb, act_t, i, aw);
                r->boot_pr[nb] = r->step_rew[i];
            }
            nb++;
        }
        if (nb && (rc = dpt_policy_value_state(policy, params, r->boot_obs, H ? &boot : NULL, nb,
                                               r->boot_v)) != 0)
            return rc;
        nb = 0;
        for (size_t i = 0; i < N; i++) {
            float rew = r->step_rew[i] * reward_scale;
            uint8_t done = (uint8_t)(r->term[i] | r->trunc[i]);
            if (r->trunc[i] && !r->term[i])
                rew += (float)(gamma * (double)r->boot_v[nb++]);
            r->rewards[k + i] = rew;
            r->dones[k + i] = done;
            if (!H)
                continue;
            /* The next step of this env: a new episode starts from zeros. */
            if (done) {
                dpt_vec_zero(r->h + i * H, H);
                dpt_vec_zero(r->c + i * H, H);
                dpt__rollout_no_action(r, r->prev_act, i);
                r->prev_rew[i] = 0.0f;
            } else {
                dpt__rollout_copy_action(r->prev_act, i, act_t, i, aw);
                r->prev_rew[i] = r->step_rew[i];
            }
        }
        r->steps = t + 1;
    }
    if ((rc = dpt_policy_value_state(policy, params, r->cur_obs, H ? &carry : NULL, N,
                                     r->last_values)) != 0)
        return rc;
    dpt__rollout_finish(r, gamma, lambda);
    return DPT_OK;
}

/* GAE over the steps collected, then the episodes the runner finished into
 * the window. */
static void dpt__rollout_finish(dpt__rollout_t *r, double gamma, double lambda)
{
    dpt_gae(r->rewards, r->values, r->dones, r->last_values, r->steps, r->N, gamma, lambda, r->adv,
            r->returns);
    double rets[64];
    uint32_t lens[64];
    size_t got;
    r->episodes_this_iter = 0;
    while ((got = dpt_vecenv_pop_episodes(r->env, rets, lens, 64, NULL)) > 0) {
        for (size_t e = 0; e < got; e++)
            dpt__episode_window_push(&r->window, rets[e], lens[e]);
        r->episodes_this_iter += got;
        r->episodes_total += got;
    }
    dpt__prof_lap(DPT_PROF_SAMPLE_OTHER);
}

/* The per-env streams of this collect (dpt__rollout_env_streams). */
static void dpt__rollout_key_envs(dpt__rollout_t *r)
{
    if (!r->env_rng)
        return;
    uint64_t base = dpt_rng_u64(&r->act_rng);
    for (size_t i = 0; i < r->N; i++)
        dpt_rng_init(&r->env_rng[i], base, 0, r->env_first + (uint32_t)i, DPT_RNG_ACTION);
}

int dpt__rollout_env_streams(dpt__rollout_t *r, uint64_t seed, uint32_t first)
{
    if (r->H)
        return dpt_error(DPT_EINVAL, "rollout: per-env action streams need a feed-forward policy");
    free(r->env_rng);
    if (!(r->env_rng = calloc(r->N, sizeof *r->env_rng)))
        return dpt_error(DPT_ENOMEM, "rollout: cannot allocate %zu action streams", r->N);
    r->env_first = first;
    dpt_rng_init(&r->act_rng, seed, 0, 0, DPT_RNG_ACTION);
    dpt__vecenv_set_first(r->env, first);
    dpt_vecenv_reset(r->env, r->cur_obs);
    return DPT_OK;
}

int dpt__rollout_collect(dpt__rollout_t *r, dpt_policy_t *policy, const float *params, double gamma,
                         double lambda, float reward_scale, size_t min_steps,
                         int (*should_stop)(void *ctx), void *ctx)
{
    dpt__rollout_key_envs(r);
    /* The weights stay the same through a rollout: the policy acts on
     * transposed copies of them (a failed copy only costs speed). */
    int packed = dpt__policy_act_begin(policy, params) == DPT_OK;
    int rc = dpt__rollout_collect_steps(r, policy, params, gamma, lambda, reward_scale, min_steps,
                                        should_stop, ctx);
    if (packed)
        dpt__policy_act_end(policy);
    return rc;
}

int dpt__rollout_init_devices(dpt__rollout_t *r, int devices)
{
    if (devices < 1 || r->H)
        return dpt_error(DPT_EINVAL, "rollout: %d devices%s", devices,
                         r->H ? " with a recurrent policy" : "");
    size_t rows = r->T * r->N; /* checked at init */
    r->dev_rng = calloc((size_t)devices, sizeof *r->dev_rng);
    r->dev_ep_ret = calloc(rows, sizeof *r->dev_ep_ret);
    r->dev_ep_len = calloc(rows, sizeof *r->dev_ep_len);
    r->dev_act = dpt__rollout_calloc2((size_t)devices, r->act_w, sizeof(float));
    if (!r->dev_rng || !r->dev_ep_ret || !r->dev_ep_len || !r->dev_act)
        return dpt_error(DPT_ENOMEM, "rollout: cannot allocate the buffers of %d devices", devices);
    r->devices = devices;
    return DPT_OK;
}

typedef struct dpt__dev_collect {
    dpt__rollout_t *r;
    dpt_policy_t *const *policies;
    const float *params;
    double gamma;
    float reward_scale;
} dpt__dev_collect_t;

/* Device d's share of a collect: the T steps of its envs [lo, hi). Every
 * row it writes belongs to its envs; the runner's state of other envs is
 * not touched. */
static int dpt__rollout_collect_range(void *arg, int d)
{
    const dpt__dev_collect_t *a = arg;
    dpt__rollout_t *r = a->r;
    size_t N = r->N, D = (size_t)r->devices, od = r->obs_dim, aw = r->act_w;
    size_t lo = N * (size_t)d / D, hi = N * ((size_t)d + 1) / D, n = hi - lo;
    if (n == 0)
        return DPT_OK;
    dpt_policy_t *policy = a->policies[d];
    dpt_rng_t *rng = &r->dev_rng[d];
    int packed = dpt__policy_act_begin(policy, a->params) == DPT_OK, rc = DPT_OK;
    for (size_t t = 0; !rc && t < r->T; t++) {
        size_t k = t * N;
        float *obs_t = r->obs + k * od;
        memcpy(obs_t + lo * od, r->cur_obs + lo * od, n * od * sizeof(float));
        void *act_t = (char *)r->actions + k * aw * 4;
        dpt__prof_lap(DPT_PROF_SAMPLE_OTHER);
        if (r->env_rng)
            rc = dpt__policy_act_rows(policy, a->params, obs_t + lo * od, n, r->env_rng + lo,
                                      (char *)act_t + lo * aw * 4, r->logp + k + lo,
                                      r->values + k + lo);
        else
            rc = dpt_policy_act(policy, a->params, obs_t + lo * od, n, rng,
                                (char *)act_t + lo * aw * 4, r->logp + k + lo, r->values + k + lo);
        if (rc)
            break;
        dpt__prof_lap(DPT_PROF_ACT);
        if ((rc = dpt__vecenv_step_range(r->env, lo, hi, act_t, r->cur_obs, r->step_rew, r->term,
                                         r->trunc, r->final_obs, r->dev_act + (size_t)d * aw,
                                         r->dev_ep_ret + k, r->dev_ep_len + k)) != 0)
            break;
        dpt__prof_lap(DPT_PROF_ENV_STEP);
        /* Truncation bootstrapping as in dpt__rollout_collect, in this
         * range's rows of the scratch. */
        size_t nb = 0;
        for (size_t i = lo; i < hi; i++)
            if (r->trunc[i] && !r->term[i])
                memcpy(r->boot_obs + (lo + nb++) * od, r->final_obs + i * od, od * sizeof(float));
        if (nb && (rc = dpt_policy_value(policy, a->params, r->boot_obs + lo * od, nb,
                                         r->boot_v + lo)) != 0)
            break;
        nb = 0;
        for (size_t i = lo; i < hi; i++) {
            float rew = r->step_rew[i] * a->reward_scale;
            if (r->trunc[i] && !r->term[i])
                rew += (float)(a->gamma * (double)r->boot_v[lo + nb++]);
            r->rewards[k + i] = rew;
            r->dones[k + i] = (uint8_t)(r->term[i] | r->trunc[i]);
        }
    }
    if (!rc)
        rc = dpt_policy_value(policy, a->params, r->cur_obs + lo * od, n, r->last_values + lo);
    if (packed)
        dpt__policy_act_end(policy);
    return rc;
}

int dpt__rollout_collect_devices(
    dpt__rollout_t *r, dpt_policy_t *const *policies, const float *params, double gamma,
    double lambda, float reward_scale,
    int (*run)(void *runner, int (*fn)(void *arg, int device), void *arg), void *runner)
{
    if (r->devices < 1)
        return dpt_error(DPT_ESTATE, "rollout: collect on devices before init_devices");
    /* Each device's action stream for this collect, drawn from act_rng (or
     * each env's). */
    if (r->env_rng) {
        dpt__rollout_key_envs(r);
    } else {
        uint64_t base = dpt_rng_u64(&r->act_rng);
        for (int d = 0; d < r->devices; d++)
            dpt_rng_init(&r->dev_rng[d], base, 0, (uint32_t)d, DPT_RNG_ACTION);
    }
    dpt__dev_collect_t a = {r, policies, params, gamma, reward_scale};
    r->steps = 0;
    int rc = run(runner, dpt__rollout_collect_range, &a);
    if (rc)
        return rc;
    r->steps = r->T;
    /* The runner's records, in the order of one stepping thread: step by
     * step, envs in index order. */
    size_t N = r->N;
    dpt__vecenv_record(r->env, r->T * N, 0.0, 0, 0);
    for (size_t k = 0; k < r->T * N; k++)
        if (r->dones[k])
            dpt__vecenv_record(r->env, 0, r->dev_ep_ret[k], r->dev_ep_len[k], 1);
    dpt__rollout_finish(r, gamma, lambda);
    return DPT_OK;
}

void dpt__rl_batch_deinit(dpt__rl_batch_t *b)
{
    free(b->obs);
    free(b->act);
    free(b->logp);
    free(b->adv);
    free(b->ret);
    free(b->val);
    free(b->seq_lens);
    free(b->h0);
    free(b->c0);
    free(b->prev_act);
    free(b->prev_rew);
    free(b->mask);
    memset(b, 0, sizeof *b);
}

int dpt__rl_batch_init(dpt__rl_batch_t *b, const dpt__rollout_t *r, size_t rows, size_t seqs)
{
    memset(b, 0, sizeof *b);
    b->cap_rows = rows;
    b->obs = dpt__rollout_calloc2(rows, r->obs_dim, sizeof(float));
    b->act = dpt__rollout_calloc2(rows, r->act_w, 4);
    b->logp = calloc(rows ? rows : 1, sizeof(float));
    b->adv = calloc(rows ? rows : 1, sizeof(float));
    b->ret = calloc(rows ? rows : 1, sizeof(float));
    b->val = calloc(rows ? rows : 1, sizeof(float));
    int ok = b->obs && b->act && b->logp && b->adv && b->ret && b->val;
    if (ok && r->H) {
        b->cap_seqs = seqs;
        b->seq_lens = calloc(seqs ? seqs : 1, sizeof(int32_t));
        b->h0 = dpt__rollout_calloc2(seqs, r->H, sizeof(float));
        b->c0 = dpt__rollout_calloc2(seqs, r->H, sizeof(float));
        b->prev_act = dpt__rollout_calloc2(rows, r->act_w, 4);
        b->prev_rew = calloc(rows ? rows : 1, sizeof(float));
        b->mask = calloc(rows ? rows : 1, 1);
        ok = b->seq_lens && b->h0 && b->c0 && b->prev_act && b->prev_rew && b->mask;
    }
    if (!ok) {
        dpt__rl_batch_deinit(b);
        return dpt_error(DPT_ENOMEM, "rl: cannot allocate a batch of %zu rows", rows);
    }
    return DPT_OK;
}

void dpt__rollout_gather(const dpt__rollout_t *r, const size_t *idx, size_t n, dpt__rl_batch_t *b)
{
    size_t od = r->obs_dim, aw = r->act_w;
    for (size_t i = 0; i < n; i++) {
        size_t s = idx[i];
        memcpy(b->obs + i * od, r->obs + s * od, od * sizeof(float));
        dpt__rollout_copy_action(b->act, i, r->actions, s, aw);
        b->logp[i] = r->logp[s];
        b->adv[i] = r->adv[s];
        b->ret[i] = r->returns[s];
        b->val[i] = r->values[s];
    }
}

size_t dpt__rollout_max_chunks(const dpt__rollout_t *r)
{
    return r->T * r->N;
}

size_t dpt__rollout_chunk(const dpt__rollout_t *r, size_t L, dpt__chunk_t *out)
{
    size_t n = 0, N = r->N;
    for (size_t i = 0; i < N; i++) {
        size_t t0 = 0;
        while (t0 < r->steps) {
            size_t len = 0;
            /* Up to L steps, ending after a step that ends an episode. */
            while (len < L && t0 + len < r->steps) {
                len++;
                if (r->dones[(t0 + len - 1) * N + i])
                    break;
            }
            out[n++] = (dpt__chunk_t){(uint32_t)i, (uint32_t)t0, (uint32_t)len};
            t0 += len;
        }
    }
    return n;
}

void dpt__rollout_gather_seq(const dpt__rollout_t *r, const dpt__chunk_t *chunks,
                             const size_t *order, size_t n, size_t L, dpt__rl_batch_t *b)
{
    size_t N = r->N, H = r->H, od = r->obs_dim, aw = r->act_w;
    for (size_t s = 0; s < n; s++) {
        const dpt__chunk_t *ch = &chunks[order[s]];
        size_t first = (size_t)ch->t0 * N + ch->env;
        b->seq_lens[s] = (int32_t)ch->len;
        memcpy(b->h0 + s * H, r->step_h + first * H, H * sizeof(float));
        memcpy(b->c0 + s * H, r->step_c + first * H, H * sizeof(float));
        for (size_t t = 0; t < L; t++) {
            size_t row = s * L + t;
            if (t >= ch->len) {
                dpt_vec_zero(b->obs + row * od, od);
                memset((char *)b->act + row * aw * 4, 0, aw * 4);
                dpt__rollout_no_action(r, b->prev_act, row);
                b->logp[row] = b->adv[row] = b->ret[row] = b->val[row] = b->prev_rew[row] = 0.0f;
                b->mask[row] = 0;
                continue;
            }
            size_t k = first + t * N; /* step t0 + t of the env */
            memcpy(b->obs + row * od, r->obs + k * od, od * sizeof(float));
            dpt__rollout_copy_action(b->act, row, r->actions, k, aw);
            dpt__rollout_copy_action(b->prev_act, row, r->step_prev_act, k, aw);
            b->prev_rew[row] = r->step_prev_rew[k];
            b->logp[row] = r->logp[k];
            b->adv[row] = r->adv[k];
            b->ret[row] = r->returns[k];
            b->val[row] = r->values[k];
            b->mask[row] = 1;
        }
    }
}

/* Layout: [u64 magic][u64 act_rng position][u64 window.count]
 * [u64 window.next][u64 episodes_total][double window.ret[100]]
 * [u32 window.len[100]]
 * [float cur_obs[N * obs_dim]], for a recurrent policy [float h[N * H]]
 * [float c[N * H]][4-byte prev_act[N * act_w]][float prev_rew[N]] (what the
 * envs carry into their next step), then [vecenv state]. */
#define DPT__ROLLOUT_MAGIC UINT64_C(0x647074726f6c6c31) /* "dptroll1" */

/* Bytes of the recurrent part (0 for a feed-forward policy). */
static size_t dpt__rollout_rnn_bytes(const dpt__rollout_t *r)
{
    return r->H ? r->N * (2 * r->H + r->act_w + 1) * 4 : 0;
}

static size_t dpt__rollout_fixed_bytes(const dpt__rollout_t *r)
{
    return 5 * sizeof(uint64_t) + sizeof r->window.ret + sizeof r->window.len +
           r->N * r->obs_dim * sizeof(float) + dpt__rollout_rnn_bytes(r);
}

/* The recurrent part's arrays and sizes, in file order. */
static void dpt__rollout_rnn_parts(const dpt__rollout_t *r, void *part[4], size_t bytes[4])
{
    part[0] = r->h, part[1] = r->c, part[2] = r->prev_act, part[3] = r->prev_rew;
    bytes[0] = bytes[1] = r->N * r->H * 4;
    bytes[2] = r->N * r->act_w * 4;
    bytes[3] = r->N * 4;
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
    uint64_t head[5] = {DPT__ROLLOUT_MAGIC, dpt_rng_tell(&r->act_rng), r->window.count,
                        r->window.next, r->episodes_total};
    memcpy(p, head, sizeof head);
    p += sizeof head;
    memcpy(p, r->window.ret, sizeof r->window.ret);
    p += sizeof r->window.ret;
    memcpy(p, r->window.len, sizeof r->window.len);
    p += sizeof r->window.len;
    memcpy(p, r->cur_obs, r->N * r->obs_dim * sizeof(float));
    p += r->N * r->obs_dim * sizeof(float);
    void *part[4];
    size_t pb[4];
    dpt__rollout_rnn_parts(r, part, pb);
    for (int i = 0; r->H && i < 4; i++) {
        memcpy(p, part[i], pb[i]);
        p += pb[i];
    }
    return dpt_vecenv_save_state(r->env, p, dpt_vecenv_state_bytes(r->env));
}

int dpt__rollout_state_pick(const dpt__rollout_t *r, const void *const *src, const size_t *bytes,
                            size_t nsrc, size_t per, size_t first, void *out, size_t out_bytes)
{
    size_t od = r->obs_dim, N = r->N;
    size_t head = dpt__rollout_fixed_bytes(r) - N * od * sizeof(float);
    size_t venv = dpt_vecenv_state_bytes(r->env), sfixed = head + per * od * sizeof(float);
    if (r->H || out_bytes != dpt__rollout_state_bytes(r) || per == 0 || first + N > nsrc * per)
        return dpt_error(DPT_EINVAL, "rollout state: envs [%zu, %zu) of %zu saved rollouts of %zu",
                         first, first + N, nsrc, per);
    const void *venvs[DPT__ROLLOUT_PICK_MAX];
    if (nsrc > DPT__ROLLOUT_PICK_MAX)
        return dpt_error(DPT_EINVAL, "rollout state: %zu saved rollouts, at most %d", nsrc,
                         DPT__ROLLOUT_PICK_MAX);
    /* A saved rollout of per envs: its fixed part, then its runner's state of
     * HEADER + per (PER_ENV + state_size) + TAIL bytes. */
    size_t ssz = r->cls->state_size;
    size_t sv = venv - N * (DPT__STATE_PER_ENV + ssz) + per * (DPT__STATE_PER_ENV + ssz);
    for (size_t q = 0; q < nsrc; q++) {
        uint64_t magic = 0;
        if (bytes[q] == sfixed + sv)
            memcpy(&magic, src[q], sizeof magic);
        if (magic != DPT__ROLLOUT_MAGIC)
            return dpt_error(DPT_EFORMAT,
                             "rollout state %zu: %zu bytes, not a saved rollout of %zu envs "
                             "(%zu bytes)",
                             q, bytes[q], per, sfixed + sv);
        venvs[q] = (const char *)src[q] + sfixed;
    }
    /* The head: the action stream's position (the same on every worker of
     * the invariant order); the episode counts, which the workers' figures
     * add up: the first worker (first = 0) takes the saved workers' total
     * and saved worker 0's window of recent episodes, the others start
     * with none. Then each env's observation from its own. */
    char *o = out;
    memcpy(o, src[0], head);
    uint64_t h5[5];
    memcpy(h5, o, sizeof h5);
    uint64_t total = 0;
    for (size_t q = 0; q < nsrc; q++) {
        uint64_t hq[5];
        memcpy(hq, src[q], sizeof hq);
        total += hq[4];
    }
    h5[4] = first == 0 ? total : 0;
    if (first != 0) {
        h5[2] = h5[3] = 0; /* an empty window */
        memset(o + sizeof h5, 0, head - sizeof h5);
    }
    memcpy(o, h5, sizeof h5);
    for (size_t i = 0; i < N; i++)
        memcpy(o + head + i * od * sizeof(float),
               (const char *)src[(first + i) / per] + head +
                   ((first + i) % per) * od * sizeof(float),
               od * sizeof(float));
    return dpt__vecenv_state_pick(r->env, venvs, nsrc, per, first,
                                  o + head + N * od * sizeof(float), venv);
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
    if (head[0] != DPT__ROLLOUT_MAGIC || !dpt__episode_window_valid(head[2], head[3]))
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
    r->window.count = (size_t)head[2];
    r->window.next = (size_t)head[3];
    r->episodes_total = head[4];
    memcpy(r->window.ret, p, sizeof r->window.ret);
    p += sizeof r->window.ret;
    memcpy(r->window.len, p, sizeof r->window.len);
    p += sizeof r->window.len;
    memcpy(r->cur_obs, p, r->N * r->obs_dim * sizeof(float));
    p += r->N * r->obs_dim * sizeof(float);
    void *part[4];
    size_t pb[4];
    dpt__rollout_rnn_parts(r, part, pb);
    for (int i = 0; r->H && i < 4; i++) {
        memcpy(part[i], p, pb[i]);
        p += pb[i];
    }
    return DPT_OK;
}
