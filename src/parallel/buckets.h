/*
 * Internal to the towers engine: the gradient bucket plan (which variables
 * travel together in one all-reduce) and its tracking during a backward
 * pass. Tests include it; not installed. dpt/towers.h, "Gradient buckets",
 * has the rules.
 */
#ifndef DPT_BUCKETS_H
#define DPT_BUCKETS_H

#include "dpt/arena.h"

#include <stddef.h>

/* One bucket: variables [var_lo, var_hi) of the table, i.e. floats
 * [lo, hi) of the arena (from the first variable's offset to the next
 * bucket's, so the alignment padding after each variable travels with
 * it; the last variable's bucket ends at the table's total). */
typedef struct dpt__bucket {
    size_t var_lo, var_hi;
    size_t lo, hi;
} dpt__bucket_t;

/* Buckets in the order they are all-reduced: b[0] holds the last
 * variables of the table, b[n - 1] variable 0. */
typedef struct dpt__bucket_plan {
    dpt__bucket_t *b;
    size_t n;
} dpt__bucket_plan_t;

/* Plans the buckets of `vars` for bucket_bytes (0: one bucket of every
 * variable). Walking the variables from the last to the first, a variable
 * joins the current bucket unless the bucket is not empty and would then
 * exceed bucket_bytes (bytes of its float range, padding included); a
 * variable larger than bucket_bytes is a bucket of its own. A table with no
 * variables gives one empty bucket [0, total). Returns 0 or DPT_ENOMEM. */
int dpt__bucket_plan_init(dpt__bucket_plan_t *plan, const dpt_vartable_t *vars,
                          size_t bucket_bytes);
/* Frees the plan; a zeroed plan is a no-op. */
void dpt__bucket_plan_deinit(dpt__bucket_plan_t *plan);

/* Which variables of a backward pass are final so far: done[v] marks each
 * reported variable and `below` is the least index such that every
 * variable from it up is reported; a bucket is ready when var_lo >= below.
 * Owned by the caller; nvars entries. */
typedef struct dpt__bucket_track {
    unsigned char *done;
    size_t nvars, below;
} dpt__bucket_track_t;

int dpt__bucket_track_init(dpt__bucket_track_t *tr, size_t nvars);
void dpt__bucket_track_deinit(dpt__bucket_track_t *tr);
/* Forgets every report (before a backward pass). */
void dpt__bucket_track_reset(dpt__bucket_track_t *tr);
/* Records that variables [var_lo, var_hi) are final (indices past nvars
 * are ignored) and returns how many buckets of `plan`, counted from b[0],
 * are ready. */
size_t dpt__bucket_track_mark(dpt__bucket_track_t *tr, const dpt__bucket_plan_t *plan,
                              size_t var_lo, size_t var_hi);

#endif /* DPT_BUCKETS_H */
