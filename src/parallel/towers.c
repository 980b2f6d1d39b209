/*
 * The towers engine. See dpt/towers.h for the semantics.
 *
 * Every phase runs as a job on the device pool: each device works on its own
 * data and its own gradient arena; the only shared writes are the
 * parameter slices in ps mode (disjoint per device, separated from the
 * reads of the next step by the end of the job) and the chunk-locked
 * updates in async mode. Inside a ps/replicated step the devices meet at a
 * barrier after their backward passes, so a failure on one device is seen
 * by all of them and nothing is applied.
 */
#include "dpt/towers.h"
#include "dpt/arena.h"
#include "dpt/comm.h"
#include "dpt/device.h"
#include "dpt/status.h"
#include "sync.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* async: the arena is updated in chunks of this many floats, one lock each. */
#define DPT_ASYNC_CHUNK 16384

static const char *const dpt__tmode_names[DPT_TOWERS_MODE_COUNT] = {
#define DPT__TMODE_NAME(sym, name) [sym] = name,
    DPT_TOWERS_MODE_LIST(DPT__TMODE_NAME)
#undef DPT__TMODE_NAME
};

const char *dpt_towers_mode_name(dpt_towers_mode_t mode)
{
    return (unsigned)mode < DPT_TOWERS_MODE_COUNT ? dpt__tmode_names[mode] : "unknown";
}

int dpt_towers_mode_parse(const char *name, dpt_towers_mode_t *mode)
{
    for (int i = 0; i < DPT_TOWERS_MODE_COUNT; i++)
        if (strcmp(name, dpt__tmode_names[i]) == 0) {
            *mode = (dpt_towers_mode_t)i;
            return DPT_OK;
        }
    return dpt_error(DPT_EINVAL, "unknown towers mode \"%s\" (known: ps, replicated, async)",
                     name);
}

dpt_towers_config_t dpt_towers_defaults(void)
{
    dpt_towers_config_t c;
    memset(&c, 0, sizeof c);
    c.num_devices = 1;
    c.max_per_device_batch_size = 128;
    c.max_load_rows = 4096;
    c.num_stacks = 1;
    c.mode = DPT_TOWERS_PS;
    c.optim = dpt_optim_defaults(DPT_OPTIM_ADAM);
#ifndef NDEBUG
    c.check_every = 50; /* debug builds verify the replicas periodically */
#endif
    return c;
}

typedef struct dpt__stack_info {
    int loaded;
    size_t rows_per_device, per_device_batch, seqs_per_device;
} dpt__stack_info_t;

typedef struct dpt__tower {
    int index;
    void *ctx;                 /* model context (own replica, or the shared one) */
    int own_ctx;
    dpt_arena_t grads;         /* this tower's gradient */
    dpt_arena_t own_params;    /* replicated: replica; async: snapshot */
    float *params;             /* the parameters this tower reads */
    dpt_optim_t *own_opt;      /* replicated: own optimizer */
    dpt_comm_t *comm;          /* replicated */
    void **stack_data;         /* [num_stacks * ncols] column buffers */
    /* results of the current step */
    int rc;
    dpt_loss_out_t out;
    double norm;
} dpt__tower_t;

typedef enum { DPT__JOB_LOAD, DPT__JOB_STEP, DPT__JOB_GRADSET } dpt__job_kind_t;

struct dpt_towers {
    dpt_towers_config_t cfg;
    dpt_model_t model;
    dpt_batch_t layout;
    size_t nparams;
    size_t cap_rows;              /* per device per stack */
    dpt_device_pool_t *pool;
    dpt__tower_t *towers;
    dpt__stack_info_t *stacks;
    dpt_arena_t params;           /* ps/async: shared parameters */
    dpt_arena_t params_next;      /* ps with a stateless optimizer and no clipping:
                                     the next weights, kept if the step succeeds */
    dpt_optim_t *opt;             /* ps/async: shared optimizer */
    double *slice_sumsq;          /* ps: per-device partial sums of squares */
    dpt__barrier_t barrier;
    int barrier_ready;
    dpt_comm_threads_group_t *group;
    pthread_mutex_t *chunk_locks;
    size_t nchunks;
    int nchunk_locks_ready;
    atomic_uint_fast64_t async_t;
    uint64_t steps;
    int grad_sets_checked;
    /* the job being run */
    dpt__job_kind_t job;
    int job_stack;
    size_t job_offset;
    float job_lr;
    uint64_t job_t;               /* optimizer step number of this step (ps, replicated) */
    const dpt_batch_t *job_src;
    size_t job_rows_per_device, job_seqs_per_device;
    atomic_int job_failed;        /* set between barriers in ps/replicated */
};

/* ---- helpers ------------------------------------------------------------ */

static size_t dpt__col_row_bytes(const dpt_column_t *c)
{
    return c->width * dpt_dtype_size(c->dtype);
}

/* The device's view of `rows` rows from `row0` of its part of a stack. */
static void dpt__tower_view(const dpt_towers_t *t, const dpt__tower_t *w, int stack, size_t row0,
                            size_t rows, dpt_batch_t *view)
{
    *view = t->layout;
    view->rows = rows;
    size_t seq0 = t->layout.seq_len ? row0 / t->layout.seq_len : row0;
    for (size_t c = 0; c < t->layout.ncols; c++) {
        dpt_column_t *col = &view->cols[c];
        size_t first = col->per_sequence ? seq0 : row0;
        col->data = (char *)w->stack_data[(size_t)stack * t->layout.ncols + c] +
                    first * dpt__col_row_bytes(col);
    }
}

/* [lo, hi) of the parameter arena owned by device d in ps mode: blocks of
 * whole 16-float groups so slices stay aligned; the first blocks get one
 * extra group when they do not divide evenly. */
static void dpt__slice(size_t count, int n, int d, size_t *lo, size_t *hi)
{
    size_t groups = (count + DPT_VAR_ALIGN_FLOATS - 1) / DPT_VAR_ALIGN_FLOATS;
    size_t base = groups / (size_t)n, extra = groups % (size_t)n;
    size_t g0 = (size_t)d * base + ((size_t)d < extra ? (size_t)d : extra);
    size_t g1 = g0 + base + ((size_t)d < extra ? 1 : 0);
    *lo = g0 * DPT_VAR_ALIGN_FLOATS;
    *hi = g1 * DPT_VAR_ALIGN_FLOATS;
    if (*lo > count)
        *lo = count;
    if (*hi > count)
        *hi = count;
}

static void dpt__barrier(dpt_towers_t *t)
{
    dpt__barrier_wait(&t->barrier);
}

/* Forward/backward of one tower on its minibatch, with checks. */
static int dpt__tower_compute(dpt_towers_t *t, dpt__tower_t *w, const float *params)
{
    const dpt__stack_info_t *si = &t->stacks[t->job_stack];
    dpt_batch_t view;
    dpt__tower_view(t, w, t->job_stack, t->job_offset, si->per_device_batch, &view);
    if (!(t->model.flags & DPT_MODEL_STORES_GRADS))
        dpt_vec_zero(w->grads.data, t->nparams);
    memset(&w->out, 0, sizeof w->out);
    int rc = t->model.loss_grad(w->ctx, params, w->grads.data, &view, &w->out);
    if (rc)
        return rc;
    if (!isfinite(w->out.loss))
        return dpt_error(DPT_ENUMERIC, "loss is %g on rows [%zu, %zu) of stack %d; step refused",
                         w->out.loss, t->job_offset, t->job_offset + si->per_device_batch,
                         t->job_stack);
    if (w->out.rows == 0)
        w->out.rows = si->per_device_batch;
    return DPT_OK;
}

/* ---- jobs ----------------------------------------------------------------- */

static int dpt__job_load(dpt_towers_t *t, dpt__tower_t *w)
{
    const dpt_batch_t *src = t->job_src;
    size_t row0 = (size_t)w->index * t->job_rows_per_device;
    size_t seq0 = (size_t)w->index * t->job_seqs_per_device;
    for (size_t c = 0; c < t->layout.ncols; c++) {
        const dpt_column_t *want = &t->layout.cols[c];
        const dpt_column_t *have = dpt_batch_find(src, want->name);
        size_t rb = dpt__col_row_bytes(want);
        size_t first = want->per_sequence ? seq0 : row0;
        size_t n = want->per_sequence ? t->job_seqs_per_device : t->job_rows_per_device;
        memcpy(w->stack_data[(size_t)t->job_stack * t->layout.ncols + c],
               (const char *)have->data + first * rb, n * rb);
    }
    return DPT_OK;
}

/* out[i] = (y[i] + x[i]) * scale (x NULL: y[i] * scale) for i < n, returning
 * the sum of squares of the results, accumulated like dpt_vec_sumsq (eight
 * interleaved double lanes combined pairwise): one pass instead of three.
 * out may be y. */
static double dpt__add_scale_sumsq(float *out, const float *y, const float *x, size_t n,
                                   float scale)
{
    double acc[8] = {0};
    size_t i = 0;
    if (x) {
        for (; i + 8 <= n; i += 8)
            for (size_t j = 0; j < 8; j++) {
                float v = (y[i + j] + x[i + j]) * scale;
                out[i + j] = v;
                acc[j] += (double)v * (double)v;
            }
        for (size_t j = 0; i < n; i++, j++) {
            float v = (y[i] + x[i]) * scale;
            out[i] = v;
            acc[j] += (double)v * (double)v;
        }
    } else {
        for (; i + 8 <= n; i += 8)
            for (size_t j = 0; j < 8; j++) {
                float v = y[i + j] * scale;
                out[i + j] = v;
                acc[j] += (double)v * (double)v;
            }
        for (size_t j = 0; i < n; i++, j++) {
            float v = y[i] * scale;
            out[i] = v;
            acc[j] += (double)v * (double)v;
        }
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Floats per chunk of the fused reduce-and-update pass: the reduced chunk
 * is still in L1 when the optimizer reads it. */
#define DPT__FUSE_CHUNK 2048

static int dpt__job_step_ps(dpt_towers_t *t, dpt__tower_t *w)
{
    int n = t->cfg.num_devices, d = w->index;
    w->rc = dpt__tower_compute(t, w, t->params.data);
    if (w->rc)
        atomic_store(&t->job_failed, 1);
    /* One barrier suffices: the flag is reset by dpt_towers_optimize()
     * before the next job, after every device has returned from this one. */
    dpt__barrier(t);
    if (atomic_load(&t->job_failed))
        return w->rc;
    size_t lo, hi;
    dpt__slice(t->nparams, n, d, &lo, &hi);
    /* Reduce in place into tower 0's gradient: device d owns slice d of it,
     * and nothing reads the towers' gradients after this step. Fixed tower
     * order ((g0 + g1) + g2) ..., then the scale, in one pass with the sum of
     * squares: the result does not depend on thread timing. */
    float *gs = t->towers[0].grads.data;
    float scale = t->cfg.reduce_sum ? 1.0f : 1.0f / (float)n;
    for (int i = 1; i + 1 < n; i++)
        dpt_vec_axpy(gs + lo, t->towers[i].grads.data + lo, hi - lo, 1.0f);
    const float *last = n > 1 ? t->towers[n - 1].grads.data : NULL;
    if (t->params_next.data) {
        /* Stateless optimizer, no clipping: the update needs no global norm,
         * so it follows the reduction chunk by chunk, written to the next
         * weights. dpt_towers_optimize() keeps them only when the norm is
         * finite: a refused step leaves the weights untouched. */
        /* The reduced chunk goes to a buffer on the stack, not back to the
         * gradient: nothing reads it later. The optimizer has no slots, so
         * it can be given pointers offset to the chunk. */
        _Alignas(64) float g[DPT__FUSE_CHUNK];
        double sq = 0.0;
        for (size_t c = lo; c < hi; c += DPT__FUSE_CHUNK) {
            size_t len = hi - c < DPT__FUSE_CHUNK ? hi - c : DPT__FUSE_CHUNK;
            sq += dpt__add_scale_sumsq(g, gs + c, last ? last + c : NULL, len, scale);
            dpt_optim_update_into(t->opt, t->params.data + c, t->params_next.data + c, g, 0,
                                  len, t->job_t, t->job_lr);
        }
        t->slice_sumsq[d] = sq;
        return DPT_OK;
    }
    t->slice_sumsq[d] =
        dpt__add_scale_sumsq(gs + lo, gs + lo, last ? last + lo : NULL, hi - lo, scale);
    dpt__barrier(t);
    double sq = 0.0;
    for (int i = 0; i < n; i++)
        sq += t->slice_sumsq[i];
    double norm = sqrt(sq);
    w->norm = norm;
    if (!isfinite(norm))
        return d == 0 ? dpt_error(DPT_ENUMERIC, "gradient norm is %g; step refused", norm) : 0;
    float f = dpt_clip_factor(norm, t->cfg.grad_clip);
    if (f != 1.0f)
        dpt_vec_scale(gs + lo, hi - lo, f);
    dpt_optim_update(t->opt, t->params.data, gs, lo, hi, t->job_t, t->job_lr);
    return DPT_OK;
}

static int dpt__job_step_replicated(dpt_towers_t *t, dpt__tower_t *w)
{
    w->rc = dpt__tower_compute(t, w, w->params);
    if (w->rc)
        atomic_store(&t->job_failed, 1);
    dpt__barrier(t); /* one barrier: see dpt__job_step_ps() */
    if (atomic_load(&t->job_failed))
        return w->rc;
    int rc = dpt_comm_allreduce(w->comm, w->grads.data, t->nparams,
                                t->cfg.reduce_sum ? DPT_REDUCE_SUM : DPT_REDUCE_AVG);
    if (rc)
        return rc;
    /* Every replica holds the same bits now, so every replica computes the
     * same norm and applies the same update. */
    double norm = sqrt(dpt_vec_sumsq(w->grads.data, t->nparams));
    w->norm = norm;
    if (!isfinite(norm))
        return w->index == 0 ? dpt_error(DPT_ENUMERIC, "gradient norm is %g; step refused", norm)
                             : 0;
    float f = dpt_clip_factor(norm, t->cfg.grad_clip);
    if (f != 1.0f)
        dpt_vec_scale(w->grads.data, t->nparams, f);
    dpt_optim_update(w->own_opt, w->params, w->grads.data, 0, t->nparams, t->job_t, t->job_lr);
    return DPT_OK;
}

static int dpt__job_step_async(dpt_towers_t *t, dpt__tower_t *w)
{
    size_t chunk = DPT_ASYNC_CHUNK;
    /* Snapshot under the chunk locks: the forward pass then reads private
     * memory while other towers update the shared arena. */
    for (size_t c = 0; c < t->nchunks; c++) {
        size_t lo = c * chunk, hi = lo + chunk < t->nparams ? lo + chunk : t->nparams;
        pthread_mutex_lock(&t->chunk_locks[c]);
        memcpy(w->params + lo, t->params.data + lo, (hi - lo) * sizeof(float));
        pthread_mutex_unlock(&t->chunk_locks[c]);
    }
    w->rc = dpt__tower_compute(t, w, w->params);
    if (w->rc)
        return w->rc;
    double norm = sqrt(dpt_vec_sumsq(w->grads.data, t->nparams));
    w->norm = norm;
    if (!isfinite(norm))
        return (w->rc = dpt_error(DPT_ENUMERIC, "gradient norm is %g; update skipped", norm));
    float scale = t->cfg.async_scale > 0.0f ? t->cfg.async_scale
                                            : 1.0f / (float)t->cfg.num_devices;
    scale *= dpt_clip_factor(norm, t->cfg.grad_clip);
    dpt_vec_scale(w->grads.data, t->nparams, scale);
    uint64_t step = atomic_fetch_add(&t->async_t, 1) + 1;
    for (size_t c = 0; c < t->nchunks; c++) {
        size_t lo = c * chunk, hi = lo + chunk < t->nparams ? lo + chunk : t->nparams;
        pthread_mutex_lock(&t->chunk_locks[c]);
        dpt_optim_update(t->opt, t->params.data, w->grads.data, lo, hi, step, t->job_lr);
        pthread_mutex_unlock(&t->chunk_locks[c]);
    }
    return DPT_OK;
}

/* Sentinel for the gradient-set check: -0.0 turns into +0.0 (or anything
 * else) as soon as a model adds a value to it. */
#define DPT__SENTINEL_BITS 0x80000000u

static int dpt__job_gradset(dpt_towers_t *t, dpt__tower_t *w)
{
    const dpt__stack_info_t *si = &t->stacks[t->job_stack];
    dpt_batch_t view;
    dpt__tower_view(t, w, t->job_stack, 0, si->per_device_batch, &view);
    uint32_t bits = DPT__SENTINEL_BITS;
    float s;
    memcpy(&s, &bits, sizeof s);
    for (size_t i = 0; i < t->nparams; i++)
        w->grads.data[i] = s;
    dpt_loss_out_t out;
    const float *params = t->cfg.mode == DPT_TOWERS_REPLICATED ? w->params : t->params.data;
    return t->model.loss_grad(w->ctx, params, w->grads.data, &view, &out);
}

static int dpt__device_job(void *arg, int device)
{
    dpt_towers_t *t = arg;
    dpt__tower_t *w = &t->towers[device];
    switch (t->job) {
    case DPT__JOB_LOAD: return dpt__job_load(t, w);
    case DPT__JOB_GRADSET: return dpt__job_gradset(t, w);
    case DPT__JOB_STEP:
        switch (t->cfg.mode) {
        case DPT_TOWERS_PS: return dpt__job_step_ps(t, w);
        case DPT_TOWERS_REPLICATED: return dpt__job_step_replicated(t, w);
        case DPT_TOWERS_ASYNC: return dpt__job_step_async(t, w);
        default: break;
        }
        break;
    }
    return dpt_error(DPT_ESTATE, "towers: unknown job");
}

/* ---- create / destroy ------------------------------------------------------ */

void dpt_towers_destroy(dpt_towers_t *t)
{
    if (!t)
        return;
    dpt_device_pool_destroy(t->pool);
    if (t->towers) {
        for (int i = 0; i < t->cfg.num_devices; i++) {
            dpt__tower_t *w = &t->towers[i];
            if (w->own_ctx && t->model.release)
                t->model.release(w->ctx);
            dpt_arena_deinit(&w->grads);
            dpt_arena_deinit(&w->own_params);
            dpt_optim_destroy(w->own_opt);
            dpt_comm_destroy(w->comm);
            if (w->stack_data)
                for (size_t k = 0; k < (size_t)t->cfg.num_stacks * t->layout.ncols; k++)
                    dpt_free_aligned(w->stack_data[k]);
            free(w->stack_data);
        }
    }
    dpt_comm_threads_group_destroy(t->group);
    for (int i = 0; i < t->nchunk_locks_ready; i++)
        pthread_mutex_destroy(&t->chunk_locks[i]);
    free(t->chunk_locks);
    if (t->barrier_ready)
        dpt__barrier_destroy(&t->barrier);
    dpt_arena_deinit(&t->params);
    dpt_arena_deinit(&t->params_next);
    dpt_optim_destroy(t->opt);
    free(t->slice_sumsq);
    free(t->towers);
    free(t->stacks);
    free(t);
}

static int dpt__check_config(const dpt_model_t *model, const dpt_batch_t *layout,
                             const dpt_towers_config_t *c)
{
    if (!model || !model->vars || !model->loss_grad)
        return dpt_error(DPT_EINVAL, "towers: the model needs a variable table and loss_grad");
    if (model->vars->total == 0)
        return dpt_error(DPT_EINVAL, "towers: the model has no parameters");
    if (!layout || layout->ncols == 0)
        return dpt_error(DPT_EINVAL, "towers: the batch layout has no columns");
    if (c->num_devices < 1)
        return dpt_error(DPT_EINVAL, "towers: num_devices must be >= 1 (got %d)", c->num_devices);
    if (c->max_per_device_batch_size < 1)
        return dpt_error(DPT_EINVAL, "towers: max_per_device_batch_size must be >= 1");
    if (model->max_batch && c->max_per_device_batch_size > model->max_batch &&
        layout->seq_len == 0)
        return dpt_error(DPT_EINVAL,
                         "towers: max_per_device_batch_size %zu exceeds the model's max_batch %zu",
                         c->max_per_device_batch_size, model->max_batch);
    if (c->max_load_rows < (size_t)c->num_devices)
        return dpt_error(DPT_EINVAL, "towers: max_load_rows %zu is below num_devices %d",
                         c->max_load_rows, c->num_devices);
    if (c->num_stacks < 1)
        return dpt_error(DPT_EINVAL, "towers: num_stacks must be >= 1 (got %d)", c->num_stacks);
    if ((unsigned)c->mode >= DPT_TOWERS_MODE_COUNT)
        return dpt_error(DPT_EINVAL, "towers: unknown mode %d", (int)c->mode);
    if (!(c->grad_clip >= 0.0))
        return dpt_error(DPT_EINVAL, "towers: grad_clip must be >= 0 (got %g)", c->grad_clip);
    if (!(c->async_scale >= 0.0f))
        return dpt_error(DPT_EINVAL, "towers: async_scale must be >= 0");
    return DPT_OK;
}

int dpt_towers_create(dpt_towers_t **out, const dpt_model_t *model, const dpt_batch_t *layout,
                      const dpt_towers_config_t *cfg)
{
    *out = NULL;
    int rc = dpt__check_config(model, layout, cfg);
    if (rc)
        return rc;
    dpt_towers_t *t = calloc(1, sizeof *t);
    if (!t)
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate");
    t->cfg = *cfg;
    t->model = *model;
    t->layout = *layout;
    t->layout.rows = 0;
    t->nparams = model->vars->total;
    int n = cfg->num_devices;
    t->cap_rows = (cfg->max_load_rows + (size_t)n - 1) / (size_t)n;
    t->towers = calloc((size_t)n, sizeof *t->towers);
    t->stacks = calloc((size_t)cfg->num_stacks, sizeof *t->stacks);
    t->slice_sumsq = calloc((size_t)n, sizeof *t->slice_sumsq);
    if (!t->towers || !t->stacks || !t->slice_sumsq) {
        rc = dpt_error(DPT_ENOMEM, "towers: cannot allocate %d towers", n);
        goto fail;
    }
    if ((rc = dpt__barrier_init(&t->barrier, (unsigned)n, -1)) != 0)
        goto fail;
    t->barrier_ready = 1;
    int shared = cfg->mode != DPT_TOWERS_REPLICATED;
    if (shared) {
        if ((rc = dpt_arena_init(&t->params, t->nparams)) != 0 ||
            (rc = dpt_optim_create(&t->opt, &cfg->optim, t->nparams)) != 0)
            goto fail;
    }
    if (cfg->mode == DPT_TOWERS_PS && dpt_optim_num_slots(t->opt) == 0 && cfg->grad_clip == 0.0 &&
        (rc = dpt_arena_init(&t->params_next, t->nparams)) != 0)
        goto fail;
    if (cfg->mode == DPT_TOWERS_ASYNC) {
        t->nchunks = (t->nparams + DPT_ASYNC_CHUNK - 1) / DPT_ASYNC_CHUNK;
        t->chunk_locks = calloc(t->nchunks, sizeof *t->chunk_locks);
        if (!t->chunk_locks) {
            rc = dpt_error(DPT_ENOMEM, "towers: cannot allocate %zu chunk locks", t->nchunks);
            goto fail;
        }
        for (size_t i = 0; i < t->nchunks; i++, t->nchunk_locks_ready++)
            if (pthread_mutex_init(&t->chunk_locks[i], NULL) != 0) {
                rc = dpt_error(DPT_ETHREAD, "towers: cannot create chunk lock %zu", i);
                goto fail;
            }
    }
    if (cfg->mode == DPT_TOWERS_REPLICATED) {
        dpt_comm_threads_options_t co;
        dpt_comm_threads_options_init(&co);
        if (cfg->comm_timeout_s > 0.0)
            co.timeout_s = cfg->comm_timeout_s;
        if ((rc = dpt_comm_threads_group_create(&t->group, n, &co)) != 0)
            goto fail;
    }
    size_t ncols = layout->ncols;
    for (int i = 0; i < n; i++) {
        dpt__tower_t *w = &t->towers[i];
        w->index = i;
        w->ctx = model->ctx;
        if (i > 0 && model->replicate) {
            if ((rc = model->replicate(model->ctx, &w->ctx)) != 0)
                goto fail;
            w->own_ctx = 1;
        }
        if ((rc = dpt_arena_init(&w->grads, t->nparams)) != 0)
            goto fail;
        if (!shared || cfg->mode == DPT_TOWERS_ASYNC) {
            if ((rc = dpt_arena_init(&w->own_params, t->nparams)) != 0)
                goto fail;
        }
        w->params = cfg->mode == DPT_TOWERS_PS ? t->params.data : w->own_params.data;
        if (!shared) {
            if ((rc = dpt_optim_create(&w->own_opt, &cfg->optim, t->nparams)) != 0)
                goto fail;
            if ((rc = dpt_comm_threads_join(t->group, i, &w->comm)) != 0)
                goto fail;
        }
        w->stack_data = calloc((size_t)cfg->num_stacks * ncols, sizeof *w->stack_data);
        if (!w->stack_data) {
            rc = dpt_error(DPT_ENOMEM, "towers: cannot allocate stack buffers");
            goto fail;
        }
        for (int s = 0; s < cfg->num_stacks; s++)
            for (size_t c = 0; c < ncols; c++) {
                size_t bytes;
                if (dpt_mul_size(t->cap_rows, dpt__col_row_bytes(&layout->cols[c]), &bytes) ||
                    !(w->stack_data[(size_t)s * ncols + c] = dpt_alloc_aligned(bytes))) {
                    rc = dpt_error(DPT_ENOMEM,
                                   "towers: cannot allocate column \"%s\" for %zu rows on device %d",
                                   layout->cols[c].name, t->cap_rows, i);
                    goto fail;
                }
            }
    }
    if ((rc = dpt_device_pool_create(&t->pool, n, cfg->pin_devices)) != 0)
        goto fail;
    *out = t;
    return DPT_OK;
fail:
    {
        /* Keep the message of the failure, not of the clean-up. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dpt_last_error());
        dpt_towers_destroy(t);
        return dpt_error(rc, "%s", msg);
    }
}

/* ---- load ---------------------------------------------------------------- */

int dpt_towers_load(dpt_towers_t *t, int stack, const dpt_batch_t *b,
                    dpt_towers_load_info_t *info)
{
    dpt_towers_load_info_t li;
    memset(&li, 0, sizeof li);
    size_t n = (size_t)t->cfg.num_devices;
    if (stack < 0 || stack >= t->cfg.num_stacks)
        return dpt_error(DPT_EINVAL, "towers: stack %d out of range [0, %d)", stack,
                         t->cfg.num_stacks);
    int rc = dpt_batch_check_layout(b, &t->layout);
    if (rc)
        return dpt_error(rc, "towers load: %s", dpt_last_error());
    if (b->seq_len != t->layout.seq_len)
        return dpt_error(DPT_EINVAL, "towers load: sequence length %zu, the layout has %zu",
                         b->seq_len, t->layout.seq_len);
    if (b->rows == 0)
        return dpt_error(DPT_EINVAL, "towers load: the batch has 0 rows");
    if (b->rows > t->cfg.max_load_rows)
        return dpt_error(DPT_EINVAL, "towers load: %zu rows exceed max_load_rows %zu", b->rows,
                         t->cfg.max_load_rows);
    size_t m = t->cfg.max_per_device_batch_size;
    size_t keep_rows, seqs_per_device = 0, pdb;
    if (b->seq_len == 0) {
        if (b->rows < n)
            return dpt_error(DPT_EINVAL, "towers load: %zu rows for %zu devices; every device "
                             "needs at least one row", b->rows, n);
        size_t mb = m * n;
        if (b->rows < mb)
            mb = b->rows - b->rows % n; /* shrink to what the data allows */
        keep_rows = b->rows - b->rows % mb;
        pdb = mb / n;
        li.minibatch = mb;
    } else {
        size_t L = b->seq_len;
        if (b->rows % L)
            return dpt_error(DPT_EINVAL, "towers load: %zu rows are not whole sequences of %zu",
                             b->rows, L);
        size_t nseq = b->rows / L;
        size_t spm = m / L * n;
        if (spm < 1 || m < L) {
            spm = n;
            snprintf(li.warning, sizeof li.warning,
                     "minibatch of %zu rows per device is shorter than a sequence (%zu rows); "
                     "raised to %zu rows (one sequence per device)", m, L, L * n);
        }
        if (nseq < n)
            return dpt_error(DPT_EINVAL,
                             "towers load: %zu sequences for %zu devices; every device needs at "
                             "least one whole sequence: raise the minibatch size or shorten the "
                             "sequences", nseq, n);
        if (nseq < spm)
            spm = nseq - nseq % n;
        size_t keep_seqs = nseq - nseq % spm;
        keep_rows = keep_seqs * L;
        seqs_per_device = keep_seqs / n;
        pdb = spm / n * L;
        li.minibatch = spm * L;
    }
    li.rows_loaded = keep_rows;
    li.rows_dropped = b->rows - keep_rows;
    li.rows_per_device = keep_rows / n;
    li.per_device_batch = pdb;
    li.steps = li.rows_per_device / pdb;
    t->job = DPT__JOB_LOAD;
    t->job_stack = stack;
    t->job_src = b;
    t->job_rows_per_device = li.rows_per_device;
    t->job_seqs_per_device = b->seq_len ? seqs_per_device : li.rows_per_device;
    t->stacks[stack].loaded = 0;
    if ((rc = dpt_device_pool_run(t->pool, dpt__device_job, t)) != 0)
        return rc;
    t->stacks[stack].loaded = 1;
    t->stacks[stack].rows_per_device = li.rows_per_device;
    t->stacks[stack].per_device_batch = pdb;
    t->stacks[stack].seqs_per_device = t->job_seqs_per_device;
    if (info)
        *info = li;
    return DPT_OK;
}

/* ---- steps ------------------------------------------------------------------ */

static int dpt__check_stack(const dpt_towers_t *t, int stack)
{
    if (stack < 0 || stack >= t->cfg.num_stacks)
        return dpt_error(DPT_EINVAL, "towers: stack %d out of range [0, %d)", stack,
                         t->cfg.num_stacks);
    if (!t->stacks[stack].loaded)
        return dpt_error(DPT_ESTATE, "towers: stack %d has no data loaded", stack);
    return DPT_OK;
}

static int dpt__var_touched(const float *g, const dpt_var_t *v)
{
    const uint32_t *bits = (const uint32_t *)(const void *)(g + v->offset);
    for (size_t i = 0; i < v->count; i++)
        if (bits[i] != DPT__SENTINEL_BITS)
            return 1;
    return 0;
}

int dpt_towers_check_grad_sets(dpt_towers_t *t, int stack)
{
    int rc = dpt__check_stack(t, stack);
    if (rc)
        return rc;
    t->job = DPT__JOB_GRADSET;
    t->job_stack = stack;
    if ((rc = dpt_device_pool_run(t->pool, dpt__device_job, t)) != 0)
        return rc;
    const dpt_vartable_t *vars = t->model.vars;
    int n = t->cfg.num_devices;
    for (int d = 1; d < n; d++) {
        char only0[256] = "", onlyd[256] = "";
        int mismatch = 0;
        for (size_t v = 0; v < vars->nvars; v++) {
            int a = dpt__var_touched(t->towers[0].grads.data, &vars->vars[v]);
            int b = dpt__var_touched(t->towers[d].grads.data, &vars->vars[v]);
            if (a == b)
                continue;
            mismatch = 1;
            char *dst = a ? only0 : onlyd;
            size_t len = strlen(dst);
            snprintf(dst + len, 256 - len, "%s%s", len ? ", " : "", vars->vars[v].name);
        }
        for (int i = 0; i < n; i++)
            dpt_vec_zero(t->towers[i].grads.data, t->nparams);
        if (mismatch)
            return dpt_error(DPT_EINVAL,
                             "towers: devices computed gradients for different variables: only "
                             "device 0 has [%s]; only device %d has [%s]",
                             only0, d, onlyd);
    }
    for (int i = 0; i < n; i++)
        dpt_vec_zero(t->towers[i].grads.data, t->nparams);
    return DPT_OK;
}

int dpt_towers_optimize(dpt_towers_t *t, int stack, size_t offset, float lr,
                        dpt_towers_stats_t *stats)
{
    int rc = dpt__check_stack(t, stack);
    if (rc)
        return rc;
    const dpt__stack_info_t *si = &t->stacks[stack];
    if (offset % si->per_device_batch || offset >= si->rows_per_device)
        return dpt_error(DPT_EINVAL,
                         "towers: offset %zu is not a multiple of %zu below %zu rows per device",
                         offset, si->per_device_batch, si->rows_per_device);
    if (!isfinite(lr))
        return dpt_error(DPT_EINVAL, "towers: learning rate is %g", (double)lr);
    if (!t->grad_sets_checked) {
        if ((rc = dpt_towers_check_grad_sets(t, stack)) != 0)
            return rc;
        t->grad_sets_checked = 1;
    }
    t->job = DPT__JOB_STEP;
    t->job_stack = stack;
    t->job_offset = offset;
    t->job_lr = lr;
    /* The optimizer's own counter (restored from checkpoints) numbers the
     * step, not the engine's: Adam's bias correction continues on resume. */
    t->job_t = dpt_optim_get_t(dpt_towers_optimizer(t)) + 1;
    atomic_store(&t->job_failed, 0);
    rc = dpt_device_pool_run(t->pool, dpt__device_job, t);
    if (rc && t->cfg.mode != DPT_TOWERS_ASYNC)
        return rc;
    if (t->params_next.data) {
        /* ps, fused update: the devices wrote the next weights aside. */
        double sq = 0.0;
        for (int i = 0; i < t->cfg.num_devices; i++)
            sq += t->slice_sumsq[i];
        t->towers[0].norm = sqrt(sq);
        if (!isfinite(t->towers[0].norm))
            return dpt_error(DPT_ENUMERIC, "gradient norm is %g; step refused",
                             t->towers[0].norm);
        dpt_arena_t next = t->params_next;
        t->params_next = t->params;
        t->params = next;
    }
    /* async: towers that succeeded have applied their updates; the step
     * counts, and the first failure is still reported below. */
    t->steps++;
    if (t->cfg.mode == DPT_TOWERS_PS)
        dpt_optim_set_t(t->opt, t->job_t);
    else if (t->cfg.mode == DPT_TOWERS_ASYNC)
        dpt_optim_set_t(t->opt, (uint64_t)atomic_load(&t->async_t));
    else
        for (int i = 0; i < t->cfg.num_devices; i++)
            dpt_optim_set_t(t->towers[i].own_opt, t->job_t);
    if (stats) {
        double loss = 0.0, correct = 0.0, norm = 0.0, extra[DPT_LOSS_EXTRA] = {0};
        size_t rows = 0;
        int ok = 0;
        for (int i = 0; i < t->cfg.num_devices; i++) {
            const dpt__tower_t *w = &t->towers[i];
            if (w->rc)
                continue;
            loss += w->out.loss * (double)w->out.rows;
            for (int e = 0; e < DPT_LOSS_EXTRA; e++)
                extra[e] += w->out.extra[e] * (double)w->out.rows;
            correct += w->out.correct;
            rows += w->out.rows;
            norm += w->norm;
            ok++;
        }
        stats->loss = rows ? loss / (double)rows : 0.0;
        for (int e = 0; e < DPT_LOSS_EXTRA; e++)
            stats->extra[e] = rows ? extra[e] / (double)rows : 0.0;
        stats->correct = correct;
        stats->rows = rows;
        stats->grad_norm = t->cfg.mode == DPT_TOWERS_ASYNC ? (ok ? norm / ok : 0.0)
                                                           : t->towers[0].norm;
    }
    if (rc)
        return rc;
    if (t->cfg.mode == DPT_TOWERS_REPLICATED && t->cfg.check_every > 0 &&
        t->steps % (uint64_t)t->cfg.check_every == 0)
        return dpt_towers_check_replicas(t);
    return DPT_OK;
}

/* ---- weights and state ------------------------------------------------------ */

int dpt_towers_get_weights(dpt_towers_t *t, float *out, size_t count)
{
    if (count != t->nparams)
        return dpt_error(DPT_EINVAL, "towers: %zu weights requested, the model has %zu", count,
                         t->nparams);
    const float *src = t->cfg.mode == DPT_TOWERS_REPLICATED ? t->towers[0].params : t->params.data;
    memcpy(out, src, count * sizeof(float));
    return DPT_OK;
}

int dpt_towers_set_weights(dpt_towers_t *t, const float *in, size_t count)
{
    if (count != t->nparams)
        return dpt_error(DPT_EINVAL, "towers: %zu weights given, the model has %zu", count,
                         t->nparams);
    if (!dpt_vec_all_finite(in, count)) {
        size_t i = dpt_vec_first_nonfinite(in, count);
        return dpt_error(DPT_ENUMERIC, "towers: weight %zu is %g", i, (double)in[i]);
    }
    if (t->cfg.mode == DPT_TOWERS_REPLICATED)
        for (int i = 0; i < t->cfg.num_devices; i++)
            memcpy(t->towers[i].params, in, count * sizeof(float));
    else
        memcpy(t->params.data, in, count * sizeof(float));
    return DPT_OK;
}

int dpt_towers_check_replicas(dpt_towers_t *t)
{
    if (t->cfg.mode != DPT_TOWERS_REPLICATED)
        return DPT_OK;
    const dpt__tower_t *w0 = &t->towers[0];
    uint64_t p0 = dpt_vec_checksum(w0->params, t->nparams);
    int nslots = dpt_optim_num_slots(w0->own_opt);
    for (int i = 1; i < t->cfg.num_devices; i++) {
        const dpt__tower_t *w = &t->towers[i];
        if (dpt_vec_checksum(w->params, t->nparams) != p0)
            return dpt_error(DPT_ESTATE, "towers: replica %d's parameters differ from replica 0's "
                             "after %llu steps", i, (unsigned long long)t->steps);
        for (int s = 0; s < nslots; s++)
            if (dpt_vec_checksum(dpt_optim_slot(w->own_opt, s), t->nparams) !=
                dpt_vec_checksum(dpt_optim_slot(w0->own_opt, s), t->nparams))
                return dpt_error(DPT_ESTATE, "towers: replica %d's optimizer slot %d differs from "
                                 "replica 0's", i, s);
    }
    return DPT_OK;
}

dpt_optim_t *dpt_towers_optimizer(dpt_towers_t *t)
{
    return t->cfg.mode == DPT_TOWERS_REPLICATED ? t->towers[0].own_opt : t->opt;
}

int dpt_towers_set_optimizer_state(dpt_towers_t *t, dpt_optim_t *src)
{
    if (t->cfg.mode == DPT_TOWERS_ASYNC)
        atomic_store(&t->async_t, dpt_optim_get_t(src));
    if (dpt_optim_count(src) != t->nparams ||
        dpt_optim_config(src)->kind != t->cfg.optim.kind)
        return dpt_error(DPT_EINVAL, "towers: optimizer state of another kind or size");
    int reps = t->cfg.mode == DPT_TOWERS_REPLICATED ? t->cfg.num_devices : 1;
    for (int i = 0; i < reps; i++) {
        dpt_optim_t *dst = t->cfg.mode == DPT_TOWERS_REPLICATED ? t->towers[i].own_opt : t->opt;
        if (dst == src)
            continue;
        for (int s = 0; s < dpt_optim_num_slots(src); s++)
            memcpy(dpt_optim_slot(dst, s), dpt_optim_slot(src, s), t->nparams * sizeof(float));
        dpt_optim_set_t(dst, dpt_optim_get_t(src));
    }
    return DPT_OK;
}

const dpt_towers_config_t *dpt_towers_get_config(const dpt_towers_t *t)
{
    return &t->cfg;
}

uint64_t dpt_towers_steps(const dpt_towers_t *t)
{
    return t->steps;
}
