/*
 * APPO/IMPALA under mpirun (dpt_appo_create_mpi, appo_internal.h): rank 0
 * learns, every other rank is one sampler. Sample batches travel as
 * bytes to rank 0; rank 0 sends the newest weights back, and STOP at the
 * end.
 */
#include "dpt/stats.h"
#include "dpt/status.h"
#include "appo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Messages: a sampler rank sends BATCH (a train batch) and, on an env
 * error, FAIL {code, message}; rank 0 sends WEIGHTS {version, floats} and
 * STOP, answered by BYE. */
#define DPT__APPO_TAG_BATCH 201
#define DPT__APPO_TAG_WEIGHTS 202
#define DPT__APPO_TAG_STOP 203
#define DPT__APPO_TAG_BYE 204
#define DPT__APPO_TAG_FAIL 205

/* The bytes of a full batch: {seqs, episodes, version_sum}, obs, actions,
 * logp, rewards, discounts, then the episodes' returns and lengths. */
static size_t dpt__appo_tb_bytes(const struct dpt_appo *a, size_t episodes)
{
    size_t rows = a->seqs * (a->T + 1);
    return 24 + rows * (a->od + a->aw + 3) * 4 + episodes * (sizeof(double) + sizeof(uint32_t));
}

static void dpt__appo_tb_pack(const struct dpt_appo *a, const dpt__appo_tb_t *b, unsigned char *p)
{
    size_t rows = a->seqs * (a->T + 1);
    uint64_t head[2] = {b->seqs, b->episodes};
    memcpy(p, head, 16);
    memcpy(p + 16, &b->version_sum, 8);
    p += 24;
    memcpy(p, b->obs, rows * a->od * 4);
    p += rows * a->od * 4;
    memcpy(p, b->act, rows * a->aw * 4);
    p += rows * a->aw * 4;
    memcpy(p, b->logp, rows * 4);
    memcpy(p + rows * 4, b->rew, rows * 4);
    memcpy(p + 2 * rows * 4, b->disc, rows * 4);
    p += 3 * rows * 4;
    memcpy(p, b->ret, b->episodes * sizeof(double));
    memcpy(p + b->episodes * sizeof(double), b->len, b->episodes * sizeof(uint32_t));
}

/* A batch from its bytes; DPT_EFORMAT when they are not one. */
static int dpt__appo_tb_unpack(const struct dpt_appo *a, const unsigned char *p, size_t n, int src,
                               dpt__appo_tb_t **out)
{
    uint64_t head[2];
    *out = NULL;
    if (n < 24 || (memcpy(head, p, 16), head[0] != a->seqs) || head[1] > DPT__EPISODE_WINDOW ||
        n != dpt__appo_tb_bytes(a, (size_t)head[1]))
        return dpt_error(DPT_EFORMAT,
                         "appo: a sample batch of %zu bytes from rank %d does not "
                         "match this run's sizes",
                         n, src);
    dpt__appo_tb_t *b = dpt__appo_tb_new(a);
    if (!b)
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate a train batch");
    size_t rows = a->seqs * (a->T + 1);
    b->seqs = (size_t)head[0];
    b->episodes = (size_t)head[1];
    memcpy(&b->version_sum, p + 16, 8);
    p += 24;
    memcpy(b->obs, p, rows * a->od * 4);
    p += rows * a->od * 4;
    memcpy(b->act, p, rows * a->aw * 4);
    p += rows * a->aw * 4;
    memcpy(b->logp, p, rows * 4);
    memcpy(b->rew, p + rows * 4, rows * 4);
    memcpy(b->disc, p + 2 * rows * 4, rows * 4);
    p += 3 * rows * 4;
    memcpy(b->ret, p, b->episodes * sizeof(double));
    memcpy(b->len, p + b->episodes * sizeof(double), b->episodes * sizeof(uint32_t));
    *out = b;
    return DPT_OK;
}

/* A sampler rank: its full batch to rank 0 (the send waits while rank 0,
 * its inqueue full, does not take it). */
int dpt__appo_sampler_send(dpt__appo_sampler_t *s, dpt__appo_group_t *g)
{
    struct dpt_appo *a = s->a;
    size_t n = dpt__appo_tb_bytes(a, g->tb->episodes);
    unsigned char *m = malloc(n);
    if (!m)
        return dpt_error(DPT_ENOMEM, "appo sampler: cannot allocate a message");
    dpt__appo_tb_pack(a, g->tb, m);
    int rc = dpt_comm_send(a->comm, 0, DPT__APPO_TAG_BATCH, m, n);
    free(m);
    dpt__appo_tb_free(g->tb);
    g->tb = NULL;
    return rc;
}

/* A sampler rank, between fragments: takes rank 0's newest weights and
 * notices STOP (DPT_ECLOSED). With wait set, waits for a message first
 * (no weights yet). Under mpirun a run has one policy. */
int dpt__appo_sampler_poll(dpt__appo_sampler_t *s, int wait)
{
    struct dpt_appo *a = s->a;
    dpt__appo_group_t *g = &s->groups[0];
    for (;;) {
        int flag = 0, tag = -1, rc;
        if (wait) {
            flag = 1;
        } else if ((rc = dpt_comm_probe(a->comm, 0, DPT_COMM_ANY_TAG, &flag, NULL, &tag, NULL)) !=
                   0) {
            return rc;
        }
        if (!flag)
            return DPT_OK;
        void *m = NULL;
        size_t n = 0;
        rc = dpt_comm_recv(a->comm, 0, DPT_COMM_ANY_TAG, a->cfg.common.comm_timeout_s, &m, &n, NULL,
                           &tag);
        if (rc == DPT_ETIMEDOUT)
            return dpt_error(rc,
                             "appo sampler (rank %d): no word from the learner (rank 0) for "
                             "comm_timeout_s = %g s",
                             a->rank, a->cfg.common.comm_timeout_s);
        if (rc)
            return rc;
        wait = 0;
        if (tag == DPT__APPO_TAG_STOP) {
            free(m);
            return DPT_ECLOSED;
        }
        if (tag == DPT__APPO_TAG_WEIGHTS && n == 8 + g->params.count * sizeof(float)) {
            memcpy(&g->version, m, 8);
            memcpy(g->params.data, (unsigned char *)m + 8, g->params.count * sizeof(float));
        }
        free(m);
    }
}

/* Rank 0: the newest weights to every sampler rank (without waiting for
 * them), then the next sample batch into the learner's inqueue: one held
 * since the inqueue was full, or one received within wait_s. */
int dpt__appo_pump(struct dpt_appo *a, double wait_s)
{
    int rc = DPT_OK;
    dpt__appo_pol_t *pol = &a->pols[0]; /* under mpirun a run has one policy */
    pthread_mutex_lock(&a->wmu);
    if (pol->pub_version != a->sent_version) {
        size_t n = 8 + pol->pub.count * sizeof(float);
        for (int r = 1; !rc && r < a->nranks; r++) {
            unsigned char *m = malloc(n);
            if (!m) {
                rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate the weights message");
                break;
            }
            memcpy(m, &pol->pub_version, 8);
            memcpy(m + 8, pol->pub.data, pol->pub.count * sizeof(float));
            rc = dpt_comm_send_async(a->comm, r, DPT__APPO_TAG_WEIGHTS, m, n);
        }
        a->sent_version = pol->pub_version;
    }
    pthread_mutex_unlock(&a->wmu);
    if (rc)
        return rc;
    if (!a->held) {
        void *m = NULL;
        size_t n = 0;
        int src = -1, tag = -1;
        rc = dpt_comm_recv(a->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, wait_s, &m, &n, &src,
                           &tag);
        if (rc == DPT_ETIMEDOUT)
            return DPT_OK; /* the learner's queue timeout decides when that is too long */
        if (rc)
            return rc;
        if (tag == DPT__APPO_TAG_BATCH) {
            rc = dpt__appo_tb_unpack(a, m, n, src, &a->held);
        } else if (tag == DPT__APPO_TAG_FAIL) {
            int code = DPT_EIO, off = 0;
            if (n > 0)
                ((char *)m)[n - 1] = '\0';
            if (!m || sscanf(m, "%d %n", &code, &off) < 1 || code >= 0)
                code = DPT_EIO;
            rc = dpt_error(code, "appo sampler (rank %d): %s", src, m ? (char *)m + off : "");
        }
        free(m);
        if (rc || !a->held)
            return rc;
        wait_s = 0.0;
    }
    rc = dpt__appo_push(a, a->held, wait_s);
    if (rc == DPT_OK)
        a->held = NULL;
    return rc == DPT_ETIMEDOUT ? DPT_OK : rc;
}

/* Rank 0 at the end: every sampler rank is told to stop; with wait set,
 * their last batches are taken (and dropped) until each said goodbye, for
 * at most comm_timeout_s. */
void dpt__appo_finish(struct dpt_appo *a, int wait)
{
    if (!a->comm || a->rank != 0 || a->finished)
        return;
    a->finished = 1;
    int left = 0;
    for (int r = 1; r < a->nranks; r++)
        if (dpt_comm_send_async(a->comm, r, DPT__APPO_TAG_STOP, NULL, 0) == DPT_OK)
            left++;
    double until = dpt_now() + a->cfg.common.comm_timeout_s;
    while (wait && left > 0 && dpt_now() < until) {
        void *m = NULL;
        size_t n = 0;
        int tag = -1;
        if (dpt_comm_recv(a->comm, DPT_COMM_ANY_SOURCE, DPT_COMM_ANY_TAG, until - dpt_now(), &m, &n,
                          NULL, &tag) != DPT_OK)
            break;
        free(m);
        if (tag == DPT__APPO_TAG_BYE || tag == DPT__APPO_TAG_FAIL)
            left--;
    }
}

int dpt_appo_create_mpi(dpt_appo_t **out, const dpt_env_class_t *cls, const dpt_appo_config_t *cfg,
                        dpt_comm_t *comm)
{
    *out = NULL;
    int rank = dpt_comm_rank(comm), size = dpt_comm_size(comm);
    if (size < 2)
        return dpt_error(DPT_EINVAL, "appo: a world of %d rank has no sampler rank", size);
    if (cfg->num_workers != 1)
        return dpt_error(DPT_EINVAL,
                         "num_workers = %d: under mpirun every rank but rank 0 (the learner) "
                         "is one sampler; set num_workers = 1",
                         cfg->num_workers);
    if (cfg->policies.count != 1)
        return dpt_error(DPT_EINVAL,
                         "policies: %d policies under mpirun are not supported yet (one "
                         "policy, or one process)",
                         cfg->policies.count);
    int rc = dpt__appo_new(out, cls, cfg, rank == 0 ? 0 : 1, rank - 1);
    if (rc)
        return rc;
    (*out)->comm = comm;
    (*out)->rank = rank;
    (*out)->nranks = size;
    return DPT_OK;
}

int dpt_appo_run_sampler(dpt_appo_t *a)
{
    if (!a->comm || a->rank == 0 || a->nsamplers != 1)
        return dpt_error(DPT_ESTATE, "appo: dpt_appo_run_sampler is for a sampler rank");
    dpt__appo_sampler_t *s = &a->samplers[0];
    atomic_store(&s->running, 1);
    dpt__appo_sampler_main(s);
    if (!atomic_load(&s->failed))
        return dpt_comm_send(a->comm, 0, DPT__APPO_TAG_BYE, NULL, 0);
    /* Rank 0 ends the run with this error; wait for its word (or the end of
     * the job) so that the error is reported once, by rank 0. */
    char msg[300];
    int n = snprintf(msg, sizeof msg, "%d %s", s->rc, s->err);
    if (dpt_comm_send(a->comm, 0, DPT__APPO_TAG_FAIL, msg, (size_t)n + 1) == DPT_OK) {
        void *m = NULL;
        size_t got = 0;
        int tag = -1;
        while (dpt_comm_recv(a->comm, 0, DPT_COMM_ANY_TAG, a->cfg.common.comm_timeout_s, &m, &got,
                             NULL, &tag) == DPT_OK) {
            free(m);
            m = NULL;
            if (tag == DPT__APPO_TAG_STOP)
                break;
        }
    }
    return dpt_error(s->rc, "%s", s->err);
}
