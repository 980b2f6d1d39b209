/*
 * The LSTM layer (dpt/lstm.h): forward over a batch of time-major sequences
 * and backward through time.
 *
 * Caches, sized at create for max_seq_len (T) and max_batch (B):
 *   gates [T, B, 4H]    forward: the input projection of every step, then
 *                       (step by step) the activated gates i, f, g, o;
 *                       backward: overwritten in place by dz, the gradient
 *                       w.r.t. the gates' pre-activations
 *   hs    [T + 1, B, H] hs[0] = h0, hs[t + 1] = h_t (the state, which a
 *                       padded step carries; y is 0 there instead)
 *   cs    [T + 1, B, H] the same for c
 *   tc    [T, B, H]     tanh(c_t)
 *   dh, dc [B, H]       the gradient flowing back through the state
 *   mask  [T, B]        the forward's mask as 0/1
 * Because hs[0..T) is one contiguous [T*B, H] matrix of every step's h_{t-1},
 * dW_hh is one product over all steps, like dW_ih and dx; only dh_{t-1}
 * needs a product per step.
 *
 * Steps after the last step with any valid sequence (trailing padding of
 * the whole batch) are skipped: they would only carry the state and write
 * zeros.
 */
#include "dpt/gemm.h"
#include "dpt/lstm.h"
#include "dpt/status.h"
#include "gemm_impl.h"
#include "nn_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dpt_lstm {
    size_t in, hid, max_batch, max_len;
    size_t wih_off, whh_off, b_off; /* offsets of weight_ih, weight_hh, bias */
    float *gates, *hs, *cs, *tc, *dh, *dc;
    uint8_t *mask;
    const float *x;  /* input of the last forward (borrowed) */
    size_t len_used; /* 1 + the last step with a valid sequence (0: none) */
    size_t batch;    /* sequences of the last forward; 0 = no forward cached */
    /* W_hh packed for the GEMM once per pass (W_hh^T forward, W_hh backward)
     * instead of once per step. */
    dpt__gemm_bpack_t whh_pack;
};

void dpt_lstm_destroy(dpt_lstm_t *l)
{
    if (!l)
        return;
    dpt_free_aligned(l->gates);
    dpt_free_aligned(l->hs);
    dpt_free_aligned(l->cs);
    dpt_free_aligned(l->tc);
    dpt_free_aligned(l->dh);
    dpt_free_aligned(l->dc);
    free(l->mask);
    dpt__gemm_bpack_free(&l->whh_pack);
    free(l);
}

/* n = a * b * c, or DPT_EOVERFLOW. */
static int dpt__mul3(size_t a, size_t b, size_t c, size_t *n)
{
    size_t ab;
    if (dpt_mul_size(a, b, &ab) || dpt_mul_size(ab, c, n))
        return DPT_EOVERFLOW;
    return DPT_OK;
}

/* Allocates rows * cols floats (sizes already checked for overflow). */
static float *dpt__lstm_alloc(size_t rows, size_t cols)
{
    return dpt_alloc_aligned(rows * cols * sizeof(float));
}

int dpt_lstm_create(dpt_lstm_t **out, size_t in_dim, size_t hidden, size_t max_batch,
                    size_t max_seq_len, dpt_vartable_t *table, const char *prefix)
{
    if (!out)
        return dpt_error(DPT_EINVAL, "lstm: no place for the layer given");
    *out = NULL;
    if (!table)
        return dpt_error(DPT_EINVAL, "lstm: no variable table given");
    if (in_dim == 0 || hidden == 0 || max_batch == 0 || max_seq_len == 0)
        return dpt_error(DPT_EINVAL,
                         "lstm: input size %zu, cell size %zu, max_batch %zu, max_seq_len %zu "
                         "(each must be at least 1)",
                         in_dim, hidden, max_batch, max_seq_len);
    if (!prefix)
        prefix = "";
    /* Every size the layer ever computes, checked once here: the weights,
     * the caches (with their byte counts) and the largest input. */
    size_t h4, n, rows;
    if (dpt_mul_size(hidden, 4, &h4) || dpt__mul3(h4, in_dim, sizeof(float), &n) ||
        dpt__mul3(h4, hidden, sizeof(float), &n) || max_seq_len == (size_t)-1 ||
        dpt_mul_size(max_seq_len + 1, max_batch, &rows) || dpt__mul3(rows, h4, sizeof(float), &n) ||
        dpt__mul3(rows, in_dim, sizeof(float), &n))
        return dpt_error(DPT_EOVERFLOW,
                         "lstm: sizes overflow (input %zu, cell %zu, max_batch %zu, "
                         "max_seq_len %zu)",
                         in_dim, hidden, max_batch, max_seq_len);
    static const char *const names[3] = {"weight_ih", "weight_hh", "bias"};
    char name[3][DPT_VAR_NAME_MAX + 16];
    for (int v = 0; v < 3; v++) {
        snprintf(name[v], sizeof name[v], "%s%s", prefix, names[v]);
        if (strlen(prefix) + strlen(names[v]) >= DPT_VAR_NAME_MAX)
            return dpt_error(DPT_EINVAL, "lstm: variable name \"%s%s\" is longer than %d bytes",
                             prefix, names[v], DPT_VAR_NAME_MAX - 1);
        if (dpt_vartable_find(table, name[v]))
            return dpt_error(DPT_EINVAL, "lstm: variable \"%s\" is already in the table", name[v]);
    }

    dpt_lstm_t *l = calloc(1, sizeof *l);
    if (!l)
        return dpt_error(DPT_ENOMEM, "lstm: cannot allocate");
    l->in = in_dim;
    l->hid = hidden;
    l->max_batch = max_batch;
    l->max_len = max_seq_len;
    size_t steps = max_seq_len * max_batch; /* rows of [T, B, .] */
    int rc;
    l->gates = dpt__lstm_alloc(steps, h4);
    l->hs = dpt__lstm_alloc(steps + max_batch, hidden);
    l->cs = dpt__lstm_alloc(steps + max_batch, hidden);
    l->tc = dpt__lstm_alloc(steps, hidden);
    l->dh = dpt__lstm_alloc(max_batch, hidden);
    l->dc = dpt__lstm_alloc(max_batch, hidden);
    l->mask = malloc(steps);
    if (!l->gates || !l->hs || !l->cs || !l->tc || !l->dh || !l->dc || !l->mask) {
        rc = dpt_error(DPT_ENOMEM,
                       "lstm: cannot allocate the caches for %zu sequences of %zu steps and "
                       "%zu cells",
                       max_batch, max_seq_len, hidden);
        goto fail;
    }
    size_t wih[2] = {h4, in_dim}, whh[2] = {h4, hidden}, b[1] = {h4};
    if ((rc = dpt_vartable_add(table, name[0], 2, wih, &l->wih_off)) != 0 ||
        (rc = dpt_vartable_add(table, name[1], 2, whh, &l->whh_off)) != 0 ||
        (rc = dpt_vartable_add(table, name[2], 1, b, &l->b_off)) != 0)
        goto fail;
    *out = l;
    return DPT_OK;
fail:
    dpt_lstm_destroy(l);
    return rc;
}

size_t dpt_lstm_in_dim(const dpt_lstm_t *l)
{
    return l->in;
}
size_t dpt_lstm_hidden(const dpt_lstm_t *l)
{
    return l->hid;
}
size_t dpt_lstm_max_batch(const dpt_lstm_t *l)
{
    return l->max_batch;
}
size_t dpt_lstm_max_seq_len(const dpt_lstm_t *l)
{
    return l->max_len;
}

void dpt_lstm_init_params(const dpt_lstm_t *l, float *params, dpt_rng_t *rng)
{
    const size_t hid = l->hid;
    float bound = 1.0f / sqrtf((float)hid);
    dpt_rng_fill_uniform(rng, params + l->wih_off, 4 * hid * l->in, -bound, bound);
    double *m = malloc(hid * hid * sizeof *m);
    for (size_t gate = 0; gate < 4; gate++) {
        float *w = params + l->whh_off + gate * hid * hid;
        if (!m) {
            /* Out of memory for the scratch: a normal init of the same
             * scale rather than weights left at zero. */
            dpt_rng_fill_normal(rng, w, hid * hid, 0.0f, bound);
            continue;
        }
        for (size_t i = 0; i < hid * hid; i++)
            m[i] = dpt_rng_normal(rng);
        dpt__orthonormal_rows(m, hid, hid, rng);
        for (size_t i = 0; i < hid * hid; i++)
            w[i] = (float)m[i];
    }
    free(m);
    float *b = params + l->b_off;
    dpt_vec_zero(b, 4 * hid);
    for (size_t j = 0; j < hid; j++)
        b[hid + j] = 1.0f; /* the forget gate */
}

/* One step of one sequence. z [4H] holds the pre-activations without the
 * bias and receives the activated gates i, f, g, o; c = f * c_prev + i * g,
 * tc = tanh(c), h = o * tc, each [H]. */
DPT__NN_CLONES
static void dpt__lstm_cell(float *restrict z, const float *restrict bias,
                           const float *restrict c_prev, float *restrict c, float *restrict tc,
                           float *restrict h, size_t hid)
{
    float *zi = z, *zf = z + hid, *zg = z + 2 * hid, *zo = z + 3 * hid;
    const float *bi = bias, *bf = bias + hid, *bg = bias + 2 * hid, *bo = bias + 3 * hid;
    for (size_t j = 0; j < hid; j++) {
        float i = dpt__sigmoidf(zi[j] + bi[j]);
        float f = dpt__sigmoidf(zf[j] + bf[j]);
        float g = dpt__tanhf(zg[j] + bg[j]);
        float o = dpt__sigmoidf(zo[j] + bo[j]);
        float cj = f * c_prev[j] + i * g;
        float t = dpt__tanhf(cj);
        zi[j] = i, zf[j] = f, zg[j] = g, zo[j] = o;
        c[j] = cj;
        tc[j] = t;
        h[j] = o * t;
    }
}

/* The gradient of one step of one sequence. a [4H] holds the activated
 * gates and receives dz; dh [H] (the gradient w.r.t. h_t without dy, which
 * is added here; dy may be NULL) is consumed and left at zero; dc [H] holds
 * the gradient w.r.t. c_t from later steps and receives the one w.r.t.
 * c_{t-1}. */
DPT__NN_CLONES
static void dpt__lstm_cell_backward(float *restrict a, const float *restrict c_prev,
                                    const float *restrict tc, const float *restrict dy,
                                    float *restrict dh, float *restrict dc, size_t hid)
{
    float *ai = a, *af = a + hid, *ag = a + 2 * hid, *ao = a + 3 * hid;
    for (size_t j = 0; j < hid; j++) {
        float i = ai[j], f = af[j], g = ag[j], o = ao[j], t = tc[j];
        float dhj = dy ? dh[j] + dy[j] : dh[j];
        float dcj = dc[j] + dhj * o * (1.0f - t * t);
        ai[j] = dcj * g * (i * (1.0f - i));
        af[j] = dcj * c_prev[j] * (f * (1.0f - f));
        ag[j] = dcj * i * (1.0f - g * g);
        ao[j] = dhj * t * (o * (1.0f - o));
        dc[j] = dcj * f;
        dh[j] = 0.0f;
    }
}

/* DPT_ENUMERIC naming the first non-finite value of v [rows, cols], whose
 * row r is (step r / batch, sequence r % batch) for sequence tensors. */
static int dpt__lstm_check_finite(const char *what, const float *v, size_t rows, size_t cols,
                                  size_t batch, int timed)
{
    size_t n = rows * cols;
    if (dpt_vec_all_finite(v, n))
        return DPT_OK;
    size_t i = dpt_vec_first_nonfinite(v, n), r = i / cols;
    if (timed)
        return dpt_error(DPT_ENUMERIC, "lstm: %s at step %zu, sequence %zu, column %zu is %g", what,
                         r / batch, r % batch, i % cols, (double)v[i]);
    return dpt_error(DPT_ENUMERIC, "lstm: %s of sequence %zu, column %zu is %g", what, r, i % cols,
                     (double)v[i]);
}

int dpt_lstm_forward(dpt_lstm_t *l, const float *params, const float *x, size_t seq_len,
                     size_t batch, const uint8_t *mask, const float *h0, const float *c0, float *y,
                     float *h_n, float *c_n)
{
    if (!l)
        return dpt_error(DPT_EINVAL, "lstm: no layer given");
    l->batch = 0;
    if (!params || !x)
        return dpt_error(DPT_EINVAL, "lstm forward: no %s given", params ? "input" : "parameters");
    if (batch == 0 || batch > l->max_batch)
        return dpt_error(DPT_EINVAL, "lstm forward: batch of %zu sequences (allowed 1..%zu)", batch,
                         l->max_batch);
    if (seq_len == 0 || seq_len > l->max_len)
        return dpt_error(DPT_EINVAL, "lstm forward: sequences of %zu steps (allowed 1..%zu)",
                         seq_len, l->max_len);
    const size_t hid = l->hid, h4 = 4 * hid, in = l->in, rows = seq_len * batch;
    int rc;
    if ((rc = dpt__lstm_check_finite("input", x, rows, in, batch, 1)) != 0 ||
        (h0 && (rc = dpt__lstm_check_finite("h0", h0, batch, hid, batch, 0)) != 0) ||
        (c0 && (rc = dpt__lstm_check_finite("c0", c0, batch, hid, batch, 0)) != 0))
        return rc;

    size_t used = 0;
    for (size_t r = 0; r < rows; r++) {
        l->mask[r] = mask ? mask[r] != 0 : 1;
        if (l->mask[r])
            used = r / batch + 1;
    }
    if (h0)
        memcpy(l->hs, h0, batch * hid * sizeof(float));
    else
        dpt_vec_zero(l->hs, batch * hid);
    if (c0)
        memcpy(l->cs, c0, batch * hid * sizeof(float));
    else
        dpt_vec_zero(l->cs, batch * hid);

    const float *wih = params + l->wih_off, *whh = params + l->whh_off, *bias = params + l->b_off;
    /* The input projection of every step at once; each step then adds its
     * recurrent product to its own rows. */
    dpt_gemm(0, 1, used * batch, h4, in, 1.0f, x, in, wih, in, 0.0f, l->gates, h4);
    /* A failed pack leaves the products on dpt_gemm: slower, same numbers. */
    (void)dpt__gemm_bpack(&l->whh_pack, 1, hid, h4, whh, hid);
    for (size_t t = 0; t < used; t++) {
        const uint8_t *m = l->mask + t * batch;
        float *z = l->gates + t * batch * h4, *tc = l->tc + t * batch * hid;
        const float *hp = l->hs + t * batch * hid, *cp = l->cs + t * batch * hid;
        float *hn = l->hs + (t + 1) * batch * hid, *cn = l->cs + (t + 1) * batch * hid;
        int any = 0;
        for (size_t b = 0; b < batch && !any; b++)
            any = m[b];
        if (any && (t > 0 || h0)) /* h0 = 0 adds nothing; nor does a step without valid rows */
            dpt__gemm_bpacked(0, batch, 1.0f, hp, hid, &l->whh_pack, 1.0f, z, h4);
        for (size_t b = 0; b < batch; b++) {
            size_t o = b * hid;
            if (m[b]) {
                dpt__lstm_cell(z + b * h4, bias, cp + o, cn + o, tc + o, hn + o, hid);
            } else {
                memcpy(hn + o, hp + o, hid * sizeof(float));
                memcpy(cn + o, cp + o, hid * sizeof(float));
            }
            if (y) {
                float *yr = y + (t * batch + b) * hid;
                if (m[b])
                    memcpy(yr, hn + o, hid * sizeof(float));
                else
                    dpt_vec_zero(yr, hid);
            }
        }
    }
    if (y && used < seq_len)
        dpt_vec_zero(y + used * batch * hid, (seq_len - used) * batch * hid);
    if (h_n)
        memcpy(h_n, l->hs + used * batch * hid, batch * hid * sizeof(float));
    if (c_n)
        memcpy(c_n, l->cs + used * batch * hid, batch * hid * sizeof(float));
    l->x = x;
    l->len_used = used;
    l->batch = batch;
    return DPT_OK;
}

int dpt_lstm_backward(dpt_lstm_t *l, const float *params, float *grads, const float *dy,
                      const float *dh_n, const float *dc_n, float *dx, float *dh0, float *dc0)
{
    if (!l)
        return dpt_error(DPT_EINVAL, "lstm: no layer given");
    if (!params || !grads)
        return dpt_error(DPT_EINVAL, "lstm backward: no %s given",
                         params ? "gradient arena" : "parameters");
    if (l->batch == 0)
        return dpt_error(DPT_ESTATE, "lstm backward: no forward pass to go back through (one "
                                     "backward per forward)");
    const size_t hid = l->hid, h4 = 4 * hid, in = l->in, batch = l->batch, used = l->len_used;
    const size_t rows = used * batch;
    l->batch = 0; /* the gates cache becomes dz below */
    if (dh_n)
        memcpy(l->dh, dh_n, batch * hid * sizeof(float));
    else
        dpt_vec_zero(l->dh, batch * hid);
    if (dc_n)
        memcpy(l->dc, dc_n, batch * hid * sizeof(float));
    else
        dpt_vec_zero(l->dc, batch * hid);

    const float *wih = params + l->wih_off, *whh = params + l->whh_off;
    (void)dpt__gemm_bpack(&l->whh_pack, 0, h4, hid, whh, hid);
    for (size_t t = used; t-- > 0;) {
        const uint8_t *m = l->mask + t * batch;
        float *a = l->gates + t * batch * h4;
        const float *tc = l->tc + t * batch * hid, *cp = l->cs + t * batch * hid;
        const float *dyt = dy ? dy + t * batch * hid : NULL;
        int any = 0;
        for (size_t b = 0; b < batch; b++) {
            size_t o = b * hid;
            if (m[b]) {
                dpt__lstm_cell_backward(a + b * h4, cp + o, tc + o, dyt ? dyt + o : NULL, l->dh + o,
                                        l->dc + o, hid);
                any = 1;
            } else {
                dpt_vec_zero(a + b * h4, h4); /* no contribution; dh, dc pass through */
            }
        }
        /* dh_{t-1} = dz W_hh for the valid rows, whose dh the cell left at
         * zero; a padded row's dz is zero, so its dh stays as it came. */
        if (any)
            dpt__gemm_bpacked(0, batch, 1.0f, a, h4, &l->whh_pack, 1.0f, l->dh, hid);
    }
    if (dh0)
        dpt_vec_axpy(dh0, l->dh, batch * hid, 1.0f);
    if (dc0)
        dpt_vec_axpy(dc0, l->dc, batch * hid, 1.0f);
    if (rows == 0)
        return DPT_OK;
    /* Steps past `used` have dz = 0 and add nothing; they are left out. */
    const float *dz = l->gates;
    dpt_gemm(1, 0, h4, in, rows, 1.0f, dz, h4, l->x, in, 1.0f, grads + l->wih_off, in);
    dpt_gemm(1, 0, h4, hid, rows, 1.0f, dz, h4, l->hs, hid, 1.0f, grads + l->whh_off, hid);
    float *db = grads + l->b_off;
    for (size_t r = 0; r < rows; r++) {
        const float *row = dz + r * h4;
        for (size_t j = 0; j < h4; j++)
            db[j] += row[j];
    }
    if (dx)
        dpt_gemm(0, 0, rows, in, h4, 1.0f, dz, h4, wih, in, 1.0f, dx, in);
    return DPT_OK;
}
