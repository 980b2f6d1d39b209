/*
 * dpt/env.h — reinforcement-learning environments written in C.
 *
 * Semantics follow Gymnasium: step() returns an observation, a reward, and
 * whether the episode *terminated* (a terminal state of the MDP: no
 * bootstrapping) or was *truncated* (a time limit: bootstrap from the value
 * of the last observation). The reward of the final step is returned with
 * it. The time limit is the runner's job (like Gymnasium's TimeLimit
 * wrapper): an env class states max_episode_steps and the runner counts.
 *
 * A user adds an env by writing one C file against this header: a state
 * struct, reset() and step() functions and a dpt_env_class_t describing
 * them; the library does not need to change. Built-in classes are found by
 * name with dpt_env_find() ("CartPole-v1", ...).
 */
#ifndef DPT_ENV_H
#define DPT_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/rng.h"
#include "dpt/shape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest obs_dim or action_dim a class may state. Buffers are sized
 * from the class's own dims when a runner or a policy is created; this only
 * refuses absurd sizes (a corrupt plug-in) before anything is allocated. */
#define DPT_ENV_DIM_LIMIT ((size_t)1 << 20)
/* The most parameters a class may declare (a sanity bound, as above). */
#define DPT_ENV_PARAMS_LIMIT 1024

#define DPT_ACTION_KIND_LIST(X)        \
    X(DPT_ACTION_DISCRETE, "discrete") \
    X(DPT_ACTION_BOX, "box")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_action_kind {
#define DPT__AK_ENUM(sym, name) sym,
    DPT_ACTION_KIND_LIST(DPT__AK_ENUM)
#undef DPT__AK_ENUM
    DPT_ACTION_KIND_COUNT
} dpt_action_kind_t;
/* clang-format on */

/* ---- parameters (`env_config.NAME = value` in a config) --------------------
 * A class declares the parameters it accepts; a config sets them with
 * `env_config.NAME = value` lines, and the env receives the values when it is
 * created (configure, then init, below). Values are written as text and
 * parsed by type:
 *   int     a decimal integer in [min, max]
 *   float   a finite number in [min, max]
 *   bool    true/false, yes/no or 1/0
 *   string  any text without control characters (min and max unused) */
#define DPT_ENV_PARAM_TYPE_LIST(X)  \
    X(DPT_ENV_PARAM_INT, "int")     \
    X(DPT_ENV_PARAM_FLOAT, "float") \
    X(DPT_ENV_PARAM_BOOL, "bool")   \
    X(DPT_ENV_PARAM_STRING, "string")

/* clang-format off */
typedef enum dpt_env_param_type {
#define DPT__EPT_ENUM(sym, name) sym,
    DPT_ENV_PARAM_TYPE_LIST(DPT__EPT_ENUM)
#undef DPT__EPT_ENUM
    DPT_ENV_PARAM_TYPE_COUNT
} dpt_env_param_type_t;
/* clang-format on */

/* One parameter a class accepts. All strings are the class's (static). */
typedef struct dpt_env_param {
    const char *name; /* 1..63 bytes of [A-Za-z0-9_], unique within the class */
    dpt_env_param_type_t type;
    const char *def;  /* the default, as text; must parse as a value of this parameter */
    double min, max;  /* int and float: the inclusive range (finite, min <= max) */
    const char *help; /* one line for listings; may be NULL */
} dpt_env_param_t;

/* A parsed value: i for int and bool (0/1), f for float, s for every type
 * (the text it was parsed from; for a string, the value itself). */
typedef struct dpt_env_value {
    int64_t i;
    double f;
    const char *s;
} dpt_env_value_t;

typedef struct dpt_env_class dpt_env_class_t;

/*
 * An environment class. All callbacks get the env's own state (state_size
 * bytes, zeroed when the runner is created, owned by the runner) and the env's
 * own RNG stream, so envs are independent and reproducible.
 *   configure(cls, values, why, why_size)  (optional): called once when a
 *     configured class is made (dpt_env_class_create) with the parameter
 *     values [num_params] in declaration order, on a copy of the class. It may
 *     change obs_dim, obs_shape, action_kind, num_actions, action_dim,
 *     action_low, action_high, max_episode_steps, reward_threshold and
 *     state_size (every other field is restored afterwards); the result must
 *     pass dpt_env_class_check. Returns 0, or non-zero to refuse the values,
 *     with a reason (one line, NUL-terminated) written into why [why_size].
 *   init(state, values)  (optional): called once per env when a runner is
 *     created, after the state is zeroed and before the first reset, with the
 *     values the class was configured with (the defaults for a class as
 *     written); an env keeps in its state what reset and step need of them.
 *   reset(state, rng, obs):  starts an episode, writes obs [obs_dim].
 *   step(state, action, rng, obs, reward, terminated): advances one step.
 *     action points to one int32 (discrete: 0..num_actions-1) or to
 *     action_dim floats (box; the runner clips them to [action_low,
 *     action_high] before the call, as Gymnasium's ClipAction wrapper
 *     would). Writes the next obs, the reward, and *terminated (0/1).
 * obs_shape says how the obs_dim values are laid out: {0, 0, 0} (the
 * default of a class that does not set it) for a flat vector, or an image
 * {c, h, w} with c*h*w == obs_dim, written channel by channel, row by row
 * (NCHW, as dpt/conv.h reads it: value (ch, y, x) at obs[(ch*h + y)*w + x]).
 * A class with parameters, as written, must be the env at its defaults: its
 * dims, obs_shape and state_size are what configure gives for the default
 * values (dpt_env_class_check verifies it), so dpt_env_find's class runs as
 * is.
 */
struct dpt_env_class {
    const char *name;      /* e.g. "CartPole-v1"; 1..63 bytes */
    size_t obs_dim;        /* 1..DPT_ENV_DIM_LIMIT */
    dpt_shape_t obs_shape; /* {c, h, w} with c*h*w == obs_dim; {0, 0, 0}: flat */
    dpt_action_kind_t action_kind;
    size_t num_actions;            /* discrete: number of actions */
    size_t action_dim;             /* box: action dimensions (1..DPT_ENV_DIM_LIMIT) */
    const float *action_low;       /* box: bounds [action_dim] (borrowed: storage that */
    const float *action_high;      /*   lives as long as the class; unused for discrete) */
    uint32_t max_episode_steps;    /* truncation limit; 0 = none */
    double reward_threshold;       /* "solved" return (Gymnasium's), 0 = none */
    size_t state_size;             /* bytes of per-env state */
    const dpt_env_param_t *params; /* [num_params] the parameters it accepts (borrowed) */
    size_t num_params;             /* 0..DPT_ENV_PARAMS_LIMIT */
    int (*configure)(dpt_env_class_t *cls, const dpt_env_value_t *values, char *why,
                     size_t why_size);
    void (*init)(void *state, const dpt_env_value_t *values);
    void (*reset)(void *state, dpt_rng_t *rng, float *obs);
    void (*step)(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                 int *terminated);
    /* Set by dpt_env_class_create in the configured class it returns
     * ([num_params], owned by that class); leave NULL in a class you write. */
    const dpt_env_value_t *values;
};

/* A plug-in: a shared library built from a user's env file that ends with
 *     DPT_ENV_PLUGIN(my_class)
 * (my_class: its dpt_env_class_t object) can be trained by `dpt train` with
 * `env = path/to/libmyenv.so`. The macro exports two functions:
 *     int dpt_env_plugin_abi(void);                returns DPT_ENV_ABI_VERSION
 *     const dpt_env_class_t *dpt_env_plugin(void); returns &my_class
 * The loader calls dpt_env_plugin_abi() first and refuses (DPT_EINVAL, exit 2
 * from the command) a plug-in built for another env ABI, or one without the
 * function (built before the ABI was numbered, counted as ABI 0), before it
 * reads the class: the layout of dpt_env_class_t or the callbacks' signatures
 * may differ. Rebuild such a plug-in against the installed headers.
 *
 * DPT_ENV_ABI_VERSION changes whenever dpt_env_class_t, the callbacks' types,
 * the dpt_rng_* functions a plug-in may call, or this contract change.
 *   1: the first numbered ABI.
 *   2: parameters (params, num_params, configure, init, values), box bounds
 *      as pointers, dims no longer capped at 32.
 *   3: obs_shape (after obs_dim), the layout of an image observation. */
#define DPT_ENV_ABI_VERSION 3
#define DPT_ENV_PLUGIN_SYMBOL "dpt_env_plugin"
#define DPT_ENV_PLUGIN_ABI_SYMBOL "dpt_env_plugin_abi"

#if defined(__GNUC__) || defined(__clang__)
#define DPT__PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define DPT__PLUGIN_EXPORT
#endif

/* The plug-in's entry points for the class object `cls` (at file scope, once
 * per plug-in; the prototypes keep -Wmissing-prototypes quiet). */
#define DPT_ENV_PLUGIN(cls)                                         \
    DPT__PLUGIN_EXPORT int dpt_env_plugin_abi(void);                \
    DPT__PLUGIN_EXPORT const dpt_env_class_t *dpt_env_plugin(void); \
    int dpt_env_plugin_abi(void)                                    \
    {                                                               \
        return DPT_ENV_ABI_VERSION;                                 \
    }                                                               \
    const dpt_env_class_t *dpt_env_plugin(void)                     \
    {                                                               \
        return &(cls);                                              \
    }                                                               \
    typedef int dpt__env_plugin_semicolon_t /* so the macro takes a ';' after it */

/* Built-in classes: CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1
 * (Gymnasium's constants and rules), and two memory tasks,
 * StatelessCartPole-v1 and RepeatPrevious-v0 (docs/ENVS.md). The state blocks
 * of the first five are Gymnasium's state as doubles, in Gymnasium's order,
 * so a caller may set a state directly (tests, evaluation from chosen
 * starts):
 *   CartPole-v1, StatelessCartPole-v1   double[4] {x, x_dot, theta, theta_dot}
 *   Acrobot-v1      double[4] {theta1, theta2, dtheta1, dtheta2}
 *   MountainCar-v0  double[2] {position, velocity}
 *   Pendulum-v1     double[2] {theta, theta_dot}
 * RepeatPrevious-v0 takes the parameters num_tokens and k.
 * Returns NULL (with a DPT_ENOENT dpt_error() message listing the names)
 * when unknown or NULL; names are case-sensitive. */
const dpt_env_class_t *dpt_env_find(const char *name);
/* Number of built-in classes and the i-th one (NULL past the end). */
size_t dpt_env_count(void);
const dpt_env_class_t *dpt_env_get(size_t i);
/* Checks a class for consistency; DPT_EINVAL with a message naming the class
 * and the field. Rules: name of 1..63 bytes; obs_dim 1..DPT_ENV_DIM_LIMIT;
 * obs_shape all zero, or each of c, h, w at least 1 with c*h*w == obs_dim
 * (`env class "X": obs_shape [2, 3, 5] holds 30 values, its obs_dim is 24`); a
 * valid action_kind; discrete: num_actions 1..INT32_MAX; box: action_dim
 * 1..DPT_ENV_DIM_LIMIT, action_low and action_high set, with finite
 * action_low[k] <= action_high[k]; state_size <= 1 GiB (0 is allowed); finite
 * reward_threshold; reset and step set; num_params <= DPT_ENV_PARAMS_LIMIT,
 * params set when num_params > 0, each with a valid unique name, a valid type,
 * a finite range (int, float) and a default that parses; values, when set,
 * each a valid value of its parameter; a class with configure and no values
 * must equal its configuration at the defaults (same dims, observation
 * shape, bounds, limits and state_size). dpt_vecenv_create() runs it. */
int dpt_env_class_check(const dpt_env_class_t *cls);

/* The shape of one observation of cls: its obs_shape when declared (not all
 * zero), else {obs_dim, 1, 1} (a flat row); {0, 0, 0} for NULL. An image
 * has h*w > 1. For a class that passes dpt_env_class_check, c*h*w is
 * obs_dim. */
dpt_shape_t dpt_env_obs_shape(const dpt_env_class_t *cls);

/* The parameter of cls called `name`, or NULL (no message). */
const dpt_env_param_t *dpt_env_param_find(const dpt_env_class_t *cls, const char *name);
/* "int", "float", "bool", "string"; "?" for another value. */
const char *dpt_env_param_type_name(dpt_env_param_type_t type);
/* Parses `text` as a value of p into *out (out->s = text, borrowed).
 * DPT_EINVAL naming the parameter: "k expects an integer, got \"x\"",
 * "k = 100 is out of range [0, 99]", "flag expects true or false, ...". */
int dpt_env_param_parse(const dpt_env_param_t *p, const char *text, dpt_env_value_t *out);

/* A configured class: a copy of cls (checked first) whose parameters named in
 * names [n] take the values in texts [n], the others their defaults, adapted
 * by cls->configure and checked again. *out is caller-owned (free it with
 * dpt_env_class_destroy) and borrows cls's name, params and callbacks: it is
 * valid while cls is. Configuring a configured class starts again from the
 * defaults of the parameters, not from its values. names and texts may be
 * NULL when n is 0. Errors: DPT_EINVAL naming the env and the parameter (an
 * unknown name listing the env's parameters, a name given twice, a value of
 * the wrong type or out of range, configure's refusal with its reason, a
 * configured class that fails the check); DPT_ENOMEM. */
int dpt_env_class_create(dpt_env_class_t **out, const dpt_env_class_t *cls,
                         const char *const *names, const char *const *texts, size_t n);
/* Frees a class made by dpt_env_class_create (never another); NULL is a
 * no-op. */
void dpt_env_class_destroy(dpt_env_class_t *cls);

/* ---- the vectorized runner ------------------------------------------------ */

typedef struct dpt_vecenv dpt_vecenv_t;

/* Creates n envs of class `cls` (borrowed; must outlive the runner): a
 * class as written (its parameters at their defaults) or a configured one
 * (dpt_env_class_create). Buffers are sized from cls's dims. Env i draws from
 * the RNG stream (seed, rank, i, DPT_RNG_ENV); its state is zeroed and, when
 * the class has init, initialized with the class's values. Errors:
 * DPT_EINVAL (bad class, n == 0), DPT_EOVERFLOW, DPT_ENOMEM. */
int dpt_vecenv_create(dpt_vecenv_t **v, const dpt_env_class_t *cls, size_t n, uint64_t seed,
                      uint32_t rank);
void dpt_vecenv_destroy(dpt_vecenv_t *v);
size_t dpt_vecenv_size(const dpt_vecenv_t *v);
const dpt_env_class_t *dpt_vecenv_class(const dpt_vecenv_t *v);

/* Resets every env and starts new episodes (running ones are abandoned, not
 * recorded); obs [n, obs_dim] (caller-owned, or NULL to discard). Must be
 * called once before the first dpt_vecenv_step. */
void dpt_vecenv_reset(dpt_vecenv_t *v, float *obs);

/* Steps every env with actions [n] (int32, discrete) or [n, action_dim]
 * (float, box; clipped to the bounds in the runner's own scratch, the
 * caller's array is not modified). Writes obs [n, obs_dim], rewards [n],
 * terminated [n] and truncated [n] (0/1). truncated is 1 when the episode
 * reaches max_episode_steps without terminating; the two are exclusive (a
 * terminal state reached on the last allowed step is reported as
 * terminated: no bootstrapping), unlike Gymnasium's TimeLimit, which may set
 * both. An env whose episode ended is reset at once: obs holds the first
 * observation of its next episode, and, when final_obs [n, obs_dim] is not
 * NULL, final_obs holds the last observation of the ended episode (for
 * bootstrapping on truncation); rows of envs that did not end are left
 * untouched in final_obs. Every action is checked before any env steps.
 * Allocates nothing. Errors: DPT_EINVAL for a discrete action out of range
 * or a non-finite box action (naming the env and its index) or a NULL
 * buffer, in which case no env has stepped and no output was written;
 * DPT_ESTATE before the first dpt_vecenv_reset. */
int dpt_vecenv_step(dpt_vecenv_t *v, const void *actions, float *obs, float *rewards,
                    uint8_t *terminated, uint8_t *truncated, float *final_obs);

/* dpt_vecenv_step for the envs i with active[i] != 0 (active [n], borrowed;
 * NULL: every env, which is dpt_vecenv_step). An inactive env does not
 * step: its action is not checked or used, and its rows of obs, rewards,
 * terminated, truncated and final_obs are left untouched; the total step
 * count grows by the number of active envs. For a caller that shows an
 * ended episode's first observation one step later (Gymnasium's next-step
 * autoreset: on the step after its episode ends, an env only resets).
 * Errors as for dpt_vecenv_step. */
int dpt_vecenv_step_masked(dpt_vecenv_t *v, const uint8_t *active, const void *actions, float *obs,
                           float *rewards, uint8_t *terminated, uint8_t *truncated,
                           float *final_obs);

/* The state block of env i: state_size bytes owned by the runner, valid
 * until dpt_vecenv_destroy; NULL when i >= n. A caller may read it, or write
 * it between steps to go on from a chosen state (the built-in classes'
 * layouts are listed at dpt_env_find); the episode's length and return are
 * not changed, and the next observation comes from the next step. */
void *dpt_vecenv_env_state(dpt_vecenv_t *v, size_t i);

/* Episodes completed since the last call: writes up to `max` returns (sum of
 * the rewards, in double) and lengths, oldest first (in completion order;
 * envs in index order within one step), and returns how many were written.
 * Episodes beyond `max` stay for the next call. The runner keeps at most
 * 4096 episodes: older ones are dropped, and *dropped (when not NULL) gets
 * how many were dropped since the last call. returns or lengths may be
 * NULL to discard them. */
size_t dpt_vecenv_pop_episodes(dpt_vecenv_t *v, double *returns, uint32_t *lengths, size_t max,
                               size_t *dropped);

/* Total env steps taken and episodes finished since create. */
uint64_t dpt_vecenv_total_steps(const dpt_vecenv_t *v);
uint64_t dpt_vecenv_total_episodes(const dpt_vecenv_t *v);

/* For checkpoints: the runner's full state (env states, RNG positions,
 * seed and rank, current episode lengths and returns, total counters) as
 * bytes: a 128-byte header (magic, version, byte-order mark, class name, n,
 * state_size, obs_dim, a digest of the parameter values, checksum) and the
 * payload, in native byte order.
 * state_bytes() gives the size, 128 + n * (20 + state_size) + 16; save
 * writes exactly that many (DPT_EINVAL for another size). load checks the
 * header, the size and the checksum before it changes anything, then
 * restores, so a resumed run continues bitwise; the runner takes the saved
 * seed and rank. Finished episodes not yet popped are not saved (pop them
 * first); load empties the episode buffer. Load errors: DPT_EINVAL for a
 * state of another class, number of envs, state size or parameter values (the
 * message names both); DPT_EFORMAT for a buffer that is not a saved state, another version
 * or byte order, a wrong size, a failed checksum or an impossible field. */
size_t dpt_vecenv_state_bytes(const dpt_vecenv_t *v);
int dpt_vecenv_save_state(const dpt_vecenv_t *v, void *buf, size_t bytes);
int dpt_vecenv_load_state(dpt_vecenv_t *v, const void *buf, size_t bytes);

/* ---- the env contract, checked by running it (`dpt check-env`) ---------------- */

/* The rules, in the order they are checked. */
#define DPT_ENV_RULE_LIST(X)                                                                   \
    X(DPT_ENV_RULE_CLASS, "class", "the class is well formed (dpt_env_class_check)")           \
    X(DPT_ENV_RULE_WRITES_OBS, "writes-obs", "reset and step write every observation value")   \
    X(DPT_ENV_RULE_IN_BOUNDS, "in-bounds",                                                     \
      "reset and step write nothing past the observation or the state block")                  \
    X(DPT_ENV_RULE_FINITE, "finite", "observations and rewards are finite numbers")            \
    X(DPT_ENV_RULE_DETERMINISM, "determinism",                                                 \
      "the same seed and actions give the same episodes (randomness only from the env's rng)") \
    X(DPT_ENV_RULE_STATE, "state-in-block",                                                    \
      "all of an env's state is in its state block: a copy of it continues the same episode")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_env_rule {
#define DPT__ENV_RULE_ENUM(sym, name, text) sym,
    DPT_ENV_RULE_LIST(DPT__ENV_RULE_ENUM)
#undef DPT__ENV_RULE_ENUM
    DPT_ENV_RULE_COUNT
} dpt_env_rule_t;
/* clang-format on */

/* "determinism", ...; and the rule in a sentence. */
const char *dpt_env_rule_name(dpt_env_rule_t rule);
const char *dpt_env_rule_text(dpt_env_rule_t rule);

typedef struct dpt_env_violation {
    dpt_env_rule_t rule;
    uint64_t step;     /* the step (from 1) where it showed; 0 = at reset or before */
    char message[320]; /* what was seen */
} dpt_env_violation_t;

typedef struct dpt_env_check_report {
    size_t count;                                       /* violations found (one per rule) */
    dpt_env_violation_t violations[DPT_ENV_RULE_COUNT]; /* in the order found */
    unsigned char violated[DPT_ENV_RULE_COUNT];
    uint64_t steps, episodes; /* taken by the check's first run */
    double steps_per_s;       /* a runner of 8 envs (0 when a rule was broken) */
} dpt_env_check_report_t;

/* Runs `steps` steps of one env of cls (a class as written or configured)
 * with random actions from `seed`, straight through its callbacks inside
 * guarded buffers, and checks every rule of DPT_ENV_RULE_LIST: every
 * observation value written by reset and step, nothing written past the
 * observation or the state block, finite numbers, the same episodes from
 * the same seed, and the same continuation from a copy of the state block
 * taken halfway (with its rng). Then, when no rule was broken, measures
 * steps/s of a runner of 8 envs for about 0.2 s. The first violation of
 * each rule goes into *out. Returns DPT_OK when the check ran (whatever it
 * found), DPT_EINVAL for bad arguments, DPT_ENOMEM. */
int dpt_env_check_contract(const dpt_env_class_t *cls, uint64_t seed, uint64_t steps,
                           dpt_env_check_report_t *out);

#ifdef __cplusplus
}
#endif
#endif /* DPT_ENV_H */
