/*
 * The sync-replicas service across processes (dpt/sync_replicas_remote.h):
 * a service rank answering its workers (tokens, fetches, pushes, failures)
 * around its own engine (sync_replicas.c), rank 0's sessions, gather and
 * scatter of the other services' state, and the end of the run. The
 * messages are in sr_wire.h.
 *
 * Replies to workers never wait for them (dpt__msg_send_async): a worker
 * stopped (SIGSTOP) must not stop the service. Rank 0 waits for workers at
 * most timeout_s and then names the ones the step waits for; everyone else
 * waits twice as long for rank 0.
 */
#include "dpt/arena.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "sr_wire.h"
#include "core/stopflag.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dpt_sr_server {
    dpt__srw_layout_t l;
    dpt_sr_t *sr;
    dpt_comm_t *comm;
    int rank;
    const volatile sig_atomic_t *stop;
    float ema; /* ema_decay */
    dpt__msg_t in, out;
    dpt_arena_t grads;       /* a push's dense gradient; a fetch's variables (table layout) */
    dpt_sparse_rows_t *rows; /* [nvars] a push's sparse gradients (sparse variables) */
    const dpt_sparse_rows_t **list; /* [nsparse] in table order */
    size_t nsparse;
    int64_t *ids;  /* a fetch's ids */
    float *staged; /* a fetch's rows */
    size_t ids_cap, staged_cap;
    /* one entry per worker */
    dpt_sr_worker_info_t *info;
    unsigned char *pending, *need_start, *told, *byed;
    uint64_t *assigned;
    dpt__msg_t *fetch; /* a fetch waiting for the global step (buf NULL: none) */
    uint64_t tag, first_index;
    char lost_why[320];
    int asked_by; /* rank 0: the first rank that asked to stop the run (-1: none) */
    int asked;    /* another service: it asked rank 0 */
};

/* ---- create / destroy ------------------------------------------------------------- */

void dpt_sr_server_destroy(dpt_sr_server_t *s)
{
    if (!s)
        return;
    if (s->fetch)
        for (int w = 0; w < s->l.N; w++)
            dpt__msg_deinit(&s->fetch[w]);
    if (s->rows)
        for (size_t i = 0; i < s->l.nvars; i++)
            dpt_sparse_rows_deinit(&s->rows[i]);
    free(s->fetch);
    free(s->rows);
    free(s->list);
    free(s->ids);
    free(s->staged);
    free(s->info);
    free(s->pending);
    free(s->need_start);
    free(s->told);
    free(s->byed);
    free(s->assigned);
    dpt_arena_deinit(&s->grads);
    dpt__msg_deinit(&s->in);
    dpt__msg_deinit(&s->out);
    dpt_sr_destroy(s->sr);
    dpt__srw_layout_deinit(&s->l);
    free(s);
}

static int srs_alloc(dpt_sr_server_t *s)
{
    size_t N = (size_t)s->l.N, nv = s->l.nvars;
    s->info = calloc(N, sizeof *s->info);
    s->pending = calloc(N, 1);
    s->need_start = calloc(N, 1);
    s->told = calloc(N, 1);
    s->byed = calloc(N, 1);
    s->assigned = calloc(N, sizeof(uint64_t));
    s->fetch = calloc(N, sizeof *s->fetch);
    s->rows = calloc(nv, sizeof *s->rows);
    s->list = calloc(nv, sizeof *s->list);
    if (!s->info || !s->pending || !s->need_start || !s->told || !s->byed || !s->assigned ||
        !s->fetch || !s->rows || !s->list)
        return dpt_error(DPT_ENOMEM, "sync replicas server: cannot allocate");
    for (size_t w = 0; w < N; w++)
        dpt__msg_init(&s->fetch[w]);
    for (size_t i = 0; i < nv; i++) {
        if (!s->l.sparse[i])
            continue;
        int rc = dpt_sparse_rows_init(&s->rows[i], s->l.dim[i], 0);
        if (rc)
            return rc;
        s->list[s->nsparse++] = &s->rows[i];
    }
    return dpt_arena_init(&s->grads, s->l.total);
}

int dpt_sr_server_create(dpt_sr_server_t **out, const dpt_sr_remote_config_t *cfg, dpt_comm_t *comm)
{
    *out = NULL;
    dpt_sr_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return dpt_error(DPT_ENOMEM, "sync replicas server: cannot allocate");
    dpt__msg_init(&s->in);
    dpt__msg_init(&s->out);
    s->comm = comm;
    s->asked_by = -1;
    unsigned char *owned = NULL;
    int rc = dpt__srw_layout_init(&s->l, cfg, comm);
    s->rank = rc ? -1 : dpt_comm_rank(comm);
    if (!rc && s->rank >= s->l.P)
        rc = dpt_error(DPT_EINVAL, "sync replicas server: rank %d is a worker's (num_ps = %d)",
                       s->rank, s->l.P);
    if (!rc)
        rc = srs_alloc(s);
    if (!rc && !(owned = calloc(s->l.nvars, 1)))
        rc = dpt_error(DPT_ENOMEM, "sync replicas server: cannot allocate");
    if (!rc) {
        dpt_sr_config_t sc = cfg->sr;
        for (size_t i = 0; i < s->l.nvars; i++)
            owned[i] = s->l.place[i] == s->rank;
        sc.owned = s->l.P > 1 ? owned : NULL;
        sc.no_tokens = s->rank > 0;
        s->ema = sc.ema_decay;
        rc = dpt_sr_create(&s->sr, &sc);
    }
    free(owned);
    if (rc) {
        dpt_sr_server_destroy(s);
        return rc;
    }
    *out = s;
    return DPT_OK;
}

dpt_sr_t *dpt_sr_server_engine(dpt_sr_server_t *s)
{
    return s->sr;
}

void dpt_sr_server_set_stop_flag(dpt_sr_server_t *s, const volatile sig_atomic_t *flag)
{
    s->stop = flag;
}

int dpt_sr_server_stop_asked(const dpt_sr_server_t *s)
{
    return s->asked_by;
}

/* A message asking rank 0 to stop the run: the first asker is kept. */
static void srs_note_ask(dpt_sr_server_t *s, int src)
{
    if (s->rank == 0 && s->asked_by < 0)
        s->asked_by = src;
}

int dpt_sr_server_worker(const dpt_sr_server_t *s, int worker, dpt_sr_worker_info_t *out)
{
    if (worker < 0 || worker >= s->l.N)
        return dpt_error(DPT_EINVAL, "sync replicas server: no worker %d", worker);
    *out = s->info[worker];
    return DPT_OK;
}

const char *dpt_sr_server_lost_reason(const dpt_sr_server_t *s)
{
    return s->lost_why;
}

/* ---- answering a worker ----------------------------------------------------------- */

/* GO {step, index, tag} to worker w. */
static int srs_go(dpt_sr_server_t *s, int w, uint64_t step)
{
    dpt__msg_begin(&s->out, DPT__SRW_PROTO, DPT__SRW_GO);
    dpt__msg_put_u64(&s->out, step);
    dpt__msg_put_u64(&s->out, s->first_index + s->assigned[w]++);
    dpt__msg_put_u64(&s->out, s->tag);
    return dpt__msg_send_async(s->comm, w + s->l.P, &s->out);
}

/* Worker w is out (its gradient failed, or one of its pushes was bad):
 * rank 0 tells it to stop (it says BYE and ends), the steps go on without
 * it; the engine fails when fewer than R workers remain. */
static int srs_lose(dpt_sr_server_t *s, int w)
{
    if (s->info[w].lost)
        return DPT_OK;
    s->info[w].lost = 1;
    s->pending[w] = 0;
    dpt__msg_deinit(&s->fetch[w]);
    int rc = DPT_OK;
    if (s->rank == 0 && !s->told[w]) {
        dpt__msg_begin(&s->out, DPT__SRW_PROTO, DPT__MSG_STOP);
        rc = dpt__msg_send_async(s->comm, w + s->l.P, &s->out);
        s->told[w] = 1;
    }
    int lost = dpt_sr_worker_lost(s->sr, w);
    return rc ? rc : lost;
}

static int srs_reserve(dpt_sr_server_t *s, size_t n, size_t floats)
{
    if (n > s->ids_cap) {
        int64_t *p = realloc(s->ids, n * sizeof *p);
        if (!p)
            return dpt_error(DPT_ENOMEM, "sync replicas server: cannot answer a fetch");
        s->ids = p;
        s->ids_cap = n;
    }
    if (floats > s->staged_cap) {
        float *p = realloc(s->staged, floats * sizeof *p);
        if (!p)
            return dpt_error(DPT_ENOMEM, "sync replicas server: cannot answer a fetch");
        s->staged = p;
        s->staged_cap = floats;
    }
    return DPT_OK;
}

/* Answers worker w's FETCH in m. Returns 1 when this service's global step
 * has not reached the fetch's step yet (it waits), else 0 or an error. */
static int srs_answer_fetch(dpt_sr_server_t *s, int w, dpt__msg_t *m)
{
    m->pos = DPT__MSG_HEADER;
    uint64_t step = dpt__msg_get_u64(m);
    uint32_t var = dpt__msg_get_u32(m);
    uint64_t n = dpt__msg_get_u64(m);
    int dense = var == DPT__SRW_DENSE;
    if (m->failed || (dense && n) ||
        (!dense && (var >= s->l.nvars || !s->l.sparse[var] || s->l.place[var] != s->rank ||
                    n > s->l.rows[var] || dpt__msg_left(m) != n * 8)))
        return dpt_error(DPT_EPROTO, "sync replicas: a malformed fetch from rank %d", m->src);
    if (dpt_sr_global_step(s->sr) < step)
        return 1;
    int rc;
    if (dense) {
        if ((rc = dpt_sr_fetch(s->sr, s->grads.data)) != 0)
            return rc;
        dpt__msg_begin(&s->out, DPT__SRW_PROTO, DPT__SRW_PARAMS);
        dpt__srw_put_vars(&s->out, &s->l, s->rank, 1, s->grads.data);
        return dpt__msg_send_async(s->comm, w + s->l.P, &s->out);
    }
    size_t dim = s->l.dim[var];
    if ((rc = srs_reserve(s, (size_t)n, (size_t)n * dim)) != 0)
        return rc;
    for (uint64_t j = 0; j < n; j++)
        s->ids[j] = (int64_t)dpt__msg_get_u64(m);
    if ((rc = dpt_sr_fetch_rows(s->sr, var, s->ids, (size_t)n, s->staged)) != 0)
        return rc;
    dpt__msg_begin(&s->out, DPT__SRW_PROTO, DPT__SRW_ROWS);
    dpt__msg_put_f32s(&s->out, s->staged, (size_t)n * dim);
    return dpt__msg_send_async(s->comm, w + s->l.P, &s->out);
}

/* Answers the fetches that waited for the global step. */
static int srs_answer_waiting(dpt_sr_server_t *s)
{
    for (int w = 0; w < s->l.N; w++) {
        if (!s->fetch[w].buf)
            continue;
        int rc = srs_answer_fetch(s, w, &s->fetch[w]);
        if (rc == 1)
            continue;
        dpt__msg_deinit(&s->fetch[w]);
        if (rc)
            return rc;
    }
    return DPT_OK;
}

/* Reads a PUSH's sparse gradient of variable i into s->rows[i]. */
static int srs_read_rows(dpt_sr_server_t *s, dpt__msg_t *m, size_t i)
{
    dpt_sparse_rows_t *g = &s->rows[i];
    uint64_t n = dpt__msg_get_u64(m);
    size_t dim = s->l.dim[i];
    if (m->failed || n > s->l.rows[i] || dpt__msg_left(m) < n * (8 + 4 * dim))
        return dpt_error(DPT_EPROTO,
                         "sync replicas: a push from rank %d with %" PRIu64 " rows of variable %zu",
                         m->src, n, i);
    int rc = dpt_sparse_rows_reserve(g, (size_t)n);
    if (rc)
        return rc;
    /* The ids first, then the rows: the ids go to the rows as they come. */
    size_t at = m->pos;
    for (uint64_t j = 0; j < n; j++) {
        float *row;
        m->pos = at + 8 * j;
        int64_t id = (int64_t)dpt__msg_get_u64(m);
        m->pos = at + 8 * n + 4 * dim * j;
        if ((rc = dpt_sparse_rows_add(g, id, NULL, &row)) != 0)
            return rc;
        dpt__msg_get_f32s(m, row, dim);
    }
    m->pos = at + (size_t)n * (8 + 4 * dim);
    return DPT_OK;
}

/* Worker w's PUSH: its part of the gradient into s->grads and s->rows,
 * then dpt_sr_push. A gradient the engine refuses as bad loses the worker,
 * not the service. */
static int srs_take_push(dpt_sr_server_t *s, int w, dpt__msg_t *m)
{
    double fig[DPT_SR_MAX_FIGURES];
    uint64_t step = dpt__msg_get_u64(m), rows = 0;
    int rc;
    for (int f = 0; f < s->l.nfigures; f++)
        fig[f] = dpt__msg_get_f64(m);
    for (size_t i = 0; i < s->l.nvars; i++) {
        if (s->l.sparse[i])
            dpt_sparse_rows_clear(&s->rows[i]);
        if (s->l.place[i] != s->rank)
            continue;
        if (!s->l.sparse[i]) {
            dpt__msg_get_f32s(m, s->grads.data + s->l.offset[i], s->l.count[i]);
            continue;
        }
        if ((rc = srs_read_rows(s, m, i)) != 0)
            return rc;
        rows += s->rows[i].n;
    }
    if ((rc = dpt__msg_check(m, 1, "sync replicas: a push")) != 0)
        return rc;
    int accepted = 0;
    rc = dpt_sr_push(s->sr, w, step, s->grads.data, s->nsparse ? s->list : NULL, &accepted);
    dpt_sr_stats_t st;
    dpt_sr_get_stats(s->sr, &st);
    if ((rc == DPT_EINVAL || rc == DPT_ENUMERIC) && !st.failed) {
        snprintf(s->lost_why, sizeof s->lost_why, "worker %d (rank %d): %s", w, w + s->l.P,
                 dpt_last_error());
        return srs_lose(s, w);
    }
    if (rc)
        return rc;
    dpt_sr_worker_info_t *in = &s->info[w];
    in->pushes++;
    in->rows += rows;
    if (accepted) {
        in->accepted++;
        for (int f = 0; f < s->l.nfigures; f++)
            in->figures[f] += fig[f];
    }
    return DPT_OK;
}

/* One message of worker w (in s->in) to this service. */
static int srs_serve(dpt_sr_server_t *s, int w)
{
    dpt__msg_t *m = &s->in;
    switch (m->kind) {
    case DPT__SRW_TOKEN:
        if (s->rank != 0)
            return DPT_OK;
        if (s->need_start[w]) {
            /* Its first step of the session: the global step, no token. */
            s->need_start[w] = 0;
            return srs_go(s, w, dpt_sr_global_step(s->sr));
        }
        s->pending[w] = 1;
        return DPT_OK;
    case DPT__SRW_FETCH: {
        int rc = srs_answer_fetch(s, w, m);
        if (rc != 1)
            return rc;
        /* Not at that step yet: kept until it is (one fetch per worker). */
        dpt__msg_deinit(&s->fetch[w]);
        s->fetch[w] = *m;
        dpt__msg_init(m);
        return DPT_OK;
    }
    case DPT__SRW_PUSH: return srs_take_push(s, w, m);
    case DPT__MSG_FAIL: {
        char text[256];
        int code = (int)(int32_t)dpt__msg_get_u32(m);
        dpt__msg_get_str(m, text, sizeof text);
        snprintf(s->lost_why, sizeof s->lost_why, "worker %d (rank %d): %s (%s)", w, w + s->l.P,
                 text, dpt_strerror(code));
        return srs_lose(s, w);
    }
    case DPT__MSG_BYE: s->byed[w] = 1; return DPT_OK;
    case DPT__MSG_ASK_STOP: srs_note_ask(s, m->src); return DPT_OK;
    default: return DPT_OK; /* a late message of an exchange that ended */
    }
}

/* Tokens to the workers that wait for one, as the engine frees them. */
static int srs_hand_tokens(dpt_sr_server_t *s)
{
    for (int w = 0; w < s->l.N; w++) {
        uint64_t step;
        if (!s->pending[w] || s->info[w].lost)
            continue;
        int got = dpt_sr_poll_token(s->sr, w, &step);
        if (got < 0)
            return got;
        if (got) {
            s->pending[w] = 0;
            int rc = srs_go(s, w, step);
            if (rc)
                return rc;
        }
    }
    return DPT_OK;
}

/* The error of a session that cannot go on: no worker was heard from for
 * timeout_s, or a stop was asked for (`stopped`) while the step waits. It
 * names the workers the step waits for (neither lost, nor waiting for a
 * token or for the step's variables). */
static int srs_silent(dpt_sr_server_t *s, uint64_t until, int stopped)
{
    char who[192] = "";
    size_t len = 0;
    int n = 0;
    for (int w = 0; w < s->l.N && len < sizeof who; w++)
        if (!s->info[w].lost && !s->pending[w] && !s->fetch[w].buf)
            len += (size_t)snprintf(who + len, sizeof who - len, "%sworker %d (rank %d)",
                                    n++ ? ", " : "", w, w + s->l.P);
    uint64_t step = dpt_sr_global_step(s->sr);
    if (stopped)
        return dpt_error(DPT_ECLOSED,
                         "sync_replicas: global step %" PRIu64
                         " waits for %s (stopped, dead or stuck)",
                         step, n ? who : "the worker ranks");
    if (n)
        return dpt_error(DPT_ETIMEDOUT,
                         "sync_replicas: %s sent nothing for comm_timeout_s = %g s; global step "
                         "%" PRIu64 " waits for %s (stopped, dead or stuck)",
                         who, s->l.timeout_s, step, n > 1 ? "them" : "it");
    return dpt_error(DPT_ETIMEDOUT,
                     "sync_replicas: no worker rank sent anything for comm_timeout_s = %g s "
                     "(global step %" PRIu64 ", session until %" PRIu64 ")",
                     s->l.timeout_s, step, until);
}

/* ---- rank 0's session ------------------------------------------------------------- */

static int srs_session_start(dpt_sr_server_t *s, uint64_t until, uint64_t tag, uint64_t first)
{
    int rc = dpt_sr_begin(s->sr, -1, until);
    s->tag = tag;
    s->first_index = first;
    s->lost_why[0] = '\0';
    for (int w = 0; !rc && w < s->l.N; w++) {
        int lost = s->info[w].lost;
        memset(&s->info[w], 0, sizeof s->info[w]);
        s->info[w].lost = lost;
        s->assigned[w] = 0;
        s->need_start[w] = !lost;
        if (s->pending[w] && !lost) {
            /* It asked before the session began: its first step now. */
            s->pending[w] = 0;
            s->need_start[w] = 0;
            rc = srs_go(s, w, dpt_sr_global_step(s->sr));
        }
    }
    return rc;
}

int dpt_sr_server_session(dpt_sr_server_t *s, uint64_t until, uint64_t tag, uint64_t first_index)
{
    if (s->rank != 0)
        return dpt_error(DPT_EINVAL, "sync replicas server: sessions run on rank 0, not %d",
                         s->rank);
    int rc = srs_session_start(s, until, tag, first_index);
    double heard = dpt_now();
    while (!rc && dpt_sr_global_step(s->sr) < until) {
        /* A stop asked for ends the run after this session; a session
         * that waits for a silent worker cannot end: say so within a
         * second instead of after timeout_s. */
        double now = dpt_now();
        int stopping = dpt__stop_flag_set(s->stop) || s->asked_by >= 0;
        if (stopping && now - heard >= (s->l.timeout_s < 1.0 ? s->l.timeout_s : 1.0))
            return srs_silent(s, until, 1);
        double left = heard + s->l.timeout_s - now;
        if (left <= 0.0)
            return srs_silent(s, until, 0);
        /* With a stop flag: look at it at least every 0.1 s. */
        double wait = s->stop && left > 0.1 ? 0.1 : left;
        rc = dpt__msg_recv(s->comm, DPT_COMM_ANY_SOURCE, DPT__SRW_PROTO, -1, wait, &s->in);
        if (rc == DPT_ETIMEDOUT) {
            rc = DPT_OK;
            continue;
        }
        if (rc)
            break;
        heard = dpt_now();
        int w = s->in.src - s->l.P;
        if (w >= 0 && w < s->l.N && (!s->info[w].lost || s->in.kind == DPT__MSG_BYE))
            rc = srs_serve(s, w);
        else if (w < 0 && s->in.kind == DPT__MSG_FAIL)
            rc = dpt__msg_error(&s->in); /* another service failed */
        else if (w < 0 && s->in.kind == DPT__MSG_ASK_STOP)
            srs_note_ask(s, s->in.src);
        if (!rc)
            rc = srs_answer_waiting(s);
        if (!rc)
            rc = srs_hand_tokens(s);
    }
    if (rc && s->lost_why[0])
        return dpt_error(rc, "%s (%s)", dpt_last_error(), s->lost_why);
    return rc;
}

/* ---- several services ------------------------------------------------------------- */

static void srs_put_state(dpt_sr_server_t *s, int k)
{
    dpt_optim_t *o = dpt_sr_optimizer(s->sr);
    dpt__srw_put_vars(&s->out, &s->l, k, 0, dpt_sr_params(s->sr));
    if (s->ema > 0.0f)
        dpt__srw_put_vars(&s->out, &s->l, k, 0, dpt_sr_ema(s->sr));
    for (int j = 0; j < dpt_optim_num_slots(o); j++)
        dpt__srw_put_vars(&s->out, &s->l, k, 0, dpt_optim_slot(o, j));
}

static void srs_get_state(dpt_sr_server_t *s, int k)
{
    dpt_optim_t *o = dpt_sr_optimizer(s->sr);
    dpt__srw_get_vars(&s->in, &s->l, k, 0, dpt_sr_params(s->sr));
    if (s->ema > 0.0f)
        dpt__srw_get_vars(&s->in, &s->l, k, 0, dpt_sr_ema(s->sr));
    for (int j = 0; j < dpt_optim_num_slots(o); j++)
        dpt__srw_get_vars(&s->in, &s->l, k, 0, dpt_optim_slot(o, j));
}

int dpt_sr_server_gather(dpt_sr_server_t *s, uint64_t min)
{
    int rc = DPT_OK;
    for (int k = 1; !rc && k < s->l.P; k++) {
        dpt__msg_begin(&s->out, DPT__SRW_PROTO, DPT__SRW_GATHER);
        dpt__msg_put_u64(&s->out, min);
        rc = dpt__msg_send(s->comm, k, &s->out);
    }
    for (int k = 1; !rc && k < s->l.P; k++) {
        rc = dpt__msg_recv(s->comm, k, DPT__SRW_PROTO, DPT__SRW_GATHERED, s->l.timeout_s, &s->in);
        if (rc == DPT_ETIMEDOUT)
            return dpt_error(rc,
                             "sync_replicas: service %d (rank %d) did not send its variables "
                             "within comm_timeout_s = %g s",
                             k, k, s->l.timeout_s);
        if (rc)
            return rc;
        /* (its optimizer step is rank 0's too) */
        (void)dpt__msg_get_u64(&s->in);
        srs_get_state(s, k);
        rc = dpt__msg_check(&s->in, 1, "sync replicas: a service's variables");
    }
    return rc;
}

int dpt_sr_server_scatter(dpt_sr_server_t *s)
{
    int rc = DPT_OK;
    for (int k = 1; !rc && k < s->l.P; k++) {
        dpt__msg_begin(&s->out, DPT__SRW_PROTO, DPT__SRW_SCATTER);
        dpt__msg_put_u64(&s->out, dpt_sr_global_step(s->sr));
        dpt__msg_put_u64(&s->out, dpt_optim_get_t(dpt_sr_optimizer(s->sr)));
        srs_put_state(s, k);
        rc = dpt__msg_send(s->comm, k, &s->out);
    }
    return rc;
}

/* A message of rank 0 to service k; *stop when it ends the run. */
static int srs_from_chief(dpt_sr_server_t *s, int *gather, uint64_t *gather_min, int *stop)
{
    dpt__msg_t *m = &s->in;
    int rc;
    switch (m->kind) {
    case DPT__MSG_STOP: *stop = 1; return dpt__msg_send_bye(s->comm, 0, DPT__SRW_PROTO);
    case DPT__MSG_FAIL: return dpt__msg_error(m);
    case DPT__SRW_GATHER:
        *gather_min = dpt__msg_get_u64(m);
        *gather = 1;
        return dpt__msg_check(m, 1, "sync replicas: a gather");
    case DPT__SRW_SCATTER: {
        uint64_t step = dpt__msg_get_u64(m), t = dpt__msg_get_u64(m);
        srs_get_state(s, s->rank);
        if ((rc = dpt__msg_check(m, 1, "sync replicas: a service's state")) != 0)
            return rc;
        dpt_optim_set_t(dpt_sr_optimizer(s->sr), t);
        dpt_sr_set_global_step(s->sr, step);
        return dpt_sr_begin(s->sr, -1, UINT64_MAX);
    }
    default:
        return dpt_error(DPT_EPROTO,
                         "sync replicas: service %d: an unexpected message (kind %d) "
                         "from rank 0",
                         s->rank, m->kind);
    }
}

int dpt_sr_server_serve(dpt_sr_server_t *s)
{
    if (s->rank == 0)
        return dpt_error(DPT_EINVAL, "sync replicas server: rank 0 runs sessions, not serve");
    int rc = dpt_sr_begin(s->sr, -1, UINT64_MAX), gather = 0, stop = 0;
    uint64_t gather_min = 0;
    double wait = 2.0 * s->l.timeout_s, heard = dpt_now();
    while (!rc && !stop) {
        if (dpt__stop_flag_set(s->stop) && !s->asked) {
            s->asked = 1; /* rank 0 ends the run */
            if ((rc = dpt__msg_send_ask_stop(s->comm, 0, DPT__SRW_PROTO)) != 0)
                break;
        }
        double left = heard + wait - dpt_now();
        if (left <= 0.0)
            return dpt_error(DPT_ETIMEDOUT,
                             "sync_replicas: service %d (rank %d) heard nothing for 2 x "
                             "comm_timeout_s = %g s",
                             s->rank, s->rank, wait);
        /* With a stop flag: look at it at least every 0.1 s. */
        rc = dpt__msg_recv(s->comm, DPT_COMM_ANY_SOURCE, DPT__SRW_PROTO, -1,
                           s->stop && !s->asked && left > 0.1 ? 0.1 : left, &s->in);
        if (rc == DPT_ETIMEDOUT) {
            rc = DPT_OK;
            continue;
        }
        if (rc)
            break;
        heard = dpt_now();
        int w = s->in.src - s->l.P;
        if (s->in.src == 0)
            rc = srs_from_chief(s, &gather, &gather_min, &stop);
        else if (w >= 0 && w < s->l.N && !s->info[w].lost)
            rc = srs_serve(s, w);
        if (!rc && !stop)
            rc = srs_answer_waiting(s);
        if (!rc && !stop && gather && dpt_sr_global_step(s->sr) >= gather_min) {
            dpt__msg_begin(&s->out, DPT__SRW_PROTO, DPT__SRW_GATHERED);
            dpt__msg_put_u64(&s->out, dpt_optim_get_t(dpt_sr_optimizer(s->sr)));
            srs_put_state(s, s->rank);
            rc = dpt__msg_send_async(s->comm, 0, &s->out);
            gather = 0;
        }
    }
    return rc;
}

/* ---- the end ---------------------------------------------------------------------- */

int dpt_sr_server_stop(dpt_sr_server_t *s)
{
    if (s->rank != 0)
        return dpt_error(DPT_EINVAL, "sync replicas server: rank 0 ends the run, not %d", s->rank);
    int *peers = malloc((size_t)(s->l.N + s->l.P) * sizeof *peers);
    if (!peers)
        return dpt_error(DPT_ENOMEM, "sync replicas server: cannot allocate the end");
    /* The workers first (the other services answer their last fetches
     * meanwhile), then the other services. */
    size_t n = 0;
    for (int w = 0; w < s->l.N; w++)
        if (!s->told[w] && !s->byed[w]) {
            peers[n++] = w + s->l.P;
            s->told[w] = 1;
        }
    int rc = dpt__msg_stop_all(s->comm, DPT__SRW_PROTO, peers, n, s->l.timeout_s);
    n = 0;
    for (int k = 1; k < s->l.P; k++)
        peers[n++] = k;
    int rc2 = dpt__msg_stop_all(s->comm, DPT__SRW_PROTO, peers, n, s->l.timeout_s);
    free(peers);
    return rc ? rc : rc2;
}
