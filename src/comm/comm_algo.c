/*
 * Collectives: the table `auto` chooses allreduce algorithms from.
 *
 * A call is described by the level it runs at (the threads of a process,
 * the ranks of an MPI communicator, or hier's step across node groups), the
 * participants P at that level, the layout (threads: more participants than
 * CPUs or not; MPI: one node or several) and the message size; the first
 * row that matches decides. Where each crossover comes from (the figures
 * are in docs/SCALING.md):
 *
 *   threads      native at every P and size: one pass over shared memory
 *                with two barriers (one on the small path); ring and tree
 *                need 2 (P - 1) and about log2 P + 2 group barriers and
 *                were slower at every measured size (P = 2 and 4).
 *   mpi, 1 node  tree up to 64 KiB, then ring: at P = 2 over Open MPI's
 *                shared memory, the fastest of four rounds of every size
 *                from 4 B to 64 MiB (docs/SCALING.md), dpt's tree was the
 *                fastest at most sizes up to 64 KiB and its ring at most
 *                sizes from 96 KiB; Open MPI's own allreduce (native) at
 *                none, 1.5-4.8x the ring's time from 96 KiB. (An earlier
 *                table chose native above 4 KiB from measurements taken in
 *                this machine's slow stretches, which hit dpt's ring
 *                harder.)
 *   mpi, nodes   hier (intra-node first), from the alpha-beta model with
 *                the network figures of docs/SCALING.md: only one message
 *                per node crosses the network per step.
 *   groups       hier's step across nodes: tree up to 64 KiB, ring above
 *                (the model's crossover for 2 to 1024 nodes lies between
 *                16 and 256 KiB on the networks modelled).
 */
#include "comm/comm_internal.h"

#include <stdint.h>

/* clang-format off */
const dpt__auto_row_t dpt__auto_table[] = {
    /* level              min_p max_p layout max_bytes           algorithm */
    {DPT__LEVEL_THREADS,  1,    0,    -1,    SIZE_MAX,           DPT_ALLREDUCE_NATIVE},
    {DPT__LEVEL_MPI,      1,    0,    1,     (size_t)64 << 10,   DPT_ALLREDUCE_TREE},
    {DPT__LEVEL_MPI,      1,    0,    1,     SIZE_MAX,           DPT_ALLREDUCE_RING},
    {DPT__LEVEL_MPI,      1,    0,    2,     SIZE_MAX,           DPT_ALLREDUCE_HIER},
    {DPT__LEVEL_GROUPS,   1,    0,    -1,    (size_t)64 << 10,   DPT_ALLREDUCE_TREE},
    {DPT__LEVEL_GROUPS,   1,    0,    -1,    SIZE_MAX,           DPT_ALLREDUCE_RING},
};
/* clang-format on */

const size_t dpt__auto_table_len = sizeof dpt__auto_table / sizeof dpt__auto_table[0];

dpt_comm_algorithm_t dpt__comm_auto(dpt__auto_level_t level, int p, int layout, size_t bytes)
{
    for (size_t i = 0; i < dpt__auto_table_len; i++) {
        const dpt__auto_row_t *row = &dpt__auto_table[i];
        if (row->level == level && p >= row->min_p && (row->max_p == 0 || p <= row->max_p) &&
            (row->layout < 0 || row->layout == layout) && bytes <= row->max_bytes)
            return row->algorithm;
    }
    return DPT_ALLREDUCE_RING;
}
