/*
 * The sync-replicas parameter service (dpt/sync_replicas.h).
 *
 * Locking: one mutex guards the step state (global step, reservations,
 * tokens, counters) and the variables. A push reserves one of the R slots
 * of the current step under the lock, copies its gradient into the slot
 * without the lock (so workers copy in parallel), then marks it filled;
 * the push that fills the last reserved slot of a full step runs the
 * update under the lock. Fetches take the lock, so a worker never reads a
 * half-applied update. A push that finds the step's R slots reserved is
 * stale (the step is closing), exactly like one whose local step is old.
 *
 * Determinism (N == R): the update sums the slots in (worker, push order of
 * that worker) order, whatever order they arrived in.
 *
 * The token queue holds runs of equal steps (tokens are enqueued max(N, R)
 * at a time with the same, growing step), so its size never depends on how
 * many tokens pile up behind a lost worker.
 */
#include "dpt/sync_replicas.h"

#include "core/clock.h"

#include "dpt/stats.h"
#include "dpt/status.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sr_slot {
    int worker;
    uint64_t seq;            /* the worker's push count when it reserved (order key) */
    float *dense;            /* packed dense variables */
    dpt_sparse_rows_t *rows; /* one per sparse variable */
    uint64_t bytes;
} sr_slot_t;

#define SR_NONE UINT64_MAX

typedef struct sr_run {
    uint64_t step, count;
} sr_run_t;

struct dpt_sr {
    dpt_sr_config_t cfg;
    dpt_vartable_t vars;
    unsigned char *is_sparse; /* [nvars] */
    unsigned char *owned;     /* [nvars] 1: this service keeps the variable (cfg.owned) */
    unsigned char *no_grad;   /* [nvars] 1: no gradient (cfg.no_grad): fetched, not updated */
    unsigned char *running;   /* [nvars] 1: running statistics (cfg.running): not normed */
    size_t *packed;           /* [nvars] dense: offset in a packed slot; sparse: ordinal */
    size_t dense_count;       /* floats of the dense variables */
    size_t nsparse;
    int *placement;     /* [nvars] */
    uint64_t *ps_bytes; /* [num_ps] */
    dpt_arena_t params, avg, ema;
    dpt_optim_t *opt;
    dpt_sparse_rows_t *avg_rows; /* [nsparse] the step's coalesced sparse averages */
    sr_slot_t *slots;            /* [R] */
    int *order;                  /* [R] slot order for the sum */
    uint64_t *worker_seq;        /* [N] pushes of each worker */
    uint64_t *last_pushed;       /* [N] local step of each worker's last push (SR_NONE) */
    uint64_t *contributed;       /* [N] */
    unsigned char *lost;         /* [N] */
    int live;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* tokens, failure, close */
    int have_step, begun, closed, failed;
    char fail_msg[256];
    int fail_code;
    uint64_t global_step, until;
    int reserved, filled; /* slots of the current step */
    sr_run_t *runs;       /* token queue: runs[head..tail) */
    size_t head, tail, cap;
    uint64_t tokens_avail;
    dpt_sr_stats_t st;
};

dpt_sr_config_t dpt_sr_defaults(void)
{
    dpt_sr_config_t c;
    memset(&c, 0, sizeof c);
    c.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
    c.schedule.kind = DPT_SCHEDULE_CONSTANT;
    c.schedule.lr0 = 0.01f;
    c.replicas_to_aggregate = 1;
    c.total_num_replicas = 1;
    c.num_ps = 1;
    c.init_tokens = -1;
    return c;
}

int dpt_sr_place(const uint64_t *var_bytes, size_t n, int num_ps, int *out, uint64_t *ps_bytes)
{
    if (num_ps < 1)
        return dpt_error(DPT_EINVAL, "sync replicas: num_ps = %d: need at least one service",
                         num_ps);
    uint64_t local[64];
    uint64_t *load = ps_bytes;
    if (!load) {
        if (num_ps > 64)
            return dpt_error(DPT_EINVAL, "sync replicas: num_ps = %d without a bytes array",
                             num_ps);
        load = local;
    }
    for (int k = 0; k < num_ps; k++)
        load[k] = 0;
    for (size_t i = 0; i < n; i++) {
        int best = 0;
        for (int k = 1; k < num_ps; k++)
            if (load[k] < load[best])
                best = k;
        out[i] = best;
        load[best] += var_bytes[i];
    }
    return DPT_OK;
}

static void sr_free_slot(sr_slot_t *s, size_t nsparse)
{
    dpt_free_aligned(s->dense);
    if (s->rows)
        for (size_t j = 0; j < nsparse; j++)
            dpt_sparse_rows_deinit(&s->rows[j]);
    free(s->rows);
}

void dpt_sr_destroy(dpt_sr_t *sr)
{
    if (!sr)
        return;
    if (sr->slots)
        for (int i = 0; i < sr->cfg.replicas_to_aggregate; i++)
            sr_free_slot(&sr->slots[i], sr->nsparse);
    if (sr->avg_rows)
        for (size_t j = 0; j < sr->nsparse; j++)
            dpt_sparse_rows_deinit(&sr->avg_rows[j]);
    free(sr->avg_rows);
    free(sr->slots);
    free(sr->order);
    free(sr->worker_seq);
    free(sr->last_pushed);
    free(sr->contributed);
    free(sr->lost);
    free(sr->runs);
    free(sr->is_sparse);
    free(sr->owned);
    free(sr->no_grad);
    free(sr->running);
    free(sr->packed);
    free(sr->placement);
    free(sr->ps_bytes);
    dpt_optim_destroy(sr->opt);
    dpt_arena_deinit(&sr->params);
    dpt_arena_deinit(&sr->avg);
    dpt_arena_deinit(&sr->ema);
    dpt_vartable_deinit(&sr->vars);
    if (sr->begun >= 0) {
        pthread_cond_destroy(&sr->cv);
        pthread_mutex_destroy(&sr->mu);
    }
    free(sr);
}

static int sr_check_config(const dpt_sr_config_t *c)
{
    if (!c->vars || c->vars->nvars == 0)
        return dpt_error(DPT_EINVAL, "sync replicas: no variables to serve");
    if (c->replicas_to_aggregate < 1)
        return dpt_error(DPT_EINVAL, "sync replicas: replicas_to_aggregate = %d: must be >= 1",
                         c->replicas_to_aggregate);
    if (c->total_num_replicas < 1)
        return dpt_error(DPT_EINVAL, "sync replicas: total_num_replicas = %d: must be >= 1",
                         c->total_num_replicas);
    if (c->num_ps < 1)
        return dpt_error(DPT_EINVAL, "sync replicas: num_ps = %d: must be >= 1", c->num_ps);
    if (!(c->ema_decay >= 0.0f && c->ema_decay < 1.0f))
        return dpt_error(DPT_EINVAL, "sync replicas: ema_decay = %g: must be in [0, 1)",
                         (double)c->ema_decay);
    if (!(c->grad_clip >= 0.0))
        return dpt_error(DPT_EINVAL, "sync replicas: grad_clip = %g: must be >= 0", c->grad_clip);
    if (c->tokens != DPT_SR_TOKENS_STRICT && c->tokens != DPT_SR_TOKENS_FIFO)
        return dpt_error(DPT_EINVAL, "sync replicas: tokens = %d: DPT_SR_TOKENS_STRICT or _FIFO",
                         c->tokens);
    for (size_t i = 0; c->sparse && i < c->vars->nvars; i++)
        if (c->sparse[i] && c->vars->vars[i].ndim != 2)
            return dpt_error(DPT_EINVAL,
                             "sync replicas: variable %s is marked sparse but has %d "
                             "dimensions (sparse gradients are rows of a 2-D variable)",
                             c->vars->vars[i].name, c->vars->vars[i].ndim);
    return DPT_OK;
}

static int sr_alloc(dpt_sr_t *sr, const unsigned char *sparse, const unsigned char *owned,
                    const unsigned char *no_grad, const unsigned char *running)
{
    const dpt_sr_config_t *c = &sr->cfg;
    size_t nv = sr->vars.nvars, R = (size_t)c->replicas_to_aggregate;
    size_t N = (size_t)c->total_num_replicas, P = (size_t)c->num_ps;
    sr->is_sparse = calloc(nv, 1);
    sr->owned = calloc(nv, 1);
    sr->no_grad = calloc(nv, 1);
    sr->running = calloc(nv, 1);
    sr->packed = calloc(nv, sizeof(size_t));
    sr->placement = calloc(nv, sizeof(int));
    sr->ps_bytes = calloc(P, sizeof(uint64_t));
    uint64_t *vb = calloc(nv, sizeof(uint64_t));
    sr->slots = calloc(R, sizeof(sr_slot_t));
    sr->order = calloc(R, sizeof(int));
    sr->worker_seq = calloc(N, sizeof(uint64_t));
    sr->last_pushed = calloc(N, sizeof(uint64_t));
    sr->contributed = calloc(N, sizeof(uint64_t));
    sr->lost = calloc(N, 1);
    sr->cap = 16;
    sr->runs = calloc(sr->cap, sizeof(sr_run_t));
    if (!sr->is_sparse || !sr->owned || !sr->no_grad || !sr->running || !sr->packed ||
        !sr->placement || !sr->ps_bytes || !vb || !sr->slots || !sr->order || !sr->worker_seq ||
        !sr->last_pushed || !sr->contributed || !sr->lost || !sr->runs) {
        free(vb);
        return dpt_error(DPT_ENOMEM, "sync replicas: cannot allocate the service");
    }
    for (size_t i = 0; i < nv; i++) {
        const dpt_var_t *v = &sr->vars.vars[i];
        vb[i] = (uint64_t)v->count * sizeof(float);
        sr->owned[i] = owned ? owned[i] != 0 : 1;
        sr->no_grad[i] = no_grad ? no_grad[i] != 0 : 0;
        sr->running[i] = running ? running[i] != 0 : 0;
        if (sparse && sparse[i]) {
            sr->is_sparse[i] = 1;
            sr->packed[i] = sr->nsparse++;
        } else if (sr->owned[i] && !sr->no_grad[i]) {
            sr->packed[i] = sr->dense_count;
            sr->dense_count += v->count;
        }
    }
    dpt_sr_place(vb, nv, c->num_ps, sr->placement, sr->ps_bytes);
    free(vb);
    int rc;
    if ((rc = dpt_arena_init(&sr->params, sr->vars.total)) != 0 ||
        (rc = dpt_arena_init(&sr->avg, sr->vars.total)) != 0 ||
        (c->ema_decay > 0.0f && (rc = dpt_arena_init(&sr->ema, sr->vars.total)) != 0) ||
        (rc = dpt_optim_create(&sr->opt, &c->optim, sr->vars.total)) != 0 ||
        (rc = dpt_optim_set_no_grad(sr->opt, &sr->vars, no_grad)) != 0 ||
        (rc = dpt_optim_set_running(sr->opt, &sr->vars, running)) != 0)
        return rc;
    if (sr->nsparse) {
        sr->avg_rows = calloc(sr->nsparse, sizeof(dpt_sparse_rows_t));
        if (!sr->avg_rows)
            return dpt_error(DPT_ENOMEM, "sync replicas: cannot allocate the accumulators");
    }
    for (size_t i = 0; i < nv; i++)
        if (sr->is_sparse[i] && (rc = dpt_sparse_rows_init(&sr->avg_rows[sr->packed[i]],
                                                           sr->vars.vars[i].shape[1], 0)) != 0)
            return rc;
    for (size_t r = 0; r < R; r++) {
        sr_slot_t *s = &sr->slots[r];
        if (sr->dense_count && !(s->dense = dpt_alloc_aligned(sr->dense_count * sizeof(float))))
            return dpt_error(DPT_ENOMEM, "sync replicas: cannot allocate %zu accumulator slots", R);
        if (sr->nsparse && !(s->rows = calloc(sr->nsparse, sizeof(dpt_sparse_rows_t))))
            return dpt_error(DPT_ENOMEM, "sync replicas: cannot allocate the accumulators");
        for (size_t i = 0; i < nv; i++)
            if (sr->is_sparse[i] && (rc = dpt_sparse_rows_init(&s->rows[sr->packed[i]],
                                                               sr->vars.vars[i].shape[1], 0)) != 0)
                return rc;
    }
    sr->live = (int)N;
    return DPT_OK;
}

int dpt_sr_create(dpt_sr_t **out, const dpt_sr_config_t *cfg)
{
    *out = NULL;
    int rc = sr_check_config(cfg);
    if (rc)
        return rc;
    dpt_sr_t *sr = calloc(1, sizeof *sr);
    if (!sr)
        return dpt_error(DPT_ENOMEM, "sync replicas: cannot allocate the service");
    sr->cfg = *cfg;
    sr->cfg.sparse = NULL;
    sr->begun = -1; /* the mutex is not made yet */
    if (pthread_mutex_init(&sr->mu, NULL) != 0) {
        free(sr);
        return dpt_error(DPT_ETHREAD, "sync replicas: pthread_mutex_init failed");
    }
    if (dpt__cond_init_monotonic(&sr->cv) != 0) {
        pthread_mutex_destroy(&sr->mu);
        free(sr);
        return dpt_error(DPT_ETHREAD, "sync replicas: pthread_cond_init failed");
    }
    sr->begun = 0;
    if ((rc = dpt_vartable_copy(&sr->vars, cfg->vars)) != 0)
        goto fail;
    sr->cfg.vars = &sr->vars;
    sr->cfg.owned = sr->cfg.no_grad = sr->cfg.running = NULL;
    if ((rc = sr_alloc(sr, cfg->sparse, cfg->owned, cfg->no_grad, cfg->running)) != 0)
        goto fail;
    *out = sr;
    return DPT_OK;
fail:
    dpt_sr_destroy(sr);
    return rc;
}

float *dpt_sr_params(dpt_sr_t *sr)
{
    return sr->params.data;
}
float *dpt_sr_ema(dpt_sr_t *sr)
{
    return sr->ema.data;
}
dpt_optim_t *dpt_sr_optimizer(dpt_sr_t *sr)
{
    return sr->opt;
}
const dpt_vartable_t *dpt_sr_vars(const dpt_sr_t *sr)
{
    return &sr->vars;
}

void dpt_sr_reset_ema(dpt_sr_t *sr)
{
    pthread_mutex_lock(&sr->mu);
    if (sr->ema.data)
        memcpy(sr->ema.data, sr->params.data, sr->params.count * sizeof(float));
    pthread_mutex_unlock(&sr->mu);
}

void dpt_sr_set_global_step(dpt_sr_t *sr, uint64_t step)
{
    pthread_mutex_lock(&sr->mu);
    sr->global_step = step;
    sr->st.global_step = step;
    sr->have_step = 1;
    pthread_mutex_unlock(&sr->mu);
}

uint64_t dpt_sr_global_step(dpt_sr_t *sr)
{
    pthread_mutex_lock(&sr->mu);
    uint64_t g = sr->global_step;
    pthread_mutex_unlock(&sr->mu);
    return g;
}

/* Appends `count` tokens of `step` (with the lock held). */
static int sr_enqueue(dpt_sr_t *sr, uint64_t step, uint64_t count)
{
    if (count == 0)
        return DPT_OK;
    if (sr->tail > sr->head && sr->runs[sr->tail - 1].step == step) {
        sr->runs[sr->tail - 1].count += count;
    } else {
        if (sr->tail == sr->cap) {
            if (sr->head > 0) {
                memmove(sr->runs, sr->runs + sr->head, (sr->tail - sr->head) * sizeof(sr_run_t));
                sr->tail -= sr->head;
                sr->head = 0;
            } else {
                sr_run_t *n = realloc(sr->runs, 2 * sr->cap * sizeof(sr_run_t));
                if (!n)
                    return dpt_error(DPT_ENOMEM, "sync replicas: cannot grow the token queue");
                sr->runs = n;
                sr->cap *= 2;
            }
        }
        sr->runs[sr->tail++] = (sr_run_t){step, count};
    }
    sr->tokens_avail += count;
    sr->st.tokens_enqueued += count;
    return DPT_OK;
}

int dpt_sr_begin(dpt_sr_t *sr, int64_t num_tokens, uint64_t until)
{
    int R = sr->cfg.replicas_to_aggregate, N = sr->cfg.total_num_replicas;
    int64_t need = R > N ? (int64_t)(R - N) : 0;
    if (num_tokens < 0)
        num_tokens = sr->cfg.init_tokens;
    pthread_mutex_lock(&sr->mu);
    int rc = DPT_OK;
    if (!sr->have_step)
        rc = dpt_error(DPT_ESTATE, "sync replicas: no global step: set it "
                                   "(dpt_sr_set_global_step) before the first session");
    else if (num_tokens >= 0 && num_tokens < need)
        rc = dpt_error(DPT_EINVAL,
                       "sync replicas: %" PRId64 " initial tokens are too few for the first "
                       "step: %d workers must push %d gradients, which needs at least %" PRId64
                       " tokens (replicas_to_aggregate - total_num_replicas)",
                       num_tokens, N, R, need);
    else if (until <= sr->global_step)
        rc = dpt_error(DPT_EINVAL,
                       "sync replicas: a session until step %" PRIu64
                       " has nothing to do at global step %" PRIu64,
                       until, sr->global_step);
    else if (sr->failed)
        rc = dpt_error(sr->fail_code, "%s", sr->fail_msg);
    if (!rc) {
        sr->head = sr->tail = 0;
        sr->tokens_avail = 0;
        sr->reserved = sr->filled = 0;
        sr->closed = 0;
        for (int w = 0; w < N; w++)
            sr->last_pushed[w] = SR_NONE;
        sr->until = until;
        rc = sr_enqueue(sr, sr->global_step, (uint64_t)(num_tokens < 0 ? need : num_tokens));
        sr->begun = 1;
    }
    pthread_mutex_unlock(&sr->mu);
    return rc;
}

/* Sum of squares in double, in index order. Each square of a float is
 * exact in double and zeros add nothing, so a sparse gradient's rows in
 * index order give the same sum as its dense equivalent. */
static double sr_sumsq(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

/* Fails the service (lock held): every waiter wakes with `code`. */
static int sr_fail(dpt_sr_t *sr, int code, const char *msg)
{
    if (!sr->failed) {
        sr->failed = 1;
        sr->fail_code = code;
        snprintf(sr->fail_msg, sizeof sr->fail_msg, "%s", msg);
    }
    pthread_cond_broadcast(&sr->cv);
    return dpt_error(sr->fail_code, "%s", sr->fail_msg);
}

/* The chief's update (lock held, every slot filled): average in worker
 * order, clip, apply, EMA, step, tokens. */
static int sr_apply(dpt_sr_t *sr)
{
    int R = sr->cfg.replicas_to_aggregate, N = sr->cfg.total_num_replicas;
    const dpt_vartable_t *t = &sr->vars;
    /* Insertion sort of R slot indices by (worker, seq): R is small. */
    for (int i = 0; i < R; i++)
        sr->order[i] = i;
    for (int i = 1; i < R; i++) {
        int k = sr->order[i], j = i - 1;
        const sr_slot_t *a = &sr->slots[k];
        while (j >= 0) {
            const sr_slot_t *b = &sr->slots[sr->order[j]];
            if (b->worker < a->worker || (b->worker == a->worker && b->seq < a->seq))
                break;
            sr->order[j + 1] = sr->order[j];
            j--;
        }
        sr->order[j + 1] = k;
    }
    float inv = 1.0f / (float)R;
    double sumsq = 0.0;
    uint64_t bytes = 0;
    int rc;
    for (size_t i = 0; i < t->nvars; i++) {
        const dpt_var_t *v = &t->vars[i];
        if (!sr->owned[i] || sr->no_grad[i])
            continue;
        if (sr->is_sparse[i]) {
            dpt_sparse_rows_t *acc = &sr->avg_rows[sr->packed[i]];
            dpt_sparse_rows_clear(acc);
            for (int r = 0; r < R; r++)
                if ((rc = dpt_sparse_rows_append(acc, &sr->slots[sr->order[r]].rows[sr->packed[i]],
                                                 1.0f)) != 0)
                    return sr_fail(sr, rc, dpt_last_error());
            if ((rc = dpt_sparse_rows_coalesce(acc)) != 0)
                return sr_fail(sr, rc, dpt_last_error());
            dpt_vec_scale(acc->values, acc->n * acc->dim, inv);
            sr->st.sparse_rows_applied += acc->n;
            sumsq += sr_sumsq(acc->values, acc->n * acc->dim);
            continue;
        }
        float *g = sr->avg.data + v->offset;
        dpt_vec_copy(g, sr->slots[sr->order[0]].dense + sr->packed[i], v->count);
        for (int r = 1; r < R; r++)
            dpt_vec_axpy(g, sr->slots[sr->order[r]].dense + sr->packed[i], v->count, 1.0f);
        dpt_vec_scale(g, v->count, inv);
        if (!sr->running[i])
            sumsq += sr_sumsq(g, v->count);
        else if (dpt_vec_first_nonfinite(g, v->count) < v->count)
            sumsq += (double)INFINITY; /* refused below, as a gradient would be */
    }
    for (int r = 0; r < R; r++)
        bytes += sr->slots[r].bytes;
    double norm = sqrt(sumsq);
    sr->st.last_grad_norm = norm;
    if (!isfinite(norm)) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "sync replicas: step %" PRIu64 ": the averaged gradient is not finite; "
                 "nothing was applied",
                 sr->global_step);
        return sr_fail(sr, DPT_ENUMERIC, msg);
    }
    float f = dpt_clip_factor(norm, sr->cfg.grad_clip);
    uint64_t tstep = dpt_optim_get_t(sr->opt) + 1;
    float lr = dpt_schedule_lr(&sr->cfg.schedule, sr->global_step);
    for (size_t i = 0; i < t->nvars; i++) {
        const dpt_var_t *v = &t->vars[i];
        if (!sr->owned[i] || sr->no_grad[i])
            continue;
        if (sr->is_sparse[i]) {
            dpt_sparse_rows_t *acc = &sr->avg_rows[sr->packed[i]];
            if (f != 1.0f)
                dpt_vec_scale(acc->values, acc->n * acc->dim, f);
            if ((rc = dpt_optim_update_sparse(sr->opt, sr->params.data, v->offset, v->shape[0], acc,
                                              tstep, lr)) != 0)
                return sr_fail(sr, rc, dpt_last_error());
        } else {
            if (f != 1.0f && !sr->running[i])
                dpt_vec_scale(sr->avg.data + v->offset, v->count, f);
            dpt_optim_update(sr->opt, sr->params.data, sr->avg.data, v->offset,
                             v->offset + v->count, tstep, lr);
        }
    }
    dpt_optim_set_t(sr->opt, tstep);
    if (sr->ema.data) {
        float d = sr->cfg.ema_decay, e = 1.0f - d;
        for (size_t i = 0; i < t->nvars; i++) {
            const dpt_var_t *v = &t->vars[i];
            if (!sr->owned[i] || sr->no_grad[i])
                continue;
            float *m = sr->ema.data + v->offset;
            const float *p = sr->params.data + v->offset;
            for (size_t j = 0; j < v->count; j++)
                m[j] = d * m[j] + e * p[j];
        }
    }
    for (int r = 0; r < R; r++)
        sr->contributed[sr->slots[r].worker]++;
    sr->global_step++;
    sr->st.global_step = sr->global_step;
    sr->st.bytes_last_step = bytes;
    sr->reserved = sr->filled = 0;
    if (!sr->cfg.no_tokens &&
        (rc = sr_enqueue(sr, sr->global_step, (uint64_t)(N > R ? N : R))) != 0)
        return sr_fail(sr, rc, dpt_last_error());
    pthread_cond_broadcast(&sr->cv);
    return DPT_OK;
}

static int sr_worker_check(dpt_sr_t *sr, int worker, const char *what)
{
    if (worker < 0 || worker >= sr->cfg.total_num_replicas)
        return dpt_error(DPT_EINVAL, "sync replicas: %s by worker %d: workers are 0..%d", what,
                         worker, sr->cfg.total_num_replicas - 1);
    if (sr->lost[worker])
        return dpt_error(DPT_EINVAL, "sync replicas: %s by worker %d, which was marked lost", what,
                         worker);
    return DPT_OK;
}

/* The gradient's values are finite and its sparse indices inside their
 * variables (no lock needed: reads the caller's data and the fixed table). */
static int sr_check_grad(const dpt_sr_t *sr, int worker, const float *grads,
                         const dpt_sparse_rows_t *const *sparse, uint64_t *bytes,
                         uint64_t *sparse_bytes, uint64_t *sparse_rows)
{
    const dpt_vartable_t *t = &sr->vars;
    uint64_t b = 0, sb = 0, rows = 0;
    for (size_t i = 0; i < t->nvars; i++) {
        const dpt_var_t *v = &t->vars[i];
        if (!sr->owned[i] || sr->no_grad[i])
            continue;
        if (!sr->is_sparse[i]) {
            size_t k = dpt_vec_first_nonfinite(grads + v->offset, v->count);
            if (k < v->count)
                return dpt_error(DPT_ENUMERIC,
                                 "sync replicas: worker %d pushed a non-finite gradient of %s "
                                 "(element %zu)",
                                 worker, v->name, k);
            b += (uint64_t)v->count * sizeof(float);
            continue;
        }
        const dpt_sparse_rows_t *g = sparse ? sparse[sr->packed[i]] : NULL;
        if (!g)
            return dpt_error(DPT_EINVAL,
                             "sync replicas: worker %d pushed no sparse gradient for %s", worker,
                             v->name);
        if (g->dim != v->shape[1])
            return dpt_error(DPT_EINVAL,
                             "sync replicas: worker %d: the sparse gradient of %s has rows of "
                             "%zu, the variable %zu",
                             worker, v->name, g->dim, v->shape[1]);
        int rc = dpt_sparse_rows_check(g, v->shape[0]);
        if (rc)
            return rc;
        size_t k = dpt_vec_first_nonfinite(g->values, g->n * g->dim);
        if (k < g->n * g->dim)
            return dpt_error(DPT_ENUMERIC,
                             "sync replicas: worker %d pushed a non-finite gradient of %s "
                             "(row %zu)",
                             worker, v->name, k / g->dim);
        sb += dpt_sparse_rows_bytes(g);
        rows += g->n;
    }
    *sparse_rows = rows;
    *bytes = b + sb;
    *sparse_bytes = sb;
    return DPT_OK;
}

int dpt_sr_push(dpt_sr_t *sr, int worker, uint64_t local_step, const float *grads,
                const dpt_sparse_rows_t *const *sparse, int *accepted)
{
    if (accepted)
        *accepted = 0;
    uint64_t bytes = 0, sbytes = 0, srows = 0;
    pthread_mutex_lock(&sr->mu);
    int rc = sr_worker_check(sr, worker, "a push");
    if (!rc && sr->begun <= 0)
        rc = dpt_error(DPT_ESTATE, "sync replicas: push before the update exists "
                                   "(dpt_sr_begin)");
    if (!rc && sr->failed)
        rc = dpt_error(sr->fail_code, "%s", sr->fail_msg);
    pthread_mutex_unlock(&sr->mu);
    if (rc)
        return rc;
    if ((rc = sr_check_grad(sr, worker, grads, sparse, &bytes, &sbytes, &srows)) != 0)
        return rc;
    pthread_mutex_lock(&sr->mu);
    sr->st.pushes++;
    sr->st.bytes_pushed += bytes;
    sr->st.sparse_bytes_pushed += sbytes;
    sr->st.sparse_rows_pushed += srows;
    uint64_t seq = sr->worker_seq[worker]++;
    sr->last_pushed[worker] = local_step;
    int R = sr->cfg.replicas_to_aggregate;
    if (sr->failed || local_step < sr->global_step || sr->reserved >= R ||
        sr->global_step >= sr->until) {
        sr->st.stale_dropped++;
        rc = sr->failed ? dpt_error(sr->fail_code, "%s", sr->fail_msg) : DPT_OK;
        pthread_mutex_unlock(&sr->mu);
        return rc;
    }
    sr_slot_t *s = &sr->slots[sr->reserved++];
    s->worker = worker;
    s->seq = seq;
    s->bytes = bytes;
    pthread_mutex_unlock(&sr->mu);
    /* The slot is this push's alone until it is marked filled. */
    const dpt_vartable_t *t = &sr->vars;
    for (size_t i = 0; i < t->nvars && !rc; i++) {
        const dpt_var_t *v = &t->vars[i];
        if (!sr->owned[i] || sr->no_grad[i])
            continue;
        if (!sr->is_sparse[i]) {
            dpt_vec_copy(s->dense + sr->packed[i], grads + v->offset, v->count);
        } else {
            dpt_sparse_rows_t *d = &s->rows[sr->packed[i]];
            dpt_sparse_rows_clear(d);
            rc = dpt_sparse_rows_append(d, sparse[sr->packed[i]], 1.0f);
        }
    }
    pthread_mutex_lock(&sr->mu);
    if (rc) {
        rc = sr_fail(sr, rc, dpt_last_error());
    } else {
        if (accepted)
            *accepted = 1;
        if (++sr->filled == R)
            rc = sr_apply(sr);
    }
    pthread_mutex_unlock(&sr->mu);
    return rc;
}

/* Takes a token for `worker` if one may go to it (lock held): tokens older
 * than the global step are dropped first (a gradient at their step could
 * only be stale); with N >= R a worker takes only a token newer than the
 * step it last pushed, so it contributes once per step. Returns 1 with
 * *step set, or 0. */
static int sr_take(dpt_sr_t *sr, int worker, uint64_t *step)
{
    if (sr->cfg.tokens == DPT_SR_TOKENS_FIFO) {
        /* TensorFlow's queue: the oldest token, whatever its step. */
        while (sr->head < sr->tail && sr->runs[sr->head].count == 0)
            sr->head++;
        if (sr->head == sr->tail)
            return 0;
        *step = sr->runs[sr->head].step;
        sr->runs[sr->head].count--;
        sr->tokens_avail--;
        sr->st.tokens_taken++;
        return 1;
    }
    while (sr->head < sr->tail &&
           (sr->runs[sr->head].count == 0 || sr->runs[sr->head].step < sr->global_step)) {
        sr->tokens_avail -= sr->runs[sr->head].count;
        sr->st.tokens_dropped += sr->runs[sr->head].count;
        sr->head++;
    }
    int once = sr->cfg.total_num_replicas >= sr->cfg.replicas_to_aggregate;
    uint64_t last = sr->last_pushed[worker];
    for (size_t i = sr->head; i < sr->tail; i++) {
        sr_run_t *r = &sr->runs[i];
        if (r->count == 0 || (once && last != SR_NONE && r->step <= last))
            continue;
        *step = r->step;
        r->count--;
        sr->tokens_avail--;
        sr->st.tokens_taken++;
        return 1;
    }
    return 0;
}

/* The error of a worker that waited `limit` s for a token (lock held):
 * it names the workers the step waits for (not lost, no gradient of the
 * global step pushed). */
static int sr_token_timeout(dpt_sr_t *sr, int worker, double limit)
{
    char who[160] = "";
    size_t len = 0;
    int n = 0;
    for (int w = 0; w < sr->cfg.total_num_replicas && len < sizeof who; w++) {
        uint64_t last = sr->last_pushed[w];
        if (sr->lost[w] || (last != SR_NONE && last >= sr->global_step))
            continue;
        len += (size_t)snprintf(who + len, sizeof who - len, "%s%d", n++ ? ", " : "", w);
    }
    return dpt_error(DPT_ETIMEDOUT,
                     "sync replicas: global step %" PRIu64 " waits for worker%s %s (no gradient "
                     "of it within %.3g s: stopped, dead or stuck; %d of %d gradients arrived); "
                     "worker %d waited for a token",
                     sr->global_step, n > 1 ? "s" : "", n ? who : "(none: the queue is empty)",
                     limit, sr->filled, sr->cfg.replicas_to_aggregate, worker);
}

int dpt_sr_take_token(dpt_sr_t *sr, int worker, uint64_t *step)
{
    double t0 = dpt_now();
    double limit = sr->cfg.timeout_s;
    struct timespec until = dpt__deadline(limit > 0 ? limit : 0);
    pthread_mutex_lock(&sr->mu);
    int rc = sr_worker_check(sr, worker, "a token request");
    if (!rc && sr->begun <= 0)
        rc = dpt_error(DPT_ESTATE, "sync replicas: tokens requested before the update exists "
                                   "(dpt_sr_begin)");
    int expired = 0;
    while (!rc) {
        if (sr->failed) {
            rc = dpt_error(sr->fail_code, "%s", sr->fail_msg);
        } else if (sr->closed || sr->global_step >= sr->until) {
            rc = DPT_ECLOSED;
            dpt_error(rc, "sync replicas: the session ended at global step %" PRIu64,
                      sr->global_step);
        } else if (sr_take(sr, worker, step)) {
            break;
        } else if (limit > 0) {
            /* A token that came with the deadline is still taken (the
             * checks above ran once more after the wait). */
            if (expired)
                rc = sr_token_timeout(sr, worker, limit);
            else
                expired = pthread_cond_timedwait(&sr->cv, &sr->mu, &until) == ETIMEDOUT;
        } else {
            pthread_cond_wait(&sr->cv, &sr->mu);
        }
    }
    sr->st.token_wait_s += dpt_now() - t0;
    pthread_mutex_unlock(&sr->mu);
    return rc;
}

int dpt_sr_poll_token(dpt_sr_t *sr, int worker, uint64_t *step)
{
    pthread_mutex_lock(&sr->mu);
    int rc = sr_worker_check(sr, worker, "a token request");
    if (!rc && sr->begun <= 0)
        rc = dpt_error(DPT_ESTATE, "sync replicas: tokens requested before the update exists "
                                   "(dpt_sr_begin)");
    else if (!rc && sr->failed)
        rc = dpt_error(sr->fail_code, "%s", sr->fail_msg);
    else if (!rc && sr->closed)
        rc = dpt_error(DPT_ECLOSED, "sync replicas: the service was closed");
    else if (!rc && sr->global_step < sr->until)
        rc = sr_take(sr, worker, step);
    pthread_mutex_unlock(&sr->mu);
    return rc;
}

int dpt_sr_fetch(dpt_sr_t *sr, float *out)
{
    pthread_mutex_lock(&sr->mu);
    int rc = sr->begun <= 0 ? dpt_error(DPT_ESTATE, "sync replicas: fetch before the update "
                                                    "exists (dpt_sr_begin)")
                            : DPT_OK;
    for (size_t i = 0; !rc && i < sr->vars.nvars; i++) {
        const dpt_var_t *v = &sr->vars.vars[i];
        if (!sr->owned[i])
            continue;
        if (!sr->is_sparse[i])
            memcpy(out + v->offset, sr->params.data + v->offset, v->count * sizeof(float));
    }
    pthread_mutex_unlock(&sr->mu);
    return rc;
}

int dpt_sr_fetch_rows(dpt_sr_t *sr, size_t var, const int64_t *idx, size_t n, float *out)
{
    if (var >= sr->vars.nvars || !sr->is_sparse[var] || !sr->owned[var])
        return dpt_error(DPT_EINVAL, "sync replicas: variable %zu is not a sparse variable", var);
    const dpt_var_t *v = &sr->vars.vars[var];
    size_t dim = v->shape[1];
    for (size_t k = 0; k < n; k++)
        if (idx[k] < 0 || (uint64_t)idx[k] >= v->shape[0])
            return dpt_error(DPT_EINVAL,
                             "sync replicas: row %" PRId64 " of %s: the variable has %zu rows",
                             idx[k], v->name, v->shape[0]);
    pthread_mutex_lock(&sr->mu);
    int rc = sr->begun <= 0 ? dpt_error(DPT_ESTATE, "sync replicas: fetch before the update "
                                                    "exists (dpt_sr_begin)")
                            : DPT_OK;
    for (size_t k = 0; !rc && k < n; k++)
        memcpy(out + k * dim, sr->params.data + v->offset + (size_t)idx[k] * dim,
               dim * sizeof(float));
    pthread_mutex_unlock(&sr->mu);
    return rc;
}

int dpt_sr_worker_lost(dpt_sr_t *sr, int worker)
{
    pthread_mutex_lock(&sr->mu);
    int rc = DPT_OK;
    if (worker >= 0 && worker < sr->cfg.total_num_replicas && !sr->lost[worker]) {
        sr->lost[worker] = 1;
        sr->live--;
        sr->st.workers_lost++;
        if (sr->live < sr->cfg.replicas_to_aggregate) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "sync replicas: %d of %d workers were lost; %d remain, fewer than "
                     "replicas_to_aggregate = %d",
                     sr->st.workers_lost, sr->cfg.total_num_replicas, sr->live,
                     sr->cfg.replicas_to_aggregate);
            rc = sr_fail(sr, DPT_ECOMM, msg);
        }
    }
    pthread_mutex_unlock(&sr->mu);
    return rc;
}

void dpt_sr_close(dpt_sr_t *sr)
{
    pthread_mutex_lock(&sr->mu);
    sr->closed = 1;
    pthread_cond_broadcast(&sr->cv);
    pthread_mutex_unlock(&sr->mu);
}

void dpt_sr_get_stats(dpt_sr_t *sr, dpt_sr_stats_t *out)
{
    pthread_mutex_lock(&sr->mu);
    *out = sr->st;
    out->tokens_available = sr->tokens_avail;
    out->failed = sr->failed;
    pthread_mutex_unlock(&sr->mu);
}

uint64_t dpt_sr_worker_contributed(dpt_sr_t *sr, int worker)
{
    if (worker < 0 || worker >= sr->cfg.total_num_replicas)
        return 0;
    pthread_mutex_lock(&sr->mu);
    uint64_t c = sr->contributed[worker];
    pthread_mutex_unlock(&sr->mu);
    return c;
}

int dpt_sr_placement(const dpt_sr_t *sr, int *placement, uint64_t *ps_bytes)
{
    if (placement)
        memcpy(placement, sr->placement, sr->vars.nvars * sizeof(int));
    if (ps_bytes)
        memcpy(ps_bytes, sr->ps_bytes, (size_t)sr->cfg.num_ps * sizeof(uint64_t));
    return sr->cfg.num_ps;
}
