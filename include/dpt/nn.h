/*
 * dpt/nn.h — layers, losses, action distributions and models.
 *
 * Conventions (as in llm.c): batches are row-major, one sample per row.
 * Forward functions write their outputs; backward functions ACCUMULATE
 * (+=) into every gradient they produce, so the caller zeroes gradients
 * once per step and several passes can add up. Parameters are never owned
 * by a layer or model: they live in a caller's arena (dpt/arena.h) whose
 * layout is the model's variable table, so towers can share one copy (ps,
 * async) or own replicas (replicated) of the same layout.
 *
 * Shapes: B = rows in the batch, I = input features, O = output features,
 * C = classes, K = discrete actions, D = action dimensions.
 */
#ifndef DPT_NN_H
#define DPT_NN_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/optim.h"
#include "dpt/rng.h"
#include "dpt/shape.h" /* dpt_shape_t */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Layers                                                                    */

/* Layer kinds: symbol, config name. */
#define DPT_LAYER_LIST(X)               \
    X(DPT_LAYER_LINEAR, "linear")       \
    X(DPT_LAYER_RELU, "relu")           \
    X(DPT_LAYER_TANH, "tanh")           \
    X(DPT_LAYER_CONV2D, "conv2d")       \
    X(DPT_LAYER_MAXPOOL2D, "maxpool2d") \
    X(DPT_LAYER_AVGPOOL2D, "avgpool2d") \
    X(DPT_LAYER_FLATTEN, "flatten")     \
    X(DPT_LAYER_DROPOUT, "dropout")     \
    X(DPT_LAYER_BATCHNORM, "batchnorm")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_layer_kind {
#define DPT__LAYER_ENUM(sym, name) sym,
    DPT_LAYER_LIST(DPT__LAYER_ENUM)
#undef DPT__LAYER_ENUM
    DPT_LAYER_COUNT
} dpt_layer_kind_t;
/* clang-format on */

/* Weight initialisations of a linear layer: symbol, config name.
 *  default     W ~ U(-1/sqrt(I), 1/sqrt(I)), b likewise (PyTorch's nn.Linear)
 *  uniform     W ~ U(-gain, gain), b = 0
 *  normal      W ~ N(0, gain^2), b = 0
 *  orthogonal  W = gain * (a random orthogonal matrix: orthonormal rows if
 *              O <= I, else orthonormal columns), b = 0 (PPO's usual init) */
#define DPT_INIT_LIST(X)           \
    X(DPT_INIT_DEFAULT, "default") \
    X(DPT_INIT_UNIFORM, "uniform") \
    X(DPT_INIT_NORMAL, "normal")   \
    X(DPT_INIT_ORTHOGONAL, "orthogonal")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_init {
#define DPT__INIT_ENUM(sym, name) sym,
    DPT_INIT_LIST(DPT__INIT_ENUM)
#undef DPT__INIT_ENUM
    DPT_INIT_COUNT
} dpt_init_t;
/* clang-format on */

/* One layer of a sequential stack. The layers with parameters are named by
 * their position i in the stack (as PyTorch's nn.Sequential names them).
 *  linear:    y = x W^T + b with W [O, I] ("<prefix><i>.weight") and b [O]
 *             ("<prefix><i>.bias"); its input must be flat (h = w = 1:
 *             a flatten layer turns an image into a row).
 *  relu:      y = max(x, 0);   dx += dy * (y > 0)
 *  tanh:      y = tanh(x);     dx += dy * (1 - y^2)
 *  conv2d:    dpt_conv2d_forward() (dpt/conv.h) with `out` filters, W
 *             [O, C, kh, kw] and b [O], named as linear's.
 *  maxpool2d, avgpool2d: dpt/conv.h's pooling of each channel (a window of
 *             kh x kw, count_pad for the average).
 *  flatten:   an image [C, H, W] as the flat row [C*H*W, 1, 1] (no copy of
 *             meaning: the same floats in the same order).
 *  dropout:   while training (dpt_seq_set_dropout()), inverted dropout of
 *             probability `rate` (dpt/norm.h's dpt_dropout_forward(), a
 *             mask drawn from each row's key); the identity otherwise.
 *  batchnorm: batch normalization per channel (per feature of a flat row),
 *             dpt/norm.h's kernels, with gamma ("<prefix><i>.weight", ones),
 *             beta ("<prefix><i>.bias", zeros), "<prefix><i>.running_mean"
 *             (zeros) and "<prefix><i>.running_var" (ones), [C] each.
 *             While training (dpt_seq_set_dropout()'s train flag) it
 *             normalizes with the batch's statistics, and the backward pass
 *             writes into the running statistics' gradient slots their
 *             update m * (batch statistic - running value) (the variance
 *             unbiased; m = rate, PyTorch's momentum), for an optimizer that
 *             adds it as it is (dpt_optim_set_running(); dpt_seq_running()
 *             names them); otherwise it normalizes with the running
 *             statistics and the update is 0. eps = gain.
 * Geometry (conv2d and pooling): a kernel or window kh x kw; stride_h,
 * stride_w (0 means 1 for conv2d, the window for pooling, PyTorch's
 * defaults); padding pad_top, pad_bottom, pad_left, pad_right, or, with
 * pad_same set, XLA's SAME padding of the input (dpt_conv2d_same()). Other
 * kinds ignore these fields, so a zero-initialised tail is always valid. */
typedef struct dpt_layer_spec {
    dpt_layer_kind_t kind;
    size_t out;      /* linear: O; conv2d: output channels; others ignore it */
    dpt_init_t init; /* linear, conv2d: initialisation (fan-in I, or C*kh*kw) */
    float gain;      /* linear, conv2d: gain/bound/std of the init (unused by default);
                      * batchnorm: eps, in [0, 1] (0: 1e-5) */
    size_t kh, kw;   /* conv2d, pooling */
    size_t stride_h, stride_w;
    size_t pad_top, pad_bottom, pad_left, pad_right;
    int pad_same;  /* conv2d, pooling: SAME padding instead of the four above */
    int count_pad; /* avgpool2d: divide by kh*kw (1) or the elements inside (0) */
    float rate;    /* dropout: the probability of dropping a value, in [0, 1);
                    * batchnorm: the running statistics' momentum, in [0, 1] (0: 0.1) */
} dpt_layer_spec_t;

/* The output shape of every layer of a stack on inputs of shape `in` into
 * shapes[0 .. nlayers) (may be NULL: check only). Checks every layer: a
 * known kind and init, nonzero sizes, a geometry that fits its input
 * (dpt_conv2d_check(), dpt_pool2d_check()), a flat input for linear.
 * Errors: DPT_EINVAL or DPT_EOVERFLOW naming the layer (its position and
 * kind) and its input shape. */
int dpt_layers_shapes(dpt_shape_t in, const dpt_layer_spec_t *layers, size_t nlayers,
                      dpt_shape_t *shapes);

/* Name of a layer kind / init ("linear", "orthogonal"); "unknown" otherwise. */
const char *dpt_layer_kind_name(dpt_layer_kind_t kind);
const char *dpt_init_name(dpt_init_t init);
/* Parses a name back; DPT_EINVAL with a message when unknown. */
int dpt_layer_kind_parse(const char *name, dpt_layer_kind_t *kind);
int dpt_init_parse(const char *name, dpt_init_t *init);

/* Gradient-ready hook. A model that offers set_grad_hook (below) calls
 * hook(user, var_lo, var_hi) from inside loss_grad, on the thread running
 * it, each time the gradients of variables [var_lo, var_hi) of its table
 * (indices into vars->vars) are final for this call: loss_grad writes
 * nothing in their part of `grads` again before it returns. Ranges come in
 * the order the backward pass finishes them (the built-in MLP: the last
 * linear layer's weight and bias first, then the one before, ...) and do
 * not overlap; a variable never reported is final when loss_grad returns.
 * The hook must be quick and must not call the model. The towers engine
 * uses it to start all-reducing a bucket of gradients while the backward
 * pass goes on (dpt/towers.h, "Gradient buckets"). */
typedef void (*dpt_grad_hook_t)(void *user, size_t var_lo, size_t var_hi);

/* ------------------------------------------------------------------------ */
/* Sequential stacks                                                         */

typedef struct dpt_seq dpt_seq_t;

/* Creates a sequential stack of `nlayers` layers on inputs of `in_dim`
 * features, for batches of at most `max_batch` rows (activation buffers are
 * sized and touched here; nothing is allocated later). Its parameters are
 * appended to `table` (caller owns it; it may already hold other variables,
 * e.g. an actor and a critic in one arena) with names prefixed by `prefix`
 * (may be "" or NULL). Errors: DPT_EINVAL (no layers, zero sizes, linear
 * with out == 0, bad kind/init, name clash), DPT_EOVERFLOW, DPT_ENOMEM. */
int dpt_seq_create(dpt_seq_t **seq, size_t in_dim, const dpt_layer_spec_t *layers, size_t nlayers,
                   size_t max_batch, dpt_vartable_t *table, const char *prefix);
/* The same on inputs of shape `in` (in_dim = c*h*w): a stack that may
 * hold convolutions and pooling. dpt_seq_create() is this with the shape
 * {in_dim, 1, 1}. Errors: those of dpt_seq_create() and dpt_layers_shapes(). */
int dpt_seq_create_shaped(dpt_seq_t **seq, dpt_shape_t in, const dpt_layer_spec_t *layers,
                          size_t nlayers, size_t max_batch, dpt_vartable_t *table,
                          const char *prefix);
/* Frees the stack (not the table). NULL is a no-op. */
void dpt_seq_destroy(dpt_seq_t *seq);

size_t dpt_seq_in_dim(const dpt_seq_t *seq);
size_t dpt_seq_out_dim(const dpt_seq_t *seq);
size_t dpt_seq_max_batch(const dpt_seq_t *seq);
/* The shape of the stack's input and output. */
dpt_shape_t dpt_seq_in_shape(const dpt_seq_t *seq);
dpt_shape_t dpt_seq_out_shape(const dpt_seq_t *seq);

/* Initialises this stack's variables inside `params` (an arena with the
 * table's layout) from `rng`, layer by layer in order. */
void dpt_seq_init_params(const dpt_seq_t *seq, float *params, dpt_rng_t *rng);

/* The running statistics of the stack's batchnorm layers: sets flags[i] = 1
 * for each of them (i: its index in the table the stack was created with;
 * flags NULL: only counts) and returns how many there are. The other flags
 * are left as they are. */
size_t dpt_seq_running(const dpt_seq_t *seq, unsigned char *flags);

/* Forward pass of x [B, I] (borrowed; must stay valid until the matching
 * backward). *y points to the output [B, O], owned by the stack and valid
 * until the next forward. Errors: DPT_EINVAL (B == 0 or B > max_batch),
 * DPT_ENUMERIC (x contains NaN/inf; the message names row and column). */
int dpt_seq_forward(dpt_seq_t *seq, const float *params, const float *x, size_t batch,
                    const float **y);
/* Backward pass for the last forward: accumulates parameter gradients into
 * `grads` (same layout as params) and, when dx is not NULL, input gradients
 * into dx [B, I]. dy [B, O] is the gradient of the loss w.r.t. the output.
 * Errors: DPT_ESTATE when no forward preceded it. */
int dpt_seq_backward(dpt_seq_t *seq, const float *params, float *grads, const float *dy, float *dx);
/* The same, but with store_grads != 0 the parameter gradients of this stack
 * are STORED into `grads` (every element of the stack's variables is
 * written) instead of added: the caller need not zero them first. */
int dpt_seq_backward_ex(dpt_seq_t *seq, const float *params, float *grads, const float *dy,
                        float *dx, int store_grads);
/* Dropout for the next forward passes and their backward: train != 0 makes
 * every dropout layer draw its mask (evaluation, train 0, the default, makes
 * it the identity). The mask of value j of row r of the layer at position i
 * is dpt/norm.h's, with seed = `seed` mixed with i, step = keys[2r] and row
 * keys[2r + 1]: keys [B, 2] (borrowed until the backward) give each row a
 * pass number and its position in that pass, so a row's mask does not
 * depend on the batch it is in nor on the rows around it; keys NULL: pass
 * 0, rows 0 .. B-1. */
void dpt_seq_set_dropout(dpt_seq_t *seq, int train, uint64_t seed, const int32_t *keys);
/* Installs (hook NULL: removes) the gradient-ready hook of this stack:
 * during each backward, right after a layer with parameters (linear) has
 * written its weight and bias gradients, hook(user, v, v + 2) is called
 * with v the table index of that layer's weight (its bias is v + 1), last
 * layer first. The MLP's set_grad_hook installs it on its stack. */
void dpt_seq_set_grad_hook(dpt_seq_t *seq, dpt_grad_hook_t hook, void *user);

/* ------------------------------------------------------------------------ */
/* Network descriptions (the model language of the config key `network`)    */

/* Most layers one description may hold. */
#define DPT_NETWORK_MAX_LAYERS 64

/*
 * Parses a network description into layers[0 .. *nlayers). A description
 * is a list of layers separated by spaces (or newlines), each a name with
 * optional arguments in parentheses, positional first, then name=value:
 *
 *   conv(OUT, k=K, stride=S, pad=P, init=I, gain=G)   conv2d; also conv2d
 *   maxpool(K, stride=S, pad=P)                       maxpool2d
 *   avgpool(K, stride=S, pad=P, count_pad=0|1)        avgpool2d
 *   dense(OUT, init=I, gain=G)                        linear; also linear
 *   dropout(P)                                        dropout of rate P in [0, 1)
 *   flatten   relu   tanh                             no arguments
 *
 * K, S and P are one size for both axes or HxW ("3x2"); P may also be
 * `same` (XLA's SAME padding, dpt_conv2d_same()); a second positional of
 * conv is K. Defaults: conv k=3, stride 1, pad 0; pooling stride = the
 * window, pad 0, count_pad 1 (PyTorch's); init default (PyTorch's), gain 1
 * for the other inits. Example (LeNet-like, for 1x28x28 images):
 *
 *   conv(32,k=3,pad=1) relu maxpool(2) conv(64,k=3,pad=1) relu maxpool(2)
 *   flatten dense(128) relu
 *
 * Shapes are not checked here (dpt_layers_shapes() does that against an
 * input). Errors: DPT_EINVAL naming the layer's position (from 1) and text
 * and what is wrong (an unknown layer or argument, a value that is not a
 * positive integer, a missing or repeated argument, more than max_layers
 * layers, an empty description); nothing is written to *nlayers then.
 */
int dpt_network_parse(const char *text, dpt_layer_spec_t *layers, size_t max_layers,
                      size_t *nlayers);

/* Describes one layer as the language writes it ("conv(32,k=3x3,stride=1x1,
 * pad=1,1,1,1)"), into buf of size bytes (truncated, always terminated). */
void dpt_layer_describe(const dpt_layer_spec_t *layer, char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Embedding bags                                                            */

/* How a bag combines its rows: symbol, config name. */
#define DPT_EMBED_MODE_LIST(X) \
    X(DPT_EMBED_SUM, "sum")    \
    X(DPT_EMBED_MEAN, "mean")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_embed_mode {
#define DPT__EMBED_ENUM(sym, name) sym,
    DPT_EMBED_MODE_LIST(DPT__EMBED_ENUM)
#undef DPT__EMBED_ENUM
    DPT_EMBED_MODE_COUNT
} dpt_embed_mode_t;
/* clang-format on */

/* "sum" / "mean"; "unknown" otherwise. */
const char *dpt_embed_mode_name(dpt_embed_mode_t mode);
/* Parses a name back; DPT_EINVAL with a message when unknown. */
int dpt_embed_mode_parse(const char *name, dpt_embed_mode_t *mode);

/* Embedding bag (PyTorch's nn.EmbeddingBag): the sum or mean of the rows of
 * `table` [V, D] named by each bag's ids,
 *   sum:   out[b] = sum_{j in bag b} table[ids[j]]
 *   mean:  out[b] = (sum_{j in bag b} table[ids[j]]) / len_b
 * (rows added in the order of the ids, in float; an empty bag gives zeros).
 * Bag b holds ids[offsets[b] .. offsets[b+1]), len_b = offsets[b+1] -
 * offsets[b]; offsets has bags + 1 entries, offsets[0] = 0, nondecreasing,
 * and offsets[bags] is the number of ids. out is [bags, D]; table, ids and
 * offsets are borrowed. bags may be 0. Nothing is written unless every
 * check passes. Errors: DPT_EINVAL (D == 0; unknown mode; offsets[0] != 0 or
 * decreasing offsets, naming the bag; an id outside [0, V), naming the bag,
 * the position and the id). */
int dpt_embedding_bag_forward(const float *table, size_t vocab, size_t dim, const int64_t *ids,
                              const size_t *offsets, size_t bags, dpt_embed_mode_t mode,
                              float *out);
/* Backward: the gradient w.r.t. the table is row-sparse, so instead of
 * accumulating into a dense [V, D] it APPENDS to `grad` (grad->dim must be
 * D) one row per id occurrence, in the order of the ids:
 *   (ids[j], dout[b])          sum
 *   (ids[j], dout[b] / len_b)  mean
 * for every j in bag b; empty bags add nothing. The rows are not coalesced
 * (dpt_sparse_rows_coalesce() does that), so repeated ids give repeated
 * rows. dout [bags, D] and ids, offsets are borrowed; grad is the caller's.
 * Nothing is appended unless every check passes. Errors: DPT_EINVAL
 * (grad->dim != D, D == 0, unknown mode, bad offsets as in forward, a
 * negative id naming bag and id), and those of dpt_sparse_rows_reserve(). */
int dpt_embedding_bag_backward(size_t dim, const int64_t *ids, const size_t *offsets, size_t bags,
                               dpt_embed_mode_t mode, const float *dout, dpt_sparse_rows_t *grad);

/* ------------------------------------------------------------------------ */
/* Losses. Each returns the mean loss over the batch in *loss (double) and,
 * when the gradient pointer is not NULL, ACCUMULATES dL/d(input) into it.  */

/* Softmax cross-entropy over integer labels:
 *   L = -(1/B) sum_b log softmax(z_b)[y_b],  dz_b += (softmax(z_b) - onehot(y_b)) / B
 * logits [B, C], labels [B] in [0, C). *correct (may be NULL) receives the
 * number of rows whose arg-max equals the label. Errors: DPT_EINVAL (label out
 * of range: the message names the row and value; B or C == 0), DPT_ENUMERIC
 * (non-finite logits). */
int dpt_loss_softmax_xent(const float *logits, const int32_t *labels, size_t batch, size_t classes,
                          float *dlogits, double *loss, size_t *correct);

/* Mean squared error over all elements:
 *   L = 1/(B D) sum (y - t)^2,  dy += 2 (y - t) / (B D)
 * y and t [B, D]. Errors: DPT_EINVAL (zero sizes), DPT_ENUMERIC. */
int dpt_loss_mse(const float *y, const float *target, size_t batch, size_t dim, float *dy,
                 double *loss);

/* Huber loss over all elements, with d = y - t:
 *   L = 1/(B D) sum h(d),  h(d) = d^2 / 2 for |d| <= delta, else delta (|d| - delta / 2)
 *   dy += clamp(d, -delta, delta) / (B D)
 * (PyTorch's HuberLoss with reduction "mean"). Errors: DPT_EINVAL (zero
 * sizes, delta not > 0), DPT_ENUMERIC. */
int dpt_loss_huber(const float *y, const float *target, size_t batch, size_t dim, double delta,
                   float *dy, double *loss);

/* ------------------------------------------------------------------------ */
/* Action distributions (for policy-gradient losses)                        */

/* Categorical over K logits per row: p = softmax(z).
 *   logp(a)  = z_a - logsumexp(z)
 *   H        = -sum_k p_k log p_k
 *   d logp(a)/dz_k = 1[k == a] - p_k
 *   dH/dz_k        = -p_k (log p_k + H)
 * logp and entropy [B] may each be NULL. Errors: DPT_EINVAL (action out of
 * range, zero sizes), DPT_ENUMERIC (non-finite logits). */
int dpt_categorical_logp(const float *logits, size_t batch, size_t k, const int32_t *actions,
                         float *logp, float *entropy);
/* Accumulates into dlogits [B, K]: dlogp[b] * d logp/dz + dentropy[b] * dH/dz.
 * dlogp or dentropy may be NULL (treated as zero). Actions must be valid
 * (checked by dpt_categorical_logp). */
void dpt_categorical_backward(const float *logits, size_t batch, size_t k, const int32_t *actions,
                              const float *dlogp, const float *dentropy, float *dlogits);
/* Samples actions [B] from softmax(z) with `rng` and writes their logp [B]
 * (logp may be NULL). Errors: DPT_ENUMERIC. */
int dpt_categorical_sample(const float *logits, size_t batch, size_t k, dpt_rng_t *rng,
                           int32_t *actions, float *logp);
/* Arg-max actions [B] (deterministic evaluation). */
void dpt_categorical_argmax(const float *logits, size_t batch, size_t k, int32_t *actions);

/* Diagonal Gaussian with mean [B, D] and state-independent log_std [D]:
 *   logp(a) = sum_d -(a_d - mu_d)^2 / (2 s_d^2) - log s_d - log(2 pi)/2
 *   H       = sum_d log s_d + (1 + log(2 pi))/2
 *   d logp/d mu_d      = (a_d - mu_d) / s_d^2
 *   d logp/d log s_d   = (a_d - mu_d)^2 / s_d^2 - 1
 *   dH/d log s_d       = 1
 * logp and entropy [B] may be NULL. Errors: DPT_EINVAL, DPT_ENUMERIC. */
int dpt_gaussian_logp(const float *mean, const float *log_std, size_t batch, size_t dim,
                      const float *actions, float *logp, float *entropy);
/* Accumulates into dmean [B, D] and dlog_std [D] (either may be NULL):
 * dlogp[b] * d logp/d(.) + dentropy[b] * dH/d(.). */
void dpt_gaussian_backward(const float *mean, const float *log_std, size_t batch, size_t dim,
                           const float *actions, const float *dlogp, const float *dentropy,
                           float *dmean, float *dlog_std);
/* Samples actions [B, D] = mean + exp(log_std) * N(0, 1) and their logp [B]
 * (may be NULL). */
void dpt_gaussian_sample(const float *mean, const float *log_std, size_t batch, size_t dim,
                         dpt_rng_t *rng, float *actions, float *logp);

/* ------------------------------------------------------------------------ */
/* Models: what the training engines (towers, trainers) call                */

/* Model-specific statistics a loss_grad call may report (e.g. PPO's policy
 * loss, value loss, entropy, KL, clip fraction); engines average them over
 * rows like the loss. */
#define DPT_LOSS_EXTRA 8

/* What one loss_grad call reports. `loss` is the mean over the rows. */
typedef struct dpt_loss_out {
    double loss;
    double correct; /* rows classified correctly (classifiers), else 0 */
    size_t rows;
    double extra[DPT_LOSS_EXTRA]; /* row means of model-specific statistics */
} dpt_loss_out_t;

/*
 * A trainable model, built in or user-defined. The engines call:
 *   loss_grad(ctx, params, grads, batch, out): computes the mean loss of the
 *     batch under `params` and ACCUMULATES its gradient into `grads` (same
 *     layout as params: the table `vars`). Returns 0 or a DPT_E... code with
 *     dpt_error() message; it must not modify params.
 *   replicate(ctx, &copy) (optional): makes an independent context with the
 *     same parameter layout for another thread (its own scratch buffers);
 *     release(copy) frees it. Without replicate, loss_grad must be safe to
 *     call from several threads at once with the same ctx.
 * max_batch (0 = unlimited) is the most rows one loss_grad call accepts.
 * flags: DPT_MODEL_STORES_GRADS says that loss_grad STORES its gradient into
 *   every element of `grads` instead of adding to it, so that the engines
 *   need not zero the gradient before each call (the built-in MLP does this).
 *   0 (the default of a zero-initialised struct) keeps the accumulating
 *   contract above.
 */
#define DPT_MODEL_STORES_GRADS 1u

/* set_grad_hook(ctx, hook, user) (optional, NULL when the model has none;
 * see dpt_grad_hook_t above):
 * installs `hook` on that context (a replicate()d copy has its own, none
 * at first); hook NULL removes it. Returns 0 or a DPT_E... code. */
typedef struct dpt_model {
    const dpt_vartable_t *vars; /* parameter layout (borrowed) */
    void *ctx;                  /* user data (borrowed) */
    size_t max_batch;
    int (*loss_grad)(void *ctx, const float *params, float *grads, const dpt_batch_t *batch,
                     dpt_loss_out_t *out);
    int (*replicate)(void *ctx, void **copy);
    void (*release)(void *copy);
    unsigned flags; /* DPT_MODEL_STORES_GRADS or 0 */
    int (*set_grad_hook)(void *ctx, dpt_grad_hook_t hook, void *user);
} dpt_model_t;

/* Loss heads of the built-in MLP: symbol, config name. */
#define DPT_LOSS_LIST(X)                     \
    X(DPT_LOSS_SOFTMAX_XENT, "softmax_xent") \
    X(DPT_LOSS_MSE, "mse")                   \
    X(DPT_LOSS_HUBER, "huber")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_loss_kind {
#define DPT__LOSS_ENUM(sym, name) sym,
    DPT_LOSS_LIST(DPT__LOSS_ENUM)
#undef DPT__LOSS_ENUM
    DPT_LOSS_COUNT
} dpt_loss_kind_t;
/* clang-format on */

/* "softmax_xent" / "mse"; "unknown" otherwise. */
const char *dpt_loss_kind_name(dpt_loss_kind_t loss);

/* The built-in MLP: a sequential stack plus a loss head, with its own
 * variable table. */
typedef struct dpt_mlp dpt_mlp_t;

int dpt_mlp_create(dpt_mlp_t **mlp, size_t in_dim, const dpt_layer_spec_t *layers, size_t nlayers,
                   dpt_loss_kind_t loss, size_t max_batch);
/* The same on inputs of shape `in` (layers that may hold convolutions:
 * dpt_seq_create_shaped()); dpt_mlp_create() is this with {in_dim, 1, 1}. */
int dpt_mlp_create_shaped(dpt_mlp_t **mlp, dpt_shape_t in, const dpt_layer_spec_t *layers,
                          size_t nlayers, dpt_loss_kind_t loss, size_t max_batch);
void dpt_mlp_destroy(dpt_mlp_t *mlp);
/* The parameter layout (owned by the MLP). */
const dpt_vartable_t *dpt_mlp_vars(const dpt_mlp_t *mlp);
/* dpt_seq_running() of the MLP's stack, on its table (dpt_mlp_vars()). */
size_t dpt_mlp_running(const dpt_mlp_t *mlp, unsigned char *flags);
/* The seed of the dropout masks of loss_grad (default 0; replicas copy it).
 * Evaluation and prediction never drop. */
void dpt_mlp_set_seed(dpt_mlp_t *mlp, uint64_t seed);
void dpt_mlp_init_params(const dpt_mlp_t *mlp, float *params, dpt_rng_t *rng);
/* Column names the MLP reads from a batch: DPT_MLP_X (float32, width = input
 * size), and DPT_MLP_LABEL (int32, width 1) for softmax_xent or DPT_MLP_Y
 * (float32, width = output size) for mse and huber (delta 1). */
#define DPT_MLP_X "x"
#define DPT_MLP_LABEL "label"
#define DPT_MLP_Y "y"
/* Optional (int32, width 2): each row's dropout key, a pass number and the
 * row's position in it (dpt_seq_set_dropout()); without it the rows of a
 * call are rows 0 .. B-1 of pass 0. */
#define DPT_MLP_ROW "row"

/* Forward + loss + backward on batch->rows rows (<= max_batch); gradients
 * accumulate into grads. A missing column or a wrong type or width is
 * DPT_EINVAL naming the column. */
int dpt_mlp_loss_grad(dpt_mlp_t *mlp, const float *params, float *grads, const dpt_batch_t *batch,
                      dpt_loss_out_t *out);
/* Loss and accuracy over any number of rows (processed in chunks of
 * max_batch), without gradients. out->loss is the mean over all rows. */
int dpt_mlp_evaluate(dpt_mlp_t *mlp, const float *params, const dpt_batch_t *batch,
                     dpt_loss_out_t *out);
/* Forward only for up to max_batch rows; *y is [rows, O], owned by the MLP. */
int dpt_mlp_predict(dpt_mlp_t *mlp, const float *params, const float *x, size_t rows,
                    const float **y);
/* The MLP as a dpt_model_t (replicate creates a second MLP of the same
 * shape). Its loss_grad is dpt_mlp_loss_grad except that it STORES the
 * gradient (flags = DPT_MODEL_STORES_GRADS). Its set_grad_hook reports
 * each linear layer's (weight, bias) pair, last layer first (see
 * dpt_seq_set_grad_hook); the hook also fires in dpt_mlp_loss_grad. */
dpt_model_t dpt_mlp_model(dpt_mlp_t *mlp);

/* ------------------------------------------------------------------------ */
/* Model plug-ins: the supervised job's `model = path/to/libmodel.so`.      */

/* What the trainer asks of a model: in_dim features per row, out_dim
 * outputs (the classes for softmax_xent, the targets for mse and huber),
 * this loss head, at most max_batch rows per call. */
typedef struct dpt_model_spec {
    size_t in_dim, out_dim;
    dpt_loss_kind_t loss;
    size_t max_batch;
} dpt_model_spec_t;

/* A model plug-in: a shared library whose source ends with
 *     DPT_MODEL_PLUGIN(my_plugin)
 * (my_plugin: a dpt_model_plugin_t). For every model instance dpt needs
 * (the towers' and one for evaluation) it calls:
 *   create(spec, &model, &handle): an instance for spec. model is a
 *     dpt_model_t as dpt/nn.h defines it: its variable table, a loss_grad
 *     reading DPT_MLP_X and DPT_MLP_LABEL (softmax_xent; fill out->correct)
 *     or DPT_MLP_Y (mse, huber) from the batch, and replicate/release for
 *     the towers' devices. Returns 0 or a DPT_E... code (with dpt_error).
 *   init_params(handle, params, rng): the initial parameters (an arena of
 *     the table's size; draw from rng for reproducible runs).
 *   predict(handle, params, x, rows, &y): outputs y [rows, out_dim] (owned
 *     by the instance) of rows <= max_batch rows, for evaluation.
 *   destroy(handle): frees the instance (NULL: nothing).
 * The plug-in may use any public dpt function (layers, losses, GEMM);
 * examples/custom_model/ is a complete one. */
typedef struct dpt_model_plugin {
    const char *name;
    int (*create)(const dpt_model_spec_t *spec, dpt_model_t *model, void **handle);
    void (*init_params)(void *handle, float *params, dpt_rng_t *rng);
    int (*predict)(void *handle, const float *params, const float *x, size_t rows, const float **y);
    void (*destroy)(void *handle);
} dpt_model_plugin_t;

/* Changes whenever dpt_model_plugin_t, dpt_model_spec_t, dpt_model_t or
 * this contract change. 1: the first; 2: dpt_model_t.set_grad_hook. */
#define DPT_MODEL_ABI_VERSION 2
#define DPT_MODEL_PLUGIN_SYMBOL "dpt_model_plugin"
#define DPT_MODEL_PLUGIN_ABI_SYMBOL "dpt_model_plugin_abi"

#if defined(__GNUC__) || defined(__clang__)
#define DPT__MODEL_EXPORT __attribute__((visibility("default")))
#else
#define DPT__MODEL_EXPORT
#endif

/* The plug-in's entry points for the object `p` (at file scope, once). */
#define DPT_MODEL_PLUGIN(p)                                             \
    DPT__MODEL_EXPORT int dpt_model_plugin_abi(void);                   \
    DPT__MODEL_EXPORT const dpt_model_plugin_t *dpt_model_plugin(void); \
    int dpt_model_plugin_abi(void)                                      \
    {                                                                   \
        return DPT_MODEL_ABI_VERSION;                                   \
    }                                                                   \
    const dpt_model_plugin_t *dpt_model_plugin(void)                    \
    {                                                                   \
        return &(p);                                                    \
    }                                                                   \
    typedef int dpt__model_plugin_semicolon_t /* so the macro takes a ';' */

/* Loads the plug-in at `path` (kept loaded for the life of the process).
 * Errors (DPT_EINVAL, naming the file): it cannot be loaded, it lacks the
 * entry points, it was built for another DPT_MODEL_ABI_VERSION (checked
 * before anything else of it is read), or its object lacks a name, create,
 * init_params, predict or destroy. */
int dpt_model_plugin_load(const char *path, const dpt_model_plugin_t **out);

#ifdef __cplusplus
}
#endif
#endif /* DPT_NN_H */
