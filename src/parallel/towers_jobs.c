/*
 * The towers engine's device jobs: what each device does in a load, in the
 * gradient-set check and in a step of each mode (dpt/towers.h has the
 * semantics, towers.c the API around them).
 *
 * Each device works on its own data and its own gradient arena; the only
 * shared writes are slices of tower 0's gradient and of the parameters in ps
 * mode and with an external communicator (disjoint per device, read by the
 * others only after a barrier or after the end of the job), device 0's
 * all-reduce of tower 0's gradient with an external communicator (read after
 * a barrier), and the chunk-locked updates in async mode. Inside a
 * ps/replicated step the devices meet at a barrier after their backward
 * passes, so a failure on one device is seen by all of them and nothing is
 * applied.
 */
#include "dpt/optim.h"
#include "dpt/status.h"
#include "core/clones.h"
#include "core/prof.h"
#include "optim/optim_impl.h"
#include "towers_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------ */

/* The device's view of `rows` rows from `row0` of its part of a stack. */
void dpt__towers_view(const dpt_towers_t *t, const dpt__tower_t *w, int stack, size_t row0,
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
    dpt__towers_view(t, w, t->job_stack, t->job_offset, si->per_device_batch, &view);
    if (!(t->model.flags & DPT_MODEL_STORES_GRADS))
        dpt_vec_zero(w->grads.data, t->nparams);
    memset(&w->out, 0, sizeof w->out);
    dpt__prof_lap(DPT_PROF_BACKWARD);
    int rc = t->model.loss_grad(w->ctx, params, w->grads.data, &view, &w->out);
    if (rc)
        return rc;
    /* Variables without a gradient add nothing to the norm. With buckets
     * some of the gradient is being all-reduced already: the step zeroes
     * them after the all-reduce instead (dpt__job_step_comm). */
    if (!t->bk)
        dpt_optim_zero_no_grad(dpt_towers_optimizer(t), w->grads.data, 0, t->nparams);
    if (!isfinite(w->out.loss))
        return dpt_error(DPT_ENUMERIC, "loss is %g on rows [%zu, %zu) of stack %d; step refused",
                         w->out.loss, t->job_offset, t->job_offset + si->per_device_batch,
                         t->job_stack);
    if (w->out.rows == 0)
        w->out.rows = si->per_device_batch;
    return DPT_OK;
}

/* The first half of a ps or replicated step: this tower's forward and
 * backward, then the barrier every device meets. One barrier suffices:
 * job_failed is reset by dpt_towers_optimize() before the next job, after
 * every device has returned from this one. Returns 1 when some tower
 * failed (the caller returns w->rc: the failing tower reports why). */
static int dpt__compute_and_meet(dpt_towers_t *t, dpt__tower_t *w, const float *params)
{
    w->rc = dpt__tower_compute(t, w, params);
    if (w->rc)
        atomic_store(&t->job_failed, 1);
    dpt__barrier(t);
    dpt__prof_lap(DPT_PROF_WAIT_GRADS);
    return atomic_load(&t->job_failed) != 0;
}

/* ---- jobs ----------------------------------------------------------------- */

void dpt__towers_copy_slice(const dpt_towers_t *t, const dpt__tower_t *w, int stack,
                            const dpt_batch_t *src, size_t rows_per_device, size_t seqs_per_device)
{
    if (t->inv) {
        dpt__inv_copy(t, w, stack, src, rows_per_device);
        return;
    }
    size_t row0 = (size_t)w->index * rows_per_device;
    size_t seq0 = (size_t)w->index * seqs_per_device;
    for (size_t c = 0; c < t->layout.ncols; c++) {
        const dpt_column_t *want = &t->layout.cols[c];
        const dpt_column_t *have = dpt_batch_find(src, want->name);
        size_t rb = dpt__col_row_bytes(want);
        size_t first = want->per_sequence ? seq0 : row0;
        size_t n = want->per_sequence ? seqs_per_device : rows_per_device;
        memcpy(w->stack_data[(size_t)stack * t->layout.ncols + c],
               (const char *)have->data + first * rb, n * rb);
    }
}

static int dpt__job_load(dpt_towers_t *t, dpt__tower_t *w)
{
    dpt__towers_copy_slice(t, w, t->job_stack, t->job_src, t->job_rows_per_device,
                           t->job_seqs_per_device);
    dpt__prof_lap(DPT_PROF_BATCH);
    return DPT_OK;
}

/* out[i] = (y[i] + x[i]) * scale (x NULL: y[i] * scale) for i < n, returning
 * the sum of squares of the results, accumulated like dpt_vec_sumsq (eight
 * interleaved double lanes combined pairwise): one pass instead of three.
 * out may be y. */
DPT__CLONES
double dpt__add_scale_sumsq(float *out, const float *y, const float *x, size_t n, float scale)
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

/* The global norm from its sum of squares, kept in w->norm. A step whose
 * norm is not finite is refused by every device, and reported by device 0
 * only: 1 with *rc set (device 0: the error, others: 0), else 0. */
int dpt__norm_refused(dpt__tower_t *w, double sq, int *rc)
{
    double norm = sqrt(sq);
    w->norm = norm;
    if (isfinite(norm))
        return 0;
    *rc = w->index == 0 ? dpt_error(DPT_ENUMERIC, "gradient norm is %g; step refused", norm) : 0;
    return 1;
}

/* Floats per chunk of the fused reduce-and-update pass: the reduced chunk
 * is still in L1 when the optimizer reads it. */
#define DPT__FUSE_CHUNK 2048

static int dpt__job_step_ps(dpt_towers_t *t, dpt__tower_t *w)
{
    int n = t->cfg.num_devices, d = w->index;
    if (dpt__compute_and_meet(t, w, t->params.data))
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
            dpt_optim_update_into(t->opt, t->params.data + c, t->params_next.data + c, g, 0, len,
                                  t->job_t, t->job_lr);
        }
        t->slice_sumsq[d] = sq;
        dpt__prof_lap(DPT_PROF_APPLY);
        return DPT_OK;
    }
    /* (Running statistics are left out of the norm: dpt/towers.h.) */
    t->slice_sumsq[d] = dpt_optim_sumsq_less_running(
        t->opt, dpt__add_scale_sumsq(gs + lo, gs + lo, last ? last + lo : NULL, hi - lo, scale), gs,
        lo, hi);
    dpt__prof_lap(DPT_PROF_REDUCE);
    dpt__barrier(t);
    dpt__prof_lap(DPT_PROF_WAIT_REDUCE);
    double sq = 0.0;
    for (int i = 0; i < n; i++)
        sq += t->slice_sumsq[i];
    int rc;
    if (dpt__norm_refused(w, sq, &rc))
        return rc;
    dpt__prof_lap(DPT_PROF_NORM);
    float f = dpt_clip_factor(w->norm, t->cfg.grad_clip);
    dpt_optim_scale_grads(t->opt, gs, lo, hi, f);
    dpt__prof_lap(DPT_PROF_CLIP);
    dpt_optim_update(t->opt, t->params.data, gs, lo, hi, t->job_t, t->job_lr);
    dpt__prof_lap(DPT_PROF_APPLY);
    return DPT_OK;
}

/* ps, mirrored (dpt/towers.h): after the one barrier every device computes
 * what the slices of dpt__job_step_ps() compute, all of them, in the same
 * order (slice s: ((g0 + g1) + ...) + g_{N-1}, scaled, its sum of squares;
 * the norm from the slices' sums in slice order), into its own buffer, and
 * applies the whole update to its own copy. The towers' gradients are only
 * read after the barrier, and written again only in the next job. */
static int dpt__job_step_mirrored(dpt_towers_t *t, dpt__tower_t *w)
{
    int n = t->cfg.num_devices, d = w->index;
    float *params = d ? w->params : t->params.data;
    dpt_optim_t *opt = d ? w->own_opt : t->opt;
    if (dpt__compute_and_meet(t, w, params))
        return w->rc;
    float *g = w->sum.data, scale = t->cfg.reduce_sum ? 1.0f : 1.0f / (float)n;
    const float *g0 = t->towers[0].grads.data, *last = t->towers[n - 1].grads.data;
    double sq = 0.0;
    for (int s = 0; s < n; s++) {
        size_t lo, hi;
        dpt__slice(t->nparams, n, s, &lo, &hi);
        const float *first = g0 + lo;
        if (n > 2) {
            memcpy(g + lo, first, (hi - lo) * sizeof *g);
            for (int i = 1; i + 1 < n; i++)
                dpt_vec_axpy(g + lo, t->towers[i].grads.data + lo, hi - lo, 1.0f);
            first = g + lo;
        }
        sq += dpt__add_scale_sumsq(g + lo, first, last + lo, hi - lo, scale);
    }
    sq = dpt_optim_sumsq_less_running(opt, sq, g, 0, t->nparams);
    dpt__prof_lap(DPT_PROF_REDUCE);
    int rc;
    if (dpt__norm_refused(w, sq, &rc))
        return rc;
    dpt__prof_lap(DPT_PROF_NORM);
    /* The clip factor goes into the update (one pass over the gradient
     * instead of two; the same bits as scaling it first). */
    float f = dpt_clip_factor(w->norm, t->cfg.grad_clip);
    dpt__optim_update_scaled(opt, params, params, g, 0, t->nparams, t->job_t, t->job_lr, f);
    dpt__prof_lap(DPT_PROF_APPLY);
    return DPT_OK;
}

static int dpt__job_step_replicated(dpt_towers_t *t, dpt__tower_t *w)
{
    if (dpt__compute_and_meet(t, w, w->params))
        return w->rc;
    int rc = dpt_comm_allreduce(w->comm, w->grads.data, t->nparams,
                                t->cfg.reduce_sum ? DPT_REDUCE_SUM : DPT_REDUCE_AVG);
    dpt__prof_lap(DPT_PROF_REDUCE);
    if (rc)
        return rc;
    /* Every replica holds the same bits now, so every replica computes the
     * same norm and applies the same update. */
    double sq = dpt_optim_sumsq_less_running(w->own_opt, dpt_vec_sumsq(w->grads.data, t->nparams),
                                             w->grads.data, 0, t->nparams);
    if (dpt__norm_refused(w, sq, &rc))
        return rc;
    dpt__prof_lap(DPT_PROF_NORM);
    float f = dpt_clip_factor(w->norm, t->cfg.grad_clip);
    dpt_optim_scale_grads(w->own_opt, w->grads.data, 0, t->nparams, f);
    dpt__prof_lap(DPT_PROF_CLIP);
    dpt_optim_update(w->own_opt, w->params, w->grads.data, 0, t->nparams, t->job_t, t->job_lr);
    dpt__prof_lap(DPT_PROF_APPLY);
    return DPT_OK;
}

/* An external communicator (dpt/towers.h): the participant's N devices
 * combine their gradients, device 0 all-reduces the result across the
 * participants, and the devices apply it:
 *
 *   every device  forward/backward of its tower (weight_rows: its gradient
 *                 times its rows)                                  | barrier
 *   device d      slice d of tower 0's gradient <- g_0 + g_1 + ... +
 *                 g_{N-1} (tower order), times 1/N when averaging;
 *                 device 0 also sets the extra float               | barrier
 *   device 0      all-reduce of nparams + 1 floats over comm       | barrier
 *   device d      slice d: times 1 / (total rows) for weight_rows;
 *                 its sum of squares                               | barrier
 *   every device  norm from the slices' sums in slice order, clip;
 *                 ps: optimizer update of slice d; replicated: (after one
 *                 more barrier when clipping) the update of its replica
 *
 * The extra float is the rows the participant's towers used (weight_rows)
 * or 0, and NaN when one of its towers failed: the failure reaches every
 * participant in the reduced slot, so all of them refuse the step together
 * and their collectives stay matched (a participant that returned early
 * would leave the others waiting until the communicator's timeout, and out
 * of step afterwards). Only device 0, the thread that called
 * dpt_towers_optimize(), uses the communicator. With one device every
 * barrier returns at once, the 1/N scale is 1 and the one slice is the
 * whole arena: the step is that of one device all-reducing its own
 * gradient; with gradient buckets (t->bk, one device only) that all-reduce
 * is the buckets', started by the model's hook during the backward pass
 * and waited for where the one all-reduce would run (towers_buckets.c). */
static int dpt__job_step_comm(dpt_towers_t *t, dpt__tower_t *w)
{
    int n = t->cfg.num_devices, d = w->index;
    int repl = t->cfg.mode == DPT_TOWERS_REPLICATED;
    size_t count = t->nparams;
    float *gs = t->towers[0].grads.data; /* the participant's gradient, then the reduced one */
    char msg[512] = "";
    dpt_reduce_op_t op = t->cfg.weight_rows || t->cfg.reduce_sum ? DPT_REDUCE_SUM : DPT_REDUCE_AVG;
    /* Buckets (one device here): all-reduced from the hook on while the
     * backward pass runs, so gs is not written again below until finish. */
    if (t->bk)
        dpt__buckets_begin(t, gs, op);
    w->norm = 0.0;
    w->rc = dpt__tower_compute(t, w, repl ? w->params : t->params.data);
    if (w->rc) {
        snprintf(msg, sizeof msg, "%s", dpt_last_error());
        atomic_store(&t->job_failed, 1);
    } else if (t->cfg.weight_rows) {
        dpt_vec_scale(w->grads.data, count, (float)w->out.rows);
    }
    dpt__barrier(t); /* job_failed is reset between jobs: see dpt__job_step_ps() */
    dpt__prof_lap(DPT_PROF_WAIT_GRADS);
    int failed = atomic_load(&t->job_failed);
    size_t lo, hi;
    dpt__slice(count, n, d, &lo, &hi);
    if (failed) {
        /* (With buckets some are in flight: their contents do not matter,
         * the step is refused everywhere.) */
        if (!t->bk)
            dpt_vec_zero(gs + lo, hi - lo);
    } else {
        /* Fixed tower order ((g0 + g1) + g2) ..., then the scale: the sum
         * does not depend on thread timing. */
        for (int i = 1; i < n; i++)
            dpt_vec_axpy(gs + lo, t->towers[i].grads.data + lo, hi - lo, 1.0f);
        if (n > 1 && !t->cfg.weight_rows && !t->cfg.reduce_sum)
            dpt_vec_scale(gs + lo, hi - lo, 1.0f / (float)n);
    }
    if (d == 0) {
        float extra = 0.0f;
        if (failed)
            extra = NAN;
        else if (t->cfg.weight_rows)
            for (int i = 0; i < n; i++)
                extra += (float)t->towers[i].out.rows;
        gs[count] = extra;
    }
    dpt__barrier(t);
    if (d == 0)
        t->job_comm_rc =
            t->bk ? dpt__buckets_finish(t) : dpt_comm_allreduce(t->cfg.comm, gs, count + 1, op);
    dpt__prof_lap(DPT_PROF_REDUCE);
    dpt__barrier(t);
    dpt__prof_lap(DPT_PROF_WAIT_REDUCE);
    if (w->rc)
        return dpt_error(w->rc, "%s", msg);
    if (failed)
        return DPT_OK; /* the tower that failed reports why */
    if (t->job_comm_rc)
        return d == 0 ? t->job_comm_rc : DPT_OK;
    if (!isfinite(gs[count]))
        return d == 0 ? dpt_error(DPT_ECOMM,
                                  "another participant's step at offset %zu of stack %d "
                                  "failed (that participant reports why); step refused",
                                  t->job_offset, t->job_stack)
                      : DPT_OK;
    /* Every participant holds the same bits now: the same norm, the same
     * clip and the same update everywhere. */
    float scale = t->cfg.weight_rows ? 1.0f / gs[count] : 1.0f;
    if (t->bk)
        dpt_optim_zero_no_grad(dpt_towers_optimizer(t), gs, lo, hi);
    dpt_optim_t *marks = dpt_towers_optimizer(t); /* every optimizer has the same marks */
    t->slice_sumsq[d] = dpt_optim_sumsq_less_running(
        marks, dpt__add_scale_sumsq(gs + lo, gs + lo, NULL, hi - lo, scale), gs, lo, hi);
    dpt__barrier(t);
    double sq = 0.0;
    for (int i = 0; i < n; i++)
        sq += t->slice_sumsq[i];
    int rc;
    if (dpt__norm_refused(w, sq, &rc))
        return rc;
    dpt__prof_lap(DPT_PROF_NORM);
    float f = dpt_clip_factor(w->norm, t->cfg.grad_clip);
    dpt_optim_scale_grads(marks, gs, lo, hi, f);
    dpt__prof_lap(DPT_PROF_CLIP);
    if (!repl) {
        dpt_optim_update(t->opt, t->params.data, gs, lo, hi, t->job_t, t->job_lr);
        dpt__prof_lap(DPT_PROF_APPLY);
        return DPT_OK;
    }
    /* Every device's f is the same, so all of them take this barrier or
     * none: each replica then reads the whole clipped gradient. */
    if (f != 1.0f)
        dpt__barrier(t);
    dpt_optim_update(w->own_opt, w->params, gs, 0, count, t->job_t, t->job_lr);
    dpt__prof_lap(DPT_PROF_APPLY);
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
    double norm = sqrt(dpt_optim_sumsq_less_running(
        t->opt, dpt_vec_sumsq(w->grads.data, t->nparams), w->grads.data, 0, t->nparams));
    w->norm = norm;
    if (!isfinite(norm))
        return (w->rc = dpt_error(DPT_ENUMERIC, "gradient norm is %g; update skipped", norm));
    float scale = t->cfg.async_scale > 0.0f ? t->cfg.async_scale : 1.0f / (float)t->cfg.num_devices;
    /* The running statistics' updates take the async scale (N towers each
     * moving them by 1/N of theirs: about one update per round, as in the
     * synchronous modes), never the clip. */
    dpt_optim_scale_running(t->opt, w->grads.data, 0, t->nparams, scale);
    scale *= dpt_clip_factor(norm, t->cfg.grad_clip);
    dpt_optim_scale_grads(t->opt, w->grads.data, 0, t->nparams, scale);
    uint64_t step = atomic_fetch_add(&t->async_t, 1) + 1;
    for (size_t c = 0; c < t->nchunks; c++) {
        size_t lo = c * chunk, hi = lo + chunk < t->nparams ? lo + chunk : t->nparams;
        pthread_mutex_lock(&t->chunk_locks[c]);
        dpt_optim_update(t->opt, t->params.data, w->grads.data, lo, hi, step, t->job_lr);
        pthread_mutex_unlock(&t->chunk_locks[c]);
    }
    return DPT_OK;
}

static int dpt__job_gradset(dpt_towers_t *t, dpt__tower_t *w)
{
    const dpt__stack_info_t *si = &t->stacks[t->job_stack];
    dpt_batch_t view;
    dpt__towers_view(t, w, t->job_stack, 0, t->inv ? t->cfg.chunk_rows : si->per_device_batch,
                     &view);
    uint32_t bits = DPT__SENTINEL_BITS;
    float s;
    memcpy(&s, &bits, sizeof s);
    for (size_t i = 0; i < t->nparams; i++)
        w->grads.data[i] = s;
    dpt_loss_out_t out;
    const float *params = w->params ? w->params : t->params.data;
    return t->model.loss_grad(w->ctx, params, w->grads.data, &view, &out);
}

int dpt__towers_job(void *arg, int device)
{
    dpt_towers_t *t = arg;
    dpt__tower_t *w = &t->towers[device];
    switch (t->job) {
    case DPT__JOB_LOAD: return dpt__job_load(t, w);
    case DPT__JOB_GRADSET: return dpt__job_gradset(t, w);
    case DPT__JOB_STEP:
        if (t->inv)
            return dpt__inv_job_step(t, w);
        if (t->cfg.comm)
            return dpt__job_step_comm(t, w);
        switch (t->cfg.mode) {
        case DPT_TOWERS_PS:
            return t->mirrored ? dpt__job_step_mirrored(t, w) : dpt__job_step_ps(t, w);
        case DPT_TOWERS_REPLICATED: return dpt__job_step_replicated(t, w);
        case DPT_TOWERS_ASYNC: return dpt__job_step_async(t, w);
        default: break;
        }
        break;
    }
    return dpt_error(DPT_ESTATE, "towers: unknown job");
}
