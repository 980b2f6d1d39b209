/*
 * Collectives, MPI backend: one participant per process of an MPI
 * communicator, carried by the installed MPI library (Open MPI on Debian).
 * dpt adds no transport of its own; it adds size_t counts, AVG, the debug
 * fingerprint check, a timeout on every collective and status codes with
 * messages.
 *
 * Mapping (the communicator is a private duplicate, with MPI_ERRORS_RETURN so
 * every failure comes back as a return code that is checked). Every
 * operation is the non-blocking MPI call, completed by dpt__mwait
 * (comm_mpi_wait.c), which polls with a sleeping back-off until it completes
 * or the timeout passes:
 *   allreduce       native: MPI_Iallreduce(MPI_IN_PLACE, SUM), then / size
 *                   for AVG; ring, tree, hier: MPI_Isend/MPI_Irecv steps
 *                   (comm_mpi_algo.c), then / size for AVG
 *   iallreduce/wait MPI_Iallreduce ... dpt__mwait (ring, tree, hier: all in
 *                   the wait)
 *   broadcast       MPI_Ibcast
 *   allgather       MPI_Iallgather (MPI_IN_PLACE when send is the own block)
 *   reduce_scatter  MPI_Ireduce_scatter_block when count % size == 0, else
 *                   MPI_Ireduce_scatter with the dpt block sizes
 *   barrier         MPI_Ibarrier
 *   send, recv,     MPI_Isend / MPI_Iprobe + MPI_Irecv / MPI_Iprobe on a
 *   probe           third duplicate (comm_mpi_p2p.c)
 *   create          MPI_Comm_idup three times (the collectives, the side
 *                   channel, point-to-point messages);
 *                   MPI_Iallgather of the processor names (hier's nodes)
 *                   unless ranks_per_node is given
 * Open MPI serves the non-blocking calls with its libnbc component and the
 * blocking ones with "tuned": different algorithms. With 2 ranks each
 * element is one addition, so the results are the same bits; with 3 or more
 * the order of the additions, hence the rounding of non-integer data, can
 * differ from what MPI_Allreduce / MPI_Reduce_scatter gave (docs/
 * COLLECTIVES.md). libnbc's order is as fixed as tuned's: the same inputs,
 * size and count give the same bits in every run and on every rank.
 *
 * Limits: MPI counts are int. Allreduce, iallreduce and broadcast are split
 * into calls of at most 2^30 elements. An allgather with more than INT_MAX
 * elements per rank becomes one broadcast per rank, and a reduce-scatter
 * with a block over INT_MAX one MPI_Ireduce per rank (both chunked); slower,
 * but only reached beyond 8 GiB per rank. The timeout covers the whole dpt
 * call, chunks included.
 *
 * Debug check (options.check): before each collective the ranks allgather
 * (call, op, root, count); if any differs from rank 0's, every rank returns
 * DPT_ECOMM with the same message naming both sides, where the collectives
 * themselves would have deadlocked or mixed data.
 */
#include "comm/comm_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/stats.h"
#include "dpt/status.h"
#include "dpt_config.h"

#if DPT_HAVE_MPI
#include "comm/comm_mpi_internal.h"
#endif

#define DPT__MPI_DEFAULT_TIMEOUT_S 300.0

void dpt_comm_mpi_options_init(dpt_comm_mpi_options_t *opt)
{
    if (opt == NULL)
        return;
    opt->mpi_comm = NULL;
    opt->check = 0;
    opt->timeout_s = DPT__MPI_DEFAULT_TIMEOUT_S;
    opt->algorithm = DPT_ALLREDUCE_AUTO;
    opt->ranks_per_node = 0;
}

#if !DPT_HAVE_MPI

#define NO_MPI_MSG \
    "this build has no MPI (install libopenmpi-dev and openmpi-bin, then reconfigure)"

int dpt_comm_mpi_init(int *argc, char ***argv, dpt_comm_mpi_thread_t required)
{
    (void)argc;
    (void)argv;
    (void)required;
    return dpt_error(DPT_ENOTSUP, "comm mpi: %s", NO_MPI_MSG);
}

int dpt_comm_mpi_finalize(void)
{
    return 0;
}

int dpt_comm_mpi_initialized(void)
{
    return 0;
}

int dpt_comm_mpi_create(dpt_comm_t **comm, const dpt_comm_mpi_options_t *opt)
{
    (void)opt;
    if (comm != NULL)
        *comm = NULL;
    return dpt_error(DPT_ENOTSUP, "comm mpi: %s", NO_MPI_MSG);
}

int dpt_comm_mpi_abort(int code)
{
    return dpt_error(DPT_ENOTSUP, "comm mpi: abort(%d): %s", code, NO_MPI_MSG);
}

/* Never reached without MPI (no handle exists); defined for the hier code. */
void dpt__comm_mpi_set_unit(dpt_comm_t *c, const char *unit)
{
    (void)c;
    (void)unit;
}

void dpt__comm_mpi_fail(dpt_comm_t *c, int code, const char *msg)
{
    (void)c;
    (void)code;
    (void)msg;
}

int dpt__comm_mpi_stuck(const dpt_comm_t *c)
{
    (void)c;
    return 0;
}

double dpt__comm_mpi_wait_limit_s(const dpt_comm_t *c)
{
    (void)c;
    return 0.0;
}

#else /* DPT_HAVE_MPI */

#define CHUNK ((size_t)1 << 30) /* elements per MPI call, below INT_MAX */

static int dpt__mpi_we_initialized;

static const char *level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "?";
    }
}

int dpt_comm_mpi_init(int *argc, char ***argv, dpt_comm_mpi_thread_t required)
{
    int level;
    switch (required) {
    case DPT_COMM_MPI_FUNNELED: level = MPI_THREAD_FUNNELED; break;
    case DPT_COMM_MPI_SERIALIZED: level = MPI_THREAD_SERIALIZED; break;
    case DPT_COMM_MPI_MULTIPLE: level = MPI_THREAD_MULTIPLE; break;
    default: return dpt_error(DPT_EINVAL, "comm mpi: init: unknown thread level %d", (int)required);
    }
    int inited = 0, finalized = 0, provided = 0, mrc;
    char msg[MPI_MAX_ERROR_STRING];
    if ((mrc = MPI_Initialized(&inited)) != MPI_SUCCESS ||
        (mrc = MPI_Finalized(&finalized)) != MPI_SUCCESS) {
        dpt__mpi_message(mrc, msg, sizeof msg);
        return dpt_error(DPT_ECOMM, "comm mpi: init: MPI_Initialized failed: %s", msg);
    }
    if (finalized)
        return dpt_error(DPT_ESTATE, "comm mpi: init: MPI is already finalized");
    if (!inited) {
        mrc = MPI_Init_thread(argc, argv, level, &provided);
        if (mrc != MPI_SUCCESS) {
            dpt__mpi_message(mrc, msg, sizeof msg);
            return dpt_error(DPT_ECOMM, "comm mpi: MPI_Init_thread failed: %s", msg);
        }
        dpt__mpi_we_initialized = 1;
    } else if ((mrc = MPI_Query_thread(&provided)) != MPI_SUCCESS) {
        dpt__mpi_message(mrc, msg, sizeof msg);
        return dpt_error(DPT_ECOMM, "comm mpi: MPI_Query_thread failed: %s", msg);
    }
    if (provided < level)
        return dpt_error(DPT_ENOTSUP, "comm mpi: the MPI library provides %s, %s is required",
                         level_name(provided), level_name(level));
    return 0;
}

int dpt_comm_mpi_finalize(void)
{
    int finalized = 0;
    if (!dpt__mpi_we_initialized)
        return 0;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized)
        return 0;
    dpt__mpi_we_initialized = 0;
    int mrc = MPI_Finalize();
    if (mrc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        dpt__mpi_message(mrc, msg, sizeof msg);
        return dpt_error(DPT_ECOMM, "comm mpi: MPI_Finalize failed: %s", msg);
    }
    return 0;
}

int dpt_comm_mpi_initialized(void)
{
    int inited = 0, finalized = 0;
    if (MPI_Initialized(&inited) != MPI_SUCCESS || MPI_Finalized(&finalized) != MPI_SUCCESS)
        return 0;
    return inited && !finalized;
}

typedef dpt__mcomm_t mcomm_t;

/* Entry of every collective: counts it, then an earlier failure, then the
 * debug check. *t0 is the start of the call, from which the timeout runs. */
static int enter(mcomm_t *m, int call, int op, int root, size_t count, int algo, double *t0)
{
    m->cur.seq++;
    m->cur.call = call;
    m->cur.root = root;
    m->cur.count = count;
    m->cur.tag = -1;
    *t0 = dpt_now();
    if (m->failed) {
        char what[128];
        dpt__mop_describe(&m->cur, m->unit, what, sizeof what);
        return dpt_error(m->failed, "comm %s %d: %s aborted, the communicator failed earlier: %s",
                         m->unit, m->base.rank, what, m->fail_msg);
    }
    if (!m->check)
        return 0;
    m->fp_mine[0] = (uint64_t)call;
    m->fp_mine[1] = (uint64_t)(int64_t)op;
    m->fp_mine[2] = (uint64_t)(int64_t)root;
    m->fp_mine[3] = (uint64_t)count;
    m->fp_mine[4] = (uint64_t)(int64_t)algo;
    MPI_Request r;
    int mrc = MPI_Iallgather(m->fp_mine, 5, MPI_UINT64_T, m->fp_all, 5, MPI_UINT64_T, m->comm, &r);
    if (mrc != MPI_SUCCESS)
        return dpt__mpi_fail(m, mrc, "MPI_Iallgather (debug check)");
    int rc = dpt__mwait(m, 1, &r, *t0, 5 * sizeof(uint64_t) * (size_t)m->base.size,
                        "MPI_Iallgather (debug check)");
    if (rc < 0)
        return rc;
    for (int q = 1; q < m->base.size; q++) {
        const uint64_t *a = m->fp_all, *b = m->fp_all + 5 * q;
        if (memcmp(a, b, 5 * sizeof *a) != 0) {
            dpt__comm_fp_t fa = {(int)a[0], (int)(int64_t)a[1], (int)(int64_t)a[2], (size_t)a[3],
                                 (int)(int64_t)a[4]};
            dpt__comm_fp_t fb = {(int)b[0], (int)(int64_t)b[1], (int)(int64_t)b[2], (size_t)b[3],
                                 (int)(int64_t)b[4]};
            char da[100], db[100], msg[300];
            dpt__comm_fp_describe(&fa, da, sizeof da);
            dpt__comm_fp_describe(&fb, db, sizeof db);
            snprintf(msg, sizeof msg,
                     "mismatched collective calls: %s 0 called %s while %s %d called %s", m->unit,
                     da, m->unit, q, db);
            /* every rank finds the same mismatch: nobody needs telling */
            return dpt__mfail(m, DPT_ECOMM, 0, msg);
        }
    }
    return 0;
}

/* Starts one MPI operation (its return code `mrc`) and waits for it. */
static int run1(mcomm_t *m, int mrc, MPI_Request *r, double t0, size_t bytes, const char *call)
{
    if (mrc != MPI_SUCCESS)
        return dpt__mpi_fail(m, mrc, call);
    return dpt__mwait(m, 1, r, t0, bytes, call);
}

static void divide(float *buf, size_t n, int size)
{
    float d = (float)size;
    for (size_t i = 0; i < n; i++)
        buf[i] = buf[i] / d;
}

static int m_allreduce(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op)
{
    mcomm_t *m = (mcomm_t *)c;
    double t0;
    dpt_comm_algorithm_t algo = dpt__mpi_resolve(m, count);
    int rc = enter(m, DPT__CALL_ALLREDUCE, (int)op, -1, count, (int)algo, &t0);
    if (rc < 0)
        return rc;
    if (algo != DPT_ALLREDUCE_NATIVE && (rc = dpt__mpi_allreduce_p2p(m, buf, count, algo, t0)) < 0)
        return rc;
    for (size_t off = 0; algo == DPT_ALLREDUCE_NATIVE && off < count; off += CHUNK) {
        size_t n = count - off < CHUNK ? count - off : CHUNK;
        MPI_Request r;
        int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, m->comm, &r);
        if ((rc = run1(m, mrc, &r, t0, n * sizeof(float), "MPI_Iallreduce")) < 0)
            return rc;
    }
    if (op == DPT_REDUCE_AVG && c->size > 1)
        divide(buf, count, c->size);
    return 0;
}

static int m_iallreduce(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op)
{
    mcomm_t *m = (mcomm_t *)c;
    double t0;
    dpt_comm_algorithm_t algo = dpt__mpi_resolve(m, count);
    int rc = enter(m, DPT__CALL_IALLREDUCE, (int)op, -1, count, (int)algo, &t0);
    if (rc < 0)
        return rc;
    m->nreqs = 0;
    m->pbuf = buf;
    m->pcount = count;
    m->pop = op;
    m->palgo = algo;
    if (algo != DPT_ALLREDUCE_NATIVE)
        return 0; /* dpt's algorithms run in the wait */
    size_t need = (count + CHUNK - 1) / CHUNK;
    if (need > (size_t)m->reqs_cap) {
        MPI_Request *r = realloc(m->reqs, need * sizeof *r);
        if (r == NULL)
            return dpt__mfail(m, DPT_ENOMEM, 1, "iallreduce: out of memory for requests");
        m->reqs = r;
        m->reqs_cap = (int)need;
    }
    m->nreqs = 0;
    for (size_t off = 0; off < count; off += CHUNK) {
        size_t n = count - off < CHUNK ? count - off : CHUNK;
        int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, m->comm,
                                 &m->reqs[m->nreqs]);
        if (mrc != MPI_SUCCESS) {
            m->stuck = m->nreqs > 0; /* the chunks already started stay pending */
            return dpt__mpi_fail(m, mrc, "MPI_Iallreduce");
        }
        m->nreqs++;
    }
    return 0;
}

/* The timeout runs from the start of the wait (as for the threads backend):
 * the time between the start and the wait is the caller's. */
static int m_wait(dpt_comm_t *c)
{
    mcomm_t *m = (mcomm_t *)c;
    if (m->palgo != DPT_ALLREDUCE_NATIVE) {
        int rc = dpt__mpi_allreduce_p2p(m, m->pbuf, m->pcount, m->palgo, dpt_now());
        if (rc < 0)
            return rc;
    }
    if (m->nreqs > 0) {
        int n = m->nreqs;
        m->nreqs = 0;
        int rc = dpt__mwait(m, n, m->reqs, dpt_now(), m->pcount * sizeof(float), "MPI_Iallreduce");
        if (rc < 0)
            return rc;
    }
    if (m->pop == DPT_REDUCE_AVG && c->size > 1)
        divide(m->pbuf, m->pcount, c->size);
    return 0;
}

static int bcast_chunks(mcomm_t *m, float *buf, size_t count, int root, double t0)
{
    for (size_t off = 0; off < count; off += CHUNK) {
        size_t n = count - off < CHUNK ? count - off : CHUNK;
        MPI_Request r;
        int mrc = MPI_Ibcast(buf + off, (int)n, MPI_FLOAT, root, m->comm, &r);
        int rc = run1(m, mrc, &r, t0, n * sizeof(float), "MPI_Ibcast");
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int m_broadcast(dpt_comm_t *c, float *buf, size_t count, int root)
{
    mcomm_t *m = (mcomm_t *)c;
    double t0;
    int rc = enter(m, DPT__CALL_BROADCAST, -1, root, count, -1, &t0);
    return rc < 0 ? rc : bcast_chunks(m, buf, count, root, t0);
}

static int m_allgather(dpt_comm_t *c, const float *send, size_t count, float *recv)
{
    mcomm_t *m = (mcomm_t *)c;
    double t0;
    int rc = enter(m, DPT__CALL_ALLGATHER, -1, -1, count, -1, &t0);
    if (rc < 0 || count == 0)
        return rc;
    float *own = recv + (size_t)c->rank * count;
    if (count <= (size_t)INT_MAX) {
        const void *sb = send == own ? MPI_IN_PLACE : (const void *)send;
        MPI_Request r;
        int mrc =
            MPI_Iallgather(sb, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, m->comm, &r);
        return run1(m, mrc, &r, t0, count * sizeof(float) * (size_t)c->size, "MPI_Iallgather");
    }
    if (send != own)
        memcpy(own, send, count * sizeof(float));
    for (int q = 0; q < c->size; q++)
        if ((rc = bcast_chunks(m, recv + (size_t)q * count, count, q, t0)) < 0)
            return rc;
    return 0;
}

static int m_reduce_scatter(dpt_comm_t *c, const float *send, size_t count, float *recv,
                            dpt_reduce_op_t op)
{
    mcomm_t *m = (mcomm_t *)c;
    int P = c->size, mrc;
    double t0;
    int rc = enter(m, DPT__CALL_REDUCE_SCATTER, (int)op, -1, count, -1, &t0);
    if (rc < 0)
        return rc;
    size_t mine = dpt_comm_block_size(count, P, c->rank);
    float *out = recv != NULL ? recv : &m->dummy;
    MPI_Request r;
    if (count / (size_t)P + 1 <= (size_t)INT_MAX) {
        if (count % (size_t)P == 0) {
            mrc = MPI_Ireduce_scatter_block(send, out, (int)(count / (size_t)P), MPI_FLOAT, MPI_SUM,
                                            m->comm, &r);
            rc = run1(m, mrc, &r, t0, count * sizeof(float), "MPI_Ireduce_scatter_block");
        } else {
            for (int q = 0; q < P; q++)
                m->counts[q] = (int)dpt_comm_block_size(count, P, q);
            mrc = MPI_Ireduce_scatter(send, out, m->counts, MPI_FLOAT, MPI_SUM, m->comm, &r);
            rc = run1(m, mrc, &r, t0, count * sizeof(float), "MPI_Ireduce_scatter");
        }
        if (rc < 0)
            return rc;
    } else {
        for (int q = 0; q < P; q++) {
            size_t off = dpt_comm_block_offset(count, P, q), len = dpt_comm_block_size(count, P, q);
            for (size_t k = 0; k < len; k += CHUNK) {
                size_t n = len - k < CHUNK ? len - k : CHUNK;
                mrc = MPI_Ireduce(send + off + k, q == c->rank ? recv + k : NULL, (int)n, MPI_FLOAT,
                                  MPI_SUM, q, m->comm, &r);
                if ((rc = run1(m, mrc, &r, t0, n * sizeof(float), "MPI_Ireduce")) < 0)
                    return rc;
            }
        }
    }
    if (op == DPT_REDUCE_AVG && P > 1 && mine > 0)
        divide(recv, mine, P);
    return 0;
}

static dpt_comm_algorithm_t m_algorithm(const dpt_comm_t *c, size_t count)
{
    return dpt__mpi_resolve((const mcomm_t *)c, count);
}

static int m_barrier(dpt_comm_t *c)
{
    mcomm_t *m = (mcomm_t *)c;
    double t0;
    int rc = enter(m, DPT__CALL_BARRIER, -1, -1, 0, -1, &t0);
    if (rc < 0)
        return rc;
    MPI_Request r;
    int mrc = MPI_Ibarrier(m->comm, &r);
    return run1(m, mrc, &r, t0, 0, "MPI_Ibarrier");
}

/* Completes a side-channel send or hands it to MPI; returns 1 if it was
 * still in flight (its buffer, part of *m, must then outlive the handle). */
static int settle_send(MPI_Request *r)
{
    if (*r == MPI_REQUEST_NULL)
        return 0;
    int done = 0;
    if (MPI_Test(r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
        return 0;
    MPI_Request_free(r);
    return 1;
}

static void m_free(mcomm_t *m)
{
    free(m->async_reqs);
    free(m->async_bufs);
    free(m->fp_all);
    free(m->counts);
    free(m->reqs);
    free(m->reply_buf);
    free(m->reply_reqs);
    free(m->status_in);
    free(m->status_rreqs);
    free(m->status_sreqs);
    free(m->answered);
    free(m->note_reqs);
    free(m->node_ranks);
    free(m->node_start);
    free(m->all_ranks);
    free(m->group);
    free(m->tmp);
    free(m->preq);
    free(m);
}

static void m_destroy(dpt_comm_t *c)
{
    mcomm_t *m = (mcomm_t *)c;
    int finalized = 1;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) {
        m_free(m); /* MPI is gone: nothing can touch the buffers any more */
        return;
    }
    if (m->stuck) {
        /* A collective of this handle failed and is still pending. MPI offers
         * no way to end it (MPI_Cancel and MPI_Request_free are erroneous on
         * collective requests), may write into its buffers (members of *m,
         * and the caller's) whenever this process enters MPI again, and
         * MPI_Comm_free, collective in the standard, could wait for it. So the
         * handle, its buffers and both communicators are leaked on purpose:
         * O(size) bytes once per failed communicator, in a job that is
         * expected to end (dpt_comm_mpi_abort) rather than hang in destroy. */
        return;
    }
    int in_flight = 0;
    /* Asynchronous sends not delivered yet (to a rank that stopped reading)
     * go on without us; their buffers are leaked, as MPI may read them. */
    for (size_t i = 0; i < m->nasync; i++)
        if (settle_send(&m->async_reqs[i]) == 0)
            free(m->async_bufs[i]);
    m->nasync = 0;
    if (m->reply_reqs != NULL && m->note_reqs != NULL) {
        for (int q = 0; q < m->base.size; q++) {
            in_flight |= settle_send(&m->reply_reqs[q]);
            in_flight |= settle_send(&m->note_reqs[q]);
        }
    }
    if (m->p2p != MPI_COMM_NULL)
        MPI_Comm_free(&m->p2p);
    if (m->side != MPI_COMM_NULL)
        MPI_Comm_free(&m->side);
    if (m->comm != MPI_COMM_NULL)
        MPI_Comm_free(&m->comm);
    /* A reply or notice still in flight (to a rank that stopped reading)
     * reads its buffer in *m until MPI delivers or drops it: keep *m. */
    if (!in_flight)
        m_free(m);
}

static const dpt__comm_ops_t mpi_ops = {
    .backend = DPT_COMM_MPI,
    .allreduce = m_allreduce,
    .iallreduce = m_iallreduce,
    .wait = m_wait,
    .broadcast = m_broadcast,
    .allgather = m_allgather,
    .reduce_scatter = m_reduce_scatter,
    .barrier = m_barrier,
    .algorithm = m_algorithm,
    .send = dpt__mpi_send,
    .send_async = dpt__mpi_send_async,
    .recv = dpt__mpi_recv,
    .probe = dpt__mpi_probe,
    .destroy = m_destroy,
};

/* MPI_Comm_idup of `base` into *out, waited for until `deadline`, with
 * MPI_ERRORS_RETURN set on the copy. Returns 0, or DPT_ETIMEDOUT / DPT_ECOMM
 * with a message; after a timeout MPI may still write *out (leak it). */
static int dup_comm(MPI_Comm base, MPI_Comm *out, double deadline, double timeout_s,
                    const char *which)
{
    char err[MPI_MAX_ERROR_STRING];
    MPI_Request r;
    int mrc = MPI_Comm_idup(base, out, &r);
    if (mrc == MPI_SUCCESS) {
        int w = dpt__mwait_plain(1, &r, deadline, 0);
        if (w == 1)
            return dpt_error(DPT_ETIMEDOUT,
                             "comm mpi: create: duplicating the %s communicator timed out after "
                             "%g s: a process of it has not called dpt_comm_mpi_create (or "
                             "dpt_comm_hier_group_create), or is stopped or dead",
                             which, timeout_s);
        mrc = w;
    }
    if (mrc != MPI_SUCCESS)
        *out = MPI_COMM_NULL; /* whatever MPI made of it is not ours to free */
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
    if (mrc != MPI_SUCCESS) {
        dpt__mpi_message(mrc, err, sizeof err);
        return dpt_error(DPT_ECOMM, "comm mpi: create: duplicating the %s communicator failed: %s",
                         which, err);
    }
    return 0;
}

int dpt_comm_mpi_create(dpt_comm_t **comm, const dpt_comm_mpi_options_t *opt)
{
    if (comm == NULL)
        return dpt_error(DPT_EINVAL, "comm mpi: create with a NULL output pointer");
    *comm = NULL;
    dpt_comm_mpi_options_t o;
    if (opt == NULL)
        dpt_comm_mpi_options_init(&o);
    else
        o = *opt;
    if (!(o.timeout_s > 0.0) || !isfinite(o.timeout_s))
        return dpt_error(DPT_EINVAL, "comm mpi: timeout_s %g, expected > 0 (seconds)", o.timeout_s);
    if ((int)o.algorithm < 0 || o.algorithm >= DPT_COMM_ALGORITHM_COUNT)
        return dpt_error(DPT_EINVAL, "comm mpi: unknown allreduce algorithm %d", (int)o.algorithm);
    if (o.ranks_per_node < 0)
        return dpt_error(DPT_EINVAL, "comm mpi: ranks_per_node %d, expected >= 0 (0: by host)",
                         o.ranks_per_node);
    if (!dpt_comm_mpi_initialized())
        return dpt_error(DPT_ESTATE,
                         "comm mpi: MPI is not initialized (call dpt_comm_mpi_init first)");
    MPI_Comm base = o.mpi_comm != NULL ? *(const MPI_Comm *)o.mpi_comm : MPI_COMM_WORLD;
    mcomm_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return dpt_error(DPT_ENOMEM, "comm mpi: out of memory");
    m->comm = MPI_COMM_NULL;
    m->side = MPI_COMM_NULL;
    m->p2p = MPI_COMM_NULL;
    m->cur.root = -1;
    m->cur.tag = -1;
    m->base.ops = &mpi_ops;
    m->unit = "rank";
    m->check = o.check;
    m->algorithm = o.algorithm;
    m->timeout_s = o.timeout_s;
    m->grace_s = o.timeout_s / 2 < 1.0 ? o.timeout_s / 2 : 1.0;
    double deadline = dpt_now() + o.timeout_s;
    int rc = dup_comm(base, &m->comm, deadline, o.timeout_s, "given");
    if (rc == 0)
        rc = dup_comm(m->comm, &m->side, deadline, o.timeout_s, "side channel's");
    if (rc == 0)
        rc = dup_comm(m->comm, &m->p2p, deadline, o.timeout_s, "point-to-point");
    if (rc < 0) {
        if (rc == DPT_ETIMEDOUT)
            return rc; /* MPI may still write m->comm or m->side: leak m */
        m_destroy(&m->base);
        return rc;
    }
    int mrc = MPI_Comm_rank(m->comm, &m->base.rank);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_size(m->comm, &m->base.size);
    if (mrc != MPI_SUCCESS) {
        char err[MPI_MAX_ERROR_STRING];
        dpt__mpi_message(mrc, err, sizeof err);
        m_destroy(&m->base);
        return dpt_error(DPT_ECOMM, "comm mpi: create: MPI_Comm_rank/size failed: %s", err);
    }
    size_t P = (size_t)m->base.size;
    m->fp_all = malloc(5 * sizeof *m->fp_all * P);
    m->counts = malloc(sizeof *m->counts * P);
    m->reply_buf = calloc(DPT__MPI_STATUS_WORDS * P, sizeof *m->reply_buf);
    m->reply_reqs = malloc(sizeof *m->reply_reqs * P);
    m->status_in = calloc(DPT__MPI_STATUS_WORDS * P, sizeof *m->status_in);
    m->status_rreqs = malloc(sizeof *m->status_rreqs * P);
    m->status_sreqs = malloc(sizeof *m->status_sreqs * P);
    m->answered = calloc(P, 1);
    m->note_reqs = malloc(sizeof *m->note_reqs * P);
    m->node_ranks = malloc(sizeof *m->node_ranks * P);
    m->node_start = malloc(sizeof *m->node_start * (P + 1));
    m->all_ranks = malloc(sizeof *m->all_ranks * P);
    m->group = malloc(sizeof *m->group * P);
    m->preq = malloc(sizeof *m->preq * (P + 2));
    if (m->fp_all == NULL || m->counts == NULL || m->reply_buf == NULL || m->reply_reqs == NULL ||
        m->status_in == NULL || m->status_rreqs == NULL || m->status_sreqs == NULL ||
        m->answered == NULL || m->note_reqs == NULL || m->node_ranks == NULL ||
        m->node_start == NULL || m->all_ranks == NULL || m->group == NULL || m->preq == NULL) {
        int r = m->base.rank;
        free(m->reply_reqs);
        free(m->note_reqs);
        m->reply_reqs = m->note_reqs = NULL; /* not initialized: nothing to settle */
        m_destroy(&m->base);
        return dpt_error(DPT_ENOMEM, "comm mpi: rank %d: out of memory", r);
    }
    for (size_t q = 0; q < P; q++) {
        m->reply_reqs[q] = MPI_REQUEST_NULL;
        m->status_rreqs[q] = MPI_REQUEST_NULL;
        m->status_sreqs[q] = MPI_REQUEST_NULL;
        m->note_reqs[q] = MPI_REQUEST_NULL;
        m->all_ranks[q] = (int)q;
    }
    if ((rc = dpt__mpi_layout(m, o.ranks_per_node, deadline)) < 0) {
        if (rc != DPT_ETIMEDOUT)
            m_destroy(&m->base);
        return rc; /* after a timeout MPI may still write into *m: leaked */
    }
    *comm = &m->base;
    return 0;
}

int dpt_comm_mpi_abort(int code)
{
    if (!dpt_comm_mpi_initialized())
        return dpt_error(DPT_ESTATE, "comm mpi: abort: MPI is not initialized (or finalized)");
    int mrc = MPI_Abort(MPI_COMM_WORLD, code);
    char err[MPI_MAX_ERROR_STRING];
    dpt__mpi_message(mrc, err, sizeof err);
    return dpt_error(DPT_ECOMM, "comm mpi: MPI_Abort(%d) returned: %s", code, err);
}

/* ---- for the hier backend ------------------------------------------------ */

void dpt__comm_mpi_set_unit(dpt_comm_t *c, const char *unit)
{
    ((mcomm_t *)c)->unit = unit;
}

void dpt__comm_mpi_fail(dpt_comm_t *c, int code, const char *msg)
{
    dpt__mrecord((mcomm_t *)c, code, 1, msg);
}

int dpt__comm_mpi_stuck(const dpt_comm_t *c)
{
    return ((const mcomm_t *)c)->stuck;
}

double dpt__comm_mpi_wait_limit_s(const dpt_comm_t *c)
{
    const mcomm_t *m = (const mcomm_t *)c;
    return m->timeout_s + m->grace_s + 1.0;
}

#endif /* DPT_HAVE_MPI */
