/*
 * Collectives, MPI backend: one participant per process of an MPI
 * communicator, carried by the installed MPI library (Open MPI on Debian).
 * dpt adds no transport of its own; it adds size_t counts, AVG, the debug
 * fingerprint check and status codes with messages.
 *
 * Mapping (the communicator is a private duplicate, with MPI_ERRORS_RETURN so
 * every failure comes back as a return code that is checked):
 *   allreduce       MPI_Allreduce(MPI_IN_PLACE, SUM), then / size for AVG
 *   iallreduce/wait MPI_Iallreduce ... MPI_Waitall
 *   broadcast       MPI_Bcast
 *   allgather       MPI_Allgather (MPI_IN_PLACE when send is the own block)
 *   reduce_scatter  MPI_Reduce_scatter_block when count % size == 0, else
 *                   MPI_Reduce_scatter with the dpt block sizes
 *   barrier         MPI_Barrier
 * Limits: MPI counts are int. Allreduce, iallreduce and broadcast are split
 * into calls of at most 2^30 elements. An allgather with more than INT_MAX
 * elements per rank becomes one broadcast per rank, and a reduce-scatter
 * with a block over INT_MAX one MPI_Reduce per rank (both chunked); slower,
 * but only reached beyond 8 GiB per rank.
 *
 * Debug check (options.check): before each collective the ranks allgather
 * (call, op, root, count); if any differs from rank 0's, every rank returns
 * DPT_ECOMM with the same message naming both sides, where the collectives
 * themselves would have deadlocked or mixed data.
 */
#include "comm/comm_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/status.h"
#include "dpt_config.h"

#if DPT_HAVE_MPI
#include <mpi.h>
#endif

void dpt_comm_mpi_options_init(dpt_comm_mpi_options_t *opt)
{
    if (opt == NULL)
        return;
    opt->mpi_comm = NULL;
    opt->check = 0;
}

#if !DPT_HAVE_MPI

#define NO_MPI_MSG                                                                  \
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

static int mpi_message(int mrc, char *out, int n)
{
    int len = 0;
    if (MPI_Error_string(mrc, out, &len) != MPI_SUCCESS)
        snprintf(out, (size_t)n, "MPI error %d", mrc);
    return 0;
}

int dpt_comm_mpi_init(int *argc, char ***argv, dpt_comm_mpi_thread_t required)
{
    int level;
    switch (required) {
    case DPT_COMM_MPI_FUNNELED: level = MPI_THREAD_FUNNELED; break;
    case DPT_COMM_MPI_SERIALIZED: level = MPI_THREAD_SERIALIZED; break;
    case DPT_COMM_MPI_MULTIPLE: level = MPI_THREAD_MULTIPLE; break;
    default:
        return dpt_error(DPT_EINVAL, "comm mpi: init: unknown thread level %d", (int)required);
    }
    int inited = 0, finalized = 0, provided = 0, mrc;
    char msg[MPI_MAX_ERROR_STRING];
    if ((mrc = MPI_Initialized(&inited)) != MPI_SUCCESS ||
        (mrc = MPI_Finalized(&finalized)) != MPI_SUCCESS) {
        mpi_message(mrc, msg, sizeof msg);
        return dpt_error(DPT_ECOMM, "comm mpi: init: MPI_Initialized failed: %s", msg);
    }
    if (finalized)
        return dpt_error(DPT_ESTATE, "comm mpi: init: MPI is already finalized");
    if (!inited) {
        mrc = MPI_Init_thread(argc, argv, level, &provided);
        if (mrc != MPI_SUCCESS) {
            mpi_message(mrc, msg, sizeof msg);
            return dpt_error(DPT_ECOMM, "comm mpi: MPI_Init_thread failed: %s", msg);
        }
        dpt__mpi_we_initialized = 1;
    } else if ((mrc = MPI_Query_thread(&provided)) != MPI_SUCCESS) {
        mpi_message(mrc, msg, sizeof msg);
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
        mpi_message(mrc, msg, sizeof msg);
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

typedef struct mcomm {
    struct dpt_comm base;
    MPI_Comm comm;
    int check;
    int failed;          /* status code of an earlier failure, or 0 */
    char fail_msg[400];
    uint64_t *fp_all;    /* 4 * size, for the debug check */
    int *counts;         /* size, block sizes for MPI_Reduce_scatter */
    /* the pending iallreduce */
    MPI_Request *reqs;
    int nreqs, reqs_cap;
    float *pbuf;
    size_t pcount;
    dpt_reduce_op_t pop;
} mcomm_t;

/* Records a failure: the communicator is failed from now on. */
static int mfail(mcomm_t *m, int code, const char *msg)
{
    if (m->failed == 0) {
        m->failed = code;
        snprintf(m->fail_msg, sizeof m->fail_msg, "%s", msg);
    }
    return dpt_error(code, "comm rank %d: %s", m->base.rank, msg);
}

static int mpi_fail(mcomm_t *m, int mrc, const char *what, const char *call)
{
    char err[MPI_MAX_ERROR_STRING], msg[300];
    mpi_message(mrc, err, sizeof err);
    snprintf(msg, sizeof msg, "%s: %s failed: %s", what, call, err);
    return mfail(m, DPT_ECOMM, msg);
}

/* Entry of every collective: earlier failure, then the debug check. */
static int enter(mcomm_t *m, int call, int op, int root, size_t count)
{
    const char *what = dpt__comm_call_name(call);
    if (m->failed)
        return dpt_error(m->failed, "comm rank %d: %s aborted, the communicator failed earlier: %s",
                         m->base.rank, what, m->fail_msg);
    if (!m->check)
        return 0;
    uint64_t mine[4] = {(uint64_t)call, (uint64_t)(int64_t)op, (uint64_t)(int64_t)root,
                        (uint64_t)count};
    int mrc = MPI_Allgather(mine, 4, MPI_UINT64_T, m->fp_all, 4, MPI_UINT64_T, m->comm);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(m, mrc, what, "MPI_Allgather (debug check)");
    for (int q = 1; q < m->base.size; q++) {
        const uint64_t *a = m->fp_all, *b = m->fp_all + 4 * q;
        if (memcmp(a, b, 4 * sizeof *a) != 0) {
            dpt__comm_fp_t fa = {(int)a[0], (int)(int64_t)a[1], (int)(int64_t)a[2], (size_t)a[3]};
            dpt__comm_fp_t fb = {(int)b[0], (int)(int64_t)b[1], (int)(int64_t)b[2], (size_t)b[3]};
            char da[100], db[100], msg[300];
            dpt__comm_fp_describe(&fa, da, sizeof da);
            dpt__comm_fp_describe(&fb, db, sizeof db);
            snprintf(msg, sizeof msg,
                     "mismatched collective calls: rank 0 called %s while rank %d called %s", da,
                     q, db);
            return mfail(m, DPT_ECOMM, msg);
        }
    }
    return 0;
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
    int rc = enter(m, DPT__CALL_ALLREDUCE, (int)op, -1, count);
    if (rc < 0)
        return rc;
    for (size_t off = 0; off < count; off += CHUNK) {
        size_t n = count - off < CHUNK ? count - off : CHUNK;
        int mrc = MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, m->comm);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(m, mrc, "allreduce", "MPI_Allreduce");
    }
    if (op == DPT_REDUCE_AVG && c->size > 1)
        divide(buf, count, c->size);
    return 0;
}

static int m_iallreduce(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op)
{
    mcomm_t *m = (mcomm_t *)c;
    int rc = enter(m, DPT__CALL_IALLREDUCE, (int)op, -1, count);
    if (rc < 0)
        return rc;
    size_t need = (count + CHUNK - 1) / CHUNK;
    if (need > (size_t)m->reqs_cap) {
        MPI_Request *r = realloc(m->reqs, need * sizeof *r);
        if (r == NULL)
            return mfail(m, DPT_ENOMEM, "iallreduce: out of memory for requests");
        m->reqs = r;
        m->reqs_cap = (int)need;
    }
    m->nreqs = 0;
    for (size_t off = 0; off < count; off += CHUNK) {
        size_t n = count - off < CHUNK ? count - off : CHUNK;
        int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, m->comm,
                                 &m->reqs[m->nreqs]);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(m, mrc, "iallreduce", "MPI_Iallreduce");
        m->nreqs++;
    }
    m->pbuf = buf;
    m->pcount = count;
    m->pop = op;
    return 0;
}

static int m_wait(dpt_comm_t *c)
{
    mcomm_t *m = (mcomm_t *)c;
    if (m->nreqs > 0) {
        int mrc = MPI_Waitall(m->nreqs, m->reqs, MPI_STATUSES_IGNORE);
        m->nreqs = 0;
        if (mrc != MPI_SUCCESS)
            return mpi_fail(m, mrc, "wait", "MPI_Waitall");
    }
    if (m->pop == DPT_REDUCE_AVG && c->size > 1)
        divide(m->pbuf, m->pcount, c->size);
    return 0;
}

static int bcast_chunks(mcomm_t *m, float *buf, size_t count, int root, const char *what)
{
    for (size_t off = 0; off < count; off += CHUNK) {
        size_t n = count - off < CHUNK ? count - off : CHUNK;
        int mrc = MPI_Bcast(buf + off, (int)n, MPI_FLOAT, root, m->comm);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(m, mrc, what, "MPI_Bcast");
    }
    return 0;
}

static int m_broadcast(dpt_comm_t *c, float *buf, size_t count, int root)
{
    mcomm_t *m = (mcomm_t *)c;
    int rc = enter(m, DPT__CALL_BROADCAST, -1, root, count);
    return rc < 0 ? rc : bcast_chunks(m, buf, count, root, "broadcast");
}

static int m_allgather(dpt_comm_t *c, const float *send, size_t count, float *recv)
{
    mcomm_t *m = (mcomm_t *)c;
    int rc = enter(m, DPT__CALL_ALLGATHER, -1, -1, count);
    if (rc < 0 || count == 0)
        return rc;
    float *own = recv + (size_t)c->rank * count;
    if (count <= (size_t)INT_MAX) {
        const void *sb = send == own ? MPI_IN_PLACE : (const void *)send;
        int mrc = MPI_Allgather(sb, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, m->comm);
        return mrc == MPI_SUCCESS ? 0 : mpi_fail(m, mrc, "allgather", "MPI_Allgather");
    }
    if (send != own)
        memcpy(own, send, count * sizeof(float));
    for (int q = 0; q < c->size; q++)
        if ((rc = bcast_chunks(m, recv + (size_t)q * count, count, q, "allgather")) < 0)
            return rc;
    return 0;
}

static int m_reduce_scatter(dpt_comm_t *c, const float *send, size_t count, float *recv,
                            dpt_reduce_op_t op)
{
    mcomm_t *m = (mcomm_t *)c;
    int P = c->size, mrc;
    int rc = enter(m, DPT__CALL_REDUCE_SCATTER, (int)op, -1, count);
    if (rc < 0)
        return rc;
    size_t mine = dpt_comm_block_size(count, P, c->rank);
    float dummy = 0.0f;
    float *out = recv != NULL ? recv : &dummy;
    if (count / (size_t)P + 1 <= (size_t)INT_MAX) {
        if (count % (size_t)P == 0) {
            mrc = MPI_Reduce_scatter_block(send, out, (int)(count / (size_t)P), MPI_FLOAT,
                                           MPI_SUM, m->comm);
            if (mrc != MPI_SUCCESS)
                return mpi_fail(m, mrc, "reduce_scatter", "MPI_Reduce_scatter_block");
        } else {
            for (int q = 0; q < P; q++)
                m->counts[q] = (int)dpt_comm_block_size(count, P, q);
            mrc = MPI_Reduce_scatter(send, out, m->counts, MPI_FLOAT, MPI_SUM, m->comm);
            if (mrc != MPI_SUCCESS)
                return mpi_fail(m, mrc, "reduce_scatter", "MPI_Reduce_scatter");
        }
    } else {
        for (int q = 0; q < P; q++) {
            size_t off = dpt_comm_block_offset(count, P, q), len = dpt_comm_block_size(count, P, q);
            for (size_t k = 0; k < len; k += CHUNK) {
                size_t n = len - k < CHUNK ? len - k : CHUNK;
                mrc = MPI_Reduce(send + off + k, q == c->rank ? recv + k : NULL, (int)n, MPI_FLOAT,
                                 MPI_SUM, q, m->comm);
                if (mrc != MPI_SUCCESS)
                    return mpi_fail(m, mrc, "reduce_scatter", "MPI_Reduce");
            }
        }
    }
    if (op == DPT_REDUCE_AVG && P > 1 && mine > 0)
        divide(recv, mine, P);
    return 0;
}

static int m_barrier(dpt_comm_t *c)
{
    mcomm_t *m = (mcomm_t *)c;
    int rc = enter(m, DPT__CALL_BARRIER, -1, -1, 0);
    if (rc < 0)
        return rc;
    int mrc = MPI_Barrier(m->comm);
    return mrc == MPI_SUCCESS ? 0 : mpi_fail(m, mrc, "barrier", "MPI_Barrier");
}

static void m_destroy(dpt_comm_t *c)
{
    mcomm_t *m = (mcomm_t *)c;
    int finalized = 1;
    if (m->comm != MPI_COMM_NULL && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized)
        MPI_Comm_free(&m->comm);
    free(m->fp_all);
    free(m->counts);
    free(m->reqs);
    free(m);
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
    .destroy = m_destroy,
};

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
    if (!dpt_comm_mpi_initialized())
        return dpt_error(DPT_ESTATE,
                         "comm mpi: MPI is not initialized (call dpt_comm_mpi_init first)");
    MPI_Comm base = o.mpi_comm != NULL ? *(const MPI_Comm *)o.mpi_comm : MPI_COMM_WORLD;
    mcomm_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return dpt_error(DPT_ENOMEM, "comm mpi: out of memory");
    m->comm = MPI_COMM_NULL;
    m->base.ops = &mpi_ops;
    m->check = o.check;
    char err[MPI_MAX_ERROR_STRING];
    const char *call = "MPI_Comm_dup";
    int mrc = MPI_Comm_dup(base, &m->comm);
    if (mrc == MPI_SUCCESS) {
        call = "MPI_Comm_set_errhandler";
        mrc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    }
    if (mrc == MPI_SUCCESS) {
        call = "MPI_Comm_rank";
        mrc = MPI_Comm_rank(m->comm, &m->base.rank);
    }
    if (mrc == MPI_SUCCESS) {
        call = "MPI_Comm_size";
        mrc = MPI_Comm_size(m->comm, &m->base.size);
    }
    if (mrc != MPI_SUCCESS) {
        mpi_message(mrc, err, sizeof err);
        m_destroy(&m->base);
        return dpt_error(DPT_ECOMM, "comm mpi: create: %s failed: %s", call, err);
    }
    m->fp_all = malloc(4 * sizeof *m->fp_all * (size_t)m->base.size);
    m->counts = malloc(sizeof *m->counts * (size_t)m->base.size);
    if (m->fp_all == NULL || m->counts == NULL) {
        int r = m->base.rank;
        m_destroy(&m->base);
        return dpt_error(DPT_ENOMEM, "comm mpi: rank %d: out of memory", r);
    }
    *comm = &m->base;
    return 0;
}

#endif /* DPT_HAVE_MPI */
