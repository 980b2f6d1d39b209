/*
 * dpt/rng.h — counter-based random streams (Philox4x32-10).
 *
 * There is no global generator. Every stream is named by the tuple
 * (seed, rank, index, purpose) — e.g. (run seed, MPI rank, tower or env
 * index, DPT_RNG_INIT) — and its values are a pure function of that tuple
 * and a position, so streams need no shared state, can be created anywhere
 * in any order, and can be saved and restored as one 64-bit position.
 *
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11) maps a 128-bit counter and a 64-bit key to 128 random bits.
 * dpt's key is a mix of (seed, purpose); the counter is (block, index,
 * rank), so two different tuples never share a (key, counter) pair.
 */
#ifndef DPT_RNG_H
#define DPT_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Well-known purposes; any other 32-bit value may be used as well. */
#define DPT_RNG_PURPOSE_LIST(X) \
    X(DPT_RNG_INIT, 1)          \
    X(DPT_RNG_SHUFFLE, 2)       \
    X(DPT_RNG_ENV, 3)           \
    X(DPT_RNG_ACTION, 4)        \
    X(DPT_RNG_DATA, 5)          \
    X(DPT_RNG_TEST, 6)          \
    X(DPT_RNG_DROPOUT, 7)

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
enum {
#define DPT__RNG_ENUM(sym, val) sym = (val),
    DPT_RNG_PURPOSE_LIST(DPT__RNG_ENUM)
#undef DPT__RNG_ENUM
};
/* clang-format on */

/* A stream. Plain data: copy it to fork a stream at its current position. */
typedef struct dpt_rng {
    uint32_t key[2];    /* from (seed, purpose) */
    uint32_t ctr_hi[2]; /* index, rank */
    uint64_t block;     /* next counter block to generate */
    uint32_t buf[4];    /* current block's output */
    unsigned pos;       /* next unused word of buf (4 = empty) */
} dpt_rng_t;

/* Initialises the stream (seed, rank, index, purpose) at position 0. */
void dpt_rng_init(dpt_rng_t *rng, uint64_t seed, uint32_t rank, uint32_t index, uint32_t purpose);

/* Position = number of 32-bit words drawn so far. Saving it and seeking back
 * to it on a stream with the same tuple reproduces the same continuation. */
uint64_t dpt_rng_tell(const dpt_rng_t *rng);
void dpt_rng_seek(dpt_rng_t *rng, uint64_t position);

/* The raw Philox4x32-10 block function: out = philox(counter, key). Exposed
 * for tests against published known-answer vectors. */
void dpt_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* 32 random bits. */
uint32_t dpt_rng_u32(dpt_rng_t *rng);
/* 64 random bits (two words). */
uint64_t dpt_rng_u64(dpt_rng_t *rng);
/* Uniform float in [0, 1): 24 random bits * 2^-24. */
float dpt_rng_uniform(dpt_rng_t *rng);
/* Uniform double in [0, 1): 53 random bits * 2^-53 (two words). */
double dpt_rng_uniform_double(dpt_rng_t *rng);
/* Uniform integer in [0, n), without modulo bias (Lemire's method with
 * rejection). n == 0 returns 0. */
uint32_t dpt_rng_below(dpt_rng_t *rng, uint32_t n);
/* Standard normal N(0, 1) by Box–Muller in double precision (four words;
 * the second value of the pair is discarded so the position stays simple). */
double dpt_rng_normal(dpt_rng_t *rng);
/* Fills x[0..n) with mean + std * N(0, 1), using both Box–Muller values. */
void dpt_rng_fill_normal(dpt_rng_t *rng, float *x, size_t n, float mean, float std);
/* Fills x[0..n) with uniform values in [lo, hi). */
void dpt_rng_fill_uniform(dpt_rng_t *rng, float *x, size_t n, float lo, float hi);
/* Samples an index from the categorical distribution with (unnormalised,
 * non-negative) weights w[0..n): index i with probability w[i] / sum(w).
 * Returns n - 1 when rounding leaves the draw past the last bucket, and 0
 * when all weights are 0 or n == 0. One word (double-precision sum). */
size_t dpt_rng_categorical(dpt_rng_t *rng, const float *w, size_t n);
/* Fisher–Yates shuffle of idx[0..n) (a permutation of size_t indices). */
void dpt_rng_shuffle(dpt_rng_t *rng, size_t *idx, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* DPT_RNG_H */
