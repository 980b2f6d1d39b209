/*
 * Point-to-point messages, MPI backend.
 *
 * The messages travel on the handle's third duplicate of the communicator
 * (m->p2p), so they never match, nor are matched by, the collectives'
 * messages (ring, tree and hier use point-to-point messages on m->comm) or
 * the side channel's; the user's tag is the MPI tag. One dpt message is one
 * MPI message:
 *
 *   send   MPI_Isend(data, nbytes) ... polled until complete, at most the
 *          communicator's timeout
 *   recv   poll MPI_Iprobe(source, tag) until a message matches or the
 *          call's timeout passes; its size (MPI_Get_elements_x); malloc;
 *          MPI_Irecv with the probed source and tag ... polled until
 *          complete, at most the communicator's timeout from the match
 *   probe  serve the side channel once; MPI_Iprobe once
 *
 * Probing before receiving makes the timeout of recv free of side effects:
 * nothing is posted until a message is there, so a recv that times out
 * leaves nothing pending and the communicator usable, and a payload that
 * cannot be allocated stays queued (DPT_ENOMEM). The MPI_Irecv then takes
 * exactly the probed message: the handle is used by one thread, and MPI
 * delivers the first message of a (source, tag) pair first.
 *
 * Sizes: up to INT_MAX bytes a message is that many MPI_BYTEs; beyond, one
 * element of a struct datatype (nbytes / 2^30 blocks of 2^30 bytes, then the
 * rest), whose type signature is still nbytes bytes, so the receiver reads
 * the size with MPI_Get_elements_x (an MPI_Count) and may receive it either
 * way.
 *
 * Waiting is the collectives' loop (dpt__mpoll: a no-sleep phase, then a
 * sleeping back-off) and answers the side channel meanwhile: a rank that
 * times out in a collective learns that this one is "in recv from rank 2
 * with tag 7", and a failure another rank notifies ends the wait at once.
 * m->cur describes the point-to-point call while it runs and is restored
 * after, so that the collectives' numbering (and a pending iallreduce's
 * description) is kept.
 *
 * What a failure leaves behind: MPI cannot withdraw a message. A send whose
 * wait fails (timeout, notified failure, MPI error) is handed to
 * MPI_Request_free, may still be delivered, and reads the caller's data
 * until then; a receive whose transfer fails the same way keeps writing into
 * its buffer, which is then leaked on purpose. Both leave the communicator
 * failed. Freeing the communicator later is safe: MPI_Comm_free lets pending
 * point-to-point operations finish.
 */
#include "dpt_config.h"

#if !DPT_HAVE_MPI
/* No MPI, no messages (ISO C wants a declaration in a file). */
typedef int dpt__comm_mpi_p2p_unused;
#else

#include "comm/comm_mpi_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/stats.h"
#include "dpt/status.h"

#define BLOCK ((size_t)1 << 30) /* bytes per block of a message past INT_MAX */
/* The largest payload: its number of blocks fits an int, its size an
 * MPI_Aint (signed). */
#define MAX_BYTES ((size_t)1 << 60)

typedef dpt__mcomm_t mcomm_t;

/* Entry of every point-to-point call: describes it in m->cur (*saved keeps
 * the collective's description) and fails if the communicator failed. */
static int enter(mcomm_t *m, int call, int peer, int tag, size_t nbytes, dpt__mop_t *saved)
{
    *saved = m->cur;
    m->cur.call = call;
    m->cur.root = peer;
    m->cur.count = nbytes;
    m->cur.tag = tag;
    if (!m->failed)
        return 0;
    char what[128];
    dpt__mop_describe(&m->cur, m->unit, what, sizeof what);
    m->cur = *saved;
    return dpt_error(m->failed, "comm %s %d: %s aborted, the communicator failed earlier: %s",
                     m->unit, m->base.rank, what, m->fail_msg);
}

/* The current call's description, for a message. */
static void describe(const mcomm_t *m, char *what, size_t n)
{
    dpt__mop_describe(&m->cur, m->unit, what, n);
}

/* Every exit after enter(): restores the collective's description. */
static int leave(mcomm_t *m, const dpt__mop_t *saved, int rc)
{
    m->cur = *saved;
    return rc;
}

/* How nbytes bytes travel as one MPI message (see the top of the file):
 * *count elements of *type, which the caller frees with MPI_Type_free when
 * *owned. Returns an MPI error code. */
static int byte_type(size_t nbytes, MPI_Datatype *type, int *count, int *owned)
{
    *owned = 0;
    if (nbytes <= (size_t)INT_MAX) {
        *type = MPI_BYTE;
        *count = (int)nbytes;
        return MPI_SUCCESS;
    }
    size_t nblocks = nbytes / BLOCK, rest = nbytes % BLOCK; /* nblocks <= 2^30 (MAX_BYTES) */
    MPI_Datatype block = MPI_DATATYPE_NULL, blocks = MPI_DATATYPE_NULL, tail = MPI_DATATYPE_NULL;
    int mrc = MPI_Type_contiguous((int)BLOCK, MPI_BYTE, &block);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Type_contiguous((int)nblocks, block, &blocks);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Type_contiguous((int)rest, MPI_BYTE, &tail);
    if (mrc == MPI_SUCCESS) {
        int lens[2] = {1, 1};
        MPI_Aint disp[2] = {0, (MPI_Aint)(nblocks * BLOCK)};
        MPI_Datatype types[2] = {blocks, tail};
        mrc = MPI_Type_create_struct(2, lens, disp, types, type);
        if (mrc == MPI_SUCCESS && (mrc = MPI_Type_commit(type)) != MPI_SUCCESS)
            MPI_Type_free(type);
    }
    /* The struct keeps what it is made of: the parts can go now. */
    if (block != MPI_DATATYPE_NULL)
        MPI_Type_free(&block);
    if (blocks != MPI_DATATYPE_NULL)
        MPI_Type_free(&blocks);
    if (tail != MPI_DATATYPE_NULL)
        MPI_Type_free(&tail);
    if (mrc == MPI_SUCCESS) {
        *count = 1;
        *owned = 1;
    }
    return mrc;
}

/* Frees the buffers of the asynchronous sends that completed. */
static int reap_async(mcomm_t *m)
{
    size_t keep = 0;
    for (size_t i = 0; i < m->nasync; i++) {
        int done = 0;
        int mrc = MPI_Test(&m->async_reqs[i], &done, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS) {
            /* Keep this send and those after it (the list stays whole). */
            size_t rest = m->nasync - i;
            memmove(m->async_reqs + keep, m->async_reqs + i, rest * sizeof *m->async_reqs);
            memmove(m->async_bufs + keep, m->async_bufs + i, rest * sizeof *m->async_bufs);
            m->nasync = keep + rest;
            return dpt__mpi_fail(m, mrc, "MPI_Test");
        }
        if (done) {
            free(m->async_bufs[i]);
            continue;
        }
        m->async_reqs[keep] = m->async_reqs[i];
        m->async_bufs[keep] = m->async_bufs[i];
        keep++;
    }
    m->nasync = keep;
    return 0;
}

int dpt__mpi_send_async(dpt_comm_t *c, int dest, int tag, void *data, size_t nbytes)
{
    mcomm_t *m = (mcomm_t *)c;
    dpt__mop_t saved;
    int rc = enter(m, DPT__CALL_SEND, dest, tag, nbytes, &saved);
    if (rc < 0) {
        free(data);
        return rc;
    }
    rc = reap_async(m);
    if (rc == 0 && nbytes > MAX_BYTES)
        rc = dpt_error(DPT_EOVERFLOW, "comm %s %d: an asynchronous send of %zu bytes: at most %zu",
                       m->unit, c->rank, nbytes, MAX_BYTES);
    if (rc == 0 && m->nasync == m->async_cap) {
        size_t cap = m->async_cap ? 2 * m->async_cap : 8;
        MPI_Request *r = realloc(m->async_reqs, cap * sizeof *r);
        if (r)
            m->async_reqs = r;
        void **b = r ? realloc(m->async_bufs, cap * sizeof *b) : NULL;
        if (b)
            m->async_bufs = b;
        if (!r || !b)
            rc = dpt_error(DPT_ENOMEM, "comm %s %d: no memory for an asynchronous send", m->unit,
                           c->rank);
        else
            m->async_cap = cap;
    }
    MPI_Datatype type;
    int count, owned, mrc = MPI_SUCCESS;
    if (rc == 0 && (mrc = byte_type(nbytes, &type, &count, &owned)) != MPI_SUCCESS)
        rc = dpt__mpi_fail(m, mrc, "MPI_Type_create_struct");
    if (rc == 0) {
        MPI_Request r;
        mrc = MPI_Isend(data, count, type, dest, tag, m->p2p, &r);
        if (owned)
            MPI_Type_free(&type);
        if (mrc != MPI_SUCCESS) {
            rc = dpt__mpi_fail(m, mrc, "MPI_Isend");
        } else {
            m->async_reqs[m->nasync] = r;
            m->async_bufs[m->nasync] = data;
            m->nasync++;
            return leave(m, &saved, 0);
        }
    }
    free(data);
    return leave(m, &saved, rc);
}

int dpt__mpi_send(dpt_comm_t *c, int dest, int tag, const void *data, size_t nbytes)
{
    mcomm_t *m = (mcomm_t *)c;
    dpt__mop_t saved;
    int rc = enter(m, DPT__CALL_SEND, dest, tag, nbytes, &saved);
    if (rc < 0)
        return rc;
    char what[128], msg[DPT__MPI_NOTE_LEN]; /* filled only to report a failure */
    if (nbytes > MAX_BYTES) {
        describe(m, what, sizeof what);
        return leave(m, &saved,
                     dpt_error(DPT_EOVERFLOW, "comm %s %d: %s: at most %zu bytes per message",
                               m->unit, c->rank, what, MAX_BYTES));
    }
    double t0 = dpt_now();
    MPI_Datatype type;
    int count, owned;
    int mrc = byte_type(nbytes, &type, &count, &owned);
    if (mrc != MPI_SUCCESS)
        return leave(m, &saved, dpt__mpi_fail(m, mrc, "MPI_Type_create_struct"));
    MPI_Request r;
    mrc = MPI_Isend(data, count, type, dest, tag, m->p2p, &r);
    if (owned)
        MPI_Type_free(&type); /* allowed while the send is pending */
    if (mrc != MPI_SUCCESS)
        return leave(m, &saved, dpt__mpi_fail(m, mrc, "MPI_Isend"));
    rc = dpt__mpoll_reqs(m, 1, &r, t0 + m->timeout_s, nbytes, "MPI_Isend");
    if (rc == 0)
        return leave(m, &saved, 0);
    MPI_Request_free(&r); /* the message may still go; it reads `data` until then */
    if (rc < 0)
        return leave(m, &saved, rc);
    describe(m, what, sizeof what);
    snprintf(msg, sizeof msg,
             "%s timed out after %g s: %s %d did not receive it (stopped, dead, or not receiving "
             "from this %s); the communicator is now failed, and MPI may still deliver the "
             "message and read its data",
             what, m->timeout_s, m->unit, dest, m->unit);
    return leave(m, &saved, dpt__mfail(m, DPT_ETIMEDOUT, 1, msg));
}

typedef struct probe_ctx {
    MPI_Comm comm;
    int source, tag; /* MPI's: MPI_ANY_SOURCE, MPI_ANY_TAG */
    MPI_Status st;
} probe_ctx_t;

static int test_probe(void *ctx, int *done)
{
    probe_ctx_t *p = ctx;
    return MPI_Iprobe(p->source, p->tag, p->comm, done, &p->st);
}

static void probe_init(probe_ctx_t *p, const mcomm_t *m, int source, int tag)
{
    p->comm = m->p2p;
    p->source = source == DPT_COMM_ANY_SOURCE ? MPI_ANY_SOURCE : source;
    p->tag = tag == DPT_COMM_ANY_TAG ? MPI_ANY_TAG : tag;
}

/* The size of the probed message, in *nbytes. Returns an MPI error code. */
static int probed_size(MPI_Status *st, size_t *nbytes)
{
    MPI_Count n = 0;
    int mrc = MPI_Get_elements_x(st, MPI_BYTE, &n);
    if (mrc == MPI_SUCCESS && (n < 0 || n == MPI_UNDEFINED))
        mrc = MPI_ERR_COUNT;
    *nbytes = mrc == MPI_SUCCESS ? (size_t)n : 0;
    return mrc;
}

int dpt__mpi_recv(dpt_comm_t *c, int source, int tag, double timeout_s, void **data, size_t *nbytes,
                  int *source_out, int *tag_out)
{
    mcomm_t *m = (mcomm_t *)c;
    dpt__mop_t saved;
    int rc = enter(m, DPT__CALL_RECV, source, tag, 0, &saved);
    if (rc < 0)
        return rc;
    char what[128], msg[DPT__MPI_NOTE_LEN]; /* filled only to report a failure */
    if (timeout_s < 0.0)
        timeout_s = m->timeout_s;
    double t0 = dpt_now();
    probe_ctx_t p;
    probe_init(&p, m, source, tag);
    rc = dpt__mpoll(m, test_probe, &p, t0 + timeout_s, 0, "MPI_Iprobe");
    if (rc < 0)
        return leave(m, &saved, rc);
    if (rc == 1) {
        describe(m, what, sizeof what);
        return leave(m, &saved,
                     dpt_error(DPT_ETIMEDOUT,
                               "comm %s %d: %s timed out after %.3g s: no such message arrived "
                               "(the communicator stays usable)",
                               m->unit, c->rank, what, dpt_now() - t0));
    }
    size_t n;
    int mrc = probed_size(&p.st, &n);
    if (mrc != MPI_SUCCESS)
        return leave(m, &saved, dpt__mpi_fail(m, mrc, "MPI_Get_elements_x"));
    int from = p.st.MPI_SOURCE, got_tag = p.st.MPI_TAG;
    void *buf = n > 0 ? malloc(n) : NULL;
    if (n > 0 && buf == NULL) {
        describe(m, what, sizeof what);
        return leave(m, &saved,
                     dpt_error(DPT_ENOMEM,
                               "comm %s %d: %s: out of memory for the %zu bytes from %s %d (tag "
                               "%d); the message is still queued",
                               m->unit, c->rank, what, n, m->unit, from, got_tag));
    }
    MPI_Datatype type;
    int count, owned;
    if ((mrc = byte_type(n, &type, &count, &owned)) != MPI_SUCCESS) {
        free(buf);
        return leave(m, &saved, dpt__mpi_fail(m, mrc, "MPI_Type_create_struct"));
    }
    MPI_Request r;
    mrc = MPI_Irecv(buf, count, type, from, got_tag, m->p2p, &r);
    if (owned)
        MPI_Type_free(&type);
    if (mrc != MPI_SUCCESS) {
        free(buf);
        return leave(m, &saved, dpt__mpi_fail(m, mrc, "MPI_Irecv"));
    }
    rc = dpt__mpoll_reqs(m, 1, &r, dpt_now() + m->timeout_s, n, "MPI_Irecv");
    if (rc == 0) {
        *data = buf;
        *nbytes = n;
        if (source_out != NULL)
            *source_out = from;
        if (tag_out != NULL)
            *tag_out = got_tag;
        return leave(m, &saved, 0);
    }
    /* The receive may still write into buf: both are left to MPI. */
    MPI_Request_free(&r);
    if (rc < 0)
        return leave(m, &saved, rc);
    describe(m, what, sizeof what);
    snprintf(msg, sizeof msg,
             "%s: the transfer of %zu bytes from %s %d (tag %d) did not complete within %g s "
             "(the sender stopped or died while sending); the communicator is now failed",
             what, n, m->unit, from, got_tag, m->timeout_s);
    return leave(m, &saved, dpt__mfail(m, DPT_ETIMEDOUT, 1, msg));
}

int dpt__mpi_probe(dpt_comm_t *c, int source, int tag, int *flag, int *source_out, int *tag_out,
                   size_t *nbytes)
{
    mcomm_t *m = (mcomm_t *)c;
    dpt__mop_t saved;
    int rc = enter(m, DPT__CALL_PROBE, source, tag, 0, &saved);
    if (rc < 0 || (rc = dpt__mserve(m)) < 0)
        return leave(m, &saved, rc);
    probe_ctx_t p;
    probe_init(&p, m, source, tag);
    int found = 0;
    int mrc = test_probe(&p, &found);
    size_t n = 0;
    if (mrc == MPI_SUCCESS && found)
        mrc = probed_size(&p.st, &n);
    if (mrc != MPI_SUCCESS)
        return leave(m, &saved, dpt__mpi_fail(m, mrc, "MPI_Iprobe"));
    if (found) {
        *flag = 1;
        if (source_out != NULL)
            *source_out = p.st.MPI_SOURCE;
        if (tag_out != NULL)
            *tag_out = p.st.MPI_TAG;
        if (nbytes != NULL)
            *nbytes = n;
    }
    return leave(m, &saved, 0);
}

#endif /* DPT_HAVE_MPI */
