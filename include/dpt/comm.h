/*
 * dpt/comm.h — collective communication: one interface, three backends.
 *
 * Every engine exchanges gradients and weights through a dpt_comm_t and never
 * knows which backend carries it. A communicator has `size` participants
 * numbered 0..size-1; each participant holds its own handle and calls every
 * collective with its own buffers, in the same order as all the others (as in
 * MPI). All buffers are float32 arrays; counts are element counts (size_t).
 *
 *   backend   participants                         created with
 *   threads   P threads of one process             dpt_comm_threads_group_create + _join
 *   mpi       the processes of an MPI communicator dpt_comm_mpi_create
 *   hier      T threads in each of R processes     dpt_comm_hier_group_create + _join
 *
 * Operations (x_r is participant r's input, P = size, "in place" means the
 * result overwrites the input):
 *   allreduce       buf_r <- x_0 + x_1 + ... + x_{P-1}     (SUM, in place)
 *                   buf_r <- (x_0 + ... + x_{P-1}) / P     (AVG, in place)
 *   iallreduce/wait the same, started by one call and finished by another
 *   broadcast       buf_r <- buf_root
 *   allgather       recv_r[q*count .. (q+1)*count) <- send_q   for every q
 *   reduce_scatter  recv_r <- block r of (send_0 + ... + send_{P-1}) (or / P)
 *   barrier         returns once every participant has entered it
 * and, between two participants, point-to-point messages of bytes (send,
 * recv, probe; see "point-to-point messages" below).
 * Blocks: a vector of `count` elements is split into P contiguous blocks; the
 * first count % P blocks have count / P + 1 elements, the others count / P
 * (dpt_comm_block_offset / dpt_comm_block_size compute them).
 *
 * Allreduce algorithms (dpt_comm_algorithm_t, chosen with the `algorithm`
 * field of the backend's options; the other collectives have one
 * algorithm each):
 *   native  the backend's own: threads, one shared-memory pass (every
 *           participant reduces its block of all P buffers); MPI, the MPI
 *           library's MPI_Iallreduce
 *   ring    reduce-scatter then allgather around a ring: 2 (P - 1) steps,
 *           each moving count / P floats per participant
 *   tree    recursive doubling: log2 P steps exchanging the whole buffer
 *           with a partner (ranks past the largest power of two fold into
 *           a partner first); for small buffers
 *   hier    participants that share memory reduce first (MPI: the ranks of
 *           a node), then one allreduce across the groups, then the result
 *           is spread inside the group; on the threads backend every
 *           participant shares memory, so it is native
 *   auto    per call, from a built-in table of crossover points by backend,
 *           P, layout and message size (dpt_comm_allreduce_algorithm tells
 *           which); the default
 *
 * Determinism: the sums are formed in a fixed order, so for a given backend,
 * algorithm and layout (size, threads per process, ranks per node) the same
 * inputs give bitwise the same outputs on every participant and in every
 * run. Orders (x_r = rank r's input):
 *   threads native, and the naive oracle   ((x_0 + x_1) + x_2) + ...
 *   ring, element in block b               ((x_b + x_{b+1}) + ...) + x_{b-1}
 *                                          (ranks mod P)
 *   tree, P = 4                            (x_0 + x_1) + (x_2 + x_3)
 *   tree, P = 3                            (x_0 + x_2) + x_1
 *   MPI native                             the order of the MPI library's
 *       non-blocking collectives (fixed for a given size and count; with
 *       Open MPI it can differ from that of its blocking MPI_Allreduce for
 *       3 or more ranks)
 * The algorithms differ from each other only in rounding: with
 * integer-valued data (exact sums) they all give the oracle's bits, and
 * with any data a result is within 2 (P - 1) 2^-24 sum_r |x_r| of the
 * oracle's. hier (backend) adds the threads of a process in thread order
 * and then the processes with the MPI algorithm. AVG divides the sum by P
 * (a true division, not a multiplication by 1/P).
 *
 * Errors: every function returns 0 or a negative DPT_E... code and leaves a
 * message naming the rank and the operation in dpt_last_error(). Argument
 * errors (NULL buffer with count > 0, bad root, unknown op) are DPT_EINVAL
 * and are detected before any communication, so they leave the communicator
 * usable only if every participant made the same mistake; any other failure
 * (timeout, mismatched calls, MPI error) leaves the communicator failed:
 * later calls on any participant return an error instead of hanging.
 *
 * Timeouts: every collective of every backend has one (the timeout_s of the
 * backend's options, default 300 s, measured from the start of the call, or
 * of dpt_comm_wait). A participant still waiting when it passes fails with
 * DPT_ETIMEDOUT and a message naming the collective and the ranks missing;
 * waiting never spins a core for long (threads: a short spin, then a
 * condition variable; MPI: the non-blocking MPI call polled with a sleeping
 * back-off after a short no-sleep phase). MPI cannot tell who is missing, so
 * a timed-out MPI rank asks the others over a side channel and reports,
 * e.g.
 *   comm rank 0: allreduce #13 (4096 floats) timed out after 5 s; not
 *   arrived: rank 1 (did not respond), rank 2 (in barrier #12); ...
 * ("did not respond": stopped, dead, or busy outside dpt's collectives on
 * this communicator; #13 counts the communicator's collectives from 1). It
 * then tells the other ranks, so one waiting in a collective of the same
 * communicator stops at once with the same code and message ("... aborted:
 * rank 0 failed: ..."); a rank reaching the collective later fails the same
 * way, or by its own timeout. hier: a thread that does not arrive is named
 * by its process's threads (threads timeout), and that failure reaches the
 * other processes the same way.
 *
 * Buffers are borrowed for the duration of a call (for iallreduce, until
 * dpt_comm_wait returns); they must not be read or written by the caller
 * meanwhile, and, if a call fails, they must stay valid until every
 * participant has returned from that call (within the timeout). MPI and
 * hier: MPI cannot cancel a collective, so after a failed call (timeout,
 * a peer's failure, MPI error) MPI may still read and write its buffers
 * whenever this process calls MPI again (MPI_Finalize included): keep them
 * allocated, or end the job with dpt_comm_mpi_abort() (what the command
 * does). Different participants' buffers must not overlap (the threads
 * backend reads and writes them directly).
 */
#ifndef DPT_COMM_H
#define DPT_COMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reduction operations and backends --------------------------------- */

/* X-macro: symbol, value, name. */
#define DPT_REDUCE_OP_LIST(X)   \
    X(DPT_REDUCE_SUM, 0, "sum") \
    X(DPT_REDUCE_AVG, 1, "avg")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_reduce_op {
#define DPT__REDUCE_OP_ENUM(sym, val, name) sym = (val),
    DPT_REDUCE_OP_LIST(DPT__REDUCE_OP_ENUM)
#undef DPT__REDUCE_OP_ENUM
    DPT_REDUCE_OP_COUNT
} dpt_reduce_op_t;
/* clang-format on */

#define DPT_COMM_BACKEND_LIST(X)      \
    X(DPT_COMM_THREADS, 0, "threads") \
    X(DPT_COMM_MPI, 1, "mpi")         \
    X(DPT_COMM_HIER, 2, "hier")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_comm_backend {
#define DPT__COMM_BACKEND_ENUM(sym, val, name) sym = (val),
    DPT_COMM_BACKEND_LIST(DPT__COMM_BACKEND_ENUM)
#undef DPT__COMM_BACKEND_ENUM
    DPT_COMM_BACKEND_COUNT
} dpt_comm_backend_t;
/* clang-format on */

/* Allreduce algorithms (see the top of this file). */
#define DPT_COMM_ALGORITHM_LIST(X)       \
    X(DPT_ALLREDUCE_AUTO, 0, "auto")     \
    X(DPT_ALLREDUCE_NATIVE, 1, "native") \
    X(DPT_ALLREDUCE_RING, 2, "ring")     \
    X(DPT_ALLREDUCE_TREE, 3, "tree")     \
    X(DPT_ALLREDUCE_HIER, 4, "hier")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_comm_algorithm {
#define DPT__COMM_ALGORITHM_ENUM(sym, val, name) sym = (val),
    DPT_COMM_ALGORITHM_LIST(DPT__COMM_ALGORITHM_ENUM)
#undef DPT__COMM_ALGORITHM_ENUM
    DPT_COMM_ALGORITHM_COUNT
} dpt_comm_algorithm_t;
/* clang-format on */

/* "sum", "avg"; "?" for an unknown value. */
const char *dpt_reduce_op_name(dpt_reduce_op_t op);
/* Parses "sum"/"avg" into *op. Returns 0 or DPT_EINVAL (message lists the
 * valid names). */
int dpt_reduce_op_parse(const char *name, dpt_reduce_op_t *op);
/* "threads", "mpi", "hier"; "?" for an unknown value. */
const char *dpt_comm_backend_name(dpt_comm_backend_t backend);
/* Parses a backend name into *backend. Returns 0 or DPT_EINVAL. */
int dpt_comm_backend_parse(const char *name, dpt_comm_backend_t *backend);
/* 1 if this build has the backend (mpi and hier need MPI), else 0. */
int dpt_comm_backend_available(dpt_comm_backend_t backend);
/* "auto", "native", "ring", "tree", "hier"; "?" for an unknown value. */
const char *dpt_comm_algorithm_name(dpt_comm_algorithm_t algorithm);
/* Parses an algorithm name into *algorithm. Returns 0 or DPT_EINVAL (the
 * message lists the valid names). */
int dpt_comm_algorithm_parse(const char *name, dpt_comm_algorithm_t *algorithm);

/* ---- blocks ------------------------------------------------------------- */

/* Number of elements of block `rank` when `count` elements are split over
 * `size` participants: count / size, plus one for the first count % size
 * blocks. 0 if size <= 0 or rank is out of range. */
size_t dpt_comm_block_size(size_t count, int size, int rank);
/* Offset of block `rank` (sum of the sizes of blocks 0..rank-1); for
 * rank == size it is `count`. 0 if size <= 0 or rank is out of range. */
size_t dpt_comm_block_offset(size_t count, int size, int rank);

/* ---- communicators ------------------------------------------------------ */

/* A participant's handle. Opaque; created by a backend constructor below and
 * released with dpt_comm_destroy(). A handle is used by one thread at a time
 * (the participant's); different participants' handles are used
 * concurrently. */
typedef struct dpt_comm dpt_comm_t;

/* This participant's rank in [0, size). */
int dpt_comm_rank(const dpt_comm_t *comm);
/* Number of participants. */
int dpt_comm_size(const dpt_comm_t *comm);
/* Which backend carries this communicator. */
dpt_comm_backend_t dpt_comm_backend(const dpt_comm_t *comm);
/* The algorithm an allreduce of `count` floats runs on this communicator:
 * the one chosen in its options, or for auto the built-in table's choice
 * (never DPT_ALLREDUCE_AUTO); hier on the threads backend is reported as
 * native, which is what runs. The hier backend reports
 * DPT_ALLREDUCE_HIER: its threads always reduce first, and its step across
 * processes runs the algorithm of its mpi options (which the processes'
 * communicator would report). DPT_COMM_ALGORITHM_COUNT for a NULL comm. */
dpt_comm_algorithm_t dpt_comm_allreduce_algorithm(const dpt_comm_t *comm, size_t count);

/* Sum (or average) `count` floats over all participants, in place: on return
 * every participant's `buf` holds the same result, bitwise. buf may be NULL
 * only if count is 0. Returns 0; DPT_EINVAL (NULL buffer, unknown op);
 * DPT_ESTATE (an iallreduce on this handle is not yet waited for);
 * DPT_ETIMEDOUT (a participant did not arrive within the timeout, here or,
 * for MPI and hier, on another rank that told this one; the message lists
 * the missing ranks); DPT_ECOMM (mismatched calls, MPI failure); or the code
 * of the earlier failure when the communicator failed earlier. */
int dpt_comm_allreduce(dpt_comm_t *comm, float *buf, size_t count, dpt_reduce_op_t op);

/* A started non-blocking allreduce. Caller's storage; the fields are
 * private. */
typedef struct dpt_comm_request {
    dpt_comm_t *comm_; /* the communicator, NULL when not active */
    uint64_t id_;      /* serial number of the operation on comm_ */
} dpt_comm_request_t;

/* Starts an allreduce of `buf` and returns at once: the result is in `buf`
 * when dpt_comm_wait(req) returns 0. Meanwhile the caller may compute but
 * must not touch `buf` nor call another collective on this handle (one
 * outstanding request per handle; DPT_ESTATE otherwise). Threads backend:
 * the start publishes the buffer and arrives, the wait does the reduction, so
 * the time other participants take to arrive overlaps with the caller's
 * work. MPI: MPI_Iallreduce. hier: the start arrives inside the process as
 * for threads; the rest, MPI included, runs in the wait.
 * Returns the same codes as dpt_comm_allreduce; on failure *req is left
 * inactive and there is nothing to wait for. */
int dpt_comm_iallreduce(dpt_comm_t *comm, float *buf, size_t count, dpt_reduce_op_t op,
                        dpt_comm_request_t *req);

/* Finishes the request started by dpt_comm_iallreduce and makes it inactive.
 * Waiting for an inactive request returns 0 at once. Returns the codes of
 * dpt_comm_allreduce. */
int dpt_comm_wait(dpt_comm_request_t *req);

/* Copies `count` floats from the root's `buf` into every other
 * participant's `buf`. Returns 0, DPT_EINVAL (NULL buffer, root outside
 * [0, size)), or the failures of dpt_comm_allreduce. */
int dpt_comm_broadcast(dpt_comm_t *comm, float *buf, size_t count, int root);

/* Gathers `count` floats from every participant into every participant's
 * `recv` (count * size floats, in rank order). `send` may be exactly
 * recv + rank * count (in place); other overlaps are not allowed. */
int dpt_comm_allgather(dpt_comm_t *comm, const float *send, size_t count, float *recv);

/* The same for `count` 64-bit integers a participant (hashes, counters):
 * recv holds count * size of them, in rank order, bit for bit. `send` must
 * not overlap `recv`. Errors as dpt_comm_allgather's. */
int dpt_comm_allgather_u64(dpt_comm_t *comm, const uint64_t *send, size_t count, uint64_t *recv);

/* Reduces the `count` floats of every participant's `send` and leaves block
 * `rank` of the result (dpt_comm_block_size(count, size, rank) floats,
 * possibly 0) in `recv`. `recv` must not overlap `send`; it may be NULL when
 * its block is empty. */
int dpt_comm_reduce_scatter(dpt_comm_t *comm, const float *send, size_t count, float *recv,
                            dpt_reduce_op_t op);

/* Returns once every participant has called it. */
int dpt_comm_barrier(dpt_comm_t *comm);

/* Declares this participant failed (`why`: what went wrong, copied) so
 * that the others stop waiting for it: on the threads backend, and among
 * the threads of this process on hier, every participant waiting in a
 * collective, or entering one later, fails at once with DPT_ECOMM and a
 * message that ends with "rank R: why". Not a collective; call it from
 * the failed participant only, instead of its next collective. The
 * communicator stays failed: destroy it. MPI: DPT_ENOTSUP (other
 * processes learn of a failure by their timeout or by
 * dpt_comm_mpi_abort). Returns DPT_ECOMM (the communicator is now failed),
 * DPT_EINVAL for a NULL comm or why. */
int dpt_comm_abort(dpt_comm_t *comm, const char *why);

/* ---- point-to-point messages --------------------------------------------- */

/* Byte payloads from one participant to another, for pipelines whose ranks
 * do different work: samplers sending batches to a learner and the learner
 * sending weights back (the caller serializes its columns into the bytes).
 * Not collective: only the sender and the receiver take part.
 *
 *   dpt_comm_send   hands `nbytes` bytes with a tag to rank `dest`
 *   dpt_comm_recv   takes the first message matching (source, tag), waiting
 *                   up to a timeout; the payload comes back malloc'd
 *   dpt_comm_probe  tells whether such a message is there, without waiting
 *
 * Matching and order: a message matches a receive (or probe) whose source
 * is its sender or DPT_COMM_ANY_SOURCE and whose tag is its tag or
 * DPT_COMM_ANY_TAG. Two messages from one sender that both match a receive
 * are received in the order they were sent (so messages with one source and
 * one tag arrive in send order); between senders nothing is promised. Tags
 * are in [0, DPT_COMM_TAG_MAX]; sending to oneself is not supported.
 *
 * Backends:
 *   threads  send copies the payload into the destination's mailbox (a FIFO
 *            list under a mutex) and returns at once; it never waits for
 *            the receiver. There is no flow control: messages not yet
 *            received stay in memory (the group frees them at destroy), so a
 *            sender that outruns its receiver must be held back by the
 *            application (e.g. the receiver's replies as credits).
 *   mpi      the messages travel on a private duplicate of the communicator,
 *            apart from the collectives' own messages. send is MPI_Isend
 *            (a payload past INT_MAX bytes as one message of a derived
 *            datatype), waited for like a collective: it returns once MPI is
 *            done with `data`, which is at once for a small message and, for
 *            one past MPI's eager limit (with Open MPI 4 KiB in shared
 *            memory, 64 KiB over TCP), once the destination receives it. So,
 *            as with MPI_Send, a large send waits for the matching recv:
 *            a rank must not wait in a large send to a rank that is itself
 *            waiting in a large send to it.
 *   hier     DPT_ENOTSUP: only thread 0 of each process calls MPI, so a
 *            thread could not reach a thread of another process (use an mpi
 *            communicator of the processes, or a threads communicator inside
 *            one).
 *
 * Timeouts: recv waits at most its timeout_s (DPT_COMM_TIMEOUT_DEFAULT or
 * any negative value: the communicator's, the timeout_s of the backend's
 * options; 0: do not wait). Timing out is an ordinary outcome, not a
 * failure: DPT_ETIMEDOUT with a message naming the source and the tag,
 * nothing is consumed and the communicator stays usable. mpi: once a
 * message is matched, its transfer may take the communicator's timeout
 * more; a send waits at most the communicator's timeout. A send or transfer
 * that times out leaves the communicator failed and tells the other ranks.
 * MPI cannot withdraw a message: after a send failed once started (timeout,
 * another rank's failure, MPI error) MPI may still deliver it and read
 * `data` until then, so `data` must stay valid, as the buffers of a failed
 * collective.
 *
 * Failures: once the communicator is failed (a collective timed out or
 * mismatched; dpt_comm_abort, threads; a failure another rank notified,
 * mpi), every send, recv and probe, a recv already waiting included, fails
 * at once with the failure's code and message. These calls may be made
 * while an iallreduce of the handle is pending. Argument errors are
 * DPT_EINVAL and leave the communicator as it was. */

/* recv and probe: a message from any rank; recv and probe with any tag. */
#define DPT_COMM_ANY_SOURCE (-1)
#define DPT_COMM_ANY_TAG (-1)
/* The largest tag (the smallest upper bound MPI guarantees). */
#define DPT_COMM_TAG_MAX 32767
/* recv's timeout_s: the communicator's timeout. */
#define DPT_COMM_TIMEOUT_DEFAULT (-1.0)

/* Sends `nbytes` bytes at `data` (borrowed for the call; may be NULL when
 * nbytes is 0) to rank `dest` with tag `tag`. Returns when the payload is
 * handed off (see the backends above): the caller may then reuse `data`.
 * Returns 0; DPT_EINVAL (NULL comm, dest out of [0, size) or this rank, tag
 * out of [0, DPT_COMM_TAG_MAX], NULL data with nbytes > 0); DPT_ENOMEM
 * (threads: no memory for the copy); DPT_EOVERFLOW (mpi: more than 2^60
 * bytes); DPT_ENOTSUP (hier); DPT_ETIMEDOUT (mpi: the destination did not
 * take the message within the communicator's timeout; the communicator is
 * now failed); DPT_ECOMM (MPI failure); or the code of the earlier failure
 * when the communicator failed. */
int dpt_comm_send(dpt_comm_t *comm, int dest, int tag, const void *data, size_t nbytes);

/* Sends like dpt_comm_send, but without waiting for the destination to
 * take the message: `data` (nbytes bytes from malloc; NULL when nbytes is
 * 0) becomes the communicator's, which frees it once the message is
 * delivered (threads: at once, after the copy into the mailbox; MPI: at the
 * next dpt_comm_send_async or destroy after delivery). Such a
 * message has no timeout: one that a destination never receives (a stopped
 * process) holds its buffer until the communicator is destroyed, which then
 * lets it go without freeing the buffer (MPI may still read it). For a
 * server that must not wait on a slow or stopped client. Errors as
 * dpt_comm_send's (arguments, a failed communicator, MPI); data is freed on
 * error too. */
int dpt_comm_send_async(dpt_comm_t *comm, int dest, int tag, void *data, size_t nbytes);

/* Receives the first message from `source` (a rank other than this one, or
 * DPT_COMM_ANY_SOURCE) with tag `tag` (or DPT_COMM_ANY_TAG), waiting at most
 * `timeout_s` seconds (see "Timeouts" above; must not be NaN or infinite).
 * On success *data is the payload, malloc'd and owned by the caller (release
 * it with free()), NULL when the message is empty; *nbytes its size;
 * *source_out and *tag_out (each may be NULL) the sender and the tag. On
 * failure *data is NULL, *nbytes 0 and *source_out, *tag_out -1. Returns 0;
 * DPT_EINVAL (NULL comm, data or nbytes; source or tag out of range; bad
 * timeout_s); DPT_ETIMEDOUT (no matching message within the timeout: the
 * communicator stays usable; or, mpi, a matched transfer that did not
 * complete: the communicator is failed); DPT_ENOMEM (no memory for the
 * payload: the message stays queued); DPT_ENOTSUP (hier); DPT_ECOMM (MPI
 * failure); or the failed communicator's code. */
int dpt_comm_recv(dpt_comm_t *comm, int source, int tag, double timeout_s, void **data,
                  size_t *nbytes, int *source_out, int *tag_out);

/* Tells, without waiting, whether a message matching (source, tag) (as for
 * dpt_comm_recv) can be received: *flag = 1 and, for the first such message,
 * its sender, tag and size in *source_out, *tag_out and *nbytes (each may be
 * NULL), or *flag = 0 and -1, -1, 0. A dpt_comm_recv with the returned source
 * and tag then receives that message. mpi: also answers the other ranks'
 * status requests and reads their failure notices, so a rank that only
 * polls notices failures. Returns 0, DPT_EINVAL (NULL comm or flag, source
 * or tag out of range), DPT_ENOTSUP (hier), DPT_ECOMM (MPI failure) or the
 * failed communicator's code. */
int dpt_comm_probe(dpt_comm_t *comm, int source, int tag, int *flag, int *source_out, int *tag_out,
                   size_t *nbytes);

/* A 64-bit fingerprint (FNV-1a over the bit patterns) of `count` floats;
 * equal buffers give equal fingerprints, -0.0 and 0.0 differ. */
uint64_t dpt_comm_fingerprint(const float *buf, size_t count);

/* Collective consistency check (the "replicated" mode's divergence check):
 * compares the fingerprints of every participant's `buf`. Returns 0 when all
 * are bitwise equal, DPT_ECOMM naming the first rank whose data differs from
 * rank 0's otherwise, or a communication failure. */
int dpt_comm_check_equal(dpt_comm_t *comm, const float *buf, size_t count);

/* Releases a handle (NULL is a no-op). For threads and hier, destroy every
 * handle before destroying its group; a handle must not be in a call. */
void dpt_comm_destroy(dpt_comm_t *comm);

/* ---- threads backend ---------------------------------------------------- */

/* Shared state of P participant threads in one process. */
typedef struct dpt_comm_threads_group dpt_comm_threads_group_t;

typedef struct dpt_comm_threads_options {
    /* A participant that waits longer than this for the others fails with
     * DPT_ETIMEDOUT (and the group becomes failed). > 0; default 300. */
    double timeout_s;
    /* How long a waiter spins before it blocks on a condition variable,
     * in microseconds. < 0 (the default) means 50. While spinning a waiter
     * executes a pause instruction, or sched_yield() when the participants
     * outnumber the online CPUs (so a waiter hands its CPU to the
     * participant it waits for). */
    double spin_us;
    /* Allreduces of at most this many bytes take the small-message path
     * (each participant copies its buffer to a private area, one barrier,
     * each sums all copies itself); larger ones the two-barrier
     * reduce-scatter/allgather over the participants' buffers.
     * DPT_COMM_SMALL_AUTO (the default): 0 (never the small path, which is
     * slower when every participant has its own CPU) when P <= online CPUs,
     * 8 KiB when the participants outnumber the CPUs (then every barrier
     * costs context switches and one barrier instead of two wins). Memory:
     * 2 * small_bytes per participant, allocated and touched at create. At
     * most 64 MiB. */
    size_t small_bytes;
    /* The allreduce algorithm (see the top of this file); default
     * DPT_ALLREDUCE_AUTO. ring and tree synchronize the whole group at every
     * step (2 (P - 1) and about log2 P + 2 barriers); native needs two (or
     * one on the small path), hier is native. Every participant uses the
     * group's value. */
    dpt_comm_algorithm_t algorithm;
} dpt_comm_threads_options_t;

#define DPT_COMM_SMALL_AUTO SIZE_MAX

/* Fills *opt with the defaults. */
void dpt_comm_threads_options_init(dpt_comm_threads_options_t *opt);

/* Creates a group of `size` (>= 1) participants; opt may be NULL (defaults).
 * *group is owned by the caller and released with
 * dpt_comm_threads_group_destroy(). Returns 0, DPT_EINVAL (size < 1, bad
 * option), DPT_ENOMEM or DPT_ETHREAD. */
int dpt_comm_threads_group_create(dpt_comm_threads_group_t **group, int size,
                                  const dpt_comm_threads_options_t *opt);

/* Makes the handle of participant `rank` (each rank once; any thread may do
 * it, e.g. the one that creates the workers). *comm is owned by the caller,
 * valid until dpt_comm_destroy(), and borrows the group. Returns 0,
 * DPT_EINVAL (rank out of range) or DPT_ESTATE (rank already joined). */
int dpt_comm_threads_join(dpt_comm_threads_group_t *group, int rank, dpt_comm_t **comm);

/* Frees the group (NULL is a no-op). Every handle must be destroyed first. */
void dpt_comm_threads_group_destroy(dpt_comm_threads_group_t *group);

/* ---- MPI backend -------------------------------------------------------- */

/* Thread support to ask of MPI (MPI_THREAD_FUNNELED, _SERIALIZED,
 * _MULTIPLE). The mpi backend needs FUNNELED when only the thread that
 * initialized MPI communicates; hier needs FUNNELED if thread 0 of its group
 * is that thread, SERIALIZED otherwise. */
typedef enum dpt_comm_mpi_thread {
    DPT_COMM_MPI_FUNNELED = 1,
    DPT_COMM_MPI_SERIALIZED = 2,
    DPT_COMM_MPI_MULTIPLE = 3
} dpt_comm_mpi_thread_t;

/* Initializes MPI (MPI_Init_thread) unless it already is; argc/argv may be
 * NULL. Returns 0, DPT_ENOTSUP (no MPI in this build, or the MPI library
 * provides less thread support than `required`) or DPT_ECOMM. */
int dpt_comm_mpi_init(int *argc, char ***argv, dpt_comm_mpi_thread_t required);
/* Finalizes MPI if dpt_comm_mpi_init initialized it and it is not yet
 * finalized (destroy every mpi/hier communicator first). Returns 0 or
 * DPT_ECOMM; without MPI, 0. MPI_Finalize waits for every process of the
 * job: after a collective failed, prefer dpt_comm_mpi_abort(). */
int dpt_comm_mpi_finalize(void);
/* 1 if MPI is initialized and not finalized, else 0. */
int dpt_comm_mpi_initialized(void);
/* Ends every process of the MPI job: MPI_Abort(MPI_COMM_WORLD, code), after
 * which mpirun kills the other ranks, stopped ones included, and exits
 * non-zero. For the application (the command calls it after printing an
 * error, so that one failed rank ends the job instead of leaving the others
 * to time out); the library never calls it. Does not return when MPI is
 * initialized; returns DPT_ESTATE if MPI is not (or no longer) initialized,
 * DPT_ENOTSUP in a build without MPI. */
int dpt_comm_mpi_abort(int code);

typedef struct dpt_comm_mpi_options {
    /* Pointer to the MPI_Comm to use (borrowed, duplicated at create); NULL
     * means MPI_COMM_WORLD. A void pointer so that this header does not need
     * mpi.h. */
    const void *mpi_comm;
    /* Debug check: before each collective, the ranks allgather a fingerprint
     * (operation, count, root) and a mismatch fails with DPT_ECOMM naming
     * both sides instead of deadlocking. Costs one small allgather per
     * call. Default 0. */
    int check;
    /* A rank whose collective has not completed this many seconds after the
     * call (or dpt_comm_wait) started fails with DPT_ETIMEDOUT naming the
     * ranks missing (see "Timeouts" at the top), after a grace period of
     * min(1 s, timeout_s / 2) spent asking them; the communicator is then
     * failed. Also bounds create (the communicator duplication). > 0 and
     * finite; default 300. All ranks should use the same value. */
    double timeout_s;
    /* The allreduce algorithm (see the top of this file); default
     * DPT_ALLREDUCE_AUTO. native is MPI_Iallreduce; ring, tree and hier are
     * dpt's, over non-blocking point-to-point messages (MPI_Isend and
     * MPI_Irecv) on the communicator, waited for with the same timeout,
     * side channel and reports as the collectives. All ranks must use the
     * same value (with `check` on, a difference is reported as a mismatch). */
    dpt_comm_algorithm_t algorithm;
    /* How ranks are grouped into nodes for hier: 0 (the default) groups the
     * ranks whose MPI_Get_processor_name is equal (a collective exchange at
     * create); k > 0 puts ranks [0, k) on node 0, [k, 2k) on node 1, ...
     * (to try a layout of several machines on one, and in tests). */
    int ranks_per_node;
} dpt_comm_mpi_options_t;

/* Fills *opt with the defaults. */
void dpt_comm_mpi_options_init(dpt_comm_mpi_options_t *opt);

/* Creates this process's handle on an MPI communicator (collective over it:
 * every process must call it). MPI must be initialized (dpt_comm_mpi_init or
 * the application's MPI_Init*). rank/size are the MPI ones. Returns 0,
 * DPT_EINVAL (timeout_s not > 0 and finite; checked before any
 * communication), DPT_ENOTSUP (built without MPI), DPT_ESTATE (MPI not
 * initialized), DPT_ETIMEDOUT (another process did not call it within
 * timeout_s), DPT_ENOMEM or DPT_ECOMM. */
int dpt_comm_mpi_create(dpt_comm_t **comm, const dpt_comm_mpi_options_t *opt);

/* ---- hierarchical backend ----------------------------------------------- */

/* T threads in each of R MPI processes: rank = process_rank * T + thread,
 * size = R * T. Collectives reduce inside the process (threads backend
 * machinery), then thread 0 of each process (the only thread that calls MPI)
 * runs the MPI collective across processes, and the result is copied back to
 * the process's threads. The allreduce is hierarchical by construction: the
 * threads of a process always reduce directly into thread 0's buffer
 * (threads.algorithm must be auto or native, else DPT_EINVAL at create), and
 * the step across processes runs mpi.algorithm (with mpi.ranks_per_node
 * counting processes). Timeouts: threads.timeout_s for the threads of a
 * process, mpi.timeout_s for the MPI step (whose messages count processes:
 * "process 1"); threads waiting behind their leader's MPI step wait
 * mpi.timeout_s + min(1 s, mpi.timeout_s / 2) + 1 s longer. The MPI step
 * also waits for the slowest thread of every process, so mpi.timeout_s
 * should not be below threads.timeout_s. */
typedef struct dpt_comm_hier_group dpt_comm_hier_group_t;

typedef struct dpt_comm_hier_options {
    dpt_comm_threads_options_t threads; /* inside the process */
    dpt_comm_mpi_options_t mpi;         /* across processes */
} dpt_comm_hier_options_t;

/* Fills *opt with the defaults of both parts. */
void dpt_comm_hier_options_init(dpt_comm_hier_options_t *opt);

/* Creates this process's group of `threads_per_process` (>= 1, the same in
 * every process) participants. Collective over the MPI communicator; must be
 * called by the thread that will be thread 0 or with SERIALIZED support.
 * Returns 0, DPT_EINVAL (also a bad option, e.g. mpi.timeout_s <= 0),
 * DPT_ENOTSUP (no MPI), DPT_ESTATE (MPI not initialized), DPT_ETIMEDOUT (a
 * process did not take part within mpi.timeout_s), DPT_ENOMEM or DPT_ECOMM
 * (e.g. processes disagree on T). */
int dpt_comm_hier_group_create(dpt_comm_hier_group_t **group, int threads_per_process,
                               const dpt_comm_hier_options_t *opt);
/* Handle of thread `thread` in [0, T) of this process. Returns 0, DPT_EINVAL
 * or DPT_ESTATE (already joined). */
int dpt_comm_hier_join(dpt_comm_hier_group_t *group, int thread, dpt_comm_t **comm);
/* Frees the group (NULL is a no-op); every handle must be destroyed first.
 * Frees its MPI communicator (called by the thread that may call MPI). */
void dpt_comm_hier_group_destroy(dpt_comm_hier_group_t *group);

#ifdef __cplusplus
}
#endif
#endif /* DPT_COMM_H */
