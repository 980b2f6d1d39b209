/*
 * The sync_replicas job's workers: the gradient of one chunk of the epoch's
 * order (an MLP dataset, or the bags task with its distinct rows fetched
 * and its table gradient as sparse rows), the worker loop, and the pool of
 * worker threads of one process. The loop is the same for a thread and for
 * a worker rank (only its client differs, dpt/sync_replicas_remote.h): take
 * a token, gradient of the chunk the token names, push tagged with the
 * token's step; a worker whose step fails reports itself lost and the
 * service goes on while replicas_to_aggregate workers remain.
 *
 * The pool is the towers' device pool (dpt/device.h), started with the
 * trainer: one job of it per session, worker i on device i (worker 0 on the
 * calling thread); the engine's lock is taken inside the client calls.
 */
#include "sr_internal.h"
#include "core/stopflag.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- buffers ---------------------------------------------------------------------- */

void dpt__sr_worker_free(srt_worker_t *w)
{
    dpt__net_deinit(&w->net);
    dpt_arena_deinit(&w->params);
    dpt_arena_deinit(&w->grads);
    free(w->x);
    free(w->y);
    free(w->labels);
    free(w->keys);
    free(w->ids);
    free(w->uniq);
    free(w->offsets);
    free(w->rows);
    free(w->dpooled);
    free(w->dy);
    dpt_sparse_rows_deinit(&w->grad_rows);
}

int dpt__sr_worker_build(srt_t *t, srt_worker_t *w)
{
    size_t b = t->b, n = t->vars->total;
    int rc;
    if ((rc = dpt_arena_init(&w->params, n)) != 0 || (rc = dpt_arena_init(&w->grads, n)) != 0 ||
        (rc = dpt__net_init(&w->net, &t->task, b)) != 0)
        return rc;
    if (t->bags) {
        size_t L = t->nids, E = t->edim;
        w->ids = malloc(b * L * sizeof(int64_t));
        w->uniq = malloc(b * L * sizeof(int64_t));
        w->offsets = malloc((b + 1) * sizeof(size_t));
        w->rows = malloc(b * L * E * sizeof(float));
        w->x = malloc(b * E * sizeof(float));
        w->dpooled = malloc(b * E * sizeof(float));
        w->y = malloc(b * sizeof(float));
        w->dy = malloc(b * sizeof(float));
        if (!w->ids || !w->uniq || !w->offsets || !w->rows || !w->x || !w->dpooled || !w->y ||
            !w->dy)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate worker %d", w->id);
        return dpt_sparse_rows_init(&w->grad_rows, E, b * L);
    }
    w->x = malloc(b * t->task.in_dim * sizeof(float));
    w->keys = malloc(b * 2 * sizeof(int32_t));
    if (t->task.ydim)
        w->y = malloc(b * t->task.ydim * sizeof(float));
    else
        w->labels = malloc(b * sizeof(int32_t));
    if (!w->x || !w->keys || !(w->y || w->labels))
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate worker %d", w->id);
    return DPT_OK;
}

/* ---- one gradient --------------------------------------------------------------- */

static int dpt__srt_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The variables worker w needs: the dense ones into w->params and, for
 * bags, rows ids[0..n) of the table into w->rows, from its service. */
static int dpt__srt_fetch(srt_worker_t *w, const int64_t *ids, size_t n)
{
    int rc = dpt_sr_client_fetch(w->c, w->params.data);
    if (!rc && w->t->bags)
        rc = dpt_sr_client_fetch_rows(w->c, 0, ids, n, w->rows);
    return rc;
}

/* Worker w's gradient on chunk `chunk` of the epoch's order, at the
 * variables it fetched. Fills w->grads (dense) and w->grad_rows (bags). */
int dpt__sr_grad(srt_worker_t *w, size_t chunk, uint64_t step, double *loss, double *correct)
{
    srt_t *t = w->t;
    size_t b = t->b;
    const size_t *rows = t->perm + chunk * b;
    int rc;
    if (!t->bags) {
        if ((rc = dpt__srt_fetch(w, NULL, 0)) != 0)
            return rc;
        const dpt_dataset_t *d = &t->task.train;
        size_t dim = d->dim, yd = d->target_dim;
        for (size_t i = 0; i < b; i++) {
            size_t r = rows[i];
            memcpy(w->x + i * dim, d->x + r * dim, dim * sizeof(float));
            if (yd)
                memcpy(w->y + i * yd, d->targets + r * yd, yd * sizeof(float));
            else
                w->labels[i] = d->labels[r];
            w->keys[2 * i] = (int32_t)(uint32_t)step;
            w->keys[2 * i + 1] = (int32_t)(uint32_t)(chunk * b + i);
        }
        dpt_batch_t batch = dpt__task_batch(b, dim, w->x, w->labels, w->y, yd, w->keys);
        const dpt_model_t *m = &w->net.model;
        dpt_loss_out_t o;
        if ((rc = m->loss_grad(m->ctx, w->params.data, w->grads.data, &batch, &o)) != 0)
            return rc;
        *loss = o.loss;
        *correct = o.correct;
        return DPT_OK;
    }
    /* Bags: the distinct ids of the batch, their rows fetched, the batch
     * renumbered into them. */
    size_t L = t->nids, E = t->edim, n = b * L;
    for (size_t i = 0; i < b; i++) {
        memcpy(w->uniq + i * L, t->task.bags.train_ids + rows[i] * L, L * sizeof(int64_t));
        w->y[i] = t->task.bags.train_y[rows[i]];
        w->offsets[i] = i * L;
    }
    w->offsets[b] = n;
    memcpy(w->ids, w->uniq, n * sizeof(int64_t));
    qsort(w->uniq, n, sizeof(int64_t), dpt__srt_cmp_i64);
    size_t u = 0;
    for (size_t k = 0; k < n; k++)
        if (u == 0 || w->uniq[u - 1] != w->uniq[k])
            w->uniq[u++] = w->uniq[k];
    for (size_t k = 0; k < n; k++) {
        const int64_t *hit = bsearch(&w->ids[k], w->uniq, u, sizeof(int64_t), dpt__srt_cmp_i64);
        w->ids[k] = hit - w->uniq;
    }
    w->rows_touched += u;
    if ((rc = dpt__srt_fetch(w, w->uniq, u)) != 0 ||
        (rc = dpt_embedding_bag_forward(w->rows, u, E, w->ids, w->offsets, b, DPT_EMBED_MEAN,
                                        w->x)) != 0)
        return rc;
    const float *pred;
    double l;
    if ((rc = dpt_seq_forward(dpt__bags_seq(&w->net), w->params.data, w->x, b, &pred)) != 0)
        return rc;
    dpt_vec_zero(w->dy, b);
    if ((rc = dpt_loss_mse(pred, w->y, b, 1, w->dy, &l)) != 0)
        return rc;
    dpt_vec_zero(w->dpooled, b * E);
    if ((rc = dpt_seq_backward_ex(dpt__bags_seq(&w->net), w->params.data, w->grads.data, w->dy,
                                  w->dpooled, 1)) != 0)
        return rc;
    dpt_sparse_rows_clear(&w->grad_rows);
    if ((rc = dpt_embedding_bag_backward(E, w->ids, w->offsets, b, DPT_EMBED_MEAN, w->dpooled,
                                         &w->grad_rows)) != 0)
        return rc;
    for (size_t k = 0; k < w->grad_rows.n; k++)
        w->grad_rows.indices[k] = w->uniq[w->grad_rows.indices[k]];
    if ((rc = dpt_sparse_rows_coalesce(&w->grad_rows)) != 0)
        return rc;
    *loss = l;
    *correct = 0.0;
    return DPT_OK;
}

/* ---- the worker loop ------------------------------------------------------------- */

/* replica_grad_clip: the worker's gradient (its dense variables and, for
 * bags, the table's rows) scaled to that global norm when above it. The
 * frozen variables' gradients count for nothing (the service ignores
 * them), and the running statistics' updates (batchnorm) are neither
 * counted nor scaled, as the service's own clip leaves them. */
static void dpt__sr_clip(const srt_t *t, srt_worker_t *w)
{
    const dpt_vartable_t *vt = t->vars;
    const unsigned char *running = w->net.running;
    double sumsq = 0.0;
    for (size_t i = t->bags ? 1 : 0; i < vt->nvars; i++) {
        const float *g = w->grads.data + vt->vars[i].offset;
        int skip = (t->frozen && t->frozen[i]) || (running && running[i]);
        for (size_t j = 0; !skip && j < vt->vars[i].count; j++)
            sumsq += (double)g[j] * (double)g[j];
    }
    size_t nrows = t->bags && !(t->frozen && t->frozen[0]) ? w->grad_rows.n * w->grad_rows.dim : 0;
    for (size_t j = 0; j < nrows; j++)
        sumsq += (double)w->grad_rows.values[j] * (double)w->grad_rows.values[j];
    float f = dpt_clip_factor(sqrt(sumsq), t->replica_clip);
    if (f == 1.0f)
        return;
    for (size_t i = t->bags ? 1 : 0; i < vt->nvars; i++)
        if (!(running && running[i]))
            dpt_vec_scale(w->grads.data + vt->vars[i].offset, vt->vars[i].count, f);
    if (nrows)
        dpt_vec_scale(w->grad_rows.values, nrows, f);
}

static void dpt__srt_straggle(const srt_t *t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t->straggler_s;
    ts.tv_nsec = (long)((t->straggler_s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

int dpt__sr_work(srt_worker_t *w)
{
    srt_t *t = w->t;
    const dpt_sparse_rows_t *list[1] = {&w->grad_rows};
    uint64_t pos = UINT64_MAX;
    int rc;
    for (;;) {
        dpt_sr_token_t tok;
        double loss = 0.0, correct = 0.0, fig[SRT_NFIGURES];
        int accepted = 0;
        /* A worker rank asked to stop asks rank 0, which ends the run. */
        if (dpt__stop_flag_set(t->stop_flag) && (rc = dpt_sr_client_ask_stop(w->c)) != 0)
            break;
        if ((rc = dpt_sr_client_take_token(w->c, &tok)) != 0)
            break;
        if (t->role == SRT_WORKER && tok.tag != pos) {
            /* A worker rank rebuilds the epoch's order (the session's tag). */
            pos = tok.tag;
            dpt__sr_perm(t, pos);
        }
        size_t chunk = (size_t)((tok.index * (uint64_t)t->N + (uint64_t)w->id) % t->nchunks);
        if ((rc = dpt__sr_grad(w, chunk, tok.step, &loss, &correct)) != 0)
            break;
        if (t->replica_clip > 0.0)
            dpt__sr_clip(t, w);
        if (w->id == t->straggler)
            dpt__srt_straggle(t);
        fig[SRT_FIG_LOSS] = loss * (double)t->b;
        fig[SRT_FIG_HITS] = correct;
        if ((rc = dpt_sr_client_push(w->c, tok.step, w->grads.data, t->bags ? list : NULL, fig,
                                     &accepted)) != 0)
            break;
        w->pushes++;
        if (accepted > 0) {
            w->accepted++;
            w->loss += fig[SRT_FIG_LOSS];
            w->correct += correct;
            w->rows_used += t->b;
        }
    }
    if (rc == DPT_ECLOSED)
        return w->rc = DPT_OK;
    snprintf(w->err, sizeof w->err, "%s", dpt_last_error());
    w->rc = rc;
    /* The service goes on without a failed worker while enough remain (if
     * not, it wakes the others with the reason). */
    return dpt_sr_client_lost(w->c, rc, w->err);
}

/* ---- the pool of worker threads --------------------------------------------------- */

static int dpt__srt_pool_job(void *arg, int device)
{
    srt_t *t = arg;
    srt_worker_t *w = &t->w[device];
    if (!w->lost)
        dpt__sr_work(w); /* its outcome is in w->rc, w->err */
    return DPT_OK;
}

int dpt__sr_pool_start(srt_t *t)
{
    return dpt_device_pool_create(&t->pool, t->nw, 0);
}

void dpt__sr_pool_stop(srt_t *t)
{
    dpt_device_pool_destroy(t->pool); /* joins the threads */
    t->pool = NULL;
}

/* One session for the workers that are not lost; waits for all of them. */
int dpt__sr_run_workers(srt_t *t)
{
    for (int i = 0; i < t->N; i++) {
        srt_worker_t *w = &t->w[i];
        w->loss = w->correct = 0.0;
        w->rows_used = w->pushes = w->accepted = w->rows_touched = 0;
        w->rc = 0;
        w->err[0] = '\0';
        dpt_sr_client_begin(w->c, t->shuffle_pos, t->part);
    }
    return dpt_device_pool_run(t->pool, dpt__srt_pool_job, t);
}

/* The epoch's order: the rows shuffled from shuffle position pos. */
void dpt__sr_perm(srt_t *t, uint64_t pos)
{
    for (size_t i = 0; i < t->rows; i++)
        t->perm[i] = i;
    dpt_rng_seek(&t->shuffle_rng, pos);
    if (t->shuffle)
        dpt_rng_shuffle(&t->shuffle_rng, t->perm, t->rows);
}

/* ---- the ranks under mpirun --------------------------------------------------------- */

/* The first num_ps ranks are the services, every other rank one worker. */
int dpt__sr_mpi_check(const dpt_config_t *c, int world)
{
    long long P = (long long)DPT_CI(c, num_ps), N = (long long)DPT_CI(c, total_num_replicas);
    if (P > SRT_MAX_PS)
        return dpt_error(DPT_EINVAL, "num_ps = %lld: at most %d services", P, SRT_MAX_PS);
    if (P + N != world)
        return dpt_error(DPT_EINVAL,
                         "num_ps = %lld and total_num_replicas = %lld: under mpirun the first "
                         "num_ps ranks are the services and every other rank one worker, so "
                         "they must add up to the %d ranks",
                         P, N, world);
    if (P > 1 && DPT_CF(c, grad_clip) > 0.0)
        return dpt_error(DPT_EINVAL,
                         "grad_clip = %g with num_ps = %lld under mpirun: each service would "
                         "clip only its part of the gradient; use grad_clip = 0 or one service",
                         DPT_CF(c, grad_clip), P);
    return DPT_OK;
}
