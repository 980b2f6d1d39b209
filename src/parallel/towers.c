/*
 * The towers engine: configuration, create/destroy, load, the step driver,
 * weights and state. See dpt/towers.h for the semantics; the devices' work
 * in each phase is in towers_jobs.c.
 */
#include "dpt/towers.h"
#include "dpt/arena.h"
#include "dpt/comm.h"
#include "dpt/device.h"
#include "dpt/status.h"
#include "core/prof.h"
#include "towers_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return dpt_error(DPT_EINVAL, "unknown towers mode \"%s\" (known: ps, replicated, async)", name);
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

/* ---- create / destroy ------------------------------------------------------ */

size_t dpt__towers_mirror_max = DPT_TOWERS_MIRROR_MAX;

void dpt_towers_destroy(dpt_towers_t *t)
{
    if (!t)
        return;
    dpt__buckets_destroy(t);
    dpt_device_pool_destroy(t->pool);
    dpt__inv_destroy(t);
    if (t->towers) {
        for (int i = 0; i < t->cfg.num_devices; i++) {
            dpt__tower_t *w = &t->towers[i];
            if (w->own_ctx && t->model.release)
                t->model.release(w->ctx);
            dpt_arena_deinit(&w->grads);
            dpt_arena_deinit(&w->own_params);
            dpt_arena_deinit(&w->sum);
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
    if (model->max_batch && c->max_per_device_batch_size > model->max_batch && layout->seq_len == 0)
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
    if (c->weight_rows && !c->comm)
        return dpt_error(DPT_EINVAL, "towers: weight_rows needs an external communicator (comm): "
                                     "the devices of one engine always hold equal rows");
    if (c->comm) {
        if (c->mode == DPT_TOWERS_ASYNC)
            return dpt_error(DPT_EINVAL,
                             "towers: mode async does not run over an external communicator "
                             "(its towers apply their updates without waiting for each other, so "
                             "the participants' weights would drift apart): use ps or replicated");
        if (c->weight_rows && c->reduce_sum)
            return dpt_error(DPT_EINVAL, "towers: weight_rows and reduce_sum exclude each other "
                                         "(weight_rows divides by the total rows)");
    }
    if (c->chunk_rows)
        return dpt__inv_check(c, layout);
    return DPT_OK;
}

/* An optimizer of the engine, marked with the variables without a
 * gradient (the caller's cfg.no_grad, read at create only). */
static int dpt__towers_new_optim(dpt_towers_t *t, dpt_optim_t **opt)
{
    int rc = dpt_optim_create(opt, &t->cfg.optim, t->nparams);
    if (!rc && t->cfg.no_grad)
        rc = dpt_optim_set_no_grad(*opt, t->model.vars, t->cfg.no_grad);
    if (!rc && t->cfg.running)
        rc = dpt_optim_set_running(*opt, t->model.vars, t->cfg.running);
    return rc;
}

/* Device i's own buffers: its gradient, its parameters and optimizer where
 * the mode gives it a copy, its communicator (replicated), and the columns of
 * every stack. Freed by dpt_towers_destroy. */
static int dpt__tower_init(dpt_towers_t *t, int i, int shared)
{
    const dpt_towers_config_t *cfg = &t->cfg;
    const dpt_model_t *model = &t->model;
    const dpt_batch_t *layout = &t->layout;
    size_t ncols = layout->ncols;
    int rc;
    dpt__tower_t *w = &t->towers[i];
    w->index = i;
    w->ctx = model->ctx;
    if (i > 0 && model->replicate) {
        if ((rc = model->replicate(model->ctx, &w->ctx)) != 0)
            return rc;
        w->own_ctx = 1;
    }
    /* With an external communicator the gradient travels with one more
     * float (rows, or the failure mark): see dpt__job_step_comm(). */
    if ((rc = dpt_arena_init(&w->grads, t->nparams + (cfg->comm ? 1 : 0))) != 0)
        return rc;
    if (!shared || cfg->mode == DPT_TOWERS_ASYNC || (t->mirrored && i > 0)) {
        if ((rc = dpt_arena_init(&w->own_params, t->nparams)) != 0)
            return rc;
    }
    if (t->mirrored) {
        if ((rc = dpt_arena_init(&w->sum, t->nparams)) != 0 ||
            (i > 0 && (rc = dpt__towers_new_optim(t, &w->own_opt)) != 0))
            return rc;
    }
    /* ps towers read t->params, whose arena changes place when the fused
     * update swaps it with t->params_next: no pointer is kept here. */
    w->params = cfg->mode == DPT_TOWERS_PS && !(t->mirrored && i > 0) ? NULL : w->own_params.data;
    if (!shared) {
        if ((rc = dpt__towers_new_optim(t, &w->own_opt)) != 0)
            return rc;
        if (!cfg->comm && (rc = dpt_comm_threads_join(t->group, i, &w->comm)) != 0)
            return rc;
    }
    w->stack_data = calloc((size_t)cfg->num_stacks * ncols, sizeof *w->stack_data);
    if (!w->stack_data)
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate stack buffers");
    /* A device holds at most cap_rows rows, so at most cap_rows / seq_len
     * whole sequences: per-sequence columns (an RNN's state, wide) are
     * sized by that. */
    size_t cap_seqs = layout->seq_len ? t->cap_rows / layout->seq_len : t->cap_rows;
    if (cap_seqs == 0)
        cap_seqs = 1;
    for (int s = 0; s < cfg->num_stacks; s++)
        for (size_t c = 0; c < ncols; c++) {
            size_t bytes, cap = layout->cols[c].per_sequence ? cap_seqs : t->cap_rows;
            if (dpt_mul_size(cap, dpt__col_row_bytes(&layout->cols[c]), &bytes) ||
                !(w->stack_data[(size_t)s * ncols + c] = dpt_alloc_aligned(bytes)))
                return dpt_error(DPT_ENOMEM,
                                 "towers: cannot allocate column \"%s\" for %zu rows on device %d",
                                 layout->cols[c].name, t->cap_rows, i);
        }
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
    if (cfg->chunk_rows) {
        if ((rc = dpt__inv_create(t)) != 0)
            goto fail;
        t->cap_rows = dpt__inv_cap_rows(t);
    }
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
            (rc = dpt__towers_new_optim(t, &t->opt)) != 0)
            goto fail;
    }
    /* The fused update needs no global norm, so it runs before the devices
     * agree on anything: not with an external communicator, whose step
     * all-reduces first. */
    t->mirrored =
        cfg->mode == DPT_TOWERS_PS && !cfg->comm && n > 1 && t->nparams <= dpt__towers_mirror_max;
    if (cfg->mode == DPT_TOWERS_PS && !cfg->comm && !t->mirrored && !t->inv &&
        dpt_optim_num_slots(t->opt) == 0 && cfg->grad_clip == 0.0 &&
        dpt_optim_no_grad_count(t->opt) == 0 && dpt_optim_running_count(t->opt) == 0 &&
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
    if (cfg->mode == DPT_TOWERS_REPLICATED && !cfg->comm) {
        dpt_comm_threads_options_t co;
        dpt_comm_threads_options_init(&co);
        if (cfg->comm_timeout_s > 0.0)
            co.timeout_s = cfg->comm_timeout_s;
        co.algorithm = cfg->comm_algorithm;
        if ((rc = dpt_comm_threads_group_create(&t->group, n, &co)) != 0)
            goto fail;
    }
    for (int i = 0; i < n; i++)
        if ((rc = dpt__tower_init(t, i, shared)) != 0)
            goto fail;
    if ((rc = dpt_device_pool_create(&t->pool, n, cfg->pin_devices)) != 0 ||
        (rc = dpt__buckets_create(t)) != 0)
        goto fail;
    t->cfg.no_grad = t->cfg.running = NULL; /* the optimizers hold the marks */
    *out = t;
    return DPT_OK;
fail : {
    /* Keep the message of the failure, not of the clean-up. */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", dpt_last_error());
    dpt_towers_destroy(t);
    return dpt_error(rc, "%s", msg);
}
}

/* ---- load ---------------------------------------------------------------- */

int dpt_towers_load(dpt_towers_t *t, int stack, const dpt_batch_t *b, dpt_towers_load_info_t *info)
{
    return dpt_towers_load_ex(t, stack, b, 0, info);
}

/* The load rules (dpt/towers.h): what a load of b would keep, without
 * copying anything. *seqs_per_device: sequences (or rows) per device. */
static int dpt__towers_plan(const dpt_towers_t *t, const dpt_batch_t *b, size_t fixed_pdb,
                            dpt_towers_load_info_t *info, size_t *seqs_per_device_out)
{
    dpt_towers_load_info_t li;
    memset(&li, 0, sizeof li);
    size_t n = (size_t)t->cfg.num_devices;
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
    if (t->inv) {
        if ((rc = dpt__inv_plan(t, b, fixed_pdb, &li)) != 0)
            return rc;
        *info = li;
        *seqs_per_device_out = 0; /* (the copy works by minibatch) */
        return DPT_OK;
    }
    size_t m = t->cfg.max_per_device_batch_size;
    if (fixed_pdb > m)
        return dpt_error(DPT_EINVAL,
                         "towers load: per_device_batch %zu exceeds "
                         "max_per_device_batch_size %zu",
                         fixed_pdb, m);
    size_t keep_rows, seqs_per_device = 0, pdb;
    if (b->seq_len == 0) {
        if (b->rows < n)
            return dpt_error(DPT_EINVAL,
                             "towers load: %zu rows for %zu devices; every device "
                             "needs at least one row",
                             b->rows, n);
        size_t mb = m * n;
        if (fixed_pdb) {
            mb = fixed_pdb * n;
            if (b->rows < mb)
                return dpt_error(DPT_EINVAL,
                                 "towers load: %zu rows are fewer than one "
                                 "minibatch of %zu (per_device_batch %zu x %zu devices)",
                                 b->rows, mb, fixed_pdb, n);
        } else if (b->rows < mb) {
            mb = b->rows - b->rows % n; /* shrink to what the data allows */
        }
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
        if (fixed_pdb) {
            if (fixed_pdb % L)
                return dpt_error(DPT_EINVAL,
                                 "towers load: per_device_batch %zu is not a whole "
                                 "number of sequences of %zu rows",
                                 fixed_pdb, L);
            spm = fixed_pdb / L * n;
            if (nseq < spm)
                return dpt_error(DPT_EINVAL,
                                 "towers load: %zu sequences are fewer than one "
                                 "minibatch of %zu (per_device_batch %zu rows x %zu devices)",
                                 nseq, spm, fixed_pdb, n);
        } else if (spm < 1 || m < L) {
            spm = n;
            snprintf(li.warning, sizeof li.warning,
                     "minibatch of %zu rows per device is shorter than a sequence (%zu rows); "
                     "raised to %zu rows (one sequence per device)",
                     m, L, L * n);
        }
        if (nseq < n)
            return dpt_error(DPT_EINVAL,
                             "towers load: %zu sequences for %zu devices; every device needs at "
                             "least one whole sequence: raise the minibatch size or shorten the "
                             "sequences",
                             nseq, n);
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
    *info = li;
    *seqs_per_device_out = b->seq_len ? seqs_per_device : li.rows_per_device;
    return DPT_OK;
}

/* A load's checks and plan (dpt__towers_plan) for stack `stack`. */
static int dpt__load_plan(const dpt_towers_t *t, int stack, const dpt_batch_t *b, size_t pdb,
                          dpt_towers_load_info_t *li, size_t *seqs_per_device)
{
    if (stack < 0 || stack >= t->cfg.num_stacks)
        return dpt_error(DPT_EINVAL, "towers: stack %d out of range [0, %d)", stack,
                         t->cfg.num_stacks);
    return dpt__towers_plan(t, b, pdb, li, seqs_per_device);
}

/* Stack `stack` holds the load planned in li. */
static void dpt__load_done(dpt_towers_t *t, int stack, const dpt_towers_load_info_t *li,
                           size_t seqs_per_device, dpt_towers_load_info_t *info)
{
    dpt__stack_info_t *si = &t->stacks[stack];
    si->loaded = 1;
    si->rows_per_device = li->rows_per_device;
    si->per_device_batch = li->per_device_batch;
    si->seqs_per_device = seqs_per_device;
    if (info)
        *info = *li;
}

int dpt_towers_load_direct(dpt_towers_t *t, int stack, const dpt_batch_t *b,
                           size_t per_device_batch, dpt_towers_load_info_t *info)
{
    dpt_towers_load_info_t li;
    size_t seqs_per_device;
    int rc = dpt__load_plan(t, stack, b, per_device_batch, &li, &seqs_per_device);
    if (rc)
        return rc;
    /* Only stack `stack`'s buffers and bookkeeping change, and the job
     * fields of the device pool are left alone: a step on another stack may
     * run meanwhile (the rule in dpt/towers.h). */
    t->stacks[stack].loaded = 0;
    for (int d = 0; d < t->cfg.num_devices; d++)
        dpt__towers_copy_slice(t, &t->towers[d], stack, b, li.rows_per_device, seqs_per_device);
    dpt__load_done(t, stack, &li, seqs_per_device, info);
    return DPT_OK;
}

int dpt_towers_plan(const dpt_towers_t *t, const dpt_batch_t *b, size_t per_device_batch,
                    dpt_towers_load_info_t *info)
{
    size_t spd;
    return dpt__towers_plan(t, b, per_device_batch, info, &spd);
}

int dpt_towers_load_ex(dpt_towers_t *t, int stack, const dpt_batch_t *b, size_t fixed_pdb,
                       dpt_towers_load_info_t *info)
{
    dpt_towers_load_info_t li;
    size_t seqs_per_device;
    int rc = dpt__load_plan(t, stack, b, fixed_pdb, &li, &seqs_per_device);
    if (rc)
        return rc;
    t->job = DPT__JOB_LOAD;
    t->job_stack = stack;
    t->job_src = b;
    t->job_rows_per_device = li.rows_per_device;
    t->job_seqs_per_device = seqs_per_device;
    t->stacks[stack].loaded = 0;
    if ((rc = dpt_device_pool_run(t->pool, dpt__towers_job, t)) != 0)
        return rc;
    dpt__load_done(t, stack, &li, seqs_per_device, info);
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
    if ((rc = dpt_device_pool_run(t->pool, dpt__towers_job, t)) != 0)
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

int dpt_towers_run(dpt_towers_t *t, dpt_device_fn fn, void *arg)
{
    return dpt_device_pool_run(t->pool, fn, arg);
}

int dpt_towers_optimize(dpt_towers_t *t, int stack, size_t offset, float lr,
                        dpt_towers_stats_t *stats)
{
    dpt__prof_lap(DPT_PROF_LEARN_OTHER);
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
    rc = dpt_device_pool_run(t->pool, dpt__towers_job, t);
    if (rc && t->cfg.mode != DPT_TOWERS_ASYNC)
        return rc;
    if (t->params_next.data) {
        /* ps, fused update: the devices wrote the next weights aside. */
        double sq = 0.0;
        for (int i = 0; i < t->cfg.num_devices; i++)
            sq += t->slice_sumsq[i];
        t->towers[0].norm = sqrt(sq);
        if (!isfinite(t->towers[0].norm))
            return dpt_error(DPT_ENUMERIC, "gradient norm is %g; step refused", t->towers[0].norm);
        dpt_arena_t next = t->params_next;
        t->params_next = t->params;
        t->params = next;
    }
    /* async: towers that succeeded have applied their updates; the step
     * counts, and the first failure is still reported below. */
    t->steps++;
    if (t->cfg.mode == DPT_TOWERS_PS) {
        dpt_optim_set_t(t->opt, t->job_t);
        for (int i = 1; t->mirrored && i < t->cfg.num_devices; i++)
            dpt_optim_set_t(t->towers[i].own_opt, t->job_t);
    } else if (t->cfg.mode == DPT_TOWERS_ASYNC)
        dpt_optim_set_t(t->opt, (uint64_t)atomic_load(&t->async_t));
    else
        for (int i = 0; i < t->cfg.num_devices; i++)
            dpt_optim_set_t(t->towers[i].own_opt, t->job_t);
    if (stats && t->inv) {
        dpt__inv_stats(t, stats);
    } else if (stats) {
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
        stats->grad_norm =
            t->cfg.mode == DPT_TOWERS_ASYNC ? (ok ? norm / ok : 0.0) : t->towers[0].norm;
    }
    dpt__prof_lap(DPT_PROF_DISPATCH);
    if (rc)
        return rc;
    /* With an external communicator every participant is a replica, in
     * either mode, and all of them reach this step count together. */
    if ((t->cfg.mode == DPT_TOWERS_REPLICATED || t->cfg.comm) && t->cfg.check_every > 0 &&
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
    for (int i = 1; t->mirrored && i < t->cfg.num_devices; i++)
        memcpy(t->towers[i].params, in, count * sizeof(float));
    return DPT_OK;
}

/* The external communicator's participants: parameters, then each
 * optimizer slot, compared by fingerprint (one collective each, the same
 * sequence on every participant). */
static int dpt__check_participants(dpt_towers_t *t)
{
    const float *p = t->cfg.mode == DPT_TOWERS_REPLICATED ? t->towers[0].params : t->params.data;
    dpt_optim_t *opt = dpt_towers_optimizer(t);
    int rc = dpt_comm_check_equal(t->cfg.comm, p, t->nparams);
    if (rc == DPT_ECOMM)
        return dpt_error(rc, "towers: participants' parameters differ after %llu steps: %s",
                         (unsigned long long)t->steps, dpt_last_error());
    for (int s = 0; !rc && s < dpt_optim_num_slots(opt); s++) {
        rc = dpt_comm_check_equal(t->cfg.comm, dpt_optim_slot(opt, s), t->nparams);
        if (rc == DPT_ECOMM)
            return dpt_error(rc,
                             "towers: participants' optimizer slot %d differs after %llu "
                             "steps: %s",
                             s, (unsigned long long)t->steps, dpt_last_error());
    }
    return rc;
}

/* Replicated: this engine's replicas against tower 0's. */
static int dpt__check_local_replicas(dpt_towers_t *t)
{
    if (t->cfg.mode != DPT_TOWERS_REPLICATED)
        return DPT_OK;
    const dpt__tower_t *w0 = &t->towers[0];
    uint64_t p0 = dpt_vec_checksum(w0->params, t->nparams);
    int nslots = dpt_optim_num_slots(w0->own_opt);
    for (int i = 1; i < t->cfg.num_devices; i++) {
        const dpt__tower_t *w = &t->towers[i];
        if (dpt_vec_checksum(w->params, t->nparams) != p0)
            return dpt_error(DPT_ESTATE,
                             "towers: replica %d's parameters differ from replica 0's "
                             "after %llu steps",
                             i, (unsigned long long)t->steps);
        for (int s = 0; s < nslots; s++)
            if (dpt_vec_checksum(dpt_optim_slot(w->own_opt, s), t->nparams) !=
                dpt_vec_checksum(dpt_optim_slot(w0->own_opt, s), t->nparams))
                return dpt_error(DPT_ESTATE,
                                 "towers: replica %d's optimizer slot %d differs from "
                                 "replica 0's",
                                 i, s);
    }
    return DPT_OK;
}

int dpt_towers_check_replicas(dpt_towers_t *t)
{
    int local = dpt__check_local_replicas(t);
    if (!t->cfg.comm)
        return local;
    /* The participants' check is collective: it runs whatever the local one
     * found, so every participant makes the same calls. */
    char msg[512] = "";
    if (local)
        snprintf(msg, sizeof msg, "%s", dpt_last_error());
    int rc = dpt__check_participants(t);
    return local ? dpt_error(local, "%s", msg) : rc;
}

dpt_optim_t *dpt_towers_optimizer(dpt_towers_t *t)
{
    return t->cfg.mode == DPT_TOWERS_REPLICATED ? t->towers[0].own_opt : t->opt;
}

int dpt_towers_set_optimizer_state(dpt_towers_t *t, dpt_optim_t *src)
{
    if (t->cfg.mode == DPT_TOWERS_ASYNC)
        atomic_store(&t->async_t, dpt_optim_get_t(src));
    if (dpt_optim_count(src) != t->nparams || dpt_optim_config(src)->kind != t->cfg.optim.kind)
        return dpt_error(DPT_EINVAL, "towers: optimizer state of another kind or size");
    int own = t->cfg.mode == DPT_TOWERS_REPLICATED || t->mirrored;
    int reps = own ? t->cfg.num_devices : 1;
    for (int i = 0; i < reps; i++) {
        dpt_optim_t *dst = t->cfg.mode == DPT_TOWERS_REPLICATED || (t->mirrored && i > 0)
                               ? t->towers[i].own_opt
                               : t->opt;
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

size_t dpt_towers_buckets(const dpt_towers_t *t)
{
    return t->bk ? t->bk->plan.n : 0;
}
