/*
 * The towers engine's count-invariant reduction (cfg.chunk_rows > 0; the
 * semantics are in dpt/towers.h, "Count-invariant reduction").
 *
 * A step's minibatch of B rows is K = B / C chunks of C rows, numbered
 * 0 .. K-1 over every device of every participant. The global devices
 * (participant p's device d is g = p N + d of G = P N) hold contiguous runs
 * of chunks, the first K % G devices one more than the others. The chunks'
 * gradients are added by one tree over the chunk indices, whatever the
 * split: the dyadic tree whose node (k, j) covers chunks
 * [j 2^k, min((j + 1) 2^k, K)) and is the sum left + right of its two
 * children (or its left child alone when the right one starts at K or
 * beyond). Each node therefore has one value, the same bits whoever
 * computes it.
 *
 *   1. Each device computes its chunks' gradients one after the other and
 *      adds them like a binary counter: two nodes of the same level, the
 *      lower a left child, become their parent. What is left is the
 *      device's canonical cover of its run: the largest nodes inside it.
 *   2. One participant: after a barrier, device d evaluates the root
 *      top-down over its block range of the arena: a node that some device
 *      holds is read, any other is left + right.
 *      Several participants: the same evaluation gives this participant's
 *      canonical cover of its run (a few nodes), which every participant
 *      gathers (dpt_comm_allgather, with a failure mark and the rows); then
 *      every participant evaluates the root from all of them.
 *   3. The scale (1/K, or 1/rows with weight_rows), the sum of squares per
 *      fixed block of DPT__INV_BLOCK floats added in block order (the norm
 *      does not depend on how the arena is sliced either), the clip and the
 *      update.
 */
#include "dpt/status.h"
#include "optim/optim_impl.h"
#include "reduction.h"
#include "towers_impl.h"

#include <inttypes.h>
#include <stdint.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Floats per block of the norm's sum of squares (a multiple of every
 * vector width, so that slices of whole blocks split no vector). */
#define DPT__INV_BLOCK 4096

/* The most nodes a binary counter over chunk indices (size_t) holds at
 * once: two per level and the leaf being added. */
#define DPT__INV_MAX_SPANS (2 * 64 + 2)

typedef struct dpt__inv_span {
    size_t lo, hi;
    int level;
    float *data;
} dpt__inv_span_t;

struct dpt__inv {
    size_t K;       /* chunks per minibatch */
    int levels;     /* the root's level: ceil(log2 K) */
    int P, p, G;    /* participants, this one, global devices */
    size_t *first;  /* [G + 1] each global device's first chunk */
    size_t stride;  /* floats per node buffer: nparams rounded up to a whole group */
    size_t pdb;     /* nominal rows per device per step: ceil(K / G) C */
    size_t nblocks; /* blocks of the norm */
    double *block_sq;
    dpt_arena_t sum;        /* the combined gradient */
    dpt_arena_t scratch;    /* (levels + 1) node buffers of the top-down evaluation */
    dpt_loss_out_t *out;    /* [K] each chunk's results (this participant's chunks) */
    int depth;              /* node buffers per device */
    dpt_arena_t *stack;     /* [N] each device's node buffers */
    dpt__inv_span_t *nodes; /* [N * depth] each device's nodes */
    int *nnodes;            /* [N] */
    /* several participants */
    int M;                   /* nodes per participant's message (the most any has) */
    size_t msg;              /* floats per message: M node buffers, the mark, the rows */
    float *send, *recv;      /* [msg], [P * msg] */
    dpt__inv_span_t *pspans; /* [P * M] every participant's cover, data in recv */
    int *npspans;            /* [P] */
};

static size_t dpt__inv_first(size_t K, size_t G, size_t g)
{
    size_t base = K / G, extra = K % G;
    return g * base + (g < extra ? g : extra);
}

/* Whether the binary counter's top two nodes (of st[0 .. n)) are siblings:
 * the same level, the lower a left child. They then become their parent. */
static int dpt__inv_mergeable(const dpt__inv_span_t *st, int n)
{
    return n >= 2 && st[n - 2].level == st[n - 1].level &&
           ((st[n - 2].lo >> st[n - 2].level) & 1u) == 0;
}

/* The binary counter of step 1 over chunks [a, b): the nodes it leaves in
 * spans (may be NULL), their count, and in *most the deepest it went. */
static int dpt__inv_cover(size_t a, size_t b, dpt__inv_span_t *spans, int cap, int *most)
{
    dpt__inv_span_t st[DPT__INV_MAX_SPANS];
    int n = 0, deepest = 0;
    for (size_t i = a; i < b; i++) {
        st[n++] = (dpt__inv_span_t){i, i + 1, 0, NULL};
        if (n > deepest)
            deepest = n;
        while (dpt__inv_mergeable(st, n)) {
            st[n - 2].hi = st[n - 1].hi;
            st[n - 2].level++;
            n--;
        }
    }
    for (int i = 0; spans && i < n && i < cap; i++)
        spans[i] = st[i];
    if (most)
        *most = deepest;
    return n;
}

void dpt__inv_destroy(dpt_towers_t *t)
{
    dpt__inv_t *v = t->inv;
    if (!v)
        return;
    free(v->first);
    free(v->block_sq);
    dpt_arena_deinit(&v->sum);
    dpt_arena_deinit(&v->scratch);
    free(v->out);
    if (v->stack)
        for (int d = 0; d < t->cfg.num_devices; d++)
            dpt_arena_deinit(&v->stack[d]);
    free(v->stack);
    free(v->nodes);
    free(v->nnodes);
    dpt_free_aligned(v->send);
    dpt_free_aligned(v->recv);
    free(v->pspans);
    free(v->npspans);
    free(v);
    t->inv = NULL;
}

int dpt__inv_check(const dpt_towers_config_t *c, const dpt_batch_t *layout)
{
    size_t C = c->chunk_rows, B = c->global_batch;
    int P = c->comm ? dpt_comm_size(c->comm) : 1;
    size_t G = (size_t)P * (size_t)c->num_devices;
    if (c->mode == DPT_TOWERS_ASYNC)
        return dpt_error(DPT_EINVAL, "towers: chunk_rows (the count-invariant reduction) needs "
                                     "mode ps or replicated: async towers apply their updates in "
                                     "no fixed order");
    if (c->reduce_sum)
        return dpt_error(DPT_EINVAL,
                         "towers: chunk_rows (the count-invariant reduction) averages over the "
                         "minibatch; reduce_sum (a sum over towers) depends on the device count");
    if (C > c->max_per_device_batch_size)
        return dpt_error(DPT_EINVAL,
                         "towers: chunk_rows %zu exceeds max_per_device_batch_size %zu (the rows "
                         "one call of the model takes)",
                         C, c->max_per_device_batch_size);
    if (layout->seq_len && C % layout->seq_len)
        return dpt_error(DPT_EINVAL,
                         "towers: chunk_rows %zu is not a whole number of sequences of %zu rows", C,
                         layout->seq_len);
    if (B == 0 || B % C)
        return dpt_error(DPT_EINVAL,
                         "towers: global_batch %zu is not a positive multiple of "
                         "chunk_rows %zu",
                         B, C);
    if (B / C < G)
        return dpt_error(DPT_EINVAL,
                         "towers: global_batch %zu holds %zu chunks of %zu rows, fewer than the "
                         "%zu devices (%d participants x %d): every device needs a chunk",
                         B, B / C, C, G, P, c->num_devices);
    return DPT_OK;
}

int dpt__inv_create(dpt_towers_t *t)
{
    const dpt_towers_config_t *c = &t->cfg;
    int N = c->num_devices;
    dpt__inv_t *v = calloc(1, sizeof *v);
    if (!v)
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate the invariant reduction");
    t->inv = v;
    v->P = c->comm ? dpt_comm_size(c->comm) : 1;
    v->p = c->comm ? dpt_comm_rank(c->comm) : 0;
    v->G = v->P * N;
    v->K = c->global_batch / c->chunk_rows;
    while (((size_t)1 << v->levels) < v->K)
        v->levels++;
    v->stride =
        (t->nparams + DPT_VAR_ALIGN_FLOATS - 1) / DPT_VAR_ALIGN_FLOATS * DPT_VAR_ALIGN_FLOATS;
    v->pdb = (v->K + (size_t)v->G - 1) / (size_t)v->G * c->chunk_rows;
    v->nblocks = (t->nparams + DPT__INV_BLOCK - 1) / DPT__INV_BLOCK;
    v->first = malloc(((size_t)v->G + 1) * sizeof *v->first);
    v->block_sq = calloc(v->nblocks, sizeof *v->block_sq);
    v->out = calloc(v->K, sizeof *v->out);
    v->stack = calloc((size_t)N, sizeof *v->stack);
    v->nnodes = calloc((size_t)N, sizeof *v->nnodes);
    if (!v->first || !v->block_sq || !v->out || !v->stack || !v->nnodes)
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate the invariant reduction");
    for (size_t g = 0; g <= (size_t)v->G; g++)
        v->first[g] = dpt__inv_first(v->K, (size_t)v->G, g);
    int rc;
    size_t g0 = (size_t)v->p * (size_t)N;
    for (int d = 0; d < N; d++) {
        int most;
        dpt__inv_cover(v->first[g0 + d], v->first[g0 + d + 1], NULL, 0, &most);
        if (most > v->depth)
            v->depth = most;
    }
    v->nodes = calloc((size_t)N * (size_t)v->depth, sizeof *v->nodes);
    if (!v->nodes)
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate the invariant reduction");
    size_t nodes, scratch;
    if (dpt_mul_size((size_t)v->depth, v->stride, &nodes) ||
        dpt_mul_size((size_t)v->levels + 1, v->stride, &scratch))
        return dpt_error(DPT_EOVERFLOW, "towers: %d node buffers of %zu floats overflow", v->depth,
                         v->stride);
    for (int d = 0; d < N; d++)
        if ((rc = dpt_arena_init(&v->stack[d], nodes)) != 0)
            return rc;
    if ((rc = dpt_arena_init(&v->sum, v->stride)) != 0 ||
        (rc = dpt_arena_init(&v->scratch, scratch)) != 0)
        return rc;
    if (v->P == 1)
        return DPT_OK;
    v->pspans = calloc((size_t)v->P * DPT__INV_MAX_SPANS, sizeof *v->pspans);
    v->npspans = calloc((size_t)v->P, sizeof *v->npspans);
    if (!v->pspans || !v->npspans)
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate the invariant reduction");
    for (int q = 0; q < v->P; q++) {
        size_t a = v->first[(size_t)q * (size_t)N], b = v->first[(size_t)(q + 1) * (size_t)N];
        v->npspans[q] = dpt__inv_cover(a, b, v->pspans + (size_t)q * DPT__INV_MAX_SPANS,
                                       DPT__INV_MAX_SPANS, NULL);
        if (v->npspans[q] > v->M)
            v->M = v->npspans[q];
    }
    size_t msg, all, bytes;
    if (dpt_mul_size((size_t)v->M, v->stride, &msg) || msg > SIZE_MAX - 2 ||
        dpt_mul_size(msg + 2, (size_t)v->P, &all) || dpt_mul_size(all, sizeof(float), &bytes))
        return dpt_error(DPT_EOVERFLOW,
                         "towers: %d nodes of %zu floats from %d participants "
                         "overflow",
                         v->M, v->stride, v->P);
    v->msg = msg + 2;
    if (!(v->send = dpt_alloc_aligned(v->msg * sizeof(float))) ||
        !(v->recv = dpt_alloc_aligned(bytes)))
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate the invariant reduction's messages");
    /* (slots a participant's cover leaves unused travel as zeros) */
    memset(v->send, 0, v->msg * sizeof(float));
    /* Participant q's nodes, packed by position (the same layout as the
     * spans array): recv holds them after the gather. */
    dpt__inv_span_t *packed = v->pspans;
    for (int q = 0; q < v->P; q++)
        for (int i = 0; i < v->npspans[q]; i++) {
            dpt__inv_span_t s = v->pspans[(size_t)q * DPT__INV_MAX_SPANS + (size_t)i];
            s.data = v->recv + (size_t)q * v->msg + (size_t)i * v->stride;
            packed[(size_t)q * (size_t)v->M + (size_t)i] = s;
        }
    return DPT_OK;
}

size_t dpt__inv_cap_rows(const dpt_towers_t *t)
{
    const dpt__inv_t *v = t->inv;
    size_t steps = t->cfg.max_load_rows / dpt__inv_share_rows(t);
    return (steps ? steps : 1) * v->pdb;
}

size_t dpt__inv_share_rows(const dpt_towers_t *t)
{
    const dpt__inv_t *v = t->inv;
    size_t N = (size_t)t->cfg.num_devices, p = (size_t)v->p;
    return (v->first[(p + 1) * N] - v->first[p * N]) * t->cfg.chunk_rows;
}

int dpt_towers_share(const dpt_towers_t *t, size_t *row0, size_t *rows)
{
    if (!t->inv)
        return dpt_error(DPT_EINVAL, "towers: the share of a minibatch needs chunk_rows > 0 (the "
                                     "count-invariant reduction)");
    size_t N = (size_t)t->cfg.num_devices, p = (size_t)t->inv->p;
    *row0 = t->inv->first[p * N] * t->cfg.chunk_rows;
    *rows = dpt__inv_share_rows(t);
    return DPT_OK;
}

int dpt__inv_plan(const dpt_towers_t *t, const dpt_batch_t *b, size_t fixed_pdb,
                  dpt_towers_load_info_t *li)
{
    const dpt__inv_t *v = t->inv;
    size_t share = dpt__inv_share_rows(t);
    if (fixed_pdb)
        return dpt_error(DPT_EINVAL,
                         "towers load: per_device_batch %zu given; with chunk_rows "
                         "the minibatch is global_batch",
                         fixed_pdb);
    if (b->seq_len && b->rows % b->seq_len)
        return dpt_error(DPT_EINVAL, "towers load: %zu rows are not whole sequences of %zu",
                         b->rows, b->seq_len);
    if (b->rows < share)
        return dpt_error(DPT_EINVAL,
                         "towers load: %zu rows are fewer than this participant's %zu rows of one "
                         "minibatch of %zu (chunks of %zu rows)",
                         b->rows, share, t->cfg.global_batch, t->cfg.chunk_rows);
    memset(li, 0, sizeof *li);
    li->steps = b->rows / share;
    li->rows_loaded = li->steps * share;
    li->rows_dropped = b->rows - li->rows_loaded;
    li->per_device_batch = v->pdb;
    li->rows_per_device = li->steps * v->pdb;
    li->minibatch = t->cfg.global_batch;
    return DPT_OK;
}

void dpt__inv_copy(const dpt_towers_t *t, const dpt__tower_t *w, int stack, const dpt_batch_t *src,
                   size_t rows_per_device)
{
    const dpt__inv_t *v = t->inv;
    size_t steps = rows_per_device / v->pdb;
    size_t N = (size_t)t->cfg.num_devices, g = (size_t)v->p * N + (size_t)w->index;
    size_t C = t->cfg.chunk_rows, share = dpt__inv_share_rows(t);
    size_t n = (v->first[g + 1] - v->first[g]) * C;
    size_t off = (v->first[g] - v->first[(size_t)v->p * N]) * C;
    size_t L = t->layout.seq_len ? t->layout.seq_len : 1;
    for (size_t c = 0; c < t->layout.ncols; c++) {
        const dpt_column_t *want = &t->layout.cols[c];
        const dpt_column_t *have = dpt_batch_find(src, want->name);
        size_t rb = dpt__col_row_bytes(want), unit = want->per_sequence ? L : 1;
        char *dst = w->stack_data[(size_t)stack * t->layout.ncols + c];
        for (size_t m = 0; m < steps; m++)
            memcpy(dst + m * n / unit * rb,
                   (const char *)have->data + (m * share + off) / unit * rb, n / unit * rb);
    }
}

/* The node covering exactly chunks [lo, hi) among `groups` lists of nodes
 * (list i: spans + i * cap, counts[i] of them), or NULL. */
static const float *dpt__inv_find(const dpt__inv_span_t *spans, const int *counts, int groups,
                                  size_t cap, size_t lo, size_t hi)
{
    for (int i = 0; i < groups; i++)
        for (int k = 0; k < counts[i]; k++) {
            const dpt__inv_span_t *s = &spans[(size_t)i * cap + (size_t)k];
            if (s->lo == lo && s->hi == hi)
                return s->data;
        }
    return NULL;
}

typedef struct dpt__inv_known {
    const dpt__inv_span_t *spans;
    const int *counts;
    int groups;
    size_t cap;
} dpt__inv_known_t;

/* out[i] = a[i] + b[i] for i in [lo, hi): the same bits as adding b to a. */
static void dpt__inv_add(float *out, const float *a, const float *b, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        out[i] = a[i] + b[i];
}

/* Node (level, j) of the tree over [lo, hi) of the arena, from the known
 * nodes: a known node's own buffer, or `out` holding its left child plus its
 * right child (its left child alone when the right one starts at K). The
 * right child is evaluated into the scratch buffer of `level`, which
 * nothing below that level uses. */
static const float *dpt__inv_eval(const dpt__inv_t *v, const dpt__inv_known_t *kn, int level,
                                  size_t j, float *out, size_t lo, size_t hi)
{
    size_t s = j << level, e = (j + 1) << level;
    if (e > v->K)
        e = v->K;
    const float *known = dpt__inv_find(kn->spans, kn->counts, kn->groups, kn->cap, s, e);
    if (known || level == 0)
        return known; /* (every chunk belongs to some device: a leaf is known) */
    const float *l = dpt__inv_eval(v, kn, level - 1, 2 * j, out, lo, hi);
    if (((2 * j + 1) << (level - 1)) >= v->K)
        return l;
    float *tmp = v->scratch.data + (size_t)level * v->stride;
    const float *r = dpt__inv_eval(v, kn, level - 1, 2 * j + 1, tmp, lo, hi);
    dpt__inv_add(out, l, r, lo, hi);
    return out;
}

/* The root over block b of the arena, times scale, into the sum, with the
 * block's sum of squares: the root's last addition and the scale in one
 * pass ((l + r) * scale, the same bits as the two). */
static void dpt__inv_root_block(dpt__inv_t *v, const dpt__inv_known_t *kn, size_t b, size_t count,
                                float scale, const dpt_optim_t *marks)
{
    size_t s = b * DPT__INV_BLOCK, e = s + DPT__INV_BLOCK < count ? s + DPT__INV_BLOCK : count;
    float *g = v->sum.data;
    const float *l = dpt__inv_find(kn->spans, kn->counts, kn->groups, kn->cap, 0, v->K), *r = NULL;
    if (!l) {
        l = dpt__inv_eval(v, kn, v->levels - 1, 0, g, s, e);
        r = dpt__inv_eval(v, kn, v->levels - 1, 1, v->scratch.data + (size_t)v->levels * v->stride,
                          s, e);
    }
    v->block_sq[b] = dpt_optim_sumsq_less_running(
        marks, dpt__add_scale_sumsq(g + s, l + s, r ? r + s : NULL, e - s, scale), g, s, e);
}

/* Step 1 for device w: its chunks of minibatch `m`, added as a binary
 * counter into its node buffers. */
static int dpt__inv_chunks(dpt_towers_t *t, dpt__tower_t *w, const float *params, size_t m)
{
    dpt__inv_t *v = t->inv;
    size_t N = (size_t)t->cfg.num_devices, g = (size_t)v->p * N + (size_t)w->index;
    size_t a = v->first[g], b = v->first[g + 1], C = t->cfg.chunk_rows;
    dpt__inv_span_t *st = v->nodes + (size_t)w->index * (size_t)v->depth;
    int n = 0;
    v->nnodes[w->index] = 0;
    for (size_t i = a; i < b; i++) {
        float *leaf = v->stack[w->index].data + (size_t)n * v->stride;
        dpt_batch_t view;
        dpt__towers_view(t, w, t->job_stack, (m * (b - a) + (i - a)) * C, C, &view);
        if (!(t->model.flags & DPT_MODEL_STORES_GRADS))
            dpt_vec_zero(leaf, t->nparams);
        dpt_loss_out_t *out = &v->out[i];
        memset(out, 0, sizeof *out);
        int rc = t->model.loss_grad(w->ctx, params, leaf, &view, out);
        if (rc)
            return rc;
        dpt_optim_zero_no_grad(dpt_towers_optimizer(t), leaf, 0, t->nparams);
        if (!isfinite(out->loss))
            return dpt_error(DPT_ENUMERIC,
                             "loss is %g on chunk %zu (rows [%zu, %zu) of the "
                             "minibatch) at offset %zu of stack %d; step refused",
                             out->loss, i, i * C, (i + 1) * C, t->job_offset, t->job_stack);
        if (out->rows == 0)
            out->rows = C;
        if (t->cfg.weight_rows)
            dpt_vec_scale(leaf, t->nparams, (float)out->rows);
        st[n++] = (dpt__inv_span_t){i, i + 1, 0, leaf};
        while (dpt__inv_mergeable(st, n)) {
            dpt_vec_axpy(st[n - 2].data, st[n - 1].data, t->nparams, 1.0f);
            st[n - 2].hi = st[n - 1].hi;
            st[n - 2].level++;
            n--;
        }
    }
    v->nnodes[w->index] = n;
    return DPT_OK;
}

/* The rows this participant's chunks used (weight_rows). */
static double dpt__inv_rows(const dpt_towers_t *t)
{
    const dpt__inv_t *v = t->inv;
    size_t N = (size_t)t->cfg.num_devices, p = (size_t)v->p;
    double rows = 0.0;
    for (size_t i = v->first[p * N]; i < v->first[(p + 1) * N]; i++)
        rows += (double)v->out[i].rows;
    return rows;
}

/* Device d's share of the arena: whole blocks. */
static void dpt__inv_range(const dpt_towers_t *t, int d, size_t *b0, size_t *b1)
{
    size_t nb = t->inv->nblocks, n = (size_t)t->cfg.num_devices;
    *b0 = nb * (size_t)d / n;
    *b1 = nb * ((size_t)d + 1) / n;
}

/* Steps 2 with several participants: this one's cover into the message,
 * the gather, and the checks of every participant's mark. Returns 1 when
 * the step ends here with *rc. */
static int dpt__inv_gather(dpt_towers_t *t, dpt__tower_t *w, int failed, size_t lo, size_t hi,
                           const char *msg, int *rc)
{
    dpt__inv_t *v = t->inv;
    int d = w->index, N = t->cfg.num_devices;
    dpt__inv_known_t dev = {v->nodes, v->nnodes, N, (size_t)v->depth};
    const dpt__inv_span_t *mine = v->pspans + (size_t)v->p * (size_t)v->M;
    for (int i = 0; !failed && i < v->npspans[v->p]; i++) {
        float *slot = v->send + (size_t)i * v->stride;
        const float *node =
            dpt__inv_eval(v, &dev, mine[i].level, mine[i].lo >> mine[i].level, slot, lo, hi);
        if (node != slot)
            memcpy(slot + lo, node + lo, (hi - lo) * sizeof *slot);
    }
    dpt__barrier_wait(&t->barrier);
    if (d == 0) {
        v->send[v->msg - 2] = failed ? NAN : 0.0f;
        v->send[v->msg - 1] = (float)dpt__inv_rows(t);
        t->job_comm_rc = dpt_comm_allgather(t->cfg.comm, v->send, v->msg, v->recv);
    }
    dpt__barrier_wait(&t->barrier);
    *rc = DPT_OK;
    if (w->rc) {
        *rc = dpt_error(w->rc, "%s", msg);
        return 1;
    }
    if (failed)
        return 1; /* the device that failed reports why */
    if (t->job_comm_rc) {
        *rc = d == 0 ? t->job_comm_rc : DPT_OK;
        return 1;
    }
    for (int q = 0; q < v->P; q++)
        if (!isfinite(v->recv[(size_t)q * v->msg + v->msg - 2])) {
            if (d == 0)
                *rc = dpt_error(DPT_ECOMM,
                                "participant %d's step at offset %zu of stack %d failed (that "
                                "participant reports why); step refused",
                                q, t->job_offset, t->job_stack);
            return 1;
        }
    return 0;
}

int dpt__inv_job_step(dpt_towers_t *t, dpt__tower_t *w)
{
    dpt__inv_t *v = t->inv;
    int d = w->index, N = t->cfg.num_devices;
    const float *params = w->params ? w->params : t->params.data;
    char msg[512] = "";
    w->norm = 0.0;
    w->rc = dpt__inv_chunks(t, w, params, t->job_offset / v->pdb);
    if (w->rc) {
        snprintf(msg, sizeof msg, "%s", dpt_last_error());
        atomic_store(&t->job_failed, 1);
    }
    dpt__barrier_wait(&t->barrier);
    int failed = atomic_load(&t->job_failed), rc;
    size_t b0, b1;
    dpt__inv_range(t, d, &b0, &b1);
    size_t lo = b0 * DPT__INV_BLOCK, hi = b1 * DPT__INV_BLOCK;
    if (hi > t->nparams)
        hi = t->nparams;
    if (lo > hi)
        lo = hi;
    double rows;
    dpt__inv_known_t kn = {v->nodes, v->nnodes, N, (size_t)v->depth};
    if (v->P == 1) {
        if (failed)
            return w->rc ? dpt_error(w->rc, "%s", msg) : DPT_OK;
        rows = dpt__inv_rows(t);
    } else {
        if (dpt__inv_gather(t, w, failed, lo, hi, msg, &rc))
            return rc;
        kn = (dpt__inv_known_t){v->pspans, v->npspans, v->P, (size_t)v->M};
        rows = 0.0;
        for (int q = 0; q < v->P; q++)
            rows += (double)v->recv[(size_t)q * v->msg + v->msg - 1];
    }
    float scale = t->cfg.weight_rows ? (float)(1.0 / rows) : 1.0f / (float)v->K;
    dpt_optim_t *marks = dpt_towers_optimizer(t); /* every optimizer has the same marks */
    float *g = v->sum.data;
    for (size_t b = b0; b < b1; b++)
        dpt__inv_root_block(v, &kn, b, t->nparams, scale, marks);
    dpt__barrier_wait(&t->barrier);
    double sq = 0.0;
    for (size_t b = 0; b < v->nblocks; b++)
        sq += v->block_sq[b];
    if (dpt__norm_refused(w, sq, &rc))
        return rc;
    float f = dpt_clip_factor(w->norm, t->cfg.grad_clip);
    if (!t->mirrored && t->cfg.mode == DPT_TOWERS_PS) {
        /* ps, one shared copy: each device updates its own blocks. */
        dpt__optim_update_scaled(t->opt, t->params.data, t->params.data, g, lo, hi, t->job_t,
                                 t->job_lr, f);
        return DPT_OK;
    }
    /* Every device with its own copy (replicated, mirrored ps) applies the
     * whole update: the sum is complete after the barrier above. */
    float *p = w->params ? w->params : t->params.data;
    dpt_optim_t *opt = w->own_opt ? w->own_opt : t->opt;
    dpt__optim_update_scaled(opt, p, p, g, 0, t->nparams, t->job_t, t->job_lr, f);
    return DPT_OK;
}

void dpt__inv_stats(const dpt_towers_t *t, dpt_towers_stats_t *stats)
{
    const dpt__inv_t *v = t->inv;
    size_t N = (size_t)t->cfg.num_devices, p = (size_t)v->p;
    double loss = 0.0, correct = 0.0, extra[DPT_LOSS_EXTRA] = {0};
    size_t rows = 0;
    for (size_t i = v->first[p * N]; i < v->first[(p + 1) * N]; i++) {
        const dpt_loss_out_t *o = &v->out[i];
        loss += o->loss * (double)o->rows;
        for (int e = 0; e < DPT_LOSS_EXTRA; e++)
            extra[e] += o->extra[e] * (double)o->rows;
        correct += o->correct;
        rows += o->rows;
    }
    stats->loss = rows ? loss / (double)rows : 0.0;
    for (int e = 0; e < DPT_LOSS_EXTRA; e++)
        stats->extra[e] = rows ? extra[e] / (double)rows : 0.0;
    stats->correct = correct;
    stats->rows = rows;
    stats->grad_norm = t->towers[0].norm;
}

/* ---- the order in checkpoints ------------------------------------------------ */

int dpt__reduction_save(dpt_safetensors_writer_t *w, size_t chunk)
{
    return dpt_safetensors_set_meta_u64(w, "reduction_chunk", chunk);
}

int dpt__reduction_check(const dpt_safetensors_t *st, size_t chunk)
{
    uint64_t was = 0; /* (absent from checkpoints made before the key: fast) */
    int rc;
    if (dpt_safetensors_meta(st, "reduction_chunk") &&
        (rc = dpt_safetensors_meta_u64(st, "reduction_chunk", &was)) != 0)
        return rc;
    if (was == chunk)
        return DPT_OK;
    char a[64], b[64];
    if (was)
        snprintf(a, sizeof a, "invariant order, chunks of %" PRIu64 " rows", was);
    else
        snprintf(a, sizeof a, "fast order");
    if (chunk)
        snprintf(b, sizeof b, "invariant order, chunks of %zu rows", chunk);
    else
        snprintf(b, sizeof b, "fast order");
    return dpt_error(DPT_EINVAL, "checkpoint %s was trained in the %s; this run is in the %s",
                     dpt_safetensors_path(st), a, b);
}
