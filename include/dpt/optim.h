/*
 * dpt/optim.h — optimizers, gradient clipping and learning-rate schedules.
 *
 * An optimizer's state (momentum buffer, Adam's m and v) lives in arenas with
 * the parameter layout, so a step is one loop over the arena — or over a
 * slice of it: dpt_optim_update() applies the rule to [lo, hi), which lets
 * several threads each update their own part of a shared arena (the `ps`
 * mode of the towers engine). Rules, with g the gradient and t >= 1 the step:
 *
 *   sgd       p -= lr * (g + wd p)
 *   momentum  v = mu v + (g + wd p);  p -= lr * v                 (PyTorch form)
 *             Nesterov: p -= lr * (g + wd p + mu v)
 *   adam      g' = g + wd p;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 *             p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 *   adamw     as adam with g' = g, then p -= lr * wd * p          (decoupled)
 */
#ifndef DPT_OPTIM_H
#define DPT_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_OPTIM_LIST(X)                \
    X(DPT_OPTIM_SGD, "sgd", 0)           \
    X(DPT_OPTIM_MOMENTUM, "momentum", 1) \
    X(DPT_OPTIM_ADAM, "adam", 2)         \
    X(DPT_OPTIM_ADAMW, "adamw", 2)

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_optim_kind {
#define DPT__OPTIM_ENUM(sym, name, slots) sym,
    DPT_OPTIM_LIST(DPT__OPTIM_ENUM)
#undef DPT__OPTIM_ENUM
    DPT_OPTIM_COUNT
} dpt_optim_kind_t;
/* clang-format on */

/* Hyper-parameters. dpt_optim_defaults() fills the usual values:
 * momentum 0.9, betas (0.9, 0.999), eps 1e-8, weight decay 0. */
typedef struct dpt_optim_config {
    dpt_optim_kind_t kind;
    float momentum;     /* momentum: mu */
    int nesterov;       /* momentum: 1 for Nesterov's form */
    float beta1, beta2; /* adam(w) */
    float eps;          /* adam(w) */
    float weight_decay; /* L2 (sgd, momentum, adam) or decoupled (adamw) */
} dpt_optim_config_t;

dpt_optim_config_t dpt_optim_defaults(dpt_optim_kind_t kind);
const char *dpt_optim_kind_name(dpt_optim_kind_t kind);
int dpt_optim_kind_parse(const char *name, dpt_optim_kind_t *kind);

typedef struct dpt_optim dpt_optim_t;

/* Creates an optimizer for arenas of `count` floats (slot arenas zeroed).
 * Errors: DPT_EINVAL (unknown kind, momentum outside [0, 1), betas outside
 * [0, 1), eps <= 0, negative weight decay, Nesterov without momentum),
 * DPT_ENOMEM. */
int dpt_optim_create(dpt_optim_t **opt, const dpt_optim_config_t *cfg, size_t count);
void dpt_optim_destroy(dpt_optim_t *opt);

/* Whole-arena step: increments the step counter t and applies the rule to
 * all `count` parameters with learning rate lr. */
void dpt_optim_step(dpt_optim_t *opt, float *params, const float *grads, float lr);

/* Slice step: applies the rule for step number t (>= 1, used for Adam's bias
 * correction) to params[lo, hi) only. Disjoint slices may run on different
 * threads at once. Does not change the optimizer's counter; call
 * dpt_optim_set_t() once per step. */
void dpt_optim_update(dpt_optim_t *opt, float *params, const float *grads, size_t lo, size_t hi,
                      uint64_t t, float lr);
/* The same rule, reading params[lo, hi) and writing the updated values to
 * out[lo, hi) (out may equal params; otherwise params is left unchanged).
 * Optimizer slots (momentum, Adam's moments) are still updated in place, so
 * only an optimizer without slots (SGD, dpt_optim_num_slots() == 0) can
 * have its update kept aside and discarded. */
void dpt_optim_update_into(dpt_optim_t *opt, const float *params, float *out, const float *grads,
                           size_t lo, size_t hi, uint64_t t, float lr);

/* The step counter (number of completed whole steps), for checkpoints. */
uint64_t dpt_optim_get_t(const dpt_optim_t *opt);
void dpt_optim_set_t(dpt_optim_t *opt, uint64_t t);

/* Number of state slots (0 sgd, 1 momentum, 2 adam/adamw) and the slot
 * arenas (borrowed, `count` floats each, valid until destroy) for
 * checkpointing and replica checks. Slot 0 = momentum v or Adam m; slot 1 =
 * Adam v. Returns NULL for a slot that does not exist. */
int dpt_optim_num_slots(const dpt_optim_t *opt);
float *dpt_optim_slot(dpt_optim_t *opt, int slot);
/* The name of slot `slot`: "momentum" for the momentum optimizer, "m" and
 * "v" (first and second moments) for Adam and AdamW; NULL when there is no
 * such slot. Checkpoints store slot values of variable V as
 * "optim.<name>.V". */
const char *dpt_optim_slot_name(const dpt_optim_t *opt, int slot);
size_t dpt_optim_count(const dpt_optim_t *opt);
const dpt_optim_config_t *dpt_optim_config(const dpt_optim_t *opt);

/* Global-norm clipping: norm = sqrt(sum g^2) over all n values (in double,
 * in index order); when max_norm > 0 and norm > max_norm, g *= max_norm /
 * (norm + 1e-6) (PyTorch's clip_grad_norm_). Returns the norm before
 * clipping. */
double dpt_clip_global_norm(float *grads, size_t n, double max_norm);
/* The clip factor for a norm computed elsewhere (e.g. from per-slice sums of
 * squares): 1 when no clipping applies. */
float dpt_clip_factor(double norm, double max_norm);

/* Learning-rate schedules. */
#define DPT_SCHEDULE_LIST(X)             \
    X(DPT_SCHEDULE_CONSTANT, "constant") \
    X(DPT_SCHEDULE_LINEAR, "linear")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_schedule_kind {
#define DPT__SCHED_ENUM(sym, name) sym,
    DPT_SCHEDULE_LIST(DPT__SCHED_ENUM)
#undef DPT__SCHED_ENUM
    DPT_SCHEDULE_COUNT
} dpt_schedule_kind_t;
/* clang-format on */

/* constant: lr0.  linear: lr0 + (lr_end - lr0) * min(step, total) / total
 * (CleanRL's PPO annealing is lr_end = 0 with step counted from 0). */
typedef struct dpt_schedule {
    dpt_schedule_kind_t kind;
    float lr0, lr_end;
    uint64_t total_steps;
} dpt_schedule_t;

float dpt_schedule_lr(const dpt_schedule_t *s, uint64_t step);
const char *dpt_schedule_kind_name(dpt_schedule_kind_t kind);
int dpt_schedule_kind_parse(const char *name, dpt_schedule_kind_t *kind);

#ifdef __cplusplus
}
#endif
#endif /* DPT_OPTIM_H */
