/* The built-in MLP: a sequential stack with a loss head, as a dpt_model_t. */
#include "dpt/nn.h"
#include "dpt/status.h"

#include <stdlib.h>
#include <string.h>

struct dpt_mlp {
    dpt_vartable_t vars;
    dpt_seq_t *seq;
    dpt_loss_kind_t loss;
    dpt_layer_spec_t *specs; /* kept so that replicate() can rebuild the stack */
    size_t nlayers, in_dim, out_dim, max_batch;
    dpt_shape_t in_shape;
    uint64_t seed; /* the dropout masks' */
    float *dy;     /* [max_batch, out_dim] loss gradient scratch */
};

static const char *const dpt__loss_names[] = {
#define DPT__LOSS_NAME(sym, name) name,
    DPT_LOSS_LIST(DPT__LOSS_NAME)
#undef DPT__LOSS_NAME
};

void dpt_mlp_destroy(dpt_mlp_t *m)
{
    if (!m)
        return;
    dpt_seq_destroy(m->seq);
    dpt_vartable_deinit(&m->vars);
    dpt_free_aligned(m->dy);
    free(m->specs);
    free(m);
}

int dpt_mlp_create(dpt_mlp_t **out, size_t in_dim, const dpt_layer_spec_t *layers, size_t nlayers,
                   dpt_loss_kind_t loss, size_t max_batch)
{
    return dpt_mlp_create_shaped(out, (dpt_shape_t){in_dim, 1, 1}, layers, nlayers, loss,
                                 max_batch);
}

int dpt_mlp_create_shaped(dpt_mlp_t **out, dpt_shape_t in, const dpt_layer_spec_t *layers,
                          size_t nlayers, dpt_loss_kind_t loss, size_t max_batch)
{
    *out = NULL;
    if ((unsigned)loss >= DPT_LOSS_COUNT)
        return dpt_error(DPT_EINVAL, "mlp: unknown loss %d", (int)loss);
    dpt_mlp_t *m = calloc(1, sizeof *m);
    if (!m)
        return dpt_error(DPT_ENOMEM, "mlp: cannot allocate");
    dpt_vartable_init(&m->vars);
    int rc = dpt_seq_create_shaped(&m->seq, in, layers, nlayers, max_batch, &m->vars, "");
    if (rc)
        goto fail;
    m->loss = loss;
    m->nlayers = nlayers;
    m->in_shape = in;
    m->in_dim = dpt_seq_in_dim(m->seq);
    m->out_dim = dpt_seq_out_dim(m->seq);
    m->max_batch = max_batch;
    if (loss == DPT_LOSS_SOFTMAX_XENT && m->out_dim < 2) {
        rc = dpt_error(DPT_EINVAL, "mlp: softmax cross-entropy needs >= 2 outputs, got %zu",
                       m->out_dim);
        goto fail;
    }
    m->specs = malloc(nlayers * sizeof *m->specs);
    m->dy = dpt_alloc_aligned(max_batch * m->out_dim * sizeof(float));
    if (!m->specs || !m->dy) {
        rc = dpt_error(DPT_ENOMEM, "mlp: cannot allocate scratch buffers");
        goto fail;
    }
    memcpy(m->specs, layers, nlayers * sizeof *m->specs);
    *out = m;
    return DPT_OK;
fail:
    dpt_mlp_destroy(m);
    return rc;
}

const dpt_vartable_t *dpt_mlp_vars(const dpt_mlp_t *m)
{
    return &m->vars;
}

size_t dpt_mlp_running(const dpt_mlp_t *m, unsigned char *flags)
{
    return dpt_seq_running(m->seq, flags);
}

void dpt_mlp_set_seed(dpt_mlp_t *m, uint64_t seed)
{
    m->seed = seed;
}

void dpt_mlp_init_params(const dpt_mlp_t *m, float *params, dpt_rng_t *rng)
{
    dpt_seq_init_params(m->seq, params, rng);
}

/* The columns of a batch the MLP reads, checked once per call. */
typedef struct dpt__mlp_cols {
    const float *x;
    const int32_t *label;
    const float *y;
    const int32_t *keys; /* the optional dropout keys [rows, 2] */
} dpt__mlp_cols_t;

static int dpt__mlp_columns(const dpt_mlp_t *m, const dpt_batch_t *b, dpt__mlp_cols_t *c)
{
    if (!b || b->rows == 0)
        return dpt_error(DPT_EINVAL, "mlp: empty batch");
    memset(c, 0, sizeof *c);
    c->x = dpt_batch_get(b, "mlp", DPT_MLP_X, DPT_F32, m->in_dim, NULL);
    if (!c->x)
        return DPT_EINVAL;
    if (m->loss == DPT_LOSS_SOFTMAX_XENT)
        c->label = dpt_batch_get(b, "mlp", DPT_MLP_LABEL, DPT_I32, 1, NULL);
    else
        c->y = dpt_batch_get(b, "mlp", DPT_MLP_Y, DPT_F32, m->out_dim, NULL);
    if (dpt_batch_find(b, DPT_MLP_ROW) &&
        !(c->keys = dpt_batch_get(b, "mlp", DPT_MLP_ROW, DPT_I32, 2, NULL)))
        return DPT_EINVAL;
    return (c->label || c->y) ? DPT_OK : DPT_EINVAL;
}

/* Forward and loss on rows [r0, r0 + n); the loss gradient goes to m->dy
 * when `grad` is set. Adds the row-weighted loss and hits to the totals. */
static int dpt__mlp_chunk(dpt_mlp_t *m, const float *params, const dpt__mlp_cols_t *c, size_t r0,
                          size_t n, int grad, double *loss_sum, double *hits)
{
    const float *y;
    /* Training draws dropout masks from the rows' keys; evaluation never. */
    dpt_seq_set_dropout(m->seq, grad, m->seed, c->keys ? c->keys + 2 * r0 : NULL);
    int rc = dpt_seq_forward(m->seq, params, c->x + r0 * m->in_dim, n, &y);
    if (rc)
        return rc;
    double loss;
    float *dy = grad ? m->dy : NULL;
    if (dy)
        dpt_vec_zero(dy, n * m->out_dim);
    if (m->loss == DPT_LOSS_SOFTMAX_XENT) {
        size_t correct = 0;
        rc = dpt_loss_softmax_xent(y, c->label + r0, n, m->out_dim, dy, &loss, &correct);
        *hits += (double)correct;
    } else if (m->loss == DPT_LOSS_HUBER) {
        rc = dpt_loss_huber(y, c->y + r0 * m->out_dim, n, m->out_dim, 1.0, dy, &loss);
    } else {
        rc = dpt_loss_mse(y, c->y + r0 * m->out_dim, n, m->out_dim, dy, &loss);
    }
    if (rc)
        return rc;
    *loss_sum += loss * (double)n;
    return DPT_OK;
}

static int dpt__mlp_loss_grad(dpt_mlp_t *m, const float *params, float *grads, const dpt_batch_t *b,
                              dpt_loss_out_t *out, int store)
{
    dpt__mlp_cols_t c;
    int rc = dpt__mlp_columns(m, b, &c);
    if (rc)
        return rc;
    if (b->rows > m->max_batch)
        return dpt_error(DPT_EINVAL, "mlp: batch of %zu rows exceeds max_batch %zu", b->rows,
                         m->max_batch);
    double loss_sum = 0.0, hits = 0.0;
    rc = dpt__mlp_chunk(m, params, &c, 0, b->rows, 1, &loss_sum, &hits);
    if (rc)
        return rc;
    rc = dpt_seq_backward_ex(m->seq, params, grads, m->dy, NULL, store);
    if (rc)
        return rc;
    if (out) {
        out->loss = loss_sum / (double)b->rows;
        out->correct = hits;
        out->rows = b->rows;
    }
    return DPT_OK;
}

int dpt_mlp_loss_grad(dpt_mlp_t *m, const float *params, float *grads, const dpt_batch_t *b,
                      dpt_loss_out_t *out)
{
    return dpt__mlp_loss_grad(m, params, grads, b, out, 0);
}

int dpt_mlp_evaluate(dpt_mlp_t *m, const float *params, const dpt_batch_t *b, dpt_loss_out_t *out)
{
    dpt__mlp_cols_t c;
    int rc = dpt__mlp_columns(m, b, &c);
    if (rc)
        return rc;
    double loss_sum = 0.0, hits = 0.0;
    for (size_t r0 = 0; r0 < b->rows; r0 += m->max_batch) {
        size_t n = b->rows - r0 < m->max_batch ? b->rows - r0 : m->max_batch;
        if ((rc = dpt__mlp_chunk(m, params, &c, r0, n, 0, &loss_sum, &hits)) != 0)
            return rc;
    }
    out->loss = loss_sum / (double)b->rows;
    out->correct = hits;
    out->rows = b->rows;
    return DPT_OK;
}

int dpt_mlp_predict(dpt_mlp_t *m, const float *params, const float *x, size_t rows, const float **y)
{
    dpt_seq_set_dropout(m->seq, 0, 0, NULL);
    return dpt_seq_forward(m->seq, params, x, rows, y);
}

static int dpt__mlp_model_loss_grad(void *ctx, const float *params, float *grads,
                                    const dpt_batch_t *batch, dpt_loss_out_t *out)
{
    return dpt__mlp_loss_grad(ctx, params, grads, batch, out, 1); /* DPT_MODEL_STORES_GRADS */
}

static int dpt__mlp_model_replicate(void *ctx, void **copy)
{
    const dpt_mlp_t *m = ctx;
    dpt_mlp_t *r = NULL;
    int rc = dpt_mlp_create_shaped(&r, m->in_shape, m->specs, m->nlayers, m->loss, m->max_batch);
    if (rc || !r) {
        *copy = NULL;
        return rc ? rc : DPT_ENOMEM;
    }
    r->seed = m->seed;
    *copy = r;
    return DPT_OK;
}

static void dpt__mlp_model_release(void *copy)
{
    dpt_mlp_destroy(copy);
}

static int dpt__mlp_model_set_grad_hook(void *ctx, dpt_grad_hook_t hook, void *user)
{
    dpt_mlp_t *m = ctx;
    dpt_seq_set_grad_hook(m->seq, hook, user);
    return DPT_OK;
}

dpt_model_t dpt_mlp_model(dpt_mlp_t *m)
{
    dpt_model_t model = {
        .vars = &m->vars,
        .ctx = m,
        .max_batch = m->max_batch,
        .loss_grad = dpt__mlp_model_loss_grad,
        .replicate = dpt__mlp_model_replicate,
        .release = dpt__mlp_model_release,
        .flags = DPT_MODEL_STORES_GRADS,
        .set_grad_hook = dpt__mlp_model_set_grad_hook,
    };
    return model;
}

const char *dpt_loss_kind_name(dpt_loss_kind_t loss)
{
    return (unsigned)loss < DPT_LOSS_COUNT ? dpt__loss_names[loss] : "unknown";
}
