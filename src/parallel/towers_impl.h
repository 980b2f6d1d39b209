/*
 * Internal to the towers engine (src/parallel/towers.c, towers_jobs.c): the
 * engine's state and the device job that runs every phase. Not installed.
 */
#ifndef DPT_TOWERS_IMPL_H
#define DPT_TOWERS_IMPL_H

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/comm.h"
#include "dpt/device.h"
#include "buckets.h"
#include "dpt/towers.h"
#include "sync.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* async: the arena is updated in chunks of this many floats, one lock each. */
#define DPT_ASYNC_CHUNK 16384

/* Sentinel for the gradient-set check: -0.0 turns into +0.0 (or anything
 * else) as soon as a model adds a value to it. */
#define DPT__SENTINEL_BITS 0x80000000u

/* The parameter count up to which ps mode mirrors (DPT_TOWERS_MIRROR_MAX;
 * tests lower it to compare both paths). Read by dpt_towers_create(). */
extern size_t dpt__towers_mirror_max;

typedef struct dpt__stack_info {
    int loaded;
    size_t rows_per_device, per_device_batch, seqs_per_device;
} dpt__stack_info_t;

typedef struct dpt__tower {
    int index;
    void *ctx; /* model context (own replica, or the shared one) */
    int own_ctx;
    dpt_arena_t grads;      /* this tower's gradient */
    dpt_arena_t own_params; /* replicated: replica; async: snapshot;
                               mirrored ps, devices > 0: their copy */
    float *params;          /* replicated: its replica; async: its snapshot;
                                  ps: NULL (the towers read t->params) */
    dpt_optim_t *own_opt;   /* replicated, mirrored ps devices > 0: own optimizer */
    dpt_arena_t sum;        /* mirrored ps: the combined gradient */
    dpt_comm_t *comm;       /* replicated without an external communicator: the towers' group */
    void **stack_data;      /* [num_stacks * ncols] column buffers */
    /* results of the current step */
    int rc;
    dpt_loss_out_t out;
    double norm;
} dpt__tower_t;

typedef enum { DPT__JOB_LOAD, DPT__JOB_STEP, DPT__JOB_GRADSET } dpt__job_kind_t;

/* Gradient buckets all-reduced while the backward pass goes on (external
 * communicator, one device, a model with a gradient hook, more than one
 * bucket): the communication thread reduces "items" in order, items
 * [0, plan.n) the buckets and item plan.n the extra float at
 * buf[nparams]. Device 0's thread releases them (the hook, as buckets
 * become ready; the rest after loss_grad returns) and waits for all of
 * them before it reads the reduced gradient. Lock order: mu only. */
typedef struct dpt__bucketer {
    dpt__bucket_plan_t plan;
    dpt__bucket_track_t track; /* device 0's thread only */
    int active;                /* device 0's thread only: inside a step's loss_grad */
    size_t released_seen;      /* device 0's thread only: the last count released */
    pthread_t thread;
    int thread_started, sync_ready;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    float *buf;
    dpt_reduce_op_t op;
    size_t released, reduced;
    int rc, quit;
    char msg[512];
} dpt__bucketer_t;

/* The count-invariant reduction's state (towers_invariant.c). */
typedef struct dpt__inv dpt__inv_t;

struct dpt_towers {
    dpt_towers_config_t cfg;
    dpt_model_t model;
    dpt_batch_t layout;
    size_t nparams;
    size_t cap_rows; /* per device per stack */
    dpt_device_pool_t *pool;
    dpt__tower_t *towers;
    dpt__stack_info_t *stacks;
    dpt_arena_t params;      /* ps/async: shared parameters */
    dpt_arena_t params_next; /* ps with a stateless optimizer and no clipping:
                                     the next weights, kept if the step succeeds */
    dpt_optim_t *opt;        /* ps/async: shared optimizer (mirrored: device 0's) */
    int mirrored;            /* ps, small model: every device updates its own copy */
    double *slice_sumsq;     /* ps: per-device partial sums of squares */
    dpt__barrier_t barrier;
    int barrier_ready;
    dpt_comm_threads_group_t *group;
    pthread_mutex_t *chunk_locks;
    size_t nchunks;
    int nchunk_locks_ready;
    atomic_uint_fast64_t async_t;
    uint64_t steps;
    int grad_sets_checked;
    /* the job being run */
    dpt__job_kind_t job;
    int job_stack;
    size_t job_offset;
    float job_lr;
    uint64_t job_t; /* optimizer step number of this step (ps, replicated) */
    const dpt_batch_t *job_src;
    size_t job_rows_per_device, job_seqs_per_device;
    atomic_int job_failed; /* set between barriers in ps/replicated */
    int job_comm_rc;       /* with an external communicator: device 0's all-reduce result,
                            * read by every device after the barrier that follows it */
    dpt__bucketer_t *bk;   /* gradient buckets with overlap, or NULL (one all-reduce) */
    dpt__inv_t *inv;       /* cfg.chunk_rows > 0: the count-invariant reduction; else NULL */
};

/* Bytes of one row (or one sequence) of a column. */
static inline size_t dpt__col_row_bytes(const dpt_column_t *c)
{
    return c->width * dpt_dtype_size(c->dtype);
}

/* The job of device `device` for the phase set in t->job (arg is the
 * dpt_towers_t): load, gradient-set check or step. Run by
 * dpt_device_pool_run(); returns 0 or a DPT_E... code with its message. */
int dpt__towers_job(void *arg, int device);

/* Copies tower w's slice of src (rows_per_device rows, or
 * seqs_per_device sequences for per-sequence columns, from w's offset)
 * into w's buffers of stack `stack`. Touches nothing else: the device
 * pool's load job and dpt_towers_load_direct both use it. */
void dpt__towers_copy_slice(const dpt_towers_t *t, const dpt__tower_t *w, int stack,
                            const dpt_batch_t *src, size_t rows_per_device, size_t seqs_per_device);

/* Helpers of the step jobs (towers_jobs.c), shared with towers_invariant.c.
 * view: the device's view of `rows` rows from `row0` of its part of a
 * stack. add_scale_sumsq: out[i] = (y[i] + x[i]) * scale (x NULL:
 * y[i] * scale), returning the results' sum of squares. norm_refused: the
 * global norm from its sum of squares into w->norm; 1 with *rc set when it
 * is not finite (device 0 reports the error). */
void dpt__towers_view(const dpt_towers_t *t, const dpt__tower_t *w, int stack, size_t row0,
                      size_t rows, dpt_batch_t *view);
double dpt__add_scale_sumsq(float *out, const float *y, const float *x, size_t n, float scale);
int dpt__norm_refused(dpt__tower_t *w, double sq, int *rc);

/* The count-invariant reduction (towers_invariant.c; dpt/towers.h has the
 * semantics). check: the config's rules (chunk_rows > 0). create/destroy:
 * t->inv (destroy is safe on a half-built one). cap_rows: the rows a
 * device's stack must hold. share_rows: this participant's rows of one
 * minibatch. plan: a load's plan (the
 * checks of dpt__towers_plan done by the caller). copy: device w's rows
 * of every minibatch of src into its stack. job_step: the step of device
 * w. stats: the step's figures, from its chunks in order. */
int dpt__inv_check(const dpt_towers_config_t *c, const dpt_batch_t *layout);
int dpt__inv_create(dpt_towers_t *t);
void dpt__inv_destroy(dpt_towers_t *t);
size_t dpt__inv_cap_rows(const dpt_towers_t *t);
size_t dpt__inv_share_rows(const dpt_towers_t *t);
int dpt__inv_plan(const dpt_towers_t *t, const dpt_batch_t *b, size_t fixed_pdb,
                  dpt_towers_load_info_t *li);
void dpt__inv_copy(const dpt_towers_t *t, const dpt__tower_t *w, int stack, const dpt_batch_t *src,
                   size_t rows_per_device);
int dpt__inv_job_step(dpt_towers_t *t, dpt__tower_t *w);
void dpt__inv_stats(const dpt_towers_t *t, dpt_towers_stats_t *stats);

/* Gradient buckets (towers_buckets.c). create: sets up t->bk when the
 * overlap applies (see dpt__bucketer_t), else leaves it NULL; 0 or a
 * DPT_E... code. destroy: stops the thread and removes the model's hook;
 * safe on a half-built one. begin: before device 0's loss_grad, the
 * step's buffer (nparams + 1 floats) and op. finish: after it (whatever it
 * returned) and after buf[nparams] is set: releases every item left and
 * waits for all of them; returns the first all-reduce failure with its
 * message. */
int dpt__buckets_create(dpt_towers_t *t);
void dpt__buckets_destroy(dpt_towers_t *t);
void dpt__buckets_begin(dpt_towers_t *t, float *buf, dpt_reduce_op_t op);
int dpt__buckets_finish(dpt_towers_t *t);

#endif /* DPT_TOWERS_IMPL_H */
