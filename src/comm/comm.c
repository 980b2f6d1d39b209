/*
 * Collectives: the backend-independent part.
 *
 * Every public call checks its arguments here, with messages naming the rank
 * and the operation, and then dispatches through the backend's ops table.
 * The backends therefore never see a NULL buffer with a non-zero count, an
 * out-of-range root or op, or a call made while an iallreduce is pending.
 */
#include "comm/comm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/arena.h"
#include "dpt/status.h"
#include "dpt_config.h"

/* ---- names -------------------------------------------------------------- */

const char *dpt_reduce_op_name(dpt_reduce_op_t op)
{
    switch (op) {
#define DPT__OP_NAME(sym, val, name) \
    case sym: return name;
        DPT_REDUCE_OP_LIST(DPT__OP_NAME)
#undef DPT__OP_NAME
    default: return "?";
    }
}

int dpt_reduce_op_parse(const char *name, dpt_reduce_op_t *op)
{
    if (name == NULL || op == NULL)
        return dpt_error(DPT_EINVAL, "reduce op: NULL argument");
#define DPT__OP_PARSE(sym, val, str) \
    if (strcmp(name, str) == 0) {    \
        *op = sym;                   \
        return 0;                    \
    }
    DPT_REDUCE_OP_LIST(DPT__OP_PARSE)
#undef DPT__OP_PARSE
    return dpt_error(DPT_EINVAL, "unknown reduce op '%s' (valid: sum, avg)", name);
}

const char *dpt_comm_backend_name(dpt_comm_backend_t backend)
{
    switch (backend) {
#define DPT__BE_NAME(sym, val, name) \
    case sym: return name;
        DPT_COMM_BACKEND_LIST(DPT__BE_NAME)
#undef DPT__BE_NAME
    default: return "?";
    }
}

int dpt_comm_backend_parse(const char *name, dpt_comm_backend_t *backend)
{
    if (name == NULL || backend == NULL)
        return dpt_error(DPT_EINVAL, "comm backend: NULL argument");
#define DPT__BE_PARSE(sym, val, str) \
    if (strcmp(name, str) == 0) {    \
        *backend = sym;              \
        return 0;                    \
    }
    DPT_COMM_BACKEND_LIST(DPT__BE_PARSE)
#undef DPT__BE_PARSE
    return dpt_error(DPT_EINVAL, "unknown comm backend '%s' (valid: threads, mpi, hier)", name);
}

int dpt_comm_backend_available(dpt_comm_backend_t backend)
{
    switch (backend) {
    case DPT_COMM_THREADS: return 1;
    case DPT_COMM_MPI:
    case DPT_COMM_HIER: return DPT_HAVE_MPI ? 1 : 0;
    default: return 0;
    }
}

const char *dpt_comm_algorithm_name(dpt_comm_algorithm_t algorithm)
{
    switch (algorithm) {
#define DPT__ALGO_NAME(sym, val, name) \
    case sym: return name;
        DPT_COMM_ALGORITHM_LIST(DPT__ALGO_NAME)
#undef DPT__ALGO_NAME
    default: return "?";
    }
}

int dpt_comm_algorithm_parse(const char *name, dpt_comm_algorithm_t *algorithm)
{
    if (name == NULL || algorithm == NULL)
        return dpt_error(DPT_EINVAL, "allreduce algorithm: NULL argument");
#define DPT__ALGO_PARSE(sym, val, str) \
    if (strcmp(name, str) == 0) {      \
        *algorithm = sym;              \
        return 0;                      \
    }
    DPT_COMM_ALGORITHM_LIST(DPT__ALGO_PARSE)
#undef DPT__ALGO_PARSE
    return dpt_error(DPT_EINVAL,
                     "unknown allreduce algorithm '%s' (valid: auto, native, ring, tree, hier)",
                     name);
}

const char *dpt__comm_call_name(int call)
{
    switch (call) {
#define DPT__CALL_NAME(sym, val, name) \
    case sym: return name;
        DPT__COMM_CALL_LIST(DPT__CALL_NAME)
#undef DPT__CALL_NAME
    default: return "?";
    }
}

void dpt__comm_fp_describe(const dpt__comm_fp_t *fp, char *out, size_t n)
{
    const char *name = dpt__comm_call_name(fp->call);
    switch (fp->call) {
    case DPT__CALL_ALLREDUCE:
    case DPT__CALL_IALLREDUCE:
        if (fp->algo >= 0) {
            snprintf(out, n, "%s(count=%zu, op=%s, algorithm=%s)", name, fp->count,
                     dpt_reduce_op_name((dpt_reduce_op_t)fp->op),
                     dpt_comm_algorithm_name((dpt_comm_algorithm_t)fp->algo));
            break;
        }
        /* fall through */
    case DPT__CALL_REDUCE_SCATTER:
        snprintf(out, n, "%s(count=%zu, op=%s)", name, fp->count,
                 dpt_reduce_op_name((dpt_reduce_op_t)fp->op));
        break;
    case DPT__CALL_BROADCAST:
        snprintf(out, n, "%s(count=%zu, root=%d)", name, fp->count, fp->root);
        break;
    case DPT__CALL_BARRIER: snprintf(out, n, "%s()", name); break;
    default: snprintf(out, n, "%s(count=%zu)", name, fp->count); break;
    }
}

void dpt__p2p_describe(int call, int peer, int tag, size_t nbytes, char *out, size_t n)
{
    char who[32], t[24];
    if (peer == DPT_COMM_ANY_SOURCE)
        snprintf(who, sizeof who, "any rank");
    else
        snprintf(who, sizeof who, "rank %d", peer);
    if (tag == DPT_COMM_ANY_TAG)
        snprintf(t, sizeof t, "any tag");
    else
        snprintf(t, sizeof t, "tag %d", tag);
    switch (call) {
    case DPT__CALL_SEND:
        snprintf(out, n, "send of %zu byte%s to %s with %s", nbytes, nbytes == 1 ? "" : "s", who,
                 t);
        break;
    case DPT__CALL_PROBE: snprintf(out, n, "probe for %s with %s", who, t); break;
    default: snprintf(out, n, "recv from %s with %s", who, t); break;
    }
}

int dpt__comm_fp_equal(const dpt__comm_fp_t *a, const dpt__comm_fp_t *b)
{
    return a->call == b->call && a->op == b->op && a->root == b->root && a->count == b->count &&
           a->algo == b->algo;
}

/* ---- blocks ------------------------------------------------------------- */

size_t dpt_comm_block_size(size_t count, int size, int rank)
{
    if (size <= 0 || rank < 0 || rank >= size)
        return 0;
    size_t p = (size_t)size, r = (size_t)rank;
    return count / p + (r < count % p ? 1u : 0u);
}

size_t dpt_comm_block_offset(size_t count, int size, int rank)
{
    if (size <= 0 || rank < 0 || rank > size)
        return 0;
    size_t p = (size_t)size, r = (size_t)rank, rem = count % p;
    return r * (count / p) + (r < rem ? r : rem);
}

/* ---- dispatch ------------------------------------------------------------ */

int dpt_comm_rank(const dpt_comm_t *comm)
{
    return comm ? comm->rank : -1;
}

int dpt_comm_size(const dpt_comm_t *comm)
{
    return comm ? comm->size : 0;
}

dpt_comm_backend_t dpt_comm_backend(const dpt_comm_t *comm)
{
    return comm ? comm->ops->backend : DPT_COMM_BACKEND_COUNT;
}

dpt_comm_algorithm_t dpt_comm_allreduce_algorithm(const dpt_comm_t *comm, size_t count)
{
    return comm ? comm->ops->algorithm(comm, count) : DPT_COMM_ALGORITHM_COUNT;
}

/* Checks shared by every call: handle, no pending request. */
static int check_comm(dpt_comm_t *comm, const char *what)
{
    if (comm == NULL)
        return dpt_error(DPT_EINVAL, "comm: %s on a NULL communicator", what);
    if (comm->pending_id != 0)
        return dpt_error(DPT_ESTATE,
                         "comm rank %d: %s called while iallreduce #%llu is not yet waited for",
                         comm->rank, what, (unsigned long long)comm->pending_id);
    return 0;
}

static int check_buf(const dpt_comm_t *comm, const char *what, const char *arg, const void *p,
                     size_t count)
{
    if (p == NULL && count > 0)
        return dpt_error(DPT_EINVAL, "comm rank %d: %s: %s is NULL with count %zu", comm->rank,
                         what, arg, count);
    return 0;
}

static int check_op(const dpt_comm_t *comm, const char *what, dpt_reduce_op_t op)
{
    if ((int)op < 0 || op >= DPT_REDUCE_OP_COUNT)
        return dpt_error(DPT_EINVAL, "comm rank %d: %s: unknown reduce op %d", comm->rank, what,
                         (int)op);
    return 0;
}

int dpt_comm_allreduce(dpt_comm_t *comm, float *buf, size_t count, dpt_reduce_op_t op)
{
    int rc;
    if ((rc = check_comm(comm, "allreduce")) < 0 ||
        (rc = check_buf(comm, "allreduce", "buf", buf, count)) < 0 ||
        (rc = check_op(comm, "allreduce", op)) < 0)
        return rc;
    return comm->ops->allreduce(comm, buf, count, op);
}

int dpt_comm_iallreduce(dpt_comm_t *comm, float *buf, size_t count, dpt_reduce_op_t op,
                        dpt_comm_request_t *req)
{
    int rc;
    if (req == NULL)
        return dpt_error(DPT_EINVAL, "comm: iallreduce with a NULL request");
    req->comm_ = NULL;
    req->id_ = 0;
    if ((rc = check_comm(comm, "iallreduce")) < 0 ||
        (rc = check_buf(comm, "iallreduce", "buf", buf, count)) < 0 ||
        (rc = check_op(comm, "iallreduce", op)) < 0)
        return rc;
    rc = comm->ops->iallreduce(comm, buf, count, op);
    if (rc < 0)
        return rc;
    comm->pending_id = ++comm->next_id;
    req->comm_ = comm;
    req->id_ = comm->pending_id;
    return 0;
}

int dpt_comm_wait(dpt_comm_request_t *req)
{
    if (req == NULL)
        return dpt_error(DPT_EINVAL, "comm: wait on a NULL request");
    dpt_comm_t *comm = req->comm_;
    if (comm == NULL)
        return 0;
    if (comm->pending_id != req->id_)
        return dpt_error(DPT_ESTATE, "comm rank %d: wait on request #%llu, which is not pending",
                         comm->rank, (unsigned long long)req->id_);
    comm->pending_id = 0;
    req->comm_ = NULL;
    return comm->ops->wait(comm);
}

int dpt_comm_broadcast(dpt_comm_t *comm, float *buf, size_t count, int root)
{
    int rc;
    if ((rc = check_comm(comm, "broadcast")) < 0 ||
        (rc = check_buf(comm, "broadcast", "buf", buf, count)) < 0)
        return rc;
    if (root < 0 || root >= comm->size)
        return dpt_error(DPT_EINVAL, "comm rank %d: broadcast: root %d is not in [0, %d)",
                         comm->rank, root, comm->size);
    return comm->ops->broadcast(comm, buf, count, root);
}

int dpt_comm_allgather(dpt_comm_t *comm, const float *send, size_t count, float *recv)
{
    int rc;
    if ((rc = check_comm(comm, "allgather")) < 0 ||
        (rc = check_buf(comm, "allgather", "send", send, count)) < 0 ||
        (rc = check_buf(comm, "allgather", "recv", recv, count)) < 0)
        return rc;
    if (count > 0 && count > SIZE_MAX / sizeof(float) / (size_t)comm->size)
        return dpt_error(DPT_EOVERFLOW,
                         "comm rank %d: allgather: count %zu times size %d overflows", comm->rank,
                         count, comm->size);
    return comm->ops->allgather(comm, send, count, recv);
}

_Static_assert(sizeof(uint64_t) == 2 * sizeof(float), "a 64-bit value is two floats' bits");

int dpt_comm_allgather_u64(dpt_comm_t *comm, const uint64_t *send, size_t count, uint64_t *recv)
{
    int rc;
    if ((rc = check_comm(comm, "allgather_u64")) < 0)
        return rc;
    if (count > 0 && (!send || !recv))
        return dpt_error(DPT_EINVAL, "comm rank %d: allgather_u64: NULL buffer", comm->rank);
    if (count > 0 && count > SIZE_MAX / sizeof(uint64_t) / (size_t)comm->size)
        return dpt_error(DPT_EOVERFLOW,
                         "comm rank %d: allgather_u64: count %zu times size %d overflows",
                         comm->rank, count, comm->size);
    /* Every backend's allgather moves bits (memcpy, MPI transfers of
     * MPI_FLOAT between like machines) and computes nothing, so a 64-bit
     * value travels exactly as the bits of two floats. */
    return comm->ops->allgather(comm, (const float *)(const void *)send, 2 * count,
                                (float *)(void *)recv);
}

int dpt_comm_reduce_scatter(dpt_comm_t *comm, const float *send, size_t count, float *recv,
                            dpt_reduce_op_t op)
{
    int rc;
    if ((rc = check_comm(comm, "reduce_scatter")) < 0 ||
        (rc = check_buf(comm, "reduce_scatter", "send", send, count)) < 0 ||
        (rc = check_buf(comm, "reduce_scatter", "recv", recv,
                        dpt_comm_block_size(count, comm->size, comm->rank))) < 0 ||
        (rc = check_op(comm, "reduce_scatter", op)) < 0)
        return rc;
    return comm->ops->reduce_scatter(comm, send, count, recv, op);
}

int dpt_comm_barrier(dpt_comm_t *comm)
{
    int rc;
    if ((rc = check_comm(comm, "barrier")) < 0)
        return rc;
    return comm->ops->barrier(comm);
}

int dpt_comm_abort(dpt_comm_t *comm, const char *why)
{
    if (comm == NULL || why == NULL)
        return dpt_error(DPT_EINVAL, "dpt_comm_abort: comm and why must not be NULL");
    if (comm->ops->abort == NULL)
        return dpt_error(DPT_ENOTSUP,
                         "comm %s: dpt_comm_abort is not supported (a peer learns of the failure "
                         "by its timeout, or end the job with dpt_comm_mpi_abort)",
                         dpt_comm_backend_name(comm->ops->backend));
    return comm->ops->abort(comm, why);
}

/* ---- point-to-point messages ---------------------------------------------- */

/* Checks shared by send, recv and probe: the handle, backend support, the
 * peer (a rank other than this one; any for recv and probe) and the tag. A
 * pending iallreduce does not matter: messages do not touch it. */
static int check_p2p(const dpt_comm_t *comm, int call, int peer, int tag)
{
    const char *what = dpt__comm_call_name(call);
    if (comm == NULL)
        return dpt_error(DPT_EINVAL, "comm: %s on a NULL communicator", what);
    if (comm->ops->send == NULL)
        return dpt_error(DPT_ENOTSUP,
                         "comm %s rank %d: %s: point-to-point messages are not "
                         "supported: %s",
                         dpt_comm_backend_name(comm->ops->backend), comm->rank, what,
                         comm->ops->p2p_unsupported ? comm->ops->p2p_unsupported : "");
    int any_ok = call != DPT__CALL_SEND;
    const char *role = any_ok ? "source" : "dest";
    if (!(any_ok && peer == DPT_COMM_ANY_SOURCE) && (peer < 0 || peer >= comm->size))
        return dpt_error(DPT_EINVAL, "comm rank %d: %s: %s %d is not in [0, %d)%s", comm->rank,
                         what, role, peer, comm->size, any_ok ? " nor DPT_COMM_ANY_SOURCE" : "");
    if (peer == comm->rank)
        return dpt_error(DPT_EINVAL,
                         "comm rank %d: %s: %s %d is this rank (messages to oneself are not "
                         "supported)",
                         comm->rank, what, role, peer);
    if (!(any_ok && tag == DPT_COMM_ANY_TAG) && (tag < 0 || tag > DPT_COMM_TAG_MAX))
        return dpt_error(DPT_EINVAL, "comm rank %d: %s: tag %d is not in [0, %d]%s", comm->rank,
                         what, tag, DPT_COMM_TAG_MAX, any_ok ? " nor DPT_COMM_ANY_TAG" : "");
    return 0;
}

int dpt_comm_send(dpt_comm_t *comm, int dest, int tag, const void *data, size_t nbytes)
{
    int rc;
    if ((rc = check_p2p(comm, DPT__CALL_SEND, dest, tag)) < 0 ||
        (rc = check_buf(comm, "send", "data", data, nbytes)) < 0)
        return rc;
    return comm->ops->send(comm, dest, tag, data, nbytes);
}

int dpt_comm_send_async(dpt_comm_t *comm, int dest, int tag, void *data, size_t nbytes)
{
    int rc;
    if ((rc = check_p2p(comm, DPT__CALL_SEND, dest, tag)) < 0 ||
        (rc = check_buf(comm, "send", "data", data, nbytes)) < 0) {
        free(data);
        return rc;
    }
    if (comm->ops->send_async)
        return comm->ops->send_async(comm, dest, tag, data, nbytes);
    /* A backend whose send never waits for the destination (threads). */
    rc = comm->ops->send(comm, dest, tag, data, nbytes);
    free(data);
    return rc;
}

int dpt_comm_recv(dpt_comm_t *comm, int source, int tag, double timeout_s, void **data,
                  size_t *nbytes, int *source_out, int *tag_out)
{
    if (data != NULL)
        *data = NULL;
    if (nbytes != NULL)
        *nbytes = 0;
    if (source_out != NULL)
        *source_out = -1;
    if (tag_out != NULL)
        *tag_out = -1;
    int rc = check_p2p(comm, DPT__CALL_RECV, source, tag);
    if (rc < 0)
        return rc;
    if (data == NULL || nbytes == NULL)
        return dpt_error(DPT_EINVAL, "comm rank %d: recv: data and nbytes must not be NULL",
                         comm->rank);
    if (isnan(timeout_s) || isinf(timeout_s))
        return dpt_error(DPT_EINVAL,
                         "comm rank %d: recv: timeout_s %g, expected seconds (>= 0) or < 0 for "
                         "the communicator's",
                         comm->rank, timeout_s);
    return comm->ops->recv(comm, source, tag, timeout_s, data, nbytes, source_out, tag_out);
}

int dpt_comm_probe(dpt_comm_t *comm, int source, int tag, int *flag, int *source_out, int *tag_out,
                   size_t *nbytes)
{
    if (flag != NULL)
        *flag = 0;
    if (source_out != NULL)
        *source_out = -1;
    if (tag_out != NULL)
        *tag_out = -1;
    if (nbytes != NULL)
        *nbytes = 0;
    int rc = check_p2p(comm, DPT__CALL_PROBE, source, tag);
    if (rc < 0)
        return rc;
    if (flag == NULL)
        return dpt_error(DPT_EINVAL, "comm rank %d: probe: flag must not be NULL", comm->rank);
    return comm->ops->probe(comm, source, tag, flag, source_out, tag_out, nbytes);
}

void dpt_comm_destroy(dpt_comm_t *comm)
{
    if (comm != NULL)
        comm->ops->destroy(comm);
}

/* ---- consistency check ------------------------------------------------- */

uint64_t dpt_comm_fingerprint(const float *buf, size_t count)
{
    return dpt_vec_checksum(buf, count);
}

int dpt_comm_check_equal(dpt_comm_t *comm, const float *buf, size_t count)
{
    int rc;
    if ((rc = check_comm(comm, "check_equal")) < 0 ||
        (rc = check_buf(comm, "check_equal", "buf", buf, count)) < 0)
        return rc;
    uint64_t h = dpt_comm_fingerprint(buf, count);
    uint64_t *all = malloc(sizeof(uint64_t) * ((size_t)comm->size + 1));
    if (all == NULL)
        return dpt_error(DPT_ENOMEM, "comm rank %d: check_equal: out of memory", comm->rank);
    uint64_t *mine = all + comm->size;
    *mine = h;
    int xrc = rc = dpt_comm_allgather_u64(comm, mine, 1, all);
    if (rc == 0) {
        for (int q = 1; q < comm->size; q++) {
            if (all[q] != all[0]) {
                rc = dpt_error(DPT_ECOMM,
                               "comm rank %d: check_equal: rank %d's %zu values differ from "
                               "rank 0's",
                               comm->rank, q, count);
                break;
            }
        }
    }
    /* A failed MPI exchange may stay pending, and MPI may still write into
     * `all` later (comm_mpi_wait.c): then it is leaked, not freed. */
    if (xrc == 0 || comm->ops->backend == DPT_COMM_THREADS)
        free(all);
    return rc;
}
