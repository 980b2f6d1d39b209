/*
 * comm_mpi_internal.h — the MPI backend's handle, shared by comm_mpi.c (the
 * collectives, create, destroy) and comm_mpi_wait.c (waiting with a timeout,
 * the side channel, failure reports). Included only when DPT_HAVE_MPI.
 */
#ifndef DPT_COMM_MPI_INTERNAL_H
#define DPT_COMM_MPI_INTERNAL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm_internal.h"

#define DPT__MPI_NOTE_LEN 480   /* longest failure message kept and sent, with its NUL */
#define DPT__MPI_STATUS_WORDS 5 /* a status reply: seq, call, count, root, tag */

/* The collective a handle is in (or was last in), or the point-to-point
 * call it is in: what status replies and timeout messages name. seq counts
 * the handle's collectives from 1 (point-to-point calls do not count). */
typedef struct dpt__mop {
    uint64_t seq;
    int call;     /* dpt__comm_call_t */
    int root;     /* broadcast root; send: dest; recv, probe: source; else -1 */
    size_t count; /* elements (per rank for allgather); send: bytes */
    int tag;      /* send, recv, probe: the tag; else -1 */
} dpt__mop_t;

typedef struct dpt__mcomm {
    struct dpt_comm base;
    MPI_Comm comm;    /* the collectives: a private duplicate, MPI_ERRORS_RETURN */
    MPI_Comm side;    /* status requests, replies and failure notices (a second duplicate) */
    MPI_Comm p2p;     /* point-to-point messages of dpt_comm_send (a third duplicate) */
    const char *unit; /* "rank", or "process" when the hier backend owns the handle */
    double timeout_s; /* per call, from its start */
    double grace_s;   /* how long a timed-out rank waits for status replies */
    int check;        /* the debug fingerprint check */
    int failed;       /* status code of the first failure, or 0 */
    int stuck;        /* an MPI collective that failed is still pending (see destroy) */
    char fail_msg[DPT__MPI_NOTE_LEN];
    dpt__mop_t cur; /* the current (or last) collective */

    /* allreduce algorithm and the layout hier uses (comm_mpi_algo.c) */
    dpt_comm_algorithm_t algorithm; /* as given in the options */
    int nodes;                      /* node groups */
    int node;                       /* this rank's node */
    int uniform;                    /* every node has the same number of ranks */
    int *node_ranks;                /* size: the ranks sorted by (node, rank) */
    int *node_start;                /* nodes + 1: node g's ranks are node_ranks[node_start[g]
                                     * .. node_start[g + 1]) */
    int *all_ranks;                 /* size: 0, 1, ..., size - 1 */
    int *group;                     /* size: scratch list of a sub-group's ranks */

    /* buffers of pending MPI operations: members, so they outlive a stuck one */
    uint64_t fp_mine[5];
    uint64_t *fp_all;  /* 5 * size, the debug check */
    int *counts;       /* size, block sizes for MPI_Ireduce_scatter */
    float dummy;       /* receive buffer of an empty reduce-scatter block */
    MPI_Request *reqs; /* the pending iallreduce's chunks */
    int nreqs, reqs_cap;
    float *pbuf;
    size_t pcount;
    dpt_reduce_op_t pop;
    dpt_comm_algorithm_t palgo; /* the pending iallreduce's algorithm */
    float *tmp;                 /* receive buffer of ring, tree and hier, grown on use */
    size_t tmp_cap;             /* floats */
    MPI_Request *preq;          /* size + 2 point-to-point requests */

    /* side channel, all sized at create (size entries each) */
    uint64_t *reply_buf;     /* DPT__MPI_STATUS_WORDS per rank: the status sent to that rank */
    MPI_Request *reply_reqs; /* sends of reply_buf */
    uint64_t *status_in;     /* DPT__MPI_STATUS_WORDS per rank: statuses received after a
                              * timeout */
    MPI_Request *status_rreqs, *status_sreqs;
    unsigned char *answered;
    char note[DPT__MPI_NOTE_LEN + 16]; /* "code message" sent to the others on failure */
    MPI_Request *note_reqs;

    /* dpt_comm_send_async: its pending sends and their buffers (owned) */
    MPI_Request *async_reqs;
    void **async_bufs;
    size_t nasync, async_cap;
} dpt__mcomm_t;

/* Completes `nreq` requests of the current collective (started at t0, moving
 * about `bytes` per rank): polls MPI_Testall without sleeping for 50 us plus
 * 2 ns per byte, then sleeps between polls (1 us doubling to 1 ms) and
 * answers the side channel, until the requests complete or t0 + timeout_s.
 * Returns 0, or a failure already recorded on the handle: DPT_ETIMEDOUT with
 * the report of who is missing, the code of a failure another rank notified,
 * or DPT_ECOMM for an MPI error (`mpi_call` names the operation). On failure
 * the requests may stay pending forever; m->stuck is set. */
int dpt__mwait(dpt__mcomm_t *m, int nreq, MPI_Request *reqs, double t0, size_t bytes,
               const char *mpi_call);

/* One test of what a wait is for (MPI_Testall, MPI_Iprobe, ...): sets *done
 * and returns the MPI error code. */
typedef int (*dpt__mtest_fn)(void *ctx, int *done);

/* Polls test(ctx) on dpt__mwait's schedule (no-sleep phase for `bytes`,
 * then sleeping back-off while serving the side channel) until it reports
 * done or `deadline` passes. Returns 0 when done, 1 at the deadline
 * (nothing recorded: the caller decides), or a failure recorded on the
 * handle: the code another rank notified, or DPT_ECOMM for an MPI error of
 * the test (`mpi_call` names it) or of the side channel. For the
 * point-to-point calls, whose timeouts are not always failures. */
int dpt__mpoll(dpt__mcomm_t *m, dpt__mtest_fn test, void *ctx, double deadline, size_t bytes,
               const char *mpi_call);
/* dpt__mpoll of MPI_Testall over nreq requests. */
int dpt__mpoll_reqs(dpt__mcomm_t *m, int nreq, MPI_Request *reqs, double deadline, size_t bytes,
                    const char *mpi_call);
/* Serves the side channel once (status requests, failure notices) without
 * waiting. Returns 0 or, as dpt__mpoll, a failure recorded on the handle. */
int dpt__mserve(dpt__mcomm_t *m);

/* The same without a handle (create: there is no side channel yet): 0 when
 * complete, 1 at the deadline, or the MPI error code of MPI_Testall (> 0). */
int dpt__mwait_plain(int nreq, MPI_Request *reqs, double deadline, size_t bytes);

/* Records the first failure (the handle is failed from then on; later ones
 * are not recorded) and, when `notify`, tells the other ranks through the
 * side channel so that they stop waiting for this one. Does not touch the
 * thread's error message. */
void dpt__mrecord(dpt__mcomm_t *m, int code, int notify, const char *msg);
/* dpt__mrecord, then returns `code` with "comm <unit> <rank>: <msg>" as the
 * thread's error message. */
int dpt__mfail(dpt__mcomm_t *m, int code, int notify, const char *msg);
/* DPT_ECOMM for a failed MPI call, with MPI's error string. */
int dpt__mpi_fail(dpt__mcomm_t *m, int mrc, const char *call);
/* MPI's text for an error code. */
void dpt__mpi_message(int mrc, char *out, int n);
/* "allreduce #13 (4096 floats)" for the operation `op`. */
void dpt__mop_describe(const dpt__mop_t *op, const char *unit, char *out, size_t n);

/* ---- allreduce algorithms (comm_mpi_algo.c) ------------------------------ */

/* Fills the node layout (nodes, node, uniform, node_ranks, node_start; the
 * arrays allocated by the caller) from ranks_per_node, or when it is 0 by
 * exchanging processor names, waited for until `deadline`. Returns 0,
 * DPT_ETIMEDOUT, DPT_ENOMEM or DPT_ECOMM with a message. */
int dpt__mpi_layout(dpt__mcomm_t *m, int ranks_per_node, double deadline);
/* The algorithm an allreduce of `count` floats runs (never AUTO). */
dpt_comm_algorithm_t dpt__mpi_resolve(const dpt__mcomm_t *m, size_t count);
/* SUM-allreduce of buf with ring, tree or hier over point-to-point
 * messages, the timeout running from t0. Returns 0 or a failure recorded on
 * the handle. */
int dpt__mpi_allreduce_p2p(dpt__mcomm_t *m, float *buf, size_t count, dpt_comm_algorithm_t algo,
                           double t0);

/* ---- point-to-point messages (comm_mpi_p2p.c) ---------------------------- */

/* The ops of the mpi backend (arguments checked by comm.c). */
int dpt__mpi_send(dpt_comm_t *c, int dest, int tag, const void *data, size_t nbytes);
int dpt__mpi_send_async(dpt_comm_t *c, int dest, int tag, void *data, size_t nbytes);
int dpt__mpi_recv(dpt_comm_t *c, int source, int tag, double timeout_s, void **data, size_t *nbytes,
                  int *source_out, int *tag_out);
int dpt__mpi_probe(dpt_comm_t *c, int source, int tag, int *flag, int *source_out, int *tag_out,
                   size_t *nbytes);

#endif /* DPT_COMM_MPI_INTERNAL_H */
