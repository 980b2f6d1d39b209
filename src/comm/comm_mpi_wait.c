/*
 * MPI backend: waiting for MPI operations with a timeout, and naming the
 * ranks that are missing when it passes.
 *
 * Every MPI collective dpt issues is non-blocking (MPI_Iallreduce, MPI_Ibcast,
 * ...) and completed by dpt__mwait, so that no rank stays inside MPI longer
 * than the timeout and no waiting rank burns a core:
 *
 *   poll MPI_Testall without sleeping   for 200 us + 2 ns per byte moved
 *   then repeat: MPI_Testall; serve the side channel;
 *                nanosleep(d), d = 1 us doubling to 1 ms (never past the deadline)
 *   until the requests complete, or t0 + timeout_s
 *
 * The no-sleep phase keeps the latency of small collectives (a 4 KB
 * allreduce takes 1-2 us with Open MPI on one machine, far less than one
 * sleep, which costs ~55 us with Linux's default timer slack). Its
 * size-dependent part exists because Open MPI has no progress thread: a
 * transfer advances only while the rank is inside MPI, so sleeping during a
 * large transfer would stall it; the budget is what the transfer takes at
 * 1 GB/s (2 bytes moved per byte of payload), after which the rank is
 * considered to be waiting for a late peer and sleeps. Without the timeout,
 * MPI_Wait would have polled at full speed for as long as the peer was late.
 * The fixed part covers a message's trip between processes over TCP (tens
 * of us on the loopback): with 50 us, a rank of dpt's ring often slept
 * while its own send still needed it inside MPI, and a 4 KB ring allreduce
 * over TCP took 270-310 us instead of 23-32 us.
 *
 * Side channel. MPI cannot say which rank has not called a collective, so
 * every handle has a second duplicate of the communicator for small
 * point-to-point messages:
 *   STATUS_REQ   (empty)                      which collective are you in?
 *   STATUS_REPLY (seq, call, count, root, tag) the answer
 *   FAILED       ("code message", text)       I failed: stop waiting for me
 * A rank reads these only inside dpt__mwait, after the no-sleep phase, i.e.
 * while it is inside a collective of this handle, and likewise while it
 * waits in a point-to-point send or recv of the handle (comm_mpi_p2p.c, which
 * answers "in recv from rank 2 with tag 7") or calls probe; a rank anywhere
 * else (user code, another communicator, stopped, dead) does not answer.
 *
 * At the deadline the rank sends STATUS_REQ to every other rank and listens
 * for the grace period (min(1 s, timeout / 2)), answering the requests of the
 * others (ranks that time out together answer each other). The report lists
 * the ranks that did not answer and those that answered from another
 * collective:
 *   allreduce #13 (4096 floats) timed out after 5 s; not arrived: rank 1 (did
 *   not respond), rank 2 (in barrier #12); ...
 * The handle is then failed and a FAILED notice goes to every other rank, so
 * one that is (or later gets) stuck waiting in a collective of this handle
 * stops as soon as it polls, with the same code and this rank's message,
 * instead of waiting for its own deadline. A notice is best effort: a rank
 * that does not get it times out by itself.
 *
 * What is never released: MPI can neither cancel nor free a pending
 * collective request (MPI_Cancel and MPI_Request_free are erroneous on them),
 * so a collective that timed out stays pending for the life of the process,
 * and MPI may still write into its buffers whenever the process enters MPI
 * again. The handle records this (m->stuck) and destroy leaks it
 * (comm_mpi.c). The side channel's own requests are all completed, cancelled
 * (receives) or handed to MPI_Request_free (sends of static or leaked data).
 */
#include "dpt_config.h"

#if !DPT_HAVE_MPI
/* Nothing to wait for without MPI (ISO C wants a declaration in a file). */
typedef int dpt__comm_mpi_wait_unused;
#else

#include "comm/comm_mpi_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpt/stats.h"
#include "dpt/status.h"

#define SPIN_S 200e-6        /* no-sleep polling of every wait */
#define SPIN_S_PER_BYTE 2e-9 /* plus this per byte of payload (1 GB/s, both ways) */
#define SLEEP_MIN_NS 1000L
#define SLEEP_MAX_NS 1000000L

enum { TAG_STATUS_REQ = 1, TAG_STATUS_REPLY = 2, TAG_FAILED = 3 };

/* Outcomes of the polling loop. */
enum { WAIT_DONE, WAIT_DEADLINE, WAIT_MPI_ERROR, WAIT_SIDE_ERROR, WAIT_FAILED };

void dpt__mpi_message(int mrc, char *out, int n)
{
    int len = 0;
    if (MPI_Error_string(mrc, out, &len) != MPI_SUCCESS)
        snprintf(out, (size_t)n, "MPI error %d", mrc);
}

void dpt__mop_describe(const dpt__mop_t *op, const char *unit, char *out, size_t n)
{
    const char *name = dpt__comm_call_name(op->call);
    unsigned long long seq = (unsigned long long)op->seq;
    const char *s = op->count == 1 ? "" : "s";
    switch (op->call) {
    case DPT__CALL_BROADCAST:
        snprintf(out, n, "%s #%llu (%zu float%s from %s %d)", name, seq, op->count, s, unit,
                 op->root);
        break;
    case DPT__CALL_ALLGATHER:
        snprintf(out, n, "%s #%llu (%zu float%s per %s)", name, seq, op->count, s, unit);
        break;
    case DPT__CALL_BARRIER: snprintf(out, n, "%s #%llu", name, seq); break;
    case DPT__CALL_SEND:
    case DPT__CALL_RECV:
    case DPT__CALL_PROBE: dpt__p2p_describe(op->call, op->root, op->tag, op->count, out, n); break;
    default: snprintf(out, n, "%s #%llu (%zu float%s)", name, seq, op->count, s); break;
    }
}

/* ---- failures ------------------------------------------------------------ */

/* Sends this rank's failure to every other rank (best effort: a send that
 * cannot start leaves that rank to time out by itself). */
static void notify_failure(dpt__mcomm_t *m)
{
    if (m->side == MPI_COMM_NULL)
        return;
    snprintf(m->note, sizeof m->note, "%d %s", m->failed, m->fail_msg);
    int len = (int)strlen(m->note) + 1;
    for (int q = 0; q < m->base.size; q++) {
        if (q == m->base.rank || m->note_reqs[q] != MPI_REQUEST_NULL)
            continue;
        if (MPI_Isend(m->note, len, MPI_CHAR, q, TAG_FAILED, m->side, &m->note_reqs[q]) !=
            MPI_SUCCESS)
            m->note_reqs[q] = MPI_REQUEST_NULL;
    }
}

void dpt__mrecord(dpt__mcomm_t *m, int code, int notify, const char *msg)
{
    if (m->failed != 0)
        return;
    m->failed = code;
    snprintf(m->fail_msg, sizeof m->fail_msg, "%s", msg);
    if (notify)
        notify_failure(m);
}

int dpt__mfail(dpt__mcomm_t *m, int code, int notify, const char *msg)
{
    dpt__mrecord(m, code, notify, msg);
    return dpt_error(code, "comm %s %d: %s", m->unit, m->base.rank, msg);
}

int dpt__mpi_fail(dpt__mcomm_t *m, int mrc, const char *call)
{
    char err[MPI_MAX_ERROR_STRING], what[128], msg[DPT__MPI_NOTE_LEN];
    dpt__mpi_message(mrc, err, sizeof err);
    dpt__mop_describe(&m->cur, m->unit, what, sizeof what);
    snprintf(msg, sizeof msg, "%s: %s failed: %s", what, call, err);
    return dpt__mfail(m, DPT_ECOMM, 1, msg);
}

/* Rank q's FAILED notice: this handle fails with q's code and message. */
static int peer_failed(dpt__mcomm_t *m, int q, const char *note)
{
    char *end = NULL;
    long code = strtol(note, &end, 10);
    if (end == note || code >= 0 || code < -1000)
        code = DPT_ECOMM;
    const char *text = end != NULL && *end == ' ' ? end + 1 : end;
    char what[128], msg[DPT__MPI_NOTE_LEN];
    dpt__mop_describe(&m->cur, m->unit, what, sizeof what);
    snprintf(msg, sizeof msg, "%s aborted: %s %d failed: %s", what, m->unit, q,
             text != NULL ? text : "");
    return dpt__mfail(m, (int)code, 0, msg);
}

/* ---- side channel --------------------------------------------------------- */

/* Answers q's status request with the current collective (best effort: if
 * the previous answer to q is still in flight, or the send cannot start, q
 * reports this rank as not responding). */
static void send_status(dpt__mcomm_t *m, int q)
{
    if (m->reply_reqs[q] != MPI_REQUEST_NULL) {
        int done = 0;
        if (MPI_Test(&m->reply_reqs[q], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)
            return;
    }
    uint64_t *b = m->reply_buf + DPT__MPI_STATUS_WORDS * (size_t)q;
    b[0] = m->cur.seq;
    b[1] = (uint64_t)m->cur.call;
    b[2] = (uint64_t)m->cur.count;
    b[3] = (uint64_t)(int64_t)m->cur.root;
    b[4] = (uint64_t)(int64_t)m->cur.tag;
    if (MPI_Isend(b, DPT__MPI_STATUS_WORDS, MPI_UINT64_T, q, TAG_STATUS_REPLY, m->side,
                  &m->reply_reqs[q]) != MPI_SUCCESS)
        m->reply_reqs[q] = MPI_REQUEST_NULL;
}

/* Handles every message waiting on the side channel: answers status
 * requests and, when `notes`, reads failure notices. Returns WAIT_DONE,
 * WAIT_FAILED (a notice: the handle is failed with the notifier's code, which
 * *out holds) or WAIT_SIDE_ERROR (*out holds the MPI error; nothing
 * recorded). */
static int serve_side(dpt__mcomm_t *m, int notes, int *out)
{
    for (;;) {
        int flag = 0, mrc;
        MPI_Status st;
        mrc = MPI_Iprobe(MPI_ANY_SOURCE, notes ? MPI_ANY_TAG : TAG_STATUS_REQ, m->side, &flag, &st);
        if (mrc != MPI_SUCCESS) {
            *out = mrc;
            return WAIT_SIDE_ERROR;
        }
        if (!flag)
            return WAIT_DONE;
        int q = st.MPI_SOURCE;
        if (st.MPI_TAG == TAG_STATUS_REQ) {
            mrc = MPI_Recv(NULL, 0, MPI_BYTE, q, TAG_STATUS_REQ, m->side, MPI_STATUS_IGNORE);
            if (mrc == MPI_SUCCESS)
                send_status(m, q);
        } else if (st.MPI_TAG == TAG_FAILED) {
            char note[sizeof m->note];
            mrc = MPI_Recv(note, (int)sizeof note, MPI_CHAR, q, TAG_FAILED, m->side,
                           MPI_STATUS_IGNORE);
            if (mrc == MPI_SUCCESS) {
                note[sizeof note - 1] = '\0';
                *out = peer_failed(m, q, note);
                return WAIT_FAILED;
            }
        } else {
            /* A status reply that arrived after its asker stopped listening
             * (nothing else is sent on this channel): drop it. */
            uint64_t drop[DPT__MPI_STATUS_WORDS];
            mrc = MPI_Recv(drop, DPT__MPI_STATUS_WORDS, MPI_UINT64_T, q, st.MPI_TAG, m->side,
                           MPI_STATUS_IGNORE);
        }
        if (mrc != MPI_SUCCESS) {
            *out = mrc;
            return WAIT_SIDE_ERROR;
        }
    }
}

static void nap(long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

/* A gap between two looks longer than this (the longest nap is 1 ms) is
 * time this process did not run: it was stopped (SIGSTOP) or not
 * scheduled. */
#define GAP_S 0.25

/* The polling loop (see the top of the file), around test(ctx). m may be
 * NULL (no side channel). Returns WAIT_DONE, WAIT_DEADLINE, WAIT_MPI_ERROR
 * or WAIT_SIDE_ERROR (*out = the MPI code) or WAIT_FAILED (*out = the dpt
 * code of a notified failure, already recorded). The deadline counts the
 * time this process ran: a gap (GAP_S) moves it by the gap, so a process
 * stopped and continued (a backup worker held back) does not fail a wait
 * that its peer answered meanwhile; its peers' deadlines still name it. */
static int poll_until(dpt__mcomm_t *m, dpt__mtest_fn test, void *ctx, double deadline, size_t bytes,
                      int *out)
{
    double last = dpt_now();
    double spin_end = last + SPIN_S + SPIN_S_PER_BYTE * (double)bytes;
    long sleep_ns = SLEEP_MIN_NS;
    for (;;) {
        int done = 0;
        int mrc = test(ctx, &done);
        if (mrc != MPI_SUCCESS) {
            *out = mrc;
            return WAIT_MPI_ERROR;
        }
        if (done)
            return WAIT_DONE;
        double now = dpt_now();
        if (now - last > GAP_S) {
            deadline += now - last;
            spin_end = now;
        }
        last = now;
        if (now >= deadline)
            return WAIT_DEADLINE;
        if (now < spin_end)
            continue;
        if (m != NULL && m->side != MPI_COMM_NULL) {
            int w = serve_side(m, 1, out);
            if (w != WAIT_DONE)
                return w;
        }
        double left_ns = (deadline - now) * 1e9;
        nap(left_ns < (double)sleep_ns ? (long)left_ns + 1 : sleep_ns);
        if (sleep_ns < SLEEP_MAX_NS)
            sleep_ns = sleep_ns * 2 < SLEEP_MAX_NS ? sleep_ns * 2 : SLEEP_MAX_NS;
    }
}

typedef struct reqs {
    int n;
    MPI_Request *r;
} reqs_t;

static int test_all(void *ctx, int *done)
{
    reqs_t *q = ctx;
    return MPI_Testall(q->n, q->r, done, MPI_STATUSES_IGNORE);
}

/* Waits for nreq requests. */
static int wait_until(dpt__mcomm_t *m, int nreq, MPI_Request *reqs, double deadline, size_t bytes,
                      int *out)
{
    reqs_t q = {nreq, reqs};
    return poll_until(m, test_all, &q, deadline, bytes, out);
}

int dpt__mwait_plain(int nreq, MPI_Request *reqs, double deadline, size_t bytes)
{
    int out = 0;
    switch (wait_until(NULL, nreq, reqs, deadline, bytes, &out)) {
    case WAIT_DONE: return 0;
    case WAIT_DEADLINE: return 1;
    default: return out > 0 ? out : MPI_ERR_OTHER;
    }
}

/* ---- the timeout report --------------------------------------------------- */

/* Asks every other rank for its status and listens for the grace period.
 * Fills m->answered and m->status_in. */
static void ask_the_others(dpt__mcomm_t *m)
{
    int P = m->base.size, me = m->base.rank;
    for (int q = 0; q < P; q++) {
        m->answered[q] = 0;
        m->status_rreqs[q] = MPI_REQUEST_NULL;
        m->status_sreqs[q] = MPI_REQUEST_NULL;
        if (q == me)
            continue;
        if (MPI_Irecv(m->status_in + DPT__MPI_STATUS_WORDS * (size_t)q, DPT__MPI_STATUS_WORDS,
                      MPI_UINT64_T, q, TAG_STATUS_REPLY, m->side,
                      &m->status_rreqs[q]) != MPI_SUCCESS) {
            m->status_rreqs[q] = MPI_REQUEST_NULL; /* reported as not responding */
            continue;
        }
        if (MPI_Isend(NULL, 0, MPI_BYTE, q, TAG_STATUS_REQ, m->side, &m->status_sreqs[q]) !=
            MPI_SUCCESS)
            m->status_sreqs[q] = MPI_REQUEST_NULL;
    }
    double end = dpt_now() + m->grace_s;
    long sleep_ns = SLEEP_MIN_NS;
    for (;;) {
        int pending = 0, out = 0;
        for (int q = 0; q < P; q++) {
            if (m->status_rreqs[q] == MPI_REQUEST_NULL)
                continue;
            int done = 0;
            if (MPI_Test(&m->status_rreqs[q], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
                m->answered[q] = 1;
            else
                pending++;
        }
        if (pending == 0)
            break;
        /* Answer the others meanwhile (an error here only costs their answer). */
        (void)serve_side(m, 0, &out);
        if (dpt_now() >= end)
            break;
        nap(sleep_ns);
        if (sleep_ns < SLEEP_MAX_NS)
            sleep_ns = sleep_ns * 2 < SLEEP_MAX_NS ? sleep_ns * 2 : SLEEP_MAX_NS;
    }
    /* Stop listening: cancelling a receive is local and completes at once
     * (or the receive completed after all, and then it counts). The empty
     * requests need no buffer, so a send still in flight (to a stopped rank)
     * is left to MPI. */
    for (int q = 0; q < P; q++) {
        if (m->status_rreqs[q] != MPI_REQUEST_NULL) {
            MPI_Status st;
            int cancelled = 1;
            if (MPI_Cancel(&m->status_rreqs[q]) == MPI_SUCCESS &&
                MPI_Wait(&m->status_rreqs[q], &st) == MPI_SUCCESS &&
                MPI_Test_cancelled(&st, &cancelled) == MPI_SUCCESS && !cancelled)
                m->answered[q] = 1;
        }
        if (m->status_sreqs[q] != MPI_REQUEST_NULL) {
            int done = 0;
            if (MPI_Test(&m->status_sreqs[q], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)
                MPI_Request_free(&m->status_sreqs[q]);
        }
    }
}

/* Appends ", item" (or "item") to list if it fits; returns 0 if it did not. */
static int append(char *list, size_t cap, const char *item)
{
    size_t len = strlen(list), add = strlen(item) + (len ? 2 : 0);
    if (len + add + 1 > cap)
        return 0;
    snprintf(list + len, cap - len, "%s%s", len ? ", " : "", item);
    return 1;
}

static int timed_out(dpt__mcomm_t *m)
{
    const char *unit = m->unit;
    char what[128];
    dpt__mop_describe(&m->cur, unit, what, sizeof what);
    ask_the_others(m);

    /* Room for the list: what is left of the message after the fixed parts. */
    char list[200], item[160], msg[DPT__MPI_NOTE_LEN];
    int listed = 0, silent = 0, left_out = 0;
    list[0] = '\0';
    for (int q = 0; q < m->base.size; q++) {
        if (q == m->base.rank)
            continue;
        if (!m->answered[q]) {
            snprintf(item, sizeof item, "%s %d (did not respond)", unit, q);
            silent++;
        } else {
            const uint64_t *s = m->status_in + DPT__MPI_STATUS_WORDS * (size_t)q;
            dpt__mop_t o = {s[0], (int)s[1], (int)(int64_t)s[3], (size_t)s[2], (int)(int64_t)s[4]};
            if (o.seq == m->cur.seq && o.call == m->cur.call)
                continue; /* arrived: it is in this collective too */
            char d[128];
            dpt__mop_describe(&o, unit, d, sizeof d);
            snprintf(item, sizeof item, "%s %d (in %s)", unit, q, d);
        }
        listed++;
        if (left_out > 0 || !append(list, sizeof list - 20, item))
            left_out++;
    }
    if (left_out > 0) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, ", and %d more", left_out);
    }
    if (listed == 0)
        snprintf(msg, sizeof msg,
                 "%s timed out after %g s; every %s answered from this collective, so MPI did "
                 "not complete it (a slow network or an MPI failure); the communicator is now "
                 "failed",
                 what, m->timeout_s, unit);
    else
        snprintf(msg, sizeof msg,
                 "%s timed out after %g s; not arrived: %s; the communicator is now failed%s%s%s",
                 what, m->timeout_s, list, silent ? " (a " : "", silent ? unit : "",
                 silent ? " that did not respond is stopped, dead, or busy outside dpt's "
                          "collectives on this communicator)"
                        : "");
    return dpt__mfail(m, DPT_ETIMEDOUT, 1, msg);
}

int dpt__mpoll(dpt__mcomm_t *m, dpt__mtest_fn test, void *ctx, double deadline, size_t bytes,
               const char *mpi_call)
{
    int out = 0;
    switch (poll_until(m, test, ctx, deadline, bytes, &out)) {
    case WAIT_DONE: return 0;
    case WAIT_DEADLINE: return 1;
    case WAIT_MPI_ERROR: return dpt__mpi_fail(m, out, mpi_call);
    case WAIT_SIDE_ERROR: return dpt__mpi_fail(m, out, "the side channel");
    default: return out; /* WAIT_FAILED */
    }
}

int dpt__mpoll_reqs(dpt__mcomm_t *m, int nreq, MPI_Request *reqs, double deadline, size_t bytes,
                    const char *mpi_call)
{
    reqs_t q = {nreq, reqs};
    return dpt__mpoll(m, test_all, &q, deadline, bytes, mpi_call);
}

int dpt__mserve(dpt__mcomm_t *m)
{
    int out = 0;
    switch (serve_side(m, 1, &out)) {
    case WAIT_DONE: return 0;
    case WAIT_SIDE_ERROR: return dpt__mpi_fail(m, out, "the side channel");
    default: return out; /* WAIT_FAILED */
    }
}

int dpt__mwait(dpt__mcomm_t *m, int nreq, MPI_Request *reqs, double t0, size_t bytes,
               const char *mpi_call)
{
    int out = 0;
    switch (wait_until(m, nreq, reqs, t0 + m->timeout_s, bytes, &out)) {
    case WAIT_DONE: return 0;
    case WAIT_MPI_ERROR: m->stuck = 1; return dpt__mpi_fail(m, out, mpi_call);
    case WAIT_SIDE_ERROR: m->stuck = 1; return dpt__mpi_fail(m, out, "the side channel");
    case WAIT_FAILED: m->stuck = 1; return out;
    default: m->stuck = 1; return timed_out(m);
    }
}

#endif /* DPT_HAVE_MPI */
