/*
 * dpt bench cnn — training samples/s of two small convolutional networks
 * through the towers engine (ps mode, the batch split over --devices
 * threads): the workloads of bench/torch_cnn.py, its PyTorch counterpart.
 *
 *  fashion  the CNN of examples/fashion_mnist_cnn.conf on [1, 28, 28]
 *           images: conv(32,k=3,pad=1) relu maxpool(2) conv(64,k=3,pad=1)
 *           relu maxpool(2) flatten dense(128) relu dense(10). One step:
 *           forward, softmax cross-entropy, backward, Adam (lr 1e-3), as
 *           the supervised job trains it. Batch 256.
 *  minatar  Pgx's MinAtar policy on [4, 10, 10] observations: the encoder
 *           conv(32,k=2,pad=same) relu avgpool(2) flatten dense(64) relu
 *           under dpt's actor (64-64 tanh, 6 logits) and critic (64-64
 *           tanh, 1 value), policy_hidden = 64,64. One step: one PPO
 *           minibatch (forward, clipped loss with value clipping and the
 *           entropy bonus, backward, Adam lr 1e-3), as the ppo job trains
 *           it. Batch 512. The policy is built for a synthetic env class
 *           whose reset and step are never called.
 *
 * Data: random with fixed seeds, BC_MINIBATCHES minibatches loaded once and
 * stepped in turn. Each round times every selected network for S/R seconds
 * in turn (so a slow moment of a shared machine hits all of them); the
 * figures are medians over the R rounds.
 *
 * FLOPs per sample count the conv and dense layers only: 2 x MACs forward,
 * 3 x that for forward + backward, less the first layer's input gradient
 * (never computed). The peak is one thread's 512^3 GEMM with the active
 * kernel, as `dpt bench ppo --profile` measures it, and
 * of_peak = GFLOP/s / (devices x peak). The conv layers' share is given
 * twice: of those FLOPs, and of the time, estimated by timing the conv
 * kernels alone (forward, then backward into the weights, the bias and,
 * past the first layer, the input) on one thread at the per-device batch,
 * once per round, against the step's time.
 */
#include "../../tools/cli.h"
#include "dpt/dpt.h"
#include "dpt/env.h"
#include "dpt/rl.h"
#include "dpt/towers.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BC_ROUNDS_DEFAULT 7
#define BC_ROUNDS_MAX 101
#define BC_SECONDS_DEFAULT 7.0
#define BC_MAX_DEVICES 64
#define BC_MINIBATCHES 4 /* loaded once, stepped in turn */
#define BC_WARMUP 3
#define BC_LR 1e-3f
#define BC_MAX_CONV 8
#define BC_ACTIONS 6 /* MinAtar's full action set */
#define BC_HIDDEN 64 /* the policy's heads: policy_hidden = 64,64 */

/* The workloads: symbol, --net name, input shape (C, H, W), network,
 * default batch. fashion's last dense(10) is the output layer the
 * supervised job adds; minatar's network is the policy's encoder. */
#define BC_NET_LIST(X)                                                                 \
    X(BC_FASHION, "fashion", 1, 28, 28,                                                \
      "conv(32,k=3,pad=1) relu maxpool(2) conv(64,k=3,pad=1) relu maxpool(2) flatten " \
      "dense(128) relu dense(10)",                                                     \
      256)                                                                             \
    X(BC_MINATAR, "minatar", 4, 10, 10,                                                \
      "conv(32,k=2,pad=same) relu avgpool(2) flatten dense(64) relu", 512)

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum bc_kind {
#define BC__ENUM(sym, name, c, h, w, net, batch) sym,
    BC_NET_LIST(BC__ENUM)
#undef BC__ENUM
    BC_NET_COUNT
} bc_kind_t;
/* clang-format on */

typedef struct bc_def {
    const char *name;
    dpt_shape_t in;
    const char *network;
    size_t batch;
} bc_def_t;

static const bc_def_t bc_defs[BC_NET_COUNT] = {
#define BC__DEF(sym, name, c, h, w, net, batch) {name, {c, h, w}, net, batch},
    BC_NET_LIST(BC__DEF)
#undef BC__DEF
};

#define BC_OBS (4 * 10 * 10) /* minatar's observation */

/* ---- the synthetic env class of the minatar policy ---------------------- */

static void bc_env_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)state;
    (void)rng;
    memset(obs, 0, BC_OBS * sizeof *obs);
}

static void bc_env_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                        int *terminated)
{
    (void)action;
    bc_env_reset(state, rng, obs);
    *reward = 0.0f;
    *terminated = 1;
}

static const dpt_env_class_t bc_minatar_class = {
    .name = "MinAtarSynthetic-v0",
    .obs_dim = BC_OBS,
    .obs_shape = {4, 10, 10},
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = BC_ACTIONS,
    .reset = bc_env_reset,
    .step = bc_env_step,
};

/* dpt's PPO defaults (clip_param, vf_clip_param, vf_loss_coeff,
 * entropy_coeff), which bench/torch_cnn.py uses too. */
static const dpt_ppo_loss_params_t bc_ppo = {0.2f, 0.2f, 0.5f, 0.01f};

/* ---- arguments ---------------------------------------------------------- */

typedef struct bc_args {
    int nets[BC_NET_COUNT]; /* selected by --net (none given: all) */
    size_t batch;           /* 0: each network's default */
    int devices;
    double seconds; /* timed seconds per network, shared by the rounds */
    int rounds;
    int per_round, json;
} bc_args_t;

/* ---- one network: the engine, its FLOPs, its conv layers alone ----------- */

/* A conv layer of the network, timed alone on one thread. */
typedef struct bc_conv {
    dpt_conv2d_t cv;
    int first; /* the network's first layer: no input gradient */
    float *x, *y, *w, *b, *dx, *dw, *db, *ws;
} bc_conv_t;

typedef struct bc_net {
    bc_kind_t kind;
    size_t batch, pdb; /* rows per step, per device */
    dpt_layer_spec_t layers[DPT_NETWORK_MAX_LAYERS];
    size_t nlayers;
    dpt_mlp_t *mlp;       /* fashion */
    dpt_policy_t *policy; /* minatar */
    dpt_towers_t *t;
    dpt_towers_load_info_t li;
    size_t step;
    double flop, conv_flop; /* per sample, forward + backward */
    bc_conv_t conv[BC_MAX_CONV];
    size_t nconv;
    double rates[BC_ROUNDS_MAX];  /* samples/s per round */
    double conv_s[BC_ROUNDS_MAX]; /* seconds of the conv kernels per step, per round */
} bc_net_t;

/* Multiply-adds per sample of a conv2d or linear layer (0 for the others). */
static double bc_macs(const dpt_layer_spec_t *l, dpt_shape_t in, dpt_shape_t out)
{
    if (l->kind == DPT_LAYER_CONV2D)
        return (double)out.c * (double)out.h * (double)out.w * (double)in.c * (double)l->kh *
               (double)l->kw;
    if (l->kind == DPT_LAYER_LINEAR)
        return (double)in.c * (double)in.h * (double)in.w * (double)l->out;
    return 0.0;
}

/* Adds the training FLOPs per sample of a stack on input `in` to *flop
 * (and its conv layers' to *conv): 6 x MACs per layer, 4 x for the first
 * when it reads the network's input (`reads_input`: no input gradient). */
static int bc_count(dpt_shape_t in, const dpt_layer_spec_t *layers, size_t n, int reads_input,
                    double *flop, double *conv)
{
    dpt_shape_t shapes[DPT_NETWORK_MAX_LAYERS];
    int rc = dpt_layers_shapes(in, layers, n, shapes);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        double m = bc_macs(&layers[i], i ? shapes[i - 1] : in, shapes[i]);
        double f = 6.0 * m - (i == 0 && reads_input ? 2.0 * m : 0.0);
        *flop += f;
        if (layers[i].kind == DPT_LAYER_CONV2D)
            *conv += f;
    }
    return DPT_OK;
}

/* The FLOPs per sample of the whole model: the network, and for minatar
 * the actor's and the critic's linear layers on the encoder's output. */
static int bc_flops(bc_net_t *n)
{
    n->flop = n->conv_flop = 0.0;
    int rc = bc_count(bc_defs[n->kind].in, n->layers, n->nlayers, 1, &n->flop, &n->conv_flop);
    if (rc || n->kind != BC_MINATAR)
        return rc;
    dpt_layer_spec_t head[5] = {{.kind = DPT_LAYER_LINEAR, .out = BC_HIDDEN},
                                {.kind = DPT_LAYER_TANH},
                                {.kind = DPT_LAYER_LINEAR, .out = BC_HIDDEN},
                                {.kind = DPT_LAYER_TANH},
                                {.kind = DPT_LAYER_LINEAR, .out = BC_ACTIONS}};
    dpt_shape_t feat = {BC_HIDDEN, 1, 1}; /* the encoder's dense(64) */
    if ((rc = bc_count(feat, head, 5, 0, &n->flop, &n->conv_flop)) != 0)
        return rc;
    head[4].out = 1; /* the critic */
    return bc_count(feat, head, 5, 0, &n->flop, &n->conv_flop);
}

static float *bc_alloc(size_t count, dpt_rng_t *r, float bound)
{
    float *v = dpt_alloc_aligned((count ? count : 1) * sizeof *v);
    if (v && r)
        dpt_rng_fill_uniform(r, v, count, -bound, bound);
    return v;
}

/* The geometry and buffers of conv layer `l` on input `in`, for pdb rows. */
static int bc_conv_init(bc_conv_t *c, const dpt_layer_spec_t *l, dpt_shape_t in, size_t pdb,
                        int first, dpt_rng_t *r)
{
    c->cv = (dpt_conv2d_t){in.c,
                           in.h,
                           in.w,
                           l->out,
                           l->kh,
                           l->kw,
                           l->stride_h ? l->stride_h : 1,
                           l->stride_w ? l->stride_w : 1,
                           l->pad_top,
                           l->pad_bottom,
                           l->pad_left,
                           l->pad_right};
    int rc = l->pad_same ? dpt_conv2d_same(&c->cv) : dpt_conv2d_check(&c->cv);
    size_t ws = 0;
    if (rc || (rc = dpt_conv2d_workspace(&c->cv, &ws)) != 0)
        return rc;
    size_t nin = pdb * in.c * in.h * in.w;
    size_t nout = pdb * l->out * dpt_conv2d_out_h(&c->cv) * dpt_conv2d_out_w(&c->cv);
    size_t nw = l->out * in.c * l->kh * l->kw;
    float bound = 1.0f / sqrtf((float)(in.c * l->kh * l->kw));
    c->first = first;
    c->x = bc_alloc(nin, r, 1.0f);
    c->y = bc_alloc(nout, NULL, 0.0f);
    c->w = bc_alloc(nw, r, bound);
    c->b = bc_alloc(l->out, r, bound);
    c->dx = first ? NULL : bc_alloc(nin, NULL, 0.0f);
    c->dw = bc_alloc(nw, NULL, 0.0f);
    c->db = bc_alloc(l->out, NULL, 0.0f);
    c->ws = bc_alloc(ws, NULL, 0.0f);
    if (!c->x || !c->y || !c->w || !c->b || (!first && !c->dx) || !c->dw || !c->db || !c->ws)
        return dpt_error(DPT_ENOMEM, "bench cnn: out of memory for the conv timings");
    return DPT_OK;
}

static void bc_conv_free(bc_conv_t *c)
{
    float *p[] = {c->x, c->y, c->w, c->b, c->dx, c->dw, c->db, c->ws};
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
        dpt_free_aligned(p[k]);
}

/* The network's conv layers, each with its own buffers. */
static int bc_conv_setup(bc_net_t *n)
{
    dpt_shape_t shapes[DPT_NETWORK_MAX_LAYERS];
    dpt_shape_t in = bc_defs[n->kind].in;
    int rc = dpt_layers_shapes(in, n->layers, n->nlayers, shapes);
    dpt_rng_t r;
    dpt_rng_init(&r, 3, 0, (uint32_t)n->kind, DPT_RNG_DATA);
    for (size_t i = 0; !rc && i < n->nlayers; i++) {
        if (n->layers[i].kind != DPT_LAYER_CONV2D)
            continue;
        if (n->nconv == BC_MAX_CONV)
            return dpt_error(DPT_EINVAL, "bench cnn: more than %d conv layers", BC_MAX_CONV);
        bc_conv_t *c = &n->conv[n->nconv++];
        rc = bc_conv_init(c, &n->layers[i], i ? shapes[i - 1] : in, n->pdb, i == 0, &r);
    }
    return rc;
}

/* Seconds of one pass of every conv layer's kernels at the per-device
 * batch: forward, then backward with the gradients stored (zeroed first,
 * as the stack stores them). The output doubles as its own gradient. */
static int bc_conv_time(bc_net_t *n, double *secs)
{
    double t0 = dpt_now();
    for (size_t k = 0; k < n->nconv; k++) {
        bc_conv_t *c = &n->conv[k];
        const dpt_conv2d_t *cv = &c->cv;
        int rc = dpt_conv2d_forward(cv, c->y, c->x, c->w, c->b, n->pdb, c->ws);
        if (rc)
            return rc;
        memset(c->dw, 0, cv->out_c * cv->in_c * cv->kh * cv->kw * sizeof(float));
        memset(c->db, 0, cv->out_c * sizeof(float));
        if (c->dx)
            memset(c->dx, 0, n->pdb * cv->in_c * cv->in_h * cv->in_w * sizeof(float));
        if ((rc = dpt_conv2d_backward(cv, c->dx, c->dw, c->db, c->y, c->x, c->w, n->pdb, c->ws)) !=
            0)
            return rc;
    }
    *secs = dpt_now() - t0;
    return DPT_OK;
}

/* The fashion model: the supervised job's MLP of the network's layers. */
static int bc_fashion_model(bc_net_t *n, dpt_model_t *model, dpt_batch_t *lay)
{
    dpt_shape_t in = bc_defs[n->kind].in;
    int rc =
        dpt_mlp_create_shaped(&n->mlp, in, n->layers, n->nlayers, DPT_LOSS_SOFTMAX_XENT, n->pdb);
    if (rc)
        return rc;
    *model = dpt_mlp_model(n->mlp);
    dpt_batch_init(lay, 0);
    if ((rc = dpt_batch_add(lay, DPT_MLP_X, DPT_F32, in.c * in.h * in.w, 0, NULL)) != 0)
        return rc;
    return dpt_batch_add(lay, DPT_MLP_LABEL, DPT_I32, 1, 0, NULL);
}

/* The minatar model: the PPO loss of a policy with the network as encoder. */
static int bc_minatar_model(bc_net_t *n, dpt_model_t *model, dpt_batch_t *lay)
{
    dpt_policy_spec_t spec;
    memset(&spec, 0, sizeof spec);
    spec.hidden[0] = spec.hidden[1] = BC_HIDDEN;
    spec.nhidden = 2;
    memcpy(spec.encoder, n->layers, n->nlayers * sizeof *n->layers);
    spec.nencoder = n->nlayers;
    spec.obs_shape = bc_defs[n->kind].in;
    int rc = dpt_policy_create_ex(&n->policy, &bc_minatar_class, &spec, n->pdb);
    if (rc)
        return rc;
    *model = dpt_policy_ppo_model(n->policy, &bc_ppo);
    return dpt_ppo_batch(lay, &bc_minatar_class, 0, NULL, NULL, NULL, NULL, NULL, NULL);
}

/* Random fashion rows: pixels in [0, 1), labels in 0..9, loaded. */
static int bc_fashion_load(bc_net_t *n, size_t rows, dpt_rng_t *r)
{
    size_t dim = 28 * 28;
    float *x = malloc(rows * dim * sizeof *x);
    int32_t *y = malloc(rows * sizeof *y);
    int rc = x && y ? DPT_OK : dpt_error(DPT_ENOMEM, "bench cnn: out of memory for the data");
    dpt_batch_t b;
    dpt_batch_init(&b, rows);
    if (!rc) {
        dpt_rng_fill_uniform(r, x, rows * dim, 0.0f, 1.0f);
        for (size_t i = 0; i < rows; i++)
            y[i] = (int32_t)dpt_rng_below(r, 10);
        rc = dpt_batch_add(&b, DPT_MLP_X, DPT_F32, dim, 0, x);
    }
    if (!rc)
        rc = dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, y);
    if (!rc)
        rc = dpt_towers_load(n->t, 0, &b, &n->li);
    free(x);
    free(y);
    return rc;
}

/* Random PPO rows: binary observations (MinAtar's channels), actions,
 * behaviour log-probabilities near uniform's, advantages, returns and
 * old values ~ N(0, 1), loaded. */
static int bc_minatar_load(bc_net_t *n, size_t rows, dpt_rng_t *r)
{
    float *obs = malloc(rows * BC_OBS * sizeof *obs), *f = malloc(4 * rows * sizeof *f);
    int32_t *act = malloc(rows * sizeof *act);
    int rc = obs && f && act ? DPT_OK : dpt_error(DPT_ENOMEM, "bench cnn: out of memory");
    if (!rc) {
        for (size_t i = 0; i < rows * BC_OBS; i++)
            obs[i] = (float)dpt_rng_below(r, 2);
        for (size_t i = 0; i < rows; i++)
            act[i] = (int32_t)dpt_rng_below(r, BC_ACTIONS);
        dpt_rng_fill_normal(r, f, rows, -logf((float)BC_ACTIONS), 0.1f);
        dpt_rng_fill_normal(r, f + rows, 3 * rows, 0.0f, 1.0f);
        dpt_batch_t b;
        rc = dpt_ppo_batch(&b, &bc_minatar_class, rows, obs, act, f, f + rows, f + 2 * rows,
                           f + 3 * rows);
        if (!rc)
            rc = dpt_towers_load(n->t, 0, &b, &n->li);
    }
    free(obs);
    free(f);
    free(act);
    return rc;
}

static int bc_step(bc_net_t *n)
{
    size_t off = (n->step++ % n->li.steps) * n->li.per_device_batch;
    return dpt_towers_optimize(n->t, 0, off, BC_LR, NULL);
}

/* The engine over `model` (ps, Adam), the initial weights, the data, and
 * a few warm-up steps. */
static int bc_start(bc_net_t *n, const bc_args_t *a, const dpt_model_t *model,
                    const dpt_batch_t *lay)
{
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.mode = DPT_TOWERS_PS;
    tc.num_devices = a->devices;
    tc.max_per_device_batch_size = n->pdb;
    tc.max_load_rows = n->batch * BC_MINIBATCHES;
    tc.optim = dpt_optim_defaults(DPT_OPTIM_ADAM);
    int rc = dpt_towers_create(&n->t, model, lay, &tc);
    if (rc)
        return rc;
    float *w = calloc(model->vars->total, sizeof *w);
    if (!w)
        return dpt_error(DPT_ENOMEM, "bench cnn: out of memory for the weights");
    dpt_rng_t r;
    dpt_rng_init(&r, 1, 0, 0, DPT_RNG_INIT);
    if (n->mlp)
        dpt_mlp_init_params(n->mlp, w, &r);
    else
        dpt_policy_init_params(n->policy, w, &r);
    rc = dpt_towers_set_weights(n->t, w, model->vars->total);
    free(w);
    dpt_rng_init(&r, 2, 0, (uint32_t)n->kind, DPT_RNG_DATA);
    size_t rows = n->batch * BC_MINIBATCHES;
    if (!rc)
        rc = n->mlp ? bc_fashion_load(n, rows, &r) : bc_minatar_load(n, rows, &r);
    if (!rc && n->li.minibatch != n->batch)
        rc = dpt_error(DPT_EINVAL, "bench cnn: the towers made minibatches of %zu rows, not %zu",
                       n->li.minibatch, n->batch);
    for (int i = 0; !rc && i < BC_WARMUP; i++) /* first touches, caches */
        rc = bc_step(n);
    return rc;
}

static int bc_setup(bc_net_t *n, const bc_args_t *a, bc_kind_t kind)
{
    n->kind = kind;
    n->batch = a->batch ? a->batch : bc_defs[kind].batch;
    n->pdb = n->batch / (size_t)a->devices;
    int rc =
        dpt_network_parse(bc_defs[kind].network, n->layers, DPT_NETWORK_MAX_LAYERS, &n->nlayers);
    if (rc || (rc = bc_flops(n)) != 0 || (rc = bc_conv_setup(n)) != 0)
        return rc;
    dpt_model_t model;
    dpt_batch_t lay;
    rc = kind == BC_FASHION ? bc_fashion_model(n, &model, &lay) : bc_minatar_model(n, &model, &lay);
    return rc ? rc : bc_start(n, a, &model, &lay);
}

static void bc_free(bc_net_t *n)
{
    dpt_towers_destroy(n->t); /* before the model contexts it borrows */
    dpt_mlp_destroy(n->mlp);
    dpt_policy_destroy(n->policy);
    for (size_t k = 0; k < n->nconv; k++)
        bc_conv_free(&n->conv[k]);
}

/* One round of a network: samples/s over about `secs` seconds of steps,
 * then one timing of its conv kernels alone. */
static int bc_round(bc_net_t *n, double secs, int round)
{
    size_t steps = 0;
    double t0 = dpt_now(), dt;
    do {
        int rc = bc_step(n);
        if (rc)
            return rc;
        steps++;
        dt = dpt_now() - t0;
    } while (dt < secs);
    n->rates[round] = (double)(steps * n->batch) / dt;
    return bc_conv_time(n, &n->conv_s[round]);
}

/* ---- output ------------------------------------------------------------- */

static double bc_median(const double *in, int n)
{
    double v[BC_ROUNDS_MAX];
    memcpy(v, in, (size_t)n * sizeof *v);
    return dpt_median(v, (size_t)n);
}

static void bc_header(const bc_args_t *a, int argc, char **argv, const char *gemm, double peak)
{
    printf("# dpt bench cnn: towers ps, %d device(s), Adam lr %g; gemm %s\n", a->devices,
           (double)BC_LR, gemm);
    printf("# peak: one-thread GEMM 512^3 with %s: %.1f GFLOP/s per core\n", gemm, peak);
    printf("# command: dpt bench");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
    for (int k = 0; k < BC_NET_COUNT; k++)
        if (a->nets[k])
            printf("# %s: input [%zu,%zu,%zu] %s%s\n", bc_defs[k].name, bc_defs[k].in.c,
                   bc_defs[k].in.h, bc_defs[k].in.w, bc_defs[k].network,
                   k == BC_FASHION ? "; softmax cross-entropy"
                                   : "; actor 64-64 tanh -> 6, critic 64-64 tanh -> 1; PPO loss");
    printf("# samples/s: median over %d rounds of %.3g s; gflops: FLOPs of the conv and dense\n"
           "# layers over the median step; of_peak: against devices x peak; conv_flop,\n"
           "# conv_time: the conv layers' share of the FLOPs and (kernels timed alone, one\n"
           "# thread, per-device batch) of the step's time\n",
           a->rounds, a->seconds / a->rounds);
    printf("%-8s %7s %6s %12s %10s %10s %8s %8s %10s %10s\n", "net", "devices", "batch",
           "samples/s", "min", "max", "gflops", "of_peak", "conv_flop", "conv_time");
}

static void bc_report(const bc_net_t *n, const bc_args_t *a, const char *gemm, double peak)
{
    double sps = bc_median(n->rates, a->rounds), lo = n->rates[0], hi = n->rates[0];
    for (int q = 1; q < a->rounds; q++) {
        lo = n->rates[q] < lo ? n->rates[q] : lo;
        hi = n->rates[q] > hi ? n->rates[q] : hi;
    }
    double gf = sps * n->flop * 1e-9;
    double of_peak = peak > 0.0 ? gf / (a->devices * peak) : 0.0;
    double conv_flop = n->flop > 0.0 ? n->conv_flop / n->flop : 0.0;
    double step_s = sps > 0.0 ? (double)n->batch / sps : 0.0;
    double conv_time = step_s > 0.0 ? bc_median(n->conv_s, a->rounds) / step_s : 0.0;
    const char *name = bc_defs[n->kind].name;
    if (a->json) {
        printf("{\"net\":\"%s\",\"devices\":%d,\"batch\":%zu,\"rounds\":%d,"
               "\"samples_per_s\":%.1f,\"min_samples_per_s\":%.1f,\"max_samples_per_s\":%.1f,"
               "\"mflop_per_sample\":%.4f,\"gflops\":%.2f,\"peak_gflops_per_core\":%.2f,"
               "\"of_peak\":%.4f,\"conv_flop_share\":%.4f,\"conv_time_share\":%.4f,"
               "\"gemm\":\"%s\"}\n",
               name, a->devices, n->batch, a->rounds, sps, lo, hi, n->flop * 1e-6, gf, peak,
               of_peak, conv_flop, conv_time, gemm);
        return;
    }
    if (a->per_round) {
        printf("# rounds, %s, samples/s:", name);
        for (int q = 0; q < a->rounds; q++)
            printf(" %.0f", n->rates[q]);
        printf("\n");
    }
    printf("%-8s %7d %6zu %12.0f %10.0f %10.0f %8.1f %7.1f%% %9.1f%% %9.1f%%\n", name, a->devices,
           n->batch, sps, lo, hi, gf, 100.0 * of_peak, 100.0 * conv_flop, 100.0 * conv_time);
}

/* ---- the command -------------------------------------------------------- */

static int bc_usage(FILE *f, int code)
{
    fprintf(f,
            "usage: dpt bench cnn [--net fashion|minatar]... [--devices N] [--batch B]\n"
            "                     [--seconds S] [--rounds R] [--gemm portable|cblas]\n"
            "                     [--per-round] [--json]\n\n"
            "Training samples/s of a CNN through the towers engine (ps mode, N devices,\n"
            "default 1; the batch split over them), on random data:\n"
            "  fashion  the Fashion-MNIST CNN (conv 32, conv 64, dense 128, dense 10),\n"
            "           softmax cross-entropy, Adam; batch 256\n"
            "  minatar  Pgx's MinAtar policy (conv 32 k=2, dense 64; actor and critic\n"
            "           64-64 tanh), one PPO minibatch step, Adam; batch 512\n"
            "(default: both). The networks take turns for R rounds (default %d, at most %d)\n"
            "of S/R seconds each (S default %g per network); figures are medians over the\n"
            "rounds, with GFLOP/s against the one-thread GEMM peak and the conv layers'\n"
            "share of the FLOPs and of the time. --per-round prints every round.\n",
            BC_ROUNDS_DEFAULT, BC_ROUNDS_MAX, BC_SECONDS_DEFAULT);
    return code;
}

/* Parses one option at argv[*i] (advancing *i past its value). Returns -1
 * when it was parsed, else the exit code to return. */
static int bc_option(bc_args_t *a, int argc, char **argv, int *i)
{
    const char *cmd = "bench cnn", *o = argv[*i];
    uint64_t v = 0;
    if (!strcmp(o, "--help") || !strcmp(o, "-h"))
        return bc_usage(stdout, DPT_EXIT_OK);
    if (!strcmp(o, "--json")) {
        a->json = 1;
        return -1;
    }
    if (!strcmp(o, "--per-round")) {
        a->per_round = 1;
        return -1;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "dpt bench cnn: unknown or incomplete option \"%s\"\n", o);
        return bc_usage(stderr, DPT_EXIT_USAGE);
    }
    const char *val = argv[++*i];
    if (!strcmp(o, "--net")) {
        for (int k = 0; k < BC_NET_COUNT; k++)
            if (!strcmp(val, bc_defs[k].name)) {
                a->nets[k] = 1;
                return -1;
            }
        fprintf(stderr, "dpt bench cnn: --net %s: expected fashion or minatar\n", val);
        return DPT_EXIT_USAGE;
    }
    if (!strcmp(o, "--devices") || !strcmp(o, "--batch") || !strcmp(o, "--rounds")) {
        int dev = o[2] == 'd', rounds = o[2] == 'r';
        uint64_t hi = dev ? BC_MAX_DEVICES : rounds ? BC_ROUNDS_MAX : 65536;
        if (dpt_cli_parse_u64(cmd, o, val, 1, hi, &v))
            return DPT_EXIT_USAGE;
        if (dev)
            a->devices = (int)v;
        else if (rounds)
            a->rounds = (int)v;
        else
            a->batch = (size_t)v;
        return -1;
    }
    if (!strcmp(o, "--seconds")) {
        char *end;
        a->seconds = strtod(val, &end);
        if (end == val || *end || !(a->seconds > 0) || a->seconds > 3600) {
            fprintf(stderr, "dpt bench cnn: --seconds expects a number in (0, 3600]\n");
            return DPT_EXIT_USAGE;
        }
        return -1;
    }
    if (!strcmp(o, "--gemm")) {
        dpt_gemm_backend_t b = DPT_GEMM_BACKEND_COUNT;
        for (int k = 0; k < DPT_GEMM_BACKEND_COUNT; k++)
            if (!strcmp(val, dpt_gemm_backend_name((dpt_gemm_backend_t)k)))
                b = (dpt_gemm_backend_t)k;
        if (b == DPT_GEMM_BACKEND_COUNT || dpt_gemm_set_backend(b) != 0) {
            fprintf(stderr, "dpt bench cnn: --gemm: \"%s\" is not a backend of this build\n", val);
            return DPT_EXIT_USAGE;
        }
        return -1;
    }
    fprintf(stderr, "dpt bench cnn: unknown option \"%s\"\n", o);
    return bc_usage(stderr, DPT_EXIT_USAGE);
}

/* Parses the command line; -1 to go on, else the exit code. */
static int bc_parse(bc_args_t *a, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        int rc = bc_option(a, argc, argv, &i);
        if (rc >= 0)
            return rc;
    }
    int any = 0;
    for (int k = 0; k < BC_NET_COUNT; k++)
        any |= a->nets[k];
    for (int k = 0; k < BC_NET_COUNT; k++) {
        a->nets[k] |= !any;
        size_t batch = a->batch ? a->batch : bc_defs[k].batch;
        if (a->nets[k] && batch % (size_t)a->devices) {
            fprintf(stderr,
                    "dpt bench cnn: %s: the batch (%zu) must be a multiple of --devices (%d)\n",
                    bc_defs[k].name, batch, a->devices);
            return DPT_EXIT_USAGE;
        }
    }
    return -1;
}

int dpt_bench_cnn(int argc, char **argv)
{
    bc_args_t a = {{0}, 0, 1, BC_SECONDS_DEFAULT, BC_ROUNDS_DEFAULT, 0, 0};
    int rc = bc_parse(&a, argc, argv);
    if (rc >= 0)
        return rc;
    bc_net_t *nets = calloc(BC_NET_COUNT, sizeof *nets);
    if (!nets) {
        fprintf(stderr, "dpt bench cnn: out of memory\n");
        return DPT_EXIT_FAIL;
    }
    rc = DPT_EXIT_OK;
    int nnet = 0;
    for (int k = 0; k < BC_NET_COUNT; k++) {
        if (!a.nets[k])
            continue;
        if (bc_setup(&nets[nnet++], &a, (bc_kind_t)k) != 0) {
            fprintf(stderr, "dpt bench cnn: %s: %s\n", bc_defs[k].name, dpt_last_error());
            rc = DPT_EXIT_FAIL;
            goto out;
        }
    }
    const char *gemm = dpt_gemm_describe(dpt_gemm_get_backend());
    double peak = dpt__bench_gemm_peak();
    if (!a.json)
        bc_header(&a, argc, argv, gemm, peak);
    for (int q = 0; q < a.rounds; q++)
        for (int k = 0; k < nnet; k++)
            if (bc_round(&nets[k], a.seconds / a.rounds, q) != 0) {
                fprintf(stderr, "dpt bench cnn: %s: %s\n", bc_defs[nets[k].kind].name,
                        dpt_last_error());
                rc = DPT_EXIT_FAIL;
                goto out;
            }
    for (int k = 0; k < nnet; k++)
        bc_report(&nets[k], &a, gemm, peak);
out:
    for (int k = 0; k < nnet; k++)
        bc_free(&nets[k]);
    free(nets);
    return rc;
}
