/*
 * dpt/lstm.h — a single-layer LSTM over batches of sequences, for recurrent
 * policies.
 *
 * Shapes: T = steps in the sequences (seq_len), B = sequences in the batch,
 * I = input features, H = cell size (hidden units). Every sequence tensor is
 * TIME-MAJOR and row-major: x [T, B, I], y [T, B, H], mask [T, B]; element
 * (t, b, j) of y is y[(t * B + b) * H + j]. Time-major keeps the B rows of one
 * step contiguous, so the input projection of all steps is one matrix
 * product and each step's recurrent product reads and writes whole rows
 * (it is also the layout of dpt's rollout buffers, [T, N]). States h0, c0,
 * h_n, c_n are [B, H].
 *
 * Parameters, in the caller's arena (dpt/arena.h), named after PyTorch's
 * nn.LSTM (prefix + name):
 *   weight_ih [4H, I]   input weights of the gates i, f, g, o (in this order,
 *                       H rows each, as in PyTorch)
 *   weight_hh [4H, H]   recurrent weights, same gate order
 *   bias      [4H]      one bias (PyTorch keeps two, bias_ih and bias_hh; a
 *                       PyTorch layer maps to this one as their sum)
 *
 * One step, for a sequence b whose step t is valid (mask != 0), with
 * h = h_{t-1}, c = c_{t-1} (h0, c0 at t = 0) and sigma the logistic function:
 *   z = x_t W_ih^T + h W_hh^T + bias             [4H] = [z_i, z_f, z_g, z_o]
 *   i = sigma(z_i)   f = sigma(z_f)   g = tanh(z_g)   o = sigma(z_o)
 *   c_t = f * c + i * g
 *   h_t = o * tanh(c_t)
 *   y_t = h_t
 * A padded step (mask == 0) leaves the state unchanged (h_t = h_{t-1},
 * c_t = c_{t-1}) and outputs y_t = 0; it contributes exactly nothing to any
 * gradient, and the x values of padded steps do not matter (they must only
 * be finite). Padding is usually at the end of a sequence (shorter episodes
 * in a fixed-length batch); then h_n, c_n are the state after each
 * sequence's last valid step. Padding elsewhere works the same way.
 *
 * Backward through time, given dy [T, B, H] (the loss's gradient w.r.t.
 * every step's output; the entries of padded steps are ignored) and
 * optionally dh_n, dc_n (w.r.t. the final state):
 *   dh_t = dy_t + (gradient from step t + 1 through h_t)
 *   dc_t = (gradient from step t + 1 through c_t) + dh_t * o * (1 - tanh(c_t)^2)
 *   dz_i = dc_t * g * i (1 - i)      dz_f = dc_t * c_{t-1} * f (1 - f)
 *   dz_g = dc_t * i * (1 - g^2)      dz_o = dh_t * tanh(c_t) * o (1 - o)
 *   dW_ih += dz^T x    dW_hh += dz^T h_{t-1}    dbias += sum dz
 *   dx_t += dz W_ih    dh_{t-1} = dz W_hh    dc_{t-1} = dc_t * f
 * As everywhere in dpt/nn.h, backward ACCUMULATES (+=) into every gradient it
 * produces: the parameter gradients, dx, dh0 and dc0. The caller zeroes them.
 *
 * Costs: the input projection of all T steps is one GEMM
 * ([T*B, I] x W_ih^T) and each step one GEMM ([B, H] x W_hh^T) through
 * dpt_gemm() (dpt/gemm.h); backward makes one GEMM per step (dh) and three
 * over all steps (dW_ih, dW_hh, dx). In all 6 * T * B * 4H * (I + H)
 * floating-point operations per forward + backward, plus elementwise work.
 * Everything the backward pass needs is cached at forward time in buffers
 * allocated at create; forward and backward allocate nothing.
 *
 * A layer object is not thread-safe: each thread (tower) creates its own;
 * they can share one parameter arena.
 */
#ifndef DPT_LSTM_H
#define DPT_LSTM_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/arena.h"
#include "dpt/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_lstm dpt_lstm_t;

/* Creates an LSTM with `in_dim` inputs and `hidden` cells for batches of up
 * to `max_batch` sequences of up to `max_seq_len` steps; its caches (about
 * max_seq_len * max_batch * 7 * hidden floats) are allocated and touched
 * here. Appends weight_ih, weight_hh and bias, prefixed by `prefix` (may be
 * "" or NULL), to `table` (caller owns it; it may hold other variables).
 * *lstm is NULL on failure. Errors: DPT_EINVAL (NULL lstm or table, a zero
 * size, a variable name already in the table or too long), DPT_EOVERFLOW
 * (sizes overflow size_t), DPT_ENOMEM. On DPT_ENOMEM or DPT_EOVERFLOW from the
 * table the table may keep some of the layer's variables. */
int dpt_lstm_create(dpt_lstm_t **lstm, size_t in_dim, size_t hidden, size_t max_batch,
                    size_t max_seq_len, dpt_vartable_t *table, const char *prefix);
/* Frees the layer (not the table). NULL is a no-op. */
void dpt_lstm_destroy(dpt_lstm_t *lstm);

size_t dpt_lstm_in_dim(const dpt_lstm_t *lstm);
size_t dpt_lstm_hidden(const dpt_lstm_t *lstm);
size_t dpt_lstm_max_batch(const dpt_lstm_t *lstm);
size_t dpt_lstm_max_seq_len(const dpt_lstm_t *lstm);

/* Initialises the layer's variables inside `params` (an arena with the
 * table's layout) from `rng`:
 *   weight_ih ~ U(-1/sqrt(H), 1/sqrt(H))   (PyTorch's nn.LSTM default)
 *   weight_hh: each gate's [H, H] block a random orthogonal matrix
 *              (keeps the recurrent map from growing or shrinking the state
 *              at the start, the usual choice for recurrent policies)
 *   bias:      0, except 1 for the forget gate (so that the cell remembers
 *              by default early in training; Jozefowicz et al., 2015) */
void dpt_lstm_init_params(const dpt_lstm_t *lstm, float *params, dpt_rng_t *rng);

/* Forward pass over `batch` sequences of `seq_len` steps.
 *   params  the arena (borrowed for the call)
 *   x       [T, B, I] inputs (borrowed: must stay valid and unchanged until
 *           the matching backward)
 *   mask    [T, B]: 0 marks a padded step, anything else a valid one; NULL
 *           means every step is valid (copied)
 *   h0, c0  [B, H] initial state; NULL means zeros (copied)
 *   y       [T, B, H] output of every step, or NULL (caller owns)
 *   h_n,c_n [B, H] final state, each may be NULL (caller owns); h_n/c_n may
 *           be the same buffers as h0/c0 (carrying state across calls)
 * Errors: DPT_EINVAL (NULL lstm, params or x; batch or seq_len 0 or above
 * the maxima given at create), DPT_ENUMERIC (x, h0 or c0 hold a NaN or an
 * infinity: the message names the step, row and column). After an error no
 * backward is possible until the next successful forward. */
int dpt_lstm_forward(dpt_lstm_t *lstm, const float *params, const float *x, size_t seq_len,
                     size_t batch, const uint8_t *mask, const float *h0, const float *c0, float *y,
                     float *h_n, float *c_n);

/* Backward pass for the last forward (same params). Accumulates into `grads`
 * (same layout as params) the gradients of weight_ih, weight_hh and bias,
 * and into dx [T, B, I], dh0 [B, H] and dc0 [B, H] (each may be NULL when not
 * wanted) the gradients w.r.t. the inputs and the initial state.
 *   dy      [T, B, H], or NULL for zeros (only the final state matters)
 *   dh_n    [B, H] gradient w.r.t. the final h, or NULL for zeros
 *   dc_n    [B, H] gradient w.r.t. the final c, or NULL for zeros
 * It consumes the forward pass's cache (its buffers are reused for the
 * gradients): a second backward needs a new forward. Errors: DPT_EINVAL
 * (NULL lstm, params or grads), DPT_ESTATE (no successful forward since
 * create or since the last backward). */
int dpt_lstm_backward(dpt_lstm_t *lstm, const float *params, float *grads, const float *dy,
                      const float *dh_n, const float *dc_n, float *dx, float *dh0, float *dc0);

#ifdef __cplusplus
}
#endif
#endif /* DPT_LSTM_H */
