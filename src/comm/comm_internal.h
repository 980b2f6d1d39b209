/*
 * comm_internal.h — what the collective backends share (not installed).
 *
 * A dpt_comm_t starts with `struct dpt_comm`; each backend embeds it as the
 * first member of its own handle and dispatches through a const ops table.
 * comm.c validates arguments before calling the backend, so the ops may
 * assume: buffers non-NULL where count > 0, root and op in range, no request
 * outstanding (except for `wait`), and size >= 1.
 *
 * The threads machinery (dpt__tgroup, below) is shared by the threads and
 * hier backends.
 */
#ifndef DPT_COMM_INTERNAL_H
#define DPT_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dpt/comm.h"

/* The collective calls, for messages and fingerprints. */
#define DPT__COMM_CALL_LIST(X)                       \
    X(DPT__CALL_ALLREDUCE, 1, "allreduce")           \
    X(DPT__CALL_IALLREDUCE, 2, "iallreduce")         \
    X(DPT__CALL_BROADCAST, 3, "broadcast")           \
    X(DPT__CALL_ALLGATHER, 4, "allgather")           \
    X(DPT__CALL_REDUCE_SCATTER, 5, "reduce_scatter") \
    X(DPT__CALL_BARRIER, 6, "barrier")               \
    X(DPT__CALL_SEND, 7, "send")                     \
    X(DPT__CALL_RECV, 8, "recv")                     \
    X(DPT__CALL_PROBE, 9, "probe")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt__comm_call {
#define DPT__CALL_ENUM(sym, val, name) sym = (val),
    DPT__COMM_CALL_LIST(DPT__CALL_ENUM)
#undef DPT__CALL_ENUM
} dpt__comm_call_t;
/* clang-format on */

const char *dpt__comm_call_name(int call);

/* What a participant is about to do; compared across participants to detect
 * mismatched calls (threads always, MPI with the debug check). */
typedef struct dpt__comm_fp {
    int call;     /* dpt__comm_call_t */
    int op;       /* dpt_reduce_op_t, or -1 */
    int root;     /* broadcast root, or -1 */
    size_t count; /* element count (per rank for allgather) */
    int algo;     /* allreduce: the dpt_comm_algorithm_t that runs, else -1 */
} dpt__comm_fp_t;

/* Writes e.g. "recv from rank 2 with tag 7", "recv from any rank with any
 * tag" or "send of 4096 bytes to rank 0 with tag 1" into out; call is DPT__CALL_SEND,
 * _RECV or _PROBE, peer and tag may be DPT_COMM_ANY_SOURCE / _ANY_TAG. */
void dpt__p2p_describe(int call, int peer, int tag, size_t nbytes, char *out, size_t n);

/* Writes e.g. "broadcast(count=12, root=0)" into out. */
void dpt__comm_fp_describe(const dpt__comm_fp_t *fp, char *out, size_t n);
int dpt__comm_fp_equal(const dpt__comm_fp_t *a, const dpt__comm_fp_t *b);

typedef struct dpt__comm_ops {
    dpt_comm_backend_t backend;
    int (*allreduce)(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op);
    int (*iallreduce)(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op);
    int (*wait)(dpt_comm_t *c);
    int (*broadcast)(dpt_comm_t *c, float *buf, size_t count, int root);
    int (*allgather)(dpt_comm_t *c, const float *send, size_t count, float *recv);
    int (*reduce_scatter)(dpt_comm_t *c, const float *send, size_t count, float *recv,
                          dpt_reduce_op_t op);
    int (*barrier)(dpt_comm_t *c);
    /* the algorithm an allreduce of count floats runs (never AUTO) */
    dpt_comm_algorithm_t (*algorithm)(const dpt_comm_t *c, size_t count);
    int (*abort)(dpt_comm_t *c, const char *why); /* NULL: not supported */
    /* Point-to-point messages; all three NULL: not supported (the reason is
     * p2p_unsupported). Arguments are checked by comm.c: dest / source a
     * valid rank other than the own (or DPT_COMM_ANY_SOURCE), tags in range
     * (or DPT_COMM_ANY_TAG), data non-NULL where nbytes > 0, the output
     * pointers of recv and probe set to their empty values, timeout_s the
     * call's (< 0: the communicator's). */
    int (*send)(dpt_comm_t *c, int dest, int tag, const void *data, size_t nbytes);
    /* NULL: send never waits for the destination, and comm.c sends and
     * frees data. Otherwise the backend owns data (malloc'd) from the call. */
    int (*send_async)(dpt_comm_t *c, int dest, int tag, void *data, size_t nbytes);
    int (*recv)(dpt_comm_t *c, int source, int tag, double timeout_s, void **data, size_t *nbytes,
                int *source_out, int *tag_out);
    int (*probe)(dpt_comm_t *c, int source, int tag, int *flag, int *source_out, int *tag_out,
                 size_t *nbytes);
    const char *p2p_unsupported; /* why send/recv/probe are NULL */
    void (*destroy)(dpt_comm_t *c);
} dpt__comm_ops_t;

struct dpt_comm {
    const dpt__comm_ops_t *ops;
    int rank;
    int size;
    uint64_t next_id;    /* serial number given to the next iallreduce */
    uint64_t pending_id; /* the outstanding iallreduce, 0 if none */
};

/* ---- the auto table (comm_algo.c) ---------------------------------------- */

/* The level an allreduce runs at, for the table: the threads of one
 * process, the ranks of an MPI communicator, or hier's step across node
 * groups (the leaders or the ranks with one local index, where only ring
 * and tree exist). */
typedef enum dpt__auto_level {
    DPT__LEVEL_THREADS,
    DPT__LEVEL_MPI,
    DPT__LEVEL_GROUPS
} dpt__auto_level_t;

/* One row: the first row that matches a call decides. */
typedef struct dpt__auto_row {
    dpt__auto_level_t level;
    int min_p, max_p; /* participants at this level, inclusive; max_p 0: no limit */
    int layout;       /* threads: 1 more participants than CPUs, 0 not; mpi: 1 one
                       * node, 2 several; -1 any */
    size_t max_bytes; /* messages up to this many bytes; SIZE_MAX: any */
    dpt_comm_algorithm_t algorithm;
} dpt__auto_row_t;

extern const dpt__auto_row_t dpt__auto_table[];
extern const size_t dpt__auto_table_len;

/* The table's algorithm for `bytes` at `level` with p participants and
 * `layout` as in dpt__auto_row_t (never AUTO; ring when no row matches). */
dpt_comm_algorithm_t dpt__comm_auto(dpt__auto_level_t level, int p, int layout, size_t bytes);

/* ---- the mpi handle inside the hier backend (comm_mpi.c) ----------------- */

/* Names the participants in messages: "process" instead of "rank". */
void dpt__comm_mpi_set_unit(dpt_comm_t *c, const char *unit);
/* Marks the handle failed with `code` and `msg` (unless it failed already)
 * and tells the other processes, whose waits then end with that failure.
 * Leaves the thread's error message alone. */
void dpt__comm_mpi_fail(dpt_comm_t *c, int code, const char *msg);
/* 1 if a collective of the handle failed and is still pending: MPI may still
 * write into the buffers it was given, which must then never be freed. */
int dpt__comm_mpi_stuck(const dpt_comm_t *c);
/* The longest a collective of the handle can take before it returns: the
 * timeout, the grace period for status replies and a second of slack. */
double dpt__comm_mpi_wait_limit_s(const dpt_comm_t *c);

/* ---- reduction kernels (comm_threads.c) ---------------------------------- */

/* For i in [0, len): s = ((src[0][i] + src[1][i]) + ...) + src[nsrc-1][i]
 * (then s / div if div != 0), stored into dst[k][i] for every k < ndst.
 * A dst may be one of the srcs (any index), never partially overlap one.
 * Results are bitwise independent of how the range is split. */
void dpt__reduce_push(float *const *dst, int ndst, const float *const *src, int nsrc, size_t len,
                      float div);

/* ---- threads machinery (comm_threads.c) ---------------------------------- */

/* What a participant publishes for one operation (see comm_threads.c). */
typedef struct dpt__tpub {
    dpt__comm_fp_t fp;
    const float *src; /* input or private copy */
    float *dst;       /* output buffer */
} dpt__tpub_t;

typedef struct dpt__tgroup dpt__tgroup_t;

/* One participant's view: its rank and the last barrier epoch it reached. */
typedef struct dpt__tpart {
    dpt__tgroup_t *g;
    int rank;
    uint64_t epoch;
    const float **srcs; /* scratch pointer arrays, size entries each */
    float **dsts;
} dpt__tpart_t;

int dpt__tgroup_create(dpt__tgroup_t **g, int size, const dpt_comm_threads_options_t *opt);
void dpt__tgroup_destroy(dpt__tgroup_t *g);
int dpt__tgroup_size(const dpt__tgroup_t *g);
/* Ranks in messages are printed as rank + offset (hier: process * T). Set
 * before any participant joins. */
void dpt__tgroup_set_rank_offset(dpt__tgroup_t *g, int offset);
/* Claims `rank` and initializes *p (allocates its pointer arrays). */
int dpt__tpart_init(dpt__tpart_t *p, dpt__tgroup_t *g, int rank);
void dpt__tpart_deinit(dpt__tpart_t *p);

/* The entry for the next epoch, to fill before dpt__tpart_arrive(). */
dpt__tpub_t *dpt__tpart_next_pub(dpt__tpart_t *p);
/* Rank q's entry for the current epoch (valid after a successful wait, until
 * this participant's next arrive). */
const dpt__tpub_t *dpt__tpart_peer(const dpt__tpart_t *p, int q);
/* Fails at once if the group failed. */
int dpt__tpart_check(const dpt__tpart_t *p, const char *what);
/* Advances the epoch and tells the others (never blocks). */
void dpt__tpart_arrive(dpt__tpart_t *p);
/* Waits until every participant reached this participant's epoch, or fails
 * (timeout: DPT_ETIMEDOUT; group failed: its code). `what` names the
 * operation in messages. */
int dpt__tpart_wait(dpt__tpart_t *p, const char *what);
/* The same with the group's timeout extended by extra_s (>= 0): hier's
 * threads waiting for their leader's MPI step, which has its own timeout. */
int dpt__tpart_wait_ext(dpt__tpart_t *p, const char *what, double extra_s);
/* arrive + wait */
int dpt__tpart_barrier(dpt__tpart_t *p, const char *what);
/* arrive + wait_ext */
int dpt__tpart_barrier_ext(dpt__tpart_t *p, const char *what, double extra_s);
/* After the first wait of an operation: compares every participant's
 * fingerprint with this one's; a mismatch fails the group (DPT_ECOMM). */
int dpt__tpart_match(dpt__tpart_t *p);
/* The CLOCK_MONOTONIC time t (seconds, as dpt_now()) as a timespec for
 * pthread_cond_timedwait on the group's condition variables. */
struct timespec dpt__tabstime(double t);
/* Marks the group failed with `code` (first failure wins), wakes everyone
 * and returns the code with the message recorded for this thread. */
int dpt__tpart_fail(dpt__tpart_t *p, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- threads point-to-point messages (comm_threads_p2p.c) ----------------- */

/* The mailboxes of a group, one per rank (see comm_threads_p2p.c). Created
 * and destroyed with the group (destroy frees the messages never received);
 * dpt__tmail_wake wakes every receiver waiting in a mailbox, and is called
 * once the group is failed. Lock order: the group's mutex, then a
 * mailbox's. */
typedef struct dpt__tmail dpt__tmail_t;
int dpt__tmail_create(dpt__tmail_t **mail, int size);
void dpt__tmail_destroy(dpt__tmail_t *mail);
void dpt__tmail_wake(dpt__tmail_t *mail);

dpt__tmail_t *dpt__tgroup_mail(const dpt__tgroup_t *g);
/* The status code of the group's failure (acquire), 0 while it has not
 * failed. */
int dpt__tgroup_failed(dpt__tgroup_t *g);
/* The group's timeout (the options' timeout_s). */
double dpt__tgroup_timeout_s(const dpt__tgroup_t *g);

/* The participant of a threads-backend handle. */
dpt__tpart_t *dpt__tcomm_part(dpt_comm_t *c);
/* The ops of the threads backend (arguments checked by comm.c). */
int dpt__tp2p_send(dpt_comm_t *c, int dest, int tag, const void *data, size_t nbytes);
int dpt__tp2p_recv(dpt_comm_t *c, int source, int tag, double timeout_s, void **data,
                   size_t *nbytes, int *source_out, int *tag_out);
int dpt__tp2p_probe(dpt_comm_t *c, int source, int tag, int *flag, int *source_out, int *tag_out,
                    size_t *nbytes);

/* ---- threads allreduce algorithms (comm_threads_algo.c) -------------------- */

/* Ring and tree allreduce over the participants' buffers, run by every
 * participant right after the first barrier of the allreduce (each buffer
 * is its pub->dst of that barrier); `buf` is the own one. They end with a
 * barrier after which nobody touches another participant's buffer. div:
 * 0 for SUM, P for AVG. Return 0 or the failure of a barrier. */
int dpt__tring_allreduce(dpt__tpart_t *p, float *buf, size_t count, float div, const char *what);
int dpt__ttree_allreduce(dpt__tpart_t *p, float *buf, size_t count, float div, const char *what);

#endif /* DPT_COMM_INTERNAL_H */
