/*
 * tests/dpt_test_allreduce.h — what the allreduce algorithm tests expect
 * (test_comm_algorithms.c for threads, mpi_allreduce.c for MPI): the
 * naive oracle's sum and the sums in the order each algorithm documents
 * (dpt/comm.h), computed here from every participant's input, plus the
 * error bound any order stays within. Everything is static inline.
 *
 * Inputs are given as x[r] = participant r's vector.
 */
#ifndef DPT_TEST_ALLREDUCE_H
#define DPT_TEST_ALLREDUCE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "dpt/comm.h"

/* The naive oracle: gather, add in rank order ((x_0 + x_1) + x_2) + ... */
static inline float sum_rank_order(const float *const *x, int P, size_t i)
{
    float s = x[0][i];
    for (int r = 1; r < P; r++)
        s = s + x[r][i];
    return s;
}

/* Ring: an element of block b is added as x_b, x_{b+1}, ..., x_{b-1}. */
static inline float sum_ring_order(const float *const *x, int P, size_t n, size_t i)
{
    int b = 0;
    while (b + 1 < P && dpt_comm_block_offset(n, P, b + 1) <= i)
        b++;
    float s = x[b][i];
    for (int t = 1; t < P; t++)
        s = s + x[(b + t) % P][i];
    return s;
}

/* Tree (recursive doubling): ranks past the largest power of two p2 fold
 * into r - p2 (x_r + x_{r+p2}), then pairs at distance 1, 2, ... add the
 * lower index's value first. v has room for P floats. */
static inline float sum_tree_order(const float *const *x, int P, size_t i, float *v)
{
    int p2 = 1;
    while (p2 <= P / 2)
        p2 *= 2;
    for (int r = 0; r < p2; r++)
        v[r] = r + p2 < P ? x[r][i] + x[r + p2][i] : x[r][i];
    for (int d = 1; d < p2; d *= 2)
        for (int r = 0; r < p2; r += 2 * d)
            for (int k = r; k < r + d; k++) {
                float s = v[k] + v[k + d];
                v[k] = s;
                v[k + d] = s;
            }
    return v[0];
}

/* The bound every order of P additions keeps to: |a - b| for two orders is
 * at most 2 (P - 1) u sum_r |x_r| with u = 2^-24 (each order within
 * (P - 1) u sum |x_r| of the exact sum, to first order). */
static inline double sum_order_bound(const float *const *x, int P, size_t i)
{
    double a = 0.0;
    for (int r = 0; r < P; r++)
        a += fabs((double)x[r][i]);
    return 2.0 * (P - 1) * ldexp(1.0, -24) * a * 1.0001;
}

/* Non-integer data in [-500, 500), different for every rank and salt. */
static inline void random_fill(float *v, size_t n, int r, int salt)
{
    uint64_t s = 0x9e3779b97f4a7c15ull + (uint64_t)r * 7u + (uint64_t)salt * 1000003u;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 1000.0f;
    }
}

#endif /* DPT_TEST_ALLREDUCE_H */
