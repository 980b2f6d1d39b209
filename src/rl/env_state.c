/*
 * The runner's saved state (dpt_vecenv_save_state and its checks and load;
 * dpt/env.h).
 */
#include "env_internal.h"
#include "vecenv_impl.h"
#include "rollout.h"
#include "dpt/arena.h"
#include "dpt/checkpoint.h"
#include "dpt/status.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- saved state ---------------------------------------------------------
 * Native byte order (a byte-order mark refuses a foreign one), fixed header:
 *
 *   off  size  field
 *     0     8  magic "dptvenv\0"
 *     8     4  version (1)
 *    12     4  byte-order mark 0x01020304
 *    16    64  class name, NUL-padded
 *    80     8  n
 *    88     8  state_size
 *    96     4  obs_dim
 *   100     4  rank
 *   104     8  seed
 *   112     4  started (0/1)
 *   116     4  digest of the parameter values (0 for a class without any)
 *   120     8  FNV-1a 64 of the payload
 *   128        payload: rng positions u64 [n], episode lengths t u32 [n],
 *              returns f64 [n], states [n x state_size] (packed),
 *              total_steps u64, total_episodes u64
 *
 * The episode ring is not saved: pop it before saving; a load empties it. */

#define DPT__OFF_MAGIC 0
#define DPT__OFF_VERSION 8
#define DPT__OFF_BOM 12
#define DPT__OFF_NAME 16
#define DPT__OFF_N 80
#define DPT__OFF_STATE_SIZE 88
#define DPT__OFF_OBS_DIM 96
#define DPT__OFF_RANK 100
#define DPT__OFF_SEED 104
#define DPT__OFF_STARTED 112
#define DPT__OFF_VALUES 116
#define DPT__OFF_SUM 120

static void dpt__env_put_bytes(unsigned char *buf, size_t off, const void *x, size_t size)
{
    memcpy(buf + off, x, size);
}

static void dpt__env_get_bytes(const unsigned char *buf, size_t off, void *x, size_t size)
{
    memcpy(x, buf + off, size);
}

size_t dpt_vecenv_state_bytes(const dpt_vecenv_t *v)
{
    return v->state_bytes;
}

int dpt_vecenv_save_state(const dpt_vecenv_t *v, void *buf, size_t bytes)
{
    if (!v || !buf)
        return dpt_error(DPT_EINVAL, "dpt_vecenv_save_state: runner or buffer is NULL");
    const dpt_env_class_t *cls = v->cls;
    size_t need = dpt_vecenv_state_bytes(v);
    if (bytes != need)
        return dpt_error(DPT_EINVAL, "env \"%s\": saving the runner state needs %zu bytes, got %zu",
                         cls->name, need, bytes);
    unsigned char *b = buf;
    memset(b, 0, DPT__STATE_HEADER);
    uint32_t version = DPT__STATE_VERSION, bom = DPT__STATE_BOM;
    uint32_t obs_dim = (uint32_t)cls->obs_dim, started = (uint32_t)v->started;
    uint64_t n = v->n, ssz = cls->state_size;
    dpt__env_put_bytes(b, DPT__OFF_MAGIC, DPT__STATE_MAGIC, 8);
    dpt__env_put_bytes(b, DPT__OFF_VERSION, &version, 4);
    dpt__env_put_bytes(b, DPT__OFF_BOM, &bom, 4);
    memcpy(b + DPT__OFF_NAME, cls->name, strlen(cls->name)); /* < 64 by the class check */
    dpt__env_put_bytes(b, DPT__OFF_N, &n, 8);
    dpt__env_put_bytes(b, DPT__OFF_STATE_SIZE, &ssz, 8);
    dpt__env_put_bytes(b, DPT__OFF_OBS_DIM, &obs_dim, 4);
    dpt__env_put_bytes(b, DPT__OFF_RANK, &v->rank, 4);
    dpt__env_put_bytes(b, DPT__OFF_SEED, &v->seed, 8);
    dpt__env_put_bytes(b, DPT__OFF_STARTED, &started, 4);
    dpt__env_put_bytes(b, DPT__OFF_VALUES, &v->values_digest, 4);
    size_t off = DPT__STATE_HEADER;
    for (size_t i = 0; i < v->n; i++, off += 8) {
        uint64_t pos = dpt_rng_tell(&v->rngs[i]);
        dpt__env_put_bytes(b, off, &pos, 8);
    }
    dpt__env_put_bytes(b, off, v->t, v->n * 4);
    off += v->n * 4;
    dpt__env_put_bytes(b, off, v->ret, v->n * 8);
    off += v->n * 8;
    for (size_t i = 0; i < v->n; i++, off += cls->state_size)
        dpt__env_put_bytes(b, off, v->states + i * v->stride, cls->state_size);
    dpt__env_put_bytes(b, off, &v->total_steps, 8);
    dpt__env_put_bytes(b, off + 8, &v->total_episodes, 8);
    uint64_t sum = dpt_fnv1a64(DPT_FNV1A64_INIT, b + DPT__STATE_HEADER, need - DPT__STATE_HEADER);
    dpt__env_put_bytes(b, DPT__OFF_SUM, &sum, 8);
    return DPT_OK;
}

/* Every check of dpt_vecenv_load_state, changing nothing, so a caller that
 * restores several parts can validate them all before it changes any. */
int dpt__vecenv_check_state(const dpt_vecenv_t *v, const void *buf, size_t bytes)
{
    if (!v || !buf)
        return dpt_error(DPT_EINVAL, "dpt_vecenv_load_state: runner or buffer is NULL");
    const dpt_env_class_t *cls = v->cls;
    const unsigned char *b = buf;
    if (bytes < DPT__STATE_HEADER || memcmp(b + DPT__OFF_MAGIC, DPT__STATE_MAGIC, 8) != 0)
        return dpt_error(DPT_EFORMAT,
                         "env \"%s\": the buffer (%zu bytes) is not a saved runner "
                         "state",
                         cls->name, bytes);
    uint32_t version, bom, obs_dim, started, values_digest;
    uint64_t n, ssz, sum;
    dpt__env_get_bytes(b, DPT__OFF_VERSION, &version, 4);
    dpt__env_get_bytes(b, DPT__OFF_BOM, &bom, 4);
    if (version != DPT__STATE_VERSION || bom != DPT__STATE_BOM)
        return dpt_error(DPT_EFORMAT,
                         "env \"%s\": saved runner state has version %u and "
                         "byte-order mark 0x%08x, expected %u and 0x%08x",
                         cls->name, version, bom, DPT__STATE_VERSION, DPT__STATE_BOM);
    char name[DPT__ENV_NAME_CAP];
    memcpy(name, b + DPT__OFF_NAME, sizeof name);
    if (name[sizeof name - 1] != '\0')
        return dpt_error(DPT_EFORMAT,
                         "env \"%s\": saved runner state has an unterminated class "
                         "name",
                         cls->name);
    if (strcmp(name, cls->name) != 0)
        return dpt_error(DPT_EINVAL,
                         "saved runner state is for env \"%s\", this runner runs "
                         "\"%s\"",
                         name, cls->name);
    dpt__env_get_bytes(b, DPT__OFF_N, &n, 8);
    dpt__env_get_bytes(b, DPT__OFF_STATE_SIZE, &ssz, 8);
    dpt__env_get_bytes(b, DPT__OFF_OBS_DIM, &obs_dim, 4);
    if (n != v->n || ssz != cls->state_size || obs_dim != cls->obs_dim)
        return dpt_error(DPT_EINVAL,
                         "env \"%s\": saved runner state has %" PRIu64 " envs, "
                         "state_size %" PRIu64 ", obs_dim %u; this runner has %zu, %zu, %zu",
                         cls->name, n, ssz, obs_dim, v->n, cls->state_size, cls->obs_dim);
    dpt__env_get_bytes(b, DPT__OFF_VALUES, &values_digest, 4);
    if (values_digest != v->values_digest)
        return dpt_error(DPT_EINVAL,
                         "env \"%s\": saved runner state has other parameter values "
                         "(digest 0x%08x, this runner 0x%08x)",
                         cls->name, values_digest, v->values_digest);
    size_t need = dpt_vecenv_state_bytes(v);
    if (bytes != need)
        return dpt_error(DPT_EFORMAT,
                         "env \"%s\": saved runner state is %zu bytes, expected %zu "
                         "(truncated or padded)",
                         cls->name, bytes, need);
    dpt__env_get_bytes(b, DPT__OFF_SUM, &sum, 8);
    if (sum != dpt_fnv1a64(DPT_FNV1A64_INIT, b + DPT__STATE_HEADER, need - DPT__STATE_HEADER))
        return dpt_error(DPT_EFORMAT,
                         "env \"%s\": saved runner state fails its checksum "
                         "(corrupted)",
                         cls->name);
    dpt__env_get_bytes(b, DPT__OFF_STARTED, &started, 4);
    if (started > 1)
        return dpt_error(DPT_EFORMAT, "env \"%s\": saved runner state has started = %u", cls->name,
                         started);
    const size_t o_t = DPT__STATE_HEADER + v->n * 8;
    for (size_t i = 0; i < v->n; i++) {
        uint32_t t;
        dpt__env_get_bytes(b, o_t + i * 4, &t, 4);
        if (cls->max_episode_steps && t >= cls->max_episode_steps)
            return dpt_error(DPT_EFORMAT,
                             "env \"%s\" #%zu: saved episode length %u is not below "
                             "the time limit %u",
                             cls->name, i, t, cls->max_episode_steps);
    }
    return DPT_OK;
}

int dpt_vecenv_load_state(dpt_vecenv_t *v, const void *buf, size_t bytes)
{
    int rc = dpt__vecenv_check_state(v, buf, bytes);
    if (rc)
        return rc;
    /* Everything is checked: from here on the load cannot fail. */
    const dpt_env_class_t *cls = v->cls;
    const unsigned char *b = buf;
    uint32_t rank, started;
    uint64_t seed;
    dpt__env_get_bytes(b, DPT__OFF_RANK, &rank, 4);
    dpt__env_get_bytes(b, DPT__OFF_SEED, &seed, 8);
    dpt__env_get_bytes(b, DPT__OFF_STARTED, &started, 4);
    const size_t o_t = DPT__STATE_HEADER + v->n * 8;
    const size_t o_ret = o_t + v->n * 4;
    const size_t o_states = o_ret + v->n * 8;
    v->seed = seed;
    v->rank = rank;
    v->started = (int)started;
    for (size_t i = 0; i < v->n; i++) {
        uint64_t pos;
        dpt__env_get_bytes(b, DPT__STATE_HEADER + i * 8, &pos, 8);
        dpt_rng_init(&v->rngs[i], seed, rank, v->first + (uint32_t)i, DPT_RNG_ENV);
        dpt_rng_seek(&v->rngs[i], pos);
        dpt__env_get_bytes(b, o_states + i * cls->state_size, v->states + i * v->stride,
                           cls->state_size);
    }
    dpt__env_get_bytes(b, o_t, v->t, v->n * 4);
    dpt__env_get_bytes(b, o_ret, v->ret, v->n * 8);
    size_t o_tot = o_states + v->n * cls->state_size;
    dpt__env_get_bytes(b, o_tot, &v->total_steps, 8);
    dpt__env_get_bytes(b, o_tot + 8, &v->total_episodes, 8);
    v->ep_head = v->ep_count = v->ep_dropped = 0;
    if (v->ext) {
        /* The caller's envs are not in the state: their episodes start anew. */
        memset(v->t, 0, v->n * sizeof *v->t);
        memset(v->ret, 0, v->n * sizeof *v->ret);
        v->ext_fresh = 1;
    }
    return DPT_OK;
}

/* The bytes of a saved state of n envs of state_size bytes each. */
static size_t dpt__vecenv_bytes_for(size_t n, size_t state_size)
{
    return DPT__STATE_HEADER + n * (DPT__STATE_PER_ENV + state_size) + DPT__STATE_TAIL;
}

int dpt__vecenv_state_pick(const dpt_vecenv_t *v, const void *const *src, size_t nsrc, size_t per,
                           size_t first, void *out, size_t out_bytes)
{
    const dpt_env_class_t *cls = v->cls;
    size_t n = v->n, ssz = cls->state_size, sb = dpt__vecenv_bytes_for(per, ssz);
    if (out_bytes != dpt_vecenv_state_bytes(v) || per == 0 || first + n > nsrc * per)
        return dpt_error(DPT_EINVAL, "env \"%s\": envs [%zu, %zu) of %zu saved runners of %zu",
                         cls->name, first, first + n, nsrc, per);
    for (size_t q = 0; q < nsrc; q++) {
        const unsigned char *b = src[q];
        uint64_t sn, sum;
        dpt__env_get_bytes(b, DPT__OFF_N, &sn, 8);
        dpt__env_get_bytes(b, DPT__OFF_SUM, &sum, 8);
        if (memcmp(b + DPT__OFF_MAGIC, DPT__STATE_MAGIC, 8) != 0 || sn != per ||
            sum != dpt_fnv1a64(DPT_FNV1A64_INIT, b + DPT__STATE_HEADER, sb - DPT__STATE_HEADER))
            return dpt_error(DPT_EFORMAT,
                             "env \"%s\": saved runner %zu is not a valid state of %zu envs",
                             cls->name, q, per);
    }
    /* The header of the runner that held env `first`; each env's rng
     * position, episode length, return and state from its own. */
    const unsigned char *h = src[first / per];
    unsigned char *o = out;
    memcpy(o, h, DPT__STATE_HEADER);
    uint64_t n64 = n;
    dpt__env_put_bytes(o, DPT__OFF_N, &n64, 8);
    size_t o_t = DPT__STATE_HEADER + n * 8, o_ret = o_t + n * 4, o_st = o_ret + n * 8;
    size_t s_t = DPT__STATE_HEADER + per * 8, s_ret = s_t + per * 4, s_st = s_ret + per * 8;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = src[(first + i) / per];
        size_t k = (first + i) % per;
        memcpy(o + DPT__STATE_HEADER + i * 8, b + DPT__STATE_HEADER + k * 8, 8);
        memcpy(o + o_t + i * 4, b + s_t + k * 4, 4);
        memcpy(o + o_ret + i * 8, b + s_ret + k * 8, 8);
        memcpy(o + o_st + i * ssz, b + s_st + k * ssz, ssz);
    }
    /* The runners' totals (steps, episodes) add up over the workers: the
     * first (first = 0) takes the sources' sum, the others none. */
    uint64_t tot[2] = {0, 0};
    for (size_t q = 0; first == 0 && q < nsrc; q++) {
        uint64_t t2[2];
        memcpy(t2, (const unsigned char *)src[q] + s_st + per * ssz, sizeof t2);
        tot[0] += t2[0];
        tot[1] += t2[1];
    }
    memcpy(o + o_st + n * ssz, tot, sizeof tot);
    uint64_t sum =
        dpt_fnv1a64(DPT_FNV1A64_INIT, o + DPT__STATE_HEADER, out_bytes - DPT__STATE_HEADER);
    dpt__env_put_bytes(o, DPT__OFF_SUM, &sum, 8);
    return DPT_OK;
}
