/*
 * Gymnasium's classic-control environments, ported to dpt's env API:
 * CartPole-v1, Acrobot-v1, MountainCar-v0 and Pendulum-v1; and
 * StatelessCartPole-v1, CartPole with the velocities left out of the
 * observation (a memory task; the other one is in envs_memory.c).
 *
 * Sources (Gymnasium 0.29/1.0, gymnasium/envs/classic_control/): cartpole.py,
 * acrobot.py, mountain_car.py, pendulum.py, and the max_episode_steps /
 * reward_threshold of gymnasium/envs/__init__.py. The physics state is kept
 * in double precision, as Gymnasium keeps it in float64, and rounded to float
 * only for the observation. Every expression is written in the same order as
 * the Python source: without -ffast-math (STYLE.md) the compiler may not
 * reassociate, so the same state and action give the same bits as Gymnasium:
 * checked against Gymnasium 1.4.0 with NumPy 2.4.6 on 3000 steps per env,
 * bit-identical for CartPole, MountainCar and Pendulum; Acrobot within one
 * ulp (acrobot.py calls NumPy's sin/cos, which are not always libm's).
 *
 * Uniform draws in reset() follow numpy's Generator.uniform: low + (high -
 * low) * U with U a 53-bit double in [0, 1), from the env's own stream.
 *
 * The time limits are the runner's job (like Gymnasium's TimeLimit wrapper);
 * the classes below only state them.
 */
#include "dpt/env.h"

#include <math.h>

#define DPT_PI 3.14159265358979323846

static double dpt__classic_uniform(dpt_rng_t *rng, double low, double high)
{
    return low + (high - low) * dpt_rng_uniform_double(rng);
}

static double dpt__classic_clip(double x, double lo, double hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

/* ---- CartPole-v1 (cartpole.py) ---------------------------------------------
 * State (x, x_dot, theta, theta_dot); actions 0 (push left, -10 N) and 1
 * (push right, +10 N); explicit Euler with tau = 0.02 s. Terminated when
 * |x| > 2.4 or |theta| > 12 degrees; reward 1 on every step, the terminal one
 * included; reset uniform in [-0.05, 0.05) for all four variables. */

#define CP_GRAVITY 9.8
#define CP_MASSCART 1.0
#define CP_MASSPOLE 0.1
#define CP_TOTAL_MASS (CP_MASSPOLE + CP_MASSCART)
#define CP_LENGTH 0.5 /* half the pole's length */
#define CP_POLEMASS_LENGTH (CP_MASSPOLE * CP_LENGTH)
#define CP_FORCE_MAG 10.0
#define CP_TAU 0.02
#define CP_THETA_THRESHOLD (12 * 2 * DPT_PI / 360)
#define CP_X_THRESHOLD 2.4

typedef struct cartpole_state {
    double x, x_dot, theta, theta_dot;
} cartpole_state_t;

static void dpt__cartpole_obs(const cartpole_state_t *s, float *obs)
{
    obs[0] = (float)s->x;
    obs[1] = (float)s->x_dot;
    obs[2] = (float)s->theta;
    obs[3] = (float)s->theta_dot;
}

static void dpt__cartpole_start(cartpole_state_t *s, dpt_rng_t *rng)
{
    s->x = dpt__classic_uniform(rng, -0.05, 0.05);
    s->x_dot = dpt__classic_uniform(rng, -0.05, 0.05);
    s->theta = dpt__classic_uniform(rng, -0.05, 0.05);
    s->theta_dot = dpt__classic_uniform(rng, -0.05, 0.05);
}

static void dpt__cartpole_reset(void *state, dpt_rng_t *rng, float *obs)
{
    dpt__cartpole_start(state, rng);
    dpt__cartpole_obs(state, obs);
}

/* One Euler step with the action's force; returns whether it terminated.
 * Branch-light on purpose: this is the hot loop of `dpt bench env`. The force
 * is a select, and termination is evaluated with non-short-circuit ORs (same
 * result as Gymnasium's `x < -2.4 or x > 2.4 or ...`). */
static int dpt__cartpole_advance(cartpole_state_t *s, const void *action)
{
    double x = s->x, x_dot = s->x_dot, theta = s->theta, theta_dot = s->theta_dot;
    double force = *(const int32_t *)action == 1 ? CP_FORCE_MAG : -CP_FORCE_MAG;
    double costheta = cos(theta);
    double sintheta = sin(theta);
    double temp = (force + CP_POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / CP_TOTAL_MASS;
    double denom = CP_LENGTH * (4.0 / 3.0 - CP_MASSPOLE * (costheta * costheta) / CP_TOTAL_MASS);
    double thetaacc = (CP_GRAVITY * sintheta - costheta * temp) / denom;
    double xacc = temp - CP_POLEMASS_LENGTH * thetaacc * costheta / CP_TOTAL_MASS;
    x = x + CP_TAU * x_dot;
    x_dot = x_dot + CP_TAU * xacc;
    theta = theta + CP_TAU * theta_dot;
    theta_dot = theta_dot + CP_TAU * thetaacc;
    s->x = x;
    s->x_dot = x_dot;
    s->theta = theta;
    s->theta_dot = theta_dot;
    return (x < -CP_X_THRESHOLD) | (x > CP_X_THRESHOLD) | (theta < -CP_THETA_THRESHOLD) |
           (theta > CP_THETA_THRESHOLD);
}

static void dpt__cartpole_step(void *state, const void *action, dpt_rng_t *rng, float *obs,
                               float *reward, int *terminated)
{
    (void)rng;
    *terminated = dpt__cartpole_advance(state, action);
    *reward = 1.0f;
    dpt__cartpole_obs(state, obs);
}

const dpt_env_class_t dpt__env_cartpole_v1 = {
    .name = "CartPole-v1",
    .obs_dim = 4,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 2,
    .max_episode_steps = 500,
    .reward_threshold = 475.0,
    .state_size = sizeof(cartpole_state_t),
    .reset = dpt__cartpole_reset,
    .step = dpt__cartpole_step,
};

/* ---- StatelessCartPole-v1 ---------------------------------------------------
 * CartPole-v1 in every respect (state, dynamics, reset draws, rewards,
 * termination, 500-step limit) except the observation: (x, theta), without
 * the two velocities, so a policy must infer them from past observations.
 * The same seed and actions give the same episodes as CartPole-v1, and its
 * observations are components 0 and 2 of CartPole-v1's. */

static void dpt__stateless_cartpole_obs(const cartpole_state_t *s, float *obs)
{
    obs[0] = (float)s->x;
    obs[1] = (float)s->theta;
}

static void dpt__stateless_cartpole_reset(void *state, dpt_rng_t *rng, float *obs)
{
    dpt__cartpole_start(state, rng);
    dpt__stateless_cartpole_obs(state, obs);
}

static void dpt__stateless_cartpole_step(void *state, const void *action, dpt_rng_t *rng,
                                         float *obs, float *reward, int *terminated)
{
    (void)rng;
    *terminated = dpt__cartpole_advance(state, action);
    *reward = 1.0f;
    dpt__stateless_cartpole_obs(state, obs);
}

const dpt_env_class_t dpt__env_stateless_cartpole_v1 = {
    .name = "StatelessCartPole-v1",
    .obs_dim = 2,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 2,
    .max_episode_steps = 500,
    .reward_threshold = 475.0,
    .state_size = sizeof(cartpole_state_t),
    .reset = dpt__stateless_cartpole_reset,
    .step = dpt__stateless_cartpole_step,
};

/* ---- Acrobot-v1 (acrobot.py) -----------------------------------------------
 * Two links, the joint between them actuated with torque -1, 0 or +1
 * (actions 0, 1, 2). The "book" dynamics (Sutton & Barto), integrated with one
 * classic RK4 step of dt = 0.2 s with the torque held constant; torque noise
 * 0. After the step theta1 and theta2 are wrapped to [-pi, pi] and the
 * velocities clipped to +-4 pi and +-9 pi. Terminated when the free end is
 * above the bar: -cos(theta1) - cos(theta1 + theta2) > 1; reward -1 per step
 * and 0 on the terminal step. Reset uniform in [-0.1, 0.1) for all four
 * variables, rounded to float32 as acrobot.py does (.astype(np.float32)). */

#define AC_DT 0.2
#define AC_LINK_LENGTH_1 1.0
#define AC_LINK_MASS_1 1.0
#define AC_LINK_MASS_2 1.0
#define AC_LINK_COM_POS_1 0.5
#define AC_LINK_COM_POS_2 0.5
#define AC_LINK_MOI 1.0
#define AC_MAX_VEL_1 (4 * DPT_PI)
#define AC_MAX_VEL_2 (9 * DPT_PI)
#define AC_G 9.8

typedef struct acrobot_state {
    double s[4]; /* theta1, theta2, dtheta1, dtheta2 */
} acrobot_state_t;

/* _dsdt of acrobot.py (book dynamics) for the torque a: ds = d(s)/dt. */
static void dpt__acrobot_dsdt(const double *s, double a, double *ds)
{
    const double m1 = AC_LINK_MASS_1, m2 = AC_LINK_MASS_2, l1 = AC_LINK_LENGTH_1;
    const double lc1 = AC_LINK_COM_POS_1, lc2 = AC_LINK_COM_POS_2;
    const double I1 = AC_LINK_MOI, I2 = AC_LINK_MOI, g = AC_G;
    double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
    double d1 =
        m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * cos(theta2)) + I1 + I2;
    double d2 = m2 * ((lc2 * lc2) + l1 * lc2 * cos(theta2)) + I2;
    double phi2 = m2 * lc2 * g * cos(theta1 + theta2 - DPT_PI / 2.0);
    double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin(theta2) -
                  2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2) +
                  (m1 * lc1 + m2 * l1) * g * cos(theta1 - DPT_PI / 2) + phi2;
    double ddtheta2 =
        (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin(theta2) - phi2) /
        (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
    double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    ds[0] = dtheta1;
    ds[1] = dtheta2;
    ds[2] = ddtheta1;
    ds[3] = ddtheta2;
}

/* wrap() of acrobot.py: shifts x by multiples of (M - m) into [m, M]. */
static double dpt__acrobot_wrap(double x, double m, double M)
{
    double diff = M - m;
    while (x > M)
        x = x - diff;
    while (x < m)
        x = x + diff;
    return x;
}

static void dpt__acrobot_obs(const acrobot_state_t *st, float *obs)
{
    const double *s = st->s;
    obs[0] = (float)cos(s[0]);
    obs[1] = (float)sin(s[0]);
    obs[2] = (float)cos(s[1]);
    obs[3] = (float)sin(s[1]);
    obs[4] = (float)s[2];
    obs[5] = (float)s[3];
}

static void dpt__acrobot_reset(void *state, dpt_rng_t *rng, float *obs)
{
    acrobot_state_t *st = state;
    for (int k = 0; k < 4; k++)
        st->s[k] = (double)(float)dpt__classic_uniform(rng, -0.1, 0.1);
    dpt__acrobot_obs(st, obs);
}

static void dpt__acrobot_step(void *state, const void *action, dpt_rng_t *rng, float *obs,
                              float *reward, int *terminated)
{
    (void)rng;
    static const double avail_torque[3] = {-1.0, 0.0, 1.0};
    acrobot_state_t *st = state;
    double torque = avail_torque[*(const int32_t *)action];
    /* rk4() of acrobot.py over t = [0, dt]: the augmented state's last entry
     * (the torque) has derivative 0, so it stays `torque` in every stage. */
    const double dt = AC_DT - 0.0, dt2 = dt / 2.0;
    double y0[4], k1[4], k2[4], k3[4], k4[4], y[4];
    for (int k = 0; k < 4; k++)
        y0[k] = st->s[k];
    dpt__acrobot_dsdt(y0, torque, k1);
    for (int k = 0; k < 4; k++)
        y[k] = y0[k] + dt2 * k1[k];
    dpt__acrobot_dsdt(y, torque, k2);
    for (int k = 0; k < 4; k++)
        y[k] = y0[k] + dt2 * k2[k];
    dpt__acrobot_dsdt(y, torque, k3);
    for (int k = 0; k < 4; k++)
        y[k] = y0[k] + dt * k3[k];
    dpt__acrobot_dsdt(y, torque, k4);
    double ns[4];
    for (int k = 0; k < 4; k++)
        ns[k] = y0[k] + dt / 6.0 * (k1[k] + 2 * k2[k] + 2 * k3[k] + k4[k]);
    st->s[0] = dpt__acrobot_wrap(ns[0], -DPT_PI, DPT_PI);
    st->s[1] = dpt__acrobot_wrap(ns[1], -DPT_PI, DPT_PI);
    st->s[2] = dpt__classic_clip(ns[2], -AC_MAX_VEL_1, AC_MAX_VEL_1);
    st->s[3] = dpt__classic_clip(ns[3], -AC_MAX_VEL_2, AC_MAX_VEL_2);
    int term = -cos(st->s[0]) - cos(st->s[1] + st->s[0]) > 1.0;
    *terminated = term;
    *reward = term ? 0.0f : -1.0f;
    dpt__acrobot_obs(st, obs);
}

const dpt_env_class_t dpt__env_acrobot_v1 = {
    .name = "Acrobot-v1",
    .obs_dim = 6,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 3,
    .max_episode_steps = 500,
    .reward_threshold = -100.0,
    .state_size = sizeof(acrobot_state_t),
    .reset = dpt__acrobot_reset,
    .step = dpt__acrobot_step,
};

/* ---- MountainCar-v0 (mountain_car.py) --------------------------------------
 * State (position, velocity); actions 0 (push left), 1 (none), 2 (push right):
 *   velocity += (action - 1) * 0.001 + cos(3 position) * (-0.0025), clipped
 *   to +-0.07; position += velocity, clipped to [-1.2, 0.6]; at the left wall
 *   a negative velocity becomes 0 (inelastic).
 * Terminated when position >= 0.5 and velocity >= 0 (goal_velocity 0);
 * reward -1 on every step, the terminal one included. Reset: position
 * uniform in [-0.6, -0.4), velocity 0. */

#define MC_MIN_POSITION -1.2
#define MC_MAX_POSITION 0.6
#define MC_MAX_SPEED 0.07
#define MC_GOAL_POSITION 0.5
#define MC_GOAL_VELOCITY 0.0
#define MC_FORCE 0.001
#define MC_GRAVITY 0.0025

typedef struct mountaincar_state {
    double position, velocity;
} mountaincar_state_t;

static void dpt__mountaincar_reset(void *state, dpt_rng_t *rng, float *obs)
{
    mountaincar_state_t *s = state;
    s->position = dpt__classic_uniform(rng, -0.6, -0.4);
    s->velocity = 0.0;
    obs[0] = (float)s->position;
    obs[1] = 0.0f;
}

static void dpt__mountaincar_step(void *state, const void *action, dpt_rng_t *rng, float *obs,
                                  float *reward, int *terminated)
{
    (void)rng;
    mountaincar_state_t *s = state;
    double position = s->position, velocity = s->velocity;
    int32_t a = *(const int32_t *)action;
    velocity += (a - 1) * MC_FORCE + cos(3 * position) * (-MC_GRAVITY);
    velocity = dpt__classic_clip(velocity, -MC_MAX_SPEED, MC_MAX_SPEED);
    position += velocity;
    position = dpt__classic_clip(position, MC_MIN_POSITION, MC_MAX_POSITION);
    if (position == MC_MIN_POSITION && velocity < 0)
        velocity = 0.0;
    s->position = position;
    s->velocity = velocity;
    *terminated = position >= MC_GOAL_POSITION && velocity >= MC_GOAL_VELOCITY;
    *reward = -1.0f;
    obs[0] = (float)position;
    obs[1] = (float)velocity;
}

const dpt_env_class_t dpt__env_mountaincar_v0 = {
    .name = "MountainCar-v0",
    .obs_dim = 2,
    .action_kind = DPT_ACTION_DISCRETE,
    .num_actions = 3,
    .max_episode_steps = 200,
    .reward_threshold = -110.0,
    .state_size = sizeof(mountaincar_state_t),
    .reset = dpt__mountaincar_reset,
    .step = dpt__mountaincar_step,
};

/* ---- Pendulum-v1 (pendulum.py) ---------------------------------------------
 * State (th, thdot), th = 0 upright; one continuous action, the torque u in
 * [-2, 2] (the runner clips; the env clips again, as pendulum.py does).
 *   reward  = -(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2)   (old state)
 *   thdot' = clip(thdot + (3 g / (2 l) sin(th) + 3 / (m l^2) u) dt, -8, 8)
 *   th'    = th + thdot' dt
 * with g = 10, m = l = 1, dt = 0.05. Never terminates (200-step time limit).
 * Reset: th uniform in [-pi, pi), thdot uniform in [-1, 1). Observation
 * (cos th, sin th, thdot). The torque terms are float32 products, as numpy
 * 2 evaluates them in pendulum.py (see dpt__pendulum_step). */

#define PD_MAX_SPEED 8.0
#define PD_MAX_TORQUE 2.0
#define PD_DT 0.05
#define PD_G 10.0
#define PD_M 1.0
#define PD_L 1.0

typedef struct pendulum_state {
    double th, thdot;
} pendulum_state_t;

/* ((x + pi) mod 2 pi) - pi with Python's floored modulo (result in [0, 2 pi)). */
static double dpt__pendulum_angle_normalize(double x)
{
    double r = fmod(x + DPT_PI, 2 * DPT_PI);
    if (r < 0)
        r += 2 * DPT_PI;
    return r - DPT_PI;
}

static void dpt__pendulum_obs(const pendulum_state_t *s, float *obs)
{
    obs[0] = (float)cos(s->th);
    obs[1] = (float)sin(s->th);
    obs[2] = (float)s->thdot;
}

static void dpt__pendulum_reset(void *state, dpt_rng_t *rng, float *obs)
{
    pendulum_state_t *s = state;
    s->th = dpt__classic_uniform(rng, -DPT_PI, DPT_PI);
    s->thdot = dpt__classic_uniform(rng, -1.0, 1.0);
    dpt__pendulum_obs(s, obs);
}

static void dpt__pendulum_step(void *state, const void *action, dpt_rng_t *rng, float *obs,
                               float *reward, int *terminated)
{
    (void)rng;
    pendulum_state_t *s = state;
    const double g = PD_G, m = PD_M, l = PD_L, dt = PD_DT;
    double th = s->th, thdot = s->thdot;
    /* u stays float32 as in pendulum.py: under NumPy 2's promotion rules
     * (NEP 50) `0.001 * (u**2)` and `3.0 / (m * l**2) * u` are float32
     * products, added to float64 terms. */
    float u = *(const float *)action;
    const float max_torque = (float)PD_MAX_TORQUE;
    u = u < -max_torque ? -max_torque : (u > max_torque ? max_torque : u);
    float u_cost = (float)0.001 * (u * u);
    float u_acc = (float)(3.0 / (m * (l * l))) * u;
    double an = dpt__pendulum_angle_normalize(th);
    double costs = an * an + 0.1 * (thdot * thdot) + (double)u_cost;
    double newthdot = thdot + (3 * g / (2 * l) * sin(th) + (double)u_acc) * dt;
    newthdot = dpt__classic_clip(newthdot, -PD_MAX_SPEED, PD_MAX_SPEED);
    double newth = th + newthdot * dt;
    s->th = newth;
    s->thdot = newthdot;
    *reward = (float)-costs;
    *terminated = 0;
    dpt__pendulum_obs(s, obs);
}

static const float dpt__pendulum_low[1] = {(float)-PD_MAX_TORQUE};
static const float dpt__pendulum_high[1] = {(float)PD_MAX_TORQUE};

const dpt_env_class_t dpt__env_pendulum_v1 = {
    .name = "Pendulum-v1",
    .obs_dim = 3,
    .action_kind = DPT_ACTION_BOX,
    .action_dim = 1,
    .action_low = dpt__pendulum_low,
    .action_high = dpt__pendulum_high,
    .max_episode_steps = 200,
    .reward_threshold = 0.0, /* Gymnasium registers none */
    .state_size = sizeof(pendulum_state_t),
    .reset = dpt__pendulum_reset,
    .step = dpt__pendulum_step,
};
