/*
 * APPO/IMPALA under mpirun (dpt_appo_create_mpi, appo_internal.h): rank 0
 * learns, every other rank is one sampler. They speak protocol
 * DPT__MSG_PROTO_APPO of comm/msg.h:
 *
 *   sampler -> rank 0  BATCH {got u64, seqs u64, episodes u64, version_sum f64,
 *                            obs f32[rows * obs_dim], actions u32[rows * act_w],
 *                            logp f32[rows], rewards f32[rows],
 *                            discounts f32[rows], returns f64[episodes],
 *                            lengths u32[episodes]}
 *                      rows = seqs * (T + 1); got: the WEIGHTS messages the
 *                      sampler has received so far; actions are the bits of
 *                      int32 (discrete) or float32 (continuous) values
 *                      FAIL {code, text}   its env failed; rank 0 ends the run
 *                      ASK_STOP            it was asked to stop (a signal that
 *                                          reached it alone): rank 0 ends its
 *                                          iteration and the run
 *                      BYE                 the answer to STOP
 *   rank 0 -> sampler  WEIGHTS {version u64, count u64, params f32[count]}
 *                      STOP                the end of the run
 *
 * Flow: a sampler's BATCH waits (dpt__msg_send) while rank 0, its inqueue
 * full, does not take it: that is the samplers' back-pressure. WEIGHTS go
 * out without waiting (dpt__msg_send_async), and to each sampler at most
 * DPT__APPO_WEIGHTS_AHEAD beyond those its last batch said it got: a
 * stopped sampler then holds a bounded number of messages (and of the
 * transport's buffers, which all of rank 0's sends share) instead of one
 * per update, and rank 0 goes on learning from the others. The end is
 * msg.h's handshake: STOP to every sampler, each one's BYE within
 * comm_timeout_s, or an error naming those that did not answer.
 */
#include "dpt/stats.h"
#include "dpt/status.h"
#include "appo_internal.h"
#include "core/stopflag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The protocol's own kinds. */
enum { DPT__APPO_BATCH = DPT__MSG_FIRST, DPT__APPO_WEIGHTS };

/* WEIGHTS messages a sampler may have on their way beyond those it
 * acknowledged. A healthy sampler acknowledges with every batch, and takes
 * every WEIGHTS waiting between two fragments, so it always has the newest
 * weights but one batch's worth. */
#define DPT__APPO_WEIGHTS_AHEAD 2

/* n 4-byte values (int32 or float32 bits) as u32 fields, and back. */
static void dpt__appo_put_u32s(dpt__msg_t *m, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, b + 4 * i, 4);
        dpt__msg_put_u32(m, v);
    }
}

static void dpt__appo_get_u32s(dpt__msg_t *m, void *p, size_t n)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = dpt__msg_get_u32(m);
        memcpy(b + 4 * i, &v, 4);
    }
}

/* A sampler rank: its full batch as a BATCH message in m. */
static void dpt__appo_tb_write(const struct dpt_appo *a, const dpt__appo_tb_t *b, dpt__msg_t *m)
{
    size_t rows = a->seqs * (a->T + 1);
    dpt__msg_begin(m, DPT__MSG_PROTO_APPO, DPT__APPO_BATCH);
    dpt__msg_put_u64(m, a->weights_got);
    dpt__msg_put_u64(m, b->seqs);
    dpt__msg_put_u64(m, b->episodes);
    dpt__msg_put_f64(m, b->version_sum);
    dpt__msg_put_f32s(m, b->obs, rows * a->od);
    dpt__appo_put_u32s(m, b->act, rows * a->aw);
    dpt__msg_put_f32s(m, b->logp, rows);
    dpt__msg_put_f32s(m, b->rew, rows);
    dpt__msg_put_f32s(m, b->disc, rows);
    for (size_t e = 0; e < b->episodes; e++)
        dpt__msg_put_f64(m, b->ret[e]);
    for (size_t e = 0; e < b->episodes; e++)
        dpt__msg_put_u32(m, b->len[e]);
}

/* Rank 0: the batch of a BATCH message, and the WEIGHTS its sender says it
 * got; DPT_EPROTO naming the sender when the message does not fit this
 * run's sizes. */
static int dpt__appo_tb_read(struct dpt_appo *a, dpt__msg_t *m, dpt__appo_tb_t **out)
{
    size_t rows = a->seqs * (a->T + 1);
    *out = NULL;
    uint64_t got = dpt__msg_get_u64(m);
    uint64_t seqs = dpt__msg_get_u64(m), episodes = dpt__msg_get_u64(m);
    int rc = dpt__msg_check(m, 0, "appo: a sample batch");
    if (!rc && (seqs != a->seqs || episodes > DPT__EPISODE_WINDOW))
        rc = dpt_error(DPT_EPROTO,
                       "appo: a sample batch from rank %d holds %llu sequences and %llu "
                       "episodes; this run's hold %zu and at most %d",
                       m->src, (unsigned long long)seqs, (unsigned long long)episodes, a->seqs,
                       DPT__EPISODE_WINDOW);
    if (rc)
        return rc;
    dpt__appo_tb_t *b = dpt__appo_tb_new(a);
    if (!b)
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate a train batch");
    b->seqs = (size_t)seqs;
    b->episodes = (size_t)episodes;
    b->version_sum = dpt__msg_get_f64(m);
    dpt__msg_get_f32s(m, b->obs, rows * a->od);
    dpt__appo_get_u32s(m, b->act, rows * a->aw);
    dpt__msg_get_f32s(m, b->logp, rows);
    dpt__msg_get_f32s(m, b->rew, rows);
    dpt__msg_get_f32s(m, b->disc, rows);
    for (size_t e = 0; e < b->episodes; e++)
        b->ret[e] = dpt__msg_get_f64(m);
    for (size_t e = 0; e < b->episodes; e++)
        b->len[e] = dpt__msg_get_u32(m);
    if ((rc = dpt__msg_check(m, 1, "appo: a sample batch")) != 0) {
        dpt__appo_tb_free(b);
        return rc;
    }
    dpt__appo_peer_t *p = &a->peers[m->src]; /* a rank of the world, not 0 */
    if (got > p->got && got <= p->sent)
        p->got = got;
    *out = b;
    return DPT_OK;
}

/* A sampler rank: its full batch to rank 0 (the send waits while rank 0,
 * its inqueue full, does not take it). */
int dpt__appo_sampler_send(dpt__appo_sampler_t *s, dpt__appo_group_t *g)
{
    struct dpt_appo *a = s->a;
    dpt__appo_tb_write(a, g->tb, &a->out);
    int rc = dpt__msg_send(a->comm, 0, &a->out);
    dpt__appo_tb_free(g->tb);
    g->tb = NULL;
    return rc;
}

/* A sampler rank: the weights of a WEIGHTS message (m) into group g. */
static int dpt__appo_take_weights(struct dpt_appo *a, dpt__msg_t *m, dpt__appo_group_t *g)
{
    uint64_t version = dpt__msg_get_u64(m), count = dpt__msg_get_u64(m);
    int rc = dpt__msg_check(m, 0, "appo: weights");
    if (!rc && (count != g->params.count || dpt__msg_left(m) != count * sizeof(float)))
        return dpt_error(DPT_EPROTO,
                         "appo: weights from rank %d: %llu values in %zu bytes, this run's "
                         "policy has %zu",
                         m->src, (unsigned long long)count, dpt__msg_left(m), g->params.count);
    if (rc)
        return rc;
    dpt__msg_get_f32s(m, g->params.data, g->params.count);
    g->version = version;
    a->weights_got++;
    return DPT_OK;
}

/* A sampler rank, between fragments: takes rank 0's newest weights and
 * notices STOP (DPT_ECLOSED). With wait set, waits for a message first
 * (no weights yet). Under mpirun a run has one policy. */
int dpt__appo_sampler_poll(dpt__appo_sampler_t *s, int wait)
{
    struct dpt_appo *a = s->a;
    dpt__appo_group_t *g = &s->groups[0];
    if (dpt__stop_flag_set(a->stop_flag) && !a->asked_stop) {
        /* Rank 0 ends the run (its STOP comes as for any end). */
        a->asked_stop = 1;
        int rc = dpt__msg_send_ask_stop(a->comm, 0, DPT__MSG_PROTO_APPO);
        if (rc)
            return rc;
    }
    for (;;) {
        int flag = 0, rc;
        if (wait)
            flag = 1;
        else if ((rc = dpt_comm_probe(a->comm, 0, DPT_COMM_ANY_TAG, &flag, NULL, NULL, NULL)) != 0)
            return rc;
        if (!flag)
            return DPT_OK;
        rc = dpt__msg_recv(a->comm, 0, DPT__MSG_PROTO_APPO, -1, a->cfg.common.comm_timeout_s,
                           &a->in);
        if (rc == DPT_ETIMEDOUT)
            return dpt_error(rc,
                             "appo sampler (rank %d): no word from the learner (rank 0) for "
                             "comm_timeout_s = %g s",
                             a->rank, a->cfg.common.comm_timeout_s);
        if (rc)
            return rc;
        wait = 0;
        if (a->in.kind == DPT__MSG_STOP)
            return DPT_ECLOSED;
        if (a->in.kind != DPT__APPO_WEIGHTS)
            return dpt_error(DPT_EPROTO, "appo: rank 0 sent a message of kind %d to a sampler",
                             a->in.kind);
        if ((rc = dpt__appo_take_weights(a, &a->in, g)) != 0)
            return rc;
    }
}

/* Rank 0: the newest weights to every sampler rank that has not got them
 * and has fewer than DPT__APPO_WEIGHTS_AHEAD on their way. */
static int dpt__appo_send_weights(struct dpt_appo *a)
{
    int rc = DPT_OK;
    dpt__appo_pol_t *pol = &a->pols[0]; /* under mpirun a run has one policy */
    pthread_mutex_lock(&a->wmu);
    for (int r = 1; !rc && r < a->nranks; r++) {
        dpt__appo_peer_t *p = &a->peers[r];
        if (p->version == pol->pub_version || p->sent - p->got >= DPT__APPO_WEIGHTS_AHEAD)
            continue;
        dpt__msg_begin(&a->out, DPT__MSG_PROTO_APPO, DPT__APPO_WEIGHTS);
        dpt__msg_put_u64(&a->out, pol->pub_version);
        dpt__msg_put_u64(&a->out, pol->pub.count);
        dpt__msg_put_f32s(&a->out, pol->pub.data, pol->pub.count);
        rc = dpt__msg_send_async(a->comm, r, &a->out);
        p->version = pol->pub_version;
        p->sent++;
    }
    pthread_mutex_unlock(&a->wmu);
    return rc;
}

/* Rank 0: the next message of a sampler rank, waiting at most wait_s: a
 * batch into a->held, or the error a sampler reported. */
static int dpt__appo_recv_batch(struct dpt_appo *a, double wait_s)
{
    dpt__msg_t *m = &a->in;
    int rc = dpt__msg_recv(a->comm, DPT_COMM_ANY_SOURCE, DPT__MSG_PROTO_APPO, -1, wait_s, m);
    if (rc == DPT_ETIMEDOUT)
        return DPT_OK; /* the learner's queue timeout decides when that is too long */
    if (rc)
        return rc;
    if (m->kind == DPT__APPO_BATCH)
        return dpt__appo_tb_read(a, m, &a->held);
    if (m->kind == DPT__MSG_FAIL)
        return dpt__msg_error(m);
    if (m->kind == DPT__MSG_ASK_STOP) {
        if (!a->stop_asked_by)
            a->stop_asked_by = m->src;
        return DPT_OK;
    }
    return dpt_error(DPT_EPROTO, "appo: rank %d sent a message of kind %d during the run", m->src,
                     m->kind);
}

/* Rank 0: weights out, then the next sample batch into the learner's
 * inqueue: one held since the inqueue was full, or one received within
 * wait_s. */
int dpt__appo_pump(struct dpt_appo *a, double wait_s)
{
    int rc = dpt__appo_send_weights(a);
    if (rc)
        return rc;
    if (!a->held) {
        if ((rc = dpt__appo_recv_batch(a, wait_s)) != 0 || !a->held)
            return rc;
        wait_s = 0.0;
    }
    rc = dpt__appo_push(a, a->held, wait_s);
    if (rc == DPT_OK)
        a->held = NULL;
    return rc == DPT_ETIMEDOUT ? DPT_OK : rc;
}

/* Rank 0 at the end, once: STOP to every sampler rank; with wait set, the
 * handshake (their last batches are dropped until each said goodbye, for
 * at most comm_timeout_s), whose error names the ranks that did not
 * answer. */
int dpt__appo_finish(struct dpt_appo *a, int wait)
{
    if (!a->comm || a->rank != 0 || a->finished)
        return DPT_OK;
    a->finished = 1;
    size_t n = (size_t)a->nranks - 1;
    if (wait)
        return dpt__msg_stop_all(a->comm, DPT__MSG_PROTO_APPO, a->sampler_ranks, n,
                                 a->cfg.common.comm_timeout_s);
    int rc = DPT_OK;
    for (size_t i = 0; i < n; i++) {
        dpt__msg_begin(&a->out, DPT__MSG_PROTO_APPO, DPT__MSG_STOP);
        int sent = dpt__msg_send_async(a->comm, a->sampler_ranks[i], &a->out);
        if (!rc)
            rc = sent;
    }
    return rc;
}

int dpt_appo_stop_asked(const dpt_appo_t *a)
{
    return a && a->rank == 0 ? a->stop_asked_by : 0;
}

int dpt_appo_end(dpt_appo_t *a)
{
    return a ? dpt__appo_finish(a, 1) : DPT_OK;
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
    dpt_appo_t *a = NULL;
    int rc = dpt__appo_new(&a, cls, cfg, rank == 0 ? 0 : 1, rank - 1);
    if (rc)
        return rc;
    a->comm = comm;
    a->rank = rank;
    a->nranks = size;
    if (rank == 0) {
        a->peers = calloc((size_t)size, sizeof *a->peers);
        a->sampler_ranks = calloc((size_t)size, sizeof *a->sampler_ranks);
        if (!a->peers || !a->sampler_ranks) {
            dpt_appo_destroy(a);
            return dpt_error(DPT_ENOMEM, "appo: cannot allocate the table of %d ranks", size);
        }
        for (int r = 0; r < size; r++) {
            a->peers[r].version = UINT64_MAX;
            a->sampler_ranks[r] = r + 1; /* the first size - 1 are used */
        }
    }
    *out = a;
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
        return dpt__msg_send_bye(a->comm, 0, DPT__MSG_PROTO_APPO);
    /* Rank 0 ends the run with this error; wait for its STOP (or the end of
     * the job) so that the error is reported once, by rank 0. */
    char text[300];
    snprintf(text, sizeof text, "appo sampler: %s", s->err);
    if (dpt__msg_send_fail(a->comm, 0, DPT__MSG_PROTO_APPO, s->rc, text) == DPT_OK)
        while (dpt__msg_recv(a->comm, 0, DPT__MSG_PROTO_APPO, -1, a->cfg.common.comm_timeout_s,
                             &a->in) == DPT_OK &&
               a->in.kind != DPT__MSG_STOP)
            ;
    return dpt_error(s->rc, "%s", s->err);
}
