/*
 * The reduction order in checkpoints (towers_invariant.c): the trainers on
 * towers record the chunk size of the count-invariant reduction (0: the
 * fast order), and a restore refuses a checkpoint made in another order, so
 * a resumed run continues bitwise (and may then change its device or rank
 * count). Not installed.
 */
#ifndef DPT_PARALLEL_REDUCTION_H
#define DPT_PARALLEL_REDUCTION_H

#include "dpt/checkpoint.h"

#include <stddef.h>

/* Writes the metadata key reduction_chunk = chunk. */
int dpt__reduction_save(dpt_safetensors_writer_t *w, size_t chunk);

/* DPT_EINVAL naming both orders when st was made with another chunk size
 * than `chunk` (a checkpoint without the key was made in the fast order);
 * DPT_EFORMAT for a value that is not a number. */
int dpt__reduction_check(const dpt_safetensors_t *st, size_t chunk);

#endif /* DPT_PARALLEL_REDUCTION_H */
