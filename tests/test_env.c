/* Environments and the vectorized runner (dpt/env.h).
 *
 * The built-in classes are checked against reference dynamics written again
 * here, from Gymnasium's published equations but arranged differently (the
 * cart-pole in Florian's form, the acrobot with sin() where acrobot.py has
 * cos(. - pi/2), a generic RK4), and against numbers worked out by hand. The
 * references also replay resets from the env's own RNG stream (seed, rank,
 * i, DPT_RNG_ENV), so whole trajectories across auto-resets are compared.
 * The runner is checked with env classes defined in this file, which also
 * shows that a user can write an env against the public header alone. */
#include "dpt_test.h"

#include "dpt/env.h"
#include "dpt/rng.h"
#include "rl/env_internal.h" /* ranges stepped by several threads */

#include <stdint.h>

#define PI 3.14159265358979323846

/* ---- buffers for one runner ---------------------------------------------- */

typedef struct bufs {
    size_t n, od;
    float *obs, *fin, *rew;
    uint8_t *term, *trunc;
} bufs_t;

static int bufs_init(bufs_t *b, size_t n, size_t od)
{
    b->n = n;
    b->od = od;
    b->obs = calloc(n * od, sizeof(float));
    b->fin = calloc(n * od, sizeof(float));
    b->rew = calloc(n, sizeof(float));
    b->term = calloc(n, 1);
    b->trunc = calloc(n, 1);
    return b->obs && b->fin && b->rew && b->term && b->trunc;
}

static void bufs_free(bufs_t *b)
{
    free(b->obs), free(b->fin), free(b->rew), free(b->term), free(b->trunc);
}

static int vstep(dpt_vecenv_t *v, bufs_t *b, const void *act)
{
    return dpt_vecenv_step(v, act, b->obs, b->rew, b->term, b->trunc, b->fin);
}

static double ref_uniform(dpt_rng_t *r, double lo, double hi)
{
    return lo + (hi - lo) * dpt_rng_uniform_double(r);
}

/* ---- reference dynamics ---------------------------------------------------- */

/* Cart-pole (Florian 2007, eqs. 23-24, frictionless), explicit Euler. */
static int ref_cartpole_step(double s[4], int action)
{
    const double g = 9.8, mc = 1.0, mp = 0.1, l = 0.5, tau = 0.02;
    double f = action ? 10.0 : -10.0;
    double th = s[2], thd = s[3];
    double c = cos(th), sn = sin(th);
    double thacc = (g * sn + c * ((-f - mp * l * thd * thd * sn) / (mc + mp))) /
                   (l * (4.0 / 3.0 - mp * c * c / (mc + mp)));
    double xacc = (f + mp * l * (thd * thd * sn - thacc * c)) / (mc + mp);
    s[0] += tau * s[1];
    s[1] += tau * xacc;
    s[2] += tau * thd;
    s[3] += tau * thacc;
    return fabs(s[0]) > 2.4 || fabs(s[2]) > 12.0 * PI / 180.0;
}

static void ref_cartpole_reset(dpt_rng_t *r, double s[4])
{
    for (int k = 0; k < 4; k++)
        s[k] = ref_uniform(r, -0.05, 0.05);
}

/* Acrobot, book dynamics (Sutton & Barto), with cos(a - pi/2) = sin(a). */
static void ref_acrobot_f(const double y[4], double tau, double dy[4])
{
    const double m1 = 1, m2 = 1, l1 = 1, lc1 = 0.5, lc2 = 0.5, i1 = 1, i2 = 1, g = 9.8;
    double t1 = y[0], t2 = y[1], w1 = y[2], w2 = y[3];
    double d1 = m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * cos(t2)) + i1 + i2;
    double d2 = m2 * (lc2 * lc2 + l1 * lc2 * cos(t2)) + i2;
    double phi2 = m2 * lc2 * g * sin(t1 + t2);
    double phi1 = -m2 * l1 * lc2 * w2 * w2 * sin(t2) - 2 * m2 * l1 * lc2 * w2 * w1 * sin(t2) +
                  (m1 * lc1 + m2 * l1) * g * sin(t1) + phi2;
    double a2 = (tau + d2 / d1 * phi1 - m2 * l1 * lc2 * w1 * w1 * sin(t2) - phi2) /
                (m2 * lc2 * lc2 + i2 - d2 * d2 / d1);
    dy[0] = w1;
    dy[1] = w2;
    dy[2] = -(d2 * a2 + phi1) / d1;
    dy[3] = a2;
}

/* One classic RK4 step of size h, written generically. */
static void ref_rk4(double y[4], double tau, double h)
{
    double k[4][4], tmp[4];
    const double c[4] = {0, 0.5, 0.5, 1};
    for (int s = 0; s < 4; s++) {
        for (int j = 0; j < 4; j++)
            tmp[j] = y[j] + (s ? c[s] * h * k[s - 1][j] : 0.0);
        ref_acrobot_f(tmp, tau, k[s]);
    }
    for (int j = 0; j < 4; j++)
        y[j] += h / 6 * (k[0][j] + 2 * k[1][j] + 2 * k[2][j] + k[3][j]);
}

static double ref_wrap(double x)
{
    return x - 2 * PI * floor((x + PI) / (2 * PI));
}

static double ref_clip(double x, double b)
{
    return fmin(fmax(x, -b), b);
}

/* Returns terminated; `raw` (optional) gets the state before wrap/clip. */
static int ref_acrobot_step(double s[4], int action, double raw[4])
{
    ref_rk4(s, (double)action - 1.0, 0.2);
    if (raw)
        memcpy(raw, s, 4 * sizeof(double));
    s[0] = ref_wrap(s[0]);
    s[1] = ref_wrap(s[1]);
    s[2] = ref_clip(s[2], 4 * PI);
    s[3] = ref_clip(s[3], 9 * PI);
    return -cos(s[0]) - cos(s[1] + s[0]) > 1.0;
}

static void ref_acrobot_obs(const double s[4], double o[6])
{
    o[0] = cos(s[0]), o[1] = sin(s[0]), o[2] = cos(s[1]), o[3] = sin(s[1]);
    o[4] = s[2], o[5] = s[3];
}

/* ---- Gymnasium's own numbers ------------------------------------------------
 * Transitions recorded from Gymnasium 1.4.0 with NumPy 2.4.6 (setting
 * env.unwrapped.state, calling step): the first steps of seeded episodes
 * under random actions, a terminal step, and hand-picked states at the limits
 * (CartPole falling, MountainCar at the goal and the left wall, Pendulum at
 * the speed limit). Doubles are printed exactly (hex). */
typedef struct gym_row {
    const char *env;
    int32_t action; /* discrete */
    float u;        /* box (Pendulum) */
    double s[4], next[4], reward;
    int terminated;
} gym_row_t;

static const gym_row_t gym_rows[] = {
    {"CartPole-v1",
     1,
     0.0f,
     {-0x1.344b9bfe67aa0p-6, -0x1.f67cdf69c0c18p-8, 0x1.0c74370a79616p-5, -0x1.298948fcb5e38p-7},
     {-0x1.36cecb30da8c4p-6, 0x1.7ee9f4ba228e6p-3, 0x1.0af75e5b216e5p-5, -0x1.2a3c6e0c15a80p-2},
     0x1.0000000000000p+0,
     0},
    {"CartPole-v1",
     1,
     0.0f,
     {-0x1.36cecb30da8c4p-6, 0x1.7ee9f4ba228e6p-3, 0x1.0af75e5b216e5p-5, -0x1.2a3c6e0c15a80p-2},
     {-0x1.f3154811aa09ap-7, 0x1.86c556b587431p-2, 0x1.b67f3d563bee9p-6, -0x1.259e944d56cd8p-1},
     0x1.0000000000000p+0,
     0},
    {"CartPole-v1",
     1,
     0.0f,
     {-0x1.f3154811aa09ap-7, 0x1.86c556b587431p-2, 0x1.b67f3d563bee9p-6, -0x1.259e944d56cd8p-1},
     {-0x1.f1fac4fd88384p-8, 0x1.271732397628ap-1, 0x1.f52941f78de05p-7, -0x1.b7186fa569ae0p-1},
     0x1.0000000000000p+0,
     0},
    {"CartPole-v1",
     1,
     0.0f,
     {0x1.28da64e758316p-3, 0x1.8ddf1cb3648e0p+0, -0x1.ac17c5d16ad2ap-3, -0x1.34a91da1afa8cp+1},
     {0x1.6883364bba33ap-3, 0x1.c01bbe31202cbp+0, -0x1.076e9ff856a30p-2, -0x1.6153bfd72753ap+1},
     0x1.0000000000000p+0,
     1},
    {"CartPole-v1",
     1,
     0.0f,
     {0x1.999999999999ap-4, 0x1.0000000000000p-1, 0x1.999999999999ap-3, 0x1.ccccccccccccdp-1},
     {0x1.c28f5c28f5c29p-4, 0x1.6244f1012e714p-1, 0x1.be76c8b439582p-3, 0x1.5a3d56fd4ec97p-1},
     0x1.0000000000000p+0,
     1},
    {"Acrobot-v1",
     1,
     0.0f,
     {-0x1.344b9c0000000p-5, -0x1.f67ce00000000p-7, 0x1.0c74380000000p-4, -0x1.2989480000000p-6},
     {-0x1.54e09ab33e2e2p-6, -0x1.4c9f56491bdd2p-6, 0x1.961572e71ecaep-4, -0x1.caf92b415480bp-6},
     -0x1.0000000000000p+0,
     0},
    {"Acrobot-v1",
     2,
     0.0f,
     {-0x1.54e09ab33e2e2p-6, -0x1.4c9f56491bdd2p-6, 0x1.961572e71ecaep-4, -0x1.caf92b415480bp-6},
     {-0x1.a838fbb3df380p-7, 0x1.33bea50c1d67ep-7, -0x1.587258d58b61cp-6, 0x1.485791fd7612ap-2},
     -0x1.0000000000000p+0,
     0},
    {"Acrobot-v1",
     2,
     0.0f,
     {-0x1.a838fbb3df380p-7, 0x1.33bea50c1d67ep-7, -0x1.587258d58b61cp-6, 0x1.485791fd7612ap-2},
     {-0x1.cba9c4dc7bb1ep-6, 0x1.a6caa23261217p-4, -0x1.fad55ad14d0d3p-4, 0x1.3270f106d3e34p-1},
     -0x1.0000000000000p+0,
     0},
    {"Acrobot-v1",
     0,
     0.0f,
     {0x1.8000000000000p+1, 0x1.999999999999ap-3, 0x1.0000000000000p-1, -0x1.3333333333333p-2},
     {0x1.8c615de8eba25p+1, 0x1.11e158ee03c82p-3, 0x1.f577ce45c54e0p-2, -0x1.8f3b521e5bb3bp-2},
     0x0.0p+0,
     1},
    {"MountainCar-v0",
     2,
     0.0f,
     {-0x1.a3beba9cfef12p-2, 0x0.0p+0},
     {-0x1.a393cd8677d8cp-2, 0x1.5768b438c2de4p-13},
     -0x1.0000000000000p+0,
     0},
    {"MountainCar-v0",
     2,
     0.0f,
     {-0x1.a393cd8677d8cp-2, 0x1.5768b438c2de4p-13},
     {-0x1.a33e4103553dcp-2, 0x1.56320c8a6bf62p-12},
     -0x1.0000000000000p+0,
     0},
    {"MountainCar-v0",
     1,
     0.0f,
     {-0x1.a33e4103553dcp-2, 0x1.56320c8a6bf62p-12},
     {-0x1.a3c4d4adbe458p-2, -0x1.0d2754d20f850p-11},
     -0x1.0000000000000p+0,
     0},
    {"MountainCar-v0",
     2,
     0.0f,
     {0x1.f5c28f5c28f5cp-2, 0x1.47ae147ae147bp-6},
     {0x1.0580d1a757828p-1, 0x1.53f13f2860f50p-6},
     -0x1.0000000000000p+0,
     1},
    {"MountainCar-v0",
     0,
     0.0f,
     {-0x1.30a3d70a3d70ap+0, -0x1.999999999999ap-5},
     {-0x1.3333333333333p+0, 0x0.0p+0},
     -0x1.0000000000000p+0,
     0},
    {"Pendulum-v1",
     0,
     0x1.0e158e0000000p-2f,
     {-0x1.1e2f0ed25d9e8p+1, 0x1.cb6ac2bb4ab1ap-1},
     {-0x1.1bf70e2a4e0eap+1, 0x1.63006909b9f02p-2},
     -0x1.451577f790038p+2,
     0},
    {"Pendulum-v1",
     0,
     0x1.3376cc0000000p-3f,
     {-0x1.1bf70e2a4e0eap+1, 0x1.63006909b9f02p-2},
     {-0x1.1d6e1b629dc46p+1, -0x1.d4d08663a3338p-3},
     -0x1.3bc170bb235b2p+2,
     0},
    {"Pendulum-v1",
     0,
     0x1.6dea2a0000000p+0f,
     {-0x1.1d6e1b629dc46p+1, -0x1.d4d08663a3338p-3},
     {-0x1.215147e00ea1ap+1, -0x1.36fde73345240p-1},
     -0x1.3eb5ac3ab1407p+2,
     0},
    {"Pendulum-v1",
     0,
     0x1.0000000000000p+1f,
     {0x1.c000000000000p+1, 0x1.f99999999999ap+2},
     {0x1.f2cbd66af9b38p+1, 0x1.fbf6602dc1034p+2},
     -0x1.bfb7423e325acp+3,
     0},
    {"Pendulum-v1",
     0,
     -0x1.3333340000000p-2f,
     {-0x1.c000000000000p+2, -0x1.8000000000000p+1},
     {-0x1.cb521dd761c72p+2, -0x1.c4d4a9a7471e2p+1},
     -0x1.69f638e76c4e4p+0,
     0},
};

/* CartPole, MountainCar and Pendulum match bit for bit: the same expressions
 * in the same order in IEEE double, the C library's sin/cos (which Python's
 * math module calls), Pendulum's float32 torque terms as NumPy 2 computes
 * them. Acrobot may differ in the last bit (2 of 12000 recorded values did):
 * acrobot.py calls NumPy's sin/cos, which are not always the C library's. */
static void test_gymnasium_golden(void)
{
    for (size_t j = 0; j < sizeof gym_rows / sizeof gym_rows[0]; j++) {
        const gym_row_t *g = &gym_rows[j];
        const dpt_env_class_t *c = dpt_env_find(g->env);
        REQUIRE(c);
        size_t ns = c->state_size / sizeof(double);
        double s[4];
        memcpy(s, g->s, sizeof s);
        dpt_rng_t rng;
        dpt_rng_init(&rng, 0, 0, 0, DPT_RNG_TEST);
        float obs[8], r;
        REQUIRE(c->obs_dim <= 8);
        int term = -1;
        const void *a =
            c->action_kind == DPT_ACTION_BOX ? (const void *)&g->u : (const void *)&g->action;
        c->step(s, a, &rng, obs, &r, &term);
        int exact = strcmp(g->env, "Acrobot-v1") != 0;
        for (size_t k = 0; k < ns; k++) {
            if (exact)
                CHECK(s[k] == g->next[k]);
            else
                CHECK_CLOSE(s[k], g->next[k], 1e-15);
        }
        CHECK(r == (float)g->reward);
        CHECK(term == g->terminated);
    }
}

/* ---- registry and class checks -------------------------------------------- */

static void test_registry(void)
{
    static const char *names[] = {"CartPole-v1",
                                  "Acrobot-v1",
                                  "MountainCar-v0",
                                  "Pendulum-v1",
                                  "StatelessCartPole-v1",
                                  "RepeatPrevious-v0",
                                  "MinAtar/Asterix-v0",
                                  "MinAtar/Asterix-v1",
                                  "MinAtar/Breakout-v0",
                                  "MinAtar/Breakout-v1",
                                  "MinAtar/Freeway-v0",
                                  "MinAtar/Freeway-v1",
                                  "MinAtar/Seaquest-v0",
                                  "MinAtar/Seaquest-v1",
                                  "MinAtar/SpaceInvaders-v0",
                                  "MinAtar/SpaceInvaders-v1"};
    const size_t count = sizeof names / sizeof names[0];
    REQUIRE(dpt_env_count() == count);
    for (size_t i = 0; i < count; i++) {
        const dpt_env_class_t *c = dpt_env_get(i);
        REQUIRE(c != NULL);
        CHECK(strcmp(c->name, names[i]) == 0);
        CHECK(dpt_env_find(names[i]) == c);
        CHECK_OK(dpt_env_class_check(c));
    }
    CHECK(dpt_env_get(count) == NULL);
    CHECK(dpt_env_get((size_t)-1) == NULL);

    dpt_error_clear();
    CHECK(dpt_env_find("CartPole-v0") == NULL);
    CHECK(strstr(dpt_last_error(), "\"CartPole-v0\"") != NULL);
    CHECK(strstr(dpt_last_error(), "CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1, "
                                   "StatelessCartPole-v1, RepeatPrevious-v0") != NULL);
    dpt_error_clear();
    CHECK(dpt_env_find("cartpole-v1") == NULL); /* names are case-sensitive, like Gymnasium's */
    CHECK(dpt_last_error()[0] != '\0');
    dpt_error_clear();
    CHECK(dpt_env_find(NULL) == NULL);
    CHECK(strstr(dpt_last_error(), "(null)") != NULL);

    /* Gymnasium's spaces, time limits and thresholds. */
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1"), *ac = dpt_env_find("Acrobot-v1");
    const dpt_env_class_t *mc = dpt_env_find("MountainCar-v0"), *pd = dpt_env_find("Pendulum-v1");
    REQUIRE(cp && ac && mc && pd);
    CHECK(cp->obs_dim == 4 && cp->action_kind == DPT_ACTION_DISCRETE && cp->num_actions == 2);
    CHECK(cp->max_episode_steps == 500 && cp->reward_threshold == 475.0);
    CHECK(ac->obs_dim == 6 && ac->action_kind == DPT_ACTION_DISCRETE && ac->num_actions == 3);
    CHECK(ac->max_episode_steps == 500 && ac->reward_threshold == -100.0);
    CHECK(mc->obs_dim == 2 && mc->action_kind == DPT_ACTION_DISCRETE && mc->num_actions == 3);
    CHECK(mc->max_episode_steps == 200 && mc->reward_threshold == -110.0);
    CHECK(pd->obs_dim == 3 && pd->action_kind == DPT_ACTION_BOX && pd->action_dim == 1);
    CHECK(pd->action_low[0] == -2.0f && pd->action_high[0] == 2.0f);
    CHECK(pd->max_episode_steps == 200);
    /* The documented state layouts (dpt/env.h). */
    CHECK(cp->state_size == 4 * sizeof(double) && ac->state_size == 4 * sizeof(double));
    CHECK(mc->state_size == 2 * sizeof(double) && pd->state_size == 2 * sizeof(double));
}

static void dummy_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)state, (void)rng;
    obs[0] = 0.0f;
}

static void dummy_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                       int *terminated)
{
    (void)state, (void)action, (void)rng;
    obs[0] = 0.0f;
    *reward = 0.0f;
    *terminated = 0;
}

static const float dummy_low[2] = {-1.0f, 0.0f}, dummy_high[2] = {1.0f, 1.0f};

static dpt_env_class_t dummy_class(void)
{
    dpt_env_class_t c;
    memset(&c, 0, sizeof c);
    c.name = "Dummy-v0";
    c.obs_dim = 1;
    c.action_kind = DPT_ACTION_BOX;
    c.action_dim = 2;
    c.action_low = dummy_low;
    c.action_high = dummy_high;
    c.state_size = 8;
    c.reset = dummy_reset;
    c.step = dummy_step;
    return c;
}

static void test_class_check(void)
{
    dpt_env_class_t c = dummy_class();
    CHECK_OK(dpt_env_class_check(&c));
    CHECK_ERR(dpt_env_class_check(NULL), DPT_EINVAL, "NULL");
    c.name = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "name");
    c.name = "";
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "name");
    c.name = "A-very-long-environment-name-that-does-not-fit-in-sixty-four-bytes-v0";
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "longer than 63");
    c = dummy_class();
    c.obs_dim = 0;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "\"Dummy-v0\": obs_dim is 0");
    c.obs_dim = DPT_ENV_DIM_LIMIT + 1;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "obs_dim is 1048577, must be 1..1048576");
    c.obs_dim = SIZE_MAX;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "obs_dim");
    c.obs_dim = 33; /* past the 32 of env ABI 1 */
    CHECK_OK(dpt_env_class_check(&c));
    c = dummy_class();
    c.action_dim = 0;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "action_dim is 0");
    c.action_dim = DPT_ENV_DIM_LIMIT + 1;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "action_dim is 1048577");
    c = dummy_class();
    c.action_low = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "needs action_low and action_high");
    c = dummy_class();
    c.action_high = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "needs action_low and action_high");
    float lo[2] = {-1.0f, 2.0f}, hi[2] = {1.0f, 1.0f};
    c = dummy_class();
    c.action_low = lo;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "dimension 1");
    lo[1] = 0.0f;
    hi[0] = NAN;
    c.action_high = hi;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "finite");
    hi[0] = 1.0f;
    lo[0] = -INFINITY;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "finite");
    lo[0] = -1.0f;
    CHECK_OK(dpt_env_class_check(&c));
    c = dummy_class();
    c.action_kind = (dpt_action_kind_t)7;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "action_kind 7");
    c = dummy_class();
    c.action_kind = DPT_ACTION_DISCRETE;
    c.num_actions = 0;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "num_actions is 0");
    c.num_actions = (size_t)INT32_MAX + 1;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "num_actions");
    c.num_actions = 3;
    CHECK_OK(dpt_env_class_check(&c)); /* box fields are ignored for discrete */
    c = dummy_class();
    c.state_size = ((size_t)1 << 30) + 1;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "state_size");
    c = dummy_class();
    c.state_size = 0; /* a stateless env is allowed */
    CHECK_OK(dpt_env_class_check(&c));
    c.reward_threshold = NAN;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "reward_threshold");
    c = dummy_class();
    c.reset = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "reset is NULL");
    c = dummy_class();
    c.step = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "step is NULL");
}

static void test_create_errors(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    dpt_vecenv_t *v = (dpt_vecenv_t *)&v; /* must be overwritten with NULL on failure */
    CHECK_ERR(dpt_vecenv_create(NULL, cp, 1, 1, 0), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_vecenv_create(&v, NULL, 1, 1, 0), DPT_EINVAL, "NULL");
    CHECK(v == NULL);
    CHECK_ERR(dpt_vecenv_create(&v, cp, 0, 1, 0), DPT_EINVAL, "\"CartPole-v1\"");
    CHECK(v == NULL);
    CHECK_ERR(dpt_vecenv_create(&v, cp, (size_t)UINT32_MAX + 1, 1, 0), DPT_EINVAL, "at most");
    dpt_env_class_t bad = dummy_class();
    bad.obs_dim = 0;
    CHECK_ERR(dpt_vecenv_create(&v, &bad, 1, 1, 0), DPT_EINVAL, "obs_dim");
    dpt_env_class_t huge = dummy_class();
    huge.state_size = (size_t)1 << 30;
    CHECK_ERR(dpt_vecenv_create(&v, &huge, SIZE_MAX / 2, 1, 0), DPT_EINVAL, "at most");
    dpt_vecenv_destroy(NULL);

    REQUIRE_OK(dpt_vecenv_create(&v, cp, 3, 1, 0));
    CHECK(dpt_vecenv_size(v) == 3);
    CHECK(dpt_vecenv_class(v) == cp);
    CHECK(dpt_vecenv_total_steps(v) == 0 && dpt_vecenv_total_episodes(v) == 0);
    bufs_t b;
    REQUIRE(bufs_init(&b, 3, 4));
    int32_t act[3] = {0, 1, 0};
    /* Stepping before the first reset is refused. */
    CHECK_ERR(vstep(v, &b, act), DPT_ESTATE, "before dpt_vecenv_reset");
    dpt_vecenv_reset(v, NULL); /* obs may be NULL */
    CHECK_ERR(dpt_vecenv_step(NULL, act, b.obs, b.rew, b.term, b.trunc, NULL), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_vecenv_step(v, NULL, b.obs, b.rew, b.term, b.trunc, NULL), DPT_EINVAL,
              "CartPole-v1");
    CHECK_ERR(dpt_vecenv_step(v, act, NULL, b.rew, b.term, b.trunc, NULL), DPT_EINVAL, "buffers");
    CHECK_ERR(dpt_vecenv_step(v, act, b.obs, NULL, b.term, b.trunc, NULL), DPT_EINVAL, "buffers");
    CHECK_ERR(dpt_vecenv_step(v, act, b.obs, b.rew, NULL, b.trunc, NULL), DPT_EINVAL, "buffers");
    CHECK_ERR(dpt_vecenv_step(v, act, b.obs, b.rew, b.term, NULL, NULL), DPT_EINVAL, "buffers");
    CHECK(dpt_vecenv_total_steps(v) == 0);
    CHECK_OK(dpt_vecenv_step(v, act, b.obs, b.rew, b.term, b.trunc, NULL)); /* final_obs NULL */
    CHECK(dpt_vecenv_total_steps(v) == 3);
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

/* ---- CartPole-v1 ----------------------------------------------------------- */

static void cp_step_direct(const dpt_env_class_t *cp, double s[4], int32_t a, float obs[4],
                           float *r, int *term)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, 0, 0, 0, DPT_RNG_TEST);
    *term = -1;
    cp->step(s, &a, &rng, obs, r, term);
}

static void test_cartpole_by_hand(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    REQUIRE(cp);
    float obs[4], r;
    int term;
    /* From rest, push right: temp = F/(mc+mp) = 100/11, thetaacc = -(100/11) /
     * (0.5 (4/3 - 0.1/1.1)) = -600/41, xacc = 100/11 + 0.05 (600/41)/1.1 =
     * 400/41; after one Euler step of 0.02 s: x_dot = 8/41, theta_dot = -12/41. */
    double s[4] = {0, 0, 0, 0};
    cp_step_direct(cp, s, 1, obs, &r, &term);
    CHECK(s[0] == 0.0 && s[2] == 0.0);
    CHECK_CLOSE(s[1], 8.0 / 41.0, 1e-15);
    CHECK_CLOSE(s[3], -12.0 / 41.0, 1e-15);
    CHECK(obs[0] == 0.0f && obs[1] == (float)s[1] && obs[2] == 0.0f && obs[3] == (float)s[3]);
    CHECK(r == 1.0f && term == 0);
    /* Push left mirrors it. */
    double m[4] = {0, 0, 0, 0};
    cp_step_direct(cp, m, 0, obs, &r, &term);
    CHECK(m[1] == -s[1] && m[3] == -s[3]);
    /* Euler uses the old velocities for the positions. */
    double q[4] = {0.5, -1.0, 0.1, 0.3};
    double ref[4] = {0.5, -1.0, 0.1, 0.3};
    cp_step_direct(cp, q, 0, obs, &r, &term);
    ref_cartpole_step(ref, 0);
    CHECK_CLOSE(q[0], 0.5 - 0.02, 1e-15);
    CHECK_CLOSE(q[2], 0.1 + 0.02 * 0.3, 1e-15);
    for (int k = 0; k < 4; k++)
        CHECK_CLOSE(q[k], ref[k], 1e-13);
    /* Termination: |x| > 2.4 or |theta| > 12 degrees, with reward 1. */
    double a1[4] = {2.39, 1.0, 0, 0};
    cp_step_direct(cp, a1, 1, obs, &r, &term);
    CHECK(term == 1 && r == 1.0f);
    double a2[4] = {-2.39, -1.0, 0, 0};
    cp_step_direct(cp, a2, 1, obs, &r, &term);
    CHECK(term == 1);
    double a3[4] = {0, 0, 0.2094, 0.1}; /* theta -> 0.2114 > 0.20944 */
    cp_step_direct(cp, a3, 1, obs, &r, &term);
    CHECK(term == 1);
    double a4[4] = {0, 0, -0.2, -0.1}; /* theta -> -0.202: still up */
    cp_step_direct(cp, a4, 1, obs, &r, &term);
    CHECK(term == 0);
    double a5[4] = {2.3, 0, 0, 0}; /* exactly at 2.4 is not beyond */
    a5[0] = 2.4;
    cp_step_direct(cp, a5, 1, obs, &r, &term);
    CHECK(term == 0);
}

/* A whole run through the runner against the reference, across resets. */
static void test_cartpole_trajectory(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    enum { N = 3, STEPS = 400 };
    const uint64_t seed = 42;
    const uint32_t rank = 5;
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, cp, N, seed, rank));
    bufs_t b;
    REQUIRE(bufs_init(&b, N, 4));
    dpt_rng_t rr[N], ar;
    double s[N][4];
    double ret[N] = {0};
    uint32_t len[N] = {0};
    uint64_t episodes = 0;
    dpt_vecenv_reset(v, b.obs);
    for (int i = 0; i < N; i++) {
        dpt_rng_init(&rr[i], seed, rank, (uint32_t)i, DPT_RNG_ENV);
        ref_cartpole_reset(&rr[i], s[i]);
        for (int k = 0; k < 4; k++)
            CHECK(b.obs[i * 4 + k] == (float)s[i][k]);
    }
    dpt_rng_init(&ar, 7, 0, 0, DPT_RNG_TEST);
    double max_err = 0.0;
    for (int t = 0; t < STEPS; t++) {
        int32_t act[N];
        for (int i = 0; i < N; i++)
            act[i] = (int32_t)dpt_rng_below(&ar, 2);
        for (size_t j = 0; j < N * 4; j++)
            b.fin[j] = 12345.0f;
        REQUIRE_OK(vstep(v, &b, act));
        for (int i = 0; i < N; i++) {
            int term = ref_cartpole_step(s[i], act[i]);
            ret[i] += 1.0;
            len[i]++;
            CHECK(b.rew[i] == 1.0f);
            CHECK(b.term[i] == term);
            CHECK(b.trunc[i] == 0); /* random play never lasts 500 steps */
            const float *o = term ? &b.fin[i * 4] : &b.obs[i * 4];
            for (int k = 0; k < 4; k++)
                max_err = fmax(max_err, fabs((double)o[k] - s[i][k]));
            if (term) {
                episodes++;
                double rets[8];
                uint32_t lens[8];
                size_t dropped = 99;
                size_t got = dpt_vecenv_pop_episodes(v, rets, lens, 8, &dropped);
                CHECK(got == 1 && dropped == 0);
                CHECK(rets[0] == ret[i] && lens[0] == len[i]);
                ret[i] = 0.0;
                len[i] = 0;
                ref_cartpole_reset(&rr[i], s[i]);
                for (int k = 0; k < 4; k++)
                    CHECK(b.obs[i * 4 + k] == (float)s[i][k]);
            } else {
                for (int k = 0; k < 4; k++)
                    CHECK(b.fin[i * 4 + k] == 12345.0f); /* untouched */
            }
        }
    }
    CHECK(max_err < 1e-6);
    CHECK(episodes > 20);
    CHECK(dpt_vecenv_total_episodes(v) == episodes);
    CHECK(dpt_vecenv_total_steps(v) == (uint64_t)N * STEPS);
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

/* Constant action 0 tips the pole over: terminated with reward 1 on the last
 * step, the final observation beyond the threshold, a fresh episode after. */
static void test_cartpole_termination(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, cp, 1, 3, 0));
    bufs_t b;
    REQUIRE(bufs_init(&b, 1, 4));
    dpt_vecenv_reset(v, b.obs);
    int32_t a = 0;
    int t = 0;
    for (; t < 500; t++) {
        REQUIRE_OK(vstep(v, &b, &a));
        CHECK(b.rew[0] == 1.0f);
        if (b.term[0])
            break;
    }
    REQUIRE(t < 500);
    CHECK(t + 1 >= 5 && t + 1 <= 20); /* Gymnasium: about 8-10 steps */
    CHECK(b.trunc[0] == 0);
    CHECK(fabsf(b.fin[2]) > 0.2094395f || fabsf(b.fin[0]) > 2.4f);
    for (int k = 0; k < 4; k++)
        CHECK(fabsf(b.obs[k]) <= 0.05f); /* already the next episode */
    double ret;
    uint32_t len;
    CHECK(dpt_vecenv_pop_episodes(v, &ret, &len, 1, NULL) == 1);
    CHECK(ret == (double)(t + 1) && len == (uint32_t)(t + 1));
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

/* A balancing policy lasts; the runner truncates at exactly 500 steps. */
static void test_cartpole_truncation(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    enum { N = 4 };
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, cp, N, 11, 0));
    bufs_t b;
    REQUIRE(bufs_init(&b, N, 4));
    dpt_vecenv_reset(v, b.obs);
    for (int t = 1; t <= 501; t++) {
        int32_t act[N];
        for (int i = 0; i < N; i++) {
            const float *o = &b.obs[i * 4];
            act[i] = 0.1f * o[0] + 0.5f * o[1] + 10.0f * o[2] + 2.0f * o[3] > 0.0f;
        }
        REQUIRE_OK(vstep(v, &b, act));
        for (int i = 0; i < N; i++) {
            CHECK(b.term[i] == 0);
            CHECK(b.trunc[i] == (t == 500));
            CHECK(b.rew[i] == 1.0f);
        }
        if (t == 500) {
            for (int i = 0; i < N; i++) {
                CHECK(fabsf(b.fin[i * 4]) <= 2.4f && fabsf(b.fin[i * 4 + 2]) <= 0.2094395f);
                for (int k = 0; k < 4; k++)
                    CHECK(fabsf(b.obs[i * 4 + k]) <= 0.05f);
            }
        }
    }
    double rets[N + 1];
    uint32_t lens[N + 1];
    CHECK(dpt_vecenv_pop_episodes(v, rets, lens, N + 1, NULL) == N);
    for (int i = 0; i < N; i++)
        CHECK(rets[i] == 500.0 && lens[i] == 500);
    CHECK(dpt_vecenv_total_episodes(v) == N);
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

static void test_cartpole_reset_range(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    enum { N = 2000 };
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, cp, N, 5, 1));
    float *obs = malloc(N * 4 * sizeof *obs);
    REQUIRE(obs);
    dpt_vecenv_reset(v, obs);
    float lo[4] = {1, 1, 1, 1}, hi[4] = {-1, -1, -1, -1};
    double mean[4] = {0};
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 4; k++) {
            float x = obs[i * 4 + k];
            CHECK(x >= -0.05f && x <= 0.05f);
            lo[k] = fminf(lo[k], x);
            hi[k] = fmaxf(hi[k], x);
            mean[k] += (double)x / N;
        }
    for (int k = 0; k < 4; k++) { /* uniform over the whole range */
        CHECK(lo[k] < -0.049f && hi[k] > 0.049f);
        CHECK(fabs(mean[k]) < 0.003);
    }
    free(obs);
    dpt_vecenv_destroy(v);
}

/* ---- Acrobot-v1 ------------------------------------------------------------ */

static void ac_step_direct(const dpt_env_class_t *ac, double s[4], int32_t a, float obs[6],
                           float *r, int *term)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, 0, 0, 0, DPT_RNG_TEST);
    *term = -1;
    ac->step(s, &a, &rng, obs, r, term);
}

static void test_acrobot_rk4(void)
{
    const dpt_env_class_t *ac = dpt_env_find("Acrobot-v1");
    REQUIRE(ac);
    float obs[6], r;
    int term;
    /* Hanging at rest without torque is an equilibrium. */
    double s0[4] = {0, 0, 0, 0};
    ac_step_direct(ac, s0, 1, obs, &r, &term);
    for (int k = 0; k < 4; k++)
        CHECK(fabs(s0[k]) < 1e-12);
    CHECK(r == -1.0f && term == 0);
    CHECK(obs[0] == 1.0f && obs[2] == 1.0f && fabsf(obs[1]) < 1e-12f);
    /* General states and every torque against the reference RK4. */
    const double starts[][4] = {{0.05, -0.08, 0.02, 0.09},
                                {1.0, -0.5, 2.0, -3.0},
                                {-2.5, 2.0, -5.0, 7.0},
                                {3.0, 0.3, 1.5, -2.0}};
    for (size_t j = 0; j < sizeof starts / sizeof starts[0]; j++)
        for (int32_t a = 0; a < 3; a++) {
            double s[4], ref[4], o[6];
            memcpy(s, starts[j], sizeof s);
            memcpy(ref, starts[j], sizeof ref);
            ac_step_direct(ac, s, a, obs, &r, &term);
            int rterm = ref_acrobot_step(ref, a, NULL);
            for (int k = 0; k < 4; k++)
                CHECK_CLOSE(s[k], ref[k], 1e-11);
            ref_acrobot_obs(ref, o);
            for (int k = 0; k < 6; k++)
                CHECK_CLOSE(obs[k], o[k], 1e-6);
            CHECK(term == rterm);
            CHECK(r == (rterm ? 0.0f : -1.0f));
        }
    /* Wrapping: theta1 crosses pi and comes back near -pi. */
    double w[4] = {PI - 0.01, 0, 2.0, 0}, wr[4], raw[4];
    memcpy(wr, w, sizeof w);
    ac_step_direct(ac, w, 1, obs, &r, &term);
    ref_acrobot_step(wr, 1, raw);
    CHECK(raw[0] > PI);
    CHECK(w[0] < 0 && w[0] >= -PI);
    CHECK_CLOSE(w[0], wr[0], 1e-11);
    /* Velocity clipping at 4 pi and 9 pi. */
    double c[4] = {0, 0, 20.0, -40.0}, cr[4];
    memcpy(cr, c, sizeof c);
    ac_step_direct(ac, c, 2, obs, &r, &term);
    ref_acrobot_step(cr, 2, raw);
    CHECK(fabs(raw[2]) > 4 * PI && fabs(raw[3]) > 9 * PI);
    CHECK(fabs(c[2]) == 4 * PI && fabs(c[3]) == 9 * PI);
    CHECK(c[2] == cr[2] && c[3] == cr[3]);
    /* Termination: the free end above the bar gives reward 0. Upright
     * (theta1 = pi) is above it: -cos(pi) - cos(pi) = 2 > 1. */
    double up[4] = {PI, 0, 0, 0};
    ac_step_direct(ac, up, 1, obs, &r, &term);
    CHECK(term == 1 && r == 0.0f);
    /* Level (theta1 = pi/2, theta2 = 0): -0 - 0 = 0, not above. */
    double lvl[4] = {PI / 2, 0, 0, 0};
    ac_step_direct(ac, lvl, 1, obs, &r, &term);
    CHECK(term == 0 && r == -1.0f);
}

static void test_acrobot_trajectory(void)
{
    const dpt_env_class_t *ac = dpt_env_find("Acrobot-v1");
    enum { N = 2, STEPS = 60 };
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, ac, N, 9, 2));
    bufs_t b;
    REQUIRE(bufs_init(&b, N, 6));
    dpt_vecenv_reset(v, b.obs);
    double s[N][4], o[6];
    dpt_rng_t ar;
    dpt_rng_init(&ar, 3, 0, 0, DPT_RNG_TEST);
    for (int i = 0; i < N; i++) {
        dpt_rng_t rr;
        dpt_rng_init(&rr, 9, 2, (uint32_t)i, DPT_RNG_ENV);
        for (int k = 0; k < 4; k++) {
            s[i][k] = (double)(float)ref_uniform(&rr, -0.1, 0.1); /* float32 as in acrobot.py */
            CHECK(fabs(s[i][k]) <= 0.1);
        }
        ref_acrobot_obs(s[i], o);
        for (int k = 0; k < 6; k++)
            CHECK(b.obs[i * 6 + k] == (float)o[k]);
    }
    double max_err = 0;
    for (int t = 0; t < STEPS; t++) {
        int32_t act[N];
        for (int i = 0; i < N; i++)
            act[i] = (int32_t)dpt_rng_below(&ar, 3);
        REQUIRE_OK(vstep(v, &b, act));
        for (int i = 0; i < N; i++) {
            int term = ref_acrobot_step(s[i], act[i], NULL);
            CHECK(b.term[i] == term);
            CHECK(b.rew[i] == (term ? 0.0f : -1.0f));
            ref_acrobot_obs(s[i], o);
            for (int k = 0; k < 6; k++)
                max_err = fmax(max_err, fabs((double)b.obs[i * 6 + k] - o[k]));
        }
    }
    CHECK(max_err < 1e-5);
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

/* ---- MountainCar-v0 -------------------------------------------------------- */

static void mc_step_direct(double s[2], int32_t a, float obs[2], float *r, int *term)
{
    const dpt_env_class_t *mc = dpt_env_find("MountainCar-v0");
    dpt_rng_t rng;
    dpt_rng_init(&rng, 0, 0, 0, DPT_RNG_TEST);
    *term = -1;
    mc->step(s, &a, &rng, obs, r, term);
}

static void test_mountaincar(void)
{
    float obs[2], r;
    int term;
    /* By hand: v = 0 + 0.001 - 0.0025 cos(-1.5) = 0.001 - 0.0025 * 0.0707372016677029. */
    double s[2] = {-0.5, 0.0};
    mc_step_direct(s, 2, obs, &r, &term);
    CHECK_CLOSE(s[1], 0.000823156995830743, 1e-14);
    CHECK_CLOSE(s[0], -0.499176843004169257, 1e-14);
    CHECK(r == -1.0f && term == 0);
    CHECK(obs[0] == (float)s[0] && obs[1] == (float)s[1]);
    /* No push: gravity only; push left. */
    double s1[2] = {-0.3, 0.01};
    mc_step_direct(s1, 1, obs, &r, &term);
    CHECK_CLOSE(s1[1], 0.01 - 0.0025 * cos(-0.9), 1e-15);
    CHECK_CLOSE(s1[0], -0.3 + s1[1], 1e-15);
    double s0[2] = {-0.3, 0.01};
    mc_step_direct(s0, 0, obs, &r, &term);
    CHECK_CLOSE(s0[1], 0.01 - 0.001 - 0.0025 * cos(-0.9), 1e-15);
    /* Speed limit 0.07. */
    double sp[2] = {-0.52, 0.0699};
    mc_step_direct(sp, 2, obs, &r, &term);
    CHECK(sp[1] == 0.07);
    /* Left wall: position clipped to -1.2, negative velocity zeroed. */
    double wl[2] = {-1.19, -0.05};
    mc_step_direct(wl, 0, obs, &r, &term);
    CHECK(wl[0] == -1.2 && wl[1] == 0.0);
    /* Goal: position >= 0.5 with velocity >= 0 terminates, reward still -1. */
    double g[2] = {0.49, 0.02};
    mc_step_direct(g, 2, obs, &r, &term);
    CHECK(g[0] >= 0.5 && term == 1 && r == -1.0f);
    double gv[2] = {0.55, -0.001}; /* past the goal but moving back: not done */
    mc_step_direct(gv, 1, obs, &r, &term);
    CHECK(gv[0] >= 0.5 && gv[1] < 0 && term == 0);
    double ng[2] = {0.45, 0.02};
    mc_step_direct(ng, 2, obs, &r, &term);
    CHECK(ng[0] < 0.5 && term == 0);
    /* Right edge: clipped at 0.6. */
    double re[2] = {0.59, 0.06};
    mc_step_direct(re, 2, obs, &r, &term);
    CHECK(re[0] == 0.6 && term == 1);

    /* Through the runner: reset range, then 200 steps of no push truncate. */
    const dpt_env_class_t *mc = dpt_env_find("MountainCar-v0");
    enum { N = 64 };
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, mc, N, 8, 0));
    bufs_t b;
    REQUIRE(bufs_init(&b, N, 2));
    dpt_vecenv_reset(v, b.obs);
    for (int i = 0; i < N; i++) {
        dpt_rng_t rr;
        dpt_rng_init(&rr, 8, 0, (uint32_t)i, DPT_RNG_ENV);
        double p = ref_uniform(&rr, -0.6, -0.4);
        CHECK(b.obs[i * 2] == (float)p && b.obs[i * 2 + 1] == 0.0f);
        CHECK(p >= -0.6 && p < -0.4);
    }
    int32_t act[N];
    for (int i = 0; i < N; i++)
        act[i] = 1;
    for (int t = 1; t <= 200; t++) {
        REQUIRE_OK(vstep(v, &b, act));
        for (int i = 0; i < N; i++) {
            CHECK(b.term[i] == 0 && b.rew[i] == -1.0f);
            CHECK(b.trunc[i] == (t == 200));
        }
    }
    double rets[N];
    uint32_t lens[N];
    CHECK(dpt_vecenv_pop_episodes(v, rets, lens, N, NULL) == N);
    CHECK(rets[0] == -200.0 && lens[N - 1] == 200);
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

/* ---- Pendulum-v1 ----------------------------------------------------------- */

static void pd_step_direct(double s[2], float u, float obs[3], float *r, int *term)
{
    const dpt_env_class_t *pd = dpt_env_find("Pendulum-v1");
    dpt_rng_t rng;
    dpt_rng_init(&rng, 0, 0, 0, DPT_RNG_TEST);
    *term = -1;
    pd->step(s, &u, &rng, obs, r, term);
}

static void test_pendulum(void)
{
    float obs[3], r;
    int term;
    /* Upright at rest with full torque: cost 0.001 * 4; thdot' = 3 u dt = 0.3;
     * th' = 0.3 * 0.05 = 0.015. */
    double s[2] = {0.0, 0.0};
    pd_step_direct(s, 2.0f, obs, &r, &term);
    CHECK_CLOSE(r, -0.004, 1e-7);
    CHECK_CLOSE(s[1], 0.3, 1e-15);
    CHECK_CLOSE(s[0], 0.015, 1e-15);
    CHECK(term == 0);
    CHECK(obs[0] == (float)cos(0.015) && obs[1] == (float)sin(0.015) && obs[2] == 0.3f);
    /* Hanging down (th = pi normalizes to -pi): cost pi^2 + 0.1 + 0.001. */
    double h[2] = {PI, 1.0};
    pd_step_direct(h, -1.0f, obs, &r, &term);
    CHECK_CLOSE(r, -(PI * PI + 0.1 + 0.001), 1e-6);
    CHECK_CLOSE(h[1], 1.0 + (15.0 * sin(PI) - 3.0) * 0.05, 1e-15);
    CHECK_CLOSE(h[0], PI + h[1] * 0.05, 1e-15);
    /* The angle is normalized in the cost only; the state is not wrapped. */
    double w[2] = {2 * PI + 0.5, 0.0};
    pd_step_direct(w, 0.0f, obs, &r, &term);
    CHECK_CLOSE(r, -0.25, 1e-6);
    CHECK(w[0] > 2 * PI);
    double wn[2] = {-2 * PI - 0.5, 0.0};
    pd_step_direct(wn, 0.0f, obs, &r, &term);
    CHECK_CLOSE(r, -0.25, 1e-6);
    /* Speed clipping at 8. */
    double c[2] = {PI / 2, 7.9};
    pd_step_direct(c, 2.0f, obs, &r, &term);
    CHECK(c[1] == 8.0);
    CHECK_CLOSE(c[0], PI / 2 + 0.4, 1e-15);
    CHECK(obs[2] == 8.0f);
    /* The env clips a torque itself when called directly. */
    double u1[2] = {0.3, 0.2}, u2[2] = {0.3, 0.2};
    float r1, r2, o2[3];
    pd_step_direct(u1, 7.0f, obs, &r1, &term);
    pd_step_direct(u2, 2.0f, o2, &r2, &term);
    CHECK(u1[0] == u2[0] && u1[1] == u2[1] && r1 == r2);
}

static void test_pendulum_runner(void)
{
    const dpt_env_class_t *pd = dpt_env_find("Pendulum-v1");
    enum { N = 3 };
    dpt_vecenv_t *v, *w;
    REQUIRE_OK(dpt_vecenv_create(&v, pd, N, 4, 0));
    REQUIRE_OK(dpt_vecenv_create(&w, pd, N, 4, 0));
    bufs_t b, c;
    REQUIRE(bufs_init(&b, N, 3) && bufs_init(&c, N, 3));
    dpt_vecenv_reset(v, b.obs);
    dpt_vecenv_reset(w, c.obs);
    double s[N][2];
    for (int i = 0; i < N; i++) {
        dpt_rng_t rr;
        dpt_rng_init(&rr, 4, 0, (uint32_t)i, DPT_RNG_ENV);
        s[i][0] = ref_uniform(&rr, -PI, PI);
        s[i][1] = ref_uniform(&rr, -1.0, 1.0);
        CHECK(b.obs[i * 3] == (float)cos(s[i][0]) && b.obs[i * 3 + 1] == (float)sin(s[i][0]));
        CHECK(b.obs[i * 3 + 2] == (float)s[i][1]);
    }
    /* Box clipping: 5 acts as 2, -9 as -2; the caller's actions are untouched. */
    float big[N] = {5.0f, -9.0f, 1.0f}, clipped[N] = {2.0f, -2.0f, 1.0f};
    for (int t = 1; t <= 200; t++) {
        REQUIRE_OK(vstep(v, &b, big));
        REQUIRE_OK(vstep(w, &c, clipped));
        CHECK(memcmp(b.obs, c.obs, sizeof(float) * N * 3) == 0);
        CHECK(memcmp(b.rew, c.rew, sizeof(float) * N) == 0);
        for (int i = 0; i < N; i++) {
            /* Reference: the documented update in double. */
            double th = s[i][0], thd = s[i][1], u = clipped[i];
            double an = th - 2 * PI * floor((th + PI) / (2 * PI));
            double rew = -(an * an + 0.1 * thd * thd + 0.001 * u * u);
            thd = ref_clip(thd + (15.0 * sin(th) + 3.0 * u) * 0.05, 8.0);
            th += thd * 0.05;
            s[i][0] = th, s[i][1] = thd;
            CHECK_CLOSE(b.rew[i], rew, 1e-5);
            CHECK(b.term[i] == 0);
            CHECK(b.trunc[i] == (t == 200));
            const float *o = t == 200 ? &b.fin[i * 3] : &b.obs[i * 3];
            CHECK_CLOSE(o[0], cos(th), 1e-5);
            CHECK_CLOSE(o[2], thd, 1e-5);
        }
    }
    CHECK(big[0] == 5.0f && big[1] == -9.0f);
    /* Non-finite actions: DPT_EINVAL naming the env; nothing stepped. */
    size_t bytes = dpt_vecenv_state_bytes(v);
    unsigned char *before = malloc(bytes), *after = malloc(bytes);
    REQUIRE(before && after);
    CHECK_OK(dpt_vecenv_save_state(v, before, bytes));
    float bad[N] = {0.5f, NAN, 0.0f};
    CHECK_ERR(vstep(v, &b, bad), DPT_EINVAL, "\"Pendulum-v1\" #1: action[0] is nan");
    float inf[N] = {0.5f, 0.0f, INFINITY};
    CHECK_ERR(vstep(v, &b, inf), DPT_EINVAL, "#2");
    CHECK_OK(dpt_vecenv_save_state(v, after, bytes));
    CHECK(memcmp(before, after, bytes) == 0);
    CHECK(dpt_vecenv_total_steps(v) == (uint64_t)N * 200);
    free(before), free(after);
    bufs_free(&b), bufs_free(&c);
    dpt_vecenv_destroy(v);
    dpt_vecenv_destroy(w);
}

/* ---- runner: validation, reproducibility ------------------------------------ */

static void test_discrete_validation(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    enum { N = 4 };
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, cp, N, 1, 0));
    bufs_t b;
    REQUIRE(bufs_init(&b, N, 4));
    dpt_vecenv_reset(v, b.obs);
    float obs0[N * 4];
    memcpy(obs0, b.obs, sizeof obs0);
    size_t bytes = dpt_vecenv_state_bytes(v);
    unsigned char *before = malloc(bytes), *after = malloc(bytes);
    REQUIRE(before && after);
    CHECK_OK(dpt_vecenv_save_state(v, before, bytes));
    int32_t hi[N] = {0, 1, 1, 2}, neg[N] = {-1, 0, 0, 0}, min[N] = {0, INT32_MIN, 0, 0};
    CHECK_ERR(vstep(v, &b, hi), DPT_EINVAL, "\"CartPole-v1\" #3: action 2 is out of range [0, 2)");
    CHECK_ERR(vstep(v, &b, neg), DPT_EINVAL, "#0: action -1");
    CHECK_ERR(vstep(v, &b, min), DPT_EINVAL, "#1");
    CHECK(strstr(dpt_last_error(), "no env was stepped") != NULL);
    CHECK_OK(dpt_vecenv_save_state(v, after, bytes));
    CHECK(memcmp(before, after, bytes) == 0);
    CHECK(memcmp(obs0, b.obs, sizeof obs0) == 0); /* outputs untouched */
    CHECK(dpt_vecenv_total_steps(v) == 0);
    int32_t ok[N] = {0, 1, 1, 0};
    CHECK_OK(vstep(v, &b, ok));
    free(before), free(after);
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

/* dpt_vecenv_step_masked leaves inactive envs as they are (outputs, state,
 * counters) and steps the others as dpt_vecenv_step does;
 * dpt_vecenv_env_state sets a chosen state. */
static void test_step_masked_and_state(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    enum { N = 3 };
    dpt_vecenv_t *v, *w;
    REQUIRE_OK(dpt_vecenv_create(&v, cp, N, 7, 0));
    REQUIRE_OK(dpt_vecenv_create(&w, cp, N, 7, 0));
    bufs_t b, c;
    REQUIRE(bufs_init(&b, N, 4) && bufs_init(&c, N, 4));
    dpt_vecenv_reset(v, b.obs);
    dpt_vecenv_reset(w, c.obs);
    double reset1[4];
    memcpy(reset1, dpt_vecenv_env_state(v, 1), sizeof reset1);
    for (size_t k = 0; k < N * 4; k++)
        b.obs[k] = -7.0f;
    b.rew[1] = -7.0f, b.term[1] = 9, b.trunc[1] = 9;
    const uint8_t active[N] = {1, 0, 1};
    /* Env 1's action is out of range, but it is not stepped. */
    int32_t act[N] = {0, 5, 1}, full[N] = {0, 1, 1};
    CHECK_OK(dpt_vecenv_step_masked(v, active, act, b.obs, b.rew, b.term, b.trunc, b.fin));
    CHECK_OK(vstep(w, &c, full));
    CHECK(memcmp(b.obs, c.obs, 4 * sizeof(float)) == 0);
    CHECK(memcmp(b.obs + 8, c.obs + 8, 4 * sizeof(float)) == 0);
    CHECK(b.obs[4] == -7.0f && b.obs[7] == -7.0f);
    CHECK(b.rew[1] == -7.0f && b.term[1] == 9 && b.trunc[1] == 9);
    CHECK(b.rew[0] == 1.0f && b.rew[2] == 1.0f);
    CHECK(memcmp(dpt_vecenv_env_state(v, 1), reset1, sizeof reset1) == 0);
    CHECK(dpt_vecenv_total_steps(v) == 2);
    int32_t bad[N] = {0, 0, 2};
    CHECK_ERR(dpt_vecenv_step_masked(v, active, bad, b.obs, b.rew, b.term, b.trunc, NULL),
              DPT_EINVAL, "#2: action 2 is out of range");
    CHECK(dpt_vecenv_total_steps(v) == 2);
    /* A NULL mask is dpt_vecenv_step. */
    CHECK_OK(dpt_vecenv_step_masked(v, NULL, full, b.obs, b.rew, b.term, b.trunc, NULL));
    CHECK(dpt_vecenv_total_steps(v) == 5);

    /* A chosen state: the next step goes on from it, as the class's step. */
    const double chosen[4] = {0.01, -0.2, 0.03, 0.4};
    memcpy(dpt_vecenv_env_state(v, 2), chosen, sizeof chosen);
    double ref[4];
    memcpy(ref, chosen, sizeof ref);
    float ref_obs[4], ref_rew;
    int ref_term, one = 1;
    dpt_rng_t rng;
    dpt_rng_init(&rng, 0, 0, 0, DPT_RNG_ENV);
    cp->step(ref, &one, &rng, ref_obs, &ref_rew, &ref_term);
    CHECK_OK(vstep(v, &b, full));
    CHECK(memcmp(b.obs + 8, ref_obs, sizeof ref_obs) == 0);
    CHECK(memcmp(dpt_vecenv_env_state(v, 2), ref, sizeof ref) == 0);
    CHECK(dpt_vecenv_env_state(v, N) == NULL);
    CHECK(dpt_vecenv_env_state(NULL, 0) == NULL);
    bufs_free(&b), bufs_free(&c);
    dpt_vecenv_destroy(v);
    dpt_vecenv_destroy(w);
}

/* Runs `steps` random steps and returns a hash of every output. */
static uint64_t run_hash(const dpt_env_class_t *cls, size_t n, uint64_t seed, uint32_t rank,
                         int steps, float *first_obs)
{
    dpt_vecenv_t *v;
    bufs_t b;
    if (dpt_vecenv_create(&v, cls, n, seed, rank))
        return 0;
    if (!bufs_init(&b, n, cls->obs_dim)) {
        dpt_vecenv_destroy(v);
        return 0;
    }
    dpt_vecenv_reset(v, b.obs);
    if (first_obs)
        memcpy(first_obs, b.obs, n * cls->obs_dim * sizeof(float));
    dpt_rng_t ar;
    dpt_rng_init(&ar, 99, 0, 0, DPT_RNG_TEST);
    uint64_t h = 0xcbf29ce484222325ull;
    float fa[64];
    int32_t ia[64];
    for (int t = 0; t < steps; t++) {
        for (size_t i = 0; i < n; i++) {
            uint32_t na = cls->num_actions ? (uint32_t)cls->num_actions : 1;
            ia[i] = (int32_t)dpt_rng_below(&ar, na);
            fa[i] = 4.0f * dpt_rng_uniform(&ar) - 2.0f;
        }
        if (vstep(v, &b, cls->action_kind == DPT_ACTION_BOX ? (const void *)fa : (const void *)ia))
            break;
        const unsigned char *p = (const unsigned char *)b.obs;
        for (size_t j = 0; j < n * cls->obs_dim * sizeof(float); j++)
            h = (h ^ p[j]) * 0x100000001b3ull;
        p = (const unsigned char *)b.rew;
        for (size_t j = 0; j < n * sizeof(float); j++)
            h = (h ^ p[j]) * 0x100000001b3ull;
        for (size_t j = 0; j < n; j++)
            h = (h ^ (uint64_t)(b.term[j] * 2 + b.trunc[j])) * 0x100000001b3ull;
    }
    bufs_free(&b);
    dpt_vecenv_destroy(v);
    return h;
}

static void test_reproducibility(void)
{
    for (size_t e = 0; e < dpt_env_count(); e++) {
        const dpt_env_class_t *c = dpt_env_get(e);
        /* A one-hot of two tokens, or a MinAtar grid, repeats by chance: the
         * last observations of those are compared only through the
         * trajectory hashes. */
        int continuous =
            strcmp(c->name, "RepeatPrevious-v0") != 0 && strncmp(c->name, "MinAtar/", 8) != 0;
        float *o1 = malloc(3 * 8 * c->obs_dim * sizeof *o1), *o2 = o1 + 8 * c->obs_dim;
        float *o3 = o2 + 8 * c->obs_dim;
        REQUIRE(o1 != NULL);
        uint64_t h1 = run_hash(c, 8, 17, 0, 300, o1);
        uint64_t h2 = run_hash(c, 8, 17, 0, 300, o2);
        CHECK(h1 != 0 && h1 == h2);
        CHECK(memcmp(o1, o2, 8 * c->obs_dim * sizeof(float)) == 0);
        /* Another rank, another seed: other envs. */
        CHECK(run_hash(c, 8, 17, 1, 300, o3) != h1);
        CHECK(!continuous || memcmp(o1, o3, 8 * c->obs_dim * sizeof(float)) != 0);
        CHECK(run_hash(c, 8, 18, 0, 300, NULL) != h1);
        /* Another index within the runner: env 0 and env 1 differ. */
        CHECK(!continuous || memcmp(o1, o1 + c->obs_dim, c->obs_dim * sizeof(float)) != 0);
        free(o1);
    }
}

/* ---- runner with env classes written here ----------------------------------- */

/* Counter: every episode lasts 3 steps and pays the episode's number per
 * step, so episode e (1-based, per env) returns 3 e. The state is zeroed
 * before the first reset and kept across resets. */
typedef struct counter_state {
    uint32_t t, ep;
} counter_state_t;

static void counter_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)rng;
    counter_state_t *s = state;
    s->t = 0;
    s->ep++;
    obs[0] = (float)s->ep;
    obs[1] = 0.0f;
}

static void counter_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                         int *terminated)
{
    (void)action, (void)rng;
    counter_state_t *s = state;
    s->t++;
    obs[0] = (float)s->ep;
    obs[1] = (float)s->t;
    *reward = (float)s->ep;
    *terminated = s->t == 3;
}

static const dpt_env_class_t counter_class = {
    .name = "Counter-v0",
    .obs_dim = 2,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 1,
    .state_size = sizeof(counter_state_t),
    .reset = counter_reset,
    .step = counter_step,
};

static void test_episode_stats(void)
{
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, &counter_class, 2, 1, 0));
    bufs_t b;
    REQUIRE(bufs_init(&b, 2, 2));
    dpt_vecenv_reset(v, b.obs);
    CHECK(b.obs[0] == 1.0f && b.obs[2] == 1.0f); /* zeroed state, then ep = 1 */
    int32_t act[2] = {0, 0};
    for (int t = 0; t < 30; t++) /* 10 episodes per env */
        REQUIRE_OK(vstep(v, &b, act));
    CHECK(dpt_vecenv_total_episodes(v) == 20);
    CHECK(b.obs[0] == 11.0f && b.obs[1] == 0.0f); /* the 11th episode started */
    CHECK(b.fin[0] == 10.0f && b.fin[1] == 3.0f); /* the 10th ended at t = 3 */
    double rets[32];
    uint32_t lens[32];
    size_t dropped = 99;
    CHECK(dpt_vecenv_pop_episodes(v, rets, lens, 5, &dropped) == 5);
    CHECK(dropped == 0);
    /* Completion order: env 0 then env 1 within a step. */
    CHECK(rets[0] == 3.0 && rets[1] == 3.0 && rets[2] == 6.0 && rets[4] == 9.0);
    CHECK(lens[0] == 3 && lens[4] == 3);
    CHECK(dpt_vecenv_pop_episodes(v, NULL, lens, 3, NULL) == 3); /* NULL outputs allowed */
    CHECK(dpt_vecenv_pop_episodes(v, rets, NULL, 32, NULL) == 12);
    CHECK(rets[0] == 15.0 && rets[11] == 30.0);
    CHECK(dpt_vecenv_pop_episodes(v, rets, lens, 32, &dropped) == 0);
    /* Overflow: 4100 episodes without a pop keep the newest 4096. */
    dpt_vecenv_t *w;
    REQUIRE_OK(dpt_vecenv_create(&w, &counter_class, 1, 1, 0));
    dpt_vecenv_reset(w, NULL);
    for (int t = 0; t < 3 * 4100; t++)
        REQUIRE_OK(vstep(w, &b, act));
    double *r2 = malloc(4200 * sizeof *r2);
    uint32_t *l2 = malloc(4200 * sizeof *l2);
    REQUIRE(r2 && l2);
    CHECK(dpt_vecenv_pop_episodes(w, r2, l2, 4200, &dropped) == 4096);
    CHECK(dropped == 4);
    CHECK(r2[0] == 3.0 * 5 && r2[4095] == 3.0 * 4100);
    CHECK(dpt_vecenv_pop_episodes(w, r2, l2, 4200, &dropped) == 0 && dropped == 0);
    CHECK(dpt_vecenv_total_episodes(w) == 4100);
    free(r2), free(l2);
    bufs_free(&b);
    dpt_vecenv_destroy(v);
    dpt_vecenv_destroy(w);
}

/* Limit: action 1 ends the episode (terminated); otherwise the runner
 * truncates after 4 steps. */
static void limit_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)state, (void)rng;
    obs[0] = -1.0f;
}

static void limit_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                       int *terminated)
{
    (void)rng;
    int *t = state;
    ++*t;
    obs[0] = (float)*t;
    *reward = 0.5f;
    *terminated = *(const int32_t *)action == 1;
}

static void test_truncation_rules(void)
{
    dpt_env_class_t c = {0};
    c.name = "Limit-v0";
    c.obs_dim = 1;
    c.action_kind = DPT_ACTION_DISCRETE;
    c.num_actions = 2;
    c.max_episode_steps = 4;
    c.state_size = sizeof(int);
    c.reset = limit_reset;
    c.step = limit_step;
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, &c, 2, 1, 0));
    bufs_t b;
    REQUIRE(bufs_init(&b, 2, 1));
    dpt_vecenv_reset(v, b.obs);
    /* env 0 plays 0 (truncated at 4); env 1 plays 0 then 1 at the 4th step:
     * terminated and truncated are exclusive, terminated wins. */
    for (int t = 1; t <= 4; t++) {
        int32_t act[2] = {0, t == 4};
        REQUIRE_OK(vstep(v, &b, act));
        CHECK(b.term[0] == 0 && b.trunc[0] == (t == 4));
        CHECK(b.term[1] == (t == 4) && b.trunc[1] == 0);
        CHECK(b.rew[0] == 0.5f && b.rew[1] == 0.5f);
    }
    CHECK(b.obs[0] == -1.0f && b.fin[0] == 4.0f && b.fin[1] == 4.0f);
    double rets[4];
    uint32_t lens[4];
    CHECK(dpt_vecenv_pop_episodes(v, rets, lens, 4, NULL) == 2);
    CHECK(rets[0] == 2.0 && lens[0] == 4 && lens[1] == 4);
    /* Step counts restart after the reset; an early termination. */
    int32_t end[2] = {1, 0};
    REQUIRE_OK(vstep(v, &b, end));
    CHECK(b.term[0] == 1 && b.trunc[0] == 0 && b.term[1] == 0 && b.trunc[1] == 0);
    /* A reset abandons running episodes without recording them. */
    dpt_vecenv_reset(v, b.obs);
    CHECK(dpt_vecenv_pop_episodes(v, rets, lens, 4, NULL) == 1);
    CHECK(lens[0] == 1);
    for (int t = 1; t <= 4; t++) {
        int32_t act[2] = {0, 0};
        REQUIRE_OK(vstep(v, &b, act));
        CHECK(b.trunc[1] == (t == 4)); /* env 1 restarted too */
    }
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

/* Echo: a 2-D box env that observes the (clipped) action it got and one
 * uniform draw from its own stream. */
static void echo_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)state;
    obs[0] = obs[1] = 0.0f;
    obs[2] = dpt_rng_uniform(rng);
}

static void echo_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                      int *terminated)
{
    (void)state;
    const float *a = action;
    obs[0] = a[0];
    obs[1] = a[1];
    obs[2] = dpt_rng_uniform(rng);
    *reward = a[0] + a[1];
    *terminated = 0;
}

static void test_box_clipping(void)
{
    dpt_env_class_t c = {0};
    c.name = "Echo-v0";
    c.obs_dim = 3;
    c.action_kind = DPT_ACTION_BOX;
    c.action_dim = 2;
    static const float lo[2] = {-1.0f, 0.0f}, hi[2] = {1.0f, 10.0f};
    c.action_low = lo;
    c.action_high = hi;
    c.state_size = 0;
    c.reset = echo_reset;
    c.step = echo_step;
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, &c, 3, 6, 0));
    bufs_t b;
    REQUIRE(bufs_init(&b, 3, 3));
    dpt_vecenv_reset(v, b.obs);
    float act[6] = {-3.0f, 20.0f, 0.25f, 5.0f, 1.0f, -0.0001f};
    REQUIRE_OK(vstep(v, &b, act));
    CHECK(b.obs[0] == -1.0f && b.obs[1] == 10.0f);
    CHECK(b.obs[3] == 0.25f && b.obs[4] == 5.0f);
    CHECK(b.obs[6] == 1.0f && b.obs[7] == 0.0f);
    CHECK(b.rew[0] == 9.0f);
    CHECK(act[0] == -3.0f && act[5] == -0.0001f);
    /* The env's own stream: env i draws from (6, 0, i, DPT_RNG_ENV). */
    for (uint32_t i = 0; i < 3; i++) {
        dpt_rng_t r;
        dpt_rng_init(&r, 6, 0, i, DPT_RNG_ENV);
        dpt_rng_uniform(&r);
        CHECK(b.obs[i * 3 + 2] == dpt_rng_uniform(&r));
    }
    act[3] = -INFINITY;
    CHECK_ERR(vstep(v, &b, act), DPT_EINVAL, "\"Echo-v0\" #1: action[1] is -inf");
    bufs_free(&b);
    dpt_vecenv_destroy(v);
}

/* Stepping disjoint ranges (rl/env_internal.h), then recording their
 * episodes in step order, matches stepping the whole runner: the same
 * observations, rewards, flags, episodes (returns, lengths, order) and
 * step count; bad ranges and a bad action in the range are refused. */
static void test_step_range(void)
{
    const dpt_env_class_t *c = dpt_env_find("CartPole-v1");
    REQUIRE(c);
    enum { N = 5, STEPS = 300 };
    dpt_vecenv_t *whole, *parts;
    REQUIRE_OK(dpt_vecenv_create(&whole, c, N, 11, 0));
    REQUIRE_OK(dpt_vecenv_create(&parts, c, N, 11, 0));
    float ow[N * 4], op[N * 4], fw[N * 4], fp[N * 4], rw[N], rp[N], act_scratch[1];
    uint8_t tw[N], uw[N], tp[N], up[N];
    double ep_ret[N];
    uint32_t ep_len[N];
    dpt_vecenv_reset(whole, ow);
    dpt_vecenv_reset(parts, op);
    dpt_rng_t r;
    dpt_rng_init(&r, 3, 0, 0, DPT_RNG_TEST);
    int same = 1;
    for (int s = 0; s < STEPS; s++) {
        int32_t a[N];
        for (int i = 0; i < N; i++)
            a[i] = (int32_t)dpt_rng_below(&r, 2);
        REQUIRE_OK(dpt_vecenv_step(whole, a, ow, rw, tw, uw, fw));
        /* Ranges [3, 5) and [0, 3), the later one first. */
        REQUIRE_OK(dpt__vecenv_step_range(parts, 3, 5, a, op, rp, tp, up, fp, act_scratch, ep_ret,
                                          ep_len));
        REQUIRE_OK(dpt__vecenv_step_range(parts, 0, 3, a, op, rp, tp, up, fp, act_scratch, ep_ret,
                                          ep_len));
        dpt__vecenv_record(parts, N, 0.0, 0, 0);
        for (int i = 0; i < N; i++)
            if (tp[i] | up[i])
                dpt__vecenv_record(parts, 0, ep_ret[i], ep_len[i], 1);
        same &= !memcmp(ow, op, sizeof ow) && !memcmp(rw, rp, sizeof rw) &&
                !memcmp(tw, tp, sizeof tw) && !memcmp(uw, up, sizeof uw);
    }
    CHECK(same);
    CHECK(dpt_vecenv_total_steps(whole) == dpt_vecenv_total_steps(parts));
    CHECK(dpt_vecenv_total_episodes(whole) == dpt_vecenv_total_episodes(parts));
    CHECK(dpt_vecenv_total_episodes(whole) > 10);
    double rw_[64], rp_[64];
    uint32_t lw[64], lp[64];
    size_t nw = dpt_vecenv_pop_episodes(whole, rw_, lw, 64, NULL);
    size_t np = dpt_vecenv_pop_episodes(parts, rp_, lp, 64, NULL);
    CHECK(nw == np && nw > 10);
    CHECK(!memcmp(rw_, rp_, nw * sizeof *rw_) && !memcmp(lw, lp, nw * sizeof *lw));
    int32_t a[N] = {0, 1, 7, 0, 0};
    CHECK_OK(
        dpt__vecenv_step_range(parts, 0, 2, a, op, rp, tp, up, fp, act_scratch, ep_ret, ep_len));
    CHECK_ERR(
        dpt__vecenv_step_range(parts, 2, 3, a, op, rp, tp, up, fp, act_scratch, ep_ret, ep_len),
        DPT_EINVAL, "#2: action 7 is out of range");
    CHECK_ERR(
        dpt__vecenv_step_range(parts, 3, 6, a, op, rp, tp, up, fp, act_scratch, ep_ret, ep_len),
        DPT_EINVAL, "envs [3, 6) of 5");
    CHECK_ERR(
        dpt__vecenv_step_range(parts, 4, 3, a, op, rp, tp, up, fp, act_scratch, ep_ret, ep_len),
        DPT_EINVAL, "envs [4, 3) of 5");
    dpt_vecenv_destroy(whole);
    dpt_vecenv_destroy(parts);
}

/* ---- save / load --------------------------------------------------------------- */

static void test_save_load(void)
{
    for (size_t e = 0; e < dpt_env_count(); e++) {
        const dpt_env_class_t *c = dpt_env_get(e);
        enum { N = 5, WARM = 137, CONT = 420 };
        dpt_vecenv_t *v, *w;
        REQUIRE_OK(dpt_vecenv_create(&v, c, N, 21, 3));
        REQUIRE_OK(dpt_vecenv_create(&w, c, N, 999, 0)); /* seed and rank come from the state */
        bufs_t b1, b2;
        REQUIRE(bufs_init(&b1, N, c->obs_dim) && bufs_init(&b2, N, c->obs_dim));
        dpt_vecenv_reset(v, b1.obs);
        dpt_vecenv_reset(w, b2.obs);
        dpt_rng_t ar;
        dpt_rng_init(&ar, 5, 0, 0, DPT_RNG_TEST);
        float fa[N];
        int32_t ia[N];
        const int box = c->action_kind == DPT_ACTION_BOX;
        for (int t = 0; t < WARM; t++) {
            for (int i = 0; i < N; i++) {
                ia[i] = (int32_t)dpt_rng_below(&ar, box ? 1 : (uint32_t)c->num_actions);
                fa[i] = 4.0f * dpt_rng_uniform(&ar) - 2.0f;
            }
            REQUIRE_OK(vstep(v, &b1, box ? (const void *)fa : (const void *)ia));
        }
        dpt_vecenv_pop_episodes(v, NULL, NULL, SIZE_MAX, NULL);
        size_t bytes = dpt_vecenv_state_bytes(v);
        CHECK(bytes == dpt_vecenv_state_bytes(w));
        CHECK(bytes == 128 + N * (20 + c->state_size) + 16);
        unsigned char *st = malloc(bytes + 1);
        REQUIRE(st);
        CHECK_ERR(dpt_vecenv_save_state(v, st, bytes - 1), DPT_EINVAL, "needs");
        CHECK_ERR(dpt_vecenv_save_state(v, NULL, bytes), DPT_EINVAL, "NULL");
        REQUIRE_OK(dpt_vecenv_save_state(v, st, bytes));
        CHECK_OK(dpt_vecenv_load_state(w, st, bytes));
        CHECK(dpt_vecenv_total_steps(w) == (uint64_t)N * WARM);
        CHECK(dpt_vecenv_total_episodes(w) == dpt_vecenv_total_episodes(v));
        for (int t = 0; t < CONT; t++) {
            for (int i = 0; i < N; i++) {
                ia[i] = (int32_t)dpt_rng_below(&ar, box ? 1 : (uint32_t)c->num_actions);
                fa[i] = 4.0f * dpt_rng_uniform(&ar) - 2.0f;
            }
            const void *a = box ? (const void *)fa : (const void *)ia;
            REQUIRE_OK(vstep(v, &b1, a));
            REQUIRE_OK(vstep(w, &b2, a));
            CHECK(memcmp(b1.obs, b2.obs, N * c->obs_dim * sizeof(float)) == 0);
            CHECK(memcmp(b1.rew, b2.rew, N * sizeof(float)) == 0);
            CHECK(memcmp(b1.term, b2.term, N) == 0 && memcmp(b1.trunc, b2.trunc, N) == 0);
        }
        /* Episode statistics continue too (current returns and lengths were
         * saved; v's ring was emptied before the save). */
        double r1[512], r2[512];
        uint32_t l1[512], l2[512];
        size_t k1 = dpt_vecenv_pop_episodes(v, r1, l1, 512, NULL);
        size_t k2 = dpt_vecenv_pop_episodes(w, r2, l2, 512, NULL);
        /* (Freeway's episodes last 2501 steps: none ends in this window.) */
        CHECK(k1 == k2 && (k1 > 0 || strncmp(c->name, "MinAtar/Freeway", 15) == 0));
        CHECK(memcmp(r1, r2, k1 * sizeof(double)) == 0 && memcmp(l1, l2, k1 * 4) == 0);
        CHECK(dpt_vecenv_total_steps(w) == dpt_vecenv_total_steps(v));
        free(st);
        bufs_free(&b1), bufs_free(&b2);
        dpt_vecenv_destroy(v);
        dpt_vecenv_destroy(w);
    }
}

/* Episode statistics across a save/load: the first episode that ends after
 * the load has the same return and length as in the original run. */
static void test_save_load_returns(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    dpt_vecenv_t *v, *w;
    REQUIRE_OK(dpt_vecenv_create(&v, cp, 1, 2, 0));
    REQUIRE_OK(dpt_vecenv_create(&w, cp, 1, 2, 0));
    bufs_t b;
    REQUIRE(bufs_init(&b, 1, 4));
    dpt_vecenv_reset(v, b.obs);
    int32_t a = 1;
    REQUIRE_OK(vstep(v, &b, &a)); /* one step into the episode */
    REQUIRE_OK(vstep(v, &b, &a));
    size_t bytes = dpt_vecenv_state_bytes(v);
    unsigned char *st = malloc(bytes);
    REQUIRE(st);
    REQUIRE_OK(dpt_vecenv_save_state(v, st, bytes));
    REQUIRE_OK(dpt_vecenv_load_state(w, st, bytes));
    double r1 = 0, r2 = 0;
    uint32_t l1 = 0, l2 = 0;
    for (int t = 0; t < 600 && !r1; t++) {
        REQUIRE_OK(vstep(v, &b, &a));
        dpt_vecenv_pop_episodes(v, &r1, &l1, 1, NULL);
    }
    for (int t = 0; t < 600 && !r2; t++) {
        REQUIRE_OK(vstep(w, &b, &a));
        dpt_vecenv_pop_episodes(w, &r2, &l2, 1, NULL);
    }
    CHECK(r1 > 2 && r1 == r2 && l1 == l2 && r1 == (double)l1);
    free(st);
    bufs_free(&b);
    dpt_vecenv_destroy(v);
    dpt_vecenv_destroy(w);
}

static void test_load_errors(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1"), *mc = dpt_env_find("MountainCar-v0");
    dpt_vecenv_t *v, *w, *x, *y;
    REQUIRE_OK(dpt_vecenv_create(&v, cp, 4, 1, 0));
    REQUIRE_OK(dpt_vecenv_create(&w, mc, 4, 1, 0));
    REQUIRE_OK(dpt_vecenv_create(&x, cp, 5, 1, 0));
    REQUIRE_OK(dpt_vecenv_create(&y, cp, 4, 1, 0));
    size_t bytes = dpt_vecenv_state_bytes(v);
    unsigned char *st = malloc(bytes + 8), *bad = malloc(bytes + 8);
    REQUIRE(st && bad);
    /* A state saved before the first reset loads, and stepping is refused. */
    REQUIRE_OK(dpt_vecenv_save_state(v, st, bytes));
    CHECK_OK(dpt_vecenv_load_state(y, st, bytes));
    int32_t act[4] = {0, 0, 0, 0};
    float obs[16], rew[4];
    uint8_t term[4], trunc[4];
    CHECK_ERR(dpt_vecenv_step(y, act, obs, rew, term, trunc, NULL), DPT_ESTATE, "reset");

    dpt_vecenv_reset(v, obs);
    REQUIRE_OK(dpt_vecenv_step(v, act, obs, rew, term, trunc, NULL));
    REQUIRE_OK(dpt_vecenv_save_state(v, st, bytes));
    /* y's own state, to check that failed loads change nothing. */
    dpt_vecenv_reset(y, obs);
    unsigned char *y0 = malloc(bytes), *y1 = malloc(bytes);
    REQUIRE(y0 && y1);
    REQUIRE_OK(dpt_vecenv_save_state(y, y0, bytes));

    CHECK_ERR(dpt_vecenv_load_state(NULL, st, bytes), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_vecenv_load_state(y, NULL, bytes), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_vecenv_load_state(y, st, 100), DPT_EFORMAT, "not a saved runner state");
    memcpy(bad, st, bytes);
    bad[0] ^= 1;
    CHECK_ERR(dpt_vecenv_load_state(y, bad, bytes), DPT_EFORMAT, "not a saved runner state");
    memcpy(bad, st, bytes);
    bad[8] = 2; /* version */
    CHECK_ERR(dpt_vecenv_load_state(y, bad, bytes), DPT_EFORMAT, "version 2");
    memcpy(bad, st, bytes);
    bad[12] ^= 0xff; /* byte-order mark */
    CHECK_ERR(dpt_vecenv_load_state(y, bad, bytes), DPT_EFORMAT, "byte-order");
    memcpy(bad, st, bytes);
    memset(bad + 16, 'A', 64); /* unterminated name */
    CHECK_ERR(dpt_vecenv_load_state(y, bad, bytes), DPT_EFORMAT, "unterminated");
    CHECK_ERR(dpt_vecenv_load_state(w, st, dpt_vecenv_state_bytes(w)), DPT_EINVAL,
              "saved runner state is for env \"CartPole-v1\", this runner runs \"MountainCar-v0\"");
    CHECK_ERR(dpt_vecenv_load_state(x, st, bytes), DPT_EINVAL, "has 4 envs");
    CHECK_ERR(dpt_vecenv_load_state(y, st, bytes - 1), DPT_EFORMAT, "truncated");
    memcpy(bad, st, bytes);
    bad[bytes] = 0;
    CHECK_ERR(dpt_vecenv_load_state(y, bad, bytes + 1), DPT_EFORMAT, "expected");
    memcpy(bad, st, bytes);
    bad[bytes - 20] ^= 0x10; /* payload bit flip */
    CHECK_ERR(dpt_vecenv_load_state(y, bad, bytes), DPT_EFORMAT, "checksum");
    memcpy(bad, st, bytes);
    bad[112] = 7; /* started */
    CHECK_ERR(dpt_vecenv_load_state(y, bad, bytes), DPT_EFORMAT, "started");
    /* An episode length at the time limit cannot come from a real runner; the
     * checksum is recomputed so that the field check is what fails. */
    memcpy(bad, st, bytes);
    uint32_t t500 = 500;
    memcpy(bad + 128 + 4 * 8 + 4, &t500, 4);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t j = 128; j < bytes; j++)
        h = (h ^ bad[j]) * 0x100000001b3ull;
    memcpy(bad + 120, &h, 8);
    CHECK_ERR(dpt_vecenv_load_state(y, bad, bytes), DPT_EFORMAT, "#1: saved episode length 500");
    REQUIRE_OK(dpt_vecenv_save_state(y, y1, bytes));
    CHECK(memcmp(y0, y1, bytes) == 0);
    CHECK_OK(dpt_vecenv_load_state(y, st, bytes));
    free(st), free(bad), free(y0), free(y1);
    dpt_vecenv_destroy(v);
    dpt_vecenv_destroy(w);
    dpt_vecenv_destroy(x);
    dpt_vecenv_destroy(y);
}

/* ---- non-finite numbers from an env ------------------------------------------ */

/* Gives a bad number at the step `poison_at` of every episode: 1 NaN
 * reward, 2 infinite observation, 3 NaN observation on its reset. */
static int poison_kind;
static void poison_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)rng;
    uint32_t *t = state;
    obs[0] = (*t > 0 && poison_kind == 3) ? NAN : 0.0f;
    obs[1] = 1.0f;
    *t = 0;
}
static void poison_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                        int *terminated)
{
    (void)action, (void)rng;
    uint32_t *t = state;
    ++*t;
    obs[0] = (float)*t;
    obs[1] = (*t == 2 && poison_kind == 2) ? INFINITY : 1.0f;
    *reward = (*t == 2 && poison_kind == 1) ? NAN : 1.0f;
    *terminated = *t == 2 && poison_kind == 3;
}

static void test_nonfinite_step(void)
{
    static const dpt_env_class_t poison = {
        .name = "Poison-v0",
        .obs_dim = 2,
        .action_kind = DPT_ACTION_DISCRETE,
        .num_actions = 1,
        .state_size = sizeof(uint32_t),
        .reset = poison_reset,
        .step = poison_step,
    };
    static const char *const want[] = {"", "#0: step 2 of its episode returned reward nan",
                                       "#0: step 2 of its episode returned observation[1] = inf",
                                       "#0: reset returned observation[0] = nan"};
    for (poison_kind = 1; poison_kind <= 3; poison_kind++) {
        dpt_vecenv_t *v;
        REQUIRE_OK(dpt_vecenv_create(&v, &poison, 2, 1, 0));
        bufs_t b;
        REQUIRE(bufs_init(&b, 2, 2));
        int32_t act[2] = {0, 0};
        dpt_vecenv_reset(v, b.obs);
        CHECK_OK(vstep(v, &b, act));
        CHECK_ERR(vstep(v, &b, act), DPT_EINVAL, want[poison_kind]);
        CHECK(strstr(dpt_last_error(), "Poison-v0") != NULL);
        bufs_free(&b);
        dpt_vecenv_destroy(v);
    }
}

/* dpt_env_check_contract's arguments, a malformed class, and a good env
 * (the broken plug-ins are checked through the command, check_env_test.sh). */
static void test_check_contract(void)
{
    dpt_env_check_report_t r;
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    CHECK_ERR(dpt_env_check_contract(NULL, 1, 10, &r), DPT_EINVAL, "needs a class");
    CHECK_ERR(dpt_env_check_contract(cp, 1, 10, NULL), DPT_EINVAL, "needs a class");
    CHECK_ERR(dpt_env_check_contract(cp, 1, 0, &r), DPT_EINVAL, "steps");
    dpt_env_class_t bad = *cp;
    bad.obs_dim = 0;
    CHECK_OK(dpt_env_check_contract(&bad, 1, 10, &r));
    CHECK(r.count == 1 && r.violations[0].rule == DPT_ENV_RULE_CLASS);
    CHECK_OK(dpt_env_check_contract(cp, 3, 2000, &r));
    CHECK(r.count == 0 && r.steps == 2000 && r.episodes > 0 && r.steps_per_s > 0.0);
    CHECK(strcmp(dpt_env_rule_name(DPT_ENV_RULE_STATE), "state-in-block") == 0);
    CHECK(strcmp(dpt_env_rule_name(DPT_ENV_RULE_COUNT), "?") == 0);
    CHECK(strcmp(dpt_env_rule_text(DPT_ENV_RULE_COUNT), "?") == 0);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_registry),
        DPT_TEST(test_step_range),
        DPT_TEST(test_gymnasium_golden),
        DPT_TEST(test_class_check),
        DPT_TEST(test_create_errors),
        DPT_TEST(test_cartpole_by_hand),
        DPT_TEST(test_cartpole_trajectory),
        DPT_TEST(test_cartpole_termination),
        DPT_TEST(test_cartpole_truncation),
        DPT_TEST(test_cartpole_reset_range),
        DPT_TEST(test_acrobot_rk4),
        DPT_TEST(test_acrobot_trajectory),
        DPT_TEST(test_mountaincar),
        DPT_TEST(test_pendulum),
        DPT_TEST(test_pendulum_runner),
        DPT_TEST(test_discrete_validation),
        DPT_TEST(test_step_masked_and_state),
        DPT_TEST(test_reproducibility),
        DPT_TEST(test_episode_stats),
        DPT_TEST(test_truncation_rules),
        DPT_TEST(test_box_clipping),
        DPT_TEST(test_save_load),
        DPT_TEST(test_save_load_returns),
        DPT_TEST(test_load_errors),
        DPT_TEST(test_nonfinite_step),
        DPT_TEST(test_check_contract),
    };
    return DPT_TEST_RUN(cases);
}
