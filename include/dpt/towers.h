/*
 * dpt/towers.h — synchronous multi-device data parallelism ("towers").
 *
 * N devices each compute gradients on their slice of a minibatch; the
 * gradients are combined according to a mode and one optimizer update is
 * applied. A batch is loaded once into a tower stack (per-device buffers)
 * and stays there, so several passes in any minibatch order reuse it
 * without copying (RLlib's LocalSyncParallelOptimizer semantics):
 *
 *   dpt_towers_load(t, stack, batch, &info)      copy + split, once per batch
 *   for epoch: for offset in shuffled(0, pdb, 2 pdb, ..., info.rows_per_device):
 *       dpt_towers_optimize(t, stack, offset, lr, &stats)
 *
 * Load rules (N devices, M = max_per_device_batch_size):
 *  - Without sequences: the minibatch is M*N rows; with fewer rows loaded it
 *    shrinks to the largest multiple of N that fits; the batch is truncated
 *    to a multiple of the minibatch and the dropped rows are reported.
 *    Device i gets rows [i R/N, (i+1) R/N) of the R kept rows.
 *  - With sequences (batch->seq_len > 0): sequences are never split. The
 *    minibatch holds (M / seq_len) * N sequences; when M < seq_len that is
 *    raised to one sequence per device and info.warning says so; fewer
 *    loaded sequences than devices is DPT_EINVAL telling the user to raise
 *    the minibatch size or shorten the sequences.
 *
 * Modes:
 *  - ps: one shared parameter arena. After the towers' backward passes,
 *    device d sums the towers' gradients over its 1/N slice of the arena
 *    (fixed tower order), scales for the average, and applies the optimizer
 *    to that slice; the global norm for clipping is combined from per-slice
 *    sums in slice order. With an optimizer that has no slots (SGD) and no
 *    clipping, the update follows the sum chunk by chunk in the same pass
 *    and goes to a second parameter arena, which becomes the current one
 *    only when the global norm is finite (so a refused step still changes
 *    nothing); the weights come out bitwise as in the two-pass form.
 *    Small models (at most DPT_TOWERS_MIRROR_MAX parameters, several
 *    devices, no external communicator) are mirrored instead: every device
 *    keeps its own copy of the parameters and of the optimizer state, sums
 *    all the towers' gradients slice by slice in the same order, and applies
 *    the whole update to its copy. The copies hold the same bits as the
 *    shared arena would (the same operations in the same order), and a step
 *    needs one barrier instead of two, with no device writing memory that
 *    another reads next: at these sizes synchronization, not arithmetic,
 *    sets the pace. dpt_towers_optimizer() is device 0's copy; changes to
 *    it reach the others through dpt_towers_set_optimizer_state().
 *
 * Models flagged DPT_MODEL_STORES_GRADS (dpt/nn.h; the built-in MLP) write
 * their whole gradient, so the towers do not zero it before each step.
 *  - replicated: every tower owns parameters and optimizer state; gradients
 *    are all-reduced with the threads collective backend (dpt/comm.h) and
 *    every tower applies the identical update. Replicas start equal
 *    (tower 0's values are broadcast); dpt_towers_check_replicas() compares
 *    checksums, and runs every `check_every` steps when that is > 0.
 *  - async: shared parameters; each tower takes a snapshot of the
 *    parameters, computes its gradient, clips it, scales it by async_scale
 *    (default 1/N) and applies it right away, chunk by chunk under per-chunk
 *    locks, without waiting for the other towers (Hogwild-style, but free
 *    of data races). Not bitwise reproducible by design.
 *
 * A step whose loss or gradient is not finite, or whose model call fails, is
 * refused: nothing is applied (in async, that tower's update is skipped) and
 * the error names the device.
 *
 * External communicator (cfg.comm != NULL): the engine is one participant
 * of a data-parallel job spread over comm's participants (threads of this
 * process, MPI ranks, or both: any dpt_comm_t backend). Each participant
 * creates its own engine with the same model, config and communicator size,
 * loads its own rows and calls every optimize() in the same order as the
 * others (the step is collective). Each participant has N = num_devices >= 1
 * devices, in ps or replicated mode (async is refused: its towers apply
 * their updates without waiting, so the participants would drift apart).
 * Only device 0, the thread that calls optimize(), uses comm: an MPI
 * communicator needs no more than MPI_THREAD_FUNNELED when that thread
 * initialized MPI. One step, P = dpt_comm_size(comm):
 *
 *   g_{p,d} = mean gradient of device d of participant p over its
 *             per_device_batch rows
 *   G_p     = the participant's devices combined slice by slice, device d
 *             summing slice d of the arena in tower order:
 *             (g_{p,0} + g_{p,1}) + ... + g_{p,N-1}, times 1/N to average
 *   allreduce over comm of (G_p, s_p), nparams + 1 floats, where the slot
 *   s_p is 0, or NaN when one of p's towers failed:
 *     average (default)  g = (sum_p G_p) / P, i.e. the mean of all P N
 *                        towers' gradients                 (DPT_REDUCE_AVG)
 *     reduce_sum         G_p without the 1/N, g = sum_p G_p: the sum of
 *                        all P N towers' gradients         (DPT_REDUCE_SUM)
 *     weight_rows        each device sends n_{p,d} g_{p,d}, G_p their sum,
 *                        s_p = sum_d n_{p,d} the rows p used, and
 *                        g = (sum_p G_p) * (1 / sum_p s_p): the mean
 *                        gradient over all rows whatever each participant
 *                        held (DPT_REDUCE_SUM)
 *   norm = ||g|| (per-slice sums of squares added in slice order); clip to
 *   grad_clip; optimizer update: ps, device d updates slice d of the one
 *   copy; replicated, every device updates its own replica from g.
 *
 * With N = 1 the combination is the device's own gradient: the step is an
 * all-reduce of each participant's gradient. The all-reduce gives every
 * participant the same bits, so every participant computes the same norm
 * and applies the same update: the copies stay bitwise equal when they
 * start equal (set the same weights on every participant, e.g. after a
 * dpt_comm_broadcast), and a run reproduces bitwise for the same P, N,
 * backend and algorithm. A failure or a non-finite reduced slot or norm
 * refuses the step on every participant at once: the one whose tower
 * failed returns its own error, the others DPT_ECOMM ("another
 * participant's step failed") or DPT_ENUMERIC (non-finite norm), and the
 * engines stay in step for the next call. The fused SGD update of ps mode
 * is not used. The stats of optimize() (loss, correct, rows, extra) are
 * this participant's own (its N towers'); grad_norm is the norm of the
 * reduced gradient. dpt_towers_check_replicas() compares this engine's
 * replicas (replicated) and every participant's parameters and optimizer
 * state (a collective), and with check_every > 0 runs every check_every
 * steps in either mode.
 *
 * Gradient buckets (external communicator, cfg.bucket_bytes > 0): as in
 * PyTorch DDP and Horovod, the all-reduce above is cut into buckets that
 * start while the backward pass is still running. The plan, made once at
 * create: walking the model's variables from the LAST to the first (the
 * order in which a backward pass finishes them), a variable joins the
 * current bucket unless that bucket is not empty and would then exceed
 * bucket_bytes; a variable larger than bucket_bytes is a bucket of its own
 * (variables are never split). A bucket is a contiguous float range of the
 * arena, from its first variable's offset to the next bucket's (alignment
 * padding included). During a step, the model's gradient hook (set_grad_hook
 * in dpt/nn.h; the built-in MLP reports each linear layer, last first) tells
 * the engine which variables are final; each bucket whose variables are all
 * final is handed to the engine's communication thread, which all-reduces
 * the buckets one after the other, in plan order, with dpt_comm_allreduce,
 * then the extra float s_p alone (after loss_grad returned, so a failure is
 * still known to all). The devices wait for every bucket before the norm,
 * the clip and the update, which are unchanged: the update is applied once
 * all buckets are reduced, with grad_clip = 0 too (applying a bucket's
 * update as soon as it arrives would overlap only the optimizer, which is
 * cheap next to the backward pass). Every element is summed by the same
 * collective whatever bucket holds it, so the bits are those of
 * bucket_bytes = 0 whenever the all-reduce's order does not depend on the
 * message size: always with 2 participants (a + b = b + a), the threads
 * backend, tree; with 3 or more MPI ranks, native (Open MPI chooses its
 * algorithm by size), ring (blocks follow the count) or auto may round
 * differently, within the bound of dpt/comm.h. For a given bucket_bytes a
 * run repeats bitwise: the collectives are the same calls in the same order
 * whenever the hook fires. The overlap applies only with num_devices = 1, a
 * model that has set_grad_hook, weight_rows off (it scales the gradient
 * after the backward pass) and a plan of at least two buckets; otherwise
 * the step keeps its one all-reduce after the backward pass (with N > 1
 * devices, after the devices' combine). While it applies, the engine's
 * communication thread uses comm during steps and the thread that calls
 * optimize() between them (replica checks): an MPI communicator needs
 * MPI_THREAD_SERIALIZED. The engine installs its hook on the model's
 * context (model->ctx) at create and removes it at destroy.
 *
 * Variables without a gradient (cfg.no_grad: the trainers' key `frozen`,
 * or variables the model does not use): every optimizer of the engine
 * (each replica's, each mirror's) is marked with dpt_optim_set_no_grad()
 * at create, so those variables and their optimizer slots stay bitwise as
 * they are in every mode, and each tower's gradient of them is zeroed
 * after its backward pass (with gradient buckets, after the all-reduce),
 * so the global norm, its clipping and grad_norm leave them out. The
 * fused SGD update of ps mode is not used then. Mark the engine through
 * cfg.no_grad, not through dpt_towers_optimizer(): the replicas must
 * agree.
 *
 * Running statistics (cfg.running: e.g. batch norm's running mean and
 * variance): the model writes each tower's update of them into their
 * gradient slot (momentum * (the tower's batch statistic - the running
 * value)); the towers' gradients combine as usual (average, or weighted by
 * rows), so the update applied is that of the statistics averaged over
 * towers and participants, once per step, the same on every replica. Every
 * optimizer is marked with dpt_optim_set_running(): the update is added as
 * it is, and the global norm and its clipping leave these variables out
 * (a NaN or an infinity in their update still refuses the step). async
 * mode applies each tower's own update as it comes, scaled like its
 * gradient by async_scale (default 1/N) but never clipped. reduce_sum
 * would add the towers' updates: the trainers refuse it with running
 * statistics.
 * The fused SGD update of ps mode is not used then.
 *
 * Count-invariant reduction (cfg.chunk_rows = C > 0, ps or replicated,
 * averaging): the same bits for any number of devices and participants.
 * A step's minibatch is cfg.global_batch = B rows over every device of
 * every participant, cut into K = B / C chunks numbered 0 .. K-1; the G =
 * P N devices (participant p's device d is g = p N + d) hold contiguous
 * runs of chunks, the first K % G one chunk more than the others (so B
 * need only be a multiple of C, not of G; K >= G is required). Each
 * chunk's gradient is one call of the model on its C rows (the same call
 * whichever device makes it), and the chunks' gradients are added by one
 * tree over the chunk indices whatever the split: the dyadic tree whose
 * node (k, j) covers chunks [j 2^k, min((j + 1) 2^k, K)) and is the sum
 * of its left and right children (its left child alone when the right one
 * starts at K). For K = 6:
 *
 *                      [0,6)
 *              [0,4)  ---+---  [4,6)
 *          [0,2) + [2,4)       [4,5) + [5,6)
 *         c0 + c1  c2 + c3      c4      c5
 *
 * A device adds its chunks into the largest nodes inside its run; the
 * devices of a participant then evaluate the rest of the tree from those
 * (split by fixed blocks of the arena), and with several participants each
 * one sends the nodes covering its run to every other
 * (dpt_comm_allgather: a few gradients' worth, not one all-reduce) so that
 * every participant evaluates the same root. The gradient is the root
 * times 1/K (weight_rows: each chunk's gradient times its rows, the root
 * over the total rows); the norm for clipping adds sums of squares of
 * fixed blocks of 4096 floats in block order; the update is elementwise.
 * So the weights after a step depend on B, C, the model and the data, not
 * on N or P, and not on the mode (ps or replicated), backend or algorithm.
 * Load under it: the caller gives each participant its rows of every
 * minibatch, minibatch after minibatch: dpt_towers_share() says which rows
 * of a minibatch those are (with one participant, all B of them, so the
 * batch is loaded as it is); per_device_batch of dpt_towers_load_ex must be
 * 0; info.per_device_batch is ceil(K/G) C (the most rows a device holds of
 * one minibatch) and optimize()'s offset k * info.per_device_batch means
 * minibatch k. The stats are this participant's chunks', added in chunk
 * order. Gradient buckets are not used. With weight_rows and several
 * participants, each participant's rows travel as a float: the bits stay
 * invariant up to 2^24 rows per participant and step. Cost: one model call
 * per chunk instead of one per device, and one pass over the gradient per
 * addition of the tree; memory: each device keeps up to about log2(K) + 2
 * gradient buffers (the binary counter's nodes, the most its run of chunks
 * needs), and the engine one more for the sum and log2(K) + 1 for the
 * evaluation of the tree (with several participants also the nodes sent
 * and received).
 */
#ifndef DPT_TOWERS_H
#define DPT_TOWERS_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/batch.h"
#include "dpt/comm.h"
#include "dpt/device.h"
#include "dpt/nn.h"
#include "dpt/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPT_TOWERS_MODE_LIST(X)            \
    X(DPT_TOWERS_PS, "ps")                 \
    X(DPT_TOWERS_REPLICATED, "replicated") \
    X(DPT_TOWERS_ASYNC, "async")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_towers_mode {
#define DPT__TMODE_ENUM(sym, name) sym,
    DPT_TOWERS_MODE_LIST(DPT__TMODE_ENUM)
#undef DPT__TMODE_ENUM
    DPT_TOWERS_MODE_COUNT
} dpt_towers_mode_t;
/* clang-format on */

const char *dpt_towers_mode_name(dpt_towers_mode_t mode);
int dpt_towers_mode_parse(const char *name, dpt_towers_mode_t *mode);

typedef struct dpt_towers_config {
    int num_devices;                  /* N >= 1 */
    size_t max_per_device_batch_size; /* M >= 1 rows per device per step */
    size_t max_load_rows;             /* capacity of one load (rows), >= N */
    int num_stacks;                   /* independent loaded buffers, >= 1 */
    dpt_towers_mode_t mode;
    int reduce_sum;   /* 0: average tower gradients; 1: sum */
    double grad_clip; /* global-norm clip after combining; 0 = off */
    dpt_optim_config_t optim;
    float async_scale;                   /* async: gradient scale; 0 = 1/N */
    int check_every;                     /* replicated or with comm: replica check period;
                                          * 0 = off */
    int pin_devices;                     /* pin device threads to cores */
    double comm_timeout_s;               /* replicated: collective timeout; 0 = 300 */
    dpt_comm_algorithm_t comm_algorithm; /* replicated without comm: allreduce algorithm of
                                          * the devices' group (DPT_ALLREDUCE_AUTO = 0) */
    dpt_comm_t *comm;                    /* external communicator (borrowed, must outlive the
                                       * engine); NULL = the devices of this engine only */
    int weight_rows;                     /* with comm: weight each device's gradient by
                                       * its rows (excludes reduce_sum) */
    size_t bucket_bytes;                 /* with comm: gradient bucket size in bytes (see
                                          * "Gradient buckets"); 0 = one all-reduce */
    const unsigned char *no_grad;        /* NULL, or one flag per variable of the model's
                                          * table: 1 = no gradient (see "Variables without a
                                          * gradient"); read at create only */
    const unsigned char *running;        /* NULL, or one flag per variable of the model's
                                          * table: 1 = running statistics (see "Running
                                          * statistics"); read at create only */
    size_t chunk_rows;                   /* > 0: the count-invariant reduction, chunks of
                                          * this many rows (at most max_per_device_batch_size;
                                          * whole sequences); 0 = the fast order above */
    size_t global_batch;                 /* with chunk_rows: rows per step over every device
                                          * of every participant, a multiple of chunk_rows */
} dpt_towers_config_t;

/* Defaults: 1 device, M = 128, 1 stack, ps, average, no clip, Adam, no
 * external communicator, bucket_bytes 0 (the supervised job's key
 * bucket_bytes defaults to 25 MB, DDP's); check_every 50 in debug builds (NDEBUG
 * undefined), 0 otherwise. */
dpt_towers_config_t dpt_towers_defaults(void);

/* What a load did. */
typedef struct dpt_towers_load_info {
    size_t rows_loaded;      /* rows kept (all devices) */
    size_t rows_dropped;     /* rows truncated away */
    size_t rows_per_device;  /* rows each device holds */
    size_t per_device_batch; /* rows per device per optimize() */
    size_t minibatch;        /* rows per optimize() over all devices */
    size_t steps;            /* optimize() calls one pass takes */
    char warning[192];       /* non-empty when a rule changed the request */
} dpt_towers_load_info_t;

/* Averaged results of one optimize(). */
typedef struct dpt_towers_stats {
    double loss;                  /* mean loss over the minibatch's rows */
    double correct;               /* summed over towers */
    size_t rows;                  /* rows used in the step */
    double grad_norm;             /* global norm of the combined gradient before clipping
                         * (async: mean of the towers' norms) */
    double extra[DPT_LOSS_EXTRA]; /* the model's extra statistics, row-weighted means */
} dpt_towers_stats_t;

typedef struct dpt_towers dpt_towers_t;

/* The largest parameter count for which ps mode mirrors (see above). */
#define DPT_TOWERS_MIRROR_MAX 65536

/* Creates the engine. `model` is copied (its ctx borrowed until destroy);
 * when it has replicate(), every device gets its own context. `layout` is a
 * batch with rows == 0 whose columns (names, types, widths, per-sequence
 * flags; data may be NULL) fix what load() accepts, and `seq_len` (0 = no
 * sequences) is taken from it. Parameters start at zero: set them with
 * dpt_towers_set_weights(). Errors: DPT_EINVAL (bad config, naming the
 * key; with comm: async mode, weight_rows with reduce_sum; weight_rows
 * without comm), DPT_ENOMEM, DPT_ETHREAD (also: the communication thread
 * of the gradient buckets), or the error of the model's set_grad_hook. */
int dpt_towers_create(dpt_towers_t **towers, const dpt_model_t *model, const dpt_batch_t *layout,
                      const dpt_towers_config_t *cfg);
void dpt_towers_destroy(dpt_towers_t *towers);

/* Copies `batch` into stack `stack`, split across devices by the rules
 * above (in parallel, each device copying its own slice). Errors
 * (DPT_EINVAL with a message): stack out of range, columns differing from
 * the layout, zero rows, more rows than max_load_rows, fewer rows or
 * sequences than devices, a sequence length differing from the layout's. */
int dpt_towers_load(dpt_towers_t *towers, int stack, const dpt_batch_t *batch,
                    dpt_towers_load_info_t *info);

/* dpt_towers_load() with the rows per device per step fixed for this load:
 * per_device_batch P (1 <= P <= max_per_device_batch_size; 0 = the rules
 * above). The minibatch is P*N rows, never shrunk: a batch with fewer rows
 * (or, with sequences, P not a whole number of sequences, or fewer
 * sequences than one minibatch holds) is DPT_EINVAL; otherwise the batch is
 * truncated to a multiple of the minibatch as above. Participants of a
 * communicator that hold different numbers of rows use it to take the same
 * number of steps (DD-PPO's preempted workers: smaller minibatches, the
 * same count). Other errors as dpt_towers_load(). */
int dpt_towers_load_ex(dpt_towers_t *towers, int stack, const dpt_batch_t *batch,
                       size_t per_device_batch, dpt_towers_load_info_t *info);

/* dpt_towers_load_ex() on the calling thread instead of the device pool:
 * the devices' slices are copied one after the other by this thread, into
 * stack `stack` only. Thread safety (RLlib's loader threads): while one
 * thread runs dpt_towers_optimize() (or load, load_ex, check_grad_sets) on
 * stack j, other threads may each run dpt_towers_load_direct() on a
 * different stack k != j (one thread per stack at a time); it reads only
 * the engine's fixed configuration and writes only stack k's buffers and
 * bookkeeping. The caller hands a stack from its loader to the thread that
 * optimizes on it through a synchronizing queue or mutex, and never loads a
 * stack that a step may use; never concurrently with create or destroy.
 * Same results and errors as dpt_towers_load_ex(). */
int dpt_towers_load_direct(dpt_towers_t *towers, int stack, const dpt_batch_t *batch,
                           size_t per_device_batch, dpt_towers_load_info_t *info);

/* What dpt_towers_load_ex(t, stack, batch, per_device_batch, info) would
 * keep and how it would split it, without loading anything (the same
 * checks and errors, the stack aside): a caller that prepares minibatches
 * before the load (per-minibatch normalization) plans with it. */
int dpt_towers_plan(const dpt_towers_t *towers, const dpt_batch_t *batch, size_t per_device_batch,
                    dpt_towers_load_info_t *info);

/* Runs fn(arg, d) once on the thread of every device d at the same time
 * (device 0 on the calling thread) and waits for all: the caller's own
 * per-device work between steps, on the engine's threads (PPO steps each
 * device's envs there). fn must not call into this engine. Returns 0 or
 * the first device's error, naming the device. */
int dpt_towers_run(dpt_towers_t *towers, dpt_device_fn fn, void *arg);

/* One step on rows [offset, offset + per_device_batch) of every device's
 * slice of stack `stack`, with learning rate lr. offset must be a multiple
 * of per_device_batch below rows_per_device. Before the first step the
 * gradient-set check runs (see dpt_towers_check_grad_sets). */
int dpt_towers_optimize(dpt_towers_t *towers, int stack, size_t offset, float lr,
                        dpt_towers_stats_t *stats);

/* Runs one forward/backward per device on the first minibatch of `stack`
 * with gradient arenas pre-filled with a sentinel, and checks that every
 * device produced gradients for the same variables (a variable counts as
 * produced when any of its values was written). On a mismatch returns
 * DPT_EINVAL naming the variables unique to each device. Parameters are
 * not changed. */
int dpt_towers_check_grad_sets(dpt_towers_t *towers, int stack);

/* Copies the parameters out (tower 0's in replicated mode) / in (to every
 * replica). count must equal the model's table total. With an external
 * communicator both are local: give every participant the same weights. */
int dpt_towers_get_weights(dpt_towers_t *towers, float *out, size_t count);
int dpt_towers_set_weights(dpt_towers_t *towers, const float *in, size_t count);

/* Replicated: DPT_ESTATE naming the first replica whose parameters or
 * optimizer state differ from tower 0's; 0 otherwise (and in other modes).
 * With an external communicator (any mode) also, collective over comm
 * (run even when this engine's replicas differ, so every participant makes
 * the same calls): DPT_ECOMM naming the first participant whose parameters
 * or optimizer state differ from participant 0's. A difference among this
 * engine's replicas is reported first. */
int dpt_towers_check_replicas(dpt_towers_t *towers);

/* The optimizer of tower 0 (the only one in ps and async modes), for
 * checkpointing its state. Borrowed. */
dpt_optim_t *dpt_towers_optimizer(dpt_towers_t *towers);
/* Restores optimizer slots and step counter on every replica from
 * `src` (same kind and size). */
int dpt_towers_set_optimizer_state(dpt_towers_t *towers, dpt_optim_t *src);

/* The configuration in use and the number of optimize() calls made. */
const dpt_towers_config_t *dpt_towers_get_config(const dpt_towers_t *towers);
uint64_t dpt_towers_steps(const dpt_towers_t *towers);

/* With chunk_rows > 0 (the count-invariant reduction): the rows
 * [*row0, *row0 + *rows) of every minibatch that this participant holds
 * and loads (all of it with one participant). DPT_EINVAL without
 * chunk_rows. */
int dpt_towers_share(const dpt_towers_t *towers, size_t *row0, size_t *rows);

/* The number of gradient buckets a step all-reduces while the backward pass
 * runs (see "Gradient buckets"); 0 when the overlap does not apply and the
 * step makes one all-reduce after the backward pass. */
size_t dpt_towers_buckets(const dpt_towers_t *towers);

#ifdef __cplusplus
}
#endif
#endif /* DPT_TOWERS_H */
