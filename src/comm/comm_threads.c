/*
 * Collectives, threads backend: P participant threads of one process
 * exchanging data through shared memory (no sockets, no copies through a
 * server).
 *
 * Synchronization: epochs.
 *   Every participant r owns a slot with a monotonically increasing epoch
 *   (an atomic uint64, alone on its cache line pair) and two "pub" entries.
 *   A barrier number e is: r fills pub[e & 1] (fingerprint of the call,
 *   buffer pointers), stores epoch = e (release, seq_cst), then waits until
 *   every other slot's epoch is >= e (acquire). The release/acquire pair
 *   makes everything r wrote before arriving (its pub entry, its buffer,
 *   its private copy) visible to everyone who waited for e.
 *   Invariant that makes two pub entries (and two private copies) enough:
 *   a participant reads the others' pub[e & 1] and copies only between
 *   passing barrier e and arriving at e + 1, and writes its own entry for a
 *   barrier e' only after passing e' - 1. So the entry it overwrites (e' - 2)
 *   is no longer read by anyone.
 *   Waiting spins for spin_us with a pause instruction (checking the clock
 *   every 64 rounds), or with sched_yield() when there are more participants
 *   than CPUs (the thread we wait for may need our CPU), then blocks on the
 *   group's condition variable with a deadline. Lost wake-ups are excluded
 *   Dekker-style: a sleeper increments `sleepers` (seq_cst) under the mutex
 *   and re-checks the epochs with seq_cst loads; an arriver stores its epoch
 *   (seq_cst) and then reads `sleepers` (seq_cst), broadcasting under the
 *   mutex when it is non-zero. One of the two sees the other.
 *
 * Failure: a waiter whose deadline passes marks the group failed (code and
 *   a message naming the ranks that did not arrive), wakes every sleeper and
 *   returns DPT_ETIMEDOUT. Every later wait or call on any participant
 *   returns that code with the message; the group cannot be reused (destroy
 *   and re-create it). Mismatched calls (fingerprints differ at the first
 *   barrier of an operation, before any data is touched) fail the group the
 *   same way with DPT_ECOMM. A failure also wakes the receivers waiting
 *   for point-to-point messages in their mailboxes (comm_threads_p2p.c),
 *   whose calls then fail with it too.
 *
 * Determinism: every element of a reduction is ((x_0 + x_1) + x_2) + ...
 *   in rank order, whichever participant computes it and whichever path
 *   (small or large) is taken, so results are bitwise identical everywhere.
 *   The kernels are in comm_kernels.c.
 */
#include "comm/comm_internal.h"
#include "core/clock.h"
#include "core/spin.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpt/stats.h"
#include "dpt/status.h"

#define DPT__SLOT_ALIGN 128
#define DPT__DEFAULT_TIMEOUT_S 300.0
#define DPT__OVERSUB_SMALL_BYTES ((size_t)8 * 1024)
#define DPT__MAX_SMALL_BYTES ((size_t)64 * 1024 * 1024)

typedef struct tslot {
    _Alignas(DPT__SLOT_ALIGN) _Atomic uint64_t epoch; /* last barrier reached */
    _Alignas(DPT__SLOT_ALIGN) dpt__tpub_t pub[2];     /* indexed by epoch & 1 */
} tslot_t;

struct dpt__tgroup {
    _Alignas(64) _Atomic int failed;   /* 0, or the status code of the failure */
    _Alignas(64) _Atomic int sleepers; /* participants blocked on cv */
    int size;
    int rank_offset; /* added to ranks in messages (hier: process * T) */
    double timeout_s;
    double spin_s;
    int oversubscribed;             /* more participants than online CPUs */
    dpt_comm_algorithm_t algorithm; /* as given in the options */
    size_t small_floats;            /* capacity of one private copy, in floats */
    tslot_t *slots;                 /* size entries */
    float *scratch;                 /* size * 2 private copies of small_floats */
    pthread_mutex_t mu;             /* protects cv sleeps, fail_msg writes, joined */
    pthread_cond_t cv;
    int mu_ok, cv_ok;
    unsigned char *joined;
    dpt__tmail_t *mail; /* point-to-point mailboxes (comm_threads_p2p.c) */
    char fail_msg[400]; /* written once, before `failed` is set */
};

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* ---- group -------------------------------------------------------------- */

void dpt_comm_threads_options_init(dpt_comm_threads_options_t *opt)
{
    if (opt == NULL)
        return;
    opt->timeout_s = DPT__DEFAULT_TIMEOUT_S;
    opt->spin_us = -1.0;
    opt->small_bytes = DPT_COMM_SMALL_AUTO;
    opt->algorithm = DPT_ALLREDUCE_AUTO;
}

int dpt__tgroup_create(dpt__tgroup_t **out, int size, const dpt_comm_threads_options_t *opt)
{
    dpt_comm_threads_options_t o;
    if (out == NULL)
        return dpt_error(DPT_EINVAL, "comm threads: group_create with a NULL output pointer");
    *out = NULL;
    if (opt == NULL)
        dpt_comm_threads_options_init(&o);
    else
        o = *opt;
    if (size < 1)
        return dpt_error(DPT_EINVAL, "comm threads: group size %d, expected >= 1", size);
    if (!(o.timeout_s > 0.0))
        return dpt_error(DPT_EINVAL, "comm threads: timeout_s %g, expected > 0", o.timeout_s);
    if ((int)o.algorithm < 0 || o.algorithm >= DPT_COMM_ALGORITHM_COUNT)
        return dpt_error(DPT_EINVAL, "comm threads: unknown allreduce algorithm %d",
                         (int)o.algorithm);
    if (o.small_bytes != DPT_COMM_SMALL_AUTO && o.small_bytes > DPT__MAX_SMALL_BYTES)
        return dpt_error(DPT_EINVAL, "comm threads: small_bytes %zu, at most %zu allowed",
                         o.small_bytes, DPT__MAX_SMALL_BYTES);

    dpt__tgroup_t *g = aligned_alloc(64, round_up(sizeof *g, 64));
    if (g == NULL)
        return dpt_error(DPT_ENOMEM, "comm threads: out of memory for a group of %d", size);
    memset(g, 0, sizeof *g);
    atomic_init(&g->failed, 0);
    atomic_init(&g->sleepers, 0);
    g->size = size;
    g->timeout_s = o.timeout_s;
    g->algorithm = o.algorithm;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    g->oversubscribed = ncpu > 0 && size > ncpu;
    if (o.spin_us < 0.0) {
        g->spin_s = 50e-6;
    } else {
        g->spin_s = o.spin_us * 1e-6;
    }
    if (o.small_bytes == DPT_COMM_SMALL_AUTO)
        o.small_bytes = g->oversubscribed ? DPT__OVERSUB_SMALL_BYTES : 0;
    g->small_floats = round_up(o.small_bytes / sizeof(float), 16);

    int rc = DPT_ENOMEM;
    g->slots = aligned_alloc(DPT__SLOT_ALIGN, (size_t)size * sizeof(tslot_t));
    g->joined = calloc((size_t)size, 1);
    if (g->slots == NULL || g->joined == NULL)
        goto fail;
    memset(g->slots, 0, (size_t)size * sizeof(tslot_t));
    for (int r = 0; r < size; r++)
        atomic_init(&g->slots[r].epoch, 0);
    if (g->small_floats > 0 && size > 1) {
        size_t n = (size_t)size * 2 * g->small_floats;
        g->scratch = aligned_alloc(64, n * sizeof(float));
        if (g->scratch == NULL)
            goto fail;
        memset(g->scratch, 0, n * sizeof(float)); /* touch every page now */
    }
    rc = DPT_ETHREAD;
    if (pthread_mutex_init(&g->mu, NULL) != 0)
        goto fail;
    g->mu_ok = 1;
    if (dpt__cond_init_monotonic(&g->cv) != 0)
        goto fail;
    g->cv_ok = 1;
    if ((rc = dpt__tmail_create(&g->mail, size)) < 0) {
        dpt__tgroup_destroy(g);
        return rc;
    }
    *out = g;
    return 0;
fail:
    dpt__tgroup_destroy(g);
    if (rc == DPT_ENOMEM)
        return dpt_error(rc, "comm threads: out of memory for a group of %d", size);
    return dpt_error(rc, "comm threads: cannot create the group's mutex/condition variable");
}

void dpt__tgroup_destroy(dpt__tgroup_t *g)
{
    if (g == NULL)
        return;
    dpt__tmail_destroy(g->mail);
    if (g->cv_ok)
        pthread_cond_destroy(&g->cv);
    if (g->mu_ok)
        pthread_mutex_destroy(&g->mu);
    free(g->scratch);
    free(g->joined);
    free(g->slots);
    free(g);
}

int dpt__tgroup_size(const dpt__tgroup_t *g)
{
    return g->size;
}

dpt__tmail_t *dpt__tgroup_mail(const dpt__tgroup_t *g)
{
    return g->mail;
}

int dpt__tgroup_failed(dpt__tgroup_t *g)
{
    return atomic_load_explicit(&g->failed, memory_order_acquire);
}

double dpt__tgroup_timeout_s(const dpt__tgroup_t *g)
{
    return g->timeout_s;
}

void dpt__tgroup_set_rank_offset(dpt__tgroup_t *g, int offset)
{
    g->rank_offset = offset;
}

int dpt__tpart_init(dpt__tpart_t *p, dpt__tgroup_t *g, int rank)
{
    memset(p, 0, sizeof *p);
    if (g == NULL)
        return dpt_error(DPT_EINVAL, "comm threads: join on a NULL group");
    if (rank < 0 || rank >= g->size)
        return dpt_error(DPT_EINVAL, "comm threads: join as rank %d, expected [0, %d)", rank,
                         g->size);
    p->srcs = calloc((size_t)g->size, sizeof *p->srcs);
    p->dsts = calloc((size_t)g->size, sizeof *p->dsts);
    if (p->srcs == NULL || p->dsts == NULL) {
        dpt__tpart_deinit(p);
        return dpt_error(DPT_ENOMEM, "comm threads: rank %d: out of memory", rank);
    }
    pthread_mutex_lock(&g->mu);
    int taken = g->joined[rank];
    g->joined[rank] = 1;
    pthread_mutex_unlock(&g->mu);
    if (taken) {
        dpt__tpart_deinit(p);
        return dpt_error(DPT_ESTATE, "comm threads: rank %d has already joined the group", rank);
    }
    p->g = g;
    p->rank = rank;
    /* A participant continues from its slot's epoch: 0 for a first join, the
     * last barrier it reached if it left (dpt_comm_destroy) and joins again.
     * The mutex orders this read after the previous handle's last store. */
    p->epoch = atomic_load_explicit(&g->slots[rank].epoch, memory_order_relaxed);
    return 0;
}

void dpt__tpart_deinit(dpt__tpart_t *p)
{
    if (p == NULL)
        return;
    if (p->g != NULL) {
        pthread_mutex_lock(&p->g->mu);
        p->g->joined[p->rank] = 0;
        pthread_mutex_unlock(&p->g->mu);
    }
    free(p->srcs);
    free(p->dsts);
    memset(p, 0, sizeof *p);
}

dpt__tpub_t *dpt__tpart_next_pub(dpt__tpart_t *p)
{
    return &p->g->slots[p->rank].pub[(p->epoch + 1) & 1];
}

const dpt__tpub_t *dpt__tpart_peer(const dpt__tpart_t *p, int q)
{
    return &p->g->slots[q].pub[p->epoch & 1];
}

/* ---- failure ------------------------------------------------------------ */

static void fail_locked(dpt__tgroup_t *g, int code, const char *msg)
{
    if (atomic_load_explicit(&g->failed, memory_order_relaxed) == 0) {
        snprintf(g->fail_msg, sizeof g->fail_msg, "%s", msg);
        atomic_store_explicit(&g->failed, code, memory_order_release);
        pthread_cond_broadcast(&g->cv);
        dpt__tmail_wake(g->mail); /* receivers waiting for a message */
    }
}

int dpt__tpart_fail(dpt__tpart_t *p, int code, const char *fmt, ...)
{
    char msg[300], full[340];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "rank %d: %s", p->rank + p->g->rank_offset, msg);
    pthread_mutex_lock(&p->g->mu);
    fail_locked(p->g, code, full);
    pthread_mutex_unlock(&p->g->mu);
    return dpt_error(code, "comm %s", full);
}

/* The error a participant returns when it finds the group failed. */
static int report_failed(const dpt__tpart_t *p, int code, const char *what)
{
    return dpt_error(code, "comm rank %d: %s aborted, the group failed earlier: %s",
                     p->rank + p->g->rank_offset, what, p->g->fail_msg);
}

int dpt__tpart_check(const dpt__tpart_t *p, const char *what)
{
    int code = atomic_load_explicit(&p->g->failed, memory_order_acquire);
    return code ? report_failed(p, code, what) : 0;
}

/* ---- barrier ------------------------------------------------------------ */

static int all_arrived(const dpt__tgroup_t *g, int self, uint64_t e, memory_order mo)
{
    for (int q = 0; q < g->size; q++)
        if (q != self && atomic_load_explicit(&g->slots[q].epoch, mo) < e)
            return 0;
    return 1;
}

void dpt__tpart_arrive(dpt__tpart_t *p)
{
    dpt__tgroup_t *g = p->g;
    p->epoch++;
    atomic_store_explicit(&g->slots[p->rank].epoch, p->epoch, memory_order_seq_cst);
    if (atomic_load_explicit(&g->sleepers, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&g->mu);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
}

struct timespec dpt__tabstime(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Called with the mutex held once the deadline has passed. */
static int timeout_locked(dpt__tpart_t *p, const char *what, double limit)
{
    dpt__tgroup_t *g = p->g;
    char missing[200];
    size_t len = 0;
    int n = 0;
    missing[0] = '\0';
    for (int q = 0; q < g->size; q++) {
        if (q == p->rank ||
            atomic_load_explicit(&g->slots[q].epoch, memory_order_seq_cst) >= p->epoch)
            continue;
        if (len < sizeof missing - 16) {
            int w = snprintf(missing + len, sizeof missing - len, "%s%d", n ? ", " : "",
                             q + g->rank_offset);
            if (w > 0)
                len += (size_t)w;
        }
        n++;
    }
    char msg[340];
    snprintf(msg, sizeof msg,
             "rank %d: %s timed out after %.3g s waiting for rank%s %s (group of %d); the group "
             "is now failed",
             p->rank + g->rank_offset, what, limit, n == 1 ? "" : "s", missing, g->size);
    fail_locked(g, DPT_ETIMEDOUT, msg);
    return dpt_error(DPT_ETIMEDOUT, "comm %s", msg);
}

static int wait_blocking(dpt__tpart_t *p, const char *what, double t0, double extra_s)
{
    dpt__tgroup_t *g = p->g;
    double deadline = t0 + g->timeout_s + extra_s;
    struct timespec ts = dpt__tabstime(deadline);
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    atomic_fetch_add_explicit(&g->sleepers, 1, memory_order_seq_cst);
    for (;;) {
        int code = atomic_load_explicit(&g->failed, memory_order_acquire);
        if (code) {
            rc = report_failed(p, code, what);
            break;
        }
        if (all_arrived(g, p->rank, p->epoch, memory_order_seq_cst))
            break;
        double now = dpt_now();
        if (now >= deadline) {
            /* The limit, not the time it took to notice (as the MPI
             * backend reports it): the message names what was configured. */
            rc = timeout_locked(p, what, g->timeout_s + extra_s);
            break;
        }
        int w = pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (w != 0 && w != ETIMEDOUT) {
            char msg[200];
            snprintf(msg, sizeof msg, "rank %d: %s: pthread_cond_timedwait failed (%d)",
                     p->rank + g->rank_offset, what, w);
            fail_locked(g, DPT_ETHREAD, msg);
            rc = dpt_error(DPT_ETHREAD, "comm %s", msg);
            break;
        }
    }
    atomic_fetch_sub_explicit(&g->sleepers, 1, memory_order_seq_cst);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* The spin's condition: everybody arrived, or the group failed. */
static int tpart_ready(void *ctx)
{
    dpt__tpart_t *p = ctx;
    return atomic_load_explicit(&p->g->failed, memory_order_acquire) ||
           all_arrived(p->g, p->rank, p->epoch, memory_order_acquire);
}

int dpt__tpart_wait(dpt__tpart_t *p, const char *what)
{
    return dpt__tpart_wait_ext(p, what, 0.0);
}

int dpt__tpart_wait_ext(dpt__tpart_t *p, const char *what, double extra_s)
{
    dpt__tgroup_t *g = p->g;
    double t0 = 0.0;
    if (!dpt__spin_until(tpart_ready, p, g->spin_s, g->oversubscribed, &t0))
        return wait_blocking(p, what, t0, extra_s);
    int code = atomic_load_explicit(&g->failed, memory_order_acquire);
    return code ? report_failed(p, code, what) : 0;
}

int dpt__tpart_barrier(dpt__tpart_t *p, const char *what)
{
    dpt__tpart_arrive(p);
    return dpt__tpart_wait(p, what);
}

int dpt__tpart_barrier_ext(dpt__tpart_t *p, const char *what, double extra_s)
{
    dpt__tpart_arrive(p);
    return dpt__tpart_wait_ext(p, what, extra_s);
}

int dpt__tpart_match(dpt__tpart_t *p)
{
    const dpt__tpub_t *first = dpt__tpart_peer(p, 0);
    for (int q = 1; q < p->g->size; q++) {
        const dpt__tpub_t *other = dpt__tpart_peer(p, q);
        if (!dpt__comm_fp_equal(&first->fp, &other->fp)) {
            char a[100], b[100];
            dpt__comm_fp_describe(&first->fp, a, sizeof a);
            dpt__comm_fp_describe(&other->fp, b, sizeof b);
            int off = p->g->rank_offset;
            return dpt__tpart_fail(p, DPT_ECOMM,
                                   "mismatched collective calls: rank %d called %s while rank %d "
                                   "called %s",
                                   off, a, q + off, b);
        }
    }
    return 0;
}

/* ---- the threads communicator ------------------------------------------- */

struct dpt_comm_threads_group {
    dpt__tgroup_t *tg;
};

typedef struct tcomm {
    struct dpt_comm base;
    dpt__tpart_t part;
    /* the pending iallreduce */
    float *pbuf;
    size_t pcount;
    dpt_reduce_op_t pop;
} tcomm_t;

static float *scratch_of(const dpt__tgroup_t *g, int rank, uint64_t epoch)
{
    return g->scratch + ((size_t)rank * 2 + (epoch & 1)) * g->small_floats;
}

static int is_small(const dpt__tgroup_t *g, size_t count)
{
    return count <= g->small_floats && g->scratch != NULL;
}

/* The algorithm an allreduce of `count` floats runs: the options' choice,
 * or the table's for auto; hier is native (every participant shares
 * memory). The same on every participant of a group. */
static dpt_comm_algorithm_t t_resolve(const dpt__tgroup_t *g, size_t count)
{
    dpt_comm_algorithm_t a = g->algorithm;
    if (a == DPT_ALLREDUCE_AUTO) {
        size_t bytes = count <= SIZE_MAX / sizeof(float) ? count * sizeof(float) : SIZE_MAX;
        a = dpt__comm_auto(DPT__LEVEL_THREADS, g->size, g->oversubscribed, bytes);
    }
    return a == DPT_ALLREDUCE_HIER ? DPT_ALLREDUCE_NATIVE : a;
}

static dpt_comm_algorithm_t t_algorithm(const dpt_comm_t *c, size_t count)
{
    return t_resolve(((const tcomm_t *)c)->part.g, count);
}

/* First half of an allreduce: publish and arrive, never blocks. The
 * algorithm is decided here (and published, so a participant configured
 * differently is a mismatch); ring and tree are in comm_threads_algo.c,
 * below is native.
 *
 * Small path (count <= small_bytes / 4), one barrier:
 *   copy own buf -> own private copy[e & 1]; arrive(e)
 *   wait(e); buf <- copy_0 + copy_1 + ... (own buf in place of own copy)
 * Large path, two barriers (a reduce-scatter whose results are pushed
 * straight into every buffer, i.e. the allgather is fused into it):
 *   arrive(e); wait(e)
 *   for i in block r: s = buf_0[i] + ... + buf_{P-1}[i]; buf_q[i] = s for all q
 *   arrive(e + 1); wait(e + 1)      (nobody returns while others write its buf)
 * Each element is read and written by exactly one participant; the traffic
 * per participant is count floats read and count written, like one memcpy.
 * Limits: the small path reads P * count floats per participant, but needs
 * one barrier instead of two. With a CPU per participant the large path is
 * faster at every size (0.38 vs 0.53 us at 4 KB, P = 2), so the automatic
 * threshold is 0; when participants outnumber CPUs every barrier costs
 * context switches and the small path wins up to ~8 KB. With count < P some
 * participants have empty blocks and only synchronize. */
static int allreduce_start(tcomm_t *t, float *buf, size_t count, dpt_reduce_op_t op, int call)
{
    dpt__tpart_t *p = &t->part;
    dpt__tgroup_t *g = p->g;
    const char *what = dpt__comm_call_name(call);
    int rc = dpt__tpart_check(p, what);
    if (rc < 0 || g->size == 1)
        return rc;
    dpt__tpub_t *pub = dpt__tpart_next_pub(p);
    pub->fp.call = call;
    pub->fp.op = (int)op;
    pub->fp.root = -1;
    pub->fp.count = count;
    pub->fp.algo = (int)t_resolve(g, count);
    pub->dst = buf;
    pub->src = buf;
    if (pub->fp.algo == DPT_ALLREDUCE_NATIVE && is_small(g, count)) {
        float *copy = scratch_of(g, p->rank, p->epoch + 1);
        if (count > 0)
            memcpy(copy, buf, count * sizeof(float));
        pub->src = copy;
    }
    dpt__tpart_arrive(p);
    return 0;
}

static int allreduce_finish(tcomm_t *t, float *buf, size_t count, dpt_reduce_op_t op, int call)
{
    dpt__tpart_t *p = &t->part;
    dpt__tgroup_t *g = p->g;
    const char *what = dpt__comm_call_name(call);
    int P = g->size, rc;
    if (P == 1)
        return 0;
    if ((rc = dpt__tpart_wait(p, what)) < 0 || (rc = dpt__tpart_match(p)) < 0)
        return rc;
    float div = op == DPT_REDUCE_AVG ? (float)P : 0.0f;
    /* Every participant published the same algorithm (matched above). */
    switch ((dpt_comm_algorithm_t)dpt__tpart_peer(p, p->rank)->fp.algo) {
    case DPT_ALLREDUCE_RING: return dpt__tring_allreduce(p, buf, count, div, what);
    case DPT_ALLREDUCE_TREE: return dpt__ttree_allreduce(p, buf, count, div, what);
    default: break;
    }
    if (is_small(g, count)) {
        for (int q = 0; q < P; q++)
            p->srcs[q] = q == p->rank ? buf : dpt__tpart_peer(p, q)->src;
        dpt__reduce_push(&buf, 1, p->srcs, P, count, div);
        return 0;
    }
    size_t off = dpt_comm_block_offset(count, P, p->rank);
    size_t len = dpt_comm_block_size(count, P, p->rank);
    for (int q = 0; q < P; q++) {
        float *b = dpt__tpart_peer(p, q)->dst + off;
        p->srcs[q] = b;
        p->dsts[q] = b;
    }
    dpt__reduce_push(p->dsts, P, p->srcs, P, len, div);
    return dpt__tpart_barrier(p, what);
}

static int t_allreduce(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op)
{
    tcomm_t *t = (tcomm_t *)c;
    int rc = allreduce_start(t, buf, count, op, DPT__CALL_ALLREDUCE);
    return rc < 0 ? rc : allreduce_finish(t, buf, count, op, DPT__CALL_ALLREDUCE);
}

static int t_iallreduce(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op)
{
    tcomm_t *t = (tcomm_t *)c;
    int rc = allreduce_start(t, buf, count, op, DPT__CALL_IALLREDUCE);
    if (rc < 0)
        return rc;
    t->pbuf = buf;
    t->pcount = count;
    t->pop = op;
    return 0;
}

static int t_wait(dpt_comm_t *c)
{
    tcomm_t *t = (tcomm_t *)c;
    return allreduce_finish(t, t->pbuf, t->pcount, t->pop, DPT__CALL_IALLREDUCE);
}

/* Publishes a fingerprint and the two pointers, and passes the first
 * barrier of an operation. */
static int begin(dpt__tpart_t *p, int call, int op, int root, size_t count, const float *src,
                 float *dst)
{
    const char *what = dpt__comm_call_name(call);
    int rc = dpt__tpart_check(p, what);
    if (rc < 0)
        return rc;
    dpt__tpub_t *pub = dpt__tpart_next_pub(p);
    pub->fp.call = call;
    pub->fp.op = op;
    pub->fp.root = root;
    pub->fp.count = count;
    pub->fp.algo = -1;
    pub->src = src;
    pub->dst = dst;
    if ((rc = dpt__tpart_barrier(p, what)) < 0)
        return rc;
    return dpt__tpart_match(p);
}

/* Broadcast: arrive(e); wait(e); non-roots copy the root's buffer;
 * arrive(e + 1); wait(e + 1). All non-roots read the root's buffer at once;
 * fine for shared memory (the data comes from the root's cache or DRAM). */
static int t_broadcast(dpt_comm_t *c, float *buf, size_t count, int root)
{
    tcomm_t *t = (tcomm_t *)c;
    dpt__tpart_t *p = &t->part;
    if (p->g->size == 1)
        return dpt__tpart_check(p, "broadcast");
    int rc = begin(p, DPT__CALL_BROADCAST, -1, root, count, buf, buf);
    if (rc < 0)
        return rc;
    if (p->rank != root && count > 0)
        memcpy(buf, dpt__tpart_peer(p, root)->src, count * sizeof(float));
    return dpt__tpart_barrier(p, "broadcast");
}

/* Allgather: arrive(e); wait(e); copy every other participant's send into
 * the own recv (own block too unless in place); arrive(e + 1); wait(e + 1). */
static int t_allgather(dpt_comm_t *c, const float *send, size_t count, float *recv)
{
    tcomm_t *t = (tcomm_t *)c;
    dpt__tpart_t *p = &t->part;
    int P = p->g->size, rc;
    if (P > 1 && (rc = begin(p, DPT__CALL_ALLGATHER, -1, -1, count, send, recv)) < 0)
        return rc;
    if (P == 1 && (rc = dpt__tpart_check(p, "allgather")) < 0)
        return rc;
    if (count == 0)
        return P > 1 ? dpt__tpart_barrier(p, "allgather") : 0;
    for (int q = 0; q < P; q++) {
        const float *src = q == p->rank ? send : dpt__tpart_peer(p, q)->src;
        float *dst = recv + (size_t)q * count;
        if (src != dst)
            memcpy(dst, src, count * sizeof(float));
    }
    return P > 1 ? dpt__tpart_barrier(p, "allgather") : 0;
}

/* Reduce-scatter: arrive(e); wait(e); recv <- block r of send_0 + ... +
 * send_{P-1} (rank order); arrive(e + 1); wait(e + 1). */
static int t_reduce_scatter(dpt_comm_t *c, const float *send, size_t count, float *recv,
                            dpt_reduce_op_t op)
{
    tcomm_t *t = (tcomm_t *)c;
    dpt__tpart_t *p = &t->part;
    int P = p->g->size, rc;
    if (P > 1 && (rc = begin(p, DPT__CALL_REDUCE_SCATTER, (int)op, -1, count, send, NULL)) < 0)
        return rc;
    if (P == 1 && (rc = dpt__tpart_check(p, "reduce_scatter")) < 0)
        return rc;
    size_t off = dpt_comm_block_offset(count, P, p->rank);
    size_t len = dpt_comm_block_size(count, P, p->rank);
    if (len > 0) {
        for (int q = 0; q < P; q++)
            p->srcs[q] = (q == p->rank ? send : dpt__tpart_peer(p, q)->src) + off;
        dpt__reduce_push(&recv, 1, p->srcs, P, len,
                         op == DPT_REDUCE_AVG && P > 1 ? (float)P : 0.0f);
    }
    return P > 1 ? dpt__tpart_barrier(p, "reduce_scatter") : 0;
}

static int t_barrier(dpt_comm_t *c)
{
    tcomm_t *t = (tcomm_t *)c;
    if (t->part.g->size == 1)
        return dpt__tpart_check(&t->part, "barrier");
    return begin(&t->part, DPT__CALL_BARRIER, -1, -1, 0, NULL, NULL);
}

static void t_destroy(dpt_comm_t *c)
{
    tcomm_t *t = (tcomm_t *)c;
    dpt__tpart_deinit(&t->part);
    free(t);
}

static int t_abort(dpt_comm_t *c, const char *why)
{
    return dpt__tpart_fail(&((tcomm_t *)c)->part, DPT_ECOMM, "%s", why);
}

dpt__tpart_t *dpt__tcomm_part(dpt_comm_t *c)
{
    return &((tcomm_t *)c)->part;
}

static const dpt__comm_ops_t threads_ops = {
    .backend = DPT_COMM_THREADS,
    .allreduce = t_allreduce,
    .iallreduce = t_iallreduce,
    .wait = t_wait,
    .broadcast = t_broadcast,
    .allgather = t_allgather,
    .reduce_scatter = t_reduce_scatter,
    .barrier = t_barrier,
    .algorithm = t_algorithm,
    .abort = t_abort,
    .send = dpt__tp2p_send,
    .recv = dpt__tp2p_recv,
    .probe = dpt__tp2p_probe,
    .destroy = t_destroy,
};

int dpt_comm_threads_group_create(dpt_comm_threads_group_t **group, int size,
                                  const dpt_comm_threads_options_t *opt)
{
    if (group == NULL)
        return dpt_error(DPT_EINVAL, "comm threads: group_create with a NULL output pointer");
    *group = NULL;
    dpt_comm_threads_group_t *gr = calloc(1, sizeof *gr);
    if (gr == NULL)
        return dpt_error(DPT_ENOMEM, "comm threads: out of memory");
    int rc = dpt__tgroup_create(&gr->tg, size, opt);
    if (rc < 0) {
        free(gr);
        return rc;
    }
    *group = gr;
    return 0;
}

int dpt_comm_threads_join(dpt_comm_threads_group_t *group, int rank, dpt_comm_t **comm)
{
    if (comm == NULL)
        return dpt_error(DPT_EINVAL, "comm threads: join with a NULL output pointer");
    *comm = NULL;
    if (group == NULL)
        return dpt_error(DPT_EINVAL, "comm threads: join on a NULL group");
    tcomm_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return dpt_error(DPT_ENOMEM, "comm threads: rank %d: out of memory", rank);
    int rc = dpt__tpart_init(&t->part, group->tg, rank);
    if (rc < 0) {
        free(t);
        return rc;
    }
    t->base.ops = &threads_ops;
    t->base.rank = rank;
    t->base.size = group->tg->size;
    *comm = &t->base;
    return 0;
}

void dpt_comm_threads_group_destroy(dpt_comm_threads_group_t *group)
{
    if (group == NULL)
        return;
    dpt__tgroup_destroy(group->tg);
    free(group);
}
