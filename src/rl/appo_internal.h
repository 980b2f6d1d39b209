/*
 * Internal to the APPO/IMPALA engine (the API is in rl_trainers.h): its
 * structs, the helpers its files share, and its test hooks (tests include
 * this header; the library itself never sets them).
 *
 *   appo.c          the engine: create/destroy, start/stop, train, health
 *   appo_sampler.c  sampler threads and the train batches they fill
 *   appo_learner.c  the learner thread's step and release, loader threads
 *   appo_mpi.c      under mpirun: sampler ranks, rank 0's pump, the
 *                   protocol (batches, weights, the end) on comm/msg.h
 *   appo_ckpt.c     checkpoint and restore
 *
 * Lock order: mu before wmu and before lmu; wmu and lmu are never held
 * together.
 */
#ifndef DPT_RL_APPO_INTERNAL_H
#define DPT_RL_APPO_INTERNAL_H

#include "comm/msg.h"
#include "dpt/arena.h"
#include "dpt/comm.h"
#include "dpt/learner.h"
#include "dpt/queue.h"
#include "rl_trainers.h"
#include "rl_engine.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* When > 0, counts down once per batch a loader thread is about to load
 * (num_multi_gpu_tower_stacks > 1); the loader that brings it to 0 fails
 * with DPT_EIO "appo loader K: injected failure (test hook)", as a loader
 * whose load failed would. 0 (the default): no effect. */
extern atomic_int dpt__appo_test_loader_fail_at;

/* A train batch: seqs sequences of T + 1 rows (T steps of one env, then
 * the observation after them), the weights versions that sampled them, and
 * the episodes that ended while it filled. */
typedef struct dpt__appo_tb {
    int policy;               /* the policy whose envs sampled it */
    int stack;                /* the tower stack a loader loaded it into; -1: none */
    size_t seqs;              /* sequences filled so far */
    int passes;               /* updates taken on it */
    double version_sum;       /* sum over its sequences of the sampling weights' version */
    float *obs;               /* [seqs (T + 1), obs_dim] */
    void *act;                /* [seqs (T + 1), act_w] */
    float *logp, *rew, *disc; /* [seqs (T + 1)] */
    size_t episodes;
    double ret[DPT__EPISODE_WINDOW];
    uint32_t len[DPT__EPISODE_WINDOW];
} dpt__appo_tb_t;

/* The envs of a sampler that one policy steps (all of them with one
 * policy), with that policy's weights, and the policy's batch it fills. */
typedef struct dpt__appo_group {
    dpt__rollout_t ro;
    dpt_policy_t *actor;
    dpt_arena_t params;
    uint64_t version;   /* of params; UINT64_MAX: none yet */
    dpt__appo_tb_t *tb; /* the batch it fills */
} dpt__appo_group_t;

typedef struct dpt__appo_sampler {
    struct dpt_appo *a;
    int index;
    pthread_t thread;
    int started;
    atomic_int running;        /* 0 once its thread function returned */
    dpt__appo_group_t *groups; /* one per policy, in the order of the policies */
    int rc;                    /* its error, once it stopped on one (valid once `failed` is set) */
    char err[256];
    atomic_int failed;
} dpt__appo_sampler_t;

/* A policy of the run. A trained one has its learner model and towers
 * engine (weights and optimizer); one not trained only its weights. */
typedef struct dpt__appo_pol {
    int train;
    dpt_policy_t *learner; /* the towers' model (trained), or a table of the weights */
    dpt_towers_t *towers;  /* NULL when not trained */
    /* the published weights, under wmu */
    dpt_arena_t pub;
    uint64_t pub_version;
    /* under mu: its updates, its learner results since the last report,
     * its newest episodes */
    uint64_t updates;
    dpt__rl_learn_stats_t ls_sum;
    uint64_t ls_count, updates_rep;
    dpt__episode_window_t window;
    /* checkpoints */
    dpt_arena_t ck_params;
    dpt_optim_t *ck_opt; /* NULL when not trained */
    uint64_t ck_updates;
    /* loader threads (K > 1 stacks): its idle stacks, as stack + 1 */
    dpt_queue_t *idle;
} dpt__appo_pol_t;

/* A loader thread (RLlib's _MultiGPULoaderThread): batch from the
 * inqueue -> an idle stack of its policy -> dpt_towers_load_direct -> the
 * learner's queue of loaded stacks. */
typedef struct dpt__appo_loader {
    struct dpt_appo *a;
    int index;
    pthread_t thread;
    int started;
    int rc; /* its error (valid once `failed` is set) */
    char err[256];
    atomic_int failed;
} dpt__appo_loader_t;

/* Rank 0 under mpirun: what it sent to one sampler rank. */
typedef struct dpt__appo_peer {
    uint64_t version; /* of the weights last sent; UINT64_MAX: none yet */
    uint64_t sent;    /* WEIGHTS messages sent to it */
    uint64_t got;     /* of those, received by it (as its newest batch said) */
} dpt__appo_peer_t;

struct dpt_appo {
    dpt_appo_config_t cfg;
    const dpt_env_class_t *cls;
    size_t T, od, aw, seqs; /* steps per fragment, obs and action widths, sequences per batch */
    int nsamplers;
    dpt__appo_sampler_t *samplers;
    dpt_learner_t *learner_thread;
    atomic_int stop;
    const volatile sig_atomic_t *stop_flag; /* the run's stop request (may be NULL) */
    int stuck; /* a sampler was left running in its env (dpt__appo_stop) */

    /* K > 1 tower stacks: the samplers' batches wait in sample_q for the
     * loaders, and the learner's inqueue holds loaded stacks; lmu guards the
     * loaders' figures */
    int K;
    dpt_queue_t *sample_q;
    dpt__appo_loader_t *loaders;
    int nloaders;
    pthread_mutex_t lmu;
    double loader_load_s, loader_wait_s;
    uint64_t loads;
    /* the policies (cfg.policies); wmu guards their published weights */
    pthread_mutex_t wmu;
    dpt__appo_pol_t *pols;
    int npols, main; /* main: the first trained policy (dpt__rl_policies_main) */

    /* mu guards the policies' learners and the counters below */
    int lstarted;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* monotonic clock; signalled once timesteps reaches wake_at */
    uint64_t wake_at;  /* what dpt_appo_train waits for (0: nobody waits) */
    uint64_t updates, timesteps, episodes_total;
    /* sampled: a batch's steps on its first pass; trained: on every pass a
     * policy trained on (RLlib's learner thread counts each pass) */
    dpt_rl_counters_t counters;
    double lag_sum, lag_count, load_s;
    dpt__episode_window_t window; /* the newest episodes of every policy */
    uint64_t episodes_iter;
    /* the learner's results since the last report (dpt_appo_train) */
    dpt__rl_learn_stats_t ls_sum;
    uint64_t ls_count;
    struct { /* the counters at the last report */
        double t, load_s, loader_load_s, loader_wait_s;
        uint64_t timesteps, updates, loads;
    } rep;
    /* under mpirun (dpt_appo_create_mpi): rank 0 learns, the others sample */
    dpt_comm_t *comm;
    int rank, nranks;
    dpt__appo_peer_t *peers; /* rank 0: [nranks], one per sampler rank (0 unused) */
    int *sampler_ranks;      /* rank 0: 1 .. nranks - 1, for the end's handshake */
    uint64_t weights_got;    /* a sampler rank: WEIGHTS messages received */
    dpt__msg_t in, out;      /* the message received last; the one being sent */
    dpt__appo_tb_t *held;    /* a received batch waiting for room in the inqueue */
    int finished;            /* rank 0 told the samplers to stop */
    int asked_stop;          /* a sampler rank: it asked rank 0 to stop the run */
    uint64_t batches_taken, passes_scheduled; /* dpt_appo_stats_t's (mu) */
    uint64_t broadcasts;                      /* weight publications (mu) */
    int stop_asked_by; /* rank 0: the first sampler rank that asked (0: none) */
    /* checkpoints */
    uint64_t ck_head[5];
    dpt_rl_counters_t ck_counters;
    uint64_t iteration;
};

/* ---- appo.c ---- */

/* The engine with `nsamplers` samplers numbered from `first` (their env
 * seeds' stream index). */
int dpt__appo_new(dpt_appo_t **out, const dpt_env_class_t *cls, const dpt_appo_config_t *cfg,
                  int nsamplers, int first);

/* ---- appo_sampler.c ---- */

/* An empty train batch of a's sizes, or NULL when out of memory. */
dpt__appo_tb_t *dpt__appo_tb_new(const struct dpt_appo *a);
/* NULL is a no-op. */
void dpt__appo_tb_free(dpt__appo_tb_t *b);
/* A full train batch into the learner's inqueue: the learner's own queue
 * with one tower stack, the loaders' with several. */
int dpt__appo_push(struct dpt_appo *a, dpt__appo_tb_t *tb, double timeout_s);
/* A sampler's thread function (arg: its dpt__appo_sampler_t); a sampler
 * rank calls it on its caller's thread (dpt_appo_run_sampler). */
void *dpt__appo_sampler_main(void *arg);
/* The first sampler that stopped on an error, or 0. */
int dpt__appo_samplers_failed(struct dpt_appo *a);

/* ---- appo_learner.c: the callbacks of the learner thread (ctx: the
 * engine), and the loader threads ---- */

int dpt__appo_learner_step(void *ctx, void *item, dpt_learner_result_t *res);
void dpt__appo_learner_release(void *ctx, void *item);
int dpt__appo_learner_check(void *ctx);
/* The first loader thread that stopped on an error, or 0. */
int dpt__appo_loaders_failed(struct dpt_appo *a);
/* A loader's thread function (arg: its dpt__appo_loader_t). */
void *dpt__appo_loader_main(void *arg);

/* ---- appo_mpi.c: under mpirun (dpt_appo_create_mpi) ---- */

/* A sampler rank: its full batch to rank 0. */
int dpt__appo_sampler_send(dpt__appo_sampler_t *s, dpt__appo_group_t *g);
/* A sampler rank, between fragments: rank 0's newest weights; DPT_ECLOSED
 * once told to stop. */
int dpt__appo_sampler_poll(dpt__appo_sampler_t *s, int wait);
/* Rank 0: weights out, the next sample batch in (waiting at most wait_s). */
int dpt__appo_pump(struct dpt_appo *a, double wait_s);
/* Rank 0 at the end: tells the sampler ranks to stop (once; a no-op
 * elsewhere); with wait set, waits for their goodbye, at most
 * comm_timeout_s: DPT_ETIMEDOUT naming the ranks that did not answer. */
int dpt__appo_finish(struct dpt_appo *a, int wait);

#endif /* DPT_RL_APPO_INTERNAL_H */
