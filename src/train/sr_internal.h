/*
 * Internal to the sync_replicas job (src/train/): the trainer's state and
 * what its files share. Not installed.
 *
 *   trainer_sync_replicas.c  the trainer: create, iterate (one epoch),
 *                            checkpoint, restore, evaluate, describe
 *   sr_workers.c             the worker loop (local threads and worker
 *                            ranks alike), the pool of worker threads and
 *                            the gradient of one chunk
 * The data and the model (an MLP, or the bags embedding model) are the
 * supervised task's (task.h). Under mpirun the services and workers talk
 * through the library's dpt/sync_replicas_remote.h.
 */
#ifndef DPT_TRAIN_SR_INTERNAL_H
#define DPT_TRAIN_SR_INTERNAL_H

#include "dpt/device.h"
#include "dpt/dpt.h"
#include "dpt/sync_replicas.h"
#include "dpt/sync_replicas_remote.h"
#include "task.h"
#include "train_internal.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SRT_MAX_WORKERS 32
#define SRT_MAX_PS 8

/* Where this process's part of the job runs. */
typedef enum srt_role {
    SRT_LOCAL,   /* service and worker threads in one process */
    SRT_SERVICE, /* under mpirun, rank 0: the chief service (tokens, the run's loop and files) */
    SRT_SHARD,   /* under mpirun, ranks 1 .. num_ps - 1: the other services */
    SRT_WORKER   /* under mpirun, ranks num_ps ..: one worker each */
} srt_role_t;
typedef struct srt srt_t;

/* The figures a push carries to the services (under mpirun). */
enum { SRT_FIG_LOSS, SRT_FIG_HITS, SRT_NFIGURES };

typedef struct srt_worker {
    srt_t *t;
    int id;
    dpt_sr_client_t *c; /* its service: this process's engine, or the services' ranks */
    int lost;
    dpt__net_t net; /* the task's model for chunks of b rows (bags: its MLP) */
    dpt_arena_t params, grads;
    float *x, *y; /* the batch: features [b, dim] or pooled embeddings [b, E]; targets */
    int32_t *labels;
    int32_t *keys; /* [b, 2] the rows' dropout keys (the global step the gradient is for, the
                    * row's position in the epoch's order: the same in threads and ranks) */
    /* bags */
    int64_t *ids, *uniq;   /* [b * L] the batch's ids (local numbers), its distinct ids */
    size_t *offsets;       /* [b + 1] */
    float *rows, *dpooled; /* [b * L, E] fetched rows; [b, E] */
    float *dy;
    dpt_sparse_rows_t grad_rows;
    /* this epoch */
    double loss, correct;
    uint64_t rows_used, pushes, accepted, rows_touched;
    int rc;
    char err[384];
} srt_worker_t;

struct srt {
    dpt__task_t task; /* the data and the model's description */
    dpt__net_t eval;  /* the model for DPT__TASK_EVAL_BATCH rows (evaluation, init) */
    /* The task's sizes the protocol and the workers read: dataset = bags;
     * training rows; the bags' embedding width and ids a bag. */
    int bags;
    size_t rows, edim, nids;
    const dpt_vartable_t *vars; /* the model's table */
    unsigned char *frozen;      /* [nvars] 1: in the key frozen (no gradient); NULL: none */
    dpt_sr_t *sr;
    int N, R, num_ps, lost;
    size_t batch, b, nchunks;
    uint64_t steps_per_epoch, epochs, epoch, samples;
    size_t *perm;
    dpt_rng_t shuffle_rng;
    int shuffle;
    srt_worker_t *w; /* [nw]: N threads (local), one (a worker rank), none (the service) */
    int nw;
    srt_role_t role;
    dpt_comm_t *comm;        /* under mpirun: rank 0 and the workers */
    dpt_sr_server_t *srv;    /* under mpirun, a service rank: owns t->sr */
    dpt_device_pool_t *pool; /* SRT_LOCAL: worker i on device i (0: the caller) */
    int P;                   /* services (num_ps); under mpirun ranks 0 .. P - 1 */
    int *place;              /* [nvars] the service of each variable */
    double timeout_s;
    uint64_t shuffle_pos; /* the epoch's shuffle position (the session's tag) */
    /* Steps of the current epoch done before a stop within it (rank 0
     * under mpirun, a worker silent); 0 at an epoch's start. Then
     * shuffle_rng stays at the epoch's start and the next session goes on
     * from that step (tokens' index part onwards). */
    uint64_t part;
    const volatile sig_atomic_t *stop_flag; /* a worker or service rank's stop request */
    int ended;                              /* rank 0 ended the other ranks' part (dpt__srt_end) */
    /* Rank 0 with several services: the global step whose state of every
     * service it holds (UINT64_MAX: none), and how many gathers it made. */
    uint64_t gathered_at, gathers;
    uint64_t test_interval; /* epochs between test-set evaluations (0: the last) */
    double replica_clip;    /* each worker's gradient clipped to this global norm (0: off) */
    uint64_t its;           /* iterations this process ran (the first one's note) */
    /* Counters of the run before this process's service (restored from a
     * checkpoint; the service counts from 0). */
    uint64_t base_stale, *base_contrib; /* [N] */
    char contrib_text[SRT_MAX_WORKERS * 21];
    int straggler;
    double straggler_s;
    float ema_decay;
    int eval_ema; /* evaluate() scores the EMA */
};

/* ---- sr_workers.c: the worker loop, the pool and one gradient -------------------- */

/* Worker w's buffers for chunks of t->b rows; freed by dpt__sr_worker_free
 * (also when half built). */
int dpt__sr_worker_build(srt_t *t, srt_worker_t *w);
void dpt__sr_worker_free(srt_worker_t *w);
/* Worker w's gradient on chunk `chunk` of the epoch's order, at the
 * variables it fetched through its client, for global step `step` (the
 * dropout masks' key). Fills w->grads (dense) and w->grad_rows (bags). */
int dpt__sr_grad(srt_worker_t *w, size_t chunk, uint64_t step, double *loss, double *correct);
/* The worker loop of a thread and of a worker rank alike: take a token,
 * compute the gradient of the chunk the token's index names, push it,
 * until the session (a thread) or the run (a rank) is over. A worker that
 * fails reports itself lost (w->rc, w->err) and leaves the loop. */
int dpt__sr_work(srt_worker_t *w);
/* The pool of t->nw workers (SRT_LOCAL): a device pool (dpt/device.h, the
 * towers' pool) started once, worker 0 on the calling thread; stopped and
 * joined by dpt__sr_pool_stop (also when half started). */
int dpt__sr_pool_start(srt_t *t);
void dpt__sr_pool_stop(srt_t *t);
/* One session of the service for the pool: every worker not lost works
 * until the session ends; returns when all are done. */
int dpt__sr_run_workers(srt_t *t);
/* The epoch's order into t->perm: the rows shuffled from shuffle position
 * pos. */
void dpt__sr_perm(srt_t *t, uint64_t pos);

/* 1 when service k keeps the embedding table (bags). */
int dpt__sr_has_table(const srt_t *t, int k);

#endif
