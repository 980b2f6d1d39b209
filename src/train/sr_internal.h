/*
 * Internal to the sync_replicas job (src/train/): the trainer's state and
 * what its files share. Not installed.
 *
 *   trainer_sync_replicas.c  the trainer: create, iterate (one epoch),
 *                            checkpoint, restore, evaluate, describe
 *   sr_workers.c             worker threads of one process and the
 *                            gradient of one chunk
 *   sr_remote.c              under mpirun: the messages between the
 *                            services and the worker ranks
 * The data and the model (an MLP, or the bags embedding model) are the
 * supervised task's (task.h).
 */
#ifndef DPT_TRAIN_SR_INTERNAL_H
#define DPT_TRAIN_SR_INTERNAL_H

#include "dpt/dpt.h"
#include "dpt/sync_replicas.h"
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

typedef struct srt_worker {
    srt_t *t;
    int id;
    pthread_t th;
    int lost;
    dpt__net_t net; /* the task's model for chunks of b rows (bags: its MLP) */
    dpt_arena_t params, grads;
    float *x, *y; /* the batch: features [b, dim] or pooled embeddings [b, E]; targets */
    int32_t *labels;
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

/* Under mpirun (a role other than SRT_LOCAL): a service's view of the
 * worker ranks, and the message buffers of both sides (sr_remote.c). The
 * arrays have one entry per worker. */
typedef struct srt_ranks {
    unsigned char *pending, *need_start, *rlost;
    unsigned char *told, *byed; /* rank 0: told to finish; said BYE */
    uint64_t *assigned;         /* gradients assigned to each this session */
    double *rloss, *rcorrect;   /* this session's figures of the accepted gradients */
    uint64_t *rrows, *rpushes;
    void **fmsg; /* a worker's fetch waiting for this service's step */
    size_t *fmsg_n;
    dpt_sparse_rows_t in_rows; /* a push's sparse rows */
    dpt_arena_t in_grads;      /* a push's dense gradient, table layout; a fetch's variables */
    char remote_err[320];      /* the last worker rank lost, and why */
    float *pack;               /* [dense_count + max rows * E] the rows answering a fetch */
    unsigned char *msg;        /* [msg_cap] a FETCH or PUSH being built */
    size_t msg_cap;
    uint64_t cur_step; /* a worker rank: the step of the gradient under way */
} srt_ranks_t;

struct srt {
    dpt__task_t task; /* the data and the model's description */
    dpt__net_t eval;  /* the model for DPT__TASK_EVAL_BATCH rows (evaluation, init) */
    /* The task's sizes the protocol and the workers read: dataset = bags;
     * training rows; the bags' embedding width and ids a bag. */
    int bags;
    size_t rows, edim, nids;
    const dpt_vartable_t *vars; /* the model's table */
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
    dpt_comm_t *comm;   /* under mpirun: rank 0 and the workers */
    size_t dense_count; /* floats of the dense variables (packed, in table order) */
    int P;              /* services (num_ps); under mpirun ranks 0 .. P - 1 */
    int svc;            /* this rank's service, or -1 (a worker, or local) */
    int *place;         /* [nvars] the service of each variable */
    size_t *svc_dense;  /* [P] floats of the dense variables of each service */
    size_t *svc_all;    /* [P] floats of all the variables of each service */
    double timeout_s;
    srt_ranks_t rk;       /* under mpirun */
    uint64_t shuffle_pos; /* the epoch's shuffle position (sent in GO) */
    /* Counters of the run before this process's service (restored from a
     * checkpoint; the service counts from 0). */
    uint64_t base_stale, *base_contrib; /* [N] */
    char contrib_text[SRT_MAX_WORKERS * 21];
    int straggler;
    double straggler_s;
    float ema_decay;
    int eval_ema; /* evaluate() scores the EMA */
};

/* ---- sr_workers.c: worker threads and one gradient --------------------------------- */

/* Worker w's buffers for chunks of t->b rows; freed by dpt__sr_worker_free
 * (also when half built). */
int dpt__sr_worker_build(srt_t *t, srt_worker_t *w);
void dpt__sr_worker_free(srt_worker_t *w);
/* Worker w's gradient on chunk `chunk` of the epoch's order, at the
 * variables it fetched (from this process's service, or from the services'
 * ranks). Fills w->grads (dense) and w->grad_rows (bags). */
int dpt__sr_grad(srt_worker_t *w, size_t chunk, double *loss, double *correct);
/* Starts the worker threads that are not lost and waits for all of them
 * (the session of the service begun). */
int dpt__sr_run_workers(srt_t *t);
/* The epoch's order into t->perm: the rows shuffled from shuffle position
 * pos. */
void dpt__sr_perm(srt_t *t, uint64_t pos);

/* ---- sr_remote.c: the services and the worker ranks (mpirun) ---------------------- */

/* t->rk for a role other than SRT_LOCAL: the message buffers and the
 * service's view of its worker ranks. dpt__sr_remote_free frees them (also
 * half built, or never built). */
int dpt__sr_remote_init(srt_t *t);
void dpt__sr_remote_free(srt_t *t);
/* 1 when service k keeps the embedding table (bags). */
int dpt__sr_has_table(const srt_t *t, int k);
/* A worker rank's fetch: the dense variables into w->params and, for bags,
 * rows ids[0..n) of the table into w->rows, from every service once its
 * global step reached t->rk.cur_step. */
int dpt__sr_remote_fetch(srt_worker_t *w, const int64_t *ids, size_t n);
/* Rank 0: one session of the service for its worker ranks, until the
 * global step reaches `until`. */
int dpt__sr_remote_session(srt_t *t, uint64_t until);
/* Rank 0: the other services' variables (and EMA and slots) once each
 * reached global step `min`, into rank 0's copy of the whole table. */
int dpt__sr_gather(srt_t *t, uint64_t min);
/* Rank 0 after a restore: every other service gets its part and the step. */
int dpt__sr_scatter(srt_t *t);
/* Rank 0 at the end of the run: every worker rank told to finish, then
 * the other services. Best effort. */
void dpt__sr_remote_finish(srt_t *t);
/* The whole part of a rank other than 0: a service of the variables placed
 * on it (ranks 1 .. num_ps - 1) or one worker, until rank 0 says finish. */
int dpt__sr_shard_loop(srt_t *t);
int dpt__sr_worker_loop(srt_t *t);

#endif
