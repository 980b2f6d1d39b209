/*
 * The sync_replicas job under mpirun: the first num_ps ranks are the
 * services (rank 0 the chief: tokens, the run's loop and files; ranks
 * 1 .. num_ps - 1 keep the variables placed on them), every other rank one
 * worker. This file holds both sides of their messages: the services
 * answering (tokens, fetches, pushes, failures), a worker rank's loop
 * (token, fetch, gradient, push), rank 0's gather and scatter of the other
 * services' state, and the finish handshake at the end of the run.
 */
#include "sr_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the messages ------------------------------------------------------------------ */

/* Between the services and the worker ranks. A worker asks rank 0 for a
 * step (TOKEN) and is told GO; asks every service for its variables
 * (FETCH, with the ids of the bags' rows it needs to the service with the
 * table) and gets PARAMS {its dense variables packed in table order, then
 * the rows [n, E]}; pushes PUSH to every service; reports its own failure
 * to rank 0 (FAIL, a message) and, told to finish, says BYE. */
#define SRT_TAG_TOKEN 101
#define SRT_TAG_GO 102
#define SRT_TAG_FETCH 103
#define SRT_TAG_PARAMS 104
#define SRT_TAG_PUSH 105
#define SRT_TAG_FAIL 106
#define SRT_TAG_BYE 107
/* Rank 0 to the other services (num_ps > 1): GATHER {min step} asks for
 * the variables it keeps, with their EMA and optimizer slots, once its
 * global step reached min step (the answer: GATHERED {optimizer step, then
 * the floats}); SCATTER {global step, optimizer step, floats} sets them (a
 * resumed run); FINISH ends it. */
#define SRT_TAG_GATHER 108
#define SRT_TAG_GATHERED 109
#define SRT_TAG_SCATTER 110
#define SRT_TAG_FINISH 111

/* The layouts: every field little-endian, integers and doubles 8 bytes at
 * the offsets below, then the arrays (float32 values, int64 ids), packed
 * with no padding.
 *
 *   GO        step | chunk | shuffle position | finish              32 bytes
 *   FETCH     min step | n | ids[n]                                 16 + 8 n
 *   PARAMS    dense variables | rows [n, E]                         floats
 *   PUSH      local step | n | loss | correct | dense gradient |
 *             ids[n] | rows [n, E]                                  32 + ...
 *   GATHER    min step                                              8 bytes
 *   GATHERED  optimizer step | floats                               8 + ...
 *   SCATTER   global step | optimizer step | floats                 16 + ... */
#define SRT_GO_BYTES 32
#define SRT_FETCH_HEAD 16
#define SRT_PUSH_HEAD 32
#define SRT_GATHER_BYTES 8
#define SRT_GATHERED_HEAD 8
#define SRT_SCATTER_HEAD 16

typedef struct srt_go {
    uint64_t step, chunk, shuffle_pos, finish;
} srt_go_t;

typedef struct srt_fetch_head {
    uint64_t min_step, n;
} srt_fetch_head_t;

typedef struct srt_push_head {
    uint64_t step, n;
    double loss, correct;
} srt_push_head_t;

static void srt_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t srt_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void srt_put_f64(unsigned char *p, double x)
{
    uint64_t v;
    memcpy(&v, &x, sizeof v);
    srt_put_u64(p, v);
}

static double srt_get_f64(const unsigned char *p)
{
    uint64_t v = srt_get_u64(p);
    double x;
    memcpy(&x, &v, sizeof x);
    return x;
}

/* Arrays: a copy where the host is little-endian, else value by value. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SRT_HOST_LE 1
#else
#define SRT_HOST_LE 0
#endif

static void srt_put_f32s(unsigned char *p, const float *x, size_t n)
{
    if (SRT_HOST_LE) {
        memcpy(p, x, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, &x[i], sizeof v);
        for (int j = 0; j < 4; j++)
            p[4 * i + (size_t)j] = (unsigned char)(v >> (8 * j));
    }
}

static void srt_get_f32s(float *x, const unsigned char *p, size_t n)
{
    if (SRT_HOST_LE) {
        memcpy(x, p, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t v = 0;
        for (int j = 0; j < 4; j++)
            v |= (uint32_t)p[4 * i + (size_t)j] << (8 * j);
        memcpy(&x[i], &v, sizeof v);
    }
}

static void srt_put_i64s(unsigned char *p, const int64_t *x, size_t n)
{
    if (SRT_HOST_LE) {
        memcpy(p, x, n * sizeof(int64_t));
        return;
    }
    for (size_t i = 0; i < n; i++)
        srt_put_u64(p + 8 * i, (uint64_t)x[i]);
}

static void srt_get_i64s(int64_t *x, const unsigned char *p, size_t n)
{
    if (SRT_HOST_LE) {
        memcpy(x, p, n * sizeof(int64_t));
        return;
    }
    for (size_t i = 0; i < n; i++)
        x[i] = (int64_t)srt_get_u64(p + 8 * i);
}

static void srt_go_put(unsigned char *p, const srt_go_t *g)
{
    srt_put_u64(p, g->step);
    srt_put_u64(p + 8, g->chunk);
    srt_put_u64(p + 16, g->shuffle_pos);
    srt_put_u64(p + 24, g->finish);
}

static void srt_go_get(const unsigned char *p, srt_go_t *g)
{
    g->step = srt_get_u64(p);
    g->chunk = srt_get_u64(p + 8);
    g->shuffle_pos = srt_get_u64(p + 16);
    g->finish = srt_get_u64(p + 24);
}

static void srt_fetch_put(unsigned char *p, const srt_fetch_head_t *h)
{
    srt_put_u64(p, h->min_step);
    srt_put_u64(p + 8, h->n);
}

static void srt_fetch_get(const unsigned char *p, srt_fetch_head_t *h)
{
    h->min_step = srt_get_u64(p);
    h->n = srt_get_u64(p + 8);
}

static void srt_push_put(unsigned char *p, const srt_push_head_t *h)
{
    srt_put_u64(p, h->step);
    srt_put_u64(p + 8, h->n);
    srt_put_f64(p + 16, h->loss);
    srt_put_f64(p + 24, h->correct);
}

static void srt_push_get(const unsigned char *p, srt_push_head_t *h)
{
    h->step = srt_get_u64(p);
    h->n = srt_get_u64(p + 8);
    h->loss = srt_get_f64(p + 16);
    h->correct = srt_get_f64(p + 24);
}

/* Packing of the variables of service k (all services when k < 0), in
 * table order, as the floats of a message: the dense ones only, or all
 * (with the table). Returns the floats. */
static size_t srt_pack(const srt_t *t, int k, int dense_only, const float *full, unsigned char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < t->vars->nvars; i++) {
        const dpt_var_t *v = &t->vars->vars[i];
        if ((k >= 0 && t->place[i] != k) || (dense_only && t->bags && i == 0))
            continue;
        srt_put_f32s(out + n * sizeof(float), full + v->offset, v->count);
        n += v->count;
    }
    return n;
}

static size_t srt_unpack(const srt_t *t, int k, int dense_only, const unsigned char *in,
                         float *full)
{
    size_t n = 0;
    for (size_t i = 0; i < t->vars->nvars; i++) {
        const dpt_var_t *v = &t->vars->vars[i];
        if ((k >= 0 && t->place[i] != k) || (dense_only && t->bags && i == 0))
            continue;
        srt_get_f32s(full + v->offset, in + n * sizeof(float), v->count);
        n += v->count;
    }
    return n;
}

/* 1 when service k keeps the embedding table (bags). */
int dpt__sr_has_table(const srt_t *t, int k)
{
    return t->bags && t->place[0] == k;
}

/* Receives one message of `tag` from `src` into *buf (malloc'd, the
 * caller frees) checking its size when want > 0. */
static int srt_recv(srt_t *t, int src, int tag, void **buf, size_t *n, size_t want,
                    const char *what)
{
    int rc = dpt_comm_recv(t->comm, src, tag, t->timeout_s, buf, n, NULL, NULL);
    if (rc == DPT_ETIMEDOUT)
        return dpt_error(rc, "sync_replicas: no %s from rank %d within comm_timeout_s = %g s", what,
                         src, t->timeout_s);
    if (rc)
        return rc;
    if (want && *n != want) {
        free(*buf);
        *buf = NULL;
        return dpt_error(DPT_EFORMAT, "sync_replicas: a %s of %zu bytes from rank %d, expected %zu",
                         what, *n, src, want);
    }
    return DPT_OK;
}

int dpt__sr_remote_init(srt_t *t)
{
    size_t N = (size_t)t->N, maxrows = t->bags ? t->b * t->nids : 0;
    size_t floats = t->dense_count + maxrows * t->edim;
    int rc;
    t->rk.msg_cap = 64 + floats * sizeof(float) + maxrows * sizeof(int64_t);
    t->rk.pack = malloc(floats * sizeof(float) + 64);
    t->rk.msg = malloc(t->rk.msg_cap);
    t->rk.pending = calloc(N, 1);
    t->rk.told = calloc(N, 1);
    t->rk.byed = calloc(N, 1);
    t->rk.need_start = calloc(N, 1);
    t->rk.rlost = calloc(N, 1);
    t->rk.assigned = calloc(N, sizeof(uint64_t));
    t->rk.rloss = calloc(N, sizeof(double));
    t->rk.rcorrect = calloc(N, sizeof(double));
    t->rk.rrows = calloc(N, sizeof(uint64_t));
    t->rk.rpushes = calloc(N, sizeof(uint64_t));
    t->rk.fmsg = calloc(N, sizeof(void *));
    t->rk.fmsg_n = calloc(N, sizeof(size_t));
    if (!t->rk.pack || !t->rk.msg || !t->rk.pending || !t->rk.told || !t->rk.byed ||
        !t->rk.need_start || !t->rk.rlost || !t->rk.assigned || !t->rk.rloss || !t->rk.rcorrect ||
        !t->rk.rrows || !t->rk.rpushes || !t->rk.fmsg || !t->rk.fmsg_n)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the message buffers");
    if (t->role != SRT_WORKER &&
        ((rc = dpt_arena_init(&t->rk.in_grads, t->vars->total)) != 0 ||
         (t->bags && (rc = dpt_sparse_rows_init(&t->rk.in_rows, t->edim, maxrows)) != 0)))
        return rc;
    return DPT_OK;
}

void dpt__sr_remote_free(srt_t *t)
{
    if (t->rk.fmsg)
        for (int i = 0; i < t->N; i++)
            free(t->rk.fmsg[i]);
    free(t->rk.fmsg);
    free(t->rk.fmsg_n);
    free(t->rk.pending);
    free(t->rk.told);
    free(t->rk.byed);
    free(t->rk.need_start);
    free(t->rk.rlost);
    free(t->rk.assigned);
    free(t->rk.rloss);
    free(t->rk.rcorrect);
    free(t->rk.rrows);
    free(t->rk.rpushes);
    free(t->rk.pack);
    free(t->rk.msg);
    dpt_sparse_rows_deinit(&t->rk.in_rows);
    dpt_arena_deinit(&t->rk.in_grads);
}

/* ---- a worker rank's fetch ---------------------------------------------------------- */

int dpt__sr_remote_fetch(srt_worker_t *w, const int64_t *ids, size_t n)
{
    srt_t *t = w->t;
    int rc;
    /* FETCH {min step, n, ids} to every service (the ids to the one with
     * the table), then their PARAMS; a service answers once its global step
     * reached the step this gradient is for. */
    size_t E = t->edim;
    for (int k = 0; k < t->P; k++) {
        srt_fetch_head_t h = {t->rk.cur_step, dpt__sr_has_table(t, k) ? (uint64_t)n : 0};
        srt_fetch_put(t->rk.msg, &h);
        if (h.n)
            srt_put_i64s(t->rk.msg + SRT_FETCH_HEAD, ids, h.n);
        if ((rc = dpt_comm_send(t->comm, k, SRT_TAG_FETCH, t->rk.msg,
                                SRT_FETCH_HEAD + h.n * sizeof(int64_t))) != 0)
            return rc;
    }
    for (int k = 0; k < t->P; k++) {
        size_t rows = dpt__sr_has_table(t, k) ? n : 0;
        void *buf = NULL;
        size_t got = 0;
        if ((rc = srt_recv(t, k, SRT_TAG_PARAMS, &buf, &got,
                           (t->svc_dense[k] + rows * E) * sizeof(float),
                           "reply with the variables")) != 0)
            return rc;
        const unsigned char *m = buf;
        srt_unpack(t, k, 1, m, w->params.data);
        if (rows)
            srt_get_f32s(w->rows, m + t->svc_dense[k] * sizeof(float), rows * E);
        free(buf);
    }
    return DPT_OK;
}

/* ---- the service of worker ranks (mpirun) ----------------------------------------- */

/* Tells worker w to compute its next gradient at `step` (or to finish). */
static int srt_go(srt_t *t, int w, uint64_t step, int finish)
{
    unsigned char *m = malloc(SRT_GO_BYTES);
    if (!m)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer worker %d", w);
    srt_go_t go = {step, 0, t->shuffle_pos, (uint64_t)finish};
    if (!finish) {
        go.chunk = (t->rk.assigned[w] * (uint64_t)t->N + (uint64_t)w) % t->nchunks;
        t->rk.assigned[w]++;
    }
    srt_go_put(m, &go);
    /* Replies never wait for the worker: one stopped (SIGSTOP) must not
     * stop the service. */
    return dpt_comm_send_async(t->comm, w + t->P, SRT_TAG_GO, m, SRT_GO_BYTES);
}

/* Answers worker w's fetch {min step, n, ids} with this service's dense
 * variables and the rows asked for. Returns 1 when the service's global
 * step has not reached min step yet (the fetch waits), else 0 or an
 * error. */
static int srt_answer_fetch(srt_t *t, int w, const unsigned char *m, size_t n)
{
    srt_fetch_head_t h = {0, 0};
    size_t E = t->edim;
    if (n >= SRT_FETCH_HEAD)
        srt_fetch_get(m, &h);
    if (n < SRT_FETCH_HEAD || n != SRT_FETCH_HEAD + h.n * sizeof(int64_t) || h.n > t->b * t->nids ||
        (h.n && !dpt__sr_has_table(t, t->svc)))
        return dpt_error(DPT_EFORMAT, "sync_replicas: a malformed fetch from rank %d", w + t->P);
    if (dpt_sr_global_step(t->sr) < h.min_step)
        return 1;
    int rc = dpt_sr_fetch(t->sr, t->rk.in_grads.data);
    if (rc)
        return rc;
    if (h.n) {
        /* The rows, staged in t->rk.pack. */
        int64_t *ids = malloc(h.n * sizeof *ids);
        if (!ids)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a fetch");
        srt_get_i64s(ids, m + SRT_FETCH_HEAD, h.n);
        rc = dpt_sr_fetch_rows(t->sr, 0, ids, h.n, t->rk.pack);
        free(ids);
        if (rc)
            return rc;
    }
    size_t dense = t->svc_dense[t->svc];
    size_t bytes = (dense + h.n * E) * sizeof(float);
    unsigned char *reply = malloc(bytes ? bytes : 1);
    if (!reply)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a fetch");
    srt_pack(t, t->svc, 1, t->rk.in_grads.data, reply);
    if (h.n)
        srt_put_f32s(reply + dense * sizeof(float), t->rk.pack, h.n * E);
    return dpt_comm_send_async(t->comm, w + t->P, SRT_TAG_PARAMS, reply, bytes);
}

/* Answers the fetches that waited for the global step. */
static int srt_answer_waiting(srt_t *t)
{
    for (int w = 0; w < t->N; w++) {
        if (!t->rk.fmsg[w])
            continue;
        int rc = srt_answer_fetch(t, w, t->rk.fmsg[w], t->rk.fmsg_n[w]);
        if (rc == 1)
            continue;
        free(t->rk.fmsg[w]);
        t->rk.fmsg[w] = NULL;
        if (rc)
            return rc;
    }
    return DPT_OK;
}

/* Worker w is out (its gradient or its env failed): told to finish at
 * once (it says BYE and ends with exit 0), left out of the steps; the
 * service fails when fewer than R workers remain. */
static int srt_lose(srt_t *t, int w)
{
    if (t->rk.rlost[w])
        return DPT_OK;
    t->rk.rlost[w] = 1;
    free(t->rk.fmsg[w]);
    t->rk.fmsg[w] = NULL;
    t->rk.pending[w] = 0;
    int rc = t->svc == 0 && !t->rk.told[w] ? srt_go(t, w, 0, 1) : DPT_OK;
    t->rk.told[w] = 1;
    int lost = dpt_sr_worker_lost(t->sr, w);
    return rc ? rc : lost;
}

/* Worker w's push to this service: its part of the dense gradient and,
 * on the service with the table, the sparse rows. A gradient the service
 * refuses as bad loses the worker, not the service. */
static int srt_take_push(srt_t *t, int w, const unsigned char *m, size_t n)
{
    size_t E = t->edim;
    srt_push_head_t h;
    int rc;
    if (n < SRT_PUSH_HEAD)
        return dpt_error(DPT_EFORMAT, "sync_replicas: a malformed push from rank %d", w + t->P);
    srt_push_get(m, &h);
    uint64_t k = h.n;
    size_t dense = t->svc_dense[t->svc];
    size_t want = SRT_PUSH_HEAD + dense * sizeof(float) + k * (sizeof(int64_t) + E * sizeof(float));
    if (n != want || (!dpt__sr_has_table(t, t->svc) && k) || k > t->b * t->nids)
        return dpt_error(DPT_EFORMAT, "sync_replicas: a push of %zu bytes from rank %d", n,
                         w + t->P);
    const unsigned char *ids = m + SRT_PUSH_HEAD + dense * sizeof(float);
    const unsigned char *rows = ids + k * sizeof(int64_t);
    srt_unpack(t, t->svc, 1, m + SRT_PUSH_HEAD, t->rk.in_grads.data);
    const dpt_sparse_rows_t *list[1] = {&t->rk.in_rows};
    if (t->bags) {
        /* (empty on a service without the table, which ignores it) */
        dpt_sparse_rows_clear(&t->rk.in_rows);
        for (uint64_t j = 0; j < k; j++) {
            float *row;
            int64_t id = (int64_t)srt_get_u64(ids + j * sizeof(int64_t));
            if ((rc = dpt_sparse_rows_add(&t->rk.in_rows, id, NULL, &row)) != 0)
                return rc;
            srt_get_f32s(row, rows + j * E * sizeof(float), E);
        }
    }
    int accepted = 0;
    rc = dpt_sr_push(t->sr, w, h.step, t->rk.in_grads.data, t->bags ? list : NULL, &accepted);
    dpt_sr_stats_t st;
    dpt_sr_get_stats(t->sr, &st);
    if ((rc == DPT_EINVAL || rc == DPT_ENUMERIC) && !st.failed) {
        /* That worker's gradient is bad (not the service): it is lost,
         * the others go on. */
        snprintf(t->rk.remote_err, sizeof t->rk.remote_err, "worker %d (rank %d): %s", w, w + t->P,
                 dpt_last_error());
        return srt_lose(t, w);
    }
    if (rc)
        return rc;
    t->rk.rpushes[w]++;
    t->w[w].rows_touched += k;
    if (accepted) {
        t->rk.rloss[w] += h.loss * (double)t->b;
        t->rk.rcorrect[w] += h.correct;
        t->rk.rrows[w] += t->b;
    }
    return DPT_OK;
}

/* One message of worker w (rank w + P) to this service. */
static int srt_serve(srt_t *t, int w, int tag, const unsigned char *m, size_t n)
{
    int rc;
    switch (tag) {
    case SRT_TAG_TOKEN:
        if (t->rk.need_start[w]) {
            /* Its first step of the session: the global step (the chief's
             * init), no token. */
            t->rk.need_start[w] = 0;
            return srt_go(t, w, dpt_sr_global_step(t->sr), 0);
        }
        t->rk.pending[w] = 1;
        return DPT_OK;
    case SRT_TAG_FETCH: {
        rc = srt_answer_fetch(t, w, m, n);
        if (rc != 1)
            return rc;
        /* Not at that step yet: kept until it is (one fetch per worker). */
        void *copy = malloc(n);
        if (!copy)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot keep a fetch");
        memcpy(copy, m, n);
        free(t->rk.fmsg[w]);
        t->rk.fmsg[w] = copy;
        t->rk.fmsg_n[w] = n;
        return DPT_OK;
    }
    case SRT_TAG_PUSH: return srt_take_push(t, w, m, n);
    case SRT_TAG_FAIL:
        snprintf(t->rk.remote_err, sizeof t->rk.remote_err, "worker %d (rank %d): %.*s", w,
                 w + t->P, (int)(n < 280 ? n : 280), (const char *)m);
        return srt_lose(t, w);
    case SRT_TAG_BYE: t->rk.byed[w] = 1; return DPT_OK;
    default: return DPT_OK; /* a late message of a finished exchange */
    }
}

/* One session of the service for its worker ranks: until the global step
 * reaches `until`, answer every message; tokens go to workers that wait
 * for one as soon as the service has one for them. */
int dpt__sr_remote_session(srt_t *t, uint64_t until)
{
    int rc = dpt_sr_begin(t->sr, -1, until);
    for (int w = 0; !rc && w < t->N; w++) {
        t->rk.assigned[w] = 0;
        t->rk.rloss[w] = t->rk.rcorrect[w] = 0.0;
        t->rk.rrows[w] = t->rk.rpushes[w] = 0;
        t->w[w].rows_touched = 0;
        t->rk.need_start[w] = !t->rk.rlost[w];
        if (t->rk.pending[w] && !t->rk.rlost[w]) {
            t->rk.pending[w] = 0;
            t->rk.need_start[w] = 0;
            rc = srt_go(t, w, dpt_sr_global_step(t->sr), 0);
        }
    }
    while (!rc && dpt_sr_global_step(t->sr) < until) {
        void *m = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        rc = dpt_comm_recv(t->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, t->timeout_s, &m, &n,
                           &src, &tag);
        if (rc == DPT_ETIMEDOUT)
            rc = dpt_error(rc,
                           "sync_replicas: no worker rank sent anything for comm_timeout_s = %g s "
                           "(global step %" PRIu64 ", session until %" PRIu64 ")",
                           t->timeout_s, dpt_sr_global_step(t->sr), until);
        if (!rc && src >= t->P && src < t->P + t->N &&
            (!t->rk.rlost[src - t->P] || tag == SRT_TAG_BYE))
            rc = srt_serve(t, src - t->P, tag, m, n);
        free(m);
        if (!rc)
            rc = srt_answer_waiting(t);
        for (int w = 0; !rc && w < t->N; w++) {
            uint64_t step;
            if (!t->rk.pending[w] || t->rk.rlost[w])
                continue;
            int got = dpt_sr_poll_token(t->sr, w, &step);
            if (got < 0)
                rc = got;
            else if (got) {
                t->rk.pending[w] = 0;
                rc = srt_go(t, w, step, 0);
            }
        }
    }
    return rc;
}

/* The end of the run: every worker rank is told to finish; the service
 * answers fetches until each has said BYE (a worker stopped or gone is
 * waited for at most comm_timeout_s in all). Best effort: nothing to
 * report to. */
void dpt__sr_remote_finish(srt_t *t)
{
    int left = 0;
    if (!t->comm || !t->rk.told || !t->rk.byed)
        return;
    for (int w = 0; w < t->N; w++) {
        if (!t->rk.told[w] && srt_go(t, w, 0, 1) == DPT_OK)
            t->rk.told[w] = 1;
        if (t->rk.told[w] && !t->rk.byed[w])
            left++;
    }
    double until = dpt_now() + t->timeout_s;
    while (left > 0 && dpt_now() < until) {
        void *m = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        if (dpt_comm_recv(t->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, until - dpt_now(), &m, &n,
                          &src, &tag) != DPT_OK)
            break;
        int w = src - t->P;
        if (w >= 0 && w < t->N && !t->rk.byed[w]) {
            if (tag == SRT_TAG_BYE) {
                t->rk.byed[w] = 1;
                left--;
            } else if (tag == SRT_TAG_FETCH && !t->rk.rlost[w]) {
                srt_serve(t, w, tag, m, n);
            }
        }
        free(m);
    }
    /* The other services answered the workers' last fetches meanwhile. */
    for (int k = 1; k < t->P; k++)
        dpt_comm_send_async(t->comm, k, SRT_TAG_FINISH, NULL, 0);
}

/* ---- several services (num_ps > 1 under mpirun) -------------------------------------- */

/* The floats a service exchanges with rank 0 in GATHERED and SCATTER: its
 * variables, then their EMA (with ema_decay), then each optimizer slot. */
static size_t srt_state_floats(const srt_t *t, int k)
{
    int slots = dpt_optim_num_slots(dpt_sr_optimizer(t->sr));
    return t->svc_all[k] * (size_t)(1 + (t->ema_decay > 0.0f) + slots);
}

static void srt_state_pack(srt_t *t, int k, unsigned char *out)
{
    dpt_optim_t *o = dpt_sr_optimizer(t->sr);
    size_t n = srt_pack(t, k, 0, dpt_sr_params(t->sr), out);
    if (t->ema_decay > 0.0f)
        n += srt_pack(t, k, 0, dpt_sr_ema(t->sr), out + n * sizeof(float));
    for (int j = 0; j < dpt_optim_num_slots(o); j++)
        n += srt_pack(t, k, 0, dpt_optim_slot(o, j), out + n * sizeof(float));
}

static void srt_state_unpack(srt_t *t, int k, const unsigned char *in)
{
    dpt_optim_t *o = dpt_sr_optimizer(t->sr);
    size_t n = srt_unpack(t, k, 0, in, dpt_sr_params(t->sr));
    if (t->ema_decay > 0.0f)
        n += srt_unpack(t, k, 0, in + n * sizeof(float), dpt_sr_ema(t->sr));
    for (int j = 0; j < dpt_optim_num_slots(o); j++)
        n += srt_unpack(t, k, 0, in + n * sizeof(float), dpt_optim_slot(o, j));
}

/* Rank 0: the other services' variables (and EMA and slots) once each
 * reached global step `min`, into rank 0's copy of the whole table. */
int dpt__sr_gather(srt_t *t, uint64_t min)
{
    int rc = DPT_OK;
    unsigned char ask[SRT_GATHER_BYTES];
    srt_put_u64(ask, min);
    for (int k = 1; !rc && k < t->P; k++)
        rc = dpt_comm_send(t->comm, k, SRT_TAG_GATHER, ask, sizeof ask);
    for (int k = 1; !rc && k < t->P; k++) {
        void *m = NULL;
        size_t n = 0;
        rc = srt_recv(t, k, SRT_TAG_GATHERED, &m, &n,
                      SRT_GATHERED_HEAD + srt_state_floats(t, k) * sizeof(float),
                      "variables of a service");
        /* (the service's optimizer step, its head, is rank 0's too) */
        if (!rc)
            srt_state_unpack(t, k, (const unsigned char *)m + SRT_GATHERED_HEAD);
        free(m);
    }
    return rc;
}

/* Rank 0 after a restore: every other service gets its part and the step. */
int dpt__sr_scatter(srt_t *t)
{
    for (int k = 1; k < t->P; k++) {
        size_t bytes = SRT_SCATTER_HEAD + srt_state_floats(t, k) * sizeof(float);
        unsigned char *m = malloc(bytes);
        if (!m)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot send a service its state");
        srt_put_u64(m, dpt_sr_global_step(t->sr));
        srt_put_u64(m + 8, dpt_optim_get_t(dpt_sr_optimizer(t->sr)));
        srt_state_pack(t, k, m + SRT_SCATTER_HEAD);
        int rc = dpt_comm_send(t->comm, k, SRT_TAG_SCATTER, m, bytes);
        free(m);
        if (rc)
            return rc;
    }
    return DPT_OK;
}

/* Ranks 1 .. num_ps - 1: a service of the variables placed on it, for the
 * whole run: the workers' pushes and fetches, rank 0's gathers and
 * scatters, until rank 0 says FINISH. */
int dpt__sr_shard_loop(srt_t *t)
{
    int rc = dpt_sr_begin(t->sr, -1, UINT64_MAX);
    int gather = 0;
    uint64_t gather_min = 0;
    size_t state = srt_state_floats(t, t->svc);
    while (!rc) {
        void *m = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        rc = dpt_comm_recv(t->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, t->timeout_s, &m, &n,
                           &src, &tag);
        if (rc == DPT_ETIMEDOUT)
            rc = dpt_error(rc,
                           "sync_replicas: service %d (rank %d) heard nothing for comm_timeout_s = "
                           "%g s",
                           t->svc, t->svc, t->timeout_s);
        if (rc)
            break;
        if (src == 0 && tag == SRT_TAG_FINISH) {
            free(m);
            return DPT_OK;
        } else if (src == 0 && tag == SRT_TAG_GATHER && n == SRT_GATHER_BYTES) {
            gather_min = srt_get_u64(m);
            gather = 1;
        } else if (src == 0 && tag == SRT_TAG_SCATTER &&
                   n == SRT_SCATTER_HEAD + state * sizeof(float)) {
            const unsigned char *p = m;
            srt_state_unpack(t, t->svc, p + SRT_SCATTER_HEAD);
            dpt_optim_set_t(dpt_sr_optimizer(t->sr), srt_get_u64(p + 8));
            dpt_sr_set_global_step(t->sr, srt_get_u64(p));
            rc = dpt_sr_begin(t->sr, -1, UINT64_MAX);
        } else if (src == 0) {
            rc = dpt_error(DPT_EFORMAT,
                           "sync_replicas: service %d: a malformed message (tag %d) "
                           "from rank 0",
                           t->svc, tag);
        } else if (src >= t->P && src < t->P + t->N && !t->rk.rlost[src - t->P]) {
            rc = srt_serve(t, src - t->P, tag, m, n);
        }
        free(m);
        if (!rc)
            rc = srt_answer_waiting(t);
        if (!rc && gather && dpt_sr_global_step(t->sr) >= gather_min) {
            size_t bytes = SRT_GATHERED_HEAD + state * sizeof(float);
            unsigned char *out = malloc(bytes);
            if (!out)
                return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a gather");
            srt_put_u64(out, dpt_optim_get_t(dpt_sr_optimizer(t->sr)));
            srt_state_pack(t, t->svc, out + SRT_GATHERED_HEAD);
            rc = dpt_comm_send_async(t->comm, 0, SRT_TAG_GATHERED, out, bytes);
            gather = 0;
        }
    }
    return rc;
}

/* ---- a worker rank ---------------------------------------------------------------- */

/* Receives the service's next word (GO). */
static int srt_recv_go(srt_t *t, srt_go_t *go)
{
    void *m = NULL;
    size_t n = 0;
    int rc = srt_recv(t, 0, SRT_TAG_GO, &m, &n, SRT_GO_BYTES, "word from the service");
    if (!rc)
        srt_go_get(m, go);
    free(m);
    return rc;
}

/* Waits for the service's word to finish, answering nothing (a worker that
 * failed, or one whose gradients are no longer wanted). */
static int srt_wait_finish(srt_t *t)
{
    for (;;) {
        srt_go_t go;
        int rc = srt_recv_go(t, &go);
        if (rc)
            return rc;
        if (go.finish)
            return dpt_comm_send(t->comm, 0, SRT_TAG_BYE, NULL, 0);
    }
}

/* PUSH of the gradient for `step` to every service: its dense part, and
 * the sparse rows to the one with the table. */
static int srt_push(srt_t *t, srt_worker_t *w, uint64_t step, double loss, double correct)
{
    size_t E = t->edim;
    int rc = DPT_OK;
    for (int ks = 0; !rc && ks < t->P; ks++) {
        srt_push_head_t h = {step, dpt__sr_has_table(t, ks) ? w->grad_rows.n : 0, loss, correct};
        unsigned char *p = t->rk.msg;
        srt_push_put(p, &h);
        p += SRT_PUSH_HEAD;
        p += srt_pack(t, ks, 1, w->grads.data, p) * sizeof(float);
        if (h.n) {
            srt_put_i64s(p, w->grad_rows.indices, h.n);
            p += h.n * sizeof(int64_t);
            srt_put_f32s(p, w->grad_rows.values, h.n * E);
            p += h.n * E * sizeof(float);
        }
        rc = dpt_comm_send(t->comm, ks, SRT_TAG_PUSH, t->rk.msg, (size_t)(p - t->rk.msg));
    }
    return rc;
}

int dpt__sr_worker_loop(srt_t *t)
{
    srt_worker_t *w = &t->w[0];
    uint64_t pos = UINT64_MAX;
    int rc = dpt_comm_send(t->comm, 0, SRT_TAG_TOKEN, NULL, 0);
    while (!rc) {
        srt_go_t go;
        if ((rc = srt_recv_go(t, &go)) != 0)
            break;
        if (go.finish)
            return dpt_comm_send(t->comm, 0, SRT_TAG_BYE, NULL, 0);
        if (go.shuffle_pos != pos) {
            pos = go.shuffle_pos;
            dpt__sr_perm(t, pos);
        }
        double loss = 0.0, correct = 0.0;
        t->rk.cur_step = go.step;
        if ((rc = dpt__sr_grad(w, (size_t)go.chunk, &loss, &correct)) != 0) {
            /* This worker is out; the service decides whether the others
             * go on. */
            const char *e = dpt_last_error();
            rc = dpt_comm_send(t->comm, 0, SRT_TAG_FAIL, e, strlen(e) + 1);
            return rc ? rc : srt_wait_finish(t);
        }
        if ((rc = srt_push(t, w, go.step, loss, correct)) != 0)
            break;
        rc = dpt_comm_send(t->comm, 0, SRT_TAG_TOKEN, NULL, 0);
    }
    return rc;
}
