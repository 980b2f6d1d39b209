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
 *
 * A row-sparse gradient (dpt_sparse_rows_t: index and row pairs, e.g. of an
 * embedding table) is applied by dpt_optim_update_sparse() without ever
 * densifying it: exactly for sgd and momentum, lazily for Adam.
 *
 * Variables without a gradient (dpt_optim_set_no_grad(): frozen by the
 * user, or declared unused by a model) are skipped by every update, as
 * TensorFlow's apply_gradients skips a None gradient and PyTorch's
 * optimizers a parameter whose .grad is None: see "Variables without a
 * gradient" below.
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
struct dpt_sparse_rows;

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

/* Sparse step: applies a COALESCED row-sparse gradient g (see "Row-sparse
 * gradients" below) to one 2-D variable of the optimizer's arenas: params +
 * offset is its row 0 and it has `rows` rows of g->dim floats, so it covers
 * [offset, offset + rows * g->dim) of params and of the slot arenas. t (>= 1)
 * is the global step (Adam's bias correction), lr the learning rate; the
 * optimizer's counter is not changed. The gradient is never densified.
 * With G the densified gradient (G[r] = g's row of index r, or 0 when r is
 * absent) and "touched" the rows that g names:
 *
 *   sgd       EXACT: p -= lr * (G + wd p). Bitwise dpt_optim_update() on G.
 *             wd == 0: only touched rows are visited (an untouched row's
 *             p - lr * (0 + 0 p) is p for every finite p); wd > 0: every row
 *             of the variable is visited, untouched ones get p -= lr * (0 +
 *             wd p).
 *   momentum  EXACT (plain and Nesterov): the dense rule on G, i.e. every
 *             row of the variable is visited and untouched rows still get
 *             v = mu v + (0 + wd p) and p -= lr * v (Nesterov: lr * (0 + wd p
 *             + mu v)). Bitwise dpt_optim_update() on G: both run the same
 *             per-element code.
 *   adam(w)   LAZY Adam (TensorFlow's LazyAdamOptimizer, PyTorch's
 *             SparseAdam): for each touched row r only,
 *               g' = g_r + wd p_r (adam) or g_r (adamw)
 *               m_r = b1 m_r + (1-b1) g';  v_r = b2 v_r + (1-b2) g'^2
 *               adamw: p_r -= lr * wd * p_r
 *               p_r -= lr * (m_r / (1-b1^t)) / (sqrt(v_r / (1-b2^t)) + eps)
 *             with the global step t in the bias correction, bitwise what
 *             dpt_optim_update() does to that row. Untouched rows keep p, m
 *             and v bitwise: their moments do not decay and their weights
 *             get no weight decay (L2 or decoupled) in that step. This is
 *             NOT dense Adam on G, which would move every row whose m is
 *             not zero.
 *
 * A variable marked by dpt_optim_set_no_grad() (its element at `offset`)
 * is left as it is, parameters and slots, once the checks below pass.
 *
 * Nothing is written unless every check passes. Errors (DPT_EINVAL, the
 * message naming the index and its position): g->dim == 0; an index outside
 * [0, rows); indices not strictly increasing (g not coalesced, see
 * dpt_sparse_rows_coalesce()); offset + rows * g->dim beyond
 * dpt_optim_count() (or overflowing size_t); t == 0. */
int dpt_optim_update_sparse(dpt_optim_t *opt, float *params, size_t offset, size_t rows,
                            const struct dpt_sparse_rows *g, uint64_t t, float lr);

/* Variables without a gradient. A variable that gets no gradient (frozen:
 * the training key `frozen`; or one the model declares unused, e.g. a head
 * that the run's loss does not reach) is not a variable whose gradient is
 * zero: a zero gradient is still a gradient (Adam's moments and momentum
 * decay towards it and keep moving the weights, weight decay shrinks
 * them), while a variable without one is left out of the step entirely.
 *
 * dpt_optim_set_no_grad() marks variable i of `vars` (a table of at most
 * dpt_optim_count() floats, the optimizer's layout) when no_grad[i] != 0;
 * no_grad NULL clears every mark; a later call replaces the marks. From
 * then on every update (dpt_optim_step, _update, _update_into, any slice,
 * and dpt_optim_update_sparse) leaves the marked variables' elements alone:
 * their parameters stay bitwise as they are (no update, no weight decay,
 * L2 or decoupled; dpt_optim_update_into copies them from params to out),
 * and so do their slots (momentum, Adam's m and v: they do not decay). The
 * step counter t counts every step: the other variables' bias correction
 * is unchanged, and a variable unmarked later continues at the global t
 * with the slots it had (TensorFlow's Adam keeps one beta power for all).
 * Marks are whole variables; an update of a slice leaves out the part of
 * it that is marked. The marks are not part of the slots: checkpoints
 * record them beside (the trainers' "frozen" metadata), and
 * dpt_optim_create() starts with none.
 *
 * Callers that compute a global norm from the gradient arena (clipping)
 * zero the marked elements first with dpt_optim_zero_no_grad(), so that a
 * variable without a gradient adds nothing to it (TensorFlow's
 * clip_by_global_norm sees only the gradients of the variables it
 * trains), whatever the model wrote there.
 *
 * Errors of dpt_optim_set_no_grad: DPT_EINVAL (vars->total above
 * dpt_optim_count()), DPT_ENOMEM (the earlier marks are kept). */
struct dpt_vartable;
int dpt_optim_set_no_grad(dpt_optim_t *opt, const struct dpt_vartable *vars,
                          const unsigned char *no_grad);
/* 1 when element i of the arenas belongs to a marked variable, else 0. */
int dpt_optim_no_grad(const dpt_optim_t *opt, size_t i);
/* The number of marked elements (0: every update is the plain rule). */
size_t dpt_optim_no_grad_count(const dpt_optim_t *opt);
/* grads[i] = 0 for every marked i in [lo, hi) (hi is cut to
 * dpt_optim_count()); the rest of grads is untouched. */
void dpt_optim_zero_no_grad(const dpt_optim_t *opt, float *grads, size_t lo, size_t hi);

/* Running statistics (e.g. a batch-norm layer's running mean and
 * variance) are variables that no optimizer rule moves: the model writes
 * into their gradient slot the update itself (for batch norm, momentum *
 * (batch statistic - running value)), and every update adds it as it is:
 * p += g, with no learning rate, weight decay, slots or clip factor.
 * Because the update is linear in g, averaging the gradient over towers,
 * ranks or workers averages the statistics' updates.
 *
 * dpt_optim_set_running() marks variable i of `vars` when running[i] != 0
 * (NULL clears every running mark; a later call replaces them); marks of
 * both kinds are kept per variable of one table (the same table's size
 * must be given to both calls, else DPT_EINVAL), and a variable marked
 * both ways is left alone (no gradient wins). Running elements are not
 * zeroed by dpt_optim_zero_no_grad() and do not count in
 * dpt_optim_no_grad_count(). Callers that clip by a global norm leave them
 * out of it: dpt_optim_sumsq_less_running() takes their sum of squares out
 * of a sum computed over the whole arena (never below 0; a sum that is
 * not finite is left as it is, so that a NaN or an infinity still refuses
 * the step), and
 * dpt_optim_scale_grads() scales every other element.
 * Errors: as dpt_optim_set_no_grad(). */
int dpt_optim_set_running(dpt_optim_t *opt, const struct dpt_vartable *vars,
                          const unsigned char *running);
/* 1 when element i belongs to a running-statistics variable, else 0. */
int dpt_optim_running(const dpt_optim_t *opt, size_t i);
/* The number of running-statistics elements. */
size_t dpt_optim_running_count(const dpt_optim_t *opt);
/* The sum of squares of grads[i] over the running elements of [lo, hi), in
 * double, in index order. */
double dpt_optim_running_sumsq(const dpt_optim_t *opt, const float *grads, size_t lo, size_t hi);
/* sumsq (of grads over [lo, hi)) less its running elements' part, at least
 * 0; sumsq as it is when nothing is running, and when it is not finite (a
 * NaN or an infinity anywhere in the gradient, the running part included,
 * still gives a norm that is not finite). */
double dpt_optim_sumsq_less_running(const dpt_optim_t *opt, double sumsq, const float *grads,
                                    size_t lo, size_t hi);
/* grads[i] *= f for every i in [lo, hi) that is not a running element (the
 * same bits as dpt_vec_scale() on those elements); f == 1 does nothing. */
void dpt_optim_scale_grads(const dpt_optim_t *opt, float *grads, size_t lo, size_t hi, float f);
/* grads[i] *= f for the running elements of [lo, hi) only (e.g. the towers'
 * async mode, which applies each tower's update as it comes, scaled like
 * its gradient by async_scale); f == 1 does nothing. */
void dpt_optim_scale_running(const dpt_optim_t *opt, float *grads, size_t lo, size_t hi, float f);

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

/* ------------------------------------------------------------------------ */
/* Row-sparse gradients                                                      */

/* A row-sparse gradient of a 2-D variable [rows, dim]: n (index, row) pairs,
 * row k being values[k * dim .. (k + 1) * dim). It stands for the dense
 * gradient G with G[r] = the sum of the rows whose index is r (indices may
 * repeat; repeated rows add), and is never densified by dpt (an embedding
 * table's gradient touches few of its rows). Indices are not range-checked
 * when added: dpt_sparse_rows_check(), _densify_add() and
 * dpt_optim_update_sparse() check them against the variable's rows.
 *
 * The struct is the caller's storage; indices, values and the coalescing
 * scratch are owned by it from dpt_sparse_rows_init() until
 * dpt_sparse_rows_deinit(), and any call that adds rows may move them
 * (pointers into them are valid until the next add, append or reserve).
 * Wire size of one gradient: n * (8 + 4 * dim) bytes. */
typedef struct dpt_sparse_rows {
    size_t dim;       /* floats per row (> 0 once initialised) */
    size_t n, cap;    /* rows present, rows allocated */
    int64_t *indices; /* [cap], the first n used (owned) */
    float *values;    /* [cap * dim], the first n * dim used (owned) */
    /* Coalescing scratch, kept between calls (owned; not data):
     * 2 * scratch_cap positions and one row of dim floats. */
    size_t *scratch;
    size_t scratch_cap;
    float *scratch_row;
} dpt_sparse_rows_t;

/* Starts an empty gradient of rows of `dim` floats with room for `cap` rows
 * (cap may be 0). Errors: DPT_EINVAL (dim == 0), DPT_EOVERFLOW, DPT_ENOMEM;
 * on error *s is left zeroed (deinit is still safe). */
int dpt_sparse_rows_init(dpt_sparse_rows_t *s, size_t dim, size_t cap);
/* Frees everything and zeroes *s; safe on a zeroed or deinitialised one. */
void dpt_sparse_rows_deinit(dpt_sparse_rows_t *s);
/* Drops all rows (n = 0), keeping the memory. */
void dpt_sparse_rows_clear(dpt_sparse_rows_t *s);
/* Makes room for at least `cap` rows (never shrinks; existing rows kept).
 * Errors: DPT_EINVAL (s not initialised: dim == 0), DPT_EOVERFLOW (cap * dim
 * floats or cap indices overflow size_t), DPT_ENOMEM (s unchanged). */
int dpt_sparse_rows_reserve(dpt_sparse_rows_t *s, size_t cap);
/* Appends one row with index `index`: copies dim floats from `row` (which
 * must not point into s), or zeroes the row when row is NULL. When out is
 * not NULL, *out points to the stored row (valid until s next grows), so a
 * caller can fill it in place. Grows the storage geometrically. Errors:
 * those of dpt_sparse_rows_reserve(). */
int dpt_sparse_rows_add(dpt_sparse_rows_t *s, int64_t index, const float *row, float **out);
/* Appends all rows of src, values multiplied by `scale` (scale * x, exact
 * copies when scale is 1), after dst's rows; dst may be src (then its rows
 * are doubled). Errors: DPT_EINVAL (src->dim != dst->dim), and those of
 * dpt_sparse_rows_reserve(). */
int dpt_sparse_rows_append(dpt_sparse_rows_t *dst, const dpt_sparse_rows_t *src, float scale);
/* Coalesces in place: sorts the rows by index and sums the rows of each
 * index, leaving strictly increasing indices. Deterministic: a stable merge
 * sort (O(n log n)) keeps the rows of one index in their order of
 * appearance, and they are summed left to right from +0,
 *   row(r) = ((0 + x_1) + x_2) + ... + x_k,
 * so each row is bitwise what dpt_sparse_rows_densify_add() into zeros gives
 * (a lone -0 becomes +0 as it does there). The rows are permuted in place
 * (one row of scratch); the scratch of 2 positions per row is allocated when
 * n exceeds what an earlier call left, and kept until deinit. Errors:
 * DPT_ENOMEM, DPT_EOVERFLOW (s unchanged). */
int dpt_sparse_rows_coalesce(dpt_sparse_rows_t *s);
/* dense[index * dim + j] += values[k * dim + j] for every row k in order,
 * into dense [rows, dim] (for tests and checks). Errors: DPT_EINVAL when an
 * index is outside [0, rows), naming it (dense is then unchanged). */
int dpt_sparse_rows_densify_add(const dpt_sparse_rows_t *s, float *dense, size_t rows);
/* Validates every index against [0, rows). Errors: DPT_EINVAL naming the
 * first bad index and its position. */
int dpt_sparse_rows_check(const dpt_sparse_rows_t *s, size_t rows);
/* Bytes this gradient takes on the wire: n * (8 + 4 * dim). */
size_t dpt_sparse_rows_bytes(const dpt_sparse_rows_t *s);

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
