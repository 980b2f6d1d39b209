/*
 * Collectives, threads backend: the ring and tree allreduce algorithms
 * (the native one is in comm_threads.c). Both run on the participants'
 * own buffers, published at the allreduce's first barrier, and synchronize
 * the whole group with the epoch barriers between steps: a participant
 * reads a buffer only in a step in which its owner does not write the
 * part read. No scratch memory.
 *
 * Ring (P participants, r = own rank, left = r - 1 mod P; blocks as
 * dpt_comm_block_offset/size split the vector into P):
 *   reduce-scatter, s = 0 .. P-2:  b = r - s - 1 (mod P)
 *                                  buf_r[b] <- buf_left[b] + buf_r[b]; barrier
 *   (participant r now holds block r + 1 fully reduced; AVG divides it in
 *    the last step)
 *   allgather, s = 0 .. P-2:       b = r - s (mod P)
 *                                  buf_r[b] <- buf_left[b]; barrier
 * In step s participant r writes block r - s - 1 (r - s) of its buffer while
 * its right neighbour reads block r - s (r - s + 1) of it: never the same.
 * Order of the additions for an element of block b: x_b, x_{b+1}, ...,
 * x_{b-1}. Limits: 2 (P - 1) barriers plus the first; each participant
 * reads and writes about 2 count floats in all, like native, but in
 * 2 (P - 1) synchronized pieces: on shared memory it does not beat native
 * (docs/SCALING.md); it exists to compare with, and as the MPI ring's twin.
 *
 * Tree (recursive doubling; p2 = largest power of two <= P, rem = P - p2):
 *   fold (if rem > 0):   r < rem pairs with r + p2; buf_r <- buf_r + buf_{r+p2},
 *                        the pair splitting the elements in halves; barrier
 *   d = 1, 2, .. p2/2:   r < p2 pairs with j = r xor d; both buffers <-
 *                        buf_min(r,j) + buf_max(r,j), the lower rank computing
 *                        the first half of the elements, the higher the
 *                        second; barrier (AVG divides in the last step)
 *   unfold (if rem > 0): r >= p2 copies buf_{r-p2}; barrier
 * Pairs of a step touch disjoint buffers; inside a pair the halves are
 * disjoint. Order for P = 4: (x_0 + x_1) + (x_2 + x_3); P = 3: (x_0 + x_2)
 * + x_1. Limits: log2 p2 (+ 2) barriers; each step reads and writes the
 * whole vector per pair, so the traffic grows with log2 P.
 */
#include "comm/comm_internal.h"

#include <string.h>

int dpt__tring_allreduce(dpt__tpart_t *p, float *buf, size_t count, float div, const char *what)
{
    int P = dpt__tgroup_size(p->g), r = p->rank, rc;
    if (P == 1)
        return 0;
    /* Valid until this participant arrives at the next barrier: read it now. */
    float *left = dpt__tpart_peer(p, (r + P - 1) % P)->dst;
    for (int s = 0; s < P - 1; s++) {
        int b = ((r - s - 1) % P + P) % P;
        size_t off = dpt_comm_block_offset(count, P, b);
        size_t len = dpt_comm_block_size(count, P, b);
        if (len > 0) {
            const float *src[2] = {left + off, buf + off};
            float *dst = buf + off;
            dpt__reduce_push(&dst, 1, src, 2, len, s == P - 2 ? div : 0.0f);
        }
        if ((rc = dpt__tpart_barrier(p, what)) < 0)
            return rc;
    }
    for (int s = 0; s < P - 1; s++) {
        int b = ((r - s) % P + P) % P;
        size_t off = dpt_comm_block_offset(count, P, b);
        size_t len = dpt_comm_block_size(count, P, b);
        if (len > 0)
            memcpy(buf + off, left + off, len * sizeof(float));
        if ((rc = dpt__tpart_barrier(p, what)) < 0)
            return rc;
    }
    return 0;
}

/* buf_lo <- buf_lo + buf_hi (and buf_hi too when both) over this
 * participant's half of [0, count): the lower rank of the pair takes the
 * first half. */
static void pair_step(float *lo, float *hi, size_t count, int first_half, int both, float div)
{
    size_t half = dpt_comm_block_size(count, 2, 0);
    size_t off = first_half ? 0 : half, len = first_half ? half : count - half;
    if (len == 0)
        return;
    const float *src[2] = {lo + off, hi + off};
    float *dst[2] = {lo + off, hi + off};
    dpt__reduce_push(dst, both ? 2 : 1, src, 2, len, div);
}

int dpt__ttree_allreduce(dpt__tpart_t *p, float *buf, size_t count, float div, const char *what)
{
    int P = dpt__tgroup_size(p->g), r = p->rank, rc;
    if (P == 1)
        return 0;
    int p2 = 1;
    while (p2 <= P / 2)
        p2 *= 2;
    int rem = P - p2;
    /* The peers' buffers, read before the next barrier (their pub entries
     * are overwritten two barriers later). */
    for (int q = 0; q < P; q++)
        p->dsts[q] = q == r ? buf : dpt__tpart_peer(p, q)->dst;
    float **bufs = p->dsts;
    if (rem > 0) {
        if (r < rem)
            pair_step(bufs[r], bufs[r + p2], count, 1, 0, 0.0f);
        else if (r >= p2)
            pair_step(bufs[r - p2], bufs[r], count, 0, 0, 0.0f);
        if ((rc = dpt__tpart_barrier(p, what)) < 0)
            return rc;
    }
    for (int d = 1; d < p2; d *= 2) {
        if (r < p2) {
            int j = r ^ d;
            int lo = r < j ? r : j, hi = r < j ? j : r;
            pair_step(bufs[lo], bufs[hi], count, r == lo, 1, 2 * d == p2 ? div : 0.0f);
        }
        if ((rc = dpt__tpart_barrier(p, what)) < 0)
            return rc;
    }
    if (rem > 0) {
        if (r >= p2 && count > 0)
            memcpy(buf, bufs[r - p2], count * sizeof(float));
        if ((rc = dpt__tpart_barrier(p, what)) < 0)
            return rc;
    }
    return 0;
}
