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

    /* buffers of pending MPI operations: members, so they outlive a stuck one */
    uint64_t fp_mine[4];
    uint64_t *fp_all;  /* 4 * size, the debug check */
    int *counts;       /* size, block sizes for MPI_Ireduce_scatter */
    float dummy;       /* receive buffer of an empty reduce-scatter block */
    MPI_Request *reqs; /* the pending iallreduce's chunks */
    int nreqs, reqs_cap;
    float *pbuf;
    size_t pcount;
    dpt_reduce_op_t pop;

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

#endif /* DPT_COMM_MPI_INTERNAL_H */
