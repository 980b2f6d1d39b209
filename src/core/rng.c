/* Philox4x32-10 streams. See dpt/rng.h for how tuples map to keys/counters. */
#include "dpt/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void dpt__mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void dpt_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        dpt__mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        dpt__mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n1 = lo1;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        uint32_t n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* splitmix64 finaliser: spreads (seed, purpose) over the key bits so nearby
 * seeds do not give nearby keys. */
static uint64_t dpt__mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void dpt_rng_init(dpt_rng_t *rng, uint64_t seed, uint32_t rank, uint32_t index, uint32_t purpose)
{
    uint64_t k = dpt__mix64(dpt__mix64(seed) ^ ((uint64_t)purpose * 0xD6E8FEB86659FD93ull));
    rng->key[0] = (uint32_t)k;
    rng->key[1] = (uint32_t)(k >> 32);
    rng->ctr_hi[0] = index;
    rng->ctr_hi[1] = rank;
    rng->block = 0;
    rng->pos = 4;
}

static void dpt__rng_refill(dpt_rng_t *rng)
{
    uint32_t ctr[4] = {(uint32_t)rng->block, (uint32_t)(rng->block >> 32), rng->ctr_hi[0],
                       rng->ctr_hi[1]};
    dpt_philox4x32_10(ctr, rng->key, rng->buf);
    rng->block++;
    rng->pos = 0;
}

uint64_t dpt_rng_tell(const dpt_rng_t *rng)
{
    /* `block` counts generated blocks; pos words of the last one are used. */
    if (rng->pos == 4)
        return rng->block * 4;
    return (rng->block - 1) * 4 + rng->pos;
}

void dpt_rng_seek(dpt_rng_t *rng, uint64_t position)
{
    rng->block = position / 4;
    rng->pos = 4;
    unsigned within = (unsigned)(position % 4);
    if (within) {
        dpt__rng_refill(rng);
        rng->pos = within;
    }
}

uint32_t dpt_rng_u32(dpt_rng_t *rng)
{
    if (rng->pos == 4)
        dpt__rng_refill(rng);
    return rng->buf[rng->pos++];
}

uint64_t dpt_rng_u64(dpt_rng_t *rng)
{
    uint64_t lo = dpt_rng_u32(rng);
    uint64_t hi = dpt_rng_u32(rng);
    return lo | (hi << 32);
}

float dpt_rng_uniform(dpt_rng_t *rng)
{
    return (float)(dpt_rng_u32(rng) >> 8) * (1.0f / 16777216.0f);
}

double dpt_rng_uniform_double(dpt_rng_t *rng)
{
    return (double)(dpt_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

uint32_t dpt_rng_below(dpt_rng_t *rng, uint32_t n)
{
    if (n == 0)
        return 0;
    /* Lemire: the high word of x*n is uniform in [0, n) once the low word is
     * outside the biased zone [0, 2^32 mod n). */
    uint64_t m = (uint64_t)dpt_rng_u32(rng) * n;
    uint32_t lo = (uint32_t)m;
    if (lo < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (lo < threshold) {
            m = (uint64_t)dpt_rng_u32(rng) * n;
            lo = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

static void dpt__box_muller(dpt_rng_t *rng, double *z0, double *z1)
{
    /* u1 in (0, 1] so that log(u1) is finite. */
    double u1 = 1.0 - dpt_rng_uniform_double(rng);
    double u2 = dpt_rng_uniform_double(rng);
    double r = sqrt(-2.0 * log(u1));
    double t = 6.283185307179586476925286766559 * u2;
    *z0 = r * cos(t);
    *z1 = r * sin(t);
}

double dpt_rng_normal(dpt_rng_t *rng)
{
    double z0, z1;
    dpt__box_muller(rng, &z0, &z1);
    return z0;
}

void dpt_rng_fill_normal(dpt_rng_t *rng, float *x, size_t n, float mean, float std)
{
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        double z0, z1;
        dpt__box_muller(rng, &z0, &z1);
        x[i] = (float)((double)mean + (double)std * z0);
        x[i + 1] = (float)((double)mean + (double)std * z1);
    }
    if (i < n)
        x[i] = (float)((double)mean + (double)std * dpt_rng_normal(rng));
}

void dpt_rng_fill_uniform(dpt_rng_t *rng, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * dpt_rng_uniform(rng);
}

size_t dpt_rng_categorical(dpt_rng_t *rng, const float *w, size_t n)
{
    double total = 0.0;
    for (size_t i = 0; i < n; i++)
        total += (double)w[i];
    double u = (double)dpt_rng_u32(rng) * (1.0 / 4294967296.0);
    if (n == 0 || !(total > 0.0))
        return 0;
    double target = u * total, acc = 0.0;
    for (size_t i = 0; i < n; i++) {
        acc += (double)w[i];
        if (target < acc)
            return i;
    }
    return n - 1;
}

void dpt_rng_shuffle(dpt_rng_t *rng, size_t *idx, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j;
        if (i - 1 <= UINT32_MAX)
            j = dpt_rng_below(rng, (uint32_t)i);
        else
            j = (size_t)(dpt_rng_u64(rng) % i);
        size_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}
