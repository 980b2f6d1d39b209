/*
 * Recurrent (LSTM) policies: the layout, the PPO loss over padded sequence
 * batches against finite differences, padding that changes nothing, the
 * training forward reproducing the acting one across sequence cuts, the
 * rollout's cutting into sequences, masked advantage normalization, and
 * the towers' sequence rules with the LSTM model on 1, 2 and 3 devices.
 */
#include "dpt_test.h"
#include "dpt_test_files.h"

#include "dpt/arena.h"
#include "dpt/env.h"
#include "dpt/rl.h"
#include "dpt/towers.h"
#include "dpt/train.h"
#include "rl/rl_engine.h"
#include "train/rl_internal.h"

#include <stdint.h>

/* An env that ends every episode after EP_LEN steps (terminated), with
 * observations that count the steps. */
#define EP_LEN 5

static void count_reset(void *s, dpt_rng_t *r, float *obs)
{
    (void)r;
    *(uint32_t *)s = 0;
    obs[0] = 0.0f;
    obs[1] = 1.0f;
    obs[2] = -0.5f;
}

static void count_step(void *s, const void *a, dpt_rng_t *r, float *obs, float *rew, int *term)
{
    (void)r;
    uint32_t *t = s;
    ++*t;
    obs[0] = 0.1f * (float)*t;
    obs[1] = *(const int32_t *)a ? 0.5f : -0.5f;
    obs[2] = 0.2f;
    *rew = 1.0f;
    *term = *t >= EP_LEN;
}

static dpt_env_class_t discrete_cls(void)
{
    dpt_env_class_t c;
    memset(&c, 0, sizeof c);
    c.name = "Test-Count";
    c.obs_dim = 3;
    c.action_kind = DPT_ACTION_DISCRETE;
    c.num_actions = 3;
    c.state_size = sizeof(uint32_t);
    c.reset = count_reset;
    c.step = count_step;
    return c;
}

static void box_step(void *s, const void *a, dpt_rng_t *r, float *obs, float *rew, int *term)
{
    int32_t zero = 0;
    (void)a;
    count_step(s, &zero, r, obs, rew, term);
}

static dpt_env_class_t box_cls(void)
{
    dpt_env_class_t c = discrete_cls();
    c.name = "Test-CountBox";
    c.action_kind = DPT_ACTION_BOX;
    c.num_actions = 0;
    c.action_dim = 2;
    static const float low[2] = {-2.0f, -2.0f}, high[2] = {2.0f, 2.0f};
    c.action_low = low;
    c.action_high = high;
    c.step = box_step;
    return c;
}

static dpt_policy_spec_t rnn_spec(size_t H, size_t L, int prev_action, int prev_reward)
{
    dpt_policy_spec_t s;
    memset(&s, 0, sizeof s);
    s.hidden[0] = 5;
    s.hidden[1] = 4;
    s.nhidden = 2;
    s.use_lstm = 1;
    s.lstm_cell_size = H;
    s.lstm_use_prev_action = prev_action;
    s.lstm_use_prev_reward = prev_reward;
    s.prev_reward_scale = 0.5f;
    s.max_seq_len = L;
    return s;
}

static void test_layout_and_errors(void)
{
    dpt_env_class_t cls = discrete_cls();
    dpt_policy_spec_t s = rnn_spec(6, 4, 1, 1);
    dpt_policy_t *p;
    REQUIRE_OK(dpt_policy_create_ex(&p, &cls, &s, 12));
    const dpt_vartable_t *v = dpt_policy_vars(p);
    /* I = 3 observations + 3 one-hot actions + 1 reward. */
    const dpt_var_t *wih = dpt_vartable_find(v, "lstm.weight_ih");
    REQUIRE(wih);
    CHECK(wih->shape[0] == 24 && wih->shape[1] == 7);
    CHECK(dpt_vartable_find(v, "lstm.weight_hh")->shape[1] == 6);
    CHECK(dpt_vartable_find(v, "lstm.bias")->count == 24);
    CHECK(dpt_vartable_find(v, "actor.0.weight")->shape[1] == 6);
    CHECK(dpt_vartable_find(v, "critic.0.weight")->shape[1] == 6);
    CHECK(dpt_policy_state_size(p) == 12);
    CHECK(dpt_policy_spec(p)->use_lstm == 1);
    dpt_policy_destroy(p);
    dpt_policy_t *q = NULL;
    s = rnn_spec(0, 4, 0, 0);
    CHECK_ERR(dpt_policy_create_ex(&q, &cls, &s, 12), DPT_EINVAL, "lstm_cell_size 0");
    s = rnn_spec(6, 5, 0, 0);
    CHECK_ERR(dpt_policy_create_ex(&q, &cls, &s, 12), DPT_EINVAL, "sequences of 5 steps");
    /* A feed-forward policy has no state and takes no sequence columns. */
    const size_t hidden[1] = {4};
    REQUIRE_OK(dpt_policy_create(&q, &cls, hidden, 1, 4));
    CHECK(dpt_policy_state_size(q) == 0);
    dpt_batch_t b;
    float f[4] = {0};
    int32_t a[4] = {0};
    REQUIRE_OK(dpt_ppo_batch(&b, &cls, 4, f, a, f, f, f, f));
    CHECK_ERR(dpt_ppo_batch_seq(&b, q, 2, NULL, NULL, NULL, NULL, NULL), DPT_EINVAL,
              "not recurrent");
    dpt_policy_destroy(q);
}

/* A sequence batch over caller arrays, S sequences of L rows. */
typedef struct seq_case {
    size_t S, L, H, od, aw;
    float *obs, *logp, *adv, *ret, *val, *h0, *c0, *prev_rew;
    void *act, *prev_act;
    int32_t *lens;
    dpt_batch_t b;
} seq_case_t;

static int seq_case_init(seq_case_t *c, const dpt_policy_t *p, size_t S, size_t L)
{
    const dpt_env_class_t *cls = dpt_policy_env_class(p);
    memset(c, 0, sizeof *c);
    c->S = S, c->L = L, c->H = dpt_policy_state_size(p) / 2, c->od = cls->obs_dim;
    c->aw = cls->action_kind == DPT_ACTION_DISCRETE ? 1 : cls->action_dim;
    size_t R = S * L;
    c->obs = calloc(R * c->od, sizeof(float));
    c->logp = calloc(R, sizeof(float));
    c->adv = calloc(R, sizeof(float));
    c->ret = calloc(R, sizeof(float));
    c->val = calloc(R, sizeof(float));
    c->prev_rew = calloc(R, sizeof(float));
    c->act = calloc(R * c->aw, 4);
    c->prev_act = calloc(R * c->aw, 4);
    c->h0 = calloc(S * c->H, sizeof(float));
    c->c0 = calloc(S * c->H, sizeof(float));
    c->lens = calloc(S, sizeof(int32_t));
    if (!c->obs || !c->logp || !c->adv || !c->ret || !c->val || !c->prev_rew || !c->act ||
        !c->prev_act || !c->h0 || !c->c0 || !c->lens)
        return DPT_ENOMEM;
    int rc = dpt_ppo_batch(&c->b, cls, R, c->obs, c->act, c->logp, c->adv, c->ret, c->val);
    return rc ? rc
              : dpt_ppo_batch_seq(&c->b, p, L, c->lens, c->h0, c->c0, c->prev_act, c->prev_rew);
}

static void seq_case_free(seq_case_t *c)
{
    free(c->obs), free(c->logp), free(c->adv), free(c->ret), free(c->val), free(c->prev_rew);
    free(c->act), free(c->prev_act), free(c->h0), free(c->c0), free(c->lens);
}

/* Fills a case with random inputs: lengths lens[s], observations, actions
 * (acted by the policy from the zero state, for plausible log-probs),
 * previous actions and rewards, and small chunk-start states. */
static void seq_case_fill(seq_case_t *c, dpt_policy_t *p, const float *params, const int32_t *lens,
                          dpt_rng_t *rng)
{
    size_t R = c->S * c->L;
    memcpy(c->lens, lens, c->S * sizeof *lens);
    dpt_rng_fill_uniform(rng, c->obs, R * c->od, -1, 1);
    dpt_rng_fill_uniform(rng, c->prev_rew, R, -1, 1);
    dpt_rng_fill_uniform(rng, c->h0, c->S * c->H, -0.5f, 0.5f);
    dpt_rng_fill_uniform(rng, c->c0, c->S * c->H, -0.5f, 0.5f);
    float cur_logp[1], cur_v[1];
    for (size_t r = 0; r < R; r++) {
        char *a = (char *)c->act + r * c->aw * 4;
        CHECK_OK(dpt_policy_act(p, params, c->obs + r * c->od, 1, rng, a, cur_logp, cur_v));
        if (c->aw == 1)
            ((int32_t *)c->prev_act)[r] = (int32_t)(r % 3);
        else
            dpt_rng_fill_uniform(rng, (float *)c->prev_act + r * c->aw, c->aw, -1, 1);
        /* Half near the current log-prob (unclipped), half far (clipped). */
        float off = (r % 2) ? 0.05f : 0.6f;
        c->logp[r] = cur_logp[0] + ((r % 4) < 2 ? off : -off);
        c->val[r] = cur_v[0] + ((r % 3) ? 0.05f : -0.7f);
        c->adv[r] = (r % 2 ? 1.0f : -1.0f) * (0.5f + (float)(r % 7) * 0.1f);
        c->ret[r] = cur_v[0] + (float)((int)(r % 9) - 4) * 0.3f;
    }
}

static double loss_at(dpt_model_t *m, const float *params, float *grad, size_t n,
                      const dpt_batch_t *b)
{
    dpt_loss_out_t out;
    dpt_vec_zero(grad, n);
    if (m->loss_grad(m->ctx, params, grad, b, &out))
        return NAN;
    return out.loss;
}

static void check_rnn_gradient(const dpt_env_class_t *cls, int prev_action, int prev_reward,
                               const char *network)
{
    enum { S = 3, L = 4 };
    dpt_policy_spec_t spec = rnn_spec(5, L, prev_action, prev_reward);
    if (network)
        REQUIRE_OK(
            dpt_network_parse(network, spec.encoder, DPT_NETWORK_MAX_LAYERS, &spec.nencoder));
    dpt_policy_t *p;
    REQUIRE_OK(dpt_policy_create_ex(&p, cls, &spec, S * L));
    /* With an encoder, no value clipping: the fill's values come from
     * acting from zero states, so a row may sit at the clip's kink. */
    dpt_ppo_loss_params_t hp = {0.2f, network ? 0.0f : 0.2f, 0.5f, 0.05f};
    dpt_model_t m = dpt_policy_ppo_model(p, &hp);
    CHECK(!(m.flags & DPT_MODEL_STORES_GRADS)); /* the LSTM's gradient accumulates */
    size_t n = m.vars->total;
    dpt_arena_t a, g, g2;
    REQUIRE_OK(dpt_arena_init(&a, n));
    REQUIRE_OK(dpt_arena_init(&g, n));
    REQUIRE_OK(dpt_arena_init(&g2, n));
    dpt_rng_t rng;
    dpt_rng_init(&rng, 7, 0, 0, DPT_RNG_TEST);
    dpt_policy_init_params(p, a.data, &rng);
    for (size_t i = 0; i < n; i++)
        a.data[i] += 0.3f * (dpt_rng_uniform(&rng) - 0.5f);
    seq_case_t c;
    REQUIRE_OK(seq_case_init(&c, p, S, L));
    const int32_t lens[S] = {4, 2, 3}; /* padding in two of the sequences */
    seq_case_fill(&c, p, a.data, lens, &rng);
    dpt_loss_out_t out;
    REQUIRE_OK(m.loss_grad(m.ctx, a.data, g.data, &c.b, &out));
    CHECK(out.rows == 9); /* the valid steps */
    CHECK(out.extra[DPT_PPO_STAT_CLIPFRAC] > 0.1 && out.extra[DPT_PPO_STAT_CLIPFRAC] < 0.9);
    CHECK_CLOSE(out.loss,
                out.extra[DPT_PPO_STAT_POLICY_LOSS] - 0.05 * out.extra[DPT_PPO_STAT_ENTROPY] +
                    0.5 * out.extra[DPT_PPO_STAT_VF_LOSS],
                1e-7);
    const float h = 1e-2f;
    double d = 0, na = 0, nn = 0;
    for (size_t i = 0; i < n; i++) {
        float s = a.data[i];
        a.data[i] = s + h;
        double fp = loss_at(&m, a.data, g2.data, n, &c.b);
        a.data[i] = s - h;
        double fm = loss_at(&m, a.data, g2.data, n, &c.b);
        a.data[i] = s;
        double num = (fp - fm) / (2.0 * (double)h);
        d += ((double)g.data[i] - num) * ((double)g.data[i] - num);
        na += (double)g.data[i] * (double)g.data[i];
        nn += num * num;
    }
    double rel = sqrt(d) / sqrt(fmax(na, nn));
    printf("%s (prev action %d, prev reward %d%s%s): recurrent ppo gradient relative error %.2e "
           "(|g| = %.3g)\n",
           cls->name, prev_action, prev_reward, network ? ", encoder " : "", network ? network : "",
           rel, sqrt(na));
    CHECK(rel < 3e-3);
    /* Every LSTM variable gets a gradient. */
    const dpt_var_t *wih = dpt_vartable_find(m.vars, "lstm.weight_ih");
    REQUIRE(wih);
    CHECK(dpt_vec_sumsq(g.data + wih->offset, wih->count) > 1e-12);
    const dpt_var_t *e0 = dpt_vartable_find(m.vars, "encoder.0.weight");
    CHECK(!network || (e0 && dpt_vec_sumsq(g.data + e0->offset, e0->count) > 1e-12));
    seq_case_free(&c);
    dpt_arena_deinit(&a);
    dpt_arena_deinit(&g);
    dpt_arena_deinit(&g2);
    dpt_policy_destroy(p);
}

static void test_gradient_categorical(void)
{
    dpt_env_class_t cls = discrete_cls();
    check_rnn_gradient(&cls, 0, 0, NULL);
    check_rnn_gradient(&cls, 1, 1, NULL);
    check_rnn_gradient(&cls, 1, 1, "dense(6) tanh");
}

static void test_gradient_gaussian(void)
{
    dpt_env_class_t cls = box_cls();
    check_rnn_gradient(&cls, 1, 1, NULL);
    check_rnn_gradient(&cls, 0, 1, "dense(4) relu");
}

/* Whatever the padded rows hold (NaN observations, out-of-range actions,
 * any log-prob or advantage) the loss and the gradient are the same bits. */
static void test_padding_changes_nothing(void)
{
    enum { S = 3, L = 4 };
    dpt_env_class_t cls = discrete_cls();
    dpt_policy_spec_t spec = rnn_spec(5, L, 1, 1);
    dpt_policy_t *p;
    REQUIRE_OK(dpt_policy_create_ex(&p, &cls, &spec, S * L));
    dpt_ppo_loss_params_t hp = {0.2f, 0.2f, 0.5f, 0.05f};
    dpt_model_t m = dpt_policy_ppo_model(p, &hp);
    size_t n = m.vars->total;
    dpt_arena_t a, g1, g2;
    REQUIRE_OK(dpt_arena_init(&a, n));
    REQUIRE_OK(dpt_arena_init(&g1, n));
    REQUIRE_OK(dpt_arena_init(&g2, n));
    dpt_rng_t rng;
    dpt_rng_init(&rng, 8, 0, 0, DPT_RNG_TEST);
    dpt_policy_init_params(p, a.data, &rng);
    seq_case_t c;
    REQUIRE_OK(seq_case_init(&c, p, S, L));
    const int32_t lens[S] = {1, 4, 2};
    seq_case_fill(&c, p, a.data, lens, &rng);
    dpt_loss_out_t o1, o2;
    REQUIRE_OK(m.loss_grad(m.ctx, a.data, g1.data, &c.b, &o1));
    for (size_t s = 0; s < S; s++)
        for (size_t t = (size_t)lens[s]; t < L; t++) {
            size_t r = s * L + t;
            c.obs[r * 3] = NAN;
            ((int32_t *)c.act)[r] = 99;
            ((int32_t *)c.prev_act)[r] = -4;
            c.logp[r] = c.adv[r] = c.ret[r] = c.val[r] = c.prev_rew[r] = 1e30f;
        }
    REQUIRE_OK(m.loss_grad(m.ctx, a.data, g2.data, &c.b, &o2));
    CHECK(o1.loss == o2.loss && o1.rows == o2.rows && o1.rows == 7);
    CHECK(memcmp(g1.data, g2.data, n * sizeof(float)) == 0);
    /* A real row with a bad action or length is refused, naming it. */
    ((int32_t *)c.act)[4] = 7;
    CHECK_ERR(m.loss_grad(m.ctx, a.data, g2.data, &c.b, &o2), DPT_EINVAL, "action 7");
    ((int32_t *)c.act)[4] = 0;
    ((int32_t *)c.prev_act)[4] = 3;
    CHECK_ERR(m.loss_grad(m.ctx, a.data, g2.data, &c.b, &o2), DPT_EINVAL,
              "previous action 3 out of range");
    ((int32_t *)c.prev_act)[4] = 0;
    c.lens[2] = 5;
    CHECK_ERR(m.loss_grad(m.ctx, a.data, g2.data, &c.b, &o2), DPT_EINVAL,
              "sequence 2 has length 5");
    c.lens[2] = 2;
    dpt_batch_t nocol = c.b;
    nocol.ncols = 6; /* the PPO columns only */
    CHECK_ERR(m.loss_grad(m.ctx, a.data, g2.data, &nocol, &o2), DPT_EINVAL, "seq_lens");
    nocol = c.b;
    nocol.seq_len = 0;
    CHECK_ERR(m.loss_grad(m.ctx, a.data, g2.data, &nocol, &o2), DPT_EINVAL, "sequences of 1..4");
    seq_case_free(&c);
    dpt_arena_deinit(&a);
    dpt_arena_deinit(&g1);
    dpt_arena_deinit(&g2);
    dpt_policy_destroy(p);
}

/* Two envs act for 7 steps with carried state (episodes of EP_LEN = 5, so
 * one ends and a new one starts from zeros); the same steps cut into
 * sequences of 3 (at the episode's end and every 3 steps), each starting
 * from the state recorded while acting, give the training forward the
 * acting log-probs and values: KL 0, value loss 0. */
static void replays_acting(const char *network)
{
    enum { N = 2, T = 7, L = 3, H = 6 };
    dpt_env_class_t cls = discrete_cls();
    dpt_policy_spec_t spec = rnn_spec(H, 1, 1, 1);
    if (network)
        REQUIRE_OK(
            dpt_network_parse(network, spec.encoder, DPT_NETWORK_MAX_LAYERS, &spec.nencoder));
    dpt_policy_t *actor, *learner;
    REQUIRE_OK(dpt_policy_create_ex(&actor, &cls, &spec, N));
    spec.max_seq_len = L;
    REQUIRE_OK(dpt_policy_create_ex(&learner, &cls, &spec, 8 * L));
    size_t n = dpt_policy_vars(actor)->total;
    dpt_arena_t a, g;
    REQUIRE_OK(dpt_arena_init(&a, n));
    REQUIRE_OK(dpt_arena_init(&g, n));
    dpt_rng_t rng;
    dpt_rng_init(&rng, 9, 0, 0, DPT_RNG_TEST);
    dpt_policy_init_params(actor, a.data, &rng);
    dpt__rollout_t ro;
    REQUIRE_OK(dpt__rollout_init(&ro, &cls, N, T, 3, 0, H));
    REQUIRE_OK(dpt__rollout_collect(&ro, actor, a.data, 0.9, 0.9, 1.0f, T, NULL, NULL));
    CHECK(ro.steps == T && ro.dones[4 * N] && ro.dones[4 * N + 1]);
    dpt__chunk_t chunks[N * T];
    size_t nseq = dpt__rollout_chunk(&ro, L, chunks);
    /* Each env: [0, 3), [3, 5) (the episode ends at step 4), [5, 7). */
    CHECK(nseq == 6);
    CHECK(chunks[0].t0 == 0 && chunks[0].len == 3 && chunks[1].t0 == 3 && chunks[1].len == 2);
    CHECK(chunks[2].t0 == 5 && chunks[2].len == 2 && chunks[3].env == 1);
    dpt__rl_batch_t bb;
    REQUIRE_OK(dpt__rl_batch_init(&bb, &ro, nseq * L, nseq));
    size_t order[6] = {5, 0, 3, 1, 4, 2};
    dpt__rollout_gather_seq(&ro, chunks, order, nseq, L, &bb);
    CHECK(bb.seq_lens[0] == 2 && bb.mask[2] == 0 && bb.obs[2 * 3] == 0.0f);
    /* The second episode's sequence starts from zeros; a mid-episode one
     * from the state recorded before its first step. */
    CHECK(dpt_vec_sumsq(bb.h0 + 0 * H, H) == 0.0 && dpt_vec_sumsq(bb.h0 + 4 * H, H) > 0.0);
    CHECK(memcmp(bb.h0 + 4 * H, ro.step_h + (3 * N + 1) * H, H * sizeof(float)) == 0);
    /* The previous action of step 1 is step 0's action. */
    CHECK(((int32_t *)bb.prev_act)[1 * L + 1] == ((int32_t *)ro.actions)[0]);
    for (size_t r = 0; r < nseq * L; r++)
        bb.ret[r] = bb.val[r]; /* value loss: (V - V_old)^2 */
    dpt_batch_t b;
    REQUIRE_OK(dpt_ppo_batch(&b, &cls, nseq * L, bb.obs, bb.act, bb.logp, bb.adv, bb.ret, bb.val));
    REQUIRE_OK(
        dpt_ppo_batch_seq(&b, learner, L, bb.seq_lens, bb.h0, bb.c0, bb.prev_act, bb.prev_rew));
    dpt_ppo_loss_params_t hp = {0.2f, 0.0f, 0.5f, 0.0f};
    dpt_model_t m = dpt_policy_ppo_model(learner, &hp);
    dpt_loss_out_t out;
    REQUIRE_OK(m.loss_grad(m.ctx, a.data, g.data, &b, &out));
    CHECK(out.rows == N * T);
    printf("training replays acting%s%s: kl %.3g, value loss %.3g\n", network ? ", encoder " : "",
           network ? network : "", out.extra[DPT_PPO_STAT_KL], out.extra[DPT_PPO_STAT_VF_LOSS]);
    CHECK(fabs(out.extra[DPT_PPO_STAT_KL]) < 1e-10);
    CHECK(out.extra[DPT_PPO_STAT_VF_LOSS] < 1e-10);
    CHECK(out.extra[DPT_PPO_STAT_CLIPFRAC] == 0.0);
    /* Starting the sequences from zeros instead breaks it. */
    dpt_vec_zero(bb.h0, nseq * H);
    dpt_vec_zero(bb.c0, nseq * H);
    REQUIRE_OK(m.loss_grad(m.ctx, a.data, g.data, &b, &out));
    CHECK(out.extra[DPT_PPO_STAT_VF_LOSS] > 1e-9);
    dpt__rl_batch_deinit(&bb);
    dpt__rollout_deinit(&ro);
    dpt_arena_deinit(&a);
    dpt_arena_deinit(&g);
    dpt_policy_destroy(actor);
    dpt_policy_destroy(learner);
}

static void test_training_replays_acting(void)
{
    replays_acting(NULL);
    replays_acting("dense(5) tanh");
}

/* The cutting rule on hand-made episode ends. */
static void test_chunk_rule(void)
{
    enum { N = 2, T = 10 };
    dpt_env_class_t cls = discrete_cls();
    dpt__rollout_t ro;
    REQUIRE_OK(dpt__rollout_init(&ro, &cls, N, T, 1, 0, 4));
    ro.steps = T;
    memset(ro.dones, 0, N * T);
    ro.dones[2 * N + 0] = ro.dones[7 * N + 0] = 1; /* env 0 ends at steps 2 and 7 */
    ro.dones[9 * N + 1] = 1;                       /* env 1 at its last step */
    dpt__chunk_t ch[N * T];
    CHECK(dpt__rollout_max_chunks(&ro) == N * T);
    size_t n = dpt__rollout_chunk(&ro, 4, ch);
    const uint32_t want[][3] = {{0, 0, 3}, {0, 3, 4}, {0, 7, 1}, {0, 8, 2},
                                {1, 0, 4}, {1, 4, 4}, {1, 8, 2}};
    REQUIRE(n == 7);
    for (size_t i = 0; i < n; i++)
        CHECK(ch[i].env == want[i][0] && ch[i].t0 == want[i][1] && ch[i].len == want[i][2]);
    /* A shortened fragment (preemption) is cut at its end; L = 1 makes
     * every step a sequence. */
    ro.steps = 5;
    CHECK(dpt__rollout_chunk(&ro, 100, ch) == 3); /* [0,3) [3,5) | [0,5) */
    CHECK(dpt__rollout_chunk(&ro, 1, ch) == 10);
    dpt__rollout_deinit(&ro);
}

static void test_masked_normalization(void)
{
    enum { D = 2, RPD = 8, PDB = 4 };
    float x[D * RPD], y[D * RPD];
    uint8_t ones[D * RPD], mask[D * RPD];
    for (int i = 0; i < D * RPD; i++) {
        x[i] = y[i] = (float)((i * 7) % 11) - 3.0f;
        ones[i] = 1;
        mask[i] = (i % 4) != 3; /* the last row of every 4 is padding */
    }
    float z[D * RPD];
    memcpy(z, x, sizeof x);
    dpt__rl_normalize_minibatches(x, D, RPD, PDB);
    dpt__rl_normalize_minibatches_masked(y, ones, D, RPD, PDB);
    CHECK(memcmp(x, y, sizeof x) == 0);
    dpt__rl_normalize_minibatches_masked(z, mask, D, RPD, PDB);
    for (int o = 0; o < RPD; o += PDB) {
        double m = 0, s = 0;
        int cnt = 0;
        for (int d = 0; d < D; d++)
            for (int k = 0; k < PDB; k++) {
                int i = d * RPD + o + k;
                if (mask[i]) {
                    m += (double)z[i];
                    s += (double)z[i] * (double)z[i];
                    cnt++;
                } else {
                    CHECK(z[i] == (float)((i * 7) % 11) - 3.0f); /* untouched */
                }
            }
        CHECK(fabs(m / cnt) < 1e-6);
        CHECK_CLOSE(s / cnt, 1.0, 1e-5);
    }
}

/* ---- the towers' sequence rules with the LSTM model --------------------------------- */

/* A wrapper around the policy's PPO model that records, for every call,
 * which sequences it got: every row's observation 0 holds its sequence's
 * number, and so does the sequence's state_in_1 column 0. A call whose
 * rows and per-sequence state disagree, or that gets part of a sequence,
 * counts as a split. Device d's wrapper is spies[d]: the towers use the
 * model's own context on device 0 and make replicas for devices 1..N-1 in
 * order. */
#define MAX_CALLS 64
#define MAX_DEVICES 4
typedef struct spy {
    dpt_model_t inner;
    void *inner_ctx;
    int calls, splits;
    int first[MAX_CALLS], count[MAX_CALLS];
} spy_t;

static spy_t *spies[MAX_DEVICES];
static int nspies;

static int spy_loss(void *ctx, const float *params, float *grads, const dpt_batch_t *b,
                    dpt_loss_out_t *out)
{
    spy_t *s = ctx;
    const dpt_column_t *obs = dpt_batch_find(b, DPT_PPO_COL_OBS);
    const dpt_column_t *c0 = dpt_batch_find(b, DPT_PPO_COL_STATE_C);
    const dpt_column_t *lens = dpt_batch_find(b, DPT_PPO_COL_SEQ_LENS);
    size_t L = b->seq_len, S = L ? b->rows / L : 0;
    if (!L || b->rows % L)
        s->splits++;
    for (size_t q = 0; q < S; q++) {
        float id = ((const float *)c0->data)[q * c0->width];
        int32_t len = ((const int32_t *)lens->data)[q];
        for (size_t t = 0; t < (size_t)len; t++)
            if (((const float *)obs->data)[(q * L + t) * obs->width] != id)
                s->splits++;
        /* The sequences of one call are consecutive. */
        if (q > 0 && id != ((const float *)c0->data)[(q - 1) * c0->width] + 1.0f)
            s->splits++;
    }
    if (s->calls < MAX_CALLS && S > 0) {
        s->first[s->calls] = (int)((const float *)c0->data)[0];
        s->count[s->calls] = (int)S;
    }
    s->calls++;
    return s->inner.loss_grad(s->inner_ctx, params, grads, b, out);
}

static int spy_replicate(void *ctx, void **copy)
{
    spy_t *s = ctx, *r = calloc(1, sizeof *r);
    if (!r || nspies == MAX_DEVICES) {
        free(r);
        return DPT_ENOMEM;
    }
    r->inner = s->inner;
    int rc = s->inner.replicate(s->inner_ctx, &r->inner_ctx);
    if (rc) {
        free(r);
        return rc;
    }
    spies[nspies++] = r;
    *copy = r;
    return DPT_OK;
}

static void spy_release(void *copy)
{
    spy_t *s = copy;
    s->inner.release(s->inner_ctx);
    free(s);
}

static dpt_env_class_t spy_cls;

/* The towers over the spy: N devices, M rows per device, sequences of L;
 * root (device 0's spy) wraps *p. */
static dpt_towers_t *spy_towers(dpt_policy_t **p, spy_t *root, int N, size_t M, size_t L,
                                size_t max_rows)
{
    spy_cls = discrete_cls();
    dpt_policy_spec_t spec = rnn_spec(4, L, 0, 0);
    size_t q = M / L ? M / L : 1;
    if (dpt_policy_create_ex(p, &spy_cls, &spec, q * L))
        return NULL;
    dpt_ppo_loss_params_t hp = {0.2f, 0.2f, 0.5f, 0.01f};
    memset(root, 0, sizeof *root);
    root->inner = dpt_policy_ppo_model(*p, &hp);
    root->inner_ctx = *p;
    spies[0] = root;
    nspies = 1;
    dpt_model_t m = root->inner;
    m.ctx = root;
    m.loss_grad = spy_loss;
    m.replicate = spy_replicate;
    m.release = spy_release;
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.num_devices = N;
    tc.max_per_device_batch_size = M;
    tc.max_load_rows = max_rows;
    tc.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
    dpt_batch_t lay;
    dpt_towers_t *t = NULL;
    if (dpt__rl_layout(*p, &lay) || dpt_towers_create(&t, &m, &lay, &tc)) {
        fprintf(stderr, "spy towers: %s\n", dpt_last_error());
        return NULL;
    }
    return t;
}

/* Marks sequence s's rows and state with s (see spy_t). */
static void mark_sequences(seq_case_t *c)
{
    for (size_t s = 0; s < c->S; s++) {
        c->lens[s] = (int32_t)(1 + s % c->L);
        c->c0[s * c->H] = (float)s;
        for (size_t t = 0; t < c->L; t++)
            c->obs[(s * c->L + t) * c->od] = (float)s;
    }
}

/* Loads S sequences of L steps on N devices with M rows per device; checks
 * the plan and the counts (sequences per device want_spd, per step
 * want_q, dropped rows), the warning, and that every step gave every
 * device whole sequences: q consecutive ones of its own block [d spd,
 * (d+1) spd), minibatch after minibatch. */
static void check_rules(int N, size_t M, size_t L, size_t S, size_t want_spd, size_t want_q,
                        int want_warning)
{
    dpt_policy_t *p;
    spy_t root;
    dpt_towers_t *t = spy_towers(&p, &root, N, M, L, 64 * L);
    REQUIRE(t);
    REQUIRE(nspies == N);
    seq_case_t c;
    REQUIRE_OK(seq_case_init(&c, p, S, L));
    mark_sequences(&c);
    dpt_towers_load_info_t plan, li;
    REQUIRE_OK(dpt_towers_plan(t, &c.b, 0, &plan));
    REQUIRE_OK(dpt_towers_load(t, 0, &c.b, &li));
    CHECK(memcmp(&plan, &li, sizeof li) == 0);
    size_t keep = want_spd * (size_t)N;
    printf("N=%d M=%zu L=%zu S=%zu: %zu sequences per device, %zu per step, %zu rows "
           "dropped%s%s\n",
           N, M, L, S, li.rows_per_device / L, li.per_device_batch / L, li.rows_dropped,
           li.warning[0] ? "; warning: " : "", li.warning);
    CHECK(li.rows_per_device == want_spd * L);
    CHECK(li.per_device_batch == want_q * L);
    CHECK(li.rows_loaded == keep * L && li.rows_dropped == (S - keep) * L);
    CHECK(li.minibatch == want_q * (size_t)N * L);
    CHECK(li.steps == want_spd / want_q);
    CHECK((li.warning[0] != '\0') == want_warning);
    if (want_warning)
        CHECK(strstr(li.warning, "raised to") && strstr(li.warning, "one sequence per device"));
    for (size_t o = 0; o < li.rows_per_device; o += li.per_device_batch)
        CHECK_OK(dpt_towers_optimize(t, 0, o, 0.0f, NULL));
    /* Call 0 is the gradient-set check (the first minibatch); then one
     * call per step. */
    for (int d = 0; d < N; d++) {
        const spy_t *s = spies[d];
        CHECK(s->splits == 0);
        CHECK(s->calls == (int)li.steps + 1);
        for (int k = 0; k < s->calls && k < MAX_CALLS; k++) {
            size_t step = k ? (size_t)k - 1 : 0;
            CHECK(s->count[k] == (int)want_q);
            CHECK(s->first[k] == (int)((size_t)d * want_spd + step * want_q));
        }
    }
    seq_case_free(&c);
    dpt_towers_destroy(t);
    dpt_policy_destroy(p);
}

static void test_towers_rules_one_device(void)
{
    /* M = 8 rows of sequences of 4: 2 sequences per step; 7 loaded: 6 kept,
     * one (4 rows) dropped. */
    check_rules(1, 8, 4, 7, 6, 2, 0);
    /* M < L: raised to one sequence per device, with the warning. */
    check_rules(1, 3, 4, 5, 5, 1, 1);
}

static void test_towers_rules_two_devices(void)
{
    /* 2 per device per step (4 per minibatch); 10 sequences: 8 kept. */
    check_rules(2, 8, 4, 10, 4, 2, 0);
    /* Fewer sequences than a minibatch: shrink to one per device, 3 -> 2. */
    check_rules(2, 8, 4, 3, 1, 1, 0);
    check_rules(2, 2, 4, 6, 3, 1, 1);
}

static void test_towers_rules_three_devices(void)
{
    /* 3 devices x 2 sequences = 6 per minibatch; 20 sequences: 18 kept
     * (3 steps of 2 per device), 2 dropped. */
    check_rules(3, 8, 4, 20, 6, 2, 0);
    check_rules(3, 1, 4, 7, 2, 1, 1);
    /* 3 x 3 per minibatch, 12 sequences: one minibatch, 3 dropped. */
    check_rules(3, 12, 4, 12, 3, 3, 0);
}

static void test_towers_errors(void)
{
    dpt_policy_t *p;
    spy_t root;
    dpt_towers_t *t = spy_towers(&p, &root, 3, 8, 4, 64);
    REQUIRE(t);
    seq_case_t c;
    REQUIRE_OK(seq_case_init(&c, p, 2, 4));
    mark_sequences(&c);
    dpt_towers_load_info_t li;
    /* 2 sequences for 3 devices. */
    CHECK_ERR(dpt_towers_load(t, 0, &c.b, &li), DPT_EINVAL,
              "2 sequences for 3 devices; every device needs at least one whole sequence: raise "
              "the minibatch size or shorten the sequences");
    CHECK_ERR(dpt_towers_plan(t, &c.b, 0, &li), DPT_EINVAL, "raise the minibatch size");
    c.b.rows = 7;
    CHECK_ERR(dpt_towers_load(t, 0, &c.b, &li), DPT_EINVAL, "not whole sequences of 4");
    seq_case_free(&c);
    dpt_towers_destroy(t);
    dpt_policy_destroy(p);
}

/* The PPO engine on sequences: episodes of 5 steps in fragments of 8 and
 * sequences of 3 give [0, 3) [3, 5) [5, 8) per env in the first
 * iteration; the metrics count them, the padding and the dropped rows. */
static void test_ppo_engine_sequences(void)
{
    dpt_env_class_t cls = discrete_cls();
    dpt_ppo_config_t cfg;
    REQUIRE_OK(dpt__ppo_defaults(&cfg));
    cfg.common.num_envs = 2;
    cfg.common.rollout_fragment_length = 8;
    cfg.learn.sgd_minibatch_size = 12; /* 4 sequences of 3: 6 made, 4 kept */
    cfg.common.policy.use_lstm = 1;
    cfg.common.policy.lstm_cell_size = 8;
    cfg.common.policy.max_seq_len = 3;
    cfg.common.policy.lstm_use_prev_action = 1;
    dpt_ppo_t *p;
    REQUIRE_OK(dpt_ppo_create(&p, &cls, &cfg));
    dpt_rl_result_t r;
    REQUIRE_OK(dpt_ppo_train(p, &r));
    CHECK(r.timesteps_this_iter == 16 && r.sequences == 6);
    CHECK(r.rows_padded == 6 * 3 - 16 && r.rows_dropped == 2 * 3);
    CHECK(r.note[0] == '\0');
    REQUIRE_OK(dpt_ppo_train(p, &r));
    CHECK(r.iteration == 2 && r.sequences >= 6);
    dpt_ppo_destroy(p);
    /* A minibatch shorter than a sequence: the towers raise it and say so. */
    cfg.learn.sgd_minibatch_size = 2;
    REQUIRE_OK(dpt_ppo_create(&p, &cls, &cfg));
    REQUIRE_OK(dpt_ppo_train(p, &r));
    CHECK(r.rows_dropped == 0);
    CHECK(strstr(r.note, "raised to 3 rows (one sequence per device)") != NULL);
    dpt_ppo_destroy(p);
}

/* python/dpt/policy.py, the Python reference reader (docs/CHECKPOINTS.md),
 * run as a command by python3 (or $PYTHON) with numpy, rebuilds a recurrent
 * policy from a checkpoint the PPO trainer wrote and steps it through two
 * episodes: the same greedy actions, values and logits as dpt's own policy,
 * up to float rounding. */
static void test_python_policy_reader(void)
{
    const char *py = getenv("PYTHON");
    char cmd[2400];
    py = py && *py ? py : "python3";
    snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        printf("skipped: %s or its numpy is not installed (the Python policy reader check)\n", py);
        return;
    }
    char dir[512], ckpt[600], in[600], out[600];
    REQUIRE(dpt_test_mkdtemp(dir, sizeof dir, "dpt_rnn_py") == 0);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt.safetensors", dir);
    snprintf(in, sizeof in, "%s/steps.txt", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    static const char *const keys[] = {"job=ppo",
                                       "env=CartPole-v1",
                                       "use_lstm=true",
                                       "lstm_cell_size=8",
                                       "lstm_use_prev_action=true",
                                       "lstm_use_prev_reward=true",
                                       "reward_scale=0.5",
                                       "policy_hidden=8",
                                       "num_envs_per_worker=2",
                                       "rollout_fragment_length=16",
                                       "sgd_minibatch_size=16",
                                       "max_seq_len=4",
                                       "lr=0.01"};
    dpt_config_t *cfg;
    REQUIRE_OK(dpt_config_create(&cfg));
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        REQUIRE_OK(dpt_config_set(cfg, keys[i]));
    REQUIRE_OK(dpt_config_finalize(cfg));
    dpt_trainer_t *t;
    REQUIRE_OK(dpt_trainer_create(&t, cfg, NULL));
    dpt_train_result_t r;
    REQUIRE_OK(dpt_trainer_iterate(t, &r));
    dpt_safetensors_writer_t *w;
    REQUIRE_OK(dpt_safetensors_writer_create(&w));
    REQUIRE_OK(dpt_trainer_checkpoint(t, w));
    REQUIRE_OK(dpt_safetensors_save(w, ckpt));
    size_t n = dpt_trainer_vars(t)->total;
    dpt_arena_t a;
    REQUIRE_OK(dpt_arena_init(&a, n));
    REQUIRE_OK(dpt_trainer_get_weights(t, a.data, n));
    dpt_safetensors_writer_destroy(w);
    /* dpt's side: the acting policy of that config, stepped by hand. */
    const dpt_env_class_t *cls = dpt_env_find("CartPole-v1");
    REQUIRE(cls);
    dpt_policy_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.hidden[0] = 8;
    spec.nhidden = 1;
    spec.use_lstm = 1;
    spec.lstm_cell_size = 8;
    spec.lstm_use_prev_action = spec.lstm_use_prev_reward = 1;
    spec.prev_reward_scale = 0.5f;
    spec.max_seq_len = 1;
    dpt_policy_t *p;
    REQUIRE_OK(dpt_policy_create_ex(&p, cls, &spec, 1));
    REQUIRE(dpt_policy_vars(p)->total == n);
    enum { STEPS = 9, RESET_AT = 5 };
    float obs[STEPS][4], h[16] = {0}, prev_rew = 0.0f, value[STEPS], logp[STEPS];
    int32_t act[STEPS], prev_act = -1;
    dpt_policy_state_t st = {h, h + 8, &prev_act, &prev_rew};
    dpt_rng_t rng;
    dpt_rng_init(&rng, 5, 0, 0, DPT_RNG_TEST);
    FILE *f = fopen(in, "w");
    REQUIRE(f);
    for (int k = 0; k < STEPS; k++) {
        if (k == RESET_AT) {
            memset(h, 0, sizeof h);
            prev_act = -1;
            prev_rew = 0.0f;
            fprintf(f, "reset\n");
        }
        dpt_rng_fill_uniform(&rng, obs[k], 4, -1, 1);
        for (int j = 0; j < 4; j++)
            fprintf(f, "%.9g ", (double)obs[k][j]);
        if (k != 0 && k != RESET_AT)
            fprintf(f, "| %.9g", (double)prev_rew);
        fprintf(f, "\n");
        REQUIRE_OK(
            dpt_policy_act_state(p, a.data, obs[k], &st, 1, NULL, &act[k], &logp[k], &value[k]));
        prev_act = act[k];
        prev_rew = 0.25f * (float)(k + 1); /* the reward this step earned */
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s/python/dpt/policy.py' '%s' < '%s' > '%s'", py,
             DPT_SOURCE_DIR, ckpt, in, out);
    fflush(stdout);
    REQUIRE(system(cmd) == 0);
    f = fopen(out, "r");
    REQUIRE(f);
    double worst = 0.0;
    for (int k = 0; k < STEPS; k++) {
        int pa;
        double pv, l0, l1;
        CHECK(fscanf(f, "%d %lf %lf %lf", &pa, &pv, &l0, &l1) == 4);
        CHECK(pa == act[k]);
        /* The greedy action's log-probability from Python's logits. */
        double la = pa ? l1 : l0, lse = fmax(l0, l1) + log1p(exp(-fabs(l0 - l1)));
        double d = fabs(pv - (double)value[k]) / fmax(1.0, fabs((double)value[k]));
        double e = fabs((la - lse) - (double)logp[k]);
        worst = fmax(worst, fmax(d, e));
    }
    fclose(f);
    printf("python policy reader: %d steps, actions equal, values and log-probs within %.2g\n",
           STEPS, worst);
    CHECK(worst < 1e-5);
    dpt_policy_destroy(p);
    dpt_arena_deinit(&a);
    dpt_trainer_destroy(t);
    dpt_config_destroy(cfg);
    dpt_test_rm_tree(dir);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_layout_and_errors),
        DPT_TEST(test_gradient_categorical),
        DPT_TEST(test_gradient_gaussian),
        DPT_TEST(test_padding_changes_nothing),
        DPT_TEST(test_training_replays_acting),
        DPT_TEST(test_chunk_rule),
        DPT_TEST(test_masked_normalization),
        DPT_TEST(test_towers_rules_one_device),
        DPT_TEST(test_towers_rules_two_devices),
        DPT_TEST(test_towers_rules_three_devices),
        DPT_TEST(test_towers_errors),
        DPT_TEST(test_ppo_engine_sequences),
        DPT_TEST(test_python_policy_reader),
    };
    return DPT_TEST_RUN(cases);
}
