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

/* Messages between the service (rank 0) and its worker ranks. A worker
 * asks for a step (TOKEN) and is told GO {step, chunk, shuffle position,
 * finish}; asks for the variables (FETCH {n, ids[n]}: the bags' rows it
 * needs) and gets PARAMS {dense variables packed in table order, rows
 * [n, E]}; pushes PUSH {local step, n, loss, correct, dense gradient
 * packed, ids[n], rows [n, E]}; reports its own failure (FAIL, a message)
 * and, told to finish, says BYE. Native byte order: the ranks run the same
 * build. */
#define SRT_TAG_TOKEN 101
#define SRT_TAG_GO 102
#define SRT_TAG_FETCH 103
#define SRT_TAG_PARAMS 104
#define SRT_TAG_PUSH 105
#define SRT_TAG_FAIL 106
#define SRT_TAG_BYE 107
/* rank 0 to the other services (num_ps > 1): GATHER {min step} asks for
 * the variables it keeps, with their optimizer slots and EMA, once its
 * global step reached min step (the answer: GATHERED {optimizer step, then
 * the floats}); SCATTER {global step, optimizer step, floats} sets them (a
 * resumed run); FINISH ends it. */
#define SRT_TAG_GATHER 108
#define SRT_TAG_GATHERED 109
#define SRT_TAG_SCATTER 110
#define SRT_TAG_FINISH 111
#define SRT_GO_WORDS 4

/* Packing of the variables of service k (all services when k < 0), in
 * table order: the dense ones only, or all (with the table). */
static size_t srt_pack(const srt_t *t, int k, int dense_only, const float *full, float *packed)
{
    size_t n = 0;
    for (size_t i = 0; i < t->vars->nvars; i++) {
        const dpt_var_t *v = &t->vars->vars[i];
        if ((k >= 0 && t->place[i] != k) || (dense_only && t->bags && i == 0))
            continue;
        memcpy(packed + n, full + v->offset, v->count * sizeof(float));
        n += v->count;
    }
    return n;
}

static size_t srt_unpack(const srt_t *t, int k, int dense_only, const float *packed, float *full)
{
    size_t n = 0;
    for (size_t i = 0; i < t->vars->nvars; i++) {
        const dpt_var_t *v = &t->vars->vars[i];
        if ((k >= 0 && t->place[i] != k) || (dense_only && t->bags && i == 0))
            continue;
        memcpy(full + v->offset, packed + n, v->count * sizeof(float));
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
    t->msg_cap = 64 + floats * sizeof(float) + maxrows * sizeof(int64_t);
    t->pack = malloc(floats * sizeof(float) + 64);
    t->msg = malloc(t->msg_cap);
    t->pending = calloc(N, 1);
    t->told = calloc(N, 1);
    t->byed = calloc(N, 1);
    t->need_start = calloc(N, 1);
    t->rlost = calloc(N, 1);
    t->assigned = calloc(N, sizeof(uint64_t));
    t->rloss = calloc(N, sizeof(double));
    t->rcorrect = calloc(N, sizeof(double));
    t->rrows = calloc(N, sizeof(uint64_t));
    t->rpushes = calloc(N, sizeof(uint64_t));
    t->fmsg = calloc(N, sizeof(void *));
    t->fmsg_n = calloc(N, sizeof(size_t));
    if (!t->pack || !t->msg || !t->pending || !t->told || !t->byed || !t->need_start || !t->rlost ||
        !t->assigned || !t->rloss || !t->rcorrect || !t->rrows || !t->rpushes || !t->fmsg ||
        !t->fmsg_n)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot allocate the message buffers");
    if (t->role != SRT_WORKER &&
        ((rc = dpt_arena_init(&t->in_grads, t->vars->total)) != 0 ||
         (t->bags && (rc = dpt_sparse_rows_init(&t->in_rows, t->edim, maxrows)) != 0)))
        return rc;
    return DPT_OK;
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
        uint64_t head[2] = {t->cur_step, dpt__sr_has_table(t, k) ? (uint64_t)n : 0};
        memcpy(t->msg, head, sizeof head);
        if (head[1])
            memcpy(t->msg + sizeof head, ids, n * sizeof(int64_t));
        if ((rc = dpt_comm_send(t->comm, k, SRT_TAG_FETCH, t->msg,
                                sizeof head + head[1] * sizeof(int64_t))) != 0)
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
        memcpy(t->pack, buf, got);
        free(buf);
        srt_unpack(t, k, 1, t->pack, w->params.data);
        if (rows)
            memcpy(w->rows, t->pack + t->svc_dense[k], rows * E * sizeof(float));
    }
    return DPT_OK;
}

/* ---- the service of worker ranks (mpirun) ----------------------------------------- */

/* Tells worker w to compute its next gradient at `step` (or to finish). */
static int srt_go(srt_t *t, int w, uint64_t step, int finish)
{
    uint64_t *go = malloc(SRT_GO_WORDS * sizeof *go);
    if (!go)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer worker %d", w);
    go[0] = step;
    go[1] = 0;
    go[2] = t->shuffle_pos;
    go[3] = (uint64_t)finish;
    if (!finish) {
        go[1] = (t->assigned[w] * (uint64_t)t->N + (uint64_t)w) % t->nchunks;
        t->assigned[w]++;
    }
    /* Replies never wait for the worker: one stopped (SIGSTOP) must not
     * stop the service. */
    return dpt_comm_send_async(t->comm, w + t->P, SRT_TAG_GO, go, SRT_GO_WORDS * sizeof *go);
}

/* Answers worker w's fetch {min step, n, ids} with this service's dense
 * variables and the rows asked for. Returns 1 when the service's global
 * step has not reached min step yet (the fetch waits), else 0 or an
 * error. */
static int srt_answer_fetch(srt_t *t, int w, const unsigned char *m, size_t n)
{
    uint64_t head[2];
    size_t E = t->edim;
    if (n < sizeof head || (memcpy(head, m, sizeof head), n != sizeof head + head[1] * 8) ||
        head[1] > t->b * t->nids || (head[1] && !dpt__sr_has_table(t, t->svc)))
        return dpt_error(DPT_EFORMAT, "sync_replicas: a malformed fetch from rank %d", w + t->P);
    if (dpt_sr_global_step(t->sr) < head[0])
        return 1;
    uint64_t k = head[1];
    int rc = dpt_sr_fetch(t->sr, t->in_grads.data);
    if (rc)
        return rc;
    size_t dense = srt_pack(t, t->svc, 1, t->in_grads.data, t->pack);
    if (k) {
        int64_t *ids = malloc(k * sizeof *ids);
        if (!ids)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a fetch");
        memcpy(ids, m + sizeof head, k * sizeof *ids);
        rc = dpt_sr_fetch_rows(t->sr, 0, ids, k, t->pack + dense);
        free(ids);
        if (rc)
            return rc;
    }
    size_t bytes = (dense + k * E) * sizeof(float);
    void *reply = malloc(bytes ? bytes : 1);
    if (!reply)
        return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a fetch");
    memcpy(reply, t->pack, bytes);
    return dpt_comm_send_async(t->comm, w + t->P, SRT_TAG_PARAMS, reply, bytes);
}

/* Answers the fetches that waited for the global step. */
static int srt_answer_waiting(srt_t *t)
{
    for (int w = 0; w < t->N; w++) {
        if (!t->fmsg[w])
            continue;
        int rc = srt_answer_fetch(t, w, t->fmsg[w], t->fmsg_n[w]);
        if (rc == 1)
            continue;
        free(t->fmsg[w]);
        t->fmsg[w] = NULL;
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
    if (t->rlost[w])
        return DPT_OK;
    t->rlost[w] = 1;
    free(t->fmsg[w]);
    t->fmsg[w] = NULL;
    t->pending[w] = 0;
    int rc = t->svc == 0 && !t->told[w] ? srt_go(t, w, 0, 1) : DPT_OK;
    t->told[w] = 1;
    int lost = dpt_sr_worker_lost(t->sr, w);
    return rc ? rc : lost;
}

/* One message of worker w (rank w + P) to this service. */
static int srt_serve(srt_t *t, int w, int tag, const unsigned char *m, size_t n)
{
    size_t E = t->edim;
    int rc;
    switch (tag) {
    case SRT_TAG_TOKEN:
        if (t->need_start[w]) {
            /* Its first step of the session: the global step (the chief's
             * init), no token. */
            t->need_start[w] = 0;
            return srt_go(t, w, dpt_sr_global_step(t->sr), 0);
        }
        t->pending[w] = 1;
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
        free(t->fmsg[w]);
        t->fmsg[w] = copy;
        t->fmsg_n[w] = n;
        return DPT_OK;
    }
    case SRT_TAG_PUSH: {
        uint64_t local, k;
        double loss, correct;
        if (n < 32)
            return dpt_error(DPT_EFORMAT, "sync_replicas: a malformed push from rank %d", w + t->P);
        memcpy(&local, m, 8);
        memcpy(&k, m + 8, 8);
        memcpy(&loss, m + 16, 8);
        memcpy(&correct, m + 24, 8);
        size_t dense = t->svc_dense[t->svc];
        size_t want = 32 + dense * sizeof(float) + k * (sizeof(int64_t) + E * 4);
        if (n != want || (!dpt__sr_has_table(t, t->svc) && k) || k > t->b * t->nids)
            return dpt_error(DPT_EFORMAT, "sync_replicas: a push of %zu bytes from rank %d", n,
                             w + t->P);
        const unsigned char *p = m + 32;
        memcpy(t->pack, p, dense * sizeof(float));
        srt_unpack(t, t->svc, 1, t->pack, t->in_grads.data);
        p += dense * sizeof(float);
        const dpt_sparse_rows_t *list[1] = {&t->in_rows};
        if (t->bags) {
            /* (empty on a service without the table, which ignores it) */
            dpt_sparse_rows_clear(&t->in_rows);
            for (uint64_t j = 0; j < k; j++) {
                int64_t id;
                float *row;
                memcpy(&id, p + j * sizeof(int64_t), sizeof id);
                if ((rc = dpt_sparse_rows_add(&t->in_rows, id, NULL, &row)) != 0)
                    return rc;
                memcpy(row, p + k * sizeof(int64_t) + j * E * sizeof(float), E * sizeof(float));
            }
        }
        int accepted = 0;
        rc = dpt_sr_push(t->sr, w, local, t->in_grads.data, t->bags ? list : NULL, &accepted);
        dpt_sr_stats_t st;
        dpt_sr_get_stats(t->sr, &st);
        if ((rc == DPT_EINVAL || rc == DPT_ENUMERIC) && !st.failed) {
            /* That worker's gradient is bad (not the service): it is lost,
             * the others go on. */
            snprintf(t->remote_err, sizeof t->remote_err, "worker %d (rank %d): %s", w, w + t->P,
                     dpt_last_error());
            return srt_lose(t, w);
        }
        if (rc)
            return rc;
        t->rpushes[w]++;
        t->w[w].rows_touched += k;
        if (accepted) {
            t->rloss[w] += loss * (double)t->b;
            t->rcorrect[w] += correct;
            t->rrows[w] += t->b;
        }
        return DPT_OK;
    }
    case SRT_TAG_FAIL:
        snprintf(t->remote_err, sizeof t->remote_err, "worker %d (rank %d): %.*s", w, w + t->P,
                 (int)(n < 280 ? n : 280), (const char *)m);
        return srt_lose(t, w);
    case SRT_TAG_BYE: t->byed[w] = 1; return DPT_OK;
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
        t->assigned[w] = 0;
        t->rloss[w] = t->rcorrect[w] = 0.0;
        t->rrows[w] = t->rpushes[w] = 0;
        t->w[w].rows_touched = 0;
        t->need_start[w] = !t->rlost[w];
        if (t->pending[w] && !t->rlost[w]) {
            t->pending[w] = 0;
            t->need_start[w] = 0;
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
            (!t->rlost[src - t->P] || tag == SRT_TAG_BYE))
            rc = srt_serve(t, src - t->P, tag, m, n);
        free(m);
        if (!rc)
            rc = srt_answer_waiting(t);
        for (int w = 0; !rc && w < t->N; w++) {
            uint64_t step;
            if (!t->pending[w] || t->rlost[w])
                continue;
            int got = dpt_sr_poll_token(t->sr, w, &step);
            if (got < 0)
                rc = got;
            else if (got) {
                t->pending[w] = 0;
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
    if (!t->comm || !t->told || !t->byed)
        return;
    for (int w = 0; w < t->N; w++) {
        if (!t->told[w] && srt_go(t, w, 0, 1) == DPT_OK)
            t->told[w] = 1;
        if (t->told[w] && !t->byed[w])
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
        if (w >= 0 && w < t->N && !t->byed[w]) {
            if (tag == SRT_TAG_BYE) {
                t->byed[w] = 1;
                left--;
            } else if (tag == SRT_TAG_FETCH && !t->rlost[w]) {
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

static void srt_state_pack(srt_t *t, int k, float *out)
{
    dpt_optim_t *o = dpt_sr_optimizer(t->sr);
    size_t n = srt_pack(t, k, 0, dpt_sr_params(t->sr), out);
    if (t->ema_decay > 0.0f)
        n += srt_pack(t, k, 0, dpt_sr_ema(t->sr), out + n);
    for (int j = 0; j < dpt_optim_num_slots(o); j++)
        n += srt_pack(t, k, 0, dpt_optim_slot(o, j), out + n);
}

static void srt_state_unpack(srt_t *t, int k, const float *in)
{
    dpt_optim_t *o = dpt_sr_optimizer(t->sr);
    size_t n = srt_unpack(t, k, 0, in, dpt_sr_params(t->sr));
    if (t->ema_decay > 0.0f)
        n += srt_unpack(t, k, 0, in + n, dpt_sr_ema(t->sr));
    for (int j = 0; j < dpt_optim_num_slots(o); j++)
        n += srt_unpack(t, k, 0, in + n, dpt_optim_slot(o, j));
}

/* Rank 0: the other services' variables (and EMA and slots) once each
 * reached global step `min`, into rank 0's copy of the whole table. */
int dpt__sr_gather(srt_t *t, uint64_t min)
{
    int rc = DPT_OK;
    for (int k = 1; !rc && k < t->P; k++)
        rc = dpt_comm_send(t->comm, k, SRT_TAG_GATHER, &min, sizeof min);
    for (int k = 1; !rc && k < t->P; k++) {
        void *m = NULL;
        size_t n = 0;
        rc = srt_recv(t, k, SRT_TAG_GATHERED, &m, &n, 8 + srt_state_floats(t, k) * sizeof(float),
                      "variables of a service");
        if (!rc)
            srt_state_unpack(t, k, (const float *)((const unsigned char *)m + 8));
        free(m);
    }
    return rc;
}

/* Rank 0 after a restore: every other service gets its part and the step. */
int dpt__sr_scatter(srt_t *t)
{
    for (int k = 1; k < t->P; k++) {
        size_t bytes = 16 + srt_state_floats(t, k) * sizeof(float);
        unsigned char *m = malloc(bytes);
        if (!m)
            return dpt_error(DPT_ENOMEM, "sync_replicas: cannot send a service its state");
        uint64_t head[2] = {dpt_sr_global_step(t->sr), dpt_optim_get_t(dpt_sr_optimizer(t->sr))};
        memcpy(m, head, sizeof head);
        srt_state_pack(t, k, (float *)(m + 16));
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
        } else if (src == 0 && tag == SRT_TAG_GATHER && n == 8) {
            memcpy(&gather_min, m, 8);
            gather = 1;
        } else if (src == 0 && tag == SRT_TAG_SCATTER && n == 16 + state * sizeof(float)) {
            uint64_t head[2];
            memcpy(head, m, sizeof head);
            srt_state_unpack(t, t->svc, (const float *)((const unsigned char *)m + 16));
            dpt_optim_set_t(dpt_sr_optimizer(t->sr), head[1]);
            dpt_sr_set_global_step(t->sr, head[0]);
            rc = dpt_sr_begin(t->sr, -1, UINT64_MAX);
        } else if (src == 0) {
            rc = dpt_error(DPT_EFORMAT,
                           "sync_replicas: service %d: a malformed message (tag %d) "
                           "from rank 0",
                           t->svc, tag);
        } else if (src >= t->P && src < t->P + t->N && !t->rlost[src - t->P]) {
            rc = srt_serve(t, src - t->P, tag, m, n);
        }
        free(m);
        if (!rc)
            rc = srt_answer_waiting(t);
        if (!rc && gather && dpt_sr_global_step(t->sr) >= gather_min) {
            size_t bytes = 8 + state * sizeof(float);
            unsigned char *out = malloc(bytes);
            if (!out)
                return dpt_error(DPT_ENOMEM, "sync_replicas: cannot answer a gather");
            uint64_t ot = dpt_optim_get_t(dpt_sr_optimizer(t->sr));
            memcpy(out, &ot, 8);
            srt_state_pack(t, t->svc, (float *)(out + 8));
            rc = dpt_comm_send_async(t->comm, 0, SRT_TAG_GATHERED, out, bytes);
            gather = 0;
        }
    }
    return rc;
}

/* ---- a worker rank ---------------------------------------------------------------- */

/* Waits for the service's word to finish, answering nothing (a worker that
 * failed, or one whose gradients are no longer wanted). */
static int srt_wait_finish(srt_t *t)
{
    for (;;) {
        void *m = NULL;
        size_t n = 0;
        int rc = srt_recv(t, 0, SRT_TAG_GO, &m, &n, SRT_GO_WORDS * 8, "word from the service");
        uint64_t go[SRT_GO_WORDS];
        if (!rc)
            memcpy(go, m, sizeof go);
        free(m);
        if (rc)
            return rc;
        if (go[3])
            return dpt_comm_send(t->comm, 0, SRT_TAG_BYE, NULL, 0);
    }
}

int dpt__sr_worker_loop(srt_t *t)
{
    srt_worker_t *w = &t->w[0];
    uint64_t pos = UINT64_MAX;
    size_t E = t->edim;
    int rc = dpt_comm_send(t->comm, 0, SRT_TAG_TOKEN, NULL, 0);
    while (!rc) {
        void *m = NULL;
        size_t n = 0;
        uint64_t go[SRT_GO_WORDS];
        if ((rc = srt_recv(t, 0, SRT_TAG_GO, &m, &n, sizeof go, "word from the service")) != 0)
            break;
        memcpy(go, m, sizeof go);
        free(m);
        if (go[3])
            return dpt_comm_send(t->comm, 0, SRT_TAG_BYE, NULL, 0);
        if (go[2] != pos) {
            pos = go[2];
            dpt__sr_perm(t, pos);
        }
        double loss = 0.0, correct = 0.0;
        t->cur_step = go[0];
        if ((rc = dpt__sr_grad(w, (size_t)go[1], &loss, &correct)) != 0) {
            /* This worker is out; the service decides whether the others
             * go on. */
            const char *e = dpt_last_error();
            rc = dpt_comm_send(t->comm, 0, SRT_TAG_FAIL, e, strlen(e) + 1);
            return rc ? rc : srt_wait_finish(t);
        }
        /* PUSH to every service: its dense part, and the sparse rows to
         * the one with the table. */
        for (int ks = 0; !rc && ks < t->P; ks++) {
            uint64_t k = dpt__sr_has_table(t, ks) ? w->grad_rows.n : 0;
            unsigned char *p = t->msg;
            memcpy(p, &go[0], 8);
            memcpy(p + 8, &k, 8);
            memcpy(p + 16, &loss, 8);
            memcpy(p + 24, &correct, 8);
            p += 32;
            size_t dense = srt_pack(t, ks, 1, w->grads.data, t->pack);
            memcpy(p, t->pack, dense * sizeof(float));
            p += dense * sizeof(float);
            if (k) {
                memcpy(p, w->grad_rows.indices, k * sizeof(int64_t));
                p += k * sizeof(int64_t);
                memcpy(p, w->grad_rows.values, k * E * sizeof(float));
                p += k * E * sizeof(float);
            }
            rc = dpt_comm_send(t->comm, ks, SRT_TAG_PUSH, t->msg, (size_t)(p - t->msg));
        }
        if (rc)
            break;
        rc = dpt_comm_send(t->comm, 0, SRT_TAG_TOKEN, NULL, 0);
    }
    return rc;
}
