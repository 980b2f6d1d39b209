/*
 * The launch of a run under mpirun (dpt_train_run's second phase): join the
 * MPI world, check that every rank was started with the same config, build
 * and version, and give this rank its part from the job's plan (a trainer,
 * or one of the job's other roles). One process (no launcher) is a launch
 * of one rank that joins nothing.
 *
 *   plan (job)  ->  MPI_Init at the plan's thread level  ->  the ranks'
 *   communicator  ->  agreement (hashes all-gathered)  ->  role or trainer
 *
 * Joining can block inside MPI, where no timeout of ours reaches: a
 * watchdog thread reports a stall through the run options' on_stall.
 */
#include "core/clock.h"
#include "dpt/comm.h"
#include "dpt/dpt.h"
#include "dpt/gemm.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "train_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the watchdog ----------------------------------------------------------------- */

typedef struct dpt__watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on the monotonic clock */
    pthread_t thread;
    int done, started;
    double timeout_s;
    int rank, world;
    const dpt_run_options_t *o;
} dpt__watchdog_t;

static void *dpt__launch_watchdog_main(void *arg)
{
    dpt__watchdog_t *w = arg;
    struct timespec until = dpt__deadline(w->timeout_s);
    pthread_mutex_lock(&w->mu);
    int timed_out = 0;
    while (!w->done && !timed_out)
        timed_out = pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0;
    int stalled = !w->done;
    pthread_mutex_unlock(&w->mu);
    if (stalled) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "rank %d: joining the MPI world of %d ranks did not complete within "
                 "comm_timeout_s = %g s: another rank is stopped, dead or was never started",
                 w->rank, w->world, w->timeout_s);
        w->o->on_stall(w->o->user, msg);
    }
    return NULL;
}

/* Starts the watchdog when the options have on_stall; a watchdog that
 * cannot start leaves the join unwatched (the join itself still works). */
static void dpt__launch_watchdog_start(dpt__watchdog_t *w, const dpt__launch_t *l,
                                       const dpt_run_options_t *o, double timeout_s)
{
    memset(w, 0, sizeof *w);
    if (!o || !o->on_stall || timeout_s <= 0)
        return;
    w->timeout_s = timeout_s;
    w->rank = l->rank;
    w->world = l->world;
    w->o = o;
    if (pthread_mutex_init(&w->mu, NULL) != 0)
        return;
    if (dpt__cond_init_monotonic(&w->cv) != 0) {
        pthread_mutex_destroy(&w->mu);
        return;
    }
    w->started = pthread_create(&w->thread, NULL, dpt__launch_watchdog_main, w) == 0;
    if (!w->started) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
    }
}

static void dpt__launch_watchdog_stop(dpt__watchdog_t *w)
{
    if (!w->started)
        return;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->started = 0;
}

/* ---- agreement ------------------------------------------------------------------- */

/* The things every rank must agree on, as 64-bit hashes: each key but
 * output_dir and tensorboard_dir (rank 0 alone writes), the env_config
 * entries, then the build and the launch. */
enum {
    DPT__AGREE_ENV_CONFIG = DPT_CFG_COUNT,
    DPT__AGREE_VERSION,
    DPT__AGREE_GEMM,
    DPT__AGREE_RESUME,
    DPT__AGREE_COUNT
};

static uint64_t dpt__launch_hash_str(const char *s)
{
    return dpt_fnv1a64(DPT_FNV1A64_INIT, s, strlen(s));
}

static const char *dpt__launch_agree_name(int i)
{
    switch (i) {
    case DPT__AGREE_ENV_CONFIG: return "env_config";
    case DPT__AGREE_VERSION: return "dpt version";
    case DPT__AGREE_GEMM: return "GEMM kernel";
    case DPT__AGREE_RESUME: return "--resume directory";
    default: return dpt_config_key_info((dpt_config_key_t)i)->name;
    }
}

static uint64_t dpt__launch_agree_hash(const dpt_config_t *c, int i, const char *resume_dir)
{
    switch (i) {
    case DPT__AGREE_VERSION: return dpt__launch_hash_str(dpt_version());
    case DPT__AGREE_GEMM: return dpt__launch_hash_str(dpt_gemm_describe(dpt_gemm_get_backend()));
    case DPT__AGREE_RESUME: return dpt__launch_hash_str(resume_dir ? resume_dir : "");
    case DPT__AGREE_ENV_CONFIG: return dpt__config_env_hash(c);
    default:
        return i == DPT_CFG_output_dir || i == DPT_CFG_tensorboard_dir
                   ? 0
                   : dpt_config_key_hash(c, (dpt_config_key_t)i);
    }
}

/* All-gathers the hashes and fails on every rank when any differs from
 * rank 0's; rank 0's message names each key and rank. */
static int dpt__launch_agree(const dpt__launch_t *l, const dpt_config_t *c, const char *resume_dir)
{
    size_t n = DPT__AGREE_COUNT;
    uint64_t *mine = malloc(n * sizeof *mine);
    uint64_t *all = malloc(n * (size_t)l->world * sizeof *all);
    if (!mine || !all) {
        free(mine);
        free(all);
        return dpt_error(DPT_ENOMEM, "cannot allocate the config comparison");
    }
    for (int i = 0; i < DPT__AGREE_COUNT; i++)
        mine[i] = dpt__launch_agree_hash(c, i, resume_dir);
    int rc = dpt_comm_allgather_u64(l->comm, mine, n, all);
    if (rc) {
        free(mine);
        free(all);
        return rc;
    }
    char msg[1024] = "";
    int differ = 0;
    for (int i = 0; i < DPT__AGREE_COUNT; i++)
        for (int q = 1; q < l->world; q++)
            if (all[i] != all[(size_t)q * n + i]) {
                size_t len = strlen(msg);
                if (differ++ < 12)
                    snprintf(msg + len, sizeof msg - len, "%s%s (rank %d)", len ? ", " : "",
                             dpt__launch_agree_name(i), q);
            }
    free(mine);
    free(all);
    if (differ && l->rank != 0)
        return dpt_error(DPT_EINVAL,
                         "rank %d: the ranks were started with different "
                         "configurations (rank 0 names them)",
                         l->rank);
    if (differ)
        return dpt_error(DPT_EINVAL,
                         "the ranks were started with different configurations; "
                         "differing from rank 0: %s%s",
                         msg, differ > 12 ? ", ..." : "");
    return DPT_OK;
}

/* ---- the launch ------------------------------------------------------------------- */

void dpt__launch_init(dpt__launch_t *l)
{
    memset(l, 0, sizeof *l);
    l->world = dpt__mpi_world_size();
    l->rank = l->world > 1 ? dpt__mpi_rank() : 0;
}

/* How every rank started: each rank's status and a hash of its message,
 * all-gathered. Any failure fails every rank (all then leave cleanly); the
 * failure rank 0 reports covers the ranks whose failure is the same, and a
 * rank that failed otherwise reports its own, named. */
static int dpt__launch_starts(dpt__launch_t *l, int rc)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? dpt_last_error() : "");
    uint64_t mine[2] = {(uint64_t)(int64_t)rc, rc ? dpt__launch_hash_str(msg) : 0};
    uint64_t *all = malloc(2 * (size_t)l->world * sizeof *all);
    if (!all)
        return dpt_error(DPT_ENOMEM, "cannot allocate the ranks' start");
    int xrc = dpt_comm_allgather_u64(l->comm, mine, 2, all);
    if (xrc) {
        free(all);
        return xrc;
    }
    int first = -1; /* the first rank that failed */
    for (int q = 0; q < l->world && first < 0; q++)
        if (all[2 * q])
            first = q;
    int same0 = all[0] == mine[0] && all[1] == mine[1];
    int code0 = (int)(int64_t)all[0], codef = first >= 0 ? (int)(int64_t)all[2 * first] : 0;
    free(all);
    if (first < 0)
        return DPT_OK;
    l->clean = 1;
    if (rc) {
        l->shared = l->rank > 0 && same0;
        return l->rank > 0 && !same0 ? dpt_error(rc, "rank %d: %s", l->rank, msg)
                                     : dpt_error(rc, "%s", msg);
    }
    if (l->rank == 0)
        return dpt_error(codef, "rank %d could not start the run (it says why)", first);
    l->shared = 1;
    return dpt_error(code0 ? code0 : codef, "rank %d: rank %d could not start the run", l->rank,
                     first);
}

/* The communicator's timeout and algorithm: the config's, or the defaults
 * when this rank has no config (its start failed). */
static void dpt__launch_options(const dpt_config_t *c, dpt_comm_mpi_options_t *mo)
{
    dpt_comm_mpi_options_init(mo);
    mo->timeout_s = c ? dpt_config_float(c, DPT_CFG_comm_timeout_s)
                      : strtod(dpt_config_key_info(DPT_CFG_comm_timeout_s)->def, NULL);
    if (c)
        mo->algorithm = (dpt_comm_algorithm_t)dpt_config_int(c, DPT_CFG_allreduce_algorithm);
}

int dpt__launch_join(dpt__launch_t *l, const dpt_config_t *c, const char *resume_dir,
                     const dpt_run_options_t *o, int start_rc)
{
    if (l->world <= 1)
        return start_rc;
    dpt__mpi_plan_t plan;
    memset(&plan, 0, sizeof plan);
    plan.mpi_threads = 1;
    int rc = start_rc;
    if (!rc) {
        const dpt__job_t *job = dpt__job_get(dpt_config_job(c));
        rc = job->plan
                 ? job->plan(c, l->world, &plan)
                 : dpt_error(DPT_EINVAL, "job %s does not run under mpirun", dpt_job_name(job->id));
        if (rc) {
            plan.mpi_threads = 1;
            plan.role = NULL;
        }
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? dpt_last_error() : "");
    dpt_comm_mpi_options_t mo;
    dpt__launch_options(rc ? NULL : c, &mo);
    dpt__watchdog_t watch;
    dpt__launch_watchdog_start(&watch, l, o, mo.timeout_s);
    int jrc = dpt_comm_mpi_init(
        NULL, NULL, plan.mpi_threads > 1 ? DPT_COMM_MPI_SERIALIZED : DPT_COMM_MPI_FUNNELED);
    l->inited = jrc == 0;
    if (!jrc)
        jrc = dpt_comm_mpi_create(&l->comm, &mo);
    dpt__launch_watchdog_stop(&watch);
    if (jrc)
        return rc ? dpt_error(rc, "%s", msg) : jrc;
    if (rc)
        dpt_error(rc, "%s", msg);
    if ((rc = dpt__launch_starts(l, rc)) != 0)
        return rc;
    if ((rc = dpt__launch_agree(l, c, resume_dir)) != 0) {
        l->clean = 1; /* every rank saw the difference: they all leave cleanly */
        l->shared = l->rank > 0;
        return rc;
    }
    if (plan.role) {
        l->alone = 1;
        if (l->rank > 0)
            l->role = plan.role;
    }
    return DPT_OK;
}

int dpt__launch_role(dpt__launch_t *l, const dpt_config_t *c, const dpt_run_options_t *o)
{
    return l->role(c, l->comm, o ? o->stop_flag : NULL);
}

void dpt__launch_end(dpt__launch_t *l, int rc)
{
    /* A failed communicator may still be written by MPI, and one with
     * messages to a rank that did not answer may still be read: keep it. */
    if ((rc || l->lost) && l->inited && !l->clean)
        l->comm = NULL;
    dpt_comm_destroy(l->comm);
    l->comm = NULL;
    /* After a failure another rank may be stopped or still inside a
     * collective, and MPI_Finalize would wait for it: MPI stays initialized
     * and the caller ends the job (dpt_comm_mpi_abort; the command does). */
    if (l->inited && !l->lost && (rc == DPT_OK || l->clean))
        dpt_comm_mpi_finalize();
    l->inited = 0;
}
