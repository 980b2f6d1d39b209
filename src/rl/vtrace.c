/*
 * V-trace targets (dpt/rl.h). The backward recursion
 *   vs_t - V_t = delta_t + gamma_t c_t (vs_{t+1} - V_{t+1})
 * gives the paper's truncated sum in one pass per env; each env's chain is
 * independent, so envs are done one after the other with a double
 * accumulator (the arrays are [T, N]: a stride of N between steps).
 */
#include "dpt/rl.h"
#include "dpt/arena.h"
#include "dpt/status.h"

#include <float.h>
#include <math.h>

/* The first non-finite value of x [T, N], as DPT_ENUMERIC naming it. */
static int dpt__vtrace_finite(const float *x, size_t count, size_t N, const char *name)
{
    size_t k = dpt_vec_first_nonfinite(x, count);
    if (k == count)
        return DPT_OK;
    return dpt_error(DPT_ENUMERIC, "vtrace: %s[t = %zu, env = %zu] is %g", name, k / N, k % N,
                     (double)x[k]);
}

int dpt_vtrace(const float *behaviour_logp, const float *target_logp, const float *rewards,
               const float *values, const float *discounts, const float *bootstrap_values, size_t T,
               size_t N, double clip_rho_threshold, double clip_pg_rho_threshold, float *vs,
               float *pg_advantages)
{
    if (!behaviour_logp || !target_logp || !rewards || !values || !discounts || !bootstrap_values ||
        !vs || !pg_advantages)
        return dpt_error(DPT_EINVAL, "vtrace: an input or output array is NULL");
    if (T == 0 || N == 0)
        return dpt_error(DPT_EINVAL,
                         "vtrace: the fragment is %zu steps x %zu envs, both must be >= 1", T, N);
    if (!(clip_rho_threshold > 0.0) || !(clip_pg_rho_threshold > 0.0))
        return dpt_error(DPT_EINVAL,
                         "vtrace: clip_rho_threshold (%g) and clip_pg_rho_threshold (%g) must "
                         "be > 0",
                         clip_rho_threshold, clip_pg_rho_threshold);
    size_t count;
    if (dpt_mul_size(T, N, &count) != 0)
        return dpt_error(DPT_EOVERFLOW, "vtrace: %zu steps x %zu envs overflow", T, N);
    int rc;
    if ((rc = dpt__vtrace_finite(behaviour_logp, count, N, "behaviour_logp")) != 0 ||
        (rc = dpt__vtrace_finite(target_logp, count, N, "target_logp")) != 0 ||
        (rc = dpt__vtrace_finite(rewards, count, N, "rewards")) != 0 ||
        (rc = dpt__vtrace_finite(values, count, N, "values")) != 0)
        return rc;
    size_t b = dpt_vec_first_nonfinite(bootstrap_values, N);
    if (b != N)
        return dpt_error(DPT_ENUMERIC, "vtrace: bootstrap_values[env = %zu] is %g", b,
                         (double)bootstrap_values[b]);
    for (size_t k = 0; k < count; k++)
        if (!(discounts[k] >= 0.0f && discounts[k] <= 1.0f))
            return dpt_error(DPT_EINVAL,
                             "vtrace: discounts[t = %zu, env = %zu] is %g, must be in [0, 1]",
                             k / N, k % N, (double)discounts[k]);

    for (size_t i = 0; i < N; i++) {
        double v_next = (double)bootstrap_values[i]; /* V_{t+1} */
        double vs_next = v_next;                     /* vs_{t+1} */
        double acc = 0.0;                            /* vs_{t+1} - V_{t+1} */
        for (size_t t = T; t-- > 0;) {
            size_t k = t * N + i;
            /* The ratio in double: exp of a log-ratio up to ~709 stays
             * finite, and the clipped forms below stay finite beyond. */
            double rho = exp((double)target_logp[k] - (double)behaviour_logp[k]);
            double rho_c = rho < clip_rho_threshold ? rho : clip_rho_threshold;
            double rho_pg = rho < clip_pg_rho_threshold ? rho : clip_pg_rho_threshold;
            double c = rho < 1.0 ? rho : 1.0;
            double g = (double)discounts[k], r = (double)rewards[k], v = (double)values[k];
            double delta = rho_c * (r + g * v_next - v);
            acc = delta + g * c * acc;
            double vs_t = v + acc;
            double pg_t = rho_pg * (r + g * vs_next - v);
            /* An overflow (or inf - inf) ends the call here, at the step
             * where it starts, before the recursion carries it back. */
            if (!(fabs(vs_t) <= (double)FLT_MAX) || !(fabs(pg_t) <= (double)FLT_MAX))
                return dpt_error(DPT_ENUMERIC,
                                 "vtrace: the targets overflow at t = %zu, env = %zu (log-ratio "
                                 "%g with clip thresholds %g and %g)",
                                 t, i, (double)target_logp[k] - (double)behaviour_logp[k],
                                 clip_rho_threshold, clip_pg_rho_threshold);
            vs[k] = (float)vs_t;
            pg_advantages[k] = (float)pg_t;
            v_next = v;
            vs_next = vs_t;
        }
    }
    return DPT_OK;
}
