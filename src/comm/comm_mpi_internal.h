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

#define DPT__MPI_NOTE_LEN 480 /* longest failure message kept and sent, with its NUL */

/* The collective a handle is in (or was last in): what status replies and
 * timeout messages name. seq counts the handle's collectives from 1. */
typedef struct dpt__mop {
    uint64_t seq;
    int call;     /* dpt__comm_call_t */
    int root;     /* broadcast root, else -1 */
    size_t count; /* elements (per rank for allgather) */
} dpt__mop_t;

typedef struct dpt__mcomm {
    struct dpt_comm base;
    MPI_Comm comm;    /* the collectives: a private duplicate, MPI_ERRORS_RETURN */
    MPI_Comm side;    /* status requests, replies and failure notices (a second duplicate) */
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
    uint64_t *reply_buf;     /* 4 per rank: the status sent to that rank */
    MPI_Request *reply_reqs; /* sends of reply_buf */
    uint64_t *status_in;     /* 4 per rank: statuses received after a timeout */
    MPI_Request *status_rreqs, *status_sreqs;
    unsigned char *answered;
    char note[DPT__MPI_NOTE_LEN + 16]; /* "code message" sent to the others on failure */
    MPI_Request *note_reqs;
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

#endif /* DPT_COMM_MPI_INTERNAL_H */
