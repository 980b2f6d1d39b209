/* V-trace (dpt_vtrace): against the paper's definition written as the
 * explicit truncated sum in double, by hand, against GAE(lambda = 1) on
 * policy, the pg-rho clip, and every error. */
#include "dpt_test.h"

#include "dpt/rl.h"
#include "dpt/rng.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

enum { TMAX = 40, NMAX = 5 };

typedef struct fragment {
    size_t T, N;
    float mu[TMAX * NMAX], pi[TMAX * NMAX]; /* behaviour and target log-probs */
    float r[TMAX * NMAX], v[TMAX * NMAX], disc[TMAX * NMAX];
    uint8_t done[TMAX * NMAX];
    float boot[NMAX];
} fragment_t;

/* Random fragment: rewards and values in [-2, 2], gamma 0.95, an episode
 * end with probability p_done (discount 0), log-ratios of magnitude in
 * [lr_lo, lr_hi] with a random sign. */
static void make_fragment(fragment_t *f, size_t T, size_t N, uint64_t seed, double p_done,
                          double lr_lo, double lr_hi)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, seed, 0, 0, 0);
    f->T = T;
    f->N = N;
    for (size_t k = 0; k < T * N; k++) {
        double lr = lr_lo + (lr_hi - lr_lo) * dpt_rng_uniform_double(&rng);
        if (dpt_rng_uniform_double(&rng) < 0.5)
            lr = -lr;
        f->mu[k] = (float)(-1.0 - 2.0 * dpt_rng_uniform_double(&rng));
        f->pi[k] = (float)((double)f->mu[k] + lr);
        f->r[k] = (float)(4.0 * dpt_rng_uniform_double(&rng) - 2.0);
        f->v[k] = (float)(4.0 * dpt_rng_uniform_double(&rng) - 2.0);
        f->done[k] = dpt_rng_uniform_double(&rng) < p_done;
        f->disc[k] = f->done[k] ? 0.0f : 0.95f;
    }
    for (size_t i = 0; i < N; i++)
        f->boot[i] = (float)(4.0 * dpt_rng_uniform_double(&rng) - 2.0);
}

/* The definition, in double, one (s, env) at a time:
 *   v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t
 *   delta_t = rhobar_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),  V(x_T) = bootstrap
 *   pg_s = min(pg_bar, rho_s) (r_s + gamma_s v_{s+1} - V(x_s)),  v_T = V(x_T)
 * with gamma_i the per-step discount (0 across an episode end). */
static void oracle(const fragment_t *f, double rho_bar, double pg_bar, double *vs, double *pg)
{
    size_t T = f->T, N = f->N;
    for (size_t e = 0; e < N; e++) {
        for (size_t s = 0; s < T; s++) {
            double sum = 0.0;
            for (size_t t = s; t < T; t++) {
                double coef = 1.0;
                for (size_t i = s; i < t; i++) {
                    double rho_i = exp((double)f->pi[i * N + e] - (double)f->mu[i * N + e]);
                    coef *= (double)f->disc[i * N + e] * fmin(1.0, rho_i);
                }
                double rho_t = exp((double)f->pi[t * N + e] - (double)f->mu[t * N + e]);
                double v_next = t + 1 < T ? (double)f->v[(t + 1) * N + e] : (double)f->boot[e];
                double delta = fmin(rho_bar, rho_t) *
                               ((double)f->r[t * N + e] + (double)f->disc[t * N + e] * v_next -
                                (double)f->v[t * N + e]);
                sum += coef * delta;
            }
            vs[s * N + e] = (double)f->v[s * N + e] + sum;
        }
        for (size_t s = 0; s < T; s++) {
            size_t k = s * N + e;
            double rho = exp((double)f->pi[k] - (double)f->mu[k]);
            double vs_next = s + 1 < T ? vs[k + N] : (double)f->boot[e];
            pg[k] = fmin(pg_bar, rho) *
                    ((double)f->r[k] + (double)f->disc[k] * vs_next - (double)f->v[k]);
        }
    }
}

/* max |got - want| / max(1, |want|) */
static double max_rel(const float *got, const double *want, size_t n)
{
    double m = 0.0;
    for (size_t k = 0; k < n; k++) {
        double d = fabs((double)got[k] - want[k]) / fmax(1.0, fabs(want[k]));
        if (d > m)
            m = d;
    }
    return m;
}

static void check_against_oracle(const fragment_t *f, double rho_bar, double pg_bar)
{
    size_t n = f->T * f->N;
    float vs[TMAX * NMAX], pg[TMAX * NMAX];
    double ovs[TMAX * NMAX], opg[TMAX * NMAX];
    REQUIRE_OK(dpt_vtrace(f->mu, f->pi, f->r, f->v, f->disc, f->boot, f->T, f->N, rho_bar, pg_bar,
                          vs, pg));
    oracle(f, rho_bar, pg_bar, ovs, opg);
    double dv = max_rel(vs, ovs, n), dp = max_rel(pg, opg, n);
    if (dv > 1e-5 || dp > 1e-5)
        fprintf(stderr, "  T %zu N %zu rho_bar %g pg_bar %g: vs %.3g, pg %.3g\n", f->T, f->N,
                rho_bar, pg_bar, dv, dp);
    CHECK(dv <= 1e-5);
    CHECK(dp <= 1e-5);
}

/* Counts of steps whose ratio is clipped from above by `bar` and whose
 * ratio is below 1 (c_t = rho_t < 1: the trace is cut). */
static void count_clips(const fragment_t *f, double bar, size_t *above, size_t *below1,
                        size_t *ends)
{
    *above = *below1 = *ends = 0;
    for (size_t k = 0; k < f->T * f->N; k++) {
        double rho = exp((double)f->pi[k] - (double)f->mu[k]);
        *above += rho > bar;
        *below1 += rho < 1.0;
        *ends += f->done[k];
    }
}

static void test_against_definition(void)
{
    static fragment_t f;
    /* Near on-policy (|log-ratio| <= 0.3): few clips. Episode ends inside
     * the fragment in every case. */
    make_fragment(&f, 20, 3, 1, 0.1, 0.0, 0.3);
    size_t above, below, ends;
    count_clips(&f, 1.0, &above, &below, &ends);
    CHECK(ends > 0 && above > 0 && below > 0);
    check_against_oracle(&f, 1.0, 1.0);
    /* Far off-policy (|log-ratio| in [1, 4], ratios in [0.02, 55]): rho is
     * clipped at every ratio > 1 and c is the ratio itself below 1. */
    make_fragment(&f, TMAX, NMAX, 2, 0.15, 1.0, 4.0);
    count_clips(&f, 1.0, &above, &below, &ends);
    CHECK(ends > 0 && above > 20 && below > 20);
    check_against_oracle(&f, 1.0, 1.0);
    /* Other thresholds, no clipping at all, one env, one step. */
    check_against_oracle(&f, 2.5, 0.5);
    check_against_oracle(&f, INFINITY, INFINITY);
    make_fragment(&f, 1, 1, 3, 0.0, 1.0, 2.0);
    check_against_oracle(&f, 1.0, 1.0);
    make_fragment(&f, 33, 1, 4, 0.3, 0.0, 3.0);
    check_against_oracle(&f, 1.0, 1.0);
    /* Long fragments with gamma 0.95 and no ends: the products of c stay
     * meaningful over many steps. */
    make_fragment(&f, TMAX, 2, 5, 0.0, 0.0, 0.2);
    check_against_oracle(&f, 1.0, 1.0);
}

/* One step, by hand: V_0 = 1, r = 2, gamma = 0.5, V_1 = 4.
 *   ratio 1:   delta = 1 (2 + 0.5 4 - 1) = 3, vs = 1 + 3 = 4,
 *              pg = 1 (2 + 0.5 4 - 1) = 3 (vs_1 = V_1)
 *   ratio e^2 = 7.389, rho_bar = 1, pg_bar = 2: vs = 1 + 1 * 3 = 4, pg = 2 * 3 = 6
 *   ratio e^-1 = 0.3679: vs = 1 + 0.3679 * 3 = 2.1036, pg = 0.3679 * 3 = 1.1036
 * Two steps, env 0 ends at t = 0 (discount 0): V = (1, 5), r = (2, 1),
 * V_2 = 100, ratios 1, gamma 0.5 at t = 1:
 *   t = 1: delta = 1 + 0.5 100 - 5 = 46, vs_1 = 51, pg_1 = 46
 *   t = 0: delta = 2 + 0 - 1 = 1, vs_0 = 1 + 1 + 0 (cut) = 2, pg_0 = 2 + 0 - 1 = 1 */
static void test_by_hand(void)
{
    const float v[1] = {1}, r[1] = {2}, d[1] = {0.5f}, boot[1] = {4}, mu[1] = {-1};
    float vs[2], pg[2];
    float pi[1] = {-1};
    REQUIRE_OK(dpt_vtrace(mu, pi, r, v, d, boot, 1, 1, 1.0, 1.0, vs, pg));
    CHECK_CLOSE(vs[0], 4.0, 1e-7);
    CHECK_CLOSE(pg[0], 3.0, 1e-7);
    pi[0] = 1; /* log-ratio 2 */
    REQUIRE_OK(dpt_vtrace(mu, pi, r, v, d, boot, 1, 1, 1.0, 2.0, vs, pg));
    CHECK_CLOSE(vs[0], 4.0, 1e-7);
    CHECK_CLOSE(pg[0], 6.0, 1e-7);
    pi[0] = -2; /* log-ratio -1 */
    REQUIRE_OK(dpt_vtrace(mu, pi, r, v, d, boot, 1, 1, 1.0, 1.0, vs, pg));
    CHECK_CLOSE(vs[0], 1.0 + 3.0 * exp(-1.0), 1e-6);
    CHECK_CLOSE(pg[0], 3.0 * exp(-1.0), 1e-6);

    const float v2[2] = {1, 5}, r2[2] = {2, 1}, d2[2] = {0, 0.5f}, b2[1] = {100};
    const float l2[2] = {-0.5f, -0.7f};
    REQUIRE_OK(dpt_vtrace(l2, l2, r2, v2, d2, b2, 2, 1, 1.0, 1.0, vs, pg));
    CHECK_CLOSE(vs[1], 51.0, 1e-7);
    CHECK_CLOSE(pg[1], 46.0, 1e-7);
    CHECK_CLOSE(vs[0], 2.0, 1e-7);
    CHECK_CLOSE(pg[0], 1.0, 1e-7);
}

/* On policy (ratios 1) V-trace is the lambda = 1 return: vs = GAE(1)'s
 * returns and pg_advantages = its advantages. */
static void test_on_policy_is_gae(void)
{
    static fragment_t f;
    make_fragment(&f, 25, 4, 6, 0.1, 0.0, 0.0);
    for (size_t k = 0; k < f.T * f.N; k++)
        f.pi[k] = f.mu[k];
    float vs[TMAX * NMAX], pg[TMAX * NMAX], adv[TMAX * NMAX], ret[TMAX * NMAX];
    REQUIRE_OK(dpt_vtrace(f.mu, f.pi, f.r, f.v, f.disc, f.boot, f.T, f.N, 1.0, 1.0, vs, pg));
    dpt_gae(f.r, f.v, f.done, f.boot, f.T, f.N, 0.95, 1.0, adv, ret);
    CHECK(dpt_test_max_rel_diff(vs, ret, f.T * f.N, 1.0) < 1e-6);
    CHECK(dpt_test_max_rel_diff(pg, adv, f.T * f.N, 1.0) < 1e-6);
}

/* clip_pg_rho_threshold scales only the policy-gradient advantages: with
 * every ratio 3 and rho_bar = infinity, pg_bar = 0.5 gives 0.5 / 3 of the
 * unclipped advantages, pg_bar = 3 or more the unclipped ones, and vs is
 * the same for all. */
static void test_pg_rho_clip(void)
{
    static fragment_t f;
    make_fragment(&f, 12, 3, 7, 0.2, 0.0, 0.0);
    for (size_t k = 0; k < f.T * f.N; k++)
        f.pi[k] = f.mu[k] + (float)log(3.0);
    float vs_a[TMAX * NMAX], pg_a[TMAX * NMAX], vs_b[TMAX * NMAX], pg_b[TMAX * NMAX];
    float vs_c[TMAX * NMAX], pg_c[TMAX * NMAX];
    size_t n = f.T * f.N;
    REQUIRE_OK(
        dpt_vtrace(f.mu, f.pi, f.r, f.v, f.disc, f.boot, f.T, f.N, INFINITY, INFINITY, vs_a, pg_a));
    REQUIRE_OK(
        dpt_vtrace(f.mu, f.pi, f.r, f.v, f.disc, f.boot, f.T, f.N, INFINITY, 0.5, vs_b, pg_b));
    REQUIRE_OK(
        dpt_vtrace(f.mu, f.pi, f.r, f.v, f.disc, f.boot, f.T, f.N, INFINITY, 3.5, vs_c, pg_c));
    CHECK(memcmp(vs_a, vs_b, n * sizeof(float)) == 0);
    CHECK(memcmp(vs_a, vs_c, n * sizeof(float)) == 0);
    size_t nonzero = 0;
    for (size_t k = 0; k < n; k++) {
        CHECK_CLOSE(pg_b[k], (double)pg_a[k] * (0.5 / 3.0), 1e-6);
        CHECK_CLOSE(pg_c[k], pg_a[k], 1e-6);
        nonzero += fabsf(pg_a[k]) > 0.1f;
    }
    CHECK(nonzero > n / 2);
    /* And the oracle agrees with each. */
    check_against_oracle(&f, INFINITY, 0.5);
    check_against_oracle(&f, 1.0, 0.5);
}

static void test_errors(void)
{
    const float v[2] = {1, 2}, r[2] = {0, 0}, d[2] = {0.9f, 0.9f}, boot[1] = {0}, l[2] = {0, 0};
    float vs[2], pg[2];
    CHECK_ERR(dpt_vtrace(NULL, l, r, v, d, boot, 2, 1, 1, 1, vs, pg), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, NULL, 2, 1, 1, 1, vs, pg), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, boot, 2, 1, 1, 1, vs, NULL), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, boot, 0, 1, 1, 1, vs, pg), DPT_EINVAL, "0 steps");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, boot, 2, 0, 1, 1, vs, pg), DPT_EINVAL, "0 envs");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, boot, 2, 1, 0, 1, vs, pg), DPT_EINVAL,
              "clip_rho_threshold");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, boot, 2, 1, 1, -1, vs, pg), DPT_EINVAL, "must be > 0");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, boot, 2, 1, NAN, 1, vs, pg), DPT_EINVAL, "must be > 0");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, boot, SIZE_MAX, 2, 1, 1, vs, pg), DPT_EOVERFLOW,
              "overflow");

    const float d_bad[2] = {0.9f, 1.5f}, d_neg[2] = {-0.1f, 0.9f}, d_nan[2] = {NAN, 0.9f};
    CHECK_ERR(dpt_vtrace(l, l, r, v, d_bad, boot, 2, 1, 1, 1, vs, pg), DPT_EINVAL,
              "discounts[t = 1, env = 0] is 1.5");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d_neg, boot, 2, 1, 1, 1, vs, pg), DPT_EINVAL,
              "must be in [0, 1]");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d_nan, boot, 2, 1, 1, 1, vs, pg), DPT_EINVAL,
              "discounts[t = 0, env = 0]");

    const float inf2[2] = {0, INFINITY}, nan2[2] = {NAN, 0}, nan1[1] = {NAN};
    CHECK_ERR(dpt_vtrace(inf2, l, r, v, d, boot, 2, 1, 1, 1, vs, pg), DPT_ENUMERIC,
              "behaviour_logp[t = 1, env = 0]");
    CHECK_ERR(dpt_vtrace(l, nan2, r, v, d, boot, 2, 1, 1, 1, vs, pg), DPT_ENUMERIC,
              "target_logp[t = 0, env = 0]");
    /* Two envs, one step: index 1 is env 1. */
    CHECK_ERR(dpt_vtrace(l, l, inf2, v, d, boot, 1, 2, 1, 1, vs, pg), DPT_ENUMERIC,
              "rewards[t = 0, env = 1]");
    CHECK_ERR(dpt_vtrace(l, l, r, nan2, d, boot, 2, 1, 1, 1, vs, pg), DPT_ENUMERIC, "values[t = 0");
    CHECK_ERR(dpt_vtrace(l, l, r, v, d, nan1, 2, 1, 1, 1, vs, pg), DPT_ENUMERIC,
              "bootstrap_values[env = 0] is nan");

    /* A log-ratio of 800 overflows exp() when nothing clips it: the error
     * names the step where it happened (t = 1), not the earlier steps the
     * recursion carried it to. Clipped, the same inputs are fine. */
    const float mu[2] = {0, -400}, pi[2] = {0, 400}, r1[2] = {1, 1};
    CHECK_ERR(dpt_vtrace(mu, pi, r1, v, d, boot, 2, 1, INFINITY, 1, vs, pg), DPT_ENUMERIC,
              "overflow at t = 1, env = 0");
    CHECK_ERR(dpt_vtrace(mu, pi, r1, v, d, boot, 2, 1, 1, INFINITY, vs, pg), DPT_ENUMERIC,
              "overflow at t = 1");
    CHECK_OK(dpt_vtrace(mu, pi, r1, v, d, boot, 2, 1, 1, 1, vs, pg));
    CHECK(isfinite(vs[0]) && isfinite(vs[1]) && isfinite(pg[0]) && isfinite(pg[1]));
    /* A large finite value can still overflow a float output. */
    const float big[2] = {FLT_MAX, FLT_MAX}, one[2] = {1, 1};
    CHECK_ERR(dpt_vtrace(l, l, big, big, one, boot, 2, 1, 1, 1, vs, pg), DPT_ENUMERIC, "overflow");
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_against_definition), DPT_TEST(test_by_hand), DPT_TEST(test_on_policy_is_gae),
        DPT_TEST(test_pg_rho_clip),        DPT_TEST(test_errors),
    };
    return DPT_TEST_RUN(cases);
}
