/*
 * Internal to src/train/: what the config, the trainers and the run loop
 * share. Not installed. Tests include it for the hooks they need.
 */
#ifndef DPT_TRAIN_INTERNAL_H
#define DPT_TRAIN_INTERNAL_H

#include "core/tfrecord.h"
#include "dpt/checkpoint.h"
#include "dpt/dataset.h"
#include "dpt/nn.h"
#include "dpt/train.h"

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- config ---- */

/* One `env_config.NAME = value` entry of a config. name, value and where
 * share one allocation (name's). */
typedef struct dpt__env_entry {
    char *name;    /* NAME, without the prefix */
    char *value;   /* as given (trimmed) */
    char *where;   /* where it was given ("run.conf:3", "--set ..."), for messages */
    int given;     /* from a file or dpt_config_set; 0: a default the env filled in */
    int from_file; /* given in the file */
} dpt__env_entry_t;

/* The env_config entries: e [n] in name order, room for cap (config_env.c).
 * Zeroed is empty. */
typedef struct dpt__env_entries {
    dpt__env_entry_t *e;
    size_t n, cap;
} dpt__env_entries_t;

struct dpt_env_class;
void dpt__env_entries_free(dpt__env_entries_t *l);
/* A deep copy into dst (its old contents are not freed). DPT_ENOMEM. */
int dpt__env_entries_copy(dpt__env_entries_t *dst, const dpt__env_entries_t *src);
/* Index of entry `name`, or where it would go (*found = 0). */
size_t dpt__env_entries_find(const dpt__env_entries_t *l, const char *name, int *found);
/* Sets entry `name` (replacing one of that name) to copies of the strings. */
int dpt__env_entries_put(dpt__env_entries_t *l, const char *name, const char *value,
                         const char *where, int given, int from_file);
/* Removes the entries not marked as given (defaults an env filled in). */
void dpt__env_entries_drop_defaults(dpt__env_entries_t *l);
/* 1 for a NAME of 1..63 ASCII letters, digits and '_'. */
int dpt__env_entries_name_ok(const char *name);
/* 64-bit FNV-1a of "env_config.NAME=value\n" of each entry; 0 when empty. */
uint64_t dpt__env_entries_hash(const dpt__env_entries_t *l);
/* Checks every entry against cls (see dpt__config_env_class) and makes *out,
 * cls configured with them. */
int dpt__env_entries_configure(const dpt__env_entries_t *l, const struct dpt_env_class *cls,
                               struct dpt_env_class **out);
/* Adds an entry (given = 0) with the default of each parameter of cls that
 * has none. */
int dpt__env_entries_fill(dpt__env_entries_t *l, const struct dpt_env_class *cls);

/* Parses `text` into key k (type and range checked); `where` prefixes
 * messages ("file:3", "--set ..."). Does not mark the key as given. */
int dpt__config_assign(dpt_config_t *c, dpt_config_key_t k, const char *text, const char *where);
/* Reads config text (the "config" metadata of a checkpoint); `name`
 * prefixes messages. Keys count as given in a file, and as saved
 * (dpt__config_mark_saved). */
int dpt__config_load_text(dpt_config_t *c, const char *text, const char *name);
/* Marks every key given so far as read back from a run's own record
 * (config.conf, a checkpoint's config), which names every key of the job:
 * the rules that refuse a key set while the key that enables it is off
 * (config_rules.c) look only at what the user set since. */
void dpt__config_mark_saved(dpt_config_t *c);
/* 1 when the user gave key k (a config file, dpt_config_set, an override;
 * not a run's saved record) a value other than its default for the job (a
 * starter config of `dpt init` lists every key at its default). */
int dpt__config_user_set(const dpt_config_t *c, dpt_config_key_t k);
/* Copies every key given in `overrides` into dst, as given on the command
 * line (relative paths resolve against the working directory at the next
 * finalize). dst must be finalized again. */
int dpt__config_apply_overrides(dpt_config_t *dst, const dpt_config_t *overrides);
/* Parses a comma-separated list of sizes in [1, 1e6] ("64,64") from key k
 * into out (at most max); returns the count or DPT_EINVAL naming the key. */
int dpt__config_sizes(const dpt_config_t *c, dpt_config_key_t k, size_t *out, int max);

/* The env_config entries against cls (the env of the config's `env`): each
 * entry must name a parameter of cls and hold a valid value of it
 * (DPT_EINVAL naming where it was given, the key and the env); then *out is
 * cls configured with them (dpt_env_class_create; caller owns). */
int dpt__config_env_class(const dpt_config_t *c, const struct dpt_env_class *cls,
                          struct dpt_env_class **out);
/* Adds an entry holding the default of each parameter of cls that has none
 * (not marked as given); the config stays finalized. */
int dpt__config_env_fill(dpt_config_t *c, const struct dpt_env_class *cls);
/* 64-bit FNV-1a of the env_config entries ("env_config.NAME=value\n" in
 * name order); 0 when there are none or the job has no env. */
uint64_t dpt__config_env_hash(const dpt_config_t *c);
/* For the RL jobs: loads the config's env (built-in, or a plug-in: see
 * dpt__find_env), checks its env_config entries against the env's
 * parameters (dpt__config_env_class) and fills in the defaults of the
 * others (dpt__config_env_fill), so the config names every value the env
 * runs with. A no-op for other jobs. Errors: those of dpt__rl_find_env and
 * dpt__config_env_class. (src/train/rl_common.c) */
int dpt__config_resolve_env(dpt_config_t *c);

/* The rules between keys (config_rules.c): the generic ones, keyed on which
 * keys the config's job has, then the job's descriptor's check. DPT_EINVAL
 * naming the keys. */
int dpt__config_rules(const dpt_config_t *c);

/* reduction_order = invariant's rules for a job whose gradient step takes
 * `batch` rows (the key `batch_key`) over `devices` devices (the key
 * `devices_key`): towers ps or replicated and reduce_op avg where those
 * keys apply, whole chunks, a chunk per device. 0 when the order is fast. */
int dpt__config_reduction_check(const dpt_config_t *c, int64_t batch, const char *batch_key,
                                int64_t devices, const char *devices_key);
/* The jobs of a mask of DPT_JOBS_* bits, as text ("supervised, ppo"). */
void dpt__jobs_text(unsigned mask, char *buf, size_t n);

/* Most hidden layers a "hidden" or "policy_hidden" list may name. */
#define DPT__MAX_HIDDEN 8

/* Shorthands for trainers (c is a finalized config). */
#define DPT_CI(c, key) dpt_config_int((c), DPT_CFG_##key)
#define DPT_CF(c, key) dpt_config_float((c), DPT_CFG_##key)
#define DPT_CS(c, key) dpt_config_str((c), DPT_CFG_##key)

/* The variables of `vars` that the key frozen selects (dpt_vartable_select),
 * one flag each in *mask (malloc'd, the caller frees it); *mask is NULL
 * when none is frozen (the key empty or not the job's). Errors: DPT_EINVAL
 * "frozen: ..." naming the entry that matches no variable, DPT_ENOMEM. */
int dpt__train_frozen(const dpt_config_t *c, const dpt_vartable_t *vars, unsigned char **mask);

/* ---- files ---- */

/* Writes n bytes to path atomically: a temporary file beside it
 * ("NAME.tmp-PID"), fsync, rename, fsync of the directory. On failure the
 * old file is untouched and the temporary removed. DPT_EIO naming path. */
int dpt__write_file_atomic(const char *path, const void *data, size_t n);

/* The same, written piece by piece: open (a temporary beside path), any
 * number of writes, then commit (fsync, rename, fsync of the directory) or
 * abort (the temporary removed). A failed write or commit aborts by itself
 * and returns DPT_EIO naming path; the old file is untouched. */
typedef struct dpt__atomic_file {
    char path[4096];
    char tmp[4096 + 64];
    int fd;
} dpt__atomic_file_t;
int dpt__atomic_open(dpt__atomic_file_t *a, const char *path);
int dpt__atomic_write(dpt__atomic_file_t *a, const void *data, size_t n);
int dpt__atomic_commit(dpt__atomic_file_t *a);
void dpt__atomic_abort(dpt__atomic_file_t *a);
/* mkdir -p. DPT_EIO naming the path that could not be made. */
int dpt__mkdirs(const char *path);

/* The name part of a default run directory (runs/JOB-LABEL-TIME): the env
 * (a plug-in's file name without .so) or the dataset, made safe for a
 * file name. */
void dpt__run_label(const dpt_config_t *c, char *out, size_t n);

/* Removes the temporary files a killed write left in dir (names containing
 * ".tmp-"); returns how many were removed. */
int dpt__remove_temporaries(const char *dir);

/* ---- TensorBoard event files ---- */

/* The events file of one process's part of a run (rank 0), made at its
 * first write: events.out.tfevents.SECONDS.HOST.PID.N, whose first record
 * holds file_version "brain.Event:2"; then one Event per iteration with the
 * row's finite metrics as scalars (tags: the metrics' names), its step the
 * row's timesteps_total (RL) or training_iteration (supervised). */
typedef struct dpt__tb {
    int on;                /* 0 when tensorboard_dir = off, or once closed */
    int fd;                /* -1 until the first write */
    char dir[PATH_MAX];    /* where the file goes */
    char path[PATH_MAX];   /* the file ("" before the first write) */
    const char *step_name; /* static storage */
    dpt__tfbuf_t buf, summary;
} dpt__tb_t;

/* The directory of a run's events (tensorboard_dir, or run_dir when it is
 * empty) into out; 0 when tensorboard_dir = off, else 1. */
int dpt__tb_dir(const dpt_config_t *c, const char *run_dir, char *out, size_t n);
/* The metric whose value is the events' step for c's job. */
const char *dpt__tb_step_name(const dpt_config_t *c);
/* Prepares the events of a run: makes the directory when missing (nothing
 * when off). DPT_EINVAL (tensorboard_dir names a file), DPT_EIO naming the
 * directory. The file itself is made by the first write, so a start that
 * does no iteration leaves none. */
int dpt__tb_open(dpt__tb_t *tb, const dpt_config_t *c, const char *run_dir);
/* Appends one iteration's Event and writes it out (a no-op when off).
 * DPT_EIO naming the file and the system's reason, DPT_ENOMEM. */
int dpt__tb_write(dpt__tb_t *tb, const dpt_metric_t *metrics, size_t n);
/* Closes the file and frees the buffers. Safe twice. */
void dpt__tb_close(dpt__tb_t *tb);
/* For a resume from the checkpoint whose step (as dpt__tb_step_name) is
 * `last`: rewrites each events file of the run's events directory
 * atomically without the Events of later steps and without a record cut
 * short by a kill, so TensorBoard shows no step twice. */
int dpt__tb_truncate(const dpt_config_t *c, const char *run_dir, uint64_t last);

/* ---- metrics files ---- */

/* result.jsonl (one JSON object per iteration, '/' in names nests),
 * progress.csv (the same numbers; the first row fixes the columns) and the
 * TensorBoard events (above). */
typedef struct dpt__metrics {
    FILE *jsonl, *csv;
    int header_written;
    size_t ncols;
    const char *columns[DPT_TRAIN_MAX_METRICS + 8];
    dpt__tb_t tb;
} dpt__metrics_t;

/* Opens the files of the run in dir whose finalized config is c, appending
 * (resume: the rows of progress.csv then follow the columns of its header)
 * or creating them; the events go to a new file either way. On failure
 * every file is closed. */
int dpt__metrics_open(dpt__metrics_t *m, const char *dir, int append, const dpt_config_t *c);
void dpt__metrics_close(dpt__metrics_t *m);
/* Writes one row and flushes. Names must stay valid while m is open. */
int dpt__metrics_write(dpt__metrics_t *m, const dpt_metric_t *metrics, size_t n);
/* Keeps the complete lines whose training_iteration is at most
 * `iteration` in result.jsonl and progress.csv (rewritten atomically; a
 * cut-off last line is dropped), and the events up to the step of that
 * iteration (`timesteps` for RL jobs). */
int dpt__metrics_truncate(const char *dir, const dpt_config_t *c, uint64_t iteration,
                          uint64_t timesteps);

/* ---- run directories ---- */

/* Loads the newest checkpoint in dir/checkpoints that validates; corrupt
 * newer ones are reported through note (may be NULL) and skipped. *st is
 * NULL (and 0 returned) when there is none. */
int dpt__find_checkpoint(const char *dir, dpt_safetensors_t **st,
                         void (*note)(void *ctx, const char *text), void *ctx);

/* The checkpoint iterations in dir/checkpoints, newest first (*its is
 * malloc'ed; NULL with 0 when there are none). DPT_ENOMEM. */
int dpt__list_checkpoints(const char *dir, uint64_t **its, size_t *n);

/* ---- resume (resume.c) ---- */

/* The config of a resumed run: dir/config.conf, checked against the config
 * in the newest valid checkpoint (*st, NULL when the run stopped before its
 * first), with the overrides in `given` (may be NULL; only resumable keys
 * may differ). *cfg is the run's config (finalized), *saved the one in
 * config.conf; the caller owns the three. Corrupt checkpoints skipped are
 * reported through note. DPT_EINVAL naming the directory and the keys,
 * DPT_ENOENT, DPT_EFORMAT. */
int dpt__resume_config(const char *dir, const dpt_config_t *given, dpt_config_t **cfg,
                       dpt_safetensors_t **st, dpt_config_t **saved,
                       void (*note)(void *ctx, const char *text), void *ctx);
/* Appends one line per key whose value differs between saved and cfg to
 * dir/overrides.log ("resumed after iteration N: key = now (was before)").
 * DPT_EIO naming the file. */
int dpt__record_overrides(const char *dir, const dpt_config_t *cfg, const dpt_config_t *saved,
                          uint64_t iteration);

/* ---- processes ---- */

/* The size of the MPI world this process was started in and its rank, from
 * the launcher's environment (Open MPI's OMPI_COMM_WORLD_*, PMI_* of MPICH
 * and Slurm): 1 and 0 when not started by a launcher. */
int dpt__mpi_world_size(void);
int dpt__mpi_rank(void);

/* ---- jobs ---- */

/* The part of a rank that is not a trainer (APPO's samplers, the
 * sync-replicas services and workers above rank 0): runs until rank 0 ends
 * the run (DPT_OK) or fails. comm is the run's process-level communicator
 * (borrowed); stop_flag the run's stop request (may be NULL). */
typedef int (*dpt__role_fn)(const dpt_config_t *c, dpt_comm_t *comm,
                            const volatile sig_atomic_t *stop_flag);

/* How a job runs under mpirun, filled by its plan(). Zeroed: every rank is
 * a trainer and only the thread that calls the trainer calls MPI. */
typedef struct dpt__mpi_plan {
    /* Threads that call MPI (one at a time): 1 = the caller's thread alone
     * (MPI_THREAD_FUNNELED), more = MPI_THREAD_SERIALIZED. */
    int mpi_threads;
    /* NULL: every rank runs the trainer. Otherwise rank 0 runs the trainer
     * and the loop alone (its stop requests are not agreed) and every other
     * rank runs role. */
    dpt__role_fn role;
} dpt__mpi_plan_t;

/* A job: its trainer ops and every decision that depends on the job, so
 * that the config's generic rules (config.c), the run (run.c, launch.c) and
 * dpt_train_seeds (seeds.c) name no job. Each is defined beside its
 * trainer's ops; the table in job.c lists them. Hooks may be NULL. */
typedef struct dpt__job {
    dpt_job_t id;
    /* The config's `job` value and a one-line summary, for a job outside
     * DPT_JOB_LIST (a test's): the listed jobs' come from the list. */
    const char *name, *summary;
    const dpt_trainer_ops_t *ops;
    /* The job whose keys (applicability) and per-job defaults this one
     * takes: itself for the jobs of DPT_JOB_LIST. */
    dpt_job_t keys;
    /* Rules between keys, on a config whose keys all hold a value (called
     * by dpt_config_finalize after the generic rules). DPT_EINVAL naming
     * the keys. */
    int (*check)(const dpt_config_t *c);
    /* Defaults that depend on other keys, set after the table's (a key the
     * user gave is left alone). */
    int (*fill)(dpt_config_t *c);
    /* A key given that does not apply to the job: DPT_EINVAL with the job's
     * own reason, or 0 for the generic message. */
    int (*refuse_key)(const dpt_config_t *c, dpt_config_key_t k);
    /* Threads one run of c keeps busy (dpt_train_seeds divides the cores by
     * it); NULL = 1. */
    size_t (*threads)(const dpt_config_t *c);
    /* Under mpirun with `world` ranks: DPT_EINVAL with the reason when the
     * job does not run there, else fills *p. NULL = not under mpirun. */
    int (*plan)(const dpt_config_t *c, int world, dpt__mpi_plan_t *p);
    /* Rank 0 of a plan with a role, after the loop: ends the other ranks'
     * part (their protocol's STOP and goodbye) on the trainer's self.
     * DPT_ETIMEDOUT naming the ranks that did not answer. NULL: destroy
     * ends them. */
    int (*end)(void *self);
    /* 1: a rank that does not answer `end` once the run's work is done is
     * abandoned with a warning, and the run keeps its outcome (its files
     * are complete); 0: it fails the run (after a stop request it is a
     * warning either way). */
    int end_abandons;
} dpt__job_t;

extern const dpt__job_t dpt__supervised_job;
extern const dpt__job_t dpt__ppo_job;
extern const dpt__job_t dpt__ddppo_job;
extern const dpt__job_t dpt__appo_job;
extern const dpt__job_t dpt__impala_job;
extern const dpt__job_t dpt__sync_replicas_job;

/* The job with id `job` (static storage); NULL when there is none. */
const dpt__job_t *dpt__job_get(dpt_job_t job);
/* The bit of the keys of `job` in a key's DPT_JOBS_* mask: a job outside
 * DPT_JOB_LIST takes a listed job's keys (its descriptor's `keys`); 0 for an
 * unknown job. */
unsigned dpt__job_keys_bit(dpt_job_t job);
/* The job of a name (the listed jobs, then a registered test job); -1 when
 * none has it. */
int dpt__job_find(const char *name);
/* ---- launch (launch.c) ---- */

/* This process's part of a run: its rank in the world the launcher made
 * (0 of 1 without one), the ranks' communicator once joined, and its role. */
typedef struct dpt__launch {
    int rank, world;
    dpt_comm_t *comm;  /* the ranks' communicator (world > 1, once joined) */
    int inited;        /* this launch initialized MPI */
    int clean;         /* every rank failed the same way: MPI may be finalized */
    int alone;         /* rank 0 runs the trainer and the loop alone */
    int lost;          /* a rank did not answer the end: MPI_Finalize would wait for it */
    dpt__role_fn role; /* this rank's part when it is not a trainer, else NULL */
    int shared;        /* this rank's failure is reported by rank 0 */
} dpt__launch_t;

/* Reads rank and world from the launcher's environment. */
void dpt__launch_init(dpt__launch_t *l);
/* Under a launcher (world > 1): the job's plan (DPT_EINVAL with its reason
 * when it does not run there), MPI at the plan's thread level, the ranks'
 * communicator, then how every rank started (start_rc: this rank's failure
 * so far, c NULL then) and the agreement of every rank on the config, build
 * and resume_dir (DPT_EINVAL naming what differs). A failure of any rank
 * fails every rank; l->shared marks those that rank 0 reports. A stall
 * while joining is reported through o->on_stall past comm_timeout_s. For one
 * process: start_rc. */
int dpt__launch_join(dpt__launch_t *l, const dpt_config_t *c, const char *resume_dir,
                     const dpt_run_options_t *o, int start_rc);
/* Runs this rank's role (l->role must be set) until rank 0 ends the run. */
int dpt__launch_role(dpt__launch_t *l, const dpt_config_t *c, const dpt_run_options_t *o);
/* Releases the communicator and finalizes MPI after a success or a failure
 * every rank saw (rc is the run's status); after another failure, or when
 * a rank did not answer the end (lost), MPI stays initialized for the
 * caller to abort the job. */
void dpt__launch_end(dpt__launch_t *l, int rc);

/* The job's end hook (dpt__job_t.end) on t's trainer; 0 without one. */
int dpt__trainer_end(dpt_trainer_t *t);
/* The job's end_abandons (dpt__job_t) for t's trainer. */
int dpt__trainer_end_abandons(const dpt_trainer_t *t);

/* Test hook: registers one more job, whose id must be DPT_JOB_COUNT (not in
 * DPT_JOB_LIST, the enum or --help) and whose name is new; NULL removes it.
 * DPT_EINVAL otherwise. Not thread-safe: call before any config names it. */
int dpt__job_register_test(const dpt__job_t *job);

/* A built-in env by name, or a plug-in by path (a shared library exporting
 * DPT_ENV_PLUGIN_SYMBOL whose DPT_ENV_PLUGIN_ABI_SYMBOL matches
 * DPT_ENV_ABI_VERSION, kept loaded for the life of the process); NULL with a
 * DPT_EINVAL/DPT_ENOENT message otherwise. */
const struct dpt_env_class *dpt__find_env(const char *name);

/* Metadata every RL trainer's describe() adds: env name, its env_config
 * values, obs_dim, action kind and size, policy layer sizes. */
struct dpt_policy;
int dpt__describe_policy(dpt_safetensors_writer_t *w, const struct dpt_policy *policy,
                         const dpt_config_t *cfg);

/* sync_replicas under mpirun (src/train/trainer_sync_replicas.c): the
 * config's rules for a world of `world` ranks (the first num_ps ranks the
 * services, every other rank one worker: num_ps + total_num_replicas =
 * world; grad_clip 0 with several services), DPT_EINVAL otherwise; and the
 * whole part of a rank other than 0: a service of the variables placed on
 * it, or a worker computing gradients, until rank 0 says the run is over
 * (DPT_OK; also for a worker whose own gradient step failed: it told rank
 * 0, which goes on without it) or fails (silence past comm_timeout_s). */
int dpt__sr_mpi_check(const dpt_config_t *c, int world);
int dpt__sr_mpi_worker(const dpt_config_t *c, dpt_comm_t *comm,
                       const volatile sig_atomic_t *stop_flag);

#endif
