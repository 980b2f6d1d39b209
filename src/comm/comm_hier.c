/*
 * Collectives, hierarchical backend: T threads in each of R MPI processes.
 * Global rank = process * T + thread, size = R * T.
 *
 * Inside a process the threads synchronize with the threads backend's epoch
 * barriers (dpt__tpart_*); across processes thread 0 of each process (the
 * "leader") runs the collective on a private MPI communicator of the
 * processes (an mpi-backend dpt_comm_t). Only the leader calls MPI, so
 * MPI_THREAD_FUNNELED suffices when the leader is the thread that
 * initialized MPI, MPI_THREAD_SERIALIZED otherwise (group create and destroy
 * call MPI too and belong on that same thread).
 *
 * Allreduce (thread t of process p), four barriers B1..B4:
 *   publish buf; B1 (and fingerprints compared inside the process)
 *   thread t: block t of leader_buf <- buf_0 + ... + buf_{T-1} (thread order)
 *   B2; leader: MPI allreduce (SUM) of leader_buf over the R processes,
 *       with the algorithm of options.mpi (auto: the table's for R
 *       processes), then / (R * T) for AVG
 *   B3; threads t != 0: buf <- leader_buf; B4
 * Broadcast from global root (rp, rt): in process rp the leader copies the
 *   root thread's buffer; B; leaders MPI_Bcast from process rp; B; the others
 *   copy the leader's buffer; B.
 * Allgather: every thread copies its send into the leader's recv at its
 *   global block; B; leaders MPI allgather of T * count per process (in
 *   place); B; the others copy the leader's recv; B.
 * Reduce-scatter: threads reduce slices of the T sends into a group scratch
 *   vector; B; the leader allreduces it over MPI; B; every thread copies its
 *   global block; B. (Simple rather than optimal: it moves count floats
 *   across processes where a reduce-scatter would move count / R.)
 * Barrier: B; leaders MPI_Barrier; B.
 * iallreduce: the start publishes the buffer and arrives at B1 without
 * waiting; everything else, including the MPI step, runs in dpt_comm_wait
 * (no overlap with the transfer across processes yet).
 *
 * Timeouts and failures. A missing thread makes the others of its process
 * time out as in the threads backend (options.threads.timeout_s). The
 * leaders' MPI steps have the mpi backend's timeout (options.mpi.timeout_s,
 * see comm_mpi_wait.c), and the threads waiting for their leader behind an
 * MPI step wait that much longer (plus the grace period), so that the MPI
 * step, which knows more, reports first. A leader whose MPI call fails
 * marks the group failed, so the threads waiting for it return the error
 * instead of hanging; a leader whose operation fails for any other reason
 * (a thread of its process did not arrive) marks the MPI communicator
 * failed, which tells the other processes' leaders: their waits end at once
 * with that failure (naming the missing thread) instead of a timeout that
 * could only say "process 1 did not respond". Messages of the MPI step count
 * processes ("process 1"), those of the threads global ranks. With the debug
 * check (options.mpi.check) mismatches across processes are reported by the
 * leaders' MPI fingerprint exchange; inside a process they are always
 * detected at B1.
 *
 * Point-to-point messages (dpt_comm_send & co) are not supported
 * (DPT_ENOTSUP): only the leader calls MPI, so a thread could not reach a
 * thread of another process without the leader forwarding for it.
 */
#include "comm/comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/status.h"
#include "dpt_config.h"

struct dpt_comm_hier_group {
    dpt__tgroup_t *tg;
    dpt_comm_t *mpi; /* the processes; used by thread 0 only */
    int T, R, proc;
    float *scratch; /* reduce-scatter vector, grown by the leader */
    size_t scratch_cap;
    double mpi_wait_s; /* the longest an MPI step can take (see the top) */
};

typedef struct hcomm {
    struct dpt_comm base;
    dpt__tpart_t part;
    dpt_comm_hier_group_t *g;
    float *pbuf;
    size_t pcount;
    dpt_reduce_op_t pop;
} hcomm_t;

void dpt_comm_hier_options_init(dpt_comm_hier_options_t *opt)
{
    if (opt == NULL)
        return;
    dpt_comm_threads_options_init(&opt->threads);
    dpt_comm_mpi_options_init(&opt->mpi);
}

/* Publishes the call and arrives at B1 (never blocks). */
static int publish(hcomm_t *h, int call, int op, int root, size_t count, const float *src,
                   float *dst)
{
    dpt__tpart_t *p = &h->part;
    int rc = dpt__tpart_check(p, dpt__comm_call_name(call));
    if (rc < 0)
        return rc;
    dpt__tpub_t *pub = dpt__tpart_next_pub(p);
    pub->fp.call = call;
    pub->fp.op = op;
    pub->fp.root = root;
    pub->fp.count = count;
    pub->fp.algo = -1; /* the MPI step compares its own (with the debug check) */
    pub->src = src;
    pub->dst = dst;
    dpt__tpart_arrive(p);
    return 0;
}

/* Passes B1 and compares fingerprints in the process. */
static int pass_b1(hcomm_t *h, int call)
{
    int rc = dpt__tpart_wait(&h->part, dpt__comm_call_name(call));
    return rc < 0 ? rc : dpt__tpart_match(&h->part);
}

static int begin(hcomm_t *h, int call, int op, int root, size_t count, const float *src, float *dst)
{
    int rc = publish(h, call, op, root, count, src, dst);
    return rc < 0 ? rc : pass_b1(h, call);
}

/* The leader's MPI step: on failure the whole group fails so the other
 * threads are released from the next barrier with the error. */
static int leader_step(hcomm_t *h, int rc)
{
    if (rc < 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", dpt_last_error());
        return dpt__tpart_fail(&h->part, rc, "MPI step failed: %s", msg);
    }
    return 0;
}

/* Every operation returns through here: when it failed on the leader, the
 * MPI communicator is marked failed too, which tells the other processes
 * (a no-op when the MPI step itself failed: it is failed already). */
static int finish(hcomm_t *h, int rc)
{
    if (rc < 0 && h->part.rank == 0)
        dpt__comm_mpi_fail(h->g->mpi, rc, dpt_last_error());
    return rc;
}

/* The barrier after a leader's MPI step: the others wait for it as long as
 * the MPI step may take, on top of the threads' own timeout. */
static int after_mpi(hcomm_t *h, const char *what)
{
    return dpt__tpart_barrier_ext(&h->part, what, h->g->mpi_wait_s);
}

static void divide(float *buf, size_t n, float d)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = buf[i] / d;
}

/* The allreduce after publish(): B1 onwards. */
static int hier_allreduce(hcomm_t *h, float *buf, size_t count, dpt_reduce_op_t op, int call)
{
    dpt__tpart_t *p = &h->part;
    dpt_comm_hier_group_t *g = h->g;
    const char *what = dpt__comm_call_name(call);
    int T = g->T, t = p->rank, rc;
    if ((rc = pass_b1(h, call)) < 0)
        return rc;
    float *lead = dpt__tpart_peer(p, 0)->dst;
    size_t off = dpt_comm_block_offset(count, T, t), len = dpt_comm_block_size(count, T, t);
    if (len > 0) {
        for (int q = 0; q < T; q++)
            p->srcs[q] = dpt__tpart_peer(p, q)->dst + off;
        float *dst = lead + off;
        dpt__reduce_push(&dst, 1, p->srcs, T, len, 0.0f);
    }
    if ((rc = dpt__tpart_barrier(p, what)) < 0)
        return rc;
    if (t == 0) {
        rc = leader_step(h, dpt_comm_allreduce(g->mpi, buf, count, DPT_REDUCE_SUM));
        if (rc < 0)
            return rc;
        if (op == DPT_REDUCE_AVG && h->base.size > 1)
            divide(buf, count, (float)h->base.size);
    }
    if ((rc = after_mpi(h, what)) < 0)
        return rc;
    if (t != 0 && count > 0)
        memcpy(buf, lead, count * sizeof(float));
    return dpt__tpart_barrier(p, what);
}

static int h_allreduce(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op)
{
    hcomm_t *h = (hcomm_t *)c;
    int rc = publish(h, DPT__CALL_ALLREDUCE, (int)op, -1, count, buf, buf);
    return finish(h, rc < 0 ? rc : hier_allreduce(h, buf, count, op, DPT__CALL_ALLREDUCE));
}

/* The start publishes and arrives at B1; the rest (and all MPI) runs in the
 * wait, so the threads of a process overlap their arrival skew with work. */
static int h_iallreduce(dpt_comm_t *c, float *buf, size_t count, dpt_reduce_op_t op)
{
    hcomm_t *h = (hcomm_t *)c;
    int rc = publish(h, DPT__CALL_IALLREDUCE, (int)op, -1, count, buf, buf);
    if (rc < 0)
        return finish(h, rc);
    h->pbuf = buf;
    h->pcount = count;
    h->pop = op;
    return 0;
}

static int h_wait(dpt_comm_t *c)
{
    hcomm_t *h = (hcomm_t *)c;
    return finish(h, hier_allreduce(h, h->pbuf, h->pcount, h->pop, DPT__CALL_IALLREDUCE));
}

static int broadcast(hcomm_t *h, float *buf, size_t count, int root)
{
    dpt__tpart_t *p = &h->part;
    dpt_comm_hier_group_t *g = h->g;
    int t = p->rank, rp = root / g->T, rt = root % g->T, rc;
    if ((rc = begin(h, DPT__CALL_BROADCAST, -1, root, count, buf, buf)) < 0)
        return rc;
    if (g->proc == rp && t == 0 && rt != 0 && count > 0)
        memcpy(buf, dpt__tpart_peer(p, rt)->dst, count * sizeof(float));
    if ((rc = dpt__tpart_barrier(p, "broadcast")) < 0)
        return rc;
    if (t == 0 && (rc = leader_step(h, dpt_comm_broadcast(g->mpi, buf, count, rp))) < 0)
        return rc;
    if ((rc = after_mpi(h, "broadcast")) < 0)
        return rc;
    if (t != 0 && !(g->proc == rp && t == rt) && count > 0)
        memcpy(buf, dpt__tpart_peer(p, 0)->dst, count * sizeof(float));
    return dpt__tpart_barrier(p, "broadcast");
}

static int h_broadcast(dpt_comm_t *c, float *buf, size_t count, int root)
{
    hcomm_t *h = (hcomm_t *)c;
    return finish(h, broadcast(h, buf, count, root));
}

static int allgather(hcomm_t *h, const float *send, size_t count, float *recv)
{
    dpt__tpart_t *p = &h->part;
    dpt_comm_hier_group_t *g = h->g;
    int t = p->rank, rc;
    if ((rc = begin(h, DPT__CALL_ALLGATHER, -1, -1, count, send, recv)) < 0)
        return rc;
    float *lead = dpt__tpart_peer(p, 0)->dst;
    size_t per_proc = (size_t)g->T * count;
    if (count > 0) {
        float *dst = lead + (size_t)h->base.rank * count;
        if (dst != send)
            memcpy(dst, send, count * sizeof(float));
    }
    if ((rc = dpt__tpart_barrier(p, "allgather")) < 0)
        return rc;
    if (t == 0 && (rc = leader_step(h, dpt_comm_allgather(g->mpi, recv + (size_t)g->proc * per_proc,
                                                          per_proc, recv))) < 0)
        return rc;
    if ((rc = after_mpi(h, "allgather")) < 0)
        return rc;
    if (t != 0 && count > 0)
        memcpy(recv, lead, per_proc * (size_t)g->R * sizeof(float));
    return dpt__tpart_barrier(p, "allgather");
}

static int h_allgather(dpt_comm_t *c, const float *send, size_t count, float *recv)
{
    hcomm_t *h = (hcomm_t *)c;
    return finish(h, allgather(h, send, count, recv));
}

static int reduce_scatter(hcomm_t *h, const float *send, size_t count, float *recv,
                          dpt_reduce_op_t op)
{
    dpt__tpart_t *p = &h->part;
    dpt_comm_hier_group_t *g = h->g;
    int T = g->T, t = p->rank, rc;
    /* The leader grows the scratch before B1, so the others see it after;
     * never once the group failed: a failed MPI step may still write into
     * the old one. */
    if ((rc = dpt__tpart_check(p, "reduce_scatter")) < 0)
        return rc;
    if (t == 0 && count > g->scratch_cap) {
        float *s = aligned_alloc(64, (count * sizeof(float) + 63) / 64 * 64);
        if (s == NULL)
            return dpt__tpart_fail(
                p, DPT_ENOMEM, "reduce_scatter: out of memory for %zu floats of scratch", count);
        memset(s, 0, count * sizeof(float));
        free(g->scratch);
        g->scratch = s;
        g->scratch_cap = count;
    }
    if ((rc = begin(h, DPT__CALL_REDUCE_SCATTER, (int)op, -1, count, send, recv)) < 0)
        return rc;
    size_t off = dpt_comm_block_offset(count, T, t), len = dpt_comm_block_size(count, T, t);
    if (len > 0) {
        for (int q = 0; q < T; q++)
            p->srcs[q] = dpt__tpart_peer(p, q)->src + off;
        float *dst = g->scratch + off;
        dpt__reduce_push(&dst, 1, p->srcs, T, len, 0.0f);
    }
    if ((rc = dpt__tpart_barrier(p, "reduce_scatter")) < 0)
        return rc;
    if (t == 0 &&
        (rc = leader_step(h, dpt_comm_allreduce(g->mpi, g->scratch, count, DPT_REDUCE_SUM))) < 0)
        return rc;
    if ((rc = after_mpi(h, "reduce_scatter")) < 0)
        return rc;
    int P = h->base.size, r = h->base.rank;
    size_t goff = dpt_comm_block_offset(count, P, r), glen = dpt_comm_block_size(count, P, r);
    if (glen > 0) {
        const float *src = g->scratch + goff;
        dpt__reduce_push(&recv, 1, &src, 1, glen, op == DPT_REDUCE_AVG && P > 1 ? (float)P : 0.0f);
    }
    return dpt__tpart_barrier(p, "reduce_scatter");
}

static int h_reduce_scatter(dpt_comm_t *c, const float *send, size_t count, float *recv,
                            dpt_reduce_op_t op)
{
    hcomm_t *h = (hcomm_t *)c;
    return finish(h, reduce_scatter(h, send, count, recv, op));
}

static int h_barrier(dpt_comm_t *c)
{
    hcomm_t *h = (hcomm_t *)c;
    int rc;
    if ((rc = begin(h, DPT__CALL_BARRIER, -1, -1, 0, NULL, NULL)) < 0)
        return finish(h, rc);
    if (h->part.rank == 0 && (rc = leader_step(h, dpt_comm_barrier(h->g->mpi))) < 0)
        return finish(h, rc);
    return finish(h, after_mpi(h, "barrier"));
}

static dpt_comm_algorithm_t h_algorithm(const dpt_comm_t *c, size_t count)
{
    (void)c;
    (void)count;
    return DPT_ALLREDUCE_HIER;
}

static void h_destroy(dpt_comm_t *c)
{
    hcomm_t *h = (hcomm_t *)c;
    dpt__tpart_deinit(&h->part);
    free(h);
}

static int h_abort(dpt_comm_t *c, const char *why)
{
    return dpt__tpart_fail(&((hcomm_t *)c)->part, DPT_ECOMM, "%s", why);
}

static const dpt__comm_ops_t hier_ops = {
    .backend = DPT_COMM_HIER,
    .allreduce = h_allreduce,
    .iallreduce = h_iallreduce,
    .wait = h_wait,
    .broadcast = h_broadcast,
    .allgather = h_allgather,
    .reduce_scatter = h_reduce_scatter,
    .barrier = h_barrier,
    .algorithm = h_algorithm,
    .abort = h_abort,
    .p2p_unsupported = "only thread 0 of each process calls MPI, so a thread cannot reach a "
                       "thread of another process (use an mpi communicator of the processes, or "
                       "a threads communicator inside one)",
    .destroy = h_destroy,
};

int dpt_comm_hier_group_create(dpt_comm_hier_group_t **group, int threads_per_process,
                               const dpt_comm_hier_options_t *opt)
{
    if (group == NULL)
        return dpt_error(DPT_EINVAL, "comm hier: group_create with a NULL output pointer");
    *group = NULL;
    if (!DPT_HAVE_MPI)
        return dpt_error(DPT_ENOTSUP, "comm hier: this build has no MPI (install libopenmpi-dev "
                                      "and openmpi-bin, then reconfigure)");
    if (threads_per_process < 1)
        return dpt_error(DPT_EINVAL, "comm hier: %d threads per process, expected >= 1",
                         threads_per_process);
    dpt_comm_hier_options_t o;
    if (opt == NULL)
        dpt_comm_hier_options_init(&o);
    else
        o = *opt;
    if (o.threads.algorithm != DPT_ALLREDUCE_AUTO && o.threads.algorithm != DPT_ALLREDUCE_NATIVE)
        return dpt_error(DPT_EINVAL,
                         "comm hier: threads.algorithm %s: the threads of a process always "
                         "reduce directly into thread 0's buffer (use auto or native; "
                         "mpi.algorithm chooses the step across processes)",
                         dpt_comm_algorithm_name(o.threads.algorithm));
    dpt_comm_hier_group_t *g = calloc(1, sizeof *g);
    if (g == NULL)
        return dpt_error(DPT_ENOMEM, "comm hier: out of memory");
    g->T = threads_per_process;
    int rc = dpt_comm_mpi_create(&g->mpi, &o.mpi);
    if (rc < 0)
        goto fail;
    dpt__comm_mpi_set_unit(g->mpi, "process");
    g->mpi_wait_s = dpt__comm_mpi_wait_limit_s(g->mpi);
    g->R = dpt_comm_size(g->mpi);
    g->proc = dpt_comm_rank(g->mpi);
    /* Every process must have the same T: compare them (exact as floats).
     * all[R] is this process's value; if the exchange fails MPI may still
     * write into `all`, which is then leaked (see dpt__comm_mpi_stuck). */
    float *all = malloc(sizeof(float) * ((size_t)g->R + 1));
    if (all == NULL) {
        rc = dpt_error(DPT_ENOMEM, "comm hier: out of memory");
        goto fail;
    }
    float *mine = all + g->R;
    *mine = (float)g->T;
    rc = dpt_comm_allgather(g->mpi, mine, 1, all);
    for (int q = 0; q < g->R && rc == 0; q++)
        if (all[q] != *mine)
            rc = dpt_error(DPT_EINVAL,
                           "comm hier: process %d has %d threads per process, process %d has %d",
                           g->proc, g->T, q, (int)all[q]);
    if (!dpt__comm_mpi_stuck(g->mpi))
        free(all);
    if (rc < 0)
        goto fail;
    if ((rc = dpt__tgroup_create(&g->tg, g->T, &o.threads)) < 0)
        goto fail;
    dpt__tgroup_set_rank_offset(g->tg, g->proc * g->T);
    *group = g;
    return 0;
fail:
    dpt_comm_hier_group_destroy(g);
    return rc;
}

int dpt_comm_hier_join(dpt_comm_hier_group_t *group, int thread, dpt_comm_t **comm)
{
    if (comm == NULL)
        return dpt_error(DPT_EINVAL, "comm hier: join with a NULL output pointer");
    *comm = NULL;
    if (group == NULL)
        return dpt_error(DPT_EINVAL, "comm hier: join on a NULL group");
    hcomm_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return dpt_error(DPT_ENOMEM, "comm hier: thread %d: out of memory", thread);
    int rc = dpt__tpart_init(&h->part, group->tg, thread);
    if (rc < 0) {
        free(h);
        return rc;
    }
    h->g = group;
    h->base.ops = &hier_ops;
    h->base.rank = group->proc * group->T + thread;
    h->base.size = group->R * group->T;
    *comm = &h->base;
    return 0;
}

void dpt_comm_hier_group_destroy(dpt_comm_hier_group_t *group)
{
    if (group == NULL)
        return;
    dpt__tgroup_destroy(group->tg);
    /* A failed MPI step may still write into the scratch vector: keep it. */
    int stuck = group->mpi != NULL && dpt__comm_mpi_stuck(group->mpi);
    dpt_comm_destroy(group->mpi);
    if (!stuck)
        free(group->scratch);
    free(group);
}
