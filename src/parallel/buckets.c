/* The gradient bucket plan of the towers engine (buckets.h). */
#include "buckets.h"
#include "dpt/status.h"

#include <stdlib.h>
#include <string.h>

int dpt__bucket_plan_init(dpt__bucket_plan_t *plan, const dpt_vartable_t *vars, size_t bucket_bytes)
{
    memset(plan, 0, sizeof *plan);
    size_t nv = vars->nvars, cap = nv ? nv : 1;
    plan->b = calloc(cap, sizeof *plan->b);
    if (!plan->b)
        return dpt_error(DPT_ENOMEM, "towers: cannot allocate a plan of %zu buckets", cap);
    if (nv == 0) {
        plan->b[0] = (dpt__bucket_t){0, 0, 0, vars->total};
        plan->n = 1;
        return DPT_OK;
    }
    /* The current bucket is variables [v, hi_var), floats [offset(v), hi). */
    size_t hi_var = nv, hi = vars->total;
    for (size_t v = nv; v-- > 0;) {
        size_t lo = vars->vars[v].offset;
        int nonempty = hi_var > v + 1;
        /* Bytes the bucket would have with v; no overflow: the arena of
         * `total` floats was allocated. */
        size_t bytes = (hi - lo) * sizeof(float);
        if (bucket_bytes && nonempty && bytes > bucket_bytes) {
            size_t end = vars->vars[v + 1].offset;
            plan->b[plan->n++] = (dpt__bucket_t){v + 1, hi_var, end, hi};
            hi_var = v + 1;
            hi = end;
        }
    }
    plan->b[plan->n++] = (dpt__bucket_t){0, hi_var, vars->vars[0].offset, hi};
    /* Floats before the first variable (none in a dpt_vartable_t today)
     * travel with variable 0. */
    plan->b[plan->n - 1].lo = 0;
    return DPT_OK;
}

void dpt__bucket_plan_deinit(dpt__bucket_plan_t *plan)
{
    free(plan->b);
    memset(plan, 0, sizeof *plan);
}

int dpt__bucket_track_init(dpt__bucket_track_t *tr, size_t nvars)
{
    tr->nvars = nvars;
    tr->below = nvars;
    tr->done = calloc(nvars ? nvars : 1, 1);
    return tr->done ? DPT_OK
                    : dpt_error(DPT_ENOMEM, "towers: cannot allocate %zu variable marks", nvars);
}

void dpt__bucket_track_deinit(dpt__bucket_track_t *tr)
{
    free(tr->done);
    memset(tr, 0, sizeof *tr);
}

void dpt__bucket_track_reset(dpt__bucket_track_t *tr)
{
    memset(tr->done, 0, tr->nvars ? tr->nvars : 1);
    tr->below = tr->nvars;
}

size_t dpt__bucket_track_mark(dpt__bucket_track_t *tr, const dpt__bucket_plan_t *plan,
                              size_t var_lo, size_t var_hi)
{
    if (var_hi > tr->nvars)
        var_hi = tr->nvars;
    for (size_t v = var_lo; v < var_hi; v++)
        tr->done[v] = 1;
    while (tr->below > 0 && tr->done[tr->below - 1])
        tr->below--;
    size_t ready = 0;
    while (ready < plan->n && plan->b[ready].var_lo >= tr->below)
        ready++;
    return ready;
}
