/*
 * A worker's handle on a sync-replicas service (dpt/sync_replicas_remote.h):
 * the engine of its own process (local) or the services' ranks (remote,
 * the worker side of the messages in sr_wire.h), and the layout both sides
 * of those messages share.
 */
#include "dpt/status.h"
#include "dpt/stats.h"
#include "sr_wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the layout ------------------------------------------------------------------- */

int dpt__srw_layout_init(dpt__srw_layout_t *l, const dpt_sr_remote_config_t *cfg, dpt_comm_t *comm)
{
    memset(l, 0, sizeof *l);
    const dpt_sr_config_t *c = &cfg->sr;
    if (!c->vars || c->vars->nvars == 0)
        return dpt_error(DPT_EINVAL, "sync replicas remote: no variables");
    if (c->num_ps < 1 || c->total_num_replicas < 1)
        return dpt_error(DPT_EINVAL, "sync replicas remote: num_ps = %d, total_num_replicas = %d",
                         c->num_ps, c->total_num_replicas);
    if (!comm || dpt_comm_size(comm) != c->num_ps + c->total_num_replicas)
        return dpt_error(DPT_EINVAL,
                         "sync replicas remote: %d services and %d workers need %d ranks, the "
                         "communicator has %d",
                         c->num_ps, c->total_num_replicas, c->num_ps + c->total_num_replicas,
                         comm ? dpt_comm_size(comm) : 0);
    if (cfg->nfigures < 0 || cfg->nfigures > DPT_SR_MAX_FIGURES)
        return dpt_error(DPT_EINVAL, "sync replicas remote: nfigures = %d outside [0, %d]",
                         cfg->nfigures, DPT_SR_MAX_FIGURES);
    if (!(c->timeout_s > 0.0))
        return dpt_error(DPT_EINVAL, "sync replicas remote: timeout_s = %g, must be > 0",
                         c->timeout_s);
    size_t n = c->vars->nvars;
    l->nvars = n;
    l->P = c->num_ps;
    l->N = c->total_num_replicas;
    l->nfigures = cfg->nfigures;
    l->timeout_s = c->timeout_s;
    l->offset = calloc(n, sizeof(size_t));
    l->count = calloc(n, sizeof(size_t));
    l->rows = calloc(n, sizeof(size_t));
    l->dim = calloc(n, sizeof(size_t));
    l->sparse = calloc(n, 1);
    l->place = calloc(n, sizeof(int));
    uint64_t *bytes = calloc(n, sizeof(uint64_t));
    int rc = DPT_OK;
    if (!l->offset || !l->count || !l->rows || !l->dim || !l->sparse || !l->place || !bytes)
        rc = dpt_error(DPT_ENOMEM, "sync replicas remote: cannot allocate the layout");
    for (size_t i = 0; !rc && i < n; i++) {
        const dpt_var_t *v = &c->vars->vars[i];
        l->offset[i] = v->offset;
        l->count[i] = v->count;
        l->rows[i] = v->ndim > 0 ? v->shape[0] : 1;
        l->dim[i] = l->rows[i] ? v->count / l->rows[i] : 0;
        l->sparse[i] = c->sparse && c->sparse[i];
        bytes[i] = (uint64_t)v->count * sizeof(float);
    }
    l->total = c->vars->total;
    /* The engine's placement (dpt_sr_create places the same bytes). */
    if (!rc)
        rc = dpt_sr_place(bytes, n, l->P, l->place, NULL);
    free(bytes);
    return rc;
}

void dpt__srw_layout_deinit(dpt__srw_layout_t *l)
{
    free(l->offset);
    free(l->count);
    free(l->rows);
    free(l->dim);
    free(l->sparse);
    free(l->place);
    memset(l, 0, sizeof *l);
}

void dpt__srw_put_vars(dpt__msg_t *m, const dpt__srw_layout_t *l, int k, int dense_only,
                       const float *full)
{
    for (size_t i = 0; i < l->nvars; i++)
        if (l->place[i] == k && !(dense_only && l->sparse[i]))
            dpt__msg_put_f32s(m, full + l->offset[i], l->count[i]);
}

void dpt__srw_get_vars(dpt__msg_t *m, const dpt__srw_layout_t *l, int k, int dense_only,
                       float *full)
{
    for (size_t i = 0; i < l->nvars; i++)
        if (l->place[i] == k && !(dense_only && l->sparse[i]))
            dpt__msg_get_f32s(m, full + l->offset[i], l->count[i]);
}

/* ---- the handle ------------------------------------------------------------------- */

struct dpt_sr_client {
    int worker;
    int remote;
    uint64_t tag, index; /* this session's */
    /* local */
    dpt_sr_t *sr;
    int first; /* the next token is the session's first */
    /* remote */
    dpt_comm_t *comm;
    dpt__srw_layout_t l;
    dpt__msg_t in, out;
    uint64_t step;      /* of the last token: fetches wait for it */
    int stopped;        /* rank 0 said STOP (answered) */
    int asked;          /* it asked rank 0 to stop the run */
    unsigned char *got; /* [P] a fetch's answers in */
};

int dpt_sr_client_create_local(dpt_sr_client_t **c, dpt_sr_t *sr, int worker)
{
    *c = NULL;
    if (!sr)
        return dpt_error(DPT_EINVAL, "sync replicas client: no service");
    dpt_sr_client_t *h = calloc(1, sizeof *h);
    if (!h)
        return dpt_error(DPT_ENOMEM, "sync replicas client: cannot allocate worker %d", worker);
    h->sr = sr;
    h->worker = worker;
    dpt__msg_init(&h->in);
    dpt__msg_init(&h->out);
    *c = h;
    return DPT_OK;
}

int dpt_sr_client_create_remote(dpt_sr_client_t **c, const dpt_sr_remote_config_t *cfg,
                                dpt_comm_t *comm)
{
    *c = NULL;
    dpt_sr_client_t *h = calloc(1, sizeof *h);
    if (!h)
        return dpt_error(DPT_ENOMEM, "sync replicas client: cannot allocate");
    dpt__msg_init(&h->in);
    dpt__msg_init(&h->out);
    h->remote = 1;
    h->comm = comm;
    int rc = dpt__srw_layout_init(&h->l, cfg, comm);
    if (!rc && dpt_comm_rank(comm) < h->l.P)
        rc = dpt_error(DPT_EINVAL, "sync replicas client: rank %d is a service (num_ps = %d)",
                       dpt_comm_rank(comm), h->l.P);
    if (!rc && !(h->got = calloc((size_t)h->l.P, 1)))
        rc = dpt_error(DPT_ENOMEM, "sync replicas client: cannot allocate");
    if (rc) {
        dpt_sr_client_destroy(h);
        return rc;
    }
    h->worker = dpt_comm_rank(comm) - h->l.P;
    *c = h;
    return DPT_OK;
}

void dpt_sr_client_destroy(dpt_sr_client_t *c)
{
    if (!c)
        return;
    dpt__msg_deinit(&c->in);
    dpt__msg_deinit(&c->out);
    dpt__srw_layout_deinit(&c->l);
    free(c->got);
    free(c);
}

int dpt_sr_client_worker(const dpt_sr_client_t *c)
{
    return c->worker;
}

void dpt_sr_client_begin(dpt_sr_client_t *c, uint64_t tag, uint64_t first_index)
{
    if (c->remote)
        return;
    c->first = 1;
    c->tag = tag;
    c->index = first_index;
}

/* ---- remote: receiving -------------------------------------------------------------- */

/* The next message for this worker within twice timeout_s (rank 0's
 * timeout names the silent peer first). STOP from rank 0 is answered (BYE)
 * and ends the run for this worker (DPT_ECLOSED); a FAIL is its sender's
 * error. `what` and `from` name what was awaited in a timeout. */
static int srcl_recv(dpt_sr_client_t *c, const char *what, int from)
{
    if (c->stopped)
        return dpt_error(DPT_ECLOSED, "sync replicas: worker %d was stopped", c->worker);
    double wait = 2.0 * c->l.timeout_s;
    int rc = dpt__msg_recv(c->comm, DPT_COMM_ANY_SOURCE, DPT__SRW_PROTO, -1, wait, &c->in);
    /* A process stopped (SIGSTOP) past its deadline looks once more: rank
     * 0's word may have come meanwhile. */
    if (rc == DPT_ETIMEDOUT)
        rc = dpt__msg_recv(c->comm, DPT_COMM_ANY_SOURCE, DPT__SRW_PROTO, -1, 0.0, &c->in);
    if (rc == DPT_ETIMEDOUT)
        return dpt_error(rc,
                         "sync_replicas: worker %d (rank %d): no %s from rank %d within 2 x "
                         "comm_timeout_s = %g s",
                         c->worker, c->worker + c->l.P, what, from, wait);
    if (rc)
        return rc;
    if (c->in.kind == DPT__MSG_STOP && c->in.src == 0) {
        c->stopped = 1;
        rc = dpt__msg_send_bye(c->comm, 0, DPT__SRW_PROTO);
        return rc ? rc : dpt_error(DPT_ECLOSED, "sync replicas: the run is over");
    }
    if (c->in.kind == DPT__MSG_FAIL)
        return dpt__msg_error(&c->in);
    return DPT_OK;
}

/* ---- the verbs ---------------------------------------------------------------------- */

int dpt_sr_client_take_token(dpt_sr_client_t *c, dpt_sr_token_t *tok)
{
    int rc;
    if (!c->remote) {
        tok->tag = c->tag;
        tok->index = c->index;
        if (c->first) {
            /* The session's first step: the global step (the chief's
             * init), no token. */
            c->first = 0;
            tok->step = dpt_sr_global_step(c->sr);
        } else if ((rc = dpt_sr_take_token(c->sr, c->worker, &tok->step)) != 0) {
            return rc;
        }
        c->index++;
        return DPT_OK;
    }
    if (c->stopped)
        return dpt_error(DPT_ECLOSED, "sync replicas: worker %d was stopped", c->worker);
    dpt__msg_begin(&c->out, DPT__SRW_PROTO, DPT__SRW_TOKEN);
    if ((rc = dpt__msg_send(c->comm, 0, &c->out)) != 0)
        return rc;
    for (;;) {
        if ((rc = srcl_recv(c, "token", 0)) != 0)
            return rc;
        if (c->in.src != 0 || c->in.kind != DPT__SRW_GO)
            continue; /* a late answer of an exchange that ended */
        tok->step = dpt__msg_get_u64(&c->in);
        tok->index = dpt__msg_get_u64(&c->in);
        tok->tag = dpt__msg_get_u64(&c->in);
        if ((rc = dpt__msg_check(&c->in, 1, "sync replicas: a token")) != 0)
            return rc;
        c->step = tok->step;
        return DPT_OK;
    }
}

/* Sends FETCH {step, var, ids} to service k. */
static int srcl_ask(dpt_sr_client_t *c, int k, uint32_t var, const int64_t *idx, size_t n)
{
    dpt__msg_begin(&c->out, DPT__SRW_PROTO, DPT__SRW_FETCH);
    dpt__msg_put_u64(&c->out, c->step);
    dpt__msg_put_u32(&c->out, var);
    dpt__msg_put_u64(&c->out, (uint64_t)n);
    for (size_t j = 0; j < n; j++)
        dpt__msg_put_u64(&c->out, (uint64_t)idx[j]);
    return dpt__msg_send(c->comm, k, &c->out);
}

int dpt_sr_client_fetch(dpt_sr_client_t *c, float *out)
{
    if (!c->remote)
        return dpt_sr_fetch(c->sr, out);
    int rc = DPT_OK, left = c->l.P;
    memset(c->got, 0, (size_t)c->l.P);
    for (int k = 0; !rc && k < c->l.P; k++)
        rc = srcl_ask(c, k, DPT__SRW_DENSE, NULL, 0);
    while (!rc && left > 0) {
        int from = 0;
        while (c->got[from])
            from++;
        if ((rc = srcl_recv(c, "reply with the variables", from)) != 0)
            break;
        int k = c->in.src;
        if (c->in.kind != DPT__SRW_PARAMS || k < 0 || k >= c->l.P || c->got[k])
            continue;
        dpt__srw_get_vars(&c->in, &c->l, k, 1, out);
        if ((rc = dpt__msg_check(&c->in, 1, "sync replicas: the variables")) != 0)
            break;
        c->got[k] = 1;
        left--;
    }
    return rc;
}

int dpt_sr_client_fetch_rows(dpt_sr_client_t *c, size_t var, const int64_t *idx, size_t n,
                             float *out)
{
    if (!c->remote)
        return dpt_sr_fetch_rows(c->sr, var, idx, n, out);
    if (var >= c->l.nvars || !c->l.sparse[var])
        return dpt_error(DPT_EINVAL, "sync replicas: variable %zu is not sparse", var);
    int k = c->l.place[var];
    int rc = srcl_ask(c, k, (uint32_t)var, idx, n);
    while (!rc) {
        if ((rc = srcl_recv(c, "reply with the rows", k)) != 0)
            break;
        if (c->in.kind != DPT__SRW_ROWS || c->in.src != k)
            continue;
        dpt__msg_get_f32s(&c->in, out, n * c->l.dim[var]);
        return dpt__msg_check(&c->in, 1, "sync replicas: the rows");
    }
    return rc;
}

int dpt_sr_client_push(dpt_sr_client_t *c, uint64_t step, const float *grads,
                       const dpt_sparse_rows_t *const *sparse, const double *figures, int *accepted)
{
    if (!c->remote)
        return dpt_sr_push(c->sr, c->worker, step, grads, sparse, accepted);
    if (accepted)
        *accepted = -1;
    int rc = DPT_OK;
    for (int k = 0; !rc && k < c->l.P; k++) {
        dpt__msg_t *m = &c->out;
        dpt__msg_begin(m, DPT__SRW_PROTO, DPT__SRW_PUSH);
        dpt__msg_put_u64(m, step);
        for (int f = 0; f < c->l.nfigures; f++)
            dpt__msg_put_f64(m, figures[f]);
        for (size_t i = 0, s = 0; i < c->l.nvars; i++) {
            const dpt_sparse_rows_t *g = c->l.sparse[i] ? sparse[s++] : NULL;
            if (c->l.place[i] != k)
                continue;
            if (!g) {
                dpt__msg_put_f32s(m, grads + c->l.offset[i], c->l.count[i]);
                continue;
            }
            dpt__msg_put_u64(m, (uint64_t)g->n);
            for (size_t j = 0; j < g->n; j++)
                dpt__msg_put_u64(m, (uint64_t)g->indices[j]);
            dpt__msg_put_f32s(m, g->values, g->n * g->dim);
        }
        rc = dpt__msg_send(c->comm, k, m);
    }
    return rc;
}

int dpt_sr_client_lost(dpt_sr_client_t *c, int code, const char *why)
{
    if (!c->remote) {
        int rc = dpt_sr_worker_lost(c->sr, c->worker);
        return rc ? rc : code;
    }
    /* Rank 0 failed or is gone: nobody to tell. */
    if (c->stopped || code == DPT_ETIMEDOUT || code == DPT_ECOMM || code == DPT_ECLOSED)
        return code;
    int rc = dpt__msg_send_fail(c->comm, 0, DPT__SRW_PROTO, code, why);
    while (!rc)
        rc = srcl_recv(c, "word to stop", 0);
    return rc == DPT_ECLOSED ? DPT_OK : rc;
}

int dpt_sr_client_ask_stop(dpt_sr_client_t *c)
{
    if (!c->remote || c->asked || c->stopped)
        return DPT_OK;
    c->asked = 1;
    return dpt__msg_send_ask_stop(c->comm, 0, DPT__SRW_PROTO);
}
