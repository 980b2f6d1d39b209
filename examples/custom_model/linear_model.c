/*
 * A model plug-in for the supervised job: a linear model, y = W x + b.
 * With loss = softmax_xent it is softmax regression (a linear classifier),
 * with mse or huber linear regression. It shows the whole contract of
 * dpt_model_plugin_t (dpt/nn.h): a variable table, a loss_grad over a
 * batch, replicate/release for the towers' devices, init_params and
 * predict.
 *
 * Build (against an installed dpt):
 *     cc -O2 -fPIC -shared linear_model.c -o liblinear_model.so $(pkg-config --cflags dpt)
 * Use it in a config:
 *     job = supervised
 *     model = liblinear_model.so      # relative to the config file
 */
#include <dpt/dpt.h>

#include <stdlib.h>
#include <string.h>

typedef struct linear {
    dpt_model_spec_t spec;
    dpt_vartable_t vars;
    size_t w_off, b_off; /* W [out, in], b [out] */
    float *y, *dy;       /* [max_batch, out] */
} linear_t;

static void linear_free(void *handle)
{
    linear_t *m = handle;
    if (!m)
        return;
    dpt_vartable_deinit(&m->vars);
    free(m->y);
    free(m->dy);
    free(m);
}

static int linear_new(const dpt_model_spec_t *spec, linear_t **out)
{
    *out = NULL;
    if (spec->in_dim == 0 || spec->out_dim == 0 || spec->max_batch == 0)
        return dpt_error(DPT_EINVAL, "linear model: empty input, output or batch");
    linear_t *m = calloc(1, sizeof *m);
    if (!m)
        return dpt_error(DPT_ENOMEM, "linear model: out of memory");
    m->spec = *spec;
    dpt_vartable_init(&m->vars);
    size_t w[2] = {spec->out_dim, spec->in_dim}, b[1] = {spec->out_dim};
    int rc = dpt_vartable_add(&m->vars, "weight", 2, w, &m->w_off);
    if (!rc)
        rc = dpt_vartable_add(&m->vars, "bias", 1, b, &m->b_off);
    m->y = calloc(spec->max_batch * spec->out_dim, sizeof(float));
    m->dy = calloc(spec->max_batch * spec->out_dim, sizeof(float));
    if (!rc && (!m->y || !m->dy))
        rc = dpt_error(DPT_ENOMEM, "linear model: out of memory");
    if (rc) {
        linear_free(m);
        return rc;
    }
    *out = m;
    return DPT_OK;
}

/* y = x W^T + b for `rows` rows. */
static void linear_forward(linear_t *m, const float *params, const float *x, size_t rows)
{
    size_t in = m->spec.in_dim, out = m->spec.out_dim;
    for (size_t r = 0; r < rows; r++)
        memcpy(m->y + r * out, params + m->b_off, out * sizeof(float));
    dpt_gemm(0, 1, rows, out, in, 1.0f, x, in, params + m->w_off, in, 1.0f, m->y, out);
}

static int linear_predict(void *handle, const float *params, const float *x, size_t rows,
                          const float **y)
{
    linear_t *m = handle;
    if (rows > m->spec.max_batch)
        return dpt_error(DPT_EINVAL, "linear model: %zu rows, at most %zu", rows,
                         m->spec.max_batch);
    linear_forward(m, params, x, rows);
    *y = m->y;
    return DPT_OK;
}

/* The mean loss of the batch and its gradient, added to grads. */
static int linear_loss_grad(void *ctx, const float *params, float *grads, const dpt_batch_t *b,
                            dpt_loss_out_t *out)
{
    linear_t *m = ctx;
    size_t in = m->spec.in_dim, k = m->spec.out_dim, n = b->rows;
    if (n == 0 || n > m->spec.max_batch)
        return dpt_error(DPT_EINVAL, "linear model: batch of %zu rows (allowed 1..%zu)", n,
                         m->spec.max_batch);
    const float *x = dpt_batch_get(b, "linear model", DPT_MLP_X, DPT_F32, in, NULL);
    if (!x)
        return DPT_EINVAL;
    linear_forward(m, params, x, n);
    memset(m->dy, 0, n * k * sizeof(float));
    double loss = 0.0;
    size_t correct = 0;
    int rc;
    if (m->spec.loss == DPT_LOSS_SOFTMAX_XENT) {
        const int32_t *labels = dpt_batch_get(b, "linear model", DPT_MLP_LABEL, DPT_I32, 1, NULL);
        if (!labels)
            return DPT_EINVAL;
        rc = dpt_loss_softmax_xent(m->y, labels, n, k, m->dy, &loss, &correct);
    } else {
        const float *t = dpt_batch_get(b, "linear model", DPT_MLP_Y, DPT_F32, k, NULL);
        if (!t)
            return DPT_EINVAL;
        rc = m->spec.loss == DPT_LOSS_HUBER ? dpt_loss_huber(m->y, t, n, k, 1.0, m->dy, &loss)
                                            : dpt_loss_mse(m->y, t, n, k, m->dy, &loss);
    }
    if (rc)
        return rc;
    /* dW += dy^T x, db += the column sums of dy. */
    dpt_gemm(1, 0, k, in, n, 1.0f, m->dy, k, x, in, 1.0f, grads + m->w_off, in);
    for (size_t r = 0; r < n; r++)
        for (size_t j = 0; j < k; j++)
            grads[m->b_off + j] += m->dy[r * k + j];
    memset(out, 0, sizeof *out);
    out->loss = loss;
    out->correct = (double)correct;
    out->rows = n;
    return DPT_OK;
}

static int linear_replicate(void *ctx, void **copy)
{
    linear_t *m = ctx, *r;
    int rc = linear_new(&m->spec, &r);
    *copy = r;
    return rc;
}

static int linear_create(const dpt_model_spec_t *spec, dpt_model_t *model, void **handle)
{
    linear_t *m;
    int rc = linear_new(spec, &m);
    if (rc)
        return rc;
    memset(model, 0, sizeof *model);
    model->vars = &m->vars;
    model->ctx = m;
    model->max_batch = spec->max_batch;
    model->loss_grad = linear_loss_grad;
    model->replicate = linear_replicate;
    model->release = linear_free;
    *handle = m;
    return DPT_OK;
}

/* Small uniform weights (LeCun's scale), zero biases. */
static void linear_init_params(void *handle, float *params, dpt_rng_t *rng)
{
    linear_t *m = handle;
    size_t in = m->spec.in_dim, out = m->spec.out_dim;
    float a = 1.0f / (float)in;
    for (size_t i = 0; i < in * out; i++)
        params[m->w_off + i] = a * (2.0f * dpt_rng_uniform(rng) - 1.0f);
    memset(params + m->b_off, 0, out * sizeof(float));
}

static const dpt_model_plugin_t linear_plugin = {
    .name = "linear",
    .create = linear_create,
    .init_params = linear_init_params,
    .predict = linear_predict,
    .destroy = linear_free,
};

#ifndef LINEAR_MODEL_TEST_BROKEN
DPT_MODEL_PLUGIN(linear_plugin);
#else
/* tests/: a plug-in built for another ABI, which dpt must refuse. */
DPT__MODEL_EXPORT int dpt_model_plugin_abi(void);
DPT__MODEL_EXPORT const dpt_model_plugin_t *dpt_model_plugin(void);
int dpt_model_plugin_abi(void)
{
    return DPT_MODEL_ABI_VERSION + 1;
}
const dpt_model_plugin_t *dpt_model_plugin(void)
{
    return &linear_plugin;
}
#endif
