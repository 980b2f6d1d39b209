/*
 * dpt/sync_replicas.h — a sync-replicas parameter service: synchronous
 * training that does not wait for its slowest workers (TensorFlow's
 * SyncReplicasOptimizer).
 *
 * The service holds the variables (an arena with a variable table), a
 * global step, one gradient accumulator per variable, the wrapped optimizer
 * (any dpt optimizer, with optional global-norm clipping) and a token queue.
 * N = total_num_replicas workers each loop:
 *
 *     local = global step                  (dpt_sr_begin: the chief's init)
 *     loop:
 *         fetch the variables              dpt_sr_fetch / dpt_sr_fetch_rows
 *         compute a gradient on a batch
 *         push(gradient, local)            dpt_sr_push
 *         take a token -> local            dpt_sr_take_token (a barrier)
 *
 * push() drops a gradient whose local step is older than the global step
 * (stale) and counts it. Once R = replicas_to_aggregate fresh gradients are
 * in, the service ("the chief") averages them, clips the average to
 * grad_clip by global norm, applies the optimizer with the learning rate of
 * the schedule at the global step, updates the moving average of the
 * variables (ema_decay > 0), increments the global step and puts
 * max(N, R) tokens carrying the new step into the token queue (FIFO).
 *
 * Tokens, two rules (dpt_sr_config_t.tokens):
 *  - DPT_SR_TOKENS_STRICT (the default): a worker takes the oldest token
 *    that is not older than the global step (older ones are dropped: a
 *    gradient at their step could only be stale) and, when N >= R, newer
 *    than the step it last pushed. So with N >= R each worker contributes
 *    at most one gradient per step, and N == R runs are bitwise
 *    reproducible; a stuck worker at N == R holds every step, and the
 *    waiting workers' token timeout names it.
 *  - DPT_SR_TOKENS_FIFO (TensorFlow's): first come, first served from one
 *    FIFO queue, nothing dropped: a fast worker may take a token meant for
 *    another and push twice for one step (at N == R the others carry a
 *    stuck worker's share), or take an old token and spend a gradient that
 *    arrives stale. Which gradients make a step depends on timing.
 *
 *  - N > R: the extra workers are backups. The first R fresh gradients of
 *    a step close it; a late worker's gradient arrives stale and is
 *    dropped, so a straggler does not set the pace.
 *  - N < R: each worker contributes several gradients per step; the first
 *    step needs R - N initial tokens (dpt_sr_begin's num_tokens, TF's
 *    get_init_tokens_op) so that workers can push again before any update.
 *  - N == R: the chief sums the R gradients in worker order (not arrival
 *    order), so the same workers and batches give bitwise-identical
 *    variables run after run. With backups, or with N < R, which gradients
 *    make up a step depends on timing and a run is not reproducible.
 *
 * Sparse gradients: a 2-D variable [rows, dim] marked sparse receives
 * row-sparse gradients (dpt_sparse_rows_t, dpt/optim.h): the accumulator
 * keeps (indices, rows) of every fresh push and coalesces them in worker
 * order, never densifying them; dpt_optim_update_sparse applies them (SGD
 * and momentum exactly, Adam lazily). Workers read only the rows they need
 * (dpt_sr_fetch_rows).
 *
 * Variables without a gradient (cfg.no_grad; the trainer's key `frozen`):
 * fetched like the others, but their pushed gradients are ignored (not
 * checked, accumulated, averaged or counted in the norm that grad_clip
 * clips), and a step changes nothing of them: not the variable, not its
 * optimizer slots (dpt_optim_set_no_grad() marks the service's
 * optimizer), not its moving average (which keeps the value it had; a
 * variable frozen from the start keeps ema == variable).
 *
 * Several services (num_ps > 1): each variable is placed on the service
 * with the fewest bytes so far, in table order, ties to the lower index
 * (tensorpack's least-loaded placement); dpt_sr_placement() reports it. In
 * one process the services are shards of one object.
 *
 * Threads: every function may be called from any thread. The update runs
 * inside the push that completes a step (the pushing thread does the
 * chief's work) under the service's lock. This engine is the one place in
 * dpt where a lost peer is not fatal: dpt_sr_worker_lost() marks a worker
 * gone and the steps go on while at least R workers remain.
 *
 * Misuse is an error with a message (DPT_EINVAL or DPT_ESTATE): no
 * variables, R < 1, a service begun without a global step
 * (dpt_sr_set_global_step), too few initial tokens for the first step, and
 * tokens, pushes or fetches before dpt_sr_begin built the update.
 */
#ifndef DPT_SYNC_REPLICAS_H
#define DPT_SYNC_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/arena.h"
#include "dpt/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpt_sr dpt_sr_t;

/* How tokens go to workers (see the top of this file). */
enum { DPT_SR_TOKENS_STRICT = 0, DPT_SR_TOKENS_FIFO = 1 };

typedef struct dpt_sr_config {
    const dpt_vartable_t *vars;  /* the variables (copied at create) */
    const unsigned char *sparse; /* NULL, or one flag per variable: 1 = row-sparse
                                  * gradients (2-D variables only) */
    dpt_optim_config_t optim;    /* the wrapped optimizer */
    dpt_schedule_t schedule;     /* learning rate as a function of the global step */
    double grad_clip;            /* global norm of the averaged gradient (0 = off) */
    int replicas_to_aggregate;   /* R >= 1 */
    int total_num_replicas;      /* N >= 1 workers, numbered 0..N-1 */
    int num_ps;                  /* services the variables are placed on (>= 1) */
    float ema_decay;             /* 0 = off, else in (0, 1): ema = d ema + (1 - d) p */
    double timeout_s;            /* how long dpt_sr_take_token waits (<= 0: no limit) */
    int tokens;                  /* DPT_SR_TOKENS_STRICT (0) or DPT_SR_TOKENS_FIFO */
    int64_t init_tokens;         /* a session's initial tokens when dpt_sr_begin is given
                                  * num_tokens < 0 (-1, dpt_sr_defaults': max(0, R - N);
                                  * TensorFlow's get_init_tokens_op default is R) */
    /* NULL, or one flag per variable: 1 = no gradient (frozen; see "Variables
     * without a gradient" above); read at create. */
    const unsigned char *no_grad;
    /* NULL, or one flag per variable: 1 = running statistics (batch norm's
     * running mean and variance; dpt_optim_set_running): a worker's
     * "gradient" of them is its update of them, averaged over the accepted
     * workers like any gradient and added as it is, left out of the norm and
     * the clip; read at create. */
    const unsigned char *running;
    /* One shard of several services in separate processes: */
    const unsigned char *owned; /* NULL (all), or one flag per variable: 1 = kept here; the
                                 * others are not accumulated, applied, averaged or fetched
                                 * (their gradients and values are ignored) */
    int no_tokens;              /* 1: this service hands out no tokens (another is the chief) */
} dpt_sr_config_t;

/* A config with N = R = 1, one service, SGD, no EMA, no timeout, strict
 * tokens, the default initial tokens. Start from it: fields added later get
 * their defaults. */
dpt_sr_config_t dpt_sr_defaults(void);

/* Creates a service with zeroed variables. Errors: DPT_EINVAL (no
 * variables, R < 1, N < 1, num_ps < 1, a sparse flag on a variable that is
 * not 2-D, ema_decay outside [0, 1), negative grad_clip, a bad optimizer
 * config), DPT_ENOMEM, DPT_ETHREAD. The slots of R pushes are allocated
 * here (R dense copies of the dense variables). */
int dpt_sr_create(dpt_sr_t **sr, const dpt_sr_config_t *cfg);
/* Frees the service. No thread may be inside it. NULL is a no-op. */
void dpt_sr_destroy(dpt_sr_t *sr);

/* The variables, the EMA (NULL without ema_decay) and the optimizer
 * (borrowed, valid until destroy): for initialisation, checkpoints and
 * restore. Change them only while no worker is inside the service. */
float *dpt_sr_params(dpt_sr_t *sr);
float *dpt_sr_ema(dpt_sr_t *sr);
dpt_optim_t *dpt_sr_optimizer(dpt_sr_t *sr);
const dpt_vartable_t *dpt_sr_vars(const dpt_sr_t *sr);

/* Copies the variables into the EMA (a fresh run, after initialising the
 * variables; a resumed run writes the saved EMA into dpt_sr_ema() instead).
 * No-op without ema_decay. */
void dpt_sr_reset_ema(dpt_sr_t *sr);

/* Sets the global step (0 for a fresh run, the checkpoint's on resume).
 * Required once before the first dpt_sr_begin. */
void dpt_sr_set_global_step(dpt_sr_t *sr, uint64_t step);
uint64_t dpt_sr_global_step(dpt_sr_t *sr);

/* Starts a session of steps (the chief's init): every worker's local step
 * becomes the global step, the token queue is emptied and filled with
 * num_tokens initial tokens carrying the global step (num_tokens < 0:
 * cfg.init_tokens, and when that is < 0 too, max(0, R - N)), and steps run until the global step reaches
 * `until` (after which tokens are refused with DPT_ECLOSED so that workers
 * stop). Call it when no worker is inside the service. Errors: DPT_ESTATE
 * (no global step was set), DPT_EINVAL (num_tokens < R - N: too few for the
 * first step; until <= global step). */
int dpt_sr_begin(dpt_sr_t *sr, int64_t num_tokens, uint64_t until);

/* Pushes worker `worker`'s gradient computed at `local_step`: `grads` has
 * the table's layout (its values for sparse variables are ignored and may
 * be anything); `sparse` (NULL when no variable is sparse) holds one
 * row-sparse gradient per sparse variable, in table order (borrowed for
 * the call; coalesced or not). *accepted (may be NULL) is 1 when the
 * gradient counted toward the step, 0 when it was stale and dropped. The
 * push that completes a step runs the update. Errors: DPT_ESTATE (before
 * dpt_sr_begin), the failure's own code and message once the service
 * failed (dpt_sr_stats_t.failed tells the two apart), DPT_EINVAL (worker out of
 * range or lost, a sparse gradient of the wrong width or with an index
 * outside its variable), DPT_ENUMERIC (a non-finite gradient: nothing is
 * accumulated; or a non-finite averaged norm: the step is refused and the
 * service fails).
 */
int dpt_sr_push(dpt_sr_t *sr, int worker, uint64_t local_step, const float *grads,
                const dpt_sparse_rows_t *const *sparse, int *accepted);

/* Takes a token (waiting up to timeout_s) and writes its step to *step: the
 * worker's next local step. Errors: DPT_ESTATE (before dpt_sr_begin: the
 * update does not exist yet), DPT_ECLOSED (the session reached `until`, or
 * dpt_sr_close), DPT_ETIMEDOUT (no token within timeout_s: the message
 * names the workers the global step waits for, those that have not pushed
 * a gradient of it, and the waiting worker).
 */
int dpt_sr_take_token(dpt_sr_t *sr, int worker, uint64_t *step);

/* dpt_sr_take_token without waiting: 1 with *step set when a token went to
 * `worker`, 0 when none may go to it now (or the session reached `until`),
 * or an error as dpt_sr_take_token's (DPT_ESTATE, DPT_ECLOSED after
 * dpt_sr_close, the failure of a failed service). For a service that
 * answers remote workers from one thread. */
int dpt_sr_poll_token(dpt_sr_t *sr, int worker, uint64_t *step);

/* Copies the dense variables into out (the table's layout; the values of
 * sparse variables are left as they are: read their rows with
 * dpt_sr_fetch_rows). Errors: DPT_ESTATE before dpt_sr_begin. */
int dpt_sr_fetch(dpt_sr_t *sr, float *out);
/* Copies rows idx[0..n) of sparse variable `var` (its index in the table)
 * into out [n, dim]. Errors: DPT_EINVAL (not a sparse variable, an index
 * outside it), DPT_ESTATE. */
int dpt_sr_fetch_rows(dpt_sr_t *sr, size_t var, const int64_t *idx, size_t n, float *out);

/* Marks a worker gone (its thread or process died or stopped): it counts
 * no more. While at least R workers remain the steps go on; with fewer the
 * service fails, waking every waiter with DPT_ECOMM naming the workers
 * lost. Returns that error, or 0. */
int dpt_sr_worker_lost(dpt_sr_t *sr, int worker);
/* Ends the session: every waiting and later take_token returns DPT_ECLOSED. */
void dpt_sr_close(dpt_sr_t *sr);

/* Counters since create (a consistent snapshot). */
typedef struct dpt_sr_stats {
    uint64_t global_step;
    uint64_t pushes;          /* every push */
    uint64_t stale_dropped;   /* pushes dropped as stale */
    uint64_t tokens_enqueued; /* including initial tokens */
    uint64_t tokens_taken;
    uint64_t tokens_dropped;      /* older than the global step when a worker looked */
    uint64_t tokens_available;    /* now in the queue */
    uint64_t bytes_pushed;        /* dense floats * 4 + sparse rows * (8 + 4 dim) */
    uint64_t bytes_last_step;     /* of the pushes that made the last step */
    uint64_t sparse_bytes_pushed; /* the sparse gradients' part of bytes_pushed */
    uint64_t sparse_rows_pushed;  /* rows of the sparse gradients pushed */
    uint64_t sparse_rows_applied; /* distinct rows the steps updated, summed over steps */
    double token_wait_s;          /* total time workers waited for tokens */
    int workers_lost;
    int failed;            /* the service failed (every later call returns its error) */
    double last_grad_norm; /* global norm of the last averaged gradient */
} dpt_sr_stats_t;
void dpt_sr_get_stats(dpt_sr_t *sr, dpt_sr_stats_t *out);
/* Fresh gradients worker w contributed to steps so far (0 when out of
 * range). */
uint64_t dpt_sr_worker_contributed(dpt_sr_t *sr, int worker);

/* The placement: variable i lives on service placement[i]; bytes of each
 * service in ps_bytes (either may be NULL; arrays of nvars and num_ps
 * entries). Returns num_ps. */
int dpt_sr_placement(const dpt_sr_t *sr, int *placement, uint64_t *ps_bytes);
/* tensorpack's least-loaded placement on its own: var_bytes[i] of each of
 * n variables to the service with the fewest bytes so far (ties: lower
 * index). out[n] gets the service of each; ps_bytes[num_ps] (may be NULL)
 * the totals. Errors: DPT_EINVAL (num_ps < 1). */
int dpt_sr_place(const uint64_t *var_bytes, size_t n, int num_ps, int *out, uint64_t *ps_bytes);

#ifdef __cplusplus
}
#endif
#endif /* DPT_SYNC_REPLICAS_H */
