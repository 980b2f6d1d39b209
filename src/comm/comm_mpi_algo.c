/*
 * MPI backend: dpt's own allreduce algorithms (ring, tree, hier) over
 * non-blocking point-to-point messages, and the node layout hier uses.
 *
 * Every message is an MPI_Isend/MPI_Irecv pair on the collectives'
 * communicator (point-to-point traffic never matches a collective's), in
 * pieces of at most 2^30 floats (MPI counts are int), and every wait is
 * dpt__mwait with the call's start as t0: one timeout covers the whole
 * allreduce, and a rank that is missing is reported, and told to the
 * others, exactly as for the collectives (comm_mpi_wait.c). A failed wait
 * leaves its messages pending (the handle is then stuck and never freed).
 * Messages between two ranks are matched in the order they were posted
 * (MPI's non-overtaking rule), so one tag per phase is enough.
 *
 * The algorithms run on a group: an ordered list of ranks g[0..k) and this
 * rank's index i in it. Blocks follow dpt_comm_block_offset/size over k.
 *
 * Ring (right = g[i+1], left = g[i-1], mod k):
 *   reduce-scatter, s = 0 .. k-2: send block i - s to right, receive block
 *                                 i - s - 1 from left into tmp;
 *                                 buf[i-s-1] <- tmp + buf[i-s-1]
 *   (g[i] now holds block i + 1 fully reduced)
 *   allgather,      s = 0 .. k-2: send block i + 1 - s to right, receive
 *                                 block i - s from left into buf
 *   An element of block b is added in the order x_b, x_{b+1}, ..., x_{b-1}.
 *   2 (k - 1) steps of one message each way, count / k floats each.
 * Tree (recursive doubling; p2 = largest power of two <= k, rem = k - p2):
 *   i >= p2:  send buf to g[i - p2]; at the end receive the result from it
 *   i < rem:  receive g[i + p2]'s buf into tmp; buf <- buf + tmp
 *   d = 1, 2, .. p2/2 (i < p2): exchange buf with g[i xor d] (received into
 *             tmp); buf <- lower index's + higher index's
 *   i < rem:  send buf to g[i + p2]
 *   Order for k = 4: (x_0 + x_1) + (x_2 + x_3); k = 3: (x_0 + x_2) + x_1.
 *   log2 p2 (+ 2) steps, each moving the whole buffer: for small buffers.
 * Hier (N nodes, L ranks on this node, j = this rank's index on it):
 *   every node has L ranks: ring reduce-scatter among the node's ranks
 *     (j holds block j + 1 of the node's sum); allreduce of that block
 *     among the N ranks with local index j, one per node (tree up to the
 *     table's size, ring above); ring allgather among the node's ranks.
 *     Only count / L floats per rank cross the network, in N - 1 (ring)
 *     or log2 N (tree) steps instead of P - 1.
 *   nodes of different sizes: the node's ranks send their buffers to the
 *     node's first rank (its leader), which adds them in rank order; the
 *     leaders allreduce (tree or ring as above); each leader sends the
 *     result to its ranks. Simple rather than optimal: the leader moves
 *     2 (L - 1) count floats.
 *   Order: the node's ranks first (ring order, or rank order for the
 *   leader form), then the nodes in the order of the step across them.
 *
 * Node layout (at create): ranks_per_node = k > 0 puts rank q on node
 * q / k; otherwise the ranks exchange their MPI_Get_processor_name (one
 * MPI_Iallgather, bounded by the create's timeout) and equal names share a
 * node. Nodes are numbered in the order of their first rank.
 */
#include "dpt_config.h"

#if !DPT_HAVE_MPI
/* Nothing to run without MPI (ISO C wants a declaration in a file). */
typedef int dpt__comm_mpi_algo_unused;
#else

#include "comm/comm_mpi_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/status.h"

#define CHUNK ((size_t)1 << 30) /* floats per message, below INT_MAX */

enum { TAG_RING_RS = 21, TAG_RING_AG = 22, TAG_TREE = 23, TAG_HIER_UP = 24, TAG_HIER_DOWN = 25 };

typedef dpt__mcomm_t mcomm_t;

/* ---- layout ----------------------------------------------------------------- */

int dpt__mpi_layout(mcomm_t *m, int ranks_per_node, double deadline)
{
    int P = m->base.size, rc = 0;
    int *node_of = calloc((size_t)P, sizeof *node_of);
    int *count = calloc((size_t)P, sizeof *count);
    if (node_of == NULL || count == NULL) {
        rc = dpt_error(DPT_ENOMEM, "comm mpi: rank %d: out of memory", m->base.rank);
        goto out;
    }
    if (ranks_per_node > 0) {
        for (int q = 0; q < P; q++)
            node_of[q] = q / ranks_per_node;
    } else {
        size_t len = MPI_MAX_PROCESSOR_NAME;
        char *names = calloc((size_t)P + 1, len);
        if (names == NULL) {
            rc = dpt_error(DPT_ENOMEM, "comm mpi: rank %d: out of memory", m->base.rank);
            goto out;
        }
        char *mine = names + (size_t)P * len;
        int n = 0, w = 0;
        MPI_Request r;
        int mrc = MPI_Get_processor_name(mine, &n);
        if (mrc == MPI_SUCCESS)
            mrc = MPI_Iallgather(mine, (int)len, MPI_CHAR, names, (int)len, MPI_CHAR, m->comm, &r);
        if (mrc == MPI_SUCCESS && (w = dpt__mwait_plain(1, &r, deadline, len * (size_t)P)) > 1)
            mrc = w;
        if (mrc == MPI_SUCCESS && w == 1) {
            /* names is leaked: MPI may still write into it */
            rc = dpt_error(DPT_ETIMEDOUT,
                           "comm mpi: create: exchanging the processor names timed out (a "
                           "process of the communicator is stopped or dead)");
            goto out;
        }
        if (mrc != MPI_SUCCESS) {
            char err[MPI_MAX_ERROR_STRING];
            dpt__mpi_message(mrc, err, sizeof err);
            free(names);
            rc = dpt_error(DPT_ECOMM, "comm mpi: create: exchanging the processor names failed: %s",
                           err);
            goto out;
        }
        int nodes = 0;
        for (int q = 0; q < P; q++) {
            node_of[q] = -1;
            for (int p = 0; p < q && node_of[q] < 0; p++)
                if (strncmp(names + (size_t)q * len, names + (size_t)p * len, len) == 0)
                    node_of[q] = node_of[p];
            if (node_of[q] < 0)
                node_of[q] = nodes++;
        }
        free(names);
    }
    int nodes = 0;
    for (int q = 0; q < P; q++) {
        count[node_of[q]]++;
        if (node_of[q] + 1 > nodes)
            nodes = node_of[q] + 1;
    }
    m->nodes = nodes;
    m->node = node_of[m->base.rank];
    m->uniform = 1;
    m->node_start[0] = 0;
    for (int g = 0; g < nodes; g++) {
        m->node_start[g + 1] = m->node_start[g] + count[g];
        if (count[g] != count[0])
            m->uniform = 0;
        count[g] = m->node_start[g]; /* from here: the next free place of node g */
    }
    for (int q = 0; q < P; q++)
        m->node_ranks[count[node_of[q]]++] = q;
out:
    free(node_of);
    free(count);
    return rc;
}

dpt_comm_algorithm_t dpt__mpi_resolve(const mcomm_t *m, size_t count)
{
    if (m->algorithm != DPT_ALLREDUCE_AUTO)
        return m->algorithm;
    size_t bytes = count <= SIZE_MAX / sizeof(float) ? count * sizeof(float) : SIZE_MAX;
    return dpt__comm_auto(DPT__LEVEL_MPI, m->base.size, m->nodes > 1 ? 2 : 1, bytes);
}

/* ---- messages ------------------------------------------------------------------ */

/* Sends ns floats of sbuf to rank `to` and receives nr floats into rbuf
 * from rank `from` (a rank < 0 or a count 0 leaves that side out), in
 * pieces of at most CHUNK floats, each waited for. */
static int xfer(mcomm_t *m, const float *sbuf, size_t ns, int to, float *rbuf, size_t nr, int from,
                int tag, double t0, const char *what)
{
    size_t sent = 0, got = 0;
    if (to < 0)
        ns = 0;
    if (from < 0)
        nr = 0;
    while (sent < ns || got < nr) {
        int k = 0, mrc = MPI_SUCCESS;
        size_t bytes = 0;
        if (got < nr) {
            size_t n = nr - got < CHUNK ? nr - got : CHUNK;
            mrc = MPI_Irecv(rbuf + got, (int)n, MPI_FLOAT, from, tag, m->comm, &m->preq[k]);
            if (mrc == MPI_SUCCESS) {
                k++;
                got += n;
                bytes += n * sizeof(float);
            }
        }
        if (mrc == MPI_SUCCESS && sent < ns) {
            size_t n = ns - sent < CHUNK ? ns - sent : CHUNK;
            mrc = MPI_Isend(sbuf + sent, (int)n, MPI_FLOAT, to, tag, m->comm, &m->preq[k]);
            if (mrc == MPI_SUCCESS) {
                k++;
                sent += n;
                bytes += n * sizeof(float);
            }
        }
        if (mrc != MPI_SUCCESS) {
            m->stuck = k > 0; /* a receive already posted stays pending */
            return dpt__mpi_fail(m, mrc, what);
        }
        int rc = dpt__mwait(m, k, m->preq, t0, bytes, what);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Sends n floats of buf to each of the k ranks to[0..k). */
static int send_all(mcomm_t *m, const float *buf, size_t n, const int *to, int k, int tag,
                    double t0, const char *what)
{
    for (size_t off = 0; off < n; off += CHUNK) {
        size_t len = n - off < CHUNK ? n - off : CHUNK;
        for (int q = 0; q < k; q++) {
            int mrc = MPI_Isend(buf + off, (int)len, MPI_FLOAT, to[q], tag, m->comm, &m->preq[q]);
            if (mrc != MPI_SUCCESS) {
                m->stuck = q > 0;
                return dpt__mpi_fail(m, mrc, what);
            }
        }
        int rc = dpt__mwait(m, k, m->preq, t0, len * sizeof(float) * (size_t)k, what);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The receive buffer holds at least n floats (grown on first use, touched
 * once; a stuck handle never gets here, its communicator being failed). */
static int tmp_reserve(mcomm_t *m, size_t n)
{
    if (n <= m->tmp_cap)
        return 0;
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    float *t = n <= SIZE_MAX / sizeof(float) ? aligned_alloc(64, bytes) : NULL;
    if (t == NULL) {
        char msg[128];
        snprintf(msg, sizeof msg, "allreduce: out of memory for %zu floats of receive buffer", n);
        return dpt__mfail(m, DPT_ENOMEM, 1, msg);
    }
    memset(t, 0, bytes);
    free(m->tmp);
    m->tmp = t;
    m->tmp_cap = n;
    return 0;
}

/* dst <- a + b over n floats (dst may be a or b). */
static void add2(float *dst, const float *a, const float *b, size_t n)
{
    const float *src[2] = {a, b};
    if (n > 0)
        dpt__reduce_push(&dst, 1, src, 2, n, 0.0f);
}

/* ---- the algorithms on a group --------------------------------------------------- */

static int ring_reduce_scatter(mcomm_t *m, const int *g, int k, int i, float *buf, size_t n,
                               double t0)
{
    const char *what = "MPI_Isend/MPI_Irecv (ring reduce-scatter)";
    int right = g[(i + 1) % k], left = g[(i + k - 1) % k], rc;
    if (k == 1)
        return 0;
    if ((rc = tmp_reserve(m, dpt_comm_block_size(n, k, 0))) < 0)
        return rc;
    for (int s = 0; s < k - 1; s++) {
        int sb = ((i - s) % k + k) % k, rb = ((i - s - 1) % k + k) % k;
        size_t soff = dpt_comm_block_offset(n, k, sb), roff = dpt_comm_block_offset(n, k, rb);
        size_t slen = dpt_comm_block_size(n, k, sb), rlen = dpt_comm_block_size(n, k, rb);
        if ((rc = xfer(m, buf + soff, slen, right, m->tmp, rlen, left, TAG_RING_RS, t0, what)) < 0)
            return rc;
        add2(buf + roff, m->tmp, buf + roff, rlen);
    }
    return 0;
}

static int ring_allgather(mcomm_t *m, const int *g, int k, int i, float *buf, size_t n, double t0)
{
    const char *what = "MPI_Isend/MPI_Irecv (ring allgather)";
    int right = g[(i + 1) % k], left = g[(i + k - 1) % k], rc;
    for (int s = 0; s < k - 1; s++) {
        int sb = ((i + 1 - s) % k + k) % k, rb = ((i - s) % k + k) % k;
        size_t soff = dpt_comm_block_offset(n, k, sb), roff = dpt_comm_block_offset(n, k, rb);
        size_t slen = dpt_comm_block_size(n, k, sb), rlen = dpt_comm_block_size(n, k, rb);
        if ((rc = xfer(m, buf + soff, slen, right, buf + roff, rlen, left, TAG_RING_AG, t0, what)) <
            0)
            return rc;
    }
    return 0;
}

static int ring(mcomm_t *m, const int *g, int k, int i, float *buf, size_t n, double t0)
{
    int rc = ring_reduce_scatter(m, g, k, i, buf, n, t0);
    return rc < 0 ? rc : ring_allgather(m, g, k, i, buf, n, t0);
}

static int tree(mcomm_t *m, const int *g, int k, int i, float *buf, size_t n, double t0)
{
    const char *what = "MPI_Isend/MPI_Irecv (tree allreduce)";
    int p2 = 1, rc;
    while (p2 <= k / 2)
        p2 *= 2;
    int rem = k - p2;
    if (k == 1)
        return 0;
    if (i >= p2) {
        if ((rc = xfer(m, buf, n, g[i - p2], NULL, 0, -1, TAG_TREE, t0, what)) < 0)
            return rc;
        return xfer(m, NULL, 0, -1, buf, n, g[i - p2], TAG_TREE, t0, what);
    }
    if ((rc = tmp_reserve(m, n)) < 0)
        return rc;
    if (i < rem) {
        if ((rc = xfer(m, NULL, 0, -1, m->tmp, n, g[i + p2], TAG_TREE, t0, what)) < 0)
            return rc;
        add2(buf, buf, m->tmp, n);
    }
    for (int d = 1; d < p2; d *= 2) {
        int j = i ^ d;
        if ((rc = xfer(m, buf, n, g[j], m->tmp, n, g[j], TAG_TREE, t0, what)) < 0)
            return rc;
        if (i < j)
            add2(buf, buf, m->tmp, n);
        else
            add2(buf, m->tmp, buf, n);
    }
    if (i < rem)
        return xfer(m, buf, n, g[i + p2], NULL, 0, -1, TAG_TREE, t0, what);
    return 0;
}

/* The step across nodes of hier: among m->group[0..k), tree or ring by the
 * table. */
static int across(mcomm_t *m, int k, int i, float *buf, size_t n, double t0)
{
    size_t bytes = n <= SIZE_MAX / sizeof(float) ? n * sizeof(float) : SIZE_MAX;
    if (dpt__comm_auto(DPT__LEVEL_GROUPS, k, -1, bytes) == DPT_ALLREDUCE_TREE)
        return tree(m, m->group, k, i, buf, n, t0);
    return ring(m, m->group, k, i, buf, n, t0);
}

static int hier(mcomm_t *m, float *buf, size_t n, double t0)
{
    int N = m->nodes, rc;
    const int *locals = m->node_ranks + m->node_start[m->node];
    int L = m->node_start[m->node + 1] - m->node_start[m->node], j = 0;
    while (locals[j] != m->base.rank)
        j++;
    if (m->uniform) {
        if ((rc = ring_reduce_scatter(m, locals, L, j, buf, n, t0)) < 0)
            return rc;
        if (N > 1) {
            int b = (j + 1) % L;
            size_t off = dpt_comm_block_offset(n, L, b), len = dpt_comm_block_size(n, L, b);
            for (int g = 0; g < N; g++)
                m->group[g] = m->node_ranks[m->node_start[g] + j];
            if ((rc = across(m, N, m->node, buf + off, len, t0)) < 0)
                return rc;
        }
        return ring_allgather(m, locals, L, j, buf, n, t0);
    }
    const char *what = "MPI_Isend/MPI_Irecv (hier allreduce)";
    if (j > 0) {
        if ((rc = xfer(m, buf, n, locals[0], NULL, 0, -1, TAG_HIER_UP, t0, what)) < 0)
            return rc;
        return xfer(m, NULL, 0, -1, buf, n, locals[0], TAG_HIER_DOWN, t0, what);
    }
    if ((rc = tmp_reserve(m, n)) < 0)
        return rc;
    for (int q = 1; q < L; q++) {
        if ((rc = xfer(m, NULL, 0, -1, m->tmp, n, locals[q], TAG_HIER_UP, t0, what)) < 0)
            return rc;
        add2(buf, buf, m->tmp, n);
    }
    if (N > 1) {
        for (int g = 0; g < N; g++)
            m->group[g] = m->node_ranks[m->node_start[g]];
        if ((rc = across(m, N, m->node, buf, n, t0)) < 0)
            return rc;
    }
    return send_all(m, buf, n, locals + 1, L - 1, TAG_HIER_DOWN, t0, what);
}

int dpt__mpi_allreduce_p2p(mcomm_t *m, float *buf, size_t count, dpt_comm_algorithm_t algo,
                           double t0)
{
    int P = m->base.size, r = m->base.rank;
    if (P == 1 || count == 0)
        return 0;
    switch (algo) {
    case DPT_ALLREDUCE_RING: return ring(m, m->all_ranks, P, r, buf, count, t0);
    case DPT_ALLREDUCE_TREE: return tree(m, m->all_ranks, P, r, buf, count, t0);
    case DPT_ALLREDUCE_HIER: return hier(m, buf, count, t0);
    default: break;
    }
    return dpt__mfail(m, DPT_ECOMM, 1, "allreduce: no point-to-point form of this algorithm");
}

#endif /* DPT_HAVE_MPI */
